//! `ralph-ctl report --html FILE`: one self-contained page for the loop
//! (no script, no font, no image or style from anywhere else): how it ended
//! and why, a timeline of its iterations with their decisions, SVG charts of
//! the tokens of each iteration and of each breaker signal against its
//! threshold, the claims with their gate results, and each iteration's
//! excerpt. For the morning after a night's loop.

use std::fmt::Write as _;
use std::io::Write;
use std::path::Path;

use ralph_core::exit_codes;
use ralph_core::judge::breaker;
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{IterationRecord, LoopState};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use ralph_core::persist::store::StateStore;
use ralph_core::text::printable;

use crate::error::CmdResult;
use crate::error::CtlError;

/// `ralph-ctl report`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct ReportArgs {
    /// The file to write.
    #[arg(long, value_name = "FILE")]
    pub(crate) html: std::path::PathBuf,
}

/// `ralph-ctl report` as its arguments ask.
pub(crate) fn command(paths: &ProjectPaths, args: ReportArgs) -> CmdResult {
    run(paths, &args.html, &mut std::io::stdout())
}

/// Writes the loop's report to `file`; says where on `out`.
pub(crate) fn run(paths: &ProjectPaths, file: &Path, out: &mut dyn Write) -> CmdResult {
    let Some(state) = StateStore::new(paths).read()? else {
        // Said on stdout with the code of "no loop", as `watch` and `reload` do.
        let said = writeln!(
            out,
            "No Ralph loop in {}: nothing to report",
            paths.root.display()
        );
        return super::written(said, ralph_core::exit_codes::NO_LOOP);
    };
    // The loop was judged by its pin, not by config.json as it is now.
    let config = ralph_core::pin::loop_config(paths, &ProcessEnv, &state).ok();
    let page = html(paths, &state, config.as_ref());
    atomic::write_file(file, page.as_bytes(), 0o644).map_err(CtlError::io("write", file))?;
    let said = writeln!(
        out,
        "report written to {} ({} bytes)",
        file.display(),
        page.len()
    );
    super::written(said, exit_codes::OK)
}

