//! A queue run as a dashboard, for `serve` and `report --html` alike: the
//! run summarised at the top (its status, what its items came to, the
//! iterations, cost and tokens of the whole run, those of the items still
//! working counted as they go), then one table of the items (title,
//! status, iteration, cost, time, last line), each item's own loop folded
//! under it. A queue run's own record holds no iteration of its own: its
//! items' loops do.

use std::fmt::Write as _;

use ralph_core::judge::state::{ItemState, LoopState, QueueItem, QueueRun};
use ralph_core::units::{TokenUsage, Usd};

use super::{esc, tokens_words};
use crate::queue::item_loops::ItemLoop;

/// The longest last line a row shows; the whole of it is in the item's
/// details.
const LAST_LINE_CHARS: usize = 140;

/// One item as the dashboard shows it: its record in the run, and its own
/// loop's state when its folder holds one.
pub(crate) struct ItemView<'a> {
    /// The item's id.
    pub(crate) id: &'a str,
    /// The run's record of it.
    pub(crate) record: &'a QueueItem,
    /// Its loop (the last time a worker took it), when one was read.
    pub(crate) state: Option<&'a LoopState>,
}

impl ItemView<'_> {
    /// Its loop's state while a worker is on it and the loop goes on.
    fn live(&self) -> Option<&LoopState> {
        self.state
            .filter(|s| self.record.status == ItemState::Working && s.status.is_live())
    }
}

/// The run's items in the order the workers took them (those never timed
/// by id), each with the loop of `loops` that works it.
pub(crate) fn items<'a>(queue: &'a QueueRun, loops: &'a [ItemLoop]) -> Vec<ItemView<'a>> {
    let mut views: Vec<ItemView<'a>> = queue
        .items
        .iter()
        .map(|(id, record)| ItemView {
            id,
            record,
            state: loops
                .iter()
                .find(|l| l.item_id() == Some(id.as_str()))
                .and_then(ItemLoop::state),
        })
        .collect();
    views.sort_by_key(|v| (v.record.taken_at.is_none(), v.record.taken_at));
    views
}

/// What the whole run has spent: the items settled (the run's record)
/// and those still working (their loops, as they go).
struct Totals {
    iterations: u32,
    in_working_items: u32,
    cost: Usd,
    usage: TokenUsage,
}

fn totals(run: &LoopState, items: &[ItemView]) -> Totals {
    let mut totals = Totals {
        iterations: run.iteration,
        in_working_items: 0,
        cost: run.cost_usd,
        usage: run.usage,
    };
    for state in items.iter().filter_map(ItemView::live) {
        totals.in_working_items = totals.in_working_items.saturating_add(state.iteration);
        totals.cost = Usd(totals.cost.0.saturating_add(state.cost_usd.0));
        totals.usage.add(&state.usage);
    }
    totals.iterations = totals.iterations.saturating_add(totals.in_working_items);
    totals
}

/// `42 s`, `3 min 05 s`, `1 h 02 min`: a span of time in words.
pub(crate) fn span_words(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min {:02} s", s / 60, s % 60),
        s => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// An item of the run's source that no worker has taken yet: free, or
/// waiting on items that have not landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pending {
    /// The item's id.
    pub(crate) id: String,
    /// Its title.
    pub(crate) title: String,
    /// The items it waits on that have not landed (empty: free).
    pub(crate) after: Vec<String>,
}

