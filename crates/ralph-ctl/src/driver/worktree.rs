//! Worktrees for fresh iterations (`ralph-ctl run --worktree`): each
//! iteration runs in a git worktree of its own under `.claude/worktrees/`,
//! on a branch of its own made from the base ref, while the loop's state,
//! config and prompt stay in the main project. After the iteration its
//! worktree is removed when it holds nothing (no uncommitted change, no
//! commit ahead of the base), and kept otherwise, or when the iteration
//! failed, or with `--no-cleanup`. The main checkout's files are never
//! touched: git writes only under `.git/` and the worktree's own folder.

use std::path::{Path, PathBuf};

use ralph_core::own_git::{GitCall, GitError};

use crate::error::CtlError;

/// Folder (relative to the project root) holding the iterations' worktrees
/// (where ralph's git finds a worktree's record by its name).
pub(crate) const WORKTREES_DIR: &str = ralph_core::own_git::WORKTREES_DIR;

/// How a loop's iterations get their worktrees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WorktreePlan {
    /// The main checkout.
    pub(crate) root: PathBuf,
    /// What each worktree starts from and is compared with: `--base-ref`,
    /// else the branch the loop started on (its commit when detached).
    pub(crate) base: String,
    /// `--no-cleanup`: every worktree is kept.
    pub(crate) keep_all: bool,
}

/// One iteration's worktree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Worktree {
    /// Its folder.
    pub(crate) path: PathBuf,
    /// Its branch (`ralph/<loop>-<iteration>`).
    pub(crate) branch: String,
    /// False when it was there already (an iteration taken up again).
    pub(crate) created: bool,
}

/// What became of an iteration's worktree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Removed with its branch: the iteration left nothing in it.
    Removed,
    /// Kept, and why.
    Kept(String),
}

/// Runs git in `dir`; its stdout, or an error naming the command and what
/// git said. Always through ralph's one git runner with the hook's safe
/// configuration (`own_git::safe_git`, `own_git::GitCall`): in the folders
/// ralph found itself (never through a `.git` file or `commondir` the agent
/// could have rewritten), with no program the repository names (an
/// fsmonitor, a post-checkout hook, a filter, a signing program), and
/// within a deadline that stops git with everything it started.
pub(crate) fn git(dir: &Path, args: &[&str]) -> Result<String, CtlError> {
    git_call(dir)?
        .args(args)
        .text()
        .map_err(CtlError::git(format!(
            "git {} in {}",
            args.join(" "),
            dir.display()
        )))
}

/// The git call [`git`] makes in `dir`, for a caller that adds to it
/// (input on stdin, a remote reached); refused as [`git`] refuses.
pub(crate) fn git_call(dir: &Path) -> Result<GitCall, CtlError> {
    ralph_core::own_git::safe_git(dir, ralph_core::observe::progress::GIT_TIMEOUT)
        .map_err(CtlError::git(format!("preparing git in {}", dir.display())))
}

/// Checks that `root` is a git work tree with a commit, and settles the base:
/// `base_ref` (which must name a commit), else the branch checked out (its
/// commit when HEAD is detached).
pub(crate) fn plan(
    root: &Path,
    base_ref: Option<&str>,
    keep_all: bool,
) -> Result<WorktreePlan, CtlError> {
    match ralph_core::own_git::GitPlace::find(root) {
        Ok(_) | Err(ralph_core::own_git::PlaceError::NoRepository(_)) => {}
        Err(e) => return Err(CtlError::BadArgument(format!("--worktree: {e}"))),
    }
    let inside = git(root, &["rev-parse", "--is-inside-work-tree"]).unwrap_or_default();
    if inside != "true" {
        return Err(CtlError::BadArgument(format!(
            "--worktree needs a git project, and {} is not in a git work tree: run `git init` and commit, or leave out --worktree",
            root.display()
        )));
    }
    let base = if let Some(given) = base_ref {
        let commit = format!("{given}^{{commit}}");
        git(root, &["rev-parse", "--verify", "--quiet", &commit]).map_err(|_| {
            CtlError::BadArgument(format!(
                "--base-ref {given:?} names no commit in {}: give a branch, tag or commit that exists",
                root.display()
            ))
        })?;
        given.to_string()
    } else {
        if git(root, &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"]).is_err() {
            return Err(CtlError::BadArgument(format!(
                "--worktree needs a commit to start the worktrees from, and {} has none yet: commit once, or leave out --worktree",
                root.display()
            )));
        }
        match git(root, &["symbolic-ref", "--quiet", "--short", "HEAD"]) {
            Ok(branch) if !branch.is_empty() => branch,
            _ => git(root, &["rev-parse", "HEAD"])?,
        }
    };
    Ok(WorktreePlan {
        root: root.to_path_buf(),
        base,
        keep_all,
    })
}

