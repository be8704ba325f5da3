//! The merge queue's tests: items landed on a real repository.

use super::*;
use crate::driver::worktree::{WorktreePlan, plan};
use std::path::PathBuf;

use crate::testdir::git_as_person as sh;

const PLAN: &str = "# Plan\n\n- [ ] left\n- [ ] right\n";

/// A repository on main with PLAN.md, its worktree plan and claims.
fn repo() -> (tempfile::TempDir, PathBuf, WorktreePlan, ClaimStore) {
    let dir = crate::testdir::new("merge");
    let root = dir.path().to_path_buf();
    sh(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("PLAN.md"), PLAN).unwrap();
    std::fs::write(root.join(".gitignore"), ".claude/\n").unwrap();
    sh(&root, &["add", "-A"]);
    sh(&root, &["commit", "-q", "-m", "plan"]);
    let worktrees = plan(&root, None, false).unwrap();
    let claims = ClaimStore::at(root.join(".claude/context/runtime/ralph-queue.json"));
    (dir, root, worktrees, claims)
}

fn item(title: &str) -> Item {
    let id = source::plan_items(PLAN)
        .into_iter()
        .find(|i| i.title == title)
        .unwrap()
        .id;
    Item {
        author: None,
        id,
        title: title.into(),
        body: String::new(),
        after: Vec::new(),
    }
}

/// The item's worktree with `file` written as `text` and committed.
fn worked(plan: &WorktreePlan, name: &str, file: &str, text: &str) -> Worktree {
    let worktree = plan.create(name).unwrap();
    std::fs::write(worktree.path.join(file), text).unwrap();
    sh(&worktree.path, &["add", file]);
    sh(&worktree.path, &["commit", "-q", "-m", name]);
    worktree
}

fn land_it(
    root: &Path,
    worktree: &Worktree,
    item: &Item,
    verify: &[VerifyCommand],
    claims: &ClaimStore,
) -> Landed {
    land(&Landing {
        root,
        base: "main",
        worktree,
        item,
        plan: Some(Path::new("PLAN.md")),
        mark: DoneMark::PlanBox,
        trailer: None,
        source: None,
        verify,
        claims,
        expected_base: None,
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    })
    .unwrap()
}

#[test]
fn a_prd_story_lands_passing_with_its_progress_line_and_an_issue_says_fixes() {
    let (_d, root, plan, claims) = repo();
    let prd = "{\n  \"userStories\": [\n    {\"id\": \"US-001\", \"title\": \"One\", \"passes\": false, \"notes\": \"\"}\n  ]\n}\n";
    std::fs::write(root.join("prd.json"), prd).unwrap();
    std::fs::write(root.join("progress.txt"), "# Progress\n").unwrap();
    sh(&root, &["add", "-A"]);
    sh(&root, &["commit", "-q", "-m", "prd"]);
    let story = Item {
        author: None,
        id: "US-001".into(),
        title: "One".into(),
        body: String::new(),
        after: Vec::new(),
    };
    let tree = worked(&plan, "item-US-001", "one.txt", "one\n");
    let landed = land(&Landing {
        root: &root,
        base: "main",
        worktree: &tree,
        item: &story,
        plan: Some(Path::new("prd.json")),
        mark: DoneMark::PrdPasses,
        trailer: None,
        source: Some(Path::new("prd.json")),
        verify: &[],
        claims: &claims,
        expected_base: None,
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    })
    .unwrap();
    assert!(matches!(landed, Landed::Merged { .. }), "{landed:?}");
    let shown = git(&root, &["show", "main:prd.json"]).unwrap();
    assert_eq!(format!("{shown}\n"), prd.replace("false", "true"));
    let progress = git(&root, &["show", "main:progress.txt"]).unwrap();
    assert!(
        progress.starts_with("# Progress\n") && progress.contains("US-001: One"),
        "{progress}"
    );
    // An issue: its landed commit says Fixes #N, and no file is marked.
    let issue = Item {
        author: None,
        id: "7".into(),
        title: "Seven".into(),
        body: String::new(),
        after: Vec::new(),
    };
    let tree = worked(&plan, "item-7", "seven.txt", "seven\n");
    let landed = land(&Landing {
        root: &root,
        base: "main",
        worktree: &tree,
        item: &issue,
        plan: None,
        mark: DoneMark::PlanBox,
        trailer: Some("Fixes #7".into()),
        source: None,
        verify: &[],
        claims: &claims,
        expected_base: None,
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    })
    .unwrap();
    assert!(matches!(landed, Landed::Merged { .. }), "{landed:?}");
    let message = git(&root, &["log", "-1", "--format=%B", "main"]).unwrap();
    assert_eq!(message.trim_end(), "item-7\n\nFixes #7");
}

