//! The locked, atomic store of the loop's state.
//!
//! Every read-modify-write holds an exclusive lock on the state folder itself
//! (`flock` on the folder: a lock file could be deleted or replaced while
//! held, and the next process would lock a new file beside the old one), and
//! every write goes to a temp file in the same folder that is fsynced and
//! renamed over the state, so a reader sees the old or the new state and
//! never a torn one. A state file that cannot be parsed is reported, never
//! replaced, until someone resets it on purpose.
//!
//! The folders from the project down to the state are real folders, never
//! symbolic links (one rule for every reader and writer): a link could make
//! one project read or replace another project's loop.
//!
//! Every state ralph writes (and every loop it keeps in the history) opens
//! with a MAC under the person's key ([`crate::persist::mac`]):
//! `{"mac": "<hex>", ...}`, over the rest of the file as ralph wrote it. A
//! state without one, or whose MAC does not verify, is
//! [`StoreError::Unverified`]: never believed, whatever it says, until a
//! reset replaces it.
//!
//! Each state ralph writes is also numbered (`"sequence": N`, after the
//! MAC and covered by it; [`crate::persist::sequence`]): a state numbered
//! below the last one ralph wrote or removed in its folder is
//! [`StoreError::Stale`], an earlier copy put back, never believed either.
//! A loop kept in the history is older by design and carries no number.

use crate::file_error::FileError;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs2::FileExt;
use thiserror::Error;

use crate::judge::state::LoopState;
use crate::paths::ProjectPaths;
use crate::persist::atomic;
use crate::persist::mac::{self, Key, KeyError, Purpose};
use crate::persist::sequence::{self, Kept, SequenceError};

/// How long to wait for the lock before giving up.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest state file accepted; a bigger one is treated as corrupt.
pub const MAX_STATE_BYTES: u64 = 4 * 1024 * 1024;
/// The folder, beside the state, where finished loops are kept
/// ([`StateLock::archive`]; `ralph-ctl history` lists them).
pub const HISTORY_DIR: &str = "history";

/// One kept loop ([`StateStore::archived`]): its file, and the loop or why
/// it cannot be read.
pub type Archived = (PathBuf, Result<LoopState, StoreError>);

/// What can go wrong with the state file.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// The state file exists but is not a valid state.
    #[error(
        "state file {path} is corrupt ({message}); see it with `ralph-ctl status`, clear it with `ralph-ctl reset`"
    )]
    Corrupt {
        /// The state file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The lock was held by someone else for too long.
    #[error("timed out after {}s waiting for the lock on {path}; another process holds it (a stuck ralph process, or one the agent left running in the background), so nothing was recorded", LOCK_TIMEOUT.as_secs())]
    LockTimeout {
        /// The locked folder.
        path: PathBuf,
    },
    /// A folder on the way to the state is a symbolic link.
    #[error("{} is a symbolic link; ralph keeps a loop's state only in the project's own folders (a link could make it read or replace another project's loop): replace the link with a folder", .0.display())]
    LinkedFolder(PathBuf),
    /// A folder on the way to the state is something else.
    #[error("{} is not a folder; move it aside so ralph can keep its state there", .0.display())]
    NotAFolder(PathBuf),
    /// The loop about to be replaced could not be kept in the history.
    #[error("the previous loop could not be kept in the history ({0}); nothing was changed")]
    NotKept(Box<StoreError>),
    /// The state file was not written by ralph on this machine: it carries
    /// no MAC (an older ralph, a hand-made or committed file), or one that
    /// does not verify under this machine's key. Never believed.
    #[error("the loop's record {} was not written by ralph on this machine ({why}), so nothing it says is believed, not even that the work is done; start over with `ralph-ctl reset` (a loop started by a ralph older than this check needs the same)", .path.display())]
    Unverified {
        /// The state file.
        path: PathBuf,
        /// Why it does not verify.
        why: String,
    },
    /// The state was written by ralph here, but it is not the latest:
    /// ralph has written (or removed) a later state in its folder since,
    /// so this is an earlier copy put back. Never believed.
    #[error("{}", stale_message(.path, *.found, *.kept))]
    Stale {
        /// The state file.
        path: PathBuf,
        /// Its number (`None`: written before ralph numbered its records).
        found: Option<u64>,
        /// The number of the last state ralph wrote or removed there.
        kept: u64,
    },
    /// The key that signs the state cannot be used: nothing was written
    /// (or, reading, nothing can be believed).
    #[error("{0}")]
    Key(#[from] KeyError),
    /// The numbers that date the record cannot be read or kept.
    #[error("{0}")]
    Sequence(#[from] SequenceError),
    /// The state to write is larger than a reader accepts: nothing was written.
    #[error(
        "the loop's state would be {bytes} bytes, more than the {MAX_STATE_BYTES} a state can hold, so {path} was left as it was; shorten what was added (a task, notes)"
    )]
    TooLarge {
        /// The state file.
        path: PathBuf,
        /// The size it would have had.
        bytes: usize,
    },
}

