//! One module per `ralph-ctl` subcommand: the CLI only. What runs a loop
//! (starting, driving, finishing it) is `crate::driver`'s.

pub(crate) mod answer;
pub(crate) mod cancel;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod doctor;
pub(crate) mod finish;
pub(crate) mod history;
pub(crate) mod init;
pub(crate) mod log;
pub(crate) mod plugin;
pub(crate) mod prompt;
pub(crate) mod queue;
pub(crate) mod reload;
pub(crate) mod report;
pub(crate) mod reset;
pub(crate) mod run;
pub(crate) mod say;
pub(crate) mod serve;
pub(crate) mod start;
pub(crate) mod status;
pub(crate) mod statusline;
pub(crate) mod watch;
pub(crate) mod watchdog;

pub(crate) use crate::error::written;
