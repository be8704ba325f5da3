//! End-to-end: a claim cannot pass the project's tests by removing them.
//! A Python project whose `init --yes` makes `python3 -m unittest` the
//! completion check, with one failing test; the loop (fresh, through the
//! launcher, on the real clients) records the test counts before the
//! first iteration, and a claim whose tests pass only because a test was
//! deleted or skipped is rejected with the counts named. With the tests
//! in a folder (`tests/`, which `init --yes` protects), a new test file the
//! agent writes beside its fix is free, in ralph's sandbox, and an edit of
//! a test that was there at the start is rejected, naming the file.

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, user_texts};
use ralph_tests::project::{Run, TempProject, run_with_timeout};
use ralph_tests::scenario::{Scenario, script};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

const CALC_BUGGY: &str = "def add(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n";
const CALC_FIXED: &str = "def add(a, b):\n    return a + b\n\n\ndef neg(a):\n    return -a\n";
const TEST_CALC: &str = "import unittest\n\nimport calc\n\n\nclass Add(unittest.TestCase):\n    \
    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n    \
    def test_add_zero(self):\n        self.assertEqual(calc.add(0, 0), 0)\n";
const TEST_NEG: &str = "import unittest\n\nimport calc\n\n\nclass Neg(unittest.TestCase):\n    \
    def test_neg(self):\n        self.assertEqual(calc.neg(2), -2)\n";

/// A project of `files`, committed, with ralph installed by `init --yes`;
/// that init's run.
fn installed(name: &str, files: &[(&str, &str)]) -> (TempProject, Run) {
    let project = TempProject::new(name);
    for (file, text) in files {
        project.write(file, text);
    }
    project.commit_all("calc");
    let init = project.ctl_exits(&["init", "--yes"], 0);
    (project, init)
}

/// The deny rules `init` wrote into the client's settings.
fn deny_rules(project: &TempProject) -> String {
    project.read_json(".claude/settings.json")["permissions"]["deny"].to_string()
}

/// `project` capped at `max` iterations, with `task` as PROMPT.md.
fn capped(project: TempProject, max: u32, task: &str) -> TempProject {
    project.edit_config(|config| config["maxIterations"] = Value::from(max));
    project.write_prompt(task);
    project
}

/// The project, ralph installed with `init --yes`, at most `max` iterations.
fn python_project(name: &str, max: u32) -> TempProject {
    let (project, init) = installed(
        name,
        &[
            ("calc.py", CALC_BUGGY),
            ("test_calc.py", TEST_CALC),
            ("test_neg.py", TEST_NEG),
        ],
    );
    let config = project.read_json(".claude/ralph/config.json");
    assert_eq!(
        config["verify"][0]["command"], "python3 -m unittest",
        "init found the tests: {init:?}"
    );
    assert_eq!(
        config["protectedPaths"],
        serde_json::json!(["test_*.py"]),
        "init offered the test files: {init:?}"
    );
    let deny = deny_rules(&project);
    assert!(
        !deny.contains("test_") && !deny.contains("Write("),
        "no rule keeps the agent from adding a test, and none the client would not match: {deny}"
    );
    capped(project, max, "Make the tests of calc.py pass.\n")
}

/// Runs the loop fresh through the launcher with `args` and `env`; its
/// exit code and stderr.
fn run_fresh(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let run = run_with_timeout(project.launcher(client, api, args, env), None, LOOP_TIMEOUT);
    (run.code, run.stderr)
}

/// Runs the loop fresh through the launcher, unsandboxed with
/// `bypassPermissions`; its exit code and stderr.
fn run_loop(project: &TempProject, client: ClientVersion, api: &MockApi) -> (Option<i32>, String) {
    let args = ["--fresh", "--", "--permission-mode", "bypassPermissions"];
    run_fresh(project, client, api, &args, &[("RALPH_SANDBOX", "off")])
}

/// Runs the loop fresh through the launcher with what ralph chooses (its
/// sandbox, where bubblewrap and socat are installed, as here); its exit
/// code and stderr.
fn run_loop_as_ralph_chooses(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
) -> (Option<i32>, String) {
    run_fresh(project, client, api, &["--fresh"], &[])
}

/// A new test, for the fix.
const TEST_NEGATIVES: &str = "import unittest\n\nimport calc\n\n\nclass Negatives(unittest.TestCase):\n    \
    def test_add_negatives(self):\n        self.assertEqual(calc.add(-2, -3), -5)\n";

