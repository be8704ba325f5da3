//! ralph's own git: the one place every git command ralph runs gets its
//! folders and its fixed configuration from.
//!
//! The agent can write most of `.git` (2.1.330's sandbox keeps only
//! `.git/config` and `.git/hooks` read-only, and without the sandbox it can
//! write everything): a `.git/commondir`, a worktree's `.git` file, its
//! `gitdir` or `commondir` would lead git to a folder whose configuration
//! the agent wrote. So ralph never lets git find its repository:
//! [`GitPlace::find`] settles `GIT_DIR`, `GIT_COMMON_DIR` and
//! `GIT_WORK_TREE` from the checkout's real `.git` folder and, for a
//! worktree ralph made under `.claude/worktrees/<name>`, its record
//! `.git/worktrees/<name>` (the id ralph checked when it made it), and
//! [`GitCall`] (the one runner of every git ralph runs, [`runner`]) passes
//! them with the configuration that turns off every program the repository
//! could name ([`FIXED_CONFIG`]). What the agent
//! changed among those files meanwhile is [`record`]'s business, and the
//! lock files it left [`locks`]'.

pub mod drivers;
pub mod locks;
pub mod record;
pub mod runner;

pub use drivers::safe_git;
pub use runner::{GitCall, GitError, GitOutput, SshCommand};

use std::path::{Path, PathBuf};

/// The folder (relative to a project) holding the worktrees ralph makes;
/// each worktree's git record is `<common folder>/worktrees/<its name>`.
pub const WORKTREES_DIR: &str = ".claude/worktrees";

/// The `-c` settings every git command of ralph's runs with, whatever the
/// repository's, the user's or an included configuration file says
/// (settings given on the command line win over every file):
///
/// - no fsmonitor hook or daemon, no hook at all;
/// - no signing and no signature check, and every signing program named
///   `false`: `commit.gpgSign` (a commit, a rebase's commits),
///   `tag.gpgSign`, `push.gpgSign`, `merge.verifySignatures` (a
///   fast-forward), `log.showSignature` (the queue's records are read with
///   `git log`), and `gpg.program`, `gpg.openpgp.program`,
///   `gpg.x509.program`, `gpg.ssh.program` besides;
/// - no automatic `gc` or `maintenance` after a commit (a prefetch task
///   would reach the remotes);
/// - no recursion into submodules (each has its own configuration).
///
/// Filter and merge drivers are named by the repository, so they are
/// turned off by name ([`safe_git`]).
pub const FIXED_CONFIG: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "push.gpgSign=false",
    "merge.verifySignatures=false",
    "log.showSignature=false",
    "gpg.program=false",
    "gpg.openpgp.program=false",
    "gpg.x509.program=false",
    "gpg.ssh.program=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "submodule.recurse=false",
];

/// Environment variables removed for every git call: those that would point
/// git at another repository, index or object store than the one ralph
/// found, an external diff program, and `GIT_CONFIG`, with which `git
/// config` would read that one file instead of what the other commands read.
pub const REMOVED_VARS: &[&str] = &[
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_EXTERNAL_DIFF",
    "GIT_CONFIG",
    "GIT_REPLACE_REF_BASE",
];

/// The folders one git command of ralph's works on, found by ralph itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GitPlace {
    /// `GIT_DIR`: the checkout's `.git`, or a worktree's record in it.
    pub git_dir: PathBuf,
    /// `GIT_COMMON_DIR`: the repository's shared folder (objects, refs,
    /// configuration), the main checkout's `.git`.
    pub common_dir: PathBuf,
    /// `GIT_WORK_TREE`: the checkout's or the worktree's top folder.
    pub work_tree: PathBuf,
}

