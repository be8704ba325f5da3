//! The three-state circuit breaker that stops a stalled loop.
//!
//! `closed` is normal. When a stall signal reaches its threshold the breaker
//! goes `half_open`: the loop goes on, but the re-injected text starts with a
//! notice saying what was detected. If the stall clears (the signal that
//! tripped falls back under its threshold, which takes real progress), it
//! returns to `closed`; if it persists for the patience window, it goes
//! `open` and the loop stops with status `circuit_open`.
//!
//! Each stall signal is one entry of [`SIGNALS`]: its config key, env var,
//! default threshold, how its counter moves, what it remembers between stops
//! and how it is described. [`step`] is pure: it takes the previous breaker
//! and what this stop observed, and returns the next breaker and what the
//! loop must do.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::judge::errors::ErrorSighting;
use crate::observe::progress::Baseline;
use crate::time::Timestamp;

/// How many recent final-message lengths the output-decline signal averages.
pub const OUTPUT_WINDOW: usize = 3;
/// Consecutive declining iterations that trip the output-decline signal.
pub const OUTPUT_DECLINE_ITERATIONS: u32 = 2;
/// Default number of iterations the breaker stays half open before it opens.
pub const DEFAULT_PATIENCE: u32 = 2;

/// The breaker's state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Normal operation.
    #[default]
    Closed,
    /// A stall was detected; the agent is warned and given a patience window.
    HalfOpen,
    /// The stall persisted; the loop was stopped.
    Open,
}

impl BreakerState {
    /// The name used in the state file and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::HalfOpen => "half_open",
            BreakerState::Open => "open",
        }
    }
}

/// A stall signal: the key of its counter and threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Signal {
    /// Nothing changed in the project since the previous stop.
    NoProgress,
    /// The iteration ended on the same error.
    SameError,
    /// The reported findings count did not move.
    FindingsStuck,
    /// The final message shrank sharply.
    OutputDecline,
    /// The TDD scenario did not change.
    TddStuck,
    /// The same completion claim failed the same gate with the same output.
    SameRejectedClaim,
    /// A tool call was refused for lack of permission.
    PermissionDenied,
}

/// One stall signal, described once for the configuration, the counting,
/// the notices and the docs. A new signal is one entry of [`SIGNALS`].
pub struct SignalSpec {
    /// Which signal.
    pub signal: Signal,
    /// Its name for people.
    pub label: &'static str,
    /// Its threshold's key in `config.json`.
    pub config_key: &'static str,
    /// Its threshold's environment variable.
    pub env_var: &'static str,
    /// The default threshold.
    pub default: u32,
    /// The largest threshold accepted (the smallest is 1).
    pub max: u32,
    /// What the counter counts, for people (`ralph-ctl status`, the README).
    pub counts: &'static str,
    /// False when the signal may warn but never open the breaker while the
    /// project is changing (a stuck count next to real edits is no stall).
    pub opens_while_progressing: bool,
    /// True when reaching the threshold opens the breaker at once, without
    /// the half-open warning: the agent cannot undo this stall itself.
    pub opens_at_once: bool,
    /// The counter after this stop, from the previous breaker and counter.
    count: fn(&Breaker, &ProgressObservation, &BreakerConfig, u32) -> u32,
    /// The counter value at which the signal trips.
    trips_at: fn(&BreakerConfig) -> u32,
    /// What the signal keeps for the next stop.
    remember: fn(&mut Breaker, &ProgressObservation),
    /// The stall in words, from the new breaker and the counter.
    describe: fn(&Breaker, &ProgressObservation, &BreakerConfig, u32) -> String,
}

impl SignalSpec {
    /// The counter value at which the signal trips under `config`.
    pub fn trips_at(&self, config: &BreakerConfig) -> u32 {
        (self.trips_at)(config)
    }
}

fn remember_nothing(_: &mut Breaker, _: &ProgressObservation) {}

