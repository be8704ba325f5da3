//! What the session spent since the last stop: model requests (distinct
//! assistant `message.id`s), their token `usage`, and the last API error
//! the client recorded, read forward from where the previous stop left off
//! ([`TranscriptCursor`]), so a stop costs what is new, never the whole file.
//!
//! The client writes one transcript line per content block of a message,
//! each with the message's id; a request is counted once, whichever lines of
//! it this read sees. Messages the client makes up itself (`"model":
//! "<synthetic>"`, such as the text of an API error) are not requests.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::time;
use crate::units::{PerMille, TokenUsage, Usd};

/// How much of one of the plan's usage windows (`five_hour`, `seven_day`)
/// is used, as the client last reported it (a subscription's
/// `rate_limit_event`), and when the window resets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowUse {
    /// The share used.
    pub utilization: PerMille,
    /// When the window resets, when the client said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resets_at: Option<time::Timestamp>,
    /// When it was seen.
    pub seen_at: time::Timestamp,
}

impl WindowUse {
    /// `85% used (seen …, resets …)`, for what the person reads.
    pub fn describe(&self) -> String {
        let resets = self
            .resets_at
            .map(|t| format!(", resets {t}"))
            .unwrap_or_default();
        format!(
            "{} used (seen {}{resets})",
            self.utilization.percent(),
            self.seen_at
        )
    }
}

/// How far the session's transcript has been read for usage, so that each
/// stop reads only what is new.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptCursor {
    /// The transcript.
    pub path: std::path::PathBuf,
    /// Bytes read: the start of the first line not counted yet.
    pub offset: u64,
    /// The last model request counted (a message written over several lines
    /// is one request, even when a stop falls between its lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_id: Option<String>,
    /// That request's usage as counted so far.
    #[serde(default, skip_serializing_if = "TokenUsage::is_zero")]
    pub last_message_usage: TokenUsage,
}

/// Most new bytes one reading takes in; a larger gap between two stops is
/// read from its last this many bytes, and what lies before is not counted.
pub const MAX_NEW_BYTES: u64 = 64 * 1024 * 1024;
/// Most bytes read of a transcript the loop has not read before (its first
/// stop, perhaps in a long session): the end of it, where the loop's own
/// requests are; lines dated before `since` are not counted.
pub const MAX_FIRST_BYTES: u64 = 16 * 1024 * 1024;
/// Longest line read; a longer one is skipped.
const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;
const CHUNK_BYTES: usize = 256 * 1024;

/// What the new part of the transcript says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReading {
    /// When each new request was answered (seconds since the epoch), oldest first.
    pub calls: Vec<u64>,
    /// Their tokens.
    pub tokens: TokenUsage,
    /// Where the next reading starts.
    pub cursor: Option<TranscriptCursor>,
    /// The last `api_error` line among the new lines.
    pub last_api_error: Option<ApiErrorLine>,
    /// True when the backlog was larger than [`MAX_NEW_BYTES`] and its start was skipped.
    pub skipped: bool,
    /// The session's total cost in US dollars from the last `cost-state`
    /// line among the new lines (2.1 writes one when a process of the
    /// session ends, SIGTERM included): what a run that ended without its
    /// result object cost. Only finite amounts from 0 to a million.
    pub session_cost: Option<Usd>,
    /// What the new tokens cost at their models' list prices (requests on
    /// a model without one count nothing): the live cost until the client
    /// reports its own.
    pub estimated: Usd,
}

/// A `{"type":"system","subtype":"api_error",…}` line: the client writes one
/// for each failed request it retries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiErrorLine {
    /// The HTTP status.
    pub status: Option<u16>,
    /// The API's usage-limit reset time (seconds since the epoch), when it sent one.
    pub resets_at: Option<u64>,
    /// The error text the client shows.
    pub message: Option<String>,
    /// How long the client waited before it retried (its `retryInMs`,
    /// whole seconds rounded up): the API's `retry-after` when it sent one.
    pub retry_in_secs: Option<u64>,
}

