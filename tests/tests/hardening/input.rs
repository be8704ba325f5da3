//! The hook's stdin: empty, not JSON, not an object, not UTF-8, over
//! 100 MB, missing or wrongly typed fields, another hook event.

use super::{TIMEOUT, hook_command, one_line, rejected, run_hook, to_bytes};
use ralph_tests::cli::{SID, looping, stop_input};
use ralph_tests::project::run_measured;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

// --------------------------------------------------------- bad hook input

#[test]
fn empty_stdin() {
    let project = looping("empty-stdin", 5);
    for stdin in [&b""[..], b"   \n\t\n"] {
        rejected(
            &project,
            stdin,
            &[
                "the hook input on stdin is empty",
                "letting this stop through",
            ],
        );
    }
}

#[test]
fn invalid_json() {
    let project = looping("invalid-json", 5);
    for stdin in [
        &br#"{"session_id": "c0563e5b-5d19-4827-8166-f6f26bb447e0", "#[..],
        b"{not json}",
        b"{\"a\":1}{\"b\":2}",
        b"\x00\x00\x00",
    ] {
        rejected(
            &project,
            stdin,
            &["the hook input on stdin is not valid JSON"],
        );
    }
    // Deep nesting hits the parser's recursion limit, not the stack's end.
    let deep = format!(
        r#"{{"session_id": "{SID}", "x": {}}}"#,
        "[".repeat(1_000_000)
    );
    rejected(
        &project,
        deep.as_bytes(),
        &["the hook input on stdin is not valid JSON: recursion limit exceeded"],
    );
}

#[test]
fn json_that_is_not_an_object() {
    let project = looping("json-array", 5);
    for (stdin, kind) in [
        (
            r#"[{"session_id":"c0563e5b-5d19-4827-8166-f6f26bb447e0"}]"#,
            "array",
        ),
        (r#""text""#, "string"),
        ("42", "number"),
        ("null", "null"),
        ("true", "boolean"),
    ] {
        rejected(
            &project,
            stdin.as_bytes(),
            &[&format!(
                "the hook input on stdin is a JSON {kind}, expected an object"
            )],
        );
    }
}

#[test]
fn invalid_utf8_stdin() {
    let project = looping("invalid-utf8", 5);
    let mut stdin = to_bytes(&stop_input(&project, Some("caf_")));
    let at = stdin.windows(4).position(|w| w == b"caf_").unwrap() + 3;
    stdin[at] = 0xe9; // Latin-1 'é': not UTF-8
    rejected(
        &project,
        &stdin,
        &["the hook input on stdin is not valid UTF-8"],
    );
    rejected(&project, b"\xff\xfe{\x00}", &["not valid UTF-8"]);
}

#[test]
fn stdin_over_100_mb_is_read_bounded() {
    const TOTAL: u64 = 101 * 1024 * 1024;
    let project = looping("huge-stdin", 5);
    let before = project.state_bytes();
    let written = Arc::new(AtomicU64::new(0));
    let prefix = format!(r#"{{"session_id":"{SID}","last_assistant_message":""#);
    let (run, peak_kib) = run_measured(hook_command(&project), TIMEOUT, {
        let written = Arc::clone(&written);
        move |mut stdin| {
            let mut chunk = vec![b'a'; 1024 * 1024];
            chunk[..prefix.len()].copy_from_slice(prefix.as_bytes());
            let mut sent = 0;
            while sent < TOTAL {
                // Fails with EPIPE once the hook has stopped reading and exited.
                if stdin.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len() as u64;
                written.store(sent, Ordering::SeqCst);
                chunk.fill(b'a');
            }
        }
    });
    one_line(&run, &["the hook input on stdin is larger than 16 MiB"]);
    let written = written.load(Ordering::SeqCst);
    println!(
        "{} MiB accepted by the pipe of {} MiB offered; peak RSS {} MiB; {:?}",
        written >> 20,
        TOTAL >> 20,
        peak_kib >> 10,
        run.elapsed
    );
    assert!(written < 32 << 20, "the hook stopped reading early");
    assert!(
        peak_kib < 96 * 1024,
        "the hook held at most ~16 MiB ({peak_kib} KiB)"
    );
    assert!(run.elapsed < TIMEOUT);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn empty_object_names_the_missing_project_folder() {
    let project = looping("empty-object", 5);
    rejected(
        &project,
        b"{}",
        &[
            "cannot tell the project folder: CLAUDE_PROJECT_DIR is unset and the hook input has no `cwd`",
        ],
    );
}

#[test]
fn missing_session_id_is_let_through_with_one_line() {
    // Ownership cannot be proven without a session id: the stop goes through,
    // and the person is told why the loop did not go on.
    let project = looping("no-session", 5);
    let before = project.state_bytes();
    let mut input = stop_input(&project, Some("working"));
    input.as_object_mut().unwrap().remove("session_id");
    one_line(
        &run_hook(hook_command(&project), &to_bytes(&input)),
        &["has no `session_id`"],
    );
    input["session_id"] = Value::Null;
    one_line(
        &run_hook(hook_command(&project), &to_bytes(&input)),
        &["has no `session_id`"],
    );
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn wrong_typed_fields_are_named() {
    let project = looping("wrong-types", 5);
    let cases = [
        ("session_id", json!(42), "must be a string"),
        ("session_id", json!({"id": SID}), "must be a string"),
        ("session_id", json!([SID]), "must be a string"),
        ("stop_hook_active", json!("true"), "must be a boolean"),
        ("stop_hook_active", json!(1), "must be a boolean"),
        ("transcript_path", json!(7), "must be a string"),
        ("cwd", json!(false), "must be a string"),
        (
            "hook_event_name",
            json!({"name": "Stop"}),
            "must be a string",
        ),
        (
            "last_assistant_message",
            json!(["done"]),
            "must be a string",
        ),
    ];
    for (field, value, problem) in cases {
        let mut input = stop_input(&project, Some("working"));
        input[field] = value;
        rejected(
            &project,
            &to_bytes(&input),
            &[&format!("the hook input field `{field}` {problem}")],
        );
    }
}

#[test]
fn another_hook_event_is_not_handled() {
    let project = looping("subagent", 5);
    let mut input = stop_input(&project, Some("working"));
    input["hook_event_name"] = json!("SubagentStop");
    rejected(
        &project,
        &to_bytes(&input),
        &[
            "registered for SubagentStop; ralph only handles the Stop, StopFailure and SessionEnd events",
        ],
    );
}
