//! The corpus of real open-source projects the end-to-end tests run ralph
//! on (`tests/tests/e2e/real_projects.rs`): where `tests/corpus/fetch.sh`
//! left them and their dependencies (`.cache/corpus/`), where a test's
//! project and HOME go (outside the temp folders, as a person's are), and
//! how a run as an unprivileged user reaches the binaries.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bins::workspace_root;

/// The corpus cache `tests/corpus/fetch.sh` fills: `RALPH_CORPUS_CACHE`,
/// else `.cache/corpus` in the workspace. Panics with the fix when it was
/// never fetched (a missing corpus is a failure, never a skip).
pub fn cache() -> PathBuf {
    let dir = std::env::var_os("RALPH_CORPUS_CACHE")
        .map_or_else(|| workspace_root().join(".cache/corpus"), PathBuf::from);
    let ready = std::fs::read_dir(&dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("ready-"))
    });
    assert!(
        ready,
        "the corpus of real projects is not in {}: run tests/corpus/fetch.sh (tests/run.sh does)",
        dir.display()
    );
    dir
}

/// A project of the corpus as fetched: `.cache/corpus/src/<name>`.
pub fn source(name: &str) -> PathBuf {
    let dir = cache().join("src").join(name);
    assert!(
        dir.is_dir(),
        "{} is missing: run tests/corpus/fetch.sh again",
        dir.display()
    );
    dir
}

/// The folder the corpus tests put their projects and HOMEs in: outside
/// /tmp and /var/tmp (where the walls let a check write, so a HOME there
/// hides what a check cannot write at home) and outside this repository
/// (whose Cargo workspace would take a Rust project in for a member).
/// `RALPH_REAL_PROJECTS_DIR` names another; else, as root, `/home/ralph-
/// real-projects` (reachable by the unprivileged user too), and for anyone
/// else `~/.cache/ralph-real-projects`.
pub fn runs_dir() -> PathBuf {
    let dir = if let Some(dir) = std::env::var_os("RALPH_REAL_PROJECTS_DIR") {
        PathBuf::from(dir)
    } else if crate::listen::is_root() {
        PathBuf::from("/home/ralph-real-projects")
    } else {
        let home = std::env::var_os("HOME").expect("HOME is set");
        PathBuf::from(home).join(".cache/ralph-real-projects")
    };
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot make {}: {e}", dir.display()));
    if crate::listen::is_root() {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    for temp in ["/tmp", "/var/tmp"] {
        assert!(
            !dir.starts_with(temp),
            "{} is under {temp}: set RALPH_REAL_PROJECTS_DIR elsewhere",
            dir.display()
        );
    }
    dir
}

/// Copies the folder `from` into `to` (made when missing) with `cp`:
/// modes, links and times kept, the copies this process's own (git refuses
/// a repository another user owns).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let status = Command::new("cp")
        .args(["-dR", "--preserve=mode,timestamps"])
        .arg(format!("{}/.", from.display()))
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -dR {} {}",
        from.display(),
        to.display()
    );
}

/// Gives `path` and everything under it to `uid` (its group `uid` too).
pub fn chown_tree(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success(), "chown -R {uid} {}", path.display());
}

/// The folder a program is found in on this process's PATH.
pub fn folder_of_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).find(|dir| dir.join(name).is_file())
}
