//! End-to-end, a person's first hour with ralph, on the real clients
//! against the scripted Messages API mock: one command with a task starts a
//! checked loop in a project where ralph is not installed yet; a headless
//! loop shows readable progress (no raw JSON) and keeps to
//! `--max-iterations`; the starter formula `init --formula` writes runs to
//! `complete` in a Python project; an interactive run in a home where the
//! client never ran is refused, and a headless one with no login ends
//! `failed` on the client's own words; and the README's
//! quick start runs as written, in a Python, a Node and a Rust project.
//!
//! Run one scenario alone with e.g.
//! `tests/run.sh -p ralph-tests --test e2e first_hour::a_task_starts_a_checked_loop_in_a_bare_project::v2_1_330`.

use std::time::Duration;

use ralph_tests::bins;
use ralph_tests::client::ClientVersion;
use ralph_tests::interactive::{SIZE, Stderr, Terminal};
use ralph_tests::mock_api::{MockApi, Reply, user_texts};
use ralph_tests::project::{TempProject, run_with_timeout};
use ralph_tests::scenario::{Scenario, script};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

const FIXED: &str = "def add(a, b):\n    return a + b\n";
/// The agent's fix (a shell edit: 2.0.77 writes a file only once it was read).
const FIX: &str = "sed -i 's/a - b/a + b/' calc.py";

/// The lines of `stdout` that are JSON objects: the client's own output.
fn json_lines(stdout: &str) -> Vec<&str> {
    stdout
        .lines()
        .filter(|l| serde_json::from_str::<Value>(l.trim()).is_ok_and(|v| v.is_object()))
        .collect()
}

