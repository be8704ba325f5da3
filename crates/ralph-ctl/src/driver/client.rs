//! Running the client and watching it: [`RunningClient`] is the process
//! (the only I/O here), [`supervise`] the loop that waits for it, passes
//! signals on, and stops a client that ignores them.

use std::io::{self, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ralph_core::process::group::{Collected, GroupChild, Lifetime};
use ralph_core::text::printable;

use super::command::{ClientCommand, PromptDelivery};
use super::live;
use super::os_signals::{Signal, SignalSource};

/// How long a client has to exit after a signal was passed on to it before
/// it is killed (SIGKILL).
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(10);

/// How long a headless client has to exit on a SIGINT the terminal sent
/// the whole group before the driver passes its own on (it went to the
/// driver alone).
pub(crate) const INTERRUPT_PASS_ON: Duration = Duration::from_secs(1);
/// How often the driver looks at the client and at the signals.
pub(crate) const TICK: Duration = Duration::from_millis(25);
/// How long the processes of a signalled client's tool calls have to end
/// once the client is gone, before they are killed.
pub(crate) const LEFTOVER_GRACE: Duration = Duration::from_secs(2);
/// How long a headless client has, once its turn is done (its result
/// written, or the loop no longer running), to exit on its own before it
/// and everything it started are ended: both clients otherwise wait for
/// the agent's background tasks (a server, `sleep 300`), then ask the
/// model once more.
pub(crate) const DONE_GRACE: Duration = Duration::from_secs(2);
/// How long a client ended after its turn has to exit on SIGTERM before it
/// is killed.
pub(crate) const DONE_KILL_GRACE: Duration = Duration::from_secs(3);
/// How often the idle watch looks at the client's transcript and output.
pub(crate) const IDLE_LOOK: Duration = Duration::from_millis(500);

/// How the client ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientExit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal number.
    Signal(i32),
}

impl ClientExit {
    /// The exit code a shell would report (128 + signal for a killed client).
    pub(crate) fn code(self) -> i32 {
        match self {
            ClientExit::Code(code) => code,
            ClientExit::Signal(signal) => ralph_core::exit_codes::signalled(signal),
        }
    }

    fn from_status(status: ExitStatus) -> ClientExit {
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let Some(signal) = status.signal() {
                return ClientExit::Signal(signal);
            }
        }
        ClientExit::Code(status.code().unwrap_or(-1))
    }

    /// "Claude Code exited with code 0" / "… with code 137 (killed by signal 9)".
    pub(crate) fn describe(self) -> String {
        match self {
            ClientExit::Code(code) => format!("Claude Code exited with code {code}"),
            ClientExit::Signal(signal) => format!(
                "Claude Code exited with code {} (killed by signal {signal})",
                self.code()
            ),
        }
    }
}

/// A started client, as [`supervise`] sees it.
pub(crate) trait Client {
    /// Its end, once it has exited (and only then is it reaped).
    fn try_wait(&mut self) -> io::Result<Option<ClientExit>>;
    /// Passes `signal` on to it.
    fn signal(&mut self, signal: Signal);
    /// Kills it (SIGKILL).
    fn kill(&mut self);
    /// Whether its turn is done while it still runs (its result written,
    /// or its loop no longer running): it is then ended after
    /// [`DONE_GRACE`]. Never, unless the client says.
    fn turn_done(&mut self) -> bool {
        false
    }
}

/// What happened while the client ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Supervision {
    /// How it ended.
    pub(crate) exit: ClientExit,
    /// The first signal the driver received while it ran.
    pub(crate) signal: Option<Signal>,
    /// True when it outlived [`KILL_GRACE`] after a signal and was killed.
    pub(crate) killed_after_grace: bool,
    /// Set when the driver ended it because it showed no sign of work for
    /// this long ([`IdleWatch`]).
    pub(crate) idle_cut_off: Option<Duration>,
    /// True when its turn was done and it still ran [`DONE_GRACE`] later
    /// (waiting on the agent's background tasks): the driver ended it.
    pub(crate) ended_after_turn: bool,
}

