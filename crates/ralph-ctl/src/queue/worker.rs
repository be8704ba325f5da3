//! A queue run's worker (a thread of `run --queue`): reads the source,
//! claims the next free item, takes it into the run, keeps its claim
//! renewed, opens and drives the item's loop in its worktree, then hands
//! the loop's end to `landing` (what becomes of the item) and `settle` (its
//! record); when every item left is held by another worker it waits for
//! their claims to end, and it stops when none is left.

use std::thread;
use std::time::{Duration, Instant};

use crate::queue::source::{Item, Source};
use ralph_core::events::Event;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{ItemState, LoopState, RunMode, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::{self, Whose};
use ralph_core::units::Usd;

use super::claims::Renewal;
use super::landing::Verdict;
use super::run::{Shared, name_left_out};
use super::settle::{Spent, iterations_run};
use crate::driver::launch::{self, ItemDrive, ItemWork};
use crate::driver::os_signals::{SignalSource, Signals};
use crate::driver::worktree;
use crate::driver::{carriers, item_text, sandbox, say, start};
use crate::error::{CmdResult, CtlError};

/// How often a worker with nothing to claim looks again while other
/// workers hold the rest.
const IDLE_LOOK: Duration = Duration::from_millis(500);

/// How often a waiting worker reads the source again for items added
/// meanwhile.
const SOURCE_LOOK: Duration = Duration::from_secs(30);

/// How often a waiting worker asks a shared remote whose claims changed.
const REMOTE_LOOK: Duration = Duration::from_secs(1);

/// A worker's name in the claims and the run's record: this process and
/// the worker's number in it.
fn worker_name(n: u32) -> String {
    format!("{}-{n}", std::process::id())
}

/// An item's title as the label in front of its lines: short, on one line.
fn label_of(title: &str) -> String {
    const LONGEST: usize = 24;
    let one_line = title.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > LONGEST {
        format!(
            "{}…",
            one_line.chars().take(LONGEST - 1).collect::<String>()
        )
    } else {
        one_line
    }
}

/// Where an item's loop lives: its worktree's name (`item-<slug>`), its
/// branch and its record's paths under the run's.
pub(super) struct ItemPlace {
    pub(super) tree: String,
    pub(super) branch: String,
    pub(super) paths: ProjectPaths,
}

impl ItemPlace {
    fn of(run_paths: &ProjectPaths, item: &Item) -> ItemPlace {
        let slug = item.slug();
        let tree = if slug.starts_with("item-") {
            slug.clone()
        } else {
            format!("item-{slug}")
        };
        ItemPlace {
            branch: format!("ralph/{tree}"),
            tree,
            paths: run_paths.for_item(&slug),
        }
    }
}

/// Why a worker stopped.
#[derive(Debug)]
pub(super) enum WorkerEnd {
    /// No item is left to work.
    Drained,
    /// The run ended (its budget, its cap, its breaker, a person).
    RunOver,
    /// A signal stopped it, with the exit code it stands for.
    Stopped(i32),
    /// Something went wrong; said on stderr.
    Failed(String),
}

/// Whether a worker takes the item it claimed into the run.
enum Take {
    /// Taken: its loop is the worker's to run.
    Taken,
    /// A client of an earlier worker still runs it: let go, for later.
    StillCarried,
    /// The run is no longer running.
    RunOver,
}

impl Shared<'_> {
    /// Runs `workers` workers until each stops: the first holds `signals`
    /// (the ones `run` installed), every other installs its own flags, so
    /// that each sees every signal. How each stopped.
    pub(super) fn work_all(&self, signals: Signals, workers: u32) -> Vec<WorkerEnd> {
        let mut ends = Vec::new();
        thread::scope(|scope| {
            let mut handles = Vec::new();
            // The first worker holds the signals `run` installed; every other
            // installs its own flags, so that each sees every signal.
            let mut first = Some(signals);
            for n in 1..=workers {
                let worker_signals = match first.take() {
                    Some(signals) => Ok(signals),
                    None => Signals::install(),
                };
                let shared = self;
                handles.push(scope.spawn(move || match worker_signals {
                    Ok(signals) => shared.work(&worker_name(n), signals),
                    Err(e) => WorkerEnd::Failed(format!("cannot catch signals: {e}")),
                }));
            }
            for handle in handles {
                ends.push(handle.join().unwrap_or(WorkerEnd::Failed(
                    "a worker stopped on an internal error".into(),
                )));
            }
        });
        ends
    }

    /// One worker: claims and works items until none is left.
    fn work(&self, name: &str, mut signals: Signals) -> WorkerEnd {
        let end = loop {
            crate::driver::set_line_prefix(String::new());
            if let Some(signal) = signals.take().first() {
                break WorkerEnd::Stopped(signal.exit_code());
            }
            let Some(run) = self.running_run() else {
                break WorkerEnd::RunOver;
            };
            if let Some(why) =
                lifecycle::budget_spent(&run, self.config.supervision.max_cost, false)
            {
                self.end_run(Status::BudgetExhausted, why);
                break WorkerEnd::RunOver;
            }
            if run.iteration >= run.max_iterations {
                self.end_run(
                    Status::MaxIterations,
                    format!(
                        "the run's {} iterations are spent with items left",
                        run.max_iterations
                    ),
                );
                break WorkerEnd::RunOver;
            }
            let items = match self.source.read_leaving_out(&self.paths.root) {
                Ok((items, left_out)) => {
                    name_left_out(&self.left_out_named, &left_out);
                    items
                }
                Err(e) => break WorkerEnd::Failed(e.to_string()),
            };
            match self.claims.claim_next(&items, name, self.ttl()) {
                Ok(Some(item)) => {
                    let (end, back) = self.work_item(name, item, &run, signals);
                    crate::driver::set_line_prefix(String::new());
                    signals = back;
                    if let Some(end) = end {
                        break end;
                    }
                }
                Ok(None) => match self.claims.held() {
                    Ok(held) => {
                        // Any live claim, listed or not: a landed item's
                        // box is ticked before its worker settles it.
                        if held.is_empty() {
                            break WorkerEnd::Drained;
                        }
                        // Other workers hold the rest: a dead one's item
                        // comes free when its claim lapses.
                        if let Some(signal) = self.wait_for_claims(&mut signals) {
                            break WorkerEnd::Stopped(signal.exit_code());
                        }
                    }
                    Err(e) => break WorkerEnd::Failed(e.to_string()),
                },
                Err(e) => break WorkerEnd::Failed(e.to_string()),
            }
        };
        if let WorkerEnd::Failed(why) = &end {
            say(&format!("worker {name} stopped: {why}"));
        }
        end
    }

    /// While other workers hold every item left: waits until one of their
    /// claims ends (settled, released or lapsed), or the source is due to
    /// be read again for items added meanwhile ([`SOURCE_LOOK`]), reading
    /// only the claims meanwhile (a `cmd:` source is not run twice a
    /// second). A signal that comes meanwhile is given back.
    fn wait_for_claims(&self, signals: &mut Signals) -> Option<crate::driver::os_signals::Signal> {
        let started = Instant::now();
        let held = || self.claims.held().unwrap_or_default();
        // A remote is asked less often than the file is read.
        let every = if self.claims.remote.is_some() {
            REMOTE_LOOK
        } else {
            IDLE_LOOK
        };
        let before = held();
        let mut looked = Instant::now();
        while started.elapsed() < SOURCE_LOOK {
            thread::sleep(IDLE_LOOK);
            if let Some(signal) = signals.take().first().copied() {
                return Some(signal);
            }
            if looked.elapsed() >= every {
                looked = Instant::now();
                if held() != before {
                    break;
                }
            }
        }
        None
    }

    /// Works `item` as a loop of its own to its end, lands it, and records
    /// it in the run; `Some` when the worker stops after it.
    fn work_item(
        &self,
        name: &str,
        item: Item,
        run: &LoopState,
        signals: Signals,
    ) -> (Option<WorkerEnd>, Signals) {
        let place = ItemPlace::of(self.paths, &item);
        match self.take(name, &item, &place) {
            Take::Taken => {}
            Take::StillCarried => return (None, signals),
            Take::RunOver => return (Some(WorkerEnd::RunOver), signals),
        }
        if self.labelled {
            crate::driver::set_line_prefix(format!("[{}] ", label_of(&item.title)));
        }
        say(&format!(
            "worker {name}: item {} \"{}\" on branch {}",
            item.id, item.title, place.branch
        ));
        let renewal = self.renew_claim(name, &item, &place);
        let max = self
            .config
            .queue
            .max_iterations_per_item
            .min(run.max_iterations.saturating_sub(run.iteration))
            .max(1);
        let session = match self.open_item_loop(&item, &place, run, max) {
            Ok(started) => started.session_id,
            Err(e) => {
                renewal.stop();
                let _ = self.claims.release(&item.id, name);
                let nothing = Spent::default();
                self.settle(&item, ItemState::Released, nothing, e.to_string(), None);
                return (Some(WorkerEnd::Failed(e.to_string())), signals);
            }
        };
        let (code, signals) = self.drive(&item, &place, run, session, max, signals);
        let lost = renewal.stop();
        let state = StateStore::new(&place.paths).read().ok().flatten();
        let spent = Spent {
            iterations: state.as_ref().map_or(0, iterations_run),
            cost: state.as_ref().map_or(Usd(0), |s| s.cost_usd),
            usage: state.as_ref().map(|s| s.usage).unwrap_or_default(),
        };
        let code = code.unwrap_or_else(|e| {
            say(&e.to_string());
            e.exit_code()
        });
        let Some(state) = state else {
            let _ = self.claims.release(&item.id, name);
            let why = "its loop's state is gone".to_string();
            self.settle(&item, ItemState::Released, spent, why, None);
            return (
                Some(WorkerEnd::Failed("the item's loop state is gone".into())),
                signals,
            );
        };
        let verdict = self.verdict(&item, &place, &state, lost, code, &spent);
        self.record_on_claims(name, &item, &place, &verdict, lost, &spent);
        // The item's end, on one line: why, without the check's output
        // that may follow (that is in status and the report).
        say(&format!(
            "worker {name}: item {} {}: {}",
            item.id,
            verdict.status.as_str(),
            verdict.why.lines().next().unwrap_or_default()
        ));
        crate::driver::set_line_prefix(String::new());
        let cap_spent = state.status == Status::MaxIterations
            && max < self.config.queue.max_iterations_per_item;
        let Verdict {
            status,
            why,
            end,
            landed,
            merge_lock,
        } = verdict;
        self.settle(&item, status, spent, why, landed);
        drop(merge_lock);
        if cap_spent {
            self.end_run(
                Status::MaxIterations,
                format!(
                    "the run's {} iterations are spent with items left",
                    run.max_iterations
                ),
            );
        }
        (end, signals)
    }

    /// Takes `item`, claimed by worker `name`, into the run: recorded only
    /// while the run runs (another worker may have ended it since this one
    /// looked), and only once a dead worker's client that may outlive its
    /// claim by a few seconds (its watchdog ends it) is gone. The claim is
    /// let go when the item is not taken.
    fn take(&self, name: &str, item: &Item, place: &ItemPlace) -> Take {
        let still_carried = StateStore::new(&place.paths)
            .read()
            .ok()
            .flatten()
            .is_some_and(|prev| carriers::still_carried(&prev).is_some());
        if still_carried {
            let _ = self.claims.release(&item.id, name);
            thread::sleep(IDLE_LOOK);
            return Take::StillCarried;
        }
        let mut taken = false;
        self.change(|draft| {
            if draft.state().is_some_and(|s| s.status == Status::Running) {
                draft.apply(Event::ItemTaken {
                    id: item.id.clone(),
                    title: item.title.clone(),
                    worker: name.to_string(),
                    branch: place.branch.clone(),
                });
                taken = true;
            }
        });
        if !taken {
            let _ = self.claims.release(&item.id, name);
            return Take::RunOver;
        }
        Take::Taken
    }

    /// Keeps worker `name`'s claim on `item` alive while its loop runs; a
    /// claim lost stops the item's loop at its iteration's end.
    fn renew_claim(&self, name: &str, item: &Item, place: &ItemPlace) -> Renewal {
        let stop_paths = place.paths.clone();
        Renewal::start(self.claims.clone(), &item.id, name, self.ttl(), move || {
            let _ = transaction::change(&stop_paths, Whose::Any, |draft| {
                if draft.state().is_some_and(|s| s.status.is_live()) {
                    draft.apply(Event::Ended {
                        status: Status::Cancelled,
                        why: "its claim was lost: another worker holds the item now".into(),
                        at: None,
                    });
                }
                Ok::<_, CtlError>(())
            });
        })
    }

    /// Opens `item`'s loop under the run's pin, at most `max` iterations,
    /// with the item's text as its task and the run's mode.
    fn open_item_loop(
        &self,
        item: &Item,
        place: &ItemPlace,
        run: &LoopState,
        max: u32,
    ) -> Result<start::Started, CtlError> {
        let task = self.item_text(item)?;
        start::open_loop(
            &place.paths,
            &self.config,
            self.pin.clone(),
            None,
            max,
            true,
            true,
            |state| {
                state.task = Some(task);
                state.queue_item = Some(item.id.clone());
                // The mode the run's clients run in, so that the advice
                // on a refused call fits it (a sandboxed run is never
                // told to run with the sandbox).
                state.run_mode = run.run_mode.clone().map(|mode| RunMode {
                    workers: None,
                    ..mode
                });
            },
        )
    }

    /// Drives `item`'s loop (owned by `session`) to its end in its own
    /// worktree, with what is left of the run's budget as its cost cap.
    fn drive(
        &self,
        item: &Item,
        place: &ItemPlace,
        run: &LoopState,
        session: String,
        max: u32,
        signals: Signals,
    ) -> (CmdResult, Signals) {
        let cost_cap = self
            .config
            .supervision
            .max_cost
            .map(|max| Usd(max.0.saturating_sub(run.cost_usd.0)));
        let not_plans = match &self.source {
            Source::Plan(path) => vec![path.to_string_lossy().into_owned()],
            _ => Vec::new(),
        };
        launch::drive_item(
            ItemDrive {
                paths: &place.paths,
                client: self.bench.client.clone(),
                config: self.config.clone(),
                worktrees: self.item_worktrees(),
                client_args: self.bench.client_args.clone(),
                extra_settings: sandbox::item_settings(
                    self.bench.extra_settings.as_deref(),
                    &item.id,
                ),
                json: self.bench.json,
                env: self.bench.env.clone(),
                session,
                max_iterations: max,
                item: ItemWork {
                    worktree_name: place.tree.clone(),
                    not_plans,
                    cost_cap,
                },
            },
            signals,
        )
    }

    /// The text item `item` starts with ([`item_text::of`]).
    fn item_text(&self, item: &Item) -> Result<String, CtlError> {
        item_text::of(self.paths, &self.config, item)
    }

    /// With a shared remote, each item starts from the remote's base as it
    /// is now (fetched); else from the run's base.
    fn item_worktrees(&self) -> worktree::WorktreePlan {
        let mut plan = self.bench.worktrees.clone();
        match self.claims.fetch_base(&plan.base) {
            Some(Ok(commit)) => plan.base = commit,
            Some(Err(e)) => say(&format!(
                "warning: the remote's {} could not be fetched ({e}); the item starts from {} as this machine has it",
                plan.base, plan.base
            )),
            None => {}
        }
        plan
    }
}
