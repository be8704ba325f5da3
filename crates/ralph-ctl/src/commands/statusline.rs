//! `ralph-ctl statusline`: the status line command ralph gives an
//! interactive loop's client when `pauseAtUtilization` is set. The 2.1
//! terminal UI hands its status line command the plan's usage windows
//! (`rate_limits.five_hour.used_percentage`, `resets_at`), which it writes
//! nowhere else ralph reads: they are recorded in the loop's state, for the
//! hook's next stop. What it prints is the person's own status line (their
//! `statusLine` command, run with the same input), else one short line.
//! The agent's shell is denied it (`Bash(ralph-ctl statusline:*)`), as it
//! is the loop's other commands: what it records decides a pause.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use ralph_core::events::Event;
use ralph_core::judge::state::{LoopState, Status, WindowUse};
use ralph_core::observe::usage::plausible_reset;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::process::group::{self, Collected, GroupChild, Lifetime};
use ralph_core::time::Timestamp;
use ralph_core::transaction::{self, Whose};
use ralph_core::units::PerMille;
use serde_json::Value;

use crate::error::{CmdResult, CtlError};
use crate::settings::STATUSLINE_SUBCOMMAND as SUBCOMMAND;

/// The most of the client's input read.
const MAX_INPUT: u64 = 1024 * 1024;

/// How long the person's own status line command may take.
const THEIRS_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads the client's status line input on `input`, records the usage
/// windows in it for the loop of its session, and prints the person's
/// status line (or ralph's) on `out`. Never fails the client's line: a
/// problem is printed as the line.
pub(crate) fn run(paths: &ProjectPaths, input: &mut dyn Read, out: &mut dyn Write) -> CmdResult {
    let mut bytes = Vec::new();
    let _ = input.take(MAX_INPUT).read_to_end(&mut bytes);
    let given: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let windows = windows_of(&given, Timestamp::now());
    let state = record(paths, given["session_id"].as_str(), windows);
    let line = match theirs(paths) {
        Some(command) => run_theirs(&command, &bytes, &paths.root),
        None => state.as_ref().map(ours).unwrap_or_default(),
    };
    let _ = writeln!(out, "{}", line.trim_end());
    Ok(ralph_core::exit_codes::OK)
}

/// The windows in the status line input: `rate_limits.<window>` with a
/// `used_percentage` from 0 to 100 and a `resets_at` in seconds (kept
/// when it is a [`plausible_reset`]).
fn windows_of(given: &Value, now: Timestamp) -> BTreeMap<String, WindowUse> {
    let Some(limits) = given["rate_limits"].as_object() else {
        return BTreeMap::new();
    };
    limits
        .iter()
        .filter_map(|(name, window)| {
            let used = window["used_percentage"].as_f64()?;
            let utilization = PerMille::of(used / 100.0)?;
            let resets_at = window["resets_at"]
                .as_f64()
                .and_then(|t| plausible_reset(t, now.secs()))
                .map(Timestamp::from_secs);
            Some((
                name.clone(),
                WindowUse {
                    utilization,
                    resets_at,
                    seen_at: now,
                },
            ))
        })
        .collect()
}

/// Records `windows` in the running loop of `session` when they differ
/// from what it has; the loop as it stands after.
fn record(
    paths: &ProjectPaths,
    session: Option<&str>,
    windows: BTreeMap<String, WindowUse>,
) -> Option<LoopState> {
    let state = StateStore::new(paths).read().ok().flatten()?;
    let session = session.filter(|s| *s == state.session_id)?;
    let new = windows.iter().any(|(name, w)| {
        state
            .usage_windows
            .get(name)
            .is_none_or(|seen| (seen.utilization, seen.resets_at) != (w.utilization, w.resets_at))
    });
    if !new || state.status != Status::Running {
        return Some(state);
    }
    let changed = transaction::change(paths, Whose::Session(session), |draft| {
        draft.apply(Event::UsageWindowsSeen(windows));
        Ok::<_, CtlError>(())
    });
    match changed {
        Ok(changed) => match changed.found {
            transaction::Found::Loop(state) => Some(*state),
            _ => None,
        },
        Err(_) => Some(state),
    }
}

/// The person's own `statusLine` command: the first found in the
/// project's local settings, the project's, then their own; none when it
/// is ralph's.
fn theirs(paths: &ProjectPaths) -> Option<String> {
    let user = std::env::var_os("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|h| h.join(".claude")))
        .map(|d| d.join("settings.json"));
    [
        Some(paths.local_settings_file()),
        Some(paths.settings_file()),
        user,
    ]
    .into_iter()
    .flatten()
    .find_map(|file| {
        let ralph_core::files::Bounded::Bytes(text) =
            ralph_core::files::read_bounded(&file, MAX_INPUT).ok()?
        else {
            return None;
        };
        let settings: Value = serde_json::from_slice(&text).ok()?;
        settings["statusLine"]["command"]
            .as_str()
            .map(str::to_string)
    })
    .filter(|command| !command.contains(SUBCOMMAND) || !command.contains("ralph-ctl"))
}

/// Runs the person's status line command on the same input; what it
/// printed, or why there is nothing.
fn run_theirs(command: &str, input: &[u8], root: &std::path::Path) -> String {
    let mut shell = group::shell(command);
    shell
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let Ok(mut child) = GroupChild::spawn(&mut shell, Lifetime::DiesWithParent) else {
        return "ralph: your statusLine command could not start".into();
    };
    if let Some(mut stdin) = child.child().stdin.take() {
        let _ = stdin.write_all(input);
    }
    match child.collect_output(Instant::now() + THEIRS_TIMEOUT, Duration::from_millis(200)) {
        Collected::Exited {
            output: Some(bytes),
            ..
        } => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}

/// Ralph's own line: where the loop is and its fullest window.
fn ours(state: &LoopState) -> String {
    let window = state
        .fullest_window(Timestamp::now())
        .map(|(name, w)| format!(" · {name} {}", w.utilization.percent()))
        .unwrap_or_default();
    format!(
        "ralph: iteration {}/{} {}{window}",
        state.iteration,
        state.max_iterations,
        state.status.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_window_as_a_share_and_its_reset() {
        // As 2.1.330 gave it (a subscription's login, the mock's 5h headers).
        let given: Value = serde_json::from_str(
            r#"{"session_id":"s","rate_limits":{"five_hour":{"used_percentage":85,"resets_at":1795678984},
                "seven_day":{"used_percentage":12.5,"resets_at":1e300},"odd":{"used_percentage":"x"},"over":{"used_percentage":250}}}"#,
        )
        .unwrap();
        let now = Timestamp::from_secs(1_795_670_000);
        let windows = windows_of(&given, now);
        assert_eq!(windows.len(), 2, "{windows:?}");
        assert_eq!(windows["five_hour"].utilization, PerMille(850));
        assert_eq!(
            windows["five_hour"].resets_at,
            Some(Timestamp::from_secs(1_795_678_984))
        );
        assert_eq!(windows["seven_day"].utilization, PerMille(125));
        assert_eq!(windows["seven_day"].resets_at, None);
        assert!(windows_of(&Value::Null, now).is_empty());
    }
}
