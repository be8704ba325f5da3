//! End-to-end: pacing to the plan's usage windows (`pauseAtUtilization`)
//! and the agent's question to the person (`RALPH_ASK`, `ralph-ctl
//! answer`), on the real clients through the launcher against the mock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ralph_tests::bins;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, user_texts};
use ralph_tests::project::wait_with_timeout;
use ralph_tests::scenario::{NOTIFY_CONFIG, Scenario, exits_with, notified, wait_until};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use std::os::unix::process::CommandExt;
use std::process::Stdio;

/// `secs` as the state and the log write times.
fn ralph_time(secs: u64) -> String {
    let run = std::process::Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&run.stdout).trim().to_string()
}

fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A time (seconds since the epoch, 0 until set) the test and the mock's
/// script share: two handles on it.
fn shared_epoch() -> (Arc<AtomicU64>, Arc<AtomicU64>) {
    let time = Arc::new(AtomicU64::new(0));
    (Arc::clone(&time), time)
}

/// What the agent is asked, and what the person answers.
const QUESTION: &str = "Which port should the server listen on?";
const ANSWER: &str = "Port 8080, as in the deploy notes.";

#[test]
fn a_window_at_pause_at_utilization_pauses_the_loop_until_it_resets() {
    // A subscription's 2.1.330 reports the five-hour window after each
    // response; at 85 % of it, with pauseAtUtilization 0.8, the loop pauses
    // after that iteration and goes on no earlier than the window's reset.
    let client = ClientVersion::V2_1_330;
    let (reset, at) = shared_epoch();
    let api = MockApi::start_in_order(move |turn, _| {
        let now = epoch_now();
        match turn {
            0 => {
                at.store(now + 4, Ordering::SeqCst);
                Reply::text("Step one done.").with_utilization("5h", 0.85, now + 4)
            }
            _ => Reply::text(format!("All done.\n{SIGNAL}")).with_utilization(
                "5h",
                0.1,
                now + 18_000,
            ),
        }
    });
    let scenario = Scenario::new("pacing", client)
        .fresh(&[])
        .subscription()
        .env("RALPH_PAUSE_AT_UTILIZATION", "0.8");
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    let requests = api.main_requests();
    assert_eq!(requests.len(), 2, "{outcome:?}");
    let reset = reset.load(Ordering::SeqCst);
    let second = requests[1].at.duration_since(UNIX_EPOCH).unwrap().as_secs();
    assert!(
        second >= reset,
        "iteration 2 started at {second}, before the reset at {reset}"
    );
    let pause = scenario.log_line("pause");
    assert!(
        pause.contains("paused: the five_hour usage window is at 85%")
            && pause.contains(&format!("\"resumeAt\":\"{}\"", ralph_time(reset))),
        "{pause}"
    );
    outcome
        .run
        .assert_stderr_has(&["the five_hour usage window is at 85% (pauseAtUtilization 80%)"]);
    // The last utilization seen per window, for status and the report.
    let window = &outcome.state["usageWindows"]["five_hour"];
    assert_eq!(window["utilization"], 0.1, "{}", outcome.state);
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&["usage:", "five_hour window 10% used"]);
}

#[test]
fn the_2_0_77_client_reports_no_usage_window_so_the_loop_does_not_pause() {
    // 2.0.77 reads the headers for its own warning but writes no
    // `rate_limit_event`: pacing needs 2.1 (the README says so).
    let client = ClientVersion::V2_0_77;
    let api = MockApi::start_in_order(move |turn, _| {
        let now = epoch_now();
        match turn {
            0 => Reply::text("Step one done.").with_utilization("5h", 0.95, now + 3_600),
            _ => Reply::text(format!("All done.\n{SIGNAL}")),
        }
    });
    let outcome = Scenario::new("pacing-2-0", client)
        .fresh(&[])
        .subscription()
        .env("RALPH_PAUSE_AT_UTILIZATION", "0.8")
        .run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    assert!(
        outcome.state.get("usageWindows").is_none(),
        "{}",
        outcome.state
    );
}

