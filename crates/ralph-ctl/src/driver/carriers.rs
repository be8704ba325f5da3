//! The driver's processes in the state, and the loops they left behind.
//!
//! `ralph-ctl run` records itself, then the client it starts, as the loop's
//! carriers. A launcher killed outright (SIGKILL, its terminal closed, a
//! reboot) cannot record the end of its loop, which would then stay
//! `running` and refuse every later start. [`reconcile`] finds such a loop,
//! all of its carriers gone, and records it as interrupted; `start`, `run`,
//! `cancel` and `reset` call it before they change the loop. Read-only
//! commands (`status`, `watch`, `report`, `log`, `queue`) never do: they
//! show such a loop as interrupted ([`left_behind`]) and write nothing.

use ralph_core::events::Event;
use ralph_core::judge::state::{Carriers, LoopState, Status};
use ralph_core::observe::liveness;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::ProcessId;

use super::transcripts;
use crate::error::CtlError;

/// Records `carriers` on the loop of `session_id` (nothing when the loop
/// is no longer that session's).
pub(crate) fn record(
    paths: &ProjectPaths,
    session_id: &str,
    carriers: Carriers,
) -> Result<(), CtlError> {
    record_start(paths, session_id, carriers, None)
}

/// What a new worktree starts from, recorded as its client starts.
#[derive(Debug)]
pub(crate) struct NewWorktree {
    /// The breaker's progress baseline: the iteration's progress is what
    /// it changed there.
    pub(crate) progress: Option<ralph_core::observe::progress::Baseline>,
    /// Its own test baseline (`None`: the loop's stands).
    pub(crate) tests: Option<ralph_core::events::WorktreeBaseline>,
}

/// [`record`] for a client just started, with the breaker's progress
/// baseline and the test baseline of the worktree it works in when it has
/// a new one: what an iteration's start changes in the loop, in one
/// transaction.
pub(crate) fn record_start(
    paths: &ProjectPaths,
    session_id: &str,
    carriers: Carriers,
    new_worktree: Option<NewWorktree>,
) -> Result<(), CtlError> {
    let changed = transaction::change(paths, Whose::Session(session_id), |draft| {
        draft.apply(Event::Carried(Some(carriers)));
        if let Some(new) = new_worktree {
            draft.apply(Event::Rebaselined(new.progress));
            if let Some(tests) = new.tests {
                draft.apply(Event::WorktreeBaselined(Box::new(tests)));
            }
        }
        Ok::<_, CtlError>(())
    })?;
    super::told(changed);
    Ok(())
}

/// The carriers of this driver with `client` running under it.
pub(crate) fn with_client(client: Option<u32>) -> Carriers {
    Carriers {
        client: client.map(liveness::of_pid),
        ..liveness::carriers_of_this_process()
    }
}

/// Whether `state` is a running loop whose carriers are all gone.
pub(crate) fn left_behind(state: &LoopState) -> bool {
    state.status == Status::Running
        && state.carriers.as_ref().is_some_and(liveness::all_gone)
        && joined_alive(state).is_none()
}

/// A `run --queue` process that joined the loop's queue run and still
/// lives (its pid): the run is still being drained.
fn joined_alive(state: &LoopState) -> Option<u32> {
    state
        .queue
        .as_ref()?
        .joined
        .iter()
        .find(|c| !liveness::all_gone(c))
        .map(|c| c.driver.map_or(0, |d| d.pid))
}

/// Records a loop left behind by its carriers as interrupted, with an
/// audit line; returns the loop when it did.
pub(crate) fn reconcile(paths: &ProjectPaths) -> Result<Option<LoopState>, CtlError> {
    // Unlocked first: the usual answer is "nothing to do".
    let mut reconciled = false;
    match StateStore::new(paths).read() {
        Ok(Some(state)) if left_behind(&state) => {}
        _ => return Ok(None),
    }
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state().filter(|s| left_behind(s)).cloned() else {
            return Ok::<_, CtlError>(());
        };
        let carriers = state.carriers.clone().unwrap_or_default();
        draft.apply(Event::Carried(None));
        // What the last run spent with no stop and no result to say so: its
        // requests and tokens, and its cost where the client wrote it on its
        // way out (a `cost-state` line: the session's total, which the loop's
        // cost keeps up with in session mode; a fresh loop's resume goes on in
        // that session, whose next result reports the total, so it is charged
        // then, once).
        if let Some(reading) = transcripts::unstopped_usage(&state, paths) {
            let total = reading.session_cost.filter(|_| !state.fresh_context);
            draft.apply(Event::UsageCounted(reading));
            if let Some(cost) = total {
                draft.apply(Event::Charged {
                    cost,
                    session_total: true,
                });
            }
        }
        draft.apply(Event::Interrupted {
            cause: cause(&carriers),
        });
        reconciled = true;
        Ok(())
    })?;
    let found = super::told(changed);
    Ok(match found {
        Found::Loop(state) if reconciled => Some(*state),
        _ => None,
    })
}