/// The longest a usage window can take to reset from now (the weekly
/// window, with a day to spare): a later reset time is not believed.
pub const MAX_RESET_AHEAD_SECS: u64 = 8 * 24 * 3600;

/// A reset time read from a transcript (which the agent can write) as a
/// whole number of seconds since the epoch, or `None` when it is not one a
/// real usage window has: not finite, not positive, or more than
/// [`MAX_RESET_AHEAD_SECS`] after `now` (1e300 or the year 3000 would
/// overflow a clock or stall the loop for ever). A time already past is
/// kept: the supervisor resumes at once.
pub fn plausible_reset(resets_at: f64, now: u64) -> Option<u64> {
    let latest = now.saturating_add(MAX_RESET_AHEAD_SECS);
    // In range, checked first: the fraction is dropped.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (resets_at.is_finite() && resets_at > 0.0 && resets_at <= latest as f64)
        .then_some(resets_at as u64)
}

#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: Option<String>,
    subtype: Option<String>,
    timestamp: Option<String>,
    message: Option<Message>,
    error: Option<ApiError>,
    #[serde(rename = "retryInMs")]
    retry_in_ms: Option<f64>,
    #[serde(rename = "totalCostUSD")]
    total_cost_usd: Option<f64>,
}

#[derive(Deserialize)]
struct Message {
    id: Option<String>,
    model: Option<String>,
    usage: Option<Usage>,
}

