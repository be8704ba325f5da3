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

/// Consecutive iterations, this one included, that only ran tests: the status
/// block says `WORK_TYPE: TESTING`, or nothing changed and the message speaks
/// only of test runs.
pub fn test_saturation(state: &LoopState, observed: &Observation) -> u32 {
    let block = claims::status_block(&observed.message);
    let work_type_testing = block
        .as_ref()
        .and_then(|b| b.work_type.as_deref())
        .is_some_and(|w| w.eq_ignore_ascii_case("TESTING"));
    let unchanged = observed.progress.changed == Some(false);
    if work_type_testing || (unchanged && claims::speaks_only_of_tests(&observed.message)) {
        state.test_only_iterations.saturating_add(1)
    } else {
        0
    }
}

/// The completion claim of one stop, judged once: the hook judges it before
/// the lock to decide whether to run the verification commands, and hands
/// the same judgement to [`decide_judged`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimJudgement {
    /// Whether and how the message claims completion.
    pub assessment: Assessment,
    /// Consecutive test-only iterations, this one included.
    pub saturation: u32,
}

/// Reads the completion claim of this stop (before the gates): in its own
/// message, else in the previous iteration's message that reached the
/// transcript only after its stop ([`Observation::late_message`]).
pub fn judge_claim(config: &Config, state: &LoopState, observed: &Observation) -> ClaimJudgement {
    let saturation = test_saturation(state, observed);
    let assess = |message: &str| {
        completion::assess(
            &config.completion,
            &config.completion_signal,
            message,
            state.iteration,
            &state.completion_indications,
            &observed.plan,
            saturation >= completion::TEST_SATURATION_ITERATIONS,
        )
    };
    let mut assessment = assess(&observed.message);
    if !assessment.claimed
        && let Some(late) = &observed.late_message
    {
        let mut earlier = assess(late);
        if earlier.claimed {
            earlier.basis = format!(
                "{} in iteration {}'s message, which reached the transcript only after its stop",
                earlier.basis,
                state.iteration.saturating_sub(1)
            );
            assessment = earlier;
        }
    }
    if !assessment.claimed
        && let Some(Ok(marker)) = claims::outcome(&observed.message)
        && marker.status == claims::OutcomeStatus::NoItem
    {
        // The queue is empty: a claim, checked by the gates like any other.
        assessment.claimed = true;
        assessment.basis = "RALPH_OUTCOME no-item (the work queue is empty)".into();
    }
    ClaimJudgement {
        assessment,
        saturation,
    }
}

/// True when the loop's previous stop was judged without its message
/// because the transcript had not caught up (`transcript_behind`).
pub fn previous_stop_was_behind(state: &LoopState) -> bool {
    state.history.last().is_some_and(|r| {
        r.message_source == MessageSource::TranscriptBehind
            && r.iteration.saturating_add(1) == state.iteration
    })
}

/// The fingerprint of a rejected claim: which gates failed, on what output
/// (normalised, so timings and paths do not make two rejections differ).
fn rejection(gates: &[GateResult]) -> Option<ErrorSighting> {
    let failed: Vec<&GateResult> = gates.iter().filter(|g| !g.passed).collect();
    if failed.is_empty() {
        return None;
    }
    let text: Vec<String> = failed
        .iter()
        .map(|g| {
            let detail: Vec<String> = g.detail.lines().map(errors::normalise).collect();
            format!("{}\n{}", g.gate.as_str(), detail.join("\n"))
        })
        .collect();
    let names: Vec<&str> = failed.iter().map(|g| g.gate.as_str()).collect();
    // The whole detail, on one line: its first line alone ends with a colon
    // when what it introduces (a check's output, the plan's items) follows.
    let detail = crate::judge::completion::detail_on_one_line(&failed[0].detail);
    Some(ErrorSighting {
        fingerprint: errors::fingerprint(&text.join("\n")),
        sample: format!("{} gate: {detail}", names.join(", ")),
    })
}

/// The gates a rejected claim failed, each named with the first line of
/// its detail (without the colon that introduces what follows it):
/// `verification gate: `cargo test` (tests) exited 101; …`.
fn failed_gates_said(gates: &[GateResult]) -> String {
    let said: Vec<String> = gates
        .iter()
        .filter(|g| !g.passed)
        .map(|g| {
            let first = g
                .detail
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("no reason recorded");
            format!("{} gate: {}", g.gate.as_str(), first.trim_end_matches(':'))
        })
        .collect();
    said.join("; ")
}

/// The iteration ended on an API error, not on the model's answer: the loop
/// pauses (the same iteration is worked on again when it resumes), and no
/// claim, breaker or cap is judged on the error's text.
fn pause_on_api_error(
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
    for (name, window) in &observed.usage_windows {
        next.usage_windows.insert(name.clone(), window.clone());
    }
    count_usage(&mut next, &observed.usage, now_secs);
    let iteration = state.iteration;
    if let Some(failure) = &observed.api_failure {
        return pause_on_api_error(next, observed, failure, now);
    }
    next.auto_resumes = 0;
    if let (Some(late), true) = (&observed.late_message, previous_stop_was_behind(state))
        && let Some(record) = next.history.last_mut()
    {
        record.excerpt = excerpt(late);
    }
    let findings = signals::findings_count(&observed.message);
    if findings.is_some() {
        next.last_findings_count = findings;
    }
    let error = errors::sighting(&observed.message, &observed.failing_tool_results);

    let assessment = &claim.assessment;
    note_indications(&mut next, claim, iteration);

    let mut notices = Vec::new();
    // The calls the client refused for lack of permission this iteration.
    let denied = match &observed.refused_calls {
        Some(calls) => calls.clone(),
        None => errors::permission_denial(&observed.failing_tool_results)
            .into_iter()
            .collect(),
    };
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
    let (mut breaker, effect) =
        breaker::step(&state.breaker, &progress, &config.breaker, iteration, now);
    if let Some(baseline) = &observed.progress.baseline {
        breaker.progress = Some(baseline.clone());
    }
    let transition = (breaker.last_transition != state.breaker.last_transition)
        .then(|| breaker.last_transition.clone())
        .flatten();
    next.breaker = breaker;

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
        ..IterationRecord::new(iteration, now, decision, why)
    });
    Outcome {
        new_state: Some(next),
        verdict,
    }
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

