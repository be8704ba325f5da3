//! End-to-end: the fresh-context loop (`ralph-ctl run --fresh`) on the real
//! clients, through the launcher, against the mock: one `claude -p` process
//! and session per iteration, each judged by the same engine as the Stop
//! hook. The mock answers in order across the processes.

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, assistant_turns, user_texts};
use ralph_tests::project::{git_out, processes_in_group, signal_process};
use ralph_tests::scenario::{
    Flag, NOTIFY_CONFIG, Scenario, exits_with, notified, script, wait_until,
};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

#[test]
fn what_the_agent_writes_into_git_never_runs_in_the_driver() {
    the_driver_s_git_runs_no_program_of_the_agent_s(ClientVersion::V2_1_330);
}

/// A fresh-context scenario named `name`.
fn fresh(name: &str, client: ClientVersion) -> Scenario {
    Scenario::new(name, client).fresh(&[])
}

#[ralph_tests::on_both_clients(area_sample)]
fn three_fresh_iterations_each_start_from_nothing_and_a_claim_completes(client: ClientVersion) {
    // Each process's request is the first of its own conversation: the
    // script counts the requests across processes.
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text("Step one done."),
        1 => Reply::text("Step two done."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let outcome = fresh("fresh", client).run(&api);
    outcome.ended(0, "complete").at_iteration(3);
    assert_eq!(outcome.state["lastClaim"]["accepted"], true, "{outcome:?}");
    let requests = api.main_requests();
    assert_eq!(requests.len(), 3, "one request per fresh process");
    for (i, request) in requests.iter().enumerate() {
        let earlier = assistant_turns(&request.body);
        assert_eq!(earlier, 0, "request {i} carries an earlier answer");
        let texts = user_texts(&request.body).join("\n");
        let header = format!("[Ralph loop: iteration {} of 25]", i + 1);
        assert!(texts.contains(&header), "request {i}: {texts}");
        let knows = texts.contains("Step one done.");
        assert!(!knows, "request {i} knows an earlier answer");
    }
    let history = outcome.history();
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
        let summary = format!("fresh iteration {i} of 25:");
        outcome.run.assert_stderr_has(&[&summary]);
    }
    outcome.closing_has(&["loop complete at iteration 3 of 25"]);
}

#[ralph_tests::on_both_clients]
fn the_same_error_in_every_fresh_process_opens_the_breaker(client: ClientVersion) {
    let call = Reply::bash("cat no-such-file.txt");
    let api = MockApi::start(script::call_then_say(call, "The file is still missing."));
    let outcome = fresh("fresh-error", client).run(&api);
    outcome.ended(11, "circuit_open");
    let iteration = outcome.state["iteration"].as_u64().unwrap();
    assert!(iteration <= 6, "open within 6 iterations: {outcome:?}");
    let history = outcome.history();
    let own_error = |r: &Value| {
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("no-such-file.txt"))
    };
    assert!(
        history.iter().all(own_error),
        "each process's error, each against its own iteration: {history:#?}"
    );
    let requests = api.main_requests().len() as u64;
    assert_eq!(requests, iteration * 2, "two requests per process");
    // Live output: a readable line per tool call, failure and message, as
    // the iterations went, and no raw JSON.
    let stdout = &outcome.run.stdout;
    for shown in [
        "  → Bash: cat no-such-file.txt",
        "  ✗ tool failed: ",
        "  says: The file is still missing.",
    ] {
        let count = stdout.matches(shown).count() as u64;
        assert_eq!(count, iteration, "{shown:?} once per iteration: {stdout}");
    }
    assert!(stdout.lines().all(|l| !l.starts_with('{')), "{stdout}");
}

#[ralph_tests::on_both_clients]
fn a_dry_run_starts_no_client_and_changes_nothing(client: ClientVersion) {
    let scenario = Scenario::new("fresh-dry", client).fresh(&["--dry-run"]);
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    let outcome = scenario.run(&api);
    outcome.run.assert_code(0).assert_stdout_has(&[
        "ralph dry run: nothing was started",
        "'-p' '--output-format' 'stream-json' '--verbose'",
        "'--permission-mode' 'bypassPermissions'",
        "[Ralph loop: iteration 1 of 25]",
        ralph_tests::project::TEST_TASK.trim(),
    ]);
    assert!(api.main_requests().is_empty(), "no client ran");
    assert!(scenario.state().is_none(), "no loop was started");
}

