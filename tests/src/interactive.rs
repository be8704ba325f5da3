//! The real client's terminal UI, driven without a person.
//!
//! [`Terminal::spawn`] runs a command with a fixed-size pseudo-terminal as its
//! controlling terminal (from `openpty(3)`: nothing to install), records
//! everything it draws into a terminal emulator, types keys, and kills the
//! command's whole process group on timeout or drop.
//!
//! [`TempProject::run_launcher_interactive`] starts the launcher without
//! `--headless` in such a terminal, waits until the loop leaves `running`,
//! then ends the client the way a person does (`/exit`).
//!
//! Observed with the real clients (2.1.330 native, 2.0.77 on Node), with a
//! fresh `HOME`; [`write_first_run_config`] writes the `~/.claude.json` keys
//! that answer each first-run screen:
//! - no `~/.claude.json`: both check that the public API host is reachable
//!   and exit 1 ("Unable to connect to Anthropic services");
//! - `hasCompletedOnboarding` missing: the theme picker (both);
//! - `customApiKeyResponses.approved` without the last 20 characters of
//!   `ANTHROPIC_API_KEY`: "Detected a custom API key … Do you want to use this
//!   API key?", defaulting to No (both);
//! - `bypassPermissionsModeAccepted` missing: the Bypass Permissions warning,
//!   defaulting to "No, exit" (both; 2.1.330 then moves the answer to
//!   `skipDangerousModePermissionPrompt` in `~/.claude/settings.json`);
//! - `projects[<folder>].hasTrustDialogAccepted` missing: 2.1.330 asks to
//!   trust the folder; 2.0.77 skips that question in bypassPermissions mode;
//! - the `officialMarketplaceAutoInstall*` keys missing: both try to
//!   `git clone` the official plugin marketplace from github.com (ssh, then
//!   https) at start;
//! - 2.0.77's terminal UI also runs `npm view @anthropic-ai/claude-code@latest`
//!   despite `DISABLE_AUTOUPDATER=1`: `npm_config_registry` pointing at the
//!   mock with `npm_config_offline=true` keeps npm off the network.
//!
//! With all that (and `TERM=xterm-256color`), both connected only to the mock
//! (checked with `strace -e connect`; 2.0.77 also looks up the public API
//! host once through the system resolver, as it does with `-p`, and connects
//! nowhere else). Neither exits when the loop ends: the
//! UI waits for the person. `/exit` then Enter ends both (exit 0), so does
//! Ctrl-C twice; Ctrl-D twice ends 2.1.330 only; one Ctrl-C or Ctrl-D ends
//! neither.

use std::fs::File;
use std::io::{self, Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::client::ClientVersion;
use crate::mock_api::MockApi;
use crate::project::{TempProject, kill_group};

/// The terminal size every interactive test uses.
pub const SIZE: TermSize = TermSize {
    cols: 120,
    rows: 40,
};

/// A terminal's size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TermSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// A key a person presses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// Return (`\r`, what a terminal sends for Enter).
    Enter,
    /// Escape.
    Escape,
    /// Ctrl-C (`\x03`).
    CtrlC,
    /// Ctrl-D (`\x04`).
    CtrlD,
}

impl Key {
    /// The bytes a terminal sends for the key.
    pub fn bytes(self) -> &'static [u8] {
        match self {
            Key::Enter => b"\r",
            Key::Escape => b"\x1b",
            Key::CtrlC => b"\x03",
            Key::CtrlD => b"\x04",
        }
    }
}

/// Where the command's stderr goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// To the terminal, like stdout (what a person's shell does).
    Terminal,
    /// To a pipe, kept apart from the screen.
    Captured,
}