#[ralph_tests::on_both_clients]
fn a_task_starts_a_checked_loop_in_a_bare_project(client: ClientVersion) {
    let project = TempProject::python_with_a_failing_test("task");
    assert!(!project.path(".claude").exists());
    let api = MockApi::start(move |turn, _| match turn {
        // Claims before the fix: the tests fail, the claim goes back.
        0 => Reply::text(format!("Done.\n{SIGNAL}")),
        1 => Reply::bash(FIX),
        _ => Reply::text(format!("Fixed add(); the tests pass.\n{SIGNAL}")),
    });
    let task = "Fix add() in calc.py so that the tests pass.";
    let mut cmd = project.command(bins::ctl());
    cmd.args(["run", "--task", task, "--yes", "--headless"])
        .envs(project.client_env(client, &api));
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    run.assert_code(0);
    // Installed, with the project's tests as the check, and the task as PROMPT.md.
    run.assert_stdout_has(&["Completion check: `python3 -m unittest`"]);
    let prompt = project.read(".claude/ralph/PROMPT.md");
    assert!(
        prompt.starts_with(&format!("# Task\n\n{task}\n")),
        "{prompt}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert_eq!(state["history"][0]["decision"], "block", "{state:#}");
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    assert_eq!(
        state["lastClaim"]["verification"][0]["command"], "python3 -m unittest",
        "{state:#}"
    );
    let first = user_texts(&api.main_requests()[0].body).join("\n");
    assert!(first.contains(task), "{first}");
    assert_eq!(project.read("calc.py"), FIXED);
    // A next task's dry run shows it and changes nothing.
    let again = project.ctl(
        &["run", "--task", "Now add a docstring.", "--dry-run"],
        &[("RALPH_CLAUDE", &client.executable().display().to_string())],
    );
    again.assert_code(0);
    again.assert_stdout_has(&["Now add a docstring.", "this dry run writes nothing"]);
    assert_eq!(project.read(".claude/ralph/PROMPT.md"), prompt);
    assert_eq!(project.status_json(), state, "the loop is left as it ended");
}

#[ralph_tests::on_both_clients]
fn a_task_run_without_a_terminal_is_checked_by_the_tests_it_found(client: ClientVersion) {
    // `run --task` under nohup, CI or another agent: no terminal to ask
    // whether the tests found become the check, and no --yes. The agent's
    // early "done" is still checked against them.
    let project = TempProject::python_with_a_failing_test("task-unattended");
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::text(format!("Done.\n{SIGNAL}")),
        1 => Reply::bash(FIX),
        _ => Reply::text(format!("Fixed add(); the tests pass.\n{SIGNAL}")),
    });
    let mut cmd = project.command(bins::ctl());
    cmd.args(["run", "--task", "Fix add() in calc.py.", "--headless"])
        .envs(project.client_env(client, &api));
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    run.assert_code(0);
    run.assert_stdout_has(&[
        "No terminal to ask in: the test command found, `python3 -m unittest` (from ",
        "becomes the completion check",
        // The rejected claim is on the screen, with the gate that failed it.
        "↻ iteration 2 of 25 (claim of done rejected: the verification gate failed)",
    ]);
    // What it cost, on the closing line of a headless session too.
    assert!(run.closing_line().contains("[cost $"), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert_eq!(state["history"][0]["decision"], "block", "{state:#}");
    assert_eq!(
        state["lastClaim"]["verification"][0]["command"], "python3 -m unittest",
        "{state:#}"
    );
}

#[ralph_tests::on_both_clients(area_sample)]
fn a_headless_loop_shows_progress_and_keeps_to_its_cap(client: ClientVersion) {
    let scenario =
        Scenario::new("progress", client).exact_args(&["--headless", "--max-iterations", "3"]);
    let call = Reply::bash("echo step >> work.log");
    let api = MockApi::start(script::call_then_say(call, "Still working."));
    let outcome = scenario.run(&api);
    outcome.ended(10, "max_iterations").at_iteration(3);
    let (run, state) = (&outcome.run, &outcome.state);
    assert_eq!(state["maxIterations"], 3, "{state:#}");
    assert_eq!(
        api.main_requests().len(),
        6,
        "three iterations of two requests"
    );
    assert!(
        json_lines(&run.stdout).is_empty(),
        "no raw JSON on stdout:\n{}",
        run.stdout
    );
    let lines_with = |needle: &str| run.stdout.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(
        (
            lines_with("says: Still working"),
            lines_with("→ Bash: echo step >> work.log")
        ),
        (3, 3),
        "one line per message and call:\n{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("↻ iteration 2 of 3") && run.stdout.contains("↻ iteration 3 of 3"),
        "each iteration is announced:\n{}",
        run.stdout
    );
    outcome.closing_has(&["max_iterations"]);
    // --json: the client's own result object, as before.
    let _ = scenario.ctl(&["reset"], &[]);
    let again = scenario.run_exact(&api, &["--headless", "--json", "--max-iterations", "1"]);
    let run = &again.run;
    run.assert_code(10);
    let objects = json_lines(&run.stdout);
    assert_eq!(objects.len(), 1, "{}", run.stdout);
    assert!(objects[0].contains("\"type\":\"result\""), "{}", objects[0]);
}

#[ralph_tests::on_both_clients]
fn the_starter_formula_runs_to_complete_in_a_python_project(client: ClientVersion) {
    let project = TempProject::python_with_a_failing_test("starter-formula");
    let init = project.ctl(&["init", "--formula", "ship", "--yes"], &[]);
    // init names the command.
    init.assert_code(0)
        .assert_stdout_has(&[".claude/ralph/ralph-audit.sh --formula ship"]);
    project.write_prompt("Fix add() in calc.py so that the tests pass.\n");
    let plan = project.path("PLAN.md").display().to_string();
    let api = MockApi::start_in_order(move |turn, _| match turn {
        // plan: written while the tests still fail, and not held to them.
        0 => Reply::write(plan.clone(), "- [x] make add() add\n"),
        1 => Reply::text(format!("Planned.\n{SIGNAL}")),
        // implement: the fix, then the claim the tests now back.
        2 => Reply::bash(FIX),
        3 => Reply::text(format!("Implemented.\n{SIGNAL}")),
        // test
        _ => Reply::text(format!("The tests pass.\n{SIGNAL}")),
    });
    let scenario = Scenario::around(project, client).exact_args(&["--formula", "ship"]);
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(3);
    let state = &outcome.state;
    assert_eq!(api.main_requests().len(), 5, "{state:#}");
    let steps: Vec<&str> = state["formula"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(steps, ["plan", "implement", "test"]);
    assert_eq!(
        state["lastClaim"]["verification"][0]["command"], "python3 -m unittest",
        "{state:#}"
    );
}

#[ralph_tests::on_both_clients]
fn an_interactive_run_in_a_home_where_the_client_never_ran_is_refused(client: ClientVersion) {
    // A home where Claude Code never ran: no ~/.claude.json. The client's
    // terminal UI would open on its first-run screens (here, with no route
    // to the public API host, both exit 1 at once): the launcher does not
    // start it, names the cause and the fixes, and suggests no --resume,
    // which would meet the same screens.
    let _serial = crate::one_terminal_ui_at_a_time();
    let project = TempProject::initialised("first-run");
    let api = MockApi::start(|_, _| Reply::text("never asked"));
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.env("TERM", "xterm-256color")
        .env("npm_config_registry", format!("{}/", api.base_url()))
        .env("npm_config_offline", "true")
        .envs(project.client_env(client, &api));
    let mut term = Terminal::spawn(cmd, SIZE, Stderr::Captured).unwrap();
    let exited = term.wait(Duration::from_secs(60)).is_some();
    let run = term.finish(Duration::from_millis(100));
    assert!(exited, "the client waited: {}", run.screen);
    assert!(
        run.stderr
            .contains("not started: the client's terminal UI would open on questions")
            && run
                .stderr
                .contains("Claude Code has never run in this home")
            && run.stderr.contains("run `claude` once in a terminal")
            && run.stderr.contains("ralph-ctl run --headless")
            && !run.stderr.contains("--resume"),
        "{}\nscreen:\n{}",
        run.stderr,
        run.screen
    );
    assert!(project.state().is_none(), "no loop was started");
    // Headless, with no login at all: the client says so ("Not logged in ·
    // Please run /login", 2.0.77 "Invalid API key · Please run /login"),
    // its hook records it as an authentication error, and the loop ends
    // `failed` on its words with the fix, not paused for a retry.
    let mut cmd = project.command(bins::ctl());
    cmd.args(["run", "--headless", "--no-sandbox", "--max-iterations", "1"])
        .envs(
            project
                .client_env(client, &api)
                .into_iter()
                .filter(|(name, _)| name != "ANTHROPIC_API_KEY"),
        );
    let run = run_with_timeout(cmd, None, Duration::from_secs(90));
    assert_eq!(run.code, Some(15), "{run:?}");
    assert!(
        run.stderr.contains("loop failed at iteration 1")
            && run.stderr.contains("Please run /login")
            && run.stderr.contains("log in again (`claude /login`)"),
        "{run:?}"
    );
    assert!(api.main_requests().is_empty());
}

/// The shell lines of the README's quick start, comments dropped.
fn quick_start_commands() -> Vec<String> {
    let readme = std::fs::read_to_string(bins::workspace_root().join("README.md")).unwrap();
    let section = readme
        .split("\n## Quick start\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Quick start section");
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        if line.starts_with("```") {
            in_block = !in_block && line.starts_with("```sh");
            continue;
        }
        if in_block {
            let command = line.split(" #").next().unwrap_or_default().trim();
            if !command.is_empty() {
                commands.push(command.to_string());
            }
        }
    }
    commands
}

/// A project the quick start is run on: its files, the one shell edit
/// that makes its failing test pass, and the check `init` finds there.
struct QuickStartProject {
    /// A name for its temp folder.
    name: &'static str,
    /// Its files, beside the README of every temp project.
    files: &'static [(&'static str, &'static str)],
    /// The agent's fix.
    fix: &'static str,
    /// The completion check the run takes.
    check: &'static str,
    /// What its test command needs from this environment (the toolchain's
    /// folders, the project's HOME being a temp one).
    env: Vec<(String, String)>,
}

#[ralph_tests::on_both_clients]
fn the_quick_start_runs_as_written(client: ClientVersion) {
    the_quick_start_runs_on(
        client,
        QuickStartProject {
            name: "quick-start",
            files: &[
                ("tests/__init__.py", ""),
                (
                    "parse_list.py",
                    "def parse(text):\n    return text.split(\",\")[0]\n",
                ),
                (
                    "tests/test_parser.py",
                    "import unittest\nfrom parse_list import parse\n\n\nclass ParseTest(unittest.TestCase):\n    def test_parse(self):\n        self.assertEqual(parse(\"a,b\"), [\"a\", \"b\"])\n",
                ),
            ],
            fix: "sed -i 's/)\\[0\\]/)/' parse_list.py",
            check: "python3 -m unittest discover -s tests",
            env: Vec::new(),
        },
    );
}

#[ralph_tests::on_both_clients]
fn the_quick_start_runs_as_written_in_a_node_project(client: ClientVersion) {
    the_quick_start_runs_on(
        client,
        QuickStartProject {
            name: "quick-start-node",
            files: &[
                (
                    "package.json",
                    r#"{"name": "sum", "private": true, "scripts": {"test": "node --test"}}"#,
                ),
                ("sum.js", "module.exports = (a, b) => a - b;\n"),
                (
                    "test/sum.test.js",
                    "const test = require('node:test');\nconst assert = require('node:assert');\nconst sum = require('../sum');\n\ntest('sum', () => assert.strictEqual(sum(2, 2), 4));\n",
                ),
            ],
            fix: "sed -i 's/a - b/a + b/' sum.js",
            check: "npm test",
            env: Vec::new(),
        },
    );
}

#[ralph_tests::on_both_clients]
fn the_quick_start_runs_as_written_in_a_rust_project(client: ClientVersion) {
    // The toolchain where rustup and cargo put it for the person running
    // the tests: the project's own HOME is a temp one.
    let home = std::env::var("HOME").unwrap_or_default();
    let folder = |var: &str, in_home: &str| {
        let value = std::env::var(var).unwrap_or_else(|_| format!("{home}/{in_home}"));
        (var.to_string(), value)
    };
    let mut env = vec![
        folder("RUSTUP_HOME", ".rustup"),
        folder("CARGO_HOME", ".cargo"),
    ];
    env.extend(
        std::env::var("RUSTUP_TOOLCHAIN")
            .ok()
            .map(|t| ("RUSTUP_TOOLCHAIN".to_string(), t)),
    );
    the_quick_start_runs_on(
        client,
        QuickStartProject {
            name: "quick-start-rust",
            files: &[
                (
                    "Cargo.toml",
                    "[package]\nname = \"sum\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
                ),
                (
                    "src/lib.rs",
                    "pub fn add(a: u64, b: u64) -> u64 {\n    a - b\n}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn it_works() {\n        assert_eq!(add(2, 2), 4);\n    }\n}\n",
                ),
                (".gitignore", "/target\n"),
            ],
            fix: "sed -i 's/a - b/a + b/' src/lib.rs",
            check: "cargo test",
            env,
        },
    );
}

/// Each command of the README's quick start, in order, as a person on
/// `kind`, a fresh project, would run it: the loop in the client's
/// terminal UI, the person answering the questions on the screen.
fn the_quick_start_runs_on(client: ClientVersion, kind: QuickStartProject) {
    let commands = quick_start_commands();
    assert!(commands.len() >= 4, "{commands:?}");
    let project = TempProject::new(kind.name);
    for (file, text) in kind.files {
        project.write(file, text);
    }
    let fix = kind.fix;
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(fix),
        _ => Reply::text(format!("The tests pass.\n{SIGNAL}")),
    });
    let key = project
        .client_env(client, &api)
        .into_iter()
        .find(|(k, _)| k == "ANTHROPIC_API_KEY")
        .map(|(_, v)| v)
        .unwrap();
    // What running `claude` once by hand leaves (the quick start asks for it).
    ralph_tests::interactive::write_first_run_config(&project.home, &project.root, &key);
    let path = format!(
        "{}:{}",
        bins::bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let shell = |command: &str| {
        let mut cmd = project.command("sh");
        cmd.args(["-c", command])
            .env("PATH", &path)
            .env("TERM", "xterm-256color")
            .env("npm_config_registry", format!("{}/", api.base_url()))
            .env("npm_config_offline", "true")
            .envs(project.client_env(client, &api))
            .envs(kind.env.iter().cloned());
        cmd
    };
    let mut ran = Vec::new();
    for command in &commands {
        let line = command.as_str();
        if line == "./install.sh" {
            // A release build: install.sh has tests of its own (cli).
        } else if line == "cd your-project" {
            // The commands run in the project.
        } else if line.starts_with("ralph-ctl run --task") && line.contains("--dry-run") {
            let run = run_with_timeout(shell(line), None, Duration::from_secs(60));
            run.assert_code(0);
            run.assert_stdout_has(&[
                &format!("Completion check: `{}`", kind.check),
                "this dry run writes nothing",
                "ralph dry run: nothing was started",
            ]);
            assert!(!project.path(".claude").exists(), "{run:?}");
        } else if line.starts_with("ralph-ctl run --task") {
            let run = project.run_in_terminal(shell(line), LOOP_TIMEOUT, |screen| {
                if screen.contains("[Y/n]") {
                    Some("\r") // init's question: the tests as the check
                } else if screen.contains("Do you want to") {
                    // The client's permission prompt (2.1.330 "proceed?",
                    // 2.0.77 "make this edit to …?"): yes, the default.
                    Some("\r")
                } else {
                    None
                }
            });
            assert!(run.loop_ended, "{}", run.explain());
            let state = project.status_json();
            assert_eq!(state["status"], "complete", "{state:#}\n{}", run.explain());
            assert_eq!(
                state["lastClaim"]["verification"][0]["command"], kind.check,
                "{state:#}"
            );
        } else if line.starts_with("ralph-ctl status") || line.starts_with("ralph-ctl doctor") {
            let run = run_with_timeout(shell(line), None, Duration::from_secs(60));
            run.assert_code(0);
            if line.starts_with("ralph-ctl status") {
                assert!(run.stdout.contains("complete"), "{run:?}");
            }
        } else {
            panic!("the quick start shows `{line}`, which this test does not run: add it here");
        }
        ran.push(line);
    }
    assert!(
        ran.iter().any(|l| l.starts_with("ralph-ctl run --task")),
        "{ran:?}"
    );
}
