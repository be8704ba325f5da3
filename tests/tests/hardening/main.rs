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

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ralph_tests::SIGNAL;
use ralph_tests::bins;
use ralph_tests::cli::{SID, looping, looping_idle, stop_input};
use ralph_tests::project::{
    INSTALLED_FILES, Run, TempProject, limit_file_size, process_group_of, processes_in_group,
    processes_in_pid_namespace, processes_matching, run_measured, run_with_timeout, signal_process,
};
use serde_json::{Value, json};

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

/// Asserts a silent allowed stop: exit 0, nothing on stdout or stderr.
fn silent(run: &Run) {
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
    assert_eq!(run.stderr, "", "{run:?}");
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

/// Runs the hook on `input` and asserts one line with the needles and the state untouched.
fn rejected(project: &TempProject, input: &[u8], needles: &[&str]) -> String {
    let before = project.state_bytes();
    let line = one_line(&run_hook(hook_command(project), input), needles);
    assert_eq!(project.state_bytes(), before, "the state is byte-identical");
    line
}

use ralph_tests::listen::is_root;

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

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

fn temp_files(project: &TempProject) -> Vec<String> {
    let Ok(entries) = fs::read_dir(project.path(".claude/context/runtime")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ralph-state.json.tmp-"))
        .collect()
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o777
}

/// A small deterministic PRNG (xorshift64*), so a failing run can be replayed from its seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

// ------------------------------------------------------------ crash safety

#[test]
#[allow(clippy::too_many_lines)] // one crash run: its reader, workers and checks share the counters
fn sigkill_at_random_moments_never_tears_or_rewinds_the_state() {
    const WORKERS: u64 = 2;
    const PER_WORKER: u64 = 200;
    let seed = std::env::var("RALPH_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            u64::try_from(nanos).unwrap()
        });
    println!("crash-safety seed {seed} (replay with RALPH_CRASH_SEED={seed})");

    let project = Arc::new(looping_idle("crash", 100_000));
    let stdin = Arc::new(to_bytes(&stop_input(&project, Some("working"))));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicU64::new(0));
    let completed = Arc::new(AtomicU64::new(0));
    let killed = Arc::new(AtomicU64::new(0));
    let mid_write = Arc::new(AtomicU64::new(0));
    // The iteration each completed hook announced: no two may be the same.
    let announced = Arc::new(Mutex::new(Vec::new()));

    // The reader: the state is always there, whole, and never goes back.
    let reader = {
        let project = Arc::clone(&project);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let (mut reads, mut last, mut most_temps) = (0u64, 0u64, 0usize);
            while !stop.load(Ordering::SeqCst) {
                let bytes = fs::read(project.state_path())
                    .unwrap_or_else(|e| panic!("read {reads}: the state must always exist: {e}"));
                assert!(!bytes.is_empty(), "read {reads}: the state is never empty");
                let state: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    panic!(
                        "read {reads}: torn state ({e}): {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
                let iteration = state["iteration"].as_u64().expect("an iteration");
                assert!(
                    iteration >= last,
                    "read {reads}: iteration went back from {last} to {iteration}"
                );
                assert_eq!(state["status"], "running");
                last = iteration;
                if reads % 16 == 0 {
                    most_temps = most_temps.max(temp_files(&project).len());
                }
                reads += 1;
            }
            (reads, most_temps)
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let project = Arc::clone(&project);
            let stdin = Arc::clone(&stdin);
            let (started, completed, killed, mid_write) = (
                Arc::clone(&started),
                Arc::clone(&completed),
                Arc::clone(&killed),
                Arc::clone(&mid_write),
            );
            let announced = Arc::clone(&announced);
            let mut rng = Rng::new(seed ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            thread::spawn(move || {
                for _ in 0..PER_WORKER {
                    let mut child = hook_command(&project)
                        .stdin(Stdio::piped())
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap();
                    started.fetch_add(1, Ordering::SeqCst);
                    // Small input: it fits the pipe, so writing never blocks.
                    let _ = child.stdin.take().unwrap().write_all(&stdin);
                    // One run in five is left alone; the others are killed after
                    // a delay either spread log-uniformly from 1 µs to about
                    // 16 ms (start-up included), or uniform over the 8 ms a
                    // stop takes here (the locked write is the longest part).
                    if rng.below(5) != 0 {
                        let micros = if rng.below(2) == 0 {
                            let scale = 1u64 << rng.below(14);
                            scale + rng.below(scale)
                        } else {
                            rng.below(8_000)
                        };
                        thread::sleep(Duration::from_micros(micros));
                        // Not reaped yet, so the pid is still this child's.
                        signal_process(child.id(), libc::SIGKILL);
                    }
                    let pid = child.id();
                    let out = child.wait_with_output().unwrap();
                    if out.status.signal() == Some(libc::SIGKILL) {
                        killed.fetch_add(1, Ordering::SeqCst);
                        let temp = format!(".ralph-state.json.tmp-{pid}");
                        if temp_files(&project).contains(&temp) {
                            mid_write.fetch_add(1, Ordering::SeqCst);
                        }
                        continue;
                    }
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert_eq!(out.status.code(), Some(0), "{stderr}");
                    assert_eq!(stderr, "", "a clean stop prints nothing on stderr");
                    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                        panic!(
                            "a hook that exited 0 printed a whole answer ({e}): {:?}",
                            String::from_utf8_lossy(&out.stdout)
                        )
                    });
                    assert!(ralph_tests::cli::go_on_text(&answer).is_some(), "{answer}");
                    let notice = answer["systemMessage"].as_str().unwrap();
                    let n: u64 = notice
                        .trim_start_matches("Ralph iteration ")
                        .split('/')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or_else(|| panic!("{notice}"));
                    announced.lock().unwrap().push(n);
                    completed.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let outcomes: Vec<_> = workers
        .into_iter()
        .map(std::thread::JoinHandle::join)
        .collect();
    stop.store(true, Ordering::SeqCst);
    let (reads, most_temps) = reader.join().unwrap();
    for outcome in outcomes {
        outcome.unwrap();
    }

    let (started, completed, killed, mid_write) = (
        started.load(Ordering::SeqCst),
        completed.load(Ordering::SeqCst),
        killed.load(Ordering::SeqCst),
        mid_write.load(Ordering::SeqCst),
    );
    let iteration = project.state().unwrap()["iteration"].as_u64().unwrap();
    let committed_then_killed = iteration.saturating_sub(completed + 1);
    println!(
        "{started} hooks started, {completed} completed, {killed} killed \
         ({mid_write} of them mid-write, {committed_then_killed} after committing); \
         final iteration {iteration}; {reads} reads; at most {most_temps} temp files seen"
    );
    assert_eq!(
        started,
        completed + killed,
        "every hook either completed or was killed"
    );
    assert!(
        completed > 0 && killed > 0,
        "the run exercised both outcomes"
    );
    assert!(
        (completed + 1..=started + 1).contains(&iteration),
        "iteration {iteration} within completed+1 ({}) and started+1 ({})",
        completed + 1,
        started + 1
    );
    assert!(committed_then_killed <= killed);
    let mut announced = announced.lock().unwrap().clone();
    announced.sort_unstable();
    let count = announced.len();
    announced.dedup();
    assert_eq!(
        announced.len(),
        count,
        "no iteration announced twice (a lost update)"
    );
    assert!(announced.iter().all(|n| (2..=iteration).contains(n)));
    assert!(
        most_temps as u64 <= 2 * WORKERS,
        "temp files of killed writers do not pile up ({most_temps} seen)"
    );

    // The next clean stop removes what a killed writer left (one is planted,
    // in case no kill landed mid-write) and counts once more.
    fs::write(
        project.path(".claude/context/runtime/.ralph-state.json.tmp-4000000000"),
        "{\"status\": \"runn",
    )
    .unwrap();
    let run = run_hook(hook_command(&project), &stdin);
    assert!(block_reason(&run).starts_with(&format!(
        "[Ralph loop: iteration {} of 100000]",
        iteration + 1
    )));
    assert_eq!(
        temp_files(&project),
        Vec::<String>::new(),
        "no stale temp file left"
    );
    let state = project.state().unwrap();
    assert_eq!(state["iteration"].as_u64(), Some(iteration + 1));
    assert!(state["history"].as_array().unwrap().len() <= 50);
    assert_eq!(mode(&project.state_path()), 0o600);
}

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

/// Writes a sparse file of exactly `len` bytes ending with `tail`.
fn sparse_file(path: &Path, len: u64, head: &[u8], tail: &[u8]) {
    let mut file = File::create(path).unwrap();
    file.write_all(head).unwrap();
    file.set_len(len).unwrap();
    file.seek(SeekFrom::Start(len - tail.len() as u64)).unwrap();
    file.write_all(tail).unwrap();
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

// ------------------------------------------------------------------ prompt

fn prompt_path(project: &TempProject) -> PathBuf {
    project.path(".claude/ralph/PROMPT.md")
}

#[test]
fn prompt_missing() {
    let project = looping("prompt-missing", 5);
    fs::remove_file(prompt_path(&project)).unwrap();
    rejected(
        &project,
        &to_bytes(&stop_input(&project, Some("working"))),
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
        fs::write(prompt_path(&project), text).unwrap();
        rejected(
            &project,
            &to_bytes(&stop_input(&project, Some("working"))),
            &["PROMPT.md is empty; write the task into it"],
        );
    }
}

#[test]
fn prompt_over_1_mib() {
    let project = looping("prompt-huge", 5);
    fs::write(prompt_path(&project), "x".repeat((1 << 20) + 1)).unwrap();
    rejected(
        &project,
        &to_bytes(&stop_input(&project, Some("working"))),
        &["PROMPT.md is larger than 1024 KiB; shorten it"],
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
        fs::write(prompt_path(&project), bytes).unwrap();
        rejected(
            &project,
            &to_bytes(&stop_input(&project, Some("working"))),
            &["PROMPT.md is not UTF-8 text; save it as plain text"],
        );
    }
}

// ------------------------------------------------------------------- state

#[test]
fn state_empty() {
    let project = looping("state-empty", 5);
    fs::write(project.state_path(), "").unwrap();
    rejected(
        &project,
        &to_bytes(&stop_input(&project, Some("working"))),
        &[
            "is corrupt (the file is empty); see it with `ralph-ctl status`, clear it with `ralph-ctl reset`",
        ],
    );
}

#[test]
fn state_corrupt() {
    let project = looping("state-corrupt", 5);
    let input = to_bytes(&stop_input(&project, Some("working")));
    let good = project.state_bytes();
    let half = &good[..good.len() / 2];
    let bogus = String::from_utf8(good.clone())
        .unwrap()
        .replace("\"running\"", "\"bogus\"");
    for content in [half, b"[]", b"\xff\xfe", bogus.as_bytes(), b"\x00\x00"] {
        fs::write(project.state_path(), content).unwrap();
        rejected(&project, &input, &["is corrupt (", "ralph-ctl reset"]);
    }
    // Over 4 MiB (sparse): refused without being read.
    let file = File::create(project.state_path()).unwrap();
    file.set_len(5 << 20).unwrap();
    rejected(
        &project,
        &input,
        &["is corrupt (5242880 bytes, more than the 4194304 a state can hold)"],
    );
}

#[test]
fn state_not_a_regular_file() {
    let project = looping("state-dir", 5);
    let input = to_bytes(&stop_input(&project, Some("working")));
    let state = project.state_path();
    fs::remove_file(&state).unwrap();
    fs::create_dir(&state).unwrap();
    let line = one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is not a regular file)", "ralph-ctl reset"],
    );
    assert!(line.contains(&state.display().to_string()));
    assert!(state.is_dir() && fs::read_dir(&state).unwrap().next().is_none());
    fs::remove_dir(&state).unwrap();
    mkfifo(&state);
    one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is not a regular file)"],
    );
}

#[test]
fn state_symlink_is_refused_and_its_target_untouched() {
    let project = looping("state-symlink", 5);
    let state = project.state_path();
    let target = project.path("elsewhere.json");
    fs::rename(&state, &target).unwrap();
    std::os::unix::fs::symlink(&target, &state).unwrap();
    let before = fs::read(&target).unwrap();
    let input = to_bytes(&stop_input(&project, Some("working")));
    one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is a symbolic link; ralph only uses a regular file here)"],
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        before,
        "the target is untouched"
    );
    assert!(fs::symlink_metadata(&state).unwrap().is_symlink());
}