/// What [`StoreError::Stale`] says: the file, its number and the last
/// one, and what to do.
fn stale_message(path: &Path, found: Option<u64>, kept: u64) -> String {
    let number = match found {
        Some(n) => format!("its number is {n}"),
        None => "it carries no number (it was written before ralph numbered its records)".into(),
    };
    format!(
        "the loop's record {} is stale: {number}, and ralph has since written or cleared a \
         later state there (number {kept}), so it is an earlier copy put back; nothing it says \
         is believed, not even that the work is done. Start over with `ralph-ctl reset`",
        path.display()
    )
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| {
        StoreError::Io(FileError {
            action,
            path: path.to_path_buf(),
            source,
        })
    }
}

/// Makes a write past the file size limit (`ulimit -f`, `RLIMIT_FSIZE`) fail
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
    /// The folders from the project down to the state's, outermost first:
    /// each must be a real folder.
    folders: Vec<PathBuf>,
}

impl StateStore {
    /// The store at `.claude/context/runtime/ralph-state.json` of the project.
    pub fn new(paths: &ProjectPaths) -> Self {
        let state_path = paths.state_file();
        let mut folders: Vec<PathBuf> = state_path
            .parent()
            .into_iter()
            .flat_map(Path::ancestors)
            .take_while(|dir| *dir != paths.root && dir.starts_with(&paths.root))
            .map(Path::to_path_buf)
            .collect();
        // Outermost first.
        folders.reverse();
        StateStore {
            state_path,
            folders,
        }
    }

    /// A store at an explicit path (tests, benchmarks).
    pub fn at(state_path: impl Into<PathBuf>) -> Self {
        let state_path = state_path.into();
        let folders = state_path
            .parent()
            .map(Path::to_path_buf)
            .into_iter()
            .collect();
        StateStore {
            state_path,
            folders,
        }
    }

    /// The state file.
    pub fn path(&self) -> &Path {
        &self.state_path
    }

    /// The folder the state lives in, which is also what is locked.
    fn folder(&self) -> &Path {
        self.state_path.parent().unwrap_or(Path::new("."))
    }

