//! End-to-end: the repository as a Claude Code plugin (`claude --plugin-dir
//! <repo>`), on the real client 2.1.330, in plain git projects with no
//! `init`: `/ralph-loop` runs until the promise, re-injecting the task; a
//! later plain session is not held; `/cancel-ralph` from another session
//! ends a running loop `cancelled`. On 2.0.77, whose commands do not get
//! the session id, `/ralph-loop` refuses and holds nothing.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::bins;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, stop_hook_feedback, user_texts};
use ralph_tests::project::{Run, TempProject, run_with_timeout, wait_with_timeout};
use ralph_tests::scenario::script;

const TIMEOUT: Duration = Duration::from_secs(120);

/// What `/ralph-loop Fix the findings --max-iterations 6
/// --completion-promise DONE` is said to have been read as.
const OFFICIAL_FORM_READ_AS: &str = "ralph: loop started: task \"Fix the findings\"; \
    max iterations 6 (from --max-iterations); completion promise \"DONE\" (from \
    --completion-promise); not verified: no verify command in .claude/ralph/config.json, so \
    the promise ends the loop without running anything";

/// A session on 2.1.330 in a new project `name` that types `line` (a
/// `/ralph-loop` with a promise, at most 6 iterations), its agent saying
/// `last` (the promise) at its third answer and "Hello." after. Asserts the
/// session ended well with the loop complete at iteration 3 of 6, after
/// three requests; the project, the mock, the session and the loop's state.
fn to_the_promise_at_3_of_6(
    name: &str,
    line: &str,
    last: &str,
) -> (TempProject, MockApi, Run, serde_json::Value) {
    let project = TempProject::new(name);
    let api = MockApi::start_in_order(script::says(&[
        "Looked at the findings.",
        "Fixed two of three.",
        last,
        "Hello.",
    ]));
    let run = plugin_session(&project, ClientVersion::V2_1_330, &api, line);
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");
    assert_eq!(state["maxIterations"], 6, "{state:#}");
    assert_eq!(api.main_requests().len(), 3, "{run:?}");
    (project, api, run, state)
}

#[test]
fn ralph_loop_runs_until_the_promise_and_leaves_later_sessions_alone() {
    let client = ClientVersion::V2_1_330;
    let (project, api, run, state) = to_the_promise_at_3_of_6(
        "plugin-loop",
        "/ralph-loop Fix the findings. Don't run `touch pwned` or use $HOME. --max-iterations 6 --completion-promise DONE",
        "All three are fixed.\nDONE",
    );
    // The task as typed: no character of it reached a shell.
    assert_eq!(
        state["task"], "Fix the findings. Don't run `touch pwned` or use $HOME.",
        "{state:#}"
    );
    assert!(!project.path("pwned").exists());
    let requests = api.main_requests();
    let first = user_texts(&requests[0].body).join("\n");
    for said in ["Ralph loop started in this session", "Fix the findings."] {
        assert!(first.contains(said), "{said:?} in {first}");
    }
    // Each stop gave the task back.
    for request in &requests[1..] {
        let fed = stop_hook_feedback(&request.body).join("\n");
        assert!(
            fed.contains("Fix the findings.") && fed.contains("DONE"),
            "{fed}"
        );
    }
    // The loop was the session's own.
    let session = serde_json::from_str::<serde_json::Value>(&run.stdout).unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(state["sessionId"], session.as_str());

    // A later plain session in the same project is not held.
    let later = plugin_session(&project, client, &api, "Say hello.");
    later.assert_code(0);
    assert_eq!(api.main_requests().len(), 4, "one request, no block");
    assert_eq!(project.status_json()["status"], "complete");
}

#[test]
fn the_official_plugin_s_form_unquoted_is_read_as_task_and_flags() {
    // `/ralph-loop Fix the findings --max-iterations 6 --completion-promise
    // DONE`: the task unquoted, a one-word promise unquoted, as the official
    // plugin's help has it. Both flags are taken, the loop completes on the
    // promise at 3, and what the line was read as is said first.
    let (_project, api, _run, state) = to_the_promise_at_3_of_6(
        "plugin-official",
        "/ralph-loop Fix the findings --max-iterations 6 --completion-promise DONE",
        "All three are fixed.\n<promise>DONE</promise>",
    );
    assert_eq!(state["task"], "Fix the findings", "{state:#}");
    assert_eq!(state["completionSignal"], "DONE", "{state:#}");
    let first = user_texts(&api.main_requests()[0].body).join("\n");
    assert!(first.contains(OFFICIAL_FORM_READ_AS), "{first}");
}