/// What a command run in a [`Terminal`] left behind.
#[derive(Debug)]
pub struct TerminalRun {
    /// The exit code (`None` when killed by a signal, e.g. on timeout).
    pub code: Option<i32>,
    /// The screen as it was at the end.
    pub screen: String,
    /// Everything drawn, control sequences removed (lines that scrolled off
    /// or were redrawn included).
    pub text: String,
    /// Stderr, when [`Stderr::Captured`]; what ended the run is appended.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

struct Drawn {
    raw: Vec<u8>,
    parser: vt100::Parser,
}

/// A command running in a pseudo-terminal of its own (a new session whose
/// controlling terminal it is). Dropping it kills the command's process group.
pub struct Terminal {
    child: Child,
    writer: File,
    drawn: Arc<Mutex<Drawn>>,
    reader: Option<JoinHandle<()>>,
    stderr: Option<JoinHandle<String>>,
    started: Instant,
    status: Option<ExitStatus>,
}

#[allow(unsafe_code)]
fn open_pty(size: TermSize) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut master: libc::c_int = -1;
    let mut slave: libc::c_int = -1;
    let winsize = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty(3) writes two new descriptors into the out-parameters;
    // a null name and null termios are allowed, winsize is read only.
    let rc = unsafe {
        libc::openpty(
            &raw mut master,
            &raw mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &raw const winsize,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and belong to nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on a descriptor we own; FD_CLOEXEC keeps other
        // children (and the command's own children) from inheriting it.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } == -1 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((master, slave))
}

impl Terminal {
    /// Starts `cmd` with a `size` terminal as its stdin, stdout and
    /// controlling terminal (and stderr, unless `stderr` is
    /// [`Stderr::Captured`]), in a new session and process group.
    #[allow(unsafe_code)]
    pub fn spawn(mut cmd: Command, size: TermSize, stderr: Stderr) -> io::Result<Terminal> {
        let (Some(rows), Some(cols)) = (NonZeroU16::new(size.rows), NonZeroU16::new(size.cols))
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a terminal needs at least one row and one column",
            ));
        };
        let (master, slave) = open_pty(size)?;
        cmd.stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?));
        match stderr {
            Stderr::Terminal => cmd.stderr(Stdio::from(slave.try_clone()?)),
            Stderr::Captured => cmd.stderr(Stdio::piped()),
        };
        // SAFETY: the closure only calls async-signal-safe functions
        // (signal, setsid, ioctl) between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                // What a terminal emulator's shell gets: Ctrl-C and Ctrl-\
                // at their defaults, even when these tests run in the
                // background of a shell without job control (which starts
                // them with SIGINT and SIGQUIT ignored, and an ignored
                // signal stays ignored across exec, traps included).
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGQUIT, libc::SIG_DFL);
                if libc::setsid() == -1 {
                    return Err(io::Error::last_os_error());
                }
                // stdin is the terminal: make it the controlling one, as a
                // terminal emulator does for the shell it starts.
                if libc::ioctl(0, libc::TIOCSCTTY, 0) == -1 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        // Only the child holds the terminal's slave side now, so the reader
        // sees the end of output once the child's whole session closed it.
        // `Command` keeps its copies of the slave side until dropped.
        drop(slave);
        drop(cmd);
        let writer = File::from(master.try_clone()?);
        let mut reader_file = File::from(master);
        let drawn = Arc::new(Mutex::new(Drawn {
            raw: Vec::new(),
            parser: vt100::Parser::new(rows, cols, 0),
        }));
        let sink = Arc::clone(&drawn);
        let reader = thread::Builder::new()
            .name("terminal-reader".into())
            .spawn(move || {
                let mut buf = [0u8; 16 * 1024];
                loop {
                    match reader_file.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => {
                            let mut drawn = lock(&sink);
                            drawn.raw.extend_from_slice(&buf[..n]);
                            drawn.parser.process(&buf[..n]);
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        // EIO: every process holding the slave side is gone.
                        Err(_) => break,
                    }
                }
            })?;
        let stderr = child.stderr.take().map(|mut pipe| {
            thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                String::from_utf8_lossy(&bytes).into_owned()
            })
        });
        Ok(Terminal {
            child,
            writer,
            drawn,
            reader: Some(reader),
            stderr,
            started: Instant::now(),
            status: None,
        })
    }

    /// The command's pid (also its process group and session id).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The screen as a person sees it now, one line per row, trailing blanks trimmed.
    pub fn screen(&self) -> String {
        let drawn = lock(&self.drawn);
        let screen = drawn.parser.screen();
        let rows: Vec<String> = screen
            .rows(0, screen.size().1.get())
            .map(|row| row.trim_end().to_string())
            .collect();
        rows.join("\n").trim_end().to_string()
    }

    /// Everything drawn so far with control sequences removed: text that was
    /// redrawn or scrolled off the screen is still here.
    pub fn text(&self) -> String {
        strip_control(&lock(&self.drawn).raw)
    }

    /// Types `text` (as one burst, like a paste of those characters).
    pub fn type_text(&mut self, text: &str) -> io::Result<()> {
        self.writer.write_all(text.as_bytes())?;
        self.writer.flush()
    }

    /// Presses `key`.
    pub fn press(&mut self, key: Key) -> io::Result<()> {
        self.writer.write_all(key.bytes())?;
        self.writer.flush()
    }

    /// Waits until the screen shows `needle`, at most `timeout`; whether it did.
    pub fn wait_for_screen(&mut self, needle: &str, timeout: Duration) -> bool {
        self.wait_until(timeout, |t| t.screen().contains(needle))
    }

    /// Panics, showing the screen, unless it shows `needle` within 10 s.
    pub fn assert_shows(&mut self, needle: &str) {
        assert!(
            self.wait_for_screen(needle, Duration::from_secs(10)),
            "no {needle:?} on the screen:\n{}",
            self.screen()
        );
    }

    /// Polls `check` every 25 ms until it holds, the command exits, or
    /// `timeout` passes; whether it held.
    pub fn wait_until(&mut self, timeout: Duration, mut check: impl FnMut(&Self) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if check(self) {
                return true;
            }
            if self.try_wait().is_some() || Instant::now() >= deadline {
                return check(self);
            }
            thread::sleep(Duration::from_millis(25));
        }
    }

    /// The exit status, once the command has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().ok().flatten();
        }
        self.status
    }

    /// Waits for the command to exit, at most `timeout` (it is not killed).
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while self.try_wait().is_none() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        self.status
    }

    /// SIGKILLs the command's whole process group.
    pub fn kill(&mut self) {
        kill_group(self.child.id());
    }

    /// Types `/exit` and Enter as a person ends a client's session (the
    /// pause lets the client's input box take the text first); what the
    /// terminal says back is not checked.
    pub fn type_exit(&mut self) {
        let _ = self.type_text("/exit");
        thread::sleep(Duration::from_millis(300));
        let _ = self.press(Key::Enter);
    }

    /// [`Terminal::type_exit`], then [`Terminal::finish`] within 10 s.
    pub fn exit_session(mut self) -> TerminalRun {
        self.type_exit();
        self.finish(Duration::from_secs(10))
    }

    /// Waits for the command to exit (killing its group after `timeout`),
    /// then returns what it left behind.
    pub fn finish(mut self, timeout: Duration) -> TerminalRun {
        let status = self.wait(timeout);
        // Whatever the command left running in its group goes with it.
        self.kill();
        if status.is_none() {
            let _ = self.child.wait();
        }
        // The reader ends once the terminal's slave side is closed everywhere;
        // a process that escaped the group could hold it, so wait boundedly.
        if let Some(reader) = self.reader.take() {
            let deadline = Instant::now() + Duration::from_secs(2);
            while !reader.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(10));
            }
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
        let mut stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if status.is_none() {
            stderr.push_str(&format!("\n[killed after {timeout:?}]"));
        }
        TerminalRun {
            code: status.and_then(|s| s.code()),
            screen: self.screen(),
            text: self.text(),
            stderr,
            elapsed: self.started.elapsed(),
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        // Also what the command left behind in its group after exiting.
        self.kill();
        if self.status.is_none() {
            let _ = self.child.wait();
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `bytes` as text with terminal control sequences (CSI, OSC, DCS, other
/// escapes) and carriage returns removed.
pub fn strip_control(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0x1b => {
                i += 1;
                match bytes.get(i) {
                    Some(b'[') => {
                        i += 1;
                        while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                            i += 1;
                        }
                        i += 1;
                    }
                    Some(b']' | b'P' | b'_' | b'^' | b'X') => {
                        // Ends at BEL or ST (ESC \).
                        i += 1;
                        while i < bytes.len() {
                            if bytes[i] == 0x07 {
                                i += 1;
                                break;
                            }
                            if bytes[i] == 0x1b && bytes.get(i + 1) == Some(&b'\\') {
                                i += 2;
                                break;
                            }
                            i += 1;
                        }
                    }
                    Some(b'(' | b')' | b'*' | b'+' | b'#' | b'%') => i += 2,
                    Some(_) => i += 1,
                    None => {}
                }
            }
            b'\n' | b'\t' => {
                out.push(bytes[i]);
                i += 1;
            }
            c if c < 0x20 || c == 0x7f => i += 1,
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Writes `home/.claude.json` so the client's first-run screens (onboarding,
/// the custom API key, the bypass-permissions confirmation, trusting
/// `project`) are already answered, and the official plugin marketplace is
/// not fetched. Keys already in the file are kept unless set here.
pub fn write_first_run_config(home: &Path, project: &Path, api_key: &str) {
    let path = home.join(".claude.json");
    let mut config: Value = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| json!({}));
    // The client keys its approvals by the key's last 20 characters.
    let key_tail: String = {
        let chars: Vec<char> = api_key.chars().collect();
        chars[chars.len().saturating_sub(20)..].iter().collect()
    };
    // It keys trust by the real path of the folder.
    let folder = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf())
        .display()
        .to_string();
    let settings = json!({
        "hasCompletedOnboarding": true,
        "customApiKeyResponses": { "approved": [key_tail], "rejected": [] },
        "bypassPermissionsModeAccepted": true,
        "officialMarketplaceAutoInstallAttempted": true,
        "officialMarketplaceAutoInstalled": false,
        "officialMarketplaceAutoInstallFailReason": "policy_blocked",
    });
    let object = config
        .as_object_mut()
        .expect("~/.claude.json holds a JSON object");
    for (key, value) in settings.as_object().unwrap() {
        object.insert(key.clone(), value.clone());
    }
    let projects = object.entry("projects").or_insert_with(|| json!({}));
    projects[folder.as_str()]["hasTrustDialogAccepted"] = json!(true);
    std::fs::write(&path, serde_json::to_vec_pretty(&config).unwrap()).unwrap();
}

/// What an interactive launcher run left behind.
#[derive(Debug)]
pub struct InteractiveRun {
    /// The launcher's exit code (`None` when it was killed).
    pub code: Option<i32>,
    /// The screen when the loop had ended, before the client was told to
    /// exit (what the person saw at the end of the loop).
    pub loop_screen: String,
    /// The screen when the launcher exited.
    pub screen: String,
    /// Everything drawn, control sequences removed.
    pub text: String,
    /// The launcher's stderr (its closing line), with a note when killed.
    pub stderr: String,
    /// Whether the loop's state left `running` before the timeout.
    pub loop_ended: bool,
    /// How the client was ended: `"/exit"`, `"Ctrl-C twice"` (when `/exit`
    /// did not end it), `"itself"` (it exited before being told to) or
    /// `"killed"`.
    pub ended_by: &'static str,
    /// How long it all took.
    pub elapsed: Duration,
}

impl InteractiveRun {
    /// The run for a failure message: how it ended, stderr, both screens.
    pub fn explain(&self) -> String {
        format!(
            "launcher exit {:?} (client ended by {}, loop ended: {}); stderr:\n{}\nscreen at the end of the loop:\n{}\nscreen at exit:\n{}",
            self.code, self.ended_by, self.loop_ended, self.stderr, self.loop_screen, self.screen
        )
    }

    /// Panics with the whole run unless the launcher exited with `code`.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected launcher exit code (client ended by {}, loop ended: {}); stderr:\n{}\nscreen at the end of the loop:\n{}\nscreen at exit:\n{}",
            self.ended_by,
            self.loop_ended,
            self.stderr,
            self.loop_screen,
            self.screen
        );
        self
    }
}

