//! End-to-end: a loop whose tool calls the real client refuses for lack of
//! permission, and which changes nothing, ends by its third iteration
//! (`circuit_open`, exit 11), naming the refused calls and how to allow
//! them; in the fresh-context mode (the `-p` result's `permission_denials`)
//! and in-session headless (the refusals in the transcript's tool results).
//!
//! Both clients refuse `python3 -m unittest` and a compound `git add … &&
//! git commit …` in `--permission-mode acceptEdits` (`This command requires
//! approval`; `… The following parts require approval: git add a, git
//! commit -m a`).

use ralph_tests::LOOP_TIMEOUT;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::{Run, TempProject, run_with_timeout};

/// The agent's turn `turn` of an iteration of three: run the tests, commit,
/// then say so.
fn refused_agent(turn: usize) -> Reply {
    match turn % 3 {
        0 => Reply::bash("python3 -m unittest"),
        1 => Reply::bash("git add a && git commit -m a"),
        _ => Reply::text("The tests and the commit could not run."),
    }
}

/// Runs the launcher with `mode` (`--fresh` or `--headless`) in acceptEdits,
/// the client's sandbox off.
fn run_refused_loop(client: ClientVersion, name: &str, mode: &str) -> (TempProject, Run, MockApi) {
    let project = TempProject::initialised(name);
    project.write("a", "a\n");
    project.write("test_a.py", "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        self.assertTrue(True)\n");
    project.commit_all("tests");
    let api = MockApi::start(|turn, _| refused_agent(turn));
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args([mode, "--", "--permission-mode", "acceptEdits"])
        .env("RALPH_SANDBOX", "off")
        .envs(project.client_env(client, &api));
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    (project, run, api)
}

/// What both modes must show: the loop ended by the breaker by iteration
/// 3, and the closing line and the state name the refused calls and how
/// to allow them.
fn assert_ended_naming_the_refusals(project: &TempProject, run: &Run) {
    assert_eq!(run.code, Some(11), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "circuit_open", "{state:#}");
    let iteration = state["iteration"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&iteration),
        "ended by iteration 3: {state:#}"
    );
    let because = state["endedBecause"].as_str().unwrap();
    let closing = run
        .stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    for text in [because, closing] {
        for part in [
            "the client refused `Bash(python3 -m unittest)`, `Bash(git add a && git commit -m a)` for lack of permission in 2 iterations",
            "`--sandbox`",
            "apt-get install bubblewrap socat",
            r#"`"permissions": {"allow": ["Bash(python3 -m unittest:*)", "Bash(git add a:*)", "Bash(git commit -m a:*)"]}`"#,
            "`-- --permission-mode bypassPermissions`",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
    assert!(closing.contains("circuit_open"), "{closing}");
    // Nothing was committed: the refusals were real.
    let log = std::process::Command::new("git")
        .args(["log", "--oneline"])
        .current_dir(&project.root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).lines().count(),
        2,
        "no commit by the agent"
    );
}

#[ralph_tests::on_both_clients]
fn refused_test_and_commit_calls_end_a_fresh_loop_by_its_third_iteration(client: ClientVersion) {
    let (project, run, api) = run_refused_loop(client, "fresh-refused", "--fresh");
    assert_ended_naming_the_refusals(&project, &run);
    // One process per iteration, three requests each.
    let iteration = project.status_json()["iteration"].as_u64().unwrap();
    assert_eq!(api.main_requests().len() as u64, iteration * 3, "{run:?}");
}

#[ralph_tests::on_both_clients(area_sample)]
fn refused_test_and_commit_calls_end_a_headless_loop_by_its_third_iteration(client: ClientVersion) {
    let (project, run, _api) = run_refused_loop(client, "headless-refused", "--headless");
    assert_ended_naming_the_refusals(&project, &run);
}
