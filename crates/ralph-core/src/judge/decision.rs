//! The pure decision at the heart of the hook: from the configuration, the
//! loop's state and what the hook observed at this stop, to the new state and
//! whether the stop is blocked.
//!
//! No I/O happens here, so every rule is unit-tested as a table below.

use crate::judge::breaker::{self, BreakerEffect, ProgressObservation};
use crate::judge::claims;
use crate::judge::completion::{self, Assessment, GateResult};
use crate::judge::config::Config;
use crate::judge::errors::{self, ErrorSighting};
use crate::judge::signals;
use crate::judge::state::{
    ClaimOutcome, ClaimRecord, IterationRecord, LoopState, PauseKind, PausedBecause, Question,
    Status, StopDecision, WindowUse, excerpt,
};
use crate::observe::plan::PlanReport;
use crate::observe::progress::Reading;
use crate::observe::transcript::ApiErrorMessage;
use crate::observe::usage::UsageReading;
use crate::observe::verify::VerifyResult;
use crate::time::Timestamp;

pub use crate::judge::state::MessageSource;

mod claim;
mod pauses;
mod verdict;

use claim::*;
pub use claim::{
    ClaimJudgement, claim_gates, judge_claim, previous_stop_was_behind, test_saturation,
};
pub use pauses::paused_until;
use pauses::*;
use verdict::*;

/// What the hook observed at one stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// The stopping session (`session_id` of the hook input).
    pub session_id: Option<String>,
    /// The client's `stop_hook_active`: recorded, never obeyed (it is true on
    /// every stop after a block, which is every iteration of a loop after the first).
    pub stop_hook_active: bool,
    /// The text of the agent's latest assistant message, empty when there is none.
    pub message: String,
    /// Where `message` came from.
    pub message_source: MessageSource,
    /// The text of the tool results that failed in this iteration (newest first).
    pub failing_tool_results: Vec<String>,
    /// How many tool calls the agent made in this iteration.
    pub tool_calls: usize,
    /// The calls the client refused for lack of permission, named (the
    /// `-p` result's `permission_denials`, else the transcript's calls whose
    /// result is a refusal); `None` when not known, and the failing tool
    /// results' texts are searched for a refusal instead.
    pub refused_calls: Option<Vec<errors::Refusal>>,
    /// Whether the project changed since the previous stop, and the baseline
    /// the next stop compares with.
    pub progress: Reading,
    /// The TDD scenario in progress, when a TDD state file exists.
    pub tdd_scenario: Option<String>,
    /// The plan files found at the project root.
    pub plan: PlanReport,
    /// What the verification commands did, when a claim made them run.
    pub verification: Option<Vec<VerifyResult>>,
    /// The files under `protectedPaths` changed since the loop's start,
    /// read when a claim is made (`None`: no `protectedPaths`, or no
    /// snapshot to compare with).
    pub protected_changes: Option<Vec<String>>,
    /// What the verify commands resolve to differently from the loop's
    /// start, read when a claim is made (`None`: nothing recorded at the
    /// start to compare with).
    pub check_changes: Option<Vec<String>>,
    /// The files in `.git` that send git elsewhere and differ from the
    /// loop's start, named, read when a claim is made (`None`: nothing
    /// recorded at the start to compare with).
    pub git_changes: Option<Vec<String>>,
    /// The previous iteration's final message, when its stop could not see
    /// it in time (`transcript_behind`) and it is in the transcript now: a
    /// completion claim in it is judged at this stop.
    pub late_message: Option<String>,
    /// True when the transcript still lacked the iteration's tool results
    /// when the hook stopped waiting for it.
    pub tools_incomplete: bool,
    /// The model requests and tokens since the previous stop.
    pub usage: UsageReading,
    /// Set when the iteration ended on the client's message for an API
    /// error rather than the model's answer (Claude Code 2.0 runs the Stop
    /// hook then).
    pub api_failure: Option<ApiErrorMessage>,
    /// Why the driver ended the client before it ended its turn (the idle
    /// timeout): the iteration counts as a `RALPH_OUTCOME` error.
    pub cut_off: Option<String>,
    /// The plan's usage windows as the client reported them during the
    /// iteration (a subscription's headless run), by name.
    pub usage_windows: std::collections::BTreeMap<String, WindowUse>,
    /// What a worktree's failed check reached of the main checkout, which
    /// it cannot see: named with the failure (see
    /// `observe::main_checkout`).
    pub main_checkout_reach: Vec<String>,
}

