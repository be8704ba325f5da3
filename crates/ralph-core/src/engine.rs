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
use crate::observe::plan::{self, PlanReport};
use crate::observe::progress;
use crate::observe::prompt_text::{self, PromptError};
use crate::observe::protected::{self, ProtectedSnapshot};
use crate::observe::resolved::{self, ResolvedChecks};
use crate::observe::transcript::{self, IterationTail, TranscriptError};
use crate::observe::usage::{self, UsageReading};
use crate::observe::verify::{self, VerifyCommand, VerifyResult};
use crate::own_git;
use crate::paths::ProjectPaths;
use crate::persist::log::{LogEntry, LogEvent};
use crate::persist::store::{Reread, StateStore, StoreError};
use crate::pin::{self, Pinned};
use crate::room::RoomWanted;
use crate::time::Timestamp;
use crate::transaction::{self, Whose};
use crate::walls::{Walls, WallsWanted};

mod answer;
mod observing;
mod other_hooks;
mod rehearse;
mod world;

pub use answer::SESSION_STAYS_OPEN;
use answer::*;
use observing::*;
pub use other_hooks::{StopFailure, record_hook_problem, run_session_end, run_stop_failure};
pub use rehearse::{Rehearsal, rehearse_claim};
pub use world::{RealWorld, World, check_walls};

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
    observed_again(
        &config,
        stop,
        world,
        owned,
        state,
        &mut observed,
        &mut notes,
    );
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
    let driver_effects = driver_settles(&mut outcome, state, &answer, settle, now);
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

/// The driver's own events (`settle`) applied to the decided state (or
/// to `state`, when the stop decided no change): the outcome's new state
/// becomes the settled one, and the effects the driver's events have are
/// returned, for the same transaction.
fn driver_settles(
    outcome: &mut decision::Outcome,
    state: &LoopState,
    answer: &Answer,
    settle: &mut dyn FnMut(&mut Draft, &Answer),
    now: Timestamp,
) -> Vec<Effect> {
    let decided = outcome.new_state.clone();
    let mut draft = Draft::new(Some(decided.clone().unwrap_or_else(|| state.clone())), now);
    settle(&mut draft, answer);
    let Transition {
        state: settled,
        effects,
    } = draft.finish();
    if decided.is_some() || settled.as_ref() != Some(state) {
        outcome.new_state = settled;
    }
    effects
}

/// What the stop observed before its lock, made true of `state`, the loop
/// as it is under the lock (`owned` before it): a progress reading against
/// a baseline no longer the loop's tells nothing, and usage another stop
/// counted meanwhile is counted from where it left off.
fn observed_again(
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    owned: &LoopState,
    state: &LoopState,
    observed: &mut Observation,
    notes: &mut Vec<String>,
) {
    if state.breaker.progress != owned.breaker.progress {
        observed.progress = progress::Reading::default();
    }
    if state.transcript != owned.transcript {
        let counted = config.supervision.max_calls_per_hour.is_some();
        observed.usage = read_usage(world, stop, state, counted, notes);
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
    let rehearsal = claim.assessment.basis == rehearse::REHEARSAL_BASIS;
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

#[cfg(test)]
mod tests;
