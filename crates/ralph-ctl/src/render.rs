//! The one rendering of a loop as HTML, shared by `ralph-ctl report
//! --html` (a page written once) and `ralph-ctl serve` (the same sections,
//! fetched again as the loop moves): the status and what stands in its way,
//! cost and tokens, the breaker, the last answer's excerpt, usage windows
//! and the time to their reset, the charts, a formula's steps, the last
//! claim with each gate's verdict and the verification output, and the
//! iterations; a queue run is a dashboard of its items instead
//! (`render/queue.rs`). Every text that may come from the agent goes
//! through [`esc`]; nothing here is a script, a font or an image from
//! anywhere else.

mod queue;

use std::fmt::Write as _;

pub(crate) use queue::{ItemView, Pending, fold, item_record, items, run_sections};
use ralph_core::judge::breaker;
use ralph_core::judge::config::Config;
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{IterationRecord, LoopState};
use ralph_core::text::printable;
use ralph_core::units::TokenUsage;

/// Text made safe inside HTML: its markup escaped, and its control
/// characters made visible ([`printable`]), so that neither a browser nor
/// a terminal showing the file (`cat`, `less -R`) obeys the agent's text.
pub(crate) fn esc(text: &str) -> String {
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

/// The style of the report and of the live page.
pub(crate) const STYLE: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}\
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;width:100%}td,th{border:1px solid #ddd;padding:4px 6px;vertical-align:top;text-align:left}\
th{background:#f4f4f4}.ok{color:#1a7f37}.bad{color:#c62828}.muted{color:#777}\
.status{display:inline-block;padding:2px 8px;border-radius:4px;background:#eef;font-weight:600}\
pre{white-space:pre-wrap;margin:0;font-size:12px}svg{background:#fafafa;border:1px solid #eee}\
table.items td.title{font-weight:600}.item-status[data-status=done]{color:#1a7f37}\
.item-status[data-status=failed],.item-status[data-status=needs-review]{color:#c62828}\
.item-status[data-status=working]{color:#2f6fdf}\
details.item{border:1px solid #ddd;border-radius:4px;margin:.5em 0;padding:0 .8em}\
details.item>summary{cursor:pointer;padding:.45em 0;font-weight:600}details.item[open]>summary{border-bottom:1px solid #eee}";

/// A loop's sections, in the order both pages show them; `now` (seconds
/// since the epoch) is when the usage windows' resets are counted from.
pub(crate) fn loop_sections(state: &LoopState, config: Option<&Config>, now: u64) -> String {
    let mut page = String::new();
    summary(&mut page, state, config, now);
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
    formula(&mut page, state);
    claims(&mut page, state);
    timeline(&mut page, &state.history);
    page
}

/// `in 1 h 05 min`, `in 42 s`, or `passed`: how long until `at`.
pub(crate) fn time_to(at: u64, now: u64) -> String {
    let Some(left) = at.checked_sub(now).filter(|s| *s > 0) else {
        return "passed".into();
    };
    match left {
        s if s < 60 => format!("in {s} s"),
        s if s < 3600 => format!("in {} min", s.div_ceil(60)),
        s => format!("in {} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// The breaker's state and its busiest signal against where it opens:
/// `half_open (no progress 2/3)`.
pub(crate) fn breaker_line(state: &LoopState, config: Option<&Config>) -> String {
    let defaults = Config::default();
    let config = config.unwrap_or(&defaults);
    let busiest = breaker::SIGNALS
        .iter()
        .map(|s| {
            (
                s.label,
                state.breaker.counters.get(s.signal),
                s.trips_at(&config.breaker),
            )
        })
        .max_by_key(|(_, count, at)| (u64::from(*count) * 1000) / u64::from((*at).max(1)));
    match busiest {
        Some((label, count, at)) if count > 0 => {
            format!("{} ({label} {count}/{at})", state.breaker.state.as_str())
        }
        _ => state.breaker.state.as_str().to_string(),
    }
}

/// A formula run's steps: one row each.
fn formula(page: &mut String, state: &LoopState) {
    let Some(run) = &state.formula else {
        return;
    };
    let _ = write!(
        page,
        "<h2>Formula {}</h2><p>{}</p><table><tr><th>#</th><th>step</th><th>model</th><th>where</th>\
         <th>iterations</th><th>cost</th><th>gates</th></tr>",
        esc(&run.name),
        esc(&run.position())
    );
    for (i, step) in run.steps.iter().enumerate() {
        let at = if step.completed_at.is_some() {
            "done"
        } else if step.skipped {
            "skipped"
        } else if i == run.step && state.status.is_live() {
            "running"
        } else if i == run.step {
            state.status.as_str()
        } else {
            "not yet"
        };
        let gates = step
            .gates
            .iter()
            .map(|g| {
                let result = match g.passed {
                    Some(true) => "passed",
                    Some(false) => "failed",
                    None => "not run",
                };
                format!(
                    "{} {result} ({} of {} retries used)",
                    g.name,
                    g.failures.min(g.retries),
                    g.retries
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let _ = write!(
            page,
            "<tr class=\"step\"><td>{}</td><td>{}</td><td>{}</td><td class=\"step-status\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            i + 1,
            esc(&step.id),
            esc(step.model.as_deref().unwrap_or("")),
            esc(at),
            step.iterations,
            esc(&step.cost_usd.to_string()),
            esc(&gates)
        );
    }
    page.push_str("</table>");
}

/// The status, then a row per fact: how it ended, cost and tokens, the
/// breaker, the question waiting, the person's note waiting, the last
/// answer's excerpt, the usage windows and the time to each reset.
fn summary(page: &mut String, state: &LoopState, config: Option<&Config>, now: u64) {
    let _ = write!(
        page,
        "<p><span class=\"status\" data-status=\"{}\">{}</span> at iteration \
         <span class=\"iteration\">{}</span> of {}</p><table class=\"facts\">",
        esc(state.status.as_str()),
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
    if let Some((label, line)) = outcome_row(state) {
        row(label, line);
    }
    row("session", state.session_id.clone());
    row("started", state.started_at.to_string());
    row(
        "ended",
        state
            .ended_at
            .map_or_else(|| "not yet".into(), |t| t.to_string()),
    );
    row("cost", state.cost_so_far());
    row("tokens", tokens_words(&state.usage));
    row("breaker", breaker_line(state, config));
    if let Some(run) = &state.formula {
        row("formula", format!("{}, {}", run.name, run.position()));
    }
    if let Some(question) = &state.question {
        row(
            "the agent asks",
            format!("{} (iteration {})", question.text, question.iteration),
        );
    }
    if let Some(note) = &state.hint {
        // A loop that can go on sends it first in its next iteration; one
        // that ended for good never will.
        let label = if state.status.is_resumable() {
            "note for the next iteration"
        } else {
            "note not delivered (the loop ended first)"
        };
        row(label, note.clone());
    }
    if let Some(last) = state.history.last() {
        row(
            "last answer",
            format!("iteration {}: {}", last.iteration, last.excerpt),
        );
    }
    for (name, window) in &state.usage_windows {
        let reset = window
            .resets_at
            .map(|at| format!("; resets {}", time_to(at.secs(), now)))
            .unwrap_or_default();
        row(
            "usage window",
            format!("{name}: {}{reset}", window.describe()),
        );
    }
    page.push_str("</table>");
}

/// The row that says where a loop came to: how it ended, or where a
/// paused or waiting loop stands; none while it runs (its status says so).
pub(crate) fn outcome_row(state: &LoopState) -> Option<(&'static str, String)> {
    match state.status {
        ralph_core::judge::state::Status::Running => None,
        status if status.is_live() => Some(("where it stands", lifecycle::outcome_line(state))),
        _ => Some(("how it ended", lifecycle::outcome_line(state))),
    }
}

/// A loop's tokens as the pages say them: `1200 in, 300 out, 0 cache
/// read, 0 cache write`.
pub(crate) fn tokens_words(usage: &TokenUsage) -> String {
    format!(
        "{} in, {} out, {} cache read, {} cache write",
        usage.input, usage.output, usage.cache_read, usage.cache_creation
    )
}

/// The history by iteration: a stop cut short (an interruption, a pause)
/// and the stop that went on with the same iteration once it was resumed
/// are one iteration, shown once.
fn by_iteration(history: &[IterationRecord]) -> Vec<&[IterationRecord]> {
    history
        .chunk_by(|a, b| a.iteration == b.iteration)
        .collect()
}

/// The tokens of one iteration's records, added up.
fn usage_of(records: &[IterationRecord]) -> TokenUsage {
    let mut usage = TokenUsage::default();
    for r in records {
        usage.add(&r.usage);
    }
    usage
}

/// Bars of each iteration's input and output tokens.
fn tokens_chart(history: &[IterationRecord]) -> String {
    if history.is_empty() {
        return "<p class=\"muted\">no iteration recorded yet</p>".into();
    }
    let (width, height, left, bottom, top) = (960.0_f64, 260.0_f64, 60.0, 30.0, 20.0);
    let iterations: Vec<(u32, TokenUsage)> = by_iteration(history)
        .into_iter()
        .map(|records| (records[0].iteration, usage_of(records)))
        .collect();
    let most = iterations
        .iter()
        .map(|(_, u)| u.input + u.output)
        .max()
        .unwrap_or(0)
        .max(1);
    let max = most as f64;
    let slot = (width - left - 10.0) / iterations.len() as f64;
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
        most
    );
    for (i, (iteration, usage)) in iterations.iter().enumerate() {
        let x = left + i as f64 * slot + (slot - bar) / 2.0;
        let input = usage.input as f64 * scale;
        let output = usage.output as f64 * scale;
        let _ = write!(
            svg,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{input:.1}\" fill=\"#2f6fdf\"><title>iteration {}: {} input tokens</title></rect>\
             <rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{bar:.1}\" height=\"{output:.1}\" fill=\"#f08c00\"><title>iteration {}: {} output tokens</title></rect>\
             <text x=\"{:.1}\" y=\"{}\" font-size=\"10\" text-anchor=\"middle\">{}</text>",
            base - input,
            iteration,
            usage.input,
            base - input - output,
            iteration,
            usage.output,
            x + bar / 2.0,
            base + 14.0,
            iteration
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
    let max = f64::from(
        breaker::SIGNALS
            .iter()
            .map(|s| {
                s.trips_at(&config.breaker)
                    .max(state.breaker.counters.get(s.signal))
            })
            .max()
            .unwrap_or(1)
            .max(1),
    );
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
            (f64::from(count) * scale).max(0.0),
            y - 2.0,
            y + 18.0,
            x = left + f64::from(threshold) * scale,
        );
    }
    let _ = write!(
        svg,
        "</svg><p class=\"muted\">breaker {}; the red mark is where each signal opens it</p>",
        esc(state.breaker.state.as_str())
    );
    svg
}

/// The iterations, one row each: a stop cut short and the stop that went
/// on with the same iteration share its row, its tokens and tools added up.
fn timeline(page: &mut String, history: &[IterationRecord]) {
    page.push_str(
        "<h2>Iterations</h2><table><tr><th>#</th><th>at</th><th>decision</th><th>why</th><th>tools</th>\
         <th>tokens in/out</th><th>claim</th><th>excerpt of the message</th></tr>",
    );
    for records in by_iteration(history) {
        let Some((r, earlier)) = records.split_last() else {
            continue;
        };
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
        let mut why = String::new();
        for cut in earlier {
            let _ = write!(
                why,
                "<span class=\"muted\">resumed after: {}</span><br>",
                esc(&cut.why)
            );
        }
        why.push_str(&esc(&r.why));
        for error in records.iter().filter_map(|r| r.error.as_deref()) {
            let _ = write!(why, "<br><span class=\"bad\">error: {}</span>", esc(error));
        }
        let usage = usage_of(records);
        let tools: usize = records.iter().map(|r| r.tool_calls).sum();
        let _ = write!(
            page,
            "<tr class=\"iteration\"><td>{}</td><td>{}</td><td>{}</td><td>{why}</td><td>{tools}</td><td>{}/{}</td><td>{claim}</td><td><pre>{}</pre></td></tr>",
            r.iteration,
            esc(&r.at.to_string()),
            esc(&format!("{:?}", r.decision).to_lowercase()),
            usage.input,
            usage.output,
            esc(&r.excerpt)
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
            "<tr><td>verify: {}</td><td>{}</td><td><code>{}</code>{counts}<pre class=\"verify-output\">{}</pre></td></tr>",
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
    use ralph_core::judge::state::Status;
    use ralph_core::time::Timestamp;

    fn state() -> LoopState {
        LoopState::new("s".into(), 5, Timestamp::from_secs(1767225600))
    }

    #[test]
    fn the_agents_text_is_shown_never_obeyed() {
        let mut state = state();
        state.status = Status::Waiting;
        state.question = Some(ralph_core::judge::state::Question {
            text: "<script>alert(1)</script> \u{1b}[2J".into(),
            iteration: 1,
            at: Timestamp::from_secs(1767225660),
        });
        let html = loop_sections(&state, None, 1767225700);
        assert!(!html.contains("<script"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(!html.contains('\u{1b}'), "{html}");
    }

    #[test]
    fn a_usage_window_says_the_time_to_its_reset_and_a_note_waits_in_sight() {
        let mut state = state();
        state.usage_windows.insert(
            "5h".into(),
            ralph_core::judge::state::WindowUse {
                utilization: ralph_core::units::PerMille::of(0.42).unwrap(),
                resets_at: Some(Timestamp::from_secs(1767225700 + 3900)),
                seen_at: Timestamp::from_secs(1767225600),
            },
        );
        state.hint = Some("skip <the> flaky test".into());
        let html = loop_sections(&state, None, 1767225700);
        assert!(html.contains("<th>usage window</th><td>5h: 42"), "{html}");
        assert!(html.contains("; resets in 1 h 05 min</td>"), "{html}");
        assert!(
            html.contains(
                "<th>note for the next iteration</th><td>skip &lt;the&gt; flaky test</td>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_formula_run_has_a_row_per_step_saying_where_it_stands() {
        use ralph_core::judge::state::{FormulaRun, GateRun, StepRun};
        let mut state = state();
        state.formula = Some(FormulaRun {
            name: "ship".into(),
            step: 1,
            steps: vec![
                StepRun {
                    id: "plan".into(),
                    model: Some("opus".into()),
                    iterations: 2,
                    completed_at: Some(Timestamp::from_secs(1767225650)),
                    ..Default::default()
                },
                StepRun {
                    id: "implement <fast>".into(),
                    iterations: 1,
                    gates: vec![GateRun {
                        name: "tests".into(),
                        retries: 3,
                        failures: 1,
                        passed: Some(false),
                    }],
                    ..Default::default()
                },
                StepRun {
                    id: "test".into(),
                    ..Default::default()
                },
            ],
        });
        let html = loop_sections(&state, None, 1767225700);
        assert!(
            html.contains("<h2>Formula ship</h2><p>step 2/3 implement &lt;fast&gt;</p>"),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>1</td><td>plan</td><td>opus</td><td class=\"step-status\">done</td><td>2</td>"
            ),
            "{html}"
        );
        assert!(
            html.contains("<td class=\"step-status\">running</td><td>1</td><td>$0.00</td><td>tests failed (1 of 3 retries used)</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td>test</td><td></td><td class=\"step-status\">not yet</td>"),
            "{html}"
        );
    }

    #[test]
    fn the_time_to_a_reset_in_words() {
        assert_eq!(time_to(100, 100), "passed");
        assert_eq!(time_to(90, 100), "passed");
        assert_eq!(time_to(142, 100), "in 42 s");
        assert_eq!(time_to(100 + 61, 100), "in 2 min");
        assert_eq!(time_to(100 + 3900, 100), "in 1 h 05 min");
    }

    fn record(iteration: u32, why: &str, input: u64, output: u64) -> IterationRecord {
        IterationRecord {
            excerpt: format!("answer {iteration}"),
            tool_calls: 1,
            usage: ralph_core::units::TokenUsage {
                input,
                output,
                ..Default::default()
            },
            ..IterationRecord::new(
                iteration,
                Timestamp::from_secs(1767225600 + 60 * u64::from(iteration)),
                ralph_core::judge::state::StopDecision::Block,
                why.into(),
            )
        }
    }

    #[test]
    fn an_iteration_cut_short_and_resumed_is_one_bar_and_one_row() {
        let mut state = state();
        state.history = vec![
            record(1, "went on", 100, 10),
            record(
                2,
                "Ctrl-C (SIGINT) while the loop was running at iteration 2 of 5",
                40,
                4,
            ),
            record(2, "went on", 200, 20),
            record(3, "went on", 300, 30),
        ];
        let html = loop_sections(&state, None, 1767225700);
        let axis: Vec<&str> = html
            .split("text-anchor=\"middle\">")
            .skip(1)
            .map(|rest| rest.split('<').next().unwrap())
            .collect();
        assert_eq!(axis, ["1", "2", "3"], "{html}");
        assert!(
            html.contains("<title>iteration 2: 240 input tokens</title>"),
            "{html}"
        );
        assert_eq!(
            html.matches("<tr class=\"iteration\">").count(),
            3,
            "{html}"
        );
        assert!(
            html.contains(
                "<td><span class=\"muted\">resumed after: Ctrl-C (SIGINT) while the loop was running \
                 at iteration 2 of 5</span><br>went on</td><td>2</td><td>240/24</td>"
            ),
            "{html}"
        );
    }

    #[test]
    fn a_note_left_on_a_loop_that_ended_for_good_is_said_undelivered() {
        let mut state = state();
        state.hint = Some("try the small fix".into());
        let html = loop_sections(&state, None, 1767225700);
        assert!(
            html.contains("<th>note for the next iteration</th><td>try the small fix</td>"),
            "{html}"
        );
        for (status, goes_on) in [
            (Status::Paused, true),
            (Status::Interrupted, true),
            (Status::Cancelled, false),
            (Status::Complete, false),
            (Status::MaxIterations, false),
        ] {
            state.status = status;
            let html = loop_sections(&state, None, 1767225700);
            assert_eq!(
                html.contains("<th>note for the next iteration</th>"),
                goes_on,
                "{status:?}: {html}"
            );
            assert_eq!(
                html.contains(
                    "<th>note not delivered (the loop ended first)</th><td>try the small fix</td>"
                ),
                !goes_on,
                "{status:?}: {html}"
            );
        }
    }

    #[test]
    fn the_summary_says_the_breaker_and_the_last_answer() {
        let mut state = state();
        state.history.push(IterationRecord {
            excerpt: "Fixed <one>.".into(),
            ..IterationRecord::new(
                1,
                Timestamp::from_secs(1767225660),
                ralph_core::judge::state::StopDecision::Block,
                String::new(),
            )
        });
        let html = loop_sections(&state, None, 1767225700);
        assert!(
            html.contains("<tr><th>breaker</th><td>closed</td></tr>"),
            "{html}"
        );
        assert!(
            html.contains("<tr><th>last answer</th><td>iteration 1: Fixed &lt;one&gt;.</td></tr>"),
            "{html}"
        );
    }

    #[test]
    fn a_live_loop_is_not_said_to_have_ended() {
        let mut state = state();
        let html = loop_sections(&state, None, 1767225700);
        assert!(
            !html.contains("how it ended") && !html.contains("still running"),
            "{html}"
        );
        state.status = Status::Paused;
        let html = loop_sections(&state, None, 1767225700);
        assert!(
            html.contains("<tr><th>where it stands</th><td>loop paused at iteration 1 of 5"),
            "{html}"
        );
        state.status = Status::Complete;
        state.ended_because = Some("done".into());
        let html = loop_sections(&state, None, 1767225700);
        assert!(html.contains("<tr><th>how it ended</th>"), "{html}");
    }
}
