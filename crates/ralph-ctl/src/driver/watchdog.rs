//! A client never outlives its driver, whatever ends the driver (SIGKILL
//! included, which no handler sees). Next to each client the driver starts
//! a small process of its own binary (`ralph-ctl watchdog`, hidden), in a
//! process group of its own (no Ctrl-C or hang-up from the terminal reaches
//! it), reading a pipe whose writing end only the driver holds. When the
//! client has exited and been reaped, the driver writes a line and the
//! watchdog leaves. When the driver dies first, the pipe closes without a
//! line: the watchdog ends the client (SIGTERM, so it can write its
//! transcript's last lines, then SIGKILL after a grace) and the processes
//! of its tool calls. The client is known by its pid and start time, so a
//! pid given to another process since is never signalled.

use std::io::{self, BufRead, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use ralph_core::observe::liveness;
use ralph_core::process::group::{GroupChild, Lifetime};
use ralph_core::units::ProcessId;

/// How long the client has, once its driver is gone, to end on SIGTERM
/// before it is killed.
pub(crate) const ORPHAN_GRACE: Duration = Duration::from_secs(5);

/// The watchdog of one client, from the driver's side.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: GroupChild,
    line: Option<ChildStdin>,
}

impl Watchdog {
    /// Starts the watchdog of `client` (this binary, `watchdog --pid P
    /// [--started S]`).
    pub(crate) fn start(client: ProcessId) -> io::Result<Watchdog> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("watchdog")
            .arg("--pid")
            .arg(client.pid.to_string());
        if let Some(started) = client.started {
            command.arg("--started").arg(started.to_string());
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // A group of its own, which no Ctrl-C or hang-up of the terminal reaches.
        let mut child = GroupChild::spawn(&mut command, Lifetime::Independent)?;
        let line = child.child().stdin.take();
        Ok(Watchdog { child, line })
    }

    /// Once the client has exited and been reaped: the watchdog leaves
    /// without touching anything (waited for a moment, killed past it).
    pub(crate) fn disarm(mut self) {
        if let Some(mut line) = self.line.take() {
            let _ = line.write_all(b"done\n");
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.child().try_wait() {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.child().kill();
        let _ = self.child.child().wait();
    }
}

/// The watchdog's side (`ralph-ctl watchdog`): waits for a line on `input`;
/// at its end without one (the driver is gone), ends `client` and its
/// tool calls' processes if it still runs. Returns whether it did.
pub(crate) fn watch(client: ProcessId, input: impl io::Read, grace: Duration) -> bool {
    let mut line = String::new();
    let said = io::BufReader::new(input).read_line(&mut line);
    if matches!(said, Ok(n) if n > 0) {
        return false;
    }
    end_orphan(client, grace)
}

/// Ends `client` (SIGTERM, SIGKILL after `grace`) and every process below
/// it; false when it was already gone.
fn end_orphan(client: ProcessId, grace: Duration) -> bool {
    if !liveness::is_alive(&client) {
        return false;
    }
    let mut tree = ralph_core::process::descendants(client.pid);
    let _ = ralph_core::process::send_signal(client.pid, 15);
    for pid in &tree {
        let _ = ralph_core::process::send_signal(*pid, 15);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && liveness::is_alive(&client) {
        thread::sleep(Duration::from_millis(50));
    }
    if liveness::is_alive(&client) {
        for pid in ralph_core::process::descendants(client.pid) {
            if !tree.contains(&pid) {
                tree.push(pid);
            }
        }
        let _ = ralph_core::process::send_signal(client.pid, 9);
    }
    for pid in tree {
        let _ = ralph_core::process::send_signal(pid, 9);
    }
    true
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::process::Child;

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().unwrap()
    }

    fn gone(child: &mut Child) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_line_from_the_driver_leaves_the_client_alone() {
        let mut client = sleeper();
        let id = liveness::of_pid(client.id());
        assert!(!watch(id, &b"done\n"[..], Duration::from_millis(100)));
        assert!(matches!(client.try_wait(), Ok(None)), "still running");
        let _ = client.kill();
        let _ = client.wait();
    }

    #[test]
    fn the_pipe_closing_without_a_line_ends_the_client() {
        let mut client = sleeper();
        let id = liveness::of_pid(client.id());
        assert!(watch(id, &b""[..], Duration::from_secs(2)));
        assert!(gone(&mut client), "the client was ended");
    }

    #[test]
    fn a_pid_given_to_another_process_is_never_signalled() {
        let mut client = sleeper();
        let mut id = liveness::of_pid(client.id());
        if id.started.is_none() {
            // No start times on this system: nothing to tell apart.
            let _ = client.kill();
            let _ = client.wait();
            return;
        }
        id.started = id.started.map(|s| s + 1);
        assert!(!watch(id, &b""[..], Duration::from_millis(100)));
        assert!(matches!(client.try_wait(), Ok(None)), "left alone");
        let _ = client.kill();
        let _ = client.wait();
    }
}
