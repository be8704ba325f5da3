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
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::state::LoopState;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;
use ralph_core::persist::store::StateStore;

use crate::error::CmdResult;
use crate::error::CtlError;
use crate::queue::item_loops::ItemLoop;
use crate::render::{self, esc};

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

/// The whole page: the loop's sections ([`render::loop_sections`]) in a
/// page of their own.
pub(crate) fn html(paths: &ProjectPaths, state: &LoopState, config: Option<&Config>) -> String {
    let mut page = String::new();
    let _ = write!(
        page,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>Ralph loop report</title>\
         <style>{}</style></head><body><h1>Ralph loop in {}</h1>",
        render::STYLE,
        esc(&paths.root.display().to_string())
    );
    let now = ralph_core::time::Timestamp::now().secs();
    match &state.queue {
        Some(queue) => {
            let loops = crate::queue::item_loops::read_all(paths);
            let items = render::items(queue, &loops);
            let pending = crate::queue::item_loops::pending(paths, state);
            page.push_str(&render::run_sections(state, &items, &pending, now));
            page.push_str(&item_folds(&items, &loops, now));
        }
        None => page.push_str(&render::loop_sections(state, config, now)),
    }
    page.push_str("</body></html>\n");
    page
}

/// Each item of a queue run folded: its record, then its own loop's
/// sections (judged by its own pin), when its folder still holds it.
fn item_folds(items: &[render::ItemView], loops: &[ItemLoop], now: u64) -> String {
    let mut folds = String::new();
    for item in items {
        let own = loops.iter().find(|l| l.item_id() == Some(item.id));
        let inner = match (item.state, own) {
            (Some(state), Some(own)) => render::loop_sections(state, own.config.as_ref(), now),
            _ => "<p class=\"muted\">its loop's record is no longer here</p>".into(),
        };
        folds.push_str(&render::fold(item, &inner));
    }
    folds
}

#[cfg(test)]
mod tests {
    use super::*;
    use ralph_core::judge::completion::{CompletionMode, Gate, GateResult};
    use ralph_core::judge::state::ClaimRecord;
    use ralph_core::observe::test_counts::{CommandCounts, TestCounts};
    use ralph_core::observe::verify::VerifyResult;

    #[test]
    fn a_queue_run_has_a_row_per_item_escaped_and_each_item_folded() {
        let state = crate::testdir::queue_run_state();
        let page = html(&ProjectPaths::new("/p"), &state, None);
        assert!(
            page.contains(
                "<span class=\"run-counts\">3 items taken: 1 done, 1 working, 1 needs-review</span>"
            ),
            "{page}"
        );
        assert!(page.contains("<td class=\"title\">add &lt;b&gt;</td><td class=\"item-status\" data-status=\"done\">done</td><td>2</td><td>$0.5000</td>"), "{page}");
        assert!(
            page.contains("data-status=\"needs-review\">needs-review</td>"),
            "{page}"
        );
        // No loop folder under /p: each item folded with its record alone.
        assert_eq!(page.matches("<details class=\"item\"").count(), 3, "{page}");
        assert!(
            page.contains("<summary>fix it: needs-review</summary>"),
            "{page}"
        );
        assert!(!page.contains("no iteration recorded yet"), "{page}");
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
                failure_headers: Vec::new(),
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
