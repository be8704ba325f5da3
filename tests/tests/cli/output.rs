//! Snapshot tests (insta) of the text people and the agent read: `ralph-ctl
//! status` for a running loop and for each way a loop ends or pauses,
//! the dashboard of a queue run in `ralph-ctl report --html`,
//! `ralph-ctl log` (readable and JSON), the hook's one
//! stderr line for each bad input of the README's table, `ralph-ctl`'s error
//! lines for bad configuration and refused starts and resets, and the text the hook
//! re-injects. The snapshots live in `tests/tests/cli/snapshots/`; temp paths,
//! times, session ids and durations are redacted so they are stable.
//!
//! A changed text fails the test and leaves `<name>.snap.new` beside the
//! snapshot (not in CI): review it, then rename it over the `.snap`, or run
//! `INSTA_UPDATE=always tests/run.sh -p ralph-tests --test cli output::`
//! and review the diff (cargo-insta's `cargo insta review` works too, but is not
//! needed).

use std::ffi::OsString;
use std::fs::{self, File};
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use ralph_tests::SIGNAL;
use ralph_tests::bins;
use ralph_tests::cli::{Ctl, Hook};
use ralph_tests::cli::{SID, looping, stop_input};
use ralph_tests::project::{Run, TempProject, limit_file_size};
use ralph_tests::reach::run_from_reach;
use serde_json::{Value, json};

/// The uid (and gid) the hook runs as when a file mode must bite under root.
const NOBODY: u32 = 65534;

/// Settings that make the snapshots stable: every temp project folder,
/// the workspace, times, UUIDs and durations are replaced by placeholders.
fn stable() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_prepend_module_to_snapshot(false);
    settings.set_omit_expression(true);
    // TempProject's folders: <temp dir>/ralph-test-<pid>-<n>-<name>.
    let prefix = std::env::temp_dir().join("ralph-test-");
    let prefix = regex_escape(&prefix.display().to_string());
    settings.add_filter(&format!(r"{prefix}\d+-\d+-[\w.-]+"), "[TEMP]");
    settings.add_filter(
        &regex_escape(&bins::workspace_root().display().to_string()),
        "[WORKSPACE]",
    );
    settings.add_filter(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "[TIME]");
    settings.add_filter(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[UUID]",
    );
    settings.add_filter(r"\b\d+ ms\b", "[N] ms");
    settings
}

/// Escapes `text` for a regular expression.
fn regex_escape(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One stop of the loop in `project`, saying `message`.
fn stop(project: &TempProject, message: &str) -> Run {
    Hook::new(project)
        .json(&stop_input(project, Some(message)))
        .run()
}

/// `ralph-ctl status` (human output), which must succeed.
/// Snapshots `ralph-ctl status` of the loop in `project` as `name`.
fn snapshot_status(project: &TempProject, name: &str) {
    stable().bind(|| insta::assert_snapshot!(name, status(project)));
}

/// Asserts the loop in `project` ended `ended`, then snapshots its status as `name`.
fn snapshot_ended(project: &TempProject, ended: &str, name: &str) {
    assert_eq!(project.status_json()["status"], ended);
    snapshot_status(project, name);
}

fn status(project: &TempProject) -> String {
    Ctl::new(project)
        .arg("status")
        .run()
        .assert_code(0)
        .stdout
        .clone()
}

fn write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) {
    let path = path.as_ref();
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, bytes).unwrap();
}

// ------------------------------------------------------------ ralph-ctl status

#[test]
fn status_of_a_running_loop() {
    let project = looping("st-running", 25);
    stop(&project, "Read the code; starting on the parser.").block_reason();
    stop(
        &project,
        "Fixed two findings.\nRALPH_ITERATION_COMPLETE: 3 findings remain",
    )
    .block_reason();
    snapshot_status(&project, "status_running");
}

#[test]
fn status_and_reload_of_a_loop_whose_config_changed() {
    let project = TempProject::with_loop_and_config(
        "st-drift",
        SID,
        25,
        r#"{"verify": [{"name": "tests", "command": "cargo test"}], "maxIterations": 25}"#,
    );
    stop(&project, "Read the code; starting on the parser.").block_reason();
    write(
        project.path(".claude/ralph/config.json"),
        r#"{"verify": [{"name": "tests", "command": "true"}], "breakerPatience": 9}"#,
    );
    stop(&project, "Fixed the parser.").block_reason();
    snapshot_status(&project, "status_config_changed");
    let reload = Ctl::new(&project).arg("reload").run();
    reload.assert_code(0);
    stable().bind(|| insta::assert_snapshot!("reload_changed", reload.stdout.clone()));
}

#[test]
fn status_of_a_complete_loop() {
    let project = TempProject::with_loop_and_config(
        "st-complete",
        SID,
        25,
        r#"{"verify": [{"name": "tests", "command": "echo 3 passed; echo 0 failed"}]}"#,
    );
    // The last count, one finding, is not said to remain once the claim of
    // done is accepted.
    stop(
        &project,
        "Working on it.\nRALPH_ITERATION_COMPLETE: 1 findings remain",
    )
    .block_reason();
    stop(&project, &format!("All findings are fixed.\n{SIGNAL}")).assert_allowed();
    snapshot_ended(&project, "complete", "status_complete");
}

#[test]
fn status_of_a_loop_at_max_iterations() {
    let project = looping("st-max", 2);
    stop(&project, "Step one.").block_reason();
    stop(&project, "Step two.").assert_allowed();
    snapshot_ended(&project, "max_iterations", "status_max_iterations");
}

#[test]
fn status_of_a_loop_with_the_circuit_open() {
    // The agent only reports: no file changes either, so two signals trip.
    let project = looping("st-circuit", 25);
    for _ in 0..4 {
        stop(&project, "RALPH_ITERATION_COMPLETE: 4 findings remain").block_reason();
    }
    stop(&project, "RALPH_ITERATION_COMPLETE: 4 findings remain").assert_allowed();
    snapshot_ended(&project, "circuit_open", "status_circuit_open");
}

#[test]
fn cost_of_a_loop_whose_client_has_not_reported_it() {
    // A headless client reports its cost only in its `result`; cancelled,
    // it writes none. The tokens the transcript counted are priced at the
    // model's list prices meanwhile: 600 in, 120 out on Sonnet.
    let project = looping("st-live-cost", 25);
    let transcript = project.tmp.join("live-cost.jsonl");
    let answer = json!({"type": "assistant",
        "message": {"id": "msg_live", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "Working on the parser."}],
            "usage": {"input_tokens": 600, "output_tokens": 120}}});
    write(
        &transcript,
        format!(
            "{}\n{answer}\n",
            json!({"type": "user", "message": {"role": "user", "content": "Do the task."}})
        ),
    );
    let mut input = stop_input(&project, Some("Working on the parser."));
    input["transcript_path"] = json!(transcript);
    Hook::new(&project).json(&input).run().block_reason();
    let state = project.status_json();
    assert_eq!(state["usage"]["input"], 600, "{state:#}");
    let live = "~$0.0036 (estimated from tokens)";
    assert!(status(&project).contains(live), "{}", status(&project));
    let page_path = project.path("report.html");
    Ctl::new(&project)
        .args(["report", "--html", page_path.to_str().unwrap()])
        .run()
        .assert_code(0);
    let page = fs::read_to_string(&page_path).unwrap();
    assert!(page.contains(live), "{page}");
    Ctl::new(&project).arg("cancel").run().assert_code(0);
    Ctl::new(&project)
        .arg("watch")
        .run()
        .assert_stdout_has(&[live]);
    snapshot_status(&project, "status_cost_not_reported");
}

#[test]
fn a_plugin_loop_stopped_by_the_breaker_names_ralph_ctl_reset() {
    // A /ralph-loop loop has no launcher to run with --reset.
    let project = TempProject::initialised("plugin-breaker");
    Ctl::new(&project)
        .args(["loop-start", "--session", SID, "--stdin"])
        .stdin("Fix the findings")
        .run()
        .assert_code(0);
    for _ in 0..4 {
        stop(&project, "Looked again.").block_reason();
    }
    let ended = stop(&project, "Looked again.").ended_message();
    assert_eq!(project.status_json()["status"], "circuit_open");
    let next = status(&project)
        .lines()
        .find(|l| l.trim_start().starts_with("next:"))
        .unwrap_or_default()
        .to_string();
    stable().bind(|| {
        insta::assert_snapshot!(
            "plugin_circuit_open",
            format!("stop's message: {ended}\nstatus: {next}")
        );
    });
}

