use super::*;
use crate::judge::state::{Status, StopDecision};
use crate::persist::log;
use std::cell::Cell;
use tempfile::TempDir;

#[test]
fn a_worktree_s_failed_check_names_what_it_reached_of_the_main_checkout() {
    let dir = TempDir::new().unwrap();
    let project = std::fs::canonicalize(dir.path()).unwrap();
    let tree = project.join(".claude/worktrees/item");
    std::fs::create_dir_all(&tree).unwrap();
    let failed = |output: String, exit_code| VerifyResult {
        name: "tests".into(),
        command: "pytest".into(),
        exit_code: Some(exit_code),
        timed_out: false,
        duration_ms: 1,
        output_tail: output,
        counts: None,
        by_runner: Vec::new(),
        failure_headers: Vec::new(),
    };
    let naming = format!("No such file: '{}/data/fixture.json'", project.display());
    let reach = RealWorld.main_checkout_reach(&project, &tree, &[failed(naming.clone(), 1)]);
    assert_eq!(reach.len(), 1, "{reach:?}");
    assert!(reach[0].contains("data/fixture.json"), "{reach:?}");
    // A check that passed, or one of the project itself, reached nothing to name.
    assert!(
        RealWorld
            .main_checkout_reach(&project, &tree, &[failed(naming.clone(), 0)])
            .is_empty()
    );
    assert!(
        RealWorld
            .main_checkout_reach(&project, &project, &[failed(naming, 1)])
            .is_empty()
    );
}

const SID: &str = "11111111-2222-3333-4444-555555555555";

/// A world with a fixed transcript reading and project, that counts the
/// verification runs.
struct FakeWorld {
    tail: IterationTail,
    changed: Option<bool>,
    /// The baseline the progress reading brings.
    baseline: Option<progress::Baseline>,
    /// What each progress reading was given.
    progress_calls: std::cell::RefCell<Vec<(Option<progress::Baseline>, progress::ToolEdits)>>,
    /// Runs during the progress reading (another writer meddling).
    while_reading: Option<Box<dyn Fn()>>,
    verify_exit: i32,
    /// The test counts each verification command's output gives.
    verify_counts: Option<crate::observe::test_counts::TestCounts>,
    verify_runs: Cell<u32>,
    /// What the usage reading finds.
    usage: UsageReading,
    /// The folders progress and verification were read and run in.
    roots: std::cell::RefCell<Vec<PathBuf>>,
    /// The verification commands run, in order.
    commands: std::cell::RefCell<Vec<String>>,
}

impl FakeWorld {
    fn new(tail: IterationTail) -> Self {
        FakeWorld {
            tail,
            changed: Some(false),
            baseline: None,
            progress_calls: Default::default(),
            while_reading: None,
            verify_exit: 0,
            verify_counts: None,
            verify_runs: Cell::new(0),
            usage: UsageReading::default(),
            roots: Default::default(),
            commands: Default::default(),
        }
    }
}

impl World for FakeWorld {
    fn usage(
        &self,
        _: &Path,
        _: Option<&TranscriptCursor>,
        _: u64,
        _: u64,
    ) -> std::io::Result<UsageReading> {
        Ok(self.usage.clone())
    }
    fn iteration_tail(
        &self,
        _: &Path,
        wait: Duration,
        _: Option<&str>,
    ) -> Result<(IterationTail, Duration), TranscriptError> {
        Ok((
            self.tail.clone(),
            if self.tail.caught_up {
                Duration::ZERO
            } else {
                wait
            },
        ))
    }
    fn progress(
        &self,
        root: &Path,
        previous: Option<&progress::Baseline>,
        edits: &progress::ToolEdits,
    ) -> progress::Reading {
        self.roots.borrow_mut().push(root.to_path_buf());
        self.progress_calls
            .borrow_mut()
            .push((previous.cloned(), edits.clone()));
        if let Some(meddle) = &self.while_reading {
            meddle();
        }
        progress::Reading {
            changed: self.changed,
            baseline: self.baseline.clone(),
            method: progress::Method::Git,
        }
    }
    fn tdd_scenario(&self, _: &Path) -> Option<String> {
        None
    }
    fn plan(&self, _: &Path, _: &[String]) -> PlanReport {
        PlanReport::default()
    }
    fn verify(
        &self,
        _project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        _walls: WallsWanted,
    ) -> Vec<VerifyResult> {
        self.roots.borrow_mut().push(root.to_path_buf());
        self.verify_runs.set(self.verify_runs.get() + 1);
        // A check given the network is recorded as such.
        self.commands.borrow_mut().extend(commands.iter().map(|c| {
            if c.network {
                format!("{} (network)", c.command)
            } else {
                c.command.clone()
            }
        }));
        commands
            .iter()
            .map(|c| VerifyResult {
                name: c.name.clone(),
                command: c.command.clone(),
                exit_code: Some(self.verify_exit),
                timed_out: false,
                duration_ms: 1,
                output_tail: "1 failed".into(),
                counts: self.verify_counts,
                by_runner: Vec::new(),
                failure_headers: Vec::new(),
            })
            .collect()
    }
    fn now(&self) -> Timestamp {
        Timestamp::from_secs(1795341600)
    }
    fn prompt(&self, _: &Path) -> Result<String, PromptError> {
        Ok("Fix the bugs.".into())
    }
    fn guardrails(&self, _: &Path) -> Result<Option<String>, PromptError> {
        Ok(None)
    }
}

