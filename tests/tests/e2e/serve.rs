//! End-to-end: `ralph-ctl serve` beside a loop the real client runs
//! (2.1.330, fresh context, through the launcher against the mock), its
//! page open in real headless Chromium (puppeteer-core): the page follows
//! the loop from running to complete with its check's output, without a
//! reload; the agent's `<script>` shows as text; say, answer and cancel
//! from the page reach the loop; a request without the token and another
//! site's POST are refused; a connection that announces a body and never
//! sends it stops neither the page nor the server. A queue run is one table
//! of its items, each item's loop folded under it; a loop that ended shows
//! no empty strip of controls. The screenshots docs/serve.md shows are
//! taken here (written to docs/img/ under `RALPH_WRITE_SCREENSHOTS=1`).

use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ralph_tests::SIGNAL;
use ralph_tests::bins::workspace_root;
use ralph_tests::browser::Browser;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, Usage, user_texts};
use ralph_tests::project::TempProject;
use ralph_tests::scenario::{Scenario, exits_with, wait_until};
use ralph_tests::serve::Served;
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

/// A mock whose iteration 1 says `first`, whose iteration 2 waits for the
/// gate (at most [`HOLD`]) before it says it fixed the parser, and whose
/// iteration 3 claims done; the gate.
fn held_at_iteration_2(first: &'static str) -> (Gate, MockApi) {
    let go = Gate::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text(first),
        1 => {
            held.wait();
            Reply::text("Fixed the parser.")
        }
        _ => Reply::text(format!("All done.\n{SIGNAL}")),
    });
    (go, api)
}

/// A fresh loop against a mock, its check saying [`CHECK_SAYS`], with
/// `ralph-ctl serve` and a browser on its page.
/// Its fields are dropped in the order they stand: the browser and the
/// server end before the project's folder goes.
struct LivePage {
    browser: Browser,
    served: Served,
    launcher: Child,
    scenario: Scenario,
}

