//! Preparing a run of `ralph-ctl run`: its options ([`RunOptions`]), what
//! it reads and checks before anything starts ([`Inputs`]), the client's
//! settings ([`ClientSettings`]), the client itself ([`find_client`]),
//! `--dry-run`, and the loop's start or, with `--resume`, its taking up.
//! `launch` then drives the loop; `queue` drains a backlog with the same
//! preparation.

use std::ffi::OsString;
use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, ContextMode, EnvSource, SandboxSetting};
use ralph_core::judge::state::{RunMode, Status};
use ralph_core::observe::registration;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::pin;
use ralph_core::units::Usd;

use super::client::{self};
use super::command::{self, ClientProgram, Launch, Platform, PromptDelivery};
use super::os_signals::Signals;
use super::{carriers, sandbox, say, start, steps, supervisor, worktree};
use crate::error::CmdResult;
use crate::error::CtlError;
use crate::formula;

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
    /// (also `contextMode: fresh` / `RALPH_CONTEXT_MODE=fresh`).
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
    /// The settings the command line gives, over the environment: what
    /// every config read of the run and the client's environment carry.
    pub(crate) env: super::run_env::RunEnv,
}

/// The file holding the first prompt when it is pointed at rather than passed
/// (interactive mode on Windows), relative to the runtime folder.
pub(crate) const PROMPT_FILE_NAME: &str = "ralph-first-prompt.md";

/// `--max-budget-usd` for one run: what the loop's budget leaves, bounded
/// by the fresh iteration's own budget.
pub(crate) fn iteration_budget(left: Option<f64>, per_iteration: Option<Usd>) -> Option<f64> {
    let per_iteration = per_iteration.map(Usd::dollars);
    match (left, per_iteration) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The most workers one `run --queue` process runs (`--workers`).
pub(crate) const MAX_WORKERS: u32 = 16;

/// How a queue run lands a finished item (`run --queue --merge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MergeMode {
    /// Rebased onto the base, verified, the base fast-forwarded.
    #[default]
    Rebase,
    /// Left on its branch.
    None,
}

