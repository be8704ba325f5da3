//! The fresh-context loop (`ralph-ctl run --fresh`, `contextMode: fresh`):
//! one headless client process, with a session of its own, per iteration.
//! The Stop hook stays out of it (the client runs without `RALPH_ACTIVE`);
//! once a process has ended its turn, the driver judges the iteration with
//! the very sequence the hook runs ([`engine::run_stop`]), so claims, gates,
//! the breaker and the log are the same in both modes. A blocked stop's text
//! (header, PROMPT.md, guardrails, a rejected claim's failures, the
//! breaker's notice) is the next process's prompt, and the loop is handed
//! over to that process's new session.

use ralph_core::engine::{self, Answer, Stop, World};
use ralph_core::events::{Draft, Event};
use ralph_core::judge::config::EnvSource;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::Usd;

use super::result::ClientResult;
use super::steps::StepNext;
use super::transcripts;
use crate::error::CtlError;

/// What the judged iteration leads to.
#[derive(Debug)]
pub(crate) enum Judged {
    /// The loop goes on: the next process gets this text.
    Continue {
        /// Header, PROMPT.md, guardrails and notices.
        text: String,
    },
    /// The loop ended, or paused, or is no longer this driver's.
    Stopped,
}

/// The engine's stop for a fresh iteration of `session` that ended with
/// `result` (`None`: cut off before its result): its final message, its
/// transcript and the client's own account of its refusals. The driver
/// sets the rest (the worktree it ran in, a step's task and checks, the
/// plans that gate no claim, the usage windows it saw) on the stop itself.
pub(crate) fn stop_of(session: &str, result: Option<&ClientResult>) -> Stop {
    Stop {
        session_id: Some(session.to_string()),
        last_assistant_message: result.and_then(|r| r.result.clone()),
        transcript_path: transcripts::of_session(session),
        permission_denials: result.and_then(|r| r.permission_denials.clone()),
        // Settled in the stop's own transaction (conclude).
        driver_settles: false,
        ..Stop::default()
    }
}

/// How the driver goes on after a fresh iteration.
#[derive(Debug)]
pub(crate) struct Concluded {
    /// What the iteration led to.
    pub(crate) judged: Judged,
    /// The session the loop was handed over to, when it goes on.
    pub(crate) next_session: Option<String>,
    /// The loop as the iteration left it.
    pub(crate) state: Option<LoopState>,
}

/// A driver's rules inside the stop (a formula's steps): they apply their
/// events to the stop's draft and say how the driver goes on.
pub(crate) type StepRules<'a> = dyn FnMut(&mut Draft) -> StepNext + 'a;

/// Where an iteration is judged: the project, the run's settings over the
/// environment, and the world the engine observes.
pub(crate) struct Judging<'a> {
    /// The loop's project (or queue item's).
    pub(crate) paths: &'a ProjectPaths,
    /// The run's settings over the environment.
    pub(crate) env: &'a dyn EnvSource,
    /// What the engine reads and runs.
    pub(crate) world: &'a dyn World,
}

