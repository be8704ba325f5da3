//! One stop of a loop, end to end: the sequence the Stop hook runs, and that
//! every other driver of a loop (a supervisor, a fresh-context driver) runs
//! the same way.
//!
//! ```text
//! state exists? → snapshot, ownership → the loop's pinned config → observe (World)
//!   → judge the claim once → verification commands (World, outside the lock)
//!   → lock → decide → read the prompt (before committing)
//!   → config files ≠ pin? (configDrift) → write → deliver
//! ```
//!
//! Everything outside the process is behind [`World`], so the sequence is
//! tested with a fake world and a real store. The answer is delivered under
//! the lock, after the new state is written; if it cannot be delivered, the
//! previous state is written back, so the state never records a block the
//! agent did not receive.

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;

use crate::events::{Draft, Effect, Event, Transition};
use crate::judge::completion::GateResult;
use crate::judge::config::{Config, ConfigError, EnvSource, FileLayers};
use crate::judge::decision::{self, MessageSource, Observation, PassReason, Verdict};
use crate::judge::state::{LoopState, PauseKind, PausedBecause, Status, TranscriptCursor};
use crate::observe::own_git;
use crate::observe::plan::{self, PlanReport};
use crate::observe::process::walls::{Walls, WallsWanted};
use crate::observe::progress;
use crate::observe::prompt_text::{self, PromptError};
use crate::observe::protected::{self, ProtectedSnapshot};
use crate::observe::resolved::{self, ResolvedChecks};
use crate::observe::transcript::{self, IterationTail, TranscriptError};
use crate::observe::usage::{self, UsageReading};
use crate::observe::verify::{self, VerifyCommand, VerifyResult};
use crate::paths::ProjectPaths;
use crate::persist::log::{LogEntry, LogEvent};
use crate::persist::store::{Reread, StateStore, StoreError};
use crate::pin::{self, Pinned};
use crate::room::RoomWanted;
use crate::time::Timestamp;
use crate::transaction::{self, Whose};

/// The plan files a stop's claim is gated by: the config's, less the
/// stop's `not_plans` (compared without a leading `./`).
fn plan_files(config: &Config, stop: &Stop) -> Vec<String> {
    let plain = |p: &str| p.trim_start_matches("./").to_string();
    let not: Vec<String> = stop.not_plans.iter().map(|p| plain(p)).collect();
    config
        .completion
        .plan_files
        .iter()
        .filter(|p| !not.contains(&plain(p)))
        .cloned()
        .collect()
}

/// What one stop carries from the client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stop {
    /// The stopping session.
    pub session_id: Option<String>,
    /// The client's `stop_hook_active` (recorded, never obeyed).
    pub stop_hook_active: bool,
    /// The final message, when the client sends it (2.1 and later).
    pub last_assistant_message: Option<String>,
    /// The session's transcript.
    pub transcript_path: Option<PathBuf>,
    /// The folder the iteration worked in, when it is not the project's
    /// root (a fresh iteration in a git worktree): progress, the TDD
    /// scenario, plan files and the verification commands are read and run
    /// there; the state, config and prompt stay the project's.
    pub work_root: Option<PathBuf>,
    /// Set when the driver ended the client before it ended its turn (the
    /// idle timeout), saying why: whatever its transcript last shows is no
    /// answer, so no claim or marker is read, and the iteration counts as
    /// an error.
    pub cut_off: Option<String>,
    /// The task fed back when the loop goes on, in place of the prompt
    /// file's (a formula step's prompt).
    pub task: Option<String>,
    /// Checks a claim must pass besides the config's `verify` (a formula
    /// step's gates), run and judged the same way.
    pub extra_verify: Vec<VerifyCommand>,
    /// Set when the config's `verify` does not gate this stop's claim (a
    /// formula step with `verify: false`, such as a plan written before the
    /// tests can pass): only `extra_verify` runs.
    pub skip_project_verify: bool,
    /// The calls the client refused for lack of permission, from its own
    /// account of the run (the `-p` result's `permission_denials`): when
    /// set, it is the authority on the iteration's refusals, and the
    /// transcript only adds the refusal texts.
    pub permission_denials: Option<Vec<crate::judge::errors::Refusal>>,
    /// Pinned files besides the config files that the driver found changed
    /// (a formula run's formula), recorded with the config's drift.
    pub pinned_changes: Vec<pin::Changed>,
    /// Plan files the plan gate does not read for this stop (a queue run's
    /// plan, as its source names it: its other unchecked items are other
    /// workers' work, not this item's).
    pub not_plans: Vec<String>,
    /// Set when the driver that runs the client settles the loop's ending
    /// itself once the client has exited (a headless run or a fresh
    /// iteration): it charges the client's cost first, then runs `notify`,
    /// so that the summary carries what the client spent. The stop leaves
    /// the notification to it.
    pub driver_settles: bool,
    /// The plan's usage windows the client reported during the iteration
    /// (read from a headless run's output by its driver; a hook has none).
    pub usage_windows: std::collections::BTreeMap<String, crate::judge::state::WindowUse>,
}

/// Everything a stop reads or runs outside the process: the transcript, the
/// project's files, the verification commands, the clock.
pub trait World {
    /// The iteration that ended, from the transcript, waiting up to `wait`
    /// for the client to write it (see [`transcript::wait_for_stop`]; with
    /// `expected`, the stop's own final message). Returns the reading and
    /// how long was waited.
    fn iteration_tail(
        &self,
        transcript: &Path,
        wait: Duration,
        expected: Option<&str>,
    ) -> Result<(IterationTail, Duration), TranscriptError>;
    /// Whether the project changed since `previous` (the breaker's
    /// baseline), from the iteration's file edits or a check of the project
    /// (see [`progress::read`]).
    fn progress(
        &self,
        root: &Path,
        previous: Option<&progress::Baseline>,
        edits: &progress::ToolEdits,
    ) -> progress::Reading;
    /// The TDD scenario in progress.
    fn tdd_scenario(&self, root: &Path) -> Option<String>;
    /// The plan files' unchecked items.
    fn plan(&self, root: &Path, files: &[String]) -> PlanReport;
    /// Runs the verification commands, in order.
    /// Runs a claim's checks from `root` (the project `project`, or a
    /// worktree of it), walled as `walls` says (see [`Walls`]): they run
    /// the agent's code.
    fn verify(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
    ) -> Vec<VerifyResult>;
    /// Runs a claim's checks as [`World::verify`], in the clean room when
    /// `room` says so and `root` is the project itself (see
    /// [`crate::room`]): a copy of the claimed tree with an environment
    /// ralph made, outside the agent's reach.
    fn verify_claim(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
        room: Option<&RoomWanted>,
    ) -> Vec<VerifyResult> {
        let _ = room;
        self.verify(project, root, commands, walls)
    }
    /// The protected files changed since `before` was taken (`None`: the
    /// project could not be listed in time).
    fn protected_changes(&self, root: &Path, before: &ProtectedSnapshot) -> Option<Vec<String>> {
        protected::changes(root, before)
    }
    /// What the verify `commands` resolve to differently from `before`,
    /// the loop's start, run from `root` (a worktree of `project`, or it;
    /// see [`resolved::changes`]).
    fn check_changes(
        &self,
        root: &Path,
        project: &Path,
        before: &ResolvedChecks,
        commands: &[VerifyCommand],
    ) -> Vec<String> {
        resolved::changes(root, project, before, commands)
    }
    /// What the failed ones of a worktree's check `results` reached of the
    /// main checkout `project`, which they cannot see (see
    /// [`crate::observe::main_checkout`]): the editable installs of the
    /// virtual environments on the check's `PATH`, a path of the main
    /// checkout their output names. Empty for a check of the project
    /// itself, or one that passed.
    fn main_checkout_reach(
        &self,
        project: &Path,
        root: &Path,
        results: &[VerifyResult],
    ) -> Vec<String> {
        if project == root || results.iter().all(VerifyResult::passed) {
            return Vec::new();
        }
        let path = Walls::around(project, root, WallsWanted::Off)
            .path_for_check(&std::env::var("PATH").unwrap_or_default());
        let output: Vec<&str> = results
            .iter()
            .filter(|r| !r.passed())
            .map(|r| r.output_tail.as_str())
            .collect();
        crate::observe::main_checkout::reaches(project, root, &path, &output.join("\n"))
    }
    /// The files in the repository of `project` that send git elsewhere and
    /// differ from `before`, the loop's start, each in words (see
    /// [`own_git::record::changes`]).
    fn git_changes(&self, project: &Path, before: &own_git::record::GitRecord) -> Vec<String> {
        own_git::record::changes(project, before)
            .iter()
            .map(own_git::record::Changed::describe)
            .collect()
    }
    /// The time to record, RFC 3339.
    fn now(&self) -> Timestamp;
    /// PROMPT.md.
    fn prompt(&self, path: &Path) -> Result<String, PromptError>;
    /// guardrails.md, when there is one.
    fn guardrails(&self, path: &Path) -> Result<Option<String>, PromptError>;
    /// The model requests, tokens and API errors the transcript gained past
    /// `cursor` (see [`usage::read_new_since`]; requests before `since`, the
    /// loop's start, are not the loop's); times in seconds since the epoch.
    fn usage(
        &self,
        transcript: &Path,
        cursor: Option<&TranscriptCursor>,
        now: u64,
        since: u64,
    ) -> std::io::Result<UsageReading>;
}

/// The walls every check of the agent's work runs inside (see [`Walls`]),
/// for a check of `root` (the project `project`, or a worktree of it):
/// ralph's key folder hidden too, so that the agent's code cannot read the
/// key that signs ralph's records.
pub fn check_walls(project: &Path, root: &Path, wanted: WallsWanted) -> Walls {
    let walls = Walls::around(project, root, wanted);
    match crate::persist::mac::key_dir() {
        Some(keys) => walls.hide(keys),
        None => walls,
    }
}

/// The real world: the filesystem, git, `sh -c`, the system clock.
pub struct RealWorld;