/// `--queue`, `--workers`, `--merge`: how `queue::run` drains a backlog.
#[derive(Clone, Debug)]
pub(crate) struct QueueOptions {
    /// The source as given.
    pub(crate) source: String,
    /// Workers in this process.
    pub(crate) workers: u32,
    /// How a finished item lands.
    pub(crate) merge: MergeMode,
    /// `--remote`: the git remote the backlog is shared on.
    pub(crate) remote: Option<String>,
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
            "none" => MergeMode::None,
            _ => MergeMode::Rebase,
        };
        // Within what --workers takes, whatever the record says.
        let workers = mode.workers.unwrap_or(1).clamp(1, MAX_WORKERS);
        taken.push(format!(
            "as the queue run it was (--queue {} --workers {workers} --merge {})",
            crate::driver::command::sh_quoted(&queue.source),
            queue.merge
        ));
        options.queue = Some(QueueOptions {
            source: queue.source.clone(),
            workers,
            merge,
            remote: queue.remote.clone(),
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
    let client = find_client(paths)?;
    let inputs = Inputs::read(paths, options)?;
    if options.dry_run {
        return dry_run(paths, &client, options, &inputs).map(Ready::Done);
    }
    let version = client::version(&client);
    if !(options.headless || inputs.fresh) {
        refuse_unanswered_screens(paths, options.resume, version)?;
    }
    if options.reset {
        // --reset never clears a loop a live driver holds.
        if let Ok(Some(current)) = StateStore::new(paths).read()
            && let Some(refusal) = carriers::still_carried(&current)
        {
            return Err(CtlError::Refused(refusal));
        }
        if let start::Cleared::Quarantined(aside) = start::clear(paths)? {
            say(&format!(
                "moved the state ralph could not use to {}",
                aside.display()
            ));
        }
    }
    let settings = ClientSettings::plan(paths, options, &inputs, version)?;
    Ok(Ready::Go(Box::new(Prepared {
        signals,
        client,
        inputs,
        settings,
        version,
    })))
}

/// Refuses a run of the client's terminal UI (not `claude -p`: a loop
/// whose record says it ran in fresh context or headless is let through
/// when `resuming`) that would open on screens no loop answers:
/// the client's first run never done in this home, or the question of an
/// `ANTHROPIC_API_KEY` it has no answer for. Such a run would stop there,
/// and `--resume` would meet them again: the error names each, its fix,
/// and `--headless`, which shows none of them.
pub(crate) fn refuse_unanswered_screens(
    paths: &ProjectPaths,
    resuming: bool,
    version: Option<command::ClientVersion>,
) -> Result<(), CtlError> {
    if resuming
        && let Ok(Some(state)) = StateStore::new(paths).read()
        && (state.fresh_context
            || state.queue.is_some()
            || state.run_mode.as_ref().is_some_and(|m| m.headless))
    {
        return Ok(());
    }
    let setup = super::first_run::Setup::probe(&paths.root, version);
    if let Some(unread) = setup.config_unread() {
        say(&unread);
    }
    let screens = setup.first_screens();
    if screens.is_empty() {
        return Ok(());
    }
    let causes: Vec<String> = screens
        .iter()
        .map(|s| format!("{}; fix: {}", s.what, s.fix))
        .collect();
    Err(CtlError::Refused(format!(
        "not started: the client's terminal UI would open on questions a loop cannot answer, \
         and stop there: {}. Then start again; or run headless (`ralph-ctl run --headless`), \
         which asks none of them",
        causes.join("; and ")
    )))
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
        let config = if options.resume {
            match StateStore::new(paths).read() {
                Ok(Some(state)) => pin::loop_config(paths, &options.env, &state)?,
                _ => Config::load(paths, &options.env)?,
            }
        } else {
            Config::load(paths, &options.env)?
        };
        let formula = options
            .formula
            .as_deref()
            .map(|name| formula::load(paths, name))
            .transpose()?;
        if let (Some(step), None) = (&options.from, &formula)
            && !options.resume
        {
            return Err(CtlError::BadArgument(format!(
                "--from {step} names a formula step: give --formula NAME, or --resume a formula run"
            )));
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
/// loop: the sandbox for unattended runs (or, where it cannot run, the allow
/// rule for `ralph-ctl check`, never git), deny rules keeping the agent off ralph's files,
/// the `StopFailure` hook, the person's own `--settings` merged in.
pub(crate) struct ClientSettings {
    pub(crate) client_args: Vec<OsString>,
    pub(crate) extra_settings: Option<String>,
    pub(crate) sandbox_notice: Option<String>,
    /// Whether the client's commands run in its sandbox.
    pub(crate) sandboxed: bool,
    /// The sandbox's mount points kept out of git's view for the run
    /// (`sandbox_mounts`), when it is sandboxed: removed when dropped.
    pub(crate) _mounts_excluded: Option<super::sandbox_mounts::Excluded>,
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
            &sandbox::allow_rules(std::env::current_exe().ok().as_deref()),
            stop_failure_hook.as_deref(),
            sandbox_setting == SandboxSetting::On,
        );
        // The agent's own caches of the project's toolchains (never the
        // person's, never the checks'), made and seeded now.
        let project_root = paths.project().root;
        ralph_core::walls::caches::prepare(&project_root);
        let agent_caches = ralph_core::walls::caches::own_caches(
            &project_root,
            ralph_core::walls::caches::Owner::Agent,
        );
        extra_settings =
            sandbox::with_check_rights(extra_settings, &sandbox_plan, agent_caches.as_ref());
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
        if (options.headless || inputs.fresh || options.queue.is_some())
            && let Some(billing) =
                super::first_run::Setup::probe(&paths.root, version).headless_billing()
        {
            say(&format!("billing: {billing}"));
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
            _mounts_excluded: sandbox_plan
                .sandboxed
                .then(|| super::sandbox_mounts::exclude(paths))
                .flatten(),
        })
    }
}

