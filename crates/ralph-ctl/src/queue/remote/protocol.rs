//! The claim protocol over the records ([`RemoteBook`]): an item claimed,
//! renewed, landed, settled or released by a push with a lease on its
//! record's last commit, so that of two machines that change one record
//! at once only one lands; tried again with backoff while the remote
//! cannot be reached.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::queue::claims::store::ItemStatus;
use crate::queue::source::{Item, Source};
use ralph_core::time::Timestamp;

use super::record::{Ending, Record, machine_name, nonce, parse_record, prefix_of, ref_component};
use super::transport::{Refused, Remote};
use crate::driver::say;
use crate::error::CtlError;

/// How long a change of the remote is tried again, with backoff, while the
/// remote cannot be reached, before the worker gives up on it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(600);

/// The longest wait between two tries of an unreachable remote.
const LONGEST_BACKOFF: Duration = Duration::from_secs(30);

/// The records of one backlog on the remote, and this machine's claims
/// among them.
#[derive(Clone)]
pub(crate) struct RemoteBook {
    remote: Remote,
    /// `refs/ralph/queue/<source>/`.
    prefix: String,
    machine: String,
    /// The records this machine's workers hold: item id to the commit last
    /// pushed, and the record it holds.
    mine: Arc<Mutex<HashMap<String, (String, Record)>>>,
    /// The items this machine landed, recorded done by the landing's push.
    settled: Arc<Mutex<std::collections::HashSet<String>>>,
    patience: Duration,
}

/// What came of an atomic landing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Landing {
    /// The base holds the item, and its record says done.
    Landed,
    /// Another machine landed first: fetch, rebase, check, try again.
    BaseMoved,
    /// The claim is another worker's now: nothing landed.
    ClaimLost,
}

impl RemoteBook {
    /// The records of `source`'s backlog on `remote`.
    pub(crate) fn new(remote: Remote, source: &Source) -> RemoteBook {
        let prefix = prefix_of(&remote.root, source);
        RemoteBook {
            remote,
            prefix,
            machine: machine_name(),
            mine: Arc::default(),
            settled: Arc::default(),
            patience: PATIENCE,
        }
    }

    /// Item `id`'s record ref ([`ref_component`]).
    fn reference(&self, id: &str) -> String {
        format!("{}{}", self.prefix, ref_component(id))
    }

    /// The same book, trying an unreachable remote for `patience` only.
    #[cfg(test)]
    pub(crate) fn with_patience(mut self, patience: Duration) -> RemoteBook {
        self.patience = patience;
        self
    }

    /// The same book (this machine's claims shared), reaching its records
    /// through `remote`.
    #[cfg(test)]
    pub(crate) fn reached_through(&self, remote: Remote) -> RemoteBook {
        RemoteBook {
            remote,
            ..self.clone()
        }
    }

    /// The remote.
    pub(crate) fn remote(&self) -> &Remote {
        &self.remote
    }

    /// A worker's name in the records: the machine, then the worker.
    pub(crate) fn worker(&self, local: &str) -> String {
        format!("{}/{local}", self.machine)
    }

    /// `op` until it is done or refused, trying again with backoff while
    /// the remote cannot be reached, saying so, for [`RemoteBook::patience`].
    pub(crate) fn patiently<T>(
        &self,
        what: &str,
        mut op: impl FnMut() -> Result<T, Refused>,
    ) -> Result<T, Refused> {
        let started = Instant::now();
        let mut wait = Duration::from_secs(1);
        loop {
            match op() {
                Err(Refused::Unreachable(why)) if started.elapsed() + wait < self.patience => {
                    say(&format!(
                        "remote {} unreachable while {what} ({why}); trying again in {} s",
                        self.remote.name,
                        wait.as_secs()
                    ));
                    thread::sleep(wait);
                    wait = (wait * 2).min(LONGEST_BACKOFF);
                }
                other => return other,
            }
        }
    }

