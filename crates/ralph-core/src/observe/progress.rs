//! What the circuit breaker observes of the project itself: did anything in
//! the project change since the previous stop (the no-progress signal), and
//! the TDD scenario in progress.
//!
//! A reading starts from what the iteration itself says ([`ToolEdits`]): a
//! file inside the project that a file tool (Write, Edit, …) changed is
//! progress, and nothing else needs to be looked at. Otherwise a full check
//! compares the project with the [`Baseline`] recorded at the previous stop:
//!
//! - in a git repository, `git status` restricted to the project's folder:
//!   HEAD (a commit is progress) and every changed or untracked-not-ignored
//!   file with its stamp (size, mtime, ctime, inode, mode);
//! - otherwise (no git, or a project folder the repository ignores), a scan
//!   of every file's stamp, skipping [`SCAN_IGNORES`].
//!
//! Files under a `.claude/` folder (the loop's own) never count. The
//! baseline keeps the listing itself when it is short ([`MAX_LISTED`]
//! entries), else a digest of it; after a stop decided by tool edits it
//! records the touched files' new stamps, so a later full check neither
//! counts that change again nor misses a later one. A scan's listing is
//! kept as path hashes and stamps in one string (`hashedFiles`): every
//! file is in it, so comparing digests is comparing listings, and the
//! state a stop reads and writes stays small (a map of every path made
//! each stop of a small project without git cost more than the scan).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::paths::RUNTIME_DIR;

mod git;
mod scan;
mod stamps;

use git::*;
use scan::*;
use stamps::*;

/// How long `git status` may take before the reading is given up.
pub const GIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Most files the scan (without git) looks at, which bounds its cost. Past
/// it, a scan can still prove a change among the files it reached, never the
/// absence of one.
pub const SCAN_LIMIT: usize = 20_000;
/// How long the scan may take before the reading is given up.
pub const SCAN_TIMEOUT: Duration = Duration::from_secs(5);
/// Most paths a baseline lists (changed files with git, every file without);
/// a longer listing is kept as a digest.
pub const MAX_LISTED: usize = 1_000;
/// Most bytes of paths a baseline lists, for the same reason.
pub const MAX_LISTED_BYTES: usize = 64 * 1024;
/// The folder of the loop's own files (and Claude Code's): never progress.
pub const OWN_DIR: &str = ".claude";
/// Folders the scan skips, at any depth (build output, dependencies, caches,
/// VCS, the loop's own); a file tool's edit inside one is not progress either.
pub const SCAN_IGNORES: &[&str] = &[
    ".git",
    OWN_DIR,
    ".hg",
    ".svn",
    "target",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
    ".tox",
    "dist",
    "build",
    ".next",
    ".cache",
];
/// The TDD state file, relative to the project root.
pub const TDD_STATE_FILE: &str = "tdd-state.json";

/// What the iteration's own tool calls say about the project's files, as
/// the transcript reader finds them.
pub use crate::observe::transcript::ToolEdits;

/// How a reading was taken.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// From the iteration's file-tool edits alone; nothing was run.
    ToolEdits,
    /// `git status` of the project's folder.
    Git,
    /// A scan of the project's files (no git, or a folder git ignores).
    Scan,
    /// Nothing usable (git failed or timed out, the scan ran out of time,
    /// the folder cannot be read).
    #[default]
    Unavailable,
}

/// The project's files as the breaker last saw them: what the next reading
/// compares with. Persisted in the loop's state (`breaker.progress`), and
/// bounded: at most [`MAX_LISTED`] paths in each map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Baseline {
    /// How the listing was taken: `git` or `scan`.
    source: Method,
    /// With git: the commit HEAD named (`(initial)` before the first one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    head: Option<String>,
    /// The listing, path relative to the project root → stamp (`-` for a
    /// file that is gone): with git the project's changed and untracked
    /// files, without git every file. Empty when `digest` stands for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    files: BTreeMap<String, String>,
    /// With a scan: the listing, as its entries' path hashes and stamps
    /// (32 hex digits each, in hash order). `files` and `digest` are then
    /// empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hashed_files: Option<String>,
    /// The listing's size and hash, when it was too long to keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<String>,
    /// The scan stopped at [`SCAN_LIMIT`]: the digest covers the files it reached.
    #[serde(default, skip_serializing_if = "is_false")]
    truncated: bool,
    /// Set after a stop decided by tool edits whose effect on the listing
    /// could not be recorded exactly (other tools ran too, or the listing is
    /// a digest): the listing is dropped, and only `touched` can still show
    /// a change until the next full check takes a new listing.
    #[serde(default, skip_serializing_if = "is_false")]
    stale: bool,
    /// With `stale`: files the agent's tools changed, with their stamps at
    /// that stop.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    touched: BTreeMap<String, String>,
}