/// Concludes the iteration the client process of `session` just ended, in
/// one transaction on the loop: judged as the Stop hook would have at its
/// stop (its final message is the result's; a cut-off process has none and
/// the engine counts it as an error), then, under the same lock, the
/// driver's step rules, the process's cost (its own session's total: a new
/// session each iteration; nothing is known of a process cut off before
/// its result), the budget, and, when the loop goes on, the hand-over to
/// the next process's new session. Notes the engine has for the person go
/// to `say`.
pub(crate) fn conclude(
    judging: Judging<'_>,
    stop: &Stop,
    result: Option<&ClientResult>,
    rules: &mut StepRules<'_>,
    max_cost: Option<Usd>,
    say: &mut dyn FnMut(&str),
) -> Result<Concluded, CtlError> {
    let paths = judging.paths;
    let session = stop.session_id.as_deref().unwrap_or_default();
    let mut next_step = StepNext::AsJudged;
    let mut next_session = None;
    let mut settle = |draft: &mut Draft, answer: &Answer| {
        next_step = rules(draft);
        settle_iteration(draft, result, max_cost);
        let goes_on = matches!(answer, Answer::Block { .. })
            || matches!(next_step, StepNext::NextStep { .. });
        if goes_on {
            next_session = hand_over_in(draft);
        }
    };
    let mut answer = None;
    let report = engine::run_stop_settled(
        judging.paths,
        judging.env,
        stop,
        judging.world,
        &mut settle,
        &mut |a| {
            answer = Some(a.clone());
            Ok(())
        },
    )
    .map_err(|e| CtlError::Client(format!("the iteration could not be judged: {e}")))?;
    for note in &report.notes {
        say(note);
    }
    let state = if report.settled {
        StateStore::new(paths).read()?
    } else {
        // The stop never reached the loop (it ended or changed hands
        // meanwhile): what the process cost is still the loop's.
        let changed = transaction::change(paths, Whose::Session(session), |draft| {
            settle_iteration(draft, result, max_cost);
            Ok::<_, CtlError>(())
        })?;
        match super::told(changed) {
            Found::Loop(state) => Some(*state),
            _ => StateStore::new(paths).read()?,
        }
    };
    let judged = match (next_step, answer, &next_session) {
        (_, _, None) => Judged::Stopped,
        (StepNext::NextStep { text }, _, Some(_)) => Judged::Continue { text },
        (_, Some(Answer::Block { reason, .. }), Some(_)) => Judged::Continue { text: reason },
        _ => Judged::Stopped,
    };
    Ok(Concluded {
        judged,
        next_session,
        state,
    })
}

/// Hands the running loop over from the session `from` to a new session,
/// carried by this driver with no client yet; returns that session, or
/// `None` when the loop is no longer `from`'s or no longer running.
pub(crate) fn hand_over(paths: &ProjectPaths, from: &str) -> Result<Option<String>, CtlError> {
    let mut next = None;
    let changed = transaction::change(paths, Whose::Session(from), |draft| {
        next = hand_over_in(draft);
        Ok::<_, CtlError>(())
    })?;
    super::told(changed);
    Ok(next)
}

/// In `draft`: a running loop handed over to a new session, carried by this
/// driver with no client yet; returns that session.
pub(crate) fn hand_over_in(draft: &mut Draft) -> Option<String> {
    if !draft.state().is_some_and(|s| s.status == Status::Running) {
        return None;
    }
    let next = crate::session_id::new_uuid();
    draft.apply(Event::HandedOver { to: next.clone() });
    draft.apply(Event::Carried(Some(super::carriers::with_client(None))));
    Some(next)
}

/// The process's cost charged, and the loop ended `budget_exhausted` when
/// that spends its budget.
fn settle_iteration(draft: &mut Draft, result: Option<&ClientResult>, max_cost: Option<Usd>) {
    // A new session each iteration: the run's own cost.
    if let Some(event) = super::supervisor::charged(result, false) {
        draft.apply(event);
    }
    let spent = draft
        .state()
        .filter(|s| s.status == Status::Running)
        .and_then(|s| lifecycle::budget_spent(s, max_cost, false));
    if let Some(why) = spent {
        draft.apply(Event::Ended {
            status: Status::BudgetExhausted,
            why,
            at: None,
        });
    }
}

