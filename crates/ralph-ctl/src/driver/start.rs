//! Opening a loop: a fresh running state owned by one session, for
//! `ralph-ctl start`, `run`, the plugin's `loop-start` and `run --task`,
//! and clearing one for `reset`.

use ralph_core::events::Event;
use ralph_core::judge::config::{Config, EnvSource, FileLayers, MAX_ITERATIONS_LIMIT};
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{LoopState, RunMode};
use ralph_core::observe::hook_input;
use ralph_core::observe::progress;
use ralph_core::observe::prompt_text;
use ralph_core::observe::registration;
use ralph_core::observe::runnable::Severity;
use ralph_core::observe::verify;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::{StateStore, StoreError};
use ralph_core::pin::Pinned;
use ralph_core::time;
use ralph_core::transaction;

use std::time::SystemTime;

use crate::error::CtlError;
use crate::session_id;

/// A loop [`start_loop`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Started {
    /// The session that owns the loop.
    pub(crate) session_id: String,
    /// Its iteration cap.
    pub(crate) max_iterations: u32,
    /// Whether its checks are walled (its `sandbox` setting).
    pub(crate) walls: ralph_core::walls::WallsWanted,
}

/// What `ralph-ctl run` starts a loop with: how it runs it (for `run
/// --resume`), and the settings its command line gives.
pub(crate) struct ByRun<'a> {
    /// How the run runs the loop.
    pub(crate) mode: RunMode,
    /// The run's settings over the environment.
    pub(crate) env: &'a dyn EnvSource,
}

/// Writes a fresh `running` state owned by `session` (default: a new UUID),
/// unless a loop is running, the breaker is open, or the state is corrupt
/// (`force` replaces them), or the prompt is still the template
/// (`allow_template` runs it anyway). A `fresh` loop runs each iteration in
/// a client process and session of its own (`ralph-ctl run --fresh`);
/// `run`: what `ralph-ctl run` starts it with (`None` for `ralph-ctl
/// start`).
pub(crate) fn start_loop(
    paths: &ProjectPaths,
    session: Option<String>,
    max_iterations: Option<u32>,
    force: bool,
    allow_template: bool,
    fresh: bool,
    run: Option<ByRun<'_>>,
) -> Result<Started, CtlError> {
    let env: &dyn EnvSource = match &run {
        Some(run) => run.env,
        None => &ralph_core::judge::config::ProcessEnv,
    };
    let run_mode = run.as_ref().map(|run| run.mode.clone());
    let (config, pin) = pinned_config(paths, env)?;
    // Fail now, not at the first stop, when the prompt cannot be used.
    let prompt_path = paths.resolve(&config.prompt_file);
    let prompt_text = prompt_text::read_prompt(&prompt_path)?;
    if prompt_text::is_template(&prompt_text) && !allow_template {
        return Err(CtlError::Refused(format!(
            "{} is still the template (it says \"{}\"): write the task into it, saying what done means, then start again; \
             or start with --force to run it as it is",
            prompt_path.display(),
            prompt_text::TEMPLATE_PLACEHOLDER
        )));
    }
    prompt_text::read_guardrails(&paths.guardrails_file())?;
    let max = match max_iterations {
        Some(n) if (1..=MAX_ITERATIONS_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(CtlError::BadArgument(format!(
                "--max-iterations {n} is invalid: a whole number from 1 to {MAX_ITERATIONS_LIMIT}"
            )));
        }
        None => config.max_iterations,
    };
    open_loop(paths, &config, pin, session, max, force, fresh, |state| {
        state.run_mode = run_mode;
    })
}

/// The config files as they are now, read once: the configuration they
/// make (validated, the environment on top) and their pin, which the loop
/// started with them decides by (see `ralph_core::pin`).
pub(crate) fn pinned_config(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
) -> Result<(Config, Pinned), CtlError> {
    let layers = FileLayers::read(paths, env)?;
    let config = Config::from_layers(paths, env, &layers)?;
    Ok((config, Pinned::of(&layers, time::Timestamp::now())))
}

/// Refuses a start the loop there stands in the way of, as read now
/// (`open_loop` checks again under the lock): one a live driver carries,
/// and, unless `force`, one running or ended with the breaker open.
pub(crate) fn refuse_if_in_the_way(
    paths: &ProjectPaths,
    config: &Config,
    force: bool,
) -> Result<(), CtlError> {
    let store = StateStore::new(paths);
    if let Ok(Some(current)) = store.read()
        && let Some(refusal) = crate::driver::carriers::still_carried(&current)
    {
        return Err(CtlError::Refused(refusal));
    }
    if !force
        && let Ok(snapshot) = store.snapshot()
        && let Some(refusal) =
            lifecycle::start_refusal(snapshot.state.as_ref(), config, SystemTime::now())
    {
        return Err(CtlError::Refused(refusal.describe(&paths.root)));
    }
    Ok(())
}

