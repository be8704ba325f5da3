//! Builders that run the built binaries in a [`TempProject`] the way a person
//! or Claude Code does, and assertions on the [`Run`] they leave behind:
//!
//! ```no_run
//! # use ralph_tests::cli::{Ctl, Hook};
//! # use ralph_tests::project::TempProject;
//! let project = TempProject::new("example");
//! Ctl::new(&project).arg("init").run().assert_code(0);
//! let run = Hook::new(&project).stdin("{}").env("RALPH_MAX_ITERATIONS", "3").run();
//! run.assert_hook_error(&["cannot tell the project folder"]);
//! ```

use std::ffi::{OsStr, OsString};
use std::marker::PhantomData;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bins;
use crate::project::{Run, TempProject, run_with_timeout};

/// How long a run may take before its process group is killed: a sanity
/// bound, never a performance target.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Marks a [`Cli`] that runs `ralph-stop-hook`.
#[derive(Debug)]
pub enum HookBin {}
/// Marks a [`Cli`] that runs `ralph-ctl`.
#[derive(Debug)]
pub enum CtlBin {}
/// Marks a [`Cli`] that runs the installed launcher `.claude/ralph/ralph-audit.sh`.
#[derive(Debug)]
pub enum LauncherBin {}

/// `ralph-stop-hook` in a project, with `RALPH_ACTIVE=1` unless told otherwise.
pub type Hook<'a> = Cli<'a, HookBin>;
/// `ralph-ctl` in a project.
pub type Ctl<'a> = Cli<'a, CtlBin>;
/// The project's installed launcher (`ralph-ctl init` writes it).
pub type Launcher<'a> = Cli<'a, LauncherBin>;

/// One run of a program in a project's clean environment (PATH, HOME and
/// TMPDIR only, see [`TempProject::command`]), built up step by step.
pub struct Cli<'a, B> {
    project: &'a TempProject,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, Option<OsString>)>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
    bin: PhantomData<B>,
}

impl<'a> Hook<'a> {
    /// The built hook in `project`, with `RALPH_ACTIVE=1` and empty stdin.
    pub fn new(project: &'a TempProject) -> Self {
        Cli::program(project, bins::hook())
            .env("RALPH_ACTIVE", "1")
            .stdin(Vec::new())
    }

    /// Sets `RALPH_ACTIVE` to `value`, or leaves it unset with `None`.
    pub fn active(self, value: Option<&str>) -> Self {
        match value {
            Some(value) => self.env("RALPH_ACTIVE", value),
            None => self.env_remove("RALPH_ACTIVE"),
        }
    }

    /// Sends `value` as the Stop hook's JSON input.
    pub fn json(self, value: &Value) -> Self {
        self.stdin(serde_json::to_vec(value).expect("JSON serializes"))
    }
}

impl<'a> Ctl<'a> {
    /// The built `ralph-ctl` in `project`, with no arguments yet.
    pub fn new(project: &'a TempProject) -> Self {
        Cli::program(project, bins::ctl())
    }
}

impl TempProject {
    /// `ralph-ctl ARGS` in the project with `env`, to its end: the short
    /// form of [`Ctl`] for the common case (no stdin, the default timeout).
    pub fn ctl(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        Ctl::new(self).args(args).envs(env.iter().copied()).run()
    }

    /// `ralph-ctl ARGS` in the project, no env of its own, to its end,
    /// which must be exit code `code` (else a panic with the whole output):
    /// the opening most tests check before they read what it said.
    pub fn ctl_exits(&self, args: &[&str], code: i32) -> Run {
        let run = self.ctl(args, &[]);
        run.assert_code(code);
        run
    }
}

impl<'a> Launcher<'a> {
    /// `.claude/ralph/ralph-audit.sh` in `project`, with no arguments yet.
    pub fn new(project: &'a TempProject) -> Self {
        Cli::program(project, project.path(".claude/ralph/ralph-audit.sh")).timeout(
            // The launcher runs ralph-ctl twice and a client in between.
            Duration::from_secs(60),
        )
    }
}

impl<'a, B> Cli<'a, B> {
    /// Any `program` in `project`, with no arguments and no stdin.
    pub fn program(project: &'a TempProject, program: impl Into<PathBuf>) -> Self {
        Cli {
            project,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            stdin: None,
            timeout: DEFAULT_TIMEOUT,
            bin: PhantomData,
        }
    }

    /// Adds one argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable (any bytes on Unix).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Sets several environment variables.
    pub fn envs<I, K, V>(self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        vars.into_iter().fold(self, |cli, (k, v)| cli.env(k, v))
    }

    /// Unsets an environment variable set before.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Feeds `bytes` on stdin (without it, stdin is `/dev/null`).
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Kills the run's process group after `timeout` (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command as built so far, for a test that drives the process
    /// itself (see [`Cli::run_with`] to only adjust it).
    pub fn command(&self) -> Command {
        let mut cmd = self.project.command(&self.program);
        cmd.args(&self.args);
        for (key, value) in &self.env {
            match value {
                Some(value) => cmd.env(key, value),
                None => cmd.env_remove(key),
            };
        }
        cmd
    }

