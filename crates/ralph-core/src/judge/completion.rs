//! Deciding whether the agent claims completion, and whether the claim
//! proves itself: the pure half of "no completion without verification".
//!
//! [`assess`] reads the claim (per completion mode) from the latest message;
//! the hook then runs the verification commands only when a claim is made;
//! [`gates`] judges the claim against the plan, the status block and the
//! verification results.

use serde::{Deserialize, Serialize};

use crate::judge::claims::{self, StatusBlock};
use crate::observe::plan::PlanReport;
use crate::observe::test_counts::{self, CommandCounts};
use crate::observe::verify::{BaselineFailure, VerifyCommand, VerifyResult};

/// Iterations of test-only work that trigger the saturation nudge.
pub const TEST_SATURATION_ITERATIONS: u32 = 3;
/// How many recent iterations the dual mode looks back for completion indications.
pub const DUAL_WINDOW: u32 = 5;
/// Completion indications the dual mode needs within [`DUAL_WINDOW`].
pub const DUAL_INDICATIONS: usize = 2;

/// How a completion claim is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionMode {
    /// The signal on its own line, `<promise>`, or `EXIT_SIGNAL: true`; then the gates.
    #[default]
    Strict,
    /// `EXIT_SIGNAL: true` and at least two completion indications in recent iterations; then the gates.
    Dual,
    /// An additive score over the evidence, compared with a threshold; then the gates.
    Confidence,
}

impl CompletionMode {
    /// Parses a mode name.
    pub fn parse(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "strict" => Some(CompletionMode::Strict),
            "dual" => Some(CompletionMode::Dual),
            "confidence" => Some(CompletionMode::Confidence),
            _ => None,
        }
    }

    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CompletionMode::Strict => "strict",
            CompletionMode::Dual => "dual",
            CompletionMode::Confidence => "confidence",
        }
    }
}

/// A check a completion claim must pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// No unchecked required item in the plan files.
    Plan,
    /// The status block says COMPLETE and tests not failing.
    StatusBlock,
    /// Every verification command exits 0.
    Verification,
    /// No verification command ran fewer tests, or skipped more, than at
    /// the loop's start (`testBaseline`).
    TestCount,
    /// No file under `protectedPaths` (nor a test runner's configuration)
    /// changed or removed since the loop's start.
    ProtectedPaths,
    /// Every verify command runs what it ran at the loop's start: the same
    /// program, Python module, package.json script, makefile and runner
    /// configuration (`checkResolution`).
    CheckUnchanged,
    /// No file in `.git` that sends git elsewhere (`commondir`, `gitdir`,
    /// `config.worktree`, alternates, grafts, `shallow`) differs from the
    /// loop's start (`gitRecord`).
    GitUnchanged,
    /// The iteration's calls were not refused for lack of permission while
    /// nothing changed (work the client would not let happen is not done).
    Permission,
}

impl Gate {
    /// The gate's name, the one every view gives it: the state file, the
    /// notices, the audit log, `status` and the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Gate::Plan => "plan",
            Gate::StatusBlock => "status_block",
            Gate::Verification => "verification",
            Gate::TestCount => "test_count",
            Gate::ProtectedPaths => "protected_paths",
            Gate::CheckUnchanged => "check_unchanged",
            Gate::GitUnchanged => "git_unchanged",
            Gate::Permission => "permission",
        }
    }
}

/// The weights of the confidence mode.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ConfidenceWeights {
    /// A status block with `EXIT_SIGNAL: true`.
    pub status_block_exit: u32,
    /// The completion signal given as a claim.
    pub signal: u32,
    /// Completion words ("done", "finished").
    pub keyword: u32,
    /// A strong completion phrase ("all tasks complete") instead.
    pub strong_keyword: u32,
    /// Every plan file exists with no unchecked required item.
    pub plan_complete: u32,
    /// Test-only iterations have saturated.
    pub test_saturation: u32,
    /// The score at which a claim is made.
    pub threshold: u32,
}

impl Default for ConfidenceWeights {
    fn default() -> Self {
        ConfidenceWeights {
            status_block_exit: 50,
            signal: 60,
            keyword: 10,
            strong_keyword: 15,
            plan_complete: 40,
            test_saturation: 10,
            threshold: 60,
        }
    }
}

/// The completion part of the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompletionConfig {
    /// How a claim is read.
    pub mode: CompletionMode,
    /// Plan files checked at the project root.
    pub plan_files: Vec<String>,
    /// Verification commands.
    pub verify: Vec<VerifyCommand>,
    /// The confidence mode's weights.
    pub weights: ConfidenceWeights,
    /// `allowFewerTests`: a claim may run fewer tests, or skip more, than
    /// the loop's baseline (a task that removes tests on purpose).
    pub allow_fewer_tests: bool,
    /// `protectedPaths`: globs of files, relative to the project, of which
    /// a claim may not have changed or removed any that existed at the
    /// loop's start (new files are free), with the test runners'
    /// configuration beside them.
    pub protected_paths: Vec<String>,
    /// Set when a formula step turned the project's `verify` off for this
    /// claim (`verify: false`): a claim checked by nothing says so, not
    /// that no check is configured.
    pub verify_off_by_formula: bool,
}

impl Default for CompletionConfig {
    fn default() -> Self {
        CompletionConfig {
            mode: CompletionMode::Strict,
            plan_files: crate::observe::plan::DEFAULT_PLAN_FILES
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            verify: Vec::new(),
            weights: ConfidenceWeights::default(),
            allow_fewer_tests: false,
            protected_paths: Vec::new(),
            verify_off_by_formula: false,
        }
    }
}

/// What the latest message claims.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assessment {
    /// True when the message claims completion (the gates decide the rest).
    pub claimed: bool,
    /// What made (or would have made) the claim, for messages and the history.
    pub basis: String,
    /// The confidence score, in confidence mode.
    pub score: Option<u32>,
    /// True when `EXIT_SIGNAL: false` vetoed a claim.
    pub vetoed: bool,
    /// The status block, when the message has one.
    pub status_block: Option<StatusBlock>,
    /// True when the message carries any completion indication (signal,
    /// `EXIT_SIGNAL: true`, completion language).
    pub indication: bool,
}

