//! What the circuit breaker observes of the project itself: a fingerprint of
//! its files (did anything change since the previous stop?) and the TDD
//! scenario in progress.
//!
//! With git, the fingerprint covers HEAD (a commit is progress) and every
//! staged, unstaged and untracked-not-ignored path with its size and mtime,
//! so an unchanged tree gives the same fingerprint and an edited file a new
//! one. Without git, a bounded scan of sizes and mtimes stands in, skipping a
//! small ignore list. The loop's own files under `.claude/` never count.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::errors::fingerprint as hash;
use crate::paths::RUNTIME_DIR;

/// How long `git status` may take before the fingerprint is given up.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most files the fallback scan looks at.
pub const SCAN_LIMIT: usize = 20_000;
/// Folders the fallback scan skips (build output, dependencies, caches, VCS, ralph's own).
pub const SCAN_IGNORES: &[&str] = &[
    ".git",
    ".claude",
    ".hg",
    ".svn",
    "target",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    "dist",
    "build",
    ".next",
    ".cache",
];
/// The TDD state file, relative to the project root.
pub const TDD_STATE_FILE: &str = "tdd-state.json";

/// True when `root` or a folder above it holds `.git` (a folder, or a file
/// for worktrees and submodules): only then is `git` worth starting.
fn inside_git_repository(root: &Path) -> bool {
    root.ancestors()
        .any(|dir| dir.join(".git").symlink_metadata().is_ok())
}

/// A fingerprint of the project's files, or `None` when it cannot be taken.
pub fn fingerprint(root: &Path) -> Option<String> {
    if !inside_git_repository(root) {
        return Some(format!("scan:{}", scan_fingerprint(root)));
    }
    match git_status(root) {
        GitStatus::Listed(bytes) => Some(format!("git:{}", git_fingerprint(root, &bytes))),
        GitStatus::NotARepository => Some(format!("scan:{}", scan_fingerprint(root))),
        GitStatus::Failed => None,
    }
}

enum GitStatus {
    Listed(Vec<u8>),
    NotARepository,
    Failed,
}

fn git_status(root: &Path) -> GitStatus {
    let child = Command::new("git")
        .args([
            "-c",
            "core.quotepath=off",
            "status",
            "--porcelain=v2",
            "--branch",
            "-z",
            "--untracked-files=all",
        ])
        .current_dir(root)
        // Never take index.lock: the agent may be running git at the same time.
        .env("GIT_OPTIONAL_LOCKS", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return GitStatus::NotARepository; // no git on this machine
    };
    // Read until git closes its output (no polling delay on the hook's path);
    // a watchdog kills it if it runs past the timeout.
    let (done, finished) = mpsc::channel::<()>();
    let pid = child.id();
    let watchdog = thread::spawn(move || {
        if finished.recv_timeout(GIT_TIMEOUT) == Err(mpsc::RecvTimeoutError::Timeout) {
            crate::process::kill(pid, false);
            true
        } else {
            false
        }
    });
    let mut bytes = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut bytes);
    }
    let exit = child.wait().ok();
    let _ = done.send(());
    let timed_out = watchdog.join().unwrap_or(true);
    let status = exit.filter(|_| !timed_out);
    match status {
        Some(s) if s.success() => GitStatus::Listed(bytes),
        Some(s) if s.code() == Some(128) => GitStatus::NotARepository,
        _ => GitStatus::Failed,
    }
}

fn under_claude_dir(path: &str) -> bool {
    path.starts_with(".claude/") || path.contains("/.claude/")
}

/// Size and mtime of a path, as text (absent files say so).
fn stamp(path: &Path) -> String {
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            let mtime = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            format!("{}:{mtime}", meta.len())
        }
        Err(_) => "absent".into(),
    }
}

/// Hashes `git status --porcelain=v2 -z` output: the branch header (HEAD's
/// commit) and each entry with the size and mtime of its file.
fn git_fingerprint(root: &Path, status: &[u8]) -> String {
    let text = String::from_utf8_lossy(status);
    let mut records: Vec<String> = Vec::new();
    let mut fields = text.split('\0').peekable();
    while let Some(record) = fields.next() {
        if record.is_empty() {
            continue;
        }
        if record.starts_with("# branch.oid") {
            records.push(record.to_string());
            continue;
        }
        if record.starts_with('#') {
            continue;
        }
        // Renames ("2 …") carry the original path as the next field.
        if record.starts_with("2 ") {
            fields.next();
        }
        let path = match record.as_bytes()[0] {
            b'1' => record.splitn(9, ' ').nth(8),
            b'2' => record.splitn(10, ' ').nth(9),
            b'u' => record.splitn(11, ' ').nth(10),
            b'?' | b'!' => record.get(2..),
            _ => None,
        };
        let Some(path) = path else { continue };
        if under_claude_dir(path) {
            continue;
        }
        // A path relative to the repository's top; git runs in the project
        // folder, which may be below it, so try both.
        let file = root.join(path);
        records.push(format!("{record}\0{}", stamp(&file)));
    }
    records.sort();
    hash(&records.join("\n"))
}

