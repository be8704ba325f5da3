//! The entries the client's sandbox mounts at the project's top, kept out
//! of git's view while a sandboxed run is on.
//!
//! 2.1.330's sandbox protects a list of dotfiles and folders by mounting
//! over them in the command's folder, creating what is missing as a mount
//! point: inside the sandbox `git status` lists up to 22 untracked entries
//! that do not exist outside it (11 of them in `.claude`), and `git add -A` fails on the first
//! (`.bash_profile: can only add regular files, symbolic links or
//! git-directories`). The agent is told to commit its work; with this block
//! in the repository's `info/exclude` (written outside the sandbox, where
//! the agent cannot), `git add -A && git commit` works as written. Only
//! names the project does not have are listed, anchored at the project's
//! folder, and the block goes when the run ends, so the person's own `git
//! add` of a new `.vscode/` later is never silently skipped.

use std::path::{Path, PathBuf};

use ralph_core::observe::own_git::GitPlace;
use ralph_core::paths::ProjectPaths;

/// What 2.1.330's sandbox mounts (`/dev/null`, a character device) in
/// the folder a command runs in, and in its `.claude`, where they are
/// missing (docs/protocol-notes.md).
pub(crate) const SANDBOX_MOUNTS: [&str; 22] = [
    ".bash_profile",
    ".bashrc",
    ".gitconfig",
    ".gitmodules",
    ".idea",
    ".mcp.json",
    ".profile",
    ".ripgreprc",
    ".vscode",
    ".zprofile",
    ".zshrc",
    ".claude/agents",
    ".claude/commands",
    ".claude/hooks",
    ".claude/launch.json",
    ".claude/loop.md",
    ".claude/output-styles",
    ".claude/routines",
    ".claude/scheduled_tasks.json",
    ".claude/settings.local.json",
    ".claude/skills",
    ".claude/workflows",
];

/// The block written for a run: removed from `info/exclude` when dropped.
#[derive(Debug)]
pub(crate) struct Excluded {
    file: PathBuf,
    begin: String,
}

/// The first line of the block for the project at `relative` (from the
/// checkout's top): each project in a repository has its own.
fn begin_line(relative: &str) -> String {
    format!("# >>> ralph: the client's sandbox's mount points in /{relative} (while a run is on)")
}

const END_LINE: &str = "# <<< ralph";

/// `text` without the block that starts with `begin` (the whole block, to
/// its end line).
fn without_block(text: &str, begin: &str) -> String {
    let mut kept = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == begin {
            inside = true;
            continue;
        }
        if inside {
            if line == END_LINE {
                inside = false;
            }
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// Writes `text` to `file` whole (a temp file renamed over it).
fn write_whole(file: &Path, text: &str) -> std::io::Result<()> {
    let temp = file.with_extension("ralph-tmp");
    std::fs::write(&temp, text)?;
    std::fs::rename(&temp, file)
}

/// The block for the project at `paths` in its repository's
/// `info/exclude`: the sandbox's mount points the project does not have,
/// anchored at its folder. `None`, and nothing written, outside git or
/// when every name exists; a write that fails is said, never fatal.
pub(crate) fn exclude(paths: &ProjectPaths) -> Option<Excluded> {
    let place = GitPlace::find(&paths.root).ok()?;
    let root = std::fs::canonicalize(&paths.root).ok()?;
    let top = std::fs::canonicalize(&place.work_tree).ok()?;
    let relative = root.strip_prefix(&top).ok()?.to_string_lossy().into_owned();
    let names: Vec<&str> = SANDBOX_MOUNTS
        .into_iter()
        .filter(|name| std::fs::symlink_metadata(root.join(name)).is_err())
        .collect();
    if names.is_empty() {
        return None;
    }
    let folder = if relative.is_empty() {
        String::new()
    } else {
        format!("{relative}/")
    };
    let begin = begin_line(&relative);
    let mut block = format!("{begin}\n");
    for name in names {
        block.push_str(&format!("/{folder}{name}\n"));
    }
    block.push_str(END_LINE);
    block.push('\n');
    let info = place.common_dir.join("info");
    let file = info.join("exclude");
    let written = std::fs::create_dir_all(&info).and_then(|()| {
        let before = std::fs::read_to_string(&file).unwrap_or_default();
        write_whole(&file, &(without_block(&before, &begin) + &block))
    });
    match written {
        Ok(()) => Some(Excluded { file, begin }),
        Err(e) => {
            super::say(&format!(
                "warning: cannot write {}: {e}; inside the sandbox `git add -A` may fail on the \
                 entries it mounts (.bash_profile …): add files by name",
                file.display()
            ));
            None
        }
    }
}

impl Drop for Excluded {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(&self.file) {
            let _ = write_whole(&self.file, &without_block(&text, &self.begin));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;

    #[test]
    fn the_block_lists_what_is_missing_and_goes_with_the_run() {
        let tmp = crate::testdir::new("sandbox-mounts");
        let root = tmp.path().join("repo");
        let project = root.join("sub");
        std::fs::create_dir_all(project.join(".vscode")).unwrap();
        sh(&root, &["init", "-q"]);
        let file = root.join(".git/info/exclude");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "# the person's\n*.log\n").unwrap();
        let paths = ProjectPaths::new(&project);
        let held = exclude(&paths).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# the person's\n*.log\n# >>> ralph"),
            "{text}"
        );
        assert!(text.contains("\n/sub/.bash_profile\n"), "{text}");
        assert!(!text.contains(".vscode"), "the project has one: {text}");
        // A second run's block replaces the first's, never doubles it.
        let again = exclude(&paths).unwrap();
        let twice = std::fs::read_to_string(&file).unwrap();
        assert_eq!(twice.matches("# >>> ralph").count(), 1, "{twice}");
        drop(again);
        std::mem::forget(held);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "# the person's\n*.log\n"
        );
    }
}
