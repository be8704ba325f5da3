//! `ralph-ctl run`: what the launchers run. Starts a loop, runs Claude Code
//! on it until the client exits, and records how the loop ended:
//! `start` → build the client command → run and watch it → `finish`.

use std::ffi::OsString;
use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::state::Status;

use crate::commands::{finish, prompt, reset, start};
use crate::driver::client::{self, RunningClient, Supervision};
use crate::driver::command::{self, ClientProgram, Launch, Platform, PromptDelivery};
use crate::driver::signals::{SignalSource, Signals};
use crate::error::CtlError;
use crate::CmdResult;

/// The file holding the first prompt when it is pointed at rather than passed
/// (interactive mode on Windows), relative to the runtime folder.
pub const PROMPT_FILE_NAME: &str = "ralph-first-prompt.md";

/// The launcher's options.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// `claude -p --output-format json` instead of the terminal UI.
    pub headless: bool,
    /// Clear the previous loop's state first.
    pub reset: bool,
    /// Arguments for the client (given after `--`).
    pub client_args: Vec<OsString>,
}

/// Runs one loop; returns the loop's exit code (README: Exit codes).
pub fn run(paths: &ProjectPaths, options: RunOptions) -> CmdResult {
    // From here on SIGINT, SIGTERM and SIGHUP are recorded, not fatal.
    let mut signals =
        Signals::install().map_err(|e| CtlError::Client(format!("cannot catch signals: {e}")))?;
    let client = find_client(paths)?;
    if options.reset {
        if let reset::Cleared::Quarantined(aside) = reset::clear(paths)? {
            say(&format!("moved the corrupt state to {}", aside.display()));
        }
    }
    let started = start::start_loop(paths, None, None, false)?;
    let session = started.session_id.as_str();

    let prompt = match prompt::current_text(paths) {
        Ok(text) => text,
        Err(e) => {
            say(&e.to_string());
            let cause = format!("the first prompt could not be read ({e})");
            return end(paths, session, &cause, e.exit_code());
        }
    };
    if let Some(signal) = signals.take().first().copied() {
        let cause = format!("{} received before Claude Code started", signal.describe());
        return end(paths, session, &cause, signal.exit_code());
    }

    let prompt_file = paths.runtime_dir().join(PROMPT_FILE_NAME);
    let block_cap = std::env::var(command::BLOCK_CAP_ENV).ok();
    let command = command::build(&Launch {
        client: &client,
        headless: options.headless,
        session_id: session,
        max_iterations: started.max_iterations,
        prompt: &prompt,
        client_args: &options.client_args,
        block_cap: block_cap.as_deref(),
        prompt_file: &prompt_file,
        platform: Platform::current(),
    });
    if let PromptDelivery::File(path) = &command.delivery {
        if let Err(e) = std::fs::write(path, &command.prompt) {
            let problem = CtlError::io("write", path)(e);
            say(&problem.to_string());
            let cause = format!("the first prompt could not be written ({problem})");
            return end(paths, session, &cause, exit_codes::ERROR);
        }
    }
    let supervision = RunningClient::spawn(&command, &paths.root).map(|mut running| {
        client::supervise(&mut running, &mut signals, client::KILL_GRACE, client::TICK)
    });
    if let PromptDelivery::File(path) = &command.delivery {
        let _ = std::fs::remove_file(path);
    }
    match supervision {
        Ok(Ok(supervision)) => finish_after(paths, session, &supervision),
        Ok(Err(e)) => {
            say(&format!("cannot wait for the Claude Code client: {e}"));
            let cause = format!("Claude Code could not be waited for ({e})");
            end(paths, session, &cause, exit_codes::ERROR)
        }
        Err(e) => {
            say(&format!(
                "cannot start the Claude Code client {}: {e}",
                command.program.display()
            ));
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit_codes::CLIENT_NOT_FOUND
            } else {
                exit_codes::ERROR
            };
            end(
                paths,
                session,
                &format!("Claude Code could not start ({e})"),
                code,
            )
        }
    }
}

/// Records the end once the client exited: the loop's code, or 128 + the
/// signal when a signal the driver received left the loop interrupted.
fn finish_after(paths: &ProjectPaths, session: &str, supervision: &Supervision) -> CmdResult {
    let cause = supervision.describe(client::KILL_GRACE);
    let ending = finish::record(paths, session, &cause)?;
    let code = finish::announce(&ending);
    Ok(match (&ending, supervision.signal) {
        (finish::Ending::Loop(state), Some(signal)) if state.status == Status::Interrupted => {
            signal.exit_code()
        }
        _ => code,
    })
}

/// Records the end of a loop the client did not run to its own end (it
/// could not start or be waited for, a signal came first), and exits with `code`.
fn end(paths: &ProjectPaths, session: &str, cause: &str, code: i32) -> CmdResult {
    finish::announce(&finish::record(paths, session, cause)?);
    Ok(code)
}

/// The client `RALPH_CLAUDE` names (default `claude`), or exit 127.
fn find_client(paths: &ProjectPaths) -> Result<ClientProgram, CtlError> {
    let spec = match std::env::var(command::CLIENT_ENV) {
        Ok(spec) => spec,
        Err(std::env::VarError::NotPresent) => String::new(),
        Err(std::env::VarError::NotUnicode(raw)) => {
            return Err(CtlError::BadArgument(format!(
                "{}={raw:?} is not valid UTF-8; set it to the client's path",
                command::CLIENT_ENV
            )))
        }
    };
    let path_var = std::env::var_os("PATH");
    let pathext = cfg!(windows)
        .then(|| std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".to_string()));
    let find = |name: &str| {
        command::find_executable(name, &paths.root, path_var.as_deref(), pathext.as_deref())
    };
    ClientProgram::parse(&spec, find).ok_or_else(|| {
        let shown = if spec.trim().is_empty() {
            command::DEFAULT_CLIENT
        } else {
            spec.as_str()
        };
        CtlError::ClientNotFound(format!(
            "cannot find the Claude Code client '{shown}'; install it \
             (npm install -g @anthropic-ai/claude-code) or set {} to its path",
            command::CLIENT_ENV
        ))
    })
}

/// One line on stderr; a terminal that is gone (EIO, EPIPE) is ignored.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "ralph: {line}");
}
