//! End-to-end, the way people mostly run a loop: the launcher without
//! `--headless` starts the real client's terminal UI (both pinned versions)
//! in a pseudo-terminal, against the scripted Messages API mock on
//! 127.0.0.1; once the loop has ended, the test types `/exit` as a person
//! would.
//!
//! Run one scenario alone with e.g.
//! `tests/run.sh -p ralph-tests --test e2e interactive::completes_on_signal::v2_0_77`.

use ralph_tests::client::ClientVersion;
use ralph_tests::interactive::InteractiveRun;
use ralph_tests::mock_api::{MockApi, Reply, stop_hook_feedback};
use ralph_tests::project::TempProject;
use ralph_tests::scenario::script;
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

use crate::one_terminal_ui_at_a_time;

/// The loop's status as its state file says, `""` without one.
fn status_of(project: &TempProject) -> String {
    project
        .state()
        .and_then(|s| s["status"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The person presses Enter on what they typed; once the loop completes
/// they type `/exit`. The loop's state then; panics unless it completed.
fn type_then_complete(
    mut term: ralph_tests::interactive::Terminal,
    project: &TempProject,
) -> Value {
    use ralph_tests::interactive::Key;
    use std::time::Duration;
    std::thread::sleep(Duration::from_millis(300));
    term.press(Key::Enter).unwrap();
    let done = term.wait_until(LOOP_TIMEOUT, |_| status_of(project) == "complete");
    let run = term.exit_session();
    let state = project.status_json();
    assert!(
        done,
        "status {}; stops:\n{}\nscreen:\n{}",
        state["status"],
        history(&state),
        run.screen
    );
    state
}

/// One line per recorded stop, for failure messages.
fn history(state: &Value) -> String {
    state["history"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|r| {
            format!(
                "iteration {}: {} (message from {}) excerpt={} error={}",
                r["iteration"], r["decision"], r["messageSource"], r["excerpt"], r["error"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The run, the stops the hook recorded and the requests the model got,
/// for failure messages.
fn explain(run: &InteractiveRun, state: &Value, api: &MockApi) -> String {
    format!(
        "launcher exit {:?} (client ended by {}); stderr: {}\nstops:\n{}\nmain requests: {}\nscreen at the end of the loop:\n{}",
        run.code,
        run.ended_by,
        run.stderr.trim(),
        history(state),
        api.main_requests().len(),
        run.loop_screen
    )
}

/// A project with ralph installed and `task` as PROMPT.md, and this
/// binary's one terminal UI held while it lives.
fn terminal_project(name: &str, task: &str) -> (std::sync::MutexGuard<'static, ()>, TempProject) {
    let serial = one_terminal_ui_at_a_time();
    let project = TempProject::initialised(name);
    project.write_prompt(task);
    (serial, project)
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330's terminal UI shows the context form, 2.0.77's a block"
)]
fn completes_on_signal(client: ClientVersion) {
    let (_serial, project) = terminal_project("i-complete", "Improve the project.\n");
    let api = MockApi::start(script::signal_at(3));
    let run = project.run_launcher_interactive(client, &api, &[], LOOP_TIMEOUT);
    let state = project.status_json();
    let why = explain(&run, &state, &api);
    assert_eq!(state["status"], "complete", "{why}");
    // The claiming stop may not have seen its own message: 2.0.77 (and
    // 2.1.330 under load) can write it only after the hook returned. Then
    // the claim is judged at the next stop, one iteration later.
    let last = 4 + u64::from(behind(&state, 3));
    assert_eq!(
        state["iteration"], last,
        "complete at iteration {last}; {why}"
    );
    assert_eq!(api.main_requests().len() as u64, last, "{why}");
    // The client waited for the person once the loop had ended, and showed
    // how it ended (the hook's systemMessage) before being told to exit.
    assert_eq!(run.ended_by, "/exit", "{why}");
    let flat = run.text.split_whitespace().collect::<Vec<_>>().join(" ");
    // What the person saw when the loop ended (the whole text too: a
    // redraw can cut a line of it apart), with how to leave the session.
    let seen = run
        .loop_screen
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let said = |needle: &str| flat.contains(needle) || seen.contains(needle);
    assert!(
        said(&format!("Ralph loop complete at iteration {last} of 25"))
            && said("this session stays open: type /exit to close it"),
        "the screen never said the loop ended and how to leave; {why}\nall text:\n{}",
        run.text
    );
    // Each iteration reads as the loop going on, not as a failing hook:
    // 2.1.330 shows a block as "Stop hook reported a problem" with a
    // "stop hook problem" footer; the context form it gets instead shows
    // as "Stop hook says: …".
    if client == ClientVersion::V2_1_330 {
        assert!(
            !flat.contains("Stop hook reported a problem") && !flat.contains("stop hook problem"),
            "an iteration read as a problem; all text:\n{}",
            run.text
        );
        assert!(
            flat.contains("Stop hook says: [Ralph loop: iteration 2 of 25]"),
            "{}",
            run.text
        );
    }
    run.assert_code(0);
    assert!(
        run.stderr
            .contains(&format!("ralph: loop complete at iteration {last} of 25")),
        "{why}"
    );
    let final_request = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&final_request.body);
    let reinjections = usize::try_from(last - 1).unwrap();
    assert_eq!(fed_back.len(), reinjections, "re-injections: {fed_back:?}");
    let newest = &fed_back[reinjections - 1];
    assert!(
        newest.contains(&format!("iteration {last} of 25"))
            && newest.contains("Improve the project."),
        "{newest}"
    );
    let history = state["history"].as_array().unwrap();
    for (i, record) in history.iter().enumerate() {
        // The stop that accepted the claim read late from the one before
        // may not have seen its own message either (2.0.77 under load).
        if i + 1 == history.len() && i >= 4 && behind(&state, i) {
            continue;
        }
        let want = if i < 3 {
            format!("Worked on step {}.", i + 1)
        } else {
            "All steps done.".to_string()
        };
        assert!(
            record["excerpt"].as_str().unwrap().starts_with(&want),
            "stop {} judged its own message {want:?}; {why}",
            i + 1
        );
    }
    // A stop that judged before its message was written says so in status,
    // beside its `said:` (filled in by the next stop): once per such stop.
    let status = project.ctl(&["status"], &[]);
    let behind_stops = (0..history.len()).filter(|&i| behind(&state, i)).count();
    assert_eq!(
        status
            .stdout
            .matches("note: the client had not written this message to its transcript")
            .count(),
        behind_stops,
        "{}\n{why}",
        status.stdout
    );
}

#[ralph_tests::on_both_clients]
fn errors_and_excerpts_belong_to_their_own_iteration(client: ClientVersion) {
    let _serial = one_terminal_ui_at_a_time();
    let project = TempProject::initialised("i-errors");
    let root = project.root.clone();
    // Each iteration: a Write, a Bash command (failing in iteration 2 only),
    // then a text answer; iteration 3 (or any later one) claims completion.
    let api = MockApi::start(move |turn, _| {
        let step = turn / 3 + 1;
        match turn % 3 {
            0 => Reply::write(
                root.join(format!("step{step}.txt")).display().to_string(),
                format!("step {step}\n"),
            ),
            1 if step == 2 => Reply::bash("cat missing-input.txt"),
            1 => Reply::bash(format!("echo ran >> {}", root.join("log.txt").display())),
            _ if step < 3 => Reply::text(format!("Finished step {step}.")),
            _ => Reply::text(format!("All three steps are done.\n{SIGNAL}")),
        }
    });
    let run = project.run_launcher_interactive(client, &api, &[], LOOP_TIMEOUT);
    let state = project.status_json();
    let why = explain(&run, &state, &api);
    assert_eq!(state["status"], "complete", "{why}");
    // As in `completes_on_signal`: a claiming stop that could not see its
    // message has the claim judged one iteration later.
    let last = 3 + u64::from(behind(&state, 2));
    assert_eq!(state["iteration"], last, "{why}");
    run.assert_code(0);
    let history = state["history"].as_array().unwrap();
    assert_eq!(history.len() as u64, last, "{why}");
    let excerpts = [
        "Finished step 1.",
        "Finished step 2.",
        "All three steps are done.",
        "All three steps are done.",
    ];
    for (i, want) in excerpts.iter().enumerate().take(history.len()) {
        // The stop that judged a late claim may be behind on its own
        // message too: it then has none, never another iteration's.
        let own_late = i == 3 && history[i]["messageSource"] == "transcript_behind";
        let excerpt = history[i]["excerpt"].as_str().unwrap();
        assert!(
            excerpt.starts_with(want) || (own_late && excerpt.is_empty()),
            "stop {} judged its own final text {want:?}; {why}",
            i + 1
        );
    }
    assert!(
        history[0]["error"].is_null(),
        "iteration 1 had no error; {why}"
    );
    assert!(
        ralph_tests::json_text_has(&history[1]["error"], "missing-input.txt"),
        "iteration 2's failing command is its error; {why}"
    );
    assert!(
        history[2..].iter().all(|r| r["error"].is_null()),
        "iterations 3 and later had no error; {why}"
    );
}

/// Whether the stop at `index` of the history judged without its own
/// message: the transcript had not caught up when the hook stopped waiting.
fn behind(state: &Value, index: usize) -> bool {
    state["history"][index]["messageSource"] == "transcript_behind"
}

#[ralph_tests::on_both_clients]
fn stops_at_the_iteration_cap(client: ClientVersion) {
    let _serial = one_terminal_ui_at_a_time();
    let project = TempProject::initialised("i-cap");
    let api = MockApi::start(|turn, _| Reply::text(format!("Still working (turn {turn}).")));
    let run = project.run_launcher_interactive(
        client,
        &api,
        &[("RALPH_MAX_ITERATIONS", "3")],
        LOOP_TIMEOUT,
    );
    let state = project.status_json();
    let why = explain(&run, &state, &api);
    assert_eq!(state["status"], "max_iterations", "{why}");
    assert_eq!(state["iteration"], 3, "{why}");
    assert_eq!(
        api.main_requests().len(),
        3,
        "exactly 3 iterations reached the model; {why}"
    );
    assert_eq!(state["history"].as_array().unwrap().len(), 3, "{why}");
    run.assert_code(10);
    assert!(run.stderr.contains("max_iterations"), "{why}");
}

#[ralph_tests::on_both_clients]
fn a_question_is_shown_and_the_answer_typed_in_the_session_goes_on(client: ClientVersion) {
    // In the terminal UI the agent asks; the stop is let through with the
    // question shown, the loop waits, and what the person types in the
    // session is the answer: the session's next stop goes on with the loop.
    use ralph_tests::interactive::{SIZE, Stderr, Terminal};
    use ralph_tests::mock_api::user_texts;
    use std::time::Duration;
    let (_serial, project) = terminal_project("i-ask", "Set up the server.\n");
    let api = MockApi::start(|turn, body| {
        let said = user_texts(body).join("\n");
        match turn {
            0 => Reply::text("The notes disagree.\nRALPH_ASK: Which port should it listen on?"),
            _ if said.contains("Port 8080") => {
                Reply::text(format!("It listens on 8080 now.\n{SIGNAL}"))
            }
            _ => Reply::text("Still waiting for the port."),
        }
    });
    let cmd = project.launcher_command_interactive(client, &api, &[]);
    let mut term = Terminal::spawn(cmd, SIZE, Stderr::Captured).unwrap();
    let waited = term.wait_until(LOOP_TIMEOUT, |_| status_of(&project) == "waiting");
    let asked = term.wait_for_screen("Which port should it listen on?", Duration::from_secs(10));
    let screen = term.screen();
    if !(waited && asked) {
        term.kill();
        let state = project.status_json();
        panic!(
            "no question waited (status {}); screen:\n{screen}\nstops:\n{}",
            state["status"],
            history(&state)
        );
    }
    // The session waits for the person; nothing is sent meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(api.main_requests().len(), 1, "{screen}");
    term.type_text("Port 8080.").unwrap();
    let state = type_then_complete(term, &project);
    let answered = &api.main_requests()[1];
    assert!(
        user_texts(&answered.body).join("\n").contains("Port 8080."),
        "the typed answer is the next request's"
    );
    let records = state["history"].as_array().unwrap();
    assert!(
        records.iter().any(|r| r["why"].as_str().is_some_and(
            |w| w.starts_with("resumed in the session after the question of iteration 1")
        )),
        "{}",
        history(&state)
    );
}

#[test]
fn an_interactive_loop_paces_to_the_window_its_status_line_is_given() {
    // The terminal UI gives the plan's usage windows only to a status line
    // command: ralph's records them, the hook pauses the loop at a stop,
    // and the person's own status line is still what the screen shows.
    use ralph_tests::interactive::{SIZE, Stderr, Terminal};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};
    let _serial = one_terminal_ui_at_a_time();
    let client = ClientVersion::V2_1_330;
    let epoch_now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let project = TempProject::initialised("i-pacing");
    project.write_prompt("Set up the server.\n");
    project.write(
        ".claude/settings.local.json",
        r#"{"statusLine": {"type": "command", "command": "echo MY-OWN-STATUS-LINE"}}"#,
    );
    // The window resets 12 s after the first request, however long the
    // client took to start on a loaded machine.
    let reset_at = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let first = std::sync::Arc::clone(&reset_at);
    let api = MockApi::start_in_order(move |_, _| {
        use std::sync::atomic::Ordering::SeqCst;
        let _ = first.compare_exchange(0, epoch_now() + 12, SeqCst, SeqCst);
        let reset = first.load(SeqCst);
        // As slow as a model: the status line is run every 2 s.
        std::thread::sleep(Duration::from_millis(1500));
        if epoch_now() < reset {
            Reply::text("Working on it.").with_utilization("5h", 0.85, reset)
        } else {
            Reply::text(format!("All done.\n{SIGNAL}"))
        }
    });
    let mut cmd = project.launcher_command_interactive(
        client,
        &api,
        &[
            ("RALPH_PAUSE_AT_UTILIZATION", "0.8"),
            ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-mock-subscription"),
        ],
    );
    cmd.env_remove("ANTHROPIC_API_KEY");
    let mut term = Terminal::spawn(cmd, SIZE, Stderr::Captured).unwrap();
    let paused = term.wait_until(LOOP_TIMEOUT, |_| status_of(&project) != "running");
    let shown = term.wait_for_screen("usage window is at 85%", Duration::from_secs(10));
    let screen = term.screen();
    let state = project.status_json();
    if !(paused && shown && state["status"] == "paused") {
        term.kill();
        panic!(
            "not paused (status {}); stops:\n{}\nscreen:\n{screen}",
            state["status"],
            history(&state)
        );
    }
    assert_eq!(state["pausedBecause"]["kind"], "utilization", "{state}");
    assert!(screen.contains("MY-OWN-STATUS-LINE"), "{screen}");
    let before = api.main_requests().len();
    assert!(
        before < 6,
        "{before} requests before the pause; stops:\n{}",
        history(&state)
    );
    // Nothing more until the person goes on, after the reset.
    let reset = reset_at.load(std::sync::atomic::Ordering::SeqCst);
    while epoch_now() <= reset {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(api.main_requests().len(), before);
    term.type_text("Go on.").unwrap();
    let state = type_then_complete(term, &project);
    let records = state["history"].as_array().unwrap();
    assert!(
        records.iter().any(|r| r["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("resumed after the pause (utilization"))),
        "{}",
        history(&state)
    );
}
