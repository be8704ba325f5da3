//! The loops of a queue run's items as `serve` and `report --html` read
//! them: each folder under `runtime/queue/` that holds a state, read as
//! `status` reads it (without the lock; the store replaces the file whole),
//! and matched to the item of the run it works, so that both pages show an
//! item by its title and its run's record beside its own loop.

use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::state::{LoopState, QueueItem};
use ralph_core::paths::{ProjectPaths, QUEUE_DIR};
use ralph_core::persist::store::{StateStore, StoreError};

/// One item folder's loop.
pub(crate) struct ItemLoop {
    /// Its folder's name under `runtime/queue/`.
    pub(crate) folder: String,
    /// Its state as ralph can vouch for it, or why it cannot be used.
    pub(crate) state: Result<LoopState, StoreError>,
    /// What it is judged by (its pin), when that can be read.
    pub(crate) config: Option<Config>,
}

impl ItemLoop {
    /// The id of the run's item this loop works, as its state says.
    pub(crate) fn item_id(&self) -> Option<&str> {
        self.state.as_ref().ok()?.queue_item.as_deref()
    }

    /// The item's title as its loop's first text gave it (`## Your item:
    /// TITLE`), for an item the run now does not list (an earlier run's).
    pub(crate) fn title(&self) -> Option<String> {
        let task = self.state().and_then(|s| s.task.as_deref())?;
        task.lines()
            .find_map(|l| l.strip_prefix(crate::driver::item_text::TITLE_PREFIX))
            .map(|t| ralph_core::text::printable(t.trim()).into_owned())
            .filter(|t| !t.is_empty())
    }

    /// The state, when it could be read.
    pub(crate) fn state(&self) -> Option<&LoopState> {
        self.state.as_ref().ok()
    }
}

/// The item folders under `runtime/queue/` holding a state, by name.
pub(crate) fn folders(project: &ProjectPaths) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(project.runtime_dir().join(QUEUE_DIR)) else {
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

/// The loop in item folder `folder`, when it has a state (or one that
/// cannot be used).
pub(crate) fn read(project: &ProjectPaths, folder: &str) -> Option<ItemLoop> {
    let paths = project.for_item(folder);
    let state = match StateStore::new(&paths).read() {
        Ok(Some(state)) => Ok(crate::driver::finish::believed(&paths, state)),
        Ok(None) => return None,
        Err(e) => Err(e),
    };
    let config = state
        .as_ref()
        .ok()
        .and_then(|s| ralph_core::pin::loop_config(&paths, &ProcessEnv, s).ok());
    Some(ItemLoop {
        folder: folder.to_string(),
        state,
        config,
    })
}

/// Every item folder's loop, by folder name.
pub(crate) fn read_all(project: &ProjectPaths) -> Vec<ItemLoop> {
    folders(project)
        .iter()
        .filter_map(|folder| read(project, folder))
        .collect()
}

/// The run's record of the item `item` works, when `run` is the queue run
/// it belongs to.
pub(crate) fn record<'a>(run: Option<&'a LoopState>, item: &ItemLoop) -> Option<&'a QueueItem> {
    run?.queue.as_ref()?.items.get(item.item_id()?)
}

/// The items of `run`'s source that no worker has taken in it, in the
/// source's order, each with the items it waits on that have not landed;
/// those done in an earlier run left out. Read only from a source that is
/// a file (`plan:`, `dir:`, `prd:`): a page is never drawn by running a
/// command or a tracker's tool. Empty when there is none, or it cannot be
/// read.
pub(crate) fn pending(project: &ProjectPaths, run: &LoopState) -> Vec<crate::render::Pending> {
    use crate::queue::claims::store::{ClaimStore, ItemStatus};
    use crate::queue::source::Source;
    let Some(queue) = &run.queue else {
        return Vec::new();
    };
    let Ok(source) = queue.source.parse::<Source>() else {
        return Vec::new();
    };
    if !matches!(source, Source::Plan(_) | Source::Dir(_) | Source::Prd(_)) {
        return Vec::new();
    }
    let Ok(items) = source.read(&project.root) else {
        return Vec::new();
    };
    let claims = ClaimStore::new(project).read().unwrap_or_default();
    items
        .iter()
        .filter(|item| !queue.items.contains_key(&item.id))
        .filter(|item| {
            claims
                .items
                .get(&item.id)
                .is_none_or(|r| r.status != ItemStatus::Done)
        })
        .map(|item| crate::render::Pending {
            id: item.id.clone(),
            title: item.title.clone(),
            after: claims
                .missing(item)
                .into_iter()
                .map(str::to_string)
                .collect(),
        })
        .collect()
}
