//! Backlogs and worktree runs with a fake headless client: `queue`, a
//! queue run that cannot start, each item in its worktree, a queue
//! shared on a remote.

use super::ctl_common::client_script;
use ralph_tests::cli::each_str;
use ralph_tests::project::TempProject;
use serde_json::{Value, json};

#[test]
fn queue_shows_a_backlog_s_items_and_where_each_stands() {
    let project = TempProject::new("queue");
    project.write(
        "TODO.md",
        "# Plan\n- [x] the parser\n- [ ] write the guide\n  install and first run\n- [ ] add --json\n## Nice to have\n- [ ] emoji\n",
    );
    let listed = project.ctl(&["queue", "plan:TODO.md", "--json"], &[]);
    let items = listed.assert_code(0).json();
    let titles = each_str(&items, "title");
    assert_eq!(titles, ["write the guide", "add --json"], "{items:#}");
    assert!(
        each_str(&items, "status").iter().all(|s| *s == "free"),
        "{items:#}"
    );
    // What workers recorded: one item claimed, one done.
    let (guide, json_item) = (
        items[0]["id"].as_str().unwrap(),
        items[1]["id"].as_str().unwrap(),
    );
    let claims = json!({"schemaVersion": 1, "items": {
        guide: {"status": "claimed", "worker": "w1", "claimedAt": "2026-11-25T10:00:00Z", "expiresAt": "2999-01-01T00:00:00Z", "claims": 1},
        json_item: {"status": "done", "worker": "w2", "claimedAt": "2026-11-25T10:00:00Z", "expiresAt": "2026-11-25T10:30:00Z", "claims": 2},
    }});
    project.write(
        ".claude/context/runtime/ralph-queue.json",
        claims.to_string(),
    );
    let shown = project.ctl(&["queue", "plan:TODO.md"], &[]);
    shown.assert_code(0).assert_stdout_has(&[
        "2 items in plan:TODO.md: 1 claimed, 1 done",
        &format!("  claimed      {guide}  write the guide  (w1 until 2999-01-01T00:00:00Z)"),
        &format!("  done         {json_item}  add --json"),
    ]);
    // A folder, a file an item; a bad spelling names the three forms.
    project.write("backlog/001-fix.md", "# Fix the parser\n");
    project
        .ctl_exits(&["queue", "dir:backlog"], 0)
        .assert_stdout_has(&[
            "1 item in dir:backlog: 1 free",
            "  free         001-fix.md  Fix the parser",
        ]);
    let bad = project.ctl(&["queue", "TODO.md"], &[]);
    bad.assert_code(2)
        .assert_stderr_has(&["plan:PATH, dir:PATH or cmd:COMMAND"]);
    let missing = project.ctl(&["queue", "plan:NOPE.md"], &[]);
    missing
        .assert_code(1)
        .assert_stderr_has(&["NOPE.md", "does not exist"]);
}

#[test]
fn a_queue_run_that_cannot_start_says_why_before_anything_starts() {
    let project = TempProject::initialised("queue-refused");
    project.write("PLAN.md", "# Plan\n- [ ] one\n");
    // No client is started: each of these is refused first.
    let env = [("RALPH_CLAUDE", "true")];
    let bad = project.ctl(&["run", "--queue", "PLAN.md"], &env);
    bad.assert_code(2)
        .assert_stderr_has(&["plan:PATH, dir:PATH or cmd:COMMAND"]);
    let workers = project.ctl(&["run", "--queue", "plan:PLAN.md", "--workers", "0"], &env);
    workers.assert_code(2).assert_stderr_has(&["--workers"]);
    let alone = project.ctl(&["run", "--workers", "2"], &env);
    alone.assert_code(2).assert_stderr_has(&["--queue"]);
    let formula = project.ctl(&["run", "--queue", "plan:PLAN.md", "--formula", "f"], &env);
    formula.assert_code(2).assert_stderr_has(&["--formula"]);
    let base = project.ctl(&["run", "--base-ref", "main"], &env);
    base.assert_code(2)
        .assert_stderr_has(&["--base-ref and --no-cleanup go with --worktree or --queue"]);
    let missing = project.ctl(&["run", "--queue", "plan:NOPE.md"], &env);
    missing.assert_stderr_has(&["NOPE.md", "does not exist"]);
    assert_ne!(missing.code, Some(0));
    // Items land on a branch: a detached HEAD is none.
    project.git(&["checkout", "-q", "--detach"]);
    let detached = project.ctl(&["run", "--queue", "plan:PLAN.md"], &env);
    detached
        .assert_code(2)
        .assert_stderr_has(&["check out a branch", "--merge none"]);
    assert!(project.state().is_none(), "nothing started");
}