#[test]
fn cancel_ralph_from_another_session_ends_a_running_loop_cancelled() {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-cancel");
    let api = MockApi::start(|turn, body| {
        if user_texts(body).join("\n").contains("Ralph loop cancelled") {
            return Reply::text("The loop is cancelled.");
        }
        thread::sleep(Duration::from_millis(300));
        Reply::text(format!("Working, step {turn}."))
    });
    // Its agent only talks until the cancel.
    let mut looping = talking_docs_loop(&project, client, &api, 50);
    looping.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = looping.spawn().unwrap();
    let deadline = Instant::now() + TIMEOUT;
    while project
        .state()
        .and_then(|s| s["iteration"].as_u64())
        .is_none_or(|i| i < 2)
    {
        assert!(
            Instant::now() < deadline,
            "the loop never reached iteration 2"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let cancel = plugin_session(&project, client, &api, "/cancel-ralph");
    cancel.assert_code(0);
    let (status, _out, err) = wait_with_timeout(&mut child, Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    let state = project.status_json();
    assert_eq!(state["status"], "cancelled", "{state:#}");
    // Cancelled before its cap (how far it got depends on the machine's load).
    assert!(state["iteration"].as_u64().unwrap() < 50, "{state:#}");
    let status = project.ctl(&["status"], &[]);
    status.assert_stdout_has(&["status:     cancelled"]);
}

#[test]
fn on_2_0_ralph_loop_refuses_and_holds_nothing() {
    let client = ClientVersion::V2_0_77;
    let project = TempProject::new("plugin-2-0");
    let api = MockApi::start_in_order(|_, _| Reply::text("I cannot start the loop."));
    let run = plugin_session(&project, client, &api, "/ralph-loop Fix the findings.");
    for r in api.requests() {
        eprintln!("REQ {}", user_texts(&r.body).join(" | ").replace('\n', " "));
    }
    run.assert_code(0);
    assert!(project.state().is_none(), "no loop was started");
    let requests = api.main_requests();
    assert_eq!(requests.len(), 1, "not held");
    let text = user_texts(&requests[0].body).join("\n");
    assert!(
        text.contains("The Ralph loop was NOT started") && text.contains("CLAUDE_CODE_SESSION_ID"),
        "{text}"
    );
}

#[test]
fn the_task_never_reaches_a_shell_and_is_kept_verbatim() {
    // The line that closed the old here-document, then shell: none of it
    // runs; the task is stored and fed back exactly as typed.
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-verbatim");
    let api = MockApi::start_in_order(script::says(&["Working on it.", "Done.\nDONE"]));
    let task = "Fix the findings.\nRALPH_LOOP_TASK\ntouch pwned\n$(touch pwned2) `touch pwned3`\n\n- keep this list\n- and its lines\nImplement the --completion-promise option.";
    let line = format!("/ralph-loop {task}\n--max-iterations 4 --completion-promise DONE");
    let run = plugin_session(&project, client, &api, &line);
    run.assert_code(0);
    for file in ["pwned", "pwned2", "pwned3"] {
        assert!(!project.path(file).exists(), "{file} was created: {run:?}");
    }
    let state = project.status_json();
    assert_eq!(state["task"], task, "{state:#}");
    assert_eq!(state["maxIterations"], 4, "{state:#}");
    assert_eq!(state["status"], "complete", "{state:#}");
    let requests = api.main_requests();
    let first = user_texts(&requests[0].body).join("\n");
    assert!(
        first.contains("Ralph loop started in this session") && first.contains(task),
        "{first}"
    );
    let fed = stop_hook_feedback(&requests[1].body).join("\n");
    assert!(fed.contains(task), "{fed}");
}

#[test]
fn a_refused_ralph_loop_says_why_and_starts_nothing_and_other_prompts_pass() {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-refused");
    let api = MockApi::start_in_order(|_, _| Reply::text("Hello."));
    let run = plugin_session(
        &project,
        client,
        &api,
        "/ralph-loop Fix it.\n--max-iterations lots",
    );
    assert!(project.state().is_none(), "no loop was started: {run:?}");
    assert!(
        api.main_requests().is_empty(),
        "the command never ran: {run:?}"
    );
    // What the person reads: the client's result, with the hook's reason.
    let result: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let said = result["result"].as_str().unwrap_or_default();
    assert!(
        said.contains("the Ralph loop was NOT started")
            && said.contains("--max-iterations \"lots\" is invalid"),
        "{run:?}"
    );
    // A plain prompt in a plugin session: untouched.
    let plain = plugin_session(
        &project,
        client,
        &api,
        "Say hello, and mention /ralph-loop.",
    );
    plain.assert_code(0);
    assert_eq!(api.main_requests().len(), 1, "{plain:?}");
    assert!(project.state().is_none());
}

#[test]
fn a_task_past_its_size_cap_is_refused_by_the_hook() {
    // 300 KiB of task (more than one argument may hold, so on stdin): the
    // hook refuses it, naming the cap; nothing starts, nothing is sent.
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-big");
    let api = MockApi::start_in_order(|_, _| Reply::text("Hello."));
    // No prompt argument: it comes on stdin.
    let cmd = plugin_command_with(&project, client, &api, None, Some("bypassPermissions"));
    let line = format!("/ralph-loop {}", "Fix every finding. ".repeat(16 * 1024));
    let run = run_with_timeout(cmd, Some(line.as_bytes()), TIMEOUT);
    assert!(
        project.state().is_none(),
        "no loop was started: {}",
        run.stderr
    );
    assert!(api.main_requests().is_empty(), "nothing was sent");
    let result: serde_json::Value = serde_json::from_str(&run.stdout).unwrap_or_default();
    let said = result["result"].as_str().unwrap_or_default();
    assert!(
        said.contains("the Ralph loop was NOT started") && said.contains("256 KiB"),
        "{}",
        &said[..said.len().min(600)]
    );
}

/// The real client with the repository as its plugin, `ralph-ctl` and
/// `ralph-stop-hook` on its PATH, headless.
fn plugin_command(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    prompt: &str,
) -> Command {
    plugin_command_with(
        project,
        client,
        api,
        Some(prompt),
        Some("bypassPermissions"),
    )
}

/// [`plugin_command`] with `/ralph-loop Keep improving the docs.` of at
/// most `max` iterations, for an agent that only talks: the breaker's
/// no-progress threshold out of its reach.
fn talking_docs_loop(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    max: u32,
) -> Command {
    let mut cmd = plugin_command(
        project,
        client,
        api,
        &format!("/ralph-loop Keep improving the docs. --max-iterations {max}"),
    );
    cmd.env("CB_NO_PROGRESS_THRESHOLD", "1000");
    cmd
}

/// [`plugin_command`], the prompt on stdin when `None`, in the permission
/// `mode` given (the client's default when `None`).
fn plugin_command_with(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    prompt: Option<&str>,
    mode: Option<&str>,
) -> Command {
    let mut cmd = project.command(client.executable());
    cmd.env("PATH", path_with_the_binaries())
        .arg("--plugin-dir")
        .arg(plugin_dir())
        .arg("-p")
        .args(prompt)
        .args(["--output-format", "json"])
        .args(mode.iter().flat_map(|m| ["--permission-mode", m]))
        .envs(project.client_env(client, api));
    cmd
}

fn plugin_session(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    prompt: &str,
) -> Run {
    run_with_timeout(plugin_command(project, client, api, prompt), None, TIMEOUT)
}

/// `PATH` with the folder of the binaries under test first, where the
/// plugin's hooks and commands find `ralph-ctl`.
fn path_with_the_binaries() -> std::ffi::OsString {
    let mut path = vec![bins::bin_dir()];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(path).unwrap()
}

fn plugin_dir() -> PathBuf {
    bins::workspace_root()
}

#[test]
fn a_loop_above_the_client_s_block_cap_says_so_and_its_session_s_end_is_recorded() {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-cap");
    let api = MockApi::start(|turn, _| Reply::text(format!("Working, step {turn}.")));
    // The agent only talks: the breaker would stop it before the client's cap.
    let cmd = talking_docs_loop(&project, client, &api, 20);
    let run = run_with_timeout(cmd, None, TIMEOUT);
    run.assert_code(0);
    let requests = api.main_requests();
    let first = user_texts(&requests[0].body).join("\n");
    assert!(
        first.contains("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=25"),
        "said once, with the value: {first}"
    );
    // The client let the session go after its own cap; the session's end
    // leaves no loop running to hold it later.
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap_or("")
            .contains("the session ended"),
        "{state:#}"
    );
    assert!(state["iteration"].as_u64().unwrap() < 20, "{state:#}");
}

#[test]
fn a_headless_loop_whose_edits_are_all_refused_is_not_complete() {
    // `claude -p` with no permission mode: every edit is refused, nobody
    // can grant it. The agent claims done anyway; nothing changed, so the
    // claim fails, and the refusals end the loop, naming the mode to use.
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-refused");
    let notes = project.path("notes.txt").display().to_string();
    let api = MockApi::start_in_order(move |turn, _| match turn % 2 {
        0 => Reply::write(notes.clone(), "the notes\n"),
        _ => Reply::text("Wrote the notes.\nDONE"),
    });
    let cmd = plugin_command_with(
        &project,
        client,
        &api,
        Some(
            "/ralph-loop Write the notes into notes.txt. --max-iterations 6 --completion-promise DONE",
        ),
        None,
    );
    let run = run_with_timeout(cmd, None, TIMEOUT);
    let state = project.status_json();
    assert!(!project.path("notes.txt").exists(), "{run:?}");
    assert_ne!(state["status"], "complete", "{state:#}");
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    // At the second refused iteration in a row; a stop that could not see
    // its calls yet (2.1.330 may write them after the hook, under load)
    // breaks the row and rejects the claim all the same.
    let unseen = state["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["toolsIncomplete"] == true)
        .count() as u64;
    let iteration = state["iteration"].as_u64().unwrap();
    assert!((2..=2 + 2 * unseen).contains(&iteration), "{state:#}");
    let claim = &state["lastClaim"];
    assert_eq!(claim["accepted"], false, "{state:#}");
    let because = state["endedBecause"].as_str().unwrap_or_default();
    assert!(
        because.contains("for lack of permission")
            && because.contains("--permission-mode acceptEdits"),
        "{because}"
    );
    // The first rejection told the agent why, with the refused call.
    let fed = stop_hook_feedback(&api.main_requests()[2].body).join("\n");
    assert!(
        fed.contains("permission gate") && fed.contains("nothing in the project changed"),
        "{fed}"
    );
    // The loop's runtime folder stays out of git, as for launcher loops.
    let status = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(&project.root)
        .output()
        .unwrap();
    let untracked = String::from_utf8_lossy(&status.stdout);
    assert!(!untracked.contains(".claude/"), "{untracked}");
}

#[test]
fn ralph_status_is_answered_without_a_model_request_on_2_1() {
    // 2.1 shows the hook's block reason: the status, and no request spent.
    let project = TempProject::initialised("plugin-status");
    let api = MockApi::start_in_order(|_, _| Reply::text("Hello."));
    let run = plugin_session(&project, ClientVersion::V2_1_330, &api, "/ralph-status");
    assert!(api.main_requests().is_empty(), "{run:?}");
    let result: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let said = result["result"].as_str().unwrap_or_default();
    assert!(
        said.contains("No Ralph loop in") && said.contains("no state file"),
        "the status, as ralph-ctl status says it: {run:?}"
    );
}

#[test]
fn the_official_plugin_s_form_typed_in_the_terminal_ui_completes_on_the_promise() {
    // The same line typed in the client's terminal UI (a pseudo-terminal),
    // the way a person runs the plugin: read the same way, the loop
    // completes on `<promise>DONE</promise>` at 3.
    use ralph_tests::interactive::{Key, SIZE, Stderr, Terminal};
    let _serial = crate::one_terminal_ui_at_a_time();
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-official-ui");
    let api = MockApi::start(|turn, _| match turn {
        0 => Reply::text("Looked at the findings."),
        1 => Reply::text("Fixed two of three."),
        2 => Reply::text("All three are fixed.\n<promise>DONE</promise>"),
        _ => Reply::text("Nothing more to do."),
    });
    let mut cmd = project.command(client.executable());
    let env = project.first_run_answered(client, &api);
    cmd.env("PATH", path_with_the_binaries())
        .arg("--plugin-dir")
        .arg(plugin_dir())
        .args(["--permission-mode", "bypassPermissions"])
        .env("TERM", "xterm-256color")
        .envs(env);
    let mut term = Terminal::spawn(cmd, SIZE, Stderr::Captured).unwrap();
    let ready = term.wait_for_screen("bypass permissions on", Duration::from_secs(30));
    assert!(ready, "no prompt: {}", term.screen());
    thread::sleep(Duration::from_millis(500));
    term.type_text("/ralph-loop Fix the findings --max-iterations 6 --completion-promise DONE")
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    term.press(Key::Enter).unwrap();
    let status = |project: &TempProject| {
        project
            .state()
            .and_then(|s| s["status"].as_str().map(str::to_string))
            .unwrap_or_default()
    };
    let done = term.wait_until(TIMEOUT, |_| status(&project) == "complete");
    let screen = term.screen();
    let text = term.text();
    let run = term.exit_session();
    let state = project.status_json();
    assert!(
        done,
        "status {}; screen:\n{screen}\n{}",
        state["status"], run.stderr
    );
    assert_eq!(state["task"], "Fix the findings", "{state:#}");
    assert_eq!(state["maxIterations"], 6, "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");
    // The person was shown what the line was read as: the hook's message,
    // drawn under the line (it scrolls off as the loop goes on).
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!("UserPromptSubmit says: {OFFICIAL_FORM_READ_AS}")),
        "the person is shown what was read; drawn:\n{flat}"
    );
}

#[test]
fn a_plugin_loop_at_its_cap_is_told_to_run_ralph_loop_again() {
    // A `/ralph-loop` loop has no launcher: at its cap, what to do next
    // names the command it was started with.
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-at-cap");
    let api = MockApi::start(|turn, _| Reply::text(format!("Working, step {turn}.")));
    let run = plugin_session(
        &project,
        client,
        &api,
        "/ralph-loop Keep improving the docs. --max-iterations 2",
    );
    run.assert_code(0);
    assert_eq!(project.status_json()["status"], "max_iterations");
    let status = project.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains(
            "next:       to go on, start a new loop (`/ralph-loop` again in your Claude Code \
             session, with --max-iterations N for a higher cap)"
        ),
        "{status:?}"
    );
    assert!(!status.stdout.contains("launcher"), "{status:?}");
}

