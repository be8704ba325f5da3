//! The MAC that proves ralph wrote a loop's record: every state it writes
//! and every line of its audit log carries an HMAC-SHA256 under a key of
//! the person's own, kept outside every project ([`key_dir`]), so that a
//! state or a log line written by anything else (the agent's commands, a
//! cloned repository's committed files, an older ralph) is never believed.
//!
//! The key is 32 random bytes from the OS in `<data dir>/ralph/record.key`
//! (`~/.local/share/ralph/` on Linux, following `XDG_DATA_HOME` and `HOME`),
//! the file 0600 and its folder 0700, made as a loop starts ([`ensure_made`]),
//! before its first check runs the agent's code. A key that is not as ralph
//! makes it (a link, the wrong size, someone else's, open to others, with a
//! second name, in a folder that is not the user's own 0700 one) is refused,
//! never used nor replaced. Reading never makes one: with no key, nothing
//! verifies. Each MAC also covers what the bytes are (a state, a kept loop,
//! a log line) and the real path of the folder they are in, so a record
//! cannot be moved from one project, or from the history, into another
//! loop's place; the records' sequence numbers, kept beside the key
//! ([`crate::persist::sequence`]), date them.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use thiserror::Error;

/// The key file's name, in [`key_dir`].
pub const KEY_FILE_NAME: &str = "record.key";
/// The key's length in bytes.
pub const KEY_BYTES: usize = 32;
/// The length of a MAC written out: hex of the 32 bytes of HMAC-SHA256.
pub const TAG_CHARS: usize = 64;

/// The folder holding ralph's key: `ralph` in the person's data folder
/// (`dirs::data_dir()`: `$XDG_DATA_HOME` or `~/.local/share` on Linux,
/// `~/Library/Application Support` on macOS, `%APPDATA%` on Windows).
/// `None` when the system names no data folder (no `HOME`). Anything that
/// runs the agent's commands or the project's checks must hide this folder
/// from them (the client's `Read` deny rule, the checks' walls).
pub fn key_dir() -> Option<PathBuf> {
    #[cfg(test)]
    {
        // ralph-core's own unit tests never touch the person's data folder.
        return Some(
            std::env::temp_dir()
                .join("ralph-core-unit-tests")
                .join("ralph"),
        );
    }
    #[allow(unreachable_code)]
    if let Some(dir) = KEY_DIR_FOR_TESTS.get() {
        return Some(dir.clone());
    }
    dirs::data_dir().map(|dir| dir.join("ralph"))
}

static KEY_DIR_FOR_TESTS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// For the unit tests of the crates above this one: this process keeps
/// its key in `dir`, never in the person's data folder (the first call
/// wins). Never called by the binaries.
#[doc(hidden)]
pub fn keep_key_in_for_tests(dir: PathBuf) {
    let _ = KEY_DIR_FOR_TESTS.set(dir);
}

/// The key file in `dir` (a [`key_dir`]).
pub fn key_file(dir: &Path) -> PathBuf {
    dir.join(KEY_FILE_NAME)
}

/// Why the key cannot be used.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The system names no data folder to keep the key in.
    #[error("the system names no data folder for ralph's key (is HOME set?)")]
    NoDataDir,
    /// There is no key yet (nothing ralph wrote can be checked).
    #[error("ralph's key {} is missing", .0.display())]
    Missing(PathBuf),
    /// The key file is there, but not as ralph makes it: never used.
    #[error(
        "ralph's key {} is refused: {reason}. ralph makes its key itself (one regular file of 32 \
         bytes, yours, 0600, in a 0700 folder of yours) as a loop starts, before its first check; \
         a key that is not so may have been put there by someone else, who would then know it. \
         Move it aside (`mv {0} {0}.refused`): ralph makes a new one at the next start, and each \
         loop the old one signed must then be started over with `ralph-ctl reset`",
        .path.display()
    )]
    BadKey {
        /// The key file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The key's folder is there, but not as ralph makes it: its key
    /// (or one put there later) is never used.
    #[error(
        "ralph's key folder {} is refused: {reason}. ralph makes that folder itself, yours and \
         0700, as a loop starts, before its first check; one that is not so may hold a key put \
         there by someone else. Move the folder aside (`mv {0} {0}.refused`): ralph makes a new \
         one with a new key at the next start, and each loop the old key signed must then be \
         started over with `ralph-ctl reset`",
        .path.display()
    )]
    BadFolder {
        /// The key's folder.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A file operation failed.
    #[error("cannot {action} ralph's key {}: {source}", .path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

/// What a MAC is about: the same bytes are a different message as a
/// state, as a kept loop and as a log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A loop's state file.
    State,
    /// A loop kept in the history folder.
    Archive,
    /// One line of the audit log.
    LogLine,
    /// What a worktree was made with: its base, its setup, how its setup
    /// and test baseline went.
    Worktree,
}

