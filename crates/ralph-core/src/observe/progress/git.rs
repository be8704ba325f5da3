//! The git side of a progress reading: `git status` of the project's folder with
//! a fixed safe configuration (no program the agent could name ever runs), its
//! listing parsed, and git's process waited for within the reading's deadline.

use super::*;
use crate::own_git::{self, GitCall, GitError};

/// The nearest folder, `root` or above, holding `.git` (a folder, or a file
/// for worktrees and submodules): where git will find the repository, and
/// what the paths it prints are relative to. Only then is git worth starting.
pub(super) fn repository_top(root: &Path) -> Option<PathBuf> {
    root.ancestors()
        .find(|dir| dir.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

pub(super) enum GitListing {
    Listed(Listing),
    /// Not a repository after all, no git, or a folder the repository
    /// ignores: git can say nothing about it.
    NotUsable,
    Failed,
}

/// `git` run from `root` with the fixed configuration every call gets
/// ([`GitCall::new`]: the folders ralph found itself, no fsmonitor, no
/// hook, no signing, no system configuration, no lazy fetch, no prompt),
/// so that nothing the repository's or the user's configuration says can
/// make it start another program (the agent can edit `.git/config`,
/// `.gitattributes` and `.git/info/attributes`, and write a `commondir`
/// that leads git elsewhere; the hook must never run a program it named).
/// `None` for a folder in no repository ralph can settle (none, or one
/// whose `commondir` leads git elsewhere): no git runs there.
///
/// Filter drivers need their names: [`disabled_filters`]. `git status` also
/// gets `--ignore-submodules=dirty`: it would otherwise run `git status` in
/// each submodule, with that submodule's own configuration.
pub(super) fn git_command(root: &Path) -> Option<GitCall> {
    GitCall::find(root).ok()
}

/// A `git` command for any caller outside this module (the driver's
/// worktrees, the merge queue, the remote's records): run from `root` in the
/// folders ralph settled ([`own_git::GitPlace`]) with the same fixed
/// configuration as the hook's calls ([`git_command`]: no fsmonitor, no
/// hooks, no signing, no system configuration, no lazy fetch, no prompt)
/// and every filter and merge driver the configuration defines disabled,
/// so that nothing the agent writes into `.git` or an attributes file
/// runs. `Err` says why no such command can be had (no repository ralph
/// can settle, git does not answer within `timeout`, or a driver's name
/// cannot be disabled); the caller then runs no git.
pub fn safe_git(root: &Path, timeout: Duration) -> Result<GitCall, GitError> {
    own_git::GitPlace::find(root)?;
    let filters = disabled_filters(root, Instant::now() + timeout).map_err(|e| match e {
        GitListing::NotUsable => GitError::Unsafe(format!(
            "the git configuration of {} defines a filter driver whose name cannot be disabled \
             (it holds `=`), or names no repository git can read",
            root.display()
        )),
        _ => GitError::Unsafe(format!(
            "git did not list the filter drivers of {} within {} s",
            root.display(),
            timeout.as_secs()
        )),
    })?;
    let merges = disabled_merge_drivers(root, Instant::now() + timeout).map_err(|e| match e {
        GitListing::NotUsable => GitError::Unsafe(format!(
            "the git configuration of {} defines a merge driver whose name cannot be disabled \
             (it holds `=`), or names no repository git can read",
            root.display()
        )),
        _ => GitError::Unsafe(format!(
            "git did not list the merge drivers of {} within {} s",
            root.display(),
            timeout.as_secs()
        )),
    })?;
    let mut call = GitCall::find(root)?;
    for setting in filters.into_iter().chain(merges) {
        call = call.config(setting);
    }
    Ok(call)
}

/// The `-c` settings that turn every merge driver the configuration defines
/// (`merge.<name>.driver`, named by a `merge=` attribute) into `false`: a
/// rebase or merge of a file with such an attribute then runs no program
/// the agent wrote and stops as a conflict (an empty command would succeed
/// and keep one side silently). The built-in drivers (`text`, `binary`,
/// `union`) run no program. Skipped when no configuration file can define
/// one ([`configuration_may_name_merge_drivers`]); `Err` as
/// [`disabled_filters`].
pub(super) fn disabled_merge_drivers(
    root: &Path,
    deadline: Instant,
) -> Result<Vec<OsString>, GitListing> {
    if !configuration_may_name_merge_drivers(root, &|name| std::env::var_os(name)) {
        return Ok(Vec::new());
    }
    let mut options = Vec::new();
    for name in driver_names(root, deadline, "merge", r"^merge\..*\.")? {
        let mut option = OsString::from("merge.");
        option.push(&name);
        option.push(".driver=false");
        options.push(option);
    }
    Ok(options)
}

/// False only when no configuration file git could read from `root` holds
/// a merge driver's section (`[merge "<name>"]`, or the old `[merge.<name>]`)
/// or an include; as [`configuration_may_name_filters`] for the rest.
pub(super) fn configuration_may_name_merge_drivers(
    root: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> bool {
    configuration_may_hold(root, env, &|lower: &[u8]| {
        let packed: Vec<u8> = lower
            .iter()
            .copied()
            .filter(|b| !b.is_ascii_whitespace())
            .collect();
        [&b"[merge\""[..], b"[merge.", b"include"]
            .iter()
            .any(|word| packed.windows(word.len()).any(|w| w == *word))
    })
}

/// The `-c` settings that disable every filter driver the configuration
/// defines (`filter.<name>.clean`, `.smudge`, `.process`), with includes
/// followed: `git status` runs a file's clean filter when the file's stamp
/// changed, for a driver named by a `filter` attribute in any
/// `.gitattributes`, `.git/info/attributes` or the user's attributes file.
/// An empty command is no filter (convert.c, `apply_filter`), and
/// `required=false` keeps git from failing for want of one. The names come
/// from `git config` itself, so they are the ones `git status` reads a moment
/// later; when no configuration file can define a driver
/// ([`configuration_may_name_filters`]), `git config` is not run at all.
///
/// `Err(NotUsable)` for a name that a `-c` option cannot carry (one holding
/// `=`, which git splits the option at): git is then not run at all.
pub(super) fn disabled_filters(
    root: &Path,
    deadline: Instant,
) -> Result<Vec<OsString>, GitListing> {
    if !configuration_may_name_filters(root, &|name| std::env::var_os(name)) {
        return Ok(Vec::new());
    }
    let mut options = Vec::new();
    for name in driver_names(root, deadline, "filter", r"^filter\.")? {
        for setting in [".clean=", ".smudge=", ".process=", ".required=false"] {
            let mut option = OsString::from("filter.");
            option.push(&name);
            option.push(setting);
            options.push(option);
        }
    }
    Ok(options)
}

/// The names of the drivers of `section` (`filter`, `merge`) that the
/// configuration defines, each once: the `<name>` of every
/// `<section>.<name>.<variable>` key that `git config --get-regexp
/// <regexp>` lists, includes followed (a name may hold dots, or be empty).
/// `Err(NotUsable)` for a name that a `-c` option cannot carry (one holding
/// `=`, which git splits the option at) or that is not text.
fn driver_names(
    root: &Path,
    deadline: Instant,
    section: &str,
    regexp: &str,
) -> Result<Vec<OsString>, GitListing> {
    let command = git_command(root).ok_or(GitListing::NotUsable)?.args([
        "config",
        "--null",
        "--name-only",
        "--includes",
        "--get-regexp",
        regexp,
    ]);
    let keys = match run_git(command, deadline) {
        GitRun::Output(bytes) => bytes,
        GitRun::Exited(1) => return Ok(Vec::new()), // no such key at all
        GitRun::Exited(128) | GitRun::NotUsable => return Err(GitListing::NotUsable),
        GitRun::Exited(_) | GitRun::Failed => return Err(GitListing::Failed),
    };
    let prefix = format!("{section}.");
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    for key in keys.split(|&b| b == 0) {
        let Some(rest) = key.strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let Some(dot) = rest.iter().rposition(|&b| b == b'.') else {
            continue; // `<section>.<variable>`: a setting, no driver
        };
        let name = &rest[..dot];
        if !seen.insert(name) {
            continue;
        }
        if name.contains(&b'=') {
            return Err(GitListing::NotUsable);
        }
        names.push(os_string(name).ok_or(GitListing::NotUsable)?);
    }
    Ok(names)
}

/// Most bytes of a configuration file [`configuration_may_name_filters`]
/// reads; a longer one is left to `git config`.
pub(super) const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// False only when no configuration file `git status` can read from `root`
/// defines a filter driver, which spares the `git config` process (about
/// 2 ms) at almost every full check. A filter driver is a `filter.<name>.*`
/// key, so its file holds the word `filter` (section names have no escapes
/// and are case-insensitive); an include can bring in any file, and its file
/// holds `include`. The files are listed by [`configuration_files`]; any of
/// them that cannot be read, is not a regular file or is large counts as
/// naming a filter, and so does anything that list cannot settle. `env` is
/// the process environment (a parameter for the tests).
pub(super) fn configuration_may_name_filters(
    root: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> bool {
    configuration_may_hold(root, env, &|lower: &[u8]| {
        [&b"filter"[..], b"include"]
            .iter()
            .any(|word| lower.windows(word.len()).any(|w| w == *word))
    })
}

/// Whether any configuration file git could read from `root` (lowercased)
/// satisfies `holds`; true when that cannot be settled (a file unreadable,
/// not regular or large, or a list [`configuration_files`] cannot give).
fn configuration_may_hold(
    root: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
    holds: &dyn Fn(&[u8]) -> bool,
) -> bool {
    let Some(files) = configuration_files(root, env) else {
        return true;
    };
    files.iter().any(
        |file| match crate::files::read_bounded(file, MAX_CONFIG_BYTES) {
            Ok(crate::files::Bounded::Missing) => false,
            Ok(crate::files::Bounded::Bytes(bytes)) => holds(&bytes.to_ascii_lowercase()),
            Ok(crate::files::Bounded::TooLarge) | Err(_) => true,
        },
    )
}

/// Every configuration file git run from `root` could read, or `None` when
/// that cannot be known without git (then `git config` is asked):
///
/// - the user's: `$GIT_CONFIG_GLOBAL` when set, else
///   `$XDG_CONFIG_HOME/git/config` (or `~/.config/git/config`) and
///   `~/.gitconfig`;
/// - the repository's, `config` and `config.worktree`, of every `.git`
///   folder in `root` and above: git takes the first one that is a valid
///   repository, which is git's judgement, so all are listed;
/// - not the system-wide one, which [`git_command`] turns off.
///
/// `None` for a `.git` file (a worktree or a submodule, whose configuration
/// lies elsewhere), a `.git` folder with a `commondir` (the same), a folder
/// holding `HEAD` (it may be a bare repository, whose `config` sits beside
/// it), configuration passed in the environment, no `HOME`, or a platform
/// other than Unix.
pub(super) fn configuration_files(
    root: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Option<Vec<PathBuf>> {
    if !cfg!(unix) {
        return None;
    }
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if set("GIT_CONFIG_PARAMETERS").is_some() || set("GIT_CONFIG_COUNT").is_some() {
        return None;
    }
    let mut files = Vec::new();
    if let Some(global) = env("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(global));
    } else {
        let home = PathBuf::from(set("HOME")?);
        match set("XDG_CONFIG_HOME") {
            Some(xdg) => files.push(PathBuf::from(xdg).join("git").join("config")),
            None => files.push(home.join(".config").join("git").join("config")),
        }
        files.push(home.join(".gitconfig"));
    }
    for dir in root.ancestors() {
        if dir.join("HEAD").symlink_metadata().is_ok() {
            return None;
        }
        let git_dir = dir.join(".git");
        match fs::metadata(&git_dir) {
            Ok(meta) if meta.is_dir() => {
                if git_dir.join("commondir").symlink_metadata().is_ok() {
                    return None;
                }
                files.push(git_dir.join("config"));
                files.push(git_dir.join("config.worktree"));
            }
            Ok(_) => return None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    Some(files)
}

/// Bytes git printed, as an argument to give back to it.
#[cfg(unix)]
pub(super) fn os_string(bytes: &[u8]) -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    Some(OsString::from_vec(bytes.to_vec()))
}

#[cfg(not(unix))]
pub(super) fn os_string(bytes: &[u8]) -> Option<OsString> {
    String::from_utf8(bytes.to_vec()).ok().map(OsString::from)
}

/// `git status` of the project's folder, with [`git_command`]'s
/// configuration and every filter driver disabled ([`disabled_filters`]);
/// both git calls share one [`GIT_TIMEOUT`].
///
/// - `GIT_OPTIONAL_LOCKS=0`: git never takes `index.lock` for the hook, so a
///   git command of the agent or the person running at that moment cannot
///   fail because of it, and the hook never rewrites the person's index. The
///   price: no refreshed index and no untracked cache is written back. On a
///   100,000-file repository the walk for untracked files took 105-170 ms of
///   a 440-520 ms `git status`, and 3-40 ms with an untracked cache; but
///   keeping that cache up to date meant writing the 9 MB index (40-55 ms,
///   under `index.lock`) at every stop whose folders had changed, and it
///   relies on folder mtimes, which not every filesystem keeps. So the hook
///   does not turn the cache on; one the person keeps (with
///   `status.showUntrackedFiles=all`, as `--untracked-files=all` needs) is
///   still read.
/// - `--ignore-submodules=dirty`: a submodule counts when its HEAD moves,
///   not for edits inside it that are not committed there.
/// - A project at the top of its repository is listed without a pathspec
///   (git ignores the untracked cache when one is given); a project in a
///   subfolder with the pathspec `.` (its own folder only), which also spares
///   git the rest of the repository.
pub(super) fn git_listing(root: &Path, top: &Path) -> GitListing {
    let Ok(prefix) = root.strip_prefix(top) else {
        return GitListing::Failed;
    };
    let mut prefix = path_bytes(prefix);
    if !prefix.is_empty() {
        prefix.push(b'/');
    }
    let deadline = Instant::now() + GIT_TIMEOUT;
    let filters = match disabled_filters(root, deadline) {
        Ok(filters) => filters,
        Err(listing) => return listing,
    };
    let Some(mut command) = git_command(root) else {
        return GitListing::NotUsable;
    };
    for setting in filters {
        command = command.config(setting);
    }
    command = command.args([
        "-c",
        "core.quotepath=off",
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        "--no-renames",
        "--ignore-submodules=dirty",
    ]);
    if !prefix.is_empty() {
        // A folder the repository ignores as a whole shows as one `!` line.
        command = command.args(["--ignored=matching", "--", "."]);
    }
    let bytes = match run_git(command, deadline) {
        GitRun::Output(bytes) => bytes,
        GitRun::Exited(128) | GitRun::NotUsable => return GitListing::NotUsable,
        GitRun::Exited(_) | GitRun::Failed => return GitListing::Failed,
    };
    let mut listing = parse_status(root, &prefix, &bytes);
    if let GitListing::Listed(listing) = &mut listing {
        listing.subfolder = !prefix.is_empty();
    }
    listing
}

/// What `git status` names HEAD before the first commit.
pub(super) const INITIAL: &str = "(initial)";

/// A full commit id (SHA-1 or SHA-256): nothing else is ever given to git.
pub(super) fn is_commit_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the commits `old` and `new` differ inside the project's folder
/// (the whole tree for a project at the top of its repository). A commit
/// git cannot read (history rewritten and pruned) counts as a change.
pub(super) fn git_tree_changed(root: &Path, old: &str, new: &str, subfolder: bool) -> bool {
    // Two trees compared by object id: no file content is read, so no
    // filter, textconv or external diff could apply (and the last two are
    // off in diff-tree unless asked for; said again here).
    let Some(mut command) = git_command(root) else {
        return true;
    };
    command = command.args([
        "diff-tree",
        "--quiet",
        "--no-ext-diff",
        "--no-textconv",
        "-r",
        old,
        new,
    ]);
    if subfolder {
        command = command.args(["--", "."]);
    }
    !matches!(
        run_git(command, Instant::now() + GIT_TIMEOUT),
        GitRun::Output(_)
    )
}

/// Reads `git status --porcelain=v2 -z` output: HEAD, and each entry below
/// `prefix` with its file's stamp now.
pub(super) fn parse_status(root: &Path, prefix: &[u8], status: &[u8]) -> GitListing {
    let mut listing = Listing::new(Method::Git);
    let mut records = status.split(|&b| b == 0);
    while let Some(record) = records.next() {
        if let Some(oid) = record.strip_prefix(b"# branch.oid ") {
            listing.head = Some(String::from_utf8_lossy(oid).into_owned());
            continue;
        }
        let fields = |n: usize| record.splitn(n, |&b| b == b' ').nth(n - 1);
        let path = match record.first() {
            Some(b'1') => fields(9),
            Some(b'2') => {
                records.next(); // the rename's original path
                fields(10)
            }
            Some(b'u') => fields(11),
            Some(b'?') => record.get(2..),
            Some(b'!') => {
                // An ignored folder is printed with its trailing `/`.
                let ignored = record.get(2..).unwrap_or_default();
                if ignored.ends_with(b"/") && prefix.starts_with(ignored) {
                    return GitListing::NotUsable;
                }
                continue;
            }
            _ => continue,
        };
        let Some(path) = path else { continue };
        let Some(relative) = path.strip_prefix(prefix) else {
            // Not below the project folder: git resolved the repository
            // differently than expected, so nothing here can be trusted.
            return GitListing::Failed;
        };
        if relative.is_empty() || under_own_dir(relative) {
            continue;
        }
        let key = key_of(relative);
        listing.add(relative, stamp_now(root, &key));
    }
    if listing.head.is_none() {
        return GitListing::Failed;
    }
    GitListing::Listed(listing)
}

pub(super) enum GitRun {
    /// Exit 0, and everything git printed.
    Output(Vec<u8>),
    /// Exited with this other code.
    Exited(i32),
    /// Cannot be started (no git on this machine).
    NotUsable,
    /// Killed at the deadline, by a signal, or its output never ended.
    Failed,
}

/// Runs `command` (git) until `deadline` ([`GitCall::run`]: a process group
/// of its own, killed whole at the deadline and again once git has exited,
/// whatever it left), as the progress reading counts it.
pub(super) fn run_git(command: GitCall, deadline: Instant) -> GitRun {
    let timeout = deadline.saturating_duration_since(Instant::now());
    match command.timeout(timeout).run() {
        Ok(out) => GitRun::Output(out.stdout),
        Err(GitError::CannotStart(_)) => GitRun::NotUsable,
        Err(GitError::NotARepository { .. }) => GitRun::Exited(128),
        Err(GitError::Failed {
            status: Some(code), ..
        }) => GitRun::Exited(code),
        Err(_) => GitRun::Failed,
    }
}
