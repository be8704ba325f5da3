//! The loop's persisted state (`ralph-state.json`), in camelCase JSON.
//!
//! The state is what makes a loop inspectable and resumable: which session
//! owns it, where it is, why it ended, and what each iteration looked like.

use serde::{Deserialize, Serialize};

use crate::judge::breaker::{Breaker, Transition};
use crate::judge::claims::StatusBlock;
use crate::judge::completion::{CompletionMode, Gate, GateResult};
use crate::observe::verify::VerifyResult;
use crate::time::Timestamp;

pub use crate::observe::liveness::Carriers;
pub use crate::observe::usage::{TranscriptCursor, WindowUse};
pub use runs::{FormulaRun, GateRun, ItemState, NoSuchStep, QueueItem, QueueRun, StepRun};

mod runs;
use crate::units::{TokenUsage, Usd};

/// The version of the state file's shape that this build writes. A state
/// without `schemaVersion` is version 1 and is migrated when read; a newer
/// one is refused rather than misread.
pub const SCHEMA_VERSION: u32 = 3;

/// How many per-iteration records the state keeps; older ones are dropped.
pub const HISTORY_LIMIT: usize = 50;
/// The calls-per-hour window, in seconds.
pub const CALL_WINDOW_SECS: u64 = 3_600;
/// Longest excerpt of the agent's message kept in a history record, in characters.
pub const EXCERPT_CHARS: usize = 200;

/// Where a loop is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Iterating: the hook blocks stops of the owning session.
    Running,
    /// The agent signalled completion.
    Complete,
    /// The iteration cap was reached.
    MaxIterations,
    /// The circuit breaker stopped a stalled loop.
    CircuitOpen,
    /// The client exited while the loop was still running (crash, Ctrl-C, the client's own block cap).
    Interrupted,
    /// Waiting: an API error ended the client's turn, or the calls-per-hour
    /// budget is spent until `pausedBecause.resumeAt`. Resumable.
    Paused,
    /// The API refused the loop for a reason waiting cannot fix
    /// (authentication, billing, an invalid request, an unknown model).
    Failed,
    /// The loop's cost budget (`maxCostUsd`) is spent.
    BudgetExhausted,
    /// The agent said it cannot go on without the person (`RALPH_ABORT:
    /// <reason>`, or a status block saying `STATUS: BLOCKED`): never
    /// resumed on its own.
    Blocked,
    /// `errorBudget` `RALPH_OUTCOME` errors in a row.
    ErrorBudgetExhausted,
    /// `gateBudget` `RALPH_OUTCOME` gate-blocked items in a row.
    GateBudgetExhausted,
    /// A formula step's gate failed more times than its `retries`.
    GateFailed,
    /// The person ended the loop (`/cancel-ralph`, `ralph-ctl cancel`).
    Cancelled,
    /// The agent asked the person a question (`RALPH_ASK: <question>`) and
    /// the loop waits for `ralph-ctl answer`: resumable, not an ending.
    Waiting,
}

impl Status {
    /// The name used in the state file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Complete => "complete",
            Status::MaxIterations => "max_iterations",
            Status::CircuitOpen => "circuit_open",
            Status::Interrupted => "interrupted",
            Status::Paused => "paused",
            Status::Failed => "failed",
            Status::BudgetExhausted => "budget_exhausted",
            Status::Blocked => "blocked",
            Status::ErrorBudgetExhausted => "error_budget_exhausted",
            Status::GateBudgetExhausted => "gate_budget_exhausted",
            Status::GateFailed => "gate_failed",
            Status::Cancelled => "cancelled",
            Status::Waiting => "waiting",
        }
    }

    /// True while the loop is not over: running, paused, or waiting for
    /// the person's answer. Its session's stops are its own, and the
    /// person may still steer it (`say`, `reload`, `cancel`).
    pub fn is_live(self) -> bool {
        matches!(self, Status::Running | Status::Paused | Status::Waiting)
    }

    /// True for a loop that may be taken up again in the same session
    /// (`ralph-ctl run --resume`): paused, interrupted, failed or out of
    /// budget (once the cause is fixed), or still running when its driver
    /// went away. A loop that completed, hit its cap or opened the breaker
    /// is done: a new one needs a reset.
    pub fn is_resumable(self) -> bool {
        !matches!(
            self,
            Status::Complete
                | Status::MaxIterations
                | Status::CircuitOpen
                | Status::ErrorBudgetExhausted
                | Status::GateBudgetExhausted
                | Status::GateFailed
                | Status::Cancelled
        )
    }
}

/// What kind of trouble paused a loop. The API errors are the ones Claude
/// Code names in its `StopFailure` hook input (`error`), or derives from
/// the HTTP status of the last failed request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseKind {
    /// HTTP 429: the API's rate limit or the plan's usage limit.
    RateLimit,
    /// HTTP 529: the API is overloaded.
    Overloaded,
    /// HTTP 5xx.
    ServerError,
    /// No answer from the API at all.
    Network,
    /// The client ended without a result (crashed, or was killed from outside).
    ClientExit,
    /// The model's answer hit its output limit.
    MaxOutputTokens,
    /// The loop's own calls-per-hour budget (`maxCallsPerHour`) is spent.
    CallsPerHour,
    /// A usage window of the plan reached `pauseAtUtilization`: the loop
    /// waits for the window to reset, keeping the rest for the person.
    Utilization,
    /// HTTP 401/403: the key or login is not accepted.
    AuthenticationFailed,
    /// HTTP 402 or a billing error: no credit.
    BillingError,
    /// HTTP 400/413/422: the request itself is wrong.
    InvalidRequest,
    /// HTTP 404: the model does not exist.
    ModelNotFound,
    /// The organisation, verification or cloud credentials refused the session.
    AccessDenied,
    /// An error the client did not classify.
    Unknown,
}

