//! End-to-end: the loop the Stop hook keeps going in one session. The real
//! Claude Code client (both pinned versions), driven by our launcher,
//! against a scripted mock of the Messages API on 127.0.0.1, with our hook
//! registered by `ralph-ctl init` in a temp git project.
//!
//! Compiled only with the `e2e` feature (tests/run.sh turns it on). Run one
//! scenario alone with e.g.
//! `tests/run.sh -p ralph-tests --test e2e session::completes_on_signal`.

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::thread;
use std::time::Duration;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, stop_hook_feedback, user_texts};
use ralph_tests::project::{
    TempProject, child_of, processes_in_group, signal_process, wait_with_timeout,
};
use ralph_tests::scenario::{Flag, Scenario, exits_with, long_task, script, wait_until};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};

/// A second, unrelated `claude -p` session in the project while the loop's
/// state exists: it must stop after its one turn.
fn unrelated_session_stops_after_one_turn(scenario: &Scenario) {
    let other = MockApi::start(|_, _| Reply::text("An unrelated answer."));
    let env = [("RALPH_ACTIVE", "1")];
    let run = scenario.run_client(
        scenario.client(),
        &other,
        "Unrelated question",
        &env,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let turns = other.main_requests().len();
    assert_eq!(turns, 1, "the second session stopped after one turn");
}

#[ralph_tests::on_both_clients]
fn completes_on_signal(client: ClientVersion) {
    let scenario = Scenario::new("complete", client).prompt("Improve the project.\n");
    let api = MockApi::start(script::signal_at(3));
    scenario.run(&api).ended(0, "complete").at_iteration(4);
    assert_eq!(api.main_requests().len(), 4);
    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert_eq!(fed_back.len(), 3, "three re-injections: {fed_back:?}");
    assert!(
        fed_back[2].contains("iteration 4 of 25") && fed_back[2].contains("Improve the project."),
        "{}",
        fed_back[2]
    );
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330 caps blocks at 8 (context form past it), 2.0.77 blocks"
)]
fn runs_exactly_max_iterations_past_the_client_block_cap(client: ClientVersion) {
    // The agent only talks: a no-progress threshold past the cap lets the
    // cap, not the breaker, end it.
    let scenario = Scenario::new("max", client)
        .env("RALPH_MAX_ITERATIONS", "12")
        .env("CB_NO_PROGRESS_THRESHOLD", "20");
    let api = MockApi::start(script::never_done());
    let outcome = scenario.run(&api);
    outcome.ended(10, "max_iterations").at_iteration(12);
    outcome.run.assert_stderr_has(&["max_iterations"]);
    assert_eq!(outcome.state["maxIterations"], 12);
    let reached = api.main_requests().len();
    assert_eq!(reached, 12, "exactly 12 iterations reached the model");
    let history = outcome.history();
    assert_eq!(history.len(), 12);
    // stop_hook_active is true from the second stop on, and never obeyed.
    assert_eq!(history[0]["stopHookActive"], false);
    assert!(
        history[1..].iter().all(|r| r["stopHookActive"] == true),
        "{history:#?}"
    );
}

#[ralph_tests::on_both_clients]
fn guard_off_session_stops_after_one_turn(client: ClientVersion) {
    let project = Scenario::new("guard", client);
    let api = MockApi::start(script::never_done());
    let run = project.run_client(client, &api, "Say hi", &[], LOOP_TIMEOUT);
    run.assert_code(0);
    assert_eq!(api.main_requests().len(), 1, "one turn only");
    assert!(project.state().is_none(), "no state file appears");
    let runtime: Vec<String> = std::fs::read_dir(project.runtime_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        runtime,
        [".gitignore"],
        "the hook created nothing beside what init wrote"
    );
}

#[ralph_tests::on_both_clients]
fn second_session_after_the_loop_is_let_through(client: ClientVersion) {
    let scenario = Scenario::new("second-after", client);
    scenario
        .run(&MockApi::start(script::signal_at(1)))
        .ended(0, "complete");
    let before = std::fs::read(scenario.state_path()).unwrap();
    unrelated_session_stops_after_one_turn(&scenario);
    let after = std::fs::read(scenario.state_path()).unwrap();
    assert_eq!(after, before, "the loop's state is untouched");
}

#[ralph_tests::on_both_clients]
fn second_session_during_a_running_loop_is_let_through(client: ClientVersion) {
    // Its agent only talks while it waits: the breaker kept out of it.
    let scenario = Scenario::new("second-during", client)
        .env("RALPH_MAX_ITERATIONS", "1000")
        .without_breaker();
    // The loop keeps working until the second session is over, then completes.
    let second_done = Flag::default();
    let working = script::working(Duration::from_millis(100));
    let done = |_| Reply::text(format!("Done.\n{SIGNAL}"));
    let api = MockApi::start(second_done.script(working, done));
    let mut launcher = scenario.start_until(&api, 2);
    unrelated_session_stops_after_one_turn(&scenario);
    let running_after = scenario.status_json();
    second_done.set();
    assert_eq!(
        running_after["status"], "running",
        "the loop was still running: {running_after:#}"
    );

    exits_with(&mut launcher, 0);
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let iterations = usize::try_from(state["iteration"].as_u64().unwrap()).unwrap();
    assert_eq!(
        api.main_requests().len(),
        iterations,
        "every loop iteration reached the model once"
    );
    assert_eq!(
        state["history"].as_array().unwrap().len(),
        iterations.min(50),
        "only the loop's own stops were recorded"
    );
}

#[ralph_tests::on_both_clients]
fn prompt_edits_apply_at_the_next_reinjection(client: ClientVersion) {
    let scenario = Scenario::new("edit", client).prompt("Original task text.\n");
    let prompt_path = scenario.path(".claude/ralph/PROMPT.md");
    let api = MockApi::start(move |turn, _| {
        if turn == 2 {
            // The person edits PROMPT.md while iteration 3 is under way.
            std::fs::write(&prompt_path, "Edited task text.\n").unwrap();
        }
        if turn < 4 {
            Reply::text(format!("Working {turn}."))
        } else {
            Reply::text(format!("Done.\n{SIGNAL}"))
        }
    });
    scenario.run(&api).ended(0, "complete");
    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert_eq!(fed_back.len(), 4, "{fed_back:#?}");
    for (i, text) in fed_back.iter().enumerate() {
        let want = if i < 2 {
            "Original task text."
        } else {
            "Edited task text."
        };
        assert!(
            text.contains(want),
            "re-injection {} should carry {want:?}: {text}",
            i + 1
        );
    }
}

