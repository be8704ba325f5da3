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
use ralph_core::observe::process::group::{Collected, GroupChild, Lifetime};
use ralph_core::observe::registration;
use ralph_core::observe::verify;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use serde::Serialize;

use crate::driver::command::ClientVersion;
use crate::error::CmdResult;

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

/// Whether the client can log in (every run needs it): a key or token in
/// the environment, a cloud provider, or a login the client stored.
fn login(setup: &crate::driver::first_run::Setup) -> Check {
    const NAME: &str = "login";
    match &setup.login {
        // What an interactive run logs in with is the `API key` check's.
        Some(login) if api_key(setup, Runs::Headless).is_some() => check(
            NAME,
            Verdict::Ok,
            format!("headless runs log in with {login}; interactive runs: see `API key`"),
            None,
        ),
        Some(login) => check(NAME, Verdict::Ok, format!("logs in with {login}"), None),
        // On macOS the login may be in the keychain, which is not read.
        None if cfg!(target_os = "macos") => check(
            NAME,
            Verdict::Ok,
            "no login in a file or the environment (it may be in the keychain)".into(),
            None,
        ),
        None => check(
            NAME,
            Verdict::Fail,
            "Claude Code cannot log in: no ANTHROPIC_API_KEY (nor another key or token), no \
             .credentials.json"
                .into(),
            Some(
                "set ANTHROPIC_API_KEY, or run `claude` and log in (or `claude setup-token`)"
                    .into(),
            ),
        ),
    }
}

/// What an interactive run does with `ANTHROPIC_API_KEY`: the client's
/// terminal UI asks first whether to use a key it has no answer for, and
/// uses a declined key's other login (`claude -p` never asks).
fn api_key(setup: &crate::driver::first_run::Setup, runs: Runs) -> Option<Check> {
    use crate::driver::first_run::KeyAnswer;
    const NAME: &str = "API key";
    if let Some(question) = setup.key_question() {
        return Some(check(
            NAME,
            runs.interactive_only(),
            format!(
                "{} (headless runs use the key without asking)",
                question.what
            ),
            Some(question.fix),
        ));
    }
    match (setup.api_key?, &setup.other_login) {
        (KeyAnswer::Declined, Some(other)) => Some(check(
            NAME,
            Verdict::Ok,
            format!(
                "you declined ANTHROPIC_API_KEY in the client: interactive runs log in with \
                 {other}, headless runs with the key"
            ),
            None,
        )),
        (KeyAnswer::Declined, None) if !cfg!(target_os = "macos") => Some(check(
            NAME,
            runs.interactive_only(),
            format!(
                "you declined ANTHROPIC_API_KEY in the client ({}): interactive runs have no \
                 login (headless runs use the key)",
                setup.config_file.display()
            ),
            Some("approve the key in `claude` (/config, \"Use custom API key\"), or log in".into()),
        )),
        _ => None,
    }
}

/// Whether the client's first-run screens (theme, onboarding) were done in
/// this home: an interactive run shows them first, a headless one never.
fn first_run(setup: &crate::driver::first_run::Setup, runs: Runs) -> Check {
    const NAME: &str = "first run";
    if let Some(unread) = setup.config_unread() {
        return check(
            NAME,
            Verdict::Warn,
            unread,
            Some(
                "nothing, if `claude` starts in this folder without a first-run screen; else run \
                 it once in a terminal here and answer them"
                    .into(),
            ),
        );
    }
    let not_done = if !setup.has_config {
        format!(
            "Claude Code has never run in this home ({} does not exist)",
            setup.config_file.display()
        )
    } else if !setup.onboarded {
        format!(
            "Claude Code's first-run screens were not completed ({} has no hasCompletedOnboarding)",
            setup.config_file.display()
        )
    } else {
        return check(
            NAME,
            Verdict::Ok,
            format!("done ({})", setup.config_file.display()),
            None,
        );
    };
    check(
        NAME,
        runs.interactive_only(),
        format!(
            "{not_done}: interactive runs will show the first-run screens (headless runs do not)"
        ),
        Some(
            "run `claude` once in a terminal, in this project's folder, and answer its questions \
             (theme, trust the folder)"
                .into(),
        ),
    )
}

