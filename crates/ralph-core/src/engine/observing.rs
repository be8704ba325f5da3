//! What a stop observes: the agent's message, the iteration's tool calls
//! and edits, the project's progress, the usage the transcript gained.

use super::*;

/// The usage the transcript gained since the loop's cursor (best effort: a
/// transcript that cannot be read counts nothing; said on stderr only when
/// a calls-per-hour budget depends on the count).
pub(super) fn read_usage(
    world: &dyn World,
    stop: &Stop,
    state: &LoopState,
    counted: bool,
    notes: &mut Vec<String>,
) -> UsageReading {
    let Some(path) = &stop.transcript_path else {
        return UsageReading::default();
    };
    let now = world.now().secs();
    let since = state.started_at.secs();
    match world.usage(path, state.transcript.as_ref(), now, since) {
        Ok(reading) => {
            let had_cursor = state.transcript.as_ref().is_some_and(|c| &c.path == path);
            if reading.skipped && had_cursor && counted {
                notes.push(format!(
                    "the transcript grew by more than {} MiB since the last stop; \
                     only its last {} MiB were counted for maxCallsPerHour",
                    usage::MAX_NEW_BYTES / 1024 / 1024,
                    usage::MAX_NEW_BYTES / 1024 / 1024
                ));
            }
            reading
        }
        Err(e) => {
            if counted {
                notes.push(format!(
                    "cannot read the transcript {} to count model requests for maxCallsPerHour: {e}",
                    path.display()
                ));
            }
            UsageReading::default()
        }
    }
}

/// What this stop observed: the agent's latest message (the stop's own,
/// else the iteration's final message in the transcript, waited for
/// briefly when the client has not written it yet), the iteration's tool
/// calls, file edits and failing tool results, whether the project changed
/// since `previous` (the breaker's baseline), the TDD scenario and the plan.
/// The folder the stop's iteration worked in: its worktree, or the project.
pub(super) fn work_root<'a>(paths: &'a ProjectPaths, stop: &'a Stop) -> &'a Path {
    stop.work_root.as_deref().unwrap_or(&paths.root)
}

pub(super) fn observe(
    paths: &ProjectPaths,
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    state: &LoopState,
    notes: &mut Vec<String>,
) -> Result<Observation, EngineError> {
    // Judged like the transcript's final message: its last MiB at most (a
    // claim is at the end), so a huge message cannot blow up the readers.
    let from_input = stop
        .last_assistant_message
        .as_deref()
        .filter(|m| !m.is_empty())
        .map(|m| transcript::last_bytes(m, transcript::MAX_MESSAGE_BYTES).to_string());
    let tail = match &stop.transcript_path {
        // The message came with the stop: the transcript only adds the
        // iteration's tool calls and errors, best effort, once it shows
        // that message.
        Some(path) if from_input.is_some() => {
            let expected = from_input.as_deref().unwrap_or_default();
            match world.iteration_tail(path, transcript::CATCH_UP_WAIT, from_input.as_deref()) {
                // The newest answer in the transcript is another one: the
                // client has not written this iteration yet (2.1.330 under
                // load, until after the hook), and what was read is an
                // earlier iteration's. Its tool calls and errors are not
                // this one's.
                Ok((tail, waited))
                    if tail
                        .final_message
                        .as_deref()
                        .is_some_and(|got| !transcript::same_text(got, expected)) =>
                {
                    notes.push(format!(
                        "the transcript did not show this stop's final message within {:.1} s, only an \
                         earlier one; the iteration's tool calls and errors are not known",
                        waited.as_secs_f64()
                    ));
                    IterationTail::default()
                }
                Ok((tail, waited)) => {
                    if waited >= transcript::CATCH_UP_WAIT {
                        notes.push(format!(
                            "the transcript did not show this stop's final message within {:.1} s; \
                             the iteration's tool calls and errors may be incomplete",
                            waited.as_secs_f64()
                        ));
                    }
                    tail
                }
                Err(_) => IterationTail::default(),
            }
        }
        Some(path) => {
            let (tail, waited) = world.iteration_tail(path, transcript::CATCH_UP_WAIT, None)?;
            if !tail.caught_up {
                notes.push(format!(
                    "the transcript did not show this stop's final message within {:.1} s; judging the iteration without it",
                    waited.as_secs_f64()
                ));
            }
            tail
        }
        None => IterationTail::default(),
    };
    // Still short of the iteration's end after the wait: its tool calls
    // and failing results may be missing (the client can write them only
    // after the hook has returned).
    let tools_incomplete = stop.transcript_path.is_some() && !tail.caught_up;
    let (message, source) = match (from_input, tail.final_message) {
        // Cut off mid-turn: what the transcript ends on is no answer.
        _ if stop.cut_off.is_some() => (String::new(), MessageSource::Missing),
        (Some(text), _) => (text, MessageSource::Input),
        (None, Some(text)) if !text.is_empty() => (text, MessageSource::Transcript),
        _ if stop.transcript_path.is_some() && !tail.caught_up => {
            (String::new(), MessageSource::TranscriptBehind)
        }
        _ => (String::new(), MessageSource::Missing),
    };
    let refused_calls = refused_calls(stop, tail.refusals);
    Ok(Observation {
        message,
        message_source: source,
        refused_calls,
        failing_tool_results: tail.failing_tool_results,
        tool_calls: tail.tool_calls,
        progress: world.progress(
            work_root(paths, stop),
            state.breaker.progress.as_ref(),
            &tail.edits,
        ),
        tdd_scenario: world.tdd_scenario(work_root(paths, stop)),
        plan: world.plan(work_root(paths, stop), &plan_files(config, stop)),
        // The previous stop could not see its own message in time: it is in
        // the transcript now, just before this iteration's prompt line.
        late_message: tail.previous_final_message.filter(|m| {
            !m.is_empty() && stop.cut_off.is_none() && decision::previous_stop_was_behind(state)
        }),
        cut_off: stop.cut_off.clone(),
        usage_windows: stop.usage_windows.clone(),
        tools_incomplete,
        usage: read_usage(
            world,
            stop,
            state,
            config.supervision.max_calls_per_hour.is_some(),
            notes,
        ),
        api_failure: tail.api_error,
        ..Observation::of_session(stop.session_id.clone(), stop.stop_hook_active)
    })
}

/// The calls the client refused for lack of permission: those the stop
/// names (each with the transcript's refusal text of the same call, when
/// it has one), else those the transcript shows (`refusals`), else none.
fn refused_calls(
    stop: &Stop,
    refusals: Vec<crate::judge::errors::Refusal>,
) -> Option<Vec<crate::judge::errors::Refusal>> {
    match &stop.permission_denials {
        Some(denied) => Some(
            denied
                .iter()
                .map(|call| {
                    // The transcript's refusal text of the same call.
                    let text = refusals
                        .iter()
                        .find(|r| r.tool_use_id.is_some() && r.tool_use_id == call.tool_use_id)
                        .and_then(|r| r.text.clone());
                    crate::judge::errors::Refusal {
                        text: text.or_else(|| call.text.clone()),
                        ..call.clone()
                    }
                })
                .collect(),
        ),
        None if !refusals.is_empty() => Some(refusals),
        None => None,
    }
}
