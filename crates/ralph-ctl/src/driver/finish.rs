//! A loop's end once its client has exited, for `ralph-ctl finish` and
//! `ralph-ctl run` (which calls [`record`] and [`announce`] itself). A loop still `running` then was
//! cut short (Ctrl-C, a signal, a crash, the client's own block cap): it is
//! marked `interrupted` with what is known. The exit code says how the loop
//! ended.

use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Found, Whose};

use crate::error::CtlError;

/// Under the state lock: a loop of `session_id` still `running` (or
/// paused) is marked `interrupted`, ending "`cause` while the loop was
/// running at iteration N of M", and the end is logged.
pub(crate) fn record(
    paths: &ProjectPaths,
    session_id: &str,
    cause: &str,
) -> Result<Found, CtlError> {
    let changed = transaction::change(paths, Whose::Session(session_id), |draft| {
        draft.apply(Event::Interrupted {
            cause: cause.to_string(),
        });
        Ok::<_, CtlError>(())
    })?;
    Ok(crate::driver::told(changed))
}

/// Prints the one line saying how the loop ended on stderr and returns its
/// exit code. A failed write (the terminal is gone) is ignored: the end is
/// already recorded.
pub(crate) fn announce(paths: &ProjectPaths, ending: &Found) -> i32 {
    let (line, code) = match ending {
        Found::Gone => (
            "the loop's state is gone (was it reset?); nothing to report".to_string(),
            exit_codes::NO_LOOP,
        ),
        Found::Replaced { by } => (
            format!("the loop state now belongs to session {by} (another start replaced this one)"),
            exit_codes::NO_LOOP,
        ),
        Found::Loop(state) => {
            let state = believed(paths, (**state).clone());
            (
                with_cost(lifecycle::outcome_line(&state), &state),
                lifecycle::exit_code_of(&state),
            )
        }
    };
    // An item's loop: its queue worker says how the item ended. The line
    // may carry the agent's text (a RALPH_ABORT reason, a question).
    if !paths.is_item() {
        crate::output::say_err!("ralph: {line}");
    }
    code
}

/// The closing line with what the loop cost by the client's count, in
/// every mode (an in-session loop learns it only when its client exits),
/// with the tokens it did not report priced at list prices (a cancelled
/// client reports nothing); a loop that cost nothing says nothing of it.
fn with_cost(line: String, state: &LoopState) -> String {
    if !state.cost_known() {
        return line;
    }
    format!("{line} [cost {}]", state.cost_so_far())
}

/// `state` as ralph can vouch for it: a `complete` whose accepting stop is
/// not in the audit log (the state and its claim were written by something
/// else, such as an agent's command outside the sandbox) keeps its claim
/// as not accepted, so that it is reported as a completion not on record
/// (exit 17), never as done.
pub(crate) fn believed(paths: &ProjectPaths, mut state: LoopState) -> LoopState {
    if state.status == Status::Complete
        && state.queue.is_none()
        && lifecycle::completion_on_record(&state)
        && !ralph_core::persist::log::completion_logged(&paths.state_file(), &state)
        && let Some(claim) = state.last_claim.as_mut()
    {
        claim.accepted = false;
    }
    state
}

/// The exit code once the client exited: the loop's, or 128 + the signal
/// when a signal the driver received left the loop interrupted.
pub(crate) fn finish_code(
    paths: &ProjectPaths,
    ending: &Found,
    supervision: &super::client::Supervision,
) -> i32 {
    let code = announce(paths, ending);
    match (ending, supervision.signal) {
        (Found::Loop(state), Some(signal)) if state.status == Status::Interrupted => {
            signal.exit_code()
        }
        _ => code,
    }
}
