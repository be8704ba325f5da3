//! Files as a progress reading keeps them: paths inside the project as keys,
//! a file's stamp (size, times, inode, mode), and the digests and path hashes
//! a long listing is kept as.

use super::*;
use crate::fnv::Fnv;

/// The project root as git sees it (symbolic links resolved), so that the
/// paths git prints line up with it.
pub(super) fn canonical(root: &Path) -> PathBuf {
    fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf())
}

// ------------------------------------------------------------------ stamps

/// A stamp for a file that does not exist (or cannot be looked at).
pub(super) const ABSENT: u64 = 0;

/// What changes when a file is written, replaced, renamed or chmod-ed: size,
/// mtime, ctime, inode and mode, hashed to 64 bits ([`ABSENT`] never).
pub(super) fn stamp_of(meta: &fs::Metadata) -> u64 {
    let mut h = Fnv::new();
    h.word(meta.len());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        h.word(meta.mtime().cast_unsigned());
        h.word(meta.mtime_nsec().cast_unsigned());
        h.word(meta.ctime().cast_unsigned());
        h.word(meta.ctime_nsec().cast_unsigned());
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
pub(super) fn stamp_now(root: &Path, key: &str) -> u64 {
    match key_path(key) {
        Some(relative) => {
            fs::symlink_metadata(root.join(relative)).map_or(ABSENT, |m| stamp_of(&m))
        }
        None => ABSENT,
    }
}

pub(super) fn stamp_text(stamp: u64) -> String {
    if stamp == ABSENT {
        "-".into()
    } else {
        format!("{stamp:016x}")
    }
}

pub(super) fn parse_stamp(text: &str) -> Option<u64> {
    if text == "-" {
        Some(ABSENT)
    } else {
        u64::from_str_radix(text, 16).ok()
    }
}

/// The splitmix64 finaliser: spreads FNV's weak high bits.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ------------------------------------------------------------------ keys

/// A path relative to the project root, as bytes with `/` separators.
#[cfg(unix)]
pub(super) fn path_bytes(path: &Path) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    path.as_os_str().as_bytes().to_vec()
}

#[cfg(not(unix))]
pub(super) fn path_bytes(path: &Path) -> Vec<u8> {
    path.to_string_lossy().replace('\\', "/").into_bytes()
}

/// The key of a relative path in a baseline: the path itself when it is
/// UTF-8, else a NUL (which no path holds) and its bytes in hex, so that
/// every path has its own key and the key gives the path back.
pub(super) fn key_of(bytes: &[u8]) -> String {
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
pub(super) fn key_bytes(key: &str) -> Option<Vec<u8>> {
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
pub(super) fn key_path(key: &str) -> Option<PathBuf> {
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
pub(super) fn under_own_dir(relative: &[u8]) -> bool {
    relative
        .split(|&b| b == b'/')
        .any(|part| part == OWN_DIR.as_bytes())
}

/// True when a folder of the relative path is one the scan skips.
pub(super) fn under_ignored_dir(relative: &Path) -> bool {
    let mut parts: Vec<_> = relative.components().collect();
    parts.pop(); // the file itself
    parts.iter().any(|part| match part {
        Component::Normal(name) => SCAN_IGNORES
            .iter()
            .any(|i| *name == std::ffi::OsStr::new(i)),
        _ => false,
    })
}

/// The keys of the files in `paths` that lie inside the project, outside
/// `.claude/` and the scan's ignored folders (the edits that count).
pub(super) fn project_keys(given_root: &Path, root: &Path, paths: &[PathBuf]) -> Vec<String> {
    let mut keys = Vec::new();
    for path in paths {
        if !path.is_absolute() {
            continue;
        }
        let path = crate::paths::lexically_normal(path);
        let relative = path
            .strip_prefix(root)
            .or_else(|_| path.strip_prefix(crate::paths::lexically_normal(given_root)))
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
pub(super) struct Digest {
    pub(super) count: u64,
    pub(super) a: u64,
    pub(super) b: u64,
}

impl Digest {
    pub(super) fn add(&mut self, path: &[u8], stamp: u64) {
        self.add_hashed(path_hash(path), stamp);
    }

    pub(super) fn add_hashed(&mut self, path_hash: u64, stamp: u64) {
        self.count += 1;
        self.a = self.a.wrapping_add(mix(path_hash ^ mix(stamp)));
        self.b = self.b.wrapping_add(mix(
            path_hash.rotate_left(32) ^ stamp.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ));
    }

    pub(super) fn text(&self) -> String {
        format!("{}:{:016x}{:016x}", self.count, self.a, self.b)
    }

    pub(super) fn parse(text: &str) -> Option<Digest> {
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
pub(super) fn path_hash(path: &[u8]) -> u64 {
    let mut h = Fnv::new();
    h.bytes(path);
    h.finish()
}

/// `hashedFiles` text: each (path hash, stamp) as 32 hex digits, in order.
pub(super) fn encode_hashed(entries: &[(u64, u64)]) -> String {
    let mut text = String::with_capacity(entries.len() * 32);
    for (hash, stamp) in entries {
        text.push_str(&format!("{hash:016x}{stamp:016x}"));
    }
    text
}

/// The entries of a `hashedFiles` text; `None` when it is not one.
pub(super) fn decode_hashed(text: &str) -> Option<Vec<(u64, u64)>> {
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
