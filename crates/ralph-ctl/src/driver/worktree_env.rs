//! A new worktree made ready before its agent starts (a queue item's, a
//! `--worktree` iteration's): `worktreeSetup` run in it, inside the walls
//! of the checks, then its test baseline measured there and what its
//! checks resolve to, so that its claims are judged by what the check does
//! where it runs. The main checkout is out of a worktree check's sight
//! (`ralph_core::walls`): what a worktree needs that the
//! main checkout keeps out of git, its setup gives it.
//!
//! A check that fails in the new worktree, before any change, where it
//! passed at the loop's baseline fails in every worktree: the worktree
//! lacks something of the main checkout's environment, and no item could
//! fix it. The loop ends before its agent starts, naming the check, what
//! it reached of the main checkout, and the fix.

use std::time::Instant;

use ralph_core::events::WorktreeBaseline;
use ralph_core::judge::config::Config;
use ralph_core::judge::state::LoopState;
use ralph_core::observe::main_checkout;
use ralph_core::observe::resolved;
use ralph_core::observe::verify::{self, BaselineFailure, VerifyCommand, VerifyResult};
use ralph_core::paths::ProjectPaths;
use ralph_core::walls::Walls;

use super::carriers::NewWorktree;
use super::say;
use super::worktree::{self, NotEntered, Worktree, WorktreePlan};
use super::worktree_made::{self, Found, Made, Readiness};
use crate::error::CtlError;

/// Why a new worktree cannot be worked; each names the fix, and that no
/// agent ran.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unfit {
    /// Its `worktreeSetup` failed (`how`: with the last lines of its output).
    #[error(
        "worktreeSetup `{command}` failed in the new worktree {shown} ({how}): fix the command in \
         .claude/ralph/config.json (it runs in each new worktree, inside the walls of the checks, \
         before the worktree's test baseline; try it by hand in a `git worktree add` of your own), \
         or remove it; no agent ran"
    )]
    SetupFailed {
        /// The setup command.
        command: String,
        /// The worktree, as the person is shown it.
        shown: String,
        /// How it failed.
        how: String,
    },
    /// Its `worktreeSetup` left files git does not ignore.
    #[error(
        "worktreeSetup `{command}` left files in the new worktree {shown} that git does not ignore ({}): \
         they would be committed with the item's work; add them to .gitignore (and commit it), or \
         have the command write elsewhere; no agent ran",
        files.join(", ")
    )]
    SetupLeftFiles {
        /// The setup command.
        command: String,
        /// The worktree, as the person is shown it.
        shown: String,
        /// The first files it left.
        files: Vec<String>,
    },
    /// Checks fail there that passed where the loop's baseline was taken:
    /// which, what they reached of the main checkout, and the fix.
    #[error("{0}")]
    ChecksFailHere(String),
    /// git could not tell its commit or its files.
    #[error(transparent)]
    Git(#[from] CtlError),
}

/// Makes the new `worktree` of the loop `state` ready: runs `worktreeSetup`
/// in it, then measures its test baseline and resolves its checks there
/// (or keeps the loop's, measured in a worktree at the same commit).
/// `Ok(None)`: nothing to record. `Err`: why the worktree cannot be
/// worked, in words for the person and the loop's record.
pub(crate) fn prepare(
    paths: &ProjectPaths,
    config: &Config,
    state: &LoopState,
    worktree: &Worktree,
) -> Result<Option<WorktreeBaseline>, Unfit> {
    let shown = worktree.shown(&paths.root);
    let walls =
        ralph_core::engine::check_walls(&paths.root, &worktree.path, config.sandbox.walls());
    if let Some(setup) = &config.worktree_setup {
        run_setup(setup, &walls, worktree, &shown)?;
    }
    let commands = &config.completion.verify;
    if commands.is_empty() {
        return Ok(None);
    }
    let commit = worktree::git(&worktree.path, &["rev-parse", "HEAD"])?;
    if state.baseline_commit.as_deref() == Some(commit.as_str()) {
        say(&format!(
            "worktree {shown}: at {}, the commit the loop's test baseline was measured at in a \
             worktree, with the same setup: that baseline stands",
            short(&commit)
        ));
        return Ok(None);
    }
    say(&format!(
        "worktree {shown}: running the verify command(s) for its own test baseline (at most {} s)",
        verify::total_timeout(commands)
    ));
    let measured = verify::baseline(&worktree.path, commands, &walls);
    for entry in &measured.counts {
        say(&format!(
            "worktree {shown}: test baseline of `{}`: {}",
            entry.command,
            entry.counts.describe()
        ));
    }
    let new: Vec<&BaselineFailure> = measured
        .failures
        .iter()
        .filter(|f| {
            !state
                .baseline_failures
                .iter()
                .any(|b| b.command == f.command)
        })
        .collect();
    if !new.is_empty() {
        return Err(Unfit::ChecksFailHere(fails_only_here(
            paths, config, state, worktree, &walls, &new,
        )));
    }
    // What the checks resolve to here, on the PATH they run with here.
    let check_resolution = state.check_resolution.as_ref().map(|before| {
        let checks: Vec<VerifyCommand> = before
            .commands
            .iter()
            .map(|c| VerifyCommand {
                name: "check".into(),
                command: c.command.clone(),
                timeout_seconds: 0,
                network: false,
            })
            .collect();
        let path = walls.path_for_check(&before.path);
        resolved::resolve_in(&worktree.path, &paths.root, &checks, Some(&path), &walls)
    });
    Ok(Some(WorktreeBaseline {
        commit,
        test_baseline: measured.counts,
        failures: measured.failures,
        check_resolution,
    }))
}

