//! Who works which item of a backlog: claims with a time to live, kept in
//! `.claude/context/runtime/ralph-queue.json` under a lock of their own,
//! so several workers (threads of one `ralph-ctl run --queue`, or several
//! such processes on one project) never work the same item. A worker renews
//! its claim while it works; a worker that dies releases nothing, and its
//! item is claimable again once the claim has expired.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::queue::source::Item;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::{atomic, lock};
use ralph_core::time::Timestamp;

/// The claims file's name, beside the loop's state.
pub(crate) const CLAIMS_FILE_NAME: &str = "ralph-queue.json";
/// The merge queue's lock file's name, beside the claims.
pub(crate) const MERGE_LOCK_FILE_NAME: &str = "ralph-merge.lock";
/// The worktrees' lock file's name, beside the claims.
pub(crate) const WORKTREE_LOCK_FILE_NAME: &str = "ralph-worktrees.lock";
/// The lock around fetching a shared remote's refs into the repository,
/// beside the claims.
pub(crate) const FETCH_LOCK_FILE_NAME: &str = "ralph-fetch.lock";
/// How long a worker waits for the claims lock before giving up.
pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an item stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ItemStatus {
    /// A worker holds it until `expiresAt` (renewed while it works).
    Claimed,
    /// Worked to its end and merged into the base.
    Done,
    /// Worked, but its branch could not land (a conflict, a failing
    /// verify): kept for a person.
    NeedsReview,
    /// The agent said to skip it.
    Skipped,
    /// Ended in errors past its budget.
    Failed,
}

impl ItemStatus {
    /// How it reads (as the claims file writes it).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ItemStatus::Claimed => "claimed",
            ItemStatus::Done => "done",
            ItemStatus::NeedsReview => "needs-review",
            ItemStatus::Skipped => "skipped",
            ItemStatus::Failed => "failed",
        }
    }
}

/// One item's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ItemRecord {
    /// Where it stands.
    pub(crate) status: ItemStatus,
    /// The worker that holds it, or last held it.
    pub(crate) worker: String,
    /// When that worker took it.
    pub(crate) claimed_at: Timestamp,
    /// When an unrenewed claim lapses (only for `claimed`).
    pub(crate) expires_at: Timestamp,
    /// How many times it was claimed (more than once: a worker died on it).
    pub(crate) claims: u32,
    /// Why it ended as it did (`needs-review`, `skipped`, `failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
}

/// Every item's record, by id.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Claims {
    /// The file's shape.
    pub(crate) schema_version: u32,
    /// By item id.
    pub(crate) items: BTreeMap<String, ItemRecord>,
}

impl Claims {
    /// Records `worker`'s claim on `id` until `now + ttl`, counting it.
    fn claim(&mut self, id: &str, worker: &str, now: Timestamp, ttl: Duration) {
        let claims_before = self.items.get(id).map_or(0, |r| r.claims);
        self.items.insert(
            id.to_string(),
            ItemRecord {
                status: ItemStatus::Claimed,
                worker: worker.to_string(),
                claimed_at: now,
                expires_at: Timestamp::from_secs(now.secs().saturating_add(ttl.as_secs())),
                claims: claims_before.saturating_add(1),
                why: None,
            },
        );
    }

    /// Whether `id` is free to take at `now`: never claimed, or claimed
    /// by a worker whose claim has lapsed.
    pub(crate) fn is_free(&self, id: &str, now: Timestamp) -> bool {
        match self.items.get(id) {
            None => true,
            Some(record) => record.status == ItemStatus::Claimed && record.expires_at <= now,
        }
    }

    /// The first of `item`'s dependencies that has not landed (no `done`
    /// record); `None` when it may be worked now.
    pub(crate) fn waits_on<'a>(&self, item: &'a Item) -> Option<&'a str> {
        item.after
            .iter()
            .find(|d| {
                self.items
                    .get(d.as_str())
                    .is_none_or(|r| r.status != ItemStatus::Done)
            })
            .map(String::as_str)
    }

    /// Every one of `item`'s dependencies that has not landed (no `done`
    /// record), in its order; empty when it may be worked now.
    pub(crate) fn missing<'a>(&self, item: &'a Item) -> Vec<&'a str> {
        item.after
            .iter()
            .filter(|d| {
                self.items
                    .get(d.as_str())
                    .is_none_or(|r| r.status != ItemStatus::Done)
            })
            .map(String::as_str)
            .collect()
    }

    /// Whether `item` may be taken at `now`: free, and every item it
    /// depends on landed.
    pub(crate) fn is_claimable(&self, item: &Item, now: Timestamp) -> bool {
        self.is_free(&item.id, now) && self.waits_on(item).is_none()
    }
}

