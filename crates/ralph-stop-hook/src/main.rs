//! `ralph-stop-hook`: run by Claude Code at every stop of a session
//! (`Stop`), when an API error ends a turn (`StopFailure`) and, as the
//! plugin's hook, when a session ends (`SessionEnd`); the library handles
//! each. This file is the guard that decides, before stdin is read, whether
//! to do anything at all.

use std::ffi::OsStr;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `--help` and `--version` alone, for a person checking the install;
    // Claude Code passes no arguments, so nothing else changes.
    if let Some(code) = ralph_stop_hook::answer_flag(std::env::args_os().skip(1)) {
        return code;
    }
    // The guard comes before anything else, stdin included: a session that
    // is not a Ralph loop must never wait on, or be changed by, this hook.
    let active = std::env::var_os("RALPH_ACTIVE").as_deref() == Some(OsStr::new("1"));
    let go_on = if ralph_stop_hook::is_plugin_mode(std::env::args_os().skip(1)) {
        // The plugin's registration: sessions of the launcher are the
        // project's registration's, and a fresh iteration's are its
        // driver's to judge; others go on only when a loop exists here (a
        // stat), and then only the loop's own session is held.
        let driven = std::env::var_os("RALPH_DRIVEN").is_some_and(|v| !v.is_empty());
        !active
            && !driven
            && ralph_stop_hook::plugin_loop_exists(std::env::var_os("CLAUDE_PROJECT_DIR"))
    } else {
        active
    };
    if !go_on {
        return ExitCode::SUCCESS;
    }
    ralph_stop_hook::run()
}
