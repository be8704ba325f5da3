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

/// The text of the last assistant message of the main conversation (not a
/// sub-agent's): `Ok(None)` when none is found within [`MAX_SCAN_BYTES`] of
/// the end, `Ok(Some(""))` when the last one holds no text (a tool call only).
/// A message written as several lines sharing `message.id` is joined.
pub fn last_assistant_text(path: &Path) -> Result<Option<String>, TranscriptError> {
    last_assistant_text_within(path, LIMITS)
}

fn last_assistant_text_within(
    path: &Path,
    limits: Limits,
) -> Result<Option<String>, TranscriptError> {
    let io_err = |source| TranscriptError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() {
        return Err(TranscriptError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let mut finder = LastAssistant::default();
    scan_lines_backwards(&mut file, meta.len(), limits, |line| finder.visit(line))
        .map_err(io_err)?;
    Ok(finder.finish())
}

/// Collects the last assistant message while lines arrive newest first.
#[derive(Default)]
struct LastAssistant {
    found: bool,
    message_id: Option<String>,
    parts_newest_first: Vec<String>,
}

impl LastAssistant {
    fn visit(&mut self, line: &[u8]) -> ControlFlow<()> {
        // Cheap pre-filter: most lines (tool results, attachments) are not assistant lines.
        let has_assistant = line.windows(11).any(|w| w == b"\"assistant\"");
        let is_user = line.windows(6).any(|w| w == b"\"user\"");
        if !(has_assistant || (self.found && is_user)) {
            return ControlFlow::Continue(());
        }
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            return ControlFlow::Continue(());
        };
        let kind = value.get("type").and_then(Value::as_str);
        if value.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            return ControlFlow::Continue(());
        }
        let id = value
            .pointer("/message/id")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match (self.found, kind) {
            (false, Some("assistant")) => {
                self.found = true;
                self.parts_newest_first.push(text_of(&value));
                self.message_id = id;
                if self.message_id.is_none() {
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            }
            (true, Some("assistant")) if id.is_some() && id == self.message_id => {
                self.parts_newest_first.push(text_of(&value));
                ControlFlow::Continue(())
            }
            (true, Some("assistant" | "user")) => ControlFlow::Break(()),
            _ => ControlFlow::Continue(()),
        }
    }

    fn finish(self) -> Option<String> {
        self.found.then(|| {
            self.parts_newest_first
                .into_iter()
                .rev()
                .filter(|p| !p.is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
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