#[ralph_tests::on_both_clients]
fn signal_quoted_in_the_prompt_never_ends_the_loop(client: ClientVersion) {
    let scenario = Scenario::new("quoted", client)
        .prompt(&format!(
            "Fix everything. When nothing remains, write {SIGNAL} on its own line.\n<promise>{SIGNAL}</promise>\n"
        ))
        .env("RALPH_MAX_ITERATIONS", "4");
    let api = MockApi::start(|turn, _| Reply::text(format!("Fixed one more thing ({turn}).")));
    scenario.run(&api).ended(10, "max_iterations");
    assert_eq!(api.main_requests().len(), 4);
    let last = api.main_requests().pop().unwrap();
    assert!(
        stop_hook_feedback(&last.body)
            .iter()
            .all(|t| t.contains(SIGNAL)),
        "the re-injection quotes the signal"
    );
}

#[ralph_tests::on_both_clients]
fn tool_calls_then_text_count_as_one_iteration(client: ClientVersion) {
    let scenario = Scenario::new("tools", client);
    let root = scenario.root.clone();
    let log = root.join("log.txt");
    // Each iteration: a Write, then a Bash call, then a text answer; the third iteration completes.
    let api = MockApi::start(move |turn, _| {
        let step = turn / 3 + 1;
        let file = root.join(format!("step{step}.txt"));
        match turn % 3 {
            0 => Reply::write(file.display().to_string(), format!("step {step}\n")),
            1 => Reply::bash(format!("echo ran >> {}", log.display())),
            _ if step < 3 => Reply::text(format!("Finished step {step}.")),
            _ => Reply::text(format!("All three steps are done.\n{SIGNAL}")),
        }
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(3);
    for step in 1..=3 {
        assert!(
            scenario.path(format!("step{step}.txt")).is_file(),
            "step {step} wrote its file"
        );
    }
    let log = scenario.read("log.txt");
    assert_eq!(
        log.lines().count(),
        3,
        "the Bash call ran once per iteration"
    );
    let history = outcome.history();
    assert_eq!(history.len(), 3);
    let first = history[0]["excerpt"].as_str().unwrap();
    assert!(first.contains("Finished step 1"), "{history:#?}");
}

#[ralph_tests::on_both_clients]
fn client_killed_mid_loop_is_resumed_per_policy(client: ClientVersion) {
    // The client killed from outside the launcher (as the out-of-memory
    // killer does): a crash, not the person's stop. The loop pauses, the
    // supervisor resumes its session after the backoff, and it goes on to
    // its end; only a signal to the launcher interrupts a loop.
    let scenario = Scenario::new("killed", client)
        .env("RALPH_RESUME_BACKOFF_SECONDS", "1")
        .without_breaker();
    let killed = Flag::default();
    let api = MockApi::start(
        killed.script(script::working(Duration::from_millis(200)), |_| {
            Reply::text(format!("Picked up again. Done.\n{SIGNAL}"))
        }),
    );
    let mut launcher = scenario.start_until(&api, 3);
    let client_pid = child_of(launcher.id()).expect("the launcher runs the client");
    killed.set();
    signal_process(client_pid, libc::SIGKILL);
    exits_with(&mut launcher, 0);
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let pause = scenario.log_line("pause");
    assert!(pause.contains("killed by signal 9"), "{pause}");
    let log = scenario.audit_log();
    assert!(log.contains("\"event\":\"resume\""), "{log}");
    assert!(!log.contains("\"status\":\"interrupted\""), "{log}");
}

#[ralph_tests::on_both_clients]
fn stalled_loop_opens_the_breaker_and_blocks_the_next_start(client: ClientVersion) {
    let scenario = Scenario::new("stalled", client);
    // Every iteration: the same failing command, then the same complaint. Nothing changes.
    let complaint = "The build still fails:\nerror: missing-config.toml: No such file or directory";
    let call = Reply::bash("cat missing-config.toml");
    let api = MockApi::start(script::call_then_say(call, complaint));
    let outcome = scenario.run(&api);
    outcome.ended(11, "circuit_open");
    outcome.run.assert_stderr_has(&["circuit_open"]);
    assert_eq!(outcome.state["breaker"]["state"], "open");
    let stopped_at = outcome.state["iteration"].as_u64().unwrap();
    assert!(stopped_at <= 6, "stopped at iteration {stopped_at}");
    let history = outcome.history();
    let transitions: Vec<String> = history
        .iter()
        .filter(|r| r["breaker"].is_object())
        .map(|r| format!("{} → {}", r["breaker"]["from"], r["breaker"]["to"]))
        .collect();
    assert_eq!(
        transitions,
        ["\"closed\" → \"half_open\"", "\"half_open\" → \"open\""],
        "{history:#?}"
    );
    assert!(
        history.iter().all(|r| r["error"].is_string()),
        "the error was seen every iteration: {history:#?}"
    );

    // The agent was told what was detected before the breaker opened.
    let last = api.main_requests().pop().unwrap();
    let warnings: Vec<String> = stop_hook_feedback(&last.body)
        .into_iter()
        .filter(|t| t.starts_with("[Ralph circuit breaker: half-open] Detected: "))
        .collect();
    assert!(
        warnings
            .first()
            .is_some_and(|w| w.contains("no file changed in 3 iterations")),
        "the re-injection carried the breaker's notice: {warnings:#?}"
    );

    // Open is sticky: the launcher refuses to start until a reset.
    let refused = scenario.run(&api);
    refused.ended(3, "circuit_open");
    refused
        .run
        .assert_stderr_has(&["circuit breaker is open", "ralph-ctl reset"]);
    scenario.ctl_exits(&["reset"], 0);
    let api = MockApi::start(|_, _| Reply::text(format!("Fixed it.\n{SIGNAL}")));
    scenario.run(&api).ended(0, "complete");
}

#[ralph_tests::on_both_clients]
fn working_loop_never_trips_the_breaker(client: ClientVersion) {
    let scenario = Scenario::new("working", client);
    let root = scenario.root.clone();
    // Ten iterations of real work: new untracked files, edits, and commits,
    // each followed by a short report; the tenth completes.
    let notes = root.join("notes.md").display().to_string();
    let api = MockApi::start(script::work_then_report(10, move |iteration| {
        match iteration % 3 {
            0 => Reply::bash(format!(
                "echo step {iteration} >> {notes} && git add -A && git commit -q -m 'step {iteration}'"
            )),
            1 => Reply::write(
                root.join(format!("src{iteration}.txt"))
                    .display()
                    .to_string(),
                format!("work {iteration}\n"),
            ),
            _ => Reply::write(notes.clone(), format!("edited in {iteration}\n")),
        }
    }));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(10);
    let breaker = &outcome.state["breaker"];
    assert_eq!(breaker["state"], "closed");
    assert!(
        breaker["lastTransition"].is_null(),
        "never left closed: {outcome:?}"
    );
    assert_eq!(breaker["counters"]["noProgress"], 0);
    assert!(outcome.history().iter().all(|r| r["breaker"].is_null()));
}

#[ralph_tests::on_both_clients]
fn a_claim_is_sent_back_until_verification_passes(client: ClientVersion) {
    let scenario = Scenario::configured(
        "verify",
        client,
        r#"{"verify": [{"name": "check", "command": "test -f done.txt && echo verified", "timeoutSeconds": 20}]}"#,
    );
    let done = scenario.path("done.txt").display().to_string();
    // Claims too early, is told why, creates the file, claims again.
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::text(format!("Everything is finished.\n{SIGNAL}")),
        1 => Reply::write(done.clone(), "ok\n"),
        _ => Reply::text(format!(
            "Created done.txt; verification should pass now.\n{SIGNAL}"
        )),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    let claim = &outcome.state["lastClaim"];
    assert_eq!(claim["accepted"], true);
    let tail = claim["verification"][0]["outputTail"].as_str().unwrap();
    assert!(tail.contains("verified"), "{outcome:?}");
    let first = &outcome.history()[0]["claim"];
    assert_eq!(first["accepted"], false, "{outcome:?}");
    assert_eq!(first["failedGates"][0], "verification", "{outcome:?}");

    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert_eq!(fed_back.len(), 1, "{fed_back:#?}");
    let notice = &fed_back[0];
    assert!(
        notice.starts_with("[Ralph: completion claim rejected]"),
        "{notice}"
    );
    assert!(
        notice.contains("`test -f done.txt && echo verified` (check) exited 1"),
        "{notice}"
    );
    let notice_at = notice.find("completion claim rejected").unwrap();
    let prompt_at = notice.find("[Ralph loop: iteration 2 of").unwrap();
    assert!(notice_at < prompt_at, "the failure comes before PROMPT.md");
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&["last claim:", "verification passed"]);
}

#[ralph_tests::on_both_clients]
fn an_unchecked_plan_item_blocks_a_claim(client: ClientVersion) {
    let scenario = Scenario::new("plan", client).file(
        "IMPLEMENTATION_PLAN.md",
        "# Plan\n- [x] parser\n- [ ] write the user guide\n## Nice to have\n- [ ] emoji output\n",
    );
    let plan_path = scenario
        .path("IMPLEMENTATION_PLAN.md")
        .display()
        .to_string();
    let api = MockApi::start(move |turn, _| {
        match turn {
            0 => Reply::text(format!("The parser works.\n{SIGNAL}")),
            // (Bash, not Write: the older client refuses to Write a file it has not Read.)
            1 => Reply::bash(format!(
                "sed -i 's/- \\[ \\] write the user guide/- [x] write the user guide/' {plan_path}"
            )),
            _ => Reply::text(format!("The guide is written and checked off.\n{SIGNAL}")),
        }
    });
    scenario.run(&api).ended(0, "complete").at_iteration(2);
    let last = api.main_requests().pop().unwrap();
    let notice = &stop_hook_feedback(&last.body)[0];
    assert!(notice.contains("plan gate"), "{notice}");
    assert!(
        notice.contains("IMPLEMENTATION_PLAN.md: - [ ] write the user guide"),
        "{notice}"
    );
    assert!(
        !notice.contains("emoji output"),
        "optional sections do not block"
    );
}

#[ralph_tests::on_both_clients]
fn talk_alone_never_completes_and_opens_the_breaker(client: ClientVersion) {
    // The agent only talks: no tool call, no change, mentions of the signal
    // and a vetoed status block. None of it completes the loop, and an
    // iteration that does nothing is the plainest lack of progress: the
    // breaker warns at the third and opens two later, before the cap.
    let scenario = Scenario::new("mentions", client).env("RALPH_MAX_ITERATIONS", "10");
    let api = MockApi::start(|turn, _| match turn % 3 {
        0 => Reply::text(format!("I will write {SIGNAL} once the last test passes.")),
        1 => Reply::text(
            "All tasks complete.\n---RALPH_STATUS---\nSTATUS: COMPLETE\nTESTS_STATUS: PASSING\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---",
        ),
        _ => Reply::text(format!(
            "Here is the instruction I follow:\n```\n{SIGNAL}\n```\nStill on it."
        )),
    });
    let outcome = scenario.run(&api);
    outcome.ended(11, "circuit_open");
    outcome.run.assert_stderr_has(&["circuit_open"]);
    // A stop whose transcript had not caught up (2.1.330 under load) does
    // not count: at most two such stops are allowed for.
    let stopped_at = outcome.state["iteration"].as_u64().unwrap();
    assert!(
        stopped_at <= 7,
        "stopped at iteration {stopped_at}: {outcome:?}"
    );
    let no_claim = outcome.state["lastClaim"].is_null();
    assert!(no_claim, "no message was a claim: {outcome:?}");
    let history = outcome.history();
    assert_eq!(history[1]["statusBlock"]["exitSignal"], false);
    assert!(
        history.iter().all(|r| r["toolCalls"] == 0),
        "no iteration used a tool: {history:#?}"
    );
    let reason = outcome.state["breaker"]["lastTransition"]["reason"].as_str();
    assert!(
        reason.is_some_and(|r| r.contains("no file changed in ")),
        "{outcome:?}"
    );
}

#[ralph_tests::on_both_clients]
fn tool_use_without_change_opens_the_breaker(client: ClientVersion) {
    let scenario = Scenario::new("looking", client);
    // Every iteration: a Bash `ls` (a tool call that changes nothing), then talk.
    let words = "Looked at the files again; still thinking.";
    let api = MockApi::start(script::call_then_say(Reply::bash("ls"), words));
    let outcome = scenario.run(&api);
    outcome.ended(11, "circuit_open");
    let stopped_at = outcome.state["iteration"].as_u64().unwrap();
    assert!(
        stopped_at <= 6,
        "stopped at iteration {stopped_at}: {outcome:?}"
    );
    let history = outcome.history();
    // A stop whose transcript had not caught up (2.1.330 under load) says
    // so rather than counting: toolsIncomplete.
    let counted = |r: &serde_json::Value| r["toolCalls"] == 1 || r["toolsIncomplete"] == true;
    assert!(
        history.iter().all(counted),
        "each iteration's one tool call was counted: {history:#?}"
    );
    let reasons = history
        .iter()
        .filter_map(|r| r["breaker"]["reason"].as_str());
    assert!(
        { reasons }.any(|r| r.contains("no file changed")),
        "{history:#?}"
    );
}

/// A scenario whose check `tests` says `says` and fails (exit 1).
fn failing_tests(name: &str, client: ClientVersion, says: &str) -> Scenario {
    let command = format!("echo '{says}'; exit 1");
    let check = serde_json::json!({"name": "tests", "command": command, "timeoutSeconds": 20});
    Scenario::configured(
        name,
        client,
        &serde_json::json!({ "verify": [check] }).to_string(),
    )
}

#[ralph_tests::on_both_clients]
fn identical_rejected_claims_open_the_breaker_before_the_cap(client: ClientVersion) {
    let scenario = failing_tests("rejected", client, "1 test failed: parser::nested");
    let root = scenario.root.clone();
    // Each iteration edits a file (real change, so no-progress never trips),
    // then claims completion; the same test fails every time.
    let api = MockApi::start(move |turn, _| {
        if turn % 2 == 0 {
            Reply::write(
                root.join("parser.txt").display().to_string(),
                format!("attempt {turn}\n"),
            )
        } else {
            Reply::text(format!("Fixed the parser.\n{SIGNAL}"))
        }
    });
    let outcome = scenario.run(&api);
    outcome.ended(11, "circuit_open");
    let breaker = &outcome.state["breaker"];
    let stopped_at = outcome.state["iteration"].as_u64().unwrap();
    assert!(stopped_at <= 6, "stopped at iteration {stopped_at} of 25");
    assert_eq!(breaker["counters"]["noProgress"], 0, "{outcome:?}");
    let reason = breaker["lastTransition"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("the same completion claim was rejected"),
        "{reason}"
    );
}

#[ralph_tests::on_both_clients]
fn errors_are_recorded_against_their_own_iteration(client: ClientVersion) {
    let scenario = Scenario::new("attribution", client);
    // Iteration 1: a Bash call that succeeds; iteration 2: one that fails;
    // iteration 3: text only; iteration 4: completes.
    let api = MockApi::start(|turn, _| match turn {
        0 => Reply::bash("echo fine"),
        1 => Reply::text("Step one done."),
        2 => Reply::bash("cat no-such-file.txt"),
        3 => Reply::text("Step two hit a missing file."),
        4 => Reply::text("Step three: thinking it over."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let history = outcome.history();
    assert_eq!(history.len(), 4, "{history:#?}");
    let errors: Vec<bool> = history.iter().map(|r| r["error"].is_string()).collect();
    // 2.1.330 under load may write an iteration's tool result and final
    // message only after its Stop hook returned: then the stop says its tool
    // evidence is incomplete, and the error is charged to no other iteration.
    // (Seen once with the whole e2e suite running beside it: a text-only
    // iteration's stop found the transcript still behind and said so too;
    // what matters is that no error is charged to it.)
    let incomplete: Vec<bool> = history
        .iter()
        .map(|r| r["toolsIncomplete"] == true)
        .collect();
    let want = [false, !incomplete[1], false, false];
    if errors != want {
        // The transcript as the client left it, to see what the hook could not.
        if let Some(path) = outcome.state["transcript"]["path"].as_str() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                let head: String = line.chars().take(300).collect();
                eprintln!("T {} {} {} {head}", v["timestamp"], v["type"], v["subtype"]);
            }
        }
    }
    assert_eq!(errors, want, "{history:#?}");
    let calls: Vec<u64> = history
        .iter()
        .map(|r| r["toolCalls"].as_u64().unwrap())
        .collect();
    assert_eq!([calls[2], calls[3]], [0, 0], "{history:#?}");
    // An incomplete stop may have seen its tool call, or not yet.
    for i in [0, 1] {
        let least = u64::from(!incomplete[i]);
        assert!((least..=1).contains(&calls[i]), "{history:#?}");
    }
    let excerpts: Vec<&str> = history
        .iter()
        .map(|r| r["excerpt"].as_str().unwrap())
        .collect();
    for (excerpt, step) in excerpts.iter().zip(["Step one", "Step two", "Step three"]) {
        assert!(excerpt.contains(step), "{excerpts:?}");
    }
}

#[ralph_tests::on_both_clients]
fn prompt_near_its_size_limit_runs_a_headless_loop(client: ClientVersion) {
    // ~900 KiB of distinct lines: seven times what one command-line argument may hold.
    let finding = |n| format!("- finding {n}: module {} needs a fix\n", n % 89);
    let head = "Fix every finding listed below.\n";
    let prompt = long_task(head, 900 * 1024, finding, "LAST-LINE-OF-THE-TASK\n");
    let scenario = Scenario::new("large-prompt", client).prompt(&prompt);
    let api = MockApi::start(script::signal_at(1));
    scenario.run(&api).ended(0, "complete").at_iteration(2);
    let requests = api.main_requests();
    let first = user_texts(&requests[0].body).join("\n");
    assert!(
        first.contains(&prompt) && first.contains("iteration 1 of"),
        "the first request carries the whole PROMPT.md ({} bytes of user text)",
        first.len()
    );
    let fed_back = stop_hook_feedback(&requests.last().unwrap().body);
    assert_eq!(fed_back.len(), 1);
    assert!(
        fed_back[0].contains(&prompt),
        "the re-injection carries it too ({} bytes)",
        fed_back[0].len()
    );
}

#[ralph_tests::on_both_clients]
fn sigterm_to_the_launcher_mid_loop_is_recorded_and_leaves_no_client(client: ClientVersion) {
    let scenario = Scenario::new("sigterm", client)
        .env("RALPH_MAX_ITERATIONS", "1000")
        .without_breaker();
    // SIGHUP is what a closing terminal sends; the driver handles it the same way.
    for (signal, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGHUP, "SIGHUP", 129),
    ] {
        let api = MockApi::start(script::working(Duration::from_millis(200)));
        let mut cmd = scenario.command(&api);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let before = scenario.state().map(|s| s["sessionId"].clone());
        let mut launcher = cmd.spawn().unwrap();
        let group = launcher.id();
        assert!(
            wait_until(LOOP_TIMEOUT, || scenario.state().is_some_and(|s| {
                Some(&s["sessionId"]) != before.as_ref() && s["iteration"].as_u64() >= Some(2)
            })),
            "the loop never reached iteration 2"
        );
        let started = std::time::Instant::now();
        signal_process(launcher.id(), signal);
        let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
        assert_eq!(status.and_then(|s| s.code()), Some(code), "{name}: {err}");
        assert!(
            started.elapsed() < Duration::from_secs(9),
            "the client ended on {name}, not on the kill after the grace: {:?}",
            started.elapsed()
        );
        assert!(
            err.contains("loop interrupted") && err.contains(name),
            "{err}"
        );
        let state = scenario.status_json();
        assert_eq!(state["status"], "interrupted", "{state:#}");
        let because = state["endedBecause"].as_str().unwrap();
        assert!(
            because.contains(name) && because.contains("iteration"),
            "{because}"
        );
        assert!(
            wait_until(Duration::from_secs(5), || processes_in_group(group)
                .is_empty()),
            "{name}: processes left in the launcher's group: {:?}",
            processes_in_group(group)
        );
    }

    // The next loop starts without a reset.
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    scenario.run(&api).ended(0, "complete");
}

/// Runs the launcher interactively in a pseudo-terminal (`script`), with the
/// client's first-run questions (theme, API key, folder trust) answered in
/// its HOME. Returns the `script` process and its input (what the person types).
fn launch_in_a_terminal(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
) -> (std::process::Child, std::process::ChildStdin) {
    std::fs::write(
        project.home.join(".claude.json"),
        serde_json::json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": ["test-key"], "rejected": []},
            "projects": {project.root.display().to_string(): {"hasTrustDialogAccepted": true}}
        })
        .to_string(),
    )
    .unwrap();
    let launcher = project.path(".claude/ralph/ralph-audit.sh");
    let mut cmd = project.command("script");
    cmd.args(["-qfec", &launcher.display().to_string(), "/dev/null"])
        .envs(project.client_env(client, api))
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn().expect("script (util-linux) runs");
    let keys = child.stdin.take().unwrap();
    (child, keys)
}