#[test]
fn state_with_extreme_counters_never_panics() {
    // Values a hand-edited state may hold: the largest the fields accept.
    let project = looping("state-extreme", 5);
    let mut state = project.state().unwrap();
    state["lastFindingsCount"] = json!(4);
    state["breaker"]["state"] = json!("half_open");
    state["breaker"]["halfOpenIterations"] = json!(u32::MAX);
    state["breaker"]["counters"]["findingsStuck"] = json!(u32::MAX);
    state["testOnlyIterations"] = json!(u32::MAX);
    project.write_state(&state);
    let stuck = to_bytes(&stop_input(
        &project,
        Some("RALPH_ITERATION_COMPLETE: 4 findings remain"),
    ));
    let message = ended(&run_hook(hook_command(&project), &stuck));
    assert!(message.contains("circuit breaker"), "{message}");
    let after = project.state().unwrap();
    assert_eq!(after["status"], "circuit_open", "{after:#}");
    assert_eq!(
        after["breaker"]["counters"]["findingsStuck"],
        json!(u32::MAX)
    );

    let project = looping("state-extreme-cap", 5);
    let mut state = project.state().unwrap();
    state["iteration"] = json!(u32::MAX);
    state["maxIterations"] = json!(u32::MAX);
    state["lastFindingsCount"] = json!(u64::MAX);
    project.write_state(&state);
    let big = format!("RALPH_ITERATION_COMPLETE: {} findings remain", u64::MAX);
    let message = ended(&run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some(&big))),
    ));
    assert!(message.contains("iteration cap"), "{message}");
    assert_eq!(project.state().unwrap()["status"], "max_iterations");
}

