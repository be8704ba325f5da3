//! End-to-end: draining a backlog (`run --queue`) on the real clients,
//! through the launcher, against the mock: each item a fresh loop in its
//! own worktree, workers claiming items, the merge queue landing them one
//! at a time after the project's verify.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ralph_tests::LOOP_TIMEOUT;
use ralph_tests::client::ClientVersion;
use ralph_tests::listen::Heard;
use ralph_tests::mock_api::{MockApi, Reply, item_of, outcome_line, user_texts};
use ralph_tests::project::{
    git_out, processes_in_group, signal_group, signal_process, wait_with_timeout,
};
use ralph_tests::scenario::{Flag, Scenario, script, wait_until};
use serde_json::{Value, json};

/// The file an item's agent writes: its title, dashed.
pub(crate) fn file_of(title: &str) -> String {
    format!("{}.txt", title.replace(' ', "-"))
}

/// The agent of every item: commits `contents(title)` into the item's file,
/// then says the item is done (with the signal and its outcome).
pub(crate) fn worker_agent(
    contents: impl Fn(&str) -> (String, String) + Send + Sync + 'static,
) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    move |turn, body| {
        let Some(title) = item_of(body) else {
            return Reply::text("No item in sight.");
        };
        let commit = || {
            let (file, text) = contents(&title);
            Reply::bash(format!(
                "printf '%s\\n' '{text}' > {file} && git add {file} && git commit -q -m '{title}' && echo committed"
            ))
        };
        match turn {
            0 => commit(),
            _ => script::item_done(&format!("{title} is done."), body),
        }
    }
}

/// [`worker_agent`] writing each item's title into its [`file_of`].
pub(crate) fn committing_worker() -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    worker_agent(|title| (file_of(title), title.to_string()))
}

/// A plan of three items.
pub(crate) const THREE: &str = "# Plan\n\n- [ ] task 1\n- [ ] task 2\n- [ ] task 3\n";

/// [`committing_worker`] of every item, but the first conversation on task 1
/// hangs in a long command; the flag is set once it started.
pub(crate) fn hanging_on_task_1() -> (
    Flag,
    impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
) {
    let hung = Flag::default();
    let first_hang = hung.clone();
    let agent = committing_worker();
    let script = move |turn, body: &Value| {
        if turn == 0 && item_of(body).as_deref() == Some("task 1") && first_hang.first_set() {
            return Reply::bash("sleep 60");
        }
        agent(turn, body)
    };
    (hung, script)
}

/// Whether the last tool result says the client's sandbox could not start
/// the command (`bwrap: Can't …`): 2.1.330's sandboxes of two workers race
/// on the mount point they make for a missing `.git/config.lock`
/// (docs/protocol-notes.md) unless the run holds it.
fn sandbox_could_not_start(body: &Value) -> bool {
    user_texts(body)
        .last()
        .is_some_and(|text| text.contains("bwrap: Can't"))
}

/// How many conversations the mock saw for each item (first turns).
pub(crate) fn conversations_per_item(api: &MockApi) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for request in api.main_requests() {
        if request.turn == 0
            && let Some(title) = item_of(&request.body)
        {
            *seen.entry(title).or_insert(0) += 1;
        }
    }
    seen
}

/// A project with `plan` as PLAN.md, a verify command that logs the branch
/// it runs on (and fails on a file named `broken.txt`), `extra` config, and
/// everything committed on main.
pub(crate) fn queue_project(
    name: &str,
    client: ClientVersion,
    plan: &str,
    extra: Value,
) -> Scenario {
    let port = verify_log(name, client);
    let mut config = json!({
        "verify": [{
            "name": "check",
            "command": format!(
                "python3 -c 'import socket, sys; socket.create_connection((\"127.0.0.1\", {port})).sendall(sys.argv[1].encode())' \
                 \"$(git rev-parse --abbrev-ref HEAD) $(git log -1 --format=%s)\" && test ! -e broken.txt"
            ),
            // It reports to the test's listener on 127.0.0.1.
            "network": true,
        }],
    });
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    let scenario = Scenario::configured(name, client, &config.to_string()).file("PLAN.md", plan);
    scenario.commit_all("the plan");
    scenario
}

/// What the verify commands of each scenario (by name and client) sent:
/// a check's temp folder is its own and a queue item's worktree goes once
/// it lands, so each run reports to a listener of the test's on 127.0.0.1
/// (the check says `"network": true`).
fn verify_logs() -> &'static std::sync::Mutex<std::collections::HashMap<String, (u16, Heard)>> {
    static LOGS: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, (u16, Heard)>>,
    > = std::sync::OnceLock::new();
    LOGS.get_or_init(Default::default)
}

