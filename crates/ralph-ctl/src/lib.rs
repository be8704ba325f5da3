//! The `ralph-ctl` command: thin clap front end over [`commands`], with one
//! place ([`run`]) that turns errors into a message and an exit code.

pub mod assets;
pub mod cli;
pub mod commands;
pub mod driver;
pub mod error;
pub mod session_id;
pub mod settings;

use std::io::Write;
use std::path::PathBuf;

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;

use crate::cli::{Cli, Command};
use crate::error::CtlError;

/// Runs one command and returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    let root = match cli
        .project
        .clone()
        .map(Ok)
        .unwrap_or_else(std::env::current_dir)
    {
        Ok(root) => root,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "ralph-ctl: cannot tell the current folder: {e}; pass --project DIR"
            );
            return exit_codes::ERROR;
        }
    };
    let paths = ProjectPaths::new(absolute(root));
    let result = match cli.command {
        Command::Status { json } => commands::status::run(&paths, json, &mut std::io::stdout()),
        Command::Log { entries, json } => commands::log::run(
            &paths,
            usize::try_from(entries).unwrap_or(usize::MAX),
            json,
            &mut std::io::stdout(),
            &mut std::io::stderr(),
        ),
        Command::Reset => commands::reset::run(&paths),
        Command::Start {
            session_id,
            max_iterations,
            force,
        } => commands::start::run(&paths, session_id, max_iterations, force),
        Command::Prompt => commands::prompt::run(&paths),
        Command::Finish {
            session_id,
            client_exit,
        } => commands::finish::run(&paths, &session_id, client_exit),
        Command::Init { hook_path, timeout } => commands::init::run(&paths, hook_path, timeout),
        Command::Run {
            headless,
            reset,
            resume,
            client_args,
        } => commands::run::run(
            &paths,
            commands::run::RunOptions {
                headless,
                reset,
                resume,
                client_args,
            },
        ),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Written, not `eprintln!`: a closed terminal must not turn into a panic.
            let _ = writeln!(std::io::stderr(), "ralph-ctl: {e}");
            e.exit_code()
        }
    }
}

fn absolute(path: PathBuf) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map(|cwd| cwd.join(&path))
            .unwrap_or(path)
    }
}

/// Convenience alias for command results: `Ok(exit code)`.
pub type CmdResult = Result<i32, CtlError>;