fn project(config: Option<&str>) -> (TempDir, ProjectPaths) {
    let dir = TempDir::new().unwrap();
    let paths = ProjectPaths::new(dir.path());
    if let Some(config) = config {
        std::fs::create_dir_all(paths.ralph_dir()).unwrap();
        std::fs::write(paths.config_file(), config).unwrap();
    }
    let store = StateStore::new(&paths);
    let lock = store.lock(true).unwrap();
    let state = LoopState::new(SID.into(), 5, Timestamp::from_secs(0));
    lock.write(&state).unwrap();
    (dir, paths)
}

fn stop(message: &str) -> Stop {
    Stop {
        session_id: Some(SID.into()),
        stop_hook_active: true,
        last_assistant_message: Some(message.into()),
        transcript_path: Some("/t.jsonl".into()),
        ..Stop::default()
    }
}

fn state(paths: &ProjectPaths) -> LoopState {
    StateStore::new(paths).read().unwrap().unwrap()
}

#[test]
fn a_stop_blocks_with_the_prompt_and_records_the_iteration() {
    let (_d, paths) = project(None);
    let tail = IterationTail {
        tool_calls: 2,
        caught_up: true,
        ..Default::default()
    };
    let mut delivered = Vec::new();
    let report = run_stop(
        &paths,
        &[],
        &stop("Working."),
        &FakeWorld::new(tail),
        &mut |a| {
            delivered.push(a.clone());
            Ok(())
        },
    )
    .unwrap();
    let Answer::Block { reason, .. } = &report.answer else {
        panic!("{report:?}");
    };
    assert!(reason.contains("Fix the bugs."), "{reason}");
    assert_eq!(delivered, vec![report.answer.clone()]);
    let after = state(&paths);
    assert_eq!(after.iteration, 2);
    assert_eq!(after.history[0].tool_calls, 2);
    assert_eq!(after.history[0].message_source, MessageSource::Input);
}

/// A real baseline of a folder holding `file`.
fn a_baseline(file: &str) -> (TempDir, progress::Baseline) {
    let dir = TempDir::new().unwrap();
    std::fs::write(dir.path().join(file), "x").unwrap();
    let baseline = progress::baseline(dir.path()).unwrap();
    (dir, baseline)
}

#[test]
fn the_progress_reading_gets_the_edits_and_its_baseline_is_kept() {
    let (_d, paths) = project(None);
    let (_b1, first) = a_baseline("one.txt");
    let (_b2, second) = a_baseline("two.txt");
    let mut start = state(&paths);
    start.breaker.progress = Some(first.clone());
    StateStore::new(&paths)
        .lock(true)
        .unwrap()
        .write(&start)
        .unwrap();
    let edits = progress::ToolEdits {
        changed_files: vec![paths.root.join("src/lib.rs")],
        fully_described: true,
    };
    let world = FakeWorld {
        changed: Some(true),
        baseline: Some(second.clone()),
        ..FakeWorld::new(IterationTail {
            tool_calls: 1,
            caught_up: true,
            edits: edits.clone(),
            ..Default::default()
        })
    };
    run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
    assert_eq!(
        world.progress_calls.borrow().as_slice(),
        [(Some(first), edits)]
    );
    let after = state(&paths);
    assert_eq!(after.breaker.progress, Some(second));
    assert_eq!(
        after
            .breaker
            .counters
            .get(crate::judge::breaker::Signal::NoProgress),
        0
    );
}

#[test]
fn a_reading_against_a_baseline_replaced_meanwhile_tells_nothing() {
    let (_d, paths) = project(None);
    let (_b, theirs) = a_baseline("one.txt");
    let meddler_paths = paths.clone();
    let written = theirs.clone();
    let world = FakeWorld {
        changed: Some(false),
        while_reading: Some(Box::new(move || {
            // Another writer records a new baseline while this stop reads.
            let store = StateStore::new(&meddler_paths);
            let lock = store.lock(false).unwrap();
            let mut state = lock.read().unwrap().unwrap();
            state.breaker.progress = Some(written.clone());
            lock.write(&state).unwrap();
        })),
        ..FakeWorld::new(IterationTail {
            tool_calls: 1,
            caught_up: true,
            ..Default::default()
        })
    };
    run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
    let after = state(&paths);
    assert_eq!(after.breaker.progress, Some(theirs), "kept");
    assert_eq!(
        after
            .breaker
            .counters
            .get(crate::judge::breaker::Signal::NoProgress),
        0,
        "an unchanged project against the old baseline proves nothing"
    );
}

#[test]
fn an_answer_that_cannot_be_delivered_leaves_the_state_as_it_was() {
    let (_d, paths) = project(None);
    let before = state(&paths);
    let err = run_stop(
        &paths,
        &[],
        &stop("Working."),
        &FakeWorld::new(IterationTail::default()),
        &mut |_| Err(io::Error::from(io::ErrorKind::BrokenPipe)),
    )
    .unwrap_err();
    assert!(matches!(err, EngineError::Deliver(_)), "{err}");
    assert_eq!(state(&paths), before);
}

