//! Where the built `ralph-stop-hook` and `ralph-ctl` binaries are.
//!
//! Cargo does not build another package's binaries for a test, so the test
//! command (`tests/run.sh`) runs `cargo build --bins` first. `RALPH_BIN_DIR`
//! points the tests at other builds (a release build, say).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The folder holding the binaries under test.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("RALPH_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_root().join("target"), PathBuf::from);
    let target = if target.is_absolute() {
        target
    } else {
        workspace_root().join(target)
    };
    target.join("debug")
}

fn newest_source(dir: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            // Only what the build reads: not test artifacts such as proptest's regression files,
            // and not Cargo.toml, whose edits cargo does not always relink for (`rust-version`,
            // `description`), so `cargo build` could never make the binary look fresh again.
            let built_from = matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("rs" | "md" | "sh" | "bat")
            );
            let time = if path.is_dir() {
                newest_source(&path)
            } else if !built_from {
                SystemTime::UNIX_EPOCH
            } else {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH)
            };
            newest = newest.max(time);
        }
    }
    newest
}

/// The path of a built binary; panics with the fix when it is missing or
/// older than the sources (so a test never runs against a stale build).
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: run `cargo build --bins` first (tests/run.sh does)",
                path.display()
            )
        });
    if std::env::var_os("RALPH_BIN_DIR").is_none() {
        let root = workspace_root();
        let sources: &[&str] = match name {
            // The binaries' own sources: a crate's tests and benches are not built into them.
            "ralph-stop-hook" => &["crates/ralph-stop-hook/src", "crates/ralph-core/src"],
            _ => &[
                "crates/ralph-ctl/src",
                "crates/ralph-core/src",
                "templates",
                "launchers",
            ],
        };
        let newest = sources
            .iter()
            .map(|d| newest_source(&root.join(d)))
            .max()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        assert!(
            built >= newest,
            "{} is older than the sources: run `cargo build --bins` first (tests/run.sh does)",
            path.display()
        );
    }
    path
}

/// `ralph-stop-hook`.
pub fn hook() -> PathBuf {
    bin("ralph-stop-hook")
}

/// `ralph-ctl`.
pub fn ctl() -> PathBuf {
    bin("ralph-ctl")
}
