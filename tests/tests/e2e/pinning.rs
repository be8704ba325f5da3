//! End-to-end: what judges a loop is pinned when it starts. The agent (real
//! clients, `bypassPermissions`, no sandbox) tries to make its own command
//! the verification of `.claude/ralph/config.json`, then claims done. By
//! the Write tool (or a shell command naming the file) it is refused (the
//! deny rules every run passes); from a script the file changes, and the loop goes on judging by the
//! pinned config (the agent's command never runs, no `complete`), and
//! `status` shows the change with the fix. A person's change adopted by `ralph-ctl
//! reload` decides from the next stop. The in-session loop (the Stop hook)
//! and the fresh one (the driver) both.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, user_texts};
use ralph_tests::project::TempProject;
use ralph_tests::scenario::{Outcome, Scenario};

/// The project's own verification, which fails: the work is not done.
const FAILING: &str = r#"{"verify": [{"name": "tests", "command": "echo '1 test failed'; exit 1", "timeoutSeconds": 20}]}"#;

/// The claim every case's agent makes.
const CLAIM: &str = "Everything is finished and verified.";

/// A scenario whose verification is `config`, out of the sandbox (someone
/// else's concern here), at most two iterations.
fn pinned(name: &str, client: ClientVersion, config: &str) -> Scenario {
    Scenario::configured(name, client, config)
        .env("RALPH_SANDBOX", "off")
        .env("RALPH_MAX_ITERATIONS", "2")
}

/// The config the agent would rather have: its own command, which leaves
/// a marker file (the path given) if it runs.
fn agent_config(project: &TempProject) -> (String, PathBuf) {
    let marker = project.tmp.join("agent-ran");
    let agent = format!(
        r#"{{"verify": [{{"name": "tests", "command": "touch {}; exit 0", "timeoutSeconds": 20}}]}}"#,
        marker.display()
    );
    (agent, marker)
}

/// A Bash call that writes `content` into config.json from a script in the
/// temp folder: the client refuses a command naming a file under
/// .claude/ralph (the deny rules every run passes), and does not look into
/// a script, so this is the rewrite a determined agent without the sandbox
/// gets through.
fn rewrite_by_script(project: &TempProject, content: &str) -> Reply {
    let script = project.tmp.join("rewrite.sh");
    let config = project.path(".claude/ralph/config.json");
    let text = format!(
        "cat > {} <<'RALPH_TEST_EOF'\n{content}\nRALPH_TEST_EOF\n",
        config.display()
    );
    std::fs::write(&script, text).unwrap();
    Reply::bash(format!("sh {}", script.display()))
}

/// `call` first, then `then` at the next turn, then the claim at every later one.
fn call_then_claim(
    call: Reply,
    then: Option<&str>,
) -> impl Fn(usize, &serde_json::Value) -> Reply + Send + Sync + 'static + use<> {
    let then = then.map(Reply::text);
    move |turn, _| match (turn, &then) {
        (0, _) => call.clone(),
        (1, Some(reply)) => reply.clone(),
        _ => Reply::text(format!("{CLAIM}\n{SIGNAL}")),
    }
}