/// Leaves an interactive client as a person does: Ctrl-C is a key for it
/// (the terminal is raw); pressed twice within a second, it exits.
fn leave_with_ctrl_c(terminal: &mut Child, keys: &mut std::process::ChildStdin) {
    use std::io::Write;
    thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let _ = keys.write_all(b"\x03");
        thread::sleep(Duration::from_millis(250));
        let _ = keys.write_all(b"\x03");
        let exited = wait_until(Duration::from_secs(3), || {
            terminal.try_wait().ok().flatten().is_some()
        });
        if exited {
            break;
        }
    }
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330 takes a 300 KiB prompt on stdin, 2.0.77 an argument"
)]
fn interactive_loop_in_a_terminal(client: ClientVersion) {
    // 2.1.330 gets a prompt too long for an argument, so it arrives on stdin
    // while the keyboard stays the terminal; 2.0.77's screen takes minutes to
    // show one that long, so it gets a short one, as an argument.
    let size = match client {
        ClientVersion::V2_1_330 => 300 * 1024,
        ClientVersion::V2_0_77 => 2 * 1024,
    };
    let prompt = long_task(
        "Work through the list.\n",
        size,
        |n| format!("- item {n}\n"),
        "",
    );
    let scenario = Scenario::new("interactive", client).prompt(&prompt);
    let api = MockApi::start(script::signal_at(1));
    let (mut terminal, mut keys) = launch_in_a_terminal(&scenario, client, &api);
    let completed = wait_until(LOOP_TIMEOUT, || {
        scenario.state().is_some_and(|s| s["status"] == "complete")
    });
    // The loop is over; the interactive client stays open until the person leaves it.
    leave_with_ctrl_c(&mut terminal, &mut keys);
    let (status, out, err) = wait_with_timeout(&mut terminal, Duration::from_secs(30));
    assert!(completed, "the loop never completed; screen: {out}\n{err}");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "the launcher reports the completed loop; screen: {out}"
    );
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    // The claim is iteration 2's. Under load 2.0.77 may write it to the
    // transcript only after that stop's wait (it sends no message with the
    // stop): that stop did not see the claim, and the loop completes at a
    // later one, whose reply claims again. Either way the stop that ended
    // the loop saw a claim, and the screen names that stop's iteration.
    let at = state["iteration"].as_u64().unwrap_or(0);
    assert!(at >= 2, "the first reply makes no claim: {state:#}");
    let last = state["history"]
        .as_array()
        .and_then(|h| h.last())
        .cloned()
        .unwrap_or_default();
    assert!(
        ralph_tests::json_text_has(&last["excerpt"], "All steps done"),
        "the ending stop saw the claim: {state:#}"
    );
    let screen = ralph_tests::interactive::strip_control(out.as_bytes());
    assert!(
        screen.contains(&format!("loop complete at iteration {at} of 25")),
        "{screen}\n{state:#}"
    );
    let first = user_texts(&api.main_requests()[0].body).join("\n");
    assert!(
        first.contains(&prompt),
        "the first message carries the whole PROMPT.md ({} bytes)",
        first.len()
    );
}