/// Every stall signal, in the order they are reported.
pub const SIGNALS: &[SignalSpec] = &[
    SignalSpec {
        signal: Signal::NoProgress,
        label: "no progress",
        config_key: "noProgressThreshold",
        env_var: "CB_NO_PROGRESS_THRESHOLD",
        default: 3,
        max: 1_000,
        counts: "nothing changed in the project since the previous stop, whether the agent used a tool or did nothing at all (a stop that could not see the iteration's tool calls yet counts only if it saw one)",
        opens_while_progressing: true,
        opens_at_once: false,
        count: |_, o, _, c| match o.changed {
            // Unchanged after a tool call or an error, or after an iteration
            // that did nothing at all: the plainest lack of progress.
            Some(false) if o.acted || !o.tools_unseen => c.saturating_add(1),
            // Unchanged, no call seen, but the stop could not see them all:
            // no evidence either way.
            Some(false) => c,
            Some(true) => 0,
            // Unknown: no evidence either way.
            None => c,
        },
        trips_at: |c| c.threshold(Signal::NoProgress),
        remember: remember_nothing,
        describe: |_, _, _, c| format!("no file changed in {c} iterations"),
    },
    SignalSpec {
        signal: Signal::SameError,
        label: "same error",
        config_key: "sameErrorThreshold",
        env_var: "CB_SAME_ERROR_THRESHOLD",
        default: 5,
        max: 1_000,
        counts: "the iteration ended on the same error: the first failing tool result (`is_error: true`), else an error line of the agent's message, normalised (numbers, paths, hex ids, timestamps stripped)",
        opens_while_progressing: true,
        opens_at_once: false,
        count: |b, o, _, c| match (&o.error, &b.last_error) {
            (Some(now), Some(before)) if now.fingerprint == before.fingerprint => {
                c.saturating_add(1)
            }
            (Some(_), _) => 1,
            (None, _) if o.tools_unseen => c,
            (None, _) => 0,
        },
        trips_at: |c| c.threshold(Signal::SameError),
        remember: |b, o| {
            if o.error.is_some() || !o.tools_unseen {
                b.last_error = o.error.clone();
            }
        },
        describe: |b, _, _, c| {
            let sample = b
                .last_error
                .as_ref()
                .map(|e| e.sample.as_str())
                .unwrap_or_default();
            format!("same error {c} times: `{sample}`")
        },
    },
    SignalSpec {
        signal: Signal::FindingsStuck,
        label: "findings stuck",
        config_key: "circuitBreakerThreshold",
        env_var: "RALPH_CIRCUIT_BREAKER_THRESHOLD",
        default: 3,
        max: 1_000,
        counts: "`RALPH_ITERATION_COMPLETE: N findings remain` reported the same N as the previous report; while files change it only warns",
        opens_while_progressing: false,
        opens_at_once: false,
        count: |_, o, _, c| match o.findings {
            Some(now) if o.previous_findings == Some(now) => c.saturating_add(1),
            Some(_) => 0,
            None => c,
        },
        trips_at: |c| c.threshold(Signal::FindingsStuck),
        remember: remember_nothing,
        describe: |_, o, _, c| {
            format!(
                "findings count stuck at {} for {c} iterations",
                o.findings.or(o.previous_findings).unwrap_or_default()
            )
        },
    },
    SignalSpec {
        signal: Signal::OutputDecline,
        label: "output decline",
        config_key: "outputDeclineThreshold",
        env_var: "CB_OUTPUT_DECLINE_THRESHOLD",
        default: 70,
        max: 99,
        counts: "the final message was more than this percent shorter than the average of the previous 3 (trips after 2 such iterations)",
        opens_while_progressing: true,
        opens_at_once: false,
        count: |b, o, config, c| {
            let recent = &b.recent_output_lengths;
            if recent.len() < OUTPUT_WINDOW {
                return c;
            }
            let window = &recent[recent.len() - OUTPUT_WINDOW..];
            let average = window.iter().sum::<usize>() as u128 / OUTPUT_WINDOW as u128;
            let percent = config.threshold(Signal::OutputDecline).min(100);
            let declined =
                average > 0 && (o.output_chars as u128) * 100 < average * u128::from(100 - percent);
            if declined { c.saturating_add(1) } else { 0 }
        },
        trips_at: |_| OUTPUT_DECLINE_ITERATIONS,
        remember: |b, o| {
            b.recent_output_lengths.push(o.output_chars);
            let excess = b.recent_output_lengths.len().saturating_sub(OUTPUT_WINDOW);
            b.recent_output_lengths.drain(..excess);
        },
        describe: |_, _, config, c| {
            format!(
                "final message more than {}% shorter than the recent average for {c} iterations",
                config.threshold(Signal::OutputDecline)
            )
        },
    },
    SignalSpec {
        signal: Signal::TddStuck,
        label: "TDD stuck",
        config_key: "tddStuckThreshold",
        env_var: "CB_TDD_STUCK_THRESHOLD",
        default: 3,
        max: 1_000,
        counts: "`currentScenario` in `.claude/context/runtime/tdd-state.json` (when that file exists) did not change",
        opens_while_progressing: true,
        opens_at_once: false,
        count: |b, o, _, c| match (&o.tdd_scenario, &b.last_tdd_scenario) {
            (Some(now), Some(before)) if now == before => c.saturating_add(1),
            _ => 0,
        },
        trips_at: |c| c.threshold(Signal::TddStuck),
        remember: |b, o| b.last_tdd_scenario = o.tdd_scenario.clone(),
        describe: |b, _, _, c| {
            format!(
                "TDD scenario `{}` unchanged for {c} iterations",
                b.last_tdd_scenario.as_deref().unwrap_or_default()
            )
        },
    },
    SignalSpec {
        signal: Signal::SameRejectedClaim,
        label: "same rejected claim",
        config_key: "sameRejectedClaimThreshold",
        env_var: "CB_SAME_REJECTED_CLAIM_THRESHOLD",
        default: 3,
        max: 1_000,
        counts: "a completion claim was rejected by the same gates with the same output as the previous rejected claim (iterations without a claim do not break the run)",
        opens_while_progressing: true,
        opens_at_once: false,
        count: |b, o, _, c| match (&o.rejected_claim, &b.last_rejected_claim) {
            (Some(now), Some(before)) if now.fingerprint == before.fingerprint => {
                c.saturating_add(1)
            }
            (Some(_), _) => 1,
            (None, _) => c,
        },
        trips_at: |c| c.threshold(Signal::SameRejectedClaim),
        remember: |b, o| {
            if o.rejected_claim.is_some() {
                b.last_rejected_claim = o.rejected_claim.clone();
            }
        },
        describe: |b, _, _, c| {
            let sample = b
                .last_rejected_claim
                .as_ref()
                .map(|e| e.sample.as_str())
                .unwrap_or_default();
            format!("the same completion claim was rejected {c} times ({sample})")
        },
    },
    SignalSpec {
        signal: Signal::PermissionDenied,
        label: "permission denied",
        config_key: "permissionDeniedThreshold",
        env_var: "CB_PERMISSION_DENIED_THRESHOLD",
        default: 2,
        max: 1_000,
        counts: "a tool call of the iteration was refused for lack of permission (its tool result says so: nobody answers the client's prompt in a headless run); while files change it only warns, otherwise it opens the breaker at once",
        opens_while_progressing: false,
        opens_at_once: true,
        count: |_, o, _, c| match (o.denied.is_empty(), o.tools_unseen) {
            (false, _) => c.saturating_add(1),
            (true, true) => c,
            (true, false) => 0,
        },
        trips_at: |c| c.threshold(Signal::PermissionDenied),
        remember: remember_nothing,
        describe: |_, o, _, c| {
            format!(
                "the client refused {} for lack of permission in {c} iterations: {}",
                crate::judge::errors::calls_in_words(&o.denied),
                crate::judge::errors::how_to_allow_in(&o.denied, o.sandboxed)
            )
        },
    },
];