    /// Whether every folder on the way to the state exists (`Ok(false)` at
    /// the first missing one); an error for a symbolic link, something that
    /// is not a folder, or a folder that cannot be looked at. Every
    /// operation of the store checks this first; other readers of the
    /// state's folder (the audit log) call it.
    pub fn check_folders(&self) -> Result<bool, StoreError> {
        for dir in &self.folders {
            if !real_folder(dir)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether anything (even something broken) stands at the state path;
    /// an error when that cannot be told (a folder that cannot be searched,
    /// a linked folder), never a silent "no".
    pub fn exists(&self) -> Result<bool, StoreError> {
        if !self.check_folders()? {
            return Ok(false);
        }
        match fs::symlink_metadata(&self.state_path) {
            Ok(_) => Ok(true),
            Err(e) if absent(&e) => Ok(false),
            Err(source) => Err(StoreError::Io(FileError {
                action: "look at",
                path: self.state_path.clone(),
                source,
            })),
        }
    }

    /// Reads the state without the lock (a consistent snapshot thanks to the
    /// atomic renames). `Ok(None)` when no state file exists.
    pub fn read(&self) -> Result<Option<LoopState>, StoreError> {
        Ok(self.snapshot()?.state)
    }

    /// The state for a look that decides nothing and writes nothing
    /// (`ralph-ctl check`), with why it was not verified, when it was not:
    /// ralph's key is out of this process's reach (the agent's commands in
    /// the client's sandbox, where the key folder is hidden). Then the
    /// state is read as written, its MAC unchecked; with the key at hand
    /// this is [`read`](Self::read), and a state that does not verify is
    /// refused as ever. Nothing that judges a loop may read it this way.
    pub fn read_for_a_look(&self) -> Result<(Option<LoopState>, Option<String>), StoreError> {
        let key_missing = match mac::current(false) {
            Ok(_) => return Ok((self.read()?, None)),
            Err(e) => e.to_string(),
        };
        if !self.check_folders()? {
            return Ok((None, None));
        }
        let Some(bytes) = read_state_bytes(&self.state_path)? else {
            return Ok((None, None));
        };
        let corrupt = |message: String| StoreError::Corrupt {
            path: self.state_path.clone(),
            message,
        };
        let state = match unsealed(&bytes) {
            Some(Ok((json, _))) => LoopState::from_json(&json),
            _ => LoopState::from_json(&bytes),
        }
        .map_err(|e| corrupt(e.to_string()))?;
        Ok((Some(state), Some(key_missing)))
    }

    /// [`read`](Self::read), keeping the bytes it parsed, so that a read
    /// under the lock ([`StateLock::read_again`]) parses only a state that
    /// changed meanwhile.
    pub fn snapshot(&self) -> Result<Snapshot, StoreError> {
        if !self.check_folders()? {
            return Ok(Snapshot::default());
        }
        // The kept numbers first: a write that lands in between leaves the
        // state read ahead of them, never behind.
        let kept = sequence::kept_for(self.folder())?;
        let bytes = read_state_bytes(&self.state_path)?;
        let parsed = parse_state(&self.state_path, bytes.as_deref(), Purpose::State, kept)?;
        Ok(Snapshot {
            bytes,
            sequence: parsed.as_ref().and_then(|p| p.sequence),
            state: parsed.map(|p| p.state),
        })
    }

    /// The loops kept in the history folder, oldest first (by name, which
    /// starts with when each began); one that cannot be read is listed with
    /// the error. Empty when there is no history.
    pub fn archived(&self) -> Result<Vec<Archived>, StoreError> {
        if !self.check_folders()? {
            return Ok(Vec::new());
        }
        let dir = self.folder().join(HISTORY_DIR);
        if !real_folder(&dir)? {
            return Ok(Vec::new());
        }
        let mut paths: Vec<PathBuf> = fs::read_dir(&dir)
            .map_err(io_err("list", &dir))?
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| {
                let state = read_state(&path, Purpose::Archive, None).and_then(|state| {
                    state.map(|p| p.state).ok_or_else(|| StoreError::Corrupt {
                        path: path.clone(),
                        message: "it is gone".into(),
                    })
                });
                (path, state)
            })
            .collect())
    }

    /// The lock and the state under it, for a change to a loop that must
    /// already exist: `None` when there is no state (nothing is created).
    pub fn lock_existing(&self) -> Result<Option<(StateLock<'_>, LoopState)>, StoreError> {
        if !self.exists()? {
            return Ok(None);
        }
        let lock = self.lock(false)?;
        Ok(lock.read()?.map(|state| (lock, state)))
    }

    /// Takes the exclusive lock, creating the state folder when `create_dir` is set.
    pub fn lock(&self, create_dir: bool) -> Result<StateLock<'_>, StoreError> {
        LOCKS_TAKEN.with(|n| n.set(n.get() + 1));
        let dir = self.folder();
        if !self.check_folders()? && create_dir {
            fs::create_dir_all(dir).map_err(io_err("create", dir))?;
            self.check_folders()?;
        }
        let folder = open_folder(dir).map_err(io_err("open", dir))?;
        match crate::persist::lock::exclusive_until(&folder, Instant::now() + LOCK_TIMEOUT) {
            Ok(true) => {}
            Ok(false) => {
                return Err(StoreError::LockTimeout {
                    path: dir.to_path_buf(),
                });
            }
            Err(source) => {
                return Err(StoreError::Io(FileError {
                    action: "lock",
                    path: dir.to_path_buf(),
                    source,
                }));
            }
        }
        let lock = StateLock {
            store: self,
            folder,
            numbering: std::cell::RefCell::new(Numbering::default()),
        };
        lock.remove_stale_temp_files();
        Ok(lock)
    }
}