/// How long adding or removing a worktree waits for another's.
const WORKTREE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(120);

/// The name of a loop's iteration: the loop's start time (digits only,
/// the same for every iteration and across `--resume`) and the iteration.
pub(crate) fn name(started_at: &str, iteration: u32) -> String {
    let stamp: String = started_at
        .chars()
        .filter(char::is_ascii_digit)
        .take(14)
        .collect();
    format!("{stamp}-{iteration}")
}

impl WorktreePlan {
    /// The worktree named `name` (see [`name`]): made from the base on a new
    /// branch `ralph/<name>`, or the one already there (an iteration
    /// resumed after a pause goes on where it was).
    pub(crate) fn create(&self, name: &str) -> Result<Worktree, CtlError> {
        let _held = self.hold()?;
        let dir = self.root.join(WORKTREES_DIR);
        std::fs::create_dir_all(&dir).map_err(CtlError::io("create", &dir))?;
        let ignore = dir.join(".gitignore");
        if !ignore.exists() {
            // Nothing in here is the project's: git status stays clean.
            std::fs::write(&ignore, "*\n").map_err(CtlError::io("write", &ignore))?;
        }
        let mut worktree = Worktree {
            path: dir.join(name),
            branch: format!("ralph/{name}"),
            created: false,
        };
        if worktree.path.join(".git").exists() {
            return Ok(worktree);
        }
        worktree.created = true;
        let path = worktree.path.to_string_lossy().into_owned();
        // A record left by an earlier worktree of this name must not
        // vouch for this one, never set up: gone before it is made.
        super::worktree_made::forget_removed(&self.root, &worktree.path);
        self.clear_stale_record(name)?;
        self.clear_leftovers(&worktree)?;
        git(
            &self.root,
            &[
                "worktree",
                "add",
                "--quiet",
                // No upstream: tracking would write .git/config, which a
                // queue run holds locked (config_hold).
                "--no-track",
                "-b",
                &worktree.branch,
                &path,
                &self.base,
            ],
        )?;
        Self::check_record(&worktree, name)?;
        Ok(worktree)
    }

    /// A record `.git/worktrees/<name>` left by a worktree whose folder is
    /// gone: git would name the new one's record otherwise (`<name>1`), and
    /// ralph finds a worktree's record by its name. `git worktree prune`
    /// drops such records (what `git gc` does in time).
    fn clear_stale_record(&self, name: &str) -> Result<(), CtlError> {
        let Ok(place) = ralph_core::own_git::GitPlace::find(&self.root) else {
            return Ok(());
        };
        if place.worktree_record(name).exists() {
            git(&self.root, &["worktree", "prune"])?;
        }
        Ok(())
    }