/// Iteration 1: the agent tries to answer for the person with ralph-ctl's
/// full path (past the deny rule's name), then asks; later iterations
/// complete.
fn asking_script() -> impl Fn(usize, &serde_json::Value) -> Reply + Send + Sync + 'static {
    let ctl = bins::ctl().display().to_string();
    move |turn, _| match turn {
        0 => Reply::bash(format!("'{ctl}' answer 'Use port 1.'; echo \"exit=$?\"")),
        1 => Reply::text(format!(
            "The deploy notes and the config disagree.\nRALPH_ASK: {QUESTION}"
        )),
        _ => Reply::text(format!("The server listens on 8080.\n{SIGNAL}")),
    }
}

/// Starts the scenario's launcher (output piped, a process group of its
/// own) and waits until its loop waits for an answer; panics with the
/// launcher's stderr when it never does.
fn start_until_waiting(scenario: &Scenario, api: &MockApi) -> std::process::Child {
    let mut cmd = scenario.command(api);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    let waiting = || scenario.state().is_some_and(|s| s["status"] == "waiting");
    if !wait_until(LOOP_TIMEOUT, waiting) {
        let (_, _, err) = wait_with_timeout(&mut launcher, Duration::from_secs(1));
        panic!("the loop never waited: {err}");
    }
    launcher
}

/// The request after the question carries the question and the person's
/// answer in front of its text, and not the agent's own try.
fn assert_answer_carried(api: &MockApi) {
    let requests = api.main_requests();
    assert_eq!(requests.len(), 3, "two requests, then the answered one");
    let tried = user_texts(&requests[1].body).join("\n");
    assert!(
        !tried.contains("exit=0"),
        "the agent's own answer went through: {tried}"
    );
    let text = user_texts(&requests[2].body).join("\n");
    let front = text
        .find("The person's answer: Port 8080")
        .unwrap_or_else(|| panic!("no answer in: {text}"));
    assert!(text.contains(QUESTION), "{text}");
    assert!(
        front < text.find("[Ralph loop: iteration 2").unwrap_or(usize::MAX),
        "the answer comes first: {text}"
    );
    // (A resumed conversation holds the agent's refused try, not as an answer.)
    assert!(!text.contains("answer: Use port 1"), "{text}");
}

#[ralph_tests::on_both_clients(area_sample)]
fn a_question_waits_for_the_person_s_answer_and_the_agent_cannot_give_it(client: ClientVersion) {
    let api = MockApi::start_in_order(asking_script());
    let scenario = Scenario::configured("ask", client, NOTIFY_CONFIG).fresh(&[]);
    let mut launcher = start_until_waiting(&scenario, &api);
    // The person is told the question.
    let told = notified(&scenario);
    assert_eq!(
        (&told["event"], &told["question"]),
        (&serde_json::json!("asked"), &serde_json::json!(QUESTION)),
        "{told}"
    );
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&["waiting", QUESTION, "ralph-ctl answer TEXT"]);
    // Still waiting: nobody answered it, the agent least of all.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(api.main_requests().len(), 2);
    let answered = scenario.ctl(&["answer", ANSWER], &[]);
    answered.assert_stdout_has(&["answered \"Which port"]);
    exits_with(&mut launcher, 0);
    assert_answer_carried(&api);
    let log = scenario.audit_log();
    assert!(log.contains("\"event\":\"answer\""), "{log}");
}