#[ralph_tests::on_both_clients]
fn a_project_in_a_subfolder_of_its_repository_makes_progress(client: ClientVersion) {
    let mut project = TempProject::new("subfolder");
    let app = project.root.join("mono/app");
    project.write("mono/app/lib.txt", "0\n");
    project.write("mono/other/x.txt", "x\n");
    project.commit_all("monorepo");
    // The loop's project is mono/app; the repository's top is two folders up.
    project.root = app.clone();
    project.init();
    let scenario = Scenario::around(project, client);
    // Every iteration: a Bash call that changes a tracked file of the project, then a report.
    let append = |iteration| Reply::bash(format!("echo {iteration} >> lib.txt"));
    let api = MockApi::start(script::work_then_report(6, append));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(6);
    let lib = std::fs::read_to_string(app.join("lib.txt")).unwrap();
    assert_eq!(lib, "0\n1\n2\n3\n4\n5\n6\n");
    let breaker = &outcome.state["breaker"];
    assert_eq!(breaker["state"], "closed", "{breaker:#}");
    assert!(breaker["lastTransition"].is_null(), "{breaker:#}");
    assert_eq!(breaker["counters"]["noProgress"], 0, "{breaker:#}");
    let quiet = outcome.history().iter().all(|r| r["breaker"].is_null());
    assert!(quiet, "{outcome:?}");
    // What the last stop compared: git's view of the project folder, by
    // paths relative to it.
    let progress = &breaker["progress"];
    assert_eq!(progress["source"], "git", "{progress:#}");
    let files: Vec<&String> = progress["files"].as_object().unwrap().keys().collect();
    assert_eq!(files, ["lib.txt"], "{progress:#}");
}