impl Observation {
    /// An observation of a stop that carried only a session id (used for the
    /// cheap ownership check before anything else is read).
    pub fn of_session(session_id: Option<String>, stop_hook_active: bool) -> Self {
        Observation {
            session_id,
            stop_hook_active,
            message: String::new(),
            message_source: MessageSource::Missing,
            failing_tool_results: Vec::new(),
            tool_calls: 0,
            refused_calls: None,
            progress: Reading::default(),
            tdd_scenario: None,
            plan: PlanReport::default(),
            verification: None,
            protected_changes: None,
            check_changes: None,
            git_changes: None,
            late_message: None,
            tools_incomplete: false,
            usage: UsageReading::default(),
            api_failure: None,
            cut_off: None,
            usage_windows: Default::default(),
            main_checkout_reach: Vec::new(),
        }
    }
}

/// Whether the stop of `session_id` belongs to the running (or paused) loop in `state`:
/// `Ok` with the loop when it does, else why it is let through untouched.
/// The hook asks this first, so another session's stop reads nothing more.
pub fn owned_loop<'a>(
    state: Option<&'a LoopState>,
    session_id: Option<&str>,
) -> Result<&'a LoopState, PassReason> {
    let state = state.ok_or(PassReason::NoLoop)?;
    if !state.status.is_live() {
        return Err(PassReason::LoopEnded(state.status));
    }
    match session_id {
        None => Err(PassReason::NoSessionId),
        Some(id) if id != state.session_id => Err(PassReason::OtherSession {
            owner: state.session_id.clone(),
        }),
        Some(_) => Ok(state),
    }
}

/// Why a stop is let through without touching the state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassReason {
    /// No loop has been started in this project.
    NoLoop,
    /// The loop belongs to another session; this one must never be trapped.
    OtherSession {
        /// The session that owns the loop.
        owner: String,
    },
    /// The input carried no session id, so ownership cannot be proven.
    NoSessionId,
    /// The loop has already ended; it keeps its final state.
    LoopEnded(Status),
}

/// What the hook answers Claude Code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let the stop through; the state is not touched.
    Pass(PassReason),
    /// Let the stop through; the loop ended with this status.
    End(Status),
    /// Let the stop through; the loop is paused (its calls-per-hour budget
    /// is spent) and goes on with the next iteration when resumed.
    Pause(PausedBecause),
    /// Let the stop through; the loop waits for the person's answer to the
    /// agent's question, and goes on with the next iteration once answered.
    Ask(Question),
    /// Block the stop and feed the prompt back for this (new) iteration.
    Continue {
        /// The iteration that starts now.
        iteration: u32,
        /// The cap.
        max_iterations: u32,
        /// The circuit breaker's warning, which starts the re-injected text.
        notice: Option<String>,
    },
}

/// The decision and the state to persist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The new state to write, or `None` when the state must stay untouched.
    pub new_state: Option<LoopState>,
    /// What to answer.
    pub verdict: Verdict,
}

impl Outcome {
    fn pass(reason: PassReason) -> Self {
        Outcome {
            new_state: None,
            verdict: Verdict::Pass(reason),
        }
    }
}

/// Decides one stop. `now` is the time to record, already formatted.
pub fn decide(
    config: &Config,
    state: Option<&LoopState>,
    observed: &Observation,
    now: Timestamp,
) -> Outcome {
    match owned_loop(state, observed.session_id.as_deref()) {
        Ok(state) => {
            let claim = judge_claim(config, state, observed);
            decide_judged(config, state, observed, &claim, now)
        }
        Err(reason) => Outcome::pass(reason),
    }
}

