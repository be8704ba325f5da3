//! One module per `ralph-ctl` subcommand: the CLI only. What runs a loop
//! (starting, driving, finishing it) is `crate::driver`'s.

pub mod doctor;
pub mod history;
pub mod init;
pub mod log;
pub mod plugin;
pub mod prompt;
pub mod reload;
pub mod report;
pub mod reset;
pub mod status;
pub mod task;
pub mod watch;

pub use crate::error::written;