#[test]
fn the_session_is_told_it_stays_open_after_the_loop() {
    // An interactive client stays open once the loop has ended: the line
    // announcing the end says how to leave it.
    let project = looping("ended-open", 25);
    let ended = stop(&project, &format!("All done.\n{SIGNAL}")).ended_message();
    assert_eq!(project.status_json()["status"], "complete");
    stable().bind(|| insta::assert_snapshot!("session_ended_stays_open", ended));
}

#[test]
fn status_of_an_interrupted_loop() {
    let project = looping("st-interrupted", 25);
    stop(&project, "Halfway through the parser.").block_reason();
    Ctl::new(&project)
        .args(["finish", "--session-id", SID, "--client-exit", "130"])
        .run()
        .assert_code(12);
    snapshot_ended(&project, "interrupted", "status_interrupted");
}

#[test]
fn status_of_a_blocked_loop() {
    let project = looping("st-blocked", 25);
    stop(&project, "Halfway through the parser.").block_reason();
    stop(
        &project,
        "The schema is ambiguous.\nRALPH_ABORT: which of the two date formats is right?",
    );
    snapshot_ended(&project, "blocked", "status_blocked");
}

#[test]
fn status_of_a_complete_that_no_claim_recorded() {
    // What a command the agent ran could leave: "complete" written into the
    // state by hand, with no accepted claim on record.
    let project = looping("st-forged", 25);
    stop(&project, "Halfway through the parser.").block_reason();
    let mut state = project.status_json();
    state["status"] = json!("complete");
    write_state(&project, &state);
    snapshot_status(&project, "status_unrecorded_completion");
}

/// A schema 3 state of a loop the supervisor stopped: `status`, the fields
/// of `extra` over a loop of 25 iterations at iteration 4, with three stops
/// that made model requests.
fn supervised_state(status: &str, extra: Value) -> Value {
    let usage = |input: u64, output: u64, read: u64, creation: u64| json!({"input": input, "output": output, "cacheRead": read, "cacheCreation": creation});
    let mut state = json!({
        "schemaVersion": 3,
        "status": status,
        "iteration": 4,
        "maxIterations": 25,
        "sessionId": SID,
        "startedAt": "2026-03-01T09:00:00Z",
        "lastRunAt": "2026-03-01T09:41:07Z",
        "lastFindingsCount": 2,
        "costUsd": 1.8734,
        "usage": usage(41_250, 9_870, 1_204_500, 88_100),
        "history": [
            {"iteration": 1, "at": "2026-03-01T09:12:40Z", "decision": "block",
             "why": "iteration 1 ended without a completion claim",
             "excerpt": "Read the parser; two findings fixed.", "messageSource": "input",
             "toolCalls": 14, "calls": 15, "usage": usage(20_100, 4_200, 512_000, 60_000)},
            {"iteration": 2, "at": "2026-03-01T09:30:02Z", "decision": "block",
             "why": "iteration 2 ended without a completion claim",
             "excerpt": "Fixed the lexer finding.", "messageSource": "input",
             "toolCalls": 9, "calls": 10, "usage": usage(12_000, 3_100, 480_000, 0)},
            {"iteration": 3, "at": "2026-03-01T09:41:07Z", "decision": "block",
             "why": "iteration 3 ended without a completion claim",
             "excerpt": "Two findings remain.", "messageSource": "input",
             "toolCalls": 0}
        ]
    });
    for (key, value) in extra.as_object().unwrap() {
        state[key] = value.clone();
    }
    state
}

/// `project`'s state replaced by `state`, as the supervisor leaves it.
fn write_state(project: &TempProject, state: &Value) {
    project.write_state(state);
}

/// Model requests per minute over the last hour, relative to the present
/// (the status counts them against the clock): `(minutes ago, requests)`.
fn recent_calls(calls: &[(u64, u32)]) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let minute = now - now % 60;
    Value::Array(
        calls
            .iter()
            .map(|&(ago, calls)| json!({"minute": minute - 60 * ago, "calls": calls}))
            .collect(),
    )
}

#[test]
fn status_of_a_paused_loop() {
    let project = looping("st-paused", 25);
    write(
        project.path(".claude/ralph/config.json"),
        r#"{"maxCallsPerHour": 200, "maxAutoResumes": 5, "resumePolicy": "conservative"}"#,
    );
    write_state(
        &project,
        &supervised_state(
            "paused",
            json!({
                "pausedBecause": {
                    "kind": "rate_limit",
                    "httpStatus": 429,
                    "message": "API Error: Request rejected (429) · This request would exceed the rate limit for your organization",
                    "resumeAt": "2026-03-01T10:00:00Z",
                    "at": "2026-03-01T09:41:07Z"
                },
                "recentCalls": recent_calls(&[(50, 15), (20, 10), (2, 1)]),
                "autoResumes": 2
            }),
        ),
    );
    let shown = status(&project);
    assert!(shown.contains("26 in the last hour"), "{shown}");
    stable().bind(|| insta::assert_snapshot!("status_paused", shown));
}

#[test]
fn status_of_a_failed_loop() {
    let project = looping("st-failed", 25);
    let message = "API Error: 401 {\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key\"}}";
    write_state(
        &project,
        &supervised_state(
            "failed",
            json!({
                "pausedBecause": {
                    "kind": "authentication_failed",
                    "httpStatus": 401,
                    "message": message,
                    "at": "2026-03-01T09:41:07Z"
                },
                "endedAt": "2026-03-01T09:41:08Z",
                "endedBecause": format!(
                    "the API refused the loop (authentication_failed, HTTP 401: {message}); \
                     check ANTHROPIC_API_KEY or log in again (`claude /login`)"
                ),
            }),
        ),
    );
    snapshot_status(&project, "status_failed");
}

#[test]
fn status_of_a_loop_out_of_budget() {
    let project = looping("st-budget", 25);
    write(
        project.path(".claude/ralph/config.json"),
        r#"{"maxCostUsd": 5}"#,
    );
    write_state(
        &project,
        &supervised_state(
            "budget_exhausted",
            json!({
                "costUsd": 5.0312,
                "endedAt": "2026-03-01T09:41:08Z",
                "endedBecause": "the loop's budget is spent: cost $5.03 of maxCostUsd $5.00 (client: Claude Code exited with code 1)",
            }),
        ),
    );
    snapshot_status(&project, "status_budget_exhausted");
}

// ------------------------------------------------------------ ralph-ctl report

/// The dashboard of a finished queue run as `report --html` writes it: the
/// run summarised, its items' table and each item's folded heading, one
/// tag a line.
fn queue_dashboard(page: &str) -> String {
    let start = page
        .find("<p class=\"run-summary\">")
        .expect("a run summary");
    let (dashboard, folds) = page[start..].split_once("<details").expect("folded items");
    let mut shown = dashboard.to_string();
    for fold in folds
        .split("<details")
        .map(|f| f.split("</summary>").next().unwrap())
    {
        shown.push_str(&format!("<details{fold}</summary>"));
    }
    ["<tr", "<table", "<h2", "<p", "<details"]
        .iter()
        .fold(shown, |text, tag| text.replace(tag, &format!("\n{tag}")))
        .trim()
        .to_string()
}

#[test]
fn report_of_a_finished_queue_run() {
    let project = looping("report-queue", 25);
    let mut state = project.state().unwrap();
    let at = |secs: u64| format!("2026-01-01T00:{:02}:{:02}Z", secs / 60, secs % 60);
    let item = |title: &str, status: &str, iterations: u32, why: &str, from: u64, to: u64| {
        json!({
            "title": title, "status": status, "worker": "4242-1", "iterations": iterations,
            "costUsd": 0.022 * f64::from(iterations), "branch": format!("ralph/item-{}", title.len()),
            "taken": 1, "why": why, "usage": {"input": 3000 * u64::from(iterations), "output": 500},
            "takenAt": at(from), "settledAt": at(to),
        })
    };
    state["status"] = "complete".into();
    state["iteration"] = 4.into();
    state["startedAt"] = at(0).into();
    state["endedAt"] = at(125).into();
    state["endedBecause"] = "the queue is drained: 2 done, 1 failed".into();
    state["costUsd"] = 0.088.into();
    state["usage"] = json!({"input": 12000, "output": 1500});
    state["queue"] = json!({
        "source": "plan:PLAN.md", "merge": "rebase", "base": "main",
        "items": {
            "plan-3c1d": item("Write the <usage> notes", "done", 1, "landed on main at 19e74a43f1f2", 40, 52),
            "plan-8a2f": item("Add the parser", "done", 1, "landed on main at b31ef337effe", 10, 38),
            "plan-e07b": item("Fix the flaky test", "failed", 2,
                "its loop ended max_iterations: the cap of 2 iterations\nthe test still fails", 55, 121),
        },
    });
    project.write_state(&state);
    let page_path = project.path("report.html");
    Ctl::new(&project)
        .args(["report", "--html", page_path.to_str().unwrap()])
        .run()
        .assert_code(0);
    let page = fs::read_to_string(&page_path).unwrap();
    stable().bind(|| insta::assert_snapshot!("report_queue_run", queue_dashboard(&page)));
}