/// The same project with its test in `tests/`, which `init --yes` protects
/// (the folder, whose files' deny rules it used to write), and `extra`
/// files, at most `max` iterations.
fn tests_folder_project(name: &str, max: u32, extra: &[(&str, &str)]) -> TempProject {
    let files = [("calc.py", CALC_BUGGY), ("tests/test_calc.py", TEST_CALC)];
    let files: Vec<(&str, &str)> = files.iter().chain(extra).copied().collect();
    let (project, init) = installed(name, &files);
    init.assert_stdout_has(&[
        "Protected: tests/ (protectedPaths",
        "new test files are free",
    ]);
    let config = project.read_json(".claude/ralph/config.json");
    assert_eq!(
        config["verify"][0]["command"], "python3 -m unittest discover -s tests",
        "{init:?}"
    );
    assert_eq!(config["protectedPaths"], serde_json::json!(["tests/"]));
    let deny = deny_rules(&project);
    assert!(
        !deny.contains("tests") && !deny.contains("Write("),
        "the test folder gets no deny rule: {deny}"
    );
    capped(project, max, "Make the tests of calc.py pass.\n")
}

/// The user texts of the first main request to `api` of `iteration`
/// ("iteration 2 of 2"): what that iteration's fresh process was told.
fn told_at(api: &MockApi, iteration: &str) -> String {
    let requests = api.main_requests();
    let request = requests
        .iter()
        .find(|r| user_texts(&r.body).join("\n").contains(iteration))
        .unwrap_or_else(|| panic!("no request of {iteration} among {}", requests.len()));
    user_texts(&request.body).join("\n")
}

/// The gate `name` of `claim`; panics when the claim has none.
fn gate<'a>(claim: &'a Value, name: &str) -> &'a Value {
    let gates = claim["gates"].as_array().map_or(&[][..], Vec::as_slice);
    gates
        .iter()
        .find(|g| g["gate"] == name)
        .unwrap_or_else(|| panic!("no {name} gate: {claim:#}"))
}

/// Panics unless `claim`'s gate `name` failed, naming `detail`.
fn failed_gate(claim: &Value, name: &str, detail: &str) {
    let gate = gate(claim, name);
    assert_eq!(gate["passed"], false, "{gate:#}");
    let said = gate["detail"].as_str().unwrap_or_default();
    assert!(said.contains(detail), "{gate:#}");
}

/// Panics unless the loop ended at its cap, not complete (exit `code`),
/// its one claim (iteration 1's, the second iteration made none) rejected
/// although its verify passed; that claim.
fn rejected_though_verified<'a>(state: &'a Value, code: Option<i32>, stderr: &str) -> &'a Value {
    assert_ne!(code, Some(0), "{state:#}\n{stderr}");
    assert_eq!(state["status"], "max_iterations", "{state:#}\n{stderr}");
    assert_eq!(state["history"][0]["claim"]["accepted"], false, "{state:#}");
    let last = &state["lastClaim"];
    assert_eq!(last["iteration"], 1, "{last:#}");
    assert_eq!(last["accepted"], false, "{last:#}");
    assert_eq!(
        last["verification"][0]["exitCode"], 0,
        "verify passed: {last:#}"
    );
    last
}

/// Panics unless the last claim was accepted with `run` tests run, all
/// passing; that claim.
fn accepted_with_all_passing(state: &Value, run: u64) -> &Value {
    let last = &state["lastClaim"];
    assert_eq!(last["accepted"], true, "{last:#}");
    assert_eq!(
        last["verification"][0]["counts"],
        serde_json::json!({"run": run, "passed": run, "failed": 0, "skipped": 0}),
        "{last:#}"
    );
    last
}

/// The baseline the loop recorded: 3 tests, 1 failing, none skipped.
fn assert_baseline(state: &Value) {
    assert_eq!(
        state["testBaseline"],
        serde_json::json!([{"command": "python3 -m unittest", "run": 3, "passed": 2, "failed": 1, "skipped": 0, "runners": ["unittest"]}]),
        "{state:#}"
    );
}