thread_local! {
    static LOCKS_TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many times this thread has asked for the state lock: what a test
/// counts to hold a change (a fresh iteration's judging, a command) to one
/// transaction.
pub fn locks_taken() -> u64 {
    LOCKS_TAKEN.with(std::cell::Cell::get)
}

/// Whether looking at a path failed because nothing can be there (nothing
/// at that name, a file on the way, or a name with a NUL byte).
fn absent(e: &io::Error) -> bool {
    #[cfg(unix)]
    if e.raw_os_error() == Some(libc::ENOTDIR) {
        // A file where a folder of the path should be.
        return true;
    }
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::InvalidInput
    )
}

/// Opens a folder to lock it, never through a symbolic link.
fn open_folder(dir: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW);
    }
    options.open(dir)
}

/// A state read without the lock, with the bytes it was parsed from.
#[derive(Debug, Default)]
pub struct Snapshot {
    bytes: Option<Vec<u8>>,
    /// The state's number, when it had one.
    sequence: Option<u64>,
    /// The state, `None` when there was no state file.
    pub state: Option<LoopState>,
}

/// What [`StateLock::read_again`] found.
#[derive(Debug)]
pub enum Reread {
    /// The state file holds what the snapshot was parsed from.
    Unchanged,
    /// It changed (or went): the state it holds now.
    Changed(Option<Box<LoopState>>),
}

impl Reread {
    /// The state under the lock: `before`'s when unchanged.
    pub fn state<'a>(&'a self, before: &'a Snapshot) -> Option<&'a LoopState> {
        match self {
            Reread::Unchanged => before.state.as_ref(),
            Reread::Changed(state) => state.as_deref(),
        }
    }
}

/// Proof that this process holds the state lock; released on drop, when
/// the numbers it gave the records it wrote are kept first.
pub struct StateLock<'a> {
    store: &'a StateStore,
    folder: File,
    numbering: std::cell::RefCell<Numbering>,
}

/// The sequence numbers a lock gives the records it writes.
#[derive(Debug, Default)]
struct Numbering {
    /// The numbers kept when the lock first needed them (`None`: not read
    /// yet; then the default when none are kept).
    kept: Option<Kept>,
    /// The number of the state read under the lock: the next is past it
    /// even when the kept numbers were lost.
    seen: u64,
    /// The numbers given by this lock, to records written.
    given: Kept,
    /// The state number given before the last state written, for
    /// [`StateLock::write_back`] to take that write's number back.
    given_before_write: u64,
}

/// Which record a number was given to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Numbered {
    /// A state written, or removed (a reset): earlier states are stale.
    State,
    /// An audit log line.
    LogLine,
}

