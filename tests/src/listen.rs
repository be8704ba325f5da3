//! Listeners of a test's own that keep what each connection sent: where a
//! walled check reports to the test (its temp folder is its own, and a
//! queue item's worktree is gone once it lands; 127.0.0.1 stays open to a
//! check whose verify entry says `"network": true`), or a socket or
//! service of the person's (a tmux server's, an abstract one, one on
//! 127.0.0.1) that no check may reach.

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
        Heard::tcp_typed(false)
    }

    /// A listener on 127.0.0.1, and its port; when `typed`, what it hears
    /// is run by `sh`, as a service of the person's that runs commands
    /// would (a notebook server's, a CI runner's, an editor's).
    pub fn tcp_typed(typed: bool) -> (u16, Heard) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || kept.serve(listener.incoming(), typed));
        (port, heard)
    }

    /// A UDP socket on 127.0.0.1, and its port: each datagram an entry.
    pub fn udp() -> (u16, Heard) {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        (port, Heard::datagrams(move |buf| socket.recv(buf)))
    }

    /// A datagram unix socket at `path` (open to every user), or abstract
    /// when `path` starts with a NUL: each datagram an entry.
    pub fn unix_datagram(path: &str) -> Heard {
        use std::os::unix::net::UnixDatagram;
        let socket = if let Some(name) = path.strip_prefix('\0') {
            let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
            UnixDatagram::bind_addr(&address).unwrap()
        } else {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::remove_file(path);
            let socket = UnixDatagram::bind(path).unwrap();
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
            socket
        };
        Heard::datagrams(move |buf| socket.recv(buf))
    }

    /// Keeps each datagram `recv` reads, on a thread of its own, until it fails.
    fn datagrams(
        mut recv: impl FnMut(&mut [u8]) -> std::io::Result<usize> + Send + 'static,
    ) -> Heard {
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = recv(&mut buf) {
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
        Heard::abstract_unix_typed(name, false)
    }

    /// [`Heard::abstract_unix`], what it hears run by `sh` when `typed`.
    pub fn abstract_unix_typed(name: &str, typed: bool) -> Heard {
        let address = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        Heard::serve_unix(UnixListener::bind_addr(&address).unwrap(), typed)
    }

    fn serve_unix(listener: UnixListener, typed: bool) -> Heard {
        let heard = Heard::default();
        let kept = heard.clone();
        std::thread::spawn(move || kept.serve(listener.incoming(), typed));
        heard
    }

    /// Takes each connection of `incoming` in turn; when `typed`, runs
    /// what it sent with `sh`.
    fn serve<S: Read + Timeout>(
        &self,
        incoming: impl Iterator<Item = std::io::Result<S>>,
        typed: bool,
    ) {
        for stream in incoming.flatten() {
            let text = self.take(stream);
            if typed {
                let _ = std::process::Command::new("sh")
                    .args(["-c", &text])
                    .status();
            }
        }
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

/// Python (after `import ctypes, mmap, os, socket, struct`) defining
/// `uring_socket()`: a unix stream socket made by `io_uring`'s
/// `IORING_OP_SOCKET`, not by `socket(2)`, so that no filter of that call
/// sees it.
pub const PYTHON_URING_SOCKET: &str = r"def uring_socket():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    params = ctypes.create_string_buffer(120)
    fd = libc.syscall(425, 4, params)
    if fd < 0:
        raise OSError(ctypes.get_errno(), 'io_uring_setup: ' + os.strerror(ctypes.get_errno()))
    raw = params.raw
    sq_entries, cq_entries = struct.unpack_from('II', raw, 0)
    single = struct.unpack_from('I', raw, 20)[0] & 1
    sq = struct.unpack_from('IIIIIIII', raw, 40)
    cq = struct.unpack_from('IIIIIIII', raw, 80)
    sq_size, cq_size = sq[6] + sq_entries * 4, cq[5] + cq_entries * 16
    if single:
        sq_size = cq_size = max(sq_size, cq_size)
    rw = mmap.PROT_READ | mmap.PROT_WRITE
    sq_ring = mmap.mmap(fd, sq_size, mmap.MAP_SHARED, rw, offset=0)
    cq_ring = sq_ring if single else mmap.mmap(fd, cq_size, mmap.MAP_SHARED, rw, offset=0x8000000)
    sqes = mmap.mmap(fd, sq_entries * 64, mmap.MAP_SHARED, rw, offset=0x10000000)
    sqes[0:64] = struct.pack('<BBHiQQIIQ', 45, 0, 0, socket.AF_UNIX, socket.SOCK_STREAM, 0, 0, 0, 1) + bytes(24)
    tail, mask = struct.unpack_from('I', sq_ring, sq[1])[0], struct.unpack_from('I', sq_ring, sq[2])[0]
    struct.pack_into('I', sq_ring, sq[6] + (tail & mask) * 4, 0)
    struct.pack_into('I', sq_ring, sq[1], tail + 1)
    if libc.syscall(426, fd, 1, 1, 1, None, 0) < 0:
        raise OSError(ctypes.get_errno(), 'io_uring_enter')
    head, cmask = struct.unpack_from('I', cq_ring, cq[0])[0], struct.unpack_from('I', cq_ring, cq[2])[0]
    made = struct.unpack_from('i', cq_ring, cq[5] + (head & cmask) * 16 + 8)[0]
    if made < 0:
        raise OSError(-made, 'IORING_OP_SOCKET')
    return socket.socket(fileno=made)
";

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