/// The entry of `signal` in [`SIGNALS`].
///
/// # Panics
///
/// Never: [`SIGNALS`] has an entry for every signal.
pub fn spec(signal: Signal) -> &'static SignalSpec {
    SIGNALS
        .iter()
        .find(|s| s.signal == signal)
        .expect("every signal has an entry")
}

/// The thresholds, from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Each signal's threshold; a signal not listed has its default.
    pub thresholds: BTreeMap<Signal, u32>,
    /// Iterations in `half_open` without recovery before the breaker opens.
    pub patience: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            thresholds: SIGNALS.iter().map(|s| (s.signal, s.default)).collect(),
            patience: DEFAULT_PATIENCE,
        }
    }
}

impl BreakerConfig {
    /// The threshold of `signal`.
    pub fn threshold(&self, signal: Signal) -> u32 {
        self.thresholds
            .get(&signal)
            .copied()
            .unwrap_or_else(|| spec(signal).default)
    }

    /// The same configuration with `signal`'s threshold set to `value`.
    pub fn with(mut self, signal: Signal, value: u32) -> Self {
        self.thresholds.insert(signal, value);
        self
    }
}

/// Per-signal counters, persisted so `ralph-ctl status` can show them
/// (`{"noProgress": 0, "sameError": 2, …}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SignalCounters(pub BTreeMap<Signal, u32>);

impl Default for SignalCounters {
    fn default() -> Self {
        SignalCounters(SIGNALS.iter().map(|s| (s.signal, 0)).collect())
    }
}

impl SignalCounters {
    /// The counter of `signal` (0 when the state predates it).
    pub fn get(&self, signal: Signal) -> u32 {
        self.0.get(&signal).copied().unwrap_or_default()
    }

    /// Sets the counter of `signal`.
    pub fn set(&mut self, signal: Signal, value: u32) {
        self.0.insert(signal, value);
    }
}

/// A change of breaker state, kept with its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// The iteration whose stop caused it.
    pub iteration: u32,
    /// When.
    pub at: crate::time::Timestamp,
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for Transition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} → {}: {}",
            self.from.as_str(),
            self.to.as_str(),
            self.reason
        )
    }
}

