//! The loop's lifecycle as events: every change a driver, a command or the
//! person makes to a loop outside a stop's decision is one [`Event`], and
//! [`apply`] is the one pure function that turns (state, event) into the
//! new state and what must follow ([`Effect`]: an audit line, the replaced
//! loop kept). The I/O around it (the lock, the write,
//! the log, `notify`) belongs to the transaction module above, so no caller writes the
//! state itself. A new event is one variant here and one arm in [`apply`].

use crate::judge::state::{Carriers, FormulaRun, ItemState, LoopState, PausedBecause, Status};

use crate::observe::progress::Baseline;
use crate::observe::protected::ProtectedSnapshot;
use crate::observe::test_counts::CommandCounts;
use crate::observe::usage::UsageReading;
use crate::persist::log::{LogEntry, LogEvent};
use crate::time::Timestamp;
use crate::units::{TokenUsage, Usd};

/// Something that happens to a loop.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// A new loop starts, replacing the one there (which is kept).
    Started {
        /// The new loop, as its start shaped it.
        state: Box<LoopState>,
        /// What the audit line says.
        why: String,
    },
    /// The loop is cleared (`ralph-ctl reset`); it is kept in the history.
    Cleared,
    /// A client run's cost: the run's own (`session_total` false), or the
    /// total of the session so far, which the loop's cost keeps up with.
    Charged {
        /// The cost the client reported.
        cost: Usd,
        /// The client reports its session's total rather than the run's.
        session_total: bool,
    },
    /// Requests and tokens the transcript gained that no stop counted.
    UsageCounted(UsageReading),
    /// The loop ends with `status` (`at`: the iteration it stays at).
    Ended {
        /// How it ended.
        status: Status,
        /// Why, for the state, the log and the person.
        why: String,
        /// The iteration the ended loop stays at, when not the current one.
        at: Option<u32>,
    },
    /// The supervisor gives up on a paused loop that waiting cannot fix: `failed`.
    GaveUp {
        /// Why (the plan's reason).
        why: String,
        /// The supervision policy, for the log.
        policy: String,
    },
    /// An API failure ended the turn: the loop pauses with its requests counted.
    Paused {
        /// What failed and when to resume.
        because: PausedBecause,
        /// What the failed turn spent.
        reading: UsageReading,
        /// How the client ended, for the log.
        cause: String,
    },
    /// The client's own output named when the limit that paused the loop
    /// resets, which its `StopFailure` did not carry (a subscription's
    /// refused limit): the pause's resume time, when it has none.
    LimitResetLearnt {
        /// When the limit resets.
        at: Timestamp,
    },
    /// The loop's client went away while it was running or paused.
    Interrupted {
        /// What happened (`"Claude Code exited with code 1"`).
        cause: String,
    },
    /// A paused or interrupted loop is taken up again where it was.
    Resumed {
        /// What the log says.
        why: String,
        /// The supervisor resumed it (counted against its policy); else a person did.
        automatic: bool,
        /// The supervision policy, for the log.
        policy: String,
    },
    /// The supervisor decided about a paused loop without changing it.
    Waiting {
        /// Why (the plan's reason).
        why: String,
        /// When it resumes (RFC 3339), when it does.
        resume_at: Option<Timestamp>,
        /// The supervision policy, for the log.
        policy: String,
    },
    /// The running loop goes on in another session (a fresh iteration's).
    HandedOver {
        /// The session that carries it now.
        to: String,
    },
    /// The processes carrying the loop now (`None`: none are known).
    Carried(Option<Carriers>),
    /// The breaker's progress baseline (a worktree's start).
    Rebaselined(Option<Baseline>),
    /// A new worktree's test baseline, measured there after its
    /// `worktreeSetup`: what its claims are judged by.
    WorktreeBaselined(Box<WorktreeBaseline>),
    /// A formula run's record, as it stands now (its start, a step's counts).
    FormulaRecorded(Box<FormulaRun>),
    /// The formula's file as pinned at the run's start.
    FormulaPinned(Box<crate::pin::PinnedFormula>),
    /// What more checks (a formula's gates) resolve to at the run's start:
    /// added to the loop's `checkResolution`, a command or interpreter
    /// already there kept.
    ChecksResolved(Box<crate::observe::resolved::ResolvedChecks>),
    /// A formula's run ends inside a stop (a gate past its retries, a
    /// step's cap): the stop's own history line and audit line say why.
    StepEnded {
        /// How it ended.
        status: Status,
        /// Why.
        why: String,
        /// The iteration the ended loop stays at, when not the current one.
        at: Option<u32>,
    },
    /// A formula step passed and the loop goes on at the next one, at
    /// `iteration`; the stop's own lines say so.
    StepPassed {
        /// The first iteration of the next step.
        iteration: u32,
        /// What the log says.
        why: String,
    },
    /// The person's note for the next iteration (`ralph-ctl say`).
    NoteLeft(String),
    /// The person answered the question a waiting loop's agent asked
    /// (`ralph-ctl answer`): the loop runs again, and the question and the
    /// answer go in front of its next iteration's text, once (the question
    /// stays recorded until then: [`LoopState::answered`]). A loop that is
    /// not waiting is left as it is.
    Answered(String),
    /// The plan's usage windows as a headless session's client reported
    /// them while it ran: the hook's next stop judges by them.
    UsageWindowsSeen(std::collections::BTreeMap<String, crate::judge::state::WindowUse>),
    /// The note was put in front of an iteration's text (a driver's first
    /// iteration after an answer or a resume): dropped, with the answered
    /// question.
    NoteTaken,
    /// The config, baselines and snapshots the loop decides by, taken anew.
    Reloaded(Box<Reload>),
    /// Another `run --queue` process joined the queue run.
    Joined(Carriers),
    /// The hook could not go on at a stop (why, one line): a `problem`
    /// line of the audit log, the loop left as it was.
    ProblemSeen(String),
    /// ralph tidied the repository's `.git` after the agent (a file that
    /// sent git elsewhere put back, a lock file no process held removed):
    /// what, one line, for a `git` line of the audit log.
    GitTidied(String),
    /// A worker of a queue run took a backlog item.
    ItemTaken {
        /// The item's id.
        id: String,
        /// Its title.
        title: String,
        /// The worker.
        worker: String,
        /// The branch it is worked on.
        branch: String,
    },
    /// A backlog item's loop ended (or its worker stopped): its record,
    /// and its iterations and cost added to the run's.
    ItemSettled {
        /// The item's id.
        id: String,
        /// Where it stands now.
        status: ItemState,
        /// Iterations its loop ran this time.
        iterations: u32,
        /// What its loop cost this time.
        cost: Usd,
        /// The tokens its loop used this time.
        usage: TokenUsage,
        /// Why, for the record and the log.
        why: String,
        /// The base's commit once the item landed on it.
        landed: Option<String>,
    },
}