#[test]
fn a_message_is_judged_by_its_last_mebibyte() {
    assert_eq!(transcript::last_bytes("abc", 10), "abc");
    assert_eq!(transcript::last_bytes("abcdef", 3), "def");
    // Never inside a character: "é" is two bytes.
    assert_eq!(transcript::last_bytes("aé", 1), "");
    assert_eq!(transcript::last_bytes("aéb", 2), "b");
    // A claim at the end of a 3 MiB message still ends the loop.
    let (_d, paths) = project(None);
    let signal = Config::default().completion_signal;
    let message = format!("{}\n{signal}", "word ".repeat(600_000));
    let report = run_stop(
        &paths,
        &[],
        &stop(&message),
        &FakeWorld::new(IterationTail::default()),
        &mut |_| Ok(()),
    )
    .unwrap();
    assert!(
        matches!(report.answer, Answer::End { .. }),
        "{:?}",
        report.answer
    );
}

#[test]
fn a_stop_whose_transcript_never_caught_up_says_its_tools_may_be_missing() {
    let (_d, paths) = project(None);
    let behind = FakeWorld::new(IterationTail {
        caught_up: false,
        tool_calls: 1,
        ..Default::default()
    });
    run_stop(&paths, &[], &stop("Working."), &behind, &mut |_| Ok(())).unwrap();
    let caught_up = FakeWorld::new(IterationTail {
        caught_up: true,
        final_message: Some("Working.".into()),
        ..Default::default()
    });
    run_stop(&paths, &[], &stop("Working."), &caught_up, &mut |_| Ok(())).unwrap();
    let flags: Vec<bool> = state(&paths)
        .history
        .iter()
        .map(|r| r.tools_incomplete)
        .collect();
    assert_eq!(flags, [true, false]);
}

#[test]
fn the_results_refused_calls_are_the_authority_of_a_fresh_stop() {
    use crate::judge::breaker::Signal;
    use crate::judge::errors::Refusal;
    let compound = "This Bash command contains multiple operations. The following parts require approval: git add a, git commit -m a";
    let call = || Refusal {
        tool_use_id: Some("t1".into()),
        ..Refusal::of_call("Bash", Some("git add a && git commit -m a"))
    };
    let tail = |refusals: Vec<Refusal>, texts: Vec<String>| {
        FakeWorld::new(IterationTail {
            caught_up: true,
            final_message: Some("Tried.".into()),
            tool_calls: 1,
            failing_tool_results: texts,
            refusals,
            ..Default::default()
        })
    };
    let refused_in_transcript = || {
        tail(
            vec![Refusal {
                text: Some(compound.into()),
                ..call()
            }],
            vec![compound.into()],
        )
    };
    // The result lists no refusal: the transcript's refusal texts do not count.
    let (_d, paths) = project(None);
    let none = Stop {
        permission_denials: Some(Vec::new()),
        ..stop("Tried.")
    };
    for _ in 0..2 {
        run_stop(
            &paths,
            &[],
            &none,
            &refused_in_transcript(),
            &mut |_| Ok(()),
        )
        .unwrap();
    }
    let after = state(&paths);
    assert_eq!(after.breaker.counters.get(Signal::PermissionDenied), 0);
    assert_eq!(after.status, Status::Running);
    // The result names the call, the transcript adds its text (the
    // parts to allow): two such stops end the loop naming them.
    let (_d, paths) = project(None);
    let named = Stop {
        permission_denials: Some(vec![call()]),
        ..stop("Tried.")
    };
    for _ in 0..2 {
        run_stop(&paths, &[], &named, &refused_in_transcript(), &mut |_| {
            Ok(())
        })
        .unwrap();
    }
    let after = state(&paths);
    assert_eq!(after.status, Status::CircuitOpen);
    let because = after.ended_because.unwrap();
    assert!(
        because.contains("`Bash(git add a && git commit -m a)`")
            && because.contains(r#"["Bash(git add a:*)", "Bash(git commit -m a:*)"]"#),
        "{because}"
    );
    // The result names the call and the transcript shows nothing of it
    // (no failing result at all): it counts all the same.
    let (_d, paths) = project(None);
    for _ in 0..2 {
        run_stop(
            &paths,
            &[],
            &named,
            &tail(Vec::new(), Vec::new()),
            &mut |_| Ok(()),
        )
        .unwrap();
    }
    // No rule is proposed for a compound command (no person could
    // paste one that allows it); the call is named all the same.
    let because = state(&paths).ended_because.unwrap();
    assert!(
        because.contains("`Bash(git add a && git commit -m a)`")
            && !because.contains("git commit -m a:*"),
        "{because}"
    );
}

#[test]
fn a_transcript_that_shows_only_an_earlier_iteration_lends_it_nothing() {
    // The stop carries "Step two." but the transcript still ends on the
    // previous iteration, whose tool call failed: that error and call
    // are not charged to this iteration, which is flagged instead.
    let (_d, paths) = project(None);
    let stale = FakeWorld::new(IterationTail {
        caught_up: true,
        final_message: Some("Step one.".into()),
        tool_calls: 1,
        failing_tool_results: vec!["cat: x: No such file or directory".into()],
        ..Default::default()
    });
    run_stop(&paths, &[], &stop("Step two."), &stale, &mut |_| Ok(())).unwrap();
    let record = state(&paths).history.pop().unwrap();
    assert_eq!(record.tool_calls, 0, "{record:?}");
    assert_eq!(record.error, None, "{record:?}");
    assert!(record.tools_incomplete, "{record:?}");
    assert_eq!(record.excerpt, "Step two.");
}

#[test]
fn an_ending_stands_when_its_notice_cannot_be_shown() {
    // A block nobody reads is undone; an ending is not: the session
    // stops either way, and the loop must say it completed.
    let (_d, paths) = project(None);
    let signal = Config::default().completion_signal;
    let world = FakeWorld::new(IterationTail::default());
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Err(io::Error::other("stdout is gone")),
    )
    .unwrap();
    assert!(matches!(report.answer, Answer::End { .. }));
    assert!(
        report
            .notes
            .iter()
            .any(|n| n.contains("cannot show how the loop ended: stdout is gone")),
        "{:?}",
        report.notes
    );
    assert_eq!(state(&paths).status, Status::Complete);
}