/// How long the client gets to exit after `/exit` before the next attempt.
const EXIT_GRACE: Duration = Duration::from_secs(10);

/// How long a question may stay on the screen after it was answered
/// before [`TempProject::run_in_terminal`] answers it again.
const REANSWER_AFTER: Duration = Duration::from_secs(2);

impl TempProject {
    /// The environment that points the real client at `api`
    /// ([`TempProject::client_env`]), with the client's first-run screens
    /// for its key already answered in `HOME` ([`write_first_run_config`]).
    pub fn first_run_answered(
        &self,
        client: ClientVersion,
        api: &MockApi,
    ) -> Vec<(String, String)> {
        let client_env = self.client_env(client, api);
        let key = client_env
            .iter()
            .find(|(k, _)| k == "ANTHROPIC_API_KEY")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        write_first_run_config(&self.home, &self.root, &key);
        client_env
    }

    /// The launcher in its default, interactive mode (the client's terminal
    /// UI), with the real client and bypassed permissions, ready for
    /// [`Terminal::spawn`]. The client's first-run screens are answered in
    /// `HOME` ([`write_first_run_config`]).
    pub fn launcher_command_interactive(
        &self,
        client: ClientVersion,
        api: &MockApi,
        env: &[(&str, &str)],
    ) -> Command {
        let client_env = self.first_run_answered(client, api);
        let mut cmd = self.command(self.root.join(".claude/ralph/ralph-audit.sh"));
        cmd.args(["--", "--permission-mode", "bypassPermissions"])
            .env("TERM", "xterm-256color")
            // 2.0.77's UI asks npm for the latest version: keep npm on the mock.
            .env("npm_config_registry", format!("{}/", api.base_url()))
            .env("npm_config_offline", "true")
            .envs(client_env)
            .envs(env.iter().copied());
        cmd
    }

