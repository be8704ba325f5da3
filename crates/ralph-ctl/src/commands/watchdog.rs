//! `ralph-ctl watchdog` (hidden): the process `ralph-ctl run` starts beside
//! each client, which ends the client when the driver dies first (see
//! `crate::driver::watchdog`).

use crate::driver::watchdog::{ORPHAN_GRACE, watch};

/// `ralph-ctl watchdog`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct WatchdogArgs {
    /// The client's process id.
    #[arg(long)]
    pub(crate) pid: u32,
    /// The client's start time, in the system's units (Linux: clock
    /// ticks since boot), so that a pid reused since is left alone.
    #[arg(long)]
    pub(crate) started: Option<u64>,
}

/// `ralph-ctl watchdog` as its arguments ask: watches the client they
/// name while stdin stays open.
pub(crate) fn command(args: WatchdogArgs) -> crate::error::CmdResult {
    watch(
        ralph_core::units::ProcessId {
            pid: args.pid,
            started: args.started,
        },
        std::io::stdin(),
        ORPHAN_GRACE,
    );
    Ok(ralph_core::exit_codes::OK)
}
