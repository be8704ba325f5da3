//! End-to-end: backlogs kept where people already keep them, drained by
//! `run --queue` on the real client against the mock: a prd.json whose
//! stories depend on one another, GitHub issues through a fake `gh` (each
//! landed commit says `Fixes #N`; with `--merge none` one pull request per
//! issue), and beads through a fake `bd` (a landed bead closed).

use std::path::PathBuf;

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::scenario::{Outcome, Scenario};
use ralph_tests::trackers::{FakeTrackers, PRD_JSON};
use serde_json::{Value, json};

use crate::queue::{conversations_per_item, queue_project};
use ralph_tests::mock_api::{item_of, outcome_line};
use ralph_tests::project::git_out;

/// The file an item's agent writes: the last word of its title, with
/// `.txt` unless it has a dot (`Add hello.txt` → `hello.txt`).
fn file_named_in(title: &str) -> String {
    let last = title.split_whitespace().last().unwrap_or("item");
    if last.contains('.') {
        last.to_string()
    } else {
        format!("{last}.txt")
    }
}

/// Every item's agent: commits its file, first checking that the file of
/// the item it depends on (`needs(title)`) is there, as it is only when that
/// item landed before this one's worktree was made from the base; then says
/// the item is done.
fn agent(
    needs: impl Fn(&str) -> Option<&'static str> + Send + Sync + 'static,
) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    move |turn, body| {
        let Some(title) = item_of(body) else {
            return Reply::text("No item in sight.");
        };
        let file = file_named_in(&title);
        let first = needs(&title).map_or(String::new(), |dependency| {
            format!("test -e {dependency} && ")
        });
        match turn {
            0 => Reply::bash(format!(
                "{first}printf '%s\\n' '{title}' > {file} && git add {file} && git commit -q -m '{title}' && echo committed"
            )),
            _ => Reply::text(format!(
                "{title} is done.\n{SIGNAL}\n{}",
                outcome_line("terminal", body)
            )),
        }
    }
}

/// A queue project on the current client with no plan items and no
/// config of its own: its items come from the backlog each test names.
fn backlog_project(name: &str) -> Scenario {
    queue_project(name, ClientVersion::V2_1_330, "# Plan\n", json!({}))
}

/// The fakes of a scenario's project, beside it (not in its tree).
fn fakes_of(scenario: &Scenario) -> FakeTrackers {
    let root: PathBuf = scenario.path("");
    FakeTrackers::new(&root.parent().unwrap().join("fakes"))
}

/// The done items of a drained run, each taken once.
fn all_done_once(state: &Value, count: usize) {
    let items = state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), count, "{state:#}");
    for item in items.values() {
        assert_eq!(item["status"], "done", "{item}");
        assert_eq!(item["taken"], 1, "{item}");
    }
}

/// Drains the two items of `queue` in the backlog project `name` with two
/// workers, `PATH` leading to its fakes, which `backlog` fills first; the
/// agent of the item titled `waits.0` checks that the file `waits.1`
/// landed before it (see [`agent`]). Asserts the run completed with each
/// item done once; the scenario (which owns the project's folders and the
/// fakes': they go when it is dropped), the fakes, the project's root and
/// the outcome.
fn drain_two(
    name: &str,
    backlog: impl FnOnce(&FakeTrackers),
    queue: &str,
    waits: (&'static str, &'static str),
) -> (Scenario, FakeTrackers, PathBuf, Outcome) {
    let scenario = backlog_project(name);
    let fakes = fakes_of(&scenario);
    backlog(&fakes);
    let path = fakes.path_env();
    let scenario = scenario
        .env("PATH", &path)
        .args(&["--queue", queue, "--workers", "2"]);
    let root = scenario.path("");
    let api = MockApi::start(agent(move |title| (title == waits.0).then_some(waits.1)));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    all_done_once(&outcome.state, 2);
    (scenario, fakes, root, outcome)
}

