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
//!
//! This file opens the run and holds what its workers share (`Shared`);
//! the worker's loop is `worker`, what becomes of a finished item
//! `landing`, and the accounting of its end (claims, the run's record,
//! the run's end) `settle`.

use std::ffi::OsString;
use std::time::Duration;

use crate::queue::claims::store::ClaimStore;
use crate::queue::source::{LeftOut, Source};
use ralph_core::judge::config::Config;
use ralph_core::judge::state::{LoopState, RunMode, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::pin::Pinned;

use super::claims::ClaimBook;
use super::join;
use crate::driver::command::ClientProgram;
use crate::driver::prepare::{self, MergeMode, Prepared, QueueOptions, Ready, RunOptions};
use crate::driver::run_env::RunEnv;
use crate::driver::worktree::{self, WorktreePlan};
use crate::driver::{config_hold, item_text, say, start};
use crate::error::{CmdResult, CtlError};
use crate::queue::remote::{Remote, RemoteBook};

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
    announce(options, &base, remote_name.as_deref());
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
    let ends = shared.work_all(signals, options.workers);
    shared.conclude(&ends)
}

/// Says how the run goes: its workers in this process, where items land,
/// and the shared remote they go through.
fn announce(options: &QueueOptions, base: &str, remote_name: Option<&str>) {
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
    if let Some(name) = remote_name {
        say(&format!(
            "queue shared on remote {name}: claims, endings and landings go through it, with every machine \
             that drains {} there",
            options.source
        ));
    }
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

/// Whether `base` names a local branch of the repository at `root`.
fn is_branch(root: &std::path::Path, base: &str) -> bool {
    let reference = format!("refs/heads/{base}");
    worktree::git(root, &["show-ref", "--verify", "--quiet", &reference]).is_ok()
}

/// What every worker of the process shares.
pub(super) struct Shared<'a> {
    pub(super) paths: &'a ProjectPaths,
    pub(super) source: Source,
    pub(super) merge: MergeMode,
    pub(super) bench: Workbench,
    /// The run's pinned config, which every item's loop is pinned to.
    pub(super) config: Config,
    pub(super) pin: Pinned,
    /// The run's session.
    pub(super) run: String,
    pub(super) claims: ClaimBook,
    /// Several workers write at once: each line of an item's work goes
    /// with its title in front.
    pub(super) labelled: bool,
    /// Where an issue's branch is pushed for its pull request without a
    /// shared remote (`--merge none` on `github:`): origin as it was at
    /// the start.
    pub(super) pull_requests_to: Option<Remote>,
    /// The ids of the items the source's reading left out that were named.
    pub(super) left_out_named: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

/// Says each item the source's reading left out, once in the run (the
/// source is read again before each item).
pub(super) fn name_left_out(
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
    pub(super) fn ttl(&self) -> Duration {
        Duration::from_secs(u64::from(self.config.queue.claim_ttl_seconds))
    }

    /// The run, while it is this run and running.
    pub(super) fn running_run(&self) -> Option<LoopState> {
        StateStore::new(self.paths)
            .read()
            .ok()
            .flatten()
            .filter(|s| s.session_id == self.run && s.status == Status::Running)
    }
}
