//! `ralph-ctl init`: installs ralph into the current project. Running it
//! twice changes nothing; existing prompts, settings and hooks are kept.

use std::fs;
use std::path::{Path, PathBuf};

use ralph_core::exit_codes;
use ralph_core::files::{self, Bounded};
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::observe::prompt_text;
use ralph_core::observe::registration;
use ralph_core::observe::verify;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use serde_json::Value;

use crate::assets;
use crate::error::CmdResult;
use crate::error::CtlError;
use crate::settings::{self, HOOK_BINARY_NAME};

mod detect;
mod formatters;
mod worktree_setup;

/// What happened to one file.
enum Change {
    Created,
    Updated,
    Unchanged,
    Kept,
}

fn report(change: Change, path: &Path, root: &Path) {
    let shown = path.strip_prefix(root).unwrap_or(path).display();
    let word = match change {
        Change::Created => "created  ",
        Change::Updated => "updated  ",
        Change::Unchanged => "unchanged",
        Change::Kept => "kept     ",
    };
    crate::output::say!("  {word} {shown}");
}

/// What stands at a path `init` may write.
enum Found {
    /// Nothing: the file is created.
    Nothing,
    /// A file of the person's own that is kept as it is (even through a
    /// link: it is read, never written).
    Kept,
    /// A regular file, with its permission bits.
    File(u32),
}

/// Looks at `path` without following a link there. A link is never written
/// through, nor replaced: it may be the person's own arrangement, or one a
/// cloned repository planted to make `init` overwrite a file elsewhere. So
/// it is refused, unless `keep_existing` and it leads to a regular file
/// (kept as it is). Anything else but a regular file is refused too.
fn inspect(path: &Path, keep_existing: bool) -> Result<Found, CtlError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(CtlError::io("inspect", path)(e)),
    };
    if meta.file_type().is_symlink() {
        if keep_existing && fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return Ok(Found::Kept);
        }
        return Err(CtlError::Unsafe {
            path: path.to_path_buf(),
            problem: "is a symbolic link",
        });
    }
    if !meta.is_file() {
        return Err(CtlError::Unsafe {
            path: path.to_path_buf(),
            problem: "is not a regular file",
        });
    }
    if keep_existing {
        return Ok(Found::Kept);
    }
    Ok(Found::File(permission_bits(&meta)))
}

#[cfg(unix)]
fn permission_bits(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn permission_bits(_meta: &fs::Metadata) -> u32 {
    0o644
}

/// Writes `content` to `path` only when it differs; never touches an
/// existing file when `keep_existing` is set (the person's own prompts).
/// A new file gets `mode`; a replaced one keeps its own. The write is
/// [`atomic::write_file`]: a temp file under a random name, created
/// exclusively and never through a link, renamed over `path`.
fn install(path: &Path, content: &str, keep_existing: bool, mode: u32) -> Result<Change, CtlError> {
    let (change, mode) = match inspect(path, keep_existing)? {
        Found::Kept => return Ok(Change::Kept),
        Found::Nothing => (Change::Created, mode),
        Found::File(existing_mode) => {
            // Reading one byte more than `content` tells a longer file apart.
            let limit = content.len() as u64;
            match files::read_bounded(path, limit).map_err(CtlError::io("read", path))? {
                Bounded::Bytes(bytes) if bytes == content.as_bytes() => {
                    return Ok(Change::Unchanged);
                }
                Bounded::Missing => (Change::Created, mode),
                Bounded::Bytes(_) | Bounded::TooLarge => (Change::Updated, existing_mode),
            }
        }
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(CtlError::io("create", dir))?;
    }
    atomic::write_file(path, content.as_bytes(), mode).map_err(CtlError::io("write", path))?;
    Ok(change)
}

/// Makes the launcher executable (0755), on the file itself: never through
/// a link, never waiting on a FIFO put there meanwhile.
#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), CtlError> {
    atomic::set_mode(path, 0o755).map_err(CtlError::io("make executable", path))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), CtlError> {
    Ok(())
}

