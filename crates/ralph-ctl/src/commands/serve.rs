//! `ralph-ctl serve`: the project's loops live in a browser, and the
//! person's steering from it (cancel, a note, the answer to a question).
//!
//! A small synchronous HTTP server on std's sockets (`serve/http.rs`; no
//! async runtime), on 127.0.0.1 unless `--listen` says otherwise. One
//! thread accepts; each connection is served on a thread of its own, one
//! request each, read and answered under deadlines, so a client that is
//! slow or silent holds only its own connection, and Ctrl-C, seen by the
//! main thread, ends the server whatever its connections do. A connection
//! has [`HEAD_TIME`] to send its request's head, and at most
//! [`MAX_WAITING`] wait for theirs (past that the oldest is closed), so
//! connections that never finish a request cannot keep the person's out;
//! at most [`MAX_CONNECTIONS`] requests are answered at once. The URL it prints carries a random token,
//! and every request without it is refused before its body is read; a
//! change is a POST from the page itself (its `Origin`). The page polls
//! `/api/loops` every second with the version it has seen, and gets the
//! loops again, rendered by the report's rendering, only when a state file
//! changed. States are read as `status` reads them, never under the lock;
//! a change is the command's own transaction.

mod guard;
mod http;
mod loops;
mod steer;

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use ralph_core::exit_codes;
use ralph_core::judge::config::{EnvSource, ProcessEnv};
use ralph_core::paths::ProjectPaths;

use crate::driver::os_signals::{SignalSource, Signals};
use crate::error::{CmdResult, CtlError};
use http::{Head, Reply, WireError};

/// `ralph-ctl serve`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The port (default: a free one, chosen by the system).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) port: u16,
    /// Listen on ADDR instead of 127.0.0.1 (reachable from other machines:
    /// anyone with the URL can steer the loops, and HTTP is not encrypted).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<IpAddr>,
}

/// `ralph-ctl serve` as its arguments ask, until Ctrl-C.
pub(crate) fn command(paths: &ProjectPaths, args: ServeArgs) -> CmdResult {
    let mut signals = Signals::install().map_err(CtlError::io("catch", "Ctrl-C"))?;
    let addr = SocketAddr::new(
        args.listen.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        args.port,
    );
    serve(
        paths,
        addr,
        &mut signals,
        Arc::new(ProcessEnv),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}

/// How often the main thread looks for a signal while nothing is said.
const TICK: Duration = Duration::from_millis(250);
/// How long a client has, from its connection, to send its request's
/// head: then it is answered 408 (or, having sent nothing, closed). A
/// browser sends its head at once; a connection that holds back is closed
/// before it keeps a place from the person's requests.
const HEAD_TIME: Duration = Duration::from_secs(1);
/// How long a client has, from its connection, to send its request's
/// body: then it is answered 408.
const REQUEST_TIME: Duration = Duration::from_secs(5);
/// How many connections may wait for their request's head at once: one
/// more closes the one that has waited longest.
const MAX_WAITING: usize = 128;
/// How long a client has to take in its answer.
const ANSWER_TIME: Duration = Duration::from_secs(10);
/// How many requests are answered at once (their heads read): one more is
/// answered 503 and closed at once.
const MAX_CONNECTIONS: usize = 32;

/// The page, its script (both embedded: no network needed).
const PAGE: &str = include_str!("serve/page.html");
const SCRIPT: &str = include_str!("serve/app.js");
/// Where the token goes in the page.
const TOKEN_MARK: &str = "@TOKEN@";

/// What the page may load: its own script and its own requests, nothing
/// from anywhere else, no inline script (so a text that escaped escaping
/// would still not run).
const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
     connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What the connections' threads tell the main thread.
enum Said {
    /// A line for the terminal.
    Line(String),
    /// Accepting failed: the server ends with this error.
    Failed(std::io::Error),
}

/// Serves `paths`' loops on `addr` until a signal comes; says the URL on
/// `out`, a warning for an address other machines reach on `err`.
pub(crate) fn serve(
    paths: &ProjectPaths,
    addr: SocketAddr,
    signals: &mut dyn SignalSource,
    env: Arc<dyn EnvSource + Send + Sync>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> CmdResult {
    let cannot_listen = |e: std::io::Error| {
        CtlError::BadArgument(format!(
            "cannot listen on {addr}: {e}; choose another --port"
        ))
    };
    let listener = TcpListener::bind(addr).map_err(cannot_listen)?;
    let bound = listener.local_addr().map_err(cannot_listen)?;
    let token = guard::new_token().map_err(CtlError::io("draw", "a random token"))?;
    if !bound.ip().is_loopback() {
        let _ = writeln!(
            err,
            "WARNING: ralph-ctl serve listens on {bound}, reachable from other machines. Anyone who \
             learns the URL can cancel and steer these loops, and plain HTTP carries the token \
             unencrypted. Use it only on a network you trust; prefer the default (127.0.0.1) and an \
             SSH tunnel."
        );
    }
    let shown_host = if bound.ip().is_unspecified() {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), bound.port())
    } else {
        bound
    };
    let said = writeln!(
        out,
        "ralph-ctl serve: the loops of {} at\n  http://{shown_host}/?token={token}\nCtrl-C ends it.",
        paths.root.display()
    )
    .and_then(|()| out.flush());
    if let Err(e) = said {
        return super::written(Err(e), exit_codes::OK);
    }
    let (tell, told) = mpsc::channel();
    let site = Arc::new(Site {
        paths: paths.clone(),
        token,
        addr: bound,
        env,
        tell,
    });
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("serve-accept".into())
            .spawn(move || accept(listener, site, stop))
            .map_err(CtlError::io("serve on", addr.to_string()))?;
    }
    loop {
        if !signals.take().is_empty() {
            // The accepting thread is woken to see `stop` and close the
            // listener; the connections' threads are left to their
            // deadlines (the process ends with this command).
            stop.store(true, Ordering::SeqCst);
            let _ = TcpStream::connect_timeout(&shown_host, TICK);
            let _ = writeln!(out, "ralph-ctl serve: stopped");
            return Ok(exit_codes::OK);
        }
        match told.recv_timeout(TICK) {
            Ok(Said::Line(line)) => {
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            }
            Ok(Said::Failed(e)) => return Err(CtlError::io("serve on", addr.to_string())(e)),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                let gone = std::io::Error::other("the accepting thread ended");
                return Err(CtlError::io("serve on", addr.to_string())(gone));
            }
        }
    }
}

