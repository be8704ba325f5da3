//! End-to-end: `ralph-ctl report --html` of a loop the real client ran
//! (2.1.330, through the launcher), opened in a real headless browser: one
//! file, no network reference, and a screenshot that is not blank and shows
//! the tokens chart's bars. A loop interrupted and resumed lists each
//! iteration once; a note a cancelled loop never took is said undelivered.

use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, Usage, user_texts};
use ralph_tests::project::{TempProject, run_with_timeout, signal_process, wait_with_timeout};
use ralph_tests::scenario::{Flag, Scenario, exits_with, wait_until};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

#[test]
fn the_report_of_a_finished_loop_is_one_page_with_its_charts() {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::initialised("report");
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => {
            Reply::text("Read the code; <b>two</b> findings.").with_usage(Usage::tokens(1200, 300))
        }
        1 => Reply::text("Fixed one finding.").with_usage(Usage::tokens(2400, 500)),
        _ => Reply::text(format!("Both fixed.\n{SIGNAL}")).with_usage(Usage::tokens(3600, 200)),
    });
    let run = project.run_launcher(client, &api, &[], Duration::from_secs(120));
    run.assert_code(0);
    assert_eq!(project.status_json()["iteration"], 3);

    let page_path = project.path("ralph-report.html");
    project.ctl_exits(&["report", "--html", page_path.to_str().unwrap()], 0);
    let page = std::fs::read_to_string(&page_path).unwrap();
    assert!(
        page.contains("<svg id=\"tokens-chart\"") && page.contains("<svg id=\"breaker-chart\"")
    );
    assert!(page.contains("complete") && page.contains("Fixed one finding."));
    assert!(
        page.contains("&lt;b&gt;two&lt;/b&gt;"),
        "the agent's text is escaped"
    );
    for reference in [
        "http:", "https:", "src=", "href=", "url(", "@import", "<script", "<link",
    ] {
        assert!(!page.contains(reference), "the page refers to {reference}");
    }

    let browser = std::env::var("RALPH_TEST_BROWSER").unwrap_or_else(|_| "chromium".into());
    let shot = project.path("report.png");
    let mut cmd = project.command(&browser);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1100,900",
    ])
    .arg(format!("--screenshot={}", shot.display()))
    .arg(format!("file://{}", page_path.display()));
    let taken = run_with_timeout(cmd, None, Duration::from_secs(90));
    assert!(shot.is_file(), "no screenshot: {taken:?}");

    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let rgb: Vec<(u8, u8, u8)> = pixels[..info.buffer_size()]
        .chunks(channels)
        .map(|p| (p[0], p[1], p[2]))
        .collect();
    let distinct: std::collections::HashSet<_> = rgb.iter().collect();
    assert!(
        distinct.len() > 20,
        "the screenshot is blank: {} colours",
        distinct.len()
    );
    // The input bars (#2f6fdf) and the output bars (#f08c00) are on screen.
    let near = |(r, g, b): (u8, u8, u8), (tr, tg, tb): (u8, u8, u8)| {
        r.abs_diff(tr) <= 12 && g.abs_diff(tg) <= 12 && b.abs_diff(tb) <= 12
    };
    let blue = rgb.iter().filter(|p| near(**p, (0x2f, 0x6f, 0xdf))).count();
    let orange = rgb.iter().filter(|p| near(**p, (0xf0, 0x8c, 0x00))).count();
    assert!(
        blue > 500 && orange > 100,
        "the chart is not shown: {blue} blue, {orange} orange pixels"
    );
}

/// The loop iteration a request works on: the last `[Ralph loop: iteration
/// N of M]` header in its user messages.
fn iteration_of(body: &Value) -> Option<u32> {
    const HEADER: &str = "[Ralph loop: iteration ";
    user_texts(body).iter().rev().find_map(|text| {
        let at = text.rfind(HEADER)? + HEADER.len();
        text[at..].split(' ').next()?.parse().ok()
    })
}

/// The project's report, written and read back.
fn report_of(project: &TempProject) -> String {
    let path = project.path("ralph-report.html");
    project.ctl_exits(&["report", "--html", path.to_str().unwrap()], 0);
    std::fs::read_to_string(&path).unwrap()
}

/// The input tokens of each bar the chart draws for iteration `n`.
fn input_bars(page: &str, n: u32) -> Vec<u64> {
    let head = format!("<title>iteration {n}: ");
    page.match_indices(&head)
        .filter_map(|(at, _)| {
            let title = page[at + head.len()..].split("</title>").next()?;
            title.strip_suffix(" input tokens")?.parse().ok()
        })
        .collect()
}

