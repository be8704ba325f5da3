//! Finds the agent's last assistant message in a Claude Code transcript
//! (JSONL) by reading the file from its end, a chunk at a time.
//!
//! Transcripts grow to hundreds of megabytes over a long loop, so the whole
//! file is never read: the cost of a stop does not grow with the session.
//! Partial or broken lines are skipped; a single line longer than
//! [`MAX_LINE_BYTES`] is skipped without being held in memory.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde_json::Value;
use thiserror::Error;

/// Bytes read per step from the end of the file.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Longest line considered; longer ones (huge tool results) are skipped.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;
/// How far back from the end the search goes before giving up.
pub const MAX_SCAN_BYTES: u64 = 64 * 1024 * 1024;

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

/// What the end of a transcript says about the iteration that just ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IterationTail {
    /// The text of the last assistant message of the main conversation (not a
    /// sub-agent's): `None` when none is found within [`MAX_SCAN_BYTES`] of the
    /// end, `Some("")` when the last one holds no text (a tool call only). A
    /// message written as several lines sharing `message.id` is joined.
    pub last_assistant_text: Option<String>,
    /// The content of each tool result marked `is_error: true` since the
    /// iteration's prompt, newest first (at most [`MAX_TOOL_ERRORS`], each
    /// shortened to [`MAX_TOOL_ERROR_CHARS`]).
    pub failing_tool_results: Vec<String>,
    /// How many tool calls the agent made since the iteration's prompt.
    pub tool_calls: usize,
}

/// How far back, past the last assistant message, the reader looks for the
/// iteration's tool calls and failing tool results.
pub const ITERATION_SCAN_BYTES: u64 = 64 * 1024;

/// Most failing tool results collected.
pub const MAX_TOOL_ERRORS: usize = 5;
/// Longest failing tool result kept, in characters.
pub const MAX_TOOL_ERROR_CHARS: usize = 2_000;

/// The bounds of the backwards reader: the constants above, smaller in tests
/// so that chunk boundaries and oversize lines are cheap to reach.
#[derive(Clone, Copy, Debug)]
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

/// Reads the end of the transcript: the last assistant message and the
/// failing tool results of the iteration it ended.
pub fn read_iteration_tail(path: &Path) -> Result<IterationTail, TranscriptError> {
    read_iteration_tail_within(path, LIMITS)
}

/// The text of the last assistant message within other bounds (tests, fuzzing).
fn last_assistant_text_within(
    path: &Path,
    limits: Limits,
) -> Result<Option<String>, TranscriptError> {
    read_iteration_tail_within(path, limits).map(|tail| tail.last_assistant_text)
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
    let mut scan = TailScan::default();
    scan_lines_backwards(&mut file, meta.len(), limits, |line| scan.visit(line)).map_err(io_err)?;
    Ok(scan.finish())
}

/// The text of the last assistant message (see [`IterationTail::last_assistant_text`]).
pub fn last_assistant_text(path: &Path) -> Result<Option<String>, TranscriptError> {
    last_assistant_text_within(path, LIMITS)
}

/// Walks lines newest first: finds the last assistant message, then goes on
/// to the iteration's prompt collecting failing tool results.
#[derive(Default)]
struct TailScan {
    found: bool,
    message_done: bool,
    message_id: Option<String>,
    parts_newest_first: Vec<String>,
    tool_errors: Vec<String>,
    tool_calls: usize,
    bytes_past_message: u64,
}