    /// Every record of the backlog on the remote, by item id, with its
    /// commit. A record this build cannot read is left out, said once.
    pub(crate) fn read(&self) -> Result<BTreeMap<String, (String, Record)>, Refused> {
        let refs = self.remote.list(&self.prefix)?;
        let missing = self.missing(refs.values().map(String::as_str))?;
        let missing: Vec<&str> = missing.iter().map(String::as_str).collect();
        if !missing.is_empty() {
            self.remote.fetch(&missing)?;
        }
        let mut records = BTreeMap::new();
        if refs.is_empty() {
            return Ok(records);
        }
        let mut args = vec!["log", "--no-walk=unsorted", "--format=%H%x1f%B%x1e"];
        args.extend(refs.values().map(String::as_str));
        let out = self.git(&args).map_err(Refused::here)?;
        let by_sha: HashMap<&str, &str> = refs
            .iter()
            .map(|(name, sha)| (sha.as_str(), name.as_str()))
            .collect();
        for entry in out.split('\u{1e}') {
            let Some((sha, message)) = entry.trim().split_once('\u{1f}') else {
                continue;
            };
            let Some(name) = by_sha.get(sha) else {
                continue;
            };
            let part = name.trim_start_matches(&self.prefix);
            match parse_record(message) {
                // A record made before ids were encoded keeps the id itself.
                Some(record) if ref_component(&record.item) == part || record.item == part => {
                    records.insert(record.item.clone(), (sha.to_string(), record));
                }
                _ => say(&format!(
                    "warning: the queue record {name} on remote {} is not one ralph wrote; it is left alone",
                    self.remote.name
                )),
            }
        }
        Ok(records)
    }