/// The port the verify command of scenario `name` on `client` reports to,
/// its listener started (or what it heard forgotten) on each use.
fn verify_log(name: &str, client: ClientVersion) -> u16 {
    let mut logs = verify_logs().lock().unwrap();
    let (port, heard) = logs
        .entry(format!("{name}-{client:?}"))
        .or_insert_with(Heard::tcp);
    heard.clear();
    *port
}

/// The lines the verify command logged (the branch each run was on).
fn verified_on(name: &str, client: ClientVersion) -> Vec<String> {
    let logs = verify_logs().lock().unwrap();
    logs.get(&format!("{name}-{client:?}"))
        .map(|(_, heard)| heard.all())
        .unwrap_or_default()
}

/// The scenario's launcher started against `api`, its output piped.
pub(crate) fn started(scenario: &Scenario, api: &MockApi) -> std::process::Child {
    let mut command = scenario.command(api);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.spawn().unwrap()
}

/// [`queue_project`] draining PLAN.md with `workers` workers.
fn plan_drain(
    name: &str,
    client: ClientVersion,
    plan: &str,
    extra: Value,
    workers: &str,
) -> Scenario {
    queue_project(name, client, plan, extra).args(&[
        "--queue",
        "plan:PLAN.md",
        "--workers",
        workers,
    ])
}

const FIVE: &str =
    "# Plan\n\n- [ ] task 1\n- [ ] task 2\n- [ ] task 3\n- [ ] task 4\n- [ ] task 5\n";

#[ralph_tests::on_both_clients(area_sample)]
#[allow(clippy::too_many_lines)] // one queue run, then each thing it must have done checked in turn
fn two_workers_drain_a_plan_each_item_once_verified_and_landed_in_turn(client: ClientVersion) {
    let scenario = plan_drain("queue-plan", client, FIVE, json!({}), "2");
    let root = scenario.path("");
    let api = MockApi::start(committing_worker());
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let stderr = &outcome.run.stderr;

    // Every item worked exactly once, by one of the two workers.
    let seen = conversations_per_item(&api);
    assert_eq!(seen.len(), 5, "{seen:?}\n{stderr}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 5, "{items:?}");
    let mut workers = std::collections::BTreeSet::new();
    for item in items.values() {
        assert_eq!(item["status"], "done", "{item}");
        assert_eq!(item["taken"], 1, "{item}");
        assert_eq!(item["iterations"], 1, "{item}");
        assert!(item["costUsd"].is_number(), "{item}");
        workers.insert(item["worker"].as_str().unwrap().to_string());
    }
    assert_eq!(
        workers.len(),
        2,
        "both workers took items: {workers:?}\n{stderr}"
    );

    // Landed in turn on main: each item's commit and its tick, a straight line.
    let subjects = git_out(&root, &["log", "--format=%s", "main"]);
    for n in 1..=5 {
        let title = format!("task {n}");
        assert_eq!(
            subjects.lines().filter(|s| *s == title).count(),
            1,
            "{subjects}\n{stderr}\n{}",
            outcome.run.stdout
        );
        assert!(
            subjects.contains(&format!("Tick {title} in PLAN.md")),
            "{subjects}"
        );
        assert_eq!(
            std::fs::read_to_string(root.join(file_of(&title)))
                .unwrap()
                .trim(),
            title
        );
    }
    assert_eq!(
        git_out(&root, &["rev-list", "--merges", "--count", "main"]),
        "0"
    );
    // The last line says where the items landed, not to commit them.
    let head = git_out(&root, &["rev-parse", "main"]);
    outcome.closing_has(&[&format!(
        "5 items landed on main, now at {}: already committed there",
        &head[..12]
    )]);
    let plan = std::fs::read_to_string(root.join("PLAN.md")).unwrap();
    assert_eq!(plan.matches("- [x] task").count(), 5, "{plan}");
    assert_eq!(
        git_out(&root, &["status", "--porcelain", "--", "PLAN.md"]),
        ""
    );

    // The verify ran once at the run's start (its test baseline), then on
    // each item's branch: in its new worktree (its own test baseline, at the
    // base as it was then), on its claim and, once, rebased and ticked, just
    // before it landed.
    let verified = verified_on("queue-plan", client);
    assert_eq!(
        verified.iter().filter(|l| l.starts_with("main ")).count(),
        1,
        "{verified:?}"
    );
    for n in 1..=5 {
        let claim = format!(" task {n}");
        let branch = verified
            .iter()
            .find(|l| l.starts_with("ralph/item-") && l.ends_with(&claim))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_else(|| panic!("no claim of task {n}: {verified:?}"));
        let on_branch: Vec<&String> = verified
            .iter()
            .filter(|l| l.starts_with(&format!("{branch} ")))
            .collect();
        assert_eq!(on_branch.len(), 3, "{verified:?}");
        assert!(!on_branch[0].contains(&format!("task {n}")), "{verified:?}");
        assert!(on_branch[1].ends_with(&claim), "{verified:?}");
        assert!(
            on_branch[2].ends_with(&format!(" Tick task {n} in PLAN.md")),
            "{verified:?}"
        );
    }
    // The run's log has each item taken and landed; status shows the queue.
    let log = scenario.ctl(&["log", "--json", "-n", "100"], &[]);
    let items: Vec<Value> = log
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "item")
        .collect();
    let said = |words: &str| {
        items
            .iter()
            .filter(|e| e["reason"].as_str().unwrap().contains(words))
            .count()
    };
    assert_eq!(
        (said("taken by"), said("done: landed on main")),
        (5, 5),
        "{}",
        log.stdout
    );
    scenario
        .ctl(&["status"], &[])
        .assert_stdout_has(&["queue:      plan:PLAN.md, 5 items taken: 5 done"]);
    // Nothing is left behind: no worktree, no item branch; and the
    // worktrees ralph removed itself are no git warning.
    assert_eq!(git_out(&root, &["branch", "--list", "ralph/*"]), "");
    assert!(!stderr.contains(" was removed"), "{stderr}");
    assert!(
        outcome.state["queue"]["items"]
            .as_object()
            .unwrap()
            .values()
            .all(|i| i["branch"]
                .as_str()
                .is_some_and(|b| b.starts_with("ralph/item-")))
    );
}