/// One line summing up a fresh iteration: its number, how the stop judged
/// it, what it cost and how long it took.
pub(crate) fn summary(
    state: &LoopState,
    iteration: u32,
    cost: Option<f64>,
    seconds: f64,
) -> String {
    let why = state
        .history
        .iter()
        .rev()
        .find(|r| r.iteration == iteration)
        .map_or_else(|| "not judged".into(), |r| r.why.clone());
    let cost = cost.map(|c| format!(", ${c:.4}")).unwrap_or_default();
    format!(
        "fresh iteration {iteration} of {}: {why}{cost}, {seconds:.1} s",
        state.max_iterations
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::engine::RealWorld;

    /// A project with a running loop of session `s1` and a PROMPT.md.
    fn running_loop() -> (tempfile::TempDir, ProjectPaths) {
        let dir = crate::testdir::new("conclude");
        let paths = ProjectPaths::new(dir.path());
        std::fs::create_dir_all(dir.path().join(".claude/ralph")).unwrap();
        std::fs::write(
            dir.path().join(".claude/ralph/PROMPT.md"),
            "Fix the parser.\n",
        )
        .unwrap();
        let state = LoopState::new("s1".into(), 5, ralph_core::time::Timestamp::now());
        transaction::replace(&paths, |_| {
            Ok::<_, CtlError>(Event::Started {
                state: Box::new(state),
                why: "started".into(),
            })
        })
        .unwrap();
        (dir, paths)
    }

    fn conclude_with(paths: &ProjectPaths, result: &ClientResult, max: Option<Usd>) -> Concluded {
        let stop = stop_of("s1", Some(result));
        let mut rules = |_: &mut Draft| StepNext::AsJudged;
        conclude(
            Judging {
                paths,
                env: &ralph_core::judge::config::ProcessEnv,
                world: &RealWorld,
            },
            &stop,
            Some(result),
            &mut rules,
            max,
            &mut |_| {},
        )
        .unwrap()
    }

    #[test]
    fn a_fresh_iteration_is_judged_charged_and_handed_over_under_one_lock() {
        let (_dir, paths) = running_loop();
        let result = ClientResult {
            result: Some("Read the parser; more to do.".into()),
            total_cost_usd: Some(0.25),
            ..ClientResult::default()
        };
        let locks = ralph_core::persist::store::locks_taken();
        let concluded = conclude_with(&paths, &result, None);
        assert_eq!(ralph_core::persist::store::locks_taken() - locks, 1);
        let Judged::Continue { text } = &concluded.judged else {
            panic!("{concluded:?}");
        };
        assert!(text.contains("Fix the parser."), "{text}");
        let state = StateStore::new(&paths).read().unwrap().unwrap();
        assert_eq!(Some(&state), concluded.state.as_ref());
        assert_eq!(Some(&state.session_id), concluded.next_session.as_ref());
        assert_eq!((state.status, state.iteration), (Status::Running, 2));
        assert_eq!(state.cost_usd, Usd::from_dollars(0.25));
        assert!(state.carriers.is_some_and(|c| c.client.is_none()));
    }

    #[test]
    fn an_iteration_that_spends_the_budget_ends_the_loop_in_the_same_lock() {
        let (_dir, paths) = running_loop();
        let result = ClientResult {
            result: Some("Still working.".into()),
            total_cost_usd: Some(0.5),
            ..ClientResult::default()
        };
        let locks = ralph_core::persist::store::locks_taken();
        let concluded = conclude_with(&paths, &result, Some(Usd::from_dollars(0.4)));
        assert_eq!(ralph_core::persist::store::locks_taken() - locks, 1);
        assert!(matches!(concluded.judged, Judged::Stopped));
        assert_eq!(concluded.next_session, None);
        let state = concluded.state.unwrap();
        assert_eq!(state.status, Status::BudgetExhausted);
        assert_eq!(state.session_id, "s1");
        assert!(
            state
                .ended_because
                .unwrap()
                .contains("the loop's budget is spent: cost $0.5000 of maxCostUsd $0.4000")
        );
    }

    #[test]
    fn a_summary_names_the_iteration_its_judgement_and_cost() {
        let state = LoopState::new(
            "s".into(),
            5,
            ralph_core::time::Timestamp::from_secs(1767225600),
        );
        assert_eq!(
            summary(&state, 2, Some(0.0123), 2.04),
            "fresh iteration 2 of 5: not judged, $0.0123, 2.0 s"
        );
    }
}
