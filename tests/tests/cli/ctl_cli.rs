//! Integration tests of the built `ralph-ctl` and of the launcher, with a
//! fake client where the real one is not the point.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use ralph_tests::bins;
use ralph_tests::cli::{Ctl, Launcher, doctor_row};
use ralph_tests::project::{
    INSTALLED_FILES, Run, TempProject, run_with_timeout, signal_group, signal_process,
    wait_with_timeout,
};
use serde_json::{Value, json};

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
    // Where the hook is, a sentence of its own (`run --task` prints no
    // "Next:" line for it to close).
    run.assert_stdout_has(&[
        "\nThe Stop hook is ",
        ", timeout 90s, registered in .claude/settings.json.\n",
    ]);
    for file in INSTALLED_FILES {
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
    project.write(".claude/ralph/PROMPT.md", "My own task.\n");
    let existing = json!({
        "model": "opus",
        "permissions": {"allow": ["Bash(cargo test)"]},
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]
        }
    });
    project.write(
        ".claude/settings.json",
        serde_json::to_string_pretty(&existing).unwrap(),
    );
    project.init_untouched();
    let merged = settings(&project);
    assert_eq!(merged["model"], "opus");
    assert_eq!(
        merged["permissions"]["allow"],
        existing["permissions"]["allow"]
    );
    let deny = merged["permissions"]["deny"].as_array().unwrap();
    assert!(
        deny.iter().any(|r| r == "Edit(.claude/context/runtime/**)"),
        "the loop's own files are denied to the file tools: {deny:?}"
    );
    assert_eq!(
        merged["hooks"]["PreToolUse"],
        existing["hooks"]["PreToolUse"]
    );
    let stop = merged["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2);
    assert_eq!(stop[0], existing["hooks"]["Stop"][0]);
    assert!(
        stop[1]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("ralph-stop-hook")
    );
    let keys: Vec<_> = merged.as_object().unwrap().keys().cloned().collect();
    assert_eq!(keys, ["model", "permissions", "hooks"], "key order is kept");
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/ralph/PROMPT.md")).unwrap(),
        "My own task.\n"
    );
}

