//! The audit trail (`.claude/context/runtime/ralph-log.jsonl`): one JSON
//! line per thing that happened to a loop (a start, each stop's decision, a
//! pause, a wait, a resume, an end), with the time, the iteration, the
//! reason, the checks that passed or failed and the policy applied.
//!
//! Written only while the state lock is held ([`append`] takes the lock as
//! proof), each line with one `write` to a file opened for appending, so
//! two writers never interleave; a line cut by a crash is skipped when
//! read. Past [`MAX_LOG_BYTES`] the file is rotated to `ralph-log.1.jsonl`
//! (the one before is dropped). A reset keeps it: it is the record of what
//! was done.
//!
//! Each line ends with its MAC under the person's key
//! ([`crate::persist::mac`]): `{..., "mac": "<hex>"}`, over the line
//! without it. A line without one, or whose MAC does not verify, is not
//! ralph's: readers skip it and say how many they skipped
//! ([`read_last_counted`]), and nothing believes it.
//!
//! Each line is numbered too (`"sequence": N`, last before the MAC and
//! covered by it; [`crate::persist::sequence`]): a log whose last line is
//! numbered below the last line ralph appended to it is stale
//! ([`Reading::stale`]), an earlier copy put back, and nothing in it is
//! believed as the loop's record (a completion, the hook's problem).

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::judge::state::{LoopState, Status, StopDecision};

use crate::files::{Bounded, read_bounded};
use crate::persist::mac::{self, Key, Purpose};
use crate::persist::sequence;
use crate::persist::store::{Numbered, StateLock};
use crate::units::Usd;

/// The log's file name, beside the state file.
pub const LOG_FILE_NAME: &str = "ralph-log.jsonl";
/// The rotated log's file name.
pub const ROTATED_LOG_FILE_NAME: &str = "ralph-log.1.jsonl";
/// The size past which the log is rotated.
pub const MAX_LOG_BYTES: u64 = 4 * 1024 * 1024;

/// What happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogEvent {
    /// A loop started.
    Start,
    /// The hook decided a stop.
    Stop,
    /// The loop paused (an API error, the calls-per-hour budget).
    Pause,
    /// The supervisor waits before resuming.
    Wait,
    /// The loop was taken up again.
    Resume,
    /// The loop ended.
    End,
    /// The hook could not judge a stop of the loop and let the session
    /// stop: why, for the launcher's last line and `status`.
    Problem,
    /// The person left a note for the next iteration (`ralph-ctl say`).
    Say,
    /// The person was notified of an ending or a pause (`notify`).
    Notify,
    /// The person answered the agent's question (`ralph-ctl answer`).
    Answer,
    /// A pinned file (config.json, the formula) was found changed since
    /// the loop started: logged once per new content, not obeyed.
    ConfigChanged,
    /// `ralph-ctl reload` adopted the config files (and formula) as they are.
    Reload,
    /// A queue run's item was taken or settled.
    Item,
    /// ralph tidied the repository's `.git` after the agent: a file that
    /// sent git elsewhere put back, a lock file no process held removed.
    Git,
}

impl LogEvent {
    /// The name shown by `ralph-ctl log`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogEvent::Start => "start",
            LogEvent::Stop => "stop",
            LogEvent::Pause => "pause",
            LogEvent::Wait => "wait",
            LogEvent::Resume => "resume",
            LogEvent::End => "end",
            LogEvent::Problem => "problem",
            LogEvent::Say => "say",
            LogEvent::Notify => "notify",
            LogEvent::Answer => "answer",
            LogEvent::ConfigChanged => "config_changed",
            LogEvent::Reload => "reload",
            LogEvent::Item => "item",
            LogEvent::Git => "git",
        }
    }
}

