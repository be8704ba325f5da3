//! The Stop hook's edges: stdin in, one decision, stdout out.
//!
//! [`run`] reads the hook input, finds the agent's last message, and, under
//! the state lock, lets [`ralph_core::decision::decide`] choose. Every error
//! lets the stop through with one line on stderr: a broken hook must never
//! trap a session.

use std::io::{self, Read, Write};
use std::panic;

use ralph_core::config::{self, Config, ConfigError, EnvSource, ProcessEnv};
use ralph_core::decision::{self, MessageSource, Observation, PassReason, Verdict};
use ralph_core::hook_input::{self, HookInput, InputError};
use ralph_core::paths::ProjectPaths;
use ralph_core::plan;
use ralph_core::progress;
use ralph_core::prompt::{self, PromptError};
use ralph_core::registration;
use ralph_core::store::{StateStore, StoreError};
use ralph_core::time;
use ralph_core::transcript::{self, TranscriptError};
use ralph_core::verify;
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
    /// The configuration is invalid.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The state file is unusable.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The transcript cannot be read.
    #[error("{0}")]
    Transcript(#[from] TranscriptError),
    /// The prompt or guardrails file is unusable.
    #[error("{0}")]
    Prompt(#[from] PromptError),
    /// The state folder is not a folder.
    #[error("{} is not a folder; move it aside so ralph can keep its state there", .0.display())]
    StateFolder(std::path::PathBuf),
    /// The answer could not be written to stdout.
    #[error("cannot write the answer to stdout: {0}")]
    Output(io::Error),
}

/// What the hook tells Claude Code.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// Exit 0 with no output: the session stops.
    Allow {
        /// An optional note for stderr (why nothing was done).
        note: Option<String>,
    },
    /// Exit 0 with a block object: the agent is given `reason` and goes on.
    Block {
        /// The text fed back to the agent.
        reason: String,
        /// The notice shown to the person.
        system_message: String,
    },
}

/// Runs the hook on the process's stdin, stdout, stderr and environment, and
/// returns the exit code (always 0: blocking is done through stdout).
pub fn run() -> i32 {
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
        let answer = handle(io::stdin().lock(), &ProcessEnv, &time::now_rfc3339())?;
        respond(&answer, &mut io::stdout().lock()).map_err(HookError::Output)?;
        Ok::<_, HookError>(answer)
    });
    match outcome {
        Ok(Ok(Answer::Allow { note: Some(note) })) => report_note(&note),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => report(&e.to_string()),
        Err(_) => {} // the panic hook already said what happened
    }
    0
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

