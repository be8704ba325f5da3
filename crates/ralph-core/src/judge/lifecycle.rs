//! The rules of a loop's life outside its stops, beside [`crate::judge::decision`]
//! so every driver applies the same ones: when a new loop may start (not
//! over a running one, not over an open breaker until its cooldown), how a
//! loop whose client went away is marked `interrupted`, and which exit code
//! each ending has. Pure: the caller holds the lock and passes the time.

use std::path::Path;
use std::time::SystemTime;

use crate::exit_codes;
use crate::judge::breaker::BreakerState;
use crate::judge::config::{Config, ResumePolicy};
use crate::judge::state::{
    IterationRecord, LoopState, PausedBecause, Status, StopDecision, excerpt,
};
use crate::observe::usage::UsageReading;
use crate::time::Timestamp;
use crate::units::Usd;

/// Why a new loop may not start over the current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartRefusal {
    /// A loop is running.
    Running {
        /// Its session.
        session_id: String,
        /// Where it is.
        iteration: u32,
        /// Its cap.
        max_iterations: u32,
        /// Its last stop, if any.
        last_run_at: Option<Timestamp>,
    },
    /// The last loop ended with the circuit breaker open, and no cooldown has passed.
    BreakerOpen {
        /// The iteration it stalled at.
        iteration: u32,
        /// Why the breaker opened.
        reason: String,
        /// The configured cooldown, when there is one.
        cooldown_minutes: Option<u32>,
    },
}

impl StartRefusal {
    /// The refusal for a person, naming the project and what to do.
    pub fn describe(&self, root: &Path) -> String {
        match self {
            StartRefusal::Running {
                session_id,
                iteration,
                max_iterations,
                last_run_at,
            } => format!(
                "a loop is already running in {} (session {session_id}, iteration {iteration} of {max_iterations}, \
                 last stop {}); let it finish, or end it with `ralph-ctl cancel`, or start with --force",
                root.display(),
                last_run_at.map_or("none yet".to_string(), |t| t.to_string())
            ),
            StartRefusal::BreakerOpen {
                iteration,
                reason,
                cooldown_minutes,
            } => {
                let cooldown = match cooldown_minutes {
                    Some(m) => {
                        format!(
                            ", or wait until {m} minute(s) after it opened (CB_COOLDOWN_MINUTES)"
                        )
                    }
                    None => String::new(),
                };
                format!(
                    "the circuit breaker is open in {}: the last loop stalled at iteration {iteration} ({reason}); \
                     fix what blocked it, then run `ralph-ctl reset` (or the launcher with --reset){cooldown}",
                    root.display()
                )
            }
        }
    }
}

/// Whether a new loop may start over `current` at `now`: `None` when it
/// may, else why not (a person may still force it).
pub fn start_refusal(
    current: Option<&LoopState>,
    config: &Config,
    now: SystemTime,
) -> Option<StartRefusal> {
    let current = current?;
    match current.status {
        Status::Running => Some(StartRefusal::Running {
            session_id: current.session_id.clone(),
            iteration: current.iteration,
            max_iterations: current.max_iterations,
            last_run_at: current.last_run_at,
        }),
        Status::CircuitOpen if !cooled_down(current, config, now) => {
            Some(StartRefusal::BreakerOpen {
                iteration: current.iteration,
                reason: current
                    .breaker
                    .last_transition
                    .as_ref()
                    .map(|t| t.reason.clone())
                    .or(current.ended_because.clone())
                    .unwrap_or_default(),
                cooldown_minutes: config.cooldown_minutes,
            })
        }
        _ => None,
    }
}

/// True when the breaker opened longer ago than the configured cooldown.
pub fn cooled_down(state: &LoopState, config: &Config, now: SystemTime) -> bool {
    let Some(minutes) = config.cooldown_minutes else {
        return false;
    };
    let opened = state
        .breaker
        .last_transition
        .as_ref()
        .map(|t| t.at)
        .or(state.ended_at)
        .map(|t| std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.secs()));
    match opened.and_then(|at| now.duration_since(at).ok()) {
        Some(elapsed) => elapsed.as_secs() >= u64::from(minutes) * 60,
        None => false,
    }
}

/// What the supervisor does with a paused loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumePlan {
    /// Resume at `at` (seconds since the epoch).
    ResumeAt {
        /// Not before then.
        at: u64,
        /// Why then, in words.
        reason: String,
    },
    /// Leave it paused: a person decides (`ralph-ctl run --resume`).
    Stay {
        /// Why, in words.
        reason: String,
    },
    /// End it `failed`: waiting cannot fix this.
    Fail {
        /// What the API said and what to fix.
        reason: String,
    },
}

/// The longest backoff between two automatic resumes (unless
/// `resumeBackoffSeconds` itself is longer), by policy.
pub const MAX_BACKOFF_SECS: u64 = 1_800;
/// The same for the aggressive policy.
pub const MAX_AGGRESSIVE_BACKOFF_SECS: u64 = 300;

