//! End-to-end: what a loop says it spent is what the real client spent.
//! The cost in the ending's notification is the client's own total, and
//! every model request the mock served is counted once, in session mode
//! and in fresh-context mode.

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::counted_requests;
use ralph_tests::scenario::{NOTIFY_CONFIG, Outcome, Scenario, notified, script};
use serde_json::Value;

/// A loop in `mode` (`--headless`, `--fresh`) of three iterations, each a
/// tool call and a message (two requests), with `--json`: the client's own
/// output on stdout, to compare ralph's accounting with. Checks that it
/// completed, that every request served was counted once, and that the
/// ending's notification says what the state says; gives the outcome, the
/// requests served, and the `total_cost_usd` of each result object the
/// client printed.
fn three_iterations(
    name: &str,
    client: ClientVersion,
    mode: &str,
) -> (Scenario, Outcome, usize, Vec<f64>) {
    let scenario = Scenario::new(name, client)
        .file(".claude/ralph/config.json", NOTIFY_CONFIG)
        .args(&[mode, "--json"])
        .env("RALPH_SANDBOX", "off");
    let append = |iteration| Reply::bash(format!("echo {iteration} >> work.txt"));
    let api = MockApi::start_in_order(script::work_then_report(3, append));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(3);
    let served = api.main_requests().len();
    let counted = counted_requests(&outcome.state);
    assert_eq!(
        counted, served as u64,
        "every request served is counted once: {outcome:?}"
    );
    let summary = notified(&scenario);
    assert_eq!(summary["status"], "complete", "{summary:#}");
    let cost = outcome.state["costUsd"].as_f64().unwrap_or_default();
    let told = summary["costUsd"].as_f64().unwrap_or_default();
    assert_same_dollars(told, cost, "the notification");
    let results = outcome
        .run
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok());
    let results = results.filter(|v| v["type"] == "result");
    let costs = results
        .filter_map(|v| v["total_cost_usd"].as_f64())
        .collect();
    (scenario, outcome, served, costs)
}

/// Panics unless ralph's dollars are the client's (which are not zero).
fn assert_same_dollars(ours: f64, theirs: f64, what: &str) {
    assert!(
        theirs > 0.0 && (ours - theirs).abs() < 1e-6,
        "{what}: ralph says ${ours}, the client ${theirs}"
    );
}

#[ralph_tests::on_both_clients(area_sample)]
fn a_session_loop_reports_what_the_client_spent(client: ClientVersion) {
    let (scenario, outcome, _, costs) = three_iterations("counts-session", client, "--headless");
    // One client process: its result is the session's total.
    assert_eq!(costs.len(), 1, "{outcome:?}");
    let cost = outcome.state["costUsd"].as_f64().unwrap();
    assert_same_dollars(cost, costs[0], "the state");
    // A loop under a dollar is shown to four places, not as $0.00.
    let shown = format!("${cost:.4}");
    let status = scenario.ctl_exits(&["status"], 0);
    let cost_line = |l: &&str| l.trim_start().starts_with("cost:") && l.ends_with(&shown);
    assert!(
        status.stdout.lines().any(|l| cost_line(&l)),
        "{shown} in:\n{}",
        status.stdout
    );
}

#[ralph_tests::on_both_clients]
fn a_fresh_loop_reports_what_the_client_spent(client: ClientVersion) {
    let (_, outcome, served, costs) = three_iterations("counts-fresh", client, "--fresh");
    assert_eq!(served, 6, "{outcome:?}");
    // --json: each process's own result event; ralph's total is their sum.
    assert_eq!(costs.len(), 3, "one result per process: {outcome:?}");
    let cost = outcome.state["costUsd"].as_f64().unwrap();
    assert_same_dollars(cost, costs.iter().sum(), "the state (all three processes)");
}
