//! `ralph-ctl status`: a readable summary of the loop, or its JSON.

use std::io::{self, Read, Write};
use std::path::Path;

use ralph_core::exit_codes;
use ralph_core::files;
use ralph_core::judge::breaker;
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::decision::MessageSource;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{IterationRecord, LoopState, PausedBecause, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::{StateStore, StoreError};
use ralph_core::pin::{self, ConfigDrift};
use ralph_core::text::{printable, printable_json};
use ralph_core::units::TokenUsage;

use crate::driver::transcripts::now_secs;
use crate::error::CmdResult;

/// `ralph-ctl status`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct StatusArgs {
    /// Print the state object as JSON instead.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `ralph-ctl status` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: StatusArgs) -> CmdResult {
    run(paths, args.json, &mut std::io::stdout())
}

/// How many recent stops the readable summary lists.
const RECENT: usize = 10;

/// Writes the state to `out`; a corrupt state, or one ralph did not write,
/// is shown with its problem (exit 1), never with what it claims.
pub(crate) fn run(paths: &ProjectPaths, json: bool, out: &mut dyn Write) -> CmdResult {
    // Read only: a loop whose launcher was killed outright is shown as
    // interrupted, never recorded (nor its `notify` run) from here; whoever
    // next changes the loop (`run --resume`, `cancel`, `reset`) records it.
    let store = StateStore::new(paths);
    // The one thing status changes: a `.git/config.lock` a killed queue
    // run left (`git config` fails on it) goes, and is said.
    if let Some(line) = crate::driver::config_hold::looked_at(paths)
        && !json
    {
        let _ = writeln!(out, "{line}");
    }
    let (code, written) = match store.read() {
        Ok(state) => (exit_codes::OK, show(paths, state.as_ref(), json, out)),
        Err(
            e @ (StoreError::Corrupt { .. }
            | StoreError::Unverified { .. }
            | StoreError::Stale { .. }),
        ) => (
            exit_codes::ERROR,
            show_corrupt(paths, &store, &e, json, out),
        ),
        Err(e) => return Err(e.into()),
    };
    super::written(written.and_then(|()| out.flush()), code)
}

fn show(
    paths: &ProjectPaths,
    state: Option<&LoopState>,
    json: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    // What differs from the pin now, even before a stop has seen it.
    let state = state.map(|s| {
        let mut s = s.clone();
        s.config_drift = current_drift(paths, &s);
        s
    });
    let state = state.as_ref();
    if json {
        // Data: JSON's escapes keep every control character of the
        // agent's text out of the output (DEL and C1 too, see `printable_json`).
        let json = serde_json::to_string_pretty(&state).expect("state serializes");
        return writeln!(out, "{}", printable_json(&json));
    }
    match state {
        Some(state) => {
            let config = pin::loop_config(paths, &ProcessEnv, state);
            if let Err(e) = &config {
                let problem = e.to_string();
                writeln!(out, "(configuration problem: {})", printable(&problem))?;
            }
            let state = crate::driver::finish::believed(paths, state.clone());
            out.write_all(summary(paths, &state, config.as_ref().ok(), now_secs()).as_bytes())?;
            remote_backlog(paths, &state, out)
        }
        None if !paths.ralph_dir().is_dir() => writeln!(
            out,
            "No Ralph loop in {}, and ralph is not installed here: `ralph-ctl run --task \"TEXT\"` \
             installs it and starts a loop on TEXT; `ralph-ctl init` installs it without starting \
             (PROMPT.md, the launcher, the Stop hook).",
            paths.root.display()
        ),
        None if prompt_is_the_template(paths) => writeln!(
            out,
            "No Ralph loop in {} (no state file). PROMPT.md is still the template, which a loop \
             refuses: `ralph-ctl run --task \"TEXT\"` starts one on TEXT, or write the task into \
             PROMPT.md, then run .claude/ralph/ralph-audit.sh.",
            paths.root.display()
        ),
        None => writeln!(
            out,
            "No Ralph loop in {} (no state file). Start one with .claude/ralph/ralph-audit.sh.",
            paths.root.display()
        ),
    }
}

