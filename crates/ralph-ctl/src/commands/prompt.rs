//! `ralph-ctl prompt`: the text of the loop's current iteration, which
//! `ralph-ctl run` passes to Claude Code as the first prompt.

use ralph_core::config::{Config, ProcessEnv};
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::prompt;
use ralph_core::state::Status;
use ralph_core::store::StateStore;

use crate::error::CtlError;
use crate::CmdResult;

/// Prints header, PROMPT.md and guardrails for the current iteration.
pub fn run(paths: &ProjectPaths) -> CmdResult {
    let text = current_text(paths)?;
    // A reader that goes away early (`| head`) is no error of ours.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(exit_codes::OK)
}

/// The prompt of the loop's current iteration: header, PROMPT.md, guardrails.
pub fn current_text(paths: &ProjectPaths) -> Result<String, CtlError> {
    let state = StateStore::new(paths).read()?;
    // A loop's own pin decides its prompt file, not config.json as it is now.
    let config = match &state {
        Some(state) => ralph_core::pin::loop_config(paths, &ProcessEnv, state)?,
        None => Config::load(paths, &ProcessEnv)?,
    };
    let (iteration, max) = match state {
        Some(state) if state.status == Status::Running => (state.iteration, state.max_iterations),
        _ => (1, config.max_iterations),
    };
    let text = prompt::read_prompt(&paths.resolve(&config.prompt_file))?;
    let guardrails = prompt::read_guardrails(&paths.guardrails_file())?;
    Ok(prompt::iteration_text(
        &config,
        iteration,
        max,
        None,
        &text,
        guardrails.as_deref(),
    ))
}