    /// What a worktree of this name that could not be wholly removed left:
    /// its folder (moved aside to `<name>.left-<n>`, never deleted) and its
    /// branch (kept under a kept name when it holds commits not on the
    /// base, else deleted), so that the worktree can be made again.
    fn clear_leftovers(&self, worktree: &Worktree) -> Result<(), CtlError> {
        if std::fs::symlink_metadata(&worktree.path).is_ok() {
            let name = worktree
                .path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            let parent = worktree.path.parent().unwrap_or(&self.root);
            let free = (1..1000)
                .map(|n| parent.join(format!("{name}.left-{n}")))
                .find(|p| std::fs::symlink_metadata(p).is_err())
                .ok_or_else(|| {
                    CtlError::BadArgument(format!(
                        "{} is in the way of a new worktree, and so are 999 folders set aside \
                         beside it: remove those you no longer need",
                        worktree.path.display()
                    ))
                })?;
            std::fs::rename(&worktree.path, &free)
                .map_err(CtlError::io("move aside", &worktree.path))?;
            super::say(&format!(
                "{} was left by a worktree not wholly removed: moved aside to {}",
                worktree.path.display(),
                free.display()
            ));
        }
        let reference = format!("refs/heads/{}", worktree.branch);
        let Ok(tip) = git(
            &self.root,
            &["rev-parse", "--verify", "--quiet", &reference],
        ) else {
            return Ok(());
        };
        let range = format!("{}..{tip}", self.base);
        let ahead = git(&self.root, &["rev-list", "--count", &range])?;
        if ahead != "0" {
            let kept = self.free_branch_name(&kept_stem(&worktree.branch))?;
            git(
                &self.root,
                &["update-ref", &format!("refs/heads/{kept}"), &tip, ""],
            )?;
            super::say(&format!(
                "branch {} was left by a worktree not wholly removed, with {ahead} commit(s) \
                 not on {}: kept as {kept}",
                worktree.branch, self.base
            ));
        }
        git(&self.root, &["update-ref", "-d", &reference])?;
        Ok(())
    }

    /// The worktree git just made has its record where ralph will look for
    /// it: `.git/worktrees/<name>`, as its `.git` file says now (ralph's
    /// git made it a moment ago; the agent has not run there yet).
    fn check_record(worktree: &Worktree, name: &str) -> Result<(), CtlError> {
        let checking = || format!("checking the worktree {}", worktree.path.display());
        let place = ralph_core::own_git::GitPlace::find(&worktree.path)
            .map_err(|e| CtlError::git(checking())(GitError::Place(e)))?;
        let written = std::fs::read_to_string(worktree.path.join(".git")).unwrap_or_default();
        let named = written
            .trim()
            .strip_prefix("gitdir:")
            .map(|dir| worktree.path.join(dir.trim()));
        let same = named
            .as_deref()
            .and_then(|dir| std::fs::canonicalize(dir).ok())
            .zip(std::fs::canonicalize(&place.git_dir).ok())
            .is_some_and(|(a, b)| a == b);
        if same {
            return Ok(());
        }
        Err(CtlError::git(checking())(GitError::Unsafe(format!(
            "git recorded the worktree {} elsewhere than {} ({}): remove the worktree \
             (`git worktree remove --force {}`) and run `git worktree prune`",
            worktree.path.display(),
            place.worktree_record(name).display(),
            written.trim(),
            worktree.path.display()
        ))))
    }

    /// After the iteration: removes `worktree` and its branch when it holds
    /// no uncommitted change and no commit ahead of the base, unless
    /// `failed` says why the iteration's work must be kept (or
    /// `--no-cleanup`); otherwise keeps it, saying why.
    pub(crate) fn finish(
        &self,
        worktree: &Worktree,
        failed: Option<&str>,
    ) -> Result<Finished, CtlError> {
        if self.keep_all {
            return Ok(Finished::Kept("--no-cleanup".into()));
        }
        if let Some(why) = failed {
            return Ok(Finished::Kept(why.to_string()));
        }
        if let Some(held) = self.holds(worktree)? {
            return Ok(Finished::Kept(held));
        }
        let path = worktree.path.to_string_lossy().into_owned();
        let _held = self.hold()?;
        // --force: ignored files (build output) do not keep an empty worktree.
        git(&self.root, &["worktree", "remove", "--force", &path])?;
        git(&self.root, &["branch", "-D", &worktree.branch])?;
        super::worktree_made::forget_removed(&self.root, &worktree.path);
        Ok(Finished::Removed)
    }
}