/// A worktree's test baseline (see [`Event::WorktreeBaselined`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WorktreeBaseline {
    /// The worktree's commit it was measured at.
    pub commit: String,
    /// Each verify command's test counts there.
    pub test_baseline: Vec<CommandCounts>,
    /// The verify commands that failed there.
    pub failures: Vec<crate::observe::verify::BaselineFailure>,
    /// What the checks resolve to there (`None`: kept).
    pub check_resolution: Option<crate::observe::resolved::ResolvedChecks>,
}

/// What `ralph-ctl reload` takes anew.
#[derive(Clone, Debug, PartialEq)]
pub struct Reload {
    /// The new pin.
    pub pinned: crate::pin::Pinned,
    /// The test baseline, per verify command.
    pub test_baseline: Vec<CommandCounts>,
    /// The protected files' snapshot, when it was taken again.
    pub protected_files: Option<Option<ProtectedSnapshot>>,
    /// What the checks resolve to, recorded anew (`None`: kept).
    pub check_resolution: Option<crate::observe::resolved::ResolvedChecks>,
    /// What the log says.
    pub why: String,
}

/// What must follow an event, carried out by the transaction that applied it.
#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// An audit line.
    Log(Box<LogEntry>),
    /// The loop being replaced or cleared is kept in the history first.
    Keep(Box<LoopState>),
}

/// The state after an event, and what must follow.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transition {
    /// The loop (`None`: cleared).
    pub state: Option<LoopState>,
    /// In order.
    pub effects: Vec<Effect>,
}

/// A change being made: the loop as the events so far left it, and what
/// must follow. The only way to change it is [`Draft::apply`], so a caller
/// can look at the state between two events (was the budget spent by that
/// charge?) and still change nothing itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Draft {
    transition: Transition,
    now: Timestamp,
}

impl Draft {
    /// A change of `state` at `now` (RFC 3339).
    pub fn new(state: Option<LoopState>, now: Timestamp) -> Self {
        Draft {
            transition: Transition {
                state,
                effects: Vec::new(),
            },
            now,
        }
    }

    /// The loop as the events so far left it.
    pub fn state(&self) -> Option<&LoopState> {
        self.transition.state.as_ref()
    }