impl PauseKind {
    /// Reads the client's `StopFailure` `error` value.
    pub fn from_client_error(error: &str) -> PauseKind {
        match error {
            "rate_limit" => PauseKind::RateLimit,
            "overloaded" => PauseKind::Overloaded,
            "server_error" => PauseKind::ServerError,
            "max_output_tokens" => PauseKind::MaxOutputTokens,
            "authentication_failed" => PauseKind::AuthenticationFailed,
            "billing_error" => PauseKind::BillingError,
            "invalid_request" => PauseKind::InvalidRequest,
            "model_not_found" => PauseKind::ModelNotFound,
            "oauth_org_not_allowed" | "verification_required" | "cloud_credential_error" => {
                PauseKind::AccessDenied
            }
            "network" | "connection_error" | "timeout" => PauseKind::Network,
            _ => PauseKind::Unknown,
        }
    }

    /// Reads the HTTP status of a failed request (`api_error_status`).
    pub fn from_http_status(status: u16) -> PauseKind {
        match status {
            429 => PauseKind::RateLimit,
            529 => PauseKind::Overloaded,
            401 | 403 => PauseKind::AuthenticationFailed,
            402 => PauseKind::BillingError,
            404 => PauseKind::ModelNotFound,
            400 | 413 | 422 => PauseKind::InvalidRequest,
            500..=599 => PauseKind::ServerError,
            _ => PauseKind::Unknown,
        }
    }

    /// True when waiting can fix it; false when a person must act.
    pub fn is_transient(self) -> bool {
        !matches!(
            self,
            PauseKind::AuthenticationFailed
                | PauseKind::BillingError
                | PauseKind::InvalidRequest
                | PauseKind::ModelNotFound
                | PauseKind::AccessDenied
        )
    }

    /// The name used in the state file and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::RateLimit => "rate_limit",
            PauseKind::Overloaded => "overloaded",
            PauseKind::ServerError => "server_error",
            PauseKind::Network => "network",
            PauseKind::ClientExit => "client_exit",
            PauseKind::MaxOutputTokens => "max_output_tokens",
            PauseKind::CallsPerHour => "calls_per_hour",
            PauseKind::Utilization => "utilization",
            PauseKind::AuthenticationFailed => "authentication_failed",
            PauseKind::BillingError => "billing_error",
            PauseKind::InvalidRequest => "invalid_request",
            PauseKind::ModelNotFound => "model_not_found",
            PauseKind::AccessDenied => "access_denied",
            PauseKind::Unknown => "unknown",
        }
    }

    /// What a person does about a permanent error.
    pub fn fix(self) -> &'static str {
        match self {
            PauseKind::AuthenticationFailed => {
                "check ANTHROPIC_API_KEY or log in again (`claude /login`)"
            }
            PauseKind::BillingError => "add credit or raise the spending limit of the account",
            PauseKind::InvalidRequest => {
                "check the client arguments given after `--` and the prompt's size"
            }
            PauseKind::ModelNotFound => "pick a model the account can use (`--model`)",
            PauseKind::AccessDenied => "check the account's organisation and credentials",
            _ => "run `ralph-ctl run --resume` to go on",
        }
    }
}

/// Why the loop is paused, or why it failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PausedBecause {
    /// What kind of trouble.
    pub kind: PauseKind,
    /// The HTTP status of the failed request, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// What the API or the client said, one line.
    pub message: String,
    /// Not before this time (RFC 3339): the API's reset time, or when the
    /// calls-per-hour window frees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_at: Option<Timestamp>,
    /// The wait the API asked for before a retry (its `retry-after`, as the
    /// client's last retry line gives it), in seconds from [`Self::at`]:
    /// the loop resumes no sooner, whatever its own backoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
    /// When the supervisor, having waited for no reset time, decided to
    /// resume it: what `status` and the log's `wait` line both give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_planned: Option<Timestamp>,
    /// When the pause was recorded.
    pub at: Timestamp,
}

/// The model requests made in one minute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallBucket {
    /// The minute's start, seconds since the epoch.
    pub minute: u64,
    /// Requests made in it.
    pub calls: u32,
}

/// True while requests of the minute starting at `minute` count in the
/// hour before `now`.
fn in_window(minute: u64, now: u64) -> bool {
    minute + 60 + CALL_WINDOW_SECS > now
}

/// What the hook did at one stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopDecision {
    /// The stop was blocked and the prompt fed back.
    Block,
    /// The stop was let through.
    Allow,
}

