//! A check of a worktree: the main checkout out of its sight but for its
//! `.git` and the dependency folders it keeps out of git, and the `PATH`
//! and `VIRTUAL_ENV` it is given, the worktree's own where it has them.

use super::*;

/// A check of a worktree: the main checkout it belongs to is out of the
/// check's sight but for its `.git` and the dependency folders it keeps
/// out of git ([`SHARED_DEPENDENCY_FOLDERS`], read-only), so that the
/// check tests the worktree's code and never the main checkout's; a `PATH`
/// entry (and `VIRTUAL_ENV`) in the main checkout is the worktree's own
/// where the worktree has it (a virtual environment `worktreeSetup` made).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct WorktreeOf {
    /// The main checkout (its real path).
    pub(super) project: PathBuf,
    /// The worktree (its real path).
    pub(super) worktree: PathBuf,
}

/// The main checkout and the worktree, when `root` is a worktree of
/// `project` (both real paths): another folder than the project.
pub(super) fn worktree_of(project: &Path, root: &Path) -> Option<WorktreeOf> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (project, worktree) = (real(project), real(root));
    (project != worktree && !project.starts_with(&worktree))
        .then_some(WorktreeOf { project, worktree })
}

/// Whether a check of `worktree`, a worktree of the main checkout
/// `project`, cannot see `path`: it lies in the main checkout, neither in
/// the worktree, nor in its `.git`, nor in a shared dependency folder.
pub fn hidden_from_worktree(project: &Path, worktree: &Path, path: &Path) -> bool {
    worktree_of(project, worktree).is_some_and(|of| of.hides(&real_as_far_as_it_goes(path)))
}

/// `path` with its longest existing beginning made real (links
/// resolved) and the rest as given.
pub(super) fn real_as_far_as_it_goes(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut head = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(head) {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                head = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl WorktreeOf {
    /// Whether `path` (a real path) lies in the main checkout where the
    /// check cannot see: not the worktree, its `.git`, nor a shared
    /// dependency folder.
    pub(super) fn hides(&self, path: &Path) -> bool {
        path.starts_with(&self.project)
            && !path.starts_with(&self.worktree)
            && !path.starts_with(self.project.join(".git"))
            && !SHARED_DEPENDENCY_FOLDERS
                .iter()
                .any(|name| path.starts_with(self.project.join(name)))
    }

    /// `folder` (as given) as the check takes it: the worktree's same
    /// folder when it lies in the main checkout and the worktree has it.
    pub(super) fn own(&self, folder: &Path) -> Option<PathBuf> {
        let real = std::fs::canonicalize(folder).ok()?;
        if real.starts_with(&self.worktree) {
            return None;
        }
        let inside = real.strip_prefix(&self.project).ok()?;
        let own = self.worktree.join(inside);
        own.is_dir().then_some(own)
    }

    pub(super) fn path_for_check(&self, path: &str) -> String {
        path.split(':')
            .map(|entry| {
                let folder = Path::new(entry);
                match folder.is_absolute().then(|| self.own(folder)).flatten() {
                    Some(own) => own.to_string_lossy().into_owned(),
                    None => entry.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(":")
    }

    /// `PATH` and `VIRTUAL_ENV` of `command` (its own, else this
    /// process's) taken from the worktree where they lead into the main
    /// checkout and the worktree has the same folder.
    pub(super) fn take_environment(&self, command: &mut Command) {
        let given = |command: &Command, name: &str| -> Option<OsString> {
            match command.get_envs().find(|(key, _)| *key == name) {
                Some((_, value)) => value.map(OsString::from),
                None => std::env::var_os(name),
            }
        };
        if let Some(path) = given(command, "PATH").and_then(|p| p.into_string().ok()) {
            command.env("PATH", self.path_for_check(&path));
        }
        if let Some(own) = given(command, "VIRTUAL_ENV").and_then(|v| self.own(Path::new(&v))) {
            command.env("VIRTUAL_ENV", own);
        }
    }
}