impl Purpose {
    fn label(self) -> &'static [u8] {
        match self {
            Purpose::State => b"ralph state v1",
            Purpose::Archive => b"ralph archive v1",
            Purpose::LogLine => b"ralph log line v1",
            Purpose::Worktree => b"ralph worktree v1",
        }
    }
}

/// Ralph's key, loaded.
#[derive(Clone)]
pub struct Key([u8; KEY_BYTES]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

/// The user this process runs as: whose key and folder they must be.
#[cfg(unix)]
#[allow(unsafe_code)]
fn effective_uid() -> u32 {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Whether `dir`, the key's folder, is there (`Ok(false)`: not yet) and as
/// ralph makes it: a real folder (no link), this user's, mode 0700, so
/// nobody else can put a key in it or take one out.
fn check_folder(dir: &Path) -> Result<bool, KeyError> {
    let meta = match fs::symlink_metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(source) => {
            return Err(KeyError::Io {
                action: "look at the folder of",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let bad = |reason: String| KeyError::BadFolder {
        path: dir.to_path_buf(),
        reason,
    };
    if meta.file_type().is_symlink() {
        return Err(bad("it is a symbolic link, not a folder ralph made".into()));
    }
    if !meta.is_dir() {
        return Err(bad("it is not a folder".into()));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (owner, me) = (meta.uid(), effective_uid());
        if owner != me {
            return Err(bad(format!(
                "it belongs to user {owner}, not to you (user {me})"
            )));
        }
        let mode = meta.mode() & 0o777;
        if mode != 0o700 {
            return Err(bad(format!(
                "its mode is {mode:o}, not 700: others could put a key in it or take one out"
            )));
        }
    }
    Ok(true)
}

/// Why the key file `meta` describes is not as ralph makes it: a regular
/// file (no link), this user's, nobody else's to read or write, with one
/// name, of [`KEY_BYTES`] bytes.
fn key_file_fault(meta: &fs::Metadata) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("it is a symbolic link, not the file ralph made".into());
    }
    if !meta.is_file() {
        return Some("it is not a regular file".into());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (owner, me) = (meta.uid(), effective_uid());
        if owner != me {
            return Some(format!(
                "it belongs to user {owner}, not to you (user {me})"
            ));
        }
        let mode = meta.mode() & 0o777;
        if mode & 0o077 != 0 {
            let what = match (mode & 0o044 != 0, mode & 0o022 != 0) {
                (true, true) => "others can read and write it",
                (true, false) => "others can read it",
                (false, true) => "others can write it",
                (false, false) => "others have rights on it",
            };
            return Some(format!("its mode is {mode:o}, not 600: {what}"));
        }
        if meta.nlink() != 1 {
            return Some(format!(
                "it has {} names (hard links), where ralph's has one: another name may let \
                 someone else read it",
                meta.nlink()
            ));
        }
    }
    if meta.len() != KEY_BYTES as u64 {
        return Some(format!("{} bytes, not {KEY_BYTES}", meta.len()));
    }
    None
}

/// Whether the file at `path` has two names (a key being linked into
/// place by the process that made it, for a moment).
fn has_two_names(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        fs::symlink_metadata(path).is_ok_and(|m| m.nlink() == 2)
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

impl Key {
    /// The key in `dir`; [`KeyError::Missing`] when there is none, and
    /// [`KeyError::BadKey`] or [`KeyError::BadFolder`] for one that is not
    /// as ralph makes it (see [`key_file_fault`], [`check_folder`]). For
    /// the moment between another process's link of the key it makes and
    /// its removal of its own temp name, the key has two names: a key with
    /// two is read again, for at most a second, until it has one (and a
    /// key refused is read once more, as it may have had two names only
    /// while it was looked at).
    pub fn load(dir: &Path) -> Result<Key, KeyError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut read_again = false;
        loop {
            match Key::load_once(dir) {
                Err(KeyError::BadKey { .. })
                    if has_two_names(&key_file(dir)) && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Err(KeyError::BadKey { .. }) if !read_again => read_again = true,
                other => return other,
            }
        }
    }

    /// [`Key::load`], once.
    fn load_once(dir: &Path) -> Result<Key, KeyError> {
        let path = key_file(dir);
        if !check_folder(dir)? {
            return Err(KeyError::Missing(path));
        }
        let bad = |reason: String| KeyError::BadKey {
            path: path.clone(),
            reason,
        };
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(KeyError::Missing(path));
            }
            Err(source) => {
                return Err(KeyError::Io {
                    action: "look at",
                    path,
                    source,
                });
            }
        };
        if let Some(fault) = key_file_fault(&meta) {
            return Err(bad(fault));
        }
        let mut options = OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
        }
        let file = options.open(&path).map_err(|source| KeyError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        // What was opened is what was looked at, not something put in its
        // place since.
        let opened = file.metadata().map_err(|source| KeyError::Io {
            action: "look at",
            path: path.clone(),
            source,
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            if (opened.dev(), opened.ino()) != (meta.dev(), meta.ino()) {
                return Err(bad("it was replaced while ralph read it".into()));
            }
        }
        if let Some(fault) = key_file_fault(&opened) {
            return Err(bad(fault));
        }
        let mut bytes = Vec::with_capacity(KEY_BYTES);
        file.take(KEY_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| KeyError::Io {
                action: "read",
                path: path.clone(),
                source,
            })?;
        let key: [u8; KEY_BYTES] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| bad(format!("{} bytes, not {KEY_BYTES}", bytes.len())))?;
        Ok(Key(key))
    }

    /// The key in `dir`, made first when there is none: 32 random bytes
    /// written whole to a file of this process's own, then linked to the
    /// key's name, which fails when the name is taken: of two processes
    /// making it at once one wins, and the other reads the winner's key,
    /// never a part of it. The folder is made 0700, the file 0600; a
    /// folder that is there already must be as ralph makes it.
    pub fn load_or_create(dir: &Path) -> Result<Key, KeyError> {
        match Key::load(dir) {
            Err(KeyError::Missing(_)) => {}
            other => return other,
        }
        let io = |action: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| KeyError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(parent) = dir.parent() {
            fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        let mut builder = fs::DirBuilder::new();
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            builder.mode(0o700);
        }
        match builder.create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("create", dir)(e)),
        }
        if !check_folder(dir)? {
            return Err(io("create", dir)(io::ErrorKind::NotFound.into()));
        }
        let mut key = [0u8; KEY_BYTES];
        getrandom::fill(&mut key).map_err(|e| KeyError::Io {
            action: "make random bytes for",
            path: key_file(dir),
            source: io::Error::other(e.to_string()),
        })?;
        let nonce = getrandom::u64().unwrap_or_default();
        let tmp = dir.join(format!(
            ".{KEY_FILE_NAME}.tmp-{}-{nonce:x}",
            std::process::id()
        ));
        write_new(&tmp, &key).map_err(io("write", &tmp))?;
        let linked = fs::hard_link(&tmp, key_file(dir));
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                sync_folder(dir);
                Ok(Key(key))
            }
            // Another process made it first: theirs is the key.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Key::load(dir),
            Err(e) => Err(io("create", &key_file(dir))(e)),
        }
    }

    /// The MAC of `bytes` as `purpose`, in the folder `folder`, in hex.
    pub fn tag(&self, purpose: Purpose, folder: &Path, bytes: &[u8]) -> String {
        let mac = self.mac(purpose, folder, bytes).finalize().into_bytes();
        let mut hex = String::with_capacity(TAG_CHARS);
        for byte in &mac {
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte >> 4)]));
            hex.push(char::from(b"0123456789abcdef"[usize::from(byte & 0xf)]));
        }
        hex
    }

    /// Whether `tag` (hex) is the MAC of `bytes` as `purpose` in `folder`
    /// (compared in constant time).
    pub fn verifies(&self, purpose: Purpose, folder: &Path, bytes: &[u8], tag: &[u8]) -> bool {
        let Some(raw) = unhex(tag) else {
            return false;
        };
        self.mac(purpose, folder, bytes).verify_slice(&raw).is_ok()
    }

    fn mac(&self, purpose: Purpose, folder: &Path, bytes: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        let folder = fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
        let folder = folder.to_string_lossy();
        for part in [purpose.label(), folder.as_bytes()] {
            mac.update(&(part.len() as u64).to_be_bytes());
            mac.update(part);
        }
        mac.update(bytes);
        mac
    }
}

