//! The loop's configuration: defaults, overridden by `.claude/ralph/config.json`,
//! overridden by environment variables. A running loop reads the files'
//! texts it pinned at its start ([`crate::pin`]), never the files as they
//! are now.
//!
//! Every value is validated; a bad one is an error that names the variable or
//! key and what it accepts, so the hook can let the stop through with one clear
//! line instead of running a loop the person did not ask for.

use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::files::{Bounded, read_bounded};
use crate::judge::breaker::{BreakerConfig, SIGNALS, Signal};
use crate::judge::completion::{CompletionConfig, CompletionMode, ConfidenceWeights};
use crate::observe::verify::VerifyCommand;
use crate::paths::{DEFAULT_PROMPT_FILE, ProjectPaths};
use crate::units::Usd;

mod load;

/// Default iteration cap.
pub const DEFAULT_MAX_ITERATIONS: u32 = 25;
/// Default completion signal.
pub const DEFAULT_COMPLETION_SIGNAL: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";
/// Largest accepted iteration cap.
pub const MAX_ITERATIONS_LIMIT: u32 = 100_000;
/// Largest accepted circuit breaker threshold.
pub const THRESHOLD_LIMIT: u32 = 1_000;
/// Longest accepted completion signal, in characters.
pub const SIGNAL_MAX_CHARS: usize = 200;
/// Largest config file accepted; a bigger one is refused, not read.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Environment variable names, in one place for the binaries and the docs.
pub mod env {
    /// Must be exactly `1` for the hook to do anything at all.
    pub const ACTIVE: &str = "RALPH_ACTIVE";
    /// Iteration cap.
    pub const MAX_ITERATIONS: &str = "RALPH_MAX_ITERATIONS";
    /// Completion signal.
    pub const COMPLETION_SIGNAL: &str = "RALPH_COMPLETION_SIGNAL";
    /// Prompt file path.
    pub const PROMPT_FILE: &str = "RALPH_PROMPT_FILE";
    // The stall signals' thresholds are named in `breaker::SIGNALS`.
    /// Iterations the breaker stays half open before it opens.
    pub const PATIENCE: &str = "CB_PATIENCE";
    /// Minutes after which an open breaker lets a new loop start (0 or unset: never).
    pub const COOLDOWN_MINUTES: &str = "CB_COOLDOWN_MINUTES";
    /// How a completion claim is read: strict, dual or confidence.
    pub const COMPLETION_MODE: &str = "RALPH_COMPLETION_MODE";
    /// Set by `ralph-ctl run` for a headless client: the driver settles the
    /// loop's ending once the client exits (charges its cost, then runs
    /// `notify`), so the Stop hook leaves the notification to it.
    pub const DRIVER_SETTLES: &str = "RALPH_DRIVER_SETTLES";
    /// Set by `ralph-ctl run` for its client: the project whose loop started
    /// it. Inside the client, `ralph-ctl check` judges that loop only,
    /// wherever the agent runs it from.
    pub const LOOP_PROJECT: &str = "RALPH_LOOP_PROJECT";
    /// Project root exported by Claude Code to its hooks.
    pub const CLAUDE_PROJECT_DIR: &str = "CLAUDE_PROJECT_DIR";
    /// The loop's cost budget in US dollars.
    pub const MAX_COST_USD: &str = "RALPH_MAX_COST_USD";
    /// Model requests allowed in a rolling hour.
    pub const MAX_CALLS_PER_HOUR: &str = "RALPH_MAX_CALLS_PER_HOUR";
    /// conservative, aggressive or manual.
    pub const RESUME_POLICY: &str = "RALPH_RESUME_POLICY";
    /// The first wait before resuming after an API error, in seconds.
    pub const RESUME_BACKOFF_SECONDS: &str = "RALPH_RESUME_BACKOFF_SECONDS";
    /// Resumes the supervisor makes on its own before it leaves the loop paused.
    pub const MAX_AUTO_RESUMES: &str = "RALPH_MAX_AUTO_RESUMES";
    /// The longest wait for an API limit's reset, in hours.
    pub const MAX_RESUME_WAIT_HOURS: &str = "RALPH_MAX_RESUME_WAIT_HOURS";
    /// session (one client session for the whole loop) or fresh (one per iteration).
    pub const CONTEXT_MODE: &str = "RALPH_CONTEXT_MODE";
    /// The most one fresh iteration may cost, in US dollars.
    pub const ITERATION_BUDGET_USD: &str = "RALPH_ITERATION_BUDGET_USD";
    /// `RALPH_OUTCOME` errors in a row that end the loop.
    pub const ERROR_BUDGET: &str = "RALPH_ERROR_BUDGET";
    /// `RALPH_OUTCOME` gate-blocked items in a row that end the loop.
    pub const GATE_BUDGET: &str = "RALPH_GATE_BUDGET";
    /// Seconds a fresh iteration's transcript may stay still before its client is ended.
    pub const IDLE_TIMEOUT_SECONDS: &str = "RALPH_IDLE_TIMEOUT_SECONDS";
    /// The most iterations one backlog item may take in a queue run.
    pub const MAX_ITERATIONS_PER_ITEM: &str = "RALPH_MAX_ITERATIONS_PER_ITEM";
    /// Seconds a queue worker's claim on an item lasts unless renewed.
    pub const CLAIM_TTL_SECONDS: &str = "RALPH_CLAIM_TTL_SECONDS";
    /// A command run when a loop ends or pauses, with its summary on stdin.
    pub const NOTIFY: &str = "RALPH_NOTIFY";
    /// `queueRemote`: the git remote a queue run shares with other machines.
    pub const QUEUE_REMOTE: &str = "RALPH_QUEUE_REMOTE";
    /// auto, on or off: whether unattended runs put the client in its sandbox.
    pub const SANDBOX: &str = "RALPH_SANDBOX";
    /// `cleanRoom`.
    pub const CLEAN_ROOM: &str = "RALPH_CLEAN_ROOM";
    /// `true`: a claim may run fewer tests, or skip more, than the loop's baseline.
    pub const ALLOW_FEWER_TESTS: &str = "RALPH_ALLOW_FEWER_TESTS";
    /// 0 to 1: the share of a plan's usage window at which the loop pauses
    /// until the window resets.
    pub const PAUSE_AT_UTILIZATION: &str = "RALPH_PAUSE_AT_UTILIZATION";
}

