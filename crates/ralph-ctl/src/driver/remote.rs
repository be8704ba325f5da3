//! One backlog drained from several machines (`run --queue --remote NAME`):
//! the git remote every clone already shares is the lock. Each item has one
//! record on the remote, the ref `refs/ralph/queue/<source>/<item>`,
//! pointing at a commit (with no files) whose message holds the record as
//! JSON: who claims the item until when, then how it ended. Every change is
//! a push with a lease (`--force-with-lease=REF:EXPECTED`): it lands only
//! when the ref still holds what this worker last read, which the remote
//! checks under its own ref lock. Two machines that claim one item at once
//! both push; one push lands, the other is refused and its worker moves on.
//!
//! The remote's URL is read once, when the run starts, and used for every
//! fetch and push: the agent can write the repository's configuration
//! meanwhile, and no `remote.<name>.receivepack` or URL it wrote is used.
//! Only the transports git names safe run (`file`, `git`, `http(s)`,
//! `ssh`; never `ext::`).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ralph_core::observe::backlog::{Item, Source};
use ralph_core::persist::item_claims::ItemStatus;
use ralph_core::time::Timestamp;
use serde::{Deserialize, Serialize};

use super::say;
use crate::error::CtlError;

/// How long one git call on the remote may take before it is killed and
/// counted as the remote unreachable.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a change of the remote is tried again, with backoff, while the
/// remote cannot be reached, before the worker gives up on it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(600);

/// The longest wait between two tries of an unreachable remote.
const LONGEST_BACKOFF: Duration = Duration::from_secs(30);

/// The transports a fetch or push may use: not `ext::` (it runs a command
/// the URL names), nor anything git adds later.
const SAFE_PROTOCOLS: &str = "file:git:http:https:ssh";

/// The commit message's first line before the record.
const RECORD_HEAD: &str = "ralph queue record";

/// The remote as the run found it at its start.
#[derive(Clone, Debug)]
pub(crate) struct Remote {
    /// The main checkout.
    pub(crate) root: PathBuf,
    /// Its name (`origin`).
    pub(crate) name: String,
    /// Its URL, read once.
    pub(crate) url: String,
}

/// Why a change of the remote did not happen.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The remote refused it: the ref no longer holds what was read (another
    /// worker changed it), or a push to the base was not a fast-forward.
    Rejected(String),
    /// The remote could not be reached, or git failed on the way.
    Unreachable(String),
    /// The remote refuses such pushes at all (`[remote rejected]`: a hook,
    /// a protected ref, refs outside `refs/heads/` not allowed).
    Forbidden(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Rejected(why) => write!(f, "refused: {why}"),
            Refused::Unreachable(why) => write!(f, "unreachable: {why}"),
            Refused::Forbidden(why) => write!(f, "the remote refuses the push: {why}"),
        }
    }
}

