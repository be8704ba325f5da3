//! End-to-end, the project's own check at a loop's start and what the
//! agent and the person are told of it, on the real client (2.1.330)
//! against the scripted mock: a check that cannot run (its runner only in
//! an unactivated `.venv`) stops the start of every kind of loop, naming
//! the fix, unless `--check-may-not-run`, and `doctor` runs it; tests
//! inside the package are protected; `go test` gives counts, or the person
//! is told why not; every failing unittest's header reaches the agent; the
//! advice on a refused call fits a sandboxed run.
//!
//! Run one alone with e.g.
//! `tests/run.sh -p ralph-tests --test e2e start_check::a_check_that_cannot_run_stops_the_start`.

use ralph_tests::cli::doctor_row;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, user_texts};
use ralph_tests::project::{TEST_TASK, TempProject, run_with_timeout};
use ralph_tests::scenario::{Scenario, script};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

const CLIENT: ClientVersion = ClientVersion::V2_1_330;

/// A stand-in for pytest installed only in the project's virtual
/// environment: `python -m pytest` prints a pytest summary of one test.
const PYTEST_MAIN: &str = "print('1 passed in 0.01s')\n";

/// A git project whose tests pytest runs (`pyproject.toml` says so), with a
/// `.venv` made by `python3 -m venv` that alone has pytest; ralph installed
/// by `init --yes`, which takes the venv's Python as the check, then the
/// check set by hand to `python3 -m pytest`, which cannot run.
fn project_with_pytest_in_a_venv(name: &str) -> TempProject {
    let project = TempProject::new(name);
    project.write("pyproject.toml", "[tool.pytest.ini_options]\n");
    project.write("tests/test_a.py", "def test_a():\n    assert True\n");
    project.make_venv();
    let version = run_with_timeout(
        {
            let mut cmd = project.command(project.path(".venv/bin/python"));
            cmd.args([
                "-c",
                "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')",
            ]);
            cmd
        },
        None,
        std::time::Duration::from_secs(20),
    );
    let site = format!(".venv/lib/{}/site-packages/pytest", version.stdout.trim());
    project.write(format!("{site}/__init__.py"), "");
    project.write(format!("{site}/__main__.py"), PYTEST_MAIN);
    let init = project.ctl_exits(&["init", "--yes"], 0);
    init.assert_stdout_has(&[
        "Completion check: `.venv/bin/python -m pytest` (from the project's pytest configuration; \
         pytest is installed in .venv, which is not the active Python)",
    ]);
    let by_hand = project.ctl_exits(&["init", "--verify", "python3 -m pytest"], 0);
    by_hand.assert_stdout_has(&["Completion check: `python3 -m pytest`"]);
    project.write_prompt(TEST_TASK);
    project
}