/// Reads the claim of `message`. `recent_indications` are the iterations
/// (before this one) whose messages carried a completion indication;
/// `test_saturated` says whether test-only work has saturated.
pub fn assess(
    config: &CompletionConfig,
    signal: &str,
    message: &str,
    iteration: u32,
    recent_indications: &[u32],
    plan: &PlanReport,
    test_saturated: bool,
) -> Assessment {
    let form = claims::signal_claim(message, signal);
    let block = claims::status_block(message);
    let exit = block.as_ref().and_then(|b| b.exit_signal);
    let (weak, strong) = claims::completion_language(message);
    let indication = form.is_some() || exit == Some(true) || weak;
    let vetoed = exit == Some(false);
    let mut assessment = Assessment {
        status_block: block,
        indication,
        vetoed,
        ..Default::default()
    };
    let (claimed, basis) = match config.mode {
        CompletionMode::Strict => match (form, exit) {
            (Some(form), _) => (true, form.describe().to_string()),
            (None, Some(true)) => (true, "status block EXIT_SIGNAL: true".to_string()),
            _ => (false, String::new()),
        },
        CompletionMode::Dual => {
            let window_start = iteration.saturating_sub(DUAL_WINDOW - 1);
            let count = recent_indications
                .iter()
                .filter(|&&i| i >= window_start && i < iteration)
                .count()
                + usize::from(indication);
            let claimed = exit == Some(true) && count >= DUAL_INDICATIONS;
            (
                claimed,
                format!(
                    "dual: EXIT_SIGNAL {} with {count} completion indication(s) in the last {DUAL_WINDOW} iterations",
                    match exit {
                        Some(true) => "true",
                        Some(false) => "false",
                        None => "absent",
                    }
                ),
            )
        }
        CompletionMode::Confidence => {
            let w = &config.weights;
            let mut score: u32 = 0;
            let mut parts = Vec::new();
            let mut add = |points: u32, why: &str| {
                if points > 0 {
                    score = score.saturating_add(points);
                    parts.push(format!("{why} +{points}"));
                }
            };
            if exit == Some(true) {
                add(w.status_block_exit, "EXIT_SIGNAL");
            }
            if form.is_some() {
                add(w.signal, "signal");
            }
            if strong {
                add(w.strong_keyword, "strong completion phrase");
            } else if weak {
                add(w.keyword, "completion word");
            }
            if plan.complete() {
                add(w.plan_complete, "plan complete");
            }
            if test_saturated {
                add(w.test_saturation, "test saturation");
            }
            assessment.score = Some(score);
            (
                score >= w.threshold,
                format!("confidence {score}/{} ({})", w.threshold, parts.join(", ")),
            )
        }
    };
    assessment.claimed = claimed && !vetoed;
    assessment.basis = if vetoed && claimed {
        format!("{basis}, vetoed by EXIT_SIGNAL: false")
    } else {
        basis
    };
    assessment
}

/// The result of one gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateResult {
    /// Which gate.
    pub gate: Gate,
    /// True when the gate let the claim through.
    pub passed: bool,
    /// What was checked and found.
    pub detail: String,
}

/// A gate's detail on one line (its lines joined by " / "), at most about
/// 300 characters: its start (which check, how it ended) and its end (a
/// test run's failing assertion and summary come last), with `…` between.
/// What the audit log and the breaker's reason quote of a gate.
pub fn detail_on_one_line(text: &str) -> String {
    const HEAD: usize = 100;
    const TAIL: usize = 200;
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" / ");
    let count = joined.chars().count();
    if count <= HEAD + TAIL {
        return joined;
    }
    let head: String = joined.chars().take(HEAD).collect();
    let tail: String = joined.chars().skip(count - TAIL).collect();
    format!("{head} … {tail}")
}

fn is_complete(status: &str) -> bool {
    matches!(
        status.to_ascii_uppercase().as_str(),
        "COMPLETE" | "COMPLETED"
    )
}

fn is_failing(tests: &str) -> bool {
    matches!(
        tests.to_ascii_uppercase().as_str(),
        "FAILING" | "FAILED" | "FAIL" | "FAILURE"
    )
}

/// Calls of a claim's iteration that the stop could not see (the
/// transcript had not caught up: 2.1.330 under load writes them after the
/// hook returns), when that matters to the permission gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unseen {
    /// Nothing unseen that matters.
    Nothing,
    /// The previous iteration's calls were refused for lack of permission.
    AfterRefusals,
    /// The iteration made model requests besides its answer: it used tools.
    ToolCalls,
}

/// The failing tests' headers of `result` that its tail lost (every one
/// when any is lost, so they read in order), as a paragraph ending in
/// `; `; empty when the tail shows them all.
fn headers_above_the_tail(result: &crate::observe::verify::VerifyResult) -> String {
    let lost = result
        .failure_headers
        .iter()
        .any(|h| !result.output_tail.contains(h.trim_end_matches('…')));
    if !lost {
        return String::new();
    }
    let mut text = format!(
        "the failing tests it named ({}{}):\n{}\n",
        result.failure_headers.len(),
        if result.failure_headers.len() >= crate::observe::verify::MAX_FAILURE_HEADERS {
            ", the first ones"
        } else {
            ""
        },
        result.failure_headers.join("\n")
    );
    text.push_str("and the ");
    text
}

/// The permission gate, for a claim whose iteration had calls refused for
/// lack of permission (`denied`), or whose calls could not be seen
/// (`unseen`). A claim made while nothing in the project changed fails it
/// (the work the client refused, or may have refused, is not shown done,
/// whatever the message says); with changes it passes, naming the
/// refusals. `None` when neither holds. The advice is true to the run's
/// mode (`sandboxed`: the client ran in its own sandbox).
pub fn permission_gate(
    denied: &[crate::judge::errors::Refusal],
    unseen: Unseen,
    changed: bool,
    sandboxed: bool,
) -> Option<GateResult> {
    let detail = if denied.is_empty() {
        match (unseen, changed) {
            (Unseen::Nothing, _) => return None,
            (_, true) => {
                "this iteration's calls could not be seen yet, but the project changed".into()
            }
            (Unseen::AfterRefusals, false) => {
                "the previous iteration's calls were refused for lack of permission, this \
                 iteration's calls could not be seen yet, and nothing in the project changed: \
                 the work is not shown done; allow the calls (a permission mode, allow rules or \
                 the sandbox) if they were refused again"
                    .into()
            }
            (Unseen::ToolCalls, false) => {
                "this iteration used tools whose calls could not be seen yet (the client had \
                 not written them), and nothing in the project changed: the work is not shown \
                 done; say so again at the next stop, or allow the calls (a permission mode, \
                 allow rules or the sandbox) if the client refused them"
                    .into()
            }
        }
    } else {
        let calls = crate::judge::errors::calls_in_words(denied);
        if changed {
            format!("the client refused {calls} for lack of permission, but the project changed")
        } else {
            format!(
                "the client refused {calls} for lack of permission and nothing in the project changed: \
                 the work was not done; {}",
                crate::judge::errors::how_to_allow_in(denied, sandboxed)
            )
        }
    };
    Some(GateResult {
        gate: Gate::Permission,
        passed: changed,
        detail,
    })
}

