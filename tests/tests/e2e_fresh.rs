//! End-to-end: the fresh-context loop (`ralph-ctl run --fresh`) on the real
//! clients, through the launcher, against the mock: one `claude -p` process
//! and session per iteration, each judged by the same engine as the Stop
//! hook. The mock answers in order across the processes.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{user_texts, MockApi, Reply};
use ralph_tests::project::{
    processes_in_group, run_with_timeout, signal_process, wait_with_timeout, TempProject,
};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

#[test]
fn what_the_agent_writes_into_git_never_runs_in_the_driver() {
    the_driver_s_git_runs_no_program_of_the_agent_s(ClientVersion::V2_1_330);
}

/// The launcher with `--fresh` and `extra` before the client arguments.
fn fresh_launcher(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let args: Vec<&str> = std::iter::once("--fresh")
        .chain(extra.iter().copied())
        .chain(["--", "--permission-mode", "bypassPermissions"])
        .collect();
    project.launcher(client, api, &args, env)
}

/// The assistant turns a request carries (an earlier answer, in the same session).
fn assistant_turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or_default()
}

#[ralph_tests::on_both_clients]
fn three_fresh_iterations_each_start_from_nothing_and_a_claim_completes(client: ClientVersion) {
    let project = TempProject::new("fresh");
    project.init();
    // Each process's request is the first of its own conversation: the
    // script counts the requests across processes.
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text("Step one done."),
        1 => Reply::text("Step two done."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &[], &[]),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    let requests = api.main_requests();
    assert_eq!(requests.len(), 3, "one request per fresh process");
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(
            assistant_turns(&request.body),
            0,
            "request {i} carries an earlier answer"
        );
        let texts = user_texts(&request.body).join("\n");
        assert!(
            texts.contains(&format!("[Ralph loop: iteration {} of 25]", i + 1)),
            "request {i}: {texts}"
        );
        assert!(
            !texts.contains("Step one done."),
            "request {i} knows an earlier answer"
        );
    }
    let history = state["history"].as_array().unwrap();
    let excerpts: Vec<&str> = history
        .iter()
        .map(|r| r["excerpt"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(history.len(), 3, "{history:#?}");
    assert!(
        excerpts[0].contains("Step one") && excerpts[1].contains("Step two"),
        "{excerpts:?}"
    );
    for i in 1..=3 {
        assert!(
            run.stderr.contains(&format!("fresh iteration {i} of 25:")),
            "a summary line per iteration: {}",
            run.stderr
        );
    }
    assert!(
        run.stderr
            .lines()
            .last()
            .unwrap_or("")
            .contains("loop complete at iteration 3 of 25"),
        "{}",
        run.stderr
    );
}

#[ralph_tests::on_both_clients]
fn the_same_error_in_every_fresh_process_opens_the_breaker(client: ClientVersion) {
    let project = TempProject::new("fresh-error");
    project.init();
    let api = MockApi::start(|turn, _| match turn % 2 {
        0 => Reply::bash("cat no-such-file.txt"),
        _ => Reply::text("The file is still missing."),
    });
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &[], &[]),
        None,
        LOOP_TIMEOUT,
    );
    assert_eq!(run.code, Some(11), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    let iteration = state["iteration"].as_u64().unwrap();
    assert!(iteration <= 6, "open within 6 iterations: {state:#}");
    let history = state["history"].as_array().unwrap();
    assert!(
        history.iter().all(|r| r["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-file.txt"))),
        "each process's error, each against its own iteration: {history:#?}"
    );
    assert_eq!(
        api.main_requests().len() as u64,
        iteration * 2,
        "two requests per process"
    );
    // Live output: a readable line per tool call, failure and message, as
    // the iterations went, and no raw JSON.
    for shown in [
        "  → Bash: cat no-such-file.txt",
        "  ✗ tool failed: ",
        "  says: The file is still missing.",
    ] {
        assert_eq!(
            run.stdout.matches(shown).count() as u64,
            iteration,
            "{shown:?} once per iteration: {}",
            run.stdout
        );
    }
    assert!(
        run.stdout.lines().all(|l| !l.starts_with('{')),
        "{}",
        run.stdout
    );
}

