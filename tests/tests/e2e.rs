//! End-to-end: the real Claude Code client (both pinned versions), driven by
//! our launcher, against a scripted mock of the Messages API on 127.0.0.1,
//! with our hook registered by `ralph-ctl init` in a temp git project.
//!
//! Run one scenario alone with e.g. `cargo test -p ralph-tests --test e2e completes_on_signal`.

use std::time::Duration;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{stop_hook_feedback, MockApi, Reply};
use ralph_tests::project::TempProject;

const SIGNAL: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";
const LOOP_TIMEOUT: Duration = Duration::from_secs(120);

/// Generates one test per pinned client version.
macro_rules! on_both_clients {
    ($($name:ident),* $(,)?) => {
        mod v2_1_330 {
            $(#[test] fn $name() { super::$name(ralph_tests::client::ClientVersion::V2_1_330) })*
        }
        mod v2_0_77 {
            $(#[test] fn $name() { super::$name(ralph_tests::client::ClientVersion::V2_0_77) })*
        }
    };
}

on_both_clients!(completes_on_signal);

fn completes_on_signal(client: ClientVersion) {
    let project = TempProject::new("complete");
    project.init();
    project.write_prompt("Improve the project.\n");
    let api = MockApi::start(|turn, _| {
        if turn < 3 {
            Reply::text(format!("Worked on step {}.", turn + 1))
        } else {
            Reply::text(format!("All steps done.\n{SIGNAL}"))
        }
    });
    let run = project.run_launcher(client, &api, &[], LOOP_TIMEOUT);
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 4, "{state:#}");
    assert_eq!(api.main_requests().len(), 4);
    let last = api.main_requests().pop().unwrap();
    let fed_back = stop_hook_feedback(&last.body);
    assert_eq!(fed_back.len(), 3, "three re-injections: {fed_back:?}");
    assert!(
        fed_back[2].contains("iteration 4 of 25") && fed_back[2].contains("Improve the project."),
        "{}",
        fed_back[2]
    );
}
