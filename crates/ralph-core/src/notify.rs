//! Notifications: the config's `notify` command, run once when a loop ends,
//! pauses or waits for the person's answer, with a summary of it as JSON on its stdin (a desktop
//! notification, a webhook with curl). It is started and not waited for,
//! with its output going nowhere, so that neither the hook nor the driver
//! waits on it; it runs in the project's folder, like the verify commands.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::judge::config::Config;
use crate::judge::state::{LoopState, Status};
use crate::persist::log::{self, LogEntry, LogEvent};
use crate::persist::store::StateLock;
use crate::process::group::{GroupChild, Lifetime, shell};
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
    summary_resuming(root, state, now, None)
}

/// When the paused loop `state` resumes by itself: a headless or fresh
/// `ralph-ctl run`, whose supervisor waits out the pause and takes the
/// loop up again as its policy plans (`None`: a person resumes it).
pub fn resumes_at(config: &Config, state: &LoopState, now: Timestamp) -> Option<Timestamp> {
    let supervised = state
        .run_mode
        .as_ref()
        .is_some_and(|mode| mode.headless || state.fresh_context);
    if state.status != Status::Paused || !supervised {
        return None;
    }
    match crate::judge::lifecycle::plan_resume(config, state, now.secs()) {
        crate::judge::lifecycle::ResumePlan::ResumeAt { at, .. } => Some(Timestamp::from_secs(at)),
        _ => None,
    }
}

/// [`summary`], for a paused loop that resumes by itself at `resumes_at`:
/// its `line` says so instead of how to resume it, and `resumesAt` when.
pub fn summary_resuming(
    root: &Path,
    state: &LoopState,
    now: Timestamp,
    resumes_at: Option<Timestamp>,
) -> Value {
    let resumes_at = resumes_at.filter(|_| state.status == Status::Paused);
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
        "resumesAt": resumes_at.map(|t| t.to_string()),
        "line": shown(&line(state, resumes_at)),
    })
}

/// The summary's one line: how the loop ended or where it stands, and
/// what comes next (for a loop that resumes by itself: when).
fn line(state: &LoopState, resumes_at: Option<Timestamp>) -> String {
    let line = crate::judge::lifecycle::outcome_line(state);
    let Some(at) = resumes_at else {
        return line;
    };
    let next = crate::judge::lifecycle::next_step(state)
        .map(|next| format!("; {next}"))
        .unwrap_or_default();
    let what = line.strip_suffix(&next).unwrap_or(&line);
    format!("{what}; it resumes by itself at {at} (the run's supervisor): nothing to do")
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
    resumes_at: Option<Timestamp>,
) -> Option<String> {
    // A line each: a command that appends them (`cat >> FILE`) keeps them apart.
    let body = format!("{}\n", summary_resuming(root, state, now, resumes_at));
    let started = start(command, root, body);
    let said = match &started {
        Ok(()) => format!("ran the notify command for {}", state.status.as_str()),
        Err(e) => format!("the notify command could not start: {e}"),
    };
    let _ = log::append(lock, &LogEntry::about(state, LogEvent::Notify, now, said));
    started
        .err()
        .map(|e| format!("warning: the notify command could not start: {e}"))
}

/// Starts `command` for a run that was refused at its start (`ralph-ctl
/// run` under nohup, in CI: nobody saw the refusal), with a summary of
/// the same shape: `"event": "refused"`, the refusal as `reason` and in
/// `line`.
pub fn send_refused(root: &Path, command: &str, reason: &str) -> std::io::Result<()> {
    let reason = printable(reason).into_owned();
    let body = json!({
        "event": "refused",
        "question": null,
        "status": "refused",
        "reason": reason,
        "iterations": 0,
        "maxIterations": null,
        "costUsd": 0.0,
        "durationSeconds": 0,
        "project": root.display().to_string(),
        "sessionId": null,
        "resumesAt": null,
        "line": format!("ralph-ctl run did not start: {reason}"),
    });
    start(command, root, format!("{body}\n"))
}