#[ralph_tests::on_both_clients]
fn a_dry_run_starts_no_client_and_changes_nothing(client: ClientVersion) {
    let project = TempProject::new("fresh-dry");
    project.init();
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &["--dry-run"], &[]),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    run.assert_stdout_has(&["ralph dry run: nothing was started"]);
    run.assert_stdout_has(&[
        "'-p' '--output-format' 'stream-json' '--verbose'",
        "'--permission-mode' 'bypassPermissions'",
    ]);
    run.assert_stdout_has(&["[Ralph loop: iteration 1 of 25]"]);
    assert!(
        run.stdout.contains(ralph_tests::project::TEST_TASK.trim()),
        "{}",
        run.stdout
    );
    assert!(api.main_requests().is_empty(), "no client ran");
    assert!(project.state().is_none(), "no loop was started");
}

#[ralph_tests::on_both_clients]
fn sigint_to_the_driver_ends_a_fresh_loop_and_leaves_no_client(client: ClientVersion) {
    let project = TempProject::new("fresh-sigint");
    project.init();
    let api = MockApi::start(|turn, _| {
        thread::sleep(Duration::from_millis(200));
        Reply::text(format!("Working {turn}."))
    });
    let mut cmd = fresh_launcher(
        &project,
        client,
        &api,
        &[],
        &[("RALPH_MAX_ITERATIONS", "1000")],
    );
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    let group = launcher.id();
    let deadline = Instant::now() + LOOP_TIMEOUT;
    let reached = |project: &TempProject| {
        project
            .state()
            .and_then(|s| s["iteration"].as_u64())
            .is_some_and(|i| i >= 2)
    };
    while !reached(&project) {
        assert!(
            Instant::now() < deadline,
            "the loop never reached iteration 2"
        );
        thread::sleep(Duration::from_millis(50));
    }
    let started = Instant::now();
    signal_process(launcher.id(), libc::SIGINT);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "{:?}",
        started.elapsed()
    );
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_in_group(group).is_empty() {
        assert!(
            Instant::now() < deadline,
            "processes left in the launcher's group: {:?}",
            processes_in_group(group)
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[ralph_tests::on_both_clients]
fn an_abort_line_ends_a_fresh_loop_blocked(client: ClientVersion) {
    let project = TempProject::new("fresh-abort");
    project.init();
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text("Step one done."),
        _ => Reply::text("Cannot go on.\nRALPH_ABORT: which database should the migration target?"),
    });
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &[], &[]),
        None,
        LOOP_TIMEOUT,
    );
    assert_eq!(run.code, Some(18), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "blocked", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("which database should the migration target?"),
        "{state:#}"
    );
    assert_eq!(api.main_requests().len(), 2, "no third process");
}

#[ralph_tests::on_both_clients]
fn two_outcome_errors_end_the_loop_and_terminal_then_no_item_completes(client: ClientVersion) {
    let outcome = |status: &str, item: &str| {
        Reply::text(format!(
            "Worked on {item}.\nRALPH_OUTCOME: {{\"status\": \"{status}\", \"itemId\": \"{item}\"}}"
        ))
    };
    // Two errors in a row: errorBudget (2) is spent.
    let project = TempProject::new("fresh-outcome-errors");
    project.init();
    let api = MockApi::start_in_order(move |turn, _| outcome("error", &format!("T-{turn}")));
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &[], &[]),
        None,
        LOOP_TIMEOUT,
    );
    assert_eq!(run.code, Some(19), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "error_budget_exhausted", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let items: Vec<&str> = state["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["itemId"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(items, ["T-0", "T-1"], "{state:#}");
    assert_eq!(api.main_requests().len(), 2);

    // An item done, then an empty queue: complete at iteration 2.
    let project = TempProject::new("fresh-outcome-done");
    project.init();
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => outcome("terminal", "T-7"),
        _ => outcome("no-item", "none"),
    });
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &[], &[]),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert_eq!(state["history"][0]["outcome"], "terminal", "{state:#}");
    assert_eq!(state["history"][1]["outcome"], "no-item", "{state:#}");
    assert!(
        state["lastClaim"]["basis"]
            .as_str()
            .unwrap()
            .contains("no-item"),
        "{state:#}"
    );
}