/// The ralph-stop-hook to register: the given path, else the one beside this binary.
fn find_hook(hook_path: Option<PathBuf>) -> Result<PathBuf, CtlError> {
    let exe_name = format!("{HOOK_BINARY_NAME}{}", std::env::consts::EXE_SUFFIX);
    let candidate = match hook_path {
        Some(path) => path,
        None => std::env::current_exe()
            .and_then(fs::canonicalize)
            .map_err(|e| {
                CtlError::HookNotFound(format!(
                    "cannot locate ralph-ctl itself ({e}); pass --hook-path"
                ))
            })?
            .with_file_name(&exe_name),
    };
    let path = fs::canonicalize(&candidate).map_err(|_| {
        CtlError::HookNotFound(format!(
            "cannot find {exe_name} at {}; build it (cargo build --release) or pass --hook-path",
            candidate.display()
        ))
    })?;
    if !path.is_file() {
        return Err(CtlError::HookNotFound(format!(
            "{} is not a file; pass --hook-path",
            path.display()
        )));
    }
    Ok(path)
}

/// This `ralph-ctl`'s absolute path, when it can be told.
fn ctl_path() -> Option<String> {
    std::env::current_exe()
        .and_then(fs::canonicalize)
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
}

/// `value` for `set "NAME=value"` in a batch file: `%` doubled, the only
/// character expanded there (delayed expansion is off). `None` when it holds
/// what such a line cannot carry (`"`, a line break).
pub(crate) fn bat_set_value(value: &str) -> Option<String> {
    if value.contains(['"', '\r', '\n']) {
        return None;
    }
    Some(value.replace('%', "%%"))
}

/// What `ralph-ctl init` was asked for: its arguments (its help is the
/// `Init` command's), and whether a loop starts right after.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct InitArgs {
    /// The ralph-stop-hook binary to register (default: the one beside ralph-ctl).
    #[arg(long, value_name = "PATH")]
    pub(crate) hook_path: Option<PathBuf>,
    /// The hook timeout in seconds registered with Claude Code (default: 90, or
    /// the verify commands' total timeout plus 30 when that is more).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=7200))]
    pub(crate) timeout: Option<u32>,
    /// The completion check: a command that must pass before a claim of
    /// done is accepted (written into .claude/ralph/config.json as verify).
    #[arg(long, value_name = "CMD")]
    pub(crate) verify: Option<String>,
    /// Make the test command init finds (Cargo, npm/pnpm/yarn, pytest,
    /// go, make, …) the completion check without asking; without it,
    /// init asks in a terminal and only shows it elsewhere.
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
    /// Register the Stop hook in .claude/settings.local.json (yours, not
    /// committed) instead of .claude/settings.json (shared with the project).
    #[arg(long)]
    pub(crate) local: bool,
    /// Also write a documented starter formula,
    /// .claude/ralph/formulas/NAME.yaml (plan, implement, test), for
    /// `run --formula NAME`; an existing one is kept.
    #[arg(long, value_name = "NAME")]
    pub(crate) formula: Option<String>,
    /// Install even where `.claude/settings.json` is Claude Code's
    /// user-wide settings file (the project is your home folder, or
    /// `CLAUDE_CONFIG_DIR` is its `.claude`): the Stop hook and the deny
    /// rules then apply to every session you start, in any folder.
    #[arg(long)]
    pub(crate) user_wide: bool,
    /// A loop starts right after (`run --task`): no "Next:" line.
    #[arg(skip)]
    pub(crate) then_runs: bool,
}

/// The name a verify command `init` writes gets.
const VERIFY_NAME: &str = "tests";

/// The line `.claude/.gitignore` gets with `--local`.
const LOCAL_SETTINGS_IGNORED: &str = "/settings.local.json";

/// The completion check `init` settles on.
enum VerifyPlan {
    /// config.json already has verify commands: kept.
    Kept(usize),
    /// This command is written into config.json.
    Write(String, String),
    /// Found, but not written (no `--yes`).
    Offer(detect::Detected),
    /// Nothing found, nothing configured.
    Nothing,
}

