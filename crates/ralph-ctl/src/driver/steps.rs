//! A formula's steps on the fresh-context loop (`ralph-ctl run --formula`):
//! what each iteration runs (the step's prompt, model, gates and autofix)
//! and what the judged iteration means for the run, decided inside the
//! engine's stop, under its lock, before the state is written
//! ([`settle`], through `engine::run_stop_settled`): its step's count and
//! cost, its gates' results, the run ended `gate_failed` (a gate failed
//! past its retries) or at the step's `maxIterations`, or, when the step's
//! claim passed and a step follows, the loop taken on to that step instead
//! of ending `complete`.

use ralph_core::events::{Draft, Event};
use ralph_core::judge::config::Config;
use ralph_core::judge::state::{ClaimRecord, FormulaRun, GateRun, LoopState, Status};
use ralph_core::observe::prompt_text;
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::Usd;
use ralph_core::walls::WallsWanted;

use crate::error::CtlError;
use crate::formula::{Formula, Step};

/// What the driver does after a formula iteration.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StepNext {
    /// As the engine judged: go on in the step, or stop.
    AsJudged,
    /// The step passed: the next step starts with this text.
    NextStep {
        /// Its first iteration's text.
        text: String,
    },
    /// The run ended here (a gate past its retries, a step's cap).
    Ended,
}

/// Records the formula run in a started loop of `session`, whose checks
/// are walled as `walls` says.
pub(crate) fn begin(
    paths: &ProjectPaths,
    session: &str,
    formula: &Formula,
    from: Option<&str>,
    walls: WallsWanted,
) -> Result<(), CtlError> {
    let mut run = formula.new_run();
    if let Some(step) = from {
        run.restart_at(step)
            .map_err(|e| CtlError::BadArgument(e.to_string()))?;
    }
    // What the gates resolve to, as the verify commands' at the start: a
    // claim must run the same.
    let gates: Vec<_> = formula
        .steps
        .iter()
        .flat_map(|s| s.gates.iter().map(crate::formula::Gate::as_verify))
        .collect();
    let walls = ralph_core::engine::check_walls(&paths.root, &paths.root, walls);
    let gates_resolved = ralph_core::observe::resolved::resolve(&paths.root, &gates, None, &walls);
    let changed = transaction::change(paths, Whose::Session(session), |draft| {
        draft.apply(Event::FormulaRecorded(Box::new(run)));
        draft.apply(Event::FormulaPinned(Box::new(crate::formula::pin(
            paths, formula,
        ))));
        if !gates.is_empty() {
            draft.apply(Event::ChecksResolved(Box::new(gates_resolved)));
        }
        Ok::<_, CtlError>(())
    })?;
    super::told(changed);
    Ok(())
}

/// The formula run of `session`'s loop moved to `step` (`run --resume
/// --from STEP`) and handed over to a new session (the conversation taken
/// up was another step's), in one transaction: the new session. Refused
/// with the step ids when the loop runs no formula or has no such step.
pub(crate) fn restart_at(
    paths: &ProjectPaths,
    session: &str,
    step: &str,
) -> Result<String, CtlError> {
    let next = crate::session_id::new_uuid();
    let changed = transaction::change(paths, Whose::Session(session), |draft| {
        let Some(mut run) = draft.state().and_then(|s| s.formula.clone()) else {
            return Err(CtlError::BadArgument(format!(
                "--from {step}: the loop taken up runs no formula"
            )));
        };
        run.restart_at(step)
            .map_err(|e| CtlError::BadArgument(format!("--from {step:?}: {e}")))?;
        draft.apply(Event::FormulaRecorded(Box::new(run)));
        draft.apply(Event::HandedOver { to: next.clone() });
        Ok(())
    })?;
    let state = super::told(changed);
    match state {
        Found::Loop(state) if state.session_id == next => Ok(next),
        _ => Err(CtlError::BadArgument(format!(
            "--from {step}: the loop could not be moved to a new session (it is no longer running)"
        ))),
    }
}