/// Ends a client that shows no sign of work for `timeout`
/// (`idleTimeoutSeconds`): a hung session must not stall the night.
pub(crate) struct IdleWatch<'a> {
    /// How long the client may show no sign of work.
    pub(crate) timeout: Duration,
    /// How often `activity` is read.
    pub(crate) every: Duration,
    /// A number that changes while the client works (the size of its
    /// transcript plus the bytes of its output).
    pub(crate) activity: &'a mut dyn FnMut() -> u64,
}

impl Supervision {
    /// What ended the client, for the loop's `endedBecause`.
    pub(crate) fn describe(&self, grace: Duration) -> String {
        let client = if self.killed_after_grace {
            format!(
                "Claude Code did not exit within {} s and was killed ({})",
                grace.as_secs(),
                self.exit.describe()
            )
        } else {
            self.exit.describe()
        };
        if let Some(idle) = self.idle_cut_off {
            return format!(
                "no sign of work from Claude Code for {} s (idleTimeoutSeconds): SIGTERM sent; {client}",
                idle.as_secs()
            );
        }
        if self.ended_after_turn && self.signal.is_none() {
            return format!(
                "its turn was done and Claude Code still ran {} s later (waiting on the agent's \
                 background tasks): it was ended with them; {client}",
                DONE_GRACE.as_secs()
            );
        }
        match self.signal {
            Some(signal) if signal.forwarded() => {
                format!("{} received and passed on; {client}", signal.describe())
            }
            Some(signal) => format!("{} received; {client}", signal.describe()),
            None => client,
        }
    }
}

/// Waits for `client` to exit. Signals the driver receives are passed on
/// (SIGTERM, SIGHUP; not SIGINT, which the terminal already sent it); a
/// client still running `grace` after the first one passed on is killed.
/// With `pass_on_interrupt` (a headless client, which no person reaches
/// through a terminal), a SIGINT the client has not exited on by then (it
/// went to the driver alone: `kill -INT`) is passed on too.
/// With `idle`, a client whose activity has not changed for its timeout is
/// sent SIGTERM (and killed after `grace` like any other).
/// The client is only signalled before [`Client::try_wait`] has seen it
/// exit, never after it was reaped.
pub(crate) fn supervise(
    client: &mut impl Client,
    signals: &mut impl SignalSource,
    grace: Duration,
    tick: Duration,
    mut idle: Option<IdleWatch<'_>>,
    pass_on_interrupt: Option<Duration>,
) -> io::Result<Supervision> {
    let mut first = None;
    let mut interrupt_at = None::<Instant>;
    let mut kill_at = None;
    let mut killed = false;
    let mut idle_cut_off = None;
    let mut done_at = None::<Instant>;
    let mut ended_after_turn = false;
    let started = Instant::now();
    let mut last_activity = (None, started);
    let mut looked_at = None::<Instant>;
    loop {
        for signal in signals.take() {
            first.get_or_insert(signal);
            if signal.forwarded() {
                client.signal(signal);
                kill_at.get_or_insert(Instant::now() + grace);
            } else if let Some(wait) = pass_on_interrupt {
                interrupt_at.get_or_insert(Instant::now() + wait);
            }
        }
        if interrupt_at.is_some_and(|at| Instant::now() >= at) && kill_at.is_none() {
            if client.try_wait()?.is_none() {
                client.signal(Signal::Interrupt);
                kill_at = Some(Instant::now() + grace);
            }
            interrupt_at = None;
        }
        if let Some(exit) = client.try_wait()? {
            return Ok(Supervision {
                exit,
                signal: first,
                killed_after_grace: killed,
                idle_cut_off,
                ended_after_turn,
            });
        }
        if kill_at.is_none() {
            if done_at.is_none() && client.turn_done() {
                done_at = Some(Instant::now() + DONE_GRACE);
            }
            if done_at.is_some_and(|at| Instant::now() >= at) {
                client.signal(Signal::Terminate);
                kill_at = Some(Instant::now() + grace.min(DONE_KILL_GRACE));
                ended_after_turn = true;
            }
        }
        if let Some(watch) = idle.as_mut().filter(|_| kill_at.is_none()) {
            let now = Instant::now();
            if looked_at.is_none_or(|at| now.duration_since(at) >= watch.every) {
                looked_at = Some(now);
                let activity = (watch.activity)();
                if last_activity.0 != Some(activity) {
                    last_activity = (Some(activity), now);
                }
            }
            if now.duration_since(last_activity.1) >= watch.timeout {
                client.signal(Signal::Terminate);
                kill_at = Some(now + grace);
                idle_cut_off = Some(watch.timeout);
            }
        }
        if !killed && kill_at.is_some_and(|at| Instant::now() >= at) {
            client.kill();
            killed = true;
        }
        thread::sleep(tick);
    }
}