/// One connection's place among the [`MAX_CONNECTIONS`]: given back when
/// its thread ends (or never starts).
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place, if one is free.
    fn take(open: &Arc<AtomicUsize>) -> Option<Slot> {
        let taken = open.fetch_add(1, Ordering::SeqCst);
        let slot = Slot(Arc::clone(open));
        (taken < MAX_CONNECTIONS).then_some(slot)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The connections waiting for their request's head, oldest first: each
/// with its number and a handle to close it by.
#[derive(Default)]
struct Waiting {
    next: u64,
    open: std::collections::VecDeque<(u64, TcpStream)>,
}

impl Waiting {
    /// Counts `stream` among the waiting, closing the one that has waited
    /// longest when [`MAX_WAITING`] wait already; its number.
    fn enter(waiting: &std::sync::Mutex<Waiting>, stream: &TcpStream) -> u64 {
        let mut waiting = waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while waiting.open.len() >= MAX_WAITING {
            if let Some((_, oldest)) = waiting.open.pop_front() {
                let _ = oldest.shutdown(std::net::Shutdown::Both);
            }
        }
        waiting.next += 1;
        let number = waiting.next;
        if let Ok(handle) = stream.try_clone() {
            waiting.open.push_back((number, handle));
        }
        number
    }

    /// Connection `number` no longer waits (its head read, or failed).
    fn leave(waiting: &std::sync::Mutex<Waiting>, number: u64) {
        let mut waiting = waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        waiting.open.retain(|(n, _)| *n != number);
    }
}

/// Accepts connections until `stop`, each served on a thread of its own
/// ([`Site::connection`]).
fn accept(listener: TcpListener, site: Arc<Site>, stop: Arc<AtomicBool>) {
    let open = Arc::new(AtomicUsize::new(0));
    let waiting = Arc::new(std::sync::Mutex::new(Waiting::default()));
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match stream {
            Ok(stream) => stream,
            // A client gone before it was taken, or a signal.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            Err(e) => {
                let _ = site.tell.send(Said::Failed(e));
                return;
            }
        };
        let number = Waiting::enter(&waiting, &stream);
        let (site, open, waits) = (Arc::clone(&site), Arc::clone(&open), Arc::clone(&waiting));
        // An overflow would abort the whole server: the room a page's
        // answer needs, with a margin.
        let started = std::thread::Builder::new()
            .name("serve-connection".into())
            .stack_size(1024 * 1024)
            .spawn(move || site.connection(stream, number, &waits, &open));
        // A thread that cannot start drops its connection; the handle kept
        // among the waiting goes too, so the socket is closed.
        if started.is_err() {
            Waiting::leave(&waiting, number);
        }
    }
}

/// What answers requests: the project, the token, where it is served, and
/// the way to the terminal.
struct Site {
    paths: ProjectPaths,
    token: String,
    addr: SocketAddr,
    env: Arc<dyn EnvSource + Send + Sync>,
    tell: Sender<Said>,
}

fn header(name: &'static str, value: &str) -> (&'static str, String) {
    (name, value.to_string())
}

/// `body` with `status` and `content_type`, never cached, never referred.
fn reply(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    Reply {
        status,
        headers: vec![
            header("Content-Type", content_type),
            header("Cache-Control", "no-store"),
            header("Referrer-Policy", "no-referrer"),
            header("X-Content-Type-Options", "nosniff"),
        ],
        body: body.into(),
    }
}