/// The report's table of iterations.
fn iterations_table(page: &str) -> &str {
    page.split("<h2>Iterations</h2>")
        .nth(1)
        .and_then(|rest| rest.split("</table>").next())
        .unwrap_or_else(|| panic!("no table of iterations: {page}"))
}

#[test]
fn a_loop_interrupted_and_resumed_lists_each_iteration_once() {
    // Headless, in one session: iteration 2 is cut short by Ctrl-C to the
    // launcher while its client waits for the model, then resumed by hand.
    let scenario = Scenario::new("report-resumed", ClientVersion::V2_1_330)
        .env("RALPH_RESUME_POLICY", "manual");
    let cut = Flag::default();
    let cutting = cut.clone();
    let interrupted = Flag::default();
    let waiting = interrupted.clone();
    let api = MockApi::start(move |_, body| match iteration_of(body) {
        Some(1) => Reply::text("Read the code; two findings.").with_usage(Usage::tokens(1200, 300)),
        Some(2) if cutting.first_set() => {
            // Answered only once the launcher was interrupted: too late.
            let deadline = Instant::now() + Duration::from_secs(90);
            while !waiting.is_set() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            Reply::text("Too late.")
        }
        Some(2) => Reply::text("Fixed one finding.").with_usage(Usage::tokens(2400, 500)),
        _ => Reply::text(format!("Both fixed.\n{SIGNAL}")).with_usage(Usage::tokens(3600, 200)),
    });
    let mut launcher = scenario.start_until(&api, 2);
    assert!(
        wait_until(LOOP_TIMEOUT, || cut.is_set()),
        "iteration 2 never reached the API"
    );
    signal_process(launcher.id(), libc::SIGINT);
    let (status, _, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    interrupted.set();
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    assert_eq!(scenario.status_json()["status"], "interrupted", "{err}");

    let resumed = scenario.run_with(&api, &["--resume"]);
    resumed.ended(0, "complete").at_iteration(3);
    // The record keeps the interruption and the stop that went on.
    assert_eq!(
        resumed.decisions(),
        [(1, "block"), (2, "allow"), (2, "block"), (3, "allow")],
        "{resumed:?}"
    );

    let page = report_of(&scenario);
    // The chart: one bar for each iteration, none of them empty.
    let axis: Vec<&str> = page
        .split("text-anchor=\"middle\">")
        .skip(1)
        .map(|rest| rest.split('<').next().unwrap())
        .collect();
    assert_eq!(axis, ["1", "2", "3"], "the chart's axis");
    for n in 1..=3 {
        let bars = input_bars(&page, n);
        assert!(
            bars.len() == 1 && bars[0] > 0,
            "iteration {n}'s bars: {bars:?}"
        );
    }
    // The table: a row each, the interruption said in iteration 2's.
    let table = iterations_table(&page);
    let rows = table.matches("<tr").count() - 1;
    assert_eq!(rows, 3, "{table}");
    let row = table
        .split("<tr")
        .find(|row| row.contains("<td>2</td>"))
        .unwrap_or_default();
    assert!(
        row.contains("resumed after: Ctrl-C (SIGINT)")
            && row.contains("while the loop was running at iteration 2 of 25</span><br>"),
        "{row}"
    );
}

#[test]
fn a_note_a_cancelled_loop_never_took_is_said_undelivered() {
    const NOTE: &str = "Prefer the small fix.";
    let scenario = Scenario::new("report-note", ClientVersion::V2_1_330);
    let go = Flag::default();
    let held = go.clone();
    let api = MockApi::start_in_order(move |_, _| {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !held.is_set() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        Reply::text("Looked around; more to do.")
    });
    let mut launcher = scenario.start_until(&api, 1);
    scenario.ctl_exits(&["say", NOTE], 0);
    scenario.ctl_exits(&["cancel"], 0);
    go.set();
    exits_with(&mut launcher, 22);
    let state = scenario.status_json();
    assert_eq!(state["status"], "cancelled", "{state:#}");
    assert_eq!(state["hint"], NOTE, "the note was never sent: {state:#}");

    let page = report_of(&scenario);
    assert!(
        page.contains(&format!(
            "<th>note not delivered (the loop ended first)</th><td>{NOTE}</td>"
        )),
        "{page}"
    );
    assert!(!page.contains("note for the next iteration"), "{page}");
}