/// Decides one stop of the loop `state` (already known to be owned by the
/// stopping session), with its claim already judged by [`judge_claim`] on
/// the same state.
pub fn decide_judged(
    config: &Config,
    state: &LoopState,
    observed: &Observation,
    claim: &ClaimJudgement,
    now: Timestamp,
) -> Outcome {
    let now_secs = now.secs();
    let mut next = state.clone();
    if paused_until(state, now_secs).is_some() {
        // A stop of the owning session while the calls-per-hour budget is
        // spent (an interactive session goes on by hand): let it through.
        return Outcome::pass(PassReason::LoopEnded(Status::Paused));
    }
    let taken_up = take_up(state, &mut next);
    count_usage(&mut next, observed, now_secs);
    let iteration = state.iteration;
    if let Some(failure) = &observed.api_failure {
        return pause_on_api_error(next, observed, failure, now);
    }
    next.auto_resumes = 0;
    late_excerpt(state, observed, &mut next);
    let findings = signals::findings_count(&observed.message);
    if findings.is_some() {
        next.last_findings_count = findings;
    }
    let error = errors::sighting(&observed.message, &observed.failing_tool_results);

    let assessment = &claim.assessment;
    note_indications(&mut next, claim, iteration);

    let mut notices = Vec::new();
    let denied = refused_calls(observed);
    let judged = assessment
        .claimed
        .then(|| judge_completion(config, state, observed, assessment, &denied, iteration, now));
    let completed = judged.as_ref().is_some_and(|j| j.accepted);
    let failed_gates = judged
        .as_ref()
        .filter(|j| !j.accepted)
        .map(|j| failed_gates_said(&j.record.gates));
    let (claim_record, rejected, accepted_summary) = match judged {
        Some(j) => {
            notices.extend(j.notice);
            next.last_claim = Some(j.record);
            (Some(j.outcome), j.rejected, j.accepted_summary)
        }
        None => (None, None, String::new()),
    };

    // A question to the person, or the stop that takes up an answer or a
    // pause, is a conversation, not an idle iteration: no evidence either
    // way of progress, as a stop that could not see its tool calls.
    let conversing = claims::ask_request(&observed.message).is_some()
        || taken_up.asked.is_some()
        || taken_up.resumed.is_some();
    let mut progress = progress_of(state, observed, error.clone(), findings, rejected, denied);
    progress.tools_unseen |= conversing;
    let (effect, transition) = step_breaker(config, state, observed, &progress, now, &mut next);
    if let BreakerEffect::Warn(notice) = &effect {
        notices.push(notice.clone());
    }
    if claim.saturation >= completion::TEST_SATURATION_ITERATIONS {
        notices.push(completion::saturation_notice(claim.saturation));
    }

    let marker = count_outcome(observed, &mut next, &mut notices);
    let (verdict, why) = verdict_of(VerdictInputs {
        config,
        state,
        next: &next,
        observed,
        assessment,
        completed,
        accepted_summary: &accepted_summary,
        failed_gates: failed_gates.as_deref(),
        effect: &effect,
        notices,
    });

    let (verdict, why) = ask_instead(&observed.message, &mut next, verdict, why, now);
    let (verdict, why) = pause_for_calls(config, &mut next, verdict, why, now);
    let (verdict, why) = pause_for_utilization(config, &mut next, verdict, why, now);
    let why = taken_up.said_before(why);
    let decision = settle_verdict(&mut next, &verdict, &why, now);
    next.last_run_at = Some(now);
    next.push_history(IterationRecord {
        iteration,
        at: now,
        decision,
        why,
        excerpt: excerpt(&observed.message),
        stop_hook_active: observed.stop_hook_active,
        findings,
        message_source: observed.message_source,
        tool_calls: observed.tool_calls,
        error: error.map(|e| e.sample),
        breaker: transition,
        status_block: assessment.status_block.clone(),
        claim: claim_record,
        progress: Some(observed.progress.method),
        calls: observed.usage.calls.len().try_into().unwrap_or(u32::MAX),
        usage: observed.usage.tokens,
        tools_incomplete: observed.tools_incomplete,
        outcome: marker.as_ref().map(|m| m.status).or(observed
            .cut_off
            .as_ref()
            .map(|_| claims::OutcomeStatus::Error)),
        item_id: marker.and_then(|m| m.item_id),
    });
    Outcome {
        new_state: Some(next),
        verdict,
    }
}

/// The calls the client refused for lack of permission this iteration:
/// those the stop was told of, else those its failing tool results show.
fn refused_calls(observed: &Observation) -> Vec<errors::Refusal> {
    match &observed.refused_calls {
        Some(calls) => calls.clone(),
        None => errors::permission_denial(&observed.failing_tool_results)
            .into_iter()
            .collect(),
    }
}

/// Steps the breaker over what the iteration showed (`progress`): its new
/// state goes into `next`, with the progress baseline this stop read.
/// Returns its effect and the transition it made at this stop, if any.
fn step_breaker(
    config: &Config,
    state: &LoopState,
    observed: &Observation,
    progress: &ProgressObservation,
    now: Timestamp,
    next: &mut LoopState,
) -> (BreakerEffect, Option<breaker::Transition>) {
    let (mut breaker, effect) = breaker::step(
        &state.breaker,
        progress,
        &config.breaker,
        state.iteration,
        now,
    );
    if let Some(baseline) = &observed.progress.baseline {
        breaker.progress = Some(baseline.clone());
    }
    let transition = (breaker.last_transition != state.breaker.last_transition)
        .then(|| breaker.last_transition.clone())
        .flatten();
    next.breaker = breaker;
    (effect, transition)
}

