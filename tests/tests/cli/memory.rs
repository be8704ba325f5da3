//! The hook's peak memory on transcript tails made to blow up a reader,
//! measured on the built hook (wait4's rusage).
//!
//! Measured from a process of its own: a child's peak RSS includes what its
//! parent held when it was started, so the measuring process must stay
//! small, which it cannot next to other tests (some hold tens of MB). The
//! test runs itself again, alone, in a new process of its test binary.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use ralph_tests::bins;
use ralph_tests::cli::SID;
use ralph_tests::project::{Run, TempProject, run_measured};
use serde_json::{Value, json};

/// A bound on one run of the hook (they take seconds), never a wait.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The hook with `RALPH_ACTIVE=1` in the project's clean environment.
fn hook_command(project: &TempProject) -> Command {
    let mut cmd = project.command(bins::hook());
    cmd.env("RALPH_ACTIVE", "1");
    cmd
}

/// Set in the process that [`alone`] starts.
const ALONE: &str = "RALPH_MEMORY_TEST_ALONE";

/// Whether this process is the one to measure in: the test `test` of this
/// module runs alone in a new process of this test binary. Outside that
/// process, runs it there, passes its output on, and panics unless it ran
/// and passed.
fn alone(test: &str) -> bool {
    if std::env::var_os(ALONE).is_some() {
        return true;
    }
    // The test's name is its path without the crate's name.
    let name = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    };
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        out.status.success(),
        "{name} failed alone: {:?}",
        out.status
    );
    assert!(
        stdout.contains("test result: ok. 1 passed;"),
        "{name} did not run alone"
    );
    false
}

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// The `reason` of a block answer.
fn block_reason(run: &Run) -> String {
    assert_eq!(run.code, Some(0), "{run:?}");
    let answer: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not a JSON answer ({e}): {run:?}"));
    ralph_tests::cli::go_on_text(&answer)
        .unwrap_or_else(|| panic!("the loop goes on: {answer}"))
        .to_string()
}

// ------------------------------------------------ crafted transcript tails

const MIB: usize = 1024 * 1024;
/// Just under the transcript reader's line bound (4 MiB).
const NEAR_LINE_BOUND: usize = 4 * MIB - 64;

/// `prefix`, then `unit` repeated, then `suffix`: one line of about `size` bytes.
fn padded(prefix: &str, unit: &str, suffix: &str, size: usize) -> String {
    let n = (size - prefix.len() - suffix.len()) / unit.len();
    let mut line = String::with_capacity(size + 1);
    line.push_str(prefix);
    line.push_str(&unit.repeat(n));
    // The units are comma-separated values: no comma before the suffix.
    if line.ends_with(',') {
        line.pop();
    }
    line.push_str(suffix);
    line.push('\n');
    line
}

/// A transcript whose last `total` bytes are `line(i)` repeated (no prompt
/// line among them), then `last`; the loop's usage cursor is set at its
/// start, so the stop reads all of it for requests and tokens (at most
/// 64 MiB), and the iteration from its end (at most 16 MiB).
fn crafted_transcript(
    project: &TempProject,
    name: &str,
    total: usize,
    line: impl Fn(usize) -> String,
    last: &str,
) -> PathBuf {
    let path = project.tmp.join(format!("{name}.jsonl"));
    let mut file = io::BufWriter::new(File::create(&path).unwrap());
    writeln!(
        file,
        r#"{{"type":"user","message":{{"role":"user","content":"Do the task"}}}}"#
    )
    .unwrap();
    let mut written = 0;
    for i in 0.. {
        if written >= total {
            break;
        }
        let line = line(i);
        written += line.len();
        file.write_all(line.as_bytes()).unwrap();
    }
    writeln!(file, "{last}").unwrap();
    file.flush().unwrap();
    let mut state = project.state().unwrap();
    state["transcript"] = json!({"path": path, "offset": 0});
    project.write_state(&state);
    path
}