impl StateLock<'_> {
    /// The state file this lock guards.
    pub fn path(&self) -> &Path {
        &self.store.state_path
    }

    /// Reads the state under the lock.
    pub fn read(&self) -> Result<Option<LoopState>, StoreError> {
        let kept = self.kept()?;
        let parsed = read_state(&self.store.state_path, Purpose::State, kept)?;
        Ok(parsed.map(|p| self.saw(p)))
    }

    /// `parsed`'s state, its number noted.
    fn saw(&self, parsed: Parsed) -> LoopState {
        let mut numbering = self.numbering.borrow_mut();
        numbering.seen = numbering.seen.max(parsed.sequence.unwrap_or(0));
        parsed.state
    }

    /// The numbers as this lock knows them: kept before it, and given by
    /// it; `None` when none were ever kept or given.
    fn kept(&self) -> Result<Option<Kept>, StoreError> {
        let mut numbering = self.numbering.borrow_mut();
        let on_disk = if let Some(kept) = numbering.kept {
            kept
        } else {
            let kept = sequence::kept_for(self.store.folder())?.unwrap_or_default();
            numbering.kept = Some(kept);
            kept
        };
        let known = on_disk.max(numbering.given);
        Ok((known != Kept::default()).then_some(known))
    }

    /// The number the next record written under this lock gets: past every
    /// one kept, given, or seen on the state read.
    pub(crate) fn next_number(&self) -> Result<u64, StoreError> {
        let known = self.kept()?.unwrap_or_default();
        let seen = self.numbering.borrow().seen;
        Ok(known.next().max(seen.saturating_add(1)))
    }

    /// Notes that `record` was written (or a state removed) with `number`,
    /// to be kept when the lock is let go.
    pub(crate) fn numbered(&self, record: Numbered, number: u64) {
        let mut numbering = self.numbering.borrow_mut();
        match record {
            Numbered::State => numbering.given.state = numbering.given.state.max(number),
            Numbered::LogLine => numbering.given.log = numbering.given.log.max(number),
        }
    }

    /// Keeps the numbers given under this lock, beside the key, after the
    /// records they number are written (the state synced as it was
    /// written). Nothing is kept when no key folder exists (no record
    /// could be signed) or the write fails: the records are then ahead of
    /// what is kept, which is believed.
    fn keep_numbers(&self) {
        let numbering = self.numbering.borrow();
        if numbering.given == Kept::default() {
            return;
        }
        let Some(keys) = mac::key_dir() else {
            return;
        };
        let kept = numbering.kept.unwrap_or_default().max(numbering.given);
        let _ = sequence::write(&keys, self.store.folder(), kept);
    }

    /// Reads the state under the lock after `before` was read without it:
    /// [`Reread::Unchanged`] when the file holds the same bytes (nothing to
    /// parse again: a stop's state is read twice, and parsing is most of
    /// the cost of reading a state with its history).
    pub fn read_again(&self, before: &Snapshot) -> Result<Reread, StoreError> {
        let path = &self.store.state_path;
        let kept = self.kept()?;
        let bytes = read_state_bytes(path)?;
        if bytes.is_some() && bytes == before.bytes {
            // The same bytes, but maybe put back since: dated again.
            check_latest(path, before.sequence, kept)?;
            let mut numbering = self.numbering.borrow_mut();
            numbering.seen = numbering.seen.max(before.sequence.unwrap_or(0));
            return Ok(Reread::Unchanged);
        }
        let parsed = parse_state(path, bytes.as_deref(), Purpose::State, kept)?;
        Ok(Reread::Changed(parsed.map(|p| Box::new(self.saw(p)))))
    }

    /// Replaces the state atomically ([`atomic::write_file`]: a new temp file
    /// under a random name, fsync, rename, fsync of the folder), mode 0600.
    /// Each state written is numbered past every record of its folder.
    pub fn write(&self, state: &LoopState) -> Result<(), StoreError> {
        let path = &self.store.state_path;
        let key = mac::current(true)?;
        let number = self.next_number()?;
        let json = signed_json(state, Purpose::State, path, &key, Some(number))?;
        atomic::write_file(path, &json, 0o600).map_err(|source| {
            StoreError::Io(FileError {
                action: "write",
                path: path.clone(),
                source,
            })
        })?;
        let mut numbering = self.numbering.borrow_mut();
        numbering.given_before_write = numbering.given.state;
        drop(numbering);
        self.numbered(Numbered::State, number);
        Ok(())
    }

    /// Undoes the last [`write`](Self::write) under this lock: `before`,
    /// the state read under it, written back as it was, with the number it
    /// had (byte for byte, as it was), and the number the undone write
    /// took given back, so `before` is the latest again.
    pub fn write_back(&self, before: &LoopState) -> Result<(), StoreError> {
        let path = &self.store.state_path;
        let key = mac::current(true)?;
        let seen = self.numbering.borrow().seen;
        let json = signed_json(
            before,
            Purpose::State,
            path,
            &key,
            (seen > 0).then_some(seen),
        )?;
        atomic::write_file(path, &json, 0o600).map_err(|source| {
            StoreError::Io(FileError {
                action: "write",
                path: path.clone(),
                source,
            })
        })?;
        let mut numbering = self.numbering.borrow_mut();
        numbering.given.state = numbering.given_before_write;
        Ok(())
    }

    /// Deletes the state file (a reset). Missing is fine. The removal
    /// takes a number of its own, so that no earlier state put back in
    /// its place is believed.
    pub fn remove(&self) -> Result<(), StoreError> {
        let path = &self.store.state_path;
        match fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Ok(meta) if meta.is_dir() => fs::remove_dir(path).map_err(io_err("remove", path))?,
            _ => fs::remove_file(path).map_err(io_err("remove", path))?,
        }
        self.number_removal();
        Ok(())
    }

    /// Gives the state just removed (or moved aside) a number of its own.
    /// Without a key folder nothing is numbered (no state could verify).
    fn number_removal(&self) {
        if mac::key_dir().is_some_and(|keys| keys.is_dir())
            && let Ok(number) = self.next_number()
        {
            self.numbered(Numbered::State, number);
        }
    }

    /// Keeps `state` (the loop about to be replaced or reset) in the history
    /// folder ([`HISTORY_DIR`], beside the state) under a name of its own,
    /// `<startedAt>-<session>.json`, and returns where it went. Written like
    /// the state (whole, never through a link); a name already taken gets a
    /// number, so no loop is ever overwritten.
    pub fn archive(&self, state: &LoopState) -> Result<PathBuf, StoreError> {
        let dir = self.store.folder().join(HISTORY_DIR);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err("create", &dir)(e)),
        }
        if !real_folder(&dir)? {
            return Err(io_err("look at", &dir)(io::ErrorKind::NotFound.into()));
        }
        let stem = format!(
            "{}-{}",
            file_safe(&state.started_at.to_string()),
            file_safe(&state.session_id)
        );
        let json = signed_json(
            state,
            Purpose::Archive,
            &dir.join(format!("{stem}.json")),
            &mac::current(true)?,
            None,
        )?;
        for n in 0..1000 {
            let name = match n {
                0 => format!("{stem}.json"),
                n => format!("{stem}-{n}.json"),
            };
            let path = dir.join(name);
            if fs::symlink_metadata(&path).is_ok() {
                continue;
            }
            atomic::write_file(&path, &json, 0o600).map_err(io_err("write", &path))?;
            return Ok(path);
        }
        Err(StoreError::Io(FileError {
            action: "find a free name in",
            path: dir,
            source: io::Error::other("1000 archives of the same loop"),
        }))
    }

    /// Moves whatever stands at the state path aside to `ralph-state.json.corrupt-<time>`
    /// so nothing is lost, and returns where it went.
    pub fn quarantine(&self, stamp: &str) -> Result<PathBuf, StoreError> {
        let path = &self.store.state_path;
        let aside = sibling(path, &format!(".corrupt-{}", file_safe(stamp)));
        fs::rename(path, &aside).map_err(io_err("move aside", path))?;
        self.number_removal();
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
        self.keep_numbers();
        let _ = FileExt::unlock(&self.folder);
    }
}

