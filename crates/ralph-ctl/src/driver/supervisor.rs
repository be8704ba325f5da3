//! What the driver does between two runs of the client, each one
//! transaction on the loop (`ralph_core::transaction`): read how a run
//! ended (its result object, its exit, the transcript's last API error)
//! into events, take a paused loop up again, and wait for the time to
//! resume, counting down on stderr.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use ralph_core::events::{Draft, Event};
use ralph_core::judge::config::Config;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{LoopState, PauseKind, PausedBecause, Status};
use ralph_core::observe::usage::{self, UsageReading};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::log;
use ralph_core::time;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::Usd;

use super::client::{ClientExit, Supervision};
use super::os_signals::{Signal, SignalSource};
use super::result::ClientResult;
use super::transcripts::{self, now_secs};
use crate::error::CtlError;

/// How one run of the client ended, as the driver saw it.
pub(crate) struct RunEnd<'a> {
    /// The exit and the signals.
    pub(crate) supervision: &'a Supervision,
    /// Its result object (headless).
    pub(crate) result: Option<&'a ClientResult>,
    /// It ran headless (the supervisor pauses and resumes only then).
    pub(crate) headless: bool,
    /// The client reports the session's cost, not the run's (2.1 and later).
    pub(crate) session_cost: bool,
    /// The loop's last stop before the run started.
    pub(crate) last_stop_before: Option<time::Timestamp>,
    /// What the client said this home lacks (a login), named with the
    /// fix: the loop ends `failed` on it rather than being paused for a
    /// retry or `interrupted`, which would meet it again.
    pub(crate) setup_missing: Option<String>,
}

/// Under the lock, once the client exited: adds the run's cost (the
/// client's own count; `session_cost` when it reports the session's total
/// rather than the run's); a loop still `running` is paused (headless only:
/// an API error, or a client that crashed without a result after at least
/// one stop since `last_stop_before`), ended `budget_exhausted` (its budget is spent)
/// or marked `interrupted` (anything else, as before); a paused loop over
/// its budget ends `budget_exhausted`.
pub(crate) fn record_client_end(
    paths: &ProjectPaths,
    config: &Config,
    session_id: &str,
    run: &RunEnd<'_>,
) -> Result<Found, CtlError> {
    let changed = transaction::change(paths, Whose::Session(session_id), |draft| {
        record_run(draft, paths, config, run);
        Ok::<_, CtlError>(())
    })?;
    Ok(super::told(changed))
}

/// The event charging what one client run cost, when the client said.
pub(crate) fn charged(result: Option<&ClientResult>, session_total: bool) -> Option<Event> {
    let cost = result
        .and_then(|r| r.total_cost_usd)
        .map(Usd::from_dollars)?;
    Some(Event::Charged {
        cost,
        session_total,
    })
}

/// [`record_client_end`]'s events.
fn record_run(draft: &mut Draft, paths: &ProjectPaths, config: &Config, run: &RunEnd<'_>) {
    let Some(before) = draft.state().cloned() else {
        return;
    };
    let now = draft.now();
    let result = run.result;
    let reported = charged(result, run.session_cost);
    let cost_reported = reported.is_some();
    if let Some(event) = reported {
        draft.apply(event);
    }
    let Some(state) = draft.state().cloned() else {
        return;
    };
    let supervision = run.supervision;
    let cause = supervision.describe(super::client::KILL_GRACE);
    let live = matches!(state.status, Status::Running | Status::Paused);
    // Answered while its client was ending (it stopped to ask): not left.
    let left = state.status == Status::Running && !state.answered();
    // A client that crashed without a result is resumed only when it had
    // been working: one that fails at its start would fail again.
    let worked = state.last_run_at != run.last_stop_before;
    // A client that said it has no login is not paused to be retried.
    let pause =
        (left && run.headless && supervision.signal.is_none() && run.setup_missing.is_none())
            .then(|| pause_of_run(&state, result, supervision.exit, now, paths, worked))
            .flatten();
    let spent = lifecycle::budget_spent(
        &state,
        config.supervision.max_cost,
        result.is_some_and(ClientResult::budget_spent),
    )
    .filter(|_| live);
    // Counted once: a stop moved the cursor past what it counted, and a
    // pause counts its own reading.
    if live
        && (spent.is_some() || pause.is_none())
        && let Some(mut reading) = transcripts::unstopped_usage(&state, paths)
    {
        if cost_reported {
            // The client's count, charged above, covers these tokens.
            reading.estimated = Usd::default();
        }
        draft.apply(Event::UsageCounted(reading));
    }
    if let Some(why) = spent {
        // The client given --max-budget-usd stops itself once its count
        // passes it (and exits 1 on 2.1): that is the budget, not a crash.
        let how = if result.is_some_and(ClientResult::budget_spent) {
            "the client stopped itself at the budget ralph gave it (--max-budget-usd, what \
                 was left of maxCostUsd); its last model call may pass it"
                .to_string()
        } else {
            format!("client: {cause}")
        };
        draft.apply(Event::Ended {
            status: Status::BudgetExhausted,
            why: format!("{why} ({how})"),
            at: None,
        });
    } else if let Some((because, mut reading)) = pause {
        if cost_reported {
            // The client's count, charged above, covers these tokens.
            reading.estimated = Usd::default();
        }
        draft.apply(Event::Paused {
            because,
            reading,
            cause,
        });
    } else if let (true, None, Some(missing)) = (left, supervision.signal, &run.setup_missing) {
        draft.apply(Event::Ended {
            status: Status::Failed,
            why: missing.clone(),
            at: None,
        });
    } else if left || supervision.signal.is_some() {
        let mut cause = with_hook_news(&paths.state_file(), &before, supervision, &cause);
        if left && result.is_some_and(|r| !r.is_error) && supervision.signal.is_none() {
            // The session stopped, so the hook let it stop, yet the loop
            // is still running: that stop was never recorded.
            cause.push_str(
                "; the session stopped but its last stop was not recorded (the Stop hook could \
                 not record it: its line on stderr says why, such as the state's lock held by \
                 another process)",
            );
        }
        draft.apply(Event::Interrupted { cause });
    }
    // Paused by the client's StopFailure, which said no reset time: the
    // stream said it (a no-op unless the loop is paused without one).
    if let Some(at) = result.and_then(|r| r.limit_resets_at) {
        draft.apply(Event::LimitResetLearnt {
            at: time::Timestamp::from_secs(at),
        });
    }
}

