//! The driver of `ralph-ctl run`, what the launchers run: with what
//! [`prepare`] read and checked (the inputs, the client's settings), starts
//! a loop (or, with `--resume`, takes up the last one), then drives it one
//! [`Driver::iteration`] at a time: the iteration's text → build the client
//! command → run and watch it → judge it (fresh) or read its end →
//! (headless, paused: wait, resume, run again) → `finish`. One run of the
//! client is [`client_run`]'s; the waits between two runs (a pause, a
//! question's answer) are [`waits`]'. Every change to the loop goes
//! through `ralph_core::transaction`.

use std::ffi::OsString;

use ralph_core::engine::RealWorld;
use ralph_core::exit_codes;
use ralph_core::judge::config::Config;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::Found;
use ralph_core::units::Usd;

use super::answer_wait::{self, AnswerWait};
use super::client::{self, Supervision};
use super::command::{self, ClientProgram};
use super::os_signals::{SignalSource, Signals};
use super::prepare::{self, Inputs, Prepared, Ready, RunOptions};
use super::result;
use super::run_env::RunEnv;
use super::{carriers, finish, fresh, say, steps, supervisor, worktree, worktree_env};
use crate::error::CmdResult;
use crate::error::CtlError;
use crate::formula;

mod client_run;
mod waits;

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
        say(
            "permissions: as your arguments after -- say (ralph adds no acceptEdits and no allow rules)",
        );
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
        env: options.env.clone(),
        // A new session per fresh iteration: each process reports its own cost.
        session_cost: version.is_some_and(super::command::ClientVersion::reports_session_cost)
            && !fresh,
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
    /// The run's settings from its command line, over the environment:
    /// every config read of the driver, and the client's environment.
    env: RunEnv,
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
    /// The run's settings from its command line, over the environment.
    pub(crate) env: RunEnv,
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
        env: drive.env,
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

/// How the reason a loop ended with begins when its client refused to
/// start on its configuration ([`refused_to_start`]).
const REFUSED_TO_START: &str = "Claude Code refused to start";

/// Whether `state`'s loop ended because its client refused to start on
/// its configuration: a loop of the same settings would too.
pub(crate) fn refused_to_start(state: &LoopState) -> bool {
    state.status == Status::Failed
        && state
            .ended_because
            .as_deref()
            .is_some_and(|why| why.starts_with(REFUSED_TO_START))
}

