//! `ralph-ctl doctor`: checks the install and the project, each check with
//! its verdict and the fix, so that a broken install is found without
//! reading the source. Exits 0 only when no check fails.
//!
//! It judges one kind of run ([`Runs`]): headless by default (`claude -p`:
//! `run --headless`, `--fresh`, `--queue`), or interactive (`--interactive`:
//! the client's terminal UI). What only the other kind needs (the client's
//! first-run screens and the folder's trust question, an interactive run's;
//! the client's sandbox, which only unattended runs get unless it is `on`)
//! is a warning naming the runs it affects, never a failure.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::observe::registration;
use ralph_core::observe::resolved::program_of;
use ralph_core::observe::verify;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::process::group::{Collected, GroupChild, Lifetime};
use serde::Serialize;

use crate::driver::command::ClientVersion;
use crate::error::CmdResult;

mod account;
mod client;

use account::{api_key, first_run, folder_trust, login};
use client::{active_in_profiles, client, sandbox, walls};

/// `ralph-ctl doctor`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// Print the checks as one JSON object instead.
    #[arg(long)]
    pub(crate) json: bool,
    /// Judge headless runs (`run --headless`, `--fresh`, `--queue`): the
    /// client's first-run screens and folder trust are warnings. The default.
    #[arg(long, conflicts_with = "interactive")]
    pub(crate) headless: bool,
    /// Judge interactive runs (the launcher without --headless): the
    /// client's first-run screens and folder trust fail until done.
    #[arg(long)]
    pub(crate) interactive: bool,
    /// Do not run the verify commands (by default each runs once, in the
    /// walls, within its timeout, as a loop's start runs it).
    #[arg(long)]
    pub(crate) no_check: bool,
}

/// `ralph-ctl doctor` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: DoctorArgs) -> CmdResult {
    let runs = if args.interactive {
        Runs::Interactive
    } else {
        Runs::Headless
    };
    run(
        paths,
        runs,
        args.json,
        !args.no_check,
        &mut std::io::stdout(),
    )
}

/// The client versions the end-to-end tests run.
pub(crate) const TESTED_CLIENTS: [ClientVersion; 2] =
    [ClientVersion(2, 0, 77), ClientVersion(2, 1, 330)];

/// The kind of run doctor says whether this machine is ready for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Runs {
    /// `claude -p` (`run --headless`, `--fresh`, `--queue`): no first-run
    /// screens, no trust question; a login, the sandbox, the checks' walls.
    #[default]
    Headless,
    /// The client's terminal UI (the launcher without `--headless`): its
    /// first-run screens and the folder's trust question come first.
    Interactive,
}

impl Runs {
    fn name(self) -> &'static str {
        match self {
            Runs::Headless => "headless",
            Runs::Interactive => "interactive",
        }
    }

    /// A problem of interactive runs only: a failure when they are judged,
    /// else a warning.
    fn interactive_only(self) -> Verdict {
        match self {
            Runs::Interactive => Verdict::Fail,
            Runs::Headless => Verdict::Warn,
        }
    }
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Verdict {
    /// Nothing to do.
    Ok,
    /// Works, but worth a look.
    Warn,
    /// Broken: the exit code says so.
    Fail,
}

/// One check.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Check {
    /// What was checked.
    pub(crate) name: &'static str,
    /// How it came out.
    pub(crate) verdict: Verdict,
    /// What was found.
    pub(crate) detail: String,
    /// What to do, when something is to be done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
    /// For the `check` entries: how the verify command ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run: Option<CheckRun>,
}

/// How one verify command ran in the walls (`doctor --json`'s `run`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CheckRun {
    /// The command, as in config.json.
    pub(crate) command: String,
    /// `passed`, `failing`, `cannot-run` or `timed-out`.
    pub(crate) outcome: &'static str,
    /// Its exit code (none: killed, or never started).
    pub(crate) exit_code: Option<i32>,
    /// How long it ran.
    pub(crate) duration_ms: u64,
    /// The test counts read from its output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) counts: Option<ralph_core::observe::test_counts::TestCounts>,
    /// Why it cannot run, for `cannot-run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) why: Option<String>,
}

fn check(name: &'static str, verdict: Verdict, detail: String, fix: Option<String>) -> Check {
    Check {
        name,
        verdict,
        detail,
        fix,
        run: None,
    }
}