/// Adds the stop's requests and tokens to the new state and moves its
/// transcript cursor.
fn count_usage(next: &mut LoopState, usage: &UsageReading, now_secs: u64) {
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

/// Applies the verdict to the new state (paused, at the next iteration, or
/// ended with `why`) and says what the hook answers.
fn settle_verdict(
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

/// A claim judged against its gates: the record kept in the state, what
/// the history says of it, and what the agent is told.
struct CompletionJudged {
    accepted: bool,
    record: ClaimRecord,
    outcome: ClaimOutcome,
    rejected: Option<errors::ErrorSighting>,
    accepted_summary: String,
    notice: Option<String>,
}

/// The completion gates a claim of `state`'s loop meets or fails, given
/// what was observed: the plan, the status block, the verification, the
/// test counts against the loop's baseline, the protected files, the
/// check's resolution, and the permission gate for calls the client
/// refused (`denied`). What a stop judges a claim by, and what `ralph-ctl
/// check` shows the agent before it claims.
pub fn claim_gates(
    config: &Config,
    state: &LoopState,
    observed: &Observation,
    assessment: &completion::Assessment,
    denied: &[errors::Refusal],
) -> Vec<GateResult> {
    let mut gates = completion::gates(
        assessment,
        &observed.plan,
        &config.completion.verify,
        observed.verification.as_deref(),
        &completion::Integrity {
            baseline: &state.test_baseline,
            allow_fewer_tests: config.completion.allow_fewer_tests,
            protected_changes: observed.protected_changes.as_deref(),
            check_changes: observed.check_changes.as_deref(),
            git_changes: observed.git_changes.as_deref(),
            baseline_failures: &state.baseline_failures,
            baseline_in_worktree: state.baseline_commit.is_some(),
            main_checkout_reach: &observed.main_checkout_reach,
        },
    );
    // Unknown change counts as none: the refusal is known, the work is
    // not. Calls not seen yet (the client writes them after the hook,
    // under load), after an iteration whose calls were refused or in an
    // iteration that used tools (more model requests than its answer): no
    // change is no sign that they went through.
    let refused_before = state
        .breaker
        .counters
        .get(breaker::Signal::PermissionDenied)
        > 0;
    let unseen = match (observed.tools_incomplete, refused_before) {
        (false, _) => completion::Unseen::Nothing,
        (true, true) => completion::Unseen::AfterRefusals,
        (true, false) if observed.usage.calls.len() > 1 => completion::Unseen::ToolCalls,
        (true, false) => completion::Unseen::Nothing,
    };
    gates.extend(completion::permission_gate(
        denied,
        unseen,
        observed.progress.changed == Some(true),
        sandboxed(state),
    ));
    gates
}

/// Whether `state`'s loop runs its client in the client's own sandbox (as
/// `ralph-ctl run` decided at its start).
fn sandboxed(state: &LoopState) -> bool {
    state.run_mode.as_ref().is_some_and(|mode| mode.sandboxed)
}

/// Runs the completion gates on a claim ([`claim_gates`]) and says what
/// the state keeps of it and what the agent is told.
fn judge_completion(
    config: &Config,
    state: &LoopState,
    observed: &Observation,
    assessment: &completion::Assessment,
    denied: &[errors::Refusal],
    iteration: u32,
    now: Timestamp,
) -> CompletionJudged {
    let gates = claim_gates(config, state, observed, assessment, denied);
    let accepted = gates.iter().all(|g| g.passed);
    let outcome = ClaimOutcome {
        accepted,
        basis: assessment.basis.clone(),
        failed_gates: gates.iter().filter(|g| !g.passed).map(|g| g.gate).collect(),
    };
    let (accepted_summary, notice, rejected) = if accepted {
        (
            completion::accepted_summary(&gates, config.completion.verify_off_by_formula),
            None,
            None,
        )
    } else {
        (
            String::new(),
            Some(completion::failure_notice(assessment, &gates)),
            rejection(&gates),
        )
    };
    let record = ClaimRecord {
        iteration,
        at: now,
        mode: config.completion.mode,
        basis: assessment.basis.clone(),
        score: assessment.score,
        accepted,
        gates,
        verification: observed.verification.clone().unwrap_or_default(),
    };
    CompletionJudged {
        accepted,
        record,
        outcome,
        rejected,
        accepted_summary,
        notice,
    }
}

/// Reads the agent's `RALPH_OUTCOME` marker (a marker not understood is said
/// in a notice) and counts it, and a cut-off iteration, against the error
/// and gate budgets.
fn count_outcome(
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
struct VerdictInputs<'a> {
    config: &'a Config,
    state: &'a LoopState,
    next: &'a LoopState,
    observed: &'a Observation,
    assessment: &'a completion::Assessment,
    completed: bool,
    accepted_summary: &'a str,
    /// The gates a rejected claim failed, each with the first line of why.
    failed_gates: Option<&'a str>,
    effect: &'a BreakerEffect,
    notices: Vec<String>,
}

/// The stop's verdict and why, in order: the agent's abort, an accepted
/// claim, the outcome budgets, the breaker, the cap, else the next
/// iteration (with the notices).
fn verdict_of(inputs: VerdictInputs<'_>) -> (Verdict, String) {
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

/// A verdict to go on, when the agent asked the person a question
/// (`RALPH_ASK`), becomes a wait for the answer, going on with the next
/// iteration once it comes. An ending (an accepted claim, an abort, a
/// budget, the cap) stands: the question is in the history's excerpt.
fn ask_instead(
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
fn pause_for_utilization(
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
fn pause_for_calls(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::PerMille;

    const NOW: Timestamp = Timestamp::from_secs(1795341600); // 2026-11-22T10:00:00Z
    const SID: &str = "11111111-2222-3333-4444-555555555555";

    fn running(iteration: u32, max: u32) -> LoopState {
        let mut s = LoopState::new(SID.into(), max, Timestamp::from_secs(1795338000));
        s.iteration = iteration;
        s
    }

    fn saying(message: &str) -> Observation {
        Observation {
            message: message.into(),
            message_source: MessageSource::Input,
            ..Observation::of_session(Some(SID.into()), true)
        }
    }

    fn config() -> Config {
        Config::default()
    }

    /// A reading that says the project did not change.
    fn unchanged() -> Reading {
        Reading {
            changed: Some(false),
            baseline: None,
            method: crate::observe::progress::Method::Git,
        }
    }

    #[test]
    fn a_claim_with_refused_calls_and_no_change_is_not_complete() {
        let signal = config().completion_signal;
        let claim = |refused: Option<Vec<errors::Refusal>>, changed, incomplete| {
            let mut observed = saying(&format!("Wrote the notes.\n{signal}"));
            observed.refused_calls = refused;
            observed.progress = Reading {
                changed: Some(changed),
                ..unchanged()
            };
            observed.tools_incomplete = incomplete;
            observed
        };
        let with_requests = |mut observed: Observation, n: u64| {
            observed.usage.calls = (0..n).map(|i| NOW.secs() - i).collect();
            observed
        };
        let write = || {
            Some(vec![errors::Refusal::of_call(
                "Write",
                Some("/p/notes.txt"),
            )])
        };
        let mut refused_before = running(2, 25);
        refused_before
            .breaker
            .counters
            .set(breaker::Signal::PermissionDenied, 1);
        // (state, observation, completes)
        let cases = vec![
            (running(2, 25), claim(write(), false, false), false),
            (running(2, 25), claim(write(), true, false), true),
            (running(2, 25), claim(None, false, false), true),
            // Its calls not seen yet, the previous ones refused, no change.
            (refused_before.clone(), claim(None, false, true), false),
            (refused_before.clone(), claim(None, true, true), true),
            // Not seen, nothing refused before, one request: the answer alone.
            (running(2, 25), claim(None, false, true), true),
            // Not seen, but the iteration used tools (two requests), no change.
            (
                running(2, 25),
                with_requests(claim(None, false, true), 2),
                false,
            ),
            (
                running(2, 25),
                with_requests(claim(None, true, true), 2),
                true,
            ),
        ];
        for (i, (state, observed, completes)) in cases.into_iter().enumerate() {
            let claim = judge_claim(&config(), &state, &observed);
            let out = decide_judged(&config(), &state, &observed, &claim, NOW);
            let completed = out.verdict == Verdict::End(Status::Complete);
            assert_eq!(completed, completes, "case {i}: {:?}", out.verdict);
            if !completes {
                let record = out.new_state.unwrap().last_claim.unwrap();
                assert!(
                    record
                        .gates
                        .iter()
                        .any(|g| g.gate == completion::Gate::Permission && !g.passed),
                    "case {i}: {record:?}"
                );
            }
        }
    }

    #[test]
    fn passes_without_touching_state() {
        let ended = |status| {
            let mut s = running(3, 5);
            s.status = status;
            s
        };
        let mut other = saying("x");
        other.session_id = Some("someone-else".into());
        let mut anonymous = saying("x");
        anonymous.session_id = None;
        let cases: Vec<(Option<LoopState>, Observation, PassReason)> = vec![
            (None, saying("x"), PassReason::NoLoop),
            (
                Some(running(2, 5)),
                other,
                PassReason::OtherSession { owner: SID.into() },
            ),
            (Some(running(2, 5)), anonymous, PassReason::NoSessionId),
            (
                Some(ended(Status::Complete)),
                saying("x"),
                PassReason::LoopEnded(Status::Complete),
            ),
            (
                Some(ended(Status::MaxIterations)),
                saying("x"),
                PassReason::LoopEnded(Status::MaxIterations),
            ),
            (
                Some(ended(Status::CircuitOpen)),
                saying("x"),
                PassReason::LoopEnded(Status::CircuitOpen),
            ),
            (
                Some(ended(Status::Interrupted)),
                saying("x"),
                PassReason::LoopEnded(Status::Interrupted),
            ),
        ];
        for (state, observed, want) in cases {
            let out = decide(&config(), state.as_ref(), &observed, NOW);
            assert_eq!(out.verdict, Verdict::Pass(want));
            assert_eq!(out.new_state, None);
        }
    }

    #[test]
    fn verdict_table() {
        let signal = config().completion_signal;
        let cases: Vec<(u32, u32, String, Verdict)> = vec![
            (
                1,
                25,
                "Working.".into(),
                Verdict::Continue {
                    iteration: 2,
                    max_iterations: 25,
                    notice: None,
                },
            ),
            (
                24,
                25,
                "Working.".into(),
                Verdict::Continue {
                    iteration: 25,
                    max_iterations: 25,
                    notice: None,
                },
            ),
            (
                25,
                25,
                "Working.".into(),
                Verdict::End(Status::MaxIterations),
            ),
            (
                30,
                25,
                "Working.".into(),
                Verdict::End(Status::MaxIterations),
            ),
            (1, 1, "Working.".into(), Verdict::End(Status::MaxIterations)),
            (
                4,
                25,
                format!("Done.\n{signal}"),
                Verdict::End(Status::Complete),
            ),
            (
                25,
                25,
                format!("<promise>{signal}</promise>"),
                Verdict::End(Status::Complete),
            ),
            (
                3,
                25,
                "RALPH_ABORT: which account?".into(),
                Verdict::End(Status::Blocked),
            ),
            (
                3,
                25,
                format!("Done.\n{signal}\nRALPH_ABORT: but I need the key"),
                Verdict::End(Status::Blocked),
            ),
            (
                25,
                25,
                "---RALPH_STATUS---\nSTATUS: BLOCKED\n---END_RALPH_STATUS---".into(),
                Verdict::End(Status::Blocked),
            ),
            (
                3,
                25,
                format!("{signal}_PENDING"),
                Verdict::Continue {
                    iteration: 4,
                    max_iterations: 25,
                    notice: None,
                },
            ),
            (
                3,
                25,
                String::new(),
                Verdict::Continue {
                    iteration: 4,
                    max_iterations: 25,
                    notice: None,
                },
            ),
        ];
        for (iteration, max, message, want) in cases {
            let out = decide(
                &config(),
                Some(&running(iteration, max)),
                &saying(&message),
                NOW,
            );
            assert_eq!(
                out.verdict, want,
                "iteration {iteration}/{max}: {message:?}"
            );
            let state = out
                .new_state
                .expect("an owned running loop always records the stop");
            let record = state.history.last().unwrap();
            assert_eq!(record.iteration, iteration);
            assert_eq!(state.last_run_at, Some(NOW));
            match want {
                Verdict::Continue {
                    iteration: next, ..
                } => {
                    assert_eq!(state.iteration, next);
                    assert_eq!(state.status, Status::Running);
                    assert_eq!(record.decision, StopDecision::Block);
                }
                Verdict::End(status) => {
                    assert_eq!(
                        state.iteration, iteration,
                        "an ended loop stays at its last iteration"
                    );
                    assert_eq!(state.status, status);
                    assert_eq!(state.ended_at, Some(NOW));
                    assert_eq!(record.decision, StopDecision::Allow);
                }
                Verdict::Pass(_) | Verdict::Pause(_) | Verdict::Ask(_) => unreachable!(),
            }
        }
    }

    #[test]
    fn a_question_makes_the_loop_wait_and_the_session_s_next_stop_goes_on() {
        let asking =
            saying("The schema has two owners.\nRALPH_ASK: Which table owns the email column?");
        let out = decide(&config(), Some(&running(2, 5)), &asking, NOW);
        let state = out.new_state.unwrap();
        let question = Question {
            text: "Which table owns the email column?".into(),
            iteration: 2,
            at: NOW,
        };
        assert_eq!(out.verdict, Verdict::Ask(question.clone()));
        assert_eq!(state.status, Status::Waiting);
        assert_eq!(state.question, Some(question));
        assert_eq!(state.iteration, 3, "the answer goes to the next iteration");
        assert_eq!(state.history.last().unwrap().decision, StopDecision::Allow);
        assert!(
            state
                .history
                .last()
                .unwrap()
                .why
                .contains("the agent asks the person")
        );
        // The waiting loop's session stops again: the person spoke in it.
        let later = Timestamp::from_secs(NOW.secs() + 60);
        let out = decide(&config(), Some(&state), &saying("Working."), later);
        let resumed = out.new_state.unwrap();
        assert!(
            matches!(out.verdict, Verdict::Continue { iteration: 4, .. }),
            "{:?}",
            out.verdict
        );
        assert_eq!(
            (resumed.status, resumed.question.as_ref()),
            (Status::Running, None)
        );
        assert!(
            resumed
                .history
                .last()
                .unwrap()
                .why
                .starts_with("resumed in the session after the question of iteration 2")
        );
        // At the cap the loop ends as it would have: the question is in the history.
        let out = decide(&config(), Some(&running(5, 5)), &asking, NOW);
        assert_eq!(out.verdict, Verdict::End(Status::MaxIterations));
        // An abort stands over a question.
        let both = saying("RALPH_ASK: which key?\nRALPH_ABORT: no key");
        let out = decide(&config(), Some(&running(2, 5)), &both, NOW);
        assert_eq!(out.verdict, Verdict::End(Status::Blocked));
    }

    #[test]
    fn questions_and_their_answers_are_no_idle_iterations() {
        use crate::judge::breaker::Signal;
        let quiet = |message: &str| Observation {
            progress: unchanged(),
            ..saying(message)
        };
        let no_progress = |state: &LoopState| state.breaker.counters.get(Signal::NoProgress);
        // Idle: nothing changed, no tool: counted.
        let out = decide(&config(), Some(&running(2, 9)), &quiet("Done."), NOW);
        assert_eq!(no_progress(&out.new_state.unwrap()), 1);
        // A question, the session's stop that takes up the answer, again a
        // question and its answer: none counted, and the loop asks.
        let mut state = running(2, 9);
        for turn in 0..4u64 {
            let at = Timestamp::from_secs(NOW.secs() + 60 * turn);
            let message = if turn % 2 == 0 {
                "RALPH_ASK: Which table owns the email column?"
            } else {
                "Thanks, going on."
            };
            let out = decide(&config(), Some(&state), &quiet(message), at);
            state = out.new_state.unwrap();
            assert_eq!(no_progress(&state), 0, "turn {turn}: {:?}", out.verdict);
            if turn % 2 == 0 {
                assert!(matches!(out.verdict, Verdict::Ask(_)), "{:?}", out.verdict);
            }
        }
    }

    #[test]
    fn a_usage_window_at_pause_at_utilization_pauses_until_its_reset() {
        let reset = Timestamp::from_secs(NOW.secs() + 3_600);
        let window = |share: u32, resets_at: Option<Timestamp>| WindowUse {
            utilization: PerMille(share),
            resets_at,
            seen_at: NOW,
        };
        let seen = |windows: Vec<(&str, WindowUse)>| Observation {
            usage_windows: windows
                .into_iter()
                .map(|(n, w)| (n.to_string(), w))
                .collect(),
            ..saying("Working.")
        };
        let mut paced = config();
        paced.supervision.pause_at_utilization = Some(PerMille(800));
        let out = decide(
            &paced,
            Some(&running(2, 5)),
            &seen(vec![("five_hour", window(850, Some(reset)))]),
            NOW,
        );
        let state = out.new_state.unwrap();
        let Verdict::Pause(because) = &out.verdict else {
            panic!("{:?}", out.verdict)
        };
        assert_eq!(because.kind, PauseKind::Utilization);
        assert_eq!(because.resume_at, Some(reset));
        assert!(
            because.message.contains("five_hour usage window is at 85%"),
            "{}",
            because.message
        );
        assert_eq!((state.status, state.iteration), (Status::Paused, 3));
        assert_eq!(state.usage_windows["five_hour"].utilization, PerMille(850));
        // Until the reset, the session's stops pass; a hook never resumes it early.
        assert_eq!(
            decide(&paced, Some(&state), &saying("More."), NOW).verdict,
            Verdict::Pass(PassReason::LoopEnded(Status::Paused))
        );
        // Below the mark, with no reset to wait for, or with no mark: on.
        for (config, windows) in [
            (&paced, vec![("five_hour", window(799, Some(reset)))]),
            (&paced, vec![("five_hour", window(900, Some(NOW)))]),
            (&paced, vec![("five_hour", window(900, None))]),
            (&config(), vec![("five_hour", window(1000, Some(reset)))]),
        ] {
            let out = decide(config, Some(&running(2, 5)), &seen(windows.clone()), NOW);
            assert!(
                matches!(out.verdict, Verdict::Continue { .. }),
                "{windows:?}: {:?}",
                out.verdict
            );
        }
    }

    #[test]
    fn outcome_markers_count_errors_and_gate_blocks_in_a_row_and_no_item_claims() {
        let marker = |status: &str| {
            format!("Worked.\nRALPH_OUTCOME: {{\"status\": \"{status}\", \"itemId\": \"T-1\"}}")
        };
        // Each sequence of outcomes, and how the loop ends after the last one.
        let cases: &[(&[&str], Option<Status>)] = &[
            (&["error", "error"], Some(Status::ErrorBudgetExhausted)),
            (&["error", "terminal", "error"], None),
            (
                &["error", "skip", "error"],
                Some(Status::ErrorBudgetExhausted),
            ),
            (&["gate-blocked", "gate-blocked"], None),
            (
                &["gate-blocked", "gate-blocked", "gate-blocked"],
                Some(Status::GateBudgetExhausted),
            ),
            (&["gate-blocked", "error", "gate-blocked", "error"], None),
            (&["terminal", "no-item"], Some(Status::Complete)),
        ];
        for (sequence, ending) in cases {
            let mut state = LoopState::new(SID.into(), 25, NOW);
            let mut last = None;
            for status in *sequence {
                let out = decide(&config(), Some(&state), &saying(&marker(status)), NOW);
                last = match out.verdict {
                    Verdict::End(status) => Some(status),
                    _ => None,
                };
                state = out.new_state.unwrap();
            }
            assert_eq!(last, *ending, "{sequence:?}: {state:#?}");
            let record = state.history.last().unwrap();
            assert_eq!(record.item_id.as_deref(), Some("T-1"));
            assert_eq!(
                record
                    .outcome
                    .map(super::super::claims::OutcomeStatus::as_str),
                sequence.last().copied()
            );
        }
        // A marker that cannot be read is said in the next iteration's text.
        let state = LoopState::new(SID.into(), 25, NOW);
        let out = decide(
            &config(),
            Some(&state),
            &saying("RALPH_OUTCOME: {\"status\": \"done\"}"),
            NOW,
        );
        match out.verdict {
            Verdict::Continue {
                notice: Some(notice),
                ..
            } => {
                assert!(
                    notice.contains("RALPH_OUTCOME not understood") && notice.contains("\"done\""),
                    "{notice}"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_cut_off_iteration_counts_as_an_error_and_says_so_in_the_next_text() {
        let cut = |message: &str| Observation {
            cut_off: Some("no sign of work for 60 s".into()),
            ..saying(message)
        };
        let state = LoopState::new(SID.into(), 25, NOW);
        let out = decide(&config(), Some(&state), &cut(""), NOW);
        let state = out.new_state.unwrap();
        assert_eq!(state.outcome_errors, 1);
        assert_eq!(
            state.history.last().unwrap().outcome,
            Some(claims::OutcomeStatus::Error)
        );
        match out.verdict {
            Verdict::Continue {
                notice: Some(notice),
                ..
            } => assert!(
                notice.contains("the previous iteration was cut off")
                    && notice.contains("no sign of work for 60 s"),
                "{notice}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(
            state.history.last().unwrap().why.contains("was cut off"),
            "{:?}",
            state.history
        );
        // Twice in a row spends the default errorBudget (2).
        let out = decide(&config(), Some(&state), &cut(""), NOW);
        assert_eq!(out.verdict, Verdict::End(Status::ErrorBudgetExhausted));
        // A terminal item in between starts the count over.
        let state = LoopState::new(SID.into(), 25, NOW);
        let state = decide(&config(), Some(&state), &cut(""), NOW)
            .new_state
            .unwrap();
        let done = "Done.\nRALPH_OUTCOME: {\"status\": \"terminal\"}";
        let state = decide(&config(), Some(&state), &saying(done), NOW)
            .new_state
            .unwrap();
        let out = decide(&config(), Some(&state), &cut(""), NOW);
        assert!(matches!(out.verdict, Verdict::Continue { .. }), "{out:?}");
    }

    #[test]
    fn a_loop_that_never_completes_runs_exactly_max_iterations() {
        for max in [1, 2, 12, 25] {
            let mut state = LoopState::new(SID.into(), max, NOW);
            let mut blocks = 0;
            loop {
                let out = decide(&config(), Some(&state), &saying("Still working."), NOW);
                state = out.new_state.unwrap();
                match out.verdict {
                    Verdict::Continue { .. } => blocks += 1,
                    Verdict::End(status) => {
                        assert_eq!(status, Status::MaxIterations);
                        break;
                    }
                    Verdict::Pass(_) | Verdict::Pause(_) | Verdict::Ask(_) => {
                        panic!("unexpected pass")
                    }
                }
            }
            assert_eq!(blocks + 1, max, "iterations run");
            assert_eq!(state.iteration, max);
        }
    }

    #[test]
    fn stop_hook_active_is_recorded_not_obeyed() {
        let mut observed = saying("Working.");
        observed.stop_hook_active = true;
        let out = decide(&config(), Some(&running(2, 5)), &observed, NOW);
        assert_eq!(
            out.verdict,
            Verdict::Continue {
                iteration: 3,
                max_iterations: 5,
                notice: None
            }
        );
        assert!(out.new_state.unwrap().history[0].stop_hook_active);
    }

    /// Runs a sequence of findings reports through the decision and returns
    /// the iterations whose re-injection carried the breaker's warning, and the
    /// iteration at which the breaker opened, if it did.
    fn breaker_run(reports: &[Option<u64>], threshold: u32) -> (Vec<u32>, Option<u32>) {
        let mut config = Config::default();
        config.breaker = config
            .breaker
            .with(crate::judge::breaker::Signal::FindingsStuck, threshold);
        let mut state = running(1, 100);
        let mut warned = Vec::new();
        for report in reports {
            let message = match report {
                Some(n) => format!("Fixed one.\nRALPH_ITERATION_COMPLETE: {n} findings remain"),
                None => "No report.".to_string(),
            };
            let out = decide(&config, Some(&state), &saying(&message), NOW);
            let ended_at = state.iteration;
            state = out.new_state.unwrap();
            match out.verdict {
                Verdict::End(Status::CircuitOpen) => {
                    assert_eq!(
                        state.breaker.state,
                        crate::judge::breaker::BreakerState::Open
                    );
                    return (warned, Some(ended_at));
                }
                Verdict::Continue {
                    notice: Some(notice),
                    ..
                } => {
                    assert!(notice.contains("findings count stuck"), "{notice}");
                    warned.push(ended_at);
                }
                _ => {}
            }
        }
        (warned, None)
    }

    #[test]
    fn findings_breaker_table() {
        /// (findings reported per iteration, threshold, warned after, opened at)
        type Case<'a> = (&'a [Option<u64>], u32, &'a [u32], Option<u32>);
        let cases: &[Case] = &[
            (&[Some(5); 8], 3, &[4, 5], Some(6)),
            (&[Some(5), Some(5), Some(5)], 3, &[], None),
            (
                &[
                    Some(5),
                    Some(4),
                    Some(4),
                    Some(4),
                    Some(4),
                    Some(4),
                    Some(4),
                ],
                3,
                &[5, 6],
                Some(7),
            ),
            (
                &[Some(5), Some(5), Some(4), Some(4), Some(3), Some(3)],
                3,
                &[],
                None,
            ),
            (
                &[Some(5), Some(5), None, Some(5), Some(5), Some(5), Some(5)],
                3,
                &[5, 6],
                Some(7),
            ),
            (&[Some(2), Some(2), Some(2), Some(2)], 1, &[2, 3], Some(4)),
            (&[None, None, None, None, None], 1, &[], None),
            // Stuck, warned, then the count moves: the breaker closes again.
            (
                &[
                    Some(5),
                    Some(5),
                    Some(5),
                    Some(5),
                    Some(4),
                    Some(3),
                    Some(2),
                ],
                3,
                &[4],
                None,
            ),
        ];
        for (reports, threshold, warned, opened) in cases {
            assert_eq!(
                breaker_run(reports, *threshold),
                (warned.to_vec(), *opened),
                "{reports:?} threshold {threshold}"
            );
        }
    }

    #[test]
    fn breaker_transitions_are_recorded_in_the_history() {
        let mut state = running(1, 100);
        let mut transitions = Vec::new();
        for _ in 0..6 {
            let out = decide(
                &config(),
                Some(&state),
                &saying("RALPH_ITERATION_COMPLETE: 2 findings remain"),
                NOW,
            );
            state = out.new_state.unwrap();
            if let Some(t) = &state.history.last().unwrap().breaker {
                transitions.push(t.to_string());
            }
        }
        assert_eq!(transitions.len(), 2, "{transitions:?}");
        assert!(
            transitions[0].starts_with("closed → half_open: findings count stuck at 2"),
            "{}",
            transitions[0]
        );
        assert!(
            transitions[1].starts_with("half_open → open"),
            "{}",
            transitions[1]
        );
        assert_eq!(state.status, Status::CircuitOpen);
    }

    #[test]
    fn no_progress_opens_the_circuit_within_five_stops() {
        let mut state = running(1, 25);
        let mut verdicts = Vec::new();
        loop {
            let observed = Observation {
                progress: unchanged(),
                tool_calls: 1,
                failing_tool_results: vec!["error: could not compile `x`".into()],
                ..saying("The build still fails: error: could not compile `x`")
            };
            let out = decide(&config(), Some(&state), &observed, NOW);
            state = out.new_state.unwrap();
            verdicts.push(out.verdict.clone());
            if !matches!(out.verdict, Verdict::Continue { .. }) {
                break;
            }
        }
        assert_eq!(verdicts.len(), 5);
        assert_eq!(verdicts[4], Verdict::End(Status::CircuitOpen));
        let Verdict::Continue {
            notice: Some(notice),
            ..
        } = &verdicts[2]
        else {
            panic!("{:?}", verdicts[2]);
        };
        assert!(
            notice.starts_with(
                "[Ralph circuit breaker: half-open] Detected: no file changed in 3 iterations"
            ),
            "{notice}"
        );
        assert_eq!(
            state.history[0].error.as_deref(),
            Some("error: could not compile `x`")
        );
    }

    fn verify_config() -> Config {
        let mut config = Config::default();
        config.completion.verify = vec![crate::observe::verify::VerifyCommand {
            name: "tests".into(),
            command: "test -f done.txt".into(),
            timeout_seconds: 10,
            network: false,
        }];
        config
    }

    fn verified(exit: i32) -> Option<Vec<VerifyResult>> {
        Some(vec![VerifyResult {
            name: "tests".into(),
            command: "test -f done.txt".into(),
            exit_code: Some(exit),
            timed_out: false,
            duration_ms: 3,
            output_tail: format!("exit status {exit}"),
            counts: None,
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        }])
    }

    #[test]
    fn claims_and_gates_table() {
        let signal = Config::default().completion_signal;
        let open_plan = PlanReport {
            files: vec![crate::observe::plan::PlanFile {
                path: "TODO.md".into(),
                unchecked: vec!["document the API".into()],
                checked: 2,
            }],
        };
        // (message, plan, verification results, completes, notice must contain)
        /// (message, plan, verification results, completes, what the notice must name)
        type Case<'a> = (String, PlanReport, Option<Vec<VerifyResult>>, bool, &'a str);
        let cases: Vec<Case> = vec![
            (format!("Done.\n{signal}"), PlanReport::default(), verified(0), true, ""),
            (format!("Done.\n{signal}"), PlanReport::default(), verified(1), false, "`test -f done.txt` (tests) exited 1"),
            (format!("Done.\n{signal}"), PlanReport::default(), None, false, "did not run"),
            (format!("Done.\n{signal}"), open_plan.clone(), verified(0), false, "TODO.md: - [ ] document the API"),
            (format!("I will print {signal} once the tests pass."), PlanReport::default(), verified(0), false, ""),
            (
                "All tasks complete.\n---RALPH_STATUS---\nSTATUS: COMPLETE\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---".into(),
                PlanReport::default(),
                verified(0),
                false,
                "",
            ),
            (
                "---RALPH_STATUS---\nSTATUS: COMPLETE\nTESTS_STATUS: PASSING\nEXIT_SIGNAL: true\n---END_RALPH_STATUS---".into(),
                PlanReport::default(),
                verified(0),
                true,
                "",
            ),
            (
                "---RALPH_STATUS---\nSTATUS: COMPLETE\nTESTS_STATUS: FAILING\nEXIT_SIGNAL: true\n---END_RALPH_STATUS---".into(),
                PlanReport::default(),
                verified(0),
                false,
                "TESTS_STATUS is FAILING",
            ),
        ];
        for (message, plan, verification, completes, needle) in cases {
            let observed = Observation {
                plan,
                verification,
                ..saying(&message)
            };
            let out = decide(&verify_config(), Some(&running(3, 25)), &observed, NOW);
            let state = out.new_state.unwrap();
            if completes {
                assert_eq!(out.verdict, Verdict::End(Status::Complete), "{message:?}");
                assert!(state.last_claim.unwrap().accepted);
                continue;
            }
            let Verdict::Continue { notice, .. } = out.verdict else {
                panic!("{message:?}: {:?}", out.verdict);
            };
            if needle.is_empty() {
                assert_eq!(notice, None, "{message:?}");
            } else {
                let notice = notice.unwrap_or_default();
                assert!(
                    notice.starts_with("[Ralph: completion claim rejected]"),
                    "{notice}"
                );
                assert!(notice.contains(needle), "{needle:?} in {notice}");
                let claim = state.last_claim.unwrap();
                assert!(!claim.accepted);
                assert!(claim.gates.iter().any(|g| !g.passed));
                assert!(!state.history[0].claim.as_ref().unwrap().accepted);
            }
        }
    }

    #[test]
    fn each_rejected_claim_names_its_gate_and_the_first_line_of_why() {
        let signal = Config::default().completion_signal;
        let mut verification = verified(1).unwrap();
        verification[0].output_tail = "test parser ... FAILED\n1 failed".into();
        let observed = Observation {
            verification: Some(verification),
            ..saying(&format!("Done.\n{signal}"))
        };
        let out = decide(&verify_config(), Some(&running(1, 25)), &observed, NOW);
        let state = out.new_state.unwrap();
        let why = &state.history.last().unwrap().why;
        assert_eq!(
            why,
            "iteration 1 claimed completion but the claim failed its gates: verification gate: \
             `test -f done.txt` (tests) exited 1; last lines of its output"
        );
    }

    #[test]
    fn the_same_rejected_claim_opens_the_breaker_naming_what_the_check_printed() {
        let signal = Config::default().completion_signal;
        // (what the failing check printed, how the breaker's reason quotes it)
        for (output, ends) in [
            ("", "exited 1; it printed nothing)"),
            ("\n", "exited 1; it printed nothing)"),
            (
                "test parser ... FAILED\n1 failed",
                "exited 1; last lines of its output: / test parser ... FAILED / 1 failed)",
            ),
        ] {
            let mut state = running(1, 25);
            let mut reason = None;
            for _ in 0..5 {
                let mut verification = verified(1).unwrap();
                verification[0].output_tail = output.into();
                let observed = Observation {
                    verification: Some(verification),
                    ..saying(&format!("Done.\n{signal}"))
                };
                let out = decide(&verify_config(), Some(&state), &observed, NOW);
                state = out.new_state.unwrap();
                if out.verdict == Verdict::End(Status::CircuitOpen) {
                    reason = state.breaker.last_transition.map(|t| t.reason);
                    break;
                }
            }
            let reason = reason.expect("the breaker opened");
            let quoted = format!("(verification gate: `test -f done.txt` (tests) {ends}");
            assert!(
                reason.starts_with("the same completion claim was rejected ")
                    && reason.contains(&quoted),
                "{output:?}: {reason}"
            );
        }
    }

    #[test]
    fn a_claim_with_fewer_tests_than_the_baseline_goes_on_with_the_counts_named() {
        use crate::observe::test_counts::{CommandCounts, TestCounts};
        let signal = Config::default().completion_signal;
        let mut state = running(3, 25);
        state.test_baseline = vec![CommandCounts {
            command: "test -f done.txt".into(),
            counts: TestCounts::new(3, 1, 0),
            runners: Vec::new(),
        }];
        // (counts at the claim, allowFewerTests, completes)
        for (counts, allow, completes) in [
            (TestCounts::new(3, 0, 0), false, false),
            (TestCounts::new(3, 0, 1), false, false),
            (TestCounts::new(4, 0, 0), false, true),
            (TestCounts::new(3, 0, 0), true, true),
        ] {
            let mut verification = verified(0).unwrap();
            verification[0].counts = Some(counts);
            let observed = Observation {
                verification: Some(verification),
                ..saying(&format!("Done.\n{signal}"))
            };
            let mut config = verify_config();
            config.completion.allow_fewer_tests = allow;
            let out = decide(&config, Some(&state), &observed, NOW);
            let next = out.new_state.unwrap();
            let claim = next.last_claim.unwrap();
            assert_eq!(claim.accepted, completes, "{counts:?}");
            assert_eq!(claim.verification[0].counts, Some(counts));
            if completes {
                assert_eq!(out.verdict, Verdict::End(Status::Complete));
                continue;
            }
            let failed: Vec<_> = claim
                .gates
                .iter()
                .filter(|g| !g.passed)
                .map(|g| g.gate)
                .collect();
            assert_eq!(failed, vec![completion::Gate::TestCount]);
            let Verdict::Continue { notice, .. } = out.verdict else {
                panic!("{:?}", out.verdict);
            };
            let notice = notice.unwrap();
            assert!(
                notice.contains(&format!(
                    "verify `test -f done.txt` ran 3 tests (baseline 4) and skipped {} (baseline 0)",
                    counts.skipped
                )),
                "{notice}"
            );
        }
    }

    #[test]
    fn status_block_fields_are_recorded() {
        let message = "---RALPH_STATUS---\nSTATUS: IN_PROGRESS\nWORK_TYPE: IMPLEMENTATION\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---";
        let out = decide(&config(), Some(&running(1, 5)), &saying(message), NOW);
        let record = &out.new_state.unwrap().history[0];
        let block = record.status_block.as_ref().unwrap();
        assert_eq!(block.status.as_deref(), Some("IN_PROGRESS"));
        assert_eq!(block.work_type.as_deref(), Some("IMPLEMENTATION"));
        assert_eq!(block.exit_signal, Some(false));
    }

    #[test]
    fn three_test_only_iterations_add_a_nudge() {
        let mut state = running(1, 25);
        let mut nudged = Vec::new();
        for _ in 0..4 {
            let observed = Observation {
                progress: unchanged(),
                ..saying("Ran the test suite again: 120 passed.")
            };
            let out = decide(&config(), Some(&state), &observed, NOW);
            let ended = state.iteration;
            state = out.new_state.unwrap();
            if let Verdict::Continue {
                notice: Some(n), ..
            } = out.verdict
            {
                assert!(n.contains("iterations only ran tests"), "{n}");
                nudged.push(ended);
            }
        }
        assert_eq!(nudged, vec![3, 4]);
        let reset = Observation {
            progress: Reading {
                changed: Some(true),
                ..unchanged()
            },
            ..saying("Implemented the lexer.")
        };
        let out = decide(&config(), Some(&state), &reset, NOW);
        assert_eq!(out.new_state.unwrap().test_only_iterations, 0);
    }

    #[test]
    fn findings_are_recorded() {
        let out = decide(
            &config(),
            Some(&running(1, 5)),
            &saying("RALPH_ITERATION_COMPLETE: 7 findings remain"),
            NOW,
        );
        let state = out.new_state.unwrap();
        assert_eq!(state.last_findings_count, Some(7));
        assert_eq!(state.history[0].findings, Some(7));
    }

    #[test]
    fn completion_wins_over_cap_and_breaker() {
        let signal = config().completion_signal;
        let mut state = running(25, 25);
        state.last_findings_count = Some(0);
        state.breaker.state = crate::judge::breaker::BreakerState::HalfOpen;
        state.breaker.half_open_iterations = 10;
        let message = format!("RALPH_ITERATION_COMPLETE: 0 findings remain\n{signal}");
        let out = decide(&config(), Some(&state), &saying(&message), NOW);
        assert_eq!(out.verdict, Verdict::End(Status::Complete));
    }

    #[test]
    fn extreme_counters_of_a_hand_edited_state_saturate() {
        let mut state = running(u32::MAX - 1, u32::MAX);
        state.last_findings_count = Some(4);
        state.breaker.state = crate::judge::breaker::BreakerState::HalfOpen;
        state.breaker.half_open_iterations = u32::MAX;
        state
            .breaker
            .counters
            .set(crate::judge::breaker::Signal::FindingsStuck, u32::MAX);
        state
            .breaker
            .counters
            .set(crate::judge::breaker::Signal::NoProgress, u32::MAX);
        state.test_only_iterations = u32::MAX;
        let out = decide(
            &config(),
            Some(&state),
            &saying("RALPH_ITERATION_COMPLETE: 4 findings remain"),
            NOW,
        );
        assert_eq!(out.verdict, Verdict::End(Status::CircuitOpen));
        let state = out.new_state.unwrap();
        assert_eq!(
            state
                .breaker
                .counters
                .get(crate::judge::breaker::Signal::FindingsStuck),
            u32::MAX
        );
    }

    fn secs(t: &str) -> u64 {
        crate::time::parse_rfc3339(t)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn the_calls_per_hour_cap_pauses_the_loop_until_the_window_frees() {
        let config = Config {
            supervision: crate::judge::config::SupervisionConfig {
                max_calls_per_hour: Some(3),
                ..Default::default()
            },
            ..Config::default()
        };
        let mut state = running(2, 10);
        let mut observed = saying("Still working.");
        observed.usage.calls = vec![secs("2026-11-22T09:59:10Z"), secs("2026-11-22T09:59:40Z")];
        observed.usage.tokens.input = 500;
        // Two requests: under the cap, the loop goes on and counts them.
        let out = decide(&config, Some(&state), &observed, NOW);
        assert!(matches!(
            out.verdict,
            Verdict::Continue { iteration: 3, .. }
        ));
        state = out.new_state.unwrap();
        assert_eq!(state.calls_in_last_hour(NOW.secs()), 2);
        assert_eq!(state.history.last().unwrap().calls, 2);
        assert_eq!(state.usage.input, 500);
        // The third reaches it: the stop is let through, the loop paused at
        // the next iteration until the minute of the oldest leaves the hour.
        observed.usage.calls = vec![secs("2026-11-22T09:59:55Z")];
        let out = decide(&config, Some(&state), &observed, NOW);
        let Verdict::Pause(because) = &out.verdict else {
            panic!("{:?}", out.verdict)
        };
        assert_eq!(because.kind, PauseKind::CallsPerHour);
        assert_eq!(because.resume_at, Timestamp::parse("2026-11-22T11:00:00Z"));
        let paused = out.new_state.unwrap();
        assert_eq!(paused.status, Status::Paused);
        assert_eq!(
            paused.iteration, 4,
            "the next iteration runs when it resumes"
        );
        assert_eq!(paused.history.last().unwrap().decision, StopDecision::Allow);
        // A stop of the session before then is let through untouched.
        let early = decide(&config, Some(&paused), &saying("x"), NOW);
        assert_eq!(
            early.verdict,
            Verdict::Pass(PassReason::LoopEnded(Status::Paused))
        );
        assert!(early.new_state.is_none());
        // After it, the loop goes on (an interactive session carried on).
        let later = decide(
            &config,
            Some(&paused),
            &saying("x"),
            Timestamp::parse("2026-11-22T11:00:01Z").unwrap(),
        );
        assert!(matches!(
            later.verdict,
            Verdict::Continue { iteration: 5, .. }
        ));
        let resumed = later.new_state.unwrap();
        assert_eq!(resumed.status, Status::Running);
        assert_eq!(resumed.paused_because, None);
        assert!(
            resumed
                .history
                .last()
                .unwrap()
                .why
                .starts_with("resumed after the pause (calls_per_hour")
        );
    }

    #[test]
    fn an_iteration_that_ended_on_an_api_error_pauses_and_is_not_judged() {
        let mut state = running(3, 10);
        state.auto_resumes = 2;
        let mut observed = saying(&format!(
            "API Error: 529 Overloaded\n{}",
            crate::judge::config::DEFAULT_COMPLETION_SIGNAL
        ));
        observed.message_source = MessageSource::Transcript;
        observed.api_failure = Some(ApiErrorMessage {
            error: Some("unknown".into()),
            status: Some(529),
        });
        let out = decide(&config(), Some(&state), &observed, NOW);
        let Verdict::Pause(because) = &out.verdict else {
            panic!("{:?}", out.verdict)
        };
        assert_eq!(
            because.kind,
            PauseKind::Overloaded,
            "2.0's `unknown` read from the status"
        );
        assert_eq!(because.http_status, Some(529));
        state = out.new_state.unwrap();
        assert_eq!(state.status, Status::Paused);
        assert_eq!(state.iteration, 3, "the same iteration is worked on again");
        assert_eq!(state.last_claim, None, "the error text is never judged");
        assert_eq!(state.auto_resumes, 2, "no finished iteration");
        // The next real stop takes the loop up again and counts as finished.
        let out = decide(&config(), Some(&state), &saying("Fixed it."), NOW);
        assert!(matches!(
            out.verdict,
            Verdict::Continue { iteration: 4, .. }
        ));
        let state = out.new_state.unwrap();
        assert_eq!(state.status, Status::Running);
        assert_eq!(state.auto_resumes, 0);
    }
}