#[test]
fn state_folder_is_a_file() {
    let project = looping("runtime-file", 5);
    let runtime = project.path(".claude/context/runtime");
    fs::remove_dir_all(&runtime).unwrap();
    fs::write(&runtime, "not a folder").unwrap();
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("working"))),
    );
    one_line(&run, &["runtime is not a folder; move it aside"]);
    assert_eq!(fs::read_to_string(&runtime).unwrap(), "not a folder");
}

#[test]
fn anything_at_a_lock_file_path_changes_nothing() {
    // The lock is the state folder's own: a directory or a link where an
    // older version kept its lock file is neither used nor followed.
    let project = looping("old-lock-path", 5);
    let lock = project.path(".claude/context/runtime/ralph-state.json.lock");
    let _ = fs::remove_file(&lock);
    fs::create_dir(&lock).unwrap();
    let input = to_bytes(&stop_input(&project, Some("working")));
    block_reason(&run_hook(hook_command(&project), &input));
    fs::remove_dir(&lock).unwrap();
    let missing = project.path("created-through-the-link");
    std::os::unix::fs::symlink(&missing, &lock).unwrap();
    block_reason(&run_hook(hook_command(&project), &input));
    assert!(!missing.exists(), "no file created through the link");
    assert_eq!(project.state().unwrap()["iteration"], 3);
}