#[test]
fn init_offers_a_worktree_setup_and_writes_it_with_the_test_command() {
    let project = TempProject::new("init-worktree-setup");
    project.write(
        "pyproject.toml",
        "[project]\nname = \"x\"\n\n[project.optional-dependencies]\ntests = [\"pytest\"]\n",
    );
    project.write("uv.lock", "version = 1\n");
    let shown = Ctl::new(&project).arg("init").run();
    shown.assert_code(0);
    shown.assert_stdout_has(&[
        "Worktrees: found uv.lock, which a worktree's check cannot reach",
        "\"worktreeSetup\": \"uv sync --frozen\"",
    ]);
    let written = Ctl::new(&project).args(["init", "--yes"]).run();
    written.assert_code(0);
    written.assert_stdout_has(&["Worktrees: `uv sync --frozen` (worktreeSetup, for uv.lock)"]);
    let config: Value =
        serde_json::from_slice(&std::fs::read(project.path(".claude/ralph/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["worktreeSetup"], "uv sync --frozen");
    // Once configured, nothing more is said of it.
    let again = Ctl::new(&project).args(["init", "--yes"]).run();
    again.assert_code(0);
    assert!(!again.stdout.contains("Worktrees:"), "{}", again.stdout);
}

#[test]
fn init_offers_the_test_command_and_writes_it_only_when_asked() {
    let project = TempProject::new("init-verify");
    project.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let shown = Ctl::new(&project).arg("init").run();
    shown.assert_code(0);
    shown.assert_stdout_has(&[
        "Found the test command `cargo test` (from Cargo.toml)",
        "ralph-ctl init --yes",
    ]);
    assert!(
        !project.path(".claude/ralph/config.json").exists(),
        "only shown"
    );

    let written = Ctl::new(&project).args(["init", "--yes"]).run();
    written.assert_code(0);
    written.assert_stdout_has(&["Completion check: `cargo test` (from Cargo.toml)"]);
    let config: Value =
        serde_json::from_slice(&std::fs::read(project.path(".claude/ralph/config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["verify"],
        json!([{"name": "tests", "command": "cargo test"}])
    );
    let timeout = settings(&project)["hooks"]["Stop"][0]["hooks"][0]["timeout"]
        .as_u64()
        .unwrap();
    assert!(
        timeout >= 90,
        "room for the verify command's 60 s: {timeout}"
    );

    // Kept once configured; replaced by --verify, other keys kept.
    let mut with_other = config.clone();
    with_other["maxIterations"] = json!(7);
    project.write(".claude/ralph/config.json", with_other.to_string());
    let kept = Ctl::new(&project).args(["init", "--yes"]).run();
    kept.assert_code(0);
    kept.assert_stdout_has(&["the 1 verify command(s) of .claude/ralph/config.json (kept)"]);
    Ctl::new(&project)
        .args(["init", "--verify", "make check"])
        .run()
        .assert_code(0);
    let config: Value =
        serde_json::from_slice(&std::fs::read(project.path(".claude/ralph/config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["verify"],
        json!([{"name": "tests", "command": "make check"}])
    );
    assert_eq!(config["maxIterations"], 7);

    // Nothing found: said, with the way to add one.
    let bare = TempProject::new("init-no-tests");
    let none = Ctl::new(&bare).arg("init").run();
    none.assert_code(0);
    none.assert_stdout_has(&["No test command found", "--verify CMD"]);
    // An invalid config.json is not added to.
    project.write(".claude/ralph/config.json", "{\"maxIterations\": \"x\"}");
    Ctl::new(&project)
        .args(["init", "--verify", "true"])
        .run()
        .assert_code(2);
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/ralph/config.json")).unwrap(),
        "{\"maxIterations\": \"x\"}"
    );
}

#[test]
fn init_in_a_terminal_asks_and_enter_accepts_the_test_command() {
    use ralph_tests::interactive::{Key, SIZE, Stderr, Terminal};
    for (answer, written) in [("", true), ("n", false)] {
        let project = TempProject::new("init-ask");
        project.write("go.mod", "module example.com/x\n");
        let mut cmd = project.command(bins::ctl());
        cmd.arg("init");
        let mut term = Terminal::spawn(cmd, SIZE, Stderr::Terminal).unwrap();
        assert!(
            term.wait_for_screen("[Y/n]", Duration::from_secs(10)),
            "{}",
            term.screen()
        );
        assert!(
            term.screen().contains("`go test -v ./...` (from go.mod)"),
            "{}",
            term.screen()
        );
        term.type_text(answer).unwrap();
        term.press(Key::Enter).unwrap();
        let run = term.finish(Duration::from_secs(10));
        assert_eq!(run.code, Some(0), "{run:?}");
        let config = project.path(".claude/ralph/config.json");
        assert_eq!(config.exists(), written, "answer {answer:?}: {run:?}");
        if written {
            let text = std::fs::read_to_string(&config).unwrap();
            assert!(text.contains("go test -v ./..."), "{text}");
        }
    }
}

#[test]
fn init_local_registers_for_this_person_only() {
    let project = TempProject::new("init-local");
    project.init();
    assert!(settings(&project)["hooks"]["Stop"][0]["hooks"][0]["command"].is_string());
    let run = Ctl::new(&project).args(["init", "--local"]).run();
    run.assert_code(0);
    run.assert_stdout_has(&["registered in .claude/settings.local.json"]);
    let local: Value = serde_json::from_slice(
        &std::fs::read(project.path(".claude/settings.local.json")).unwrap(),
    )
    .unwrap();
    assert!(
        local["hooks"]["Stop"][0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .ends_with("ralph-stop-hook")
    );
    assert_eq!(
        settings(&project)["hooks"]["Stop"],
        json!([]),
        "no longer in the shared settings (Claude Code would run both)"
    );
    let ignore = std::fs::read_to_string(project.path(".claude/.gitignore")).unwrap();
    assert!(
        ignore.lines().any(|l| l == "/settings.local.json"),
        "{ignore}"
    );
    // A plain init afterwards keeps it where it is.
    Ctl::new(&project).arg("init").run().assert_code(0);
    assert_eq!(settings(&project)["hooks"]["Stop"], json!([]));
    // Git never sees it, nor the runtime folder once a loop ran.
    Ctl::new(&project).arg("start").run().assert_code(0);
    project.git(&["add", "-A"]);
    let listed = project
        .command("git")
        .args(["ls-files", "--cached"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains(".claude/ralph/PROMPT.md"), "{listed}");
    assert!(
        !listed.contains("settings.local.json") && !listed.contains("context/runtime"),
        "{listed}"
    );
}

#[test]
fn finished_loops_are_kept_in_the_history_not_overwritten() {
    let project = TempProject::new("history");
    project.init();
    let none = Ctl::new(&project).arg("history").run();
    none.assert_code(0);
    none.assert_stdout_has(&["No earlier loops kept"]);
    Ctl::new(&project)
        .args(["start", "--session-id", "first"])
        .run()
        .assert_code(0);
    Ctl::new(&project)
        .args(["finish", "--session-id", "first", "--client-exit", "0"])
        .run();
    Ctl::new(&project)
        .args(["start", "--session-id", "second"])
        .run()
        .assert_code(0);
    Ctl::new(&project)
        .args(["reset", "--force"])
        .run()
        .assert_code(0)
        .assert_stdout_has(&["kept in the history"]);
    Ctl::new(&project)
        .args(["start", "--session-id", "third"])
        .run()
        .assert_code(0);
    let listed = Ctl::new(&project).arg("history").run();
    listed.assert_code(0);
    let first = listed.stdout.find("session first").expect(&listed.stdout);
    let second = listed.stdout.find("session second").expect(&listed.stdout);
    assert!(first < second, "oldest first: {}", listed.stdout);
    listed.assert_stdout_has(&["interrupted"]);
    assert!(
        !listed.stdout.contains("session third"),
        "the current loop is not history yet"
    );
    let json = Ctl::new(&project).args(["history", "--json"]).run();
    let lines: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["state"]["sessionId"], "first");
    assert_eq!(lines[0]["state"]["status"], "interrupted");
    assert_eq!(lines[1]["state"]["sessionId"], "second");
}

#[test]
fn init_refuses_malformed_settings_without_touching_them() {
    let project = TempProject::new("init-bad");
    std::fs::create_dir_all(project.path(".claude")).unwrap();
    project.write(".claude/settings.json", "{\"hooks\": ");
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
fn init_in_the_home_folder_refuses_unless_asked_for_user_wide_settings() {
    let project = TempProject::new("init-home");
    let root = project.root.display().to_string();
    let settings = project.path(".claude/settings.json");
    let shown = settings.display().to_string();
    // The project is the home folder: its .claude/settings.json is Claude
    // Code's user-wide settings file. Nothing is written.
    let home = [("HOME", root.as_str())];
    for args in [
        &["init"][..],
        &["init", "--local"],
        &["run", "--task", "Fix it."],
    ] {
        let run = project.ctl(args, &home);
        assert_eq!(run.code, Some(3), "{args:?}: {run:?}");
        run.assert_stderr_has(&[
            &format!("{root} is your home folder"),
            &format!("{shown} is Claude Code's user-wide settings file"),
            "run `ralph-ctl init` in a project's folder",
            "--user-wide",
        ]);
        assert!(
            !project.path(".claude").exists(),
            "{args:?} wrote something"
        );
    }
    // CLAUDE_CONFIG_DIR naming the project's .claude: the same file.
    let config_dir = project.path(".claude").display().to_string();
    let run = project.ctl(&["init"], &[("CLAUDE_CONFIG_DIR", config_dir.as_str())]);
    assert_eq!(run.code, Some(3), "{run:?}");
    run.assert_stderr_has(&[&format!("CLAUDE_CONFIG_DIR is {config_dir}")]);
    assert!(!settings.exists());
    // Asked for in so many words: installed.
    project.ctl(&["init", "--user-wide"], &home).assert_code(0);
    let text = std::fs::read_to_string(&settings).unwrap();
    assert!(text.contains("ralph-stop-hook"), "{text}");
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
        .assert_stderr_has(&["already running", "ralph-ctl cancel"]);
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

    // A running loop is not reset without asking: `cancel` ends it first,
    // or --force clears it as it is.
    Ctl::new(&project)
        .arg("reset")
        .run()
        .assert_code(3)
        .assert_stderr_has(&["session abc-123 is running", "ralph-ctl cancel", "--force"]);
    assert_eq!(
        project.status_json()["sessionId"],
        "abc-123",
        "a refused reset changes nothing"
    );
    Ctl::new(&project)
        .args(["reset", "--force"])
        .run()
        .assert_code(0);
    assert!(project.state().is_none());
    Ctl::new(&project).arg("start").run().assert_code(0);
    // The person reads what cancel says; only the plugin's /cancel-ralph,
    // whose output the agent reads, tells the agent to stop.
    let cancel = Ctl::new(&project).arg("cancel").run();
    cancel.assert_code(0).assert_stdout_has(&[
        "Ralph loop cancelled at iteration 1 of",
        "Its agent is not sent back to work at its next stop.",
    ]);
    assert!(!cancel.stdout.contains("Stop working"), "{cancel:?}");
    Ctl::new(&project).arg("reset").run().assert_code(0);
    Ctl::new(&project).arg("start").run().assert_code(0);
    Ctl::new(&project)
        .args(["cancel", "--to-agent"])
        .run()
        .assert_code(0)
        .assert_stdout_has(&["it will not go on. Stop working on its task."]);
    Ctl::new(&project).arg("reset").run().assert_code(0);
    assert!(project.state().is_none(), "an ended loop resets at once");
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
    let before = project.state_bytes();
    Ctl::new(&project)
        .args(["finish", "--session-id", "s-1"])
        .run()
        .assert_code(12);
    assert_eq!(project.state_bytes(), before);
}

/// The audit log of `project`.
fn audit_log(project: &TempProject) -> std::path::PathBuf {
    project.path(".claude/context/runtime/ralph-log.jsonl")
}

/// `n` stops of the loop in `project` (session `s-1`), through the hook.
fn stops(project: &TempProject, n: u32) {
    for i in 1..=n {
        let input = json!({
            "session_id": "s-1",
            "cwd": project.root,
            "hook_event_name": "Stop",
            "stop_hook_active": true,
            "last_assistant_message": format!("Step {i} done."),
        });
        let run = project.hook(input.to_string().as_bytes(), &[]);
        run.assert_code(0);
        run.block_answer();
    }
}

#[test]
fn log_shows_the_last_entries_oldest_first() {
    let project = TempProject::new("log");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        ralph_tests::cli::IDLE_STOPS_CONFIG,
    );
    Ctl::new(&project)
        .args(["start", "--session-id", "s-1"])
        .run()
        .assert_code(0);
    stops(&project, 5);

    let all = Ctl::new(&project).arg("log").run();
    all.assert_code(0).assert_no_panic();
    let lines: Vec<&str> = all.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "the start and five stops: {}", all.stdout);
    assert!(
        lines[0].contains("  start  iteration 1  running  started, at most 25 iterations"),
        "{}",
        lines[0]
    );
    for (line, i) in lines[1..].iter().zip(1..) {
        assert!(
            line.contains("  stop   ")
                && line.contains(&format!("iteration {i}  running  iteration {i} ended")),
            "{line}"
        );
    }

    let last = Ctl::new(&project).args(["log", "-n", "2"]).run();
    last.assert_code(0);
    let stops: Vec<&str> = last.stdout.lines().collect();
    assert_eq!(stops.len(), 2, "{}", last.stdout);
    assert!(stops[0].ends_with("iteration 4 ended without a completion claim"));
    assert!(stops[1].ends_with("iteration 5 ended without a completion claim"));

    let json = Ctl::new(&project).args(["log", "--json", "-n", "3"]).run();
    json.assert_code(0);
    assert_eq!(json.stderr, "");
    let entries: Vec<Value> = json
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let iterations: Vec<&Value> = entries.iter().map(|e| &e["iteration"]).collect();
    assert_eq!(iterations, [&json!(3), &json!(4), &json!(5)]);
    for entry in &entries {
        assert_eq!(entry["event"], "stop");
        assert_eq!(entry["decision"], "block");
        assert_eq!(entry["sessionId"], "s-1");
    }

    Ctl::new(&project)
        .args(["log", "-n", "0"])
        .run()
        .assert_code(2)
        .assert_stderr_has(&["--entries", "0"])
        .assert_no_panic();
}

#[test]
fn log_without_a_log_says_so() {
    let project = TempProject::new("log-none");
    project.init();
    Ctl::new(&project)
        .arg("log")
        .run()
        .assert_code(0)
        .assert_stdout_has(&["No audit log yet", "ralph-log.jsonl"]);
    let json = Ctl::new(&project).args(["log", "--json"]).run();
    json.assert_code(0).assert_stderr_has(&["No audit log yet"]);
    assert_eq!(json.stdout, "", "a JSON reader gets no lines");
}

#[test]
fn an_unreadable_log_is_one_error_line() {
    let project = TempProject::new("log-bad");
    project.init();
    let log = audit_log(&project);
    std::fs::create_dir_all(&log).unwrap();
    let run = Ctl::new(&project).arg("log").run();
    run.assert_code(1).assert_no_panic();
    assert_eq!(run.stdout, "");
    assert_eq!(
        run.stderr,
        format!(
            "ralph-ctl: cannot read the audit log {}: not a regular file; move the file aside to start a new log\n",
            log.display()
        )
    );

    std::fs::remove_dir(&log).unwrap();
    std::fs::write(&log, vec![b'\n'; 8 * 1024 * 1024 + 1]).unwrap();
    let run = Ctl::new(&project).args(["log", "--json"]).run();
    run.assert_code(1).assert_no_panic();
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    run.assert_stderr_has(&["cannot read the audit log", "larger than 8 MiB"]);
}

#[test]
fn log_into_a_pipe_closed_early_ends_quietly() {
    let project = TempProject::new("log-pipe");
    project.init();
    // Far more output than a pipe holds, so that writes go on after `head` left.
    let reason = "iteration ended without a completion claim; ".repeat(8);
    let entries: Vec<Value> = (1..=3000)
        .map(|i| {
            json!({"at": "2026-03-01T09:00:00Z", "event": "stop", "sessionId": "s-1",
                   "iteration": i, "status": "running", "reason": reason})
        })
        .collect();
    project.write_log(&entries);
    for json in [false, true] {
        let err = project.path(format!("err-{json}"));
        let code = project.path(format!("code-{json}"));
        let mut cmd = project.command("sh");
        cmd.arg("-c")
            .arg(r#"{ "$0" log -n 5000 $1 2>"$2"; echo $? >"$3"; } | head -n 1"#)
            .arg(bins::ctl())
            .arg(if json { "--json" } else { "" })
            .arg(&err)
            .arg(&code);
        let run = run_with_timeout(cmd, None, Duration::from_secs(30));
        run.assert_code(0);
        assert_eq!(run.stdout.lines().count(), 1, "{run:?}");
        assert_eq!(
            std::fs::read_to_string(&err).unwrap(),
            "",
            "nothing on stderr"
        );
        assert_eq!(std::fs::read_to_string(&code).unwrap().trim(), "0");
    }
}

/// A fake client that records its arguments, environment and stdin, then exits with `code`.
fn fake_client(project: &TempProject, code: i32) -> String {
    // The client's first run done in this home: an interactive run is not
    // refused for its screens.
    let config = project.home.join(".claude.json");
    if !config.exists() {
        std::fs::write(&config, r#"{"hasCompletedOnboarding": true}"#).unwrap();
    }
    let path = project.path("fake-claude.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.0.77 (Claude Code)'; exit 0; }}\n\
             for a in \"$@\"; do printf '%s\\n--ARG--\\n' \"$a\"; done > \"$0.args\"\n\
             printf '%s %s\\n' \"$RALPH_ACTIVE\" \"$CLAUDE_CODE_STOP_HOOK_BLOCK_CAP\" > \"$0.env\"\n\
             cat > \"$0.stdin\"\nexit {code}\n"
        ),
    )
    .unwrap();
    make_executable(&path);
    path.display().to_string()
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The arguments the fake client recorded.
fn recorded_args(client: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{client}.args"))
        .unwrap()
        .split("\n--ARG--\n")
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

fn launcher(project: &TempProject, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args(args).envs(env.iter().copied());
    run_with_timeout(cmd, None, std::time::Duration::from_secs(60))
}

/// What the fake client read on stdin.
fn recorded_stdin(client: &str) -> String {
    std::fs::read_to_string(format!("{client}.stdin")).unwrap()
}

#[test]
fn launcher_starts_the_client_with_the_prompt_and_session() {
    let project = TempProject::new("launch");
    project.init();
    project.write_prompt("Unique task text 4711.\n");
    let client = fake_client(&project, 0);
    let run = launcher(
        &project,
        &["--headless", "--no-sandbox", "--", "--model", "sonnet"],
        &[("RALPH_CLAUDE", &client), ("RALPH_MAX_ITERATIONS", "30")],
    );
    // The fake client never stops through the hook, so the loop was cut short.
    run.assert_code(12);
    run.assert_stderr_has(&["interrupted"]);
    let state = project.status_json();
    // Headless: the prompt goes on stdin, never on the command line.
    let args = recorded_args(&client);
    assert_eq!(
        [&args[..6], &args[8..]].concat(),
        [
            "-p",
            // Readable progress is made from the client's events.
            "--output-format",
            "stream-json",
            "--verbose",
            "--session-id",
            state["sessionId"].as_str().unwrap(),
            // Nobody answers prompts in headless mode: edits are accepted.
            "--permission-mode",
            "acceptEdits",
            "--model",
            "sonnet"
        ]
    );
    // No sandbox: the settings keep the agent off ralph's files, and it
    // may run the checks, never git (`git commit -F` reads any file).
    assert_eq!(args[6], "--settings");
    let settings: serde_json::Value = serde_json::from_str(&args[7]).unwrap();
    assert_eq!(settings.get("sandbox"), None, "{settings}");
    let deny = settings["permissions"]["deny"].to_string();
    assert!(
        deny.contains("/.claude/ralph)") && deny.contains("Bash(ralph-ctl say:*)"),
        "{deny}"
    );
    let allow = settings["permissions"]["allow"].to_string();
    assert!(
        allow.contains("ralph-ctl check:*)") && !allow.contains("Bash(git"),
        "{settings}"
    );
    run.assert_stderr_has(&["sandbox: off;"]);
    let stdin = recorded_stdin(&client);
    assert!(
        stdin.contains("Unique task text 4711.") && stdin.contains("iteration 1 of 30"),
        "{stdin}"
    );
    let env = std::fs::read_to_string(format!("{client}.env")).unwrap();
    assert_eq!(
        env.trim(),
        "1 35",
        "RALPH_ACTIVE=1 and the block cap raised above the loop's max"
    );

    // Interactive: a prompt that fits is the first argument, as the person would type it.
    let run = launcher(
        &project,
        &["--", "--model", "sonnet"],
        &[("RALPH_CLAUDE", &client), ("RALPH_MAX_ITERATIONS", "30")],
    );
    run.assert_code(12);
    let args = recorded_args(&client);
    assert!(
        args[0].contains("Unique task text 4711.") && args[0].contains("iteration 1 of 30"),
        "{}",
        args[0]
    );
    assert_eq!(
        [&args[1..3], &args[5..]].concat(),
        [
            "--session-id",
            project.status_json()["sessionId"].as_str().unwrap(),
            "--model",
            "sonnet"
        ]
    );
    // Interactive: no sandbox (the person answers), the deny rules all the same.
    assert_eq!(args[3], "--settings");
    assert!(
        args[4].contains("/.claude/ralph)") && !args[4].contains("sandbox"),
        "{}",
        args[4]
    );
    assert_eq!(recorded_stdin(&client), "", "stdin stays the terminal's");
}

#[test]
fn the_block_cap_and_ralph_active_are_set_for_the_client_only() {
    let project = TempProject::new("launch-env");
    project.init();
    let client = fake_client(&project, 0);
    for (inherited, want) in [("8", "30"), ("0", "0"), ("100", "100"), ("many", "many")] {
        launcher(
            &project,
            &["--headless"],
            &[
                ("RALPH_CLAUDE", &client),
                ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", inherited),
            ],
        )
        .assert_code(12);
        let env = std::fs::read_to_string(format!("{client}.env")).unwrap();
        assert_eq!(env.trim(), format!("1 {want}"), "inherited {inherited}");
    }
}

#[test]
fn a_prompt_near_its_size_limit_reaches_the_client_intact() {
    let project = TempProject::new("launch-large");
    project.init();
    // 950 KiB of many distinct lines: far past the 128 KiB a single argument may hold.
    let mut prompt = String::from("BEGIN-OF-TASK\n");
    let mut n = 0;
    while prompt.len() < 950 * 1024 {
        prompt.push_str(&format!("line {n}: fix finding {n} in module {}\n", n % 97));
        n += 1;
    }
    prompt.push_str("END-OF-TASK\n");
    project.write_prompt(&prompt);
    let client = fake_client(&project, 0);
    for mode in [&["--headless"][..], &[][..]] {
        let run = launcher(&project, mode, &[("RALPH_CLAUDE", &client)]);
        run.assert_code(12);
        assert!(
            !run.stderr.contains("Argument list too long"),
            "{}",
            run.stderr
        );
        let stdin = recorded_stdin(&client);
        assert!(
            stdin.len() > prompt.len(),
            "{mode:?}: {} bytes",
            stdin.len()
        );
        assert!(
            stdin.contains(&prompt),
            "{mode:?}: the whole PROMPT.md arrives, byte for byte"
        );
        let args = recorded_args(&client);
        // ralph's `--settings` (its rules name the project's paths) may be
        // long; no argument holds the prompt.
        let settings = args.iter().position(|a| a == "--settings").map(|i| i + 1);
        assert!(
            args.iter()
                .enumerate()
                .all(|(i, a)| !a.contains("END-OF-TASK") && (Some(i) == settings || a.len() < 1024)),
            "{mode:?}: no argument carries the prompt"
        );
        assert!(args.contains(&"--session-id".to_string()), "{args:?}");
    }
}

#[test]
fn client_arguments_after_the_double_dash_pass_through_unchanged() {
    let project = TempProject::new("launch-args");
    project.init();
    let client = fake_client(&project, 0);
    let odd = [
        "a b",
        "it's",
        "",
        "--",
        "$HOME",
        "*",
        "--headless",
        "line\nbreak",
        "\"quoted\"",
    ];
    let mut args = vec!["--headless", "--"];
    args.extend(odd);
    // RALPH_CLAUDE may be a command with arguments of its own.
    let spec = format!("/bin/sh {client}");
    launcher(&project, &args, &[("RALPH_CLAUDE", &spec)]).assert_code(12);
    let recorded = std::fs::read_to_string(format!("{client}.args")).unwrap();
    let recorded: Vec<&str> = recorded.split("\n--ARG--\n").collect();
    // (the last element is what follows the final separator: nothing)
    // After -p, the output format, the session, ralph's settings and the
    // permission mode.
    assert_eq!(&recorded[10..recorded.len() - 1], odd);
    assert_eq!(recorded[0], "-p");
}

#[test]
fn launcher_installed_from_a_path_with_a_quote_and_a_space() {
    let project = TempProject::new("launch-quote");
    let dir = project.tmp.join("x").join("it's a dir");
    std::fs::create_dir_all(&dir).unwrap();
    for bin in [bins::ctl(), bins::hook()] {
        let to = dir.join(bin.file_name().unwrap());
        std::fs::copy(&bin, &to).unwrap();
        make_executable(&to);
    }
    let ctl = dir.join("ralph-ctl");
    let mut init = project.command(&ctl);
    init.arg("init");
    run_with_timeout(init, None, std::time::Duration::from_secs(30)).assert_code(0);
    project.write_prompt(ralph_tests::project::TEST_TASK);
    let text = std::fs::read_to_string(project.path(".claude/ralph/ralph-audit.sh")).unwrap();
    assert!(text.contains("it'\\''s a dir/ralph-ctl'"), "{text}");
    let bat = std::fs::read_to_string(project.path(".claude/ralph/ralph-audit.bat")).unwrap();
    assert!(
        bat.contains(&format!("set \"INSTALLED={}\"", ctl.display())),
        "{bat}"
    );

    // Only the path init wrote can lead to ralph-ctl: no RALPH_CTL, none on PATH.
    let client = fake_client(&project, 0);
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.env("PATH", "/usr/bin:/bin")
        .env("RALPH_CLAUDE", &client)
        .arg("--headless");
    let run = run_with_timeout(cmd, None, std::time::Duration::from_secs(60));
    run.assert_code(12);
    assert!(
        recorded_args(&client).contains(&"--session-id".to_string()),
        "the client ran"
    );

    // The registered hook command runs in a shell, as Claude Code runs it.
    let command = settings(&project)["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(command.contains("it's a dir"), "{command}");
    let mut hook = project.command("sh");
    hook.args(["-c", &command]).env("RALPH_ACTIVE", "1");
    let run = run_with_timeout(hook, Some(b"{}"), std::time::Duration::from_secs(30));
    run.assert_code(0);
    assert!(run.stderr.starts_with("ralph-stop-hook:"), "{}", run.stderr);
}

/// A fake client that records its pid, then waits until a signal: it
/// records which one and exits with 128 + its number.
fn waiting_client(project: &TempProject) -> String {
    let path = project.path("waiting-claude.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         [ \"$1\" = --version ] && { echo '2.0.77 (Claude Code)'; exit 0; }\n\
         trap 'echo TERM > \"$0.got\"; exit 143' TERM\n\
         trap 'echo HUP > \"$0.got\"; exit 129' HUP\n\
         trap 'echo INT > \"$0.got\"; exit 130' INT\n\
         echo $$ > \"$0.pid\"\n\
         while :; do sleep 0.05; done\n",
    )
    .unwrap();
    make_executable(&path);
    path.display().to_string()
}

/// Starts the launcher in its own process group; returns it once the
/// waiting client runs, with the client's pid.
fn launch_and_wait_for_client(
    project: &TempProject,
    client: &str,
    stderr: Stdio,
) -> (std::process::Child, u32) {
    use std::os::unix::process::CommandExt;
    let _ = std::fs::remove_file(format!("{client}.pid"));
    let _ = std::fs::remove_file(format!("{client}.got"));
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.arg("--headless")
        .env("RALPH_CLAUDE", client)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(pid) = std::fs::read_to_string(format!("{client}.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
        {
            return (child, pid);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (_, _, err) = wait_with_timeout(&mut child, Duration::ZERO);
    panic!("the client never started: {err}");
}

#[test]
fn sigterm_and_sighup_to_the_launcher_are_passed_on_and_recorded() {
    let project = TempProject::new("launch-signals");
    project.init();
    let client = waiting_client(&project);
    for (signal, name, code) in [
        (libc::SIGTERM, "SIGTERM", 143),
        (libc::SIGHUP, "SIGHUP", 129),
    ] {
        let (mut launcher, client_pid) =
            launch_and_wait_for_client(&project, &client, Stdio::piped());
        // To the launcher alone (it became ralph-ctl run): the client only learns of it from there.
        signal_process(launcher.id(), signal);
        let (status, _out, err) = wait_with_timeout(&mut launcher, Duration::from_secs(30));
        assert_eq!(status.and_then(|s| s.code()), Some(code), "{name}: {err}");
        assert_eq!(
            std::fs::read_to_string(format!("{client}.got"))
                .unwrap()
                .trim(),
            &name[3..],
            "the client got {name}"
        );
        assert!(
            !Path::new(&format!("/proc/{client_pid}")).exists(),
            "the client is gone"
        );
        let state = project.status_json();
        assert_eq!(state["status"], "interrupted", "{state:#}");
        let because = state["endedBecause"].as_str().unwrap();
        assert!(
            because.contains(name) && because.contains(&format!("code {code}")),
            "{because}"
        );
        assert!(
            err.contains("loop interrupted") && err.contains(name),
            "{err}"
        );
    }
    // The loop the closed terminal (SIGHUP) interrupted goes on with
    // `run --resume`: the same loop, at the same iteration, taken up again.
    let quick = fake_client(&project, 0);
    let before = project.status_json();
    let resumed = launcher(
        &project,
        &["--headless", "--resume"],
        &[("RALPH_CLAUDE", &quick)],
    );
    assert!(!resumed.stderr.contains("refused"), "{resumed:?}");
    let after = project.status_json();
    assert_eq!(after["sessionId"], before["sessionId"], "{after:#}");
    assert_eq!(after["iteration"], before["iteration"], "{after:#}");
    let resume = project.log_line("resume");
    assert!(resume.contains("\"status\":\"running\""), "{resume}");
    assert!(
        !recorded_stdin(&quick).is_empty(),
        "the client was started again"
    );
    // The interrupted loop does not block the next one: no reset needed.
    launcher(&project, &["--headless"], &[("RALPH_CLAUDE", &quick)]).assert_code(12);
}

#[test]
fn a_launcher_started_under_nohup_keeps_going_on_sighup() {
    // `nohup ralph-ctl run …`: the hangup a closing terminal sends is
    // ignored, as nohup asked, and the loop goes on.
    use std::os::unix::process::CommandExt;
    let project = TempProject::new("launch-nohup");
    project.init();
    let client = waiting_client(&project);
    let mut cmd = project.command("nohup");
    cmd.arg(project.path(".claude/ralph/ralph-audit.sh"))
        .arg("--headless")
        .env("RALPH_CLAUDE", &client)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Path::new(&format!("{client}.pid")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_process(launcher.id(), libc::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    let state = project.status_json();
    assert_eq!(state["status"], "running", "{state:#}");
    assert!(
        launcher.try_wait().unwrap().is_none(),
        "the launcher still runs"
    );
    // Ctrl-C is still a stop.
    signal_process(launcher.id(), libc::SIGINT);
    let (status, _out, err) = wait_with_timeout(&mut launcher, Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    assert_eq!(project.status_json()["status"], "interrupted");
}

#[test]
fn a_launcher_killed_outright_leaves_no_loop_running() {
    // SIGKILL (or a closed terminal, a reboot) gives the launcher no chance
    // to record the end: its watchdog ends the client, the loop is known to
    // have ended once neither lives, and the next start needs no reset.
    let project = TempProject::new("launch-killed");
    project.init();
    let client = waiting_client(&project);
    let (mut launcher, client_pid) = launch_and_wait_for_client(&project, &client, Stdio::piped());
    // Whatever happens below, no waiting client outlives the test.
    struct KillOnDrop(u32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            signal_process(self.0, libc::SIGKILL);
        }
    }
    let _client_guard = KillOnDrop(client_pid);
    // The launcher records its client just after starting it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while project.status_json()["carriers"]["client"]["pid"] != client_pid
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let state = project.status_json();
    assert_eq!(state["status"], "running", "{state:#}");
    assert_eq!(
        state["carriers"]["driver"]["pid"],
        launcher.id(),
        "{state:#}"
    );
    assert_eq!(state["carriers"]["client"]["pid"], client_pid, "{state:#}");
    // While they live, the loop is theirs: no start, no second driver.
    let start = project.ctl(&["start"], &[]);
    assert_eq!(start.code, Some(3), "{start:?}");
    let resume = project.ctl(
        &["run", "--resume", "--headless"],
        &[("RALPH_CLAUDE", &client)],
    );
    assert_eq!(resume.code, Some(3), "{resume:?}");
    assert!(
        resume.stderr.contains(&format!(
            "running under ralph-ctl run (pid {})",
            launcher.id()
        )),
        "{resume:?}"
    );

    // The launcher killed outright: its watchdog ends the client, and
    // then nothing carries the loop.
    signal_process(launcher.id(), libc::SIGKILL);
    launcher.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{client_pid}")).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !Path::new(&format!("/proc/{client_pid}")).exists(),
        "the client (pid {client_pid}) outlived its launcher"
    );
    // Shown as interrupted, never recorded by a read-only command.
    let status = project.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains("interrupted: its driver is gone"),
        "{status:?}"
    );
    assert_eq!(project.status_json()["status"], "running");
    // The next change (here `cancel`) records it.
    project.ctl(&["cancel"], &[]).assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    let because = state["endedBecause"].as_str().unwrap();
    assert!(
        because.contains(&format!(
            "its launcher (ralph-ctl run, pid {}) and Claude Code (pid {client_pid}) disappeared",
            launcher.id()
        )),
        "{because}"
    );
    assert!(state.get("carriers").is_none(), "{state:#}");
    let log = std::fs::read_to_string(audit_log(&project)).unwrap();
    assert!(
        log.lines().last().unwrap().contains("\"event\":\"end\""),
        "{log}"
    );
    // The next start goes ahead without a reset.
    project.ctl(&["start"], &[]).assert_code(0);
}

#[test]
fn ctrl_c_reaches_the_client_from_the_terminal_and_is_recorded() {
    let project = TempProject::new("launch-ctrl-c");
    project.init();
    let client = waiting_client(&project);
    let (mut launcher, _) = launch_and_wait_for_client(&project, &client, Stdio::piped());
    // What a terminal does on Ctrl-C: SIGINT to the whole foreground process group.
    signal_group(launcher.id(), libc::SIGINT);
    let (status, _out, err) = wait_with_timeout(&mut launcher, Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    assert_eq!(
        std::fs::read_to_string(format!("{client}.got"))
            .unwrap()
            .trim(),
        "INT",
        "the client got it once, from the group"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted");
    assert!(
        state["endedBecause"].as_str().unwrap().contains("SIGINT"),
        "{state:#}"
    );
}

#[test]
fn the_end_is_recorded_when_the_terminal_is_gone() {
    let project = TempProject::new("launch-hangup");
    project.init();
    let client = waiting_client(&project);
    // stderr is a pipe whose reader has gone: every write fails (EPIPE), as on a closed terminal.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let (mut launcher, _) = launch_and_wait_for_client(&project, &client, writer.into());
    signal_process(launcher.id(), libc::SIGHUP);
    let (status, _out, _err) = wait_with_timeout(&mut launcher, Duration::from_secs(30));
    assert_eq!(status.and_then(|s| s.code()), Some(129));
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    assert!(state["endedBecause"].as_str().unwrap().contains("SIGHUP"));
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

    // Found, but it cannot start (its interpreter is missing): the loop it
    // started is not left running.
    let broken = project.path("broken-claude");
    std::fs::write(&broken, "#!/nonexistent/interpreter\n").unwrap();
    make_executable(&broken);
    let run = launcher(
        &project,
        &["--headless"],
        &[("RALPH_CLAUDE", broken.to_str().unwrap())],
    );
    run.assert_code(127);
    run.assert_stderr_has(&["cannot start the Claude Code client"]);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted");
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("could not start"),
        "{state:#}"
    );

    project.ctl(&["start"], &[]).assert_code(0);
    let busy = launcher(&project, &["--headless"], &[("RALPH_CLAUDE", &client)]);
    busy.assert_code(3);
    busy.assert_stderr_has(&["already running"]);
    // --reset clears the old loop first.
    Launcher::new(&project)
        .args(["--headless", "--reset"])
        .env("RALPH_CLAUDE", &client)
        .run()
        .assert_code(12);
}

#[test]
fn commands_in_a_subfolder_work_on_the_project_above() {
    let project = TempProject::new("subfolder");
    let sub = project.path("src/deep");
    std::fs::create_dir_all(&sub).unwrap();
    project.init();
    // Installed: init in a subfolder goes on with the project above.
    let mut init = project.command(bins::ctl());
    init.arg("init").current_dir(&sub);
    let run = run_with_timeout(init, None, Duration::from_secs(30));
    run.assert_code(0);
    assert!(
        run.stdout.contains(&format!("{}", project.root.display())),
        "{run:?}"
    );
    assert!(!sub.join(".claude").exists());
    project.write_prompt("Do the task.\n");
    project
        .ctl(&["start", "--session-id", "s-1"], &[])
        .assert_code(0);
    for args in [&["status", "--json"][..], &["log", "--json"]] {
        let mut cmd = project.command(bins::ctl());
        cmd.args(args).current_dir(&sub);
        let run = run_with_timeout(cmd, None, Duration::from_secs(30));
        run.assert_code(0);
        assert!(run.stdout.contains("s-1"), "{args:?}: {run:?}");
    }
    // The nearest installed project wins over the one above it.
    let inner = project.path("packages/app");
    std::fs::create_dir_all(inner.join("src")).unwrap();
    let mut init = project.command(bins::ctl());
    init.arg("--project").arg(&inner).arg("init");
    run_with_timeout(init, None, Duration::from_secs(30)).assert_code(0);
    let mut status = project.command(bins::ctl());
    status.arg("status").current_dir(inner.join("src"));
    let run = run_with_timeout(status, None, Duration::from_secs(30));
    run.assert_code(0);
    assert!(
        run.stdout
            .contains(&format!("No Ralph loop in {}", inner.display())),
        "{run:?}"
    );
}

#[test]
fn a_project_folder_that_does_not_exist_is_refused_not_created() {
    let project = TempProject::new("no-such-project");
    let missing = project.tmp.join("missing");
    for args in [&["init"][..], &["status"], &["start"]] {
        let mut cmd = project.command(bins::ctl());
        cmd.arg("--project").arg(&missing).args(args);
        let run = run_with_timeout(cmd, None, Duration::from_secs(30));
        assert_eq!(run.code, Some(2), "{args:?}: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("--project {}", missing.display()))
                && run.stderr.contains("pass an existing project folder"),
            "{run:?}"
        );
        assert!(!missing.exists(), "{args:?}");
    }
}

/// A project with a loop of session `s-1` started, whose `notify` adds
/// each summary to the file `notified` in the project; returns that file.
fn started_with_notify(project: &TempProject) -> PathBuf {
    project.init();
    project.write_prompt("Do the task.\n");
    let marker = project.path("notified");
    project.write(
        ".claude/ralph/config.json",
        format!(
            r#"{{"maxIterations": 5, "notify": "cat >> '{}'"}}"#,
            marker.display()
        ),
    );
    project
        .ctl(&["start", "--session-id", "s-1"], &[])
        .assert_code(0);
    marker
}

/// The loop's state as a command of the agent's could leave it:
/// `complete`, with an accepted claim, and no MAC (a state ralph did not
/// write, whatever it holds).
fn forge_completion(project: &TempProject) {
    let mut state = project.state().unwrap();
    state.as_object_mut().unwrap().remove("mac");
    state["status"] = json!("complete");
    state["endedBecause"] = json!("completion claimed in iteration 1 and accepted");
    state["lastClaim"] = json!({"iteration": state["iteration"], "at": "2026-11-24T10:00:00Z",
        "mode": "strict", "basis": "forged", "accepted": true, "gates": [], "verification": []});
    let path = project.state_path();
    std::fs::write(&path, serde_json::to_vec_pretty(&state).unwrap()).unwrap();
}

const NOT_RALPHS: &str = "was not written by ralph on this machine";

/// Whether `notify` told of a loop's ending (a refused run's notice is not one).
fn told_an_ending(marker: &Path) -> bool {
    std::fs::read_to_string(marker).is_ok_and(|t| t.contains("\"event\":\"ended\""))
}

#[test]
fn a_complete_state_ralph_did_not_write_is_never_reported_complete() {
    let project = TempProject::new("unsigned");
    let marker = started_with_notify(&project);
    forge_completion(&project);

    // `status` says plainly whose record it is not, and what to do.
    let status = project.ctl(&["status"], &[]);
    assert_eq!(status.code, Some(1), "{status:?}");
    assert!(
        status.stdout.contains(NOT_RALPHS) && status.stdout.contains("ralph-ctl reset"),
        "{status:?}"
    );
    assert!(
        !status.stdout.contains("accepted") && !status.stdout.contains("\"status\""),
        "nothing the state says is shown: {status:?}"
    );
    let json = project.ctl(&["status", "--json"], &[]);
    let json: Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(json["status"].is_null(), "{json:#}");
    assert!(json["error"].as_str().unwrap().contains(NOT_RALPHS));

    // The launcher's end: no `complete`, no exit 0.
    let finish = project.ctl(&["finish", "--session-id", "s-1"], &[]);
    assert_ne!(finish.code, Some(0), "{finish:?}");
    assert!(
        finish.stderr.contains(NOT_RALPHS) && !finish.stderr.contains("loop complete"),
        "{finish:?}"
    );
    // `run --resume` refuses it, naming the fix, and starts no client.
    let client = fake_client(&project, 0);
    let resume = project.ctl(
        &["run", "--resume", "--headless", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    assert_ne!(resume.code, Some(0), "{resume:?}");
    assert!(
        resume.stderr.contains(NOT_RALPHS) && resume.stderr.contains("ralph-ctl reset"),
        "{resume:?}"
    );
    assert!(
        !Path::new(&format!("{client}.args")).exists(),
        "a client ran"
    );
    let report = project.ctl(&["report", "--html", "report.html"], &[]);
    assert_ne!(report.code, Some(0), "{report:?}");
    assert!(report.stderr.contains(NOT_RALPHS), "{report:?}");
    assert!(
        !told_an_ending(&marker),
        "notify ran for a completion ralph never saw"
    );

    // Reset starts over.
    project.ctl(&["reset"], &[]).assert_code(0);
    let status = project.ctl(&["status"], &[]);
    assert_eq!(status.code, Some(0), "{status:?}");
    assert!(status.stdout.contains("No Ralph loop"), "{status:?}");
}

/// Panics unless `run` refused the key `named` (a file or a folder) for
/// `reason`, naming it and the fix.
fn refused_key(run: &ralph_tests::project::Run, named: &Path, reason: &str) {
    let named = named.display();
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("{named} is refused: {reason}"))
            && run
                .stderr
                .contains(&format!("`mv {named} {named}.refused`"))
            && run.stderr.contains("ralph-ctl reset"),
        "{run:?}"
    );
}

#[test]
fn a_key_ralph_did_not_make_is_refused_naming_the_file_and_the_fix() {
    use std::os::unix::fs::PermissionsExt;
    let project = TempProject::with_loop("bad-key", "s-1", 5);
    let keys = project.key_dir();
    let key = keys.join("record.key");
    let state = project.state_bytes();
    // Readable by others.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let status = project.ctl(&["status"], &[]);
    refused_key(
        &status,
        &key,
        "its mode is 644, not 600: others can read it",
    );
    let start = project.ctl(&["start", "--force"], &[]);
    refused_key(&start, &key, "its mode is 644, not 600: others can read it");
    assert_eq!(project.state_bytes(), state, "nothing was replaced");
    // A link to a key kept elsewhere.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let elsewhere = project.tmp.join("a-key-elsewhere");
    std::fs::rename(&key, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &key).unwrap();
    let status = project.ctl(&["status"], &[]);
    refused_key(
        &status,
        &key,
        "it is a symbolic link, not the file ralph made",
    );
    // Put back as ralph made it: believed again.
    std::fs::remove_file(&key).unwrap();
    std::fs::rename(&elsewhere, &key).unwrap();
    project.ctl(&["status"], &[]).assert_code(0);

    // A key folder made before ralph's first start, open to others: no
    // loop starts, and no key is made in it.
    let fresh = TempProject::new("planted-key-folder");
    fresh.init();
    fresh.write_prompt("Improve the project.\n");
    let planted = fresh.key_dir();
    std::fs::create_dir_all(&planted).unwrap();
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    let start = fresh.ctl(&["start"], &[]);
    refused_key(&start, &planted, "its mode is 777, not 700");
    assert!(!planted.join("record.key").exists());
    assert!(!fresh.state_path().exists(), "no loop started");
}

#[test]
fn an_earlier_audit_log_put_back_is_said_to_be_stale() {
    let project = TempProject::with_loop("stale-log", "s-1", 5);
    let log = project.path(".claude/context/runtime/ralph-log.jsonl");
    let earlier = std::fs::read(&log).unwrap();
    project
        .ctl(&["say", "look at the parser"], &[])
        .assert_code(0);
    std::fs::write(&log, &earlier).unwrap();
    let stale = "ralph-log.jsonl is stale: its last line is number";
    let status = project.ctl(&["status"], &[]);
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.starts_with("  log:") && l.contains(stale) && l.contains("ralph-ctl reset")),
        "{status:?}"
    );
    let shown = project.ctl(&["log"], &[]);
    assert!(shown.stdout.contains(stale), "{shown:?}");
    // The next line ralph appends makes it current again.
    project.ctl(&["say", "and the lexer"], &[]).assert_code(0);
    let status = project.ctl(&["status"], &[]);
    assert!(!status.stdout.contains(stale), "{status:?}");
}

#[test]
fn a_client_that_edits_the_state_and_the_log_does_not_end_the_loop_complete() {
    // The agent's command (outside any sandbox) turns the state `complete`
    // in place, keeping its MAC, and appends an `end` line in the log's
    // shape: the launcher believes neither. (It waits a second first: the
    // launcher records the client it started, and an edit made before that
    // write would be replaced by it.)
    let project = TempProject::new("edited");
    let marker = started_with_notify(&project);
    let state = project.state_path().display().to_string();
    let log = project.path(".claude/context/runtime/ralph-log.jsonl");
    let line = r#"{"at":"2026-11-24T10:00:00Z","event":"end","sessionId":"SID","iteration":1,"status":"complete","reason":"done"}"#;
    let client = project.path("forging-claude.sh");
    std::fs::write(
        &client,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.0.77 (Claude Code)'; exit 0; }}\n\
             cat > /dev/null\n\
             sleep 1\n\
             sed -i 's/\"status\": \"running\"/\"status\": \"complete\"/' '{state}'\n\
             sid=$(sed -n 's/.*\"sessionId\": \"\\([^\"]*\\)\".*/\\1/p' '{state}' | head -n 1)\n\
             echo '{line}' | sed \"s/SID/$sid/\" >> '{}'\n\
             exit 0\n",
            log.display()
        ),
    )
    .unwrap();
    make_executable(&client);
    let run = launcher(
        &project,
        &["--headless", "--no-sandbox", "--resume"],
        &[("RALPH_CLAUDE", client.to_str().unwrap())],
    );
    assert!(
        std::fs::read_to_string(project.state_path())
            .unwrap()
            .contains("\"status\": \"complete\""),
        "the edit took: {run:?}"
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(!run.closing_line().contains("complete"), "{run:?}");
    assert!(run.stderr.contains(NOT_RALPHS), "{run:?}");
    let log = project.ctl(&["log"], &[]);
    assert!(
        log.stdout.contains("1 line of the audit log not shown"),
        "{log:?}"
    );
    assert!(
        !told_an_ending(&marker),
        "notify ran for a completion ralph never saw"
    );
}

#[test]
fn init_with_a_reader_that_goes_away_installs_everything_without_a_panic() {
    // `ralph-ctl init | head -1`: the pipe closes after the first line.
    let project = TempProject::new("init-pipe");
    let mut child = project
        .command(bins::ctl())
        .arg("init")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    for file in INSTALLED_FILES {
        assert!(project.path(file).is_file(), "{file}");
    }
}

#[test]
fn init_with_an_invalid_settings_json_writes_nothing() {
    let project = TempProject::new("init-bad-settings");
    std::fs::create_dir_all(project.path(".claude")).unwrap();
    project.write(".claude/settings.json", "{bad json");
    let run = project.ctl(&["init"], &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains("settings.json cannot be updated: it is not valid JSON"),
        "{run:?}"
    );
    assert!(!project.path(".claude/ralph").exists(), "{run:?}");
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/settings.json")).unwrap(),
        "{bad json"
    );
}

#[test]
fn a_task_dry_run_says_what_the_run_would_set_up_and_writes_nothing() {
    let project = TempProject::new("task-dry-run");
    project.write("calc.py", "def add(a, b):\n    return a - b\n");
    project.write(
        "tests/test_calc.py",
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    \
         def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n",
    );
    let task = "Fix add() in calc.py.";
    let dry_run = |project: &TempProject| {
        project.ctl(
            &["run", "--task", task, "--dry-run"],
            &[("RALPH_CLAUDE", "true")],
        )
    };
    // Not installed yet: the install and its check are said, not done.
    let before = snapshot(&project.root);
    let dry = dry_run(&project);
    dry.assert_code(0).assert_stdout_has(&[
        "ralph is not installed here: a real run first installs it, as `ralph-ctl init` does",
        "Completion check: `python3 -m unittest discover -s tests` (from the unittest files in \
         tests/), asked in a terminal, taken without one",
        "The task would go into .claude/ralph/PROMPT.md; this dry run writes nothing.",
        "ralph dry run: nothing was started",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
    assert!(!dry.stdout.contains("still the template"), "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    // Installed, with a task of its own: that task stays where it is.
    project.init();
    let before = snapshot(&project.root);
    let dry = dry_run(&project);
    dry.assert_code(0).assert_stdout_has(&[
        "(the earlier task there kept in .claude/context/runtime/PROMPT.previous.md)",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
    assert!(!dry.stdout.contains("not installed"), "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    assert!(project.state().is_none(), "a dry run starts nothing");
    // The command line's settings reach the client (and its Stop hook) as
    // variables, as a real run gives them; the preview's task file does not.
    let dry = project.ctl(
        &[
            "run",
            "--task",
            task,
            "--max-iterations",
            "3",
            "--no-sandbox",
            "--dry-run",
        ],
        &[("RALPH_CLAUDE", "true")],
    );
    let env = dry
        .stdout
        .lines()
        .find(|l| l.starts_with("environment for the client:"))
        .unwrap_or_else(|| panic!("{dry:?}"));
    assert!(
        env.contains("RALPH_MAX_ITERATIONS=3") && env.contains("RALPH_SANDBOX=off"),
        "{env}"
    );
    assert!(!env.contains("RALPH_PROMPT_FILE"), "{env}");
    dry.assert_stdout_has(&[
        "[Ralph loop: iteration 1 of 3]",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
}

#[test]
fn a_queue_dry_run_lists_the_items_and_shows_the_first_one_s_text_once() {
    let project = TempProject::new("queue-dry-run");
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] add a greeting\n  say hello in hello.txt\n- [ ] add a farewell\n- [x] done already\n",
    );
    project.commit_all("the plan");
    project.init();
    let before = snapshot(&project.root);
    let dry = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--workers",
            "2",
            "--dry-run",
        ],
        &[("RALPH_CLAUDE", "true")],
    );
    dry.assert_code(0).assert_stdout_has(&[
        "ralph dry run: nothing was started and no state was changed (a queue run: 2 worker(s) \
         drain plan:PLAN.md (2 item(s) to work now: \"add a greeting\", \"add a farewell\"",
        "at most 5 iteration(s), in a new git worktree under .claude/worktrees",
        "[Ralph loop: iteration 1 of 5]",
        "## Your item: add a greeting\n\nsay hello in hello.txt\n",
    ]);
    assert!(!dry.stdout.contains("still the template"), "{dry:?}");
    assert_eq!(dry.stdout.matches("## Your item:").count(), 1, "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    assert!(project.state().is_none(), "a dry run starts nothing");
    // Interactive, the text goes as an argument: it is shown once all the same.
    project.write_prompt("Tidy the README.");
    let dry = project.ctl(&["run", "--dry-run"], &[("RALPH_CLAUDE", "true")]);
    dry.assert_code(0);
    assert_eq!(dry.stdout.matches("Tidy the README.").count(), 1, "{dry:?}");
}

#[test]
fn init_writes_a_starter_formula_that_a_dry_run_shows() {
    let project = TempProject::new("init-formula");
    project.init();
    let init = project.ctl(&["init", "--formula", "feature"], &[]);
    init.assert_code(0);
    let file = project.path(".claude/ralph/formulas/feature.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("name: feature") && text.contains("model: opus"),
        "{text}"
    );
    // An existing formula is the person's: kept as it is.
    std::fs::write(&file, text.replace("Plan the task", "Plan it")).unwrap();
    project
        .ctl(&["init", "--formula", "feature"], &[])
        .assert_code(0);
    assert!(std::fs::read_to_string(&file).unwrap().contains("Plan it"));
    let dry = project.ctl(
        &["run", "--formula", "feature", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    dry.assert_code(0);
    dry.assert_stdout_has(&[
        "formula feature, step 1/3 plan",
        "'--model' 'opus'",
        "Plan it",
    ]);
    assert!(project.state().is_none(), "a dry run starts nothing");
}

#[test]
fn doctor_passes_after_init_and_names_a_hook_that_points_nowhere() {
    let project = TempProject::new("doctor");
    project.init();
    // A client that says a tested version.
    let client = project.path("fake-claude");
    std::fs::write(&client, "#!/bin/sh\necho '2.1.330 (Claude Code)'\n").unwrap();
    std::fs::set_permissions(&client, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = [
        ("RALPH_CLAUDE", client.to_str().unwrap()),
        ("ANTHROPIC_API_KEY", "sk-test-key-for-the-doctor-check"),
    ];
    // A home where Claude Code never ran, with a key: ready for headless
    // runs, the first run still to do for interactive ones.
    let fresh = project.ctl(&["doctor"], &env);
    fresh.assert_code(0);
    fresh.assert_stdout_has(&[
        // init without --yes writes no config.json.
        "config.json does not exist: the defaults apply",
        "ok    login: logs in with the ANTHROPIC_API_KEY variable",
        "warn  first run: Claude Code has never run in this home",
        "interactive runs will show the first-run screens (headless runs do not)",
        "fix: run `claude` once in a terminal",
        "ready for headless runs",
    ]);
    let interactive = project.ctl(&["doctor", "--interactive"], &env);
    interactive.assert_code(1);
    interactive.assert_stdout_has(&[
        "FAIL  first run: Claude Code has never run in this home",
        "FAIL  folder trust: this folder is not trusted yet",
        "not ready for interactive runs: 2 problem(s)",
    ]);
    // What the client's first run leaves: onboarding done, the key
    // approved, the folder trusted.
    ralph_tests::interactive::write_first_run_config(
        &project.home,
        &project.root,
        "sk-test-key-for-the-doctor-check",
    );
    let doctor = project.ctl(&["doctor"], &env);
    doctor.assert_code(0);
    doctor.assert_stdout_has(&[
        "ok    first run: done",
        "ok    login: logs in with the ANTHROPIC_API_KEY variable",
        "ok    folder trust",
    ]);
    doctor.assert_stdout_has(&["ok    hook:", "ready for headless runs"]);
    project
        .ctl(&["doctor", "--interactive"], &env)
        .assert_code(0)
        .assert_stdout_has(&["ready for interactive runs"]);
    // The registered hook moved away: named, and the exit code says so.
    let settings = project.path(".claude/settings.json");
    let text = std::fs::read_to_string(&settings).unwrap();
    let hook = bins::hook().display().to_string();
    std::fs::write(&settings, text.replace(&hook, "/nowhere/ralph-stop-hook")).unwrap();
    let report = project
        .ctl(&["doctor", "--json"], &env)
        .assert_code(1)
        .json();
    assert_eq!(report["ok"], false);
    let hook_check = &report["checks"][0];
    assert_eq!(hook_check["verdict"], "fail", "{report:#}");
    let detail = hook_check["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("/nowhere/ralph-stop-hook"), "{report:#}");
}

#[test]
fn doctor_tells_a_2_0_client_s_user_that_the_plugin_loop_needs_2_1() {
    // Claude Code 2.0's terminal UI answers a bare /ralph-loop "Unknown slash
    // command" and runs no hook of ralph's: doctor is where ralph can say so.
    let project = TempProject::new("doctor-2-0");
    project.init();
    let client = project.path("fake-claude");
    for (version, said) in [("2.0.77", true), ("2.1.330", false)] {
        std::fs::write(
            &client,
            format!("#!/bin/sh\necho '{version} (Claude Code)'\n"),
        )
        .unwrap();
        make_executable(&client);
        let doctor = project.ctl(&["doctor"], &[("RALPH_CLAUDE", client.to_str().unwrap())]);
        let line = doctor
            .stdout
            .lines()
            .find(|l| l.starts_with("ok    client:"))
            .unwrap_or_else(|| panic!("{}", doctor.stdout))
            .to_string();
        assert_eq!(
            line.contains(
                "its sessions cannot run the plugin's /ralph-loop (it needs Claude Code 2.1 or later; \
                 2.0's terminal UI answers a bare /ralph-loop \"Unknown slash command\", and \
                 /ralph:ralph-loop says why it cannot start): loop with ralph-ctl run"
            ),
            said,
            "{version}: {line}"
        );
    }
}

#[test]
fn doctor_before_any_setup_names_the_one_command_and_the_tests_it_found() {
    // A project ralph is not installed in yet, with a test script: each
    // fix names the quick start's command, and the check it would take.
    let project = TempProject::new("doctor-bare");
    project.write(
        "package.json",
        r#"{"name": "sum", "scripts": {"test": "node --test"}}"#,
    );
    let doctor = project.ctl(&["doctor"], &[("RALPH_CLAUDE", "true")]);
    doctor.assert_stdout_has(&[
        "hook: ",
        "fix: `ralph-ctl run --task \"TEXT\"` installs ralph as it starts a loop on TEXT; \
         `ralph-ctl init` installs it without starting",
        "warn  verify: no verify command",
        "fix: `ralph-ctl init --yes` makes `npm test` (found from the test script of \
         package.json) the check",
    ]);
    assert!(!project.path(".claude").exists(), "doctor writes nothing");
    project.init_untouched();
    project
        .ctl(&["doctor"], &[("RALPH_CLAUDE", "true")])
        .assert_stdout_has(&[
            "ok    PROMPT.md:",
            "is still the template: a queue run (`--queue`) and /ralph-loop bring their own tasks \
             and take it as it is; a plain loop refuses to start on it",
            "or start with `ralph-ctl run --task \"TEXT\"`, which writes TEXT there",
        ]);
}

#[test]
fn version_and_completions_answer() {
    let project = TempProject::new("completions");
    let version = project.ctl(&["--version"], &[]);
    version.assert_code(0);
    assert!(
        version.stdout.starts_with("ralph-ctl 0.1.0"),
        "{}",
        version.stdout
    );
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let script = project.ctl(&["completions", shell], &[]);
        script.assert_code(0);
        assert!(
            script.stdout.contains("ralph-ctl") && script.stdout.contains("loop-start"),
            "{shell}: {}",
            &script.stdout[..script.stdout.len().min(300)]
        );
    }
    // The bash script loads in bash and completes a subcommand.
    let check = std::process::Command::new("bash")
        .arg("-c")
        .arg("source /dev/stdin; COMP_WORDS=(ralph-ctl doc); COMP_CWORD=1; _ralph__ctl ralph-ctl doc ralph-ctl; printf '%s\\n' \"${COMPREPLY[@]}\"")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            let script = project.ctl(&["completions", "bash"], &[]).stdout;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "doctor");
}

#[test]
fn watch_prints_a_line_per_change_until_the_loop_ends_and_quits_on_q() {
    const SID: &str = "11111111-2222-3333-4444-555555555555";
    let project = TempProject::with_loop("watch", SID, 5);
    let mut cmd = project.command(bins::ctl());
    cmd.arg("watch")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watch = cmd.spawn().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    // The loop's session stops: iteration 2. Then the person cancels it.
    ralph_tests::cli::Hook::new(&project)
        .json(&json!({
            "session_id": SID,
            "cwd": project.root,
            "hook_event_name": "Stop",
            "stop_hook_active": false,
            "last_assistant_message": "Read the parser; fixing it next."
        }))
        .run()
        .block_answer();
    std::thread::sleep(Duration::from_millis(600));
    project.ctl(&["cancel"], &[]).assert_code(0);
    let (status, out, err) = wait_with_timeout(&mut watch, Duration::from_secs(10));
    assert_eq!(status.and_then(|s| s.code()), Some(22), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("iteration 1/5 running"), "{out}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("iteration 2/5 running") && l.contains("Read the parser")),
        "{out}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .contains("loop cancelled at iteration 2 of 5"),
        "{out}"
    );

    // In a terminal: the view, and q quits.
    use ralph_tests::interactive::{SIZE, Stderr, Terminal};
    let mut cmd = project.command(bins::ctl());
    cmd.arg("watch");
    let mut term = Terminal::spawn(cmd, SIZE, Stderr::Terminal).unwrap();
    assert!(
        term.wait_for_screen("(q quits)", Duration::from_secs(10)),
        "{}",
        term.screen()
    );
    assert!(
        term.screen().contains("status     cancelled"),
        "{}",
        term.screen()
    );
    term.type_text("q").unwrap();
    let run = term.finish(Duration::from_secs(10));
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[test]
fn tasks_and_notes_are_capped_where_written_so_the_state_stays_readable() {
    // A state the reader refuses lets every stop through as corrupt: what
    // would make one is refused when it is written, naming the cap.
    let project = TempProject::new("caps");
    project.init();
    let words = "word ".repeat(200_000);
    let mut cmd = project.command(ralph_tests::bins::ctl());
    cmd.args(["loop-start", "--session", "s-1", "--stdin"]);
    let run = run_with_timeout(
        cmd,
        Some(words.as_bytes()),
        std::time::Duration::from_secs(30),
    );
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stdout
            .contains("more than the 256 KiB a loop's task may be")
            || run
                .stderr
                .contains("more than the 256 KiB a loop's task may be"),
        "{run:?}"
    );
    assert!(project.state().is_none(), "no loop started");
    project
        .ctl(&["start", "--session-id", "s-2"], &[])
        .assert_code(0);
    let note = "n".repeat(17 * 1024);
    let run = project.ctl(&["say", &note], &[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("more than the 16 KiB a note may be"),
        "{run:?}"
    );
    let note = "n".repeat(15 * 1024);
    for _ in 0..4 {
        project.ctl(&["say", &note], &[]).assert_code(0);
    }
    let run = project.ctl(&["say", &note], &[]);
    assert_eq!(run.code, Some(3), "{run:?}");
    assert!(
        run.stderr.contains("the 64 KiB the notes may hold"),
        "{run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["hint"].as_str().unwrap().len(), 4 * 15 * 1024 + 3);
    project.ctl(&["status"], &[]).assert_code(0);
}

#[test]
fn a_check_that_runs_no_test_is_named_at_the_start() {
    // unittest discovery in a folder of no tests: it says it ran 0 tests.
    let project = TempProject::new("no-tests");
    std::fs::create_dir_all(project.path("empty")).unwrap();
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "python3 -m unittest discover -s empty"}]}"#,
    );
    project.init();
    let start = project.ctl(&["start"], &[]);
    start.assert_code(0);
    start.assert_stderr_has(&[
        "test baseline of `python3 -m unittest discover -s empty`: 0 run (0 passed, 0 failed), 0 skipped",
        "warning: `python3 -m unittest discover -s empty` ran no test at the start (its runner says 0)",
    ]);
}

#[test]
fn init_protects_the_test_folder_and_start_records_the_test_baseline() {
    let project = TempProject::new("integrity");
    std::fs::create_dir_all(project.path("tests")).unwrap();
    project.write("calc.py", "def add(a, b):\n    return a - b\n");
    project.write(
        "tests/test_calc.py",
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    \
         def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n\n    \
         def test_zero(self):\n        self.assertEqual(calc.add(0, 0), 0)\n",
    );
    // The folder-wide rules an earlier init wrote, which refused a new test.
    project.write(
        ".claude/settings.json",
        r#"{"permissions": {"deny": ["Bash(rm:*)", "Edit(tests/**)", "Write(tests/**)"]}}"#,
    );
    let init = Ctl::new(&project).args(["init", "--yes"]).run();
    init.assert_code(0);
    init.assert_stdout_has(&[
        "Protected: tests/ (protectedPaths",
        "a claim that changed or removed a file there at the loop's start is rejected (new test files are free)",
    ]);
    let config: Value =
        serde_json::from_slice(&std::fs::read(project.path(".claude/ralph/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["protectedPaths"], json!(["tests/"]));
    let command = config["verify"][0]["command"].as_str().unwrap().to_string();
    assert_eq!(command, "python3 -m unittest discover -s tests");
    let deny = settings(&project)["permissions"]["deny"].clone();
    let deny = deny.as_array().unwrap();
    assert!(
        !deny.iter().any(|r| r.as_str().unwrap().contains("tests")),
        "the test folder gets no deny rule, and the former ones are gone: {deny:?}"
    );
    assert!(
        deny.iter().any(|r| r == "Bash(rm:*)"),
        "the person's rules stay: {deny:?}"
    );

    project.write_prompt("Fix add.\n");
    let start = project.ctl(&["start"], &[]);
    start.assert_code(0);
    start.assert_stderr_has(&["test baseline of `python3 -m unittest discover -s tests`: 2 run (1 passed, 1 failed), 0 skipped"]);
    let state = project.state().unwrap();
    assert_eq!(
        state["testBaseline"],
        json!([{"command": command, "run": 2, "passed": 1, "failed": 1, "skipped": 0, "runners": ["unittest"]}])
    );
    assert_eq!(state["protectedFiles"]["patterns"], json!(["tests/"]));
    assert!(
        state["protectedFiles"]["files"]["tests/test_calc.py"].is_string(),
        "{state:#}"
    );
    let status = project.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains(
            "baseline:   tests of `python3 -m unittest discover -s tests` at the start: 2 run (1 passed, 1 failed), 0 skipped"
        ),
        "{}",
        status.stdout
    );

    // A glob that leaves the project is refused, naming the key.
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": config["verify"], "protectedPaths": ["../elsewhere"]}).to_string(),
    );
    let refused = project.ctl(&["start", "--force"], &[]);
    assert_ne!(refused.code, Some(0), "{refused:?}");
    refused.assert_stderr_has(&["protectedPaths = \"../elsewhere\" is invalid"]);
}

#[test]
fn reload_adopts_config_json_refuses_a_bad_one_and_says_when_there_is_no_loop() {
    let project = TempProject::new("reload");
    project.init();
    let run = project.ctl(&["reload"], &[]);
    run.assert_code(13);
    assert!(
        run.stdout.contains("No Ralph loop in") && run.stdout.contains("nothing to reload"),
        "{run:?}"
    );

    project.write(".claude/ralph/config.json", r#"{"maxIterations": 5}"#);
    project.ctl(&["start"], &[]).assert_code(0);
    let pinned = |project: &TempProject| project.state().unwrap()["pinned"].clone();
    let before = pinned(&project);
    assert_eq!(before["config"], r#"{"maxIterations": 5}"#);

    // Changed by anyone: shown by status with the fix, not obeyed.
    let changed = r#"{"maxIterations": 5, "notify": "echo ended", "completionMode": "dual"}"#;
    project.write(".claude/ralph/config.json", changed);
    let status = project.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains(
            "config:     .claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it"
        ),
        "{status:?}"
    );
    assert_eq!(
        project.status_json()["configDrift"]["files"][0]["file"],
        ".claude/ralph/config.json"
    );

    // A bad one is refused with the config error, and the pin kept.
    project.write(".claude/ralph/config.json", r#"{"maxIteration": 3}"#);
    let run = project.ctl(&["reload"], &[]);
    run.assert_code(1);
    assert!(
        run.stderr
            .contains("unknown key `maxIteration` (did you mean `maxIterations`?)"),
        "{run:?}"
    );
    assert_eq!(pinned(&project), before);

    project.write(".claude/ralph/config.json", changed);
    let run = project.ctl(&["reload"], &[]);
    run.assert_code(0);
    assert_eq!(
        run.stdout,
        "Reloaded; from the next stop the loop decides by:\n  \
         completionMode: (unset) → \"dual\"\n  notify: (unset) → \"echo ended\"\n"
    );
    assert_eq!(pinned(&project)["config"], changed);
    let status = project.ctl(&["status"], &[]);
    assert!(!status.stdout.contains("changed since"), "{status:?}");
    assert!(project.status_json()["configDrift"].is_null());
    let log = project.ctl(&["log", "--json"], &[]);
    assert!(log.stdout.contains("\"reload\""), "{log:?}");

    let run = project.ctl(&["reload"], &[]);
    run.assert_code(0);
    assert_eq!(
        run.stdout,
        "Reloaded: nothing changed; the loop goes on with the same config.\n"
    );

    let help = project.ctl(&["reload", "--help"], &[]);
    help.assert_code(0);
    assert!(
        help.stdout.contains("Example:\n  ralph-ctl reload"),
        "{help:?}"
    );

    project.ctl(&["cancel"], &[]).assert_code(0);
    let run = project.ctl(&["reload"], &[]);
    run.assert_code(13);
    assert!(run.stdout.contains("is cancelled, not running"), "{run:?}");
}

#[test]
fn a_fifo_formula_or_a_prompt_file_outside_the_project_is_refused_at_once() {
    let project = TempProject::new("formula-fifo");
    project.init();
    let folder = project.path(".claude/ralph/formulas");
    std::fs::create_dir_all(&folder).unwrap();
    let fifo = folder.join("stuck.yaml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let started = std::time::Instant::now();
    let run = project.ctl(
        &["run", "--formula", "stuck", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("not a regular file"), "{run:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    std::fs::write(
        folder.join("leak.yaml"),
        "steps:\n  - id: a\n    promptFile: /etc/passwd\n",
    )
    .unwrap();
    let run = project.ctl(
        &["run", "--formula", "leak", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("outside the project"), "{run:?}");
    assert!(!run.stdout.contains("root:"), "{run:?}");
}

#[test]
fn a_formula_run_resumes_with_the_file_it_started_from() {
    // `name:` differs from the file's name, and another formula is named
    // like it: the resume takes neither, but what the loop was pinned to.
    let project = TempProject::new("formula-resume");
    project.init();
    project.write(
        ".claude/ralph/formulas/feat.yaml",
        "name: other\nsteps:\n  - id: a\n    prompt: The feature step.\n",
    );
    project.write(
        ".claude/ralph/formulas/other.yaml",
        "name: other\nsteps:\n  - id: b\n    prompt: The other formula's step.\n",
    );
    let client = fake_client(&project, 0);
    let env = [("RALPH_CLAUDE", client.as_str()), ("RALPH_SANDBOX", "off")];
    let first = launcher(&project, &["--formula", "feat"], &env);
    first.assert_code(12);
    let state = project.status_json();
    assert_eq!(
        state["pinned"]["formula"]["file"], ".claude/ralph/formulas/feat.yaml",
        "{state:#}"
    );
    let refused = launcher(&project, &["--resume", "--formula", "other"], &env);
    refused.assert_code(2);
    refused.assert_stderr_has(&["this loop runs the formula in .claude/ralph/formulas/feat.yaml"]);
    assert_eq!(
        project.status_json()["status"],
        "interrupted",
        "not taken up"
    );
    let resumed = launcher(&project, &["--resume"], &env);
    resumed.assert_code(12);
    let stdin = recorded_stdin(&client);
    assert!(
        stdin.contains("The feature step.") && !stdin.contains("other formula"),
        "{stdin}"
    );
}

#[test]
fn loop_start_keeps_the_task_verbatim_and_reads_flags_only_where_they_stand() {
    let project = TempProject::new("loop-start-verbatim");
    project.init();
    let task = "Implement the --completion-promise option\n\n- parse it\n- test it\n\n```sh\ncargo  test\n```";
    let mut cmd = project.command(ralph_tests::bins::ctl());
    cmd.args(["loop-start", "--session", "s-1", "--stdin"]);
    let line = format!("{task}\n--max-iterations 7\n");
    let run = run_with_timeout(
        cmd,
        Some(line.as_bytes()),
        std::time::Duration::from_secs(30),
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["task"], task, "{state:#}");
    assert_eq!(state["maxIterations"], 7, "{state:#}");
    assert_eq!(
        state["completionSignal"]
            .as_str()
            .unwrap_or("RALPH_AUDIT_COMPLETE_NO_FINDINGS"),
        "RALPH_AUDIT_COMPLETE_NO_FINDINGS",
        "prose is not a flag: {state:#}"
    );
}

#[test]
fn reload_takes_a_baseline_for_a_new_verify_command_and_keeps_the_old_ones() {
    let project = TempProject::new("reload-baseline");
    project.init();
    let first = r"printf 'Ran 3 tests in 0.1s\n\nOK\n'";
    let second = r"printf 'Ran 2 tests in 0.1s\n\nOK (skipped=1)\n'";
    let config = |commands: &[&str]| {
        let verify: Vec<Value> = commands
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "command": c}))
            .collect();
        project.write(
            ".claude/ralph/config.json",
            json!({ "verify": verify }).to_string(),
        );
    };
    config(&[first]);
    project.ctl(&["start"], &[]).assert_code(0);
    let baseline = |project: &TempProject| project.state().unwrap()["testBaseline"].clone();
    assert_eq!(baseline(&project).as_array().unwrap().len(), 1);
    config(&[first, second]);
    let reloaded = project.ctl(&["reload"], &[]);
    reloaded.assert_code(0);
    reloaded.assert_stdout_has(&["test baseline of `", "taken now"]);
    let after = baseline(&project);
    assert_eq!(after[0]["command"], first, "{after:#}");
    assert_eq!(after[0]["run"], 3, "{after:#}");
    assert_eq!(after[1]["command"], second, "{after:#}");
    assert_eq!(after[1]["skipped"], 1, "{after:#}");
    // A command taken out of verify leaves the baseline.
    config(&[second]);
    project.ctl(&["reload"], &[]).assert_code(0);
    let last = baseline(&project);
    assert_eq!(last.as_array().unwrap().len(), 1, "{last:#}");
    assert_eq!(last[0]["command"], second, "{last:#}");
}

#[test]
fn a_loop_waiting_to_resume_under_a_live_launcher_is_that_launchers() {
    // The client fails on an overloaded API: the launcher pauses the loop
    // and waits out the backoff. While it waits, nobody else takes the
    // loop: no second launcher, no new start, no --reset.
    let project = TempProject::new("launch-waiting");
    project.init();
    let path = project.path("overloaded-claude.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         [ \"$1\" = --version ] && { echo '2.0.77 (Claude Code)'; exit 0; }\n\
         cat > /dev/null\n\
         echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":529,\"result\":\"API Error: 529 Overloaded\"}'\n\
         exit 1\n",
    )
    .unwrap();
    make_executable(&path);
    let client = path.display().to_string();
    use std::os::unix::process::CommandExt;
    let mut launcher = project
        .command(project.path(".claude/ralph/ralph-audit.sh"))
        .arg("--headless")
        .env("RALPH_CLAUDE", &client)
        .env("RALPH_RESUME_BACKOFF_SECONDS", "60")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    struct KillOnDrop(u32);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            signal_process(self.0, libc::SIGKILL);
        }
    }
    let _guard = KillOnDrop(launcher.id());
    let deadline = Instant::now() + Duration::from_secs(30);
    while project.state().is_none_or(|s| s["status"] != "paused") {
        assert!(
            Instant::now() < deadline,
            "never paused: {:?}",
            project.state()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let held = format!(
        "waiting to resume under ralph-ctl run (pid {})",
        launcher.id()
    );
    let start = project.ctl(&["start"], &[]);
    assert_eq!(start.code, Some(3), "{start:?}");
    assert!(start.stderr.contains(&held), "{start:?}");
    for args in [
        &["run", "--resume", "--headless"][..],
        &["run", "--reset", "--headless"][..],
    ] {
        let run = project.ctl(args, &[("RALPH_CLAUDE", &client)]);
        assert_eq!(run.code, Some(3), "{args:?}: {run:?}");
        assert!(run.stderr.contains(&held), "{args:?}: {run:?}");
    }
    assert_eq!(project.status_json()["status"], "paused", "left as it was");
    let status = project.ctl(&["status"], &[]);
    let next = format!(
        "next:       the launcher (pid {}) resumes it on its own at ",
        launcher.id()
    );
    assert!(status.stdout.contains(&next), "{}", status.stdout);
    assert!(
        !status.stdout.contains("`ralph-ctl run --resume` goes on"),
        "{}",
        status.stdout
    );
    // Its own launcher stopped: the loop is anyone's to take up.
    signal_process(launcher.id(), libc::SIGTERM);
    launcher.wait().unwrap();
    let resumed = project.ctl(
        &["run", "--resume", "--headless"],
        &[("RALPH_CLAUDE", &client), ("RALPH_RESUME_POLICY", "manual")],
    );
    assert_ne!(resumed.code, Some(3), "{resumed:?}");
}

#[test]
fn the_launcher_s_caps_refuse_what_they_cannot_be() {
    let project = TempProject::new("caps-refused");
    project.init();
    for (flag, value, says) in [
        ("--max-iterations", "0", "0 is not in 1..=100000"),
        ("--max-iterations", "many", "invalid digit"),
        ("--max-cost-usd", "-1", "a dollar amount above 0"),
        ("--max-cost-usd", "NaN", "a dollar amount above 0"),
    ] {
        let run = project.ctl(&["run", "--headless", flag, value], &[]);
        assert_eq!(run.code, Some(2), "{flag} {value}: {run:?}");
        assert!(
            run.stderr.contains(flag) && run.stderr.contains(says),
            "{flag} {value}: {}",
            run.stderr
        );
        assert!(project.state().is_none(), "nothing started");
    }
}

#[test]
fn status_without_a_loop_names_a_start_that_works() {
    // Each step of a first setup: status names a way to start that would
    // not be refused (never the launcher on the template PROMPT.md).
    let project = TempProject::new("status-first");
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0).assert_stdout_has(&[
        "ralph is not installed here: `ralph-ctl run --task \"TEXT\"` installs it and starts a loop on TEXT",
        "`ralph-ctl init` installs it without starting",
    ]);
    project.init_untouched();
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0).assert_stdout_has(&[
        "PROMPT.md is still the template, which a loop refuses",
        "`ralph-ctl run --task \"TEXT\"` starts one on TEXT",
    ]);
    project.write_prompt("Fix the parser.\n");
    let status = project.ctl(&["status"], &[]);
    status
        .assert_code(0)
        .assert_stdout_has(&["(no state file). Start one with .claude/ralph/ralph-audit.sh."]);
    assert!(!status.stdout.contains("template"), "{status:?}");
}

#[test]
fn a_folder_without_ralph_and_a_config_that_is_not_json_say_what_to_do() {
    let project = TempProject::new("no-ralph");
    // Nothing installed: status says how to install, report has no loop.
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0);
    status.assert_stdout_has(&["ralph is not installed here: `ralph-ctl run --task"]);
    let report = project.ctl(&["report", "--html", "r.html"], &[]);
    report.assert_code(13);
    assert!(report.stdout.contains("nothing to report"), "{report:?}");
    assert!(!project.path("r.html").exists());
    // A trailing comma: the place to fix, not the list of every key.
    project.init();
    project.write(".claude/ralph/config.json", "{\"maxIterations\": 5,}");
    let doctor = project.ctl(&["doctor", "--json"], &[]);
    let report: Value = serde_json::from_str(&doctor.stdout).unwrap();
    let config = doctor_row(&report, "config");
    let detail = config["detail"].as_str().unwrap();
    assert!(
        detail.contains("is not valid JSON: trailing comma at line 1 column 21")
            && !detail.contains("accepted keys"),
        "{config:#}"
    );
    assert_eq!(
        config["fix"],
        "fix the JSON at the line and column it names"
    );
    // A word of the wrong type is named with what its key accepts.
    project.write(".claude/ralph/config.json", "{\"sandbox\": true}");
    let status = project.ctl(&["start"], &[]);
    status.assert_code(1);
    status.assert_stderr_has(&["key sandbox = true is invalid: auto, on or off"]);
    // A list of the wrong type: serde names no key, so the keys are listed.
    project.write(".claude/ralph/config.json", "{\"planFiles\": \"PLAN.md\"}");
    let status = project.ctl(&["start"], &[]);
    status.assert_code(1);
    status.assert_stderr_has(&["accepted keys", "planFiles"]);
}

#[test]
fn a_formula_gate_named_like_a_verify_command_is_a_formula_error() {
    let project = TempProject::new("formula-clash");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "true"}]}"#,
    );
    let folder = project.path(".claude/ralph/formulas");
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(
        folder.join("feat.yaml"),
        "name: feat\nsteps:\n  - id: a\n    prompt: Do it.\n    gates:\n      - { name: tests, command: \"true\" }\n",
    )
    .unwrap();
    let client = fake_client(&project, 0);
    let run = launcher(
        &project,
        &["--formula", "feat", "--dry-run"],
        &[("RALPH_CLAUDE", client.as_str())],
    );
    run.assert_code(1);
    run.assert_stderr_has(&[
        "formula ",
        "feat.yaml",
        "gate \"tests\" of step \"a\" has the name of a verify command",
    ]);
}

#[test]
fn the_readme_s_exit_code_table_names_every_exit_code() {
    // Every code of exit_codes.rs has a row of its own (or shares one) in
    // the README's table, and the table names no code that does not exist.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let table = readme
        .split("## Exit codes")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Exit codes section");
    let in_table: std::collections::BTreeSet<i32> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| code"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| {
            cell.split(',')
                .filter_map(|n| n.trim().parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        in_table,
        defined_exit_codes(),
        "README table vs exit_codes.rs"
    );
}

/// Every exit code of `exit_codes.rs`'s table, the signals' (128 + the
/// number) `run` gives included.
fn defined_exit_codes() -> std::collections::BTreeSet<i32> {
    ralph_core::exit_codes::MEANINGS
        .iter()
        .map(|(code, _)| *code)
        .collect()
}

#[test]
fn the_help_names_every_exit_code() {
    // `ralph-ctl --help` and `run --help` each say what every code means.
    let project = TempProject::new("help-exit-codes");
    for args in [&["--help"][..], &["run", "--help"]] {
        let help = project.ctl(args, &[]);
        help.assert_code(0);
        let codes = help
            .stdout
            .split("Exit codes:")
            .nth(1)
            .and_then(|rest| rest.split("Usage:").next())
            .unwrap_or_else(|| panic!("no exit codes in {args:?}: {}", help.stdout));
        let named: std::collections::BTreeSet<i32> = codes
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let missing: Vec<i32> = defined_exit_codes().difference(&named).copied().collect();
        assert!(
            missing.is_empty(),
            "{args:?} does not name {missing:?}:\n{codes}"
        );
    }
}

#[test]
fn the_readme_s_links_reach_their_files_and_headings() {
    // The contents list and the docs/ links: each file exists, and each
    // `#anchor` is a heading of its file (GitHub's rule: lower case, only
    // letters, digits, '-', '_' and spaces kept, spaces made '-').
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let anchor = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let anchors_of = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| anchor(l.trim_start_matches('#')))
            .collect()
    };
    let mut files = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".md"))
        .collect();
    docs.sort();
    files.extend(docs);
    for file in &files {
        let file = file.as_str();
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let here = Path::new(file).parent().unwrap().to_path_buf();
        let mut rest = text.as_str();
        let mut seen = 0;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http") {
                continue;
            }
            seen += 1;
            let (path, hash) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                root.join(file)
            } else {
                root.join(&here).join(path)
            };
            // A picture is only there; a page is read for its headings.
            let linked_bytes =
                std::fs::read(&linked).unwrap_or_else(|e| panic!("{file} links to {target}: {e}"));
            if !hash.is_empty() {
                let linked_text = String::from_utf8_lossy(&linked_bytes);
                assert!(
                    anchors_of(&linked_text).iter().any(|a| a == hash),
                    "{file} links to {target}: no such heading"
                );
            }
        }
        assert!(seen > 0 || file != "README.md", "{file} has no links");
    }
}

#[test]
fn a_task_becomes_prompt_md_and_the_earlier_one_is_kept() {
    let project = TempProject::new("task-aside");
    project.init();
    project.write_prompt("The earlier task.\n");
    let no_client = [("RALPH_CLAUDE", "/nonexistent/claude")];
    let run = project.ctl(&["run", "--task", "  The new task.  "], &no_client);
    assert_ne!(run.code, Some(0), "no client, no loop: {run:?}");
    let prompt = std::fs::read_to_string(project.path(".claude/ralph/PROMPT.md")).unwrap();
    assert!(
        prompt.starts_with("# Task\n\nThe new task.\n\n## Each iteration"),
        "{prompt}"
    );
    assert!(
        prompt.contains("RALPH_AUDIT_COMPLETE_NO_FINDINGS"),
        "{prompt}"
    );
    assert_eq!(
        std::fs::read_to_string(project.path(".claude/context/runtime/PROMPT.previous.md"))
            .unwrap(),
        "The earlier task.\n"
    );
    assert!(
        run.stdout
            .contains("kept in .claude/context/runtime/PROMPT.previous.md"),
        "{run:?}"
    );
    // No text, no task: refused before anything is written.
    let empty = project.ctl(&["run", "--task", "  "], &no_client);
    empty.assert_code(2);
    assert!(
        empty.stderr.contains("--task needs the task's text"),
        "{empty:?}"
    );
    // Not with --resume, and --yes only with a task.
    assert_eq!(
        project.ctl(&["run", "--task", "x", "--resume"], &[]).code,
        Some(2)
    );
    assert_eq!(project.ctl(&["run", "--yes"], &[]).code, Some(2));
}

#[test]
fn install_sh_installs_both_binaries_with_the_arguments_given() {
    // A `cargo` that records how it was called: the script's whole job.
    let project = TempProject::new("install-sh");
    let bin = project.path("fake-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let cargo = bin.join("cargo");
    std::fs::write(
        &cargo,
        format!(
            "#!/bin/sh\necho \"$(pwd -P)|$*\" >> {}\n",
            project.path("cargo-calls").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cargo, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let script = bins::workspace_root().join("install.sh");
    let run = run_with_timeout(
        {
            let mut cmd = project.command(&script);
            cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
                .args(["--root", "/opt/ralph"]);
            cmd
        },
        None,
        std::time::Duration::from_secs(30),
    );
    run.assert_code(0);
    let root = bins::workspace_root().canonicalize().unwrap();
    let calls = std::fs::read_to_string(project.path("cargo-calls")).unwrap();
    assert_eq!(
        calls,
        format!(
            "{root}|install --locked --path crates/ralph-stop-hook --root /opt/ralph\n\
             {root}|install --locked --path crates/ralph-ctl --root /opt/ralph\n",
            root = root.display()
        )
    );
    assert!(run.stdout.contains("ralph-ctl run --task"), "{run:?}");
    // Without cargo: output::install_sh_without_cargo_says_what_to_install_and_how.
}

#[test]
fn queue_shows_a_backlog_s_items_and_where_each_stands() {
    let project = TempProject::new("queue");
    project.write(
        "TODO.md",
        "# Plan\n- [x] the parser\n- [ ] write the guide\n  install and first run\n- [ ] add --json\n## Nice to have\n- [ ] emoji\n",
    );
    let listed = project.ctl(&["queue", "plan:TODO.md", "--json"], &[]);
    let items = listed.assert_code(0).json();
    let titles: Vec<&str> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, ["write the guide", "add --json"], "{items:#}");
    assert!(
        items
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == "free"),
        "{items:#}"
    );
    // What workers recorded: one item claimed, one done.
    let (guide, json_item) = (
        items[0]["id"].as_str().unwrap(),
        items[1]["id"].as_str().unwrap(),
    );
    let claims = json!({"schemaVersion": 1, "items": {
        guide: {"status": "claimed", "worker": "w1", "claimedAt": "2026-11-25T10:00:00Z", "expiresAt": "2999-01-01T00:00:00Z", "claims": 1},
        json_item: {"status": "done", "worker": "w2", "claimedAt": "2026-11-25T10:00:00Z", "expiresAt": "2026-11-25T10:30:00Z", "claims": 2},
    }});
    project.write(
        ".claude/context/runtime/ralph-queue.json",
        claims.to_string(),
    );
    let shown = project.ctl(&["queue", "plan:TODO.md"], &[]);
    shown.assert_code(0).assert_stdout_has(&[
        "2 items in plan:TODO.md: 1 claimed, 1 done",
        &format!("  claimed      {guide}  write the guide  (w1 until 2999-01-01T00:00:00Z)"),
        &format!("  done         {json_item}  add --json"),
    ]);
    // A folder, a file an item; a bad spelling names the three forms.
    project.write("backlog/001-fix.md", "# Fix the parser\n");
    project
        .ctl(&["queue", "dir:backlog"], &[])
        .assert_code(0)
        .assert_stdout_has(&[
            "1 item in dir:backlog: 1 free",
            "  free         001-fix.md  Fix the parser",
        ]);
    let bad = project.ctl(&["queue", "TODO.md"], &[]);
    bad.assert_code(2)
        .assert_stderr_has(&["plan:PATH, dir:PATH or cmd:COMMAND"]);
    let missing = project.ctl(&["queue", "plan:NOPE.md"], &[]);
    missing
        .assert_code(1)
        .assert_stderr_has(&["NOPE.md", "does not exist"]);
}

#[test]
fn a_queue_run_that_cannot_start_says_why_before_anything_starts() {
    let project = TempProject::new("queue-refused");
    project.init();
    project.write("PLAN.md", "# Plan\n- [ ] one\n");
    // No client is started: each of these is refused first.
    let env = [("RALPH_CLAUDE", "true")];
    let bad = project.ctl(&["run", "--queue", "PLAN.md"], &env);
    bad.assert_code(2)
        .assert_stderr_has(&["plan:PATH, dir:PATH or cmd:COMMAND"]);
    let workers = project.ctl(&["run", "--queue", "plan:PLAN.md", "--workers", "0"], &env);
    workers.assert_code(2).assert_stderr_has(&["--workers"]);
    let alone = project.ctl(&["run", "--workers", "2"], &env);
    alone.assert_code(2).assert_stderr_has(&["--queue"]);
    let formula = project.ctl(&["run", "--queue", "plan:PLAN.md", "--formula", "f"], &env);
    formula.assert_code(2).assert_stderr_has(&["--formula"]);
    let base = project.ctl(&["run", "--base-ref", "main"], &env);
    base.assert_code(2)
        .assert_stderr_has(&["--base-ref and --no-cleanup go with --worktree or --queue"]);
    let missing = project.ctl(&["run", "--queue", "plan:NOPE.md"], &env);
    missing.assert_stderr_has(&["NOPE.md", "does not exist"]);
    assert_ne!(missing.code, Some(0));
    // Items land on a branch: a detached HEAD is none.
    project.git(&["checkout", "-q", "--detach"]);
    let detached = project.ctl(&["run", "--queue", "plan:PLAN.md"], &env);
    detached
        .assert_code(2)
        .assert_stderr_has(&["check out a branch", "--merge none"]);
    assert!(project.state().is_none(), "nothing started");
}

#[test]
fn from_a_step_needs_a_formula_and_a_step_it_has() {
    let project = TempProject::new("from-step");
    project.init();
    let env = [("RALPH_CLAUDE", "true")];
    let alone = project.ctl(&["run", "--from", "implement"], &env);
    alone
        .assert_code(2)
        .assert_stderr_has(&["--from implement names a formula step", "--formula NAME"]);
    project
        .ctl(&["init", "--formula", "ship"], &[])
        .assert_code(0);
    let unknown = project.ctl(&["run", "--formula", "ship", "--from", "deploy"], &env);
    unknown
        .assert_code(2)
        .assert_stderr_has(&["formula ship has no such step; its steps are"]);
    assert!(project.state().is_none(), "nothing started");
}

// ------------------------------------------------ the agent's text, shown

/// The characters of `text` a terminal would obey: every control but a
/// newline and a tab (ESC, BEL, a carriage return, DEL, C1 such as CSI).
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| c.is_control() && !matches!(c, '\n' | '\t'))
        .collect()
}

#[test]
fn status_log_watch_report_and_the_hook_show_the_agents_escapes_visibly() {
    // What the agent's code prints in a verify command, and what it says:
    // a fake ending over an erased line, hidden text, a clipboard write
    // (OSC 52), a carriage return, CSI as one C1 character, and markup.
    let project = TempProject::with_loop_and_config(
        "agent-escapes",
        ralph_tests::cli::SID,
        25,
        r#"{"verify": [{"name": "tests", "command": "printf 'ran \\033[8mhidden\\033[0m \\033]52;c;ZXZpbA==\\007 \\302\\23331m over\\rwritten\\n'; exit 1"}]}"#,
    );
    let stop = |message: &str| {
        ralph_tests::cli::Hook::new(&project)
            .json(&ralph_tests::cli::stop_input(&project, Some(message)))
            .run()
    };
    stop(&format!(
        "\u{1b}[2Kralph: loop complete <b>bold</b> \u{1b}[8mhidden\r over\u{9b}31m\n{}",
        ralph_tests::SIGNAL
    ))
    .block_reason();
    let ended = stop("Stuck.\nRALPH_ABORT: \u{1b}]52;c;ZXZpbA==\u{7}the key \u{1b}[8mis missing");
    assert_eq!(project.status_json()["status"], "blocked");
    // The hook's message for the person's screen.
    let answer: Value = serde_json::from_str(ended.stdout.trim()).unwrap();
    let message = answer["systemMessage"].as_str().unwrap_or_default();
    assert_eq!(raw_controls(message), [], "{message:?}");
    assert!(
        message.contains(r"\x1b]52;c;ZXZpbA==\x07the key \x1b[8mis missing"),
        "{message}"
    );

    let status = project.ctl(&["status"], &[]);
    status.assert_code(0);
    assert_eq!(raw_controls(&status.stdout), [], "{:?}", status.stdout);
    status.assert_stdout_has(&[
        r"\x1b]52;c;ZXZpbA==\x07the key \x1b[8mis missing",
        // The excerpt is on one line: the carriage return is a space there.
        r"said: \x1b[2Kralph: loop complete <b>bold</b> \x1b[8mhidden over\x9b31m",
        // A check's output without its colour codes (the hidden text is
        // plain), every other control shown.
        r"| ran hidden \x1b]52;c;ZXZpbA==\x07 \x9b31m over\x0dwritten",
    ]);
    // JSON is data: its escapes keep every control character out of it,
    // and the state reads back as the agent wrote it.
    let json = project.ctl(&["status", "--json"], &[]);
    assert_eq!(raw_controls(&json.stdout), [], "{:?}", json.stdout);
    assert!(
        json.json()["endedBecause"]
            .as_str()
            .unwrap()
            .contains("\u{1b}]52;c;ZXZpbA==\u{7}the key"),
        "{}",
        json.stdout
    );

    let log = project.ctl(&["log"], &[]);
    log.assert_code(0);
    assert_eq!(raw_controls(&log.stdout), [], "{:?}", log.stdout);
    log.assert_stdout_has(&[r"\x1b]52;c;ZXZpbA==\x07the key"]);
    let log_json = project.ctl(&["log", "--json"], &[]);
    assert_eq!(raw_controls(&log_json.stdout), [], "{:?}", log_json.stdout);
    for line in log_json.stdout.lines() {
        serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }

    // Not a terminal: one line, then how the loop ended.
    let watch = project.ctl(&["watch"], &[]);
    assert_eq!(raw_controls(&watch.stdout), [], "{:?}", watch.stdout);
    watch.assert_stdout_has(&[r"\x1b[8mis missing"]);

    let page_path = project.path("report.html");
    project
        .ctl(&["report", "--html", page_path.to_str().unwrap()], &[])
        .assert_code(0);
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert_eq!(raw_controls(&page), [], "{page}");
    for shown in [
        r"\x1b[2Kralph: loop complete &lt;b&gt;bold&lt;/b&gt; \x1b[8mhidden over\x9b31m",
        r"\x1b]52;c;ZXZpbA==\x07the key \x1b[8mis missing",
        r"ran hidden \x1b]52;c;ZXZpbA==\x07 \x9b31m over\x0dwritten",
    ] {
        assert!(page.contains(shown), "{shown} in {page}");
    }
    assert!(!page.contains("<b>bold"), "markup escaped: {page}");
}

#[test]
fn read_only_commands_never_run_notify_for_a_loop_whose_driver_is_gone() {
    // As a cloned repository can carry it: a running loop, its driver's
    // pid long gone, a pinned `notify` that leaves a marker.
    let project = TempProject::with_loop_and_config(
        "read-only-notify",
        "s-read-only",
        5,
        r#"{"notify": "touch notified-marker"}"#,
    );
    let mut gone = std::process::Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let mut state = project.state().unwrap();
    state["carriers"] = json!({"driver": {"pid": dead}});
    project.write_state(&state);
    let before = project.state_bytes();
    let marker = project.path("notified-marker");
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0);
    assert!(
        status.stdout.contains("interrupted: its driver is gone"),
        "{status:?}"
    );
    let json = project.ctl(&["status", "--json"], &[]);
    json.assert_code(0);
    let report = project.path("report.html");
    let report_arg = report.to_str().unwrap();
    project
        .ctl(&["report", "--html", report_arg], &[])
        .assert_code(0);
    project.ctl(&["log"], &[]).assert_code(0);
    let watch = project.ctl(&["watch"], &[]);
    assert_eq!(watch.code, Some(12), "{watch:?}");
    assert!(
        watch.stdout.contains("interrupted: its driver is gone"),
        "{watch:?}"
    );
    // notify is started, not waited for: give it the time it would take.
    std::thread::sleep(Duration::from_millis(500));
    assert!(!marker.exists(), "a read-only command ran notify");
    assert_eq!(project.state_bytes(), before, "a read-only command wrote");
    assert_eq!(project.status_json()["status"], "running");
    // The next change records the ending, and tells it once.
    let cancel = project.ctl(&["cancel"], &[]);
    cancel.assert_code(0);
    assert!(
        cancel.stderr.contains("recorded as interrupted"),
        "{cancel:?}"
    );
    assert_eq!(project.status_json()["status"], "interrupted");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(marker.exists(), "the recorded ending was not told");
}

/// A fake headless client that does an agent's work where it is started:
/// commits `<what>-<n>.txt` (n: its how-manieth run), says the work is done
/// on its last run (`runs`), and prints the result object `claude -p`
/// prints, with a small cost.
fn working_client(project: &TempProject, what: &str, runs: u32) -> String {
    let path = project.path(format!("fake-{what}.sh"));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.0.77 (Claude Code)'; exit 0; }}\n\
             cat > /dev/null\n\
             echo \"$PWD\" >> \"$0.cwd\"\n\
             n=$(wc -l < \"$0.cwd\")\n\
             echo work > {what}-$n.txt && git add {what}-$n.txt && git commit -q -m \"{what} $n\"\n\
             said='More to do.'\n\
             [ \"$n\" -ge {runs} ] && said='All done. {signal}'\n\
             printf '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"%s\",\"total_cost_usd\":0.01}}\\n' \"$said\"\n",
            signal = ralph_tests::SIGNAL
        ),
    )
    .unwrap();
    make_executable(&path);
    path.display().to_string()
}

/// The folders the fake client of [`working_client`] ran in.
fn ran_in(client: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{client}.cwd"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_fresh_worktree_loop_runs_each_iteration_on_a_branch_of_its_own() {
    let project = TempProject::new("fresh-worktree");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "ls work-*.txt"}]}).to_string(),
    );
    project.commit_all("ralph");
    let client = working_client(&project, "work", 2);
    let run = project.ctl(
        &["run", "--fresh", "--worktree", "--headless", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    assert_eq!(project.status_json()["status"], "complete");
    // Two iterations, each in a worktree of its own under .claude/worktrees.
    let folders = ran_in(&client);
    assert_eq!(folders.len(), 2, "{folders:?}\n{}", run.stderr);
    assert_ne!(folders[0], folders[1]);
    assert!(
        folders.iter().all(|f| f.contains("/.claude/worktrees/")),
        "{folders:?}"
    );
    // The project's checkout is left alone; each iteration's commit is on
    // a ralph/ branch.
    assert!(!project.path("work-1.txt").exists());
    let branches = std::process::Command::new("git")
        .args(["branch", "--list", "ralph/*", "--format=%(refname:short)"])
        .current_dir(project.path(""))
        .output()
        .unwrap();
    let branches = String::from_utf8_lossy(&branches.stdout).into_owned();
    assert!(!branches.trim().is_empty(), "{}", run.stderr);
}

#[test]
fn a_queue_run_works_each_item_in_its_worktree_and_lands_it() {
    let project = TempProject::new("queue-fake");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "true"}]}).to_string(),
    );
    project.write("PLAN.md", "# Plan\n\n- [ ] first\n- [ ] second\n");
    project.commit_all("plan");
    let client = working_client(&project, "item", 1);
    let run = project.ctl(
        &["run", "--queue", "plan:PLAN.md", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{}", run.stderr);
    let items = state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items.values().all(|i| i["status"] == "done"), "{items:?}");
    // Each item's work landed on main, its box ticked.
    let plan = std::fs::read_to_string(project.path("PLAN.md")).unwrap();
    assert_eq!(plan.matches("- [x]").count(), 2, "{plan}");
    assert!(project.path("item-1.txt").exists() && project.path("item-2.txt").exists());
    run.assert_stderr_has(&["2 items landed on main"]);
}

