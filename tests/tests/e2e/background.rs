//! End-to-end: the agent's background tasks end with its loop. Both
//! clients run a Bash call with `run_in_background: true` in a process of
//! its own; in `-p` mode 2.1.330 then waits for it after its turn, and asks
//! the model once more when it ends (docs/protocol-notes.md). Once the
//! loop is done with the client (the hook let the session stop, or a
//! fresh iteration's result is written), the launcher ends the client and
//! everything it started, and a background task that holds the loop's
//! lock cannot make a stop pass unrecorded.

use std::time::{Duration, Instant};

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::processes_matching;
use ralph_tests::scenario::{Outcome, Scenario, wait_until};
use serde_json::{Value, json};

/// A Bash call the client runs in the background.
fn background(command: &str) -> Reply {
    Reply::ToolUse {
        name: "Bash".to_string(),
        input: json!({
            "command": command,
            "description": "Start it in the background",
            "run_in_background": true,
        }),
    }
}

/// A `sleep` no other test starts: `base` plus one per client.
fn sleep_of(base: u32, client: ClientVersion) -> String {
    let n = base
        + match client {
            ClientVersion::V2_1_330 => 0,
            ClientVersion::V2_0_77 => 1,
        };
    format!("sleep {n}")
}

/// The first turn starts `command` in the background, every later one
/// claims completion.
fn start_then_claim(
    command: &str,
) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static + use<> {
    let command = command.to_string();
    move |turn, _| match turn {
        0 => background(&command),
        _ => Reply::text(format!("Started it; all done.\n{SIGNAL}")),
    }
}

/// Whether a process holds a flock(2) lock on `path` (read from
/// /proc/locks, by the file's inode: taking the lock to find out would
/// hold it for a moment).
fn flock_held_on(path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(inode) = std::fs::metadata(path).map(|m| m.ino().to_string()) else {
        return false;
    };
    std::fs::read_to_string("/proc/locks").is_ok_and(|locks| {
        locks.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(1) == Some(&"FLOCK")
                && fields
                    .get(5)
                    .and_then(|id| id.rsplit(':').next())
                    .is_some_and(|ino| ino == inode)
        })
    })
}

/// Runs `scenario` against `api`: the outcome and how long the run took.
fn timed(scenario: &Scenario, api: &MockApi) -> (Outcome, Duration) {
    let started = Instant::now();
    let outcome = scenario.run(api);
    (outcome, started.elapsed())
}

/// Panics unless no process runs `needle` within a few seconds.
fn gone(needle: &str) {
    let left = wait_until(Duration::from_secs(5), || {
        processes_matching(needle).is_empty()
    });
    let found = processes_matching(needle);
    for (pid, _) in &found {
        ralph_tests::project::signal_process(*pid, libc::SIGKILL);
    }
    assert!(left, "left running after the loop: {found:?}");
}

/// The run came back well before the background task would have ended
/// (300 s and more) and no request followed the loop's last one.
fn returned_at_once(elapsed: Duration, api: &MockApi, main_requests: usize, outcome: &Outcome) {
    assert!(
        elapsed < Duration::from_secs(90),
        "the run took {elapsed:?}; {outcome:?}"
    );
    assert_eq!(
        api.main_requests().len(),
        main_requests,
        "a request after the loop ended; {outcome:?}"
    );
}

#[ralph_tests::on_both_clients(area_sample)]
fn a_background_task_ends_with_the_loop(client: ClientVersion) {
    let sleep = sleep_of(301, client);
    let api = MockApi::start(start_then_claim(&sleep));
    let scenario = Scenario::new("background", client).prompt("Improve the project.\n");
    let (outcome, elapsed) = timed(&scenario, &api);
    outcome.ended(0, "complete").at_iteration(1);
    let unseen = usize::try_from(outcome.claims_rejected_for_unseen_calls()).unwrap();
    returned_at_once(elapsed, &api, 2 + unseen, &outcome);
    gone(&sleep);
}

#[ralph_tests::on_both_clients]
fn a_fresh_iteration_s_background_task_ends_with_its_client(client: ClientVersion) {
    let sleep = sleep_of(303, client);
    let command = sleep.clone();
    // Across the processes: the first starts the task, the second claims.
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => background(&command),
        1 => Reply::text("Started it."),
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let scenario = Scenario::new("background-fresh", client)
        .prompt("Improve the project.\n")
        .fresh(&[]);
    let (outcome, elapsed) = timed(&scenario, &api);
    outcome.ended(0, "complete").at_iteration(2);
    returned_at_once(elapsed, &api, 3, &outcome);
    gone(&sleep);
}

#[ralph_tests::on_both_clients]
fn a_background_task_holding_the_loop_s_lock_lets_no_stop_through_unrecorded(
    client: ClientVersion,
) {
    let sleep = sleep_of(305, client);
    // flock(1) on the folder ralph locks, held by the background task.
    let holder = format!("flock .claude/context/runtime {sleep}");
    let scenario = Scenario::new("background-lock", client).prompt("Improve the project.\n");
    // The claim comes once the background task holds the lock (it starts
    // a moment after the client says it runs), so that its stop meets it.
    let runtime = scenario.runtime_dir();
    let script = start_then_claim(&holder);
    let api = MockApi::start(move |turn, body| {
        if turn > 0 {
            wait_until(Duration::from_secs(10), || flock_held_on(&runtime));
        }
        script(turn, body)
    });
    let (outcome, elapsed) = timed(&scenario, &api);
    // The claim's stop could not be recorded: the loop is not `complete`
    // as if it had been, it is recorded as interrupted, saying why.
    outcome.ended(12, "interrupted");
    let because = outcome.state["endedBecause"].as_str().unwrap_or_default();
    assert!(
        because.contains("its last stop was not recorded"),
        "{outcome:?}"
    );
    returned_at_once(elapsed, &api, 2, &outcome);
    gone(&sleep);
    // Nothing holds the lock any more: the loop can be taken up again.
    scenario.ctl_exits(&["cancel"], 0);
}
