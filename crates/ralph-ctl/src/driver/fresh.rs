//! The fresh-context loop (`ralph-ctl run --fresh`, `contextMode: fresh`):
//! one headless client process, with a session of its own, per iteration.
//! The Stop hook stays out of it (the client runs without `RALPH_ACTIVE`);
//! once a process has ended its turn, the driver judges the iteration with
//! the very sequence the hook runs ([`engine::run_stop`]), so claims, gates,
//! the breaker and the log are the same in both modes. A blocked stop's text
//! (header, PROMPT.md, guardrails, a rejected claim's failures, the
//! breaker's notice) is the next process's prompt, and the loop is handed
//! over to that process's new session.

use std::path::{Path, PathBuf};

use ralph_core::config::ProcessEnv;
use ralph_core::engine::{self, Answer, RealWorld, Stop};
use ralph_core::log::{self, LogEntry, LogEvent};
use ralph_core::paths::ProjectPaths;
use ralph_core::state::{LoopState, Status, Usd};
use ralph_core::time;

use crate::commands::finish::{self, Ending};
use crate::driver::result::ClientResult;
use crate::error::CtlError;

/// What the judged iteration leads to.
#[derive(Debug)]
pub enum Judged {
    /// The loop goes on: the next process gets this text.
    Continue {
        /// Header, PROMPT.md, guardrails and notices.
        text: String,
    },
    /// The loop ended, or paused, or is no longer this driver's.
    Stopped,
}

/// The transcript the client wrote for `session`: Claude Code keeps each
/// session in `<config>/projects/<the folder, mangled>/<session>.jsonl`
/// (`<config>` is `$CLAUDE_CONFIG_DIR`, else `~/.claude`); the folder's name
/// is looked for rather than rebuilt, so a change of the mangling rule
/// cannot lose it.
pub fn transcript_of(session: &str) -> Option<PathBuf> {
    let config = std::env::var_os("CLAUDE_CONFIG_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".claude"))
        })?;
    transcript_in(&config, session)
}

/// [`transcript_of`] under the client's configuration folder `config`.
fn transcript_in(config: &Path, session: &str) -> Option<PathBuf> {
    let name = format!("{session}.jsonl");
    std::fs::read_dir(config.join("projects"))
        .ok()?
        .flatten()
        .map(|entry| entry.path().join(&name))
        .find(|path| path.is_file())
}

/// How a fresh iteration's process ended, for [`judge`].
#[derive(Debug, Default)]
pub struct IterationEnd<'a> {
    /// Its result object, when it ended its turn.
    pub result: Option<&'a ClientResult>,
    /// The worktree it ran in, when not the project.
    pub work_root: Option<&'a Path>,
    /// Why the driver ended it before it ended its turn.
    pub cut_off: Option<String>,
    /// The task to feed back instead of PROMPT.md (a formula step's).
    pub task: Option<String>,
    /// Checks a claim must pass besides `verify` (a formula step's gates).
    pub extra_verify: Vec<ralph_core::verify::VerifyCommand>,
    /// The project's `verify` does not gate this claim (a step's `verify: false`).
    pub skip_project_verify: bool,
    /// The formula's file, when it now differs from the loop's pin.
    pub pinned_changes: Vec<ralph_core::pin::Changed>,
}

/// Judges the iteration the client process of `session` just ended, as the
/// Stop hook would have at its stop: its final message is the result's (a
/// cut-off process has none; the engine counts it as an error).
/// Notes the engine has for the person go to `say`.
pub fn judge(
    paths: &ProjectPaths,
    session: &str,
    end: IterationEnd<'_>,
    settle: &mut dyn FnMut(&mut LoopState),
    say: &mut dyn FnMut(&str),
) -> Result<Judged, CtlError> {
    let stop = Stop {
        session_id: Some(session.to_string()),
        stop_hook_active: false,
        last_assistant_message: end.result.and_then(|r| r.result.clone()),
        transcript_path: transcript_of(session),
        work_root: end.work_root.map(Path::to_path_buf),
        cut_off: end.cut_off,
        task: end.task,
        extra_verify: end.extra_verify,
        skip_project_verify: end.skip_project_verify,
        permission_denials: end.result.and_then(|r| r.permission_denials.clone()),
        pinned_changes: end.pinned_changes,
        // Told once the process's cost is added (`charge`).
        driver_settles: true,
    };
    let mut answer = None;
    let report =
        engine::run_stop_settled(paths, &ProcessEnv, &stop, &RealWorld, settle, &mut |a| {
            answer = Some(a.clone());
            Ok(())
        })
        .map_err(|e| CtlError::Client(format!("the iteration could not be judged: {e}")))?;
    for note in &report.notes {
        say(note);
    }
    Ok(match answer {
        Some(Answer::Block { reason, .. }) => Judged::Continue { text: reason },
        _ => Judged::Stopped,
    })
}

