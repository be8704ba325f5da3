//! The Stop hook's protocol glue: Claude Code's stdin object in, one stop of
//! the loop ([`ralph_core::engine::run_stop`]), Claude Code's answer out.
//! Registered for `StopFailure` too (Claude Code 2.1 and later): an API
//! error that ended the turn pauses the loop
//! ([`ralph_core::engine::run_stop_failure`]); that event takes no answer.
//!
//! Every error lets the stop through with one line on stderr: a broken hook
//! must never trap a session.

use std::io::{self, Read, Write};
use std::panic;
use std::process::ExitCode;

use ralph_core::config::{self, EnvSource, ProcessEnv};
use ralph_core::engine::{self, Answer, EngineError, RealWorld, Stop, StopFailure, World};
use ralph_core::hook_input::{self, HookInput, InputError};
use ralph_core::paths::ProjectPaths;
use ralph_core::store::StoreError;
use thiserror::Error;

/// Everything that can make the hook give up and let the stop through.
#[derive(Debug, Error)]
pub enum HookError {
    /// The stdin object is unusable.
    #[error("{0}")]
    Input(#[from] InputError),
    /// Neither CLAUDE_PROJECT_DIR nor the input's `cwd` names the project.
    #[error("cannot tell the project folder: CLAUDE_PROJECT_DIR is unset and the hook input has no `cwd`")]
    NoProjectRoot,
    /// The stop itself failed.
    #[error("{0}")]
    Engine(#[from] EngineError),
}

/// What the hook did, for stderr.
#[derive(Debug, PartialEq, Eq)]
pub struct Handled {
    /// The answer written to stdout (nothing for `Allow`).
    pub answer: Answer,
    /// Lines for stderr.
    pub notes: Vec<String>,
}

/// What `ralph-stop-hook --help` prints.
pub const HELP: &str = "\
ralph-stop-hook: the Stop hook of the Ralph loop for Claude Code.

Claude Code runs it at every stop of a session, with the stop as JSON on
stdin. Outside a loop (RALPH_ACTIVE is not 1) it does nothing at all. In a
loop it blocks the stop and feeds .claude/ralph/PROMPT.md back, or lets the
session stop: the work is done and verified, the iteration cap is reached,
or the loop is stuck. It always exits 0 and says on stderr, in one line,
anything that went wrong.

Install and start loops with ralph-ctl (`ralph-ctl init`, `ralph-ctl run`);
see the README.

With --plugin (the plugin's registration, hooks/hooks.json) it goes on only
for a session that is not the launcher's and a project with a loop's state
file (a /ralph-loop loop); the loop's own session alone is held.

Usage: ralph-stop-hook [--help | --version | --plugin]
";

/// Answers `--help`/`-h` or `--version`/`-V` when they are the only
/// argument (the exit code to return); `None` otherwise, and the hook runs
/// as Claude Code runs it. Never reads stdin.
pub fn answer_flag(mut args: impl Iterator<Item = std::ffi::OsString>) -> Option<ExitCode> {
    let first = args.next()?;
    if args.next().is_some() {
        return None;
    }
    let text = match first.to_str()? {
        "--help" | "-h" => HELP.to_string(),
        "--version" | "-V" => format!("ralph-stop-hook {}\n", env!("CARGO_PKG_VERSION")),
        _ => return None,
    };
    // A closed stdout is no reason to fail here.
    let _ = io::stdout().write_all(text.as_bytes());
    Some(ExitCode::SUCCESS)
}

/// The argument of the plugin's registration (`hooks/hooks.json`).
pub const PLUGIN_FLAG: &str = "--plugin";

/// True when the hook runs as the plugin's (`ralph-stop-hook --plugin`).
pub fn is_plugin_mode(mut args: impl Iterator<Item = std::ffi::OsString>) -> bool {
    args.next().is_some_and(|a| a == PLUGIN_FLAG) && args.next().is_none()
}

/// The plugin's guard: true when the project at `project_dir`
/// (`CLAUDE_PROJECT_DIR`) has a loop's state file, by one stat. No project
/// folder, no loop: the session is let go.
pub fn plugin_loop_exists(project_dir: Option<std::ffi::OsString>) -> bool {
    project_dir.filter(|d| !d.is_empty()).is_some_and(|dir| {
        ralph_core::paths::ProjectPaths::new(std::path::PathBuf::from(dir))
            .state_file()
            .symlink_metadata()
            .is_ok()
    })
}

/// Runs the hook on the process's stdin, stdout, stderr and environment.
/// Always exits 0: blocking is done through stdout.
pub fn run() -> ExitCode {
    ralph_core::store::ignore_file_size_signal();
    panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        report(&format!("internal error ({what}); please report it"));
    }));
    let outcome = panic::catch_unwind(|| {
        handle(
            io::stdin().lock(),
            &mut ClientStdout::new(),
            &ProcessEnv,
            &RealWorld,
        )
    });
    match outcome {
        Ok(Ok(handled)) => handled.notes.iter().for_each(|n| report_note(n)),
        Ok(Err(e)) => report(&e.to_string()),
        Err(_) => {} // the panic hook already said what happened
    }
    ExitCode::SUCCESS
}

