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
//!   `Stop hook blocking error from command: "<command>": <reason>`.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    /// A final text answer (stop_reason end_turn).
    Text(String),
    /// A single tool call (stop_reason tool_use), e.g. name "Write" with
    /// {"file_path","content"} or "Bash" with {"command","description"}.
    ToolUse {
        /// The tool's name as the client registers it (`Write`, `Bash`, ...).
        name: String,
        /// The tool's input object.
        input: Value,
    },
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
    /// Number of assistant messages already in `body["messages"]`.
    pub turn: usize,
}

type Script = dyn Fn(usize, &Value) -> Reply + Send + Sync + 'static;

struct Shared {
    script: Box<Script>,
    log: Mutex<Vec<RecordedRequest>>,
    stop: AtomicBool,
    ids: AtomicU64,
    conns: Mutex<Vec<JoinHandle<()>>>,
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
    /// already in body["messages"] (0 for the first turn).
    pub fn start<F>(script: F) -> MockApi
    where
        F: Fn(usize, &Value) -> Reply + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").expect("mock api: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("mock api: local_addr");
        let shared = Arc::new(Shared {
            script: Box::new(script),
            log: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            ids: AtomicU64::new(0),
            conns: Mutex::new(Vec::new()),
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

    /// e.g. "http://127.0.0.1:41234"
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order.
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
/// tool_result contents) of a request body, for assertions like "the
/// re-injected prompt carried X".
pub fn user_texts(body: &Value) -> Vec<String> {
    message_texts(body, "user")
}

/// The text of every message of the given role in `body["messages"]`
/// (strings, text blocks, tool_result contents), in order. Client 2.1.330 also
/// sends `"role": "system"` messages inside `messages` (e.g. the
/// `Stop hook blocking error from command: "<cmd>": <reason>` notice).
pub fn message_texts(body: &Value, role: &str) -> Vec<String> {
    let mut out = Vec::new();
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    for msg in messages.iter().filter(|m| m["role"] == role) {
        collect_texts(&msg["content"], &mut out);
    }
    out
}

/// The reasons of every Stop hook block fed back in a request body, oldest
/// first: the user messages `"Stop hook feedback:\n<reason>"` that both
/// client versions (2.0.77, 2.1.330) send after a block.
pub fn stop_hook_feedback(body: &Value) -> Vec<String> {
    user_texts(body)
        .iter()
        .filter_map(|t| t.strip_prefix(STOP_HOOK_FEEDBACK_PREFIX))
        .map(str::to_string)
        .collect()
}

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
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
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
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    let mut chunk = [0u8; 64 * 1024];
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
        let response = respond(&req, shared);
        stream.write_all(&response)?;
        stream.flush()?;
        if close {
            break;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    Ok(())
}

/// Builds the complete HTTP response for one request (and records it).
fn respond(req: &Request, shared: &Shared) -> Vec<u8> {
    let path_only = req.target.split('?').next().unwrap_or_default();
    let body: Value = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&req.body).into_owned()))
    };
    let is_messages = req.method == "POST" && path_only == "/v1/messages";
    let is_main = is_messages && is_main_request(&body);
    let turn = assistant_turns(&body);
    lock(&shared.log).push(RecordedRequest {
        path: req.target.clone(),
        body: body.clone(),
        is_main,
        turn,
    });

    if req.method == "HEAD" {
        return http_response(200, "application/json", b"");
    }
    if req.method == "POST" && path_only == "/v1/messages/count_tokens" {
        let estimate = req.body.len() / 4;
        let out = json!({ "input_tokens": estimate.max(1) });
        return http_response(200, "application/json", out.to_string().as_bytes());
    }
    if !is_messages {
        let out = json!({
            "type": "error",
            "error": { "type": "not_found_error", "message": format!("mock api: no route for {} {}", req.method, path_only) }
        });
        return http_response(404, "application/json", out.to_string().as_bytes());
    }

    let reply = if is_main {
        match catch_unwind(AssertUnwindSafe(|| (shared.script)(turn, &body))) {
            Ok(reply) => reply,
            Err(_) => {
                // Fail the client fast (400 is not retried) instead of letting it retry.
                let out = json!({
                    "type": "error",
                    "error": { "type": "invalid_request_error", "message": format!("mock api: script panicked on turn {turn}") }
                });
                return http_response(400, "application/json", out.to_string().as_bytes());
            }
        }
    } else {
        Reply::Text("ok".to_string())
    };

    let n = shared.ids.fetch_add(1, Ordering::SeqCst);
    let model = body["model"].as_str().unwrap_or("claude-mock").to_string();
    if body["stream"].as_bool().unwrap_or(false) {
        let sse = sse_body(&reply, &model, n);
        http_response(200, "text/event-stream", sse.as_bytes())
    } else {
        let msg = message_json(&reply, &model, n);
        http_response(200, "application/json", msg.to_string().as_bytes())
    }
}