/// What every case checks once the loop ran: it ended at its cap, not
/// `complete`; the agent's command never ran though config.json now holds
/// it; status shows the change and the fix; the log has it once.
fn assert_not_obeyed(scenario: &Scenario, outcome: &Outcome, agent: &str, marker: &Path) {
    let on_disk = scenario.read(".claude/ralph/config.json");
    assert_eq!(on_disk.trim(), agent, "the agent's rewrite went through");
    assert_not_complete(outcome, marker);
    let drift = &outcome.state["configDrift"]["files"][0]["file"];
    assert_eq!(drift, ".claude/ralph/config.json", "{outcome:?}");
    assert_eq!(outcome.state["pinned"]["config"], FAILING, "{outcome:?}");
    let shown = ".claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it";
    scenario
        .ctl_exits(&["status"], 0)
        .assert_stdout_has(&[shown]);
    let log = scenario.audit_log();
    let changed = log.matches(r#""event":"config_changed""#).count();
    assert_eq!(changed, 1, "logged once for one content: {log}");
}

/// The loop ended at its cap, not `complete`, judged by the pinned
/// verification; the agent's command never ran.
fn assert_not_complete(outcome: &Outcome, marker: &Path) {
    outcome.ended(10, "max_iterations");
    assert_eq!(outcome.state["lastClaim"]["accepted"], false, "{outcome:?}");
    assert_verified_by(outcome, "1 test failed");
    assert!(!marker.exists(), "the agent's verify command ran");
}

/// Panics unless the last claim's verification printed `words`.
fn assert_verified_by(outcome: &Outcome, words: &str) {
    let verification = &outcome.state["lastClaim"]["verification"][0];
    let tail = verification["outputTail"].as_str().unwrap_or_default();
    assert!(tail.contains(words), "the pinned verify ran: {outcome:?}");
}

#[ralph_tests::on_both_clients(area_sample)]
fn an_agent_written_verify_by_the_write_tool_is_not_obeyed_in_session(client: ClientVersion) {
    let scenario = pinned("pin-write", client, FAILING);
    let (agent, marker) = agent_config(&scenario);
    let config = scenario
        .path(".claude/ralph/config.json")
        .display()
        .to_string();
    // Read first: the client refuses to overwrite a file it has not read.
    let read = Reply::ToolUse {
        name: "Read".to_string(),
        input: serde_json::json!({ "file_path": config }),
    };
    let write = Reply::write(config.clone(), agent);
    let api = MockApi::start(move |turn, _| match turn {
        0 => read.clone(),
        1 => write.clone(),
        _ => Reply::text(format!("{CLAIM}\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    // Refused: the deny rules on .claude/ralph hold in bypassPermissions.
    let requests = api.main_requests();
    let results = requests
        .iter()
        .flat_map(|r| user_texts(&r.body))
        .collect::<Vec<_>>();
    let results = results.join("\n");
    let refused = results.contains("denied by your permission settings");
    assert!(refused, "the Write was refused: {results}");
    let on_disk = std::fs::read_to_string(&config).unwrap();
    assert_eq!(on_disk, FAILING, "config.json is as the person wrote it");
    assert_not_complete(&outcome, &marker);
}

#[ralph_tests::on_both_clients]
fn an_agent_written_verify_by_a_bash_script_is_not_obeyed_in_session(client: ClientVersion) {
    let scenario = pinned("pin-bash", client, FAILING);
    let (agent, marker) = agent_config(&scenario);
    let rewrite = rewrite_by_script(&scenario, &agent);
    let outcome = scenario.run(&MockApi::start(call_then_claim(rewrite, None)));
    assert_not_obeyed(&scenario, &outcome, &agent, &marker);
}

#[ralph_tests::on_both_clients]
fn an_agent_written_verify_is_not_obeyed_in_a_fresh_loop(client: ClientVersion) {
    // By a script (the Write tool and a redirect naming the file are refused). Counted
    // across the fresh processes: the rewrite, then a claim in each.
    let scenario = pinned("pin-fresh", client, FAILING).fresh(&[]);
    let (agent, marker) = agent_config(&scenario);
    let rewrite = rewrite_by_script(&scenario, &agent);
    let outcome = scenario.run(&MockApi::start_in_order(call_then_claim(rewrite, None)));
    assert_not_obeyed(&scenario, &outcome, &agent, &marker);
}

/// `ralph-ctl reload`'s exit code and what it printed.
type Reloaded = (Option<i32>, String);

#[ralph_tests::on_both_clients]
fn a_persons_change_reloaded_mid_loop_decides_the_next_stop(client: ClientVersion) {
    let scenario = pinned("pin-reload", client, FAILING);
    let passing =
        r#"{"verify": [{"name": "tests", "command": "echo person-ok", "timeoutSeconds": 20}]}"#;
    // The person, between the first stop and the second: a new verify,
    // then `ralph-ctl reload`.
    let reloaded: Arc<Mutex<Option<Reloaded>>> = Arc::default();
    let seen = Arc::clone(&reloaded);
    let (root, home) = (scenario.root.clone(), scenario.home.clone());
    let api = MockApi::start(move |turn, _| {
        if turn == 1 && seen.lock().unwrap().is_none() {
            std::fs::write(root.join(".claude/ralph/config.json"), passing).unwrap();
            let mut reload = Command::new(ralph_tests::bins::ctl());
            reload.arg("reload").current_dir(&root).env("HOME", &home);
            let out = reload.output().unwrap();
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            *seen.lock().unwrap() = Some((out.status.code(), said));
        }
        Reply::text(format!("{CLAIM}\n{SIGNAL}"))
    });
    let outcome = scenario.run(&api);
    let (code, said) = reloaded.lock().unwrap().clone().expect("reloaded mid-loop");
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("verify: ") && said.contains("person-ok"),
        "{said}"
    );
    outcome.ended(0, "complete").at_iteration(2);
    assert_eq!(
        outcome.history()[0]["claim"]["accepted"],
        false,
        "{outcome:?}"
    );
    assert_verified_by(&outcome, "person-ok");
    assert_eq!(outcome.state["pinned"]["config"], passing, "{outcome:?}");
    assert!(outcome.state["configDrift"].is_null(), "{outcome:?}");
    let log = scenario.audit_log();
    assert!(log.contains(r#""event":"reload""#), "{log}");
    assert!(!log.contains(r#""event":"config_changed""#), "{log}");
}

#[ralph_tests::on_both_clients]
fn a_config_json_broken_mid_loop_neither_ends_nor_traps_the_loop(client: ClientVersion) {
    let passing =
        r#"{"verify": [{"name": "tests", "command": "echo all-passed", "timeoutSeconds": 20}]}"#;
    let scenario = Scenario::configured("pin-broken", client, passing).env("RALPH_SANDBOX", "off");
    let rewrite = rewrite_by_script(&scenario, "{not json");
    let script = call_then_claim(rewrite, Some("Broke the config, kept working."));
    let outcome = scenario.run(&MockApi::start(script));
    let on_disk = scenario.read(".claude/ralph/config.json");
    assert_eq!(on_disk.trim(), "{not json", "the agent's command ran");
    outcome.ended(0, "complete").at_iteration(2);
    assert_verified_by(&outcome, "all-passed");
    let problem = &outcome.state["configDrift"]["files"][0]["problem"];
    let shown = problem
        .as_str()
        .unwrap_or_default()
        .contains("is not valid JSON");
    assert!(shown, "the problem is shown: {outcome:?}");
}