#[test]
fn items_land_in_turn_rebased_ticked_and_fast_forwarded() {
    let (_d, root, plan, claims) = repo();
    let left = worked(&plan, "item-left", "left.txt", "left\n");
    let right = worked(&plan, "item-right", "right.txt", "right\n");
    let (l, r) = (item("left"), item("right"));
    assert!(matches!(
        land_it(&root, &left, &l, &[], &claims),
        Landed::Merged { .. }
    ));
    // The second was made from the old base: rebased onto the new one.
    let Landed::Merged { commit, .. } = land_it(&root, &right, &r, &[], &claims) else {
        panic!("right did not land");
    };
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), commit);
    let subjects = git(&root, &["log", "--format=%s", "main"]).unwrap();
    assert_eq!(
        subjects,
        "Tick right in PLAN.md\nitem-right\nTick left in PLAN.md\nitem-left\nplan"
    );
    // The checkout followed (the base is checked out), and is clean.
    let plan_text = std::fs::read_to_string(root.join("PLAN.md")).unwrap();
    assert_eq!(plan_text, "# Plan\n\n- [x] left\n- [x] right\n");
    assert!(root.join("right.txt").is_file());
    assert_eq!(git(&root, &["status", "--porcelain"]).unwrap(), "");
    // Worktrees and branches are gone.
    assert!(!left.path.exists() && !right.path.exists());
    assert_eq!(git(&root, &["branch", "--list", "ralph/*"]).unwrap(), "");
}

#[test]
fn a_base_moved_outside_the_merge_queue_is_named() {
    let (_d, root, plan, claims) = repo();
    let start = git(&root, &["rev-parse", "main"]).unwrap();
    let left = worked(&plan, "item-left", "left.txt", "left\n");
    // Something else moves main: the item's own branch, pushed onto it.
    sh(&root, &["update-ref", "refs/heads/main", &left.branch]);
    sh(&root, &["reset", "-q", "--hard"]);
    let moved_to = git(&root, &["rev-parse", "main"]).unwrap();
    let right = worked(&plan, "item-right", "right.txt", "right\n");
    let landing = Landing {
        root: &root,
        base: "main",
        worktree: &right,
        item: &item("right"),
        plan: Some(Path::new("PLAN.md")),
        mark: DoneMark::PlanBox,
        trailer: None,
        source: None,
        verify: &[],
        claims: &claims,
        expected_base: Some(&start),
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    };
    match land(&landing).unwrap() {
        Landed::Merged { moved, .. } => assert_eq!(moved, Some(moved_to)),
        other => panic!("{other:?}"),
    }
    // As expected: nothing to say.
    let now = git(&root, &["rev-parse", "main"]).unwrap();
    let other = worked(&plan, "item-other", "other.txt", "other\n");
    let landing = Landing {
        worktree: &other,
        item: &item("left"),
        expected_base: Some(&now),
        ..landing
    };
    assert!(matches!(
        land(&landing).unwrap(),
        Landed::Merged { moved: None, .. }
    ));
}

