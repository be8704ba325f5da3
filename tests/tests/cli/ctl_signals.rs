//! Signals to the launcher and its client: SIGTERM, SIGHUP, SIGKILL,
//! Ctrl-C and a terminal that goes away, and a loop waiting under a live
//! launcher.

use super::ctl_common::{client_script, fake_client, launcher, recorded_stdin};
use ralph_tests::project::{TempProject, signal_group, signal_process, wait_with_timeout};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// A fake client that records its pid, then waits until a signal: it
/// records which one and exits with 128 + its number.
fn waiting_client(project: &TempProject) -> String {
    client_script(
        project,
        "waiting-claude.sh",
        "trap 'echo TERM > \"$0.got\"; exit 143' TERM\n\
         trap 'echo HUP > \"$0.got\"; exit 129' HUP\n\
         trap 'echo INT > \"$0.got\"; exit 130' INT\n\
         echo $$ > \"$0.pid\"\n\
         while :; do sleep 0.05; done\n",
    )
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
    let project = TempProject::initialised("launch-signals");
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
    let project = TempProject::initialised("launch-nohup");
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
    let project = TempProject::initialised("launch-killed");
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
    project.ctl_exits(&["cancel"], 0);
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
    let log = std::fs::read_to_string(project.log_path()).unwrap();
    assert!(
        log.lines().last().unwrap().contains("\"event\":\"end\""),
        "{log}"
    );
    // The next start goes ahead without a reset.
    project.ctl_exits(&["start"], 0);
}

#[test]
fn ctrl_c_reaches_the_client_from_the_terminal_and_is_recorded() {
    let project = TempProject::initialised("launch-ctrl-c");
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
    let project = TempProject::initialised("launch-hangup");
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
fn a_loop_waiting_to_resume_under_a_live_launcher_is_that_launchers() {
    // The client fails on an overloaded API: the launcher pauses the loop
    // and waits out the backoff. While it waits, nobody else takes the
    // loop: no second launcher, no new start, no --reset.
    let project = TempProject::initialised("launch-waiting");
    let client = client_script(
        &project,
        "overloaded-claude.sh",
        "cat > /dev/null\n\
         echo '{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":true,\"api_error_status\":529,\"result\":\"API Error: 529 Overloaded\"}'\n\
         exit 1\n",
    );
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