/// How many `RALPH_OUTCOME` errors, and gate-blocked items, in a row a loop
/// takes before it ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutcomeBudgets {
    /// `errorBudget`: consecutive `error` outcomes (default 2).
    pub errors: u32,
    /// `gateBudget`: consecutive `gate-blocked` outcomes (default 3).
    pub gate_blocked: u32,
}

impl Default for OutcomeBudgets {
    fn default() -> Self {
        OutcomeBudgets {
            errors: 2,
            gate_blocked: 3,
        }
    }
}

/// Where the iterations of a loop run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ContextMode {
    /// One client session: every stop of it is an iteration (the Stop hook
    /// feeds the prompt back), and the context carries over.
    #[default]
    Session,
    /// One headless client process per iteration, with a new session: the
    /// project's files are the only memory (`ralph-ctl run` judges each
    /// iteration with the same engine once its process ends).
    Fresh,
}

impl ContextMode {
    /// Reads `session` or `fresh`.
    pub fn parse(raw: &str) -> Option<ContextMode> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "session" => Some(ContextMode::Session),
            "fresh" => Some(ContextMode::Fresh),
            _ => None,
        }
    }

    /// The name used in the config, the state and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ContextMode::Session => "session",
            ContextMode::Fresh => "fresh",
        }
    }
}

/// What `contextMode` / `RALPH_CONTEXT_MODE` accept.
const CONTEXT_MODES: &str = "session or fresh";

/// Whether an unattended run (headless, fresh, formula) runs the client in
/// its own sandbox (bubblewrap on Linux, Seatbelt on macOS): the agent's
/// commands then run without prompts and write nothing outside the project
/// nor anything of ralph's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SandboxSetting {
    /// On where the client and the machine support it; otherwise off, said
    /// in one line with how to get it.
    #[default]
    Auto,
    /// Required: a run refuses to start without it, naming what to install.
    On,
    /// Never: the client runs with permission rules only.
    Off,
}

impl SandboxSetting {
    /// Reads `auto`, `on` or `off`.
    pub fn parse(raw: &str) -> Option<SandboxSetting> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(SandboxSetting::Auto),
            "on" => Some(SandboxSetting::On),
            "off" => Some(SandboxSetting::Off),
            _ => None,
        }
    }

    /// How the checks the loop runs on the agent's work are walled: as the
    /// agent is (`off` opens them, `on` requires them).
    pub fn walls(self) -> crate::walls::WallsWanted {
        use crate::walls::WallsWanted;
        match self {
            SandboxSetting::Auto => WallsWanted::Auto,
            SandboxSetting::On => WallsWanted::Required,
            SandboxSetting::Off => WallsWanted::Off,
        }
    }

    /// The name used in the config and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxSetting::Auto => "auto",
            SandboxSetting::On => "on",
            SandboxSetting::Off => "off",
        }
    }
}

