//! A scripted mock of the Anthropic Messages API for end-to-end tests that run
//! the real Claude Code client against `127.0.0.1`.
//!
//! The mock listens on an ephemeral port. Every `POST /v1/messages` request is
//! recorded; the main conversation (the request whose `tools` include `Write`)
//! is answered by the test's script, every side request (titles, sub-agent
//! warm-ups, topic checks) gets a short `"ok"` text. The reply is chosen from
//! the request alone (the number of assistant messages it already carries), so
//! side requests cannot shift the script.
//!
//! A script answer is a message (text, tool calls, or several blocks), with
//! the token `usage` it reports ([`Reply::with_usage`]), or an API error with
//! its HTTP status, headers and the Anthropic error body ([`Reply::ApiError`],
//! [`Reply::overloaded`], [`Reply::rate_limited`], [`Reply::unauthorized`]).
//! [`MockApi::start_with`] takes [`MockOptions`]: a reply for the side
//! requests too (e.g. the same 401), a pause between streamed events. Every
//! request is recorded with its arrival time and the status answered.
//!
//! Point the client at it with `ANTHROPIC_BASE_URL=<base_url()>`.
//!
//! Observed with the real clients (2.0.77 on Node, 2.1.330 native):
//! - both only call `POST /v1/messages?beta=true`, streaming, with
//!   `Content-Length` bodies (no compression, no chunking) on keep-alive
//!   connections; other paths get a 404 JSON error, `count_tokens` a number;
//! - 2.1.330 sends only main-conversation requests; 2.0.77 adds four
//!   one-message side requests (sub-agent "Warmup"s, a tool-less topic check);
//! - after a Stop hook block, the next main request ends with a user message
//!   `"Stop hook feedback:\n<reason>"` (see [`stop_hook_feedback`]); 2.1.330
//!   also adds a `"role": "system"` message
//!   `Stop hook blocking error from command: "<command>": <reason>`;
//! - both retry a 401, 429 or 529 `CLAUDE_CODE_MAX_RETRIES` times, after a
//!   short backoff (about 0.5 s, then 1.2 s) or, when a 429 sends
//!   `retry-after`, after that many seconds (2.1.330 adds up to about a fifth
//!   as jitter); neither waits for `anthropic-ratelimit-unified-reset`. 2.0.77 follows a failed streaming
//!   request at once with a non-streaming one (no `stream` field), which is
//!   not counted as a retry: with `CLAUDE_CODE_MAX_RETRIES=1` a failing turn
//!   is 2 main requests on 2.1.330 and 3 on 2.0.77;
//! - a message of several blocks becomes one transcript line per block, all
//!   with the message's `id`, each with its own `timestamp` and a `usage`.
//!   2.1.330 gives every line the final `usage` and `stop_reason`. 2.0.77
//!   writes a line as its block ends: on a paced stream
//!   ([`MockOptions::event_gap`]) its lines keep `message_start`'s usage
//!   (input and cache counts right, `output_tokens` not the final count) and
//!   `stop_reason: null`; sent all at once, they may carry the final values.

use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often an idle connection thread wakes up to check for shutdown.
const POLL: Duration = Duration::from_millis(100);
/// An idle keep-alive connection is closed after this long without data.
const IDLE_LIMIT: Duration = Duration::from_secs(120);
/// A response write that blocks longer than this fails.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests larger than this are refused (protects against a runaway client).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// What the scripted model answers on one main-conversation turn.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A final text answer (`stop_reason` `end_turn`).
    Text(String),
    /// A single tool call (`stop_reason` `tool_use`), e.g. name "Write" with
    /// {"`file_path","content`"} or "Bash" with {"command","description"}.
    ToolUse {
        /// The tool's name as the client registers it (`Write`, `Bash`, ...).
        name: String,
        /// The tool's input object.
        input: Value,
    },
    /// Several content blocks in one assistant message, in order (e.g. a
    /// text, then a tool call); each must be a `Text` or a `ToolUse`. The
    /// stop reason is `tool_use` when any block is a tool call.
    Blocks(Vec<Reply>),
    /// An HTTP error instead of a message: `status`, the extra `headers`, and
    /// the body `{"type":"error","error":{"type":error_type,"message":message}}`
    /// as `application/json` (never streamed).
    ApiError {
        /// The HTTP status (e.g. 401, 429, 529).
        status: u16,
        /// Extra response headers (name, value), e.g. `retry-after`.
        headers: Vec<(String, String)>,
        /// The Anthropic error type, e.g. `overloaded_error`.
        error_type: String,
        /// The error's human-readable message.
        message: String,
    },
    /// `reply` (a message, not an error) reporting `usage` instead of the
    /// default token counts; see [`Reply::with_usage`].
    WithUsage {
        /// The message answered.
        reply: Box<Reply>,
        /// The token counts it reports.
        usage: Usage,
    },
    /// `reply` (a message, not an error) sent with extra response
    /// `headers`; see [`Reply::with_utilization`].
    WithHeaders {
        /// The message answered.
        reply: Box<Reply>,
        /// Extra response headers (name, value).
        headers: Vec<(String, String)>,
    },
}

/// The token counts a message reports in `usage`. Streamed, `message_start`
/// carries the input and cache counts with `output_tokens` at most 1, and
/// `message_delta` carries all four with the final `output_tokens`.
///
/// Without [`Reply::with_usage`] a message reports 10 input tokens, no cache
/// tokens, and a quarter of its content's length (plus one) as output tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `input_tokens`.
    pub input_tokens: u64,
    /// `output_tokens` (the final count).
    pub output_tokens: u64,
    /// `cache_read_input_tokens`.
    pub cache_read_input_tokens: u64,
    /// `cache_creation_input_tokens`.
    pub cache_creation_input_tokens: u64,
}

impl Usage {
    /// `input` and `output` tokens and no cache tokens, as a reply reports
    /// a plain turn.
    pub fn tokens(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    /// The `usage` JSON object with these counts.
    pub fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "cache_read_input_tokens": self.cache_read_input_tokens,
        })
    }
}