// ------------------------------------------------------------ ralph-ctl log

/// A loop's audit log as `start` and the hook write it (the start, a stop,
/// a rejected claim, an API failure), then as the supervisor goes on (it waits under its policy
/// and resumes).
fn logged(name: &str) -> TempProject {
    let project = TempProject::with_loop_and_config(
        name,
        SID,
        25,
        r#"{"verify": [{"name": "tests", "command": "echo 'test parser::nested ... FAILED'; exit 101"}]}"#,
    );
    write(
        project.path("IMPLEMENTATION_PLAN.md"),
        "# Plan\n- [x] fix the parser\n- [x] write the user guide\n",
    );
    stop(&project, "Read the code; starting on the parser.").block_reason();
    stop(&project, &format!("Everything is fixed.\n{SIGNAL}")).block_reason();
    Hook::new(&project)
        .json(&json!({
            "session_id": SID,
            "cwd": project.root,
            "hook_event_name": "StopFailure",
            "error": "rate_limit",
            "last_assistant_message": "API Error: Request rejected (429) · Rate limited",
        }))
        .run();
    assert_eq!(project.status_json()["status"], "paused");
    let log = project.log_path();
    let text = fs::read_to_string(&log).unwrap();
    assert_eq!(
        text.lines().count(),
        4,
        "the start, two stops, the pause: {text}"
    );
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The supervisor's wait and resume, signed as ralph writes them.
    lines.extend([
        json!({"at": "2026-03-01T09:41:08Z", "event": "wait", "sessionId": SID, "iteration": 3,
               "status": "paused", "reason": "rate_limit: backoff of 60 s before resume 1 of 5 (conservative)",
               "policy": "conservative", "resumeAt": "2026-03-01T09:42:08Z"}),
        json!({"at": "2026-03-01T09:42:08Z", "event": "resume", "sessionId": SID, "iteration": 3,
               "status": "running", "reason": "resumed by the supervisor (conservative policy, resume 1 of 5)",
               "policy": "conservative", "costUsd": 0.4125}),
    ]);
    project.write_log(&lines);
    project
}

#[test]
fn log_of_a_supervised_loop() {
    let project = logged("log-human");
    let run = Ctl::new(&project).arg("log").run();
    run.assert_code(0);
    assert_eq!(run.stderr, "");
    for line in run.stdout.lines() {
        assert!(
            line.chars().count() <= 100,
            "wider than 100 columns: {line:?}"
        );
    }
    stable().bind(|| insta::assert_snapshot!("log", same_width_times(&run.stdout)));
}

/// `text` with every RFC 3339 time replaced by a placeholder of the same
/// width, so that the snapshot keeps the columns the times line up.
fn same_width_times(text: &str) -> String {
    const SHAPE: &[u8] = b"0000-00-00T00:00:00Z";
    const PLACEHOLDER: &[u8] = b"YYYY-MM-DDThh:mm:ssZ";
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let time = bytes.get(i..i + SHAPE.len()).is_some_and(|window| {
            window.iter().zip(SHAPE).all(|(b, s)| {
                if *s == b'0' {
                    b.is_ascii_digit()
                } else {
                    b == s
                }
            })
        });
        if time {
            out.extend_from_slice(PLACEHOLDER);
            i += SHAPE.len();
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn log_as_json_lines() {
    let project = logged("log-json");
    let run = Ctl::new(&project).args(["log", "--json"]).run();
    run.assert_code(0);
    let lines: Vec<Value> = run
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 6, "start, two stops, pause, wait, resume");
    stable().bind(|| insta::assert_snapshot!("log_json", run.stdout));
}

// ------------------------------------------------------------ re-injected text

/// The block answer as the agent and the person get it: the reason, then
/// the system message.
fn reinjection(run: &Run) -> String {
    let answer = run.block_answer();
    format!(
        "{}\n---- systemMessage: {}\n",
        run.block_reason(),
        answer["systemMessage"].as_str().unwrap_or("(none)")
    )
}

#[test]
fn reinjected_prompt() {
    let project = looping("re-plain", 25);
    project.write_prompt("Fix every finding in FINDINGS.md, one per iteration.\n");
    let run = stop(&project, "Fixed the first finding.");
    stable().bind(|| insta::assert_snapshot!("reinjected_prompt", reinjection(&run)));
}

#[test]
fn reinjected_prompt_with_the_breakers_notice() {
    let project = looping("re-breaker", 25);
    project.write_prompt("Fix every finding in FINDINGS.md, one per iteration.\n");
    let stuck = "RALPH_ITERATION_COMPLETE: 4 findings remain";
    for _ in 0..3 {
        stop(&project, stuck).block_reason();
    }
    let run = stop(&project, stuck);
    assert_eq!(project.status_json()["breaker"]["state"], "half_open");
    stable().bind(|| insta::assert_snapshot!("reinjected_breaker_notice", reinjection(&run)));
}

#[test]
fn reinjected_prompt_after_a_rejected_claim() {
    let project = TempProject::with_loop_and_config(
        "re-claim",
        SID,
        25,
        r#"{"verify": [{"name": "tests", "command": "echo 'test parser::nested ... FAILED'; exit 101"}]}"#,
    );
    project.write_prompt("Fix every finding in FINDINGS.md, one per iteration.\n");
    write(
        project.path("IMPLEMENTATION_PLAN.md"),
        "# Plan\n- [x] fix the parser\n- [ ] write the user guide\n",
    );
    let run = stop(&project, &format!("Everything is fixed.\n{SIGNAL}"));
    assert_eq!(project.status_json()["status"], "running");
    stable().bind(|| insta::assert_snapshot!("reinjected_rejected_claim", reinjection(&run)));
}

// ------------------------------------------------------------ the hook's bad input

/// Collects `(case, what the hook printed)` into one readable table.
#[derive(Default)]
struct Table(String);

impl Table {
    /// Records a case that must print exactly one `ralph-stop-hook:` line.
    fn line(&mut self, case: &str, run: &Run) {
        let line = run.assert_hook_error(&[]).to_string();
        self.0.push_str(&format!("{case}\n    {line}\n"));
    }

    /// Records a case that must print nothing at all.
    fn nothing(&mut self, case: &str, run: &Run) {
        run.assert_silent();
        self.0.push_str(&format!("{case}\n    (nothing)\n"));
    }
}

/// Runs `hook` and checks the state file is byte for byte what it was.
fn untouched(project: &TempProject, hook: Hook) -> Run {
    untouched_by(project, || hook.run())
}

/// Runs `run` and checks the state file is byte for byte what it was.
fn untouched_by(project: &TempProject, run: impl FnOnce() -> Run) -> Run {
    let before = fs::symlink_metadata(project.state_path())
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|_| project.state_bytes());
    let run = run();
    let after = fs::symlink_metadata(project.state_path())
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|_| project.state_bytes());
    assert_eq!(before, after, "the state is untouched: {run:?}");
    run
}

/// The hook on the usual stop of `project`.
fn usual(project: &TempProject) -> Hook<'_> {
    Hook::new(project).json(&stop_input(project, Some("Working.")))
}

/// The hook on a stop without `last_assistant_message`, so that it reads
/// `transcript.jsonl` in `project`.
fn transcript(project: &TempProject) -> Hook<'_> {
    Hook::new(project).json(&stop_input(project, None))
}

fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().unwrap();
    assert!(status.success(), "mkfifo {}", path.display());
}

use ralph_tests::listen::is_root;

