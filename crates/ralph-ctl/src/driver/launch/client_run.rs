//! One run of the client, from the driver's side: its command line built
//! for the iteration, the process started and watched to its end (signals
//! passed on, the idle watch, the usage windows a session reports as they
//! come), and what it left: its supervision and its result object.

use std::io;

use ralph_core::exit_codes;
use ralph_core::judge::state::Status;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use ralph_core::persist::store::StateStore;
use ralph_core::time::Timestamp;
use ralph_core::units::Usd;

use super::Driver;
use crate::driver::client::{self, Output, RunningClient, Supervision};
use crate::driver::command::{self, ClientCommand, Launch, Platform, PromptDelivery};
use crate::driver::prepare::{PROMPT_FILE_NAME, iteration_budget};
use crate::driver::{carriers, result, sandbox, say, steps, transcripts, worktree};
use crate::error::CtlError;
use crate::formula;

/// The client's process watched to its end: how it ended (or why it could
/// not be waited for) and its output; an error when it could not start.
type Watched = io::Result<(io::Result<Supervision>, Vec<u8>)>;

impl Driver<'_> {
    /// Starts the client on `prompt` and watches it to its end (signals,
    /// the idle watch); its supervision and its result object, or why it
    /// could not run and the exit code to end with.
    pub(super) fn run_client(
        &mut self,
        prompt: &str,
        step: Option<&formula::Step>,
        spent: Usd,
        current: Option<&worktree::Worktree>,
        new_worktree: Option<carriers::NewWorktree>,
    ) -> Result<(Supervision, Option<result::ClientResult>), (String, i32)> {
        self.start_over_if_unresumable();
        let command = self.client_command(prompt, step, spent, current);
        if let PromptDelivery::File(path) = &command.delivery {
            // Private, and never written through a link planted there.
            if let Err(e) = atomic::write_file(path, command.prompt.as_bytes(), 0o600) {
                let problem = CtlError::io("write", path)(e);
                say(&problem.to_string());
                let cause = format!("the first prompt could not be written ({problem})");
                return Err((cause, exit_codes::ERROR));
            }
        }
        let work_root = current.map_or(self.paths.root.as_path(), |w| &w.path);
        let watched = self.watch(&command, work_root, new_worktree);
        if let PromptDelivery::File(path) = &command.delivery {
            let _ = std::fs::remove_file(path);
        }
        self.read_end(&command, watched)
    }

    /// A session the client never saved an answer of (stopped before the
    /// model's first reply) cannot be resumed: the client would refuse it
    /// ("No conversation found") at every try. The iteration starts over in
    /// a conversation of that id, with the same text; what the client had
    /// written of it is moved aside, or the id would be "already in use".
    fn start_over_if_unresumable(&mut self) {
        let session = self.session.as_str();
        if !self.resumed || transcripts::resumable(session) {
            return;
        }
        let aside = match transcripts::set_aside(session) {
            Ok(Some(aside)) => format!(" (what it had written is kept in {})", aside.display()),
            Ok(None) => String::new(),
            Err(e) => format!(" (its transcript could not be moved aside: {e})"),
        };
        say(&format!(
            "session {session} holds no answer the client could resume: the iteration starts over \
             in a new conversation of that id{aside}"
        ));
        self.resumed = false;
    }

    /// The client's command line for this iteration: `prompt` under the
    /// step's model, the budget left after `spent`, and in a worktree
    /// (`current`) its own copies of ralph's files walled too.
    fn client_command(
        &self,
        prompt: &str,
        step: Option<&formula::Step>,
        spent: Usd,
        current: Option<&worktree::Worktree>,
    ) -> ClientCommand {
        let max_budget_usd = self
            .config
            .supervision
            .max_cost
            .map(|max| Usd(max.0.saturating_sub(spent.0)).dollars());
        let extra_settings = match (
            current,
            self.mode.worktrees(),
            self.extra_settings.as_deref(),
        ) {
            (Some(worktree), Some(plan), Some(settings)) => {
                Some(sandbox::in_worktree(settings, &plan.root, &worktree.path))
            }
            _ => self.extra_settings.clone(),
        };
        let prompt_file = self.paths.runtime_dir().join(PROMPT_FILE_NAME);
        let block_cap = std::env::var(command::BLOCK_CAP_ENV).ok();
        command::build(&Launch {
            client: &self.client,
            headless: self.mode.headless(),
            session_id: &self.session,
            max_iterations: self.max_iterations,
            prompt,
            client_args: &steps::with_model(step, &self.client_args),
            block_cap: block_cap.as_deref(),
            prompt_file: &prompt_file,
            platform: Platform::current(),
            resume: self.resumed,
            max_budget_usd: iteration_budget(
                max_budget_usd,
                self.mode
                    .fresh()
                    .then_some(self.config.iteration_budget)
                    .flatten(),
            ),
            extra_settings: extra_settings.as_deref(),
            fresh: self.mode.fresh(),
            json: self.json,
            run_env: self.env.overrides(),
            loop_project: &self.paths.root,
        })
    }

    /// Starts `command` in `work_root` and watches it to its end: its
    /// start recorded among the loop's carriers, the signals passed on, a
    /// fresh client's idle watch, a session's client ended once the hook
    /// let it stop, and whatever it started ended with it.
    fn watch(
        &mut self,
        command: &ClientCommand,
        work_root: &std::path::Path,
        new_worktree: Option<carriers::NewWorktree>,
    ) -> Watched {
        let paths = self.paths;
        let session = self.session.as_str();
        let output = if !self.mode.headless() {
            Output::Terminal
        } else if self.json {
            Output::PassOn
        } else {
            Output::Readable
        };
        let idle_timeout = self
            .config
            .idle_timeout_seconds
            .filter(|_| self.mode.fresh());
        let headless = self.mode.headless();
        let session_client = headless && !self.mode.fresh();
        // A session's client runs for the whole loop and the hook judges its
        // stops: the usage windows it reports are recorded as they come,
        // for the next stop (a fresh iteration's are judged at its end).
        let record_windows = session_client.then(|| usage_window_recorder(paths, session));
        let signals = &mut self.signals;
        RunningClient::spawn(command, work_root, output, record_windows).map(|mut running| {
            // Best effort: a loop without its client recorded is only
            // judged by the driver's life.
            let _ = carriers::record_start(
                paths,
                session,
                carriers::with_client(Some(running.pid())),
                new_worktree,
            );
            if session_client {
                // The hook let the session stop (an ending, a question):
                // the client is ended with what it started.
                running.end_when_done(loop_done(paths, session));
            }
            let output_seen = running.output_seen();
            let mut transcript = None;
            let mut activity = || {
                // Found once the client has written it.
                if transcript.is_none() {
                    transcript = transcripts::of_session(session);
                }
                let size = transcript
                    .as_ref()
                    .and_then(|t| std::fs::metadata(t).ok())
                    .map_or(0, |m| m.len());
                size.wrapping_add(output_seen.load(std::sync::atomic::Ordering::Relaxed))
            };
            let idle = idle_timeout.map(|seconds| client::IdleWatch {
                timeout: std::time::Duration::from_secs(u64::from(seconds)),
                every: client::IDLE_LOOK,
                activity: &mut activity,
            });
            let watched = client::supervise(
                &mut running,
                signals,
                client::KILL_GRACE,
                client::TICK,
                idle,
                headless.then_some(client::INTERRUPT_PASS_ON),
            );
            running.end_leftovers(client::LEFTOVER_GRACE);
            (watched, running.output())
        })
    }

    /// What the watched client left: its supervision and result object
    /// (a fresh client's usage windows kept for its judging), or why it
    /// could not start or be waited for and the exit code to end with.
    fn read_end(
        &mut self,
        command: &ClientCommand,
        watched: Watched,
    ) -> Result<(Supervision, Option<result::ClientResult>), (String, i32)> {
        match watched {
            Ok((Ok(supervision), output)) => {
                // A session's were recorded line by line as they came.
                if self.mode.fresh() {
                    self.usage_windows = result::usage_windows(&output, Timestamp::now());
                }
                Ok((supervision, result::parse_stream(&output, Timestamp::now())))
            }
            Ok((Err(e), _)) => {
                say(&format!("cannot wait for the Claude Code client: {e}"));
                Err((
                    format!("Claude Code could not be waited for ({e})"),
                    exit_codes::ERROR,
                ))
            }
            Err(e) => {
                say(&format!(
                    "cannot start the Claude Code client {}: {e}",
                    command.program.display()
                ));
                let code = if e.kind() == io::ErrorKind::NotFound {
                    exit_codes::CLIENT_NOT_FOUND
                } else {
                    exit_codes::ERROR
                };
                Err((format!("Claude Code could not start ({e})"), code))
            }
        }
    }
}