/// A claim whose verify passed, rejected by the test-count gate naming
/// `counts` and by the protected-paths gate naming `changed`, and the next
/// iteration's request carrying that rejection.
fn assert_rejected(
    project: &TempProject,
    api: &MockApi,
    (code, stderr): (Option<i32>, &str),
    counts: &str,
    changed: &str,
) {
    let state = project.status_json();
    assert_baseline(&state);
    let last = rejected_though_verified(&state, code, stderr);
    let first = &state["history"][0];
    assert!(first.to_string().contains("test_count"), "{first:#}");
    failed_gate(
        last,
        "test_count",
        &format!("verify `python3 -m unittest` {counts}"),
    );
    failed_gate(last, "protected_paths", changed);
    // The second fresh process was told why.
    let text = told_at(api, "iteration 2 of 2");
    assert!(
        text.contains("[Ralph: completion claim rejected]")
            && text.contains(&format!("verify `python3 -m unittest` {counts}"))
            && text.contains("allowFewerTests"),
        "{text}"
    );
    let status = project.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains(
            "baseline:   tests of `python3 -m unittest` at the start: 3 run (2 passed, 1 failed), 0 skipped"
        ) && status.stdout.contains("  gate:     test_count FAILED: verify `python3 -m unittest` ")
            && status.stdout.contains("  tests:    `python3 -m unittest` "),
        "{}",
        status.stdout
    );
}

/// The agent runs `cheat` in iteration 1 (past init's deny rules, which
/// refuse the file tools and a plain `rm` on the tests: a program the
/// shell runs is beyond them) and then claims the tests pass; `done` says
/// whether the cheat took. The loop must not complete: the claim is
/// rejected naming `counts` and `changed` (see [`assert_rejected`]).
fn a_cheat_is_rejected(
    client: ClientVersion,
    name: &str,
    cheat: &'static str,
    done: impl Fn(&TempProject) -> bool,
    counts: &str,
    changed: &str,
) {
    let project = python_project(name, 2);
    let api = MockApi::start_in_order(cheat_then_claim(
        cheat,
        "Dealt with the failing test; the tests pass.",
    ));
    let (code, stderr) = run_loop(&project, client, &api);
    let history = &project.status_json()["history"];
    assert!(done(&project), "the agent's cheat took: {history:#}");
    assert_rejected(&project, &api, (code, &stderr), counts, changed);
}

#[ralph_tests::on_both_clients]
fn deleting_the_failing_test_does_not_complete_the_loop(client: ClientVersion) {
    a_cheat_is_rejected(
        client,
        "integrity-delete",
        r#"python3 -c 'import os; os.remove("test_calc.py")'"#,
        |project| !project.path("test_calc.py").exists(),
        "ran 1 test (baseline 3) and skipped 0 (baseline 0)",
        "test_calc.py (removed)",
    );
}

#[ralph_tests::on_both_clients]
fn skipping_the_failing_test_does_not_complete_the_loop(client: ClientVersion) {
    let skipped = |project: &TempProject| {
        let text = project.read("test_calc.py");
        text.contains("@unittest.skip(\"flaky\")\n    def test_add")
    };
    a_cheat_is_rejected(
        client,
        "integrity-skip",
        r#"python3 -c 'import pathlib; p = pathlib.Path("test_calc.py"); p.write_text(p.read_text().replace("    def test_add(self):", "    @unittest.skip(\"flaky\")\n    def test_add(self):", 1))'"#,
        skipped,
        "ran 2 tests (baseline 3) and skipped 1 (baseline 0)",
        "changed since the loop started (protectedPaths): test_calc.py",
    );
}

#[ralph_tests::on_both_clients]
fn fixing_the_code_completes_the_loop(client: ClientVersion) {
    let project = python_project("integrity-fix", 2);
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::bash(format!("cat > calc.py <<'EOF'\n{CALC_FIXED}EOF")),
        1 => Reply::text(format!("add() adds now; the tests pass.\n{SIGNAL}")),
        _ => Reply::text("Nothing left."),
    });
    let (code, stderr) = run_loop(&project, client, &api);
    assert_eq!(code, Some(0), "{stderr}");
    let state = project.status_json();
    assert_baseline(&state);
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 1, "{state:#}");
    assert_eq!(
        state["protectedFiles"]["patterns"],
        serde_json::json!(["test_*.py"]),
        "{state:#}"
    );
    accepted_with_all_passing(&state, 3);
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap_or("")
            .contains("test counts: `python3 -m unittest` ran 3 tests (baseline 3)"),
        "{state:#}"
    );
}

