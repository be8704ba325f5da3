//! What the driver does between two runs of the client, each under the
//! state lock and logged: read how a run ended (its result object, its exit,
//! the transcript's last API error) into the state, take a paused loop up
//! again, and wait for the time to resume, counting down on stderr.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ralph_core::config::Config;
use ralph_core::lifecycle;
use ralph_core::log::{self, LogEntry, LogEvent};
use ralph_core::paths::ProjectPaths;
use ralph_core::state::{LoopState, PauseKind, PausedBecause, Status, Usd};
use ralph_core::store::{StateLock, StateStore};
use ralph_core::time;
use ralph_core::usage::{self, UsageReading};

use super::client::{ClientExit, Supervision};
use super::result::ClientResult;
use super::signals::{Signal, SignalSource};
use crate::commands::finish::{self, Ending};
use crate::error::CtlError;

/// Seconds since the epoch.
pub fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Appends to the audit log, or says on stderr why it could not.
pub fn log_entry(lock: &StateLock<'_>, entry: &LogEntry) {
    if let Err(e) = log::append(lock, entry) {
        let _ = writeln!(
            std::io::stderr(),
            "ralph: warning: cannot append to the audit log: {e}"
        );
    }
}

/// Where the client keeps the session's transcript when no stop has named
/// it yet: `$CLAUDE_CONFIG_DIR` (or `~/.claude`) `/projects/<the project
/// folder with every character but letters and digits as '-'>/<session>.jsonl`.
pub fn default_transcript_path(root: &Path, session_id: &str) -> Option<PathBuf> {
    let config_dir = std::env::var_os("CLAUDE_CONFIG_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".claude")))?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mangled: String = root
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Some(
        config_dir
            .join("projects")
            .join(mangled)
            .join(format!("{session_id}.jsonl")),
    )
}

/// How one run of the client ended, as the driver saw it.
pub struct RunEnd<'a> {
    /// The exit and the signals.
    pub supervision: &'a Supervision,
    /// Its result object (headless).
    pub result: Option<&'a ClientResult>,
    /// It ran headless (the supervisor pauses and resumes only then).
    pub headless: bool,
    /// The client reports the session's cost, not the run's (2.1 and later).
    pub session_cost: bool,
    /// The loop's last stop before the run started.
    pub last_stop_before: Option<&'a str>,
}

/// The loop's cost, and its budget when it has one.
fn describe_cost(state: &LoopState, config: &Config) -> String {
    match config.supervision.max_cost {
        Some(max) => format!("{} of maxCostUsd {max}", state.cost_usd),
        None => format!("{}", state.cost_usd),
    }
}

/// Under the lock, once the client exited: adds the run's cost (the
/// client's own count; `session_cost` when it reports the session's total
/// rather than the run's); a loop still `running` is paused (headless only:
/// an API error, or a client that crashed without a result after at least
/// one stop since `last_stop_before`), ended `budget_exhausted` (its budget is spent)
/// or marked `interrupted` (anything else, as before); a paused loop over
/// its budget ends `budget_exhausted`.
pub fn record_client_end(
    paths: &ProjectPaths,
    config: &Config,
    session_id: &str,
    run: &RunEnd<'_>,
) -> Result<Ending, CtlError> {
    finish::with_own_loop(paths, session_id, |lock, state| {
        record_run(lock, state, paths, config, run)
    })
}

/// Adds what one client run cost to the loop's: with `session_cost` the
/// client reported its session's total so far (2.1 resuming the loop's
/// session), else the run's own (2.0, or a fresh session per iteration).
pub fn add_run_cost(state: &mut LoopState, result: Option<&ClientResult>, session_cost: bool) {
    if let Some(cost) = result.and_then(|r| r.total_cost_usd).map(Usd::from_dollars) {
        state.cost_usd = if session_cost {
            state.cost_usd.max(cost)
        } else {
            Usd(state.cost_usd.0.saturating_add(cost.0))
        };
    }
}