/// The persisted breaker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Breaker {
    /// Closed, half open or open.
    pub state: BreakerState,
    /// The signal counters.
    pub counters: SignalCounters,
    /// Iterations spent in `half_open` so far.
    pub half_open_iterations: u32,
    /// The project's files at the previous stop (or at `start`): what the
    /// next progress reading compares with. (States written before it held a
    /// `lastFingerprint` instead, which is ignored: the first stop then takes
    /// a baseline and tells nothing.)
    pub progress: Option<Baseline>,
    /// The error the previous iteration ended on.
    pub last_error: Option<ErrorSighting>,
    /// Lengths (characters) of the last final messages, oldest first.
    pub recent_output_lengths: Vec<usize>,
    /// The TDD scenario at the previous stop.
    pub last_tdd_scenario: Option<String>,
    /// The last rejected completion claim (its failed gates and output).
    pub last_rejected_claim: Option<ErrorSighting>,
    /// The most recent transition.
    pub last_transition: Option<Transition>,
}

/// What one stop observed that bears on progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressObservation {
    /// Whether the project changed since the previous stop (`None`: cannot tell).
    pub changed: Option<bool>,
    /// Whether the stop saw the agent do anything that could change the
    /// project (a tool call) or run into an error. An iteration that did
    /// neither counts as no progress too, unless the stop could not see all
    /// of its calls ([`Self::tools_unseen`]).
    pub acted: bool,
    /// The error this iteration ended on, if any.
    pub error: Option<ErrorSighting>,
    /// The findings count reported now, if any.
    pub findings: Option<u64>,
    /// The findings count reported before, if any.
    pub previous_findings: Option<u64>,
    /// Length of the final message, in characters.
    pub output_chars: usize,
    /// The TDD scenario now, when a TDD state file exists.
    pub tdd_scenario: Option<String>,
    /// The completion claim this stop rejected: which gates failed and on
    /// what output, fingerprinted.
    pub rejected_claim: Option<ErrorSighting>,
    /// The tool calls the client refused for lack of permission (empty: none).
    pub denied: Vec<crate::judge::errors::Refusal>,
    /// The client ran in its own sandbox: the advice on refused calls
    /// never proposes the sandbox then.
    pub sandboxed: bool,
    /// The stop could not see all of the iteration's tool calls and results
    /// yet (the client writes them after its Stop hook, as 2.1.330 does
    /// under load): a refusal or an error it did not see is no evidence
    /// that there was none, so such a stop breaks no run of them.
    pub tools_unseen: bool,
}

/// What the loop must do after this stop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BreakerEffect {
    /// Nothing to say.
    Quiet,
    /// Go on, but start the re-injected text with this notice.
    Warn(String),
    /// Stop the loop: the breaker opened for this reason.
    Open(String),
}

