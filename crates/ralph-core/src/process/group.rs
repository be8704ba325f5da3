//! The one way ralph starts a command it must be able to stop whole: as a
//! process group of its own, optionally guarded so that the group dies
//! with this process, waited for up to a deadline, its whole group killed
//! (whatever it left running) and only then reaped. Verification commands,
//! every git call (through `own_git::GitCall`, the one git runner of both
//! crates), the client's `--version` and the ending's notification all
//! start here.
//!
//! The order is what keeps the group kill safe: a group's id is its
//! leader's pid, and a group is never signalled after its leader was
//! reaped (by then the id may belong to an unrelated process).

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use super::kill;

/// What keeps a group from outliving this process (Unix): a small `sh` that
/// leads the process group the command is started in and waits on a pipe
/// whose write end only this process holds (close-on-exec, so the command
/// never inherits it). However this process ends, SIGKILL included, the
/// kernel closes that end; `read` returns, and the guard kills its whole
/// group (`kill 0`): the command, everything it started, and itself. While
/// this process lives, the guard only waits.
///
/// The group's id is the guard's pid, and the guard is this process's
/// child, reaped only after the group is killed: the id cannot have gone to
/// another process when it is signalled. And the group exists before the
/// command does, so there is no moment the command runs unguarded.
#[cfg(unix)]
#[derive(Debug)]
struct ParentGuard {
    process: Child,
    /// Held, never written: its closing is the signal.
    _alive: std::io::PipeWriter,
}

#[cfg(unix)]
impl ParentGuard {
    fn start() -> std::io::Result<ParentGuard> {
        use std::os::unix::process::CommandExt;
        let (reader, alive) = std::io::pipe()?;
        let process = Command::new("sh")
            .args(["-c", "read -r line; kill -s KILL 0"])
            .stdin(reader)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        Ok(ParentGuard {
            process,
            _alive: alive,
        })
    }
}

/// `command` run by the platform's shell: `sh -c` (`cmd /C` on Windows),
/// as the verification commands, the notification and a queue's command
/// are written.
pub fn shell(command: &str) -> Command {
    if cfg!(windows) {
        let mut cmd = Command::new("cmd");
        cmd.args(["/C", command]);
        cmd
    } else {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", command]);
        cmd
    }
}

/// Whether a group dies with this process (see [`GroupChild::spawn`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifetime {
    /// The group is killed when this process ends, however it ends: for a
    /// command that must never run unwatched (a verification command the
    /// hook started).
    DiesWithParent,
    /// The group lives on its own: for a short command this process waits
    /// for anyway (git), or one that must outlive it (a notification).
    Independent,
}

/// A started command leading a process group of its own, or (with
/// [`Lifetime::DiesWithParent`] on Unix) in the group of its guard.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    #[cfg(unix)]
    guard: Option<ParentGuard>,
}