/// Runs every check on the project at `paths` for `runs` (the verify
/// commands too when `runs_checks`); writes them (or JSON) on `out`.
pub(crate) fn run(
    paths: &ProjectPaths,
    runs: Runs,
    json: bool,
    runs_checks: bool,
    out: &mut dyn Write,
) -> CmdResult {
    let checks = all(paths, runs, runs_checks);
    let failed = checks.iter().any(|c| c.verdict == Verdict::Fail);
    let written = if json {
        #[derive(Serialize)]
        struct Report<'a> {
            ok: bool,
            runs: Runs,
            checks: &'a [Check],
        }
        serde_json::to_writer_pretty(
            &mut *out,
            &Report {
                ok: !failed,
                runs,
                checks: &checks,
            },
        )
        .map_err(std::io::Error::from)
        .and_then(|()| writeln!(out))
    } else {
        show(&checks, runs, out)
    };
    let code = if failed {
        exit_codes::ERROR
    } else {
        exit_codes::OK
    };
    super::written(written.and_then(|()| out.flush()), code)
}

fn show(checks: &[Check], runs: Runs, out: &mut dyn Write) -> std::io::Result<()> {
    for c in checks {
        let mark = match c.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        // A detail may quote a file the agent can write.
        let detail = ralph_core::text::printable(&c.detail);
        writeln!(out, "{mark}  {}: {detail}", c.name)?;
        if let Some(fix) = &c.fix {
            writeln!(out, "      fix: {fix}")?;
        }
    }
    let failed = checks.iter().filter(|c| c.verdict == Verdict::Fail).count();
    let warned = checks.iter().filter(|c| c.verdict == Verdict::Warn).count();
    let runs = runs.name();
    if failed == 0 {
        writeln!(out, "ready for {runs} runs ({warned} warning(s))")
    } else {
        writeln!(
            out,
            "not ready for {runs} runs: {failed} problem(s), {warned} warning(s)"
        )
    }
}

/// Every check for `runs`, in order (the verify commands run when
/// `runs_checks`).
pub(crate) fn all(paths: &ProjectPaths, runs: Runs, runs_checks: bool) -> Vec<Check> {
    let config = Config::load(paths, &ProcessEnv);
    let mut checks = vec![hook(paths)];
    checks.push(match &config {
        Ok(_) => check(
            "config",
            Verdict::Ok,
            if paths.config_file().exists() {
                format!("{} is valid", paths.config_file().display())
            } else {
                format!(
                    "{} does not exist: the defaults apply",
                    paths.config_file().display()
                )
            },
            None,
        ),
        Err(e) => check("config", Verdict::Fail, e.to_string(), Some(e.fix().into())),
    });
    if let Ok(config) = &config {
        checks.push(timeout(paths, config));
        checks.push(prompt(paths, config));
        checks.push(agent_files(config));
    }
    let (client_check, version) = client(paths);
    checks.push(client_check);
    let setup = crate::driver::first_run::Setup::probe(&paths.root, version);
    checks.push(login(&setup));
    if let Some(billing) = setup.headless_billing() {
        checks.push(check("billing", Verdict::Ok, billing, None));
    }
    checks.extend(api_key(&setup, runs));
    checks.push(first_run(&setup, runs));
    checks.push(folder_trust(&setup, runs));
    if let Ok(config) = &config {
        checks.push(sandbox(config, version));
        checks.push(walls(config));
        if runs_checks {
            checks.extend(verify_runs(paths, config));
        }
    }
    checks.push(active_in_profiles());
    checks.push(state(paths));
    if let Some(line) = crate::driver::config_hold::looked_at(paths) {
        checks.push(check("git lock", Verdict::Ok, line, None));
    }
    checks
}