/// A queue run's sections: the run summarised, then its items' table:
/// those taken, then the `pending` ones of its source.
pub(crate) fn run_sections(
    run: &LoopState,
    items: &[ItemView],
    pending: &[Pending],
    now: u64,
) -> String {
    let Some(queue) = &run.queue else {
        return String::new();
    };
    let totals = totals(run, items);
    let mut page = String::new();
    let _ = write!(
        page,
        "<p class=\"run-summary\"><span class=\"status\" data-status=\"{status}\">{status}</span> \
         <span class=\"run-counts\">{}</span>, {} iteration{} of {}</p><table class=\"facts\">",
        esc(&queue.counts_line()),
        totals.iterations,
        if totals.iterations == 1 { "" } else { "s" },
        run.max_iterations,
        status = esc(run.status.as_str()),
    );
    let mut row = |label: &str, value: String| {
        let _ = write!(
            page,
            "<tr><th>{}</th><td>{}</td></tr>",
            esc(label),
            esc(&value)
        );
    };
    if let Some((label, line)) = super::outcome_row(run) {
        row(label, line);
    }
    let landing = match queue.merge.as_str() {
        "none" => "each item left on its branch".to_string(),
        _ => format!("each item landed on {} in turn", queue.base),
    };
    row("queue", format!("{}; {landing}", queue.source));
    if let Some(remote) = &queue.remote {
        row("shared on", remote.clone());
    }
    let working = if totals.in_working_items > 0 {
        format!(
            " ({} of them in items still working)",
            totals.in_working_items
        )
    } else {
        String::new()
    };
    row(
        "iterations",
        format!("{} of {}{working}", totals.iterations, run.max_iterations),
    );
    row("cost", totals.cost.to_string());
    row("tokens", tokens_words(&totals.usage));
    let started = run.started_at.secs();
    let time = match run.ended_at {
        Some(ended) => format!(
            "{} to {} ({})",
            run.started_at,
            ended,
            span_words(ended.secs().saturating_sub(started))
        ),
        None => format!(
            "since {} ({} so far)",
            run.started_at,
            span_words(now.saturating_sub(started))
        ),
    };
    row("time", time);
    page.push_str("</table>");
    items_table(&mut page, items, pending, now);
    page
}

/// The items' table: a row each, those taken first.
fn items_table(page: &mut String, items: &[ItemView], pending: &[Pending], now: u64) {
    page.push_str("<h2>Items</h2>");
    if items.is_empty() && pending.is_empty() {
        page.push_str("<p class=\"muted\">no item taken yet</p>");
        return;
    }
    page.push_str(
        "<table class=\"items\"><tr><th>title</th><th>status</th><th>iteration</th><th>cost</th>\
         <th>time</th><th>last line</th></tr>",
    );
    for item in items {
        let live = item.live();
        let iteration = match (item.record.status, live) {
            (_, Some(state)) => format!("{} of {}", state.iteration, state.max_iterations),
            (ItemState::Working, None) => "starting".into(),
            _ => item.record.iterations.to_string(),
        };
        let cost = Usd(item
            .record
            .cost_usd
            .0
            .saturating_add(live.map_or(0, |s| s.cost_usd.0)));
        let (line, muted) = last_line(item);
        let _ = write!(
            page,
            "<tr class=\"item\" data-item=\"{}\"><td class=\"title\">{}</td>\
             <td class=\"item-status\" data-status=\"{status}\">{status}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td class=\"last-line{}\">{}</td></tr>",
            esc(item.id),
            esc(&item.record.title),
            esc(&iteration),
            esc(&cost.to_string()),
            esc(&time_of(item, now)),
            if muted { " muted" } else { "" },
            esc(&line),
            status = esc(item.record.status.as_str()),
        );
    }
    for item in pending {
        let (status, line) = match item.after.as_slice() {
            [] => ("pending", "not taken yet".to_string()),
            [one] => ("waiting", format!("after {one}, which has not landed")),
            [rest @ .., last] => (
                "waiting",
                format!(
                    "after {} and {last}, which have not landed",
                    rest.join(", ")
                ),
            ),
        };
        let _ = write!(
            page,
            "<tr class=\"item pending\" data-item=\"{}\"><td class=\"title\">{}</td>\
             <td class=\"item-status\" data-status=\"{status}\">{status}</td><td></td><td></td><td></td>\
             <td class=\"last-line muted\">{}</td></tr>",
            esc(&item.id),
            esc(&item.title),
            esc(&line),
        );
    }
    page.push_str(
        "</table><p class=\"muted\">Each item's own loop is below it, folded: its title unfolds it.</p>",
    );
}

/// How long the item took, or has taken so far.
fn time_of(item: &ItemView, now: u64) -> String {
    let (from, to) = match (item.record.taken_at, item.state) {
        (Some(taken), _) => (
            taken.secs(),
            item.record
                .settled_at
                .map_or(now, ralph_core::time::Timestamp::secs),
        ),
        (None, Some(state)) => (
            state.started_at.secs(),
            state
                .ended_at
                .map_or(now, ralph_core::time::Timestamp::secs),
        ),
        (None, None) => return String::new(),
    };
    span_words(to.saturating_sub(from))
}