#[ralph_tests::on_both_clients]
fn sigint_to_the_driver_ends_a_fresh_loop_and_leaves_no_client(client: ClientVersion) {
    let scenario = fresh("fresh-sigint", client)
        .env("RALPH_MAX_ITERATIONS", "1000")
        .without_breaker();
    let api = MockApi::start(script::working(Duration::from_millis(200)));
    let mut launcher = scenario.start_until(&api, 2);
    let group = launcher.id();
    let started = Instant::now();
    signal_process(launcher.id(), libc::SIGINT);
    exits_with(&mut launcher, 130);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(9), "{took:?}");
    let state = scenario.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    assert!(
        wait_until(Duration::from_secs(5), || processes_in_group(group)
            .is_empty()),
        "processes left in the launcher's group: {:?}",
        processes_in_group(group)
    );
}

#[ralph_tests::on_both_clients]
fn a_worktree_loop_resumed_as_printed_goes_on_in_worktrees(client: ClientVersion) {
    // A `--fresh --worktree` loop stopped by Ctrl-C; its closing line says
    // `ralph-ctl run --resume`, which, run as printed, goes on with each
    // iteration in a worktree of its own.
    let scenario = Scenario::new("fresh-worktree-resume", client).fresh(&["--worktree"]);
    let api = MockApi::start(script::working(Duration::from_millis(200)));
    let mut launcher = scenario.start_until(&api, 2);
    let second = || {
        std::fs::read_dir(scenario.path(".claude/worktrees"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with("-2"))
    };
    assert!(
        wait_until(LOOP_TIMEOUT, || second().is_some()),
        "iteration 2's worktree never came"
    );
    signal_process(launcher.id(), libc::SIGINT);
    exits_with(&mut launcher, 130);
    let state = scenario.status_json();
    assert_eq!(state["status"], "interrupted");
    // As when the client was stopped before the model's first answer: the
    // iteration's transcript holds only what the client writes before one.
    let session = state["sessionId"].as_str().unwrap();
    let worktree = second().expect("iteration 2's worktree, left as it was");
    let mangled: String = std::fs::canonicalize(&worktree)
        .unwrap()
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let folder = scenario.home.join(".claude/projects").join(mangled);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join(format!("{session}.jsonl")),
        format!(
            "{{\"type\":\"queue-operation\",\"operation\":\"dequeue\",\"sessionId\":\"{session}\"}}\n"
        ),
    )
    .unwrap();
    let api2 = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::bash(
            "pwd > where.txt && git add where.txt && git commit -q -m resumed && echo done",
        ),
        _ => Reply::text(format!("Committed where.txt.\n{SIGNAL}")),
    });
    let resumed = scenario.run_with(&api2, &["--resume"]);
    resumed.run.assert_stderr_has(&[
        "resuming the way the loop ran: ",
        "each iteration in a worktree (--worktree)",
        &format!("session {session} holds no answer the client could resume"),
    ]);
    resumed.ended(0, "complete");
    // The resumed iteration worked in a worktree, never in the checkout.
    assert!(!scenario.path("where.txt").exists(), "{resumed:?}");
    let kept = std::fs::read_dir(scenario.path(".claude/worktrees"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().join("where.txt").exists())
        .count();
    assert_eq!(kept, 1, "{resumed:?}");
}

#[ralph_tests::on_both_clients]
fn an_abort_line_ends_a_fresh_loop_blocked(client: ClientVersion) {
    let question = "which database should the migration target?";
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("Step one done."),
        _ => Reply::text(format!("Cannot go on.\nRALPH_ABORT: {question}")),
    });
    let outcome = fresh("fresh-abort", client).run(&api);
    outcome.ended(18, "blocked").at_iteration(2);
    let because = outcome.state["endedBecause"].as_str().unwrap();
    assert!(because.contains(question), "{outcome:?}");
    assert_eq!(api.main_requests().len(), 2, "no third process");
}