/// How long the client's output may still arrive after it exited.
pub(crate) const OUTPUT_GRACE: Duration = Duration::from_secs(2);
/// Most of the client's output kept for reading its result: the tail.
pub(crate) const MAX_CAPTURED_BYTES: usize = 4 * 1024 * 1024;

/// How long `claude --version` may take.
pub(crate) const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The client's version (`claude --version`), or `None` when it does not
/// say within [`VERSION_TIMEOUT`].
pub(crate) fn version(
    client: &super::command::ClientProgram,
) -> Option<super::command::ClientVersion> {
    let mut command = Command::new(&client.program);
    command
        .args(&client.leading_args)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // In a group of its own, cut off whole at the deadline: Node starting a
    // large cli.js on a loaded machine took 7.6 s here.
    let child = GroupChild::spawn(&mut command, Lifetime::Independent).ok()?;
    let deadline = Instant::now() + VERSION_TIMEOUT;
    match child.collect_output(deadline, Duration::from_millis(200)) {
        Collected::Exited {
            output: Some(bytes),
            ..
        } => super::command::ClientVersion::parse(&String::from_utf8_lossy(&bytes)),
        _ => None,
    }
}

/// The end of the output reader (it signals when the pipe closed) and the
/// output's tail.
type Captured = (mpsc::Receiver<()>, Arc<Mutex<Vec<u8>>>, Arc<AtomicU64>);

/// What the driver does with each line of the client's stream-json output
/// as it comes (record a usage window the client reported, say).
pub(crate) type LineHook = Box<dyn FnMut(&[u8]) + Send>;

/// Where the client's stdout goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Straight to the terminal (the interactive client).
    Terminal,
    /// Passed on to ours as it is, and kept (`--output-format json`).
    PassOn,
    /// Kept, and shown as readable lines (`--output-format stream-json`).
    Readable,
}

/// The client process.
pub(crate) struct RunningClient {
    child: Child,
    captured: Option<Captured>,
    /// The client's descendants when it was last signalled: what its tool
    /// calls started, which may outlive it.
    signalled: Vec<u32>,
    /// Ends the client if this process dies before it (see [`watchdog`]);
    /// disarmed once the client is reaped.
    ///
    /// [`watchdog`]: super::watchdog
    watchdog: Option<super::watchdog::Watchdog>,
    /// This run's own [`RUN_TAG_ENV`] value, which every process the
    /// client starts inherits: how what it left is found.
    ///
    /// [`RUN_TAG_ENV`]: ralph_core::process::RUN_TAG_ENV
    tag: String,
    /// Set once the client wrote its result (its turn is done).
    result_seen: Arc<AtomicBool>,
    /// Whether the loop is done with this client, asked as it runs.
    loop_done: Option<Box<dyn FnMut() -> bool>>,
}

/// One tag per client run: this process's pid, a count, and the time.
fn new_tag() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{}-{nanos}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    )
}

/// A readable line with the thread's line prefix in front (its own
/// indent dropped then: `[fix the parser] says: …`).
fn prefixed(prefix: &str, shown: &str) -> String {
    match prefix {
        "" => shown.to_string(),
        _ => format!("{prefix}{}", shown.trim_start()),
    }
}

