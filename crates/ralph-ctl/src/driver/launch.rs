//! The driver of `ralph-ctl run`, what the launchers run: reads and checks
//! what the run needs ([`Inputs`], the client's settings), starts a loop
//! (or, with `--resume`, takes up the last one), then drives it one
//! [`Driver::iteration`] at a time: the iteration's text → build the client
//! command → run and watch it → judge it (fresh) or read its end →
//! (headless, paused: wait, resume, run again) → `finish`. Every change to
//! the loop goes through `ralph_core::transaction`.

use std::ffi::OsString;
use std::io::Write;

use ralph_core::engine::RealWorld;
use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, ContextMode, ProcessEnv, SandboxSetting};
use ralph_core::judge::lifecycle::ResumePlan;
use ralph_core::judge::state::{LoopState, RunMode, Status, Usd};
use ralph_core::observe::progress;
use ralph_core::observe::registration;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use ralph_core::persist::store::StateStore;
use ralph_core::pin;
use ralph_core::transaction::Found;

use super::client::{self, Output, RunningClient, Supervision};
use super::command::{self, ClientProgram, Launch, Platform, PromptDelivery};
use super::result;
use super::signals::{SignalSource, Signals};
use super::{finish, fresh, liveness, sandbox, start, steps, supervisor, worktree};
use crate::error::CmdResult;
use crate::error::CtlError;
use crate::formula;

/// The file holding the first prompt when it is pointed at rather than passed
/// (interactive mode on Windows), relative to the runtime folder.
pub(crate) const PROMPT_FILE_NAME: &str = "ralph-first-prompt.md";

/// A client that fails within this long of its start, with no answer,
/// failed at starting: the launcher looks for a first run not done.
const FIRST_RUN_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

/// The launcher's options.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunOptions {
    /// `claude -p --output-format json` instead of the terminal UI.
    pub(crate) headless: bool,
    /// Clear the previous loop's state first.
    pub(crate) reset: bool,
    /// Take up the paused or interrupted loop in its session instead of starting one.
    pub(crate) resume: bool,
    /// Start even though the prompt is still the PROMPT.md template.
    pub(crate) force: bool,
    /// One headless client process with a new session per iteration
    /// (also `contextMode: fresh` / RALPH_CONTEXT_MODE=fresh).
    pub(crate) fresh: bool,
    /// Print the client command and the first iteration's text; start nothing.
    pub(crate) dry_run: bool,
    /// Each fresh iteration in a git worktree of its own (implies `fresh`).
    pub(crate) worktree: bool,
    /// What the worktrees start from and are compared with (default: the
    /// branch the loop starts on).
    pub(crate) base_ref: Option<String>,
    /// Keep every worktree, even one its iteration left nothing in.
    pub(crate) no_cleanup: bool,
    /// Drain a backlog (`--queue`), each item a loop of its own (`queue::run`).
    pub(crate) queue: Option<QueueOptions>,
    /// Run the formula `.claude/ralph/formulas/NAME.yaml` (implies `fresh`).
    pub(crate) formula: Option<String>,
    /// `--from STEP`: the formula run starts (or goes on) at that step.
    pub(crate) from: Option<String>,
    /// `--wait-for-answer SECONDS`: how long a headless run waits for the
    /// person's answer to the agent's question; `None`: until a signal.
    pub(crate) wait_for_answer: Option<u64>,
    /// `--sandbox` (true) or `--no-sandbox` (false), over the config's `sandbox`.
    pub(crate) sandbox: Option<bool>,
    /// The client's own output as it is, not readable lines (`--json`).
    pub(crate) json: bool,
    /// Arguments for the client (given after `--`).
    pub(crate) client_args: Vec<OsString>,
}

/// `--queue`, `--workers`, `--merge`: how `queue::run` drains a backlog.
#[derive(Clone, Debug)]
pub(crate) struct QueueOptions {
    /// The source as given.
    pub(crate) source: String,
    /// Workers in this process.
    pub(crate) workers: u32,
    /// How a finished item lands.
    pub(crate) merge: crate::cli::MergeMode,
}

/// `run --resume` goes on the way the loop ran, where its command line
/// does not say otherwise: a queue run as a queue run (its source, how its
/// items land, its first process's workers), a headless loop headless, with
/// the sandbox it was asked to have. Each taken-up setting is said on stderr.
pub(crate) fn as_it_ran(paths: &ProjectPaths, options: &mut RunOptions) {
    if !options.resume {
        return;
    }
    let Ok(Some(state)) = StateStore::new(paths).read() else {
        // The resume itself says what is wrong with the state.
        return;
    };
    let mode = state.run_mode.clone().unwrap_or_default();
    let mut taken = Vec::new();
    if let (Some(queue), None) = (&state.queue, &options.queue) {
        let merge = match queue.merge.as_str() {
            "none" => crate::cli::MergeMode::None,
            _ => crate::cli::MergeMode::Rebase,
        };
        // Within what --workers takes, whatever the record says.
        let workers = mode.workers.unwrap_or(1).clamp(1, crate::cli::MAX_WORKERS);
        taken.push(format!(
            "as the queue run it was (--queue {} --workers {workers} --merge {})",
            crate::driver::command::sh_quoted(&queue.source),
            queue.merge
        ));
        options.queue = Some(QueueOptions {
            source: queue.source.clone(),
            workers,
            merge,
        });
    }
    if mode.headless && !options.headless && options.queue.is_none() {
        options.headless = true;
        taken.push("headless (--headless)".into());
    }
    if mode.worktree && !options.worktree && options.queue.is_none() {
        options.worktree = true;
        taken.push("each iteration in a worktree (--worktree)".into());
    }
    if let (Some(flag), None) = (mode.sandbox_flag(), options.sandbox) {
        options.sandbox = mode.sandbox;
        taken.push(flag.into());
    }
    if !taken.is_empty() {
        say(&format!(
            "resuming the way the loop ran: {}",
            taken.join(", ")
        ));
    }
}

/// Runs one loop; returns the loop's exit code (README: Exit codes).
/// Headless, a loop the client left paused (an API error, the
/// calls-per-hour budget) is resumed in the same session when the policy
/// allows, after the wait it sets.
pub(crate) fn run(paths: &ProjectPaths, options: RunOptions) -> CmdResult {
    let Prepared {
        signals,
        client,
        inputs,
        settings,
        version,
    } = match prepare(paths, &options)? {
        Ready::Done(code) => return Ok(code),
        Ready::Go(prepared) => *prepared,
    };
    let Inputs {
        config,
        mut formula,
        worktrees,
        fresh,
    } = inputs;
    let mut signals = signals;
    if options.resume {
        // A loop waiting for the person's answer goes on once it has it.
        if let Some(waiting) = StateStore::new(paths)
            .read()?
            .filter(|s| s.status == Status::Waiting)
        {
            if let Some(refusal) = liveness::still_carried(&waiting) {
                return Err(CtlError::Refused(refusal));
            }
            let limit = options.wait_for_answer.map(std::time::Duration::from_secs);
            match wait_for_answer(paths, &waiting.session_id, limit, &mut signals)? {
                AnswerWait::Answered => {}
                AnswerWait::Signal(signal) => return Ok(signal.exit_code()),
                AnswerWait::Over(found) => return Ok(finish::announce(paths, &found)),
            }
        }
    }
    let (session, max_iterations, fresh) = if options.resume {
        let (mut state, pinned_formula) = take_up_by_hand(paths, &config, formula.as_ref())?;
        if pinned_formula.is_some() {
            formula = pinned_formula;
        }
        if let Some(step) = &options.from {
            // The step starts over in a session of its own.
            state.session_id = steps::restart_at(paths, &state.session_id, step)?;
            say(&format!("going on at step {step}"));
        }
        let fresh = fresh || state.fresh_context || formula.is_some();
        (state.session_id, state.max_iterations, fresh)
    } else {
        let started = begin(paths, &options, formula.as_ref(), fresh)?;
        (started.session_id, started.max_iterations, fresh)
    };
    // Said once the loop is started (a refused start says only why).
    if let Some(notice) = &settings.sandbox_notice {
        say(notice);
    }
    if (options.headless || fresh) && command::names_permissions(&options.client_args) {
        say("permissions: as your arguments after -- say (ralph adds no acceptEdits and no allow rules)");
    }
    liveness::record(paths, &session, liveness::with_client(None))?;
    // Taken up: the person's answer (and notes) go in front of the first
    // iteration's text.
    let answer_note = if options.resume {
        take_note(paths, &session)?
    } else {
        None
    };
    Driver {
        paths,
        client,
        config,
        formula,
        worktrees,
        // Each fresh iteration is a `claude -p` of its own.
        headless: options.headless || fresh,
        fresh,
        json: options.json,
        // A new session per fresh iteration: each process reports its own cost.
        session_cost: version.is_some_and(|v| v.reports_session_cost()) && !fresh,
        client_args: settings.client_args,
        extra_settings: settings.extra_settings,
        signals,
        session,
        max_iterations,
        // A step named by --from starts over: nothing to take up.
        resumed: options.resume && options.from.is_none(),
        next_text: None,
        wait_for_answer: options.wait_for_answer,
        usage_windows: Default::default(),
        answer_note,
        item: None,
    }
    .drive()
    .0
}