fn http_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        _ => "Status",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: keep-alive\r\nrequest-id: req_mock\r\nCache-Control: no-cache\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn stop_reason(reply: &Reply) -> &'static str {
    match reply {
        Reply::Text(_) => "end_turn",
        Reply::ToolUse { .. } => "tool_use",
    }
}

fn usage(output_tokens: usize) -> Value {
    json!({
        "input_tokens": 10,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0
    })
}

fn output_tokens(reply: &Reply) -> usize {
    match reply {
        Reply::Text(t) => t.len() / 4 + 1,
        Reply::ToolUse { input, .. } => input.to_string().len() / 4 + 1,
    }
}

/// The complete (non-streaming) message object for a reply.
fn message_json(reply: &Reply, model: &str, n: u64) -> Value {
    let block = match reply {
        Reply::Text(text) => json!({ "type": "text", "text": text }),
        Reply::ToolUse { name, input } => {
            json!({ "type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": input })
        }
    };
    json!({
        "id": format!("msg_mock_{n}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [block],
        "stop_reason": stop_reason(reply),
        "stop_sequence": null,
        "usage": usage(output_tokens(reply)),
    })
}

/// The Server-Sent Events stream for a reply.
fn sse_body(reply: &Reply, model: &str, n: u64) -> String {
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
                "usage": usage(1),
            }
        }),
    ));
    match reply {
        Reply::Text(text) => {
            events.push((
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ));
            events.push((
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } }),
            ));
        }
        Reply::ToolUse { name, input } => {
            events.push((
                "content_block_start",
                json!({
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": { "type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": {} }
                }),
            ));
            events.push((
                "content_block_delta",
                json!({
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": { "type": "input_json_delta", "partial_json": input.to_string() }
                }),
            ));
        }
    }
    events.push((
        "content_block_stop",
        json!({ "type": "content_block_stop", "index": 0 }),
    ));
    events.push((
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(reply), "stop_sequence": null },
            "usage": usage(output_tokens(reply)),
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
        let mut stream = TcpStream::connect(mock.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = Vec::new();

        // Turn 0: a tool call, streamed.
        let (status, headers, body) = roundtrip(
            &mut stream,
            &mut buf,
            "/v1/messages?beta=true",
            &main_body(0, true).to_string(),
        );
        assert!(status.contains("200"), "{status}");
        assert!(headers.to_ascii_lowercase().contains("text/event-stream"));
        let events = sse_events(&body);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        assert_eq!(events[1].1["content_block"]["name"], "Write");
        assert_eq!(events[2].1["delta"]["type"], "input_json_delta");
        let input: Value =
            serde_json::from_str(events[2].1["delta"]["partial_json"].as_str().unwrap()).unwrap();
        assert_eq!(input["content"], "hello");
        assert_eq!(events[4].1["delta"]["stop_reason"], "tool_use");

        // Turn 2 on the same connection (keep-alive): text.
        let (_, _, body) = roundtrip(
            &mut stream,
            &mut buf,
            "/v1/messages?beta=true",
            &main_body(2, true).to_string(),
        );
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

    #[test]
    fn chunked_request_body() {
        let mock = MockApi::start(|_, _| Reply::text("chunked fine"));
        let mut stream = TcpStream::connect(mock.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
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
        let body = json!({
            "messages": [
                { "role": "user", "content": "Do the task." },
                { "role": "assistant", "content": [{ "type": "text", "text": "turn 0" }] },
                { "role": "user", "content": "Stop hook feedback:\nContinue: re-injected 1" },
                { "role": "system", "content": "Stop hook blocking error from command: \"/h.sh\": Continue: re-injected 1" },
                { "role": "assistant", "content": [{ "type": "text", "text": "turn 1" }] },
                { "role": "user", "content": [{ "type": "text", "text": "Stop hook feedback:\nContinue: re-injected 2" }] }
            ]
        });
        assert_eq!(
            stop_hook_feedback(&body),
            ["Continue: re-injected 1", "Continue: re-injected 2"]
        );
        assert_eq!(assistant_turns(&body), 2);
    }
}