/// Why no git folder could be settled for a folder: ralph then runs no git
/// there.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PlaceError {
    /// No `.git` in the folder or above it.
    #[error("{0} is in no git repository (no .git in it or above it)")]
    NoRepository(PathBuf),
    /// A worktree ralph made whose record in the common folder is missing.
    #[error(
        "{folder} is a worktree ralph made, and its record {record} is missing or not a folder: \
         `git worktree prune` drops what is left of it, and the next run makes it again"
    )]
    NoWorktreeRecord {
        /// The worktree.
        folder: PathBuf,
        /// Where its record should be.
        record: PathBuf,
    },
    /// A `commondir` that leads git away from the repository's own common
    /// folder: git reads its refs from there whatever `GIT_COMMON_DIR`
    /// says, so no git of ralph's runs until it is gone or put back.
    #[error(
        "{file} sends git to {names} instead of this repository's own folder (git never writes \
         that there; the agent may have): ralph runs no git in this repository until it is \
         removed (in the checkout's .git) or holds `../..` again (in a worktree's record)"
    )]
    Redirected {
        /// The file.
        file: PathBuf,
        /// What it names, printable and short.
        names: String,
    },
    /// A `.git` file (a checkout made by `git worktree add` or a submodule,
    /// not by ralph) that names no folder.
    #[error("{file} names no git folder ({why}): fix or remove it")]
    BadGitFile {
        /// The `.git` file.
        file: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

impl GitPlace {
    /// The folders git must use for `folder` (a checkout, a folder inside
    /// one, or a worktree ralph made):
    ///
    /// - in a checkout whose `.git` is a folder: that folder is both
    ///   `GIT_DIR` and `GIT_COMMON_DIR`;
    /// - in `<project>/.claude/worktrees/<name>`: `GIT_DIR` is
    ///   `<common>/worktrees/<name>` under the project's own common folder
    ///   (its `.git` file and `gitdir` are never read);
    /// - in a checkout whose `.git` is a file ralph did not make (the person's
    ///   own worktree or a submodule): the file's `gitdir:` and that folder's
    ///   `commondir`, as git reads them (a loop compares them with its start:
    ///   [`record`]).
    ///
    /// git's refs do not follow `GIT_COMMON_DIR` but the `commondir` file in
    /// `GIT_DIR` (git 2.47's files backend reads it itself), so a
    /// `commondir` in the checkout's `.git`, or one in a worktree's record
    /// that does not lead back to the common folder, is
    /// [`PlaceError::Redirected`]: no git of ralph's runs through it.
    pub fn find(folder: &Path) -> Result<GitPlace, PlaceError> {
        let place = GitPlace::locate(folder)?;
        if place.git_dir == place.common_dir {
            let planted = place.git_dir.join("commondir");
            if planted.symlink_metadata().is_ok() && place.is_checkouts_own() {
                return Err(redirected(&planted));
            }
        } else if place.is_ralphs() {
            let commondir = place.git_dir.join("commondir");
            let leads_back = pointer(&commondir)
                .is_some_and(|text| same_file(&place.git_dir.join(text), &place.common_dir));
            if !leads_back {
                return Err(redirected(&commondir));
            }
        }
        Ok(place)
    }

    /// [`GitPlace::find`] without refusing a `commondir` that leads
    /// elsewhere: where the repository's own folders are (what the
    /// client's deny rules and the records protect), never where git would
    /// be sent.
    pub fn locate(folder: &Path) -> Result<GitPlace, PlaceError> {
        let folder = absolute(folder);
        let top = folder
            .ancestors()
            .find(|dir| dir.join(".git").symlink_metadata().is_ok())
            .ok_or_else(|| PlaceError::NoRepository(folder.clone()))?;
        let dot_git = top.join(".git");
        if std::fs::metadata(&dot_git).is_ok_and(|m| m.is_dir()) {
            return Ok(GitPlace {
                git_dir: dot_git.clone(),
                common_dir: dot_git,
                work_tree: top.to_path_buf(),
            });
        }
        if let Some((project, name)) = ralphs_worktree(top) {
            let common = GitPlace::locate(project)?.common_dir;
            let record = common.join("worktrees").join(name);
            if !std::fs::symlink_metadata(&record).is_ok_and(|m| m.is_dir()) {
                return Err(PlaceError::NoWorktreeRecord {
                    folder: top.to_path_buf(),
                    record,
                });
            }
            return Ok(GitPlace {
                git_dir: record,
                common_dir: common,
                work_tree: top.to_path_buf(),
            });
        }
        persons_linked_checkout(top, &dot_git)
    }

    /// Whether this is a checkout whose `.git` is a folder (its own git
    /// folder, where a `commondir` never belongs).
    fn is_checkouts_own(&self) -> bool {
        self.git_dir == self.work_tree.join(".git")
    }

    /// Whether this is a worktree ralph made (`.claude/worktrees/<name>`,
    /// its record `<common>/worktrees/<name>`).
    fn is_ralphs(&self) -> bool {
        ralphs_worktree(&self.work_tree)
            .is_some_and(|(_, name)| self.git_dir == self.common_dir.join("worktrees").join(name))
    }

    /// The record of ralph's worktree `name` of this checkout (where git
    /// keeps its `HEAD`, index and `commondir`), whether it exists or not.
    pub fn worktree_record(&self, name: &str) -> PathBuf {
        self.common_dir.join("worktrees").join(name)
    }

    /// `path` as the person knows it: relative to the work tree's top when
    /// inside it (`.git/commondir`), else whole.
    pub fn shown(&self, path: &Path) -> String {
        shown_from(&self.work_tree, path)
    }
}

/// The error for `file`, a `commondir` that leads git elsewhere.
fn redirected(file: &Path) -> PlaceError {
    let names = pointer(file).unwrap_or_else(|| "(a file that cannot be read)".into());
    let printable = crate::text::printable(&names);
    PlaceError::Redirected {
        file: file.to_path_buf(),
        names: printable.chars().take(160).collect(),
    }
}

/// Whether `a` and `b` are one folder (or file) on disk; by name when
/// either cannot be resolved.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// `path` relative to `top` when inside it, else whole.
pub(crate) fn shown_from(top: &Path, path: &Path) -> String {
    path.strip_prefix(top).unwrap_or(path).display().to_string()
}

/// `path` made absolute against the current folder (git is given absolute
/// folders only: a command's own folder is its business).
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    std::env::current_dir().map_or_else(|_| path.to_path_buf(), |cwd| cwd.join(path))
}