impl LivePage {
    /// Starts the loop `name` against `api`, serves it and opens the page
    /// in the browser (which must answer 200).
    fn open(name: &str, api: &MockApi) -> LivePage {
        let config =
            format!(r#"{{"verify": [{{"name": "tests", "command": "echo '{CHECK_SAYS}'"}}]}}"#);
        let scenario = Scenario::configured(name, CLIENT, &config).fresh(&[]);
        let launcher = launch(&scenario, api);
        let served = Served::start(&scenario, &[]);
        let mut browser = Browser::start(&scenario);
        assert_eq!(browser.open(&served.url), 200);
        LivePage {
            browser,
            served,
            launcher,
            scenario,
        }
    }
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
    let (go, api) = held_at_iteration_2(
        "Looked around. <script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\">",
    );
    let mut live = LivePage::open("serve-live", &api);
    live.browser.eval("window.__loaded = 'once'");

    // Running, with the agent's markup as text.
    live.browser.wait_text(&selector("h2"), "running", SOON);
    let page = live.browser.wait_text(
        &selector(".body"),
        "<script>window.__pwned = 1</script>",
        SOON,
    );
    assert!(page.contains("onerror"), "{page}");
    assert_eq!(
        live.browser
            .eval("document.querySelectorAll('#loops script, #loops img').length"),
        0,
        "the agent's markup became elements"
    );

    // A note for the next iteration, from the page.
    live.browser
        .type_in(&selector("form.say input"), "Prefer the small fix.");
    live.browser.click(&selector("form.say button"));
    live.browser.wait_text(&selector(".message"), "noted", SOON);
    go.open();

    // Complete, with the check's output, in the same page.
    live.browser
        .wait_text(&selector(".status"), "complete", SOON);
    live.browser
        .wait_text(&selector(".verify-output"), CHECK_SAYS, SOON);
    assert_eq!(
        live.browser.eval("window.__loaded"),
        "once",
        "the page was reloaded"
    );
    assert_eq!(
        live.browser
            .eval("performance.getEntriesByType('navigation').length"),
        1
    );
    assert!(
        live.browser.eval("window.__pwned").is_null(),
        "the agent's script ran"
    );
    exits_with(&mut live.launcher, 0);

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
    let (go, api) = held_at_iteration_2("Looked around.");
    let mut live = LivePage::open("serve-silent", &api);
    live.browser.wait_text(&selector("h2"), "running", SOON);

    // A stranger (no token) announces a body and never sends it, and so
    // does a request with the token and the page's origin; both stay
    // open while the loop goes on.
    let mut stranger = live.served.hold(&format!(
        "POST /api/cancel HTTP/1.1\r\nHost: {}\r\nContent-Length: 100000\r\n\r\n",
        live.served.host()
    ));
    let mut silent = live.served.hold(&live.served.post_head("/api/say", 64));
    go.open();

    live.browser
        .wait_text(&selector(".status"), "complete", SOON);
    live.browser
        .wait_text(&selector(".verify-output"), CHECK_SAYS, SOON);
    exits_with(&mut live.launcher, 0);
    assert_eq!(api.main_requests().len(), 3, "three iterations");

    let (said, closed) = Served::answered(&mut stranger, Duration::from_secs(2));
    assert!(said.starts_with("HTTP/1.1 403"), "{said}");
    assert!(closed, "the stranger's connection was left open");
    let (said, closed) = Served::answered(&mut silent, Duration::from_secs(10));
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(closed, "the silent connection was left open");
    assert!(
        live.scenario.status_json()["hint"].is_null(),
        "no note left"
    );
}

/// The page's width in the screenshots and in what is measured.
const WIDTH: u32 = 1200;

/// A PNG of the whole page as `name`: into docs/img/ under
/// `RALPH_WRITE_SCREENSHOTS=1` (the pictures docs/serve.md shows), else
/// into the project's folder; either way it must hold a page.
fn screenshot(browser: &mut Browser, project: &TempProject, name: &str) {
    let path = if std::env::var("RALPH_WRITE_SCREENSHOTS").as_deref() == Ok("1") {
        workspace_root().join("docs/img").join(name)
    } else {
        project.path(name)
    };
    browser.screenshot(&path);
    let size = std::fs::metadata(&path).map_or(0, |m| m.len());
    assert!(
        size > 20_000,
        "the screenshot {} is all but empty: {size} bytes",
        path.display()
    );
}

/// The height of `selector`'s first element as laid out, in px (0 when
/// hidden).
fn height_of(browser: &mut Browser, selector: &str) -> u64 {
    let selector = serde_json::to_string(selector).unwrap();
    browser
        .eval(&format!("document.querySelector({selector}).offsetHeight"))
        .as_u64()
        .unwrap_or(u64::MAX)
}

/// The texts of every element `selector` finds, in order.
fn texts(browser: &mut Browser, selector: &str) -> Vec<String> {
    let selector = serde_json::to_string(selector).unwrap();
    let found = browser.eval(&format!(
        "Array.from(document.querySelectorAll({selector})).map(n => n.textContent)"
    ));
    serde_json::from_value(found).unwrap()
}

#[test]
fn a_single_loop_s_page_ends_with_no_empty_strip_of_controls() {
    let go = Gate::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("Read the parser and its tests; two cases fail on empty input.")
            .with_usage(Usage::tokens(4200, 900)),
        1 => Reply::text("Fixed the empty-input case; the quoted one is next.")
            .with_usage(Usage::tokens(6100, 1300)),
        _ => {
            held.wait();
            Reply::text(format!("Both cases fixed and tested.\n{SIGNAL}"))
                .with_usage(Usage::tokens(7400, 600))
        }
    });
    let config =
        format!(r#"{{"verify": [{{"name": "tests", "command": "echo '{CHECK_SAYS}'"}}]}}"#);
    let scenario = Scenario::configured("serve-one", CLIENT, &config).fresh(&[]);
    let mut launcher = launch(&scenario, &api);
    let served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);
    browser.viewport(WIDTH, 900);
    assert_eq!(browser.open(&served.url), 200);

    // Running, in its third iteration: its controls are there to use.
    browser.wait_text(&selector(".iteration"), "3", SOON);
    browser.wait_text(&selector(".body"), "the quoted one is next", SOON);
    assert!(height_of(&mut browser, &selector(".controls")) > 0);
    screenshot(&mut browser, &scenario, "serve-loop.png");
    go.open();

    // Ended: nothing to steer, and no empty strip where the controls were.
    browser.wait_text(&selector(".status"), "complete", SOON);
    browser.wait_text(&selector(".verify-output"), CHECK_SAYS, SOON);
    exits_with(&mut launcher, 0);
    assert_eq!(
        height_of(&mut browser, &selector(".controls")),
        0,
        "an empty strip of controls on a loop that ended"
    );
}