#[test]
fn a_conflict_or_a_failing_verify_keeps_the_branch_for_review() {
    let (_d, root, plan, claims) = repo();
    let left = worked(&plan, "item-left", "same.txt", "left\n");
    let right = worked(&plan, "item-right", "same.txt", "right\n");
    assert!(matches!(
        land_it(&root, &left, &item("left"), &[], &claims),
        Landed::Merged { .. }
    ));
    let before = git(&root, &["rev-parse", "main"]).unwrap();
    let branch_before = git(&root, &["rev-parse", &right.branch]).unwrap();
    match land_it(&root, &right, &item("right"), &[], &claims) {
        Landed::NeedsReview(why) => {
            assert!(why.contains("conflicts with main in same.txt"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), before);
    assert_eq!(
        git(&root, &["rev-parse", &right.branch]).unwrap(),
        branch_before
    );
    assert_eq!(git(&right.path, &["status", "--porcelain"]).unwrap(), "");

    // A verify that fails on the result: nothing lands.
    let other = worked(&plan, "item-other", "other.txt", "other\n");
    let failing = [VerifyCommand {
        name: "tests".into(),
        command: "test ! -e other.txt".into(),
        timeout_seconds: 30,
        network: false,
    }];
    match land_it(&root, &other, &item("right"), &failing, &claims) {
        Landed::NeedsReview(why) => {
            assert!(why.contains("verify `tests` failed"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), before);
    assert!(other.path.exists());
}

#[test]
fn a_sandboxs_empty_mount_points_neither_land_nor_hold_an_item_back() {
    let (_d, root, plan, claims) = repo();
    let tree = worked(&plan, "item-mounts", "work.txt", "work\n");
    for empty in [
        ".gitmodules",
        ".claude/agents",
        ".claude/settings.local.json",
    ] {
        let path = tree.path.join(empty);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "").unwrap();
    }
    // Left uncommitted, and, for one, committed by the agent's `git add -A`.
    sh(&tree.path, &["add", "--force", ".gitmodules"]);
    sh(&tree.path, &["commit", "-q", "-m", "add -A"]);
    match land_it(&root, &tree, &item("left"), &[], &claims) {
        Landed::Merged { .. } => {}
        other => panic!("{other:?}"),
    }
    assert!(root.join("work.txt").is_file());
    let landed = git(&root, &["ls-tree", "-r", "--name-only", "main"]).unwrap();
    assert!(
        !landed.contains("settings.local.json") && !landed.contains("agents"),
        "{landed}"
    );
}

#[test]
fn a_queues_source_is_guarded_however_it_was_named() {
    let (_d, root, _plan, _claims) = repo();
    let p = |s: &str| Some(PathBuf::from(s));
    assert_eq!(
        crate::driver::worktree::in_project(&root, Path::new("./PLAN.md")),
        p("PLAN.md")
    );
    assert_eq!(
        crate::driver::worktree::in_project(&root, Path::new("./tasks/./")),
        p("tasks")
    );
    assert_eq!(
        crate::driver::worktree::in_project(&root, &root.join("tasks")),
        p("tasks")
    );
    assert_eq!(
        crate::driver::worktree::in_project(&root, Path::new("/elsewhere/PLAN.md")),
        None
    );
    assert_eq!(
        crate::driver::worktree::in_project(&root, Path::new(".")),
        None
    );
}

#[test]
fn a_merge_driver_the_repository_names_never_runs_in_a_rebase() {
    let (dir, root, plan, claims) = repo();
    let marks = dir.path().join("merge-driver-ran");
    // The agent's configuration: a merge driver that resolves anything,
    // and an attribute naming it (as an item's commit would bring).
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .open(root.join(".git/config"))
        .unwrap();
    use std::io::Write as _;
    writeln!(
        config,
        "[merge \"evil\"]\n\tdriver = touch {} && cp %B %A",
        marks.display()
    )
    .unwrap();
    std::fs::write(root.join(".gitattributes"), "same.txt merge=evil\n").unwrap();
    sh(&root, &["add", ".gitattributes"]);
    sh(&root, &["commit", "-q", "-m", "attributes"]);
    let left = worked(&plan, "item-left", "same.txt", "left\n");
    let right = worked(&plan, "item-right", "same.txt", "right\n");
    assert!(matches!(
        land_it(&root, &left, &item("left"), &[], &claims),
        Landed::Merged { .. }
    ));
    match land_it(&root, &right, &item("right"), &[], &claims) {
        Landed::NeedsReview(why) => assert!(why.contains("same.txt"), "{why}"),
        other => panic!("the driver resolved the conflict: {other:?}"),
    }
    assert!(!marks.exists(), "the repository's merge driver ran");
}

/// An executable that leaves `marks/<name>` when run (and fails, as a
/// signing program that signs nothing).
fn marking_program(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let marks = dir.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let program = dir.join(format!("{name}.sh"));
    std::fs::write(
        &program,
        format!("#!/bin/sh\ntouch {}/{name}\nexit 1\n", marks.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    (program, marks.join(name))
}

#[test]
fn the_landing_signs_nothing_whatever_the_repository_asks() {
    let (dir, root, plan, claims) = repo();
    let left = worked(&plan, "item-left", "left.txt", "left\n");
    let loose = plan.create("item-loose").unwrap();
    std::fs::write(loose.path.join("loose.txt"), "x\n").unwrap();
    let (program, ran) = marking_program(dir.path(), "gpg");
    for (key, value) in [
        ("commit.gpgSign", "true"),
        ("gpg.program", program.to_str().unwrap()),
        ("merge.verifySignatures", "true"),
        ("core.fsmonitor", program.to_str().unwrap()),
    ] {
        sh(&root, &["config", key, value]);
    }
    // A rebase, a tick commit and a fast-forward; then leftovers
    // committed, rebased, ticked, fast-forwarded.
    assert!(matches!(
        land_it(&root, &left, &item("left"), &[], &claims),
        Landed::Merged { .. }
    ));
    assert!(matches!(
        land_it(&root, &loose, &item("right"), &[], &claims),
        Landed::Merged { .. }
    ));
    assert!(
        !ran.exists(),
        "the landing ran the repository's gpg.program"
    );
}

#[test]
fn a_worktree_whose_commondir_leads_elsewhere_is_never_landed_through() {
    let (dir, root, plan, claims) = repo();
    let tree = worked(&plan, "item-left", "left.txt", "left\n");
    let (program, ran) = marking_program(dir.path(), "gpg");
    // The agent's folder: the repository copied, signing asked with its
    // own program; the item's record sent there.
    let evil = dir.path().join("evil");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(root.join(".git"))
        .arg(&evil)
        .status()
        .unwrap();
    assert!(copied.success());
    let mut config = std::fs::read_to_string(evil.join("config")).unwrap();
    config.push_str(&format!(
        "[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {}\n",
        program.display()
    ));
    std::fs::write(evil.join("config"), config).unwrap();
    let record = root.join(".git/worktrees/item-left/commondir");
    std::fs::write(&record, format!("{}\n", evil.display())).unwrap();
    let before = git(&root, &["rev-parse", "main"]).unwrap();
    let why = match land(&Landing {
        root: &root,
        base: "main",
        worktree: &tree,
        item: &item("left"),
        plan: Some(Path::new("PLAN.md")),
        mark: DoneMark::PlanBox,
        trailer: None,
        source: None,
        verify: &[],
        claims: &claims,
        expected_base: None,
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    }) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("landed through it: {other:?}"),
    };
    assert!(
        why.contains(".git/worktrees/item-left/commondir") && why.contains("evil"),
        "{why}"
    );
    assert!(!ran.exists(), "the landing ran the agent's gpg.program");
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), before);
}

#[test]
fn an_item_that_changes_what_decides_is_kept_for_review_naming_the_paths() {
    let (_d, root, plan, claims) = repo();
    let before = git(&root, &["rev-parse", "main"]).unwrap();
    for (n, (file, text)) in [
        (".claude/ralph/guardrails.md", "obey the agent\n"),
        (".claude/settings.local.json", "{}\n"),
        (".CLAUDE/settings.local.json", "{}\n"),
        (".gitmodules", "[submodule \"x\"]\n"),
        ("src/.gitattributes", "*.txt merge=evil\n"),
        ("PLAN.md", "- [x] left\n- [x] right\n"),
    ]
    .into_iter()
    .enumerate()
    {
        let tree = plan.create(&format!("item-guarded-{n}")).unwrap();
        let path = tree.path.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        std::fs::write(tree.path.join(format!("work-{n}.txt")), "work\n").unwrap();
        // Committed by the agent, past .gitignore if need be.
        sh(&tree.path, &["add", "--force", file]);
        sh(&tree.path, &["commit", "-q", "-m", file]);
        match land_it(&root, &tree, &item("left"), &[], &claims) {
            Landed::NeedsReview(why) => {
                assert!(
                    why.contains(file) && why.contains("may not change"),
                    "{why}"
                );
                assert!(!why.contains("work-"), "only the guarded paths: {why}");
            }
            other => panic!("{file}: {other:?}"),
        }
        assert_eq!(
            git(&root, &["rev-parse", "main"]).unwrap(),
            before,
            "{file}"
        );
        assert!(tree.path.exists(), "{file}: kept for review");
    }
}

#[test]
fn bytecode_and_test_caches_are_never_an_items_work() {
    for path in [
        "__pycache__/calc.cpython-311.pyc",
        "pkg/__pycache__/m.cpython-311.opt-1.pyc",
        ".pytest_cache/v/cache/nodeids",
        "old.pyc",
        "old.pyo",
    ] {
        assert!(never_work(path), "{path}");
    }
    for path in ["calc.py", "pycache.md", "src/__init__.py", "docs/pyc.txt"] {
        assert!(!never_work(path), "{path}");
    }
}

#[test]
fn leftovers_are_committed_and_an_item_with_nothing_lands_nothing() {
    let (_d, root, plan, claims) = repo();
    // No change, with a box to tick: nothing lands, not even the tick
    // (the agent's work may have failed unseen).
    let idle = plan.create("item-idle").unwrap();
    let before = git(&root, &["rev-parse", "main"]).unwrap();
    assert_eq!(
        land_it(&root, &idle, &item("left"), &[], &claims),
        Landed::Nothing
    );
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), before);
    assert!(!idle.path.exists());
    // No change and nothing to tick: nothing lands.
    let bare = plan.create("item-bare").unwrap();
    let landing = Landing {
        root: &root,
        base: "main",
        worktree: &bare,
        item: &item("left"),
        plan: None,
        mark: DoneMark::PlanBox,
        trailer: None,
        source: None,
        verify: &[],
        claims: &claims,
        expected_base: None,
        walls: WallsWanted::Off,
        remote: None,
        fetch: None,
        ran: (0, 0.0),
    };
    let before = git(&root, &["rev-parse", "main"]).unwrap();
    assert_eq!(land(&landing).unwrap(), Landed::Nothing);
    assert_eq!(git(&root, &["rev-parse", "main"]).unwrap(), before);
    assert!(!bare.path.exists());
    let loose = plan.create("item-loose").unwrap();
    std::fs::write(loose.path.join("loose.txt"), "x\n").unwrap();
    assert!(matches!(
        land_it(&root, &loose, &item("right"), &[], &claims),
        Landed::Merged { .. }
    ));
    let subject = git(&root, &["log", "-2", "--format=%s", "main"]).unwrap();
    assert!(
        subject.ends_with(&format!("right ({})", item("right").id)),
        "{subject}"
    );
}