#[test]
fn an_iteration_in_a_worktree_is_checked_there_and_a_cut_off_one_claims_nothing() {
    let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
    let (_d, paths) = project(Some(config));
    let world = FakeWorld::new(IterationTail::default());
    let signal = Config::default().completion_signal;
    let worktree = paths.root.join(".claude/worktrees/loop-1");
    let in_worktree = Stop {
        work_root: Some(worktree.clone()),
        ..stop(&format!("Done.\n{signal}"))
    };
    run_stop(&paths, &[], &in_worktree, &world, &mut |_| Ok(())).unwrap();
    assert_eq!(*world.roots.borrow(), [worktree.clone(), worktree.clone()]);
    assert_eq!(state(&paths).status, Status::Complete);

    // Cut off mid-turn: the claim its transcript ends on is no answer.
    let (_d, paths) = project(Some(config));
    let world = FakeWorld::new(IterationTail::default());
    let cut_off = Stop {
        cut_off: Some("no sign of work for 60 s".into()),
        ..stop(&format!("Done.\n{signal}"))
    };
    let report = run_stop(&paths, &[], &cut_off, &world, &mut |_| Ok(())).unwrap();
    assert_eq!(world.verify_runs.get(), 0, "nothing to verify");
    assert!(matches!(report.answer, Answer::Block { .. }), "{report:?}");
    let after = state(&paths);
    assert_eq!(after.status, Status::Running);
    assert_eq!(after.outcome_errors, 1);
    assert_eq!(
        world.roots.borrow()[0],
        paths.root,
        "the project's own root"
    );
}

#[test]
fn the_person_s_note_leads_the_next_text_once() {
    let (_d, paths) = project(None);
    let store = StateStore::new(&paths);
    let lock = store.lock(false).unwrap();
    let mut running = lock.read().unwrap().unwrap();
    running.hint = Some("The flaky test is test_upload.".into());
    lock.write(&running).unwrap();
    drop(lock);
    let world = FakeWorld::new(IterationTail::default());
    let reason = |report: StopReport| match report.answer {
        Answer::Block { reason, .. } => reason,
        other => panic!("{other:?}"),
    };
    let first = reason(run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap());
    assert!(
        first
            .starts_with("[Ralph: a note from the person watching] The flaky test is test_upload."),
        "{first}"
    );
    assert_eq!(state(&paths).hint, None);
    let second = reason(run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap());
    assert!(!second.contains("note from the person"), "{second}");
}

#[test]
fn a_claim_is_checked_against_the_protected_files_of_the_start() {
    let (_d, paths) = project(None);
    let tests = paths.root.join("tests");
    std::fs::create_dir_all(&tests).unwrap();
    std::fs::write(tests.join("test_a.py"), "def test_a(): assert False\n").unwrap();
    // What `ralph-ctl start` records.
    let mut started = state(&paths);
    started.protected_files =
        crate::observe::protected::snapshot(&paths.root, &["tests/".to_string()]);
    StateStore::new(&paths)
        .lock(true)
        .unwrap()
        .write(&started)
        .unwrap();
    let world = FakeWorld::new(IterationTail::default());
    let signal = Config::default().completion_signal;
    // Untouched: the claim passes.
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert!(state(&paths).last_claim.unwrap().accepted, "{report:?}");

    // Changed: the claim is rejected, naming the file.
    let mut again = state(&paths);
    again.status = Status::Running;
    again.ended_at = None;
    again.ended_because = None;
    StateStore::new(&paths)
        .lock(true)
        .unwrap()
        .write(&again)
        .unwrap();
    std::fs::write(tests.join("test_a.py"), "def test_a(): pass\n").unwrap();
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    let Answer::Block { reason, .. } = report.answer else {
        panic!("a rejected claim goes on: {:?}", report.answer);
    };
    assert!(
        reason.contains("protected_paths gate: 1 protected file(s) changed")
            && reason.contains("tests/test_a.py"),
        "{reason}"
    );
    assert!(!state(&paths).last_claim.unwrap().accepted);
}

