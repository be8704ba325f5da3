//! `ralph-ctl run`: its arguments ([`RunArgs`]), turned once into the
//! run's options ([`RunOptions`]), and the hand-over to the driver (one
//! loop, or a queue run); with `--task`, the project made ready for it
//! first ([`task`]).

mod task;

use std::ffi::OsString;

use ralph_core::paths::ProjectPaths;

use crate::driver;
use crate::driver::prepare::{MAX_WORKERS, MergeMode, QueueOptions, RunOptions};
use crate::error::{CmdResult, CtlError};

/// The arguments of `ralph-ctl run` (its help is the `Run` command's).
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Run `claude -p` (no terminal UI): the prompt goes on stdin, and
    /// what the agent says and does is shown as readable lines (the
    /// client's JSON with --json).
    #[arg(long)]
    headless: bool,
    /// Clear the previous loop's state first.
    #[arg(long)]
    reset: bool,
    /// Go on with the paused or interrupted loop in its own session
    /// (`--resume` of the client), at the iteration it stopped at.
    #[arg(long, conflicts_with = "reset")]
    resume: bool,
    /// Start even though PROMPT.md is still the template `init` wrote.
    #[arg(long, conflicts_with = "resume")]
    force: bool,
    /// Fresh context: each iteration is one headless `claude -p` process
    /// with a new session (the project's files are its only memory),
    /// judged by the same engine as the Stop hook (contextMode: fresh).
    #[arg(long)]
    fresh: bool,
    /// Print the client command and the first iteration's text, then
    /// exit: nothing is started, no state is changed (with --task:
    /// what the run would set up, and nothing written).
    #[arg(long)]
    dry_run: bool,
    /// Each fresh iteration (implies --fresh) works in a new git worktree
    /// under .claude/worktrees/, on a branch ralph/<loop>-<iteration>;
    /// the state stays in the project. A worktree left with no change
    /// and no commit is removed; others are kept, and named.
    #[arg(long)]
    worktree: bool,
    /// What the worktrees start from and are compared with (default: the
    /// branch checked out when the loop starts).
    #[arg(long, value_name = "REF")]
    base_ref: Option<String>,
    /// Keep every worktree, even one its iteration left nothing in.
    #[arg(long)]
    no_cleanup: bool,
    /// Drain a backlog: each item of SOURCE (plan:PATH, the unchecked
    /// `- [ ]` lines of a markdown plan; dir:PATH, one file per item;
    /// cmd:COMMAND, a command printing a JSON array of {id, title, body})
    /// is worked as a loop of its own, fresh context, in a worktree on a
    /// branch ralph/item-<id>, then landed by the merge queue (--merge).
    /// A second `run --queue` on the same project joins the run.
    #[arg(long, value_name = "SOURCE", conflicts_with_all = ["resume", "formula"])]
    queue: Option<String>,
    /// With --queue: how many items this process works at once (another
    /// `run --queue` on the project adds its own workers).
    #[arg(long, value_name = "N", requires = "queue", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)))]
    workers: u32,
    /// With --queue: how a finished item lands. rebase: its branch is
    /// rebased onto the base, the project's verify runs on the result,
    /// and the base is fast-forwarded (a conflict or a failing verify
    /// leaves the branch and marks the item needs-review); none: its
    /// branch is left for you.
    #[arg(long, value_name = "HOW", requires = "queue", default_value = "rebase")]
    merge: MergeMode,
    /// With --queue: share the backlog with other machines through the
    /// git remote NAME (config queueRemote): claims and endings are refs
    /// under refs/ralph/queue/ there, changed only with a lease, and
    /// items land by a push to the base (never forced).
    #[arg(long, value_name = "NAME", requires = "queue")]
    remote: Option<String>,
    /// Run the formula .claude/ralph/formulas/NAME.yaml: its steps in
    /// order, each a fresh-context loop with its own model, prompt and
    /// gates (implies --fresh). `ralph-ctl init --formula NAME` writes a
    /// starter one.
    #[arg(long, value_name = "NAME")]
    formula: Option<String>,
    /// With --formula (or --resume of a formula run): start at step
    /// STEP. The steps before it that did not complete are recorded as
    /// skipped; STEP and the later ones start over (after a gate you
    /// fixed by hand, say).
    #[arg(long, value_name = "STEP", conflicts_with = "queue")]
    from: Option<String>,
    /// When the agent asks you something (`RALPH_ASK: <question>`): wait
    /// this long for `ralph-ctl answer`, then exit 24 with the loop left
    /// waiting (`run --resume` waits again). Default: until Ctrl-C.
    #[arg(long, value_name = "SECONDS", conflicts_with = "queue")]
    wait_for_answer: Option<u64>,
    /// Require the client's sandbox (bubblewrap and socat on Linux,
    /// Seatbelt on macOS): refuse to start without it. Unattended runs
    /// (--headless, --fresh, --formula) have it by default where it can
    /// run (config `sandbox`, `RALPH_SANDBOX`: auto, on, off).
    #[arg(long, conflicts_with = "no_sandbox")]
    sandbox: bool,
    /// Run the client without its sandbox: headless, the agent gets
    /// acceptEdits plus `ralph-ctl check` allowed (no git command: its
    /// work is left uncommitted).
    #[arg(long)]
    no_sandbox: bool,
    /// The loop's iteration cap (over `RALPH_MAX_ITERATIONS` and the
    /// config's maxIterations; as `RALPH_MAX_ITERATIONS` for the hook).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(ralph_core::judge::config::MAX_ITERATIONS_LIMIT)))]
    max_iterations: Option<u32>,
    /// The loop's budget in US dollars (over `RALPH_MAX_COST_USD` and the
    /// config's maxCostUsd): the loop ends `budget_exhausted` there.
    #[arg(long, value_name = "USD", value_parser = parse_dollars, allow_negative_numbers = true)]
    max_cost_usd: Option<f64>,
    /// Start a loop on this task: it becomes .claude/ralph/PROMPT.md's
    /// (an earlier, different task is kept in the runtime folder), and
    /// ralph is installed into the project first when it is not there
    /// yet, with its test command as the completion check (asked in a
    /// terminal, taken without one; see --yes). With --dry-run, shown
    /// and not written.
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    task: Option<String>,
    /// With --task or --queue, where ralph is not installed yet: make
    /// the test command found the completion check without asking.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Start even though the check (verify) cannot run (its program or
    /// runner not found, a usage error), which otherwise stops the start:
    /// making it run is the task. Every claim is rejected until it runs.
    #[arg(long)]
    check_may_not_run: bool,
    /// Print the client's own output as it is (its JSON result, or its
    /// stream-json events for fresh iterations) instead of readable
    /// progress lines.
    #[arg(long)]
    json: bool,
    /// Arguments for the Claude Code client, given after `--`.
    #[arg(last = true, value_name = "CLIENT_ARGS")]
    client_args: Vec<OsString>,
}