    /// The time of the change.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Applies `event` (see [`apply`]).
    pub fn apply(&mut self, event: Event) {
        let state = self.transition.state.take();
        let Transition { state, effects } = apply(state, event, self.now);
        self.transition.state = state;
        self.transition.effects.extend(effects);
    }

    /// The new state and the effects, in order.
    pub fn finish(self) -> Transition {
        self.transition
    }
}

/// Applies `event` at `now` to `state` (`None`: no loop). An event that
/// needs a loop changes nothing without one.
pub fn apply(state: Option<LoopState>, event: Event, now: Timestamp) -> Transition {
    let mut effects = Vec::new();
    let log = |state: &LoopState, event: LogEvent, why: String| {
        Effect::Log(Box::new(LogEntry::about(state, event, now, why)))
    };
    let state = match (state, event) {
        (previous, Event::Started { state, why }) => {
            effects.extend(previous.map(|p| Effect::Keep(Box::new(p))));
            effects.push(log(&state, LogEvent::Start, why));
            Some(*state)
        }
        (previous, Event::Cleared) => {
            effects.extend(previous.map(|p| Effect::Keep(Box::new(p))));
            None
        }
        (None, _) => None,
        (Some(mut state), event) => {
            effects.extend(change(&mut state, event, now));
            Some(state)
        }
    };
    Transition { state, effects }
}

/// [`apply`] to an existing loop: an event that logs or has other effects
/// is taken here, the rest by [`record`].
fn change(state: &mut LoopState, event: Event, now: Timestamp) -> Vec<Effect> {
    let log = |state: &LoopState, event: LogEvent, why: String| {
        Effect::Log(Box::new(LogEntry::about(state, event, now, why)))
    };
    match event {
        Event::Started { .. } | Event::Cleared => unreachable!("handled by apply"),
        Event::Ended { status, why, at } => {
            end_at(state, status, &why, at, now);
            vec![log(state, LogEvent::End, why)]
        }
        Event::GaveUp { why, policy } => {
            state.end(Status::Failed, why.clone(), now);
            vec![by_policy(state, LogEvent::End, why, policy, now)]
        }
        Event::Paused {
            because,
            reading,
            cause,
        } => {
            let why = crate::judge::lifecycle::pause_for_api_failure(state, because, &reading, now);
            vec![log(state, LogEvent::Pause, format!("{why} ({cause})"))]
        }
        Event::Interrupted { cause } => interrupted(state, &cause, now),
        Event::Resumed {
            why,
            automatic,
            policy,
        } => {
            resume(state, automatic);
            vec![by_policy(state, LogEvent::Resume, why, policy, now)]
        }
        Event::Waiting {
            why,
            resume_at,
            policy,
        } => vec![waiting(state, why, resume_at, policy, now)],
        Event::Answered(answer) => answered(state, answer, now),
        Event::NoteLeft(text) => {
            add_note(state, &text);
            vec![log(state, LogEvent::Say, text)]
        }
        Event::Reloaded(reload) => {
            let why = take_reload(state, *reload);
            vec![log(state, LogEvent::Reload, why)]
        }
        Event::ProblemSeen(why) => vec![log(state, LogEvent::Problem, why)],
        Event::GitTidied(what) => vec![log(state, LogEvent::Git, what)],
        Event::ItemTaken {
            id,
            title,
            worker,
            branch,
        } => item_taken(state, &id, title, &worker, &branch, now),
        Event::ItemSettled {
            id,
            status,
            iterations,
            cost,
            usage,
            why,
            landed,
        } => {
            let spent = (iterations, cost, usage);
            item_settled(state, &id, status, spent, &why, landed, now)
        }
        quiet => {
            record(state, quiet, now);
            Vec::new()
        }
    }
}

