//! Notifications: the config's `notify` command, run once when a loop ends,
//! pauses or waits for the person's answer, with a summary of it as JSON on its stdin (a desktop
//! notification, a webhook with curl). It is started and not waited for,
//! with its output going nowhere, so that neither the hook nor the driver
//! waits on it; it runs in the project's folder, like the verify commands.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::judge::state::{LoopState, Status};
use crate::observe::process::group::{GroupChild, Lifetime, shell};
use crate::persist::log::{self, LogEntry, LogEvent};
use crate::persist::store::StateLock;
use crate::text::printable;
use crate::time::Timestamp;

/// What the ending or pause of `state` is known by: a loop notified for
/// it is not notified again. `None` while it runs.
pub fn key(state: &LoopState) -> Option<String> {
    match state.status {
        Status::Running => None,
        Status::Paused => Some(format!(
            "paused@{}",
            state
                .paused_because
                .as_ref()
                .map_or(String::new(), |p| p.at.to_string())
        )),
        Status::Waiting => Some(format!(
            "waiting@{}",
            state
                .question
                .as_ref()
                .map_or(String::new(), |q| q.at.to_string())
        )),
        status => Some(format!(
            "{}@{}",
            status.as_str(),
            state.ended_at.map(|t| t.to_string()).unwrap_or_default()
        )),
    }
}

/// The JSON the command reads on its stdin. Its texts for people (`reason`,
/// `question`, `line`) may quote the agent; they are [`printable`], so that
/// a command showing them as they are (`jq -r .line`) shows no control
/// character to a terminal either.
pub fn summary(root: &Path, state: &LoopState, now: Timestamp) -> Value {
    let until = state.ended_at.unwrap_or(now);
    let duration = Some(until.secs().saturating_sub(state.started_at.secs()));
    let shown = |text: &str| printable(text).into_owned();
    let reason = match state.status {
        Status::Paused => state.paused_because.as_ref().map(|p| shown(&p.message)),
        Status::Waiting => state.question.as_ref().map(|q| shown(&q.text)),
        _ => state.ended_because.as_deref().map(shown),
    };
    let event = match state.status {
        Status::Paused => "paused",
        Status::Waiting => "asked",
        _ => "ended",
    };
    json!({
        "event": event,
        "question": state.question.as_ref().map(|q| shown(&q.text)),
        "status": state.status.as_str(),
        "reason": reason,
        "iterations": state.iteration,
        "maxIterations": state.max_iterations,
        "costUsd": state.cost_usd.dollars(),
        "durationSeconds": duration,
        "project": root.display().to_string(),
        "sessionId": state.session_id,
        "line": shown(&crate::judge::lifecycle::outcome_line(state)),
    })
}

/// The key of the loop's ending or pause when it has not been told yet
/// (`None` while it runs, and once told).
pub fn due(state: &LoopState) -> Option<String> {
    // An item's loop: the queue run it is part of tells the person.
    if state.queue_item.is_some() {
        return None;
    }
    let key = key(state)?;
    (state.notified.as_deref() != Some(key.as_str())).then_some(key)
}

/// The command to run for the loop's ending or pause when it is due (see
/// [`due`]), marking it told (`notified`) so that the caller's one write
/// records it: told once, however often the state is read. `None` when
/// nothing is due or `command` is unset or blank.
pub fn take_due(state: &mut LoopState, command: Option<&str>) -> Option<String> {
    let command = command.filter(|c| !c.trim().is_empty())?;
    state.notified = Some(due(state)?);
    Some(command.to_string())
}

/// Starts `command` for the loop's ending or pause, already marked told
/// in the state, and logs it; a warning when it could not start.
pub fn send(
    lock: &StateLock<'_>,
    root: &Path,
    command: &str,
    state: &LoopState,
    now: Timestamp,
) -> Option<String> {
    let started = start(command, root, summary(root, state, now).to_string());
    let said = match &started {
        Ok(()) => format!("ran the notify command for {}", state.status.as_str()),
        Err(e) => format!("the notify command could not start: {e}"),
    };
    let _ = log::append(lock, &LogEntry::about(state, LogEvent::Notify, now, said));
    started
        .err()
        .map(|e| format!("warning: the notify command could not start: {e}"))
}

