//! The verification gate: commands from `.claude/ralph/config.json` that must
//! all exit 0 before a claim of completion is accepted ("no completion
//! without verification"). Commands come only from that file, never from
//! anything the model wrote.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::observe::test_counts::{self, TestCounts};
use crate::process::group::{GroupChild, Lifetime};
use crate::walls::Walls;

/// Bytes of a command's output kept (its tail).
pub const OUTPUT_TAIL_BYTES: usize = 16 * 1024;
/// Lines of output shown to the agent and in `ralph-ctl status`.
pub const OUTPUT_TAIL_LINES: usize = 20;
/// Most failure headers kept of one command's output (see
/// [`VerifyResult::failure_headers`]).
pub const MAX_FAILURE_HEADERS: usize = 50;
/// Longest failure header kept, in characters.
pub const FAILURE_HEADER_CHARS: usize = 200;
/// Default timeout of a verification command, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u32 = 60;

/// One configured verification command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifyCommand {
    /// A short name for messages ("tests", "lint").
    pub name: String,
    /// The shell command, run from the project root (`sh -c` on Unix, `cmd /C` on Windows).
    pub command: String,
    /// Seconds before the command is killed and counted as failed.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u32,
    /// True when the check needs the network (`"network": true`): its walls
    /// leave it the machine's network instead of a namespace of its own
    /// with loopback only. Pinned with the config at the loop's start, so
    /// the agent cannot add it later.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
}

fn default_timeout() -> u32 {
    DEFAULT_TIMEOUT_SECS
}

/// What one verification command did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyResult {
    /// The command's name.
    pub name: String,
    /// The command.
    pub command: String,
    /// Its exit code (`None` when it was killed or could not start).
    pub exit_code: Option<i32>,
    /// True when it ran past its timeout and was killed.
    pub timed_out: bool,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// The last lines of its output (stdout and stderr, interleaved).
    pub output_tail: String,
    /// The tests its output counted (`None`: no test runner's summary in it),
    /// read from the whole output, not only the tail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<TestCounts>,
    /// The same, runner by runner (`pytest`, `cargo`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_runner: Vec<(String, TestCounts)>,
    /// Every header of a failing test in the whole output, in order
    /// (unittest's `FAIL: test_x (mod.Class.test_x)` and `ERROR: …`, go's
    /// `--- FAIL: TestX`), at most [`MAX_FAILURE_HEADERS`], each cut at
    /// [`FAILURE_HEADER_CHARS`]: the tail alone loses the first ones of a
    /// long run, and with them which tests failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failure_headers: Vec<String>,
}