/// Standard output, refusing to carry an answer when it goes nowhere.
///
/// A Rust program started with its stdout closed finds `/dev/null` there
/// (the runtime reopens descriptors 0–2), where every write succeeds: a
/// block written there never reaches the client, so the write fails
/// instead, and the stop leaves the state as it was.
struct ClientStdout {
    out: io::StdoutLock<'static>,
    nowhere: bool,
}

impl ClientStdout {
    fn new() -> ClientStdout {
        ClientStdout {
            out: io::stdout().lock(),
            nowhere: is_dev_null(&io::stdout()),
        }
    }

    fn check(&self) -> io::Result<()> {
        if self.nowhere {
            return Err(io::Error::other(
                "stdout is closed or /dev/null, so Claude Code would never read it",
            ));
        }
        Ok(())
    }
}

impl Write for ClientStdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.check()?;
        self.out.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.check()?;
        self.out.flush()
    }
}

/// Whether `fd` is the null device.
fn is_dev_null(fd: &impl std::os::fd::AsFd) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(own) = fd.as_fd().try_clone_to_owned() else {
        return false;
    };
    let (Ok(this), Ok(null)) = (
        std::fs::File::from(own).metadata(),
        std::fs::metadata("/dev/null"),
    ) else {
        return false;
    };
    this.file_type().is_char_device()
        && null.file_type().is_char_device()
        && this.rdev() == null.rdev()
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn report(problem: &str) {
    let _ = writeln!(
        io::stderr(),
        "ralph-stop-hook: {}; letting this stop through",
        one_line(problem)
    );
}

fn report_note(note: &str) {
    let _ = writeln!(io::stderr(), "ralph-stop-hook: {}", one_line(note));
}

/// Writes the answer in Claude Code's Stop hook protocol: a block object;
/// a `systemMessage` alone when the loop ended (the session stops and the
/// person reads how); nothing at all to let the session stop otherwise.
pub fn respond(answer: &Answer, out: &mut dyn Write) -> io::Result<()> {
    let body = match answer {
        Answer::Allow => return Ok(()),
        Answer::Block {
            reason,
            system_message,
        } => serde_json::json!({
            "decision": "block",
            "reason": reason,
            "systemMessage": system_message,
        }),
        // No decision: the session stops, and the person reads why.
        Answer::End { system_message } => serde_json::json!({
            "systemMessage": system_message,
        }),
    };
    serde_json::to_writer(&mut *out, &body)?;
    out.write_all(b"\n")?;
    out.flush()
}

fn project_root(input: &HookInput, env: &dyn EnvSource) -> Result<ProjectPaths, HookError> {
    if let Some(Ok(dir)) = env.get(config::env::CLAUDE_PROJECT_DIR) {
        if !dir.is_empty() {
            return Ok(ProjectPaths::new(dir));
        }
    }
    input
        .cwd
        .clone()
        .map(ProjectPaths::new)
        .ok_or(HookError::NoProjectRoot)
}

/// Decides one stop: the whole hook but for the process itself.
pub fn handle(
    stdin: impl Read,
    stdout: &mut dyn Write,
    env: &dyn EnvSource,
    world: &dyn World,
) -> Result<Handled, HookError> {
    let input = hook_input::parse(&hook_input::read_bounded(stdin)?)?;
    match input.hook_event_name.as_deref() {
        None | Some("Stop") => {}
        Some("StopFailure") => {
            // The client stops this hook with SIGTERM within milliseconds;
            // the pause and its log line are written whole all the same.
            ralph_core::process::ignore_termination_signals();
            let paths = project_root(&input, env)?;
            let failure = StopFailure {
                session_id: input.session_id,
                transcript_path: input.transcript_path,
                error: input.error,
                error_details: input.error_details,
                last_assistant_message: input.last_assistant_message,
            };
            let report = engine::run_stop_failure(&paths, &failure, world)?;
            return Ok(Handled {
                answer: report.answer,
                notes: report.notes,
            });
        }
        Some("SessionEnd") => {
            let paths = project_root(&input, env)?;
            let report = engine::run_session_end(
                &paths,
                input.session_id.as_deref(),
                input.reason.as_deref(),
                world,
            )?;
            return Ok(Handled {
                answer: report.answer,
                notes: report.notes,
            });
        }
        Some(event) => {
            return Ok(Handled {
                answer: Answer::Allow,
                notes: vec![format!("registered for {event}; ralph only handles the Stop and StopFailure events, so it does nothing here")],
            });
        }
    }
    let paths = project_root(&input, env)?;
    let stop = Stop {
        session_id: input.session_id,
        stop_hook_active: input.stop_hook_active,
        last_assistant_message: input.last_assistant_message,
        transcript_path: input.transcript_path,
        driver_settles: matches!(env.get(config::env::DRIVER_SETTLES), Some(Ok(v)) if v == "1"),
        ..Stop::default()
    };
    let report = engine::run_stop(&paths, env, &stop, world, &mut |answer| {
        respond(answer, stdout)
    })
    .inspect_err(|e| {
        // Kept for the launcher and `status`: the session is about to stop
        // for this reason, and the client shows it nowhere the person reads.
        if !matches!(e, EngineError::Store(StoreError::LockTimeout { .. })) {
            let _ = engine::record_hook_problem(
                &paths,
                stop.session_id.as_deref(),
                &e.to_string(),
                &world.now(),
            );
        }
    })?;
    Ok(Handled {
        answer: report.answer,
        notes: report.notes,
    })
}
