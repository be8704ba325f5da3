//! The transcript the input points at: missing, a folder, unreadable, a
//! FIFO, a partial last line, invalid UTF-8, 1 GiB.

use super::{
    TIMEOUT, assistant_line, block_reason, drop_root, ended, hook_command, mkfifo, one_line,
    rejected, rejected_at_once, run_hook, sparse_file, transcript_input,
};
use ralph_tests::SIGNAL;
use ralph_tests::cli::looping;
use std::fs;
use std::os::unix::fs::PermissionsExt;

#[test]
fn transcript_missing() {
    let project = looping("transcript-missing", 5);
    let path = project.path("transcript.jsonl");
    rejected(
        &project,
        &transcript_input(&project, &path),
        &[
            &format!("cannot read the transcript {}", path.display()),
            "No such file or directory",
        ],
    );
}

#[test]
fn transcript_is_a_directory() {
    let project = looping("transcript-dir", 5);
    let path = project.path("transcript.jsonl");
    fs::create_dir(&path).unwrap();
    rejected(
        &project,
        &transcript_input(&project, &path),
        &[&format!(
            "the transcript {} is not a regular file",
            path.display()
        )],
    );
}

#[test]
fn transcript_unreadable() {
    let project = looping("transcript-unreadable", 5);
    let path = project.path("transcript.jsonl");
    fs::write(&path, assistant_line("m1", "working")).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
    let before = project.state_bytes();
    let mut cmd = hook_command(&project);
    drop_root(&project, &mut cmd);
    let run = run_hook(cmd, &transcript_input(&project, &path));
    one_line(
        &run,
        &[
            &format!("cannot read the transcript {}", path.display()),
            "Permission denied",
        ],
    );
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn transcript_with_a_partial_last_line_still_works() {
    // The client may be mid-write: the cut line is skipped, the one before counts.
    let project = looping("transcript-partial", 5);
    let path = project.path("transcript.jsonl");
    let mut text = assistant_line("m1", "First message.");
    text.push_str(&assistant_line("m2", "The finished message."));
    text.push_str(r#"{"type":"assistant","message":{"id":"m3","role":"assistant","content":[{"type":"text","text":"half a mess"#);
    fs::write(&path, text).unwrap();
    let run = run_hook(hook_command(&project), &transcript_input(&project, &path));
    assert!(block_reason(&run).starts_with("[Ralph loop: iteration 2 of 5]"));
    assert_eq!(run.stderr, "");
    let state = project.state().unwrap();
    assert_eq!(state["history"][0]["excerpt"], "The finished message.");
    assert_eq!(state["history"][0]["messageSource"], "transcript");
}

#[test]
fn transcript_lines_with_invalid_utf8_are_skipped() {
    let project = looping("transcript-utf8", 5);
    let path = project.path("transcript.jsonl");
    let mut bytes = assistant_line("m1", "Valid message.").into_bytes();
    // An assistant line whose text is Latin-1, then plain garbage.
    bytes.extend_from_slice(
        b"{\"type\":\"assistant\",\"message\":{\"id\":\"m2\",\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"caf\xe9 RALPH_AUDIT_COMPLETE_NO_FINDINGS\"}]}}\n",
    );
    bytes.extend_from_slice(b"\xff\xfe\xfd \"assistant\" \xc0\x80\n");
    fs::write(&path, bytes).unwrap();
    let run = run_hook(hook_command(&project), &transcript_input(&project, &path));
    block_reason(&run);
    assert_eq!(run.stderr, "");
    let state = project.state().unwrap();
    assert_eq!(
        state["status"], "running",
        "the non-UTF-8 signal line never counts"
    );
    assert_eq!(state["history"][0]["excerpt"], "Valid message.");
}

#[test]
fn transcript_of_1_gib_is_read_from_its_end_only() {
    const GIB: u64 = 1 << 30;
    let project = looping("transcript-1gib", 5);
    let path = project.path("transcript.jsonl");

    // The completion is in the last lines: found at once.
    let tail = format!(
        "\n{}{}",
        assistant_line("m1", "Working."),
        assistant_line("m2", &format!("All verified.\n{SIGNAL}"))
    );
    sparse_file(&path, GIB, b"", tail.as_bytes());
    let run = run_hook(hook_command(&project), &transcript_input(&project, &path));
    assert!(ended(&run).starts_with("Ralph loop complete"), "{run:?}");
    println!("1 GiB transcript, message at the end: {:?}", run.elapsed);
    assert!(run.elapsed < TIMEOUT);
    let state = project.state().unwrap();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["history"][0]["messageSource"], "transcript");

    // The only assistant message is 1 GiB back: the scan gives up after its
    // bound, the transcript counts as not caught up with the stop (after the
    // bounded wait), and the loop goes on.
    let project2 = looping("transcript-1gib-head", 5);
    let path2 = project2.path("transcript.jsonl");
    fs::remove_file(&path).unwrap();
    sparse_file(
        &path2,
        GIB,
        assistant_line("m1", SIGNAL).as_bytes(),
        b"\n{\"type\":\"system\"}\n",
    );
    let run = run_hook(
        hook_command(&project2),
        &transcript_input(&project2, &path2),
    );
    println!("1 GiB transcript, message at the start: {:?}", run.elapsed);
    block_reason(&run);
    assert!(run.elapsed < TIMEOUT);
    let state = project2.state().unwrap();
    assert_eq!(state["status"], "running");
    assert_eq!(state["history"][0]["messageSource"], "transcript_behind");
    fs::remove_file(&path2).unwrap();
}

#[test]
fn transcript_is_a_fifo() {
    let project = looping("transcript-fifo", 5);
    let path = project.path("transcript.jsonl");
    mkfifo(&path);
    rejected_at_once(
        &project,
        &transcript_input(&project, &path),
        &[&format!(
            "the transcript {} is not a regular file",
            path.display()
        )],
    );
}
