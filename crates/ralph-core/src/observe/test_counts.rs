//! Test counts read from a verification command's output: the summary
//! lines the common test runners print (cargo test and nextest, pytest,
//! python unittest, go test -v and -json, jest, vitest, node --test, mocha, rspec,
//! phpunit, dotnet test, Maven Surefire, Gradle). Pure: the lines in, the
//! counts out; `None` when no runner's summary was seen.
//!
//! The lines are fed one at a time ([`Tally::line`]) as the command writes
//! them, so the whole output is read in constant memory, not only the tail
//! kept for messages. ANSI colour codes and carriage-return progress are
//! removed first.

use serde::{Deserialize, Serialize};

/// Longest line read, in bytes; the rest of a longer line is dropped (a
/// summary line is short).
pub const MAX_LINE_BYTES: usize = 4096;

/// How many tests a run counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestCounts {
    /// Tests that ran (passed or failed; skipped ones not included).
    pub run: u64,
    /// Tests that passed.
    pub passed: u64,
    /// Tests that failed (errors included).
    pub failed: u64,
    /// Tests skipped, ignored or pending.
    pub skipped: u64,
}

impl TestCounts {
    /// Counts from passed, failed and skipped.
    pub fn new(passed: u64, failed: u64, skipped: u64) -> TestCounts {
        TestCounts {
            run: passed.saturating_add(failed),
            passed,
            failed,
            skipped,
        }
    }

    /// Counts from a total that includes failed and skipped tests.
    fn from_total(total: u64, failed: u64, skipped: u64) -> TestCounts {
        let run = total.saturating_sub(skipped);
        TestCounts {
            run,
            passed: run.saturating_sub(failed),
            failed: failed.min(run),
            skipped,
        }
    }

    fn add(&mut self, other: TestCounts) {
        self.run = self.run.saturating_add(other.run);
        self.passed = self.passed.saturating_add(other.passed);
        self.failed = self.failed.saturating_add(other.failed);
        self.skipped = self.skipped.saturating_add(other.skipped);
    }

    /// "5 run (4 passed, 1 failed), 1 skipped", for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} run ({} passed, {} failed), {} skipped",
            self.run, self.passed, self.failed, self.skipped
        )
    }
}

/// One verification command's counts (the loop's `testBaseline`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommandCounts {
    /// The command line, as in config.json.
    pub command: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: TestCounts,
    /// The runners whose summaries they were read from (`pytest`,
    /// `cargo`, …): a claim is counted by the same ones only, so a summary
    /// line of another runner that the code under test prints adds nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runners: Vec<String>,
}

/// The runners that print a summary only when tests fail (Gradle, `mvn
/// -q`): a passing run of theirs without one is no sign of removed tests.
pub const SUMMARY_ON_FAILURE_ONLY: [&str; 2] = ["maven", "gradle"];

/// `counts` added; `None` when there are none.
pub fn total<'a>(counts: impl IntoIterator<Item = &'a TestCounts>) -> Option<TestCounts> {
    let mut total = None;
    for counts in counts {
        add_to(&mut total, *counts);
    }
    total
}

/// The counts of `by_runner` that the `runners` given read, added.
pub fn counted_by(by_runner: &[(String, TestCounts)], runners: &[String]) -> Option<TestCounts> {
    total(
        by_runner
            .iter()
            .filter(|(name, _)| runners.contains(name))
            .map(|(_, counts)| counts),
    )
}

/// The counts in `output`, read line by line (see [`Tally`]).
pub fn parse(output: &str) -> Option<TestCounts> {
    let mut tally = Tally::default();
    for line in output.lines() {
        tally.line(line);
    }
    tally.finish()
}

/// Reads summary lines as they come. Runners whose output holds one summary
/// per test binary or module (cargo test, dotnet, Maven, Gradle, unittest
/// run twice) are summed; those with one summary per run keep the last.
/// When lines of several runners appear, their counts are added.
#[derive(Debug, Default)]
pub struct Tally {
    cargo: Option<TestCounts>,
    nextest: Option<TestCounts>,
    pytest: Option<TestCounts>,
    unittest: Option<TestCounts>,
    unittest_ran: Option<u64>,
    go_run_seen: bool,
    go: TestCounts,
    jest: Option<TestCounts>,
    vitest: Option<TestCounts>,
    tap: Option<TestCounts>,
    node: NodeTap,
    mocha: Mocha,
    rspec: Option<TestCounts>,
    phpunit: Option<TestCounts>,
    dotnet: Option<TestCounts>,
    dotnet_summary: Option<TestCounts>,
    maven: Option<TestCounts>,
    gradle: Option<TestCounts>,
}