/// In a terminal (stdin and stdout both), asks whether `found` becomes the
/// completion check; Enter accepts. Anywhere else (a script, a pipe) it
/// asks nothing and answers no: `--yes` says yes there.
fn ask_to_use(found: &detect::Detected, protect: &[String]) -> bool {
    use std::io::{BufRead, Write};
    if !has_terminal() {
        return false;
    }
    let mut out = std::io::stdout();
    let protecting = if protect.is_empty() {
        String::new()
    } else {
        format!(
            ", and protect {} (a claim that changed them is rejected)",
            protect.join(", ")
        )
    };
    let asked = write!(
        out,
        "Found the test command `{}` (from {}). Make it the completion check, so that a claim of done \
         is accepted only when it passes{protecting}? [Y/n] ",
        found.command, found.source
    )
    .and_then(|()| out.flush());
    if asked.is_err() {
        return false;
    }
    let mut answer = String::new();
    match std::io::stdin().lock().read_line(&mut answer) {
        Ok(0) | Err(_) => false,
        Ok(_) => matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "" | "y" | "yes"
        ),
    }
}

/// Whether a person can be asked: stdin and stdout both a terminal.
fn has_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

/// A JSON file read whole and parsed into an object (empty when missing or blank).
pub(crate) fn read_json_object(path: &Path) -> Result<Value, CtlError> {
    let bytes = match registration::read_settings(path)? {
        Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
            return Ok(Value::Object(Default::default()));
        }
        Some(bytes) => bytes,
        None => return Ok(Value::Object(Default::default())),
    };
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(CtlError::Settings {
            path: path.to_path_buf(),
            problem: "it is not a JSON object".into(),
        }),
        Err(e) => Err(CtlError::Settings {
            path: path.to_path_buf(),
            problem: format!("it is not valid JSON ({e})"),
        }),
    }
}

/// `value` as the pretty JSON text `init` writes.
pub(crate) fn json_text(value: &Value) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("JSON values serialize");
    text.push('\n');
    text
}

/// Installs templates, launchers, the hook registration, the runtime
/// folder's `.gitignore`, and (asked for) the completion check.
pub(crate) fn run(paths: &ProjectPaths, options: InitArgs) -> CmdResult {
    if !options.user_wide {
        refuse_user_settings(paths)?;
    }
    let hook = find_hook(options.hook_path.clone())?;
    let root = &paths.root;
    refuse_empty_verify(&options)?;
    // The configuration as it stands; it must be valid before it is added to.
    let config = Config::load(paths, &ProcessEnv);
    // The test folders and files a claim may not change, offered with the
    // test command when config.json names none yet.
    let offered_protection = match &config {
        Ok(config) if config.completion.protected_paths.is_empty() => detect::test_paths(root),
        _ => Vec::new(),
    };
    let plan = plan_verify(root, &options, &config, &offered_protection);
    let setup = offered_setup(root, &plan, &config);
    let environment = environment_line(&plan, root);
    let config_path = paths.config_file();
    let config_text = config_text(
        &config_path,
        &plan,
        &config,
        &offered_protection,
        setup.as_ref(),
    )?;
    let worktrees = worktrees_line(&plan, setup.as_ref(), root);
    let timeout = hook_timeout(&options, &plan, &config);
    crate::output::say!("Installing ralph into {}", root.display());
    let files = Destinations::of(paths);
    let Destinations {
        shared_settings,
        local_settings,
        ..
    } = &files;
    // Both registrations are computed (the settings files read, bounded and
    // never waiting on a FIFO, and merged) before anything is written: an
    // invalid file leaves the project as it was. A link or anything but a
    // regular file there is refused first.
    inspect(shared_settings, false)?;
    inspect(local_settings, false)?;
    let mut shared = read_json_object(shared_settings)?;
    let mut local = read_json_object(local_settings)?;
    let (shared_before, local_before) = (shared.clone(), local.clone());
    // Once registered in the person's own file, it stays there.
    let into_local = options.local || registration::ralph_entry(&local).is_some();

    files.inspect_all(
        into_local,
        config_text.as_ref().map(|_| config_path.as_path()),
    )?;
    let (target, other, target_path) = if into_local {
        (&mut local, &mut shared, local_settings)
    } else {
        (&mut shared, &mut local, shared_settings)
    };
    let protected = protected_paths(&plan, &config, &offered_protection);
    let registration = Registration {
        hook: &hook,
        timeout,
        protected: &protected,
        root,
    };
    registration.merge(target, target_path, other)?;

    install_templates(paths, &options, &plan, &files.prompt, &files.guardrails)?;
    install_launchers(&files.sh, &files.bat, root)?;
    if let Some(text) = &config_text {
        report(
            install(&config_path, text, false, 0o644)?,
            &config_path,
            root,
        );
    }

    write_settings(
        [
            (shared_settings, &shared, &shared_before),
            (local_settings, &local, &local_before),
        ],
        target_path,
        root,
    )?;
    report(
        install(
            &files.runtime_ignore,
            crate::driver::start::RUNTIME_GITIGNORE,
            true,
            0o644,
        )?,
        &files.runtime_ignore,
        root,
    );
    if into_local {
        ignore_local_settings(&files.claude_ignore, root)?;
    }
    // The project's formatters and linters leave ralph's files alone.
    formatters::keep_ralph_out(root, &formatters::check_commands(&plan, &config));

    tell_what_next(
        &plan,
        &protected,
        environment.as_deref(),
        worktrees.as_deref(),
        &options,
        &files.prompt,
        &hook,
        timeout,
        target_path,
        root,
    );
    Ok(exit_codes::OK)
}

