//! `status`, `finish` and `reset` of a loop: the cycle, its history, a
//! corrupt state, a project found from a subfolder, and what a folder
//! without ralph is told.

use ralph_tests::bins;
use ralph_tests::cli::{Ctl, doctor_row};
use ralph_tests::project::{TempProject, run_with_timeout};
use serde_json::Value;
use std::time::Duration;

#[test]
fn finished_loops_are_kept_in_the_history_not_overwritten() {
    let project = TempProject::initialised("history");
    let none = project.ctl_exits(&["history"], 0);
    none.assert_stdout_has(&["No earlier loops kept"]);
    project.ctl_exits(&["start", "--session-id", "first"], 0);
    project.ctl(
        &["finish", "--session-id", "first", "--client-exit", "0"],
        &[],
    );
    project.ctl_exits(&["start", "--session-id", "second"], 0);
    project
        .ctl_exits(&["reset", "--force"], 0)
        .assert_stdout_has(&["kept in the history"]);
    project.ctl_exits(&["start", "--session-id", "third"], 0);
    let listed = project.ctl_exits(&["history"], 0);
    let first = listed.stdout.find("session first").expect(&listed.stdout);
    let second = listed.stdout.find("session second").expect(&listed.stdout);
    assert!(first < second, "oldest first: {}", listed.stdout);
    listed.assert_stdout_has(&["interrupted"]);
    assert!(
        !listed.stdout.contains("session third"),
        "the current loop is not history yet"
    );
    let json = project.ctl(&["history", "--json"], &[]);
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
fn start_status_reset_cycle() {
    let project = TempProject::initialised("cycle");
    project
        .ctl_exits(&["status"], 0)
        .assert_stdout_has(&["No Ralph loop"]);
    assert_eq!(
        project.ctl(&["status", "--json"], &[]).stdout.trim(),
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

    project
        .ctl_exits(&["status"], 0)
        .assert_stdout_has(&["running", "1 of 7", fields[0], "started:"]);

    project
        .ctl_exits(&["start"], 3)
        .assert_stderr_has(&["already running", "ralph-ctl cancel"]);
    assert_eq!(
        project.status_json()["sessionId"],
        fields[0],
        "a refused start changes nothing"
    );

    project
        .ctl(
            &[
                "start",
                "--force",
                "--session-id",
                "abc-123",
                "--max-iterations",
                "3",
            ],
            &[],
        )
        .assert_code(0);
    assert_eq!(project.status_json()["sessionId"], "abc-123");
    assert_eq!(project.status_json()["maxIterations"], 3);

    // A running loop is not reset without asking: `cancel` ends it first,
    // or --force clears it as it is.
    project.ctl_exits(&["reset"], 3).assert_stderr_has(&[
        "session abc-123 is running",
        "ralph-ctl cancel",
        "--force",
    ]);
    assert_eq!(
        project.status_json()["sessionId"],
        "abc-123",
        "a refused reset changes nothing"
    );
    project.ctl_exits(&["reset", "--force"], 0);
    assert!(project.state().is_none());
    project.ctl_exits(&["start"], 0);
    // The person reads what cancel says; only the plugin's /cancel-ralph,
    // whose output the agent reads, tells the agent to stop.
    let cancel = project.ctl(&["cancel"], &[]);
    cancel.assert_code(0).assert_stdout_has(&[
        "Ralph loop cancelled at iteration 1 of",
        "Its agent is not sent back to work at its next stop.",
    ]);
    assert!(!cancel.stdout.contains("Stop working"), "{cancel:?}");
    project.ctl_exits(&["reset"], 0);
    project.ctl_exits(&["start"], 0);
    project
        .ctl_exits(&["cancel", "--to-agent"], 0)
        .assert_stdout_has(&["it will not go on. Stop working on its task."]);
    project.ctl_exits(&["reset"], 0);
    assert!(project.state().is_none(), "an ended loop resets at once");
    project.ctl_exits(&["reset"], 0);
}

#[test]
fn corrupt_state_is_shown_refused_and_reset_aside() {
    let project = TempProject::initialised("corrupt");
    project.ctl_exits(&["start"], 0);
    std::fs::write(project.state_path(), "{\"status\": \"runn").unwrap();
    project
        .ctl_exits(&["status"], 1)
        .assert_stdout_has(&["corrupt", "ralph-ctl reset"]);
    project.ctl_exits(&["start"], 3);
    project
        .ctl_exits(&["reset"], 0)
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
    project.ctl_exits(&["start"], 0);
}

#[test]
fn finish_marks_a_running_loop_interrupted_and_maps_exit_codes() {
    let project = TempProject::initialised("finish");
    project.ctl_exits(&["start", "--session-id", "s-1"], 0);
    project
        .ctl(
            &["finish", "--session-id", "s-2", "--client-exit", "0"],
            &[],
        )
        .assert_code(13);
    assert_eq!(
        project.status_json()["status"],
        "running",
        "another session's finish changes nothing"
    );

    project
        .ctl(
            &["finish", "--session-id", "s-1", "--client-exit", "130"],
            &[],
        )
        .assert_code(12)
        .assert_stderr_has(&["interrupted", "130"]);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted");
    assert!(state["endedAt"].is_string());
    // Finishing again reports the same end without changing it.
    let before = project.state_bytes();
    project.ctl_exits(&["finish", "--session-id", "s-1"], 12);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn commands_in_a_subfolder_work_on_the_project_above() {
    let project = TempProject::new("subfolder");
    let sub = project.dir("src/deep");
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
    project.ctl_exits(&["start", "--session-id", "s-1"], 0);
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
    let status = project.ctl_exits(&["status"], 0);
    status.assert_stdout_has(&["ralph is not installed here: `ralph-ctl run --task"]);
    let report = project.ctl_exits(&["report", "--html", "r.html"], 13);
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
    let status = project.ctl_exits(&["start"], 1);
    status.assert_stderr_has(&["key sandbox = true is invalid: auto, on or off"]);
    // A list of the wrong type: serde names no key, so the keys are listed.
    project.write(".claude/ralph/config.json", "{\"planFiles\": \"PLAN.md\"}");
    let status = project.ctl_exits(&["start"], 1);
    status.assert_stderr_has(&["accepted keys", "planFiles"]);
}

#[test]
fn the_sandbox_block_goes_at_the_next_look_though_its_holders_file_is_gone() {
    // A sandboxed run's block in `.git/info/exclude` hides
    // `.claude/settings.local.json` and `.claude/hooks` from the person's
    // `git status`. The agent removed the holders' file beside it, and the
    // run is over: the next status, doctor or reset removes the block.
    let project = TempProject::initialised("exclude-holders-gone");
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