/// Whether `bytes` hold a stream-json `result` event, or the `result`
/// object `--output-format json` writes: the client's turn is done.
fn holds_result(bytes: &[u8]) -> bool {
    const NEEDLE: &[u8] = br#""type":"result""#;
    bytes.windows(NEEDLE.len()).any(|w| w == NEEDLE)
}

/// The client's process, not started: `command` in `root`, with the run's
/// tag and a `PATH` that finds this ralph-ctl, its stdin piped when the
/// prompt goes there and its stdout piped unless it goes to the terminal.
fn client_process(command: &ClientCommand, root: &Path, output: Output, tag: &str) -> Command {
    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .env(ralph_core::process::RUN_TAG_ENV, tag)
        .current_dir(root);
    // `ralph-ctl check`, as ralph's texts name it, runs this ralph-ctl.
    if let Some(path) = std::env::current_exe().ok().and_then(|me| {
        super::sandbox::path_with_ralph_ctl(std::env::var_os("PATH").as_deref(), &me)
    }) {
        cmd.env("PATH", path);
    }
    if command.delivery == PromptDelivery::Stdin {
        cmd.stdin(Stdio::piped());
    }
    if output != Output::Terminal {
        cmd.stdout(Stdio::piped());
    }
    cmd
}

/// Writes the prompt to the client's stdin from a thread, then closes it
/// (a client that stops reading just ends the write).
fn write_prompt(mut stdin: ChildStdin, text: String) -> io::Result<()> {
    thread::Builder::new()
        .name("client-stdin".into())
        .spawn(move || {
            let _ = stdin.write_all(text.as_bytes());
        })?;
    Ok(())
}

/// Starts the thread that reads the client's stdout until it closes (see
/// [`OutputReader`]); what it keeps, counts and signals is returned.
fn read_output(
    mut stdout: ChildStdout,
    output: Output,
    each_line: Option<LineHook>,
    result_seen: Arc<AtomicBool>,
) -> io::Result<Captured> {
    let kept = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(AtomicU64::new(0));
    let (done, finished) = mpsc::channel();
    let mut reader = OutputReader {
        output,
        each_line,
        result_seen,
        kept: Arc::clone(&kept),
        seen: Arc::clone(&seen),
        // A queue item's title, when several workers write.
        prefix: super::line_prefix(),
        partial: Vec::new(),
        ours: io::stdout(),
    };
    thread::Builder::new()
        .name("client-stdout".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 {
                    break;
                }
                reader.take(&buf[..n]);
            }
            reader.finish();
            let _ = done.send(());
        })?;
    Ok((finished, kept, seen))
}

/// What reads the client's stdout: it passes each read on to ours (as it
/// is, or as readable lines), keeps the last [`MAX_CAPTURED_BYTES`], counts
/// the bytes and notes a result event.
struct OutputReader {
    /// How the output is passed on.
    output: Output,
    /// Given each whole line of readable output.
    each_line: Option<LineHook>,
    /// Set once a read holds a result event.
    result_seen: Arc<AtomicBool>,
    /// The output's tail.
    kept: Arc<Mutex<Vec<u8>>>,
    /// The bytes read so far (activity, for the idle watch).
    seen: Arc<AtomicU64>,
    /// Put in front of each readable line.
    prefix: String,
    /// A readable line not yet whole.
    partial: Vec<u8>,
    /// Our stdout.
    ours: io::Stdout,
}

impl OutputReader {
    /// Takes one read of the client's stdout.
    fn take(&mut self, bytes: &[u8]) {
        self.seen.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        // (A result split across two reads is found by the client's exit,
        // as before.)
        if holds_result(bytes) {
            self.result_seen.store(true, Ordering::Relaxed);
        }
        if self.output == Output::Readable {
            self.show_whole_lines(bytes);
        } else {
            let _ = self.ours.write_all(bytes);
        }
        let _ = self.ours.flush();
        let mut kept = self
            .kept
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.extend_from_slice(bytes);
        if kept.len() > MAX_CAPTURED_BYTES {
            let excess = kept.len() - MAX_CAPTURED_BYTES;
            kept.drain(..excess);
        }
    }

