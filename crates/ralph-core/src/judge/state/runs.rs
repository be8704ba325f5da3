//! The run records a loop's state holds beside its own: a queue run's
//! (its source and each item's record) and a formula run's (its steps and
//! their gates).

use serde::{Deserialize, Serialize};

use super::*;

/// A backlog's drain (`ralph-ctl run --queue`): where its items come from
/// and each item's record. Budgets and the iteration cap span the run: an
/// item's iterations and cost are added to the run's when it settles.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueRun {
    /// The source as given (`plan:PATH`, `dir:PATH`, `cmd:COMMAND`).
    pub source: String,
    /// How a finished item lands: `rebase` (rebased, verified, the base
    /// fast-forwarded) or `none` (its branch is left for the person).
    pub merge: String,
    /// The branch items start from and land on.
    pub base: String,
    /// The base's commit as the run last left it (at its start, then at
    /// each landing): a base found elsewhere when an item lands was moved
    /// outside the merge queue (by the person, or by an agent's git,
    /// which can write the repository's refs), and the item says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_head: Option<String>,
    /// By item id.
    #[serde(default)]
    pub items: std::collections::BTreeMap<String, QueueItem>,
    /// The `run --queue` processes that joined the run after it started:
    /// while one lives, the run is not left behind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub joined: Vec<Carriers>,
    /// The git remote the backlog is shared on with other machines
    /// (`--remote`, `queueRemote`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<String>,
}

/// A step `run --from` names that the formula lacks.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("formula {formula} has no such step; its steps are {}", steps.join(", "))]
pub struct NoSuchStep {
    /// The formula's name.
    pub formula: String,
    /// Its step ids, in order.
    pub steps: Vec<String>,
}

impl QueueRun {
    /// How many items stand at `status`.
    pub fn count(&self, status: ItemState) -> usize {
        self.items.values().filter(|i| i.status == status).count()
    }

    /// `5 items taken: 3 done, 1 working, 1 needs-review`, for what the
    /// person reads (`status`, `watch`, the report).
    pub fn counts_line(&self) -> String {
        let counts: Vec<String> = [
            ItemState::Done,
            ItemState::Working,
            ItemState::NeedsReview,
            ItemState::Skipped,
            ItemState::Failed,
            ItemState::Released,
        ]
        .iter()
        .map(|s| (self.count(*s), s.as_str()))
        .filter(|(n, _)| *n > 0)
        .map(|(n, s)| format!("{n} {s}"))
        .collect();
        let taken = self.items.len();
        format!(
            "{taken} item{} taken{}",
            if taken == 1 { "" } else { "s" },
            if counts.is_empty() {
                String::new()
            } else {
                format!(": {}", counts.join(", "))
            }
        )
    }
}

/// Where a backlog item stands in the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ItemState {
    /// A worker is on it.
    #[default]
    Working,
    /// Worked to its end and landed (or, with `--merge none`, finished on its branch).
    Done,
    /// Finished, but its branch could not land (a conflict, a failing
    /// verify): kept for a person.
    NeedsReview,
    /// The agent said to skip it.
    Skipped,
    /// Its loop ended without finishing it (its cap, its breaker, errors).
    Failed,
    /// Its worker was stopped; it is free to be taken again.
    Released,
}

impl ItemState {
    /// The word `status` and the log use.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemState::Working => "working",
            ItemState::Done => "done",
            ItemState::NeedsReview => "needs-review",
            ItemState::Skipped => "skipped",
            ItemState::Failed => "failed",
            ItemState::Released => "released",
        }
    }

    /// Whether the item is settled for good (no worker takes it again).
    pub fn is_settled(self) -> bool {
        !matches!(self, ItemState::Working | ItemState::Released)
    }
}

/// One backlog item's record in the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueItem {
    /// Its title.
    pub title: String,
    /// Where it stands.
    pub status: ItemState,
    /// The worker on it, or the last one.
    pub worker: String,
    /// Iterations its loop ran (over every time it was taken).
    pub iterations: u32,
    /// What its loop cost (over every time it was taken).
    pub cost_usd: Usd,
    /// Its branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// How many times a worker took it (more than once: one died or was stopped).
    pub taken: u32,
    /// Why it ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The tokens its loop used (over every time it was taken), added to
    /// the run's when it settles.
    #[serde(default, skip_serializing_if = "TokenUsage::is_zero")]
    pub usage: TokenUsage,
    /// When a worker last took it: the dashboard's order and its time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taken_at: Option<Timestamp>,
    /// When it last settled (none while a worker is on it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<Timestamp>,
}

/// A formula's run: its steps in order, each a fresh-context loop of its
/// own model, prompt and gates, one after the other in this loop.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FormulaRun {
    /// The formula's name.
    pub name: String,
    /// The step running now (0-based), or the last one once the run ended.
    pub step: usize,
    /// Every step, in order.
    pub steps: Vec<StepRun>,
}

/// Where one formula step stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepRun {
    /// The step's id.
    pub id: String,
    /// Its model, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Iterations it ran.
    #[serde(default)]
    pub iterations: u32,
    /// What they cost.
    #[serde(default)]
    pub cost_usd: Usd,
    /// Its gates, with their last results.
    #[serde(default)]
    pub gates: Vec<GateRun>,
    /// When its completion claim passed its gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
    /// Passed over by `--from` a later step, never run to its end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skipped: bool,
}

/// One gate of a step: its last result and how often it failed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateRun {
    /// The gate's name.
    pub name: String,
    /// Failures it allows before the run ends `gate_failed`.
    pub retries: u32,
    /// Times it failed.
    #[serde(default)]
    pub failures: u32,
    /// Its last result: `None` until a claim made it run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<bool>,
}

impl FormulaRun {
    /// "step 2/3 implement".
    pub fn position(&self) -> String {
        let id = self.steps.get(self.step).map_or("?", |s| s.id.as_str());
        format!("step {}/{} {id}", self.step + 1, self.steps.len())
    }

    /// The run moved to step `id` (`run --from`): the steps before it that
    /// did not complete are skipped, and it and every later step start
    /// over (their claims and gate failures forgotten; what they ran and
    /// cost is kept). `Err` lists the step ids when there is no such step.
    pub fn restart_at(&mut self, id: &str) -> Result<(), NoSuchStep> {
        let Some(at) = self.steps.iter().position(|s| s.id == id) else {
            return Err(NoSuchStep {
                formula: self.name.clone(),
                steps: self.steps.iter().map(|s| s.id.clone()).collect(),
            });
        };
        self.step = at;
        for (i, step) in self.steps.iter_mut().enumerate() {
            if i < at {
                step.skipped = step.completed_at.is_none();
            } else {
                step.skipped = false;
                step.completed_at = None;
                for gate in &mut step.gates {
                    gate.failures = 0;
                    gate.passed = None;
                }
            }
        }
        Ok(())
    }
}
