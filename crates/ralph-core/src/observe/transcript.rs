//! Reads what the iteration that just ended left in a Claude Code transcript
//! (JSONL), from the file's end, a chunk at a time.
//!
//! An iteration starts at its own prompt line: the task, the re-injected
//! prompt (`Stop hook feedback: …`, or the attachment 2.1 writes for a Stop
//! hook's `additionalContext`) or a person's message. Everything after
//! that line, and nothing before it, is this iteration: its tool calls, the
//! tool results that failed, the files its file tools changed, and its final
//! assistant message. The client may write the final message after the Stop
//! hook has started (2.1.330 headless, 2.0.77 interactive), so the reader
//! never falls back to an older message: it says whether the transcript has
//! caught up with the stop ([`IterationTail::caught_up`]) and the caller may
//! wait for it ([`wait_for_stop`]).
//!
//! Transcripts grow to hundreds of megabytes over a long loop, so the whole
//! file is never read: at most [`MAX_SCAN_BYTES`] from the end. Partial or
//! broken lines are skipped; a line longer than [`MAX_LINE_BYTES`] is skipped
//! without being held in memory; each line is read in one streaming pass,
//! never built into a JSON tree (`line.rs`), and the final message keeps at
//! most [`MAX_MESSAGE_BYTES`] (its end), so memory stays bounded on any
//! file: a few times the line bound, whatever the lines hold.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::observe::refusals::EDIT_TOOLS;
pub use crate::observe::refusals::is_edit_tool;
use thiserror::Error;

/// Bytes read per step from the end of the file.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Longest line considered; longer ones (huge tool results) are skipped.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// How far back from the end the search for the iteration's start goes.
pub const MAX_SCAN_BYTES: u64 = 16 * 1024 * 1024;
/// Most bytes of the final message kept (its newest bytes); a message is
/// normally a few KiB, this bounds memory on a crafted transcript.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// Most failing tool results collected.
pub const MAX_TOOL_ERRORS: usize = 5;
/// Longest failing tool result kept, in characters.
pub const MAX_TOOL_ERROR_CHARS: usize = 2_000;
/// Most changed files recorded for one iteration; past it the edits are not
/// fully described (the progress check then looks at the project itself).
pub const MAX_CHANGED_FILES: usize = 256;
/// Most tool results held while their calls are looked for.
const MAX_PENDING_RESULTS: usize = 1024;

/// Tools whose whole effect on the project's files is what their own result
/// says: file edits (recorded in [`ToolEdits::changed_files`]) or nothing at
/// all. Any other tool (Bash, a sub-agent's Task, an MCP tool, a tool this
/// list does not know) may change anything.
pub const DESCRIBED_TOOLS: &[&str] = &[
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "NotebookRead",
    "Glob",
    "Grep",
    "LS",
    "TodoWrite",
    "TodoRead",
    "WebFetch",
    "WebSearch",
];
/// Most refused calls kept of one iteration.
pub const MAX_REFUSALS: usize = 16;

/// Why the transcript could not be read.
#[derive(Debug, Error)]
pub enum TranscriptError {
    /// Opening or reading failed.
    #[error("cannot read the transcript {path}: {source}")]
    Io {
        /// The transcript.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The path is not a regular file.
    #[error("the transcript {path} is not a regular file")]
    NotAFile {
        /// The transcript.
        path: PathBuf,
    },
}

/// What the iteration's own tool calls say about the project's files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolEdits {
    /// Files (absolute, as the calls named them) whose content a successful
    /// Write/Edit/MultiEdit/NotebookEdit call of this iteration changed: the
    /// client's result says the file was created or patched, or (an older
    /// client that writes no such result) the call succeeded.
    pub changed_files: Vec<PathBuf>,
    /// True when every tool call of the iteration was one of
    /// [`DESCRIBED_TOOLS`] and the whole iteration was read, so
    /// `changed_files` is all the agent's tools did to the project.
    pub fully_described: bool,
}