// serde's `skip_serializing_if` passes the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(value: &bool) -> bool {
    !*value
}

/// One reading of the project at a stop.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reading {
    /// `Some(true)`: the project changed since the previous stop; `Some(false)`:
    /// it did not; `None`: this reading cannot tell.
    pub changed: Option<bool>,
    /// What the next reading must compare with; `None`: keep the previous one.
    pub baseline: Option<Baseline>,
    /// How the reading was taken.
    pub method: Method,
}

/// The baseline at the start of a loop (`ralph-ctl start`): a full check,
/// `None` when none can be taken.
pub fn baseline(root: &Path) -> Option<Baseline> {
    let root = canonical(root);
    full_check(&root, LIMITS).map(Listing::into_baseline)
}

/// Reads whether the project changed since `previous` (the baseline of the
/// previous stop), using the iteration's tool edits first.
///
/// A file inside the project (outside `.claude/` and [`SCAN_IGNORES`]) that
/// a file tool changed is progress: nothing is run. Otherwise a full check
/// runs, also when the tool calls say nothing changed (`fully_described`
/// with no changed file): the agent's tools are not the only way files
/// change (a background command of an earlier iteration, a person), and
/// "nothing changed" is what drives the loop towards a stop, so it is only
/// ever said after looking.
pub fn read(root: &Path, previous: Option<&Baseline>, edits: &ToolEdits) -> Reading {
    read_within(root, previous, edits, LIMITS)
}

fn read_within(
    root: &Path,
    previous: Option<&Baseline>,
    edits: &ToolEdits,
    limits: Limits,
) -> Reading {
    let given = root;
    let root = canonical(root);
    let touched = project_keys(given, &root, &edits.changed_files);
    if !touched.is_empty() {
        return Reading {
            changed: Some(true),
            baseline: previous.map(|b| b.after_tool_edits(&root, &touched, edits.fully_described)),
            method: Method::ToolEdits,
        };
    }
    let Some(listing) = full_check(&root, limits) else {
        return Reading::default();
    };
    Reading {
        changed: previous.and_then(|b| b.compare(&root, &listing)),
        method: listing.source,
        baseline: Some(listing.into_baseline()),
    }
}

/// The bounds of a full check: the constants above, smaller in tests.
#[derive(Clone, Copy, Debug)]
struct Limits {
    scan_files: usize,
    scan_time: Duration,
}

const LIMITS: Limits = Limits {
    scan_files: SCAN_LIMIT,
    scan_time: SCAN_TIMEOUT,
};

/// What a full check found.
#[derive(Debug)]
struct Listing {
    source: Method,
    head: Option<String>,
    /// With git: the project is a subfolder of its repository.
    subfolder: bool,
    /// With git: the entries (key, stamp) while they fit a baseline; `None`
    /// past that, and for a scan.
    entries: Option<Vec<(String, u64)>>,
    /// With a scan: the entries (path hash, stamp) while they fit a
    /// baseline; `None` past that, and with git.
    hashed: Option<Vec<(u64, u64)>>,
    listed_bytes: usize,
    digest: Digest,
    truncated: bool,
}

impl Listing {
    fn new(source: Method) -> Self {
        Listing {
            source,
            head: None,
            subfolder: false,
            entries: (source != Method::Scan).then(Vec::new),
            hashed: (source == Method::Scan).then(Vec::new),
            listed_bytes: 0,
            digest: Digest::default(),
            truncated: false,
        }
    }

    fn add(&mut self, path: &[u8], stamp: u64) {
        let hash = path_hash(path);
        self.digest.add_hashed(hash, stamp);
        if let Some(hashed) = &mut self.hashed {
            if hashed.len() < MAX_LISTED {
                hashed.push((hash, stamp));
            } else {
                self.hashed = None;
            }
        }
        if let Some(entries) = &mut self.entries {
            self.listed_bytes += path.len();
            if entries.len() < MAX_LISTED && self.listed_bytes <= MAX_LISTED_BYTES {
                entries.push((key_of(path), stamp));
            } else {
                self.entries = None;
            }
        }
    }

