//! Records ralph did not write (a forged `complete`, a key it did not
//! make, an earlier audit log put back) are never taken for its own, and
//! who `notify` tells.

use super::ctl_common::{fake_client, launcher, make_executable};
use ralph_tests::project::TempProject;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    project.ctl_exits(&["start", "--session-id", "s-1"], 0);
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
    project.ctl_exits(&["reset"], 0);
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
    project.ctl_exits(&["status"], 0);

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
    let log = project.log_path();
    let earlier = std::fs::read(&log).unwrap();
    project.ctl_exits(&["say", "look at the parser"], 0);
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
    project.ctl_exits(&["say", "and the lexer"], 0);
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
    let log = project.log_path();
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
    let status = project.ctl_exits(&["status"], 0);
    assert!(
        status.stdout.contains("interrupted: its driver is gone"),
        "{status:?}"
    );
    project.ctl_exits(&["status", "--json"], 0);
    let report = project.path("report.html");
    let report_arg = report.to_str().unwrap();
    project.ctl_exits(&["report", "--html", report_arg], 0);
    project.ctl_exits(&["log"], 0);
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
    let cancel = project.ctl_exits(&["cancel"], 0);
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
        ralph_tests::json_text_has(&told["reason"], "PROMPT.md is still the template"),
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