impl Remote {
    /// The remote `name` of the repository at `root`, refused with the fix
    /// when the repository has none of that name.
    pub(crate) fn find(root: &Path, name: &str) -> Result<Remote, CtlError> {
        let valid = ralph_core::judge::config::validate_remote_name(name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                CtlError::BadArgument(format!(
                    "--remote {name:?} is not a remote's name: give one that `git remote` lists"
                ))
            })?;
        let key = format!("remote.{valid}.url");
        let url = super::worktree::git(root, &["config", "--get", &key]).map_err(|_| {
            CtlError::BadArgument(format!(
                "--remote {valid}: this repository has no remote of that name (`git remote -v` lists \
                 them; `git remote add {valid} URL` adds one)"
            ))
        })?;
        if url.starts_with("ext::") || url.starts_with('-') {
            return Err(CtlError::BadArgument(format!(
                "--remote {valid}: its URL {url:?} runs a command; give a remote reached over file, git, http(s) or ssh"
            )));
        }
        Ok(Remote {
            root: root.to_path_buf(),
            name: valid,
            url,
        })
    }

    /// git in the main checkout with the driver's safe configuration, the
    /// safe transports only, nothing asked of a person, and at most
    /// [`CALL_TIMEOUT`]: its stdout, or why not (its stderr).
    fn call(&self, args: &[&str]) -> Result<String, (String, String)> {
        let mut command = ralph_core::observe::progress::safe_git(
            &self.root,
            ralph_core::observe::progress::GIT_TIMEOUT,
        )
        .map_err(|why| (String::new(), format!("git cannot be run safely: {why}")))?;
        command
            .args(["-c", "protocol.ext.allow=never"])
            .args(args)
            .env("GIT_ALLOW_PROTOCOL", SAFE_PROTOCOLS)
            .env("GIT_SSH_COMMAND_BATCH", "1")
            .stdin(Stdio::null());
        run_within(command, CALL_TIMEOUT)
    }

    /// `git fetch` of `refspecs` from the remote (objects, and the refs the
    /// refspecs name), nothing else.
    pub(crate) fn fetch(&self, refspecs: &[&str]) -> Result<(), Refused> {
        let mut args = vec![
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            &self.url,
        ];
        args.extend_from_slice(refspecs);
        self.call(&args)
            .map(|_| ())
            .map_err(|(_, err)| Refused::Unreachable(one_line(&err)))
    }

    /// The remote's branch `base` as the remote has it now: its commit (as
    /// the remote names it, fetched), also set as `refs/remotes/<name>/<base>`
    /// for the person. The commit, not that ref, is what an item starts from
    /// and lands on: the agents of other items can write this repository's
    /// refs meanwhile, and a commit id is the remote's word.
    pub(crate) fn fetch_base(&self, base: &str) -> Result<String, Refused> {
        let wanted = format!("refs/heads/{base}");
        let out = self
            .call(&["ls-remote", "--refs", &self.url, &wanted])
            .map_err(|(_, err)| Refused::Unreachable(one_line(&err)))?;
        let commit = out
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .find(|(_, name)| *name == wanted)
            .map(|(sha, _)| sha.to_string())
            .ok_or_else(|| {
                Refused::Forbidden(format!("the remote has no branch {base} to land on"))
            })?;
        self.fetch(&[&commit])?;
        let _ = super::worktree::git(&self.root, &["update-ref", &self.tracking(base), &commit]);
        Ok(commit)
    }

    /// Where this machine keeps the remote's branch `base`.
    pub(crate) fn tracking(&self, base: &str) -> String {
        format!("refs/remotes/{}/{base}", self.name)
    }

    /// Pushes `refspecs`, each ref changed only when it holds what `leases`
    /// expects of it (`REF:EXPECTED`, an empty EXPECTED: the ref must not
    /// exist); `Ok` when every ref took its new value.
    pub(crate) fn push(&self, refspecs: &[&str], leases: &[String]) -> Result<(), Refused> {
        self.push_with(refspecs, leases, false)
    }

    /// [`Remote::push`], `--atomic` when `atomic`.
    fn push_with(&self, refspecs: &[&str], leases: &[String], atomic: bool) -> Result<(), Refused> {
        let mut args = vec!["push", "--porcelain", "--quiet", "--no-verify"];
        if atomic {
            args.push("--atomic");
        }
        let leases: Vec<String> = leases
            .iter()
            .map(|l| format!("--force-with-lease={l}"))
            .collect();
        args.extend(leases.iter().map(String::as_str));
        args.push(&self.url);
        args.extend_from_slice(refspecs);
        match self.call(&args) {
            Ok(_) => Ok(()),
            Err((out, err)) => {
                // `--porcelain` lists each ref: `!` before one refused.
                let refused: Vec<&str> = out.lines().filter(|l| l.starts_with('!')).collect();
                if err.contains("does not support --atomic") {
                    Err(Refused::Forbidden(one_line(&err)))
                } else if refused.is_empty() {
                    Err(Refused::Unreachable(one_line(&err)))
                } else if refused.iter().any(|l| forbidden(l)) {
                    Err(Refused::Forbidden(refused.join("; ")))
                } else {
                    Err(Refused::Rejected(refused.join("; ")))
                }
            }
        }
    }

    /// [`Remote::push`] of several refs at once, all or none (`--atomic`).
    pub(crate) fn push_atomic(&self, refspecs: &[&str], leases: &[String]) -> Result<(), Refused> {
        self.push_with(refspecs, leases, true)
    }

    /// Every ref under `prefix` on the remote, by name, with its commit.
    pub(crate) fn list(&self, prefix: &str) -> Result<BTreeMap<String, String>, Refused> {
        let pattern = format!("{prefix}*");
        let out = self
            .call(&["ls-remote", "--refs", &self.url, &pattern])
            .map_err(|(_, err)| Refused::Unreachable(one_line(&err)))?;
        Ok(out
            .lines()
            .filter_map(|line| {
                let (sha, name) = line.split_once('\t')?;
                Some((name.to_string(), sha.to_string()))
            })
            .collect())
    }
}

