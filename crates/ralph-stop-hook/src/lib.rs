//! The hook's protocol glue: Claude Code's stdin object in, Claude Code's
//! answer out. [`handle`] reads the event (`hook_event_name`) and does one
//! of three things:
//!
//! - `Stop` (or no event name): one stop of the loop
//!   ([`ralph_core::engine::run_stop`]). The answer makes the session go on
//!   with the next iteration's text ([`GoOn`]: a block, or the
//!   `additionalContext` form for a client known to take it), tells the
//!   person how the loop ended (a `systemMessage` alone), or is nothing: the
//!   session stops. A stop the engine could not judge is kept as a
//!   `problem` line of the audit log ([`ralph_core::engine::record_hook_problem`]).
//! - `StopFailure` (Claude Code 2.1 and later; `ralph-ctl run` registers it
//!   through `--settings`): an API error ended the turn. SIGTERM, SIGHUP and
//!   SIGINT are ignored first (the client ends the hook within
//!   milliseconds), then the session's running loop is paused with what
//!   failed, and the HTTP status and the API's reset time when the
//!   transcript has them ([`ralph_core::engine::run_stop_failure`]). No
//!   answer: the client ignores one.
//! - `SessionEnd` (the plugin's registration, `hooks/hooks.json`): the
//!   session ended. Its own loop, when no process carries it (a
//!   `/ralph-loop` loop), is marked `interrupted`, with the client's
//!   `reason` ([`ralph_core::engine::run_session_end`]). No answer.
//!
//! Any other event is let through with a note on stderr. Every error lets
//! the stop through with one line on stderr: a broken hook must never trap
//! a session.

use std::io::{self, Read, Write};
use std::panic;
use std::process::ExitCode;

use ralph_core::engine::{self, Answer, EngineError, RealWorld, Stop, StopFailure, World};
use ralph_core::judge::config::{self, EnvSource, ProcessEnv};
use ralph_core::observe::hook_input::{self, HookInput, InputError};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StoreError;
use ralph_core::text::printable;
use thiserror::Error;

/// Everything that can make the hook give up and let the stop through.
#[derive(Debug, Error)]
pub enum HookError {
    /// The stdin object is unusable.
    #[error("{0}")]
    Input(#[from] InputError),
    /// Neither `CLAUDE_PROJECT_DIR` nor the input's `cwd` names the project.
    #[error(
        "cannot tell the project folder: CLAUDE_PROJECT_DIR is unset and the hook input has no `cwd`"
    )]
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
or the loop is stuck. Registered for them, it also pauses the loop when an
API error ended the turn (StopFailure) and marks a /ralph-loop loop
interrupted when its session ends (SessionEnd). It always exits 0 and says
on stderr, in one line, anything that went wrong.

Install and start loops with ralph-ctl (`ralph-ctl init`, `ralph-ctl run`);
see the README.

With --plugin (the plugin's registration, hooks/hooks.json) it goes on only
for a session that is neither the launcher's nor a fresh iteration's, and a
project with a loop's state file (a /ralph-loop loop); the loop's own
session alone is held.

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
    ralph_core::persist::store::ignore_file_size_signal();
    panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(std::string::ToString::to_string)
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

/// `text` on one line, its control characters made visible: the client
/// shows the hook's stderr to the person, and it may quote the agent.
fn one_line(text: &str) -> String {
    printable(text)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
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

/// How a stop that continues the loop is answered: both forms make the
/// client go on with the text; they differ in how the client shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoOn {
    /// `{"decision": "block", "reason": …}`: every client takes it, and the
    /// text reaches the model as the next user message; 2.1 shows it as
    /// "Stop hook reported a problem", with a "stop hook problem" footer.
    Block,
    /// `{"hookSpecificOutput": {"hookEventName": "Stop", "additionalContext":
    /// …}}` (Claude Code 2.1 and later): shown as "Stop hook says: …", no
    /// error; the text reaches the model as the turn's context, whole up to
    /// 10,000 characters (2.1.330 saves a longer one to a file and gives
    /// the model a 2 KB preview), so a longer text goes as a block.
    Context,
}

/// The longest text sent in the context form, in bytes (never fewer than
/// the characters the client counts): under 2.1.330's 10,000-character
/// limit on a hook's `additionalContext`, with room to spare.
pub const MAX_CONTEXT_BYTES: usize = 9_000;

/// The oldest client the context form was seen to work on. Older 2.1
/// builds are reported to refuse it (a JSON validation error ends the
/// session), and 2.0 does: they get the block.
pub const CONTEXT_FROM: (u32, u32, u32) = (2, 1, 330);

impl GoOn {
    /// The form for the client that sent `input` with `agent` (its
    /// `AI_AGENT`, `claude-code_2-1-330_harness`, which 2.1.330 gives the
    /// hooks it runs): the context form only for a client known to take it.
    pub fn for_client(input: &HookInput, agent: Option<&str>) -> GoOn {
        let takes_context = input.has_final_message_field
            && agent
                .and_then(client_version)
                .is_some_and(|v| v >= CONTEXT_FROM);
        if takes_context {
            GoOn::Context
        } else {
            GoOn::Block
        }
    }
}

/// The client version in an `AI_AGENT` value such as
/// `claude-code_2-1-330_harness`.
pub fn client_version(agent: &str) -> Option<(u32, u32, u32)> {
    let version = agent.strip_prefix("claude-code_")?.split('_').next()?;
    let mut parts = version.split('-').map(|p| p.parse::<u32>().ok());
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(Some(a)), Some(Some(b)), Some(Some(c)), None) => Some((a, b, c)),
        _ => None,
    }
}

