//! `ralph-ctl finish`: what the launcher runs once the client has exited.
//! A loop still `running` then was cut short: it is marked `interrupted`
//! (`crate::driver::finish::record`), and the exit code says how the loop
//! ended.

use ralph_core::paths::ProjectPaths;

use crate::driver::finish::{announce, record};
use crate::error::CmdResult;

/// `ralph-ctl finish`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct FinishArgs {
    /// The session the launcher started.
    #[arg(long, value_name = "UUID")]
    pub(crate) session_id: String,
    /// The client's exit code.
    #[arg(long, value_name = "CODE", allow_negative_numbers = true)]
    pub(crate) client_exit: Option<i32>,
}

/// `ralph-ctl finish` as its arguments ask.
pub(crate) fn command(paths: &ProjectPaths, args: FinishArgs) -> CmdResult {
    run(paths, &args.session_id, args.client_exit)
}

/// Marks an interrupted loop, prints one line on stderr, returns the loop's exit code.
pub(crate) fn run(paths: &ProjectPaths, session_id: &str, client_exit: Option<i32>) -> CmdResult {
    let cause = match client_exit {
        Some(code) => format!("Claude Code exited with code {code}"),
        None => "Claude Code exited".to_string(),
    };
    Ok(announce(paths, &record(paths, session_id, &cause)?))
}