#[test]
fn a_queue_shared_on_a_remote_lands_there_and_lists_every_item_from_any_clone() {
    let project = TempProject::new("queue-remote");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "true"}]}).to_string(),
    );
    project.write("PLAN.md", "# Plan\n\n- [ ] first\n- [ ] second\n");
    project.commit_all("plan");
    let bare = project.path("").parent().unwrap().join("remote.git");
    project.git(&[
        "init",
        "-q",
        "--bare",
        "-b",
        "main",
        &bare.to_string_lossy(),
    ]);
    project.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
    project.git(&["push", "-q", "origin", "main"]);
    let client = working_client(&project, "item", 1);
    // A name that is no remote is refused before anything starts.
    let wrong = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--remote",
            "upstream",
            "--no-sandbox",
        ],
        &[("RALPH_CLAUDE", &client)],
    );
    wrong.assert_code(2);
    wrong.assert_stderr_has(&["--remote upstream", "git remote add upstream URL"]);
    let run = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--remote",
            "origin",
            "--no-sandbox",
        ],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    run.assert_stderr_has(&["queue shared on remote origin"]);
    // Landed on the remote's main, each box ticked there.
    let remote_plan = std::process::Command::new("git")
        .args(["show", "main:PLAN.md"])
        .current_dir(&bare)
        .output()
        .unwrap();
    let remote_plan = String::from_utf8_lossy(&remote_plan.stdout).into_owned();
    assert_eq!(
        remote_plan.matches("- [x]").count(),
        2,
        "{remote_plan}\n{}",
        run.stderr
    );
    // Any clone lists the backlog as the remote records it.
    let listed = project.ctl(
        &["queue", "plan:PLAN.md", "--remote", "origin", "--json"],
        &[],
    );
    listed.assert_code(0);
    let rows: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["status"], "done", "{row}");
        assert_eq!(row["iterations"], 1, "{row}");
        assert!(
            row["landed"].as_str().is_some_and(|c| c.len() == 40),
            "{row}"
        );
    }
    let text = project.ctl(&["queue", "plan:PLAN.md", "--remote", "origin"], &[]);
    text.assert_code(0);
    assert!(
        text.stdout
            .starts_with("2 items of plan:PLAN.md on remote origin (1 machine so far): 2 done"),
        "{}",
        text.stdout
    );
    let status = project.ctl(&["status"], &[]);
    assert!(
        status
            .stdout
            .contains("  remote:     2 items of plan:PLAN.md"),
        "{}",
        status.stdout
    );
}

