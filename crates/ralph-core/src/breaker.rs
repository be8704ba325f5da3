//! The three-state circuit breaker that stops a stalled loop.
//!
//! `closed` is normal. When a stall signal reaches its threshold the breaker
//! goes `half_open`: the loop goes on, but the re-injected text starts with a
//! notice saying what was detected. If the stall clears (the signal that
//! tripped falls back under its threshold, which takes real progress), it
//! returns to `closed`; if it persists for the patience window, it goes
//! `open` and the loop stops with status `circuit_open`.
//!
//! [`step`] is pure: it takes the previous breaker and what this stop
//! observed, and returns the next breaker and what the loop must do.

use serde::{Deserialize, Serialize};

use crate::errors::ErrorSighting;
use crate::progress::Baseline;

/// How many recent final-message lengths the output-decline signal averages.
pub const OUTPUT_WINDOW: usize = 3;
/// Consecutive declining iterations that trip the output-decline signal.
pub const OUTPUT_DECLINE_ITERATIONS: u32 = 2;

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

/// The thresholds, from the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive stops with nothing changed in the project.
    pub no_progress: u32,
    /// Consecutive iterations ending on the same (normalised) error.
    pub same_error: u32,
    /// Consecutive iterations whose findings count equals the previous one.
    pub findings_stuck: u32,
    /// Percent by which the final message must be shorter than the recent average to count as a decline.
    pub output_decline_percent: u32,
    /// Consecutive iterations with the TDD scenario unchanged.
    pub tdd_stuck: u32,
    /// Iterations in `half_open` without recovery before the breaker opens.
    pub patience: u32,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            no_progress: 3,
            same_error: 5,
            findings_stuck: 3,
            output_decline_percent: 70,
            tdd_stuck: 3,
            patience: 2,
        }
    }
}

/// Per-signal counters, persisted so `ralph-ctl status` can show them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SignalCounters {
    /// Consecutive stops at which the project had not changed since the previous one.
    pub no_progress: u32,
    /// Consecutive iterations ending on the same error.
    pub same_error: u32,
    /// Consecutive iterations with an unchanged findings count.
    pub findings_stuck: u32,
    /// Consecutive iterations whose final message declined sharply.
    pub output_decline: u32,
    /// Consecutive iterations with an unchanged TDD scenario.
    pub tdd_stuck: u32,
}

/// A change of breaker state, kept with its reason.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Transition {
    /// The iteration whose stop caused it.
    pub iteration: u32,
    /// When.
    pub at: String,
    /// The state before.
    pub from: BreakerState,
    /// The state after.
    pub to: BreakerState,
    /// Why, in words.
    pub reason: String,
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
    /// The most recent transition.
    pub last_transition: Option<Transition>,
}

/// What one stop observed that bears on progress.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProgressObservation {
    /// Whether the project changed since the previous stop (`None`: the
    /// reading cannot tell).
    pub changed: Option<bool>,
    /// The baseline the next stop compares with (`None`: keep the previous one).
    pub baseline: Option<Baseline>,
    /// The error this iteration ended on, if any.
    pub error: Option<ErrorSighting>,
    /// The findings count reported now, if any.
    pub findings: Option<u64>,
    /// The findings count reported before, if any.
    pub previous_findings: Option<u64>,
    /// Length of the final message, in characters.
    pub output_chars: usize,
    /// Whether the agent did anything that could change the project (a tool
    /// call) or ran into an error. An unchanged project after an iteration
    /// that did neither is no evidence of a stall.
    pub acted: bool,
    /// The TDD scenario now, when a TDD state file exists.
    pub tdd_scenario: Option<String>,
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
    now: &str,
) -> (Breaker, BreakerEffect) {
    let mut next = previous.clone();
    let c = &mut next.counters;

    match observed.changed {
        Some(false) if observed.acted => c.no_progress = c.no_progress.saturating_add(1),
        // Unchanged after an iteration that tried nothing: no evidence either way.
        Some(false) => {}
        Some(true) => c.no_progress = 0,
        // The reading cannot tell: no evidence either way.
        None => {}
    }
    if observed.baseline.is_some() {
        next.progress = observed.baseline.clone();
    }

    c.same_error = match (&observed.error, &previous.last_error) {
        (Some(now), Some(before)) if now.fingerprint == before.fingerprint => {
            c.same_error.saturating_add(1)
        }
        (Some(_), _) => 1,
        (None, _) => 0,
    };
    next.last_error = observed.error.clone();

    if let Some(findings) = observed.findings {
        c.findings_stuck = if observed.previous_findings == Some(findings) {
            c.findings_stuck.saturating_add(1)
        } else {
            0
        };
    }

    let recent = &previous.recent_output_lengths;
    if recent.len() >= OUTPUT_WINDOW {
        let window = &recent[recent.len() - OUTPUT_WINDOW..];
        let average = window.iter().sum::<usize>() as u128 / OUTPUT_WINDOW as u128;
        let declined = average > 0
            && (observed.output_chars as u128) * 100
                < average * u128::from(100 - config.output_decline_percent.min(100));
        c.output_decline = if declined {
            c.output_decline.saturating_add(1)
        } else {
            0
        };
    }
    next.recent_output_lengths.push(observed.output_chars);
    let excess = next
        .recent_output_lengths
        .len()
        .saturating_sub(OUTPUT_WINDOW);
    next.recent_output_lengths.drain(..excess);

    c.tdd_stuck = match (&observed.tdd_scenario, &previous.last_tdd_scenario) {
        (Some(now), Some(before)) if now == before => c.tdd_stuck.saturating_add(1),
        _ => 0,
    };
    next.last_tdd_scenario = observed.tdd_scenario.clone();

    let stalls = stalls(&next, observed, config);
    let transition = |from, to, reason: String| Transition {
        iteration,
        at: now.to_string(),
        from,
        to,
        reason,
    };
    let effect = match previous.state {
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
            BreakerEffect::Warn(notice(&reason, config.patience))
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
                .map(|t| t.reason.clone())
                .unwrap_or_else(|| "the breaker is open".into()),
        ),
    };
    (next, effect)
}

