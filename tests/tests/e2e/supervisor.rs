//! End-to-end: the supervisor of headless loops (`ralph-ctl run --headless`,
//! through the launcher) with the real Claude Code clients, against the
//! Messages API mock answering API errors (529, 429 with a reset time,
//! 401), large token usage, and a client killed mid-loop.
//!
//! Each scenario checks what a person sees: the launcher's exit code and its
//! last stderr line, the state (`ralph-ctl status --json`), the audit log
//! (`.claude/context/runtime/ralph-log.jsonl`) and what reached the API.
//! The clients retry once (`CLAUDE_CODE_MAX_RETRIES=1`) and the supervisor
//! waits a second before its first resume (`RALPH_RESUME_BACKOFF_SECONDS=1`),
//! so every wait lasts seconds.
//!
//! Compiled only with the `e2e` feature. Run them with
//! `tests/run.sh -p ralph-tests --test e2e supervisor::`.

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{
    MockApi, MockOptions, RecordedRequest, Reply, Usage, stop_hook_feedback, user_texts,
};
use ralph_tests::project::{
    Run, TempProject, child_of, counted_requests, last_cost_state, signal_process,
    wait_with_timeout,
};
use ralph_tests::scenario::{Flag, Scenario, wait_until};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::{Value, json};

#[test]
fn a_reset_time_a_thousand_years_ahead_is_not_waited_for() {
    an_absurd_reset_time_is_not_believed(ClientVersion::V2_1_330);
}

#[test]
fn the_launcher_s_own_caps_hold() {
    caps_given_to_the_launcher_hold(ClientVersion::V2_1_330);
}

#[test]
fn a_launcher_killed_outright_takes_its_client_with_it() {
    killed_launcher_leaves_no_client(ClientVersion::V2_1_330, false);
}

#[test]
fn a_fresh_launcher_killed_outright_takes_its_client_with_it() {
    killed_launcher_leaves_no_client(ClientVersion::V2_1_330, true);
}

#[test]
fn a_loop_waiting_out_an_api_error_is_its_launchers() {
    a_waiting_loop_is_not_taken_over(ClientVersion::V2_1_330);
}

/// Every wait short: one retry by the client, a one-second first backoff.
const QUICK: [(&str, &str); 2] = [
    ("CLAUDE_CODE_MAX_RETRIES", "1"),
    ("RALPH_RESUME_BACKOFF_SECONDS", "1"),
];

/// Main requests one failing turn costs a client with
/// `CLAUDE_CODE_MAX_RETRIES=1` (`mock_api`'s module doc): the request and its
/// retry; 2.0.77 also resends the failed streaming request at once without
/// streaming.
fn requests_per_failed_turn(client: ClientVersion) -> usize {
    match client {
        ClientVersion::V2_1_330 => 2,
        ClientVersion::V2_0_77 => 3,
    }
}

/// The loop iteration a request works on: the last `[Ralph loop: iteration
/// N of M]` header in its user messages (the first prompt, a re-injection,
/// or the text a resume sends).
fn iteration_of(body: &Value) -> Option<u32> {
    const HEADER: &str = "[Ralph loop: iteration ";
    user_texts(body).iter().rev().find_map(|text| {
        let at = text.rfind(HEADER)? + HEADER.len();
        text[at..].split(' ').next()?.parse().ok()
    })
}