/// Refuses `--verify` given an empty command.
fn refuse_empty_verify(options: &InitArgs) -> Result<(), CtlError> {
    match &options.verify {
        Some(command) if command.trim().is_empty() => Err(CtlError::BadArgument(
            "--verify needs a command (the project's tests, e.g. --verify 'cargo test')".into(),
        )),
        _ => Ok(()),
    }
}

/// What each new worktree needs that this checkout keeps out of git, when
/// config.json says nothing of it yet: the environment the pinned check
/// runs in, made the same way in each worktree, before what else a
/// worktree may need.
fn offered_setup(
    root: &Path,
    plan: &VerifyPlan,
    config: &Result<Config, ralph_core::judge::config::ConfigError>,
) -> Option<worktree_setup::Setup> {
    match config {
        Ok(config) if config.worktree_setup.is_none() => {
            worktree_setup::environment_of(root, plan).or_else(|| worktree_setup::detect(root))
        }
        _ => None,
    }
}

/// The protected paths the registration's deny rules cover: the offered
/// ones when this init writes the test command, else config.json's.
fn protected_paths(
    plan: &VerifyPlan,
    config: &Result<Config, ralph_core::judge::config::ConfigError>,
    offered_protection: &[String],
) -> Vec<String> {
    match (plan, config) {
        (VerifyPlan::Write(..), _) if !offered_protection.is_empty() => offered_protection.to_vec(),
        (_, Ok(config)) => config.completion.protected_paths.clone(),
        _ => Vec::new(),
    }
}

/// The files `init` writes besides config.json.
struct Destinations {
    /// The loop's prompt, `.ralph/PROMPT.md`.
    prompt: PathBuf,
    /// The guardrails file.
    guardrails: PathBuf,
    /// The audit launcher for a shell.
    sh: PathBuf,
    /// The audit launcher for Windows.
    bat: PathBuf,
    /// The project's shared Claude Code settings.
    shared_settings: PathBuf,
    /// The person's own Claude Code settings for the project.
    local_settings: PathBuf,
    /// The runtime folder's `.gitignore`.
    runtime_ignore: PathBuf,
    /// `.claude/.gitignore`, which keeps the person's own settings out of git.
    claude_ignore: PathBuf,
}

impl Destinations {
    /// Where each file goes in the project at `paths`.
    fn of(paths: &ProjectPaths) -> Self {
        let ralph_dir = paths.ralph_dir();
        Destinations {
            prompt: ralph_dir.join("PROMPT.md"),
            guardrails: paths.guardrails_file(),
            sh: ralph_dir.join("ralph-audit.sh"),
            bat: ralph_dir.join("ralph-audit.bat"),
            shared_settings: paths.settings_file(),
            local_settings: paths.local_settings_file(),
            runtime_ignore: paths.runtime_dir().join(".gitignore"),
            claude_ignore: paths.root.join(".claude").join(".gitignore"),
        }
    }

