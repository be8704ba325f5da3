//! `ralph-ctl say`: the person's note for the running loop's next
//! iteration.

use std::io::Write;

use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Found, Whose};

use crate::error::CmdResult;
use crate::error::CtlError;

/// `ralph-ctl say`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct SayArgs {
    /// The note (the words are joined).
    #[arg(value_name = "TEXT", required = true, num_args = 1.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) text: Vec<String>,
}

/// `ralph-ctl say` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: SayArgs) -> CmdResult {
    run(paths, &args.text, &mut std::io::stdout())
}

/// The longest note `ralph-ctl say` takes.
pub(crate) const MAX_NOTE_BYTES: usize = 16 * 1024;
/// The most the notes waiting for the next iteration may hold together.
pub(crate) const MAX_NOTES_BYTES: usize = 64 * 1024;

/// `ralph-ctl say TEXT`: puts the person's note in front of the running
/// loop's next iteration text, once (notes left before it add up), and logs it.
pub(crate) fn run(paths: &ProjectPaths, words: &[String], out: &mut dyn Write) -> CmdResult {
    let text = words.join(" ").trim().to_string();
    if text.is_empty() {
        return Err(CtlError::BadArgument(
            "no text: ralph-ctl say \"what the agent should know\"".into(),
        ));
    }
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state() else {
            return Ok(());
        };
        if !state.status.is_live() {
            return Err(CtlError::Refused(format!(
                "the loop is {}, not running: the note would reach nobody",
                state.status.as_str()
            )));
        }
        if text.len() > MAX_NOTE_BYTES {
            return Err(CtlError::BadArgument(format!(
                "the note is {} bytes, more than the {} KiB a note may be: put the details in a file of the \
                 project and name it in the note",
                text.len(),
                MAX_NOTE_BYTES / 1024
            )));
        }
        let pending = state.hint.as_deref().map_or(0, str::len);
        if pending + text.len() > MAX_NOTES_BYTES {
            return Err(CtlError::Refused(format!(
                "{pending} bytes of notes already wait for the next iteration; with this one they would pass \
                 the {} KiB the notes may hold: wait for the iteration to take them",
                MAX_NOTES_BYTES / 1024
            )));
        }
        draft.apply(Event::NoteLeft(text.clone()));
        Ok(())
    })?;
    let Found::Loop(state) = crate::driver::told(changed) else {
        return Err(CtlError::Refused(format!(
            "no loop in {}: nothing to say to",
            paths.root.display()
        )));
    };
    let said = writeln!(
        out,
        "noted: it goes in front of iteration {}'s text, once",
        state.iteration + 1
    );
    super::written(said, exit_codes::OK)
}
