//! `ralph-ctl reset`: clears the loop's state so a new loop can start.

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;

use crate::error::CmdResult;

/// Clears the state and says what happened.
pub(crate) fn run(paths: &ProjectPaths) -> CmdResult {
    // A loop left running by a launcher killed outright: its ending
    // recorded (and told) before it is cleared.
    crate::driver::liveness::reconcile_before_change(paths)?;
    match crate::driver::start::clear(paths)? {
        crate::driver::start::Cleared::Nothing => crate::output::say!(
            "Nothing to reset: no loop state in {}.",
            paths.root.display()
        ),
        crate::driver::start::Cleared::Removed(Some(kept)) => crate::output::say!(
            "Reset: the loop was cleared and kept in the history ({}; `ralph-ctl history` lists them).",
            kept.display()
        ),
        crate::driver::start::Cleared::Removed(None) => crate::output::say!("Reset: the loop state was cleared."),
        crate::driver::start::Cleared::Quarantined(aside) => {
            crate::output::say!(
                "Reset: the state ralph could not use (corrupt, or not written by ralph on this \
                 machine) was moved to {}.",
                aside.display()
            )
        }
    }
    Ok(exit_codes::OK)
}
