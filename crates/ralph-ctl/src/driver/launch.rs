//! The driver of `ralph-ctl run`, what the launchers run: with what
//! [`prepare`] read and checked (the inputs, the client's settings), starts
//! a loop (or, with `--resume`, takes up the last one), then drives it one
//! [`Driver::iteration`] at a time: the iteration's text → build the client
//! command → run and watch it → judge it (fresh) or read its end →
//! (headless, paused: wait, resume, run again) → `finish`. Every change to
//! the loop goes through `ralph_core::transaction`.

use std::ffi::OsString;

use ralph_core::engine::RealWorld;
use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::lifecycle::ResumePlan;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::observe::progress;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::Found;
use ralph_core::units::Usd;

use super::answer_wait::{self, AnswerWait};
use super::client::{self, Output, RunningClient, Supervision};
use super::command::{self, ClientProgram, Launch, Platform, PromptDelivery};
use super::os_signals::{SignalSource, Signals};
use super::prepare::{
    self, iteration_budget, Inputs, Prepared, Ready, RunOptions, PROMPT_FILE_NAME,
};
use super::result;
use super::{carriers, finish, fresh, sandbox, say, steps, supervisor, worktree};
use crate::error::CmdResult;
use crate::error::CtlError;
use crate::formula;

/// A client that fails within this long of its start, with no answer,
/// failed at starting: the launcher looks for a first run not done.
const FIRST_RUN_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

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
    } = match prepare::prepare(paths, &options)? {
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
            if let Some(refusal) = carriers::still_carried(&waiting) {
                return Err(CtlError::Refused(refusal));
            }
            let limit = options.wait_for_answer.map(std::time::Duration::from_secs);
            match answer_wait::wait_for_answer(paths, &waiting.session_id, limit, &mut signals)? {
                AnswerWait::Answered => {}
                AnswerWait::Signal(signal) => return Ok(signal.exit_code()),
                AnswerWait::Over(found) => return Ok(finish::announce(paths, &found)),
            }
        }
    }
    let (session, max_iterations, fresh) = if options.resume {
        let (mut state, pinned_formula) =
            prepare::take_up_by_hand(paths, &config, formula.as_ref())?;
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
        let started = prepare::begin(paths, &options, formula.as_ref(), fresh, settings.sandboxed)?;
        (started.session_id, started.max_iterations, fresh)
    };
    // Said once the loop is started (a refused start says only why).
    if let Some(notice) = &settings.sandbox_notice {
        say(notice);
    }
    if (options.headless || fresh) && command::names_permissions(&options.client_args) {
        say("permissions: as your arguments after -- say (ralph adds no acceptEdits and no allow rules)");
    }
    carriers::record(paths, &session, carriers::with_client(None))?;
    // Taken up: the person's answer (and notes) go in front of the first
    // iteration's text.
    let answer_note = if options.resume {
        answer_wait::take_note(paths, &session)?
    } else {
        None
    };
    Driver {
        paths,
        client,
        config,
        // Each fresh iteration is a `claude -p` of its own.
        mode: Mode::of(
            options.headless,
            fresh.then_some(Fresh {
                worktrees,
                formula,
                item: None,
            }),
        ),
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
    }
    .drive()
    .0
}

/// The loop being driven: what the run fixed at its start, and what moves
/// from one iteration to the next.
struct Driver<'a> {
    paths: &'a ProjectPaths,
    client: ClientProgram,
    /// The config the iterations run by: the loop's pin, re-read at each.
    config: Config,
    /// How its iterations run.
    mode: Mode,
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

/// How a loop's iterations run: the choice every step of the driver
/// branches on.
enum Mode {
    /// One client session in its terminal UI, whose every stop the hook
    /// judges.
    Interactive,
    /// One `claude -p` session, whose every stop the hook judges.
    Headless,
    /// One `claude -p` process per iteration, each judged by the driver
    /// (`--fresh`, a formula, a queue item).
    Fresh(Fresh),
}

/// What a fresh loop runs with besides its processes.
struct Fresh {
    /// Where each iteration's worktree comes from (`--worktree`, a queue
    /// item's).
    worktrees: Option<worktree::WorktreePlan>,
    /// The formula whose steps the iterations work through.
    formula: Option<formula::Formula>,
    /// The queue item the loop works (all its iterations in the item's
    /// worktree).
    item: Option<ItemWork>,
}

