//! The rules of a loop's life outside its stops, beside [`crate::decision`]
//! so every driver applies the same ones: when a new loop may start (not
//! over a running one, not over an open breaker until its cooldown), how a
//! loop whose client went away is marked `interrupted`, and which exit code
//! each ending has. Pure: the caller holds the lock and passes the time.

use std::path::Path;
use std::time::SystemTime;

use crate::config::Config;
use crate::decision::MessageSource;
use crate::exit_codes;
use crate::state::{excerpt, IterationRecord, LoopState, Status, StopDecision};
use crate::time;

/// Why a new loop may not start over the current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartRefusal {
    /// A loop is running.
    Running {
        /// Its session.
        session_id: String,
        /// Where it is.
        iteration: u32,
        /// Its cap.
        max_iterations: u32,
        /// Its last stop, if any.
        last_run_at: Option<String>,
    },
    /// The last loop ended with the circuit breaker open, and no cooldown has passed.
    BreakerOpen {
        /// The iteration it stalled at.
        iteration: u32,
        /// Why the breaker opened.
        reason: String,
        /// The configured cooldown, when there is one.
        cooldown_minutes: Option<u32>,
    },
}

impl StartRefusal {
    /// The refusal for a person, naming the project and what to do.
    pub fn describe(&self, root: &Path) -> String {
        match self {
            StartRefusal::Running {
                session_id,
                iteration,
                max_iterations,
                last_run_at,
            } => format!(
                "a loop is already running in {} (session {session_id}, iteration {iteration} of {max_iterations}, \
                 last stop {}); let it finish, or run `ralph-ctl reset`, or start with --force",
                root.display(),
                last_run_at.as_deref().unwrap_or("none yet")
            ),
            StartRefusal::BreakerOpen {
                iteration,
                reason,
                cooldown_minutes,
            } => {
                let cooldown = match cooldown_minutes {
                    Some(m) => {
                        format!(", or wait until {m} minute(s) after it opened (CB_COOLDOWN_MINUTES)")
                    }
                    None => String::new(),
                };
                format!(
                    "the circuit breaker is open in {}: the last loop stalled at iteration {iteration} ({reason}); \
                     fix what blocked it, then run `ralph-ctl reset` (or the launcher with --reset){cooldown}",
                    root.display()
                )
            }
        }
    }
}

/// Whether a new loop may start over `current` at `now`: `None` when it
/// may, else why not (a person may still force it).
pub fn start_refusal(
    current: Option<&LoopState>,
    config: &Config,
    now: SystemTime,
) -> Option<StartRefusal> {
    let current = current?;
    match current.status {
        Status::Running => Some(StartRefusal::Running {
            session_id: current.session_id.clone(),
            iteration: current.iteration,
            max_iterations: current.max_iterations,
            last_run_at: current.last_run_at.clone(),
        }),
        Status::CircuitOpen if !cooled_down(current, config, now) => {
            Some(StartRefusal::BreakerOpen {
                iteration: current.iteration,
                reason: current
                    .breaker
                    .last_transition
                    .as_ref()
                    .map(|t| t.reason.clone())
                    .or(current.ended_because.clone())
                    .unwrap_or_default(),
                cooldown_minutes: config.cooldown_minutes,
            })
        }
        _ => None,
    }
}

/// True when the breaker opened longer ago than the configured cooldown.
pub fn cooled_down(state: &LoopState, config: &Config, now: SystemTime) -> bool {
    let Some(minutes) = config.cooldown_minutes else {
        return false;
    };
    let opened = state
        .breaker
        .last_transition
        .as_ref()
        .map(|t| t.at.as_str())
        .or(state.ended_at.as_deref())
        .and_then(time::parse_rfc3339);
    match opened.and_then(|at| now.duration_since(at).ok()) {
        Some(elapsed) => elapsed.as_secs() >= u64::from(minutes) * 60,
        None => false,
    }
}

