//! Garbage in the environment (`RALPH_*`, `CLAUDE_PROJECT_DIR`) and a
//! `cwd` that names no project.

use super::{block_reason, hook_command, one_line, run_hook, to_bytes, working};
use ralph_tests::bins;
use ralph_tests::cli::{looping, stop_input};
use ralph_tests::project::{Run, TempProject};
use serde_json::json;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStringExt;

/// Asserts a silent allowed stop: exit 0, nothing on stdout or stderr.
fn silent(run: &Run) {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
    assert_eq!(run.stderr, "", "{run:?}");
}

// -------------------------------------------------------------- environment

/// Runs the hook with one extra variable, which may be any bytes.
fn hook_with_env(project: &TempProject, vars: &[(&str, &OsStr)]) -> Run {
    let mut cmd = hook_command(project);
    for (name, value) in vars {
        cmd.env(name, value);
    }
    run_hook(cmd, &to_bytes(&stop_input(project, Some("working"))))
}

fn os(bytes: &[u8]) -> OsString {
    OsString::from_vec(bytes.to_vec())
}

#[test]
fn garbage_env_values_are_named() {
    let project = looping("env-garbage", 5);
    let before = project.state_bytes();
    let long = "S".repeat(201);
    let root = project.root.display().to_string();
    let cases: Vec<(&str, OsString, &str)> = vec![
        (
            "RALPH_MAX_ITERATIONS",
            "abc".into(),
            "a whole number from 1 to 100000",
        ),
        ("RALPH_MAX_ITERATIONS", "0".into(), "a whole number"),
        ("RALPH_MAX_ITERATIONS", "-1".into(), "a whole number"),
        ("RALPH_MAX_ITERATIONS", "2.5".into(), "a whole number"),
        ("RALPH_MAX_ITERATIONS", "1e3".into(), "a whole number"),
        ("RALPH_MAX_ITERATIONS", "100001".into(), "a whole number"),
        (
            "RALPH_MAX_ITERATIONS",
            "99999999999999999999999".into(),
            "a whole number",
        ),
        ("RALPH_MAX_ITERATIONS", "5 6".into(), "a whole number"),
        ("RALPH_MAX_ITERATIONS", os(b"\xff\xfe"), "(valid UTF-8)"),
        (
            "RALPH_CIRCUIT_BREAKER_THRESHOLD",
            "many".into(),
            "a whole number from 1 to 1000",
        ),
        (
            "RALPH_CIRCUIT_BREAKER_THRESHOLD",
            "1001".into(),
            "a whole number",
        ),
        (
            "RALPH_CIRCUIT_BREAKER_THRESHOLD",
            os(b"3\x80"),
            "(valid UTF-8)",
        ),
        (
            "RALPH_COMPLETION_SIGNAL",
            " \t ".into(),
            "a non-empty single line",
        ),
        (
            "RALPH_COMPLETION_SIGNAL",
            "DONE\nREALLY".into(),
            "a non-empty single line",
        ),
        (
            "RALPH_COMPLETION_SIGNAL",
            long.clone().into(),
            "at most 200 characters",
        ),
        ("RALPH_COMPLETION_SIGNAL", os(b"DONE\xc0"), "(valid UTF-8)"),
        (
            "RALPH_PROMPT_FILE",
            os(b"P\xffROMPT.md"),
            "a non-empty path (valid UTF-8)",
        ),
        (
            "RALPH_PROMPT_FILE",
            "/nonexistent/PROMPT.md".into(),
            "does not exist",
        ),
        (
            "RALPH_PROMPT_FILE",
            root.clone().into(),
            "not a regular file",
        ),
    ];
    for (name, value, needle) in &cases {
        let run = hook_with_env(&project, &[(name, value)]);
        let line = one_line(&run, &[needle]);
        if !name.ends_with("PROMPT_FILE") || needle.contains("UTF-8") {
            assert!(
                line.contains(&format!("environment variable {name}=")),
                "{line}"
            );
        }
        assert_eq!(project.state_bytes(), before, "{name}={value:?}");
    }

    // All at once: still one line (the first problem found).
    let all: Vec<(&str, &OsStr)> = cases.iter().map(|(n, v, _)| (*n, v.as_os_str())).collect();
    one_line(&hook_with_env(&project, &all), &["RALPH_MAX_ITERATIONS"]);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn garbage_ralph_active_does_nothing() {
    let project = looping("env-active", 5);
    let before = project.state_bytes();
    for value in [os(b"1\xff"), os(b"\xff"), "1 ".into(), "yes".into()] {
        let mut cmd = project.command(bins::hook());
        cmd.env("RALPH_ACTIVE", &value);
        silent(&run_hook(cmd, &working(&project)));
    }
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn garbage_claude_project_dir() {
    let project = looping("env-project-dir", 5);
    let before = project.state_bytes();
    for value in ["/nonexistent/project", "relative/garbage", " "] {
        let run = hook_with_env(&project, &[("CLAUDE_PROJECT_DIR", OsStr::new(value))]);
        one_line(
            &run,
            &[&format!(
                "RALPH_ACTIVE=1 but no loop was started in {}",
                value.trim()
            )],
        );
        assert_eq!(project.state_bytes(), before);
    }
    // A non-UTF-8 value counts as unset: the input's `cwd` names the project,
    // so this stop is counted, silently.
    let run = hook_with_env(&project, &[("CLAUDE_PROJECT_DIR", &os(b"/tmp/\xff"))]);
    assert!(block_reason(&run).starts_with("[Ralph loop: iteration 2 of 5]"));
    assert_eq!(run.stderr, "");
}

#[test]
fn cwd_that_names_no_project() {
    let project = looping("odd-cwd", 5);
    let before = project.state_bytes();
    for (cwd, needle) in [
        ("", "cannot tell the project folder"),
        ("\u{0}", "RALPH_ACTIVE=1 but no loop was started in"),
        (
            "/etc/passwd/x",
            "RALPH_ACTIVE=1 but no loop was started in /etc/passwd/x",
        ),
    ] {
        let mut input = stop_input(&project, Some("working"));
        input["cwd"] = json!(cwd);
        one_line(
            &run_hook(hook_command(&project), &to_bytes(&input)),
            &[needle],
        );
    }
    assert_eq!(project.state_bytes(), before);
}
