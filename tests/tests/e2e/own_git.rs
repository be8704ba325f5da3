//! End-to-end: ralph's own git never trusts what the agent wrote into
//! `.git`, on the real clients. The agent (its own tool call) writes a
//! `commondir` that sends git to a folder whose configuration names a
//! program (an fsmonitor, a signing program), or leaves lock files behind:
//! a plain loop does not complete and names the file, a queue item ends
//! needs-review naming it without landing, and afterwards the person's own
//! `git status` and `git commit` work and run none of those programs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::scenario::{Scenario, script};
use serde_json::Value;

/// A check that passes: the claims are judged on git's files alone.
const PASSING: &str = r#"{"maxIterations": 3, "verify": [{"name": "ok", "command": "true"}]}"#;

/// The marker file the agent's program appends to, a line per run naming
/// who ran it (`RALPH_WHO`, which only the test's own git sets).
fn marker(scenario: &Scenario) -> PathBuf {
    scenario.path("program-ran")
}

/// The agent's shell command: a copy of the repository's common folder
/// `common` (as the shell finds it: its objects, refs, HEAD and
/// configuration; 2.1.330's sandbox mounts a device over `config.lock`,
/// which `cp -r` cannot copy) at `evil-git/` in its own folder, whose
/// configuration sets `settings` (each `key value`) naming `evil-git/mark.sh`,
/// which appends to `marker`; then `commondir` (a path the shell expands)
/// sent there.
fn plant(common: &str, commondir: &str, settings: &[&str], marker: &Path) -> String {
    let mut command = format!(
        "mkdir -p evil-git && \
         cp -r \"{common}/objects\" \"{common}/refs\" \"{common}/HEAD\" \"{common}/config\" evil-git/ && \
         printf '#!/bin/sh\\necho \"${{RALPH_WHO:-someone}} $0 $*\" >> {marker}\\nexit 1\\n' > evil-git/mark.sh && \
         chmod +x evil-git/mark.sh",
        marker = marker.display()
    );
    for setting in settings {
        let (key, value) = setting.split_once(' ').unwrap();
        let value = value.replace("MARK", "$PWD/evil-git/mark.sh");
        command.push_str(&format!(
            " && git config -f evil-git/config {key} \"{value}\""
        ));
    }
    command.push_str(&format!(
        " && echo \"$PWD/evil-git\" > \"{commondir}\" && echo planted"
    ));
    command
}

