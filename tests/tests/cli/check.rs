//! `ralph-ctl check`: the loop's checks run as a claim of done would be
//! judged now, and what it would meet, printed; the loop's state and log
//! never touched. With a stand-in test runner (`sh tests.sh` over
//! `tests.txt`, see `TempProject::with_counted_tests`).

use ralph_tests::project::{Run, TempProject};
use serde_json::Value;

/// `ralph-ctl check` in `project`, with `args`.
fn check(project: &TempProject, args: &[&str]) -> Run {
    let args: Vec<&str> = std::iter::once("check")
        .chain(args.iter().copied())
        .collect();
    project.ctl(&args, &[])
}

/// `ralph-ctl start`, which must succeed: a loop with its test baseline.
fn start(project: &TempProject) {
    project.ctl_exits(&["start", "--max-iterations", "5"], 0);
}

/// The loop's state and log, byte for byte.
fn record(project: &TempProject) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let log = project.log_path();
    (
        std::fs::read(project.state_path()).ok(),
        std::fs::read(log).ok(),
    )
}

#[test]
fn without_a_loop_it_runs_the_config_files_checks_and_starts_none() {
    let project = TempProject::with_counted_tests("check-no-loop", "pass\npass\n");
    check(&project, &[]).assert_code(0).assert_stdout_has(&[
        "no loop in ",
        "the checks of .claude/ralph/config.json as they are",
        "check `tests`: sh tests.sh\n  passed in ",
        "  tests: 2 run (2 passed, 0 failed), 0 skipped; no count of the loop's start\n",
        "  pass verification: 1 command(s) passed\n",
        "result: a claim of done now would pass these gates",
    ]);
    assert_eq!(record(&project), (None, None), "no loop was started");
}

#[test]
fn a_loops_check_is_its_pin_compared_with_its_baseline_and_writes_nothing() {
    let project = TempProject::with_counted_tests("check-baseline", "pass\nfail\n");
    start(&project);
    // The agent rewrites the check: the loop's pin decides.
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "true"}]}"#,
    );
    let before = record(&project);
    assert!(before.0.is_some() && before.1.is_some());

    // Fixed: every gate passes, the counts as at the start.
    project.write("tests.txt", "pass\npass\n");
    check(&project, &[]).assert_code(0).assert_stdout_has(&[
        "the loop: running at iteration 1 of 5; its checks as pinned at its start\n",
        "check `tests`: sh tests.sh\n",
        "  tests: 2 run (2 passed, 0 failed), 0 skipped; at the loop's start: 2 run (1 passed, 1 failed), 0 skipped\n",
        "  pass test_count: `sh tests.sh` ran 2 tests (baseline 2), skipped 0 (baseline 0)\n",
        "result: a claim of done now would pass these gates",
    ]);

    // A test removed: the test-count gate fails the claim.
    project.write("tests.txt", "pass\n");
    check(&project, &[]).assert_code(25).assert_stdout_has(&[
        "  FAIL test_count: verify `sh tests.sh` ran 1 test (baseline 2)",
        "result: a claim of done now would be rejected: the test_count gate failed\n",
    ]);

    // Read only: no iteration, no stop, no log line.
    assert_eq!(record(&project), before);
    let state = project.status_json();
    assert_eq!(state["iteration"], 1);
    assert_eq!(state["history"], Value::Array(Vec::new()));
    assert_eq!(state["lastClaim"], Value::Null);
}

