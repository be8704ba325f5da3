//! `ralph-ctl reset`: clears the loop's state so a new loop can start.
//!
//! A loop that has ended is cleared at once. One still going (running, or
//! paused or waiting under a launcher that still lives) is cleared only
//! when the person says so: asked in a terminal, with `--force`, or else
//! refused (exit 3) with the way to end it first (`ralph-ctl cancel`).

use std::io::{BufRead, IsTerminal, Write};

use ralph_core::exit_codes;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::observe::liveness;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::time::Timestamp;

use crate::error::{CmdResult, CtlError};

/// `ralph-ctl reset`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct ResetArgs {
    /// Clear a loop still going without asking.
    #[arg(long)]
    pub(crate) force: bool,
}

/// `ralph-ctl reset` as its arguments ask.
pub(crate) fn command(paths: &ProjectPaths, args: ResetArgs) -> CmdResult {
    run(paths, args.force)
}

/// How the person is asked a yes-or-no question: `None` when nobody can
/// be asked (no terminal), else whether they said yes.
type Ask<'a> = &'a mut dyn FnMut(&str) -> Option<bool>;

/// Clears the state and says what happened; `force` clears a loop still
/// going without asking.
pub(crate) fn run(paths: &ProjectPaths, force: bool) -> CmdResult {
    run_asking(paths, force, &mut ask_in_terminal)
}

/// [`run`], asking the person through `ask`.
fn run_asking(paths: &ProjectPaths, force: bool, ask: Ask) -> CmdResult {
    // A loop left running by a launcher killed outright: its ending
    // recorded (and told) before it is cleared.
    crate::driver::carriers::reconcile_before_change(paths)?;
    if let Some(line) = crate::driver::config_hold::looked_at(paths) {
        crate::output::say!("{line}");
    }
    // The loop still going that the person agreed to clear.
    let mut agreed = None;
    if !force
        && let Ok(Some(state)) = StateStore::new(paths).read()
        && let Some(going) = still_going(&state)
    {
        let question = format!(
            "ralph-ctl: {going}. A reset clears it as it is (kept in the history); \
                     `ralph-ctl cancel` would end it first. Reset it anyway? [y/N] "
        );
        match ask(&question) {
            Some(true) => agreed = Some(identity(&state)),
            Some(false) => {
                crate::output::say!("Not reset: the loop was left as it is.");
                return Ok(exit_codes::REFUSED);
            }
            None => return Err(CtlError::Refused(refusal(&going))),
        }
    }
    // Checked again under the lock: a loop started meanwhile is not the
    // one the person agreed to clear.
    let cleared = crate::driver::start::clear_unless(paths, |current| {
        let state = current.filter(|_| !force)?;
        let going = still_going(state)?;
        (agreed != Some(identity(state))).then(|| refusal(&going))
    })?;
    match cleared {
        crate::driver::start::Cleared::Nothing => crate::output::say!(
            "Nothing to reset: no loop state in {}.",
            paths.root.display()
        ),
        crate::driver::start::Cleared::Removed(Some(kept)) => crate::output::say!(
            "Reset: the loop was cleared and kept in the history ({}; `ralph-ctl history` lists them).",
            kept.display()
        ),
        crate::driver::start::Cleared::Removed(None) => {
            crate::output::say!("Reset: the loop state was cleared.");
        }
        crate::driver::start::Cleared::Quarantined(aside) => {
            crate::output::say!(
                "Reset: the state ralph could not use (corrupt, stale, or not written by ralph on \
                 this machine) was moved to {}.",
                aside.display()
            );
        }
    }
    Ok(exit_codes::OK)
}

/// Which loop `state` is: its session and when it started.
fn identity(state: &LoopState) -> (String, Timestamp) {
    (state.session_id.clone(), state.started_at)
}

/// What `state` is doing when it is still going, in words: running, or
/// paused or waiting under a launcher that still lives. `None` for a loop
/// that has ended, or one nothing will take up again by itself.
fn still_going(state: &LoopState) -> Option<String> {
    let doing = match state.status {
        Status::Running => "is running",
        Status::Paused | Status::Waiting
            if crate::driver::carriers::still_carried(state).is_none() =>
        {
            return None;
        }
        Status::Paused => "is paused, waiting to be resumed",
        Status::Waiting => "is waiting for your answer (`ralph-ctl answer TEXT`)",
        _ => return None,
    };
    let carriers = state.carriers.as_ref();
    let alive =
        |p: &Option<ralph_core::units::ProcessId>| p.filter(liveness::is_alive).map(|p| p.pid);
    let under = match (
        carriers.and_then(|c| alive(&c.driver)),
        carriers.and_then(|c| alive(&c.client)),
    ) {
        (Some(pid), _) => format!(" under ralph-ctl run (pid {pid})"),
        (None, Some(pid)) => format!(" in Claude Code (pid {pid})"),
        (None, None) => String::new(),
    };
    Some(format!(
        "the loop of session {} {doing}{under}, at iteration {} of {}",
        state.session_id, state.iteration, state.max_iterations
    ))
}