impl WorktreePlan {
    /// What `worktree` holds that is not on the base, in words (its
    /// uncommitted changes, else its commits ahead); `None`: nothing.
    pub(crate) fn holds(&self, worktree: &Worktree) -> Result<Option<String>, CtlError> {
        // Never into a submodule: its own configuration could name a
        // filter ralph's git options do not disable.
        let changes = git(
            &worktree.path,
            &["status", "--porcelain", "--ignore-submodules=all"],
        )?;
        if !changes.is_empty() {
            let count = changes.lines().count();
            return Ok(Some(format!(
                "{count} uncommitted change{}",
                if count == 1 { "" } else { "s" }
            )));
        }
        // HEAD and the item's branch: a worktree stopped mid-rebase, or
        // moved off its branch, holds commits on either.
        let tip = self.branch_tip(worktree);
        let mut args = vec!["rev-list", "--count", "HEAD"];
        args.extend(tip.as_deref());
        args.extend(["--not", self.base.as_str()]);
        let ahead: u64 = git(&worktree.path, &args)?.parse().unwrap_or(0);
        Ok((ahead > 0).then(|| {
            format!(
                "{ahead} commit{} ahead of {}",
                if ahead == 1 { "" } else { "s" },
                self.base
            )
        }))
    }

    /// The commit the item's branch of `worktree` is at, when it exists.
    fn branch_tip(&self, worktree: &Worktree) -> Option<String> {
        let reference = format!("refs/heads/{}", worktree.branch);
        git(
            &self.root,
            &["rev-parse", "--verify", "--quiet", &reference],
        )
        .ok()
        .filter(|tip| !tip.is_empty())
    }

    /// What git is in the middle of in `worktree` (a rebase, a merge, a
    /// cherry-pick, a revert, a bisect), in words; `None`: nothing.
    pub(crate) fn in_progress(worktree: &Worktree) -> Option<&'static str> {
        let place = ralph_core::own_git::GitPlace::find(&worktree.path).ok()?;
        [
            ("rebase-merge", "a rebase"),
            ("rebase-apply", "a rebase"),
            ("MERGE_HEAD", "a merge"),
            ("CHERRY_PICK_HEAD", "a cherry-pick"),
            ("REVERT_HEAD", "a revert"),
            ("BISECT_LOG", "a bisect"),
        ]
        .into_iter()
        .find(|(file, _)| std::fs::symlink_metadata(place.git_dir.join(file)).is_ok())
        .map(|(_, what)| what)
    }

    /// Removes `worktree` and its branch, so that it can be made afresh.
    /// What it holds that is not on the base is kept first: its
    /// uncommitted changes committed where it is, and that commit kept as
    /// `ralph/kept/<name>-<n>` (a namespace no item's branch can be in), and
    /// the item's branch kept too when it holds commits not kept so (the
    /// worktree moved off it); returned: the branches kept, with what the
    /// worktree held. Ignored files are not kept.
    pub(crate) fn set_aside(
        &self,
        worktree: &Worktree,
    ) -> Result<Option<(Vec<String>, String)>, CtlError> {
        let held = self.holds(worktree)?;
        if held.is_some() {
            // In the worktree only: no lock of the project's needed.
            let status = git(
                &worktree.path,
                &["status", "--porcelain", "--ignore-submodules=all"],
            )?;
            if !status.is_empty() {
                git(&worktree.path, &["add", "--all"])?;
                let message = format!(
                    "Work left uncommitted in {}, kept when it was made afresh",
                    worktree.branch
                );
                let mut args = committer(&worktree.path);
                args.extend(["commit", "--quiet", "--no-verify", "-m", &message]);
                git(&worktree.path, &args)?;
            }
        }
        let _held = self.hold()?;
        let mut kept = Vec::new();
        if held.is_some() {
            let head = git(&worktree.path, &["rev-parse", "HEAD"])?;
            let stem = kept_stem(&worktree.branch);
            let mut keep = |commit: &str| -> Result<(), CtlError> {
                let name = self.free_branch_name(&stem)?;
                // update-ref writes no configuration (a queue run may hold
                // .git/config locked).
                git(
                    &self.root,
                    &["update-ref", &format!("refs/heads/{name}"), commit, ""],
                )?;
                kept.push(name);
                Ok(())
            };
            let ahead = |tip: &str| {
                git(
                    &self.root,
                    &["rev-list", "--count", tip, "--not", &self.base],
                )
                .is_ok_and(|n| n != "0")
            };
            if ahead(&head) {
                keep(&head)?;
            }
            if let Some(tip) = self.branch_tip(worktree) {
                let within = git(&self.root, &["merge-base", "--is-ancestor", &tip, &head]).is_ok();
                if !within && ahead(&tip) {
                    keep(&tip)?;
                }
            }
        }
        let path = worktree.path.to_string_lossy().into_owned();
        git(&self.root, &["worktree", "remove", "--force", &path]).map_err(|e| {
            CtlError::BadArgument(format!(
                "the worktree {} could not be removed to be made afresh ({e}){}: remove it by \
                 hand (`git worktree remove --force {path}`, or delete the folder and run `git \
                 worktree prune`), then run again",
                worktree.path.display(),
                if kept.is_empty() {
                    String::new()
                } else {
                    format!("; what it held is kept on {}", kept.join(", "))
                }
            ))
        })?;
        let reference = format!("refs/heads/{}", worktree.branch);
        if git(
            &self.root,
            &["rev-parse", "--verify", "--quiet", &reference],
        )
        .is_ok()
        {
            git(&self.root, &["update-ref", "-d", &reference])?;
        }
        Ok(held.map(|what| (kept, what)))
    }

    /// `<stem>-<n>` for the first `n` from 1 that names no branch.
    fn free_branch_name(&self, stem: &str) -> Result<String, CtlError> {
        for n in 1..1000 {
            let name = format!("{stem}-{n}");
            let reference = format!("refs/heads/{name}");
            if git(
                &self.root,
                &["rev-parse", "--verify", "--quiet", &reference],
            )
            .is_err()
            {
                return Ok(name);
            }
        }
        Err(CtlError::BadArgument(format!(
            "branches {stem}-1 to {stem}-999 all exist: delete those you no longer need \
             (`git branch -D`)"
        )))
    }

    /// The project's worktree lock, held while one is added or removed.
    pub(crate) fn hold(&self) -> Result<std::fs::File, CtlError> {
        let paths = ralph_core::paths::ProjectPaths::new(&self.root);
        // The lock lives in the runtime folder, which git never sees.
        super::start::ignore_runtime(&paths)?;
        crate::queue::claims::store::ClaimStore::new(&paths)
            .worktree_lock(WORKTREE_PATIENCE)
            .map_err(CtlError::from)
    }
}

