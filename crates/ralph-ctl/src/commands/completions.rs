//! `ralph-ctl completions SHELL`: the shell completion script of the
//! command line (`command`, the CLI's own definition, given by the caller
//! that owns it).

use ralph_core::exit_codes;

use crate::error::CmdResult;

/// Writes the completion script for `shell` of `command` on stdout.
pub(crate) fn run(shell: clap_complete::Shell, mut command: clap::Command) -> CmdResult {
    clap_complete::generate(shell, &mut command, "ralph-ctl", &mut std::io::stdout());
    Ok(exit_codes::OK)
}
