//! End-to-end: formulas (`ralph-ctl run --formula NAME`) on the real
//! clients, through the launcher, against the mock answering in order
//! across processes: steps in order, each in fresh sessions of its own
//! model; a failing gate sending its step round again; a gate failing past
//! its retries ending the run `gate_failed`; a malformed formula refused
//! before any request.

use std::process::Command;
use std::time::Duration;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{user_texts, MockApi, Reply};
use ralph_tests::project::{run_with_timeout, TempProject};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};

#[test]
fn an_interrupted_formula_resumes_with_the_file_it_started_from() {
    a_formula_resumes_from_its_pinned_file(ClientVersion::V2_1_330);
}

/// The launcher running the formula `name`.
fn formula_launcher(
    project: &TempProject,
    client: ClientVersion,
    api: &MockApi,
    name: &str,
) -> Command {
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args(["--formula", name])
        .args(["--", "--permission-mode", "bypassPermissions"])
        .envs(project.client_env(client, api));
    cmd
}

fn write_formula(project: &TempProject, name: &str, text: &str) {
    let path = project.path(format!(".claude/ralph/formulas/{name}.yaml"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

const FEATURE: &str = r#"name: feature
steps:
  - id: plan
    model: opus
    prompt: "Plan the feature into PLAN.md."
  - id: implement
    model: sonnet
    prompt: "Implement the plan."
  - id: test
    model: haiku
    prompt: "Write and run the tests."
    maxIterations: 5
    gates:
      - { name: tests, command: "test -f tests-pass.txt || { echo 'FAILED: tests-pass.txt is missing'; exit 1; }", timeoutSeconds: 30 }
"#;

#[ralph_tests::on_both_clients]
fn three_steps_run_in_order_with_their_models_and_a_failing_gate_goes_round_again(
    client: ClientVersion,
) {
    let project = TempProject::new("formula");
    project.init();
    write_formula(&project, "feature", FEATURE);
    // Told once, when the run ends: a step that passes is no ending.
    project.write(
        ".claude/ralph/config.json",
        r#"{"notify": "cat >> notified.jsonl; echo >> notified.jsonl"}"#,
    );
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text(format!("Planned.\n{SIGNAL}")),
        1 => Reply::text(format!("Implemented.\n{SIGNAL}")),
        // The test step claims too early: its gate fails.
        2 => Reply::text(format!("Tests written.\n{SIGNAL}")),
        3 => Reply::bash("touch tests-pass.txt"),
        _ => Reply::text(format!("The tests pass now.\n{SIGNAL}")),
    });
    let run = run_with_timeout(
        formula_launcher(&project, client, &api, "feature"),
        None,
        LOOP_TIMEOUT,
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    assert_eq!(state["iteration"], 4, "{state:#}");
    let requests = api.main_requests();
    let models: Vec<String> = requests
        .iter()
        .map(|r| r.body["model"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(models.len(), 5, "{models:?}");
    for (i, family) in ["opus", "sonnet", "haiku", "haiku", "haiku"]
        .iter()
        .enumerate()
    {
        assert!(models[i].contains(family), "request {i}: {models:?}");
    }
    let texts: Vec<String> = requests
        .iter()
        .map(|r| user_texts(&r.body).join("\n"))
        .collect();
    assert!(
        texts[0].contains("Plan the feature into PLAN.md."),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("Implement the plan.") && texts[1].contains("step plan is done"),
        "{}",
        texts[1]
    );
    assert!(
        texts[2].contains("Write and run the tests."),
        "{}",
        texts[2]
    );
    // The test step went round again with its gate's failure in its text.
    assert!(
        texts[3].contains("Write and run the tests.")
            && texts[3].contains("FAILED: tests-pass.txt is missing"),
        "{}",
        texts[3]
    );
    let run_state = &state["formula"];
    assert_eq!(run_state["step"], 2, "{run_state:#}");
    let iterations: Vec<u64> = run_state["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["iterations"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [1, 1, 2], "{run_state:#}");
    let gate = &run_state["steps"][2]["gates"][0];
    assert_eq!(gate["failures"], 1, "{gate:#}");
    assert_eq!(gate["passed"], true, "{gate:#}");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let notified = loop {
        let text = std::fs::read_to_string(project.path("notified.jsonl")).unwrap_or_default();
        if text.ends_with("}\n") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    std::thread::sleep(Duration::from_millis(300));
    let notified = std::fs::read_to_string(project.path("notified.jsonl")).unwrap_or(notified);
    let endings: Vec<&str> = notified.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(endings.len(), 1, "{notified}");
    assert!(endings[0].contains("\"status\":\"complete\""), "{notified}");
    let log = project.ctl(&["log", "--json", "-n", "100"], &[]);
    log.assert_code(0);
    let log = log.stdout;
    assert_eq!(
        log.matches("\"event\":\"end\"").count(),
        1,
        "one ending in the log: {log}"
    );
    assert!(log.contains("step 2/3 implement starts"), "{log}");
    let status = project.ctl(&["status"], &[]);
    status.assert_stdout_has(&[
        "formula:    feature, step 3/3 test",
        "3. test: haiku, 2 iterations",
    ]);
}

#[ralph_tests::on_both_clients]
fn a_gate_failing_past_its_retries_ends_the_run_gate_failed(client: ClientVersion) {
    let project = TempProject::new("formula-gate");
    project.init();
    write_formula(
        &project,
        "lint",
        "steps:\n  - id: fix\n    model: haiku\n    prompt: Fix the lint.\n    gates:\n      - { name: lint, command: \"echo 'lint: 3 warnings'; exit 1\", retries: 1 }\n",
    );
    let api = MockApi::start_in_order(|_, _| Reply::text(format!("Fixed.\n{SIGNAL}")));
    let run = run_with_timeout(
        formula_launcher(&project, client, &api, "lint"),
        None,
        LOOP_TIMEOUT,
    );
    assert_eq!(run.code, Some(21), "{run:?}");
    let state = project.status_json();
    assert_eq!(state["status"], "gate_failed", "{state:#}");
    assert_eq!(state["iteration"], 2, "{state:#}");
    let why = state["endedBecause"].as_str().unwrap_or("");
    assert!(
        why.contains("gate lint of step fix failed 2 times, more than its retries (1)")
            && why.contains("lint: 3 warnings"),
        "{why}"
    );
    assert_eq!(api.main_requests().len(), 2);
    assert!(
        run.stderr
            .lines()
            .last()
            .unwrap_or("")
            .contains("gate_failed"),
        "{}",
        run.stderr
    );
}

#[ralph_tests::on_both_clients]
fn a_malformed_formula_is_refused_before_any_request(client: ClientVersion) {
    let project = TempProject::new("formula-bad");
    project.init();
    write_formula(
        &project,
        "bad",
        "steps:\n  - id: plan\n    prompt: Plan.\n  - id: plan\n    prompt: Again.\n",
    );
    let api = MockApi::start_in_order(|_, _| Reply::text("never"));
    let run = run_with_timeout(
        formula_launcher(&project, client, &api, "bad"),
        None,
        LOOP_TIMEOUT,
    );
    assert_eq!(run.code, Some(1), "{run:?}");
    run.assert_stderr_has(&["bad.yaml, line 4: the step id \"plan\" is used twice"]);
    assert!(api.requests().is_empty(), "no client ran");
    assert!(project.state().is_none(), "nothing was started");
}

fn a_formula_resumes_from_its_pinned_file(client: ClientVersion) {
    // feat.yaml says `name: other`, and an other.yaml exists: the resume
    // of a run of feat takes neither name but the file it started from,
    // and naming another formula on --resume is refused before anything.
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let project = TempProject::new("formula-resume");
    project.init();
    write_formula(
        &project,
        "feat",
        "name: other\nsteps:\n  - id: a\n    prompt: \"The feature step.\"\n",
    );
    write_formula(
        &project,
        "other",
        "name: other\nsteps:\n  - id: b\n    prompt: \"The other formula's step.\"\n",
    );
    let arrived = Arc::new(AtomicBool::new(false));
    let seen = Arc::clone(&arrived);
    let api = MockApi::start(move |_, _| {
        if !seen.swap(true, Ordering::SeqCst) {
            // Held while the test stops the launcher.
            std::thread::sleep(Duration::from_secs(2));
            return Reply::text("Working.");
        }
        Reply::text(format!("The feature is done.\n{SIGNAL}"))
    });
    let mut cmd = formula_launcher(&project, client, &api, "feat");
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + LOOP_TIMEOUT;
    while !arrived.load(Ordering::SeqCst) {
        assert!(std::time::Instant::now() < deadline, "no request came");
        std::thread::sleep(Duration::from_millis(25));
    }
    ralph_tests::project::signal_process(launcher.id(), libc::SIGTERM);
    let _ = ralph_tests::project::wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted", "{state:#}");
    let resume = |extra: &[&str]| {
        let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
        cmd.arg("--resume")
            .args(extra)
            .args(["--", "--permission-mode", "bypassPermissions"])
            .envs(project.client_env(client, &api));
        run_with_timeout(cmd, None, LOOP_TIMEOUT)
    };
    let served = api.main_requests().len();
    let refused = resume(&["--formula", "other"]);
    refused.assert_code(2);
    refused.assert_stderr_has(&["this loop runs the formula in .claude/ralph/formulas/feat.yaml"]);
    assert_eq!(
        api.main_requests().len(),
        served,
        "no request for a refused resume"
    );
    assert_eq!(project.status_json()["status"], "interrupted");
    let resumed = resume(&[]);
    resumed.assert_code(0);
    let requests = api.main_requests();
    let texts = user_texts(&requests.last().unwrap().body).join("\n");
    assert!(
        texts.contains("The feature step.") && !texts.contains("other formula"),
        "{texts}"
    );
    assert_eq!(project.status_json()["status"], "complete");
}
