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
    // No iteration reads a queue run's own record: the note goes to each
    // item a worker is on.
    if let Ok(Some(run)) = ralph_core::persist::store::StateStore::new(paths).read()
        && run.queue.is_some()
        && run.status.is_live()
    {
        return to_working_items(paths, words, out);
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

/// The note said to a queue run: left for each item's loop that works now
/// (a line each, `item ID: noted: …`); refused when no worker is on one.
fn to_working_items(paths: &ProjectPaths, words: &[String], out: &mut dyn Write) -> CmdResult {
    let working: Vec<(String, ProjectPaths)> = crate::queue::item_loops::read_all(paths)
        .iter()
        .filter(|l| l.state().is_some_and(|s| s.status.is_live()))
        .map(|l| {
            let id = l.item_id().unwrap_or(&l.folder).to_string();
            (id, paths.for_item(&l.folder))
        })
        .collect();
    if working.is_empty() {
        return Err(CtlError::Refused(
            "the queue run has no item a worker is on now: the note would reach nobody; say it \
             again once a worker takes one"
                .into(),
        ));
    }
    let mut said = Vec::new();
    for (id, item) in &working {
        let mut noted = Vec::new();
        match run(item, words, &mut noted) {
            Ok(_) => said.push(format!(
                "item {id}: {}",
                String::from_utf8_lossy(&noted).trim()
            )),
            // Too long, or too much waiting: the same for every item.
            Err(e @ CtlError::BadArgument(_)) => return Err(e),
            Err(e) => said.push(format!("item {id}: not noted ({e})")),
        }
    }
    let written = writeln!(out, "{}", said.join("\n"));
    super::written(written, exit_codes::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::state::LoopState;
    use ralph_core::time::Timestamp;

    fn started(paths: &ProjectPaths, state: LoopState) {
        transaction::replace(paths, |_| {
            Ok::<_, CtlError>(Event::Started {
                state: Box::new(state),
                why: "started".into(),
            })
        })
        .unwrap();
    }

    #[test]
    fn a_note_to_a_queue_run_goes_to_each_item_a_worker_is_on() {
        let dir = crate::testdir::new("say-queue");
        let paths = ProjectPaths::new(dir.path());
        let run = crate::testdir::queue_run_state();
        started(&paths, run);
        let said = |paths: &ProjectPaths| {
            let mut out = Vec::new();
            let result = super::run(paths, &["prefer the small fix".into()], &mut out);
            (
                result.map_err(|e| e.to_string()),
                String::from_utf8(out).unwrap(),
            )
        };
        let (result, _) = said(&paths);
        assert!(
            result
                .as_ref()
                .is_err_and(|e| e.contains("no item a worker is on now")),
            "{result:?}"
        );
        let item = paths.for_item("plan-c");
        let mut state = LoopState::new("s".into(), 8, Timestamp::from_secs(1767225600));
        state.queue_item = Some("plan-c".into());
        started(&item, state);
        let (result, out) = said(&paths);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            out,
            "item plan-c: noted: it goes in front of iteration 2's text, once\n"
        );
        let item_state = ralph_core::persist::store::StateStore::new(&item)
            .read()
            .unwrap()
            .unwrap();
        assert_eq!(item_state.hint.as_deref(), Some("prefer the small fix"));
        let run = ralph_core::persist::store::StateStore::new(&paths)
            .read()
            .unwrap()
            .unwrap();
        assert_eq!(run.hint, None, "no iteration reads the run's record");
    }
}
