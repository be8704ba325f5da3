//! `serve`'s HTTP/1.1 on std's sockets: one request per connection, every
//! read and write under a deadline, every size bounded. A request's head is
//! read whole before anything is decided; its body only when the request
//! is allowed to carry one, and never more than the caller's bound, so a
//! client that announces a body and never sends it costs its own
//! connection a few seconds, nothing else.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// The longest request head (its line and headers) read.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// A request's line and headers, and what came after them in the same reads.
#[derive(Debug)]
pub(crate) struct Head {
    /// `GET`, `POST`, … (as sent).
    pub(crate) method: String,
    /// The request target: the path and its query.
    pub(crate) target: String,
    /// Each header's name and value, in order (the value trimmed).
    pub(crate) headers: Vec<(String, String)>,
    /// The bytes read past the head: the start of a body.
    rest: Vec<u8>,
}

impl Head {
    /// The first header named `name` (any case).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Why a request cannot be taken; each but the last two is answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// Its head or body did not come by the deadline.
    #[error("the request did not come in time")]
    TimedOut,
    /// Its head is longer than [`MAX_HEAD`].
    #[error("the request's headers are too long")]
    HeadTooLong,
    /// Not an HTTP/1.x request.
    #[error("the request is not understood: {0}")]
    Malformed(&'static str),
    /// Its body is announced longer than the bound.
    #[error("the request's body is too long")]
    BodyTooLong,
    /// A body sent in chunks (no `Content-Length`).
    #[error("the request's body needs a Content-Length")]
    NoLength,
    /// The client closed the connection, or sent nothing before the deadline.
    #[error("the client went away")]
    Gone,
    /// The socket failed.
    #[error("the connection failed: {0}")]
    Io(#[from] std::io::Error),
}

impl WireError {
    /// The status to answer with, if any.
    pub(crate) fn status(&self) -> Option<u16> {
        match self {
            WireError::TimedOut => Some(408),
            WireError::HeadTooLong => Some(431),
            WireError::Malformed(_) => Some(400),
            WireError::BodyTooLong => Some(413),
            WireError::NoLength => Some(411),
            WireError::Gone | WireError::Io(_) => None,
        }
    }
}

/// What is left of the time to `deadline`, or `TimedOut`.
fn left(deadline: Instant) -> Result<Duration, WireError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(WireError::TimedOut)
    } else {
        Ok(left)
    }
}