    /// Refuses a link (or a folder, a FIFO...) at any destination before
    /// anything is written: `.claude/.gitignore` only when the hook goes
    /// `into_local`, config.json (`config_file`) only when it is written.
    fn inspect_all(&self, into_local: bool, config_file: Option<&Path>) -> Result<(), CtlError> {
        let mut destinations = vec![
            (self.prompt.as_path(), true),
            (&self.guardrails, true),
            (&self.sh, false),
            (&self.bat, false),
            (&self.runtime_ignore, true),
        ];
        if into_local {
            destinations.push((&self.claude_ignore, false));
        }
        destinations.extend(config_file.map(|path| (path, false)));
        for (path, keep_existing) in destinations {
            inspect(path, keep_existing)?;
        }
        Ok(())
    }
}

/// What `init` registers in the settings file that gets ralph's hook.
struct Registration<'a> {
    /// The hook's binary.
    hook: &'a Path,
    /// Its timeout, in seconds.
    timeout: u32,
    /// The protected paths, whose folder-wide rules an earlier init wrote.
    protected: &'a [String],
    /// The project's folder.
    root: &'a Path,
}

impl Registration<'_> {
    /// Registers the Stop hook and ralph's deny rules in `target` (the
    /// settings at `target_path`) and takes the hook out of `other`.
    fn merge(
        &self,
        target: &mut Value,
        target_path: &Path,
        other: &mut Value,
    ) -> Result<(), CtlError> {
        let command = settings::hook_command(&self.hook.display().to_string());
        let settings_error = |problem: settings::ShapeError| CtlError::Settings {
            path: target_path.to_path_buf(),
            problem: problem.to_string(),
        };
        settings::merge_stop_hook(target, &command, self.timeout).map_err(settings_error)?;
        settings::merge_deny_rules(target).map_err(settings_error)?;
        // The protected paths get no rule here: a claim is judged by what
        // changed of the files there at the start, a new test is the agent's to
        // add, and a run keeps those files off the file tools itself. The
        // folder-wide rules an earlier init wrote (which refused a new test)
        // are taken out.
        let root = self.root;
        settings::remove_deny_rules(
            target,
            &settings::former_protected_rules(self.protected, |glob| root.join(glob).is_dir()),
        );
        // Never registered twice: Claude Code would run both.
        settings::remove_stop_hook(other);
        Ok(())
    }
}

/// Claude Code's user-wide settings folder: `CLAUDE_CONFIG_DIR`, else
/// `.claude` in the home folder.
fn user_settings_dir() -> Option<PathBuf> {
    std::env::var_os("CLAUDE_CONFIG_DIR")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|home| home.join(".claude")))
}

/// The same folder, by their real paths (lexically when either is missing).
fn same_folder(a: &Path, b: &Path) -> bool {
    match (fs::canonicalize(a), fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => std::path::absolute(a).ok() == std::path::absolute(b).ok(),
    }
}

/// Refuses a project whose `.claude/settings.json` is Claude Code's
/// user-wide settings file (the project is the home folder, or
/// `CLAUDE_CONFIG_DIR` is its `.claude`): the Stop hook and the deny rules
/// written there would hold every session, in any folder, and the home's
/// `.claude/ralph` would make every folder below it find ralph installed.
fn refuse_user_settings(paths: &ProjectPaths) -> Result<(), CtlError> {
    let home = dirs::home_dir().filter(|home| same_folder(&paths.root, home));
    let user_dir = user_settings_dir();
    let project_dir = paths.root.join(".claude");
    let is_user_dir = user_dir
        .as_deref()
        .is_some_and(|dir| same_folder(&project_dir, dir));
    if home.is_none() && !is_user_dir {
        return Ok(());
    }
    let file = paths.settings_file();
    let why = match home {
        Some(_) => format!("{} is your home folder", paths.root.display()),
        None => format!("CLAUDE_CONFIG_DIR is {}", project_dir.display()),
    };
    Err(CtlError::Refused(format!(
        "not installing: {why}, so {} is Claude Code's user-wide settings file, and the Stop hook \
         and deny rules written there would apply to every Claude Code session you start, in \
         any folder; run `ralph-ctl init` in a project's folder (or pass --project DIR), or pass \
         --user-wide if that is what you want",
        file.display()
    )))
}

