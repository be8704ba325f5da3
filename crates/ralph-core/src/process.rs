//! The one place that starts a command it must stop whole and sends a
//! signal to a child process: a command in a process group of its own, with
//! a deadline, its group killed, and (if asked) dying with this process
//! ([`group`]: verification commands, git, the client's `--version`, the
//! ending's notification); waiting for a child without reaping it; and
//! passing a signal on to the Claude Code client (`ralph-ctl run`).

pub mod group;

/// Sends SIGKILL to `pid`, or with `group` to the process group it leads.
/// Pids that do not fit a positive `pid_t` above 1 are ignored. No-op off Unix.
///
/// Only call this for a child that has not been reaped yet: once it is, its
/// pid (and, when no member is left, its group id) may belong to another process.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn kill(pid: u32, group: bool) {
    if let Ok(pid) = libc::pid_t::try_from(pid)
        && pid > 1
    {
        // SAFETY: kill(2) on one positive pid, or on the negative id of a
        // group that pid leads, only sends a signal.
        unsafe {
            libc::kill(if group { -pid } else { pid }, libc::SIGKILL);
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn kill(_pid: u32, _group: bool) {}

/// Sends `signal` to the single process `pid`: a child of the caller that
/// has not been reaped yet (so the pid is still its own), or one of its
/// [`descendants`] just listed. Pids that do not fit a positive `pid_t`
/// above 1 are refused.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn send_signal(pid: u32, signal: i32) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .ok()
        .filter(|pid| *pid > 1)
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) on one positive pid only sends a signal.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// True when `signal` is ignored in this process (its disposition is
/// `SIG_IGN`), as `nohup` leaves SIGHUP for the command it runs. Asked
/// before a handler is installed, it is what the process was started with.
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn signal_ignored(signal: i32) -> bool {
    // SAFETY: sigaction(2) with no new action only reads the current one
    // into `current`, a zeroed struct of the right type.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &raw mut current) == 0
            && current.sa_sigaction == libc::SIG_IGN
    }
}

#[cfg(not(unix))]
pub fn signal_ignored(_signal: i32) -> bool {
    false
}

