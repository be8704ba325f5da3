//! The git side of a progress reading: `git status` of the project's folder with
//! a fixed safe configuration (no program the agent could name ever runs), its
//! listing parsed, and git's process waited for within the reading's deadline.

use super::*;
use crate::own_git::drivers::DriverError;
pub(super) use crate::own_git::drivers::disabled_filters;
#[cfg(test)]
pub(super) use crate::own_git::drivers::{
    configuration_may_name_filters, configuration_may_name_merge_drivers,
};
use crate::own_git::{GitCall, GitError};

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
        Err(DriverError::NotUsable) => return GitListing::NotUsable,
        Err(DriverError::Failed) => return GitListing::Failed,
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
