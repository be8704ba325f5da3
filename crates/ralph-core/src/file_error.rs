//! [`FileError`]: the one shape of a failed file operation, shared by the
//! errors of both crates (the state file, the sequence, the queue's
//! claims, `ralph-ctl`'s commands).

use std::io;
use std::path::PathBuf;

/// A file operation that failed: what was being done, to which file, and
/// why. Reads "cannot {action} {path}: {source}".
#[derive(Debug, thiserror::Error)]
#[error("cannot {action} {}: {source}", path.display())]
pub struct FileError {
    /// What was being done ("read", "write", "lock", ...).
    pub action: &'static str,
    /// The file or folder.
    pub path: PathBuf,
    /// Why.
    pub source: io::Error,
}

impl FileError {
    /// The error of `action` on `path`, failed with `source`.
    pub fn new(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> FileError {
        FileError {
            action,
            path: path.into(),
            source,
        }
    }

    /// What turns an [`io::Error`] of `action` on `path` into a
    /// [`FileError`] (for `map_err`).
    pub fn of(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> FileError {
        let path = path.into();
        move |source| FileError {
            action,
            path,
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_action_path_and_cause() {
        let error = FileError::of("read", "/x/state.json")(io::Error::other("gone"));
        assert_eq!(error.to_string(), "cannot read /x/state.json: gone");
        assert_eq!(error.source.kind(), io::ErrorKind::Other);
    }
}
