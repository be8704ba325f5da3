//! `ralph-ctl finish`: what the launchers run once the client has exited.
//! A loop still `running` then was cut short (Ctrl-C, a crash, the client's
//! own block cap): it is marked `interrupted` with what is known. The exit
//! code says how the loop ended.

use ralph_core::decision::MessageSource;
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::state::{excerpt, IterationRecord, LoopState, Status, StopDecision};
use ralph_core::store::StateStore;
use ralph_core::time;

use crate::CmdResult;

/// Marks an interrupted loop, prints one line on stderr, returns the loop's exit code.
pub fn run(paths: &ProjectPaths, session_id: &str, client_exit: Option<i32>) -> CmdResult {
    let store = StateStore::new(paths);
    if !store.exists() {
        eprintln!("ralph: the loop's state is gone (was it reset?); nothing to report");
        return Ok(exit_codes::NO_LOOP);
    }
    let lock = store.lock(false)?;
    let Some(mut state) = lock.read()? else {
        eprintln!("ralph: the loop's state is gone (was it reset?); nothing to report");
        return Ok(exit_codes::NO_LOOP);
    };
    if state.session_id != session_id {
        eprintln!(
            "ralph: the loop state now belongs to session {} (another start replaced this one)",
            state.session_id
        );
        return Ok(exit_codes::NO_LOOP);
    }
    if state.status == Status::Running {
        let now = time::now_rfc3339();
        let client = match client_exit {
            Some(code) => format!("Claude Code exited with code {code}"),
            None => "Claude Code exited".to_string(),
        };
        let because = format!(
            "{client} while the loop was running at iteration {} of {}",
            state.iteration, state.max_iterations
        );
        state.push_history(IterationRecord {
            iteration: state.iteration,
            at: now.clone(),
            decision: StopDecision::Allow,
            why: because.clone(),
            excerpt: excerpt(""),
            stop_hook_active: false,
            findings: None,
            message_source: MessageSource::Missing,
            tool_calls: 0,
            error: None,
            breaker: None,
            status_block: None,
            claim: None,
        });
        state.end(Status::Interrupted, because, &now);
        lock.write(&state)?;
    }
    eprintln!("ralph: {}", outcome_line(&state));
    Ok(exit_code(state.status))
}

/// The exit code of a loop that ended with `status`.
pub fn exit_code(status: Status) -> i32 {
    match status {
        Status::Complete => exit_codes::OK,
        Status::MaxIterations => exit_codes::MAX_ITERATIONS,
        Status::CircuitOpen => exit_codes::CIRCUIT_OPEN,
        Status::Interrupted | Status::Running => exit_codes::INTERRUPTED,
    }
}

/// One line saying how the loop ended.
pub fn outcome_line(state: &LoopState) -> String {
    let because = state
        .ended_because
        .as_deref()
        .unwrap_or("no reason recorded");
    match state.status {
        Status::Complete => format!(
            "loop complete at iteration {} of {} ({because})",
            state.iteration, state.max_iterations
        ),
        Status::MaxIterations => format!(
            "loop stopped without completing: max_iterations, {} of {} ({because})",
            state.iteration, state.max_iterations
        ),
        Status::CircuitOpen => format!(
            "loop stopped by the circuit breaker: circuit_open at iteration {} ({because}); `ralph-ctl status` shows why",
            state.iteration
        ),
        Status::Interrupted => format!("loop interrupted: {because}"),
        Status::Running => "loop still running".into(),
    }
}
