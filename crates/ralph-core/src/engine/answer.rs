//! What the stop answers the client: the ending's notice, a pass, or the
//! next iteration's text.

use super::*;

/// What the line announcing a loop's end adds in an interactive session:
/// the client does not exit with the loop.
pub const SESSION_STAYS_OPEN: &str = ". The loop is over, but this session stays open: type /exit to close it, or go on working in it by hand";

/// Whether the loop's client runs with a person at it (the plugin's
/// `/ralph-loop`, a launcher's loop without --headless): never a `-p` run.
pub(super) fn interactive(state: &LoopState) -> bool {
    !state.fresh_context && !state.run_mode.as_ref().is_some_and(|m| m.headless)
}

/// What the stop answers: the ending's notice, a pass, or the next
/// iteration's text (the prompt and guardrails read before anything is
/// committed; the person's note first, once).
pub(super) fn answer_for(
    outcome: &decision::Outcome,
    paths: &ProjectPaths,
    config: &Config,
    stop: &Stop,
    world: &dyn World,
    owned: &LoopState,
    state: &LoopState,
) -> Result<Answer, EngineError> {
    Ok(match (&outcome.verdict, &outcome.new_state) {
        (Verdict::End(_) | Verdict::Pause(_) | Verdict::Ask(_), Some(ended)) => Answer::End {
            // In an interactive session nothing else says so until the
            // client exits; and the client stays open after the loop.
            system_message: format!(
                "Ralph {}{}",
                crate::judge::lifecycle::outcome_line(ended),
                if matches!(outcome.verdict, Verdict::End(_)) && interactive(ended) {
                    SESSION_STAYS_OPEN
                } else {
                    ""
                }
            ),
        },
        (Verdict::Pass(_) | Verdict::End(_) | Verdict::Pause(_) | Verdict::Ask(_), _) => {
            Answer::Allow
        }
        (
            Verdict::Continue {
                iteration,
                max_iterations,
                notice,
            },
            _,
        ) => {
            // Read everything the answer needs before committing the new state.
            // The driver's task (a formula step), the loop's own (/ralph-loop), or PROMPT.md.
            let prompt_text = match stop.task.as_ref().or(owned.task.as_ref()) {
                Some(task) => task.clone(),
                None => world.prompt(&paths.resolve(&config.prompt_file))?,
            };
            let guardrails = world.guardrails(&paths.guardrails_file())?;
            // The person's note (`ralph-ctl say`) goes first, once.
            let notice = match (&state.hint, notice) {
                (Some(hint), notice) => Some(
                    std::iter::once(prompt_text::person_note(hint))
                        .chain(notice.clone())
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                ),
                (None, notice) => notice.clone(),
            };
            Answer::Block {
                reason: prompt_text::iteration_text(
                    &config.completion_signal,
                    *iteration,
                    *max_iterations,
                    notice.as_deref(),
                    &prompt_text,
                    guardrails.as_deref(),
                ),
                // The person sees a rejected claim as the next iteration
                // starts (the agent gets the failures in the text).
                system_message: prompt_text::system_message(
                    *iteration,
                    *max_iterations,
                    rejected_gates(outcome.new_state.as_ref()).as_deref(),
                ),
            }
        }
    })
}

/// The gates that rejected this stop's claim of done, in words (`None`:
/// no claim, or an accepted one).
pub(super) fn rejected_gates(state: Option<&LoopState>) -> Option<String> {
    let claim = state?.history.last()?.claim.as_ref()?;
    if claim.accepted {
        return None;
    }
    Some(crate::judge::completion::rejected_by(
        claim.failed_gates.iter().map(|g| g.as_str()),
    ))
}