/// Writes the answer in Claude Code's Stop hook protocol.
pub fn respond(answer: &Answer, out: &mut impl Write) -> io::Result<()> {
    if let Answer::Block {
        reason,
        system_message,
    } = answer
    {
        let body = serde_json::json!({
            "decision": "block",
            "reason": reason,
            "systemMessage": system_message,
        });
        serde_json::to_writer(&mut *out, &body)?;
        out.write_all(b"\n")?;
        out.flush()?;
    }
    Ok(())
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

/// What this stop observed: the agent's latest message (the input's
/// `last_assistant_message`, else the transcript's last assistant message),
/// the iteration's failing tool results, whether the project changed since
/// `previous` (the breaker's baseline) and the TDD scenario.
fn observe(
    input: &HookInput,
    paths: &ProjectPaths,
    config: &Config,
    previous: Option<&progress::Baseline>,
) -> Result<Observation, HookError> {
    let from_input = input
        .last_assistant_message
        .clone()
        .filter(|m| !m.is_empty());
    let tail = match &input.transcript_path {
        // The message is in the input: the transcript only adds tool errors, best effort.
        Some(path) if from_input.is_some() => {
            transcript::read_iteration_tail(path).unwrap_or_default()
        }
        Some(path) => transcript::read_iteration_tail(path)?,
        None => Default::default(),
    };
    let (message, source) = match (from_input, tail.last_assistant_text) {
        (Some(text), _) => (text, MessageSource::Input),
        (None, Some(text)) if !text.is_empty() => (text, MessageSource::Transcript),
        _ => (String::new(), MessageSource::Missing),
    };
    Ok(Observation {
        message,
        message_source: source,
        failing_tool_results: tail.failing_tool_results,
        tool_calls: tail.tool_calls,
        // Until the transcript reader reports the iteration's file edits,
        // every stop takes a full check.
        progress: progress::read(
            &paths.root,
            previous,
            &progress::ToolEdits {
                changed_files: Vec::new(),
                fully_described: false,
            },
        ),
        tdd_scenario: progress::tdd_scenario(&paths.root),
        plan: plan::read(&paths.root, &config.completion.plan_files),
        ..Observation::of_session(input.session_id.clone(), input.stop_hook_active)
    })
}

/// Decides one stop: the whole hook but for the process's own streams.
pub fn handle(stdin: impl Read, env: &dyn EnvSource, now: &str) -> Result<Answer, HookError> {
    let input = hook_input::parse(&hook_input::read_bounded(stdin)?)?;
    if let Some(event) = input.hook_event_name.as_deref() {
        if event != "Stop" {
            return Ok(Answer::Allow {
                note: Some(format!("registered for {event}; ralph only handles the Stop event, so it does nothing here")),
            });
        }
    }
    let paths = project_root(&input, env)?;
    let store = StateStore::new(&paths);
    let runtime = paths.runtime_dir();
    if runtime.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
        return Err(HookError::StateFolder(runtime));
    }
    if !store.exists() {
        return Ok(Answer::Allow {
            note: Some(format!(
                "RALPH_ACTIVE=1 but no loop was started in {} (start one with .claude/ralph/ralph-audit.sh or ralph-ctl start)",
                paths.root.display()
            )),
        });
    }
    let config = Config::load(&paths, env)?;

    // Cheap ownership check first, so another session's stop never reads a transcript.
    let snapshot = store.read()?;
    let state = match decision::owned_loop(snapshot.as_ref(), input.session_id.as_deref()) {
        Ok(state) => state,
        Err(reason) => {
            let note = (reason == PassReason::NoSessionId).then(|| {
                "the hook input has no `session_id`, so ralph cannot tell whether this session owns the loop; \
                 letting this stop through"
                    .to_string()
            });
            return Ok(Answer::Allow { note });
        }
    };
    let mut observed = observe(&input, &paths, &config, state.breaker.progress.as_ref())?;
    // A claim makes the verification commands run: outside the lock, since
    // they may take minutes, and only ever the commands of config.json.
    let commands = &config.completion.verify;
    if !commands.is_empty() && decision::assess_claim(&config, state, &observed).claimed {
        let timeout = registration::registered_timeout(&paths.settings_file())
            .unwrap_or(registration::CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS);
        if let Some(warning) =
            registration::timeout_warning(verify::total_timeout(commands), timeout)
        {
            report_note(&format!("warning: {warning}"));
        }
        observed.verification = Some(verify::run_all(&paths.root, commands));
    }

    let lock = store.lock(false)?;
    let state = lock.read()?;
    let outcome = decision::decide(&config, state.as_ref(), &observed, now);
    match outcome.verdict {
        Verdict::Pass(_) => Ok(Answer::Allow { note: None }),
        Verdict::End(_) => {
            if let Some(new_state) = &outcome.new_state {
                lock.write(new_state)?;
            }
            Ok(Answer::Allow { note: None })
        }
        Verdict::Continue {
            iteration,
            max_iterations,
            notice,
        } => {
            // Read everything the answer needs before committing the new state.
            let prompt_text = prompt::read_prompt(&paths.resolve(&config.prompt_file))?;
            let guardrails = prompt::read_guardrails(&paths.guardrails_file())?;
            if let Some(new_state) = &outcome.new_state {
                lock.write(new_state)?;
            }
            Ok(Answer::Block {
                reason: prompt::iteration_text(
                    &config,
                    iteration,
                    max_iterations,
                    notice.as_deref(),
                    &prompt_text,
                    guardrails.as_deref(),
                ),
                system_message: prompt::system_message(iteration, max_iterations),
            })
        }
    }
}