impl VerifyResult {
    /// True when the command exited 0 in time.
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// The last [`OUTPUT_TAIL_LINES`] lines of `bytes`, colour codes taken
/// out (`ESC [ … m`, a runner's `--color=yes`: noise to the agent and the
/// person alike); every other control stays, for the places that show it
/// to make visible (`text::printable`), so that nothing the check printed
/// can hide what came before it (a carriage return, a cleared line).
fn tail_lines(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<String> = text.lines().map(without_colours).collect();
    lines[lines.len().saturating_sub(OUTPUT_TAIL_LINES)..].join("\n")
}

/// `line` without its SGR sequences (`ESC [`, digits and `;`, then `m`).
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find("\u{1b}[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        let params = after
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(after.len());
        if after[params..].starts_with('m') {
            rest = &after[params + 1..];
        } else {
            out.push_str("\u{1b}[");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// The width a check's output is written at (`COLUMNS`): what runners
/// use when their output is not a terminal.
pub const CHECK_COLUMNS: &str = "80";

/// Runs one command from `root` with its timeout, inside `walls`.
pub fn run(root: &Path, verify: &VerifyCommand, walls: &Walls) -> VerifyResult {
    let started = Instant::now();
    let result = |exit_code, timed_out, output: String| VerifyResult {
        name: verify.name.clone(),
        command: verify.command.clone(),
        exit_code,
        timed_out,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        output_tail: output,
        counts: None,
        by_runner: Vec::new(),
        failure_headers: Vec::new(),
    };
    // One pipe for stdout and stderr keeps their lines in the order written.
    let (reader, writer) = match std::io::pipe().and_then(|(r, w)| Ok((r, w.try_clone()?, w))) {
        Ok((reader, out, err)) => (reader, (out, err)),
        Err(e) => return result(None, false, format!("cannot create a pipe: {e}")),
    };
    // `_temp`, the check's own temp folder under Landlock, lives until the
    // command has ended and been reaped.
    let networked;
    let walls = if verify.network {
        networked = walls.clone().with_network(true);
        &networked
    } else {
        walls
    };
    let (mut cmd, _temp) = match walls.shell(&verify.command) {
        Ok(walled) => walled,
        Err(e) => return result(None, false, e.to_string()),
    };
    // Output at one width whatever the terminal ralph (or the client's
    // hook) runs in: a runner's banners fill COLUMNS, and wrap in status
    // and the report when it is a wide terminal's.
    cmd.current_dir(root)
        .env_remove("RALPH_ACTIVE")
        .env("COLUMNS", CHECK_COLUMNS)
        .env_remove("LINES")
        .stdin(Stdio::null())
        .stdout(writer.0)
        .stderr(writer.1);
    // In a group that dies with this process: a hook killed by its client
    // (on its timeout, or SIGKILL) takes the command and all it started along.
    let spawned = GroupChild::spawn(&mut cmd, Lifetime::DiesWithParent);
    // Our copies of the write end must go, or the reader never sees the end.
    drop(cmd);
    let child = match spawned {
        Ok(child) => child,
        Err(e) => return result(None, false, format!("cannot start the command: {e}")),
    };
    let output = Arc::new(Mutex::new(Output::default()));
    let reader = {
        let output = Arc::clone(&output);
        let mut pipe = reader;
        thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                output
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take(&buf[..n]);
            }
        })
    };
    let deadline = started + Duration::from_secs(u64::from(verify.timeout_seconds));
    // Anything the command left running in its group would hold the pipe
    // open: the group is killed once the command ends, and the reader is
    // never waited for long.
    let (exit_code, timed_out) = child.wait_then_kill_group(deadline);
    let drain_deadline = Instant::now() + Duration::from_secs(2);
    while !reader.is_finished() && Instant::now() < drain_deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let mut output = std::mem::take(
        &mut *output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    );
    let mut text = tail_lines(&output.tail);
    if timed_out {
        text.push_str(&format!("\n(killed after {} s)", verify.timeout_seconds));
    }
    let failure_headers = std::mem::take(&mut output.headers);
    let by_runner: Vec<(String, TestCounts)> = output
        .finish()
        .into_iter()
        .map(|(name, counts)| (name.to_string(), counts))
        .collect();
    let counts = test_counts::total(by_runner.iter().map(|(_, counts)| counts));
    VerifyResult {
        counts,
        by_runner,
        failure_headers,
        ..result(exit_code, timed_out, text)
    }
}

/// What is kept of a command's output as it comes: its tail, and the test
/// counts of every line (each cut at [`test_counts::MAX_LINE_BYTES`]), so
/// a summary printed early is counted even when the tail has lost it.
#[derive(Default)]
struct Output {
    tail: Vec<u8>,
    line: Vec<u8>,
    tally: test_counts::Tally,
    /// The failure headers seen (see [`VerifyResult::failure_headers`]).
    headers: Vec<String>,
    /// What the lines before tell of the next one.
    context: HeaderContext,
}

impl Output {
    fn take(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * OUTPUT_TAIL_BYTES {
            let excess = self.tail.len() - OUTPUT_TAIL_BYTES;
            self.tail.drain(..excess);
        }
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let room = test_counts::MAX_LINE_BYTES.saturating_sub(self.line.len());
            let body = chunk.strip_suffix(b"\n").unwrap_or(chunk);
            self.line.extend_from_slice(&body[..body.len().min(room)]);
            if chunk.ends_with(b"\n") {
                self.end_line();
            }
        }
    }

    fn end_line(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        self.tally.line(&text);
        let cleaned = test_counts::clean(&text);
        let line = cleaned.trim_end();
        if is_failure_header(line, &self.context)
            && self.headers.len() < MAX_FAILURE_HEADERS
            && !self.headers.iter().any(|h| h == line.trim())
        {
            self.headers.push(crate::observe::refusals::sample_of(
                line.trim(),
                FAILURE_HEADER_CHARS,
            ));
        }
        self.context.after(line);
        self.line.clear();
    }

    fn finish(mut self) -> Vec<(&'static str, TestCounts)> {
        if !self.line.is_empty() {
            self.end_line();
        }
        self.tally.by_runner()
    }
}