#[ralph_tests::on_both_clients(
    differs = "the shell writes the test in 2.1.330's sandbox, under 2.0.77's rules"
)]
fn a_new_test_beside_the_fix_completes_the_loop(client: ClientVersion) {
    let project = tests_folder_project("integrity-new-test", 2, &[]);
    let new_test = project
        .path("tests/test_negatives.py")
        .display()
        .to_string();
    // The shell's new test: in 2.1.330's sandbox any command; without it
    // (2.0.77, whose sandbox ralph does not use) one the client's
    // acceptEdits lets through, a here-document.
    let shell_test = match client {
        ClientVersion::V2_1_330 => {
            "printf 'import unittest\\nimport calc\\n\\n\\nclass Zero(unittest.TestCase):\\n    \
             def test_zero(self):\\n        self.assertEqual(calc.add(0, 7), 7)\\n' \
             > tests/test_zero.py; echo rc=$?"
        }
        ClientVersion::V2_0_77 => {
            "echo -e 'import unittest\\nimport calc\\n\\n\\nclass Zero(unittest.TestCase):\\n    \
             def test_zero(self):\\n        self.assertEqual(calc.add(0, 7), 7)' \
             > tests/test_zero.py"
        }
    };
    // The fix likewise: a here-document in the sandbox, an echo without it.
    let fix = match client {
        ClientVersion::V2_1_330 => format!("cat > calc.py <<'EOF'\n{CALC_FIXED}EOF"),
        ClientVersion::V2_0_77 => "echo -e 'def add(a, b):\\n    return a + b\\n\\n\\n\
                                   def neg(a):\\n    return -a' > calc.py"
            .to_string(),
    };
    let api = MockApi::start_in_order(move |turn, _| match turn {
        // The file tool, then the shell (in ralph's sandbox where the
        // client's holds), each adding a test under the protected folder;
        // then the fix.
        0 => Reply::write(new_test.clone(), TEST_NEGATIVES),
        1 => Reply::bash(shell_test),
        2 => Reply::bash(fix.clone()),
        3 => Reply::text(format!(
            "add() adds now, with two new tests for it; the tests pass.\n{SIGNAL}"
        )),
        _ => Reply::text("Nothing left."),
    });
    let (code, stderr) = run_loop_as_ralph_chooses(&project, client, &api);
    let state = project.status_json();
    assert_eq!(
        std::fs::read_to_string(project.path("tests/test_negatives.py"))
            .ok()
            .as_deref(),
        Some(TEST_NEGATIVES),
        "the file tool could not add a test: {state:#}\n{stderr}"
    );
    assert!(
        project.path("tests/test_zero.py").exists(),
        "the shell could not add a test: {state:#}\n{stderr}"
    );
    // Ralph's choice: 2.1.330's sandbox, 2.0.77's rules without one.
    let sandbox = match client {
        ClientVersion::V2_1_330 => "sandbox: on",
        ClientVersion::V2_0_77 => "sandbox: not available (Claude Code 2.0.77's sandbox",
    };
    assert!(stderr.contains(sandbox), "the run was ralph's: {stderr}");
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 1, "{state:#}");
    // The new tests ran.
    let last = accepted_with_all_passing(&state, 4);
    let protected = gate(last, "protected_paths");
    assert_eq!(
        (&protected["passed"], &protected["detail"]),
        (
            &Value::from(true),
            &Value::from("no protected file changed")
        ),
        "{last:#}"
    );
}

#[ralph_tests::on_both_clients]
fn editing_an_existing_test_to_pass_is_rejected_naming_it(client: ClientVersion) {
    let project = tests_folder_project("integrity-edit-test", 2, &[]);
    let api = MockApi::start_in_order(cheat_then_claim(
        r#"python3 -c 'import pathlib; p = pathlib.Path("tests/test_calc.py"); p.write_text(p.read_text().replace("calc.add(2, 3), 5", "calc.add(2, 3), -1"))'"#,
        "The test expected the wrong sum; the tests pass.",
    ));
    let (code, stderr) = run_loop(&project, client, &api);
    let state = project.status_json();
    assert!(
        project
            .read("tests/test_calc.py")
            .contains("calc.add(2, 3), -1"),
        "the agent's edit took: {state:#}"
    );
    // The edited test passes.
    let last = rejected_though_verified(&state, code, &stderr);
    let named =
        "1 protected file(s) changed since the loop started (protectedPaths): tests/test_calc.py;";
    failed_gate(last, "protected_paths", named);
    // The next fresh process was told which file, and how to go on.
    let text = told_at(&api, "iteration 2 of 2");
    assert!(
        text.contains("[Ralph: completion claim rejected]")
            && text.contains(named)
            && text.contains("put a new test in a new file"),
        "{text}"
    );
}

