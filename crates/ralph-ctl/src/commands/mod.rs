//! One module per `ralph-ctl` subcommand.

pub mod doctor;
pub mod finish;
pub mod history;
pub mod init;
pub mod log;
pub mod plugin;
pub mod prompt;
pub mod reload;
pub mod report;
pub mod reset;
pub mod run;
pub mod start;
pub mod status;
pub mod task;
pub mod watch;

use std::io;

use crate::error::CtlError;
use crate::CmdResult;

/// How a command that printed to a reader ends: with `code` once its output
/// is written, and with `code` too when the reader went away early
/// (`ralph-ctl log | head -1`): it had what it wanted. Any other failure to
/// write is an error.
pub fn written(result: io::Result<()>, code: i32) -> CmdResult {
    match result {
        Ok(()) => Ok(code),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(code),
        Err(e) => Err(CtlError::io("write to", "standard output")(e)),
    }
}
