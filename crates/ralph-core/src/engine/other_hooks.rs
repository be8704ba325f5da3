//! The hook's other events: `StopFailure` (a turn ended on an API error),
//! `SessionEnd`, and a problem the hook could not judge, each one
//! transaction.

use super::*;

/// What the client's `StopFailure` event carries: the turn ended on an API
/// error, and no Stop hook runs for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StopFailure {
    /// The failing session.
    pub session_id: Option<String>,
    /// The session's transcript (its last `api_error` line has the HTTP
    /// status and the reset time).
    pub transcript_path: Option<PathBuf>,
    /// The client's name for the error (`rate_limit`, `server_error`, …).
    pub error: Option<String>,
    /// The client's details of it.
    pub error_details: Option<String>,
    /// The error text the client showed in place of the answer.
    pub last_assistant_message: Option<String>,
    /// A driver settles the loop once its client exits (as
    /// [`Stop::driver_settles`]): it tells the pause, with the client's
    /// cost charged first.
    pub driver_settles: bool,
}

/// Records an API failure that ended a turn of the loop's session: the loop
/// is `paused`, with what failed, the HTTP status and the API's reset time
/// when the transcript has them. Another session's failure, or one with no
/// loop running, changes nothing. The client ignores the answer, so there
/// is none.
pub fn run_stop_failure(
    paths: &ProjectPaths,
    failure: &StopFailure,
    world: &dyn World,
) -> Result<StopReport, EngineError> {
    let Some(session) = failure.session_id.as_deref() else {
        return Ok(StopReport::allow(None));
    };
    let mut notes = Vec::new();
    let tell = !failure.driver_settles;
    let changed =
        transaction::change_at(paths, Whose::Session(session), world.now(), tell, |draft| {
            let Some(state) = draft.state().filter(|s| s.status == Status::Running) else {
                return Ok::<_, EngineError>(());
            };
            let stop = Stop {
                session_id: failure.session_id.clone(),
                transcript_path: failure.transcript_path.clone(),
                ..Stop::default()
            };
            let reading = read_usage(world, &stop, state, false, &mut notes);
            let api_error = reading.last_api_error.clone().unwrap_or_default();
            let kind = match (failure.error.as_deref(), api_error.status) {
                (Some(error), _) if PauseKind::from_client_error(error) != PauseKind::Unknown => {
                    PauseKind::from_client_error(error)
                }
                (_, Some(status)) => PauseKind::from_http_status(status),
                _ => PauseKind::Unknown,
            };
            let said = failure
                .last_assistant_message
                .as_deref()
                .or(failure.error_details.as_deref())
                .or(api_error.message.as_deref())
                .or(failure.error.as_deref())
                .unwrap_or("the API failed");
            let because = PausedBecause {
                kind,
                http_status: api_error.status,
                message: crate::judge::state::one_line(said, 300),
                resume_at: api_error.resets_at.map(Timestamp::from_secs),
                retry_after_secs: api_error.retry_in_secs,
                resume_planned: None,
                at: draft.now(),
            };
            draft.apply(Event::Paused {
                because,
                reading,
                cause: "the client's StopFailure".into(),
            });
            Ok(())
        })?;
    notes.extend(changed.notes);
    Ok(StopReport {
        answer: Answer::Allow,
        notes,
        settled: false,
    })
}

/// Records that the session owning a loop that nothing else watches (a
/// `/ralph-loop` loop: no launcher is recorded carrying it) ended
/// (`SessionEnd`): the loop is `interrupted`, so that it neither blocks
/// new starts nor holds the session if it is resumed days later. Another
/// session's end, or a driven loop's, changes nothing.
pub fn run_session_end(
    paths: &ProjectPaths,
    session_id: Option<&str>,
    reason: Option<&str>,
    world: &dyn World,
) -> Result<StopReport, EngineError> {
    let Some(session) = session_id else {
        return Ok(StopReport::allow(None));
    };
    let changed =
        transaction::change_at(paths, Whose::Session(session), world.now(), true, |draft| {
            if draft.state().is_some_and(|s| s.carriers.is_none()) {
                draft.apply(Event::Interrupted {
                    cause: format!(
                        "the session ended ({})",
                        reason
                            .filter(|r| !r.is_empty())
                            .unwrap_or("no reason given")
                    ),
                });
            }
            Ok::<_, EngineError>(())
        })?;
    Ok(StopReport {
        answer: Answer::Allow,
        notes: changed.notes,
        settled: false,
    })
}

/// Keeps why the hook could not go on at a stop of the running loop of
/// `session_id`, as a `problem` line of the audit log (the state is left as
/// it was), so that the launcher's last line and `status` can name it.
/// Best effort: the problem may be the runtime folder itself; a line that
/// could not be written is a warning returned. (Not for a stop that timed
/// out on the lock: it would only wait again.)
pub fn record_hook_problem(
    paths: &ProjectPaths,
    session_id: Option<&str>,
    problem: &str,
    now: Timestamp,
) -> Result<Vec<String>, StoreError> {
    let Some(session) = session_id else {
        return Ok(Vec::new());
    };
    let changed = transaction::change_at(paths, Whose::Session(session), now, true, |draft| {
        if draft.state().is_some_and(|s| s.status == Status::Running) {
            draft.apply(Event::ProblemSeen(crate::judge::state::one_line(
                problem, 500,
            )));
        }
        Ok::<_, StoreError>(())
    })?;
    Ok(changed.notes)
}