/// Writes a new `running` loop (after the checks every start makes: no
/// loop running, an open breaker cooled down, a corrupt state set aside
/// only with `force`), archiving the one it replaces; `shape` adds what
/// this kind of loop carries (a formula, a task of its own). The loop is
/// pinned to `pin`, the config files `config` was made of.
#[allow(clippy::too_many_arguments)]
pub(crate) fn open_loop(
    paths: &ProjectPaths,
    config: &Config,
    pin: Pinned,
    session: Option<String>,
    max: u32,
    force: bool,
    fresh: bool,
    shape: impl FnOnce(&mut LoopState),
) -> Result<Started, CtlError> {
    let session = owning_session(session)?;
    // ralph's key, made (or checked) before anything here runs the agent's
    // code (the test baseline imports its modules): a key first made after
    // that code ran could be one it put in the key's place.
    ralph_core::persist::mac::ensure_made().map_err(StoreError::from)?;
    // The project's own caches for the agent and the checks, made and
    // seeded from the person's before any check runs (see walls::caches).
    ralph_core::walls::caches::prepare(&paths.project().root);

    // A loop whose launcher was killed outright is not running any more.
    if let Some(left) = crate::driver::carriers::reconcile(paths)? {
        crate::output::say_err!(
            "ralph-ctl: the previous loop (session {}) was left running: {}; recorded as interrupted",
            left.session_id,
            left.ended_because.as_deref().unwrap_or_default()
        );
    }
    // The test baseline runs the verify commands (minutes, maybe): outside
    // the lock, and not for a start that the state refuses anyway.
    refuse_if_in_the_way(paths, config, force)?;
    // Said once, at the start, and only where the Stop hook runs the check
    // (a loop in one session): a fresh iteration's and a queue item's are
    // the driver's, which no hook timeout cuts short.
    if !fresh {
        fit_hook_timeout(paths, config);
    }
    // What each check resolves to, before it first runs: a claim must run
    // the same (see ralph_core::observe::resolved).
    let check_resolution = (!config.completion.verify.is_empty()).then(|| {
        let walls =
            ralph_core::engine::check_walls(&paths.root, &paths.root, config.sandbox.walls());
        ralph_core::observe::resolved::resolve(&paths.root, &config.completion.verify, None, &walls)
    });
    let baseline = start_baseline(paths, config)?;
    let protected_files = protected_files(paths, config)?;
    let git_record = git_record(paths)?;
    ignore_runtime(paths)?;
    let now = time::Timestamp::now();
    let mut state = LoopState::new(session.clone(), max, now);
    state.fresh_context = fresh;
    state.test_baseline = baseline.counts;
    state.baseline_failures = baseline.failures;
    state.protected_files = protected_files;
    state.check_resolution = check_resolution;
    state.git_record = git_record;
    state.pinned = Some(pin);
    // The baseline the first stop is compared with: no change by then is no progress.
    state.breaker.progress = progress::baseline(&paths.root);
    shape(&mut state);
    let why = format!(
        "started, at most {max} iterations{}",
        if fresh {
            ", a fresh client session each"
        } else {
            ""
        }
    );
    // The loop this one replaces is kept (`ralph-ctl history`), never lost.
    let replaced = transaction::replace(paths, |current| {
        refuse_replacing(paths, config, current, force)?;
        Ok(Event::Started {
            state: Box::new(state),
            why,
        })
    })
    .map_err(|e| match e {
        CtlError::Store(e @ StoreError::NotKept(_)) => CtlError::Refused(e.to_string()),
        e => e,
    })?;
    if let Some(aside) = &replaced.quarantined {
        crate::output::say_err!(
            "ralph-ctl: moved the state ralph could not use to {}",
            aside.display()
        );
    }
    for note in &replaced.notes {
        crate::output::say_err!("ralph-ctl: {note}");
    }
    // A loop that runs nothing to check a claim says so as it starts (an
    // item's run has said it for every item).
    if config.completion.verify.is_empty() && !paths.is_item() {
        crate::output::say_err!("ralph-ctl: {}", NOT_VERIFIED);
    }
    Ok(Started {
        session_id: session,
        max_iterations: max,
        walls: config.sandbox.walls(),
    })
}