#[ralph_tests::on_both_clients]
fn a_branch_that_conflicts_is_kept_for_review_and_the_rest_lands(client: ClientVersion) {
    // Both items write shared.txt from the same base; the second to land conflicts.
    let plan = "# Plan\n\n- [ ] left side\n- [ ] right side\n";
    let scenario = plan_drain("queue-conflict", client, plan, json!({}), "2");
    let root = scenario.path("");
    // Each item's first answer waits until both have started, so that both
    // branches start from the same base.
    let started = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    let agent = worker_agent(|title| ("shared.txt".into(), title.to_string()));
    let seen = Arc::clone(&started);
    let api = MockApi::start(move |turn, body| {
        if turn == 0
            && let Some(title) = item_of(body)
        {
            seen.lock().unwrap().insert(title);
            wait_until(Duration::from_secs(30), || seen.lock().unwrap().len() == 2);
        }
        agent(turn, body)
    });
    let outcome = scenario.run(&api);
    outcome.ended(23, "complete");
    let items = outcome.queue_items();
    let done = outcome.items_with_status("done");
    let review = outcome.items_with_status("needs-review");
    assert_eq!(
        (done.len(), review.len()),
        (1, 1),
        "{items:?}\n{}",
        outcome.run.stderr
    );
    let why = review[0]["why"].as_str().unwrap();
    assert!(why.contains("conflicts with main in shared.txt"), "{why}");
    // Its branch is kept, with its own commit; main has the other side only.
    let branch = review[0]["branch"].as_str().unwrap();
    let title = review[0]["title"].as_str().unwrap();
    assert_eq!(git_out(&root, &["log", "-1", "--format=%s", branch]), title);
    let landed = done[0]["title"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("shared.txt"))
            .unwrap()
            .trim(),
        landed
    );
    let plan = std::fs::read_to_string(root.join("PLAN.md")).unwrap();
    assert!(plan.contains(&format!("- [x] {landed}")), "{plan}");
    assert!(plan.contains(&format!("- [ ] {title}")), "{plan}");
    outcome.run.assert_stderr_has(&["needs-review", branch]);
    outcome.closing_has(&[
        "1 item landed on main, now at ",
        "1 needs review on its branch; `ralph-ctl queue plan:PLAN.md` lists each with why",
    ]);
}

