//! The pure decision at the heart of the hook: from the configuration, the
//! loop's state and what the hook observed at this stop, to the new state and
//! whether the stop is blocked.
//!
//! No I/O happens here, so every rule is unit-tested as a table below.

use crate::config::Config;
use crate::signals;
use crate::state::{excerpt, IterationRecord, LoopState, Status, StopDecision};

/// Where the agent's last message was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageSource {
    /// The hook input's `last_assistant_message`.
    Input,
    /// The last assistant message of the transcript.
    Transcript,
    /// Neither held any text (for example the turn ended on a tool call only).
    Missing,
}

impl MessageSource {
    /// The name recorded in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageSource::Input => "input",
            MessageSource::Transcript => "transcript",
            MessageSource::Missing => "none",
        }
    }
}

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
    /// Block the stop and feed the prompt back for this (new) iteration.
    Continue {
        /// The iteration that starts now.
        iteration: u32,
        /// The cap.
        max_iterations: u32,
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
    now: &str,
) -> Outcome {
    let Some(state) = state else {
        return Outcome::pass(PassReason::NoLoop);
    };
    if state.status != Status::Running {
        return Outcome::pass(PassReason::LoopEnded(state.status));
    }
    let Some(session_id) = observed.session_id.as_deref() else {
        return Outcome::pass(PassReason::NoSessionId);
    };
    if session_id != state.session_id {
        return Outcome::pass(PassReason::OtherSession {
            owner: state.session_id.clone(),
        });
    }

    let mut next = state.clone();
    let iteration = state.iteration;
    let findings = signals::findings_count(&observed.message);
    if let Some(count) = findings {
        next.findings_unchanged_iterations = match state.last_findings_count {
            Some(previous) if previous == count => {
                state.findings_unchanged_iterations.saturating_add(1)
            }
            _ => 0,
        };
        next.last_findings_count = Some(count);
    }

    let (verdict, why) = if signals::claims_completion(&observed.message, &config.completion_signal)
    {
        (
            Verdict::End(Status::Complete),
            format!(
                "completion signal {} in iteration {iteration}",
                config.completion_signal
            ),
        )
    } else if findings.is_some()
        && next.findings_unchanged_iterations >= config.circuit_breaker_threshold
    {
        (
            Verdict::End(Status::CircuitOpen),
            format!(
                "findings count stuck at {} for {} consecutive iterations (threshold {})",
                next.last_findings_count.unwrap_or_default(),
                next.findings_unchanged_iterations,
                config.circuit_breaker_threshold
            ),
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
                iteration: iteration + 1,
                max_iterations: state.max_iterations,
            },
            format!("iteration {iteration} ended without the completion signal"),
        )
    };

    let decision = match verdict {
        Verdict::Continue { iteration, .. } => {
            next.iteration = iteration;
            StopDecision::Block
        }
        Verdict::End(status) => {
            next.end(status, why.clone(), now);
            StopDecision::Allow
        }
        Verdict::Pass(_) => unreachable!("passes return early"),
    };
    next.last_run_at = Some(now.to_string());
    next.push_history(IterationRecord {
        iteration,
        at: now.to_string(),
        decision,
        why,
        excerpt: excerpt(&observed.message),
        stop_hook_active: observed.stop_hook_active,
        findings,
        message_source: observed.message_source.as_str().to_string(),
    });
    Outcome {
        new_state: Some(next),
        verdict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-11-22T10:00:00Z";
    const SID: &str = "11111111-2222-3333-4444-555555555555";

    fn running(iteration: u32, max: u32) -> LoopState {
        let mut s = LoopState::new(SID.into(), max, "2026-11-22T09:00:00Z".into());
        s.iteration = iteration;
        s
    }

    fn saying(message: &str) -> Observation {
        Observation {
            session_id: Some(SID.into()),
            stop_hook_active: true,
            message: message.into(),
            message_source: MessageSource::Input,
        }
    }

    fn config() -> Config {
        Config::default()
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
                },
            ),
            (
                24,
                25,
                "Working.".into(),
                Verdict::Continue {
                    iteration: 25,
                    max_iterations: 25,
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
                format!("{signal}_PENDING"),
                Verdict::Continue {
                    iteration: 4,
                    max_iterations: 25,
                },
            ),
            (
                3,
                25,
                String::new(),
                Verdict::Continue {
                    iteration: 4,
                    max_iterations: 25,
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
            assert_eq!(state.last_run_at.as_deref(), Some(NOW));
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
                    assert_eq!(state.ended_at.as_deref(), Some(NOW));
                    assert_eq!(record.decision, StopDecision::Allow);
                }
                Verdict::Pass(_) => unreachable!(),
            }
        }
    }

    #[test]
    fn a_loop_that_never_completes_runs_exactly_max_iterations() {
        for max in [1, 2, 12, 25] {
            let mut state = LoopState::new(SID.into(), max, NOW.into());
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
                    Verdict::Pass(_) => panic!("unexpected pass"),
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
                max_iterations: 5
            }
        );
        assert!(out.new_state.unwrap().history[0].stop_hook_active);
    }

    /// Runs a sequence of findings reports through the decision and returns
    /// the iteration at which the breaker opened, if it did.
    fn breaker_opens_at(reports: &[Option<u64>], threshold: u32) -> Option<u32> {
        let config = Config {
            circuit_breaker_threshold: threshold,
            ..Config::default()
        };
        let mut state = running(1, 100);
        for report in reports {
            let message = match report {
                Some(n) => format!("Fixed one.\nRALPH_ITERATION_COMPLETE: {n} findings remain"),
                None => "No report.".to_string(),
            };
            let out = decide(&config, Some(&state), &saying(&message), NOW);
            let ended_at = state.iteration;
            state = out.new_state.unwrap();
            if out.verdict == Verdict::End(Status::CircuitOpen) {
                return Some(ended_at);
            }
        }
        None
    }

    #[test]
    fn findings_breaker_table() {
        /// (findings reported per iteration, threshold, iteration at which the breaker opens)
        type Case<'a> = (&'a [Option<u64>], u32, Option<u32>);
        let cases: &[Case] = &[
            (&[Some(5), Some(5), Some(5), Some(5)], 3, Some(4)),
            (&[Some(5), Some(5), Some(5)], 3, None),
            (&[Some(5), Some(4), Some(4), Some(4), Some(4)], 3, Some(5)),
            (
                &[Some(5), Some(5), Some(4), Some(4), Some(3), Some(3)],
                3,
                None,
            ),
            (&[Some(5), Some(5), None, Some(5), Some(5)], 3, Some(5)),
            (&[Some(2), Some(2)], 1, Some(2)),
            (&[None, None, None, None, None], 1, None),
            (&[Some(0), Some(0), Some(0), Some(0)], 3, Some(4)),
        ];
        for (reports, threshold, want) in cases {
            assert_eq!(
                breaker_opens_at(reports, *threshold),
                *want,
                "{reports:?} threshold {threshold}"
            );
        }
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
        state.findings_unchanged_iterations = 10;
        let message = format!("RALPH_ITERATION_COMPLETE: 0 findings remain\n{signal}");
        let out = decide(&config(), Some(&state), &saying(&message), NOW);
        assert_eq!(out.verdict, Verdict::End(Status::Complete));
    }

    #[test]
    fn extreme_counters_of_a_hand_edited_state_saturate() {
        let mut state = running(u32::MAX - 1, u32::MAX);
        state.last_findings_count = Some(4);
        state.findings_unchanged_iterations = u32::MAX;
        let out = decide(
            &config(),
            Some(&state),
            &saying("RALPH_ITERATION_COMPLETE: 4 findings remain"),
            NOW,
        );
        assert_eq!(out.verdict, Verdict::End(Status::CircuitOpen));
        let state = out.new_state.unwrap();
        assert_eq!(state.findings_unchanged_iterations, u32::MAX);
    }
}