/// One stop of the owning session, as recorded in the history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IterationRecord {
    /// The iteration that this stop ended.
    pub iteration: u32,
    /// When the stop was handled.
    pub at: Timestamp,
    /// Block or allow.
    pub decision: StopDecision,
    /// Why, in words a person reads in `ralph-ctl status`.
    pub why: String,
    /// The first characters of the agent's last message.
    #[serde(default)]
    pub excerpt: String,
    /// The client's `stop_hook_active` flag, recorded and never obeyed.
    #[serde(default)]
    pub stop_hook_active: bool,
    /// The findings count the message reported, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub findings: Option<u64>,
    /// Where the message came from: `input` (`last_assistant_message`),
    /// `transcript`, `transcript_behind` (the transcript never showed it) or `none`.
    #[serde(default)]
    pub message_source: MessageSource,
    /// How many tool calls the iteration made.
    #[serde(default)]
    pub tool_calls: usize,
    /// The error the iteration ended on, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The circuit breaker transition this stop caused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breaker: Option<Transition>,
    /// Every field of the message's `RALPH_STATUS` block, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_block: Option<StatusBlock>,
    /// The completion claim this stop judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimOutcome>,
    /// How the stop judged whether the project changed (the iteration's
    /// file-tool edits, git, a scan, or nothing usable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<crate::observe::progress::Method>,
    /// Model requests made since the previous stop.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub calls: u32,
    /// Their token usage.
    #[serde(default, skip_serializing_if = "TokenUsage::is_zero")]
    pub usage: TokenUsage,
    /// True when the client had not written the iteration's tool results
    /// by the end of the hook's wait: `toolCalls` and `error` may miss some
    /// (seen on 2.1.330 under load, the lines written only after the hook).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tools_incomplete: bool,
    /// The iteration's `RALPH_OUTCOME` status, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<crate::judge::claims::OutcomeStatus>,
    /// The work item its `RALPH_OUTCOME` named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
}

impl IterationRecord {
    /// A stop of `iteration` at `at`, decided `decision` for `why`, with
    /// nothing else observed: no message (`excerpt` empty, source
    /// [`MessageSource::Missing`]), no tool calls, requests, findings,
    /// error, claim or breaker transition. Set what a stop did see with
    /// struct update syntax (`IterationRecord { excerpt, ..IterationRecord::new(..) }`).
    pub fn new(iteration: u32, at: Timestamp, decision: StopDecision, why: String) -> Self {
        IterationRecord {
            iteration,
            at,
            decision,
            why,
            excerpt: String::new(),
            stop_hook_active: false,
            findings: None,
            message_source: MessageSource::Missing,
            tool_calls: 0,
            error: None,
            breaker: None,
            status_block: None,
            claim: None,
            progress: None,
            calls: 0,
            usage: TokenUsage::default(),
            tools_incomplete: false,
            outcome: None,
            item_id: None,
        }
    }
}

// serde's `skip_serializing_if` passes the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_false(b: &bool) -> bool {
    !*b
}

// serde's `skip_serializing_if` passes the field by reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// How one stop judged a completion claim.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimOutcome {
    /// True when every gate passed.
    pub accepted: bool,
    /// What made the claim (signal form, status block, score).
    pub basis: String,
    /// The gates that failed, in order.
    #[serde(default)]
    pub failed_gates: Vec<Gate>,
}

impl std::fmt::Display for ClaimOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The basis is what made it a claim, not what a gate judged.
        if self.accepted {
            write!(f, "accepted; claimed by {}", self.basis)
        } else {
            let gates: Vec<&str> = self.failed_gates.iter().map(|g| g.as_str()).collect();
            write!(
                f,
                "rejected by the {} gate(s); claimed by {}",
                gates.join(", "),
                self.basis
            )
        }
    }
}

/// The last completion claim and how its gates judged it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRecord {
    /// The iteration whose final message made the claim.
    pub iteration: u32,
    /// When it was judged.
    pub at: Timestamp,
    /// The completion mode in force.
    pub mode: CompletionMode,
    /// What made the claim (signal form, status block, score).
    pub basis: String,
    /// The confidence score, in confidence mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<u32>,
    /// True when every gate passed and the loop completed.
    pub accepted: bool,
    /// Each gate's result.
    pub gates: Vec<GateResult>,
    /// What each verification command did.
    #[serde(default)]
    pub verification: Vec<VerifyResult>,
}