#[test]
fn a_claim_made_while_a_commondir_leads_git_elsewhere_is_rejected_naming_it() {
    let (_d, paths) = project(None);
    std::fs::create_dir_all(paths.root.join(".git/objects")).unwrap();
    // What `ralph-ctl start` records.
    let mut started = state(&paths);
    let place = own_git::GitPlace::find(&paths.root).unwrap();
    started.git_record = Some(own_git::record::record(&place));
    StateStore::new(&paths)
        .lock(true)
        .unwrap()
        .write(&started)
        .unwrap();
    std::fs::write(paths.root.join(".git/commondir"), "/tmp/evil\n").unwrap();
    let world = FakeWorld::new(IterationTail::default());
    let signal = Config::default().completion_signal;
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    let Answer::Block { reason, .. } = report.answer else {
        panic!("a rejected claim goes on: {:?}", report.answer);
    };
    assert!(
        reason.contains("git_unchanged gate: ")
            && reason.contains(".git/commondir appeared (it holds `/tmp/evil`)"),
        "{reason}"
    );
    let claim = state(&paths).last_claim.unwrap();
    assert!(!claim.accepted);
    let last = state(&paths).history.last().unwrap().claim.clone().unwrap();
    assert_eq!(
        last.failed_gates,
        vec![crate::judge::completion::Gate::GitUnchanged]
    );
}

#[test]
fn a_claim_whose_check_resolves_otherwise_than_at_the_start_is_rejected() {
    let config = r#"{"verify": [{"name": "tests", "command": "python3 -m unittest"}]}"#;
    let (_d, paths) = project(Some(config));
    // What `ralph-ctl start` records.
    let mut started = state(&paths);
    let commands = vec![VerifyCommand {
        name: "tests".into(),
        command: "python3 -m unittest".into(),
        timeout_seconds: 60,
        network: false,
    }];
    started.check_resolution = Some(crate::observe::resolved::resolve(
        &paths.root,
        &commands,
        None,
        &Walls::open(),
    ));
    StateStore::new(&paths)
        .lock(true)
        .unwrap()
        .write(&started)
        .unwrap();
    let world = FakeWorld::new(IterationTail::default());
    let signal = Config::default().completion_signal;
    // A module of the project that shadows the runner: the claim is
    // rejected, naming it, though the check passed.
    std::fs::create_dir_all(paths.root.join("unittest")).unwrap();
    std::fs::write(paths.root.join("unittest/__init__.py"), "").unwrap();
    std::fs::write(paths.root.join("unittest/__main__.py"), "print('OK')\n").unwrap();
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    let Answer::Block { reason, .. } = report.answer else {
        panic!("a rejected claim goes on: {:?}", report.answer);
    };
    assert!(
        reason.contains("check_unchanged gate")
            && reason.contains(
                "`python3 -m unittest` now runs ./unittest/__init__.py and \
                     ./unittest/__main__.py, not the one at the loop's start"
            ),
        "{reason}"
    );
    assert!(!state(&paths).last_claim.unwrap().accepted);

    // Removed: the same claim completes.
    std::fs::remove_dir_all(paths.root.join("unittest")).unwrap();
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert!(state(&paths).last_claim.unwrap().accepted, "{report:?}");
}

#[test]
fn the_pin_decides_and_a_change_of_config_json_is_recorded_not_obeyed() {
    let pinned = r#"{"verify": [{"name": "tests", "command": "pinned-check"}]}"#;
    let (_d, paths) = project(Some(pinned));
    let store = StateStore::new(&paths);
    let lock = store.lock(false).unwrap();
    lock.write(&LoopState::new(SID.into(), 20, Timestamp::from_secs(0)))
        .unwrap();
    drop(lock);
    let world = FakeWorld {
        verify_exit: 1,
        ..FakeWorld::new(IterationTail::default())
    };
    let signal = Config::default().completion_signal;
    let claim = stop(&format!("Done.\n{signal}"));
    // A state from before pinning is pinned by its first stop.
    run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
    let pin = state(&paths).pinned.expect("pinned by the first stop");
    assert_eq!(pin.config.as_deref(), Some(pinned));
    let log_of = |paths: &ProjectPaths| {
        std::fs::read_to_string(paths.runtime_dir().join(log::LOG_FILE_NAME)).unwrap()
    };
    // (config.json now, config_changed lines logged by then, a problem shown?)
    let agent =
        r#"{"verify": [{"name": "tests", "command": "touch agent-ran"}], "maxIterations": 2}"#;
    // A notifier added, and the pinned check given the network: the
    // check still runs as pinned, without it.
    let networked = r#"{"verify": [{"name": "tests", "command": "pinned-check", "network": true}], "notify": "touch notified"}"#;
    let cases: &[(&str, usize, bool)] = &[
        (agent, 1, false),
        // The same content again: logged once.
        (agent, 1, false),
        // A config.json that no longer parses: shown, never fatal.
        ("{not json", 2, true),
        (networked, 3, false),
    ];
    for (now, logged, problem) in cases {
        std::fs::write(paths.config_file(), now).unwrap();
        let report = run_stop(&paths, &[], &claim, &world, &mut |_| Ok(())).unwrap();
        assert!(
            matches!(report.answer, Answer::Block { .. }),
            "{now}: {:?}",
            report.answer
        );
        assert_eq!(world.commands.borrow().last().unwrap(), "pinned-check");
        let after = state(&paths);
        assert_eq!(after.pinned.as_ref(), Some(&pin), "the pin stays");
        let drift = after.config_drift.expect("the drift is recorded");
        assert_eq!(drift.files[0].file, ".claude/ralph/config.json");
        assert_eq!(drift.files[0].problem.is_some(), *problem, "{drift:?}");
        assert_eq!(
            log_of(&paths).matches("\"config_changed\"").count(),
            *logged
        );
    }
    assert!(!world.commands.borrow().iter().any(|c| c != "pinned-check"));
    // Back as it was pinned: no drift.
    std::fs::write(paths.config_file(), pinned).unwrap();
    run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
    assert_eq!(state(&paths).config_drift, None);
}