/// A fake headless client that does an agent's work where it is started:
/// commits `<what>-<n>.txt` (n: its how-manieth run), says the work is done
/// on its last run (`runs`), and prints the result object `claude -p`
/// prints, with a small cost.
fn working_client(project: &TempProject, what: &str, runs: u32) -> String {
    client_script(
        project,
        &format!("fake-{what}.sh"),
        &format!(
            "cat > /dev/null\n\
             echo \"$PWD\" >> \"$0.cwd\"\n\
             n=$(wc -l < \"$0.cwd\")\n\
             echo work > {what}-$n.txt && git add {what}-$n.txt && git commit -q -m \"{what} $n\"\n\
             said='More to do.'\n\
             [ \"$n\" -ge {runs} ] && said='All done. {signal}'\n\
             printf '{{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"%s\",\"total_cost_usd\":0.01}}\\n' \"$said\"\n",
            signal = ralph_tests::SIGNAL
        ),
    )
}

/// A project set up by `init` whose one check always passes, with `plan`
/// committed as PLAN.md.
fn with_plan(name: &str, plan: &str) -> TempProject {
    let project = TempProject::initialised(name);
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "true"}]}).to_string(),
    );
    project.write("PLAN.md", plan);
    project.commit_all("plan");
    project
}

/// The folders the fake client of [`working_client`] ran in.
fn ran_in(client: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{client}.cwd"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_fresh_worktree_loop_runs_each_iteration_on_a_branch_of_its_own() {
    let project = TempProject::initialised("fresh-worktree");
    project.write(
        ".claude/ralph/config.json",
        json!({"verify": [{"name": "work", "command": "ls work-*.txt"}]}).to_string(),
    );
    project.commit_all("ralph");
    let client = working_client(&project, "work", 2);
    let run = project.ctl(
        &["run", "--fresh", "--worktree", "--headless", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    assert_eq!(project.status_json()["status"], "complete");
    // Two iterations, each in a worktree of its own under .claude/worktrees.
    let folders = ran_in(&client);
    assert_eq!(folders.len(), 2, "{folders:?}\n{}", run.stderr);
    assert_ne!(folders[0], folders[1]);
    assert!(
        folders.iter().all(|f| f.contains("/.claude/worktrees/")),
        "{folders:?}"
    );
    // The project's checkout is left alone; each iteration's commit is on
    // a ralph/ branch.
    assert!(!project.path("work-1.txt").exists());
    let branches = std::process::Command::new("git")
        .args(["branch", "--list", "ralph/*", "--format=%(refname:short)"])
        .current_dir(project.path(""))
        .output()
        .unwrap();
    let branches = String::from_utf8_lossy(&branches.stdout).into_owned();
    assert!(!branches.trim().is_empty(), "{}", run.stderr);
}

#[test]
fn a_queue_run_works_each_item_in_its_worktree_and_lands_it() {
    let project = with_plan("queue-fake", "# Plan\n\n- [ ] first\n- [ ] second\n");
    let client = working_client(&project, "item", 1);
    let run = project.ctl(
        &["run", "--queue", "plan:PLAN.md", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    let state = project.status_json();
    assert_eq!(state["status"], "complete", "{}", run.stderr);
    let items = state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    assert!(items.values().all(|i| i["status"] == "done"), "{items:?}");
    // Each item's work landed on main, its box ticked.
    let plan = project.read("PLAN.md");
    assert_eq!(plan.matches("- [x]").count(), 2, "{plan}");
    assert!(project.path("item-1.txt").exists() && project.path("item-2.txt").exists());
    run.assert_stderr_has(&["2 items landed on main"]);
}

#[test]
fn a_queue_shared_on_a_remote_lands_there_and_lists_every_item_from_any_clone() {
    let project = with_plan("queue-remote", "# Plan\n\n- [ ] first\n- [ ] second\n");
    let bare = project.bare_origin("remote.git");
    let client = working_client(&project, "item", 1);
    // A name that is no remote is refused before anything starts.
    let wrong = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--remote",
            "upstream",
            "--no-sandbox",
        ],
        &[("RALPH_CLAUDE", &client)],
    );
    wrong.assert_code(2);
    wrong.assert_stderr_has(&["--remote upstream", "git remote add upstream URL"]);
    let run = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--remote",
            "origin",
            "--no-sandbox",
        ],
        &[("RALPH_CLAUDE", &client)],
    );
    run.assert_code(0);
    run.assert_stderr_has(&["queue shared on remote origin"]);
    // Landed on the remote's main, each box ticked there.
    let remote_plan = std::process::Command::new("git")
        .args(["show", "main:PLAN.md"])
        .current_dir(&bare)
        .output()
        .unwrap();
    let remote_plan = String::from_utf8_lossy(&remote_plan.stdout).into_owned();
    assert_eq!(
        remote_plan.matches("- [x]").count(),
        2,
        "{remote_plan}\n{}",
        run.stderr
    );
    // Any clone lists the backlog as the remote records it.
    let listed = project.ctl(
        &["queue", "plan:PLAN.md", "--remote", "origin", "--json"],
        &[],
    );
    listed.assert_code(0);
    let rows: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row["status"], "done", "{row}");
        assert_eq!(row["iterations"], 1, "{row}");
        assert!(
            row["landed"].as_str().is_some_and(|c| c.len() == 40),
            "{row}"
        );
    }
    let text = project.ctl_exits(&["queue", "plan:PLAN.md", "--remote", "origin"], 0);
    assert!(
        text.stdout
            .starts_with("2 items of plan:PLAN.md on remote origin (1 machine so far): 2 done"),
        "{}",
        text.stdout
    );
    let status = project.ctl(&["status"], &[]);
    assert!(
        status
            .stdout
            .contains("  remote:     2 items of plan:PLAN.md"),
        "{}",
        status.stdout
    );
}