/// The wait before the `resumes`-th automatic resume (0-based): the
/// configured backoff, doubling each time, capped; a quarter of it,
/// capped lower, for the aggressive policy.
pub fn backoff_secs(config: &Config, resumes: u32) -> u64 {
    let base = u64::from(config.supervision.backoff_seconds);
    let (first, cap) = match config.supervision.policy {
        ResumePolicy::Aggressive => ((base / 4).max(1), MAX_AGGRESSIVE_BACKOFF_SECS),
        _ => (base, MAX_BACKOFF_SECS),
    };
    first
        .saturating_mul(1u64 << resumes.min(32))
        .min(cap.max(first))
}

/// The automatic resumes the policy allows in a row.
pub fn max_auto_resumes(config: &Config) -> u32 {
    let n = config.supervision.max_auto_resumes;
    match config.supervision.policy {
        ResumePolicy::Aggressive => n.saturating_mul(4),
        ResumePolicy::Conservative => n,
        ResumePolicy::Manual => 0,
    }
}

/// When (and whether) the supervisor resumes the paused loop `state` at
/// `now` (seconds since the epoch): never before the API's reset time or
/// the end of the calls-per-hour window; after a backoff otherwise; not at
/// all under the manual policy, past the resumes allowed in a row, with the
/// breaker not closed (conservative), or for an error waiting cannot fix.
pub fn plan_resume(config: &Config, state: &LoopState, now: u64) -> ResumePlan {
    let Some(paused) = &state.paused_because else {
        return ResumePlan::Stay {
            reason: "the loop is paused with no reason recorded".into(),
        };
    };
    if !paused.kind.is_transient() {
        return ResumePlan::Fail {
            reason: format!(
                "the API refused the loop ({}{}: {}); {}",
                paused.kind.as_str(),
                paused
                    .http_status
                    .map(|s| format!(", HTTP {s}"))
                    .unwrap_or_default(),
                paused.message,
                paused.kind.fix()
            ),
        };
    }
    let policy = config.supervision.policy;
    if policy == ResumePolicy::Manual {
        return ResumePlan::Stay {
            reason: "resumePolicy is manual".into(),
        };
    }
    let allowed = max_auto_resumes(config);
    if state.auto_resumes >= allowed {
        return ResumePlan::Stay {
            reason: format!(
                "{} automatic resume(s) in a row without a finished iteration, the most the {} policy makes (maxAutoResumes)",
                state.auto_resumes,
                policy.as_str()
            ),
        };
    }
    if policy == ResumePolicy::Conservative && state.breaker.state != BreakerState::Closed {
        return ResumePlan::Stay {
            reason: format!(
                "the circuit breaker is {}; the conservative policy resumes only a loop that is not stalling",
                state.breaker.state.as_str()
            ),
        };
    }
    let reset = paused.resume_at.map(Timestamp::secs);
    let longest = u64::from(config.supervision.max_resume_wait_hours) * 3_600;
    match reset {
        // A pause of the person's pacing (pauseAtUtilization) waits for its
        // window whatever its length: that is what it was asked for.
        Some(at)
            if at > now.saturating_add(longest)
                && paused.kind != crate::judge::state::PauseKind::Utilization =>
        {
            ResumePlan::Stay {
                reason: format!(
                    "{} until {}, more than {} h away (maxResumeWaitHours): `ralph-ctl run --resume` \
                 once it has reset",
                    paused.kind.as_str(),
                    paused.resume_at.map(|t| t.to_string()).unwrap_or_default(),
                    config.supervision.max_resume_wait_hours
                ),
            }
        }
        Some(at) => ResumePlan::ResumeAt {
            at: at.max(now),
            reason: format!(
                "{} until {}",
                paused.kind.as_str(),
                paused.resume_at.map(|t| t.to_string()).unwrap_or_default()
            ),
        },
        None => {
            let wait = backoff_secs(config, state.auto_resumes);
            // Planned once (the supervisor's `wait`): the same time whenever asked.
            let planned = paused.resume_planned.map(Timestamp::secs);
            // Never sooner than the API asked (its retry-after).
            let asked = paused
                .retry_after_secs
                .map(|secs| paused.at.secs().saturating_add(secs));
            let at = planned.unwrap_or_else(|| asked.unwrap_or(0).max(now + wait));
            let retry_after = match paused.retry_after_secs {
                Some(secs) if asked.is_some_and(|asked| asked >= now + wait) => {
                    format!(", the {secs} s the API asked for (retry-after)")
                }
                _ => String::new(),
            };
            ResumePlan::ResumeAt {
                at: at.max(now),
                reason: format!(
                    "{}: backoff of {wait} s{retry_after} before resume {} of {allowed} ({})",
                    paused.kind.as_str(),
                    state.auto_resumes + 1,
                    policy.as_str()
                ),
            }
        }
    }
}

/// Why the loop's budget is spent, when it is: its cost has reached `max`
/// (`maxCostUsd`), or the client said its own budget cap stopped it
/// (`client_says`). The one rule every driver applies once it has charged
/// a run.
pub fn budget_spent(state: &LoopState, max: Option<Usd>, client_says: bool) -> Option<String> {
    let reached = max.is_some_and(|max| state.cost_usd >= max);
    if !reached && !client_says {
        return None;
    }
    let cost = match max {
        Some(max) => format!("{} of maxCostUsd {max}", state.cost_usd),
        None => state.cost_usd.to_string(),
    };
    Some(format!("the loop's budget is spent: cost {cost}"))
}

