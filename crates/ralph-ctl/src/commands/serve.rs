//! `ralph-ctl serve`: the project's loops live in a browser, and the
//! person's steering from it (cancel, a note, the answer to a question).
//!
//! One small synchronous HTTP server (tiny_http: it parses the requests;
//! no async runtime), on 127.0.0.1 unless `--listen` says otherwise. The
//! URL it prints carries a random token, and every request without it is
//! refused; a change is a POST from the page itself (its `Origin`). The
//! page polls `/api/loops` every second with the version it has seen, and
//! gets the loops again, rendered by the report's rendering, only when a
//! state file changed. States are read as `status` reads them, never
//! under the lock; a change is the command's own transaction.

mod guard;
mod loops;
mod steer;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use ralph_core::exit_codes;
use ralph_core::judge::config::{EnvSource, ProcessEnv};
use ralph_core::paths::ProjectPaths;
use tiny_http::{Header, Request, Response, Server};

use crate::driver::os_signals::{SignalSource, Signals};
use crate::error::{CmdResult, CtlError};

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
        &ProcessEnv,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )
}

/// How often the server looks for a signal while no request comes.
const TICK: Duration = Duration::from_millis(250);

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

/// Serves `paths`' loops on `addr` until a signal comes; says the URL on
/// `out`, a warning for an address other machines reach on `err`.
pub(crate) fn serve(
    paths: &ProjectPaths,
    addr: SocketAddr,
    signals: &mut dyn SignalSource,
    env: &dyn EnvSource,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> CmdResult {
    let server = Server::http(addr).map_err(|e| {
        CtlError::BadArgument(format!(
            "cannot listen on {addr}: {e}; choose another --port"
        ))
    })?;
    let Some(bound) = server.server_addr().to_ip() else {
        return Err(CtlError::BadArgument(format!("cannot listen on {addr}")));
    };
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
    let site = Site {
        paths,
        token,
        addr: bound,
        env,
    };
    loop {
        if !signals.take().is_empty() {
            let _ = writeln!(out, "ralph-ctl serve: stopped");
            return Ok(exit_codes::OK);
        }
        match server.recv_timeout(TICK) {
            Ok(Some(request)) => site.answer(request, out),
            Ok(None) => {}
            // Interrupted by the signal: seen at the top of the loop.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(CtlError::io("serve on", addr.to_string())(e)),
        }
    }
}

/// What answers requests: the project, the token, where it is served.
struct Site<'a> {
    paths: &'a ProjectPaths,
    token: String,
    addr: SocketAddr,
    env: &'a dyn EnvSource,
}

/// A response ready to send.
type Reply = Response<std::io::Cursor<Vec<u8>>>;

fn header(name: &str, value: &str) -> Header {
    Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("an ASCII header")
}

/// `body` with `status` and `content_type`, never cached, never referred.
fn reply(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Reply {
    Response::from_data(body.into())
        .with_status_code(status)
        .with_header(header("Content-Type", content_type))
        .with_header(header("Cache-Control", "no-store"))
        .with_header(header("Referrer-Policy", "no-referrer"))
        .with_header(header("X-Content-Type-Options", "nosniff"))
}

/// A JSON object `{"ok": …, "message": …}`.
fn said(status: u16, message: &str) -> Reply {
    let body = serde_json::json!({"ok": status == 200, "message": message});
    reply(status, "application/json", body.to_string())
}

impl Site<'_> {
    /// Answers one request (a client gone before its answer is no matter).
    fn answer(&self, mut request: Request, out: &mut dyn Write) {
        let response = self.route(&mut request, out);
        let _ = request.respond(response);
    }

    fn route(&self, request: &mut Request, out: &mut dyn Write) -> Reply {
        let url = request.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let query: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        let param = |name: &str| {
            query
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        let head = |name: &'static str| {
            request
                .headers()
                .iter()
                .find(|h| h.field.equiv(name))
                .map(|h| h.value.as_str().to_string())
        };
        let (origin, fetch_site, host) = (head("Origin"), head("Sec-Fetch-Site"), head("Host"));
        let method = request.method().as_str().to_string();
        let action = steer::Action::of_path(path);
        let asked = guard::Asked {
            method: &method,
            token: param("token"),
            origin: origin.as_deref(),
            fetch_site: fetch_site.as_deref(),
        };
        let origins = guard::origins(self.addr, host.as_deref());
        if let Err(refusal) = guard::check(&asked, &self.token, &origins, action.is_some()) {
            if action.is_some() {
                // A change refused is worth the person's eye (another site
                // trying, a stale page): said with where it came from.
                let line = format!(
                    "refused a {method} to {path} from {}: {}",
                    origin.as_deref().unwrap_or("no origin"),
                    refusal.message()
                );
                let _ = writeln!(out, "{}", ralph_core::text::printable(&line));
                let _ = out.flush();
            }
            return said(refusal.status(), refusal.message());
        }
        if let Some(action) = action {
            return self.steer(request, action, out);
        }
        if method != "GET" && method != "HEAD" {
            return said(405, "this address is only read");
        }
        match path {
            "/" => reply(
                200,
                "text/html; charset=utf-8",
                PAGE.replace(TOKEN_MARK, &self.token)
                    .replace("@STYLE@", crate::render::STYLE),
            )
            .with_header(header("Content-Security-Policy", PAGE_POLICY))
            .with_header(header("X-Frame-Options", "DENY")),
            "/app.js" => reply(200, "text/javascript; charset=utf-8", SCRIPT),
            "/api/loops" => {
                let now = ralph_core::time::Timestamp::now().secs();
                if param("since") == Some(loops::version(self.paths, now).as_str()) {
                    return reply(204, "application/json", Vec::new());
                }
                let snapshot = loops::snapshot(self.paths, now);
                let json = serde_json::to_string(&snapshot).expect("the loops serialize");
                reply(200, "application/json", json)
            }
            _ => said(404, "no such page"),
        }
    }

    /// A POST that changes a loop: its JSON body read (bounded), the
    /// command run, a line on `out` saying what was done.
    fn steer(&self, request: &mut Request, action: steer::Action, out: &mut dyn Write) -> Reply {
        let mut body = Vec::new();
        let limit = steer::MAX_BODY as u64 + 1;
        if request
            .as_reader()
            .take(limit)
            .read_to_end(&mut body)
            .is_err()
        {
            return said(400, "the request's body cannot be read");
        }
        if body.len() > steer::MAX_BODY {
            return said(413, "the request's body is too long");
        }
        let asked: steer::Asked = match serde_json::from_slice(&body) {
            Ok(asked) => asked,
            Err(e) => return said(400, &format!("the request's body is not understood: {e}")),
        };
        let (status, message) = steer::run(self.paths, action, &asked, self.env);
        let line = format!(
            "{} {} from the page: {message}",
            format!("{action:?}").to_lowercase(),
            asked.loop_name
        );
        let _ = writeln!(out, "{}", ralph_core::text::printable(&line));
        let _ = out.flush();
        said(status, &message)
    }
}