    /// Starts the program with stdin, stdout and stderr piped, for a test
    /// that watches it run.
    pub fn spawn_piped(&self) -> std::process::Child {
        let mut cmd = self.command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd.spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()))
    }

    /// Runs the program to its end and returns what it left behind.
    pub fn run(self) -> Run {
        self.run_with(|_| {})
    }

    /// Like [`Cli::run`], after `adjust` changed the command (another user,
    /// resource limits, ...).
    pub fn run_with(self, adjust: impl FnOnce(&mut Command)) -> Run {
        let mut cmd = self.command();
        adjust(&mut cmd);
        run_with_timeout(cmd, self.stdin.as_deref(), self.timeout)
    }
}

/// The text of a Stop hook answer that makes the session go on: the
/// `reason` of a block, or the `additionalContext` of 2.1's form.
pub fn go_on_text(answer: &Value) -> Option<&str> {
    if answer["decision"] == "block" {
        return answer["reason"].as_str();
    }
    if answer["hookSpecificOutput"]["hookEventName"] == "Stop" {
        return answer["hookSpecificOutput"]["additionalContext"].as_str();
    }
    None
}

/// The string `key` of each object of the JSON array `items` (a listing
/// such as `ralph-ctl queue --json` prints); panics where one has none.
pub fn each_str<'a>(items: &'a Value, key: &str) -> Vec<&'a str> {
    let Some(items) = items.as_array() else {
        panic!("not an array: {items:#}");
    };
    items
        .iter()
        .map(|i| {
            i[key]
                .as_str()
                .unwrap_or_else(|| panic!("no string {key:?} in {i}"))
        })
        .collect()
}

/// The row `name` of a `ralph-ctl doctor --json` report (its `checks`);
/// `null` when the report has none.
pub fn doctor_row(report: &Value, name: &str) -> Value {
    let rows = report["checks"].as_array().map_or(&[][..], Vec::as_slice);
    rows.iter()
        .find(|row| row["name"] == name)
        .cloned()
        .unwrap_or_default()
}

impl Run {
    /// Panics with the whole run unless it exited 0 with nothing on stdout,
    /// or only a `systemMessage` (the stop ended the loop): the hook let the
    /// stop through.
    pub fn assert_allowed(&self) -> &Self {
        assert_eq!(self.code, Some(0), "{self:?}");
        if !self.stdout.is_empty() {
            let answer: Value = serde_json::from_str(&self.stdout)
                .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"));
            let keys: Vec<&String> = answer
                .as_object()
                .map(|o| o.keys().collect())
                .unwrap_or_default();
            assert_eq!(
                keys,
                ["systemMessage"],
                "an allowed stop prints nothing, or only how the loop ended: {self:?}"
            );
        }
        self
    }

    /// How the loop ended, as the hook told the person: panics unless the
    /// stop was let through with a `systemMessage`.
    pub fn ended_message(&self) -> String {
        self.assert_allowed();
        let answer: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("no ending message ({e}): {self:?}"));
        answer["systemMessage"].as_str().unwrap().to_string()
    }

    /// Panics unless the stop was let through without a word on stderr either.
    pub fn assert_silent(&self) -> &Self {
        self.assert_allowed();
        assert_eq!(self.stderr, "", "nothing on stderr: {self:?}");
        self
    }

    /// The hook's answer that the loop goes on: panics unless it exited 0
    /// with `{"decision":"block", "reason": …}` (to a client that sent no
    /// `last_assistant_message`, 2.0) or `{"hookSpecificOutput":
    /// {"hookEventName":"Stop", "additionalContext": …}}` (2.1 and later),
    /// never with `continue` beside it, on stdout.
    pub fn block_answer(&self) -> Value {
        assert_eq!(self.code, Some(0), "{self:?}");
        let answer: Value = serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"));
        let blocks = answer["decision"] == "block" && answer["reason"].is_string();
        let context = answer["hookSpecificOutput"]["hookEventName"] == "Stop"
            && answer["hookSpecificOutput"]["additionalContext"].is_string();
        assert!(blocks != context, "one way to go on: {answer}");
        assert!(
            answer.get("continue").is_none(),
            "never send continue beside block: {answer}"
        );
        answer
    }

    /// The text the hook's answer gives the agent next (`reason` or
    /// `additionalContext`).
    pub fn block_reason(&self) -> String {
        let answer = self.block_answer();
        answer["reason"]
            .as_str()
            .or_else(|| answer["hookSpecificOutput"]["additionalContext"].as_str())
            .unwrap_or_else(|| panic!("the answer has the text: {answer}"))
            .to_string()
    }

    /// Panics unless the hook let the stop through with exactly one stderr
    /// line, starting `ralph-stop-hook: ` and containing every needle; returns it.
    pub fn assert_hook_error(&self, needles: &[&str]) -> &str {
        assert_eq!(
            self.stdout, "",
            "a stop the hook could not judge prints nothing on stdout: {self:?}"
        );
        self.assert_allowed();
        self.assert_no_panic();
        let mut lines = self.stderr.lines();
        let line = lines.next().unwrap_or_default();
        assert!(
            lines.next().is_none() && !line.is_empty(),
            "one stderr line: {:?}",
            self.stderr
        );
        assert!(line.starts_with("ralph-stop-hook: "), "{line}");
        for needle in needles {
            assert!(line.contains(needle), "{needle:?} in {line:?}");
        }
        line
    }

    /// Panics unless stdout contains every needle.
    pub fn assert_stdout_has(&self, needles: &[&str]) -> &Self {
        self.assert_has("stdout", &self.stdout, needles)
    }

    /// Panics unless stderr contains every needle.
    pub fn assert_stderr_has(&self, needles: &[&str]) -> &Self {
        self.assert_has("stderr", &self.stderr, needles)
    }

    /// Panics, naming the stream and showing the run, unless `text`
    /// contains every needle.
    fn assert_has(&self, stream: &str, text: &str, needles: &[&str]) -> &Self {
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} on {stream}: {self:?}");
        }
        self
    }

    /// Panics if the program panicked.
    pub fn assert_no_panic(&self) -> &Self {
        assert!(
            !self.stderr.contains("panicked"),
            "no panic: {}",
            self.stderr
        );
        self
    }

    /// Stdout parsed as JSON; panics with the run when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }
}

