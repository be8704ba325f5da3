//! The transcript reader with any bounds, and a reference reader that reads
//! the whole file forward, for property tests and fuzz targets. Not an API:
//! built only for tests and with the `fuzzing` feature.

use std::path::Path;

use serde_json::Value;

use super::{last_assistant_text_within, Limits, TranscriptError};

/// [`last_assistant_text`](super::last_assistant_text) with other bounds
/// than [`CHUNK_BYTES`](super::CHUNK_BYTES),
/// [`MAX_LINE_BYTES`](super::MAX_LINE_BYTES) and
/// [`MAX_SCAN_BYTES`](super::MAX_SCAN_BYTES). `chunk_bytes` must be at
/// least 1 and at most `max_line_bytes`, as the real bounds are.
pub fn last_assistant_text_with(
    path: &Path,
    chunk_bytes: usize,
    max_line_bytes: usize,
    max_scan_bytes: u64,
) -> Result<Option<String>, TranscriptError> {
    assert!(chunk_bytes >= 1 && chunk_bytes <= max_line_bytes);
    last_assistant_text_within(
        path,
        Limits {
            chunk_bytes,
            max_line_bytes,
            max_scan_bytes,
        },
    )
}

/// Reference: the text of the last main-conversation assistant message,
/// found by reading every line forward. Only the lines the backwards reader
/// can see count: those within the scanned tail (whole chunks from the end)
/// that start after a newline inside it, and no longer than the line limit.
/// Takes the bounds of [`last_assistant_text_with`].
pub fn reference(
    bytes: &[u8],
    chunk_bytes: usize,
    max_line_bytes: usize,
    max_scan_bytes: u64,
) -> Option<String> {
    let len = bytes.len() as u64;
    let chunks = max_scan_bytes.div_ceil(chunk_bytes as u64);
    let start = (len - chunks.saturating_mul(chunk_bytes as u64).min(len)) as usize;
    let visible = if start == 0 {
        bytes
    } else {
        match bytes[start..].iter().position(|&b| b == b'\n') {
            Some(nl) => &bytes[start + nl + 1..],
            None => &[],
        }
    };
    // The message being collected: its id and its parts, oldest first; and
    // whether a user line has come since (then the next line starts anew).
    let mut message: Option<(Option<String>, Vec<String>)> = None;
    let mut closed = false;
    for line in visible.split(|&b| b == b'\n') {
        if line.len() > max_line_bytes {
            continue;
        }
        let Ok(value) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if value.get("isSidechain") == Some(&Value::Bool(true)) {
            continue;
        }
        let id = match value.pointer("/message/id") {
            Some(Value::String(id)) => Some(id.clone()),
            _ => None,
        };
        match value.get("type") {
            Some(Value::String(t)) if t == "assistant" => match &mut message {
                Some((Some(current), parts)) if !closed && id.as_ref() == Some(current) => {
                    parts.push(texts(&value))
                }
                _ => {
                    message = Some((id, vec![texts(&value)]));
                    closed = false;
                }
            },
            Some(Value::String(t)) if t == "user" => closed = true,
            _ => {}
        }
    }
    message.map(|(_, parts)| {
        parts
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("\n")
    })
}

/// `message.content` as text: the string itself, or the `text` of its text blocks.
fn texts(line: &Value) -> String {
    let Some(content) = line.get("message").and_then(|m| m.get("content")) else {
        return String::new();
    };
    if let Value::String(s) = content {
        return s.clone();
    }
    let mut out = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        if block.get("type").and_then(Value::as_str) == Some("text") {
            if let Some(Value::String(text)) = block.get("text") {
                out.push(text.as_str());
            }
        }
    }
    out.join("\n")
}