/// The iteration headers of every user message of a request, in order.
fn iteration_headers(body: &Value) -> Vec<u32> {
    const HEADER: &str = "[Ralph loop: iteration ";
    user_texts(body)
        .iter()
        .flat_map(|text| {
            text.match_indices(HEADER)
                .filter_map(|(at, _)| {
                    text[at + HEADER.len()..]
                        .split(' ')
                        .next()?
                        .parse::<u32>()
                        .ok()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The main-conversation requests in the order they arrived (the mock
/// lists them as answered: a held answer comes later).
fn main_requests(api: &MockApi) -> Vec<RecordedRequest> {
    let mut main = api.main_requests();
    main.sort_by_key(|r| r.at);
    main
}

/// True when every request names `session` in its `metadata.user_id`
/// (2.1.330 sends a JSON string with `session_id`; 2.0.77
/// `user_<hash>_account__session_<id>`).
fn all_in_session(requests: &[RecordedRequest], session: &str) -> bool {
    requests.iter().all(|r| {
        r.body["metadata"]["user_id"]
            .as_str()
            .is_some_and(|id| id.contains(session))
    })
}

/// The texts of a request's first message (the conversation's start; the
/// clients move `cache_control` marks from request to request).
fn first_message(body: &Value) -> Vec<String> {
    let first = json!({ "messages": [body["messages"][0].clone()] });
    user_texts(&first)
}

/// The audit log's entries, oldest first.
fn log_entries(project: &TempProject) -> Vec<Value> {
    let path = project.log_path();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("log line {l:?}: {e}")))
        .collect()
}

/// The events of the log entries, in order.
fn events(entries: &[Value]) -> Vec<&str> {
    entries
        .iter()
        .map(|e| e["event"].as_str().unwrap_or("?"))
        .collect()
}

/// Seconds since the epoch, now.
fn epoch_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// An RFC 3339 time of the state, in seconds since the epoch.
fn epoch_of(rfc3339: &str) -> u64 {
    // YYYY-MM-DDTHH:MM:SS[.fff]Z, in UTC.
    let field = |range: std::ops::Range<usize>| -> i64 {
        rfc3339
            .get(range)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("not an RFC 3339 time: {rfc3339}"))
    };
    let (y, m, d) = (field(0..4), field(5..7), field(8..10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + field(11..13) * 3600 + field(14..16) * 60 + field(17..19);
    u64::try_from(secs).unwrap()
}

/// A summary of the requests for assertion messages.
fn describe(requests: &[RecordedRequest]) -> String {
    let start = requests.first().map_or(UNIX_EPOCH, |r| r.at);
    let since_epoch = start.duration_since(UNIX_EPOCH).unwrap_or_default();
    let head = format!(
        "(+0 = {:.2} s since the epoch)\n",
        since_epoch.as_secs_f64()
    );
    head + &requests
        .iter()
        .map(|r| {
            format!(
                "+{:.2}s {} {} iteration {:?} stream {} -> {}",
                r.at.duration_since(start).unwrap_or_default().as_secs_f64(),
                if r.is_main { "main" } else { "side" },
                r.body["model"],
                iteration_of(&r.body),
                r.body["stream"],
                r.status
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Everything a failed assertion should show.
fn evidence(project: &TempProject, api: &MockApi, run: &Run) -> String {
    let log = std::fs::read_to_string(project.log_path()).unwrap_or_default();
    format!(
        "exit {:?}\nstderr:\n{}\nstate:\n{:#}\nlog:\n{log}\nrequests:\n{}",
        run.code,
        run.stderr,
        project.status_json(),
        describe(&{
            let mut all = api.requests();
            all.sort_by_key(|r| r.at);
            all
        })
    )
}

/// A headless scenario named `name` whose clients retry once and whose
/// supervisor waits a second before its first resume.
fn quick(name: &str, client: ClientVersion) -> Scenario {
    QUICK
        .iter()
        .fold(Scenario::new(name, client), |s, (k, v)| s.env(k, v))
}

/// Answers iteration 1 with "Finished step 1.", iteration 2 with
/// `second()`, later ones with the signal.
fn three_steps(
    second: impl Fn() -> Reply + Send + Sync + 'static,
) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    move |_, body| match iteration_of(body) {
        Some(1) => Reply::text("Finished step 1."),
        Some(2) => second(),
        _ => Reply::text(format!("All steps done.\n{SIGNAL}")),
    }
}

/// A mock of [`three_steps`] whose iteration 2 answers 429 (retry after
/// 1 s) until the limit's reset, `ahead` seconds after the first of its
/// requests; the reset time, once that request came.
fn limited_in_iteration_2(ahead: u64) -> (Arc<Mutex<Option<u64>>>, MockApi) {
    let reset_at: Arc<Mutex<Option<u64>>> = Arc::new(Mutex::new(None));
    let reset_of = Arc::clone(&reset_at);
    let api = MockApi::start(three_steps(move || {
        let reset = *reset_of.lock().unwrap().get_or_insert(epoch_now() + ahead);
        if SystemTime::now() < UNIX_EPOCH + Duration::from_secs(reset) {
            rate_limited(reset, 1)
        } else {
            Reply::text("Finished step 2.")
        }
    }));
    (reset_at, api)
}

/// Every turn says there is more to do, each request `usage` tokens.
fn expensive(usage: Usage) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    move |turn, _| Reply::text(format!("Step {} done; more to do.", turn + 1)).with_usage(usage)
}

/// 100,000 input and 10 output tokens.
const BIG_CALL: Usage = Usage {
    input_tokens: 100_000,
    output_tokens: 10,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
};

#[ralph_tests::on_both_clients(
    differs = "2.1.330 drops the hook's context on resume, 2.0.77 keeps a block"
)]
fn a_stretch_of_529s_is_waited_out_in_the_same_session(client: ClientVersion) {
    const STRETCH: Duration = Duration::from_secs(3);
    let scenario = quick("overloaded", client);
    let first_529: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    // Iteration 1 works; iteration 2's requests answer 529 until 3 s have
    // passed since the first of them, then the model answers again; iteration
    // 3 completes.
    let api = MockApi::start(three_steps(move || {
        let mut first = first_529.lock().unwrap();
        if first.get_or_insert_with(Instant::now).elapsed() < STRETCH {
            Reply::overloaded()
        } else {
            Reply::text("Finished step 2.")
        }
    }));
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete").at_iteration(3);
    outcome.closing_has(&["loop complete at iteration 3 of 25"]);
    let state = &outcome.state;
    assert!(state["pausedBecause"].is_null(), "{evidence}");
    let session = state["sessionId"].as_str().unwrap().to_string();

    // The log: started, paused on the 529s, waited, resumed, ended; one
    // session throughout.
    let log = log_entries(&scenario);
    let kinds = events(&log);
    assert_eq!(kinds.first(), Some(&"start"), "{evidence}");
    assert_eq!(kinds.last(), Some(&"end"), "{evidence}");
    assert_eq!(log.last().unwrap()["status"], "complete", "{evidence}");
    let one_session = log.iter().all(|e| e["sessionId"] == session.as_str());
    assert!(one_session, "{evidence}");
    let pauses: Vec<&Value> = log.iter().filter(|e| e["event"] == "pause").collect();
    let waits = kinds.iter().filter(|k| **k == "wait").count();
    let resumes = kinds.iter().filter(|k| **k == "resume").count();
    assert!(!pauses.is_empty(), "{evidence}");
    assert_eq!(waits, pauses.len(), "a wait after each pause: {evidence}");
    assert_eq!(resumes, waits, "a resume after each wait: {evidence}");
    assert!(pauses.iter().all(|p| p["iteration"] == 2), "{evidence}");
    let first = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
    let in_order = first("pause") < first("wait") && first("wait") < first("resume");
    assert!(in_order, "{evidence}");

    // The history: iteration 1, iteration 2's API errors (let through, not
    // judged), iteration 2 once it worked, iteration 3.
    let history = outcome.history();
    let worked: Vec<(u64, &str)> = outcome
        .decisions()
        .into_iter()
        .zip(history)
        .filter(|(_, r)| r["error"].is_null())
        .map(|(d, _)| d)
        .collect();
    assert_eq!(
        worked,
        [(1, "block"), (2, "block"), (3, "allow")],
        "{evidence}"
    );
    // The API error itself is a record of iteration 2 when the hook saw it
    // (2.0.77 runs the Stop hook on it; 2.1.330 its StopFailure hook, which
    // it stops (SIGTERM) tens of milliseconds after starting it as it exits,
    // so on a loaded machine the driver records the pause from the client's
    // result instead, without a record).
    let failed: Vec<&Value> = history.iter().filter(|r| r["error"].is_string()).collect();
    assert!(failed.len() <= pauses.len(), "{evidence}");
    let second_let_through = |r: &&Value| r["iteration"] == 2 && r["decision"] == "allow";
    assert!(failed.iter().all(second_let_through), "{evidence}");

    // The API saw one conversation: every 529 was iteration 2's, each
    // iteration was answered once, and the last request still carries the
    // first prompt and the first answer.
    let main = main_requests(&api);
    let statuses = |status: u16| main.iter().filter(move |r| r.status == status);
    let refused_second = statuses(529).all(|r| iteration_of(&r.body) == Some(2));
    assert!(refused_second, "{evidence}");
    let answered: Vec<Option<u32>> = statuses(200).map(|r| iteration_of(&r.body)).collect();
    assert_eq!(answered, [Some(1), Some(2), Some(3)], "{evidence}");
    assert!(all_in_session(&main, &session), "{evidence}");
    let last = &main.last().unwrap().body;
    assert_eq!(
        first_message(last),
        first_message(&main[0].body),
        "{evidence}"
    );
    let texts = serde_json::to_string(&last["messages"]).unwrap();
    assert!(texts.contains("Finished step 1."), "{evidence}");
    assert!(texts.contains("Finished step 2."), "{evidence}");
    // Iteration 2's text came from the hook and once more with each resume;
    // iteration 3's once. 2.1.330 got the hook's text as additionalContext,
    // which it does not carry into a resumed conversation (a block's
    // feedback message it does): there only the resumes' copies remain.
    let mut headers = iteration_headers(last);
    let twos = headers.iter().filter(|&&n| n == 2).count();
    let (from_hook, fed_back) = match client {
        ClientVersion::V2_1_330 => (0, 1),
        ClientVersion::V2_0_77 => (1, 2),
    };
    assert_eq!(twos, from_hook + resumes, "{headers:?}\n{evidence}");
    headers.dedup();
    assert_eq!(headers, [1, 2, 3], "{evidence}");
    assert_eq!(stop_hook_feedback(last).len(), fed_back, "{evidence}");
}

/// A 429 of a subscription's limit that resets at `reset` (Unix seconds),
/// telling the client to retry after `retry_after` seconds.
fn rate_limited(reset: u64, retry_after: u64) -> Reply {
    let mut reply = Reply::rate_limited(reset);
    if let Reply::ApiError { headers, .. } = &mut reply {
        for (name, value) in headers.iter_mut() {
            if name == "retry-after" {
                *value = retry_after.to_string();
            }
        }
    }
    reply
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330 records the reset time, 2.0.77 none (the backoff)"
)]
fn a_rate_limit_is_resumed_only_after_its_reset_time(client: ClientVersion) {
    const AHEAD: u64 = 4;
    // 2.1.330 writes the reset time into the transcript (the `api_error`
    // line of its retry), and the supervisor waits for it. 2.0.77 writes no
    // such line, so the supervisor knows no reset time and waits its
    // backoff: AHEAD seconds, counted from the client's exit, which comes
    // after its retry 1 s after the first 429, so past the reset.
    let backoff = match client {
        ClientVersion::V2_1_330 => "1".to_string(),
        ClientVersion::V2_0_77 => AHEAD.to_string(),
    };
    let scenario = quick("rate-limit", client)
        .env("RALPH_RESUME_BACKOFF_SECONDS", &backoff)
        .env("RALPH_NOTIFY", "cat >> notified.jsonl");
    // Iteration 2's requests answer 429 until the limit's reset, about 4 s
    // after the first of them, each telling the client to retry after 1 s:
    // the client's own retry comes (and fails) well before the reset.
    let (reset_at, api) = limited_in_iteration_2(AHEAD);
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete").at_iteration(3);
    outcome.closing_has(&["loop complete at iteration 3 of 25"]);
    let reset = reset_at
        .lock()
        .unwrap()
        .expect("iteration 2 reached the API");
    let reset_time = UNIX_EPOCH + Duration::from_secs(reset);
    // The person was told of the pause as one the run takes up itself,
    // then of the ending: a line each.
    let told = || std::fs::read_to_string(scenario.path("notified.jsonl")).unwrap_or_default();
    wait_until(Duration::from_secs(10), || told().lines().count() >= 2);
    let told: Vec<Value> = told()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON object a line"))
        .collect();
    assert_eq!(told.len(), 2, "{told:?}");
    assert_eq!(told[0]["event"], "paused", "{told:?}");
    let line = told[0]["line"].as_str().unwrap();
    assert!(
        line.contains("; it resumes by itself at ") && !line.contains("run --resume"),
        "{line}"
    );
    assert!(told[0]["resumesAt"].is_string(), "{told:?}");
    assert_eq!(told[1]["event"], "ended", "{told:?}");

    // Before the reset: only the first client's requests (iteration 1, then
    // iteration 2 and its retries, all refused); from the reset on: the
    // resumed run's, answered.
    let main = main_requests(&api);
    let (before, after): (Vec<&RecordedRequest>, Vec<&RecordedRequest>) =
        main.iter().partition(|r| r.at < reset_time);
    let first_run = 1 + requests_per_failed_turn(client);
    assert_eq!(before.len(), first_run, "{evidence}");
    assert_eq!(before[0].status, 200, "{evidence}");
    assert!(before[1..].iter().all(|r| r.status == 429), "{evidence}");
    let resumed: Vec<(Option<u32>, u16)> = after
        .iter()
        .map(|r| (iteration_of(&r.body), r.status))
        .collect();
    assert_eq!(resumed, [(Some(2), 200), (Some(3), 200)], "{evidence}");
    let session = outcome.state["sessionId"].as_str().unwrap();
    assert!(all_in_session(&main, session), "{evidence}");

    let log = log_entries(&scenario);
    let resumes = events(&log).iter().filter(|k| **k == "resume").count();
    assert_eq!(resumes, 1, "{evidence}");
    let entry = |event: &str| log.iter().find(|e| e["event"] == event).unwrap();
    let (pause, wait, resume) = (entry("pause"), entry("wait"), entry("resume"));
    let resumed_at = epoch_of(resume["at"].as_str().unwrap());
    assert!(resumed_at >= reset, "resumed before the reset: {evidence}");
    let wait_reason = wait["reason"].as_str().unwrap();
    match client {
        ClientVersion::V2_1_330 => {
            let resume_at = pause["resumeAt"].as_str().unwrap_or_default();
            assert_eq!(epoch_of(resume_at), reset, "{evidence}");
            assert_eq!(wait["resumeAt"], resume_at, "{evidence}");
            assert!(wait_reason.starts_with("rate_limit until "), "{evidence}");
        }
        ClientVersion::V2_0_77 => {
            assert!(pause["resumeAt"].is_null(), "{evidence}");
            let backoff = format!("backoff of {AHEAD} s");
            assert!(wait_reason.contains(&backoff), "{evidence}");
        }
    }
}

#[test]
fn a_429_s_retry_after_is_waited_for_past_the_backoff() {
    // 2.1.330 writes the wait a 429's retry-after asked for (its retry
    // line's retryInMs); 2.0.77 writes no such line.
    const ASKED: u64 = 3;
    let client = ClientVersion::V2_1_330;
    let scenario = quick("retry-after", client);
    // Iteration 2's request and the client's one retry answer 429 with
    // `retry-after: 3` and no reset time; the resumed run's are answered.
    let refused = Arc::new(Mutex::new(0_usize));
    let api = MockApi::start(three_steps(move || {
        let mut refused = refused.lock().unwrap();
        if *refused < requests_per_failed_turn(ClientVersion::V2_1_330) {
            *refused += 1;
            Reply::ApiError {
                status: 429,
                headers: vec![("retry-after".into(), ASKED.to_string())],
                error_type: "rate_limit_error".into(),
                message: "Number of request tokens has exceeded your per-minute rate limit".into(),
            }
        } else {
            Reply::text("Finished step 2.")
        }
    }));
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete").at_iteration(3);
    let log = log_entries(&scenario);
    let entry = |event: &str| log.iter().find(|e| e["event"] == event).unwrap();
    let (pause, wait, resume) = (entry("pause"), entry("wait"), entry("resume"));
    assert!(pause["resumeAt"].is_null(), "no reset time: {evidence}");
    // The backoff is 1 s; the API asked for 3: at least that, from the pause.
    let paused_at = epoch_of(pause["at"].as_str().unwrap());
    let resumed_at = epoch_of(resume["at"].as_str().unwrap());
    assert!(
        resumed_at >= paused_at + ASKED,
        "resumed {} s after the pause: {evidence}",
        resumed_at - paused_at
    );
    let reason = wait["reason"].as_str().unwrap();
    assert!(
        reason.contains("s the API asked for (retry-after)"),
        "{evidence}"
    );
    // The time the wait line gives is the one it resumed at.
    assert!(
        epoch_of(wait["resumeAt"].as_str().unwrap()) <= resumed_at,
        "{evidence}"
    );
}

#[ralph_tests::on_both_clients(differs = "2.1.330 reports the 401, 2.0.77 only its error's name")]
fn a_bad_api_key_fails_the_loop_at_once(client: ClientVersion) {
    let scenario = quick("unauthorized", client);
    let options = MockOptions {
        side_reply: Some(Reply::unauthorized()),
        ..MockOptions::default()
    };
    let api = MockApi::start_with(options, |_, _| Reply::unauthorized());
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(15, "failed").at_iteration(1);
    outcome.closing_has(&[
        "ralph: loop failed at iteration 1",
        "authentication_failed",
        "check ANTHROPIC_API_KEY",
    ]);
    let paused = &outcome.state["pausedBecause"];
    assert_eq!(paused["kind"], "authentication_failed", "{evidence}");
    // 2.1.330 reports the status (the result's `api_error_status`, the
    // transcript's `api_error` line); 2.0.77 says only "Invalid API key ·
    // Fix external API key", its error named `authentication_failed`.
    let status = match client {
        ClientVersion::V2_1_330 => json!(401),
        ClientVersion::V2_0_77 => Value::Null,
    };
    assert_eq!(paused["httpStatus"], status, "{evidence}");

    // No wait, no resume: the one run's requests, every one refused.
    let log = log_entries(&scenario);
    assert_eq!(events(&log), ["start", "pause", "end"], "{evidence}");
    assert_eq!(log[2]["status"], "failed", "{evidence}");
    let main = main_requests(&api);
    assert_eq!(main.len(), requests_per_failed_turn(client), "{evidence}");
    assert!(api.requests().iter().all(|r| r.status == 401), "{evidence}");
}

#[test]
fn a_client_that_refuses_its_settings_stops_the_loop_at_once() {
    // The person's own `--settings`, whose sandbox 2.1.330 cannot validate
    // (`allowWrite` a string) and must have: the client exits before its
    // first turn. No wait, no resume: its words and its exit code, now,
    // and ralph's exit code for a failed loop (the client's 1 is named).
    let client = ClientVersion::V2_1_330;
    let settings = r#"{"sandbox": {"enabled": true, "failIfUnavailable": true, "filesystem": {"allowWrite": "/tmp"}}}"#;
    let scenario = quick("refused-settings", client).exact_args(&[
        "--headless",
        "--",
        "--permission-mode",
        "bypassPermissions",
        "--settings",
        settings,
    ]);
    let api = MockApi::start(|_, _| Reply::text("never asked"));
    let started = Instant::now();
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(15, "failed").at_iteration(1);
    outcome.closing_has(&["ralph: loop failed at iteration 1"]);
    outcome.run.assert_stderr_has(&[
        "Claude Code refused to start (its exit code 1), before its first turn",
        "sandbox.filesystem.allowWrite: Expected array, but received string",
    ]);
    assert!(
        outcome.state["endedBecause"]
            .as_str()
            .is_some_and(|why| why.contains("Expected array, but received string")),
        "{evidence}"
    );
    let log = log_entries(&scenario);
    assert_eq!(events(&log), ["start", "end"], "{evidence}");
    assert!(api.requests().is_empty(), "{evidence}");
    assert!(started.elapsed() < Duration::from_secs(30), "{evidence}");
}

#[ralph_tests::on_both_clients]
fn sigint_to_the_launcher_alone_interrupts_a_headless_session(client: ClientVersion) {
    // `kill -INT` of the launcher, not Ctrl-C to the whole group: the
    // headless client, in the middle of a long command, gets it too.
    let scenario = quick("sigint-alone", client);
    let arrived = Flag::default();
    let seen = arrived.clone();
    let api = MockApi::start(move |_, _| {
        seen.set();
        Reply::bash("sleep 60")
    });
    let mut launcher = scenario.start_until(&api, 1);
    assert!(
        wait_until(LOOP_TIMEOUT, || arrived.is_set()),
        "the client never asked"
    );
    // The long command has started.
    thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    signal_process(launcher.id(), libc::SIGINT);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    let took = started.elapsed();
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    assert!(took < Duration::from_secs(15), "{took:?}: {err}");
    let state = scenario.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}\n{err}");
    assert!(
        ralph_tests::json_text_has(&state["endedBecause"], "Ctrl-C (SIGINT)"),
        "{state:#}"
    );
}

#[ralph_tests::on_both_clients(
    differs = "other models and prices, and 2.0.77 compacts at 200k tokens"
)]
fn the_cost_cap_ends_the_loop_within_one_call(client: ClientVersion) {
    // What one call of 100,000 input and 10 output tokens costs by the
    // client's own price table for its default model (measured once:
    // 2.1.330 asks for claude-opus-5-5, 2.0.77 for claude-sonnet-4-5). The
    // cap is two and a half calls. (At 200,000 input tokens a call, 2.0.77
    // compacts the conversation before its next request: a summary request,
    // then the loop goes on in a conversation that starts from the summary.)
    let (per_call, cap) = match client {
        ClientVersion::V2_1_330 => (0.4002, 1.0),
        ClientVersion::V2_0_77 => (0.3, 0.75),
    };
    let scenario = quick("cost-cap", client).env("RALPH_MAX_COST_USD", &cap.to_string());
    let api = MockApi::start(expensive(BIG_CALL));
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(16, "budget_exhausted");
    // Said as the budget, not as a client that failed, with what it cost.
    outcome.closing_has(&[
        "budget_exhausted",
        "the client stopped itself at the budget ralph gave it (--max-budget-usd",
        "raise maxCostUsd",
        "[cost $",
    ]);
    assert!(
        !outcome.run.closing_line().contains("exited with code"),
        "{:?}",
        outcome.run
    );
    let state = &outcome.state;
    let cost = state["costUsd"].as_f64().unwrap();
    let within = cost >= cap && cost < cap + per_call;
    assert!(within, "cost {cost} against a cap of {cap}: {evidence}");
    // The calls it took to cross the cap, and none more. The client ends
    // the run as soon as the third call is answered, without a Stop hook:
    // iteration 3 has no stop record, and nothing re-injected it.
    let main = main_requests(&api);
    assert_eq!(main.len(), 3, "{evidence}");
    assert_eq!(state["iteration"], 3, "{evidence}");
    assert_eq!(
        outcome.decisions(),
        [(1, "block"), (2, "block")],
        "{evidence}"
    );
    assert!(main.iter().all(|r| r.status == 200), "{evidence}");
    // Iteration 3's request had no stop to count it: the driver counted it
    // from the transcript once the client had exited.
    let counted = counted_requests(state);
    assert_eq!(counted, 3, "every request counted once: {evidence}");
    let input = state["usage"]["input"].as_u64();
    assert_eq!(input, Some(300_000), "every request's tokens: {evidence}");
    let log = log_entries(&scenario);
    assert_eq!(events(&log).last(), Some(&"end"), "{evidence}");
    assert_eq!(
        log.last().unwrap()["status"],
        "budget_exhausted",
        "{evidence}"
    );
}

#[ralph_tests::on_both_clients]
fn the_calls_per_hour_cap_pauses_a_manual_loop_for_the_hour(client: ClientVersion) {
    let scenario = quick("calls-per-hour", client)
        .env("RALPH_MAX_CALLS_PER_HOUR", "3")
        .env("RALPH_RESUME_POLICY", "manual");
    let api = MockApi::start(expensive(Usage::default()));
    let outcome = scenario.run(&api);
    let now = epoch_now();
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(14, "paused").at_iteration(4);
    outcome.closing_has(&[
        "ralph: loop paused at iteration 4 of 25 (calls_per_hour",
        "`ralph-ctl run --resume` goes on (not before ",
    ]);
    outcome
        .run
        .assert_stderr_has(&["not resuming on its own: resumePolicy is manual"]);
    let paused = &outcome.state["pausedBecause"];
    assert_eq!(paused["kind"], "calls_per_hour", "{evidence}");
    let resume_at = epoch_of(paused["resumeAt"].as_str().unwrap());
    let from_now = i128::from(resume_at) - i128::from(now);
    let within_the_hour = (now + 50 * 60..=now + 61 * 60).contains(&resume_at);
    assert!(
        within_the_hour,
        "resumeAt {from_now} s from now: {evidence}"
    );
    // The third stop counted the third request and let the stop through;
    // a stop that counted no request records no `calls`.
    assert_eq!(api.main_requests().len(), 3, "{evidence}");
    let calls: Vec<u64> = outcome
        .history()
        .iter()
        .map(|r| r["calls"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(
        outcome.decisions(),
        [(1, "block"), (2, "block"), (3, "allow")],
        "{evidence}"
    );
    assert_eq!(calls, [1, 1, 1], "{evidence}");
    // The launcher did not wait for the hour.
    assert!(outcome.run.elapsed < Duration::from_secs(60), "{evidence}");
    let log = log_entries(&scenario);
    let kinds = events(&log);
    let waited = kinds.contains(&"wait") || kinds.contains(&"resume");
    assert!(!waited, "{evidence}");
    assert_eq!(kinds.last(), Some(&"pause"), "{evidence}");
    assert_eq!(log.last().unwrap()["policy"], "manual", "{evidence}");
}

#[ralph_tests::on_both_clients]
fn a_client_killed_mid_loop_is_resumed_by_hand_where_it_was(client: ClientVersion) {
    // Under the manual policy, so that nothing but the person resumes it.
    let scenario = quick("killed-manual", client).env("RALPH_RESUME_POLICY", "manual");
    let arrived = Flag::default();
    let seen = arrived.clone();
    // Iteration 2's first request is held while the test kills the client.
    let api = MockApi::start(three_steps(move || {
        if !seen.is_set() {
            seen.set();
            thread::sleep(Duration::from_secs(2));
        }
        Reply::text("Finished step 2.")
    }));
    let mut launcher = scenario.start_until(&api, 1);
    let reached = wait_until(LOOP_TIMEOUT, || arrived.is_set());
    assert!(reached, "iteration 2 never reached the API");
    let client_pid = child_of(launcher.id()).expect("the launcher runs the client");
    signal_process(client_pid, libc::SIGKILL);
    let (status, stdout, stderr) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    let code = status.and_then(|s| s.code());
    let elapsed = Duration::ZERO;
    let killed = Run {
        code,
        stdout,
        stderr,
        elapsed,
    };
    let evidence_killed = evidence(&scenario, &api, &killed);
    // A client killed from outside the launcher is a crash (the person's
    // stop goes to the launcher): the loop pauses, and under the manual
    // policy waits for a person.
    assert_eq!(killed.code, Some(14), "{evidence_killed}");
    let line = killed.closing_line();
    for needle in [
        "loop paused at iteration 2 of 25",
        "killed by signal 9",
        "`ralph-ctl run --resume` goes on",
    ] {
        assert!(line.contains(needle), "{needle}: {evidence_killed}");
    }
    let state = scenario.status_json();
    assert_eq!(state["status"], "paused", "{evidence_killed}");
    assert_eq!(
        state["pausedBecause"]["kind"], "client_exit",
        "{evidence_killed}"
    );
    assert_eq!(state["iteration"], 2, "{evidence_killed}");
    let session = state["sessionId"].as_str().unwrap().to_string();

    // The person goes on with the launcher's --resume, as the line printed
    // it: the loop goes on headless, as it ran (no terminal here).
    let outcome = scenario.run_with(&api, &["--resume"]);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete").at_iteration(3);
    let resuming = format!("resuming the loop of session {session} at iteration 2 of 25");
    outcome.run.assert_stderr_has(&[
        "resuming the way the loop ran: headless (--headless)",
        &resuming,
    ]);
    outcome.closing_has(&["loop complete at iteration 3 of 25"]);
    assert_eq!(outcome.state["sessionId"], session.as_str(), "{evidence}");
    // Iteration 1, the kill (recorded against iteration 2), iteration 2
    // again, iteration 3.
    let decisions = outcome.decisions();
    assert_eq!(
        decisions,
        [(1, "block"), (2, "allow"), (2, "block"), (3, "allow")],
        "{evidence}"
    );

    let log = log_entries(&scenario);
    let resume = log
        .iter()
        .find(|e| e["event"] == "resume")
        .expect(&evidence);
    let reason = resume["reason"].as_str().unwrap();
    assert!(
        reason.contains("`ralph-ctl run --resume` (the loop was paused)"),
        "{evidence}"
    );
    let one_session = log.iter().all(|e| e["sessionId"] == session.as_str());
    assert!(one_session, "{evidence}");

    // The resumed run went on with the same conversation.
    let main = main_requests(&api);
    assert!(all_in_session(&main, &session), "{evidence}");
    let last = &main.last().unwrap().body;
    assert_eq!(iteration_of(last), Some(3), "{evidence}");
    assert_eq!(
        first_message(last),
        first_message(&main[0].body),
        "{evidence}"
    );
    let mut headers = iteration_headers(last);
    headers.dedup();
    assert_eq!(headers, [1, 2, 3], "{evidence}");
}

fn a_waiting_loop_is_not_taken_over(client: ClientVersion) {
    // The real client's turn fails on 529s: the launcher pauses the loop and
    // waits out its backoff. Meanwhile nobody else takes the loop up (no
    // second launcher, no new start, no --reset), and `status` says the
    // launcher resumes it on its own. Once that launcher is stopped, the
    // person's --resume goes on, in the same session.
    let scenario = quick("waiting", client).env("RALPH_RESUME_BACKOFF_SECONDS", "60");
    let released = Flag::default();
    let done = |_| Reply::text(format!("All steps done.\n{SIGNAL}"));
    let api = MockApi::start(released.script(|_, _| Reply::overloaded(), done));
    let mut launcher = scenario.start_until(&api, 1);
    let paused = || scenario.state().is_some_and(|s| s["status"] == "paused");
    assert!(
        wait_until(LOOP_TIMEOUT, paused),
        "never paused: {:?}",
        scenario.state()
    );
    let session = scenario.status_json()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let held = format!(
        "waiting to resume under ralph-ctl run (pid {})",
        launcher.id()
    );
    let env = scenario.client_env(client, &api);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    for args in [
        &["start"][..],
        &["run", "--resume", "--headless"][..],
        &["run", "--reset", "--headless"][..],
    ] {
        let run = scenario.ctl(args, &env);
        assert_eq!(run.code, Some(3), "{args:?}: {run:?}");
        assert!(run.stderr.contains(&held), "{args:?}: {run:?}");
    }
    let on_its_own = format!(
        "the launcher (pid {}) resumes it on its own at ",
        launcher.id()
    );
    scenario
        .ctl(&["status"], &[])
        .assert_stdout_has(&[&on_its_own]);
    let state = scenario.status_json();
    assert_eq!(state["status"], "paused", "left as it was: {state:#}");
    assert_eq!(state["sessionId"], session.as_str(), "{state:#}");
    // Its launcher stopped by the person: the loop is theirs to go on with.
    signal_process(launcher.id(), libc::SIGTERM);
    let _ = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    released.set();
    let outcome = scenario.run_with(&api, &["--resume", "--headless"]);
    outcome.ended(0, "complete");
    assert_eq!(outcome.state["sessionId"], session.as_str(), "{outcome:?}");
}

fn an_absurd_reset_time_is_not_believed(client: ClientVersion) {
    // The API's 429 says its limit resets in the year 3000; 2.1.330 writes
    // that reset time into the transcript. ralph believes a reset time only
    // within a usage window (8 days ahead): it waits its own backoff
    // instead, and the loop goes on within seconds.
    const YEAR_3000: u64 = 32_503_680_000;
    let scenario = quick("absurd-reset", client);
    let refused = Arc::new(Mutex::new(0usize));
    let count = Arc::clone(&refused);
    let failing = requests_per_failed_turn(client);
    let api = MockApi::start(move |_, body| {
        let mut n = count.lock().unwrap();
        if iteration_of(body) == Some(1) && *n < failing {
            *n += 1;
            return rate_limited(YEAR_3000, 1);
        }
        match iteration_of(body) {
            Some(1) => Reply::text("Finished step 1."),
            _ => Reply::text(format!("All steps done.\n{SIGNAL}")),
        }
    });
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete");
    assert!(outcome.run.elapsed < Duration::from_secs(60), "{evidence}");
    assert_eq!(*refused.lock().unwrap(), failing, "{evidence}");
    let log = log_entries(&scenario);
    let pause = log.iter().find(|e| e["event"] == "pause").expect("paused");
    assert!(pause["resumeAt"].is_null(), "{evidence}");
    let wait = log.iter().find(|e| e["event"] == "wait").expect("waited");
    let reason = wait["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("backoff of 1 s"), "{evidence}");
    let whole = serde_json::to_string(&log).unwrap();
    assert!(!whole.contains("3000-"), "{evidence}");
}

fn caps_given_to_the_launcher_hold(client: ClientVersion) {
    // --max-iterations on the launcher: a loop that never claims ends
    // `max_iterations` at 3, with 3 requests. The launcher's own flags go
    // before `--`, the client's after it.
    let scenario = quick("launcher-caps", client);
    let api = MockApi::start(expensive(Usage::default()));
    let capped = scenario.run_with(&api, &["--headless", "--max-iterations", "3"]);
    capped.ended(10, "max_iterations");
    capped.closing_has(&[
        "max_iterations, 3 of 3",
        "--max-iterations N for a higher cap",
    ]);
    assert_eq!(capped.state["maxIterations"], 3, "{capped:?}");
    assert_eq!(main_requests(&api).len(), 3, "{capped:?}");

    // --max-cost-usd: the 2.1.330 call below costs $0.4002, so a $1 budget
    // ends the loop `budget_exhausted` within its third call.
    let api = MockApi::start(expensive(BIG_CALL));
    let spent = scenario.run_with(&api, &["--headless", "--reset", "--max-cost-usd", "1"]);
    spent.ended(16, "budget_exhausted");
    spent.closing_has(&["maxCostUsd $1.00"]);
    assert_eq!(main_requests(&api).len(), 3, "{spent:?}");
}

/// Whether `pid` is gone (or a zombie nobody reaped yet).
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .is_some_and(|i| stat[i + 1..].trim_start().starts_with('Z')),
    }
}

/// What the client wrote it spent in every session it ran here: each
/// transcript's last `cost-state` line, the session's total.
fn spent_by_the_client(project: &TempProject) -> f64 {
    let sessions = std::fs::read_dir(project.home.join(".claude/projects")).unwrap();
    let transcripts = sessions
        .flatten()
        .flat_map(|folder| std::fs::read_dir(folder.path()).unwrap().flatten());
    transcripts
        .map(|file| std::fs::read_to_string(file.path()).unwrap_or_default())
        .map(|text| last_cost_state(&text).unwrap_or(0.0))
        .sum()
}

fn killed_launcher_leaves_no_client(client: ClientVersion, fresh: bool) {
    // The launcher is killed with SIGKILL (no handler runs) while its client
    // waits for the model: the client is ended by the watchdog within
    // seconds, not left running and spending. The
    // person's --resume then goes on, the orphaned iteration's request
    // counted once.
    let (name, mode) = if fresh {
        ("killed-fresh", "--fresh")
    } else {
        ("killed-launcher", "--headless")
    };
    let scenario = quick(name, client)
        .args(&[mode])
        .env("RALPH_SANDBOX", "off");
    let arrived = Flag::default();
    let seen = arrived.clone();
    let api = MockApi::start(move |_, body| {
        let texts = user_texts(body).join("\n");
        if texts.contains("step-one-done") && !seen.is_set() {
            seen.set();
            // Iteration 1's second request: held past the test's deadline
            // for the client, so that only its watchdog can end it in time.
            thread::sleep(Duration::from_secs(12));
            return Reply::text("Step 1 done.");
        }
        if texts.contains("step-one-done") {
            return Reply::text(format!("All steps done.\n{SIGNAL}"));
        }
        Reply::bash("echo step-one-done")
    });
    let mut launcher = scenario.start_until(&api, 1);
    let held = wait_until(LOOP_TIMEOUT, || arrived.is_set());
    assert!(held, "the held request never came");
    let client_pid = scenario.status_json()["carriers"]["client"]["pid"]
        .as_u64()
        .expect("the client is recorded");
    let client_pid = u32::try_from(client_pid).unwrap();
    assert!(!process_gone(client_pid));
    signal_process(launcher.id(), libc::SIGKILL);
    let _ = launcher.wait();
    let gone = wait_until(Duration::from_secs(8), || process_gone(client_pid));
    assert!(gone, "Claude Code (pid {client_pid}) outlived its launcher");
    // Seen by the next command: `status` shows the driver gone, and
    // records nothing (a read-only command never does); the person's
    // --resume records the interruption.
    let shown = scenario.ctl(&["status"], &[]);
    assert!(
        shown.stdout.contains("interrupted: its driver is gone"),
        "{shown:?}"
    );
    let written = (!fresh).then(|| spent_by_the_client(&scenario));
    assert!(
        written.is_none_or(|w| w > 0.0),
        "the killed client wrote its cost on SIGTERM"
    );
    // The person goes on; the loop completes.
    let outcome = scenario.run_with(&api, &["--resume", mode]);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete");
    // In session mode the killed client's own total was charged.
    if let Some(written) = written {
        let charged = outcome.state["costUsd"].as_f64().unwrap_or(0.0);
        assert!(
            charged + 1e-5 >= written,
            "charged ${charged}, written ${written}"
        );
    }
    let counted = counted_requests(&outcome.state);
    let sent = main_requests(&api).len() as u64;
    assert_eq!(counted, sent, "every request counted once: {evidence}");
    // The cost: what the client wrote for each session it ran, the killed one's included.
    let spent = spent_by_the_client(&scenario);
    let charged = outcome.state["costUsd"].as_f64().unwrap_or(0.0);
    assert!(
        spent > 0.0 && (charged - spent).abs() < 1e-5,
        "charged ${charged}, the client wrote ${spent}: {evidence}"
    );
}

#[test]
fn a_limit_that_resets_days_away_leaves_the_loop_paused_for_the_person() {
    // A subscription's headless run, refused by a limit that resets three
    // days on (a weekly limit):
    // the start said what the run draws from, and the supervisor does not
    // sit out the wait: the loop stays paused (exit 14), the reset named.
    let client = ClientVersion::V2_1_330;
    let reset = epoch_now() + 3 * 86_400;
    let scenario = quick("reset-days-away", client).subscription();
    let api = MockApi::start(three_steps(move || rate_limited(reset, 1)));
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(14, "paused").at_iteration(2);
    assert!(outcome.run.elapsed < Duration::from_secs(60), "{evidence}");
    outcome.run.assert_stderr_has(&[
        "billing: on a subscription login, `claude -p` (headless, fresh-context and queue runs) \
         draws from the plan's usage limits",
        "(checked 2026-12-02",
        "more than 24 h away (maxResumeWaitHours): `ralph-ctl run --resume` once it has reset",
    ]);
    let log = log_entries(&scenario);
    assert!(
        !log.iter().any(|e| e["event"] == "resume"),
        "never resumed on its own: {evidence}"
    );
}

#[test]
fn a_subscription_s_limit_is_waited_for_until_its_reset() {
    // On a subscription login 2.1.330 does not retry a refused limit: it
    // ends the turn at once with "You've hit your 5-hour limit · resets …",
    // the reset time only in its stream's `rate_limit_event` (status
    // `rejected`). The supervisor waits until then, not a backoff that
    // gives up after five tries, and the loop goes on.
    const AHEAD: u64 = 4;
    let client = ClientVersion::V2_1_330;
    let scenario = quick("subscription-limit", client)
        .subscription()
        .env("RALPH_RESUME_BACKOFF_SECONDS", "1");
    let (reset_at, api) = limited_in_iteration_2(AHEAD);
    let outcome = scenario.run(&api);
    let evidence = evidence(&scenario, &api, &outcome.run);
    outcome.ended(0, "complete").at_iteration(3);
    let reset = reset_at
        .lock()
        .unwrap()
        .expect("iteration 2 reached the API");
    let log = log_entries(&scenario);
    let resumes = events(&log).iter().filter(|k| **k == "resume").count();
    assert_eq!(resumes, 1, "one resume, at the reset: {evidence}");
    let entry = |event: &str| log.iter().find(|e| e["event"] == event).unwrap();
    let (wait, resume) = (entry("wait"), entry("resume"));
    assert_eq!(
        epoch_of(wait["resumeAt"].as_str().unwrap_or_default()),
        reset,
        "{evidence}"
    );
    assert!(
        wait["reason"]
            .as_str()
            .unwrap()
            .starts_with("rate_limit until "),
        "{evidence}"
    );
    assert!(
        epoch_of(resume["at"].as_str().unwrap()) >= reset,
        "resumed before the reset: {evidence}"
    );
}
