//! The room's environment, made by ralph in the room: the project's
//! `worktreeSetup` when it sets one, else one found from the files (a
//! `uv.lock`: `uv sync --frozen`, when uv is on `PATH`; a Python project
//! whose check runs its `.venv`: a virtual environment with the project
//! installed editable, its test extra too; a `package-lock.json`: `npm
//! ci`; cargo and go: none). It runs only when its inputs changed: the
//! command and the lock and manifest files, hashed into a stamp in the
//! room; each time on a clean environment (`.venv`, `venv`, `node_modules`
//! removed first). A setup that fails leaves no stamp, and the check
//! reports it.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{RoomError, RoomWanted};
use crate::fnv::Fnv;
use crate::observe::verify::{self, VerifyCommand};
use crate::walls::Walls;

/// The stamp of the last setup that passed, beside the room's tree.
const STAMP: &str = "setup.stamp";

/// The files a setup is made from: a change to any makes it run again.
pub const INPUTS: [&str; 10] = [
    "uv.lock",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements.txt",
    "requirements-dev.txt",
    "package.json",
    "package-lock.json",
    "Cargo.lock",
    "go.sum",
];

/// The environment folders a setup makes, removed before it runs again.
const ENV_FOLDERS: [&str; 3] = [".venv", "venv", "node_modules"];

/// How long a setup found from the files may run.
const FOUND_SETUP_TIMEOUT_SECS: u32 = 600;

/// The setup of the room `tree`: the config's, else one found.
pub fn command_for(tree: &Path, room: &RoomWanted) -> Option<VerifyCommand> {
    if let Some(setup) = &room.setup {
        return Some(setup.clone());
    }
    found(tree, &room.checks).map(|command| VerifyCommand {
        name: "clean room setup".into(),
        command,
        timeout_seconds: FOUND_SETUP_TIMEOUT_SECS,
        network: true,
    })
}

/// The setup the files of `tree` call for, if a rule finds one.
pub fn found(tree: &Path, checks: &[VerifyCommand]) -> Option<String> {
    if tree.join("uv.lock").is_file() && on_path("uv") {
        return Some("uv sync --frozen".into());
    }
    let python = tree.join("pyproject.toml").is_file() || tree.join("setup.py").is_file();
    let venv_check = checks.iter().any(|c| c.command.contains(".venv/"));
    if python && venv_check {
        let target = match crate::observe::runnable::test_extra_in(tree) {
            Some(extra) => format!("'.[{extra}]'"),
            None => ".".into(),
        };
        return Some(format!(
            "python3 -m venv .venv && .venv/bin/pip install -q -e {target}"
        ));
    }
    if tree.join("package-lock.json").is_file() {
        return Some("npm ci".into());
    }
    None
}

/// Whether `program` is a file in a folder of `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()))
}

/// The stamp of `setup` over the input files of `tree`.
fn stamp_of(tree: &Path, setup: &VerifyCommand) -> String {
    let mut hash = Fnv::new();
    hash.bytes(setup.command.as_bytes());
    for name in INPUTS {
        hash.bytes(&[0]);
        hash.bytes(name.as_bytes());
        match std::fs::read(tree.join(name)) {
            Ok(bytes) => {
                hash.word(bytes.len() as u64);
                hash.bytes(&bytes);
            }
            Err(_) => hash.word(u64::MAX),
        }
    }
    format!("{:016x}", hash.finish())
}

/// Runs the room's setup in `tree` (the room `dir`'s) inside `walls`,
/// with the network, when its stamp differs; the command and how long it
/// took when it ran.
pub fn ensure(
    dir: &Path,
    tree: &Path,
    room: &RoomWanted,
    walls: &Walls,
) -> Result<Option<(String, Duration)>, RoomError> {
    let Some(setup) = command_for(tree, room) else {
        return Ok(None);
    };
    let stamp_file = dir.join(STAMP);
    let stamp = stamp_of(tree, &setup);
    if std::fs::read_to_string(&stamp_file).is_ok_and(|s| s.trim() == stamp) {
        return Ok(None);
    }
    let _ = std::fs::remove_file(&stamp_file);
    // A setup runs on a clean environment: what an earlier one (running the
    // project's own build code: `setup.py`, npm's scripts) left there, a
    // `.pth` or a patched package, does not outlive the files that made it.
    for env in ENV_FOLDERS {
        let folder = tree.join(env);
        if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&folder)
                .map_err(|e| RoomError::Io(folder.display().to_string(), e.to_string()))?;
        }
    }
    let started = Instant::now();
    let result = verify::run(tree, &setup, &walls.clone().with_network(true));
    if !result.passed() {
        let how = if result.timed_out {
            "timed out".to_string()
        } else {
            result
                .exit_code
                .map_or_else(|| "could not run".into(), |c| format!("exit {c}"))
        };
        return Err(RoomError::Setup(format!(
            "the clean room's setup `{}` failed in {} ({how}); last lines of its output:\n{}\n\
             set worktreeSetup in .claude/ralph/config.json to the command that makes the project's \
             environment from its files",
            setup.command,
            tree.display(),
            result.output_tail.trim()
        )));
    }
    std::fs::write(&stamp_file, format!("{stamp}\n"))
        .map_err(|e| RoomError::Io(dir.display().to_string(), e.to_string()))?;
    Ok(Some((setup.command, started.elapsed())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(command: &str) -> VerifyCommand {
        VerifyCommand {
            name: "tests".into(),
            command: command.into(),
            timeout_seconds: 60,
            network: false,
        }
    }

    #[test]
    fn a_setup_is_found_from_the_files_and_the_config_s_comes_first() {
        let dir = std::env::temp_dir().join(format!("ralph-room-setup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let room = |setup: Option<&str>, checks: &[&str]| RoomWanted {
            setup: setup.map(check),
            checks: checks.iter().map(|c| check(c)).collect(),
            in_place_if_unreachable: false,
        };
        assert_eq!(command_for(&dir, &room(None, &["cargo test"])), None);
        std::fs::write(
            dir.join("pyproject.toml"),
            "[project]\nname='x'\n[project.optional-dependencies]\ntest = ['pytest']\n",
        )
        .unwrap();
        // A Python project whose check does not run its `.venv`: nothing.
        assert_eq!(
            found(&dir, &room(None, &["python3 -m unittest"]).checks),
            None
        );
        assert_eq!(
            found(&dir, &room(None, &[".venv/bin/python -m pytest"]).checks).as_deref(),
            Some("python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'")
        );
        std::fs::write(dir.join("package-lock.json"), "{}").unwrap();
        assert_eq!(
            found(&dir, &room(None, &["npm test"]).checks).as_deref(),
            Some("npm ci")
        );
        let mine = command_for(&dir, &room(Some("make env"), &["npm test"])).unwrap();
        assert_eq!(mine.command, "make env");
        // The stamp follows the command and the input files.
        let first = stamp_of(&dir, &mine);
        assert_eq!(first, stamp_of(&dir, &mine));
        std::fs::write(dir.join("package-lock.json"), "{\"v\":2}").unwrap();
        assert_ne!(first, stamp_of(&dir, &mine));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