/// Writes the answer in Claude Code's Stop hook protocol: the loop goes on
/// in the form `go_on` says; a `systemMessage` alone when the loop ended
/// (the session stops and the person reads how); nothing at all to let the
/// session stop otherwise. The `systemMessage` is for the person's screen
/// and may quote the agent (a `RALPH_ABORT` reason): it is [`printable`]
/// (the `reason` is the model's next text, sent as it is).
pub fn respond(answer: &Answer, go_on: GoOn, out: &mut dyn Write) -> io::Result<()> {
    let body = match answer {
        Answer::Allow => return Ok(()),
        Answer::Block {
            reason,
            system_message,
        } => {
            let system_message = printable(system_message);
            match go_on {
                GoOn::Context if reason.len() <= MAX_CONTEXT_BYTES => serde_json::json!({
                    "hookSpecificOutput": {
                        "hookEventName": "Stop",
                        "additionalContext": reason,
                    },
                    "systemMessage": system_message,
                }),
                GoOn::Block | GoOn::Context => serde_json::json!({
                    "decision": "block",
                    "reason": reason,
                    "systemMessage": system_message,
                }),
            }
        }
        // No decision: the session stops, and the person reads why.
        Answer::End { system_message } => serde_json::json!({
            "systemMessage": printable(system_message),
        }),
    };
    serde_json::to_writer(&mut *out, &body)?;
    out.write_all(b"\n")?;
    out.flush()
}

fn project_root(input: &HookInput, env: &dyn EnvSource) -> Result<ProjectPaths, HookError> {
    if let Some(Ok(dir)) = env.get(config::env::CLAUDE_PROJECT_DIR)
        && !dir.is_empty()
    {
        return Ok(ProjectPaths::new(dir));
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
                driver_settles: matches!(env.get(config::env::DRIVER_SETTLES), Some(Ok(v)) if v == "1"),
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
                notes: vec![format!(
                    "registered for {event}; ralph only handles the Stop, StopFailure and SessionEnd events, so it does nothing here"
                )],
            });
        }
    }
    let paths = project_root(&input, env)?;
    let agent = match env.get("AI_AGENT") {
        Some(Ok(agent)) => Some(agent),
        _ => None,
    };
    let go_on = GoOn::for_client(&input, agent.as_deref());
    let stop = Stop {
        session_id: input.session_id,
        stop_hook_active: input.stop_hook_active,
        last_assistant_message: input.last_assistant_message,
        transcript_path: input.transcript_path,
        driver_settles: matches!(env.get(config::env::DRIVER_SETTLES), Some(Ok(v)) if v == "1"),
        ..Stop::default()
    };
    let report = engine::run_stop(&paths, env, &stop, world, &mut |answer| {
        respond(answer, go_on, stdout)
    })
    .inspect_err(|e| {
        // Kept for the launcher and `status`: the session is about to stop
        // for this reason, and the client shows it nowhere the person reads.
        if !matches!(e, EngineError::Store(StoreError::LockTimeout { .. })) {
            let _ = engine::record_hook_problem(
                &paths,
                stop.session_id.as_deref(),
                &e.to_string(),
                world.now(),
            );
        }
    })?;
    Ok(Handled {
        answer: report.answer,
        notes: report.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_context_form_goes_only_to_a_client_known_to_take_it() {
        assert_eq!(
            client_version("claude-code_2-1-330_harness"),
            Some((2, 1, 330))
        );
        assert_eq!(client_version("claude-code_3-0-1"), Some((3, 0, 1)));
        for odd in [
            "",
            "claude-code_",
            "claude-code_2-1",
            "codex_2-1-330",
            "claude-code_2-x-1",
        ] {
            assert_eq!(client_version(odd), None, "{odd}");
        }
        let newer = HookInput {
            has_final_message_field: true,
            ..HookInput::default()
        };
        let context = |input: &HookInput, agent| GoOn::for_client(input, agent) == GoOn::Context;
        assert!(context(&newer, Some("claude-code_2-1-330_harness")));
        assert!(context(&newer, Some("claude-code_2-2-0_harness")));
        // An older 2.1 build, no AI_AGENT, or 2.0's input: the block.
        assert!(!context(&newer, Some("claude-code_2-1-251_harness")));
        assert!(!context(&newer, None));
        assert!(!context(
            &HookInput::default(),
            Some("claude-code_2-1-330_harness")
        ));
    }

    #[test]
    fn a_text_too_long_for_the_context_form_goes_as_a_block() {
        let answer = |reason: String| {
            let mut out = Vec::new();
            let block = Answer::Block {
                reason,
                system_message: "Ralph iteration 2/25".into(),
            };
            respond(&block, GoOn::Context, &mut out).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()
        };
        let short = answer("go on".into());
        assert_eq!(short["hookSpecificOutput"]["additionalContext"], "go on");
        assert_eq!(short.get("decision"), None);
        let long = answer("x".repeat(MAX_CONTEXT_BYTES + 1));
        assert_eq!(long["decision"], "block");
        assert_eq!(long.get("hookSpecificOutput"), None);
    }
}