impl World for RealWorld {
    fn iteration_tail(
        &self,
        transcript: &Path,
        wait: Duration,
        expected: Option<&str>,
    ) -> Result<(IterationTail, Duration), TranscriptError> {
        transcript::wait_for_stop(transcript, wait, expected)
    }
    fn progress(
        &self,
        root: &Path,
        previous: Option<&progress::Baseline>,
        edits: &progress::ToolEdits,
    ) -> progress::Reading {
        progress::read(root, previous, edits)
    }
    fn tdd_scenario(&self, root: &Path) -> Option<String> {
        progress::tdd_scenario(root)
    }
    fn plan(&self, root: &Path, files: &[String]) -> PlanReport {
        plan::read(root, files)
    }
    fn verify(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
    ) -> Vec<VerifyResult> {
        verify::run_all(root, commands, &check_walls(project, root, walls))
    }
    fn verify_claim(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
        room: Option<&RoomWanted>,
    ) -> Vec<VerifyResult> {
        match room {
            Some(room) if project == root => {
                crate::room::run_checks(project, room, commands, walls)
            }
            _ => self.verify(project, root, commands, walls),
        }
    }
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn prompt(&self, path: &Path) -> Result<String, PromptError> {
        prompt_text::read_prompt(path)
    }
    fn guardrails(&self, path: &Path) -> Result<Option<String>, PromptError> {
        prompt_text::read_guardrails(path)
    }
    fn usage(
        &self,
        transcript: &Path,
        cursor: Option<&TranscriptCursor>,
        now: u64,
        since: u64,
    ) -> std::io::Result<UsageReading> {
        usage::read_new_since(transcript, cursor, now, since)
    }
}

/// What the stop answers the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Let the session stop.
    Allow,
    /// Let the session stop, telling the person how the loop ended (or
    /// paused): the client shows `system_message`.
    End {
        /// The notice shown to the person.
        system_message: String,
    },
    /// Keep the agent working: `reason` is fed back to it.
    Block {
        /// The text fed back to the agent.
        reason: String,
        /// The notice shown to the person.
        system_message: String,
    },
}

/// The answer, and what the person should read on stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopReport {
    /// What was answered.
    pub answer: Answer,
    /// Why nothing was done, or warnings, one line each.
    pub notes: Vec<String>,
    /// The driver's `settle` ran, inside the stop's transaction.
    pub settled: bool,
}

impl StopReport {
    fn allow(note: Option<String>) -> Self {
        StopReport {
            answer: Answer::Allow,
            notes: note.into_iter().collect(),
            settled: false,
        }
    }
}