/// Each signal at or over its threshold, described for a person.
fn stalls(
    breaker: &Breaker,
    observed: &ProgressObservation,
    config: &BreakerConfig,
) -> Vec<String> {
    let c = &breaker.counters;
    let mut out = Vec::new();
    if c.no_progress >= config.no_progress {
        out.push(format!("no file changed in {} iterations", c.no_progress));
    }
    if c.same_error >= config.same_error {
        let sample = breaker
            .last_error
            .as_ref()
            .map(|e| e.sample.as_str())
            .unwrap_or_default();
        out.push(format!("same error {} times: `{sample}`", c.same_error));
    }
    if c.findings_stuck >= config.findings_stuck {
        out.push(format!(
            "findings count stuck at {} for {} iterations",
            observed
                .findings
                .or(observed.previous_findings)
                .unwrap_or_default(),
            c.findings_stuck
        ));
    }
    if c.output_decline >= OUTPUT_DECLINE_ITERATIONS {
        out.push(format!(
            "final message more than {}% shorter than the recent average for {} iterations",
            config.output_decline_percent, c.output_decline
        ));
    }
    if c.tdd_stuck >= config.tdd_stuck {
        out.push(format!(
            "TDD scenario `{}` unchanged for {} iterations",
            breaker.last_tdd_scenario.as_deref().unwrap_or_default(),
            c.tdd_stuck
        ));
    }
    out
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
            fingerprint: crate::errors::fingerprint(s),
            sample: s.to_string(),
        })
    }

    /// A stop after an iteration that used a tool, with the project changed
    /// since the previous stop or not.
    fn obs(changed: bool) -> ProgressObservation {
        ProgressObservation {
            changed: Some(changed),
            output_chars: 100,
            acted: true,
            ..Default::default()
        }
    }

    fn unchanged() -> ProgressObservation {
        obs(false)
    }

    fn changed() -> ProgressObservation {
        obs(true)
    }

    /// Runs observations through the breaker; returns the effect letter of
    /// each stop: `.` quiet, `W` warn, `O` open.
    fn run(observations: &[ProgressObservation], config: &BreakerConfig) -> (String, Breaker) {
        let mut breaker = Breaker::default();
        let mut trace = String::new();
        for (i, o) in observations.iter().enumerate() {
            let (next, effect) = step(&breaker, o, config, i as u32 + 1, "t");
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
        let same = |n| vec![unchanged(); n];
        let changing = vec![changed(); 10];
        let mut recovers = same(3);
        recovers.push(changed());
        recovers.push(unchanged());
        let mut not_acting = same(2);
        not_acting.extend(vec![
            ProgressObservation {
                acted: false,
                ..unchanged()
            };
            4
        ]);
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
                "readings that cannot tell are no evidence",
                vec![ProgressObservation::default(); 6],
                "......",
            ),
            (
                "unchanged after an iteration that tried nothing is no evidence",
                not_acting,
                "......",
            ),
        ];
        for (name, observations, want) in cases {
            assert_eq!(run(&observations, &config).0, want, "{name}");
        }
    }

    #[test]
    fn the_baseline_is_kept_until_a_reading_brings_a_new_one() {
        let dir = crate::tempdir::TempDir::new();
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        let first = crate::progress::baseline(dir.path()).unwrap();
        let with = |baseline: Option<Baseline>| ProgressObservation {
            baseline,
            ..unchanged()
        };
        let (breaker, _) = step(
            &Breaker::default(),
            &with(Some(first.clone())),
            &BreakerConfig::default(),
            1,
            "t",
        );
        assert_eq!(breaker.progress.as_ref(), Some(&first));
        let (breaker, _) = step(&breaker, &with(None), &BreakerConfig::default(), 2, "t");
        assert_eq!(breaker.progress.as_ref(), Some(&first), "kept");
        assert_eq!(breaker.counters.no_progress, 2);
    }

    #[test]
    fn a_state_written_with_a_fingerprint_still_loads() {
        let old = r#"{"state": "half_open", "counters": {"noProgress": 3, "sameError": 0, "findingsStuck": 0, "outputDecline": 0, "tddStuck": 0}, "halfOpenIterations": 1,
                      "lastFingerprint": "git:0123456789abcdef", "recentOutputLengths": [10]}"#;
        let breaker: Breaker = serde_json::from_str(old).unwrap();
        assert_eq!(breaker.state, BreakerState::HalfOpen);
        assert_eq!(breaker.counters.no_progress, 3);
        assert_eq!(breaker.progress, None);
        let json = serde_json::to_value(&breaker).unwrap();
        assert!(json.get("lastFingerprint").is_none(), "{json}");
    }

    #[test]
    fn half_open_then_closed_is_recorded() {
        let mut o = vec![unchanged(); 3];
        o.push(changed());
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
        let (trace, breaker) = run(&vec![unchanged(); 10], &BreakerConfig::default());
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
        let config = BreakerConfig {
            same_error: 3,
            ..Default::default()
        };
        let with_error = |e: &str| ProgressObservation {
            error: err(e),
            ..obs(true)
        };
        // Files change each time (so no-progress never trips) but the same error repeats.
        let repeating = vec![with_error("error: E1"); 8];
        assert_eq!(run(&repeating, &config).0, "..WWO");
        // A different error each time resets the count.
        let varied: Vec<_> = (0..8)
            .map(|i| with_error(&format!("error: E{i}")))
            .collect();
        assert_eq!(run(&varied, &config).0, "........");
        // The error goes away in half-open: closed again.
        let mut fixed = vec![with_error("error: E1"); 3];
        fixed.push(changed());
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
        let report = |now: u64, before: Option<u64>| ProgressObservation {
            findings: Some(now),
            previous_findings: before,
            ..obs(true)
        };
        let stuck: Vec<_> = (0..8)
            .map(|i| report(4, if i == 0 { None } else { Some(4) }))
            .collect();
        assert_eq!(
            run(&stuck, &config).0,
            "...WWO",
            "first report is no comparison; 3 unchanged → warn"
        );
        let falling: Vec<_> = (0..8)
            .map(|i| report(10 - i, if i == 0 { None } else { Some(11 - i) }))
            .collect();
        assert_eq!(run(&falling, &config).0, "........");
    }

    #[test]
    fn output_decline_transitions() {
        let config = BreakerConfig::default();
        let sized = |chars| ProgressObservation {
            output_chars: chars,
            ..obs(true)
        };
        let shrinking: Vec<_> = [1000, 1000, 1000, 100, 100, 100, 100]
            .into_iter()
            .map(sized)
            .collect();
        // The 4th is the first decline (avg 1000), the 5th the second (avg 700): warn.
        // The 6th compares with (1000+100+100)/3 = 400: 100 < 120, still declining.
        // The 7th compares with 100: a steady low output is no decline, so it recovers
        // (a loop that is stuck at a low output is caught by the other signals).
        assert_eq!(run(&shrinking, &config).0, "....WW.");
        let collapsing: Vec<_> = [1000, 1000, 1000, 250, 60, 10, 1]
            .into_iter()
            .map(sized)
            .collect();
        assert_eq!(run(&collapsing, &config).0, "....WWO");
        let steady: Vec<_> = (0..8).map(|i| sized(500 + i)).collect();
        assert_eq!(run(&steady, &config).0, "........");
        let one_dip: Vec<_> = [1000, 1000, 1000, 100, 1000, 1000]
            .into_iter()
            .map(sized)
            .collect();
        assert_eq!(run(&one_dip, &config).0, "......");
    }

    #[test]
    fn tdd_stuck_transitions() {
        let config = BreakerConfig::default();
        let scenario = |s: &str| ProgressObservation {
            tdd_scenario: Some(s.to_string()),
            ..obs(true)
        };
        let stuck = vec![scenario("login works"); 8];
        assert_eq!(run(&stuck, &config).0, "...WWO");
        let moving: Vec<_> = (0..8).map(|i| scenario(&format!("s{}", i / 2))).collect();
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
                run(&vec![unchanged(); 10], &config).0,
                want,
                "patience {patience}"
            );
        }
    }
}
