//! Running a loop: starting it ([`start`], also `ralph-ctl start`, `reset`
//! and the plugin's `loop-start`), preparing a run ([`prepare`]: its
//! options, inputs and the client's settings), driving it ([`launch`]:
//! `ralph-ctl run`, one iteration at a time; [`answer_wait`]: the wait for the
//! person's answer), and recording its end ([`finish`]). The pieces:
//! building the
//! client's command line ([`command`], pure), the signals that end a loop
//! early ([`os_signals`]), the running client with the loop that watches
//! it ([`client`]), its result object ([`result`]), what happens between
//! two runs of it: pauses, waits and resumes ([`supervisor`]), and the
//! fresh-context loop's judging and hand-over between processes ([`fresh`])
//! and its live output ([`live`]), and the worktrees of `--worktree`
//! ([`worktree`]; a new one's setup and test baseline, [`worktree_env`]), a formula's steps ([`steps`]), and the client's sandbox and the
//! permission rules every run carries ([`sandbox`]), and the watchdog that
//! ends a client whose driver died ([`watchdog`]), and whether the client
//! was set up in this home at all ([`first_run`]), and `.git` tidied after
//! a loop's agent ([`git_tidy`]). A queue run lives in `crate::queue`
//! (its sources, workers, claims and landings); what it shares with a
//! single loop stays here: the text an item's loop starts with
//! ([`item_text`]), and the repository's `.git/config.lock` a queue run
//! holds for its sandboxed workers ([`config_hold`]).

pub(crate) mod answer_wait;
pub(crate) mod carriers;
pub(crate) mod client;
pub(crate) mod command;
pub(crate) mod config_hold;
pub(crate) mod finish;
pub(crate) mod first_run;
pub(crate) mod fresh;
pub(crate) mod git_tidy;
pub(crate) mod item_text;
pub(crate) mod launch;
pub(crate) mod live;
pub(crate) mod os_signals;
pub(crate) mod prepare;
pub(crate) mod result;
pub(crate) mod run_env;
pub(crate) mod sandbox;
pub(crate) mod sandbox_mounts;
pub(crate) mod start;
pub(crate) mod steps;
pub(crate) mod supervisor;
pub(crate) mod transcripts;
pub(crate) mod watchdog;
pub(crate) mod worktree;
pub(crate) mod worktree_env;
pub(crate) mod worktree_made;

/// What a change of the loop found, its warnings said on stderr.
pub(crate) fn told(changed: ralph_core::transaction::Changed) -> ralph_core::transaction::Found {
    for note in &changed.notes {
        crate::output::say_err!("ralph-ctl: {note}");
    }
    changed.found
}

thread_local! {
    /// What goes in front of every line this thread shows: a queue item's
    /// title (`[fix the parser] `) while several workers write at once.
    static LINE_PREFIX: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// Puts `prefix` in front of every line this thread shows from now on
/// ([`say`], and the client's readable lines it starts), empty for none.
pub(crate) fn set_line_prefix(prefix: String) {
    LINE_PREFIX.with(|p| *p.borrow_mut() = prefix);
}

/// This thread's [`set_line_prefix`].
pub(crate) fn line_prefix() -> String {
    LINE_PREFIX.with(|p| p.borrow().clone())
}

/// One line of a run on stderr, after "ralph: " (and the thread's line
/// prefix), its control characters made visible (it may carry the agent's
/// text); a terminal that is gone (EIO, EPIPE) is ignored.
pub(crate) fn say(line: &str) {
    let prefix = line_prefix();
    crate::output::say_err!("ralph: {prefix}{line}");
}
