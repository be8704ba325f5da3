//! The one way ralph writes a whole file: a new temp file beside it, under a
//! name nobody can guess, created exclusively and never through a symlink,
//! fsynced, then renamed over the destination (and the folder fsynced).
//!
//! A planted symlink at any temp name (a cloned repository can ship one for
//! every pid) is never followed: `create_new` (`O_EXCL`) refuses anything
//! already at the name, `O_NOFOLLOW` refuses a link, and the name carries 64
//! random bits besides. The rename replaces the destination itself, never a
//! file a symlink there points to; callers decide first whether a link at
//! the destination may be replaced at all.

use std::collections::hash_map::RandomState;
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// How many temp names are tried before giving up (each collision is a file
/// someone else put at a name with 64 random bits).
const ATTEMPTS: u32 = 8;

/// The prefix of every temp file written for `path`: `.<name>.tmp-`, so a
/// writer holding a lock can find and remove the ones a killed writer left.
pub fn temp_prefix(path: &Path) -> String {
    format!(
        ".{}.tmp-",
        path.file_name().unwrap_or_default().to_string_lossy()
    )
}

/// 16 hex digits nobody can predict: std's hasher keys are seeded from the
/// operating system's randomness; the time, the pid and a counter make each
/// call differ (no extra crate, the same on every platform).
pub fn random_suffix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut h = RandomState::new().build_hasher();
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    format!("{:016x}", h.finish())
}

/// Creates a new file at `path` for writing with `mode` (less the umask;
/// ignored off Unix): fails if anything, a symlink included, is already there.
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode).custom_flags(libc::O_NOFOLLOW);
    }
    #[cfg(not(unix))]
    let _ = mode;
    options.open(path)
}

/// Sets the permission bits of the regular file at `path` to exactly `mode`,
/// on the file itself: never through a symlink (`O_NOFOLLOW`), never waiting
/// on a FIFO (`O_NONBLOCK`), and refusing anything but a regular file.
#[cfg(unix)]
pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    file.set_permissions(fs::Permissions::from_mode(mode))
}

/// Replaces `path` with `bytes` atomically: a reader sees the old file or the
/// new one, never a torn one, and a failed write leaves the old file and no
/// temp file. The new file gets `mode` (less the umask).
pub fn write_file(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (tmp, mut file) = new_temp(path, mode)?;
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&tmp, path)?;
        sync_dir(path.parent().unwrap_or(Path::new(".")));
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A new temp file beside `path`, under a fresh random name.
fn new_temp(path: &Path, mode: u32) -> io::Result<(PathBuf, File)> {
    let prefix = temp_prefix(path);
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let tmp = path.with_file_name(format!("{prefix}{}", random_suffix()));
        match create_new(&tmp, mode) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temp file name was free")))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) {}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn writes_replaces_and_leaves_no_temp_file() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("settings.json");
        write_file(&path, b"one", 0o644).unwrap();
        write_file(&path, b"two", 0o644).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(names(dir.path()), ["settings.json"]);
    }

    #[test]
    fn suffixes_are_distinct_hex() {
        let a = random_suffix();
        let b = random_suffix();
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_no_temp_file() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("taken");
        // A folder at the destination: the rename fails.
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), "x").unwrap();
        assert!(write_file(&path, b"new", 0o644).is_err());
        assert_eq!(names(dir.path()), ["taken"]);
        assert_eq!(fs::read(path.join("inside")).unwrap(), b"x");
    }

    #[cfg(unix)]
    #[test]
    fn planted_symlinks_are_never_followed() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let dir = TempDir::new().unwrap();
        let victim = dir.path().join("victim");
        fs::write(&victim, "keep me").unwrap();
        let path = dir.path().join("out");
        // Links at the names a pid-based scheme would use, and a link at the
        // destination: the write replaces the link, never the victim.
        for pid in std::process::id()..std::process::id() + 64 {
            symlink(&victim, path.with_file_name(format!(".out.tmp-{pid}"))).unwrap();
        }
        symlink(&victim, &path).unwrap();
        write_file(&path, b"new", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me");
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o077, 0);
        // create_new refuses a dangling link and creates nothing through it.
        let dangling = dir.path().join("dangling");
        symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let err = create_new(&dangling, 0o600).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert!(!dir.path().join("nowhere").exists());
    }
}