/// Records the usage windows a session's client reports on a line of its
/// output, as they come (`UsageWindowsSeen`), for the next stop.
fn usage_window_recorder(paths: &ProjectPaths, session: &str) -> client::LineHook {
    let paths = paths.clone();
    let session = session.to_string();
    Box::new(move |line: &[u8]| {
        let windows = result::usage_windows(line, Timestamp::now());
        if windows.is_empty() {
            return;
        }
        let recorded = ralph_core::transaction::change(
            &paths,
            ralph_core::transaction::Whose::Session(&session),
            |draft| {
                draft.apply(ralph_core::events::Event::UsageWindowsSeen(windows));
                Ok::<_, CtlError>(())
            },
        );
        if let Err(e) = recorded {
            say(&format!(
                "warning: the usage window the client reported could not be recorded: {e}"
            ));
        }
    })
}

/// Whether the loop of `session` is done with its client: no longer
/// running (ended, waiting for an answer), or no longer this session's.
/// Read without the lock, at most every quarter of a second.
fn loop_done(paths: &ProjectPaths, session: &str) -> Box<dyn FnMut() -> bool> {
    let store = StateStore::new(paths);
    let session = session.to_string();
    let mut looked = None::<std::time::Instant>;
    Box::new(move || {
        let now = std::time::Instant::now();
        if looked.is_some_and(|at| now.duration_since(at) < std::time::Duration::from_millis(250)) {
            return false;
        }
        looked = Some(now);
        match store.read() {
            Ok(Some(state)) => state.session_id != session || state.status != Status::Running,
            Ok(None) => true,
            // Unreadable for a moment (or for good): not a reason to end it.
            Err(_) => false,
        }
    })
}
