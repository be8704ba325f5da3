//! End-to-end: what a loop says it spent is what the real client spent.
//! The cost in the ending's notification is the client's own total, and
//! every model request the mock served is counted once, in session mode
//! and in fresh-context mode.

use std::thread;
use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::{counted_requests, run_with_timeout, TempProject};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

/// Three iterations of a tool call and a message: two requests each.
fn three_iterations() -> MockApi {
    MockApi::start_in_order(|turn, _| {
        let iteration = turn / 2 + 1;
        if turn % 2 == 0 {
            Reply::bash(format!("echo {iteration} >> work.txt"))
        } else if iteration < 3 {
            Reply::text(format!("Step {iteration} is in work.txt."))
        } else {
            Reply::text(format!("All three steps are in work.txt.\n{SIGNAL}"))
        }
    })
}

fn with_notify(project: &TempProject) {
    project.write(
        ".claude/ralph/config.json",
        r#"{"notify": "cat > notified.json"}"#,
    );
}

/// The summary the notify command read (it is started, not waited for).
fn notified(project: &TempProject) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(project.path("notified.json")).unwrap_or_default();
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            return value;
        }
        assert!(Instant::now() < deadline, "no notification: {text:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// The launcher in `mode` (`--headless`, `--fresh`) with `--json`: the
/// client's own output on stdout, to compare ralph's accounting with.
fn run_json(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    mode: &str,
) -> ralph_tests::project::Run {
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args([
        mode,
        "--json",
        "--",
        "--permission-mode",
        "bypassPermissions",
    ])
    .envs(project.client_env(client, api))
    .env("RALPH_SANDBOX", "off");
    run_with_timeout(cmd, None, LOOP_TIMEOUT)
}

/// The `total_cost_usd` of each result object the client printed.
fn result_costs(stdout: &str) -> Vec<f64> {
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(|v| v["type"] == "result")
        .filter_map(|v| v["total_cost_usd"].as_f64())
        .collect()
}

fn assert_same_dollars(ours: f64, theirs: f64, what: &str) {
    assert!(
        theirs > 0.0 && (ours - theirs).abs() < 1e-6,
        "{what}: ralph says ${ours}, the client ${theirs}"
    );
}

#[ralph_tests::on_both_clients]
fn a_session_loop_reports_what_the_client_spent(client: ClientVersion) {
    let project = TempProject::new("counts-session");
    project.init();
    with_notify(&project);
    let api = three_iterations();
    // --json: the client's own result object on stdout, to compare with.
    let run = run_json(&project, client, &api, "--headless");
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");
    // One client process: its result is the session's total.
    let costs = result_costs(&run.stdout);
    assert_eq!(costs.len(), 1, "{}", run.stdout);
    let spent = costs[0];
    assert_same_dollars(state["costUsd"].as_f64().unwrap(), spent, "the state");
    let summary = notified(&project);
    assert_eq!(summary["status"], "complete", "{summary:#}");
    assert_same_dollars(
        summary["costUsd"].as_f64().unwrap(),
        spent,
        "the notification",
    );
    assert_eq!(
        counted_requests(&state),
        api.main_requests().len() as u64,
        "every request served is counted once: {state:#}"
    );
    // A loop under a dollar is shown to four places, not as $0.00.
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0);
    let shown = format!("${:.4}", state["costUsd"].as_f64().unwrap());
    assert!(
        status
            .stdout
            .lines()
            .any(|l| l.trim_start().starts_with("cost:") && l.ends_with(&shown)),
        "{shown} in:\n{}",
        status.stdout
    );
}

#[ralph_tests::on_both_clients]
fn a_fresh_loop_reports_what_the_client_spent(client: ClientVersion) {
    let project = TempProject::new("counts-fresh");
    project.init();
    with_notify(&project);
    let api = three_iterations();
    let run = run_json(&project, client, &api, "--fresh");
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 3, "{state:#}");
    assert_eq!(api.main_requests().len(), 6, "{state:#}");
    let cost = state["costUsd"].as_f64().unwrap();
    // --json: each process's own result event; ralph's total is their sum.
    let costs = result_costs(&run.stdout);
    assert_eq!(costs.len(), 3, "one result per process: {}", run.stdout);
    assert_same_dollars(cost, costs.iter().sum(), "the state (all three processes)");
    let summary = notified(&project);
    assert_eq!(summary["status"], "complete", "{summary:#}");
    assert_same_dollars(
        summary["costUsd"].as_f64().unwrap(),
        cost,
        "the notification (all three processes)",
    );
    assert_eq!(
        counted_requests(&state),
        api.main_requests().len() as u64,
        "every request served is counted once: {state:#}"
    );
}