/// [`reconcile`] for a command about to change the loop (`cancel`,
/// `reset`): a loop left behind is recorded as interrupted first (its
/// `notify` run, once), and the person told on stderr. Read-only commands
/// never call it: they only show the loop as interrupted.
pub(crate) fn reconcile_before_change(paths: &ProjectPaths) -> Result<(), CtlError> {
    if let Some(left) = reconcile(paths)? {
        crate::output::say_err!(
            "ralph-ctl: the loop (session {}) was left running: {}; recorded as interrupted",
            left.session_id,
            left.ended_because.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}

/// Why a loop left behind ended, naming its processes.
fn cause(carriers: &Carriers) -> String {
    let pid = |p: &Option<ProcessId>| p.map(|p| p.pid.to_string());
    match (pid(&carriers.driver), pid(&carriers.client)) {
        (Some(driver), Some(client)) => format!(
            "its launcher (ralph-ctl run, pid {driver}) and Claude Code (pid {client}) disappeared (killed, or closed with their terminal)"
        ),
        (Some(driver), None) => format!(
            "its launcher (ralph-ctl run, pid {driver}) disappeared (killed, or closed with its terminal)"
        ),
        (None, Some(client)) => format!("Claude Code (pid {client}) disappeared"),
        (None, None) => "its processes disappeared".to_string(),
    }
}

/// Why a person may not take up, replace or reset `state` from another
/// launcher: a driver that still lives holds it, running or waiting to
/// resume it (a paused loop under a live driver is that driver's: it
/// resumes it when the wait is over).
pub(crate) fn still_carried(state: &LoopState) -> Option<String> {
    if let (Some(pid), Status::Running) = (joined_alive(state), state.status) {
        return Some(format!(
            "the queue run of session {} is being drained by ralph-ctl run --queue (pid {pid}); \
             join it with the same --queue, or stop it first (Ctrl-C in its terminal)",
            state.session_id
        ));
    }
    let carriers = state.carriers.as_ref()?;
    if !state.status.is_live() || liveness::all_gone(carriers) {
        return None;
    }
    let driver = carriers.driver.map(|p| p.pid.to_string());
    let doing = match state.status {
        Status::Paused => "waiting to resume",
        Status::Waiting => "waiting for your answer (`ralph-ctl answer TEXT`)",
        _ => "running",
    };
    // The launcher gone and its client still there (held by something else
    // than the watchdog, which ends it): that client is what to stop.
    let driver_alive = carriers.driver.as_ref().is_some_and(liveness::is_alive);
    if let (false, Some(client)) = (
        driver_alive,
        carriers.client.as_ref().filter(|c| liveness::is_alive(c)),
    ) {
        return Some(format!(
            "the loop of session {} is {doing} in Claude Code (pid {}) at iteration {} of {}, whose launcher is gone; \
             end that process first (kill {})",
            state.session_id, client.pid, state.iteration, state.max_iterations, client.pid
        ));
    }
    Some(format!(
        "the loop of session {} is {doing} under ralph-ctl run{} at iteration {} of {}; stop that one first (Ctrl-C in its terminal)",
        state.session_id,
        driver
            .map(|pid| format!(" (pid {pid})"))
            .unwrap_or_default(),
        state.iteration,
        state.max_iterations
    ))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn a_loop_whose_launcher_is_gone_names_the_client_still_running() {
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let gone_id = liveness::of_pid(gone.id());
        gone.wait().unwrap();
        let mut client = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut state = LoopState::new("s".into(), 5, ralph_core::time::Timestamp::from_secs(0));
        state.iteration = 2;
        state.carriers = Some(Carriers {
            host: liveness::host_name(),
            driver: Some(gone_id),
            client: Some(liveness::of_pid(client.id())),
        });
        let said = still_carried(&state).expect("the client still carries it");
        assert!(
            said.contains(&format!("in Claude Code (pid {})", client.id()))
                && said.contains("whose launcher is gone"),
            "{said}"
        );
        let _ = client.kill();
        let _ = client.wait();
        assert_eq!(still_carried(&state), None, "nothing carries it now");
    }
}