/// Whether `line` names a failing test, as its runner reports it:
/// unittest's `FAIL: name (…)` or `ERROR: name (…)` right under its rule
/// of `=`; go's `--- FAIL: TestName` (a subtest's indented); pytest's
/// short summary `FAILED path::name …` / `ERROR path::name …`; cargo's
/// `test name ... FAILED`; jest's `● Suite › name`; vitest's `FAIL  file >
/// name`; TAP's (node:test, tap) `not ok N - name`, a TODO or SKIP apart;
/// mocha's numbered `N) name` under its `N failing`.
fn is_failure_header(line: &str, seen: &HeaderContext) -> bool {
    let trimmed = line.trim_start();
    let unittest = seen.after_rule
        && (line.starts_with("FAIL: ") || line.starts_with("ERROR: "))
        && line.ends_with(')');
    let go = trimmed
        .strip_prefix("--- FAIL: ")
        .is_some_and(|rest| rest.starts_with("Test") || rest.starts_with("Example"));
    let pytest = (line.starts_with("FAILED ") || line.starts_with("ERROR "))
        && line
            .split_whitespace()
            .nth(1)
            .is_some_and(|id| id.contains("::"));
    let cargo = line.starts_with("test ") && line.ends_with(" ... FAILED");
    let jest = trimmed.starts_with("\u{25cf} ") && !trimmed.starts_with("\u{25cf} Console");
    let vitest = trimmed
        .strip_prefix("FAIL ")
        .is_some_and(|rest| rest.contains(" > "));
    let tap = trimmed.strip_prefix("not ok ").is_some_and(|rest| {
        rest.starts_with(|c: char| c.is_ascii_digit())
            && !rest.contains("# TODO")
            && !rest.contains("# SKIP")
    });
    let mocha = seen.mocha_failing
        && trimmed.split_once(") ").is_some_and(|(n, name)| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && !name.trim().is_empty()
        });
    unittest || go || pytest || cargo || jest || vitest || tap || mocha
}

/// What the lines before told of the one being read.
#[derive(Default)]
struct HeaderContext {
    /// The last line was unittest's rule of `=` above a header.
    after_rule: bool,
    /// mocha's `N failing` was seen: its numbered list of failures follows.
    mocha_failing: bool,
}

impl HeaderContext {
    fn after(&mut self, line: &str) {
        self.after_rule = line.len() >= 20 && line.bytes().all(|b| b == b'=');
        let trimmed = line.trim();
        if let Some(n) = trimmed.strip_suffix(" failing") {
            self.mocha_failing |= !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
        }
    }
}

/// Runs the commands in order and stops at the first failure.
pub fn run_all(root: &Path, commands: &[VerifyCommand], walls: &Walls) -> Vec<VerifyResult> {
    let mut results = Vec::new();
    for command in commands {
        let result = run(root, command, walls);
        let failed = !result.passed();
        results.push(result);
        if failed {
            break;
        }
    }
    results
}

/// Runs every command once, failing or not (a loop starts with its tests
/// failing: that is its task), each with its timeout, and keeps the test
/// counts of those whose output a runner's summary was read from: the
/// loop's `testBaseline`.
pub fn test_baseline(
    root: &Path,
    commands: &[VerifyCommand],
    walls: &Walls,
) -> Vec<test_counts::CommandCounts> {
    baseline(root, commands, walls).counts
}

/// A verification command that failed at a test baseline: what a claim's
/// failure of it is compared with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BaselineFailure {
    /// The command line, as in config.json.
    pub command: String,
    /// How it failed: `exited 1`, `timed out`, `could not run`.
    pub how: String,
    /// The tests it counted then (`None`: no runner's summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counts: Option<TestCounts>,
    /// The last lines of its output then, shortened.
    #[serde(default)]
    pub excerpt: String,
}

/// Lines of a failed baseline command's output kept in the record.
const BASELINE_EXCERPT_LINES: usize = 8;

