//! The waits between two runs of the client: a paused headless loop
//! waited out and taken up again (or its end announced), and a question
//! the agent asked (`RALPH_ASK`) waited on until the person answers.

use ralph_core::judge::lifecycle::ResumePlan;
use ralph_core::judge::state::Status;
use ralph_core::persist::store::StateStore;
use ralph_core::transaction::Found;

use super::{Driver, Next};
use crate::driver::answer_wait::{self, AnswerWait};
use crate::driver::{finish, fresh, say, supervisor};
use crate::error::CtlError;

impl Driver<'_> {
    /// A headless loop the client left paused: waited out and taken up
    /// again when the policy says so, else its end is announced.
    pub(super) fn after_a_pause(&mut self) -> Result<Next, CtlError> {
        let paths = self.paths;
        let session = self.session.clone();
        match supervisor::plan(paths, &self.config, &session)? {
            (ResumePlan::ResumeAt { at, reason }, Some(paused)) => {
                let crashed = paused
                    .paused_because
                    .as_ref()
                    .is_some_and(|p| p.kind == ralph_core::judge::state::PauseKind::ClientExit);
                if let Some(signal) = supervisor::wait_until(at, &reason, &mut self.signals) {
                    let cause = format!("{} received", signal.describe());
                    return self.end(&cause, signal.exit_code());
                }
                let state = supervisor::take_up(paths, &self.config, Some(&session), true)?;
                // A fresh iteration whose client crashed is worked on again
                // in a new session with the same text: fresh context is the
                // mode's point, and a client killed early leaves nothing a
                // --resume takes (2.0.77: "No conversation found").
                if self.mode.fresh()
                    && crashed
                    && let Some(next) = fresh::hand_over(paths, &session)?
                {
                    say(&format!(
                        "working on iteration {} of {} again, in a new session",
                        state.iteration, state.max_iterations
                    ));
                    self.session = next;
                    self.resumed = false;
                    return Ok(Next::Again);
                }
                say(&format!(
                    "resuming session {session} at iteration {} of {}",
                    state.iteration, state.max_iterations
                ));
                self.resumed = true;
                Ok(Next::Again)
            }
            (ResumePlan::Stay { reason }, Some(state)) if state.status == Status::Paused => {
                say(&format!("not resuming on its own: {reason}"));
                Ok(Next::Done(finish::announce(
                    paths,
                    &Found::Loop(Box::new(state)),
                )))
            }
            (_, Some(state)) => Ok(Next::Done(finish::announce(
                paths,
                &Found::Loop(Box::new(state)),
            ))),
            (_, None) => Ok(Next::Done(finish::announce(paths, &Found::Gone))),
        }
    }

    /// A loop whose agent asked the person a question (`RALPH_ASK`): waits
    /// for `ralph-ctl answer` (up to `--wait-for-answer`), then goes on
    /// with the answer in front of the next iteration's text: in a new
    /// session (fresh), or the same one taken up. Out of time, or on a
    /// signal, the loop is left waiting and the run ends (`WAITING`, or the
    /// signal's code): `run --resume` waits again.
    pub(super) fn await_answer(&mut self) -> Result<Next, CtlError> {
        let paths = self.paths;
        if self.mode.item().is_some() {
            // A worker does not hold its item for a person.
            let found = match StateStore::new(paths).read()? {
                Some(state) => Found::Loop(Box::new(state)),
                None => Found::Gone,
            };
            return Ok(Next::Done(finish::announce(paths, &found)));
        }
        let limit = self.wait_for_answer.map(std::time::Duration::from_secs);
        match answer_wait::wait_for_answer(paths, &self.session, limit, &mut self.signals)? {
            AnswerWait::Answered => {}
            AnswerWait::Signal(signal) => return Ok(Next::Done(signal.exit_code())),
            AnswerWait::Over(found) => return Ok(Next::Done(finish::announce(paths, &found))),
        }
        let fresh = self.mode.fresh();
        let mut note = None;
        let mut next_session = None;
        let changed = ralph_core::transaction::change(
            paths,
            ralph_core::transaction::Whose::Session(&self.session),
            |draft| {
                if draft.state().is_some_and(|s| s.status == Status::Running) {
                    note = answer_wait::take_note_in(draft);
                    if fresh {
                        next_session = fresh::hand_over_in(draft);
                    }
                }
                Ok::<_, CtlError>(())
            },
        )?;
        let found = crate::driver::told(changed);
        let Found::Loop(state) = &found else {
            return Ok(Next::Done(finish::announce(paths, &found)));
        };
        if state.status != Status::Running {
            return Ok(Next::Done(finish::announce(paths, &found)));
        }
        self.answer_note = note;
        self.next_text = None;
        if let Some(next) = next_session {
            self.session = next;
            self.resumed = false;
        } else {
            self.resumed = true;
        }
        say(&format!(
            "answered: going on at iteration {} of {}",
            state.iteration, state.max_iterations
        ));
        Ok(Next::Again)
    }
}