#[test]
fn a_run_that_stops_waiting_exits_24_and_a_resume_carries_the_answer() {
    let client = ClientVersion::V2_1_330;
    let api = MockApi::start_in_order(asking_script());
    let scenario = Scenario::new("ask-resume", client).fresh(&["--wait-for-answer", "1"]);
    let first = scenario.run(&api);
    first.ended(24, "waiting");
    first.run.assert_stderr_has(&[
        QUESTION,
        "ralph-ctl answer TEXT",
        "loop waiting at iteration 2",
    ]);
    // Inside a loop's client the answer is refused, whoever runs it.
    let inside = scenario.ctl(&["answer", "Use port 1."], &[("RALPH_DRIVEN", "1")]);
    assert_eq!(inside.code, Some(3), "{inside:?}");
    inside.assert_stderr_has(&["RALPH_DRIVEN is set"]);
    assert_eq!(scenario.status_json()["status"], "waiting");
    scenario
        .ctl(&["answer", ANSWER], &[])
        .assert_stdout_has(&["answered"]);
    let resumed = scenario.run_with(&api, &["--fresh", "--resume"]);
    resumed.ended(0, "complete");
    assert_answer_carried(&api);
    // An answer with no question waiting counts for nothing.
    let late = scenario.ctl(&["answer", "again"], &[]);
    assert_eq!(late.code, Some(3), "{late:?}");
    late.assert_stderr_has(&["no question waits for an answer"]);
}

#[ralph_tests::on_both_clients]
fn a_session_loop_s_question_lets_the_stop_through_and_the_answer_resumes_it(
    client: ClientVersion,
) {
    // Headless in one session: the Stop hook sees the question, lets the
    // session stop with it shown, and the driver waits; the answer goes on
    // in the same session, first in the text it is resumed with.
    let api = MockApi::start_in_order(asking_script());
    let scenario = Scenario::new("ask-session", client);
    let mut launcher = start_until_waiting(&scenario, &api);
    let state = scenario.state().unwrap();
    assert_eq!(state["question"]["text"], QUESTION, "{state}");
    scenario
        .ctl(&["answer", ANSWER], &[])
        .assert_stdout_has(&["answered"]);
    exits_with(&mut launcher, 0);
    assert_answer_carried(&api);
    let resumed = &api.main_requests()[2];
    assert!(
        ralph_tests::mock_api::assistant_turns(&resumed.body) >= 2,
        "the same session, taken up"
    );
}

#[test]
fn a_session_loop_pauses_at_its_next_stop_and_resumes_after_the_reset() {
    // Headless in one session: the driver records each window the client
    // reports as it streams, and the Stop hook pauses the loop at its next
    // stop; the supervisor takes the same session up after the reset.
    let client = ClientVersion::V2_1_330;
    // The window resets 10 s after the first request, however long the
    // client took to start on a loaded machine.
    let (reset_at, first) = shared_epoch();
    let api = MockApi::start_in_order(move |_, _| {
        let _ = first.compare_exchange(0, epoch_now() + 10, Ordering::SeqCst, Ordering::SeqCst);
        let reset = first.load(Ordering::SeqCst);
        if epoch_now() < reset {
            Reply::text("Working on it.").with_utilization("5h", 0.85, reset)
        } else {
            Reply::text(format!("All done.\n{SIGNAL}")).with_utilization("5h", 0.05, reset + 18_000)
        }
    });
    let scenario = Scenario::new("pacing-session", client)
        .subscription()
        .env("RALPH_PAUSE_AT_UTILIZATION", "0.8");
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let pause = scenario.log_line("pause");
    assert!(
        pause.contains("paused: the five_hour usage window is at 85%"),
        "{pause}"
    );
    // Paused at the first stop, or (the client still streaming when its
    // stop was judged) at the next: never more requests before the reset.
    let requests = api.main_requests();
    let reset = reset_at.load(Ordering::SeqCst);
    let before: Vec<u64> = requests
        .iter()
        .map(|r| r.at.duration_since(UNIX_EPOCH).unwrap().as_secs())
        .filter(|&at| at < reset)
        .collect();
    assert!(
        (1..=2).contains(&before.len()),
        "{} requests before the reset: {outcome:?}",
        before.len()
    );
    let waited = scenario.log_line("wait");
    assert!(waited.contains("utilization until"), "{waited}");
    let after = &requests[before.len()];
    assert!(
        ralph_tests::mock_api::assistant_turns(&after.body) >= 1,
        "the same session, taken up"
    );
}