/// The whole state file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopState {
    /// The shape of this record ([`SCHEMA_VERSION`] when written by this build).
    #[serde(default = "legacy_schema")]
    pub schema_version: u32,
    /// Where the loop is.
    pub status: Status,
    /// The iteration in progress (1-based), or the last one when the loop has ended.
    pub iteration: u32,
    /// The iteration cap, fixed when the loop starts.
    pub max_iterations: u32,
    /// The Claude Code session that owns the loop; stops of other sessions are let through.
    pub session_id: String,
    /// When `ralph-ctl start` created the loop.
    pub started_at: Timestamp,
    /// When the hook last handled a stop of this loop.
    #[serde(default)]
    pub last_run_at: Option<Timestamp>,
    /// When the loop ended, once it has.
    #[serde(default)]
    pub ended_at: Option<Timestamp>,
    /// Why the loop ended, in words.
    #[serde(default)]
    pub ended_because: Option<String>,
    /// The findings count from the latest `RALPH_ITERATION_COMPLETE: N findings remain`.
    #[serde(default)]
    pub last_findings_count: Option<u64>,
    /// The circuit breaker: its state, signal counters and last transition.
    #[serde(default)]
    pub breaker: Breaker,
    /// The last completion claim and its gates.
    #[serde(default)]
    pub last_claim: Option<ClaimRecord>,
    /// Consecutive iterations that only ran tests.
    #[serde(default)]
    pub test_only_iterations: u32,
    /// Recent iterations whose final message carried a completion indication (for the dual mode).
    #[serde(default)]
    pub completion_indications: Vec<u32>,
    /// The most recent stops, oldest first, at most [`HISTORY_LIMIT`].
    #[serde(default)]
    pub history: Vec<IterationRecord>,
    /// Why the loop is paused (or failed), while it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_because: Option<PausedBecause>,
    /// What the loop has cost so far, by the client's own accounting.
    #[serde(default)]
    pub cost_usd: Usd,
    /// What the tokens counted since the client last reported its cost
    /// come to at list prices (`units::PRICES`): the part of the live cost
    /// the client has not reported yet (it does in its `result`, which a
    /// cancelled or killed client never writes). See [`LoopState::cost_so_far`].
    #[serde(default, skip_serializing_if = "Usd::is_zero")]
    pub uncharged_usd: Usd,
    /// Tokens used so far, from the transcript.
    #[serde(default)]
    pub usage: TokenUsage,
    /// The model requests of the last hour, per minute.
    #[serde(default)]
    pub recent_calls: Vec<CallBucket>,
    /// Resumes the supervisor made on its own.
    #[serde(default)]
    pub auto_resumes: u32,
    /// Where the usage reading of the transcript stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<TranscriptCursor>,
    /// The processes carrying a loop that `ralph-ctl run` drives; none for
    /// a loop started by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carriers: Option<Carriers>,
    /// Each iteration runs in a client process and session of its own
    /// (`contextMode: fresh`); `sessionId` is the current iteration's.
    #[serde(default, skip_serializing_if = "is_false")]
    pub fresh_context: bool,
    /// `RALPH_OUTCOME` errors in a row, up to this stop.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub outcome_errors: u32,
    /// `RALPH_OUTCOME` gate-blocked items in a row, up to this stop.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub outcome_gate_blocked: u32,
    /// The formula this loop runs (`ralph-ctl run --formula`), and where
    /// each of its steps stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<FormulaRun>,
    /// The backlog this loop drains (`ralph-ctl run --queue`): each item's
    /// record; the items themselves run as loops of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueRun>,
    /// The backlog item this loop works (a loop of a queue run, in the
    /// item's own folder): the run, not the item, tells the person.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_item: Option<String>,
    /// The loop's own task, fed back in place of PROMPT.md (a loop started
    /// by `/ralph-loop TASK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// The loop's own completion signal, in place of the config's
    /// (`/ralph-loop --completion-promise TEXT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_signal: Option<String>,
    /// The person's note for the next iteration (`ralph-ctl say`): put in
    /// front of its text once, then dropped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The agent's question while the loop waits for the person's answer
    /// (`RALPH_ASK`, status `waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
    /// Each usage window of the plan as the client last reported it (a
    /// subscription's headless runs), by the client's name for it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub usage_windows: std::collections::BTreeMap<String, WindowUse>,
    /// The ending or pause the `notify` command was last run for (status
    /// and time), so that it runs once for each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified: Option<String>,
    /// Each verification command's test counts, run once before the first
    /// iteration (a command whose output no runner's summary was read from
    /// has none): a claim may not run fewer tests or skip more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub test_baseline: Vec<crate::observe::test_counts::CommandCounts>,
    /// The verification commands that failed at that same baseline: a
    /// claim that fails one of them is told the failure was there before
    /// its work.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub baseline_failures: Vec<crate::observe::verify::BaselineFailure>,
    /// The commit of the worktree the test baseline was measured in (a
    /// `--worktree` iteration's or a queue item's, after `worktreeSetup`);
    /// `None`: the main checkout, at the loop's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_commit: Option<String>,
    /// The files under `protectedPaths` at the start, with their content
    /// hashes: a claim that changed one is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protected_files: Option<crate::observe::protected::ProtectedSnapshot>,
    /// What each verify command resolved to at the start (the programs,
    /// the modules, scripts and makefiles they run): a claim whose check
    /// resolves differently is rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_resolution: Option<crate::observe::resolved::ResolvedChecks>,
    /// The files in `.git` that send git elsewhere (`commondir`, `gitdir`,
    /// `config.worktree`, alternates, grafts, `shallow`), as the start
    /// found them: a claim made while one differs is rejected, and the
    /// loop's end puts them back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_record: Option<crate::own_git::record::GitRecord>,
    /// What decides this loop, fixed when it started (the config files'
    /// texts, a formula run's formula); `None` in a state written before
    /// pinning, which its next stop pins (the pin module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned: Option<Pinned>,
    /// Pinned files that now differ from the pin (not obeyed; `ralph-ctl
    /// reload` adopts them), as the last stop found them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_drift: Option<ConfigDrift>,
    /// How `ralph-ctl run` ran the loop (headless, the sandbox asked for):
    /// `run --resume` goes on the same way unless told otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_mode: Option<RunMode>,
}

/// How `ralph-ctl run` ran a loop, beyond what the state says otherwise
/// (fresh context, a formula, a queue): what `run --resume` takes up when
/// its command line does not say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunMode {
    /// `--headless`: the client ran as `claude -p`, with no terminal.
    #[serde(default, skip_serializing_if = "is_false")]
    pub headless: bool,
    /// `--sandbox` (true) or `--no-sandbox` (false); `None`: the config's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<bool>,
    /// `--workers N` of a queue run's first process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// `--worktree`: each fresh iteration on a branch of its own.
    #[serde(default, skip_serializing_if = "is_false")]
    pub worktree: bool,
    /// The client ran in its own sandbox (as decided at the start, the
    /// machine's support and the setting together): the advice on a
    /// refused call fits that mode.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sandboxed: bool,
}