#[ralph_tests::on_both_clients]
fn two_outcome_errors_end_the_loop_and_terminal_then_no_item_completes(client: ClientVersion) {
    let says = |status: &str, item: &str| {
        Reply::text(format!(
            "Worked on {item}.\nRALPH_OUTCOME: {{\"status\": \"{status}\", \"itemId\": \"{item}\"}}"
        ))
    };
    // Two errors in a row: errorBudget (2) is spent.
    let api = MockApi::start_in_order(move |turn, _| says("error", &format!("T-{turn}")));
    let spent = fresh("fresh-outcome-errors", client).run(&api);
    spent.ended(19, "error_budget_exhausted").at_iteration(2);
    let items: Vec<&str> = spent
        .history()
        .iter()
        .map(|r| r["itemId"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(items, ["T-0", "T-1"], "{spent:?}");
    assert_eq!(api.main_requests().len(), 2);

    // An item done, then an empty queue: complete at iteration 2.
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => says("terminal", "T-7"),
        _ => says("no-item", "none"),
    });
    let done = fresh("fresh-outcome-done", client).run(&api);
    done.ended(0, "complete").at_iteration(2);
    let outcomes: Vec<&Value> = done.history().iter().map(|r| &r["outcome"]).collect();
    assert_eq!(outcomes, ["terminal", "no-item"], "{done:?}");
    let basis = done.state["lastClaim"]["basis"].as_str().unwrap();
    assert!(basis.contains("no-item"), "{done:?}");
}

#[ralph_tests::on_both_clients]
fn a_hung_iteration_is_cut_off_by_the_idle_timeout_and_counts_as_an_error(client: ClientVersion) {
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
    // Long enough for a client to start in its sandbox on a loaded
    // machine (2.0.77 took 5 s here), short enough to keep the test quick.
    let scenario = fresh("fresh-idle", client).env("RALPH_IDLE_TIMEOUT_SECONDS", "8");
    let started = Instant::now();
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "the hung client was not ended in time: {took:?}"
    );
    let first = &outcome.history()[0];
    assert_eq!(first["outcome"], "error", "{outcome:?}");
    let why = first["why"].as_str().unwrap_or("");
    assert!(why.contains("cut off"), "{outcome:?}");
    outcome.run.assert_stderr_has(&["no sign of work for 8 s"]);
    // The hung tool's process went with its client.
    let leftover = ralph_tests::project::processes_matching(&hung);
    assert!(leftover.is_empty(), "left running: {leftover:?}");
}

