//! Integration tests of the built binaries that need no real client: the
//! hook and `ralph-ctl` on the command line, snapshots of what people and
//! the agent read, and the hook's peak memory.
//!
//! Run one area alone with e.g. `tests/run.sh -p ralph-tests --test cli output::`.

mod check;
mod ctl_common;
mod ctl_doctor;
mod ctl_formula;
mod ctl_init;
mod ctl_integrity;
mod ctl_launcher;
mod ctl_log;
mod ctl_queue;
mod ctl_signals;
mod ctl_start;
mod ctl_status;
mod docs;
mod environments;
mod formatters;
mod hook_cli;
mod memory;
mod output;
mod serve;
mod trackers;