/// Adds the requests and tokens the transcript gained past the loop's
/// cursor (`reading`) to `state`, and moves the cursor: what a stop counts,
/// and what a run that ended without one (an API failure, the client's own
/// budget cap, a crash) must count too, once.
pub fn take_usage(state: &mut LoopState, reading: &UsageReading, now: Timestamp) {
    state.usage.add(&reading.tokens);
    state.uncharged_usd = state.uncharged_usd.plus(reading.estimated);
    let now_secs = now.secs();
    state.record_calls(&reading.calls, now_secs);
    if reading.cursor.is_some() {
        state.transcript = reading.cursor.clone();
    }
}

/// Pauses `state` for an API failure that ended a turn with no Stop hook
/// (Claude Code 2.1's `StopFailure`, or what a headless run's result says):
/// the turn's requests and tokens are counted, a history record says what
/// failed, and the same iteration is worked on again when the loop
/// resumes. Returns the reason, for the log.
pub fn pause_for_api_failure(
    state: &mut LoopState,
    because: PausedBecause,
    reading: &UsageReading,
    now: Timestamp,
) -> String {
    take_usage(state, reading, now);
    let why = format!(
        "the API failed ({}{}): {}; paused",
        because.kind.as_str(),
        because
            .http_status
            .map(|s| format!(", HTTP {s}"))
            .unwrap_or_default(),
        because.message
    );
    state.last_run_at = Some(now);
    state.push_history(IterationRecord {
        excerpt: excerpt(&because.message),
        error: Some(because.message.clone()),
        calls: reading.calls.len().try_into().unwrap_or(u32::MAX),
        usage: reading.tokens,
        ..IterationRecord::new(state.iteration, now, StopDecision::Allow, why.clone())
    });
    state.pause(because);
    why
}

/// Marks a loop that is still `running` (or paused) as `interrupted`, because of
/// `cause` (`"Claude Code exited with code 1"`, `"SIGTERM"`), with a history
/// record; returns false (and changes nothing) when it had already ended.
pub fn interrupt(state: &mut LoopState, cause: &str, now: Timestamp) -> bool {
    if !matches!(state.status, Status::Running | Status::Paused) {
        return false;
    }
    let doing = match state.status {
        Status::Paused => "paused, waiting to resume,",
        _ => "running",
    };
    // A queue run's own loop does not iterate: its items' iterations count.
    let because = match state.queue {
        Some(_) => format!(
            "{cause}, {} of the run's {} iterations spent",
            state.iteration, state.max_iterations
        ),
        None => format!(
            "{cause} while the loop was {doing} at iteration {} of {}",
            state.iteration, state.max_iterations
        ),
    };
    state.push_history(IterationRecord::new(
        state.iteration,
        now,
        StopDecision::Allow,
        because.clone(),
    ));
    state.end(Status::Interrupted, because, now);
    true
}

/// Whether a `complete` status is ralph's own: only an accepted claim of
/// the loop's last iteration completes a loop, and it is recorded with it.
/// A `complete` without one was written by something else (an agent's
/// command editing the state), and must not be reported as done.
pub fn completion_on_record(state: &LoopState) -> bool {
    state.status != Status::Complete
        // A queue run completes when its queue is drained: every item settled.
        || state.queue.as_ref().is_some_and(|q| {
            !q.items.is_empty() && q.items.values().all(|item| item.status.is_settled())
        })
        || state
            .last_claim
            .as_ref()
            .is_some_and(|claim| claim.accepted && claim.iteration == state.iteration)
}

