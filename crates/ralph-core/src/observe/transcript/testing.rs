//! The transcript reader with any bounds, a reference reader that reads
//! the whole file forward, and a reference reading of one line from a JSON
//! tree, for property tests and fuzz targets. Not an API: built only for
//! tests and with the `fuzzing` feature.

use std::path::Path;

use serde_json::Value;

use super::{ApiErrorMessage, ToolOutcome, ToolUse, TranscriptError};
use super::{EDIT_TOOLS, MAX_TOOL_ERROR_CHARS};
use super::{Entry, Iteration, IterationTail, Limits, classify, read_iteration_tail_within};

/// [`read_iteration_tail`](super::read_iteration_tail) with other bounds
/// than [`CHUNK_BYTES`](super::CHUNK_BYTES),
/// [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES) and
/// [`MAX_SCAN_BYTES`](super::MAX_SCAN_BYTES). `chunk_bytes` must be at
/// least 1 and at most `max_line_bytes`, as the real bounds are.
pub fn read_iteration_tail_with(
    path: &Path,
    chunk_bytes: usize,
    max_line_bytes: usize,
    max_scan_bytes: u64,
) -> Result<IterationTail, TranscriptError> {
    assert!(chunk_bytes >= 1 && chunk_bytes <= max_line_bytes);
    read_iteration_tail_within(
        path,
        Limits {
            chunk_bytes,
            max_line_bytes,
            max_scan_bytes,
        },
    )
}

/// Reference: the iteration that ends the file, found by reading every line
/// forward and starting anew at each prompt line. Only the lines the
/// backwards reader can see count: those within the scanned tail (whole
/// chunks from the end) that start after a newline inside it, and no longer
/// than the line limit. Takes the bounds of [`read_iteration_tail_with`].
pub fn reference(
    bytes: &[u8],
    chunk_bytes: usize,
    max_line_bytes: usize,
    max_scan_bytes: u64,
) -> IterationTail {
    let len = bytes.len() as u64;
    let chunks = max_scan_bytes.div_ceil(chunk_bytes as u64);
    let start = usize::try_from(len - chunks.saturating_mul(chunk_bytes as u64).min(len)).unwrap();
    let visible = if start == 0 {
        bytes
    } else {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(nl) => &bytes[start + nl + 1..],
            None => &[],
        }
    };
    let mut whole = start == 0;
    let mut before_prompt: Option<Vec<Entry>> = None;
    let mut since_prompt: Vec<Entry> = Vec::new();
    for line in visible.split(|&b| b == b'\n') {
        if line.len() > max_line_bytes || line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match classify(line) {
            Some(Entry::Prompt) => {
                whole = true;
                before_prompt = Some(std::mem::take(&mut since_prompt));
            }
            Some(entry) => since_prompt.push(entry),
            None => {}
        }
    }
    let newest_first = |entries: Vec<Entry>| {
        let mut iteration = Iteration::default();
        for entry in entries.into_iter().rev() {
            iteration.add_newest_first(entry);
        }
        iteration
    };
    // An answer older than the final message, with no prompt line between,
    // is the previous iteration's: the iteration starts after it.
    let mut probe = Iteration::default();
    let mut split = None;
    for (i, entry) in since_prompt.iter().enumerate().rev() {
        if probe.ends_before(entry) {
            split = Some(i);
            break;
        }
        probe.add_newest_first(entry.clone());
    }
    if let Some(i) = split {
        let rest = since_prompt.split_off(i + 1);
        before_prompt = Some(std::mem::replace(&mut since_prompt, rest));
        whole = true;
    }
    let mut tail = newest_first(since_prompt).finish(whole);
    tail.previous_final_message =
        before_prompt.and_then(|entries| newest_first(entries).finish(true).final_message);
    tail
}