#[test]
fn verification_runs_once_and_only_for_a_claim() {
    let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
    let (_d, paths) = project(Some(config));
    let world = FakeWorld {
        verify_exit: 1,
        ..FakeWorld::new(IterationTail::default())
    };
    run_stop(
        &paths,
        &[],
        &stop("Still working."),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(world.verify_runs.get(), 0);
    let signal = Config::default().completion_signal;
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(world.verify_runs.get(), 1);
    let Answer::Block { reason, .. } = report.answer else {
        panic!("a rejected claim goes on");
    };
    assert!(
        reason.starts_with("[Ralph: completion claim rejected]"),
        "{reason}"
    );
    let after = state(&paths);
    assert!(!after.last_claim.unwrap().accepted);

    let passing = FakeWorld::new(IterationTail::default());
    let report = run_stop(
        &paths,
        &[],
        &stop(&format!("Done.\n{signal}")),
        &passing,
        &mut |_| Ok(()),
    )
    .unwrap();
    let Answer::End { system_message } = &report.answer else {
        panic!("{:?}", report.answer);
    };
    assert!(
        system_message.starts_with("Ralph loop complete at iteration 3 of 5 (")
            && system_message.contains("verified: 1 command(s) passed"),
        "{system_message}"
    );
    assert_eq!(state(&paths).status, Status::Complete);
}

#[test]
fn a_rehearsed_claim_is_judged_by_the_pin_and_the_stops_gates_and_writes_nothing() {
    use crate::judge::completion::Gate;
    use crate::observe::test_counts::{CommandCounts, TestCounts};
    let config = r#"{"verify": [{"name": "tests", "command": "make test", "timeoutSeconds": 5}]}"#;
    let (_d, paths) = project(Some(config));
    // The first stop pins the config; the agent then rewrites it.
    let quiet = FakeWorld::new(IterationTail::default());
    run_stop(&paths, &[], &stop("Working."), &quiet, &mut |_| Ok(())).unwrap();
    std::fs::write(
        paths.config_file(),
        r#"{"verify": [{"name": "tests", "command": "true"}]}"#,
    )
    .unwrap();
    let store = StateStore::new(&paths);
    let lock = store.lock(false).unwrap();
    let mut loop_state = state(&paths);
    let counts = |run, skipped| TestCounts {
        run,
        passed: run,
        failed: 0,
        skipped,
    };
    loop_state.test_baseline = vec![CommandCounts {
        command: "make test".into(),
        counts: counts(3, 0),
        runners: Vec::new(),
    }];
    lock.write(&loop_state).unwrap();
    drop(lock);
    let log_file = crate::persist::log::log_path(&paths.state_file());
    let bytes = || {
        (
            std::fs::read(paths.state_file()).unwrap(),
            std::fs::read(&log_file).unwrap_or_default(),
        )
    };
    let before = bytes();
    let rehearse = |world: &FakeWorld, state: Option<&LoopState>| {
        rehearse_claim(&paths, &[], state, &Stop::default(), world).unwrap()
    };
    let gates = |r: &Rehearsal| -> Vec<(Gate, bool)> {
        r.gates.iter().map(|g| (g.gate, g.passed)).collect()
    };

    // Failing: the pin's command ran, once, and the verification gate says so.
    let failing = FakeWorld {
        verify_exit: 1,
        ..FakeWorld::new(IterationTail::default())
    };
    let failed = rehearse(&failing, Some(&loop_state));
    assert_eq!(*failing.commands.borrow(), ["make test"]);
    assert_eq!(failing.verify_runs.get(), 1);
    assert!(!failed.accepted());
    assert_eq!(
        gates(&failed),
        [(Gate::Plan, true), (Gate::Verification, false)]
    );
    assert_eq!(failed.baseline, loop_state.test_baseline);
    assert_eq!(failed.verification[0].exit_code, Some(1));

    // Passing with fewer tests than at the start: the test-count gate
    // fails it; with as many, every gate passes.
    let fewer = FakeWorld {
        verify_counts: Some(counts(2, 0)),
        ..FakeWorld::new(IterationTail::default())
    };
    let judged = rehearse(&fewer, Some(&loop_state));
    assert!(!judged.accepted());
    assert!(
        judged.gates.iter().any(|g| g.gate == Gate::TestCount
            && !g.passed
            && g.detail.contains("ran 2 tests (baseline 3)")),
        "{:?}",
        judged.gates
    );
    let as_many = FakeWorld {
        verify_counts: Some(counts(3, 0)),
        ..FakeWorld::new(IterationTail::default())
    };
    let judged = rehearse(&as_many, Some(&loop_state));
    assert!(judged.accepted(), "{:?}", judged.gates);
    assert_eq!(
        gates(&judged),
        [
            (Gate::Plan, true),
            (Gate::Verification, true),
            (Gate::TestCount, true)
        ]
    );

    // Nothing of the loop was written.
    assert_eq!(bytes(), before);

    // No loop: the config files as they are now.
    let now = FakeWorld::new(IterationTail::default());
    let fresh = rehearse(&now, None);
    assert_eq!(*now.commands.borrow(), ["true"]);
    assert!(fresh.accepted());
    assert!(fresh.baseline.is_empty());
    assert_eq!(
        gates(&fresh),
        [(Gate::Plan, true), (Gate::Verification, true)]
    );
    assert!(
        fresh
            .accepted_summary
            .contains("verified: 1 command(s) passed")
    );
    assert_eq!(bytes(), before);
}

#[test]
fn a_claim_of_a_step_with_verification_off_says_the_formula_turned_it_off() {
    let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
    let (_d, paths) = project(Some(config));
    let world = FakeWorld::new(IterationTail::default());
    let signal = Config::default().completion_signal;
    let report = run_stop(
        &paths,
        &[],
        &Stop {
            skip_project_verify: true,
            ..stop(&format!("The plan is written.\n{signal}"))
        },
        &world,
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(world.verify_runs.get(), 0, "nothing to run");
    let Answer::End { system_message } = &report.answer else {
        panic!("{:?}", report.answer);
    };
    assert!(
        system_message.contains(
            "not verified: verification is off for this step (`verify: false` in the formula)"
        ) && !system_message.contains("no verification command is configured"),
        "{system_message}"
    );
}

#[test]
fn another_sessions_stop_reads_nothing() {
    let (_d, paths) = project(None);
    let before = state(&paths);
    let mut other = stop("Hi.");
    other.session_id = Some("someone-else".into());
    let report = run_stop(
        &paths,
        &[],
        &other,
        &FakeWorld::new(IterationTail::default()),
        &mut |_| panic!("nothing to deliver"),
    )
    .unwrap();
    assert_eq!(
        report,
        StopReport {
            answer: Answer::Allow,
            notes: vec![],
            settled: false,
        }
    );
    assert_eq!(state(&paths), before);
}

#[test]
fn a_transcript_that_never_catches_up_is_said_and_recorded() {
    let (_d, paths) = project(None);
    let mut s = stop("");
    s.last_assistant_message = None;
    let report = run_stop(
        &paths,
        &[],
        &s,
        &FakeWorld::new(IterationTail::default()),
        &mut |_| Ok(()),
    )
    .unwrap();
    assert!(
        report.notes[0].contains("did not show this stop's final message"),
        "{report:?}"
    );
    assert_eq!(
        state(&paths).history[0].message_source,
        MessageSource::TranscriptBehind
    );
}

#[test]
fn a_claim_the_previous_stop_could_not_see_is_judged_at_this_one() {
    let (_d, paths) = project(None);
    let signal = Config::default().completion_signal;
    let mut behind = stop("");
    behind.last_assistant_message = None;
    // Stop 1: the transcript never shows the message (the claim).
    run_stop(
        &paths,
        &[],
        &behind,
        &FakeWorld::new(IterationTail::default()),
        &mut |_| Ok(()),
    )
    .unwrap();
    assert_eq!(state(&paths).status, Status::Running);
    // Stop 2: the claim is in the transcript now, before this iteration's prompt.
    let tail = IterationTail {
        caught_up: true,
        final_message: Some("Looked again.".into()),
        previous_final_message: Some(format!("All fixed.\n{signal}")),
        ..Default::default()
    };
    let report = run_stop(&paths, &[], &behind, &FakeWorld::new(tail), &mut |_| Ok(())).unwrap();
    assert!(
        matches!(&report.answer, Answer::End { system_message } if system_message.starts_with("Ralph loop complete")),
        "{:?}",
        report.answer
    );
    let after = state(&paths);
    assert_eq!(after.status, Status::Complete);
    let claim = after.last_claim.unwrap();
    assert!(
        claim.basis.contains("iteration 1's message"),
        "{}",
        claim.basis
    );
    assert_eq!(after.history[0].excerpt, format!("All fixed. {signal}"));

    // Without a behind stop before it, an older message never counts.
    let (_d, paths) = project(None);
    let tail = IterationTail {
        caught_up: true,
        final_message: Some("Looked again.".into()),
        previous_final_message: Some(format!("All fixed.\n{signal}")),
        ..Default::default()
    };
    run_stop(&paths, &[], &behind, &FakeWorld::new(tail), &mut |_| Ok(())).unwrap();
    assert_eq!(state(&paths).status, Status::Running);
}

#[test]
fn a_stop_failure_pauses_the_owning_loop_and_logs_it() {
    let (_d, paths) = project(None);
    let world = FakeWorld {
        usage: UsageReading {
            last_api_error: Some(usage::ApiErrorLine {
                status: Some(429),
                resets_at: Some(1_900_000_000),
                message: Some("rate limited".into()),
                retry_in_secs: None,
            }),
            ..UsageReading::default()
        },
        ..FakeWorld::new(IterationTail::default())
    };
    let failure = |session: &str| StopFailure {
        session_id: Some(session.into()),
        transcript_path: Some("/t.jsonl".into()),
        error: Some("rate_limit".into()),
        error_details: None,
        last_assistant_message: Some("API Error: Request rejected (429)".into()),
        driver_settles: false,
    };
    // Another session's failure changes nothing.
    let before = state(&paths);
    run_stop_failure(&paths, &failure("someone-else"), &world).unwrap();
    assert_eq!(state(&paths), before);

    let report = run_stop_failure(&paths, &failure(SID), &world).unwrap();
    assert_eq!(report.answer, Answer::Allow);
    let after = state(&paths);
    assert_eq!(after.status, Status::Paused);
    assert_eq!(after.iteration, before.iteration);
    let because = after.paused_because.as_ref().unwrap();
    assert_eq!(because.kind, PauseKind::RateLimit);
    assert_eq!(because.http_status, Some(429));
    assert_eq!(because.message, "API Error: Request rejected (429)");
    assert_eq!(because.resume_at, Some(Timestamp::from_secs(1_900_000_000)));
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].event, LogEvent::Pause);
    assert!(logged[0].resume_at.is_some());
    // A second failure of a paused loop changes nothing more.
    let paused = state(&paths);
    run_stop_failure(&paths, &failure(SID), &world).unwrap();
    assert_eq!(state(&paths), paused);
}

