//! Criterion benchmarks of the pure parts of a stop: the decision, the
//! message readers, the stdin parser and the transcript tail reader; and
//! what the walls cost a check.
//!
//! `cargo bench -p ralph-core --bench core` (bench/run.sh runs it too).
//! The whole-process numbers (the hook as Claude Code runs it) come from
//! bench/run.sh.

use std::fs;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use ralph_core::judge::claims;
use ralph_core::judge::config::Config;
use ralph_core::judge::decision::{self, MessageSource, Observation};
use ralph_core::judge::signals;
use ralph_core::judge::state::LoopState;
use ralph_core::observe::hook_input;
use ralph_core::observe::transcript;
use ralph_core::time::Timestamp;

const SID: &str = "c0563e5b-5d19-4827-8166-f6f26bb447e0";
const NOW: Timestamp = Timestamp::from_secs(1767225600); // 2026-01-01T00:00:00Z

/// A message of about `len` bytes of prose, ending with `tail`.
fn message(len: usize, tail: &str) -> String {
    let line = "Fixed the off-by-one in the parser and added a test for it.\n";
    let mut text = line.repeat(len / line.len() + 1);
    text.truncate(len.saturating_sub(tail.len()));
    text.push_str(tail);
    text
}

/// A loop in its 40th iteration with a full history.
fn running_state(config: &Config) -> LoopState {
    let mut state = LoopState::new(SID.into(), 100_000, NOW);
    let observed = Observation {
        message: message(2_000, "RALPH_ITERATION_COMPLETE: 7 findings remain"),
        message_source: MessageSource::Input,
        ..Observation::of_session(Some(SID.into()), true)
    };
    for i in 0..40 {
        let mut observed = observed.clone();
        observed.message = message(2_000, &format!("{i} findings remain"));
        state = decision::decide(config, Some(&state), &observed, NOW)
            .new_state
            .expect("a running loop of this session changes");
    }
    state
}

fn bench_decide(c: &mut Criterion) {
    let config = Config::default();
    let state = running_state(&config);
    let mut group = c.benchmark_group("decide");
    for (name, tail) in [
        ("continue", "RALPH_ITERATION_COMPLETE: 5 findings remain"),
        ("complete", "RALPH_AUDIT_COMPLETE_NO_FINDINGS"),
    ] {
        let observed = Observation {
            message: message(2_000, tail),
            message_source: MessageSource::Input,
            ..Observation::of_session(Some(SID.into()), true)
        };
        group.bench_function(name, |b| {
            b.iter(|| decision::decide(&config, Some(black_box(&state)), &observed, NOW));
        });
    }
    let other = Observation::of_session(Some("another-session".into()), false);
    group.bench_function("other_session", |b| {
        b.iter(|| decision::decide(&config, Some(black_box(&state)), &other, NOW));
    });
    group.finish();
}

fn bench_signals(c: &mut Criterion) {
    let signal = ralph_core::judge::config::DEFAULT_COMPLETION_SIGNAL;
    let mut group = c.benchmark_group("signals");
    for len in [200, 64 * 1024] {
        let plain = message(len, "Still working.");
        let done = message(len, signal);
        let findings = message(len, "RALPH_ITERATION_COMPLETE: 3 findings remain");
        group.bench_with_input(BenchmarkId::new("signal_claim_no", len), &plain, |b, m| {
            b.iter(|| claims::signal_claim(black_box(m), signal));
        });
        group.bench_with_input(BenchmarkId::new("signal_claim_yes", len), &done, |b, m| {
            b.iter(|| claims::signal_claim(black_box(m), signal));
        });
        group.bench_with_input(
            BenchmarkId::new("findings_count", len),
            &findings,
            |b, m| b.iter(|| signals::findings_count(black_box(m))),
        );
    }
    group.finish();
}

fn bench_hook_input(c: &mut Criterion) {
    let real = include_bytes!("../../../tests/fixtures/stop-input-first.json");
    let big = serde_json::to_vec(&serde_json::json!({
        "session_id": SID,
        "transcript_path": "/home/user/.claude/projects/p/t.jsonl",
        "cwd": "/home/user/proj",
        "hook_event_name": "Stop",
        "stop_hook_active": true,
        "last_assistant_message": message(64 * 1024, "Done."),
    }))
    .unwrap();
    let mut group = c.benchmark_group("hook_input_parse");
    group.bench_function("real_sample", |b| {
        b.iter(|| hook_input::parse(black_box(real)).unwrap());
    });
    group.bench_function("64KiB_message", |b| {
        b.iter(|| hook_input::parse(black_box(&big)).unwrap());
    });
    group.finish();
}

/// A temp transcript of about `size` bytes: tool calls with large results and
/// short assistant turns, ending with the last assistant message and the
/// lines Claude Code writes after it. With `feedback`, a "Stop hook
/// feedback" line starts the last iteration (a session's history, read
/// only for the previous final message); without it, the whole file is one
/// iteration, read back to the scan bound. Removed on drop.
struct Transcript(PathBuf);