/// The step the loop's formula run is at.
pub(crate) fn current<'a>(formula: &'a Formula, state: &LoopState) -> &'a Step {
    let at = state.formula.as_ref().map_or(0, |run| run.step);
    &formula.steps[at.min(formula.steps.len() - 1)]
}

/// The text of the step's iteration `iteration`, with `notice` on top.
pub(crate) fn step_text(
    paths: &ProjectPaths,
    config: &Config,
    step: &Step,
    iteration: u32,
    max_iterations: u32,
    notice: Option<&str>,
) -> Result<String, CtlError> {
    let guardrails = prompt_text::read_guardrails(&paths.guardrails_file())?;
    Ok(prompt_text::iteration_text(
        &config.completion_signal,
        iteration,
        max_iterations,
        notice,
        &step.prompt,
        guardrails.as_deref(),
    ))
}

/// What the engine's decided state means for the formula run (see the
/// module's doc), as events applied to the stop's draft before it is
/// written: called inside `engine::run_stop_settled`'s transaction. `cost`
/// is what the iteration cost. How the driver goes on is returned.
pub(crate) fn settle(
    paths: &ProjectPaths,
    config: &Config,
    draft: &mut Draft,
    formula: &Formula,
    iteration: u32,
    cost: Option<f64>,
) -> StepNext {
    let Some(state) = draft.state() else {
        return StepNext::AsJudged;
    };
    let (next, events) = record(paths, config, state, formula, iteration, cost, draft.now())
        .unwrap_or_else(|e| {
            crate::output::say_err!(
                "ralph-ctl: warning: the next step's text could not be made: {e}"
            );
            (StepNext::AsJudged, Vec::new())
        });
    for event in events {
        draft.apply(event);
    }
    next
}

/// Counts the step's `gates` that ran with `claim`: whether each passed,
/// and its failures; the first that failed past its retries, with its
/// failures, retries and last output.
fn count_gates(gates: &mut [GateRun], claim: &ClaimRecord) -> Option<(String, u32, u32, String)> {
    let mut past_retries = None;
    for gate in gates {
        let Some(result) = claim.verification.iter().find(|r| r.name == gate.name) else {
            continue;
        };
        gate.passed = Some(result.passed());
        if !result.passed() {
            gate.failures = gate.failures.saturating_add(1);
            if gate.failures > gate.retries && past_retries.is_none() {
                past_retries = Some((
                    gate.name.clone(),
                    gate.failures,
                    gate.retries,
                    result.output_tail.clone(),
                ));
            }
        }
    }
    past_retries
}

