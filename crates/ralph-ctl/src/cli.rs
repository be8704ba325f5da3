//! The command line of `ralph-ctl`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use ralph_core::exit_codes;

/// Start, inspect, reset and install the Ralph loop for Claude Code.
#[derive(Debug, Parser)]
#[command(name = "ralph-ctl", version, about, long_about, after_help = exit_codes_help())]
pub(crate) struct Cli {
    /// The project folder (default: the current folder).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) project: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// "Exit codes:" and every code's meaning ([`exit_codes::MEANINGS`]),
/// wrapped for a terminal: the end of `--help` and `run --help`.
pub(crate) fn exit_codes_help() -> String {
    let last = exit_codes::MEANINGS.len() - 1;
    // A code and the first word of its meaning are never parted.
    let words = exit_codes::MEANINGS
        .iter()
        .enumerate()
        .flat_map(|(n, (code, meaning))| {
            let end = if n == last { "." } else { "," };
            let mut words: Vec<String> = format!("{meaning}{end}")
                .split(' ')
                .map(str::to_string)
                .collect();
            words[0] = format!("{code} {}", words[0]);
            words
        });
    let mut text = String::from("Exit codes:\n ");
    let mut width = 1;
    for word in words {
        if width > 1 && width + 1 + word.len() > 78 {
            text.push_str("\n ");
            width = 1;
        }
        text.push(' ');
        text.push_str(&word);
        width += 1 + word.len();
    }
    text
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show the loop's state: status (and why paused or failed), iteration, times, findings, cost, tokens, recent stops.
    #[command(
        after_help = "Example:\n  ralph-ctl status\n  ralph-ctl status --json | jq .iteration"
    )]
    Status(crate::commands::status::StatusArgs),
    /// Show the audit log's last entries, oldest first: each stop, pause, wait, resume and end.
    #[command(after_help = "Example:\n  ralph-ctl log -n 50")]
    Log(crate::commands::log::LogArgs),
    /// Run the loop's checks as a claim of done would be judged now, and
    /// say what it would meet: each check's result, its test counts against
    /// the loop's start, and each completion gate (the verification, the
    /// test counts, the plan, the protected files, the check unchanged).
    /// The checks are the loop's pinned ones (with no loop, config.json's),
    /// run inside the walls a stop runs them in; nothing is recorded. The
    /// agent's way to run the project's tests. Exits 0 when a claim would
    /// pass, 25 when a gate would fail it.
    #[command(after_help = "Example:
  ralph-ctl check
  ralph-ctl check --json | jq .gates")]
    Check(crate::commands::check::CheckArgs),
    /// Check the install and the project, each check with its verdict and
    /// the fix: the hook registered (settings, plugin) and runnable, its
    /// timeout, the client and its version, its login, first run and folder
    /// trust, the sandbox and the checks' walls, `RALPH_ACTIVE` in shell
    /// profiles, PROMPT.md, files under .claude/ the agent must edit, the
    /// state. Judges headless runs unless --interactive: what only the other
    /// kind of run needs is a warning naming it. Exits 0 only when nothing
    /// fails.
    #[command(
        after_help = "Example:\n  ralph-ctl doctor\n  ralph-ctl doctor --interactive\n  ralph-ctl doctor --json"
    )]
    Doctor(crate::commands::doctor::DoctorArgs),
    /// Watch the loop live: in a terminal, a view redrawn as the state
    /// changes (iteration, time per iteration, the last message, the
    /// breaker, cost) until q; elsewhere, one line per change until it ends.
    #[command(after_help = "Example:\n  ralph-ctl watch\n  ralph-ctl watch | tee watch.log")]
    Watch,
    /// Write one self-contained HTML page for the loop: how it ended, a
    /// timeline of its iterations, SVG charts of tokens per iteration and
    /// of each breaker signal against its threshold, the claims and gates.
    #[command(after_help = "Example:\n  ralph-ctl report --html ralph-report.html")]
    Report(crate::commands::report::ReportArgs),
    /// Serve the project's loops as a live page on 127.0.0.1 (the main
    /// loop, each queue item's, a formula's steps), updated as they move,
    /// with cancel, say and answer from the page. Prints one URL carrying a
    /// random token; every request without it is refused. Ctrl-C ends it.
    #[command(after_help = "Example:\n  ralph-ctl serve\n  ralph-ctl serve --port 8765")]
    Serve(crate::commands::serve::ServeArgs),
    /// (Internal) The watchdog `ralph-ctl run` starts beside each client:
    /// when its stdin ends without a line, the client PID is ended.
    #[command(hide = true)]
    Watchdog(crate::commands::watchdog::WatchdogArgs),
    /// (Internal) The status line command an interactive loop's client
    /// runs when `pauseAtUtilization` is set: records the plan's usage
    /// windows the client gives it, and prints your own status line.
    #[command(hide = true)]
    Statusline,
    /// Print the shell completion script for SHELL on stdout.
    #[command(
        after_help = "Example:\n  ralph-ctl completions bash > ~/.local/share/bash-completion/completions/ralph-ctl\n  ralph-ctl completions zsh > \"${fpath[1]}/_ralph-ctl\""
    )]
    Completions {
        /// bash, zsh, fish, powershell or elvish.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Clear the loop's state; the loop is kept in the history (a corrupt
    /// state file is moved aside). A loop still going (running, or paused or
    /// waiting under a live `ralph-ctl run`) is cleared only if you say yes
    /// in a terminal, or with --force; elsewhere the reset is refused (exit
    /// 3): end the loop first with `ralph-ctl cancel`.
    #[command(after_help = "Example:\n  ralph-ctl reset\n  ralph-ctl cancel && ralph-ctl reset")]
    Reset(crate::commands::reset::ResetArgs),
    /// Show a backlog as a worker would see it now: the items of SOURCE
    /// (plan:PATH, the unchecked boxes of a markdown plan; dir:PATH, a file
    /// an item; cmd:COMMAND, the JSON array a command prints; prd:PATH, a
    /// prd.json's stories not passing; github:label=NAME, open issues
    /// through gh; beads:, what bd ready lists) and where each stands: free
    /// (or waiting on an item that has not landed), claimed (by whom, until
    /// when), done, needs review.
    #[command(
        after_help = "Example:\n  ralph-ctl queue plan:TODO.md\n  ralph-ctl queue dir:backlog --json"
    )]
    Queue(crate::commands::queue::QueueArgs),
    /// List the earlier loops that a new start or a reset replaced, oldest first.
    #[command(after_help = "Example:\n  ralph-ctl history --json")]
    History(crate::commands::history::HistoryArgs),
    /// Start a loop bound to the current Claude Code session, with TASK as
    /// its prompt: what the plugin's /ralph-loop runs (the session from
    /// `CLAUDE_CODE_SESSION_ID`, which Claude Code 2.1 gives its commands).
    #[command(
        after_help = "Example:\n  ralph-ctl loop-start Fix the failing tests. --max-iterations 6 --completion-promise DONE"
    )]
    LoopStart(crate::commands::plugin::LoopStartArgs),
    /// End the project's running or paused loop now, `cancelled` (what the
    /// plugin's /cancel-ralph runs).
    #[command(after_help = "Example:\n  ralph-ctl cancel")]
    Cancel(crate::commands::cancel::CancelArgs),
    /// Leave a note for the running loop: TEXT goes in front of the next
    /// iteration's text, once, then is dropped (logged).
    #[command(
        after_help = "Example:\n  ralph-ctl say \"The flaky test is test_upload; skip it for now.\""
    )]
    Say(crate::commands::say::SayArgs),
    /// Answer the question the agent asked (`RALPH_ASK: <question>`): the
    /// waiting loop goes on, with the question and TEXT in front of its next
    /// iteration's text (a run waiting for it goes on at once; else `run
    /// --resume`, or in a session, type anything there). The agent may not
    /// run it.
    #[command(
        after_help = "Example:\n  ralph-ctl answer \"Use Postgres; the staging URL is in .env.example.\""
    )]
    Answer(crate::commands::answer::AnswerArgs),
    /// Adopt config.json (and the running formula's file) as they are now
    /// in the running loop, from its next stop. A loop decides by what it
    /// was pinned to when it started: a change made mid-loop (by the agent
    /// or anyone) is shown by `status` and not obeyed until reloaded.
    #[command(after_help = "Example:\n  ralph-ctl reload")]
    Reload,
    /// Write a fresh running state; prints "`SESSION_ID` `MAX_ITERATIONS`" (for launchers of your own).
    #[command(after_help = "Example:\n  ralph-ctl start --max-iterations 10")]
    Start(crate::commands::start::StartArgs),
    /// Print the prompt of the loop's current iteration (header, PROMPT.md, guardrails).
    #[command(after_help = "Example:\n  ralph-ctl prompt | claude -p")]
    Prompt,
    /// For launchers of your own, once the client exits: marks a still-running
    /// loop `interrupted`, prints how the loop ended, and exits with its code.
    #[command(
        after_help = "Example:\n  ralph-ctl finish --session-id \"$SESSION\" --client-exit $?"
    )]
    Finish(crate::commands::finish::FinishArgs),
    /// Start a loop and run Claude Code on it until it ends (what the launchers run)
    ///
    /// Starts Claude Code on .claude/ralph/PROMPT.md and keeps it working,
    /// through the ralph Stop hook, until the work is done, the iteration cap
    /// is reached or the circuit breaker opens; then prints one line saying
    /// how the loop ended and exits with its code.
    ///
    /// Environment: `RALPH_CLAUDE` (the client, default `claude`; may carry
    /// arguments, e.g. "node /path/to/cli.js"), `RALPH_MAX_ITERATIONS`,
    /// `RALPH_COMPLETION_SIGNAL`, `RALPH_CIRCUIT_BREAKER_THRESHOLD`,
    /// `RALPH_PROMPT_FILE`; `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP` is raised above the
    /// loop's cap. The client runs with `RALPH_ACTIVE=1`.
    ///
    /// Ctrl-C reaches the client from the terminal (interactive: a key that
    /// interrupts the turn, twice quits); SIGTERM and SIGHUP are passed on to
    /// it (it is killed if still running 10 s later). A loop still running
    /// when the client exits is recorded `interrupted`.
    ///
    /// Headless, an API error or a crash pauses the loop, and it is resumed
    /// in the same session (`RALPH_RESUME_POLICY`, `RALPH_RESUME_BACKOFF_SECONDS`,
    /// `RALPH_MAX_AUTO_RESUMES`); `RALPH_MAX_COST_USD` and `RALPH_MAX_CALLS_PER_HOUR`
    /// bound what it spends. --resume goes on with a paused or interrupted loop.
    #[command(verbatim_doc_comment)]
    #[command(
        after_help = format!("Example:\n  ralph-ctl run --task \"make the failing tests pass\" --yes --headless\n  ralph-ctl run --fresh --worktree -- --permission-mode acceptEdits\n  ralph-ctl run --formula feature\n\n{}", exit_codes_help())
    )]
    Run(crate::commands::run::RunArgs),
    /// Install ralph into the project: PROMPT.md and guardrails.md templates,
    /// the launchers, the Stop hook in .claude/settings.json, and the
    /// completion check (the project's tests; see --yes and --verify).
    #[command(
        after_help = "Example:\n  ralph-ctl init --yes\n  ralph-ctl init --verify \"cargo test\" --formula feature"
    )]
    Init(crate::commands::init::InitArgs),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_codes_help_names_each_code_once_within_78_columns() {
        let help = exit_codes_help();
        assert!(help.starts_with("Exit codes:\n  0 ok"), "{help}");
        assert!(help.lines().all(|l| l.len() <= 78), "{help}");
        for (code, meaning) in exit_codes::MEANINGS {
            let first = meaning.split(' ').next().unwrap();
            assert_eq!(
                help.matches(&format!(" {code} {first}")).count(),
                1,
                "{code}: {help}"
            );
        }
    }
}