/// What the person does next with a loop in this state, in a few words;
/// `None` while it runs. Closes [`outcome_line`] and is `status`'s `next:`.
/// Every command it names works as printed, in the mode the loop ran in
/// (a queue run as a queue, a `ralph-ctl run` loop with its flags).
pub fn next_step(state: &LoopState) -> Option<String> {
    if !completion_on_record(state) {
        return Some(format!(
            "review the changes yourself (`ralph-ctl status` lists the stops); to go on, start a new loop ({})",
            again(state, &[])
        ));
    }
    if let Some(queue) = &state.queue {
        return queue_next_step(state, queue);
    }
    Some(match state.status {
        Status::Running => return None,
        Status::Complete => "review the changes and commit what you keep".into(),
        Status::MaxIterations => format!(
            "to go on, start a new loop ({}, with --max-iterations N for a higher cap)",
            again(state, &[])
        ),
        Status::CircuitOpen => match state.run_mode {
            // The plugin's /ralph-loop: no launcher, its task in the session.
            None if started_by_ralph_loop(state) => "fix what blocked it (or give another task), \
                 then run `ralph-ctl reset` and `/ralph-loop` again in your Claude Code session"
                .into(),
            None => "fix what blocked it (or change PROMPT.md), then run the launcher with --reset".into(),
            Some(_) => format!(
                "fix what blocked it (or change PROMPT.md), then start again with {}",
                again(state, &["--reset"])
            ),
        },
        Status::Interrupted => format!(
            "`ralph-ctl run --resume` goes on from iteration {}",
            state.iteration
        ),
        Status::Paused => {
            let until = state
                .paused_because
                .as_ref()
                .and_then(|p| p.resume_at)
                .map(|t| format!(" (not before {t})"))
                .unwrap_or_default();
            format!("`ralph-ctl run --resume` goes on{until}")
        }
        Status::Failed => format!("{}`ralph-ctl run --resume`", fix_then(state)),
        Status::BudgetExhausted => "raise maxCostUsd, then `ralph-ctl run --resume`".into(),
        Status::Waiting => {
            "answer with `ralph-ctl answer TEXT` (then `ralph-ctl run --resume` unless the run waits for it)"
                .into()
        }
        Status::Blocked => format!(
            "give the agent what it asks for (in PROMPT.md or the project), then `ralph-ctl run --resume` goes on from iteration {}",
            state.iteration
        ),
        Status::Cancelled => "start a new loop when you want one (the launcher, or /ralph-loop)".into(),
        Status::GateFailed => "fix what the gate checks (its output is in `ralph-ctl status` and the log), then run the formula again".into(),
        Status::ErrorBudgetExhausted | Status::GateBudgetExhausted => format!(
            "look at the items that failed (`ralph-ctl status` lists them), fix what they need, then start a new loop ({})",
            again(state, &[])
        ),
    })
}

/// A loop of its own task that no `ralph-ctl run` ran and no queue
/// took: the plugin's `/ralph-loop`'s.
fn started_by_ralph_loop(state: &LoopState) -> bool {
    state.run_mode.is_none() && state.task.is_some() && state.queue_item.is_none()
}

/// The command that starts a loop like this one again: `ralph-ctl run`
/// with the flags it ran with (and `extra`), or the launcher for a loop
/// `ralph-ctl run` did not start (`ralph-ctl start`, the plugin).
fn again(state: &LoopState, extra: &[&str]) -> String {
    // A queue item's loop is started by its run, never by hand.
    if state.queue_item.is_some() {
        return "the queue run again: it takes the item up with the rest".into();
    }
    let Some(mode) = &state.run_mode else {
        if started_by_ralph_loop(state) {
            return "`/ralph-loop` again in your Claude Code session".into();
        }
        return "the launcher again".into();
    };
    let mut words = vec!["ralph-ctl run".to_string()];
    words.extend(extra.iter().map(std::string::ToString::to_string));
    if let Some(formula) = &state.formula {
        words.push(format!(
            "--formula {}",
            crate::text::shell_word(&formula.name)
        ));
    } else if mode.worktree {
        words.push("--worktree".into());
    } else if state.fresh_context {
        words.push("--fresh".into());
    }
    if mode.headless && !state.fresh_context {
        words.push("--headless".into());
    }
    words.extend(mode.sandbox_flag().map(String::from));
    format!("`{}`", words.join(" "))
}

/// What to fix before a failed loop goes on ("…, then "), when the
/// failure names it; else nothing.
fn fix_then(state: &LoopState) -> String {
    state
        .paused_because
        .as_ref()
        .map(|p| format!("{}, then ", p.kind.fix()))
        .unwrap_or_default()
}

/// What comes after a queue run: where its items landed and what is left
/// to look at, or the command that takes up the items left.
fn queue_next_step(state: &LoopState, queue: &crate::judge::state::QueueRun) -> Option<String> {
    use crate::judge::state::ItemState;
    let source = crate::text::shell_word(&queue.source);
    let take_up = |before: &str| {
        let mut words = vec![format!("ralph-ctl run --queue {source}")];
        if let Some(workers) = state.run_mode.as_ref().and_then(|m| m.workers)
            && workers > 1
        {
            words.push(format!("--workers {workers}"));
        }
        if queue.merge == "none" {
            words.push("--merge none".into());
        }
        words.extend(
            state
                .run_mode
                .as_ref()
                .and_then(super::state::RunMode::sandbox_flag)
                .map(String::from),
        );
        format!("{before}`{}` takes up the items left", words.join(" "))
    };
    let plural = |n: usize, one: &str, many: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {many}")
        }
    };
    Some(match state.status {
        Status::Running => return None,
        Status::Complete => {
            let done = queue.count(ItemState::Done);
            let mut parts = Vec::new();
            if queue.merge == "none" {
                parts.push(format!(
                    "{} on {} branch{} (ralph/…), not merged: review and merge {}",
                    plural(done, "item finished", "items finished"),
                    if done == 1 { "its" } else { "their" },
                    if done == 1 { "" } else { "es" },
                    if done == 1 { "it" } else { "them" },
                ));
            } else if done == 0 {
                parts.push(format!("nothing landed on {}", queue.base));
            } else {
                let head = queue
                    .base_head
                    .as_deref()
                    .map(|h| format!(", now at {}", h.chars().take(12).collect::<String>()))
                    .unwrap_or_default();
                parts.push(format!(
                    "{} on {}{head}: already committed there",
                    plural(done, "item landed", "items landed"),
                    queue.base
                ));
            }
            let review = queue.count(ItemState::NeedsReview);
            if review > 0 {
                parts.push(format!(
                    "{} review on {} branch{}",
                    plural(review, "needs", "need"),
                    if review == 1 { "its" } else { "their" },
                    if review == 1 { "" } else { "es" },
                ));
            }
            let failed = queue.count(ItemState::Failed);
            if failed > 0 {
                parts.push(format!("{failed} failed"));
            }
            if review + failed > 0 {
                parts.push(format!("`ralph-ctl queue {source}` lists each with why"));
            }
            parts.join("; ")
        }
        Status::MaxIterations => {
            format!("{} (with --max-iterations N for a higher cap)", take_up(""))
        }
        Status::BudgetExhausted => take_up("raise maxCostUsd, then "),
        Status::CircuitOpen => take_up("fix what blocked it, then "),
        Status::Failed => take_up(&fix_then(state)),
        Status::ErrorBudgetExhausted | Status::GateBudgetExhausted => take_up(
            "look at the items that failed (`ralph-ctl status` lists them), fix what they need, then ",
        ),
        Status::Cancelled => take_up("when you want the rest done, "),
        _ => take_up(""),
    })
}