#[test]
fn stops_count_exactly_while_files_beside_the_state_are_deleted() {
    // 300 stops at once while another process deletes and replaces what
    // lies beside the state: every block answered is one iteration counted.
    let project = Arc::new(looping_idle("deleted-beside", 10_000));
    let runtime = project.path(".claude/context/runtime");
    let done = Arc::new(AtomicBool::new(false));
    let meddler = {
        let (runtime, done) = (runtime.clone(), Arc::clone(&done));
        thread::spawn(move || {
            let lock = runtime.join("ralph-state.json.lock");
            while !done.load(Ordering::SeqCst) {
                let _ = fs::remove_file(&lock);
                let _ = fs::write(&lock, "");
            }
        })
    };
    let input = Arc::new(to_bytes(&stop_input(&project, Some("working"))));
    let blocks = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let (project, input, blocks) = (
                Arc::clone(&project),
                Arc::clone(&input),
                Arc::clone(&blocks),
            );
            thread::spawn(move || {
                for _ in 0..50 {
                    let run = run_hook(hook_command(&project), &input);
                    assert_eq!(run.code, Some(0), "{run:?}");
                    let goes_on = serde_json::from_str::<Value>(&run.stdout)
                        .is_ok_and(|a| ralph_tests::cli::go_on_text(&a).is_some());
                    if goes_on {
                        blocks.fetch_add(1, Ordering::SeqCst);
                    } else {
                        panic!("a stop was not blocked: {run:?}");
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    done.store(true, Ordering::SeqCst);
    meddler.join().unwrap();
    assert_eq!(blocks.load(Ordering::SeqCst), 300);
    assert_eq!(project.state().unwrap()["iteration"], 301);
}

/// A folder made unwritable for the hook, made writable again on drop.
enum Unwritable {
    /// `chattr +i`: even root cannot create a file in it.
    Immutable(PathBuf),
    /// Mode 0555: the hook must not run as root (see [`drop_root`]).
    ReadOnly(PathBuf),
}

impl Unwritable {
    /// As root, tries `chattr +i` (ext4 and most disk file systems; not tmpfs);
    /// otherwise, or when that fails, sets mode 0555.
    fn new(dir: &Path) -> Unwritable {
        if is_root() {
            let immutable = Command::new("chattr")
                .arg("+i")
                .arg(dir)
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if immutable {
                return Unwritable::Immutable(dir.to_path_buf());
            }
            println!("note: `chattr +i` failed here; running the hook as uid {NOBODY} instead");
        }
        fs::set_permissions(dir, fs::Permissions::from_mode(0o555)).unwrap();
        Unwritable::ReadOnly(dir.to_path_buf())
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        match self {
            Unwritable::Immutable(dir) => {
                let _ = Command::new("chattr").arg("-i").arg(dir).status();
            }
            Unwritable::ReadOnly(dir) => {
                let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o755));
            }
        }
    }
}

#[test]
fn state_folder_unwritable() {
    let project = looping("runtime-unwritable", 5);
    let runtime = project.path(".claude/context/runtime");
    let before = project.state_bytes();
    let mut cmd = hook_command(&project);
    let guard = Unwritable::new(&runtime);
    let needle = match guard {
        Unwritable::Immutable(_) => "Operation not permitted",
        Unwritable::ReadOnly(_) => {
            drop_root(&project, &mut cmd);
            "Permission denied"
        }
    };
    let run = run_hook(cmd, &to_bytes(&stop_input(&project, Some("working"))));
    one_line(
        &run,
        &[
            &format!("cannot write {}", project.state_path().display()),
            needle,
        ],
    );
    drop(guard);
    assert_eq!(project.state_bytes(), before);
    assert_eq!(temp_files(&project), Vec::<String>::new());
}

/// Makes `cmd` start with its stdout closed (`closed`) or on /dev/null.
#[allow(unsafe_code)]
fn with_stdout_nowhere(cmd: &mut Command, closed: bool) {
    // SAFETY: open(2), dup2(2) and close(2) are async-signal-safe; the
    // closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if closed {
                libc::close(1);
                return Ok(());
            }
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY);
            if null < 0 || libc::dup2(null, 1) < 0 {
                return Err(io::Error::last_os_error());
            }
            libc::close(null);
            Ok(())
        });
    }
}

#[test]
fn a_stdout_that_goes_nowhere_leaves_the_state_as_it_was() {
    // An answer nobody reads must not count: the block never reached the
    // client, so the iteration did not happen.
    let project = looping("stdout-nowhere", 5);
    let log = project.path(".claude/context/runtime/ralph-log.jsonl");
    for closed in [true, false] {
        let before = project.state_bytes();
        let log_before = fs::read(&log).unwrap_or_default();
        let mut cmd = hook_command(&project);
        with_stdout_nowhere(&mut cmd, closed);
        let run = run_hook(cmd, &to_bytes(&stop_input(&project, Some("working"))));
        one_line(
            &run,
            &[
                "cannot write the answer: stdout is closed or /dev/null",
                "the loop's state was left as it was",
            ],
        );
        assert_eq!(project.state_bytes(), before, "closed: {closed}");
        // The log gains only the hook's line about it, for the launcher.
        let log_after = fs::read(&log).unwrap_or_default();
        let added = String::from_utf8_lossy(&log_after[log_before.len()..]).into_owned();
        assert_eq!(added.lines().count(), 1, "{added}");
        assert!(
            added.contains("\"event\":\"problem\"") && added.contains("cannot write the answer"),
            "{added}"
        );
    }
    // With a reader again, the same stop counts.
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("working"))),
    );
    let answer: Value = serde_json::from_str(&run.stdout).unwrap();
    assert!(ralph_tests::cli::go_on_text(&answer).is_some(), "{run:?}");
    assert_eq!(project.state().unwrap()["iteration"], 2);
}

#[test]
fn disk_full_on_write_keeps_the_old_state() {
    let project = looping("disk-full", 5);
    let before = project.state_bytes();
    let needle = format!("cannot write {}", project.state_path().display());
    for (limit, message) in [
        (0, "working".to_string()),
        (64, "working".to_string()),
        (64, format!("done\n{SIGNAL}")),
    ] {
        let mut cmd = hook_command(&project);
        limit_file_size(&mut cmd, limit);
        let run = run_hook(cmd, &to_bytes(&stop_input(&project, Some(&message))));
        assert_ne!(run.code, None, "killed by a signal (SIGXFSZ?): {run:?}");
        one_line(&run, &[&needle, "File too large"]);
        assert_eq!(
            project.state_bytes(),
            before,
            "the old state survives whole"
        );
        assert_eq!(
            temp_files(&project),
            Vec::<String>::new(),
            "the temp file is removed"
        );
    }
    // With room again, the same stop counts.
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("working"))),
    );
    assert!(block_reason(&run).starts_with("[Ralph loop: iteration 2 of 5]"));
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