#[test]
fn a_stop_failure_tells_the_person_once_through_the_transaction() {
    let (dir, paths) = project(Some(r#"{"notify": "cat >> told.txt"}"#));
    let failure = StopFailure {
        session_id: Some(SID.into()),
        error: Some("rate_limit".into()),
        ..StopFailure::default()
    };
    let world = FakeWorld::new(IterationTail::default());
    run_stop_failure(&paths, &failure, &world).unwrap();
    let told = dir.path().join("told.txt");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let said = || std::fs::read_to_string(&told).unwrap_or_default();
    while !said().trim_end().ends_with('}') && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(said().contains("\"paused\""), "{}", said());
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    let events: Vec<_> = logged.iter().map(|e| e.event).collect();
    assert_eq!(events, [LogEvent::Pause, LogEvent::Notify]);
    assert!(
        logged[0]
            .reason
            .ends_with("paused (the client's StopFailure)"),
        "{:?}",
        logged[0].reason
    );
}

#[test]
fn a_stop_failure_under_a_driver_that_settles_leaves_the_telling_to_it() {
    let (_dir, paths) = project(Some(r#"{"notify": "cat >> told.txt"}"#));
    let failure = StopFailure {
        session_id: Some(SID.into()),
        error: Some("rate_limit".into()),
        driver_settles: true,
        ..StopFailure::default()
    };
    run_stop_failure(&paths, &failure, &FakeWorld::new(IterationTail::default())).unwrap();
    let after = state(&paths);
    assert_eq!(after.status, Status::Paused);
    assert!(crate::notify::due(&after).is_some(), "still to be told");
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    let events: Vec<_> = logged.iter().map(|e| e.event).collect();
    assert_eq!(events, [LogEvent::Pause]);
}

#[test]
fn a_session_end_interrupts_its_unwatched_loop_once() {
    let (_d, paths) = project(None);
    let world = FakeWorld::new(IterationTail::default());
    let before = state(&paths);
    run_session_end(&paths, Some("someone-else"), Some("logout"), &world).unwrap();
    run_session_end(&paths, None, Some("logout"), &world).unwrap();
    assert_eq!(state(&paths), before);
    run_session_end(&paths, Some(SID), Some("logout"), &world).unwrap();
    let after = state(&paths);
    assert_eq!(after.status, Status::Interrupted);
    assert!(
        after
            .ended_because
            .as_deref()
            .is_some_and(|w| w.contains("the session ended (logout)"))
    );
    run_session_end(&paths, Some(SID), Some("logout"), &world).unwrap();
    assert_eq!(state(&paths), after);
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].event, LogEvent::End);
}

#[test]
fn a_hook_problem_is_an_audit_line_and_the_loop_stays_as_it_was() {
    let (_d, paths) = project(None);
    let before = state(&paths);
    let notes = record_hook_problem(
        &paths,
        Some(SID),
        "cannot read\nthe prompt",
        Timestamp::from_secs(5),
    )
    .unwrap();
    assert!(notes.is_empty(), "{notes:?}");
    record_hook_problem(
        &paths,
        Some("someone-else"),
        "not this one",
        Timestamp::from_secs(5),
    )
    .unwrap();
    assert_eq!(state(&paths), before);
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].event, LogEvent::Problem);
    assert_eq!(logged[0].reason, "cannot read the prompt");
}

#[test]
fn every_stop_is_logged_with_its_decision() {
    let (_d, paths) = project(None);
    let tail = IterationTail {
        caught_up: true,
        ..Default::default()
    };
    run_stop(
        &paths,
        &[],
        &stop("Working."),
        &FakeWorld::new(tail),
        &mut |_| Ok(()),
    )
    .unwrap();
    let logged = log::read_last(&paths.state_file(), 5).unwrap();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0].event, LogEvent::Stop);
    assert_eq!(logged[0].iteration, 1);
    assert_eq!(logged[0].decision, Some(StopDecision::Block));
    assert_eq!(logged[0].status, Status::Running);
}
