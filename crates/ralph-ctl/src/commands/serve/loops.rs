//! The project's loops as `ralph-ctl serve` shows them: the project's own
//! (a formula's steps are its sections) and each queue item's, under
//! `runtime/queue/<item>/`. Each state is read as `status` reads it,
//! without the lock (the store replaces the file whole); a version made of
//! the state files' sizes and times tells a page whether anything moved,
//! for the price of a few `stat`s.

use std::path::PathBuf;
use std::time::UNIX_EPOCH;

use ralph_core::fnv::Fnv;
use ralph_core::judge::config::ProcessEnv;
use ralph_core::judge::state::Status;
use ralph_core::paths::{ProjectPaths, QUEUE_DIR};
use ralph_core::persist::store::StateStore;
use serde::Serialize;

use crate::render;

/// How long a page may show the same rendering of a loop that did not
/// move: the time to a usage window's reset counts down.
const REFRESH_SECS: u64 = 30;

/// Which loop of the project: its own (`main`), or a queue item's
/// (`item:<folder>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LoopId {
    /// The project's loop.
    Main,
    /// The loop of the queue item whose folder under `runtime/queue/` is this.
    Item(String),
}

impl LoopId {
    /// As the page names it.
    pub(crate) fn name(&self) -> String {
        match self {
            LoopId::Main => "main".into(),
            LoopId::Item(folder) => format!("item:{folder}"),
        }
    }

    /// The loop's paths.
    pub(crate) fn paths(&self, project: &ProjectPaths) -> ProjectPaths {
        match self {
            LoopId::Main => project.clone(),
            LoopId::Item(folder) => project.for_item(folder),
        }
    }
}

/// The loops there are now: the project's, then each item's folder with
/// a state file, by name.
pub(crate) fn present(project: &ProjectPaths) -> Vec<LoopId> {
    let mut ids = vec![LoopId::Main];
    ids.extend(item_folders(project).into_iter().map(LoopId::Item));
    ids
}

/// The loop a page names, when it is one of the project's now (a name is
/// never made into a path unless it is one of the folders listed).
pub(crate) fn find(project: &ProjectPaths, name: &str) -> Option<LoopId> {
    present(project).into_iter().find(|id| id.name() == name)
}

fn queue_dir(project: &ProjectPaths) -> PathBuf {
    project.runtime_dir().join(QUEUE_DIR)
}

/// The item folders under `runtime/queue/` holding a state, by name.
fn item_folders(project: &ProjectPaths) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(queue_dir(project)) else {
        return Vec::new();
    };
    let mut folders: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|name| {
            project
                .for_item(name)
                .state_file()
                .symlink_metadata()
                .is_ok_and(|m| m.is_file())
        })
        .collect();
    folders.sort();
    folders
}

/// What the loops are now, cheaply: each state file's size and time of
/// change, and the half-minute (so the times to a reset are shown again).
pub(crate) fn version(project: &ProjectPaths, now: u64) -> String {
    let mut hash = Fnv::new();
    hash.word(now / REFRESH_SECS);
    for id in present(project) {
        hash.bytes(id.name().as_bytes());
        match std::fs::metadata(id.paths(project).state_file()) {
            Ok(meta) => {
                let nanos = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos() as u64);
                hash.word(meta.len());
                hash.word(nanos);
            }
            Err(_) => hash.word(u64::MAX),
        }
    }
    format!("{:016x}", hash.finish())
}

/// One loop as the page gets it: a few facts its script acts on, and the
/// loop's sections as the report renders them (escaped there).
#[derive(Debug, Serialize)]
pub(crate) struct Shown {
    /// [`LoopId::name`].
    pub(crate) id: String,
    /// What the page heads it with.
    pub(crate) title: String,
    /// Its status (`running`, `complete`, …), or `unreadable`.
    pub(crate) status: String,
    /// Whether it may still move (cancel and say are offered).
    pub(crate) live: bool,
    /// The question it waits on an answer to (the agent's text: the
    /// script shows it as text).
    pub(crate) question: Option<String>,
    /// The rendered sections.
    pub(crate) html: String,
}