/// What the end of a transcript says about the iteration that just ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IterationTail {
    /// The text of the iteration's final assistant message of the main
    /// conversation (never a sub-agent's, never one from before the
    /// iteration's prompt): `None` when the iteration has no assistant
    /// message yet, `Some("")` when the last one holds no text (a tool call
    /// only). A message written as several lines sharing `message.id` is
    /// joined.
    pub final_message: Option<String>,
    /// True when the iteration's newest assistant message has no tool call
    /// and every tool call of the iteration has its result: the turn has
    /// ended and the transcript shows all of it. False when the client has
    /// not written the final message (or a result) yet.
    pub caught_up: bool,
    /// True when the iteration's prompt line (or the file's start) was
    /// reached, so the counts below cover the whole iteration.
    pub whole: bool,
    /// The content of each tool result marked `is_error: true` in the
    /// iteration, newest first (at most [`MAX_TOOL_ERRORS`], each shortened
    /// to [`MAX_TOOL_ERROR_CHARS`]).
    pub failing_tool_results: Vec<String>,
    /// How many tool calls the agent made in the iteration.
    pub tool_calls: usize,
    /// The iteration's calls whose result is the client's refusal for lack
    /// of permission, oldest first, with their tool and command or file (at
    /// most [`MAX_REFUSALS`]).
    pub refusals: Vec<crate::observe::refusals::Refusal>,
    /// The files the iteration's file tools changed.
    pub edits: ToolEdits,
    /// The final message of the iteration before this one (the assistant
    /// message just before this iteration's prompt line), for a stop that
    /// could not see its own message in time and is judged at the next one.
    pub previous_final_message: Option<String>,
    /// Set when the final message is not the model's but the client's own
    /// text for an API error that ended the turn (`isApiErrorMessage`):
    /// Claude Code 2.0 runs the Stop hook then; 2.1 fires `StopFailure`.
    pub api_error: Option<ApiErrorMessage>,
}

/// The client's message for an API error that ended the turn.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiErrorMessage {
    /// The client's name for it (`server_error`, `rate_limit`,
    /// `authentication_failed`; 2.0 often says `unknown`).
    pub error: Option<String>,
    /// The HTTP status: `apiErrorStatus` (2.1), or read from the text
    /// ("API Error: 529 …").
    pub status: Option<u16>,
}

impl ApiErrorMessage {
    /// The HTTP status in the client's text ("API Error: 529 …").
    fn status_in_text(text: &str) -> Option<u16> {
        let rest = text.trim_start().strip_prefix("API Error: ")?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        (digits.len() == 3).then(|| digits.parse().ok()).flatten()
    }
}

/// The bounds of the backwards reader: the constants above, smaller in tests
/// so that chunk boundaries and oversize lines are cheap to reach.
#[derive(Clone, Copy, Debug)]
#[allow(clippy::struct_field_names)] // each name says its unit
struct Limits {
    chunk_bytes: usize,
    max_line_bytes: usize,
    max_scan_bytes: u64,
}

const LIMITS: Limits = Limits {
    chunk_bytes: CHUNK_BYTES,
    max_line_bytes: MAX_LINE_BYTES,
    max_scan_bytes: MAX_SCAN_BYTES,
};

/// Reads the iteration that ends the transcript.
pub fn read_iteration_tail(path: &Path) -> Result<IterationTail, TranscriptError> {
    read_iteration_tail_within(path, LIMITS)
}

/// How long the hook waits for the transcript to show a stop's final message.
/// The lines normally arrive within a quarter of a second; the bound covers a
/// loaded machine, and is paid in full only when they never come.
pub const CATCH_UP_WAIT: Duration = Duration::from_secs(5);
/// How long [`wait_for_stop`] polls between two looks at the file.
const POLL: Duration = Duration::from_millis(20);

