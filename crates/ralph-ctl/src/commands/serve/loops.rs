//! The project's loops as `ralph-ctl serve` shows them: the project's own
//! (a formula's steps are its sections; a queue run is the dashboard of its
//! items) and each queue item's, under `runtime/queue/<item>/`, headed by
//! its title and folded under the run's table. Each state is read as
//! `status` reads it, without the lock (the store replaces the file
//! whole); a version made of the state files' sizes and times tells a page
//! whether anything moved, for the price of a few `stat`s.

use std::time::UNIX_EPOCH;

use ralph_core::fnv::Fnv;
use ralph_core::judge::config::ProcessEnv;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use serde::Serialize;

use crate::queue::item_loops::{self, ItemLoop};
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
    ids.extend(item_loops::folders(project).into_iter().map(LoopId::Item));
    ids
}

/// The loop a page names, when it is one of the project's now (a name is
/// never made into a path unless it is one of the folders listed).
pub(crate) fn find(project: &ProjectPaths, name: &str) -> Option<LoopId> {
    present(project).into_iter().find(|id| id.name() == name)
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
                    .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
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
    /// What the page heads it with: a queue item's title.
    pub(crate) title: String,
    /// A queue item's loop, shown folded under its run's table of items.
    pub(crate) folded: bool,
    /// Its status (`running`, `complete`, …), or `unreadable`.
    pub(crate) status: String,
    /// Whether it may still move (cancel and say are offered).
    pub(crate) live: bool,
    /// Whether a note said to it reaches an iteration: every loop's does
    /// (a queue run's goes to each item a worker is on).
    pub(crate) takes_notes: bool,
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

/// Every loop of the project, read and rendered, at `now`: the project's,
/// then its queue items' (in the order of the run's table).
pub(crate) fn snapshot(project: &ProjectPaths, now: u64) -> Snapshot {
    let version = version(project, now);
    let main = StateStore::new(project)
        .read()
        .map(|state| state.map(|s| crate::driver::finish::believed(project, s)));
    let items = item_loops::read_all(project);
    let run = main.as_ref().ok().and_then(Option::as_ref);
    let mut order: Vec<&ItemLoop> = items.iter().collect();
    if let Some(queue) = run.and_then(|r| r.queue.as_ref()) {
        let table: Vec<&str> = render::items(queue, &items).iter().map(|i| i.id).collect();
        order.sort_by_key(|l| {
            l.item_id()
                .and_then(|id| table.iter().position(|t| *t == id))
                .unwrap_or(usize::MAX)
        });
    }
    let folded: Vec<Shown> = order
        .into_iter()
        .map(|item| shown_item(item, run, now))
        .collect();
    let mut loops: Vec<Shown> = shown_main(project, main, &items, now).into_iter().collect();
    loops.extend(folded);
    Snapshot {
        version,
        project: project.root.display().to_string(),
        loops,
    }
}

/// A loop whose state cannot be used, said so.
fn unreadable(id: String, title: String, folded: bool, error: &str) -> Shown {
    Shown {
        id,
        title,
        folded,
        status: "unreadable".into(),
        live: false,
        takes_notes: false,
        question: None,
        html: format!(
            "<p class=\"bad\">its state cannot be used: {}</p>",
            render::esc(error)
        ),
    }
}

/// A loop's facts for the page, around its rendered `html`.
fn shown(id: String, title: String, folded: bool, state: &LoopState, body: String) -> Shown {
    let mut html = String::new();
    if crate::driver::carriers::left_behind(state) {
        html.push_str(
            "<p class=\"bad\">interrupted: its driver is gone (`ralph-ctl run --resume` takes it up again)</p>",
        );
    }
    html.push_str(&body);
    Shown {
        id,
        title,
        folded,
        status: state.status.as_str().to_string(),
        live: state.status.is_live(),
        takes_notes: true,
        question: state
            .question
            .as_ref()
            .filter(|_| state.status == Status::Waiting)
            .map(|q| ralph_core::text::printable(&q.text).into_owned()),
        html,
    }
}

/// The project's loop, when it has a state (or one that cannot be read):
/// a queue run as the dashboard of its `items`.
fn shown_main(
    project: &ProjectPaths,
    state: Result<Option<LoopState>, ralph_core::persist::store::StoreError>,
    items: &[ItemLoop],
    now: u64,
) -> Option<Shown> {
    let id = LoopId::Main.name();
    let state = match state {
        Ok(Some(state)) => state,
        Ok(None) => return None,
        Err(e) => {
            let title = "the project's loop".to_string();
            return Some(unreadable(id, title, false, &e.to_string()));
        }
    };
    let (title, body) = if let Some(queue) = &state.queue {
        let table = render::items(queue, items);
        let pending = item_loops::pending(project, &state);
        (
            "the queue run".to_string(),
            render::run_sections(&state, &table, &pending, now),
        )
    } else {
        // Judged by its pin, as the report shows it; a completion not
        // on record is shown as not accepted, as `status` shows it.
        let config = ralph_core::pin::loop_config(project, &ProcessEnv, &state).ok();
        let body = render::loop_sections(&state, config.as_ref(), now);
        ("the project's loop".to_string(), body)
    };
    Some(shown(id, title, false, &state, body))
}

/// A queue item's loop, headed by its title in `run` (its folder's name
/// when the run does not list it), its record in the run first.
fn shown_item(item: &ItemLoop, run: Option<&LoopState>, now: u64) -> Shown {
    let id = LoopId::Item(item.folder.clone()).name();
    let record = item_loops::record(run, item);
    let title = record.map_or_else(
        || {
            item.title()
                .unwrap_or_else(|| format!("queue item {}", item.folder))
        },
        |r| r.title.clone(),
    );
    let state = match &item.state {
        Ok(state) => state,
        Err(e) => return unreadable(id, title, true, &e.to_string()),
    };
    let mut body = match (record, item.item_id()) {
        (Some(record), Some(item_id)) => render::item_record(item_id, record),
        _ => String::new(),
    };
    body.push_str(&render::loop_sections(state, item.config.as_ref(), now));
    shown(id, title, true, state, body)
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
    fn an_item_of_an_earlier_run_is_headed_by_its_title() {
        let mut state = LoopState::new(
            "s".into(),
            5,
            ralph_core::time::Timestamp::from_secs(1767225600),
        );
        state.queue_item = Some("US-001".into());
        state.task =
            Some("# Task\n\nGreet.\n\n---\n\n## Your item: Add hello.txt\n\nAs a user…\n".into());
        let item = ItemLoop {
            folder: "US-001".into(),
            state: Ok(state),
            config: None,
        };
        // The run now is another (or none): it does not list the item.
        let shown = shown_item(&item, None, 1767225700);
        assert_eq!(shown.title, "Add hello.txt");
    }

    #[test]
    fn a_running_queue_run_takes_notes_and_lists_what_is_left() {
        let dir = crate::testdir::new("serve-queue-run");
        let project = ProjectPaths::new(dir.path());
        std::fs::write(
            dir.path().join("PLAN.md"),
            "# Plan\n\n- [ ] write the docs\n  after: ship it\n- [ ] ship it\n",
        )
        .unwrap();
        let mut run = crate::testdir::queue_run_state();
        run.queue.as_mut().unwrap().source = "plan:PLAN.md".into();
        let shown = shown_main(&project, Ok(Some(run)), &[], 1767225700).unwrap();
        assert!(shown.live && shown.takes_notes, "{shown:?}");
        assert!(!shown.html.contains("how it ended"), "{}", shown.html);
        assert!(
            shown.html.contains(
                "<td class=\"title\">write the docs</td><td class=\"item-status\" data-status=\"waiting\">waiting</td>"
            ) && shown.html.contains(
                "<td class=\"title\">ship it</td><td class=\"item-status\" data-status=\"pending\">pending</td>"
            ),
            "{}",
            shown.html
        );
    }

    #[test]
    fn no_state_no_loop_shown() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = snapshot(&ProjectPaths::new(dir.path()), 1000);
        assert!(snapshot.loops.is_empty());
    }
}