/// The key of [`key_dir`], read once per folder (`None` when it cannot be
/// used, and why); `create` makes it when missing (writers do; readers
/// never make a key: with none, nothing verifies).
pub fn current(create: bool) -> Result<Key, KeyError> {
    static LOADED: Mutex<Option<(PathBuf, Key)>> = Mutex::new(None);
    let dir = key_dir().ok_or(KeyError::NoDataDir)?;
    let mut loaded = LOADED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, key)) = loaded.as_ref()
        && *at == dir
    {
        return Ok(key.clone());
    }
    let key = if create {
        Key::load_or_create(&dir)?
    } else {
        Key::load(&dir)?
    };
    *loaded = Some((dir, key.clone()));
    Ok(key)
}

/// Makes ralph's key now when there is none, and checks the one there
/// ([`Key::load`]'s rules): every start of a loop calls it before its
/// first check runs the agent's code (the test baseline), so that the key
/// is never first made after that code ran, when it could have put a key
/// of its own in the key's place for ralph to adopt.
pub fn ensure_made() -> Result<(), KeyError> {
    current(true).map(drop)
}

/// Creates `path` (never over anything, never through a link), 0600, with
/// `bytes`, synced.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = options.open(path)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if written.is_err() {
        let _ = fs::remove_file(path);
    }
    written
}

