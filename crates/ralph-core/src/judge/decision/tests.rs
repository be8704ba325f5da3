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
#[allow(clippy::too_many_lines)] // a table of cases, one per row
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