impl Worktree {
    /// Its folder relative to the project (for what the person is told).
    pub(crate) fn shown(&self, root: &Path) -> String {
        self.path
            .strip_prefix(root)
            .unwrap_or(&self.path)
            .display()
            .to_string()
    }
}

/// The stem of the kept names of `branch` (`ralph/<name>`):
/// `ralph/kept/<name>`, a namespace no item's or iteration's branch is in
/// (theirs are `ralph/item-…` and `ralph/<digits>-<n>`).
fn kept_stem(branch: &str) -> String {
    let name = branch.strip_prefix("ralph/").unwrap_or(branch);
    format!("ralph/kept/{name}")
}

/// `-c` options naming a committer when the repository at `dir` names
/// none (git refuses to commit without one).
fn committer(dir: &Path) -> Vec<&'static str> {
    match git(dir, &["var", "GIT_COMMITTER_IDENT"]) {
        Ok(_) => Vec::new(),
        Err(_) => vec!["-c", "user.name=ralph", "-c", "user.email=ralph@localhost"],
    }
}

/// Why an iteration's worktree was not entered.
#[derive(Debug)]
pub(crate) enum NotEntered {
    /// It could not be made (git, the loop's state).
    Failed(CtlError),
    /// It was made, but cannot be worked: its `worktreeSetup` failed, or
    /// its check fails there before any change (see `worktree_env`).
    Unfit(super::worktree_env::Unfit),
}

impl From<CtlError> for NotEntered {
    fn from(e: CtlError) -> Self {
        NotEntered::Failed(e)
    }
}

