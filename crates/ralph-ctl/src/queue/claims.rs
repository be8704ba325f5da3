//! Who works which item of a queue run: the project's claims file alone
//! (one machine), or with `--remote` the records on the shared git remote
//! as well (`remote`), which decide across processes and machines while the
//! file mirrors this machine's share, so that `ralph-ctl queue` and the
//! workers of one process see it at once.

pub(crate) mod store;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::queue::claims::store::{ClaimStore, ItemStatus};
use crate::queue::source::Item;
use ralph_core::time::Timestamp;

use crate::error::{CtlError, RemoteDoing};
use crate::queue::remote::{Ending, Refused, RemoteBook};

/// A queue run's claims.
#[derive(Clone)]
pub(crate) struct ClaimBook {
    /// The project's claims file (and the locks beside it).
    pub(crate) local: ClaimStore,
    /// The shared remote's records, with `--remote`.
    pub(crate) remote: Option<RemoteBook>,
}

/// What came of renewing a claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Still this worker's.
    Kept,
    /// Another worker holds it now, or it lapsed while the remote could not
    /// be reached: the item must stop.
    Lost,
    /// The remote could not be reached; the claim has not lapsed yet.
    Unsure,
}

impl ClaimBook {
    /// A refusal of the remote as the run's error, its cause kept.
    fn said(&self, refused: Refused) -> CtlError {
        let name = self
            .remote
            .as_ref()
            .map_or(String::new(), |b| b.remote().name.clone());
        CtlError::Remote {
            name,
            doing: RemoteDoing::Draining,
            source: refused,
        }
    }

    /// Claims the first free item of `items` for `worker` until `now + ttl`.
    /// With a remote, an item this machine's workers hold is not asked for.
    pub(crate) fn claim_next(
        &self,
        items: &[Item],
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Item>, CtlError> {
        let now = Timestamp::now();
        let Some(book) = &self.remote else {
            return Ok(self.local.claim_next(items, worker, now, ttl)?);
        };
        let here = self.local.read()?;
        let candidates: Vec<Item> = items
            .iter()
            .filter(|item| {
                here.items
                    .get(&item.id)
                    .is_none_or(|r| !(r.status == ItemStatus::Claimed && r.expires_at > now))
            })
            .cloned()
            .collect();
        let won = book
            .claim_next(&candidates, worker, ttl)
            .map_err(|e| self.said(e))?;
        if let Some(item) = &won {
            self.local.take(&item.id, worker, Timestamp::now(), ttl)?;
        }
        Ok(won)
    }

    /// Renews `worker`'s claim on `id` until `now + ttl`.
    pub(crate) fn renew(&self, id: &str, worker: &str, ttl: Duration) -> Renewed {
        let local = self.local.renew(id, worker, Timestamp::now(), ttl);
        let Some(book) = &self.remote else {
            return match local {
                Ok(false) => Renewed::Lost,
                _ => Renewed::Kept,
            };
        };
        match book.renew(id, ttl) {
            Ok(true) => Renewed::Kept,
            Ok(false) => Renewed::Lost,
            Err(_) if book.expires(id).is_none_or(|at| at <= Timestamp::now()) => Renewed::Lost,
            Err(_) => Renewed::Unsure,
        }
    }

    /// Records how `worker`'s item `id` ended; false when the claim was no
    /// longer its (on the remote, when there is one).
    pub(crate) fn settle(
        &self,
        id: &str,
        worker: &str,
        status: ItemStatus,
        ending: &Ending,
    ) -> Result<bool, CtlError> {
        let here = self.local.settle(id, worker, status, ending.why.clone())?;
        match &self.remote {
            None => Ok(here),
            Some(book) => book.settle(id, status, ending).map_err(|e| self.said(e)),
        }
    }

    /// Gives `worker`'s claim on `id` up: the item is free again at once.
    pub(crate) fn release(&self, id: &str, worker: &str) -> Result<bool, CtlError> {
        let here = self.local.release(id, worker, Timestamp::now())?;
        match &self.remote {
            None => Ok(here),
            Some(book) => book.release(id).map_err(|e| self.said(e)),
        }
    }

    /// The items any worker holds now (with a remote: anywhere).
    pub(crate) fn held(&self) -> Result<Vec<String>, CtlError> {
        let now = Timestamp::now();
        let mut held: Vec<String> = self
            .local
            .read()?
            .items
            .into_iter()
            .filter(|(_, r)| r.status == ItemStatus::Claimed && r.expires_at > now)
            .map(|(id, _)| id)
            .collect();
        if let Some(book) = &self.remote {
            held.extend(book.held(now).map_err(|e| self.said(e))?);
            held.sort();
            held.dedup();
        }
        Ok(held)
    }

    /// The remote's branch `base` fetched (one fetch at a time on this
    /// machine), tried again while the remote cannot be reached: the ref
    /// that holds it here. `None` without a remote.
    pub(crate) fn fetch_base(&self, base: &str) -> Option<Result<String, Refused>> {
        let book = self.remote.as_ref()?;
        Some(book.patiently("fetching the base", || {
            let _held = self
                .local
                .fetch_lock(Duration::from_secs(120))
                .map_err(Refused::here)?;
            book.remote().fetch_base(base)
        }))
    }
}

/// A worker's claim kept alive while its item is worked: renewed every
/// third of the time to live, by a thread of its own (every second while
/// the remote cannot be reached). A claim lost (another worker holds it,
/// or it lapsed while the remote stayed out of reach) runs `on_lost` once
/// and is not renewed again: the item must stop, and must not land.
pub(crate) struct Renewal {
    stop: Arc<AtomicBool>,
    lost: Arc<AtomicBool>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Renewal {
    /// Starts renewing `worker`'s claim on `id` in `book`.
    pub(crate) fn start(
        book: ClaimBook,
        id: &str,
        worker: &str,
        ttl: Duration,
        on_lost: impl FnOnce() + Send + 'static,
    ) -> Renewal {
        let stop = Arc::new(AtomicBool::new(false));
        let lost = Arc::new(AtomicBool::new(false));
        let (flag, lost_flag) = (Arc::clone(&stop), Arc::clone(&lost));
        let (id, worker) = (id.to_string(), worker.to_string());
        let every = (ttl / 3).max(Duration::from_secs(1));
        let handle = thread::spawn(move || {
            let mut last = Instant::now();
            let mut due = every;
            while !flag.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(100));
                if last.elapsed() < due {
                    continue;
                }
                match book.renew(&id, &worker, ttl) {
                    Renewed::Kept => due = every,
                    Renewed::Unsure => due = Duration::from_secs(1),
                    Renewed::Lost => {
                        crate::driver::say(&format!(
                            "worker {worker}: its claim on item {id} lapsed before it was renewed; \
                             another worker may hold it now, and this one stops it"
                        ));
                        lost_flag.store(true, Ordering::SeqCst);
                        on_lost();
                        return;
                    }
                }
                last = Instant::now();
            }
        });
        Renewal {
            stop,
            lost,
            handle: Some(handle),
        }
    }

