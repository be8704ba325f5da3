//! Where a stop pauses the loop instead of going on: an API error, a
//! question to the person, a usage window used up, the calls' budget
//! spent; and how long a paused loop waits.

use super::*;

/// The iteration ended on an API error, not on the model's answer: the loop
/// pauses (the same iteration is worked on again when it resumes), and no
/// claim, breaker or cap is judged on the error's text.
pub(super) fn pause_on_api_error(
    mut next: LoopState,
    observed: &Observation,
    failure: &ApiErrorMessage,
    now: Timestamp,
) -> Outcome {
    let kind = failure
        .error
        .as_deref()
        .map(PauseKind::from_client_error)
        .filter(|k| *k != PauseKind::Unknown)
        .or(failure.status.map(PauseKind::from_http_status))
        .unwrap_or(PauseKind::Unknown);
    let message: String = observed
        .message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(300)
        .collect();
    let because = PausedBecause {
        kind,
        http_status: failure.status,
        message: message.clone(),
        resume_at: observed
            .usage
            .last_api_error
            .as_ref()
            .and_then(|e| e.resets_at)
            .map(Timestamp::from_secs),
        retry_after_secs: None,
        resume_planned: None,
        at: now,
    };
    let why = format!(
        "iteration {} ended on an API error ({}{}): {message}; paused",
        next.iteration,
        kind.as_str(),
        failure
            .status
            .map(|s| format!(", HTTP {s}"))
            .unwrap_or_default()
    );
    next.last_run_at = Some(now);
    next.push_history(IterationRecord {
        excerpt: excerpt(&observed.message),
        stop_hook_active: observed.stop_hook_active,
        message_source: observed.message_source,
        tool_calls: observed.tool_calls,
        error: Some(message),
        calls: observed.usage.calls.len().try_into().unwrap_or(u32::MAX),
        usage: observed.usage.tokens,
        tools_incomplete: observed.tools_incomplete,
        ..IterationRecord::new(next.iteration, now, StopDecision::Allow, why)
    });
    next.pause(because.clone());
    Outcome {
        new_state: Some(next),
        verdict: Verdict::Pause(because),
    }
}

/// The pause of a loop that paused itself (its calls-per-hour budget is
/// spent, or a usage window reached `pauseAtUtilization`) until after `now`
/// (seconds since the epoch); `None` for any other loop.
pub fn paused_until(state: &LoopState, now: u64) -> Option<&PausedBecause> {
    let paused = state.paused_because.as_ref()?;
    let until = paused.resume_at?.secs();
    (state.status == Status::Paused
        && matches!(
            paused.kind,
            PauseKind::CallsPerHour | PauseKind::Utilization
        )
        && until > now)
        .then_some(paused)
}

/// A verdict to go on, when the agent asked the person a question
/// (`RALPH_ASK`), becomes a wait for the answer, going on with the next
/// iteration once it comes. An ending (an accepted claim, an abort, a
/// budget, the cap) stands: the question is in the history's excerpt.
pub(super) fn ask_instead(
    message: &str,
    next: &mut LoopState,
    verdict: Verdict,
    why: String,
    now: Timestamp,
) -> (Verdict, String) {
    match (verdict, claims::ask_request(message)) {
        (
            Verdict::Continue {
                iteration: next_iteration,
                ..
            },
            Some(text),
        ) => {
            let asked_in = next.iteration;
            next.iteration = next_iteration;
            let why = format!("{why}; the agent asks the person: {text}");
            let question = Question {
                text,
                iteration: asked_in,
                at: now,
            };
            (Verdict::Ask(question), why)
        }
        (verdict, _) => (verdict, why),
    }
}

/// A verdict to go on, when a usage window of the plan is used to
/// `pauseAtUtilization` or more, becomes a pause until the window resets
/// (the latest reset, when several are), going on with the next iteration
/// then. A window whose reset has passed counts for nothing.
pub(super) fn pause_for_utilization(
    config: &Config,
    next: &mut LoopState,
    verdict: Verdict,
    why: String,
    now: Timestamp,
) -> (Verdict, String) {
    let Some(limit) = config.supervision.pause_at_utilization else {
        return (verdict, why);
    };
    let Verdict::Continue {
        iteration: next_iteration,
        ..
    } = verdict
    else {
        return (verdict, why);
    };
    let over = next
        .windows_to_come(now)
        .filter(|(_, w)| w.utilization >= limit)
        .max_by_key(|(_, w)| w.resets_at)
        .map(|(name, w)| (name.to_string(), w.clone()));
    let Some((name, window)) = over else {
        return (verdict, why);
    };
    next.iteration = next_iteration;
    let because = PausedBecause {
        kind: PauseKind::Utilization,
        http_status: None,
        message: format!(
            "the {name} usage window is at {} (pauseAtUtilization {})",
            window.utilization.percent(),
            limit.percent()
        ),
        resume_at: window.resets_at,
        retry_after_secs: None,
        resume_planned: None,
        at: now,
    };
    let why = format!("{why}; paused: {}", because.message);
    (Verdict::Pause(because), why)
}

/// A verdict to go on while the calls-per-hour budget is spent becomes a
/// pause until the window frees, going on with the next iteration then.
pub(super) fn pause_for_calls(
    config: &Config,
    next: &mut LoopState,
    verdict: Verdict,
    why: String,
    now: Timestamp,
) -> (Verdict, String) {
    let now_secs = now.secs();
    let free_at = match (&verdict, config.supervision.max_calls_per_hour) {
        (Verdict::Continue { .. }, Some(cap)) => {
            next.calls_free_at(cap, now_secs).map(|at| (cap, at))
        }
        _ => None,
    };
    match (verdict, free_at) {
        (
            Verdict::Continue {
                iteration: next_iteration,
                ..
            },
            Some((cap, free_at)),
        ) => {
            next.iteration = next_iteration;
            let because = PausedBecause {
                kind: PauseKind::CallsPerHour,
                http_status: None,
                message: format!(
                    "{} model requests in the last hour reached maxCallsPerHour ({cap})",
                    next.calls_in_last_hour(now_secs)
                ),
                resume_at: Some(Timestamp::from_secs(free_at)),
                retry_after_secs: None,
                resume_planned: None,
                at: now,
            };
            let why = format!("{why}; paused: {}", because.message);
            (Verdict::Pause(because), why)
        }
        (verdict, _) => (verdict, why),
    }
}