/// `cause` with what the hook left to say: why it could not go on at the
/// last stop (it let the session stop, which is why the client exited), or,
/// when a client that exited normally never reached the hook at all, that
/// the hook did not run.
fn with_hook_news(
    state_file: &Path,
    state: &LoopState,
    supervision: &Supervision,
    cause: &str,
) -> String {
    if let Some(problem) = log::last_problem(state_file, &state.session_id) {
        return format!(
            "{cause}; at its last stop the hook could not go on: {}",
            problem.reason
        );
    }
    let exited_normally =
        supervision.signal.is_none() && matches!(supervision.exit, ClientExit::Code(0));
    if state.status == Status::Running && state.history.is_empty() && exited_normally {
        return format!(
            "{cause}; no stop was ever recorded: the Stop hook did not run (is it registered in \
             .claude/settings.json? `ralph-ctl init` registers it)"
        );
    }
    cause.to_string()
}

/// Why a headless run that left the loop running ended, when it was an API
/// error (from the result's HTTP status, the transcript's last `api_error`
/// line for the reset time) or a client that exited without a result.
fn pause_of_run(
    state: &LoopState,
    result: Option<&ClientResult>,
    exit: ClientExit,
    now: time::Timestamp,
    paths: &ProjectPaths,
    worked: bool,
) -> Option<(PausedBecause, UsageReading)> {
    let reading = transcripts::of_loop(state, paths)
        .and_then(|path| usage::read_new(&path, state.transcript.as_ref(), now_secs()).ok())
        .unwrap_or_default();
    let api_error = reading.last_api_error.clone();
    let (kind, status, message) = match result {
        Some(r) if r.is_error => {
            let status = r
                .api_error_status
                .or_else(|| api_error.as_ref().and_then(|e| e.status));
            let kind = status.map_or(PauseKind::Unknown, PauseKind::from_http_status);
            let message = r
                .result
                .clone()
                .or_else(|| api_error.as_ref().and_then(|e| e.message.clone()))
                .unwrap_or_else(|| "the run ended on an error".into());
            (kind, status, message)
        }
        Some(_) => return None,
        // Killed mid-work is no failure at its start (maxAutoResumes bounds
        // a client killed again and again).
        None if crashed(exit) && (worked || matches!(exit, ClientExit::Signal(_))) => (
            PauseKind::ClientExit,
            None,
            format!("{} without a result", exit.describe()),
        ),
        None => return None,
    };
    let because = PausedBecause {
        kind,
        http_status: status,
        message: message.split_whitespace().collect::<Vec<_>>().join(" "),
        resume_at: api_error
            .as_ref()
            .and_then(|e| e.resets_at)
            .or_else(|| result.and_then(|r| r.limit_resets_at))
            .map(time::Timestamp::from_secs),
        retry_after_secs: api_error.as_ref().and_then(|e| e.retry_in_secs),
        resume_planned: None,
        at: now,
    };
    Some((because, reading))
}

/// True for a client that crashed: an exit code other than 0, or any
/// signal. It is asked only when the driver itself received no signal: the
/// person's stop (Ctrl-C, SIGTERM or SIGHUP to the launcher, `cancel`)
/// reaches the driver and interrupts the loop; a client killed from
/// outside it (the out-of-memory killer's SIGKILL) is a crash, resumed per
/// policy.
fn crashed(exit: ClientExit) -> bool {
    match exit {
        ClientExit::Code(code) => code != 0,
        ClientExit::Signal(_) => true,
    }
}

