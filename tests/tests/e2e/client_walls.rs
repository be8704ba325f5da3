//! End-to-end: what the client's own walls keep from the agent in an
//! unattended run with the permission mode ralph chooses, on the real
//! clients: git's configuration (`.git/config`, `.git/hooks`,
//! `.git/info`, which the next client and the merge queue's git would
//! obey) while `git commit` still works in the sandbox (without it no git
//! command is allowed: each reads a file the agent names), in the main checkout and from a
//! queue item's worktree (where `ralph-ctl check` judges the item's loop);
//! a worktree's own copies of ralph's files; and
//! on 2.0.77, whose sandbox does not hold, the unsandboxed rules instead,
//! said in the sandbox line (2.1.330 stays in its sandbox).

use std::path::Path;

use ralph_tests::SIGNAL;
use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, tool_results};
use ralph_tests::project::git_status_out;
use ralph_tests::scenario::{Scenario, script};

/// Panics unless `dir` has no `.claude/settings.local.json`, which the
/// agent tried to make.
fn no_settings_file(dir: &std::path::Path, results: &str) {
    let made = dir.join(".claude/settings.local.json");
    assert!(
        !made.exists(),
        "the agent made {}: {results}",
        made.display()
    );
}

/// What the agent's git commands must not have left in the repository
/// whose common folder is `dot_git`: no hooks path, no hook, the
/// attributes as they were.
fn gits_configuration_untouched(root: &Path, attributes_before: Option<String>) {
    let dot_git = root.join(".git");
    assert_eq!(
        git_status_out(root, &["config", "--get", "core.hooksPath"]),
        (1, String::new()),
        "the agent set core.hooksPath"
    );
    assert!(
        !dot_git.join("hooks/post-commit").exists(),
        "the agent wrote a hook"
    );
    assert_eq!(
        std::fs::read_to_string(dot_git.join("info/attributes")).ok(),
        attributes_before,
        "the agent changed .git/info/attributes"
    );
}

/// The sandbox line each client gets from `sandbox: auto`: 2.1.330 its
/// sandbox, 2.0.77 the unsandboxed rules and why.
fn sandbox_line(client: ClientVersion) -> &'static [&'static str] {
    match client {
        ClientVersion::V2_1_330 => &["sandbox: on"],
        ClientVersion::V2_0_77 => &[
            "sandbox: not available (Claude Code 2.0.77's sandbox does not hold",
            "update it to 2.1.330 or later",
            "acceptEdits with `ralph-ctl check` allowed instead, and its work is left uncommitted",
        ],
    }
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330 is walled by its sandbox, 2.0.77 by permission rules"
)]
fn the_agent_commits_but_cannot_change_gits_configuration_or_step_around_the_walls(
    client: ClientVersion,
) {
    let scenario = Scenario::new("client-walls", client).exact_args(&["--headless"]);
    scenario.commit_all("ralph");
    let root = scenario.path("");
    assert!(!root.join(".claude/settings.local.json").exists());
    let attributes = std::fs::read_to_string(root.join(".git/info/attributes")).ok();
    let script = [
        Reply::bash("git config core.hooksPath x"),
        Reply::bash("echo > .git/hooks/post-commit"),
        Reply::bash("echo '* merge=ours' >> .git/info/attributes"),
        // Each client gives a pipeline's output back whole.
        Reply::bash("echo alpha | tail -1"),
        Reply::bash("mv .claude .claude.x"),
        Reply::bash("echo '{}' > .claude/settings.local.json"),
        // The work, through the file tool (both clients allow it).
        Reply::write(root.join("w.txt").display().to_string(), "w\n"),
        Reply::bash(
            "echo w > w.txt && git add w.txt && git commit -qm 'agent work' && echo committed",
        ),
    ];
    let api = MockApi::start(script::replies_then_done(script.to_vec()));
    let outcome = scenario.run(&api);
    outcome.ended(0, "complete").at_iteration(1);
    outcome.run.assert_stderr_has(sandbox_line(client));
    let results = tool_results(&api);
    gits_configuration_untouched(&root, attributes);
    assert!(
        results.contains("alpha"),
        "the pipeline's output: {results}"
    );
    assert!(
        root.join(".claude/ralph/PROMPT.md").exists() && !root.join(".claude.x").exists(),
        "the agent moved .claude: {results}"
    );
    no_settings_file(&root, &results);
    let last = git_status_out(&root, &["log", "-1", "--format=%s"]).1;
    match client {
        ClientVersion::V2_1_330 => {
            assert!(results.contains("committed"), "{results}");
            assert_eq!(last, "agent work");
        }
        // No git command without the sandbox: the commit is refused.
        ClientVersion::V2_0_77 => {
            assert!(!results.contains("committed"), "{results}");
            assert_ne!(last, "agent work");
        }
    }
}