/// What `sandbox` / `RALPH_SANDBOX` accept.
const SANDBOX_SETTINGS: &str = "auto, on or off";

/// How the supervisor answers a paused loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ResumePolicy {
    /// Resume when the breaker is closed and budget is left, at most
    /// `maxAutoResumes` times, after the full backoff.
    #[default]
    Conservative,
    /// Resume sooner (a quarter of the backoff) and more often (four times
    /// `maxAutoResumes`), also with the breaker half open.
    Aggressive,
    /// Never resume on its own: leave the loop paused for a person.
    Manual,
}

impl ResumePolicy {
    /// Reads `conservative`, `aggressive` or `manual`.
    pub fn parse(raw: &str) -> Option<ResumePolicy> {
        match raw.trim().to_ascii_lowercase().as_str() {
            "conservative" => Some(ResumePolicy::Conservative),
            "aggressive" => Some(ResumePolicy::Aggressive),
            "manual" => Some(ResumePolicy::Manual),
            _ => None,
        }
    }

    /// The name used in the config and the log.
    pub fn as_str(self) -> &'static str {
        match self {
            ResumePolicy::Conservative => "conservative",
            ResumePolicy::Aggressive => "aggressive",
            ResumePolicy::Manual => "manual",
        }
    }
}

/// Budgets and the supervisor's resume rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SupervisionConfig {
    /// How paused loops are resumed.
    pub policy: ResumePolicy,
    /// The first wait before a resume, doubling after each one.
    pub backoff_seconds: u32,
    /// Resumes made without a person (conservative; four times this when aggressive).
    pub max_auto_resumes: u32,
    /// The longest wait for an API limit's reset before the supervisor
    /// leaves the loop paused for the person instead (`maxResumeWaitHours`):
    /// a plan's weekly limit may reset days away.
    pub max_resume_wait_hours: u32,
    /// The loop's cost budget.
    pub max_cost: Option<Usd>,
    /// Model requests allowed in a rolling hour.
    pub max_calls_per_hour: Option<u32>,
    /// The share of a usage window (in thousandths) at which the loop
    /// pauses until the window resets (`pauseAtUtilization`).
    pub pause_at_utilization: Option<PerMille>,
}

use crate::units::PerMille;

/// What `pauseAtUtilization` / `RALPH_PAUSE_AT_UTILIZATION` accept.
const UTILIZATION_ACCEPTS: &str =
    "a share of the usage window above 0 and at most 1, such as 0.8 (80 %)";

/// `raw` as a `pauseAtUtilization`, when it is one.
fn validate_utilization(raw: f64) -> Option<PerMille> {
    PerMille::of(raw).filter(|p| p.0 > 0)
}

/// Default first wait before a resume, in seconds.
pub const DEFAULT_RESUME_BACKOFF_SECONDS: u32 = 60;
/// Default number of resumes without a person.
pub const DEFAULT_MAX_AUTO_RESUMES: u32 = 5;
/// Default longest wait for a limit's reset: a day covers the five-hour
/// window and a night; a weekly or monthly one is the person's to wait for.
pub const DEFAULT_MAX_RESUME_WAIT_HOURS: u32 = 24;
/// Largest accepted `maxCostUsd`.
pub const MAX_COST_LIMIT_USD: f64 = 1_000_000.0;

impl Default for SupervisionConfig {
    fn default() -> Self {
        SupervisionConfig {
            policy: ResumePolicy::Conservative,
            backoff_seconds: DEFAULT_RESUME_BACKOFF_SECONDS,
            max_auto_resumes: DEFAULT_MAX_AUTO_RESUMES,
            max_resume_wait_hours: DEFAULT_MAX_RESUME_WAIT_HOURS,
            max_cost: None,
            max_calls_per_hour: None,
            pause_at_utilization: None,
        }
    }
}