/// The session of the loop the hook and CLI tests start.
pub const SID: &str = "c0563e5b-5d19-4827-8166-f6f26bb447e0";

/// A project with ralph installed and a loop of `max` iterations started for [`SID`].
pub fn looping(name: &str, max: u32) -> TempProject {
    TempProject::with_loop(name, SID, max)
}

/// The config of a loop whose stops say something but use no tool, for
/// tests of something else than progress: an iteration that does nothing
/// counts as no progress, and these may stop up to 1000 times in a row.
pub const IDLE_STOPS_CONFIG: &str = r#"{"noProgressThreshold": 1000}"#;

/// [`looping`] with [`IDLE_STOPS_CONFIG`].
pub fn looping_idle(name: &str, max: u32) -> TempProject {
    TempProject::with_loop_and_config(name, SID, max, IDLE_STOPS_CONFIG)
}

/// The Stop input Claude Code 2.1 sends for `project`, saying `message`;
/// without one the hook reads `transcript_path` (which does not exist
/// unless a test writes it).
pub fn stop_input(project: &TempProject, message: Option<&str>) -> Value {
    let mut input = json!({
        "session_id": SID,
        "transcript_path": project.path("transcript.jsonl"),
        "cwd": project.root,
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": true,
    });
    if let Some(text) = message {
        input["last_assistant_message"] = json!(text);
        input["transcript_path"] = json!(project.transcript_ending_with(text));
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(code: i32, stdout: &str, stderr: &str) -> Run {
        Run {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn a_hook_error_is_one_prefixed_line_with_every_needle() {
        let line = "ralph-stop-hook: the hook input on stdin is empty; letting this stop through";
        assert_eq!(
            run(0, "", &format!("{line}\n")).assert_hook_error(&["empty", "letting"]),
            line
        );
    }

    #[test]
    #[should_panic(expected = "in \"ralph-stop-hook: ")]
    fn a_hook_error_without_a_needle_fails() {
        run(0, "", "ralph-stop-hook: empty\n").assert_hook_error(&["corrupt"]);
    }

    #[test]
    #[should_panic(expected = "one stderr line")]
    fn two_error_lines_fail() {
        run(0, "", "ralph-stop-hook: a\nralph-stop-hook: b\n").assert_hook_error(&[]);
    }

    #[test]
    #[should_panic(expected = "one stderr line")]
    fn no_error_line_fails() {
        run(0, "", "").assert_hook_error(&[]);
    }

    #[test]
    #[should_panic(expected = "prints nothing on stdout")]
    fn a_hook_error_beside_an_answer_fails() {
        run(0, "{}", "ralph-stop-hook: a\n").assert_hook_error(&[]);
    }

    #[test]
    #[should_panic(expected = "never send continue beside block")]
    fn a_block_with_continue_fails() {
        run(
            0,
            r#"{"decision":"block","reason":"r","continue":false}"#,
            "",
        )
        .block_reason();
    }

    #[test]
    fn a_block_answer_gives_its_reason() {
        assert_eq!(
            run(0, r#"{"decision":"block","reason":"go on"}"#, "").block_reason(),
            "go on"
        );
    }

    #[test]
    #[should_panic(expected = "\"open\" on stdout")]
    fn a_missing_needle_on_stdout_fails() {
        run(0, "status: running\n", "").assert_stdout_has(&["running", "open"]);
    }

    #[test]
    #[should_panic(expected = "nothing on stderr")]
    fn silent_means_nothing_on_stderr() {
        run(0, "", "ralph-stop-hook: a\n").assert_silent();
    }
}