/// Each verify command run once as a loop's start runs it (in the walls,
/// with its own timeout as its deadline): passing or failing with its
/// counts and time, or why it cannot run, which would stop a loop's start.
fn verify_runs(paths: &ProjectPaths, config: &Config) -> Vec<Check> {
    use ralph_core::observe::runnable::{self, Severity};
    const NAME: &str = "check";
    if config.completion.verify.is_empty() {
        return Vec::new();
    }
    let walls = ralph_core::engine::check_walls(&paths.root, &paths.root, config.sandbox.walls());
    config
        .completion
        .verify
        .iter()
        .map(|command| {
            let result = verify::run(&paths.root, command, &walls);
            let diagnosis = runnable::diagnose(&paths.root, &result);
            let seconds = format!("{} ms", result.duration_ms);
            let counts = result
                .counts
                .map_or_else(|| "no test counts in its output".to_string(), |c| c.describe());
            let cmd = &command.command;
            let (verdict, outcome, detail, fix) = match &diagnosis {
                Some(d) if d.severity == Severity::CannotRun => (
                    Verdict::Fail,
                    "cannot-run",
                    format!("`{cmd}` cannot run ({seconds}): {} ({})", d.rule, d.evidence),
                    Some(format!(
                        "{}; a loop's start stops on it (start with {} if making it run is the task)",
                        d.fix,
                        crate::driver::start::CHECK_MAY_NOT_RUN
                    )),
                ),
                _ if result.timed_out => (
                    Verdict::Warn,
                    "timed-out",
                    format!("`{cmd}` did not finish within its {} s", command.timeout_seconds),
                    Some("raise its timeoutSeconds in .claude/ralph/config.json".into()),
                ),
                _ if result.passed() => (
                    Verdict::Ok,
                    "passed",
                    format!("`{cmd}` passes in {seconds}: {counts}"),
                    None,
                ),
                _ => (
                    Verdict::Warn,
                    "failing",
                    format!(
                        "`{cmd}` runs and fails (exit {}) in {seconds}: {counts}",
                        result.exit_code.unwrap_or_default()
                    ),
                    Some(diagnosis.as_ref().map_or_else(
                        || "nothing, if making it pass is the loop's task".to_string(),
                        |d| d.fix.clone(),
                    )),
                ),
            };
            Check {
                run: Some(CheckRun {
                    command: cmd.clone(),
                    outcome,
                    exit_code: result.exit_code,
                    duration_ms: result.duration_ms,
                    counts: result.counts,
                    why: diagnosis.map(|d| d.describe(cmd)),
                }),
                ..check(NAME, verdict, detail, fix)
            }
        })
        .collect()
}

/// The output of `program args`, if it exits 0 within a few seconds (cut
/// off whole, with anything it started, past them).
fn output_of(program: &Path, args: &[&str]) -> Option<String> {
    let mut command = Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let child = GroupChild::spawn(&mut command, Lifetime::Independent).ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    match child.collect_output(deadline, Duration::from_millis(200)) {
        Collected::Exited {
            status,
            output: Some(bytes),
        } if status.success() => Some(String::from_utf8_lossy(&bytes).trim().to_string()),
        _ => None,
    }
}

fn hook(paths: &ProjectPaths) -> Check {
    const NAME: &str = "hook";
    let file = match registration::registration_file(paths) {
        Ok(file) => file,
        Err(e) => {
            return check(
                NAME,
                Verdict::Fail,
                e.to_string(),
                Some("fix the settings file's JSON".into()),
            );
        }
    };
    let Some(file) = file else {
        // The plugin's registration runs the hook from PATH.
        let on_path = find_on_path("ralph-stop-hook");
        return match on_path {
            Some(hook) => check(
                NAME,
                Verdict::Warn,
                format!(
                    "not registered in .claude/settings.json or settings.local.json; {} is on PATH for the plugin (claude --plugin-dir)",
                    hook.display()
                ),
                Some(INSTALL.into()),
            ),
            None => check(
                NAME,
                Verdict::Fail,
                "the Stop hook is not registered in .claude/settings.json or settings.local.json, and ralph-stop-hook is not on PATH".into(),
                Some(format!(
                    "{INSTALL} (or put ralph-stop-hook on PATH for the plugin)"
                )),
            ),
        };
    };
    let command = registration::registered_command(&file)
        .ok()
        .flatten()
        .unwrap_or_default();
    // The program of the registered command line (quoted when it has spaces).
    let program = PathBuf::from(program_of(&command).unwrap_or_default());
    if !program.is_file() {
        return check(
            NAME,
            Verdict::Fail,
            format!(
                "{} registers the hook as {}, which does not exist",
                file.display(),
                program.display()
            ),
            Some("install ralph-stop-hook (cargo install --locked --path crates/ralph-stop-hook), then run `ralph-ctl init` again".into()),
        );
    }
    match output_of(&program, &["--version"]) {
        Some(version) if version.starts_with("ralph-stop-hook") => check(
            NAME,
            Verdict::Ok,
            format!("{} runs {} ({version})", file.display(), program.display()),
            None,
        ),
        _ => check(
            NAME,
            Verdict::Fail,
            format!(
                "{} registers {}, which does not run as ralph-stop-hook (`--version` failed)",
                file.display(),
                program.display()
            ),
            Some("reinstall ralph-stop-hook, then run `ralph-ctl init` again".into()),
        ),
    }
}