#[test]
fn a_prd_drained_by_two_workers_lands_each_story_once_after_its_dependency() {
    let scenario = backlog_project("backlog-prd")
        .file("prd.json", PRD_JSON)
        .file("progress.txt", "## Codebase Patterns\n- greet in files\n");
    scenario.git(&["add", "-A"]);
    scenario.git(&["commit", "-q", "-m", "the prd"]);
    let scenario = scenario.args(&["--queue", "prd:prd.json", "--workers", "2"]);
    let root = scenario.path("");
    // US-003 (Add again.txt) depends on US-001 (Add hello.txt), which
    // comes last by priority: its agent fails unless hello.txt landed first.
    let api = MockApi::start(agent(|title| {
        (title == "Add again.txt").then_some("hello.txt")
    }));
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    // The worktrees ralph removed as their stories landed are no git warning.
    assert!(!stderr.contains(" was removed"), "{stderr}");
    let seen = conversations_per_item(&api);
    assert_eq!(seen.len(), 4, "{seen:?}\n{stderr}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}\n{stderr}");
    all_done_once(&outcome.state, 4);
    // Landed in turn, the dependent after its dependency.
    let subjects = git_out(&root, &["log", "--reverse", "--format=%s", "main"]);
    let at = |subject: &str| {
        subjects
            .lines()
            .position(|s| s == subject)
            .unwrap_or_else(|| panic!("{subject} did not land: {subjects}\n{stderr}"))
    };
    assert!(at("Add hello.txt") < at("Add again.txt"), "{subjects}");
    for title in [
        "Add hello.txt",
        "Add bye.txt",
        "Add again.txt",
        "Add welcome.txt",
    ] {
        assert_eq!(
            subjects.lines().filter(|s| *s == title).count(),
            1,
            "{subjects}"
        );
        assert!(
            subjects.contains(&format!("Tick {title} in prd.json")),
            "{subjects}"
        );
    }
    // Every story passes on the base, the file otherwise as it was.
    let passed = PRD_JSON.replace("\"passes\": false", "\"passes\": true");
    assert_eq!(
        format!("{}\n", git_out(&root, &["show", "main:prd.json"])),
        passed
    );
    assert_eq!(
        std::fs::read_to_string(root.join("prd.json")).unwrap(),
        passed
    );
    let progress = git_out(&root, &["show", "main:progress.txt"]);
    assert!(
        progress.starts_with("## Codebase Patterns\n- greet in files\n"),
        "{progress}"
    );
    for id in ["US-001", "US-002", "US-003", "US-004"] {
        assert_eq!(
            progress.matches(&format!(" - {id}: ")).count(),
            1,
            "{progress}"
        );
    }
}

/// Two open issues as `gh issue list` prints them, #14 depending on #12.
fn two_issues(fakes: &FakeTrackers) {
    fakes.issues(&[
        (
            12,
            "Write parser",
            "The parser drops the last line.",
            &["ralph", "bug"],
        ),
        (14, "Write guide", "Depends on #12", &["ralph"]),
    ]);
}

#[test]
fn github_issues_land_each_with_fixes_in_its_commit() {
    let (_scenario, fakes, root, outcome) = drain_two(
        "backlog-github",
        two_issues,
        "github:label=ralph",
        ("Write guide", "parser.txt"),
    );
    let stderr = &outcome.run.stderr;
    // Each item's landed commit says which issue it fixes.
    for (title, number) in [("Write parser", 12), ("Write guide", 14)] {
        let commit = git_out(
            &root,
            &[
                "log",
                "--format=%H",
                "--grep",
                &format!("^{title}$"),
                "main",
            ],
        );
        assert!(!commit.is_empty(), "{title} did not land\n{stderr}");
        let message = git_out(&root, &["log", "-1", "--format=%B", &commit]);
        assert_eq!(message, format!("{title}\n\nFixes #{number}"), "{stderr}");
    }
    // ralph asked gh for the repository once and then for the issues,
    // naming the repository each time, and closed nothing itself.
    let calls = fakes.calls("gh");
    assert_eq!(calls[0], ["repo", "view", "--json", "nameWithOwner"]);
    assert!(
        calls[1..].iter().all(|c| c[..2] == ["issue", "list"]),
        "{calls:?}"
    );
    let repositories = fakes.gh_repositories();
    assert_eq!(repositories.len(), calls.len() - 1, "{repositories:?}");
    assert!(repositories.iter().all(|r| r == "owner/repo"));
}