// The fields are named as the Messages API's `usage` names them.
#[derive(Deserialize, Default, Clone, Copy)]
#[allow(clippy::struct_field_names)]
struct Usage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl Usage {
    fn tokens(self) -> TokenUsage {
        TokenUsage {
            input: self.input_tokens.unwrap_or(0),
            output: self.output_tokens.unwrap_or(0),
            cache_read: self.cache_read_input_tokens.unwrap_or(0),
            cache_creation: self.cache_creation_input_tokens.unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct ApiError {
    status: Option<u16>,
    #[serde(rename = "rateLimits")]
    rate_limits: Option<RateLimits>,
    formatted: Option<String>,
    message: Option<String>,
}

#[derive(Deserialize)]
struct RateLimits {
    #[serde(rename = "resetsAt")]
    resets_at: Option<f64>,
}

/// The largest of each count: a message's lines carry its usage as it
/// stood when each was written.
fn max_of(a: TokenUsage, b: TokenUsage) -> TokenUsage {
    TokenUsage {
        input: a.input.max(b.input),
        output: a.output.max(b.output),
        cache_read: a.cache_read.max(b.cache_read),
        cache_creation: a.cache_creation.max(b.cache_creation),
    }
}

fn minus(a: TokenUsage, b: TokenUsage) -> TokenUsage {
    TokenUsage {
        input: a.input.saturating_sub(b.input),
        output: a.output.saturating_sub(b.output),
        cache_read: a.cache_read.saturating_sub(b.cache_read),
        cache_creation: a.cache_creation.saturating_sub(b.cache_creation),
    }
}

/// Reads what `path` holds past `cursor` (from its start when the cursor is
/// for another file, or the file is shorter than the cursor's offset: a
/// new transcript). `now` dates requests whose lines carry no timestamp.
pub fn read_new(
    path: &Path,
    cursor: Option<&TranscriptCursor>,
    now: u64,
) -> io::Result<UsageReading> {
    read_new_since(path, cursor, now, 0)
}

/// [`read_new`], counting only requests dated at or after `since` (seconds
/// since the epoch; the loop's start) when the transcript is new to the loop.
pub fn read_new_since(
    path: &Path,
    cursor: Option<&TranscriptCursor>,
    now: u64,
    since: u64,
) -> io::Result<UsageReading> {
    let mut file = crate::files::open_without_waiting(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other("not a regular file"));
    }
    let len = meta.len();
    let same_file = cursor.filter(|c| c.path == path && c.offset <= len);
    let mut start = same_file.map_or(0, |c| c.offset);
    let bound = if same_file.is_some() {
        MAX_NEW_BYTES
    } else {
        MAX_FIRST_BYTES
    };
    let since = if same_file.is_some() { 0 } else { since };
    let mut skipped = false;
    if len - start > bound {
        start = len - bound;
        skipped = true;
    }
    let previous_id = same_file.and_then(|c| c.last_message_id.clone());
    let previous_usage = same_file.map(|c| c.last_message_usage).unwrap_or_default();
    let mut requests = Requests::new(previous_id, previous_usage);
    let mut last_api_error = None;
    let mut session_cost = None;
    let mut visit = |line: &[u8]| {
        let is_assistant = super::bytes::contains(line, b"\"assistant\"");
        let is_api_error = super::bytes::contains(line, b"\"api_error\"");
        let is_cost = super::bytes::contains(line, b"\"cost-state\"");
        if !(is_assistant || is_api_error || is_cost) {
            return;
        }
        let Ok(parsed) = serde_json::from_slice::<Line>(line) else {
            return;
        };
        match (parsed.kind.as_deref(), parsed.subtype.as_deref()) {
            (Some("assistant"), _) => {
                let Some(message) = parsed.message else {
                    return;
                };
                if message.model.as_deref() == Some("<synthetic>") {
                    return;
                }
                let Some(id) = message.id else { return };
                let tokens = message.usage.unwrap_or_default().tokens();
                let model = message.model;
                let at = parsed
                    .timestamp
                    .as_deref()
                    .and_then(time::epoch_secs)
                    .unwrap_or(now);
                if at < since {
                    return;
                }
                requests.line(id, at, tokens, model.as_deref());
            }
            (Some("cost-state"), _) => {
                if let Some(total) = parsed
                    .total_cost_usd
                    .filter(|t| t.is_finite() && (0.0..=1_000_000.0).contains(t))
                {
                    session_cost = Some(Usd::from_dollars(total));
                }
            }
            (Some("system"), Some("api_error")) => {
                last_api_error = Some(api_error_line(parsed, now));
            }
            _ => {}
        }
    };
    let consumed = each_line(&mut file, start, len, skipped, &mut visit)?;

    let (calls, tokens, estimated, last_message_id, last_message_usage) = requests.finish();
    Ok(UsageReading {
        calls,
        tokens,
        last_api_error,
        skipped,
        session_cost,
        estimated,
        cursor: Some(TranscriptCursor {
            path: path.to_path_buf(),
            offset: consumed,
            last_message_id,
            last_message_usage,
        }),
    })
}

/// Reads `file` from `start` to `len`, giving `visit` each whole line of
/// at most `MAX_LINE_BYTES` (a longer one is skipped whole), the first one
/// skipped with `skip_first` (cut when the start was moved). Returns the
/// offset just past the last whole line: where the next reading starts.
fn each_line(
    file: &mut std::fs::File,
    start: u64,
    len: u64,
    skip_first: bool,
    visit: &mut dyn FnMut(&[u8]),
) -> io::Result<u64> {
    file.seek(SeekFrom::Start(start))?;
    let mut pending: Vec<u8> = Vec::new();
    let mut oversize = false;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut pos = start;
    let mut skip_first = skip_first;
    let mut consumed = start;
    while pos < len {
        let want = usize::try_from(len - pos).map_or(CHUNK_BYTES, |left| left.min(CHUNK_BYTES));
        let got = file.read(&mut chunk[..want])?;
        if got == 0 {
            break;
        }
        pos += got as u64;
        let mut rest = &chunk[..got];
        while let Some(nl) = super::bytes::find_byte(b'\n', rest) {
            let piece = &rest[..nl];
            if skip_first {
                skip_first = false;
            } else if !oversize {
                if pending.is_empty() {
                    visit(piece);
                } else {
                    pending.extend_from_slice(piece);
                    if pending.len() <= MAX_LINE_BYTES {
                        visit(&pending);
                    }
                }
            }
            pending.clear();
            oversize = false;
            consumed = pos - (rest.len() - nl - 1) as u64;
            rest = &rest[nl + 1..];
        }
        if !oversize {
            if pending.len() + rest.len() > MAX_LINE_BYTES {
                oversize = true;
                pending.clear();
            } else {
                pending.extend_from_slice(rest);
            }
        }
    }

    Ok(consumed)
}

/// What a client's `api_error` line says: when it retries, the status, the
/// rate limit's reset (when plausible) and the message.
fn api_error_line(parsed: Line, now: u64) -> ApiErrorLine {
    let error = parsed.error;
    let retry_in_secs = parsed
        .retry_in_ms
        .filter(|ms| ms.is_finite() && *ms > 0.0 && *ms <= 86_400_000.0)
        // Positive and at most a day: the cast cannot truncate.
        .map(|ms| {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let secs = (ms / 1000.0).ceil() as u64;
            secs
        });
    ApiErrorLine {
        retry_in_secs,
        status: error.as_ref().and_then(|e| e.status),
        resets_at: error
            .as_ref()
            .and_then(|e| e.rate_limits.as_ref())
            .and_then(|r| r.resets_at)
            .and_then(|t| plausible_reset(t, now)),
        message: error.and_then(|e| e.formatted.or(e.message)),
    }
}

/// How many of the latest requests' ids are remembered: a message's lines
/// are written one after another, so an id seen again is one of these; an
/// id seen again only after this many others would be counted twice.
const RECENT_IDS: usize = 4096;

/// The requests of one reading, counted as their lines come: each new id is
/// a call with its usage, a repeated one adds only what its usage grew. Only
/// the hashes of the latest [`RECENT_IDS`] ids are kept, so a reading holds
/// a few hundred KiB besides the calls' times, whatever the transcript.
struct Requests {
    hasher: RandomState,
    /// The latest ids' hashes, with the usage counted for each so far.
    counted: HashMap<u64, TokenUsage>,
    recent: VecDeque<u64>,
    calls: Vec<u64>,
    tokens: TokenUsage,
    /// What the counted tokens cost at list prices.
    estimated: Usd,
    /// The previous reading's last request, and its usage counted then: it
    /// continues when it is the first id of this reading.
    previous: Option<(String, TokenUsage)>,
    any: bool,
    /// The last new request of this reading, its hash, and its usage counted.
    last: Option<(String, u64, TokenUsage)>,
}

impl Requests {
    fn new(previous_id: Option<String>, previous_usage: TokenUsage) -> Requests {
        Requests {
            hasher: RandomState::new(),
            counted: HashMap::new(),
            recent: VecDeque::new(),
            calls: Vec::new(),
            tokens: TokenUsage::default(),
            estimated: Usd::default(),
            previous: previous_id.map(|id| (id, previous_usage)),
            any: false,
            last: None,
        }
    }

    /// A line of request `id`, answered at `at`, with the message's usage as
    /// it stood when the line was written.
    fn line(&mut self, id: String, at: u64, tokens: TokenUsage, model: Option<&str>) {
        let hash = self.hasher.hash_one(&id);
        if let Some(counted) = self.counted.get_mut(&hash) {
            let grown = max_of(*counted, tokens);
            let new = minus(grown, *counted);
            *counted = grown;
            if let Some((_, last_hash, usage)) = &mut self.last
                && *last_hash == hash
            {
                *usage = grown;
            }
            self.count(new, model);
            return;
        }
        let continued = match &self.previous {
            Some((previous, usage)) if !self.any && *previous == id => Some(*usage),
            _ => None,
        };
        self.any = true;
        let counted = if let Some(before) = continued {
            // What the previous reading counted of it is not counted again.
            let grown = max_of(before, tokens);
            self.count(minus(grown, before), model);
            grown
        } else {
            self.count(tokens, model);
            self.calls.push(at);
            tokens
        };
        if self.recent.len() >= RECENT_IDS
            && let Some(oldest) = self.recent.pop_front()
        {
            self.counted.remove(&oldest);
        }
        self.recent.push_back(hash);
        self.counted.insert(hash, counted);
        self.last = Some((id, hash, counted));
    }

    /// Counts `new` tokens of a request on `model`.
    fn count(&mut self, new: TokenUsage, model: Option<&str>) {
        self.tokens.add(&new);
        let cost = model.and_then(|m| new.cost_on(m)).unwrap_or_default();
        self.estimated = Usd(self.estimated.0.saturating_add(cost.0));
    }

    /// The calls' times, the tokens, their cost at list prices, and the
    /// last request with its usage.
    fn finish(self) -> (Vec<u64>, TokenUsage, Usd, Option<String>, TokenUsage) {
        let (last_id, last_usage) = match (self.last, self.previous) {
            (Some((id, _, usage)), _) => (Some(id), usage),
            (None, Some((id, usage))) => (Some(id), usage),
            (None, None) => (None, TokenUsage::default()),
        };
        (self.calls, self.tokens, self.estimated, last_id, last_usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_reset_a_real_window_can_have_is_believed() {
        let now = 1_790_000_000;
        for (raw, want) in [
            (1_790_003_600.0, Some(1_790_003_600)),
            (1_789_000_000.0, Some(1_789_000_000)),
            (
                (now + MAX_RESET_AHEAD_SECS) as f64,
                Some(now + MAX_RESET_AHEAD_SECS),
            ),
            ((now + MAX_RESET_AHEAD_SECS + 1) as f64, None),
            (32_503_680_000.0, None),
            (1e300, None),
            (f64::INFINITY, None),
            (f64::NAN, None),
            (-5.0, None),
            (0.0, None),
        ] {
            assert_eq!(plausible_reset(raw, now), want, "{raw}");
        }
    }
    use std::fs::File;
    use std::io::Write;
    use tempfile::TempDir;

    fn assistant(id: &str, at: &str, input: u64, output: u64) -> String {
        format!(
            r#"{{"type":"assistant","timestamp":"{at}","message":{{"id":"{id}","model":"claude-opus-5-5","content":[{{"type":"text","text":"hi"}}],"usage":{{"input_tokens":{input},"output_tokens":{output},"cache_read_input_tokens":5,"cache_creation_input_tokens":0}}}}}}"#
        ) + "\n"
    }

    fn at(t: &str) -> u64 {
        time::parse_rfc3339(t)
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn counts_each_request_once_and_reads_only_what_is_new() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut f = File::create(&path).unwrap();
        write!(
            f,
            "{}{}{}{}",
            r#"{"type":"user","message":{"role":"user","content":"go"}}"#.to_string() + "\n",
            assistant("m1", "2026-11-22T10:00:00Z", 100, 1),
            assistant("m1", "2026-11-22T10:00:01Z", 100, 20),
            assistant("m2", "2026-11-22T10:00:30Z", 200, 7),
        )
        .unwrap();
        let first = read_new(&path, None, 0).unwrap();
        assert_eq!(
            first.calls,
            [at("2026-11-22T10:00:00Z"), at("2026-11-22T10:00:30Z")]
        );
        assert_eq!(
            first.tokens,
            TokenUsage {
                input: 300,
                output: 27,
                cache_read: 10,
                cache_creation: 0
            }
        );
        let cursor = first.cursor.clone().unwrap();
        assert_eq!(cursor.offset, std::fs::metadata(&path).unwrap().len());

        // Nothing new: nothing counted.
        let again = read_new(&path, Some(&cursor), 0).unwrap();
        assert_eq!(again.calls, Vec::<u64>::new());
        assert!(again.tokens.is_zero());

        // m2 goes on over a later line (its usage grew), then m3; a
        // synthetic message and a half-written line are not requests yet.
        let synthetic = r#"{"type":"assistant","message":{"id":"x","model":"<synthetic>","content":[{"type":"text","text":"API Error: 529"}]}}"#;
        let half = r#"{"type":"assistant","message":{"id":"m4""#;
        let more = assistant("m2", "2026-11-22T10:00:31Z", 200, 9)
            + &assistant("m3", "2026-11-22T10:01:00Z", 50, 3)
            + synthetic
            + "\n"
            + half;
        f.write_all(more.as_bytes()).unwrap();
        let next = read_new(&path, Some(&cursor), 0).unwrap();
        assert_eq!(next.calls, [at("2026-11-22T10:01:00Z")]);
        assert_eq!(next.tokens.output, 2 + 3, "only what m2 grew by, plus m3");
        assert_eq!(next.tokens.input, 50);
        let len = std::fs::metadata(&path).unwrap().len();
        let cut = half.len() as u64;
        assert_eq!(
            next.cursor.unwrap().offset,
            len - cut,
            "stops before the cut line"
        );
    }

    #[test]
    fn requests_are_dated_by_the_clients_timestamps_and_the_loops_start() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        // As the client writes them: milliseconds in the timestamp.
        std::fs::write(
            &path,
            assistant("m0", "2026-11-22T09:59:59.250Z", 1, 1)
                + &assistant("m1", "2026-11-22T10:00:30.512Z", 1, 1),
        )
        .unwrap();
        let since = at("2026-11-22T10:00:00Z");
        let reading = read_new_since(&path, None, 0, since).unwrap();
        assert_eq!(
            reading.calls,
            [at("2026-11-22T10:00:30Z")],
            "before the loop: not its"
        );
    }

    #[test]
    fn the_last_cost_state_line_is_the_session_s_cost() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"type":"cost-state","sessionId":"s","totalCostUSD":0.00036}"#,
                "\n",
                r#"{"type":"cost-state","sessionId":"s","totalCostUSD":1e300}"#,
                "\n",
                r#"{"type":"cost-state","sessionId":"s","totalCostUSD":-1}"#,
                "\n",
                r#"{"type":"cost-state","sessionId":"s","totalCostUSD":"x"}"#,
                "\n",
                r#"{"type":"cost-state","sessionId":"s","totalCostUSD":0.00066}"#,
                "\n",
                r#"{"type":"cost-state","sessionId":"s"}"#,
                "\n"
            ),
        )
        .unwrap();
        let reading = read_new(&path, None, 0).unwrap();
        assert_eq!(reading.session_cost, Some(Usd::from_dollars(0.00066)));
        // Past the cursor only: a total already read is not seen again.
        let again = read_new(&path, reading.cursor.as_ref(), 0).unwrap();
        assert_eq!(again.session_cost, None);
    }

    #[test]
    fn api_error_lines_and_other_files() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"type":"system","subtype":"api_error","error":{"status":429,"formatted":"rate limited","rateLimits":{"rateLimitType":"five_hour","resetsAt":1790000000}},"retryAttempt":1,"maxRetries":1}"#,
                "\n",
                r#"{"type":"system","subtype":"api_error","error":{"status":529},"retryAttempt":1}"#,
                "\n"
            ),
        )
        .unwrap();
        let reading = read_new(&path, None, 0).unwrap();
        assert_eq!(
            reading.last_api_error,
            Some(ApiErrorLine {
                status: Some(529),
                resets_at: None,
                message: None,
                retry_in_secs: None,
            })
        );
        // A 429 whose retry-after the client waited (75 s and its jitter).
        std::fs::write(
            &path,
            concat!(
                r#"{"type":"system","subtype":"api_error","error":{"status":429},"retryInMs":75342.6,"retryAttempt":1,"maxRetries":1}"#,
                "\n"
            ),
        )
        .unwrap();
        let reading = read_new(&path, None, 0).unwrap();
        let retry = reading.last_api_error.and_then(|e| e.retry_in_secs);
        assert_eq!(retry, Some(76));
        // A cursor of another file, or past this file's end, starts over.
        let elsewhere = TranscriptCursor {
            path: dir.path().join("other.jsonl"),
            offset: 10,
            ..TranscriptCursor::default()
        };
        let from_start = read_new(&path, Some(&elsewhere), 0).unwrap();
        assert!(from_start.last_api_error.is_some());
        let beyond = TranscriptCursor {
            path: path.clone(),
            offset: 1 << 40,
            ..TranscriptCursor::default()
        };
        assert!(
            read_new(&path, Some(&beyond), 0)
                .unwrap()
                .last_api_error
                .is_some()
        );
        assert!(read_new(&dir.path().join("missing"), None, 0).is_err());
    }

    /// The counting as it was before ids were forgotten: every id of the
    /// reading kept, in the order first seen, then summed.
    fn reference(
        lines: &[(String, u64, TokenUsage)],
        previous: Option<(String, TokenUsage)>,
    ) -> (Vec<u64>, TokenUsage, Option<String>, TokenUsage) {
        let mut order: Vec<String> = Vec::new();
        let mut seen: HashMap<String, (u64, TokenUsage)> = HashMap::new();
        for (id, at, tokens) in lines {
            if let Some((_, usage)) = seen.get_mut(id) {
                *usage = max_of(*usage, *tokens);
            } else {
                order.push(id.clone());
                seen.insert(id.clone(), (*at, *tokens));
            }
        }
        let (mut previous_id, previous_usage) = previous.unzip();
        let mut previous_usage = previous_usage.unwrap_or_default();
        let (mut calls, mut total) = (Vec::new(), TokenUsage::default());
        for id in &order {
            let (at, usage) = seen[id];
            if previous_id.as_deref() == Some(id.as_str()) {
                total.add(&minus(usage, previous_usage));
                previous_usage = max_of(previous_usage, usage);
                continue;
            }
            calls.push(at);
            total.add(&usage);
            previous_id = Some(id.clone());
            previous_usage = usage;
        }
        (calls, total, previous_id, previous_usage)
    }

    fn counted(
        lines: &[(String, u64, TokenUsage)],
        previous: Option<(String, TokenUsage)>,
    ) -> (Vec<u64>, TokenUsage, Option<String>, TokenUsage) {
        let (id, usage) = previous.unzip();
        let mut requests = Requests::new(id, usage.unwrap_or_default());
        for (id, at, tokens) in lines {
            requests.line(id.clone(), *at, *tokens, None);
        }
        let (calls, tokens, _, id, usage) = requests.finish();
        (calls, tokens, id, usage)
    }

    fn usage_strategy() -> impl proptest::strategy::Strategy<Value = TokenUsage> {
        use proptest::prelude::*;
        (0..50u64, 0..50u64, 0..5u64, 0..5u64).prop_map(|(i, o, r, c)| TokenUsage {
            input: i,
            output: o,
            cache_read: r,
            cache_creation: c,
        })
    }

    proptest::proptest! {
        /// Counting as lines come, with a bounded memory of ids, is the
        /// same as counting over every id kept, while a message's lines
        /// are within the latest ids.
        #[test]
        fn streamed_counting_matches_keeping_every_id(
            lines in proptest::collection::vec(("m[0-5]", 0..100u64, usage_strategy()), 0..40),
            previous in proptest::option::of(("m[0-5]", usage_strategy())),
        ) {
            proptest::prop_assert_eq!(
                counted(&lines, previous.clone()),
                reference(&lines, previous)
            );
        }
    }

    #[test]
    fn an_id_is_remembered_among_the_latest_ones_only() {
        let one = TokenUsage {
            input: 1,
            ..TokenUsage::default()
        };
        let mut lines: Vec<(String, u64, TokenUsage)> =
            (0..RECENT_IDS).map(|i| (format!("m{i}"), 7, one)).collect();
        // m0 again while it is among the latest ids: the same request.
        lines.push(("m0".into(), 7, one));
        let (calls, tokens, last, _) = counted(&lines, None);
        assert_eq!(calls.len(), RECENT_IDS);
        assert_eq!(tokens.input, RECENT_IDS as u64);
        assert_eq!(
            last.as_deref(),
            Some(format!("m{}", RECENT_IDS - 1).as_str())
        );
        // One more id pushes m0 out: seen again after that, it counts again.
        lines.push(("new".into(), 7, one));
        lines.push(("m0".into(), 7, one));
        let (calls, _, last, _) = counted(&lines, None);
        assert_eq!(calls.len(), RECENT_IDS + 2);
        assert_eq!(last.as_deref(), Some("m0"));
    }
}
