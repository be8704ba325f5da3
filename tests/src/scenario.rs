//! One end-to-end scenario, set up in one expression: a temp project with
//! ralph installed, the client version, the launcher's arguments and
//! environment; run against a scripted mock, it gives what a person looks
//! at afterwards: the launcher's exit code and output, and the loop's status.
//!
//! ```ignore
//! let scenario = Scenario::new("complete", client).prompt("Improve the project.\n");
//! let api = MockApi::start(script::signal_at(3));
//! scenario.run(&api).ended(0, "complete").at_iteration(4);
//! ```

use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::client::ClientVersion;
use crate::mock_api::{MockApi, Reply, outcome_line};
use crate::project::{Run, TempProject, run_with_timeout, wait_with_timeout};
use crate::{LOOP_TIMEOUT, SIGNAL};

/// The client arguments every scenario passes unless it says otherwise:
/// an unattended run where no tool call waits for a person.
const BYPASS: [&str; 3] = ["--", "--permission-mode", "bypassPermissions"];

/// A scenario before it runs; derefs to its project for any setup the
/// builder does not name.
pub struct Scenario {
    project: TempProject,
    client: ClientVersion,
    args: Vec<String>,
    env: Vec<(String, String)>,
    subscription: bool,
}

impl Scenario {
    /// A fresh git project named `name`, `ralph-ctl init` run in it with
    /// the test task as PROMPT.md; the launcher runs `--headless` with
    /// bypassed permissions unless [`Scenario::args`] says otherwise.
    pub fn new(name: &str, client: ClientVersion) -> Scenario {
        let project = TempProject::new(name);
        project.init();
        Scenario::around(project, client)
    }

    /// [`Scenario::new`] with `config` as `.claude/ralph/config.json`
    /// before `init` (which keeps it).
    pub fn configured(name: &str, client: ClientVersion, config: &str) -> Scenario {
        let project = TempProject::new(name);
        project.write(".claude/ralph/config.json", config);
        project.init();
        Scenario::around(project, client)
    }

    /// A scenario around a project set up by other means.
    pub fn around(project: TempProject, client: ClientVersion) -> Scenario {
        Scenario {
            project,
            client,
            args: ["--headless"]
                .into_iter()
                .chain(BYPASS)
                .map(String::from)
                .collect(),
            env: Vec::new(),
            subscription: false,
        }
    }

    /// PROMPT.md says `text`.
    pub fn prompt(self, text: &str) -> Scenario {
        self.project.write_prompt(text);
        self
    }

    /// The project has `relative` with `contents` (not committed).
    pub fn file(self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) -> Scenario {
        self.project.write(relative, contents);
        self
    }

    /// The client logs in as a subscription does (`CLAUDE_CODE_OAUTH_TOKEN`,
    /// no `ANTHROPIC_API_KEY`): 2.1 then reports the plan's usage windows
    /// from the response headers (`rate_limit_event` in stream-json).
    pub fn subscription(mut self) -> Scenario {
        self.subscription = true;
        self
    }