/// Hashes the relative path, size and mtime of up to [`SCAN_LIMIT`] files.
fn scan_fingerprint(root: &Path) -> String {
    let mut records = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if records.len() >= SCAN_LIMIT {
                records.push("(scan limit reached)".to_string());
                return hash(&records.join("\n"));
            }
            let name = entry.file_name();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !SCAN_IGNORES.iter().any(|i| name == *i) {
                    stack.push(entry.path());
                }
                continue;
            }
            let path = entry.path();
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            records.push(format!("{relative}\0{}", stamp(&path)));
        }
    }
    records.sort();
    hash(&records.join("\n"))
}

/// The `currentScenario` of `.claude/context/runtime/tdd-state.json`, when
/// that file exists and holds one.
pub fn tdd_scenario(root: &Path) -> Option<String> {
    let path = root.join(RUNTIME_DIR).join(TDD_STATE_FILE);
    let meta = fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 1024 * 1024 {
        return None;
    }
    let value: Value = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
    match value.get("currentScenario")? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tempdir::TempDir;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// Waits past the filesystem's timestamp granularity so an edit gets a new mtime.
    fn tick() {
        thread::sleep(Duration::from_millis(20));
    }

    fn check_changes(dir: &Path, kind: &str) {
        let base = fingerprint(dir).unwrap();
        assert!(base.starts_with(kind), "{base}");
        assert_eq!(
            fingerprint(dir).unwrap(),
            base,
            "an unchanged tree is recognised"
        );

        fs::create_dir_all(dir.join(".claude/context/runtime")).unwrap();
        fs::write(dir.join(".claude/context/runtime/ralph-state.json"), "{}").unwrap();
        fs::write(dir.join(".claude/ralph-notes.md"), "x").unwrap();
        assert_eq!(
            fingerprint(dir).unwrap(),
            base,
            "ralph's own files do not count"
        );

        tick();
        fs::write(dir.join("new.txt"), "new").unwrap();
        let with_new = fingerprint(dir).unwrap();
        assert_ne!(with_new, base, "an untracked file is progress");

        tick();
        fs::write(dir.join("new.txt"), "newer").unwrap();
        let edited = fingerprint(dir).unwrap();
        assert_ne!(edited, with_new, "editing a file again is progress");
        assert_eq!(fingerprint(dir).unwrap(), edited);
    }

    #[test]
    fn git_fingerprint_sees_edits_untracked_files_and_commits() {
        let dir = TempDir::new();
        let root = dir.path();
        git(root, &["init", "-q"]);
        fs::write(root.join("a.txt"), "a").unwrap();
        git(root, &["add", "a.txt"]);
        git(root, &["commit", "-q", "-m", "one"]);
        check_changes(root, "git:");

        git(root, &["add", "-A"]);
        let staged = fingerprint(root).unwrap();
        git(root, &["commit", "-q", "-m", "two"]);
        let committed = fingerprint(root).unwrap();
        assert_ne!(committed, staged, "a commit is progress");

        fs::write(root.join(".gitignore"), "ignored.log\n").unwrap();
        git(root, &["add", ".gitignore"]);
        git(root, &["commit", "-q", "-m", "ignore"]);
        let clean = fingerprint(root).unwrap();
        fs::write(root.join("ignored.log"), "noise").unwrap();
        assert_eq!(
            fingerprint(root).unwrap(),
            clean,
            "ignored files do not count"
        );
    }

    #[test]
    fn scan_fingerprint_without_git() {
        let dir = TempDir::new();
        fs::write(dir.path().join("a.txt"), "a").unwrap();
        check_changes(dir.path(), "scan:");
        let before = fingerprint(dir.path()).unwrap();
        fs::create_dir_all(dir.path().join("node_modules/x")).unwrap();
        fs::write(dir.path().join("node_modules/x/index.js"), "x").unwrap();
        assert_eq!(
            fingerprint(dir.path()).unwrap(),
            before,
            "ignored folders do not count"
        );
    }

    #[test]
    fn tdd_scenario_is_read_when_present() {
        let dir = TempDir::new();
        assert_eq!(tdd_scenario(dir.path()), None);
        let runtime = dir.path().join(RUNTIME_DIR);
        fs::create_dir_all(&runtime).unwrap();
        fs::write(
            runtime.join(TDD_STATE_FILE),
            r#"{"currentScenario": "login works", "other": 1}"#,
        )
        .unwrap();
        assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("login works"));
        fs::write(runtime.join(TDD_STATE_FILE), r#"{"currentScenario": 7}"#).unwrap();
        assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("7"));
        fs::write(runtime.join(TDD_STATE_FILE), "not json").unwrap();
        assert_eq!(tdd_scenario(dir.path()), None);
    }
}
