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
use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::paths::RUNTIME_DIR;

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

/// Environment variables removed for every git call: those that would point
/// git at another repository or index than the one holding the project, an
/// external diff program, and `GIT_CONFIG`, with which `git config` would
/// read that one file instead of what `git status` reads.
const GIT_REMOVED_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_EXTERNAL_DIFF",
    "GIT_CONFIG",
];

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

/// The project root as git sees it (symbolic links resolved), so that the
/// paths git prints line up with it.
fn canonical(root: &Path) -> PathBuf {
    fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

// ------------------------------------------------------------------ stamps

/// A stamp for a file that does not exist (or cannot be looked at).
const ABSENT: u64 = 0;

/// What changes when a file is written, replaced, renamed or chmod-ed: size,
/// mtime, ctime, inode and mode, hashed to 64 bits ([`ABSENT`] never).
fn stamp_of(meta: &fs::Metadata) -> u64 {
    let mut h = Fnv::new();
    h.word(meta.len());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        h.word(meta.mtime() as u64);
        h.word(meta.mtime_nsec() as u64);
        h.word(meta.ctime() as u64);
        h.word(meta.ctime_nsec() as u64);
        h.word(meta.ino());
        h.word(u64::from(meta.mode()));
    }
    #[cfg(not(unix))]
    {
        let nanos = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        h.word(nanos);
    }
    match mix(h.finish()) {
        ABSENT => 1,
        stamp => stamp,
    }
}

/// The stamp of the file at `key` (a path relative to `root`) now.
fn stamp_now(root: &Path, key: &str) -> u64 {
    match key_path(key) {
        Some(relative) => fs::symlink_metadata(root.join(relative))
            .map(|m| stamp_of(&m))
            .unwrap_or(ABSENT),
        None => ABSENT,
    }
}

fn stamp_text(stamp: u64) -> String {
    if stamp == ABSENT {
        "-".into()
    } else {
        format!("{stamp:016x}")
    }
}

fn parse_stamp(text: &str) -> Option<u64> {
    if text == "-" {
        Some(ABSENT)
    } else {
        u64::from_str_radix(text, 16).ok()
    }
}

/// FNV-1a, 64 bits: stable across runs, builds and platforms (the baseline
/// outlives the process that wrote it).
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn word(&mut self, word: u64) {
        self.bytes(&word.to_le_bytes());
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// The splitmix64 finaliser: spreads FNV's weak high bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ------------------------------------------------------------------ keys

/// A path relative to the project root, as bytes with `/` separators.
#[cfg(unix)]
fn path_bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

#[cfg(not(unix))]
fn path_bytes(path: &Path) -> Vec<u8> {
    path.to_string_lossy().replace('\\', "/").into_bytes()
}

/// The key of a relative path in a baseline: the path itself when it is
/// UTF-8, else a NUL (which no path holds) and its bytes in hex, so that
/// every path has its own key and the key gives the path back.
fn key_of(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.starts_with('\0') => text.to_string(),
        _ => {
            let mut key = String::with_capacity(1 + bytes.len() * 2);
            key.push('\0');
            for b in bytes {
                key.push_str(&format!("{b:02x}"));
            }
            key
        }
    }
}

