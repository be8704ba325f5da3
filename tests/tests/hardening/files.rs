//! The prompt, guardrails and configuration files: missing, empty, too
//! large, binary, a FIFO or a device.

use super::{
    TIMEOUT, hook_command, mkfifo, one_line, rejected, rejected_at_once, run_hook_quick,
    sparse_file, working,
};
use ralph_tests::cli::looping;
use ralph_tests::project::{TempProject, run_measured};
use std::fs;
use std::io::Write;
use std::path::PathBuf;

// ------------------------------------------------------------------ prompt

fn prompt_path(project: &TempProject) -> PathBuf {
    project.path(".claude/ralph/PROMPT.md")
}

/// Writes `contents` as the prompt and asserts the stop is let through
/// with one line holding `needle`.
fn prompt_rejected(project: &TempProject, contents: &[u8], needle: &str) {
    fs::write(prompt_path(project), contents).unwrap();
    rejected(project, &working(project), &[needle]);
}

#[test]
fn prompt_missing() {
    let project = looping("prompt-missing", 5);
    fs::remove_file(prompt_path(&project)).unwrap();
    rejected(
        &project,
        &working(&project),
        &[&format!(
            "prompt file {} does not exist; create it",
            prompt_path(&project).display()
        )],
    );
}

#[test]
fn prompt_empty() {
    let project = looping("prompt-empty", 5);
    for text in ["", " \n\n\t\n"] {
        prompt_rejected(
            &project,
            text.as_bytes(),
            "PROMPT.md is empty; write the task into it",
        );
    }
}

#[test]
fn prompt_over_1_mib() {
    let project = looping("prompt-huge", 5);
    prompt_rejected(
        &project,
        "x".repeat((1 << 20) + 1).as_bytes(),
        "PROMPT.md is larger than 1024 KiB; shorten it",
    );
}

#[test]
fn prompt_binary() {
    let project = looping("prompt-binary", 5);
    for bytes in [
        &b"\x7fELF\x02\x01\x01\x00\x00\x00\x00"[..],
        b"Do the task\x00 now",
        b"caf\xe9\n",
    ] {
        prompt_rejected(
            &project,
            bytes,
            "PROMPT.md is not UTF-8 text; save it as plain text",
        );
    }
}

#[test]
fn prompt_is_a_fifo() {
    let project = looping("prompt-fifo", 5);
    fs::remove_file(prompt_path(&project)).unwrap();
    mkfifo(&prompt_path(&project));
    rejected_at_once(
        &project,
        &working(&project),
        &["PROMPT.md: not a regular file"],
    );
}

#[test]
fn guardrails_is_a_fifo() {
    let project = looping("guardrails-fifo", 5);
    let path = project.path(".claude/ralph/guardrails.md");
    fs::remove_file(&path).unwrap();
    mkfifo(&path);
    rejected_at_once(
        &project,
        &working(&project),
        &["guardrails.md: not a regular file"],
    );
}

#[test]
fn config_is_a_fifo_or_a_device() {
    // Read by a stop of a loop without a pin (see TempProject::unpin).
    let project = looping("config-fifo", 5);
    project.unpin();
    let path = project.path(".claude/ralph/config.json");
    let before = project.state_bytes();
    let input = working(&project);
    mkfifo(&path);
    let run = run_hook_quick(hook_command(&project), &input);
    one_line(&run, &["config.json: not a regular file"]);
    // An endless device is refused before a single byte is read.
    fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
    let run = run_hook_quick(hook_command(&project), &input);
    one_line(&run, &["config.json: not a regular file"]);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn config_of_1_gib_is_read_bounded() {
    let project = looping("config-huge", 5);
    project.unpin();
    let path = project.path(".claude/ralph/config.json");
    sparse_file(&path, 1 << 30, b"{", b"}");
    let before = project.state_bytes();
    let input = working(&project);
    let (run, peak_kib) = run_measured(hook_command(&project), TIMEOUT, move |mut stdin| {
        let _ = stdin.write_all(&input);
    });
    one_line(&run, &["config.json is larger than 1024 KiB"]);
    println!("peak RSS {} MiB; {:?}", peak_kib >> 10, run.elapsed);
    assert!(peak_kib < 96 * 1024, "read whole: {peak_kib} KiB");
    assert_eq!(project.state_bytes(), before);
    fs::remove_file(&path).unwrap();
}