impl RunMode {
    /// The `--sandbox` or `--no-sandbox` the loop was run with, if either.
    pub fn sandbox_flag(&self) -> Option<&'static str> {
        if self.sandbox? {
            Some("--sandbox")
        } else {
            Some("--no-sandbox")
        }
    }
}

/// A question the agent asked the person (`RALPH_ASK: <question>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// The question, as the agent wrote it.
    pub text: String,
    /// The iteration that asked it.
    pub iteration: u32,
    /// When.
    pub at: Timestamp,
}

/// Where the agent's last message was found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageSource {
    /// The hook input's `last_assistant_message`.
    Input,
    /// The iteration's final assistant message in the transcript.
    Transcript,
    /// Neither held any text (for example the turn ended on a tool call only).
    #[default]
    #[serde(rename = "none")]
    Missing,
    /// The input had no message and the transcript did not show the stop's
    /// final message within [`crate::observe::transcript::CATCH_UP_WAIT`].
    TranscriptBehind,
}

impl MessageSource {
    /// The name recorded in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageSource::Input => "input",
            MessageSource::Transcript => "transcript",
            MessageSource::Missing => "none",
            MessageSource::TranscriptBehind => "transcript_behind",
        }
    }
}

/// What a loop decides by, recorded when it starts (`pinned` in the state).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pinned {
    /// The digest of the config files' texts (`pin::layers_digest`).
    pub config_digest: String,
    /// `.claude/ralph/config.json`'s exact text (`None`: there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// The per-user defaults file's exact text (`None`: there was none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_config: Option<String>,
    /// The formula a formula run runs, as read when it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula: Option<PinnedFormula>,
    /// When this pin was taken (the start, or the last `ralph-ctl reload`).
    #[serde(default)]
    pub at: Timestamp,
}

/// A formula, pinned: its content as the run uses it (every step's id,
/// model, prompt with a `promptFile`'s text read in, cap, autofix and
/// gates), so neither the formula's file nor its prompt files can change
/// a running formula.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedFormula {
    /// The formula's name.
    pub name: String,
    /// Its file, relative to the project's root.
    pub file: String,
    /// The digest of `content`'s JSON text.
    pub digest: String,
    /// The checked formula, as `ralph-ctl` reads it.
    pub content: serde_json::Value,
}

/// The drift of a loop's pinned files (`configDrift` in the state): what
/// differs from the pin, first seen when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigDrift {
    /// The digest of every differing file's content now.
    pub digest: String,
    /// When this content was first seen.
    pub seen_at: Timestamp,
    /// The files that differ.
    pub files: Vec<Changed>,
}

/// A pinned file whose content now differs from its pin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Changed {
    /// The file, relative to the project's root when inside it.
    pub file: String,
    /// The digest of its content now (`missing`, `unreadable`).
    pub digest: String,
    /// Why its content now could not be used, when it could not (it does
    /// not parse, a key is out of range): shown, never fatal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

fn legacy_schema() -> u32 {
    1
}

/// Why a state file's bytes are no state this ralph reads
/// ([`LoopState::from_json`]), in the words of the "corrupt" message.
#[derive(Debug, thiserror::Error)]
pub enum StateJsonError {
    /// Not JSON at all.
    #[error("{0}")]
    NotJson(#[source] serde_json::Error),
    /// JSON, but no object a state could be.
    #[error("it holds JSON, but not a ralph state object")]
    NotAState,
    /// `schemaVersion` is there, and no whole number.
    #[error("schemaVersion is not a whole number")]
    VersionNotWhole,
    /// Written by a newer ralph.
    #[error(
        "it was written by a newer ralph (state schema {version}, this one reads up to \
         {}); upgrade ralph",
        SCHEMA_VERSION
    )]
    Newer {
        /// The schema it says.
        version: u64,
    },
    /// A state's fields, not as this schema has them.
    #[error("{0}")]
    Shape(#[source] serde_json::Error),
}

impl LoopState {
    /// What the loop has cost so far: the client's own count, plus the
    /// tokens it has not reported yet at list prices. Written
    /// `~$0.0036 (estimated from tokens)` while any part is estimated.
    pub fn cost_so_far(&self) -> String {
        let total = self.cost_usd.plus(self.uncharged_usd);
        if self.uncharged_usd.is_zero() {
            total.to_string()
        } else {
            format!("~{total} (estimated from tokens)")
        }
    }

    /// True when the loop has cost anything, reported or estimated.
    pub fn cost_known(&self) -> bool {
        !self.cost_usd.plus(self.uncharged_usd).is_zero()
    }

