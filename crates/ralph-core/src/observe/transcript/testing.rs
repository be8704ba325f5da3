//! The transcript reader with any bounds, and a reference reader that reads
//! the whole file forward, for property tests and fuzz targets. Not an API:
//! built only for tests and with the `fuzzing` feature.

use std::path::Path;

use super::TranscriptError;
use super::{classify, read_iteration_tail_within, Entry, Iteration, IterationTail, Limits};

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
    let start = (len - chunks.saturating_mul(chunk_bytes as u64).min(len)) as usize;
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