/// Applies one stop's observation to the breaker.
pub fn step(
    previous: &Breaker,
    observed: &ProgressObservation,
    config: &BreakerConfig,
    iteration: u32,
    now: Timestamp,
) -> (Breaker, BreakerEffect) {
    let mut next = previous.clone();
    for spec in SIGNALS {
        let counter = (spec.count)(
            previous,
            observed,
            config,
            previous.counters.get(spec.signal),
        );
        next.counters.set(spec.signal, counter);
    }
    for spec in SIGNALS {
        (spec.remember)(&mut next, observed);
    }

    // Each signal at its threshold, described; and whether one of them may open.
    let progressing = observed.changed == Some(true);
    let mut stalls = Vec::new();
    let mut may_open = false;
    let mut at_once = false;
    for spec in SIGNALS {
        let counter = next.counters.get(spec.signal);
        if counter >= spec.trips_at(config) {
            stalls.push((spec.describe)(&next, observed, config, counter));
            let opens = spec.opens_while_progressing || !progressing;
            may_open |= opens;
            at_once |= opens && spec.opens_at_once;
        }
    }

    let transition = |from, to, reason: String| Transition {
        iteration,
        at: now,
        from,
        to,
        reason,
    };
    let effect = match previous.state {
        BreakerState::Closed | BreakerState::HalfOpen if at_once => {
            let reason = stalls.join("; ");
            next.state = BreakerState::Open;
            next.last_transition = Some(transition(
                previous.state,
                BreakerState::Open,
                reason.clone(),
            ));
            BreakerEffect::Open(reason)
        }
        BreakerState::Closed if stalls.is_empty() => BreakerEffect::Quiet,
        BreakerState::Closed => {
            let reason = stalls.join("; ");
            next.state = BreakerState::HalfOpen;
            next.half_open_iterations = 0;
            next.last_transition = Some(transition(
                BreakerState::Closed,
                BreakerState::HalfOpen,
                reason.clone(),
            ));
            BreakerEffect::Warn(if may_open {
                notice(&reason, config.patience)
            } else {
                progressing_notice(&reason)
            })
        }
        BreakerState::HalfOpen if stalls.is_empty() => {
            next.state = BreakerState::Closed;
            next.half_open_iterations = 0;
            next.last_transition = Some(transition(
                BreakerState::HalfOpen,
                BreakerState::Closed,
                "progress resumed: no stall signal at its threshold".into(),
            ));
            BreakerEffect::Quiet
        }
        // Only signals that never open while files change, and files changed:
        // keep warning, without using up the patience.
        BreakerState::HalfOpen if !may_open => {
            BreakerEffect::Warn(progressing_notice(&stalls.join("; ")))
        }
        BreakerState::HalfOpen => {
            next.half_open_iterations = next.half_open_iterations.saturating_add(1);
            let reason = stalls.join("; ");
            if next.half_open_iterations >= config.patience {
                let reason = format!(
                    "{reason}; no progress within {} iteration(s) after the warning",
                    next.half_open_iterations
                );
                next.state = BreakerState::Open;
                next.last_transition = Some(transition(
                    BreakerState::HalfOpen,
                    BreakerState::Open,
                    reason.clone(),
                ));
                BreakerEffect::Open(reason)
            } else {
                BreakerEffect::Warn(notice(&reason, config.patience - next.half_open_iterations))
            }
        }
        BreakerState::Open => BreakerEffect::Open(
            previous
                .last_transition
                .as_ref()
                .map_or_else(|| "the breaker is open".into(), |t| t.reason.clone()),
        ),
    };
    (next, effect)
}

/// The notice of a stall that cannot open the breaker while files change.
fn progressing_notice(reason: &str) -> String {
    format!(
        "[Ralph circuit breaker: half-open] Detected: {reason}. Files are changing, so the loop goes on, \
         but check that your changes address what remains."
    )
}

