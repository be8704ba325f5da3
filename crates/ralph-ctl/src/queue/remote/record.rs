//! A queue item's record on the remote: what it holds ([`Record`]), how a
//! commit message carries it, and the ref it lives at (one prefix per
//! backlog, [`prefix_of`]; one name per item id, [`ref_component`]).

use std::path::Path;

use crate::queue::claims::store::ItemStatus;
use crate::queue::source::Source;
use ralph_core::time::Timestamp;
use serde::{Deserialize, Serialize};

/// The commit message's first line before the record.
const RECORD_HEAD: &str = "ralph queue record";

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
    /// The commit message that carries the record: a line a person reads
    /// in `git log`, then the record as JSON ([`parse_record`] reads it).
    pub(crate) fn message(&self) -> String {
        format!(
            "{RECORD_HEAD}: {} {} by {}\n\n{}\n",
            self.item,
            self.status.as_str(),
            self.worker,
            serde_json::to_string_pretty(self).unwrap_or_default()
        )
    }

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

/// The records' ref prefix of `source` in the project at `root`: one per
/// backlog, the same on every clone however its source is spelled
/// (`plan:PLAN.md`, `plan:./PLAN.md`).
pub(crate) fn prefix_of(root: &Path, source: &Source) -> String {
    let spelled = match source {
        Source::Plan(path) => format!(
            "plan:{}",
            crate::driver::worktree::in_project(root, path)
                .unwrap_or_else(|| path.clone())
                .display()
        ),
        Source::Dir(path) => format!(
            "dir:{}",
            crate::driver::worktree::in_project(root, path)
                .unwrap_or_else(|| path.clone())
                .display()
        ),
        Source::Prd(path) => format!(
            "prd:{}",
            crate::driver::worktree::in_project(root, path)
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
    if crate::queue::source::is_plain_id(id) {
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

/// The record a commit message holds, when it is one ralph wrote.
pub(super) fn parse_record(message: &str) -> Option<Record> {
    let rest = message.strip_prefix(RECORD_HEAD)?;
    let json = rest.split_once("\n\n")?.1;
    serde_json::from_str(json.trim()).ok()
}

/// A commit's first 12 digits.
pub(crate) fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// A value no other record shares.
pub(super) fn nonce() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}
