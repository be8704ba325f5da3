//! The command line of `ralph-ctl`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// Start, inspect, reset and install the Ralph loop for Claude Code.
///
/// Exit codes: 0 ok (for `finish`: the loop completed), 1 error, 2 usage,
/// 3 `start` refused, 10 stopped at max iterations, 11 circuit open,
/// 12 interrupted, 13 no loop for this session.
#[derive(Debug, Parser)]
#[command(name = "ralph-ctl", version, about, long_about)]
pub struct Cli {
    /// The project folder (default: the current folder).
    #[arg(long, global = true, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the loop's state: status, iteration, session, times, findings, recent stops.
    Status {
        /// Print the state object as JSON instead.
        #[arg(long)]
        json: bool,
    },
    /// Clear the loop's state (a corrupt state file is moved aside, not deleted).
    Reset,
    /// Write a fresh running state; prints "SESSION_ID MAX_ITERATIONS" (what the launchers call).
    Start {
        /// The Claude Code session that will own the loop (default: a new UUID).
        #[arg(long, value_name = "UUID")]
        session_id: Option<String>,
        /// The iteration cap (default: RALPH_MAX_ITERATIONS, config maxIterations, or 25).
        #[arg(long, value_name = "N")]
        max_iterations: Option<u32>,
        /// Replace a running loop or a corrupt state.
        #[arg(long)]
        force: bool,
    },
    /// Print the prompt of the loop's current iteration (header, PROMPT.md, guardrails).
    Prompt,
    /// Called by the launchers when the client exits: marks a still-running loop
    /// `interrupted`, prints how the loop ended, and exits with its code.
    Finish {
        /// The session the launcher started.
        #[arg(long, value_name = "UUID")]
        session_id: String,
        /// The client's exit code.
        #[arg(long, value_name = "CODE", allow_negative_numbers = true)]
        client_exit: Option<i32>,
    },
    /// Install ralph into the project: PROMPT.md and guardrails.md templates,
    /// the launchers, and the Stop hook in .claude/settings.json.
    Init {
        /// The ralph-stop-hook binary to register (default: the one beside ralph-ctl).
        #[arg(long, value_name = "PATH")]
        hook_path: Option<PathBuf>,
        /// The hook timeout in seconds registered with Claude Code (default: 60, or
        /// the verify commands' total timeout plus 30 when that is more).
        #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u32).range(1..=7200))]
        timeout: Option<u32>,
    },
}