impl RunArgs {
    /// The run's options: `--sandbox`/`--no-sandbox` as one setting, the
    /// queue's flags together. (`--max-iterations`, `--max-cost-usd` and
    /// `--task` act before: see [`run`].)
    fn options(self) -> RunOptions {
        RunOptions {
            headless: self.headless,
            reset: self.reset,
            resume: self.resume,
            force: self.force,
            fresh: self.fresh,
            dry_run: self.dry_run,
            worktree: self.worktree,
            base_ref: self.base_ref,
            no_cleanup: self.no_cleanup,
            queue: self.queue.map(|source| QueueOptions {
                source,
                workers: self.workers,
                merge: self.merge,
                remote: self.remote,
            }),
            formula: self.formula,
            from: self.from,
            wait_for_answer: self.wait_for_answer,
            sandbox: match (self.sandbox, self.no_sandbox) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            json: self.json,
            client_args: self.client_args,
            env: Default::default(),
        }
    }
}

/// A `--max-cost-usd` that is no budget ralph accepts: what it accepts.
#[derive(Debug, thiserror::Error)]
enum NotABudget {
    /// Not a number.
    #[error("{}", ralph_core::judge::config::cost_accepts())]
    NotANumber,
    /// A number outside what a budget may be.
    #[error("{}", ralph_core::judge::config::cost_accepts())]
    OutOfRange,
}