#[test]
fn transcript_is_a_fifo() {
    let project = looping("transcript-fifo", 5);
    let path = project.path("transcript.jsonl");
    mkfifo(&path);
    let before = project.state_bytes();
    let run = run_hook_quick(hook_command(&project), &transcript_input(&project, &path));
    one_line(
        &run,
        &[&format!(
            "the transcript {} is not a regular file",
            path.display()
        )],
    );
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn prompt_is_a_fifo() {
    let project = looping("prompt-fifo", 5);
    fs::remove_file(prompt_path(&project)).unwrap();
    mkfifo(&prompt_path(&project));
    let before = project.state_bytes();
    let run = run_hook_quick(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("working"))),
    );
    one_line(&run, &["PROMPT.md: not a regular file"]);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn guardrails_is_a_fifo() {
    let project = looping("guardrails-fifo", 5);
    let path = project.path(".claude/ralph/guardrails.md");
    fs::remove_file(&path).unwrap();
    mkfifo(&path);
    let before = project.state_bytes();
    let run = run_hook_quick(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("working"))),
    );
    one_line(&run, &["guardrails.md: not a regular file"]);
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn config_is_a_fifo_or_a_device() {
    // Read by a stop of a loop without a pin (see TempProject::unpin).
    let project = looping("config-fifo", 5);
    project.unpin();
    let path = project.path(".claude/ralph/config.json");
    let before = project.state_bytes();
    let input = to_bytes(&stop_input(&project, Some("working")));
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
    let input = to_bytes(&stop_input(&project, Some("working")));
    let (run, peak_kib) = run_measured(hook_command(&project), TIMEOUT, move |mut stdin| {
        let _ = stdin.write_all(&input);
    });
    one_line(&run, &["config.json is larger than 1024 KiB"]);
    println!("peak RSS {} MiB; {:?}", peak_kib >> 10, run.elapsed);
    assert!(peak_kib < 96 * 1024, "read whole: {peak_kib} KiB");
    assert_eq!(project.state_bytes(), before);
    fs::remove_file(&path).unwrap();
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
        silent(&run_hook(
            cmd,
            &to_bytes(&stop_input(&project, Some("working"))),
        ));
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

// ---------------------------------------------------------------- security

#[test]
fn escaping_session_ids_are_rejected() {
    let project = looping("session-escape", 5);
    let runtime = project.path(".claude/context/runtime");
    let listing = || {
        let mut names: Vec<_> = fs::read_dir(&runtime)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let files = listing();
    let long = "a".repeat(201);
    for id in [
        "../..",
        "../../../../etc/passwd",
        "/",
        "/etc/passwd",
        "a/b",
        "..\\..",
        "a\u{0}b",
        "\u{0}",
        long.as_str(),
        "a b",
        "a\nb",
        "é",
        "",
        "$(touch pwned)",
    ] {
        let mut input = stop_input(&project, Some("working"));
        input["session_id"] = json!(id);
        rejected(
            &project,
            &to_bytes(&input),
            &[
                "the hook input field `session_id` must be 1 to 200 letters, digits, '-', '_', '.' or ':'",
            ],
        );
    }
    assert_eq!(listing(), files, "nothing created next to the state");
    assert!(!project.path("pwned").exists());
}

/// Runs `cmd` with umask 000, so only the modes ralph asks for apply.
#[allow(unsafe_code)]
fn with_open_umask(cmd: &mut Command) {
    // SAFETY: umask(2) is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
}

#[test]
fn state_files_are_private() {
    let project = TempProject::new("modes");
    project.init();
    project.write_prompt("Do the task.\n");
    let mut start = project.command(bins::ctl());
    start.args(["start", "--session-id", SID]);
    with_open_umask(&mut start);
    run_with_timeout(start, None, TIMEOUT).assert_code(0);
    assert_eq!(mode(&project.state_path()), 0o600, "after ralph-ctl start");

    let mut hook = hook_command(&project);
    with_open_umask(&mut hook);
    block_reason(&run_hook(
        hook,
        &to_bytes(&stop_input(&project, Some("working"))),
    ));
    assert_eq!(project.state().unwrap()["iteration"], 2);
    assert_eq!(mode(&project.state_path()), 0o600, "after a hook run");
}

#[test]
fn a_symlinked_state_is_never_followed_for_writing() {
    let project = looping("symlink-write", 5);
    let state = project.state_path();
    let target = project.path("elsewhere.json");
    fs::rename(&state, &target).unwrap();
    std::os::unix::fs::symlink(&target, &state).unwrap();
    let before = fs::read(&target).unwrap();
    let input = to_bytes(&stop_input(&project, Some(&format!("done {SIGNAL}"))));
    one_line(
        &run_hook(hook_command(&project), &input),
        &["symbolic link"],
    );
    assert_eq!(fs::read(&target).unwrap(), before);

    // `start` refuses it; `start --force` and `reset` move the link aside.
    project
        .ctl(&["start", "--session-id", SID], &[])
        .assert_code(3);
    assert_eq!(fs::read(&target).unwrap(), before);
    project
        .ctl(&["start", "--force", "--session-id", SID], &[])
        .assert_code(0);
    assert_eq!(fs::read(&target).unwrap(), before, "start --force");
    assert!(!fs::symlink_metadata(&state).unwrap().is_symlink());
    fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink(&target, &state).unwrap();
    project.ctl(&["reset"], &[]).assert_code(0);
    assert_eq!(fs::read(&target).unwrap(), before, "reset");
    assert!(fs::symlink_metadata(&state).is_err());
}

#[test]
fn a_linked_state_folder_is_refused_by_the_hook_and_ralph_ctl() {
    // A link where the state folder should be (as a cloned repository could
    // ship) points at another project's loop: nothing may read or replace it.
    let other = looping("linked-other", 5);
    let theirs = other.path(".claude/context/runtime");
    let before = fs::read(other.state_path()).unwrap();
    let project = looping("linked-mine", 5);
    let mine = project.path(".claude/context/runtime");
    fs::remove_dir_all(&mine).unwrap();
    std::os::unix::fs::symlink(&theirs, &mine).unwrap();
    let needle = format!("{} is a symbolic link", mine.display());
    let input = to_bytes(&stop_input(&project, Some(&format!("done {SIGNAL}"))));
    one_line(&run_hook(hook_command(&project), &input), &[&needle]);
    for args in [
        &["status"][..],
        &["start", "--force", "--session-id", SID],
        &["reset"],
        &["log"],
        &["finish", "--session-id", SID],
    ] {
        let run = project.ctl(args, &[]);
        assert_eq!(run.code, Some(1), "{args:?}: {run:?}");
        assert!(run.stderr.contains(&needle), "{args:?}: {run:?}");
    }
    assert_eq!(fs::read(other.state_path()).unwrap(), before);
    assert!(fs::symlink_metadata(&mine).unwrap().is_symlink());
}

#[test]
fn an_unsearchable_state_folder_is_named_not_taken_for_no_loop() {
    let project = looping("unsearchable", 5);
    let runtime = project.path(".claude/context/runtime");
    let before = project.state_bytes();
    let mut hook = hook_command(&project);
    drop_root(&project, &mut hook);
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o000)).unwrap();
    let run = run_hook(hook, &to_bytes(&stop_input(&project, Some("working"))));
    let mut reset = project.command(bins::ctl());
    reset.arg("reset");
    drop_root(&project, &mut reset);
    let reset = run_with_timeout(reset, None, TIMEOUT);
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o755)).unwrap();
    let needle = format!(
        "cannot look at {}: Permission denied",
        project.state_path().display()
    );
    one_line(&run, &[&needle]);
    assert_eq!(reset.code, Some(1), "{reset:?}");
    assert!(reset.stderr.contains(&needle), "{reset:?}");
    assert_eq!(project.state_bytes(), before);
}