#[ralph_tests::on_both_clients]
fn a_killed_worker_s_item_is_taken_up_after_its_claim_lapses_by_a_joined_process(
    client: ClientVersion,
) {
    // Two processes on one project, one worker each; the first is killed
    // (SIGKILL) while its client works on the first item.
    let lapsing = json!({"claimTtlSeconds": 3});
    let scenario = plan_drain("queue-killed", client, THREE, lapsing, "1");
    let (hung, agent) = hanging_on_task_1();
    let api = MockApi::start(agent);
    let spawn = || started(&scenario, &api);
    let mut first = spawn();
    let working = || {
        scenario.state().is_some_and(|s| {
            s["queue"]["items"]
                .as_object()
                .is_some_and(|items| items.values().any(|i| i["title"] == "task 1"))
        })
    };
    assert!(
        wait_until(LOOP_TIMEOUT, working),
        "the first process never took task 1"
    );
    let mut second = spawn();
    assert!(
        wait_until(LOOP_TIMEOUT, || hung.is_set()),
        "task 1's client never started"
    );
    // The launcher script execs ralph-ctl: its pid is the driver's.
    signal_process(first.id(), libc::SIGKILL);
    let _ = wait_with_timeout(&mut first, LOOP_TIMEOUT);
    let (status, _out, err) = wait_with_timeout(&mut second, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    assert!(err.contains("joining the queue run"), "{err}");
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state}");
    let items = state["queue"]["items"].as_object().unwrap();
    assert!(items.values().all(|i| i["status"] == "done"), "{items:?}");
    let task1 = items.values().find(|i| i["title"] == "task 1").unwrap();
    assert_eq!(task1["taken"], 2, "{task1}");
    // No item but the killed one was worked twice.
    let seen = conversations_per_item(&api);
    assert_eq!(seen.get("task 1"), Some(&2), "{seen:?}");
    assert_eq!(seen.get("task 2"), Some(&1), "{seen:?}");
    assert_eq!(seen.get("task 3"), Some(&1), "{seen:?}");
    // The killed process's hold on the git configuration was taken over by
    // the joined one, which let it go at the end.
    assert!(!scenario.path(".git/config.lock").exists());
    scenario.git(&["config", "ralph.after", "yes"]);
}

#[ralph_tests::on_both_clients]
fn two_processes_on_one_project_never_work_the_same_item(client: ClientVersion) {
    let plan = "# Plan\n\n- [ ] task 1\n- [ ] task 2\n- [ ] task 3\n- [ ] task 4\n";
    let scenario = plan_drain("queue-two", client, plan, json!({}), "1");
    let api = MockApi::start(committing_worker());
    let spawn = || started(&scenario, &api);
    let mut first = spawn();
    assert!(wait_until(LOOP_TIMEOUT, || scenario.state().is_some()));
    let mut second = spawn();
    let (one, _, one_err) = wait_with_timeout(&mut first, LOOP_TIMEOUT);
    let (two, _, two_err) = wait_with_timeout(&mut second, LOOP_TIMEOUT);
    assert_eq!(one.and_then(|s| s.code()), Some(0), "{one_err}");
    assert_eq!(two.and_then(|s| s.code()), Some(0), "{two_err}");
    let seen = conversations_per_item(&api);
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.values().all(|n| *n == 1),
        "{seen:?}\n{one_err}\n{two_err}"
    );
    let state = scenario.status_json();
    assert_eq!(state["status"], "complete", "{state}");
    let workers: std::collections::BTreeSet<String> = state["queue"]["items"]
        .as_object()
        .unwrap()
        .values()
        .map(|i| {
            i["worker"]
                .as_str()
                .unwrap()
                .split('-')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(workers.len(), 2, "both processes worked items: {state}");
}

#[test]
fn ctrl_c_stops_every_worker_s_client_and_frees_their_items() {
    let client = ClientVersion::V2_1_330;
    let plan = THREE;
    let scenario = plan_drain("queue-ctrl-c", client, plan, json!({}), "2");
    // Every item's agent starts a long command.
    let stopped = Arc::new(AtomicBool::new(false));
    let after = Arc::clone(&stopped);
    let agent = committing_worker();
    let api = MockApi::start(move |turn, body| {
        if after.load(Ordering::SeqCst) {
            agent(turn, body)
        } else {
            Reply::bash("sleep 60")
        }
    });
    let mut command = scenario.command(&api);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = command.spawn().unwrap();
    let both = || api.main_requests().len() >= 2;
    assert!(
        wait_until(LOOP_TIMEOUT, both),
        "the two workers' clients never asked"
    );
    // The long commands have started.
    std::thread::sleep(Duration::from_secs(2));
    // What a terminal does on Ctrl-C: SIGINT to the whole foreground group.
    signal_group(launcher.id(), libc::SIGINT);
    let (status, _out, err) = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(130), "{err}");
    let state = scenario.status_json();
    assert_eq!(state["status"], "interrupted", "{state}");
    let items = state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        items.values().all(|i| i["status"] == "released"),
        "{items:?}"
    );
    // Their claims were given up at once, not left to lapse.
    let claims: Value =
        serde_json::from_str(&std::fs::read_to_string(scenario.queue_claims_path()).unwrap())
            .unwrap();
    for record in claims["items"].as_object().unwrap().values() {
        assert_eq!(record["status"], "claimed", "{claims}");
        assert!(
            record["expiresAt"].as_str() <= Some(state["endedAt"].as_str().unwrap()),
            "{claims}\n{state}"
        );
    }
    // The git configuration is the person's again.
    assert!(!scenario.path(".git/config.lock").exists());
    // No client, tool command or watchdog is left.
    let gone = || processes_in_group(launcher.id()).is_empty();
    assert!(
        wait_until(Duration::from_secs(15), gone),
        "{:?}",
        processes_in_group(launcher.id())
    );
    // The closing line's next step, run as printed, takes the queue up:
    // `run --resume` too goes on as the queue run it was.
    let closing = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        closing
            .contains("`ralph-ctl run --queue plan:PLAN.md --workers 2` takes up the items left"),
        "{err}"
    );
    stopped.store(true, Ordering::SeqCst);
    let resumed = scenario.run_with(&api, &["--resume"]);
    resumed.run.assert_stderr_has(&[
        "resuming the way the loop ran: as the queue run it was (--queue 'plan:PLAN.md' --workers 2 --merge rebase)",
    ]);
    resumed.ended(0, "complete");
    let items = resumed.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(items.values().all(|i| i["status"] == "done"), "{items:?}");
    resumed.closing_has(&["3 items landed on main"]);
}

