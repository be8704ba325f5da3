//! `ralph-ctl log`: the last entries of the audit log
//! (`.claude/context/runtime/ralph-log.jsonl`), oldest first: one readable
//! line each with its checks, policy and resume time, or the entries as
//! stored, one JSON object per line.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::log::{self as audit, LogEntry, ROTATED_LOG_FILE_NAME};
use ralph_core::persist::sequence::SequenceError;
use ralph_core::persist::store::StoreError;
use ralph_core::text::{printable, printable_json};

use crate::error::CmdResult;
use crate::error::CtlError;

/// `ralph-ctl log`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct LogArgs {
    /// How many entries.
    #[arg(
        short = 'n',
        long = "entries",
        value_name = "N",
        default_value_t = crate::commands::log::DEFAULT_ENTRIES,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(crate) entries: u32,
    /// Print the entries as stored instead, one JSON object per line.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `ralph-ctl log` as its arguments ask, on stdout (warnings on stderr).
pub(crate) fn command(paths: &ProjectPaths, args: LogArgs) -> CmdResult {
    run(
        paths,
        usize::try_from(args.entries).unwrap_or(usize::MAX),
        args.json,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}

/// How many entries `ralph-ctl log` shows unless told otherwise.
pub(crate) const DEFAULT_ENTRIES: u32 = 20;

/// The width the readable form wraps at.
const WIDTH: usize = 100;
/// The deepest indent of an entry's continuation and detail lines.
const MAX_INDENT: usize = 40;

/// Writes the last `n` entries of the project's audit log to `out`; with
/// `json`, one JSON object per line and nothing else (a note that there is
/// no log yet goes to `err`). Lines ralph cannot vouch for (no MAC, or one
/// that does not verify) are never shown as entries: one line says how
/// many were left out (on `err` with `json`), and one line says so when the
/// log is stale (an earlier copy put back). A log that cannot be read is
/// an error naming the file; a reader that goes away early ends the
/// command quietly.
pub(crate) fn run(
    paths: &ProjectPaths,
    n: usize,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> CmdResult {
    let state_file = paths.state_file();
    // The log lives beside the state, under the same rule for its folders.
    ralph_core::persist::store::StateStore::new(paths).check_folders()?;
    let audit::Reading {
        entries,
        skipped,
        stale,
    } = audit::read_recent(&state_file, n).map_err(|e| unreadable(&state_file, e))?;
    let written = if entries.is_empty() {
        let note = no_entries(paths);
        if json {
            writeln!(err, "ralph-ctl: {note}")
        } else {
            writeln!(out, "{note}")
        }
    } else if json {
        write_json(&entries, out)
    } else {
        write_readable(&entries, out)
    };
    let written = written.and_then(|()| match skipped {
        0 => Ok(()),
        n if json => writeln!(err, "ralph-ctl: {}", unverified_note(n)),
        n => writeln!(out, "{}", unverified_note(n)),
    });
    // A log put back from an earlier copy: its lines are ralph's, but not
    // the loop's record now.
    let written = written.and_then(|()| match &stale {
        None => Ok(()),
        Some(stale) if json => writeln!(err, "ralph-ctl: {}", printable(&stale.to_string())),
        Some(stale) => writeln!(out, "{}", printable(&stale.to_string())),
    });
    super::written(written.and_then(|()| out.flush()), exit_codes::OK)
}

/// What to say of `n` lines of the log that were left out.
fn unverified_note(n: usize) -> String {
    format!(
        "{n} line{} of the audit log not shown: not written by ralph on this machine (or cut by a crash)",
        if n == 1 { "" } else { "s" },
    )
}

/// What to say when there is nothing to show.
fn no_entries(paths: &ProjectPaths) -> String {
    let current = audit::log_path(&paths.state_file());
    let rotated = current.with_file_name(ROTATED_LOG_FILE_NAME);
    if current.symlink_metadata().is_err() && rotated.symlink_metadata().is_err() {
        format!(
            "No audit log yet in {} ({} is written from the moment a loop starts).",
            paths.root.display(),
            relative(paths, &current).display()
        )
    } else {
        format!("The audit log {} holds no entries yet.", current.display())
    }
}

fn relative(paths: &ProjectPaths, path: &Path) -> PathBuf {
    path.strip_prefix(&paths.root)
        .map_or_else(|_| path.to_path_buf(), Path::to_path_buf)
}

/// The error for a log that cannot be read, naming the file at fault:
/// [`audit::read_last`] reads the current file first, and the rotated one
/// only when it needs older entries, so the current file is at fault
/// exactly when reading it alone fails too.
fn unreadable(state_file: &Path, e: io::Error) -> CtlError {
    // The numbers that date the log could not be read, not the log: that
    // error names its own file and fix.
    let e = if e.get_ref().is_some_and(
        <dyn std::error::Error + std::marker::Send + std::marker::Sync + 'static>::is::<
            SequenceError,
        >,
    ) {
        match e.into_inner().map(
            <dyn std::error::Error + std::marker::Send + std::marker::Sync + 'static>::downcast::<
                SequenceError,
            >,
        ) {
            Some(Ok(sequence)) => return CtlError::Store(StoreError::Sequence(*sequence)),
            Some(Err(inner)) => io::Error::other(inner),
            None => io::Error::other("the numbers that date the log cannot be read"),
        }
    } else {
        e
    };
    let current = audit::log_path(state_file);
    let path = if audit::read_last(state_file, 0).is_err() {
        current
    } else {
        current.with_file_name(ROTATED_LOG_FILE_NAME)
    };
    CtlError::Io(ralph_core::file_error::FileError {
        action: "read the audit log",
        path,
        source: io::Error::new(
            e.kind(),
            format!("{e}; move the file aside to start a new log"),
        ),
    })
}

/// The entries as stored: data, whose JSON escapes keep the agent's
/// control characters out (DEL and C1 too, see `printable_json`).
fn write_json(entries: &[LogEntry], out: &mut dyn Write) -> io::Result<()> {
    for entry in entries {
        let line = serde_json::to_string(entry).map_err(io::Error::other)?;
        writeln!(out, "{}", printable_json(&line))?;
    }
    Ok(())
}

/// The entries for people: a reason or a check's detail may be the
/// agent's text, so each entry is [`printable`].
fn write_readable(entries: &[LogEntry], out: &mut dyn Write) -> io::Result<()> {
    let columns = Columns::of(entries);
    for entry in entries {
        out.write_all(printable(&readable(entry, &columns)).as_bytes())?;
    }
    Ok(())
}

/// The widths that line the entries' columns up.
struct Columns {
    event: usize,
    iteration: usize,
    status: usize,
}

impl Columns {
    fn of(entries: &[LogEntry]) -> Columns {
        let widest = |width: fn(&LogEntry) -> usize| entries.iter().map(width).max().unwrap_or(0);
        Columns {
            event: widest(|e| e.event.as_str().len()),
            iteration: widest(|e| e.iteration.to_string().len()),
            status: widest(|e| e.status.as_str().len()),
        }
    }
}

/// One entry: `TIME  EVENT  iteration I  STATUS  reason`, the reason
/// wrapped at [`WIDTH`]; then a line per check (`✓ name`, `✗ name:
/// detail`), and the policy and the time not to resume before, when set.
/// Everything after the first line hangs under the event, so that the
/// times alone make the left column.
fn readable(entry: &LogEntry, columns: &Columns) -> String {
    let head = format!(
        "{}  {:<ew$}  iteration {:<iw$}  {:<sw$}  ",
        entry.at,
        entry.event.as_str(),
        entry.iteration,
        entry.status.as_str(),
        ew = columns.event,
        iw = columns.iteration,
        sw = columns.status,
    );
    let depth = (entry.at.to_string().chars().count() + 2).min(MAX_INDENT);
    let mut out = wrap(&head, &entry.reason, depth);
    let indent = " ".repeat(depth);
    for check in &entry.checks {
        let text = if check.passed {
            format!("{indent}✓ {}", check.name)
        } else if check.detail.is_empty() {
            format!("{indent}✗ {}", check.name)
        } else {
            out.push_str(&wrap(
                &format!("{indent}✗ {}: ", check.name),
                &check.detail,
                depth + 2,
            ));
            continue;
        };
        out.push_str(&text);
        out.push('\n');
    }
    let mut extra = Vec::new();
    if let Some(policy) = &entry.policy {
        extra.push(format!("policy: {policy}"));
    }
    if let Some(at) = &entry.resume_at {
        extra.push(format!("not before: {at}"));
    }
    if !extra.is_empty() {
        out.push_str(&format!("{indent}{}\n", extra.join("  ")));
    }
    out
}

/// `first` followed by `text`'s words, in lines of at most [`WIDTH`]
/// characters (a longer word gets a line of its own), each line after the
/// first indented by `indent`; ends with a line break.
fn wrap(first: &str, text: &str, indent: usize) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut width = line.chars().count();
    let mut fresh = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !fresh && width + 1 + len > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = " ".repeat(indent);
            width = indent;
            fresh = true;
        }
        if !fresh {
            line.push(' ');
            width += 1;
        }
        line.push_str(word);
        width += len;
        fresh = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::state::{LoopState, Status};
    use ralph_core::persist::log::{Check, LogEvent};

    /// A project folder in the temp dir, removed when dropped.
    struct Project(PathBuf);

    impl Project {
        fn new(name: &str) -> Project {
            let root = std::env::temp_dir()
                .join(format!("ralph-ctl-log-test-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join(ralph_core::paths::RUNTIME_DIR)).unwrap();
            Project(root)
        }

        fn paths(&self) -> ProjectPaths {
            ProjectPaths::new(&self.0)
        }

        /// The log holding `entries`, each line numbered and signed as
        /// ralph does it.
        fn write_log(&self, entries: &[LogEntry]) {
            use ralph_core::persist::{mac, sequence};
            crate::testdir::keep_key_apart();
            let key = mac::current(true).unwrap();
            let keys = mac::key_dir().unwrap();
            let log = audit::log_path(&self.paths().state_file());
            let folder = log.parent().unwrap();
            let mut kept = sequence::read(&keys, folder).unwrap().unwrap_or_default();
            let mut text = Vec::new();
            for entry in entries {
                kept.log = kept.next();
                text.extend(audit::signed_line(entry, &log, &key, Some(kept.log)).unwrap());
                text.push(b'\n');
            }
            std::fs::write(&log, text).unwrap();
            sequence::write(&keys, folder, kept).unwrap();
        }
    }

    impl Drop for Project {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn entry(at: &str, event: LogEvent, iteration: u32, status: Status, reason: &str) -> LogEntry {
        let mut state = LoopState::new("s-1".into(), 25, ralph_core::time::Timestamp::from_secs(0));
        state.iteration = iteration;
        state.status = status;
        // `tN`: N seconds after the epoch, for the short tests.
        let at = match at.strip_prefix('t') {
            Some(n) => ralph_core::time::Timestamp::from_secs(n.parse().unwrap_or(0)),
            None => ralph_core::time::Timestamp::parse(at).unwrap(),
        };
        LogEntry::about(&state, event, at, reason)
    }

    /// Runs the command into buffers: (exit code, stdout, stderr).
    fn log(project: &Project, n: usize, json: bool) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&project.paths(), n, json, &mut out, &mut err).unwrap();
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn lines_ralph_did_not_write_are_counted_never_shown() {
        let project = Project::new("unverified");
        let ours = entry("t1", LogEvent::Start, 0, Status::Running, "started");
        project.write_log(&[ours]);
        let forged = entry("t2", LogEvent::End, 1, Status::Complete, "forged done");
        let file = audit::log_path(&project.paths().state_file());
        let mut text = std::fs::read_to_string(&file).unwrap();
        for _ in 0..2 {
            text.push_str(&serde_json::to_string(&forged).unwrap());
            text.push('\n');
        }
        std::fs::write(&file, text).unwrap();
        let (code, out, _) = log(&project, 10, false);
        assert_eq!(code, 0);
        assert!(
            out.contains("started") && !out.contains("forged done"),
            "{out}"
        );
        assert!(
            out.contains("2 lines of the audit log not shown")
                && out.contains("not written by ralph on this machine"),
            "{out}"
        );
        let (_, out, err) = log(&project, 10, true);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(err.contains("2 lines of the audit log not shown"), "{err}");
    }

    #[test]
    fn the_last_entries_oldest_first_in_aligned_columns() {
        let project = Project::new("columns");
        let mut entries: Vec<LogEntry> = (1..=12)
            .map(|i| {
                entry(
                    &format!("t{i:02}"),
                    LogEvent::Stop,
                    i,
                    Status::Running,
                    &format!("iteration {i} ended without a completion claim"),
                )
            })
            .collect();
        let mut pause = entry("t13", LogEvent::Pause, 12, Status::Paused, "rate_limit");
        pause.resume_at = Some(ralph_core::time::Timestamp::from_secs(20));
        pause.policy = Some("conservative".into());
        entries.push(pause);
        project.write_log(&entries);

        let (code, out, err) = log(&project, 3, false);
        assert_eq!((code, err.as_str()), (0, ""));
        assert_eq!(
            out,
            "1970-01-01T00:00:11Z  stop   iteration 11  running  iteration 11 ended without a completion claim\n\
             1970-01-01T00:00:12Z  stop   iteration 12  running  iteration 12 ended without a completion claim\n\
             1970-01-01T00:00:13Z  pause  iteration 12  paused   rate_limit\n                      \
             policy: conservative  not before: 1970-01-01T00:00:20Z\n"
        );
    }

    #[test]
    fn checks_show_a_mark_and_the_failures_detail_and_long_text_wraps_at_100_columns() {
        let project = Project::new("checks");
        let long = "the verification command `cargo test --workspace` failed: ".repeat(3);
        let mut stop = entry(
            "2026-01-01T00:00:00Z",
            LogEvent::Stop,
            3,
            Status::Running,
            &format!("completion claimed in iteration 3 but rejected: {long}"),
        );
        stop.checks = vec![
            Check {
                name: "plan".into(),
                passed: true,
                detail: "no plan file".into(),
            },
            Check {
                name: "verification".into(),
                passed: false,
                detail: long.clone(),
            },
        ];
        project.write_log(&[stop]);
        let (_, out, _) = log(&project, 20, false);
        for line in out.lines() {
            assert!(line.chars().count() <= WIDTH, "{line:?} is too wide");
        }
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with(
            "2026-01-01T00:00:00Z  stop  iteration 3  running  completion claimed in iteration 3"
        ));
        // Continuations hang under the event column (the time's width and two).
        let hang = " ".repeat(22);
        assert!(lines[1].starts_with(&hang) && !lines[1].starts_with(&format!("{hang} ")));
        let plan = lines
            .iter()
            .position(|l| *l == format!("{hang}✓ plan"))
            .unwrap();
        assert!(
            lines[plan + 1].starts_with(&format!("{hang}✗ verification: the verification command"))
        );
        assert!(lines[plan + 2].starts_with(&format!("{hang}  ")));
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            words(&lines[plan + 1..].join(" ")),
            words(&format!("✗ verification: {long}")),
            "no word lost in the wrapping"
        );
    }

    #[test]
    fn json_is_the_entries_as_stored_one_per_line() {
        let project = Project::new("json");
        let mut first = entry("t1", LogEvent::Wait, 2, Status::Paused, "backoff");
        first.policy = Some("aggressive".into());
        let second = entry("t2", LogEvent::Resume, 2, Status::Running, "resumed");
        project.write_log(&[first.clone(), second.clone()]);
        let stored =
            std::fs::read_to_string(audit::log_path(&project.paths().state_file())).unwrap();
        let (code, out, err) = log(&project, 20, true);
        assert_eq!((code, err.as_str()), (0, ""));
        // Each line as stored, less the MAC that proved it ralph's and the
        // number that dated it.
        let unsigned: String = stored
            .lines()
            .map(|l| {
                let (body, _) = l.rsplit_once(",\"sequence\":").unwrap();
                format!("{body}}}\n")
            })
            .collect();
        assert_eq!(out, unsigned);
        let parsed: Vec<LogEntry> = out
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(parsed, [first, second]);
    }

    #[test]
    fn no_log_is_said_and_is_no_error() {
        let project = Project::new("none");
        let (code, out, err) = log(&project, 20, false);
        assert_eq!(code, 0);
        assert!(out.starts_with("No audit log yet in "), "{out}");
        assert_eq!(err, "");
        let (code, out, err) = log(&project, 20, true);
        assert_eq!((code, out.as_str()), (0, ""), "JSON readers get no lines");
        assert!(err.starts_with("ralph-ctl: No audit log yet"), "{err}");

        project.write_log(&[]);
        let (_, out, _) = log(&project, 20, false);
        assert!(out.starts_with("The audit log "), "{out}");
        assert!(out.contains("holds no entries"), "{out}");
    }

    #[test]
    fn an_unreadable_log_names_the_file_at_fault() {
        let project = Project::new("unreadable");
        let state_file = project.paths().state_file();
        let current = audit::log_path(&state_file);
        std::fs::create_dir(&current).unwrap();
        let e = run(
            &project.paths(),
            20,
            false,
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read the audit log {}: not a regular file; move the file aside to start a new log",
                current.display()
            )
        );
        assert_eq!(e.exit_code(), exit_codes::ERROR);

        // The current log holds one entry; more are asked for, from a rotated log that is a folder.
        std::fs::remove_dir(&current).unwrap();
        project.write_log(&[entry("t1", LogEvent::Stop, 1, Status::Running, "r")]);
        let rotated = current.with_file_name(ROTATED_LOG_FILE_NAME);
        std::fs::create_dir(&rotated).unwrap();
        let e = run(
            &project.paths(),
            20,
            false,
            &mut Vec::new(),
            &mut Vec::new(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read the audit log {}:", rotated.display())),
            "{e}"
        );
    }

    /// A reader that went away after `left` bytes.
    struct ClosedAfter {
        left: usize,
    }

    impl Write for ClosedAfter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            let n = buf.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_reader_that_goes_away_ends_the_command_quietly() {
        let project = Project::new("pipe");
        let entries: Vec<LogEntry> = (1..=5)
            .map(|i| entry("t", LogEvent::Stop, i, Status::Running, "r"))
            .collect();
        project.write_log(&entries);
        for json in [false, true] {
            let mut out = ClosedAfter { left: 10 };
            let code = run(&project.paths(), 20, json, &mut out, &mut Vec::new()).unwrap();
            assert_eq!(code, exit_codes::OK);
        }
    }
}