/// Text made safe inside HTML: its markup escaped, and its control
/// characters made visible ([`printable`]), so that neither a browser nor
/// a terminal showing the file (`cat`, `less -R`) obeys the agent's text.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in printable(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}\
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}\
th{background:#f4f4f4}.ok{color:#1a7f37}.bad{color:#c62828}.muted{color:#777}\
.status{display:inline-block;padding:2px 8px;border-radius:4px;background:#eef;font-weight:600}\
pre{white-space:pre-wrap;margin:0;font-size:12px}svg{background:#fafafa;border:1px solid #eee}";

/// The whole page.
pub(crate) fn html(paths: &ProjectPaths, state: &LoopState, config: Option<&Config>) -> String {
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Ralph loop report</title>\
         <style>{STYLE}</style></head><body><h1>Ralph loop in {}</h1>",
        esc(&paths.root.display().to_string())
    );
    summary(&mut page, state);
    let _ = write!(
        page,
        "<h2>Tokens per iteration</h2>{}",
        tokens_chart(&state.history)
    );
    let _ = write!(
        page,
        "<h2>Breaker signals against their thresholds</h2>{}",
        breaker_chart(state, config)
    );
    timeline(&mut page, &state.history);
    queue(&mut page, state);
    claims(&mut page, state);
    page.push_str("</body></html>\n");
    page
}

fn summary(page: &mut String, state: &LoopState) {
    let _ = write!(
        page,
        "<p><span class=\"status\">{}</span> at iteration {} of {}</p><table>",
        esc(state.status.as_str()),
        state.iteration,
        state.max_iterations
    );
    let mut row = |label: &str, value: String| {
        let _ = write!(
            page,
            "<tr><th>{}</th><td>{}</td></tr>",
            esc(label),
            esc(&value)
        );
    };
    row("how it ended", lifecycle::outcome_line(state));
    row("session", state.session_id.clone());
    row("started", state.started_at.to_string());
    row(
        "ended",
        state
            .ended_at
            .map_or_else(|| "not yet".into(), |t| t.to_string()),
    );
    row("cost", state.cost_usd.to_string());
    row(
        "tokens",
        format!(
            "{} in, {} out, {} cache read, {} cache write",
            state.usage.input,
            state.usage.output,
            state.usage.cache_read,
            state.usage.cache_creation
        ),
    );
    if let Some(run) = &state.formula {
        row("formula", format!("{}, {}", run.name, run.position()));
    }
    if let Some(question) = &state.question {
        row(
            "the agent asks",
            format!("{} (iteration {})", question.text, question.iteration),
        );
    }
    for (name, window) in &state.usage_windows {
        row("usage window", format!("{name}: {}", window.describe()));
    }
    page.push_str("</table>");
}

/// Bars of each iteration's input and output tokens.
fn tokens_chart(history: &[IterationRecord]) -> String {
    if history.is_empty() {
        return "<p class=\"muted\">no iteration recorded yet</p>".into();
    }
    let (width, height, left, bottom, top) = (960.0_f64, 260.0_f64, 60.0, 30.0, 20.0);
    let max = history
        .iter()
        .map(|r| r.usage.input + r.usage.output)
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let slot = (width - left - 10.0) / history.len() as f64;
    let bar = (slot * 0.7).max(1.0);
    let scale = (height - bottom - top) / max;
    let mut svg = format!(
        "<svg id=\"tokens-chart\" role=\"img\" aria-label=\"tokens per iteration\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">"
    );
    let base = height - bottom;
    let _ = write!(
        svg,
        "<line x1=\"{left}\" y1=\"{base}\" x2=\"{}\" y2=\"{base}\" stroke=\"#999\"/>\
         <text x=\"4\" y=\"{}\" font-size=\"11\">{}</text><text x=\"4\" y=\"{base}\" font-size=\"11\">0</text>",
        width - 5.0,
        top + 4.0,
        max as u64
    );
    for (i, r) in history.iter().enumerate() {
        let x = left + i as f64 * slot + (slot - bar) / 2.0;
        let input = r.usage.input as f64 * scale;
        let output = r.usage.output as f64 * scale;
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{input:.1}\" fill=\"#2f6fdf\"><title>iteration {}: {} input tokens</title></rect>\
             <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{output:.1}\" fill=\"#f08c00\"><title>iteration {}: {} output tokens</title></rect>\
             <text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            base - input,
            r.iteration,
            r.usage.input,
            base - input - output,
            r.iteration,
            r.usage.output,
            x + bar / 2.0,
            base + 14.0,
            r.iteration
        );
    }
    svg.push_str(
        "<rect x=\"700\" y=\"6\" width=\"10\" height=\"10\" fill=\"#2f6fdf\"/><text x=\"714\" y=\"15\" font-size=\"11\">input</text>\
         <rect x=\"770\" y=\"6\" width=\"10\" height=\"10\" fill=\"#f08c00\"/><text x=\"784\" y=\"15\" font-size=\"11\">output</text></svg>",
    );
    svg
}

/// Each breaker signal's count as a bar, its threshold as a red mark.
fn breaker_chart(state: &LoopState, config: Option<&Config>) -> String {
    let defaults = Config::default();
    let config = config.unwrap_or(&defaults);
    let row_height = 26.0_f64;
    let (width, left) = (960.0_f64, 230.0_f64);
    let height = row_height * breaker::SIGNALS.len() as f64 + 20.0;
    let max = breaker::SIGNALS
        .iter()
        .map(|s| {
            s.trips_at(&config.breaker)
                .max(state.breaker.counters.get(s.signal))
        })
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let scale = (width - left - 40.0) / max;
    let mut svg = format!(
        "<svg id=\"breaker-chart\" role=\"img\" aria-label=\"breaker signals\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\">"
    );
    for (i, spec) in breaker::SIGNALS.iter().enumerate() {
        let y = 10.0 + i as f64 * row_height;
        let count = state.breaker.counters.get(spec.signal);
        let threshold = spec.trips_at(&config.breaker);
        let colour = if count >= threshold {
            "#c62828"
        } else {
            "#2f6fdf"
        };
        let _ = write!(
            svg,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"12\">{} ({count}/{threshold})</text>\
             <rect x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"16\" fill=\"{colour}\"/>\
             <line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#c62828\" stroke-width=\"2\"/>",
            y + 12.0,
            esc(spec.label),
            (count as f64 * scale).max(0.0),
            y - 2.0,
            y + 18.0,
            x = left + threshold as f64 * scale,
        );
    }
    let _ = write!(
        svg,
        "</svg><p class=\"muted\">breaker {}; the red mark is where each signal opens it</p>",
        esc(state.breaker.state.as_str())
    );
    svg
}

fn timeline(page: &mut String, history: &[IterationRecord]) {
    page.push_str(
        "<h2>Iterations</h2><table><tr><th>#</th><th>at</th><th>decision</th><th>why</th><th>tools</th>\
         <th>tokens in/out</th><th>claim</th><th>excerpt of the message</th></tr>",
    );
    for r in history {
        let claim = match &r.claim {
            Some(c) if c.accepted => {
                format!("<span class=\"ok\">accepted</span> ({})", esc(&c.basis))
            }
            Some(c) => format!(
                "<span class=\"bad\">rejected</span>: {}",
                esc(&c
                    .failed_gates
                    .iter()
                    .map(|g| format!("{g:?}"))
                    .collect::<Vec<_>>()
                    .join(", "))
            ),
            None => "<span class=\"muted\">none</span>".into(),
        };
        let error = r
            .error
            .as_deref()
            .map(|e| format!("<br><span class=\"bad\">error: {}</span>", esc(e)))
            .unwrap_or_default();
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}{error}</td><td>{}</td><td>{}/{}</td><td>{claim}</td><td><pre>{}</pre></td></tr>",
            r.iteration,
            esc(&r.at.to_string()),
            esc(&format!("{:?}", r.decision).to_lowercase()),
            esc(&r.why),
            r.tool_calls,
            r.usage.input,
            r.usage.output,
            esc(&r.excerpt)
        );
    }
    page.push_str("</table>");
}

