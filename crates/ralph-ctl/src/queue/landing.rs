//! What becomes of a finished item of a queue run: its loop's end judged
//! (`verdict`: landed, kept on its branch for review, skipped, failed, or
//! free again), a complete item landed on the base through the merge queue
//! (`merge`, under the merge lock), or with `--merge none` left on its
//! branch, pushed to the shared remote and, for an issue, offered as a pull
//! request; a landed bead closed.

use std::path::PathBuf;

use crate::queue::source::{DoneMark, Item, Source, trackers};
use ralph_core::exit_codes;
use ralph_core::judge::state::{ItemState, LoopState, Status};
use ralph_core::persist::store::StateStore;

use super::merge::{self, Landed, Landing};
use super::run::Shared;
use super::settle::Spent;
use super::worker::{ItemPlace, WorkerEnd};
use crate::driver::launch;
use crate::driver::prepare::MergeMode;
use crate::driver::say;
use crate::driver::worktree;

/// What the end of an item's loop makes of the item in the run.
pub(super) struct Verdict {
    pub(super) status: ItemState,
    pub(super) why: String,
    /// Whether the worker stops after it.
    pub(super) end: Option<WorkerEnd>,
    /// The base's commit, when the item landed on it.
    pub(super) landed: Option<String>,
    /// The merge lock, held until the landing is recorded.
    pub(super) merge_lock: Option<std::fs::File>,
}

/// How a finished item landed, and the merge lock while it is recorded.
struct ItemLanding {
    status: ItemState,
    why: String,
    /// The base's commit, when the item landed on it.
    landed: Option<String>,
    lock: Option<std::fs::File>,
}