    fn into_baseline(self) -> Baseline {
        let mut hashed_files = None;
        let (files, digest) = match (self.entries, self.hashed) {
            (Some(entries), _) if !self.truncated => (
                entries
                    .into_iter()
                    .map(|(key, stamp)| (key, stamp_text(stamp)))
                    .collect(),
                None,
            ),
            (_, Some(mut hashed)) if !self.truncated => {
                hashed.sort_unstable();
                hashed_files = Some(encode_hashed(&hashed));
                (BTreeMap::new(), None)
            }
            _ => (BTreeMap::new(), Some(self.digest.text())),
        };
        Baseline {
            source: self.source,
            head: self.head,
            files,
            hashed_files,
            digest,
            truncated: self.truncated,
            stale: false,
            touched: BTreeMap::new(),
        }
    }
}

impl Baseline {
    /// Whether the listing holds `key` (tests).
    #[cfg(test)]
    fn lists(&self, key: &str) -> bool {
        let hash = key_bytes(key).map(|bytes| path_hash(&bytes));
        self.files.contains_key(key)
            || self
                .hashed_files
                .as_deref()
                .and_then(decode_hashed)
                .is_some_and(|entries| entries.iter().any(|(h, _)| Some(*h) == hash))
    }

    /// Whether the project changed between this baseline and `now`.
    fn compare(&self, root: &Path, now: &Listing) -> Option<bool> {
        if self.stale {
            // The listing was dropped: only a touched file that changed
            // again proves anything.
            return self
                .touched
                .iter()
                .any(|(key, stamp)| stamp_text(stamp_now(root, key)) != *stamp)
                .then_some(true);
        }
        if self.source != now.source || !matches!(self.source, Method::Git | Method::Scan) {
            return None;
        }
        if self.head != now.head {
            let moved = match (self.head.as_deref(), now.head.as_deref()) {
                (Some(old), Some(new)) if is_commit_id(old) && is_commit_id(new) => {
                    git_tree_changed(root, old, new, now.subfolder)
                }
                // The first commit.
                (Some(INITIAL), Some(new)) if is_commit_id(new) => true,
                // Not what git wrote (a hand-edited state): nothing to compare.
                _ => return None,
            };
            if moved {
                return Some(true);
            }
            // HEAD moved without touching the project's folder (a commit
            // elsewhere in the repository): the files decide.
        }
        let before = self.digest()?;
        if self.truncated || now.truncated {
            // Each covers only the files it reached: a difference is a
            // change, an equal digest proves nothing past the limit.
            return (before != now.digest).then_some(true);
        }
        match (&self.digest, &now.entries) {
            (None, Some(entries)) => Some(self.differs(root, entries)),
            _ => Some(before != now.digest),
        }
    }

    /// Both listings in full: any path listed on either side whose stamp
    /// moved. A path listed before but not now is looked at again: with git
    /// a file leaves the listing when its content is back to HEAD's, which
    /// is a change only if the file changed since (a file a tool edited and
    /// recorded here may never have been listed by git).
    fn differs(&self, root: &Path, entries: &[(String, u64)]) -> bool {
        let listed: HashSet<&str> = entries.iter().map(|(key, _)| key.as_str()).collect();
        entries
            .iter()
            .any(|(key, stamp)| self.files.get(key) != Some(&stamp_text(*stamp)))
            || self
                .files
                .iter()
                .filter(|(key, _)| !listed.contains(key.as_str()))
                .any(|(key, stamp)| stamp_text(stamp_now(root, key)) != *stamp)
    }

    /// The digest of the listing this baseline stands for.
    fn digest(&self) -> Option<Digest> {
        if let Some(text) = &self.digest {
            return Digest::parse(text);
        }
        let mut digest = Digest::default();
        if let Some(text) = &self.hashed_files {
            for (hash, stamp) in decode_hashed(text)? {
                digest.add_hashed(hash, stamp);
            }
        }
        for (key, stamp) in &self.files {
            digest.add(&key_bytes(key)?, parse_stamp(stamp)?);
        }
        Some(digest)
    }

