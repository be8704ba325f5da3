//! `ralph-ctl queue SOURCE`: a backlog as a worker would see it now, each
//! item with where it stands (free, claimed and by whom until when, done,
//! needs review, skipped, failed), so a person can check a source before
//! the workers drain it and follow it while they do. Where each item
//! stands is `queue::standing`'s; this is its command line and its lines.

use std::io::Write;

use crate::queue::claims::store::ItemStatus;
use crate::queue::source::Source;
use crate::queue::standing;
use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::time::Timestamp;
use serde_json::json;

use crate::error::CmdResult;

/// `ralph-ctl queue`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct QueueArgs {
    /// Where the items are: plan:PATH, dir:PATH or cmd:COMMAND, prd:PATH,
    /// github:label=NAME or beads:.
    #[arg(value_name = "SOURCE")]
    pub(crate) source: String,
    /// Print one JSON array instead: {"id", "title", "status", "worker", "expiresAt", "why"}
    /// (with --remote also "iterations", "costUsd", "branch", "landed").
    #[arg(long)]
    pub(crate) json: bool,
    /// Show the backlog as every machine that shares it on the git remote
    /// NAME sees it (`run --queue SOURCE --remote NAME`): who works what,
    /// what ended how, what landed where (default: config queueRemote).
    #[arg(long, value_name = "NAME")]
    pub(crate) remote: Option<String>,
    /// With --remote: forget the records of items that ended needs-review,
    /// skipped or failed (all, or the ids given), so that workers take them
    /// again. Done items and live claims are kept.
    #[arg(long, value_name = "ID", num_args = 0.., requires = "remote")]
    pub(crate) retry: Option<Vec<String>>,
}

/// `ralph-ctl queue` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: QueueArgs) -> CmdResult {
    let configured = || {
        ralph_core::judge::config::Config::load(paths, &ralph_core::judge::config::ProcessEnv)
            .ok()
            .and_then(|c| c.queue.remote)
    };
    match args.remote.or_else(configured) {
        Some(remote) => remote_queue(
            paths,
            &args.source,
            &remote,
            args.retry.as_deref(),
            args.json,
            &mut std::io::stdout(),
        ),
        None => run(paths, &args.source, args.json, &mut std::io::stdout()),
    }
}

/// Writes the backlog of `source` as the records on the git remote
/// `remote` hold it (every machine's workers), after forgetting those
/// `retry` names; a line per item, or one JSON array.
pub(crate) fn remote_queue(
    paths: &ProjectPaths,
    source: &str,
    remote: &str,
    retry: Option<&[String]>,
    json: bool,
    out: &mut dyn Write,
) -> CmdResult {
    let shared = standing::remote(paths, source, remote, retry)?;
    let now = Timestamp::now();
    let rows = shared.rows();
    let standing = |row: &standing::Row<'_>| shared.standing(row, now);
    let missing = |id: &str| shared.missing(id);
    let written = (|| {
        if json {
            let rows: Vec<serde_json::Value> = rows
                .iter()
                .map(|row| {
                    let (id, title, record) = row;
                    json!({
                        "id": id,
                        "title": title,
                        "status": standing(row),
                        "worker": record.map(|r| r.worker.clone()),
                        "expiresAt": record.filter(|r| r.is_held(now)).map(|r| r.expires_at),
                        "why": record.and_then(|r| r.why.clone()),
                        "iterations": record.and_then(|r| r.iterations),
                        "costUsd": record.and_then(|r| r.cost_usd),
                        "branch": record.and_then(|r| r.branch.clone()),
                        "landed": record.and_then(|r| r.landed.clone()),
                        "claims": record.map(|r| r.claims),
                    })
                })
                .collect();
            let rows = serde_json::Value::Array(rows).to_string();
            writeln!(out, "{}", ralph_core::text::printable_json(&rows))?;
            return out.flush();
        }
        for id in &shared.forgotten {
            writeln!(out, "forgot {id}: workers take it again")?;
        }
        let counts = counts(rows.iter().map(standing));
        let machines: std::collections::BTreeSet<&str> = shared
            .records
            .values()
            .map(|(_, r)| r.machine.as_str())
            .collect();
        writeln!(
            out,
            "{} item{} of {} on remote {remote} ({} machine{} so far): {}",
            rows.len(),
            if rows.len() == 1 { "" } else { "s" },
            shown_source(&shared.source),
            machines.len(),
            if machines.len() == 1 { "" } else { "s" },
            if counts.is_empty() {
                "none".to_string()
            } else {
                counts.join(", ")
            }
        )?;
        let width = rows
            .iter()
            .map(|(id, _, _)| id.chars().count())
            .max()
            .unwrap_or(0);
        for row in &rows {
            let status = standing(row);
            let (id, title, record) = row;
            let mut line = format!("  {status:<12} {id:<width$}  {title}");
            if status == "waiting" {
                line.push_str(&waits_on(&missing(id)));
            }
            if let Some(r) = record {
                match status {
                    "claimed" => line.push_str(&format!("  ({} until {})", r.worker, r.expires_at)),
                    "free" | "waiting" => {}
                    _ => line.push_str(&ending_of(r)),
                }
            }
            // Titles and reasons are the backlog's and the agent's text.
            writeln!(out, "{}", ralph_core::text::printable(&line))?;
        }
        out.flush()
    })();
    super::written(written, exit_codes::OK)
}