/// Whether `dir` is a real folder (`Ok(false)`: nothing there); an error for
/// a symbolic link, something that is not a folder, or one that cannot be
/// looked at.
fn real_folder(dir: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(dir) {
        Ok(meta) if meta.file_type().is_symlink() => Err(StoreError::LinkedFolder(dir.into())),
        Ok(meta) if !meta.is_dir() => Err(StoreError::NotAFolder(dir.into())),
        Ok(_) => Ok(true),
        Err(e) if absent(&e) => Ok(false),
        Err(e) => Err(io_err("look at", dir)(e)),
    }
}

/// `text` with everything but ASCII letters and digits turned into `-`, for a file name.
fn file_safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The opening of every file ralph writes a state to, up to its MAC.
const MAC_OPEN: &[u8] = b"{\n  \"mac\": \"";
/// What follows the MAC, before the state's own first field.
const MAC_CLOSE: &[u8] = b"\",\n";

/// `state` as a file at `path` holds it, numbered `sequence` (a state's;
/// a kept loop has none) and signed with `key` for `purpose`: pretty JSON
/// opening with its MAC and number (`{"mac": "<hex>", "sequence": N, ...}`,
/// the MAC over the JSON without the MAC's line) and a final newline.
pub fn signed_json(
    state: &LoopState,
    purpose: Purpose,
    path: &Path,
    key: &Key,
    sequence: Option<u64>,
) -> Result<Vec<u8>, StoreError> {
    let mut json = serde_json::to_vec_pretty(state).map_err(|e| {
        StoreError::Io(FileError {
            action: "serialize",
            path: path.to_path_buf(),
            source: io::Error::other(e),
        })
    })?;
    json.push(b'\n');
    let json = sign_json(&json, purpose, path, key, sequence)?;
    // Never write what the reader refuses: every later stop would see a
    // corrupt state.
    if json.len() as u64 > MAX_STATE_BYTES {
        return Err(StoreError::TooLarge {
            path: path.to_path_buf(),
            bytes: json.len(),
        });
    }
    Ok(json)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// The state at `path` as [`parse_state`] reads it.
fn read_state(
    path: &Path,
    purpose: Purpose,
    kept: Option<Kept>,
) -> Result<Option<Parsed>, StoreError> {
    let bytes = read_state_bytes(path)?;
    parse_state(path, bytes.as_deref(), purpose, kept)
}

/// The folder a file at `path` is in, which its MAC covers.
fn folder_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// What opens a numbered state's own fields, after its MAC's line.
const SEQUENCE_OPEN: &[u8] = b"  \"sequence\": ";
/// What closes the number's line.
const SEQUENCE_CLOSE: &[u8] = b",\n";

/// `json` (pretty JSON of an object: `{` and a newline first) numbered
/// `sequence` (when given: a `"sequence": N` line first) and signed with
/// `key` for `purpose` as the file at `path`: its MAC opens the object,
/// over the numbered JSON. What a test that must make a state file of its
/// own writes (its folder must exist first: the MAC covers the folder's
/// real path).
pub fn sign_json(
    json: &[u8],
    purpose: Purpose,
    path: &Path,
    key: &Key,
    sequence: Option<u64>,
) -> Result<Vec<u8>, StoreError> {
    let Some(fields) = json.strip_prefix(b"{\n".as_slice()) else {
        return Err(StoreError::Io(FileError {
            action: "sign",
            path: path.to_path_buf(),
            source: io::Error::other("not the pretty JSON of an object with fields"),
        }));
    };
    let mut numbered = Vec::with_capacity(json.len() + 40);
    numbered.extend_from_slice(b"{\n");
    if let Some(n) = sequence {
        numbered.extend_from_slice(SEQUENCE_OPEN);
        numbered.extend_from_slice(n.to_string().as_bytes());
        numbered.extend_from_slice(SEQUENCE_CLOSE);
    }
    numbered.extend_from_slice(fields);
    let tag = key.tag(purpose, folder_of(path), &numbered);
    let mut signed =
        Vec::with_capacity(numbered.len() + MAC_OPEN.len() + tag.len() + MAC_CLOSE.len());
    signed.extend_from_slice(MAC_OPEN);
    signed.extend_from_slice(tag.as_bytes());
    signed.extend_from_slice(MAC_CLOSE);
    signed.extend_from_slice(&numbered[2..]);
    Ok(signed)
}

/// A signed JSON's number and the state's own JSON without it: `None`
/// for a JSON without a number line (written before ralph numbered its
/// records, or a kept loop).
fn numbered(json: &[u8]) -> Result<(Option<u64>, std::borrow::Cow<'_, [u8]>), String> {
    let Some(rest) = json
        .strip_prefix(b"{\n".as_slice())
        .and_then(|fields| fields.strip_prefix(SEQUENCE_OPEN))
    else {
        return Ok((None, std::borrow::Cow::Borrowed(json)));
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let number = std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse::<u64>().ok())
        .ok_or("its sequence number is malformed")?;
    let fields = rest[digits..]
        .strip_prefix(SEQUENCE_CLOSE)
        .ok_or("its sequence number is malformed")?;
    let mut state = Vec::with_capacity(fields.len() + 2);
    state.extend_from_slice(b"{\n");
    state.extend_from_slice(fields);
    Ok((Some(number), std::borrow::Cow::Owned(state)))
}

/// Whether a state numbered `found` is the latest of its folder, given
/// the numbers `kept` there: [`StoreError::Stale`] when ralph has written
/// or removed a later state since (a state without a number is stale once
/// ralph numbers the folder's states).
fn check_latest(path: &Path, found: Option<u64>, kept: Option<Kept>) -> Result<(), StoreError> {
    let Some(kept) = kept.filter(|k| k.state > 0) else {
        return Ok(());
    };
    match found {
        Some(n) if n >= kept.state => Ok(()),
        found => Err(StoreError::Stale {
            path: path.to_path_buf(),
            found,
            kept: kept.state,
        }),
    }
}

/// A state as read from its file, with its number.
#[derive(Debug)]
struct Parsed {
    state: LoopState,
    sequence: Option<u64>,
}

/// A signed state split: the JSON ralph signed, and the MAC (hex).
type Sealed<'a> = (Vec<u8>, &'a [u8]);

