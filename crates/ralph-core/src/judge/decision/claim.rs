//! A claim of done judged: its gates ([`claim_gates`], what `ralph-ctl
//! check` shows too), what the state keeps of it and what the agent is
//! told; and the signs around it (tests only, a stop judged before the
//! transcript caught up).

use super::*;

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
pub(super) fn rejection(gates: &[GateResult]) -> Option<ErrorSighting> {
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
pub(super) fn failed_gates_said(gates: &[GateResult]) -> String {
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

/// A claim judged against its gates: the record kept in the state, what
/// the history says of it, and what the agent is told.
pub(super) struct CompletionJudged {
    pub(super) accepted: bool,
    pub(super) record: ClaimRecord,
    pub(super) outcome: ClaimOutcome,
    pub(super) rejected: Option<errors::ErrorSighting>,
    pub(super) accepted_summary: String,
    pub(super) notice: Option<String>,
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
pub(super) fn sandboxed(state: &LoopState) -> bool {
    state.run_mode.as_ref().is_some_and(|mode| mode.sandboxed)
}

/// Runs the completion gates on a claim ([`claim_gates`]) and says what
/// the state keeps of it and what the agent is told.
pub(super) fn judge_completion(
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