#[test]
fn github_issues_with_merge_none_open_one_pull_request_each() {
    let scenario = backlog_project("backlog-github-pr");
    let root = scenario.path("");
    let bare = scenario.bare_origin("origin.git");
    let fakes = fakes_of(&scenario);
    two_issues(&fakes);
    let path = fakes.path_env();
    let scenario =
        scenario
            .env("PATH", &path)
            .args(&["--queue", "github:label=ralph", "--merge", "none"]);
    let api = MockApi::start(agent(|_| None));
    let before = git_out(&root, &["rev-parse", "main"]);
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    all_done_once(&outcome.state, 2);
    let created = fakes.calls_to("gh", &["pr", "create"]);
    assert_eq!(created.len(), 2, "{created:?}\n{stderr}");
    assert!(
        fakes.gh_repositories().iter().all(|r| r == "owner/repo"),
        "{:?}",
        fakes.gh_repositories()
    );
    for (n, number) in [12, 14].iter().enumerate() {
        let branch = format!("ralph/item-{number}");
        let call = &created[n];
        let option = |name: &str| {
            let at = call.iter().position(|a| a == name).unwrap();
            call[at + 1].clone()
        };
        assert_eq!(
            (option("--base"), option("--head")),
            ("main".to_string(), branch.clone()),
            "{call:?}"
        );
        assert!(
            option("--body").starts_with(&format!("Fixes #{number}\n")),
            "{call:?}"
        );
        // Pushed before the pull request was asked for.
        let pushed = git_out(&bare, &["rev-parse", &format!("refs/heads/{branch}")]);
        assert_eq!(pushed, git_out(&root, &["rev-parse", &branch]), "{stderr}");
    }
    // Nothing landed on the base.
    assert_eq!(git_out(&root, &["rev-parse", "main"]), before);
}