#[ralph_tests::on_both_clients]
fn worktrees_go_when_empty_and_stay_when_committed_and_the_checkout_is_untouched(
    client: ClientVersion,
) {
    let scenario = Scenario::new("fresh-worktree", client).fresh(&["--worktree"]);
    let root = scenario.path("");
    let head_before = git_out(&root, &["rev-parse", "HEAD"]);
    let status_before = git_out(&root, &["status", "--porcelain"]);
    // Iteration 1 changes nothing; iteration 2 commits a file in its
    // worktree; iteration 3 claims completion having changed nothing.
    let commit = "pwd > where.txt && git add where.txt && git commit -q -m 'iteration two' && echo committed";
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("Looked around; nothing to change yet."),
        1 => Reply::bash(commit),
        2 => Reply::text("Committed where.txt."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(3);
    let stderr = &outcome.run.stderr;

    // Exactly iteration 2's worktree is left, with its commit on its branch.
    let folder = scenario.path(".claude/worktrees");
    let mut left: Vec<String> = std::fs::read_dir(&folder)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name != ".gitignore")
        .collect();
    left.sort();
    assert_eq!(left.len(), 1, "{left:?}\n{stderr}");
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
    let listed = git_out(&root, &["branch", "--list", "ralph/*"]);
    assert_eq!(listed.trim_start_matches(['*', '+', ' ']), branch);
    let kept_line = format!(
        "worktree .claude/worktrees/{} kept (branch {branch}): 1 commit ahead of main",
        left[0]
    );
    outcome.run.assert_stderr_has(&[&kept_line]);
    let removed = stderr
        .matches("removed: the iteration left no change")
        .count();
    assert_eq!(removed, 2, "{stderr}");
    // The main checkout: same commit, same status, no file of the agent's.
    assert_eq!(git_out(&root, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git_out(&root, &["status", "--porcelain"]), status_before);
    assert!(!scenario.path("where.txt").exists());
    assert_eq!(git_out(&root, &["branch", "--show-current"]), "main");
}

#[ralph_tests::on_both_clients]
fn a_note_reaches_the_next_iteration_once_and_the_ending_is_notified(client: ClientVersion) {
    let scenario = fresh("fresh-say", client).file(".claude/ralph/config.json", NOTIFY_CONFIG);
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
    let mut cmd = scenario.command(&api);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut launcher = cmd.spawn().unwrap();
    let started = wait_until(LOOP_TIMEOUT, || scenario.state().is_some());
    assert!(started, "the loop never started");
    let said = scenario.ctl(&["say", "Use", "the", "blue", "approach."], &[]);
    said.assert_code(0).assert_stdout_has(&["iteration 2"]);
    exits_with(&mut launcher, 0);
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert!(
        state.get("hint").is_none(),
        "the note is dropped once given: {state:#}"
    );
    let log = scenario.ctl(&["log", "--json"], &[]).stdout;
    assert!(
        log.contains("\"say\"") && log.contains("Use the blue approach."),
        "{log}"
    );
    // The notify command read the summary of the ending.
    let summary = notified(&scenario);
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
    let scenario = fresh("fresh-killed", client).env("RALPH_RESUME_BACKOFF_SECONDS", "1");
    let killed = Flag::default();
    // Set once iteration 2's client has asked: it is the one running then.
    let arrived = Flag::default();
    let second = arrived.clone();
    let working = move |_, body: &Value| {
        if user_texts(body).join("\n").contains("iteration 2 of") {
            second.set();
            // Held while the test kills the client.
            thread::sleep(Duration::from_secs(3));
        }
        Reply::text("Still working.")
    };
    let picked_up = |_| Reply::text(format!("Picked up again. All done.\n{SIGNAL}"));
    let api = MockApi::start_in_order(killed.script(working, picked_up));
    let mut launcher = scenario.start_until(&api, 1);
    assert!(
        wait_until(LOOP_TIMEOUT, || arrived.is_set()),
        "iteration 2 never reached the API"
    );
    let state = scenario.state().unwrap();
    assert_eq!(state["iteration"], 2);
    let client_pid = state["carriers"]["client"]["pid"].as_u64();
    let client_pid = u32::try_from(client_pid.expect("the running client is recorded")).unwrap();
    killed.set();
    signal_process(client_pid, libc::SIGKILL);
    exits_with(&mut launcher, 0);
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let log = scenario.audit_log();
    let pauses = log.matches("\"event\":\"pause\"").count();
    assert_eq!(pauses, 1, "{log}");
    assert!(
        scenario.log_line("pause").contains("killed by signal 9"),
        "{log}"
    );
    assert!(log.contains("\"event\":\"resume\""), "{log}");
}

fn the_driver_s_git_runs_no_program_of_the_agent_s(client: ClientVersion) {
    // Iteration 1's agent sets an fsmonitor and a post-checkout hook in the
    // repository (both run by plain git: `status`, `worktree add`); the
    // driver then adds iteration 2's worktree, reads and removes both
    // worktrees, and the hook checks progress: none of it runs them.
    // Without the sandbox: in it, the client keeps `.git/hooks`
    // read-only ("Read-only file system", seen on 2.1.330).
    let scenario = Scenario::new("fresh-worktree-git", client)
        .fresh(&["--worktree"])
        .env("RALPH_SANDBOX", "off");
    let mark = scenario.path("ran-by-git.txt");
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
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    // The traps were set (else this test proves nothing)...
    let config = scenario.read(".git/config");
    assert!(config.contains("fsmonitor"), "{config}\n{outcome:?}");
    assert!(scenario.path(".git/hooks/post-checkout").exists());
    // ...and never sprung.
    let sprung = std::fs::read_to_string(scenario.path("ran-by-git.txt"));
    assert!(sprung.is_err(), "{sprung:?}\n{outcome:?}");
}

/// How often a run's output warns that the Stop hook's timeout may cut its
/// verify commands short.
fn hook_timeout_warnings(run: &ralph_tests::project::Run) -> usize {
    let needle = "the Stop hook's timeout";
    run.stdout.matches(needle).count() + run.stderr.matches(needle).count()
}

#[ralph_tests::on_both_clients]
fn a_fresh_run_never_warns_about_the_stop_hook_s_timeout(client: ClientVersion) {
    // A fresh init, then a check with no timeoutSeconds (60 s): in a fresh
    // loop the driver runs the check, never the Stop hook, and init's
    // registration leaves room for it anyway.
    let config = r#"{"verify": [{"name": "tests", "command": "true"}]}"#;
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text("Step one done."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let outcome = fresh("fresh-timeout", client)
        .file(".claude/ralph/config.json", config)
        .run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    assert_eq!(hook_timeout_warnings(&outcome.run), 0, "{outcome:?}");
}