/// What every run settles before it starts or joins a loop.
pub(crate) struct Prepared {
    /// SIGINT, SIGTERM and SIGHUP, recorded from the start.
    pub(crate) signals: Signals,
    /// The client to run.
    pub(crate) client: ClientProgram,
    /// The config, formula, worktrees' plan and context mode.
    pub(crate) inputs: Inputs,
    /// The client's arguments and ralph's `--settings`.
    pub(crate) settings: ClientSettings,
    /// The client's version, when it said.
    pub(crate) version: Option<command::ClientVersion>,
}

/// What [`prepare`] leads to.
pub(crate) enum Ready {
    /// Nothing to start (`--dry-run`): the exit code.
    Done(i32),
    /// Everything a run needs.
    Go(Box<Prepared>),
}

/// Catches the signals, finds the client, reads and checks the inputs,
/// `--reset` clears the last loop (never one a live driver holds), and
/// plans the client's settings: everything `run` and `run --queue` do
/// before a loop starts. `--dry-run` ends here.
pub(crate) fn prepare(paths: &ProjectPaths, options: &RunOptions) -> Result<Ready, CtlError> {
    // From here on SIGINT, SIGTERM and SIGHUP are recorded, not fatal.
    let signals =
        Signals::install().map_err(|e| CtlError::Client(format!("cannot catch signals: {e}")))?;
    if options.reset && options.resume {
        return Err(CtlError::BadArgument(
            "--reset and --resume exclude each other: --reset starts a new loop, --resume goes on with the last one".into(),
        ));
    }
    let client = find_client(paths)?;
    let inputs = Inputs::read(paths, options)?;
    if options.dry_run {
        return dry_run(paths, &client, options, &inputs).map(Ready::Done);
    }
    if options.reset {
        // --reset never clears a loop a live driver holds.
        if let Ok(Some(current)) = StateStore::new(paths).read() {
            if let Some(refusal) = liveness::still_carried(&current) {
                return Err(CtlError::Refused(refusal));
            }
        }
        if let start::Cleared::Quarantined(aside) = start::clear(paths)? {
            say(&format!(
                "moved the state ralph could not use to {}",
                aside.display()
            ));
        }
    }
    let version = client::version(&client);
    let settings = ClientSettings::plan(paths, options, &inputs, version)?;
    Ok(Ready::Go(Box::new(Prepared {
        signals,
        client,
        inputs,
        settings,
        version,
    })))
}

/// What the run reads and checks before anything starts: the config (a
/// resumed loop's pinned one), the formula, the worktrees' plan, and
/// whether iterations run in fresh context. A bad formula, or a project
/// that cannot have worktrees, is refused with nothing changed.
pub(crate) struct Inputs {
    pub(crate) config: Config,
    pub(crate) formula: Option<formula::Formula>,
    pub(crate) worktrees: Option<worktree::WorktreePlan>,
    pub(crate) fresh: bool,
}

impl Inputs {
    fn read(paths: &ProjectPaths, options: &RunOptions) -> Result<Inputs, CtlError> {
        // A resumed loop goes on with what it was pinned to.
        let config = match options.resume {
            true => match StateStore::new(paths).read() {
                Ok(Some(state)) => pin::loop_config(paths, &ProcessEnv, &state)?,
                _ => Config::load(paths, &ProcessEnv)?,
            },
            false => Config::load(paths, &ProcessEnv)?,
        };
        let formula = options
            .formula
            .as_deref()
            .map(|name| formula::load(paths, name))
            .transpose()?;
        if let (Some(step), None) = (&options.from, &formula) {
            if !options.resume {
                return Err(CtlError::BadArgument(format!(
                    "--from {step} names a formula step: give --formula NAME, or --resume a formula run"
                )));
            }
        }
        if let (Some(step), Some(formula)) = (&options.from, &formula) {
            // Refused here, before anything starts, as the run would be.
            formula
                .new_run()
                .restart_at(step)
                .map_err(|e| CtlError::BadArgument(format!("--from {step:?}: {e}")))?;
        }
        if let Some(formula) = &formula {
            if options.worktree {
                return Err(CtlError::BadArgument(
                    "--formula and --worktree do not go together: each step builds on what the earlier \
                     steps left, which a worktree made from the base would not have"
                        .into(),
                ));
            }
            check_gate_names(formula, &config)?;
        }
        let fresh = options.fresh
            || options.worktree
            || options.queue.is_some()
            || formula.is_some()
            || config.context_mode == ContextMode::Fresh;
        if !(options.worktree || options.queue.is_some())
            && (options.base_ref.is_some() || options.no_cleanup)
        {
            return Err(CtlError::BadArgument(
                "--base-ref and --no-cleanup go with --worktree or --queue".into(),
            ));
        }
        let worktrees = (options.worktree || options.queue.is_some())
            .then(|| worktree::plan(&paths.root, options.base_ref.as_deref(), options.no_cleanup))
            .transpose()?;
        Ok(Inputs {
            config,
            formula,
            worktrees,
            fresh,
        })
    }
}

/// A gate's result is found by its name among the claim's checks: no gate
/// may share a verify command's name.
fn check_gate_names(formula: &formula::Formula, config: &Config) -> Result<(), CtlError> {
    for step in &formula.steps {
        for gate in &step.gates {
            if config.completion.verify.iter().any(|v| v.name == gate.name) {
                return Err(formula::FormulaError::Invalid {
                    file: formula.file.clone(),
                    line: None,
                    problem: format!(
                        "gate {:?} of step {:?} has the name of a verify command in config.json: \
                         rename one of them",
                        gate.name, step.id
                    ),
                }
                .into());
            }
        }
    }
    Ok(())
}

/// The client's arguments and ralph's `--settings` for every run of the
/// loop: the sandbox for unattended runs (or, where it cannot run, allow
/// rules for the checks), deny rules keeping the agent off ralph's files,
/// the StopFailure hook, the person's own `--settings` merged in.
pub(crate) struct ClientSettings {
    pub(crate) client_args: Vec<OsString>,
    pub(crate) extra_settings: Option<String>,
    pub(crate) sandbox_notice: Option<String>,
    /// Whether the client's commands run in its sandbox.
    pub(crate) sandboxed: bool,
}