impl TailScan {
    fn visit(&mut self, line: &[u8]) -> ControlFlow<()> {
        if self.message_done {
            // Once the message is whole, the iteration's tool results are
            // looked for within a bound, so a stop costs the same however
            // long the iteration was.
            self.bytes_past_message += line.len() as u64;
            if self.bytes_past_message > ITERATION_SCAN_BYTES {
                return ControlFlow::Break(());
            }
        }
        // Cheap pre-filter: only assistant and user lines matter.
        let has_assistant = contains(line, b"\"assistant\"");
        let is_user = contains(line, b"\"user\"");
        if !(has_assistant || is_user) {
            return ControlFlow::Continue(());
        }
        // A large successful tool result (most of a transcript's bytes) is
        // only checked, not built into a JSON tree.
        if line.len() > LARGE_LINE_BYTES
            && is_user
            && !contains(line, b"\"is_error\":true")
            && !contains(line, b"\"is_error\": true")
        {
            if let Some(head) = line_head(line) {
                if head.kind.as_deref() == Some("user") && head.is_sidechain != Some(true) {
                    self.message_done = self.found;
                    return ControlFlow::Continue(());
                }
            }
        }
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return ControlFlow::Continue(());
        };
        if value.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            return ControlFlow::Continue(());
        }
        match value.get("type").and_then(Value::as_str) {
            Some("assistant") => {
                let id = value
                    .pointer("/message/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                if !self.found {
                    self.found = true;
                    self.parts_newest_first.push(text_of(&value));
                    self.message_id = id;
                    self.message_done = self.message_id.is_none();
                } else if !self.message_done && id.is_some() && id == self.message_id {
                    self.parts_newest_first.push(text_of(&value));
                } else {
                    self.message_done = true;
                }
                ControlFlow::Continue(())
            }
            Some("user") => {
                self.message_done = self.found;
                let content = value.pointer("/message/content");
                let is_prompt = match content {
                    Some(Value::String(_)) => true,
                    Some(Value::Array(blocks)) => blocks
                        .iter()
                        .any(|b| b.get("type").and_then(Value::as_str) != Some("tool_result")),
                    _ => false,
                };
                if is_prompt {
                    // The iteration's prompt (the task or a re-injection): the
                    // iteration starts here. Before the assistant message is
                    // found, keep looking further back for it.
                    if self.found {
                        return ControlFlow::Break(());
                    }
                    self.tool_errors.clear();
                    self.tool_calls = 0;
                    return ControlFlow::Continue(());
                }
                if let Some(Value::Array(blocks)) = content {
                    for block in blocks {
                        let failed = block.get("type").and_then(Value::as_str)
                            == Some("tool_result")
                            && block.get("is_error").and_then(Value::as_bool) == Some(true);
                        if failed && self.tool_errors.len() < MAX_TOOL_ERRORS {
                            let text = tool_result_text(block.get("content"));
                            self.tool_errors
                                .push(text.chars().take(MAX_TOOL_ERROR_CHARS).collect());
                        }
                    }
                }
                ControlFlow::Continue(())
            }
            _ => ControlFlow::Continue(()),
        }
    }

    fn finish(self) -> IterationTail {
        let last_assistant_text = self.found.then(|| {
            self.parts_newest_first
                .into_iter()
                .rev()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        });
        IterationTail {
            last_assistant_text,
            tool_calls: if self.found { self.tool_calls } else { 0 },
            failing_tool_results: if self.found {
                self.tool_errors
            } else {
                Vec::new()
            },
        }
    }
}

/// Lines longer than this are first read for their type only.
const LARGE_LINE_BYTES: usize = 4 * 1024;

/// The top-level fields of a transcript line that say what it is.
#[derive(serde::Deserialize)]
struct LineHead {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "isSidechain")]
    is_sidechain: Option<bool>,
}

/// Reads a line's type without building its content; `None` when the line is
/// not valid UTF-8 JSON of that shape (the caller then parses it in full).
fn line_head(line: &[u8]) -> Option<LineHead> {
    std::str::from_utf8(line).ok()?;
    serde_json::from_slice(line).ok()
}

/// Substring search: the standard library's fast `str` search on UTF-8
/// lines (nearly all of them), a plain byte search otherwise.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    match (std::str::from_utf8(haystack), std::str::from_utf8(needle)) {
        (Ok(h), Ok(n)) => h.contains(n),
        _ => haystack.windows(needle.len()).any(|w| w == needle),
    }
}

