//! Integration tests of the built `ralph-stop-hook`, run the way Claude Code
//! runs it: JSON on stdin, the answer on stdout, the exit code, the state.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::SIGNAL;
use ralph_tests::bins;
use ralph_tests::cli::SID;
use ralph_tests::cli::{Ctl, Hook};
use ralph_tests::project::{Run, TempProject};
use serde_json::{Value, json};

fn fixture(name: &str) -> std::path::PathBuf {
    bins::workspace_root().join("tests/fixtures").join(name)
}

/// A project with ralph installed and a loop started for `SID`.
fn looping(max: u32) -> TempProject {
    TempProject::with_loop("hook", SID, max)
}

/// The hook run on the first stop's real input (see [`input`]) with `message`.
fn stop(project: &TempProject, message: Option<&str>) -> Run {
    Hook::new(project)
        .json(&input(project, "stop-input-first.json", message))
        .run()
}

/// A real Stop input (the 2.1.330 sample) pointed at `project`.
fn input(project: &TempProject, fixture_name: &str, message: Option<&str>) -> Value {
    let mut value: Value =
        serde_json::from_slice(&std::fs::read(fixture(fixture_name)).unwrap()).unwrap();
    value["cwd"] = json!(project.root);
    match message {
        Some(text) => {
            value["last_assistant_message"] = json!(text);
            value["transcript_path"] = json!(project.transcript_ending_with(text));
        }
        None => {
            value
                .as_object_mut()
                .unwrap()
                .remove("last_assistant_message");
        }
    }
    value
}

#[test]
fn guard_returns_at_once_without_reading_stdin() {
    let project = looping(5);
    let before = project.state_bytes();
    for active in [None, Some("0"), Some("true"), Some(" 1"), Some("")] {
        let mut child = Hook::new(&project).active(active).spawn_piped();
        // Keep stdin open and never write: the hook must not wait for it.
        let _stdin = child.stdin.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "RALPH_ACTIVE={active:?}: the hook waited on stdin"
            );
            thread::sleep(Duration::from_millis(5));
        };
        let out = child.wait_with_output().unwrap();
        assert_eq!(status.code(), Some(0));
        assert!(
            out.stdout.is_empty() && out.stderr.is_empty(),
            "RALPH_ACTIVE={active:?} printed something"
        );
    }
    assert_eq!(project.state_bytes(), before, "state untouched");
}