#[test]
fn the_sandbox_block_goes_at_the_next_look_though_its_holders_file_is_gone() {
    // A sandboxed run's block in `.git/info/exclude` hides
    // `.claude/settings.local.json` and `.claude/hooks` from the person's
    // `git status`. The agent removed the holders' file beside it, and the
    // run is over: the next status, doctor or reset removes the block.
    let project = TempProject::new("exclude-holders-gone");
    project.init();
    let exclude = project.path(".git/info/exclude");
    std::fs::create_dir_all(exclude.parent().unwrap()).unwrap();
    let block = "# >>> ralph: the client's sandbox's mount points in / (while a run is on)\n\
                 /.claude/settings.local.json\n/.claude/hooks\n# <<< ralph\n";
    for command in ["status", "doctor", "reset"] {
        std::fs::write(&exclude, format!("*.log\n{block}")).unwrap();
        let _ = std::fs::remove_file(project.path(".git/ralph-exclude-holders"));
        let looked = project.ctl(&[command], &[]);
        assert!(
            format!("{}{}", looked.stdout, looked.stderr)
                .contains("removed the block of the client's sandbox's mount points"),
            "{command}: {looked:?}"
        );
        assert_eq!(
            std::fs::read_to_string(&exclude).unwrap(),
            "*.log\n",
            "{command}: {looked:?}"
        );
    }
}