/// PROMPT.md and guardrails.md when they are missing, and the starter
/// formula `--formula NAME` asks for.
fn install_templates(
    paths: &ProjectPaths,
    options: &InitArgs,
    plan: &VerifyPlan,
    prompt: &Path,
    guardrails: &Path,
) -> Result<(), CtlError> {
    let root = &paths.root;
    report(
        install(prompt, assets::PROMPT_TEMPLATE, true, 0o644)?,
        prompt,
        root,
    );
    report(
        install(guardrails, assets::GUARDRAILS_TEMPLATE, true, 0o644)?,
        guardrails,
        root,
    );
    if let Some(name) = &options.formula {
        let path = crate::formula::file_of(paths, name)?;
        // The project's verify gates the steps; without one, the tests
        // found (if any) gate the last step.
        let found_tests = match plan {
            VerifyPlan::Offer(found) => Some(found.command.as_str()),
            _ => None,
        };
        let text = crate::formula::starter(name, found_tests);
        report(install(&path, &text, true, 0o644)?, &path, root);
    }
    Ok(())
}

/// Writes each settings file that changed: the one the hook is
/// registered in always, the other only when it exists.
fn write_settings(
    files: [(&PathBuf, &Value, &Value); 2],
    target_path: &Path,
    root: &Path,
) -> Result<(), CtlError> {
    for (path, value, before) in files {
        let exists = path.symlink_metadata().is_ok();
        let wanted = if path.as_path() == target_path {
            true
        } else {
            exists
        };
        if !wanted {
            continue;
        }
        let change = if value == before && exists {
            Change::Unchanged
        } else {
            install(path, &json_text(value), false, 0o644)?
        };
        report(change, path, root);
    }
    Ok(())
}

/// The project's test command as `init` finds it: the command, and what
/// it was found from.
pub(crate) fn test_command(root: &Path) -> Option<(String, String)> {
    detect::test_command(root).map(|found| (found.command, found.source))
}

/// The completion check `init` settles on: `--verify`, the config's own,
/// or the test command found (asked in a terminal, taken with `--yes`).
fn plan_verify(
    root: &Path,
    options: &InitArgs,
    config: &Result<Config, ralph_core::judge::config::ConfigError>,
    offered_protection: &[String],
) -> VerifyPlan {
    match (&options.verify, config) {
        (Some(command), _) => VerifyPlan::Write(command.clone(), "--verify".into()),
        (None, Ok(config)) if !config.completion.verify.is_empty() => {
            VerifyPlan::Kept(config.completion.verify.len())
        }
        (None, _) => match detect::test_command(root) {
            // A loop about to run unattended (`run --task` under nohup, CI
            // or another agent) never runs unchecked when a check is found.
            Some(found) if options.then_runs && !options.yes && !has_terminal() => {
                crate::output::say!(
                    "No terminal to ask in: the test command found, `{}` (from {}), becomes the completion \
                     check, as --yes would make it (change it in .claude/ralph/config.json).",
                    found.command,
                    found.source
                );
                VerifyPlan::Write(found.command, found.source)
            }
            Some(found) if options.yes || ask_to_use(&found, offered_protection) => {
                VerifyPlan::Write(found.command, found.source)
            }
            Some(found) => VerifyPlan::Offer(found),
            None => VerifyPlan::Nothing,
        },
    }
}

/// config.json's new text when the plan writes a verify command (with the
/// protected paths offered, and the `worktreeSetup` found); the config must
/// be valid before it is added to.
fn config_text(
    config_path: &Path,
    plan: &VerifyPlan,
    config: &Result<Config, ralph_core::judge::config::ConfigError>,
    offered_protection: &[String],
    setup: Option<&worktree_setup::Setup>,
) -> Result<Option<String>, CtlError> {
    let VerifyPlan::Write(command, _) = plan else {
        return Ok(None);
    };
    config.as_ref().map_err(|e| {
        CtlError::BadArgument(format!("{e}; fix it before init adds the verify command"))
    })?;
    let mut value = read_json_object(config_path)?;
    value["verify"] = serde_json::json!([{"name": VERIFY_NAME, "command": command}]);
    if !offered_protection.is_empty() {
        value["protectedPaths"] = serde_json::json!(offered_protection);
    }
    if let Some(setup) = setup {
        value["worktreeSetup"] = serde_json::json!(setup.command);
    }
    Ok(Some(json_text(&value)))
}

