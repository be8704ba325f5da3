//! `ralph-ctl queue SOURCE`: a backlog as a worker would see it now, each
//! item with where it stands (free, claimed and by whom until when, done,
//! needs review, skipped, failed), so a person can check a source before
//! the workers drain it and follow it while they do.

use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::observe::backlog::Source;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::item_claims::{ClaimStore, ItemStatus};
use ralph_core::time::Timestamp;
use serde_json::json;

use crate::error::CmdResult;

/// `ralph-ctl queue`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    /// Where the items are: plan:PATH, dir:PATH or cmd:COMMAND.
    #[arg(value_name = "SOURCE")]
    pub(crate) source: String,
    /// Print one JSON array instead: {"id", "title", "status", "worker", "expiresAt", "why"}.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `ralph-ctl queue` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: QueueArgs) -> CmdResult {
    run(paths, &args.source, args.json, &mut std::io::stdout())
}

/// Writes the items of `source` (read from the project) and their claims
/// to `out`: a count by status, then one line per item, or with `json` one
/// array of `{"id", "title", "status", "worker", "expiresAt", "why"}`.
pub(crate) fn run(
    paths: &ProjectPaths,
    source: &str,
    json: bool,
    out: &mut dyn Write,
) -> CmdResult {
    let source: Source = source.parse()?;
    let items = source.read(&paths.root)?;
    let claims = ClaimStore::new(paths).read()?;
    let now = Timestamp::now();
    let standing: Vec<(&str, Option<&ralph_core::persist::item_claims::ItemRecord>)> = items
        .iter()
        .map(|item| match claims.items.get(&item.id) {
            _ if claims.is_free(&item.id, now) => ("free", None),
            Some(record) => (status_word(record.status), Some(record)),
            None => ("free", None),
        })
        .collect();
    let written = (|| {
        if json {
            let rows: Vec<serde_json::Value> = items
                .iter()
                .zip(&standing)
                .map(|(item, (status, record))| {
                    json!({
                        "id": item.id,
                        "title": item.title,
                        "status": status,
                        "worker": record.map(|r| r.worker.clone()),
                        "expiresAt": record.filter(|r| r.status == ItemStatus::Claimed).map(|r| r.expires_at),
                        "why": record.and_then(|r| r.why.clone()),
                    })
                })
                .collect();
            let rows = serde_json::Value::Array(rows).to_string();
            writeln!(out, "{}", ralph_core::text::printable_json(&rows))?;
            return out.flush();
        }
        let count = |word: &str| standing.iter().filter(|(s, _)| *s == word).count();
        let words = [
            "free",
            "claimed",
            "done",
            "needs-review",
            "skipped",
            "failed",
        ];
        let counts: Vec<String> = words
            .iter()
            .filter(|w| count(w) > 0)
            .map(|w| format!("{} {w}", count(w)))
            .collect();
        match items.len() {
            0 => writeln!(out, "No items in {source}: nothing for a worker to take.")?,
            1 => writeln!(out, "1 item in {source}: {}", counts.join(", "))?,
            n => writeln!(out, "{n} items in {source}: {}", counts.join(", "))?,
        }
        let width = items
            .iter()
            .map(|i| i.id.chars().count())
            .max()
            .unwrap_or(0);
        for (item, (status, record)) in items.iter().zip(&standing) {
            let mut line = format!("  {status:<12} {:<width$}  {}", item.id, item.title);
            if let Some(record) = record {
                match record.status {
                    ItemStatus::Claimed => line.push_str(&format!(
                        "  ({} until {})",
                        record.worker, record.expires_at
                    )),
                    _ => {
                        if let Some(why) = &record.why {
                            line.push_str(&format!("  ({why})"));
                        }
                    }
                }
            }
            // A title is the backlog's text, which the agent may write.
            writeln!(out, "{}", ralph_core::text::printable(&line))?;
        }
        out.flush()
    })();
    super::written(written, exit_codes::OK)
}

/// How an item's status reads.
fn status_word(status: ItemStatus) -> &'static str {
    match status {
        ItemStatus::Claimed => "claimed",
        ItemStatus::Done => "done",
        ItemStatus::NeedsReview => "needs-review",
        ItemStatus::Skipped => "skipped",
        ItemStatus::Failed => "failed",
    }
}