#[ralph_tests::on_both_clients]
fn file_edits_are_progress_without_looking_at_the_project(client: ClientVersion) {
    let project = TempProject::new("edits");
    // git ignores notes/: a check of the project would never list a file there.
    project.write(".gitignore", "notes/\n");
    project.git(&["add", ".gitignore"]);
    project.git(&["commit", "-q", "-m", "ignore notes"]);
    project.init();
    let scenario = Scenario::around(project, client);
    let notes = scenario.path("notes");
    let api = MockApi::start(script::work_then_report(4, move |iteration| {
        let note = notes.join(format!("step{iteration}.md"));
        Reply::write(note.display().to_string(), format!("step {iteration}\n"))
    }));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(4);
    let breaker = &outcome.state["breaker"];
    assert_eq!(breaker["counters"]["noProgress"], 0, "{breaker:#}");
    // A stop that saw its Write in the transcript (only file tools ran) was
    // decided by the edit alone, and the written file's stamp went into the
    // baseline, which git could not have put there (it ignores notes/). A
    // stop whose transcript lagged past the hook's wait (2.1.330 writes it
    // after the Stop hook starts; on a loaded machine it was seen past 5 s)
    // saw no call and took git's listing instead.
    let progress = &breaker["progress"];
    assert_eq!(progress["source"], "git", "{progress:#}");
    assert!(progress.get("stale").is_none(), "{progress:#}");
    let no_files = serde_json::Map::new();
    let listed = progress["files"].as_object().unwrap_or(&no_files);
    let files: Vec<&String> = listed.keys().collect();
    let history = outcome.history();
    // Decided by the edit: the stop saw the Write and its result.
    let saw_write: Vec<bool> = history
        .iter()
        .map(|r| r["progress"] == "tool_edits")
        .collect();
    assert!(
        saw_write.iter().any(|&saw| saw),
        "no stop saw its Write in the transcript: {history:#?}"
    );
    let a_step = |f: &&String| (1..=4).any(|i| **f == format!("notes/step{i}.md"));
    assert!(files.iter().all(a_step), "{progress:#}");
    let last_listed = files.iter().any(|f| *f == "notes/step4.md");
    assert!(
        last_listed || !saw_write[3],
        "the last stop's edit: {progress:#}"
    );
    let listed_in_a_row = (0..4).rev().take_while(|&i| saw_write[i]).count();
    assert!(
        files.len() >= listed_in_a_row,
        "each stop since the last one that saw no Write added its file: {progress:#}"
    );
}