/// Whether the project's PROMPT.md (as the config names it) is still the
/// template `init` wrote, which a loop refuses to start on.
fn prompt_is_the_template(paths: &ProjectPaths) -> bool {
    let prompt_file = Config::load(paths, &ProcessEnv)
        .map_or_else(|_| Config::default().prompt_file, |c| c.prompt_file);
    ralph_core::observe::prompt_text::read_prompt(&paths.resolve(&prompt_file))
        .is_ok_and(|text| ralph_core::observe::prompt_text::is_template(&text))
}

/// The drift of `state`'s pinned files: for a running or paused loop, as
/// the files are now (first seen when the last stop recorded the same
/// content, else now); for an ended one, as recorded.
pub(crate) fn current_drift(paths: &ProjectPaths, state: &LoopState) -> Option<ConfigDrift> {
    let Some(pinned) = &state.pinned else {
        return state.config_drift.clone();
    };
    if !state.status.is_live() {
        return state.config_drift.clone();
    }
    let mut changes = pin::config_changes(paths, &ProcessEnv, pinned);
    changes.extend(
        pinned
            .formula
            .as_ref()
            .and_then(|f| crate::formula::changes(paths, f)),
    );
    let now = ConfigDrift::of(changes, ralph_core::time::Timestamp::now())?;
    match &state.config_drift {
        Some(recorded) if recorded.digest == now.digest => Some(recorded.clone()),
        _ => Some(now),
    }
}

fn show_corrupt(
    paths: &ProjectPaths,
    store: &StateStore,
    e: &StoreError,
    json: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    if json {
        let mut body = serde_json::json!({"error": e.to_string(), "path": store.path()});
        if matches!(e, StoreError::Stale { .. }) {
            body["stale"] = serde_json::Value::Bool(true);
        }
        let json = serde_json::to_string_pretty(&body).expect("json");
        return writeln!(out, "{}", printable_json(&json));
    }
    if matches!(e, StoreError::Stale { .. }) {
        // One line: what it is, and what to do; nothing it says is shown.
        return writeln!(
            out,
            "Ralph loop in {}: {}",
            paths.root.display(),
            printable(&e.to_string())
        );
    }
    writeln!(
        out,
        "Ralph loop state in {} is unusable:",
        paths.root.display()
    )?;
    writeln!(out, "  {}", printable(&e.to_string()))?;
    if matches!(e, StoreError::Unverified { .. }) {
        // What it says is not shown: none of it is believed.
        return Ok(());
    }
    let head = head_of(store.path());
    if !head.is_empty() {
        writeln!(out, "  it begins: {head:?}")?;
    }
    Ok(())
}