impl Reply {
    /// Shorthand for [`Reply::Text`].
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// A `Write` tool call creating (or overwriting) `file_path` with `content`.
    pub fn write(file_path: impl Into<String>, content: impl Into<String>) -> Reply {
        Reply::ToolUse {
            name: "Write".to_string(),
            input: json!({ "file_path": file_path.into(), "content": content.into() }),
        }
    }

    /// A `Bash` tool call running `command`.
    pub fn bash(command: impl Into<String>) -> Reply {
        Reply::ToolUse {
            name: "Bash".to_string(),
            input: json!({ "command": command.into(), "description": "Run a command" }),
        }
    }

    /// This message reporting `usage` (see [`Usage`]).
    pub fn with_usage(self, usage: Usage) -> Reply {
        Reply::WithUsage {
            reply: Box::new(self),
            usage,
        }
    }

    /// This message sent with the headers a subscription's usage window
    /// `window` (`5h`, `7d`) carries: `anthropic-ratelimit-unified-<window>-utilization`
    /// (`utilization`, 0 to 1), `…-<window>-reset` (`reset_epoch_secs`),
    /// `…-<window>-status` (`allowed_warning` from 0.8, else `allowed`), and
    /// the top-level `…-unified-status`, `…-unified-reset` and
    /// `…-representative-claim`, as the API sends them on a success.
    pub fn with_utilization(self, window: &str, utilization: f64, reset_epoch_secs: u64) -> Reply {
        let claim = match window {
            "5h" => "five_hour",
            "7d" => "seven_day",
            other => other,
        };
        let status = if utilization >= 0.8 {
            "allowed_warning"
        } else {
            "allowed"
        };
        let header = |name: String, value: String| (name, value);
        let prefix = "anthropic-ratelimit-unified";
        Reply::WithHeaders {
            reply: Box::new(self),
            headers: vec![
                header(format!("{prefix}-status"), "allowed".into()),
                header(format!("{prefix}-reset"), reset_epoch_secs.to_string()),
                header(format!("{prefix}-representative-claim"), claim.into()),
                header(
                    format!("{prefix}-{window}-utilization"),
                    utilization.to_string(),
                ),
                header(
                    format!("{prefix}-{window}-reset"),
                    reset_epoch_secs.to_string(),
                ),
                header(format!("{prefix}-{window}-status"), status.into()),
            ],
        }
    }

    /// An API error with no extra headers.
    pub fn api_error(status: u16, error_type: &str, message: &str) -> Reply {
        Reply::ApiError {
            status,
            headers: Vec::new(),
            error_type: error_type.to_string(),
            message: message.to_string(),
        }
    }

    /// 529 `overloaded_error` "Overloaded", as the API answers when it is overloaded.
    pub fn overloaded() -> Reply {
        Reply::api_error(529, "overloaded_error", "Overloaded")
    }

    /// 429 `rate_limit_error` of a subscription's five-hour limit that resets
    /// at `reset_epoch_secs` (Unix seconds): the headers `retry-after` (the
    /// whole seconds from now until then, rounded up, at least 1; build the
    /// reply in the script so "now" is the request's time),
    /// `anthropic-ratelimit-unified-status: rejected`,
    /// `anthropic-ratelimit-unified-reset: <reset_epoch_secs>` and
    /// `anthropic-ratelimit-unified-representative-claim: five_hour`.
    pub fn rate_limited(reset_epoch_secs: u64) -> Reply {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let retry_after = reset_epoch_secs.saturating_sub(now).max(1);
        let header = |name: &str, value: String| (name.to_string(), value);
        Reply::ApiError {
            status: 429,
            headers: vec![
                header("retry-after", retry_after.to_string()),
                header("anthropic-ratelimit-unified-status", "rejected".into()),
                header(
                    "anthropic-ratelimit-unified-reset",
                    reset_epoch_secs.to_string(),
                ),
                header(
                    "anthropic-ratelimit-unified-representative-claim",
                    "five_hour".into(),
                ),
            ],
            error_type: "rate_limit_error".to_string(),
            message: "This request would exceed your account's rate limit. Please try again later."
                .to_string(),
        }
    }

    /// 401 `authentication_error` "invalid x-api-key".
    pub fn unauthorized() -> Reply {
        Reply::api_error(401, "authentication_error", "invalid x-api-key")
    }
}

/// One request the mock received.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The request target as sent, query included (e.g. `/v1/messages?beta=true`).
    pub path: String,
    /// The JSON body (`Value::Null` when empty, a `Value::String` when not JSON).
    pub body: Value,
    /// Whether this was a main-conversation request (its `tools` include `Write`).
    pub is_main: bool,
    /// The `turn` the script got: the assistant messages already in
    /// `body["messages"]`, or with [`MockOptions::in_order`] the main
    /// requests answered before this one.
    pub turn: usize,
    /// When the whole request had arrived.
    pub at: SystemTime,
    /// The HTTP status the mock answered (200 for a message).
    pub status: u16,
}

impl RecordedRequest {
    /// The model the request asked for (`""` when it named none).
    pub fn model(&self) -> &str {
        self.body["model"].as_str().unwrap_or("")
    }
}

/// How a [`MockApi`] treats requests beyond the script.
#[derive(Clone, Debug, Default)]
pub struct MockOptions {
    /// When set, every side request (not main) is answered with this reply
    /// instead of `"ok"`, e.g. [`Reply::unauthorized`] for a bad key that
    /// fails every request.
    pub side_reply: Option<Reply>,
    /// When non-zero, a streamed answer is sent one event at a time with this
    /// pause between events (a slow model) instead of all at once. Keep it
    /// short: a connection finishes its answer before the mock can stop.
    pub event_gap: Duration,
    /// The script's `turn` counts every main request the mock has answered
    /// (0 for the first), across sessions and client processes, instead of
    /// the assistant messages of the request's own conversation: a script
    /// for a loop of one process per iteration ([`MockApi::start_in_order`]).
    pub in_order: bool,
}

type Script = dyn Fn(usize, &Value) -> Reply + Send + Sync + 'static;

struct Shared {
    script: Box<Script>,
    options: MockOptions,
    log: Mutex<Vec<RecordedRequest>>,
    stop: AtomicBool,
    ids: AtomicU64,
    conns: Mutex<Vec<JoinHandle<()>>>,
    /// Main requests answered so far (for [`MockOptions::in_order`]).
    answered: AtomicU64,
}

