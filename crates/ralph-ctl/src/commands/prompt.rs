//! `ralph-ctl prompt`: the text of the loop's current iteration, which
//! `ralph-ctl run` passes to Claude Code as the first prompt.

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;

use crate::error::CmdResult;

/// Prints header, PROMPT.md and guardrails for the current iteration.
pub(crate) fn run(paths: &ProjectPaths) -> CmdResult {
    let text = crate::driver::prepare::current_text(paths, &ralph_core::judge::config::ProcessEnv)?;
    // A reader that goes away early (`| head`) is no error of ours.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    Ok(exit_codes::OK)
}
