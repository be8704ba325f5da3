//! `ralph-ctl reset`: clears the loop's state so a new loop can start.

use std::path::PathBuf;

use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::store::StateStore;
use ralph_core::transaction;

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
    if !StateStore::new(paths).exists()? {
        return Ok(Cleared::Nothing);
    }
    let replaced = transaction::replace(paths, |_| Ok::<_, CtlError>(Event::Cleared))?;
    for note in &replaced.notes {
        crate::warn!("ralph-ctl: {note}");
    }
    Ok(match replaced.quarantined {
        Some(aside) => Cleared::Quarantined(aside),
        None => Cleared::Removed(replaced.kept),
    })
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