    /// Reads a state file's bytes: migrates an older shape, refuses a newer
    /// one; the error says why, for the "corrupt" message.
    pub fn from_json(bytes: &[u8]) -> Result<LoopState, StateJsonError> {
        /// Only the version, the rest skipped unbuilt: the state is read
        /// on every stop, so it is parsed into a tree only to migrate it.
        #[derive(Deserialize)]
        struct Version {
            #[serde(rename = "schemaVersion")]
            schema_version: Option<serde_json::Value>,
        }
        let version = match serde_json::from_slice::<Version>(bytes) {
            Ok(probe) => probe.schema_version,
            Err(e) => {
                return Err(match serde_json::from_slice::<serde_json::Value>(bytes) {
                    Ok(_) => StateJsonError::NotAState,
                    Err(_) => StateJsonError::NotJson(e),
                });
            }
        };
        let version = version
            .map(|v| v.as_u64().ok_or(StateJsonError::VersionNotWhole))
            .transpose()?
            .unwrap_or(1);
        if version > u64::from(SCHEMA_VERSION) {
            return Err(StateJsonError::Newer { version });
        }
        let mut state: LoopState = if version < 2 {
            let mut value: serde_json::Value =
                serde_json::from_slice(bytes).map_err(StateJsonError::Shape)?;
            migrate_v1(&mut value);
            serde_json::from_value(value).map_err(StateJsonError::Shape)?
        } else {
            serde_json::from_slice(bytes).map_err(StateJsonError::Shape)?
        };
        state.schema_version = SCHEMA_VERSION;
        Ok(state)
    }

    /// A fresh running loop at iteration 1.
    pub fn new(session_id: String, max_iterations: u32, now: Timestamp) -> Self {
        LoopState {
            schema_version: SCHEMA_VERSION,
            status: Status::Running,
            iteration: 1,
            max_iterations,
            session_id,
            started_at: now,
            last_run_at: None,
            ended_at: None,
            ended_because: None,
            last_findings_count: None,
            breaker: Breaker::default(),
            last_claim: None,
            test_only_iterations: 0,
            completion_indications: Vec::new(),
            history: Vec::new(),
            paused_because: None,
            cost_usd: Usd::default(),
            uncharged_usd: Usd::default(),
            usage: TokenUsage::default(),
            recent_calls: Vec::new(),
            auto_resumes: 0,
            transcript: None,
            carriers: None,
            fresh_context: false,
            formula: None,
            queue: None,
            queue_item: None,
            task: None,
            completion_signal: None,
            hint: None,
            question: None,
            usage_windows: Default::default(),
            notified: None,
            test_baseline: Vec::new(),
            baseline_failures: Vec::new(),
            baseline_commit: None,
            protected_files: None,
            check_resolution: None,
            git_record: None,
            pinned: None,
            config_drift: None,
            run_mode: None,
            outcome_errors: 0,
            outcome_gate_blocked: 0,
        }
    }

    /// Appends a record, dropping the oldest ones beyond [`HISTORY_LIMIT`].
    pub fn push_history(&mut self, record: IterationRecord) {
        self.history.push(record);
        if self.history.len() > HISTORY_LIMIT {
            let excess = self.history.len() - HISTORY_LIMIT;
            self.history.drain(..excess);
        }
    }

    /// Ends the loop with `status`, recording when and why.
    pub fn end(&mut self, status: Status, because: String, now: Timestamp) {
        self.status = status;
        self.ended_at = Some(now);
        self.ended_because = Some(because);
    }

    /// Pauses the loop (it keeps its session, iteration and counters).
    pub fn pause(&mut self, because: PausedBecause) {
        self.status = Status::Paused;
        self.ended_at = None;
        self.ended_because = None;
        self.paused_because = Some(because);
    }

    /// Takes a paused, waiting or interrupted loop up again, where it was.
    pub fn resume(&mut self) {
        self.status = Status::Running;
        self.ended_at = None;
        self.ended_because = None;
        self.paused_because = None;
        self.question = None;
    }

    /// The loop waits for the person's answer to `question`, asked in the
    /// iteration that just ended.
    pub fn wait_for_answer(&mut self, question: Question) {
        self.status = Status::Waiting;
        self.ended_at = None;
        self.ended_because = None;
        self.paused_because = None;
        self.question = Some(question);
    }

    /// Whether the person answered the agent's question and the answer has
    /// not been sent yet: the loop runs, its question still recorded.
    pub fn answered(&self) -> bool {
        self.status == Status::Running && self.question.is_some()
    }

    /// The usage windows whose reset is still to come after `now`, with
    /// their names: a window that has reset (or whose reset is unknown)
    /// says nothing of the use to come.
    pub fn windows_to_come(&self, now: Timestamp) -> impl Iterator<Item = (&str, &WindowUse)> {
        self.usage_windows
            .iter()
            .filter(move |(_, w)| w.resets_at.is_some_and(|r| r > now))
            .map(|(name, w)| (name.as_str(), w))
    }

    /// The window most used of those still to reset ([`Self::windows_to_come`]).
    pub fn fullest_window(&self, now: Timestamp) -> Option<(&str, &WindowUse)> {
        self.windows_to_come(now).max_by_key(|(_, w)| w.utilization)
    }

    /// Adds the model requests made at `times` (seconds since the epoch) and
    /// forgets those older than an hour before `now`. Requests are counted
    /// per minute, so the state stays small however many there are.
    pub fn record_calls(&mut self, times: &[u64], now: u64) {
        for &t in times {
            let minute = t - t % 60;
            match self.recent_calls.iter_mut().find(|b| b.minute == minute) {
                Some(bucket) => bucket.calls = bucket.calls.saturating_add(1),
                None => self.recent_calls.push(CallBucket { minute, calls: 1 }),
            }
        }
        self.recent_calls.sort_unstable_by_key(|b| b.minute);
        self.recent_calls.retain(|b| in_window(b.minute, now));
    }