/// One line saying how the loop ended (or paused, or failed) and what to do
/// next ([`next_step`]): the launcher's closing line (`ralph: …`) and, from
/// the stop that ended it, the notice shown in the session (`Ralph …`). A
/// completion not on record ([`completion_on_record`]) is said to be one.
pub fn outcome_line(state: &LoopState) -> String {
    let next = next_step(state)
        .map(|next| format!("; {next}"))
        .unwrap_or_default();
    if !completion_on_record(state) {
        return format!(
            "the state says the loop is complete at iteration {} of {}, but no accepted completion claim is on record: \
             the state was changed outside ralph (by a command the agent ran?), so the work is not reported as done{next}",
            state.iteration, state.max_iterations
        );
    }
    let because = state
        .ended_because
        .as_deref()
        .unwrap_or("no reason recorded");
    match state.status {
        Status::Complete => format!(
            "loop complete at iteration {} of {} ({because}){next}",
            state.iteration, state.max_iterations
        ),
        Status::MaxIterations => format!(
            "loop stopped without completing: max_iterations, {} of {} ({because}){next}",
            state.iteration, state.max_iterations
        ),
        Status::CircuitOpen => format!(
            "loop stopped by the circuit breaker: circuit_open at iteration {} ({because}); `ralph-ctl status` shows why{next}",
            state.iteration
        ),
        Status::Interrupted => format!("loop interrupted: {because}{next}"),
        Status::Running => "loop still running".into(),
        Status::Paused => {
            let what = state.paused_because.as_ref().map_or_else(
                || "no reason recorded".into(),
                |p| format!("{}: {}", p.kind.as_str(), p.message),
            );
            format!(
                "loop paused at iteration {} of {} ({what}){next}",
                state.iteration, state.max_iterations
            )
        }
        Status::Failed => format!(
            "loop failed at iteration {} ({because}){next}",
            state.iteration
        ),
        Status::Waiting => {
            let question = state
                .question
                .as_ref()
                .map_or("no question recorded", |q| q.text.as_str());
            format!(
                "loop waiting at iteration {} of {}: the agent asks: {question}{next}",
                state.iteration, state.max_iterations
            )
        }
        Status::BudgetExhausted => format!(
            "loop stopped at its budget: budget_exhausted at iteration {} ({because}){next}",
            state.iteration
        ),
        Status::Blocked => format!(
            "loop blocked at iteration {} of {}: {because}{next}",
            state.iteration, state.max_iterations
        ),
        Status::Cancelled => format!(
            "loop cancelled at iteration {} of {}: {because}{next}",
            state.iteration, state.max_iterations
        ),
        Status::ErrorBudgetExhausted | Status::GateBudgetExhausted | Status::GateFailed => format!(
            "loop stopped: {} at iteration {} of {} ({because}){next}",
            state.status.as_str(),
            state.iteration,
            state.max_iterations
        ),
    }
}

/// The exit code of `state`: its status's, or
/// [`exit_codes::UNRECORDED_COMPLETION`] for a completion not on record.
pub fn exit_code_of(state: &LoopState) -> i32 {
    if completion_on_record(state) {
        exit_code(state.status)
    } else {
        exit_codes::UNRECORDED_COMPLETION
    }
}

