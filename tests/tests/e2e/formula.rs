//! End-to-end: formulas (`ralph-ctl run --formula NAME`) on the real
//! clients, through the launcher, against the mock answering in order
//! across processes: steps in order, each in fresh sessions of its own
//! model; a failing gate sending its step round again; a gate failing past
//! its retries ending the run `gate_failed`; a malformed formula refused
//! before any request.

use std::time::Duration;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, RecordedRequest, Reply, user_texts};
use ralph_tests::project::{signal_process, wait_with_timeout};
use ralph_tests::scenario::{Flag, Scenario, wait_until};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};

#[test]
fn an_interrupted_formula_resumes_with_the_file_it_started_from() {
    a_formula_resumes_from_its_pinned_file(ClientVersion::V2_1_330);
}

/// A scenario with the formulas `(name, text)` written, the launcher
/// running the first of them.
fn formula(name: &str, client: ClientVersion, formulas: &[(&str, &str)]) -> Scenario {
    let scenario = Scenario::new(name, client).args(&["--formula", formulas[0].0]);
    formulas.iter().fold(scenario, |scenario, (name, text)| {
        scenario.file(format!(".claude/ralph/formulas/{name}.yaml"), text)
    })
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

#[ralph_tests::on_both_clients(area_sample)]
fn three_steps_run_in_order_with_their_models_and_a_failing_gate_goes_round_again(
    client: ClientVersion,
) {
    // Told once, when the run ends: a step that passes is no ending.
    let scenario = formula("formula", client, &[("feature", FEATURE)]).file(
        ".claude/ralph/config.json",
        r#"{"notify": "cat >> notified.jsonl"}"#,
    );
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text(format!("Planned.\n{SIGNAL}")),
        1 => Reply::text(format!("Implemented.\n{SIGNAL}")),
        // The test step claims too early: its gate fails.
        2 => Reply::text(format!("Tests written.\n{SIGNAL}")),
        3 => Reply::bash("touch tests-pass.txt"),
        _ => Reply::text(format!("The tests pass now.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(4);
    let requests = api.main_requests();
    let models: Vec<&str> = requests.iter().map(RecordedRequest::model).collect();
    let families = ["opus", "sonnet", "haiku", "haiku", "haiku"];
    assert_eq!(models.len(), families.len(), "{models:?}");
    for (i, family) in families.iter().enumerate() {
        assert!(models[i].contains(family), "request {i}: {models:?}");
    }
    let texts: Vec<String> = requests
        .iter()
        .map(|r| user_texts(&r.body).join("\n"))
        .collect();
    // The test step went round again with its gate's failure in its text.
    let wanted: [&[&str]; 4] = [
        &["Plan the feature into PLAN.md."],
        &["Implement the plan.", "step plan is done"],
        &["Write and run the tests."],
        &[
            "Write and run the tests.",
            "FAILED: tests-pass.txt is missing",
        ],
    ];
    for (text, needles) in texts.iter().zip(wanted) {
        assert!(
            needles.iter().all(|n| text.contains(n)),
            "{needles:?} in {text}"
        );
    }
    let run_state = &outcome.state["formula"];
    assert_eq!(run_state["step"], 2, "{run_state:#}");
    let steps = run_state["steps"].as_array().unwrap();
    let iterations: Vec<u64> = steps
        .iter()
        .map(|s| s["iterations"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [1, 1, 2], "{run_state:#}");
    let gate = &run_state["steps"][2]["gates"][0];
    assert_eq!(gate["failures"], 1, "{gate:#}");
    assert_eq!(gate["passed"], true, "{gate:#}");
    let notified = || std::fs::read_to_string(scenario.path("notified.jsonl")).unwrap_or_default();
    wait_until(Duration::from_secs(10), || notified().ends_with("}\n"));
    std::thread::sleep(Duration::from_millis(300));
    let notified = notified();
    let endings: Vec<&str> = notified.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(endings.len(), 1, "{notified}");
    assert!(endings[0].contains("\"status\":\"complete\""), "{notified}");
    let log = scenario.ctl(&["log", "--json", "-n", "100"], &[]);
    let log = log.assert_code(0).stdout.clone();
    let endings = log.matches("\"event\":\"end\"").count();
    assert_eq!(endings, 1, "one ending in the log: {log}");
    assert!(log.contains("step 2/3 implement starts"), "{log}");
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&[
        "formula:    feature, step 3/3 test",
        "3. test: haiku, 2 iterations",
    ]);
}

#[ralph_tests::on_both_clients]
fn a_gate_failing_past_its_retries_ends_the_run_gate_failed(client: ClientVersion) {
    let lint = "steps:\n  - id: fix\n    model: haiku\n    prompt: Fix the lint.\n    gates:\n      - { name: lint, command: \"echo 'lint: 3 warnings'; exit 1\", retries: 1 }\n";
    let scenario = formula("formula-gate", client, &[("lint", lint)]);
    let api = MockApi::start_in_order(|_, _| Reply::text(format!("Fixed.\n{SIGNAL}")));
    let outcome = scenario.run(&api);
    outcome.ended(21, "gate_failed").at_iteration(2);
    let why = outcome.state["endedBecause"].as_str().unwrap_or("");
    let retried = "gate lint of step fix failed 2 times, more than its retries (1)";
    assert!(
        why.contains(retried) && why.contains("lint: 3 warnings"),
        "{why}"
    );
    assert_eq!(api.main_requests().len(), 2);
    outcome.closing_has(&["gate_failed"]);
}

#[ralph_tests::on_both_clients]
fn a_malformed_formula_is_refused_before_any_request(client: ClientVersion) {
    let bad = "steps:\n  - id: plan\n    prompt: Plan.\n  - id: plan\n    prompt: Again.\n";
    let scenario = formula("formula-bad", client, &[("bad", bad)]);
    let api = MockApi::start_in_order(|_, _| Reply::text("never"));
    let refused = scenario.run(&api);
    refused.run.assert_code(1);
    refused
        .run
        .assert_stderr_has(&["bad.yaml, line 4: the step id \"plan\" is used twice"]);
    assert!(api.requests().is_empty(), "no client ran");
    assert!(scenario.state().is_none(), "nothing was started");
}

/// Starts the scenario and stops its launcher with SIGTERM while the mock
/// holds the first request (the one `arrived` flags), leaving the loop
/// `interrupted`; the requests the mock then holds in its log. The held
/// one is recorded once its script has answered, after the launcher may
/// have exited: counted before that, it would land among the next run's.
fn interrupt_while_held(scenario: &Scenario, api: &MockApi, arrived: &Flag) -> usize {
    let mut launcher = scenario.start_until(api, 1);
    assert!(
        wait_until(LOOP_TIMEOUT, || arrived.is_set()),
        "no request came"
    );
    signal_process(launcher.id(), libc::SIGTERM);
    let _ = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(scenario.status_json()["status"], "interrupted");
    assert!(
        wait_until(LOOP_TIMEOUT, || api.main_requests().len() == 1),
        "the held request was never recorded"
    );
    api.main_requests().len()
}

fn a_formula_resumes_from_its_pinned_file(client: ClientVersion) {
    // feat.yaml says `name: other`, and an other.yaml exists: the resume
    // of a run of feat takes neither name but the file it started from,
    // and naming another formula on --resume is refused before anything.
    let feat = "name: other\nsteps:\n  - id: a\n    prompt: \"The feature step.\"\n";
    let other = "name: other\nsteps:\n  - id: b\n    prompt: \"The other formula's step.\"\n";
    let scenario = formula(
        "formula-resume",
        client,
        &[("feat", feat), ("other", other)],
    );
    let arrived = Flag::default();
    let seen = arrived.clone();
    let api = MockApi::start(move |_, _| {
        if seen.first_set() {
            // Held while the test stops the launcher.
            std::thread::sleep(Duration::from_secs(2));
            return Reply::text("Working.");
        }
        Reply::text(format!("The feature is done.\n{SIGNAL}"))
    });
    let served = interrupt_while_held(&scenario, &api, &arrived);
    let refused = scenario.run_with(&api, &["--resume", "--formula", "other"]);
    refused.run.assert_code(2);
    refused
        .run
        .assert_stderr_has(&["this loop runs the formula in .claude/ralph/formulas/feat.yaml"]);
    let asked = api.main_requests().len();
    assert_eq!(asked, served, "no request for a refused resume");
    assert_eq!(refused.state["status"], "interrupted");
    let resumed = scenario.run_with(&api, &["--resume"]);
    resumed.ended(0, "complete");
    let requests = api.main_requests();
    let texts = user_texts(&requests.last().unwrap().body).join("\n");
    let own_step = texts.contains("The feature step.") && !texts.contains("other formula");
    assert!(own_step, "{texts}");
}

#[ralph_tests::on_both_clients]
fn from_a_step_runs_only_it_and_the_later_steps(client: ClientVersion) {
    // After fixing the plan by hand, the person starts at `implement`.
    let scenario = formula("formula-from", client, &[("feature", FEATURE)])
        .file("tests-pass.txt", "")
        .args(&["--formula", "feature", "--from", "implement"]);
    let api = MockApi::start_in_order(|turn, _| match turn {
        0 => Reply::text(format!("Implemented.\n{SIGNAL}")),
        _ => Reply::text(format!("The tests pass.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(2);
    let requests = api.main_requests();
    let models: Vec<&str> = requests.iter().map(RecordedRequest::model).collect();
    assert_eq!(models.len(), 2, "{models:?}");
    assert!(
        models[0].contains("sonnet") && models[1].contains("haiku"),
        "{models:?}"
    );
    let first = user_texts(&requests[0].body).join("\n");
    assert!(first.contains("Implement the plan."), "{first}");
    assert!(!first.contains("Plan the feature"), "{first}");
    let steps = &outcome.state["formula"]["steps"];
    assert_eq!(steps[0]["skipped"], true, "{steps}");
    assert_eq!(steps[0]["iterations"], 0, "{steps}");
    assert!(steps[1]["completedAt"].is_string(), "{steps}");
    assert!(steps[2]["completedAt"].is_string(), "{steps}");
    outcome
        .run
        .assert_stderr_has(&["starting at step implement; the steps before it are skipped"]);
    // A step the formula does not have is refused, naming the ones it has.
    let unknown = scenario.run_with(&api, &["--formula", "feature", "--from", "deploy"]);
    assert_eq!(unknown.run.code, Some(2), "{:?}", unknown.run);
    unknown
        .run
        .assert_stderr_has(&["has no such step; its steps are plan, implement, test"]);
    assert_eq!(
        api.main_requests().len(),
        2,
        "no request for a refused start"
    );
}

#[test]
fn a_resumed_formula_run_goes_on_from_the_step_named() {
    // Interrupted in `plan`, the run is taken up at `test`: plan and
    // implement are skipped, and only the test step's text is sent.
    let client = ClientVersion::V2_1_330;
    let scenario =
        formula("formula-resume-from", client, &[("feature", FEATURE)]).file("tests-pass.txt", "");
    let arrived = Flag::default();
    let seen = arrived.clone();
    let api = MockApi::start(move |_, body| {
        let text = user_texts(body).join("\n");
        if text.contains("Plan the feature") {
            seen.set();
            // Held while the test stops the launcher.
            std::thread::sleep(Duration::from_secs(2));
            return Reply::text("Planning.");
        }
        Reply::text(format!("The tests pass.\n{SIGNAL}"))
    });
    let served = interrupt_while_held(&scenario, &api, &arrived);
    let resumed = scenario.run_with(&api, &["--resume", "--from", "test"]);
    resumed.ended(0, "complete");
    resumed.run.assert_stderr_has(&["going on at step test"]);
    let later = &api.main_requests()[served..];
    assert_eq!(later.len(), 1, "one request, the test step's");
    let text = user_texts(&later[0].body).join("\n");
    assert!(text.contains("Write and run the tests."), "{text}");
    let steps = &resumed.state["formula"]["steps"];
    assert_eq!(
        (&steps[0]["skipped"], &steps[1]["skipped"]),
        (&serde_json::json!(true), &serde_json::json!(true)),
        "{steps}"
    );
}