/// The session that will own the loop: `session` when it is a valid id,
/// else a new UUID.
fn owning_session(session: Option<String>) -> Result<String, CtlError> {
    match session {
        Some(id) if hook_input::is_valid_session_id(&id) => Ok(id),
        Some(id) => Err(CtlError::BadArgument(format!(
            "--session-id {id:?} is invalid: 1 to 200 letters, digits, '-', '_', '.' or ':'"
        ))),
        None => Ok(session_id::new_uuid()),
    }
}

/// Makes room for the verify commands in the Stop hook's registered
/// timeout, as `init` sizes it, when `timeoutSeconds` grew since: Claude
/// Code kills a hook that outlives its timeout, and the loop would end
/// `interrupted` at its first claim. Said, and only ever raised; where the
/// file cannot be rewritten, a warning instead (a hook registered
/// elsewhere, the plugin's, has a timeout of its own). `ralph-ctl reload`
/// does the same for the config it pins.
pub(crate) fn fit_hook_timeout(paths: &ProjectPaths, config: &Config) {
    let verify_total = verify::total_timeout(&config.completion.verify);
    if verify_total == 0 {
        return;
    }
    let file = match registration::registration_file(paths) {
        Ok(Some(file)) => file,
        Ok(None) => return,
        Err(e) => {
            crate::output::say_err!("ralph-ctl: warning: {e}");
            return;
        }
    };
    let timeout = match registration::registered_timeout(&file) {
        Ok(timeout) => timeout.unwrap_or(CLIENT_HOOK_TIMEOUT_SECS),
        Err(e) => {
            crate::output::say_err!("ralph-ctl: warning: {e}");
            return;
        }
    };
    let Some(warning) = registration::timeout_warning(verify_total, timeout) else {
        return;
    };
    let wanted = u32::try_from(verify_total + 30).unwrap_or(u32::MAX);
    match rewrite_hook_timeout(&file, wanted) {
        Ok(()) => crate::output::say_err!(
            "ralph-ctl: the Stop hook's timeout in {} was {timeout} s, less than the verify commands \
             may take ({verify_total} s): set to {wanted} s, as `ralph-ctl init` sizes it; Claude \
             Code sessions started from now on use it, and one already running may keep the \
             old timeout until it is restarted",
            file.display()
        ),
        Err(why) => crate::output::say_err!("ralph-ctl: warning: {warning} ({why})"),
    }
}

/// What Claude Code gives a command hook that names no timeout.
const CLIENT_HOOK_TIMEOUT_SECS: u64 = 60;

/// Sets ralph's Stop hook's timeout in the settings file `file` to
/// `timeout`, everything else kept; written atomically.
fn rewrite_hook_timeout(file: &std::path::Path, timeout: u32) -> Result<(), CtlError> {
    let unusable = |problem: String| CtlError::Settings {
        path: file.to_path_buf(),
        problem,
    };
    let command = registration::registered_command(file)?
        .ok_or_else(|| unusable("no command registered".into()))?;
    let text = std::fs::read_to_string(file).map_err(CtlError::io("read", file))?;
    let mut settings: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| unusable(format!("not JSON: {e}")))?;
    crate::settings::merge_stop_hook(&mut settings, &command, timeout)
        .map_err(|e| unusable(e.to_string()))?;
    #[cfg(unix)]
    let mode = std::fs::metadata(file).map_or(0o644, |m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o777
    });
    #[cfg(not(unix))]
    let mode = 0o644;
    ralph_core::persist::atomic::write_file(
        file,
        crate::commands::init::json_text(&settings).as_bytes(),
        mode,
    )
    .map_err(CtlError::io("write", file))
}

/// The test baseline a new loop starts from: measured now, or for an item
/// of a queue run the run's, taken once in the main checkout (its worktree
/// measures its own before its agent starts: `driver/worktree_env.rs`).
fn start_baseline(paths: &ProjectPaths, config: &Config) -> Result<verify::Baseline, CtlError> {
    if !paths.is_item() {
        return measured_baseline(paths, config, check_may_not_run());
    }
    Ok(StateStore::new(&paths.project())
        .read()
        .ok()
        .flatten()
        .map(|run| verify::Baseline {
            counts: run.test_baseline,
            failures: run.baseline_failures,
        })
        .unwrap_or_default())
}

