//! One module per `ralph-ctl` subcommand.

pub mod finish;
pub mod init;
pub mod prompt;
pub mod reset;
pub mod run;
pub mod start;
pub mod status;