/// What a claim is compared with besides its own results: the loop's start.
#[derive(Clone, Copy, Debug, Default)]
pub struct Integrity<'a> {
    /// Each verification command's test counts at the loop's start.
    pub baseline: &'a [CommandCounts],
    /// `allowFewerTests`: the counts are not compared.
    pub allow_fewer_tests: bool,
    /// The files under `protectedPaths` changed since the loop's start
    /// (`None`: no `protectedPaths`, or nothing to compare with).
    pub protected_changes: Option<&'a [String]>,
    /// What the verify commands resolve to differently from the loop's
    /// start (`None`: nothing to compare with).
    pub check_changes: Option<&'a [String]>,
    /// The files in `.git` that send git elsewhere and differ from the
    /// loop's start (`None`: nothing to compare with).
    pub git_changes: Option<&'a [String]>,
    /// The verification commands that failed at the test baseline: a
    /// claim's failure of one is named as the baseline's.
    pub baseline_failures: &'a [BaselineFailure],
    /// Whether that baseline was measured in the loop's worktree (after
    /// its `worktreeSetup`), not in the main checkout.
    pub baseline_in_worktree: bool,
    /// What a worktree's failed check reached of the main checkout, which
    /// it cannot see (see [`crate::observe::main_checkout`]).
    pub main_checkout_reach: &'a [String],
}

/// Judges a claim: the plan, the status block's consistency, the
/// verification results (`None` when the commands did not run), and, when
/// they passed, their test counts against the loop's baseline and the
/// protected paths.
pub fn gates(
    assessment: &Assessment,
    plan: &PlanReport,
    verify: &[VerifyCommand],
    results: Option<&[VerifyResult]>,
    integrity: &Integrity<'_>,
) -> Vec<GateResult> {
    let mut out = vec![plan_gate(plan)];
    out.extend(assessment.status_block.as_ref().map(status_block_gate));
    if !verify.is_empty() {
        let gate = verification_gate(verify, results, integrity);
        let passed = gate.passed;
        out.push(gate);
        if let (true, Some(results)) = (passed, results) {
            out.extend(test_count_gate(integrity, results));
        }
    }
    if let Some(changes) = integrity.protected_changes {
        out.push(protected_gate(changes));
    }
    if let Some(changes) = integrity.check_changes {
        out.push(check_unchanged_gate(changes));
    }
    if let Some(changes) = integrity.git_changes {
        out.push(git_unchanged_gate(changes));
    }
    out
}

/// The plan gate: passes when every required plan item is checked; its
/// detail names the first ten unchecked items.
fn plan_gate(plan: &PlanReport) -> GateResult {
    let unchecked: Vec<String> = plan
        .files
        .iter()
        .flat_map(|f| {
            f.unchecked
                .iter()
                .map(move |item| format!("{}: - [ ] {item}", f.path))
        })
        .collect();
    GateResult {
        gate: Gate::Plan,
        passed: unchecked.is_empty(),
        detail: if !plan.exists() {
            "no plan file".into()
        } else if unchecked.is_empty() {
            "every required plan item is checked".into()
        } else {
            let shown: Vec<&str> = unchecked.iter().take(10).map(String::as_str).collect();
            let more = unchecked.len().saturating_sub(shown.len());
            format!(
                "{} unchecked item(s):\n{}{}",
                unchecked.len(),
                shown.join("\n"),
                if more > 0 {
                    format!("\n… and {more} more")
                } else {
                    String::new()
                }
            )
        },
    }
}

/// The status block gate: passes when the block's `STATUS` is COMPLETE and
/// its `TESTS_STATUS` is not failing.
fn status_block_gate(block: &StatusBlock) -> GateResult {
    let mut problems = Vec::new();
    match block.status.as_deref() {
        Some(s) if is_complete(s) => {}
        Some(s) => problems.push(format!("STATUS is {s}, not COMPLETE")),
        None => problems.push("STATUS is missing".to_string()),
    }
    if let Some(t) = block.tests_status.as_deref().filter(|t| is_failing(t)) {
        problems.push(format!("TESTS_STATUS is {t}"));
    }
    GateResult {
        gate: Gate::StatusBlock,
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            "STATUS COMPLETE and tests not failing".into()
        } else {
            problems.join("; ")
        },
    }
}

/// The verification gate: passes when every verification command ran and
/// passed; a failure's detail names the command, how it ended, the tail of
/// its output and what else is known of it ([`failure_context`]).
fn verification_gate(
    verify: &[VerifyCommand],
    results: Option<&[VerifyResult]>,
    integrity: &Integrity<'_>,
) -> GateResult {
    let (passed, detail) = match results {
        None => (false, "the verification commands did not run".to_string()),
        Some(results) => match results.iter().find(|r| !r.passed()) {
            Some(r) => (false, verification_failure(r, integrity)),
            None if results.len() < verify.len() => {
                (false, "not every verification command ran".into())
            }
            None => (true, format!("{} command(s) passed", results.len())),
        },
    };
    GateResult {
        gate: Gate::Verification,
        passed,
        detail,
    }
}

/// The detail of a failed verification command: the command, how it ended,
/// the last lines of its output and the context of its failure.
fn verification_failure(r: &VerifyResult, integrity: &Integrity<'_>) -> String {
    format!(
        "`{}` ({}) {}; {}{}",
        r.command,
        r.name,
        if r.timed_out {
            "timed out".to_string()
        } else {
            match r.exit_code {
                Some(code) => format!("exited {code}"),
                None => "could not run".to_string(),
            }
        },
        match r.output_tail.trim() {
            "" => "it printed nothing".to_string(),
            _ => format!(
                "{}last lines of its output:\n{}",
                headers_above_the_tail(r),
                r.output_tail
            ),
        },
        failure_context(r, integrity)
    )
}

/// What a failed verification is besides its output: a failure the test
/// baseline already had (named as the baseline's, so that it is not taken
/// for the work's), and what a worktree's check reached of the main
/// checkout. Empty when neither.
fn failure_context(failed: &VerifyResult, integrity: &Integrity<'_>) -> String {
    let mut out = String::new();
    if let Some(before) = integrity
        .baseline_failures
        .iter()
        .find(|b| b.command == failed.command)
    {
        let place = if integrity.baseline_in_worktree {
            "this worktree's test baseline (after its worktreeSetup)"
        } else {
            "the loop's test baseline"
        };
        out.push_str(&format!(
            "\nThe baseline had this failure already: at {place}, before any of this work, {}",
            before.describe()
        ));
    }
    if !integrity.main_checkout_reach.is_empty() {
        out.push_str(&format!(
            "\nThe check reaches into the main checkout, which a worktree's check cannot see: {}; \
             the worktree lacks that environment of its own, which no change of the item gives \
             it: the person sets worktreeSetup in .claude/ralph/config.json",
            integrity.main_checkout_reach.join("; ")
        ));
    }
    out
}