impl ClientSettings {
    fn plan(
        paths: &ProjectPaths,
        options: &RunOptions,
        inputs: &Inputs,
        version: Option<command::ClientVersion>,
    ) -> Result<ClientSettings, CtlError> {
        let config = &inputs.config;
        let sandbox_setting = sandbox::setting(config.sandbox, options.sandbox);
        let mut sandbox_plan = match sandbox::plan(
            sandbox_setting,
            options.headless || inputs.fresh,
            &sandbox::support(
                &sandbox::Machine::probe(std::env::var_os("PATH").as_deref()),
                version,
            ),
            command::names_settings(&options.client_args),
        ) {
            Ok(plan) => plan,
            Err(sandbox::Refusal(why)) => return Err(CtlError::Refused(why)),
        };
        // A permission mode the person named is theirs: ralph adds no allow rules to it.
        if command::names_permissions(&options.client_args) {
            sandbox_plan.allow_checks = false;
        }
        let stop_failure_hook = version
            .filter(|v| v.has_stop_failure() && !inputs.fresh)
            .and_then(|_| {
                registration::registered_command_in(paths).unwrap_or_else(|e| {
                    say(&format!("warning: {e}"));
                    None
                })
            });
        let checks: Vec<String> = config
            .completion
            .verify
            .iter()
            .map(|v| v.command.clone())
            .chain(inputs.formula.iter().flat_map(|f| {
                f.steps
                    .iter()
                    .flat_map(|s| s.gates.iter().map(|g| g.command.clone()))
            }))
            .collect();
        let mut extra_settings = sandbox::settings(
            &sandbox_plan,
            &sandbox::protected_paths(
                &paths.root,
                &sandbox::protected_files(
                    sandbox::files_at_start(
                        paths,
                        &config.completion.protected_paths,
                        options.resume,
                    )
                    .as_ref(),
                ),
            ),
            &sandbox::allow_rules(checks.iter().map(String::as_str)),
            stop_failure_hook.as_deref(),
            sandbox_setting == SandboxSetting::On,
        );
        // An interactive client gives the plan's usage windows only to its
        // status line command: ralph's records them (and shows the
        // person's own line), so that pauseAtUtilization paces it too.
        let interactive = !options.headless && !inputs.fresh;
        if let (true, Some(_), Ok(ralph_ctl)) = (
            interactive,
            config.supervision.pause_at_utilization,
            std::env::current_exe(),
        ) {
            let settings = extra_settings.get_or_insert_with(|| serde_json::json!({}));
            settings["statusLine"] = crate::settings::statusline_setting(&ralph_ctl);
        }
        // One --settings: the person's own merged with ralph's.
        let (client_args, extra_settings, settings_notice) =
            sandbox::merge_own_settings(&options.client_args, extra_settings, &paths.root);
        if let Some(notice) = settings_notice {
            say(&notice);
        }
        let sandbox_notice = sandbox_plan.notice.clone().or_else(|| {
            sandbox_plan.sandboxed.then(|| {
                "sandbox: on; the agent's commands run without prompts and cannot write outside the project or to ralph's files".to_string()
            })
        });
        Ok(ClientSettings {
            client_args,
            extra_settings: extra_settings.map(|s| s.to_string()),
            sandbox_notice,
            sandboxed: sandbox_plan.sandboxed,
        })
    }
}

/// `--resume`: the loop left behind is recorded first, then the paused or
/// interrupted loop is taken up by the person. Returns it, and the formula
/// it was pinned to (never another one named on the command line).
fn take_up_by_hand(
    paths: &ProjectPaths,
    config: &Config,
    given: Option<&formula::Formula>,
) -> Result<
    (
        ralph_core::judge::state::LoopState,
        Option<formula::Formula>,
    ),
    CtlError,
> {
    if let Some(state) = liveness::reconcile(paths)? {
        say(&format!(
            "the loop was left running: {}",
            state.ended_because.as_deref().unwrap_or_default()
        ));
    }
    // Refused before the loop is taken up.
    if let (Some(given), Ok(Some(state))) = (given, StateStore::new(paths).read()) {
        if let Some(pinned) = state.pinned.as_ref().and_then(|p| p.formula.as_ref()) {
            let given_file = given.file.strip_prefix(&paths.root).unwrap_or(&given.file);
            if given_file != std::path::Path::new(&pinned.file) {
                return Err(CtlError::BadArgument(format!(
                    "this loop runs the formula in {}, not {}: resume it without --formula, or \
                     start a new loop with --reset",
                    pinned.file,
                    given_file.display()
                )));
            }
        }
    }
    let state = supervisor::take_up(paths, config, None, false)?;
    say(&format!(
        "resuming the loop of session {} at iteration {} of {}",
        state.session_id, state.iteration, state.max_iterations
    ));
    // A formula run goes on with the formula it was pinned to (a state
    // from before pinning: the one its run names).
    let formula = if let Some(pinned) = state.pinned.as_ref().and_then(|p| p.formula.as_ref()) {
        Some(formula::from_pin(pinned)?)
    } else if let (None, Some(run)) = (given, &state.formula) {
        Some(formula::load(paths, &run.name)?)
    } else {
        None
    };
    Ok((state, formula))
}

