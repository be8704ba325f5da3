//! One locked change of a loop: the state read under the lock, the events
//! a caller decides on applied by the pure
//! [`events::apply`](crate::events::apply), the result written once, then
//! the effects carried out (the loop being replaced kept first, audit
//! lines) and the person's `notify` run for an ending or a pause not told
//! yet (once each). Every change of a loop's state and log goes through
//! here: `ralph-ctl`'s (its drivers, `cancel`, `say`, `reload`, `reset`, a
//! start) and the hook's (`StopFailure`, `SessionEnd`, a problem line); the
//! stop's own sequence ([`crate::engine`]) decides under its lock, applies
//! a driver's events there, and writes through [`write`](fn@write),
//! delivering its answer before the audit lines and `notify` are carried
//! out.

use std::path::PathBuf;

use crate::events::{Draft, Effect, Event, Transition};
use crate::judge::config::ProcessEnv;
use crate::judge::state::LoopState;
use crate::paths::ProjectPaths;
use crate::persist::log;
use crate::persist::store::{StateLock, StateStore, StoreError};
use crate::time::Timestamp;

/// Whose loop a change is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whose<'a> {
    /// The loop of this session only (a driver's own).
    Session(&'a str),
    /// Whatever loop is there (a person's command).
    Any,
}

/// What a change found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found {
    /// No state any more (it was reset).
    Gone,
    /// The state belongs to another session now (another start replaced it).
    Replaced {
        /// The session that owns it now.
        by: String,
    },
    /// The loop, as the change left it.
    Loop(Box<LoopState>),
}

/// What a change did.
#[derive(Debug)]
pub struct Changed {
    /// The loop as it stands now.
    pub found: Found,
    /// Warnings for the person (an audit line not written, `notify` not started).
    pub notes: Vec<String>,
}

impl Changed {
    fn found(found: Found) -> Self {
        Changed {
            found,
            notes: Vec::new(),
        }
    }

    /// The loop, when the change found one of its own.
    pub fn state(&self) -> Option<&LoopState> {
        match &self.found {
            Found::Loop(state) => Some(state),
            _ => None,
        }
    }
}

/// Changes the existing loop of `whose` under the lock: `decide` looks at
/// it and applies its events to the draft (it may refuse with an error,
/// and nothing is written). Nothing is created when there is no loop.
pub fn change<E: From<StoreError>>(
    paths: &ProjectPaths,
    whose: Whose<'_>,
    decide: impl FnOnce(&mut Draft) -> Result<(), E>,
) -> Result<Changed, E> {
    change_at(paths, whose, Timestamp::now(), true, decide)
}

/// [`change`] at `now`: the time of a hook's world (its clock, which a
/// test sets); an ending or a pause it makes is told (`notify`) when
/// `tell`, else left to the driver that settles the loop after its client
/// exits (it charges the client's cost first).
pub fn change_at<E: From<StoreError>>(
    paths: &ProjectPaths,
    whose: Whose<'_>,
    now: Timestamp,
    tell: bool,
    decide: impl FnOnce(&mut Draft) -> Result<(), E>,
) -> Result<Changed, E> {
    let store = StateStore::new(paths);
    let Some((lock, state)) = store.lock_existing()? else {
        return Ok(Changed::found(Found::Gone));
    };
    if let Whose::Session(id) = whose
        && state.session_id != id
    {
        return Ok(Changed::found(Found::Replaced {
            by: state.session_id,
        }));
    }
    let mut draft = Draft::new(Some(state.clone()), now);
    decide(&mut draft)?;
    let (after, notes) = write(&lock, paths, Some(&state), draft.finish(), now, tell)?
        .carry_out()
        .into_parts();
    Ok(Changed {
        found: after.map_or(Found::Gone, |s| Found::Loop(Box::new(s))),
        notes,
    })
}

/// What [`replace`] did.
#[derive(Debug, Default)]
pub struct Replaced {
    /// The loop there now (`None`: cleared).
    pub state: Option<LoopState>,
    /// Where the loop that was there is kept.
    pub kept: Option<PathBuf>,
    /// Where a corrupt state was moved aside.
    pub quarantined: Option<PathBuf>,
    /// Warnings for the person.
    pub notes: Vec<String>,
}

