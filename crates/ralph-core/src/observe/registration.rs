//! What `.claude/settings.json` says about ralph's Stop hook, so both
//! binaries can check that the registered timeout leaves room for the
//! verification commands (Claude Code kills a hook that outlives it).
//!
//! The file is read bounded and without waiting: a FIFO or a link to a
//! device there is an error naming the file, never a hang or an endless read.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;
use thiserror::Error;

use crate::files::{Bounded, read_bounded};
use crate::paths::ProjectPaths;

/// Claude Code's timeout for a command hook that sets none, in seconds.
pub const CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;
/// Seconds the hook needs beside its verification commands.
pub const HOOK_OVERHEAD_SECS: u64 = 10;
/// The name by which a registration of ralph's hook is recognised.
pub const HOOK_BINARY_NAME: &str = "ralph-stop-hook";

/// The largest `.claude/settings.json` read (Claude Code's are a few KiB).
pub const MAX_SETTINGS_BYTES: u64 = 1024 * 1024;

/// Why `.claude/settings.json` cannot be read.
#[derive(Debug, Error)]
pub enum SettingsError {
    /// Not a regular file (a FIFO, a device, a folder), or unreadable.
    #[error("cannot read {}: {source}; it should be the JSON file `ralph-ctl init` writes", path.display())]
    Unreadable {
        /// The settings file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Larger than [`MAX_SETTINGS_BYTES`].
    #[error("{} is larger than {} KiB; Claude Code's settings are a few KiB", path.display(), MAX_SETTINGS_BYTES / 1024)]
    TooLarge {
        /// The settings file.
        path: PathBuf,
    },
}

/// The bytes of the settings file at `path`, `None` when there is none;
/// bounded to [`MAX_SETTINGS_BYTES`], and never waiting on a FIFO.
pub fn read_settings(path: &Path) -> Result<Option<Vec<u8>>, SettingsError> {
    match read_bounded(path, MAX_SETTINGS_BYTES) {
        Ok(Bounded::Missing) => Ok(None),
        Ok(Bounded::Bytes(bytes)) => Ok(Some(bytes)),
        Ok(Bounded::TooLarge) => Err(SettingsError::TooLarge {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(SettingsError::Unreadable {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Ralph's entry among the Stop hooks of `settings`, if it is registered
/// (a file that is not JSON registers nothing).
fn registered_entry(settings: &Path) -> Result<Option<Value>, SettingsError> {
    let Some(bytes) = read_settings(settings)? else {
        return Ok(None);
    };
    Ok(serde_json::from_slice(&bytes)
        .ok()
        .and_then(|value: Value| ralph_entry(&value)))
}

/// Ralph's entry among the Stop hooks of a parsed settings object.
pub fn ralph_entry(value: &Value) -> Option<Value> {
    value
        .pointer("/hooks/Stop")?
        .as_array()?
        .iter()
        .filter_map(|group| group.get("hooks")?.as_array())
        .flatten()
        .find(|entry| {
            entry
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(|c| c.contains(HOOK_BINARY_NAME))
        })
        .cloned()
}

/// The timeout registered for ralph's Stop hook in `settings`, if it is registered.
pub fn registered_timeout(settings: &Path) -> Result<Option<u64>, SettingsError> {
    Ok(registered_entry(settings)?.map(|entry| {
        entry
            .get("timeout")
            .and_then(Value::as_u64)
            .unwrap_or(CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS)
    }))
}

/// The command line registered for ralph's Stop hook in `settings`, if it is registered.
pub fn registered_command(settings: &Path) -> Result<Option<String>, SettingsError> {
    Ok(registered_entry(settings)?.and_then(|entry| {
        entry
            .get("command")
            .and_then(Value::as_str)
            .map(str::to_owned)
    }))
}

/// The settings file that registers ralph's hook: the person's own
/// (`settings.local.json`, `ralph-ctl init --local`) before the project's
/// (`settings.json`); `None` when neither does.
pub fn registration_file(paths: &ProjectPaths) -> Result<Option<PathBuf>, SettingsError> {
    for file in [paths.local_settings_file(), paths.settings_file()] {
        if registered_entry(&file)?.is_some() {
            return Ok(Some(file));
        }
    }
    Ok(None)
}

/// [`registered_timeout`] of the file that registers the hook ([`registration_file`]).
pub fn registered_timeout_in(paths: &ProjectPaths) -> Result<Option<u64>, SettingsError> {
    match registration_file(paths)? {
        Some(file) => registered_timeout(&file),
        None => Ok(None),
    }
}

/// [`registered_command`] of the file that registers the hook ([`registration_file`]).
pub fn registered_command_in(paths: &ProjectPaths) -> Result<Option<String>, SettingsError> {
    match registration_file(paths)? {
        Some(file) => registered_command(&file),
        None => Ok(None),
    }
}

/// A warning when verification commands taking up to `verify_total` seconds
/// may not fit in a hook `timeout`.
pub fn timeout_warning(verify_total: u64, timeout: u64) -> Option<String> {
    (verify_total > 0 && verify_total + HOOK_OVERHEAD_SECS > timeout).then(|| {
        format!(
            "the verify commands may take up to {verify_total} s but the Stop hook's timeout is {timeout} s, \
             so Claude Code could kill the hook mid-verification; run `ralph-ctl init` again (it sizes the \
             timeout to fit) or lower their timeoutSeconds"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::fs;

    #[test]
    fn finds_the_registered_timeout() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("settings.json");
        assert_eq!(registered_timeout(&path).unwrap(), None);
        fs::write(
            &path,
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify"}]},{"hooks":[{"type":"command","command":"/x/ralph-stop-hook","timeout":90}]}]}}"#,
        )
        .unwrap();
        assert_eq!(registered_timeout(&path).unwrap(), Some(90));
        fs::write(
            &path,
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"ralph-stop-hook"}]}]}}"#,
        )
        .unwrap();
        assert_eq!(registered_timeout(&path).unwrap(), Some(60));
        fs::write(&path, "not json").unwrap();
        assert_eq!(registered_timeout(&path).unwrap(), None);
        assert!(timeout_warning(55, 60).is_some());
        assert!(timeout_warning(50, 60).is_none());
        assert!(timeout_warning(0, 5).is_none());
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_a_device_or_a_huge_file_is_named_not_read() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("settings.json");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        let err = registered_timeout(&path).unwrap_err().to_string();
        assert!(err.contains("settings.json: not a regular file"), "{err}");
        fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let err = registered_command(&path).unwrap_err().to_string();
        assert!(err.contains("settings.json: not a regular file"), "{err}");
        fs::remove_file(&path).unwrap();
        fs::write(
            &path,
            vec![b' '; usize::try_from(MAX_SETTINGS_BYTES).unwrap() + 1],
        )
        .unwrap();
        let err = registered_timeout(&path).unwrap_err().to_string();
        assert!(
            err.contains("settings.json is larger than 1024 KiB"),
            "{err}"
        );
    }
}