    /// The launcher and the client see `key=value`.
    pub fn env(mut self, key: &str, value: &str) -> Scenario {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The no-progress breaker out of the way (a threshold of 1000
    /// iterations): for an agent that only talks while the test waits.
    #[must_use]
    pub fn without_breaker(self) -> Scenario {
        self.env("CB_NO_PROGRESS_THRESHOLD", "1000")
    }

    /// The launcher's own arguments instead of `--headless`; the client's
    /// bypassed permissions stay after them.
    pub fn args(mut self, args: &[&str]) -> Scenario {
        self.args = args
            .iter()
            .copied()
            .chain(BYPASS)
            .map(String::from)
            .collect();
        self
    }

    /// The launcher's whole command line, as given: the client gets
    /// arguments only after a `--` in `args` (without, ralph chooses its
    /// permission mode).
    pub fn exact_args(mut self, args: &[&str]) -> Scenario {
        self.args = args.iter().map(std::string::ToString::to_string).collect();
        self
    }

    /// A fresh-context loop (`--fresh`) with `extra` launcher arguments.
    pub fn fresh(self, extra: &[&str]) -> Scenario {
        let args: Vec<&str> = std::iter::once("--fresh")
            .chain(extra.iter().copied())
            .collect();
        self.args(&args)
    }

    /// The client version the scenario runs.
    pub fn client(&self) -> ClientVersion {
        self.client
    }

    /// The launcher's command against `api`, for a scenario that starts
    /// it itself (to signal it, to read it as it runs).
    pub fn command(&self, api: &MockApi) -> Command {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.launcher(api, &args)
    }

    /// The launcher with `args`, the real client against `api`, and the
    /// scenario's environment.
    fn launcher(&self, api: &MockApi, args: &[&str]) -> Command {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut cmd = self.project.launcher(self.client, api, args, &env);
        if self.subscription {
            cmd.env_remove("ANTHROPIC_API_KEY")
                .env("CLAUDE_CODE_OAUTH_TOKEN", "sk-ant-oat01-mock-subscription");
        }
        cmd
    }

    /// Starts the launcher against `api` in a process group of its own,
    /// output piped, and waits until its loop reaches `iteration`.
    pub fn start_until(&self, api: &MockApi, iteration: u64) -> Child {
        let mut cmd = self.command(api);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let launcher = cmd.spawn().unwrap();
        let reached = || {
            let state = self.project.state();
            state.and_then(|s| s["iteration"].as_u64()) >= Some(iteration)
        };
        assert!(
            wait_until(LOOP_TIMEOUT, reached),
            "the loop never reached iteration {iteration}"
        );
        launcher
    }

    /// Runs the launcher against `api` to its end (killed after
    /// [`LOOP_TIMEOUT`]), then reads the loop's status.
    pub fn run(&self, api: &MockApi) -> Outcome {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.run_exact(api, &args)
    }

    /// [`Scenario::run`] with `args` as the launcher's own arguments this
    /// once (a `--resume` after an earlier run, say); the client's bypassed
    /// permissions and the environment stay.
    pub fn run_with(&self, api: &MockApi, args: &[&str]) -> Outcome {
        let args: Vec<&str> = args.iter().copied().chain(BYPASS).collect();
        self.run_exact(api, &args)
    }

    /// [`Scenario::run_with`] with `args` the launcher's whole command line
    /// this once (no client arguments unless they are in it).
    pub fn run_exact(&self, api: &MockApi, args: &[&str]) -> Outcome {
        let run = run_with_timeout(self.launcher(api, args), None, LOOP_TIMEOUT);
        let state = self.project.status_json();
        Outcome { run, state }
    }
}

impl Deref for Scenario {
    type Target = TempProject;

    fn deref(&self) -> &TempProject {
        &self.project
    }
}

/// How a scenario's launcher run ended, and the loop's status after it.
pub struct Outcome {
    /// The launcher's exit code and output.
    pub run: Run,
    /// `ralph-ctl status --json` after the run.
    pub state: Value,
}

impl Outcome {
    /// Panics, showing the run and the state, unless the launcher exited
    /// with `code` and the loop's status is `status`.
    pub fn ended(&self, code: i32, status: &str) -> &Outcome {
        assert_eq!(self.run.code, Some(code), "exit code; {self:?}");
        assert_eq!(self.state["status"], status, "status; {self:?}");
        self
    }

    /// Panics unless the loop ended at iteration `n`, one later for each
    /// claim rejected only because its stop could not see the iteration's
    /// calls: 2.1.330 under load writes them after the hook has returned
    /// (`toolsIncomplete`), and a claim whose calls are unseen while nothing
    /// in the project changed fails the permission gate and is said again
    /// at the next stop (docs/completion.md). Nothing else is let through.
    pub fn at_iteration(&self, n: u64) -> &Outcome {
        let unseen = self.claims_rejected_for_unseen_calls();
        assert_eq!(self.state["iteration"], n + unseen, "iteration; {self:?}");
        self
    }

    /// How many stops rejected a claim for no reason but calls they could
    /// not see yet (see [`Outcome::at_iteration`]).
    pub fn claims_rejected_for_unseen_calls(&self) -> u64 {
        let only_permission = |r: &Value| {
            r["claim"]["accepted"] == false
                && r["claim"]["failedGates"] == serde_json::json!(["permission"])
        };
        self.history()
            .iter()
            .filter(|r| r["toolsIncomplete"] == true && only_permission(r))
            .count() as u64
    }

    /// Panics unless the launcher's closing line contains every needle.
    pub fn closing_has(&self, needles: &[&str]) -> &Outcome {
        let line = self.run.closing_line();
        for needle in needles {
            assert!(
                line.contains(needle),
                "{needle:?} in the closing line; {self:?}"
            );
        }
        self
    }

    /// Each iteration record's iteration and decision (`block`, `allow`),
    /// oldest first.
    pub fn decisions(&self) -> Vec<(u64, &str)> {
        fn decision(r: &Value) -> (u64, &str) {
            let iteration = r["iteration"].as_u64().unwrap_or(0);
            (iteration, r["decision"].as_str().unwrap_or("?"))
        }
        self.history().iter().map(decision).collect()
    }

    /// The queue run's items (`queue.items` of the status), in the
    /// status's order; none when the run had no queue.
    pub fn queue_items(&self) -> Vec<&Value> {
        self.state["queue"]["items"]
            .as_object()
            .map(|items| items.values().collect())
            .unwrap_or_default()
    }

    /// The queue run's one item; panics unless there is exactly one.
    pub fn only_item(&self) -> &Value {
        let items = self.queue_items();
        assert_eq!(items.len(), 1, "one queue item; {self:?}");
        items[0]
    }

    /// Panics unless the queue run's one item failed with a `why` that
    /// holds every one of `words`; that `why`.
    pub fn only_item_failed_with(&self, words: &[&str]) -> &str {
        let item = self.only_item();
        assert_eq!(item["status"], "failed", "{item}");
        let why = item["why"].as_str().unwrap_or_default();
        for word in words {
            assert!(why.contains(word), "{word:?} in {why}\n{}", self.run.stderr);
        }
        why
    }

    /// The queue run's items whose status is `status`.
    pub fn items_with_status(&self, status: &str) -> Vec<&Value> {
        let items = self.queue_items().into_iter();
        items.filter(|item| item["status"] == status).collect()
    }

    /// The loop's iteration records, oldest first.
    pub fn history(&self) -> &[Value] {
        self.state["history"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
    }
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}\nstate: {:#}", self.run, self.state)
    }
}

impl Run {
    /// The last line that is not blank on stderr: how the launcher says
    /// the loop ended.
    pub fn closing_line(&self) -> &str {
        self.stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    }
}

/// Scripts for the mock that many scenarios share.
pub mod script {
    use super::*;

    /// Only talks: each turn waits `pause`, then says "Working N.", and
    /// never claims completion (the test ends the loop).
    pub fn working(pause: Duration) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        move |turn, _| {
            std::thread::sleep(pause);
            Reply::text(format!("Working {turn}."))
        }
    }

    /// Works for `n` turns ("Worked on step K."), then claims completion
    /// with the signal at every later turn.
    pub fn signal_at(n: usize) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        move |turn, _| {
            if turn < n {
                Reply::text(format!("Worked on step {}.", turn + 1))
            } else {
                Reply::text(format!("All steps done.\n{SIGNAL}"))
            }
        }
    }