/// Replaces whatever is at the state path (a start, a reset) under the
/// lock: `decide` sees the loop there (or why it could not be read) and
/// returns the event, or refuses. A corrupt state, one ralph did not
/// write ([`StoreError::Unverified`]), or an earlier one put back
/// ([`StoreError::Stale`]) it accepts to replace is moved aside first
/// (never kept in the history: it is no loop ralph ran now); a loop it
/// replaces is kept in the history first, and when it cannot be kept
/// nothing is changed.
pub fn replace<E: From<StoreError>>(
    paths: &ProjectPaths,
    decide: impl FnOnce(Result<Option<&LoopState>, &StoreError>) -> Result<Event, E>,
) -> Result<Replaced, E> {
    let store = StateStore::new(paths);
    let lock = store.lock(true)?;
    let now = crate::time::Timestamp::now();
    let (current, event) = match lock.read() {
        Ok(current) => {
            let event = decide(Ok(current.as_ref()))?;
            (current, event)
        }
        Err(
            e @ (StoreError::Corrupt { .. }
            | StoreError::Unverified { .. }
            | StoreError::Stale { .. }),
        ) => {
            let event = decide(Err(&e))?;
            (None, event)
        }
        Err(e) => return Err(e.into()),
    };
    let quarantined = match (&current, store.exists()?) {
        (None, true) => Some(lock.quarantine(&now.to_string())?),
        _ => None,
    };
    let mut draft = Draft::new(current.clone(), now);
    draft.apply(event);
    let committed = commit(&lock, paths, current.as_ref(), draft.finish(), now)?;
    Ok(Replaced {
        state: committed.state,
        kept: committed.kept,
        quarantined,
        notes: committed.notes,
    })
}

/// What [`commit`] did.
struct Committed {
    state: Option<LoopState>,
    kept: Option<PathBuf>,
    notes: Vec<String>,
}

impl Committed {
    fn into_parts(self) -> (Option<LoopState>, Vec<String>) {
        (self.state, self.notes)
    }
}

/// Carries out a transition under `lock`: keeps a replaced loop, marks a
/// due notification, writes the state once (removes it when cleared),
/// appends the audit lines, then starts `notify`.
fn commit(
    lock: &StateLock<'_>,
    paths: &ProjectPaths,
    before: Option<&LoopState>,
    transition: Transition,
    now: Timestamp,
) -> Result<Committed, StoreError> {
    Ok(write(lock, paths, before, transition, now, true)?.carry_out())
}

/// A transition written under its lock, its audit lines and `notify` not
/// carried out yet: the stop's sequence ([`crate::engine`]) delivers its
/// answer in between, and undoes the write when it could not.
pub(crate) struct Written<'a, 'l> {
    lock: &'a StateLock<'l>,
    paths: &'a ProjectPaths,
    state: Option<LoopState>,
    effects: Vec<Effect>,
    /// The notify command due, and when the loop resumes by itself.
    notify: Option<(String, Option<Timestamp>)>,
    kept: Option<PathBuf>,
    now: Timestamp,
}

/// The first half of [`commit`]: keeps a replaced loop, marks a due
/// notification (when `tell`: a driver that settles the loop after a stop
/// tells it itself), writes the state once (removes it when cleared).
pub(crate) fn write<'a, 'l>(
    lock: &'a StateLock<'l>,
    paths: &'a ProjectPaths,
    before: Option<&LoopState>,
    transition: Transition,
    now: Timestamp,
    tell: bool,
) -> Result<Written<'a, 'l>, StoreError> {
    let Transition { mut state, effects } = transition;
    let mut kept = None;
    for effect in &effects {
        if let Effect::Keep(previous) = effect {
            kept = Some(
                lock.archive(previous)
                    .map_err(|e| StoreError::NotKept(Box::new(e)))?,
            );
        }
    }
    // An ending or a pause not told yet is told by the transaction that
    // finds it (a driver's, after the hook's stop left it to the driver),
    // marked in the same write, so it is told once.
    let notify = state
        .as_mut()
        .filter(|_| tell)
        .and_then(|state| notify_command(paths, state, now));
    match &state {
        Some(after) if before != Some(after) => lock.write(after)?,
        None if before.is_some() => lock.remove()?,
        _ => {}
    }
    Ok(Written {
        lock,
        paths,
        state,
        effects,
        notify,
        kept,
        now,
    })
}

impl Written<'_, '_> {
    /// Appends the audit lines, then starts `notify`; warnings for what
    /// could not be done.
    fn carry_out(self) -> Committed {
        let mut notes = Vec::new();
        for effect in &self.effects {
            if let Effect::Log(entry) = effect
                && let Err(e) = log::append(self.lock, entry)
            {
                notes.push(format!("warning: cannot append to the audit log: {e}"));
            }
        }
        if let (Some((command, resumes_at)), Some(state)) = (&self.notify, &self.state) {
            notes.extend(crate::notify::send(
                self.lock,
                &self.paths.root,
                command,
                state,
                self.now,
                *resumes_at,
            ));
        }
        Committed {
            state: self.state,
            kept: self.kept,
            notes,
        }
    }

    /// [`Self::carry_out`], its warnings.
    pub(crate) fn finish(self) -> Vec<String> {
        self.carry_out().notes
    }