    /// Which of `commits` this repository does not have yet (one git call).
    fn missing<'a>(&self, commits: impl Iterator<Item = &'a str>) -> Result<Vec<String>, Refused> {
        let input: String = commits.map(|c| format!("{c}\n")).collect();
        if input.is_empty() {
            return Ok(Vec::new());
        }
        let out = self
            .remote
            .local()?
            .args(["cat-file", "--batch-check=%(objectname) %(objecttype)"])
            .input(input)
            .run()
            .map_err(|e| Refused::Unreachable(e.into()))?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.strip_suffix(" missing"))
            .map(str::to_string)
            .collect())
    }

    /// git in the main checkout (local work: objects, refs).
    fn git(&self, args: &[&str]) -> Result<String, CtlError> {
        crate::driver::worktree::git(&self.remote.root, args)
    }

    /// `record` as a commit (no files) after `parent`; its id.
    fn commit(&self, record: &Record, parent: Option<&str>) -> Result<String, Refused> {
        let tree = self.empty_tree().map_err(Refused::here)?;
        let message = record.message();
        let mut command = self
            .remote
            .local()?
            .config("user.name=ralph")
            .config("user.email=ralph@localhost")
            .args(["commit-tree", &tree]);
        if let Some(parent) = parent {
            command = command.args(["-p", parent]);
        }
        command
            .args(["-m", &message])
            .env("GIT_AUTHOR_NAME", "ralph")
            .env("GIT_AUTHOR_EMAIL", "ralph@localhost")
            .env("GIT_COMMITTER_NAME", "ralph")
            .env("GIT_COMMITTER_EMAIL", "ralph@localhost")
            .text()
            .map_err(|e| Refused::Unreachable(e.into()))
    }

    /// The empty tree, written to the repository (records carry no files).
    fn empty_tree(&self) -> Result<String, CtlError> {
        self.remote
            .local()
            .and_then(|git| {
                git.args(["hash-object", "-w", "-t", "tree", "--stdin"])
                    .text()
            })
            .map_err(CtlError::git("git hash-object of the empty tree"))
    }

    /// Pushes `record` for its item, expecting the ref at `expected`
    /// (`None`: no record yet); the new commit.
    pub(super) fn put(&self, record: &Record, expected: Option<&str>) -> Result<String, Refused> {
        let sha = self.commit(record, expected)?;
        let reference = self.reference(&record.item);
        self.remote.push(
            &[&format!("{sha}:{reference}")],
            &[format!("{reference}:{}", expected.unwrap_or(""))],
        )?;
        Ok(sha)
    }

    /// A new record of this machine's for `item`, claimed by `worker` until
    /// `now + ttl`, after `before` (the record it takes over).
    pub(super) fn claim_record(
        &self,
        item: &Item,
        worker: &str,
        now: Timestamp,
        ttl: Duration,
        before: Option<&Record>,
    ) -> Record {
        Record {
            item: item.id.clone(),
            title: item.title.clone(),
            status: ItemStatus::Claimed,
            worker: self.worker(worker),
            machine: self.machine.clone(),
            claimed_at: now,
            expires_at: Timestamp::from_secs(now.secs().saturating_add(ttl.as_secs())),
            claims: before.map_or(0, |r| r.claims).saturating_add(1),
            nonce: nonce(),
            why: None,
            iterations: None,
            cost_usd: None,
            branch: None,
            landed: None,
            ended_at: None,
        }
    }

    /// Claims the first of `items` that is free on the remote for `worker`
    /// until `now + ttl` (a lease on its record: a record another worker
    /// wrote since it was read refuses the push, and the next item is
    /// tried). `None`: no item is free.
    pub(crate) fn claim_next(
        &self,
        items: &[Item],
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Item>, Refused> {
        for _round in 0..3 {
            let records = self.patiently("reading the queue's claims", || self.read())?;
            let now = Timestamp::now();
            let mut refused = false;
            for item in items {
                let before = records.get(&item.id);
                if before.is_some_and(|(_, r)| !r.is_free(now)) {
                    continue;
                }
                // Claimable once every item it depends on landed (done here).
                let landed = |id: &String| {
                    records
                        .get(id)
                        .is_some_and(|(_, r)| r.status == ItemStatus::Done)
                };
                if !item.after.iter().all(landed) {
                    continue;
                }
                let record = self.claim_record(item, worker, now, ttl, before.map(|(_, r)| r));
                let expected = before.map(|(sha, _)| sha.as_str());
                match self.put(&record, expected) {
                    Ok(sha) => {
                        self.mine_set(&item.id, sha, record);
                        return Ok(Some(item.clone()));
                    }
                    Err(Refused::Rejected(_)) => refused = true,
                    Err(unreachable) => return Err(unreachable),
                }
            }
            if !refused {
                return Ok(None);
            }
        }
        Ok(None)
    }

    /// Changes this machine's record of `id` with `change`, under a lease
    /// on the commit last pushed (tried again while the remote cannot be
    /// reached, saying `what`, when there is one): `Ok(false)` when another
    /// worker changed it since (the claim is lost), `Err` when the remote
    /// stays unreachable.
    fn change_mine(
        &self,
        id: &str,
        what: Option<&str>,
        change: impl Fn(&mut Record),
    ) -> Result<bool, Refused> {
        let Some((sha, mut record)) = self.mine_get(id) else {
            return Ok(false);
        };
        change(&mut record);
        record.nonce = nonce();
        let put = || self.put(&record, Some(&sha));
        let pushed = match what {
            Some(what) => self.patiently(what, put),
            None => put(),
        };
        match pushed {
            Ok(new) => {
                if record.status == ItemStatus::Claimed && record.expires_at > Timestamp::now() {
                    self.mine_set(id, new, record);
                } else {
                    self.mine_drop(id);
                }
                Ok(true)
            }
            Err(Refused::Rejected(_)) => {
                self.mine_drop(id);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Extends this machine's claim on `id` to `now + ttl`; false when it
    /// is no longer its.
    pub(crate) fn renew(&self, id: &str, ttl: Duration) -> Result<bool, Refused> {
        let now = Timestamp::now();
        // Tried once, and given no longer than the claim has left: the
        // renewal tries again within a second, and must see the claim lapse
        // while the remote stays out of reach, not after a call that hung.
        let left = self.expires(id).map_or(Duration::ZERO, |at| {
            Duration::from_secs(at.secs().saturating_sub(now.secs()))
        });
        let bounded = RemoteBook {
            remote: self
                .remote
                .within(left.clamp(Duration::from_secs(1), self.remote.timeout)),
            ..self.clone()
        };
        bounded.change_mine(id, None, |r| {
            r.expires_at = Timestamp::from_secs(now.secs().saturating_add(ttl.as_secs()));
        })
    }

    /// When this machine's claim on `id` lapses, as last pushed.
    pub(crate) fn expires(&self, id: &str) -> Option<Timestamp> {
        self.mine_get(id).map(|(_, r)| r.expires_at)
    }

    /// Lands `head` on the remote's branch `base` and records this
    /// machine's item `id` done there, in one atomic push: the base moves
    /// (never forced) only if the item's record is still this worker's
    /// claim, and the record says done only if the base moved. So an item
    /// never lands without its record, nor twice.
    pub(crate) fn land(
        &self,
        id: &str,
        base: &str,
        head: &str,
        ending: &Ending,
    ) -> Result<Landing, Refused> {
        let Some((sha, mut record)) = self.mine_get(id) else {
            return Ok(Landing::ClaimLost);
        };
        record.status = ItemStatus::Done;
        record.why = ending.why.clone();
        record.iterations = Some(ending.iterations);
        record.cost_usd = Some(ending.cost_usd);
        record.branch = None;
        record.landed = Some(head.to_string());
        record.ended_at = Some(Timestamp::now());
        record.nonce = nonce();
        let commit = self.commit(&record, Some(&sha))?;
        let reference = self.reference(id);
        let pushed = self.remote.push_atomic(
            &[
                &format!("{head}:refs/heads/{base}"),
                &format!("{commit}:{reference}"),
            ],
            &[format!("{reference}:{sha}")],
        );
        match pushed {
            Ok(()) => {
                self.mine_drop(id);
                if let Ok(mut settled) = self.settled.lock() {
                    settled.insert(id.to_string());
                }
                Ok(Landing::Landed)
            }
            // The record's lease failed: another worker holds the item.
            Err(Refused::Rejected(why))
                if why
                    .to_string()
                    .contains(&format!("{reference}\t[rejected] (stale info)")) =>
            {
                self.mine_drop(id);
                Ok(Landing::ClaimLost)
            }
            Err(Refused::Rejected(_)) => Ok(Landing::BaseMoved),
            Err(e) => Err(e),
        }
    }

    /// Records how this machine's item `id` ended; false when the claim was
    /// no longer its.
    pub(crate) fn settle(
        &self,
        id: &str,
        status: ItemStatus,
        ending: &Ending,
    ) -> Result<bool, Refused> {
        // Landed: recorded by the landing's own push.
        if self.settled.lock().is_ok_and(|s| s.contains(id)) {
            return Ok(true);
        }
        let now = Timestamp::now();
        self.change_mine(id, Some("recording an item's end"), |r| {
            r.status = status;
            r.why = ending.why.clone();
            r.iterations = Some(ending.iterations);
            r.cost_usd = Some(ending.cost_usd);
            r.branch = ending.branch.clone();
            r.landed = ending.landed.clone();
            r.ended_at = Some(now);
        })
    }

    /// Gives this machine's claim on `id` up at once: free for any worker.
    pub(crate) fn release(&self, id: &str) -> Result<bool, Refused> {
        let now = Timestamp::now();
        self.change_mine(id, Some("releasing a claim"), |r| r.expires_at = now)
    }

    /// The items any worker anywhere holds at `now`.
    pub(crate) fn held(&self, now: Timestamp) -> Result<Vec<String>, Refused> {
        let records = self.patiently("reading the queue's claims", || self.read())?;
        Ok(records
            .into_iter()
            .filter(|(_, (_, r))| r.is_held(now))
            .map(|(id, _)| id)
            .collect())
    }

    /// Removes the records of `ids` that did not end done (each under a
    /// lease on the record read), so that workers take them again; the
    /// ids removed.
    pub(crate) fn forget(&self, ids: &[String]) -> Result<Vec<String>, Refused> {
        let records = self.patiently("reading the queue's claims", || self.read())?;
        let now = Timestamp::now();
        let mut forgotten = Vec::new();
        for (id, (sha, record)) in records {
            let wanted = ids.is_empty() || ids.contains(&id);
            if !wanted || record.status == ItemStatus::Done || record.is_held(now) {
                continue;
            }
            let reference = self.reference(&id);
            match self
                .remote
                .push(&[&format!(":{reference}")], &[format!("{reference}:{sha}")])
            {
                Ok(()) => forgotten.push(id),
                Err(Refused::Rejected(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(forgotten)
    }

    fn mine_get(&self, id: &str) -> Option<(String, Record)> {
        self.mine.lock().ok()?.get(id).cloned()
    }

    fn mine_set(&self, id: &str, sha: String, record: Record) {
        if let Ok(mut mine) = self.mine.lock() {
            mine.insert(id.to_string(), (sha, record));
        }
    }

    fn mine_drop(&self, id: &str) {
        if let Ok(mut mine) = self.mine.lock() {
            mine.remove(id);
        }
    }
}
