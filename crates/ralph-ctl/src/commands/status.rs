//! `ralph-ctl status`: a readable summary of the loop, or its JSON.

use ralph_core::breaker;
use ralph_core::config::{Config, ProcessEnv};
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::state::LoopState;
use ralph_core::store::{StateStore, StoreError};

use crate::CmdResult;

/// How many recent stops the readable summary lists.
const RECENT: usize = 10;

/// Prints the state; a corrupt state is shown with its problem (exit 1).
pub fn run(paths: &ProjectPaths, json: bool) -> CmdResult {
    let store = StateStore::new(paths);
    match store.read() {
        Ok(state) => {
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&state).expect("state serializes")
                );
            } else {
                match state {
                    Some(state) => {
                        let config = Config::load(paths, &ProcessEnv);
                        if let Err(e) = &config {
                            println!("(configuration problem: {e})");
                        }
                        print!("{}", summary(paths, &state, config.as_ref().ok()));
                    }
                    None => println!(
                        "No Ralph loop in {} (no state file). Start one with .claude/ralph/ralph-audit.sh.",
                        paths.root.display()
                    ),
                }
            }
            Ok(exit_codes::OK)
        }
        Err(e @ StoreError::Corrupt { .. }) => {
            if json {
                let body = serde_json::json!({"error": e.to_string(), "path": store.path()});
                println!("{}", serde_json::to_string_pretty(&body).expect("json"));
            } else {
                println!("Ralph loop state in {} is unusable:", paths.root.display());
                println!("  {e}");
                let head = std::fs::read(store.path())
                    .map(|b| String::from_utf8_lossy(&b[..b.len().min(300)]).into_owned())
                    .unwrap_or_default();
                if !head.is_empty() {
                    println!("  it begins: {head:?}");
                }
            }
            Ok(exit_codes::ERROR)
        }
        Err(e) => Err(e.into()),
    }
}

/// The readable summary of a state; `config` supplies the breaker's thresholds.
pub fn summary(paths: &ProjectPaths, state: &LoopState, config: Option<&Config>) -> String {
    let mut out = format!("Ralph loop in {}\n", paths.root.display());
    let mut line = |label: &str, value: String| out.push_str(&format!("  {label:<11} {value}\n"));
    line("status:", state.status.as_str().to_string());
    line(
        "iteration:",
        format!("{} of {}", state.iteration, state.max_iterations),
    );
    line("session:", state.session_id.clone());
    line("started:", state.started_at.clone());
    line(
        "last stop:",
        state
            .last_run_at
            .clone()
            .unwrap_or_else(|| "none yet".into()),
    );
    if let Some(ended) = &state.ended_at {
        line("ended:", ended.clone());
    }
    if let Some(because) = &state.ended_because {
        line("because:", because.clone());
    }
    line(
        "findings:",
        match state.last_findings_count {
            Some(n) => format!("{n} remain"),
            None => "not reported".into(),
        },
    );
    let b = &state.breaker;
    line("breaker:", b.state.as_str().to_string());
    let signals: Vec<String> = breaker::SIGNALS
        .iter()
        .map(|spec| {
            let count = b.counters.get(spec.signal);
            match config {
                Some(c) => format!("{} {count}/{}", spec.label, spec.trips_at(&c.breaker)),
                None => format!("{} {count}", spec.label),
            }
        })
        .collect();
    line("signals:", signals.join(", "));
    if let Some(tr) = &b.last_transition {
        line(
            "transition:",
            format!(
                "{} → {} at iteration {} ({}): {}",
                tr.from.as_str(),
                tr.to.as_str(),
                tr.iteration,
                tr.at,
                tr.reason
            ),
        );
    }
    if let Some(claim) = &state.last_claim {
        line(
            "last claim:",
            format!(
                "iteration {} ({}), {}: {}",
                claim.iteration,
                claim.mode.as_str(),
                if claim.accepted {
                    "accepted"
                } else {
                    "rejected"
                },
                claim.basis
            ),
        );
        for gate in &claim.gates {
            let first = gate.detail.lines().next().unwrap_or_default();
            line(
                "  gate:",
                format!(
                    "{} {}: {first}",
                    gate.gate.as_str(),
                    if gate.passed { "passed" } else { "FAILED" }
                ),
            );
        }
        if let Some(last) = claim.verification.last() {
            line(
                "  verify:",
                format!(
                    "`{}` exit {} in {} ms{}",
                    last.command,
                    last.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "none".into()),
                    last.duration_ms,
                    if last.timed_out { " (timed out)" } else { "" }
                ),
            );
            for tail in last.output_tail.lines() {
                out.push_str(&format!("      | {tail}\n"));
            }
        }
    }
    if !state.history.is_empty() {
        out.push_str("Recent stops (newest last):\n");
        let skip = state.history.len().saturating_sub(RECENT);
        for record in &state.history[skip..] {
            out.push_str(&format!(
                "  #{:<3} {}  {:<5}  {}\n",
                record.iteration,
                record.at,
                match record.decision {
                    ralph_core::state::StopDecision::Block => "block",
                    ralph_core::state::StopDecision::Allow => "allow",
                },
                record.why
            ));
            if !record.excerpt.is_empty() {
                out.push_str(&format!("        said: {}\n", record.excerpt));
            }
            if let Some(error) = &record.error {
                out.push_str(&format!("        error: {error}\n"));
            }
            if let Some(transition) = &record.breaker {
                out.push_str(&format!("        breaker: {transition}\n"));
            }
            if let Some(claim) = &record.claim {
                out.push_str(&format!("        claim: {claim}\n"));
            }
        }
    }
    out
}