/// `(project, name)` when `top` is `<project>/.claude/worktrees/<name>`.
fn ralphs_worktree(top: &Path) -> Option<(&Path, &str)> {
    let name = top.file_name()?.to_str()?;
    let mut project = top.parent()?;
    for part in Path::new(WORKTREES_DIR).components().rev() {
        if project.file_name()? != part.as_os_str() {
            return None;
        }
        project = project.parent()?;
    }
    Some((project, name))
}

/// Most bytes of a `.git` file or a `commondir` read.
const POINTER_BYTES: u64 = 4096;

/// The text of a small pointer file (`.git`, `commondir`), trimmed; `None`
/// when absent, unreadable or too large.
pub(crate) fn pointer(path: &Path) -> Option<String> {
    match crate::files::read_bounded(path, POINTER_BYTES).ok()? {
        crate::files::Bounded::Bytes(bytes) => {
            Some(String::from_utf8_lossy(&bytes).trim().to_string())
        }
        _ => None,
    }
}

/// A checkout whose `.git` is a file ralph did not make: its `gitdir:` and
/// that folder's `commondir`, as git would read them.
fn persons_linked_checkout(top: &Path, dot_git: &Path) -> Result<GitPlace, PlaceError> {
    let bad = |why: &str| PlaceError::BadGitFile {
        file: dot_git.to_path_buf(),
        why: why.to_string(),
    };
    let text = pointer(dot_git).ok_or_else(|| bad("it cannot be read"))?;
    let named = text
        .strip_prefix("gitdir:")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| bad("it does not start with `gitdir:`"))?;
    let git_dir = top.join(named);
    if !std::fs::metadata(&git_dir).is_ok_and(|m| m.is_dir()) {
        return Err(bad("the folder it names is missing"));
    }
    let common_dir = match pointer(&git_dir.join("commondir")) {
        Some(common) if !common.is_empty() => git_dir.join(common),
        _ => git_dir.clone(),
    };
    Ok(GitPlace {
        git_dir,
        common_dir,
        work_tree: top.to_path_buf(),
    })
}

#[cfg(test)]
mod tests;