/// What `init` says when the check it pins runs in the environment the
/// project's maintainers make (uv's, tox's: `runnable::environment_maker`)
/// and that environment is not made yet: the command that makes it, to run
/// before the loop starts (the start refuses a check that cannot run).
fn environment_line(plan: &VerifyPlan, root: &Path) -> Option<String> {
    let VerifyPlan::Write(command, _) = plan else {
        return None;
    };
    let maker = ralph_core::observe::runnable::environment_maker(root)?;
    let python = maker.python();
    (command.starts_with(&format!("{python} ")) && !root.join(&python).exists()).then(|| {
        format!(
            "Environment: the check runs in {venv}, which {tool} makes from {source} and which is not \
             made yet: run `{make}` before the loop starts.",
            venv = maker.venv,
            tool = maker.tool,
            source = maker.source,
            make = maker.make
        )
    })
}

/// What `init` says of worktrees: the `worktreeSetup` it wrote (with the
/// verify command) or found and offers, else what a worktree's check takes
/// from this checkout as it is; `None`: nothing to say.
fn worktrees_line(
    plan: &VerifyPlan,
    setup: Option<&worktree_setup::Setup>,
    root: &Path,
) -> Option<String> {
    match (setup, plan) {
        (Some(setup), VerifyPlan::Write(..)) => Some(format!(
            "Worktrees: `{}` (worktreeSetup, for {}) runs in each new worktree of a queue run or a \
             --worktree loop before its test baseline, in .claude/ralph/config.json: a worktree's check \
             cannot reach this checkout's files.",
            setup.command, setup.source
        )),
        (Some(setup), _) => Some(format!(
            "Worktrees: found {}, which a worktree's check cannot reach: add \"worktreeSetup\": \"{}\" to \
             .claude/ralph/config.json before a queue run or a --worktree loop.",
            setup.source, setup.command
        )),
        (None, _) => worktree_setup::shared_note(root),
    }
}

/// The Stop hook's timeout: `--timeout`, else room for the verification
/// commands (warned about when the given one leaves none).
fn hook_timeout(
    options: &InitArgs,
    plan: &VerifyPlan,
    config: &Result<Config, ralph_core::judge::config::ConfigError>,
) -> u32 {
    let verify_total = match plan {
        VerifyPlan::Write(..) => u64::from(verify::DEFAULT_TIMEOUT_SECS),
        _ => config
            .as_ref()
            .map_or(0, |c| verify::total_timeout(&c.completion.verify)),
    };
    let timeout = options.timeout.unwrap_or_else(|| {
        let needed = verify_total + 30;
        u32::try_from(needed.max(u64::from(settings::DEFAULT_HOOK_TIMEOUT_SECS)))
            .unwrap_or(u32::MAX)
    });
    if let Some(warning) = registration::timeout_warning(verify_total, u64::from(timeout)) {
        crate::output::say_err!("ralph-ctl: warning: {warning}");
    }
    timeout
}

/// The launchers, with where ralph-ctl is quoted for each script (an empty
/// value makes them look at `RALPH_CTL` and PATH instead).
fn install_launchers(sh: &Path, bat: &Path, root: &Path) -> Result<(), CtlError> {
    let ctl = ctl_path();
    let sh_value = crate::driver::command::sh_quoted(ctl.as_deref().unwrap_or_default());
    report(
        install(
            sh,
            &assets::LAUNCHER_SH.replace(assets::CTL_PLACEHOLDER, &sh_value),
            false,
            0o755,
        )?,
        sh,
        root,
    );
    make_executable(sh)?;
    let bat_value = ctl.as_deref().and_then(bat_set_value).unwrap_or_default();
    let bat_text = assets::LAUNCHER_BAT
        .replace(assets::CTL_PLACEHOLDER, &bat_value)
        .replace("\r\n", "\n")
        .replace('\n', "\r\n");
    report(install(bat, &bat_text, false, 0o644)?, bat, root);
    Ok(())
}

