//! Starting a loop and reloading its configuration: the task, the test
//! baseline, the caps, and the names of what is wrong in a refused start.

use ralph_tests::cli::Ctl;
use ralph_tests::project::{TempProject, run_with_timeout};
use serde_json::{Value, json};

#[test]
fn start_rejects_bad_input_with_the_name_of_what_is_wrong() {
    let project = TempProject::initialised("start-bad");
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
fn tasks_and_notes_are_capped_where_written_so_the_state_stays_readable() {
    // A state the reader refuses lets every stop through as corrupt: what
    // would make one is refused when it is written, naming the cap.
    let project = TempProject::initialised("caps");
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
    project.ctl_exits(&["start", "--session-id", "s-2"], 0);
    let note = "n".repeat(17 * 1024);
    let run = project.ctl(&["say", &note], &[]);
    assert_eq!(run.code, Some(2), "{run:?}");
    assert!(
        run.stderr.contains("more than the 16 KiB a note may be"),
        "{run:?}"
    );
    let note = "n".repeat(15 * 1024);
    for _ in 0..4 {
        project.ctl_exits(&["say", &note], 0);
    }
    let run = project.ctl(&["say", &note], &[]);
    assert_eq!(run.code, Some(3), "{run:?}");
    assert!(
        run.stderr.contains("the 64 KiB the notes may hold"),
        "{run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["hint"].as_str().unwrap().len(), 4 * 15 * 1024 + 3);
    project.ctl_exits(&["status"], 0);
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
    let start = project.ctl_exits(&["start"], 0);
    start.assert_stderr_has(&[
        "test baseline of `python3 -m unittest discover -s empty`: 0 run (0 passed, 0 failed), 0 skipped",
        "warning: `python3 -m unittest discover -s empty` ran no test at the start (its runner says 0)",
    ]);
}

#[test]
fn reload_adopts_config_json_refuses_a_bad_one_and_says_when_there_is_no_loop() {
    let project = TempProject::initialised("reload");
    let none = project.ctl_exits(&["reload"], 13);
    none.assert_stdout_has(&["No Ralph loop in", "nothing to reload"]);

    project.write(".claude/ralph/config.json", r#"{"maxIterations": 5}"#);
    project.ctl_exits(&["start"], 0);
    let pinned = |project: &TempProject| project.state().unwrap()["pinned"].clone();
    let before = pinned(&project);
    assert_eq!(before["config"], r#"{"maxIterations": 5}"#);

    // Changed by anyone: shown by status with the fix, not obeyed.
    let changed = r#"{"maxIterations": 5, "notify": "echo ended", "completionMode": "dual"}"#;
    project.write(".claude/ralph/config.json", changed);
    project.ctl(&["status"], &[]).assert_stdout_has(&[
        "config:     .claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it",
    ]);
    assert_eq!(
        project.status_json()["configDrift"]["files"][0]["file"],
        ".claude/ralph/config.json"
    );

    // A bad one is refused with the config error, and the pin kept.
    project.write(".claude/ralph/config.json", r#"{"maxIteration": 3}"#);
    let run = project.ctl_exits(&["reload"], 1);
    assert!(
        run.stderr
            .contains("unknown key `maxIteration` (did you mean `maxIterations`?)"),
        "{run:?}"
    );
    assert_eq!(pinned(&project), before);

    project.write(".claude/ralph/config.json", changed);
    let run = project.ctl_exits(&["reload"], 0);
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

    let run = project.ctl_exits(&["reload"], 0);
    assert_eq!(
        run.stdout,
        "Reloaded: nothing changed; the loop goes on with the same config.\n"
    );

    let help = project.ctl_exits(&["reload", "--help"], 0);
    assert!(
        help.stdout.contains("Example:\n  ralph-ctl reload"),
        "{help:?}"
    );

    project.ctl_exits(&["cancel"], 0);
    let run = project.ctl_exits(&["reload"], 13);
    assert!(run.stdout.contains("is cancelled, not running"), "{run:?}");
}

#[test]
fn loop_start_keeps_the_task_verbatim_and_reads_flags_only_where_they_stand() {
    let project = TempProject::initialised("loop-start-verbatim");
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
    let project = TempProject::initialised("reload-baseline");
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
    project.ctl_exits(&["start"], 0);
    let baseline = |project: &TempProject| project.state().unwrap()["testBaseline"].clone();
    assert_eq!(baseline(&project).as_array().unwrap().len(), 1);
    config(&[first, second]);
    let reloaded = project.ctl_exits(&["reload"], 0);
    reloaded.assert_stdout_has(&["test baseline of `", "taken now"]);
    let after = baseline(&project);
    assert_eq!(after[0]["command"], first, "{after:#}");
    assert_eq!(after[0]["run"], 3, "{after:#}");
    assert_eq!(after[1]["command"], second, "{after:#}");
    assert_eq!(after[1]["skipped"], 1, "{after:#}");
    // A command taken out of verify leaves the baseline.
    config(&[second]);
    project.ctl_exits(&["reload"], 0);
    let last = baseline(&project);
    assert_eq!(last.as_array().unwrap().len(), 1, "{last:#}");
    assert_eq!(last[0]["command"], second, "{last:#}");
}

#[test]
fn a_task_becomes_prompt_md_and_the_earlier_one_is_kept() {
    let project = TempProject::initialised("task-aside");
    project.write_prompt("The earlier task.\n");
    let no_client = [("RALPH_CLAUDE", "/nonexistent/claude")];
    let run = project.ctl(&["run", "--task", "  The new task.  "], &no_client);
    assert_ne!(run.code, Some(0), "no client, no loop: {run:?}");
    let prompt = project.read(".claude/ralph/PROMPT.md");
    assert!(
        prompt.starts_with("# Task\n\nThe new task.\n\n## Each iteration"),
        "{prompt}"
    );
    assert!(
        prompt.contains("RALPH_AUDIT_COMPLETE_NO_FINDINGS"),
        "{prompt}"
    );
    assert_eq!(
        project.read(".claude/context/runtime/PROMPT.previous.md"),
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

#[test]
fn reload_raises_the_stop_hooks_timeout_to_cover_the_checks_as_reloaded() {
    let project = TempProject::initialised("reload-hook-timeout");
    let config = |seconds: u64| {
        project.write(
            ".claude/ralph/config.json",
            json!({"verify": [{"name": "tests", "command": "true", "timeoutSeconds": seconds}]})
                .to_string(),
        );
    };
    let hook_timeout = |project: &TempProject| {
        let settings = project.read_json(".claude/settings.json");
        settings["hooks"]["Stop"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|entry| entry["hooks"].as_array().cloned().unwrap_or_default())
            .find(|hook| {
                hook["command"]
                    .as_str()
                    .is_some_and(|c| c.contains("ralph"))
            })
            .map(|hook| hook["timeout"].clone())
    };
    let registered = hook_timeout(&project).expect("init registers the Stop hook");
    assert_eq!(registered, 90, "init's default");
    config(60);
    project.ctl_exits(&["start"], 0);
    assert_eq!(hook_timeout(&project), Some(json!(90)), "60 s fits in 90");

    // timeoutSeconds raised mid-loop: the reload resizes the hook, and says so.
    config(300);
    let reloaded = project.ctl_exits(&["reload"], 0);
    assert!(
        reloaded.stderr.contains("the Stop hook's timeout in")
            && reloaded.stderr.contains("was 90 s")
            && reloaded.stderr.contains("set to 330 s"),
        "{reloaded:?}"
    );
    assert_eq!(hook_timeout(&project), Some(json!(330)));
    // Only ever raised, said only when it changes.
    config(30);
    let reloaded = project.ctl_exits(&["reload"], 0);
    assert!(!reloaded.stderr.contains("Stop hook"), "{reloaded:?}");
    assert_eq!(hook_timeout(&project), Some(json!(330)));
}

#[test]
fn reload_rewrites_the_settings_before_the_protected_files_snapshot() {
    // The Stop hook's timeout is raised before protectedPaths is
    // snapshotted anew, as at the start; the snapshot never lists the
    // loop's own folder anyway (the walk skips .claude), so ralph's
    // rewrite of the settings is never taken for the agent's change.
    let project = TempProject::initialised("reload-hook-protected");
    let config = |seconds: u64, protected: &[&str]| {
        project.write(
            ".claude/ralph/config.json",
            json!({
                "verify": [{"name": "tests", "command": "true", "timeoutSeconds": seconds}],
                "protectedPaths": protected,
            })
            .to_string(),
        );
    };
    config(60, &[".claude/"]);
    project.ctl(&["start"], &[]).assert_code(0);
    config(300, &[".claude/", "src/"]);
    let reloaded = project.ctl(&["reload"], &[]);
    reloaded.assert_code(0);
    // The running session may have read its hooks when it started.
    assert!(
        reloaded.stderr.contains("set to 330 s")
            && reloaded
                .stderr
                .contains("sessions started from now on use it")
            && reloaded
                .stderr
                .contains("one already running may keep the old timeout"),
        "{reloaded:?}"
    );
    let state = project.state().expect("a loop");
    let snapshot = &state["protectedFiles"];
    assert_eq!(snapshot["patterns"], json!([".claude/", "src/"]));
    let listed = snapshot["files"].as_object().cloned().unwrap_or_default();
    assert!(
        listed.keys().all(|path| !path.starts_with(".claude/")),
        "{snapshot}"
    );
}