/// Runs `hook` as uid 65534 (made owner of the project, and of ralph's key
/// in its HOME, as a user owns theirs) when run as root, so that file modes
/// bite, from a copy of the hook beside the project, where that user
/// reaches it; as another user, as is.
fn as_nobody(project: &TempProject, hook: Hook) -> Run {
    let root = is_root();
    if root {
        let status = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(&project.root)
            .args(project.key_dir().exists().then(|| project.key_dir()))
            .status()
            .unwrap();
        assert!(status.success());
    }
    hook.run_with(|cmd| {
        if root {
            run_from_reach(cmd, &project.root.parent().unwrap().join("bin"));
            cmd.uid(NOBODY).gid(NOBODY);
        }
    })
}

#[test]
fn hook_lines_for_bad_stdin_and_environment() {
    let mut table = Table::default();
    let project = looping("bad-stdin", 5);
    let raw = |stdin: &[u8]| untouched(&project, Hook::new(&project).stdin(stdin));

    table.nothing(
        "RALPH_ACTIVE=yes",
        &untouched(&project, usual(&project).active(Some("yes"))),
    );
    table.line("empty stdin", &raw(b""));
    table.line("invalid JSON", &raw(b"{\"session_id\": "));
    let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
    table.line("JSON nested 200 deep", &raw(nested.as_bytes()));
    for (case, stdin) in [
        ("a JSON array", "[1, 2]"),
        ("a JSON string", "\"stop\""),
        ("a JSON number", "42"),
        ("JSON null", "null"),
        ("a JSON boolean", "true"),
    ] {
        table.line(case, &raw(stdin.as_bytes()));
    }
    let mut huge = vec![b' '; 17 << 20];
    huge.extend_from_slice(b"{}");
    table.line("stdin of 17 MiB", &raw(&huge));
    table.line("invalid UTF-8 on stdin", &raw(b"{\"cwd\": \"\xff\xfe\"}"));
    table.line(
        "stop_hook_active not a boolean",
        &raw(br#"{"session_id": "x", "stop_hook_active": "yes"}"#),
    );
    table.line("session_id not a string", &raw(br#"{"session_id": 42}"#));
    let mut input = stop_input(&project, Some("Working."));
    input["session_id"] = json!("../../../etc/passwd");
    table.line(
        "session_id with / and ..",
        &untouched(&project, Hook::new(&project).json(&input)),
    );
    input["session_id"] = json!("x".repeat(201));
    table.line(
        "session_id of 201 characters",
        &untouched(&project, Hook::new(&project).json(&input)),
    );
    input.as_object_mut().unwrap().remove("session_id");
    table.line(
        "no session_id while a loop runs",
        &untouched(&project, Hook::new(&project).json(&input)),
    );
    table.line("{}", &raw(b"{}"));
    let mut other = stop_input(&project, Some("Working."));
    other["session_id"] = json!("99999999-0000-0000-0000-000000000000");
    table.nothing(
        "a stop of another session",
        &untouched(&project, Hook::new(&project).json(&other)),
    );
    let mut subagent = stop_input(&project, Some("Working."));
    subagent["hook_event_name"] = json!("SubagentStop");
    table.line(
        "registered for SubagentStop",
        &untouched(&project, Hook::new(&project).json(&subagent)),
    );
    for (name, value) in [
        ("RALPH_MAX_ITERATIONS", "abc"),
        ("RALPH_MAX_ITERATIONS", "0"),
        ("RALPH_CIRCUIT_BREAKER_THRESHOLD", "many"),
        ("RALPH_COMPLETION_MODE", "eventually"),
        ("CB_OUTPUT_DECLINE_THRESHOLD", "100"),
        ("RALPH_COMPLETION_SIGNAL", "   "),
    ] {
        table.line(
            &format!("{name}={value:?}"),
            &untouched(&project, usual(&project).env(name, value)),
        );
    }
    table.line(
        "RALPH_MAX_ITERATIONS not UTF-8",
        &untouched(
            &project,
            usual(&project).env(
                "RALPH_MAX_ITERATIONS",
                OsString::from_vec(b"\xff5".to_vec()),
            ),
        ),
    );

    let bare = TempProject::new("no-state");
    table.line(
        "no state file (no loop started)",
        &Hook::new(&bare)
            .json(&stop_input(&bare, Some("Working.")))
            .run(),
    );
    assert!(!bare.path(".claude").exists(), "nothing was created");
    stable().bind(|| insta::assert_snapshot!("hook_bad_stdin_and_environment", table.0));
}

#[test]
#[allow(clippy::too_many_lines)] // a table of bad files, one row each
fn hook_lines_for_bad_files() {
    let mut table = Table::default();
    let config = ".claude/ralph/config.json";
    for (case, text) in [
        ("config.json malformed", "{\"maxIterations\": 5"),
        ("config.json with an unknown key", "{\"maxIteration\": 5}"),
        ("config.json with a bad value", "{\"maxIterations\": 0}"),
    ] {
        // Read by a stop of a loop without a pin (see TempProject::unpin).
        let project = looping("bad-config", 5);
        project.unpin();
        write(project.path(config), text);
        table.line(case, &untouched(&project, usual(&project)));
    }
    let project = looping("big-config", 5);
    project.unpin();
    write(project.path(config), vec![b' '; (1 << 20) + 1]);
    table.line(
        "config.json over 1 MiB",
        &untouched(&project, usual(&project)),
    );
    let project = looping("fifo-config", 5);
    project.unpin();
    mkfifo(&project.path(config));
    table.line("config.json a FIFO", &untouched(&project, usual(&project)));
    let project = looping("dev-config", 5);
    project.unpin();
    std::os::unix::fs::symlink("/dev/zero", project.path(config)).unwrap();
    table.line(
        "config.json a device (/dev/zero)",
        &untouched(&project, usual(&project)),
    );

    type Setup = fn(&TempProject);
    let state_cases: [(&str, Setup); 7] = [
        ("state file empty", |p| write(p.state_path(), "")),
        ("state file corrupt", |p| {
            write(p.state_path(), "{\"status\": \"running\", \"iter");
        }),
        ("state file a JSON array", |p| write(p.state_path(), "[]")),
        ("state file a directory", |p| {
            fs::remove_file(p.state_path()).unwrap();
            fs::create_dir(p.state_path()).unwrap();
        }),
        ("state file a FIFO", |p| {
            fs::remove_file(p.state_path()).unwrap();
            mkfifo(&p.state_path());
        }),
        ("state file a symlink", |p| {
            let target = p.path("elsewhere.json");
            fs::rename(p.state_path(), &target).unwrap();
            std::os::unix::fs::symlink(&target, p.state_path()).unwrap();
        }),
        ("state file over 4 MiB", |p| {
            write(p.state_path(), vec![b' '; (4 << 20) + 1]);
        }),
    ];
    for (case, setup) in state_cases {
        let project = looping("bad-state", 5);
        setup(&project);
        table.line(case, &untouched(&project, usual(&project)));
    }
    let project = looping("state-folder", 5);
    let runtime = project.runtime_dir();
    fs::remove_dir_all(&runtime).unwrap();
    write(&runtime, "not a folder");
    table.line(
        "state folder is a file",
        &untouched(&project, usual(&project)),
    );
    let project = looping("linked-folder", 5);
    let runtime = project.runtime_dir();
    let other = project.path("other-runtime");
    fs::rename(&runtime, &other).unwrap();
    std::os::unix::fs::symlink(&other, &runtime).unwrap();
    table.line(
        "state folder is a symlink",
        &untouched(&project, usual(&project)),
    );
    let project = looping("unsearchable", 5);
    let runtime = project.runtime_dir();
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o000)).unwrap();
    let run = untouched_by(&project, || as_nobody(&project, usual(&project)));
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o755)).unwrap();
    table.line("state folder cannot be searched", &run);
    let project = looping("unwritable", 5);
    let runtime = project.runtime_dir();
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o555)).unwrap();
    let run = untouched_by(&project, || as_nobody(&project, usual(&project)));
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o755)).unwrap();
    table.line("state folder unwritable", &run);
    let project = looping("disk-full", 5);
    table.line(
        "file size limit on write (as a full disk)",
        &untouched_by(&project, || {
            usual(&project).run_with(|cmd| limit_file_size(cmd, 64))
        }),
    );

    let project = looping("no-transcript", 5);
    table.line(
        "transcript missing",
        &untouched(&project, transcript(&project)),
    );
    let project = looping("dir-transcript", 5);
    fs::create_dir(project.path("transcript.jsonl")).unwrap();
    table.line(
        "transcript a directory",
        &untouched(&project, transcript(&project)),
    );
    let project = looping("fifo-transcript", 5);
    mkfifo(&project.path("transcript.jsonl"));
    table.line(
        "transcript a FIFO",
        &untouched(&project, transcript(&project)),
    );
    let project = looping("unreadable-transcript", 5);
    write(project.path("transcript.jsonl"), "{}\n");
    fs::set_permissions(
        project.path("transcript.jsonl"),
        fs::Permissions::from_mode(0o000),
    )
    .unwrap();
    table.line(
        "transcript unreadable",
        &untouched_by(&project, || as_nobody(&project, transcript(&project))),
    );

    let prompt = ".claude/ralph/PROMPT.md";
    let prompt_cases: [(&str, Setup); 6] = [
        ("PROMPT.md missing", |p| {
            fs::remove_file(p.path(".claude/ralph/PROMPT.md")).unwrap();
        }),
        ("PROMPT.md blank", |p| p.write_prompt("  \n\n")),
        ("PROMPT.md over 1 MiB", |p| {
            p.write_prompt(&"x".repeat((1 << 20) + 1));
        }),
        ("PROMPT.md binary", |p| {
            write(p.path(".claude/ralph/PROMPT.md"), b"\x00\xff\xfebinary");
        }),
        ("PROMPT.md a FIFO", |p| {
            fs::remove_file(p.path(".claude/ralph/PROMPT.md")).unwrap();
            mkfifo(&p.path(".claude/ralph/PROMPT.md"));
        }),
        ("guardrails.md a folder", |p| {
            fs::remove_file(p.path(".claude/ralph/guardrails.md")).unwrap();
            fs::create_dir(p.path(".claude/ralph/guardrails.md")).unwrap();
        }),
    ];
    for (case, setup) in prompt_cases {
        let project = looping("bad-prompt", 5);
        assert!(project.path(prompt).is_file());
        setup(&project);
        table.line(case, &untouched(&project, usual(&project)));
    }
    stable().bind(|| insta::assert_snapshot!("hook_bad_files", table.0));
}