/// One check behind a decision: a completion gate, the breaker, a budget.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// What was checked (`verification`, `plan`, `breaker`, `calls_per_hour`, …).
    pub name: String,
    /// True when it let the loop on.
    pub passed: bool,
    /// What was found.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// One line of the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    /// When (RFC 3339).
    pub at: crate::time::Timestamp,
    /// What happened.
    pub event: LogEvent,
    /// The loop's session.
    pub session_id: String,
    /// The loop's iteration at that moment.
    pub iteration: u32,
    /// The loop's status afterwards.
    pub status: Status,
    /// For a stop: blocked or let through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<StopDecision>,
    /// Why, in words.
    pub reason: String,
    /// The checks behind it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
    /// The resume policy applied (supervisor events).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Not before this time (pauses and waits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<crate::time::Timestamp>,
    /// The loop's cost so far.
    #[serde(default, skip_serializing_if = "is_zero_usd")]
    pub cost_usd: Usd,
}

// serde's `skip_serializing_if` passes the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_usd(usd: &Usd) -> bool {
    usd.0 == 0
}

impl LogEntry {
    /// An entry about `state` as it is now.
    pub fn about(
        state: &LoopState,
        event: LogEvent,
        at: crate::time::Timestamp,
        reason: impl Into<String>,
    ) -> Self {
        LogEntry {
            at,
            event,
            session_id: state.session_id.clone(),
            iteration: state.iteration,
            status: state.status,
            decision: None,
            reason: reason.into(),
            checks: Vec::new(),
            policy: None,
            resume_at: state.paused_because.as_ref().and_then(|p| p.resume_at),
            cost_usd: state.cost_usd,
        }
    }

    /// The entry for the stop that turned `before` into `after`: its
    /// history record's decision and reason, the claim's gates, the breaker.
    pub fn of_stop(before: &LoopState, after: &LoopState, at: crate::time::Timestamp) -> Self {
        let record = after.history.last();
        let event = match after.status {
            Status::Running => LogEvent::Stop,
            Status::Paused => LogEvent::Pause,
            _ => LogEvent::End,
        };
        let mut entry = LogEntry::about(
            after,
            event,
            at,
            record.map(|r| r.why.clone()).unwrap_or_default(),
        );
        entry.iteration = record.map_or(before.iteration, |r| r.iteration);
        entry.decision = record.map(|r| r.decision);
        if let Some(claim) = after
            .last_claim
            .as_ref()
            .filter(|c| c.at == at && before.last_claim.as_ref() != Some(c))
        {
            entry.checks.extend(claim.gates.iter().map(|g| Check {
                name: g.gate.as_str().to_string(),
                passed: g.passed,
                detail: crate::judge::completion::detail_on_one_line(&g.detail),
            }));
        }
        if let Some(transition) = record.and_then(|r| r.breaker.as_ref()) {
            entry.checks.push(Check {
                name: "breaker".into(),
                passed: transition.to != crate::judge::breaker::BreakerState::Open,
                detail: format!(
                    "{} → {}: {}",
                    transition.from.as_str(),
                    transition.to.as_str(),
                    transition.reason
                ),
            });
        }
        entry
    }
}

/// The log beside the state file.
pub fn log_path(state_file: &Path) -> PathBuf {
    state_file.with_file_name(LOG_FILE_NAME)
}

/// Appends `entry` (the lock proves no other writer is at it).
pub fn append(lock: &StateLock<'_>, entry: &LogEntry) -> io::Result<()> {
    let path = log_path(lock.path());
    if fs::symlink_metadata(&path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        fs::rename(&path, path.with_file_name(ROTATED_LOG_FILE_NAME))?;
    }
    let key = mac::current(true).map_err(io::Error::other)?;
    let number = lock.next_number().map_err(io::Error::other)?;
    let mut line = signed_line(entry, &path, &key, Some(number))?;
    line.push(b'\n');
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut file = options.open(&path)?;
    file.write_all(&line)?;
    lock.numbered(Numbered::LogLine, number);
    Ok(())
}

/// What a line of the log ends with, up to its MAC.
const MAC_OPEN: &[u8] = b",\"mac\":\"";
/// What closes a line after its MAC.
const MAC_CLOSE: &[u8] = b"\"}";
/// What a numbered line's number follows, last in the JSON the MAC covers.
const SEQUENCE_OPEN: &[u8] = b",\"sequence\":";