impl Mode {
    /// The mode a run's options and inputs ask for.
    fn of(headless: bool, fresh: Option<Fresh>) -> Mode {
        match (fresh, headless) {
            (Some(fresh), _) => Mode::Fresh(fresh),
            (None, true) => Mode::Headless,
            (None, false) => Mode::Interactive,
        }
    }

    /// The client runs as `claude -p`, with no terminal UI.
    fn headless(&self) -> bool {
        !matches!(self, Mode::Interactive)
    }

    /// Each iteration is a process of its own, judged by the driver.
    fn fresh(&self) -> bool {
        matches!(self, Mode::Fresh(_))
    }

    /// A fresh loop's worktrees' plan.
    fn worktrees(&self) -> Option<&worktree::WorktreePlan> {
        match self {
            Mode::Fresh(fresh) => fresh.worktrees.as_ref(),
            _ => None,
        }
    }

    /// A fresh loop's formula.
    fn formula(&self) -> Option<&formula::Formula> {
        match self {
            Mode::Fresh(fresh) => fresh.formula.as_ref(),
            _ => None,
        }
    }

    /// The queue item a fresh loop works.
    fn item(&self) -> Option<&ItemWork> {
        match self {
            Mode::Fresh(fresh) => fresh.item.as_ref(),
            _ => None,
        }
    }
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
    if let Err(e) = carriers::record(drive.paths, &drive.session, carriers::with_client(None)) {
        return (Err(e), signals);
    }
    let driver = Driver {
        paths: drive.paths,
        client: drive.client,
        config: drive.config,
        mode: Mode::Fresh(Fresh {
            worktrees: Some(drive.worktrees),
            formula: None,
            item: Some(drive.item),
        }),
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
    };
    driver.drive()
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
    /// Runs the client until the loop ends, then tidies `.git` after its
    /// agent (an item's worker does that itself: what it finds decides the
    /// item); the signals are given back.
    fn drive(mut self) -> (CmdResult, Signals) {
        let result = loop {
            match self.iteration() {
                Ok(Next::Done(code)) => break Ok(code),
                Ok(Next::Again) => {}
                Err(e) => break Err(e),
            }
        };
        if self.mode.item().is_none() {
            let record = StateStore::new(self.paths)
                .read()
                .ok()
                .flatten()
                .and_then(|state| state.git_record);
            super::git_tidy::after_loop(self.paths, record.as_ref(), None);
        }
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
                    ralph_core::observe::prompt_text::person_note(&note)
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
        let (current, new_baseline) = match self.mode.worktrees() {
            Some(plan) => match worktree::enter_worktree(
                paths,
                plan,
                self.mode.item().map(|i| i.worktree_name.as_str()),
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
        if self.mode.fresh() {
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
        let charged =
            self.mode.fresh() && result.as_ref().is_some_and(|r| turn_ended(&supervision, r));
        let ending = supervisor::record_client_end(
            paths,
            &self.config,
            &self.session,
            &supervisor::RunEnd {
                supervision: &supervision,
                result: result.as_ref().filter(|_| !charged),
                headless: self.mode.headless(),
                session_cost: self.session_cost,
                last_stop_before,
            },
        )?;
        let waiting = matches!(&ending, Found::Loop(state) if state.status == Status::Waiting || state.answered());
        if waiting && self.mode.headless() {
            return self.await_answer();
        }
        let paused = matches!(&ending, Found::Loop(state) if state.status == Status::Paused);
        if !(paused && self.mode.headless()) {
            return Ok(Next::Done(finish::finish_code(
                paths,
                &ending,
                &supervision,
            )));
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
                    if let Some(item) = self.mode.item() {
                        self.config.supervision.max_cost = item.cost_cap;
                    }
                }
                Err(e) => say(&format!("warning: the pinned config cannot be used ({e}); going on with the one read at start")),
            }
        }
        if let Some(pinned) = pinned.and_then(|p| p.formula.as_ref()) {
            match formula::from_pin(pinned) {
                Ok(pinned) => {
                    if let Mode::Fresh(fresh) = &mut self.mode {
                        fresh.formula = Some(pinned);
                    }
                }
                Err(e) => say(&format!("warning: {e}")),
            }
        }
        let formula_changes: Vec<_> = pinned
            .and_then(|p| p.formula.as_ref())
            .and_then(|f| formula::changes(paths, f))
            .into_iter()
            .collect();
        let step = match (self.mode.formula(), state) {
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
            _ => prepare::current_text(self.paths),
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
        let extra_settings = match (
            current,
            self.mode.worktrees(),
            self.extra_settings.as_deref(),
        ) {
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
            headless: self.mode.headless(),
            session_id: session,
            max_iterations: self.max_iterations,
            prompt,
            client_args: &steps::with_model(step, &self.client_args),
            block_cap: block_cap.as_deref(),
            prompt_file: &prompt_file,
            platform: Platform::current(),
            resume: self.resumed,
            max_budget_usd: iteration_budget(
                max_budget_usd,
                self.mode
                    .fresh()
                    .then_some(self.config.iteration_budget)
                    .flatten(),
            ),
            extra_settings: extra_settings.as_deref(),
            fresh: self.mode.fresh(),
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
        let output = if !self.mode.headless() {
            Output::Terminal
        } else if self.json {
            Output::PassOn
        } else {
            Output::Readable
        };
        let idle_timeout = self
            .config
            .idle_timeout_seconds
            .filter(|_| self.mode.fresh());
        let headless = self.mode.headless();
        let signals = &mut self.signals;
        // A session's client runs for the whole loop and the hook judges its
        // stops: the usage windows it reports are recorded as they come,
        // for the next stop (a fresh iteration's are judged at its end).
        let record_windows: Option<client::LineHook> = (self.mode.headless() && !self.mode.fresh())
            .then(|| {
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
                let _ = carriers::record_start(
                    paths,
                    session,
                    carriers::with_client(Some(running.pid())),
                    new_baseline,
                );
                if self.mode.headless() && !self.mode.fresh() {
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
                if self.mode.fresh() {
                    self.usage_windows =
                        result::usage_windows(&output, ralph_core::time::Timestamp::now());
                }
                Ok((
                    supervision,
                    result::parse_stream(&output, ralph_core::time::Timestamp::now()),
                ))
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
            steps::run_autofix(command, &paths.root, work_root, self.config.sandbox.walls());
        }
        let stop = ralph_core::engine::Stop {
            work_root: current.map(|w| w.path.clone()),
            cut_off,
            task: step.map(|s| s.prompt.clone()),
            extra_verify: step
                .map(|s| s.gates.iter().map(formula::Gate::as_verify).collect())
                .unwrap_or_default(),
            skip_project_verify: step.is_some_and(|s| !s.verify),
            pinned_changes: iteration.formula_changes.clone(),
            not_plans: self
                .mode
                .item()
                .map(|i| i.not_plans.clone())
                .unwrap_or_default(),
            usage_windows: std::mem::take(&mut self.usage_windows),
            ..fresh::stop_of(&self.session, done)
        };
        // A formula's step rules, inside the engine's stop.
        let cost = done.and_then(|d| d.total_cost_usd);
        let (config, formula) = (&self.config, self.mode.formula());
        let mut rules = |draft: &mut ralph_core::events::Draft| match formula {
            Some(formula) => steps::settle(paths, config, draft, formula, number, cost),
            None => steps::StepNext::AsJudged,
        };
        let concluded = match fresh::conclude(
            paths,
            &stop,
            done,
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
        if let (Some(plan), Some(worktree), None) =
            (self.mode.worktrees(), current, self.mode.item())
        {
            worktree::leave_worktree(paths, plan, worktree, number);
        }
        if self.mode.item().is_some() && skipped(concluded.state.as_ref(), number) {
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
                super::first_run::Setup::probe(&self.paths.root).missing_for(self.mode.headless())
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
                if self.mode.fresh() && crashed {
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
        if self.mode.item().is_some() {
            // A worker does not hold its item for a person.
            let found = match StateStore::new(paths).read()? {
                Some(state) => Found::Loop(Box::new(state)),
                None => Found::Gone,
            };
            return Ok(Next::Done(finish::announce(paths, &found)));
        }
        let limit = self.wait_for_answer.map(std::time::Duration::from_secs);
        match answer_wait::wait_for_answer(paths, &self.session, limit, &mut self.signals)? {
            AnswerWait::Answered => {}
            AnswerWait::Signal(signal) => return Ok(Next::Done(signal.exit_code())),
            AnswerWait::Over(found) => return Ok(Next::Done(finish::announce(paths, &found))),
        }
        let fresh = self.mode.fresh();
        let mut note = None;
        let mut next_session = None;
        let changed = ralph_core::transaction::change(
            paths,
            ralph_core::transaction::Whose::Session(&self.session),
            |draft| {
                if draft.state().is_some_and(|s| s.status == Status::Running) {
                    note = answer_wait::take_note_in(draft);
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
