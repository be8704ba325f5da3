//! The place in time of a loop's record: every state ralph writes and
//! every line of its audit log carries a number, one counter per record
//! folder (the project's runtime folder, each queue item's), given under
//! that folder's lock and covered by the record's MAC. The last numbers
//! ralph gave there are kept beside its key ([`crate::persist::mac`]), in
//! `sequence/` of the key folder, outside every project: the checks'
//! walls hide that folder and the agent's deny rules cover it.
//!
//! A record numbered below the last one of its kind ralph wrote in its
//! folder (or without a number, once ralph numbers them there) is stale: a
//! copy of an earlier record put back, which a MAC alone cannot tell from
//! the current one. The numbers are kept only after the records are
//! written (a state synced first), so a crash in between leaves a record
//! ahead of what is kept, which is believed, and never one behind. A
//! reader without the lock reads what is kept before the record, so a
//! write it races with can only leave the record ahead.
//!
//! The kept file is replaced by a rename, not synced (a sync would cost
//! every stop as much as the state's own): after a power loss it holds the
//! old numbers or the new ones, or is empty if it was new, which reads as
//! none kept. An audit line is not synced either: one lost
//! to a power loss whose number was kept leaves the log read as stale
//! until ralph appends its next line.

use crate::file_error::FileError;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use thiserror::Error;

use crate::persist::atomic;

/// The folder, in ralph's key folder, holding one file per record folder.
pub const SEQUENCE_DIR: &str = "sequence";

/// The first line of every file of kept numbers.
const HEADER: &str = "ralph record sequence v1";
/// Largest file of kept numbers read (the folder's path makes most of it).
const MAX_KEPT_BYTES: u64 = 16 * 1024;

/// The last numbers ralph gave the records of one folder (0: none yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// The last state written there, or the number a reset took when it
    /// removed one: any state numbered below is stale.
    pub state: u64,
    /// The last audit log line written there: a log whose last line is
    /// numbered below is stale.
    pub log: u64,
}

impl Kept {
    /// The number the folder's next record gets: past every one given.
    pub fn next(self) -> u64 {
        self.state.max(self.log).saturating_add(1)
    }

    /// Each number the larger of the two.
    pub fn max(self, other: Kept) -> Kept {
        Kept {
            state: self.state.max(other.state),
            log: self.log.max(other.log),
        }
    }
}

/// Why the kept numbers cannot be read or kept.
#[derive(Debug, Error)]
pub enum SequenceError {
    /// The file is there but is not one ralph wrote.
    #[error(
        "ralph's record of the sequence numbers of {folder} ({}) cannot be read ({why}), so \
         whether that folder's loop record is the latest cannot be told; only ralph writes it, \
         beside its key: move it aside and start over with `ralph-ctl reset` in that project",
        .path.display()
    )]
    Unreadable {
        /// The file of kept numbers.
        path: PathBuf,
        /// The record folder it is for.
        folder: String,
        /// What is wrong with it.
        why: KeptFileError,
    },
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] FileError),
}

/// The real path of `folder`, as the records' MACs name it.
fn real(folder: &Path) -> PathBuf {
    fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf())
}

/// The file, in the key folder `keys`, keeping the numbers of the records
/// in `folder`: named by a SHA-256 of the folder's real path, so a project
/// moved elsewhere starts a count of its own (its records do not verify
/// there anyway).
pub fn kept_file(keys: &Path, folder: &Path) -> PathBuf {
    let real = real(folder);
    let digest = Sha256::digest(real.as_os_str().as_encoded_bytes());
    let mut name = String::with_capacity(37);
    for byte in digest.iter().take(16) {
        name.push_str(&format!("{byte:02x}"));
    }
    name.push_str(".seq");
    keys.join(SEQUENCE_DIR).join(name)
}

/// The numbers kept for `folder` in the key folder `keys`; `None` when
/// none are (ralph has numbered no record there: every record there is
/// believed as far as its MAC goes).
pub fn read(keys: &Path, folder: &Path) -> Result<Option<Kept>, SequenceError> {
    let path = kept_file(keys, folder);
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = match options.open(&path) {
        Ok(file) => file,
        Err(e) if matches!(e.kind(), io::ErrorKind::NotFound) => return Ok(None),
        Err(source) => {
            return Err(SequenceError::Io(FileError {
                action: "read",
                path,
                source,
            }));
        }
    };
    let mut bytes = Vec::new();
    file.take(MAX_KEPT_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|source| {
            SequenceError::Io(FileError {
                action: "read",
                path: path.clone(),
                source,
            })
        })?;
    if bytes.is_empty() {
        // A new file whose content a power loss took: nothing kept.
        return Ok(None);
    }
    let folder = real(folder).to_string_lossy().into_owned();
    parse(&bytes, &folder)
        .map(Some)
        .map_err(|why| SequenceError::Unreadable { path, folder, why })
}

/// What is wrong with a kept file's bytes ([`SequenceError::Unreadable`]).
#[derive(Debug, Error)]
pub enum KeptFileError {
    /// Not UTF-8.
    #[error("it is not text")]
    NotText,
    /// Its first line is not ralph's.
    #[error("it does not open with {:?}", HEADER)]
    NoHeader,
    /// A number's line is missing or holds no number.
    #[error("no `{label}N` line")]
    NoNumber {
        /// The line's label (`state `, `log `).
        label: &'static str,
    },
    /// No `folder PATH` line.
    #[error("no `folder PATH` line")]
    NoFolder,
    /// It names another folder.
    #[error("it is for {0}")]
    OtherFolder(String),
}