#[ralph_tests::on_both_clients]
fn a_hung_iteration_is_cut_off_by_the_idle_timeout_and_counts_as_an_error(client: ClientVersion) {
    let project = TempProject::new("fresh-idle");
    project.init();
    // This test's own hung command (the clients run in parallel).
    let seconds = match client {
        ClientVersion::V2_1_330 => 211,
        ClientVersion::V2_0_77 => 207,
    };
    let hung = format!("tail -f /dev/null -s {seconds}");
    // In a session of its own (out of the client's process group) and
    // deaf to SIGTERM: only the driver's kill after the grace ends it.
    let hung_command = format!("trap '' TERM; setsid -w {hung}");
    // Iteration 1 hangs in a tool call that never returns; iteration 2
    // (a new process) completes.
    let api = MockApi::start_in_order(move |turn, body| match turn {
        0 => Reply::bash(hung_command.clone()),
        _ if user_texts(body)
            .join("\n")
            .contains("[Ralph: the previous iteration was cut off]") =>
        {
            Reply::text(format!("Picked up where it stopped. All done.\n{SIGNAL}"))
        }
        _ => Reply::text("The notice of the cut-off is missing."),
    });
    let cmd = fresh_launcher(
        &project,
        client,
        &api,
        &[],
        // Long enough for a client to start in its sandbox on a loaded
        // machine (2.0.77 took 5 s here), short enough to keep the test quick.
        &[("RALPH_IDLE_TIMEOUT_SECONDS", "8")],
    );
    let started = Instant::now();
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    run.assert_code(0);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the hung client was not ended in time: {:?}",
        started.elapsed()
    );
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let first = &state["history"][0];
    assert_eq!(first["outcome"], "error", "{state:#}");
    assert!(
        first["why"].as_str().unwrap_or("").contains("cut off"),
        "{state:#}"
    );
    run.assert_stderr_has(&["no sign of work for 8 s"]);
    // The hung tool's process went with its client.
    let leftover = ralph_tests::project::processes_matching(&hung);
    assert!(leftover.is_empty(), "left running: {leftover:?}");
}