/// [`record_client_end`] on the loop, under the lock.
fn record_run(
    lock: &StateLock<'_>,
    mut state: LoopState,
    paths: &ProjectPaths,
    config: &Config,
    run: &RunEnd<'_>,
) -> Result<Ending, CtlError> {
    let before = state.clone();
    let now = time::now_rfc3339();
    let result = run.result;
    add_run_cost(&mut state, result, run.session_cost);
    let over_budget = config
        .supervision
        .max_cost
        .is_some_and(|max| state.cost_usd >= max);
    let supervision = run.supervision;
    let cause = supervision.describe(super::client::KILL_GRACE);
    let live = matches!(state.status, Status::Running | Status::Paused);
    // A client that crashed without a result is resumed only when it had
    // been working: one that fails at its start would fail again.
    let worked = state.last_run_at.as_deref() != run.last_stop_before;
    let pause = (state.status == Status::Running && run.headless && supervision.signal.is_none())
        .then(|| pause_of_run(&state, result, supervision.exit, &now, paths, worked))
        .flatten();
    let spent = live && (over_budget || result.is_some_and(ClientResult::budget_spent));
    // Counted once: a stop moved the cursor past what it counted, and a
    // pause counts its own reading.
    if live && (spent || pause.is_none()) {
        if let Some(reading) = unstopped_usage(&state, paths) {
            lifecycle::take_usage(&mut state, &reading, &now);
        }
    }
    let event = if spent {
        let why = format!(
            "the loop's budget is spent: cost {} (client: {cause})",
            describe_cost(&state, config)
        );
        state.end(Status::BudgetExhausted, why.clone(), &now);
        Some((LogEvent::End, why))
    } else if let Some((because, reading)) = pause {
        let why = lifecycle::pause_for_api_failure(&mut state, because, &reading, &now);
        Some((LogEvent::Pause, format!("{why} ({cause})")))
    } else if (state.status == Status::Running || supervision.signal.is_some())
        && lifecycle::interrupt(
            &mut state,
            &with_hook_news(lock.path(), &before, supervision, &cause),
            &now,
        )
    {
        Some((
            LogEvent::End,
            state.ended_because.clone().unwrap_or_default(),
        ))
    } else {
        None
    };
    if state != before {
        lock.write(&state)?;
    }
    if let Some((event, why)) = event {
        log_entry(lock, &LogEntry::about(&state, event, &now, why));
    }
    Ok(Ending::Loop(Box::new(state)))
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

/// The transcript of the loop's session: where its last stop read when that
/// was this session's (a fresh loop's cursor may be an earlier
/// iteration's), else where the client keeps it.
fn transcript_of_loop(state: &LoopState, paths: &ProjectPaths) -> Option<PathBuf> {
    let session = std::ffi::OsStr::new(&state.session_id);
    state
        .transcript
        .as_ref()
        .map(|c| c.path.clone())
        .filter(|p| p.file_stem() == Some(session))
        .or_else(|| super::fresh::transcript_of(&state.session_id))
        .or_else(|| default_transcript_path(&paths.root, &state.session_id))
}

/// What the loop's transcript gained since its last stop read it, for a run
/// that ended without a stop after its last requests (the client's own
/// budget cap, a crash, a signal): those requests and tokens were spent too.
pub fn unstopped_usage(state: &LoopState, paths: &ProjectPaths) -> Option<UsageReading> {
    let path = transcript_of_loop(state, paths)?;
    let since = time::epoch_secs(&state.started_at).unwrap_or(0);
    usage::read_new_since(&path, state.transcript.as_ref(), now_secs(), since).ok()
}

/// Why a headless run that left the loop running ended, when it was an API
/// error (from the result's HTTP status, the transcript's last `api_error`
/// line for the reset time) or a client that exited without a result.
fn pause_of_run(
    state: &LoopState,
    result: Option<&ClientResult>,
    exit: ClientExit,
    now: &str,
    paths: &ProjectPaths,
    worked: bool,
) -> Option<(PausedBecause, UsageReading)> {
    let reading = transcript_of_loop(state, paths)
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
            .and_then(|e| e.resets_at)
            .map(time::rfc3339_of_secs),
        at: now.to_string(),
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
pub fn plan(
    paths: &ProjectPaths,
    config: &Config,
    session_id: &str,
) -> Result<(lifecycle::ResumePlan, Option<LoopState>), CtlError> {
    let store = StateStore::new(paths);
    let lock = store.lock(false)?;
    let Some(mut state) = lock.read()? else {
        return Ok((
            lifecycle::ResumePlan::Stay {
                reason: "the loop's state is gone".into(),
            },
            None,
        ));
    };
    if state.session_id != session_id || state.status != Status::Paused {
        return Ok((
            lifecycle::ResumePlan::Stay {
                reason: "the loop is not paused".into(),
            },
            Some(state),
        ));
    }
    let plan = lifecycle::plan_resume(config, &state, now_secs());
    let now = time::now_rfc3339();
    match &plan {
        lifecycle::ResumePlan::Fail { reason } => {
            state.end(Status::Failed, reason.clone(), &now);
            lock.write(&state)?;
            let mut entry = LogEntry::about(&state, LogEvent::End, &now, reason.clone());
            entry.policy = Some(config.supervision.policy.as_str().into());
            log_entry(&lock, &entry);
        }
        lifecycle::ResumePlan::Stay { reason } => {
            let mut entry = LogEntry::about(&state, LogEvent::Pause, &now, reason.clone());
            entry.policy = Some(config.supervision.policy.as_str().into());
            log_entry(&lock, &entry);
        }
        lifecycle::ResumePlan::ResumeAt { at, reason } => {
            let mut entry = LogEntry::about(&state, LogEvent::Wait, &now, reason.clone());
            entry.policy = Some(config.supervision.policy.as_str().into());
            entry.resume_at = Some(time::rfc3339_of_secs(*at));
            log_entry(&lock, &entry);
        }
    }
    Ok((plan, Some(state)))
}

/// Under the lock: takes the paused (or interrupted, failed, out of budget)
/// loop up again, where it was. `automatic` counts the resume against the
/// policy's limit; a person's resume starts the count again.
pub fn take_up(
    paths: &ProjectPaths,
    config: &Config,
    session_id: Option<&str>,
    automatic: bool,
) -> Result<LoopState, CtlError> {
    let store = StateStore::new(paths);
    let lock = store.lock(false)?;
    let Some(mut state) = lock.read()? else {
        return Err(CtlError::Refused(format!(
            "there is no loop to resume in {}; start one with `ralph-ctl run`",
            paths.root.display()
        )));
    };
    if let Some(id) = session_id {
        if state.session_id != id {
            return Err(CtlError::Refused(format!(
                "the loop now belongs to session {} (another start replaced this one)",
                state.session_id
            )));
        }
    }
    if !automatic {
        if let Some(refusal) = super::liveness::still_carried(&state) {
            return Err(CtlError::Refused(refusal));
        }
    }
    if !state.status.is_resumable() {
        return Err(CtlError::Refused(format!(
            "the loop ended {} at iteration {} of {} ({}); it cannot be resumed: start a new one with --reset",
            state.status.as_str(),
            state.iteration,
            state.max_iterations,
            state.ended_because.as_deref().unwrap_or("no reason recorded")
        )));
    }
    if let Some(max) = config.supervision.max_cost {
        if state.cost_usd >= max {
            return Err(CtlError::Refused(format!(
                "the loop has cost {}, at or over maxCostUsd {max}; raise maxCostUsd (or RALPH_MAX_COST_USD) to go on",
                state.cost_usd
            )));
        }
    }
    let was = state.status;
    let now = time::now_rfc3339();
    state.resume();
    let reason = if automatic {
        state.auto_resumes = state.auto_resumes.saturating_add(1);
        format!(
            "resumed by the supervisor ({} policy, resume {} of {})",
            config.supervision.policy.as_str(),
            state.auto_resumes,
            lifecycle::max_auto_resumes(config)
        )
    } else {
        state.auto_resumes = 0;
        format!(
            "resumed by `ralph-ctl run --resume` (the loop was {})",
            was.as_str()
        )
    };
    lock.write(&state)?;
    let mut entry = LogEntry::about(&state, LogEvent::Resume, &now, reason);
    entry.policy = Some(config.supervision.policy.as_str().into());
    log_entry(&lock, &entry);
    Ok(state)
}

/// Waits until `at` (seconds since the epoch), showing what it waits for:
/// a line that rewrites itself on a terminal, a plain line a minute
/// otherwise. Returns the signal that cut the wait short, if any.
pub fn wait_until(at: u64, what: &str, signals: &mut impl SignalSource) -> Option<Signal> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transcript_path_follows_the_clients_layout() {
        let path = default_transcript_path(Path::new("/nonexistent/my proj.x"), "s-1");
        if let Some(path) = path {
            let text = path.to_string_lossy().into_owned();
            assert!(
                text.ends_with("projects/-nonexistent-my-proj-x/s-1.jsonl"),
                "{text}"
            );
        }
    }
}
