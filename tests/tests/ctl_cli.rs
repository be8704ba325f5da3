//! Integration tests of the built `ralph-ctl` and of the launcher, with a
//! fake client where the real one is not the point.

use std::collections::BTreeMap;
use std::path::Path;

use ralph_tests::bins;
use ralph_tests::cli::{Ctl, Launcher};
use ralph_tests::project::TempProject;
use serde_json::{json, Value};

/// Every file under `dir`, with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn settings(project: &TempProject) -> Value {
    serde_json::from_slice(&std::fs::read(project.path(".claude/settings.json")).unwrap()).unwrap()
}

#[test]
fn init_installs_everything_and_twice_changes_nothing() {
    let project = TempProject::new("init");
    let run = Ctl::new(&project).arg("init").run();
    run.assert_code(0);
    for file in [
        ".claude/ralph/PROMPT.md",
        ".claude/ralph/guardrails.md",
        ".claude/ralph/ralph-audit.sh",
        ".claude/ralph/ralph-audit.bat",
        ".claude/settings.json",
    ] {
        assert!(project.path(file).is_file(), "{file}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(project.path(".claude/ralph/ralph-audit.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111, "the launcher is executable");
    let launcher = std::fs::read_to_string(project.path(".claude/ralph/ralph-audit.sh")).unwrap();
    let ctl = std::fs::canonicalize(bins::ctl()).unwrap();
    assert!(
        launcher.contains(&ctl.display().to_string()),
        "the launcher knows where ralph-ctl is"
    );

    let hook = &settings(&project)["hooks"]["Stop"][0]["hooks"][0];
    let hook_path = std::fs::canonicalize(bins::hook()).unwrap();
    assert_eq!(hook["type"], "command");
    assert_eq!(hook["command"], json!(hook_path.display().to_string()));
    assert!(hook["timeout"].as_u64().unwrap() >= 10);

    let before = snapshot(&project.path(".claude"));
    let again = Ctl::new(&project).arg("init").run();
    again.assert_code(0);
    assert!(
        !again.stdout.contains("created") && !again.stdout.contains("updated"),
        "{}",
        again.stdout
    );
    assert_eq!(
        snapshot(&project.path(".claude")),
        before,
        "running init twice changes nothing"
    );
}

#[test]
fn init_keeps_existing_settings_hooks_and_prompts() {
    let project = TempProject::new("init-merge");
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    std::fs::write(project.path(".claude/ralph/PROMPT.md"), "My own task.\n").unwrap();
    let existing = json!({
        "model": "opus",
        "permissions": {"allow": ["Bash(cargo test)"]},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]
        }
    });
    std::fs::write(
        project.path(".claude/settings.json"),
        serde_json::to_string_pretty(&existing).unwrap(),
    )
    .unwrap();
    project.init();
    let merged = settings(&project);
    assert_eq!(merged["model"], "opus");
    assert_eq!(merged["permissions"], existing["permissions"]);
    assert_eq!(
        merged["hooks"]["PreToolUse"],
        existing["hooks"]["PreToolUse"]
    );
    let stop = merged["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2);
    assert_eq!(stop[0], existing["hooks"]["Stop"][0]);
    assert!(stop[1]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .ends_with("ralph-stop-hook"));
    let keys: Vec<_> = merged.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["model", "permissions", "hooks"], "key order is kept");
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/ralph/PROMPT.md")).unwrap(),
        "My own task.\n"
    );
}

#[test]
fn init_refuses_malformed_settings_without_touching_them() {
    let project = TempProject::new("init-bad");
    std::fs::create_dir_all(project.path(".claude")).unwrap();
    std::fs::write(project.path(".claude/settings.json"), "{\"hooks\": ").unwrap();
    Ctl::new(&project)
        .arg("init")
        .run()
        .assert_code(1)
        .assert_stderr_has(&["settings.json", "not valid JSON"]);
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/settings.json")).unwrap(),
        "{\"hooks\": "
    );
}

