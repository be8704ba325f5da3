//! Hardening tests of the built `ralph-stop-hook`.
//!
//! - Crash safety: hooks killed with SIGKILL at random moments never leave a
//!   torn, empty or missing state, never move the iteration backwards, and
//!   never pile up temp files.
//! - Bad input of every kind: the stop is let through (exit 0, nothing on
//!   stdout) with exactly one `ralph-stop-hook: ` line on stderr, no panic,
//!   and the state byte-identical.
//! - Security: hostile session ids, private file modes, symlinks never
//!   followed for writing, model text never executed, git never running a
//!   program that the repository's or the user's configuration names,
//!   verification commands dying with a killed hook.
//!
//! Root ignores file modes, so when these tests run as root a folder is made
//! unwritable with `chattr +i` (where the file system has no such flag, the
//! hook runs unprivileged instead), and a file is made unreadable by running
//! the hook as uid 65534 on a project handed over to that user.
//!
//! The crash test prints its seed; `RALPH_CRASH_SEED=N` replays a run.

mod crash;
mod env;
mod execution;
mod files;
mod input;
mod paths;
mod state;
mod transcript;

use ralph_tests::bins;
use ralph_tests::cli::stop_input;
use ralph_tests::listen::is_root;
use ralph_tests::project::{Run, TempProject, run_with_timeout};
use serde_json::{Value, json};
use std::fs::{self, File};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A generous sanity bound for one hook run, never a performance target.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The uid (and gid) the hook runs as when a test needs file modes to bite under root.
const NOBODY: u32 = 65534;

// ---------------------------------------------------------------- helpers

fn to_bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// The hook with `RALPH_ACTIVE=1` in the project's clean environment.
fn hook_command(project: &TempProject) -> Command {
    let mut cmd = project.command(bins::hook());
    cmd.env("RALPH_ACTIVE", "1");
    cmd
}

fn run_hook(cmd: Command, stdin: &[u8]) -> Run {
    run_with_timeout(cmd, Some(stdin), TIMEOUT)
}

/// Asserts the stop was let through with exactly one `ralph-stop-hook: `
/// line on stderr containing every needle, and returns that line.
fn one_line(run: &Run, needles: &[&str]) -> String {
    assert_eq!(run.code, Some(0), "the hook always exits 0: {run:?}");
    assert_eq!(run.stdout, "", "an allowed stop prints nothing on stdout");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one stderr line: {:?}", run.stderr);
    let line = lines[0];
    assert!(line.starts_with("ralph-stop-hook: "), "{line}");
    // What the hook's panic hook prints instead of Rust's "panicked at".
    assert!(!line.contains("internal error"), "{line}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} in {line:?}");
    }
    println!("stderr: {line}");
    line.to_string()
}

/// Asserts a stop that ended the loop: exit 0, nothing on stderr, and on
/// stdout only the `systemMessage` saying how it ended, which is returned.
fn ended(run: &Run) -> String {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stderr, "", "{run:?}");
    let answer: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not a JSON answer ({e}): {run:?}"));
    assert!(answer.get("decision").is_none(), "{answer}");
    answer["systemMessage"].as_str().unwrap().to_string()
}

/// The `reason` of a block answer.
fn block_reason(run: &Run) -> String {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(!run.stderr.contains("internal error"), "{}", run.stderr);
    let answer: Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not a JSON answer ({e}): {run:?}"));
    ralph_tests::cli::go_on_text(&answer)
        .unwrap_or_else(|| panic!("the loop goes on: {answer}"))
        .to_string()
}

/// The input of a stop whose agent says it is working, as bytes.
fn working(project: &TempProject) -> Vec<u8> {
    to_bytes(&stop_input(project, Some("working")))
}

/// [`rejected`] for an input whose stop is let through at once (the hook
/// run under [`run_hook_quick`]'s shorter bound).
fn rejected_at_once(project: &TempProject, input: &[u8], needles: &[&str]) -> String {
    let before = project.state_bytes();
    let line = one_line(&run_hook_quick(hook_command(project), input), needles);
    assert_eq!(project.state_bytes(), before, "the state is byte-identical");
    line
}

/// Runs the hook on `input` and asserts one line with the needles and the state untouched.
fn rejected(project: &TempProject, input: &[u8], needles: &[&str]) -> String {
    let before = project.state_bytes();
    let line = one_line(&run_hook(hook_command(project), input), needles);
    assert_eq!(project.state_bytes(), before, "the state is byte-identical");
    line
}

fn chown_tree(path: &Path, id: u32) {
    std::os::unix::fs::lchown(path, Some(id), Some(id)).unwrap();
    if fs::symlink_metadata(path).unwrap().is_dir() {
        for entry in fs::read_dir(path).unwrap() {
            chown_tree(&entry.unwrap().path(), id);
        }
    }
}

/// Makes file modes bite: as root, hands the project (and ralph's key in
/// its HOME, as a user owns theirs) over to uid 65534 and makes `cmd` run
/// as that user, its program from beside the project where that user
/// reaches it; otherwise leaves both alone.
fn drop_root(project: &TempProject, cmd: &mut Command) {
    if is_root() {
        chown_tree(&project.root, NOBODY);
        if project.key_dir().exists() {
            chown_tree(&project.key_dir(), NOBODY);
        }
        ralph_tests::reach::run_from_reach(cmd, &project.root.parent().unwrap().join("bin"));
        cmd.uid(NOBODY).gid(NOBODY);
    }
}

/// Puts `kind` at `path` in place of its file: `"a FIFO"` or `"a link to
/// /dev/zero"` (an endless device).
fn replace_with_special(path: &Path, kind: &str) {
    fs::remove_file(path).unwrap();
    match kind {
        "a FIFO" => mkfifo(path),
        "a link to /dev/zero" => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        _ => panic!("no special file {kind:?}"),
    }
}

/// Moves the state of `project` to `elsewhere.json` and puts a symbolic
/// link to it in its place; the target and its bytes.
fn state_behind_a_link(project: &TempProject) -> (PathBuf, Vec<u8>) {
    let state = project.state_path();
    let target = project.path("elsewhere.json");
    fs::rename(&state, &target).unwrap();
    std::os::unix::fs::symlink(&target, &state).unwrap();
    let bytes = fs::read(&target).unwrap();
    (target, bytes)
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

// ------------------------------------------------------------- transcripts

fn assistant_line(id: &str, text: &str) -> String {
    let line = json!({"type": "assistant", "message": {"id": id, "role": "assistant",
        "content": [{"type": "text", "text": text}]}});
    format!("{line}\n")
}

/// The input without `last_assistant_message`, pointing at `transcript`.
fn transcript_input(project: &TempProject, transcript: &Path) -> Vec<u8> {
    let mut input = stop_input(project, None);
    input["transcript_path"] = json!(transcript);
    to_bytes(&input)
}

/// Writes a sparse file of exactly `len` bytes ending with `tail`.
fn sparse_file(path: &Path, len: u64, head: &[u8], tail: &[u8]) {
    let mut file = File::create(path).unwrap();
    file.write_all(head).unwrap();
    file.set_len(len).unwrap();
    file.seek(SeekFrom::Start(len - tail.len() as u64)).unwrap();
    file.write_all(tail).unwrap();
}

/// Runs the hook with a shorter bound: these cases used to hang on open(2).
fn run_hook_quick(cmd: Command, stdin: &[u8]) -> Run {
    let run = run_with_timeout(cmd, Some(stdin), Duration::from_secs(10));
    assert!(
        !run.stderr.contains("[killed after"),
        "the hook hung: {run:?}"
    );
    run
}