/// [`change`] for an event that only updates the loop's state: nothing is
/// logged and nothing else happens.
fn record(state: &mut LoopState, event: Event, now: Timestamp) {
    match event {
        Event::Charged {
            cost,
            session_total,
        } => charge(state, cost, session_total),
        Event::UsageCounted(reading) => {
            crate::judge::lifecycle::take_usage(state, &reading, now);
        }
        Event::LimitResetLearnt { at } => {
            if state.status == Status::Paused
                && let Some(paused) = state.paused_because.as_mut()
            {
                paused.resume_at.get_or_insert(at);
            }
        }
        Event::HandedOver { to } => {
            if state.status == Status::Running {
                state.session_id = to;
                state.transcript = None;
            }
        }
        Event::Carried(carriers) => state.carriers = carriers,
        Event::Rebaselined(baseline) => {
            if state.status == Status::Running {
                state.breaker.progress = baseline;
            }
        }
        Event::WorktreeBaselined(measured) => {
            if state.status == Status::Running {
                take_worktree_baseline(state, *measured);
            }
        }
        Event::FormulaRecorded(run) => state.formula = Some(*run),
        Event::FormulaPinned(formula) => {
            if let Some(pinned) = state.pinned.as_mut() {
                pinned.formula = Some(*formula);
            }
        }
        Event::ChecksResolved(more) => add_resolved_checks(state, *more),
        Event::StepEnded { status, why, at } => {
            end_at(state, status, &why, at, now);
            amend_last_record(state, &why);
        }
        Event::StepPassed { iteration, why } => pass_step(state, iteration, &why),
        Event::UsageWindowsSeen(windows) => state.usage_windows.extend(windows),
        Event::NoteTaken => {
            state.hint = None;
            state.question = None;
        }
        Event::Joined(process) => join(state, process),
        Event::Started { .. }
        | Event::Cleared
        | Event::Ended { .. }
        | Event::GaveUp { .. }
        | Event::Paused { .. }
        | Event::Interrupted { .. }
        | Event::Resumed { .. }
        | Event::Waiting { .. }
        | Event::Answered(_)
        | Event::NoteLeft(_)
        | Event::Reloaded(_)
        | Event::ProblemSeen(_)
        | Event::GitTidied(_)
        | Event::ItemTaken { .. }
        | Event::ItemSettled { .. } => unreachable!("handled by change"),
    }
}

/// A new worktree's own baseline, measured there, in place of the run's.
fn take_worktree_baseline(state: &mut LoopState, measured: WorktreeBaseline) {
    let WorktreeBaseline {
        commit,
        test_baseline,
        failures,
        check_resolution,
    } = measured;
    state.test_baseline = test_baseline;
    state.baseline_failures = failures;
    state.baseline_commit = Some(commit);
    if let Some(resolution) = check_resolution {
        state.check_resolution = Some(resolution);
    }
}

/// Commands and interpreters resolved since the start added to the
/// record; what it already holds stays as it was.
fn add_resolved_checks(state: &mut LoopState, more: crate::observe::resolved::ResolvedChecks) {
    let record =
        state
            .check_resolution
            .get_or_insert_with(|| crate::observe::resolved::ResolvedChecks {
                path: more.path.clone(),
                python_path: more.python_path.clone(),
                ..Default::default()
            });
    for command in more.commands {
        if !record.commands.iter().any(|c| c.command == command.command) {
            record.commands.push(command);
        }
    }
    for python in more.pythons {
        if !record
            .pythons
            .iter()
            .any(|p| p.interpreter == python.interpreter)
        {
            record.pythons.push(python);
        }
    }
}

/// One log line about `state` as it is now.
fn logged(state: &LoopState, kind: LogEvent, why: String, now: Timestamp) -> Effect {
    Effect::Log(Box::new(LogEntry::about(state, kind, now, why)))
}

/// A loop still going when its client exited marked `interrupted` by
/// `cause`, and its end logged; nothing for a loop already over.
fn interrupted(state: &mut LoopState, cause: &str, now: Timestamp) -> Vec<Effect> {
    if !crate::judge::lifecycle::interrupt(state, cause, now) {
        return Vec::new();
    }
    let why = state.ended_because.clone().unwrap_or_default();
    vec![logged(state, LogEvent::End, why, now)]
}

/// The person's answer to a waiting loop's question, left as the next
/// iteration's note, and logged; the loop runs again. Nothing for a loop
/// that is not waiting.
fn answered(state: &mut LoopState, answer: String, now: Timestamp) -> Vec<Effect> {
    if state.status != Status::Waiting {
        return Vec::new();
    }
    let question = state
        .question
        .as_ref()
        .map_or_else(String::new, |q| q.text.clone());
    add_note(
        state,
        &format!("You asked (RALPH_ASK): {question}\nThe person's answer: {answer}"),
    );
    // Kept until the answer is sent: a loop answered while its
    // client was still ending is not one the client left.
    let asked = state.question.take();
    state.resume();
    state.question = asked;
    vec![logged(state, LogEvent::Answer, answer, now)]
}

/// The config files read again and re-pinned; the drift they showed is
/// gone. Returns why, for the log.
fn take_reload(state: &mut LoopState, reload: Reload) -> String {
    let Reload {
        pinned,
        test_baseline,
        protected_files,
        check_resolution,
        why,
    } = reload;
    state.pinned = Some(pinned);
    state.config_drift = None;
    state.test_baseline = test_baseline;
    if let Some(protected) = protected_files {
        state.protected_files = protected;
    }
    if let Some(resolution) = check_resolution {
        state.check_resolution = Some(resolution);
    }
    why
}

