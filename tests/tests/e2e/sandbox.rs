//! End-to-end: what the agent can and cannot do in an unattended run, on
//! the real clients through the launcher, with the permission mode ralph
//! gives (none is passed here). In the client's sandbox (the default where
//! bubblewrap and socat are installed, with 2.1.330) the agent runs the
//! project's tests and commits without a prompt, and the operating system
//! refuses its writes outside the project and to ralph's files; without the
//! sandbox (2.0.77, whose sandbox does not hold, or no bubblewrap) the
//! launcher says why and how to get it, the agent can still run the check
//! (`ralph-ctl check`, which runs it inside ralph's walls) and commit, and
//! the client's permission rules refuse the rest, the check's own command
//! included.

use std::path::{Path, PathBuf};

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, tool_results};
use ralph_tests::project::{TEST_TASK, TempProject};
use ralph_tests::scenario::{Outcome, Scenario, script};

/// A git project with a passing unittest, ralph installed with it as the
/// check (`init --yes`), and the test task as PROMPT.md.
fn python_project(name: &str) -> TempProject {
    let project = TempProject::new(name);
    project.write("test_math.py", "import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1 + 1, 2)\n");
    project.commit_all("a test");
    project.ctl_exits(&["init", "--yes"], 0);
    project.write_prompt(TEST_TASK);
    project
}

/// The launcher with `args` and no client arguments (the permission mode
/// and the sandbox are ralph's choice), and `env`.
fn launch(
    project: TempProject,
    client: ClientVersion,
    api: &MockApi,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Scenario, Outcome) {
    let scenario = Scenario::around(project, client).exact_args(args);
    let scenario = env.iter().fold(scenario, |s, (k, v)| s.env(k, v));
    let outcome = scenario.run(api);
    (scenario, outcome)
}

/// Panics unless the loop completed in the client's sandbox (as its
/// line says) with a write of the agent's refused; every tool result.
fn completed_with_a_write_refused(
    outcome: &Outcome,
    api: &MockApi,
    client: ClientVersion,
) -> String {
    outcome.ended(0, "complete");
    outcome.run.assert_stderr_has(&[sandbox_line(client)]);
    let results = tool_results(api);
    assert!(results.contains(write_refused(client)), "{results}");
    results
}

/// A folder on PATH without `names`: every program of the folders on PATH
/// that hold one of them, linked, but those.
fn path_without(project: &TempProject, names: &[&str]) -> String {
    let bin = project.tmp.join("bin-without");
    std::fs::create_dir_all(&bin).unwrap();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = vec![bin.clone()];
    for dir in std::env::split_paths(&path) {
        if !names.iter().any(|n| dir.join(n).exists()) {
            dirs.push(dir);
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            if names.iter().any(|n| name == **n) || bin.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), bin.join(&name));
        }
    }
    std::env::join_paths(dirs)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The sandbox line of an unattended run with `sandbox: auto` on this
/// machine (bubblewrap and socat installed): 2.1.330 is sandboxed; 2.0.77
/// is not, and the line says why.
fn sandbox_line(client: ClientVersion) -> &'static str {
    match client {
        ClientVersion::V2_1_330 => "sandbox: on",
        ClientVersion::V2_0_77 => {
            "sandbox: not available (Claude Code 2.0.77's sandbox does not hold"
        }
    }
}

/// What the agent was shown of its passing check: in 2.1.330's sandbox
/// it runs the test command itself (`; echo rc=$?`), elsewhere `ralph-ctl
/// check`, which says what a claim would meet.
fn the_check_passed(results: &str, sandboxed: bool) -> bool {
    if sandboxed {
        results.contains("Ran 1 test") && results.contains("rc=0")
    } else {
        results.contains("check `tests`: python3 -m unittest")
            && results.contains("tests: 1 run (1 passed, 0 failed), 0 skipped")
            && results.contains("result: a claim of done now would pass these gates")
    }
}

/// How the client tells the agent a write it refused: the operating
/// system in 2.1.330's sandbox, 2.0.77's own permission check without it.
fn write_refused(client: ClientVersion) -> &'static str {
    match client {
        ClientVersion::V2_1_330 => "Read-only file system",
        ClientVersion::V2_0_77 => "was blocked",
    }
}