#[ralph_tests::on_both_clients]
fn a_completion_the_agent_writes_into_the_state_is_not_reported_as_done(client: ClientVersion) {
    // The agent's Bash call writes "complete" into the state file, then it
    // stops: the hook lets the stop through (the loop no longer runs), and
    // the launcher must not report the work as done. A `sed -i` naming the
    // state file is refused by the deny rules `init` wrote; a script that
    // names it nowhere the client sees gets through the fence. Outside the
    // sandbox: in it, the operating system refuses the write
    // (tests/tests/e2e/sandbox.rs).
    let scenario = Scenario::new("forged-e2e", client).env("RALPH_SANDBOX", "off");
    let state_file = scenario.state_path().display().to_string();
    let sed = format!("sed -i 's/\"status\": \"running\"/\"status\": \"complete\"/' {state_file}");
    let script = scenario.tmp.join("forge.sh");
    std::fs::write(&script, format!("{sed}\n")).unwrap();
    let script = script.display().to_string();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(sed.clone()),
        1 => Reply::bash(format!("sh {script}")),
        _ => Reply::text("All done."),
    });
    let outcome = scenario.run(&api);
    let requests = api.main_requests();
    let refused = requests.get(1).and_then(|r| user_texts(&r.body).pop());
    let refused = refused.unwrap_or_default();
    assert!(
        refused.contains("denied"),
        "the direct sed was refused: {refused}"
    );
    // The edit took (the state's MAC no longer matches), and is not believed.
    assert!(
        std::fs::read_to_string(scenario.state_path())
            .unwrap()
            .contains("\"status\": \"complete\""),
        "{outcome:?}"
    );
    not_reported_complete(&outcome);
    assert_eq!(requests.len(), 3, "one iteration, never re-injected");
}

/// What ralph says of a state it did not write.
const NOT_RALPHS: &str = "was not written by ralph on this machine";

/// Panics unless the run ended with an error naming a state ralph did not
/// write and the fix (never exit 0, never `complete`), and `status` shows
/// no loop status at all.
fn not_reported_complete(outcome: &ralph_tests::scenario::Outcome) {
    assert_eq!(outcome.run.code, Some(1), "{outcome:?}");
    outcome.closing_has(&[NOT_RALPHS, "ralph-ctl reset"]);
    assert!(
        !outcome.run.closing_line().contains("loop complete"),
        "{outcome:?}"
    );
    assert!(outcome.state["status"].is_null(), "{outcome:?}");
    assert!(
        ralph_tests::json_text_has(&outcome.state["error"], NOT_RALPHS),
        "{outcome:?}"
    );
}

#[ralph_tests::on_both_clients]
fn a_forged_accepted_claim_is_not_reported_as_done_without_ralphs_record(client: ClientVersion) {
    // Outside the sandbox, in bypassPermissions, a script of the agent's
    // writes a whole completion into the state: `complete` and an accepted
    // claim of the current iteration. Only the engine logs the stop that
    // accepts a claim, so the launcher does not report it as done.
    let scenario = Scenario::new("forged-claim", client).env("RALPH_SANDBOX", "off");
    let script = scenario.tmp.join("forge.py");
    let forge = format!(
        "import json\np = {:?}\ns = json.load(open(p))\ns['status'] = 'complete'\n\
         s['lastClaim'] = {{'iteration': s['iteration'], 'at': '2026-11-24T10:00:00Z', \
         'mode': 'strict', 'basis': 'forged', 'accepted': True, 'gates': [], 'verification': []}}\n\
         json.dump(s, open(p, 'w'))\n",
        scenario.state_path().display().to_string()
    );
    std::fs::write(&script, forge).unwrap();
    let command = format!("python3 {}", script.display());
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text("All done."),
    });
    let outcome = scenario.run(&api);
    let forged: serde_json::Value =
        serde_json::from_slice(&std::fs::read(scenario.state_path()).unwrap()).unwrap();
    assert_eq!(forged["lastClaim"]["accepted"], true, "the forge took");
    not_reported_complete(&outcome);
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&[NOT_RALPHS, "ralph-ctl reset"]);
}

#[ralph_tests::on_both_clients]
fn a_state_and_log_line_the_agent_writes_do_not_complete_a_failing_loop(client: ClientVersion) {
    // Outside the client's sandbox (--no-sandbox, bypassPermissions), the
    // agent's Bash call overwrites the state with `complete` and an
    // accepted claim and appends ralph's `end` line for it to the audit
    // log, then claims done while the check fails. Neither carries ralph's
    // MAC: the stop is let through, and the run does not end complete.
    let scenario = failing_tests("forged-record", client, "1 test failed")
        .args(&["--headless", "--no-sandbox"]);
    let runtime = scenario.state_path().parent().unwrap().to_path_buf();
    let forge = scenario.tmp.join("forge.py");
    std::fs::write(
        &forge,
        format!(
            "import json\nr = {runtime:?}\ns = json.load(open(r + '/ralph-state.json'))\n\
             s.pop('mac', None)\ns['status'] = 'complete'\n\
             s['endedBecause'] = 'completion claimed in iteration 1 and accepted'\n\
             s['lastClaim'] = {{'iteration': s['iteration'], 'at': '2026-11-24T10:00:00Z', \
             'mode': 'strict', 'basis': 'forged', 'accepted': True, 'gates': [], 'verification': []}}\n\
             json.dump(s, open(r + '/ralph-state.json', 'w'), indent=2)\n\
             line = {{'at': '2026-11-24T10:00:00Z', 'event': 'end', 'sessionId': s['sessionId'], \
             'iteration': s['iteration'], 'status': 'complete', 'reason': 'done'}}\n\
             open(r + '/ralph-log.jsonl', 'a').write(json.dumps(line) + '\\n')\n\
             print('forged')\n",
            runtime = runtime.display().to_string()
        ),
    )
    .unwrap();
    let command = format!("python3 {}", forge.display());
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text(format!("All done, the tests pass.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    let results: String = api
        .main_requests()
        .iter()
        .flat_map(|r| user_texts(&r.body))
        .collect();
    assert!(results.contains("forged"), "the forge ran: {results}");
    let log = std::fs::read_to_string(runtime.join("ralph-log.jsonl")).unwrap();
    assert!(
        log.contains("\"reason\": \"done\""),
        "the line went in: {log}"
    );
    not_reported_complete(&outcome);
    let shown = scenario.ctl(&["log"], &[]);
    shown.assert_stdout_has(&["1 line of the audit log not shown"]);
}

#[ralph_tests::on_both_clients]
fn a_prompt_deleted_mid_loop_is_named_by_the_launcher(client: ClientVersion) {
    // The hook cannot re-inject a prompt that is gone: it lets the session
    // stop, and the person must read why, not only "exited with code 0".
    // Without the sandbox (in it, .claude/ralph is read-only to the agent):
    // the prompt goes as a person's mistake or an unsandboxed agent removes it.
    let scenario = Scenario::new("prompt-gone", client).env("RALPH_SANDBOX", "off");
    let prompt = scenario
        .path(".claude/ralph/PROMPT.md")
        .display()
        .to_string();
    // A script, which the client does not look into: `rm` naming the file
    // is refused by the deny rule on .claude/ralph.
    let script = scenario.tmp.join("remove.sh");
    std::fs::write(&script, format!("rm {prompt}\n")).unwrap();
    let script = script.display().to_string();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(format!("sh {script}")),
        _ => Reply::text("Removed a file; more to do."),
    });
    let outcome = scenario.run(&api);
    outcome.ended(12, "interrupted");
    outcome.closing_has(&[
        "ralph: loop interrupted",
        "at its last stop the hook could not go on",
        "PROMPT.md",
        "does not exist",
    ]);
    // The audit log keeps the hook's own line, before the end.
    let problem = scenario.log_line("problem");
    assert!(problem.contains("PROMPT.md"), "{problem}");
}