/// The first 300 bytes of a corrupt state file, when it is a regular file:
/// never through a link, never waiting on a FIFO, never reading a device.
fn head_of(path: &Path) -> String {
    const HEAD: u64 = 300;
    if !std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()) {
        return String::new();
    }
    let Ok(file) = files::open_without_waiting(path) else {
        return String::new();
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = file.take(HEAD).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// For a paused loop whose launcher still lives and waits to resume it:
/// that it resumes on its own, and when (nobody else may take it up).
fn waiting_under_launcher(state: &LoopState, config: Option<&Config>, now: u64) -> Option<String> {
    if state.status != Status::Paused {
        return None;
    }
    crate::driver::carriers::still_carried(state)?;
    let pid = state
        .carriers
        .as_ref()
        .and_then(|c| c.driver)
        .map(|d| format!(" (pid {})", d.pid))
        .unwrap_or_default();
    let when = match config.map(|c| lifecycle::plan_resume(c, state, now)) {
        Some(lifecycle::ResumePlan::ResumeAt { at, .. }) => {
            format!(
                "resumes it on its own at {}",
                ralph_core::time::rfc3339_of_secs(at)
            )
        }
        _ => "waits to resume it".to_string(),
    };
    Some(format!(
        "the launcher{pid} {when}; Ctrl-C in its terminal stops it"
    ))
}

/// The readable summary of a state at `now` (seconds since the epoch, for
/// the last hour's requests); `config` supplies the breaker's thresholds
/// and the supervisor's budgets. Much of it is the agent's text (messages,
/// a question, a claim, its code's verify output): the whole is
/// [`printable`], no control character of it reaching the terminal.
pub(crate) fn summary(
    paths: &ProjectPaths,
    state: &LoopState,
    config: Option<&Config>,
    now: u64,
) -> String {
    let mut l = Lines(format!("Ralph loop in {}\n", paths.root.display()));
    head(&mut l, paths, state);
    position(&mut l, state);
    formula_steps(&mut l, state);
    queue_items(&mut l, state);
    times_and_next(&mut l, state, config, now);
    spending(&mut l, state, config, now);
    breaker_lines(&mut l, state, config);
    claim_lines(&mut l, state);
    recent_stops(&mut l, state);
    printable(&l.0).into_owned()
}

/// The text `summary` builds: labelled lines, and lines as they are.
struct Lines(String);

impl Lines {
    /// `  label:     value`.
    fn line(&mut self, label: &str, value: String) {
        self.0.push_str(&format!("  {label:<11} {value}\n"));
    }

    /// A line (or lines) as it is.
    fn raw(&mut self, text: &str) {
        self.0.push_str(text);
    }
}

/// The status, and what stands in its way: drift of the pinned config,
/// the hook's last problem, a pause.
fn head(l: &mut Lines, paths: &ProjectPaths, state: &LoopState) {
    l.line(
        "status:",
        if crate::driver::carriers::left_behind(state) {
            format!("{} (interrupted: its driver is gone; `ralph-ctl run --resume` takes it up again, \
                 `ralph-ctl cancel` or `reset` records its end)", state.status.as_str())
        } else if lifecycle::completion_on_record(state) {
            state.status.as_str().to_string()
        } else {
            "complete, but not recorded by ralph: no accepted completion claim is on record (the state was changed outside ralph)".to_string()
        },
    );
    if let Some(drift) = &state.config_drift {
        l.line("config:", drift.describe());
    }
    if let Some(stale) = ralph_core::persist::log::stale(&paths.state_file()) {
        l.line("log:", stale.to_string());
    }
    if let Some(problem) =
        ralph_core::persist::log::last_problem(&paths.state_file(), &state.session_id)
    {
        l.line(
            "hook:",
            format!("could not go on at {}: {}", problem.at, problem.reason),
        );
    }
    if let (Status::Waiting, Some(question)) = (state.status, &state.question) {
        l.line(
            "asks:",
            format!(
                "{} (iteration {}, at {})",
                question.text, question.iteration, question.at
            ),
        );
        l.line(
            "answer:",
            "`ralph-ctl answer TEXT` (from your own terminal)".into(),
        );
    }
    if let (Status::Paused, Some(paused)) = (state.status, &state.paused_because) {
        l.line(
            "paused:",
            format!("{} at {}: {}", cause(paused), paused.at, paused.message),
        );
        if let Some(at) = &paused.resume_at {
            l.line("not before:", at.to_string());
        }
    }
}

/// Where the loop is: its iteration, session and context mode.
fn position(l: &mut Lines, state: &LoopState) {
    l.line(
        "iteration:",
        format!("{} of {}", state.iteration, state.max_iterations),
    );
    l.line("session:", state.session_id.clone());
    if state.fresh_context {
        l.line(
            "context:",
            "fresh: a client process and session per iteration (the session above is the latest)"
                .into(),
        );
    }
}

/// A formula run's steps: each one's model, iterations, cost and gates.
fn formula_steps(l: &mut Lines, state: &LoopState) {
    if let Some(run) = &state.formula {
        l.line("formula:", format!("{}, {}", run.name, run.position()));
        for (i, step) in run.steps.iter().enumerate() {
            let mut parts = vec![format!(
                "{} iteration{}, {}",
                step.iterations,
                if step.iterations == 1 { "" } else { "s" },
                step.cost_usd
            )];
            if let Some(model) = &step.model {
                parts.insert(0, model.clone());
            }
            for gate in &step.gates {
                let result = match gate.passed {
                    Some(true) => "passed",
                    Some(false) => "failed",
                    None => "not run",
                };
                parts.push(format!(
                    "gate {} {result} ({} of {} retries used)",
                    gate.name,
                    gate.failures.min(gate.retries),
                    gate.retries
                ));
            }
            let done = if step.completed_at.is_some() {
                ", done"
            } else if step.skipped {
                ", skipped (--from a later step)"
            } else if i == run.step && state.status == Status::Running {
                ", running"
            } else {
                ""
            };
            l.line(
                "",
                format!("{}. {}: {}{done}", i + 1, step.id, parts.join(", ")),
            );
        }
    }
}

/// A queue run shared on a git remote (`--remote`): the whole backlog as
/// the remote's records hold it, every machine's, in a few lines (the
/// count, then each item some worker holds now); a remote that cannot be
/// read is said, not fatal.
fn remote_backlog(paths: &ProjectPaths, state: &LoopState, out: &mut dyn Write) -> io::Result<()> {
    let Some((source, remote)) = state
        .queue
        .as_ref()
        .and_then(|q| Some((q.source.as_str(), q.remote.as_deref()?)))
    else {
        return Ok(());
    };
    let mut listed = Vec::new();
    let text = match super::queue::remote_queue(paths, source, remote, None, false, &mut listed) {
        Ok(_) => {
            let listed = String::from_utf8_lossy(&listed).into_owned();
            let mut lines = listed.lines();
            let mut text = format!("  remote:     {}\n", lines.next().unwrap_or_default());
            for line in lines.filter(|l| l.trim_start().starts_with("claimed ")) {
                text.push_str(&format!("             {}\n", line.trim_start()));
            }
            text.push_str(&format!(
                "             (`ralph-ctl queue {source} --remote {remote}` lists every item)\n"
            ));
            text
        }
        Err(e) => format!("  remote:     {remote} could not be read: {e}\n"),
    };
    out.write_all(printable(&text).as_bytes())
}

/// A queue run's items: counts, then one line each.
fn queue_items(l: &mut Lines, state: &LoopState) {
    use ralph_core::judge::state::ItemState;
    let Some(queue) = &state.queue else {
        return;
    };
    let lands = match queue.merge.as_str() {
        "none" => format!("left on their branches (from {})", queue.base),
        _ => format!("landed on {}", queue.base),
    };
    l.line(
        "queue:",
        format!(
            "{}, {}; items are {lands}",
            queue.source,
            queue.counts_line()
        ),
    );
    for (id, item) in &queue.items {
        let mut line = format!(
            "{id} {}: \"{}\", worker {}, {} iteration{}, {}",
            item.status.as_str(),
            item.title,
            item.worker,
            item.iterations,
            if item.iterations == 1 { "" } else { "s" },
            item.cost_usd
        );
        if let Some(branch) = item
            .branch
            .as_ref()
            .filter(|_| item.status != ItemState::Done)
        {
            line.push_str(&format!(", branch {branch}"));
        }
        if let Some(why) = item.why.as_ref().filter(|_| item.status != ItemState::Done) {
            line.push_str(&format!(" ({why})"));
        }
        l.line("", line);
    }
}

/// When it started, stopped and ended, why, and what to do next.
fn times_and_next(l: &mut Lines, state: &LoopState, config: Option<&Config>, now: u64) {
    l.line("started:", state.started_at.to_string());
    // A queue run's own loop never stops: its items do (listed above).
    if state.queue.is_none() {
        l.line(
            "last stop:",
            match (state.last_run_at, state.status.is_live()) {
                (Some(t), _) => t.to_string(),
                (None, true) => "none yet".into(),
                (None, false) => "none".into(),
            },
        );
    }
    if let Some(ended) = &state.ended_at {
        l.line("ended:", ended.to_string());
    }
    if let Some(because) = &state.ended_because {
        l.line("because:", because.clone());
    }
    match (state.status, &state.paused_because) {
        (Status::Failed, Some(paused)) => l.line(
            "fix:",
            if paused.kind.is_transient() {
                paused.kind.fix().to_string()
            } else {
                format!(
                    "{}; then `ralph-ctl run --resume` goes on",
                    paused.kind.fix()
                )
            },
        ),
        (Status::BudgetExhausted, _) => l.line(
            "fix:",
            "raise maxCostUsd (or RALPH_MAX_COST_USD); then `ralph-ctl run --resume` goes on"
                .into(),
        ),
        _ => {
            if let Some(next) =
                waiting_under_launcher(state, config, now).or_else(|| lifecycle::next_step(state))
            {
                l.line("next:", next);
            }
        }
    }
}

/// The findings the agent last reported, in words. A loop that completed
/// had its claim of done accepted after that count, so the count is said
/// as what it was then, not as findings that remain.
fn findings(state: &LoopState) -> String {
    match (state.last_findings_count, state.status) {
        (None, _) => "not reported".into(),
        (Some(n), Status::Complete) if n > 0 => {
            let at = state
                .history
                .iter()
                .rev()
                .find(|r| r.findings.is_some())
                .map(|r| format!(" (iteration {})", r.iteration))
                .unwrap_or_default();
            format!("{n} at the last count{at}, before the claim of done was accepted")
        }
        (Some(n), _) => format!("{n} remain"),
    }
}

/// Findings, outcome budgets, cost, requests, tokens and automatic resumes.
fn spending(l: &mut Lines, state: &LoopState, config: Option<&Config>, now: u64) {
    l.line("findings:", findings(state));
    if state.outcome_errors > 0 || state.outcome_gate_blocked > 0 {
        let budgets = config.map(|c| c.outcome_budgets).unwrap_or_default();
        l.line(
            "outcomes:",
            format!(
                "RALPH_OUTCOME error {}/{} in a row, gate-blocked {}/{} in a row",
                state.outcome_errors,
                budgets.errors,
                state.outcome_gate_blocked,
                budgets.gate_blocked
            ),
        );
    }
    let supervision = config.map(|c| &c.supervision);
    let max_cost = supervision.and_then(|s| s.max_cost);
    if state.cost_known() || max_cost.is_some() {
        l.line(
            "cost:",
            match max_cost {
                Some(max) => format!("{} of maxCostUsd {max}", state.cost_so_far()),
                None => state.cost_so_far(),
            },
        );
    }
    let calls = state.calls_in_last_hour(now);
    let max_calls = supervision.and_then(|s| s.max_calls_per_hour);
    if calls > 0 || max_calls.is_some() {
        l.line(
            "requests:",
            match max_calls {
                Some(max) => format!("{calls} in the last hour, of maxCallsPerHour {max}"),
                None => format!("{calls} in the last hour"),
            },
        );
    }
    if !state.usage.is_zero() {
        l.line("tokens:", tokens(&state.usage));
    }
    let pause_at = supervision.and_then(|s| s.pause_at_utilization);
    let mark = pause_at
        .map(|p| format!(", pauses at {} (pauseAtUtilization)", p.percent()))
        .unwrap_or_default();
    for (name, window) in &state.usage_windows {
        l.line(
            "usage:",
            format!("{name} window {}{mark}", window.describe()),
        );
    }
    if state.auto_resumes > 0 {
        l.line(
            "resumes:",
            match config {
                Some(c) => format!(
                    "{} automatic in a row, of {} ({} policy)",
                    state.auto_resumes,
                    lifecycle::max_auto_resumes(c),
                    c.supervision.policy.as_str()
                ),
                None => format!("{} automatic in a row", state.auto_resumes),
            },
        );
    }
}

/// The circuit breaker: its state, each signal against its threshold, its
/// last transition.
fn breaker_lines(l: &mut Lines, state: &LoopState, config: Option<&Config>) {
    let b = &state.breaker;
    l.line("breaker:", b.state.as_str().to_string());
    let signals: Vec<String> = breaker::SIGNALS
        .iter()
        .map(|spec| {
            let count = b.counters.get(spec.signal);
            match config {
                Some(c) => format!("{} {count}/{}", spec.label, spec.trips_at(&c.breaker)),
                None => format!("{} {count}", spec.label),
            }
        })
        .collect();
    l.line("signals:", signals.join(", "));
    if let Some(tr) = &b.last_transition {
        l.line(
            "transition:",
            format!(
                "{} → {} at iteration {} ({}): {}",
                tr.from.as_str(),
                tr.to.as_str(),
                tr.iteration,
                tr.at,
                tr.reason
            ),
        );
    }
}

/// The test baseline and the last completion claim with its gates and checks.
fn claim_lines(l: &mut Lines, state: &LoopState) {
    for base in &state.test_baseline {
        l.line(
            "baseline:",
            format!(
                "tests of `{}` at the start: {}",
                base.command,
                base.counts.describe()
            ),
        );
    }
    if let Some(claim) = &state.last_claim {
        l.line(
            "last claim:",
            format!(
                "iteration {} ({}), {}; claimed by {}",
                claim.iteration,
                claim.mode.as_str(),
                if claim.accepted {
                    "accepted"
                } else {
                    "rejected"
                },
                claim.basis
            ),
        );
        for gate in &claim.gates {
            let first = gate.detail.lines().next().unwrap_or_default();
            l.line(
                "  gate:",
                format!(
                    "{} {}: {first}",
                    gate.gate.as_str(),
                    if gate.passed { "passed" } else { "FAILED" }
                ),
            );
        }
        if let Some(last) = claim.verification.last() {
            l.line(
                "  verify:",
                format!(
                    "`{}` exit {} in {} ms{}",
                    last.command,
                    last.exit_code
                        .map_or_else(|| "none".into(), |c| c.to_string()),
                    last.duration_ms,
                    if last.timed_out { " (timed out)" } else { "" }
                ),
            );
            for result in &claim.verification {
                if let Some(counts) = &result.counts {
                    l.line(
                        "  tests:",
                        format!("`{}` {}", result.command, counts.describe()),
                    );
                }
            }
            for tail in last.output_tail.lines() {
                l.raw(&format!("      | {tail}\n"));
            }
        }
    }
}

/// Why a stop judged without its own final message, and where that message
/// was judged: the client (2.0.77's terminal UI under load) had not written
/// it to the transcript when the hook stopped waiting for it, so the stop's
/// reason ("ended without a completion claim") can sit beside a `said:` that
/// ends in the completion signal, filled in by the next stop.
fn behind_note(record: &IterationRecord, state: &LoopState) -> String {
    let waited = ralph_core::observe::transcript::CATCH_UP_WAIT.as_secs();
    let judged_later = state
        .history
        .iter()
        .any(|r| r.iteration == record.iteration.saturating_add(1));
    let later = if judged_later {
        "the next stop judged it (a completion claim in it counts there)"
    } else {
        "the next stop judges it (a completion claim in it counts there)"
    };
    format!(
        "the client had not written this message to its transcript when the hook had waited \
         {waited} s for it, so this stop was judged without it; {later}"
    )
}

/// The last stops, newest last.
fn recent_stops(l: &mut Lines, state: &LoopState) {
    if !state.history.is_empty() {
        l.raw("Recent stops (newest last):\n");
        let skip = state.history.len().saturating_sub(RECENT);
        for record in &state.history[skip..] {
            l.raw(&format!(
                "  #{:<3} {}  {:<5}  {}\n",
                record.iteration,
                record.at,
                match record.decision {
                    ralph_core::judge::state::StopDecision::Block => "block",
                    ralph_core::judge::state::StopDecision::Allow => "allow",
                },
                record.why
            ));
            if !record.excerpt.is_empty() {
                l.raw(&format!("        said: {}\n", record.excerpt));
            }
            if record.message_source == MessageSource::TranscriptBehind {
                l.raw(&format!("        note: {}\n", behind_note(record, state)));
            }
            if let Some(error) = &record.error {
                l.raw(&format!("        error: {error}\n"));
            }
            if let Some(transition) = &record.breaker {
                l.raw(&format!("        breaker: {transition}\n"));
            }
            if let Some(claim) = &record.claim {
                l.raw(&format!("        claim: {claim}\n"));
            }
            if record.calls > 0 || !record.usage.is_zero() {
                l.raw(&format!(
                    "        used: {} request(s), tokens {}\n",
                    record.calls,
                    tokens(&record.usage)
                ));
            }
        }
    }
}

/// What paused a loop: its kind and the HTTP status, when known.
fn cause(paused: &PausedBecause) -> String {
    match paused.http_status {
        Some(status) => format!("{} (HTTP {status})", paused.kind.as_str()),
        None => paused.kind.as_str().to_string(),
    }
}

/// Token counts, as `1,234 in / 56 out / 7,890 cache read / 0 cache write`.
fn tokens(usage: &TokenUsage) -> String {
    format!(
        "{} in / {} out / {} cache read / {} cache write",
        thousands(usage.input),
        thousands(usage.output),
        thousands(usage.cache_read),
        thousands(usage.cache_creation)
    )
}

/// `n` with a comma between each group of three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_run_shows_its_counts_and_each_item() {
        let state = crate::testdir::queue_run_state();
        let paths = ProjectPaths::new("/nowhere");
        let text = summary(&paths, &state, None, 1767225700);
        assert!(
            text.contains("  queue:      plan:PLAN.md, 3 items taken: 1 done, 1 working, 1 needs-review; items are landed on main\n"),
            "{text}"
        );
        assert!(
            text.contains("plan-a done: \"add <b>\", worker 4242-1, 2 iterations, $0.5000\n"),
            "{text}"
        );
        assert!(
            text.contains("plan-b needs-review: \"fix it\", worker 4242-1, 2 iterations, $0.5000, branch ralph/item-fix-it (branch ralph/item-fix-it conflicts with main in a.rs)"),
            "{text}"
        );
    }

    /// A stop that blocked at `iteration`, with `why`, what the agent said
    /// and where its message came from.
    fn blocked_stop(
        iteration: u32,
        why: &str,
        excerpt: &str,
        source: MessageSource,
    ) -> IterationRecord {
        IterationRecord {
            excerpt: excerpt.into(),
            message_source: source,
            ..IterationRecord::new(
                iteration,
                ralph_core::time::Timestamp::from_secs(10),
                ralph_core::judge::state::StopDecision::Block,
                why.into(),
            )
        }
    }

    #[test]
    fn a_complete_loop_does_not_say_findings_remain() {
        let paths = ProjectPaths::new("/nowhere");
        let mut state = LoopState::new("s".into(), 5, ralph_core::time::Timestamp::from_secs(0));
        state.iteration = 3;
        state.last_findings_count = Some(1);
        let stop = |iteration, findings| IterationRecord {
            findings,
            ..blocked_stop(iteration, "", "", MessageSource::Input)
        };
        state.history = vec![stop(2, Some(1)), stop(3, None)];
        let running = summary(&paths, &state, None, 30);
        assert!(running.contains("  findings:   1 remain\n"), "{running}");
        state.status = Status::Complete;
        let complete = summary(&paths, &state, None, 30);
        assert!(
            complete.contains(
                "  findings:   1 at the last count (iteration 2), before the claim of done was accepted\n"
            ),
            "{complete}"
        );
        state.last_findings_count = Some(0);
        let none_left = summary(&paths, &state, None, 30);
        assert!(
            none_left.contains("  findings:   0 remain\n"),
            "{none_left}"
        );
    }

    #[test]
    fn a_stop_judged_before_its_message_was_written_says_so_and_where_it_was_judged() {
        let paths = ProjectPaths::new("/nowhere");
        let mut state = LoopState::new("s".into(), 5, ralph_core::time::Timestamp::from_secs(0));
        state.iteration = 3;
        let stop = blocked_stop;
        let behind = stop(
            2,
            "iteration 2 ended without a completion claim",
            "All done. <promise>DONE</promise>",
            MessageSource::TranscriptBehind,
        );
        state.history = vec![behind.clone()];
        let waiting = summary(&paths, &state, None, 30);
        assert!(
            waiting.contains(
                "        said: All done. <promise>DONE</promise>\n        note: the client had not written this \
                 message to its transcript when the hook had waited 5 s for it, so this stop was judged \
                 without it; the next stop judges it (a completion claim in it counts there)\n"
            ),
            "{waiting}"
        );
        state.history.push(stop(
            3,
            "the claim passed its gates",
            "",
            MessageSource::TranscriptBehind,
        ));
        state.history[1].message_source = MessageSource::Input;
        let judged = summary(&paths, &state, None, 30);
        assert!(
            judged.contains(
                "without it; the next stop judged it (a completion claim in it counts there)\n"
            ),
            "{judged}"
        );
        assert_eq!(judged.matches("note: the client").count(), 1, "{judged}");
    }

    #[test]
    fn thousands_are_separated() {
        for (n, text) in [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (123_456, "123,456"),
            (1_234_567, "1,234,567"),
            (u64::MAX, "18,446,744,073,709,551,615"),
        ] {
            assert_eq!(thousands(n), text);
        }
    }
}
