//! The locked, atomic store of the loop's state.
//!
//! Every read-modify-write holds an exclusive lock on a sibling lock file
//! (`ralph-state.json.lock`), and every write goes to a temp file in the same
//! folder that is fsynced and renamed over the state, so a reader sees the old
//! or the new state and never a torn one. A state file that cannot be parsed
//! is reported, never replaced, until someone resets it on purpose.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use fs2::FileExt;
use thiserror::Error;

use crate::atomic;
use crate::paths::ProjectPaths;
use crate::state::LoopState;

/// How long to wait for the lock before giving up.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest state file accepted; a bigger one is treated as corrupt.
pub const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;

/// What can go wrong with the state file.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done ("read", "write", "lock", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The state file exists but is not a valid state.
    #[error("state file {path} is corrupt ({message}); see it with `ralph-ctl status`, clear it with `ralph-ctl reset`")]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The lock was held by someone else for too long.
    #[error("timed out after {}s waiting for the lock {path}; another ralph process may be stuck", LOCK_TIMEOUT.as_secs())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
    },
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

/// Makes a write past the file size limit (`ulimit -f`, RLIMIT_FSIZE) fail
/// with EFBIG, reported like any other write error, instead of raising
/// SIGXFSZ, whose default action kills the process mid-update. Call it first
/// thing in `main`, before any thread starts.
pub fn ignore_file_size_signal() {
    #[cfg(unix)]
    #[allow(unsafe_code)]
    // SAFETY: SIG_IGN installs no handler code; callers run this before they
    // start any thread or touch any file.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// The state store of one project.
#[derive(Clone, Debug)]
pub struct StateStore {
    state_path: PathBuf,
}

impl StateStore {
    /// The store at `.claude/context/runtime/ralph-state.json` of the project.
    pub fn new(paths: &ProjectPaths) -> Self {
        StateStore {
            state_path: paths.state_file(),
        }
    }

    /// A store at an explicit path (tests, benchmarks).
    pub fn at(state_path: impl Into<PathBuf>) -> Self {
        StateStore {
            state_path: state_path.into(),
        }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.state_path
    }

    fn lock_path(&self) -> PathBuf {
        sibling(&self.state_path, ".lock")
    }

    /// True when anything (even something broken) stands at the state path.
    pub fn exists(&self) -> bool {
        fs::symlink_metadata(&self.state_path).is_ok()
    }

    /// Reads the state without the lock (a consistent snapshot thanks to the
    /// atomic renames). `Ok(None)` when no state file exists.
    pub fn read(&self) -> Result<Option<LoopState>, StoreError> {
        read_state(&self.state_path)
    }

    /// Takes the exclusive lock, creating the state folder when `create_dir` is set.
    pub fn lock(&self, create_dir: bool) -> Result<StateLock<'_>, StoreError> {
        let dir = self.state_path.parent().unwrap_or(Path::new("."));
        if create_dir {
            fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        }
        let lock_path = self.lock_path();
        let file =
            open_private(&lock_path, false).map_err(io_err("open the lock file", &lock_path))?;
        let deadline = Instant::now() + LOCK_TIMEOUT;
        let mut pause = Duration::from_millis(1);
        loop {
            match file.try_lock_exclusive() {
                Ok(()) => break,
                Err(e)
                    if e.kind() == fs2::lock_contended_error().kind()
                        || e.kind() == io::ErrorKind::WouldBlock =>
                {
                    if Instant::now() >= deadline {
                        return Err(StoreError::LockTimeout { path: lock_path });
                    }
                    thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(20));
                }
                Err(source) => {
                    return Err(StoreError::Io {
                        action: "lock",
                        path: lock_path,
                        source,
                    })
                }
            }
        }
        let lock = StateLock { store: self, file };
        lock.remove_stale_temp_files();
        Ok(lock)
    }
}

/// Proof that this process holds the state lock; released on drop.
pub struct StateLock<'a> {
    store: &'a StateStore,
    file: File,
}

impl StateLock<'_> {
    /// The state file this lock guards.
    pub fn path(&self) -> &Path {
        &self.store.state_path
    }

    /// Reads the state under the lock.
    pub fn read(&self) -> Result<Option<LoopState>, StoreError> {
        read_state(&self.store.state_path)
    }

    /// Replaces the state atomically ([`atomic::write_file`]: a new temp file
    /// under a random name, fsync, rename, fsync of the folder), mode 0600.
    pub fn write(&self, state: &LoopState) -> Result<(), StoreError> {
        let path = &self.store.state_path;
        let mut json = serde_json::to_vec_pretty(state).map_err(|e| StoreError::Io {
            action: "serialize",
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        json.push(b'\n');
        atomic::write_file(path, &json, 0o600).map_err(|source| StoreError::Io {
            action: "write",
            path: path.clone(),
            source,
        })
    }

    /// Deletes the state file (a reset). Missing is fine.
    pub fn remove(&self) -> Result<(), StoreError> {
        let path = &self.store.state_path;
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Ok(meta) if meta.is_dir() => fs::remove_dir(path).map_err(io_err("remove", path)),
            _ => fs::remove_file(path).map_err(io_err("remove", path)),
        }
    }

    /// Moves whatever stands at the state path aside to `ralph-state.json.corrupt-<time>`
    /// so nothing is lost, and returns where it went.
    pub fn quarantine(&self, stamp: &str) -> Result<PathBuf, StoreError> {
        let path = &self.store.state_path;
        let safe_stamp: String = stamp
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let aside = sibling(path, &format!(".corrupt-{safe_stamp}"));
        fs::rename(path, &aside).map_err(io_err("move aside", path))?;
        Ok(aside)
    }

    fn remove_stale_temp_files(&self) {
        // Only a writer holding the lock creates temp files, so any left now
        // belong to a process that died mid-write.
        let path = &self.store.state_path;
        let Some(dir) = path.parent() else {
            return;
        };
        let prefix = atomic::temp_prefix(path);
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = fs::remove_file(entry.path());
                }
            }
        }
    }
}