#[test]
fn start_status_reset_cycle() {
    let project = TempProject::new("cycle");
    project.init();
    Ctl::new(&project)
        .arg("status")
        .run()
        .assert_code(0)
        .assert_stdout_has(&["No Ralph loop"]);
    assert_eq!(
        Ctl::new(&project)
            .args(["status", "--json"])
            .run()
            .stdout
            .trim(),
        "null"
    );

    let started = Ctl::new(&project)
        .arg("start")
        .envs([("RALPH_MAX_ITERATIONS", "7")])
        .run();
    started.assert_code(0);
    let fields: Vec<&str> = started.stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 2, "{}", started.stdout);
    assert_eq!(fields[0].len(), 36, "a UUID");
    assert_eq!(fields[1], "7");

    let state = project.status_json();
    for key in [
        "status",
        "iteration",
        "maxIterations",
        "sessionId",
        "startedAt",
        "lastRunAt",
        "lastFindingsCount",
        "history",
    ] {
        assert!(
            state.get(key).is_some(),
            "status --json has {key}: {state:#}"
        );
    }
    assert_eq!(state["status"], "running");
    assert_eq!(state["iteration"], 1);
    assert_eq!(state["sessionId"], fields[0]);

    Ctl::new(&project)
        .arg("status")
        .run()
        .assert_code(0)
        .assert_stdout_has(&["running", "1 of 7", fields[0], "started:"]);

    Ctl::new(&project)
        .arg("start")
        .run()
        .assert_code(3)
        .assert_stderr_has(&["already running", "ralph-ctl reset"]);
    assert_eq!(
        project.status_json()["sessionId"],
        fields[0],
        "a refused start changes nothing"
    );

    Ctl::new(&project)
        .args([
            "start",
            "--force",
            "--session-id",
            "abc-123",
            "--max-iterations",
            "3",
        ])
        .run()
        .assert_code(0);
    assert_eq!(project.status_json()["sessionId"], "abc-123");
    assert_eq!(project.status_json()["maxIterations"], 3);

    Ctl::new(&project).arg("reset").run().assert_code(0);
    assert!(project.state().is_none());
    Ctl::new(&project).arg("reset").run().assert_code(0);
}

#[test]
fn start_rejects_bad_input_with_the_name_of_what_is_wrong() {
    let project = TempProject::new("start-bad");
    project.init();
    /// (arguments, environment, exit code, what stderr must name)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, i32, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec!["start"],
            vec![("RALPH_MAX_ITERATIONS", "abc")],
            1,
            "RALPH_MAX_ITERATIONS",
        ),
        (
            vec!["start"],
            vec![("RALPH_CIRCUIT_BREAKER_THRESHOLD", "-1")],
            1,
            "RALPH_CIRCUIT_BREAKER_THRESHOLD",
        ),
        (
            vec!["start", "--max-iterations", "0"],
            vec![],
            2,
            "--max-iterations",
        ),
        (
            vec!["start", "--session-id", "../../x"],
            vec![],
            2,
            "--session-id",
        ),
        (
            vec!["start"],
            vec![("RALPH_PROMPT_FILE", "missing.md")],
            1,
            "missing.md",
        ),
    ];
    for (args, env, code, needle) in cases {
        Ctl::new(&project)
            .args(&args)
            .envs(env)
            .run()
            .assert_code(code)
            .assert_stderr_has(&[needle])
            .assert_no_panic();
        assert!(project.state().is_none(), "nothing was started");
    }
}