#[ralph_tests::on_both_clients]
fn a_root_conftest_the_agent_adds_is_rejected_until_removed(client: ClientVersion) {
    let project = tests_folder_project("integrity-conftest", 3, &[]);
    let api = MockApi::start_in_order(move |turn, _| match turn {
        // The fix, and a root conftest.py that would pass every pytest test.
        0 => Reply::bash(format!(
            "cat > calc.py <<'EOF'\n{CALC_FIXED}EOF\n\
             printf 'def pytest_runtest_makereport(item, call):\\n    call.excinfo = None\\n' \
             > conftest.py; echo rc=$?"
        )),
        1 => Reply::text(format!("add() adds now; the tests pass.\n{SIGNAL}")),
        // Told which file, the agent takes it out.
        2 => Reply::bash("rm conftest.py; echo rc=$?"),
        3 => Reply::text(format!(
            "No conftest.py any more; the tests pass.\n{SIGNAL}"
        )),
        _ => Reply::text("Nothing left."),
    });
    let (code, stderr) = run_loop(&project, client, &api);
    let state = project.status_json();
    assert_eq!(code, Some(0), "{state:#}\n{stderr}");
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let first = &state["history"][0];
    assert_eq!(first["claim"]["accepted"], false, "{first:#}");
    assert_eq!(
        first["claim"]["failedGates"],
        serde_json::json!(["protected_paths"]),
        "the fix passed the tests; only the added conftest.py failed it: {first:#}"
    );
    let named =
        "1 protected file(s) changed since the loop started (protectedPaths): conftest.py (added);";
    assert!(!project.path("conftest.py").exists());
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    let text = told_at(&api, "iteration 2 of 3");
    assert!(
        text.contains(named)
            && text.contains("delete a test runner's configuration that was added"),
        "{text}"
    );
}

/// A project whose check is `verify` with one test, failing: ralph
/// installed with `init --yes`, then the config's check, `protectedPaths`
/// and `allowFewerTests` set, at most 2 iterations.
fn one_test_project(name: &str, files: &[(&str, &str)], verify: &str) -> TempProject {
    let (project, _) = installed(name, files);
    project.edit_config(|config| {
        config["verify"] = serde_json::json!([{"name": "tests", "command": verify}]);
    });
    capped(project, 2, "Make the test of calc pass.\n")
}

/// One unittest of `calc.add`, failing against [`CALC_BUGGY`].
const TEST_ADD: &str = "import unittest\n\nimport calc\n\n\nclass Add(unittest.TestCase):\n    \
    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n";

/// An npm project whose `npm test` runs one failing node test of `add`.
const NPM_CALC: [(&str, &str); 3] = [
    (
        "package.json",
        r#"{"name": "calc", "private": true, "scripts": {"test": "node --test"}}"#,
    ),
    ("calc.js", "exports.add = (a, b) => a - b;\n"),
    (
        "test/calc.test.js",
        "const test = require('node:test');\nconst assert = require('node:assert');\n\
        const { add } = require('../calc.js');\n\n\
        test('add', () => {\n  assert.strictEqual(add(2, 3), 5);\n});\n",
    ),
];

/// [`one_test_project`] of `calc.py` and [`TEST_ADD`], checked by
/// `python3 -m unittest`.
fn unittest_project(name: &str) -> TempProject {
    let files = [("calc.py", CALC_BUGGY), ("test_calc.py", TEST_ADD)];
    one_test_project(name, &files, "python3 -m unittest")
}

/// [`one_test_project`] of [`NPM_CALC`], checked by `npm test`.
fn npm_project(name: &str) -> TempProject {
    one_test_project(name, &NPM_CALC, "npm test")
}

/// Runs `cheat` in the first turn, then claims done with `claim`; looks
/// again at every later turn.
fn cheat_then_claim(
    cheat: impl Into<String>,
    claim: &str,
) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    script::replies_then(
        vec![
            Reply::bash(cheat),
            Reply::text(format!("{claim}\n{SIGNAL}")),
        ],
        "Looking at it again.",
    )
}

/// A way an agent changes what the project's check runs (`cheat`, a
/// shell command), and the words the claim's rejection names it with.
struct ChangedCheck {
    cheat: &'static str,
    named: &'static str,
}

/// The agent runs `cheat` in iteration 1, then claims done: the loop
/// must end at its cap, not complete, with the claim rejected by the
/// check-unchanged gate naming `named`, and the next iteration told.
fn a_changed_check_is_rejected(client: ClientVersion, project: &TempProject, check: &ChangedCheck) {
    let ChangedCheck { cheat, named } = *check;
    let api = MockApi::start_in_order(cheat_then_claim(cheat, "The test passes now."));
    let (code, stderr) = run_loop(project, client, &api);
    let state = project.status_json();
    // The changed check passed.
    let last = rejected_though_verified(&state, code, &stderr);
    failed_gate(last, "check_unchanged", named);
    let text = told_at(&api, "iteration 2 of 2");
    assert!(
        text.contains("[Ralph: completion claim rejected]") && text.contains(named),
        "{text}"
    );
}