/// What a loop's cost comes to after a client run's `cost`: the session's
/// total so far (`session_total`), or one more run's.
fn charge(state: &mut LoopState, cost: Usd, session_total: bool) {
    // The client's own count covers what was estimated until now.
    state.uncharged_usd = Usd::default();
    state.cost_usd = if session_total {
        state.cost_usd.max(cost)
    } else {
        Usd(state.cost_usd.0.saturating_add(cost.0))
    };
}

/// Ends the loop (or a formula's step) `status` because `why`, at
/// iteration `at` when given.
fn end_at(state: &mut LoopState, status: Status, why: &str, at: Option<u32>, now: Timestamp) {
    if let Some(at) = at {
        state.iteration = at;
    }
    state.end(status, why.to_string(), now);
}

/// A log line naming the supervision policy that decided it.
fn by_policy(
    state: &LoopState,
    kind: LogEvent,
    why: String,
    policy: String,
    now: Timestamp,
) -> Effect {
    let mut entry = LogEntry::about(state, kind, now, why);
    entry.policy = Some(policy);
    Effect::Log(Box::new(entry))
}

/// A paused loop running again; its automatic resumes counted in a row.
fn resume(state: &mut LoopState, automatic: bool) {
    state.resume();
    state.auto_resumes = if automatic {
        state.auto_resumes.saturating_add(1)
    } else {
        0
    };
}

/// The log line of a paused loop left waiting: until `resume_at` (kept
/// as the pause's `resumePlanned` when the API gave no time), or for a
/// person (a pause line).
fn waiting(
    state: &mut LoopState,
    why: String,
    resume_at: Option<Timestamp>,
    policy: String,
    now: Timestamp,
) -> Effect {
    // The time the log gives is the loop's: `status` and the supervisor's
    // next look read it back.
    if let (Status::Paused, Some(at), Some(paused)) =
        (state.status, resume_at, state.paused_because.as_mut())
        && paused.resume_at.is_none()
    {
        paused.resume_planned = Some(at);
    }
    let kind = if resume_at.is_some() {
        LogEvent::Wait
    } else {
        LogEvent::Pause
    };
    let mut entry = LogEntry::about(state, kind, now, why);
    entry.policy = Some(policy);
    if resume_at.is_some() {
        entry.resume_at = resume_at;
    }
    Effect::Log(Box::new(entry))
}

/// A formula's step passed inside the stop: the loop runs on at
/// `iteration` with the next step.
fn pass_step(state: &mut LoopState, iteration: u32, why: &str) {
    state.status = Status::Running;
    state.ended_at = None;
    state.ended_because = None;
    state.iteration = iteration;
    amend_last_record(state, why);
}

/// Another process joined the queue run: the most recent few are kept
/// (older ones are long gone).
fn join(state: &mut LoopState, process: Carriers) {
    if let Some(queue) = state.queue.as_mut() {
        if queue.joined.len() >= 32 {
            queue.joined.remove(0);
        }
        queue.joined.push(process);
    }
}

/// Queue item `id` taken by `worker`: working on `branch` from `now`,
/// and logged; nothing when the loop is no queue run.
fn item_taken(
    state: &mut LoopState,
    id: &str,
    title: String,
    worker: &str,
    branch: &str,
    now: Timestamp,
) -> Vec<Effect> {
    let Some(queue) = state.queue.as_mut() else {
        return Vec::new();
    };
    let item = queue.items.entry(id.to_string()).or_default();
    item.title = title;
    item.status = ItemState::Working;
    item.worker = worker.to_string();
    item.branch = Some(branch.to_string());
    item.taken = item.taken.saturating_add(1);
    item.why = None;
    item.taken_at = Some(now);
    item.settled_at = None;
    let why = format!("item {id} taken by {worker} on branch {branch}");
    vec![logged(state, LogEvent::Item, why, now)]
}