/// Whether the project's folder is trusted: an interactive client asks
/// first (headless ones do not), and a loop started before waits there.
fn folder_trust(setup: &crate::driver::first_run::Setup, runs: Runs) -> Check {
    const NAME: &str = "folder trust";
    if setup.trusted {
        return check(
            NAME,
            Verdict::Ok,
            "this folder (or one above it) is trusted".into(),
            None,
        );
    }
    if setup.unreadable.is_some() {
        return check(
            NAME,
            Verdict::Warn,
            format!(
                "not known: {} could not be read (see `first run`)",
                setup.config_file.display()
            ),
            None,
        );
    }
    let why = if setup.has_config {
        "this folder is not trusted yet"
    } else {
        "this folder is not trusted yet (Claude Code never ran in this home)"
    };
    check(
        NAME,
        runs.interactive_only(),
        format!(
            "{why}: interactive runs will start at the trust question (headless runs do not ask)"
        ),
        Some("run `claude` once in this folder and trust it".into()),
    )
}

/// The program of a registered command line (quoted when it has spaces).
fn program_of(command: &str) -> PathBuf {
    let command = command.trim();
    match command
        .strip_prefix('"')
        .and_then(|rest| rest.split_once('"'))
    {
        Some((program, _)) => PathBuf::from(program),
        None => PathBuf::from(command.split_whitespace().next().unwrap_or_default()),
    }
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
    let program = program_of(&command);
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

fn client(paths: &ProjectPaths) -> (Check, Option<ClientVersion>) {
    const NAME: &str = "client";
    let program = match crate::driver::prepare::find_client(paths) {
        Ok(program) => program,
        Err(e) => {
            return (
                check(
                    NAME,
                    Verdict::Fail,
                    e.to_string(),
                    Some("install Claude Code: npm install -g @anthropic-ai/claude-code".into()),
                ),
                None,
            );
        }
    };
    let version = crate::driver::client::version(&program);
    let verdict = match version {
        Some(version) if TESTED_CLIENTS.contains(&version) => check(
            NAME,
            Verdict::Ok,
            format!(
                "{} is Claude Code {version}, a version ralph is tested on{}",
                program.program.display(),
                plugin_on(version)
            ),
            None,
        ),
        Some(version) => check(
            NAME,
            Verdict::Warn,
            format!(
                "{} is Claude Code {version}; ralph is tested on {}",
                program.program.display(),
                TESTED_CLIENTS.map(|v| v.to_string()).join(" and ")
            ),
            Some("it most likely works; if a loop misbehaves, try a tested version".into()),
        ),
        None => check(
            NAME,
            Verdict::Fail,
            format!(
                "{} does not say its version (`--version`)",
                program.program.display()
            ),
            Some("reinstall Claude Code, or set RALPH_CLAUDE to the client's path".into()),
        ),
    };
    (verdict, version)
}

/// What the plugin's `/ralph-loop` does on this client, where it cannot run
/// a loop: Claude Code 2.0 gives a command's `!` block no session id, and its
/// terminal UI knows the plugin's commands only by their namespaced name, so
/// a bare `/ralph-loop` there is "Unknown slash command" and no hook of
/// ralph's runs to say so. Empty on 2.1 and later.
fn plugin_on(version: ClientVersion) -> &'static str {
    if version < ClientVersion(2, 1, 0) {
        "; its sessions cannot run the plugin's /ralph-loop (it needs Claude Code 2.1 or later; \
         2.0's terminal UI answers a bare /ralph-loop \"Unknown slash command\", and \
         /ralph:ralph-loop says why it cannot start): loop with ralph-ctl run"
    } else {
        ""
    }
}

/// Whether unattended runs will have the client's sandbox: bubblewrap and
/// socat (Linux) or Seatbelt (macOS), and a client that has it.
fn sandbox(config: &Config, version: Option<ClientVersion>) -> Check {
    use crate::driver::sandbox::{self, Support};
    use ralph_core::judge::config::SandboxSetting;
    const NAME: &str = "sandbox";
    if config.sandbox == SandboxSetting::Off {
        return check(
            NAME,
            Verdict::Ok,
            "off (config `sandbox` or RALPH_SANDBOX): unattended runs use permission rules only"
                .into(),
            None,
        );
    }
    let machine = sandbox::Machine::probe(std::env::var_os("PATH").as_deref());
    match sandbox::support(&machine, version) {
        Support::Ready => check(
            NAME,
            Verdict::Ok,
            "unattended runs put the client in its sandbox: the agent's commands run without \
             prompts, inside the project only"
                .into(),
            None,
        ),
        Support::Missing(why) => check(
            NAME,
            if config.sandbox == SandboxSetting::On {
                Verdict::Fail
            } else {
                Verdict::Warn
            },
            format!("no sandbox for unattended runs: {why}"),
            Some(
                "install what it names; until then the agent gets `ralph-ctl check` allowed and \
                 its work is left uncommitted (or set \"sandbox\": \"off\" to silence this)"
                    .into(),
            ),
        ),
    }
}