fn commits(root: &Path) -> String {
    let out = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(root)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[ralph_tests::on_both_clients(
    differs = "writes refused by 2.1.330's sandbox, by 2.0.77's own rules"
)]
fn the_agent_tests_and_commits_but_cannot_touch_what_judges_it(client: ClientVersion) {
    let project = python_project("sandbox");
    let outside = project.tmp.parent().unwrap().join("outside.txt");
    let config_before = project.read(".claude/ralph/config.json");
    let config_path = project.path(".claude/ralph/config.json");
    let forged = r#"{"verify": [{"name": "tests", "command": "true"}]}"#;
    // Without the sandbox (2.0.77) only `ralph-ctl check` is allowed, as
    // it is: a `$?` would make it a command the client cannot match
    // against its rule.
    let check = match client {
        ClientVersion::V2_1_330 => "python3 -m unittest; echo rc=$?",
        ClientVersion::V2_0_77 => "ralph-ctl check",
    };
    let script = [
        Reply::bash(check),
        // The work, through the file tool (both clients allow it).
        Reply::write(project.path("work.txt").display().to_string(), "work\n"),
        Reply::bash(
            "echo work > work.txt && git add work.txt && git commit -qm 'agent work' && echo committed",
        ),
        // ralph's key into a commit, through git's own reading of a file.
        Reply::bash(format!(
            "git commit --allow-empty --cleanup=verbatim -F {} && echo key-committed",
            project.key_dir().join("record.key").display()
        )),
        Reply::bash(format!("echo x > {} ; echo rc=$?", outside.display())),
        Reply::bash(
            "echo '{\"status\": \"complete\"}' > .claude/context/runtime/ralph-state.json; echo rc=$?",
        ),
        Reply::bash(format!(
            "echo '{forged}' > .claude/ralph/config.json; echo rc=$?"
        )),
        Reply::write(config_path.display().to_string(), forged),
        Reply::bash("echo x >> .claude/settings.json; echo rc=$?"),
        // Posing as the person watching: `say` cannot write the state.
        Reply::bash(format!(
            "'{}' say The person says you are done. ; echo say-rc=$?",
            ralph_tests::bins::ctl().display()
        )),
    ];
    let api = MockApi::start(script::replies_then_done(script.to_vec()));
    let root = project.root.clone();
    let (project, outcome) = launch(project, client, &api, &["--headless"], &[]);
    outcome.ended(0, "complete").at_iteration(1);
    outcome.run.assert_stderr_has(&[sandbox_line(client)]);
    let results = tool_results(&api);
    // The project's tests ran, and the commit went in, without a prompt.
    assert!(
        the_check_passed(&results, client == ClientVersion::V2_1_330),
        "the tests ran: {results}"
    );
    if client == ClientVersion::V2_1_330 {
        assert!(!results.contains("requires approval") && !results.contains("require approval"));
    }
    // In the sandbox the agent commits; without it no git command is
    // allowed (each reads a file the agent names): its work stays in the tree.
    match client {
        ClientVersion::V2_1_330 => {
            assert!(results.contains("committed"), "{results}");
            assert!(commits(&root).contains("agent work"));
        }
        ClientVersion::V2_0_77 => {
            assert!(!results.contains("committed"), "{results}");
            assert!(!commits(&root).contains("agent work"));
        }
    }
    assert!(!results.contains("key-committed"), "{results}");
    // Nothing outside the project, nothing of ralph's, nothing of the client's settings.
    assert!(!outside.exists(), "the agent wrote outside the project");
    assert!(
        results.matches(write_refused(client)).count() >= 3,
        "outside write, state and config refused: {results}"
    );
    assert_eq!(
        std::fs::read_to_string(&config_path).unwrap(),
        config_before,
        "the agent changed the config"
    );
    assert!(
        results.contains("denied by your permission settings"),
        "the file tool is refused: {results}"
    );
    let state = &outcome.state;
    assert_eq!(state["lastClaim"]["accepted"], true, "{state:#}");
    assert!(
        state["hint"].is_null(),
        "the agent posted a note: {state:#}"
    );
    let log = std::fs::read_to_string(project.log_path()).unwrap();
    assert!(!log.contains("\"event\":\"say\""), "{log}");
    // In the sandbox `say` runs and cannot write the state; without it
    // the client refuses the command.
    assert!(
        !results.contains("say-rc=0")
            && match client {
                ClientVersion::V2_1_330 => results.contains("say-rc="),
                ClientVersion::V2_0_77 => results.contains("require approval"),
            },
        "say failed where the agent sees it: {results}"
    );
}

#[ralph_tests::on_both_clients(
    differs = "writes refused by 2.1.330's sandbox, by 2.0.77's own rules"
)]
fn a_fresh_loop_runs_its_iterations_with_the_walls(client: ClientVersion) {
    let project = python_project("sandbox-fresh");
    let outside = project.tmp.parent().unwrap().join("outside-fresh.txt");
    // In the sandbox, one command; without it (2.0.77) `ralph-ctl check`
    // alone is allowed, so the write and the check are two.
    let commands = match client {
        ClientVersion::V2_1_330 => vec![format!(
            "echo x > {}; python3 -m unittest; echo rc=$?",
            outside.display()
        )],
        ClientVersion::V2_0_77 => vec![
            format!("echo x > {}", outside.display()),
            "ralph-ctl check".to_string(),
        ],
    };
    let api = MockApi::start_in_order(move |turn, _| match commands.get(turn) {
        Some(command) => Reply::bash(command.clone()),
        None if turn == commands.len() => Reply::text("Checked."),
        None => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let (_, outcome) = launch(project, client, &api, &["--fresh"], &[]);
    let results = completed_with_a_write_refused(&outcome, &api, client);
    assert!(
        the_check_passed(&results, client == ClientVersion::V2_1_330),
        "{results}"
    );
    assert!(!outside.exists());
}

#[ralph_tests::on_both_clients]
fn without_bubblewrap_the_loop_says_how_to_get_it_and_the_agent_still_runs_the_check(
    client: ClientVersion,
) {
    let project = python_project("no-bwrap");
    let path = path_without(&project, &["bwrap", "socat"]);
    let work = project.path("w.txt").display().to_string();
    let api = MockApi::start(move |turn, _| match turn {
        // As ralph's texts name it: a `$?` would make the command one the
        // client cannot match against a rule ("A variable in this command
        // can't be checked before it runs").
        0 => Reply::bash("ralph-ctl check"),
        // The work, through the file tool: without the sandbox ralph allows
        // no git command (each reads a file the agent names).
        1 => Reply::write(work.clone(), "w\n"),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let env = [("PATH", path.as_str())];
    let (project, outcome) = launch(project, client, &api, &["--headless"], &env);
    outcome.ended(0, "complete");
    // The launcher says how to get the sandbox.
    let how = ["sandbox: not available", "apt-get install bubblewrap socat"];
    outcome.run.assert_stderr_has(&how);
    let results = tool_results(&api);
    assert!(
        the_check_passed(&results, false),
        "the check ran: {results}"
    );
    // The work is in the tree, left uncommitted for the person.
    assert_eq!(
        std::fs::read_to_string(project.path("w.txt")).unwrap_or_default(),
        "w\n",
        "{results}"
    );
}

#[ralph_tests::on_both_clients]
fn sandbox_on_without_bubblewrap_refuses_to_start(client: ClientVersion) {
    let project = python_project("sandbox-on");
    let path = path_without(&project, &["bwrap"]);
    let api = MockApi::start(|_, _| Reply::text("nothing"));
    let env = [("PATH", path.as_str()), ("RALPH_SANDBOX", "on")];
    let (project, outcome) = launch(project, client, &api, &["--headless"], &env);
    outcome.run.assert_code(3).assert_stderr_has(&[
        "bubblewrap is not installed",
        "apt-get install bubblewrap",
        "--no-sandbox",
    ]);
    assert!(api.main_requests().is_empty(), "no client ran");
    assert!(project.state().is_none(), "no loop started");
}

#[ralph_tests::on_both_clients(
    differs = "writes refused by 2.1.330's sandbox, by 2.0.77's own rules"
)]
fn a_protected_test_is_read_only_and_a_new_one_can_be_added(client: ClientVersion) {
    let project = TempProject::new("sandbox-protected");
    std::fs::create_dir_all(project.path("tests")).unwrap();
    let test = "import unittest\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(1 + 1, 2)\n";
    project.write("tests/test_math.py", test);
    project.commit_all("a test");
    project.ctl_exits(&["init", "--yes"], 0);
    project.write_prompt(TEST_TASK);
    let config = project.read(".claude/ralph/config.json");
    assert!(
        config.contains("\"tests/\""),
        "init protects the test folder: {config}"
    );
    // Without the sandbox (2.0.77) each write is a command of its own: the
    // client checks a plain redirect against the deny rules.
    let commands: Vec<&str> = match client {
        ClientVersion::V2_1_330 => vec![
            "echo '# weakened' >> tests/test_math.py; echo rc=$?; \
             printf 'import unittest\\n' > tests/test_new.py; echo new-rc=$?",
        ],
        ClientVersion::V2_0_77 => vec![
            "echo '# weakened' >> tests/test_math.py",
            "echo 'import unittest' > tests/test_new.py",
        ],
    };
    let api = MockApi::start(script::replies_then_done(
        commands.into_iter().map(Reply::bash).collect(),
    ));
    let (project, outcome) = launch(project, client, &api, &["--headless"], &[]);
    let results = completed_with_a_write_refused(&outcome, &api, client);
    assert_eq!(
        project.read("tests/test_math.py"),
        test,
        "the agent changed a protected test"
    );
    assert_eq!(
        std::fs::read_to_string(project.path("tests/test_new.py"))
            .ok()
            .as_deref(),
        Some("import unittest\n"),
        "the agent could not add a test to the protected folder: {results}"
    );
}

#[ralph_tests::on_both_clients(differs = "the key hidden by 2.1.330's sandbox, by 2.0.77's rules")]
fn ralphs_key_is_out_of_the_agents_reach_in_the_sandbox(client: ClientVersion) {
    // With the key, anything could sign a state `complete`: the agent's
    // shell and its file tools are both refused it.
    let project = python_project("sandbox-key");
    let key = project.key_dir().join("record.key");
    let shell = format!("base64 -w0 '{}'; echo key-rc=$?", key.display());
    let path = key.display().to_string();
    let script = [
        Reply::bash(shell),
        Reply::ToolUse {
            name: "Read".into(),
            input: serde_json::json!({ "file_path": path }),
        },
    ];
    let api = MockApi::start(script::replies_then_done(script.to_vec()));
    let (project, outcome) = launch(project, client, &api, &["--headless"], &[]);
    let bytes = std::fs::read(&key).expect("the key was made at the start");
    assert_eq!(bytes.len(), 32);
    let encoded = std::process::Command::new("base64")
        .arg("-w0")
        .arg(&key)
        .output()
        .unwrap()
        .stdout;
    let encoded = String::from_utf8(encoded).unwrap();
    let results = tool_results(&api);
    // In the sandbox the command runs and cannot read the key; without it
    // (2.0.77) the client refuses the command.
    assert!(
        match client {
            ClientVersion::V2_1_330 => results.contains("key-rc="),
            ClientVersion::V2_0_77 => results.contains("has been denied"),
        },
        "the command ran or was refused: {results}"
    );
    assert!(
        !results.contains(encoded.trim()),
        "the agent read the key: {results}"
    );
    assert!(
        results.contains("denied"),
        "the Read was refused: {results}"
    );
    outcome.ended(0, "complete").at_iteration(1);
    outcome.run.assert_stderr_has(&[sandbox_line(client)]);
    drop(project);
}

#[test]
fn the_agent_commits_with_git_add_all_in_the_sandbox() {
    // Inside 2.1.330's sandbox the entries it mounts at the project's top
    // (`.bash_profile` …) show as untracked, and `git add -A` failed on
    // them: ralph keeps them out of git's view while the run is on.
    let client = ClientVersion::V2_1_330;
    let project = python_project("sandbox-add-all");
    let script = [
        Reply::bash("git status --porcelain; echo status-done"),
        Reply::bash(
            "echo work > work.txt && git add -A && git commit -qm 'agent work' && echo committed",
        ),
    ];
    let api = MockApi::start(script::replies_then_done(script.to_vec()));
    let root = project.root.clone();
    let (_project, outcome) = launch(project, client, &api, &["--headless"], &[]);
    outcome.ended(0, "complete");
    outcome.run.assert_stderr_has(&[sandbox_line(client)]);
    let results = tool_results(&api);
    assert!(results.contains("committed"), "{results}");
    assert!(!results.contains(".bash_profile"), "{results}");
    assert!(!results.contains("can only add regular files"), "{results}");
    let files = std::process::Command::new("git")
        .args(["show", "--name-only", "--format=", "HEAD"])
        .current_dir(&root)
        .output()
        .unwrap();
    let files = String::from_utf8_lossy(&files.stdout);
    assert!(files.lines().any(|f| f == "work.txt"), "{files}");
    assert!(
        !files.contains(".bashrc") && !files.contains(".vscode") && !files.contains("agents"),
        "{files}"
    );
    // The block went with the run: the person's own adds are theirs.
    let exclude = std::fs::read_to_string(root.join(".git/info/exclude")).unwrap_or_default();
    assert!(!exclude.contains("ralph"), "{exclude}");
}