    /// Adds `bytes` to the partial line and shows each line made whole: a
    /// readable line is written once its event is whole.
    fn show_whole_lines(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            if let Some(hook) = self.each_line.as_mut() {
                hook(&line);
            }
            self.show(&line);
        }
        if self.partial.len() > MAX_CAPTURED_BYTES {
            self.partial.clear();
        }
    }

    /// Writes the readable lines of one line of output, each with the prefix.
    fn show(&mut self, line: &[u8]) {
        for shown in live::readable(&String::from_utf8_lossy(line)) {
            let _ = writeln!(self.ours, "{}", printable(&prefixed(&self.prefix, &shown)));
        }
    }

    /// Once the pipe closed: shows what is left of a readable line.
    fn finish(&mut self) {
        if self.output == Output::Readable {
            let partial = std::mem::take(&mut self.partial);
            self.show(&partial);
        }
    }
}

/// Starts the client's watchdog. Without it the client could outlive a
/// killed driver; a loop is not refused for that, but the person is told.
fn start_watchdog(pid: u32) -> Option<super::watchdog::Watchdog> {
    match super::watchdog::Watchdog::start(ralph_core::observe::liveness::of_pid(pid)) {
        Ok(watchdog) => Some(watchdog),
        Err(e) => {
            crate::output::say_err!(
                "ralph: warning: cannot start the client's watchdog ({e}): if this launcher is killed, \
                 end Claude Code (pid {pid}) yourself"
            );
            None
        }
    }
}

impl RunningClient {
    /// The client's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `command` in `root`, with the prompt on its stdin when that is
    /// how it goes (written by a thread, then closed; a client that stops
    /// reading just ends the write). Unless `output` is [`Output::Terminal`],
    /// its stdout is passed on to ours as it comes (as it is, or as readable
    /// lines) and its last [`MAX_CAPTURED_BYTES`] are kept (for the result
    /// object), with a count of the bytes seen (activity, for the idle watch).
    /// Each whole line of readable output is also given to `each_line`.
    pub(crate) fn spawn(
        command: &ClientCommand,
        root: &Path,
        output: Output,
        each_line: Option<LineHook>,
    ) -> io::Result<RunningClient> {
        let tag = new_tag();
        let mut child = client_process(command, root, output, &tag).spawn()?;
        if let Some(stdin) = child.stdin.take() {
            write_prompt(stdin, command.prompt.clone())?;
        }
        let result_seen = Arc::new(AtomicBool::new(false));
        let captured = match child.stdout.take() {
            Some(stdout) => Some(read_output(
                stdout,
                output,
                each_line,
                Arc::clone(&result_seen),
            )?),
            None => None,
        };
        let watchdog = start_watchdog(child.id());
        Ok(RunningClient {
            child,
            captured,
            signalled: Vec::new(),
            watchdog,
            tag,
            result_seen,
            loop_done: None,
        })
    }

    /// Once the client's turn is done it is ended after [`DONE_GRACE`]:
    /// when it writes its result, or when `done` (asked every look) says
    /// the loop is done with it (its state no longer running).
    pub(crate) fn end_when_done(&mut self, done: Box<dyn FnMut() -> bool>) {
        self.loop_done = Some(done);
    }