/// Reference for [`classify`]: the same reading of a line, from a whole
/// JSON tree of it (which costs tens of times a crafted line's size; the
/// reader itself folds a line in one streaming pass).
fn classify_tree(line: &[u8]) -> Option<Entry> {
    if !(contains(line, b"\"assistant\"")
        || contains(line, b"\"user\"")
        || contains(line, b"\"hook_additional_context\""))
    {
        return None;
    }
    let value = serde_json::from_slice::<Value>(line).ok()?;
    if value.get("isSidechain").and_then(Value::as_bool) == Some(true) {
        return None;
    }
    match value.get("type").and_then(Value::as_str) {
        Some("attachment") => {
            let goes_on = value.pointer("/attachment/type").and_then(Value::as_str)
                == Some("hook_additional_context")
                && value
                    .pointer("/attachment/hookEvent")
                    .and_then(Value::as_str)
                    == Some("Stop");
            goes_on.then_some(Entry::Prompt)
        }
        Some("assistant") => {
            let text = text_of(&value);
            Some(Entry::Assistant {
                id: value
                    .pointer("/message/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                api_error: api_error_of(&value, &text),
                text,
                tool_uses: tool_uses_of(&value),
                unlisted_calls: 0,
            })
        }
        Some("user") => {
            let content = value.pointer("/message/content");
            let is_tool_result =
                |b: &Value| b.get("type").and_then(Value::as_str) == Some("tool_result");
            match content {
                Some(Value::Array(blocks)) if blocks.iter().all(is_tool_result) => {
                    let changed = edit_changed(value.get("toolUseResult"));
                    Some(Entry::ToolResults {
                        outcomes: blocks
                            .iter()
                            .map(|block| ToolOutcome {
                                tool_use_id: block
                                    .get("tool_use_id")
                                    .and_then(Value::as_str)
                                    .map(str::to_owned),
                                error: (block.get("is_error").and_then(Value::as_bool)
                                    == Some(true))
                                .then(|| tool_result_text(block.get("content"))),
                                changed: if blocks.len() == 1 { changed } else { None },
                            })
                            .collect(),
                        overflow: false,
                    })
                }
                Some(Value::String(_) | Value::Array(_)) => Some(Entry::Prompt),
                _ => None,
            }
        }
        _ => None,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn api_error_of(line: &Value, text: &str) -> Option<ApiErrorMessage> {
    let flagged = line.get("isApiErrorMessage").and_then(Value::as_bool) == Some(true);
    let synthetic = line.pointer("/message/model").and_then(Value::as_str) == Some("<synthetic>")
        && line.get("error").is_some();
    if !(flagged || synthetic) {
        return None;
    }
    let status = line
        .get("apiErrorStatus")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .or_else(|| {
            let rest = text.trim_start().strip_prefix("API Error: ")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            (digits.len() == 3).then(|| digits.parse().ok()).flatten()
        });
    Some(ApiErrorMessage {
        error: line.get("error").and_then(Value::as_str).map(str::to_owned),
        status,
    })
}

fn edit_changed(result: Option<&Value>) -> Option<bool> {
    let result = result?;
    if result.get("type").and_then(Value::as_str) == Some("create") {
        return Some(true);
    }
    match result.get("structuredPatch") {
        Some(Value::Array(hunks)) => Some(!hunks.is_empty()),
        _ => None,
    }
}

fn tool_uses_of(line: &Value) -> Vec<ToolUse> {
    let Some(Value::Array(blocks)) = line.pointer("/message/content") else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        .map(|b| {
            let name = b
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let edited_file = EDIT_TOOLS
                .iter()
                .find(|(tool, _)| *tool == name)
                .and_then(|(_, field)| b.pointer(&format!("/input/{field}")))
                .and_then(Value::as_str)
                .map(str::to_owned);
            // The reader keeps a command's first 1,024 bytes.
            let command = b
                .pointer("/input/command")
                .and_then(Value::as_str)
                .map(|c| {
                    let mut end = c.len().min(1024);
                    while !c.is_char_boundary(end) {
                        end -= 1;
                    }
                    c[..end].to_owned()
                });
            ToolUse {
                id: b.get("id").and_then(Value::as_str).map(str::to_owned),
                name,
                edited_file,
                command,
            }
        })
        .collect()
}

/// A failing result's text, cut where the reader cuts it.
fn tool_result_text(content: Option<&Value>) -> String {
    let text = match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    text.chars().take(MAX_TOOL_ERROR_CHARS).collect()
}

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

/// A line the reader reads otherwise than a whole JSON tree of it: both
/// readings.
#[derive(Debug, thiserror::Error)]
#[error("streamed {streamed:?}\ntree     {tree:?}")]
pub struct ReadingsDiffer {
    streamed: Option<Entry>,
    tree: Option<Entry>,
}

/// Whether the reader reads `line` as a whole JSON tree of it would: `Err`
/// shows both readings when not.
pub fn line_reading_agrees(line: &[u8]) -> Result<(), Box<ReadingsDiffer>> {
    let streamed = classify(line);
    let tree = classify_tree(line);
    if streamed == tree {
        Ok(())
    } else {
        Err(Box::new(ReadingsDiffer { streamed, tree }))
    }
}