/// Starts `command` in the platform's shell with `body` on its stdin.
fn start(command: &str, root: &Path, body: String) -> std::io::Result<()> {
    let mut shell = shell(command);
    // Not one of the client's processes, which are ended with it: the
    // person's notification outlives the client that the hook ran under.
    shell
        .env_remove(crate::observe::process::RUN_TAG_ENV)
        .current_dir(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // A group of its own that outlives this process: the launcher's exit,
    // or a Ctrl-C or a signal to the launcher's group just after the ending,
    // must not cut the person's notification short.
    let mut child = GroupChild::spawn(&mut shell, Lifetime::Independent)?;
    if let Some(mut stdin) = child.child().stdin.take() {
        // Written whole before this process may exit (the body is far
        // smaller than a pipe's buffer); a command that does not read its
        // stdin just ends the write.
        let _ = stdin.write_all(body.as_bytes());
    }
    // Not waited for; reaped by the system once this process is gone.
    child.detach();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::ProjectPaths;
    use crate::persist::store::StateStore;
    use std::time::{Duration, Instant};

    #[test]
    fn the_command_runs_once_per_ending_with_the_summary() {
        let dir = tempfile::TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let store = StateStore::new(&paths);
        let lock = store.lock(true).unwrap();
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(1767225600));
        let out = dir.path().join("got.json");
        let command = format!("cat >> '{}'", out.display());
        // What a transaction does: mark, write once, then start it.
        let tell = |state: &mut LoopState| {
            if let Some(command) = take_due(state, Some(&command)) {
                lock.write(state).unwrap();
                send(&lock, dir.path(), &command, state, Timestamp::from_secs(0));
            }
        };
        tell(&mut state);
        assert!(state.notified.is_none(), "a running loop is not notified");
        state.iteration = 3;
        state.end(
            Status::Complete,
            "done".into(),
            Timestamp::parse("2026-01-01T00:10:00Z").unwrap(),
        );
        lock.write(&state).unwrap();
        tell(&mut state);
        tell(&mut state);
        let deadline = Instant::now() + Duration::from_secs(10);
        let text = loop {
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            if text.ends_with('}') || Instant::now() > deadline {
                break text;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        std::thread::sleep(Duration::from_millis(100));
        let text = std::fs::read_to_string(&out).unwrap_or(text);
        let got: Value = serde_json::from_str(&text).expect("one JSON object, once");
        assert_eq!(got["status"], "complete");
        assert_eq!(got["event"], "ended");
        assert_eq!(got["iterations"], 3);
        assert_eq!(got["durationSeconds"], 600);
        assert_eq!(got["reason"], "done");
        assert_eq!(lock.read().unwrap().unwrap().notified, state.notified);
    }

    #[test]
    fn the_summary_shows_the_agents_control_characters_never_raw() {
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(1767225600));
        state.end(
            Status::Blocked,
            "\u{1b}[2Kloop complete\u{1b}[8m hidden \u{1b}]52;c;ZXZpbA==\u{7}\u{9b}31m".into(),
            Timestamp::from_secs(1767225660),
        );
        let summary = summary(Path::new("/p"), &state, Timestamp::from_secs(1767225700));
        for field in ["reason", "line"] {
            let text = summary[field].as_str().unwrap();
            assert!(!text.chars().any(char::is_control), "{field}: {text:?}");
            assert!(
                text.contains(
                    "\\x1b[2Kloop complete\\x1b[8m hidden \\x1b]52;c;ZXZpbA==\\x07\\x9b31m"
                ),
                "{field}: {text}"
            );
        }
    }
}