impl BaselineFailure {
    /// The failure `result` records, or `None` when it passed.
    pub fn of(result: &VerifyResult) -> Option<BaselineFailure> {
        if result.passed() {
            return None;
        }
        let how = if result.timed_out {
            "timed out".to_string()
        } else {
            match result.exit_code {
                Some(code) => format!("exited {code}"),
                None => "could not run".to_string(),
            }
        };
        let lines: Vec<&str> = result.output_tail.lines().collect();
        let excerpt = lines[lines.len().saturating_sub(BASELINE_EXCERPT_LINES)..].join("\n");
        Some(BaselineFailure {
            command: result.command.clone(),
            how,
            counts: result.counts,
            excerpt,
        })
    }

    /// "`pytest` exited 1 (2 run (1 passed, 1 failed), 0 skipped)", for messages.
    pub fn describe(&self) -> String {
        match &self.counts {
            Some(counts) => format!("`{}` {} ({})", self.command, self.how, counts.describe()),
            None => format!("`{}` {}", self.command, self.how),
        }
    }
}

/// A test baseline: each command's counts, and the commands that failed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Baseline {
    /// The counts of each command whose output a runner's summary was read from.
    pub counts: Vec<test_counts::CommandCounts>,
    /// The commands that failed (a loop may start with failing tests: that
    /// is its task), each once.
    pub failures: Vec<BaselineFailure>,
}

/// [`test_baseline`] with the commands that failed: every command run once,
/// failing or not, each with its timeout.
pub fn baseline(root: &Path, commands: &[VerifyCommand], walls: &Walls) -> Baseline {
    let mut out = Baseline::default();
    for command in commands {
        let result = run(root, command, walls);
        out.failures.extend(BaselineFailure::of(&result));
        if let Some(counts) = result.counts {
            out.counts.push(test_counts::CommandCounts {
                command: result.command,
                counts,
                runners: result.by_runner.into_iter().map(|(name, _)| name).collect(),
            });
        }
    }
    out
}

/// A run's entry of the `testBaseline`: its counts and the runners they
/// were read from; `None` when no runner's summary was read.
pub fn counts_of(result: &VerifyResult) -> Option<test_counts::CommandCounts> {
    result.counts.map(|counts| test_counts::CommandCounts {
        command: result.command.clone(),
        counts,
        runners: result
            .by_runner
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
    })
}