/// Marks a loop that is still `running` as `interrupted`, because of
/// `cause` (`"Claude Code exited with code 1"`, `"SIGTERM"`), with a history
/// record; returns false (and changes nothing) when it had already ended.
pub fn interrupt(state: &mut LoopState, cause: &str, now: &str) -> bool {
    if state.status != Status::Running {
        return false;
    }
    let because = format!(
        "{cause} while the loop was running at iteration {} of {}",
        state.iteration, state.max_iterations
    );
    state.push_history(IterationRecord {
        iteration: state.iteration,
        at: now.to_string(),
        decision: StopDecision::Allow,
        why: because.clone(),
        excerpt: excerpt(""),
        stop_hook_active: false,
        findings: None,
        message_source: MessageSource::Missing,
        tool_calls: 0,
        error: None,
        breaker: None,
        status_block: None,
        claim: None,
    });
    state.end(Status::Interrupted, because, now);
    true
}

/// The exit code of a loop that ended with `status` (the README's table).
pub fn exit_code(status: Status) -> i32 {
    match status {
        Status::Complete => exit_codes::OK,
        Status::MaxIterations => exit_codes::MAX_ITERATIONS,
        Status::CircuitOpen => exit_codes::CIRCUIT_OPEN,
        Status::Interrupted | Status::Running => exit_codes::INTERRUPTED,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::{BreakerState, Transition};
    use std::time::Duration;

    fn ended(status: Status, at: &str) -> LoopState {
        let mut s = LoopState::new("s".into(), 5, "2026-11-22T09:00:00Z".into());
        s.iteration = 4;
        s.end(status, "why".into(), at);
        s
    }

    #[test]
    fn start_rules_table() {
        let at = |t: &str| time::parse_rfc3339(t).unwrap();
        let mut open = ended(Status::CircuitOpen, "2026-11-22T10:00:00Z");
        open.breaker.last_transition = Some(Transition {
            iteration: 4,
            at: "2026-11-22T10:00:00Z".into(),
            from: BreakerState::HalfOpen,
            to: BreakerState::Open,
            reason: "no file changed in 5 iterations".into(),
        });
        let cooldown = |m| Config {
            cooldown_minutes: m,
            ..Config::default()
        };
        let running = LoopState::new("s".into(), 5, "t".into());
        let now = at("2026-11-22T10:20:00Z");
        let cases: Vec<(Option<&LoopState>, Config, SystemTime, bool)> = vec![
            (None, Config::default(), now, false),
            (Some(&running), Config::default(), now, true),
            (Some(&open), Config::default(), now, true),
            (Some(&open), cooldown(Some(30)), now, true),
            (
                Some(&open),
                cooldown(Some(30)),
                now + Duration::from_secs(600),
                false,
            ),
            (Some(&open), cooldown(Some(10)), now, false),
        ];
        for (state, config, now, refused) in cases {
            let refusal = start_refusal(state, &config, now);
            assert_eq!(
                refusal.is_some(),
                refused,
                "{state:?} {:?}",
                config.cooldown_minutes
            );
        }
        for status in [Status::Complete, Status::MaxIterations, Status::Interrupted] {
            assert_eq!(
                start_refusal(Some(&ended(status, "t")), &Config::default(), now),
                None
            );
        }
        let text = start_refusal(Some(&open), &cooldown(Some(30)), now)
            .unwrap()
            .describe(Path::new("/p"));
        assert!(
            text.contains("no file changed in 5 iterations") && text.contains("30 minute(s)"),
            "{text}"
        );
    }

    #[test]
    fn only_a_running_loop_is_interrupted() {
        let mut running = LoopState::new("s".into(), 5, "t".into());
        running.iteration = 3;
        assert!(interrupt(&mut running, "SIGTERM", "t2"));
        assert_eq!(running.status, Status::Interrupted);
        assert_eq!(
            running.ended_because.as_deref(),
            Some("SIGTERM while the loop was running at iteration 3 of 5")
        );
        assert_eq!(running.history.len(), 1);
        let mut done = ended(Status::Complete, "t");
        let before = done.clone();
        assert!(!interrupt(&mut done, "SIGTERM", "t2"));
        assert_eq!(done, before);
        assert_eq!(exit_code(Status::CircuitOpen), exit_codes::CIRCUIT_OPEN);
    }
}