#[ralph_tests::on_both_clients]
fn a_hook_that_never_runs_is_named_by_the_launcher(client: ClientVersion) {
    // A registration that points nowhere: the client runs it, it fails, and
    // the session stops after one turn without a stop on record.
    let scenario = Scenario::new("hook-missing", client);
    let settings_path = scenario.path(".claude/settings.json");
    let mut settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&settings_path).unwrap()).unwrap();
    let nowhere = scenario.path("moved-away/ralph-stop-hook");
    settings["hooks"]["Stop"][0]["hooks"][0]["command"] = nowhere.display().to_string().into();
    std::fs::write(&settings_path, settings.to_string()).unwrap();
    let api = MockApi::start(|_, _| Reply::text("Worked on it."));
    let outcome = scenario.run(&api);
    assert_eq!(outcome.run.code, Some(12), "{outcome:?}");
    outcome.closing_has(&["no stop was ever recorded: the Stop hook did not run"]);
    assert_eq!(api.main_requests().len(), 1, "one turn, never re-injected");
}

#[ralph_tests::on_both_clients]
fn a_headless_loop_can_edit_the_project_without_a_permission_mode_given(client: ClientVersion) {
    // Without a mode, `-p` denies every file edit (nobody answers the
    // prompt); the launcher gives acceptEdits unless the person names one.
    let scenario = Scenario::new("headless-edits", client).exact_args(&["--headless"]);
    let root = scenario.root.clone();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::write(root.join("new.txt").display().to_string(), "x\n"),
        1 => Reply::bash("echo hi > bashed.txt"),
        _ => Reply::text(format!("Wrote both files.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let written = scenario.path("new.txt").is_file();
    assert!(written, "the Write went through: {outcome:?}");
    let bashed = scenario.path("bashed.txt").is_file();
    assert!(bashed, "the Bash call went through: {outcome:?}");
    assert!(outcome.history()[0]["error"].is_null(), "{outcome:?}");
}

#[ralph_tests::on_both_clients]
fn refused_tool_calls_stop_a_loop_that_cannot_work(client: ClientVersion) {
    // The person chose the default mode: every Write is refused, nobody can
    // grant it, and nothing changes. Two such iterations end the loop with
    // the refusal named, not the whole budget.
    let scenario = Scenario::new("denied", client).exact_args(&[
        "--headless",
        "--",
        "--permission-mode",
        "default",
    ]);
    let root = scenario.root.clone();
    let write = Reply::write(root.join("new.txt").display().to_string(), "x\n");
    let api = MockApi::start(script::call_then_say(write, "Tried to write the file."));
    let outcome = scenario.run(&api);
    // Two iterations whose refusals the stops saw: 2.1.330 under load may
    // write an iteration's calls only after its stop (`toolsIncomplete`).
    let unseen = outcome
        .history()
        .iter()
        .filter(|r| r["toolsIncomplete"] == true)
        .count();
    outcome
        .ended(11, "circuit_open")
        .at_iteration(2 + unseen as u64);
    let because = outcome.state["endedBecause"].as_str().unwrap();
    let write = format!("`Write({})`", scenario.path("new.txt").display());
    let refused = format!("the client refused {write} for lack of permission in 2 iterations");
    assert!(because.contains(&refused), "{because}");
    assert!(
        because.contains("`-- --permission-mode acceptEdits`"),
        "{because}"
    );
    assert!(!scenario.path("new.txt").exists());
}

#[ralph_tests::on_both_clients]
fn failing_tests_never_complete_a_loop_after_init_with_its_defaults(client: ClientVersion) {
    // A small Python project whose test fails; `init --yes` makes its test
    // command the completion check. The agent cannot fix the bug and claims
    // done every time: the loop must never end `complete`.
    let project = TempProject::python_with_a_failing_test("failing-tests");
    let init = project.ctl_exits(&["init", "--yes"], 0);
    init.assert_stdout_has(&["Completion check: `python3 -m unittest`"]);
    let scenario = Scenario::around(project, client)
        .prompt("Fix add() in calc.py so that the tests pass.\n")
        .env("RALPH_MAX_ITERATIONS", "6");
    let api = MockApi::start(|_, _| Reply::text(format!("Fixed add(); all tests pass.\n{SIGNAL}")));
    let outcome = scenario.run(&api);
    assert_ne!(outcome.state["status"], "complete", "{outcome:?}");
    assert_ne!(outcome.run.code, Some(0), "{outcome:?}");
    let claim = &outcome.state["lastClaim"];
    assert_eq!(claim["accepted"], false, "{outcome:?}");
    let tail = claim["verification"][0]["outputTail"]
        .as_str()
        .unwrap_or_default();
    assert!(tail.contains("FAILED"), "the test's own failure: {tail}");
    assert!(
        !outcome.run.closing_line().contains("loop complete"),
        "{outcome:?}"
    );
}

#[ralph_tests::on_both_clients]
fn the_untouched_template_is_refused_before_the_client_starts(client: ClientVersion) {
    let project = TempProject::new("template");
    project.init_untouched();
    let scenario = Scenario::around(project, client);
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    let refused = scenario.run(&api);
    assert_eq!(refused.run.code, Some(3), "{refused:?}");
    refused.closing_has(&["PROMPT.md is still the template", "--force"]);
    assert!(api.main_requests().is_empty(), "the client never ran");
    assert!(scenario.state().is_none(), "no loop was started");

    // --force runs it as it is.
    let forced = scenario.args(&["--force", "--headless"]);
    forced.run(&api).ended(0, "complete");
}

#[ralph_tests::on_both_clients]
fn the_agent_cannot_write_the_loop_state_with_its_file_tools(client: ClientVersion) {
    // The deny rules `init` wrote refuse the Write ("File is in a directory
    // that is denied by your permission settings."), in acceptEdits (what
    // the headless launcher gives) and in bypassPermissions alike; without
    // them bypassPermissions lets it through. The state keeps what ralph
    // wrote, and the loop ends on its real claim.
    for mode in ["acceptEdits", "bypassPermissions"] {
        let scenario = Scenario::new("deny-state", client).exact_args(&[
            "--headless",
            "--",
            "--permission-mode",
            mode,
        ]);
        let state_file = scenario.state_path().display().to_string();
        // Read first: the client refuses to overwrite a file it has not read.
        let api = MockApi::start(move |turn, _| match turn {
            0 => Reply::ToolUse {
                name: "Read".into(),
                input: serde_json::json!({ "file_path": state_file.clone() }),
            },
            1 => Reply::write(state_file.clone(), "{\"status\": \"complete\"}\n"),
            _ => Reply::text(format!("Done.\n{SIGNAL}")),
        });
        let outcome = scenario.run(&api);
        let requests = api.main_requests();
        let refusal = requests.get(2).and_then(|r| user_texts(&r.body).pop());
        let refusal = refusal.unwrap_or_default();
        outcome.ended(0, "complete");
        let real = outcome.state["lastClaim"]["accepted"] == true;
        assert!(real, "{mode}: a real claim: {outcome:?}");
        assert!(
            refusal.contains("denied by your permission settings")
                || refusal.contains("requested permissions to edit"),
            "{mode}: the Write was refused: {refusal}"
        );
    }
}

#[ralph_tests::on_both_clients]
fn a_blocked_status_block_ends_the_loop_blocked_at_once(client: ClientVersion) {
    // The agent cannot go on without the person: the loop stops at that
    // stop, says why, and is not resumed on its own.
    let scenario = Scenario::new("blocked", client);
    let api = MockApi::start(|_, _| {
        Reply::text(
            "I need the staging credentials.\n---RALPH_STATUS---\nSTATUS: BLOCKED\n\
             RECOMMENDATION: put the staging API key in .env\n---END_RALPH_STATUS---",
        )
    });
    let outcome = scenario.run(&api);
    outcome.ended(18, "blocked").at_iteration(1);
    let because = outcome.state["endedBecause"].as_str().unwrap();
    assert!(
        because.contains("put the staging API key in .env"),
        "{outcome:?}"
    );
    assert_eq!(api.main_requests().len(), 1, "never fed back");
    outcome.closing_has(&[
        "loop blocked at iteration 1 of 25",
        "ralph-ctl run --resume",
    ]);
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&["put the staging API key in .env"]);
}

/// The raw bytes a terminal obeys that the agent's text may carry: ESC
/// (the start of every sequence) and BEL (the end of an OSC 52 clipboard
/// write), a carriage return (a line written over) and CSI on its own.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| matches!(c, '\u{1b}' | '\u{7}' | '\r' | '\u{9b}'))
        .collect()
}

