//! The loop's persisted state (`ralph-state.json`), in camelCase JSON.
//!
//! The state is what makes a loop inspectable and resumable: which session
//! owns it, where it is, why it ended, and what each iteration looked like.

use serde::{Deserialize, Serialize};

use crate::breaker::{Breaker, Transition};
use crate::claims::StatusBlock;
use crate::completion::{CompletionMode, Gate, GateResult};
use crate::decision::MessageSource;
use crate::verify::VerifyResult;

/// The version of the state file's shape that this build writes. A state
/// without `schemaVersion` is version 1 and is migrated when read; a newer
/// one is refused rather than misread.
pub const SCHEMA_VERSION: u32 = 2;

/// How many per-iteration records the state keeps; older ones are dropped.
pub const HISTORY_LIMIT: usize = 50;
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
        }
    }
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
    pub at: String,
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
    /// Where the message came from: `input` (last_assistant_message),
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
        if self.accepted {
            write!(f, "accepted: {}", self.basis)
        } else {
            let gates: Vec<&str> = self.failed_gates.iter().map(|g| g.as_str()).collect();
            write!(
                f,
                "rejected by the {} gate(s): {}",
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
    pub at: String,
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
    pub started_at: String,
    /// When the hook last handled a stop of this loop.
    #[serde(default)]
    pub last_run_at: Option<String>,
    /// When the loop ended, once it has.
    #[serde(default)]
    pub ended_at: Option<String>,
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
}

fn legacy_schema() -> u32 {
    1
}

impl LoopState {
    /// Reads a state file's bytes: migrates an older shape, refuses a newer
    /// one; the error says why, for the "corrupt" message.
    pub fn from_json(bytes: &[u8]) -> Result<LoopState, String> {
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
                    Ok(_) => "it holds JSON, but not a ralph state object".into(),
                    Err(_) => e.to_string(),
                })
            }
        };
        let version = version
            .map(|v| v.as_u64().ok_or("schemaVersion is not a whole number"))
            .transpose()?
            .unwrap_or(1);
        if version > u64::from(SCHEMA_VERSION) {
            return Err(format!(
                "it was written by a newer ralph (state schema {version}, this one reads up to {SCHEMA_VERSION}); \
                 upgrade ralph"
            ));
        }
        let mut state: LoopState = if version < 2 {
            let mut value: serde_json::Value =
                serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
            migrate_v1(&mut value);
            serde_json::from_value(value).map_err(|e| e.to_string())?
        } else {
            serde_json::from_slice(bytes).map_err(|e| e.to_string())?
        };
        state.schema_version = SCHEMA_VERSION;
        Ok(state)
    }

    /// A fresh running loop at iteration 1.
    pub fn new(session_id: String, max_iterations: u32, now: String) -> Self {
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
    pub fn end(&mut self, status: Status, because: String, now: &str) {
        self.status = status;
        self.ended_at = Some(now.to_string());
        self.ended_because = Some(because);
    }
}

/// Version 1 kept a history record's breaker transition and claim as text
/// (`closed → half_open: why`, `accepted: basis`, `rejected by the plan,
/// verification gate(s): basis`); version 2 keeps them typed.
fn migrate_v1(state: &mut serde_json::Value) {
    use serde_json::{json, Value};
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
    let flat: String = message.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut out: String = flat.chars().take(EXCERPT_CHARS).collect();
    if flat.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_in_camel_case() {
        let mut s = LoopState::new("abc".into(), 5, "2026-01-01T00:00:00Z".into());
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
        let v1 = br#"{"status":"running","iteration":3,"maxIterations":5,"sessionId":"s","startedAt":"t",
            "history":[{"iteration":1,"at":"t1","decision":"block","why":"w","messageSource":"input",
                        "breaker":"closed \u2192 half_open: no file changed in 3 iterations",
                        "claim":"rejected by the plan, verification gate(s): completion signal (OwnLine)"},
                       {"iteration":2,"at":"t2","decision":"block","why":"w","messageSource":"transcript",
                        "claim":"accepted: status block"}],
            "breaker":{"counters":{"noProgress":2,"sameError":0,"findingsStuck":0,"outputDecline":0,"tddStuck":0}}}"#;
        let state = LoopState::from_json(v1).unwrap();
        assert_eq!(state.schema_version, SCHEMA_VERSION);
        let first = &state.history[0];
        assert_eq!(first.message_source, MessageSource::Input);
        let t = first.breaker.as_ref().unwrap();
        assert_eq!(t.to, crate::breaker::BreakerState::HalfOpen);
        assert_eq!(t.reason, "no file changed in 3 iterations");
        let claim = first.claim.as_ref().unwrap();
        assert!(!claim.accepted);
        assert_eq!(claim.failed_gates, vec![Gate::Plan, Gate::Verification]);
        assert_eq!(
            claim.to_string(),
            "rejected by the plan, verification gate(s): completion signal (OwnLine)"
        );
        assert!(state.history[1].claim.as_ref().unwrap().accepted);
        assert_eq!(
            state
                .breaker
                .counters
                .get(crate::breaker::Signal::NoProgress),
            2
        );

        let newer = br#"{"schemaVersion":99,"status":"running"}"#;
        let err = LoopState::from_json(newer).unwrap_err();
        assert!(err.contains("newer ralph"), "{err}");
    }

    #[test]
    fn history_is_bounded() {
        let mut s = LoopState::new("abc".into(), 5, "t".into());
        for i in 0..(HISTORY_LIMIT as u32 + 7) {
            s.push_history(IterationRecord {
                iteration: i,
                at: "t".into(),
                decision: StopDecision::Block,
                why: String::new(),
                excerpt: String::new(),
                stop_hook_active: false,
                findings: None,
                message_source: MessageSource::Missing,
                tool_calls: 0,
                error: None,
                breaker: None,
                status_block: None,
                claim: None,
            });
        }
        assert_eq!(s.history.len(), HISTORY_LIMIT);
        assert_eq!(s.history[0].iteration, 7);
    }

    #[test]
    fn excerpt_flattens_and_bounds() {
        assert_eq!(excerpt("a\n\n b"), "a b");
        let long = "é".repeat(EXCERPT_CHARS + 5);
        assert_eq!(excerpt(&long).chars().count(), EXCERPT_CHARS + 1);
    }
}