/// `  (WORKER, N iterations, $COST, landed at COMMIT)` and why, when it did
/// not land: how an item recorded on the remote ended.
fn ending_of(r: &crate::queue::remote::Record) -> String {
    let mut parts = vec![r.worker.clone()];
    if let Some(n) = r.iterations {
        parts.push(format!("{n} iteration{}", if n == 1 { "" } else { "s" }));
    }
    if let Some(cost) = r.cost_usd {
        parts.push(ralph_core::units::Usd::from_dollars(cost).to_string());
    }
    if let Some(commit) = &r.landed {
        parts.push(format!("landed at {}", crate::queue::remote::short(commit)));
    } else if let Some(branch) = &r.branch {
        parts.push(format!("branch {branch}"));
    }
    let mut line = format!("  ({})", parts.join(", "));
    if let Some(why) = r.why.as_deref().filter(|_| r.landed.is_none()) {
        line.push_str(&format!(": {why}"));
    }
    line
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
    let local = standing::local(paths, source)?;
    let standing = local.standing(Timestamp::now());
    let (items, claims) = (&local.items, &local.claims);
    let source = shown_source(&local.source);
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
                        "after": item.after,
                        "author": item.author,
                    })
                })
                .collect();
            let rows = serde_json::Value::Array(rows).to_string();
            writeln!(out, "{}", ralph_core::text::printable_json(&rows))?;
            return out.flush();
        }
        let counts = counts(standing.iter().map(|(s, _)| *s));
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
            if let Some(author) = &item.author {
                line.push_str(&format!("  (by @{author})"));
            }
            let missing = claims.missing(item);
            if record.is_none() && !missing.is_empty() {
                line.push_str(&waits_on(&missing));
            }
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

/// A source as a line's subject: `beads:` is `beads` (the colon would
/// double before the counts).
fn shown_source(source: &Source) -> String {
    let text = source.to_string();
    match text.strip_suffix(':') {
        Some(bare) if !bare.contains(':') => bare.to_string(),
        _ => text,
    }
}

/// `  (after A and B, which have not landed)`: what a waiting item waits on.
fn waits_on(missing: &[&str]) -> String {
    let which = if missing.len() == 1 {
        "which has"
    } else {
        "which have"
    };
    format!("  (after {}, {which} not landed)", and_list(missing))
}

/// "A", "A and B", "A, B and C".
fn and_list(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// "2 free, 3 done": how many of `standings` stand at each status, in the
/// order a backlog moves, those at none left out.
fn counts<'a>(standings: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
    [
        "free",
        "waiting",
        "claimed",
        "done",
        "needs-review",
        "skipped",
        "failed",
    ]
    .iter()
    .map(|w| (w, standings.clone().filter(|s| s == w).count()))
    .filter(|(_, n)| *n > 0)
    .map(|(w, n)| format!("{n} {w}"))
    .collect()
}
