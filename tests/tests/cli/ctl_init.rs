//! `ralph-ctl init` and `install.sh`: what they install, what they keep,
//! what they offer and what they refuse.

use super::ctl_common::{settings, snapshot};
use ralph_tests::bins;
use ralph_tests::cli::Ctl;
use ralph_tests::project::{INSTALLED_FILES, TempProject, run_with_timeout};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn init_installs_everything_and_twice_changes_nothing() {
    let project = TempProject::new("init");
    let run = project.ctl_exits(&["init"], 0);
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
    let launcher = project.read(".claude/ralph/ralph-audit.sh");
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
    let again = project.ctl_exits(&["init"], 0);
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
    assert_eq!(project.read(".claude/ralph/PROMPT.md"), "My own task.\n");
}

#[test]
fn init_offers_a_worktree_setup_and_writes_it_with_the_test_command() {
    let project = TempProject::new("init-worktree-setup");
    project.write(
        "pyproject.toml",
        "[project]\nname = \"x\"\n\n[project.optional-dependencies]\ntests = [\"pytest\"]\n",
    );
    project.write("uv.lock", "version = 1\n");
    let shown = project.ctl_exits(&["init"], 0);
    shown.assert_stdout_has(&[
        "Worktrees: found uv.lock, which a worktree's check cannot reach",
        "\"worktreeSetup\": \"uv sync --frozen\"",
    ]);
    let written = project.ctl_exits(&["init", "--yes"], 0);
    written.assert_stdout_has(&["Worktrees: `uv sync --frozen` (worktreeSetup, for uv.lock)"]);
    let config = project.config();
    assert_eq!(config["worktreeSetup"], "uv sync --frozen");
    // Once configured, nothing more is said of it.
    let again = project.ctl_exits(&["init", "--yes"], 0);
    assert!(!again.stdout.contains("Worktrees:"), "{}", again.stdout);
}

#[test]
fn init_offers_the_test_command_and_writes_it_only_when_asked() {
    let project = TempProject::new("init-verify");
    project.write("Cargo.toml", "[package]\nname = \"x\"\n");
    let shown = project.ctl_exits(&["init"], 0);
    shown.assert_stdout_has(&[
        "Found the test command `cargo test` (from Cargo.toml)",
        "ralph-ctl init --yes",
    ]);
    assert!(
        !project.path(".claude/ralph/config.json").exists(),
        "only shown"
    );

    let written = project.ctl_exits(&["init", "--yes"], 0);
    written.assert_stdout_has(&["Completion check: `cargo test` (from Cargo.toml)"]);
    let config = project.config();
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
    let kept = project.ctl_exits(&["init", "--yes"], 0);
    kept.assert_stdout_has(&["the 1 verify command(s) of .claude/ralph/config.json (kept)"]);
    project.ctl_exits(&["init", "--verify", "make check"], 0);
    let config = project.config();
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
    project.ctl_exits(&["init", "--verify", "true"], 2);
    assert_eq!(
        project.read(".claude/ralph/config.json"),
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
        term.assert_shows("[Y/n]");
        term.assert_shows("`go test -v ./...` (from go.mod)");
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
    let project = TempProject::initialised("init-local");
    assert!(settings(&project)["hooks"]["Stop"][0]["hooks"][0]["command"].is_string());
    let run = project.ctl_exits(&["init", "--local"], 0);
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
    let ignore = project.read(".claude/.gitignore");
    assert!(
        ignore.lines().any(|l| l == "/settings.local.json"),
        "{ignore}"
    );
    // A plain init afterwards keeps it where it is.
    project.ctl_exits(&["init"], 0);
    assert_eq!(settings(&project)["hooks"]["Stop"], json!([]));
    // Git never sees it, nor the runtime folder once a loop ran.
    project.ctl_exits(&["start"], 0);
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
fn init_refuses_malformed_settings_without_touching_them() {
    let project = TempProject::new("init-bad");
    project.write(".claude/settings.json", "{\"hooks\": ");
    project
        .ctl_exits(&["init"], 1)
        .assert_stderr_has(&["settings.json", "not valid JSON"]);
    assert_eq!(project.read(".claude/settings.json"), "{\"hooks\": ");
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
    project.write(".claude/settings.json", "{bad json");
    let run = project.ctl(&["init"], &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains("settings.json cannot be updated: it is not valid JSON"),
        "{run:?}"
    );
    assert!(!project.path(".claude/ralph").exists(), "{run:?}");
    assert_eq!(project.read(".claude/settings.json"), "{bad json");
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
    let init = project.ctl_exits(&["init", "--yes"], 0);
    init.assert_stdout_has(&[
        "Protected: tests/ (protectedPaths",
        "a claim that changed or removed a file there at the loop's start is rejected (new test files are free)",
    ]);
    let config = project.config();
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
    let start = project.ctl_exits(&["start"], 0);
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
fn install_sh_installs_both_binaries_with_the_arguments_given() {
    // A `cargo` that records how it was called: the script's whole job.
    let project = TempProject::new("install-sh");
    let bin = project.dir("fake-bin");
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
    let calls = project.read("cargo-calls");
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