/// The sum of the commands' timeouts, in seconds.
pub fn total_timeout(commands: &[VerifyCommand]) -> u64 {
    commands.iter().map(|c| u64::from(c.timeout_seconds)).sum()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::walls::{Mechanism, WallsWanted};

    // Unwalled, as most of these tests are about the command, not its walls.
    fn run(root: &Path, command: &VerifyCommand) -> VerifyResult {
        super::run(root, command, &Walls::open())
    }
    fn run_all(root: &Path, commands: &[VerifyCommand]) -> Vec<VerifyResult> {
        super::run_all(root, commands, &Walls::open())
    }
    fn test_baseline(root: &Path, commands: &[VerifyCommand]) -> Vec<test_counts::CommandCounts> {
        super::test_baseline(root, commands, &Walls::open())
    }

    #[test]
    fn a_check_writes_at_one_width_whatever_the_terminal() {
        let tmp = tempfile::tempdir().unwrap();
        let out = run(
            tmp.path(),
            &cmd("width", "echo \"cols=$COLUMNS lines=${LINES-unset}\"", 10),
        );
        assert_eq!(out.output_tail.trim(), "cols=80 lines=unset");
    }

    #[test]
    fn a_walled_command_past_its_timeout_is_killed_whole() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let walls = Walls::around(&root, &root, WallsWanted::Auto);
        let started = Instant::now();
        let slow = super::run(
            &root,
            &cmd("slow", "setsid sleep 30 & sleep 30; echo never", 1),
            &walls,
        );
        assert!(slow.timed_out && !slow.passed(), "{slow:?}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the walled command and what it started were killed"
        );
    }

    #[test]
    fn only_a_verify_entry_saying_network_reaches_the_hosts_loopback() {
        if !matches!(Mechanism::probe(), Mechanism::Bubblewrap(_)) {
            eprintln!("skipped: no bubblewrap here");
            return;
        }
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(root.join("src")).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let entry = |network: &str| -> VerifyCommand {
            serde_json::from_str(&format!(
                r#"{{"name": "fetch", "command": "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=3); print(\"reached\")'"{network}}}"#
            ))
            .unwrap()
        };
        let walls = Walls::around(&root, &root, WallsWanted::Required);
        let plain = super::run(&root, &entry(""), &walls);
        assert!(!plain.passed(), "{plain:?}");
        assert!(
            plain.output_tail.contains("Connection refused"),
            "{plain:?}"
        );
        let networked = entry(r#", "network": true"#);
        assert!(networked.network);
        let reached = super::run(&root, &networked, &walls);
        assert!(reached.passed(), "{reached:?}");
        assert!(reached.output_tail.contains("reached"), "{reached:?}");
    }

    #[test]
    fn a_walled_command_cannot_write_outside_its_project() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path().join("project");
        std::fs::create_dir_all(root.join(".claude")).unwrap();
        std::fs::create_dir_all(root.join("src")).unwrap();
        let outside = dirs::home_dir()
            .unwrap()
            .join(format!(".ralph-walls-test-{}", std::process::id()));
        let command = cmd(
            "tests",
            &format!(
                "echo in > src/inside.txt; echo out > {}; echo ran",
                outside.display()
            ),
            10,
        );
        let walls = Walls::around(&root, &root, WallsWanted::Required);
        let result = super::run(&root, &command, &walls);
        match Mechanism::probe() {
            Mechanism::Bubblewrap(_) | Mechanism::Landlock(_) => {
                assert!(result.output_tail.contains("ran"), "{result:?}");
                assert!(root.join("src/inside.txt").is_file());
                let escaped = outside.exists();
                let _ = std::fs::remove_file(&outside);
                assert!(!escaped, "the walled command wrote {}", outside.display());
            }
            Mechanism::Missing(why) | Mechanism::LandlockInPart(why) => {
                assert!(!result.passed());
                assert!(result.output_tail.contains(why.as_str()), "{result:?}");
                assert!(
                    !root.join("src/inside.txt").exists(),
                    "refused before it ran"
                );
            }
        }
    }

    fn cmd(name: &str, command: &str, timeout_seconds: u32) -> VerifyCommand {
        VerifyCommand {
            name: name.into(),
            command: command.into(),
            timeout_seconds,
            network: false,
        }
    }

    #[test]
    fn the_output_kept_has_no_colour_codes_and_every_other_control_kept() {
        let dir = tempfile::TempDir::new().unwrap();
        let colours = run(
            dir.path(),
            &cmd(
                "colours",
                "printf '\\033[1m\\033[31mFAILED\\033[0m tests/test_a.py::test_x\\n\\033[m\\n\
                 50%%\\r100%% \\033[2Kdone\\n\\033[38;5;196mred\\033[39m\\n'; exit 1",
                10,
            ),
        );
        assert_eq!(
            colours.output_tail, "FAILED tests/test_a.py::test_x\n\n50%\r100% \u{1b}[2Kdone\nred",
            "{:?}",
            colours.output_tail
        );
    }

    #[test]
    fn passing_failing_and_timed_out_commands() {
        let dir = tempfile::TempDir::new().unwrap();
        let ok = run(dir.path(), &cmd("ok", "echo hello; pwd", 10));
        assert!(ok.passed());
        assert!(ok.output_tail.contains("hello"));
        assert!(
            ok.output_tail.contains(&dir.path().display().to_string()),
            "runs from the project root"
        );

        let fail = run(
            dir.path(),
            &cmd("fail", "seq 1 100; echo boom >&2; exit 3", 10),
        );
        assert_eq!(fail.exit_code, Some(3));
        assert!(!fail.passed());
        assert_eq!(fail.output_tail.lines().count(), OUTPUT_TAIL_LINES);
        assert!(fail.output_tail.ends_with("boom"), "{}", fail.output_tail);

        let started = Instant::now();
        let slow = run(
            dir.path(),
            &cmd("slow", "sleep 30 & sleep 30; echo never", 1),
        );
        assert!(slow.timed_out && !slow.passed());
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the whole group was killed"
        );
        assert!(slow.output_tail.contains("killed after 1 s"));

        let missing = run(
            dir.path(),
            &cmd("missing", "definitely-not-a-command-xyz", 10),
        );
        assert_eq!(missing.exit_code, Some(127));
    }

    #[test]
    fn what_a_passing_command_left_running_is_stopped() {
        let dir = tempfile::TempDir::new().unwrap();
        let started = Instant::now();
        // The background sleeper keeps the output pipe open; it must not hold up the result.
        let ok = run(
            dir.path(),
            &cmd("bg", "sleep 30 & echo $! > sleeper.pid; echo done", 20),
        );
        assert!(ok.passed(), "{ok:?}");
        assert!(ok.output_tail.contains("done"));
        assert!(started.elapsed() < Duration::from_secs(10));
        let pid = std::fs::read_to_string(dir.path().join("sleeper.pid")).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = Instant::now() + Duration::from_secs(5);
        // Killed with its group (a zombie until init reaps it counts as gone).
        while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
            assert!(
                Instant::now() < deadline,
                "the background sleeper still runs"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn run_all_stops_at_the_first_failure() {
        let dir = tempfile::TempDir::new().unwrap();
        let results = run_all(
            dir.path(),
            &[
                cmd("a", "true", 5),
                cmd("b", "false", 5),
                cmd("c", "touch c-ran", 5),
            ],
        );
        assert_eq!(results.len(), 2);
        assert!(!dir.path().join("c-ran").exists());
        assert_eq!(total_timeout(&[cmd("a", "x", 5), cmd("b", "y", 7)]), 12);
    }

    #[test]
    fn every_failure_header_is_kept_past_the_tail() {
        let dir = tempfile::TempDir::new().unwrap();
        // Real unittest output's shape (Python 3.11): each failure's header
        // under a rule of `=`, its traceback, then the summary; the first
        // header is pushed out of the tail by a long traceback.
        std::fs::write(
            dir.path().join("out.txt"),
            "FF\n\
             ======================================================================\n\
             FAIL: test_default (toolz.tests.test_dicttoolz.TestDict.test_default)\n\
             ----------------------------------------------------------------------\n\
             Traceback (most recent call last):\n",
        )
        .unwrap();
        let script = "cat out.txt; seq 1 40 | sed 's/^/  frame /'; \
                      printf '%s\\n' '======================================================================' \
                      'ERROR: test_merge (toolz.tests.test_dicttoolz.TestDict.test_merge)' \
                      'ValueError: x' 'FAIL: not a header: no rule above it' \
                      '    --- FAIL: TestSub/neg (0.00s)' \
                      '' 'Ran 2 tests in 0.001s' '' 'FAILED (failures=1, errors=1)'; exit 1";
        let result = run(dir.path(), &cmd("tests", script, 20));
        assert!(
            !result.output_tail.contains("test_default"),
            "out of the tail"
        );
        assert_eq!(
            result.failure_headers,
            [
                "FAIL: test_default (toolz.tests.test_dicttoolz.TestDict.test_default)",
                "ERROR: test_merge (toolz.tests.test_dicttoolz.TestDict.test_merge)",
                "--- FAIL: TestSub/neg (0.00s)",
            ]
        );
        // Bounded: at most MAX_FAILURE_HEADERS, each cut.
        let many = "for i in $(seq 1 80); do echo ==========================; \
                    echo \"FAIL: test_$i ($(head -c 400 /dev/zero | tr '\\0' x))\"; done; exit 1";
        let result = run(dir.path(), &cmd("tests", many, 20));
        assert_eq!(result.failure_headers.len(), MAX_FAILURE_HEADERS);
        assert!(result.failure_headers[0].starts_with("FAIL: test_1 (xxx"));
        assert!(result.failure_headers[0].chars().count() <= FAILURE_HEADER_CHARS + 1);
    }

    #[test]
    fn every_runner_s_failing_tests_are_named() {
        // Each runner's report of two failures (one of them named twice,
        // as jest, cargo and mocha do), with lines that name none around.
        let cases: [(&str, &str, &[&str]); 7] = [
            (
                "pytest",
                "tests/test_a.py F.F\n=========== short test summary info ===========\n\
                 FAILED tests/test_a.py::test_x - assert 1 == 2\n\
                 ERROR tests/test_b.py::test_y - ImportError\n\
                 FAILED (the word alone names nothing)\n== 1 failed, 1 error in 0.1s ==",
                &[
                    "FAILED tests/test_a.py::test_x - assert 1 == 2",
                    "ERROR tests/test_b.py::test_y - ImportError",
                ],
            ),
            (
                "cargo",
                "running 3 tests\ntest a::ok ... ok\ntest a::x ... FAILED\ntest b::y ... FAILED\n\n\
                 failures:\n\n---- a::x stdout ----\nfailures:\n    a::x\n    b::y\n\n\
                 test result: FAILED. 1 passed; 2 failed; 0 ignored",
                &["test a::x ... FAILED", "test b::y ... FAILED"],
            ),
            (
                "jest",
                "FAIL src/a.test.js\n  \u{25cf} DateTime \u{203a} parses ISO\n\n    expect(x).toBe(y)\n\n\
                 \u{25cf} DateTime \u{203a} formats\n\u{25cf} Console\n\n    console.log\n\
                 Tests:       2 failed, 10 passed, 12 total",
                &[
                    "\u{25cf} DateTime \u{203a} parses ISO",
                    "\u{25cf} DateTime \u{203a} formats",
                ],
            ),
            (
                "vitest",
                " \u{276f} src/a.test.ts (3 tests | 2 failed)\n FAIL  src/a.test.ts > sum > adds\n\
                 AssertionError: expected 3 to be 4\n FAIL  src/a.test.ts > sum > subtracts\n\
                 FAIL  src/b.test.ts [ src/b.test.ts ]\n Test Files  1 failed (1)",
                &[
                    "FAIL  src/a.test.ts > sum > adds",
                    "FAIL  src/a.test.ts > sum > subtracts",
                ],
            ),
            (
                "node:test and tap",
                "TAP version 13\n# Subtest: adds\nok 1 - adds\n    not ok 1 - inner case\n\
                 not ok 2 - subtracts\nnot ok 3 - later # TODO\nnot ok 4 - skipped # SKIP\n# fail 2",
                &["not ok 1 - inner case", "not ok 2 - subtracts"],
            ),
            (
                "mocha",
                "  sum\n    1) adds\n    \u{2713} keeps\n\n  1 passing (5ms)\n  2 failing\n\n\
                 \u{20}  1) sum\n       adds:\n     AssertionError\n\n  2) sum\n       subtracts:\n",
                &["1) sum", "2) sum"],
            ),
            (
                "unittest and go",
                "======================================================================\n\
                 FAIL: test_x (tests.test_a.T.test_x)\n--- FAIL: TestSum (0.00s)\nFAIL: test_z (no rule above)",
                &[
                    "FAIL: test_x (tests.test_a.T.test_x)",
                    "--- FAIL: TestSum (0.00s)",
                ],
            ),
        ];
        for (runner, output, named) in cases {
            let mut kept = Output::default();
            kept.take(output.as_bytes());
            kept.take(b"\n");
            assert_eq!(kept.headers, named, "{runner}");
        }
    }

    #[test]
    fn counts_are_read_from_the_whole_output_not_only_its_tail() {
        let dir = tempfile::TempDir::new().unwrap();
        // Two cargo-style summaries, the first pushed out of the kept tail
        // by 40,000 lines, one of them longer than a line is read.
        let script = "echo 'test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured'; \
                      seq 1 40000; head -c 20000 /dev/zero | tr '\\0' x; echo; \
                      printf 'test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured'";
        let result = run(dir.path(), &cmd("tests", script, 20));
        assert!(!result.output_tail.contains("3 passed"), "out of the tail");
        assert_eq!(
            result.counts,
            Some(TestCounts {
                run: 5,
                passed: 4,
                failed: 1,
                skipped: 1
            })
        );
        let silent = run(dir.path(), &cmd("lint", "echo fine", 5));
        assert_eq!(silent.counts, None);
        // The baseline runs every command, the failing ones too, and keeps
        // the counts it could read.
        let baseline = test_baseline(
            dir.path(),
            &[
                cmd(
                    "a",
                    "printf 'Ran 4 tests in 0.1s\\n\\nFAILED (failures=1)\\n'; exit 1",
                    5,
                ),
                cmd("lint", "echo fine", 5),
                cmd("b", "echo '3 passed, 1 skipped in 0.05s'", 5),
            ],
        );
        assert_eq!(
            baseline,
            [
                test_counts::CommandCounts {
                    command: "printf 'Ran 4 tests in 0.1s\\n\\nFAILED (failures=1)\\n'; exit 1"
                        .into(),
                    counts: TestCounts::new(3, 1, 0),
                    runners: vec!["unittest".into()],
                },
                test_counts::CommandCounts {
                    command: "echo '3 passed, 1 skipped in 0.05s'".into(),
                    counts: TestCounts::new(3, 0, 1),
                    runners: vec!["pytest".into()],
                },
            ]
        );
    }
}
