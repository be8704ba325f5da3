//! End-to-end: `ralph-ctl report --html` of a loop the real client ran
//! (2.1.330, through the launcher), opened in a real headless browser: one
//! file, no network reference, and a screenshot that is not blank and shows
//! the tokens chart's bars.

use std::time::Duration;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, Usage};
use ralph_tests::project::{run_with_timeout, TempProject};
use ralph_tests::SIGNAL;

#[test]
fn the_report_of_a_finished_loop_is_one_page_with_its_charts() {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new("report");
    project.init();
    let usage = |input, output| Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_input_tokens: 0,
        cache_creation_input_tokens: 0,
    };
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::text("Read the code; <b>two</b> findings.").with_usage(usage(1200, 300)),
        1 => Reply::text("Fixed one finding.").with_usage(usage(2400, 500)),
        _ => Reply::text(format!("Both fixed.\n{SIGNAL}")).with_usage(usage(3600, 200)),
    });
    let run = project.run_launcher(client, &api, &[], Duration::from_secs(120));
    run.assert_code(0);
    assert_eq!(project.status_json()["iteration"], 3);

    let page_path = project.path("ralph-report.html");
    let report = project.ctl(&["report", "--html", page_path.to_str().unwrap()], &[]);
    report.assert_code(0);
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