/// The state's JSON as ralph signed it, and its MAC, from a file's
/// `bytes`: `None` when it carries no MAC where ralph writes one, why not
/// when the MAC there is malformed.
fn unsealed(bytes: &[u8]) -> Option<Result<Sealed<'_>, String>> {
    let rest = bytes.strip_prefix(MAC_OPEN)?;
    let malformed = || "its MAC is malformed".to_string();
    let split = || {
        let tag = rest.get(..mac::TAG_CHARS).ok_or_else(malformed)?;
        let fields = rest[mac::TAG_CHARS..]
            .strip_prefix(MAC_CLOSE)
            .ok_or_else(malformed)?;
        let mut json = Vec::with_capacity(fields.len() + 2);
        json.extend_from_slice(b"{\n");
        json.extend_from_slice(fields);
        Ok((json, tag))
    };
    Some(split())
}

/// Whether `tag` is the MAC of `json` as `purpose` at `path` under this
/// machine's key: [`StoreError::Unverified`] with why not, when not (no
/// key, a wrong MAC), [`StoreError::Key`] when the key there is refused.
fn verify(path: &Path, json: &[u8], tag: &[u8], purpose: Purpose) -> Result<(), StoreError> {
    let unverified = |why: String| StoreError::Unverified {
        path: path.to_path_buf(),
        why,
    };
    let key = match mac::current(false) {
        Ok(key) => key,
        Err(e @ (KeyError::BadKey { .. } | KeyError::BadFolder { .. })) => return Err(e.into()),
        Err(e) => return Err(unverified(e.to_string())),
    };
    if !key.verifies(purpose, folder_of(path), json, tag) {
        return Err(unverified(
            "its MAC does not match: it was changed after ralph wrote it, written with another \
             machine's or person's key, or moved from another folder"
                .into(),
        ));
    }
    Ok(())
}