/// The refusal for a loop still going, with the ways on.
fn refusal(going: &str) -> String {
    format!(
        "{going}: a reset would clear it while it goes on; end it with `ralph-ctl cancel` \
         (recorded cancelled), then reset; or reset with --force to clear it as it is"
    )
}

/// Asks on the terminal (the question on stderr, the answer from stdin);
/// `None` when stdin or stderr is not a terminal.
fn ask_in_terminal(question: &str) -> Option<bool> {
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return None;
    }
    let mut stderr = std::io::stderr();
    let _ = stderr
        .write_all(question.as_bytes())
        .and_then(|()| stderr.flush());
    let mut answer = String::new();
    match std::io::stdin().lock().read_line(&mut answer) {
        Ok(0) | Err(_) => Some(false),
        Ok(_) => Some(matches!(
            answer.trim().to_ascii_lowercase().as_str(),
            "y" | "yes"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::events::Event;
    use ralph_core::judge::state::Carriers;
    use ralph_core::transaction;

    /// A project whose loop is `state`.
    fn project_with(state: LoopState) -> (tempfile::TempDir, ProjectPaths) {
        let dir = crate::testdir::new("reset");
        let paths = ProjectPaths::new(dir.path());
        transaction::replace(&paths, |_| {
            Ok::<_, CtlError>(Event::Started {
                state: Box::new(state),
                why: "started".into(),
            })
        })
        .unwrap();
        (dir, paths)
    }

    fn loop_in(status: Status) -> LoopState {
        let mut state = LoopState::new("s1".into(), 5, Timestamp::now());
        state.status = status;
        state.iteration = 2;
        state
    }

    /// `state` carried by this process, a driver that lives.
    fn carried(mut state: LoopState) -> LoopState {
        state.carriers = Some(Carriers {
            driver: Some(liveness::of_pid(std::process::id())),
            ..liveness::carriers_of_this_process()
        });
        state
    }

    fn exists(paths: &ProjectPaths) -> bool {
        StateStore::new(paths).read().unwrap().is_some()
    }

    #[test]
    fn a_loop_still_going_is_refused_where_nobody_can_be_asked() {
        for state in [
            loop_in(Status::Running),
            carried(loop_in(Status::Running)),
            carried(loop_in(Status::Paused)),
            carried(loop_in(Status::Waiting)),
        ] {
            let status = state.status;
            let (_dir, paths) = project_with(state);
            let Err(CtlError::Refused(said)) = run_asking(&paths, false, &mut |_| None) else {
                panic!("a {status:?} loop is refused");
            };
            assert!(
                said.contains("ralph-ctl cancel")
                    && said.contains("--force")
                    && said.contains("session s1"),
                "{said}"
            );
            assert!(exists(&paths), "a refused reset changes nothing");
            assert_eq!(run_asking(&paths, true, &mut |_| None).unwrap(), 0);
            assert!(!exists(&paths), "--force clears it");
        }
    }

    #[test]
    fn a_loop_still_going_is_cleared_only_when_the_person_says_yes() {
        let (_dir, paths) = project_with(loop_in(Status::Running));
        let mut asked = Vec::new();
        let code = run_asking(&paths, false, &mut |q| {
            asked.push(q.to_string());
            Some(false)
        })
        .unwrap();
        assert_eq!(code, exit_codes::REFUSED);
        assert!(exists(&paths), "no is no");
        assert!(
            asked.len() == 1 && asked[0].contains("is running") && asked[0].ends_with("[y/N] "),
            "{asked:?}"
        );
        assert_eq!(run_asking(&paths, false, &mut |_| Some(true)).unwrap(), 0);
        assert!(!exists(&paths), "yes clears it");
    }

    #[test]
    fn a_loop_that_ended_or_that_nothing_carries_is_reset_without_asking() {
        for status in [
            Status::Complete,
            Status::Interrupted,
            Status::Cancelled,
            Status::CircuitOpen,
            Status::Paused,
            Status::Waiting,
        ] {
            let (_dir, paths) = project_with(loop_in(status));
            let code = run_asking(&paths, false, &mut |q| panic!("{status:?} asked: {q}"));
            assert_eq!(code.unwrap(), 0, "{status:?}");
            assert!(!exists(&paths), "{status:?}");
        }
    }
}