    /// Writes `before` back as it was (nothing of the transition is
    /// carried out).
    pub(crate) fn undo(self, before: &LoopState) -> Result<(), StoreError> {
        self.lock.write_back(before)
    }
}

/// The loop's pinned `notify` command when its ending or pause is not yet
/// told, marking it told (`notified`), and when a paused loop resumes by
/// itself.
fn notify_command(
    paths: &ProjectPaths,
    state: &mut LoopState,
    now: Timestamp,
) -> Option<(String, Option<Timestamp>)> {
    // The pinned config is read only when something is due.
    crate::notify::due(state)?;
    // The loop's pinned `notify`, never one written into config.json since.
    let config = crate::pin::loop_config(paths, &ProcessEnv, state).ok()?;
    let command = crate::notify::take_due(state, config.notify.as_deref())?;
    Some((command, crate::notify::resumes_at(&config, state, now)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::state::Status;
    use crate::persist::log::LogEvent;

    fn project() -> (tempfile::TempDir, ProjectPaths) {
        let dir = tempfile::TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        (dir, paths)
    }

    fn start(paths: &ProjectPaths, session: &str) -> Replaced {
        replace(paths, |_| {
            Ok::<_, StoreError>(Event::Started {
                state: Box::new(LoopState::new(
                    session.into(),
                    5,
                    Timestamp::from_secs(1767225600),
                )),
                why: "started".into(),
            })
        })
        .unwrap()
    }

    #[test]
    fn a_change_takes_one_lock_writes_once_and_logs() {
        let (_dir, paths) = project();
        start(&paths, "s1");
        let before = crate::persist::store::locks_taken();
        let changed = change(&paths, Whose::Session("s1"), |draft| {
            draft.apply(Event::Ended {
                status: Status::Cancelled,
                why: "cancelled by the person".into(),
                at: None,
            });
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert_eq!(crate::persist::store::locks_taken() - before, 1);
        assert_eq!(changed.state().unwrap().status, Status::Cancelled);
        let stored = StateStore::new(&paths).read().unwrap().unwrap();
        assert_eq!(stored.status, Status::Cancelled);
        let logged = log::read_last(&paths.state_file(), 1).unwrap();
        assert_eq!(logged[0].event, LogEvent::End);
        assert_eq!(logged[0].reason, "cancelled by the person");
    }

    #[test]
    fn another_sessions_loop_and_no_loop_are_left_alone() {
        let (_dir, paths) = project();
        let gone = change(&paths, Whose::Session("s1"), |_| Ok::<_, StoreError>(()));
        assert!(matches!(gone.unwrap().found, Found::Gone));
        start(&paths, "s2");
        let mut called = false;
        let other = change(&paths, Whose::Session("s1"), |_| {
            called = true;
            Ok::<_, StoreError>(())
        })
        .unwrap();
        assert!(matches!(other.found, Found::Replaced { by } if by == "s2"));
        assert!(!called);
    }

    #[test]
    fn a_refusal_writes_nothing() {
        let (_dir, paths) = project();
        start(&paths, "s1");
        let refused = change(&paths, Whose::Any, |draft| {
            draft.apply(Event::NoteLeft("hi".into()));
            Err(StoreError::NotAFolder(PathBuf::from("x")))
        });
        assert!(refused.is_err());
        let stored = StateStore::new(&paths).read().unwrap().unwrap();
        assert_eq!(stored.hint, None);
    }

    #[test]
    fn a_start_keeps_the_loop_it_replaces_and_a_reset_clears_it() {
        let (_dir, paths) = project();
        assert!(start(&paths, "s1").kept.is_none());
        let second = start(&paths, "s2");
        let kept = second.kept.expect("the first loop is kept");
        assert!(std::fs::read_to_string(kept).unwrap().contains("s1"));
        let cleared = replace(&paths, |_| Ok::<_, StoreError>(Event::Cleared)).unwrap();
        assert!(cleared.state.is_none());
        assert!(cleared.kept.is_some());
        assert!(!StateStore::new(&paths).exists().unwrap());
    }

    #[test]
    fn a_corrupt_state_is_moved_aside_when_the_start_accepts_it() {
        let (_dir, paths) = project();
        start(&paths, "s1");
        std::fs::write(paths.state_file(), "{not json").unwrap();
        let refused = replace(&paths, |current| match current {
            Err(e) => Err(StoreError::Io(crate::file_error::FileError {
                action: "start over",
                path: PathBuf::from(e.to_string()),
                source: std::io::Error::other("corrupt"),
            })),
            Ok(_) => unreachable!(),
        });
        assert!(refused.is_err());
        assert_eq!(
            std::fs::read_to_string(paths.state_file()).unwrap(),
            "{not json"
        );
        let forced = start(&paths, "s2");
        assert!(forced.quarantined.is_some());
        assert_eq!(forced.state.unwrap().session_id, "s2");
    }
}