/// Refuses to replace the loop `current` (or a state that could not be
/// read) under the lock: never a live driver's loop, running or waiting to
/// resume; without `force`, never a loop a start may not replace, nor a
/// corrupt state.
fn refuse_replacing(
    paths: &ProjectPaths,
    config: &Config,
    current: Result<Option<&LoopState>, &StoreError>,
    force: bool,
) -> Result<(), CtlError> {
    match current {
        Ok(current) => {
            if let Some(refusal) = current.and_then(crate::driver::carriers::still_carried) {
                return Err(CtlError::Refused(refusal));
            }
            if !force
                && let Some(refusal) = lifecycle::start_refusal(current, config, SystemTime::now())
            {
                return Err(CtlError::Refused(refusal.describe(&paths.root)));
            }
            Ok(())
        }
        Err(e) if !force => Err(CtlError::Refused(format!("{e}; or start with --force"))),
        Err(_) => Ok(()),
    }
}

/// The files in `.git` that send git elsewhere, as they are at the loop's
/// start (`None` outside git); a repository whose `commondir` already
/// leads git elsewhere is refused, naming the file and the fix.
fn git_record(
    paths: &ProjectPaths,
) -> Result<Option<ralph_core::own_git::record::GitRecord>, CtlError> {
    use ralph_core::own_git::{GitPlace, PlaceError, record};
    match GitPlace::find(&paths.root) {
        Ok(place) => Ok(Some(record::record(&place))),
        Err(PlaceError::NoRepository(_)) => Ok(None),
        Err(e) => Err(CtlError::Refused(e.to_string())),
    }
}

/// What a loop without a completion check is told at its start.
pub(crate) const NOT_VERIFIED: &str = "not verified: no verify command in .claude/ralph/config.json, so a claim of done ends the loop \
     without running anything; add your test command with `ralph-ctl init --verify CMD`";

/// The files under `protectedPaths` now, with their content hashes; an
/// error when the project cannot be listed in time (a claim could never
/// be checked against them).
pub(crate) fn protected_files(
    paths: &ProjectPaths,
    config: &Config,
) -> Result<Option<ralph_core::observe::protected::ProtectedSnapshot>, CtlError> {
    let patterns = &config.completion.protected_paths;
    if patterns.is_empty() {
        return Ok(None);
    }
    match ralph_core::observe::protected::snapshot(&paths.root, patterns) {
        Some(snapshot) => Ok(Some(snapshot)),
        None => Err(CtlError::Refused(format!(
            "the files under protectedPaths ({}) could not be listed within {} s or {} entries; \
             remove protectedPaths from .claude/ralph/config.json, or start in a smaller folder",
            patterns.join(", "),
            ralph_core::observe::protected::WALK_TIME.as_secs(),
            ralph_core::observe::protected::WALK_LIMIT
        ))),
    }
}

/// Runs the verify commands once, before the first iteration, and keeps
/// each one's test counts: a claim that runs fewer tests, or skips more,
/// is rejected (unless `allowFewerTests`). Failing tests here are the
/// loop's task, not a problem.
///
/// A check that cannot run (its program or runner not found, a usage
/// error: `ralph_core::observe::runnable`) would reject every claim
/// whatever the agent does: the start is refused, naming what failed and
/// the fix, unless `may_not_run` (`--check-may-not-run`: making it run is
/// the task), which starts saying so.
pub(crate) fn test_baseline(
    paths: &ProjectPaths,
    config: &Config,
    may_not_run: bool,
) -> Result<Vec<ralph_core::observe::test_counts::CommandCounts>, CtlError> {
    measured_baseline(paths, config, may_not_run).map(|baseline| baseline.counts)
}