/// A queue run's items: one row each.
fn queue(page: &mut String, state: &LoopState) {
    let Some(queue) = &state.queue else {
        return;
    };
    let _ = write!(
        page,
        "<h2>Queue</h2><p>{}, {}</p><table><tr><th>item</th><th>title</th><th>status</th>\
         <th>worker</th><th>iterations</th><th>cost</th><th>branch</th><th>why</th></tr>",
        esc(&queue.source),
        esc(&queue.counts_line())
    );
    for (id, item) in &queue.items {
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(id),
            esc(&item.title),
            esc(item.status.as_str()),
            esc(&item.worker),
            item.iterations,
            esc(&item.cost_usd.to_string()),
            esc(item.branch.as_deref().unwrap_or_default()),
            esc(item.why.as_deref().unwrap_or_default())
        );
    }
    page.push_str("</table>");
}

fn claims(page: &mut String, state: &LoopState) {
    page.push_str("<h2>Last claim and its gates</h2>");
    let Some(claim) = &state.last_claim else {
        page.push_str("<p class=\"muted\">no completion claim was made</p>");
        return;
    };
    let _ = write!(
        page,
        "<p>iteration {}: {} ({})</p><table><tr><th>gate</th><th>result</th><th>detail</th></tr>",
        claim.iteration,
        if claim.accepted {
            "<span class=\"ok\">accepted</span>"
        } else {
            "<span class=\"bad\">rejected</span>"
        },
        esc(&claim.basis)
    );
    for gate in &claim.gates {
        let _ = write!(
            page,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(gate.gate.as_str()),
            if gate.passed {
                "<span class=\"ok\">passed</span>"
            } else {
                "<span class=\"bad\">failed</span>"
            },
            esc(&gate.detail)
        );
    }
    for v in &claim.verification {
        let base = state.test_baseline.iter().find(|b| b.command == v.command);
        let counts = match (&v.counts, base) {
            (Some(now), Some(base)) => format!(
                "<p>tests: {} (at the start: {})</p>",
                esc(&now.describe()),
                esc(&base.counts.describe())
            ),
            (Some(now), None) => format!("<p>tests: {}</p>", esc(&now.describe())),
            (None, Some(base)) => format!(
                "<p>tests: no summary read (at the start: {})</p>",
                esc(&base.counts.describe())
            ),
            (None, None) => String::new(),
        };
        let _ = write!(
            page,
            "<tr><td>verify: {}</td><td>{}</td><td><code>{}</code>{counts}<pre>{}</pre></td></tr>",
            esc(&v.name),
            if v.passed() {
                "<span class=\"ok\">passed</span>"
            } else {
                "<span class=\"bad\">failed</span>"
            },
            esc(&v.command),
            esc(&v.output_tail)
        );
    }
    page.push_str("</table>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::completion::{CompletionMode, Gate, GateResult};
    use ralph_core::judge::state::ClaimRecord;
    use ralph_core::observe::test_counts::{CommandCounts, TestCounts};
    use ralph_core::observe::verify::VerifyResult;

    #[test]
    fn a_queue_run_has_a_row_per_item_escaped() {
        let state = crate::testdir::queue_run_state();
        let page = html(&ProjectPaths::new("/p"), &state, None);
        assert!(page.contains("<h2>Queue</h2><p>plan:PLAN.md, 3 items taken: 1 done, 1 working, 1 needs-review</p>"), "{page}");
        assert!(page.contains("<td>plan-a</td><td>add &lt;b&gt;</td><td>done</td><td>4242-1</td><td>2</td><td>$0.5000</td>"), "{page}");
        assert!(page.contains("<td>needs-review</td>"), "{page}");
    }

    #[test]
    fn the_last_claim_shows_its_test_counts_beside_the_baseline() {
        let mut state = LoopState::new(
            "s".into(),
            5,
            ralph_core::time::Timestamp::from_secs(1767225600),
        );
        state.test_baseline = vec![CommandCounts {
            command: "python3 -m unittest".into(),
            counts: TestCounts::new(2, 1, 0),
            runners: vec!["unittest".into()],
        }];
        state.last_claim = Some(ClaimRecord {
            iteration: 1,
            at: ralph_core::time::Timestamp::from_secs(1767225660),
            mode: CompletionMode::Strict,
            basis: "signal".into(),
            score: None,
            accepted: false,
            gates: vec![GateResult {
                gate: Gate::TestCount,
                passed: false,
                detail: "verify `python3 -m unittest` ran 2 tests (baseline 3)".into(),
            }],
            verification: vec![VerifyResult {
                name: "tests".into(),
                command: "python3 -m unittest".into(),
                exit_code: Some(0),
                timed_out: false,
                duration_ms: 40,
                output_tail: "OK (skipped=1)".into(),
                counts: Some(TestCounts::new(2, 0, 1)),
                by_runner: vec![("unittest".into(), TestCounts::new(2, 0, 1))],
            }],
        });
        let page = html(&ProjectPaths::new(Path::new("/p")), &state, None);
        assert!(
            page.contains(
                "<p>tests: 2 run (2 passed, 0 failed), 1 skipped (at the start: 3 run (2 passed, 1 failed), 0 skipped)</p>"
            ),
            "{page}"
        );
        assert!(page.contains("ran 2 tests (baseline 3)"), "{page}");
        // The gate by the name `status`, the log and the notices give it.
        assert!(
            page.contains("<tr><td>test_count</td><td><span class=\"bad\">failed</span></td>"),
            "{page}"
        );
    }
}
