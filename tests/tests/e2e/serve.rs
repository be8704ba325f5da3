//! End-to-end: `ralph-ctl serve` beside a loop the real client runs
//! (2.1.330, fresh context, through the launcher against the mock), its
//! page open in real headless Chromium (puppeteer-core): the page follows
//! the loop from running to complete with its check's output, without a
//! reload; the agent's `<script>` shows as text; say, answer and cancel
//! from the page reach the loop; a request without the token and another
//! site's POST are refused; a connection that announces a body and never
//! sends it stops neither the page nor the server.

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ralph_tests::browser::Browser;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{user_texts, MockApi, Reply};
use ralph_tests::project::TempProject;
use ralph_tests::scenario::{exits_with, wait_until, Scenario};
use ralph_tests::serve::Served;
use ralph_tests::SIGNAL;
use serde_json::json;

const CLIENT: ClientVersion = ClientVersion::V2_1_330;
/// What the check prints: the page must show it.
const CHECK_SAYS: &str = "CHECK-OUTPUT: 7 tests passed";
/// Long enough for a loaded machine, short enough to fail soon.
const SOON: Duration = Duration::from_secs(60);
/// How long a held answer of the mock waits at most for the test.
const HOLD: Duration = Duration::from_secs(90);

/// The loop's section of the page.
const MAIN: &str = "section[data-loop=\"main\"]";

fn selector(inner: &str) -> String {
    format!("{MAIN} {inner}")
}

/// A switch the mock waits on before it answers (at most [`HOLD`]).
#[derive(Clone, Default)]
struct Gate(Arc<AtomicBool>);

impl Gate {
    fn open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn wait(&self) {
        let deadline = Instant::now() + HOLD;
        while !self.0.load(Ordering::SeqCst) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Starts the scenario's launcher in a process group of its own.
fn launch(scenario: &Scenario, api: &MockApi) -> Child {
    let mut cmd = scenario.command(api);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    cmd.spawn().unwrap()
}

/// Waits until the loop's state says `status`.
fn wait_status(project: &TempProject, status: &str) {
    assert!(
        wait_until(SOON, || project
            .state()
            .is_some_and(|s| s["status"] == status)),
        "the loop never was {status}: {:?}",
        project.state().map(|s| s["status"].clone())
    );
}

#[test]
fn the_page_follows_a_loop_to_its_end_and_its_note_reaches_the_next_iteration() {
    let go = Gate::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |turn, _| {
        match turn {
        0 => Reply::text(
            "Looked around. <script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">",
        ),
        1 => {
            held.wait();
            Reply::text("Fixed the parser.")
        }
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    }
    });
    let config =
        format!(r#"{{"verify": [{{"name": "tests", "command": "echo '{CHECK_SAYS}'"}}]}}"#);
    let scenario = Scenario::configured("serve-live", CLIENT, &config).fresh(&[]);
    let mut launcher = launch(&scenario, &api);
    let served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);
    assert_eq!(browser.open(&served.url), 200);
    browser.eval("window.__loaded = 'once'");

    // Running, with the agent's markup as text.
    browser.wait_text(&selector("h2"), "running", SOON);
    let page = browser.wait_text(
        &selector(".body"),
        "<script>window.__pwned = 1</script>",
        SOON,
    );
    assert!(page.contains("onerror"), "{page}");
    assert_eq!(
        browser.eval("document.querySelectorAll('#loops script, #loops img').length"),
        0,
        "the agent's markup became elements"
    );

    // A note for the next iteration, from the page.
    browser.type_in(&selector("form.say input"), "Prefer the small fix.");
    browser.click(&selector("form.say button"));
    browser.wait_text(&selector(".message"), "noted", SOON);
    go.open();

    // Complete, with the check's output, in the same page.
    browser.wait_text(&selector(".status"), "complete", SOON);
    browser.wait_text(&selector(".verify-output"), CHECK_SAYS, SOON);
    assert_eq!(
        browser.eval("window.__loaded"),
        "once",
        "the page was reloaded"
    );
    assert_eq!(
        browser.eval("performance.getEntriesByType('navigation').length"),
        1
    );
    assert!(
        browser.eval("window.__pwned").is_null(),
        "the agent's script ran"
    );
    exits_with(&mut launcher, 0);

    let requests = api.main_requests();
    assert_eq!(requests.len(), 3, "three iterations");
    let third = user_texts(&requests[2].body).join("\n");
    assert!(third.contains("Prefer the small fix."), "{third}");
    let second = user_texts(&requests[1].body).join("\n");
    assert!(!second.contains("Prefer the small fix."), "{second}");
}

#[test]
fn cancel_from_the_page_ends_the_loop_and_strangers_are_refused() {
    let go = Gate::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |turn, _| {
        if turn > 0 {
            held.wait();
        }
        Reply::text("Still working.")
    });
    let scenario = Scenario::new("serve-cancel", CLIENT).fresh(&[]);
    let mut launcher = launch(&scenario, &api);
    let mut served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);

    // Without the token, or with another, the browser gets a 403.
    assert_eq!(browser.open(&format!("{}/", served.origin)), 403);
    assert_eq!(
        browser.open(&format!("{}/?token={}", served.origin, "0".repeat(64))),
        403
    );

    wait_status(&scenario, "running");
    // Another site the person visits tries to cancel (a form and a fetch).
    browser.must(json!({
        "op": "crossSite",
        "target": format!("{}{}", served.origin, served.with_token("/api/cancel")),
        "body": "{\"loop\":\"main\"}",
        "timeout": 20_000,
    }));
    assert_eq!(scenario.status_json()["status"], "running");
    served.read_lines(Duration::from_millis(200));
    let refused: Vec<&String> = served
        .output
        .iter()
        .filter(|l| l.starts_with("refused a POST to /api/cancel from http://127.0.0.1:"))
        .collect();
    assert_eq!(
        refused.len(),
        2,
        "the form and the fetch: {:?}",
        served.output
    );

    assert_eq!(browser.open(&served.url), 200);
    browser.wait_text(&selector("h2"), "running", SOON);
    browser.click(&selector("button.cancel"));
    browser.wait_text(&selector(".message"), "cancelled", SOON);
    assert_eq!(
        browser.must(json!({"op": "dialogs"})),
        json!(["Cancel this loop? It will not go on."])
    );
    browser.wait_text(&selector(".status"), "cancelled", SOON);
    go.open();
    exits_with(&mut launcher, 22);
    assert_eq!(scenario.status_json()["status"], "cancelled");
    let log = scenario.audit_log();
    assert!(log.contains("cancelled by the person"), "{log}");
}