    /// Model requests in the hour before `now` (by whole minutes).
    pub fn calls_in_last_hour(&self, now: u64) -> u64 {
        self.recent_calls
            .iter()
            .filter(|b| in_window(b.minute, now))
            .map(|b| u64::from(b.calls))
            .sum()
    }

    /// When the hour's requests fall below `cap` again (seconds since the
    /// epoch), or `None` when they already are.
    pub fn calls_free_at(&self, cap: u32, now: u64) -> Option<u64> {
        let mut count = self.calls_in_last_hour(now);
        if count < u64::from(cap) {
            return None;
        }
        for bucket in self
            .recent_calls
            .iter()
            .filter(|b| in_window(b.minute, now))
        {
            count -= u64::from(bucket.calls);
            if count < u64::from(cap) {
                return Some(bucket.minute + 60 + CALL_WINDOW_SECS);
            }
        }
        Some(now + CALL_WINDOW_SECS)
    }
}

/// Version 1 kept a history record's breaker transition and claim as text
/// (`closed → half_open: why`, `accepted: basis`, `rejected by the plan,
/// verification gate(s): basis`); version 2 keeps them typed.
fn migrate_v1(state: &mut serde_json::Value) {
    use serde_json::{Value, json};
    let Some(history) = state.get_mut("history").and_then(Value::as_array_mut) else {
        return;
    };
    for record in history {
        let Some(record) = record.as_object_mut() else {
            continue;
        };
        if let Some(Value::String(text)) = record.get("breaker").cloned() {
            let parsed = text.split_once(": ").and_then(|(arrow, reason)| {
                let (from, to) = arrow.split_once(" → ")?;
                Some(json!({
                    "iteration": record.get("iteration").cloned().unwrap_or(json!(0)),
                    "at": record.get("at").cloned().unwrap_or(json!("")),
                    "from": from, "to": to, "reason": reason,
                }))
            });
            record.insert("breaker".into(), parsed.unwrap_or(Value::Null));
        }
        if let Some(Value::String(text)) = record.get("claim").cloned() {
            let parsed = if let Some(basis) = text.strip_prefix("accepted: ") {
                Some(json!({"accepted": true, "basis": basis, "failedGates": []}))
            } else {
                text.strip_prefix("rejected by the ")
                    .and_then(|rest| rest.split_once(" gate(s): "))
                    .map(|(gates, basis)| {
                        let gates: Vec<&str> = gates.split(", ").collect();
                        json!({"accepted": false, "basis": basis, "failedGates": gates})
                    })
            };
            record.insert("claim".into(), parsed.unwrap_or(Value::Null));
        }
    }
}

/// The first [`EXCERPT_CHARS`] characters of a message, on one line.
pub fn excerpt(message: &str) -> String {
    one_line(message, EXCERPT_CHARS)
}

