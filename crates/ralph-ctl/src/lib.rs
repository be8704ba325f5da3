//! The `ralph-ctl` command: thin clap front end over `commands`, with one
//! place (`run`, behind [`main`]) that turns errors into a message and an
//! exit code. Each command's arguments are an `Args` struct in the
//! command's own module (`commands::run::RunArgs`, …); `cli.rs` lists the
//! commands.

pub(crate) mod assets;
pub(crate) mod cli;
pub(crate) mod commands;
pub(crate) mod driver;
pub(crate) mod error;
pub(crate) mod formula;
pub(crate) mod output;
pub(crate) mod queue;
pub(crate) mod render;
pub(crate) mod session_id;
pub(crate) mod settings;
#[cfg(test)]
mod testdir;

use std::path::PathBuf;

use ralph_core::paths::ProjectPaths;

use crate::cli::{Cli, Command};
use crate::error::CtlError;

/// Reads the command line and runs its command; the process exit code.
pub fn main() -> i32 {
    use clap::Parser;
    run(Cli::parse())
}

/// Runs one command and returns the process exit code.
fn run(cli: Cli) -> i32 {
    // Inside a loop's client the agent chooses `check`'s arguments: the
    // project is not one of them, whatever folder it names.
    if let (Command::Check(_), Some(_)) = (&cli.command, &cli.project) {
        let shell = commands::check::AgentShell::from_env(&ralph_core::judge::config::ProcessEnv);
        if let Err(e) = shell.allows_project() {
            crate::output::say_err!("ralph-ctl: {e}");
            return e.exit_code();
        }
    }
    let root = match project_root(cli.project.clone()) {
        Ok(root) => root,
        Err(e) => {
            crate::output::say_err!("ralph-ctl: {e}");
            return e.exit_code();
        }
    };
    let paths = ProjectPaths::new(root);
    let result = match cli.command {
        Command::Status(args) => commands::status::command(&paths, args),
        Command::Log(args) => commands::log::command(&paths, args),
        Command::Check(args) => commands::check::command(&paths, args),
        Command::Reset(args) => commands::reset::command(&paths, args),
        Command::Watchdog(args) => commands::watchdog::command(args),
        Command::Watch => commands::watch::run(&paths, &mut std::io::stdout()),
        Command::Report(args) => commands::report::command(&paths, args),
        Command::Serve(args) => commands::serve::command(&paths, args),
        Command::Doctor(args) => commands::doctor::command(&paths, args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            commands::completions::run(shell, Cli::command())
        }
        Command::LoopStart(args) if args.hook => {
            return commands::plugin::loop_start_hook_on(
                std::io::stdin(),
                std::env::var_os("CLAUDE_PROJECT_DIR").map(std::path::PathBuf::from),
                std::env::var(commands::plugin::SESSION_ENV).ok(),
                &mut std::io::stdout(),
            );
        }
        Command::LoopStart(args) if args.started => {
            commands::plugin::loop_started(&paths, args.session, &mut std::io::stdout())
        }
        Command::LoopStart(args) => {
            commands::plugin::loop_start(&paths, args.with_stdin_task(), &mut std::io::stdout())
        }
        Command::Say(args) => commands::say::command(&paths, args),
        Command::Statusline => {
            commands::statusline::run(&paths, &mut std::io::stdin(), &mut std::io::stdout())
        }
        Command::Answer(args) => commands::answer::command(&paths, args),
        Command::Cancel(args) => commands::cancel::command(&paths, args),
        Command::Reload => commands::reload::run(&paths, &mut std::io::stdout()),
        Command::History(args) => commands::history::command(&paths, args),
        Command::Queue(args) => commands::queue::command(&paths, args),
        Command::Start(args) => commands::start::command(&paths, args),
        Command::Prompt => commands::prompt::run(&paths),
        Command::Finish(args) => commands::finish::command(&paths, args),
        Command::Init(args) => commands::init::run(&paths, args),
        Command::Run(args) => commands::run::run(&paths, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Written, not `eprintln!`: a closed terminal must not turn into a
            // panic; an error may quote a file the agent wrote.
            crate::output::say_err!("ralph-ctl: {e}");
            e.exit_code()
        }
    }
}

/// The project a command works on: `--project`, which must be an existing
/// folder; else, from the current folder up, the nearest folder where ralph
/// is installed (`.claude/ralph`), else the current folder. So `status` in
/// a subfolder finds the project above, and `init` in a subproject of a
/// larger repository installs there.
fn project_root(given: Option<PathBuf>) -> Result<PathBuf, CtlError> {
    if let Some(dir) = given {
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        return match std::fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => Ok(dir),
            Ok(_) => Err(CtlError::BadArgument(format!(
                "--project {}: not a folder; pass the project's folder",
                dir.display()
            ))),
            Err(e) => Err(CtlError::BadArgument(format!(
                "--project {}: {e}; pass an existing project folder",
                dir.display()
            ))),
        };
    }
    let cwd = std::env::current_dir().map_err(|e| {
        CtlError::BadArgument(format!(
            "cannot tell the current folder: {e}; pass --project DIR"
        ))
    })?;
    let has = |dir: &std::path::Path, what: &str| std::fs::symlink_metadata(dir.join(what)).is_ok();
    Ok(cwd
        .ancestors()
        .find(|dir| has(dir, ".claude/ralph"))
        .unwrap_or(&cwd)
        .to_path_buf())
}