/// The resolved configuration of a loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Iteration cap: the stop that ends iteration `max_iterations` is let through.
    pub max_iterations: u32,
    /// The text whose presence in the agent's last message ends the loop.
    pub completion_signal: String,
    /// The prompt file as configured (relative to the project root unless absolute).
    pub prompt_file: PathBuf,
    /// The circuit breaker's thresholds and patience.
    pub breaker: BreakerConfig,
    /// Minutes after which an open breaker no longer blocks a new start (`None`: never).
    pub cooldown_minutes: Option<u32>,
    /// How claims are read and checked: mode, plan files, verification commands, weights.
    pub completion: CompletionConfig,
    /// Budgets and resume rules.
    pub supervision: SupervisionConfig,
    /// One session for the loop, or a fresh one per iteration.
    pub context_mode: ContextMode,
    /// The most one fresh iteration may cost (`--max-budget-usd` of its client).
    pub iteration_budget: Option<Usd>,
    /// The `RALPH_OUTCOME` error and gate-blocked budgets.
    pub outcome_budgets: OutcomeBudgets,
    /// Seconds a fresh iteration may go without its transcript (or output)
    /// growing before its client is ended and the iteration counts as an
    /// error (`None`: never; a hung session must not stall the night).
    pub idle_timeout_seconds: Option<u32>,
    /// A command run (by the shell, in the project) when a loop ends or
    /// pauses, with its summary as JSON on stdin (`crate::notify`).
    pub notify: Option<String>,
    /// Whether unattended runs put the client in its sandbox.
    pub sandbox: SandboxSetting,
    /// How a queue run works its items.
    pub queue: QueueConfig,
    /// `worktreeSetup`: the command run in each new worktree (a queue
    /// item's, a `--worktree` iteration's) before its test baseline, inside
    /// the checks' walls, to give it the environment the main checkout
    /// keeps out of git (`npm ci`, a virtual environment); its name is
    /// `worktreeSetup`. A project's config only, pinned like `verify`.
    pub worktree_setup: Option<VerifyCommand>,
    /// `cleanRoom`: a claim that ends a loop is checked in ralph's clean
    /// room (a copy of the claimed tree with an environment ralph made,
    /// outside the project: `crate::room`), not in the agent's tree. Off
    /// unless the config says `true`: the room's environment is not yet
    /// made right for every project (an npm project without its lock file
    /// in git, a `.venv` under Landlock's walls).
    pub clean_room: bool,
}

/// How long `worktreeSetup` may run unless it says (`timeoutSeconds`).
pub const DEFAULT_WORKTREE_SETUP_TIMEOUT_SECS: u32 = 600;

/// How a queue run (`ralph-ctl run --queue`) works its items.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    /// `maxIterationsPerItem`: the most iterations one item's loop may take (default 5).
    pub max_iterations_per_item: u32,
    /// `claimTtlSeconds`: how long a worker's claim lasts unless renewed
    /// (default 900); a dead worker's item is free again after it.
    pub claim_ttl_seconds: u32,
    /// `queueRemote`: the git remote on which several machines share one
    /// backlog (claims, endings and merges); `None`: this machine alone.
    pub remote: Option<String>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_iterations_per_item: 5,
            claim_ttl_seconds: 900,
            remote: None,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_iterations: DEFAULT_MAX_ITERATIONS,
            completion_signal: DEFAULT_COMPLETION_SIGNAL.to_string(),
            prompt_file: PathBuf::from(DEFAULT_PROMPT_FILE),
            breaker: BreakerConfig::default(),
            cooldown_minutes: None,
            completion: CompletionConfig::default(),
            supervision: SupervisionConfig::default(),
            context_mode: ContextMode::Session,
            iteration_budget: None,
            outcome_budgets: OutcomeBudgets::default(),
            idle_timeout_seconds: None,
            notify: None,
            sandbox: SandboxSetting::Auto,
            queue: QueueConfig::default(),
            worktree_setup: None,
            clean_room: false,
        }
    }
}

/// What can be wrong with the configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// An environment variable holds a value out of its domain.
    #[error("environment variable {name}={value:?} is invalid: {accepts}")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// The value found (lossy if it was not UTF-8).
        value: String,
        /// What it accepts.
        accepts: String,
    },
    /// The config file exists but could not be read.
    #[error("cannot read {path}: {source}; fix its permissions or remove it")]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The config file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{path} is larger than {} KiB; a ralph config is a few lines", MAX_CONFIG_BYTES / 1024)]
    TooLarge {
        /// The config file.
        path: PathBuf,
    },
    /// The config file is not valid JSON.
    #[error("{path} is not valid JSON: {message}")]
    Malformed {
        /// The config file.
        path: PathBuf,
        /// serde's explanation, with line and column.
        message: String,
    },
    /// A value of the config file has the wrong type (serde does not name
    /// the key, so the accepted keys and their types are listed).
    #[error(
        "{path} is not a valid ralph config: {message}; accepted keys: {}",
        accepted_keys()
    )]
    Mistyped {
        /// The config file.
        path: PathBuf,
        /// serde's explanation, with line and column.
        message: String,
    },
    /// The config file has a key ralph does not know.
    #[error(
        "{path}: unknown key `{key}`{suggestion}; accepted keys: {}",
        accepted_keys()
    )]
    UnknownKey {
        /// The config file.
        path: PathBuf,
        /// The key found.
        key: String,
        /// ` (did you mean `x`?)`, or empty.
        suggestion: String,
    },
    /// A key of the config file holds a value out of its domain.
    #[error("{path}: key {key} = {value} is invalid: {accepts}")]
    BadKey {
        /// The config file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
        /// What it accepts.
        accepts: String,
    },
}

