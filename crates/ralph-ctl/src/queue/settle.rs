//! The accounting of a queue run: an item's end recorded in the claims
//! (and on the shared remote) and in the run's record with what it spent,
//! the run's budget and failed-items-in-a-row count judged in the same
//! transaction; the run ended when its budget or cap is spent, and, once
//! every worker of the process stopped, concluded (complete when drained,
//! else interrupted or failed) with its exit code.

use crate::queue::claims::store::ItemStatus;
use crate::queue::source::Item;
use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{ItemState, LoopState, Status};
use ralph_core::time::Timestamp;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::{TokenUsage, Usd};

use super::landing::Verdict;
use super::run::Shared;
use super::worker::{ItemPlace, WorkerEnd};
use crate::driver::{finish, say};
use crate::error::{CmdResult, CtlError};
use crate::queue::remote::Ending;

/// What an item's loop spent, added to the run's when the item settles.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Spent {
    /// The iterations it ran.
    pub(super) iterations: u32,
    /// What they cost.
    pub(super) cost: Usd,
    /// The tokens they used.
    pub(super) usage: TokenUsage,
}

/// The iterations an item's loop ran: those its history records.
pub(super) fn iterations_run(state: &LoopState) -> u32 {
    let mut seen: Vec<u32> = state.history.iter().map(|r| r.iteration).collect();
    seen.dedup();
    u32::try_from(seen.len()).unwrap_or(u32::MAX)
}

