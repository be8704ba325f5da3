//! `ralph-ctl cancel` (and the plugin's `/cancel-ralph`): the person ends
//! the project's loop.

use std::io::Write;

use ralph_core::events::Event;
use ralph_core::exit_codes;
use ralph_core::judge::state::Status;
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Found, Whose};

use crate::error::CmdResult;
use crate::error::CtlError;

/// `ralph-ctl cancel`'s arguments.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct CancelArgs {
    /// The words are for the session's agent, not the person: the plugin's
    /// /cancel-ralph, whose output the agent reads, tells it to stop.
    #[arg(long, hide = true)]
    pub(crate) to_agent: bool,
}

/// Who reads what `cancel` says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reader {
    /// The person, at a terminal or on the page.
    Person,
    /// The session's agent (the plugin's /cancel-ralph).
    Agent,
}

/// `ralph-ctl cancel` on the command line.
pub(crate) fn command(paths: &ProjectPaths, args: CancelArgs) -> CmdResult {
    let reader = if args.to_agent {
        Reader::Agent
    } else {
        Reader::Person
    };
    run(paths, reader, &mut std::io::stdout())
}

/// `ralph-ctl cancel`: ends the project's running or paused loop,
/// `cancelled`, whatever session owns it; says so on `out`, to `reader`.
pub(crate) fn run(paths: &ProjectPaths, reader: Reader, out: &mut dyn Write) -> CmdResult {
    // A loop left running by a launcher killed outright is recorded as
    // interrupted first: there is then nothing left to cancel.
    crate::driver::carriers::reconcile_before_change(paths)?;
    let mut cancelled = false;
    let changed = transaction::change(paths, Whose::Any, |draft| {
        if draft.state().is_some_and(|s| s.status.is_live()) {
            draft.apply(Event::Ended {
                status: Status::Cancelled,
                why: "cancelled by the person".into(),
                at: None,
            });
            cancelled = true;
        }
        Ok::<_, CtlError>(())
    })?;
    let text = match crate::driver::told(changed) {
        Found::Loop(state) if cancelled => format!(
            "Ralph loop cancelled at iteration {} of {}: it will not go on.{}\n",
            state.iteration,
            state.max_iterations,
            match reader {
                Reader::Agent => " Stop working on its task.",
                Reader::Person => {
                    " Its agent is not sent back to work at its next stop."
                }
            }
        ),
        Found::Loop(state) => format!(
            "The Ralph loop here is not running (it is {}): nothing to cancel.\n",
            state.status.as_str()
        ),
        _ => "No Ralph loop in this project: nothing to cancel.\n".to_string(),
    };
    super::written(
        out.write_all(text.as_bytes()).and_then(|()| out.flush()),
        exit_codes::OK,
    )
}
