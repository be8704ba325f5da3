//! `log` and `watch`: the audit log's entries, a missing or unreadable
//! log, a closed pipe, and the agent's terminal escapes shown visibly.

use ralph_tests::bins;
use ralph_tests::project::{TempProject, run_with_timeout, wait_with_timeout};
use serde_json::{Value, json};
use std::process::Stdio;
use std::time::Duration;

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
    let project = TempProject::initialised("log");
    project.write(
        ".claude/ralph/config.json",
        ralph_tests::cli::IDLE_STOPS_CONFIG,
    );
    project.ctl_exits(&["start", "--session-id", "s-1"], 0);
    stops(&project, 5);

    let all = project.ctl(&["log"], &[]);
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

    let last = project.ctl_exits(&["log", "-n", "2"], 0);
    let stops: Vec<&str> = last.stdout.lines().collect();
    assert_eq!(stops.len(), 2, "{}", last.stdout);
    assert!(stops[0].ends_with("iteration 4 ended without a completion claim"));
    assert!(stops[1].ends_with("iteration 5 ended without a completion claim"));

    let json = project.ctl_exits(&["log", "--json", "-n", "3"], 0);
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

    project
        .ctl_exits(&["log", "-n", "0"], 2)
        .assert_stderr_has(&["--entries", "0"])
        .assert_no_panic();
}

#[test]
fn log_without_a_log_says_so() {
    let project = TempProject::initialised("log-none");
    project
        .ctl_exits(&["log"], 0)
        .assert_stdout_has(&["No audit log yet", "ralph-log.jsonl"]);
    let json = project.ctl(&["log", "--json"], &[]);
    json.assert_code(0).assert_stderr_has(&["No audit log yet"]);
    assert_eq!(json.stdout, "", "a JSON reader gets no lines");
}

#[test]
fn an_unreadable_log_is_one_error_line() {
    let project = TempProject::initialised("log-bad");
    let log = project.log_path();
    std::fs::create_dir_all(&log).unwrap();
    let run = project.ctl(&["log"], &[]);
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
    let run = project.ctl(&["log", "--json"], &[]);
    run.assert_code(1).assert_no_panic();
    assert_eq!(run.stdout, "");
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    run.assert_stderr_has(&["cannot read the audit log", "larger than 8 MiB"]);
}

#[test]
fn log_into_a_pipe_closed_early_ends_quietly() {
    let project = TempProject::initialised("log-pipe");
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
    project.ctl_exits(&["cancel"], 0);
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
    term.assert_shows("(q quits)");
    term.assert_shows("status     cancelled");
    term.type_text("q").unwrap();
    let run = term.finish(Duration::from_secs(10));
    assert_eq!(run.code, Some(0), "{run:?}");
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

    let status = project.ctl_exits(&["status"], 0);
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

    let log = project.ctl_exits(&["log"], 0);
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
    project.ctl_exits(&["report", "--html", page_path.to_str().unwrap()], 0);
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