/// [`settle`]'s decision: how the driver goes on, and the events that
/// record it (the step's counts and gates, and the run's ending or its
/// next step, which the stop's own line in the history and the log says).
fn record(
    paths: &ProjectPaths,
    config: &Config,
    state: &LoopState,
    formula: &Formula,
    iteration: u32,
    cost: Option<f64>,
    now: ralph_core::time::Timestamp,
) -> Result<(StepNext, Vec<Event>), CtlError> {
    let claim = state
        .last_claim
        .as_ref()
        .filter(|claim| claim.iteration == iteration);
    let status = state.status;
    let max_iterations = state.max_iterations;
    let Some(mut run) = state.formula.clone() else {
        return Ok((StepNext::AsJudged, Vec::new()));
    };
    let at = run.step.min(run.steps.len().saturating_sub(1));
    let step = &formula.steps[at.min(formula.steps.len() - 1)];
    let record = &mut run.steps[at];
    record.iterations = record.iterations.saturating_add(1);
    if let Some(cost) = cost {
        record.cost_usd = Usd(record.cost_usd.0.saturating_add(Usd::from_dollars(cost).0));
    }
    // The step's gates ran with the claim (beside the project's verify).
    let past_retries = claim.and_then(|claim| count_gates(&mut record.gates, claim));
    let step_id = record.id.clone();
    let step_iterations = record.iterations;
    let ended = |run: FormulaRun, status: Status, why: String, at: Option<u32>| {
        let events = vec![
            Event::FormulaRecorded(Box::new(run)),
            Event::StepEnded { status, why, at },
        ];
        Ok((StepNext::Ended, events))
    };
    if status == Status::Complete {
        record.completed_at = Some(now);
        let Some(following) = formula.steps.get(at + 1) else {
            return Ok((
                StepNext::AsJudged,
                vec![Event::FormulaRecorded(Box::new(run))],
            ));
        };
        if iteration >= max_iterations {
            let why = format!(
                "step {step_id} passed its gates at iteration {iteration}, but the run's iteration cap \
                 ({max_iterations}) leaves no iteration for step {} {}",
                at + 2,
                following.id
            );
            return ended(run, Status::MaxIterations, why, None);
        }
        run.step = at + 1;
        let position = run.position();
        let notice = format!(
            "[Ralph formula {}: step {step_id} is done] Now {position}: a new step, with the task below.",
            formula.name
        );
        let why = format!(
            "step {step_id} passed its gates; {position} starts at iteration {}",
            iteration + 1
        );
        let text = step_text(
            paths,
            config,
            following,
            iteration + 1,
            max_iterations,
            Some(&notice),
        )?;
        let events = vec![
            Event::FormulaRecorded(Box::new(run)),
            Event::StepPassed {
                iteration: iteration + 1,
                why,
            },
        ];
        return Ok((StepNext::NextStep { text }, events));
    }
    let recorded = vec![Event::FormulaRecorded(Box::new(run.clone()))];
    if status != Status::Running {
        return Ok((StepNext::AsJudged, recorded));
    }
    if let Some((gate, failures, retries, output)) = past_retries {
        let output = crate::driver::live::excerpt(&output);
        let why = format!(
            "gate {gate} of step {step_id} failed {failures} times, more than its retries ({retries}); its last output: {output}"
        );
        // An ended loop stays at its last iteration.
        return ended(run, Status::GateFailed, why, Some(iteration));
    }
    if let Some(max) = step.max_iterations.filter(|max| step_iterations >= *max) {
        let why = format!(
            "step {step_id} reached its maxIterations ({max}) without its claim passing its gates"
        );
        return ended(run, Status::MaxIterations, why, Some(iteration));
    }
    Ok((StepNext::AsJudged, recorded))
}

/// The client arguments of an iteration: the formula step's `--model`
/// first, then the person's.
pub(crate) fn with_model(
    step: Option<&crate::formula::Step>,
    client_args: &[std::ffi::OsString],
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = step
        .and_then(|s| s.model.as_deref())
        .map(|model| vec!["--model".into(), model.into()])
        .unwrap_or_default();
    args.extend(client_args.iter().cloned());
    args
}