#[test]
fn corrupt_state_is_shown_refused_and_reset_aside() {
    let project = TempProject::new("corrupt");
    project.init();
    Ctl::new(&project).arg("start").run().assert_code(0);
    std::fs::write(project.state_path(), "{\"status\": \"runn").unwrap();
    Ctl::new(&project)
        .arg("status")
        .run()
        .assert_code(1)
        .assert_stdout_has(&["corrupt", "ralph-ctl reset"]);
    Ctl::new(&project).arg("start").run().assert_code(3);
    Ctl::new(&project)
        .arg("reset")
        .run()
        .assert_code(0)
        .assert_stdout_has(&["moved"]);
    let kept: Vec<_> = std::fs::read_dir(project.state_path().parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(kept.len(), 1, "the corrupt state is kept aside");
    assert_eq!(
        std::fs::read_to_string(kept[0].path()).unwrap(),
        "{\"status\": \"runn"
    );
    Ctl::new(&project).arg("start").run().assert_code(0);
}

#[test]
fn finish_marks_a_running_loop_interrupted_and_maps_exit_codes() {
    let project = TempProject::new("finish");
    project.init();
    Ctl::new(&project)
        .args(["start", "--session-id", "s-1"])
        .run()
        .assert_code(0);
    Ctl::new(&project)
        .args(["finish", "--session-id", "s-2", "--client-exit", "0"])
        .run()
        .assert_code(13);
    assert_eq!(
        project.status_json()["status"],
        "running",
        "another session's finish changes nothing"
    );

    Ctl::new(&project)
        .args(["finish", "--session-id", "s-1", "--client-exit", "130"])
        .run()
        .assert_code(12)
        .assert_stderr_has(&["interrupted", "130"]);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted");
    assert!(state["endedAt"].is_string());
    // Finishing again reports the same end without changing it.
    let before = std::fs::read(project.state_path()).unwrap();
    Ctl::new(&project)
        .args(["finish", "--session-id", "s-1"])
        .run()
        .assert_code(12);
    assert_eq!(std::fs::read(project.state_path()).unwrap(), before);
}

/// A fake client that records its arguments and environment, then exits with `code`.
fn fake_client(project: &TempProject, code: i32) -> String {
    let path = project.path("fake-claude.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n--ARG--\\n' \"$a\"; done > \"$0.args\"\n\
             printf '%s %s\\n' \"$RALPH_ACTIVE\" \"$CLAUDE_CODE_STOP_HOOK_BLOCK_CAP\" > \"$0.env\"\nexit {code}\n"
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn launcher_starts_the_client_with_the_prompt_and_session() {
    let project = TempProject::new("launch");
    project.init();
    project.write_prompt("Unique task text 4711.\n");
    let client = fake_client(&project, 0);
    Launcher::new(&project)
        .args(["--headless", "--", "--model", "sonnet"])
        .env("RALPH_CLAUDE", &client)
        .env("RALPH_MAX_ITERATIONS", "30")
        .run()
        // The fake client never stops through the hook, so the loop was cut short.
        .assert_code(12)
        .assert_stderr_has(&["interrupted"]);
    let args_text = std::fs::read_to_string(format!("{client}.args")).unwrap();
    let args: Vec<&str> = args_text
        .split("\n--ARG--\n")
        .filter(|a| !a.is_empty())
        .collect();
    let state = project.status_json();
    assert_eq!(args[0], "-p");
    assert!(
        args[1].contains("Unique task text 4711.") && args[1].contains("iteration 1 of 30"),
        "{}",
        args[1]
    );
    let rest = &args[2..];
    assert_eq!(
        rest,
        [
            "--output-format",
            "json",
            "--session-id",
            state["sessionId"].as_str().unwrap(),
            "--model",
            "sonnet"
        ]
    );
    let env = std::fs::read_to_string(format!("{client}.env")).unwrap();
    assert_eq!(
        env.trim(),
        "1 35",
        "RALPH_ACTIVE=1 and the block cap raised above the loop's max"
    );
}

#[test]
fn launcher_exit_codes() {
    let project = TempProject::new("launch-codes");
    project.init();
    let client = fake_client(&project, 0);
    Launcher::new(&project).arg("--help").run().assert_code(0);
    Launcher::new(&project).arg("--bogus").run().assert_code(2);
    Launcher::new(&project)
        .arg("--headless")
        .env("RALPH_CLAUDE", "/nonexistent/claude")
        .run()
        .assert_code(127)
        .assert_stderr_has(&["RALPH_CLAUDE"]);
    Launcher::new(&project)
        .arg("--headless")
        .env("RALPH_CLAUDE", &client)
        .env("RALPH_MAX_ITERATIONS", "lots")
        .run()
        .assert_code(1)
        .assert_stderr_has(&["RALPH_MAX_ITERATIONS"]);
    assert!(
        !Path::new(&format!("{client}.args")).exists(),
        "the client never ran"
    );

    Ctl::new(&project).arg("start").run().assert_code(0);
    Launcher::new(&project)
        .arg("--headless")
        .env("RALPH_CLAUDE", &client)
        .run()
        .assert_code(3)
        .assert_stderr_has(&["already running"]);
    // --reset clears the old loop first.
    Launcher::new(&project)
        .args(["--headless", "--reset"])
        .env("RALPH_CLAUDE", &client)
        .run()
        .assert_code(12);
}