/// A running mock Messages API server; stops when dropped.
pub struct MockApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl MockApi {
    /// Starts the server on 127.0.0.1:0. `script(turn, body)` is called for
    /// each main-conversation request; `turn` = number of assistant messages
    /// already in `body["messages"]` (0 for the first turn).
    pub fn start<F>(script: F) -> MockApi
    where
        F: Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    {
        MockApi::start_with(MockOptions::default(), script)
    }

    /// [`MockApi::start`], with `turn` counting every main request answered
    /// so far, whatever its session or process (see [`MockOptions::in_order`]).
    pub fn start_in_order<F>(script: F) -> MockApi
    where
        F: Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    {
        MockApi::start_with(
            MockOptions {
                in_order: true,
                ..MockOptions::default()
            },
            script,
        )
    }

    /// [`MockApi::start`] with `options` (e.g. side requests that fail too).
    pub fn start_with<F>(options: MockOptions, script: F) -> MockApi
    where
        F: Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("mock api: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mock api: local_addr");
        let shared = Arc::new(Shared {
            script: Box::new(script),
            options,
            log: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
            answered: AtomicU64::new(0),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("mock-api-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .expect("mock api: spawn accept thread");
        MockApi {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// e.g. "<http://127.0.0.1:41234>"
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in the order they were answered (requests
    /// on concurrent connections may differ from the order of their `at`).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log).clone()
    }

    /// Only the main-conversation requests.
    pub fn main_requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.log)
            .iter()
            .filter(|r| r.is_main)
            .cloned()
            .collect()
    }
}

impl Drop for MockApi {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(handle) = self.accept.take() {
            // Wake the blocking accept(); if that fails, leave the thread detached
            // rather than risk hanging in join().
            if TcpStream::connect_timeout(&self.addr, Duration::from_secs(1)).is_ok() {
                let _ = handle.join();
            }
        }
        // Connection threads poll the stop flag every POLL, so these joins are short.
        let conns = std::mem::take(&mut *lock(&self.shared.conns));
        for handle in conns {
            let _ = handle.join();
        }
    }
}

/// The text of every user-role message content (strings and text blocks and
/// `tool_result` contents) of a request body, for assertions like "the
/// re-injected prompt carried X".
pub fn user_texts(body: &Value) -> Vec<String> {
    message_texts(body, "user")
}

/// Every user-role text of the main conversation's requests to `api`, one
/// string: what the agent's tool calls gave back, for "the agent saw X".
pub fn tool_results(api: &MockApi) -> String {
    api.main_requests()
        .iter()
        .flat_map(|r| user_texts(&r.body))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The title of the queue item a conversation works: the line after
/// "## Your item: " in its user texts.
pub fn item_of(body: &Value) -> Option<String> {
    user_texts(body).iter().find_map(|text| {
        let rest = text.split("## Your item: ").nth(1)?;
        Some(rest.lines().next().unwrap_or_default().trim().to_string())
    })
}

/// The queue item's id, as its text spells it in the `RALPH_OUTCOME` line
/// (JSON, quotes included); `"?"` when the text names none.
pub fn item_id_of(body: &Value) -> String {
    user_texts(body)
        .iter()
        .find_map(|text| {
            let rest = text.split("\"itemId\": ").nth(1)?;
            Some(rest.split('}').next()?.trim().to_string())
        })
        .unwrap_or_else(|| "\"?\"".into())
}

/// The line an item's agent ends with to say how its item ended
/// (`terminal`, `skip`), naming the item the request's text gives.
pub fn outcome_line(status: &str, body: &Value) -> String {
    format!(
        "RALPH_OUTCOME: {{\"status\": \"{status}\", \"itemId\": {}}}",
        item_id_of(body)
    )
}

/// The text of every message of the given role in `body["messages"]`
/// (strings, text blocks, `tool_result` contents), in order. Client 2.1.330 also
/// sends `"role": "system"` messages inside `messages` (e.g. the
/// `Stop hook blocking error from command: "<cmd>": <reason>` notice).
pub fn message_texts(body: &Value, role: &str) -> Vec<String> {
    let mut out = Vec::new();
    let messages = body["messages"].as_array().map_or(&[][..], Vec::as_slice);
    for msg in messages.iter().filter(|m| m["role"] == role) {
        collect_texts(&msg["content"], &mut out);
    }
    out
}

/// The texts every Stop hook answer that continued the session fed back in
/// a request body, oldest first: the user messages `"Stop hook
/// feedback:\n<reason>"` that both client versions send after a block, and
/// the `<system-reminder>` 2.1.330 sends for a Stop hook's
/// `additionalContext` (`"Stop hook additional context: <text>"`).
pub fn stop_hook_feedback(body: &Value) -> Vec<String> {
    user_texts(body)
        .iter()
        .filter_map(|t| {
            t.strip_prefix(STOP_HOOK_FEEDBACK_PREFIX).or_else(|| {
                t.strip_prefix(STOP_HOOK_CONTEXT_PREFIX)
                    .and_then(|rest| rest.strip_suffix(STOP_HOOK_CONTEXT_SUFFIX))
            })
        })
        .map(str::to_string)
        .collect()
}

/// How 2.1.330 wraps a Stop hook's `additionalContext` for the model.
pub const STOP_HOOK_CONTEXT_PREFIX: &str = "<system-reminder>\nStop hook additional context: ";
/// The end of that wrapping.
pub const STOP_HOOK_CONTEXT_SUFFIX: &str = "\n</system-reminder>";

/// How the client prefixes a Stop hook's block reason in the user message it
/// sends to the model.
pub const STOP_HOOK_FEEDBACK_PREFIX: &str = "Stop hook feedback:\n";

/// The text of every system prompt block of a request body (`system` may be a
/// string or an array of text blocks).
pub fn system_texts(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    collect_texts(&body["system"], &mut out);
    out
}

/// The number of assistant messages in a request body: the turn number the
/// mock passes to the script.
pub fn assistant_turns(body: &Value) -> usize {
    body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// Whether a request body belongs to the main conversation: its `tools`
/// include one named `Write`.
pub fn is_main_request(body: &Value) -> bool {
    body["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == "Write"))
}

fn collect_texts(content: &Value, out: &mut Vec<String>) {
    match content {
        Value::String(s) => out.push(s.clone()),
        Value::Array(blocks) => {
            for block in blocks {
                match block["type"].as_str() {
                    Some("text") => {
                        if let Some(t) = block["text"].as_str() {
                            out.push(t.to_string());
                        }
                    }
                    Some("tool_result") => collect_texts(&block["content"], out),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let conn_shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("mock-api-conn".into())
            .spawn(move || {
                let _ = serve_connection(stream, &conn_shared);
            });
        if let Ok(handle) = spawned {
            let mut conns = lock(&shared.conns);
            conns.retain(|h| !h.is_finished());
            conns.push(handle);
        }
    }
}

/// A parsed HTTP request.
struct Request {
    method: String,
    target: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

enum Fill {
    More,
    Closed,
}

/// Reads more bytes into `buf`, polling the stop flag while idle.
fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, shared: &Shared) -> io::Result<Fill> {
    let started = Instant::now();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        if shared.stop.load(Ordering::SeqCst) {
            return Ok(Fill::Closed);
        }
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(Fill::Closed),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(Fill::More);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if started.elapsed() > IDLE_LIMIT {
                    return Ok(Fill::Closed);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one request from the connection; `None` when the peer closed or the
/// server is stopping.
fn read_request(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    shared: &Shared,
) -> io::Result<Option<Request>> {
    let head_end = loop {
        if let Some(pos) = find(buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 1024 * 1024 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "header too large",
            ));
        }
        if let Fill::Closed = fill(stream, buf, shared)? {
            return Ok(None);
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    buf.drain(..head_end + 4);
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or_default().to_string();
    let target = parts.next().unwrap_or("/").to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();

    if headers
        .get("expect")
        .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
    {
        stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }

    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|v| v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        loop {
            if let Some((body, used)) = decode_chunked(buf)? {
                buf.drain(..used);
                break body;
            }
            if buf.len() > MAX_BODY {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
            }
            if let Fill::Closed = fill(stream, buf, shared)? {
                return Ok(None);
            }
        }
    } else {
        let len: usize = headers
            .get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if len > MAX_BODY {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "body too large"));
        }
        while buf.len() < len {
            if let Fill::Closed = fill(stream, buf, shared)? {
                return Ok(None);
            }
        }
        buf.drain(..len).collect()
    };
    Ok(Some(Request {
        method,
        target,
        headers,
        body,
    }))
}

/// Decodes a complete chunked body at the start of `buf`: the body and the
/// number of bytes used, or `None` if more bytes are needed.
fn decode_chunked(buf: &[u8]) -> io::Result<Option<(Vec<u8>, usize)>> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let Some(eol) = find(&buf[pos..], b"\r\n") else {
            return Ok(None);
        };
        let size_line = String::from_utf8_lossy(&buf[pos..pos + eol]).into_owned();
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunk size"))?;
        pos += eol + 2;
        if size == 0 {
            // Skip trailers up to the blank line.
            loop {
                let Some(eol) = find(&buf[pos..], b"\r\n") else {
                    return Ok(None);
                };
                pos += eol + 2;
                if eol == 0 {
                    return Ok(Some((body, pos)));
                }
            }
        }
        if buf.len() < pos + size + 2 {
            return Ok(None);
        }
        body.extend_from_slice(&buf[pos..pos + size]);
        pos += size + 2;
    }
}

fn serve_connection(mut stream: TcpStream, shared: &Shared) -> io::Result<()> {
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut stream, &mut buf, shared)? {
        let close = req
            .headers
            .get("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let pieces = respond(&req, shared);
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(shared.options.event_gap);
            }
            stream.write_all(piece)?;
            stream.flush()?;
        }
        if close {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

/// Builds the HTTP response for one request, in the pieces to send
/// `event_gap` apart, and records the request (before the response is sent,
/// so a client never sees an answer to a request the log does not hold yet).
fn respond(req: &Request, shared: &Shared) -> Vec<Vec<u8>> {
    let at = SystemTime::now();
    let path_only = req.target.split('?').next().unwrap_or_default();
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    let is_messages = req.method == "POST" && path_only == "/v1/messages";
    let is_main = is_messages && is_main_request(&body);
    let turn = if is_main && shared.options.in_order {
        usize::try_from(shared.answered.fetch_add(1, Ordering::SeqCst)).unwrap()
    } else {
        assistant_turns(&body)
    };
    let (status, response) = response_for(req, path_only, &body, is_main, turn, shared);
    lock(&shared.log).push(RecordedRequest {
        path: req.target.clone(),
        body,
        is_main,
        turn,
        at,
        status,
    });
    response
}

/// The status and the HTTP response for one request, in pieces: one, or for
/// a streamed message with `event_gap` set, the head with the first event and
/// then one piece per further event.
fn response_for(
    req: &Request,
    path_only: &str,
    body: &Value,
    is_main: bool,
    turn: usize,
    shared: &Shared,
) -> (u16, Vec<Vec<u8>>) {
    let whole = |status: u16, response: Vec<u8>| (status, vec![response]);
    if req.method == "HEAD" {
        return whole(200, http_response(200, "application/json", &[], b""));
    }
    if req.method == "POST" && path_only == "/v1/messages/count_tokens" {
        let estimate = req.body.len() / 4;
        let out = json!({ "input_tokens": estimate.max(1) });
        let response = http_response(200, "application/json", &[], out.to_string().as_bytes());
        return whole(200, response);
    }
    if req.method != "POST" || path_only != "/v1/messages" {
        let message = format!("mock api: no route for {} {}", req.method, path_only);
        return whole(404, error_response(404, &[], "not_found_error", &message));
    }

    let reply = if is_main {
        if let Ok(reply) = catch_unwind(AssertUnwindSafe(|| (shared.script)(turn, body))) {
            reply
        } else {
            // Fail the client fast (400 is not retried) instead of letting it retry.
            let message = format!("mock api: script panicked on turn {turn}");
            let response = error_response(400, &[], "invalid_request_error", &message);
            return whole(400, response);
        }
    } else {
        shared
            .options
            .side_reply
            .clone()
            .unwrap_or_else(|| Reply::Text("ok".to_string()))
    };

    let message = match answer(reply) {
        Ok(Answer::Message(message)) => message,
        Ok(Answer::Error {
            status,
            headers,
            error_type,
            message,
        }) => {
            let response = error_response(status, &headers, &error_type, &message);
            return whole(status, response);
        }
        Err(problem) => {
            let message = format!("mock api: bad script reply on turn {turn}: {problem}");
            let response = error_response(400, &[], "invalid_request_error", &message);
            return whole(400, response);
        }
    };

    let n = shared.ids.fetch_add(1, Ordering::SeqCst);
    let model = body["model"].as_str().unwrap_or("claude-mock").to_string();
    let ok =
        |content_type: &str, body: &[u8]| http_response(200, content_type, &message.headers, body);
    if !body["stream"].as_bool().unwrap_or(false) {
        let msg = message_json(&message, &model, n);
        return whole(200, ok("application/json", msg.to_string().as_bytes()));
    }
    let events = sse_events(&message, &model, n);
    let response = ok("text/event-stream", events.concat().as_bytes());
    if shared.options.event_gap.is_zero() {
        return whole(200, response);
    }
    let rest: usize = events[1..].iter().map(String::len).sum();
    let mut pieces = vec![response[..response.len() - rest].to_vec()];
    pieces.extend(events[1..].iter().map(|e| e.as_bytes().to_vec()));
    (200, pieces)
}

/// An error response with the Anthropic error body.
fn error_response(
    status: u16,
    headers: &[(String, String)],
    error_type: &str,
    message: &str,
) -> Vec<u8> {
    let out = json!({ "type": "error", "error": { "type": error_type, "message": message } });
    http_response(
        status,
        "application/json",
        headers,
        out.to_string().as_bytes(),
    )
}

fn http_response(
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        529 => "Site Overloaded",
        _ => "Status",
    };
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: keep-alive\r\nrequest-id: req_mock\r\nCache-Control: no-cache\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// A script reply resolved into what the mock sends.
enum Answer {
    Message(Message),
    Error {
        status: u16,
        headers: Vec<(String, String)>,
        error_type: String,
        message: String,
    },
}

/// One assistant message: its content blocks, the usage it reports and
/// the extra headers it is sent with.
struct Message {
    blocks: Vec<Block>,
    usage: Usage,
    headers: Vec<(String, String)>,
}

enum Block {
    Text(String),
    ToolUse { name: String, input: Value },
}

/// Resolves a script reply; `Err` names a reply that makes no sense (an error
/// inside a message, an empty message).
fn answer(reply: Reply) -> Result<Answer, String> {
    match reply {
        Reply::ApiError {
            status,
            headers,
            error_type,
            message,
        } => Ok(Answer::Error {
            status,
            headers,
            error_type,
            message,
        }),
        Reply::WithUsage { reply, usage } => match answer(*reply)? {
            Answer::Message(message) => Ok(Answer::Message(Message { usage, ..message })),
            Answer::Error { .. } => Err("with_usage around an ApiError".to_string()),
        },
        Reply::WithHeaders { reply, headers } => match answer(*reply)? {
            Answer::Message(mut message) => {
                message.headers.extend(headers);
                Ok(Answer::Message(message))
            }
            Answer::Error { .. } => Err("with_utilization around an ApiError".to_string()),
        },
        reply => {
            let mut blocks = Vec::new();
            collect_blocks(reply, &mut blocks)?;
            if blocks.is_empty() {
                return Err("a message without content blocks".to_string());
            }
            let output: usize = blocks
                .iter()
                .map(|b| match b {
                    Block::Text(t) => t.len(),
                    Block::ToolUse { input, .. } => input.to_string().len(),
                })
                .sum();
            let usage = Usage {
                input_tokens: 10,
                output_tokens: (output / 4 + 1) as u64,
                cache_read_input_tokens: 0,
                cache_creation_input_tokens: 0,
            };
            Ok(Answer::Message(Message {
                blocks,
                usage,
                headers: Vec::new(),
            }))
        }
    }
}

fn collect_blocks(reply: Reply, out: &mut Vec<Block>) -> Result<(), String> {
    match reply {
        Reply::Text(text) => out.push(Block::Text(text)),
        Reply::ToolUse { name, input } => out.push(Block::ToolUse { name, input }),
        Reply::Blocks(replies) => {
            for reply in replies {
                collect_blocks(reply, out)?;
            }
        }
        Reply::ApiError { .. } => return Err("an ApiError inside Blocks".to_string()),
        Reply::WithUsage { .. } => return Err("with_usage inside Blocks".to_string()),
        Reply::WithHeaders { .. } => return Err("with_utilization inside Blocks".to_string()),
    }
    Ok(())
}

fn stop_reason(message: &Message) -> &'static str {
    if message
        .blocks
        .iter()
        .any(|b| matches!(b, Block::ToolUse { .. }))
    {
        "tool_use"
    } else {
        "end_turn"
    }
}

/// The `tool_use` id of block `index` of message `n`: `toolu_mock_<n>` for the
/// first block (as before blocks could be several), `toolu_mock_<n>_<index>` after.
fn tool_use_id(n: u64, index: usize) -> String {
    if index == 0 {
        format!("toolu_mock_{n}")
    } else {
        format!("toolu_mock_{n}_{index}")
    }
}

/// The complete (non-streaming) message object.
fn message_json(message: &Message, model: &str, n: u64) -> Value {
    let content: Vec<Value> = message
        .blocks
        .iter()
        .enumerate()
        .map(|(index, block)| match block {
            Block::Text(text) => json!({ "type": "text", "text": text }),
            Block::ToolUse { name, input } => {
                json!({ "type": "tool_use", "id": tool_use_id(n, index), "name": name, "input": input })
            }
        })
        .collect();
    json!({
        "id": format!("msg_mock_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(message),
        "stop_sequence": null,
        "usage": message.usage.to_json(),
    })
}

/// The Server-Sent Events of a message, one string per event.
fn sse_events(message: &Message, model: &str, n: u64) -> Vec<String> {
    let start_usage = Usage {
        output_tokens: message.usage.output_tokens.min(1),
        ..message.usage
    };
    let mut events: Vec<(&str, Value)> = Vec::new();
    events.push((
        "message_start",
        json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_mock_{n}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": start_usage.to_json(),
            }
        }),
    ));
    for (index, block) in message.blocks.iter().enumerate() {
        match block {
            Block::Text(text) => {
                events.push((
                    "content_block_start",
                    json!({ "type": "content_block_start", "index": index, "content_block": { "type": "text", "text": "" } }),
                ));
                events.push((
                    "content_block_delta",
                    json!({ "type": "content_block_delta", "index": index, "delta": { "type": "text_delta", "text": text } }),
                ));
            }
            Block::ToolUse { name, input } => {
                events.push((
                    "content_block_start",
                    json!({
                        "type": "content_block_start",
                        "index": index,
                        "content_block": { "type": "tool_use", "id": tool_use_id(n, index), "name": name, "input": {} }
                    }),
                ));
                events.push((
                    "content_block_delta",
                    json!({
                        "type": "content_block_delta",
                        "index": index,
                        "delta": { "type": "input_json_delta", "partial_json": input.to_string() }
                    }),
                ));
            }
        }
        events.push((
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": index }),
        ));
    }
    events.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(message), "stop_sequence": null },
            "usage": message.usage.to_json(),
        }),
    ));
    events.push(("message_stop", json!({ "type": "message_stop" })));
    events
        .into_iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn main_body(assistant_msgs: usize, stream: bool) -> Value {
        let mut messages = vec![json!({ "role": "user", "content": "go" })];
        for i in 0..assistant_msgs {
            messages.push(json!({ "role": "assistant", "content": [{ "type": "text", "text": format!("a{i}") }] }));
            messages.push(
                json!({ "role": "user", "content": [{ "type": "text", "text": format!("u{i}") }] }),
            );
        }
        json!({
            "model": "claude-test",
            "stream": stream,
            "tools": [{ "name": "Bash" }, { "name": "Write" }],
            "messages": messages,
        })
    }

    /// The names of server-sent events, in order, a space between.
    fn event_names(events: &[(String, Value)]) -> String {
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        names.join(" ")
    }

    /// A connection to `mock` that gives up reading after 5 s.
    fn connect(mock: &MockApi) -> TcpStream {
        let stream = TcpStream::connect(mock.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    /// POSTs `body` to the Messages endpoint on `stream`: (status line, headers, body).
    fn post(stream: &mut TcpStream, buf: &mut Vec<u8>, body: &Value) -> (String, String, String) {
        roundtrip(stream, buf, "/v1/messages?beta=true", &body.to_string())
    }

    /// Sends one request on `stream` and returns (status line, headers, body).
    fn roundtrip(
        stream: &mut TcpStream,
        buf: &mut Vec<u8>,
        path: &str,
        body: &str,
    ) -> (String, String, String) {
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(req.as_bytes()).unwrap();
        read_response(stream, buf)
    }

    fn read_response(stream: &mut TcpStream, buf: &mut Vec<u8>) -> (String, String, String) {
        let mut chunk = [0u8; 8192];
        let head_end = loop {
            if let Some(p) = find(buf, b"\r\n\r\n") {
                break p;
            }
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed early");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
        buf.drain(..head_end + 4);
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap();
        while buf.len() < len {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed early");
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8(buf.drain(..len).collect()).unwrap();
        let (status, headers) = head.split_once("\r\n").unwrap();
        (status.to_string(), headers.to_string(), body)
    }

    fn sse_events(body: &str) -> Vec<(String, Value)> {
        body.split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .map(|e| {
                let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
                let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                (name.to_string(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    #[test]
    fn sse_shape_keep_alive_and_recording() {
        let mock = MockApi::start(|turn, _| match turn {
            0 => Reply::write("/tmp/x.txt", "hello"),
            k => Reply::Text(format!("turn {k}")),
        });
        let mut stream = connect(&mock);
        let mut buf = Vec::new();

        // Turn 0: a tool call, streamed.
        let (status, headers, body) = post(&mut stream, &mut buf, &main_body(0, true));
        assert!(status.contains("200"), "{status}");
        assert!(headers.to_ascii_lowercase().contains("text/event-stream"));
        let events = sse_events(&body);
        assert_eq!(
            event_names(&events),
            "message_start content_block_start content_block_delta content_block_stop message_delta message_stop"
        );
        assert_eq!(events[1].1["content_block"]["name"], "Write");
        assert_eq!(events[2].1["delta"]["type"], "input_json_delta");
        let input: Value =
            serde_json::from_str(events[2].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(input["content"], "hello");
        assert_eq!(events[4].1["delta"]["stop_reason"], "tool_use");

        // Turn 2 on the same connection (keep-alive): text.
        let (_, _, body) = post(&mut stream, &mut buf, &main_body(2, true));
        let events = sse_events(&body);
        assert_eq!(events[2].1["delta"]["type"], "text_delta");
        assert_eq!(events[2].1["delta"]["text"], "turn 2");
        assert_eq!(events[4].1["delta"]["stop_reason"], "end_turn");

        // A side request (no Write tool), non-streaming: plain JSON "ok".
        let side = json!({ "model": "m", "messages": [{ "role": "user", "content": "title?" }] });
        let (_, _, body) = roundtrip(&mut stream, &mut buf, "/v1/messages", &side.to_string());
        let msg: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(msg["content"][0]["text"], "ok");
        assert_eq!(msg["stop_reason"], "end_turn");

        // Unknown path: 404 JSON; count_tokens: a number.
        let (status, _, _) = roundtrip(&mut stream, &mut buf, "/api/hello", "");
        assert!(status.contains("404"), "{status}");
        let (_, _, body) = roundtrip(
            &mut stream,
            &mut buf,
            "/v1/messages/count_tokens?beta=true",
            "{}",
        );
        assert!(serde_json::from_str::<Value>(&body).unwrap()["input_tokens"].is_u64());

        let all = mock.requests();
        assert_eq!(all.len(), 5);
        assert_eq!(all[0].path, "/v1/messages?beta=true");
        let main = mock.main_requests();
        assert_eq!(main.iter().map(|r| r.turn).collect::<Vec<_>>(), [0, 2]);
        drop(stream);
        let started = Instant::now();
        drop(mock);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    /// The value of header `name` in a response head (names case-insensitive).
    fn header<'a>(headers: &'a str, name: &str) -> Option<&'a str> {
        headers.split("\r\n").find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    fn epoch_now() -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn a_message_with_utilization_carries_the_window_s_headers() {
        let reset = epoch_now() + 3_600;
        let mock = MockApi::start(move |turn, _| match turn {
            0 => Reply::text("busy").with_utilization("5h", 0.85, reset),
            _ => Reply::text("calm").with_utilization("7d", 0.25, reset),
        });
        let mut stream = connect(&mock);
        let mut buf = Vec::new();
        let (status, headers, body) = post(&mut stream, &mut buf, &main_body(0, true));
        assert_eq!(status, "HTTP/1.1 200 OK");
        assert!(body.contains("busy"), "{body}");
        let at = reset.to_string();
        for (name, value) in [
            ("anthropic-ratelimit-unified-5h-utilization", "0.85"),
            ("anthropic-ratelimit-unified-5h-reset", at.as_str()),
            ("anthropic-ratelimit-unified-5h-status", "allowed_warning"),
            ("anthropic-ratelimit-unified-status", "allowed"),
            (
                "anthropic-ratelimit-unified-representative-claim",
                "five_hour",
            ),
        ] {
            assert_eq!(header(&headers, name), Some(value), "{headers}");
        }
        let (_, headers, _) = post(&mut stream, &mut buf, &main_body(1, false));
        assert_eq!(
            header(&headers, "anthropic-ratelimit-unified-7d-status"),
            Some("allowed")
        );
        assert_eq!(
            header(&headers, "anthropic-ratelimit-unified-5h-utilization"),
            None
        );
    }

    #[test]
    fn api_errors_have_status_headers_body_and_are_recorded() {
        let reset = epoch_now() + 5;
        let mock = MockApi::start(move |turn, _| match turn {
            0 => Reply::rate_limited(reset),
            1 => Reply::overloaded(),
            _ => Reply::text("fine"),
        });
        let mut stream = connect(&mock);
        let mut buf = Vec::new();
        let before = SystemTime::now();

        let (status, headers, body) = post(&mut stream, &mut buf, &main_body(0, true));
        assert_eq!(status, "HTTP/1.1 429 Too Many Requests");
        assert_eq!(header(&headers, "content-type"), Some("application/json"));
        assert!(header(&headers, "request-id").is_some(), "{headers}");
        let retry_after: u64 = header(&headers, "retry-after").unwrap().parse().unwrap();
        assert!((4..=5).contains(&retry_after), "retry-after {retry_after}");
        assert_eq!(
            header(&headers, "anthropic-ratelimit-unified-status"),
            Some("rejected")
        );
        assert_eq!(
            header(&headers, "anthropic-ratelimit-unified-reset"),
            Some(reset.to_string().as_str())
        );
        assert_eq!(
            header(&headers, "anthropic-ratelimit-unified-representative-claim"),
            Some("five_hour")
        );
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "rate_limit_error");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rate limit")
        );

        // The connection stays usable after an error.
        let (status, headers, body) = post(&mut stream, &mut buf, &main_body(1, true));
        assert_eq!(status, "HTTP/1.1 529 Site Overloaded");
        assert_eq!(header(&headers, "retry-after"), None);
        let error: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            error,
            json!({ "type": "error", "error": { "type": "overloaded_error", "message": "Overloaded" } })
        );

        let (status, _, _) = post(&mut stream, &mut buf, &main_body(2, true));
        assert!(status.contains("200"), "{status}");
        let after = SystemTime::now();

        let recorded = mock.requests();
        assert_eq!(
            recorded.iter().map(|r| r.status).collect::<Vec<_>>(),
            [429, 529, 200]
        );
        assert!(recorded.iter().all(|r| before <= r.at && r.at <= after));
        assert!(recorded.windows(2).all(|w| w[0].at <= w[1].at));
    }

    #[test]
    fn side_requests_get_ok_unless_options_fail_them() {
        let side = json!({ "model": "m", "stream": false, "messages": [{ "role": "user", "content": "title?" }] })
            .to_string();
        for (options, expected) in [
            (MockOptions::default(), 200),
            (
                MockOptions {
                    side_reply: Some(Reply::unauthorized()),
                    ..MockOptions::default()
                },
                401,
            ),
        ] {
            let mock = MockApi::start_with(options, |_, _| Reply::unauthorized());
            let mut stream = connect(&mock);
            let mut buf = Vec::new();
            let (status, _, body) = post(&mut stream, &mut buf, &main_body(0, true));
            assert_eq!(status, "HTTP/1.1 401 Unauthorized");
            let error: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(error["error"]["type"], "authentication_error");
            assert_eq!(error["error"]["message"], "invalid x-api-key");
            let (status, _, body) = roundtrip(&mut stream, &mut buf, "/v1/messages", &side);
            assert!(status.contains(&expected.to_string()), "{status}");
            if expected == 200 {
                let msg: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(msg["content"][0]["text"], "ok");
            }
            let statuses: Vec<u16> = mock.requests().iter().map(|r| r.status).collect();
            assert_eq!(statuses, [401, expected]);
        }
    }

    #[test]
    fn usage_default_and_scripted_in_the_stream() {
        let scripted = Usage {
            input_tokens: 100_000,
            output_tokens: 1234,
            cache_read_input_tokens: 7,
            cache_creation_input_tokens: 8,
        };
        let mock = MockApi::start(move |turn, _| match turn {
            0 => Reply::text("abcdefgh"),
            1 => Reply::Blocks(vec![
                Reply::text("I will write."),
                Reply::write("/tmp/y", "z"),
            ])
            .with_usage(scripted),
            _ => Reply::text("x").with_usage(scripted),
        });
        let mut stream = connect(&mock);
        let mut buf = Vec::new();
        let mut send = |turn: usize, stream_it: bool| {
            post(&mut stream, &mut buf, &main_body(turn, stream_it)).2
        };

        // Default: 10 input tokens, output = len/4 + 1, no cache.
        let events = sse_events(&send(0, true));
        assert_eq!(
            events[0].1["message"]["usage"],
            json!({ "input_tokens": 10, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 })
        );
        let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
        assert_eq!(
            delta["usage"],
            json!({ "input_tokens": 10, "output_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0 })
        );

        // Scripted usage on a text + tool_use message.
        let events = sse_events(&send(1, true));
        assert_eq!(
            event_names(&events),
            "message_start content_block_start content_block_delta content_block_stop content_block_start content_block_delta content_block_stop message_delta message_stop"
        );
        assert_eq!(
            events[0].1["message"]["usage"],
            json!({ "input_tokens": 100_000, "output_tokens": 1, "cache_creation_input_tokens": 8, "cache_read_input_tokens": 7 })
        );
        assert_eq!(events[1].1["content_block"]["type"], "text");
        assert_eq!(events[2].1["delta"]["text"], "I will write.");
        assert_eq!(events[4].1["index"], 1);
        assert_eq!(events[4].1["content_block"]["name"], "Write");
        assert_eq!(events[6].1["index"], 1);
        assert_eq!(events[7].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[7].1["usage"], scripted.to_json());

        // Not streamed: the same usage in the message object.
        let msg: Value = serde_json::from_str(&send(2, false)).unwrap();
        assert_eq!(msg["usage"], scripted.to_json());
        assert_eq!(msg["stop_reason"], "end_turn");
    }

    #[test]
    fn event_gap_sends_a_stream_one_event_at_a_time() {
        let gap = Duration::from_millis(60);
        let options = MockOptions {
            event_gap: gap,
            ..MockOptions::default()
        };
        let mock = MockApi::start_with(options, |_, _| Reply::text("slow"));
        let mut stream = connect(&mock);
        let body = main_body(0, true).to_string();
        let req = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(req.as_bytes()).unwrap();
        // Read until the first event has arrived, then time the rest.
        let mut buf = Vec::new();
        let mut chunk = [0u8; 8192];
        while find(&buf, b"event: message_start").is_none() {
            let n = stream.read(&mut chunk).unwrap();
            assert!(n > 0, "server closed early");
            buf.extend_from_slice(&chunk[..n]);
        }
        let first = Instant::now();
        assert!(find(&buf, b"message_stop").is_none(), "all events at once");
        let (_, _, out) = read_response(&mut stream, &mut buf);
        let events = sse_events(&out);
        assert_eq!(events.len(), 6);
        assert_eq!(events[2].1["delta"]["text"], "slow");
        assert!(
            first.elapsed() >= gap * 5,
            "5 gaps after the first event, took {:?}",
            first.elapsed()
        );
    }

    #[test]
    fn nonsense_replies_fail_fast_with_a_400() {
        let mock = MockApi::start(|turn, _| match turn {
            0 => Reply::overloaded().with_usage(Usage::default()),
            1 => Reply::Blocks(vec![Reply::text("a"), Reply::unauthorized()]),
            _ => Reply::Blocks(Vec::new()),
        });
        let mut stream = connect(&mock);
        let mut buf = Vec::new();
        for turn in 0..3 {
            let (status, _, body) = post(&mut stream, &mut buf, &main_body(turn, true));
            assert!(status.contains("400"), "{status}");
            let error: Value = serde_json::from_str(&body).unwrap();
            let message = error["error"]["message"].as_str().unwrap();
            assert!(message.contains(&format!("turn {turn}")), "{message}");
        }
    }

    #[test]
    fn chunked_request_body() {
        let mock = MockApi::start(|_, _| Reply::text("chunked fine"));
        let mut stream = connect(&mock);
        let body = main_body(0, false).to_string();
        let (a, b) = body.split_at(body.len() / 2);
        let req = format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
            a.len(),
            b.len()
        );
        stream.write_all(req.as_bytes()).unwrap();
        let (_, _, out) = read_response(&mut stream, &mut Vec::new());
        let msg: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(msg["content"][0]["text"], "chunked fine");
        assert!(mock.requests()[0].is_main);
    }

    #[test]
    fn drop_with_idle_connection_does_not_hang() {
        let mock = MockApi::start(|_, _| Reply::text("x"));
        let _idle = TcpStream::connect(mock.addr()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        drop(mock);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn user_texts_collects_strings_blocks_and_tool_results() {
        let body = json!({
            "messages": [
                { "role": "user", "content": "first" },
                { "role": "assistant", "content": [{ "type": "text", "text": "not me" }] },
                { "role": "user", "content": [
                    { "type": "tool_result", "tool_use_id": "t", "content": "tool out" },
                    { "type": "tool_result", "tool_use_id": "u", "content": [{ "type": "text", "text": "nested" }] },
                    { "type": "text", "text": "block" }
                ] }
            ]
        });
        assert_eq!(user_texts(&body), ["first", "tool out", "nested", "block"]);
        assert_eq!(message_texts(&body, "assistant"), ["not me"]);
        assert_eq!(assistant_turns(&body), 1);
        assert!(!is_main_request(&body));
    }

    #[test]
    fn stop_hook_feedback_extracts_reasons() {
        // Shapes sent by the real clients: a string, later a text block.
        let body = json!({ "messages": [
                { "role": "user", "content": "Do the task." },
                { "role": "assistant", "content": [{ "type": "text", "text": "turn 0" }] },
                { "role": "user", "content": "Stop hook feedback:\nContinue: re-injected 1" },
                { "role": "system", "content": "Stop hook blocking error from command: \"/h.sh\": Continue: re-injected 1" },
                { "role": "assistant", "content": [{ "type": "text", "text": "turn 1" }] },
                { "role": "user", "content": [{ "type": "text", "text": "Stop hook feedback:\nContinue: re-injected 2" }] },
                { "role": "assistant", "content": [{ "type": "text", "text": "turn 2" }] },
                { "role": "user", "content": [{ "type": "text", "text": "<system-reminder>\nStop hook additional context: Continue: 3\nline two\n</system-reminder>" }] }
            ]
        });
        assert_eq!(
            stop_hook_feedback(&body),
            [
                "Continue: re-injected 1",
                "Continue: re-injected 2",
                "Continue: 3\nline two"
            ]
        );
        assert_eq!(assistant_turns(&body), 3);
    }
}
