//! End-to-end: one backlog drained from several machines through a shared
//! git remote (`run --queue … --remote origin`): clones of one bare
//! repository, each its own project with its own `ralph-ctl` processes and
//! the real client, meeting only on the remote (claims and endings as
//! refs changed with a lease, landings as pushes to the base).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ralph_tests::LOOP_TIMEOUT;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::MockApi;
use ralph_tests::project::{TempProject, git_out, signal_process, wait_with_timeout};
use ralph_tests::scenario::{Scenario, wait_until};
use serde_json::{Value, json};

use super::queue::{
    THREE, committing_worker, conversations_per_item, hanging_on_task_1, queue_project, started,
};

/// `n` machines: the first a queue project with `plan` (and `extra`
/// config) pushed to a bare remote beside it, the others clones of that
/// remote (each a project of its own, ralph as the first committed it);
/// every one draining PLAN.md with `workers` workers through `origin`.
fn machines(
    name: &str,
    client: ClientVersion,
    plan: &str,
    extra: Value,
    n: usize,
    workers: &str,
) -> (PathBuf, Vec<Scenario>) {
    let args = [
        "--queue",
        "plan:PLAN.md",
        "--workers",
        workers,
        "--remote",
        "origin",
    ];
    let first = queue_project(&format!("{name}-0"), client, plan, extra);
    let bare = first.bare_origin("remote.git");
    let mut all = vec![first.args(&args)];
    for i in 1..n {
        let project = TempProject::new(&format!("{name}-{i}"));
        project.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
        project.git(&["fetch", "-q", "origin"]);
        project.git(&["reset", "-q", "--hard", "origin/main"]);
        all.push(Scenario::around(project, client).args(&args));
    }
    (bare, all)
}