#[derive(Debug, Default)]
struct NodeTap {
    tests: Option<u64>,
    fail: u64,
    skipped: u64,
    todo: u64,
}

#[derive(Debug, Default)]
struct Mocha {
    passing: Option<u64>,
    pending: u64,
    failing: u64,
}

fn add_to(slot: &mut Option<TestCounts>, counts: TestCounts) {
    slot.get_or_insert_with(TestCounts::default).add(counts);
}

/// `line` without ANSI escape sequences, and only what follows its last
/// carriage return (a progress line redrawn in place).
pub fn clean(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let line = line
        .rsplit('\r')
        .find(|s| !s.trim().is_empty())
        .unwrap_or("");
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // CSI: parameters, then one final byte in @..~.
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC \.
            Some(']') => {
                while let Some(c) = chars.next() {
                    if c == '\x07' {
                        break;
                    }
                    if c == '\x1b' {
                        chars.next();
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// `"12 passed"` → `(12, "passed")`.
fn number_word(item: &str) -> Option<(u64, &str)> {
    let item = item.trim();
    let (number, rest) = item.split_once(char::is_whitespace)?;
    Some((number.parse().ok()?, rest.trim()))
}

/// `"Failures: 1"` → `("Failures", 1)`.
fn key_number(item: &str) -> Option<(&str, u64)> {
    let (key, value) = item.split_once(':')?;
    Some((key.trim(), value.trim().trim_end_matches('.').parse().ok()?))
}

impl Tally {
    /// Reads one line of output (its end of line already removed).
    pub fn line(&mut self, raw: &str) {
        let cleaned = clean(raw);
        let line = cleaned.trim();
        if line.is_empty() {
            return;
        }
        // Maven prints its lines behind a level.
        let line = ["[INFO] ", "[ERROR] ", "[WARNING] "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
            .unwrap_or(line)
            .trim();
        if let Some(counts) = cargo(line) {
            add_to(&mut self.cargo, counts);
        } else if let Some(counts) = nextest(line) {
            self.nextest = Some(counts);
        } else if let Some(counts) = pytest(line) {
            self.pytest = Some(counts);
        } else if let Some(ran) = unittest_ran(line) {
            if let Some(pending) = self.unittest_ran.replace(ran) {
                add_to(&mut self.unittest, TestCounts::from_total(pending, 0, 0));
            }
        } else if let (Some(ran), Some((failed, skipped))) =
            (self.unittest_ran, unittest_result(line))
        {
            self.unittest_ran = None;
            add_to(
                &mut self.unittest,
                TestCounts::from_total(ran, failed, skipped),
            );
        } else if line.starts_with("=== RUN ") {
            self.go_run_seen = true;
        } else if let Some(event) = go_json(line) {
            self.go_run_seen = true;
            match event {
                Some(GoResult::Pass) => self.go.add(TestCounts::new(1, 0, 0)),
                Some(GoResult::Fail) => self.go.add(TestCounts::new(0, 1, 0)),
                Some(GoResult::Skip) => self.go.add(TestCounts::new(0, 0, 1)),
                None => {}
            }
        } else if let Some(kind) = go_result(line) {
            match kind {
                GoResult::Pass => self.go.add(TestCounts::new(1, 0, 0)),
                GoResult::Fail => self.go.add(TestCounts::new(0, 1, 0)),
                GoResult::Skip => self.go.add(TestCounts::new(0, 0, 1)),
            }
        } else if let Some(counts) = jest(line) {
            self.jest = Some(counts);
        } else if let Some(counts) = vitest(line) {
            self.vitest = Some(counts);
        } else if let Some(counts) = tap_summary(line) {
            self.tap = Some(counts);
        } else if self.node_line(line) || self.mocha_line(line) {
            // Read into `node` or `mocha`.
        } else if let Some(counts) = rspec(line) {
            self.rspec = Some(counts);
        } else if let Some(counts) = phpunit(line) {
            self.phpunit = Some(counts);
        } else if let Some(counts) = dotnet(line) {
            add_to(&mut self.dotnet, counts);
        } else if let Some(counts) = dotnet_summary(line) {
            self.dotnet_summary = Some(counts);
        } else if let Some(counts) = maven(line) {
            add_to(&mut self.maven, counts);
        } else if let Some(counts) = gradle(line) {
            add_to(&mut self.gradle, counts);
        }
    }

    fn node_line(&mut self, line: &str) -> bool {
        // `# tests 4` (TAP) or `ℹ tests 4` (the spec reporter).
        let Some(rest) = line.strip_prefix("# ").or_else(|| line.strip_prefix("ℹ ")) else {
            return false;
        };
        let Some((key, value)) = rest.split_once(' ') else {
            return false;
        };
        let Ok(value) = value.trim().parse::<u64>() else {
            return false;
        };
        match key {
            "tests" => self.node.tests = Some(value),
            "fail" => self.node.fail = value,
            "skipped" => self.node.skipped = value,
            "todo" => self.node.todo = value,
            "pass" | "suites" | "cancelled" | "duration_ms" => {}
            _ => return false,
        }
        true
    }

    fn mocha_line(&mut self, line: &str) -> bool {
        let Some((n, word)) = number_word(line) else {
            return false;
        };
        let word = word.split_whitespace().next().unwrap_or("");
        match word {
            // `3 passing (12ms)`: the duration tells it from other text.
            "passing" if line.ends_with(')') => self.mocha.passing = Some(n),
            "pending" if self.mocha.passing.is_some() => self.mocha.pending = n,
            "failing" if self.mocha.passing.is_some() => self.mocha.failing = n,
            _ => return false,
        }
        true
    }

    /// The counts of every runner seen, added; `None` when none was seen.
    pub fn finish(self) -> Option<TestCounts> {
        total(self.by_runner().iter().map(|(_, counts)| counts))
    }

    /// Each runner whose summary was seen, by name, with its counts.
    pub fn by_runner(mut self) -> Vec<(&'static str, TestCounts)> {
        if let Some(pending) = self.unittest_ran.take() {
            add_to(&mut self.unittest, TestCounts::from_total(pending, 0, 0));
        }
        let node = self.node.tests.map(|tests| {
            let skipped = self.node.skipped.saturating_add(self.node.todo);
            TestCounts::from_total(tests, self.node.fail, skipped)
        });
        let mocha = self
            .mocha
            .passing
            .map(|p| TestCounts::new(p, self.mocha.failing, self.mocha.pending));
        let go = self.go_run_seen.then_some(self.go);
        let dotnet = self.dotnet_summary.or(self.dotnet);
        [
            ("cargo", self.cargo),
            ("nextest", self.nextest),
            ("pytest", self.pytest),
            ("unittest", self.unittest),
            ("go", go),
            ("jest", self.jest),
            ("vitest", self.vitest),
            ("tap", self.tap),
            ("node", node),
            ("mocha", mocha),
            ("rspec", self.rspec),
            ("phpunit", self.phpunit),
            ("dotnet", dotnet),
            ("maven", self.maven),
            ("gradle", self.gradle),
        ]
        .into_iter()
        .filter_map(|(name, counts)| counts.map(|c| (name, c)))
        .collect()
    }
}

/// tap's (the `tap` package, 16 and later) summary: `# { total: 725,
/// pass: 714, skip: 11 }`, with `fail` and `todo` when there are any.
fn tap_summary(line: &str) -> Option<TestCounts> {
    let body = line.strip_prefix("# {")?.strip_suffix('}')?;
    let (mut total, mut failed, mut skipped) = (None, 0, 0);
    for item in body.split(',') {
        let (key, value) = item.split_once(':')?;
        let value: u64 = value.trim().parse().ok()?;
        match key.trim() {
            "total" => total = Some(value),
            "fail" => failed = value,
            "skip" | "todo" => skipped += value,
            "pass" => {}
            _ => return None,
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; …`
fn cargo(line: &str) -> Option<TestCounts> {
    let rest = line.strip_prefix("test result: ")?;
    let (_, rest) = rest.split_once(". ")?;
    let (mut passed, mut failed, mut ignored) = (None, None, None);
    for item in rest.split(';') {
        match number_word(item) {
            Some((n, "passed")) => passed = Some(n),
            Some((n, "failed")) => failed = Some(n),
            Some((n, "ignored")) => ignored = Some(n),
            _ => {}
        }
    }
    Some(TestCounts::new(passed?, failed?, ignored.unwrap_or(0)))
}

/// `Summary [   0.157s] 4 tests run: 3 passed, 1 failed, 1 skipped`
fn nextest(line: &str) -> Option<TestCounts> {
    let rest = line.strip_prefix("Summary [")?;
    let (_, rest) = rest.split_once(']')?;
    let (run, rest) = rest.split_once(" run:")?;
    let (run, word) = number_word(run)?;
    if word != "tests" && word != "test" {
        return None;
    }
    let (mut passed, mut skipped) = (None, 0);
    for item in rest.split(',') {
        match number_word(item) {
            Some((n, "passed")) => passed = Some(n),
            Some((n, "skipped")) => skipped = n,
            _ => {}
        }
    }
    let passed = passed?.min(run);
    Some(TestCounts {
        run,
        passed,
        failed: run - passed,
        skipped,
    })
}

/// `==== 3 passed, 1 skipped, 2 failed in 0.12s ====`, or without the rules (`-q`).
fn pytest(line: &str) -> Option<TestCounts> {
    let line = line.trim_matches(|c| c == '=' || c == ' ');
    let (items, time) = line.rsplit_once(" in ")?;
    let time = time.split_whitespace().next()?;
    let seconds = time.strip_suffix('s')?;
    if seconds.is_empty() || !seconds.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    if items.trim() == "no tests ran" {
        return Some(TestCounts::default());
    }
    let (mut passed, mut failed, mut skipped, mut any) = (0u64, 0u64, 0u64, false);
    for item in items.split(',') {
        let (n, word) = number_word(item)?;
        match word {
            "passed" | "xpassed" => passed = passed.saturating_add(n),
            "failed" | "error" | "errors" => failed = failed.saturating_add(n),
            // A test marked to fail (xfail) does not test: as skipped.
            "skipped" | "xfailed" => skipped = skipped.saturating_add(n),
            "deselected" | "warning" | "warnings" | "rerun" | "reruns" => continue,
            _ => return None,
        }
        any = true;
    }
    any.then(|| TestCounts::new(passed, failed, skipped))
}

/// `Ran 4 tests in 0.001s`
fn unittest_ran(line: &str) -> Option<u64> {
    let rest = line.strip_prefix("Ran ")?;
    let (n, rest) = number_word(rest)?;
    (rest.starts_with("test in ") || rest.starts_with("tests in ")).then_some(n)
}

/// `OK`, `OK (skipped=1)`, `FAILED (failures=1, errors=1, skipped=2)`, `NO TESTS RAN`:
/// (failed, skipped).
fn unittest_result(line: &str) -> Option<(u64, u64)> {
    if line == "NO TESTS RAN" {
        return Some((0, 0));
    }
    let rest = line
        .strip_prefix("OK")
        .or_else(|| line.strip_prefix("FAILED"))?
        .trim();
    if rest.is_empty() {
        return Some((0, 0));
    }
    let inner = rest.strip_prefix('(')?.strip_suffix(')')?;
    let (mut failed, mut skipped) = (0u64, 0u64);
    for item in inner.split(',') {
        let (key, value) = item.split_once('=')?;
        let value: u64 = value.trim().parse().ok()?;
        match key.trim() {
            "failures" | "errors" | "unexpected successes" => failed = failed.saturating_add(value),
            // A test marked to fail (expectedFailure) does not test: as skipped.
            "skipped" | "expected failures" => skipped = skipped.saturating_add(value),
            _ => return None,
        }
    }
    Some((failed, skipped))
}

enum GoResult {
    Pass,
    Fail,
    Skip,
}

/// `--- PASS: TestAdd (0.00s)` (subtests indented).
fn go_result(line: &str) -> Option<GoResult> {
    let rest = line.strip_prefix("--- ")?;
    let (kind, rest) = rest.split_once(": ")?;
    if !rest.starts_with("Test") && !rest.starts_with("Example") && !rest.starts_with("Fuzz") {
        return None;
    }
    match kind {
        "PASS" => Some(GoResult::Pass),
        "FAIL" => Some(GoResult::Fail),
        "SKIP" => Some(GoResult::Skip),
        _ => None,
    }
}

/// One event of `go test -json` about a test (one with a `Test` field):
/// `Some(Some(result))` for its `pass`, `fail` or `skip`, `Some(None)` for
/// its other actions (`run`, `output`); `None` for any other line (a
/// package's own events among them).
#[allow(clippy::option_option)] // the three cases above, as the caller reads them
fn go_json(line: &str) -> Option<Option<GoResult>> {
    if !line.starts_with('{') || !line.contains("\"Action\":") {
        return None;
    }
    let event: serde_json::Value = serde_json::from_str(line).ok()?;
    let test = event.get("Test")?.as_str()?;
    if test.is_empty() {
        return None;
    }
    Some(match event.get("Action")?.as_str()? {
        "pass" => Some(GoResult::Pass),
        "fail" => Some(GoResult::Fail),
        "skip" => Some(GoResult::Skip),
        _ => None,
    })
}

/// `Tests:       1 failed, 1 skipped, 3 passed, 5 total`
fn jest(line: &str) -> Option<TestCounts> {
    let rest = line.strip_prefix("Tests:")?;
    let (mut total, mut failed, mut skipped) = (None, 0u64, 0u64);
    for item in rest.split(',') {
        let (n, word) = number_word(item)?;
        match word {
            "total" => total = Some(n),
            "failed" => failed = n,
            "skipped" | "todo" | "pending" => skipped = skipped.saturating_add(n),
            "passed" => {}
            _ => return None,
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `Tests  3 passed | 1 skipped (4)`
fn vitest(line: &str) -> Option<TestCounts> {
    let rest = line.strip_prefix("Tests ")?;
    let (items, total) = rest.trim_end().rsplit_once('(')?;
    let total: u64 = total.strip_suffix(')')?.trim().parse().ok()?;
    let (mut failed, mut skipped) = (0u64, 0u64);
    for item in items.split('|') {
        let (n, word) = number_word(item)?;
        match word {
            "failed" => failed = n,
            "skipped" | "todo" => skipped = skipped.saturating_add(n),
            "passed" => {}
            _ => return None,
        }
    }
    Some(TestCounts::from_total(total, failed, skipped))
}

/// `5 examples, 1 failure, 1 pending`
fn rspec(line: &str) -> Option<TestCounts> {
    let mut items = line.split(',');
    let (total, word) = number_word(items.next()?)?;
    if word != "examples" && word != "example" {
        return None;
    }
    let (mut failed, mut pending, mut seen_failures) = (0u64, 0u64, false);
    for item in items {
        let (n, word) = number_word(item)?;
        let word = word.split_whitespace().next().unwrap_or("");
        match word {
            "failure" | "failures" => {
                failed = n;
                seen_failures = true;
            }
            "pending" => pending = n,
            "error" | "errors" => failed = failed.saturating_add(n),
            _ => return None,
        }
    }
    seen_failures.then(|| TestCounts::from_total(total, failed, pending))
}

/// `OK (5 tests, 9 assertions)` or `Tests: 5, Assertions: 9, Failures: 1, Skipped: 1.`
fn phpunit(line: &str) -> Option<TestCounts> {
    if let Some(inner) = line.strip_prefix("OK (").and_then(|r| r.strip_suffix(')')) {
        let mut items = inner.split(',');
        let (total, word) = number_word(items.next()?)?;
        if word != "tests" && word != "test" {
            return None;
        }
        let (_, word) = number_word(items.next()?)?;
        return word
            .starts_with("assertion")
            .then(|| TestCounts::from_total(total, 0, 0));
    }
    if !line.starts_with("Tests: ") || !line.contains("Assertions: ") {
        return None;
    }
    let (mut total, mut failed, mut skipped) = (None, 0u64, 0u64);
    for item in line.trim_end_matches('.').split(',') {
        let (key, n) = key_number(item)?;
        match key {
            "Tests" => total = Some(n),
            "Failures" | "Errors" => failed = failed.saturating_add(n),
            "Skipped" | "Incomplete" => skipped = skipped.saturating_add(n),
            _ => {}
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `Passed!  - Failed:     0, Passed:     5, Skipped:     1, Total:     6, Duration: …`
fn dotnet(line: &str) -> Option<TestCounts> {
    let rest = line
        .strip_prefix("Passed!")
        .or_else(|| line.strip_prefix("Failed!"))?
        .trim_start()
        .strip_prefix('-')?;
    let (mut total, mut failed, mut skipped) = (None, 0u64, 0u64);
    for item in rest.split(',') {
        match key_number(item) {
            Some(("Total", n)) => total = Some(n),
            Some(("Failed", n)) => failed = n,
            Some(("Skipped", n)) => skipped = n,
            _ => {}
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `Test summary: total: 6, failed: 0, succeeded: 5, skipped: 1, duration: 1.2s`
fn dotnet_summary(line: &str) -> Option<TestCounts> {
    let rest = line.strip_prefix("Test summary:")?;
    let (mut total, mut failed, mut skipped) = (None, 0u64, 0u64);
    for item in rest.split(',') {
        match key_number(item) {
            Some(("total", n)) => total = Some(n),
            Some(("failed", n)) => failed = n,
            Some(("skipped", n)) => skipped = n,
            _ => {}
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `Tests run: 5, Failures: 1, Errors: 0, Skipped: 1` (a module's total;
/// the per-class lines, with `Time elapsed`, are not counted).
fn maven(line: &str) -> Option<TestCounts> {
    if !line.starts_with("Tests run: ") || line.contains("Time elapsed") {
        return None;
    }
    let (mut total, mut failed, mut skipped) = (None, 0u64, 0u64);
    for item in line.split(',') {
        match key_number(item) {
            Some(("Tests run", n)) => total = Some(n),
            Some(("Failures" | "Errors", n)) => failed = failed.saturating_add(n),
            Some(("Skipped", n)) => skipped = n,
            Some(_) => {}
            None => return None,
        }
    }
    Some(TestCounts::from_total(total?, failed, skipped))
}

/// `5 tests completed, 1 failed, 1 skipped`
fn gradle(line: &str) -> Option<TestCounts> {
    let mut items = line.split(',');
    let (total, word) = number_word(items.next()?)?;
    if word != "tests completed" && word != "test completed" {
        return None;
    }
    let (mut failed, mut skipped) = (0u64, 0u64);
    for item in items {
        match number_word(item)? {
            (n, "failed") => failed = n,
            (n, "skipped") => skipped = n,
            _ => return None,
        }
    }
    Some(TestCounts::from_total(total, failed, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(run: u64, passed: u64, failed: u64, skipped: u64) -> Option<TestCounts> {
        Some(TestCounts {
            run,
            passed,
            failed,
            skipped,
        })
    }

    #[test]
    #[allow(clippy::too_many_lines)] // a table of real outputs, one per runner
    fn each_runner_s_summary_is_read() {
        let cases: &[(&str, &str, Option<TestCounts>)] = &[
            // Real output of `python3 -m unittest` (Python 3.11) on this
            // project's test machine, failing and passing.
            (
                "unittest failing",
                "EF.s.\n======================================================================\n\
                 ERROR: test_err (test_a.T.test_err)\n\
                 ----------------------------------------------------------------------\n\
                 Ran 5 tests in 0.001s\n\nFAILED (failures=1, errors=1, skipped=1)\n",
                c(4, 2, 2, 1),
            ),
            (
                "unittest passing",
                "----------------------------------------------------------------------\n\
                 Ran 5 tests in 0.000s\n\nOK (skipped=1)\n",
                c(4, 4, 0, 1),
            ),
            (
                "unittest plain OK",
                "Ran 1 test in 0.000s\n\nOK\n",
                c(1, 1, 0, 0),
            ),
            (
                "unittest, nothing ran",
                "\nRan 0 tests in 0.000s\n\nNO TESTS RAN\n",
                c(0, 0, 0, 0),
            ),
            // Real output of `cargo test` (two test binaries and the
            // doc-tests), then of `cargo nextest run`, on this machine.
            (
                "cargo test, several binaries",
                "     Running unittests src/lib.rs (target/debug/deps/vi-c55e1ac914cbc8b5)\n\
                 running 4 tests\n\
                 test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
                 \x20    Running tests/it.rs (target/debug/deps/it-a2d5ce9056f08742)\n\
                 running 1 test\n\
                 test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
                 \x20  Doc-tests vi\n\
                 running 0 tests\n\
                 test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
                c(4, 4, 0, 1),
            ),
            (
                "cargo test failing",
                "running 4 tests\n\
                 test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.13s\n",
                c(3, 2, 1, 1),
            ),
            (
                "nextest failing",
                "────────────\n     Summary [   0.157s] 4 tests run: 3 passed, 1 failed, 1 skipped\n\
                 \x20       FAIL [   0.156s] (4/4) vi tests::bad\nerror: test run failed\n",
                c(4, 3, 1, 1),
            ),
            (
                "nextest passing",
                "     Summary [   0.034s] 4 tests run: 4 passed, 1 skipped\n",
                c(4, 4, 0, 1),
            ),
            (
                "pytest",
                "FAILED test_x.py::test_b - assert 1 == 2\n\
                 ============ 2 failed, 3 passed, 1 skipped in 0.12s ============\n",
                c(5, 3, 2, 1),
            ),
            (
                "pytest -q",
                "...s\n3 passed, 1 skipped in 0.05s\n",
                c(3, 3, 0, 1),
            ),
            (
                "pytest errors, warnings, xfail",
                "==== 1 failed, 4 passed, 1 xfailed, 2 warnings, 1 error in 1.02s ====\n",
                // A test marked xfail tests nothing: it counts as skipped.
                c(6, 4, 2, 1),
            ),
            (
                "pytest, nothing collected",
                "============================ no tests ran in 0.01s =============================\n",
                c(0, 0, 0, 0),
            ),
            (
                "go test -v",
                "=== RUN   TestAdd\n--- PASS: TestAdd (0.00s)\n=== RUN   TestSub\n\
                 === RUN   TestSub/neg\n    --- FAIL: TestSub/neg (0.00s)\n--- FAIL: TestSub (0.00s)\n\
                 === RUN   TestLater\n    x_test.go:9: later\n--- SKIP: TestLater (0.00s)\n\
                 FAIL\nFAIL\texample.com/x\t0.002s\n",
                c(3, 1, 2, 1),
            ),
            // Real output of `go test -json ./...` (go 1.19, Debian's
            // golang-go) on the same three tests as above.
            (
                "go test -json",
                concat!(
                    r#"{"Time":"2026-11-28T01:39:16.744310699Z","Action":"run","Package":"example.com/x","Test":"TestAdd"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744407433Z","Action":"output","Package":"example.com/x","Test":"TestAdd","Output":"=== RUN   TestAdd\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744469174Z","Action":"output","Package":"example.com/x","Test":"TestAdd","Output":"--- PASS: TestAdd (0.00s)\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744487051Z","Action":"pass","Package":"example.com/x","Test":"TestAdd","Elapsed":0}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744524206Z","Action":"run","Package":"example.com/x","Test":"TestSub"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744527261Z","Action":"output","Package":"example.com/x","Test":"TestSub","Output":"=== RUN   TestSub\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744557375Z","Action":"run","Package":"example.com/x","Test":"TestSub/neg"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744560049Z","Action":"output","Package":"example.com/x","Test":"TestSub/neg","Output":"=== RUN   TestSub/neg\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744625656Z","Action":"output","Package":"example.com/x","Test":"TestSub/neg","Output":"    x_test.go:12: neg\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744775889Z","Action":"output","Package":"example.com/x","Test":"TestSub","Output":"--- FAIL: TestSub (0.00s)\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744782058Z","Action":"output","Package":"example.com/x","Test":"TestSub/neg","Output":"    --- FAIL: TestSub/neg (0.00s)\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744785594Z","Action":"fail","Package":"example.com/x","Test":"TestSub/neg","Elapsed":0}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744788448Z","Action":"fail","Package":"example.com/x","Test":"TestSub","Elapsed":0}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744791322Z","Action":"run","Package":"example.com/x","Test":"TestLater"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744793616Z","Action":"output","Package":"example.com/x","Test":"TestLater","Output":"=== RUN   TestLater\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.74479633Z","Action":"output","Package":"example.com/x","Test":"TestLater","Output":"    x_test.go:15: later\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744799074Z","Action":"output","Package":"example.com/x","Test":"TestLater","Output":"--- SKIP: TestLater (0.00s)\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744801557Z","Action":"skip","Package":"example.com/x","Test":"TestLater","Elapsed":0}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.744803881Z","Action":"output","Package":"example.com/x","Output":"FAIL\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.745077897Z","Action":"output","Package":"example.com/x","Output":"FAIL\texample.com/x\t0.003s\n"}"#,
                    "\n",
                    r#"{"Time":"2026-11-28T01:39:16.745084938Z","Action":"fail","Package":"example.com/x","Elapsed":0.003}"#,
                    "\n",
                ),
                c(3, 1, 2, 1),
            ),
            (
                "go test without -v: no per-test lines to count",
                "ok  \texample.com/x\t0.002s\n",
                None,
            ),
            (
                "jest",
                "Test Suites: 1 failed, 1 passed, 2 total\n\
                 Tests:       1 failed, 1 skipped, 3 passed, 5 total\n\
                 Snapshots:   0 total\nTime:        0.512 s\n",
                c(4, 3, 1, 1),
            ),
            (
                "vitest",
                " Test Files  1 passed (1)\n      Tests  3 passed | 1 skipped (4)\n   Start at  10:00:00\n",
                c(3, 3, 0, 1),
            ),
            (
                "vitest failing",
                "      Tests  1 failed | 3 passed (4)\n",
                c(4, 3, 1, 0),
            ),
            // tap 18's summary.
            (
                "tap",
                "# { total: 725, pass: 714, skip: 11 }\n",
                c(714, 714, 0, 11),
            ),
            (
                "tap failing",
                "# { total: 10, pass: 7, fail: 2, todo: 1 }\n",
                c(9, 7, 2, 1),
            ),
            // Real output of `node --test` (Node 20), TAP and spec reporters.
            (
                "node --test (TAP)",
                "1..4\n# tests 4\n# suites 0\n# pass 2\n# fail 1\n# cancelled 0\n# skipped 1\n# todo 0\n# duration_ms 221.426235\n",
                c(3, 2, 1, 1),
            ),
            (
                "node --test (spec)",
                "ℹ tests 4\nℹ suites 0\nℹ pass 2\nℹ fail 1\nℹ cancelled 0\nℹ skipped 1\nℹ todo 0\nℹ duration_ms 57.1\n",
                c(3, 2, 1, 1),
            ),
            (
                "mocha",
                "  3 passing (12ms)\n  1 pending\n  2 failing\n\n  1) adds:\n",
                c(5, 3, 2, 1),
            ),
            (
                "rspec",
                "Finished in 0.01 seconds (files took 0.1 seconds to load)\n5 examples, 1 failure, 1 pending\n",
                c(4, 3, 1, 1),
            ),
            ("rspec passing", "3 examples, 0 failures\n", c(3, 3, 0, 0)),
            ("phpunit OK", "OK (5 tests, 9 assertions)\n", c(5, 5, 0, 0)),
            (
                "phpunit failing",
                "FAILURES!\nTests: 5, Assertions: 9, Failures: 1, Skipped: 1.\n",
                c(4, 3, 1, 1),
            ),
            (
                "dotnet",
                "Passed!  - Failed:     0, Passed:     5, Skipped:     1, Total:     6, Duration: 12 ms - A.Tests.dll (net8.0)\n\
                 Failed!  - Failed:     1, Passed:     2, Skipped:     0, Total:     3, Duration: 9 ms - B.Tests.dll (net8.0)\n",
                c(8, 7, 1, 1),
            ),
            (
                "maven",
                "[INFO] Tests run: 3, Failures: 0, Errors: 0, Skipped: 0, Time elapsed: 0.05 s - in com.example.AppTest\n\
                 [ERROR] Tests run: 2, Failures: 1, Errors: 0, Skipped: 1, Time elapsed: 0.01 s <<< FAILURE! - in com.example.BTest\n\
                 [INFO] Results:\n[ERROR] Tests run: 5, Failures: 1, Errors: 0, Skipped: 1\n",
                c(4, 3, 1, 1),
            ),
            (
                "gradle",
                "5 tests completed, 1 failed, 1 skipped\n\nFAILURE: Build failed with an exception.\n",
                c(4, 3, 1, 1),
            ),
            (
                "colours and a redrawn progress line",
                "\x1b[1m\x1b[32m     Summary\x1b[0m [   0.034s] \x1b[1m4\x1b[0m tests run: \x1b[1m4\x1b[0m \x1b[32mpassed\x1b[0m, 1 skipped\n\
                 building 1/3\rbuilding 3/3\rRan 2 tests in 0.1s\r\n\r\nOK\r\n",
                c(6, 6, 0, 1),
            ),
            ("an unknown runner", "all good\nexit 0\n", None),
            ("empty", "", None),
            (
                "look-alikes are not summaries",
                "Ran the linter in 2s\nOK then\nTests: fine\n3 passing tests were written\n",
                None,
            ),
        ];
        for (name, output, want) in cases {
            assert_eq!(parse(output), *want, "{name}");
        }
    }

    #[test]
    fn huge_numbers_saturate() {
        let line = "test result: ok. 18446744073709551615 passed; 5 failed; 0 ignored;\n";
        let twice = format!("{line}{line}");
        let counts = parse(&twice).unwrap();
        assert_eq!(counts.run, u64::MAX);
        assert_eq!(counts.failed, 10);
    }
}