/// Everything that makes a stop give up (and the client's stop go through).
#[derive(Debug, Error)]
pub enum EngineError {
    /// The configuration is invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The state file is unusable.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The transcript cannot be read.
    #[error("{0}")]
    Transcript(#[from] TranscriptError),
    /// The prompt or guardrails file is unusable.
    #[error("{0}")]
    Prompt(#[from] PromptError),
    /// The answer could not be delivered; the state was left as it was.
    #[error("cannot write the answer: {0}; the loop's state was left as it was")]
    Deliver(io::Error),
}

/// Runs one stop of the project at `paths`: observes through `world`,
/// decides, and under the state lock writes the new state and hands the
/// answer to `deliver`.
pub fn run_stop(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    stop: &Stop,
    world: &dyn World,
    deliver: &mut dyn FnMut(&Answer) -> io::Result<()>,
) -> Result<StopReport, EngineError> {
    run_stop_settled(paths, env, stop, world, &mut |_, _| {}, deliver)
}

/// [`run_stop`], with `settle` given the decided state and the answer
/// under the lock before anything is written, to apply a driver's own
/// events in the same transaction: a formula's step that passed takes the
/// loop on to the next step (no `complete` is ever written, notified or
/// seen in between), the run's cost is charged, the loop handed over to
/// the next iteration's session. It runs whenever the stop reached its
/// lock on a loop of its session (`StopReport::settled`).
pub fn run_stop_settled(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    stop: &Stop,
    world: &dyn World,
    settle: &mut dyn FnMut(&mut Draft, &Answer),
    deliver: &mut dyn FnMut(&Answer) -> io::Result<()>,
) -> Result<StopReport, EngineError> {
    let store = StateStore::new(paths);
    if !store.exists()? {
        return Ok(StopReport::allow(Some(format!(
            "RALPH_ACTIVE=1 but no loop was started in {} (start one with .claude/ralph/ralph-audit.sh or ralph-ctl start)",
            paths.root.display()
        ))));
    }
    // Cheap ownership check first, so another session's stop reads nothing more.
    let snapshot = store.snapshot()?;
    let owned = match decision::owned_loop(snapshot.state.as_ref(), stop.session_id.as_deref()) {
        Ok(state) => state,
        Err(reason) => {
            let note = (reason == PassReason::NoSessionId).then(|| {
                "the hook input has no `session_id`, so ralph cannot tell whether this session owns the loop; \
                 letting this stop through"
                    .to_string()
            });
            return Ok(StopReport::allow(note));
        }
    };
    let (config, first_pin) = stop_config(paths, env, stop, world, owned)?;
    let mut notes = Vec::new();
    let mut observed = observe(paths, &config, stop, world, owned, &mut notes)?;
    let claim = decision::judge_claim(&config, owned, &observed);
    check_claim(paths, &config, stop, world, owned, &claim, &mut observed);

    let lock = store.lock(false)?;
    let locked = lock.read_again(&snapshot)?;
    let Ok(state) = decision::owned_loop(locked.state(&snapshot), stop.session_id.as_deref())
    else {
        // The loop ended or changed hands while this stop was observed.
        return Ok(StopReport {
            answer: Answer::Allow,
            notes,
            settled: false,
        });
    };
    if state.breaker.progress != owned.breaker.progress {
        // The reading compared with a baseline that is no longer the loop's.
        observed.progress = progress::Reading::default();
    }
    if state.transcript != owned.transcript {
        // Another stop counted part of it meanwhile: count from where it left off.
        let counted = config.supervision.max_calls_per_hour.is_some();
        observed.usage = read_usage(world, stop, state, counted, &mut notes);
    }
    // Judged once; again only if the state moved under the lock meanwhile.
    let claim = if matches!(locked, Reread::Unchanged) || Some(state) == snapshot.state.as_ref() {
        claim
    } else {
        decision::judge_claim(&config, state, &observed)
    };
    let now = world.now();
    let mut outcome = decision::decide_judged(&config, state, &observed, &claim, now);
    let answer = answer_for(&outcome, paths, &config, stop, world, owned, state)?;
    if let (Answer::Block { .. }, Some(new_state)) = (&answer, outcome.new_state.as_mut()) {
        new_state.hint = None;
        // The answer to the agent's question went with the notes.
        if new_state.status == Status::Running {
            new_state.question = None;
        }
    }
    let drift_line = outcome
        .new_state
        .as_mut()
        .and_then(|new_state| record_pin_drift(paths, env, stop, new_state, first_pin, now));
    // The driver's events, in this transaction.
    let decided = outcome.new_state.clone();
    let mut draft = Draft::new(Some(decided.clone().unwrap_or_else(|| state.clone())), now);
    settle(&mut draft, &answer);
    let Transition {
        state: settled,
        effects: driver_effects,
    } = draft.finish();
    if decided.is_some() || settled.as_ref() != Some(state) {
        outcome.new_state = settled;
    }
    // One transaction: an ending or a pause is told (`notify`) once,
    // marked in this write (a driver that settles the loop after the stop
    // tells it itself). The answer is delivered between the write and the
    // rest.
    let transition = stop_transition(
        state,
        outcome.new_state,
        drift_line,
        driver_effects,
        &mut notes,
        now,
    );
    let written = match transition {
        Some(transition) => Some(transaction::write(
            &lock,
            paths,
            Some(state),
            transition,
            now,
            !stop.driver_settles,
        )?),
        None => None,
    };
    if let Err(e) = deliver(&answer) {
        // An ending stands without its notice: the session stops either way.
        if !matches!(answer, Answer::End { .. }) {
            if let Some(written) = written {
                written.undo(state)?;
            }
            return Err(EngineError::Deliver(e));
        }
        notes.push(format!("cannot show how the loop ended: {e}"));
    }
    if let Some(written) = written {
        notes.extend(written.finish());
    }
    Ok(StopReport {
        answer,
        notes,
        settled: true,
    })
}

/// What differs from the loop's pin now, recorded in `new_state` (a loop
/// from before pinning pinned to `first_pin`); the line to log, once per
/// content.
fn record_pin_drift(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    stop: &Stop,
    new_state: &mut LoopState,
    first_pin: Option<Pinned>,
    now: Timestamp,
) -> Option<String> {
    if new_state.pinned.is_none() {
        new_state.pinned = first_pin;
    }
    let pin = new_state.pinned.clone()?;
    let mut changes = pin::config_changes(paths, env, &pin);
    changes.extend(stop.pinned_changes.iter().cloned());
    pin::record_drift(new_state, changes, now)
}

/// The stop's write: the decided state (`decided`, `None`: unchanged)
/// with its audit line, the pin's drift (also said in `notes`) and the
/// driver's lines; `None` when there is nothing to write.
fn stop_transition(
    state: &LoopState,
    decided: Option<LoopState>,
    drift_line: Option<String>,
    driver_effects: Vec<Effect>,
    notes: &mut Vec<String>,
    now: Timestamp,
) -> Option<Transition> {
    match decided {
        Some(new_state) => {
            let mut effects = vec![Effect::Log(Box::new(LogEntry::of_stop(
                state, &new_state, now,
            )))];
            if let Some(line) = drift_line {
                notes.push(format!("warning: {line}"));
                let entry = LogEntry::about(&new_state, LogEvent::ConfigChanged, now, line);
                effects.push(Effect::Log(Box::new(entry)));
            }
            effects.extend(driver_effects);
            Some(Transition {
                state: Some(new_state),
                effects,
            })
        }
        None if !driver_effects.is_empty() => Some(Transition {
            state: Some(state.clone()),
            effects: driver_effects,
        }),
        None => None,
    }
}

/// The config a stop is judged by: the loop's pin (a loop from before
/// pinning is pinned to what this stop reads, returned to be recorded),
/// with a driver's checks instead of or beside the project's, and the
/// loop's own completion signal.
fn stop_config(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    stop: &Stop,
    world: &dyn World,
    owned: &LoopState,
) -> Result<(Config, Option<Pinned>), EngineError> {
    // The pin decides, never config.json as it is now (the agent can
    // write it); a loop from before pinning is pinned to what this stop reads.
    let (mut config, first_pin) = if let Some(pin) = &owned.pinned {
        (pin.config(paths, env)?, None)
    } else {
        let layers = FileLayers::read(paths, env)?;
        let config = Config::from_layers(paths, env, &layers)?;
        (config, Some(Pinned::of(&layers, world.now())))
    };
    if stop.skip_project_verify {
        config.completion.verify.clear();
        config.completion.verify_off_by_formula = true;
    }
    config
        .completion
        .verify
        .extend(stop.extra_verify.iter().cloned());
    // A loop started with its own completion signal (/ralph-loop
    // --completion-promise) is judged by it.
    if let Some(signal) = &owned.completion_signal {
        config.completion_signal = signal.clone();
    }
    Ok((config, first_pin))
}

/// A claim's checks, outside the lock: the verification commands (only
/// ever the config's, which may take minutes) and the protected files
/// compared with the loop's start, and what each command resolves to
/// (the check of the start, not one the agent changed). (Whether the hook's timeout leaves room
/// for them is said once, when an in-session loop starts: `ralph-ctl`'s
/// `open_loop`; a fresh loop's checks are the driver's.)
fn check_claim(
    paths: &ProjectPaths,
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    owned: &LoopState,
    claim: &decision::ClaimJudgement,
    observed: &mut Observation,
) {
    // `ralph-ctl check` (run by the agent too, whose sandbox never grants
    // the clean room) checks in place when the room cannot be reached; a
    // claim's check never does.
    let rehearsal = claim.assessment.basis == REHEARSAL_BASIS;
    let commands = &config.completion.verify;
    // The check must be the one of the loop's start: what each command
    // resolves to is read before it runs.
    if let (true, Some(before)) = (claim.assessment.claimed, &owned.check_resolution) {
        observed.check_changes =
            Some(world.check_changes(work_root(paths, stop), &paths.root, before, commands));
    }
    if claim.assessment.claimed && !commands.is_empty() {
        let results = world.verify_claim(
            &paths.root,
            work_root(paths, stop),
            commands,
            config.sandbox.walls(),
            RoomWanted::of(config)
                .map(|room| RoomWanted {
                    in_place_if_unreachable: rehearsal,
                    ..room
                })
                .as_ref(),
        );
        observed.main_checkout_reach =
            world.main_checkout_reach(&paths.root, work_root(paths, stop), &results);
        observed.verification = Some(results);
    }
    // ... and git's own files that send it elsewhere, likewise (a queue
    // item's are judged by its worker before it lands: a change keeps it
    // from landing, for review).
    let item = paths.is_item();
    if let (true, Some(before), false) = (claim.assessment.claimed, &owned.git_record, item) {
        observed.git_changes = Some(world.git_changes(&paths.root, before));
    }
    // A claim is compared with the protected files at the loop's start.
    if let (true, Some(before)) = (claim.assessment.claimed, &owned.protected_files) {
        observed.protected_changes = Some(
            world
                .protected_changes(work_root(paths, stop), before)
                .unwrap_or_else(|| {
                    vec![format!(
                        "(the files under {} could not be listed in time)",
                        before.patterns.join(", ")
                    )]
                }),
        );
    }
}

/// What a claim of done made now would meet: what `ralph-ctl check` shows
/// the agent (and the person) before anyone claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rehearsal {
    /// The checks a claim is verified by: the loop's pinned verify
    /// commands (with no loop, the config files' as they are), a formula
    /// step's gates.
    pub checks: Vec<VerifyCommand>,
    /// What each check did, run inside the walls a stop runs it in.
    pub verification: Vec<VerifyResult>,
    /// Each completion gate's result, as the stop would judge it.
    pub gates: Vec<GateResult>,
    /// The test counts of the loop's start, one entry per check that
    /// counted tests then.
    pub baseline: Vec<crate::observe::test_counts::CommandCounts>,
    /// The one line for the person when the checks were wanted walled and
    /// could not be (see [`Walls::notice`]).
    pub walls_notice: Option<String>,
    /// What a stop would record of the claim were it accepted: what was
    /// checked, and why nothing was verified when no check ran (none
    /// configured, or a formula step turned verification off).
    pub accepted_summary: String,
}

impl Rehearsal {
    /// Whether the claim would pass every gate judged here.
    pub fn accepted(&self) -> bool {
        self.gates.iter().all(|g| g.passed)
    }
}

/// The basis of a rehearsed claim: no message made it.
const REHEARSAL_BASIS: &str = "`ralph-ctl check`";

/// Judges a claim of done as the next stop of `state`'s loop would, with
/// the same code, and writes nothing: the config the stop would use (the
/// loop's pin, `stop`'s formula gates; with no loop, the config files as
/// they are now), the checks run from `stop`'s work root inside the walls
/// the stop runs them in, compared with the loop's start (test counts,
/// protected files, what each check resolves to), and the plan. What a
/// stop reads of its own iteration is not judged here: the final message
/// (its signal, its status block) and the calls the client refused.
pub fn rehearse_claim(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    state: Option<&LoopState>,
    stop: &Stop,
    world: &dyn World,
) -> Result<Rehearsal, EngineError> {
    let none_yet;
    let owned = if let Some(state) = state {
        state
    } else {
        // No loop: one that starts now, with nothing recorded of a start.
        none_yet = LoopState::new(String::new(), 0, world.now());
        &none_yet
    };
    let (config, _) = stop_config(paths, env, stop, world, owned)?;
    let mut observed = Observation::of_session(None, false);
    observed.plan = world.plan(work_root(paths, stop), &plan_files(&config, stop));
    let claim = decision::ClaimJudgement {
        assessment: crate::judge::completion::Assessment {
            claimed: true,
            basis: REHEARSAL_BASIS.into(),
            ..Default::default()
        },
        saturation: 0,
    };
    check_claim(paths, &config, stop, world, owned, &claim, &mut observed);
    let gates = decision::claim_gates(&config, owned, &observed, &claim.assessment, &[]);
    let walls_notice = if config.completion.verify.is_empty() {
        None
    } else {
        check_walls(&paths.root, work_root(paths, stop), config.sandbox.walls()).notice()
    };
    Ok(Rehearsal {
        accepted_summary: crate::judge::completion::accepted_summary(
            &gates,
            config.completion.verify_off_by_formula,
        ),
        checks: config.completion.verify,
        verification: observed.verification.unwrap_or_default(),
        gates,
        baseline: owned.test_baseline.clone(),
        walls_notice,
    })
}

/// What the line announcing a loop's end adds in an interactive session:
/// the client does not exit with the loop.
pub const SESSION_STAYS_OPEN: &str = ". The loop is over, but this session stays open: type /exit to close it, or go on working in it by hand";

/// Whether the loop's client runs with a person at it (the plugin's
/// `/ralph-loop`, a launcher's loop without --headless): never a `-p` run.
fn interactive(state: &LoopState) -> bool {
    !state.fresh_context && !state.run_mode.as_ref().is_some_and(|m| m.headless)
}

/// What the stop answers: the ending's notice, a pass, or the next
/// iteration's text (the prompt and guardrails read before anything is
/// committed; the person's note first, once).
fn answer_for(
    outcome: &decision::Outcome,
    paths: &ProjectPaths,
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    owned: &LoopState,
    state: &LoopState,
) -> Result<Answer, EngineError> {
    Ok(match (&outcome.verdict, &outcome.new_state) {
        (Verdict::End(_) | Verdict::Pause(_) | Verdict::Ask(_), Some(ended)) => Answer::End {
            // In an interactive session nothing else says so until the
            // client exits; and the client stays open after the loop.
            system_message: format!(
                "Ralph {}{}",
                crate::judge::lifecycle::outcome_line(ended),
                if matches!(outcome.verdict, Verdict::End(_)) && interactive(ended) {
                    SESSION_STAYS_OPEN
                } else {
                    ""
                }
            ),
        },
        (Verdict::Pass(_) | Verdict::End(_) | Verdict::Pause(_) | Verdict::Ask(_), _) => {
            Answer::Allow
        }
        (
            Verdict::Continue {
                iteration,
                max_iterations,
                notice,
            },
            _,
        ) => {
            // Read everything the answer needs before committing the new state.
            // The driver's task (a formula step), the loop's own (/ralph-loop), or PROMPT.md.
            let prompt_text = match stop.task.as_ref().or(owned.task.as_ref()) {
                Some(task) => task.clone(),
                None => world.prompt(&paths.resolve(&config.prompt_file))?,
            };
            let guardrails = world.guardrails(&paths.guardrails_file())?;
            // The person's note (`ralph-ctl say`) goes first, once.
            let notice = match (&state.hint, notice) {
                (Some(hint), notice) => Some(
                    std::iter::once(prompt_text::person_note(hint))
                        .chain(notice.clone())
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                ),
                (None, notice) => notice.clone(),
            };
            Answer::Block {
                reason: prompt_text::iteration_text(
                    &config.completion_signal,
                    *iteration,
                    *max_iterations,
                    notice.as_deref(),
                    &prompt_text,
                    guardrails.as_deref(),
                ),
                // The person sees a rejected claim as the next iteration
                // starts (the agent gets the failures in the text).
                system_message: prompt_text::system_message(
                    *iteration,
                    *max_iterations,
                    rejected_gates(outcome.new_state.as_ref()).as_deref(),
                ),
            }
        }
    })
}

/// The gates that rejected this stop's claim of done, in words (`None`:
/// no claim, or an accepted one).
fn rejected_gates(state: Option<&LoopState>) -> Option<String> {
    let claim = state?.history.last()?.claim.as_ref()?;
    if claim.accepted {
        return None;
    }
    Some(crate::judge::completion::rejected_by(
        claim.failed_gates.iter().map(|g| g.as_str()),
    ))
}

/// The usage the transcript gained since the loop's cursor (best effort: a
/// transcript that cannot be read counts nothing; said on stderr only when
/// a calls-per-hour budget depends on the count).
fn read_usage(
    world: &dyn World,
    stop: &Stop,
    state: &LoopState,
    counted: bool,
    notes: &mut Vec<String>,
) -> UsageReading {
    let Some(path) = &stop.transcript_path else {
        return UsageReading::default();
    };
    let now = world.now().secs();
    let since = state.started_at.secs();
    match world.usage(path, state.transcript.as_ref(), now, since) {
        Ok(reading) => {
            let had_cursor = state.transcript.as_ref().is_some_and(|c| &c.path == path);
            if reading.skipped && had_cursor && counted {
                notes.push(format!(
                    "the transcript grew by more than {} MiB since the last stop; \
                     only its last {} MiB were counted for maxCallsPerHour",
                    usage::MAX_NEW_BYTES / 1024 / 1024,
                    usage::MAX_NEW_BYTES / 1024 / 1024
                ));
            }
            reading
        }
        Err(e) => {
            if counted {
                notes.push(format!(
                    "cannot read the transcript {} to count model requests for maxCallsPerHour: {e}",
                    path.display()
                ));
            }
            UsageReading::default()
        }
    }
}

/// What the client's `StopFailure` event carries: the turn ended on an API
/// error, and no Stop hook runs for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopFailure {
    /// The failing session.
    pub session_id: Option<String>,
    /// The session's transcript (its last `api_error` line has the HTTP
    /// status and the reset time).
    pub transcript_path: Option<PathBuf>,
    /// The client's name for the error (`rate_limit`, `server_error`, …).
    pub error: Option<String>,
    /// The client's details of it.
    pub error_details: Option<String>,
    /// The error text the client showed in place of the answer.
    pub last_assistant_message: Option<String>,
    /// A driver settles the loop once its client exits (as
    /// [`Stop::driver_settles`]): it tells the pause, with the client's
    /// cost charged first.
    pub driver_settles: bool,
}

