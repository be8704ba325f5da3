//! `ralph-ctl start`: writes a fresh running state owned by one session
//! and prints `SESSION_ID MAX_ITERATIONS` (what opens the loop is
//! `crate::driver::start`'s, shared with `run`, `reset` and the plugin).

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;

use crate::driver::start::{allow_check_not_running, start_loop};
use crate::error::CmdResult;

/// `ralph-ctl start`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct StartArgs {
    /// The Claude Code session that will own the loop (default: a new UUID).
    #[arg(long, value_name = "UUID")]
    pub(crate) session_id: Option<String>,
    /// The iteration cap (default: `RALPH_MAX_ITERATIONS`, config maxIterations, or 25).
    #[arg(long, value_name = "N")]
    pub(crate) max_iterations: Option<u32>,
    /// Replace a running loop or a corrupt state, and start even though
    /// PROMPT.md is still the template.
    #[arg(long)]
    pub(crate) force: bool,
    /// Start even though the check (verify) cannot run (its program or
    /// runner not found, a usage error): making it run is the task.
    #[arg(long)]
    pub(crate) check_may_not_run: bool,
}

/// `ralph-ctl start` as its arguments ask.
pub(crate) fn command(paths: &ProjectPaths, args: StartArgs) -> CmdResult {
    if args.check_may_not_run {
        allow_check_not_running();
    }
    run(paths, args.session_id, args.max_iterations, args.force)
}

/// Starts a loop; prints `SESSION_ID MAX_ITERATIONS`.
pub(crate) fn run(
    paths: &ProjectPaths,
    session: Option<String>,
    max_iterations: Option<u32>,
    force: bool,
) -> CmdResult {
    let started = start_loop(paths, session, max_iterations, force, force, false, None)?;
    crate::output::say!("{} {}", started.session_id, started.max_iterations);
    Ok(exit_codes::OK)
}