/// The git-unchanged gate: no file in `.git` that sends git elsewhere
/// differs from the loop's start (see [`crate::own_git::record`]).
fn git_unchanged_gate(changes: &[String]) -> GateResult {
    GateResult {
        gate: Gate::GitUnchanged,
        passed: changes.is_empty(),
        detail: if changes.is_empty() {
            "nothing in .git sends git elsewhere than at the start".into()
        } else {
            format!(
                "files in .git that send git to another folder differ from the loop's start: {}; \
                 ralph's git never follows them, but the person's git would (and run the programs \
                 that folder's configuration names): remove a file that was not there at the start, \
                 put back one that was (a worktree's commondir holds `../..`)",
                changes.join("; ")
            )
        },
    }
}

/// The check-unchanged gate: each verify command runs what it ran at the
/// loop's start (see [`crate::observe::resolved`]).
fn check_unchanged_gate(changes: &[String]) -> GateResult {
    GateResult {
        gate: Gate::CheckUnchanged,
        passed: changes.is_empty(),
        detail: if changes.is_empty() {
            "the check runs what it ran at the start".into()
        } else {
            let shown: Vec<&str> = changes.iter().take(10).map(String::as_str).collect();
            format!(
                "the check is not the one of the loop's start: {}{}; undo that change (remove \
                 the file that shadows the runner, rename a module named like the standard \
                 library's, restore the script, the makefile or the package manager's \
                 configuration), or have the person run `ralph-ctl reload` if the check changes \
                 on purpose",
                shown.join("; "),
                if changes.len() > shown.len() {
                    "; …"
                } else {
                    ""
                }
            )
        },
    }
}

/// `n test`/`n tests`.
fn tests_word(n: u64) -> String {
    format!("{n} test{}", if n == 1 { "" } else { "s" })
}

/// The test-count gate: each command with a baseline must have run at least
/// as many tests and skipped no more; `None` when no command has a baseline
/// (an unknown runner) or `allowFewerTests` is set.
pub fn test_count_gate(integrity: &Integrity<'_>, results: &[VerifyResult]) -> Option<GateResult> {
    if integrity.allow_fewer_tests {
        return None;
    }
    let mut compared = Vec::new();
    let mut problems = Vec::new();
    for result in results {
        let Some(base) = integrity
            .baseline
            .iter()
            .find(|b| b.command == result.command)
        else {
            continue;
        };
        // Counted by the runners of the baseline only: a summary line of
        // another runner (which the code under test could print) adds
        // nothing. A baseline from before runners were recorded: all.
        let now = if base.runners.is_empty() {
            result.counts
        } else {
            test_counts::counted_by(&result.by_runner, &base.runners)
        };
        let Some(now) = now else {
            // No summary now. Some runners print one only when tests fail
            // (Gradle, `mvn -q`): after a fix that is no evidence of removed
            // tests. Every other runner always prints one: its absence is
            // (its output silenced, or it no longer runs).
            let only_on_failure = base.runners.is_empty()
                || base
                    .runners
                    .iter()
                    .all(|r| test_counts::SUMMARY_ON_FAILURE_ONLY.contains(&r.as_str()));
            if !only_on_failure {
                problems.push(format!(
                    "verify `{}` printed no test summary, where at the start {} did ({} run):                      its output was silenced or its tests no longer run; restore them, or set                      allowFewerTests if the task removes tests on purpose",
                    result.command,
                    base.runners.join(" and "),
                    base.counts.run
                ));
            }
            continue;
        };
        let base = base.counts;
        let fewer = now.run < base.run;
        let more_skipped = now.skipped > base.skipped;
        if fewer || more_skipped {
            problems.push(format!(
                "verify `{}` ran {} (baseline {}) and skipped {} (baseline {}): tests were removed \
                 or skipped; restore them, or set allowFewerTests if the task removes tests on purpose",
                result.command,
                tests_word(now.run),
                base.run,
                now.skipped,
                base.skipped
            ));
        } else {
            compared.push(format!(
                "`{}` ran {} (baseline {}), skipped {} (baseline {})",
                result.command,
                tests_word(now.run),
                base.run,
                now.skipped,
                base.skipped
            ));
        }
    }
    if problems.is_empty() && compared.is_empty() {
        return None;
    }
    Some(GateResult {
        gate: Gate::TestCount,
        passed: problems.is_empty(),
        detail: if problems.is_empty() {
            compared.join("; ")
        } else {
            problems.join("\n")
        },
    })
}

/// The protected-paths gate over the files changed or removed since the
/// loop's start (and the test runners' configuration added): a new file
/// under `protectedPaths` is not among them.
fn protected_gate(changes: &[String]) -> GateResult {
    GateResult {
        gate: Gate::ProtectedPaths,
        passed: changes.is_empty(),
        detail: if changes.is_empty() {
            "no protected file changed".into()
        } else {
            let shown: Vec<&str> = changes.iter().take(10).map(String::as_str).collect();
            format!(
                "{} protected file(s) changed since the loop started (protectedPaths): {}{}; \
                 restore them (git checkout, or undo the edit; delete a test runner's \
                 configuration that was added) and put a new test in a new file, or remove the \
                 path from protectedPaths if the task changes it on purpose",
                changes.len(),
                shown.join(", "),
                if changes.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            )
        },
    }
}

/// What an accepted claim was checked against, in words, for the reason
/// the loop completed: exactly the gates that ran, and, when no
/// verification command ran, why: none is configured, or the formula's
/// step turned verification off (`verify_off_by_formula`).
pub fn accepted_summary(results: &[GateResult], verify_off_by_formula: bool) -> String {
    let mut checked = Vec::new();
    for gate in results {
        checked.push(match gate.gate {
            Gate::Plan => {
                if gate.detail == "no plan file" {
                    "no plan file to check".to_string()
                } else {
                    "every required plan item checked".to_string()
                }
            }
            Gate::StatusBlock => "the status block says COMPLETE".to_string(),
            Gate::Verification => format!("verified: {}", gate.detail),
            Gate::TestCount => format!("test counts: {}", gate.detail),
            Gate::ProtectedPaths | Gate::CheckUnchanged | Gate::GitUnchanged | Gate::Permission => {
                gate.detail.clone()
            }
        });
    }
    let mut text = format!("checked: {}", checked.join(", "));
    if !results.iter().any(|g| g.gate == Gate::Verification) {
        text.push_str(if verify_off_by_formula {
            "; not verified: verification is off for this step (`verify: false` in the formula)"
        } else {
            "; not verified: no verification command is configured (add your test command \
             to `verify` in .claude/ralph/config.json)"
        });
    }
    text
}

