//! `ralph-ctl run --queue SOURCE [--workers N]`: drains a backlog. The run
//! is a loop of its own (the project's state) whose record holds every
//! item's; each worker (a thread; several `run --queue` processes on one
//! project join one run, `join`) claims the next free item
//! (`claims`: the project's claims file, and with `--remote` the shared
//! git remote's records, with a time to live renewed while it works),
//! works it as a loop of its own
//! (fresh context, in the item's worktree, its state under
//! `runtime/queue/<item>/`, driven by the same driver and engine as any
//! fresh loop), then lands it through the merge queue (`merge`) and
//! records how it ended in the run. The run ends `complete` when no item is
//! left to work; its budget, iteration cap and failed-items-in-a-row count
//! span every item.

use std::ffi::OsString;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use crate::queue::claims::store::{ClaimStore, ItemStatus};
use crate::queue::source::{DoneMark, Item, LeftOut, Source, trackers};
use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::judge::config::Config;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{ItemState, LoopState, RunMode, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::pin::Pinned;
use ralph_core::time::Timestamp;
use ralph_core::transaction::{self, Found, Whose};
use ralph_core::units::{TokenUsage, Usd};

use super::claims::{ClaimBook, Renewal};
use super::join;
use super::merge::{self, Landed, Landing};
use crate::driver::command::ClientProgram;
use crate::driver::launch::{self, ItemDrive, ItemWork};
use crate::driver::os_signals::{SignalSource, Signals};
use crate::driver::prepare::{self, MergeMode, Prepared, Ready, RunOptions};
use crate::driver::run_env::RunEnv;
use crate::driver::worktree::{self, WorktreePlan};
use crate::driver::{carriers, config_hold, finish, item_text, sandbox, say, start};
use crate::error::{CmdResult, CtlError};
use crate::queue::remote::{Ending, Remote, RemoteBook};

/// What every item's loop runs with, settled once for the run.
pub(crate) struct Workbench {
    /// The client.
    pub(crate) client: ClientProgram,
    /// Where items' worktrees come from and what they land on.
    pub(crate) worktrees: WorktreePlan,
    /// The client's arguments, ralph's settings merged in.
    pub(crate) client_args: Vec<OsString>,
    /// ralph's `--settings`.
    pub(crate) extra_settings: Option<String>,
    /// The client's own output as it is.
    pub(crate) json: bool,
    /// The run's settings from its command line, over the environment.
    pub(crate) env: RunEnv,
}

/// How often a worker with nothing to claim looks again while other
/// workers hold the rest.
const IDLE_LOOK: Duration = Duration::from_millis(500);

/// How often a waiting worker reads the source again for items added
/// meanwhile.
const SOURCE_LOOK: Duration = Duration::from_secs(30);

/// How often a waiting worker asks a shared remote whose claims changed.
const REMOTE_LOOK: Duration = Duration::from_secs(1);

/// Runs the queue (`run --queue`): joins the project's queue run on the
/// same source, or starts one, works items with `--workers` workers until
/// none is left (or a signal, the run's budget or cap), then ends the run
/// when the queue is drained. Returns the run's exit code.
pub(crate) fn run(paths: &ProjectPaths, run_options: RunOptions) -> CmdResult {
    let Some(options) = run_options.queue.as_ref() else {
        return Err(CtlError::BadArgument("--queue names no source".into()));
    };
    let mut source: Source = options.source.parse()?;
    let Prepared {
        signals,
        client,
        inputs,
        settings,
        ..
    } = match prepare::prepare(paths, &run_options)? {
        Ready::Done(code) => return Ok(code),
        Ready::Go(prepared) => *prepared,
    };
    let Some(worktrees) = inputs.worktrees else {
        return Err(CtlError::BadArgument(
            "--queue works in worktrees, and none were planned".into(),
        ));
    };
    if let Some(notice) = &settings.sandbox_notice {
        say(notice);
    }
    let settings_sandboxed = settings.sandboxed;
    let bench = Workbench {
        client,
        worktrees,
        client_args: settings.client_args,
        extra_settings: settings.extra_settings,
        json: run_options.json,
        env: run_options.env.clone(),
    };
    // A source that cannot be read is refused before anything starts (a
    // cycle, an id no item has, gh missing or logged out among them).
    source.pin_repository(&paths.root)?;
    let (_, left_out) = source.read_leaving_out(&paths.root)?;
    let left_out_named = std::sync::Mutex::default();
    name_left_out(&left_out_named, &left_out);
    let base = bench.worktrees.base.clone();
    if options.merge == MergeMode::Rebase && !is_branch(&paths.root, &base) {
        return Err(CtlError::BadArgument(format!(
            "--merge rebase lands items on a branch, and the base {base:?} is none: check out a branch, \
             or give --base-ref BRANCH, or --merge none"
        )));
    }
    let (config, pin) = start::pinned_config(paths, &bench.env)?;
    let remote = match options.remote.as_ref().or(config.queue.remote.as_ref()) {
        Some(name) => Some(RemoteBook::new(Remote::find(&paths.root, name)?, &source)),
        None => None,
    };
    let pull_requests_to = pull_request_remote(paths, &source, options.merge, remote.is_some())?;
    // What every item's text is made of is read before any item is claimed.
    item_text::shared_task(paths, &config)?;
    let run_mode = RunMode {
        headless: true,
        sandbox: run_options.sandbox,
        workers: Some(options.workers),
        worktree: false,
        sandboxed: settings_sandboxed,
    };
    let remote_name = remote.as_ref().map(|b| b.remote().name.clone());
    let run = join::enter(
        paths,
        options,
        &config,
        &pin,
        &base,
        run_mode,
        remote_name.clone(),
    )?;
    say(&format!(
        "queue {}: {} worker{} in this process, items land on {base} ({})",
        options.source,
        options.workers,
        if options.workers == 1 { "" } else { "s" },
        match options.merge {
            MergeMode::Rebase => "rebased, verified, fast-forwarded",
            MergeMode::None => "--merge none: left on their branches",
        }
    ));
    if let Some(name) = &remote_name {
        say(&format!(
            "queue shared on remote {name}: claims, endings and landings go through it, with every machine \
             that drains {} there",
            options.source
        ));
    }
    // Sandboxed clients in worktrees of one repository race on its
    // `.git/config.lock` unless it stays put (config_hold).
    let _config_hold = if settings_sandboxed {
        config_hold::for_project(paths)
    } else {
        None
    };
    let shared = Shared {
        paths,
        source,
        merge: options.merge,
        bench,
        config,
        pin,
        run: run.clone(),
        claims: ClaimBook {
            local: ClaimStore::new(paths),
            remote,
        },
        labelled: options.workers > 1,
        pull_requests_to,
        left_out_named,
    };
    let mut ends = Vec::new();
    thread::scope(|scope| {
        let mut handles = Vec::new();
        // The first worker holds the signals `run` installed; every other
        // installs its own flags, so that each sees every signal.
        let mut first = Some(signals);
        for n in 1..=options.workers {
            let worker_signals = match first.take() {
                Some(signals) => Ok(signals),
                None => Signals::install(),
            };
            let shared = &shared;
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
    shared.conclude(&ends)
}

/// `--merge none` on issues pushes each branch for its pull request: to
/// the shared remote (`has_remote`), else to origin, found now, its URL read
/// before any agent could change it; refused when there is none.
fn pull_request_remote(
    paths: &ProjectPaths,
    source: &Source,
    merge: MergeMode,
    has_remote: bool,
) -> Result<Option<Remote>, CtlError> {
    if has_remote || merge != MergeMode::None || !matches!(source, Source::Github { .. }) {
        return Ok(None);
    }
    let origin = Remote::find(&paths.root, "origin").map_err(|e| {
        CtlError::BadArgument(format!(
            "--merge none on {source} pushes each item's branch for its pull request: {e}; \
             or give --remote NAME"
        ))
    })?;
    Ok(Some(origin))
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

/// A worker's name in the claims and the run's record: this process and
/// the worker's number in it.
fn worker_name(n: u32) -> String {
    format!("{}-{n}", std::process::id())
}

/// Whether `base` names a local branch of the repository at `root`.
fn is_branch(root: &std::path::Path, base: &str) -> bool {
    let reference = format!("refs/heads/{base}");
    worktree::git(root, &["show-ref", "--verify", "--quiet", &reference]).is_ok()
}

/// Why a worker stopped.
#[derive(Debug)]
enum WorkerEnd {
    /// No item is left to work.
    Drained,
    /// The run ended (its budget, its cap, its breaker, a person).
    RunOver,
    /// A signal stopped it, with the exit code it stands for.
    Stopped(i32),
    /// Something went wrong; said on stderr.
    Failed(String),
}

/// What every worker of the process shares.
struct Shared<'a> {
    paths: &'a ProjectPaths,
    source: Source,
    merge: MergeMode,
    bench: Workbench,
    /// The run's pinned config, which every item's loop is pinned to.
    config: Config,
    pin: Pinned,
    /// The run's session.
    run: String,
    claims: ClaimBook,
    /// Several workers write at once: each line of an item's work goes
    /// with its title in front.
    labelled: bool,
    /// Where an issue's branch is pushed for its pull request without a
    /// shared remote (`--merge none` on `github:`): origin as it was at
    /// the start.
    pull_requests_to: Option<Remote>,
    /// The ids of the items the source's reading left out that were named.
    left_out_named: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// Says each item the source's reading left out, once in the run (the
/// source is read again before each item).
fn name_left_out(
    named: &std::sync::Mutex<std::collections::BTreeSet<String>>,
    left_out: &[LeftOut],
) {
    let mut named = named
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for item in left_out {
        if named.insert(item.id.clone()) {
            say(&item.to_string());
        }
    }
}

impl Shared<'_> {
    /// A claim's time to live.
    fn ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.config.queue.claim_ttl_seconds))
    }

    /// The run, while it is this run and running.
    fn running_run(&self) -> Option<LoopState> {
        StateStore::new(self.paths)
            .read()
            .ok()
            .flatten()
            .filter(|s| s.session_id == self.run && s.status == Status::Running)
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

    /// What the end of `item`'s loop (its `state`, the worker's exit
    /// `code`) makes of the item: a complete loop is landed here, after
    /// what its agent left in `.git` is put back (a file that sent git
    /// elsewhere keeps the item from landing).
    fn verdict(
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

    /// Records the item's end in the claims (with `--remote`, on the
    /// remote too); a claim that had lapsed meanwhile is said.
    fn record_on_claims(
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

    /// The text item `item` starts with ([`item_text::of`]).
    fn item_text(&self, item: &Item) -> Result<String, CtlError> {
        item_text::of(self.paths, &self.config, item)
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
        let short = |commit: &str| commit.chars().take(12).collect::<String>();
        let mut done = match merge::land(&landing) {
            Ok(Landed::Merged { commit, moved }) => {
                let mut why = format!("landed on {} at {}", plan.base, short(&commit));
                if let (Some(found), Some(expected)) = (moved, &expected) {
                    let note = format!(
                        "{} had moved outside the merge queue since the run last left it \
                         (at {}, found at {}): `git log {}..{}` shows what, by the person or an agent's git",
                        plan.base,
                        short(expected),
                        short(&found),
                        short(expected),
                        short(&found)
                    );
                    say(&format!("warning: {note}"));
                    why = format!("{why}; {note}");
                }
                if let Source::Beads(_) = &self.source {
                    why = format!("{why}; {}", self.close_bead(item, &commit));
                }
                ItemLanding {
                    status: ItemState::Done,
                    why,
                    landed: Some(commit),
                    lock: None,
                }
            }
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

    /// Records `item`'s end in the run (and the base it landed on), with
    /// the run's budget and its failed-items-in-a-row count judged in the
    /// same transaction.
    fn settle(
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
    fn end_run(&self, status: Status, why: String) {
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
    fn change(&self, change: impl FnOnce(&mut ralph_core::events::Draft)) {
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
    fn conclude(&self, ends: &[WorkerEnd]) -> CmdResult {
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

/// How a finished item landed, and the merge lock while it is recorded.
struct ItemLanding {
    status: ItemState,
    why: String,
    /// The base's commit, when the item landed on it.
    landed: Option<String>,
    lock: Option<std::fs::File>,
}

/// Where an item's loop lives: its worktree's name (`item-<slug>`), its
/// branch and its record's paths under the run's.
struct ItemPlace {
    tree: String,
    branch: String,
    paths: ProjectPaths,
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

/// Whether a worker takes the item it claimed into the run.
enum Take {
    /// Taken: its loop is the worker's to run.
    Taken,
    /// A client of an earlier worker still runs it: let go, for later.
    StillCarried,
    /// The run is no longer running.
    RunOver,
}

/// What the end of an item's loop makes of the item in the run.
struct Verdict {
    status: ItemState,
    why: String,
    /// Whether the worker stops after it.
    end: Option<WorkerEnd>,
    /// The base's commit, when the item landed on it.
    landed: Option<String>,
    /// The merge lock, held until the landing is recorded.
    merge_lock: Option<std::fs::File>,
}

/// What an item's loop spent, added to the run's when the item settles.
#[derive(Clone, Copy, Debug, Default)]
struct Spent {
    /// The iterations it ran.
    iterations: u32,
    /// What they cost.
    cost: Usd,
    /// The tokens they used.
    usage: TokenUsage,
}

/// The iterations an item's loop ran: those its history records.
fn iterations_run(state: &LoopState) -> u32 {
    let mut seen: Vec<u32> = state.history.iter().map(|r| r.iteration).collect();
    seen.dedup();
    u32::try_from(seen.len()).unwrap_or(u32::MAX)
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