/// git as the person runs it afterwards in `dir` (their own environment,
/// the scenario's home): its exit code and output.
fn persons_git(scenario: &Scenario, dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Person",
            "-c",
            "user.email=person@example.com",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", &scenario.home)
        .env("RALPH_WHO", "person")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// The lines the agent's program wrote when the person's git ran it.
fn run_for_the_person(marker: &Path) -> Vec<String> {
    std::fs::read_to_string(marker)
        .unwrap_or_default()
        .lines()
        .filter(|line| line.starts_with("person "))
        .map(str::to_string)
        .collect()
}

#[ralph_tests::on_both_clients]
fn a_commondir_the_agent_planted_never_completes_the_loop_and_is_put_back(client: ClientVersion) {
    // Unsandboxed: 2.1.330's sandbox keeps the agent's write of
    // `.git/commondir` from reaching the project (the file is not there
    // after its command, which did not fail); outside it the agent can
    // write anything.
    let scenario =
        Scenario::configured("own-git-commondir", client, PASSING).env("RALPH_SANDBOX", "off");
    let root = scenario.path("");
    let marker = marker(&scenario);
    // The folders named as git names them (2.1.330 refuses a command that
    // names `.git/config` outright under ralph's deny rules).
    let planting = plant(
        "$(git rev-parse --git-common-dir)",
        "$(git rev-parse --git-dir)/commondir",
        &["core.fsmonitor MARK"],
        &marker,
    );
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(planting.clone()),
        _ => Reply::text(format!("Done.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    assert_ne!(outcome.state["status"], "complete", "{outcome:?}");
    // Every claim was refused, naming the file.
    let claims: Vec<&Value> = outcome
        .history()
        .iter()
        .filter_map(|r| r.get("claim"))
        .collect();
    assert!(!claims.is_empty(), "{outcome:?}");
    for claim in &claims {
        assert_eq!(claim["accepted"], false, "{claim}");
        assert_eq!(
            claim["failedGates"],
            serde_json::json!(["git_unchanged"]),
            "{claim}"
        );
    }
    // At the end the file is named on the person's screen and in the log,
    // and gone.
    assert!(
        stderr.contains("ralph: git: .git/commondir appeared") && stderr.contains("removed"),
        "{stderr}"
    );
    let log =
        std::fs::read_to_string(root.join(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    assert!(log.contains(".git/commondir appeared"), "{log}");
    assert!(!root.join(".git/commondir").exists());
    // The person's git status runs nothing of the agent's.
    let (code, said) = persons_git(&scenario, &root, &["status", "--short"]);
    assert_eq!(code, Some(0), "{said}");
    let ran = run_for_the_person(&marker);
    assert!(ran.is_empty(), "the person's git status ran {ran:?}");
    // The trap is real: with the agent's file back, the same git status runs it.
    let planted = root.join(".git/commondir");
    std::fs::write(&planted, format!("{}\n", root.join("evil-git").display())).unwrap();
    persons_git(&scenario, &root, &["status", "--short"]);
    std::fs::remove_file(&planted).unwrap();
    assert!(
        !run_for_the_person(&marker).is_empty(),
        "the trap never ran"
    );
}

#[ralph_tests::on_both_clients]
fn a_queue_items_commondir_keeps_it_from_landing_and_signs_nothing(client: ClientVersion) {
    let scenario = Scenario::configured("own-git-queue", client, r#"{"verify": []}"#)
        .file("PLAN.md", "# Plan\n\n- [ ] the helper\n");
    scenario.commit_all("the plan");
    let root = scenario.path("");
    let marker = marker(&scenario);
    // Unsandboxed: 2.1.330's sandbox keeps a worktree's record read-only
    // (the agent's write of its commondir fails there: "Read-only file
    // system"); outside it the agent can write anything.
    let scenario = scenario
        .args(&["--queue", "plan:PLAN.md"])
        .env("RALPH_SANDBOX", "off");
    // The item's agent commits its work, then sends its worktree's record
    // to a folder whose configuration signs every commit with its program.
    let planting = plant(
        "$(git rev-parse --git-common-dir)",
        "$(git rev-parse --git-dir)/commondir",
        &["commit.gpgSign true", "gpg.program MARK"],
        &marker,
    );
    let api = MockApi::start(move |turn, body| match turn {
        0 => Reply::bash(format!(
            "echo helper > helper.txt && git add helper.txt && git commit -qm helper && {planting}"
        )),
        _ => script::item_done("Done.", body),
    });
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    let lines = std::fs::read_to_string(&marker).unwrap_or_default();
    assert!(
        lines.is_empty(),
        "the agent's gpg.program ran: {lines}\n{outcome:?}"
    );
    assert_eq!(outcome.run.code, Some(23), "{outcome:?}");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    let item = items.values().next().unwrap();
    assert_eq!(item["status"], "needs-review", "{item}");
    ralph_tests::assert_has_all(
        item["why"].as_str().unwrap(),
        &[".git/worktrees/item-", "/commondir", "evil-git"],
    );
    assert!(
        stderr.contains("ralph: git: .git/worktrees/item-"),
        "{stderr}"
    );
    assert!(
        !root.join("helper.txt").exists(),
        "nothing of the item landed"
    );
    // Its worktree is kept, its record put back: the person's git there
    // works and signs nothing.
    let branch = item["branch"].as_str().unwrap();
    let tree = root
        .join(".claude/worktrees")
        .join(branch.strip_prefix("ralph/").unwrap());
    let (code, said) = persons_git(
        &scenario,
        &tree,
        &["commit", "-q", "--allow-empty", "-m", "the person's"],
    );
    assert_eq!(code, Some(0), "{said}");
    let ran = run_for_the_person(&marker);
    assert!(ran.is_empty(), "the person's git commit ran {ran:?}");
    // The trap is real: with the agent's file back, the same commit runs it.
    let record = root
        .join(".git/worktrees")
        .join(tree.file_name().unwrap())
        .join("commondir");
    std::fs::write(&record, format!("{}\n", tree.join("evil-git").display())).unwrap();
    persons_git(
        &scenario,
        &tree,
        &["commit", "-q", "--allow-empty", "-m", "again"],
    );
    std::fs::write(&record, "../..\n").unwrap();
    assert!(
        !run_for_the_person(&marker).is_empty(),
        "the trap never ran"
    );
}

#[ralph_tests::on_both_clients(area_sample)]
fn lock_files_the_agent_left_are_removed_and_named(client: ClientVersion) {
    let scenario = Scenario::configured("own-git-locks", client, PASSING);
    let root = scenario.path("");
    let api = MockApi::start(|turn, _| match turn {
        0 => Reply::bash("touch .git/index.lock .git/HEAD.lock && echo left"),
        _ => Reply::text(format!("Done.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    for lock in [".git/index.lock", ".git/HEAD.lock"] {
        assert!(!root.join(lock).exists(), "{lock}\n{stderr}");
        assert!(
            stderr.contains(&format!("ralph: git: removed {lock}")),
            "{lock} named\n{stderr}"
        );
    }
    let log =
        std::fs::read_to_string(root.join(".claude/context/runtime/ralph-log.jsonl")).unwrap();
    assert!(log.contains("removed .git/index.lock"), "{log}");
    // The person's git works after the loop.
    for args in [
        &["status", "--short"][..],
        &["commit", "-q", "--allow-empty", "-m", "the person's"],
    ] {
        let (code, said) = persons_git(&scenario, &root, args);
        assert_eq!(code, Some(0), "git {args:?}: {said}");
    }
}