/// Largest claims file read.
pub(crate) const MAX_CLAIMS_BYTES: u64 = 16 * 1024 * 1024;

/// Opens `path` with `options`, never through a symbolic link and never
/// waiting on a FIFO (Unix): the runtime folder is the project's, and a
/// planted link or pipe must neither redirect nor stall a worker.
fn open_plain(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    options.open(path)
}

/// Why the claims could not be read or changed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClaimError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] ralph_core::file_error::FileError),
    /// The claims file is not what ralph writes.
    #[error(
        "the queue's claims {path} are corrupt ({message}); move the file aside to start the queue's record afresh"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Another worker held the lock too long.
    #[error("timed out after {}s waiting for the lock on {path}; another ralph process may be stuck", LOCK_TIMEOUT.as_secs())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
    },
}

/// The claims of one project's backlog.
#[derive(Clone, Debug)]
pub(crate) struct ClaimStore {
    path: PathBuf,
    lock_path: PathBuf,
}

impl ClaimStore {
    /// The claims of the project at `paths`.
    pub(crate) fn new(paths: &ProjectPaths) -> ClaimStore {
        ClaimStore::at(paths.runtime_dir().join(CLAIMS_FILE_NAME))
    }

    /// Claims kept at `path` (the lock beside it).
    pub(crate) fn at(path: impl Into<PathBuf>) -> ClaimStore {
        let path = path.into();
        let lock_path = path.with_extension("lock");
        ClaimStore { path, lock_path }
    }