#[test]
fn a_run_refused_at_its_start_with_nobody_at_a_terminal_runs_notify() {
    // As under nohup: no terminal on stdin, stdout or stderr.
    let project = TempProject::new("refused-notify");
    project.init_untouched();
    let refused = project.ctl(
        &["run", "--headless"],
        &[
            ("RALPH_CLAUDE", "true"),
            ("RALPH_NOTIFY", "cat >> notified.jsonl"),
        ],
    );
    refused
        .assert_code(3)
        .assert_stderr_has(&["PROMPT.md is still the template"]);
    let path = project.path("notified.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.ends_with('\n') || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let told: Value = serde_json::from_str(&text).expect("one JSON line");
    assert_eq!(told["event"], "refused", "{told:#}");
    assert!(
        told["reason"]
            .as_str()
            .is_some_and(|r| r.contains("PROMPT.md is still the template")),
        "{told:#}"
    );
    assert!(
        told["line"]
            .as_str()
            .is_some_and(|l| l.starts_with("ralph-ctl run did not start: ")),
        "{told:#}"
    );
    // A dry run tells nobody.
    std::fs::remove_file(&path).unwrap();
    project.ctl(
        &["run", "--headless", "--dry-run"],
        &[
            ("RALPH_CLAUDE", "true"),
            ("RALPH_NOTIFY", "cat >> notified.jsonl"),
        ],
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(!path.exists(), "a dry run ran notify");
}

#[test]
fn a_shared_backlog_lists_an_item_waiting_on_others_as_waiting() {
    let project = TempProject::new("remote-waiting");
    project.init();
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] release\n  after: first, second\n- [ ] first\n- [ ] second\n",
    );
    project.commit_all("plan");
    let bare = project.path("").parent().unwrap().join("remote.git");
    project.git(&[
        "init",
        "-q",
        "--bare",
        "-b",
        "main",
        &bare.to_string_lossy(),
    ]);
    project.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
    project.git(&["push", "-q", "origin", "main"]);
    let text = project.ctl(&["queue", "plan:PLAN.md", "--remote", "origin"], &[]);
    text.assert_code(0).assert_stdout_has(&[
        "3 items of plan:PLAN.md on remote origin (0 machines so far): 2 free, 1 waiting",
    ]);
    let waiting = text
        .stdout
        .lines()
        .find(|l| l.contains("release"))
        .unwrap_or_default();
    assert!(
        waiting.starts_with("  waiting ")
            && waiting.ends_with(", which have not landed)")
            && waiting.contains("(after plan-"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_client_that_refuses_to_start_fails_with_ralph_s_code_and_stops_the_queue() {
    // The client refuses to start on its settings: every item would fail
    // the same way within seconds, so the run ends at the first, naming
    // the refusal, and the item is free again for when they are fixed.
    let project = TempProject::new("queue-refused");
    project.init();
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "true"}]}).to_string(),
    );
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] first\n- [ ] second\n- [ ] third\n",
    );
    project.commit_all("plan");
    let path = project.path("refusing-claude.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         [ \"$1\" = --version ] && { echo '2.0.77 (Claude Code)'; exit 0; }\n\
         cat > /dev/null\n\
         echo ran >> \"$0.runs\"\n\
         echo '{\"type\":\"result\",\"subtype\":\"error_during_execution\",\"is_error\":true,\"num_turns\":0,\"errors\":[\"Sandbox required but unavailable: failed validation\"],\"startup_failure_reason\":\"sandbox_required_unavailable\"}'\n\
         exit 14\n",
    )
    .unwrap();
    make_executable(&path);
    let client = path.display().to_string();
    // Alone, the loop ends failed with ralph's code for it, never the
    // client's (14 is ralph's "paused" to a launcher), which is said.
    let alone = project.ctl(
        &["run", "--headless", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    assert_eq!(alone.code, Some(15), "{alone:?}");
    alone.assert_stderr_has(&[
        "Claude Code refused to start (its exit code 14), before its first turn",
    ]);
    std::fs::remove_file(format!("{client}.runs")).unwrap();
    project.ctl(&["reset"], &[]).assert_code(0);
    let run = project.ctl(
        &["run", "--queue", "plan:PLAN.md", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    let runs = std::fs::read_to_string(format!("{client}.runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "{run:?}");
    assert_eq!(run.code, Some(15), "{run:?}");
    assert!(
        run.stderr
            .contains("stopped: Claude Code refused to start (its exit code 14), before its first turn: Sandbox required but unavailable"),
        "{run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "failed", "{state:#}");
    let items = state["queue"]["items"].as_object().unwrap();
    assert!(
        items.values().all(|i| i["status"] != "failed"),
        "{items:#?}"
    );
}

#[test]
fn start_names_each_command_that_keeps_the_network_worktree_setup_too() {
    let project = TempProject::new("network-lines");
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "true"}, {"name": "fetch", "command": "true", "network": true}], "worktreeSetup": "true"}"#,
    );
    project.write_prompt("Fix add.\n");
    let start = project.ctl(&["start"], &[("RALPH_SANDBOX", "auto")]);
    start.assert_code(0);
    let walled = !start.stderr.contains("walls: none for the checks");
    if !walled {
        eprintln!("skipped: no walls on this machine ({})", start.stderr);
        return;
    }
    start.assert_stderr_has(&[
        "walls: the check `fetch` keeps this machine's network (\"network\": true)",
        "walls: worktreeSetup `true` keeps this machine's network (it installs each worktree's dependencies)",
    ]);
}