fn timeout(paths: &ProjectPaths, config: &Config) -> Check {
    const NAME: &str = "hook timeout";
    let total = verify::total_timeout(&config.completion.verify);
    if config.completion.verify.is_empty() {
        return check(
            "verify",
            Verdict::Warn,
            "no verify command: a completion claim is accepted unchecked".into(),
            Some(match super::init::test_command(&paths.root) {
                Some((command, source)) => format!(
                    "`ralph-ctl init --yes` makes `{command}` (found from {source}) the check; \
                     `ralph-ctl init --verify CMD` sets another"
                ),
                None => "`ralph-ctl init --verify \"<your test command>\"`".into(),
            }),
        );
    }
    let timeout = registration::registered_timeout_in(paths)
        .ok()
        .flatten()
        .unwrap_or(registration::CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS);
    match registration::timeout_warning(total, timeout) {
        Some(warning) => check(
            NAME,
            Verdict::Fail,
            warning,
            Some("run `ralph-ctl init` again".into()),
        ),
        None => check(
            NAME,
            Verdict::Ok,
            format!("{timeout} s, enough for the verify commands ({total} s at most)"),
            None,
        ),
    }
}

/// The fix for a project ralph is not installed in.
const INSTALL: &str = "`ralph-ctl run --task \"TEXT\"` installs ralph as it starts a loop on TEXT; \
                       `ralph-ctl init` installs it without starting";

fn prompt(paths: &ProjectPaths, config: &Config) -> Check {
    const NAME: &str = "PROMPT.md";
    let path = paths.resolve(&config.prompt_file);
    match ralph_core::observe::prompt_text::read_prompt(&path) {
        // No warning: a queue run and /ralph-loop bring their own tasks,
        // and a plain loop's start refuses it anyway, saying so.
        Ok(text) if ralph_core::observe::prompt_text::is_template(&text) => check(
            NAME,
            Verdict::Ok,
            format!(
                "{} is still the template: a queue run (`--queue`) and /ralph-loop bring their \
                 own tasks and take it as it is; a plain loop refuses to start on it",
                path.display()
            ),
            Some(
                "for a plain loop, write the task into it, saying what done means, or start \
                 with `ralph-ctl run --task \"TEXT\"`, which writes TEXT there"
                    .into(),
            ),
        ),
        Ok(_) => check(
            NAME,
            Verdict::Ok,
            format!("{} holds a task", path.display()),
            None,
        ),
        Err(e) if !path.exists() => check(
            NAME,
            Verdict::Warn,
            format!("{e} (the plugin's /ralph-loop needs none)"),
            Some(INSTALL.into()),
        ),
        Err(e) => check(
            NAME,
            Verdict::Fail,
            e.to_string(),
            Some("make it a readable text file".into()),
        ),
    }
}

/// Files the agent must edit that sit under `.claude/`, which Claude Code
/// treats as sensitive (acceptEdits asks; headless, nobody answers).
fn agent_files(config: &Config) -> Check {
    const NAME: &str = "agent's files";
    let inside: Vec<&String> = config
        .completion
        .plan_files
        .iter()
        .filter(|f| f.trim_start_matches("./").starts_with(".claude/"))
        .collect();
    if inside.is_empty() {
        check(
            NAME,
            Verdict::Ok,
            "no plan file the agent must edit sits under .claude/".into(),
            None,
        )
    } else {
        check(
            NAME,
            Verdict::Fail,
            format!(
                "planFiles {} sit under .claude/, which Claude Code treats as sensitive: in acceptEdits (and headless) the agent cannot edit them",
                inside
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(
                "move them to the project (e.g. IMPLEMENTATION_PLAN.md) and update planFiles"
                    .into(),
            ),
        )
    }
}

fn state(paths: &ProjectPaths) -> Check {
    const NAME: &str = "state";
    match StateStore::new(paths).read() {
        Ok(None) => check(NAME, Verdict::Ok, "no loop yet".into(), None),
        Ok(Some(state)) => check(
            NAME,
            Verdict::Ok,
            format!(
                "{} at iteration {} of {}",
                state.status.as_str(),
                state.iteration,
                state.max_iterations
            ),
            None,
        ),
        Err(e) => check(
            NAME,
            Verdict::Fail,
            e.to_string(),
            Some("`ralph-ctl reset` moves it aside (kept) and clears the loop".into()),
        ),
    }
}

/// `name` in a folder of `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}