impl ConfigError {
    /// What to do about it, in a few words (`doctor`'s fix line).
    pub fn fix(&self) -> &'static str {
        match self {
            ConfigError::BadEnv { .. } => "correct or unset the variable it names",
            ConfigError::Read { .. } => "fix the file's permissions, or remove it",
            ConfigError::TooLarge { .. } => "keep only the keys you set",
            ConfigError::Malformed { .. } => "fix the JSON at the line and column it names",
            ConfigError::Mistyped { .. } => {
                "give the value at the line and column it names the type its key takes"
            }
            ConfigError::UnknownKey { .. } => "correct the key it names",
            ConfigError::BadKey { .. } => "give the key a value it accepts",
        }
    }
}

/// The keys `.claude/ralph/config.json` accepts; any other key is an error,
/// so that a typo is reported instead of silently ignored.
/// The whole-number keys are read by [`number_settings`]; every other key is
/// checked against [`FILE_KEYS`] first, so a typo is reported, not ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    plan_files: Option<Vec<String>>,
    verify: Option<Vec<VerifyCommand>>,
    confidence: Option<ConfidenceWeights>,
    protected_paths: Option<Vec<String>>,
    worktree_setup: Option<WorktreeSetupEntry>,
}

/// `worktreeSetup` as written: a command, or a command with its deadline.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum WorktreeSetupEntry {
    /// `"npm ci"`.
    Command(String),
    /// `{"command": "npm ci", "timeoutSeconds": 900}`.
    Timed {
        command: String,
        #[serde(rename = "timeoutSeconds", default = "default_setup_timeout")]
        timeout_seconds: u32,
    },
}

fn default_setup_timeout() -> u32 {
    DEFAULT_WORKTREE_SETUP_TIMEOUT_SECS
}

/// Which config file is read: the user's defaults or the project's own.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    User,
    Project,
}

/// The config file's keys that hold lists and objects (the others are in
/// [`number_settings`] and [`word_settings`]).
const FILE_KEYS: &[&str] = &[
    "planFiles",
    "verify",
    "confidence",
    "protectedPaths",
    "worktreeSetup",
];

/// How a word setting's value is written in the config file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    /// A JSON string.
    Text,
    /// A JSON number (an amount, a share).
    Number,
    /// `true` or `false`.
    Bool,
}

/// A setting of one word, amount or flag: its config key, its environment
/// variable, how the file writes it, what it accepts, and where a value
/// goes (`None`: not one it accepts). The file and the environment are
/// read through the same entry.
struct WordSetting {
    key: &'static str,
    env: &'static str,
    written: Written,
    accepts: fn() -> String,
    apply: fn(&mut Config, &str) -> Option<()>,
}