/// [`test_baseline`], with the commands that failed.
fn measured_baseline(
    paths: &ProjectPaths,
    config: &Config,
    may_not_run: bool,
) -> Result<verify::Baseline, CtlError> {
    let commands = &config.completion.verify;
    if commands.is_empty() {
        return Ok(verify::Baseline::default());
    }
    crate::output::say_err!(
        "ralph-ctl: running the verify command(s) once for the test baseline (at most {} s)",
        verify::total_timeout(commands)
    );
    let walls = ralph_core::engine::check_walls(&paths.root, &paths.root, config.sandbox.walls());
    if let Some(notice) = walls.notice() {
        crate::output::say_err!("ralph-ctl: {notice}");
    }
    for refused in walls.refused_caches() {
        crate::output::say_err!("ralph-ctl: {refused}");
    }
    for command in commands.iter().filter(|c| c.network) {
        let what = format!("the check `{}`", command.name);
        if let Some(line) = walls.network_line(&what, "\"network\": true") {
            crate::output::say_err!("ralph-ctl: {line}");
        }
    }
    if let Some(setup) = &config.worktree_setup {
        let what = format!("worktreeSetup `{}`", setup.command);
        if let Some(line) = walls.network_line(&what, "it installs each worktree's dependencies") {
            crate::output::say_err!("ralph-ctl: {line}");
        }
    }
    let mut baseline = verify::Baseline::default();
    let mut cannot_run = Vec::new();
    for command in commands {
        let result = verify::run(&paths.root, command, &walls);
        let diagnosis = ralph_core::observe::runnable::diagnose(&paths.root, &result);
        match &diagnosis {
            Some(d) if d.severity == Severity::CannotRun => {
                cannot_run.push(d.describe(&command.command));
            }
            _ => {}
        }
        baseline
            .failures
            .extend(verify::BaselineFailure::of(&result));
        let Some(entry) = verify::counts_of(&result) else {
            if diagnosis.is_none() {
                crate::output::say_err!("ralph-ctl: {}", no_counts_notice(&command.command));
            }
            continue;
        };
        crate::output::say_err!(
            "ralph-ctl: test baseline of `{}`: {}",
            entry.command,
            entry.counts.describe()
        );
        // A check that runs no test proves nothing when it passes.
        if entry.counts.run == 0 && entry.counts.skipped == 0 {
            crate::output::say_err!(
                "ralph-ctl: warning: `{}` ran no test at the start (its runner says 0): a claim it checks \
                 is accepted on a run of no tests; make sure it finds your tests (a folder, a file pattern) \
                 in .claude/ralph/config.json",
                entry.command
            );
        }
        baseline.counts.push(entry);
    }
    prepare_room(paths, config);
    if cannot_run.is_empty() {
        return Ok(baseline);
    }
    let why = cannot_run.join("; ");
    if may_not_run {
        let going_on = if check_may_not_run() {
            format!("starting anyway ({CHECK_MAY_NOT_RUN})")
        } else {
            "the loop goes on".to_string()
        };
        crate::output::say_err!(
            "ralph-ctl: warning: {why}; {going_on}: every claim is rejected until the check runs"
        );
        return Ok(baseline);
    }
    Err(CtlError::CheckCannotRun(format!(
        "{why}. Every claim would be rejected while it cannot run, so the loop was not started; \
         if making the check run is the task, start with {CHECK_MAY_NOT_RUN}"
    )))
}

/// Makes the project's clean room ready at the loop's start (the tree
/// copied, its environment made: `ralph_core::room`), saying once where it
/// is and how long its first check's preparation took; a project without
/// git is checked in place, and says so (with the room off, the default,
/// nothing is said).
fn prepare_room(paths: &ProjectPaths, config: &Config) {
    let Some(room) = ralph_core::room::RoomWanted::of(config) else {
        return;
    };
    let started = std::time::Instant::now();
    match ralph_core::room::prepare(&paths.root, &room, config.sandbox.walls()) {
        Ok(ready) => {
            let setup = match &ready.setup_ran {
                Some((command, took)) => {
                    format!(", its setup `{command}` in {:.1} s", took.as_secs_f64())
                }
                None => String::new(),
            };
            crate::output::say_err!(
                "ralph-ctl: clean room {}: {} file(s) copied{setup}, ready in {:.1} s; a claim is checked \
                 there, never in the agent's tree",
                ready.tree.display(),
                ready.synced.written,
                started.elapsed().as_secs_f64()
            );
            if !ready.synced.links_left_out.is_empty() {
                crate::output::say_err!(
                    "ralph-ctl: clean room: link(s) pointing out of the tree left out of it: {}",
                    ready.synced.links_left_out.join(", ")
                );
            }
        }
        Err(ralph_core::room::RoomError::NotGit(why)) => crate::output::say_err!(
            "ralph-ctl: clean room: {why}; a claim is checked in the project's own tree"
        ),
        Err(e) => crate::output::say_err!(
            "ralph-ctl: warning: {e}; every claim is rejected until the clean room can be made ready"
        ),
    }
}

/// The flag that starts a loop whose check cannot run (the task is to make
/// it run), on `run`, `start` and `loop-start` ([`allow_check_not_running`]).
pub(crate) const CHECK_MAY_NOT_RUN: &str = "--check-may-not-run";