/// Whether the checks of the agent's work (verify, gates, the baseline) run
/// walled on this machine: bubblewrap, else Landlock; none is a warning
/// (`sandbox: auto`: they run with the person's rights) or, with `sandbox:
/// on`, a failure (they are refused). Every run's checks, whoever runs them.
fn walls(config: &Config) -> Check {
    use ralph_core::observe::process::walls::{self, Mechanism, WallsWanted};
    const NAME: &str = "walls";
    let wanted = config.sandbox.walls();
    if wanted == WallsWanted::Off {
        return check(
            NAME,
            Verdict::Ok,
            "off (config `sandbox` or RALPH_SANDBOX): the checks run the agent's code with your rights"
                .into(),
            None,
        );
    }
    let mechanism = Mechanism::probe();
    let network = format!(
        "network: {} (a verify entry with \"network\": true keeps this machine's)",
        walls::network_walls(mechanism)
    );
    match mechanism {
        Mechanism::Bubblewrap(bwrap) => check(
            NAME,
            Verdict::Ok,
            format!(
                "the checks of the agent's work run inside bubblewrap ({}); {network}",
                bwrap.display()
            ),
            None,
        ),
        Mechanism::Landlock(why) => check(
            NAME,
            Verdict::Ok,
            format!(
                "the checks run inside Landlock's walls, as {why} (coarser: a check cannot create \
                 an entry at the top of the project); {network}; {}",
                walls::landlock_features()
            ),
            None,
        ),
        Mechanism::LandlockInPart(why) if wanted == WallsWanted::Auto => check(
            NAME,
            Verdict::Warn,
            format!(
                "the checks run inside Landlock's walls in part, as {why}: what this kernel \
                 does not enforce, a check may do; {network}; {}",
                walls::landlock_features()
            ),
            Some("install bubblewrap (`sudo apt-get install bubblewrap`)".into()),
        ),
        Mechanism::Missing(why) | Mechanism::LandlockInPart(why) => check(
            NAME,
            if wanted == WallsWanted::Required {
                Verdict::Fail
            } else {
                Verdict::Warn
            },
            if wanted == WallsWanted::Required {
                format!("no walls for the checks ({why}): with sandbox on, every check is refused")
            } else {
                format!(
                    "no walls for the checks ({why}): they run the agent's code with your rights"
                )
            },
            Some("install bubblewrap (`sudo apt-get install bubblewrap`)".into()),
        ),
    }
}

/// Shell profiles that export `RALPH_ACTIVE`: every session would be a loop's.
fn active_in_profiles() -> Check {
    const NAME: &str = "RALPH_ACTIVE";
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let files = [
        ".bashrc",
        ".bash_profile",
        ".profile",
        ".zshrc",
        ".zprofile",
        ".zshenv",
        ".config/fish/config.fish",
    ];
    let found: Vec<String> = home
        .iter()
        .flat_map(|home| files.iter().map(move |f| home.join(f)))
        .filter(|path| {
            std::fs::read_to_string(path).is_ok_and(|text| {
                text.lines().any(|line| {
                    let line = line.trim_start();
                    !line.starts_with('#') && line.contains("RALPH_ACTIVE")
                })
            })
        })
        .map(|p| p.display().to_string())
        .collect();
    let in_env = std::env::var_os("RALPH_ACTIVE").is_some();
    if found.is_empty() && !in_env {
        check(
            NAME,
            Verdict::Ok,
            "not set by a shell profile nor in this shell".into(),
            None,
        )
    } else {
        let mut places = found;
        if in_env {
            places.push("this shell's environment".into());
        }
        check(
            NAME,
            Verdict::Fail,
            format!(
                "RALPH_ACTIVE is set in {}: every Claude Code session started from there acts as a loop's",
                places.join(", ")
            ),
            Some("remove it: only the launcher sets it, for the client it starts".into()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_of_a_registered_command() {
        assert_eq!(
            program_of("/bin/ralph-stop-hook"),
            PathBuf::from("/bin/ralph-stop-hook")
        );
        assert_eq!(
            program_of("\"/my tools/ralph-stop-hook\" --plugin"),
            PathBuf::from("/my tools/ralph-stop-hook")
        );
        assert_eq!(
            program_of("ralph-stop-hook --plugin"),
            PathBuf::from("ralph-stop-hook")
        );
    }
}