impl Shared<'_> {
    /// Records the item's end in the claims (with `--remote`, on the
    /// remote too); a claim that had lapsed meanwhile is said.
    pub(super) fn record_on_claims(
        &self,
        name: &str,
        item: &Item,
        place: &ItemPlace,
        verdict: &Verdict,
        lost: bool,
        spent: &Spent,
    ) {
        let ending = Ending {
            why: Some(verdict.why.clone()),
            iterations: spent.iterations,
            cost_usd: spent.cost.dollars(),
            branch: (verdict.status != ItemState::Done || verdict.landed.is_none())
                .then(|| place.branch.clone()),
            landed: verdict.landed.clone(),
        };
        let settle = |status| self.claims.settle(&item.id, name, status, &ending);
        let settled = match verdict.status {
            // Another worker holds it on the remote: only this machine's
            // mirror lets it go.
            _ if lost => self
                .claims
                .local
                .release(&item.id, name, Timestamp::now())
                .map_err(CtlError::from),
            ItemState::Released => self.claims.release(&item.id, name),
            ItemState::Done => settle(ItemStatus::Done),
            ItemState::NeedsReview => settle(ItemStatus::NeedsReview),
            ItemState::Skipped => settle(ItemStatus::Skipped),
            _ => settle(ItemStatus::Failed),
        };
        if let Err(e) = &settled {
            say(&format!("worker {name}: item {}: {e}", item.id));
        }
        if !matches!(settled, Ok(true)) {
            say(&format!(
                "worker {name}: its claim on item {} had lapsed; another worker may have taken it (claimTtlSeconds is {})",
                item.id, self.config.queue.claim_ttl_seconds
            ));
        }
    }

    /// Records `item`'s end in the run (and the base it landed on), with
    /// the run's budget and its failed-items-in-a-row count judged in the
    /// same transaction.
    pub(super) fn settle(
        &self,
        item: &Item,
        status: ItemState,
        spent: Spent,
        why: String,
        landed: Option<String>,
    ) {
        let config = &self.config;
        self.change(|draft| {
            draft.apply(Event::ItemSettled {
                id: item.id.clone(),
                status,
                iterations: spent.iterations,
                cost: spent.cost,
                usage: spent.usage,
                why,
                landed,
            });
            let Some(run) = draft.state().filter(|s| s.status == Status::Running) else {
                return;
            };
            if let Some(why) = lifecycle::budget_spent(run, config.supervision.max_cost, false) {
                draft.apply(Event::Ended {
                    status: Status::BudgetExhausted,
                    why,
                    at: None,
                });
            } else if run.outcome_errors >= config.outcome_budgets.errors {
                let why = format!(
                    "{} items in a row failed (errorBudget {})",
                    run.outcome_errors, config.outcome_budgets.errors
                );
                draft.apply(Event::Ended {
                    status: Status::ErrorBudgetExhausted,
                    why,
                    at: None,
                });
            }
        });
    }

    /// Names the items a drained run left because an item they depend on
    /// did not land (it needs review, failed or was skipped): no worker
    /// could take them.
    fn say_held_back(&self) {
        if self.claims.remote.is_some() {
            return;
        }
        let (Ok(items), Ok(claims)) =
            (self.source.read(&self.paths.root), self.claims.local.read())
        else {
            return;
        };
        let now = Timestamp::now();
        for item in items.iter().filter(|i| claims.is_free(&i.id, now)) {
            if let Some(dependency) = claims.waits_on(item) {
                let ended = claims
                    .items
                    .get(dependency)
                    .map_or("was not worked", |r| r.status.as_str());
                say(&format!(
                    "item {} \"{}\" was not worked: it depends on {dependency}, which did not land ({ended})",
                    item.id, item.title
                ));
            }
        }
    }

    /// Ends the run with `status`, when it still runs.
    pub(super) fn end_run(&self, status: Status, why: String) {
        self.change(|draft| {
            if draft.state().is_some_and(|s| s.status == Status::Running) {
                draft.apply(Event::Ended {
                    status,
                    why,
                    at: None,
                });
            }
        });
    }

    /// One transaction on the run (a failure is said: the item's own loop
    /// and the claims keep what happened).
    pub(super) fn change(&self, change: impl FnOnce(&mut ralph_core::events::Draft)) {
        let result = transaction::change(self.paths, Whose::Session(&self.run), |draft| {
            change(draft);
            Ok::<_, CtlError>(())
        });
        match result {
            Ok(changed) => {
                crate::driver::told(changed);
            }
            Err(e) => say(&format!(
                "warning: the queue run's record could not be written: {e}"
            )),
        }
    }

    /// After every worker of this process stopped: the run ended complete
    /// when the queue is drained (else left to the workers still on it, or
    /// interrupted by the signal that stopped them), announced, and the
    /// exit code.
    pub(super) fn conclude(&self, ends: &[WorkerEnd]) -> CmdResult {
        let stopped = ends.iter().find_map(|e| match e {
            WorkerEnd::Stopped(code) => Some(*code),
            _ => None,
        });
        let failed = ends.iter().any(|e| matches!(e, WorkerEnd::Failed(_)));
        let drained = ends.iter().all(|e| matches!(e, WorkerEnd::Drained));
        if drained {
            self.say_held_back();
        }
        let changed = transaction::change(self.paths, Whose::Session(&self.run), |draft| {
            let Some(run) = draft.state().filter(|s| s.status == Status::Running) else {
                return Ok::<_, CtlError>(());
            };
            let queue = run.queue.clone().unwrap_or_default();
            // An item another process still works on: that process ends the run.
            let elsewhere = queue.count(ItemState::Working) > 0;
            if drained && elsewhere {
                return Ok(());
            }
            if drained {
                let count = |s: ItemState| queue.count(s);
                let why = format!(
                    "the queue is drained; this run: {} done, {} need review, {} skipped, {} failed",
                    count(ItemState::Done),
                    count(ItemState::NeedsReview),
                    count(ItemState::Skipped),
                    count(ItemState::Failed)
                );
                draft.apply(Event::Carried(None));
                draft.apply(Event::Ended {
                    status: Status::Complete,
                    why,
                    at: None,
                });
            } else if let Some(code) = stopped {
                draft.apply(Event::Carried(None));
                draft.apply(Event::Interrupted {
                    cause: format!(
                        "the queue's workers were stopped (exit {code}); their items are free again"
                    ),
                });
            } else if failed {
                draft.apply(Event::Carried(None));
                draft.apply(Event::Ended {
                    status: Status::Failed,
                    why: "a queue worker could not go on (see the lines above)".into(),
                    at: None,
                });
            }
            Ok(())
        })?;
        let found = crate::driver::told(changed);
        if matches!(&found, Found::Loop(state) if state.status == Status::Running) {
            if let Some(code) = stopped {
                return Ok(code);
            }
            say(
                "this process's workers are done; the queue run goes on in the process working its last items",
            );
            return Ok(exit_codes::OK);
        }
        // This process ends the run: `.git` tidied after the items' agents.
        if let Found::Loop(state) = &found {
            crate::driver::git_tidy::after_loop(self.paths, state.git_record.as_ref(), None);
        }
        // The closing line says what landed where, what is left and where
        // each item's why is (`ralph-ctl queue`, status, the report): each
        // item's end was said once, as it came.
        let mut unlanded = 0;
        if let Found::Loop(state) = &found
            && let Some(queue) = &state.queue
            && state.status == Status::Complete
        {
            unlanded = queue.count(ItemState::NeedsReview) + queue.count(ItemState::Failed);
        }
        let code = finish::announce(self.paths, &found);
        if unlanded > 0 {
            return Ok(exit_codes::ITEMS_LEFT);
        }
        Ok(stopped.unwrap_or(code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::state::IterationRecord;

    fn record(iteration: u32) -> IterationRecord {
        serde_json::from_value(serde_json::json!({
            "iteration": iteration,
            "at": "1970-01-01T00:00:00Z",
            "decision": "block",
            "why": "more to do",
        }))
        .unwrap()
    }

    #[test]
    fn an_item_s_iterations_are_counted_once_each_from_its_history() {
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        assert_eq!(iterations_run(&state), 0);
        // A resumed iteration records its stops again under its number.
        state.history = [1, 1, 2, 3, 3].into_iter().map(record).collect();
        assert_eq!(iterations_run(&state), 3);
    }
}