/// Starts `command` in the platform's shell with `body` on its stdin.
fn start(command: &str, root: &Path, body: String) -> std::io::Result<()> {
    let mut shell = shell(command);
    // Not one of the client's processes, which are ended with it: the
    // person's notification outlives the client that the hook ran under.
    shell
        .env_remove(crate::process::RUN_TAG_ENV)
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
                send(
                    &lock,
                    dir.path(),
                    &command,
                    state,
                    Timestamp::from_secs(0),
                    None,
                );
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
            if text.ends_with('\n') || Instant::now() > deadline {
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

    /// What `cat >> FILE` gathered once it holds `lines` lines (10 s at most).
    fn gathered(out: &Path, lines: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(out).unwrap_or_default();
            if text.lines().count() >= lines && text.ends_with('\n') || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn each_summary_is_one_line_so_that_appended_ones_stay_apart() {
        let dir = tempfile::TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let store = StateStore::new(&paths);
        let lock = store.lock(true).unwrap();
        let out = dir.path().join("got.jsonl");
        let command = format!("cat >> '{}'", out.display());
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(1767225600));
        state.end(
            Status::Failed,
            "one".into(),
            Timestamp::from_secs(1767225660),
        );
        send(
            &lock,
            dir.path(),
            &command,
            &state,
            Timestamp::from_secs(0),
            None,
        );
        gathered(&out, 1);
        state.end(
            Status::Complete,
            "two".into(),
            Timestamp::from_secs(1767225720),
        );
        send(
            &lock,
            dir.path(),
            &command,
            &state,
            Timestamp::from_secs(0),
            None,
        );
        let text = gathered(&out, 2);
        let reasons: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).expect("a JSON object a line")["reason"]
                    .to_string()
            })
            .collect();
        assert_eq!(reasons, ["\"one\"", "\"two\""], "{text:?}");
    }

    #[test]
    fn a_pause_the_supervisor_takes_up_itself_says_when_not_to_resume_it() {
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(1767225600));
        state.status = Status::Paused;
        state.paused_because = Some(crate::judge::state::PausedBecause {
            kind: crate::judge::state::PauseKind::RateLimit,
            http_status: Some(429),
            message: "Rate limited".into(),
            resume_at: None,
            retry_after_secs: None,
            resume_planned: None,
            at: Timestamp::from_secs(1767225660),
        });
        let at = Timestamp::from_secs(1767225720);
        let told = summary_resuming(
            Path::new("/p"),
            &state,
            Timestamp::from_secs(1767225660),
            Some(at),
        );
        let line = told["line"].as_str().unwrap();
        assert_eq!(
            line,
            "loop paused at iteration 1 of 5 (rate_limit: Rate limited); it resumes by itself at \
             2026-01-01T00:02:00Z (the run's supervisor): nothing to do"
        );
        assert_eq!(told["resumesAt"], "2026-01-01T00:02:00Z");
        // A pause nobody takes up: the person resumes it.
        let told = summary_resuming(
            Path::new("/p"),
            &state,
            Timestamp::from_secs(1767225660),
            None,
        );
        assert!(
            told["line"]
                .as_str()
                .unwrap()
                .ends_with("`ralph-ctl run --resume` goes on"),
            "{told}"
        );
        assert_eq!(told["resumesAt"], Value::Null);
        // Who takes it up: a headless `ralph-ctl run`'s supervisor, by its
        // policy; nobody for a loop in the person's terminal.
        let config = Config::default();
        let now = Timestamp::from_secs(1767225660);
        assert_eq!(resumes_at(&config, &state, now), None);
        state.run_mode = Some(crate::judge::state::RunMode {
            headless: true,
            ..Default::default()
        });
        let backoff = crate::judge::lifecycle::backoff_secs(&config, 0);
        assert_eq!(
            resumes_at(&config, &state, now),
            Some(Timestamp::from_secs(1767225660 + backoff))
        );
        let mut manual = Config::default();
        manual.supervision.policy = crate::judge::config::ResumePolicy::Manual;
        assert_eq!(resumes_at(&manual, &state, now), None);
    }
}