/// Records an API failure that ended a turn of the loop's session: the loop
/// is `paused`, with what failed, the HTTP status and the API's reset time
/// when the transcript has them. Another session's failure, or one with no
/// loop running, changes nothing. The client ignores the answer, so there
/// is none.
pub fn run_stop_failure(
    paths: &ProjectPaths,
    failure: &StopFailure,
    world: &dyn World,
) -> Result<StopReport, EngineError> {
    let Some(session) = failure.session_id.as_deref() else {
        return Ok(StopReport::allow(None));
    };
    let mut notes = Vec::new();
    let tell = !failure.driver_settles;
    let changed =
        transaction::change_at(paths, Whose::Session(session), world.now(), tell, |draft| {
            let Some(state) = draft.state().filter(|s| s.status == Status::Running) else {
                return Ok::<_, EngineError>(());
            };
            let stop = Stop {
                session_id: failure.session_id.clone(),
                transcript_path: failure.transcript_path.clone(),
                ..Stop::default()
            };
            let reading = read_usage(world, &stop, state, false, &mut notes);
            let api_error = reading.last_api_error.clone().unwrap_or_default();
            let kind = match (failure.error.as_deref(), api_error.status) {
                (Some(error), _) if PauseKind::from_client_error(error) != PauseKind::Unknown => {
                    PauseKind::from_client_error(error)
                }
                (_, Some(status)) => PauseKind::from_http_status(status),
                _ => PauseKind::Unknown,
            };
            let said = failure
                .last_assistant_message
                .as_deref()
                .or(failure.error_details.as_deref())
                .or(api_error.message.as_deref())
                .or(failure.error.as_deref())
                .unwrap_or("the API failed");
            let because = PausedBecause {
                kind,
                http_status: api_error.status,
                message: crate::judge::state::one_line(said, 300),
                resume_at: api_error.resets_at.map(Timestamp::from_secs),
                retry_after_secs: api_error.retry_in_secs,
                resume_planned: None,
                at: draft.now(),
            };
            draft.apply(Event::Paused {
                because,
                reading,
                cause: "the client's StopFailure".into(),
            });
            Ok(())
        })?;
    notes.extend(changed.notes);
    Ok(StopReport {
        answer: Answer::Allow,
        notes,
        settled: false,
    })
}

/// Records that the session owning a loop that nothing else watches (a
/// `/ralph-loop` loop: no launcher is recorded carrying it) ended
/// (`SessionEnd`): the loop is `interrupted`, so that it neither blocks
/// new starts nor holds the session if it is resumed days later. Another
/// session's end, or a driven loop's, changes nothing.
pub fn run_session_end(
    paths: &ProjectPaths,
    session_id: Option<&str>,
    reason: Option<&str>,
    world: &dyn World,
) -> Result<StopReport, EngineError> {
    let Some(session) = session_id else {
        return Ok(StopReport::allow(None));
    };
    let changed =
        transaction::change_at(paths, Whose::Session(session), world.now(), true, |draft| {
            if draft.state().is_some_and(|s| s.carriers.is_none()) {
                draft.apply(Event::Interrupted {
                    cause: format!(
                        "the session ended ({})",
                        reason
                            .filter(|r| !r.is_empty())
                            .unwrap_or("no reason given")
                    ),
                });
            }
            Ok::<_, EngineError>(())
        })?;
    Ok(StopReport {
        answer: Answer::Allow,
        notes: changed.notes,
        settled: false,
    })
}