    /// Each iteration: one tool call, `work(iteration)`, then a short report;
    /// iteration `last` reports with the signal.
    pub fn work_then_report(
        last: usize,
        work: impl Fn(usize) -> Reply + Send + Sync + 'static,
    ) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        move |turn, _| {
            let iteration = turn / 2 + 1;
            if turn % 2 == 0 {
                work(iteration)
            } else if iteration < last {
                Reply::text(format!("Step {iteration} done; more to do."))
            } else {
                Reply::text(format!("All {last} steps are done.\n{SIGNAL}"))
            }
        }
    }

    /// Every iteration the same: the tool call `call`, then `words`.
    pub fn call_then_say(
        call: Reply,
        words: &str,
    ) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static + use<> {
        let words = words.to_string();
        move |turn, _| match turn % 2 {
            0 => call.clone(),
            _ => Reply::text(words.clone()),
        }
    }

    /// Says `texts` in order, one a turn, then the last one at every later turn.
    pub fn says(texts: &[&str]) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static + use<> {
        let texts: Vec<String> = texts.iter().map(std::string::ToString::to_string).collect();
        move |turn, _| Reply::text(texts[turn.min(texts.len() - 1)].clone())
    }

    /// `replies` in order, one a turn, then `last` at every later turn.
    pub fn replies_then(
        replies: Vec<Reply>,
        last: impl Into<String>,
    ) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        let last = last.into();
        move |turn, _| {
            replies
                .get(turn)
                .cloned()
                .unwrap_or_else(|| Reply::text(last.clone()))
        }
    }

    /// [`replies_then`] ending with "All done." and the signal.
    pub fn replies_then_done(
        replies: Vec<Reply>,
    ) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        replies_then(replies, format!("All done.\n{SIGNAL}"))
    }

    /// A queue item's last word: `words`, the signal, and the line that
    /// says the item the request names ended (`terminal`).
    pub fn item_done(words: &str, body: &Value) -> Reply {
        Reply::text(format!(
            "{words}\n{SIGNAL}\n{}",
            outcome_line("terminal", body)
        ))
    }

    /// Says it is still working, every turn.
    pub fn never_done() -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        |turn, _| Reply::text(format!("Still working (turn {turn})."))
    }
}