#[ralph_tests::on_both_clients]
fn the_agents_terminal_escapes_are_shown_never_obeyed(client: ClientVersion) {
    // The final message erases the line and writes a fake ending, hides
    // text, and writes the person's clipboard (OSC 52), in its words and in
    // its RALPH_ABORT reason, which the closing line and `status` quote.
    let scenario = Scenario::new("escapes", client);
    let api = MockApi::start(|_, _| {
        Reply::text(concat!(
            "\u{1b}[2Kralph: loop complete at iteration 1 of 25 ",
            "\u{1b}[8mhidden words\u{1b}[0m \u{1b}]52;c;ZXZpbA==\u{7}copied\n",
            "RALPH_ABORT: \u{1b}[2Kthe key \u{1b}[8mis missing\u{1b}]52;c;ZXZpbA==\u{7}",
        ))
    });
    let outcome = scenario.run(&api);
    outcome.ended(18, "blocked").at_iteration(1);
    let launcher = format!("{}{}", outcome.run.stdout, outcome.run.stderr);
    assert_eq!(
        raw_controls(&launcher),
        [],
        "the launcher's output: {launcher:?}"
    );
    outcome.closing_has(&[
        "loop blocked at iteration 1 of 25",
        r"\x1b[2Kthe key \x1b[8mis missing\x1b]52;c;ZXZpbA==\x07",
    ]);
    // The live line of what the agent said shows its words, escapes visible.
    assert!(
        outcome.run.stdout.contains(r"\x1b[8mhidden words\x1b[0m"),
        "{launcher}"
    );
    let status = scenario.ctl_exits(&["status"], 0);
    assert_eq!(
        raw_controls(&status.stdout),
        [],
        "status: {:?}",
        status.stdout
    );
    status.assert_stdout_has(&[
        r"\x1b[2Kthe key \x1b[8mis missing\x1b]52;c;ZXZpbA==\x07",
        r"\x1b[2Kralph: loop complete at iteration 1 of 25 \x1b[8mhidden words",
    ]);
    // The state keeps what the agent wrote, as it was.
    let because = outcome.state["endedBecause"].as_str().unwrap();
    assert!(
        because.contains("\u{1b}[8mis missing\u{1b}]52;c;ZXZpbA==\u{7}"),
        "{because:?}"
    );
}

#[ralph_tests::on_both_clients]
fn a_session_loop_makes_room_for_checks_that_outgrew_the_hook_s_timeout(client: ClientVersion) {
    // Checks of up to 120 s, after init registered the hook with room for
    // the default 60: in one session the Stop hook runs them, so the start
    // sizes the hook's timeout as init would and says so, once, though two
    // claims run them. The check passes at its third run: the start's test
    // baseline, the first claim (rejected), the second claim.
    let config = r#"{"verify": [{"name": "tests", "timeoutSeconds": 120,
        "command": "echo run >> work/runs; test $(wc -l < work/runs) -ge 3"}]}"#;
    let scenario = Scenario::new("hook-timeout", client)
        .file(".claude/ralph/config.json", config)
        .file("work/.keep", "");
    let api = MockApi::start(script::signal_at(0));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    let needle = "the Stop hook's timeout in";
    let said =
        outcome.run.stdout.matches(needle).count() + outcome.run.stderr.matches(needle).count();
    assert_eq!(said, 1, "{outcome:?}");
    outcome.run.assert_stderr_has(&[
        "was 90 s, less than the verify commands may take (120 s): set to 150 s",
    ]);
    let settings: serde_json::Value =
        serde_json::from_str(&scenario.read(".claude/settings.json")).unwrap();
    assert_eq!(
        settings["hooks"]["Stop"][0]["hooks"][0]["timeout"], 150,
        "{settings:#}"
    );
}