/// Keeps why the hook could not go on at a stop of the running loop of
/// `session_id`, as a `problem` line of the audit log (the state is left as
/// it was), so that the launcher's last line and `status` can name it.
/// Best effort: the problem may be the runtime folder itself; a line that
/// could not be written is a warning returned. (Not for a stop that timed
/// out on the lock: it would only wait again.)
pub fn record_hook_problem(
    paths: &ProjectPaths,
    session_id: Option<&str>,
    problem: &str,
    now: Timestamp,
) -> Result<Vec<String>, StoreError> {
    let Some(session) = session_id else {
        return Ok(Vec::new());
    };
    let changed = transaction::change_at(paths, Whose::Session(session), now, true, |draft| {
        if draft.state().is_some_and(|s| s.status == Status::Running) {
            draft.apply(Event::ProblemSeen(crate::judge::state::one_line(
                problem, 500,
            )));
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(changed.notes)
}

/// What this stop observed: the agent's latest message (the stop's own,
/// else the iteration's final message in the transcript, waited for
/// briefly when the client has not written it yet), the iteration's tool
/// calls, file edits and failing tool results, whether the project changed
/// since `previous` (the breaker's baseline), the TDD scenario and the plan.
/// The folder the stop's iteration worked in: its worktree, or the project.
fn work_root<'a>(paths: &'a ProjectPaths, stop: &'a Stop) -> &'a Path {
    stop.work_root.as_deref().unwrap_or(&paths.root)
}

fn observe(
    paths: &ProjectPaths,
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    state: &LoopState,
    notes: &mut Vec<String>,
) -> Result<Observation, EngineError> {
    // Judged like the transcript's final message: its last MiB at most (a
    // claim is at the end), so a huge message cannot blow up the readers.
    let from_input = stop
        .last_assistant_message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|m| transcript::last_bytes(m, transcript::MAX_MESSAGE_BYTES).to_string());
    let tail = match &stop.transcript_path {
        // The message came with the stop: the transcript only adds the
        // iteration's tool calls and errors, best effort, once it shows
        // that message.
        Some(path) if from_input.is_some() => {
            let expected = from_input.as_deref().unwrap_or_default();
            match world.iteration_tail(path, transcript::CATCH_UP_WAIT, from_input.as_deref()) {
                // The newest answer in the transcript is another one: the
                // client has not written this iteration yet (2.1.330 under
                // load, until after the hook), and what was read is an
                // earlier iteration's. Its tool calls and errors are not
                // this one's.
                Ok((tail, waited))
                    if tail
                        .final_message
                        .as_deref()
                        .is_some_and(|got| !transcript::same_text(got, expected)) =>
                {
                    notes.push(format!(
                        "the transcript did not show this stop's final message within {:.1} s, only an \
                         earlier one; the iteration's tool calls and errors are not known",
                        waited.as_secs_f64()
                    ));
                    IterationTail::default()
                }
                Ok((tail, waited)) => {
                    if waited >= transcript::CATCH_UP_WAIT {
                        notes.push(format!(
                            "the transcript did not show this stop's final message within {:.1} s; \
                             the iteration's tool calls and errors may be incomplete",
                            waited.as_secs_f64()
                        ));
                    }
                    tail
                }
                Err(_) => IterationTail::default(),
            }
        }
        Some(path) => {
            let (tail, waited) = world.iteration_tail(path, transcript::CATCH_UP_WAIT, None)?;
            if !tail.caught_up {
                notes.push(format!(
                    "the transcript did not show this stop's final message within {:.1} s; judging the iteration without it",
                    waited.as_secs_f64()
                ));
            }
            tail
        }
        None => IterationTail::default(),
    };
    // Still short of the iteration's end after the wait: its tool calls
    // and failing results may be missing (the client can write them only
    // after the hook has returned).
    let tools_incomplete = stop.transcript_path.is_some() && !tail.caught_up;
    let (message, source) = match (from_input, tail.final_message) {
        // Cut off mid-turn: what the transcript ends on is no answer.
        _ if stop.cut_off.is_some() => (String::new(), MessageSource::Missing),
        (Some(text), _) => (text, MessageSource::Input),
        (None, Some(text)) if !text.is_empty() => (text, MessageSource::Transcript),
        _ if stop.transcript_path.is_some() && !tail.caught_up => {
            (String::new(), MessageSource::TranscriptBehind)
        }
        _ => (String::new(), MessageSource::Missing),
    };
    let refused_calls = match &stop.permission_denials {
        Some(denied) => Some(
            denied
                .iter()
                .map(|call| {
                    // The transcript's refusal text of the same call.
                    let text = tail
                        .refusals
                        .iter()
                        .find(|r| r.tool_use_id.is_some() && r.tool_use_id == call.tool_use_id)
                        .and_then(|r| r.text.clone());
                    crate::judge::errors::Refusal {
                        text: text.or_else(|| call.text.clone()),
                        ..call.clone()
                    }
                })
                .collect(),
        ),
        None if !tail.refusals.is_empty() => Some(tail.refusals),
        None => None,
    };
    Ok(Observation {
        message,
        message_source: source,
        refused_calls,
        failing_tool_results: tail.failing_tool_results,
        tool_calls: tail.tool_calls,
        progress: world.progress(
            work_root(paths, stop),
            state.breaker.progress.as_ref(),
            &tail.edits,
        ),
        tdd_scenario: world.tdd_scenario(work_root(paths, stop)),
        plan: world.plan(work_root(paths, stop), &plan_files(config, stop)),
        // The previous stop could not see its own message in time: it is in
        // the transcript now, just before this iteration's prompt line.
        late_message: tail.previous_final_message.filter(|m| {
            !m.is_empty() && stop.cut_off.is_none() && decision::previous_stop_was_behind(state)
        }),
        cut_off: stop.cut_off.clone(),
        usage_windows: stop.usage_windows.clone(),
        tools_incomplete,
        usage: read_usage(
            world,
            stop,
            state,
            config.supervision.max_calls_per_hour.is_some(),
            notes,
        ),
        api_failure: tail.api_error,
        ..Observation::of_session(stop.session_id.clone(), stop.stop_hook_active)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::state::{Status, StopDecision};
    use crate::persist::log;
    use std::cell::Cell;
    use tempfile::TempDir;

    #[test]
    fn a_worktree_s_failed_check_names_what_it_reached_of_the_main_checkout() {
        let dir = TempDir::new().unwrap();
        let project = std::fs::canonicalize(dir.path()).unwrap();
        let tree = project.join(".claude/worktrees/item");
        std::fs::create_dir_all(&tree).unwrap();
        let failed = |output: String, exit_code| VerifyResult {
            name: "tests".into(),
            command: "pytest".into(),
            exit_code: Some(exit_code),
            timed_out: false,
            duration_ms: 1,
            output_tail: output,
            counts: None,
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        };
        let naming = format!("No such file: '{}/data/fixture.json'", project.display());
        let reach = RealWorld.main_checkout_reach(&project, &tree, &[failed(naming.clone(), 1)]);
        assert_eq!(reach.len(), 1, "{reach:?}");
        assert!(reach[0].contains("data/fixture.json"), "{reach:?}");
        // A check that passed, or one of the project itself, reached nothing to name.
        assert!(
            RealWorld
                .main_checkout_reach(&project, &tree, &[failed(naming.clone(), 0)])
                .is_empty()
        );
        assert!(
            RealWorld
                .main_checkout_reach(&project, &project, &[failed(naming, 1)])
                .is_empty()
        );
    }

    const SID: &str = "11111111-2222-3333-4444-555555555555";

    /// A world with a fixed transcript reading and project, that counts the
    /// verification runs.
    struct FakeWorld {
        tail: IterationTail,
        changed: Option<bool>,
        /// The baseline the progress reading brings.
        baseline: Option<progress::Baseline>,
        /// What each progress reading was given.
        progress_calls: std::cell::RefCell<Vec<(Option<progress::Baseline>, progress::ToolEdits)>>,
        /// Runs during the progress reading (another writer meddling).
        while_reading: Option<Box<dyn Fn()>>,
        verify_exit: i32,
        /// The test counts each verification command's output gives.
        verify_counts: Option<crate::observe::test_counts::TestCounts>,
        verify_runs: Cell<u32>,
        /// What the usage reading finds.
        usage: UsageReading,
        /// The folders progress and verification were read and run in.
        roots: std::cell::RefCell<Vec<PathBuf>>,
        /// The verification commands run, in order.
        commands: std::cell::RefCell<Vec<String>>,
    }

    impl FakeWorld {
        fn new(tail: IterationTail) -> Self {
            FakeWorld {
                tail,
                changed: Some(false),
                baseline: None,
                progress_calls: Default::default(),
                while_reading: None,
                verify_exit: 0,
                verify_counts: None,
                verify_runs: Cell::new(0),
                usage: UsageReading::default(),
                roots: Default::default(),
                commands: Default::default(),
            }
        }
    }

    impl World for FakeWorld {
        fn usage(
            &self,
            _: &Path,
            _: Option<&TranscriptCursor>,
            _: u64,
            _: u64,
        ) -> std::io::Result<UsageReading> {
            Ok(self.usage.clone())
        }
        fn iteration_tail(
            &self,
            _: &Path,
            wait: Duration,
            _: Option<&str>,
        ) -> Result<(IterationTail, Duration), TranscriptError> {
            Ok((
                self.tail.clone(),
                if self.tail.caught_up {
                    Duration::ZERO
                } else {
                    wait
                },
            ))
        }
        fn progress(
            &self,
            root: &Path,
            previous: Option<&progress::Baseline>,
            edits: &progress::ToolEdits,
        ) -> progress::Reading {
            self.roots.borrow_mut().push(root.to_path_buf());
            self.progress_calls
                .borrow_mut()
                .push((previous.cloned(), edits.clone()));
            if let Some(meddle) = &self.while_reading {
                meddle();
            }
            progress::Reading {
                changed: self.changed,
                baseline: self.baseline.clone(),
                method: progress::Method::Git,
            }
        }
        fn tdd_scenario(&self, _: &Path) -> Option<String> {
            None
        }
        fn plan(&self, _: &Path, _: &[String]) -> PlanReport {
            PlanReport::default()
        }
        fn verify(
            &self,
            _project: &Path,
            root: &Path,
            commands: &[VerifyCommand],
            _walls: WallsWanted,
        ) -> Vec<VerifyResult> {
            self.roots.borrow_mut().push(root.to_path_buf());
            self.verify_runs.set(self.verify_runs.get() + 1);
            // A check given the network is recorded as such.
            self.commands.borrow_mut().extend(commands.iter().map(|c| {
                if c.network {
                    format!("{} (network)", c.command)
                } else {
                    c.command.clone()
                }
            }));
            commands
                .iter()
                .map(|c| VerifyResult {
                    name: c.name.clone(),
                    command: c.command.clone(),
                    exit_code: Some(self.verify_exit),
                    timed_out: false,
                    duration_ms: 1,
                    output_tail: "1 failed".into(),
                    counts: self.verify_counts,
                    by_runner: Vec::new(),
                    failure_headers: Vec::new(),
                })
                .collect()
        }
        fn now(&self) -> Timestamp {
            Timestamp::from_secs(1795341600)
        }
        fn prompt(&self, _: &Path) -> Result<String, PromptError> {
            Ok("Fix the bugs.".into())
        }
        fn guardrails(&self, _: &Path) -> Result<Option<String>, PromptError> {
            Ok(None)
        }
    }

    fn project(config: Option<&str>) -> (TempDir, ProjectPaths) {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        if let Some(config) = config {
            std::fs::create_dir_all(paths.ralph_dir()).unwrap();
            std::fs::write(paths.config_file(), config).unwrap();
        }
        let store = StateStore::new(&paths);
        let lock = store.lock(true).unwrap();
        let state = LoopState::new(SID.into(), 5, Timestamp::from_secs(0));
        lock.write(&state).unwrap();
        (dir, paths)
    }

    fn stop(message: &str) -> Stop {
        Stop {
            session_id: Some(SID.into()),
            stop_hook_active: true,
            last_assistant_message: Some(message.into()),
            transcript_path: Some("/t.jsonl".into()),
            ..Stop::default()
        }
    }

    fn state(paths: &ProjectPaths) -> LoopState {
        StateStore::new(paths).read().unwrap().unwrap()
    }

    #[test]
    fn a_stop_blocks_with_the_prompt_and_records_the_iteration() {
        let (_d, paths) = project(None);
        let tail = IterationTail {
            tool_calls: 2,
            caught_up: true,
            ..Default::default()
        };
        let mut delivered = Vec::new();
        let report = run_stop(
            &paths,
            &[],
            &stop("Working."),
            &FakeWorld::new(tail),
            &mut |a| {
                delivered.push(a.clone());
                Ok(())
            },
        )
        .unwrap();
        let Answer::Block { reason, .. } = &report.answer else {
            panic!("{report:?}");
        };
        assert!(reason.contains("Fix the bugs."), "{reason}");
        assert_eq!(delivered, vec![report.answer.clone()]);
        let after = state(&paths);
        assert_eq!(after.iteration, 2);
        assert_eq!(after.history[0].tool_calls, 2);
        assert_eq!(after.history[0].message_source, MessageSource::Input);
    }

    /// A real baseline of a folder holding `file`.
    fn a_baseline(file: &str) -> (TempDir, progress::Baseline) {
        let dir = TempDir::new().unwrap();
        std::fs::write(dir.path().join(file), "x").unwrap();
        let baseline = progress::baseline(dir.path()).unwrap();
        (dir, baseline)
    }

    #[test]
    fn the_progress_reading_gets_the_edits_and_its_baseline_is_kept() {
        let (_d, paths) = project(None);
        let (_b1, first) = a_baseline("one.txt");
        let (_b2, second) = a_baseline("two.txt");
        let mut start = state(&paths);
        start.breaker.progress = Some(first.clone());
        StateStore::new(&paths)
            .lock(true)
            .unwrap()
            .write(&start)
            .unwrap();
        let edits = progress::ToolEdits {
            changed_files: vec![paths.root.join("src/lib.rs")],
            fully_described: true,
        };
        let world = FakeWorld {
            changed: Some(true),
            baseline: Some(second.clone()),
            ..FakeWorld::new(IterationTail {
                tool_calls: 1,
                caught_up: true,
                edits: edits.clone(),
                ..Default::default()
            })
        };
        run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
        assert_eq!(
            world.progress_calls.borrow().as_slice(),
            [(Some(first), edits)]
        );
        let after = state(&paths);
        assert_eq!(after.breaker.progress, Some(second));
        assert_eq!(
            after
                .breaker
                .counters
                .get(crate::judge::breaker::Signal::NoProgress),
            0
        );
    }

    #[test]
    fn a_reading_against_a_baseline_replaced_meanwhile_tells_nothing() {
        let (_d, paths) = project(None);
        let (_b, theirs) = a_baseline("one.txt");
        let meddler_paths = paths.clone();
        let written = theirs.clone();
        let world = FakeWorld {
            changed: Some(false),
            while_reading: Some(Box::new(move || {
                // Another writer records a new baseline while this stop reads.
                let store = StateStore::new(&meddler_paths);
                let lock = store.lock(false).unwrap();
                let mut state = lock.read().unwrap().unwrap();
                state.breaker.progress = Some(written.clone());
                lock.write(&state).unwrap();
            })),
            ..FakeWorld::new(IterationTail {
                tool_calls: 1,
                caught_up: true,
                ..Default::default()
            })
        };
        run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
        let after = state(&paths);
        assert_eq!(after.breaker.progress, Some(theirs), "kept");
        assert_eq!(
            after
                .breaker
                .counters
                .get(crate::judge::breaker::Signal::NoProgress),
            0,
            "an unchanged project against the old baseline proves nothing"
        );
    }

    #[test]
    fn an_answer_that_cannot_be_delivered_leaves_the_state_as_it_was() {
        let (_d, paths) = project(None);
        let before = state(&paths);
        let err = run_stop(
            &paths,
            &[],
            &stop("Working."),
            &FakeWorld::new(IterationTail::default()),
            &mut |_| Err(io::Error::from(io::ErrorKind::BrokenPipe)),
        )
        .unwrap_err();
        assert!(matches!(err, EngineError::Deliver(_)), "{err}");
        assert_eq!(state(&paths), before);
    }

    #[test]
    fn a_message_is_judged_by_its_last_mebibyte() {
        assert_eq!(transcript::last_bytes("abc", 10), "abc");
        assert_eq!(transcript::last_bytes("abcdef", 3), "def");
        // Never inside a character: "é" is two bytes.
        assert_eq!(transcript::last_bytes("aé", 1), "");
        assert_eq!(transcript::last_bytes("aéb", 2), "b");
        // A claim at the end of a 3 MiB message still ends the loop.
        let (_d, paths) = project(None);
        let signal = Config::default().completion_signal;
        let message = format!("{}\n{signal}", "word ".repeat(600_000));
        let report = run_stop(
            &paths,
            &[],
            &stop(&message),
            &FakeWorld::new(IterationTail::default()),
            &mut |_| Ok(()),
        )
        .unwrap();
        assert!(
            matches!(report.answer, Answer::End { .. }),
            "{:?}",
            report.answer
        );
    }

    #[test]
    fn a_stop_whose_transcript_never_caught_up_says_its_tools_may_be_missing() {
        let (_d, paths) = project(None);
        let behind = FakeWorld::new(IterationTail {
            caught_up: false,
            tool_calls: 1,
            ..Default::default()
        });
        run_stop(&paths, &[], &stop("Working."), &behind, &mut |_| Ok(())).unwrap();
        let caught_up = FakeWorld::new(IterationTail {
            caught_up: true,
            final_message: Some("Working.".into()),
            ..Default::default()
        });
        run_stop(&paths, &[], &stop("Working."), &caught_up, &mut |_| Ok(())).unwrap();
        let flags: Vec<bool> = state(&paths)
            .history
            .iter()
            .map(|r| r.tools_incomplete)
            .collect();
        assert_eq!(flags, [true, false]);
    }

    #[test]
    fn the_results_refused_calls_are_the_authority_of_a_fresh_stop() {
        use crate::judge::breaker::Signal;
        use crate::judge::errors::Refusal;
        let compound = "This Bash command contains multiple operations. The following parts require approval: git add a, git commit -m a";
        let call = || Refusal {
            tool_use_id: Some("t1".into()),
            ..Refusal::of_call("Bash", Some("git add a && git commit -m a"))
        };
        let tail = |refusals: Vec<Refusal>, texts: Vec<String>| {
            FakeWorld::new(IterationTail {
                caught_up: true,
                final_message: Some("Tried.".into()),
                tool_calls: 1,
                failing_tool_results: texts,
                refusals,
                ..Default::default()
            })
        };
        let refused_in_transcript = || {
            tail(
                vec![Refusal {
                    text: Some(compound.into()),
                    ..call()
                }],
                vec![compound.into()],
            )
        };
        // The result lists no refusal: the transcript's refusal texts do not count.
        let (_d, paths) = project(None);
        let none = Stop {
            permission_denials: Some(Vec::new()),
            ..stop("Tried.")
        };
        for _ in 0..2 {
            run_stop(
                &paths,
                &[],
                &none,
                &refused_in_transcript(),
                &mut |_| Ok(()),
            )
            .unwrap();
        }
        let after = state(&paths);
        assert_eq!(after.breaker.counters.get(Signal::PermissionDenied), 0);
        assert_eq!(after.status, Status::Running);
        // The result names the call, the transcript adds its text (the
        // parts to allow): two such stops end the loop naming them.
        let (_d, paths) = project(None);
        let named = Stop {
            permission_denials: Some(vec![call()]),
            ..stop("Tried.")
        };
        for _ in 0..2 {
            run_stop(&paths, &[], &named, &refused_in_transcript(), &mut |_| {
                Ok(())
            })
            .unwrap();
        }
        let after = state(&paths);
        assert_eq!(after.status, Status::CircuitOpen);
        let because = after.ended_because.unwrap();
        assert!(
            because.contains("`Bash(git add a && git commit -m a)`")
                && because.contains(r#"["Bash(git add a:*)", "Bash(git commit -m a:*)"]"#),
            "{because}"
        );
        // The result names the call and the transcript shows nothing of it
        // (no failing result at all): it counts all the same.
        let (_d, paths) = project(None);
        for _ in 0..2 {
            run_stop(
                &paths,
                &[],
                &named,
                &tail(Vec::new(), Vec::new()),
                &mut |_| Ok(()),
            )
            .unwrap();
        }
        // No rule is proposed for a compound command (no person could
        // paste one that allows it); the call is named all the same.
        let because = state(&paths).ended_because.unwrap();
        assert!(
            because.contains("`Bash(git add a && git commit -m a)`")
                && !because.contains("git commit -m a:*"),
            "{because}"
        );
    }

    #[test]
    fn a_transcript_that_shows_only_an_earlier_iteration_lends_it_nothing() {
        // The stop carries "Step two." but the transcript still ends on the
        // previous iteration, whose tool call failed: that error and call
        // are not charged to this iteration, which is flagged instead.
        let (_d, paths) = project(None);
        let stale = FakeWorld::new(IterationTail {
            caught_up: true,
            final_message: Some("Step one.".into()),
            tool_calls: 1,
            failing_tool_results: vec!["cat: x: No such file or directory".into()],
            ..Default::default()
        });
        run_stop(&paths, &[], &stop("Step two."), &stale, &mut |_| Ok(())).unwrap();
        let record = state(&paths).history.pop().unwrap();
        assert_eq!(record.tool_calls, 0, "{record:?}");
        assert_eq!(record.error, None, "{record:?}");
        assert!(record.tools_incomplete, "{record:?}");
        assert_eq!(record.excerpt, "Step two.");
    }

    #[test]
    fn an_ending_stands_when_its_notice_cannot_be_shown() {
        // A block nobody reads is undone; an ending is not: the session
        // stops either way, and the loop must say it completed.
        let (_d, paths) = project(None);
        let signal = Config::default().completion_signal;
        let world = FakeWorld::new(IterationTail::default());
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Err(io::Error::other("stdout is gone")),
        )
        .unwrap();
        assert!(matches!(report.answer, Answer::End { .. }));
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("cannot show how the loop ended: stdout is gone")),
            "{:?}",
            report.notes
        );
        assert_eq!(state(&paths).status, Status::Complete);
    }

    #[test]
    fn an_iteration_in_a_worktree_is_checked_there_and_a_cut_off_one_claims_nothing() {
        let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
        let (_d, paths) = project(Some(config));
        let world = FakeWorld::new(IterationTail::default());
        let signal = Config::default().completion_signal;
        let worktree = paths.root.join(".claude/worktrees/loop-1");
        let in_worktree = Stop {
            work_root: Some(worktree.clone()),
            ..stop(&format!("Done.\n{signal}"))
        };
        run_stop(&paths, &[], &in_worktree, &world, &mut |_| Ok(())).unwrap();
        assert_eq!(*world.roots.borrow(), [worktree.clone(), worktree.clone()]);
        assert_eq!(state(&paths).status, Status::Complete);

        // Cut off mid-turn: the claim its transcript ends on is no answer.
        let (_d, paths) = project(Some(config));
        let world = FakeWorld::new(IterationTail::default());
        let cut_off = Stop {
            cut_off: Some("no sign of work for 60 s".into()),
            ..stop(&format!("Done.\n{signal}"))
        };
        let report = run_stop(&paths, &[], &cut_off, &world, &mut |_| Ok(())).unwrap();
        assert_eq!(world.verify_runs.get(), 0, "nothing to verify");
        assert!(matches!(report.answer, Answer::Block { .. }), "{report:?}");
        let after = state(&paths);
        assert_eq!(after.status, Status::Running);
        assert_eq!(after.outcome_errors, 1);
        assert_eq!(
            world.roots.borrow()[0],
            paths.root,
            "the project's own root"
        );
    }

    #[test]
    fn the_person_s_note_leads_the_next_text_once() {
        let (_d, paths) = project(None);
        let store = StateStore::new(&paths);
        let lock = store.lock(false).unwrap();
        let mut running = lock.read().unwrap().unwrap();
        running.hint = Some("The flaky test is test_upload.".into());
        lock.write(&running).unwrap();
        drop(lock);
        let world = FakeWorld::new(IterationTail::default());
        let reason = |report: StopReport| match report.answer {
            Answer::Block { reason, .. } => reason,
            other => panic!("{other:?}"),
        };
        let first =
            reason(run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap());
        assert!(
            first.starts_with(
                "[Ralph: a note from the person watching] The flaky test is test_upload."
            ),
            "{first}"
        );
        assert_eq!(state(&paths).hint, None);
        let second =
            reason(run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap());
        assert!(!second.contains("note from the person"), "{second}");
    }

    #[test]
    fn a_claim_is_checked_against_the_protected_files_of_the_start() {
        let (_d, paths) = project(None);
        let tests = paths.root.join("tests");
        std::fs::create_dir_all(&tests).unwrap();
        std::fs::write(tests.join("test_a.py"), "def test_a(): assert False\n").unwrap();
        // What `ralph-ctl start` records.
        let mut started = state(&paths);
        started.protected_files =
            crate::observe::protected::snapshot(&paths.root, &["tests/".to_string()]);
        StateStore::new(&paths)
            .lock(true)
            .unwrap()
            .write(&started)
            .unwrap();
        let world = FakeWorld::new(IterationTail::default());
        let signal = Config::default().completion_signal;
        // Untouched: the claim passes.
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        assert!(state(&paths).last_claim.unwrap().accepted, "{report:?}");

        // Changed: the claim is rejected, naming the file.
        let mut again = state(&paths);
        again.status = Status::Running;
        again.ended_at = None;
        again.ended_because = None;
        StateStore::new(&paths)
            .lock(true)
            .unwrap()
            .write(&again)
            .unwrap();
        std::fs::write(tests.join("test_a.py"), "def test_a(): pass\n").unwrap();
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        let Answer::Block { reason, .. } = report.answer else {
            panic!("a rejected claim goes on: {:?}", report.answer);
        };
        assert!(
            reason.contains("protected_paths gate: 1 protected file(s) changed")
                && reason.contains("tests/test_a.py"),
            "{reason}"
        );
        assert!(!state(&paths).last_claim.unwrap().accepted);
    }

    #[test]
    fn a_claim_made_while_a_commondir_leads_git_elsewhere_is_rejected_naming_it() {
        let (_d, paths) = project(None);
        std::fs::create_dir_all(paths.root.join(".git/objects")).unwrap();
        // What `ralph-ctl start` records.
        let mut started = state(&paths);
        let place = own_git::GitPlace::find(&paths.root).unwrap();
        started.git_record = Some(own_git::record::record(&place));
        StateStore::new(&paths)
            .lock(true)
            .unwrap()
            .write(&started)
            .unwrap();
        std::fs::write(paths.root.join(".git/commondir"), "/tmp/evil\n").unwrap();
        let world = FakeWorld::new(IterationTail::default());
        let signal = Config::default().completion_signal;
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        let Answer::Block { reason, .. } = report.answer else {
            panic!("a rejected claim goes on: {:?}", report.answer);
        };
        assert!(
            reason.contains("git_unchanged gate: ")
                && reason.contains(".git/commondir appeared (it holds `/tmp/evil`)"),
            "{reason}"
        );
        let claim = state(&paths).last_claim.unwrap();
        assert!(!claim.accepted);
        let last = state(&paths).history.last().unwrap().claim.clone().unwrap();
        assert_eq!(
            last.failed_gates,
            vec![crate::judge::completion::Gate::GitUnchanged]
        );
    }

    #[test]
    fn a_claim_whose_check_resolves_otherwise_than_at_the_start_is_rejected() {
        let config = r#"{"verify": [{"name": "tests", "command": "python3 -m unittest"}]}"#;
        let (_d, paths) = project(Some(config));
        // What `ralph-ctl start` records.
        let mut started = state(&paths);
        let commands = vec![VerifyCommand {
            name: "tests".into(),
            command: "python3 -m unittest".into(),
            timeout_seconds: 60,
            network: false,
        }];
        started.check_resolution = Some(crate::observe::resolved::resolve(
            &paths.root,
            &commands,
            None,
            &Walls::open(),
        ));
        StateStore::new(&paths)
            .lock(true)
            .unwrap()
            .write(&started)
            .unwrap();
        let world = FakeWorld::new(IterationTail::default());
        let signal = Config::default().completion_signal;
        // A module of the project that shadows the runner: the claim is
        // rejected, naming it, though the check passed.
        std::fs::create_dir_all(paths.root.join("unittest")).unwrap();
        std::fs::write(paths.root.join("unittest/__init__.py"), "").unwrap();
        std::fs::write(paths.root.join("unittest/__main__.py"), "print('OK')\n").unwrap();
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        let Answer::Block { reason, .. } = report.answer else {
            panic!("a rejected claim goes on: {:?}", report.answer);
        };
        assert!(
            reason.contains("check_unchanged gate")
                && reason.contains(
                    "`python3 -m unittest` now runs ./unittest/__init__.py and \
                     ./unittest/__main__.py, not the one at the loop's start"
                ),
            "{reason}"
        );
        assert!(!state(&paths).last_claim.unwrap().accepted);

        // Removed: the same claim completes.
        std::fs::remove_dir_all(paths.root.join("unittest")).unwrap();
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        assert!(state(&paths).last_claim.unwrap().accepted, "{report:?}");
    }

    #[test]
    fn the_pin_decides_and_a_change_of_config_json_is_recorded_not_obeyed() {
        let pinned = r#"{"verify": [{"name": "tests", "command": "pinned-check"}]}"#;
        let (_d, paths) = project(Some(pinned));
        let store = StateStore::new(&paths);
        let lock = store.lock(false).unwrap();
        lock.write(&LoopState::new(SID.into(), 20, Timestamp::from_secs(0)))
            .unwrap();
        drop(lock);
        let world = FakeWorld {
            verify_exit: 1,
            ..FakeWorld::new(IterationTail::default())
        };
        let signal = Config::default().completion_signal;
        let claim = stop(&format!("Done.\n{signal}"));
        // A state from before pinning is pinned by its first stop.
        run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
        let pin = state(&paths).pinned.expect("pinned by the first stop");
        assert_eq!(pin.config.as_deref(), Some(pinned));
        let log_of = |paths: &ProjectPaths| {
            std::fs::read_to_string(paths.runtime_dir().join(log::LOG_FILE_NAME)).unwrap()
        };
        // (config.json now, config_changed lines logged by then, a problem shown?)
        let agent =
            r#"{"verify": [{"name": "tests", "command": "touch agent-ran"}], "maxIterations": 2}"#;
        // A notifier added, and the pinned check given the network: the
        // check still runs as pinned, without it.
        let networked = r#"{"verify": [{"name": "tests", "command": "pinned-check", "network": true}], "notify": "touch notified"}"#;
        let cases: &[(&str, usize, bool)] = &[
            (agent, 1, false),
            // The same content again: logged once.
            (agent, 1, false),
            // A config.json that no longer parses: shown, never fatal.
            ("{not json", 2, true),
            (networked, 3, false),
        ];
        for (now, logged, problem) in cases {
            std::fs::write(paths.config_file(), now).unwrap();
            let report = run_stop(&paths, &[], &claim, &world, &mut |_| Ok(())).unwrap();
            assert!(
                matches!(report.answer, Answer::Block { .. }),
                "{now}: {:?}",
                report.answer
            );
            assert_eq!(world.commands.borrow().last().unwrap(), "pinned-check");
            let after = state(&paths);
            assert_eq!(after.pinned.as_ref(), Some(&pin), "the pin stays");
            let drift = after.config_drift.expect("the drift is recorded");
            assert_eq!(drift.files[0].file, ".claude/ralph/config.json");
            assert_eq!(drift.files[0].problem.is_some(), *problem, "{drift:?}");
            assert_eq!(
                log_of(&paths).matches("\"config_changed\"").count(),
                *logged
            );
        }
        assert!(!world.commands.borrow().iter().any(|c| c != "pinned-check"));
        // Back as it was pinned: no drift.
        std::fs::write(paths.config_file(), pinned).unwrap();
        run_stop(&paths, &[], &stop("Working."), &world, &mut |_| Ok(())).unwrap();
        assert_eq!(state(&paths).config_drift, None);
    }

    #[test]
    fn verification_runs_once_and_only_for_a_claim() {
        let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
        let (_d, paths) = project(Some(config));
        let world = FakeWorld {
            verify_exit: 1,
            ..FakeWorld::new(IterationTail::default())
        };
        run_stop(
            &paths,
            &[],
            &stop("Still working."),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(world.verify_runs.get(), 0);
        let signal = Config::default().completion_signal;
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(world.verify_runs.get(), 1);
        let Answer::Block { reason, .. } = report.answer else {
            panic!("a rejected claim goes on");
        };
        assert!(
            reason.starts_with("[Ralph: completion claim rejected]"),
            "{reason}"
        );
        let after = state(&paths);
        assert!(!after.last_claim.unwrap().accepted);

        let passing = FakeWorld::new(IterationTail::default());
        let report = run_stop(
            &paths,
            &[],
            &stop(&format!("Done.\n{signal}")),
            &passing,
            &mut |_| Ok(()),
        )
        .unwrap();
        let Answer::End { system_message } = &report.answer else {
            panic!("{:?}", report.answer);
        };
        assert!(
            system_message.starts_with("Ralph loop complete at iteration 3 of 5 (")
                && system_message.contains("verified: 1 command(s) passed"),
            "{system_message}"
        );
        assert_eq!(state(&paths).status, Status::Complete);
    }

    #[test]
    fn a_rehearsed_claim_is_judged_by_the_pin_and_the_stops_gates_and_writes_nothing() {
        use crate::judge::completion::Gate;
        use crate::observe::test_counts::{CommandCounts, TestCounts};
        let config =
            r#"{"verify": [{"name": "tests", "command": "make test", "timeoutSeconds": 5}]}"#;
        let (_d, paths) = project(Some(config));
        // The first stop pins the config; the agent then rewrites it.
        let quiet = FakeWorld::new(IterationTail::default());
        run_stop(&paths, &[], &stop("Working."), &quiet, &mut |_| Ok(())).unwrap();
        std::fs::write(
            paths.config_file(),
            r#"{"verify": [{"name": "tests", "command": "true"}]}"#,
        )
        .unwrap();
        let store = StateStore::new(&paths);
        let lock = store.lock(false).unwrap();
        let mut loop_state = state(&paths);
        let counts = |run, skipped| TestCounts {
            run,
            passed: run,
            failed: 0,
            skipped,
        };
        loop_state.test_baseline = vec![CommandCounts {
            command: "make test".into(),
            counts: counts(3, 0),
            runners: Vec::new(),
        }];
        lock.write(&loop_state).unwrap();
        drop(lock);
        let log_file = crate::persist::log::log_path(&paths.state_file());
        let bytes = || {
            (
                std::fs::read(paths.state_file()).unwrap(),
                std::fs::read(&log_file).unwrap_or_default(),
            )
        };
        let before = bytes();
        let rehearse = |world: &FakeWorld, state: Option<&LoopState>| {
            rehearse_claim(&paths, &[], state, &Stop::default(), world).unwrap()
        };
        let gates = |r: &Rehearsal| -> Vec<(Gate, bool)> {
            r.gates.iter().map(|g| (g.gate, g.passed)).collect()
        };

        // Failing: the pin's command ran, once, and the verification gate says so.
        let failing = FakeWorld {
            verify_exit: 1,
            ..FakeWorld::new(IterationTail::default())
        };
        let failed = rehearse(&failing, Some(&loop_state));
        assert_eq!(*failing.commands.borrow(), ["make test"]);
        assert_eq!(failing.verify_runs.get(), 1);
        assert!(!failed.accepted());
        assert_eq!(
            gates(&failed),
            [(Gate::Plan, true), (Gate::Verification, false)]
        );
        assert_eq!(failed.baseline, loop_state.test_baseline);
        assert_eq!(failed.verification[0].exit_code, Some(1));

        // Passing with fewer tests than at the start: the test-count gate
        // fails it; with as many, every gate passes.
        let fewer = FakeWorld {
            verify_counts: Some(counts(2, 0)),
            ..FakeWorld::new(IterationTail::default())
        };
        let judged = rehearse(&fewer, Some(&loop_state));
        assert!(!judged.accepted());
        assert!(
            judged.gates.iter().any(|g| g.gate == Gate::TestCount
                && !g.passed
                && g.detail.contains("ran 2 tests (baseline 3)")),
            "{:?}",
            judged.gates
        );
        let as_many = FakeWorld {
            verify_counts: Some(counts(3, 0)),
            ..FakeWorld::new(IterationTail::default())
        };
        let judged = rehearse(&as_many, Some(&loop_state));
        assert!(judged.accepted(), "{:?}", judged.gates);
        assert_eq!(
            gates(&judged),
            [
                (Gate::Plan, true),
                (Gate::Verification, true),
                (Gate::TestCount, true)
            ]
        );

        // Nothing of the loop was written.
        assert_eq!(bytes(), before);

        // No loop: the config files as they are now.
        let now = FakeWorld::new(IterationTail::default());
        let fresh = rehearse(&now, None);
        assert_eq!(*now.commands.borrow(), ["true"]);
        assert!(fresh.accepted());
        assert!(fresh.baseline.is_empty());
        assert_eq!(
            gates(&fresh),
            [(Gate::Plan, true), (Gate::Verification, true)]
        );
        assert!(
            fresh
                .accepted_summary
                .contains("verified: 1 command(s) passed")
        );
        assert_eq!(bytes(), before);
    }

    #[test]
    fn a_claim_of_a_step_with_verification_off_says_the_formula_turned_it_off() {
        let config = r#"{"verify": [{"name": "tests", "command": "true", "timeoutSeconds": 5}]}"#;
        let (_d, paths) = project(Some(config));
        let world = FakeWorld::new(IterationTail::default());
        let signal = Config::default().completion_signal;
        let report = run_stop(
            &paths,
            &[],
            &Stop {
                skip_project_verify: true,
                ..stop(&format!("The plan is written.\n{signal}"))
            },
            &world,
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(world.verify_runs.get(), 0, "nothing to run");
        let Answer::End { system_message } = &report.answer else {
            panic!("{:?}", report.answer);
        };
        assert!(
            system_message.contains(
                "not verified: verification is off for this step (`verify: false` in the formula)"
            ) && !system_message.contains("no verification command is configured"),
            "{system_message}"
        );
    }

    #[test]
    fn another_sessions_stop_reads_nothing() {
        let (_d, paths) = project(None);
        let before = state(&paths);
        let mut other = stop("Hi.");
        other.session_id = Some("someone-else".into());
        let report = run_stop(
            &paths,
            &[],
            &other,
            &FakeWorld::new(IterationTail::default()),
            &mut |_| panic!("nothing to deliver"),
        )
        .unwrap();
        assert_eq!(
            report,
            StopReport {
                answer: Answer::Allow,
                notes: vec![],
                settled: false,
            }
        );
        assert_eq!(state(&paths), before);
    }

    #[test]
    fn a_transcript_that_never_catches_up_is_said_and_recorded() {
        let (_d, paths) = project(None);
        let mut s = stop("");
        s.last_assistant_message = None;
        let report = run_stop(
            &paths,
            &[],
            &s,
            &FakeWorld::new(IterationTail::default()),
            &mut |_| Ok(()),
        )
        .unwrap();
        assert!(
            report.notes[0].contains("did not show this stop's final message"),
            "{report:?}"
        );
        assert_eq!(
            state(&paths).history[0].message_source,
            MessageSource::TranscriptBehind
        );
    }

    #[test]
    fn a_claim_the_previous_stop_could_not_see_is_judged_at_this_one() {
        let (_d, paths) = project(None);
        let signal = Config::default().completion_signal;
        let mut behind = stop("");
        behind.last_assistant_message = None;
        // Stop 1: the transcript never shows the message (the claim).
        run_stop(
            &paths,
            &[],
            &behind,
            &FakeWorld::new(IterationTail::default()),
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(state(&paths).status, Status::Running);
        // Stop 2: the claim is in the transcript now, before this iteration's prompt.
        let tail = IterationTail {
            caught_up: true,
            final_message: Some("Looked again.".into()),
            previous_final_message: Some(format!("All fixed.\n{signal}")),
            ..Default::default()
        };
        let report =
            run_stop(&paths, &[], &behind, &FakeWorld::new(tail), &mut |_| Ok(())).unwrap();
        assert!(
            matches!(&report.answer, Answer::End { system_message } if system_message.starts_with("Ralph loop complete")),
            "{:?}",
            report.answer
        );
        let after = state(&paths);
        assert_eq!(after.status, Status::Complete);
        let claim = after.last_claim.unwrap();
        assert!(
            claim.basis.contains("iteration 1's message"),
            "{}",
            claim.basis
        );
        assert_eq!(after.history[0].excerpt, format!("All fixed. {signal}"));

        // Without a behind stop before it, an older message never counts.
        let (_d, paths) = project(None);
        let tail = IterationTail {
            caught_up: true,
            final_message: Some("Looked again.".into()),
            previous_final_message: Some(format!("All fixed.\n{signal}")),
            ..Default::default()
        };
        run_stop(&paths, &[], &behind, &FakeWorld::new(tail), &mut |_| Ok(())).unwrap();
        assert_eq!(state(&paths).status, Status::Running);
    }

    #[test]
    fn a_stop_failure_pauses_the_owning_loop_and_logs_it() {
        let (_d, paths) = project(None);
        let world = FakeWorld {
            usage: UsageReading {
                last_api_error: Some(usage::ApiErrorLine {
                    status: Some(429),
                    resets_at: Some(1_900_000_000),
                    message: Some("rate limited".into()),
                    retry_in_secs: None,
                }),
                ..UsageReading::default()
            },
            ..FakeWorld::new(IterationTail::default())
        };
        let failure = |session: &str| StopFailure {
            session_id: Some(session.into()),
            transcript_path: Some("/t.jsonl".into()),
            error: Some("rate_limit".into()),
            error_details: None,
            last_assistant_message: Some("API Error: Request rejected (429)".into()),
            driver_settles: false,
        };
        // Another session's failure changes nothing.
        let before = state(&paths);
        run_stop_failure(&paths, &failure("someone-else"), &world).unwrap();
        assert_eq!(state(&paths), before);

        let report = run_stop_failure(&paths, &failure(SID), &world).unwrap();
        assert_eq!(report.answer, Answer::Allow);
        let after = state(&paths);
        assert_eq!(after.status, Status::Paused);
        assert_eq!(after.iteration, before.iteration);
        let because = after.paused_because.as_ref().unwrap();
        assert_eq!(because.kind, PauseKind::RateLimit);
        assert_eq!(because.http_status, Some(429));
        assert_eq!(because.message, "API Error: Request rejected (429)");
        assert_eq!(because.resume_at, Some(Timestamp::from_secs(1_900_000_000)));
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].event, LogEvent::Pause);
        assert!(logged[0].resume_at.is_some());
        // A second failure of a paused loop changes nothing more.
        let paused = state(&paths);
        run_stop_failure(&paths, &failure(SID), &world).unwrap();
        assert_eq!(state(&paths), paused);
    }

    #[test]
    fn a_stop_failure_tells_the_person_once_through_the_transaction() {
        let (dir, paths) = project(Some(r#"{"notify": "cat >> told.txt"}"#));
        let failure = StopFailure {
            session_id: Some(SID.into()),
            error: Some("rate_limit".into()),
            ..StopFailure::default()
        };
        let world = FakeWorld::new(IterationTail::default());
        run_stop_failure(&paths, &failure, &world).unwrap();
        let told = dir.path().join("told.txt");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let said = || std::fs::read_to_string(&told).unwrap_or_default();
        while !said().trim_end().ends_with('}') && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(said().contains("\"paused\""), "{}", said());
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        let events: Vec<_> = logged.iter().map(|e| e.event).collect();
        assert_eq!(events, [LogEvent::Pause, LogEvent::Notify]);
        assert!(
            logged[0]
                .reason
                .ends_with("paused (the client's StopFailure)"),
            "{:?}",
            logged[0].reason
        );
    }

    #[test]
    fn a_stop_failure_under_a_driver_that_settles_leaves_the_telling_to_it() {
        let (_dir, paths) = project(Some(r#"{"notify": "cat >> told.txt"}"#));
        let failure = StopFailure {
            session_id: Some(SID.into()),
            error: Some("rate_limit".into()),
            driver_settles: true,
            ..StopFailure::default()
        };
        run_stop_failure(&paths, &failure, &FakeWorld::new(IterationTail::default())).unwrap();
        let after = state(&paths);
        assert_eq!(after.status, Status::Paused);
        assert!(crate::notify::due(&after).is_some(), "still to be told");
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        let events: Vec<_> = logged.iter().map(|e| e.event).collect();
        assert_eq!(events, [LogEvent::Pause]);
    }

    #[test]
    fn a_session_end_interrupts_its_unwatched_loop_once() {
        let (_d, paths) = project(None);
        let world = FakeWorld::new(IterationTail::default());
        let before = state(&paths);
        run_session_end(&paths, Some("someone-else"), Some("logout"), &world).unwrap();
        run_session_end(&paths, None, Some("logout"), &world).unwrap();
        assert_eq!(state(&paths), before);
        run_session_end(&paths, Some(SID), Some("logout"), &world).unwrap();
        let after = state(&paths);
        assert_eq!(after.status, Status::Interrupted);
        assert!(
            after
                .ended_because
                .as_deref()
                .is_some_and(|w| w.contains("the session ended (logout)"))
        );
        run_session_end(&paths, Some(SID), Some("logout"), &world).unwrap();
        assert_eq!(state(&paths), after);
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].event, LogEvent::End);
    }

    #[test]
    fn a_hook_problem_is_an_audit_line_and_the_loop_stays_as_it_was() {
        let (_d, paths) = project(None);
        let before = state(&paths);
        let notes = record_hook_problem(
            &paths,
            Some(SID),
            "cannot read\nthe prompt",
            Timestamp::from_secs(5),
        )
        .unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        record_hook_problem(
            &paths,
            Some("someone-else"),
            "not this one",
            Timestamp::from_secs(5),
        )
        .unwrap();
        assert_eq!(state(&paths), before);
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].event, LogEvent::Problem);
        assert_eq!(logged[0].reason, "cannot read the prompt");
    }

    #[test]
    fn every_stop_is_logged_with_its_decision() {
        let (_d, paths) = project(None);
        let tail = IterationTail {
            caught_up: true,
            ..Default::default()
        };
        run_stop(
            &paths,
            &[],
            &stop("Working."),
            &FakeWorld::new(tail),
            &mut |_| Ok(()),
        )
        .unwrap();
        let logged = log::read_last(&paths.state_file(), 5).unwrap();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].event, LogEvent::Stop);
        assert_eq!(logged[0].iteration, 1);
        assert_eq!(logged[0].decision, Some(StopDecision::Block));
        assert_eq!(logged[0].status, Status::Running);
    }
}