/// Runs a formula step's autofix command in the folder the iteration
/// worked in, before the gates; says how it went (a failure is only said:
/// the gates judge the result).
pub(crate) fn run_autofix(
    command: &str,
    project: &std::path::Path,
    root: &std::path::Path,
    walls: ralph_core::walls::WallsWanted,
) {
    let fix = ralph_core::observe::verify::VerifyCommand {
        name: "autofix".into(),
        command: command.to_string(),
        timeout_seconds: crate::formula::DEFAULT_GATE_TIMEOUT_SECS,
        network: false,
    };
    let walls = ralph_core::engine::check_walls(project, root, walls);
    let result = ralph_core::observe::verify::run(root, &fix, &walls);
    let how = if result.passed() {
        "done".to_string()
    } else if result.timed_out {
        format!("timed out after {} s", fix.timeout_seconds)
    } else {
        format!(
            "exit {}: {}",
            result.exit_code.map_or("?".into(), |c| c.to_string()),
            crate::driver::live::excerpt(&result.output_tail)
        )
    };
    super::say(&format!("autofix `{command}`: {how}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formula;
    use ralph_core::judge::state::ClaimRecord;
    use std::path::Path;

    fn feature() -> Formula {
        formula::parse(
            "steps:\n  - id: a\n    prompt: Do a.\n    maxIterations: 2\n  - id: b\n    prompt: Do b.\n    gates:\n      - { name: g, command: 'false', retries: 0 }\n",
            Path::new("/p/f.yaml"),
            "f",
        )
        .unwrap()
    }

    fn running(formula: &Formula, iteration: u32, max: u32) -> LoopState {
        let mut state = LoopState::new("s".into(), max, ralph_core::time::Timestamp::from_secs(0));
        state.iteration = iteration;
        state.formula = Some(formula.new_run());
        state
    }

    fn after(state: &mut LoopState, formula: &Formula, iteration: u32) -> StepNext {
        let dir = crate::testdir::new("steps");
        let paths = ProjectPaths::new(dir.path());
        let mut draft = Draft::new(
            Some(state.clone()),
            ralph_core::time::Timestamp::from_secs(1),
        );
        let next = settle(
            &paths,
            &Config::default(),
            &mut draft,
            formula,
            iteration,
            Some(0.5),
        );
        *state = draft.finish().state.unwrap();
        next
    }

    #[test]
    fn a_step_ends_the_run_at_its_own_cap() {
        let formula = feature();
        let mut state = running(&formula, 2, 25);
        assert_eq!(after(&mut state, &formula, 1), StepNext::AsJudged);
        assert_eq!(after(&mut state, &formula, 2), StepNext::Ended);
        let ended = state.clone();
        assert_eq!(ended.status, Status::MaxIterations);
        assert!(
            ended
                .ended_because
                .unwrap()
                .contains("step a reached its maxIterations (2)")
        );
        let run = state.formula.unwrap();
        assert_eq!(run.steps[0].iterations, 2);
        assert_eq!(run.steps[0].cost_usd, Usd::from_dollars(1.0));
    }

    #[test]
    fn a_passed_step_starts_the_next_unless_the_run_s_cap_is_reached() {
        let formula = feature();
        let mut state = running(&formula, 1, 25);
        state.end(
            Status::Complete,
            "claim accepted".into(),
            ralph_core::time::Timestamp::from_secs(1),
        );
        let StepNext::NextStep { text } = after(&mut state, &formula, 1) else {
            panic!("{state:?}");
        };
        assert!(
            text.contains("Do b.") && text.contains("step a is done"),
            "{text}"
        );
        assert_eq!(state.status, Status::Running);
        assert_eq!(state.iteration, 2);
        assert_eq!(state.ended_at, None);
        let run = state.formula.as_ref().unwrap();
        assert_eq!((run.step, run.position()), (1, "step 2/2 b".to_string()));
        assert!(run.steps[0].completed_at.is_some());

        let mut capped = running(&formula, 3, 3);
        capped.end(
            Status::Complete,
            "claim accepted".into(),
            ralph_core::time::Timestamp::from_secs(1),
        );
        assert_eq!(after(&mut capped, &formula, 3), StepNext::Ended);
        assert_eq!(capped.status, Status::MaxIterations);
    }

    #[test]
    fn a_gate_with_no_retries_ends_the_run_at_its_first_failure() {
        let formula = feature();
        let mut state = running(&formula, 4, 25);
        state.formula.as_mut().unwrap().step = 1;
        state.last_claim = Some(ClaimRecord {
            iteration: 3,
            at: ralph_core::time::Timestamp::from_secs(1),
            mode: ralph_core::judge::completion::CompletionMode::Strict,
            basis: "the completion signal".into(),
            score: None,
            gates: Vec::new(),
            accepted: false,
            verification: vec![ralph_core::observe::verify::VerifyResult {
                name: "g".into(),
                command: "false".into(),
                exit_code: Some(1),
                timed_out: false,
                duration_ms: 1,
                output_tail: "nope".into(),
                counts: None,
                by_runner: Vec::new(),
                failure_headers: Vec::new(),
            }],
        });
        assert_eq!(after(&mut state, &formula, 3), StepNext::Ended);
        let ended = state.clone();
        assert_eq!(ended.status, Status::GateFailed);
        assert_eq!(
            ended.iteration, 3,
            "an ended loop stays at its last iteration"
        );
        assert!(ended.ended_because.unwrap().contains(
            "gate g of step b failed 1 times, more than its retries (0); its last output: nope"
        ));
    }
}
