//! `ralph-ctl reset`: clears the loop's state so a new loop can start.

use std::path::PathBuf;

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::store::{StateStore, StoreError};
use ralph_core::time;

use crate::error::CtlError;
use crate::CmdResult;

/// What [`clear`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleared {
    /// There was no state.
    Nothing,
    /// The state file was removed; the loop it held was kept in the
    /// history at this path (`None`: there was no loop in it any more).
    Removed(Option<PathBuf>),
    /// The state was corrupt and was moved to this path.
    Quarantined(PathBuf),
}

/// Removes the state under the lock, keeping its loop in the history first;
/// a corrupt one is moved aside. Nothing is lost either way.
pub fn clear(paths: &ProjectPaths) -> Result<Cleared, CtlError> {
    let store = StateStore::new(paths);
    if !store.exists()? {
        return Ok(Cleared::Nothing);
    }
    let lock = store.lock(false)?;
    match lock.read() {
        Ok(state) => {
            let kept = state.map(|state| lock.archive(&state)).transpose()?;
            lock.remove()?;
            Ok(Cleared::Removed(kept))
        }
        Err(StoreError::Corrupt { .. }) => {
            Ok(Cleared::Quarantined(lock.quarantine(&time::now_rfc3339())?))
        }
        Err(e) => Err(e.into()),
    }
}

/// Clears the state and says what happened.
pub fn run(paths: &ProjectPaths) -> CmdResult {
    match clear(paths)? {
        Cleared::Nothing => crate::say!(
            "Nothing to reset: no loop state in {}.",
            paths.root.display()
        ),
        Cleared::Removed(Some(kept)) => crate::say!(
            "Reset: the loop was cleared and kept in the history ({}; `ralph-ctl history` lists them).",
            kept.display()
        ),
        Cleared::Removed(None) => crate::say!("Reset: the loop state was cleared."),
        Cleared::Quarantined(aside) => {
            crate::say!("Reset: the corrupt state was moved to {}.", aside.display())
        }
    }
    Ok(exit_codes::OK)
}
