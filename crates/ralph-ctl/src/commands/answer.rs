//! `ralph-ctl answer`: the person's answer to the question a waiting loop's
//! agent asked (`RALPH_ASK`).

use std::io::Write;

use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::judge::config::EnvSource;
use ralph_core::judge::state::Status;
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Found, Whose};

use crate::error::CmdResult;
use crate::error::CtlError;

use super::say::MAX_NOTE_BYTES;

/// `ralph-ctl answer`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct AnswerArgs {
    /// The answer (the words are joined).
    #[arg(value_name = "TEXT", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) text: Vec<String>,
}

/// `ralph-ctl answer` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: AnswerArgs) -> CmdResult {
    run(
        paths,
        &args.text,
        &ralph_core::judge::config::ProcessEnv,
        &mut std::io::stdout(),
    )
}

/// `ralph-ctl answer TEXT`: the person's answer to the question a waiting
/// loop's agent asked (`RALPH_ASK`). The loop runs again, with the question
/// and the answer in front of its next iteration's text, once (a driver
/// waiting for it goes on at once). Refused inside a loop's client (the
/// agent's shell: `RALPH_ACTIVE` or `RALPH_DRIVEN` is set), and for a loop
/// that is not waiting (so an answer given before the question, by anyone,
/// counts for nothing).
pub(crate) fn run(
    paths: &ProjectPaths,
    words: &[String],
    env: &dyn EnvSource,
    out: &mut dyn Write,
) -> CmdResult {
    for name in [
        ralph_core::judge::config::env::ACTIVE,
        crate::driver::command::DRIVEN_ENV,
    ] {
        if matches!(env.get(name), Some(Ok(v)) if !v.is_empty()) {
            return Err(CtlError::Refused(format!(
                "{name} is set: this runs inside a loop's Claude Code session, and the answer is the \
                 person's, not the agent's; answer from a terminal of your own (in an interactive loop's \
                 session, type the answer there)"
            )));
        }
    }
    let text = words.join(" ").trim().to_string();
    if text.is_empty() {
        return Err(CtlError::BadArgument(
            "no text: ralph-ctl answer \"your answer to the agent's question\"".into(),
        ));
    }
    if text.len() > MAX_NOTE_BYTES {
        return Err(CtlError::BadArgument(format!(
            "the answer is {} bytes, more than the {} KiB it may be: put the details in a file of the \
             project and name it in the answer",
            text.len(),
            MAX_NOTE_BYTES / 1024
        )));
    }
    let mut asked = None;
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state() else {
            return Ok(());
        };
        if state.status != Status::Waiting {
            return Err(CtlError::Refused(format!(
                "the loop is {}: no question waits for an answer (`ralph-ctl say` leaves a note for a running loop)",
                state.status.as_str()
            )));
        }
        asked = state.question.clone();
        draft.apply(Event::Answered(text.clone()));
        Ok(())
    })?;
    let Found::Loop(state) = crate::driver::told(changed) else {
        return Err(CtlError::Refused(format!(
            "no loop in {}: no question waits for an answer",
            paths.root.display()
        )));
    };
    // The agent's words, shown and never obeyed.
    let question = asked.map(|q| q.text).unwrap_or_default();
    let question = ralph_core::text::printable(&question);
    let said = writeln!(
        out,
        "answered \"{question}\": it goes in front of iteration {}'s text; a run waiting for it goes on now \
         (else `ralph-ctl run --resume`, or in the loop's session type anything)",
        state.iteration
    );
    super::written(said, exit_codes::OK)
}