/// `git` in `dir`, its trimmed stdout.
fn git_out(dir: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[ralph_tests::on_both_clients]
fn worktrees_go_when_empty_and_stay_when_committed_and_the_checkout_is_untouched(
    client: ClientVersion,
) {
    let project = TempProject::new("fresh-worktree");
    project.init();
    let root = project.path("");
    let head_before = git_out(&root, &["rev-parse", "HEAD"]);
    let status_before = git_out(&root, &["status", "--porcelain"]);
    // Iteration 1 changes nothing; iteration 2 commits a file in its
    // worktree; iteration 3 claims completion having changed nothing.
    let api = MockApi::start_in_order(|turn, _| {
        match turn {
        0 => Reply::text("Looked around; nothing to change yet."),
        1 => Reply::bash(
            "pwd > where.txt && git add where.txt && git commit -q -m 'iteration two' && echo committed",
        ),
        2 => Reply::text("Committed where.txt."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    }
    });
    let run = run_with_timeout(
        fresh_launcher(&project, client, &api, &["--worktree"], &[]),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");

    // Exactly iteration 2's worktree is left, with its commit on its branch.
    let folder = project.path(".claude/worktrees");
    let mut left: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".gitignore")
        .collect();
    left.sort();
    assert_eq!(left.len(), 1, "{left:?}\n{}", run.stderr);
    assert!(left[0].ends_with("-2"), "{left:?}");
    let kept = folder.join(&left[0]);
    let written = std::fs::read_to_string(kept.join("where.txt")).unwrap();
    assert_eq!(
        std::fs::canonicalize(written.trim()).unwrap(),
        std::fs::canonicalize(&kept).unwrap(),
        "the agent worked in its worktree"
    );
    assert_eq!(
        git_out(&kept, &["log", "-1", "--format=%s"]),
        "iteration two"
    );
    let branch = format!("ralph/{}", left[0]);
    assert_eq!(
        git_out(&root, &["branch", "--list", "ralph/*"]).trim_start_matches(['*', '+', ' ']),
        branch
    );
    assert!(
        run.stderr.contains(&format!(
            "worktree .claude/worktrees/{} kept (branch {branch}): 1 commit ahead of main",
            left[0]
        )),
        "{}",
        run.stderr
    );
    assert_eq!(
        run.stderr
            .matches("removed: the iteration left no change")
            .count(),
        2,
        "{}",
        run.stderr
    );
    // The main checkout: same commit, same status, no file of the agent's.
    assert_eq!(git_out(&root, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git_out(&root, &["status", "--porcelain"]), status_before);
    assert!(!project.path("where.txt").exists());
    assert_eq!(git_out(&root, &["branch", "--show-current"]), "main");
}

#[ralph_tests::on_both_clients]
fn a_note_reaches_the_next_iteration_once_and_the_ending_is_notified(client: ClientVersion) {
    let project = TempProject::new("fresh-say");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        r#"{"notify": "cat > notified.json"}"#,
    );
    let api = MockApi::start_in_order(|turn, body| {
        let texts = user_texts(body).join("\n");
        match turn {
            0 => {
                // Long enough for the person's note to arrive meanwhile.
                thread::sleep(Duration::from_millis(1500));
                Reply::text("Working on it.")
            }
            _ if texts
                .contains("[Ralph: a note from the person watching] Use the blue approach.") =>
            {
                Reply::text(format!("Did it the blue way.\n{SIGNAL}"))
            }
            _ => Reply::text("No note reached me."),
        }
    });
    let mut cmd = fresh_launcher(&project, client, &api, &[], &[]);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut launcher = cmd.spawn().unwrap();
    let deadline = Instant::now() + LOOP_TIMEOUT;
    while project.state().is_none() {
        assert!(Instant::now() < deadline, "the loop never started");
        thread::sleep(Duration::from_millis(20));
    }
    let said = project.ctl(&["say", "Use", "the", "blue", "approach."], &[]);
    said.assert_code(0);
    said.assert_stdout_has(&["iteration 2"]);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert!(
        state.get("hint").is_none(),
        "the note is dropped once given: {state:#}"
    );
    let log = project.ctl(&["log", "--json"], &[]).stdout;
    assert!(
        log.contains("\"say\"") && log.contains("Use the blue approach."),
        "{log}"
    );
    // The notify command read the summary of the ending.
    let deadline = Instant::now() + Duration::from_secs(10);
    let summary = loop {
        let text = std::fs::read_to_string(project.path("notified.json")).unwrap_or_default();
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            break value;
        }
        assert!(Instant::now() < deadline, "no notification: {text:?}");
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(summary["status"], "complete", "{summary:#}");
    assert_eq!(summary["iterations"], 2, "{summary:#}");
    assert_eq!(summary["event"], "ended", "{summary:#}");
}

#[ralph_tests::on_both_clients]
fn a_client_killed_mid_iteration_is_resumed_per_policy(client: ClientVersion) {
    // An iteration's client killed from outside the launcher (as the
    // out-of-memory killer does) is a crash: the loop pauses and the
    // supervisor resumes it after the backoff, counted once; it goes on to
    // its end instead of ending `interrupted`.
    let project = TempProject::new("fresh-killed");
    project.init();
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let killed = Arc::new(AtomicBool::new(false));
    let after_kill = Arc::clone(&killed);
    // Set once iteration 2's client has asked: it is the one running then.
    let arrived = Arc::new(AtomicBool::new(false));
    let second = Arc::clone(&arrived);
    let api = MockApi::start_in_order(move |_, body| {
        if after_kill.load(Ordering::SeqCst) {
            return Reply::text(format!("Picked up again. All done.\n{SIGNAL}"));
        }
        if user_texts(body).join("\n").contains("iteration 2 of") {
            second.store(true, Ordering::SeqCst);
            // Held while the test kills the client.
            thread::sleep(Duration::from_secs(3));
        }
        Reply::text("Still working.")
    });
    let mut cmd = fresh_launcher(
        &project,
        client,
        &api,
        &[],
        &[("RALPH_RESUME_BACKOFF_SECONDS", "1")],
    );
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    let iteration = |project: &TempProject| {
        project
            .state()
            .and_then(|s| s["iteration"].as_u64())
            .unwrap_or_default()
    };
    let deadline = Instant::now() + LOOP_TIMEOUT;
    while !arrived.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "iteration 2 never reached the API"
        );
        thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(iteration(&project), 2);
    let client_pid = project.state().unwrap()["carriers"]["client"]["pid"]
        .as_u64()
        .expect("the running client is recorded") as u32;
    killed.store(true, Ordering::SeqCst);
    signal_process(client_pid, libc::SIGKILL);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let log =
        std::fs::read_to_string(project.path(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    let pauses: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\"event\":\"pause\""))
        .collect();
    assert_eq!(pauses.len(), 1, "{log}");
    assert!(pauses[0].contains("killed by signal 9"), "{log}");
    assert!(log.contains("\"event\":\"resume\""), "{log}");
}

fn the_driver_s_git_runs_no_program_of_the_agent_s(client: ClientVersion) {
    // Iteration 1's agent sets an fsmonitor and a post-checkout hook in the
    // repository (both run by plain git: `status`, `worktree add`); the
    // driver then adds iteration 2's worktree, reads and removes both
    // worktrees, and the hook checks progress: none of it runs them.
    let project = TempProject::new("fresh-worktree-git");
    project.init();
    let mark = project.path("ran-by-git.txt");
    let mark = mark.display();
    let setup = format!(
        "hooks=\"$(git rev-parse --git-common-dir)/hooks\" && mkdir -p \"$hooks\" && \
         printf '#!/bin/sh\\necho post-checkout >> {mark}\\n' > \"$hooks/post-checkout\" && \
         chmod +x \"$hooks/post-checkout\" && \
         git config core.fsmonitor 'echo fsmonitor >> {mark}; false' && echo set"
    );
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::bash(setup.clone()),
        1 => Reply::text("Set up the repository."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let run = run_with_timeout(
        // Without the sandbox: in it, the client keeps `.git/hooks`
        // read-only ("Read-only file system", seen on 2.1.330).
        fresh_launcher(
            &project,
            client,
            &api,
            &["--worktree"],
            &[("RALPH_SANDBOX", "off")],
        ),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    // The traps were set (else this test proves nothing)...
    let config = std::fs::read_to_string(project.path(".git/config")).unwrap();
    assert!(
        config.contains("fsmonitor"),
        "{config}\n{}\n{}",
        run.stdout,
        run.stderr
    );
    assert!(project.path(".git/hooks/post-checkout").exists());
    // ...and never sprung.
    assert!(
        !project.path("ran-by-git.txt").exists(),
        "{}\n{}",
        std::fs::read_to_string(project.path("ran-by-git.txt")).unwrap_or_default(),
        run.stderr
    );
}