/// Holds an exclusive flock on `file` until it is dropped.
#[allow(unsafe_code)]
fn lock(file: &File) {
    use std::os::fd::AsRawFd;
    // SAFETY: flock(2) on a descriptor this function borrows for the call.
    let done = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(done, 0, "flock");
}

#[test]
fn hook_line_when_the_state_lock_is_held() {
    let project = looping("lock-held", 5);
    let held = File::open(project.runtime_dir()).unwrap();
    lock(&held);
    let run = untouched(&project, usual(&project));
    drop(held);
    let mut table = Table::default();
    table.line("the state lock held for over 10 s", &run);
    stable().bind(|| insta::assert_snapshot!("hook_lock_held", table.0));
}

// ------------------------------------------------------------ ralph-ctl errors

/// Collects `ralph-ctl` runs that must fail: the command, its exit code and
/// what it printed.
#[derive(Default)]
struct CtlTable(String);

impl CtlTable {
    fn record(&mut self, case: &str, run: &Run) {
        run.assert_no_panic();
        assert_ne!(run.code, Some(0), "{case} must fail: {run:?}");
        let code = run.code.map_or_else(|| "killed".into(), |c| c.to_string());
        self.0.push_str(&format!("$ {case}\nexit {code}\n"));
        for (name, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
            for line in text.lines() {
                let line = format!("  {name}| {line}");
                self.0.push_str(line.trim_end());
                self.0.push('\n');
            }
        }
    }
}

#[test]
fn ctl_lines_for_bad_configuration() {
    let mut table = CtlTable::default();
    let project = TempProject::initialised("ctl-config");
    for (name, value) in [
        ("RALPH_MAX_ITERATIONS", "abc"),
        ("RALPH_CIRCUIT_BREAKER_THRESHOLD", "-1"),
        ("CB_COOLDOWN_MINUTES", "forever"),
        ("RALPH_PROMPT_FILE", "missing.md"),
    ] {
        table.record(
            &format!("{name}={value:?} ralph-ctl start"),
            &Ctl::new(&project).arg("start").env(name, value).run(),
        );
    }
    for args in [
        &["start", "--max-iterations", "0"][..],
        &["start", "--session-id", "../../x"],
        &["start", "--bogus"],
    ] {
        table.record(
            &format!("ralph-ctl {}", args.join(" ")),
            &Ctl::new(&project).args(args).run(),
        );
    }
    let config = project.path(".claude/ralph/config.json");
    for text in [
        "{\"maxIterations\": 5",
        "{\"maxIteration\": 5}",
        "{\"maxIterations\": 0}",
        "{\"verify\": [{\"name\": \"tests\"}]}",
    ] {
        write(&config, text);
        table.record(
            &format!("ralph-ctl start  # config.json: {text}"),
            &Ctl::new(&project).arg("start").run(),
        );
    }
    fs::remove_file(&config).unwrap();
    project.write_prompt("");
    table.record(
        "ralph-ctl start  # PROMPT.md empty",
        &Ctl::new(&project).arg("start").run(),
    );
    assert!(project.state().is_none(), "nothing was started");

    let settings = TempProject::new("ctl-settings");
    write(settings.path(".claude/settings.json"), "{\"hooks\": ");
    table.record(
        "ralph-ctl init  # settings.json malformed",
        &Ctl::new(&settings).arg("init").run(),
    );
    stable().bind(|| insta::assert_snapshot!("ctl_bad_configuration", table.0));
}

#[test]
#[allow(clippy::too_many_lines)] // a table of refused starts, one row each
fn ctl_lines_for_refused_starts() {
    let mut table = CtlTable::default();
    let running = looping("refused-running", 5);
    table.record(
        "ralph-ctl start  # a loop is running",
        &Ctl::new(&running).arg("start").run(),
    );
    table.record(
        "ralph-ctl reset  # a loop is running",
        &Ctl::new(&running).arg("reset").run(),
    );
    let open = looping("refused-open", 25);
    for _ in 0..6 {
        stop(&open, "RALPH_ITERATION_COMPLETE: 4 findings remain");
    }
    assert_eq!(open.status_json()["status"], "circuit_open");
    table.record(
        "ralph-ctl start  # the last loop ended circuit_open",
        &Ctl::new(&open).arg("start").run(),
    );
    let corrupt = looping("refused-corrupt", 5);
    write(corrupt.state_path(), "{\"status\": \"runn");
    table.record(
        "ralph-ctl start  # the state is corrupt",
        &Ctl::new(&corrupt).arg("start").run(),
    );
    table.record(
        "ralph-ctl status  # the state is corrupt",
        &Ctl::new(&corrupt).arg("status").run(),
    );

    // The untouched template, and one whose task was never written in.
    let template = TempProject::new("refused-template");
    template.init_untouched();
    for args in [&["start"][..], &["run", "--headless"]] {
        table.record(
            &format!("ralph-ctl {}  # PROMPT.md is the template", args.join(" ")),
            // A client that is there, so that the prompt is what stops it.
            &Ctl::new(&template)
                .args(args)
                .env("RALPH_CLAUDE", "true")
                .run(),
        );
    }
    // Worktrees need a git project and a base that exists; nothing starts without.
    let plain = TempProject::new("refused-worktree");
    plain.init();
    fs::remove_dir_all(plain.path(".git")).unwrap();
    let no_base = TempProject::new("refused-base-ref");
    no_base.init();
    for (project, args, why) in [
        (&plain, &["run", "--worktree"][..], "not a git project"),
        (
            &no_base,
            &["run", "--worktree", "--base-ref", "release"][..],
            "no such ref",
        ),
    ] {
        table.record(
            &format!("ralph-ctl {}  # {why}", args.join(" ")),
            &Ctl::new(project)
                .args(args)
                .env("RALPH_CLAUDE", "true")
                .run(),
        );
        assert!(project.state().is_none(), "nothing was started");
    }
    // A formula that is missing or wrong is refused before anything starts.
    let formulas = TempProject::new("refused-formula");
    formulas.init();
    let folder = formulas.dir(".claude/ralph/formulas");
    write(
        folder.join("typo.yaml"),
        "steps:\n  - id: plan\n    prompt: Plan.\n    modle: opus\n",
    );
    write(
        folder.join("model.yaml"),
        "steps:\n  - id: plan\n    prompt: Plan.\n    model: gpt-4\n",
    );
    for name in ["typo", "model", "nowhere"] {
        table.record(
            &format!("ralph-ctl run --formula {name}"),
            &Ctl::new(&formulas)
                .args(["run", "--formula", name])
                .env("RALPH_CLAUDE", "true")
                .run(),
        );
    }
    assert!(formulas.state().is_none(), "nothing was started");
    let prompt = template.path(".claude/ralph/PROMPT.md");
    let edited = fs::read_to_string(&prompt)
        .unwrap()
        .replace("# Task", "# Task\n\nSome notes, but no task.");
    write(&prompt, &edited);
    table.record(
        "ralph-ctl start  # notes added, the placeholder still there",
        &Ctl::new(&template).arg("start").run(),
    );
    assert!(template.state().is_none(), "nothing was started");
    let forced = Ctl::new(&template).args(["start", "--force"]).run();
    forced.assert_code(0);
    assert_eq!(
        template.status_json()["status"],
        "running",
        "--force runs it"
    );
    stable().bind(|| insta::assert_snapshot!("ctl_refused_starts", table.0));
}