    /// Stops renewing; whether the claim was lost meanwhile.
    pub(crate) fn stop(mut self) -> bool {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
        self.lost.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::paths::ProjectPaths;

    #[test]
    fn a_worker_s_claim_is_renewed_while_it_works_and_not_after() {
        let dir = crate::testdir::new("renewal");
        let paths = ProjectPaths::new(dir.path());
        let claims = ClaimStore::new(&paths);
        let items = [Item {
            author: None,
            id: "a".into(),
            title: "A".into(),
            body: String::new(),
            after: Vec::new(),
        }];
        let ttl = Duration::from_secs(3);
        let claimed = claims
            .claim_next(&items, "w-1", Timestamp::now(), ttl)
            .unwrap()
            .expect("item a");
        let expiry = || claims.read().unwrap().items["a"].expires_at;
        let first = expiry();
        let book = ClaimBook {
            local: claims.clone(),
            remote: None,
        };
        let renewal = Renewal::start(book, &claimed.id, "w-1", ttl, || {});
        // Renewed every third of the time to live (at least every second).
        std::thread::sleep(Duration::from_millis(1300));
        assert!(!renewal.stop(), "not lost");
        let renewed = expiry();
        assert!(renewed > first, "{renewed} after {first}");
        std::thread::sleep(Duration::from_millis(1300));
        assert_eq!(expiry(), renewed);
    }

    #[test]
    fn a_remote_out_of_reach_keeps_a_claim_until_it_lapses_then_loses_it() {
        use crate::queue::remote::tests::{book, clones, items};
        let (dir, clones) = clones(1);
        let remote = book(&clones[0]);
        let local = ClaimStore::new(&ProjectPaths::new(&clones[0]));
        let claims = ClaimBook {
            local,
            remote: Some(remote),
        };
        let list = items(2);
        let ttl = Duration::from_secs(60);
        claims.claim_next(&list[..1], "1-1", ttl).unwrap().unwrap();
        claims
            .claim_next(&list[1..], "1-2", Duration::from_secs(0))
            .unwrap()
            .unwrap();
        assert_eq!(claims.renew("item-1", "1-1", ttl), Renewed::Kept);
        // The remote goes away: a claim not lapsed yet may still be this
        // worker's; one lapsed is lost (another machine may take it).
        std::fs::rename(dir.path().join("remote.git"), dir.path().join("gone.git")).unwrap();
        assert_eq!(claims.renew("item-1", "1-1", ttl), Renewed::Unsure);
        assert_eq!(claims.renew("item-2", "1-2", ttl), Renewed::Lost);
    }

    #[test]
    fn a_claim_taken_over_stops_its_item_once() {
        let dir = crate::testdir::new("renewal-lost");
        let paths = ProjectPaths::new(dir.path());
        let claims = ClaimStore::new(&paths);
        let items = [Item {
            author: None,
            id: "a".into(),
            title: "A".into(),
            body: String::new(),
            after: Vec::new(),
        }];
        let ttl = Duration::from_secs(3);
        claims
            .claim_next(&items, "w-1", Timestamp::now(), Duration::from_secs(0))
            .unwrap();
        // Another worker took the lapsed claim.
        claims
            .claim_next(&items, "w-2", Timestamp::now(), ttl)
            .unwrap()
            .expect("taken over");
        let book = ClaimBook {
            local: claims,
            remote: None,
        };
        let stopped = Arc::new(AtomicBool::new(false));
        let told = Arc::clone(&stopped);
        let renewal = Renewal::start(book, "a", "w-1", ttl, move || {
            told.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(Duration::from_millis(1300));
        assert!(renewal.stop(), "lost");
        assert!(stopped.load(Ordering::SeqCst));
    }
}