    /// The baseline after a stop at which the agent's file tools changed
    /// `keys`. When those edits are all that happened (`fully_described`)
    /// and the listing is kept in full, their new stamps go into it, so it
    /// describes the project as of this stop. Otherwise something else may
    /// have changed unseen: the baseline goes stale and keeps only the
    /// touched files' stamps, so the next full check can still see them
    /// change again, but never reports this stop's changes a second time.
    fn after_tool_edits(&self, root: &Path, keys: &[String], fully_described: bool) -> Baseline {
        let exact = fully_described && !self.stale && !self.truncated && self.digest.is_none();
        if let (true, Some(text)) = (exact, &self.hashed_files) {
            if let Some(next) = self.hashed_after_tool_edits(root, keys, text) {
                return next;
            }
        } else if exact {
            let mut next = self.clone();
            for key in keys {
                next.files
                    .insert(key.clone(), stamp_text(stamp_now(root, key)));
            }
            let bytes: usize = next.files.keys().map(String::len).sum();
            if next.files.len() <= MAX_LISTED && bytes <= MAX_LISTED_BYTES {
                return next;
            }
        }
        // Every touched file's stamp is taken now, also those touched at an
        // earlier stop: this stop is the reference for all of them.
        let mut touched = BTreeMap::new();
        let mut bytes = 0;
        let earlier = if self.stale {
            self.touched.keys().cloned().collect()
        } else {
            Vec::new()
        };
        for key in keys.iter().chain(earlier.iter()) {
            if touched.contains_key(key) {
                continue;
            }
            bytes += key.len();
            if touched.len() >= MAX_LISTED || bytes > MAX_LISTED_BYTES {
                break; // fewer touched files only means fewer changes proven
            }
            touched.insert(key.clone(), stamp_text(stamp_now(root, key)));
        }
        Baseline {
            source: self.source,
            head: None,
            files: BTreeMap::new(),
            hashed_files: None,
            digest: None,
            truncated: false,
            stale: true,
            touched,
        }
    }

    /// [`Self::after_tool_edits`] for a scan's hashed listing: each touched
    /// file's entry takes its new stamp (a file that is gone leaves the
    /// listing, as a scan would not list it). `None` when a touched path
    /// is one the scan would not list as it is named (a folder, or a path
    /// through a linked folder), or the listing grows past its bound.
    fn hashed_after_tool_edits(
        &self,
        root: &Path,
        keys: &[String],
        text: &str,
    ) -> Option<Baseline> {
        let mut entries: BTreeMap<u64, u64> = decode_hashed(text)?.into_iter().collect();
        for key in keys {
            let relative = key_path(key)?;
            let mut folder = root.to_path_buf();
            let mut parts = relative.components().peekable();
            while let Some(part) = parts.next() {
                folder.push(part);
                match fs::symlink_metadata(&folder) {
                    // A folder on the way: a real one.
                    Ok(meta) if parts.peek().is_some() && !meta.file_type().is_dir() => {
                        return None;
                    }
                    // The file itself: anything but a folder.
                    Ok(meta) if parts.peek().is_none() && meta.file_type().is_dir() => return None,
                    Ok(_) => {}
                    Err(_) => break, // gone: no entry
                }
            }
            let hash = path_hash(&key_bytes(key)?);
            match stamp_now(root, key) {
                ABSENT => entries.remove(&hash),
                stamp => entries.insert(hash, stamp),
            };
        }
        if entries.len() > MAX_LISTED {
            return None;
        }
        let entries: Vec<(u64, u64)> = entries.into_iter().collect();
        Some(Baseline {
            hashed_files: Some(encode_hashed(&entries)),
            ..self.clone()
        })
    }
}

/// Lists the project: with git when the project lies in a repository that
/// does not ignore it, else by a scan. `None` when neither works.
fn full_check(root: &Path, limits: Limits) -> Option<Listing> {
    if let Some(top) = repository_top(root) {
        match git_listing(root, &top) {
            GitListing::Listed(listing) => return Some(listing),
            GitListing::Failed => return None,
            GitListing::NotUsable => {}
        }
    }
    scan(root, limits)
}

/// The `currentScenario` of `.claude/context/runtime/tdd-state.json`, when
/// that file exists and holds one.
pub fn tdd_scenario(root: &Path) -> Option<String> {
    let path = root.join(RUNTIME_DIR).join(TDD_STATE_FILE);
    let meta = fs::metadata(&path).ok()?;
    if !meta.is_file() || meta.len() > 1024 * 1024 {
        return None;
    }
    // Bounded and FIFO-safe even if the file changes under the check above.
    let crate::files::Bounded::Bytes(bytes) =
        crate::files::read_bounded(&path, 1024 * 1024).ok()?
    else {
        return None;
    };
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    match value.get("currentScenario")? {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    }
}

#[cfg(test)]
mod tests;
