//! `ralph-ctl finish`: what runs once the client has exited (`ralph-ctl run`
//! calls [`record`] and [`announce`] itself). A loop still `running` then was
//! cut short (Ctrl-C, a signal, a crash, the client's own block cap): it is
//! marked `interrupted` with what is known. The exit code says how the loop
//! ended.

use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::lifecycle;
use ralph_core::log::{LogEntry, LogEvent};
use ralph_core::paths::ProjectPaths;
use ralph_core::state::{LoopState, Status};
use ralph_core::store::{StateLock, StateStore};
use ralph_core::time;

use crate::error::CtlError;
use crate::CmdResult;

/// Marks an interrupted loop, prints one line on stderr, returns the loop's exit code.
pub fn run(paths: &ProjectPaths, session_id: &str, client_exit: Option<i32>) -> CmdResult {
    let cause = match client_exit {
        Some(code) => format!("Claude Code exited with code {code}"),
        None => "Claude Code exited".to_string(),
    };
    Ok(announce(paths, &record(paths, session_id, &cause)?))
}

/// What [`record`] found once the client had exited.
#[derive(Debug)]
pub enum Ending {
    /// No state any more (it was reset).
    Gone,
    /// The state belongs to another session now (another start replaced it).
    Replaced {
        /// The session that owns it now.
        by: String,
    },
    /// The session's loop, as it ended (marked `interrupted` when it was still running).
    Loop(Box<LoopState>),
}

/// Under the state lock: a loop of `session_id` still `running` (or
/// paused) is marked `interrupted`, ending "`cause` while the loop was
/// running at iteration N of M", and the end is logged.
pub fn record(paths: &ProjectPaths, session_id: &str, cause: &str) -> Result<Ending, CtlError> {
    with_own_loop(paths, session_id, |lock, mut state| {
        let now = time::now_rfc3339();
        if lifecycle::interrupt(&mut state, cause, &now) {
            lock.write(&state)?;
            let why = state.ended_because.clone().unwrap_or_default();
            crate::driver::supervisor::log_entry(
                lock,
                &LogEntry::about(&state, LogEvent::End, &now, why),
            );
        }
        Ok(Ending::Loop(Box::new(state)))
    })
}

/// Runs `change` under the state lock on the loop of `session_id`; when
/// there is none any more (reset, or replaced by another start), says so
/// without calling it.
pub fn with_own_loop(
    paths: &ProjectPaths,
    session_id: &str,
    change: impl FnOnce(&StateLock<'_>, LoopState) -> Result<Ending, CtlError>,
) -> Result<Ending, CtlError> {
    let store = StateStore::new(paths);
    let Some((lock, state)) = store.lock_existing()? else {
        return Ok(Ending::Gone);
    };
    if state.session_id != session_id {
        return Ok(Ending::Replaced {
            by: state.session_id,
        });
    }
    let ending = change(&lock, state)?;
    Ok(match ending {
        // An ending or a pause this change made: the person is told (`notify`).
        Ending::Loop(mut state) => {
            notify(&lock, paths, &mut state);
            Ending::Loop(state)
        }
        other => other,
    })
}

/// Runs the config's `notify` command for the loop's ending or pause, once,
/// under the lock (see `ralph_core::notify`).
pub fn notify(lock: &StateLock<'_>, paths: &ProjectPaths, state: &mut LoopState) {
    let due = ralph_core::notify::key(state).is_some_and(|k| state.notified.as_deref() != Some(&k));
    if !due {
        return;
    }
    // The loop's pinned `notify`, never one written into config.json since.
    let Ok(config) = ralph_core::pin::loop_config(paths, &ralph_core::config::ProcessEnv, state)
    else {
        return;
    };
    let now = time::now_rfc3339();
    if let Some(note) =
        ralph_core::notify::settled(lock, &paths.root, config.notify.as_deref(), state, &now)
    {
        crate::warn!("ralph-ctl: {note}");
    }
}

/// Prints the one line saying how the loop ended on stderr and returns its
/// exit code. A failed write (the terminal is gone) is ignored: the end is
/// already recorded.
pub fn announce(paths: &ProjectPaths, ending: &Ending) -> i32 {
    let (line, code) = match ending {
        Ending::Gone => (
            "the loop's state is gone (was it reset?); nothing to report".to_string(),
            exit_codes::NO_LOOP,
        ),
        Ending::Replaced { by } => (
            format!("the loop state now belongs to session {by} (another start replaced this one)"),
            exit_codes::NO_LOOP,
        ),
        Ending::Loop(state) => {
            let state = believed(paths, (**state).clone());
            (
                lifecycle::outcome_line(&state),
                lifecycle::exit_code_of(&state),
            )
        }
    };
    let _ = writeln!(std::io::stderr(), "ralph: {line}");
    code
}

/// `state` as ralph can vouch for it: a `complete` whose accepting stop is
/// not in the audit log (the state and its claim were written by something
/// else, such as an agent's command outside the sandbox) keeps its claim
/// as not accepted, so that it is reported as a completion not on record
/// (exit 17), never as done.
pub fn believed(paths: &ProjectPaths, mut state: LoopState) -> LoopState {
    if state.status == Status::Complete
        && lifecycle::completion_on_record(&state)
        && !ralph_core::log::completion_logged(&paths.state_file(), &state)
    {
        if let Some(claim) = state.last_claim.as_mut() {
            claim.accepted = false;
        }
    }
    state
}

/// The exit code of a loop that ended with `status`.
pub fn exit_code(status: Status) -> i32 {
    lifecycle::exit_code(status)
}