/// One read of at most `buf.len()` bytes by `deadline` (0: the client closed).
fn read_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, WireError> {
    loop {
        stream.set_read_timeout(Some(left(deadline)?))?;
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(WireError::TimedOut);
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Reads a request's head from `stream` by `deadline`: at most
/// [`MAX_HEAD`] bytes, up to its blank line.
pub(crate) fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Head, WireError> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
        if buf.len() >= MAX_HEAD {
            return Err(WireError::HeadTooLong);
        }
        let n = match read_by(stream, &mut chunk, deadline) {
            // Nothing at all: a connection opened for later, or a stranger.
            Err(WireError::TimedOut) if buf.is_empty() => return Err(WireError::Gone),
            other => other?,
        };
        if n == 0 {
            return Err(if buf.is_empty() {
                WireError::Gone
            } else {
                WireError::Malformed("it ended inside its headers")
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let rest = buf.split_off(end + 4);
    let text = std::str::from_utf8(&buf[..end])
        .map_err(|_| WireError::Malformed("its head is not text"))?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(WireError::Malformed(
            "its first line is not METHOD TARGET HTTP/1.x",
        ));
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(WireError::Malformed("its method is not a word"));
    }
    if !matches!(version, "HTTP/1.1" | "HTTP/1.0") {
        return Err(WireError::Malformed("only HTTP/1.0 and 1.1 are spoken"));
    }
    let mut headers = Vec::new();
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(WireError::Malformed("a header has no colon"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace()) {
            return Err(WireError::Malformed("a header's name is not a word"));
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Ok(Head {
        method: method.to_string(),
        target: target.to_string(),
        headers,
        rest,
    })
}

/// Reads the body `head` announces, by `deadline` and at most `max` bytes:
/// one longer than `max` is refused before a byte of it is read.
pub(crate) fn read_body(
    stream: &mut TcpStream,
    head: &Head,
    max: usize,
    deadline: Instant,
) -> Result<Vec<u8>, WireError> {
    if head.header("Transfer-Encoding").is_some() {
        return Err(WireError::NoLength);
    }
    let lengths: Vec<&str> = head
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Content-Length"))
        .map(|(_, v)| v.as_str())
        .collect();
    let length = match lengths.as_slice() {
        [] => 0,
        [one] => one
            .parse::<u64>()
            .map_err(|_| WireError::Malformed("its Content-Length is not a number"))?,
        _ => return Err(WireError::Malformed("it has more than one Content-Length")),
    };
    let length = match usize::try_from(length) {
        Ok(length) if length <= max => length,
        _ => return Err(WireError::BodyTooLong),
    };
    if head
        .header("Expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        write_by(stream, b"HTTP/1.1 100 Continue\r\n\r\n", deadline)?;
    }
    let mut body = head.rest.clone();
    body.truncate(length);
    let mut chunk = [0u8; 4096];
    while body.len() < length {
        let want = (length - body.len()).min(chunk.len());
        let n = read_by(stream, &mut chunk[..want], deadline)?;
        if n == 0 {
            return Err(WireError::Malformed("it ended inside its body"));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Ok(body)
}

/// Writes all of `bytes` by `deadline`.
fn write_by(stream: &mut TcpStream, mut bytes: &[u8], deadline: Instant) -> Result<(), WireError> {
    while !bytes.is_empty() {
        stream.set_write_timeout(Some(left(deadline)?))?;
        match stream.write(bytes) {
            Ok(0) => return Err(WireError::Gone),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(WireError::TimedOut);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// An answer: its status, its headers, its body.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The HTTP status.
    pub(crate) status: u16,
    /// Headers beyond `Content-Length` and `Connection`, which are added.
    pub(crate) headers: Vec<(&'static str, String)>,
    /// The body.
    pub(crate) body: Vec<u8>,
}

impl Reply {
    /// `self` with one more header.
    pub(crate) fn with_header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }

    /// The status line, the headers and (unless `head_only`) the body.
    fn bytes(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        if self.status != 204 {
            out.push_str(&format!("Content-Length: {}\r\n", self.body.len()));
        }
        out.push_str("Connection: close\r\n\r\n");
        let mut out = out.into_bytes();
        if !head_only && self.status != 204 {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// The reason phrase of each status `serve` answers with.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// Sends `reply` by `deadline` (its head only for a HEAD request), then
/// closes the connection: whatever the client sent and was not read is
/// never read.
pub(crate) fn send(
    mut stream: TcpStream,
    reply: &Reply,
    head_only: bool,
    deadline: Instant,
) -> Result<(), WireError> {
    let sent = write_by(&mut stream, &reply.bytes(head_only), deadline);
    let _ = stream.shutdown(Shutdown::Write);
    sent
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair on 127.0.0.1: (the client's end, the server's end).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn a_head_and_the_start_of_its_body() {
        let (mut client, mut server) = pair();
        client
            .write_all(b"POST /api/say?token=x HTTP/1.1\r\nHost: h\r\ncontent-length: 5\r\nOrigin:  http://h \r\n\r\nab")
            .unwrap();
        let head = read_head(&mut server, soon()).unwrap();
        assert_eq!(head.method, "POST");
        assert_eq!(head.target, "/api/say?token=x");
        assert_eq!(head.header("Origin"), Some("http://h"));
        assert_eq!(head.header("Content-Length"), Some("5"));
        client.write_all(b"cde").unwrap();
        assert_eq!(read_body(&mut server, &head, 5, soon()).unwrap(), b"abcde");
    }

    #[test]
    fn a_body_longer_than_the_bound_is_refused_unread() {
        let (mut client, mut server) = pair();
        client
            .write_all(b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n")
            .unwrap();
        let head = read_head(&mut server, soon()).unwrap();
        let started = Instant::now();
        let refused = read_body(&mut server, &head, 1000, soon()).unwrap_err();
        assert!(matches!(refused, WireError::BodyTooLong), "{refused:?}");
        assert_eq!(refused.status(), Some(413));
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_body_that_does_not_come_times_out_at_the_deadline() {
        let (mut client, mut server) = pair();
        client
            .write_all(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
            .unwrap();
        let head = read_head(&mut server, soon()).unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(300);
        let late = read_body(&mut server, &head, 1000, deadline).unwrap_err();
        assert!(matches!(late, WireError::TimedOut), "{late:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_head_that_does_not_end_times_out_and_silence_is_no_request() {
        let (mut client, mut server) = pair();
        let deadline = Instant::now() + Duration::from_millis(200);
        assert!(matches!(
            read_head(&mut server, deadline),
            Err(WireError::Gone)
        ));
        client.write_all(b"GET / HTTP/1.1\r\nHost:").unwrap();
        let deadline = Instant::now() + Duration::from_millis(200);
        assert!(matches!(
            read_head(&mut server, deadline),
            Err(WireError::TimedOut)
        ));
    }

    #[test]
    fn what_is_not_http_1_is_refused() {
        for (sent, status) in [
            (&b"GET /\r\n\r\n"[..], 400),
            (b"GET / HTTP/2.0\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
            (b"G\xffT / HTTP/1.1\r\n\r\n", 400),
        ] {
            let (mut client, mut server) = pair();
            client.write_all(sent).unwrap();
            let refused = read_head(&mut server, soon()).unwrap_err();
            assert_eq!(refused.status(), Some(status), "{sent:?}: {refused:?}");
        }
        let (mut client, mut server) = pair();
        client.write_all(&vec![b'a'; MAX_HEAD + 10]).unwrap();
        let refused = read_head(&mut server, soon()).unwrap_err();
        assert_eq!(refused.status(), Some(431));
        let (mut client, mut server) = pair();
        client
            .write_all(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap();
        let head = read_head(&mut server, soon()).unwrap();
        let refused = read_body(&mut server, &head, 10, soon()).unwrap_err();
        assert_eq!(refused.status(), Some(411));
    }

    #[test]
    fn an_answer_closes_its_connection() {
        let (mut client, server) = pair();
        let reply = Reply {
            status: 403,
            headers: vec![("Content-Type", "application/json".into())],
            body: b"{}".to_vec(),
        };
        send(server, &reply, false, soon()).unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert_eq!(
            got,
            "HTTP/1.1 403 Forbidden\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        );
        let (mut client, server) = pair();
        let empty = Reply {
            status: 204,
            headers: Vec::new(),
            body: Vec::new(),
        };
        send(server, &empty, false, soon()).unwrap();
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert_eq!(got, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
    }
}