impl Transcript {
    fn new(name: &str, size: usize, feedback: bool) -> Transcript {
        let path =
            std::env::temp_dir().join(format!("ralph-bench-{}-{name}.jsonl", std::process::id()));
        let mut block = String::new();
        for i in 0..4 {
            block.push_str(
                &serde_json::to_string(&serde_json::json!({
                    "type": "assistant", "isSidechain": false,
                    "message": {"id": format!("msg_{i}"), "role": "assistant", "content": [
                        {"type": "text", "text": "Let me look at the tests."},
                        {"type": "tool_use", "id": format!("toolu_{i}"), "name": "Bash",
                         "input": {"command": "cargo test 2>&1 | tail -200"}}]}
                }))
                .unwrap(),
            );
            block.push('\n');
            block.push_str(
                &serde_json::to_string(&serde_json::json!({
                    "type": "user", "isSidechain": false,
                    "message": {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": format!("toolu_{i}"),
                         "content": message(60_000, "\u{1b}[32mok\u{1b}[0m")}]}
                }))
                .unwrap(),
            );
            block.push('\n');
        }
        let last = serde_json::to_string(&serde_json::json!({
            "type": "assistant", "isSidechain": false,
            "message": {"id": "msg_last", "role": "assistant",
                        "content": [{"type": "text", "text": message(300, "Still working.")}]}
        }))
        .unwrap();
        let after =
            r#"{"type":"system","subtype":"stop_hook_summary","hookCount":1,"isSidechain":false}"#;
        let mut file = fs::File::create(&path).unwrap();
        let mut written = 0;
        while written + last.len() + after.len() + 2 < size {
            let take = block
                .len()
                .min(size - written - last.len() - after.len() - 2);
            let part = &block.as_bytes()[..take];
            // Cut blocks end at a line boundary, so every line stays whole.
            let part = match part.iter().rposition(|&b| b == b'\n') {
                Some(nl) if take < block.len() => &part[..=nl],
                _ if take < block.len() => break,
                _ => part,
            };
            file.write_all(part).unwrap();
            written += part.len();
        }
        if feedback {
            let line = serde_json::json!({
                "type": "user", "isSidechain": false, "isMeta": true,
                "message": {"role": "user",
                            "content": "Stop hook feedback:\n[ralph-stop-hook]: keep going\n"}
            });
            writeln!(file, "{line}").unwrap();
        }
        writeln!(file, "{last}\n{after}").unwrap();
        Transcript(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Transcript {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn bench_transcript(c: &mut Criterion) {
    let mut group = c.benchmark_group("last_assistant_text");
    for (name, size, feedback) in [
        ("1KiB", 1024, false),
        ("10MiB_session", 10 * 1024 * 1024, true),
        ("10MiB_iteration", 10 * 1024 * 1024, false),
    ] {
        let transcript = Transcript::new(name, size, feedback);
        let want = transcript::last_assistant_text(transcript.path()).unwrap();
        assert!(want.is_some_and(|t| t.ends_with("Still working.")));
        group.bench_function(name, |b| {
            b.iter(|| transcript::last_assistant_text(black_box(transcript.path())).unwrap());
        });
    }
    group.finish();
}

/// What the walls cost a check: a verify command that does nothing (`true`),
/// run as a claim's check runs it, with no walls and inside them. The
/// difference is the walls' cost per check (bubblewrap's namespace,
/// mounts and filter; Landlock's ruleset and temp folder; the probe is once
/// per process and not in it). The goal: at most 20 ms walled.
fn bench_walls(c: &mut Criterion) {
    use ralph_core::observe::verify::{self, VerifyCommand};
    use ralph_core::walls::{Mechanism, Walls, WallsWanted};
    let dir = std::env::temp_dir().join(format!("ralph-bench-walls-{}", std::process::id()));
    fs::create_dir_all(dir.join(".claude/ralph")).unwrap();
    fs::create_dir_all(dir.join(".git/hooks")).unwrap();
    fs::write(dir.join(".git/config"), "[core]\n").unwrap();
    let command = VerifyCommand {
        name: "check".into(),
        command: "true".into(),
        timeout_seconds: 10,
        network: false,
    };
    let mut group = c.benchmark_group("check");
    let open = Walls::open();
    group.bench_function("unwalled", |b| {
        b.iter(|| assert!(verify::run(&dir, black_box(&command), &open).passed()));
    });
    if let Mechanism::Bubblewrap(_) = Mechanism::probe() {
        let walled = Walls::around(&dir, &dir, WallsWanted::Required);
        group.bench_function("walled", |b| {
            b.iter(|| assert!(verify::run(&dir, black_box(&command), &walled).passed()));
        });
    }
    // Landlock's walls, as on a machine where bubblewrap cannot run: the
    // ruleset built, the temp folder of the check's own made and removed.
    let landlock = Walls::with_mechanism(
        &dir,
        &dir,
        WallsWanted::Required,
        Mechanism::Landlock("a benchmark".into()),
    );
    if verify::run(&dir, &command, &landlock).passed() {
        group.bench_function("walled-landlock", |b| {
            b.iter(|| assert!(verify::run(&dir, black_box(&command), &landlock).passed()));
        });
    }
    group.finish();
    let _ = fs::remove_dir_all(&dir);
}

criterion_group!(
    benches,
    bench_decide,
    bench_signals,
    bench_hook_input,
    bench_transcript,
    bench_walls
);
criterion_main!(benches);
