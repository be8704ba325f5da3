//! The verdict of a stop: what the agent's outcome marker counts against
//! the budgets, the verdict from everything judged, and the new state it
//! leaves.

use super::*;

/// Applies the verdict to the new state (paused, at the next iteration, or
/// ended with `why`) and says what the hook answers.
pub(super) fn settle_verdict(
    next: &mut LoopState,
    verdict: &Verdict,
    why: &str,
    now: Timestamp,
) -> StopDecision {
    match verdict {
        Verdict::Pause(because) => {
            next.pause(because.clone());
            StopDecision::Allow
        }
        Verdict::Ask(question) => {
            next.wait_for_answer(question.clone());
            StopDecision::Allow
        }
        Verdict::Continue { iteration, .. } => {
            next.iteration = *iteration;
            StopDecision::Block
        }
        Verdict::End(status) => {
            next.end(*status, why.to_string(), now);
            StopDecision::Allow
        }
        Verdict::Pass(_) => unreachable!("passes return early"),
    }
}

/// Reads the agent's `RALPH_OUTCOME` marker (a marker not understood is said
/// in a notice) and counts it, and a cut-off iteration, against the error
/// and gate budgets.
pub(super) fn count_outcome(
    observed: &Observation,
    next: &mut LoopState,
    notices: &mut Vec<String>,
) -> Option<claims::Outcome> {
    let marker = match claims::outcome(&observed.message) {
        Some(Ok(marker)) => Some(marker),
        Some(Err(problem)) => {
            notices.push(format!(
                "[Ralph: RALPH_OUTCOME not understood] The marker in your last message was not read: {problem}. \
                 Write it as RALPH_OUTCOME: {{\"status\": \"terminal\", \"itemId\": \"…\"}} \
                 (status: terminal, gate-blocked, error, skip or no-item)."
            ));
            None
        }
        None => None,
    };
    match marker.as_ref().map(|m| m.status) {
        Some(claims::OutcomeStatus::Terminal | claims::OutcomeStatus::NoItem) => {
            next.outcome_errors = 0;
            next.outcome_gate_blocked = 0;
        }
        Some(claims::OutcomeStatus::Error) => {
            next.outcome_errors = next.outcome_errors.saturating_add(1);
            next.outcome_gate_blocked = 0;
        }
        Some(claims::OutcomeStatus::GateBlocked) => {
            next.outcome_gate_blocked = next.outcome_gate_blocked.saturating_add(1);
            next.outcome_errors = 0;
        }
        Some(claims::OutcomeStatus::Skip) | None => {}
    }
    if let Some(why) = &observed.cut_off {
        // A hung iteration failed its item as surely as one that said so.
        next.outcome_errors = next.outcome_errors.saturating_add(1);
        next.outcome_gate_blocked = 0;
        notices.push(format!(
            "[Ralph: the previous iteration was cut off] {why}. Its work may be half done: \
             look at the project's files before you go on, and keep each step short."
        ));
    }
    marker
}

/// What [`verdict_of`] decides from.
pub(super) struct VerdictInputs<'a> {
    pub(super) config: &'a Config,
    pub(super) state: &'a LoopState,
    pub(super) next: &'a LoopState,
    pub(super) observed: &'a Observation,
    pub(super) assessment: &'a completion::Assessment,
    pub(super) completed: bool,
    pub(super) accepted_summary: &'a str,
    /// The gates a rejected claim failed, each with the first line of why.
    pub(super) failed_gates: Option<&'a str>,
    pub(super) effect: &'a BreakerEffect,
    pub(super) notices: Vec<String>,
}

/// The stop's verdict and why, in order: the agent's abort, an accepted
/// claim, the outcome budgets, the breaker, the cap, else the next
/// iteration (with the notices).
pub(super) fn verdict_of(inputs: VerdictInputs<'_>) -> (Verdict, String) {
    let VerdictInputs {
        config,
        state,
        next,
        observed,
        assessment,
        completed,
        accepted_summary,
        failed_gates,
        effect,
        notices,
    } = inputs;
    let iteration = state.iteration;
    let budgets = config.outcome_budgets;
    let abort = claims::abort_request(&observed.message);
    if let Some(reason) = &abort {
        // The agent cannot go on without the person: stop now, whatever
        // else the iteration said.
        (
            Verdict::End(Status::Blocked),
            format!("the agent stopped the loop in iteration {iteration}, blocked: {reason}"),
        )
    } else if completed {
        (
            Verdict::End(Status::Complete),
            format!(
                "completion claimed in iteration {iteration} ({}) and accepted; {accepted_summary}",
                assessment.basis
            ),
        )
    } else if next.outcome_errors >= budgets.errors {
        (
            Verdict::End(Status::ErrorBudgetExhausted),
            format!(
                "RALPH_OUTCOME error (or a cut-off iteration) in {} iterations in a row, the \
                 errorBudget ({})",
                next.outcome_errors, budgets.errors
            ),
        )
    } else if next.outcome_gate_blocked >= budgets.gate_blocked {
        (
            Verdict::End(Status::GateBudgetExhausted),
            format!(
                "RALPH_OUTCOME gate-blocked in {} iterations in a row, the gateBudget ({})",
                next.outcome_gate_blocked, budgets.gate_blocked
            ),
        )
    } else if let BreakerEffect::Open(reason) = &effect {
        (
            Verdict::End(Status::CircuitOpen),
            format!("circuit breaker opened: {reason}"),
        )
    } else if iteration >= state.max_iterations {
        (
            Verdict::End(Status::MaxIterations),
            format!(
                "reached the iteration cap ({} of {})",
                iteration, state.max_iterations
            ),
        )
    } else {
        (
            Verdict::Continue {
                iteration: iteration.saturating_add(1),
                max_iterations: state.max_iterations,
                notice: (!notices.is_empty()).then(|| notices.join("\n\n")),
            },
            if let Some(why) = &observed.cut_off {
                format!("iteration {iteration} was cut off ({why}), counted as an error")
            } else if assessment.claimed {
                format!(
                    "iteration {iteration} claimed completion but the claim failed its gates: {}",
                    failed_gates.unwrap_or("none named")
                )
            } else {
                format!("iteration {iteration} ended without a completion claim")
            },
        )
    }
}