/// `text` on one line (white space runs made one space), at most `max`
/// characters, with `…` when it was cut.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = flat.chars().take(max).collect();
    if flat.chars().count() > max {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_restarted_at_a_step_skips_the_earlier_and_resets_the_later() {
        let gate = GateRun {
            name: "tests".into(),
            retries: 2,
            failures: 2,
            passed: Some(false),
        };
        let step = |id: &str, done: bool| StepRun {
            id: id.into(),
            iterations: 3,
            completed_at: done.then(|| Timestamp::from_secs(1)),
            gates: vec![gate.clone()],
            ..StepRun::default()
        };
        let mut run = FormulaRun {
            name: "feature".into(),
            step: 2,
            steps: vec![
                step("plan", true),
                step("implement", false),
                step("test", true),
            ],
        };
        run.restart_at("test").unwrap();
        assert_eq!(run.step, 2);
        assert_eq!(
            run.steps.iter().map(|s| s.skipped).collect::<Vec<_>>(),
            [false, true, false],
            "a completed step is not skipped"
        );
        let test = &run.steps[2];
        assert_eq!((test.completed_at, test.iterations), (None, 3));
        assert_eq!((test.gates[0].failures, test.gates[0].passed), (0, None));
        run.restart_at("plan").unwrap();
        assert!(
            run.steps
                .iter()
                .all(|s| !s.skipped && s.completed_at.is_none())
        );
        let err = run.restart_at("deploy").unwrap_err().to_string();
        assert!(err.contains("its steps are plan, implement, test"), "{err}");
    }

    #[test]
    fn round_trips_in_camel_case() {
        let mut s = LoopState::new("abc".into(), 5, Timestamp::from_secs(1767225600));
        s.last_findings_count = Some(3);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["status"], "running");
        assert_eq!(json["maxIterations"], 5);
        assert_eq!(json["sessionId"], "abc");
        assert_eq!(json["lastFindingsCount"], 3);
        assert_eq!(serde_json::from_value::<LoopState>(json).unwrap(), s);
    }

    #[test]
    fn a_version_1_state_is_migrated_and_a_newer_one_refused() {
        let v1 = br#"{"status":"running","iteration":3,"maxIterations":5,"sessionId":"s","startedAt":"2026-01-01T00:00:00Z",
            "history":[{"iteration":1,"at":"2026-01-01T00:00:01Z","decision":"block","why":"w","messageSource":"input",
                        "breaker":"closed \u2192 half_open: no file changed in 3 iterations",
                        "claim":"rejected by the plan, verification gate(s): the completion signal on a line of its own"},
                       {"iteration":2,"at":"2026-01-01T00:00:02Z","decision":"block","why":"w","messageSource":"transcript",
                        "claim":"accepted: status block"}],
            "breaker":{"counters":{"noProgress":2,"sameError":0,"findingsStuck":0,"outputDecline":0,"tddStuck":0}}}"#;
        let state = LoopState::from_json(v1).unwrap();
        assert_eq!(state.schema_version, SCHEMA_VERSION);
        let first = &state.history[0];
        assert_eq!(first.message_source, MessageSource::Input);
        let t = first.breaker.as_ref().unwrap();
        assert_eq!(t.to, crate::judge::breaker::BreakerState::HalfOpen);
        assert_eq!(t.reason, "no file changed in 3 iterations");
        let claim = first.claim.as_ref().unwrap();
        assert!(!claim.accepted);
        assert_eq!(claim.failed_gates, vec![Gate::Plan, Gate::Verification]);
        assert_eq!(
            claim.to_string(),
            "rejected by the plan, verification gate(s); claimed by the completion signal on a \
             line of its own"
        );
        assert!(state.history[1].claim.as_ref().unwrap().accepted);
        assert_eq!(
            state
                .breaker
                .counters
                .get(crate::judge::breaker::Signal::NoProgress),
            2
        );

        let newer = br#"{"schemaVersion":99,"status":"running"}"#;
        let err = LoopState::from_json(newer).unwrap_err();
        assert!(
            matches!(err, StateJsonError::Newer { version: 99 }),
            "{err}"
        );
        assert!(err.to_string().contains("newer ralph"), "{err}");
    }

    #[test]
    fn history_is_bounded() {
        let mut s = LoopState::new("abc".into(), 5, Timestamp::from_secs(0));
        for i in 0..(u32::try_from(HISTORY_LIMIT).unwrap() + 7) {
            s.push_history(IterationRecord::new(
                i,
                Timestamp::from_secs(0),
                StopDecision::Block,
                String::new(),
            ));
        }
        assert_eq!(s.history.len(), HISTORY_LIMIT);
        assert_eq!(s.history[0].iteration, 7);
    }

    #[test]
    fn requests_are_counted_per_minute_over_a_rolling_hour() {
        let mut s = LoopState::new("abc".into(), 5, Timestamp::from_secs(0));
        let t0 = 1_800_000_000; // a minute's start
        s.record_calls(&[t0, t0 + 10, t0 + 59, t0 + 60], t0 + 60);
        assert_eq!(s.recent_calls.len(), 2, "two minutes");
        assert_eq!(s.calls_in_last_hour(t0 + 60), 4);
        // Under the cap: no wait; at it, until the oldest minute has left the hour.
        assert_eq!(s.calls_free_at(5, t0 + 60), None);
        assert_eq!(
            s.calls_free_at(4, t0 + 60),
            Some(t0 + 60 + CALL_WINDOW_SECS)
        );
        assert_eq!(
            s.calls_free_at(1, t0 + 60),
            Some(t0 + 120 + CALL_WINDOW_SECS)
        );
        // An hour and a minute later, the first minute is forgotten.
        s.record_calls(&[], t0 + 60 + CALL_WINDOW_SECS);
        assert_eq!(s.calls_in_last_hour(t0 + 60 + CALL_WINDOW_SECS), 1);
    }

    #[test]
    fn money_is_exact_and_written_as_dollars() {
        let mut s = LoopState::new("abc".into(), 5, Timestamp::from_secs(0));
        s.cost_usd = Usd(Usd::from_dollars(0.1).0 + Usd::from_dollars(0.2).0);
        assert_eq!(s.cost_usd, Usd::from_dollars(0.3));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["costUsd"], 0.3);
        assert_eq!(serde_json::from_value::<LoopState>(json).unwrap(), s);
        assert_eq!(Usd::from_dollars(-1.0), Usd(0));
        assert_eq!(Usd::from_dollars(f64::NAN), Usd(0));
        assert_eq!(format!("{}", Usd::from_dollars(1.234)), "$1.23");
        assert_eq!(format!("{}", Usd::from_dollars(0.0024)), "$0.0024");
        assert_eq!(format!("{}", Usd::from_dollars(0.99999)), "$1.0000");
        assert_eq!(format!("{}", Usd(1)), "<$0.0001");
        assert_eq!(format!("{}", Usd(0)), "$0.00");
    }

    #[test]
    fn pause_kinds_from_the_client_and_from_http() {
        assert_eq!(
            PauseKind::from_client_error("server_error"),
            PauseKind::ServerError
        );
        assert_eq!(
            PauseKind::from_client_error("something_new"),
            PauseKind::Unknown
        );
        assert_eq!(PauseKind::from_http_status(529), PauseKind::Overloaded);
        assert_eq!(
            PauseKind::from_http_status(401),
            PauseKind::AuthenticationFailed
        );
        assert!(PauseKind::Unknown.is_transient());
        assert!(!PauseKind::BillingError.is_transient());
        assert!(Status::Failed.is_resumable() && !Status::Complete.is_resumable());
    }

    #[test]
    fn excerpt_flattens_and_bounds() {
        assert_eq!(excerpt("a\n\n b"), "a b");
        let long = "é".repeat(EXCERPT_CHARS + 5);
        assert_eq!(excerpt(&long).chars().count(), EXCERPT_CHARS + 1);
    }
}