#[ralph_tests::on_both_clients(
    differs = "2.1.330 is walled by its sandbox, 2.0.77 by permission rules"
)]
fn a_queue_items_agent_is_walled_in_its_worktree_as_in_the_main_checkout(client: ClientVersion) {
    let scenario = Scenario::new("client-walls-queue", client)
        .file("backlog/T-1", "# Add one\n\nWrite one.txt.\n")
        .exact_args(&["--queue", "dir:backlog", "--merge", "none", "--no-cleanup"]);
    scenario.commit_all("ralph and the backlog");
    let root = std::fs::canonicalize(scenario.path("")).unwrap();
    let tree = root.join(".claude/worktrees/item-T-1");
    let guardrails = std::fs::read_to_string(root.join(".claude/ralph/guardrails.md")).unwrap();
    let attributes = std::fs::read_to_string(root.join(".git/info/attributes")).ok();
    let main_git = root.join(".git");
    let script = [
        // From the worktree, git writes the main checkout's .git/config.
        Reply::bash("git config core.hooksPath x"),
        Reply::bash(format!(
            "echo > {}",
            main_git.join("hooks/post-commit").display()
        )),
        Reply::bash(format!(
            "echo '* merge=ours' >> {}",
            main_git.join("info/attributes").display()
        )),
        Reply::bash("echo 'Anything goes.' >> .claude/ralph/guardrails.md"),
        Reply::bash("echo '{}' > .claude/settings.local.json"),
        Reply::write(
            tree.join(".claude/settings.local.json")
                .display()
                .to_string(),
            "{}",
        ),
        // The work, through the file tool (both clients allow it).
        Reply::write(tree.join("one.txt").display().to_string(), "one\n"),
        Reply::bash(
            "echo one > one.txt && git add one.txt && git commit -qm 'Add one' && echo committed",
        ),
        // The item's own loop, checked in its worktree.
        Reply::bash("ralph-ctl check"),
    ];
    let api = MockApi::start(move |turn, body| {
        script
            .get(turn)
            .cloned()
            .unwrap_or_else(|| script::item_done("Done.", body))
    });

    let outcome = scenario.run(&api);
    outcome.ended(0, "complete");
    outcome.run.assert_stderr_has(sandbox_line(client));
    let results = tool_results(&api);
    assert_eq!(
        outcome.state["queue"]["items"]["T-1"]["status"], "done",
        "{results}"
    );
    gits_configuration_untouched(&root, attributes);
    // The worktree's own copies of ralph's files are as they were.
    assert!(tree.is_dir(), "--no-cleanup keeps the worktree");
    assert_eq!(
        std::fs::read_to_string(tree.join(".claude/ralph/guardrails.md")).unwrap(),
        guardrails,
        "the agent changed the worktree's guardrails: {results}"
    );
    no_settings_file(&tree, &results);
    // In the sandbox its commit went in, on the item's branch; without it
    // no git command is allowed.
    assert_eq!(
        results.contains("committed"),
        client == ClientVersion::V2_1_330,
        "{results}"
    );
    // `ralph-ctl check` there judged the item's loop, in the item's worktree.
    assert!(
        results.contains("queue item T-1's loop: running at iteration 1")
            && results.contains(&format!("; run in the worktree {}", tree.display()))
            && results.contains("result: a claim of done now would pass these gates"),
        "the item's check: {results}"
    );
    if client == ClientVersion::V2_1_330 {
        assert_eq!(
            git_status_out(&root, &["log", "-1", "--format=%s", "ralph/item-T-1"]).1,
            "Add one"
        );
    }
}

#[ralph_tests::on_both_clients(
    differs = "sandbox: on runs 2.1.330 and refuses 2.0.77 before it starts"
)]
fn sandbox_on_refuses_a_client_whose_sandbox_does_not_hold(client: ClientVersion) {
    let scenario = Scenario::new("client-walls-on", client)
        .exact_args(&["--headless"])
        .env("RALPH_SANDBOX", "on");
    let api = MockApi::start(|_, _| Reply::text(format!("All done.\n{SIGNAL}")));
    let outcome = scenario.run(&api);
    match client {
        ClientVersion::V2_1_330 => {
            outcome.ended(0, "complete");
            outcome.run.assert_stderr_has(&["sandbox: on"]);
        }
        ClientVersion::V2_0_77 => {
            outcome.run.assert_code(3).assert_stderr_has(&[
                "sandbox is on",
                "Claude Code 2.0.77's sandbox does not hold",
                "update it to 2.1.330 or later",
                "npm install -g @anthropic-ai/claude-code",
                "--no-sandbox",
            ]);
            assert!(api.main_requests().is_empty(), "no client ran");
            assert!(scenario.state().is_none(), "no loop started");
        }
    }
}