impl GroupChild {
    /// Starts `command` as a process group of its own. With
    /// [`Lifetime::DiesWithParent`] it starts in the group of a guard that
    /// kills the group if this process dies first; where no guard can start
    /// (no `sh`), in a group of its own, as the deadline still needs.
    pub fn spawn(command: &mut Command, lifetime: Lifetime) -> std::io::Result<GroupChild> {
        #[cfg(unix)]
        let guard = match lifetime {
            Lifetime::DiesWithParent => ParentGuard::start().ok(),
            Lifetime::Independent => None,
        };
        #[cfg(not(unix))]
        let _ = lifetime;
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt;
            let group = guard.as_ref().map_or(0, |g| g.process.id());
            command.process_group(i32::try_from(group).unwrap_or(0));
        }
        match command.spawn() {
            Ok(child) => Ok(GroupChild {
                child,
                #[cfg(unix)]
                guard,
            }),
            Err(e) => {
                #[cfg(unix)]
                if let Some(mut guard) = guard {
                    kill(guard.process.id(), true);
                    let _ = guard.process.wait();
                }
                Err(e)
            }
        }
    }

    /// The command's process, for its pipes.
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Leaves the command running on its own: it is not waited for, and
    /// the system reaps it once this process is gone.
    pub fn detach(self) {}

    /// Waits for the command to exit or for `deadline`, then kills its
    /// group (whatever it left running, a background server say, or all of
    /// it when it overran) and only then reaps it. Returns the exit code
    /// (`None` when it overran or was killed by a signal) and whether it
    /// timed out.
    pub fn wait_then_kill_group(mut self, deadline: Instant) -> (Option<i32>, bool) {
        wait_then_kill_group(&mut self, deadline)
    }

    /// Reads the command's stdout (which must be piped) to its end while
    /// waiting for its exit, until `deadline`; once it has exited its group
    /// is killed, and its output has `grace` (at least) to end. On Linux
    /// this thread does it all with a pidfd; elsewhere, or without one, a
    /// reader thread and a watchdog thread.
    pub fn collect_output(mut self, deadline: Instant, grace: Duration) -> Collected {
        self.collect_output_waiting(deadline, grace, Waiting::Pidfd)
    }

    /// [`GroupChild::collect_output`], choosing how it waits (the tests
    /// run both ways).
    pub(crate) fn collect_output_waiting(
        &mut self,
        deadline: Instant,
        grace: Duration,
        waiting: Waiting,
    ) -> Collected {
        match self.collect_outputs_waiting(deadline, grace, waiting) {
            Ended::Exited { status, stdout, .. } => Collected::Exited {
                status,
                output: stdout,
            },
            Ended::TimedOut | Ended::Failed => Collected::Failed,
        }
    }

    /// [`GroupChild::collect_output`] of stdout and stderr both (each read
    /// when piped), telling a command that overran its deadline from one
    /// that could not be waited for: what git's runner needs.
    pub fn collect_outputs(mut self, deadline: Instant, grace: Duration) -> Ended {
        self.collect_outputs_waiting(deadline, grace, Waiting::Pidfd)
    }

    /// [`GroupChild::collect_outputs`], choosing how it waits (the tests
    /// run both ways).
    pub(crate) fn collect_outputs_waiting(
        &mut self,
        deadline: Instant,
        grace: Duration,
        waiting: Waiting,
    ) -> Ended {
        // The pidfd path kills the group the command leads: only without a guard.
        #[cfg(target_os = "linux")]
        if waiting == Waiting::Pidfd
            && self.guard.is_none()
            && let Some(ended) = super::collect_outputs(&mut self.child, deadline, grace)
        {
            return ended;
        }
        #[cfg(not(target_os = "linux"))]
        let _ = waiting;
        self.wait_with_threads(deadline, grace)
    }

    /// [`GroupChild::collect_outputs`] with a reader thread for each pipe
    /// and a watchdog thread; an output is `None` when it did not end
    /// within `grace` after the exit.
    fn wait_with_threads(&mut self, deadline: Instant, grace: Duration) -> Ended {
        // Read on threads until the command closes its output (no polling
        // delay), while this one waits for it to exit.
        let stdout = read_on_a_thread(self.child.stdout.take());
        let stderr = read_on_a_thread(self.child.stderr.take());
        let (done, finished) = mpsc::channel::<()>();
        let leader = self.leader();
        let watchdog = thread::spawn(move || {
            let left = deadline.saturating_duration_since(Instant::now());
            if finished.recv_timeout(left) == Err(mpsc::RecvTimeoutError::Timeout) {
                kill(leader, true);
                true
            } else {
                false
            }
        });
        #[cfg(unix)]
        let waited = super::wait_exited(self.child.id()).is_ok();
        #[cfg(not(unix))]
        let waited = self.child.wait().is_ok();
        let _ = done.send(());
        let timed_out = watchdog.join().unwrap_or(true);
        if waited {
            // Not reaped yet (on Unix), so the group id is still its own.
            self.kill_group();
        }
        let status = self.reap_status();
        let status = match status {
            _ if timed_out => return Ended::TimedOut,
            Some(status) if waited => status,
            _ => return Ended::Failed,
        };
        // The command has exited and its group is gone: its output has
        // ended, unless something that left the group still holds it.
        let until = deadline.max(Instant::now() + grace);
        let output = |pipe: Option<mpsc::Receiver<Vec<u8>>>| match pipe {
            None => Some(Vec::new()),
            Some(pipe) => pipe
                .recv_timeout(until.saturating_duration_since(Instant::now()))
                .ok(),
        };
        Ended::Exited {
            status,
            stdout: output(stdout),
            stderr: output(stderr),
        }
    }

    /// The id of the group: its leader's pid (the guard's, when there is one).
    fn leader(&self) -> u32 {
        #[cfg(unix)]
        if let Some(guard) = &self.guard {
            return guard.process.id();
        }
        self.child.id()
    }

    /// Reaps the command, then its guard; the command's exit status.
    fn reap_status(&mut self) -> Option<ExitStatus> {
        let status = self.child.wait().ok();
        #[cfg(unix)]
        if let Some(guard) = &mut self.guard {
            let _ = guard.process.wait();
        }
        status
    }
}