/// Waits for a launcher started by [`Scenario::start_until`]; panics with
/// its stderr unless it exited with `code`.
pub fn exits_with(launcher: &mut Child, code: i32) {
    let (status, _out, err) = wait_with_timeout(launcher, LOOP_TIMEOUT);
    assert_eq!(status.and_then(|s| s.code()), Some(code), "{err}");
}

/// A config.json whose `notify` command writes the ending's summary to
/// `notified.json` in the project; see [`notified`].
pub const NOTIFY_CONFIG: &str = r#"{"notify": "cat > notified.json"}"#;

/// The summary the notify command of [`NOTIFY_CONFIG`] read (it is
/// started, not waited for): waits up to 10 s for it.
pub fn notified(project: &TempProject) -> Value {
    let mut summary = Value::Null;
    let arrived = wait_until(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(project.path("notified.json")).unwrap_or_default();
        summary = serde_json::from_str(&text).unwrap_or_default();
        !summary.is_null()
    });
    assert!(arrived, "no notification");
    summary
}

/// A switch the test flips while the mock answers.
#[derive(Clone, Default)]
pub struct Flag(Arc<AtomicBool>);

impl Flag {
    /// Flips it: from now on the script answers with its `after`.
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// A script that answers as `before` until the flag is set, then
    /// `after(turn)`.
    pub fn script(
        &self,
        before: impl Fn(usize, &Value) -> Reply + Send + Sync + 'static,
        after: impl Fn(usize) -> Reply + Send + Sync + 'static,
    ) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
        let flag = Arc::clone(&self.0);
        move |turn, body| {
            if flag.load(Ordering::SeqCst) {
                after(turn)
            } else {
                before(turn, body)
            }
        }
    }

    /// Sets the flag; true when this call set it (it was not set before).
    pub fn first_set(&self) -> bool {
        !self.0.swap(true, Ordering::SeqCst)
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// A task of `head`, then `line(n)` for n = 0, 1, … until it holds at
/// least `size` bytes, then `tail`: a long PROMPT.md whose every line differs.
pub fn long_task(head: &str, size: usize, line: impl Fn(usize) -> String, tail: &str) -> String {
    let mut task = String::from(head);
    let mut n = 0;
    while task.len() < size {
        task.push_str(&line(n));
        n += 1;
    }
    task.push_str(tail);
    task
}

/// Polls `check` every 25 ms until it holds (true) or `timeout` passes (false).
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        thread::sleep(Duration::from_millis(25));
    }
    false
}