#[test]
#[allow(clippy::too_many_lines)] // one queue run followed on the page from start to finish
fn a_queue_run_is_one_table_of_its_items_each_folded_under_it() {
    const TITLES: [&str; 3] = [
        "Add the parser",
        "Write the usage notes",
        "Fix the flaky test",
    ];
    const SECOND_THOUGHT: &str = "Wrote a test that fails the same way; the fix is next.";
    let plan = format!(
        "# Plan\n\n- [ ] {}\n- [ ] {}\n- [ ] {}\n",
        TITLES[0], TITLES[1], TITLES[2]
    );
    let scenario = crate::queue::queue_project("serve-queue", CLIENT, &plan, json!({})).args(&[
        "--queue",
        "plan:PLAN.md",
        "--workers",
        "1",
    ]);
    // Each item: a commit, then done. The last one takes two iterations,
    // its second held until the test has looked at the running run.
    let go = Gate::default();
    let held = go.clone();
    let last_item_conversations = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let agent = crate::queue::committing_worker();
    let api = MockApi::start(move |turn, body| {
        let reply = if ralph_tests::mock_api::item_of(body).as_deref() == Some(TITLES[2]) {
            let seen = if turn == 0 {
                last_item_conversations.fetch_add(1, Ordering::SeqCst) + 1
            } else {
                last_item_conversations.load(Ordering::SeqCst)
            };
            match (seen, turn) {
                (1, 0) => agent(0, body),
                (1, _) => Reply::text(SECOND_THOUGHT),
                _ => {
                    held.wait();
                    agent(1, body)
                }
            }
        } else {
            agent(turn, body)
        };
        reply.with_usage(Usage::tokens(1500, 250))
    });
    let mut launcher = launch(&scenario, &api);
    let served = Served::start(&scenario, &[]);
    let mut browser = Browser::start(&scenario);
    browser.viewport(WIDTH, 900);
    assert_eq!(browser.open(&served.url), 200);

    // While the last item works: the run counts its iterations as they go
    // (two items of one iteration each, and the last one's two).
    browser.wait_text(
        &selector(".run-counts"),
        "3 items taken: 2 done, 1 working",
        SOON,
    );
    browser.wait_text(&selector(".run-summary"), "4 iterations of 25", SOON);
    let rows = selector("table.items tr.item");
    assert_eq!(texts(&mut browser, &format!("{rows} td.title")), TITLES);
    assert_eq!(
        texts(&mut browser, &format!("{rows} td.item-status")),
        ["done", "done", "working"]
    );
    let last = browser.wait_text(
        &format!("{rows}:last-child td.last-line"),
        SECOND_THOUGHT,
        SOON,
    );
    assert_eq!(last, SECOND_THOUGHT);
    // Each item's loop is folded under the table, headed by its title.
    let folds = selector(".folds > details.loop.item");
    let headings = texts(&mut browser, &format!("{folds} > summary"));
    assert_eq!(headings.len(), 3, "{headings:?}");
    for (heading, title) in headings.iter().zip(TITLES) {
        assert!(heading.starts_with(&format!("{title}: ")), "{headings:?}");
    }
    assert_eq!(
        browser.eval(&format!(
            "Array.from(document.querySelectorAll('{folds}')).filter(d => d.open).length"
        )),
        0,
        "an item unfolded"
    );
    // The run takes a note (for each item a worker is on) and a cancel;
    // each item's fold has its own.
    assert!(height_of(&mut browser, &format!("{MAIN} > .controls form.say")) > 0);
    assert!(height_of(&mut browser, &format!("{MAIN} > .controls button.cancel")) > 0);
    screenshot(&mut browser, &scenario, "serve-queue.png");
    go.open();

    // Finished: the run's tokens are its items', and nothing of a loop's
    // own iterations stands empty.
    browser.wait_text(&selector(".run-summary .status"), "complete", SOON);
    exits_with(&mut launcher, 0);
    browser.wait_text(&selector(".run-counts"), "3 items taken: 3 done", SOON);
    let state = scenario.status_json();
    let items = state["queue"]["items"].as_object().unwrap();
    let sum = |what: &str| -> u64 {
        items
            .values()
            .map(|i| i["usage"][what].as_u64().unwrap_or(0))
            .sum()
    };
    let (input, output) = (sum("input"), sum("output"));
    assert!(input > 0 && output > 0, "{state:#}");
    assert_eq!(state["usage"]["input"], input, "{state:#}");
    assert_eq!(state["usage"]["output"], output, "{state:#}");
    let facts = texts(&mut browser, &format!("{MAIN} > .body table.facts td"));
    let tokens = format!("{input} in, {output} out, ");
    assert!(
        facts.iter().any(|f| f.starts_with(&tokens)),
        "{tokens}: {facts:?}"
    );
    let main_body = browser
        .eval(&format!(
            "document.querySelector('{MAIN} > .body').textContent"
        ))
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        !main_body.contains("no iteration recorded yet"),
        "{main_body}"
    );
    assert_eq!(height_of(&mut browser, &format!("{MAIN} > .controls")), 0);
    // Folded, the finished page stays short.
    let height = browser.height();
    eprintln!("serve-queue: the finished page is {height} px tall at {WIDTH} px");
    assert!(height < 1200, "the finished page is {height} px tall");
    // An item unfolds to its own loop.
    browser.click(&format!("{folds}:first-of-type > summary"));
    let unfolded = browser.wait_text(
        &format!("{folds}:first-of-type .body"),
        "Add the parser is done.",
        SOON,
    );
    assert!(unfolded.contains("landed on main"), "{unfolded}");
    assert!(browser.height() > height, "unfolding it showed nothing");
}
