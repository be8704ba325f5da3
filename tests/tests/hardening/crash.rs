//! Crash safety: hooks killed with SIGKILL at random moments never leave
//! a torn, empty or missing state, never move the iteration backwards and
//! never pile up temp files; files deleted beside the state, an unwritable
//! folder, a stdout that goes nowhere and a full disk keep the old state.
//!
//! The crash test prints its seed; `RALPH_CRASH_SEED=N` replays a run.

use super::{
    NOBODY, block_reason, drop_root, hook_command, mode, one_line, run_hook, to_bytes, working,
};
use ralph_tests::SIGNAL;
use ralph_tests::cli::{looping, looping_idle, stop_input};
use ralph_tests::listen::is_root;
use ralph_tests::project::{TempProject, limit_file_size, signal_process};
use serde_json::Value;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn temp_files(project: &TempProject) -> Vec<String> {
    let Ok(entries) = fs::read_dir(project.runtime_dir()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ralph-state.json.tmp-"))
        .collect()
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
    let stdin = Arc::new(working(&project));
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

#[test]
fn stops_count_exactly_while_files_beside_the_state_are_deleted() {
    // 300 stops at once while another process deletes and replaces what
    // lies beside the state: every block answered is one iteration counted.
    let project = Arc::new(looping_idle("deleted-beside", 10_000));
    let runtime = project.runtime_dir();
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
    let input = Arc::new(working(&project));
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
    let before = project.state_bytes();
    let mut cmd = hook_command(&project);
    let guard = Unwritable::new(&project.runtime_dir());
    let needle = match guard {
        Unwritable::Immutable(_) => "Operation not permitted",
        Unwritable::ReadOnly(_) => {
            drop_root(&project, &mut cmd);
            "Permission denied"
        }
    };
    let run = run_hook(cmd, &working(&project));
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
    let log = project.log_path();
    for closed in [true, false] {
        let before = project.state_bytes();
        let log_before = fs::read(&log).unwrap_or_default();
        let mut cmd = hook_command(&project);
        with_stdout_nowhere(&mut cmd, closed);
        let run = run_hook(cmd, &working(&project));
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
    let run = run_hook(hook_command(&project), &working(&project));
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
    let run = run_hook(hook_command(&project), &working(&project));
    assert!(block_reason(&run).starts_with("[Ralph loop: iteration 2 of 5]"));
}