impl Drop for StateLock<'_> {
    fn drop(&mut self) {
        let _ = FileExt::unlock(&self.file);
    }
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

fn read_state(path: &Path) -> Result<Option<LoopState>, StoreError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Io {
                action: "inspect",
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    if meta.file_type().is_symlink() {
        return Err(corrupt(
            "it is a symbolic link; ralph only uses a regular file here".into(),
        ));
    }
    if !meta.is_file() {
        return Err(corrupt("it is not a regular file".into()));
    }
    if meta.len() > MAX_STATE_BYTES {
        return Err(corrupt(format!(
            "{} bytes, more than the {MAX_STATE_BYTES} a state can hold",
            meta.len()
        )));
    }
    // Opened without following a link or waiting on a FIFO that replaced
    // the file since the check above, and read only if it still is one.
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io_err("read", path))?;
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return Err(corrupt("it is not a regular file".into()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(corrupt("the file is empty".into()));
    }
    LoopState::from_json(&bytes).map(Some).map_err(corrupt)
}

/// Opens (or creates) a file readable and writable by its owner only, never
/// through a symlink: `create_new` (O_EXCL) refuses a planted one, and
/// O_NOFOLLOW makes opening an existing one fail instead of creating or
/// locking its target.
fn open_private(path: &Path, create_new: bool) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    if create_new {
        options.create_new(true);
    } else {
        options.create(true).truncate(false);
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options.open(path).map_err(|e| {
        #[cfg(unix)]
        if e.raw_os_error() == Some(libc::ELOOP) {
            return io::Error::other("it is a symbolic link; ralph only uses a regular file here");
        }
        e
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tempdir::TempDir;

    fn store() -> (TempDir, StateStore) {
        let dir = TempDir::new();
        let store = StateStore::at(dir.path().join("runtime").join("ralph-state.json"));
        (dir, store)
    }

    #[test]
    fn missing_state_reads_as_none() {
        let (_d, store) = store();
        assert!(store.read().unwrap().is_none());
        assert!(!store.exists());
    }

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temp_file() {
        let (_d, store) = store();
        let state = LoopState::new("s".into(), 3, "t".into());
        store.lock(true).unwrap().write(&state).unwrap();
        assert_eq!(store.read().unwrap(), Some(state));
        let names: Vec<_> = fs::read_dir(store.path().parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
    }

    #[cfg(unix)]
    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, store) = store();
        store
            .lock(true)
            .unwrap()
            .write(&LoopState::new("s".into(), 3, "t".into()))
            .unwrap();
        for path in [store.path().to_path_buf(), store.lock_path()] {
            let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
    }

    #[test]
    fn corrupt_states_are_reported_not_replaced() {
        let (_d, store) = store();
        fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        for content in [
            "",
            "  \n",
            "{not json",
            "[]",
            "{\"status\":\"running\"}",
            "{\"status\":\"bogus\",\"iteration\":1}",
        ] {
            fs::write(store.path(), content).unwrap();
            let err = store.read().unwrap_err();
            assert!(
                matches!(err, StoreError::Corrupt { .. }),
                "{content:?}: {err}"
            );
            assert!(err.to_string().contains("ralph-ctl reset"));
            assert_eq!(fs::read_to_string(store.path()).unwrap(), content);
        }
    }

    #[test]
    fn a_directory_or_symlink_is_corrupt() {
        let (dir, store) = store();
        fs::create_dir_all(store.path()).unwrap();
        assert!(matches!(store.read(), Err(StoreError::Corrupt { .. })));
        fs::remove_dir(store.path()).unwrap();
        #[cfg(unix)]
        {
            let target = dir.path().join("elsewhere.json");
            fs::write(&target, "{}").unwrap();
            std::os::unix::fs::symlink(&target, store.path()).unwrap();
            assert!(matches!(store.read(), Err(StoreError::Corrupt { .. })));
        }
        let _ = dir;
    }

    #[cfg(unix)]
    #[test]
    fn a_symlinked_lock_file_is_refused_and_its_target_not_created() {
        let (dir, store) = store();
        fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        let target = dir.path().join("target");
        std::os::unix::fs::symlink(&target, store.lock_path()).unwrap();
        let err = store.lock(false).err().expect("refused");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists());
    }

    #[test]
    fn stale_temp_files_are_cleaned_under_the_lock() {
        let (_d, store) = store();
        let dir = store.path().parent().unwrap().to_path_buf();
        fs::create_dir_all(&dir).unwrap();
        let stale = dir.join(".ralph-state.json.tmp-999999");
        fs::write(&stale, "half a sta").unwrap();
        drop(store.lock(false).unwrap());
        assert!(!stale.exists());
    }

    #[test]
    fn quarantine_keeps_the_bad_file() {
        let (_d, store) = store();
        fs::create_dir_all(store.path().parent().unwrap()).unwrap();
        fs::write(store.path(), "garbage").unwrap();
        let lock = store.lock(false).unwrap();
        let aside = lock.quarantine("2026-11-22T10:00:00Z").unwrap();
        assert_eq!(fs::read_to_string(aside).unwrap(), "garbage");
        assert!(!store.exists());
    }
}