/// The variable that says the same as [`CHECK_MAY_NOT_RUN`] (`1`): for a
/// start that takes no flag of the person's (the plugin's hook).
pub(crate) const CHECK_MAY_NOT_RUN_ENV: &str = "RALPH_CHECK_MAY_NOT_RUN";

/// [`CHECK_MAY_NOT_RUN`] given on this process's command line.
static CHECK_MAY_NOT_RUN_GIVEN: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the person said a loop may start on a check that cannot run:
/// the flag, or the variable in their environment.
pub(crate) fn check_may_not_run() -> bool {
    CHECK_MAY_NOT_RUN_GIVEN.load(std::sync::atomic::Ordering::Relaxed)
        || std::env::var(CHECK_MAY_NOT_RUN_ENV)
            .is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// Says [`CHECK_MAY_NOT_RUN`] for the starts this process makes (kept in
/// the process, not set in its environment, which the client and the
/// agent's commands inherit).
pub(crate) fn allow_check_not_running() {
    CHECK_MAY_NOT_RUN_GIVEN.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// What the person is told, once, of a check whose output gave no test
/// counts: the baseline has none for it, and why.
fn no_counts_notice(command: &str) -> String {
    let words: Vec<&str> = command.split_whitespace().collect();
    let go_test = words.windows(2).any(|w| w == ["go", "test"]);
    let verbose = words
        .iter()
        .any(|w| matches!(*w, "-v" | "-json" | "-v=true" | "-json=true" | "--json"));
    if go_test && !verbose {
        return format!(
            "`{command}` gave no test counts: `go test` without -v or -json names no passing test, \
             so the test baseline has none for it and a claim that runs fewer tests goes unnoticed; \
             make the check `go test -v ./...` (`ralph-ctl init --verify 'go test -v ./...'`) to count them"
        );
    }
    format!(
        "`{command}` gave no test counts (no test runner's summary that ralph reads in its output): \
         the test baseline has none for it, so a claim that runs fewer tests goes unnoticed"
    )
}

/// What `.claude/context/runtime/.gitignore` holds: nothing of the loop's
/// own state, audit log or history is ever committed.
pub(crate) const RUNTIME_GITIGNORE: &str =
    "# ralph's loop state, audit log and history: never committed\n*\n";

/// Keeps the loop's runtime folder out of git for any loop (a plugin's
/// loop starts where `init` never ran): its `.gitignore` is written when
/// it is missing, never over one that is there.
pub(crate) fn ignore_runtime(paths: &ProjectPaths) -> Result<(), CtlError> {
    let runtime = paths.runtime_dir();
    let ignore = runtime.join(".gitignore");
    if ignore.symlink_metadata().is_ok() {
        return Ok(());
    }
    std::fs::create_dir_all(&runtime).map_err(CtlError::io("create", &runtime))?;
    ralph_core::persist::atomic::write_file(&ignore, RUNTIME_GITIGNORE.as_bytes(), 0o644)
        .map_err(CtlError::io("write", &ignore))
}

/// What [`clear`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cleared {
    /// There was no state.
    Nothing,
    /// The state file was removed; the loop it held was kept in the
    /// history at this path (`None`: there was no loop in it any more).
    Removed(Option<std::path::PathBuf>),
    /// The state was corrupt, or not written by ralph on this machine, and
    /// was moved to this path.
    Quarantined(std::path::PathBuf),
}

/// Removes the state under the lock, keeping its loop in the history first;
/// a corrupt one is moved aside. Nothing is lost either way.
pub(crate) fn clear(paths: &ProjectPaths) -> Result<Cleared, CtlError> {
    clear_unless(paths, |_| None)
}

/// [`clear`], unless `refuse` says why not of the loop found under the
/// lock (`None` for a state that cannot be read): then nothing changes
/// and the refusal is the error.
pub(crate) fn clear_unless(
    paths: &ProjectPaths,
    refuse: impl FnOnce(Option<&LoopState>) -> Option<String>,
) -> Result<Cleared, CtlError> {
    if !StateStore::new(paths).exists()? {
        return Ok(Cleared::Nothing);
    }
    let replaced = transaction::replace(paths, |current| match refuse(current.ok().flatten()) {
        Some(refusal) => Err(CtlError::Refused(refusal)),
        None => Ok(Event::Cleared),
    })?;
    for note in &replaced.notes {
        crate::output::say_err!("ralph-ctl: {note}");
    }
    Ok(match replaced.quarantined {
        Some(aside) => Cleared::Quarantined(aside),
        None => Cleared::Removed(replaced.kept),
    })
}