#[test]
fn the_agent_s_question_is_answered_from_the_page() {
    const QUESTION: &str = "Which port should <b>the server</b> use?";
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text(format!("The notes disagree.\nRALPH_ASK: {QUESTION}")),
        _ => Reply::text(format!("It listens on 8080.\n{SIGNAL}")),
    });
    let scenario = Scenario::new("serve-answer", CLIENT).fresh(&[]);
    let mut launcher = launch(&scenario, &api);
    let served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);
    assert_eq!(browser.open(&served.url), 200);

    let asked = browser.wait_text(&selector(".question"), QUESTION, SOON);
    assert_eq!(asked, format!("The agent asks: {QUESTION}"));
    browser.wait_text(&selector("h2"), "waiting", SOON);
    browser.type_in(&selector("form.answer input"), "Port 8080.");
    browser.click(&selector("form.answer button"));
    browser.wait_text(&selector(".message"), "answered", SOON);
    browser.wait_text(&selector(".status"), "complete", SOON);
    exits_with(&mut launcher, 0);

    let requests = api.main_requests();
    assert_eq!(
        requests.len(),
        2,
        "the question, then the answered iteration"
    );
    let answered = user_texts(&requests[1].body).join("\n");
    assert!(
        answered.contains("The person's answer: Port 8080."),
        "{answered}"
    );
}

#[test]
fn a_silent_connection_does_not_stop_the_page() {
    let go = Gate::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("Looked around."),
        1 => {
            held.wait();
            Reply::text("Fixed the parser.")
        }
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    let config =
        format!(r#"{{"verify": [{{"name": "tests", "command": "echo '{CHECK_SAYS}'"}}]}}"#);
    let scenario = Scenario::configured("serve-silent", CLIENT, &config).fresh(&[]);
    let mut launcher = launch(&scenario, &api);
    let served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);
    assert_eq!(browser.open(&served.url), 200);
    browser.wait_text(&selector("h2"), "running", SOON);

    // A stranger (no token) announces a body and never sends it, and so
    // does a request with the token and the page's origin; both stay
    // open while the loop goes on.
    let mut stranger = served.hold(&format!(
        "POST /api/cancel HTTP/1.1\r\nHost: {}\r\nContent-Length: 100000\r\n\r\n",
        served.host()
    ));
    let mut silent = served.hold(&served.post_head("/api/say", 64));
    go.open();

    browser.wait_text(&selector(".status"), "complete", SOON);
    browser.wait_text(&selector(".verify-output"), CHECK_SAYS, SOON);
    exits_with(&mut launcher, 0);
    assert_eq!(api.main_requests().len(), 3, "three iterations");

    let (said, closed) = Served::answered(&mut stranger, Duration::from_secs(2));
    assert!(said.starts_with("HTTP/1.1 403"), "{said}");
    assert!(closed, "the stranger's connection was left open");
    let (said, closed) = Served::answered(&mut silent, Duration::from_secs(10));
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(closed, "the silent connection was left open");
    assert!(scenario.status_json()["hint"].is_null(), "no note left");
}