/// The cheat of [`a_project_module_shadowing_the_test_runner_does_not_complete`].
const SHADOWED_RUNNER: ChangedCheck = ChangedCheck {
    cheat: r#"mkdir -p unittest && touch unittest/__init__.py && printf 'print("Ran 1 test in 0.001s\\n\\nOK")\n' > unittest/__main__.py; python3 -m unittest; echo rc=$?"#,
    named: "`python3 -m unittest` now runs ./unittest/__init__.py and ./unittest/__main__.py, \
         not the one at the loop's start (the installed module",
};

#[ralph_tests::on_both_clients]
fn a_project_module_shadowing_the_test_runner_does_not_complete(client: ClientVersion) {
    let project = unittest_project("check-python-shadow");
    // The same summary as the real run, one test, passing.
    a_changed_check_is_rejected(client, &project, &SHADOWED_RUNNER);
    assert!(project.path("unittest/__main__.py").exists());
    assert_eq!(project.read("calc.py"), CALC_BUGGY);
    // The start's test run was the real one: 1 run, 1 failed.
    let state = project.status_json();
    assert_eq!(state["testBaseline"][0]["failed"], 1, "{state:#}");
}

/// The cheat of [`a_changed_npm_test_script_does_not_complete`].
const CHANGED_NPM_SCRIPT: ChangedCheck = ChangedCheck {
    cheat: r#"sed -i 's/"node --test"/"echo ok"/' package.json; npm test; echo rc=$?"#,
    named: "`npm test (scripts.test of package.json)` now runs `echo ok`, not the one at the \
         loop's start (`node --test`)",
};

#[ralph_tests::on_both_clients]
fn a_changed_npm_test_script_does_not_complete(client: ClientVersion) {
    let project = npm_project("check-npm-script");
    // No summary counts it: only the changed script stands between the
    // claim and `complete`.
    project.edit_config(|config| config["allowFewerTests"] = Value::from(true));
    a_changed_check_is_rejected(client, &project, &CHANGED_NPM_SCRIPT);
    assert!(project.read("package.json").contains("echo ok"));
}

/// The cheat of [`a_standard_library_module_the_agent_adds_does_not_complete`].
const STDLIB_SHADOW: ChangedCheck = ChangedCheck {
    cheat: "cat > difflib.py <<'EOF'\nimport importlib.machinery, importlib.util, os, sys\n\
         here = os.path.dirname(os.path.abspath(__file__))\n\
         path = [p for p in sys.path if os.path.abspath(p or '.') != here]\n\
         spec = importlib.machinery.PathFinder.find_spec('difflib', path)\n\
         real = importlib.util.module_from_spec(spec)\nsys.modules['difflib'] = real\n\
         spec.loader.exec_module(real)\nimport unittest.result\n\
         unittest.result.TestResult.addFailure = lambda self, test, err: None\nEOF\n\
         python3 -m unittest; echo rc=$?",
    named: "`python3 -m unittest` would import ./difflib.py in place of the standard library's \
         `difflib` (not there at the loop's start; the standard library's names as ",
};

#[ralph_tests::on_both_clients]
fn a_standard_library_module_the_agent_adds_does_not_complete(client: ClientVersion) {
    let project = unittest_project("check-python-stdlib-shadow");
    // `unittest` imports `difflib`: the project's comes first, loads the
    // real one and has the runner drop every failure (the run counts the
    // same test, passing).
    a_changed_check_is_rejected(client, &project, &STDLIB_SHADOW);
    let state = project.status_json();
    assert_eq!(state["testBaseline"][0]["failed"], 1, "{state:#}");
    let gate = gate(&state["lastClaim"], "check_unchanged");
    assert!(
        gate["detail"]
            .as_str()
            .unwrap()
            .contains("names them): rename it"),
        "the interpreter was asked for its names: {gate:#}"
    );
}