/// The numbers in a kept file's `bytes`, which must name `folder`.
fn parse(bytes: &[u8], folder: &str) -> Result<Kept, KeptFileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KeptFileError::NotText)?;
    let mut lines = text.splitn(4, '\n');
    if lines.next() != Some(HEADER) {
        return Err(KeptFileError::NoHeader);
    }
    let number = |line: Option<&str>, label: &'static str| {
        line.and_then(|l| l.strip_prefix(label))
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or(KeptFileError::NoNumber { label })
    };
    let state = number(lines.next(), "state ")?;
    let log = number(lines.next(), "log ")?;
    let named = lines
        .next()
        .and_then(|l| l.strip_prefix("folder "))
        .and_then(|l| l.strip_suffix('\n'))
        .ok_or(KeptFileError::NoFolder)?;
    if named != folder {
        return Err(KeptFileError::OtherFolder(named.to_string()));
    }
    Ok(Kept { state, log })
}

/// Keeps `kept` as the numbers of `folder` in the key folder `keys`
/// (whole or not at all: a new file renamed into place). The caller holds
/// `folder`'s lock. The key folder must exist: it is never
/// made here, only by [`crate::persist::mac`], under its own rules.
pub fn write(keys: &Path, folder: &Path, kept: Kept) -> Result<(), SequenceError> {
    let path = kept_file(keys, folder);
    let dir = keys.join(SEQUENCE_DIR);
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| {
            SequenceError::Io(FileError {
                action,
                path,
                source,
            })
        }
    };
    let mut builder = fs::DirBuilder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    match builder.create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io("create", &dir)(e)),
    }
    let text = format!(
        "{HEADER}\nstate {}\nlog {}\nfolder {}\n",
        kept.state,
        kept.log,
        real(folder).to_string_lossy()
    );
    let tmp = path.with_file_name(format!(
        "{}{}",
        atomic::temp_prefix(&path),
        atomic::random_suffix()
    ));
    let mut file = atomic::create_new(&tmp, 0o600).map_err(io("write", &tmp))?;
    let written = file
        .write_all(text.as_bytes())
        .and_then(|()| fs::rename(&tmp, &path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written.map_err(io("write", &path))
}

/// The numbers kept for `folder` in this process's key folder
/// ([`crate::persist::mac::key_dir`]); `None` when there is none.
pub fn kept_for(folder: &Path) -> Result<Option<Kept>, SequenceError> {
    match crate::persist::mac::key_dir() {
        Some(keys) => read(&keys, folder),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    #[test]
    fn numbers_are_kept_per_folder_and_read_back() {
        let keys = TempDir::new().unwrap();
        let projects = TempDir::new().unwrap();
        let (a, b) = (projects.path().join("a"), projects.path().join("b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        assert_eq!(read(keys.path(), &a).unwrap(), None);
        let kept = Kept { state: 3, log: 5 };
        write(keys.path(), &a, kept).unwrap();
        assert_eq!(read(keys.path(), &a).unwrap(), Some(kept));
        assert_eq!(read(keys.path(), &b).unwrap(), None, "another folder's own");
        assert_eq!(kept.next(), 6);
        write(keys.path(), &a, Kept { state: 6, log: 5 }).unwrap();
        assert_eq!(read(keys.path(), &a).unwrap().unwrap().state, 6);
        // No temp file is left, and the folder is private.
        let names: Vec<_> = fs::read_dir(keys.path().join(SEQUENCE_DIR))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        assert!(names[0].ends_with(".seq"), "{names:?}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&keys.path().join(SEQUENCE_DIR)), 0o700);
            assert_eq!(mode(&kept_file(keys.path(), &a)), 0o600);
        }
    }

    #[test]
    fn the_key_folder_is_never_made_here() {
        let base = TempDir::new().unwrap();
        let keys = base.path().join("no-key-yet");
        let err = write(&keys, base.path(), Kept { state: 1, log: 0 }).unwrap_err();
        assert!(matches!(err, SequenceError::Io(FileError { .. })), "{err}");
        assert!(!keys.exists());
    }

    #[test]
    fn a_file_ralph_did_not_write_is_unreadable_naming_it_and_the_fix() {
        let keys = TempDir::new().unwrap();
        let folder = TempDir::new().unwrap();
        write(keys.path(), folder.path(), Kept { state: 1, log: 2 }).unwrap();
        let file = kept_file(keys.path(), folder.path());
        // Empty, as a power loss can leave a new file: nothing kept.
        fs::write(&file, "").unwrap();
        assert_eq!(read(keys.path(), folder.path()).unwrap(), None);
        for text in [
            "state 9\n".to_string(),
            format!("{HEADER}\nstate x\nlog 1\nfolder /\n"),
            format!("{HEADER}\nstate 1\nlog 1\nfolder /elsewhere\n"),
        ] {
            fs::write(&file, &text).unwrap();
            let err = read(keys.path(), folder.path()).unwrap_err().to_string();
            assert!(
                err.contains(&file.display().to_string()) && err.contains("ralph-ctl reset"),
                "{text:?}: {err}"
            );
        }
    }
}