/// Reads `pipe` to its end on a thread of its own: what it gave, once it
/// ended (`None`: nothing to read).
fn read_on_a_thread(pipe: Option<impl Read + Send + 'static>) -> Option<mpsc::Receiver<Vec<u8>>> {
    let mut pipe = pipe?;
    let (sent, output) = mpsc::channel::<Vec<u8>>();
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = sent.send(bytes);
    });
    Some(output)
}

/// What [`GroupChild::collect_outputs`] saw of a command.
#[derive(Debug)]
pub enum Ended {
    /// It exited before the deadline; each output is everything it printed
    /// there (empty when not piped), `None` when it did not end within the
    /// grace after the exit (something outside its group still held it).
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// Its stdout.
        stdout: Option<Vec<u8>>,
        /// Its stderr.
        stderr: Option<Vec<u8>>,
    },
    /// Still running at the deadline: its group was killed and it was reaped.
    TimedOut,
    /// It could not be waited for (its group was killed all the same).
    Failed,
}

/// What [`GroupChild::collect_output`] saw of a command.
pub enum Collected {
    /// It exited before the deadline; `output` is everything it printed,
    /// `None` when its output did not end within the grace after its exit
    /// (something outside its group still held it).
    Exited {
        /// How it exited.
        status: ExitStatus,
        /// Everything it printed, `None` when that never ended.
        output: Option<Vec<u8>>,
    },
    /// Still running at the deadline (its group was killed and it was
    /// reaped), or it could not be waited for.
    Failed,
}

/// How [`GroupChild::collect_output_waiting`] waits: with a pidfd where
/// there is one, or (and in the tests of that path) with threads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Waiting {
    Pidfd,
    #[cfg_attr(not(test), allow(dead_code))]
    Threads,
}

/// A started command seen through the three things a deadline needs; the
/// order they are used in is what keeps the group kill safe (see
/// [`wait_then_kill_group`]).
trait GroupLeader {
    /// Whether the command has exited, without reaping it.
    fn exited(&mut self) -> std::io::Result<bool>;
    /// Kills the command's whole process group.
    fn kill_group(&mut self);
    /// Reaps the command; its exit code (`None` when killed by a signal).
    fn reap(&mut self) -> Option<i32>;
}

impl GroupLeader for GroupChild {
    #[cfg(unix)]
    fn exited(&mut self) -> std::io::Result<bool> {
        super::has_exited(self.child.id())
    }

    #[cfg(not(unix))]
    fn exited(&mut self) -> std::io::Result<bool> {
        // A Windows process handle keeps its id from being reused, so
        // reaping early is harmless there.
        self.child.try_wait().map(|status| status.is_some())
    }

    fn kill_group(&mut self) {
        kill(self.leader(), true);
        let _ = self.child.kill();
    }

    fn reap(&mut self) -> Option<i32> {
        self.reap_status().and_then(|status| status.code())
    }
}