/// How [`failure_notice`] starts: the driver finds a rejected claim in the
/// text 2.0 shows of the Stop hook's block by it.
pub const REJECTED_NOTICE: &str = "[Ralph: completion claim rejected]";

/// The gates named `gates` that rejected a claim, in words, as the person
/// is told: "the verification gate failed".
pub fn rejected_by<'a>(gates: impl IntoIterator<Item = &'a str>) -> String {
    let gates: Vec<&str> = gates.into_iter().collect();
    match gates.as_slice() {
        [] => "a gate failed".into(),
        [one] => format!("the {one} gate failed"),
        _ => format!("the {} gates failed", gates.join(", ")),
    }
}

/// The text that starts the re-injected prompt when a claim failed its gates.
pub fn failure_notice(assessment: &Assessment, results: &[GateResult]) -> String {
    let mut text = format!(
        "{REJECTED_NOTICE} You claimed completion ({}), but these checks failed:\n",
        assessment.basis
    );
    for gate in results.iter().filter(|g| !g.passed) {
        text.push_str(&format!("- {} gate: {}\n", gate.gate.as_str(), gate.detail));
    }
    text.push_str(&format!(
        "Fix what failed, run `{}` until it passes, and only then claim completion again.",
        crate::observe::prompt_text::CHECK_COMMAND
    ));
    text
}