// ------------------------------------------------------------ ralph-ctl doctor

/// `ralph-ctl doctor` (and `--interactive`) in a project set up by `init`,
/// with a fake client saying a tested version and `env`: the exit code and
/// what it printed, the binaries' folder as `[BIN]`. The sandbox is off, so that no check depends on what
/// this machine has installed.
fn doctor(name: &str, env: &[(&str, &str)]) -> String {
    doctor_in(name, env, |_| {})
}

/// [`doctor`], with `home` (the project's HOME) set up first.
fn doctor_in(name: &str, env: &[(&str, &str)], home: impl FnOnce(&TempProject)) -> String {
    let project = TempProject::initialised(name);
    home(&project);
    write(
        project.path(".claude/ralph/config.json"),
        r#"{"sandbox": "off", "verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#,
    );
    let client = project.path("fake-claude");
    write(&client, "#!/bin/sh\necho '2.1.330 (Claude Code)'\n");
    fs::set_permissions(&client, fs::Permissions::from_mode(0o755)).unwrap();
    let mut text = String::new();
    for args in [&["doctor"][..], &["doctor", "--interactive"]] {
        let run = Ctl::new(&project)
            .args(args)
            .env("RALPH_CLAUDE", client.to_str().unwrap())
            .envs(env.iter().copied())
            .run();
        text.push_str(&format!(
            "$ ralph-ctl {}  # exit {}\n{}\n",
            args.join(" "),
            run.code.unwrap_or(-1),
            run.stdout
        ));
    }
    // The binaries under test may be built anywhere (CARGO_TARGET_DIR).
    text.replace(&bins::bin_dir().display().to_string(), "[BIN]")
}

#[test]
fn doctor_with_a_key_in_a_home_where_the_client_never_ran() {
    let text = doctor(
        "doctor-key",
        &[("ANTHROPIC_API_KEY", "sk-test-key-for-the-doctor-check")],
    );
    stable().bind(|| insta::assert_snapshot!("doctor_key_never_run", text));
}

#[test]
fn doctor_on_a_subscription_login_says_what_headless_runs_draw_from() {
    let text = doctor(
        "doctor-subscription",
        &[(
            "CLAUDE_CODE_OAUTH_TOKEN",
            "sk-ant-oat01-for-the-doctor-check",
        )],
    );
    // What is in force, with the day it was read and where to read it; the
    // credit announced for 2026-06-15 was paused on that day.
    ralph_tests::assert_has_all(
        &text,
        &[
            "ok    billing: on a subscription login",
            "draws from the plan's usage limits",
            "checked 2026-12-02",
            "help center",
        ],
    );
    assert!(
        !text.contains("draws the plan's Agent SDK credit"),
        "{text}"
    );
    stable().bind(|| insta::assert_snapshot!("doctor_subscription", text));
}

/// A home for `doctor`: a title, the client's version, the environment,
/// and how the home is set up.
type HomeCase<'a> = (
    &'a str,
    &'a str,
    Vec<(&'a str, &'a str)>,
    Box<dyn Fn(&TempProject)>,
);

/// `ralph-ctl doctor --interactive`'s lines about the client's login and
/// first run, in homes set up as each case says, for a fake client of
/// `version`: a case's title, then those lines.
fn doctor_login_lines(name: &str, cases: Vec<HomeCase<'_>>) -> String {
    let mut text = String::new();
    for (n, (title, version, env, home)) in cases.into_iter().enumerate() {
        let project = TempProject::initialised(&format!("{name}-{n}"));
        home(&project);
        write(
            project.path(".claude/ralph/config.json"),
            r#"{"sandbox": "off", "verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#,
        );
        let client = project.path("fake-claude");
        write(
            &client,
            format!("#!/bin/sh\necho '{version} (Claude Code)'\n"),
        );
        fs::set_permissions(&client, fs::Permissions::from_mode(0o755)).unwrap();
        let run = Ctl::new(&project)
            .args(["doctor", "--interactive", "--no-check"])
            .env("RALPH_CLAUDE", client.to_str().unwrap())
            .envs(env.iter().copied())
            .run();
        text.push_str(&format!("# {title} (Claude Code {version})\n"));
        let mut keep = false;
        for line in run.stdout.lines() {
            if !line.starts_with("      fix:") {
                keep = [
                    "login:",
                    "billing:",
                    "API key:",
                    "first run:",
                    "folder trust:",
                ]
                .iter()
                .any(|name| line.get(6..).is_some_and(|l| l.starts_with(name)));
            }
            if keep {
                text.push_str(line);
                text.push('\n');
            }
        }
        text.push('\n');
    }
    text
}

#[test]
fn doctor_reads_the_client_s_home_as_the_client_does() {
    let key = "sk-ant-api03-a-key-the-client-never-saw-0123456789";
    let tail = &key[key.len() - 20..];
    let set_up = |project: &TempProject, extra: Value| {
        ralph_tests::interactive::write_first_run_config(
            &project.home,
            &project.root,
            "sk-ant-another-key-approved-long-ago-000",
        );
        let path = project.home.join(".claude.json");
        let mut config: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        write(&path, serde_json::to_string(&config).unwrap());
    };
    let user_settings = |project: &TempProject, settings: Value| {
        fs::create_dir_all(project.home.join(".claude")).unwrap();
        write(
            project.home.join(".claude/settings.json"),
            settings.to_string(),
        );
    };
    let declined = json!({"customApiKeyResponses": {"approved": [], "rejected": [tail]}});
    let text = doctor_login_lines(
        "doctor-home",
        vec![
            (
                "a config of 17 MiB, the client set up",
                "2.1.330",
                vec![],
                Box::new(move |p| {
                    set_up(p, json!({"history": "x".repeat(17 * 1024 * 1024)}));
                }),
            ),
            (
                "a config that is not JSON",
                "2.1.330",
                vec![],
                Box::new(|p| {
                    write(
                        p.home.join(".claude.json"),
                        "{\"hasCompletedOnboarding\": tr",
                    );
                }),
            ),
            (
                "a key and Foundry in the environment",
                "2.1.330",
                vec![("ANTHROPIC_API_KEY", key), ("CLAUDE_CODE_USE_FOUNDRY", "1")],
                Box::new(move |p| set_up(p, json!({}))),
            ),
            (
                "a key and Bedrock in the env of the user's settings",
                "2.1.330",
                vec![("ANTHROPIC_API_KEY", key)],
                Box::new(move |p| {
                    set_up(p, json!({}));
                    user_settings(p, json!({"env": {"CLAUDE_CODE_USE_BEDROCK": "1"}}));
                }),
            ),
            (
                "a key and Bedrock: 2.0.77 asks whatever the provider",
                "2.0.77",
                vec![("ANTHROPIC_API_KEY", key), ("CLAUDE_CODE_USE_BEDROCK", "1")],
                Box::new(move |p| set_up(p, json!({}))),
            ),
            (
                "a declined key beside a stored API key",
                "2.1.330",
                vec![("ANTHROPIC_API_KEY", key)],
                Box::new(move |p| {
                    let mut config = declined.clone();
                    config["primaryApiKey"] = json!("sk-ant-stored-by-login");
                    set_up(p, config);
                }),
            ),
            (
                "an apiKeyHelper beside a stored subscription login",
                "2.1.330",
                vec![],
                Box::new(move |p| {
                    set_up(p, json!({}));
                    user_settings(p, json!({"apiKeyHelper": "/usr/local/bin/get-key"}));
                    write(
                        p.home.join(".claude/.credentials.json"),
                        r#"{"claudeAiOauth": {"accessToken": "t"}}"#,
                    );
                }),
            ),
        ],
    );
    assert!(
        !text.contains("never run in this home") && text.contains("could not be read"),
        "{text}"
    );
    assert!(
        text.contains("the apiKeyHelper of") && !text.contains("draws from the plan"),
        "{text}"
    );
    stable().bind(|| insta::assert_snapshot!("doctor_reads_the_home", text));
}