#[ralph_tests::on_both_clients]
fn a_queue_in_a_project_never_set_up_sets_it_up_before_it_claims(client: ClientVersion) {
    // A Python project with passing tests and a plan, ralph never
    // installed; `run --queue` without a terminal (as under nohup).
    let project = ralph_tests::project::TempProject::new("queue-bare");
    project.write("calc.py", "def add(a, b):\n    return a + b\n");
    project.write(
        "test_calc.py",
        "import unittest\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n",
    );
    project.write("PLAN.md", "# Plan\n\n- [ ] task 1\n- [ ] task 2\n");
    project.write(".gitignore", "__pycache__/\n");
    project.commit_all("the plan");
    assert!(!project.path(".claude").exists());
    let api = MockApi::start(committing_worker());
    let mut command = project.command(ralph_tests::bins::ctl());
    command
        .args([
            "run",
            "--queue",
            "plan:PLAN.md",
            "--",
            "--permission-mode",
            "bypassPermissions",
        ])
        .envs(project.client_env(client, &api));
    let run = ralph_tests::project::run_with_timeout(command, None, LOOP_TIMEOUT);
    // Set up as `run --task` does, the tests found taken as the check.
    run.assert_stdout_has(&[
        "No terminal to ask in: the test command found, `python3 -m unittest`",
    ]);
    let config = project.read(".claude/ralph/config.json");
    assert!(config.contains("python3 -m unittest"), "{config}");
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{state:#}");
    let items = state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(
        items.values().all(|i| i["status"] == "done"),
        "{items:?}\n{run:?}"
    );
    let head = git_out(&project.path(""), &["rev-parse", "main"]);
    let closing = run.closing_line();
    assert!(
        closing.contains(&format!("2 items landed on main, now at {}", &head[..12])),
        "{run:?}"
    );
}

#[ralph_tests::on_both_clients]
fn a_folder_s_items_stay_on_their_branches_with_merge_none_and_a_skip_is_recorded(
    client: ClientVersion,
) {
    let scenario = queue_project("queue-dir", client, "# Plan\n", json!({}))
        .file("backlog/T-1", "# Add one\n\nWrite one.txt.\n")
        .file("backlog/T-2", "# Obsolete thing\n")
        .args(&["--queue", "dir:backlog", "--merge", "none"]);
    scenario.commit_all("the backlog");
    let root = scenario.path("");
    let before = git_out(&root, &["rev-parse", "main"]);
    let agent = committing_worker();
    let api = MockApi::start(move |turn, body| {
        if item_of(body).as_deref() == Some("Obsolete thing") {
            return Reply::text(format!(
                "This is done already.\n{}",
                outcome_line("skip", body)
            ));
        }
        agent(turn, body)
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let items = &outcome.state["queue"]["items"];
    assert_eq!(items["T-1"]["status"], "done", "{items}");
    assert!(
        items["T-1"]["why"]
            .as_str()
            .unwrap()
            .contains("--merge none"),
        "{items}"
    );
    assert_eq!(items["T-2"]["status"], "skipped", "{items}");
    // Nothing landed: main is where it was, the finished item on its branch.
    assert_eq!(git_out(&root, &["rev-parse", "main"]), before);
    assert_eq!(
        git_out(&root, &["log", "-1", "--format=%s", "ralph/item-T-1"]),
        "Add one"
    );
    outcome
        .closing_has(&["1 item finished on its branch (ralph/…), not merged: review and merge it"]);
}

#[ralph_tests::on_both_clients]
fn an_item_said_done_with_no_change_does_not_land_as_done(client: ClientVersion) {
    // The agent of "task 2" says it is done, but its command never ran (as
    // when the client's sandbox could not start it) and it changed
    // nothing: the item is not ticked off as done.
    let plan = "# Plan\n\n- [ ] task 1\n- [ ] task 2\n";
    let scenario = plan_drain("queue-nothing", client, plan, json!({}), "1");
    let root = scenario.path("");
    let agent = committing_worker();
    let api = MockApi::start(move |turn, body| {
        if item_of(body).as_deref() == Some("task 2") {
            return script::item_done("task 2 is done.", body);
        }
        agent(turn, body)
    });
    let outcome = scenario.run(&api);
    outcome.ended(23, "complete");
    let items = outcome.queue_items();
    let second = items.iter().find(|i| i["title"] == "task 2").unwrap();
    assert_eq!(second["status"], "needs-review", "{second}");
    assert!(
        second["why"]
            .as_str()
            .unwrap()
            .contains("left no commit and no change"),
        "{second}"
    );
    let first = items.iter().find(|i| i["title"] == "task 1").unwrap();
    assert_eq!(first["status"], "done", "{first}");
    let plan = std::fs::read_to_string(root.join("PLAN.md")).unwrap();
    assert!(plan.contains("- [x] task 1"), "{plan}");
    assert!(plan.contains("- [ ] task 2"), "{plan}");
    outcome.closing_has(&["1 item landed on main", "1 needs review"]);
}

#[ralph_tests::on_both_clients]
fn the_run_s_budget_spans_its_items(client: ClientVersion) {
    // Each item's one iteration costs what the mock's usage comes to; the
    // run's budget is spent within the second item.
    let scenario = plan_drain(
        "queue-budget",
        client,
        THREE,
        json!({"maxCostUsd": 0.002}),
        "1",
    );
    let api = MockApi::start(committing_worker());
    let outcome = scenario.run(&api);
    outcome.ended(16, "budget_exhausted");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "the third item is never taken: {items:?}");
    let spent: f64 = items.values().map(|i| i["costUsd"].as_f64().unwrap()).sum();
    let run_cost = outcome.state["costUsd"].as_f64().unwrap();
    assert!((spent - run_cost).abs() < 1e-9, "{spent} {run_cost}");
    assert!(run_cost >= 0.002, "{run_cost}");
    assert_eq!(conversations_per_item(&api).get("task 3"), None);
}

#[ralph_tests::on_both_clients]
fn failed_items_in_a_row_end_the_run_at_its_error_budget(client: ClientVersion) {
    // An agent that never finishes: each item's loop ends at its one
    // iteration (maxIterationsPerItem), failed; two in a row (errorBudget)
    // end the run.
    let scenario = plan_drain(
        "queue-failing",
        client,
        THREE,
        json!({"maxIterationsPerItem": 1}),
        "1",
    );
    let api = MockApi::start(|_, _| Reply::text("Still looking into it."));
    let outcome = scenario.run(&api);
    outcome.ended(19, "error_budget_exhausted");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    for item in items.values() {
        assert_eq!(item["status"], "failed", "{item}");
        assert!(
            item["why"].as_str().unwrap().contains("max_iterations"),
            "{item}"
        );
        assert_eq!(item["iterations"], 1, "{item}");
    }
    assert!(
        outcome.state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("2 items in a row failed"),
        "{}",
        outcome.state
    );
    // The run's own loop never stops (its items do): no "last stop" line.
    let status = scenario.ctl(&["status"], &[]);
    status.assert_stdout_has(&["queue:"]);
    assert!(!status.stdout.contains("last stop"), "{status:?}");
}

#[ralph_tests::on_both_clients]
fn an_agent_that_moves_the_base_itself_is_named_when_its_item_lands(client: ClientVersion) {
    // Task 1's agent commits, then points main at its own commit: work on
    // the base that no verify ran on. The merge queue finds the base moved.
    let plan = "# Plan\n\n- [ ] task 1\n- [ ] task 2\n";
    let scenario = plan_drain("queue-cheat", client, plan, json!({}), "1");
    let agent = committing_worker();
    let api = MockApi::start(move |turn, body| {
        if turn == 1 && item_of(body).as_deref() == Some("task 1") {
            return Reply::bash("git update-ref refs/heads/main HEAD && echo moved");
        }
        let turn = if turn >= 2 && item_of(body).as_deref() == Some("task 1") {
            turn - 1
        } else {
            turn
        };
        agent(turn, body)
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    let task1 = items.values().find(|i| i["title"] == "task 1").unwrap();
    let why = task1["why"].as_str().unwrap();
    assert!(
        why.contains("main had moved outside the merge queue"),
        "{why}\n{}",
        outcome.run.stdout
    );
    outcome
        .run
        .assert_stderr_has(&["warning: main had moved outside the merge queue"]);
    let task2 = items.values().find(|i| i["title"] == "task 2").unwrap();
    assert!(
        !task2["why"].as_str().unwrap().contains("moved outside"),
        "{task2}"
    );
}

/// Workers whose agents run many commands at once: none fails because the
/// sandboxes of two clients start together, each commit lands, and the git
/// configuration, held for the run (`git config` refused meanwhile, as
/// the run's start says), is the person's again after it.
#[test]
fn sandboxed_workers_commands_never_fail_on_the_sandbox_s_git_paths() {
    let client = ClientVersion::V2_1_330;
    let plan: String = (1..=8).fold("# Plan\n\n".to_string(), |plan, n| {
        plan + &format!("- [ ] task {n}\n")
    });
    let scenario = plan_drain("queue-git-paths", client, &plan, json!({}), "2");
    let root = scenario.path("");
    let refused_meanwhile = Arc::new(Mutex::new(Vec::<String>::new()));
    let failed = Arc::new(Mutex::new(Vec::<String>::new()));
    let (refused, failures) = (Arc::clone(&refused_meanwhile), Arc::clone(&failed));
    const COMMANDS: usize = 6;
    let api = MockApi::start(move |turn, body| {
        let Some(title) = item_of(body) else {
            return Reply::text("No item in sight.");
        };
        if sandbox_could_not_start(body) {
            failures
                .lock()
                .unwrap()
                .push(user_texts(body).pop().unwrap());
        }
        if turn == 1 {
            // The person's `git config` while the workers run.
            let out = Command::new("git")
                .args(["config", "ralph.meanwhile", "yes"])
                .current_dir(&root)
                .output()
                .unwrap();
            refused
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let file = file_of(&title);
        match turn {
            0..COMMANDS => Reply::bash(format!(
                "echo {turn} >> {file} && git add {file} && git commit -q -m '{title} {turn}' && echo committed"
            )),
            _ => script::item_done(&format!("{title} is done."), body),
        }
    });
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    assert_eq!(*failed.lock().unwrap(), Vec::<String>::new());
    outcome.run.assert_stderr_has(&[
        "git: .git/config.lock is held while the workers' clients run sandboxed",
    ]);
    let subjects = git_out(&scenario.path(""), &["log", "--format=%s", "main"]);
    for n in 1..=8 {
        for turn in 0..COMMANDS {
            let subject = format!("task {n} {turn}");
            assert!(
                subjects.lines().any(|s| s == subject),
                "{subject}: {subjects}"
            );
        }
    }
    let refused = refused_meanwhile.lock().unwrap();
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|e| e.contains("could not lock config file")),
        "{refused:?}"
    );
    assert!(!scenario.path(".git/config.lock").exists());
    scenario.git(&["config", "ralph.after", "yes"]);
}

#[test]
fn a_worker_takes_no_item_once_another_ended_the_run() {
    // Two workers, two items, an agent that never finishes: item a fails at
    // its one iteration, and one failure is the run's error budget. The
    // source holds back the third reading (worker B's; the start reads it
    // once, worker A the second time) until the run is over, so B claims
    // b after A's failure ended the run: b must not be taken.
    let client = ClientVersion::V2_1_330;
    let source = r#"n=1; while ! mkdir ".reads-$n" 2>/dev/null; do n=$((n+1)); done
if [ "$n" -ge 3 ]; then
  i=0
  while [ $i -lt 300 ] && python3 -c 'import json, sys; sys.exit(json.load(open(".claude/context/runtime/ralph-state.json"))["status"] != "running")'; do
    sleep 0.1; i=$((i+1))
  done
fi
printf '%s' '[{"id": "a", "title": "task a", "body": "a"}, {"id": "b", "title": "task b", "body": "b"}]'
"#;
    let scenario = queue_project(
        "queue-ended-take",
        client,
        "# Plan\n",
        json!({"maxIterationsPerItem": 1, "errorBudget": 1}),
    )
    .file("items.sh", source)
    .args(&["--queue", "cmd:sh items.sh", "--workers", "2"]);
    let api = MockApi::start(|_, _| Reply::text("Still looking into it."));
    let outcome = scenario.run(&api);
    outcome.ended(19, "error_budget_exhausted");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(
        items.keys().collect::<Vec<_>>(),
        ["a"],
        "only a is taken: {items:?}"
    );
    assert_eq!(conversations_per_item(&api).get("task b"), None);
    assert!(
        scenario.path(".reads-3").is_dir(),
        "worker B read the source after the run ended"
    );
}

#[test]
fn a_config_lock_left_by_a_killed_run_goes_at_the_next_status() {
    // A queue run killed outright (SIGKILL, its clients with it) leaves
    // the `.git/config.lock` it held: the person's `git config` fails on
    // it until the next ralph command that looks removes it, and says so.
    let client = ClientVersion::V2_1_330;
    let plan = "# Plan\n\n- [ ] task 1\n";
    let scenario = plan_drain("queue-killed-lock", client, plan, json!({}), "1");
    let api = MockApi::start(|_, _| Reply::bash("sleep 60"));
    let mut command = scenario.command(&api);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut launcher = command.spawn().unwrap();
    let lock = scenario.path(".git/config.lock");
    assert!(
        wait_until(LOOP_TIMEOUT, || !api.main_requests().is_empty()),
        "the worker's client never asked"
    );
    assert!(lock.exists(), "a sandboxed queue run holds the lock");
    signal_group(launcher.id(), libc::SIGKILL);
    let _ = wait_with_timeout(&mut launcher, LOOP_TIMEOUT);
    let git_config = || {
        Command::new("git")
            .args(["config", "ralph.after", "yes"])
            .current_dir(scenario.path(""))
            .output()
            .unwrap()
    };
    let refused = git_config();
    assert!(!refused.status.success(), "{refused:?}");
    assert!(lock.exists());
    let status = scenario.ctl(&["status"], &[]);
    assert!(
        status.stdout.contains("git: removed")
            && status
                .stdout
                .contains("config.lock, left by a queue run that was stopped outright"),
        "{status:?}"
    );
    assert!(!lock.exists());
    let works = git_config();
    assert!(works.status.success(), "{works:?}");
}

#[test]
fn with_two_workers_each_line_names_its_item_and_a_failure_is_said_once() {
    // Two workers write at once: every line of an item's work has its
    // title in front; an item that failed is said once, as it ends (its
    // detail is in status and the report).
    let client = ClientVersion::V2_1_330;
    let plan = "# Plan\n\n- [ ] break it\n- [ ] keep it\n";
    let scenario = plan_drain(
        "queue-screen",
        client,
        plan,
        json!({"maxIterationsPerItem": 2}),
        "2",
    );
    let api = MockApi::start(|turn, body| {
        let title = item_of(body).unwrap_or_default();
        let file = match title.as_str() {
            "break it" => "broken.txt".to_string(),
            _ => file_of(&title),
        };
        match turn {
            0 => Reply::bash(format!(
                "echo x > {file} && git add -A && git commit -qm '{title}' && echo committed"
            )),
            _ => script::item_done(&format!("{title} is done."), body),
        }
    });
    let outcome = scenario.run(&api);
    outcome.ended(23, "complete");
    let (out, err) = (&outcome.run.stdout, &outcome.run.stderr);
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            line.starts_with("[break it] ") || line.starts_with("[keep it] "),
            "{line:?} in\n{out}"
        );
    }
    assert!(err.contains("ralph: [keep it] worker "), "{err}");
    assert_eq!(
        err.matches("its loop ended max_iterations").count(),
        1,
        "the failure is said once: {err}"
    );
}

#[test]
fn an_item_s_advice_on_a_refused_call_fits_the_sandboxed_run() {
    // A sandboxed queue run's item whose agent keeps running a command the
    // client still asks approval for: its loop ends on the refusals, and
    // its advice never says to run with the sandbox the run already has.
    let client = ClientVersion::V2_1_330;
    let plan = "# Plan\n\n- [ ] check things\n";
    // No permission mode of the test's: the one ralph gives, as a person's run has.
    let scenario = queue_project("queue-advice", client, plan, json!({})).exact_args(&[
        "--queue",
        "plan:PLAN.md",
        "--workers",
        "1",
    ]);
    let api = MockApi::start(ralph_tests::scenario::script::call_then_say(
        Reply::bash(
            "if [ \"ops_sub\" = ops_neg ] && [ ! -e ops ]; then git status --short > /dev/null; fi; touch /etc/ralph-probe",
        ),
        "Still checking.",
    ));
    let outcome = scenario.run(&api);
    outcome.run.assert_stderr_has(&["sandbox: on"]);
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    let why = items.values().next().unwrap()["why"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(why.contains("for lack of permission"), "{outcome:?}");
    assert!(!why.contains("run with the sandbox"), "{why}");
    assert!(why.contains("the client's sandbox is on"), "{why}");
}