/// What a stop found the loop waiting on, now over: the session works
/// again after a pause or its question.
#[derive(Default)]
struct TakenUp {
    /// The pause it resumed after.
    resumed: Option<PausedBecause>,
    /// The question that was answered (in the session, or by `ralph-ctl
    /// answer`).
    asked: Option<Question>,
}

impl TakenUp {
    /// The stop's `why`, after what it took the loop up from.
    fn said_before(&self, why: String) -> String {
        match (&self.resumed, &self.asked) {
            (Some(paused), _) => format!(
                "resumed after the pause ({}: {}); {why}",
                paused.kind.as_str(),
                paused.message
            ),
            (None, Some(question)) => format!(
                "resumed in the session after the question of iteration {}; {why}",
                question.iteration
            ),
            (None, None) => why,
        }
    }
}

/// A stop of a paused or waiting loop's session: the loop goes on (in
/// `next`). An answer `ralph-ctl answer` left goes with this stop's text.
fn take_up(state: &LoopState, next: &mut LoopState) -> TakenUp {
    let mut taken_up = TakenUp::default();
    if state.status == Status::Paused {
        // The session is working again (a person carried on after an API
        // error, or the budget window freed): the loop goes on.
        taken_up.resumed = state.paused_because.clone();
        next.resume();
    } else if state.status == Status::Waiting {
        // The session's stop came after its question: the person spoke to
        // it (typed an answer in the session), so the loop goes on.
        taken_up.asked = state.question.clone();
        next.resume();
    } else if state.answered() {
        // Answered by `ralph-ctl answer`: the answer goes with this stop's
        // text (or the loop ends, and it is moot).
        taken_up.asked = state.question.clone();
    }
    taken_up
}

/// What the breaker reads of a stop: whether the project changed, what
/// the iteration tried, its error, findings, rejected claim and refused
/// calls.
fn progress_of(
    state: &LoopState,
    observed: &Observation,
    error: Option<ErrorSighting>,
    findings: Option<u64>,
    rejected: Option<ErrorSighting>,
    denied: Vec<errors::Refusal>,
) -> ProgressObservation {
    ProgressObservation {
        changed: observed.progress.changed,
        // An iteration that neither used a tool nor hit an error did nothing:
        // unchanged after it is no progress too (unless its calls were unseen).
        acted: observed.tool_calls > 0 || error.is_some(),
        error,
        findings,
        previous_findings: state.last_findings_count,
        output_chars: observed.message.chars().count(),
        tdd_scenario: observed.tdd_scenario.clone(),
        rejected_claim: rejected,
        denied,
        sandboxed: sandboxed(state),
        tools_unseen: observed.tools_incomplete,
    }
}

/// The previous stop, judged before the transcript caught up, gets the
/// message it could not read as its history's excerpt.
fn late_excerpt(state: &LoopState, observed: &Observation, next: &mut LoopState) {
    if let (Some(late), true) = (&observed.late_message, previous_stop_was_behind(state))
        && let Some(record) = next.history.last_mut()
    {
        record.excerpt = excerpt(late);
    }
}

/// Adds the stop's requests and tokens to the new state, keeps the usage
/// windows it read and moves its transcript cursor.
fn count_usage(next: &mut LoopState, observed: &Observation, now_secs: u64) {
    for (name, window) in &observed.usage_windows {
        next.usage_windows.insert(name.clone(), window.clone());
    }
    let usage = &observed.usage;
    next.usage.add(&usage.tokens);
    next.uncharged_usd = next.uncharged_usd.plus(usage.estimated);
    next.record_calls(&usage.calls, now_secs);
    if let Some(cursor) = &usage.cursor {
        next.transcript = Some(cursor.clone());
    }
}

/// Keeps the claim's test-only streak and the iterations that indicated
/// completion within the dual mode's window.
fn note_indications(next: &mut LoopState, claim: &ClaimJudgement, iteration: u32) {
    next.test_only_iterations = claim.saturation;
    if claim.assessment.indication {
        next.completion_indications.push(iteration);
    }
    let keep_from = iteration
        .saturating_add(1)
        .saturating_sub(completion::DUAL_WINDOW);
    next.completion_indications.retain(|&i| i >= keep_from);
}

#[cfg(test)]
mod tests;
