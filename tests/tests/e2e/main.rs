//! End-to-end tests: the real Claude Code client (both pinned versions),
//! driven by ralph against a scripted mock of the Messages API on
//! 127.0.0.1, one module per area.
//!
//! Compiled only with the `e2e` feature (tests/run.sh turns it on). A test's
//! name starts with its module (a scenario's are
//! `module::scenario::v2_1_330` and `…::v2_0_77`, the second ignored unless
//! the scenario is on 2.0.77's list: tests/macros): run one area alone with
//! e.g. `tests/run.sh -p ralph-tests --test e2e queue::`, one scenario on
//! one client with
//! `tests/run.sh -p ralph-tests --test e2e session::completes_on_signal::v2_1_330`.

mod background;
mod backlogs;
mod caches;
mod cheats;
mod client_walls;
mod counts;
mod first_hour;
mod formula;
mod fresh;
mod integrity;
mod interactive;
mod own_git;
mod pacing;
mod permissions;
mod pinning;
mod plugin;
mod queue;
mod real_projects;
mod remote_queue;
mod report;
mod sandbox;
mod serve;
mod session;
mod start_check;
mod supervisor;
mod walls;
mod walls_parity;
mod worktree_env;

/// One client's terminal UI at a time in this binary: a terminal UI under
/// load writes its transcript late (2.0.77 then shows its final message to
/// the hook only after the hook's wait), so the tests that start one
/// (interactive's, and one each in `first_hour` and plugin) do not compete
/// with each other.
fn one_terminal_ui_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
