//! `ralph-ctl history`: the loops a new start or a reset replaced, kept in
//! `.claude/context/runtime/history/` so that no finished loop is lost.

use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::judge::lifecycle;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::text::{printable, printable_json};

use crate::error::CmdResult;

/// `ralph-ctl history`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// Print one JSON object per loop instead: {"file", "state"}.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `ralph-ctl history` as its arguments ask, on stdout.
pub(crate) fn command(paths: &ProjectPaths, args: HistoryArgs) -> CmdResult {
    run(paths, args.json, &mut std::io::stdout())
}

/// Writes the kept loops to `out`, oldest first: two lines each (when it
/// began, its session, how it ended), or with `json` one object per line,
/// `{"file": …, "state": …}` (`"error"` for a file that cannot be read).
pub(crate) fn run(paths: &ProjectPaths, json: bool, out: &mut dyn Write) -> CmdResult {
    let archived = StateStore::new(paths).archived()?;
    let written = (|| {
        if archived.is_empty() && !json {
            writeln!(
                out,
                "No earlier loops kept in {} yet: each new start and each reset keeps the loop it replaces there.",
                paths.root.display()
            )?;
        }
        if !json && !archived.is_empty() {
            writeln!(
                out,
                "Earlier loops in {} (oldest first):",
                paths.root.display()
            )?;
        }
        for (path, state) in &archived {
            if json {
                let value = match state {
                    Ok(state) => serde_json::json!({"file": path, "state": state}),
                    Err(e) => serde_json::json!({"file": path, "error": e.to_string()}),
                };
                writeln!(out, "{}", printable_json(&value.to_string()))?;
                continue;
            }
            match state {
                Ok(state) => {
                    writeln!(
                        out,
                        "  {}  {}  session {}",
                        state.started_at,
                        state.status.as_str(),
                        state.session_id
                    )?;
                    // It may quote the agent (a RALPH_ABORT reason, a question).
                    let outcome = lifecycle::outcome_line(state);
                    writeln!(out, "      {}", printable(&outcome))?;
                }
                Err(e) => writeln!(out, "  {}: {}", path.display(), printable(&e.to_string()))?,
            }
        }
        out.flush()
    })();
    super::written(written, exit_codes::OK)
}
