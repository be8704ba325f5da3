//! What unit tests set up: temp folders (removed on drop, named after the
//! test that makes one), git run as a person, a queue run's record.

/// A fresh, empty folder under the system's temp folder; `label` says which
/// test it is for.
pub(crate) fn new(label: &str) -> tempfile::TempDir {
    keep_key_apart();
    tempfile::Builder::new()
        .prefix(&format!("ralph-{label}-"))
        .tempdir()
        .expect("a temp folder")
}

/// Runs git in `dir` as a person does (their identity in the environment);
/// panics when it fails.
pub(crate) fn git_as_person(dir: &std::path::Path, args: &[&str]) {
    let ok = git_as_person_status(dir, args);
    assert!(ok, "git {args:?}");
}

/// Whether `git args` in `dir`, as the person runs it, succeeded.
pub(crate) fn git_as_person_status(dir: &std::path::Path, args: &[&str]) -> bool {
    ralph_core::own_git::runner::persons_git(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@e")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@e")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A queue run of three items (done, needs-review, working), each by
/// worker `4242-1`, two iterations and $0.50.
pub(crate) fn queue_run_state() -> ralph_core::judge::state::LoopState {
    use ralph_core::judge::state::{ItemState, LoopState, QueueItem, QueueRun};
    use ralph_core::units::Usd;
    let mut state = LoopState::new(
        "run".into(),
        25,
        ralph_core::time::Timestamp::from_secs(1767225600),
    );
    let item = |title: &str, status, why: Option<&str>| QueueItem {
        title: title.into(),
        status,
        worker: "4242-1".into(),
        iterations: 2,
        cost_usd: Usd::from_dollars(0.5),
        branch: Some(format!("ralph/item-{}", title.replace(' ', "-"))),
        taken: 1,
        why: why.map(str::to_string),
        ..QueueItem::default()
    };
    let mut queue = QueueRun {
        source: "plan:PLAN.md".into(),
        merge: "rebase".into(),
        base: "main".into(),
        ..QueueRun::default()
    };
    queue.items.insert(
        "plan-a".into(),
        item("add <b>", ItemState::Done, Some("landed")),
    );
    queue.items.insert(
        "plan-b".into(),
        item(
            "fix it",
            ItemState::NeedsReview,
            Some("branch ralph/item-fix-it conflicts with main in a.rs"),
        ),
    );
    queue
        .items
        .insert("plan-c".into(), item("more", ItemState::Working, None));
    state.queue = Some(queue);
    state
}

/// ralph's key for these tests: in the temp folder, never the person's
/// data folder (the states the tests write are signed with it).
pub(crate) fn keep_key_apart() {
    ralph_core::persist::mac::keep_key_in_for_tests(
        std::env::temp_dir()
            .join("ralph-ctl-unit-key")
            .join("ralph"),
    );
}