    /// Runs the launcher interactively in a [`SIZE`] terminal: waits until
    /// the loop's state leaves `running` (at most `timeout`), then types
    /// `/exit` and Enter as a person would (then Ctrl-C twice if the client
    /// is still there after 10 s), and returns the launcher's exit code,
    /// screens and stderr. Stderr goes to a pipe so the launcher's closing
    /// line can be read apart (both clients draw on stdout and run the same
    /// with it). The whole process group is killed when the loop does not
    /// end in time or the client does not exit.
    pub fn run_launcher_interactive(
        &self,
        client: ClientVersion,
        api: &MockApi,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> InteractiveRun {
        let cmd = self.launcher_command_interactive(client, api, env);
        self.run_in_terminal(cmd, timeout, |_| None)
    }

    /// Runs `cmd` in a [`SIZE`] terminal as [`run_launcher_interactive`]
    /// does, answering as a person would: while the loop has not ended,
    /// `answer(screen)` may give keys to type (each question once it is on
    /// the screen; the same screen is not answered twice in a row).
    ///
    /// [`run_launcher_interactive`]: TempProject::run_launcher_interactive
    pub fn run_in_terminal(
        &self,
        cmd: Command,
        timeout: Duration,
        mut answer: impl FnMut(&str) -> Option<&'static str>,
    ) -> InteractiveRun {
        let mut term = Terminal::spawn(cmd, SIZE, Stderr::Captured)
            .unwrap_or_else(|e| panic!("cannot start the launcher in a terminal: {e}"));
        let ended = |project: &TempProject| {
            project
                .state()
                .is_some_and(|s| s["status"].as_str().is_some_and(|st| st != "running"))
        };
        let deadline = Instant::now() + timeout;
        let mut answered = String::new();
        let mut answered_at = Instant::now();
        let mut loop_ended = false;
        while Instant::now() < deadline {
            if ended(self) {
                loop_ended = true;
                break;
            }
            if term.try_wait().is_some() {
                break;
            }
            let screen = term.screen();
            // A key typed while a dialog is still being drawn can be lost
            // (seen with 2.0.77's permission prompt): the same question
            // still on the screen a while later is answered again, as a
            // person would press the key again.
            let unanswered = screen != answered || answered_at.elapsed() > REANSWER_AFTER;
            if unanswered && let Some(keys) = answer(&screen) {
                let _ = term.type_text(keys);
                answered = screen;
                answered_at = Instant::now();
            }
            thread::sleep(Duration::from_millis(25));
        }
        // It may have ended as the launcher exited.
        loop_ended = loop_ended || ended(self);
        let mut ended_by = "killed";
        // The client may still be drawing the end of the turn; give it a
        // moment, as a person reading the screen would.
        if loop_ended {
            term.wait(Duration::from_millis(500));
        }
        let loop_screen = term.screen();
        if term.try_wait().is_some() {
            ended_by = "itself";
        } else if loop_ended {
            term.type_exit();
            if term.wait(EXIT_GRACE).is_some() {
                ended_by = "/exit";
            } else {
                // What also ends both versions: Ctrl-C twice.
                let _ = term.press(Key::CtrlC);
                thread::sleep(Duration::from_millis(300));
                let _ = term.press(Key::CtrlC);
                if term.wait(EXIT_GRACE).is_some() {
                    ended_by = "Ctrl-C twice";
                }
            }
        }
        let run = term.finish(Duration::from_millis(100));
        InteractiveRun {
            code: run.code,
            loop_screen,
            screen: run.screen,
            text: run.text,
            stderr: run.stderr,
            loop_ended,
            ended_by,
            elapsed: run.elapsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_control_keeps_text_only() {
        let raw = b"\x1b[2K\x1b[1A\x1b[38;5;231mHello\x1b[39m \x1b]0;title\x07world\r\n\x1b(Bnext\x1b[?25l";
        assert_eq!(strip_control(raw), "Hello world\nnext");
    }

    #[test]
    fn a_command_sees_a_terminal_of_the_given_size() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "stty size; test -t 0 && test -t 1 && echo tty; read line; echo got:$line; echo err >&2"]);
        let mut term =
            Terminal::spawn(cmd, TermSize { cols: 90, rows: 20 }, Stderr::Captured).unwrap();
        assert!(
            term.wait_for_screen("tty", Duration::from_secs(5)),
            "{}",
            term.screen()
        );
        term.type_text("abc").unwrap();
        term.press(Key::Enter).unwrap();
        let run = term.finish(Duration::from_secs(5));
        assert_eq!(run.code, Some(0), "{run:?}");
        assert!(
            run.screen.starts_with("20 90\ntty\nabc\ngot:abc"),
            "{}",
            run.screen
        );
        assert_eq!(run.stderr, "err\n");
    }