/// `--resume`: the loop left behind is recorded first, then the paused or
/// interrupted loop is taken up by the person. Returns it, and the formula
/// it was pinned to (never another one named on the command line).
pub(crate) fn take_up_by_hand(
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
    if let Some(state) = carriers::reconcile(paths)? {
        say(&format!(
            "the loop was left running: {}",
            state.ended_because.as_deref().unwrap_or_default()
        ));
    }
    // Refused before the loop is taken up.
    if let (Some(given), Ok(Some(state))) = (given, StateStore::new(paths).read())
        && let Some(pinned) = state.pinned.as_ref().and_then(|p| p.formula.as_ref())
    {
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

/// Starts the loop (and its formula run); `sandboxed`: its client runs in
/// the client's own sandbox.
pub(crate) fn begin(
    paths: &ProjectPaths,
    options: &RunOptions,
    formula: Option<&formula::Formula>,
    fresh: bool,
    sandboxed: bool,
) -> Result<start::Started, CtlError> {
    // A formula's steps carry their own prompts: PROMPT.md may be the template.
    let allow_template = options.force || formula.is_some();
    let run_mode = RunMode {
        headless: options.headless,
        sandbox: options.sandbox,
        workers: None,
        worktree: options.worktree,
        sandboxed,
    };
    let started = start::start_loop(
        paths,
        None,
        None,
        false,
        allow_template,
        fresh,
        Some(start::ByRun {
            mode: run_mode,
            env: &options.env,
        }),
    )?;
    if let Some(formula) = formula {
        steps::begin(
            paths,
            &started.session_id,
            formula,
            options.from.as_deref(),
            started.walls,
        )?;
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

/// `--dry-run`: the client command and the first iteration's text as a run
/// would use them, on stdout; nothing is started and no state is touched.
pub(crate) fn dry_run(
    paths: &ProjectPaths,
    client: &ClientProgram,
    options: &RunOptions,
    inputs: &Inputs,
) -> CmdResult {
    let (config, fresh) = (&inputs.config, inputs.fresh);
    let (worktrees, formula) = (inputs.worktrees.as_ref(), inputs.formula.as_ref());
    let text = ralph_core::observe::prompt_text::read_prompt(&paths.resolve(&config.prompt_file))?;
    let guardrails = ralph_core::observe::prompt_text::read_guardrails(&paths.guardrails_file())?;
    let first_step = formula.map(|f| &f.steps[0]);
    let queue = match &options.queue {
        Some(queue) => Some(queue_preview(paths, config, queue, worktrees)?),
        None => None,
    };
    let max = match queue {
        Some(_) => config.queue.max_iterations_per_item,
        None => config.max_iterations,
    };
    let task = match &queue {
        Some((_, first)) => first.as_deref().unwrap_or(text.as_str()),
        None => first_step.map_or(text.as_str(), |s| s.prompt.as_str()),
    };
    let prompt = ralph_core::observe::prompt_text::iteration_text(
        &config.completion_signal,
        1,
        max,
        None,
        task,
        guardrails.as_deref(),
    );
    let headless = options.headless || fresh;
    // What a real run gives the client: a dry run's task file (which stands
    // in for the PROMPT.md a real run writes) is for this preview only.
    let run_env: Vec<(&'static str, String)> = options
        .env
        .overrides()
        .iter()
        .filter(|(name, _)| *name != ralph_core::judge::config::env::PROMPT_FILE)
        .cloned()
        .collect();
    let command = command::build(&Launch {
        client,
        headless,
        session_id: "<new session id>",
        max_iterations: max,
        prompt: &prompt,
        client_args: &steps::with_model(first_step, &options.client_args),
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
        run_env: &run_env,
        loop_project: &paths.root,
    });
    let mut out = std::io::stdout();
    // The text is shown once, below, not again inside the command.
    let words: Vec<String> = std::iter::once(command.program.as_os_str())
        .chain(command.args.iter().map(std::ffi::OsString::as_os_str))
        .map(|a| match a.to_string_lossy() {
            arg if arg == prompt => "<the first iteration's text, below>".to_string(),
            arg => command::sh_quoted(&arg),
        })
        .collect();
    let env: Vec<String> = command
        .env
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let delivery = delivered(&command.delivery);
    let mode = dry_run_mode(fresh, worktrees, queue.as_ref().map(|(q, _)| q), formula);
    let template = if formula.is_none()
        && queue.is_none()
        && ralph_core::observe::prompt_text::is_template(&text)
    {
        "\nwarning: PROMPT.md is still the template; a real run refuses it (--force runs it)"
    } else {
        ""
    };
    let screens = if headless {
        String::new()
    } else {
        match refuse_unanswered_screens(paths, options.resume, client::version(client)) {
            Err(refusal) => format!("\nwarning: a real run would be refused: {refusal}"),
            Ok(()) => String::new(),
        }
    };
    // The text may quote the agent (a rejected claim's verify output).
    let shown = format!(
        "ralph dry run: nothing was started and no state was changed ({mode}).{template}{screens}\n\
         command: {}\nenvironment for the client: {}\nfirst iteration's text ({delivery}):\n\n{prompt}",
        words.join(" "),
        if env.is_empty() {
            "nothing added".to_string()
        } else {
            env.join(" ")
        },
    );
    let written = writeln!(out, "{}", ralph_core::text::printable(&shown));
    crate::error::written(written.and_then(|()| out.flush()), exit_codes::OK)
}

/// How a dry run says the client is given the first iteration's text.
fn delivered(delivery: &PromptDelivery) -> &'static str {
    match delivery {
        PromptDelivery::Argument => "as the last argument before the session id",
        PromptDelivery::Stdin => "on the client's stdin",
        PromptDelivery::File(_) => "in the file the argument points at",
    }
}

/// How a dry run says the loop would run: its context, the queue's mode
/// (`queue_mode`) in place of it, and the formula's first step.
fn dry_run_mode(
    fresh: bool,
    worktrees: Option<&worktree::WorktreePlan>,
    queue_mode: Option<&String>,
    formula: Option<&formula::Formula>,
) -> String {
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
    let mode = queue_mode.cloned().unwrap_or(mode);
    match formula {
        Some(f) => format!(
            "{mode}; formula {}, step 1/{} {}",
            f.name,
            f.steps.len(),
            f.steps[0].id
        ),
        None => mode,
    }
}

/// A queue run's dry run: what the run would do, and the text its first
/// item would start with (`None`: nothing to work now). The source is read
/// as the run would read it; nothing is claimed.
fn queue_preview(
    paths: &ProjectPaths,
    config: &Config,
    queue: &QueueOptions,
    worktrees: Option<&worktree::WorktreePlan>,
) -> Result<(String, Option<String>), CtlError> {
    let mut source: crate::queue::source::Source = queue.source.parse()?;
    source.pin_repository(&paths.root)?;
    // Not those that wait on an item that has not landed.
    let claims = crate::queue::claims::store::ClaimStore::new(paths)
        .read()
        .unwrap_or_default();
    let (items, left_out) = source.read_leaving_out(&paths.root)?;
    for item in &left_out {
        say(&item.to_string());
    }
    let items: Vec<_> = items
        .into_iter()
        .filter(|item| claims.waits_on(item).is_none())
        .collect();
    let titles: Vec<String> = items
        .iter()
        .take(5)
        .map(|item| format!("\"{}\"", item.title))
        .collect();
    let more = match items.len() {
        n if n > 5 => format!(" and {} more", n - 5),
        _ => String::new(),
    };
    let listed = match items.len() {
        0 => "nothing to work now".to_string(),
        n => format!("{n} item(s) to work now: {}{more}", titles.join(", ")),
    };
    let landing = match queue.merge {
        MergeMode::Rebase => "each landed on the base after the project's verify",
        MergeMode::None => "each left on its branch (--merge none)",
    };
    let base = worktrees.map_or("the branch checked out".to_string(), |p| p.base.clone());
    // PROMPT.md's task (`run --task` writes it) goes before every item's
    // text: said, so that a task left from an earlier loop is not a surprise.
    let task = match super::item_text::shared_task(paths, config)? {
        Some(_) => format!(
            "; the task in {} is sent before every item's text (empty that file to send \
             each item alone)",
            config.prompt_file.display()
        ),
        None => String::new(),
    };
    let mode = format!(
        "a queue run: {} worker(s) drain {} ({listed}; `ralph-ctl queue {}` shows what is \
         claimed or done); each item a loop of its own, at most {} iteration(s), in a new git \
         worktree under {} from {base}, {landing}{task}; shown: the first item's text",
        queue.workers,
        queue.source,
        command::sh_quoted(&queue.source),
        config.queue.max_iterations_per_item,
        worktree::WORKTREES_DIR,
    );
    let first = match items.first() {
        Some(item) => Some(super::item_text::of(paths, config, item)?),
        None => None,
    };
    Ok((mode, first))
}

/// The client `RALPH_CLAUDE` names (default `claude`), or exit 127.
pub(crate) fn find_client(paths: &ProjectPaths) -> Result<ClientProgram, CtlError> {
    let spec = match std::env::var(command::CLIENT_ENV) {
        Ok(spec) => spec,
        Err(std::env::VarError::NotPresent) => String::new(),
        // Debug shows the bytes that are not UTF-8 escaped; Display would
        // replace them.
        #[allow(clippy::unnecessary_debug_formatting)]
        Err(std::env::VarError::NotUnicode(raw)) => {
            return Err(CtlError::BadArgument(format!(
                "{}={raw:?} is not valid UTF-8; set it to the client's path",
                command::CLIENT_ENV
            )));
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

/// The prompt of the loop's current iteration: header, PROMPT.md, guardrails.
pub(crate) fn current_text(paths: &ProjectPaths, env: &dyn EnvSource) -> Result<String, CtlError> {
    let state = StateStore::new(paths).read()?;
    // A loop's own pin decides its prompt file, not config.json as it is now.
    let config = match &state {
        Some(state) => pin::loop_config(paths, env, state)?,
        None => Config::load(paths, env)?,
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
        None => ralph_core::observe::prompt_text::read_prompt(&paths.resolve(&config.prompt_file))?,
    };
    let guardrails = ralph_core::observe::prompt_text::read_guardrails(&paths.guardrails_file())?;
    Ok(ralph_core::observe::prompt_text::iteration_text(
        &config.completion_signal,
        iteration,
        max,
        None,
        &text,
        guardrails.as_deref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_may_spend_the_least_of_what_the_loop_and_the_iteration_allow() {
        let usd = Usd::from_dollars;
        assert_eq!(iteration_budget(None, None), None);
        assert_eq!(iteration_budget(Some(2.0), None), Some(2.0));
        assert_eq!(iteration_budget(None, Some(usd(0.5))), Some(0.5));
        assert_eq!(iteration_budget(Some(2.0), Some(usd(0.5))), Some(0.5));
        assert_eq!(iteration_budget(Some(0.25), Some(usd(0.5))), Some(0.25));
    }

    use ralph_core::events::Event;
    use ralph_core::judge::state::{LoopState, QueueRun};

    /// A project whose loop ran in `mode` (and as a queue run of `queue`).
    fn ran(mode: RunMode, queue: Option<QueueRun>) -> (tempfile::TempDir, ProjectPaths) {
        let dir = crate::testdir::new("as-it-ran");
        let paths = ProjectPaths::new(dir.path());
        let mut state = LoopState::new("s1".into(), 5, ralph_core::time::Timestamp::now());
        state.run_mode = Some(mode);
        state.queue = queue;
        ralph_core::transaction::replace(&paths, |_| {
            Ok::<_, CtlError>(Event::Started {
                state: Box::new(state),
                why: "started".into(),
            })
        })
        .unwrap();
        (dir, paths)
    }

    fn resumed(options: RunOptions) -> RunOptions {
        RunOptions {
            resume: true,
            ..options
        }
    }

    #[test]
    fn a_resumed_loop_runs_the_way_it_ran_where_the_command_line_is_silent() {
        let (_dir, paths) = ran(
            RunMode {
                headless: true,
                sandbox: Some(true),
                worktree: true,
                workers: None,
                sandboxed: false,
            },
            None,
        );
        let mut options = resumed(RunOptions::default());
        as_it_ran(&paths, &mut options);
        assert!(options.headless && options.worktree);
        assert_eq!(options.sandbox, Some(true));
        assert!(options.queue.is_none());
        // What the command line says stands.
        let mut options = resumed(RunOptions {
            sandbox: Some(false),
            ..RunOptions::default()
        });
        as_it_ran(&paths, &mut options);
        assert_eq!(options.sandbox, Some(false));
        // Without --resume nothing is taken up.
        let mut options = RunOptions::default();
        as_it_ran(&paths, &mut options);
        assert!(!options.headless && !options.worktree && options.sandbox.is_none());
    }

    #[test]
    fn a_resumed_queue_run_is_a_queue_run_with_its_workers_in_range() {
        let queue = QueueRun {
            source: "plan:PLAN.md".into(),
            merge: "none".into(),
            base: "main".into(),
            ..QueueRun::default()
        };
        let (_dir, paths) = ran(
            RunMode {
                headless: true,
                workers: Some(99),
                ..RunMode::default()
            },
            Some(queue),
        );
        let mut options = resumed(RunOptions::default());
        as_it_ran(&paths, &mut options);
        let queue = options.queue.expect("a queue run");
        assert_eq!(queue.source, "plan:PLAN.md");
        assert_eq!(queue.merge, MergeMode::None);
        assert_eq!(queue.workers, MAX_WORKERS);
        // A queue run's items are headless by themselves: no flag is added.
        assert!(!options.headless);
    }
}