    /// The claims as they are (none yet: empty). Never through a link,
    /// never waiting on a FIFO, never more than [`MAX_CLAIMS_BYTES`].
    pub(crate) fn read(&self) -> Result<Claims, ClaimError> {
        let corrupt = |message: String| ClaimError::Corrupt {
            path: self.path.clone(),
            message,
        };
        let mut file = match open_plain(&self.path, OpenOptions::new().read(true)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Claims::default()),
            Err(source) => return Err(Self::io("read", &self.path, source)),
        };
        let meta = file
            .metadata()
            .map_err(|source| Self::io("read", &self.path, source))?;
        if !meta.is_file() {
            return Err(corrupt("not a regular file".into()));
        }
        if meta.len() > MAX_CLAIMS_BYTES {
            return Err(corrupt("larger than 16 MiB".into()));
        }
        let mut text = String::new();
        io::Read::read_to_string(&mut file, &mut text)
            .map_err(|source| Self::io("read", &self.path, source))?;
        serde_json::from_str(&text).map_err(|e| ClaimError::Corrupt {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Claims the first of `items` that is claimable (free, its
    /// dependencies landed: [`Claims::is_claimable`]) for `worker` until
    /// `now + ttl`; `None` when every item is taken, finished or waits on
    /// another.
    pub(crate) fn claim_next(
        &self,
        items: &[Item],
        worker: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<Option<Item>, ClaimError> {
        self.change(|claims| {
            let item = items.iter().find(|item| claims.is_claimable(item, now))?;
            claims.claim(&item.id, worker, now, ttl);
            Some(item.clone())
        })
    }

    /// Records `worker`'s claim on `id` until `now + ttl` whatever the file
    /// said (the claim was won elsewhere: on a shared remote, which decides
    /// who works what across machines; this file then mirrors it here).
    pub(crate) fn take(
        &self,
        id: &str,
        worker: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<(), ClaimError> {
        self.change(|claims| {
            claims.claim(id, worker, now, ttl);
        })
    }

    /// Extends `worker`'s claim on `id` to `now + ttl`; false when the
    /// claim is no longer its (it lapsed and another worker took the item,
    /// or the item was settled).
    pub(crate) fn renew(
        &self,
        id: &str,
        worker: &str,
        now: Timestamp,
        ttl: Duration,
    ) -> Result<bool, ClaimError> {
        self.change(|claims| match claims.items.get_mut(id) {
            Some(record) if record.status == ItemStatus::Claimed && record.worker == worker => {
                record.expires_at = Timestamp::from_secs(now.secs().saturating_add(ttl.as_secs()));
                true
            }
            _ => false,
        })
    }

    /// Records how `worker`'s item `id` ended; false (nothing changed) when
    /// the claim is no longer its.
    pub(crate) fn settle(
        &self,
        id: &str,
        worker: &str,
        status: ItemStatus,
        why: Option<String>,
    ) -> Result<bool, ClaimError> {
        self.change(|claims| match claims.items.get_mut(id) {
            Some(record) if record.status == ItemStatus::Claimed && record.worker == worker => {
                record.status = status;
                record.why = why;
                true
            }
            _ => false,
        })
    }

    /// Clears what a new run of the backlog works again: items that ended
    /// needing review, skipped or failed, and claims that lapsed. Items done
    /// stay done, and a live worker's claim stays its.
    pub(crate) fn forget_unfinished(&self, now: Timestamp) -> Result<(), ClaimError> {
        self.change(|claims| {
            claims.items.retain(|_, record| match record.status {
                ItemStatus::Done => true,
                ItemStatus::Claimed => record.expires_at > now,
                _ => false,
            });
        })
    }

    /// Gives `worker`'s claim on `id` up at once (a worker stopped by the
    /// person): the item is free again; false when it was not its.
    pub(crate) fn release(
        &self,
        id: &str,
        worker: &str,
        now: Timestamp,
    ) -> Result<bool, ClaimError> {
        self.change(|claims| match claims.items.get_mut(id) {
            Some(record) if record.status == ItemStatus::Claimed && record.worker == worker => {
                record.expires_at = now;
                true
            }
            _ => false,
        })
    }

    /// Runs `change` on the claims under the lock and writes them once,
    /// atomically, when it changed them.
    fn change<T>(&self, change: impl FnOnce(&mut Claims) -> T) -> Result<T, ClaimError> {
        let _lock = self.lock()?;
        let mut claims = self.read()?;
        let before = claims.clone();
        let result = change(&mut claims);
        if claims != before {
            claims.schema_version = 1;
            let bytes = serde_json::to_vec_pretty(&claims).map_err(|e| ClaimError::Corrupt {
                path: self.path.clone(),
                message: e.to_string(),
            })?;
            atomic::write_file(&self.path, &bytes, 0o600)
                .map_err(|source| Self::io("write", &self.path, source))?;
        }
        Ok(result)
    }

    /// The merge queue's lock (`ralph-merge.lock` beside the claims):
    /// one item lands at a time, across every worker and process on the
    /// project. Waits up to `patience` (a merge runs the project's verify);
    /// released when dropped.
    pub(crate) fn merge_lock(&self, patience: Duration) -> Result<File, ClaimError> {
        self.named_lock(MERGE_LOCK_FILE_NAME, patience)
    }

    /// The lock around adding and removing the project's worktrees
    /// (`ralph-worktrees.lock` beside the claims): two `git worktree add`
    /// at once in one repository can fail ("failed to read
    /// .git/worktrees/…/commondir"), and queue workers add them at once.
    pub(crate) fn worktree_lock(&self, patience: Duration) -> Result<File, ClaimError> {
        self.named_lock(WORKTREE_LOCK_FILE_NAME, patience)
    }

    /// The lock around fetching a shared remote's refs into the repository
    /// (`ralph-fetch.lock` beside the claims): two fetches that update one
    /// ref at once fail ("cannot lock ref").
    pub(crate) fn fetch_lock(&self, patience: Duration) -> Result<File, ClaimError> {
        self.named_lock(FETCH_LOCK_FILE_NAME, patience)
    }

    /// An exclusive lock on the file `name` beside the claims, waited for
    /// up to `patience`; released when dropped.
    fn named_lock(&self, name: &str, patience: Duration) -> Result<File, ClaimError> {
        let path = self.path.with_file_name(name);
        if let Some(folder) = path.parent() {
            fs::create_dir_all(folder).map_err(|source| Self::io("create", folder, source))?;
        }
        let file = open_plain(
            &path,
            OpenOptions::new().create(true).truncate(false).write(true),
        )
        .map_err(|source| Self::io("open", &path, source))?;
        match lock::exclusive_until(&file, Instant::now() + patience) {
            Ok(true) => Ok(file),
            Ok(false) => Err(ClaimError::LockTimeout { path }),
            Err(source) => Err(Self::io("lock", &path, source)),
        }
    }

    /// The exclusive lock on the claims (a file of its own, so a state
    /// transaction may run while a claim is taken); released when dropped.
    fn lock(&self) -> Result<File, ClaimError> {
        if let Some(folder) = self.lock_path.parent() {
            fs::create_dir_all(folder).map_err(|source| Self::io("create", folder, source))?;
        }
        let file = open_plain(
            &self.lock_path,
            OpenOptions::new().create(true).truncate(false).write(true),
        )
        .map_err(|source| Self::io("open", &self.lock_path, source))?;
        match lock::exclusive_until(&file, Instant::now() + LOCK_TIMEOUT) {
            Ok(true) => Ok(file),
            Ok(false) => Err(ClaimError::LockTimeout {
                path: self.lock_path.clone(),
            }),
            Err(source) => Err(Self::io("lock", &self.lock_path, source)),
        }
    }

    fn io(action: &'static str, path: &Path, source: io::Error) -> ClaimError {
        ClaimError::Io(ralph_core::file_error::FileError::new(action, path, source))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    use std::thread;

    fn items(n: usize) -> Vec<Item> {
        (1..=n)
            .map(|i| Item {
                author: None,
                id: format!("T-{i}"),
                title: format!("item {i}"),
                body: String::new(),
                after: Vec::new(),
            })
            .collect()
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn items_are_claimed_in_order_once_each_until_none_is_left() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = ClaimStore::at(dir.path().join(CLAIMS_FILE_NAME));
        let now = Timestamp::from_secs(1000);
        let all = items(2);
        let first = store.claim_next(&all, "a", now, TTL).unwrap().unwrap();
        let second = store.claim_next(&all, "b", now, TTL).unwrap().unwrap();
        assert_eq!((first.id.as_str(), second.id.as_str()), ("T-1", "T-2"));
        assert_eq!(store.claim_next(&all, "c", now, TTL).unwrap(), None);
        // Settled by its worker only.
        assert!(!store.settle("T-1", "b", ItemStatus::Done, None).unwrap());
        assert!(store.settle("T-1", "a", ItemStatus::Done, None).unwrap());
        let record = &store.read().unwrap().items["T-1"];
        assert_eq!((record.status, record.claims), (ItemStatus::Done, 1));
        // A finished item is never claimed again, even long after.
        let later = Timestamp::from_secs(1_000_000);
        let again = store.claim_next(&all, "d", later, TTL).unwrap().unwrap();
        assert_eq!(again.id, "T-2", "T-2's claim lapsed; T-1 is done");
    }

    #[test]
    fn a_new_run_forgets_all_but_done_items_and_live_claims() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = ClaimStore::at(dir.path().join(CLAIMS_FILE_NAME));
        let all = items(5);
        let at = Timestamp::from_secs;
        for worker in ["a", "b", "c", "d", "e"] {
            store.claim_next(&all, worker, at(1000), TTL).unwrap();
        }
        store.settle("T-1", "a", ItemStatus::Done, None).unwrap();
        store
            .settle("T-2", "b", ItemStatus::NeedsReview, Some("conflict".into()))
            .unwrap();
        store.settle("T-3", "c", ItemStatus::Failed, None).unwrap();
        store.release("T-4", "d", at(1000)).unwrap();
        // T-5's claim is still live at 1030.
        store.forget_unfinished(at(1030)).unwrap();
        let left: Vec<String> = store.read().unwrap().items.keys().cloned().collect();
        assert_eq!(left, ["T-1", "T-5"]);
        // What was forgotten is claimable again, in order; T-1 never.
        let next = store.claim_next(&all, "f", at(1030), TTL).unwrap().unwrap();
        assert_eq!(next.id, "T-2");
    }

    #[test]
    fn a_dead_worker_s_item_comes_back_after_its_ttl_and_renewal_keeps_it() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = ClaimStore::at(dir.path().join(CLAIMS_FILE_NAME));
        let all = items(1);
        let at = Timestamp::from_secs;
        store
            .claim_next(&all, "dead", at(1000), TTL)
            .unwrap()
            .unwrap();
        assert_eq!(store.claim_next(&all, "b", at(1059), TTL).unwrap(), None);
        let taken = store.claim_next(&all, "b", at(1060), TTL).unwrap();
        assert_eq!(taken.map(|i| i.id), Some("T-1".to_string()));
        // The dead worker, back, holds nothing.
        assert!(!store.renew("T-1", "dead", at(1061), TTL).unwrap());
        assert!(!store.settle("T-1", "dead", ItemStatus::Done, None).unwrap());
        // b renews past the first expiry and keeps it.
        assert!(store.renew("T-1", "b", at(1100), TTL).unwrap());
        assert_eq!(store.claim_next(&all, "c", at(1150), TTL).unwrap(), None);
        let record = &store.read().unwrap().items["T-1"];
        assert_eq!((record.worker.as_str(), record.claims), ("b", 2));
        // A time to live past what a time can hold lapses at its last second, never overflows.
        let far = store
            .claim_next(&items(2), "f", at(1150), Duration::MAX)
            .unwrap()
            .unwrap();
        assert_eq!(far.id, "T-2");
        let record = &store.read().unwrap().items["T-2"];
        assert_eq!(record.expires_at, Timestamp::from_secs(u64::MAX));
        // Released by the person's stop: free at once.
        assert!(store.release("T-1", "b", at(1151)).unwrap());
        assert!(
            store
                .claim_next(&all, "c", at(1151), TTL)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn workers_in_parallel_never_take_the_same_item() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join(CLAIMS_FILE_NAME);
        let all = Arc::new(items(40));
        let taken = Arc::new(Mutex::new(Vec::new()));
        let workers: Vec<_> = (0..8)
            .map(|w| {
                let (store, all, taken) =
                    (ClaimStore::at(&path), Arc::clone(&all), Arc::clone(&taken));
                thread::spawn(move || {
                    let now = Timestamp::from_secs(1000);
                    while let Some(item) =
                        store.claim_next(&all, &format!("w{w}"), now, TTL).unwrap()
                    {
                        taken.lock().unwrap().push(item.id);
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        let taken = taken.lock().unwrap();
        let unique: HashSet<&String> = taken.iter().collect();
        assert_eq!((taken.len(), unique.len()), (40, 40), "{taken:?}");
    }

    #[test]
    fn an_item_is_claimable_only_once_its_dependencies_landed() {
        let dir = tempfile::TempDir::new().unwrap();
        let store = ClaimStore::at(dir.path().join(CLAIMS_FILE_NAME));
        let now = Timestamp::from_secs(1000);
        let mut all = items(3);
        // T-1 waits on T-2, T-3 on T-1: the order is T-2, T-1, T-3.
        all[0].after = vec!["T-2".into()];
        all[2].after = vec!["T-1".into()];
        let first = store.claim_next(&all, "a", now, TTL).unwrap().unwrap();
        assert_eq!(first.id, "T-2");
        // T-2 is held, not landed: nothing else may start.
        assert_eq!(store.claim_next(&all, "b", now, TTL).unwrap(), None);
        // Ended any other way than done, it still holds its dependents back.
        store
            .settle("T-2", "a", ItemStatus::NeedsReview, None)
            .unwrap();
        assert_eq!(store.claim_next(&all, "b", now, TTL).unwrap(), None);
        store.forget_unfinished(now).unwrap();
        store.claim_next(&all, "a", now, TTL).unwrap().unwrap();
        store.settle("T-2", "a", ItemStatus::Done, None).unwrap();
        let second = store.claim_next(&all, "b", now, TTL).unwrap().unwrap();
        assert_eq!(second.id, "T-1");
        assert_eq!(store.claim_next(&all, "c", now, TTL).unwrap(), None);
        store.settle("T-1", "b", ItemStatus::Done, None).unwrap();
        let third = store.claim_next(&all, "c", now, TTL).unwrap().unwrap();
        assert_eq!(third.id, "T-3");
    }

    #[cfg(unix)]
    #[test]
    fn a_link_or_a_fifo_is_refused_not_followed_or_waited_on() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join(CLAIMS_FILE_NAME);
        let elsewhere = dir.path().join("elsewhere.json");
        fs::write(&elsewhere, "{}").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert!(ClaimStore::at(&path).read().is_err());
        fs::remove_file(&path).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(made.success());
        let said = ClaimStore::at(&path).read().unwrap_err().to_string();
        assert!(said.contains("not a regular file"), "{said}");
    }

    #[test]
    fn a_corrupt_file_is_named_with_the_fix() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join(CLAIMS_FILE_NAME);
        fs::write(&path, "{not json").unwrap();
        let error = ClaimStore::at(&path).claim_next(&items(1), "a", Timestamp::from_secs(1), TTL);
        let said = error.unwrap_err().to_string();
        assert!(
            said.contains("corrupt") && said.contains("move the file aside"),
            "{said}"
        );
    }
}
