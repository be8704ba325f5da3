//! The clean room: where a claim that ends a loop is checked. A folder of
//! ralph's own outside the project (under the person's state folder, which
//! the agent's sandbox never grants), holding a copy of the claimed tree
//! made by content ([`sync`]) and an environment ralph made there itself
//! ([`setup`]): the project's `worktreeSetup`, else one found from its
//! files. The agent's build state (`target/`), environment folders
//! (`.venv`, `node_modules`) and caches in the project never reach the
//! check: a test binary built from a fix and kept after the fix was put
//! back, or a pytest plugin planted in the project's `.venv`, is not there.
//!
//! The room stays warm: a file whose bytes did not change keeps its copy
//! and its copy's time stamp, so a build in the room is incremental; a
//! changed file is written anew with a fresh time stamp, whatever time the
//! agent gave its own.

pub mod setup;
pub mod sync;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::judge::config::Config;
use crate::observe::verify::{self, VerifyCommand, VerifyResult};
use crate::walls::{Walls, WallsWanted};

/// The folder of a project's room inside the rooms folder.
const TREE: &str = "tree";
/// The room's environment folders a check may not write: what its setup
/// made there stays as the setup made it (a build's `target/` and
/// `node_modules`' caches are written by checks, and stay writable).
const ENV_READ_ONLY: [&str; 2] = [".venv", "venv"];
/// The lock a room's users take while they sync and check.
const LOCK: &str = "lock";

/// What a claim's check needs of the loop to run in the room: its pinned
/// config's `worktreeSetup` and checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomWanted {
    /// `worktreeSetup`, when the config sets it.
    pub setup: Option<VerifyCommand>,
    /// The checks the room's environment is made for (what a setup found
    /// from the files looks at: a check that runs `.venv/…`).
    pub checks: Vec<VerifyCommand>,
    /// Check in place when the room cannot be reached (`ralph-ctl check`
    /// run by the agent, whose sandbox never grants the room): a rehearsal
    /// decides nothing; a claim's check never does so.
    pub in_place_if_unreachable: bool,
}

impl RoomWanted {
    /// The room `config` wants, `None` when it turned the room off
    /// (`"cleanRoom": false`).
    pub fn of(config: &Config) -> Option<RoomWanted> {
        config.clean_room.then(|| RoomWanted {
            setup: config.worktree_setup.clone(),
            checks: config.completion.verify.clone(),
            in_place_if_unreachable: false,
        })
    }
}

/// The rooms folder: `$XDG_STATE_HOME/ralph/rooms` (`~/.local/state`),
/// else the data folder's `ralph-rooms` (never inside ralph's key folder,
/// which every check's walls hide). `None` without a `HOME`.
pub fn rooms_dir() -> Option<PathBuf> {
    #[cfg(test)]
    {
        return Some(
            std::env::temp_dir()
                .join("ralph-core-unit-tests")
                .join("rooms"),
        );
    }
    #[allow(unreachable_code)]
    dirs::state_dir()
        .map(|d| d.join("ralph").join("rooms"))
        .or_else(|| dirs::data_dir().map(|d| d.join("ralph-rooms")))
}

/// The room of the project at `project`: one per project, named by its
/// folder's name and a hash of its real path.
pub fn room_of(project: &Path) -> Option<PathBuf> {
    rooms_dir().map(|rooms| crate::walls::caches::project_folder(&rooms, project))
}

/// Why a claim could not be checked in the room.
#[derive(Debug, thiserror::Error)]
pub enum RoomError {
    /// The project is no git repository: no list of its files to copy.
    /// The check runs in place.
    #[error("{0} is not a git repository, so the clean room cannot list its files")]
    NotGit(String),
    /// The system names no folder for the room.
    #[error("the system names no state folder for ralph's clean room (is HOME set?)")]
    NoPlace,
    /// The room could not be made or copied into.
    #[error("the clean room {0} could not be made ready: {1}")]
    Io(String, String),
    /// The room's environment could not be made.
    #[error("{0}")]
    Setup(String),
}

/// A room made ready for a check: its tree, what the sync said, how long
/// it took.
#[derive(Debug)]
pub struct Ready {
    /// The copy of the claimed tree the check runs in.
    pub tree: PathBuf,
    /// The sync's report.
    pub synced: sync::Synced,
    /// The setup that ran, with how long it took (`None`: its inputs
    /// had not changed, or there is none).
    pub setup_ran: Option<(String, Duration)>,
    /// Held while the check runs: no other check syncs the room meanwhile.
    _lock: std::fs::File,
}

/// Makes the room of `project` ready for a check of its tree now: the
/// tree synced by content, the environment made when its inputs changed.
/// The setup runs in the room inside the walls `wanted` says, with the
/// network (it installs).
pub fn prepare(project: &Path, room: &RoomWanted, wanted: WallsWanted) -> Result<Ready, RoomError> {
    let dir = room_of(project).ok_or(RoomError::NoPlace)?;
    let shown = dir.display().to_string();
    let io = |e: std::io::Error| RoomError::Io(shown.clone(), e.to_string());
    let tree = dir.join(TREE);
    std::fs::create_dir_all(&tree).map_err(io)?;
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))
        .map_err(io)?;
    fs2::FileExt::lock_exclusive(&lock).map_err(io)?;
    let synced = sync::sync(project, &dir, &tree)?;
    let setup_ran = setup::ensure(&dir, &tree, room, &walls_for(project, &tree, wanted))?;
    Ok(Ready {
        tree,
        synced,
        setup_ran,
        _lock: lock,
    })
}

/// The walls of a check in the room `tree` of `project`: the room is the
/// folder it writes; the project is out of its sight as a worktree's main
/// checkout is (its `.git` and dependency folders read-only).
pub fn walls_for(project: &Path, tree: &Path, wanted: WallsWanted) -> Walls {
    let walls = Walls::around(project, tree, wanted);
    match crate::persist::mac::key_dir() {
        Some(keys) => walls.hide(keys),
        None => walls,
    }
}

/// Runs `commands` (a claim's checks) on the tree of `project` in its room,
/// inside walls as `wanted` says; a project that is no git repository is
/// checked in place. A room that cannot be made ready is a failed check,
/// named, never a pass.
pub fn run_checks(
    project: &Path,
    room: &RoomWanted,
    commands: &[VerifyCommand],
    wanted: WallsWanted,
) -> Vec<VerifyResult> {
    let started = Instant::now();
    match prepare(project, room, wanted) {
        Ok(ready) => {
            let walls = ENV_READ_ONLY
                .iter()
                .fold(walls_for(project, &ready.tree, wanted), |walls, name| {
                    walls.keep_read_only(&ready.tree.join(name))
                });
            verify::run_all(&ready.tree, commands, &walls)
        }
        Err(RoomError::NotGit(_)) => {
            verify::run_all(project, commands, &walls_for(project, project, wanted))
        }
        Err(RoomError::Io(..) | RoomError::NoPlace) if room.in_place_if_unreachable => {
            verify::run_all(project, commands, &walls_for(project, project, wanted))
        }
        Err(e) => vec![VerifyResult {
            name: "clean room".into(),
            command: commands
                .first()
                .map(|c| c.command.clone())
                .unwrap_or_default(),
            exit_code: None,
            timed_out: false,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            output_tail: format!(
                "{e}; the claim was not checked, so it is not accepted (fix it, or set \
                 \"cleanRoom\": false in .claude/ralph/config.json and `ralph-ctl reload`)"
            ),
            counts: None,
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        }],
    }
}