#[test]
fn model_text_is_never_executed() {
    let project = looping_idle("no-exec", 25);
    let marker = |n: u32| project.tmp.join(format!("pwned-{n}"));
    let texts = [
        format!("$(touch {})", marker(1).display()),
        format!("`touch {}`", marker(2).display()),
        format!("; touch {} #", marker(3).display()),
        format!(
            "| touch {}\n&& touch {}",
            marker(4).display(),
            marker(5).display()
        ),
        format!("${{IFS}}$(touch${{IFS}}{})", marker(6).display()),
    ];
    for text in &texts {
        let run = run_hook(
            hook_command(&project),
            &to_bytes(&stop_input(&project, Some(text))),
        );
        block_reason(&run);
        let state = project.state().unwrap();
        let last = state["history"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            last["excerpt"].as_str().unwrap(),
            text.split_whitespace().collect::<Vec<_>>().join(" "),
            "kept as text"
        );
    }
    // The same from the transcript, and from PROMPT.md (which is echoed back).
    let transcript = project.path("transcript.jsonl");
    fs::write(
        &transcript,
        assistant_line("m1", &format!("$(touch {})", marker(7).display())),
    )
    .unwrap();
    project.write_prompt(&format!(
        "Do it `touch {}` $(touch {})\n",
        marker(8).display(),
        marker(9).display()
    ));
    let run = run_hook(
        hook_command(&project),
        &transcript_input(&project, &transcript),
    );
    assert!(block_reason(&run).contains(&format!("$(touch {})", marker(9).display())));
    for n in 1..=9 {
        assert!(!marker(n).exists(), "{} was created", marker(n).display());
    }
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

// ------------------------------------------------ programs ralph never runs

#[test]
fn git_never_runs_a_program_the_users_or_the_repositorys_configuration_names() {
    let project = TempProject::new("git-programs");
    project.init();
    project.write_prompt("Do the task.\n");
    fs::write(project.path("notes.txt"), "notes\n").unwrap();
    project.git(&["add", "notes.txt"]);
    project.git(&["commit", "-q", "-m", "notes"]);
    let marker = project.tmp.join("git-ran");
    let trap = format!("touch '{}'", marker.display());
    // The user's own configuration (HOME is the project's) defines a clean
    // filter that the repository's attributes name; the repository names an
    // fsmonitor.
    fs::write(
        project.home.join(".gitconfig"),
        format!("[filter \"mine\"]\n\tclean = {trap}\n\trequired = true\n"),
    )
    .unwrap();
    fs::write(project.path(".gitattributes"), "*.txt filter=mine\n").unwrap();
    let script = project.tmp.join("fsmonitor.sh");
    fs::write(&script, format!("#!/bin/sh\n{trap}\n")).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    project.git(&["config", "core.fsmonitor", &script.display().to_string()]);
    // Same content, new stamp: git compares the content, through the filter.
    let rewrite = || {
        thread::sleep(Duration::from_millis(20));
        fs::write(project.path("notes.txt"), "notes\n").unwrap();
    };
    rewrite();
    project
        .ctl(&["start", "--session-id", SID], &[])
        .assert_code(0);
    assert!(!marker.exists(), "ralph-ctl start ran it");

    rewrite();
    fs::write(project.path("README.md"), "# test project, edited\n").unwrap();
    fs::write(project.path("new.txt"), "new\n").unwrap();
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("Working on it."))),
    );
    block_reason(&run);
    assert!(!marker.exists(), "the hook ran it");
    assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    // The progress check still saw what changed, with git.
    let state = project.state().unwrap();
    assert_eq!(
        state["history"].as_array().unwrap().last().unwrap()["progress"],
        "git"
    );
    let files = &state["breaker"]["progress"]["files"];
    for file in ["README.md", "new.txt"] {
        assert!(files.get(file).is_some(), "{file} not seen: {files}");
    }
    assert!(files.get("notes.txt").is_none(), "same content: {files}");

    // As a person runs it, git runs both.
    project.git(&["status"]);
    assert!(marker.exists(), "plain git status runs the user's filter");
}

/// Where a verification command's processes live, as seen from the test:
/// its own pid namespace when the walls gave it one, else its process group.
#[derive(Debug, Clone)]
enum Scope {
    Namespace(PathBuf),
    Group(u32),
}

/// The pids of live processes (not zombies) in `scope`.
fn scope_members(scope: &Scope) -> Vec<u32> {
    match scope {
        Scope::Namespace(ns) => processes_in_pid_namespace(ns),
        Scope::Group(pgid) => processes_in_group(*pgid),
    }
}