/// After a judged iteration: its worktree is removed when it holds nothing
/// and the iteration did not fail, kept otherwise; the person is told which.
pub(crate) fn leave_worktree(
    paths: &ralph_core::paths::ProjectPaths,
    plan: &WorktreePlan,
    worktree: &Worktree,
    iteration: u32,
) {
    let outcome = ralph_core::persist::store::StateStore::new(paths)
        .read()
        .ok()
        .flatten()
        .and_then(|state| {
            state
                .history
                .iter()
                .rev()
                .find(|r| r.iteration == iteration)
                .and_then(|r| r.outcome)
        });
    let failed = outcome
        .filter(|o| {
            matches!(
                o,
                ralph_core::judge::claims::OutcomeStatus::Error
                    | ralph_core::judge::claims::OutcomeStatus::GateBlocked
            )
        })
        .map(|o| format!("the iteration's outcome was {}", o.as_str()));
    let shown = worktree.shown(&paths.root);
    match plan.finish(worktree, failed.as_deref()) {
        Ok(Finished::Removed) => super::say(&format!(
            "worktree {shown} removed: the iteration left no change and no commit in it"
        )),
        Ok(Finished::Kept(why)) => super::say(&format!(
            "worktree {shown} kept (branch {}): {why}",
            worktree.branch
        )),
        Err(e) => super::say(&format!("worktree {shown} kept: {e}")),
    }
}

