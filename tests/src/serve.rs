//! `ralph-ctl serve` run in a test project, and a minimal HTTP client for
//! its answers: the server's URL (with its token) read from its output,
//! requests with exactly the headers a test chooses (a browser's `Origin`,
//! none, another site's), and the server stopped with SIGINT when dropped.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use crate::bins;
use crate::project::{TempProject, signal_process};

/// A running `ralph-ctl serve`.
pub struct Served {
    child: Option<Child>,
    /// The URL it printed: `http://127.0.0.1:PORT/?token=…`.
    pub url: String,
    /// `http://127.0.0.1:PORT`: the page's origin.
    pub origin: String,
    /// The token.
    pub token: String,
    lines: Receiver<String>,
    /// Every line it wrote so far (stdout, then stderr's as they come).
    pub output: Vec<String>,
}

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// Its status code.
    pub status: u16,
    /// Its header lines, as sent.
    pub headers: String,
    /// Its body.
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    /// The value of header `name`, if sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

impl Served {
    /// Starts `ralph-ctl serve ARGS` in `project` (its own process group)
    /// and waits (up to 10 s) for the URL it prints.
    pub fn start(project: &TempProject, args: &[&str]) -> Served {
        let mut cmd = project.command(bins::ctl());
        cmd.arg("serve")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().expect("ralph-ctl serve starts");
        let (send, lines) = channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let send = send.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if send.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let mut served = Served {
            child: Some(child),
            url: String::new(),
            origin: String::new(),
            token: String::new(),
            lines,
            output: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while served.url.is_empty() && Instant::now() < deadline {
            served.read_lines(Duration::from_millis(100));
            if let Some(url) = served.output.iter().find_map(|l| {
                l.trim()
                    .strip_prefix("http://")
                    .map(|u| format!("http://{u}"))
            }) {
                let (origin, token) = url.split_once("/?token=").expect("a token in the URL");
                served.origin = origin.to_string();
                served.token = token.to_string();
                served.url = url;
            }
        }
        assert!(
            !served.url.is_empty(),
            "serve printed no URL: {:?}",
            served.output
        );
        served
    }

    /// A client of a server already running at `origin` with `token`
    /// (another thread's), for its requests only.
    pub fn client(origin: &str, token: &str) -> Served {
        Served {
            child: None,
            url: format!("{origin}/?token={token}"),
            origin: origin.to_string(),
            token: token.to_string(),
            lines: channel().1,
            output: Vec::new(),
        }
    }

    /// Takes what the server wrote within `wait`.
    pub fn read_lines(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.output.push(line);
        }
    }

    /// `host:port`.
    pub fn host(&self) -> &str {
        self.origin.trim_start_matches("http://")
    }

    /// `path` with this server's token added to its query.
    pub fn with_token(&self, path: &str) -> String {
        let join = if path.contains('?') { '&' } else { '?' };
        format!("{path}{join}token={}", self.token)
    }

    /// GET `path` as given (no token added).
    pub fn get(&self, path: &str) -> Answer {
        self.request("GET", path, &[], "")
    }

    /// A same-origin POST of `body` to `path` with the token, as the page sends it.
    pub fn post(&self, path: &str, body: &str) -> Answer {
        let origin = self.origin.clone();
        self.request(
            "POST",
            &self.with_token(path),
            &[
                ("Origin", &origin),
                ("Sec-Fetch-Site", "same-origin"),
                ("Content-Type", "application/json"),
            ],
            body,
        )
    }

    /// One request with exactly `headers` (and Host, Connection, Content-Length).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut stream = TcpStream::connect(self.host()).expect("the server accepts");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
            self.host(),
            body.len()
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).unwrap();
        stream.write_all(body.as_bytes()).unwrap();
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("an answer");
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (headers, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        let status = headers
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status: {answer}"));
        Answer {
            status,
            headers: headers.to_string(),
            body: body.to_string(),
        }
    }

    /// A connection that sends `head` (a request's line and headers, a
    /// blank line after them) and nothing more: a body it announces never
    /// comes. It stays open, unread, until the stream is dropped.
    pub fn hold(&self, head: &str) -> TcpStream {
        let mut stream = TcpStream::connect(self.host()).expect("the server accepts");
        stream.write_all(head.as_bytes()).unwrap();
        stream.flush().unwrap();
        stream
    }

    /// The head of a same-origin POST to `path` with the token, as the page
    /// sends it, announcing a body of `length` bytes.
    pub fn post_head(&self, path: &str, length: usize) -> String {
        format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nOrigin: {}\r\nSec-Fetch-Site: same-origin\r\n\
             Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n",
            self.with_token(path),
            self.host(),
            self.origin
        )
    }

    /// What the server sent on `stream` within `wait`, and whether it
    /// closed the connection by then.
    pub fn answered(stream: &mut TcpStream, wait: Duration) -> (String, bool) {
        let deadline = Instant::now() + wait;
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (String::from_utf8_lossy(&got).into_owned(), false);
            }
            stream.set_read_timeout(Some(left)).unwrap();
            match stream.read(&mut chunk) {
                Ok(0) => return (String::from_utf8_lossy(&got).into_owned(), true),
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return (String::from_utf8_lossy(&got).into_owned(), true);
                }
                Err(_) => return (String::from_utf8_lossy(&got).into_owned(), false),
            }
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Ctrl-C (SIGINT), then its exit within `wait`; `None` if it did not end.
    pub fn interrupt(&mut self, wait: Duration) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        signal_process(child.id(), libc::SIGINT);
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.read_lines(Duration::from_millis(200));
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Panics unless Ctrl-C ends it within `wait`, exit code 0, its last
    /// words `ralph-ctl serve: stopped`.
    pub fn stops_on_ctrl_c(&mut self, wait: Duration) {
        let status = self.interrupt(wait);
        let status = status.unwrap_or_else(|| panic!("serve ends on Ctrl-C within {wait:?}"));
        assert_eq!(status.code(), Some(0));
        let stopped = self.output.iter().any(|l| l == "ralph-ctl serve: stopped");
        assert!(stopped, "{:?}", self.output);
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