/// Lists `.claude/settings.local.json` in `.claude/.gitignore` when it is
/// not listed yet (a person's own registration stays out of git).
fn ignore_local_settings(claude_ignore: &Path, root: &Path) -> Result<(), CtlError> {
    let current = match files::read_bounded(claude_ignore, 1024 * 1024)
        .map_err(CtlError::io("read", &claude_ignore))?
    {
        Bounded::Bytes(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    };
    let listed = current.lines().any(|l| {
        let l = l.trim();
        l == LOCAL_SETTINGS_IGNORED || l == "settings.local.json"
    });
    if !listed {
        let mut text = current.clone();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(LOCAL_SETTINGS_IGNORED);
        text.push('\n');
        report(
            install(claude_ignore, &text, false, 0o644)?,
            claude_ignore,
            root,
        );
    }
    Ok(())
}

/// What `init` tells the person once it is done: the completion check,
/// the protected paths, what worktrees need, and what to run next.
#[allow(clippy::too_many_arguments)]
fn tell_what_next(
    plan: &VerifyPlan,
    protected: &[String],
    environment: Option<&str>,
    worktrees: Option<&str>,
    options: &InitArgs,
    prompt: &Path,
    hook: &Path,
    timeout: u32,
    target_path: &Path,
    root: &Path,
) {
    crate::output::say!();
    match plan {
        VerifyPlan::Kept(n) => crate::output::say!(
            "Completion check: the {n} verify command(s) of .claude/ralph/config.json (kept)."
        ),
        VerifyPlan::Write(command, source) => crate::output::say!(
            "Completion check: `{command}` (from {source}), in .claude/ralph/config.json: a claim of done \
             is accepted only when it passes."
        ),
        VerifyPlan::Offer(found) => crate::output::say!(
            "Found the test command `{}` (from {}). It is not the completion check yet: run `ralph-ctl init --yes` \
             to make it one (or `--verify CMD` for another); until then a claim of done is accepted without \
             running anything.",
            found.command,
            found.source
        ),
        VerifyPlan::Nothing => crate::output::say!(
            "No test command found: add the completion check with `ralph-ctl init --verify CMD` (the command \
             that proves the work done); until then a claim of done is accepted without running anything."
        ),
    }
    if let Some(line) = environment {
        crate::output::say!("{line}");
    }
    if !protected.is_empty() {
        crate::output::say!(
            "Protected: {} (protectedPaths in .claude/ralph/config.json), with the test runners' configuration: \
             a claim that changed or removed a file there at the loop's start is rejected (new test files are \
             free); remove them there if the task changes them.",
            protected.join(", ")
        );
    }
    if let Some(line) = worktrees {
        crate::output::say!("{line}");
    }
    let launcher = match &options.formula {
        Some(name) => format!(".claude/ralph/ralph-audit.sh --formula {name}"),
        None => ".claude/ralph/ralph-audit.sh".to_string(),
    };
    let prompt_ready =
        prompt_text::read_prompt(prompt).is_ok_and(|text| !prompt_text::is_template(&text));
    if options.then_runs {
        // `run --task` goes on with the loop itself.
    } else if prompt_ready {
        crate::output::say!("Next: run {launcher} (PROMPT.md already holds a task).");
    } else {
        crate::output::say!(
            "Next: write the task into .claude/ralph/PROMPT.md (a loop refuses the template), then run {launcher}"
        );
    }
    crate::output::say!(
        "The Stop hook is {}, timeout {timeout}s, registered in {}.",
        hook.display(),
        target_path
            .strip_prefix(root)
            .unwrap_or(target_path)
            .display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn sh_quoting_survives_any_path() {
        for path in [
            "/usr/local/bin/ralph-ctl",
            "/tmp/x/it's a dir/ralph-ctl",
            "/a b/$(touch pwned)/`id`/\"q\"/\\n/*/ralph-ctl",
            "/new\nline/ralph-ctl",
            "''",
            "",
        ] {
            let script = format!(
                "installed={}\nprintf '%s' \"$installed\"",
                crate::driver::command::sh_quoted(path)
            );
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .current_dir(std::env::temp_dir())
                .output()
                .unwrap();
            assert!(out.status.success(), "{path:?}: {out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), path, "{script}");
        }
    }

    #[test]
    fn bat_values_double_percent_and_refuse_quotes_and_line_breaks() {
        assert_eq!(
            bat_set_value(r"C:\Program Files\it's & 100%\ralph-ctl.exe").as_deref(),
            Some(r"C:\Program Files\it's & 100%%\ralph-ctl.exe")
        );
        assert_eq!(bat_set_value("/x/\"q\"/ralph-ctl"), None);
        assert_eq!(bat_set_value("/x/\n/ralph-ctl"), None);
    }
}