    /// Once the client exited after a signal: the processes of its tool
    /// calls that were signalled with it and still run `grace` later (one
    /// that ignores SIGTERM) are killed, so that none outlives the loop.
    pub(crate) fn end_leftovers(&mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        loop {
            // Signal 0: only whether the process is still there.
            self.signalled
                .retain(|pid| ralph_core::process::send_signal(*pid, 0).is_ok());
            if self.signalled.is_empty() || Instant::now() >= deadline {
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        for pid in self.signalled.drain(..) {
            let _ = ralph_core::process::send_signal(pid, 9);
        }
        self.end_tagged(grace);
    }

    /// Ends what the client started that is still there, wherever it went
    /// (a background task, one that called `setsid`, a daemon whose parent
    /// is now init): SIGTERM, then SIGKILL for what is left after `grace`.
    fn end_tagged(&self, grace: Duration) {
        use ralph_core::process::{send_signal, tagged};
        let found = tagged(&self.tag);
        if found.is_empty() {
            return;
        }
        for pid in &found {
            let _ = send_signal(*pid, 15);
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && !tagged(&self.tag).is_empty() {
            thread::sleep(Duration::from_millis(50));
        }
        for pid in tagged(&self.tag) {
            let _ = send_signal(pid, 9);
        }
    }

    /// How many bytes the client wrote on stdout so far (0 when it writes
    /// to the terminal): grows while it works.
    pub(crate) fn output_seen(&self) -> Arc<AtomicU64> {
        match &self.captured {
            Some((_, _, seen)) => Arc::clone(seen),
            None => Arc::new(AtomicU64::new(0)),
        }
    }

    /// What the client wrote on stdout (its tail), once it has exited. A
    /// process the client left behind may hold the pipe open: its end is
    /// awaited [`OUTPUT_GRACE`] at most.
    pub(crate) fn output(self) -> Vec<u8> {
        match self.captured {
            Some((finished, kept, _)) => {
                let _ = finished.recv_timeout(OUTPUT_GRACE);
                let kept = kept
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                kept.clone()
            }
            None => Vec::new(),
        }
    }
}

impl Client for RunningClient {
    fn try_wait(&mut self) -> io::Result<Option<ClientExit>> {
        let exit = self.child.try_wait()?.map(ClientExit::from_status);
        if exit.is_some() {
            // Reaped: nothing is left for the watchdog to end.
            if let Some(watchdog) = self.watchdog.take() {
                watchdog.disarm();
            }
        }
        Ok(exit)
    }

    fn signal(&mut self, signal: Signal) {
        // Its tool calls' processes too, or they outlive it (a hung command
        // keeps running after its client is gone).
        let tree = ralph_core::process::descendants(self.child.id());
        // Not reaped yet (try_wait has not seen it exit), so the pid is still its own.
        let _ = ralph_core::process::send_signal(self.child.id(), signal.number());
        for pid in &tree {
            let _ = ralph_core::process::send_signal(*pid, signal.number());
        }
        for pid in tree {
            if !self.signalled.contains(&pid) {
                self.signalled.push(pid);
            }
        }
    }

    fn turn_done(&mut self) -> bool {
        self.result_seen.load(Ordering::Relaxed)
            || self.loop_done.as_mut().is_some_and(|done| done())
    }

    fn kill(&mut self) {
        let tree = ralph_core::process::descendants(self.child.id());
        let _ = self.child.kill();
        for pid in tree {
            let _ = ralph_core::process::send_signal(pid, 9);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that exits at a given look, or when killed, or after a
    /// number of looks once signalled; it records what was done to it.
    struct FakeClient {
        looks: usize,
        exits_at_look: Option<usize>,
        exits_looks_after_signal: Option<usize>,
        signalled_at: Option<usize>,
        killed: bool,
        reaped: bool,
        events: Vec<String>,
    }

    impl FakeClient {
        fn new() -> FakeClient {
            FakeClient {
                looks: 0,
                exits_at_look: None,
                exits_looks_after_signal: None,
                signalled_at: None,
                killed: false,
                reaped: false,
                events: Vec::new(),
            }
        }
    }

    impl Client for FakeClient {
        fn try_wait(&mut self) -> io::Result<Option<ClientExit>> {
            assert!(!self.reaped, "looked at a reaped client");
            self.looks += 1;
            let exit = if self.killed {
                Some(ClientExit::Signal(9))
            } else if self.exits_at_look == Some(self.looks) {
                Some(ClientExit::Code(0))
            } else {
                match (self.signalled_at, self.exits_looks_after_signal) {
                    (Some(at), Some(after)) if self.looks >= at + after => {
                        Some(ClientExit::Code(143))
                    }
                    _ => None,
                }
            };
            self.reaped = exit.is_some();
            Ok(exit)
        }
        fn signal(&mut self, signal: Signal) {
            assert!(!self.reaped, "signalled a reaped client");
            self.signalled_at.get_or_insert(self.looks);
            self.events.push(format!("signal {}", signal.name()));
        }
        fn kill(&mut self) {
            assert!(!self.reaped, "killed a reaped client");
            self.killed = true;
            self.events.push("kill".into());
        }
    }

    /// Delivers the given signals at the given looks (1-based).
    struct FakeSignals {
        calls: usize,
        at: Vec<(usize, Signal)>,
    }

    impl SignalSource for FakeSignals {
        fn take(&mut self) -> Vec<Signal> {
            self.calls += 1;
            self.at
                .iter()
                .filter(|(call, _)| *call == self.calls)
                .map(|(_, s)| *s)
                .collect()
        }
    }

    const FAST: Duration = Duration::from_millis(1);

    #[test]
    fn a_client_that_exits_on_its_own_is_left_alone() {
        let mut client = FakeClient::new();
        client.exits_at_look = Some(3);
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![],
        };
        let got = supervise(&mut client, &mut signals, KILL_GRACE, FAST, None, None).unwrap();
        assert_eq!(
            got,
            Supervision {
                exit: ClientExit::Code(0),
                signal: None,
                killed_after_grace: false,
                idle_cut_off: None,
                ended_after_turn: false,
            }
        );
        assert!(client.events.is_empty());
        assert_eq!(got.describe(KILL_GRACE), "Claude Code exited with code 0");
    }

    #[test]
    fn sigterm_and_sighup_are_passed_on_and_sigint_is_not() {
        for (signal, passed_on) in [
            (Signal::Terminate, true),
            (Signal::Hangup, true),
            (Signal::Interrupt, false),
        ] {
            let mut client = FakeClient::new();
            client.exits_looks_after_signal = Some(2);
            client.exits_at_look = (!passed_on).then_some(4);
            let mut signals = FakeSignals {
                calls: 0,
                at: vec![(2, signal)],
            };
            let got = supervise(&mut client, &mut signals, KILL_GRACE, FAST, None, None).unwrap();
            assert_eq!(got.signal, Some(signal));
            assert!(!got.killed_after_grace);
            let want: Vec<String> = if passed_on {
                vec![format!("signal {}", signal.name())]
            } else {
                vec![]
            };
            assert_eq!(client.events, want);
            let text = got.describe(KILL_GRACE);
            assert!(text.contains(signal.name()), "{text}");
            assert_eq!(text.contains("passed on"), passed_on, "{text}");
        }
    }

    #[test]
    fn a_client_that_shows_no_work_for_the_idle_timeout_is_ended() {
        let mut client = FakeClient::new();
        client.exits_looks_after_signal = Some(1);
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![],
        };
        // Works for a while (the activity grows), then hangs.
        let mut reads = 0u64;
        let mut activity = || {
            reads += 1;
            reads.min(5)
        };
        let timeout = Duration::from_millis(60);
        let started = Instant::now();
        let got = supervise(
            &mut client,
            &mut signals,
            KILL_GRACE,
            FAST,
            Some(IdleWatch {
                timeout,
                every: Duration::ZERO,
                activity: &mut activity,
            }),
            None,
        )
        .unwrap();
        assert!(started.elapsed() >= timeout);
        assert_eq!(got.idle_cut_off, Some(timeout));
        assert_eq!(got.signal, None, "no signal of the person's");
        assert_eq!(client.events, ["signal SIGTERM"]);
        assert!(reads > 5, "the activity was read until it stopped growing");
        assert!(got.describe(KILL_GRACE).contains("no sign of work"));
    }

    #[test]
    fn a_sigint_the_headless_client_did_not_get_is_passed_on() {
        // SIGINT to the driver alone (`kill -INT`): a headless client that
        // is still running a moment later gets it too, and is killed after
        // the grace if it does not exit.
        let mut client = FakeClient::new();
        client.exits_looks_after_signal = Some(2);
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![(2, Signal::Interrupt)],
        };
        let got = supervise(
            &mut client,
            &mut signals,
            KILL_GRACE,
            FAST,
            None,
            Some(FAST * 5),
        )
        .unwrap();
        assert_eq!(got.signal, Some(Signal::Interrupt));
        assert_eq!(client.events, ["signal SIGINT"]);
        assert!(!got.killed_after_grace);
        // A client that exits on the terminal's own SIGINT is not sent another.
        let mut client = FakeClient::new();
        client.exits_at_look = Some(3);
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![(2, Signal::Interrupt)],
        };
        let got = supervise(
            &mut client,
            &mut signals,
            KILL_GRACE,
            FAST,
            None,
            Some(Duration::from_secs(5)),
        )
        .unwrap();
        assert_eq!(got.signal, Some(Signal::Interrupt));
        assert!(client.events.is_empty(), "{:?}", client.events);
    }

    #[test]
    fn a_client_that_keeps_working_is_not_cut_off() {
        let mut client = FakeClient::new();
        client.exits_at_look = Some(20);
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![],
        };
        let mut reads = 0u64;
        let mut activity = || {
            reads += 1;
            reads
        };
        let got = supervise(
            &mut client,
            &mut signals,
            KILL_GRACE,
            FAST,
            Some(IdleWatch {
                timeout: FAST * 3,
                every: Duration::ZERO,
                activity: &mut activity,
            }),
            None,
        )
        .unwrap();
        assert_eq!(got.idle_cut_off, None);
        assert!(client.events.is_empty(), "{:?}", client.events);
    }