/// Runs `worktreeSetup` in the new worktree, inside `walls`, timed; an
/// error naming the command, how it failed and the fix when it fails, or
/// when it leaves files git does not ignore (they would be committed with
/// the item's work).
fn run_setup(
    setup: &VerifyCommand,
    walls: &Walls,
    worktree: &Worktree,
    shown: &str,
) -> Result<(), Unfit> {
    say(&format!(
        "worktree {shown}: worktreeSetup `{}` (at most {} s)",
        setup.command, setup.timeout_seconds
    ));
    let started = Instant::now();
    let result = verify::run(&worktree.path, setup, walls);
    if !result.passed() {
        return Err(Unfit::SetupFailed {
            command: setup.command.clone(),
            shown: shown.to_string(),
            how: how_it_failed(&result),
        });
    }
    say(&format!(
        "worktree {shown}: worktreeSetup done in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let left = worktree::git(
        &worktree.path,
        &["status", "--porcelain", "--ignore-submodules=all"],
    )?;
    if !left.is_empty() {
        let files: Vec<String> = left
            .lines()
            .map(|l| l.get(3..).unwrap_or(l).to_string())
            .take(5)
            .collect();
        return Err(Unfit::SetupLeftFiles {
            command: setup.command.clone(),
            shown: shown.to_string(),
            files,
        });
    }
    Ok(())
}

/// How a command failed, with the last lines of its output.
fn how_it_failed(result: &VerifyResult) -> String {
    let how = if result.timed_out {
        "timed out".to_string()
    } else {
        match result.exit_code {
            Some(code) => format!("exit {code}"),
            None => "it could not run".to_string(),
        }
    };
    match result.output_tail.trim() {
        "" => format!("{how}, no output"),
        tail => format!("{how}; last lines of its output:\n{tail}\n"),
    }
}

/// Why a worktree whose checks `failed` there, but not where the loop's
/// baseline was taken, cannot be worked: the checks, what they reached of
/// the main checkout, and the fix.
fn fails_only_here(
    paths: &ProjectPaths,
    config: &Config,
    state: &LoopState,
    worktree: &Worktree,
    walls: &Walls,
    failed: &[&BaselineFailure],
) -> String {
    let shown = worktree.shown(&paths.root);
    let checks: Vec<String> = failed.iter().map(|f| f.describe()).collect();
    let output: Vec<&str> = failed.iter().map(|f| f.excerpt.as_str()).collect();
    let path = walls.path_for_check(&std::env::var("PATH").unwrap_or_default());
    let reach = main_checkout::reaches(&paths.root, &worktree.path, &path, &output.join("\n"));
    let place = match state.baseline_commit {
        Some(_) => "in the worktree the loop measured last",
        None => "in the main checkout, at the loop's start",
    };
    let reached = if reach.is_empty() {
        String::new()
    } else {
        format!(" It reaches into the main checkout: {}.", reach.join("; "))
    };
    let fix = match &config.worktree_setup {
        Some(setup) => format!(
            "worktreeSetup `{}` ran and did not give it: change it in .claude/ralph/config.json",
            setup.command
        ),
        None => main_checkout::fix_for(&paths.root),
    };
    let tails: Vec<String> = failed
        .iter()
        .filter(|f| !f.excerpt.trim().is_empty())
        .map(|f| format!("`{}`:\n{}", f.command, f.excerpt))
        .collect();
    format!(
        "the test baseline of the new worktree {shown} fails: {} there before any change, where it \
         passed {place}.{reached} A check that fails in every new worktree would spend the item on \
         what no change of it can fix: the worktree lacks what the main checkout has out of git (a \
         generated file, an install into the main checkout); {fix}; no agent ran.\n{}",
        checks.join(", "),
        tails.join("\n")
    )
}

/// The first 12 characters of a commit.
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

/// The worktree of the loop's current iteration, made from the base (or
/// taken up again when the iteration is resumed, or the item queued
/// again); a new one is made ready ([`prepare`]: its setup, its test
/// baseline) and becomes the breaker's baseline. One found again is taken
/// up only while it is what a new one would be (`worktree_made`); else it
/// is made afresh first, what an agent left in it kept on a branch.
pub(crate) fn enter_worktree(
    paths: &ralph_core::paths::ProjectPaths,
    plan: &WorktreePlan,
    item_name: Option<&str>,
    config: &ralph_core::judge::config::Config,
) -> Result<(Worktree, Option<NewWorktree>), NotEntered> {
    let state = ralph_core::persist::store::StateStore::new(paths)
        .read()
        .map_err(CtlError::from)?
        .ok_or_else(|| CtlError::Client("the loop's state is gone".into()))?;
    let name = match item_name {
        Some(name) => name.to_string(),
        None => worktree::name(&state.started_at.to_string(), state.iteration),
    };
    let loop_started = state.started_at.to_string();
    let mut worktree = plan.create(&name)?;
    if !worktree.created {
        worktree = take_up(paths, plan, config, &loop_started, worktree, &name)?;
    }
    super::say(&format!(
        "iteration {} works in {} (branch {}, from {})",
        state.iteration,
        worktree.shown(&paths.root),
        worktree.branch,
        plan.base
    ));
    if !worktree.created {
        return Ok((worktree, None));
    }
    let setup = config.worktree_setup.as_ref().map(|s| s.command.clone());
    let mut made = Made {
        loop_started,
        base_commit: worktree::git(&worktree.path, &["rev-parse", "HEAD"])?,
        setup,
        worktree_id: worktree_made::identity(&worktree.path),
        ready: Readiness::Making,
    };
    worktree_made::write(paths, &name, &made)?;
    let prepared = prepare(paths, config, &state, &worktree);
    made.ready = match &prepared {
        Ok(_) => Readiness::Ready,
        Err(Unfit::SetupFailed { .. } | Unfit::SetupLeftFiles { .. }) => Readiness::SetupFailed,
        Err(Unfit::ChecksFailHere(_)) => Readiness::BaselineFailed,
        Err(Unfit::Git(_)) => Readiness::Making,
    };
    worktree_made::write(paths, &name, &made)?;
    let tests = prepared.map_err(NotEntered::Unfit)?;
    let progress = ralph_core::observe::progress::baseline(&worktree.path);
    Ok((worktree, Some(NewWorktree { progress, tests })))
}

/// The worktree `name` found again by the loop started at `loop_started`:
/// itself while it is fit (`worktree_made::judge`), else made afresh from
/// the base, each said in one line, with the branch that keeps what an
/// agent left in it.
fn take_up(
    paths: &ProjectPaths,
    plan: &WorktreePlan,
    config: &Config,
    loop_started: &str,
    worktree: Worktree,
    name: &str,
) -> Result<Worktree, CtlError> {
    let base = worktree::git(
        &plan.root,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{}^{{commit}}", plan.base),
        ],
    )?;
    let setup = config.worktree_setup.as_ref().map(|s| s.command.as_str());
    let made = worktree_made::read_for(paths, name, &worktree.path);
    let shown = worktree.shown(&paths.root);
    let why = match worktree_made::judge(made.as_ref(), loop_started, setup, &base) {
        Found::Fit => return Ok(worktree),
        Found::Stale(why) => why,
        Found::UnlessWorked(why) => match plan.holds(&worktree)? {
            Some(held) => {
                say(&format!(
                    "worktree {shown} taken up as it is: {why}, and it holds {held} not landed"
                ));
                return Ok(worktree);
            }
            None => why,
        },
    };
    if let Some(what) = WorktreePlan::in_progress(&worktree) {
        say(&format!(
            "worktree {shown} taken up as it is, not made afresh ({why}): {what} is in progress \
             in it; finish or abort it there to have it made afresh"
        ));
        return Ok(worktree);
    }
    match plan.set_aside(&worktree)? {
        Some((branches, held)) if !branches.is_empty() => say(&format!(
            "worktree {shown} made afresh from {}: {why}; what it held ({held}) is kept on \
             branch {} (files git ignores are not kept)",
            plan.base,
            branches.join(" and ")
        )),
        _ => say(&format!(
            "worktree {shown} made afresh from {}: {why} (files git ignores are not kept)",
            plan.base
        )),
    }
    worktree_made::forget(paths, name);
    plan.create(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;
    use ralph_core::judge::config::SandboxSetting;

    /// A repository with one commit and a worktree of it, and a config
    /// whose verify command is `check` (no walls: the logic, not the walls).
    fn made(
        check: &str,
        setup: Option<&str>,
    ) -> (tempfile::TempDir, ProjectPaths, Worktree, Config) {
        let dir = crate::testdir::new("worktree-env");
        let root = std::fs::canonicalize(dir.path()).unwrap();
        sh(&root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join(".gitignore"), "made/\n").unwrap();
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        sh(&root, &["add", "-A"]);
        sh(&root, &["commit", "-q", "-m", "one"]);
        let plan = super::super::worktree::plan(&root, None, false).unwrap();
        let worktree = plan.create("item-1").unwrap();
        let mut config = Config {
            sandbox: SandboxSetting::Off,
            ..Config::default()
        };
        config.completion.verify = vec![VerifyCommand {
            name: "tests".into(),
            command: check.into(),
            timeout_seconds: 20,
            network: false,
        }];
        config.worktree_setup = setup.map(|command| VerifyCommand {
            name: "worktreeSetup".into(),
            command: command.into(),
            timeout_seconds: 20,
            network: false,
        });
        (dir, ProjectPaths::new(&root), worktree, config)
    }

    fn state() -> LoopState {
        LoopState::new("s".into(), 5, ralph_core::time::Timestamp::from_secs(0))
    }

    #[test]
    fn a_new_worktree_is_set_up_then_measured_where_its_check_runs() {
        let (_dir, paths, worktree, config) = made(
            "test -f made/file",
            Some("mkdir -p made && echo x > made/file"),
        );
        let measured = prepare(&paths, &config, &state(), &worktree)
            .unwrap()
            .expect("a baseline of its own");
        let head = worktree::git(&worktree.path, &["rev-parse", "HEAD"]).unwrap();
        assert_eq!(measured.commit, head);
        assert!(measured.failures.is_empty(), "{measured:?}");
        // The same commit measured before: that baseline stands, nothing runs.
        let (_dir, paths, worktree, config) = made("false", None);
        let mut measured_before = state();
        measured_before.baseline_commit =
            Some(worktree::git(&worktree.path, &["rev-parse", "HEAD"]).unwrap());
        assert!(matches!(
            prepare(&paths, &config, &measured_before, &worktree),
            Ok(None)
        ));
    }

    #[test]
    fn a_check_failing_only_in_the_worktree_is_named_and_one_failing_everywhere_is_the_task() {
        let (_dir, paths, worktree, config) = made("test -f made/file", None);
        let why = prepare(&paths, &config, &state(), &worktree)
            .unwrap_err()
            .to_string();
        for words in [
            "the test baseline of the new worktree .claude/worktrees/item-1 fails",
            "`test -f made/file` exited 1 there before any change",
            "where it passed in the main checkout",
            "set worktreeSetup",
            "no agent ran",
        ] {
            assert!(why.contains(words), "{words:?} in {why}");
        }
        // Failing at the loop's start too: the loop's task, recorded.
        let mut failing = state();
        failing.baseline_failures = vec![BaselineFailure {
            command: "test -f made/file".into(),
            how: "exited 1".into(),
            counts: None,
            excerpt: String::new(),
        }];
        let measured = prepare(&paths, &config, &failing, &worktree)
            .unwrap()
            .unwrap();
        assert_eq!(measured.failures.len(), 1);
    }

    #[test]
    fn a_worktree_found_again_is_taken_up_only_while_its_record_says_it_is_fit() {
        let (_dir, paths, mut worktree, config) = made("true", Some("true"));
        worktree.created = false;
        let plan = super::super::worktree::plan(&paths.root, None, false).unwrap();
        let base = worktree::git(&paths.root, &["rev-parse", "main"]).unwrap();
        let record = |ready| Made {
            loop_started: "1".into(),
            base_commit: base.clone(),
            setup: Some("true".into()),
            worktree_id: worktree_made::identity(&worktree.path),
            ready,
        };
        worktree_made::write(&paths, "item-1", &record(Readiness::Ready)).unwrap();
        let again = take_up(&paths, &plan, &config, "2", worktree.clone(), "item-1").unwrap();
        assert!(!again.created, "fit: taken up as it is");
        // The record of another worktree of the name (an earlier one's,
        // restored): none; this one, holding nothing, is made afresh.
        let mut earlier = record(Readiness::Ready);
        earlier.worktree_id = Some("0:0".into());
        worktree_made::write(&paths, "item-1", &earlier).unwrap();
        let afresh = take_up(&paths, &plan, &config, "2", worktree.clone(), "item-1").unwrap();
        assert!(
            afresh.created,
            "an earlier worktree's record vouches for none"
        );
        let worktree = Worktree {
            created: false,
            ..afresh
        };
        // Its baseline failed: made afresh.
        std::fs::write(worktree.path.join("left.txt"), "x\n").unwrap();
        worktree_made::write(&paths, "item-1", &record(Readiness::BaselineFailed)).unwrap();
        let mut afresh = take_up(&paths, &plan, &config, "2", worktree.clone(), "item-1").unwrap();
        assert!(afresh.created && !afresh.path.join("left.txt").exists());
        // Looked at all the same: what was left in it is kept.
        let left = worktree::git(
            &paths.root,
            &["ls-tree", "--name-only", "ralph/kept/item-1-1"],
        )
        .unwrap();
        assert!(left.contains("left.txt"), "{left}");
        assert_eq!(
            worktree_made::read(&paths, "item-1"),
            None,
            "to be recorded anew"
        );
        // No record (an older ralph made it) and an agent's commit in it:
        // taken up as it is.
        std::fs::write(afresh.path.join("b.txt"), "b\n").unwrap();
        sh(&afresh.path, &["add", "b.txt"]);
        sh(&afresh.path, &["commit", "-q", "-m", "work"]);
        afresh.created = false;
        let taken = take_up(&paths, &plan, &config, "2", afresh.clone(), "item-1").unwrap();
        assert!(!taken.created && taken.path.join("b.txt").exists());
        // A record saying its making never finished: looked at all the
        // same, its commit kept.
        worktree_made::write(&paths, "item-1", &record(Readiness::Making)).unwrap();
        let mut made_again = take_up(&paths, &plan, &config, "2", afresh, "item-1").unwrap();
        assert!(made_again.created && !made_again.path.join("b.txt").exists());
        let kept = worktree::git(
            &paths.root,
            &["log", "-1", "--format=%s", "ralph/kept/item-1-2"],
        )
        .unwrap();
        assert_eq!(kept, "work");
        // A merge in progress: taken up as it is, not made afresh.
        worktree_made::write(&paths, "item-1", &record(Readiness::SetupFailed)).unwrap();
        let place = ralph_core::own_git::GitPlace::find(&made_again.path).unwrap();
        std::fs::write(place.git_dir.join("MERGE_HEAD"), format!("{base}\n")).unwrap();
        std::fs::write(made_again.path.join("c.txt"), "c\n").unwrap();
        made_again.created = false;
        let kept_as_is =
            take_up(&paths, &plan, &config, "2", made_again.clone(), "item-1").unwrap();
        assert!(!kept_as_is.created && kept_as_is.path.join("c.txt").exists());
    }

    #[test]
    fn a_record_left_by_an_earlier_worktree_of_the_name_vouches_for_no_new_one() {
        let (_dir, paths, worktree, _config) = made("true", None);
        let plan = super::super::worktree::plan(&paths.root, None, false).unwrap();
        let base = worktree::git(&paths.root, &["rev-parse", "main"]).unwrap();
        let ready = Made {
            loop_started: "1".into(),
            base_commit: base,
            setup: None,
            worktree_id: worktree_made::identity(&worktree.path),
            ready: Readiness::Ready,
        };
        worktree_made::write(&paths, "item-1", &ready).unwrap();
        // Removed by hand, the record left behind; made again.
        worktree::git(
            &paths.root,
            &[
                "worktree",
                "remove",
                "--force",
                &worktree.path.to_string_lossy(),
            ],
        )
        .unwrap();
        let again = plan.create("item-1").unwrap();
        assert!(again.created);
        assert_eq!(worktree_made::read(&paths, "item-1"), None);
    }

    #[test]
    fn a_setup_that_fails_or_leaves_tracked_files_is_named_with_the_fix() {
        let (_dir, paths, worktree, config) = made("true", Some("echo broken; exit 3"));
        let why = prepare(&paths, &config, &state(), &worktree)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("worktreeSetup `echo broken; exit 3` failed in the new worktree")
                && why.contains("exit 3")
                && why.contains("broken")
                && why.contains(".claude/ralph/config.json"),
            "{why}"
        );
        let (_dir, paths, worktree, config) = made("true", Some("echo x > left.txt"));
        let why = prepare(&paths, &config, &state(), &worktree)
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("left files in the new worktree") && why.contains("left.txt"),
            "{why}"
        );
    }
}
