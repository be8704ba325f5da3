//! Exit codes shared by `ralph-ctl` and the launchers, kept in one place so
//! the README, the scripts and the code cannot drift apart: [`MEANINGS`]
//! makes the help texts, and the README's table is tested against it.

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
/// `ralph-ctl check`: a claim of done made now would be rejected (a gate
/// fails: the verification, the test counts, the plan, the protected files).
pub const CHECK_FAILED: i32 = 25;
/// `ralph-ctl run` (the launchers): the Claude Code client was not found.
pub const CLIENT_NOT_FOUND: i32 = 127;

/// Every exit code with what it means in a few words, in order: what
/// `ralph-ctl --help` and `ralph-ctl run --help` list (the README's table
/// says more of each, and a test holds it to this one).
pub const MEANINGS: &[(i32, &str)] = &[
    (OK, "ok (for `finish` and `run`: the loop completed)"),
    (ERROR, "error"),
    (USAGE, "usage"),
    (
        REFUSED,
        "refused (a loop is already running, the breaker is open, nothing to resume)",
    ),
    (MAX_ITERATIONS, "stopped at max iterations"),
    (CIRCUIT_OPEN, "circuit open"),
    (INTERRUPTED, "interrupted"),
    (NO_LOOP, "no loop for this session"),
    (PAUSED, "paused"),
    (FAILED, "failed (the API refused the loop)"),
    (BUDGET_EXHAUSTED, "budget exhausted"),
    (UNRECORDED_COMPLETION, "`complete` with no claim recorded"),
    (BLOCKED, "blocked"),
    (ERROR_BUDGET_EXHAUSTED, "RALPH_OUTCOME error budget spent"),
    (GATE_BUDGET_EXHAUSTED, "RALPH_OUTCOME gate budget spent"),
    (GATE_FAILED, "a formula gate failed past its retries"),
    (CANCELLED, "cancelled"),
    (ITEMS_LEFT, "a queue drained with items that did not land"),
    (WAITING, "waiting for your answer (`ralph-ctl answer`)"),
    (
        CHECK_FAILED,
        "`check`: a claim of done now would be rejected",
    ),
    (CLIENT_NOT_FOUND, "client not found"),
    (signalled(1), "SIGHUP"),
    (signalled(2), "Ctrl-C (SIGINT)"),
    (signalled(15), "SIGTERM"),
];

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_meaning_in_order() {
        let codes: Vec<i32> = MEANINGS.iter().map(|(code, _)| *code).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
        for code in [OK, REFUSED, WAITING, CLIENT_NOT_FOUND, 129, 130, 143] {
            assert!(codes.contains(&code), "{code}");
        }
        assert!(
            MEANINGS
                .iter()
                .filter(|(code, _)| *code > 128)
                .all(|(code, _)| signal_of(*code).is_some())
        );
    }
}