/// The word settings, for the file and the environment alike: a table,
/// so the file and the environment read them in the same order.
const WORD_SETTINGS: [WordSetting; 13] = [
    WordSetting {
        key: "completionSignal",
        env: env::COMPLETION_SIGNAL,
        written: Written::Text,
        accepts: signal_accepts,
        apply: |c, v| {
            c.completion_signal = validate_signal(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "promptFile",
        env: env::PROMPT_FILE,
        written: Written::Text,
        accepts: || "a non-empty path".into(),
        apply: |c, v| {
            c.prompt_file = PathBuf::from(Some(v).filter(|v| !v.trim().is_empty())?);
            Some(())
        },
    },
    WordSetting {
        key: "completionMode",
        env: env::COMPLETION_MODE,
        written: Written::Text,
        accepts: || MODES.into(),
        apply: |c, v| {
            c.completion.mode = CompletionMode::parse(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "maxCostUsd",
        env: env::MAX_COST_USD,
        written: Written::Number,
        accepts: cost_accepts,
        apply: |c, v| {
            c.supervision.max_cost = Some(validate_cost(v.trim().parse().ok()?)?);
            Some(())
        },
    },
    WordSetting {
        key: "iterationBudgetUsd",
        env: env::ITERATION_BUDGET_USD,
        written: Written::Number,
        accepts: cost_accepts,
        apply: |c, v| {
            c.iteration_budget = Some(validate_cost(v.trim().parse().ok()?)?);
            Some(())
        },
    },
    WordSetting {
        key: "pauseAtUtilization",
        env: env::PAUSE_AT_UTILIZATION,
        written: Written::Number,
        accepts: || UTILIZATION_ACCEPTS.into(),
        apply: |c, v| {
            c.supervision.pause_at_utilization =
                Some(validate_utilization(v.trim().parse().ok()?)?);
            Some(())
        },
    },
    WordSetting {
        key: "resumePolicy",
        env: env::RESUME_POLICY,
        written: Written::Text,
        accepts: || POLICIES.into(),
        apply: |c, v| {
            c.supervision.policy = ResumePolicy::parse(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "contextMode",
        env: env::CONTEXT_MODE,
        written: Written::Text,
        accepts: || CONTEXT_MODES.into(),
        apply: |c, v| {
            c.context_mode = ContextMode::parse(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "sandbox",
        env: env::SANDBOX,
        written: Written::Text,
        accepts: || SANDBOX_SETTINGS.into(),
        apply: |c, v| {
            c.sandbox = SandboxSetting::parse(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "allowFewerTests",
        env: env::ALLOW_FEWER_TESTS,
        written: Written::Bool,
        accepts: || BOOLEANS.into(),
        apply: |c, v| {
            c.completion.allow_fewer_tests = parse_bool(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "cleanRoom",
        env: env::CLEAN_ROOM,
        written: Written::Bool,
        accepts: || BOOLEANS.into(),
        apply: |c, v| {
            c.clean_room = parse_bool(v)?;
            Some(())
        },
    },
    WordSetting {
        key: "queueRemote",
        env: env::QUEUE_REMOTE,
        written: Written::Text,
        accepts: || "the name of a git remote".into(),
        apply: |c, v| {
            c.queue.remote = Some(validate_remote_name(v)?).filter(|r| !r.is_empty());
            Some(())
        },
    },
    WordSetting {
        key: "notify",
        env: env::NOTIFY,
        written: Written::Text,
        accepts: || "a command".into(),
        apply: |c, v| {
            c.notify = Some(v.to_string()).filter(|c| !c.trim().is_empty());
            Some(())
        },
    },
];

/// A git remote's name as ralph takes it: empty (none), or a name git
/// accepts that cannot be read as an option or a path (no leading `-`, no
/// `/` at either end, no `..`, no space or control character).
pub fn validate_remote_name(name: &str) -> Option<String> {
    let name = name.trim();
    let bad = name.starts_with('-')
        || name.starts_with('/')
        || name.ends_with('/')
        || name.contains("..")
        || name.contains(':')
        || name
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "~^?*[\\".contains(c));
    (!bad).then(|| name.to_string())
}

/// The known key closest to `key` when it is a likely misspelling (at most
/// two edits away, case aside).
pub fn did_you_mean<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let key = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (edit_distance(&key, &k.to_ascii_lowercase()), *k))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// Every key of the config file, for error messages.
pub fn accepted_keys() -> String {
    let numbers: Vec<&str> = number_settings().map(|s| s.key).collect();
    format!(
        "{}, completionSignal, promptFile, completionMode, planFiles, verify (a list of {{name, command, \
         timeoutSeconds, network}}), confidence (statusBlockExit, signal, keyword, strongKeyword, planComplete, \
         testSaturation, threshold), maxCostUsd, resumePolicy, contextMode, iterationBudgetUsd, \
         pauseAtUtilization (0 to 1), notify (a command), \
         sandbox (auto, on or off), allowFewerTests (true or false), cleanRoom (true or false), protectedPaths (a list of globs), \
         queueRemote (the name of a git remote), worktreeSetup (a command, or {{command, timeoutSeconds}})",
        numbers.join(", ")
    )
}

/// What `resumePolicy` / `RALPH_RESUME_POLICY` accept.
const POLICIES: &str = "conservative, aggressive or manual";

/// What `maxCostUsd` / `RALPH_MAX_COST_USD` (and the launcher's
/// `--max-cost-usd`) accept.
pub fn cost_accepts() -> String {
    format!("a dollar amount above 0 and at most {MAX_COST_LIMIT_USD}, such as 5 or 12.50")
}

/// `dollars` as a loop's budget, when it is one ([`cost_accepts`]).
pub fn validate_cost(dollars: f64) -> Option<Usd> {
    (dollars.is_finite() && dollars > 0.0 && dollars <= MAX_COST_LIMIT_USD)
        .then(|| Usd::from_dollars(dollars))
}

/// What `allowFewerTests` / `RALPH_ALLOW_FEWER_TESTS` accept.
const BOOLEANS: &str = "true or false (also 1 or 0)";

/// Reads `true`/`false` (`1`/`0`), any case.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// What a `protectedPaths` entry may be.
const PROTECTED_ACCEPTS: &str = "a list of globs relative to the project (such as \"tests\" or \"src/**/*_test.go\"), none empty, none absolute, none with `..`";

/// Whether `glob` can be a `protectedPaths` entry.
fn valid_protected(glob: &str) -> bool {
    let glob = glob.trim();
    !glob.is_empty()
        && !glob.starts_with('/')
        && !glob.starts_with('\\')
        && !glob.contains(':')
        && !glob.split(['/', '\\']).any(|part| part == "..")
}

/// What `completionMode` / `RALPH_COMPLETION_MODE` accept.
const MODES: &str = "strict, dual or confidence";
/// Longest accepted verification timeout, in seconds.
pub const VERIFY_TIMEOUT_LIMIT: u32 = 3_600;

/// A whole-number setting: its config key, its env var, its range, and where it goes.
struct NumberSetting {
    key: &'static str,
    env: &'static str,
    min: u32,
    max: u32,
    target: Target,
}

/// Where a whole-number setting goes.
#[derive(Clone, Copy)]
enum Target {
    MaxIterations,
    Patience,
    CooldownMinutes,
    Threshold(Signal),
    MaxCallsPerHour,
    BackoffSeconds,
    MaxAutoResumes,
    MaxResumeWaitHours,
    ErrorBudget,
    GateBudget,
    IdleTimeout,
    MaxIterationsPerItem,
    ClaimTtl,
}

impl Target {
    fn apply(self, config: &mut Config, value: u32) {
        match self {
            Target::MaxIterations => config.max_iterations = value,
            Target::Patience => config.breaker.patience = value,
            Target::CooldownMinutes => config.cooldown_minutes = (value > 0).then_some(value),
            Target::Threshold(signal) => {
                config.breaker.thresholds.insert(signal, value);
            }
            Target::MaxCallsPerHour => {
                config.supervision.max_calls_per_hour = (value > 0).then_some(value);
            }
            Target::BackoffSeconds => config.supervision.backoff_seconds = value,
            Target::MaxAutoResumes => config.supervision.max_auto_resumes = value,
            Target::MaxResumeWaitHours => config.supervision.max_resume_wait_hours = value,
            Target::ErrorBudget => config.outcome_budgets.errors = value,
            Target::GateBudget => config.outcome_budgets.gate_blocked = value,
            Target::IdleTimeout => config.idle_timeout_seconds = (value > 0).then_some(value),
            Target::MaxIterationsPerItem => config.queue.max_iterations_per_item = value,
            Target::ClaimTtl => config.queue.claim_ttl_seconds = value,
        }
    }
}

/// The whole-number settings: the loop's own, then one per stall signal
/// (from `breaker::SIGNALS`), for the file and the environment alike.
fn number_settings() -> impl Iterator<Item = NumberSetting> {
    let own = [
        NumberSetting {
            key: "maxIterations",
            env: env::MAX_ITERATIONS,
            min: 1,
            max: MAX_ITERATIONS_LIMIT,
            target: Target::MaxIterations,
        },
        NumberSetting {
            key: "breakerPatience",
            env: env::PATIENCE,
            min: 1,
            max: THRESHOLD_LIMIT,
            target: Target::Patience,
        },
        NumberSetting {
            key: "cooldownMinutes",
            env: env::COOLDOWN_MINUTES,
            min: 0,
            max: 525_600,
            target: Target::CooldownMinutes,
        },
        NumberSetting {
            key: "maxCallsPerHour",
            env: env::MAX_CALLS_PER_HOUR,
            min: 0,
            max: 100_000,
            target: Target::MaxCallsPerHour,
        },
        NumberSetting {
            key: "resumeBackoffSeconds",
            env: env::RESUME_BACKOFF_SECONDS,
            min: 1,
            max: 86_400,
            target: Target::BackoffSeconds,
        },
        NumberSetting {
            key: "maxAutoResumes",
            env: env::MAX_AUTO_RESUMES,
            min: 0,
            max: 1_000,
            target: Target::MaxAutoResumes,
        },
        NumberSetting {
            key: "maxResumeWaitHours",
            env: env::MAX_RESUME_WAIT_HOURS,
            min: 1,
            max: 24 * 366,
            target: Target::MaxResumeWaitHours,
        },
        NumberSetting {
            key: "errorBudget",
            env: env::ERROR_BUDGET,
            min: 1,
            max: THRESHOLD_LIMIT,
            target: Target::ErrorBudget,
        },
        NumberSetting {
            key: "gateBudget",
            env: env::GATE_BUDGET,
            min: 1,
            max: THRESHOLD_LIMIT,
            target: Target::GateBudget,
        },
        NumberSetting {
            key: "idleTimeoutSeconds",
            env: env::IDLE_TIMEOUT_SECONDS,
            min: 0,
            max: 86_400,
            target: Target::IdleTimeout,
        },
        NumberSetting {
            key: "maxIterationsPerItem",
            env: env::MAX_ITERATIONS_PER_ITEM,
            min: 1,
            max: MAX_ITERATIONS_LIMIT,
            target: Target::MaxIterationsPerItem,
        },
        NumberSetting {
            key: "claimTtlSeconds",
            env: env::CLAIM_TTL_SECONDS,
            min: 2,
            max: 86_400,
            target: Target::ClaimTtl,
        },
    ];
    own.into_iter()
        .chain(SIGNALS.iter().map(|spec| NumberSetting {
            key: spec.config_key,
            env: spec.env_var,
            min: 1,
            max: spec.max,
            target: Target::Threshold(spec.signal),
        }))
}

/// A variable whose value is not UTF-8, with a lossy copy of it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{lossy:?} is not valid UTF-8")]
pub struct NotUtf8 {
    /// The value, its invalid bytes replaced.
    pub lossy: String,
}

/// A source of environment variables, so tests need not touch the process environment.
pub trait EnvSource {
    /// The variable's value; `Err` when it is not UTF-8.
    fn get(&self, name: &str) -> Option<Result<String, NotUtf8>>;

    /// The per-user config folder (`~/.config` on Linux), where the user's
    /// defaults file lives; `None` when there is none (and in tests).
    fn user_config_dir(&self) -> Option<PathBuf> {
        None
    }
}

/// The per-user defaults file inside the user's config folder: the same keys
/// as a project's config.json, below it.
pub const USER_CONFIG_FILE: &str = "ralph/config.json";

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<Result<String, NotUtf8>> {
        std::env::var_os(name).map(|v| {
            v.into_string().map_err(|v| NotUtf8 {
                lossy: v.to_string_lossy().into_owned(),
            })
        })
    }

    fn user_config_dir(&self) -> Option<PathBuf> {
        dirs::config_dir()
    }
}

impl<const N: usize> EnvSource for [(&str, &str); N] {
    fn get(&self, name: &str) -> Option<Result<String, NotUtf8>> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| Ok((*v).to_string()))
    }
}

fn accepts_range(min: u32, max: u32) -> String {
    format!("a whole number from {min} to {max}")
}

/// What a completion signal may be, for error messages.
pub fn signal_accepts() -> String {
    format!("a non-empty single line of at most {SIGNAL_MAX_CHARS} characters")
}

fn validate_range(raw: i64, min: u32, max: u32) -> Option<u32> {
    u32::try_from(raw).ok().filter(|v| (min..=max).contains(v))
}

/// The completion signal `raw` stands for (trimmed), if it can be one.
pub fn validate_signal(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    (!trimmed.is_empty()
        && !trimmed.contains(['\n', '\r'])
        && trimmed.chars().count() <= SIGNAL_MAX_CHARS)
        .then(|| trimmed.to_string())
}

/// The config files' texts, as read (`None`: no such file): what a loop
/// pins when it starts (see [`crate::pin`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileLayers {
    /// The per-user defaults file (`~/.config/ralph/config.json`).
    pub user: Option<String>,
    /// The project's `.claude/ralph/config.json`.
    pub project: Option<String>,
}

impl FileLayers {
    /// Reads both files (bounded; a FIFO or a device is never read whole).
    pub fn read(paths: &ProjectPaths, env: &dyn EnvSource) -> Result<FileLayers, ConfigError> {
        let user = match env.user_config_dir() {
            Some(dir) => read_config_text(&dir.join(USER_CONFIG_FILE))?,
            None => None,
        };
        Ok(FileLayers {
            user,
            project: read_config_text(&paths.config_file())?,
        })
    }
}

/// The text of the config file at `path`, `None` when there is none.
pub fn read_config_text(path: &Path) -> Result<Option<String>, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // A FIFO would block the read and a device such as /dev/zero never ends.
    let bytes = match read_bounded(path, MAX_CONFIG_BYTES).map_err(read_err)? {
        Bounded::Missing => return Ok(None),
        Bounded::TooLarge => {
            return Err(ConfigError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Bounded::Bytes(bytes) => bytes,
    };
    String::from_utf8(bytes).map(Some).map_err(|_| {
        read_err(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })
}

#[cfg(test)]
mod tests;