/// Reads the iteration that ends the transcript, waiting up to `max_wait`
/// for the client to write the stop's final message: until
/// [`IterationTail::caught_up`] and, when the stop carried its message
/// (`expected`), until the transcript's final message is that one. The
/// client writes its transcript asynchronously, so at the Stop hook the
/// iteration's last lines (a tool result, the final message, even the
/// previous block's feedback) may not be there yet, and at a session's first
/// stop the file itself may not exist yet (2.1.330): a missing file is waited
/// for like a missing line. Returns the last reading and how long it waited;
/// the file is read again only when its length changed.
pub fn wait_for_stop(
    path: &Path,
    max_wait: Duration,
    expected: Option<&str>,
) -> Result<(IterationTail, Duration), TranscriptError> {
    let started = Instant::now();
    let settled = |tail: &IterationTail| {
        tail.caught_up
            && expected.is_none_or(|want| {
                tail.final_message
                    .as_deref()
                    .is_some_and(|got| same_text(got, want))
            })
    };
    // `Err` only while the file does not exist.
    let read = || match read_iteration_tail(path) {
        Err(TranscriptError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            Ok(Err(source))
        }
        other => other.map(Ok),
    };
    let mut tail = read()?;
    let mut len = file_len(path);
    while !matches!(&tail, Ok(tail) if settled(tail)) && started.elapsed() < max_wait {
        std::thread::sleep(POLL.min(max_wait.saturating_sub(started.elapsed())));
        let now_len = file_len(path);
        if now_len != len {
            len = now_len;
            tail = read()?;
        }
    }
    match tail {
        Ok(tail) => Ok((tail, started.elapsed())),
        Err(source) => Err(TranscriptError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The same message text, white space aside, or one holding the other (the
/// client may join a message's text blocks differently from the
/// transcript's lines, or send only the last block).
pub fn same_text(transcript: &str, input: &str) -> bool {
    // Built word by word: a list of a message's words would take 16 bytes a word.
    let flat = |s: &str| {
        let mut out = String::with_capacity(s.len());
        for word in s.split_whitespace() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(word);
        }
        out
    };
    let (t, i) = (flat(transcript), flat(input));
    !i.is_empty() && (t == i || t.contains(&i) || i.contains(&t) && !t.is_empty())
}

fn file_len(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

fn read_iteration_tail_within(
    path: &Path,
    limits: Limits,
) -> Result<IterationTail, TranscriptError> {
    let io_err = |source| TranscriptError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = crate::files::open_without_waiting(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(TranscriptError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut scan = Iteration::default();
    // Past the iteration's prompt line: the previous iteration, read only
    // until its final message is whole.
    let mut previous: Option<Iteration> = None;
    let reached_start = scan_lines_backwards(&mut file, meta.len(), limits, |line| {
        let entry = classify(line);
        match (&mut previous, entry) {
            (_, None) => ControlFlow::Continue(()),
            (None, Some(Entry::Prompt)) => {
                previous = Some(Iteration::default());
                ControlFlow::Continue(())
            }
            (None, Some(entry)) if scan.ends_before(&entry) => {
                // The previous iteration's answer, with no prompt line
                // between (the client may not have written this
                // iteration's first lines yet, seen on 2.1.330): what lies
                // before it is not this iteration's.
                let mut before = Iteration::default();
                before.add_newest_first(entry);
                let done = before.message_done;
                previous = Some(before);
                if done {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
            (None, Some(entry)) => {
                scan.add_newest_first(entry);
                ControlFlow::Continue(())
            }
            (Some(_), Some(Entry::Prompt)) => ControlFlow::Break(()),
            (Some(before), Some(entry)) => {
                before.add_newest_first(entry);
                if before.message_done {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            }
        }
    })
    .map_err(io_err)?;
    let previous_final_message = previous
        .as_mut()
        .and_then(|p| std::mem::take(p).finish(true).final_message);
    let mut tail = scan.finish(reached_start || previous.is_some());
    tail.previous_final_message = previous_final_message;
    Ok(tail)
}

/// The text of the iteration's final message (see [`IterationTail::final_message`]).
pub fn last_assistant_text(path: &Path) -> Result<Option<String>, TranscriptError> {
    read_iteration_tail(path).map(|tail| tail.final_message)
}

/// One tool call of the agent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ToolUse {
    id: Option<String>,
    name: String,
    /// The file an edit tool names.
    edited_file: Option<String>,
    /// The command a shell tool runs (its first bytes).
    command: Option<String>,
}

/// One tool result.
#[derive(Clone, Debug, PartialEq, Eq)]
struct ToolOutcome {
    tool_use_id: Option<String>,
    /// The content, when the result is an error.
    error: Option<String>,
    /// What the client's `toolUseResult` says of a file edit: `Some(true)`
    /// created or patched, `Some(false)` written with no change, `None` not said.
    changed: Option<bool>,
}

/// What one transcript line means for the iteration reader.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Entry {
    /// A user line that is not only tool results: an iteration starts here.
    Prompt,
    /// (A line of) an assistant message of the main conversation.
    Assistant {
        id: Option<String>,
        text: String,
        tool_uses: Vec<ToolUse>,
        /// Tool calls past the most one line lists: counted, not described.
        unlisted_calls: usize,
        /// Set for the client's own message about an API error.
        api_error: Option<ApiErrorMessage>,
    },
    /// A user line of tool results.
    ToolResults {
        outcomes: Vec<ToolOutcome>,
        /// Results with an id past the most one line keeps were dropped.
        overflow: bool,
    },
}

/// The iteration being read, newest line first.
#[derive(Default)]
struct Iteration {
    /// Whether any main-conversation user or assistant line was seen yet.
    seen_any: bool,
    /// The newest line is an assistant line (so far: its message has no tool call).
    ends_on_assistant: bool,
    /// The final message: its id, its text parts newest first, their size,
    /// and whether it is whole (an older line started another message).
    message_id: Option<String>,
    message_found: bool,
    message_done: bool,
    message_has_tool_use: bool,
    parts_newest_first: Vec<String>,
    message_bytes: usize,
    tool_calls: usize,
    tool_errors: Vec<String>,
    /// Refused calls, newest first.
    refusals: Vec<crate::observe::refusals::Refusal>,
    /// Results seen (newest first) whose calls, older, are not seen yet.
    pending: HashMap<String, ToolOutcome>,
    pending_overflow: bool,
    /// Calls of the iteration whose results are not in the file (yet).
    unanswered_calls: usize,
    changed_files: Vec<PathBuf>,
    only_described_tools: bool,
    /// The final message is the client's text for an API error.
    api_error: Option<ApiErrorMessage>,
}

impl Iteration {
    /// True when `entry`, older than everything read so far, cannot belong
    /// to this iteration: an answer (an assistant message with no tool
    /// call) other than the final message ends a turn, so it is the
    /// previous iteration's final message.
    fn ends_before(&self, entry: &Entry) -> bool {
        match entry {
            Entry::Assistant {
                id,
                tool_uses,
                api_error,
                ..
            } => {
                self.message_found
                    && tool_uses.is_empty()
                    && api_error.is_none()
                    && (id.is_none() || *id != self.message_id)
            }
            _ => false,
        }
    }

    fn add_newest_first(&mut self, entry: Entry) {
        let first = !self.seen_any;
        if first {
            self.seen_any = true;
            self.only_described_tools = true;
            self.ends_on_assistant = matches!(entry, Entry::Assistant { .. });
        }
        match entry {
            Entry::Prompt => {}
            Entry::Assistant {
                id,
                text,
                tool_uses,
                unlisted_calls,
                api_error,
            } => {
                if !self.message_found {
                    self.message_found = true;
                    self.api_error = api_error;
                    self.message_done = id.is_none();
                    self.message_id = id;
                    self.add_part(text, &tool_uses);
                } else if !self.message_done && id.is_some() && id == self.message_id {
                    self.add_part(text, &tool_uses);
                } else {
                    self.message_done = true;
                }
                self.tool_calls += tool_uses.len() + unlisted_calls;
                if unlisted_calls > 0 {
                    self.only_described_tools = false;
                }
                for call in tool_uses {
                    self.add_call(call);
                }
            }
            Entry::ToolResults { outcomes, overflow } => {
                if self.message_found {
                    self.message_done = true;
                }
                if overflow {
                    self.pending_overflow = true;
                }
                for outcome in outcomes {
                    if let Some(error) = &outcome.error
                        && self.tool_errors.len() < MAX_TOOL_ERRORS
                    {
                        self.tool_errors
                            .push(error.chars().take(MAX_TOOL_ERROR_CHARS).collect());
                    }
                    match &outcome.tool_use_id {
                        Some(id) if self.pending.len() < MAX_PENDING_RESULTS => {
                            self.pending.insert(id.clone(), outcome);
                        }
                        Some(_) => self.pending_overflow = true,
                        None => {}
                    }
                }
            }
        }
    }

    fn add_part(&mut self, text: String, tool_uses: &[ToolUse]) {
        if !tool_uses.is_empty() {
            self.message_has_tool_use = true;
        }
        let room = MAX_MESSAGE_BYTES.saturating_sub(self.message_bytes);
        if room == 0 {
            return;
        }
        // The message's newest bytes are kept: of a part that does not fit, its end.
        let text = if text.len() > room {
            last_bytes(&text, room).to_owned()
        } else {
            text
        };
        self.message_bytes += text.len();
        self.parts_newest_first.push(text);
    }

    fn add_call(&mut self, call: ToolUse) {
        if !DESCRIBED_TOOLS.contains(&call.name.as_str()) {
            self.only_described_tools = false;
        }
        if let Some(id) = &call.id
            && !self.pending.contains_key(id)
            && !self.pending_overflow
        {
            self.unanswered_calls += 1;
        }
        // The call's result is newer than the call, so it was seen already;
        // a call with no result did nothing (the stop came first).
        let outcome = call.id.as_ref().and_then(|id| self.pending.get(id));
        if let Some(text) = outcome.and_then(|o| o.error.as_deref())
            && self.refusals.len() < MAX_REFUSALS
            && crate::observe::refusals::is_permission_denial(text)
        {
            let target = call.command.as_deref().or(call.edited_file.as_deref());
            self.refusals.push(crate::observe::refusals::Refusal {
                text: crate::observe::refusals::permission_denial(&[text.to_string()])
                    .and_then(|r| r.text),
                tool_use_id: call.id.clone(),
                ..crate::observe::refusals::Refusal::of_call(&call.name, target)
            });
        }
        let Some(file) = call.edited_file else {
            return;
        };
        let changed = match outcome {
            Some(o) if o.error.is_some() => false,
            Some(o) => o.changed.unwrap_or(true),
            None => false,
        };
        if changed {
            let path = PathBuf::from(file);
            if self.changed_files.len() >= MAX_CHANGED_FILES {
                self.only_described_tools = false;
            } else if !self.changed_files.contains(&path) {
                self.changed_files.push(path);
            }
        }
    }

    fn finish(mut self, whole: bool) -> IterationTail {
        self.changed_files.reverse();
        IterationTail {
            final_message: self.message_found.then(|| {
                self.parts_newest_first
                    .into_iter()
                    .rev()
                    .filter(|p| !p.is_empty())
                    .collect::<Vec<_>>()
                    .join("\n")
            }),
            // The newest assistant message is an answer (no tool call),
            // and every call has its result: the client may write a result
            // after the final message, so a result line may follow it.
            caught_up: self.message_found
                && !self.message_has_tool_use
                && self.unanswered_calls == 0,
            whole,
            failing_tool_results: self.tool_errors,
            tool_calls: self.tool_calls,
            refusals: self.refusals.into_iter().rev().collect(),
            previous_final_message: None,
            api_error: self.api_error,
            edits: ToolEdits {
                fully_described: whole && self.only_described_tools && !self.pending_overflow,
                changed_files: self.changed_files,
            },
        }
    }
}

/// The end of `text`, at most `max` bytes, cut at a character boundary:
/// what is kept of a message too long to keep whole (a claim is at its end).
pub fn last_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Substring search over bytes ([`super::bytes`]).
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    super::bytes::contains(haystack, needle)
}

/// Calls `visit` with each non-empty line of the first `len` bytes of
/// `file`, last line first, until it breaks, the start of the file, or
/// `limits.max_scan_bytes` (rounded up to whole chunks) has been read.
/// Lines longer than `limits.max_line_bytes` are skipped. Returns false when
/// the bound stopped it, true when `visit` broke or the file's start was reached.
fn scan_lines_backwards(
    file: &mut File,
    len: u64,
    limits: Limits,
    mut visit: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> io::Result<bool> {
    let Limits {
        chunk_bytes,
        max_line_bytes,
        max_scan_bytes,
    } = limits;
    let mut pos = len;
    let mut scanned: u64 = 0;
    // The end of a line whose start lies before `pos` (bytes already read),
    // one piece per chunk, the line's last piece first: joined once, when
    // the line's start is found (joining at every chunk copied a long line
    // once per chunk).
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut pieces_len = 0;
    let mut oversize = false;
    let mut chunk = vec![0u8; chunk_bytes];
    let mut emit = |head: &[u8], pieces: &[Vec<u8>], oversize: bool| -> ControlFlow<()> {
        if oversize {
            return ControlFlow::Continue(());
        }
        let joined;
        let line = if pieces.is_empty() {
            head
        } else {
            let mut line =
                Vec::with_capacity(head.len() + pieces.iter().map(Vec::len).sum::<usize>());
            line.extend_from_slice(head);
            for piece in pieces.iter().rev() {
                line.extend_from_slice(piece);
            }
            joined = line;
            &joined
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            ControlFlow::Continue(())
        } else {
            visit(line)
        }
    };
    while pos > 0 {
        if scanned >= max_scan_bytes {
            return Ok(false);
        }
        let step = usize::try_from(pos).map_or(chunk_bytes, |pos| pos.min(chunk_bytes));
        pos -= step as u64;
        scanned += step as u64;
        file.seek(SeekFrom::Start(pos))?;
        let buf = &mut chunk[..step];
        file.read_exact(buf)?;
        let mut end = step;
        while let Some(nl) = super::bytes::rfind_byte(b'\n', &buf[..end]) {
            let head = &buf[nl + 1..end];
            let too_long = oversize || head.len() + pieces_len > max_line_bytes;
            if emit(head, &pieces, too_long).is_break() {
                return Ok(true);
            }
            pieces.clear();
            pieces_len = 0;
            oversize = false;
            end = nl;
        }
        if oversize || pieces_len + end > max_line_bytes {
            oversize = true;
            pieces.clear();
            pieces_len = 0;
        } else if end > 0 {
            pieces.push(buf[..end].to_vec());
            pieces_len += end;
        }
    }
    let _ = emit(&[], &pieces, oversize);
    Ok(true)
}

mod line;
use line::classify;

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests;