impl Shared<'_> {
    /// What the end of `item`'s loop (its `state`, the worker's exit
    /// `code`) makes of the item: a complete loop is landed here, after
    /// what its agent left in `.git` is put back (a file that sent git
    /// elsewhere keeps the item from landing).
    pub(super) fn verdict(
        &self,
        item: &Item,
        place: &ItemPlace,
        state: &LoopState,
        lost: bool,
        code: i32,
        spent: &Spent,
    ) -> Verdict {
        let branch = &place.branch;
        let tidied = crate::driver::git_tidy::after_loop(
            &place.paths,
            state.git_record.as_ref(),
            Some(&place.tree),
        );
        let verdict = |status, why| Verdict {
            status,
            why,
            end: None,
            landed: None,
            merge_lock: None,
        };
        match state.status {
            _ if lost => verdict(
                ItemState::Released,
                format!(
                    "its claim was lost (another worker holds the item now); what it did stays on branch {branch} here"
                ),
            ),
            _ if !tidied.put_back.is_empty() => verdict(
                ItemState::NeedsReview,
                format!(
                    "its agent changed what git follows in .git ({}); ralph's git never followed it, \
                     nothing of the item landed, and branch {branch} is kept for review",
                    tidied.put_back.join("; ")
                ),
            ),
            Status::Complete => {
                let ran = (spent.iterations, spent.cost.dollars());
                let outcome = self.land(item, &place.tree, ran);
                Verdict {
                    status: outcome.status,
                    why: outcome.why,
                    end: None,
                    landed: outcome.landed,
                    // Held from the landing to its record, so that the next
                    // item to land finds the base as the run recorded it.
                    merge_lock: outcome.lock,
                }
            }
            Status::Cancelled if launch::skipped(Some(state), state.iteration) => verdict(
                ItemState::Skipped,
                "the agent skipped it (RALPH_OUTCOME skip)".to_string(),
            ),
            Status::Waiting => verdict(
                ItemState::Failed,
                format!(
                    "its agent asks: {} (answer in the item's text or the project, then queue it again)",
                    state
                        .question
                        .as_ref()
                        .map_or("no question recorded", |q| q.text.as_str())
                ),
            ),
            Status::Interrupted | Status::Running | Status::Paused
                if exit_codes::signal_of(code).is_some() =>
            {
                Verdict {
                    end: Some(WorkerEnd::Stopped(code)),
                    ..verdict(
                        ItemState::Released,
                        "its worker was stopped; the item is free again".to_string(),
                    )
                }
            }
            // Every item's loop would be refused the same way: the worker
            // stops, and the item is free again for when it is fixed.
            Status::Failed if launch::refused_to_start(state) => {
                let why = state.ended_because.clone().unwrap_or_default();
                Verdict {
                    end: Some(WorkerEnd::Failed(why.clone())),
                    ..verdict(
                        ItemState::Released,
                        format!("{why}; the item is free again"),
                    )
                }
            }
            _ => verdict(
                ItemState::Failed,
                format!(
                    "its loop ended {}: {}",
                    state.status.as_str(),
                    state
                        .ended_because
                        .as_deref()
                        .unwrap_or("no reason recorded")
                ),
            ),
        }
    }

    /// Lands a finished item under the merge lock, which it hands back to
    /// be held until the landing is recorded (or, with `--merge none`,
    /// leaves it on its branch).
    fn land(&self, item: &Item, tree: &str, ran: (u32, f64)) -> ItemLanding {
        let plan = &self.bench.worktrees;
        let worktree = worktree::Worktree {
            path: self.paths.root.join(worktree::WORKTREES_DIR).join(tree),
            branch: format!("ralph/{tree}"),
            created: false,
        };
        let outcome = |status, why| ItemLanding {
            status,
            why,
            landed: None,
            lock: None,
        };
        if self.merge == MergeMode::None {
            return outcome(
                ItemState::Done,
                self.leave_on_branch(&worktree.branch, item),
            );
        }
        let lock = match self.claims.local.merge_lock(merge::MERGE_PATIENCE) {
            Ok(lock) => lock,
            Err(e) => {
                return outcome(
                    ItemState::NeedsReview,
                    format!(
                        "could not be landed ({e}); branch {} is kept",
                        worktree.branch
                    ),
                );
            }
        };
        // Read under the lock: the base as the last landing left it.
        let expected = StateStore::new(self.paths)
            .read()
            .ok()
            .flatten()
            .and_then(|run| run.queue.and_then(|q| q.base_head));
        let (plan_path, mark) = match self.source.done_mark() {
            Some((path, mark)) if path.is_relative() => (Some(path.to_path_buf()), mark),
            _ => (None, DoneMark::PlanBox),
        };
        let guarded_source: Option<PathBuf> = self
            .source
            .file()
            .and_then(|path| worktree::in_project(&self.paths.root, path));
        let fetch = || {
            self.claims
                .fetch_base(&plan.base)
                .unwrap_or_else(|| Ok(plan.base.clone()))
        };
        let landing = Landing {
            root: &self.paths.root,
            base: &plan.base,
            worktree: &worktree,
            item,
            plan: plan_path.as_deref(),
            mark,
            trailer: self.source.landing_trailer(item),
            source: guarded_source.as_deref(),
            verify: &self.config.completion.verify,
            claims: &self.claims.local,
            expected_base: expected.as_deref(),
            walls: self.config.sandbox.walls(),
            remote: self.claims.remote.as_ref(),
            fetch: Some(&fetch),
            ran,
        };
        let mut done = match merge::land(&landing) {
            Ok(Landed::Merged { commit, moved }) => ItemLanding {
                status: ItemState::Done,
                why: self.landed_why(item, &commit, moved, expected.as_deref()),
                landed: Some(commit),
                lock: None,
            },
            Ok(Landed::Nothing) => outcome(
                ItemState::NeedsReview,
                "its agent said it was done, but it left no commit and no change: nothing landed \
                 (`ralph-ctl log` shows its iterations; an item that needs no change ends with \
                 RALPH_OUTCOME skip)"
                    .to_string(),
            ),
            Ok(Landed::NeedsReview(why)) => outcome(ItemState::NeedsReview, why),
            Err(e) => outcome(
                ItemState::NeedsReview,
                format!(
                    "could not be landed ({e}); branch {} is kept",
                    worktree.branch
                ),
            ),
        };
        done.lock = Some(lock);
        done
    }

    /// What a landing on the base at `commit` says: where it landed, the
    /// base's commits that came outside the merge queue since the run last
    /// left it at `expected` (found at `moved`), a bead closed.
    fn landed_why(
        &self,
        item: &Item,
        commit: &str,
        moved: Option<String>,
        expected: Option<&str>,
    ) -> String {
        let base = &self.bench.worktrees.base;
        let short = |commit: &str| commit.chars().take(12).collect::<String>();
        let mut why = format!("landed on {base} at {}", short(commit));
        if let (Some(found), Some(expected)) = (moved, expected) {
            let note = format!(
                "{base} had moved outside the merge queue since the run last left it \
                 (at {}, found at {}): `git log {}..{}` shows what, by the person or an agent's git",
                short(expected),
                short(&found),
                short(expected),
                short(&found)
            );
            say(&format!("warning: {note}"));
            why = format!("{why}; {note}");
        }
        if let Source::Beads(_) = &self.source {
            why = format!("{why}; {}", self.close_bead(item, commit));
        }
        why
    }

    /// A landed bead closed (`bd close`, naming the commit): what came of it.
    fn close_bead(&self, item: &Item, commit: &str) -> String {
        match trackers::close_bead(&self.paths.root, &item.id, commit) {
            Ok(()) => format!("bead {} closed", item.id),
            Err(e) => {
                say(&format!("warning: item {} landed, but {e}", item.id));
                format!("bead {} left open ({e})", item.id)
            }
        }
    }

    /// `--merge none` on a `github:` source: the branch, already pushed to
    /// the shared remote (`pushed_to`) or else pushed to `origin`, and a
    /// pull request opened for it.
    fn open_pull_request(
        &self,
        branch: &str,
        item: &Item,
        repo: Option<&str>,
        pushed_to: Option<String>,
    ) -> String {
        let pushed = match (pushed_to, &self.pull_requests_to) {
            (Some(name), _) => name,
            (None, None) => {
                return format!(
                    "finished on branch {branch} (--merge none); no remote to push it to"
                );
            }
            (None, Some(origin)) => {
                let refspec = format!("+refs/heads/{branch}:refs/heads/{branch}");
                if let Err(e) = origin.push(&[&refspec], &[]) {
                    return format!(
                        "finished on branch {branch} (--merge none); no pull request: the push to origin failed ({e})"
                    );
                }
                origin.name.clone()
            }
        };
        let base = &self.bench.worktrees.base;
        match trackers::open_pull_request(repo, &self.paths.root, base, branch, item) {
            Ok(url) => format!(
                "finished on branch {branch}, pushed to {pushed}, pull request {url} (--merge none)"
            ),
            Err(e) => format!(
                "finished on branch {branch}, pushed to {pushed} (--merge none); no pull request: {e}"
            ),
        }
    }

    /// `--merge none`: the item stays on `branch`, pushed to the shared
    /// remote when there is one, so that every machine sees it; an issue's
    /// branch is offered as a pull request once it is pushed (never when
    /// the push failed).
    fn leave_on_branch(&self, branch: &str, item: &Item) -> String {
        let pushed_to = match self.push_to_shared_remote(branch) {
            Ok(pushed_to) => pushed_to,
            Err(failed) => {
                let github = matches!(self.source, Source::Github { .. });
                return format!(
                    "finished on branch {branch} (--merge none); it is kept here, {failed}{}",
                    if github {
                        ", so no pull request was opened"
                    } else {
                        ""
                    }
                );
            }
        };
        match (&self.source, pushed_to) {
            (Source::Github { repo, .. }, pushed_to) => {
                self.open_pull_request(branch, item, repo.as_deref(), pushed_to)
            }
            (_, Some(name)) => {
                format!("finished on branch {branch}, pushed to {name} (--merge none)")
            }
            (_, None) => format!("finished on branch {branch} (--merge none)"),
        }
    }

    /// `branch` pushed to the shared remote: its name, or `None` with no
    /// shared remote; `Err` says how the push failed.
    fn push_to_shared_remote(&self, branch: &str) -> Result<Option<String>, String> {
        let Some(book) = &self.claims.remote else {
            return Ok(None);
        };
        let name = &book.remote().name;
        let pushed = book.patiently("pushing an item's branch", || {
            book.remote()
                .push(&[&format!("+refs/heads/{branch}:refs/heads/{branch}")], &[])
        });
        match pushed {
            Ok(()) => Ok(Some(name.clone())),
            Err(e) => Err(format!("the push to {name} failed ({e})")),
        }
    }
}