/// One item's record on the remote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    /// The item's id.
    pub(crate) item: String,
    /// Its title when claimed.
    #[serde(default)]
    pub(crate) title: String,
    /// Where it stands.
    pub(crate) status: ItemStatus,
    /// The worker that holds it or last held it: machine and worker.
    pub(crate) worker: String,
    /// The machine's name.
    #[serde(default)]
    pub(crate) machine: String,
    /// When that worker took it (its clock).
    pub(crate) claimed_at: Timestamp,
    /// When an unrenewed claim lapses (its clock).
    pub(crate) expires_at: Timestamp,
    /// How many times the item was claimed.
    pub(crate) claims: u32,
    /// Makes each record's commit its own, whoever writes it when.
    #[serde(default)]
    pub(crate) nonce: String,
    /// Why it ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
    /// The iterations its loop ran, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) iterations: Option<u32>,
    /// What its loop cost, in dollars, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cost_usd: Option<f64>,
    /// Its branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) branch: Option<String>,
    /// The base's commit it landed at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) landed: Option<String>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ended_at: Option<Timestamp>,
}

impl Record {
    /// Whether a worker may take the item at `now`.
    pub(crate) fn is_free(&self, now: Timestamp) -> bool {
        self.status == ItemStatus::Claimed && self.expires_at <= now
    }

    /// Whether a worker holds it at `now`.
    pub(crate) fn is_held(&self, now: Timestamp) -> bool {
        self.status == ItemStatus::Claimed && self.expires_at > now
    }
}

/// How an item ended, for its record.
#[derive(Clone, Debug, Default)]
pub(crate) struct Ending {
    /// Why.
    pub(crate) why: Option<String>,
    /// The iterations its loop ran.
    pub(crate) iterations: u32,
    /// What it cost, in dollars.
    pub(crate) cost_usd: f64,
    /// Its branch.
    pub(crate) branch: Option<String>,
    /// The base's commit it landed at.
    pub(crate) landed: Option<String>,
}

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

/// The records' ref prefix of `source` in the project at `root`: one per
/// backlog, the same on every clone however its source is spelled
/// (`plan:PLAN.md`, `plan:./PLAN.md`).
pub(crate) fn prefix_of(root: &Path, source: &Source) -> String {
    let spelled = match source {
        Source::Plan(path) => format!(
            "plan:{}",
            super::worktree::in_project(root, path)
                .unwrap_or_else(|| path.clone())
                .display()
        ),
        Source::Dir(path) => format!(
            "dir:{}",
            super::worktree::in_project(root, path)
                .unwrap_or_else(|| path.clone())
                .display()
        ),
        Source::Prd(path) => format!(
            "prd:{}",
            super::worktree::in_project(root, path)
                .unwrap_or_else(|| path.clone())
                .display()
        ),
        other => other.to_string(),
    };
    let mut hash = ralph_core::fnv::Fnv::new();
    hash.bytes(spelled.as_bytes());
    format!("refs/ralph/queue/{:012x}/", hash.finish() >> 16)
}