#[test]
fn doctor_sees_the_question_of_a_key_the_client_never_approved() {
    // A subscription login, the client set up in this home, and an exported
    // ANTHROPIC_API_KEY the client has no answer for: its terminal UI opens
    // on "Detected a custom API key … Do you want to use this API key?".
    let key = "sk-ant-api03-a-key-the-client-never-saw-0123456789";
    let text = doctor_in(
        "doctor-key-question",
        &[
            ("ANTHROPIC_API_KEY", key),
            (
                "CLAUDE_CODE_OAUTH_TOKEN",
                "sk-ant-oat01-for-the-doctor-check",
            ),
        ],
        |project| {
            ralph_tests::interactive::write_first_run_config(
                &project.home,
                &project.root,
                "sk-ant-another-key-approved-long-ago-000",
            );
        },
    );
    assert!(
        text.contains("Detected a custom API key")
            && text.contains("customApiKeyResponses")
            && text.contains("`claude -p` (headless, fresh-context and queue runs) uses the key"),
        "{text}"
    );
    stable().bind(|| insta::assert_snapshot!("doctor_key_question", text));
}

#[test]
fn doctor_with_nothing_set() {
    let text = doctor("doctor-nothing", &[]);
    stable().bind(|| insta::assert_snapshot!("doctor_nothing_set", text));
}

#[test]
#[allow(clippy::too_many_lines)] // one client home taken through each missing first-run step
fn an_interactive_run_the_client_s_first_screens_would_stop_is_refused() {
    // A client that records that it ran: it must not.
    let project = TempProject::new("screens-first");
    let client = project.path("fake-claude");
    write(
        &client,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.1.330 (Claude Code)'; exit 0; }}\n\
             touch {}\n[ -n \"$FAKE_SAYS\" ] && echo \"$FAKE_SAYS\"\nexit 1\n",
            project.path("client-ran").display()
        ),
    );
    fs::set_permissions(&client, fs::Permissions::from_mode(0o755)).unwrap();
    let mut text = String::new();
    let mut show = |args: &[&str], env: &[(&str, &str)]| {
        let run = Ctl::new(&project)
            .args(args)
            .env("RALPH_CLAUDE", client.to_str().unwrap())
            .envs(env.iter().copied())
            .run();
        text.push_str(&format!(
            "$ ralph-ctl {}  # exit {}\n{}{}\n",
            args.join(" "),
            run.code.unwrap_or(-1),
            run.stdout,
            run.stderr
        ));
        run
    };
    // A home where Claude Code never ran: refused before the loop or the
    // client starts (the task is kept in PROMPT.md for the next start),
    // the cause and the fixes named, no --resume.
    let never_ran = show(&["run", "--task", "Add a README."], &[]);
    never_ran.assert_code(3);
    assert!(project.state().is_none(), "{never_ran:?}");
    assert!(!project.path("client-ran").exists(), "{never_ran:?}");
    assert!(!never_ran.stderr.contains("--resume"), "{never_ran:?}");
    // A dry run says so.
    let dry = Ctl::new(&project)
        .args(["run", "--dry-run"])
        .env("RALPH_CLAUDE", client.to_str().unwrap())
        .run();
    dry.assert_code(0).assert_stdout_has(&[
        "warning: a real run would be refused: not started: the client's terminal UI would open",
        "Claude Code has never run in this home",
    ]);
    // Installed, onboarding done, but an ANTHROPIC_API_KEY the client has
    // no answer for: its first question, refused likewise.
    project.init();
    ralph_tests::interactive::write_first_run_config(
        &project.home,
        &project.root,
        "sk-ant-another-key-approved-long-ago-000",
    );
    let key = [(
        "ANTHROPIC_API_KEY",
        "sk-ant-api03-never-asked-about-0123456789",
    )];
    let question = show(&["run"], &key);
    question.assert_code(3);
    assert!(project.state().is_none(), "nothing started: {question:?}");
    // Headless, with no login found, a client that exits at once without
    // saying why: the likely cause is named, and the loop is interrupted
    // as any other (ralph's guess is no reason to end it).
    let silent = show(
        &["run", "--headless", "--no-sandbox", "--max-iterations", "1"],
        &[],
    );
    assert!(project.path("client-ran").exists(), "{text}");
    fs::remove_file(project.path("client-ran")).unwrap();
    silent.assert_code(12);
    assert!(
        silent
            .stderr
            .contains("Claude Code exited at once: Claude Code is not logged in")
            && silent
                .stderr
                .contains("`ralph-ctl run --resume` goes on from iteration 1"),
        "{silent:?}"
    );
    // A client that says it has no login (2.1.330's words in its result):
    // the loop ends `failed` on it, the fix first, then the --resume that
    // goes on once it is done.
    let said = show(
        &[
            "run",
            "--reset",
            "--headless",
            "--no-sandbox",
            "--max-iterations",
            "1",
        ],
        &[(
            "FAKE_SAYS",
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Not logged in · Please run /login"}"#,
        )],
    );
    fs::remove_file(project.path("client-ran")).unwrap();
    said.assert_code(15);
    assert!(
        said.stderr.contains(
            "loop failed at iteration 1 (Claude Code is not logged in (it said \"Not logged in · \
             Please run /login\"); first run `claude` and log in (or `claude setup-token`), or set \
             ANTHROPIC_API_KEY); `ralph-ctl run --resume`"
        ),
        "{said:?}"
    );
    // Headless runs meet neither screen: they start, saying that with a
    // subscription login beside the key, the key pays.
    let headless = show(
        &["run", "--headless", "--no-sandbox", "--max-iterations", "1"],
        &[
            key[0],
            ("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-for-the-start-line"),
        ],
    );
    assert!(
        headless.stderr.contains(
            "billing: ANTHROPIC_API_KEY and a subscription login (the CLAUDE_CODE_OAUTH_TOKEN \
             variable) are both set: `claude -p` (headless, fresh-context and queue runs) uses the key"
        ),
        "{headless:?}"
    );
    assert!(project.path("client-ran").exists(), "{text}");
    fs::remove_file(project.path("client-ran")).unwrap();
    // A config the client wrote that ralph cannot read (here, cut short
    // where no path of this run's comes before the cut, so the parser's
    // words are the same every run): the cause is said, and the run is
    // not refused on it.
    let config = project.home.join(".claude.json");
    let whole = fs::read_to_string(&config).unwrap();
    write(&config, "{\n  \"numStartups\": 3,\n  \"projects\": {\n");
    let unread = show(&["run", "--reset", "--max-iterations", "1"], &key);
    assert!(project.path("client-ran").exists(), "{unread:?}");
    fs::remove_file(project.path("client-ran")).unwrap();
    assert!(
        unread.stderr.contains("could not be read (not valid JSON")
            && unread
                .stderr
                .contains("an interactive run is not refused on them"),
        "{unread:?}"
    );
    write(&config, whole);
    // Once the client was answered, the interactive run starts.
    ralph_tests::interactive::write_first_run_config(&project.home, &project.root, key[0].1);
    show(&["run", "--reset", "--max-iterations", "1"], &key);
    assert!(project.path("client-ran").exists(), "{text}");
    let text = text.replace(&bins::bin_dir().display().to_string(), "[BIN]");
    stable().bind(|| insta::assert_snapshot!("run_refused_before_first_screens", text));
}

#[test]
fn install_sh_without_cargo_says_what_to_install_and_how() {
    // A PATH with what the script needs besides cargo, and no cargo: the
    // message names what is missing and how to get it.
    let project = TempProject::new("install-no-cargo");
    let bin = project.dir("bin-without-cargo");
    std::os::unix::fs::symlink("/usr/bin/dirname", bin.join("dirname")).unwrap();
    let script = bins::workspace_root().join("install.sh");
    let home = project.dir("home-without-rust");
    let mut text = String::new();
    let mut show = |home: &Path, what: &str| {
        let mut cmd = project.command(&script);
        cmd.env("PATH", &bin)
            .env("HOME", home)
            .env_remove("CARGO_HOME");
        let run =
            ralph_tests::project::run_with_timeout(cmd, None, std::time::Duration::from_secs(30));
        run.assert_code(1);
        text.push_str(&format!(
            "$ ./install.sh  # {what}, exit {}\n{}{}\n",
            run.code.unwrap_or(-1),
            run.stdout,
            run.stderr.replace(&home.display().to_string(), "[HOME]")
        ));
    };
    show(&home, "no Rust");
    // rustup ran, but this shell has not its PATH yet.
    let rustup_home = project.path("home-with-rustup");
    fs::create_dir_all(rustup_home.join(".cargo/bin")).unwrap();
    let cargo = rustup_home.join(".cargo/bin/cargo");
    write(&cargo, "#!/bin/sh\nexit 0\n");
    fs::set_permissions(&cargo, fs::Permissions::from_mode(0o755)).unwrap();
    show(&rustup_home, "cargo in ~/.cargo/bin, not on PATH");
    assert!(
        text.contains("https://rustup.rs") && text.contains("3.5 minutes"),
        "{text}"
    );
    stable().bind(|| insta::assert_snapshot!("install_sh_without_cargo", text));
}