/// The row's last line: what the agent last said while a worker is on
/// the item, how it ended once it settled; muted when there is none yet.
fn last_line(item: &ItemView) -> (String, bool) {
    let said = match item.live() {
        Some(state) => state
            .history
            .last()
            .and_then(|r| r.excerpt.lines().rev().find(|l| !l.trim().is_empty()))
            .map(str::to_string),
        None => item
            .record
            .why
            .as_deref()
            .and_then(|why| why.lines().find(|l| !l.trim().is_empty()))
            .map(str::to_string),
    };
    match (said, item.live()) {
        (Some(line), _) => (shortened(line.trim()), false),
        (None, Some(state)) => (format!("iteration {} under way", state.iteration), true),
        (None, None) => (String::new(), true),
    }
}

/// `text`, cut at [`LAST_LINE_CHARS`] characters with an ellipsis.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(LAST_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The run's record of one item, at the top of its folded details.
pub(crate) fn item_record(id: &str, record: &QueueItem) -> String {
    let mut page = String::from("<table class=\"facts item-record\">");
    let mut row = |label: &str, value: &str| {
        let _ = write!(
            page,
            "<tr><th>{}</th><td>{}</td></tr>",
            esc(label),
            esc(value)
        );
    };
    row("item", id);
    row("in the run", record.status.as_str());
    if let Some(why) = &record.why {
        row("why", why);
    }
    row("worker", &record.worker);
    if let Some(branch) = &record.branch {
        row("branch", branch);
    }
    if record.taken > 1 {
        row("taken", &format!("{} times", record.taken));
    }
    page.push_str("</table>");
    page
}

