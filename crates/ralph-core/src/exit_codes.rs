//! Exit codes shared by `ralph-ctl` and the launchers, kept in one place so
//! the README, the scripts and the code cannot drift apart.

/// Success: the command did what was asked (for `finish`: the loop completed).
pub const OK: i32 = 0;
/// An error: bad input, bad configuration, or a file that could not be read or written.
pub const ERROR: i32 = 1;
/// The command line was wrong (clap's own code).
pub const USAGE: i32 = 2;
/// `start` refused: a loop is already running (or the state is corrupt) and `--force` was not given.
pub const REFUSED: i32 = 3;
/// `finish`: the loop stopped at its iteration cap.
pub const MAX_ITERATIONS: i32 = 10;
/// `finish`: the circuit breaker stopped the loop.
pub const CIRCUIT_OPEN: i32 = 11;
/// `finish`: the client exited while the loop was still running.
pub const INTERRUPTED: i32 = 12;
/// `finish`: no loop state belongs to this session (reset, or taken over by another start).
pub const NO_LOOP: i32 = 13;
/// `finish`/`run`: the loop is paused (an API error or the calls-per-hour
/// budget) and was not resumed; `ralph-ctl run --resume` goes on.
pub const PAUSED: i32 = 14;
/// `finish`/`run`: the API refused the loop for good (authentication,
/// billing, an invalid request, an unknown model).
pub const FAILED: i32 = 15;
/// `finish`/`run`: the loop's cost budget is spent.
pub const BUDGET_EXHAUSTED: i32 = 16;
/// `finish`/`run`: the state says `complete`, but no accepted completion
/// claim is on record: the state was changed outside ralph.
pub const UNRECORDED_COMPLETION: i32 = 17;
/// `finish`/`run`: the agent said it is blocked and needs the person
/// (`RALPH_ABORT: <reason>`, or `STATUS: BLOCKED` in its status block).
pub const BLOCKED: i32 = 18;
/// `finish`/`run`: `errorBudget` `RALPH_OUTCOME` errors in a row.
pub const ERROR_BUDGET_EXHAUSTED: i32 = 19;
/// `finish`/`run`: `gateBudget` `RALPH_OUTCOME` gate-blocked items in a row.
pub const GATE_BUDGET_EXHAUSTED: i32 = 20;
/// `run --formula`: a step's gate failed more times than its `retries`.
pub const GATE_FAILED: i32 = 21;
/// `finish`/`run`: the person cancelled the loop (`/cancel-ralph`, `ralph-ctl cancel`).
pub const CANCELLED: i32 = 22;
/// `run --queue`: the queue is drained, and some items did not land
/// (they need review, or failed): `status` lists them.
pub const ITEMS_LEFT: i32 = 23;
/// The loop waits for the person's answer to the agent's question
/// (`RALPH_ASK`): `ralph-ctl answer TEXT`, then `ralph-ctl run --resume`.
pub const WAITING: i32 = 24;
/// `ralph-ctl run` (the launchers): the Claude Code client was not found.
pub const CLIENT_NOT_FOUND: i32 = 127;

/// `ralph-ctl run`: the exit code after the signal numbered `signal` ended
/// the loop (the shell's convention, 128 + the number: SIGHUP 129, SIGINT
/// 130, SIGTERM 143).
pub const fn signalled(signal: i32) -> i32 {
    128 + signal
}

/// The signal an exit code of [`signalled`] stands for (SIGHUP, SIGINT,
/// SIGTERM), if it is one.
pub const fn signal_of(code: i32) -> Option<i32> {
    match code {
        129 | 130 | 143 => Some(code - 128),
        _ => None,
    }
}