/// Waits for the leader to exit or for `deadline`, then kills its group
/// and only then reaps it: (exit code, `None` when it overran; whether it
/// timed out).
fn wait_then_kill_group(leader: &mut impl GroupLeader, deadline: Instant) -> (Option<i32>, bool) {
    let timed_out = loop {
        match leader.exited() {
            Ok(true) => break false,
            Ok(false) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(false) => break true,
            // Cannot wait for it: stop it rather than wait forever.
            Err(_) => break false,
        }
    };
    leader.kill_group();
    let code = leader.reap();
    (if timed_out { None } else { code }, timed_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what the deadline logic does to a fake leader.
    struct Recorder {
        /// What `exited` answers, in turn (then: still running).
        answers: Vec<std::io::Result<bool>>,
        events: Vec<&'static str>,
    }

    impl GroupLeader for Recorder {
        fn exited(&mut self) -> std::io::Result<bool> {
            assert!(!self.events.contains(&"reap"), "waited on a reaped leader");
            self.events.push("exited?");
            if self.answers.is_empty() {
                Ok(false)
            } else {
                self.answers.remove(0)
            }
        }
        fn kill_group(&mut self) {
            self.events.push("kill group");
        }
        fn reap(&mut self) -> Option<i32> {
            self.events.push("reap");
            Some(3)
        }
    }

    #[test]
    fn the_group_is_killed_before_the_leader_is_reaped_never_after() {
        /// (what `exited` answers, the timeout, the expected result)
        type Case = (Vec<std::io::Result<bool>>, Duration, (Option<i32>, bool));
        let cases: Vec<Case> = vec![
            // exits on the second look
            (
                vec![Ok(false), Ok(true)],
                Duration::from_secs(60),
                (Some(3), false),
            ),
            // overruns its deadline
            (vec![], Duration::from_millis(30), (None, true)),
            // cannot be waited for
            (
                vec![Err(std::io::Error::other("ECHILD"))],
                Duration::from_secs(60),
                (Some(3), false),
            ),
        ];
        for (answers, timeout, want) in cases {
            let mut leader = Recorder {
                answers,
                events: Vec::new(),
            };
            let got = wait_then_kill_group(&mut leader, Instant::now() + timeout);
            assert_eq!(got, want);
            let tail: Vec<_> = leader.events.iter().rev().take(2).rev().copied().collect();
            assert_eq!(tail, ["kill group", "reap"], "{:?}", leader.events);
            let kills = leader.events.iter().filter(|e| **e == "kill group").count();
            assert_eq!(kills, 1, "{:?}", leader.events);
        }
    }

    #[cfg(unix)]
    #[test]
    fn an_overrunning_command_is_stopped_with_everything_it_started() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "sleep 30 & sleep 30"]).stdout(Stdio::null());
        let started = Instant::now();
        let child = GroupChild::spawn(&mut sh, Lifetime::DiesWithParent).unwrap();
        let (code, timed_out) =
            child.wait_then_kill_group(Instant::now() + Duration::from_millis(200));
        assert_eq!((code, timed_out), (None, true));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[cfg(unix)]
    #[test]
    fn output_is_collected_both_ways_and_a_hang_is_cut_at_the_deadline() {
        for waiting in [Waiting::Pidfd, Waiting::Threads] {
            let mut echo = Command::new("sh");
            echo.args(["-c", "echo one; echo two"])
                .stdout(Stdio::piped());
            let mut child = GroupChild::spawn(&mut echo, Lifetime::Independent).unwrap();
            let deadline = Instant::now() + Duration::from_secs(20);
            match child.collect_output_waiting(deadline, Duration::from_millis(200), waiting) {
                Collected::Exited { status, output } => {
                    assert!(status.success(), "{waiting:?}");
                    assert_eq!(output.as_deref(), Some(&b"one\ntwo\n"[..]), "{waiting:?}");
                }
                Collected::Failed => panic!("{waiting:?}: failed"),
            }
            let mut hang = Command::new("sleep");
            hang.arg("30").stdout(Stdio::piped());
            let mut child = GroupChild::spawn(&mut hang, Lifetime::Independent).unwrap();
            let started = Instant::now();
            let deadline = started + Duration::from_millis(200);
            let got = child.collect_output_waiting(deadline, Duration::from_millis(200), waiting);
            assert!(matches!(got, Collected::Failed), "{waiting:?}");
            assert!(started.elapsed() < Duration::from_secs(10), "{waiting:?}");
        }
    }
}