/// The text of a tool result's `content` (a string or text blocks).
fn tool_result_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The text blocks of a transcript line's `message.content`, joined.
fn text_of(line: &Value) -> String {
    match line.pointer("/message/content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Calls `visit` with each non-empty line of the first `len` bytes of
/// `file`, last line first, until it breaks, the start of the file, or
/// `limits.max_scan_bytes` (rounded up to whole chunks) has been read.
/// Lines longer than `limits.max_line_bytes` are skipped.
fn scan_lines_backwards(
    file: &mut File,
    len: u64,
    limits: Limits,
    mut visit: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> io::Result<()> {
    let Limits {
        chunk_bytes,
        max_line_bytes,
        max_scan_bytes,
    } = limits;
    let mut pos = len;
    let mut scanned: u64 = 0;
    // The end of a line whose start lies before `pos` (bytes already read).
    let mut pending: Vec<u8> = Vec::new();
    let mut oversize = false;
    let mut chunk = vec![0u8; chunk_bytes];
    let mut emit = |bytes: &[u8], oversize: bool| -> ControlFlow<()> {
        if oversize || bytes.iter().all(u8::is_ascii_whitespace) {
            ControlFlow::Continue(())
        } else {
            visit(bytes)
        }
    };
    while pos > 0 {
        if scanned >= max_scan_bytes {
            return Ok(());
        }
        let step = (pos.min(chunk_bytes as u64)) as usize;
        pos -= step as u64;
        scanned += step as u64;
        file.seek(SeekFrom::Start(pos))?;
        let buf = &mut chunk[..step];
        file.read_exact(buf)?;
        let mut end = step;
        while let Some(nl) = buf[..end].iter().rposition(|&b| b == b'\n') {
            let tail = &buf[nl + 1..end];
            let flow = if pending.is_empty() {
                emit(tail, oversize)
            } else {
                let mut line = Vec::with_capacity(tail.len() + pending.len());
                line.extend_from_slice(tail);
                line.extend_from_slice(&pending);
                emit(&line, oversize || line.len() > max_line_bytes)
            };
            if flow.is_break() {
                return Ok(());
            }
            pending.clear();
            oversize = false;
            end = nl;
        }
        if oversize || pending.len() + end > max_line_bytes {
            oversize = true;
            pending.clear();
        } else {
            let mut joined = Vec::with_capacity(end + pending.len());
            joined.extend_from_slice(&buf[..end]);
            joined.extend_from_slice(&pending);
            pending = joined;
        }
    }
    if pos == 0 {
        let _ = emit(&pending, oversize);
    }
    Ok(())
}

#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod testing;

#[cfg(test)]
mod properties;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tempdir::TempDir;
    use std::fs;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures")
            .join(name)
    }

    fn write(dir: &TempDir, content: &[u8]) -> PathBuf {
        let path = dir.path().join("t.jsonl");
        fs::write(&path, content).unwrap();
        path
    }

    fn assistant(id: &str, blocks: &str) -> String {
        format!(
            r#"{{"type":"assistant","message":{{"id":"{id}","role":"assistant","content":{blocks}}}}}"#
        )
    }

    #[test]
    fn real_transcripts() {
        let text = last_assistant_text(&fixture("transcript-text-only.jsonl")).unwrap();
        assert_eq!(text.as_deref(), Some("All done. RALPH_DONE"));
        let tools = last_assistant_text(&fixture("transcript-tool-use.jsonl")).unwrap();
        assert_eq!(tools.as_deref(), Some("Done. RALPH_DONE"));
    }

    #[test]
    fn table() {
        let user = r#"{"type":"user","message":{"role":"user","content":"Stop hook feedback:\nSay RALPH_DONE when done"}}"#;
        let system = r#"{"type":"system","subtype":"stop_hook_summary"}"#;
        let cases: Vec<(String, Option<&str>)> = vec![
            (String::new(), None),
            (format!("{user}\n"), None),
            (
                format!(
                    "{}\n{user}\n",
                    assistant("a", r#"[{"type":"text","text":"old"}]"#)
                ),
                Some("old"),
            ),
            (
                format!(
                    "{}\n{user}\n{}\n{system}\n",
                    assistant("a", r#"[{"type":"text","text":"old RALPH_DONE"}]"#),
                    assistant("b", r#"[{"type":"text","text":"new"}]"#)
                ),
                Some("new"),
            ),
            // One message split over several lines sharing message.id.
            (
                format!(
                    "{user}\n{}\n{}\n",
                    assistant("m", r#"[{"type":"text","text":"part one"}]"#),
                    assistant(
                        "m",
                        r#"[{"type":"tool_use","id":"t","name":"Bash","input":{}},{"type":"text","text":"part two"}]"#
                    )
                ),
                Some("part one\npart two"),
            ),
            // The last message is a tool call only: it has no text, and an earlier message does not count.
            (
                format!(
                    "{}\n{}\n",
                    assistant("a", r#"[{"type":"text","text":"RALPH_DONE"}]"#),
                    assistant(
                        "b",
                        r#"[{"type":"tool_use","id":"t","name":"Bash","input":{}}]"#
                    )
                ),
                Some(""),
            ),
            // Partial last line and broken lines are skipped.
            (
                format!(
                    "{}\n{{\"type\":\"assis",
                    assistant("a", r#"[{"type":"text","text":"kept"}]"#)
                ),
                Some("kept"),
            ),
            (
                format!(
                    "{}\nnot json \"assistant\"\n\n",
                    assistant("a", r#""plain string content""#)
                ),
                Some("plain string content"),
            ),
            // A sub-agent's message is not the agent's last message.
            (
                format!(
                    "{}\n{}\n",
                    assistant("a", r#"[{"type":"text","text":"main"}]"#),
                    r#"{"type":"assistant","isSidechain":true,"message":{"id":"s","content":[{"type":"text","text":"side"}]}}"#
                ),
                Some("main"),
            ),
            // No trailing newline on a complete last line.
            (
                assistant("a", r#"[{"type":"text","text":"no newline"}]"#),
                Some("no newline"),
            ),
        ];
        let dir = TempDir::new();
        for (content, want) in cases {
            let path = write(&dir, content.as_bytes());
            assert_eq!(
                last_assistant_text(&path).unwrap().as_deref(),
                want,
                "{content}"
            );
        }
    }

    #[test]
    fn lines_spanning_many_chunks_and_oversize_lines() {
        let dir = TempDir::new();
        let big_text = "x".repeat(CHUNK_BYTES * 3 + 17);
        let content = format!(
            "{}\n{}\n",
            assistant("a", r#"[{"type":"text","text":"before"}]"#),
            assistant("b", &format!(r#"[{{"type":"text","text":"{big_text}"}}]"#)),
        );
        let path = write(&dir, content.as_bytes());
        assert_eq!(last_assistant_text(&path).unwrap(), Some(big_text));

        let huge = format!(
            r#"{{"type":"user","message":{{"content":"{}"}}}}"#,
            "y".repeat(MAX_LINE_BYTES + 5)
        );
        let content = format!(
            "{}\n{huge}\n",
            assistant("a", r#"[{"type":"text","text":"survives"}]"#)
        );
        let path = write(&dir, content.as_bytes());
        assert_eq!(
            last_assistant_text(&path).unwrap().as_deref(),
            Some("survives")
        );
    }

    #[test]
    fn failing_tool_results_of_the_last_iteration() {
        let tool = |id: &str, err: bool, text: &str| {
            format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","is_error":{err},"content":"{text}"}}]}}}}"#
            )
        };
        let prompt = |text: &str| {
            format!(r#"{{"type":"user","message":{{"role":"user","content":"{text}"}}}}"#)
        };
        let lines = [
            prompt("Do the task"),
            assistant(
                "a",
                r#"[{"type":"tool_use","id":"t0","name":"Bash","input":{}}]"#,
            ),
            tool("t0", true, "error: old iteration"),
            assistant("b", r#"[{"type":"text","text":"Tried."}]"#),
            prompt("Stop hook feedback:\\nDo the task"),
            assistant(
                "c",
                r#"[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]"#,
            ),
            tool("t1", true, "error[E0308]: mismatched types"),
            assistant(
                "d",
                r#"[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]"#,
            ),
            tool("t2", false, "ok"),
            assistant("e", r#"[{"type":"text","text":"Still failing."}]"#),
        ];
        let dir = TempDir::new();
        let path = write(&dir, (lines.join("\n") + "\n").as_bytes());
        let tail = read_iteration_tail(&path).unwrap();
        assert_eq!(tail.last_assistant_text.as_deref(), Some("Still failing."));
        assert_eq!(
            tail.failing_tool_results,
            vec!["error[E0308]: mismatched types".to_string()]
        );
    }

    #[test]
    fn the_tool_result_bound_never_cuts_the_message_itself() {
        // One message split over two lines, the older one longer than the bound.
        let dir = TempDir::new();
        let long = "x".repeat(ITERATION_SCAN_BYTES as usize + 10);
        let content = format!(
            "{}\n{}\n",
            assistant("m", &format!(r#"[{{"type":"text","text":"{long}"}}]"#)),
            assistant("m", r#"[{"type":"text","text":"tail"}]"#)
        );
        let path = write(&dir, content.as_bytes());
        assert_eq!(
            last_assistant_text(&path).unwrap(),
            Some(format!("{long}\ntail"))
        );
    }

    #[test]
    fn invalid_utf8_lines_are_skipped() {
        let dir = TempDir::new();
        let mut content = assistant("a", r#"[{"type":"text","text":"good"}]"#).into_bytes();
        content.extend_from_slice(
            b"\n{\"type\":\"assistant\",\"message\":{\"content\":\"\xff\xfe\"}}\n",
        );
        let path = write(&dir, &content);
        assert_eq!(last_assistant_text(&path).unwrap().as_deref(), Some("good"));
    }

    #[test]
    fn missing_file_and_directory_are_errors() {
        let dir = TempDir::new();
        assert!(matches!(
            last_assistant_text(&dir.path().join("nope.jsonl")),
            Err(TranscriptError::Io { .. })
        ));
        assert!(last_assistant_text(dir.path()).is_err());
    }
}
