//! End-to-end: the real Claude Code client (both pinned versions), driven by
//! our launcher, against a scripted mock of the Messages API on 127.0.0.1,
//! with our hook registered by `ralph-ctl init` in a temp git project.
//!
//! Compiled only with the `e2e` feature (tests/run.sh turns it on). Run one
//! scenario alone with e.g. `tests/run.sh -p ralph-tests --test e2e completes_on_signal`.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{stop_hook_feedback, user_texts, MockApi, Reply};
use ralph_tests::project::{
    child_of, processes_in_group, signal_process, wait_with_timeout, TempProject,
};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};

/// Polls `check` until it holds or `timeout` passes.
fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        thread::sleep(Duration::from_millis(25));
    }
    false
}

/// The loop's current iteration, 0 when there is no readable state.
fn iteration(project: &TempProject) -> u64 {
    project
        .state()
        .and_then(|s| s["iteration"].as_u64())
        .unwrap_or(0)
}

#[ralph_tests::on_both_clients]
fn completes_on_signal(client: ClientVersion) {
    let project = TempProject::new("complete");
    project.init();
    project.write_prompt("Improve the project.\n");
    let api = MockApi::start(|turn, _| {
        if turn < 3 {
            Reply::text(format!("Worked on step {}.", turn + 1))
        } else {
            Reply::text(format!("All steps done.\n{SIGNAL}"))
        }
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 4, "{state:#}");
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

#[ralph_tests::on_both_clients]
fn runs_exactly_max_iterations_past_the_client_block_cap(client: ClientVersion) {
    let project = TempProject::new("max");
    project.init();
    let api = MockApi::start(|turn, _| Reply::text(format!("Still working (turn {turn}).")));
    let run = project.run_launcher(
        client,
        &api,
        &[("RALPH_MAX_ITERATIONS", "12")],
        LOOP_TIMEOUT,
    );
    run.assert_code(10);
    run.assert_stderr_has(&["max_iterations"]);
    let state = project.status_json();
    assert_eq!(state["status"], "max_iterations", "{state:#}");
    assert_eq!(state["iteration"], 12);
    assert_eq!(state["maxIterations"], 12);
    assert_eq!(
        api.main_requests().len(),
        12,
        "exactly 12 iterations reached the model"
    );
    let history = state["history"].as_array().unwrap();
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
    let project = TempProject::new("guard");
    project.init();
    let api = MockApi::start(|_, _| Reply::text("Here is my answer."));
    let run = project.run_client(client, &api, "Say hi", &[], LOOP_TIMEOUT);
    run.assert_code(0);
    assert_eq!(api.main_requests().len(), 1, "one turn only");
    assert!(project.state().is_none(), "no state file appears");
    let runtime: Vec<String> = std::fs::read_dir(project.path(".claude/context/runtime"))
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
    let project = TempProject::new("second-after");
    project.init();
    let api = MockApi::start(|turn, _| {
        if turn < 1 {
            Reply::text("Working.")
        } else {
            Reply::text(format!("Done.\n{SIGNAL}"))
        }
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let before = std::fs::read(project.state_path()).unwrap();

    let other = MockApi::start(|_, _| Reply::text("An unrelated answer."));
    let run = project.run_client(
        client,
        &other,
        "Unrelated question",
        &[("RALPH_ACTIVE", "1")],
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    assert_eq!(
        other.main_requests().len(),
        1,
        "the second session stopped after one turn"
    );
    assert_eq!(
        std::fs::read(project.state_path()).unwrap(),
        before,
        "the loop's state is untouched"
    );
}

#[ralph_tests::on_both_clients]
fn second_session_during_a_running_loop_is_let_through(client: ClientVersion) {
    let project = TempProject::new("second-during");
    project.init();
    // The loop keeps working until the second session is over, then completes.
    let second_done = Arc::new(AtomicBool::new(false));
    let done = Arc::clone(&second_done);
    let api = MockApi::start(move |turn, _| {
        thread::sleep(Duration::from_millis(100));
        if done.load(Ordering::SeqCst) {
            Reply::text(format!("Done.\n{SIGNAL}"))
        } else {
            Reply::text(format!("Working {turn}."))
        }
    });
    let mut cmd = project.launcher_command(client, &api, &[("RALPH_MAX_ITERATIONS", "1000")]);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    assert!(
        wait_until(LOOP_TIMEOUT, || iteration(&project) >= 2),
        "the loop never reached iteration 2"
    );
    let other = MockApi::start(|_, _| Reply::text("An unrelated answer."));
    let run = project.run_client(
        client,
        &other,
        "Unrelated question",
        &[("RALPH_ACTIVE", "1")],
        LOOP_TIMEOUT,
    );
    let running_after = project.status_json();
    second_done.store(true, Ordering::SeqCst);
    run.assert_code(0);
    assert_eq!(
        other.main_requests().len(),
        1,
        "the second session stopped after one turn"
    );
    assert_eq!(
        running_after["status"], "running",
        "the loop was still running: {running_after:#}"
    );

    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let iterations = state["iteration"].as_u64().unwrap() as usize;
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
    let project = TempProject::new("edit");
    project.init();
    project.write_prompt("Original task text.\n");
    let prompt_path = project.path(".claude/ralph/PROMPT.md");
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
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
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
    let project = TempProject::new("quoted");
    project.init();
    project.write_prompt(&format!(
        "Fix everything. When nothing remains, write {SIGNAL} on its own line.\n<promise>{SIGNAL}</promise>\n"
    ));
    let api = MockApi::start(|turn, _| Reply::text(format!("Fixed one more thing ({turn}).")));
    let run = project.run_launcher(client, &api, &[("RALPH_MAX_ITERATIONS", "4")], LOOP_TIMEOUT);
    run.assert_code(10);
    let state = project.status_json();
    assert_eq!(state["status"], "max_iterations");
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
    let project = TempProject::new("tools");
    project.init();
    let root = project.root.clone();
    // Each iteration: a Write, then a Bash call, then a text answer; the third iteration completes.
    let api = MockApi::start(move |turn, _| {
        let step = turn / 3 + 1;
        match turn % 3 {
            0 => Reply::write(
                root.join(format!("step{step}.txt")).display().to_string(),
                format!("step {step}\n"),
            ),
            1 => Reply::bash(format!("echo ran >> {}", root.join("log.txt").display())),
            _ if step < 3 => Reply::text(format!("Finished step {step}.")),
            _ => Reply::text(format!("All three steps are done.\n{SIGNAL}")),
        }
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3);
    for step in 1..=3 {
        assert!(
            project.path(format!("step{step}.txt")).is_file(),
            "step {step} wrote its file"
        );
    }
    let log = std::fs::read_to_string(project.path("log.txt")).unwrap();
    assert_eq!(
        log.lines().count(),
        3,
        "the Bash call ran once per iteration"
    );
    let history = state["history"].as_array().unwrap();
    assert_eq!(history.len(), 3);
    assert!(
        history[0]["excerpt"]
            .as_str()
            .unwrap()
            .contains("Finished step 1"),
        "{history:#?}"
    );
}

#[ralph_tests::on_both_clients]
fn client_killed_mid_loop_is_resumed_per_policy(client: ClientVersion) {
    // The client killed from outside the launcher (as the out-of-memory
    // killer does): a crash, not the person's stop. The loop pauses, the
    // supervisor resumes its session after the backoff, and it goes on to
    // its end; only a signal to the launcher interrupts a loop.
    let project = TempProject::new("killed");
    project.init();
    let killed = Arc::new(AtomicBool::new(false));
    let after_kill = Arc::clone(&killed);
    let api = MockApi::start(move |turn, _| {
        if after_kill.load(Ordering::SeqCst) {
            return Reply::text(format!("Picked up again. Done.\n{SIGNAL}"));
        }
        thread::sleep(Duration::from_millis(200));
        Reply::text(format!("Working {turn}."))
    });
    let mut cmd = project.launcher_command(client, &api, &[("RALPH_RESUME_BACKOFF_SECONDS", "1")]);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    assert!(
        wait_until(LOOP_TIMEOUT, || iteration(&project) >= 3),
        "the loop never reached iteration 3"
    );
    let client_pid = child_of(launcher.id()).expect("the launcher runs the client");
    killed.store(true, Ordering::SeqCst);
    signal_process(client_pid, libc::SIGKILL);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let log =
        std::fs::read_to_string(project.path(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    let pause = log
        .lines()
        .find(|l| l.contains("\"event\":\"pause\""))
        .unwrap_or_else(|| panic!("no pause: {log}"));
    assert!(pause.contains("killed by signal 9"), "{pause}");
    assert!(log.contains("\"event\":\"resume\""), "{log}");
    assert!(!log.contains("\"status\":\"interrupted\""), "{log}");
}

#[ralph_tests::on_both_clients]
fn stalled_loop_opens_the_breaker_and_blocks_the_next_start(client: ClientVersion) {
    let project = TempProject::new("stalled");
    project.init();
    // Every iteration: the same failing command, then the same complaint. Nothing changes.
    let api = MockApi::start(|turn, _| {
        if turn % 2 == 0 {
            Reply::bash("cat missing-config.toml")
        } else {
            Reply::text(
                "The build still fails:\nerror: missing-config.toml: No such file or directory",
            )
        }
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(11);
    run.assert_stderr_has(&["circuit_open"]);
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    assert_eq!(state["breaker"]["state"], "open");
    let stopped_at = state["iteration"].as_u64().unwrap();
    assert!(stopped_at <= 6, "stopped at iteration {stopped_at}");
    let history = state["history"].as_array().unwrap();
    let transitions: Vec<String> = history
        .iter()
        .filter(|r| r["breaker"].is_object())
        .map(|r| format!("{} → {}", r["breaker"]["from"], r["breaker"]["to"]))
        .collect();
    assert_eq!(
        transitions,
        vec![
            "\"closed\" → \"half_open\"".to_string(),
            "\"half_open\" → \"open\"".to_string()
        ],
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
        !warnings.is_empty(),
        "the re-injection carried the breaker's notice"
    );
    assert!(
        warnings[0].contains("no file changed in 3 iterations"),
        "{}",
        warnings[0]
    );

    // Open is sticky: the launcher refuses to start until a reset.
    let refused = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    refused.assert_code(3);
    refused.assert_stderr_has(&["circuit breaker is open", "ralph-ctl reset"]);
    assert_eq!(
        project.status_json()["status"],
        "circuit_open",
        "a refused start changes nothing"
    );
    project.ctl(&["reset"], &[]).assert_code(0);
    let api = MockApi::start(|_, _| Reply::text(format!("Fixed it.\n{SIGNAL}")));
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
}

#[ralph_tests::on_both_clients]
fn working_loop_never_trips_the_breaker(client: ClientVersion) {
    let project = TempProject::new("working");
    project.init();
    let root = project.root.clone();
    // Ten iterations of real work: new untracked files, edits, and commits,
    // each followed by a short report; the tenth completes.
    let api = MockApi::start(move |turn, _| {
        let iteration = turn / 2 + 1;
        if turn % 2 == 0 {
            match iteration % 3 {
                0 => Reply::bash(format!(
                    "echo step {iteration} >> {} && git add -A && git commit -q -m 'step {iteration}'",
                    root.join("notes.md").display()
                )),
                1 => Reply::write(
                    root.join(format!("src{iteration}.txt")).display().to_string(),
                    format!("work {iteration}\n"),
                ),
                _ => Reply::write(root.join("notes.md").display().to_string(), format!("edited in {iteration}\n")),
            }
        } else if iteration < 10 {
            Reply::text(format!("Step {iteration} done; more to do."))
        } else {
            Reply::text(format!("Everything is done.\n{SIGNAL}"))
        }
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 10);
    assert_eq!(state["breaker"]["state"], "closed");
    assert!(
        state["breaker"]["lastTransition"].is_null(),
        "never left closed: {state:#}"
    );
    assert_eq!(state["breaker"]["counters"]["noProgress"], 0);
    let history = state["history"].as_array().unwrap();
    assert!(history.iter().all(|r| r["breaker"].is_null()));
}

#[ralph_tests::on_both_clients]
fn a_claim_is_sent_back_until_verification_passes(client: ClientVersion) {
    let project = TempProject::new("verify");
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    project.write(".claude/ralph/config.json", r#"{"verify": [{"name": "check", "command": "test -f done.txt && echo verified", "timeoutSeconds": 20}]}"#);
    project.init();
    let done = project.path("done.txt").display().to_string();
    // Claims too early, is told why, creates the file, claims again.
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::text(format!("Everything is finished.\n{SIGNAL}")),
        1 => Reply::write(done.clone(), "ok\n"),
        _ => Reply::text(format!(
            "Created done.txt; verification should pass now.\n{SIGNAL}"
        )),
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2);
    let claim = &state["lastClaim"];
    assert_eq!(claim["accepted"], true);
    assert!(claim["verification"][0]["outputTail"]
        .as_str()
        .unwrap()
        .contains("verified"));
    assert_eq!(state["history"][0]["claim"]["accepted"], false, "{state:#}");
    assert_eq!(
        state["history"][0]["claim"]["failedGates"][0], "verification",
        "{state:#}"
    );

    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert_eq!(fed_back.len(), 1, "{fed_back:#?}");
    assert!(
        fed_back[0].starts_with("[Ralph: completion claim rejected]"),
        "{}",
        fed_back[0]
    );
    assert!(
        fed_back[0].contains("`test -f done.txt && echo verified` (check) exited 1"),
        "{}",
        fed_back[0]
    );
    let notice_at = fed_back[0].find("completion claim rejected").unwrap();
    let prompt_at = fed_back[0].find("[Ralph loop: iteration 2 of").unwrap();
    assert!(notice_at < prompt_at, "the failure comes before PROMPT.md");
    let status = project.ctl(&["status"], &[]);
    status.assert_stdout_has(&["last claim:", "verification passed"]);
}

#[ralph_tests::on_both_clients]
fn an_unchecked_plan_item_blocks_a_claim(client: ClientVersion) {
    let project = TempProject::new("plan");
    project.init();
    let plan = project.path("IMPLEMENTATION_PLAN.md");
    std::fs::write(
        &plan,
        "# Plan\n- [x] parser\n- [ ] write the user guide\n## Nice to have\n- [ ] emoji output\n",
    )
    .unwrap();
    let plan_path = plan.display().to_string();
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
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2);
    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert!(fed_back[0].contains("plan gate"), "{}", fed_back[0]);
    assert!(
        fed_back[0].contains("IMPLEMENTATION_PLAN.md: - [ ] write the user guide"),
        "{}",
        fed_back[0]
    );
    assert!(
        !fed_back[0].contains("emoji output"),
        "optional sections do not block"
    );
}

#[ralph_tests::on_both_clients]
fn mentions_and_vetoed_claims_never_end_the_loop(client: ClientVersion) {
    let project = TempProject::new("mentions");
    project.init();
    let api = MockApi::start(|turn, _| {
        match turn % 3 {
        0 => Reply::text(format!("I will write {SIGNAL} once the last test passes.")),
        1 => Reply::text(
            "All tasks complete.\n---RALPH_STATUS---\nSTATUS: COMPLETE\nTESTS_STATUS: PASSING\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---",
        ),
        _ => Reply::text(format!("Here is the instruction I follow:\n```\n{SIGNAL}\n```\nStill on it.")),
    }
    });
    let run = project.run_launcher(client, &api, &[("RALPH_MAX_ITERATIONS", "6")], LOOP_TIMEOUT);
    run.assert_code(10);
    let state = project.status_json();
    assert_eq!(state["status"], "max_iterations", "{state:#}");
    assert!(
        state["lastClaim"].is_null(),
        "no message was a claim: {state:#}"
    );
    assert_eq!(state["history"][1]["statusBlock"]["exitSignal"], false);
}

#[ralph_tests::on_both_clients]
fn tool_use_without_change_opens_the_breaker(client: ClientVersion) {
    let project = TempProject::new("looking");
    project.init();
    // Every iteration: a Bash `ls` (a tool call that changes nothing), then talk.
    let api = MockApi::start(|turn, _| {
        if turn % 2 == 0 {
            Reply::bash("ls")
        } else {
            Reply::text("Looked at the files again; still thinking.")
        }
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(11);
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    let stopped_at = state["iteration"].as_u64().unwrap();
    assert!(
        stopped_at <= 6,
        "stopped at iteration {stopped_at}: {state:#}"
    );
    let history = state["history"].as_array().unwrap();
    // A stop whose transcript had not caught up (2.1.330 under load) says
    // so rather than counting: toolsIncomplete.
    assert!(
        history
            .iter()
            .all(|r| r["toolCalls"] == 1 || r["toolsIncomplete"] == true),
        "each iteration's one tool call was counted: {history:#?}"
    );
    assert!(
        history
            .iter()
            .filter_map(|r| r["breaker"]["reason"].as_str())
            .any(|r| r.contains("no file changed")),
        "{history:#?}"
    );
}

#[ralph_tests::on_both_clients]
fn identical_rejected_claims_open_the_breaker_before_the_cap(client: ClientVersion) {
    let project = TempProject::new("rejected");
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    project.write(".claude/ralph/config.json", r#"{"verify": [{"name": "tests", "command": "echo '1 test failed: parser::nested'; exit 1", "timeoutSeconds": 20}]}"#);
    project.init();
    let root = project.root.clone();
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
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(11);
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    let stopped_at = state["iteration"].as_u64().unwrap();
    assert!(stopped_at <= 6, "stopped at iteration {stopped_at} of 25");
    assert_eq!(state["breaker"]["counters"]["noProgress"], 0, "{state:#}");
    let reason = state["breaker"]["lastTransition"]["reason"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains("the same completion claim was rejected"),
        "{reason}"
    );
}

#[ralph_tests::on_both_clients]
fn errors_are_recorded_against_their_own_iteration(client: ClientVersion) {
    let project = TempProject::new("attribution");
    project.init();
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
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let history = state["history"].as_array().unwrap();
    assert_eq!(history.len(), 4, "{history:#?}");
    let errors: Vec<bool> = history.iter().map(|r| r["error"].is_string()).collect();
    // 2.1.330 under load may write an iteration's tool result and final
    // message only after its Stop hook returned: then the stop says its tool
    // evidence is incomplete, and the error is charged to no other iteration.
    let incomplete = history[1]["toolsIncomplete"] == true;
    let want = if incomplete {
        [false, false, false, false]
    } else {
        [false, true, false, false]
    };
    if errors != want {
        // The transcript as the client left it, to see what the hook could not.
        if let Some(path) = state["transcript"]["path"].as_str() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for line in text.lines() {
                let v: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
                eprintln!(
                    "T {} {} {} {}",
                    v["timestamp"],
                    v["type"],
                    v["subtype"],
                    line.chars().take(300).collect::<String>()
                );
            }
        }
    }
    assert_eq!(errors, want, "{history:#?}");
    assert!(
        history
            .iter()
            .enumerate()
            .all(|(i, r)| i == 1 || r["toolsIncomplete"].is_null()),
        "{history:#?}"
    );
    let calls: Vec<u64> = history
        .iter()
        .map(|r| r["toolCalls"].as_u64().unwrap())
        .collect();
    assert_eq!([calls[0], calls[2], calls[3]], [1, 0, 0], "{history:#?}");
    // An incomplete stop may have seen its tool call, or not yet.
    if incomplete {
        assert!(calls[1] <= 1, "{history:#?}");
    } else {
        assert_eq!(calls[1], 1, "{history:#?}");
    }
    let excerpts: Vec<&str> = history
        .iter()
        .map(|r| r["excerpt"].as_str().unwrap())
        .collect();
    assert!(excerpts[0].contains("Step one"), "{excerpts:?}");
    assert!(excerpts[1].contains("Step two"), "{excerpts:?}");
    assert!(excerpts[2].contains("Step three"), "{excerpts:?}");
}

#[ralph_tests::on_both_clients]
fn prompt_near_its_size_limit_runs_a_headless_loop(client: ClientVersion) {
    let project = TempProject::new("large-prompt");
    project.init();
    // ~900 KiB of distinct lines: seven times what one command-line argument may hold.
    let mut prompt = String::from("Fix every finding listed below.\n");
    let mut n = 0;
    while prompt.len() < 900 * 1024 {
        prompt.push_str(&format!("- finding {n}: module {} needs a fix\n", n % 89));
        n += 1;
    }
    prompt.push_str("LAST-LINE-OF-THE-TASK\n");
    project.write_prompt(&prompt);
    let api = MockApi::start(|turn, _| {
        if turn < 1 {
            Reply::text("Fixed the first batch.")
        } else {
            Reply::text(format!("All findings are fixed.\n{SIGNAL}"))
        }
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2);
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
    let project = TempProject::new("sigterm");
    project.init();
    // SIGHUP is what a closing terminal sends; the driver handles it the same way.
    for (signal, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGHUP, "SIGHUP", 129),
    ] {
        let api = MockApi::start(|turn, _| {
            thread::sleep(Duration::from_millis(200));
            Reply::text(format!("Working {turn}."))
        });
        let mut cmd = project.launcher_command(client, &api, &[("RALPH_MAX_ITERATIONS", "1000")]);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let before = project.state().map(|s| s["sessionId"].clone());
        let mut launcher = cmd.spawn().unwrap();
        let group = launcher.id();
        assert!(
            wait_until(LOOP_TIMEOUT, || project.state().is_some_and(|s| {
                Some(&s["sessionId"]) != before.as_ref() && s["iteration"].as_u64() >= Some(2)
            })),
            "the loop never reached iteration 2"
        );
        let started = Instant::now();
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
        let state = project.status_json();
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
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
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

#[ralph_tests::on_both_clients]
fn interactive_loop_in_a_terminal(client: ClientVersion) {
    use std::io::Write;
    let project = TempProject::new("interactive");
    project.init();
    // 2.1.330 gets a prompt too long for an argument, so it arrives on stdin
    // while the keyboard stays the terminal; 2.0.77's screen takes minutes to
    // show one that long, so it gets a short one, as an argument.
    let size = match client {
        ClientVersion::V2_1_330 => 300 * 1024,
        ClientVersion::V2_0_77 => 2 * 1024,
    };
    let mut prompt = String::from("Work through the list.\n");
    let mut n = 0;
    while prompt.len() < size {
        prompt.push_str(&format!("- item {n}\n"));
        n += 1;
    }
    project.write_prompt(&prompt);
    let api = MockApi::start(|turn, _| {
        if turn < 1 {
            Reply::text("Did the first items.")
        } else {
            Reply::text(format!("The list is done.\n{SIGNAL}"))
        }
    });
    let (mut terminal, mut keys) = launch_in_a_terminal(&project, client, &api);
    let completed = wait_until(LOOP_TIMEOUT, || {
        project.state().is_some_and(|s| s["status"] == "complete")
    });
    // The loop is over; the interactive client stays open until the person
    // leaves it: Ctrl-C is a key for it (the terminal is raw); pressed twice
    // within a second, it exits.
    thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        let _ = keys.write_all(b"\x03");
        thread::sleep(Duration::from_millis(250));
        let _ = keys.write_all(b"\x03");
        let pressed = Instant::now();
        while terminal.try_wait().ok().flatten().is_none()
            && pressed.elapsed() < Duration::from_secs(3)
        {
            thread::sleep(Duration::from_millis(50));
        }
        if terminal.try_wait().ok().flatten().is_some() {
            break;
        }
    }
    let (status, out, err) = wait_with_timeout(&mut terminal, Duration::from_secs(30));
    assert!(completed, "the loop never completed; screen: {out}\n{err}");
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(0),
        "the launcher reports the completed loop; screen: {out}"
    );
    let state = project.status_json();
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
        last["excerpt"]
            .as_str()
            .is_some_and(|e| e.contains("The list is done")),
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
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(project.root.join("mono/other")).unwrap();
    std::fs::write(app.join("lib.txt"), "0\n").unwrap();
    std::fs::write(project.root.join("mono/other/x.txt"), "x\n").unwrap();
    project.git(&["add", "-A"]);
    project.git(&["commit", "-q", "-m", "monorepo"]);
    // The loop's project is mono/app; the repository's top is two folders up.
    project.root = app.clone();
    project.init();
    // Every iteration: a Bash call that changes a tracked file of the project, then a report.
    let api = MockApi::start(|turn, _| {
        let iteration = turn / 2 + 1;
        if turn % 2 == 0 {
            Reply::bash(format!("echo {iteration} >> lib.txt"))
        } else if iteration < 6 {
            Reply::text(format!("Appended {iteration} to lib.txt; more to do."))
        } else {
            Reply::text(format!("All six steps are in lib.txt.\n{SIGNAL}"))
        }
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 6);
    assert_eq!(
        std::fs::read_to_string(app.join("lib.txt")).unwrap(),
        "0\n1\n2\n3\n4\n5\n6\n"
    );
    let breaker = &state["breaker"];
    assert_eq!(breaker["state"], "closed", "{breaker:#}");
    assert!(breaker["lastTransition"].is_null(), "{breaker:#}");
    assert_eq!(breaker["counters"]["noProgress"], 0, "{breaker:#}");
    assert!(
        state["history"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["breaker"].is_null()),
        "{state:#}"
    );
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
    let notes = project.path("notes");
    let api = MockApi::start(move |turn, _| {
        let iteration = turn / 2 + 1;
        if turn % 2 == 0 {
            Reply::write(
                notes
                    .join(format!("step{iteration}.md"))
                    .display()
                    .to_string(),
                format!("step {iteration}\n"),
            )
        } else if iteration < 4 {
            Reply::text(format!("Wrote step {iteration}."))
        } else {
            Reply::text(format!("All four steps are written.\n{SIGNAL}"))
        }
    });
    project
        .run_launcher(client, &api, &[], LOOP_TIMEOUT)
        .assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 4);
    let breaker = &state["breaker"];
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
    let files: Vec<&String> = progress["files"]
        .as_object()
        .unwrap_or(&no_files)
        .keys()
        .collect();
    let history = state["history"].as_array().unwrap();
    // Decided by the edit: the stop saw the Write and its result.
    let saw_write: Vec<bool> = history
        .iter()
        .map(|r| r["progress"] == "tool_edits")
        .collect();
    assert!(
        saw_write.iter().any(|&saw| saw),
        "no stop saw its Write in the transcript: {history:#?}"
    );
    assert!(
        files
            .iter()
            .all(|f| (1..=4).any(|i| **f == format!("notes/step{i}.md"))),
        "{progress:#}"
    );
    if saw_write[3] {
        assert!(
            files.iter().any(|f| *f == "notes/step4.md"),
            "the last stop's edit: {progress:#}"
        );
    }
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
    // names it nowhere the client sees gets through the fence.
    let project = TempProject::new("forged-e2e");
    project.init();
    project.write_prompt("Improve the project.\n");
    let state_file = project.state_path().display().to_string();
    let sed = format!("sed -i 's/\"status\": \"running\"/\"status\": \"complete\"/' {state_file}");
    let script = project.tmp.join("forge.sh");
    std::fs::write(&script, format!("{sed}\n")).unwrap();
    let script = script.display().to_string();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(sed.clone()),
        1 => Reply::bash(format!("sh {script}")),
        _ => Reply::text("All done."),
    });
    // Outside the sandbox: in it, the operating system refuses the write
    // (tests/tests/e2e_sandbox.rs).
    let run = project.run_launcher(client, &api, &[("RALPH_SANDBOX", "off")], LOOP_TIMEOUT);
    let refused = api
        .main_requests()
        .get(1)
        .and_then(|r| user_texts(&r.body).pop())
        .unwrap_or_default();
    assert!(
        refused.contains("denied"),
        "the direct sed was refused: {refused}"
    );
    let state = project.status_json();
    assert_eq!(
        state["status"], "complete",
        "the edit took: {state:#}; {run:?}"
    );
    assert_eq!(run.code, Some(17), "{run:?}");
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("no accepted completion claim is on record")
            && !last.contains("loop complete"),
        "{run:?}"
    );
    assert_eq!(
        api.main_requests().len(),
        3,
        "one iteration, never re-injected"
    );
}

#[ralph_tests::on_both_clients]
fn a_forged_accepted_claim_is_not_reported_as_done_without_ralphs_record(client: ClientVersion) {
    // Outside the sandbox, in bypassPermissions, a script of the agent's
    // writes a whole completion into the state: `complete` and an accepted
    // claim of the current iteration. Only the engine logs the stop that
    // accepts a claim, so the launcher does not report it as done.
    let project = TempProject::new("forged-claim");
    project.init();
    project.write_prompt("Improve the project.\n");
    let script = project.tmp.join("forge.py");
    std::fs::write(
        &script,
        format!(
            "import json\np = {:?}\ns = json.load(open(p))\ns['status'] = 'complete'\n\
             s['lastClaim'] = {{'iteration': s['iteration'], 'at': '2026-11-24T10:00:00Z', \
             'mode': 'strict', 'basis': 'forged', 'accepted': True, 'gates': [], 'verification': []}}\n\
             json.dump(s, open(p, 'w'))\n",
            project.state_path().display().to_string()
        ),
    )
    .unwrap();
    let command = format!("python3 {}", script.display());
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text("All done."),
    });
    let run = project.run_launcher(client, &api, &[("RALPH_SANDBOX", "off")], LOOP_TIMEOUT);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "the forge took: {state:#}");
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    assert_eq!(run.code, Some(17), "{run:?}");
    let last = last_stderr_line(&run);
    assert!(
        last.contains("no accepted completion claim is on record")
            && !last.contains("loop complete"),
        "{run:?}"
    );
    let status = project.ctl(&["status"], &[]);
    status.assert_stdout_has(&["not recorded by ralph"]);
}

/// The launcher's last stderr line.
fn last_stderr_line(run: &ralph_tests::project::Run) -> &str {
    run.stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
}

#[ralph_tests::on_both_clients]
fn a_prompt_deleted_mid_loop_is_named_by_the_launcher(client: ClientVersion) {
    // The hook cannot re-inject a prompt that is gone: it lets the session
    // stop, and the person must read why, not only "exited with code 0".
    let project = TempProject::new("prompt-gone");
    project.init();
    project.write_prompt("Improve the project.\n");
    let prompt = project
        .path(".claude/ralph/PROMPT.md")
        .display()
        .to_string();
    // A script, which the client does not look into: `rm` naming the file
    // is refused by the deny rule on .claude/ralph.
    let script = project.tmp.join("remove.sh");
    std::fs::write(&script, format!("rm {prompt}\n")).unwrap();
    let script = script.display().to_string();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(format!("sh {script}")),
        _ => Reply::text("Removed a file; more to do."),
    });
    // Without the sandbox (in it, .claude/ralph is read-only to the agent):
    // the prompt goes as a person's mistake or an unsandboxed agent removes it.
    let run = project.run_launcher(client, &api, &[("RALPH_SANDBOX", "off")], LOOP_TIMEOUT);
    assert_eq!(run.code, Some(12), "{run:?}");
    let last = last_stderr_line(&run);
    assert!(
        last.starts_with("ralph: loop interrupted")
            && last.contains("at its last stop the hook could not go on")
            && last.contains("PROMPT.md")
            && last.contains("does not exist"),
        "{run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    // The audit log keeps the hook's own line, before the end.
    let log =
        std::fs::read_to_string(project.path(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    let problem = log
        .lines()
        .find(|l| l.contains("\"event\":\"problem\""))
        .unwrap_or_else(|| panic!("no problem line: {log}"));
    assert!(problem.contains("PROMPT.md"), "{problem}");
}

#[ralph_tests::on_both_clients]
fn a_hook_that_never_runs_is_named_by_the_launcher(client: ClientVersion) {
    // A registration that points nowhere: the client runs it, it fails, and
    // the session stops after one turn without a stop on record.
    let project = TempProject::new("hook-missing");
    project.init();
    project.write_prompt("Improve the project.\n");
    let settings_path = project.path(".claude/settings.json");
    let mut settings: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&settings_path).unwrap()).unwrap();
    settings["hooks"]["Stop"][0]["hooks"][0]["command"] = serde_json::json!(project
        .path("moved-away/ralph-stop-hook")
        .display()
        .to_string());
    std::fs::write(
        &settings_path,
        serde_json::to_vec_pretty(&settings).unwrap(),
    )
    .unwrap();
    let api = MockApi::start(|_, _| Reply::text("Worked on it."));
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    assert_eq!(run.code, Some(12), "{run:?}");
    assert!(
        last_stderr_line(&run).contains("no stop was ever recorded: the Stop hook did not run"),
        "{run:?}"
    );
    assert_eq!(api.main_requests().len(), 1, "one turn, never re-injected");
}

#[ralph_tests::on_both_clients]
fn a_headless_loop_can_edit_the_project_without_a_permission_mode_given(client: ClientVersion) {
    // Without a mode, `-p` denies every file edit (nobody answers the
    // prompt); the launcher gives acceptEdits unless the person names one.
    let project = TempProject::new("headless-edits");
    project.init();
    project.write_prompt("Improve the project.\n");
    let root = project.root.clone();
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::write(root.join("new.txt").display().to_string(), "x\n"),
        1 => Reply::bash("echo hi > bashed.txt"),
        _ => Reply::text(format!("Wrote both files.\n{SIGNAL}")),
    });
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.arg("--headless").envs(project.client_env(client, &api));
    let run = ralph_tests::project::run_with_timeout(cmd, None, LOOP_TIMEOUT);
    run.assert_code(0);
    assert!(
        project.path("new.txt").is_file(),
        "the Write went through: {run:?}"
    );
    assert!(
        project.path("bashed.txt").is_file(),
        "the Bash call went through: {run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert!(state["history"][0]["error"].is_null(), "{state:#}");
}

#[ralph_tests::on_both_clients]
fn refused_tool_calls_stop_a_loop_that_cannot_work(client: ClientVersion) {
    // The person chose the default mode: every Write is refused, nobody can
    // grant it, and nothing changes. Two such iterations end the loop with
    // the refusal named, not the whole budget.
    let project = TempProject::new("denied");
    project.init();
    project.write_prompt("Improve the project.\n");
    let root = project.root.clone();
    let api = MockApi::start(move |turn, _| match turn % 2 {
        0 => Reply::write(root.join("new.txt").display().to_string(), "x\n"),
        _ => Reply::text("Tried to write the file."),
    });
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args(["--headless", "--", "--permission-mode", "default"])
        .envs(project.client_env(client, &api));
    let run = ralph_tests::project::run_with_timeout(cmd, None, LOOP_TIMEOUT);
    assert_eq!(run.code, Some(11), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let because = state["endedBecause"].as_str().unwrap();
    let write = format!("`Write({})`", project.path("new.txt").display());
    assert!(
        because.contains(&format!(
            "the client refused {write} for lack of permission in 2 iterations"
        )) && because.contains("`-- --permission-mode acceptEdits`"),
        "{because}"
    );
    assert!(!project.path("new.txt").exists());
}

#[ralph_tests::on_both_clients]
fn failing_tests_never_complete_a_loop_after_init_with_its_defaults(client: ClientVersion) {
    // A small Python project whose test fails; `init --yes` makes its test
    // command the completion check. The agent cannot fix the bug and claims
    // done every time: the loop must never end `complete`.
    let project = TempProject::python_with_a_failing_test("failing-tests");
    let init = project.ctl(&["init", "--yes"], &[]);
    init.assert_code(0);
    init.assert_stdout_has(&["Completion check: `python3 -m unittest`"]);
    project.write_prompt("Fix add() in calc.py so that the tests pass.\n");
    let api = MockApi::start(|_, _| Reply::text(format!("Fixed add(); all tests pass.\n{SIGNAL}")));
    let run = project.run_launcher(client, &api, &[("RALPH_MAX_ITERATIONS", "6")], LOOP_TIMEOUT);
    let state = project.status_json();
    assert_ne!(state["status"], "complete", "{state:#}; {run:?}");
    assert_ne!(run.code, Some(0), "{run:?}");
    let claim = &state["lastClaim"];
    assert_eq!(claim["accepted"], false, "{state:#}");
    let tail = claim["verification"][0]["outputTail"]
        .as_str()
        .unwrap_or_default();
    assert!(tail.contains("FAILED"), "the test's own failure: {tail}");
    let last = last_stderr_line(&run);
    assert!(!last.contains("loop complete"), "{last}");
}

#[ralph_tests::on_both_clients]
fn the_untouched_template_is_refused_before_the_client_starts(client: ClientVersion) {
    let project = TempProject::new("template");
    project.init_untouched();
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    assert_eq!(run.code, Some(3), "{run:?}");
    let last = last_stderr_line(&run);
    assert!(
        last.contains("PROMPT.md is still the template") && last.contains("--force"),
        "{last}"
    );
    assert!(api.main_requests().is_empty(), "the client never ran");
    assert!(project.state().is_none(), "no loop was started");

    // --force runs it as it is.
    let mut cmd = project.launcher_command(client, &api, &[]);
    let args: Vec<_> = cmd.get_args().map(|a| a.to_os_string()).collect();
    cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.arg("--force")
        .args(args)
        .envs(project.client_env(client, &api));
    let forced = ralph_tests::project::run_with_timeout(cmd, None, LOOP_TIMEOUT);
    forced.assert_code(0);
    assert_eq!(project.status_json()["status"], "complete");
}

#[ralph_tests::on_both_clients]
fn the_agent_cannot_write_the_loop_state_with_its_file_tools(client: ClientVersion) {
    // The deny rules `init` wrote refuse the Write ("File is in a directory
    // that is denied by your permission settings."), in acceptEdits (what
    // the headless launcher gives) and in bypassPermissions alike; without
    // them bypassPermissions lets it through. The state keeps what ralph
    // wrote, and the loop ends on its real claim.
    for mode in ["acceptEdits", "bypassPermissions"] {
        let project = TempProject::new("deny-state");
        project.init();
        let state_file = project.state_path().display().to_string();
        // Read first: the client refuses to overwrite a file it has not read.
        let api = MockApi::start(move |turn, _| match turn {
            0 => Reply::ToolUse {
                name: "Read".into(),
                input: serde_json::json!({ "file_path": state_file.clone() }),
            },
            1 => Reply::write(state_file.clone(), "{\"status\": \"complete\"}\n"),
            _ => Reply::text(format!("Done.\n{SIGNAL}")),
        });
        let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
        cmd.args(["--headless", "--", "--permission-mode", mode])
            .envs(project.client_env(client, &api));
        let run = ralph_tests::project::run_with_timeout(cmd, None, LOOP_TIMEOUT);
        let refusal = api
            .main_requests()
            .get(2)
            .and_then(|r| user_texts(&r.body).pop())
            .unwrap_or_default();
        run.assert_code(0);
        let state = project.status_json();
        assert_eq!(state["status"], "complete", "{mode}: {state:#}");
        assert_eq!(
            state["lastClaim"]["accepted"], true,
            "{mode}: a real claim: {state:#}"
        );
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
    let project = TempProject::new("blocked");
    project.init();
    let api = MockApi::start(|_, _| {
        Reply::text(
            "I need the staging credentials.\n---RALPH_STATUS---\nSTATUS: BLOCKED\n\
             RECOMMENDATION: put the staging API key in .env\n---END_RALPH_STATUS---",
        )
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    assert_eq!(run.code, Some(18), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "blocked", "{state:#}");
    assert_eq!(state["iteration"], 1, "{state:#}");
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("put the staging API key in .env"),
        "{state:#}"
    );
    assert_eq!(api.main_requests().len(), 1, "never fed back");
    let last = last_stderr_line(&run);
    assert!(
        last.contains("loop blocked at iteration 1 of 25")
            && last.contains("ralph-ctl run --resume"),
        "{last}"
    );
    let status = project.ctl(&["status"], &[]);
    status.assert_stdout_has(&["put the staging API key in .env"]);
}
