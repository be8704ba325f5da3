//! End-to-end: what judges a loop is pinned when it starts. The agent (real
//! clients, `bypassPermissions`, no sandbox) tries to make its own command
//! the verification of `.claude/ralph/config.json`, then claims done. By
//! the Write tool (or a shell command naming the file) it is refused (the
//! deny rules every run passes); from a script the file changes, and the loop goes on judging by the
//! pinned config (the agent's command never runs, no `complete`), and
//! `status` shows the change with the fix. A person's change adopted by `ralph-ctl
//! reload` decides from the next stop. The in-session loop (the Stop hook)
//! and the fresh one (the driver) both.

use std::process::Command;
use std::sync::{Arc, Mutex};

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::{run_with_timeout, Run, TempProject};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

/// The sandbox is someone else's concern here.
const ENV: &[(&str, &str)] = &[("RALPH_SANDBOX", "off"), ("RALPH_MAX_ITERATIONS", "2")];
/// The project's own verification, which fails: the work is not done.
const FAILING: &str = r#"{"verify": [{"name": "tests", "command": "echo '1 test failed'; exit 1", "timeoutSeconds": 20}]}"#;

/// A project whose verification fails, and the config the agent would
/// rather have: its own command, which leaves a marker file if it runs.
fn project_and_agent_config(name: &str) -> (TempProject, String, std::path::PathBuf) {
    let project = TempProject::new(name);
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    project.write(".claude/ralph/config.json", FAILING);
    project.init();
    let marker = project.tmp.join("agent-ran");
    let agent = format!(
        r#"{{"verify": [{{"name": "tests", "command": "touch {}; exit 0", "timeoutSeconds": 20}}]}}"#,
        marker.display()
    );
    (project, agent, marker)
}

/// A Bash call that writes `content` into config.json from a script in the
/// temp folder: the client refuses a command naming a file under
/// .claude/ralph (the deny rules every run passes), and does not look into
/// a script, so this is the rewrite a determined agent without the sandbox
/// gets through.
fn rewrite_by_script(project: &TempProject, content: &str) -> String {
    let script = project.tmp.join("rewrite.sh");
    std::fs::write(
        &script,
        format!(
            "cat > {} <<'RALPH_TEST_EOF'\n{content}\nRALPH_TEST_EOF\n",
            project.path(".claude/ralph/config.json").display()
        ),
    )
    .unwrap();
    format!("sh {}", script.display())
}

/// A `Read` tool call of `file_path`.
fn read(file_path: &str) -> Reply {
    Reply::ToolUse {
        name: "Read".to_string(),
        input: serde_json::json!({ "file_path": file_path }),
    }
}

/// What every case checks once the loop ran: it ended at its cap, not
/// `complete`; the agent's command never ran though config.json now holds
/// it; status shows the change and the fix; the log has it once.
fn assert_not_obeyed(project: &TempProject, run: &Run, agent: &str, marker: &std::path::Path) {
    let on_disk = std::fs::read_to_string(project.path(".claude/ralph/config.json")).unwrap();
    assert_eq!(on_disk.trim(), agent, "the agent's rewrite went through");
    assert_not_complete(project, run, marker);
    let state = project.status_json();
    assert_eq!(
        state["configDrift"]["files"][0]["file"], ".claude/ralph/config.json",
        "{state:#}"
    );
    assert_eq!(state["pinned"]["config"], FAILING, "{state:#}");
    let status = project.ctl(&["status"], &[]);
    status.assert_code(0);
    assert!(
        status.stdout.contains(
            ".claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it"
        ),
        "{}",
        status.stdout
    );
    let log =
        std::fs::read_to_string(project.path(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    let changed: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "config_changed")
        .collect();
    assert_eq!(changed.len(), 1, "logged once for one content: {log}");
}

/// The loop ended at its cap, not `complete`, judged by the pinned
/// verification; the agent's command never ran.
fn assert_not_complete(project: &TempProject, run: &Run, marker: &std::path::Path) {
    assert_eq!(run.code, Some(10), "ended at the cap: {run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "max_iterations", "{state:#}");
    assert_eq!(state["lastClaim"]["accepted"], false, "{state:#}");
    let tail = state["lastClaim"]["verification"][0]["outputTail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        tail.contains("1 test failed"),
        "the pinned verify ran: {state:#}"
    );
    assert!(!marker.exists(), "the agent's verify command ran");
}

#[ralph_tests::on_both_clients]
fn an_agent_written_verify_by_the_write_tool_is_not_obeyed_in_session(client: ClientVersion) {
    let (project, agent, marker) = project_and_agent_config("pin-write");
    let config = project
        .path(".claude/ralph/config.json")
        .display()
        .to_string();
    let written = agent.clone();
    // Read first: the client refuses to overwrite a file it has not read.
    let api = MockApi::start(move |turn, _| match turn {
        0 => read(&config),
        1 => Reply::write(config.clone(), written.clone()),
        _ => Reply::text(format!("Everything is finished and verified.\n{SIGNAL}")),
    });
    let run = project.run_launcher(client, &api, ENV, LOOP_TIMEOUT);
    // Refused: the deny rules on .claude/ralph hold in bypassPermissions.
    let results = api
        .main_requests()
        .iter()
        .flat_map(|r| ralph_tests::mock_api::user_texts(&r.body))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        results.contains("denied by your permission settings"),
        "the Write was refused: {results}"
    );
    let on_disk = std::fs::read_to_string(project.path(".claude/ralph/config.json")).unwrap();
    assert_eq!(on_disk, FAILING, "config.json is as the person wrote it");
    assert_not_complete(&project, &run, &marker);
    let _ = agent;
}

#[ralph_tests::on_both_clients]
fn an_agent_written_verify_by_a_bash_script_is_not_obeyed_in_session(client: ClientVersion) {
    let (project, agent, marker) = project_and_agent_config("pin-bash");
    let command = rewrite_by_script(&project, &agent);
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text(format!("Everything is finished and verified.\n{SIGNAL}")),
    });
    let run = project.run_launcher(client, &api, ENV, LOOP_TIMEOUT);
    assert_not_obeyed(&project, &run, &agent, &marker);
}