/// `path` as the merge queue compares it with the paths an item changed:
/// relative to the project `root`, without `.` parts; `None` outside it.
pub(crate) fn in_project(root: &Path, path: &Path) -> Option<std::path::PathBuf> {
    let relative = if path.is_absolute() {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        real(path).strip_prefix(real(root)).ok()?.to_path_buf()
    } else {
        path.to_path_buf()
    };
    let cleaned: std::path::PathBuf = relative
        .components()
        .filter(|c| !matches!(c, std::path::Component::CurDir))
        .collect();
    (!cleaned.as_os_str().is_empty()).then_some(cleaned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let dir = crate::testdir::new("worktree");
        let root = dir.path().to_path_buf();
        sh(&root, &["init", "-q", "-b", "main"]);
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        sh(&root, &["add", "a.txt"]);
        sh(&root, &["commit", "-q", "-m", "one"]);
        (dir, root)
    }

    #[test]
    fn names_follow_the_loop_and_the_iteration() {
        assert_eq!(name("2026-11-23T11:22:33Z", 4), "20261123112233-4");
    }

    #[test]
    fn an_empty_worktree_goes_and_one_with_work_stays() {
        let (_d, root) = repo();
        let plan = plan(&root, None, false).unwrap();
        assert_eq!(plan.base, "main");
        let untouched = plan.create("l-1").unwrap();
        assert!(untouched.path.join("a.txt").is_file());
        assert!(untouched.created);
        let again = plan.create("l-1").unwrap();
        assert!(
            !again.created && again.path == untouched.path,
            "taken up again"
        );
        assert_eq!(plan.finish(&untouched, None).unwrap(), Finished::Removed);
        assert!(!untouched.path.exists());

        let committed = plan.create("l-2").unwrap();
        std::fs::write(committed.path.join("b.txt"), "b\n").unwrap();
        assert_eq!(
            plan.finish(&committed, None).unwrap(),
            Finished::Kept("1 uncommitted change".into())
        );
        sh(&committed.path, &["add", "b.txt"]);
        sh(&committed.path, &["commit", "-q", "-m", "two"]);
        assert_eq!(
            plan.finish(&committed, None).unwrap(),
            Finished::Kept("1 commit ahead of main".into())
        );
        let failed = plan.create("l-3").unwrap();
        assert_eq!(
            plan.finish(&failed, Some("its outcome was error")).unwrap(),
            Finished::Kept("its outcome was error".into())
        );
        // The main checkout: nothing changed, nothing untracked.
        let status = git(&root, &["status", "--porcelain"]).unwrap();
        assert_eq!(status, "");
        assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "a\n");
    }

    #[test]
    fn a_worktree_set_aside_keeps_what_it_held_on_a_branch_of_its_own() {
        let (_d, root) = repo();
        let plan = plan(&root, None, false).unwrap();
        let worked = plan.create("item-a").unwrap();
        std::fs::write(worked.path.join("b.txt"), "b\n").unwrap();
        sh(&worked.path, &["add", "b.txt"]);
        sh(&worked.path, &["commit", "-q", "-m", "two"]);
        std::fs::write(worked.path.join("c.txt"), "c\n").unwrap();
        // The base's config locked (a queue run holds it): nothing here writes it.
        std::fs::write(root.join(".git/config.lock"), "held\n").unwrap();
        let (branches, held) = plan.set_aside(&worked).unwrap().unwrap();
        let branch = branches.concat();
        assert_eq!(branch, "ralph/kept/item-a-1", "a namespace no item is in");
        assert_eq!(held, "1 uncommitted change");
        assert!(!worked.path.exists());
        let kept = git(&root, &["ls-tree", "--name-only", "-r", &branch]).unwrap();
        assert_eq!(
            kept, "a.txt\nb.txt\nc.txt",
            "the commit and the change kept"
        );
        let afresh = plan.create("item-a").unwrap();
        assert!(afresh.created && !afresh.path.join("b.txt").exists());
        // Nothing to keep: only removed.
        assert_eq!(plan.set_aside(&afresh).unwrap(), None);
        // Always looked at, whatever a record said: the change is kept.
        let again = plan.create("item-a").unwrap();
        std::fs::write(again.path.join("d.txt"), "d\n").unwrap();
        let (branches, _) = plan.set_aside(&again).unwrap().unwrap();
        assert_eq!(branches, ["ralph/kept/item-a-2"]);
        std::fs::remove_file(root.join(".git/config.lock")).unwrap();
        let branches = git(&root, &["branch", "--list", "ralph/*"]).unwrap();
        assert_eq!(
            branches.replace(' ', ""),
            "ralph/kept/item-a-1\nralph/kept/item-a-2"
        );
    }

    #[test]
    fn commits_off_head_are_kept_and_a_rebase_in_progress_is_seen() {
        let (_d, root) = repo();
        let plan = plan(&root, None, false).unwrap();
        // Moved off its branch: the branch's commit is what it holds.
        let moved = plan.create("item-m").unwrap();
        std::fs::write(moved.path.join("b.txt"), "b\n").unwrap();
        sh(&moved.path, &["add", "b.txt"]);
        sh(&moved.path, &["commit", "-q", "-m", "on the branch"]);
        sh(&moved.path, &["checkout", "-q", "--detach", "main"]);
        assert_eq!(
            plan.holds(&moved).unwrap().as_deref(),
            Some("1 commit ahead of main")
        );
        assert_eq!(WorktreePlan::in_progress(&moved), None);
        let (branches, _) = plan.set_aside(&moved).unwrap().unwrap();
        assert_eq!(branches, ["ralph/kept/item-m-1"]);
        let kept = git(&root, &["log", "-1", "--format=%s", "ralph/kept/item-m-1"]).unwrap();
        assert_eq!(kept, "on the branch");

        // Stopped mid-rebase: seen, so that it is not made afresh.
        let rebasing = plan.create("item-r").unwrap();
        std::fs::write(rebasing.path.join("a.txt"), "mine\n").unwrap();
        sh(&rebasing.path, &["commit", "-q", "-am", "mine"]);
        std::fs::write(root.join("a.txt"), "theirs\n").unwrap();
        sh(&root, &["commit", "-q", "-am", "theirs"]);
        let stopped = crate::testdir::git_as_person_status(&rebasing.path, &["rebase", "main"]);
        assert!(!stopped, "the rebase stops on its conflict");
        assert_eq!(WorktreePlan::in_progress(&rebasing), Some("a rebase"));
    }

    #[test]
    fn a_worktree_not_wholly_removed_can_be_made_again() {
        let (_d, root) = repo();
        let plan = plan(&root, None, false).unwrap();
        let worked = plan.create("item-l").unwrap();
        std::fs::write(worked.path.join("b.txt"), "b\n").unwrap();
        sh(&worked.path, &["add", "b.txt"]);
        sh(&worked.path, &["commit", "-q", "-m", "work"]);
        // Its folder emptied of git's file, its branch left behind.
        std::fs::remove_file(worked.path.join(".git")).unwrap();
        let again = plan.create("item-l").unwrap();
        assert!(again.created && !again.path.join("b.txt").exists());
        let aside = root.join(WORKTREES_DIR).join("item-l.left-1");
        assert!(aside.join("b.txt").is_file(), "the folder moved aside");
        let kept = git(&root, &["log", "-1", "--format=%s", "ralph/kept/item-l-1"]).unwrap();
        assert_eq!(kept, "work");
        // One git will not remove (locked): named, with the fix by hand.
        sh(&root, &["worktree", "lock", &again.path.to_string_lossy()]);
        std::fs::write(again.path.join("c.txt"), "c\n").unwrap();
        let err = plan.set_aside(&again).unwrap_err().to_string();
        for words in [
            "could not be removed to be made afresh",
            "git worktree remove --force",
            "what it held is kept on ralph/kept/item-l-2",
        ] {
            assert!(err.contains(words), "{words:?} in {err}");
        }
    }

    #[test]
    fn a_worktree_is_made_while_the_git_configuration_is_locked() {
        // Tracking (here asked of every new branch) would write
        // .git/config, which a queue run holds locked.
        let (_d, root) = repo();
        sh(&root, &["config", "branch.autoSetupMerge", "always"]);
        std::fs::write(root.join(".git/config.lock"), "held\n").unwrap();
        let plan = plan(&root, None, false).unwrap();
        let made = plan.create("l-1").unwrap();
        assert!(made.path.join("a.txt").is_file());
        std::fs::remove_file(root.join(".git/config.lock")).unwrap();
    }

    #[test]
    fn programs_the_repository_names_never_run() {
        // The agent can write .git/config, .git/hooks and .gitattributes:
        // an fsmonitor, a post-checkout hook and a filter driver's
        // clean/smudge each leave a mark if the driver's git runs them.
        let (dir, root) = repo();
        let marks = dir.path().join("marks");
        std::fs::create_dir_all(&marks).unwrap();
        let program = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(
                &path,
                format!("#!/bin/sh\ntouch {}/{name}\ncat\n", marks.display()),
            )
            .unwrap();
            std::os::unix::fs::PermissionsExt::set_mode(
                &mut std::fs::metadata(&path).unwrap().permissions(),
                0o755,
            );
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            path.display().to_string()
        };
        sh(&root, &["config", "core.fsmonitor", &program("fsmonitor")]);
        sh(&root, &["config", "filter.x.clean", &program("clean")]);
        sh(&root, &["config", "filter.x.smudge", &program("smudge")]);
        let hook = root.join(".git/hooks/post-checkout");
        std::fs::write(
            &hook,
            format!("#!/bin/sh\ntouch {}/hook\n", marks.display()),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        std::fs::write(root.join(".gitattributes"), "*.txt filter=x\n").unwrap();
        std::fs::write(root.join("c.txt"), "c\n").unwrap();
        // Committed with the filters off; the marks left so far are the
        // setup's: only the driver's calls count.
        sh(
            &root,
            &[
                "-c",
                "filter.x.clean=",
                "-c",
                "filter.x.smudge=",
                "-c",
                "core.fsmonitor=false",
                "add",
                "-A",
            ],
        );
        sh(
            &root,
            &[
                "-c",
                "core.hooksPath=/dev/null",
                "-c",
                "core.fsmonitor=false",
                "commit",
                "-q",
                "-m",
                "attrs",
            ],
        );
        for mark in std::fs::read_dir(&marks).unwrap() {
            std::fs::remove_file(mark.unwrap().path()).unwrap();
        }
        let plan = plan(&root, None, false).unwrap();
        let worktree = plan.create("l-1").unwrap();
        assert!(worktree.path.join("c.txt").is_file());
        std::fs::write(worktree.path.join("c.txt"), "changed\n").unwrap();
        assert!(matches!(
            plan.finish(&worktree, None).unwrap(),
            Finished::Kept(_)
        ));
        let ran: Vec<String> = std::fs::read_dir(&marks)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(ran.is_empty(), "the driver's git ran {ran:?}");
    }

    #[test]
    fn no_git_no_commit_or_a_bad_base_is_refused_with_the_fix() {
        let dir = crate::testdir::new("worktree");
        let err = plan(dir.path(), None, false).unwrap_err().to_string();
        assert!(
            err.contains("not in a git work tree") && err.contains("git init"),
            "{err}"
        );
        sh(dir.path(), &["init", "-q"]);
        let err = plan(dir.path(), None, false).unwrap_err().to_string();
        assert!(err.contains("has none yet"), "{err}");
        let (_d, root) = repo();
        let err = plan(&root, Some("no-such-branch"), false)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--base-ref \"no-such-branch\""), "{err}");
        assert_eq!(plan(&root, Some("main"), true).unwrap().base, "main");
    }
}