/// The bytes of a key's path.
fn key_bytes(key: &str) -> Option<Vec<u8>> {
    match key.strip_prefix('\0') {
        None => Some(key.as_bytes().to_vec()),
        Some(hex) if hex.len() % 2 == 0 => (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect(),
        Some(_) => None,
    }
}

/// The relative path a key stands for.
fn key_path(key: &str) -> Option<PathBuf> {
    let bytes = key_bytes(key)?;
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(&bytes)))
    }
    #[cfg(not(unix))]
    {
        Some(PathBuf::from(String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// True when a component of the relative path is `.claude`.
fn under_own_dir(relative: &[u8]) -> bool {
    relative
        .split(|&b| b == b'/')
        .any(|part| part == OWN_DIR.as_bytes())
}

/// True when a folder of the relative path is one the scan skips.
fn under_ignored_dir(relative: &Path) -> bool {
    let mut parts: Vec<_> = relative.components().collect();
    parts.pop(); // the file itself
    parts.iter().any(|part| match part {
        Component::Normal(name) => SCAN_IGNORES
            .iter()
            .any(|i| *name == std::ffi::OsStr::new(i)),
        _ => false,
    })
}

/// `path` without `.` and with `..` applied, without touching the disk.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The keys of the files in `paths` that lie inside the project, outside
/// `.claude/` and the scan's ignored folders (the edits that count).
fn project_keys(given_root: &Path, root: &Path, paths: &[PathBuf]) -> Vec<String> {
    let mut keys = Vec::new();
    for path in paths {
        if !path.is_absolute() {
            continue;
        }
        let path = normalise(path);
        let relative = path
            .strip_prefix(root)
            .or_else(|_| path.strip_prefix(normalise(given_root)))
            .map(Path::to_path_buf)
            .ok()
            .or_else(|| {
                // A path through a symbolic link: resolve its folder.
                let folder = fs::canonicalize(path.parent()?).ok()?;
                let relative = folder.strip_prefix(root).ok()?;
                Some(relative.join(path.file_name()?))
            });
        let Some(relative) = relative else { continue };
        let bytes = path_bytes(&relative);
        if bytes.is_empty() || under_own_dir(&bytes) || under_ignored_dir(&relative) {
            continue;
        }
        let key = key_of(&bytes);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

// ------------------------------------------------------------------ listing

/// An order-independent digest of a listing: how many entries, and two sums
/// of per-entry hashes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Digest {
    count: u64,
    a: u64,
    b: u64,
}

impl Digest {
    fn add(&mut self, path: &[u8], stamp: u64) {
        self.add_hashed(path_hash(path), stamp);
    }

    fn add_hashed(&mut self, path_hash: u64, stamp: u64) {
        self.count += 1;
        self.a = self.a.wrapping_add(mix(path_hash ^ mix(stamp)));
        self.b = self.b.wrapping_add(mix(
            path_hash.rotate_left(32) ^ stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ));
    }

    fn text(&self) -> String {
        format!("{}:{:016x}{:016x}", self.count, self.a, self.b)
    }

    fn parse(text: &str) -> Option<Digest> {
        let (count, hash) = text.split_once(':')?;
        if hash.len() != 32 {
            return None;
        }
        Some(Digest {
            count: count.parse().ok()?,
            a: u64::from_str_radix(&hash[..16], 16).ok()?,
            b: u64::from_str_radix(&hash[16..], 16).ok()?,
        })
    }
}

/// The hash of a listed path, as [`Digest`] and `hashedFiles` use it.
fn path_hash(path: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.bytes(path);
    h.finish()
}

/// `hashedFiles` text: each (path hash, stamp) as 32 hex digits, in order.
fn encode_hashed(entries: &[(u64, u64)]) -> String {
    let mut text = String::with_capacity(entries.len() * 32);
    for (hash, stamp) in entries {
        text.push_str(&format!("{hash:016x}{stamp:016x}"));
    }
    text
}

/// The entries of a `hashedFiles` text; `None` when it is not one.
fn decode_hashed(text: &str) -> Option<Vec<(u64, u64)>> {
    if !text.len().is_multiple_of(32) || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(32)
        .map(|i| {
            Some((
                u64::from_str_radix(&text[i..i + 16], 16).ok()?,
                u64::from_str_radix(&text[i + 16..i + 32], 16).ok()?,
            ))
        })
        .collect()
}

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
                        return None
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

/// The nearest folder, `root` or above, holding `.git` (a folder, or a file
/// for worktrees and submodules): where git will find the repository, and
/// what the paths it prints are relative to. Only then is git worth starting.
fn repository_top(root: &Path) -> Option<PathBuf> {
    root.ancestors()
        .find(|dir| dir.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

enum GitListing {
    Listed(Listing),
    /// Not a repository after all, no git, or a folder the repository
    /// ignores: git can say nothing about it.
    NotUsable,
    Failed,
}

/// `git` run from `root` with the fixed configuration every call gets, so
/// that nothing the repository's or the user's configuration says can make
/// it start another program (the agent can edit `.git/config`,
/// `.gitattributes` and `.git/info/attributes`, and the hook must never run
/// a program it named):
///
/// - `core.fsmonitor=false`: no fsmonitor hook, no fsmonitor daemon;
/// - `core.hooksPath=/dev/null`: no hook from the hooks folder (none of the
///   commands used runs a hook anyway: `git status` runs one only when it
///   writes the index, which `GIT_OPTIONAL_LOCKS=0` rules out);
/// - `--no-pager` (git never pages into a pipe anyway);
/// - `GIT_CONFIG_NOSYSTEM=1`: the system-wide configuration is not read
///   (nothing in it is needed to list changes, and its place depends on how
///   git was built, which [`configuration_may_name_filters`] cannot know);
/// - `GIT_NO_LAZY_FETCH=1` (git 2.45 and later) and `GIT_ALLOW_PROTOCOL`
///   empty: a partial clone never fetches a missing object, so no transport,
///   `core.sshCommand` or remote helper runs; `GIT_TERMINAL_PROMPT=0` and an
///   empty `GIT_ASKPASS`: no credential prompt, no askpass program;
/// - [`GIT_REMOVED_VARS`] removed.
///
/// Filter drivers need their names: [`disabled_filters`]. `git status` also
/// gets `--ignore-submodules=dirty`: it would otherwise run `git status` in
/// each submodule, with that submodule's own configuration.
fn git_command(root: &Path) -> Command {
    let mut command = Command::new("git");
    command.args([
        "--no-pager",
        "-c",
        "core.fsmonitor=false",
        "-c",
        "core.hooksPath=/dev/null",
    ]);
    command
        .current_dir(root)
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_ALLOW_PROTOCOL", "")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "");
    for var in GIT_REMOVED_VARS {
        command.env_remove(var);
    }
    command
}

/// A `git` command for any caller outside this module (the driver's
/// worktrees): run from `root` with the same fixed configuration as the
/// hook's calls ([`git_command`]: no fsmonitor, no hooks, no system
/// configuration, no lazy fetch, no prompt) and every filter driver the
/// configuration defines disabled, so that nothing the agent writes into
/// `.git/config`, `.git/hooks` or an attributes file runs. `Err` says why no
/// such command can be had (git does not answer within `timeout`, or a
/// filter driver's name cannot be disabled); the caller then runs no git.
pub fn safe_git(root: &Path, timeout: Duration) -> Result<Command, String> {
    let filters = disabled_filters(root, Instant::now() + timeout).map_err(|e| match e {
        GitListing::NotUsable => format!(
            "the git configuration of {} defines a filter driver whose name cannot be disabled \
             (it holds `=`), or names no repository git can read",
            root.display()
        ),
        _ => format!(
            "git did not list the filter drivers of {} within {} s",
            root.display(),
            timeout.as_secs()
        ),
    })?;
    let mut command = git_command(root);
    command.args(filters);
    Ok(command)
}

/// The `-c` options that disable every filter driver the configuration
/// defines (`filter.<name>.clean`, `.smudge`, `.process`), with includes
/// followed: `git status` runs a file's clean filter when the file's stamp
/// changed, for a driver named by a `filter` attribute in any
/// `.gitattributes`, `.git/info/attributes` or the user's attributes file.
/// An empty command is no filter (convert.c, `apply_filter`), and
/// `required=false` keeps git from failing for want of one. The names come
/// from `git config` itself, so they are the ones `git status` reads a moment
/// later; when no configuration file can define a driver
/// ([`configuration_may_name_filters`]), `git config` is not run at all.
///
/// `Err(NotUsable)` for a name that a `-c` option cannot carry (one holding
/// `=`, which git splits the option at): git is then not run at all.
fn disabled_filters(root: &Path, deadline: Instant) -> Result<Vec<OsString>, GitListing> {
    if !configuration_may_name_filters(root, &|name| std::env::var_os(name)) {
        return Ok(Vec::new());
    }
    let mut command = git_command(root);
    command.args([
        "config",
        "--null",
        "--name-only",
        "--includes",
        "--get-regexp",
        r"^filter\.",
    ]);
    let names = match run_git(command, deadline) {
        GitRun::Output(bytes) => bytes,
        GitRun::Exited(1) => return Ok(Vec::new()), // no filter at all
        GitRun::Exited(128) | GitRun::NotUsable => return Err(GitListing::NotUsable),
        GitRun::Exited(_) | GitRun::Failed => return Err(GitListing::Failed),
    };
    let mut seen = HashSet::new();
    let mut options = Vec::new();
    for key in names.split(|&b| b == 0) {
        // `filter.<name>.<variable>`; the name may hold dots, or be empty.
        let Some(rest) = key.strip_prefix(b"filter.") else {
            continue;
        };
        let Some(dot) = rest.iter().rposition(|&b| b == b'.') else {
            continue; // `filter.<variable>`: no driver
        };
        let name = &rest[..dot];
        if !seen.insert(name) {
            continue;
        }
        if name.contains(&b'=') {
            return Err(GitListing::NotUsable);
        }
        let Some(name) = os_string(name) else {
            return Err(GitListing::NotUsable);
        };
        for setting in [".clean=", ".smudge=", ".process=", ".required=false"] {
            let mut option = OsString::from("filter.");
            option.push(&name);
            option.push(setting);
            options.push(OsString::from("-c"));
            options.push(option);
        }
    }
    Ok(options)
}

/// Most bytes of a configuration file [`configuration_may_name_filters`]
/// reads; a longer one is left to `git config`.
const MAX_CONFIG_BYTES: u64 = 256 * 1024;

/// False only when no configuration file `git status` can read from `root`
/// defines a filter driver, which spares the `git config` process (about
/// 2 ms) at almost every full check. A filter driver is a `filter.<name>.*`
/// key, so its file holds the word `filter` (section names have no escapes
/// and are case-insensitive); an include can bring in any file, and its file
/// holds `include`. The files are listed by [`configuration_files`]; any of
/// them that cannot be read, is not a regular file or is large counts as
/// naming a filter, and so does anything that list cannot settle. `env` is
/// the process environment (a parameter for the tests).
fn configuration_may_name_filters(root: &Path, env: &dyn Fn(&str) -> Option<OsString>) -> bool {
    let Some(files) = configuration_files(root, env) else {
        return true;
    };
    files.iter().any(
        |file| match crate::observe::files::read_bounded(file, MAX_CONFIG_BYTES) {
            Ok(crate::observe::files::Bounded::Missing) => false,
            Ok(crate::observe::files::Bounded::Bytes(bytes)) => {
                let lower = bytes.to_ascii_lowercase();
                [&b"filter"[..], b"include"]
                    .iter()
                    .any(|word| lower.windows(word.len()).any(|w| w == *word))
            }
            Ok(crate::observe::files::Bounded::TooLarge) | Err(_) => true,
        },
    )
}

/// Every configuration file git run from `root` could read, or `None` when
/// that cannot be known without git (then `git config` is asked):
///
/// - the user's: `$GIT_CONFIG_GLOBAL` when set, else
///   `$XDG_CONFIG_HOME/git/config` (or `~/.config/git/config`) and
///   `~/.gitconfig`;
/// - the repository's, `config` and `config.worktree`, of every `.git`
///   folder in `root` and above: git takes the first one that is a valid
///   repository, which is git's judgement, so all are listed;
/// - not the system-wide one, which [`git_command`] turns off.
///
/// `None` for a `.git` file (a worktree or a submodule, whose configuration
/// lies elsewhere), a `.git` folder with a `commondir` (the same), a folder
/// holding `HEAD` (it may be a bare repository, whose `config` sits beside
/// it), configuration passed in the environment, no `HOME`, or a platform
/// other than Unix.
fn configuration_files(
    root: &Path,
    env: &dyn Fn(&str) -> Option<OsString>,
) -> Option<Vec<PathBuf>> {
    if !cfg!(unix) {
        return None;
    }
    let set = |name: &str| env(name).filter(|value| !value.is_empty());
    if set("GIT_CONFIG_PARAMETERS").is_some() || set("GIT_CONFIG_COUNT").is_some() {
        return None;
    }
    let mut files = Vec::new();
    if let Some(global) = env("GIT_CONFIG_GLOBAL") {
        files.push(PathBuf::from(global));
    } else {
        let home = PathBuf::from(set("HOME")?);
        match set("XDG_CONFIG_HOME") {
            Some(xdg) => files.push(PathBuf::from(xdg).join("git").join("config")),
            None => files.push(home.join(".config").join("git").join("config")),
        }
        files.push(home.join(".gitconfig"));
    }
    for dir in root.ancestors() {
        if dir.join("HEAD").symlink_metadata().is_ok() {
            return None;
        }
        let git_dir = dir.join(".git");
        match fs::metadata(&git_dir) {
            Ok(meta) if meta.is_dir() => {
                if git_dir.join("commondir").symlink_metadata().is_ok() {
                    return None;
                }
                files.push(git_dir.join("config"));
                files.push(git_dir.join("config.worktree"));
            }
            Ok(_) => return None,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    Some(files)
}

/// Bytes git printed, as an argument to give back to it.
#[cfg(unix)]
fn os_string(bytes: &[u8]) -> Option<OsString> {
    use std::os::unix::ffi::OsStringExt;
    Some(OsString::from_vec(bytes.to_vec()))
}

#[cfg(not(unix))]
fn os_string(bytes: &[u8]) -> Option<OsString> {
    String::from_utf8(bytes.to_vec()).ok().map(OsString::from)
}

/// `git status` of the project's folder, with [`git_command`]'s
/// configuration and every filter driver disabled ([`disabled_filters`]);
/// both git calls share one [`GIT_TIMEOUT`].
///
/// - `GIT_OPTIONAL_LOCKS=0`: git never takes `index.lock` for the hook, so a
///   git command of the agent or the person running at that moment cannot
///   fail because of it, and the hook never rewrites the person's index. The
///   price: no refreshed index and no untracked cache is written back. On a
///   100,000-file repository the walk for untracked files took 105-170 ms of
///   a 440-520 ms `git status`, and 3-40 ms with an untracked cache; but
///   keeping that cache up to date meant writing the 9 MB index (40-55 ms,
///   under `index.lock`) at every stop whose folders had changed, and it
///   relies on folder mtimes, which not every filesystem keeps. So the hook
///   does not turn the cache on; one the person keeps (with
///   `status.showUntrackedFiles=all`, as `--untracked-files=all` needs) is
///   still read.
/// - `--ignore-submodules=dirty`: a submodule counts when its HEAD moves,
///   not for edits inside it that are not committed there.
/// - A project at the top of its repository is listed without a pathspec
///   (git ignores the untracked cache when one is given); a project in a
///   subfolder with the pathspec `.` (its own folder only), which also spares
///   git the rest of the repository.
fn git_listing(root: &Path, top: &Path) -> GitListing {
    let Ok(prefix) = root.strip_prefix(top) else {
        return GitListing::Failed;
    };
    let mut prefix = path_bytes(prefix);
    if !prefix.is_empty() {
        prefix.push(b'/');
    }
    let deadline = Instant::now() + GIT_TIMEOUT;
    let filters = match disabled_filters(root, deadline) {
        Ok(filters) => filters,
        Err(listing) => return listing,
    };
    let mut command = git_command(root);
    command.args(filters).args([
        "-c",
        "core.quotepath=off",
        "status",
        "--porcelain=v2",
        "-z",
        "--branch",
        "--untracked-files=all",
        "--no-renames",
        "--ignore-submodules=dirty",
    ]);
    if !prefix.is_empty() {
        // A folder the repository ignores as a whole shows as one `!` line.
        command.args(["--ignored=matching", "--", "."]);
    }
    let bytes = match run_git(command, deadline) {
        GitRun::Output(bytes) => bytes,
        GitRun::Exited(128) | GitRun::NotUsable => return GitListing::NotUsable,
        GitRun::Exited(_) | GitRun::Failed => return GitListing::Failed,
    };
    let mut listing = parse_status(root, &prefix, &bytes);
    if let GitListing::Listed(listing) = &mut listing {
        listing.subfolder = !prefix.is_empty();
    }
    listing
}

/// What `git status` names HEAD before the first commit.
const INITIAL: &str = "(initial)";

/// A full commit id (SHA-1 or SHA-256): nothing else is ever given to git.
fn is_commit_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether the commits `old` and `new` differ inside the project's folder
/// (the whole tree for a project at the top of its repository). A commit
/// git cannot read (history rewritten and pruned) counts as a change.
fn git_tree_changed(root: &Path, old: &str, new: &str, subfolder: bool) -> bool {
    // Two trees compared by object id: no file content is read, so no
    // filter, textconv or external diff could apply (and the last two are
    // off in diff-tree unless asked for; said again here).
    let mut command = git_command(root);
    command.args([
        "diff-tree",
        "--quiet",
        "--no-ext-diff",
        "--no-textconv",
        "-r",
        old,
        new,
    ]);
    if subfolder {
        command.args(["--", "."]);
    }
    !matches!(
        run_git(command, Instant::now() + GIT_TIMEOUT),
        GitRun::Output(_)
    )
}

/// Reads `git status --porcelain=v2 -z` output: HEAD, and each entry below
/// `prefix` with its file's stamp now.
fn parse_status(root: &Path, prefix: &[u8], status: &[u8]) -> GitListing {
    let mut listing = Listing::new(Method::Git);
    let mut records = status.split(|&b| b == 0);
    while let Some(record) = records.next() {
        if let Some(oid) = record.strip_prefix(b"# branch.oid ") {
            listing.head = Some(String::from_utf8_lossy(oid).into_owned());
            continue;
        }
        let fields = |n: usize| record.splitn(n, |&b| b == b' ').nth(n - 1);
        let path = match record.first() {
            Some(b'1') => fields(9),
            Some(b'2') => {
                records.next(); // the rename's original path
                fields(10)
            }
            Some(b'u') => fields(11),
            Some(b'?') => record.get(2..),
            Some(b'!') => {
                // An ignored folder is printed with its trailing `/`.
                let ignored = record.get(2..).unwrap_or_default();
                if ignored.ends_with(b"/") && prefix.starts_with(ignored) {
                    return GitListing::NotUsable;
                }
                continue;
            }
            _ => continue,
        };
        let Some(path) = path else { continue };
        let Some(relative) = path.strip_prefix(prefix) else {
            // Not below the project folder: git resolved the repository
            // differently than expected, so nothing here can be trusted.
            return GitListing::Failed;
        };
        if relative.is_empty() || under_own_dir(relative) {
            continue;
        }
        let key = key_of(relative);
        listing.add(relative, stamp_now(root, &key));
    }
    if listing.head.is_none() {
        return GitListing::Failed;
    }
    GitListing::Listed(listing)
}

enum GitRun {
    /// Exit 0, and everything git printed.
    Output(Vec<u8>),
    /// Exited with this other code.
    Exited(i32),
    /// Cannot be started (no git on this machine).
    NotUsable,
    /// Killed at the deadline, by a signal, or its output never ended.
    Failed,
}

/// Runs `command` (git) in its own process group until `deadline`: the whole
/// group is killed then, so nothing git started can outlive it, and the group
/// is killed again once git has exited, whatever it left. Git is reaped only
/// after both (see [`crate::observe::process::wait_exited`]), so the group id cannot
/// belong to another process yet. On Linux this thread does it all with a
/// pidfd ([`crate::observe::process::collect_output`]); elsewhere, or without one, a
/// reader thread and a watchdog thread.
fn run_git(command: Command, deadline: Instant) -> GitRun {
    run_git_waiting(command, deadline, Waiting::Pidfd)
}

/// How [`run_git`] waits for git: with a pidfd where there is one, or (and
/// in the tests of that path) with threads.
#[derive(Clone, Copy, PartialEq)]
enum Waiting {
    Pidfd,
    #[cfg_attr(not(test), allow(dead_code))]
    Threads,
}

fn run_git_waiting(mut command: Command, deadline: Instant, waiting: Waiting) -> GitRun {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        command.process_group(0);
    }
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let Ok(mut child) = command.spawn() else {
        return GitRun::NotUsable;
    };
    #[cfg(not(target_os = "linux"))]
    let _ = waiting;
    #[cfg(target_os = "linux")]
    if waiting == Waiting::Pidfd {
        if let Some(collected) =
            crate::observe::process::collect_output(&mut child, deadline, OUTPUT_GRACE)
        {
            return match collected {
                crate::observe::process::Collected::Exited { status, output } => {
                    GitRun::ended(Some(status), output)
                }
                crate::observe::process::Collected::Failed => GitRun::Failed,
            };
        }
    }
    let (exit, output) = wait_with_threads(child, deadline);
    GitRun::ended(exit, output)
}

/// How long git's output may go on after git has exited and its group was
/// killed (something that left the group may still hold it).
const OUTPUT_GRACE: Duration = Duration::from_millis(200);

impl GitRun {
    /// What git's exit (`None`: killed at the deadline, or not waited for)
    /// and its whole output (`None`: it never ended) come to.
    fn ended(exit: Option<std::process::ExitStatus>, output: Option<Vec<u8>>) -> GitRun {
        match (exit.map(|status| status.code()), output) {
            (Some(Some(0)), Some(bytes)) => GitRun::Output(bytes),
            (Some(Some(code)), Some(_)) => GitRun::Exited(code),
            _ => GitRun::Failed,
        }
    }
}

/// [`run_git`]'s wait with a reader thread and a watchdog thread: git's exit
/// status (`None` when it was killed at the deadline or could not be
/// waited for) and its output (`None` when it did not end within
/// [`OUTPUT_GRACE`] after git exited).
fn wait_with_threads(
    mut child: std::process::Child,
    deadline: Instant,
) -> (Option<std::process::ExitStatus>, Option<Vec<u8>>) {
    // Read on a thread until git closes its output (no polling delay on the
    // hook's path), while this one waits for git to exit.
    let (sent, output) = mpsc::channel::<Vec<u8>>();
    if let Some(mut stdout) = child.stdout.take() {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stdout.read_to_end(&mut bytes);
            let _ = sent.send(bytes);
        });
    }
    let (done, finished) = mpsc::channel::<()>();
    let pid = child.id();
    let watchdog = thread::spawn(move || {
        let left = deadline.saturating_duration_since(Instant::now());
        if finished.recv_timeout(left) == Err(mpsc::RecvTimeoutError::Timeout) {
            crate::observe::process::kill(pid, true);
            true
        } else {
            false
        }
    });
    #[cfg(unix)]
    let waited = crate::observe::process::wait_exited(pid).is_ok();
    #[cfg(not(unix))]
    let waited = child.wait().is_ok();
    let _ = done.send(());
    let timed_out = watchdog.join().unwrap_or(true);
    if waited {
        // Not reaped yet (on Unix), so the group id is still git's.
        crate::observe::process::kill(pid, true);
    }
    let exit = child.wait().ok().filter(|_| waited && !timed_out);
    // Git has exited and its group is gone: its output has ended, unless
    // something that left the group still holds it.
    let grace = deadline
        .saturating_duration_since(Instant::now())
        .max(OUTPUT_GRACE);
    (exit, output.recv_timeout(grace).ok())
}

/// Every file below `root` with its stamp, skipping [`SCAN_IGNORES`]; folders
/// in name order, so that a scan stopped at the limit always covers the same
/// files of an unchanged tree. `None` when `root` cannot be read or the scan
/// runs out of time.
fn scan(root: &Path, limits: Limits) -> Option<Listing> {
    let started = Instant::now();
    let mut listing = Listing::new(Method::Scan);
    let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, relative)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if relative.is_empty() => return None, // the project folder itself
            Err(_) => continue,
        };
        let mut entries: Vec<(std::ffi::OsString, fs::DirEntry)> =
            entries.flatten().map(|e| (e.file_name(), e)).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut folders = Vec::new();
        for (name, entry) in entries {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let mut path = relative.clone();
            path.extend_from_slice(&path_bytes(Path::new(&name)));
            if kind.is_dir() {
                if !SCAN_IGNORES.iter().any(|i| name == **i) {
                    path.push(b'/');
                    folders.push((entry.path(), path));
                }
                continue;
            }
            if listing.digest.count as usize >= limits.scan_files {
                listing.truncated = true;
                return Some(listing);
            }
            if listing.digest.count % 1024 == 1023 && started.elapsed() > limits.scan_time {
                return None;
            }
            let stamp = entry.metadata().map(|m| stamp_of(&m)).unwrap_or(ABSENT);
            listing.add(&path, stamp);
        }
        // Popped in name order.
        stack.extend(folders.into_iter().rev());
    }
    Some(listing)
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
    let crate::observe::files::Bounded::Bytes(bytes) =
        crate::observe::files::read_bounded(&path, 1024 * 1024).ok()?
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
mod tests {
    use super::*;
    use crate::tempdir::TempDir;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "git {args:?}");
    }

    /// A repository at `dir` with `files` committed.
    fn repository(dir: &Path, files: &[&str]) {
        git(dir, &["init", "-q"]);
        for file in files {
            let path = dir.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, format!("{file}\n")).unwrap();
        }
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "--allow-empty", "-m", "start"]);
    }

    /// Waits past the filesystem's timestamp granularity so an edit gets a new mtime.
    fn tick() {
        thread::sleep(Duration::from_millis(20));
    }

    fn append(path: &Path, text: &str) {
        tick();
        let mut old = fs::read(path).unwrap_or_default();
        old.extend_from_slice(text.as_bytes());
        fs::write(path, old).unwrap();
    }

    /// A loop's stops as the breaker sees them: each reading is compared with
    /// the baseline the previous one left (or the start's).
    struct Stops {
        root: PathBuf,
        baseline: Option<Baseline>,
        limits: Limits,
    }

    impl Stops {
        fn start(root: &Path) -> Stops {
            Stops::start_within(root, LIMITS)
        }

        fn start_within(root: &Path, limits: Limits) -> Stops {
            let baseline = full_check(&canonical(root), limits).map(Listing::into_baseline);
            assert!(baseline.is_some(), "a baseline of {}", root.display());
            Stops {
                root: root.to_path_buf(),
                baseline,
                limits,
            }
        }

        /// A stop after an iteration whose tools did not say what changed (Bash).
        fn full(&mut self) -> Reading {
            self.stop(ToolEdits::default())
        }

        /// A stop after an iteration whose file tools changed `files`
        /// (relative to the root); `alone`: no other tool ran.
        fn edited(&mut self, files: &[&str], alone: bool) -> Reading {
            self.stop(ToolEdits {
                changed_files: files.iter().map(|f| self.root.join(f)).collect(),
                fully_described: alone,
            })
        }

        fn stop(&mut self, edits: ToolEdits) -> Reading {
            let reading = read_within(&self.root, self.baseline.as_ref(), &edits, self.limits);
            if let Some(baseline) = &reading.baseline {
                // What the state keeps between stops: it must survive JSON.
                let json = serde_json::to_string(baseline).unwrap();
                let back: Baseline = serde_json::from_str(&json).unwrap();
                assert_eq!(&back, baseline, "{json}");
                self.baseline = Some(back);
            }
            reading
        }

        fn changed(&mut self) -> Option<bool> {
            self.full().changed
        }
    }

    #[test]
    fn git_sees_edits_untracked_files_deletions_and_commits() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt", "b.txt"]);
        let mut stops = Stops::start(root);
        let reading = stops.full();
        assert_eq!(
            (reading.changed, reading.method),
            (Some(false), Method::Git)
        );

        fs::create_dir_all(root.join(".claude/context/runtime")).unwrap();
        fs::write(root.join(".claude/context/runtime/ralph-state.json"), "{}").unwrap();
        fs::create_dir_all(root.join("sub/.claude")).unwrap();
        fs::write(root.join("sub/.claude/settings.json"), "{}").unwrap();
        assert_eq!(stops.changed(), Some(false), ".claude/ files do not count");

        tick();
        fs::write(root.join("new.txt"), "new").unwrap();
        assert_eq!(stops.changed(), Some(true), "an untracked file");
        assert_eq!(stops.changed(), Some(false), "counted once");
        append(&root.join("new.txt"), "more");
        assert_eq!(
            stops.changed(),
            Some(true),
            "an untracked file edited again"
        );
        append(&root.join("a.txt"), "edit");
        assert_eq!(stops.changed(), Some(true), "a tracked file edited");
        append(&root.join("a.txt"), "again");
        assert_eq!(stops.changed(), Some(true), "a modified file edited again");
        assert_eq!(stops.changed(), Some(false));

        git(root, &["add", "-A"]);
        assert_eq!(
            stops.changed(),
            Some(false),
            "staging alone changes no file"
        );
        git(root, &["commit", "-q", "-m", "two"]);
        assert_eq!(stops.changed(), Some(true), "a commit");
        assert_eq!(stops.changed(), Some(false));
        git(root, &["commit", "-q", "--allow-empty", "-m", "empty"]);
        assert_eq!(
            stops.changed(),
            Some(false),
            "a commit that changes no file"
        );

        fs::remove_file(root.join("b.txt")).unwrap();
        assert_eq!(stops.changed(), Some(true), "a tracked file deleted");
        git(root, &["checkout", "--", "b.txt"]);
        assert_eq!(stops.changed(), Some(true), "and restored");

        fs::write(root.join(".gitignore"), "*.log\n").unwrap();
        assert_eq!(stops.changed(), Some(true));
        fs::write(root.join("noise.log"), "noise").unwrap();
        assert_eq!(stops.changed(), Some(false), "ignored files do not count");
    }

    #[test]
    fn a_subfolder_project_counts_only_its_own_folder() {
        let dir = TempDir::new();
        let top = dir.path();
        repository(top, &["mono/app/lib.txt", "mono/other/x.txt", "top.txt"]);
        let root = top.join("mono/app");
        let mut stops = Stops::start(&root);
        assert_eq!(stops.full().method, Method::Git);
        assert_eq!(stops.changed(), Some(false));

        append(&top.join("mono/other/x.txt"), "elsewhere");
        fs::write(top.join("mono/other/new.txt"), "elsewhere").unwrap();
        append(&top.join("top.txt"), "elsewhere");
        assert_eq!(stops.changed(), Some(false), "changes outside the project");

        append(&root.join("lib.txt"), "1");
        assert_eq!(stops.changed(), Some(true), "a tracked file of the project");
        append(&root.join("lib.txt"), "2");
        assert_eq!(stops.changed(), Some(true), "the same file edited again");
        fs::write(root.join("notes.md"), "n").unwrap();
        assert_eq!(
            stops.changed(),
            Some(true),
            "an untracked file in the project"
        );
        assert_eq!(stops.changed(), Some(false));
        let files = &stops.baseline.as_ref().unwrap().files;
        assert_eq!(
            files.keys().collect::<Vec<_>>(),
            ["lib.txt", "notes.md"],
            "paths relative to the project, nothing from outside"
        );

        git(top, &["add", "mono/other"]);
        git(top, &["commit", "-q", "-m", "outside"]);
        assert_eq!(
            stops.changed(),
            Some(false),
            "a commit of files outside the project"
        );
        git(top, &["add", "-A"]);
        git(top, &["commit", "-q", "-m", "inside"]);
        assert_eq!(
            stops.changed(),
            Some(true),
            "a commit of the project's files"
        );
        assert_eq!(stops.changed(), Some(false));
    }

    #[test]
    fn a_project_its_repository_ignores_is_scanned() {
        let dir = TempDir::new();
        let top = dir.path();
        repository(top, &[]);
        fs::write(top.join(".gitignore"), "scratch/\n").unwrap();
        let root = top.join("scratch/project");
        fs::create_dir_all(&root).unwrap();
        fs::write(root.join("a.txt"), "a").unwrap();
        let mut stops = Stops::start(&root);
        assert_eq!(stops.full().method, Method::Scan);
        append(&root.join("a.txt"), "b");
        let reading = stops.full();
        assert_eq!(
            (reading.changed, reading.method),
            (Some(true), Method::Scan)
        );
        assert_eq!(stops.changed(), Some(false));
    }

    /// Names git and the baseline must carry intact.
    const AWKWARD: &[&str] = &[
        "with space.txt",
        "quote\"d 'name'.txt",
        "non-ascii-é-日本.txt",
        "new\nline.txt",
        "back\\slash.txt",
    ];

    fn awkward_names_work(root: &Path, method: Method) {
        let mut stops = Stops::start(root);
        for name in AWKWARD {
            fs::write(root.join(name), "x").unwrap();
            let reading = stops.full();
            assert_eq!(
                (reading.changed, reading.method),
                (Some(true), method),
                "{name:?} created"
            );
            assert_eq!(stops.changed(), Some(false), "{name:?} unchanged");
            append(&root.join(name), "y");
            assert_eq!(stops.changed(), Some(true), "{name:?} edited");
            assert_eq!(stops.changed(), Some(false));
        }
        let baseline = stops.baseline.as_ref().unwrap();
        for name in AWKWARD {
            assert!(baseline.lists(name), "{name:?} in {baseline:?}");
        }
        for name in AWKWARD {
            assert_eq!(
                stops.edited(&[name], true).changed,
                Some(true),
                "{name:?} written by a file tool"
            );
            assert_eq!(stops.changed(), Some(false), "{name:?} counted once");
        }
    }

    #[test]
    fn awkward_file_names_with_git() {
        let dir = TempDir::new();
        repository(dir.path(), &[]);
        let root = dir.path().join("sub folder é");
        fs::create_dir_all(&root).unwrap();
        awkward_names_work(&root, Method::Git);
    }

    #[test]
    fn awkward_file_names_without_git() {
        let dir = TempDir::new();
        awkward_names_work(dir.path(), Method::Scan);
    }

    #[cfg(unix)]
    #[test]
    fn file_names_that_are_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"latin1-\xe9.txt");
        for with_git in [true, false] {
            let dir = TempDir::new();
            let root = dir.path();
            if with_git {
                repository(root, &[]);
            }
            let mut stops = Stops::start(root);
            if fs::write(root.join(name), "x").is_err() {
                return; // a filesystem that refuses such names
            }
            assert_eq!(stops.changed(), Some(true));
            assert_eq!(stops.changed(), Some(false));
            let baseline = stops.baseline.as_ref().unwrap();
            if with_git {
                let key = baseline.files.keys().next().unwrap();
                assert_eq!(key_bytes(key).unwrap(), name.as_bytes(), "{key:?}");
            }
            assert!(baseline.lists(&key_of(name.as_bytes())), "{baseline:?}");
            append(&root.join(name), "y");
            assert_eq!(stops.changed(), Some(true), "with git: {with_git}");
        }
    }

    #[test]
    fn keys_give_their_path_back() {
        for bytes in [
            &b"plain/path.txt"[..],
            b"\xff\xfe",
            "é/日本".as_bytes(),
            b"a\nb",
        ] {
            assert_eq!(key_bytes(&key_of(bytes)).unwrap(), bytes);
        }
        assert_ne!(key_of(b"\xff"), key_of("\u{fffd}".as_bytes()));
        assert_eq!(key_bytes("\0zz"), None);
    }

    #[test]
    fn tool_edits_are_progress_without_a_check_and_are_counted_once() {
        for with_git in [true, false] {
            let dir = TempDir::new();
            let root = dir.path();
            if with_git {
                repository(root, &["a.txt", "b.txt"]);
            } else {
                fs::write(root.join("a.txt"), "a").unwrap();
                fs::write(root.join("b.txt"), "b").unwrap();
            }
            let mut stops = Stops::start(root);
            // A Write, then a Bash stop that changed another file, then nothing.
            append(&root.join("a.txt"), "tool");
            let reading = stops.edited(&["a.txt"], true);
            assert_eq!(
                (reading.changed, reading.method),
                (Some(true), Method::ToolEdits)
            );
            append(&root.join("b.txt"), "command");
            assert_eq!(stops.changed(), Some(true), "the command's change");
            assert_eq!(stops.changed(), Some(false), "git: {with_git}");

            // A file created by a tool, then nothing: not counted again.
            tick();
            fs::write(root.join("c.txt"), "created").unwrap();
            assert_eq!(stops.edited(&["c.txt"], true).changed, Some(true));
            assert_eq!(stops.changed(), Some(false), "no double count");

            // A file a tool touched, later changed by a command: seen.
            append(&root.join("c.txt"), "by a command");
            assert_eq!(stops.changed(), Some(true), "a later change of it");
            assert_eq!(stops.changed(), Some(false));
        }
    }

    #[test]
    fn a_tool_edit_that_restores_the_committed_content_is_counted_once() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt"]);
        append(&root.join("a.txt"), "draft");
        let mut stops = Stops::start(root);
        tick();
        fs::write(root.join("a.txt"), "a.txt\n").unwrap(); // HEAD's content again
        assert_eq!(stops.edited(&["a.txt"], true).changed, Some(true));
        assert_eq!(
            stops.changed(),
            Some(false),
            "clean again, but not changed since"
        );
        append(&root.join("a.txt"), "more");
        assert_eq!(stops.changed(), Some(true));
    }

    #[test]
    fn tool_edits_beside_other_tools_leave_no_false_answer() {
        for with_git in [true, false] {
            let dir = TempDir::new();
            let root = dir.path();
            if with_git {
                repository(root, &["a.txt", "b.txt"]);
            } else {
                fs::write(root.join("a.txt"), "a").unwrap();
                fs::write(root.join("b.txt"), "b").unwrap();
            }
            let mut stops = Stops::start(root);
            // Edit a.txt with a tool, and b.txt with a command, in one iteration.
            append(&root.join("a.txt"), "tool");
            append(&root.join("b.txt"), "command");
            assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
            // b.txt's change belongs to that stop: never counted again, but the
            // next check cannot prove "nothing changed" either.
            assert_eq!(stops.changed(), None, "git: {with_git}");
            assert_eq!(stops.changed(), Some(false));

            // After such a stop, a later change of the touched file is seen.
            append(&root.join("a.txt"), "tool again");
            assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
            append(&root.join("a.txt"), "by a command");
            assert_eq!(stops.changed(), Some(true));
            assert_eq!(stops.changed(), Some(false));

            // Two such stops in a row keep every touched file's latest stamp.
            append(&root.join("a.txt"), "1");
            assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
            append(
                &root.join("a.txt"),
                "2 (by a command in the same iteration)",
            );
            append(&root.join("b.txt"), "1");
            assert_eq!(stops.edited(&["b.txt"], false).changed, Some(true));
            assert_eq!(stops.changed(), None, "a.txt's change was that stop's");
            assert_eq!(stops.changed(), Some(false));
            append(&root.join("a.txt"), "3");
            assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
            append(&root.join("b.txt"), "2");
            assert_eq!(stops.edited(&["b.txt"], false).changed, Some(true));
            append(&root.join("a.txt"), "4 (by a command)");
            assert_eq!(stops.changed(), Some(true), "a file touched two stops ago");
        }
    }

    #[test]
    fn edits_that_do_not_count_lead_to_a_full_check() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt"]);
        let outside = TempDir::new();
        let mut stops = Stops::start(root);
        for file in [
            root.join(".claude/notes.md"),
            root.join("target/debug/out.txt"),
            root.join("web/node_modules/x/index.js"),
            outside.path().join("elsewhere.txt"),
            root.join("../elsewhere.txt"),
            PathBuf::from("relative.txt"),
        ] {
            let reading = stops.stop(ToolEdits {
                changed_files: vec![file.clone()],
                fully_described: true,
            });
            assert_eq!(
                (reading.changed, reading.method),
                (Some(false), Method::Git),
                "{}",
                file.display()
            );
        }
        // Through `..` and `.` back into the project, it counts.
        let reading = stops.stop(ToolEdits {
            changed_files: vec![root.join("target/../a.txt"), root.join("./a.txt")],
            fully_described: true,
        });
        assert_eq!(reading.method, Method::ToolEdits);
    }

    #[cfg(unix)]
    #[test]
    fn edits_named_through_a_symbolic_link_count() {
        let dir = TempDir::new();
        let real = dir.path().join("real");
        fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
        fs::write(real.join("a.txt"), "a").unwrap();
        let mut stops = Stops::start(&dir.path().join("link"));
        append(&real.join("a.txt"), "b");
        let reading = stops.stop(ToolEdits {
            changed_files: vec![real.join("a.txt")],
            fully_described: true,
        });
        assert_eq!(reading.method, Method::ToolEdits);
        assert_eq!(stops.changed(), Some(false));
    }

    #[test]
    fn a_scan_keeps_its_listing_as_hashes_and_takes_tool_edits_exactly() {
        let dir = TempDir::new();
        let root = dir.path();
        fs::create_dir_all(root.join("src")).unwrap();
        for i in 0..100 {
            fs::write(root.join(format!("src/{i}.txt")), "x").unwrap();
        }
        let mut stops = Stops::start(root);
        let baseline = stops.baseline.clone().unwrap();
        assert_eq!(baseline.source, Method::Scan);
        assert!(baseline.files.is_empty() && baseline.digest.is_none());
        // 32 characters a file, no path: what each stop reads and writes.
        let json = serde_json::to_string(&baseline).unwrap();
        assert!(json.len() < 100 * 32 + 100, "{json}");
        assert!(baseline.lists("src/7.txt") && !baseline.lists("src/100.txt"));
        assert_eq!(stops.changed(), Some(false));

        // A tool's edit, a new file and a file the agent removed: each is
        // counted at its own stop, and never again.
        append(&root.join("src/7.txt"), "tool");
        fs::write(root.join("src/new.txt"), "n").unwrap();
        assert_eq!(
            stops.edited(&["src/7.txt", "src/new.txt"], true).changed,
            Some(true)
        );
        assert!(!stops.baseline.as_ref().unwrap().stale);
        assert_eq!(stops.changed(), Some(false), "the edits were taken in");
        fs::remove_file(root.join("src/8.txt")).unwrap();
        assert_eq!(stops.edited(&["src/8.txt"], true).changed, Some(true));
        assert_eq!(
            stops.changed(),
            Some(false),
            "the file is gone from the listing"
        );
        append(&root.join("src/9.txt"), "bash");
        assert_eq!(stops.changed(), Some(true), "a change no tool reported");
        assert_eq!(stops.changed(), Some(false));
    }

    #[cfg(unix)]
    #[test]
    fn a_scan_never_counts_a_tool_edit_through_a_linked_folder_twice() {
        let dir = TempDir::new();
        let root = dir.path();
        fs::create_dir_all(root.join("real")).unwrap();
        fs::write(root.join("real/a.txt"), "a").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
        let mut stops = Stops::start(root);
        append(&root.join("real/a.txt"), "b");
        // Named through the link: not a path the scan lists, so the
        // listing cannot take it in exactly and goes stale instead.
        assert_eq!(stops.edited(&["link/a.txt"], true).changed, Some(true));
        assert!(stops.baseline.as_ref().unwrap().stale);
        assert_ne!(stops.changed(), Some(true), "counted once");
        assert_eq!(stops.changed(), Some(false));
    }

    #[test]
    fn a_long_listing_is_kept_as_a_digest() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt"]);
        fs::create_dir_all(root.join("many")).unwrap();
        for i in 0..=MAX_LISTED {
            fs::write(root.join(format!("many/{i}.txt")), "x").unwrap();
        }
        let mut stops = Stops::start(root);
        let baseline = stops.baseline.clone().unwrap();
        assert!(baseline.files.is_empty() && baseline.digest.is_some());
        assert!(serde_json::to_string(&baseline).unwrap().len() < 200);
        assert_eq!(stops.changed(), Some(false));
        append(&root.join("many/7.txt"), "y");
        assert_eq!(stops.changed(), Some(true));
        fs::remove_file(root.join("many/8.txt")).unwrap();
        assert_eq!(stops.changed(), Some(true), "a file gone");
        assert_eq!(stops.changed(), Some(false));

        // A digest cannot take a tool's edit: the baseline goes stale.
        append(&root.join("a.txt"), "tool");
        assert_eq!(stops.edited(&["a.txt"], true).changed, Some(true));
        assert!(stops.baseline.as_ref().unwrap().stale);
        assert_eq!(stops.changed(), None);
        assert_eq!(stops.changed(), Some(false));
    }

    #[test]
    fn the_baseline_stays_bounded() {
        let dir = TempDir::new();
        let root = dir.path();
        fs::write(root.join("a.txt"), "a").unwrap();
        let mut stops = Stops::start(root);
        let names: Vec<String> = (0..MAX_LISTED + 50).map(|i| format!("f{i}.txt")).collect();
        for name in &names {
            fs::write(root.join(name), "x").unwrap();
        }
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for alone in [true, false] {
            assert_eq!(stops.edited(&refs, alone).changed, Some(true));
            let baseline = stops.baseline.as_ref().unwrap();
            assert!(baseline.files.len() <= MAX_LISTED);
            assert!(baseline.hashed_files.as_ref().map_or(0, String::len) <= MAX_LISTED * 32);
            assert!(baseline.touched.len() <= MAX_LISTED);
        }
    }

    #[test]
    fn a_scan_past_its_limit_never_says_unchanged() {
        let dir = TempDir::new();
        let root = dir.path();
        for i in 0..30 {
            fs::write(root.join(format!("f{i:02}.txt")), "x").unwrap();
        }
        let limits = Limits {
            scan_files: 10,
            scan_time: SCAN_TIMEOUT,
        };
        let mut stops = Stops::start_within(root, limits);
        assert!(stops.baseline.as_ref().unwrap().truncated);
        let reading = stops.full();
        assert_eq!(
            (reading.changed, reading.method),
            (None, Method::Scan),
            "an unchanged start proves nothing about the rest"
        );
        append(&root.join("f25.txt"), "past the limit");
        assert_eq!(
            stops.changed(),
            None,
            "a change past the limit is not denied"
        );
        append(&root.join("f03.txt"), "within the limit");
        assert_eq!(stops.changed(), Some(true), "a change it reached");
        fs::remove_file(root.join("f29.txt")).unwrap();
        for i in 0..20 {
            fs::remove_file(root.join(format!("f{i:02}.txt"))).unwrap();
        }
        assert_eq!(stops.changed(), Some(true), "under the limit again");
        assert_eq!(stops.changed(), Some(false), "and now it can tell");
    }

    #[test]
    fn the_scan_skips_its_ignored_folders() {
        let dir = TempDir::new();
        let root = dir.path();
        fs::write(root.join("a.txt"), "a").unwrap();
        let mut stops = Stops::start(root);
        for folder in [
            "node_modules/x",
            "target/debug",
            ".claude/ralph",
            "src/__pycache__",
        ] {
            fs::create_dir_all(root.join(folder)).unwrap();
            fs::write(root.join(folder).join("f"), "x").unwrap();
        }
        assert_eq!(stops.changed(), Some(false));
        fs::write(root.join("src/lib.rs"), "x").unwrap();
        assert_eq!(stops.changed(), Some(true));
    }

    #[test]
    fn without_a_baseline_a_reading_tells_nothing_but_leaves_one() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt"]);
        let reading = read(root, None, &ToolEdits::default());
        assert_eq!((reading.changed, reading.method), (None, Method::Git));
        assert!(reading.baseline.is_some());
        let reading = read(
            root,
            None,
            &ToolEdits {
                changed_files: vec![root.join("a.txt")],
                fully_described: true,
            },
        );
        assert_eq!((reading.changed, reading.baseline), (Some(true), None));
    }

    #[test]
    fn a_hand_edited_baseline_is_never_passed_to_git() {
        let dir = TempDir::new();
        let root = dir.path();
        repository(root, &["a.txt"]);
        let mut baseline = baseline(root).unwrap();
        baseline.head = Some("--output=pwned".into());
        let reading = read(root, Some(&baseline), &ToolEdits::default());
        assert_eq!(reading.changed, None);
        assert!(!root.join("pwned").exists());
        let json = r#"{"source": "tool_edits", "files": {"a.txt": "zz"}}"#;
        let odd: Baseline = serde_json::from_str(json).unwrap();
        assert_eq!(read(root, Some(&odd), &ToolEdits::default()).changed, None);
    }

    // ------------------------------------------- programs git must not run

    /// A shell command that leaves `marker` behind: had git run it, it shows.
    fn trap(marker: &Path) -> String {
        format!("touch '{}'", marker.display())
    }

    /// `trap` as an executable script (for `core.fsmonitor`).
    fn trap_script(dir: &Path, marker: &Path) -> PathBuf {
        let script = dir.join("trap.sh");
        fs::write(&script, format!("#!/bin/sh\n{}\n", trap(marker))).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        }
        script
    }

    /// `git ARGS` in `dir` as a person runs it (stopped after 5 s), to prove
    /// that the repository really makes git run the program.
    fn plain_git(dir: &Path, args: &[&str]) {
        let mut command = Command::new("git");
        command.args(args).current_dir(dir);
        let _ = run_git(command, Instant::now() + Duration::from_secs(5));
    }

    /// Rewrites `a.txt` with the same content: a new stamp, so git compares
    /// the content, through whatever filter the file's attributes name.
    fn rewrite_unchanged(root: &Path) {
        tick();
        let path = root.join("a.txt");
        fs::write(&path, fs::read(&path).unwrap()).unwrap();
    }

    /// Stops in `root`, a repository of `a.txt` and `b.txt` made hostile so
    /// that git would run a program leaving `marker`: the readings never run
    /// it, end well inside git's timeout, and still see what really changed
    /// (`method`: how). The caller then proves the program is live.
    fn stops_in_a_hostile_repository(root: &Path, marker: &Path, method: Method) {
        let started = Instant::now();
        let mut stops = Stops::start(root);
        rewrite_unchanged(root);
        let reading = stops.full();
        assert_eq!(reading.method, method);
        if method == Method::Git {
            assert_eq!(reading.changed, Some(false), "the same content again");
        }
        append(&root.join("b.txt"), "edit");
        assert_eq!(stops.changed(), Some(true), "a tracked file edited");
        tick();
        fs::write(root.join("new.txt"), "new").unwrap();
        let reading = stops.full();
        assert_eq!(
            (reading.changed, reading.method),
            (Some(true), method),
            "a new file"
        );
        assert!(!marker.exists(), "git ran the program the repository names");
        assert!(
            started.elapsed() < GIT_TIMEOUT,
            "the readings waited for git's timeout: {:?}",
            started.elapsed()
        );
        rewrite_unchanged(root);
    }

    #[test]
    fn git_never_runs_the_fsmonitor_the_repository_names() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        let marker = dir.path().join("ran");
        let script = trap_script(dir.path(), &marker);
        git(
            &root,
            &["config", "core.fsmonitor", &script.display().to_string()],
        );
        stops_in_a_hostile_repository(&root, &marker, Method::Git);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the fsmonitor");
    }

    #[test]
    fn git_never_runs_a_clean_filter_named_in_gitattributes() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        let marker = dir.path().join("ran");
        // Names with dots, quotes, capitals, or none at all are all disabled.
        for name in ["trap", "x.y", "it's", "Up", ""] {
            git(
                &root,
                &["config", &format!("filter.{name}.clean"), &trap(&marker)],
            );
        }
        git(&root, &["config", "filter.trap.required", "true"]);
        fs::write(root.join(".gitattributes"), "*.txt filter=trap\n").unwrap();
        stops_in_a_hostile_repository(&root, &marker, Method::Git);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the clean filter");
        for name in ["x.y", "it's", "Up", ""] {
            fs::remove_file(&marker).unwrap();
            fs::write(
                root.join(".gitattributes"),
                format!("*.txt filter={name}\n"),
            )
            .unwrap();
            let before = baseline(&root);
            rewrite_unchanged(&root);
            let reading = read(&root, before.as_ref(), &ToolEdits::default());
            assert_eq!(reading.method, Method::Git, "{name}");
            assert!(!marker.exists(), "the filter {name:?} ran");
            plain_git(&root, &["status"]);
            assert!(marker.exists(), "plain git status runs the filter {name:?}");
        }
    }

    #[test]
    fn git_never_runs_a_process_filter_from_an_included_file() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        let marker = dir.path().join("ran");
        let included = dir.path().join("included.gitconfig");
        fs::write(
            &included,
            format!("[filter \"long\"]\n\tprocess = {}\n", trap(&marker)),
        )
        .unwrap();
        git(
            &root,
            &["config", "include.path", &included.display().to_string()],
        );
        fs::write(root.join(".gitattributes"), "*.txt filter=long\n").unwrap();
        stops_in_a_hostile_repository(&root, &marker, Method::Git);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the process filter");
    }

    #[test]
    fn git_never_runs_a_filter_named_in_info_attributes() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        let marker = dir.path().join("ran");
        git(&root, &["config", "filter.hidden.clean", &trap(&marker)]);
        fs::write(root.join(".git/info/attributes"), "* filter=hidden\n").unwrap();
        stops_in_a_hostile_repository(&root, &marker, Method::Git);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the filter");
    }

    #[test]
    fn git_never_runs_a_filter_of_the_repository_above_a_folder_that_only_looks_like_one() {
        // `app/.git` is an empty folder: git passes it by and takes the
        // repository above, whose configuration names the filter.
        let dir = TempDir::new();
        let top = dir.path().join("repo");
        let root = top.join("app");
        fs::create_dir_all(&root).unwrap();
        repository(&top, &["app/a.txt", "app/b.txt"]);
        let marker = dir.path().join("ran");
        git(&top, &["config", "filter.above.clean", &trap(&marker)]);
        fs::write(top.join(".gitattributes"), "* filter=above\n").unwrap();
        fs::create_dir(root.join(".git")).unwrap();
        let mut stops = Stops::start(&root);
        rewrite_unchanged(&root);
        stops.full();
        assert!(!marker.exists(), "the hook ran the filter");
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the filter");
    }

    /// Environment variables for [`may_name_filters`].
    type Vars<'a> = [(&'a str, &'a Path)];

    /// What [`configuration_may_name_filters`] answers for `root` with the
    /// environment `vars` (and nothing else).
    fn may_name_filters(root: &Path, vars: &Vars) -> bool {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
            .collect();
        configuration_may_name_filters(root, &|name| {
            vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn git_config_is_asked_only_when_a_configuration_file_may_name_a_filter() {
        let dir = TempDir::new();
        let home = dir.path().join("home");
        let root = dir.path().join("repo");
        fs::create_dir_all(&home).unwrap();
        fs::create_dir_all(&root).unwrap();
        repository(&root, &["a.txt"]);
        let vars = [("HOME", home.as_path())];
        assert!(!may_name_filters(&root, &vars), "nothing names a filter");
        assert!(
            !may_name_filters(&root.join("sub"), &vars),
            "from a subfolder"
        );

        // Each file git reads, with a filter or an include in it.
        let xdg = dir.path().join("xdg");
        let global = dir.path().join("global");
        let with_xdg = [("HOME", home.as_path()), ("XDG_CONFIG_HOME", xdg.as_path())];
        let with_global = [
            ("HOME", home.as_path()),
            ("GIT_CONFIG_GLOBAL", global.as_path()),
        ];
        let cases: [(&Vars, PathBuf, &str); 7] = [
            (
                &vars,
                home.join(".gitconfig"),
                "[Filter \"x\"]\n\tclean = x\n",
            ),
            (
                &vars,
                home.join(".config/git/config"),
                "[filter.x]\nclean = x\n",
            ),
            (
                &with_xdg,
                xdg.join("git/config"),
                "[FILTER \"x\"]\n\tsmudge = x\n",
            ),
            (
                &with_global,
                global.clone(),
                "[filter \"x\"]\n\tprocess = x\n",
            ),
            (
                &vars,
                root.join(".git/config.worktree"),
                "[filter \"x\"]\nclean=x\n",
            ),
            (
                &vars,
                root.join(".git/config"),
                "[includeIf \"onbranch:main\"]\npath = x\n",
            ),
            (
                &vars,
                dir.path().join(".git/config"),
                "[filter \"x\"]\nclean = x\n",
            ),
        ];
        for (vars, file, text) in cases {
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            let before = fs::read(&file).ok();
            let mut with = before.clone().unwrap_or_default();
            with.extend_from_slice(text.as_bytes());
            fs::write(&file, with).unwrap();
            assert!(
                may_name_filters(&root, vars),
                "{} with {text:?}",
                file.display()
            );
            match before {
                Some(bytes) => fs::write(&file, bytes).unwrap(),
                None => fs::remove_file(&file).unwrap(),
            }
            assert!(
                !may_name_filters(&root, vars),
                "{} restored",
                file.display()
            );
        }
        // The same file elsewhere is not read by git, and not here either.
        fs::write(home.join("unrelated"), "[filter \"x\"]\n").unwrap();
        assert!(!may_name_filters(&root, &vars));

        // What cannot be settled without git.
        assert!(may_name_filters(&root, &[]), "no HOME");
        let count = [
            ("HOME", home.as_path()),
            ("GIT_CONFIG_COUNT", Path::new("1")),
        ];
        assert!(
            may_name_filters(&root, &count),
            "configuration in the environment"
        );
        fs::write(root.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        assert!(
            may_name_filters(&root, &vars),
            "a folder that may be a bare repository"
        );
        fs::remove_file(root.join("HEAD")).unwrap();
        fs::write(root.join(".git/commondir"), "..\n").unwrap();
        assert!(
            may_name_filters(&root, &vars),
            "a shared configuration elsewhere"
        );
        fs::remove_file(root.join(".git/commondir")).unwrap();
        let worktree = dir.path().join("worktree");
        fs::create_dir(&worktree).unwrap();
        fs::write(worktree.join(".git"), "gitdir: ../repo/.git\n").unwrap();
        assert!(may_name_filters(&worktree, &vars), "a .git file");
        #[cfg(unix)]
        {
            let fifo = home.join(".gitconfig");
            let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(made.success());
            assert!(
                may_name_filters(&root, &vars),
                "a configuration that is a FIFO"
            );
        }
        assert!(!may_name_filters(
            &dir.path().join("elsewhere"),
            &[("HOME", Path::new("/nonexistent"))]
        ));
    }

    #[test]
    fn a_filter_name_git_cannot_be_told_to_disable_means_a_scan() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        let marker = dir.path().join("ran");
        // `-c filter.a=b.clean=` would set `filter.a` to `b.clean=`.
        git(&root, &["config", "filter.a=b.clean", &trap(&marker)]);
        fs::write(root.join(".git/info/attributes"), "* filter=a=b\n").unwrap();
        stops_in_a_hostile_repository(&root, &marker, Method::Scan);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the filter");
    }

    #[test]
    fn git_never_runs_textconv_or_external_diff_programs() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt", "c.md"]);
        let markers: Vec<PathBuf> = ["command", "textconv", "external"]
            .iter()
            .map(|m| dir.path().join(m))
            .collect();
        git(&root, &["config", "diff.trap.command", &trap(&markers[0])]);
        git(&root, &["config", "diff.trap.textconv", &trap(&markers[1])]);
        git(&root, &["config", "diff.external", &trap(&markers[2])]);
        fs::write(root.join(".gitattributes"), "*.txt diff=trap\n").unwrap();
        stops_in_a_hostile_repository(&root, &markers[0], Method::Git);
        // A commit between two stops: the trees are compared too.
        let mut stops = Stops::start(&root);
        append(&root.join("c.md"), "edit");
        git(&root, &["add", "-A"]);
        git(&root, &["commit", "-q", "-m", "two"]);
        assert_eq!(stops.changed(), Some(true), "a commit");
        for marker in &markers {
            assert!(!marker.exists(), "{} ran", marker.display());
        }
        plain_git(&root, &["diff", "HEAD~1", "HEAD"]);
        plain_git(&root, &["diff", "--no-ext-diff", "HEAD~1", "HEAD"]);
        for marker in &markers {
            assert!(marker.exists(), "plain git diff runs {}", marker.display());
        }
    }

    #[test]
    fn git_never_recurses_into_a_submodule_with_its_own_configuration() {
        let dir = TempDir::new();
        let inner = dir.path().join("inner");
        fs::create_dir(&inner).unwrap();
        repository(&inner, &["s.txt"]);
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt", "b.txt"]);
        git(
            &root,
            &[
                "-c",
                "protocol.file.allow=always",
                "submodule",
                "add",
                "-q",
                &inner.display().to_string(),
                "sm",
            ],
        );
        git(&root, &["commit", "-q", "-m", "submodule"]);
        let marker = dir.path().join("ran");
        let sm = root.join("sm");
        git(&sm, &["config", "filter.sub.clean", &trap(&marker)]);
        let script = trap_script(dir.path(), &marker);
        git(
            &sm,
            &["config", "core.fsmonitor", &script.display().to_string()],
        );
        fs::write(sm.join(".git/info/attributes"), "* filter=sub\n")
            .or_else(|_| {
                let gitdir = root.join(".git/modules/sm/info");
                fs::create_dir_all(&gitdir)?;
                fs::write(gitdir.join("attributes"), "* filter=sub\n")
            })
            .unwrap();
        tick();
        fs::write(sm.join("s.txt"), "s.txt\n").unwrap();
        stops_in_a_hostile_repository(&root, &marker, Method::Git);
        // A commit inside the submodule moves what the superproject records.
        let mut stops = Stops::start(&root);
        fs::write(sm.join("s.txt"), "changed\n").unwrap();
        git(
            &sm,
            &[
                "-c",
                "core.fsmonitor=false",
                "-c",
                "filter.sub.clean=",
                "commit",
                "-q",
                "-am",
                "inner",
            ],
        );
        assert_eq!(stops.changed(), Some(true), "the submodule's HEAD moved");
        assert!(!marker.exists(), "git ran the submodule's program");
        tick();
        fs::write(sm.join("s.txt"), "changed\n").unwrap();
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status recurses and runs it");
    }

    #[test]
    fn a_partial_clone_never_fetches_a_missing_object() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["d/a.txt"]);
        let marker = dir.path().join("ran");
        for (key, value) in [
            ("core.repositoryformatversion", "1"),
            ("extensions.partialClone", "origin"),
            ("remote.origin.url", "ssh://example.invalid/x"),
            ("remote.origin.promisor", "true"),
            ("core.sshCommand", &format!("{}; false", trap(&marker))),
        ] {
            git(&root, &["config", key, value]);
        }
        // The index no longer matches HEAD's tree of `d`, and that tree is gone.
        append(&root.join("d/a.txt"), "staged");
        git(&root, &["add", "d/a.txt"]);
        let out = Command::new("git")
            .args(["rev-parse", "HEAD:d"])
            .current_dir(&root)
            .output()
            .unwrap();
        let tree = String::from_utf8(out.stdout).unwrap();
        let tree = tree.trim();
        fs::remove_file(root.join(format!(".git/objects/{}/{}", &tree[..2], &tree[2..]))).unwrap();
        let started = Instant::now();
        let mut stops = Stops::start(&root);
        tick();
        fs::write(root.join("new.txt"), "new").unwrap();
        assert_eq!(stops.changed(), Some(true), "seen by the scan");
        assert!(!marker.exists(), "git fetched through core.sshCommand");
        assert!(started.elapsed() < GIT_TIMEOUT);
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status fetches the tree");
    }

    #[cfg(unix)]
    #[test]
    fn a_configuration_that_blocks_git_costs_the_reading_not_the_stop() {
        let dir = TempDir::new();
        let root = dir.path().join("repo");
        fs::create_dir(&root).unwrap();
        repository(&root, &["a.txt"]);
        // Included, it is opened for reading, and nothing ever writes to it.
        let fifo = dir.path().join("included.gitconfig");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        git(
            &root,
            &["config", "include.path", &fifo.display().to_string()],
        );
        let started = Instant::now();
        let listed = disabled_filters(&root, Instant::now() + Duration::from_millis(300));
        assert!(matches!(listed, Err(GitListing::Failed)));
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[cfg(unix)]
    fn gone(pid: &str) -> bool {
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            // A zombie until its new parent reaps it counts as gone.
            match fs::read_to_string(&stat) {
                Err(_) => return true,
                Ok(s) if s.contains(") Z ") => return true,
                Ok(_) if Instant::now() > deadline => return false,
                Ok(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn git_is_killed_with_its_whole_group() {
        for waiting in [Waiting::Pidfd, Waiting::Threads] {
            let dir = TempDir::new();
            let pid_file = dir.path().join("sleeper.pid");
            let sleeper = format!("sleep 30 & echo $! > '{}';", pid_file.display());
            // Overruns its deadline: killed, with what it started.
            let mut command = Command::new("sh");
            command.args(["-c", &format!("{sleeper} sleep 30")]);
            let started = Instant::now();
            let run = run_git_waiting(
                command,
                Instant::now() + Duration::from_millis(300),
                waiting,
            );
            assert!(matches!(run, GitRun::Failed));
            assert!(started.elapsed() < Duration::from_secs(3));
            assert!(gone(&fs::read_to_string(&pid_file).unwrap()));
            // Ends, but what it started holds its output open: killed too.
            fs::remove_file(&pid_file).unwrap();
            let mut command = Command::new("sh");
            command.args(["-c", &format!("{sleeper} echo done")]);
            let started = Instant::now();
            let run = run_git_waiting(command, Instant::now() + Duration::from_secs(20), waiting);
            assert!(matches!(&run, GitRun::Output(bytes) if bytes == b"done\n"));
            assert!(started.elapsed() < Duration::from_secs(3));
            assert!(gone(&fs::read_to_string(&pid_file).unwrap()));
            // Output, exit codes and a start that fails, either way.
            let mut command = Command::new("sh");
            command.args(["-c", "printf 'a\\0b'; exit 0"]);
            let run = run_git_waiting(command, Instant::now() + Duration::from_secs(20), waiting);
            assert!(matches!(&run, GitRun::Output(bytes) if bytes == b"a\0b"));
            let mut command = Command::new("sh");
            command.args(["-c", "exit 128"]);
            let run = run_git_waiting(command, Instant::now() + Duration::from_secs(20), waiting);
            assert!(matches!(run, GitRun::Exited(128)));
            let command = Command::new(dir.path().join("no-such-git"));
            let run = run_git_waiting(command, Instant::now() + Duration::from_secs(20), waiting);
            assert!(matches!(run, GitRun::NotUsable));
            // A large output is read whole (more than a pipe holds).
            let mut command = Command::new("sh");
            command.args(["-c", "head -c 300000 /dev/zero"]);
            let run = run_git_waiting(command, Instant::now() + Duration::from_secs(20), waiting);
            assert!(matches!(&run, GitRun::Output(bytes) if bytes.len() == 300_000));
        }
    }

    #[test]
    fn tdd_scenario_is_read_when_present() {
        let dir = TempDir::new();
        assert_eq!(tdd_scenario(dir.path()), None);
        let runtime = dir.path().join(RUNTIME_DIR);
        fs::create_dir_all(&runtime).unwrap();
        fs::write(
            runtime.join(TDD_STATE_FILE),
            r#"{"currentScenario": "login works", "other": 1}"#,
        )
        .unwrap();
        assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("login works"));
        fs::write(runtime.join(TDD_STATE_FILE), r#"{"currentScenario": 7}"#).unwrap();
        assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("7"));
        fs::write(runtime.join(TDD_STATE_FILE), "not json").unwrap();
        assert_eq!(tdd_scenario(dir.path()), None);
    }
}