/// The processes descended from `pid` (children, theirs, and so on), as
/// they are now: a client's tool calls run in processes of their own that
/// outlive it when only the client is signalled. From `/proc` on Linux,
/// from `ps` on other Unix systems; empty when neither can be read.
/// A pid in the list is only as current as the listing: signal it at once.
pub fn descendants(pid: u32) -> Vec<u32> {
    let pairs = parent_pairs();
    let mut found = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(child, _) in pairs.iter().filter(|(_, p)| *p == parent) {
            if child != pid && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

/// The variable that marks every process a client started: its value is
/// one client run's own tag ([`tagged`] finds them, however far they went
/// from the client's tree). `notify` is started without it.
pub const RUN_TAG_ENV: &str = "RALPH_CLIENT_RUN";

/// The processes whose environment holds `RUN_TAG_ENV=tag` (this one
/// excepted): what a client run started, even a process that left its
/// tree (`setsid`, a double fork: its parent is then init). From
/// `/proc/PID/environ` on Linux, which only the process's own user (or
/// root) can read; empty elsewhere. The environment read is the one the
/// process started with, so only a process that cleared it on purpose is
/// missed: its parent's tree still is walked ([`descendants`]).
pub fn tagged(tag: &str) -> Vec<u32> {
    let needle = format!("{RUN_TAG_ENV}={tag}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let me = std::process::id();
    entries
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let environ = std::fs::read(entry.path().join("environ")).ok()?;
            let found = environ
                .split(|b| *b == 0)
                .any(|var| var == needle.as_bytes());
            (found && pid != me).then_some(pid)
        })
        .collect()
}

/// Every (pid, parent pid) pair there is.
fn parent_pairs() -> Vec<(u32, u32)> {
    if let Ok(entries) = std::fs::read_dir("/proc") {
        let pairs: Vec<(u32, u32)> = entries
            .flatten()
            .filter_map(|entry| {
                let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                // After the command name, which may hold anything: state, ppid, …
                let after = &stat[stat.rfind(')')? + 1..];
                let ppid = after.split_whitespace().nth(1)?.parse::<u32>().ok()?;
                Some((pid, ppid))
            })
            .collect();
        if !pairs.is_empty() {
            return pairs;
        }
    }
    std::process::Command::new("ps")
        .args(["-A", "-o", "pid=", "-o", "ppid="])
        .stderr(std::process::Stdio::null())
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| {
                    let mut fields = line.split_whitespace().map(|f| f.parse::<u32>().ok());
                    Some((fields.next()??, fields.next()??))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Signals cannot be sent to another process off Unix.
#[cfg(not(unix))]
pub fn send_signal(_pid: u32, _signal: i32) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// Makes this process ignore SIGTERM, SIGHUP and SIGINT from here on: for
/// the few milliseconds of recording an API failure, which Claude Code 2.1
/// ends with SIGTERM 25–55 ms after it starts the hook, whether or not the
/// state and its log line have been written. (The state write is atomic
/// either way; this keeps the log line with it.)
#[cfg(unix)]
#[allow(unsafe_code)]
pub fn ignore_termination_signals() {
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: SIG_IGN installs no handler code.
        unsafe {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
}

/// Nothing to ignore off Unix.
#[cfg(not(unix))]
pub fn ignore_termination_signals() {}

/// Whether the child `pid` has exited, without reaping it: until it is
/// reaped (`Child::wait`), its pid and the id of the group it leads stay
/// taken, so signalling them cannot reach another process.
#[cfg(unix)]
pub(crate) fn has_exited(pid: u32) -> std::io::Result<bool> {
    wait_without_reaping(pid, libc::WNOHANG)
}

/// Blocks until the child `pid` has exited, without reaping it (see
/// [`has_exited`]): while it waits, the group the child leads can still be
/// killed safely from another thread.
#[cfg(unix)]
pub(crate) fn wait_exited(pid: u32) -> std::io::Result<()> {
    wait_without_reaping(pid, 0).map(|_| ())
}

/// `waitid` for the exit of `pid` with `WNOWAIT` (the child stays to be
/// reaped) and `extra` flags, retried when a signal interrupts it; whether
/// the child has exited.
#[cfg(unix)]
#[allow(unsafe_code)]
fn wait_without_reaping(pid: u32, extra: libc::c_int) -> std::io::Result<bool> {
    loop {
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value, and
        // waitid only writes into it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) with WNOWAIT only reports the child's state; the
        // pointer is to a live siginfo_t.
        let rc = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &raw mut info,
                libc::WEXITED | libc::WNOWAIT | extra,
            )
        };
        if rc == 0 {
            // SAFETY: after a successful waitid the pid field is set (0: still
            // running, which only WNOHANG can report).
            return Ok(unsafe { info.si_pid() } != 0);
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// Reads the stdout and stderr of `child` (which leads its own process
/// group; each read only when piped) to their ends while waiting for its
/// exit, in this thread, until `deadline`: one `poll` over the pipes and a
/// pidfd of the child, so no thread is started. When the child exits, its
/// group is killed (whatever it left behind) before it is reaped, so the
/// group id is still its own; its output then has `grace` (at least) to
/// end. At the deadline the group is killed. `None`, with the child
/// untouched, when the system gives no pidfd (Linux before 5.3, or a
/// sandbox that refuses it): the caller falls back to threads.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn collect_outputs(
    child: &mut std::process::Child,
    deadline: std::time::Instant,
    grace: std::time::Duration,
) -> Option<group::Ended> {
    use std::io::Read;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    /// One pipe being read (`None`: not piped, nothing to read), what it
    /// gave, and whether it ended.
    struct Pipe {
        file: Option<std::fs::File>,
        bytes: Vec<u8>,
        ended: bool,
    }

    let pid = libc::pid_t::try_from(child.id())
        .ok()
        .filter(|pid| *pid > 1)?;
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // -1 when it failed; a file descriptor is a C int.
    let fd = libc::c_int::try_from(raw).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the fd was just opened by pidfd_open and is owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
    let open = |fd: Option<OwnedFd>| Pipe {
        ended: fd.is_none(),
        file: fd.map(std::fs::File::from),
        bytes: Vec::new(),
    };
    let mut pipes = [
        open(child.stdout.take().map(OwnedFd::from)),
        open(child.stderr.take().map(OwnedFd::from)),
    ];
    let mut chunk = [0u8; 16 * 1024];
    let mut exited = false;
    let mut until = deadline;
    'reading: while !(exited && pipes.iter().all(|p| p.ended)) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let watched = |pipe: &Pipe| match &pipe.file {
            Some(file) if !pipe.ended => file.as_raw_fd(),
            _ => -1,
        };
        let mut fds = [
            libc::pollfd {
                fd: watched(&pipes[0]),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: watched(&pipes[1]),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: if exited { -1 } else { pidfd.as_raw_fd() },
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // (rounded up: a poll that wakes a moment early only polls again)
        let millis = libc::c_int::try_from(left.as_millis() + 1).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll(2) on three live pollfd structs (a negative fd is skipped).
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 3, millis) };
        if rc < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if fds[2].revents != 0 && !exited {
            exited = true;
            // Not reaped yet, so the group id is still the child's.
            kill(child.id(), true);
            until = deadline.max(Instant::now() + grace);
        }
        for (pipe, fd) in pipes.iter_mut().zip(&fds) {
            let Some(file) = pipe
                .file
                .as_mut()
                .filter(|_| fd.revents != 0 && !pipe.ended)
            else {
                continue;
            };
            match file.read(&mut chunk) {
                Ok(0) => pipe.ended = true,
                Ok(n) => pipe.bytes.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break 'reading,
            }
        }
    }
    if !exited {
        kill(child.id(), true);
        let _ = child.wait();
        let timed_out = Instant::now() >= deadline;
        return Some(if timed_out {
            group::Ended::TimedOut
        } else {
            group::Ended::Failed
        });
    }
    let Ok(status) = child.wait() else {
        return Some(group::Ended::Failed);
    };
    let [stdout, stderr] = pipes.map(|p| p.ended.then_some(p.bytes));
    Some(group::Ended::Exited {
        status,
        stdout,
        stderr,
    })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant};

    #[test]
    fn descendants_are_found_down_the_tree() {
        // sh starts a sleep of its own (not exec'd: a second command follows).
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & wait; true"])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = descendants(child.id());
            if !found.is_empty() || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(!found.contains(&child.id()));
        for pid in &found {
            send_signal(*pid, libc::SIGKILL).unwrap();
        }
        // The sleep gone, sh's wait returns and sh exits on its own.
        assert!(child.wait().unwrap().success());
        assert!(descendants(child.id()).is_empty());
    }

    #[test]
    fn tagged_finds_a_process_that_left_the_tree() {
        let tag = format!("test-{}-{:?}", std::process::id(), Instant::now());
        // sh starts a new session whose sleep outlives sh: its parent is
        // then init, and no walk from sh finds it.
        let mut child = Command::new("sh")
            .args(["-c", "setsid sleep 30 >/dev/null 2>&1 < /dev/null & exit 0"])
            .env(RUN_TAG_ENV, &tag)
            .spawn()
            .unwrap();
        assert!(child.wait().unwrap().success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            let found = tagged(&tag);
            if !found.is_empty() || Instant::now() >= deadline {
                break found;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(descendants(child.id()).is_empty());
        send_signal(found[0], libc::SIGKILL).unwrap();
        assert!(tagged("another-tag").is_empty());
    }

    #[test]
    fn has_exited_leaves_the_child_to_be_reaped() {
        let mut child = Command::new("sh").args(["-c", "exit 7"]).spawn().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !has_exited(child.id()).unwrap() {
            assert!(Instant::now() < deadline, "sh never exited");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Still a zombie: its status is there to be collected, once.
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id()));
        if let Ok(stat) = stat {
            assert!(stat.contains(") Z "), "{stat}");
        }
        assert_eq!(child.wait().unwrap().code(), Some(7));
        assert!(has_exited(child.id()).is_err(), "no longer our child");
    }

    #[test]
    fn send_signal_reaches_the_child_and_refuses_bad_pids() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        send_signal(child.id(), libc::SIGTERM).unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        for pid in [0, 1, u32::MAX] {
            assert!(send_signal(pid, 0).is_err(), "{pid}");
        }
    }
}