#[test]
fn a_failing_check_exits_25_with_its_output_and_the_gate_it_fails() {
    let project = TempProject::with_counted_tests("check-failing", "pass\nfail\n");
    start(&project);
    let before = record(&project);
    let run = check(&project, &[]);
    run.assert_code(25).assert_stdout_has(&[
        "check `tests`: sh tests.sh\n  failed (exit 1) in ",
        "  last lines of its output:\n    2:fail\n    === 1 failed, 1 passed in 0.01s ===\n",
        "  FAIL verification: `sh tests.sh` (tests) exited 1 (its output is above)\n",
        "  pass plan: ",
        "result: a claim of done now would be rejected: the verification gate failed\n",
    ]);
    assert_eq!(record(&project), before, "the check wrote to the loop");

    // The same as JSON.
    let json = check(&project, &["--json"]);
    json.assert_code(25);
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["accepted"], false);
    assert_eq!(json["loop"]["iteration"], 1);
    assert_eq!(json["verification"][0]["exitCode"], 1);
    assert_eq!(json["baseline"][0]["run"], 2);
    let failed: Vec<&str> = json["gates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g["passed"] == false)
        .map(|g| g["gate"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["verification"]);
    assert_eq!(record(&project), before, "the check wrote to the loop");
}

#[test]
fn where_the_key_is_out_of_reach_the_record_is_read_as_written_and_said() {
    // The agent's shell in the client's sandbox cannot read ralph's key:
    // the check still runs the loop's checks, and says its record was not
    // verified.
    let project = TempProject::with_counted_tests("check-no-key", "pass\npass\n");
    start(&project);
    let key = project.key_dir();
    let aside = key.with_file_name("ralph-aside");
    std::fs::rename(&key, &aside).unwrap();
    let run = check(&project, &[]);
    std::fs::rename(&aside, &key).unwrap();
    run.assert_code(0).assert_stdout_has(&[
        "the loop: running at iteration 1 of 5",
        "note: the loop's record was read without its signature checked",
        "the stop judges by the record it verifies",
        "  pass test_count: `sh tests.sh` ran 2 tests (baseline 2)",
    ]);
    // With the key, a record ralph did not write is refused as ever.
    let mut forged = project.state().unwrap();
    forged["maxIterations"] = 99.into();
    std::fs::write(project.state_path(), forged.to_string()).unwrap();
    check(&project, &[])
        .assert_code(1)
        .assert_stderr_has(&["was not written by ralph on this machine"]);
}

#[test]
fn a_config_that_cannot_be_read_is_named_with_its_fix() {
    let project = TempProject::with_counted_tests("check-bad-config", "pass\n");
    project.write(".claude/ralph/config.json", "{\"verify\": [");
    let run = check(&project, &[]);
    run.assert_code(1)
        .assert_stderr_has(&["ralph-ctl: ", ".claude/ralph/config.json"]);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}

/// What a check runs is recorded at the loop's start as the shell reads
/// it: the `&` of a redirection (`2>&1`, `>&2`) starts no command, so the
/// loop's record names `true` and `cat`, never a program `1` or `2`.
#[test]
fn a_redirected_check_is_recorded_as_the_programs_it_runs() {
    let project = TempProject::with_loop_and_config(
        "check-redirected",
        "redirected",
        5,
        r#"{"verify": [{"name": "tests", "command": "true 2>&1 | cat >&2"}]}"#,
    );
    let state = project.state().expect("the loop's state");
    let targets = state["checkResolution"]["commands"][0]["targets"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let programs: Vec<&str> = targets.iter().filter_map(|t| t["what"].as_str()).collect();
    assert_eq!(programs, ["true", "cat"], "{state}");
}

#[test]
fn in_the_agents_shell_only_the_loops_pinned_checks_run_in_its_project() {
    let project = TempProject::with_counted_tests("check-agent-shell", "pass\n");
    let root = project.root.display().to_string();
    let agent = [("RALPH_ACTIVE", "1"), ("RALPH_LOOP_PROJECT", root.as_str())];
    // No loop: a config file as it is now is not the agent's to run.
    check_in(&project, &[], &agent)
        .assert_code(3)
        .assert_stderr_has(&[
            "no loop in ",
            "runs only the checks a loop pinned at its start, never a config file as it is now",
        ]);
    start(&project);
    // A config of the agent's in a subfolder, its walls off, checked in
    // place (in the clean room `../evil-ran` would land in the room).
    project.write("sub/evil.sh", "touch ../evil-ran\n");
    project.write(
        "sub/.claude/ralph/config.json",
        r#"{"verify":[{"name":"tests","command":"sh evil.sh"}],"sandbox":"off","cleanRoom":false}"#,
    );
    for env in [&agent[..], &agent[..1], &[("RALPH_DRIVEN", "1")][..]] {
        check_in(&project, &["--project", "sub"], env)
            .assert_code(3)
            .assert_stderr_has(&["--project is refused inside a loop's Claude Code session"]);
    }
    // From the subfolder, the loop's own project is checked.
    ralph_tests::cli::Ctl::new(&project)
        .args(["check"])
        .envs(agent.iter().copied())
        .run_with(|cmd| {
            cmd.current_dir(project.path("sub"));
        })
        .assert_code(0)
        .assert_stdout_has(&["the loop: running at iteration 1 of 5; its checks as pinned"]);
    assert!(
        !project.path("evil-ran").exists(),
        "the agent's script never ran"
    );
    // The person may point it anywhere.
    check(&project, &["--project", "sub"]).assert_code(0);
    assert!(
        project.path("evil-ran").exists(),
        "the person's check ran it"
    );
}

/// `ralph-ctl check ARGS` in `project` with `env`.
fn check_in(project: &TempProject, args: &[&str], env: &[(&str, &str)]) -> Run {
    let args: Vec<&str> = std::iter::once("check")
        .chain(args.iter().copied())
        .collect();
    project.ctl(&args, env)
}