/// The last part of item `id`'s record ref: the id itself when it is a
/// plain name (ASCII letters, digits, `-` and `_`, at most 64, not starting
/// with `-`), else `sha256.` and the id's SHA-256 in hex. Any text maps to
/// a valid ref name, and two ids never share one: a plain name has no `.`,
/// and `a` and `a/b` are no longer a file and a folder of one another.
pub(crate) fn ref_component(id: &str) -> String {
    use sha2::{Digest, Sha256};
    if ralph_core::observe::backlog::is_plain_id(id) {
        return id.to_string();
    }
    let digest = Sha256::digest(id.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256.{hex}")
}

/// This machine's name, as the records say who works what.
pub(crate) fn machine_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_.".contains(*c))
        .take(64)
        .collect();
    if name.is_empty() {
        "machine".into()
    } else {
        name
    }
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
        let out = self
            .git(&args)
            .map_err(|e| Refused::Unreachable(e.to_string()))?;
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
        let mut command = ralph_core::observe::progress::safe_git(
            &self.remote.root,
            ralph_core::observe::progress::GIT_TIMEOUT,
        )
        .map_err(Refused::Unreachable)?;
        command.args(["cat-file", "--batch-check=%(objectname) %(objecttype)"]);
        let out = run_with_input(command, &input, CALL_TIMEOUT)
            .map_err(|(_, err)| Refused::Unreachable(one_line(&err)))?;
        Ok(out
            .lines()
            .filter_map(|line| line.strip_suffix(" missing"))
            .map(str::to_string)
            .collect())
    }

    /// git in the main checkout (local work: objects, refs).
    fn git(&self, args: &[&str]) -> Result<String, CtlError> {
        super::worktree::git(&self.remote.root, args)
    }

    /// `record` as a commit (no files) after `parent`; its id.
    fn commit(&self, record: &Record, parent: Option<&str>) -> Result<String, Refused> {
        let local = |e: CtlError| Refused::Unreachable(e.to_string());
        let tree = self.empty_tree().map_err(local)?;
        let message = format!(
            "{RECORD_HEAD}: {} {} by {}\n\n{}\n",
            record.item,
            record.status.as_str(),
            record.worker,
            serde_json::to_string_pretty(record).unwrap_or_default()
        );
        let mut command = ralph_core::observe::progress::safe_git(
            &self.remote.root,
            ralph_core::observe::progress::GIT_TIMEOUT,
        )
        .map_err(Refused::Unreachable)?;
        command.args([
            "-c",
            "user.name=ralph",
            "-c",
            "user.email=ralph@localhost",
            "commit-tree",
            &tree,
        ]);
        if let Some(parent) = parent {
            command.args(["-p", parent]);
        }
        command
            .args(["-m", &message])
            .env("GIT_AUTHOR_NAME", "ralph")
            .env("GIT_AUTHOR_EMAIL", "ralph@localhost")
            .env("GIT_COMMITTER_NAME", "ralph")
            .env("GIT_COMMITTER_EMAIL", "ralph@localhost")
            .stdin(Stdio::null());
        run_within(command, CALL_TIMEOUT)
            .map(|out| out.trim().to_string())
            .map_err(|(_, err)| Refused::Unreachable(one_line(&err)))
    }

    /// The empty tree, written to the repository (records carry no files).
    fn empty_tree(&self) -> Result<String, CtlError> {
        let mut command = ralph_core::observe::progress::safe_git(
            &self.remote.root,
            ralph_core::observe::progress::GIT_TIMEOUT,
        )
        .map_err(CtlError::Client)?;
        command.args(["hash-object", "-w", "-t", "tree", "--stdin"]);
        command.stdin(Stdio::null());
        run_within(command, CALL_TIMEOUT)
            .map(|out| out.trim().to_string())
            .map_err(|(_, err)| CtlError::Client(format!("git hash-object failed: {err}")))
    }

    /// Pushes `record` for its item, expecting the ref at `expected`
    /// (`None`: no record yet); the new commit.
    fn put(&self, record: &Record, expected: Option<&str>) -> Result<String, Refused> {
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
    fn claim_record(
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
        // Tried once: the renewal tries again within a second, and must
        // see the claim lapse while the remote stays out of reach.
        self.change_mine(id, None, |r| {
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
                if why.contains(&format!("{reference}\t[rejected] (stale info)")) =>
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

/// Whether a refused ref's `--porcelain` line says the remote takes no
/// such push at all (a hook, a protected ref), not that another push won
/// the race: a remote that loses the race for its own ref lock answers
/// `[remote rejected] (failed to update ref)`, `(failed to lock)` or, for
/// an atomic push, `(atomic transaction failed)`: a race lost like
/// `[rejected] (stale info)`.
fn forbidden(line: &str) -> bool {
    let raced = [
        "failed to update ref",
        "failed to lock",
        "cannot lock",
        "incorrect old value",
        // An atomic push whose ref transaction lost to another push.
        "atomic transaction failed",
    ];
    line.contains("[remote rejected]") && !raced.iter().any(|r| line.contains(r))
}

/// The record a commit message holds, when it is one ralph wrote.
fn parse_record(message: &str) -> Option<Record> {
    let rest = message.strip_prefix(RECORD_HEAD)?;
    let json = rest.split_once("\n\n")?.1;
    serde_json::from_str(json.trim()).ok()
}

/// A commit's first 12 digits.
pub(crate) fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// A value no other record shares.
fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// The first line of what git said.
fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.is_empty() {
        "git said nothing".into()
    } else {
        line.chars().take(300).collect()
    }
}

/// Runs `command` for at most `timeout`: its stdout, or (stdout, stderr)
/// when it failed or ran out of time.
fn run_within(command: Command, timeout: Duration) -> Result<String, (String, String)> {
    run_with_input(command, "", timeout)
}

/// [`run_within`], `input` written to its stdin.
fn run_with_input(
    mut command: Command,
    input: &str,
    timeout: Duration,
) -> Result<String, (String, String)> {
    command
        .stdin(if input.is_empty() {
            Stdio::null()
        } else {
            Stdio::piped()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command
        .spawn()
        .map_err(|e| (String::new(), format!("git cannot run: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        let input = input.to_string();
        thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, input.as_bytes());
        });
    }
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    match status {
        Some(status) if status.success() => Ok(out),
        Some(_) => Err((out, err)),
        None => Err((
            out,
            format!("git did not answer within {} s", timeout.as_secs()),
        )),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;

    /// A bare remote and `n` clones of it, each with one commit on main.
    pub(crate) fn clones(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("remote.git");
        sh(
            dir.path(),
            &["init", "-q", "--bare", "-b", "main", "remote.git"],
        );
        let first = dir.path().join("c0");
        sh(dir.path(), &["init", "-q", "-b", "main", "c0"]);
        std::fs::write(first.join("a.txt"), "a\n").unwrap();
        sh(&first, &["add", "-A"]);
        sh(&first, &["commit", "-q", "-m", "start"]);
        sh(
            &first,
            &["remote", "add", "origin", &bare.to_string_lossy()],
        );
        sh(&first, &["push", "-q", "origin", "main"]);
        let mut all = vec![first];
        for i in 1..n {
            let name = format!("c{i}");
            sh(dir.path(), &["clone", "-q", &bare.to_string_lossy(), &name]);
            all.push(dir.path().join(name));
        }
        (dir, all)
    }

    pub(crate) fn items(n: usize) -> Vec<Item> {
        (1..=n)
            .map(|i| Item {
                id: format!("item-{i}"),
                title: format!("task {i}"),
                body: String::new(),
                after: Vec::new(),
            })
            .collect()
    }

    pub(crate) fn book(root: &Path) -> RemoteBook {
        let remote = Remote::find(root, "origin").unwrap();
        RemoteBook::new(remote, &"plan:PLAN.md".parse().unwrap())
            .with_patience(Duration::from_secs(2))
    }

    const TTL: Duration = Duration::from_secs(60);

    #[test]
    fn two_clones_never_claim_one_item_and_each_sees_the_other_s_claims() {
        let (_dir, clones) = clones(2);
        let (a, b) = (book(&clones[0]), book(&clones[1]));
        let list = items(3);
        let first = a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
        let second = b.claim_next(&list, "2-1", TTL).unwrap().unwrap();
        assert_eq!(first.id, "item-1");
        assert_eq!(second.id, "item-2");
        let held = a.held(Timestamp::now()).unwrap();
        assert_eq!(held, vec!["item-1".to_string(), "item-2".to_string()]);
        // b's stale view of item-1 (read before a claimed it) is refused.
        let stale = b.claim_record(&list[0], "2-1", Timestamp::now(), TTL, None);
        assert!(matches!(b.put(&stale, None), Err(Refused::Rejected(_))));
        // A settled item is no one's to take; the records say who did what.
        assert!(a
            .settle(
                "item-1",
                ItemStatus::Done,
                &Ending {
                    iterations: 2,
                    landed: Some("abc".into()),
                    ..Ending::default()
                }
            )
            .unwrap());
        let records = b.read().unwrap();
        let (_, one) = &records["item-1"];
        assert_eq!(one.status, ItemStatus::Done);
        assert_eq!(one.iterations, Some(2));
        assert!(one.worker.ends_with("/1-1"), "{}", one.worker);
        assert_eq!(b.claim_next(&list[..1], "2-1", TTL).unwrap(), None);
    }

    #[test]
    fn an_item_whose_dependency_has_no_done_record_is_not_claimed() {
        let (_dir, clones) = clones(2);
        let (a, b) = (book(&clones[0]), book(&clones[1]));
        let mut list = items(2);
        list[0].after = vec!["item-2".into()];
        let first = a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
        assert_eq!(first.id, "item-2");
        // Held on the remote, not landed: item-1 waits, on every machine.
        assert_eq!(b.claim_next(&list, "2-1", TTL).unwrap(), None);
        a.settle("item-2", ItemStatus::Done, &Ending::default())
            .unwrap();
        let next = b.claim_next(&list, "2-1", TTL).unwrap().unwrap();
        assert_eq!(next.id, "item-1");
    }

    #[test]
    fn ids_of_any_text_are_claimed_each_under_a_ref_of_its_own() {
        let (_dir, clones) = clones(2);
        let (a, b) = (book(&clones[0]), book(&clones[1]));
        // Not valid in a ref, a file and a folder of one another, a ref's
        // own syntax, and text beyond ASCII.
        let ids = ["a b", "a", "a/b", "x..y.lock", "-dash", "élan", "sha256.00"];
        let list: Vec<Item> = ids
            .iter()
            .map(|id| Item {
                id: (*id).to_string(),
                title: format!("task {id}"),
                body: String::new(),
                after: Vec::new(),
            })
            .collect();
        let mut taken = Vec::new();
        for (n, book) in [&a, &b].iter().cycle().take(ids.len()).enumerate() {
            let item = book.claim_next(&list, &format!("{n}-1"), TTL).unwrap();
            taken.push(item.expect("an item is left to claim").id);
        }
        taken.sort();
        let mut want: Vec<String> = ids.iter().map(|s| (*s).to_string()).collect();
        want.sort();
        assert_eq!(taken, want);
        assert_eq!(a.claim_next(&list, "0-2", TTL).unwrap(), None);
        let records = b.read().unwrap();
        assert_eq!(records.keys().cloned().collect::<Vec<_>>(), want);
        assert_eq!(ref_component("item-1"), "item-1");
        assert!(ref_component("a b").starts_with("sha256."));
    }

    #[test]
    fn a_lapsed_claim_is_taken_over_once_and_its_holder_learns_it_lost_it() {
        let (_dir, clones) = clones(3);
        let (a, b, c) = (book(&clones[0]), book(&clones[1]), book(&clones[2]));
        let list = items(1);
        let short_ttl = Duration::from_secs(0);
        assert!(a.claim_next(&list, "1-1", short_ttl).unwrap().is_some());
        // Lapsed at once: b takes it over; c, reading after, finds it held.
        let taken = b.claim_next(&list, "2-1", TTL).unwrap();
        assert_eq!(taken.map(|i| i.id), Some("item-1".into()));
        assert_eq!(c.claim_next(&list, "3-1", TTL).unwrap(), None);
        // a's renewal is refused: its claim is lost, and it may not land.
        assert!(!a.renew("item-1", TTL).unwrap());
        let records = c.read().unwrap();
        assert_eq!(records["item-1"].1.claims, 2);
        assert!(records["item-1"].1.worker.ends_with("/2-1"));
        // b still holds it and renews it.
        assert!(b.renew("item-1", TTL).unwrap());
    }

    /// A commit on `clone`'s main, its id.
    fn commit_on(clone: &Path, file: &str) -> String {
        std::fs::write(clone.join(file), file).unwrap();
        sh(clone, &["add", "-A"]);
        sh(clone, &["commit", "-q", "-m", file]);
        crate::driver::worktree::git(clone, &["rev-parse", "HEAD"]).unwrap()
    }

    #[test]
    fn a_landing_moves_the_base_and_records_done_together_or_neither() {
        let (_dir, clones) = clones(3);
        let (a, b, c) = (book(&clones[0]), book(&clones[1]), book(&clones[2]));
        let list = items(2);
        let ending = Ending {
            why: Some("landed".into()),
            iterations: 1,
            ..Ending::default()
        };
        let base = |book: &RemoteBook| {
            book.remote().list("refs/heads/").unwrap()["refs/heads/main"].clone()
        };
        // a claims item-1 and lands it: base and record move together.
        a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
        let head = commit_on(&clones[0], "one.txt");
        assert_eq!(
            a.land("item-1", "main", &head, &ending).unwrap(),
            Landing::Landed
        );
        assert_eq!(base(&a), head);
        let (_, record) = &c.read().unwrap()["item-1"];
        assert_eq!(record.status, ItemStatus::Done);
        assert_eq!(record.landed.as_deref(), Some(head.as_str()));
        assert!(a.settle("item-1", ItemStatus::Done, &ending).unwrap());
        // b's item-2 was made on the old base: the push is refused as a
        // base moved on, and its record is untouched.
        b.claim_next(&list, "2-1", Duration::from_secs(0))
            .unwrap()
            .unwrap();
        let stale = commit_on(&clones[1], "two.txt");
        assert_eq!(
            b.land("item-2", "main", &stale, &ending).unwrap(),
            Landing::BaseMoved
        );
        assert_eq!(c.read().unwrap()["item-2"].1.status, ItemStatus::Claimed);
        // b's claim lapsed and c took it over: b's landing, even on the
        // right base, moves nothing.
        c.claim_next(&list, "3-1", TTL).unwrap().unwrap();
        sh(&clones[1], &["pull", "-q", "--rebase", "origin", "main"]);
        let rebased = crate::driver::worktree::git(&clones[1], &["rev-parse", "HEAD"]).unwrap();
        assert_eq!(
            b.land("item-2", "main", &rebased, &ending).unwrap(),
            Landing::ClaimLost
        );
        assert_eq!(base(&c), head);
        assert!(c.read().unwrap()["item-2"].1.worker.ends_with("/3-1"));
    }

    #[test]
    fn an_unreachable_remote_is_tried_again_then_named() {
        let (_dir, clones) = clones(1);
        let remote = Remote {
            root: clones[0].clone(),
            name: "origin".into(),
            url: clones[0]
                .join("no-such-remote.git")
                .to_string_lossy()
                .into_owned(),
        };
        let book = RemoteBook::new(remote, &"plan:PLAN.md".parse().unwrap())
            .with_patience(Duration::from_millis(1500));
        let started = Instant::now();
        let err = book.claim_next(&items(1), "1-1", TTL).unwrap_err();
        assert!(
            started.elapsed() >= Duration::from_secs(1),
            "tried again once"
        );
        assert!(matches!(err, Refused::Unreachable(_)), "{err:?}");
    }

    #[test]
    fn a_remote_that_refuses_refs_outside_its_branches_is_named_not_taken_for_a_race() {
        let (dir, clones) = clones(1);
        let hook = dir.path().join("remote.git/hooks/pre-receive");
        std::fs::write(
            &hook,
            "#!/bin/sh\nwhile read old new ref; do case $ref in refs/heads/*) ;; *) echo \"only branches\"; exit 1;; esac; done\n",
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let err = book(&clones[0])
            .claim_next(&items(2), "1-1", TTL)
            .unwrap_err();
        assert!(matches!(err, Refused::Forbidden(_)), "{err:?}");
    }

    #[test]
    fn a_remote_that_is_not_there_or_runs_a_command_is_refused_with_the_fix() {
        let (_dir, clones) = clones(1);
        let err = Remote::find(&clones[0], "upstream")
            .unwrap_err()
            .to_string();
        assert!(err.contains("git remote add upstream URL"), "{err}");
        sh(
            &clones[0],
            &["remote", "add", "evil", "ext::sh -c touch% /tmp/x"],
        );
        let err = Remote::find(&clones[0], "evil").unwrap_err().to_string();
        assert!(err.contains("runs a command"), "{err}");
        let err = Remote::find(&clones[0], "--upload-pack=x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a remote's name"), "{err}");
    }

    #[test]
    fn a_remote_that_lost_the_race_for_its_ref_lock_is_a_race_not_a_refusal() {
        let lost = "!\tabc:refs/ralph/queue/x/1\t[remote rejected] (failed to update ref)";
        assert!(!forbidden(lost));
        assert!(!forbidden(
            "!\tabc:refs/heads/main\t[remote rejected] (atomic transaction failed)"
        ));
        assert!(!forbidden(
            "!\tabc:refs/heads/main\t[rejected] (fetch first)"
        ));
        assert!(forbidden(
            "!\tabc:refs/ralph/queue/x/1\t[remote rejected] (pre-receive hook declined)"
        ));
    }

    #[test]
    fn a_record_whose_count_is_at_its_bound_is_taken_over_without_overflow() {
        let (_dir, clones) = clones(2);
        let (a, b) = (book(&clones[0]), book(&clones[1]));
        let list = items(1);
        // A record anyone with push access wrote: its count at the bound.
        let mut forged = a.claim_record(&list[0], "x-1", Timestamp::from_secs(0), TTL, None);
        forged.claims = u32::MAX;
        a.put(&forged, None).unwrap();
        b.claim_next(&list, "2-1", TTL)
            .unwrap()
            .expect("lapsed: taken");
        assert_eq!(b.read().unwrap()["item-1"].1.claims, u32::MAX);
    }

    #[test]
    fn one_backlog_has_one_prefix_however_its_source_is_spelled() {
        let root = Path::new("/p");
        let a = prefix_of(root, &"plan:PLAN.md".parse().unwrap());
        let b = prefix_of(root, &"plan:./PLAN.md".parse().unwrap());
        let c = prefix_of(root, &"plan:OTHER.md".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.starts_with("refs/ralph/queue/") && a.ends_with('/'));
    }
}