/// `entry` as a line of the log at `log` (without its newline), numbered
/// `sequence` (when given: `"sequence": N` added) and signed with `key`:
/// its JSON with `"mac": "<hex>"` added last, the MAC over the numbered
/// JSON without it. What a test that must make log lines of its own writes.
pub fn signed_line(
    entry: &LogEntry,
    log: &Path,
    key: &Key,
    sequence: Option<u64>,
) -> io::Result<Vec<u8>> {
    let mut json = serde_json::to_vec(entry).map_err(io::Error::other)?;
    if let Some(n) = sequence {
        json.pop(); // the closing brace
        json.extend_from_slice(SEQUENCE_OPEN);
        json.extend_from_slice(n.to_string().as_bytes());
        json.push(b'}');
    }
    let tag = key.tag(Purpose::LogLine, folder_of(log), &json);
    let mut line = json;
    line.pop(); // the closing brace
    line.extend_from_slice(MAC_OPEN);
    line.extend_from_slice(tag.as_bytes());
    line.extend_from_slice(MAC_CLOSE);
    Ok(line)
}

fn folder_of(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// A line of the log whose MAC verified: its entry and its number.
type NumberedEntry = (LogEntry, Option<u64>);

/// The entry on `line` of the log at `log`, and its number, when its MAC
/// verifies under `key`.
fn verified(line: &[u8], log: &Path, key: Option<&Key>) -> Option<NumberedEntry> {
    let body = line.strip_suffix(MAC_CLOSE)?;
    let tag_at = body.len().checked_sub(mac::TAG_CHARS)?;
    let (body, tag) = body.split_at(tag_at);
    let body = body.strip_suffix(MAC_OPEN)?;
    let mut json = Vec::with_capacity(body.len() + 1);
    json.extend_from_slice(body);
    json.push(b'}');
    if !key?.verifies(Purpose::LogLine, folder_of(log), &json, tag) {
        return None;
    }
    let entry = serde_json::from_slice(&json).ok()?;
    Some((entry, line_number(body)))
}

/// The number a line's JSON (`body`, without its closing brace) ends
/// with; `None` for a line written before ralph numbered them.
fn line_number(body: &[u8]) -> Option<u64> {
    let digits = body.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let (rest, number) = body.split_at(body.len() - digits);
    rest.strip_suffix(SEQUENCE_OPEN)?;
    std::str::from_utf8(number).ok()?.parse().ok()
}

/// What [`read_recent`] found in the log.
#[derive(Debug, Default)]
pub struct Reading {
    /// The last entries ralph wrote, oldest first.
    pub entries: Vec<LogEntry>,
    /// Lines of the files read that ralph cannot vouch for (no MAC, or one
    /// that does not verify: not written by ralph on this machine, or cut
    /// by a crash), for the person to be told.
    pub skipped: usize,
    /// Set when the log is stale: an earlier copy put back.
    pub stale: Option<StaleLog>,
}

/// A log whose last line is older than the last line ralph appended to
/// it: an earlier copy of the log put back. Nothing in it is believed as
/// the loop's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleLog {
    /// The log file.
    pub path: PathBuf,
    /// The number of its last line (`None`: written before ralph numbered
    /// its lines).
    pub last: Option<u64>,
    /// The number of the last line ralph appended.
    pub kept: u64,
}

impl std::fmt::Display for StaleLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let number = match self.last {
            Some(n) => format!("its last line is number {n}"),
            None => {
                "its last line carries no number (it was written before ralph numbered them)".into()
            }
        };
        write!(
            f,
            "the audit log {} is stale: {number}, and ralph has since appended line {} to it, \
             so it is an earlier copy put back; nothing in it is believed as the loop's record, \
             not even a completion. Start over with `ralph-ctl reset`",
            self.path.display(),
            self.kept
        )
    }
}