/// One item's details folded under the table (the report's; the live
/// page folds each item's section itself): its title and status, then
/// `inner` once unfolded.
pub(crate) fn fold(item: &ItemView, inner: &str) -> String {
    format!(
        "<details class=\"item\" data-item=\"{}\"><summary>{}: {}</summary>{}{inner}</details>",
        esc(item.id),
        esc(&item.record.title),
        esc(item.record.status.as_str()),
        item_record(item.id, item.record),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::state::Status;
    use ralph_core::time::Timestamp;

    const START: u64 = 1767225600;

    fn item_loop(id: &str, iteration: u32, status: Status) -> ItemLoop {
        let mut state = LoopState::new("s".into(), 8, Timestamp::from_secs(START + 10));
        state.queue_item = Some(id.into());
        state.iteration = iteration;
        state.status = status;
        state.cost_usd = Usd::from_dollars(0.25);
        state.usage.input = 1000;
        state.usage.output = 100;
        ItemLoop {
            folder: id.into(),
            state: Ok(state),
            config: None,
        }
    }

    fn run() -> LoopState {
        let mut run = crate::testdir::queue_run_state();
        let queue = run.queue.as_mut().unwrap();
        for (n, item) in queue.items.values_mut().enumerate() {
            item.taken_at = Some(Timestamp::from_secs(START + 60 - 20 * n as u64));
            if item.status != ItemState::Working {
                item.settled_at = Some(Timestamp::from_secs(START + 70));
            }
        }
        // The two settled items' iterations and cost, and their tokens.
        run.iteration = 4;
        run.cost_usd = Usd::from_dollars(1.0);
        run.usage.input = 5000;
        run.usage.output = 500;
        run
    }

    #[test]
    fn the_run_counts_its_working_items_as_they_go() {
        let run = run();
        let loops = [
            item_loop("plan-c", 3, Status::Running),
            item_loop("plan-a", 2, Status::Complete),
        ];
        let items = items(run.queue.as_ref().unwrap(), &loops);
        let page = run_sections(&run, &items, &[], START + 100);
        assert!(
            page.contains("<span class=\"run-counts\">3 items taken: 1 done, 1 working, 1 needs-review</span>, 7 iterations of 25</p>"),
            "{page}"
        );
        assert!(
            page.contains("<th>iterations</th><td>7 of 25 (3 of them in items still working)</td>"),
            "{page}"
        );
        assert!(page.contains("<th>cost</th><td>$1.25</td>"), "{page}");
        assert!(
            page.contains("<th>tokens</th><td>6000 in, 600 out, 0 cache read, 0 cache write</td>"),
            "{page}"
        );
        assert!(
            page.contains("<th>time</th><td>since 2026-01-01T00:00:00Z (1 min 40 s so far)</td>"),
            "{page}"
        );
    }

    #[test]
    fn one_row_per_item_in_the_order_they_were_taken() {
        let run = run();
        let loops = [item_loop("plan-c", 3, Status::Running)];
        let items = items(run.queue.as_ref().unwrap(), &loops);
        let ids: Vec<&str> = items.iter().map(|i| i.id).collect();
        assert_eq!(ids, ["plan-c", "plan-b", "plan-a"]);
        let page = run_sections(&run, &items, &[], START + 100);
        assert!(
            page.contains(
                "<tr class=\"item\" data-item=\"plan-c\"><td class=\"title\">more</td>\
                 <td class=\"item-status\" data-status=\"working\">working</td><td>3 of 8</td>\
                 <td>$0.7500</td><td>1 min 20 s</td>\
                 <td class=\"last-line muted\">iteration 3 under way</td></tr>"
            ),
            "{page}"
        );
        assert!(
            page.contains(
                "<td class=\"title\">add &lt;b&gt;</td><td class=\"item-status\" data-status=\"done\">done</td>\
                 <td>2</td><td>$0.5000</td><td>10 s</td><td class=\"last-line\">landed</td>"
            ),
            "{page}"
        );
    }

    #[test]
    fn a_long_last_line_is_cut_and_a_fold_carries_the_record() {
        let mut run = run();
        let long = "x".repeat(LAST_LINE_CHARS + 20);
        run.queue
            .as_mut()
            .unwrap()
            .items
            .get_mut("plan-b")
            .unwrap()
            .why = Some(format!("{long}\nsecond line"));
        let items = items(run.queue.as_ref().unwrap(), &[]);
        let page = run_sections(&run, &items, &[], START + 100);
        assert!(
            page.contains(&format!("{}…</td>", "x".repeat(LAST_LINE_CHARS))),
            "{page}"
        );
        let b = items.iter().find(|i| i.id == "plan-b").unwrap();
        let folded = fold(b, "<p>inner</p>");
        assert!(
            folded.starts_with(
                "<details class=\"item\" data-item=\"plan-b\"><summary>fix it: needs-review</summary>"
            ),
            "{folded}"
        );
        assert!(folded.contains("second line"), "{folded}");
        assert!(folded.ends_with("<p>inner</p></details>"), "{folded}");
    }

    #[test]
    fn a_running_run_lists_the_items_not_taken_yet_and_what_they_wait_on() {
        let run = run();
        let items = items(run.queue.as_ref().unwrap(), &[]);
        let pending = [
            Pending {
                id: "plan-d".into(),
                title: "add <docs>".into(),
                after: Vec::new(),
            },
            Pending {
                id: "plan-e".into(),
                title: "release".into(),
                after: vec!["plan-c".into(), "plan-d".into()],
            },
        ];
        let page = run_sections(&run, &items, &pending, START + 100);
        assert!(
            !page.contains("how it ended") && !page.contains("still running"),
            "{page}"
        );
        assert!(
            page.contains(
                "<tr class=\"item pending\" data-item=\"plan-d\"><td class=\"title\">add &lt;docs&gt;</td>\
                 <td class=\"item-status\" data-status=\"pending\">pending</td><td></td><td></td><td></td>\
                 <td class=\"last-line muted\">not taken yet</td></tr>"
            ),
            "{page}"
        );
        assert!(
            page.contains(
                "<td class=\"item-status\" data-status=\"waiting\">waiting</td><td></td><td></td><td></td>\
                 <td class=\"last-line muted\">after plan-c and plan-d, which have not landed</td></tr>"
            ),
            "{page}"
        );
        // After the items taken.
        assert!(
            page.find("plan-a").unwrap() < page.find("plan-d").unwrap(),
            "{page}"
        );
    }

    #[test]
    fn spans_in_words() {
        assert_eq!(span_words(42), "42 s");
        assert_eq!(span_words(185), "3 min 05 s");
        assert_eq!(span_words(3720), "1 h 02 min");
    }
}