/// What a page asks for: every loop, at a version.
#[derive(Debug, Serialize)]
pub(crate) struct Snapshot {
    /// [`version`] when it was read.
    pub(crate) version: String,
    /// The project's folder.
    pub(crate) project: String,
    /// Each loop there is.
    pub(crate) loops: Vec<Shown>,
}

/// Every loop of the project, read and rendered, at `now`.
pub(crate) fn snapshot(project: &ProjectPaths, now: u64) -> Snapshot {
    let version = version(project, now);
    let loops = present(project)
        .into_iter()
        .filter_map(|id| shown(project, &id, now))
        .collect();
    Snapshot {
        version,
        project: project.root.display().to_string(),
        loops,
    }
}

/// One loop, when it has a state (or one that cannot be read).
fn shown(project: &ProjectPaths, id: &LoopId, now: u64) -> Option<Shown> {
    let paths = id.paths(project);
    let title = match id {
        LoopId::Main => "the project's loop".to_string(),
        LoopId::Item(folder) => format!("queue item {folder}"),
    };
    let state = match StateStore::new(&paths).read() {
        Ok(Some(state)) => state,
        Ok(None) => return None,
        Err(e) => {
            return Some(Shown {
                id: id.name(),
                title,
                status: "unreadable".into(),
                live: false,
                question: None,
                html: format!(
                    "<p class=\"bad\">its state cannot be used: {}</p>",
                    render::esc(&e.to_string())
                ),
            })
        }
    };
    // Judged by its pin, as the report shows it; a completion not on
    // record is shown as not accepted, as `status` shows it.
    let config = ralph_core::pin::loop_config(&paths, &ProcessEnv, &state).ok();
    let state = crate::driver::finish::believed(&paths, state);
    let mut html = String::new();
    if crate::driver::carriers::left_behind(&state) {
        html.push_str(
            "<p class=\"bad\">interrupted: its driver is gone (`ralph-ctl run --resume` takes it up again)</p>",
        );
    }
    html.push_str(&render::loop_sections(&state, config.as_ref(), now));
    Some(Shown {
        id: id.name(),
        title,
        status: state.status.as_str().to_string(),
        live: state.status.is_live(),
        question: state
            .question
            .as_ref()
            .filter(|_| state.status == Status::Waiting)
            .map(|q| ralph_core::text::printable(&q.text).into_owned()),
        html,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_project_loop_and_each_item_folder_with_a_state() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectPaths::new(dir.path());
        let queue = dir.path().join(".claude/context/runtime/queue");
        for (name, with_state) in [("b-item", true), ("a-item", true), ("empty", false)] {
            std::fs::create_dir_all(queue.join(name)).unwrap();
            if with_state {
                std::fs::write(queue.join(name).join("ralph-state.json"), "{}").unwrap();
            }
        }
        let names: Vec<String> = present(&project).iter().map(LoopId::name).collect();
        assert_eq!(names, ["main", "item:a-item", "item:b-item"]);
        assert_eq!(
            find(&project, "item:a-item"),
            Some(LoopId::Item("a-item".into()))
        );
        assert_eq!(find(&project, "item:empty"), None);
        assert_eq!(find(&project, "item:../../etc"), None);
        assert_eq!(
            LoopId::Item("a-item".into()).paths(&project).state_file(),
            queue.join("a-item/ralph-state.json")
        );
    }

    #[test]
    fn the_version_moves_with_a_state_file_and_the_half_minute() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectPaths::new(dir.path());
        let before = version(&project, 1000);
        assert_eq!(before, version(&project, 1001));
        assert_ne!(before, version(&project, 1000 + REFRESH_SECS));
        std::fs::create_dir_all(project.runtime_dir()).unwrap();
        std::fs::write(project.state_file(), "{}").unwrap();
        assert_ne!(before, version(&project, 1000));
    }

    #[test]
    fn no_state_no_loop_shown() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = snapshot(&ProjectPaths::new(dir.path()), 1000);
        assert!(snapshot.loops.is_empty());
    }
}