    #[test]
    fn a_tool_process_deaf_to_sigterm_does_not_outlive_its_client() {
        // The "client" (sh) dies of SIGTERM; the process it started ignores it.
        let command = ClientCommand {
            program: "sh".into(),
            args: vec!["-c".into(), "(trap '' TERM; exec sleep 30) & wait".into()],
            env: Vec::new(),
            delivery: PromptDelivery::Argument,
            prompt: String::new(),
        };
        let mut running =
            RunningClient::spawn(&command, Path::new("."), Output::Terminal, None).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let tool = loop {
            if let Some(pid) = ralph_core::process::descendants(running.pid())
                .first()
                .copied()
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "sh started nothing");
            thread::sleep(Duration::from_millis(10));
        };
        // Its trap in place before the signal comes.
        thread::sleep(Duration::from_millis(300));
        running.signal(Signal::Terminate);
        while running.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "sh outlived SIGTERM");
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            ralph_core::process::send_signal(tool, 0).is_ok(),
            "the tool process is still there"
        );
        running.end_leftovers(Duration::from_millis(200));
        let gone = Instant::now() + Duration::from_secs(5);
        // Killed (then reaped by init): no longer there, or a zombie.
        while ralph_core::process::send_signal(tool, 0).is_ok()
            && !std::fs::read_to_string(format!("/proc/{tool}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
        {
            assert!(
                Instant::now() < gone,
                "the tool process outlived its client"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_client_that_ignores_the_signal_is_killed_after_the_grace() {
        let mut client = FakeClient::new();
        let mut signals = FakeSignals {
            calls: 0,
            at: vec![(1, Signal::Terminate), (3, Signal::Terminate)],
        };
        let grace = Duration::from_millis(40);
        let started = Instant::now();
        let got = supervise(&mut client, &mut signals, grace, FAST, None, None).unwrap();
        assert!(started.elapsed() >= grace);
        assert_eq!(
            got,
            Supervision {
                exit: ClientExit::Signal(9),
                signal: Some(Signal::Terminate),
                killed_after_grace: true,
                idle_cut_off: None,
                ended_after_turn: false,
            }
        );
        assert_eq!(client.events, ["signal SIGTERM", "signal SIGTERM", "kill"]);
        let text = got.describe(Duration::from_secs(10));
        assert!(
            text.contains("did not exit within 10 s")
                && text.contains("code 137 (killed by signal 9)"),
            "{text}"
        );
    }

    #[test]
    fn exit_codes_of_killed_clients_follow_the_shell() {
        assert_eq!(ClientExit::Signal(9).code(), 137);
        assert_eq!(ClientExit::Code(3).code(), 3);
        assert_eq!(
            ClientExit::Code(1).describe(),
            "Claude Code exited with code 1"
        );
    }
}