#[test]
#[allow(clippy::too_many_lines)] // one project's Pythons, each command that proposes the check asked in turn
fn the_check_proposed_is_the_venv_s_python_when_only_it_has_pytest() {
    // pytest only in the project's `.venv` (not activated), the system's
    // python3 without it: every command that proposes the check proposes
    // one that runs, from the first.
    let project = TempProject::new("venv-check");
    project.write("pyproject.toml", "[tool.pytest.ini_options]\n");
    project.write("tests/test_a.py", "def test_a():\n    assert True\n");
    project.make_venv();
    let version = Command::new(project.path(".venv/bin/python"))
        .args([
            "-c",
            "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')",
        ])
        .output()
        .unwrap();
    let site = format!(
        ".venv/lib/{}/site-packages/pytest",
        String::from_utf8_lossy(&version.stdout).trim()
    );
    project.write(format!("{site}/__init__.py"), "");
    project.write(
        format!("{site}/__main__.py"),
        "print('1 passed in 0.01s')\n",
    );
    // The system's python3, as this test wants it: with or without pytest;
    // it notes each run (proposing a check runs no Python).
    let bin = project.dir("system-bin");
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let ran = project.path("python3-ran");
    let system_python = |has_pytest: bool| {
        write(
            bin.join("python3"),
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\ncase \"$*\" in *pytest*) {};; esac\nexec /usr/bin/python3 \"$@\"\n",
                ran.display(),
                if has_pytest {
                    "exit 0"
                } else {
                    "echo \"$0: No module named pytest\" >&2; exit 1"
                }
            ),
        );
        fs::set_permissions(bin.join("python3"), fs::Permissions::from_mode(0o755)).unwrap();
    };
    system_python(false);
    let mut text = String::new();
    let mut show = |args: &[&str], keep: &[&str], env: &[(&str, &str)]| {
        let run = Ctl::new(&project)
            .args(args)
            .env("PATH", &path)
            .env("RALPH_CLAUDE", "true")
            .envs(env.iter().copied())
            .run();
        let lines: Vec<&str> = run
            .stdout
            .lines()
            .chain(run.stderr.lines())
            .filter(|l| keep.iter().any(|k| l.contains(k)))
            .collect();
        text.push_str(&format!(
            "$ {}ralph-ctl {}  # exit {}\n{}\n\n",
            env.iter()
                .map(|(name, _)| format!("{name}=… "))
                .collect::<String>(),
            args.join(" "),
            run.code.unwrap_or(-1),
            lines.join("\n")
        ));
    };
    let dry_run = ["run", "--task", "Make the tests pass.", "--dry-run"];
    show(&["doctor", "--no-check"], &["verify:", "init --yes"], &[]);
    show(&dry_run, &["Completion check"], &[]);
    show(&["init", "--yes"], &["Completion check"], &[]);
    assert!(
        !ran.exists(),
        "proposing the check ran python3: {:?}",
        fs::read_to_string(&ran)
    );
    show(&["doctor"], &["check:"], &[]);
    // With pytest in the system's python3 too, the venv's Python stays the
    // check: the venv carries the project's dependencies.
    system_python(true);
    fs::remove_dir_all(project.path(".claude")).unwrap();
    show(&dry_run, &["Completion check"], &[]);
    // The venv activated ($VIRTUAL_ENV, or its bin first on PATH): python3
    // is the venv's.
    let venv_dir = project.path(".venv");
    show(
        &dry_run,
        &["Completion check"],
        &[("VIRTUAL_ENV", venv_dir.to_str().unwrap())],
    );
    let venv_first = format!("{}:{path}", venv_dir.join("bin").display());
    show(&dry_run, &["Completion check"], &[("PATH", &venv_first)]);
    let config = fs::read_to_string(project.path(".claude/ralph/config.json"));
    assert!(config.is_err(), "a dry run writes nothing");
    let (venv, active) = text.split_once("$ VIRTUAL_ENV=").unwrap_or((&text, ""));
    assert_eq!(
        venv.matches("`.venv/bin/python -m pytest` (found").count()
            + venv.matches("`.venv/bin/python -m pytest` (from").count(),
        4,
        "{text}"
    );
    assert!(
        venv.contains("`.venv/bin/python -m pytest` passes"),
        "{text}"
    );
    assert_eq!(
        active.matches("`python3 -m pytest` (from").count(),
        2,
        "{text}"
    );
    stable().bind(|| insta::assert_snapshot!("venv_check_proposed", text));
}

// ------------------------------------------------------------ ralph-ctl check

#[test]
fn check_without_a_loop_and_of_a_loop_whose_claim_would_fail() {
    // The stand-in runner's output never varies: the snapshot is all of it.
    let project = TempProject::with_counted_tests("check-out", "pass\nfail\npass\n");
    let mut text = String::new();
    let mut show = |project: &TempProject, args: &[&str]| {
        let run = project.ctl(args, &[]);
        text.push_str(&format!(
            "$ ralph-ctl {}  # exit {}\n{}{}\n",
            args.join(" "),
            run.code.unwrap_or(-1),
            run.stdout,
            run.stderr
        ));
    };
    show(&project, &["check"]);
    project.ctl_exits(&["start", "--max-iterations", "5"], 0);
    show(&project, &["check"]);
    project.write("tests.txt", "pass\npass\n");
    show(&project, &["check"]);
    stable().bind(|| insta::assert_snapshot!("check", text));
}

// ------------------------------------------------------- ralph-ctl run --queue

#[test]
fn queue_dry_run_says_the_task_goes_before_every_item() {
    let project = TempProject::new("queue-dry-task");
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] add a greeting\n  say hello in hello.txt\n",
    );
    project.commit_all("the plan");
    project.init();
    // What `run --task` left in PROMPT.md stays every queue item's task.
    project.write_prompt("# Task\n\nFix the parser.");
    let dry = project.ctl(
        &["run", "--queue", "plan:PLAN.md", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    dry.assert_code(0);
    let said: String = dry
        .stdout
        .lines()
        .filter(|l| !l.starts_with("environment for the client:") && !l.starts_with("command:"))
        .map(|l| format!("{l}\n"))
        .collect();
    stable().bind(|| insta::assert_snapshot!("queue_dry_run_with_a_task", said));
}

// ------------------------------------------------------------ ralph-ctl queue

#[test]
fn queue_lists_waiting_items_with_every_dependency_missing() {
    let project = TempProject::new("queue-waiting");
    project.write(
        "prd.json",
        r#"{"userStories": [
  {"id": "US-001", "title": "Add hello.txt", "priority": 1, "passes": false},
  {"id": "US-002", "title": "Add bye.txt", "priority": 2, "passes": false},
  {"id": "US-003", "title": "Add both.txt", "priority": 3, "passes": false,
   "dependencies": ["US-001", "US-002"]}
]}"#,
    );
    let shown = project.ctl_exits(&["queue", "prd:prd.json"], 0);
    let fakes = ralph_tests::trackers::FakeTrackers::new(&project.path("fakes"));
    fakes.ready(&json!([{
        "id": "bd-a1b2", "title": "Add export service", "description": "Export users as CSV.",
        "status": "open", "priority": 1, "issue_type": "task",
        "created_at": "2026-11-01T10:00:00Z", "updated_at": "2026-11-01T10:00:00Z"
    }]));
    let path = fakes.path_env();
    let beads = project.ctl(&["queue", "beads:"], &[("PATH", path.as_str())]);
    beads.assert_code(0);
    let said = format!("{}{}", shown.stdout, beads.stdout);
    stable().bind(|| insta::assert_snapshot!("queue_waiting_items", said));
}