#[test]
#[allow(clippy::too_many_lines)] // one built hook measured on each crafted tail in turn
fn crafted_transcript_tails_keep_the_hook_s_memory_bounded() {
    if !alone("crafted_transcript_tails_keep_the_hook_s_memory_bounded") {
        return;
    }
    // Peak RSS of the built hook (from wait4's rusage) on transcript tails
    // made to blow up a reader: a JSON tree of a 4 MiB line of tiny values
    // took 40 times its size, every distinct id was kept, and a message of
    // short lines was split into a list of lines.
    const BUDGET_KIB: u64 = 40 * 1024;
    let answer = |id: &str| {
        format!(
            r#"{{"type":"assistant","message":{{"id":"{id}","role":"assistant","content":[{{"type":"text","text":"Still working."}}]}}}}"#
        )
    };
    type Line = Box<dyn Fn(usize) -> String>;
    let cases: Vec<(&str, usize, Line, String)> = vec![
        (
            "lines sharing one message id, each a field of tiny values",
            13 * MIB,
            Box::new(|_| {
                padded(
                    r#"{"type":"assistant","message":{"id":"msg_same","role":"assistant","content":[{"type":"text","text":"x"}]},"pad":["#,
                    "0,",
                    "]}",
                    NEAR_LINE_BOUND,
                )
            }),
            answer("msg_same"),
        ),
        (
            "lines sharing one message id, each of tiny content blocks",
            13 * MIB,
            Box::new(|_| {
                padded(
                    r#"{"type":"assistant","message":{"id":"msg_same","role":"assistant","content":[{"type":"text","text":"x"},"#,
                    r#"{"type":"image"},"#,
                    "]}}",
                    NEAR_LINE_BOUND,
                )
            }),
            answer("msg_same"),
        ),
        (
            "one text block of short lines, just under the line bound",
            13 * MIB,
            Box::new(|_| {
                padded(
                    r#"{"type":"assistant","message":{"id":"msg_same","role":"assistant","content":[{"type":"text","text":""#,
                    r"a\n",
                    r#""}]}}"#,
                    NEAR_LINE_BOUND,
                )
            }),
            answer("msg_same"),
        ),
        (
            "distinct message ids, 64 MiB of them",
            64 * MIB,
            Box::new(|i| format!("{{\"type\":\"assistant\",\"message\":{{\"id\":\"m{i}\"}}}}\n")),
            answer("msg_final"),
        ),
        (
            "tool_use blocks, just under the line bound",
            13 * MIB,
            Box::new(|_| {
                padded(
                    r#"{"type":"assistant","message":{"id":"msg_calls","role":"assistant","content":["#,
                    r#"{"type":"tool_use","name":"Bash","input":{}},"#,
                    "]}}",
                    NEAR_LINE_BOUND,
                )
            }),
            answer("msg_final"),
        ),
        (
            "failing tool results, just under the line bound",
            13 * MIB,
            Box::new(|_| {
                padded(
                    r#"{"type":"user","message":{"role":"user","content":["#,
                    r#"{"type":"tool_result","tool_use_id":"t","is_error":true,"content":"e"},"#,
                    "]}}",
                    NEAR_LINE_BOUND,
                )
            }),
            answer("msg_final"),
        ),
    ];
    let project = ralph_tests::cli::looping_idle("crafted-tails", 100);
    for (name, total, line, last) in cases {
        let path = crafted_transcript(&project, "tail", total, line, &last);
        let input = to_bytes(&json!({
            "session_id": SID,
            "transcript_path": path,
            "cwd": project.root,
            "hook_event_name": "Stop",
            "stop_hook_active": true,
        }));
        let (run, peak_kib) = run_measured(hook_command(&project), TIMEOUT, move |mut stdin| {
            let _ = stdin.write_all(&input);
        });
        println!(
            "{name}: {} MiB transcript, peak RSS {:.1} MiB, {:?}",
            fs::metadata(&path).unwrap().len() >> 20,
            peak_kib as f64 / 1024.0,
            run.elapsed
        );
        assert!(
            block_reason(&run).contains("[Ralph loop: iteration"),
            "{name}: {run:?}"
        );
        assert_eq!(run.stderr, "", "{name}");
        assert!(peak_kib < BUDGET_KIB, "{name}: peak RSS {peak_kib} KiB");
        fs::remove_file(&path).unwrap();
    }
}