/// The last `n` entries ralph wrote (the rotated file too, when the
/// current one holds fewer), oldest first: a line cut by a crash, or one
/// whose MAC does not verify, is skipped.
pub fn read_last(state_file: &Path, n: usize) -> io::Result<Vec<LogEntry>> {
    read_last_counted(state_file, n).map(|(entries, _)| entries)
}

/// [`read_last`], with how many lines of the files it read were skipped
/// because ralph cannot vouch for them (no MAC, or one that does not
/// verify: not written by ralph on this machine, or cut by a crash), for
/// the person to be told.
pub fn read_last_counted(state_file: &Path, n: usize) -> io::Result<(Vec<LogEntry>, usize)> {
    read_recent(state_file, n).map(|r| (r.entries, r.skipped))
}

/// The last `n` entries ralph wrote, as [`read_last_counted`] reads them,
/// and whether the log is stale: its last line ralph's (the current file's,
/// else the rotated one's) numbered below the last line ralph appended.
pub fn read_recent(state_file: &Path, n: usize) -> io::Result<Reading> {
    let path = log_path(state_file);
    // The kept numbers first: a line appended in between leaves the log
    // read ahead of them, never behind.
    let kept = sequence::kept_for(folder_of(&path)).map_err(io::Error::other)?;
    let (mut lines, mut skipped) = read_file(&path)?;
    if lines.len() < n.max(1) {
        let (mut older, skipped_older) = read_file(&path.with_file_name(ROTATED_LOG_FILE_NAME))?;
        older.append(&mut lines);
        lines = older;
        skipped += skipped_older;
    }
    let stale = match (kept.filter(|k| k.log > 0), lines.last()) {
        (Some(kept), Some((_, last))) if last.is_none_or(|n| n < kept.log) => Some(StaleLog {
            path: path.clone(),
            last: *last,
            kept: kept.log,
        }),
        _ => None,
    };
    let skip = lines.len().saturating_sub(n);
    let entries = lines.split_off(skip).into_iter().map(|(e, _)| e).collect();
    Ok(Reading {
        entries,
        skipped,
        stale,
    })
}

/// Whether the log beside `state_file` is stale ([`read_recent`]); `None`
/// too when it cannot be read.
pub fn stale(state_file: &Path) -> Option<StaleLog> {
    read_recent(state_file, 1).ok()?.stale
}

/// The hook's problem at the last stop of `session_id`'s loop: the log's
/// last entry when it is a [`LogEvent::Problem`] of that session (nothing
/// judged since). For the launcher's closing line and `status`. Never
/// from a stale log.
pub fn last_problem(state_file: &Path, session_id: &str) -> Option<LogEntry> {
    let reading = read_recent(state_file, 1).ok()?;
    if reading.stale.is_some() {
        return None;
    }
    reading
        .entries
        .into_iter()
        .next_back()
        .filter(|e| e.event == LogEvent::Problem && e.session_id == session_id)
}

/// Whether the audit log holds ralph's own record of the stop that
/// completed `state`'s loop: an `end` of its session at its iteration with
/// the status `complete`, which only the engine writes, under the lock, when
/// it accepts a claim. A `complete` state without one was written by
/// something else (an agent's command editing the state and its claim); a
/// stale log ([`read_recent`]) holds none.
pub fn completion_logged(state_file: &Path, state: &LoopState) -> bool {
    let Ok(reading) = read_recent(state_file, COMPLETION_LOOKBACK) else {
        return false;
    };
    reading.stale.is_none()
        && reading.entries.iter().rev().any(|e| {
            e.event == LogEvent::End
                && e.status == Status::Complete
                && e.session_id == state.session_id
                && e.iteration == state.iteration
        })
}

/// How many of the log's last entries [`completion_logged`] looks through:
/// a loop's end is among its last few (a notification, a note after it).
const COMPLETION_LOOKBACK: usize = 64;