/// `--max-cost-usd`: a dollar amount ralph accepts as a budget (the
/// config's own rule for `maxCostUsd`).
fn parse_dollars(text: &str) -> Result<f64, NotABudget> {
    let dollars = text
        .trim()
        .parse::<f64>()
        .map_err(|_| NotABudget::NotANumber)?;
    ralph_core::judge::config::validate_cost(dollars)
        .map(|_| dollars)
        .ok_or(NotABudget::OutOfRange)
}

/// Runs `ralph-ctl run`: the task (`--task`) set up, the options taken up
/// the way a resumed loop ran, the overrides put in the run's settings
/// (never in ralph's own environment), then the loop driven or the queue
/// drained.
pub(crate) fn run(paths: &ProjectPaths, args: RunArgs) -> CmdResult {
    let dry_run = args.dry_run;
    let before = loop_mark(paths);
    let result = run_as_asked(paths, args);
    if let Err(e) = &result
        && !dry_run
        && nobody_at_a_terminal()
        && loop_mark(paths) == before
    {
        tell_refused(paths, e);
    }
    result
}

/// Which loop the project holds and where it stands: unchanged across a
/// run that returned an error, the run was refused at its start.
fn loop_mark(paths: &ProjectPaths) -> Option<(String, u64, &'static str, u32)> {
    let state = ralph_core::persist::store::StateStore::new(paths)
        .read()
        .ok()
        .flatten()?;
    Some((
        state.session_id,
        state.started_at.secs(),
        state.status.as_str(),
        state.iteration,
    ))
}

/// No terminal on stdin, stdout or stderr (nohup, CI, a service): nobody
/// reads a refusal as it is printed.
fn nobody_at_a_terminal() -> bool {
    use std::io::IsTerminal;
    !(std::io::stdin().is_terminal()
        || std::io::stdout().is_terminal()
        || std::io::stderr().is_terminal())
}

/// Runs the project's `notify` command for a run refused at its start.
fn tell_refused(paths: &ProjectPaths, refusal: &CtlError) {
    let Some(command) =
        ralph_core::judge::config::Config::load(paths, &ralph_core::judge::config::ProcessEnv)
            .ok()
            .and_then(|c| c.notify)
            .filter(|c| !c.trim().is_empty())
    else {
        return;
    };
    if let Err(e) = ralph_core::notify::send_refused(&paths.root, &command, &refusal.to_string()) {
        crate::driver::say(&format!("warning: the notify command could not start: {e}"));
    }
}

/// [`run`] itself.
fn run_as_asked(paths: &ProjectPaths, args: RunArgs) -> CmdResult {
    if let Some(line) = crate::driver::config_hold::looked_at(paths) {
        crate::driver::say(&line);
    }
    if args.check_may_not_run {
        crate::driver::start::allow_check_not_running();
    }
    let max_iterations = args.max_iterations;
    let max_cost_usd = args.max_cost_usd;
    // The task's text for a dry run lives until the dry run has read it.
    let task_preview = task::set_up_for_run(paths, &args)?;
    let mut options = args.options();
    driver::prepare::as_it_ran(paths, &mut options);
    // The overrides rank as their variables: the start, the driver and the
    // client's Stop hook (given them in its environment) all read them.
    // --sandbox / --no-sandbox likewise: the hook walls the checks it runs
    // as the run walls the agent.
    use ralph_core::judge::config::env;
    if let Some(n) = max_iterations {
        options.env.set(env::MAX_ITERATIONS, n.to_string());
    }
    if let Some(dollars) = max_cost_usd {
        options.env.set(env::MAX_COST_USD, dollars.to_string());
    }
    if let Some(sandbox) = options.sandbox {
        options
            .env
            .set(env::SANDBOX, if sandbox { "on" } else { "off" });
    }
    if let Some(file) = &task_preview {
        options
            .env
            .set(env::PROMPT_FILE, file.path().display().to_string());
    }
    if options.queue.is_some() {
        crate::queue::run::run(paths, options)
    } else {
        driver::launch::run(paths, options)
    }
}