/// The subjects of the remote's base, oldest first.
fn landed_subjects(bare: &Path) -> Vec<String> {
    git_out(bare, &["log", "--reverse", "--format=%s", "main"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// How many of `subjects` are `subject`.
fn times_in(subjects: &[String], subject: &str) -> usize {
    subjects.iter().filter(|s| *s == subject).count()
}

/// `ralph-ctl queue plan:PLAN.md --remote origin --json` in `machine`.
fn remote_rows(machine: &Scenario) -> Vec<Value> {
    let run = machine.ctl(
        &["queue", "plan:PLAN.md", "--remote", "origin", "--json"],
        &[],
    );
    run.assert_code(0);
    serde_json::from_str::<Value>(&run.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

const NINE: &str = "# Plan\n\n- [ ] task 1\n- [ ] task 2\n- [ ] task 3\n- [ ] task 4\n- [ ] task 5\n\
                    - [ ] task 6\n- [ ] task 7\n- [ ] task 8\n- [ ] task 9\n";

#[test]
fn three_machines_drain_one_backlog_each_item_once_landed_once_on_the_remote() {
    let client = ClientVersion::V2_1_330;
    let (bare, machines) = machines("remote-three", client, NINE, json!({}), 3, "2");
    let api = MockApi::start(committing_worker());
    let mut running: Vec<_> = machines.iter().map(|m| started(m, &api)).collect();
    let mut errs = Vec::new();
    for child in &mut running {
        let (status, _out, err) = wait_with_timeout(child, LOOP_TIMEOUT);
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
        errs.push(err);
    }
    let all_err = errs.join("\n----\n");
    // Every item worked exactly once across the three machines.
    let seen = conversations_per_item(&api);
    assert_eq!(seen.len(), 9, "{seen:?}\n{all_err}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}\n{all_err}");
    // Landed on the remote's base once each, its box ticked once.
    let subjects = landed_subjects(&bare);
    for n in 1..=9 {
        let work = times_in(&subjects, &format!("task {n}"));
        let tick = times_in(&subjects, &format!("Tick task {n} in PLAN.md"));
        assert_eq!((work, tick), (1, 1), "task {n}: {subjects:?}\n{all_err}");
    }
    let plan = git_out(&bare, &["show", "main:PLAN.md"]);
    assert_eq!(plan.matches("- [x]").count(), 9, "{plan}");
    assert!(!plan.contains("- [ ]"), "{plan}");
    // Each machine's own run ended complete; together they worked all nine,
    // and more than one machine took part.
    let mut worked_here = 0;
    for machine in &machines {
        let state = machine.status_json();
        assert_eq!(state["status"], "complete", "{state}\n{all_err}");
        let items = state["queue"]["items"].as_object().unwrap();
        assert!(items.values().all(|i| i["status"] == "done"), "{items:?}");
        worked_here += items.len();
    }
    assert_eq!(worked_here, 9, "{all_err}");
    // The remote's records tell the whole backlog from any machine: who
    // did each item, and the commit it landed at, on the base.
    let rows = remote_rows(&machines[2]);
    let done: Vec<&Value> = rows.iter().filter(|r| r["status"] == "done").collect();
    assert_eq!(done.len(), 9, "{rows:?}");
    let workers: BTreeSet<String> = done
        .iter()
        .map(|r| r["worker"].as_str().unwrap().to_string())
        .collect();
    assert!(workers.len() >= 2, "{workers:?}");
    for row in &done {
        let landed = row["landed"].as_str().expect("a landed commit");
        git_out(&bare, &["merge-base", "--is-ancestor", landed, "main"]);
        assert_eq!(row["claims"], 1, "{row}");
    }
    // `status` on any machine shows the whole backlog, not only its share.
    let status = machines[1].ctl(&["status"], &[]);
    status.assert_code(0);
    assert!(
        status
            .stdout
            .contains("remote:     9 items of plan:PLAN.md on remote origin")
            && status.stdout.contains(": 9 done"),
        "{}",
        status.stdout
    );
    // The base checked out on each machine followed the remote, where it
    // could (each is clean), so the last to land holds every box.
    let ticked_somewhere = machines.iter().any(|m| {
        std::fs::read_to_string(m.path("PLAN.md"))
            .unwrap()
            .matches("- [x]")
            .count()
            == 9
    });
    assert!(ticked_somewhere, "{all_err}");
}

#[test]
fn a_machine_killed_mid_item_has_its_item_taken_over_once_its_claim_lapses() {
    let client = ClientVersion::V2_1_330;
    let lapsing = json!({"claimTtlSeconds": 3});
    let (bare, machines) = machines("remote-killed", client, THREE, lapsing, 2, "1");
    let (hung, agent) = hanging_on_task_1();
    let api = MockApi::start(agent);
    let mut first = started(&machines[0], &api);
    assert!(
        wait_until(LOOP_TIMEOUT, || hung.is_set()),
        "task 1's client never started"
    );
    let mut second = started(&machines[1], &api);
    // The first machine dies outright mid-item: it releases nothing.
    signal_process(first.id(), libc::SIGKILL);
    let _ = wait_with_timeout(&mut first, LOOP_TIMEOUT);
    let (status, _out, err) = wait_with_timeout(&mut second, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    // Task 1 was worked twice (the dead machine's try, then the other's
    // once its claim lapsed), every other item once.
    let seen = conversations_per_item(&api);
    assert_eq!(seen.get("task 1"), Some(&2), "{seen:?}\n{err}");
    assert_eq!(seen.get("task 2"), Some(&1), "{seen:?}");
    assert_eq!(seen.get("task 3"), Some(&1), "{seen:?}");
    let subjects = landed_subjects(&bare);
    for n in 1..=3 {
        let work = times_in(&subjects, &format!("task {n}"));
        assert_eq!(work, 1, "task {n}: {subjects:?}\n{err}");
    }
    let rows = remote_rows(&machines[1]);
    let task1 = rows.iter().find(|r| r["title"] == "task 1").unwrap();
    assert_eq!(task1["status"], "done", "{task1}");
    assert_eq!(task1["claims"], 2, "{task1}");
    assert!(
        rows.iter().all(|r| r["status"] == "done"),
        "{rows:?}\n{err}"
    );
    // The person's view from the surviving machine says who did what.
    let shown = machines[1].ctl(&["queue", "plan:PLAN.md", "--remote", "origin"], &[]);
    shown.assert_code(0);
    assert!(
        shown.stdout.contains("3 done") && shown.stdout.contains("landed at"),
        "{}",
        shown.stdout
    );
}