/// A queue item's loop ended: its record, and its iterations, cost and
/// tokens (`spent`) added to the run's; the base's new commit when it
/// `landed`, and logged. Nothing when the run has no such item (but the
/// base's commit).
fn item_settled(
    state: &mut LoopState,
    id: &str,
    status: ItemState,
    (iterations, cost, usage): (u32, Usd, TokenUsage),
    why: &str,
    landed: Option<String>,
    now: Timestamp,
) -> Vec<Effect> {
    let Some(queue) = state.queue.as_mut() else {
        return Vec::new();
    };
    if landed.is_some() {
        queue.base_head = landed;
    }
    let Some(item) = queue.items.get_mut(id) else {
        return Vec::new();
    };
    item.status = status;
    item.iterations = item.iterations.saturating_add(iterations);
    item.cost_usd = Usd(item.cost_usd.0.saturating_add(cost.0));
    item.why = Some(why.to_string());
    item.usage.add(&usage);
    item.settled_at = Some(now);
    state.iteration = state.iteration.saturating_add(iterations);
    state.cost_usd = Usd(state.cost_usd.0.saturating_add(cost.0));
    state.usage.add(&usage);
    // Items that failed in a row: the run's error count.
    match status {
        ItemState::Failed => state.outcome_errors = state.outcome_errors.saturating_add(1),
        ItemState::Done => state.outcome_errors = 0,
        _ => {}
    }
    let why = format!("item {id} {}: {why}", status.as_str());
    vec![logged(state, LogEvent::Item, why, now)]
}

/// Adds `why` to the last history record: what a stop's driver decided
/// about it, said on the stop's own line.
fn amend_last_record(state: &mut LoopState, why: &str) {
    if let Some(last) = state.history.last_mut() {
        last.why = format!("{}; {why}", last.why);
    }
}

