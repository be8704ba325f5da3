//! The person's part between two iterations: the notes waiting for the
//! next one (`say`, an answer), and the wait for the answer to the agent's
//! question (`RALPH_ASK`) while the loop is `waiting`.

use ralph_core::judge::state::Status;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::Found;

use super::os_signals::{SignalSource, Signals};
use super::say;
use crate::error::CtlError;

/// The note waiting for the next iteration of `session`'s loop (the
/// person's answer, `say` notes), taken from the state to go in front of
/// the first text a taken-up run sends.
pub(crate) fn take_note(paths: &ProjectPaths, session: &str) -> Result<Option<String>, CtlError> {
    let mut note = None;
    let changed = ralph_core::transaction::change(
        paths,
        ralph_core::transaction::Whose::Session(session),
        |draft| {
            note = take_note_in(draft);
            Ok::<_, CtlError>(())
        },
    )?;
    super::told(changed);
    Ok(note)
}

/// In `draft`: the notes waiting for the next iteration, dropped from the
/// state (with the question they answer) as they are taken.
pub(crate) fn take_note_in(draft: &mut ralph_core::events::Draft) -> Option<String> {
    let note = draft.state().and_then(|s| s.hint.clone());
    if note.is_some() {
        draft.apply(ralph_core::events::Event::NoteTaken);
    }
    note
}

/// How a wait for the person's answer ended.
pub(crate) enum AnswerWait {
    /// The person answered: the loop runs again.
    Answered,
    /// A signal came first: the loop is left waiting.
    Signal(super::os_signals::Signal),
    /// Out of time (the loop left waiting), or the loop ended, was
    /// replaced or reset meanwhile: as found.
    Over(Found),
}

/// How often a waiting run reads the state for the person's answer.
const ANSWER_LOOK: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits for the person's answer to the question of `session`'s waiting
/// loop, saying what is asked and how to answer; up to `limit` (`None`:
/// until a signal, which leaves the loop waiting, and says so).
pub(crate) fn wait_for_answer(
    paths: &ProjectPaths,
    session: &str,
    limit: Option<std::time::Duration>,
    signals: &mut Signals,
) -> Result<AnswerWait, CtlError> {
    let store = StateStore::new(paths);
    match store.read()? {
        Some(state) if state.answered() => return Ok(AnswerWait::Answered),
        Some(state) => {
            if let Some(question) = state.question {
                say(&format!(
                    "iteration {}: the agent asks: {}",
                    question.iteration, question.text
                ));
            }
        }
        None => {}
    }
    let within = limit.map_or_else(
        || " (Ctrl-C leaves the loop waiting)".into(),
        |l| format!(" for up to {} s", l.as_secs()),
    );
    say(&format!(
        "answer from another terminal with `ralph-ctl answer TEXT`; waiting{within}"
    ));
    let started = std::time::Instant::now();
    loop {
        if let Some(signal) = signals.take().first().copied() {
            say(&format!(
                "{} received: the loop is left waiting for your answer (`ralph-ctl answer TEXT`, then `ralph-ctl run --resume`)",
                signal.describe()
            ));
            return Ok(AnswerWait::Signal(signal));
        }
        match store.read()? {
            Some(state) if state.session_id != session => {
                return Ok(AnswerWait::Over(Found::Replaced {
                    by: state.session_id,
                }));
            }
            Some(state) if state.status == Status::Waiting => {
                if limit.is_some_and(|l| started.elapsed() >= l) {
                    return Ok(AnswerWait::Over(Found::Loop(Box::new(state))));
                }
            }
            Some(state) if state.status == Status::Running => return Ok(AnswerWait::Answered),
            Some(state) => return Ok(AnswerWait::Over(Found::Loop(Box::new(state)))),
            None => return Ok(AnswerWait::Over(Found::Gone)),
        }
        std::thread::sleep(ANSWER_LOOK);
    }
}