/// The state file's bytes, `None` when there is no state file; an error for
/// anything but a regular file of at most [`MAX_STATE_BYTES`].
fn read_state_bytes(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::Io(FileError {
                action: "inspect",
                path: path.to_path_buf(),
                source,
            }));
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
    // At most MAX_STATE_BYTES, checked above.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_STATE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err("read", path))?;
    Ok(Some(bytes))
}

/// The state in `bytes` (read from `path`), `None` for no file; only a
/// state whose MAC verifies ([`StoreError::Unverified`] otherwise: one that
/// is not even a state is [`StoreError::Corrupt`]) and, as a state (never
/// a kept loop, older by design), the latest of its folder by the numbers
/// `kept` there ([`StoreError::Stale`]).
fn parse_state(
    path: &Path,
    bytes: Option<&[u8]>,
    purpose: Purpose,
    kept: Option<Kept>,
) -> Result<Option<Parsed>, StoreError> {
    let Some(bytes) = bytes else {
        return Ok(None);
    };
    let corrupt = |message: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        message,
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(corrupt("the file is empty".into()));
    }
    let unverified = |why: String| StoreError::Unverified {
        path: path.to_path_buf(),
        why,
    };
    // What is not even a state is corrupt, as ever; a state is believed
    // only once its MAC verifies.
    match unsealed(bytes) {
        Some(Ok((json, tag))) => {
            let (sequence, own) = numbered(&json).map_err(corrupt)?;
            let state = LoopState::from_json(&own).map_err(|e| corrupt(e.to_string()))?;
            verify(path, &json, tag, purpose)?;
            if purpose == Purpose::State {
                check_latest(path, sequence, kept)?;
            }
            Ok(Some(Parsed { state, sequence }))
        }
        Some(Err(why)) => Err(unverified(why)),
        None => {
            LoopState::from_json(bytes).map_err(|e| corrupt(e.to_string()))?;
            Err(unverified("it carries no MAC".into()))
        }
    }
}

#[cfg(test)]
mod tests;