/// Adds what the process of `session` cost (its own session's total: a new
/// session each iteration; nothing is known of a process cut off before
/// its result) and ends the loop `budget_exhausted` when that
/// spends `max_cost`. Returns the ended loop, if it ended.
pub fn charge(
    paths: &ProjectPaths,
    session: &str,
    result: Option<&ClientResult>,
    max_cost: Option<Usd>,
) -> Result<Option<LoopState>, CtlError> {
    let ending = finish::with_own_loop(paths, session, |lock, mut state| {
        let before = state.clone();
        // A new session each iteration: the run's own cost.
        super::supervisor::add_run_cost(&mut state, result, false);
        let now = time::now_rfc3339();
        let mut ended = None;
        if state.status == Status::Running && max_cost.is_some_and(|max| state.cost_usd >= max) {
            let why = format!(
                "the loop's budget is spent: cost {} of maxCostUsd {}",
                state.cost_usd,
                max_cost.unwrap_or_default()
            );
            state.end(Status::BudgetExhausted, why.clone(), &now);
            ended = Some(why);
        }
        if state != before {
            lock.write(&state)?;
        }
        if let Some(why) = ended {
            let _ = log::append(lock, &LogEntry::about(&state, LogEvent::End, &now, why));
        }
        Ok(Ending::Loop(Box::new(state)))
    })?;
    Ok(match ending {
        Ending::Loop(state) if state.status != Status::Running => Some(*state),
        _ => None,
    })
}

/// Hands the running loop over from the session `from` to the next
/// process's new session `to`. False when the loop is no longer `from`'s
/// or no longer running.
pub fn hand_over(paths: &ProjectPaths, from: &str, to: &str) -> Result<bool, CtlError> {
    let mut moved = false;
    finish::with_own_loop(paths, from, |lock, mut state| {
        if state.status == Status::Running {
            state.session_id = to.to_string();
            state.transcript = None;
            lock.write(&state)?;
            moved = true;
        }
        Ok(Ending::Loop(Box::new(state)))
    })?;
    Ok(moved)
}

/// Makes `baseline` the breaker's progress baseline of the running loop of
/// `session`: an iteration in a worktree of its own is measured against
/// that worktree's start, not the main checkout's.
pub fn rebaseline(
    paths: &ProjectPaths,
    session: &str,
    baseline: Option<ralph_core::progress::Baseline>,
) -> Result<(), CtlError> {
    finish::with_own_loop(paths, session, |lock, mut state| {
        if state.status == Status::Running && state.breaker.progress != baseline {
            state.breaker.progress = baseline;
            lock.write(&state)?;
        }
        Ok(Ending::Loop(Box::new(state)))
    })?;
    Ok(())
}

/// One line summing up a fresh iteration: its number, how the stop judged
/// it, what it cost and how long it took.
pub fn summary(state: &LoopState, iteration: u32, cost: Option<f64>, seconds: f64) -> String {
    let why = state
        .history
        .iter()
        .rev()
        .find(|r| r.iteration == iteration)
        .map(|r| r.why.clone())
        .unwrap_or_else(|| "not judged".into());
    let cost = cost.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    format!(
        "fresh iteration {iteration} of {}: {why}{cost}, {seconds:.1} s",
        state.max_iterations
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_summary_names_the_iteration_its_judgement_and_cost() {
        let state = LoopState::new("s".into(), 5, "2026-01-01T00:00:00Z".into());
        assert_eq!(
            summary(&state, 2, Some(0.0123), 2.04),
            "fresh iteration 2 of 5: not judged, $0.0123, 2.0 s"
        );
    }

    #[test]
    fn the_transcript_is_found_by_its_session_whatever_the_folder_is_called() {
        let dir = std::env::temp_dir().join(format!("ralph-fresh-{}", std::process::id()));
        let folder = dir.join("projects").join("-tmp-some-project");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::create_dir_all(dir.join("projects").join("-other")).unwrap();
        std::fs::write(folder.join("abc.jsonl"), "{}\n").unwrap();
        assert_eq!(transcript_in(&dir, "abc"), Some(folder.join("abc.jsonl")));
        assert_eq!(transcript_in(&dir, "abd"), None);
        assert_eq!(transcript_in(&dir.join("nowhere"), "abc"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