/// The scope of the shell whose command line holds `token`. Walls may put
/// it in a pid namespace of its own, where the pid it knows itself by means
/// nothing outside; the `bwrap` that started it holds the token too, so a
/// process in another namespace wins.
fn scope_of_command_holding(token: &str) -> Option<Scope> {
    let ours = fs::read_link("/proc/self/ns/pid").unwrap();
    let holding = processes_matching(token);
    let namespace = holding.iter().find_map(|(pid, _)| {
        fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .filter(|ns| *ns != ours)
    });
    match namespace {
        Some(ns) => Some(Scope::Namespace(ns)),
        None => holding
            .iter()
            .find_map(|(pid, _)| process_group_of(*pid))
            .map(Scope::Group),
    }
}

/// Kills a verification command's processes when a test ends, whatever
/// happened.
struct KillScope(Scope);

impl Drop for KillScope {
    fn drop(&mut self) {
        match self.0 {
            Scope::Group(pgid) if pgid > 1 => {
                ralph_tests::project::signal_group(pgid, libc::SIGKILL);
            }
            Scope::Group(_) => {}
            Scope::Namespace(_) => {
                for pid in scope_members(&self.0) {
                    signal_process(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Claude Code kills a hook that outlives its timeout: the verification
/// command it was running, and everything that command started, must die
/// with it, and write nothing afterwards.
fn verification_dies_with_the_hook(signal: i32, name: &str) {
    let project = looping(name, 5);
    // In the project: the check's own temp folder is out of the test's sight.
    let leader = project.path("verify.pid");
    let marker = project.path("written-after-the-hook-died");
    // A grandchild that writes into the project a second later, and a long
    // run; only once armed (the test baseline `reload` takes of a new
    // command passes at once).
    let armed = project.path("armed");
    let command = format!(
        "[ -f '{a}' ] || exit 0; (sleep 1; echo late >> '{m}') & echo $$ > '{l}.tmp' && mv '{l}.tmp' '{l}'; sleep 30",
        a = armed.display(),
        m = marker.display(),
        l = leader.display()
    );
    fs::write(
        project.path(".claude/ralph/config.json"),
        serde_json::to_vec(&json!({"verify": [
            {"name": "tests", "command": command, "timeoutSeconds": 60}
        ]}))
        .unwrap(),
    )
    .unwrap();
    // The person's change, adopted by the running loop.
    project.ctl(&["reload"], &[]).assert_code(0);
    fs::write(&armed, "").unwrap();
    let mut hook = hook_command(&project);
    hook.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = hook.spawn().unwrap();
    let input = to_bytes(&stop_input(&project, Some(&format!("All done.\n{SIGNAL}"))));
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leader.exists() {
        assert!(Instant::now() < deadline, "the verification never started");
        thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let scope = scope_of_command_holding(&leader.display().to_string())
        .expect("the verification's shell is found by its command line");
    let _cleanup = KillScope(scope.clone());
    assert!(!scope_members(&scope).is_empty());
    signal_process(child.id(), signal);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(signal), "the hook died of the signal");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !scope_members(&scope).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the verification outlived the hook: {scope:?} {:?}",
            scope_members(&scope)
        );
        thread::sleep(Duration::from_millis(20));
    }
    // Past the moment the grandchild would have written.
    thread::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()));
    assert!(!marker.exists(), "written after the hook died");
}

#[test]
fn verification_dies_with_a_hook_killed_by_sigkill() {
    verification_dies_with_the_hook(libc::SIGKILL, "verify-sigkill");
}

#[test]
fn verification_dies_with_a_hook_killed_by_sigterm() {
    verification_dies_with_the_hook(libc::SIGTERM, "verify-sigterm");
}

// ------------------------------------------ files ralph-ctl init writes and reads

/// The last pid the kernel handed out (Linux); the next ones follow it.
fn last_pid() -> u32 {
    fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn init_never_writes_through_links_planted_at_the_next_pids_temp_names() {
    // A cloned repository can ship `.claude/ralph/.PROMPT.md.tmp-<pid>`
    // links to a file elsewhere for thousands of pids.
    const AHEAD: u32 = 3000;
    let names = [
        ".claude/ralph/.PROMPT.md.tmp-",
        ".claude/ralph/.guardrails.md.tmp-",
        ".claude/ralph/.ralph-audit.sh.tmp-",
        ".claude/ralph/.ralph-audit.bat.tmp-",
        ".claude/.settings.json.tmp-",
    ];
    for attempt in 1.. {
        let project = TempProject::new("planted-temp");
        fs::create_dir_all(project.path(".claude/ralph")).unwrap();
        let victim = project.tmp.join("victim.txt");
        fs::write(&victim, "keep me\n").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let from = last_pid() + 1;
        for pid in from..from + AHEAD {
            for name in names {
                std::os::unix::fs::symlink(&victim, project.path(format!("{name}{pid}"))).unwrap();
            }
        }
        let mut cmd = project.command(bins::ctl());
        cmd.arg("init")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let (status, stdout, stderr) = ralph_tests::project::wait_with_timeout(&mut child, TIMEOUT);
        if !(from..from + AHEAD).contains(&pid) {
            // Other processes took every planted pid first: plant again.
            assert!(attempt < 5, "ralph-ctl never got a planted pid");
            continue;
        }
        assert!(status.is_some_and(|s| s.success()), "{stdout}\n{stderr}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        assert_eq!(mode(&victim), 0o644);
        for file in INSTALLED_FILES {
            let meta = fs::symlink_metadata(project.path(file)).unwrap();
            assert!(meta.is_file(), "{file} is a regular file");
        }
        // Run again: every file is rewritten (the launcher's path changes
        // nothing, so change the settings), still never through a link.
        fs::write(project.path(".claude/settings.json"), "{}\n").unwrap();
        project.init();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        println!(
            "ralph-ctl init ran as pid {pid}, planted {from}..{}",
            from + AHEAD
        );
        break;
    }
}

#[test]
fn init_refuses_a_link_where_it_writes_and_writes_nothing() {
    for name in [
        ".claude/settings.json",
        ".claude/ralph/ralph-audit.sh",
        ".claude/ralph/ralph-audit.bat",
    ] {
        let project = TempProject::new("init-link");
        let victim = project.tmp.join("victim.json");
        fs::write(&victim, "{\"model\": \"opus\"}\n").unwrap();
        let path = project.path(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let run = project.ctl(&["init"], &[]);
        assert_eq!(run.code, Some(1), "{name}: {run:?}");
        let line = format!(
            "ralph-ctl: {} is a symbolic link; ralph-ctl init writes only regular files there",
            path.display()
        );
        assert!(run.stderr.starts_with(&line), "{name}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
        assert_eq!(
            fs::read_to_string(&victim).unwrap(),
            "{\"model\": \"opus\"}\n"
        );
        assert!(fs::symlink_metadata(&path).unwrap().is_symlink());
        assert!(
            !project.path(".claude/ralph/PROMPT.md").exists(),
            "{name}: nothing written before the refusal"
        );
    }

    // A PROMPT.md that is a link to a regular file is the person's: kept,
    // read through, never written. A dangling one is refused.
    let project = TempProject::new("init-prompt-link");
    let shared = project.tmp.join("shared-prompt.md");
    fs::write(&shared, "The shared task.\n").unwrap();
    let prompt = project.path(".claude/ralph/PROMPT.md");
    fs::create_dir_all(prompt.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&shared, &prompt).unwrap();
    let run = project.ctl(&["init"], &[]);
    run.assert_code(0);
    assert!(
        run.stdout.contains("kept      .claude/ralph/PROMPT.md"),
        "{run:?}"
    );
    assert_eq!(fs::read_to_string(&shared).unwrap(), "The shared task.\n");
    assert!(fs::symlink_metadata(&prompt).unwrap().is_symlink());
    fs::remove_file(&shared).unwrap();
    let run = project.ctl(&["init"], &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("{} is a symbolic link", prompt.display())),
        "{run:?}"
    );
    assert!(!shared.exists(), "nothing created through the link");
}

#[test]
fn settings_json_as_a_fifo_or_a_device_is_named_at_once() {
    let project = looping("settings-fifo", 5);
    fs::write(
        project.path(".claude/ralph/config.json"),
        r#"{"verify": [{"name": "ok", "command": "true", "timeoutSeconds": 5}]}"#,
    )
    .unwrap();
    let settings = project.path(".claude/settings.json");
    let shown = settings.display().to_string();
    for (kind, init_problem) in [
        ("a FIFO", "is not a regular file"),
        ("a link to /dev/zero", "is a symbolic link"),
    ] {
        fs::remove_file(&settings).unwrap();
        if kind == "a FIFO" {
            mkfifo(&settings);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &settings).unwrap();
        }

        let run = project.ctl(&["init"], &[]);
        assert_eq!(run.code, Some(1), "init, {kind}: {run:?}");
        assert!(
            run.stderr
                .starts_with(&format!("ralph-ctl: {shown} {init_problem}")),
            "init, {kind}: {run:?}"
        );
        println!("init, settings.json {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");

        let unreadable = format!("cannot read {shown}: not a regular file");
        let run = project.ctl(&["start", "--force", "--session-id", SID], &[]);
        run.assert_code(0);
        assert!(
            run.stderr
                .starts_with(&format!("ralph-ctl: warning: {unreadable}")),
            "start, {kind}: {run:?}"
        );
        println!("start, settings.json {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");

        // The hook does not read it (the timeout's fit is said once, at the
        // start): a claim is judged at once, with nothing to say about it.
        let input = to_bytes(&stop_input(&project, Some(&format!("All done.\n{SIGNAL}"))));
        let run = run_hook_quick(hook_command(&project), &input);
        assert!(run.stderr.is_empty(), "hook, {kind}: {run:?}");
        assert!(
            run.stdout.contains("Ralph loop complete"),
            "hook, {kind}: {run:?}"
        );
        println!("hook, settings.json {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");
        assert_eq!(project.state().unwrap()["status"], "complete");
    }
}

#[test]
fn status_of_a_state_that_is_a_fifo_or_a_link_to_a_device_returns_at_once() {
    let project = looping("status-fifo", 5);
    let state = project.state_path();
    for kind in ["a FIFO", "a link to /dev/zero"] {
        fs::remove_file(&state).unwrap();
        if kind == "a FIFO" {
            mkfifo(&state);
        } else {
            std::os::unix::fs::symlink("/dev/zero", &state).unwrap();
        }
        let run = project.ctl(&["status"], &[]);
        assert_eq!(run.code, Some(1), "{kind}: {run:?}");
        assert!(run.stdout.contains("is corrupt"), "{kind}: {run:?}");
        assert!(!run.stdout.contains("it begins"), "{kind}: {run:?}");
        println!("status, state {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");
    }
}

#[test]
fn a_signal_in_an_indented_code_block_does_not_end_the_loop() {
    let project = looping("indented-signal", 5);
    for message in [
        format!("The prompt ends with:\n\n    {SIGNAL}\n\nStill on step 2."),
        format!("Echoed:\n\n\t{SIGNAL}"),
    ] {
        let run = run_hook(
            hook_command(&project),
            &to_bytes(&stop_input(&project, Some(&message))),
        );
        assert!(
            block_reason(&run).starts_with("[Ralph loop: iteration"),
            "{message:?}"
        );
        assert_eq!(project.state().unwrap()["status"], "running");
    }
    // The same signal on its own line, unindented, claims.
    let message = format!("The prompt ends with:\n\n    {SIGNAL}\n\nAll done.\n{SIGNAL}");
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some(&message))),
    );
    assert!(ended(&run).starts_with("Ralph loop complete"), "{run:?}");
    assert_eq!(project.state().unwrap()["status"], "complete");
}