/// Adds `note` to the notes waiting for the next iteration, after any left
/// before it.
fn add_note(state: &mut LoopState, note: &str) {
    state.hint = Some(match state.hint.take() {
        Some(earlier) => format!("{earlier}\n{note}"),
        None => note.to_string(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_secs(1767226200); // 2026-01-01T00:10:00Z

    fn running() -> LoopState {
        let mut state = LoopState::new("s1".into(), 10, Timestamp::from_secs(1767225600));
        state.iteration = 3;
        state
    }

    #[test]
    fn a_queue_run_records_its_items_and_adds_their_iterations_and_cost() {
        use crate::judge::state::QueueRun;
        let mut state = running();
        state.queue = Some(QueueRun {
            source: "plan:PLAN.md".into(),
            merge: "rebase".into(),
            base: "main".into(),
            ..QueueRun::default()
        });
        let taken = |state: LoopState, id: &str| {
            apply(
                Some(state),
                Event::ItemTaken {
                    id: id.into(),
                    title: format!("title {id}"),
                    worker: "7-1".into(),
                    branch: format!("ralph/item-{id}"),
                },
                NOW,
            )
        };
        let settled = |state: LoopState, id: &str, status: ItemState, dollars: f64| {
            apply(
                Some(state),
                Event::ItemSettled {
                    id: id.into(),
                    status,
                    iterations: 2,
                    cost: Usd::from_dollars(dollars),
                    usage: TokenUsage {
                        input: 100,
                        output: 10,
                        ..TokenUsage::default()
                    },
                    why: "because".into(),
                    landed: (status == ItemState::Done).then(|| "c0ffee".to_string()),
                },
                NOW,
            )
        };
        let t = taken(state, "a");
        assert_eq!(
            logged(&t.effects),
            [(
                LogEvent::Item,
                "item a taken by 7-1 on branch ralph/item-a".into()
            )]
        );
        let t = settled(t.state.unwrap(), "a", ItemState::Failed, 0.5);
        assert_eq!(
            logged(&t.effects),
            [(LogEvent::Item, "item a failed: because".into())]
        );
        let s = t.state.unwrap();
        assert_eq!(
            (s.iteration, s.cost_usd, s.outcome_errors),
            (5, Usd::from_dollars(0.5), 1)
        );
        // Taken again: counted; done: the failures in a row start over.
        let s = taken(s, "a").state.unwrap();
        let s = settled(s, "a", ItemState::Done, 0.25).state.unwrap();
        let item = &s.queue.as_ref().unwrap().items["a"];
        assert_eq!(
            (item.status, item.taken, item.iterations, item.cost_usd),
            (ItemState::Done, 2, 4, Usd::from_dollars(0.75))
        );
        // Its tokens, and the run's, add up too; when it was taken and
        // settled is kept for the dashboard.
        assert_eq!((item.usage.input, item.usage.output), (200, 20));
        assert_eq!((s.usage.input, s.usage.output), (200, 20));
        assert_eq!((item.taken_at, item.settled_at), (Some(NOW), Some(NOW)));
        let retaken = taken(s.clone(), "a").state.unwrap();
        assert_eq!(retaken.queue.unwrap().items["a"].settled_at, None);
        assert_eq!((s.iteration, s.outcome_errors), (7, 0));
        assert_eq!(
            s.queue.as_ref().unwrap().base_head.as_deref(),
            Some("c0ffee")
        );
        // An item never taken, or a loop that is no queue run: nothing.
        let none = settled(s.clone(), "zzz", ItemState::Done, 1.0);
        assert_eq!((none.state.unwrap(), none.effects.len()), (s, 0));
        let plain = taken(running(), "a");
        assert_eq!((plain.state.unwrap(), plain.effects.len()), (running(), 0));
    }

    fn logged(effects: &[Effect]) -> Vec<(LogEvent, String)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Log(entry) => Some((entry.event, entry.reason.clone())),
                Effect::Keep(_) => None,
            })
            .collect()
    }

    #[test]
    fn an_ending_is_logged_and_told_and_may_stay_at_an_earlier_iteration() {
        let t = apply(
            Some(running()),
            Event::Ended {
                status: Status::GateFailed,
                why: "gate g failed".into(),
                at: Some(2),
            },
            NOW,
        );
        let state = t.state.unwrap();
        assert_eq!(state.status, Status::GateFailed);
        assert_eq!(state.iteration, 2);
        assert_eq!(state.ended_at, Some(NOW));
        assert_eq!(
            logged(&t.effects),
            vec![(LogEvent::End, "gate g failed".into())]
        );
    }

    #[test]
    fn a_start_keeps_the_loop_it_replaces_and_a_reset_clears_it() {
        let fresh = LoopState::new("s2".into(), 5, NOW);
        let t = apply(
            Some(running()),
            Event::Started {
                state: Box::new(fresh.clone()),
                why: "started".into(),
            },
            NOW,
        );
        assert_eq!(t.state.as_ref(), Some(&fresh));
        assert_eq!(t.effects[0], Effect::Keep(Box::new(running())));
        assert_eq!(
            logged(&t.effects),
            vec![(LogEvent::Start, "started".into())]
        );
        let t = apply(Some(running()), Event::Cleared, NOW);
        assert_eq!(t.state, None);
        assert_eq!(t.effects, vec![Effect::Keep(Box::new(running()))]);
        assert_eq!(apply(None, Event::Cleared, NOW), Transition::default());
    }

    #[test]
    fn an_event_for_a_loop_changes_nothing_without_one() {
        let t = apply(None, Event::NoteLeft("hi".into()), NOW);
        assert_eq!(t, Transition::default());
    }

    #[test]
    fn a_run_cost_adds_and_a_session_total_is_kept_up_with() {
        let mut state = running();
        state.cost_usd = Usd::from_dollars(1.0);
        let charged = |state: LoopState, dollars: f64, session_total: bool| {
            apply(
                Some(state),
                Event::Charged {
                    cost: Usd::from_dollars(dollars),
                    session_total,
                },
                NOW,
            )
            .state
            .unwrap()
        };
        assert_eq!(
            charged(state.clone(), 0.5, false).cost_usd,
            Usd::from_dollars(1.5)
        );
        assert_eq!(
            charged(state.clone(), 0.5, true).cost_usd,
            Usd::from_dollars(1.0)
        );
        assert_eq!(charged(state, 2.0, true).cost_usd, Usd::from_dollars(2.0));
    }

    #[test]
    fn the_client_s_cost_replaces_the_estimate() {
        let mut state = running();
        state.uncharged_usd = Usd::from_dollars(0.0036);
        assert_eq!(state.cost_so_far(), "~$0.0036 (estimated from tokens)");
        let t = apply(
            Some(state),
            Event::Charged {
                cost: Usd::from_dollars(0.01),
                session_total: true,
            },
            NOW,
        );
        let charged = t.state.unwrap();
        assert_eq!(charged.uncharged_usd, Usd(0));
        assert_eq!(charged.cost_so_far(), "$0.0100");
    }

    #[test]
    fn the_resume_time_the_log_gives_is_the_one_status_gives() {
        let mut paused = running();
        paused.pause(crate::judge::state::PausedBecause {
            kind: crate::judge::state::PauseKind::RateLimit,
            http_status: Some(429),
            message: "rate limited".into(),
            resume_at: None,
            retry_after_secs: None,
            resume_planned: None,
            at: NOW,
        });
        let config = crate::judge::config::Config::default();
        let planned = match crate::judge::lifecycle::plan_resume(&config, &paused, NOW.secs()) {
            crate::judge::lifecycle::ResumePlan::ResumeAt { at, .. } => at,
            other => panic!("{other:?}"),
        };
        let t = apply(
            Some(paused),
            Event::Waiting {
                why: "backoff".into(),
                resume_at: Some(Timestamp::from_secs(planned)),
                policy: "conservative".into(),
            },
            NOW,
        );
        let waiting = t.state.unwrap();
        // Asked again 31 s later (`status`, the supervisor's next look): the same time.
        let later = crate::judge::lifecycle::plan_resume(&config, &waiting, NOW.secs() + 31);
        assert!(
            matches!(later, crate::judge::lifecycle::ResumePlan::ResumeAt { at, .. } if at == planned),
            "{later:?}, planned {planned}"
        );
    }

    #[test]
    fn an_interrupt_of_an_ended_loop_changes_nothing() {
        let mut ended = running();
        ended.end(Status::Complete, "claim accepted".into(), NOW);
        let t = apply(
            Some(ended.clone()),
            Event::Interrupted {
                cause: "SIGTERM".into(),
            },
            NOW,
        );
        assert_eq!(t.state, Some(ended));
        assert!(t.effects.is_empty());
        let t = apply(
            Some(running()),
            Event::Interrupted {
                cause: "SIGTERM".into(),
            },
            NOW,
        );
        assert_eq!(t.state.unwrap().status, Status::Interrupted);
        assert_eq!(t.effects.len(), 1);
    }

    #[test]
    fn an_answer_runs_a_waiting_loop_again_with_the_question_and_answer_as_its_note() {
        use crate::judge::state::Question;
        let mut waiting = running();
        waiting.wait_for_answer(Question {
            text: "Which port?".into(),
            iteration: 3,
            at: NOW,
        });
        // Only a waiting loop takes an answer.
        let t = apply(Some(running()), Event::Answered("8080".into()), NOW);
        assert_eq!(t.state, Some(running()));
        assert!(t.effects.is_empty());
        let t = apply(Some(waiting), Event::Answered("8080".into()), NOW);
        assert_eq!(t.effects.len(), 1, "an answer line");
        let answered = t.state.unwrap();
        assert_eq!(answered.status, Status::Running);
        assert!(answered.answered(), "the question is kept until sent");
        assert_eq!(
            answered.hint.as_deref(),
            Some("You asked (RALPH_ASK): Which port?\nThe person's answer: 8080")
        );
        let sent = apply(Some(answered), Event::NoteTaken, NOW).state.unwrap();
        assert_eq!((sent.hint, sent.question), (None, None));
    }

    #[test]
    fn a_person_resuming_starts_the_count_again_the_supervisor_adds_one() {
        let mut paused = running();
        paused.status = Status::Paused;
        paused.auto_resumes = 2;
        let resumed = |automatic| {
            apply(
                Some(paused.clone()),
                Event::Resumed {
                    why: "resumed".into(),
                    automatic,
                    policy: "always".into(),
                },
                NOW,
            )
        };
        let by_supervisor = resumed(true);
        assert_eq!(by_supervisor.state.as_ref().unwrap().auto_resumes, 3);
        assert_eq!(by_supervisor.state.unwrap().status, Status::Running);
        assert_eq!(resumed(false).state.unwrap().auto_resumes, 0);
    }

    #[test]
    fn only_a_running_loop_is_handed_over() {
        let t = apply(Some(running()), Event::HandedOver { to: "s2".into() }, NOW);
        assert_eq!(t.state.unwrap().session_id, "s2");
        let mut paused = running();
        paused.status = Status::Paused;
        let t = apply(Some(paused), Event::HandedOver { to: "s2".into() }, NOW);
        assert_eq!(t.state.unwrap().session_id, "s1");
    }

    #[test]
    fn notes_add_up_and_each_is_logged() {
        let t = apply(Some(running()), Event::NoteLeft("one".into()), NOW);
        let t = apply(t.state, Event::NoteLeft("two".into()), NOW);
        assert_eq!(t.state.unwrap().hint.as_deref(), Some("one\ntwo"));
        assert_eq!(logged(&t.effects), vec![(LogEvent::Say, "two".into())]);
    }

    #[test]
    fn a_passed_step_reopens_the_loop_at_the_next_iteration() {
        let mut done = running();
        done.end(Status::Complete, "claim accepted".into(), NOW);
        let t = apply(
            Some(done),
            Event::StepPassed {
                iteration: 4,
                why: "step a passed".into(),
            },
            NOW,
        );
        let state = t.state.unwrap();
        assert_eq!((state.status, state.iteration), (Status::Running, 4));
        assert_eq!(state.ended_because, None);
    }
}