#[test]
fn the_official_habit_without_init_is_checked_by_the_tests_ralph_finds() {
    // `/ralph-loop "Fix the tests" --max-iterations 6 --completion-promise
    // DONE` in a Python project never set up: the test command `init`
    // would find becomes the check, said in the first line, so a DONE
    // while the tests fail is rejected, and the fixed code completes.
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("plugin-found-check");
    project.write("calc.py", "def add(a, b):\n    return a - b\n");
    project.write(
        "test_calc.py",
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n",
    );
    project.commit_all("a failing test");
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("The tests are fixed.\nDONE"),
        1 => Reply::bash("printf 'def add(a, b):\\n    return a + b\\n' > calc.py && echo fixed"),
        _ => Reply::text("Fixed add() for real.\nDONE"),
    });
    let run = plugin_session(
        &project,
        client,
        &api,
        "/ralph-loop \"Fix the tests\" --max-iterations 6 --completion-promise DONE",
    );
    run.assert_code(0);
    let first = user_texts(&api.main_requests()[0].body).join("\n");
    assert!(
        first.contains(
            "checked by `python3 -m unittest` (the verify command in .claude/ralph/config.json)"
        ),
        "{first}"
    );
    let config = project.read(".claude/ralph/config.json");
    assert!(
        config.contains("\"command\": \"python3 -m unittest\""),
        "{config}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let history = state["history"].as_array().unwrap();
    assert!(
        history.iter().any(|r| r["claim"]["accepted"] == false),
        "the first DONE, with the test failing, was rejected: {state:#}"
    );
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    assert!(
        !state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("not verified"),
        "{state:#}"
    );
}