fn sync_folder(dir: &Path) {
    if let Ok(folder) = File::open(dir) {
        let _ = folder.sync_all();
    }
}

fn unhex(hex: &[u8]) -> Option<Vec<u8>> {
    if hex.len() != TAG_CHARS {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    hex.chunks(2)
        .map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// A key for tests: the same 32 bytes each time `seed` is the same.
#[doc(hidden)]
pub fn test_key(seed: u8) -> Key {
    Key([seed; KEY_BYTES])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tempfile::TempDir;

    #[cfg(unix)]
    fn mode(path: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_missing_key_is_made_private_and_then_read_back() {
        let home = TempDir::new().unwrap();
        let dir = home.path().join("data").join("ralph");
        assert!(matches!(Key::load(&dir), Err(KeyError::Missing(_))));
        let made = Key::load_or_create(&dir).unwrap();
        let read = Key::load(&dir).unwrap();
        assert_eq!(made.0, read.0);
        assert_eq!(fs::read(key_file(&dir)).unwrap().len(), KEY_BYTES);
        #[cfg(unix)]
        {
            assert_eq!(mode(&key_file(&dir)), 0o600);
            assert_eq!(mode(&dir), 0o700);
        }
        // No temp file is left beside it.
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, [KEY_FILE_NAME]);
    }

    #[test]
    fn creators_racing_all_get_the_one_key() {
        let home = TempDir::new().unwrap();
        let dir = home.path().join("ralph");
        let barrier = std::sync::Barrier::new(16);
        let keys: Vec<Key> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        Key::load_or_create(&dir).unwrap()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let on_disk = Key::load(&dir).unwrap();
        assert!(keys.iter().all(|k| k.0 == on_disk.0));
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
    }

    #[test]
    fn a_tag_verifies_only_for_its_key_purpose_folder_and_bytes() {
        let key = test_key(1);
        let folder = Path::new("/nowhere/runtime");
        let tag = key.tag(Purpose::State, folder, b"{}");
        assert_eq!(tag.len(), TAG_CHARS);
        assert!(key.verifies(Purpose::State, folder, b"{}", tag.as_bytes()));
        assert!(!key.verifies(Purpose::State, folder, b"{ }", tag.as_bytes()));
        assert!(!key.verifies(Purpose::Archive, folder, b"{}", tag.as_bytes()));
        assert!(!key.verifies(
            Purpose::State,
            Path::new("/elsewhere"),
            b"{}",
            tag.as_bytes()
        ));
        assert!(!test_key(2).verifies(Purpose::State, folder, b"{}", tag.as_bytes()));
        assert!(!key.verifies(Purpose::State, folder, b"{}", b"00"));
        assert!(!key.verifies(Purpose::State, folder, b"{}", tag.to_uppercase().as_bytes()));
    }

    #[cfg(unix)]
    #[test]
    fn a_key_others_can_read_or_of_the_wrong_size_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let home = TempDir::new().unwrap();
        let dir = home.path().join("ralph");
        Key::load_or_create(&dir).unwrap();
        let file = key_file(&dir);
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        let err = Key::load(&dir).unwrap_err().to_string();
        assert!(err.contains("others can read it"), "{err}");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&file, b"short").unwrap();
        let err = Key::load(&dir).unwrap_err().to_string();
        assert!(err.contains("5 bytes, not 32"), "{err}");
        // Never replaced by a new one: the loops it signed would be lost.
        assert!(Key::load_or_create(&dir).is_err());
    }

    /// The message of a key refused in `dir`, which must name `named`,
    /// the reason and the fix; the key is never replaced.
    #[cfg(unix)]
    fn refused(dir: &Path, named: &Path, reason: &str) {
        let before = fs::read(key_file(dir)).ok();
        let err = Key::load(dir).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{} is refused", named.display()))
                && err.contains(reason)
                && err.contains(&format!("mv {0} {0}.refused", named.display()))
                && err.contains("ralph-ctl reset"),
            "{err}"
        );
        assert!(Key::load_or_create(dir).is_err(), "never replaced");
        assert_eq!(fs::read(key_file(dir)).ok(), before);
    }

    #[cfg(unix)]
    #[test]
    fn a_key_ralph_did_not_make_is_refused_naming_the_file_and_the_fix() {
        use std::os::unix::fs::{PermissionsExt, symlink};
        let home = TempDir::new().unwrap();
        let dir = home.path().join("ralph");
        Key::load_or_create(&dir).unwrap();
        let file = key_file(&dir);
        // A link to a key someone else keeps.
        let elsewhere = home.path().join("planted.key");
        fs::rename(&file, &elsewhere).unwrap();
        symlink(&elsewhere, &file).unwrap();
        refused(&dir, &file, "it is a symbolic link");
        fs::remove_file(&file).unwrap();
        // A second name.
        fs::hard_link(&elsewhere, &file).unwrap();
        refused(&dir, &file, "it has 2 names (hard links)");
        fs::remove_file(&elsewhere).unwrap();
        Key::load(&dir).unwrap();
        // Open to others.
        for (mode, what) in [
            (0o644, "its mode is 644, not 600: others can read it"),
            (0o620, "its mode is 620, not 600: others can write it"),
            (0o666, "others can read and write it"),
        ] {
            fs::set_permissions(&file, fs::Permissions::from_mode(mode)).unwrap();
            refused(&dir, &file, what);
        }
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        Key::load(&dir).unwrap();
        // A folder others can write, or that is not 0700.
        for mode in [0o755, 0o777, 0o750] {
            fs::set_permissions(&dir, fs::Permissions::from_mode(mode)).unwrap();
            refused(&dir, &dir, &format!("its mode is {mode:o}, not 700"));
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        // A folder that is a link.
        let linked = home.path().join("linked");
        symlink(&dir, &linked).unwrap();
        let err = Key::load(&linked).unwrap_err().to_string();
        assert!(
            err.contains("it is a symbolic link, not a folder ralph made"),
            "{err}"
        );
        Key::load(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_planted_before_the_first_key_is_refused_and_no_key_made_in_it() {
        use std::os::unix::fs::PermissionsExt;
        let home = TempDir::new().unwrap();
        let dir = home.path().join("ralph");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = Key::load_or_create(&dir).unwrap_err().to_string();
        assert!(err.contains("folder") && err.contains("not 700"), "{err}");
        assert!(!key_file(&dir).exists());
    }

    #[cfg(unix)]
    #[test]
    fn a_key_of_another_user_is_refused() {
        if effective_uid() != 0 {
            // Only root can hand a file to another user.
            return;
        }
        let home = TempDir::new().unwrap();
        let dir = home.path().join("ralph");
        Key::load_or_create(&dir).unwrap();
        let file = key_file(&dir);
        std::os::unix::fs::lchown(&file, Some(65534), Some(65534)).unwrap();
        refused(&dir, &file, "it belongs to user 65534, not to you (user 0)");
        std::os::unix::fs::lchown(&file, Some(0), Some(0)).unwrap();
        std::os::unix::fs::lchown(&dir, Some(65534), Some(65534)).unwrap();
        refused(&dir, &dir, "it belongs to user 65534");
    }
}