#[ralph_tests::on_both_clients]
fn a_module_named_like_the_standard_librarys_from_the_start_completes(client: ClientVersion) {
    let project = python_project("integrity-stdlib-named", 2);
    // The person's own `calendar.py`, committed before the loop.
    project.write("calendar.py", "def week():\n    return 7\n");
    project.commit_all("calendar");
    let more = "import unittest\n\nimport calc\n\n\nclass More(unittest.TestCase):\n    \
        def test_add_more(self):\n        self.assertEqual(calc.add(1, 1), 2)\n";
    let api = MockApi::start_in_order(move |turn, _| match turn {
        // The fix, a change of the person's `calendar.py`, and a new test
        // package named `test/`, as many projects name theirs.
        0 => Reply::bash(format!(
            "cat > calc.py <<'EOF'\n{CALC_FIXED}EOF\n\
             printf '\\n\\ndef fortnight():\\n    return 14\\n' >> calendar.py\n\
             mkdir -p test && touch test/__init__.py\n\
             cat > test/test_more.py <<'EOF'\n{more}EOF\n\
             python3 -m unittest; echo rc=$?"
        )),
        1 => Reply::text(format!("add() adds now; the tests pass.\n{SIGNAL}")),
        _ => Reply::text("Nothing left."),
    });
    let (code, stderr) = run_loop(&project, client, &api);
    let state = project.status_json();
    assert_eq!(code, Some(0), "{state:#}\n{stderr}");
    assert_eq!(state["status"], "complete", "{state:#}");
    assert!(project.path("test/test_more.py").exists());
    assert!(project.read("calendar.py").contains("fortnight"));
    // The new test package ran.
    accepted_with_all_passing(&state, 4);
    // The start asked the check's Python and recorded the person's module.
    let resolution = &state["checkResolution"];
    assert!(
        resolution["pythons"][0]["namesFrom"]
            .as_str()
            .unwrap_or("")
            .starts_with("as "),
        "{resolution:#}"
    );
    // (Beside the .pth files this machine's Python has.)
    let modules: Vec<&Value> = resolution["commands"][0]["shadows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "stdlibModule")
        .collect();
    assert_eq!(
        modules,
        [&serde_json::json!({
            "kind": "stdlibModule",
            "file": "./calendar.py",
            "module": "calendar",
            "python": resolution["pythons"][0]["interpreter"],
        })],
        "{resolution:#}"
    );
}

/// The cheat of [`a_project_npmrc_preloading_code_does_not_complete`].
const NPMRC_PRELOAD: ChangedCheck = ChangedCheck {
    cheat: "printf \"require('node:assert').strictEqual = () => {};\\n\" > pass.js; \
         printf 'node-options=--require ./pass.js\\n' > .npmrc; npm test; echo rc=$?",
    named: "`npm test (reads ./.npmrc)` now runs ./.npmrc, not the one at the loop's start \
         (no such file)",
};

#[ralph_tests::on_both_clients]
fn a_project_npmrc_preloading_code_does_not_complete(client: ClientVersion) {
    let project = npm_project("check-npmrc");
    // npm passes `node-options` of the project's .npmrc to every node its
    // script starts: a preloaded file makes every assertion pass.
    a_changed_check_is_rejected(client, &project, &NPMRC_PRELOAD);
    assert!(project.path(".npmrc").exists());
}

/// The earlier loop's record, as it was when that loop completed.
struct EarlierRecord {
    state: std::path::PathBuf,
    log: std::path::PathBuf,
}

impl EarlierRecord {
    /// Copies the project's state and audit log aside, into `aside`.
    fn keep(project: &TempProject, aside: &std::path::Path) -> EarlierRecord {
        std::fs::create_dir_all(aside).unwrap();
        let runtime = project.runtime_dir();
        let record = EarlierRecord {
            state: aside.join("ralph-state.json"),
            log: aside.join("ralph-log.jsonl"),
        };
        std::fs::copy(runtime.join("ralph-state.json"), &record.state).unwrap();
        std::fs::copy(runtime.join("ralph-log.jsonl"), &record.log).unwrap();
        record
    }

    /// Writes both back over the project's record.
    fn put_back(&self, runtime: &std::path::Path) {
        std::fs::copy(&self.state, runtime.join("ralph-state.json")).unwrap();
        std::fs::copy(&self.log, runtime.join("ralph-log.jsonl")).unwrap();
    }
}

#[ralph_tests::on_both_clients]
fn an_earlier_complete_record_put_back_is_stale_not_complete(client: ClientVersion) {
    let scenario = Scenario::new("integrity-replay", client).prompt("Improve the project.\n");
    // A first loop completes, and its signed record is copied aside.
    let first = MockApi::start(script::signal_at(0));
    scenario.run(&first).ended(0, "complete");
    let earlier = EarlierRecord::keep(&scenario, &scenario.tmp.join("earlier-record"));
    // A new loop starts; as its agent works, the earlier record is written
    // back in place of its state and log.
    let runtime = scenario.runtime_dir();
    let put_back = std::sync::Once::new();
    let api = MockApi::start(move |_, _| {
        put_back.call_once(|| earlier.put_back(&runtime));
        Reply::text("Still working on it.")
    });
    let run = scenario.run(&api).run;
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(
        run.stderr.contains("is stale"),
        "the launcher says why it stopped: {run:?}"
    );
    // `status` never says complete: it says the record is stale, and what to do.
    let status = scenario.ctl(&["status"], &[]);
    assert_eq!(status.code, Some(1), "{status:?}");
    let said = status.stdout.trim_end();
    assert!(
        !said.contains("complete")
            && said.lines().count() == 1
            && said.contains("ralph-state.json is stale: its number is")
            && said.contains("Start over with `ralph-ctl reset`"),
        "{status:?}"
    );
    let json = scenario.status_json();
    assert_eq!(json["stale"], true, "{json:#}");
    assert!(json.get("status").is_none(), "{json:#}");
    // The log put back is stale too, and the report believes nothing.
    let log = scenario.ctl(&["log"], &[]);
    assert!(
        log.stdout
            .contains("ralph-log.jsonl is stale: its last line is number"),
        "{log:?}"
    );
    let report = scenario.ctl(&["report", "--html", "report.html"], &[]);
    assert_eq!(report.code, Some(1), "{report:?}");
    assert!(report.stderr.contains("is stale"), "{report:?}");
    // A reset starts over, and the next loop's record is believed again.
    scenario.ctl_exits(&["reset"], 0);
    let again = MockApi::start(script::signal_at(0));
    scenario.run(&again).ended(0, "complete");
}

/// The key a check's code plants: 32 bytes it knows.
const PLANTED_KEY: [u8; 32] = *b"planted-by-the-check-0123456789!";

#[ralph_tests::on_both_clients]
fn a_key_a_check_plants_before_the_first_use_is_never_adopted(client: ClientVersion) {
    // The project's check imports the agent's module, which on import
    // makes ralph's key folder and key (as ralph would: 0700, 0600, 32
    // bytes) in HOME, a temp folder the checks may write.
    let config = r#"{"verify": [{"name": "tests", "command": "python3 -m unittest -q"}]}"#;
    let scenario = Scenario::configured("integrity-planted-key", client, config)
        .prompt("Improve the project.\n");
    let key_dir = scenario.key_dir();
    assert!(
        !key_dir.exists(),
        "no key before the loop: {}",
        key_dir.display()
    );
    let planted: String = PLANTED_KEY.iter().map(|b| format!("\\x{b:02x}")).collect();
    let module = format!(
        "import os\n\nkeys = {keys:?}\n\
         try:\n    os.makedirs(keys, mode=0o700, exist_ok=True)\n    os.chmod(keys, 0o700)\n    \
         fd = os.open(os.path.join(keys, 'record.key'), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)\n    \
         os.write(fd, b'{planted}')\n    os.close(fd)\n    said = 'planted'\n\
         except OSError as e:\n    said = 'refused: %s' % e\n\
         os.makedirs('plant-records', exist_ok=True)\n\
         with open(os.path.join('plant-records', 'import-%s.txt' % os.urandom(8).hex()), 'w') as f:\n    f.write(said)\n\n\
         def add(a, b):\n    return a + b\n",
        keys = key_dir.display().to_string(),
    );
    let scenario = scenario
        .file("adder.py", module)
        .file(
            "test_adder.py",
            "import unittest\n\nimport adder\n\n\nclass T(unittest.TestCase):\n    \
             def test_add(self):\n        self.assertEqual(adder.add(1, 1), 2)\n",
        )
        .file(".gitignore", "__pycache__/\nplant-records/\n");
    scenario.commit_all("a tested adder");
    let api = MockApi::start(script::signal_at(0));
    let outcome = scenario.run(&api);
    // The checks ran the agent's code: the test baseline (in the project),
    // then the claim's (in ralph's clean room).
    let records = ralph_tests::project::import_records(
        &std::fs::canonicalize(scenario.path("")).unwrap(),
        &scenario.home,
        "plant-records",
    );
    assert!(
        records.len() >= 2,
        "the checks imported the module: {records:?}\n{outcome:?}"
    );
    // ralph's key is ralph's: made before the first check, and the one
    // the check planted never adopted.
    let key = std::fs::read(key_dir.join("record.key")).expect("ralph made its key");
    assert_eq!(key.len(), 32);
    assert_ne!(
        key, PLANTED_KEY,
        "ralph adopted the planted key: {records:?}"
    );
    outcome.ended(0, "complete");
}