/// The exit code of a loop that ended with `status` (the README's table).
pub fn exit_code(status: Status) -> i32 {
    match status {
        Status::Complete => exit_codes::OK,
        Status::MaxIterations => exit_codes::MAX_ITERATIONS,
        Status::CircuitOpen => exit_codes::CIRCUIT_OPEN,
        Status::Interrupted | Status::Running => exit_codes::INTERRUPTED,
        Status::Paused => exit_codes::PAUSED,
        Status::Failed => exit_codes::FAILED,
        Status::BudgetExhausted => exit_codes::BUDGET_EXHAUSTED,
        Status::Blocked => exit_codes::BLOCKED,
        Status::ErrorBudgetExhausted => exit_codes::ERROR_BUDGET_EXHAUSTED,
        Status::GateBudgetExhausted => exit_codes::GATE_BUDGET_EXHAUSTED,
        Status::GateFailed => exit_codes::GATE_FAILED,
        Status::Cancelled => exit_codes::CANCELLED,
        Status::Waiting => exit_codes::WAITING,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::breaker::{BreakerState, Transition};
    use crate::judge::state::PauseKind;
    use crate::time;
    use std::time::Duration;

    #[test]
    fn only_a_recorded_accepted_claim_makes_a_completion_ralphs_own() {
        use crate::judge::completion::CompletionMode;
        use crate::judge::state::ClaimRecord;
        let claim = |iteration, accepted| ClaimRecord {
            iteration,
            at: Timestamp::from_secs(1795338300),
            mode: CompletionMode::Strict,
            basis: "the completion signal on a line of its own".into(),
            score: None,
            accepted,
            gates: Vec::new(),
            verification: Vec::new(),
        };
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(1795338000));
        state.iteration = 3;
        assert!(completion_on_record(&state), "running: nothing to check");
        state.status = Status::Complete;
        for (last_claim, on_record) in [
            (None, false),
            (Some(claim(3, false)), false),
            (Some(claim(2, true)), false),
            (Some(claim(3, true)), true),
        ] {
            state.last_claim = last_claim;
            assert_eq!(
                completion_on_record(&state),
                on_record,
                "{:?}",
                state.last_claim
            );
            let code = if on_record {
                exit_codes::OK
            } else {
                exit_codes::UNRECORDED_COMPLETION
            };
            assert_eq!(exit_code_of(&state), code);
        }
    }

    fn ended(status: Status, at: &str) -> LoopState {
        let mut s = LoopState::new("s".into(), 5, Timestamp::from_secs(1795338000));
        s.iteration = 4;
        s.end(status, "why".into(), Timestamp::parse(at).unwrap());
        s
    }

    #[test]
    fn the_next_step_names_the_command_in_the_mode_the_loop_ran_in() {
        use crate::judge::state::{ItemState, QueueItem, QueueRun, RunMode};
        let at = Timestamp::from_secs(1795338000);
        let ended = |status, mode: Option<RunMode>| {
            let mut state = LoopState::new("s".into(), 5, at);
            state.status = status;
            state.run_mode = mode;
            state
        };
        let headless = || {
            Some(RunMode {
                headless: true,
                sandbox: Some(true),
                workers: None,
                worktree: false,
                sandboxed: false,
            })
        };
        // Started by the launcher or a hook: the launcher again.
        assert_eq!(
            next_step(&ended(Status::MaxIterations, None)).unwrap(),
            "to go on, start a new loop (the launcher again, with --max-iterations N for a higher cap)"
        );
        // Started by the plugin's /ralph-loop (its own task): /ralph-loop again.
        let mut plugin = ended(Status::MaxIterations, None);
        plugin.task = Some("Fix the findings".into());
        assert_eq!(
            next_step(&plugin).unwrap(),
            "to go on, start a new loop (`/ralph-loop` again in your Claude Code session, with \
             --max-iterations N for a higher cap)"
        );
        // `ralph-ctl run --headless --sandbox`: the same flags.
        assert_eq!(
            next_step(&ended(Status::MaxIterations, headless())).unwrap(),
            "to go on, start a new loop (`ralph-ctl run --headless --sandbox`, with --max-iterations N for a \
             higher cap)"
        );
        let mut fresh = ended(Status::CircuitOpen, headless());
        fresh.fresh_context = true;
        assert_eq!(
            next_step(&fresh).unwrap(),
            "fix what blocked it (or change PROMPT.md), then start again with `ralph-ctl run --reset --fresh --sandbox`"
        );
        // A queue run: where its items landed, what is left, how to see it.
        let item = |status| QueueItem {
            title: "t".into(),
            status,
            worker: "1-1".into(),
            iterations: 1,
            cost_usd: Default::default(),
            branch: None,
            taken: 1,
            why: None,
            ..Default::default()
        };
        let mut run = ended(
            Status::Complete,
            Some(RunMode {
                headless: true,
                sandbox: None,
                workers: Some(2),
                worktree: false,
                sandboxed: false,
            }),
        );
        run.queue = Some(QueueRun {
            source: "plan:IMPLEMENTATION PLAN.md".into(),
            merge: "rebase".into(),
            base: "main".into(),
            base_head: Some("0123456789abcdef0123".into()),
            items: [
                ("a".to_string(), item(ItemState::Done)),
                ("b".to_string(), item(ItemState::Done)),
                ("c".to_string(), item(ItemState::NeedsReview)),
            ]
            .into_iter()
            .collect(),
            joined: Vec::new(),
            remote: None,
        });
        assert_eq!(
            next_step(&run).unwrap(),
            "2 items landed on main, now at 0123456789ab: already committed there; 1 needs review on its \
             branch; `ralph-ctl queue 'plan:IMPLEMENTATION PLAN.md'` lists each with why"
        );
        run.queue.as_mut().unwrap().merge = "none".into();
        assert!(next_step(&run).unwrap().starts_with(
            "2 items finished on their branches (ralph/…), not merged: review and merge them;"
        ));
        run.status = Status::Interrupted;
        assert_eq!(
            next_step(&run).unwrap(),
            "`ralph-ctl run --queue 'plan:IMPLEMENTATION PLAN.md' --workers 2 --merge none` takes up the items left"
        );
        run.status = Status::BudgetExhausted;
        assert!(
            next_step(&run)
                .unwrap()
                .starts_with("raise maxCostUsd, then `ralph-ctl run --queue")
        );
    }

    #[test]
    fn start_rules_table() {
        let at = |t: &str| time::parse_rfc3339(t).unwrap();
        let mut open = ended(Status::CircuitOpen, "2026-11-22T10:00:00Z");
        open.breaker.last_transition = Some(Transition {
            iteration: 4,
            at: Timestamp::from_secs(1795341600),
            from: BreakerState::HalfOpen,
            to: BreakerState::Open,
            reason: "no file changed in 5 iterations".into(),
        });
        let cooldown = |m| Config {
            cooldown_minutes: m,
            ..Config::default()
        };
        let running = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        let now = at("2026-11-22T10:20:00Z");
        let cases: Vec<(Option<&LoopState>, Config, SystemTime, bool)> = vec![
            (None, Config::default(), now, false),
            (Some(&running), Config::default(), now, true),
            (Some(&open), Config::default(), now, true),
            (Some(&open), cooldown(Some(30)), now, true),
            (
                Some(&open),
                cooldown(Some(30)),
                now + Duration::from_secs(600),
                false,
            ),
            (Some(&open), cooldown(Some(10)), now, false),
        ];
        for (state, config, now, refused) in cases {
            let refusal = start_refusal(state, &config, now);
            assert_eq!(
                refusal.is_some(),
                refused,
                "{state:?} {:?}",
                config.cooldown_minutes
            );
        }
        for status in [Status::Complete, Status::MaxIterations, Status::Interrupted] {
            assert_eq!(
                start_refusal(
                    Some(&ended(status, "2026-11-22T10:00:00Z")),
                    &Config::default(),
                    now
                ),
                None
            );
        }
        let text = start_refusal(Some(&open), &cooldown(Some(30)), now)
            .unwrap()
            .describe(Path::new("/p"));
        assert!(
            text.contains("no file changed in 5 iterations") && text.contains("30 minute(s)"),
            "{text}"
        );
    }

    #[test]
    fn only_a_running_loop_is_interrupted() {
        let mut running = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        running.iteration = 3;
        assert!(interrupt(&mut running, "SIGTERM", Timestamp::from_secs(2)));
        assert_eq!(running.status, Status::Interrupted);
        assert_eq!(
            running.ended_because.as_deref(),
            Some("SIGTERM while the loop was running at iteration 3 of 5")
        );
        assert_eq!(running.history.len(), 1);
        let mut paused = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        paused.iteration = 2;
        paused.status = Status::Paused;
        assert!(interrupt(
            &mut paused,
            "SIGTERM received",
            Timestamp::from_secs(2)
        ));
        assert_eq!(
            paused.ended_because.as_deref(),
            Some(
                "SIGTERM received while the loop was paused, waiting to resume, at iteration 2 of 5"
            )
        );
        // A queue run's own loop never iterates: its items' iterations count.
        let mut queue = LoopState::new("s".into(), 25, Timestamp::from_secs(0));
        queue.iteration = 4;
        queue.queue = Some(Default::default());
        assert!(interrupt(
            &mut queue,
            "the queue's workers were stopped (exit 130); their items are free again",
            Timestamp::from_secs(2)
        ));
        assert_eq!(
            queue.ended_because.as_deref(),
            Some(
                "the queue's workers were stopped (exit 130); their items are free again, 4 of \
                 the run's 25 iterations spent"
            )
        );
        let mut done = ended(Status::Complete, "2026-11-22T10:00:00Z");
        let before = done.clone();
        assert!(!interrupt(&mut done, "SIGTERM", Timestamp::from_secs(2)));
        assert_eq!(done, before);
        assert_eq!(exit_code(Status::CircuitOpen), exit_codes::CIRCUIT_OPEN);
    }

    fn paused(kind: PauseKind, resume_at: Option<&str>) -> LoopState {
        let mut s = LoopState::new("s".into(), 9, Timestamp::from_secs(1795338000));
        s.iteration = 4;
        s.pause(crate::judge::state::PausedBecause {
            kind,
            http_status: None,
            message: "API Error".into(),
            resume_at: resume_at.map(|t| Timestamp::parse(t).unwrap()),
            retry_after_secs: None,
            resume_planned: None,
            at: Timestamp::from_secs(1795341600),
        });
        s
    }

    #[test]
    fn resume_plans_table() {
        let now = time::parse_rfc3339("2026-11-22T10:00:00Z")
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let policy = |policy, backoff| Config {
            supervision: crate::judge::config::SupervisionConfig {
                policy,
                backoff_seconds: backoff,
                ..Default::default()
            },
            ..Config::default()
        };
        let conservative = policy(ResumePolicy::Conservative, 60);
        // A reset time: never before it, whatever the backoff.
        let limited = paused(PauseKind::RateLimit, Some("2026-11-22T10:00:07Z"));
        assert!(matches!(
            plan_resume(&conservative, &limited, now),
            ResumePlan::ResumeAt { at, .. } if at == now + 7
        ));
        // A reset weeks away is not waited for:
        // the loop stays paused for the person, the reset named.
        let month = paused(PauseKind::RateLimit, Some("2026-12-15T00:00:00Z"));
        assert!(matches!(
            plan_resume(&conservative, &month, now),
            ResumePlan::Stay { reason } if reason.contains("2026-12-15") && reason.contains("maxResumeWaitHours")
        ));
        // The person's own pacing waits for its window, however far.
        let pacing = paused(PauseKind::Utilization, Some("2026-11-28T00:00:00Z"));
        assert!(matches!(
            plan_resume(&conservative, &pacing, now),
            ResumePlan::ResumeAt { .. }
        ));
        let day = paused(PauseKind::RateLimit, Some("2026-11-23T09:00:00Z"));
        assert!(matches!(
            plan_resume(&conservative, &day, now),
            ResumePlan::ResumeAt { .. }
        ));
        // No reset time: the backoff, doubling with each resume in a row.
        let mut overloaded = paused(PauseKind::Overloaded, None);
        for (resumes, wait) in [(0, 60), (1, 120), (2, 240), (4, 960)] {
            overloaded.auto_resumes = resumes;
            assert!(
                matches!(plan_resume(&conservative, &overloaded, now), ResumePlan::ResumeAt { at, .. } if at == now + wait),
                "{resumes}"
            );
        }
        // The API asked for longer than the backoff (retry-after: 75): at
        // least that, from the pause; a shorter ask leaves the backoff.
        let mut asked = paused(PauseKind::RateLimit, None);
        let paused_at = asked.paused_because.as_ref().unwrap().at.secs();
        for (retry_after, want) in [(75, paused_at + 75), (30, paused_at + 60)] {
            asked.paused_because.as_mut().unwrap().retry_after_secs = Some(retry_after);
            let plan = plan_resume(&conservative, &asked, paused_at);
            assert!(
                matches!(&plan, ResumePlan::ResumeAt { at, .. } if *at == want),
                "retry-after {retry_after}: {plan:?}"
            );
        }
        // The cap on resumes in a row, and a cap on the wait.
        overloaded.auto_resumes = 5;
        assert!(matches!(
            plan_resume(&conservative, &overloaded, now),
            ResumePlan::Stay { .. }
        ));
        assert_eq!(backoff_secs(&conservative, 20), MAX_BACKOFF_SECS);
        let aggressive = policy(ResumePolicy::Aggressive, 60);
        assert!(matches!(
            plan_resume(&aggressive, &overloaded, now),
            ResumePlan::ResumeAt { at, .. } if at == now + MAX_AGGRESSIVE_BACKOFF_SECS
        ));
        assert_eq!(backoff_secs(&aggressive, 0), 15);
        // Manual never resumes; a permanent error fails with its fix.
        let manual = policy(ResumePolicy::Manual, 60);
        overloaded.auto_resumes = 0;
        assert!(matches!(
            plan_resume(&manual, &overloaded, now),
            ResumePlan::Stay { reason } if reason.contains("manual")
        ));
        let refused = paused(PauseKind::AuthenticationFailed, None);
        assert!(matches!(
            plan_resume(&aggressive, &refused, now),
            ResumePlan::Fail { reason } if reason.contains("ANTHROPIC_API_KEY")
        ));
        // Conservative waits for a person when the breaker is not closed.
        let mut stalling = paused(PauseKind::ServerError, None);
        stalling.breaker.state = BreakerState::HalfOpen;
        assert!(matches!(
            plan_resume(&conservative, &stalling, now),
            ResumePlan::Stay { reason } if reason.contains("half_open")
        ));
        assert!(matches!(
            plan_resume(&aggressive, &stalling, now),
            ResumePlan::ResumeAt { .. }
        ));
    }

    #[test]
    fn a_paused_loop_is_interrupted_too_and_has_its_own_exit_codes() {
        let mut p = paused(PauseKind::Overloaded, None);
        assert!(interrupt(&mut p, "SIGINT", Timestamp::from_secs(2)));
        assert_eq!(p.status, Status::Interrupted);
        assert_eq!(exit_code(Status::Paused), exit_codes::PAUSED);
        assert_eq!(exit_code(Status::Failed), exit_codes::FAILED);
        assert_eq!(
            exit_code(Status::BudgetExhausted),
            exit_codes::BUDGET_EXHAUSTED
        );
    }
}
