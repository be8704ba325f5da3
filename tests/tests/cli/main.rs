//! Integration tests of the built binaries that need no real client: the
//! hook and `ralph-ctl` on the command line, snapshots of what people and
//! the agent read, and the hook's peak memory.
//!
//! Run one area alone with e.g. `tests/run.sh -p ralph-tests --test cli output::`.

mod check;
mod ctl_cli;
mod docs;
mod environments;
mod hook_cli;
mod memory;
mod output;
mod serve;
mod trackers;