#[ralph_tests::on_both_clients]
fn an_agent_written_verify_is_not_obeyed_in_a_fresh_loop(client: ClientVersion) {
    let (project, agent, marker) = project_and_agent_config("pin-fresh");
    // By a script (the Write tool and a redirect naming the file are refused). Counted
    // across the fresh processes: the rewrite, then a claim in each.
    let command = rewrite_by_script(&project, &agent);
    let api = MockApi::start_in_order(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text(format!("Everything is finished and verified.\n{SIGNAL}")),
    });
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.arg("--fresh")
        .args(["--", "--permission-mode", "bypassPermissions"])
        .envs(project.client_env(client, &api))
        .envs(ENV.iter().copied());
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    assert_not_obeyed(&project, &run, &agent, &marker);
}

/// `ralph-ctl reload`'s exit code and what it printed.
type Reloaded = (Option<i32>, String);

#[ralph_tests::on_both_clients]
fn a_persons_change_reloaded_mid_loop_decides_the_next_stop(client: ClientVersion) {
    let project = TempProject::new("pin-reload");
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    project.write(".claude/ralph/config.json", FAILING);
    project.init();
    let passing =
        r#"{"verify": [{"name": "tests", "command": "echo person-ok", "timeoutSeconds": 20}]}"#;
    // The person, between the first stop and the second: a new verify,
    // then `ralph-ctl reload`.
    let reloaded: Arc<Mutex<Option<Reloaded>>> = Arc::default();
    let seen = Arc::clone(&reloaded);
    let (root, home) = (project.root.clone(), project.home.clone());
    let api = MockApi::start(move |turn, _| {
        if turn == 1 && seen.lock().unwrap().is_none() {
            std::fs::write(root.join(".claude/ralph/config.json"), passing).unwrap();
            let out = Command::new(ralph_tests::bins::ctl())
                .arg("reload")
                .current_dir(&root)
                .env("HOME", &home)
                .output()
                .unwrap();
            *seen.lock().unwrap() = Some((
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            ));
        }
        Reply::text(format!("Everything is finished and verified.\n{SIGNAL}"))
    });
    let run = project.run_launcher(client, &api, ENV, LOOP_TIMEOUT);
    let (code, said) = reloaded.lock().unwrap().clone().expect("reloaded mid-loop");
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("verify: "), "{said}");
    assert!(said.contains("person-ok"), "{said}");
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    assert_eq!(state["history"][0]["claim"]["accepted"], false, "{state:#}");
    let tail = state["lastClaim"]["verification"][0]["outputTail"]
        .as_str()
        .unwrap_or_default();
    assert!(tail.contains("person-ok"), "{state:#}");
    assert_eq!(state["pinned"]["config"], passing, "{state:#}");
    assert!(state["configDrift"].is_null(), "{state:#}");
    let log =
        std::fs::read_to_string(project.path(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    assert!(log.contains(r#""event":"reload""#), "{log}");
    assert!(!log.contains(r#""event":"config_changed""#), "{log}");
}

#[ralph_tests::on_both_clients]
fn a_config_json_broken_mid_loop_neither_ends_nor_traps_the_loop(client: ClientVersion) {
    let project = TempProject::new("pin-broken");
    std::fs::create_dir_all(project.path(".claude/ralph")).unwrap();
    let passing =
        r#"{"verify": [{"name": "tests", "command": "echo all-passed", "timeoutSeconds": 20}]}"#;
    project.write(".claude/ralph/config.json", passing);
    project.init();
    let command = rewrite_by_script(&project, "{not json");
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        1 => Reply::text("Broke the config, kept working."),
        _ => Reply::text(format!("Everything is finished and verified.\n{SIGNAL}")),
    });
    let run = project.run_launcher(client, &api, &[("RALPH_SANDBOX", "off")], LOOP_TIMEOUT);
    let on_disk = std::fs::read_to_string(project.path(".claude/ralph/config.json")).unwrap();
    assert_eq!(on_disk.trim(), "{not json", "the agent's command ran");
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let tail = state["lastClaim"]["verification"][0]["outputTail"]
        .as_str()
        .unwrap_or_default();
    assert!(
        tail.contains("all-passed"),
        "the pinned verify ran: {state:#}"
    );
    let problem = state["configDrift"]["files"][0]["problem"]
        .as_str()
        .unwrap_or_default();
    assert!(
        problem.contains("is not valid JSON"),
        "the problem is shown: {state:#}"
    );
}