// With a shared remote (`--remote origin`) the item's branch is pushed
// there first; the remote refuses one branch: that item gets no pull
// request, and its record says the push failed, never "pushed".
#[test]
fn an_issue_whose_branch_push_failed_gets_no_pull_request() {
    let scenario = backlog_project("backlog-github-push-refused");
    let bare = scenario.bare_origin("origin.git");
    let hook = bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do\n  [ \"$ref\" = refs/heads/ralph/item-14 ] && { echo \"refusing $ref\"; exit 1; }\ndone\nexit 0\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let fakes = fakes_of(&scenario);
    two_issues(&fakes);
    let path = fakes.path_env();
    let scenario = scenario.env("PATH", &path).args(&[
        "--queue",
        "github:label=ralph",
        "--merge",
        "none",
        "--remote",
        "origin",
    ]);
    let api = MockApi::start(agent(|_| None));
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    let created = fakes.calls_to("gh", &["pr", "create"]);
    assert_eq!(created.len(), 1, "{created:?}\n{stderr}");
    assert!(
        created[0].contains(&"ralph/item-12".to_string()),
        "{created:?}"
    );
    let items = &outcome.state["queue"]["items"];
    let why = |id: &str| items[id]["why"].as_str().unwrap_or_default().to_string();
    assert!(
        why("12").contains("pushed to origin, pull request"),
        "{items:#}\n{stderr}"
    );
    assert!(
        why("14").contains("the push to origin failed")
            && why("14").contains("no pull request was opened")
            && !why("14").contains("pushed to origin"),
        "{items:#}\n{stderr}"
    );
}

/// A bead as `bd ready --json` prints it.
fn bead(id: &str, title: &str) -> Value {
    json!({
        "id": id, "title": title, "description": format!("{title}, as a CSV."),
        "acceptance_criteria": "A header line", "status": "open", "priority": 1,
        "issue_type": "task", "created_at": "2026-11-01T10:00:00Z",
        "updated_at": "2026-11-01T10:00:00Z"
    })
}

#[test]
fn beads_land_and_are_closed_naming_the_commit_and_what_they_blocked_follows() {
    let (_scenario, fakes, root, outcome) = drain_two(
        "backlog-beads",
        |fakes| {
            // bd-c3d4 is blocked by bd-a1b2: bd lists it once bd-a1b2 is closed.
            fakes.ready(&json!([bead("bd-a1b2", "Write exporter")]));
            fakes.blocked(&[(bead("bd-c3d4", "Write endpoint"), &["bd-a1b2"])]);
        },
        "beads:",
        ("Write endpoint", "exporter.txt"),
    );
    let stderr = &outcome.run.stderr;
    let closes = fakes.calls_to("bd", &["close"]);
    let ids: Vec<&str> = closes.iter().map(|c| c[c.len() - 1].as_str()).collect();
    assert_eq!(ids, ["bd-a1b2", "bd-c3d4"], "{closes:?}\n{stderr}");
    // Each closed naming the commit that landed it: the base after it.
    let subjects = git_out(&root, &["log", "--reverse", "--format=%H %s", "main"]);
    for (close, title) in closes.iter().zip(["Write exporter", "Write endpoint"]) {
        let commit = subjects
            .lines()
            .find(|l| l.ends_with(&format!(" {title}")))
            .and_then(|l| l.split(' ').next())
            .unwrap_or_else(|| panic!("{title} did not land: {subjects}"));
        // The id after `--`: one the agent wrote (`--db=…`) is never an option.
        assert_eq!(
            close[1..],
            [
                "--reason".to_string(),
                format!("Landed in {commit} by ralph's merge queue"),
                "--".to_string(),
                close[close.len() - 1].clone(),
            ],
            "{subjects}"
        );
    }
}

#[test]
fn a_story_whose_dependency_did_not_land_is_not_worked_and_is_named() {
    let prd = r#"{
  "userStories": [
    {"id": "US-001", "title": "Add base.txt", "priority": 1, "passes": false, "notes": ""},
    {"id": "US-002", "title": "Add top.txt", "priority": 1, "passes": false, "notes": "", "dependencies": ["US-001"]}
  ]
}
"#;
    let scenario = backlog_project("backlog-held-back").file("prd.json", prd);
    scenario.git(&["add", "-A"]);
    scenario.git(&["commit", "-q", "-m", "the prd"]);
    let scenario = scenario.args(&["--queue", "prd:prd.json", "--workers", "2"]);
    // US-001's agent says it is done having changed nothing: it needs review.
    let worker = agent(|_| None);
    let api = MockApi::start(move |turn, body| match item_of(body).as_deref() {
        Some("Add base.txt") if turn == 0 => Reply::bash("echo nothing to do"),
        _ => worker(turn, body),
    });
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(23, "complete");
    let seen = conversations_per_item(&api);
    assert_eq!(
        seen.keys().collect::<Vec<_>>(),
        ["Add base.txt"],
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "item US-002 \"Add top.txt\" was not worked: it depends on US-001, which did not land (needs-review)"
        ),
        "{stderr}"
    );
    assert_eq!(scenario.read("prd.json"), prd);
}

#[test]
fn a_dependency_cycle_is_refused_before_any_item_is_claimed() {
    let cyclic = PRD_JSON.replace(
        "\"priority\": 3,",
        "\"priority\": 3,\n      \"dependencies\": [\"US-003\"],",
    );
    let scenario = backlog_project("backlog-cycle").file("prd.json", &cyclic);
    scenario.git(&["add", "-A"]);
    scenario.git(&["commit", "-q", "-m", "the prd"]);
    let scenario = scenario.args(&["--queue", "prd:prd.json", "--workers", "2"]);
    let api = MockApi::start(agent(|_| None));
    let outcome = scenario.run(&api);
    assert_eq!(outcome.run.code, Some(1), "{outcome:?}");
    assert!(
        outcome.run.stderr.contains(
            "items depend on each other in a cycle (US-003 → US-001 → US-003): none of them could ever be worked"
        ),
        "{outcome:?}"
    );
    assert!(api.main_requests().is_empty(), "no client asked");
    assert!(!scenario.queue_claims_path().exists(), "nothing claimed");
    assert_eq!(scenario.read("prd.json"), cyclic);
}