/// A JSON object `{"ok": …, "message": …}`.
fn said(status: u16, message: &str) -> Reply {
    let body = serde_json::json!({"ok": status == 200, "message": message});
    reply(status, "application/json", body.to_string())
}

/// What a request's head decides: an answer, or a change whose body is
/// to be read.
enum Routed {
    /// Answer this (a body there may be is never read).
    Answer(Reply),
    /// A change allowed by the rules: read its body, then make it.
    Steer(steer::Action),
}

impl Site {
    /// A line on the terminal, made printable.
    fn say(&self, line: &str) {
        let line = ralph_core::text::printable(line).into_owned();
        let _ = self.tell.send(Said::Line(line));
    }

    /// Serves the one request of a connection, then closes it (a client
    /// gone before its answer is no matter): its head by [`HEAD_TIME`]
    /// while it is among the `waiting`, then answered in one of the
    /// [`MAX_CONNECTIONS`] places (`open`), or 503.
    fn connection(
        &self,
        mut stream: TcpStream,
        number: u64,
        waiting: &std::sync::Mutex<Waiting>,
        open: &Arc<AtomicUsize>,
    ) {
        let started = Instant::now();
        let head = http::read_head(&mut stream, started + HEAD_TIME);
        Waiting::leave(waiting, number);
        let head = match head {
            Ok(head) => head,
            Err(e) => return Self::refuse(stream, &e),
        };
        let Some(_slot) = Slot::take(open) else {
            let busy = said(503, "too many connections at once; try again");
            let _ = http::send(stream, &busy, false, Instant::now() + TICK);
            return;
        };
        let deadline = started + REQUEST_TIME;
        let answer = match self.route(&head) {
            Routed::Answer(reply) => reply,
            Routed::Steer(action) => {
                match http::read_body(&mut stream, &head, steer::MAX_BODY, deadline) {
                    Ok(body) => self.steer(action, &body),
                    Err(e) => return Self::refuse(stream, &e),
                }
            }
        };
        let head_only = head.method == "HEAD";
        let _ = http::send(stream, &answer, head_only, Instant::now() + ANSWER_TIME);
    }

    /// Answers a request that could not be read as `e` says (or closes it).
    fn refuse(stream: TcpStream, e: &WireError) {
        if let Some(status) = e.status() {
            let answer = said(status, &e.to_string());
            let _ = http::send(stream, &answer, false, Instant::now() + ANSWER_TIME);
        }
    }

    fn route(&self, request: &Head) -> Routed {
        let url = request.target.as_str();
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let query: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let origin = request.header("Origin");
        let method = request.method.as_str();
        let action = steer::Action::of_path(path);
        let asked = guard::Asked {
            method,
            token: param("token"),
            origin,
            fetch_site: request.header("Sec-Fetch-Site"),
        };
        let origins = guard::origins(self.addr, request.header("Host"));
        if let Err(refusal) = guard::check(&asked, &self.token, &origins, action.is_some()) {
            if action.is_some() {
                // A change refused is worth the person's eye (another site
                // trying, a stale page): said with where it came from.
                self.say(&format!(
                    "refused a {method} to {path} from {}: {}",
                    origin.unwrap_or("no origin"),
                    refusal.message()
                ));
            }
            return Routed::Answer(said(refusal.status(), refusal.message()));
        }
        if let Some(action) = action {
            return Routed::Steer(action);
        }
        if method != "GET" && method != "HEAD" {
            return Routed::Answer(said(405, "this address is only read"));
        }
        Routed::Answer(match path {
            "/" => reply(
                200,
                "text/html; charset=utf-8",
                PAGE.replace(TOKEN_MARK, &self.token)
                    .replace("@STYLE@", crate::render::STYLE),
            )
            .with_header("Content-Security-Policy", PAGE_POLICY)
            .with_header("X-Frame-Options", "DENY"),
            "/app.js" => reply(200, "text/javascript; charset=utf-8", SCRIPT),
            "/api/loops" => {
                let now = ralph_core::time::Timestamp::now().secs();
                if param("since") == Some(loops::version(&self.paths, now).as_str()) {
                    return Routed::Answer(reply(204, "application/json", Vec::new()));
                }
                let snapshot = loops::snapshot(&self.paths, now);
                let json = serde_json::to_string(&snapshot).expect("the loops serialize");
                reply(200, "application/json", json)
            }
            _ => said(404, "no such page"),
        })
    }

    /// A POST that changes a loop, its JSON body read (bounded, by the
    /// deadline): the command run, a line on the terminal saying what was
    /// done.
    fn steer(&self, action: steer::Action, body: &[u8]) -> Reply {
        let asked: steer::Asked = match serde_json::from_slice(body) {
            Ok(asked) => asked,
            Err(e) => return said(400, &format!("the request's body is not understood: {e}")),
        };
        let (status, message) = steer::run(&self.paths, action, &asked, &*self.env);
        self.say(&format!(
            "{} {} from the page: {message}",
            format!("{action:?}").to_lowercase(),
            asked.loop_name
        ));
        said(status, &message)
    }
}