#[test]
fn help_and_version_answer_without_reading_stdin_and_nothing_else_does() {
    let project = looping(5);
    let before = project.state_bytes();
    // With or without RALPH_ACTIVE: a person checking the install.
    for active in [None, Some("1")] {
        for (args, needle) in [
            (&["--version"][..], "ralph-stop-hook 0.1.0"),
            (&["-V"], "ralph-stop-hook 0.1.0"),
            (
                &["--help"],
                "Usage: ralph-stop-hook [--help | --version | --plugin]",
            ),
            (&["-h"], "the Stop hook of the Ralph loop"),
        ] {
            let out = Hook::new(&project).active(active).args(args).run();
            out.assert_code(0).assert_stdout_has(&[needle]);
            assert!(out.stderr.is_empty(), "{args:?}");
        }
    }
    // Anything else outside a loop: the guard, silent.
    for args in [&["--bogus"][..], &["--help", "extra"]] {
        let out = Hook::new(&project).active(None).args(args).run();
        out.assert_code(0);
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{args:?}");
    }
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn real_inputs_block_and_count_iterations() {
    let project = looping(25);
    let first = Hook::new(&project)
        .json(&input(
            &project,
            "stop-input-first.json",
            Some("Working on it."),
        ))
        .run();
    let reason = first.block_reason();
    assert!(
        reason.starts_with("[Ralph loop: iteration 2 of 25]"),
        "{reason}"
    );
    assert!(reason.contains("Do the task."));
    assert!(
        reason.contains("Do not delete or weaken tests"),
        "guardrails follow the prompt"
    );
    assert_eq!(first.json()["systemMessage"], "Ralph iteration 2/25");

    let second = Hook::new(&project)
        .json(&input(
            &project,
            "stop-input-after-block.json",
            Some("Still working."),
        ))
        .run();
    assert!(
        second
            .block_reason()
            .starts_with("[Ralph loop: iteration 3 of 25]")
    );
    let state = project.status_json();
    assert_eq!(state["iteration"], 3);
    assert_eq!(state["status"], "running");
    let history = state["history"].as_array().unwrap();
    assert_eq!(history[0]["stopHookActive"], false);
    assert_eq!(history[1]["stopHookActive"], true, "recorded, not obeyed");
    assert_eq!(history[1]["excerpt"], "Still working.");
    assert_eq!(history[1]["messageSource"], "input");
    assert!(state["lastRunAt"].is_string());
}

#[test]
fn each_client_gets_the_answer_it_shows_as_the_loop_going_on() {
    // 2.1.330 (which sends last_assistant_message and names itself in
    // AI_AGENT) goes on with the context form, shown as "Stop hook says: …"
    // rather than as a problem; 2.0 (neither) only knows the block.
    const AGENT: &str = "claude-code_2-1-330_harness";
    let project = looping(25);
    let newer = Hook::new(&project)
        .env("AI_AGENT", AGENT)
        .json(&input(
            &project,
            "stop-input-first.json",
            Some("Working on it."),
        ))
        .run();
    let answer = newer.json();
    assert_eq!(answer.get("decision"), None, "{answer}");
    assert_eq!(
        answer["hookSpecificOutput"]["hookEventName"], "Stop",
        "{answer}"
    );
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(
        context.starts_with("[Ralph loop: iteration 2 of 25]"),
        "{context}"
    );
    assert!(
        context.contains("Do the task."),
        "the whole task: {context}"
    );
    assert_eq!(answer["systemMessage"], "Ralph iteration 2/25");
    // 2.0's input: no last_assistant_message; the message is read from the transcript.
    let mut old_input = input(&project, "stop-input-after-block.json", None);
    old_input["transcript_path"] = json!(project.transcript_ending_with("Still working."));
    let older = Hook::new(&project).json(&old_input).run();
    let answer = older.json();
    assert_eq!(answer["decision"], "block", "{answer}");
    assert!(
        answer["reason"]
            .as_str()
            .unwrap()
            .starts_with("[Ralph loop: iteration 3 of 25]")
    );
    assert_eq!(answer.get("hookSpecificOutput"), None, "{answer}");
    // 2.1.330 cuts an additionalContext over 10,000 characters to a 2 KB
    // preview: a longer task goes whole, as a block.
    project.write_prompt(&"Fix every finding in the list.\n".repeat(400));
    let long = Hook::new(&project)
        .env("AI_AGENT", AGENT)
        .json(&input(
            &project,
            "stop-input-after-block.json",
            Some("Still working."),
        ))
        .run();
    let answer = long.json();
    assert_eq!(answer["decision"], "block", "{}", &long.stdout[..200]);
    assert!(answer["reason"].as_str().unwrap().len() > 12_000);
    // An older 2.1 build: the block, which every client takes.
    project.write_prompt("Do the task.\n");
    let older_2_1 = Hook::new(&project)
        .env("AI_AGENT", "claude-code_2-1-251_harness")
        .json(&input(
            &project,
            "stop-input-after-block.json",
            Some("Still working."),
        ))
        .run();
    assert_eq!(
        older_2_1.json()["decision"],
        "block",
        "{}",
        older_2_1.stdout
    );
}

#[test]
fn completion_signal_ends_the_loop() {
    for message in [
        format!("All done.\n{SIGNAL}"),
        format!("<promise>{SIGNAL}</promise>"),
    ] {
        let project = looping(25);
        Hook::new(&project)
            .json(&input(
                &project,
                "stop-input-after-block.json",
                Some(&message),
            ))
            .run()
            .assert_allowed();
        let state = project.status_json();
        assert_eq!(state["status"], "complete");
        assert_eq!(state["iteration"], 1);
        // A finished loop keeps its final state and lets every stop through.
        let before = project.state_bytes();
        Hook::new(&project)
            .json(&input(
                &project,
                "stop-input-after-block.json",
                Some("more"),
            ))
            .run()
            .assert_allowed();
        assert_eq!(project.state_bytes(), before);
    }
}

#[test]
fn transcript_fallback_reads_the_last_assistant_message() {
    for (transcript, tail) in [
        ("transcript-text-only.jsonl", "All done. RALPH_DONE"),
        ("transcript-tool-use.jsonl", "Done. RALPH_DONE"),
    ] {
        let project = looping(25);
        let mut value = input(&project, "stop-input-first.json", None);
        value["transcript_path"] = json!(fixture(transcript));
        Hook::new(&project)
            .json(&value)
            .env("RALPH_COMPLETION_SIGNAL", "RALPH_DONE")
            .run()
            .assert_allowed();
        let state = project.status_json();
        assert_eq!(state["status"], "complete", "{transcript}: {state:#}");
        assert_eq!(state["history"][0]["messageSource"], "transcript");
        assert_eq!(state["history"][0]["excerpt"], tail);
    }
}

#[test]
fn the_reinjected_prompt_in_the_transcript_never_counts() {
    // The transcript's last lines are a user re-injection quoting the signal
    // after an assistant message that does not carry it: the new iteration
    // has no message yet, and neither the quote nor the older message counts.
    let project = looping(25);
    let transcript = project.path("t.jsonl");
    let lines = [
        json!({"type":"user","message":{"role":"user","content":"Do the task"}}),
        json!({"type":"assistant","message":{"id":"m1","role":"assistant","content":[{"type":"text","text":"Working."}]}}),
        json!({"type":"user","message":{"role":"user","content":format!("Stop hook feedback:\nWrite {SIGNAL} when done")}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&transcript, text).unwrap();
    let mut value = input(&project, "stop-input-first.json", None);
    value["transcript_path"] = json!(transcript);
    Hook::new(&project).json(&value).run().block_reason();
    let record = &project.status_json()["history"][0];
    assert_eq!(record["excerpt"], "");
    assert_eq!(record["messageSource"], "transcript_behind");
}

#[test]
fn a_cancel_while_an_iteration_runs_ends_the_loop_at_its_next_stop() {
    // What /cancel-ralph (or `ralph-ctl cancel` from another terminal) does
    // while the agent works: the iteration under way finishes, its stop is
    // let through, and no further iteration starts.
    let project = looping(25);
    stop(&project, Some("step 1")).block_reason();
    assert_eq!(project.status_json()["iteration"], 2);
    Ctl::new(&project)
        .args(["cancel", "--to-agent"])
        .run()
        .assert_code(0);
    for said in ["step 2", "still on step 2"] {
        Hook::new(&project)
            .json(&input(&project, "stop-input-after-block.json", Some(said)))
            .run()
            .assert_allowed();
    }
    let state = project.status_json();
    assert_eq!(state["status"], "cancelled", "{state:#}");
    assert_eq!(state["iteration"], 2, "no further iteration: {state:#}");
}

#[test]
fn cap_allows_the_last_stop() {
    let project = looping(2);
    stop(&project, Some("a")).block_reason();
    Hook::new(&project)
        .json(&input(&project, "stop-input-after-block.json", Some("b")))
        .run()
        .assert_allowed();
    let state = project.status_json();
    assert_eq!(state["status"], "max_iterations");
    assert_eq!(state["iteration"], 2);
}

#[test]
fn findings_stuck_warns_then_opens_the_circuit() {
    // The agent does nothing but report: no-progress is left out.
    let project = ralph_tests::cli::looping_idle("hook", 25);
    let stuck = input(
        &project,
        "stop-input-after-block.json",
        Some("RALPH_ITERATION_COMPLETE: 4 findings remain"),
    );
    // Stop 1 reports 4; stops 2-4 report it unchanged (3 = threshold): half open at stop 4.
    for stop in 1..=5 {
        let reason = Hook::new(&project).json(&stuck).run().block_reason();
        let warned = reason
            .starts_with("[Ralph circuit breaker: half-open] Detected: findings count stuck at 4");
        assert_eq!(warned, stop >= 4, "stop {stop}: {reason}");
        assert_eq!(project.status_json()["lastFindingsCount"], 4);
    }
    assert_eq!(project.status_json()["breaker"]["state"], "half_open");
    Hook::new(&project).json(&stuck).run().assert_allowed();
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    assert_eq!(state["iteration"], 6);
    assert_eq!(state["breaker"]["state"], "open");
    assert!(
        state["breaker"]["lastTransition"]["reason"]
            .as_str()
            .unwrap()
            .contains("findings count stuck at 4")
    );
    Ctl::new(&project).arg("status").run().assert_stdout_has(&[
        "breaker:",
        "open",
        "findings stuck 5/3",
        "half_open → open",
    ]);
}

#[test]
fn other_sessions_and_projects_without_a_loop_are_let_through_untouched() {
    let project = looping(5);
    let before = project.state_bytes();
    let mut value = input(&project, "stop-input-first.json", Some("hi"));
    value["session_id"] = json!("99999999-0000-0000-0000-000000000000");
    Hook::new(&project).json(&value).run().assert_silent();
    assert_eq!(project.state_bytes(), before);

    let bare = TempProject::new("bare");
    Hook::new(&bare)
        .json(&input(&bare, "stop-input-first.json", Some("hi")))
        .run()
        .assert_allowed()
        .assert_stderr_has(&["no loop was started"]);
    assert!(!bare.path(".claude").exists(), "nothing was created");
}

#[test]
fn claude_project_dir_wins_over_cwd() {
    let project = looping(5);
    let mut value = input(&project, "stop-input-first.json", Some("x"));
    value["cwd"] = json!("/nonexistent/elsewhere");
    let root = project.root.display().to_string();
    Hook::new(&project)
        .json(&value)
        .env("CLAUDE_PROJECT_DIR", &root)
        .run()
        .block_reason();
}

#[test]
fn bad_stdin_lets_the_stop_through_with_one_line() {
    let project = looping(5);
    let before = project.state_bytes();
    let cases: &[(&[u8], &str)] = &[
        (b"", "empty"),
        (b"{\"session_id\": ", "not valid JSON"),
        (b"[1, 2, 3]", "JSON array"),
        (b"\xff\xfe\xfd", "UTF-8"),
        (br#"{"session_id": 42}"#, "session_id"),
        (
            br#"{"session_id": "../../../etc/passwd", "cwd": "/tmp"}"#,
            "session_id",
        ),
        (br#"{"stop_hook_active": "yes"}"#, "stop_hook_active"),
    ];
    for (stdin, needle) in cases {
        Hook::new(&project)
            .stdin(*stdin)
            .run()
            .assert_hook_error(&[needle, "letting this stop through"]);
    }
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn bad_configuration_names_the_variable_or_key() {
    let project = looping(5);
    let before = project.state_bytes();
    let stdin = input(&project, "stop-input-first.json", Some("working"));
    for (name, value) in [
        ("RALPH_MAX_ITERATIONS", "abc"),
        ("RALPH_MAX_ITERATIONS", "0"),
        ("RALPH_MAX_ITERATIONS", "-4"),
        ("RALPH_CIRCUIT_BREAKER_THRESHOLD", "many"),
        ("RALPH_COMPLETION_SIGNAL", "   "),
    ] {
        Hook::new(&project)
            .json(&stdin)
            .env(name, value)
            .run()
            .assert_hook_error(&[name]);
    }
    assert_eq!(project.state_bytes(), before);
    // config.json is read by a stop only for a loop that has no pin (a
    // state written before pinning; a pinned loop's mid-loop change is a
    // drift, not an error: see
    // the_hook_judges_by_the_pinned_config_not_by_config_json_as_it_is_now).
    project.unpin();
    let before = project.state_bytes();
    let config = project.path(".claude/ralph/config.json");
    for (json, needle) in [
        ("{\"maxIterations\": 5", "config.json"),
        ("{\"maxIterations\": 0}", "maxIterations"),
        ("{\"maxIteration\": 5}", "maxIteration"),
    ] {
        std::fs::write(&config, json).unwrap();
        Hook::new(&project)
            .json(&stdin)
            .run()
            .assert_hook_error(&[needle]);
    }
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn corrupt_state_is_reported_and_kept() {
    let project = looping(5);
    for content in ["", "{\"status\": \"running\", \"iter", "[]"] {
        std::fs::write(project.state_path(), content).unwrap();
        stop(&project, Some("x")).assert_hook_error(&["corrupt", "ralph-ctl reset"]);
        assert_eq!(
            std::fs::read_to_string(project.state_path()).unwrap(),
            content,
            "never replaced"
        );
    }
}

#[test]
fn missing_prompt_lets_the_stop_through_without_advancing() {
    let project = looping(5);
    let before = project.state_bytes();
    std::fs::remove_file(project.path(".claude/ralph/PROMPT.md")).unwrap();
    stop(&project, Some("x")).assert_hook_error(&["PROMPT.md", "does not exist"]);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn missing_transcript_lets_the_stop_through() {
    let project = looping(5);
    let mut value = input(&project, "stop-input-first.json", None);
    value["transcript_path"] = json!(project.path("nope.jsonl"));
    Hook::new(&project)
        .json(&value)
        .run()
        .assert_hook_error(&["transcript", "nope.jsonl"]);
}

/// Runs `per_thread` hook processes on each of `threads` threads at once.
fn hammer(project: &Arc<TempProject>, threads: usize, per_thread: usize, stdin: Value) {
    let stdin = Arc::new(stdin);
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let project = Arc::clone(project);
            let stdin = Arc::clone(&stdin);
            thread::spawn(move || {
                for _ in 0..per_thread {
                    let run = Hook::new(&project).json(&stdin).run();
                    assert_eq!(run.code, Some(0), "{run:?}");
                    assert!(!run.stderr.contains("ralph-stop-hook"), "{run:?}");
                    let state = std::fs::read_to_string(project.state_path()).unwrap();
                    serde_json::from_str::<Value>(&state)
                        .expect("the state is valid JSON after every write");
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
}

#[test]
fn parallel_stops_of_one_session_lose_no_update() {
    let project = Arc::new(ralph_tests::cli::looping_idle("hook", 10_000));
    let stdin = input(&project, "stop-input-after-block.json", Some("working"));
    hammer(&project, 8, 25, stdin);
    let state = project.status_json();
    assert_eq!(state["iteration"], 201, "200 stops, each counted once");
    assert_eq!(state["status"], "running");
}

#[test]
fn a_second_session_hammering_in_parallel_changes_nothing() {
    let project = Arc::new(ralph_tests::cli::looping_idle("hook", 10_000));
    let mine = input(&project, "stop-input-after-block.json", Some("working"));
    let mut other = mine.clone();
    other["session_id"] = json!("99999999-0000-0000-0000-000000000000");
    let a = {
        let project = Arc::clone(&project);
        thread::spawn(move || hammer(&project, 4, 25, mine))
    };
    hammer(&project, 4, 25, other);
    a.join().unwrap();
    assert_eq!(project.status_json()["iteration"], 101);
}

#[test]
fn a_discarded_stdout_neither_crashes_nor_hangs_the_hook() {
    // Claude Code may stop reading; the hook must still finish and record the stop.
    let project = looping(5);
    let mut child = Command::new(bins::hook())
        .env("RALPH_ACTIVE", "1")
        .current_dir(&project.root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            &serde_json::to_vec(&input(&project, "stop-input-first.json", Some("x"))).unwrap(),
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(Path::new(&project.state_path()).exists());
}

/// As 2.1.330 sends it when the retries of a 429 ran out (observed against
/// the mock: no `error_details`, no `stop_hook_active`).
fn stop_failure(project: &TempProject, transcript: &Path, error: &str, message: &str) -> Value {
    json!({
        "session_id": SID,
        "transcript_path": transcript,
        "cwd": project.root,
        "prompt_id": "6f7f9b1e-1c55-4a3e-9f57-1a2b3c4d5e6f",
        "effort": {"level": "medium"},
        "hook_event_name": "StopFailure",
        "error": error,
        "last_assistant_message": message,
    })
}

/// A transcript whose turn failed on a 429 with `resetsAt` (as the client
/// writes it), then the client's own error message.
fn rate_limited_transcript(resets_at: &str) -> String {
    [
        r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":"Do the task"},"uuid":"u0","sessionId":"c0563e5b-5d19-4827-8166-f6f26bb447e0"}"#.to_string(),
        format!(r#"{{"type":"system","subtype":"api_error","level":"error","error":{{"status":429,"formatted":"429 rate_limit_error","rateLimits":{{"rateLimitType":"five_hour","resetsAt":{resets_at}}}}},"retryInMs":2245,"retryAttempt":1,"maxRetries":1}}"#),
        r#"{"type":"assistant","isSidechain":false,"isApiErrorMessage":true,"error":"rate_limit","apiErrorStatus":429,"message":{"id":"x","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"API Error: Request rejected (429)"}]}}"#.to_string(),
    ]
    .join("\n")
        + "\n"
}

#[test]
fn an_absurd_reset_time_is_not_believed_and_panics_nothing() {
    // The transcript is the agent's to write: 1e300 overflowed the clock,
    // the year 3000 stalled the loop for ever.
    for absurd in ["1e300", "32503680000"] {
        let project = looping(10);
        let transcript = project.path("transcript.jsonl");
        std::fs::write(&transcript, rate_limited_transcript(absurd)).unwrap();
        let run = Hook::new(&project)
            .json(&stop_failure(
                &project,
                &transcript,
                "rate_limit",
                "API Error: 429",
            ))
            .run();
        run.assert_no_panic().assert_allowed().assert_silent();
        let state = project.status_json();
        assert_eq!(state["status"], "paused", "{absurd}: {state:#}");
        assert!(
            state["pausedBecause"]["resumeAt"].is_null(),
            "{absurd}: {state:#}"
        );
    }
}

#[test]
fn stop_failure_pauses_the_loop_with_the_reset_time_and_answers_nothing() {
    let project = looping(10);
    // The client's lines for a retried 429 with the usage-limit headers
    // (a reset in an hour, as a real window's), then its own error message.
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    let transcript = project.path("transcript.jsonl");
    std::fs::write(&transcript, rate_limited_transcript(&reset.to_string())).unwrap();
    let run = Hook::new(&project)
        .json(&stop_failure(
            &project,
            &transcript,
            "rate_limit",
            "API Error: Request rejected (429) · This request would exceed your account's rate limit.",
        ))
        .run();
    run.assert_allowed().assert_silent();
    let state = project.status_json();
    assert_eq!(state["status"], "paused", "{state:#}");
    assert_eq!(
        state["iteration"], 1,
        "the failed iteration is worked on again"
    );
    let paused = &state["pausedBecause"];
    assert_eq!(paused["kind"], "rate_limit");
    assert_eq!(paused["httpStatus"], 429);
    let expected = Command::new("date")
        .args(["-u", "-d", &format!("@{reset}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    assert_eq!(
        paused["resumeAt"],
        String::from_utf8_lossy(&expected.stdout).trim()
    );
    let log = std::fs::read_to_string(project.log_path()).unwrap();
    let last: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
    assert_eq!(last["event"], "pause");

    // Another session's failure, and a failure of a loop that is not
    // running, change nothing.
    let before = project.state_bytes();
    let mut other = stop_failure(&project, &transcript, "server_error", "API Error: 529");
    other["session_id"] = json!("someone-else");
    Hook::new(&project).json(&other).run().assert_allowed();
    Hook::new(&project)
        .json(&stop_failure(
            &project,
            &transcript,
            "server_error",
            "API Error: 529",
        ))
        .run()
        .assert_allowed();
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn a_stop_after_an_api_error_pauses_instead_of_judging_the_error_text() {
    // 2.0.77 runs the Stop hook after an API error, with no
    // last_assistant_message: the transcript ends on its own error line,
    // which here even holds the completion signal.
    let project = looping(10);
    let transcript = project.path("transcript.jsonl");
    let error_line = json!({
        "type": "assistant", "isSidechain": false, "isApiErrorMessage": true, "error": "unknown",
        "message": {"id": "e1", "model": "<synthetic>", "role": "assistant",
                    "content": [{"type": "text", "text": format!("API Error: 529 {{\"type\":\"error\"}}\n{SIGNAL}")}]}
    });
    std::fs::write(
        &transcript,
        format!(
            "{}\n{error_line}\n",
            r#"{"type":"user","isSidechain":false,"message":{"role":"user","content":"Do the task"}}"#
        ),
    )
    .unwrap();
    let mut stop = input(&project, "stop-input-first.json", None);
    stop["transcript_path"] = json!(transcript);
    let run = Hook::new(&project).json(&stop).run();
    run.assert_allowed();
    let state = project.status_json();
    assert_eq!(state["status"], "paused", "{state:#}");
    assert_eq!(state["pausedBecause"]["kind"], "overloaded");
    assert_eq!(state["pausedBecause"]["httpStatus"], 529);
    assert!(
        state["lastClaim"].is_null(),
        "the error text was not judged"
    );
}

#[test]
fn the_plugin_guard_is_one_stat_and_holds_only_the_loop_s_own_session() {
    // No loop in the project, or a launcher's session: out at once, stdin unread.
    let plain = TempProject::new("plugin-guard");
    let project = looping(5);
    let before = project.state_bytes();
    for (project, active, dir) in [
        (&plain, None, Some(plain.root.clone())),
        (&project, None, None),
        (&project, Some("1"), Some(project.root.clone())),
    ] {
        let mut hook = Hook::new(project).active(active).arg("--plugin");
        hook = match &dir {
            Some(dir) => hook.env("CLAUDE_PROJECT_DIR", dir),
            None => hook.env_remove("CLAUDE_PROJECT_DIR"),
        };
        let mut child = hook.spawn_piped();
        let _stdin = child.stdin.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{active:?} {dir:?}: the hook waited on stdin"
            );
            thread::sleep(Duration::from_millis(5));
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        assert!(out.stdout.is_empty() && out.stderr.is_empty());
    }
    assert_eq!(project.state_bytes(), before);
    // A fresh iteration's client: its driver judges the stop, not this hook.
    let own = input(&project, "stop-input-first.json", Some("Still working."));
    Hook::new(&project)
        .active(None)
        .arg("--plugin")
        .env("CLAUDE_PROJECT_DIR", &project.root)
        .env("RALPH_DRIVEN", "1")
        .json(&own)
        .run()
        .assert_allowed();
    assert_eq!(project.state_bytes(), before);

    // A loop here: another session's stop goes through, the loop's own is held.
    let plugin = |value: &Value| {
        Hook::new(&project)
            .active(None)
            .arg("--plugin")
            .env("CLAUDE_PROJECT_DIR", &project.root)
            .json(value)
            .run()
    };
    let mut other = input(&project, "stop-input-first.json", Some("Done here."));
    other["session_id"] = json!("99999999-0000-0000-0000-000000000000");
    plugin(&other).assert_allowed();
    assert_eq!(project.state_bytes(), before);
    let own = input(&project, "stop-input-first.json", Some("Still working."));
    plugin(&own).block_answer();
}

#[test]
fn a_session_s_end_interrupts_only_its_own_unwatched_loop() {
    let project = looping(5);
    let before = project.state_bytes();
    let end = |session: &str| {
        Hook::new(&project)
            .active(None)
            .arg("--plugin")
            .env("CLAUDE_PROJECT_DIR", &project.root)
            .json(&json!({
                "session_id": session,
                "cwd": project.root,
                "hook_event_name": "SessionEnd",
                "reason": "exit"
            }))
            .run()
    };
    let other = end("99999999-0000-0000-0000-000000000000");
    other.assert_allowed();
    assert_eq!(project.state_bytes(), before);
    end(SID).assert_allowed();
    let state = project.status_json();
    let because = state["endedBecause"].as_str().unwrap_or_default();
    let ended = (
        state["status"].as_str(),
        because.contains("the session ended (exit)"),
    );
    assert_eq!(ended, (Some("interrupted"), true), "{state:#}");
}

#[test]
fn the_hook_judges_by_the_pinned_config_not_by_config_json_as_it_is_now() {
    let project = TempProject::initialised("hook-pin");
    let pinned = r#"{"verify": [{"name": "tests", "command": "echo '1 failed'; exit 1", "timeoutSeconds": 20}]}"#;
    project.write(".claude/ralph/config.json", pinned);
    project
        .ctl(
            &["start", "--session-id", SID, "--max-iterations", "5"],
            &[],
        )
        .assert_code(0);
    let marker = project.tmp.join("agent-ran");
    // Rewritten mid-loop (as an agent could): its own verify, another
    // signal, and a cap of 1; then broken altogether.
    let rewritten = format!(
        r#"{{"verify": [{{"name": "tests", "command": "touch {}"}}], "completionSignal": "DONE", "maxIterations": 1}}"#,
        marker.display()
    );
    for (i, now) in [rewritten.as_str(), "{not json"].into_iter().enumerate() {
        project.write(".claude/ralph/config.json", now);
        let claim = format!("All done.\n{SIGNAL}\nDONE");
        let stdin = input(&project, "stop-input-first.json", Some(&claim)).to_string();
        let run = project.hook(stdin.as_bytes(), &[]);
        let reason = run.block_reason();
        assert!(
            reason.contains("1 failed"),
            "the pinned verify ran: {reason}"
        );
        assert!(!marker.exists(), "the rewritten verify ran");
        assert!(
            run.stderr.contains(
                ".claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it"
            ),
            "{run:?}"
        );
        let state = project.state().unwrap();
        assert_eq!(state["status"], "running", "{state:#}");
        assert_eq!(state["iteration"], i + 2, "{state:#}");
        let problem = &state["configDrift"]["files"][0]["problem"];
        assert_eq!(problem.is_string(), now == "{not json", "{state:#}");
    }
}
