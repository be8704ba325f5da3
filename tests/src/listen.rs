//! Listeners of a test's own that keep what each connection sent: where a
//! walled check reports to the test (its temp folder is its own, and a
//! queue item's worktree is gone once it lands; 127.0.0.1 stays open to
//! it), or a socket of the person's (a tmux server's, an abstract one)
//! that no check may reach.

use std::io::Read;
use std::net::TcpListener;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the connections to one listener sent, one entry each, in order.
#[derive(Clone, Debug, Default)]
pub struct Heard(Arc<Mutex<Vec<String>>>);

impl Heard {
    /// A listener on 127.0.0.1, and its port.
    pub fn tcp() -> (u16, Heard) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                kept.take(stream);
            }
        });
        (port, heard)
    }

    /// A UDP socket on 127.0.0.1, and its port: each datagram an entry.
    pub fn udp() -> (u16, Heard) {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                kept.keep(&buf[..n]);
            }
        });
        (port, heard)
    }

    /// A datagram unix socket at `path` (open to every user), or abstract
    /// when `path` starts with a NUL: each datagram an entry.
    pub fn unix_datagram(path: &str) -> Heard {
        use std::os::unix::net::UnixDatagram;
        let socket = match path.strip_prefix('\0') {
            Some(name) => {
                let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
                UnixDatagram::bind_addr(&address).unwrap()
            }
            None => {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::remove_file(path);
                let socket = UnixDatagram::bind(path).unwrap();
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
                socket
            }
        };
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = socket.recv(&mut buf) {
                kept.keep(&buf[..n]);
            }
        });
        heard
    }

    fn keep(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes).into_owned();
        self.0.lock().unwrap().push(text);
    }

    /// A listener on a unix socket at `path` (replacing any file there),
    /// open to every user when `for_anyone` (as a socket someone else made
    /// for themselves is to them); when `typed`, what it hears is run by
    /// `sh`, as a tmux server types it into the person's shell.
    pub fn unix(path: &Path, for_anyone: bool, typed: bool) -> Heard {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        if for_anyone {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        Heard::serve_unix(listener, typed)
    }

    /// A listener on the abstract unix socket `name` (no file: no mount can
    /// hide it).
    pub fn abstract_unix(name: &str) -> Heard {
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        Heard::serve_unix(UnixListener::bind_addr(&address).unwrap(), false)
    }

    fn serve_unix(listener: UnixListener, typed: bool) -> Heard {
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let text = kept.take(stream);
                if typed {
                    let _ = std::process::Command::new("sh")
                        .args(["-c", &text])
                        .status();
                }
            }
        });
        heard
    }

    /// Reads one connection to its end (bounded in time), and keeps it.
    fn take(&self, mut stream: impl Read + Timeout) -> String {
        stream.timeout(Duration::from_secs(5));
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        self.0.lock().unwrap().push(text.clone());
        text
    }

    /// Everything heard so far, a connection an entry.
    pub fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }

    /// Forgets what was heard.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }
}

/// A stream whose reads can be bounded in time.
trait Timeout {
    fn timeout(&mut self, after: Duration);
}

impl Timeout for std::net::TcpStream {
    fn timeout(&mut self, after: Duration) {
        let _ = self.set_read_timeout(Some(after));
    }
}

impl Timeout for std::os::unix::net::UnixStream {
    fn timeout(&mut self, after: Duration) {
        let _ = self.set_read_timeout(Some(after));
    }
}

/// Whether the tests run as root (what a check may do as root is tested
/// only then).
#[allow(unsafe_code)]
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