/// Starts the loop (and its formula run).
fn begin(
    paths: &ProjectPaths,
    options: &RunOptions,
    formula: Option<&formula::Formula>,
    fresh: bool,
) -> Result<start::Started, CtlError> {
    // A formula's steps carry their own prompts: PROMPT.md may be the template.
    let allow_template = options.force || formula.is_some();
    let run_mode = RunMode {
        headless: options.headless,
        sandbox: options.sandbox,
        workers: None,
        worktree: options.worktree,
    };
    let started = start::start_loop(
        paths,
        None,
        None,
        false,
        allow_template,
        fresh,
        Some(run_mode),
    )?;
    if let Some(formula) = formula {
        steps::begin(paths, &started.session_id, formula, options.from.as_deref())?;
        say(&format!(
            "formula {} ({}): {} steps, {}",
            formula.name,
            formula.file.display(),
            formula.steps.len(),
            formula
                .steps
                .iter()
                .map(|s| match &s.model {
                    Some(m) => format!("{} ({m})", s.id),
                    None => s.id.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if let Some(step) = &options.from {
            say(&format!(
                "starting at step {step}; the steps before it are skipped"
            ));
        }
    }
    Ok(started)
}

/// The loop being driven: what the run fixed at its start, and what moves
/// from one iteration to the next.
struct Driver<'a> {
    paths: &'a ProjectPaths,
    client: ClientProgram,
    /// The config the iterations run by: the loop's pin, re-read at each.
    config: Config,
    formula: Option<formula::Formula>,
    worktrees: Option<worktree::WorktreePlan>,
    headless: bool,
    fresh: bool,
    json: bool,
    /// The client reports its session's cost, not the run's.
    session_cost: bool,
    client_args: Vec<OsString>,
    extra_settings: Option<String>,
    signals: Signals,
    /// The session that carries the loop now.
    session: String,
    /// The loop's cap, fixed at its start.
    max_iterations: u32,
    /// The next run takes up `session` (`--resume`) rather than starting it.
    resumed: bool,
    /// The text of the next fresh iteration, as the engine rendered it.
    next_text: Option<String>,
    /// Set when the loop works one item of a queue run.
    item: Option<ItemWork>,
    /// How long to wait for the person's answer to the agent's question
    /// (`--wait-for-answer SECONDS`); `None`: until a signal.
    wait_for_answer: Option<u64>,
    /// The person's answer to the agent's question (with any notes), for
    /// the front of the next iteration's text.
    answer_note: Option<String>,
    /// The usage windows the last fresh client run reported, for its
    /// judgement.
    usage_windows: std::collections::BTreeMap<String, ralph_core::judge::state::WindowUse>,
}

/// What changes in a loop that works one backlog item (`run --queue`).
#[derive(Clone, Debug)]
pub(crate) struct ItemWork {
    /// The item's worktree name: one for all of its iterations.
    pub(crate) worktree_name: String,
    /// The queue's plan, which gates no claim of an item.
    pub(crate) not_plans: Vec<String>,
    /// What is left of the run's budget when the item was taken: the
    /// item's loop may spend no more.
    pub(crate) cost_cap: Option<Usd>,
}

/// One item's loop, as a queue worker hands it to the driver.
pub(crate) struct ItemDrive<'a> {
    /// The item loop's paths (`ProjectPaths::for_item`).
    pub(crate) paths: &'a ProjectPaths,
    /// The client.
    pub(crate) client: ClientProgram,
    /// The run's config.
    pub(crate) config: Config,
    /// The worktrees' plan.
    pub(crate) worktrees: worktree::WorktreePlan,
    /// The client's arguments, ralph's settings merged in.
    pub(crate) client_args: Vec<OsString>,
    /// ralph's `--settings`.
    pub(crate) extra_settings: Option<String>,
    /// The client's output as it is.
    pub(crate) json: bool,
    /// The item loop's first session.
    pub(crate) session: String,
    /// The item loop's cap.
    pub(crate) max_iterations: u32,
    /// What makes it an item's loop.
    pub(crate) item: ItemWork,
}

/// Drives one item's loop to its end, as `run --fresh --worktree` drives a
/// loop, with the signals the worker holds (given back with the loop's
/// exit code, for the next item).
pub(crate) fn drive_item(drive: ItemDrive<'_>, signals: Signals) -> (CmdResult, Signals) {
    if let Err(e) = liveness::record(drive.paths, &drive.session, liveness::with_client(None)) {
        return (Err(e), signals);
    }
    let driver = Driver {
        paths: drive.paths,
        client: drive.client,
        config: drive.config,
        formula: None,
        worktrees: Some(drive.worktrees),
        headless: true,
        fresh: true,
        json: drive.json,
        session_cost: false,
        client_args: drive.client_args,
        extra_settings: drive.extra_settings,
        signals,
        session: drive.session,
        max_iterations: drive.max_iterations,
        resumed: false,
        next_text: None,
        // Never read: an item's question is not waited for (await_answer).
        wait_for_answer: None,
        usage_windows: Default::default(),
        answer_note: None,
        item: Some(drive.item),
    };
    driver.drive()
}

/// The note waiting for the next iteration of `session`'s loop (the
/// person's answer, `say` notes), taken from the state to go in front of
/// the first text a taken-up run sends.
fn take_note(paths: &ProjectPaths, session: &str) -> Result<Option<String>, CtlError> {
    let mut note = None;
    let changed = ralph_core::transaction::change(
        paths,
        ralph_core::transaction::Whose::Session(session),
        |draft| {
            note = take_note_in(draft);
            Ok::<_, CtlError>(())
        },
    )?;
    super::told(changed);
    Ok(note)
}

/// In `draft`: the notes waiting for the next iteration, dropped from the
/// state (with the question they answer) as they are taken.
fn take_note_in(draft: &mut ralph_core::events::Draft) -> Option<String> {
    let note = draft.state().and_then(|s| s.hint.clone());
    if note.is_some() {
        draft.apply(ralph_core::events::Event::NoteTaken);
    }
    note
}

/// How a wait for the person's answer ended.
pub(crate) enum AnswerWait {
    /// The person answered: the loop runs again.
    Answered,
    /// A signal came first: the loop is left waiting.
    Signal(super::signals::Signal),
    /// Out of time (the loop left waiting), or the loop ended, was
    /// replaced or reset meanwhile: as found.
    Over(Found),
}

/// How often a waiting run reads the state for the person's answer.
const ANSWER_LOOK: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits for the person's answer to the question of `session`'s waiting
/// loop, saying what is asked and how to answer; up to `limit` (`None`:
/// until a signal, which leaves the loop waiting, and says so).
pub(crate) fn wait_for_answer(
    paths: &ProjectPaths,
    session: &str,
    limit: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<AnswerWait, CtlError> {
    let store = StateStore::new(paths);
    match store.read()? {
        Some(state) if state.answered() => return Ok(AnswerWait::Answered),
        Some(state) => {
            if let Some(question) = state.question {
                say(&format!(
                    "iteration {}: the agent asks: {}",
                    question.iteration, question.text
                ));
            }
        }
        None => {}
    }
    let within = limit
        .map(|l| format!(" for up to {} s", l.as_secs()))
        .unwrap_or_else(|| " (Ctrl-C leaves the loop waiting)".into());
    say(&format!(
        "answer from another terminal with `ralph-ctl answer TEXT`; waiting{within}"
    ));
    let started = std::time::Instant::now();
    loop {
        if let Some(signal) = signals.take().first().copied() {
            say(&format!(
                "{} received: the loop is left waiting for your answer (`ralph-ctl answer TEXT`, then `ralph-ctl run --resume`)",
                signal.describe()
            ));
            return Ok(AnswerWait::Signal(signal));
        }
        match store.read()? {
            Some(state) if state.session_id != session => {
                return Ok(AnswerWait::Over(Found::Replaced {
                    by: state.session_id,
                }))
            }
            Some(state) if state.status == Status::Waiting => {
                if limit.is_some_and(|l| started.elapsed() >= l) {
                    return Ok(AnswerWait::Over(Found::Loop(Box::new(state))));
                }
            }
            Some(state) if state.status == Status::Running => return Ok(AnswerWait::Answered),
            Some(state) => return Ok(AnswerWait::Over(Found::Loop(Box::new(state)))),
            None => return Ok(AnswerWait::Over(Found::Gone)),
        }
        std::thread::sleep(ANSWER_LOOK);
    }
}

/// After one run of the client: run again, or the loop's exit code.
enum Next {
    Again,
    Done(i32),
}

/// What one iteration runs by: its formula step and the formula's
/// changes from its pin.
struct Iteration {
    step: Option<formula::Step>,
    formula_changes: Vec<ralph_core::pin::Changed>,
}

impl Driver<'_> {
    /// Runs the client until the loop ends; the signals are given back.
    fn drive(mut self) -> (CmdResult, Signals) {
        let result = loop {
            match self.iteration() {
                Ok(Next::Done(code)) => break Ok(code),
                Ok(Next::Again) => {}
                Err(e) => break Err(e),
            }
        };
        (result, self.signals)
    }

    /// One run of the client: its text, its process watched to its end,
    /// the end judged (fresh) or recorded, a pause waited out.
    fn iteration(&mut self) -> Result<Next, CtlError> {
        let paths = self.paths;
        // The loop as this iteration starts: nothing else writes it while
        // no client runs.
        let state = StateStore::new(paths).read().ok().flatten();
        let iteration = self.pinned_inputs(state.as_ref());
        let prompt = match self.prompt_text(iteration.step.as_ref(), state.as_ref()) {
            // The person's answer (and notes) first, once.
            Ok(text) => match self.answer_note.take() {
                Some(note) => format!(
                    "{}\n\n{text}",
                    ralph_core::observe::prompt::person_note(&note)
                ),
                None => text,
            },
            Err(e) => {
                say(&e.to_string());
                let cause = format!("the prompt could not be read ({e})");
                return self.end(&cause, e.exit_code());
            }
        };
        if let Some(signal) = self.signals.take().first().copied() {
            let cause = format!("{} received before Claude Code started", signal.describe());
            return self.end(&cause, signal.exit_code());
        }
        let spent = state.as_ref().map(|s| s.cost_usd).unwrap_or_default();
        let last_stop_before = state.and_then(|s| s.last_run_at);
        // The iteration's own worktree, when it has one.
        let (current, new_baseline) = match self.worktrees.as_ref().filter(|_| self.fresh) {
            Some(plan) => match enter_worktree(
                paths,
                plan,
                self.item.as_ref().map(|i| i.worktree_name.as_str()),
            ) {
                Ok((worktree, baseline)) => (Some(worktree), baseline),
                Err(e) => {
                    say(&e.to_string());
                    let cause = format!("the iteration's worktree could not be made ({e})");
                    return self.end(&cause, exit_codes::ERROR);
                }
            },
            None => (None, None),
        };
        let iteration_started = std::time::Instant::now();
        let run = match self.run_client(
            &prompt,
            iteration.step.as_ref(),
            spent,
            current.as_ref(),
            new_baseline,
        ) {
            Ok(run) => run,
            Err((cause, code)) => return self.end(&cause, code),
        };
        let (supervision, result) = run;
        if self.fresh {
            if let Some(next) = self.conclude(
                &supervision,
                result.as_ref(),
                &iteration,
                current.as_ref(),
                iteration_started,
            )? {
                return Ok(next);
            }
        }
        if let Some(worktree) = &current {
            say(&format!(
                "worktree {} left as it is (branch {}): the iteration did not end its turn",
                worktree.shown(&paths.root),
                worktree.branch
            ));
        }
        self.name_a_first_run_not_done(&supervision, result.as_ref(), iteration_started);
        // A fresh iteration's cost was added when it was concluded.
        let charged = self.fresh && result.as_ref().is_some_and(|r| turn_ended(&supervision, r));
        let ending = supervisor::record_client_end(
            paths,
            &self.config,
            &self.session,
            &supervisor::RunEnd {
                supervision: &supervision,
                result: result.as_ref().filter(|_| !charged),
                headless: self.headless,
                session_cost: self.session_cost,
                last_stop_before,
            },
        )?;
        let waiting = matches!(&ending, Found::Loop(state) if state.status == Status::Waiting || state.answered());
        if waiting && self.headless {
            return self.await_answer();
        }
        let paused = matches!(&ending, Found::Loop(state) if state.status == Status::Paused);
        if !(paused && self.headless) {
            return Ok(Next::Done(finish_code(paths, &ending, &supervision)));
        }
        self.after_a_pause()
    }

    /// The config and the formula the iteration runs by: the loop's pin
    /// (the person's `reload` changes it from the next iteration), never
    /// the files as they are now.
    fn pinned_inputs(&mut self, state: Option<&LoopState>) -> Iteration {
        let paths = self.paths;
        let pinned = state.and_then(|s| s.pinned.as_ref());
        if let Some(pin) = pinned {
            match pin.config(paths, &ProcessEnv) {
                Ok(pinned_config) => {
                    self.config = pinned_config;
                    if let Some(item) = &self.item {
                        self.config.supervision.max_cost = item.cost_cap;
                    }
                }
                Err(e) => say(&format!("warning: the pinned config cannot be used ({e}); going on with the one read at start")),
            }
        }
        if let Some(pinned) = pinned.and_then(|p| p.formula.as_ref()) {
            match formula::from_pin(pinned) {
                Ok(pinned) => self.formula = Some(pinned),
                Err(e) => say(&format!("warning: {e}")),
            }
        }
        let formula_changes: Vec<_> = pinned
            .and_then(|p| p.formula.as_ref())
            .and_then(|f| formula::changes(paths, f))
            .into_iter()
            .collect();
        let step = match (&self.formula, state) {
            (Some(formula), Some(state)) => Some(steps::current(formula, state).clone()),
            _ => None,
        };
        Iteration {
            step,
            formula_changes,
        }
    }

    /// The iteration's text: the one the last judged iteration rendered,
    /// else its formula step's, else PROMPT.md's.
    fn prompt_text(
        &self,
        step: Option<&formula::Step>,
        state: Option<&LoopState>,
    ) -> Result<String, CtlError> {
        if let Some(text) = self.next_text.clone() {
            return Ok(text);
        }
        match (step, state) {
            (Some(step), Some(state)) => {
                if let Some(run) = &state.formula {
                    say(&format!("formula {}: {}", run.name, run.position()));
                }
                steps::step_text(
                    self.paths,
                    &self.config,
                    step,
                    state.iteration,
                    state.max_iterations,
                    None,
                )
            }
            _ => current_text(self.paths),
        }
    }

    /// Starts the client on `prompt` and watches it to its end (signals,
    /// the idle watch); its supervision and its result object, or why it
    /// could not run and the exit code to end with.
    fn run_client(
        &mut self,
        prompt: &str,
        step: Option<&formula::Step>,
        spent: Usd,
        current: Option<&worktree::Worktree>,
        new_baseline: Option<Option<progress::Baseline>>,
    ) -> Result<(Supervision, Option<result::ClientResult>), (String, i32)> {
        let paths = self.paths;
        let session = self.session.as_str();
        let max_budget_usd = self
            .config
            .supervision
            .max_cost
            .map(|max| Usd(max.0.saturating_sub(spent.0)).dollars());
        let work_root = current.map_or(paths.root.as_path(), |w| &w.path);
        // In a worktree, its own copies of ralph's files are walled too.
        let extra_settings = match (current, &self.worktrees, self.extra_settings.as_deref()) {
            (Some(worktree), Some(plan), Some(settings)) => {
                Some(sandbox::in_worktree(settings, &plan.root, &worktree.path))
            }
            _ => self.extra_settings.clone(),
        };
        let prompt_file = paths.runtime_dir().join(PROMPT_FILE_NAME);
        let block_cap = std::env::var(command::BLOCK_CAP_ENV).ok();
        // A session the client never saved an answer of (stopped before
        // the model's first reply) cannot be resumed: the client would
        // refuse it ("No conversation found") at every try. The iteration
        // starts over in a conversation of that id, with the same text; what
        // the client had written of it is moved aside, or the id would be
        // "already in use".
        if self.resumed && !super::transcripts::resumable(session) {
            let aside = match super::transcripts::set_aside(session) {
                Ok(Some(aside)) => format!(" (what it had written is kept in {})", aside.display()),
                Ok(None) => String::new(),
                Err(e) => format!(" (its transcript could not be moved aside: {e})"),
            };
            say(&format!(
                "session {session} holds no answer the client could resume: the iteration starts over \
                 in a new conversation of that id{aside}"
            ));
            self.resumed = false;
        }
        let command = command::build(&Launch {
            client: &self.client,
            headless: self.headless,
            session_id: session,
            max_iterations: self.max_iterations,
            prompt,
            client_args: &with_model(step, &self.client_args),
            block_cap: block_cap.as_deref(),
            prompt_file: &prompt_file,
            platform: Platform::current(),
            resume: self.resumed,
            max_budget_usd: iteration_budget(
                max_budget_usd,
                self.fresh.then_some(self.config.iteration_budget).flatten(),
            ),
            extra_settings: extra_settings.as_deref(),
            fresh: self.fresh,
            json: self.json,
        });
        if let PromptDelivery::File(path) = &command.delivery {
            // Private, and never written through a link planted there.
            if let Err(e) = atomic::write_file(path, command.prompt.as_bytes(), 0o600) {
                let problem = CtlError::io("write", path)(e);
                say(&problem.to_string());
                let cause = format!("the first prompt could not be written ({problem})");
                return Err((cause, exit_codes::ERROR));
            }
        }
        let output = if !self.headless {
            Output::Terminal
        } else if self.json {
            Output::PassOn
        } else {
            Output::Readable
        };
        let idle_timeout = self.config.idle_timeout_seconds.filter(|_| self.fresh);
        let headless = self.headless;
        let signals = &mut self.signals;
        // A session's client runs for the whole loop and the hook judges its
        // stops: the usage windows it reports are recorded as they come,
        // for the next stop (a fresh iteration's are judged at its end).
        let record_windows: Option<client::LineHook> = (self.headless && !self.fresh).then(|| {
            let paths = paths.clone();
            let session = session.to_string();
            Box::new(move |line: &[u8]| {
                let windows = result::usage_windows(line, ralph_core::time::Timestamp::now());
                if windows.is_empty() {
                    return;
                }
                let recorded = ralph_core::transaction::change(
                    &paths,
                    ralph_core::transaction::Whose::Session(&session),
                    |draft| {
                        draft.apply(ralph_core::events::Event::UsageWindowsSeen(windows));
                        Ok::<_, CtlError>(())
                    },
                );
                if let Err(e) = recorded {
                    say(&format!(
                        "warning: the usage window the client reported could not be recorded: {e}"
                    ));
                }
            }) as client::LineHook
        });
        let supervision =
            RunningClient::spawn(&command, work_root, output, record_windows).map(|mut running| {
                // Best effort: a loop without its client recorded is only
                // judged by the driver's life.
                let _ = liveness::record_start(
                    paths,
                    session,
                    liveness::with_client(Some(running.pid())),
                    new_baseline,
                );
                if self.headless && !self.fresh {
                    // The hook let the session stop (an ending, a question):
                    // the client is ended with what it started.
                    running.end_when_done(loop_done(paths, session));
                }
                let output_seen = running.output_seen();
                let mut transcript = None;
                let mut activity = || {
                    // Found once the client has written it.
                    if transcript.is_none() {
                        transcript = super::transcripts::of_session(session);
                    }
                    let size = transcript
                        .as_ref()
                        .and_then(|t| std::fs::metadata(t).ok())
                        .map_or(0, |m| m.len());
                    size.wrapping_add(output_seen.load(std::sync::atomic::Ordering::Relaxed))
                };
                let idle = idle_timeout.map(|seconds| client::IdleWatch {
                    timeout: std::time::Duration::from_secs(u64::from(seconds)),
                    every: client::IDLE_LOOK,
                    activity: &mut activity,
                });
                let watched = client::supervise(
                    &mut running,
                    signals,
                    client::KILL_GRACE,
                    client::TICK,
                    idle,
                    headless.then_some(client::INTERRUPT_PASS_ON),
                );
                running.end_leftovers(client::LEFTOVER_GRACE);
                (watched, running.output())
            });
        if let PromptDelivery::File(path) = &command.delivery {
            let _ = std::fs::remove_file(path);
        }
        match supervision {
            Ok((Ok(supervision), output)) => {
                // A session's were recorded line by line as they came.
                if self.fresh {
                    self.usage_windows =
                        result::usage_windows(&output, ralph_core::time::Timestamp::now());
                }
                Ok((supervision, result::parse(&output)))
            }
            Ok((Err(e), _)) => {
                say(&format!("cannot wait for the Claude Code client: {e}"));
                Err((
                    format!("Claude Code could not be waited for ({e})"),
                    exit_codes::ERROR,
                ))
            }
            Err(e) => {
                say(&format!(
                    "cannot start the Claude Code client {}: {e}",
                    command.program.display()
                ));
                let code = if e.kind() == std::io::ErrorKind::NotFound {
                    exit_codes::CLIENT_NOT_FOUND
                } else {
                    exit_codes::ERROR
                };
                Err((format!("Claude Code could not start ({e})"), code))
            }
        }
    }

    /// A fresh iteration whose turn ended (or that the idle watch cut
    /// off): judged, charged and handed over in one transaction
    /// (`fresh::conclude`). `None` when there is nothing to judge, or the
    /// loop paused: the run's end is recorded as any other's.
    fn conclude(
        &mut self,
        supervision: &Supervision,
        result: Option<&result::ClientResult>,
        iteration: &Iteration,
        current: Option<&worktree::Worktree>,
        iteration_started: std::time::Instant,
    ) -> Result<Option<Next>, CtlError> {
        let paths = self.paths;
        // Ended by the idle watch, not by the person.
        let cut_off = supervision
            .idle_cut_off
            .filter(|_| supervision.signal.is_none())
            .map(|t| {
                format!(
                    "Claude Code showed no sign of work for {} s (idleTimeoutSeconds) and was ended",
                    t.as_secs()
                )
            });
        let done = result.filter(|r| turn_ended(supervision, r));
        if done.is_none() && cut_off.is_none() {
            return Ok(None);
        }
        let number = StateStore::new(paths)
            .read()
            .ok()
            .flatten()
            .map(|s| s.iteration)
            .unwrap_or_default();
        if let Some(why) = &cut_off {
            say(&format!("iteration {number}: {why}"));
        }
        let work_root = current.map_or(paths.root.as_path(), |w| &w.path);
        let step = iteration.step.as_ref();
        if let (Some(command), Some(_)) = (step.and_then(|s| s.autofix.as_deref()), done) {
            run_autofix(command, &paths.root, work_root, self.config.sandbox.walls());
        }
        let end_of_iteration = fresh::IterationEnd {
            result: done,
            work_root: current.map(|w| w.path.as_path()),
            cut_off,
            task: step.map(|s| s.prompt.clone()),
            extra_verify: step
                .map(|s| s.gates.iter().map(formula::Gate::as_verify).collect())
                .unwrap_or_default(),
            skip_project_verify: step.is_some_and(|s| !s.verify),
            pinned_changes: iteration.formula_changes.clone(),
            not_plans: self
                .item
                .as_ref()
                .map(|i| i.not_plans.clone())
                .unwrap_or_default(),
            usage_windows: std::mem::take(&mut self.usage_windows),
        };
        // A formula's step rules, inside the engine's stop.
        let cost = done.and_then(|d| d.total_cost_usd);
        let (config, formula) = (&self.config, &self.formula);
        let mut rules = |draft: &mut ralph_core::events::Draft| match formula {
            Some(formula) => steps::settle(paths, config, draft, formula, number, cost),
            None => steps::StepNext::AsJudged,
        };
        let concluded = match fresh::conclude(
            paths,
            &self.session,
            end_of_iteration,
            &RealWorld,
            &mut rules,
            config.supervision.max_cost,
            &mut |note| say(note),
        ) {
            Ok(concluded) => concluded,
            Err(e) => {
                say(&e.to_string());
                let cause = format!("iteration {number} could not be judged ({e})");
                return self.end(&cause, exit_codes::ERROR).map(Some);
            }
        };
        if let Some(state) = &concluded.state {
            say(&fresh::summary(
                state,
                number,
                cost,
                iteration_started.elapsed().as_secs_f64(),
            ));
        }
        // An item's worktree is the queue worker's to land or keep.
        if let (Some(plan), Some(worktree), None) = (&self.worktrees, current, &self.item) {
            leave_worktree(paths, plan, worktree, number);
        }
        if self.item.is_some() && skipped(concluded.state.as_ref(), number) {
            let why = "the agent skipped the item (RALPH_OUTCOME skip)";
            say(&format!("iteration {number}: {why}"));
            let changed = ralph_core::transaction::change(
                paths,
                ralph_core::transaction::Whose::Any,
                |draft| {
                    if draft.state().is_some_and(|s| s.status == Status::Running) {
                        draft.apply(ralph_core::events::Event::Ended {
                            status: Status::Cancelled,
                            why: why.to_string(),
                            at: Some(number),
                        });
                    }
                    Ok::<_, CtlError>(())
                },
            )?;
            return Ok(Some(Next::Done(finish::announce(
                paths,
                &super::told(changed),
            ))));
        }
        if let (fresh::Judged::Continue { text }, Some(next)) =
            (concluded.judged, concluded.next_session)
        {
            // The loop goes on in the next process.
            self.next_text = Some(text);
            self.resumed = false;
            self.session = next;
            return Ok(Some(Next::Again));
        }
        let found = match concluded.state {
            // Paused: the supervisor takes it from here.
            Some(state) if state.status == Status::Paused => return Ok(None),
            // The agent asked the person: their answer is waited for.
            Some(state) if state.status == Status::Waiting => return self.await_answer().map(Some),
            // Not handed over: the loop is no longer this driver's.
            Some(state) if state.status == Status::Running => Found::Replaced {
                by: state.session_id,
            },
            Some(state) => Found::Loop(Box::new(state)),
            None => Found::Gone,
        };
        Ok(Some(Next::Done(finish::announce(paths, &found))))
    }

    /// A client that failed before its first answer may be one whose
    /// first run was never done in this home: that is the cause to name.
    fn name_a_first_run_not_done(
        &self,
        supervision: &Supervision,
        result: Option<&result::ClientResult>,
        iteration_started: std::time::Instant,
    ) {
        if supervision.signal.is_none()
            && supervision.exit != client::ClientExit::Code(0)
            && result.is_none()
            && iteration_started.elapsed() < FIRST_RUN_WINDOW
        {
            for missing in
                super::first_run::Setup::probe(&self.paths.root).missing_for(self.headless)
            {
                say(&format!(
                    "Claude Code exited at once: {}; {}",
                    missing.what, missing.fix
                ));
            }
        }
    }

    /// A headless loop the client left paused: waited out and taken up
    /// again when the policy says so, else its end is announced.
    fn after_a_pause(&mut self) -> Result<Next, CtlError> {
        let paths = self.paths;
        let session = self.session.clone();
        match supervisor::plan(paths, &self.config, &session)? {
            (ResumePlan::ResumeAt { at, reason }, Some(paused)) => {
                let crashed = paused
                    .paused_because
                    .as_ref()
                    .is_some_and(|p| p.kind == ralph_core::judge::state::PauseKind::ClientExit);
                if let Some(signal) = supervisor::wait_until(at, &reason, &mut self.signals) {
                    let cause = format!("{} received", signal.describe());
                    return self.end(&cause, signal.exit_code());
                }
                let state = supervisor::take_up(paths, &self.config, Some(&session), true)?;
                // A fresh iteration whose client crashed is worked on again
                // in a new session with the same text: fresh context is the
                // mode's point, and a client killed early leaves nothing a
                // --resume takes (2.0.77: "No conversation found").
                if self.fresh && crashed {
                    if let Some(next) = fresh::hand_over(paths, &session)? {
                        say(&format!(
                            "working on iteration {} of {} again, in a new session",
                            state.iteration, state.max_iterations
                        ));
                        self.session = next;
                        self.resumed = false;
                        return Ok(Next::Again);
                    }
                }
                say(&format!(
                    "resuming session {session} at iteration {} of {}",
                    state.iteration, state.max_iterations
                ));
                self.resumed = true;
                Ok(Next::Again)
            }
            (ResumePlan::Stay { reason }, Some(state)) if state.status == Status::Paused => {
                say(&format!("not resuming on its own: {reason}"));
                Ok(Next::Done(finish::announce(
                    paths,
                    &Found::Loop(Box::new(state)),
                )))
            }
            (_, Some(state)) => Ok(Next::Done(finish::announce(
                paths,
                &Found::Loop(Box::new(state)),
            ))),
            (_, None) => Ok(Next::Done(finish::announce(paths, &Found::Gone))),
        }
    }

    /// A loop whose agent asked the person a question (`RALPH_ASK`): waits
    /// for `ralph-ctl answer` (up to `--wait-for-answer`), then goes on
    /// with the answer in front of the next iteration's text: in a new
    /// session (fresh), or the same one taken up. Out of time, or on a
    /// signal, the loop is left waiting and the run ends (`WAITING`, or the
    /// signal's code): `run --resume` waits again.
    fn await_answer(&mut self) -> Result<Next, CtlError> {
        let paths = self.paths;
        if self.item.is_some() {
            // A worker does not hold its item for a person.
            let found = match StateStore::new(paths).read()? {
                Some(state) => Found::Loop(Box::new(state)),
                None => Found::Gone,
            };
            return Ok(Next::Done(finish::announce(paths, &found)));
        }
        let limit = self.wait_for_answer.map(std::time::Duration::from_secs);
        match wait_for_answer(paths, &self.session, limit, &mut self.signals)? {
            AnswerWait::Answered => {}
            AnswerWait::Signal(signal) => return Ok(Next::Done(signal.exit_code())),
            AnswerWait::Over(found) => return Ok(Next::Done(finish::announce(paths, &found))),
        }
        let fresh = self.fresh;
        let mut note = None;
        let mut next_session = None;
        let changed = ralph_core::transaction::change(
            paths,
            ralph_core::transaction::Whose::Session(&self.session),
            |draft| {
                if draft.state().is_some_and(|s| s.status == Status::Running) {
                    note = take_note_in(draft);
                    if fresh {
                        next_session = fresh::hand_over_in(draft);
                    }
                }
                Ok::<_, CtlError>(())
            },
        )?;
        let found = super::told(changed);
        let Found::Loop(state) = &found else {
            return Ok(Next::Done(finish::announce(paths, &found)));
        };
        if state.status != Status::Running {
            return Ok(Next::Done(finish::announce(paths, &found)));
        }
        self.answer_note = note;
        self.next_text = None;
        if let Some(next) = next_session {
            self.session = next;
            self.resumed = false;
        } else {
            self.resumed = true;
        }
        say(&format!(
            "answered: going on at iteration {} of {}",
            state.iteration, state.max_iterations
        ));
        Ok(Next::Again)
    }

    /// Records the end of a loop the client did not run to its own end (it
    /// could not start or be waited for, a signal came first), and ends
    /// with `code`.
    fn end(&self, cause: &str, code: i32) -> Result<Next, CtlError> {
        finish::announce(
            self.paths,
            &finish::record(self.paths, &self.session, cause)?,
        );
        Ok(Next::Done(code))
    }
}

/// The client arguments of an iteration: the formula step's `--model`
/// first, then the person's.
fn with_model(step: Option<&formula::Step>, client_args: &[OsString]) -> Vec<OsString> {
    let mut args: Vec<OsString> = step
        .and_then(|s| s.model.as_deref())
        .map(|model| vec!["--model".into(), model.into()])
        .unwrap_or_default();
    args.extend(client_args.iter().cloned());
    args
}

/// Runs a formula step's autofix command in the folder the iteration
/// worked in, before the gates; says how it went (a failure is only said:
/// the gates judge the result).
fn run_autofix(
    command: &str,
    project: &std::path::Path,
    root: &std::path::Path,
    walls: ralph_core::observe::process::walls::WallsWanted,
) {
    let fix = ralph_core::observe::verify::VerifyCommand {
        name: "autofix".into(),
        command: command.to_string(),
        timeout_seconds: crate::formula::DEFAULT_GATE_TIMEOUT_SECS,
    };
    let walls = ralph_core::engine::check_walls(project, root, walls);
    let result = ralph_core::observe::verify::run(root, &fix, &walls);
    let how = if result.passed() {
        "done".to_string()
    } else if result.timed_out {
        format!("timed out after {} s", fix.timeout_seconds)
    } else {
        format!(
            "exit {}: {}",
            result.exit_code.map_or("?".into(), |c| c.to_string()),
            crate::driver::live::excerpt(&result.output_tail)
        )
    };
    say(&format!("autofix `{command}`: {how}"));
}

/// The worktree of the loop's current iteration, made from the base (or
/// taken up again when the iteration is resumed); a new one becomes the
/// breaker's baseline, so that the iteration's progress is what it changed
/// there.
fn enter_worktree(
    paths: &ProjectPaths,
    plan: &worktree::WorktreePlan,
    item_name: Option<&str>,
) -> Result<(worktree::Worktree, Option<Option<progress::Baseline>>), CtlError> {
    let state = StateStore::new(paths)
        .read()?
        .ok_or_else(|| CtlError::Client("the loop's state is gone".into()))?;
    let name = match item_name {
        Some(name) => name.to_string(),
        None => worktree::name(&state.started_at.to_string(), state.iteration),
    };
    let worktree = plan.create(&name)?;
    let baseline = worktree.created.then(|| progress::baseline(&worktree.path));
    say(&format!(
        "iteration {} works in {} (branch {}, from {})",
        state.iteration,
        worktree.shown(&paths.root),
        worktree.branch,
        plan.base
    ));
    Ok((worktree, baseline))
}

/// After a judged iteration: its worktree is removed when it holds nothing
/// and the iteration did not fail, kept otherwise; the person is told which.
fn leave_worktree(
    paths: &ProjectPaths,
    plan: &worktree::WorktreePlan,
    worktree: &worktree::Worktree,
    iteration: u32,
) {
    let outcome = StateStore::new(paths)
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
        Ok(worktree::Finished::Removed) => say(&format!(
            "worktree {shown} removed: the iteration left no change and no commit in it"
        )),
        Ok(worktree::Finished::Kept(why)) => say(&format!(
            "worktree {shown} kept (branch {}): {why}",
            worktree.branch
        )),
        Err(e) => say(&format!("worktree {shown} kept: {e}")),
    }
}

/// Whether iteration `number`'s stop read a `RALPH_OUTCOME` of `skip`.
pub(crate) fn skipped(state: Option<&LoopState>, number: u32) -> bool {
    state.is_some_and(|s| {
        s.history
            .iter()
            .rev()
            .find(|r| r.iteration == number)
            .is_some_and(|r| r.outcome == Some(ralph_core::judge::claims::OutcomeStatus::Skip))
    })
}

/// Whether the client ended its turn on its own (exit 0, a result that is
/// no error, no signal): the iteration is there to be judged.
fn turn_ended(supervision: &Supervision, result: &result::ClientResult) -> bool {
    supervision.signal.is_none()
        && (matches!(supervision.exit, client::ClientExit::Code(0)) || supervision.ended_after_turn)
        && !result.is_error
}

/// Whether the loop of `session` is done with its client: no longer
/// running (ended, waiting for an answer), or no longer this session's.
/// Read without the lock, at most every quarter of a second.
fn loop_done(paths: &ProjectPaths, session: &str) -> Box<dyn FnMut() -> bool> {
    let store = StateStore::new(paths);
    let session = session.to_string();
    let mut looked = None::<std::time::Instant>;
    Box::new(move || {
        let now = std::time::Instant::now();
        if looked.is_some_and(|at| now.duration_since(at) < std::time::Duration::from_millis(250)) {
            return false;
        }
        looked = Some(now);
        match store.read() {
            Ok(Some(state)) => state.session_id != session || state.status != Status::Running,
            Ok(None) => true,
            // Unreadable for a moment (or for good): not a reason to end it.
            Err(_) => false,
        }
    })
}

/// `--max-budget-usd` for one run: what the loop's budget leaves, bounded
/// by the fresh iteration's own budget.
fn iteration_budget(left: Option<f64>, per_iteration: Option<Usd>) -> Option<f64> {
    let per_iteration = per_iteration.map(Usd::dollars);
    match (left, per_iteration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `--dry-run`: the client command and the first iteration's text as a run
/// would use them, on stdout; nothing is started and no state is touched.
fn dry_run(
    paths: &ProjectPaths,
    client: &ClientProgram,
    options: &RunOptions,
    inputs: &Inputs,
) -> CmdResult {
    let (config, fresh) = (&inputs.config, inputs.fresh);
    let (worktrees, formula) = (inputs.worktrees.as_ref(), inputs.formula.as_ref());
    let text = ralph_core::observe::prompt::read_prompt(&paths.resolve(&config.prompt_file))?;
    let guardrails = ralph_core::observe::prompt::read_guardrails(&paths.guardrails_file())?;
    let max = config.max_iterations;
    let first_step = formula.map(|f| &f.steps[0]);
    let task = first_step.map_or(text.as_str(), |s| s.prompt.as_str());
    let prompt = ralph_core::observe::prompt::iteration_text(
        &config.completion_signal,
        1,
        max,
        None,
        task,
        guardrails.as_deref(),
    );
    let headless = options.headless || fresh;
    let command = command::build(&Launch {
        client,
        headless,
        session_id: "<new session id>",
        max_iterations: max,
        prompt: &prompt,
        client_args: &with_model(first_step, &options.client_args),
        block_cap: std::env::var(command::BLOCK_CAP_ENV).ok().as_deref(),
        prompt_file: &paths.runtime_dir().join(PROMPT_FILE_NAME),
        platform: Platform::current(),
        resume: false,
        max_budget_usd: iteration_budget(
            config.supervision.max_cost.map(Usd::dollars),
            fresh.then_some(config.iteration_budget).flatten(),
        ),
        extra_settings: None,
        fresh,
        json: options.json,
    });
    let mut out = std::io::stdout();
    let words: Vec<String> = std::iter::once(command.program.as_os_str())
        .chain(command.args.iter().map(|a| a.as_os_str()))
        .map(|a| command::sh_quoted(&a.to_string_lossy()))
        .collect();
    let env: Vec<String> = command
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let delivery = match &command.delivery {
        PromptDelivery::Argument => "as the last argument before the session id",
        PromptDelivery::Stdin => "on the client's stdin",
        PromptDelivery::File(_) => "in the file the argument points at",
    };
    let mode = match (fresh, worktrees) {
        (true, Some(plan)) => format!(
            "fresh context: one client process and session per iteration, each in a new git \
             worktree under {} from {}",
            worktree::WORKTREES_DIR,
            plan.base
        ),
        (true, None) => "fresh context: one client process and session per iteration".into(),
        _ => "one client session for the whole loop".into(),
    };
    let mode = match formula {
        Some(f) => format!(
            "{mode}; formula {}, step 1/{} {}",
            f.name,
            f.steps.len(),
            f.steps[0].id
        ),
        None => mode,
    };
    let template = if formula.is_none() && ralph_core::observe::prompt::is_template(&text) {
        "\nwarning: PROMPT.md is still the template; a real run refuses it (--force runs it)"
    } else {
        ""
    };
    // The text may quote the agent (a rejected claim's verify output).
    let shown = format!(
        "ralph dry run: nothing was started and no state was changed ({mode}).{template}\n\
         command: {}\nenvironment for the client: {}\nfirst iteration's text ({delivery}):\n\n{prompt}",
        words.join(" "),
        if env.is_empty() { "nothing added".to_string() } else { env.join(" ") },
    );
    let written = writeln!(out, "{}", ralph_core::text::printable(&shown));
    crate::error::written(written.and_then(|()| out.flush()), exit_codes::OK)
}

/// The exit code once the client exited: the loop's, or 128 + the signal
/// when a signal the driver received left the loop interrupted.
fn finish_code(paths: &ProjectPaths, ending: &Found, supervision: &Supervision) -> i32 {
    let code = finish::announce(paths, ending);
    match (ending, supervision.signal) {
        (Found::Loop(state), Some(signal)) if state.status == Status::Interrupted => {
            signal.exit_code()
        }
        _ => code,
    }
}

/// The client `RALPH_CLAUDE` names (default `claude`), or exit 127.
pub(crate) fn find_client(paths: &ProjectPaths) -> Result<ClientProgram, CtlError> {
    let spec = match std::env::var(command::CLIENT_ENV) {
        Ok(spec) => spec,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(raw)) => {
            return Err(CtlError::BadArgument(format!(
                "{}={raw:?} is not valid UTF-8; set it to the client's path",
                command::CLIENT_ENV
            )))
        }
    };
    let path_var = std::env::var_os("PATH");
    let pathext = cfg!(windows)
        .then(|| std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".to_string()));
    let find = |name: &str| {
        command::find_executable(name, &paths.root, path_var.as_deref(), pathext.as_deref())
    };
    ClientProgram::parse(&spec, find).ok_or_else(|| {
        let shown = if spec.trim().is_empty() {
            command::DEFAULT_CLIENT
        } else {
            spec.as_str()
        };
        CtlError::ClientNotFound(format!(
            "cannot find the Claude Code client '{shown}'; install it \
             (npm install -g @anthropic-ai/claude-code) or set {} to its path",
            command::CLIENT_ENV
        ))
    })
}

/// One line on stderr, its control characters made visible (it may carry
/// the agent's text); a terminal that is gone (EIO, EPIPE) is ignored.
fn say(line: &str) {
    crate::output::say_err!("ralph: {line}");
}
/// The prompt of the loop's current iteration: header, PROMPT.md, guardrails.
pub(crate) fn current_text(paths: &ProjectPaths) -> Result<String, CtlError> {
    let state = StateStore::new(paths).read()?;
    // A loop's own pin decides its prompt file, not config.json as it is now.
    let config = match &state {
        Some(state) => pin::loop_config(paths, &ProcessEnv, state)?,
        None => Config::load(paths, &ProcessEnv)?,
    };
    let (iteration, max, task) = match state {
        Some(state) if state.status == Status::Running => {
            (state.iteration, state.max_iterations, state.task)
        }
        _ => (1, config.max_iterations, None),
    };
    let text = match task {
        // The loop's own task (a queue run's item, /ralph-loop TASK).
        Some(task) => task,
        None => ralph_core::observe::prompt::read_prompt(&paths.resolve(&config.prompt_file))?,
    };
    let guardrails = ralph_core::observe::prompt::read_guardrails(&paths.guardrails_file())?;
    Ok(ralph_core::observe::prompt::iteration_text(
        &config.completion_signal,
        iteration,
        max,
        None,
        &text,
        guardrails.as_deref(),
    ))
}