/// Why the idle watch ended the client (`None`: it did not, or a signal
/// did first: ended by the person).
fn idle_cut_off(supervision: &Supervision) -> Option<String> {
    supervision
        .idle_cut_off
        .filter(|_| supervision.signal.is_none())
        .map(|t| {
            format!(
                "Claude Code showed no sign of work for {} s (idleTimeoutSeconds) and was ended",
                t.as_secs()
            )
        })
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
        let (current, new_worktree) = match self.mode.worktrees() {
            Some(plan) => match worktree_env::enter_worktree(
                paths,
                plan,
                self.mode.item().map(|i| i.worktree_name.as_str()),
                &self.config,
            ) {
                Ok((worktree, new)) => (Some(worktree), new),
                Err(worktree::NotEntered::Failed(e)) => {
                    say(&e.to_string());
                    let cause = format!("the iteration's worktree could not be made ({e})");
                    return self.end(&cause, exit_codes::ERROR);
                }
                // Said with the loop's ending (and the item's).
                Err(worktree::NotEntered::Unfit(why)) => return self.fail(&why.to_string()),
            },
            None => (None, None),
        };
        let iteration_started = std::time::Instant::now();
        let run = match self.run_client(
            &prompt,
            iteration.step.as_ref(),
            spent,
            current.as_ref(),
            new_worktree,
        ) {
            Ok(run) => run,
            Err((cause, code)) => return self.end(&cause, code),
        };
        let (supervision, result) = run;
        // A client that would not start on its configuration starts no
        // better on a retry: the loop stops now, with its words and code.
        if supervision.signal.is_none()
            && let Some(words) = result
                .as_ref()
                .and_then(result::ClientResult::refused_to_start)
        {
            return self.refused_to_start(&words, supervision.exit.code(), current.as_ref());
        }
        if self.mode.fresh()
            && let Some(next) = self.conclude(
                &supervision,
                result.as_ref(),
                &iteration,
                current.as_ref(),
                iteration_started,
            )?
        {
            return Ok(next);
        }
        self.record_run_end(
            &supervision,
            result.as_ref(),
            current.as_ref(),
            iteration_started,
            last_stop_before,
        )
    }

    /// The end of a run the loop did not conclude (an interactive run, a
    /// fresh one that did not end its turn): recorded as any other's, then
    /// the loop's exit code, an answer waited for, or a pause waited out.
    fn record_run_end(
        &mut self,
        supervision: &Supervision,
        result: Option<&result::ClientResult>,
        current: Option<&worktree::Worktree>,
        iteration_started: std::time::Instant,
        last_stop_before: Option<ralph_core::time::Timestamp>,
    ) -> Result<Next, CtlError> {
        let paths = self.paths;
        if let Some(worktree) = current {
            say(&format!(
                "worktree {} left as it is (branch {}): the iteration did not end its turn",
                worktree.shown(&paths.root),
                worktree.branch
            ));
        }
        let setup_missing = self.name_a_first_run_not_done(supervision, result, iteration_started);
        // A fresh iteration's cost was added when it was concluded.
        let charged = self.mode.fresh() && result.is_some_and(|r| turn_ended(supervision, r));
        let ending = supervisor::record_client_end(
            paths,
            &self.config,
            &self.session,
            &supervisor::RunEnd {
                supervision,
                result: result.filter(|_| !charged),
                headless: self.mode.headless(),
                session_cost: self.session_cost,
                last_stop_before,
                setup_missing,
            },
        )?;
        let waiting = matches!(&ending, Found::Loop(state) if state.status == Status::Waiting || state.answered());
        if waiting && self.mode.headless() {
            return self.await_answer();
        }
        let paused = matches!(&ending, Found::Loop(state) if state.status == Status::Paused);
        if !(paused && self.mode.headless()) {
            return Ok(Next::Done(finish::finish_code(paths, &ending, supervision)));
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
            match pin.config(paths, &self.env) {
                Ok(pinned_config) => {
                    self.config = pinned_config;
                    if let Some(item) = self.mode.item() {
                        self.config.supervision.max_cost = item.cost_cap;
                    }
                }
                Err(e) => say(&format!(
                    "warning: the pinned config cannot be used ({e}); going on with the one read at start"
                )),
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
            _ => prepare::current_text(self.paths, &self.env),
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
        let cut_off = idle_cut_off(supervision);
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
        let stop = self.stop_of(iteration, current, cut_off, done);
        // A formula's step rules, inside the engine's stop.
        let cost = done.and_then(|d| d.total_cost_usd);
        let (config, formula) = (&self.config, self.mode.formula());
        let mut rules = |draft: &mut ralph_core::events::Draft| match formula {
            Some(formula) => steps::settle(paths, config, draft, formula, number, cost),
            None => steps::StepNext::AsJudged,
        };
        let concluded = match fresh::conclude(
            fresh::Judging {
                paths,
                env: &self.env,
                world: &RealWorld,
            },
            &stop,
            done,
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
            return self.end_skipped_item(number).map(Some);
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

    /// What the engine's stop judges the iteration by: the run's end, its
    /// worktree, the idle watch's cut-off, its formula step's task and gates,
    /// the formula's changes from its pin, the item's plans that are not
    /// its own and the usage windows the client reported.
    fn stop_of(
        &mut self,
        iteration: &Iteration,
        current: Option<&worktree::Worktree>,
        cut_off: Option<String>,
        done: Option<&result::ClientResult>,
    ) -> ralph_core::engine::Stop {
        let step = iteration.step.as_ref();
        ralph_core::engine::Stop {
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
        }
    }

    /// An item's agent skipped the item (`RALPH_OUTCOME skip`) in iteration
    /// `number`: its loop, still running, ends cancelled, and is announced.
    fn end_skipped_item(&self, number: u32) -> Result<Next, CtlError> {
        let why = "the agent skipped the item (RALPH_OUTCOME skip)";
        say(&format!("iteration {number}: {why}"));
        let changed = ralph_core::transaction::change(
            self.paths,
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
        Ok(Next::Done(finish::announce(
            self.paths,
            &super::told(changed),
        )))
    }

    /// A client that says it has no login (its result's words, "Not
    /// logged in · Please run /login" from 2.1.330, "Invalid API key ·
    /// Please run /login" from 2.0.77) starts no better on a `--resume`:
    /// that is the loop's end, named with the fix. A client that failed at
    /// once without saying why may be one whose first run or login is
    /// missing: the hint is said, and the loop ends as any other
    /// interrupted run. `None` when the client did not say it.
    fn name_a_first_run_not_done(
        &self,
        supervision: &Supervision,
        result: Option<&result::ClientResult>,
        iteration_started: std::time::Instant,
    ) -> Option<String> {
        if supervision.signal.is_some() {
            return None;
        }
        if let Some(words) = result.and_then(result::ClientResult::not_logged_in) {
            return Some(format!(
                "Claude Code is not logged in (it said \"{words}\"); first run `claude` and log \
                 in (or `claude setup-token`), or set ANTHROPIC_API_KEY"
            ));
        }
        if supervision.exit == client::ClientExit::Code(0)
            || result.is_some()
            || iteration_started.elapsed() >= FIRST_RUN_WINDOW
        {
            return None;
        }
        for missing in
            super::first_run::Setup::probe(&self.paths.root, None).missing_for(self.mode.headless())
        {
            say(&format!(
                "Claude Code exited at once: {}; {}",
                missing.what, missing.fix
            ));
        }
        None
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

    /// Ends the loop `failed` because its client refused to start on its
    /// configuration (`words`, the client's own, and its exit `code`),
    /// exiting with ralph's code for a failed loop: no backoff or resume
    /// would change it.
    fn refused_to_start(
        &self,
        words: &str,
        code: i32,
        current: Option<&worktree::Worktree>,
    ) -> Result<Next, CtlError> {
        let why =
            format!("{REFUSED_TO_START} (its exit code {code}), before its first turn: {words}");
        say(&why);
        if let Some(worktree) = current {
            say(&format!(
                "worktree {} left as it is (branch {})",
                worktree.shown(&self.paths.root),
                worktree.branch
            ));
        }
        let changed = ralph_core::transaction::change(
            self.paths,
            ralph_core::transaction::Whose::Session(&self.session),
            |draft| {
                if draft
                    .state()
                    .is_some_and(|s| matches!(s.status, Status::Running | Status::Paused))
                {
                    draft.apply(ralph_core::events::Event::Ended {
                        status: Status::Failed,
                        why: why.clone(),
                        at: None,
                    });
                }
                Ok::<_, CtlError>(())
            },
        )?;
        // The loop's ending said as any other's; the exit code ralph's own
        // for a failed loop (the client's codes mean other things in
        // ralph's table, which launchers act on): the client's is in `why`.
        let _ = finish::announce(self.paths, &super::told(changed));
        Ok(Next::Done(exit_codes::FAILED))
    }

    /// Ends the loop `failed` before its client starts, for a reason no
    /// iteration can change (`why`: its worktree cannot be worked).
    fn fail(&self, why: &str) -> Result<Next, CtlError> {
        let changed = ralph_core::transaction::change(
            self.paths,
            ralph_core::transaction::Whose::Session(&self.session),
            |draft| {
                if draft.state().is_some_and(|s| s.status == Status::Running) {
                    draft.apply(ralph_core::events::Event::Ended {
                        status: Status::Failed,
                        why: why.to_string(),
                        at: None,
                    });
                }
                Ok::<_, CtlError>(())
            },
        )?;
        Ok(Next::Done(finish::announce(
            self.paths,
            &super::told(changed),
        )))
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