    #[test]
    fn ctrl_c_reaches_the_foreground_group_and_timeouts_kill_the_group() {
        // The terminal is the controlling one: Ctrl-C becomes SIGINT.
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "trap 'echo interrupted; exit 7' INT; echo ready; while :; do sleep 0.05; done",
        ]);
        let mut term = Terminal::spawn(cmd, SIZE, Stderr::Terminal).unwrap();
        assert!(term.wait_for_screen("ready", Duration::from_secs(5)));
        term.press(Key::CtrlC).unwrap();
        let run = term.finish(Duration::from_secs(5));
        assert_eq!(run.code, Some(7), "{run:?}");
        assert!(run.text.contains("interrupted"), "{}", run.text);

        // A command that ignores everything is killed with its children.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "trap '' INT HUP TERM; sleep 30 & echo child $!; wait"]);
        let mut term = Terminal::spawn(cmd, SIZE, Stderr::Terminal).unwrap();
        assert!(term.wait_for_screen("child", Duration::from_secs(5)));
        let child: u32 = term
            .screen()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let started = Instant::now();
        let run = term.finish(Duration::from_millis(200));
        assert_eq!(run.code, None);
        assert!(run.stderr.contains("[killed after"), "{}", run.stderr);
        assert!(started.elapsed() < Duration::from_secs(5));
        thread::sleep(Duration::from_millis(100));
        let alive = std::fs::read_to_string(format!("/proc/{child}/stat"))
            .is_ok_and(|s| !s.contains(") Z "));
        assert!(!alive, "the background child {child} was killed too");
    }
}