/// The notice that starts the re-injected text while the breaker is half open.
fn notice(reason: &str, iterations_left: u32) -> String {
    format!(
        "[Ralph circuit breaker: half-open] Detected: {reason}. The loop stops in {iterations_left} more \
         iteration(s) unless real progress resumes. Change your approach: re-read the task, try a \
         different fix, or state plainly what blocks you."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> Option<ErrorSighting> {
        Some(ErrorSighting {
            fingerprint: crate::judge::errors::fingerprint(s),
            sample: s.to_string(),
        })
    }

    /// An iteration that acted, leaving the project at `tree`: the tree
    /// "start" is the one the loop started with, any other is a change.
    fn obs(tree: &str) -> ProgressObservation {
        ProgressObservation {
            changed: Some(tree != "start"),
            output_chars: 100,
            acted: true,
            ..Default::default()
        }
    }

    /// Runs observations through the breaker from a start fingerprint "start";
    /// returns the effect letter of each stop: `.` quiet, `W` warn, `O` open.
    fn run(observations: &[ProgressObservation], config: &BreakerConfig) -> (String, Breaker) {
        let mut breaker = Breaker::default();
        let mut trace = String::new();
        for (i, o) in observations.iter().enumerate() {
            let (next, effect) = step(
                &breaker,
                o,
                config,
                u32::try_from(i).unwrap() + 1,
                Timestamp::from_secs(0),
            );
            trace.push(match effect {
                BreakerEffect::Quiet => '.',
                BreakerEffect::Warn(_) => 'W',
                BreakerEffect::Open(_) => 'O',
            });
            breaker = next;
            if matches!(effect, BreakerEffect::Open(_)) {
                break;
            }
        }
        (trace, breaker)
    }

    #[test]
    fn no_progress_transitions() {
        let config = BreakerConfig::default();
        let same = |n| vec![obs("start"); n];
        let idle = ProgressObservation {
            acted: false,
            ..obs("start")
        };
        let changing: Vec<_> = (0..10).map(|i| obs(&format!("tree-{i}"))).collect();
        let mut recovers = same(3);
        recovers.push(obs("edited"));
        recovers.extend(same(1).into_iter().map(|_| obs("edited")));
        let cases: Vec<(&str, Vec<ProgressObservation>, &str)> = vec![
            (
                "nothing changes: warn at 3, open 2 later",
                same(10),
                "..WWO",
            ),
            (
                "every stop changes files: never leaves closed",
                changing,
                "..........",
            ),
            ("a change in half-open closes it", recovers, "..W.."),
            (
                "unknown fingerprints are no evidence",
                vec![ProgressObservation::default(); 6],
                "......",
            ),
            (
                "an agent that only talks (no tool, no change): warn at 3, open 2 later",
                vec![idle.clone(); 10],
                "..WWO",
            ),
            (
                "talk alone, its tool calls not seen yet: no evidence",
                vec![
                    ProgressObservation {
                        tools_unseen: true,
                        ..idle.clone()
                    };
                    6
                ],
                "......",
            ),
            (
                "talk and tool calls without change alternate: one run",
                (0..10)
                    .map(|i| {
                        if i % 2 == 0 {
                            idle.clone()
                        } else {
                            obs("start")
                        }
                    })
                    .collect(),
                "..WWO",
            ),
        ];
        for (name, observations, want) in cases {
            assert_eq!(run(&observations, &config).0, want, "{name}");
        }
    }

    #[test]
    fn a_state_written_with_a_fingerprint_still_loads() {
        let old = r#"{"state": "half_open", "counters": {"noProgress": 3, "sameError": 0,
                      "findingsStuck": 0, "outputDecline": 0, "tddStuck": 0},
                      "halfOpenIterations": 1, "lastFingerprint": "git:0123456789abcdef",
                      "recentOutputLengths": [10]}"#;
        let breaker: Breaker = serde_json::from_str(old).unwrap();
        assert_eq!(breaker.state, BreakerState::HalfOpen);
        assert_eq!(breaker.counters.get(Signal::NoProgress), 3);
        assert_eq!(breaker.progress, None);
        let json = serde_json::to_value(&breaker).unwrap();
        assert!(json.get("lastFingerprint").is_none(), "{json}");
    }

    #[test]
    fn half_open_then_closed_is_recorded() {
        let mut o = vec![obs("start"); 3];
        o.push(obs("changed"));
        let (_, breaker) = run(&o, &BreakerConfig::default());
        assert_eq!(breaker.state, BreakerState::Closed);
        let t = breaker.last_transition.unwrap();
        assert_eq!(
            (t.from, t.to, t.iteration),
            (BreakerState::HalfOpen, BreakerState::Closed, 4)
        );
    }

    #[test]
    fn open_is_recorded_with_its_reason() {
        let (trace, breaker) = run(&vec![obs("start"); 10], &BreakerConfig::default());
        assert_eq!(trace, "..WWO");
        assert_eq!(breaker.state, BreakerState::Open);
        let t = breaker.last_transition.unwrap();
        assert_eq!(t.to, BreakerState::Open);
        assert!(
            t.reason.contains("no file changed in 5 iterations"),
            "{}",
            t.reason
        );
    }

    #[test]
    fn same_error_transitions() {
        let config = BreakerConfig::default().with(Signal::SameError, 3);
        let with_error = |tree: &str, e: &str| ProgressObservation {
            error: err(e),
            ..obs(tree)
        };
        // Files change each time (so no-progress never trips) but the same error repeats.
        let repeating: Vec<_> = (0..8)
            .map(|i| with_error(&format!("t{i}"), "error: E1"))
            .collect();
        assert_eq!(run(&repeating, &config).0, "..WWO");
        // A stop that could not see its calls yet neither counts nor resets.
        let unseen = ProgressObservation {
            tools_unseen: true,
            ..obs("u")
        };
        let interrupted = vec![
            with_error("t0", "error: E1"),
            with_error("t1", "error: E1"),
            unseen.clone(),
            with_error("t3", "error: E1"),
            with_error("t4", "error: E1"),
            with_error("t5", "error: E1"),
        ];
        assert_eq!(run(&interrupted, &config).0, "...WWO");
        // A different error each time resets the count.
        let varied: Vec<_> = (0..8)
            .map(|i| with_error(&format!("t{i}"), &format!("error: E{i}")))
            .collect();
        assert_eq!(run(&varied, &config).0, "........");
        // The error goes away in half-open: closed again.
        let mut fixed: Vec<_> = (0..3)
            .map(|i| with_error(&format!("t{i}"), "error: E1"))
            .collect();
        fixed.push(obs("t9"));
        assert_eq!(run(&fixed, &config).0, "..W.");
        let (_, breaker) = run(&repeating[..3], &config);
        let reason = breaker.last_transition.unwrap().reason;
        assert!(
            reason.contains("same error 3 times: `error: E1`"),
            "{reason}"
        );
    }

    #[test]
    fn findings_stuck_transitions() {
        let config = BreakerConfig::default();
        let report = |tree: &str, now: u64, before: Option<u64>| ProgressObservation {
            findings: Some(now),
            previous_findings: before,
            ..obs(tree)
        };
        let stuck: Vec<_> = (0..8)
            .map(|i| report(&format!("t{i}"), 4, if i == 0 { None } else { Some(4) }))
            .collect();
        assert_eq!(
            run(&stuck, &config).0,
            "...WWWWW",
            "first report is no comparison; 3 unchanged → warn; files change, so it never opens"
        );
        let idle = |now: u64, before: Option<u64>| ProgressObservation {
            acted: false,
            changed: None,
            ..report("start", now, before)
        };
        let stuck_and_idle: Vec<_> = (0..8)
            .map(|i| idle(4, if i == 0 { None } else { Some(4) }))
            .collect();
        assert_eq!(
            run(&stuck_and_idle, &config).0,
            "...WWO",
            "no change seen: the stuck count opens the breaker"
        );
        let falling: Vec<_> = (0..8)
            .map(|i| {
                report(
                    &format!("t{i}"),
                    10 - i,
                    if i == 0 { None } else { Some(11 - i) },
                )
            })
            .collect();
        assert_eq!(run(&falling, &config).0, "........");
    }

    #[test]
    fn output_decline_transitions() {
        let config = BreakerConfig::default();
        let sized = |tree: &str, chars| ProgressObservation {
            output_chars: chars,
            ..obs(tree)
        };
        let shrinking: Vec<_> = [1000, 1000, 1000, 100, 100, 100, 100]
            .iter()
            .enumerate()
            .map(|(i, &n)| sized(&format!("t{i}"), n))
            .collect();
        // The 4th is the first decline (avg 1000), the 5th the second (avg 700): warn.
        // The 6th compares with (1000+100+100)/3 = 400: 100 < 120, still declining.
        // The 7th compares with 100: a steady low output is no decline, so it recovers
        // (a loop that is stuck at a low output is caught by the other signals).
        assert_eq!(run(&shrinking, &config).0, "....WW.");
        let collapsing: Vec<_> = [1000, 1000, 1000, 250, 60, 10, 1]
            .iter()
            .enumerate()
            .map(|(i, &n)| sized(&format!("t{i}"), n))
            .collect();
        assert_eq!(run(&collapsing, &config).0, "....WWO");
        let steady: Vec<_> = (0..8).map(|i| sized(&format!("t{i}"), 500 + i)).collect();
        assert_eq!(run(&steady, &config).0, "........");
        let one_dip: Vec<_> = [1000, 1000, 1000, 100, 1000, 1000]
            .iter()
            .enumerate()
            .map(|(i, &n)| sized(&format!("t{i}"), n))
            .collect();
        assert_eq!(run(&one_dip, &config).0, "......");
    }

    #[test]
    fn tdd_stuck_transitions() {
        let config = BreakerConfig::default();
        let scenario = |tree: &str, s: &str| ProgressObservation {
            tdd_scenario: Some(s.to_string()),
            ..obs(tree)
        };
        let stuck: Vec<_> = (0..8)
            .map(|i| scenario(&format!("t{i}"), "login works"))
            .collect();
        assert_eq!(run(&stuck, &config).0, "...WWO");
        let moving: Vec<_> = (0..8)
            .map(|i| scenario(&format!("t{i}"), &format!("s{}", i / 2)))
            .collect();
        assert_eq!(run(&moving, &config).0, "........");
    }

    #[test]
    fn patience_is_configurable() {
        for (patience, want) in [(1, "..WO"), (2, "..WWO"), (4, "..WWWWO")] {
            let config = BreakerConfig {
                patience,
                ..Default::default()
            };
            assert_eq!(
                run(&vec![obs("start"); 10], &config).0,
                want,
                "patience {patience}"
            );
        }
    }

    #[test]
    fn same_rejected_claim_transitions() {
        let config = BreakerConfig::default();
        let claim = |tree: &str, what: Option<&str>| ProgressObservation {
            rejected_claim: what.map(|w| ErrorSighting {
                fingerprint: crate::judge::errors::fingerprint(w),
                sample: w.to_string(),
            }),
            ..obs(tree)
        };
        // Files change every time, but the same claim fails the same way.
        let same: Vec<_> = (0..8)
            .map(|i| claim(&format!("t{i}"), Some("verification: tests exited 1")))
            .collect();
        assert_eq!(run(&same, &config).0, "..WWO");
        // Iterations without a claim do not break the run.
        let gaps: Vec<_> = (0..10)
            .map(|i| claim(&format!("t{i}"), (i % 2 == 0).then_some("plan: 1 item")))
            .collect();
        assert_eq!(run(&gaps, &config).0, "....WWO");
        // A different failure each time is no stall.
        let varied: Vec<_> = (0..8)
            .map(|i| {
                claim(
                    &format!("t{i}"),
                    Some(["plan: 1 item", "tests exited 1"][i % 2]),
                )
            })
            .collect();
        assert_eq!(run(&varied, &config).0, "........");
    }

    #[test]
    fn refused_tool_calls_end_a_loop_by_its_third_iteration() {
        let config = BreakerConfig::default();
        let unittest = crate::judge::errors::Refusal::of_call("Bash", Some("python3 -m unittest"));
        let denied = |tree: &str, refused: bool| ProgressObservation {
            denied: if refused {
                vec![unittest.clone()]
            } else {
                Vec::new()
            },
            ..obs(tree)
        };
        // (case, observations, trace): `O` is the breaker opening, which
        // ends the loop `circuit_open` (exit 11).
        let cases: Vec<(&str, Vec<ProgressObservation>, &str)> = vec![
            (
                "refused every iteration, nothing changes: open at the second",
                vec![denied("start", true); 6],
                ".O",
            ),
            (
                "refused from the second iteration on: open at the third",
                [vec![obs("start")], vec![denied("start", true); 5]].concat(),
                "..O",
            ),
            (
                "files change while a call is refused: a warning, never an opening",
                (0..6).map(|i| denied(&format!("t{i}"), true)).collect(),
                ".WWWWW",
            ),
            (
                "a refusal now and then is no run (whether files changed unknown)",
                (0..6)
                    .map(|i| ProgressObservation {
                        changed: None,
                        ..denied("start", i % 2 == 0)
                    })
                    .collect(),
                "......",
            ),
            (
                "a stop that could not see its calls yet breaks no run: open at the third",
                vec![
                    denied("start", true),
                    ProgressObservation {
                        tools_unseen: true,
                        ..denied("start", false)
                    },
                    denied("start", true),
                    denied("start", true),
                ],
                "..O",
            ),
            (
                "refused, whether files changed unknown: open at the second",
                vec![
                    ProgressObservation {
                        changed: None,
                        ..denied("start", true)
                    };
                    4
                ],
                ".O",
            ),
        ];
        for (name, observations, want) in cases {
            assert_eq!(run(&observations, &config).0, want, "{name}");
        }
        // Whatever the threshold, the opening skips the warning.
        for threshold in [1, 2, 3] {
            let config = BreakerConfig::default().with(Signal::PermissionDenied, threshold);
            let (trace, _) = run(&vec![denied("start", true); 6], &config);
            assert_eq!(
                u32::try_from(trace.len()).unwrap(),
                threshold,
                "threshold {threshold}: {trace}"
            );
            assert!(trace.ends_with('O') && !trace.contains('W'), "{trace}");
        }
        // The reason names the call and how to allow it.
        let (_, breaker) = run(&vec![denied("start", true); 3], &config);
        let reason = breaker.last_transition.unwrap().reason;
        assert!(
            reason.starts_with(
                "the client refused `Bash(python3 -m unittest)` for lack of permission in 2 iterations: run with the sandbox (`--sandbox`"
            ) && reason.contains(r#"`"permissions": {"allow": ["Bash(python3 -m unittest:*)"]}`"#)
                && reason.contains("`-- --permission-mode bypassPermissions`"),
            "{reason}"
        );
    }

    #[test]
    fn every_signal_has_a_distinct_key_and_variable() {
        let mut keys: Vec<_> = SIGNALS.iter().map(|s| s.config_key).collect();
        let mut vars: Vec<_> = SIGNALS.iter().map(|s| s.env_var).collect();
        keys.sort_unstable();
        keys.dedup();
        vars.sort_unstable();
        vars.dedup();
        assert_eq!(keys.len(), SIGNALS.len());
        assert_eq!(vars.len(), SIGNALS.len());
        let counters = serde_json::to_value(SignalCounters::default()).unwrap();
        assert_eq!(counters["noProgress"], 0);
        assert_eq!(counters["sameRejectedClaim"], 0);
        // A state written before a signal existed still loads.
        let old: SignalCounters = serde_json::from_str(r#"{"noProgress": 2}"#).unwrap();
        assert_eq!(old.get(Signal::NoProgress), 2);
        assert_eq!(old.get(Signal::SameRejectedClaim), 0);
    }

    #[test]
    fn the_docs_list_every_signal() {
        let readme = include_str!("../../../../docs/completion.md");
        for spec in SIGNALS {
            let row = format!(
                "`{}` / `{}` | {}",
                spec.config_key, spec.env_var, spec.default
            );
            assert!(
                readme.contains(&row),
                "docs/completion.md breaker table lacks {row}"
            );
            assert!(
                readme.contains(&format!("| {} |", spec.label)),
                "{}",
                spec.label
            );
        }
    }
}