/// The nudge added when test-only work has saturated.
pub fn saturation_notice(iterations: u32) -> String {
    format!(
        "[Ralph: {iterations} iterations only ran tests] Either claim completion now, if the work is \
         done and verified, or name the next task and do it."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_accepted_claim_names_what_was_checked_and_what_was_not() {
        let gate = |gate, detail: &str| GateResult {
            gate,
            passed: true,
            detail: detail.into(),
        };
        for (gates, want) in [
            (
                vec![gate(Gate::Plan, "no plan file")],
                "checked: no plan file to check; not verified: no verification command is configured \
                 (add your test command to `verify` in .claude/ralph/config.json)",
            ),
            (
                vec![
                    gate(Gate::Plan, "every required plan item is checked"),
                    gate(Gate::Verification, "2 command(s) passed"),
                ],
                "checked: every required plan item checked, verified: 2 command(s) passed",
            ),
            (
                vec![
                    gate(Gate::Plan, "no plan file"),
                    gate(Gate::StatusBlock, "STATUS COMPLETE and tests not failing"),
                ],
                "checked: no plan file to check, the status block says COMPLETE; not verified: \
                 no verification command is configured (add your test command to `verify` in \
                 .claude/ralph/config.json)",
            ),
        ] {
            assert_eq!(accepted_summary(&gates, false), want);
        }
        // A formula step that turned verification off says so.
        assert_eq!(
            accepted_summary(&[gate(Gate::Plan, "no plan file")], true),
            "checked: no plan file to check; not verified: verification is off for this step \
             (`verify: false` in the formula)"
        );
        let gates = [gate(Gate::Verification, "1 command(s) passed")];
        assert_eq!(
            accepted_summary(&gates, true),
            "checked: verified: 1 command(s) passed"
        );
    }

    #[test]
    fn refused_calls_fail_a_claim_only_when_nothing_changed() {
        use crate::judge::errors::Refusal;
        assert_eq!(
            permission_gate(&[], Unseen::Nothing, false, false),
            None,
            "no refusal, no gate"
        );
        let refused = [Refusal::of_call("Write", Some("/p/notes.txt"))];
        let failed = permission_gate(&refused, Unseen::Nothing, false, false).unwrap();
        assert_eq!(failed.gate, Gate::Permission);
        assert!(!failed.passed);
        assert!(
            failed.detail.contains("`Write(/p/notes.txt)`")
                && failed.detail.contains("nothing in the project changed")
                && failed.detail.contains("--permission-mode acceptEdits"),
            "{}",
            failed.detail
        );
        let passed = permission_gate(&refused, Unseen::Nothing, true, false).unwrap();
        assert!(passed.passed, "{}", passed.detail);
        // The calls not seen yet, the previous iteration's refused.
        let unseen = permission_gate(&[], Unseen::AfterRefusals, false, false).unwrap();
        assert!(!unseen.passed && unseen.detail.contains("could not be seen yet"));
        assert!(
            permission_gate(&[], Unseen::AfterRefusals, true, false)
                .unwrap()
                .passed
        );
        // Tools used that the stop could not see, and nothing changed.
        let unseen = permission_gate(&[], Unseen::ToolCalls, false, false).unwrap();
        assert!(!unseen.passed && unseen.detail.contains("nothing in the project changed"));
        assert!(
            permission_gate(&[], Unseen::ToolCalls, true, false)
                .unwrap()
                .passed
        );
    }
    use crate::observe::plan::PlanFile;

    const S: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";

    fn block(status: &str, tests: &str, exit: &str) -> String {
        format!(
            "---RALPH_STATUS---\nSTATUS: {status}\nTASKS_COMPLETED_THIS_LOOP: 2\nFILES_MODIFIED: 3\nTESTS_STATUS: {tests}\n\
             WORK_TYPE: IMPLEMENTATION\nEXIT_SIGNAL: {exit}\nRECOMMENDATION: none\n---END_RALPH_STATUS---"
        )
    }

    fn strict(message: &str) -> Assessment {
        assess(
            &CompletionConfig::default(),
            S,
            message,
            3,
            &[],
            &PlanReport::default(),
            false,
        )
    }

    /// Realistic final messages and whether strict mode reads a claim (before the gates).
    #[test]
    fn strict_claims_table() {
        let cases: Vec<(String, bool)> = vec![
            (format!("All findings fixed; cargo test passes.\n{S}"), true),
            (format!("{}\n{S}", block("COMPLETE", "PASSING", "true")), true),
            (block("COMPLETE", "PASSING", "true"), true),
            (format!("Work done.\n```\n{}\n```", block("COMPLETE", "PASSING", "true")), true),
            (format!("<promise>{S}</promise>"), true),
            // EXIT_SIGNAL: false vetoes everything in the same message.
            (format!("All tasks complete.\n{}", block("COMPLETE", "PASSING", "false")), false),
            (format!("{S}\n{}", block("IN_PROGRESS", "PASSING", "false")), false),
            // Status blocks that say COMPLETE somewhere but do not exit.
            (block("IN_PROGRESS", "PASSING", "false"), false),
            ("---RALPH_STATUS---\nSTATUS: IN_PROGRESS\nTASKS_COMPLETED_THIS_LOOP: COMPLETE the parser\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---".into(), false),
            (block("COMPLETE", "PASSING", "unsure"), false),
            // Words, not claims.
            ("All tasks complete. Everything is done.".into(), false),
            ("Step 1 is done.".into(), false),
            (format!("I'll emit {S} when the last test passes."), false),
            (format!("Once everything is green I will write {S}"), false),
            (format!("> {S}"), false),
            (format!("```\n{S}\n```"), false),
            ("Still working: 3 findings remain.\nRALPH_ITERATION_COMPLETE: 3 findings remain".into(), false),
            (String::new(), false),
        ];
        for (message, want) in cases {
            assert_eq!(strict(&message).claimed, want, "{message:?}");
        }
        assert!(strict(&format!("{S}\n{}", block("X", "Y", "false"))).vetoed);
    }

    #[test]
    fn dual_mode_needs_two_indications() {
        let config = CompletionConfig {
            mode: CompletionMode::Dual,
            ..Default::default()
        };
        let plan = PlanReport::default();
        let exit = block("COMPLETE", "PASSING", "true");
        // (message, earlier iterations with indications, claimed) at iteration 10
        let cases: Vec<(String, Vec<u32>, bool)> = vec![
            (exit.clone(), vec![], false),
            (format!("All tasks complete.\n{exit}"), vec![], false),
            (exit.clone(), vec![9], true),
            (exit.clone(), vec![5], false),
            (exit.clone(), vec![6], true),
            (format!("The parser is done.\n{exit}"), vec![8, 9], true),
            (S.to_string(), vec![8, 9], false),
            (
                format!(
                    "All tasks complete.\n{}",
                    block("COMPLETE", "PASSING", "false")
                ),
                vec![8, 9],
                false,
            ),
        ];
        for (message, recent, want) in cases {
            let a = assess(&config, S, &message, 10, &recent, &plan, false);
            assert_eq!(a.claimed, want, "{message:?} {recent:?}: {}", a.basis);
        }
    }

    #[test]
    fn confidence_mode_scores() {
        let config = CompletionConfig {
            mode: CompletionMode::Confidence,
            ..Default::default()
        };
        let done_plan = PlanReport {
            files: vec![PlanFile {
                path: "TODO.md".into(),
                unchecked: vec![],
                checked: 3,
            }],
        };
        let none = PlanReport::default();
        // (message, plan, saturated, score, claimed)
        let cases: Vec<(String, &PlanReport, bool, u32, bool)> = vec![
            (
                block("COMPLETE", "PASSING", "true"),
                &none,
                false,
                50,
                false,
            ),
            (
                format!(
                    "All tasks complete.\n{}",
                    block("COMPLETE", "PASSING", "true")
                ),
                &none,
                false,
                65,
                true,
            ),
            (
                format!("Finished.\n{}", block("COMPLETE", "PASSING", "true")),
                &none,
                false,
                60,
                true,
            ),
            ("All tasks complete.".into(), &done_plan, false, 55, false),
            ("All tasks complete.".into(), &done_plan, true, 65, true),
            (S.into(), &none, false, 60, true),
            (
                format!("{S}\n{}", block("COMPLETE", "PASSING", "false")),
                &done_plan,
                false,
                100,
                false,
            ),
        ];
        for (message, plan, saturated, score, claimed) in cases {
            let a = assess(&config, S, &message, 4, &[], plan, saturated);
            assert_eq!(
                (a.score, a.claimed),
                (Some(score), claimed),
                "{message:?}: {}",
                a.basis
            );
        }
    }

    fn result(exit: Option<i32>, timed_out: bool) -> VerifyResult {
        VerifyResult {
            name: "tests".into(),
            command: "cargo test".into(),
            exit_code: exit,
            timed_out,
            duration_ms: 5,
            output_tail: "test foo ... FAILED".into(),
            counts: None,
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        }
    }

    #[test]
    fn a_failure_the_baseline_had_is_named_as_the_baseline_s_with_what_it_reached() {
        let assessment = Assessment {
            claimed: true,
            ..Default::default()
        };
        let verify = [VerifyCommand {
            name: "tests".into(),
            command: "cargo test".into(),
            timeout_seconds: 60,
            network: false,
        }];
        let failed = [result(Some(1), false)];
        let detail = |integrity: &Integrity<'_>| {
            gates(
                &assessment,
                &PlanReport::default(),
                &verify,
                Some(&failed),
                integrity,
            )
            .into_iter()
            .find(|g| g.gate == Gate::Verification)
            .unwrap()
            .detail
        };
        let plain = detail(&Integrity::default());
        assert!(!plain.contains("baseline"), "{plain}");
        let before = [BaselineFailure {
            command: "cargo test".into(),
            how: "exited 101".into(),
            counts: Some(test_counts::TestCounts::new(3, 1, 0)),
            excerpt: "test foo ... FAILED".into(),
        }];
        let reach = ["its output names /p/data.json, in the main checkout".to_string()];
        let named = detail(&Integrity {
            baseline_failures: &before,
            baseline_in_worktree: true,
            main_checkout_reach: &reach,
            ..Integrity::default()
        });
        assert!(
            named.contains(
                "The baseline had this failure already: at this worktree's test baseline (after \
                 its worktreeSetup), before any of this work, `cargo test` exited 101 (4 run \
                 (3 passed, 1 failed), 0 skipped)"
            ),
            "{named}"
        );
        assert!(
            named.contains("The check reaches into the main checkout")
                && named.contains("/p/data.json")
                && named.contains("worktreeSetup"),
            "{named}"
        );
        // Another command's failure at the baseline is not this one's.
        let other = [BaselineFailure {
            command: "make lint".into(),
            ..before[0].clone()
        }];
        let unnamed = detail(&Integrity {
            baseline_failures: &other,
            ..Integrity::default()
        });
        assert!(!unnamed.contains("baseline"), "{unnamed}");
    }

    #[test]
    fn a_long_gate_detail_keeps_its_start_and_its_end() {
        let mut output = String::from("tests failed (exit 1):\n");
        for n in 0..200 {
            output.push_str(&format!("test_{n} ... ok\n"));
        }
        output.push_str("AssertionError: 2 != 3\nFAILED (failures=1)\n");
        let detail = detail_on_one_line(&output);
        assert!(
            detail.starts_with("tests failed (exit 1): / test_0 ... ok"),
            "{detail}"
        );
        assert!(
            detail.ends_with("AssertionError: 2 != 3 / FAILED (failures=1)"),
            "{detail}"
        );
        assert!(detail.contains(" … "), "{detail}");
        assert!(detail.chars().count() <= 303, "{detail}");
        assert_eq!(detail_on_one_line("one\n\n two "), "one / two");
    }

    #[test]
    fn a_failed_check_that_printed_nothing_says_so() {
        let verify = vec![VerifyCommand {
            name: "tests".into(),
            command: "cargo test".into(),
            timeout_seconds: 60,
            network: false,
        }];
        let assessment = strict(&format!("Done.\n{S}"));
        let detail = |output: &str| {
            let failed = VerifyResult {
                output_tail: output.into(),
                ..result(Some(1), false)
            };
            let gates = gates(
                &assessment,
                &PlanReport::default(),
                &verify,
                Some(&[failed]),
                &Integrity::default(),
            );
            let gate = gates.iter().find(|g| g.gate == Gate::Verification);
            gate.unwrap().detail.clone()
        };
        for empty in ["", "\n  \n"] {
            assert_eq!(
                detail(empty),
                "`cargo test` (tests) exited 1; it printed nothing"
            );
        }
        assert_eq!(
            detail("test foo ... FAILED"),
            "`cargo test` (tests) exited 1; last lines of its output:\ntest foo ... FAILED"
        );
    }

    #[test]
    #[allow(clippy::too_many_lines)] // a table of cases, one per row
    fn gates_table() {
        let verify = vec![VerifyCommand {
            name: "tests".into(),
            command: "cargo test".into(),
            timeout_seconds: 60,
            network: false,
        }];
        let open_plan = PlanReport {
            files: vec![PlanFile {
                path: "IMPLEMENTATION_PLAN.md".into(),
                unchecked: vec!["write the lexer".into()],
                checked: 1,
            }],
        };
        let no_plan = PlanReport::default();
        let signal_only = strict(&format!("Done.\n{S}"));
        let with_block = |status, tests| strict(&format!("{}\n{S}", block(status, tests, "true")));
        // (assessment, plan, results, failed gates)
        /// (assessment, plan, verification results, gates that fail)
        type Case<'a> = (
            Assessment,
            &'a PlanReport,
            Option<Vec<VerifyResult>>,
            Vec<&'a str>,
        );
        let cases: Vec<Case> = vec![
            (
                signal_only.clone(),
                &no_plan,
                Some(vec![result(Some(0), false)]),
                vec![],
            ),
            (
                signal_only.clone(),
                &open_plan,
                Some(vec![result(Some(0), false)]),
                vec!["plan"],
            ),
            (
                signal_only.clone(),
                &no_plan,
                Some(vec![result(Some(101), false)]),
                vec!["verification"],
            ),
            (
                signal_only.clone(),
                &no_plan,
                Some(vec![result(None, true)]),
                vec!["verification"],
            ),
            (signal_only.clone(), &no_plan, None, vec!["verification"]),
            (
                with_block("COMPLETE", "PASSING"),
                &no_plan,
                Some(vec![result(Some(0), false)]),
                vec![],
            ),
            (
                with_block("IN_PROGRESS", "PASSING"),
                &no_plan,
                Some(vec![result(Some(0), false)]),
                vec!["status_block"],
            ),
            (
                with_block("COMPLETE", "FAILING"),
                &open_plan,
                Some(vec![result(Some(0), false)]),
                vec!["plan", "status_block"],
            ),
        ];
        for (assessment, plan, results, failed) in cases {
            let gates = gates(
                &assessment,
                plan,
                &verify,
                results.as_deref(),
                &Integrity::default(),
            );
            let got: Vec<&str> = gates
                .iter()
                .filter(|g| !g.passed)
                .map(|g| g.gate.as_str())
                .collect();
            assert_eq!(got, failed, "{}", assessment.basis);
        }
        let failed = gates(
            &signal_only,
            &open_plan,
            &verify,
            Some(&[result(Some(101), false)]),
            &Integrity::default(),
        );
        let notice = failure_notice(&signal_only, &failed);
        assert!(
            notice.starts_with("[Ralph: completion claim rejected]"),
            "{notice}"
        );
        assert!(
            notice.contains("IMPLEMENTATION_PLAN.md: - [ ] write the lexer"),
            "{notice}"
        );
        assert!(
            notice.ends_with("Fix what failed, run `ralph-ctl check` until it passes, and only then claim completion again."),
            "{notice}"
        );
        assert!(
            notice.contains("`cargo test` (tests) exited 101")
                && notice.contains("test foo ... FAILED"),
            "{notice}"
        );
        assert!(
            gates(&signal_only, &no_plan, &[], None, &Integrity::default())
                .iter()
                .all(|g| g.passed)
        );
    }

    #[test]
    #[allow(clippy::too_many_lines)] // a table of cases, one per row
    fn fewer_tests_or_more_skipped_than_the_baseline_fail_the_claim() {
        use crate::observe::test_counts::{CommandCounts, TestCounts};
        let cmd = "python3 -m unittest";
        let verify = vec![VerifyCommand {
            name: "tests".into(),
            command: cmd.into(),
            timeout_seconds: 60,
            network: false,
        }];
        let counts = |run, skipped| Some(TestCounts::new(run, 0, skipped));
        let ran = |exit: i32, counts: Option<TestCounts>| VerifyResult {
            name: "tests".into(),
            command: cmd.into(),
            exit_code: Some(exit),
            timed_out: false,
            duration_ms: 5,
            output_tail: String::new(),
            counts,
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        };
        // A run whose summaries came from these runners.
        let ran_by = |by_runner: &[(&str, TestCounts)]| VerifyResult {
            by_runner: by_runner
                .iter()
                .map(|(name, counts)| (name.to_string(), *counts))
                .collect(),
            ..ran(0, test_counts::total(by_runner.iter().map(|(_, c)| c)))
        };
        let baseline = |run, failed, skipped| {
            vec![CommandCounts {
                command: cmd.into(),
                counts: TestCounts {
                    run,
                    passed: run - failed,
                    failed,
                    skipped,
                },
                runners: Vec::new(),
            }]
        };
        let baseline_of = |runner: &str| {
            vec![CommandCounts {
                command: cmd.into(),
                counts: TestCounts::new(3, 1, 0),
                runners: vec![runner.to_string()],
            }]
        };
        let other_command = vec![CommandCounts {
            command: "pytest".into(),
            counts: TestCounts::new(9, 0, 0),
            runners: Vec::new(),
        }];
        let assessment = strict(&format!("done\n{S}"));
        // (baseline, allowFewerTests, result, failed gates, words in the notice)
        type Case = (
            Vec<CommandCounts>,
            bool,
            VerifyResult,
            Vec<&'static str>,
            Vec<&'static str>,
        );
        let cases: Vec<Case> = vec![
            // The failing test deleted: 3 run where 4 ran (1 failing) at the start.
            (
                baseline(4, 1, 0),
                false,
                ran(0, counts(3, 0)),
                vec!["test_count"],
                vec![
                    "ran 3 tests (baseline 4) and skipped 0 (baseline 0)",
                    "allowFewerTests",
                ],
            ),
            // The failing test skipped.
            (
                baseline(4, 1, 0),
                false,
                ran(0, counts(3, 1)),
                vec!["test_count"],
                vec!["ran 3 tests (baseline 4) and skipped 1 (baseline 0)"],
            ),
            // A skip swapped for a new passing test: as many ran, one more skipped.
            (
                baseline(4, 1, 0),
                false,
                ran(0, counts(4, 1)),
                vec!["test_count"],
                vec!["skipped 1 (baseline 0)"],
            ),
            // No summary now (Gradle, `mvn -q` print one only on failure): not compared.
            (baseline(4, 1, 0), false, ran(0, None), vec![], vec![]),
            (baseline_of("gradle"), false, ran(0, None), vec![], vec![]),
            // A runner that always prints one printed none: silenced.
            (
                baseline_of("unittest"),
                false,
                ran(0, None),
                vec!["test_count"],
                vec!["printed no test summary, where at the start unittest did (4 run)"],
            ),
            // Another runner's summary line printed by the code under test adds nothing.
            (
                baseline_of("pytest"),
                false,
                ran_by(&[
                    ("pytest", TestCounts::new(3, 0, 0)),
                    ("cargo", TestCounts::new(500, 0, 0)),
                ]),
                vec!["test_count"],
                vec!["ran 3 tests (baseline 4)"],
            ),
            (
                baseline_of("pytest"),
                false,
                ran_by(&[("pytest", TestCounts::new(4, 0, 0))]),
                vec![],
                vec![],
            ),
            // Fixed: as many tests, all passing; and more tests.
            (
                baseline(4, 1, 0),
                false,
                ran(0, counts(4, 0)),
                vec![],
                vec![],
            ),
            (
                baseline(4, 1, 1),
                false,
                ran(0, counts(6, 1)),
                vec![],
                vec![],
            ),
            // Allowed on purpose.
            (
                baseline(4, 1, 0),
                true,
                ran(0, counts(1, 2)),
                vec![],
                vec![],
            ),
            // No baseline for this command (an unknown runner, or the command changed).
            (other_command, false, ran(0, counts(1, 0)), vec![], vec![]),
            (vec![], false, ran(0, None), vec![], vec![]),
            // Verification failed: that gate speaks, the counts do not.
            (
                baseline(4, 1, 0),
                false,
                ran(1, counts(2, 0)),
                vec!["verification"],
                vec![],
            ),
        ];
        for (base, allow, result, want_failed, words) in cases {
            let results = [result];
            let integrity = Integrity {
                baseline: &base,
                allow_fewer_tests: allow,
                ..Integrity::default()
            };
            let gates = gates(
                &assessment,
                &PlanReport::default(),
                &verify,
                Some(&results),
                &integrity,
            );
            let failed: Vec<&str> = gates
                .iter()
                .filter(|g| !g.passed)
                .map(|g| g.gate.as_str())
                .collect();
            assert_eq!(failed, want_failed, "{base:?} {:?}", results[0].counts);
            let notice = failure_notice(&assessment, &gates);
            for word in words {
                assert!(notice.contains(word), "{word}: {notice}");
                assert!(notice.contains("verify `python3 -m unittest` "), "{notice}");
            }
            // An accepted claim compared with its baseline says so.
            let compared = want_failed.is_empty()
                && !allow
                && base.first().is_some_and(|b| b.command == cmd)
                && results[0].counts.is_some();
            assert_eq!(
                accepted_summary(&gates, false).contains("test counts: `python3 -m unittest` ran"),
                compared,
                "{:?}",
                results[0].counts
            );
        }
    }

    #[test]
    fn a_changed_git_pointer_fails_the_claim_and_is_named() {
        let assessment = strict(&format!("done\n{S}"));
        let changed = [".git/commondir appeared (it holds `/tmp/evil`)".to_string()];
        let none: Vec<String> = vec![];
        for (changes, failed) in [
            (Some(&changed[..]), true),
            (Some(&none[..]), false),
            (None, false),
        ] {
            let integrity = Integrity {
                git_changes: changes,
                ..Integrity::default()
            };
            let gates = gates(&assessment, &PlanReport::default(), &[], None, &integrity);
            let gate = gates.iter().find(|g| g.gate == Gate::GitUnchanged);
            assert_eq!(gate.is_some(), changes.is_some());
            assert_eq!(gate.is_some_and(|g| !g.passed), failed);
            let notice = failure_notice(&assessment, &gates);
            assert_eq!(
                notice.contains("- git_unchanged gate: ")
                    && notice.contains(".git/commondir appeared"),
                failed,
                "{notice}"
            );
        }
    }

    #[test]
    fn a_changed_protected_file_fails_the_claim_and_is_named() {
        let assessment = strict(&format!("done\n{S}"));
        let changed = ["tests/test_calc.py".to_string()];
        let none: Vec<String> = vec![];
        for (changes, failed) in [
            (Some(&changed[..]), true),
            (Some(&none[..]), false),
            (None, false),
        ] {
            let integrity = Integrity {
                protected_changes: changes,
                check_changes: None,
                git_changes: None,
                ..Integrity::default()
            };
            let gates = gates(&assessment, &PlanReport::default(), &[], None, &integrity);
            let gate = gates.iter().find(|g| g.gate == Gate::ProtectedPaths);
            assert_eq!(gate.is_some(), changes.is_some());
            assert_eq!(gate.is_some_and(|g| !g.passed), failed);
            if failed {
                let notice = failure_notice(&assessment, &gates);
                assert!(
                    notice.contains("protected_paths gate: 1 protected file(s) changed")
                        && notice.contains("tests/test_calc.py"),
                    "{notice}"
                );
            }
        }
    }
}
