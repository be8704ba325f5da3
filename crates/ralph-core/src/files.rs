//! Opening the files a person controls (transcript, prompt, guardrails,
//! config, `.claude/settings.json`, plan files) without being stalled by
//! them: a FIFO there would block `open(2)` until a writer came, and a link
//! to `/dev/zero` would be read forever. Callers still refuse anything but a
//! regular file.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;

/// What [`read_bounded`] found.
pub enum Bounded {
    /// Nothing at the path.
    Missing,
    /// More than the limit.
    TooLarge,
    /// The whole file.
    Bytes(Vec<u8>),
}

/// Reads a regular file of at most `limit` bytes, without waiting on a FIFO
/// and without reading a device forever ("not a regular file" is an error).
/// Symlinks are followed; what they lead to must be a regular file too.
pub fn read_bounded(path: &Path, limit: u64) -> io::Result<Bounded> {
    let file = match open_without_waiting(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Bounded::Missing),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    Ok(if bytes.len() as u64 > limit {
        Bounded::TooLarge
    } else {
        Bounded::Bytes(bytes)
    })
}

/// Opens `path` for reading without waiting for a FIFO's writer
/// (`O_NONBLOCK`, which regular files ignore).
pub fn open_without_waiting(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    options.open(path)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::Read;
    use tempfile::TempDir;

    #[test]
    fn a_fifo_opens_at_once_and_a_file_reads_whole() {
        let dir = TempDir::new().unwrap();
        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let opened = open_without_waiting(&fifo).unwrap();
        assert!(!opened.metadata().unwrap().is_file());
        let file = dir.path().join("f");
        std::fs::write(&file, "x".repeat(100_000)).unwrap();
        let mut text = String::new();
        open_without_waiting(&file)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text.len(), 100_000);
    }
}