/// The verified entries of the log file at `path` with their numbers, and
/// how many lines were skipped.
fn read_file(path: &Path) -> io::Result<(Vec<NumberedEntry>, usize)> {
    let bytes = match read_bounded(path, 2 * MAX_LOG_BYTES)? {
        Bounded::Missing => return Ok((Vec::new(), 0)),
        Bounded::TooLarge => {
            return Err(io::Error::other(format!(
                "{} is larger than {} MiB",
                path.display(),
                2 * MAX_LOG_BYTES / 1024 / 1024
            )));
        }
        Bounded::Bytes(bytes) => bytes,
    };
    let key = mac::current(false).ok();
    let mut skipped = 0;
    let entries = bytes
        .split(|&b| b == b'\n')
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .filter_map(|line| {
            let entry = verified(line, path, key.as_ref());
            skipped += usize::from(entry.is_none());
            entry
        })
        .collect();
    Ok((entries, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::ProjectPaths;
    use crate::persist::store::StateStore;
    #[allow(unused_imports)]
    use crate::time::Timestamp;
    use tempfile::TempDir;

    #[test]
    fn appends_reads_back_and_rotates() {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let store = StateStore::new(&paths);
        let lock = store.lock(true).unwrap();
        let state = LoopState::new("s-1".into(), 5, Timestamp::from_secs(0));
        for i in 0..3 {
            let entry = LogEntry::about(&state, LogEvent::Wait, Timestamp::from_secs(i), "waiting");
            append(&lock, &entry).unwrap();
        }
        // A line cut by a crash is skipped.
        let log = log_path(&paths.state_file());
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"at\":\"t9\",\"ev").unwrap();
        drop(file);
        let last = read_last(&paths.state_file(), 2).unwrap();
        assert_eq!(last.iter().map(|e| e.at.secs()).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(last[0].event, LogEvent::Wait);

        // Past the size bound the log moves aside and a new one starts;
        // reading spans both.
        fs::write(
            &log,
            vec![b'\n'; usize::try_from(MAX_LOG_BYTES).unwrap() + 1],
        )
        .unwrap();
        append(
            &lock,
            &LogEntry::about(&state, LogEvent::End, Timestamp::from_secs(10), "done"),
        )
        .unwrap();
        assert!(fs::metadata(&log).unwrap().len() < 1024);
        let all = read_last(&paths.state_file(), 10).unwrap();
        assert_eq!(all.last().unwrap().at, Timestamp::from_secs(10));
    }

    #[test]
    fn lines_ralph_did_not_sign_are_skipped_and_counted() {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let store = StateStore::new(&paths);
        let lock = store.lock(true).unwrap();
        let mut state = LoopState::new("s-1".into(), 5, Timestamp::from_secs(0));
        append(
            &lock,
            &LogEntry::about(&state, LogEvent::Start, Timestamp::from_secs(1), "started"),
        )
        .unwrap();
        // What an agent's command appends: ralph's shape, no MAC; then one
        // with the MAC of another key; then a signed line edited.
        state.status = Status::Complete;
        let forged = LogEntry::about(&state, LogEvent::End, Timestamp::from_secs(2), "done");
        let log = log_path(&paths.state_file());
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        let mut lines = serde_json::to_vec(&forged).unwrap();
        lines.push(b'\n');
        lines.extend(
            signed_line(
                &forged,
                &log,
                &crate::persist::mac::test_key(3),
                Some(u64::MAX),
            )
            .unwrap(),
        );
        lines.push(b'\n');
        let ours =
            signed_line(&forged, &log, &mac::current(false).unwrap(), Some(u64::MAX)).unwrap();
        let edited = String::from_utf8(ours)
            .unwrap()
            .replace("\"s-1\"", "\"s-2\"");
        lines.extend(edited.as_bytes());
        lines.push(b'\n');
        file.write_all(&lines).unwrap();
        drop(file);

        let (entries, skipped) = read_last_counted(&paths.state_file(), 10).unwrap();
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].event, LogEvent::Start);
        assert_eq!(skipped, 3);
        assert!(!completion_logged(&paths.state_file(), &state));

        // ralph's own end line is believed.
        append(&lock, &forged).unwrap();
        assert!(completion_logged(&paths.state_file(), &state));
    }

    #[test]
    fn a_log_put_back_is_stale_and_holds_no_completion() {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let store = StateStore::new(&paths);
        let state_file = paths.state_file();
        let mut state = LoopState::new("s-1".into(), 5, Timestamp::from_secs(0));
        let lock = store.lock(true).unwrap();
        append(
            &lock,
            &LogEntry::about(&state, LogEvent::Start, Timestamp::from_secs(1), "started"),
        )
        .unwrap();
        state.status = Status::Complete;
        append(
            &lock,
            &LogEntry::about(&state, LogEvent::End, Timestamp::from_secs(2), "done"),
        )
        .unwrap();
        drop(lock);
        let line = fs::read_to_string(log_path(&state_file)).unwrap();
        assert!(line.contains(",\"sequence\":1,\"mac\":\""), "{line}");
        assert!(completion_logged(&state_file, &state));
        assert_eq!(stale(&state_file), None);
        let copy = fs::read(log_path(&state_file)).unwrap();

        // A new loop of the project writes on.
        let next = LoopState::new("s-2".into(), 5, Timestamp::from_secs(3));
        let lock = store.lock(false).unwrap();
        append(
            &lock,
            &LogEntry::about(&next, LogEvent::Start, Timestamp::from_secs(3), "started"),
        )
        .unwrap();
        drop(lock);

        // The earlier log written back: its lines are ralph's, but stale.
        fs::write(log_path(&state_file), &copy).unwrap();
        let reading = read_recent(&state_file, 10).unwrap();
        assert_eq!(reading.entries.len(), 2);
        let said = reading.stale.expect("stale").to_string();
        assert!(
            said.contains("is stale: its last line is number 2")
                && said.contains("appended line 3")
                && said.contains("ralph-ctl reset"),
            "{said}"
        );
        assert!(!completion_logged(&state_file, &state));
        let mut problem = LogEntry::about(&next, LogEvent::Problem, Timestamp::from_secs(4), "x");
        problem.session_id = "s-1".into();

        // One earlier line appended at its end is as stale.
        fs::write(log_path(&state_file), &copy).unwrap();
        let lock = store.lock(false).unwrap();
        append(&lock, &problem).unwrap();
        drop(lock);
        let first_line = copy.split(|&b| b == b'\n').next().unwrap().to_vec();
        let mut file = OpenOptions::new()
            .append(true)
            .open(log_path(&state_file))
            .unwrap();
        file.write_all(&[first_line, b"\n".to_vec()].concat())
            .unwrap();
        drop(file);
        assert!(stale(&state_file).is_some());
        assert_eq!(last_problem(&state_file, "s-1"), None);

        // The next line ralph appends makes the log current again.
        let lock = store.lock(false).unwrap();
        append(&lock, &problem).unwrap();
        drop(lock);
        assert_eq!(stale(&state_file), None);
        assert!(last_problem(&state_file, "s-1").is_some());
    }

    #[test]
    fn lines_from_before_numbering_are_read_until_ralph_numbers_the_log() {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path());
        let state_file = paths.state_file();
        let log = log_path(&state_file);
        fs::create_dir_all(log.parent().unwrap()).unwrap();
        let mut state = LoopState::new("s-1".into(), 5, Timestamp::from_secs(0));
        state.status = Status::Complete;
        let end = LogEntry::about(&state, LogEvent::End, Timestamp::from_secs(2), "done");
        let mut old = signed_line(&end, &log, &mac::current(true).unwrap(), None).unwrap();
        old.push(b'\n');
        fs::write(&log, &old).unwrap();
        assert!(completion_logged(&state_file, &state));
        let store = StateStore::new(&paths);
        let lock = store.lock(false).unwrap();
        append(&lock, &end).unwrap();
        drop(lock);
        assert!(completion_logged(&state_file, &state));
        fs::write(&log, &old).unwrap();
        let said = stale(&state_file).expect("stale").to_string();
        assert!(said.contains("carries no number"), "{said}");
        assert!(!completion_logged(&state_file, &state));
    }
}