#[test]
fn a_shared_backlog_lists_an_item_waiting_on_others_as_waiting() {
    let project = TempProject::initialised("remote-waiting");
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] release\n  after: first, second\n- [ ] first\n- [ ] second\n",
    );
    project.commit_all("plan");
    project.bare_origin("remote.git");
    let text = project.ctl(&["queue", "plan:PLAN.md", "--remote", "origin"], &[]);
    text.assert_code(0).assert_stdout_has(&[
        "3 items of plan:PLAN.md on remote origin (0 machines so far): 2 free, 1 waiting",
    ]);
    let waiting = text
        .stdout
        .lines()
        .find(|l| l.contains("release"))
        .unwrap_or_default();
    assert!(
        waiting.starts_with("  waiting ")
            && waiting.ends_with(", which have not landed)")
            && waiting.contains("(after plan-"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_client_that_refuses_to_start_fails_with_ralph_s_code_and_stops_the_queue() {
    // The client refuses to start on its settings: every item would fail
    // the same way within seconds, so the run ends at the first, naming
    // the refusal, and the item is free again for when they are fixed.
    let project = with_plan(
        "queue-refused",
        "# Plan\n\n- [ ] first\n- [ ] second\n- [ ] third\n",
    );
    let client = client_script(
        &project,
        "refusing-claude.sh",
        "cat > /dev/null\n\
         echo ran >> \"$0.runs\"\n\
         echo '{\"type\":\"result\",\"subtype\":\"error_during_execution\",\"is_error\":true,\"num_turns\":0,\"errors\":[\"Sandbox required but unavailable: failed validation\"],\"startup_failure_reason\":\"sandbox_required_unavailable\"}'\n\
         exit 14\n",
    );
    // Alone, the loop ends failed with ralph's code for it, never the
    // client's (14 is ralph's "paused" to a launcher), which is said.
    let alone = project.ctl(
        &["run", "--headless", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    assert_eq!(alone.code, Some(15), "{alone:?}");
    alone.assert_stderr_has(&[
        "Claude Code refused to start (its exit code 14), before its first turn",
    ]);
    std::fs::remove_file(format!("{client}.runs")).unwrap();
    project.ctl_exits(&["reset"], 0);
    let run = project.ctl(
        &["run", "--queue", "plan:PLAN.md", "--no-sandbox"],
        &[("RALPH_CLAUDE", &client)],
    );
    let runs = std::fs::read_to_string(format!("{client}.runs")).unwrap_or_default();
    assert_eq!(runs.lines().count(), 1, "{run:?}");
    assert_eq!(run.code, Some(15), "{run:?}");
    assert!(
        run.stderr
            .contains("stopped: Claude Code refused to start (its exit code 14), before its first turn: Sandbox required but unavailable"),
        "{run:?}"
    );
    let state = project.status_json();
    assert_eq!(state["status"], "failed", "{state:#}");
    let items = state["queue"]["items"].as_object().unwrap();
    assert!(
        items.values().all(|i| i["status"] != "failed"),
        "{items:#?}"
    );
}