/// PATH with the project's `.venv/bin` first: the venv activated.
fn activated(project: &TempProject) -> String {
    format!(
        "{}:{}",
        project.path(".venv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// What the start says of a check whose runner lives in the unactivated venv.
const CANNOT_RUN: [&str; 4] = [
    "the check `python3 -m pytest` cannot run",
    "No module named pytest",
    "`pytest` is installed in .venv, which the check does not use: activate it (`. .venv/bin/activate`)",
    "start with --check-may-not-run",
];

#[test]
fn a_check_that_cannot_run_stops_the_start() {
    let project = project_with_pytest_in_a_venv("cannot-run");
    let api = MockApi::start(script::signal_at(0));
    // The launcher, headless: stopped before any client runs, the fix named.
    let scenario = Scenario::around(project, CLIENT);
    let refused = scenario.run(&api);
    assert_eq!(refused.run.code, Some(3), "{refused:?}");
    refused.run.assert_stderr_has(&CANNOT_RUN);
    assert_eq!(api.main_requests().len(), 0, "no client ran");
    assert!(scenario.state().is_none(), "no loop was started");
    // Every other way a loop starts stops the same way.
    std::fs::write(scenario.path("PLAN.md"), "- [ ] one\n").unwrap();
    let client_env = scenario.client_env(CLIENT, &api);
    let client_env: Vec<(&str, &str)> = client_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for args in [
        vec!["run", "--fresh", "--headless"],
        vec!["run", "--queue", "plan:PLAN.md"],
        vec!["start"],
    ] {
        let run = scenario.ctl(&args, &client_env);
        run.assert_code(3);
        run.assert_stderr_has(&CANNOT_RUN);
    }
    let plugin = scenario.ctl_exits(&["loop-start", "--session", "s-1", "Fix the tests."], 3);
    plugin.assert_stdout_has(&[
        "The Ralph loop was NOT started",
        CANNOT_RUN[0],
        CANNOT_RUN[2],
    ]);
    assert!(scenario.state().is_none(), "no loop was started");
    // doctor runs the check in the walls and says why it cannot run.
    let doctor = scenario.ctl(&["doctor", "--json"], &[]);
    let report: Value = serde_json::from_str(&doctor.stdout).unwrap();
    let check = doctor_row(&report, "check");
    assert_eq!(check["verdict"], "fail", "{report:#}");
    assert_eq!(check["run"]["outcome"], "cannot-run", "{check:#}");
    assert!(check["run"]["durationMs"].is_u64(), "{check:#}");
    assert!(
        check["fix"]
            .as_str()
            .unwrap_or_default()
            .contains(". .venv/bin/activate"),
        "{check:#}"
    );
    // /ralph-loop's line takes the flag too, and says so.
    let started = scenario.ctl(
        &[
            "loop-start",
            "--session",
            "s-2",
            "Make the tests run. --check-may-not-run",
        ],
        &[],
    );
    started.assert_code(0);
    started.assert_stderr_has(&["starting anyway (--check-may-not-run)"]);
    scenario.ctl_exits(&["cancel"], 0);
    // With the flag the launcher starts the loop, and says so: its claim is
    // rejected, the check still cannot run.
    let anyway = scenario.run_with(
        &api,
        &["--headless", "--check-may-not-run", "--max-iterations", "1"],
    );
    anyway.ended(10, "max_iterations");
    anyway
        .run
        .assert_stderr_has(&["starting anyway (--check-may-not-run)"]);
    assert!(!api.main_requests().is_empty(), "the client ran");
    // Activated, the check runs: doctor passes it, and the loop completes.
    let path = activated(&scenario);
    let doctor = scenario.ctl(&["doctor", "--json"], &[("PATH", &path)]);
    let report: Value = serde_json::from_str(&doctor.stdout).unwrap();
    let check = doctor_row(&report, "check");
    assert_eq!(check["run"]["outcome"], "passed", "{report:#}");
    assert_eq!(check["run"]["counts"]["passed"], 1, "{check:#}");
    let mut launcher = scenario.command(&api);
    launcher.env("PATH", &path);
    let done = run_with_timeout(launcher, None, LOOP_TIMEOUT);
    done.assert_code(0);
    done.assert_stderr_has(&["test baseline of `python3 -m pytest`: 1 run (1 passed"]);
    assert_eq!(scenario.status_json()["status"], "complete");
}

/// A package whose tests live inside it (`toolz/tests/`, as toolz keeps
/// them), its one test failing: `inc` adds 2.
fn package_with_tests_inside(name: &str) -> TempProject {
    let project = TempProject::new(name);
    project.write("toolz/__init__.py", "");
    project.write("toolz/core.py", "def inc(x):\n    return x + 2\n");
    project.write("toolz/tests/__init__.py", "");
    project.write(
        "toolz/tests/test_core.py",
        "import unittest\nfrom toolz.core import inc\n\n\nclass T(unittest.TestCase):\n    def test_inc(self):\n        self.assertEqual(inc(1), 2)\n",
    );
    project.commit_all("a package");
    project
}

#[test]
fn tests_inside_the_package_are_protected() {
    let project = package_with_tests_inside("inside");
    let init = project.ctl(
        &[
            "init",
            "--verify",
            "python3 -m unittest discover -s toolz/tests -t .",
        ],
        &[],
    );
    init.assert_code(0);
    init.assert_stdout_has(&["Protected: toolz/tests/"]);
    project.write_prompt("# Task\n\nMake the test of toolz pass.\n");
    // The agent edits the test to pass and claims; rejected, it fixes the code.
    let api = MockApi::start(|turn, _| match turn {
        0 => Reply::bash("sed -i 's/inc(1), 2/inc(1), 3/' toolz/tests/test_core.py"),
        1 | 4 => Reply::text(format!("The test passes.\n{SIGNAL}")),
        2 => Reply::bash("git checkout toolz/tests/test_core.py"),
        _ => Reply::bash("sed -i 's/x + 2/x + 1/' toolz/core.py"),
    });
    let test_before = project.read("toolz/tests/test_core.py");
    let scenario = Scenario::around(project, CLIENT).args(&["--headless", "--no-sandbox"]);
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    // The claim on the edited test was not accepted; the test is as it was.
    assert_eq!(outcome.decisions()[0], (1, "block"), "{outcome:?}");
    assert_eq!(
        scenario.read("toolz/tests/test_core.py"),
        test_before,
        "{outcome:?}"
    );
}

/// Real output of `go test` (go 1.19, Debian's golang-go) on a module with
/// one passing and one skipped test: plain, and with `-v`.
const GO_TEST_PLAIN: &str = "ok  \texample.com/x\t0.010s\n";
const GO_TEST_VERBOSE: &str = "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestLater\n    x_test.go:11: later\n--- SKIP: TestLater (0.00s)\nPASS\nok  \texample.com/x\t0.012s\n";

/// A Go module, and on PATH a `go` that prints what the real one printed
/// for its tests (captured once; the test machine has no Go toolchain).
fn go_module(name: &str) -> (TempProject, String) {
    let project = TempProject::new(name);
    project.write("go.mod", "module example.com/x\n\ngo 1.19\n");
    project.write(
        "x.go",
        "package x\n\nfunc Add(a, b int) int { return a + b }\n",
    );
    project.write("x_test.go", "package x\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 2) != 4 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n\nfunc TestLater(t *testing.T) { t.Skip(\"later\") }\n");
    let bin = project.tmp.join("go-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let go = bin.join("go");
    std::fs::write(
        &go,
        format!(
            "#!/bin/sh\ncase \" $* \" in\n  *\" -v \"*) printf '%s' '{GO_TEST_VERBOSE}' ;;\n  *) printf '%s' '{GO_TEST_PLAIN}' ;;\nesac\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&go, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (project, path)
}

#[test]
fn go_test_gives_counts_or_says_why_not() {
    // init chooses `go test -v`, whose counts make the baseline.
    let (project, path) = go_module("go-counts");
    let init = project.ctl(&["init", "--yes"], &[("PATH", &path)]);
    init.assert_code(0);
    init.assert_stdout_has(&["Completion check: `go test -v ./...`"]);
    project.write_prompt(TEST_TASK);
    let start = project.ctl(&["start"], &[("PATH", &path)]);
    start.assert_code(0);
    start.assert_stderr_has(&[
        "test baseline of `go test -v ./...`: 1 run (1 passed, 0 failed), 1 skipped",
    ]);
    // A plain `go test ./...` a person wrote: told once why there are no counts.
    let (project, path) = go_module("go-plain");
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "go test ./..."}]}"#,
    );
    project.ctl(&["init"], &[("PATH", &path)]).assert_code(0);
    project.write_prompt(TEST_TASK);
    let api = MockApi::start(script::signal_at(0));
    let scenario = Scenario::around(project, CLIENT);
    let mut launcher = scenario.command(&api);
    launcher.env("PATH", &path);
    let run = run_with_timeout(launcher, None, LOOP_TIMEOUT);
    run.assert_code(0);
    let why =
        "`go test ./...` gave no test counts: `go test` without -v or -json names no passing test";
    run.assert_stderr_has(&[why, "`go test -v ./...`"]);
    assert_eq!(
        run.stderr.matches(why).count(),
        1,
        "told once: {}",
        run.stderr
    );
}

/// A unittest whose failure report is longer than the output's tail: the
/// compared texts differ on every one of 40 lines.
const LONG_FAILURE: &str = "import unittest\nfrom table import table\n\n\nclass T(unittest.TestCase):\n    maxDiff = None\n\n    def test_default(self):\n        self.assertEqual(table(), '\\n'.join(str(i) for i in range(1, 41)))\n";

#[test]
fn every_failing_unittest_header_reaches_the_agent() {
    let project = TempProject::new("headers");
    project.write(
        "table.py",
        "def table():\n    return '\\n'.join(str(i) for i in range(40))\n",
    );
    project.write("test_table.py", LONG_FAILURE);
    project.ctl_exits(&["init", "--yes"], 0);
    project.write_prompt(TEST_TASK);
    let api = MockApi::start(|turn, _| match turn {
        0 | 2 => Reply::text(format!("Done.\n{SIGNAL}")),
        _ => Reply::bash("sed -i 's/range(40)/range(1, 41)/' table.py"),
    });
    let outcome = Scenario::around(project, CLIENT).run(&api);
    outcome.ended(0, "complete");
    // The rejection the agent was given names the failing test, which the
    // last lines of the output alone had lost.
    let told = user_texts(&api.main_requests()[1].body).join("\n");
    assert!(
        told.contains("FAIL: test_default (test_table.T"),
        "the header reached the agent: {told}"
    );
}

#[test]
fn the_advice_on_a_refused_call_fits_a_sandboxed_run() {
    let project = TempProject::new("sandboxed-advice");
    project.write("test_math.py", "import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1 + 1, 2)\n");
    project.commit_all("a test");
    project.ctl_exits(&["init", "--yes"], 0);
    project.write_prompt(TEST_TASK);
    // A compound command the sandboxed client still asks approval for,
    // every iteration: the breaker opens on the refusals.
    let api = MockApi::start(script::call_then_say(
        Reply::bash(
            "if [ \"ops_sub\" = ops_neg ] && [ ! -e ops ]; then git status --short > /dev/null; fi; touch /etc/ralph-probe",
        ),
        "Still checking.",
    ));
    let outcome = Scenario::around(project, CLIENT)
        .exact_args(&["--headless", "--sandbox"])
        .run(&api);
    outcome.run.assert_stderr_has(&["sandbox: on"]);
    let because = outcome.state["endedBecause"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(because.contains("for lack of permission"), "{outcome:?}");
    // Neither the sandbox the run already has, nor a rule no one could paste.
    assert!(!because.contains("run with the sandbox"), "{because}");
    assert!(!because.contains("\"permissions\""), "{because}");
    assert!(because.contains("the client's sandbox is on"), "{because}");
}