/// Under the lock: a paused loop the policy will not resume on its own is
/// ended `failed` when waiting cannot fix it, else left paused; returns the
/// plan.
pub(crate) fn plan(
    paths: &ProjectPaths,
    config: &Config,
    session_id: &str,
) -> Result<(lifecycle::ResumePlan, Option<LoopState>), CtlError> {
    let mut plan = lifecycle::ResumePlan::Stay {
        reason: "the loop's state is gone".into(),
    };
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state() else {
            return Ok::<_, CtlError>(());
        };
        if state.session_id != session_id || state.status != Status::Paused {
            plan = lifecycle::ResumePlan::Stay {
                reason: "the loop is not paused".into(),
            };
            return Ok(());
        }
        plan = lifecycle::plan_resume(config, state, now_secs());
        let policy = config.supervision.policy.as_str().to_string();
        draft.apply(match &plan {
            lifecycle::ResumePlan::Fail { reason } => Event::GaveUp {
                why: reason.clone(),
                policy,
            },
            lifecycle::ResumePlan::Stay { reason } => Event::Waiting {
                why: reason.clone(),
                resume_at: None,
                policy,
            },
            lifecycle::ResumePlan::ResumeAt { at, reason } => Event::Waiting {
                why: reason.clone(),
                resume_at: Some(time::Timestamp::from_secs(*at)),
                policy,
            },
        });
        Ok(())
    })?;
    let state = super::told(changed);
    Ok((plan, found_loop(state)))
}

/// The loop a change found, if any.
fn found_loop(found: Found) -> Option<LoopState> {
    match found {
        Found::Loop(state) => Some(*state),
        _ => None,
    }
}

/// Under the lock: takes the paused (or interrupted, failed, out of budget)
/// loop up again, where it was. `automatic` counts the resume against the
/// policy's limit; a person's resume starts the count again.
pub(crate) fn take_up(
    paths: &ProjectPaths,
    config: &Config,
    session_id: Option<&str>,
    automatic: bool,
) -> Result<LoopState, CtlError> {
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state() else {
            return Ok(());
        };
        let why = resumable(state, config, session_id, automatic)?;
        draft.apply(Event::Resumed {
            why,
            automatic,
            policy: config.supervision.policy.as_str().into(),
        });
        Ok::<_, CtlError>(())
    })?;
    found_loop(super::told(changed)).ok_or_else(|| {
        CtlError::Refused(format!(
            "there is no loop to resume in {}; start one with `ralph-ctl run`",
            paths.root.display()
        ))
    })
}

/// Why `state` may be taken up (what the log says), or why not.
fn resumable(
    state: &LoopState,
    config: &Config,
    session_id: Option<&str>,
    automatic: bool,
) -> Result<String, CtlError> {
    if let Some(id) = session_id
        && state.session_id != id
    {
        return Err(CtlError::Refused(format!(
            "the loop now belongs to session {} (another start replaced this one)",
            state.session_id
        )));
    }
    if !automatic && let Some(refusal) = super::carriers::still_carried(state) {
        return Err(CtlError::Refused(refusal));
    }
    if !state.status.is_resumable() {
        return Err(CtlError::Refused(format!(
            "the loop ended {} at iteration {} of {} ({}); it cannot be resumed: start a new one with --reset",
            state.status.as_str(),
            state.iteration,
            state.max_iterations,
            state
                .ended_because
                .as_deref()
                .unwrap_or("no reason recorded")
        )));
    }
    if let Some(max) = config.supervision.max_cost
        && state.cost_usd >= max
    {
        return Err(CtlError::Refused(format!(
            "the loop has cost {}, at or over maxCostUsd {max}; raise maxCostUsd (or RALPH_MAX_COST_USD) to go on",
            state.cost_usd
        )));
    }
    let was = state.status;
    Ok(if automatic {
        format!(
            "resumed by the supervisor ({} policy, resume {} of {})",
            config.supervision.policy.as_str(),
            state.auto_resumes.saturating_add(1),
            lifecycle::max_auto_resumes(config)
        )
    } else {
        format!(
            "resumed by `ralph-ctl run --resume` (the loop was {})",
            was.as_str()
        )
    })
}

/// Waits until `at` (seconds since the epoch), showing what it waits for:
/// a line that rewrites itself on a terminal, a plain line a minute
/// otherwise. Returns the signal that cut the wait short, if any.
pub(crate) fn wait_until(at: u64, what: &str, signals: &mut impl SignalSource) -> Option<Signal> {
    // What it waits for may quote the API's or the client's words.
    let what = ralph_core::text::printable(what);
    let mut err = std::io::stderr();
    let terminal = err.is_terminal();
    let mut last_line: Option<u64> = None;
    loop {
        if let Some(signal) = signals.take().first().copied() {
            if terminal {
                let _ = writeln!(err);
            }
            return Some(signal);
        }
        let now = now_secs();
        if now >= at {
            if terminal {
                let _ = writeln!(err);
            }
            return None;
        }
        let left = at - now;
        if terminal {
            let _ = write!(
                err,
                "\r\x1b[2Kralph: {what}; resuming in {}:{:02}",
                left / 60,
                left % 60
            );
            let _ = err.flush();
        } else if last_line.is_none_or(|t| t >= left + 60) {
            let _ = writeln!(
                err,
                "ralph: {what}; resuming in {left} s (at {})",
                time::rfc3339_of_secs(at)
            );
            last_line = Some(left);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
