//! The one door for a git call that must run nothing the repository names:
//! [`safe_git`], a [`GitCall`] with every filter and merge driver the
//! configuration defines disabled, and [`disabled_filters`], the same for
//! the progress reading's `git status`. The drivers' names come from `git
//! config` itself, asked only when a configuration file may define one.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{GitCall, GitError, GitPlace};

/// Why the drivers to disable could not be listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DriverError {
    /// A driver's name a `-c` option cannot carry (one holding `=`), or no
    /// repository git can read: git is not run there at all.
    NotUsable,
    /// git did not list them within the deadline, or failed.
    Failed,
}

/// A `git` command for any caller outside this module (the driver's
/// worktrees, the merge queue, the remote's records): run from `root` in the
/// folders ralph settled ([`GitPlace`]) with the same fixed
/// configuration as every call ([`GitCall::find`]: no fsmonitor, no
/// hooks, no signing, no system configuration, no lazy fetch, no prompt)
/// and every filter and merge driver the configuration defines disabled,
/// so that nothing the agent writes into `.git` or an attributes file
/// runs. `Err` says why no such command can be had (no repository ralph
/// can settle, git does not answer within `timeout`, or a driver's name
/// cannot be disabled); the caller then runs no git.
pub fn safe_git(root: &Path, timeout: Duration) -> Result<GitCall, GitError> {
    GitPlace::find(root)?;
    let filters = disabled_filters(root, Instant::now() + timeout).map_err(|e| match e {
        DriverError::NotUsable => GitError::Unsafe(format!(
            "the git configuration of {} defines a filter driver whose name cannot be disabled \
             (it holds `=`), or names no repository git can read",
            root.display()
        )),
        DriverError::Failed => GitError::Unsafe(format!(
            "git did not list the filter drivers of {} within {} s",
            root.display(),
            timeout.as_secs()
        )),
    })?;
    let merges = disabled_merge_drivers(root, Instant::now() + timeout).map_err(|e| match e {
        DriverError::NotUsable => GitError::Unsafe(format!(
            "the git configuration of {} defines a merge driver whose name cannot be disabled \
             (it holds `=`), or names no repository git can read",
            root.display()
        )),
        DriverError::Failed => GitError::Unsafe(format!(
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
pub(crate) fn disabled_merge_drivers(
    root: &Path,
    deadline: Instant,
) -> Result<Vec<OsString>, DriverError> {
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
pub(crate) fn configuration_may_name_merge_drivers(
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
pub(crate) fn disabled_filters(
    root: &Path,
    deadline: Instant,
) -> Result<Vec<OsString>, DriverError> {
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
) -> Result<Vec<OsString>, DriverError> {
    let command = GitCall::find(root)
        .map_err(|_| DriverError::NotUsable)?
        .args([
            "config",
            "--null",
            "--name-only",
            "--includes",
            "--get-regexp",
            regexp,
        ]);
    let timeout = deadline.saturating_duration_since(Instant::now());
    let keys = match command.timeout(timeout).run() {
        Ok(out) => out.stdout,
        // No such key at all.
        Err(GitError::Failed {
            status: Some(1), ..
        }) => return Ok(Vec::new()),
        Err(
            GitError::CannotStart(_)
            | GitError::NotARepository { .. }
            | GitError::Failed {
                status: Some(128), ..
            },
        ) => return Err(DriverError::NotUsable),
        Err(_) => return Err(DriverError::Failed),
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
            return Err(DriverError::NotUsable);
        }
        names.push(os_string(name).ok_or(DriverError::NotUsable)?);
    }
    Ok(names)
}

/// Most bytes of a configuration file [`configuration_may_name_filters`]
/// reads; a longer one is left to `git config`.
pub(crate) const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// False only when no configuration file `git status` can read from `root`
/// defines a filter driver, which spares the `git config` process (about
/// 2 ms) at almost every full check. A filter driver is a `filter.<name>.*`
/// key, so its file holds the word `filter` (section names have no escapes
/// and are case-insensitive); an include can bring in any file, and its file
/// holds `include`. The files are listed by [`configuration_files`]; any of
/// them that cannot be read, is not a regular file or is large counts as
/// naming a filter, and so does anything that list cannot settle. `env` is
/// the process environment (a parameter for the tests).
pub(crate) fn configuration_may_name_filters(
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
/// - not the system-wide one, which [`GitCall`] turns off.
///
/// `None` for a `.git` file (a worktree or a submodule, whose configuration
/// lies elsewhere), a `.git` folder with a `commondir` (the same), a folder
/// holding `HEAD` (it may be a bare repository, whose `config` sits beside
/// it), configuration passed in the environment, no `HOME`, or a platform
/// other than Unix.
pub(crate) fn configuration_files(
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
fn os_string(bytes: &[u8]) -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    Some(OsString::from_vec(bytes.to_vec()))
}

#[cfg(not(unix))]
fn os_string(bytes: &[u8]) -> Option<OsString> {
    String::from_utf8(bytes.to_vec()).ok().map(OsString::from)
}
