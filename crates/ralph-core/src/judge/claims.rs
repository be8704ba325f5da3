//! Reads a completion claim out of the agent's latest message.
//!
//! Two kinds of claim exist: the completion signal standing on its own line
//! (or ending a line after a full sentence, or inside `<promise>…</promise>`),
//! and a `RALPH_STATUS` block with `EXIT_SIGNAL: true`. A signal mentioned
//! inside a sentence, quoted, in a block quote or in a fenced or indented code
//! block (which is how a prompt gets echoed) is not a claim. `EXIT_SIGNAL:
//! false` vetoes any claim in the same message.

use serde::{Deserialize, Serialize};

/// The fields of a `---RALPH_STATUS---` … `---END_RALPH_STATUS---` block.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusBlock {
    /// `STATUS` (e.g. `IN_PROGRESS`, COMPLETE, BLOCKED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// `TASKS_COMPLETED_THIS_LOOP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_completed_this_loop: Option<String>,
    /// `FILES_MODIFIED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_modified: Option<String>,
    /// `TESTS_STATUS` (e.g. PASSING, FAILING, `NOT_RUN`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tests_status: Option<String>,
    /// `WORK_TYPE` (e.g. IMPLEMENTATION, TESTING, DOCUMENTATION).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub work_type: Option<String>,
    /// `EXIT_SIGNAL`, when it reads as true or false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<bool>,
    /// `RECOMMENDATION`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recommendation: Option<String>,
}

/// How the completion signal was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalForm {
    /// Alone on a line (markdown emphasis allowed).
    OwnLine,
    /// Ending a line, after a sentence that ended with `.`, `!` or `?`.
    AfterSentence,
    /// Inside `<promise>…</promise>`.
    Promise,
}

impl SignalForm {
    /// How the signal was given, in words.
    pub fn describe(self) -> &'static str {
        match self {
            SignalForm::OwnLine => "the completion signal on a line of its own",
            SignalForm::AfterSentence => "the completion signal ending a line",
            SignalForm::Promise => "the completion signal in <promise> tags",
        }
    }
}

/// Normalises a marker line: no spaces, upper case.
fn marker(line: &str) -> String {
    line.chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_uppercase()
}

fn is_fence(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("```") || t.starts_with("~~~")
}

/// The columns of indentation before a line's text (a tab reaches the next
/// multiple of 4, as in `CommonMark`).
fn indentation(line: &str) -> usize {
    let mut column = 0;
    for c in line.chars() {
        match c {
            ' ' => column += 1,
            '\t' => column += 4 - column % 4,
            _ => break,
        }
    }
    column
}

/// A list item's first line: `-`, `*`, `+`, `1.` or `1)` and a space, after
/// at most 3 spaces.
fn is_list_item(line: &str) -> bool {
    if indentation(line) > 3 {
        return false;
    }
    let t = line.trim_start();
    let after_marker = match t.as_bytes().first() {
        Some(b'-' | b'*' | b'+') => &t[1..],
        Some(b'0'..=b'9') => {
            let digits = t.bytes().take_while(u8::is_ascii_digit).count();
            match t.as_bytes()[digits..].first() {
                Some(b'.' | b')') if digits <= 9 => &t[digits + 1..],
                _ => return false,
            }
        }
        _ => return false,
    };
    after_marker.is_empty() || after_marker.starts_with([' ', '\t'])
}

/// The lines of `message` outside code blocks and block quotes.
///
/// Code blocks, which is how a prompt gets echoed: fenced ones (```` ``` ````
/// or `~~~`), and indented ones as `CommonMark` reads them, kept simple: a line
/// indented by 4 or more columns (a tab counts as 4) at the start of the
/// message or after a blank line, and the indented and blank lines that
/// follow it. An indented line right after a line of text continues that
/// text (`CommonMark`'s lazy continuation), and inside a list (from an item's
/// first line to the next unindented line after a blank line) indented
/// lines are the items' text, never code.
fn prose_lines(message: &str) -> Vec<&str> {
    let mut in_fence = false;
    let mut in_indented_code = false;
    let mut after_blank = true;
    let mut in_list = false;
    let mut out = Vec::new();
    for line in message.lines() {
        if in_fence {
            in_fence = !is_fence(line);
            continue;
        }
        if line.trim().is_empty() {
            after_blank = true;
            out.push(line);
            continue;
        }
        let indented = indentation(line) >= 4;
        if indented && (in_indented_code || (after_blank && !in_list)) {
            in_indented_code = true;
            after_blank = false;
            continue;
        }
        in_indented_code = false;
        if is_list_item(line) {
            in_list = true;
        } else if !indented && after_blank {
            in_list = false;
        }
        after_blank = false;
        if is_fence(line) {
            in_fence = true;
            continue;
        }
        if !line.trim_start().starts_with('>') {
            out.push(line);
        }
    }
    out
}

fn strip_emphasis(text: &str) -> &str {
    text.trim()
        .trim_matches(|c: char| c == '*' || c == '_' || c == '`' || c.is_whitespace())
}

/// How `message` gives the completion `signal`, if it claims completion with it.
pub fn signal_claim(message: &str, signal: &str) -> Option<SignalForm> {
    if signal.is_empty() {
        return None;
    }
    let prose = prose_lines(message);
    let joined = prose.join("\n");
    // <promise>SIGNAL</promise>, possibly spread over lines.
    let mut rest = joined.as_str();
    while let Some(open) = rest.find("<promise>") {
        let after = &rest[open + "<promise>".len()..];
        let Some(close) = after.find("</promise>") else {
            break;
        };
        if strip_emphasis(&after[..close]) == signal {
            return Some(SignalForm::Promise);
        }
        rest = &after[close..];
    }
    for line in prose {
        let trimmed = line.trim();
        let stripped = strip_emphasis(line);
        let bare = strip_emphasis(stripped.trim_end_matches(['.', '!']));
        // The signal may itself begin or end with `_`, `*` or `.`: compare
        // the line as written as well as without emphasis and final stops.
        let candidates = [trimmed, stripped, bare];
        if candidates.contains(&signal) {
            return Some(SignalForm::OwnLine);
        }
        for candidate in candidates {
            if let Some(before) = candidate.strip_suffix(signal) {
                let before = strip_emphasis(before);
                if before.ends_with(['.', '!', '?']) && !before.ends_with("...") {
                    return Some(SignalForm::AfterSentence);
                }
            }
        }
    }
    None
}

fn field_key(raw: &str) -> String {
    raw.trim()
        .trim_start_matches(['-', '*', '+', '`', ' '])
        .trim_matches(|c: char| c == '*' || c == '`' || c.is_whitespace())
        .to_ascii_uppercase()
        .replace([' ', '-'], "_")
}

fn field_value(raw: &str) -> String {
    raw.trim()
        .trim_matches(|c: char| c == '*' || c == '`' || c.is_whitespace())
        .to_string()
}

fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().trim_end_matches('.') {
        "true" | "yes" | "1" => Some(true),
        "false" | "no" | "0" => Some(false),
        _ => None,
    }
}

/// The last `RALPH_STATUS` block of `message` (fences tolerated; a block
/// without its end marker runs to the end of the message).
pub fn status_block(message: &str) -> Option<StatusBlock> {
    let lines: Vec<&str> = message.lines().collect();
    let start = lines.iter().rposition(|l| {
        let m = marker(l);
        let m = m.trim_matches('`');
        m == "---RALPH_STATUS---"
    })?;
    let mut block = StatusBlock::default();
    for line in &lines[start + 1..] {
        let m = marker(line);
        if m.trim_matches('`') == "---END_RALPH_STATUS---" {
            break;
        }
        if is_fence(line) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = field_value(value);
        let slot = match field_key(key).as_str() {
            "STATUS" => &mut block.status,
            "TASKS_COMPLETED_THIS_LOOP" => &mut block.tasks_completed_this_loop,
            "FILES_MODIFIED" => &mut block.files_modified,
            "TESTS_STATUS" => &mut block.tests_status,
            "WORK_TYPE" => &mut block.work_type,
            "RECOMMENDATION" => &mut block.recommendation,
            "EXIT_SIGNAL" => {
                block.exit_signal = parse_bool(&value);
                continue;
            }
            _ => continue,
        };
        *slot = Some(value);
    }
    Some(block)
}

/// The marker a line starts with when the agent asks the person a question.
pub const ASK_MARKER: &str = "RALPH_ASK:";

/// The longest question kept, in characters.
pub const QUESTION_CHARS: usize = 2_000;

/// The question the agent asks the person, if it does: the last
/// `RALPH_ASK: <question>` on a line of its own outside code, with the
/// lines after it up to a blank line (a question may take a few lines);
/// none when the marker has no question after it.
pub fn ask_request(message: &str) -> Option<String> {
    let lines = prose_lines(message);
    let start = lines
        .iter()
        .rposition(|line| line.trim().starts_with(ASK_MARKER))?;
    let first = lines[start].trim().strip_prefix(ASK_MARKER)?.trim();
    let question = std::iter::once(first)
        .chain(
            lines[start + 1..]
                .iter()
                .map(|l| l.trim())
                .take_while(|l| !l.is_empty() && !l.starts_with("RALPH_")),
        )
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    (!question.is_empty()).then(|| question.chars().take(QUESTION_CHARS).collect())
}

/// The marker a line starts with when the agent stops the loop for the person.
pub const ABORT_MARKER: &str = "RALPH_ABORT:";

/// Why the agent says it cannot go on without the person, if it does: the
/// last `RALPH_ABORT: <reason>` on a line of its own outside code (a
/// missing reason is said to be missing), else a last status block whose
/// `STATUS` is `BLOCKED` (its `RECOMMENDATION` as the reason).
pub fn abort_request(message: &str) -> Option<String> {
    let marked = prose_lines(message).into_iter().rev().find_map(|line| {
        let line = line.trim();
        let rest = line.strip_prefix(ABORT_MARKER)?;
        let reason = rest.trim();
        Some(if reason.is_empty() {
            "no reason given".to_string()
        } else {
            reason.chars().take(500).collect()
        })
    });
    marked.or_else(|| {
        let block = status_block(message)?;
        block
            .status
            .as_deref()
            .is_some_and(|s| s.eq_ignore_ascii_case("BLOCKED"))
            .then(|| {
                block
                    .recommendation
                    .filter(|r| !r.trim().is_empty())
                    .map_or_else(
                        || "its status block says BLOCKED".to_string(),
                        |r| r.chars().take(500).collect(),
                    )
            })
    })
}

/// The marker before the JSON object of an iteration's outcome.
pub const OUTCOME_MARKER: &str = "RALPH_OUTCOME:";

/// What the agent says became of the work item of its iteration
/// (`RALPH_OUTCOME: {"status": …}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeStatus {
    /// The item is done: the error and gate-blocked runs start over.
    Terminal,
    /// The item needs something the agent cannot get (counted against `gateBudget`).
    GateBlocked,
    /// The item failed (counted against `errorBudget`).
    Error,
    /// Nothing was done on purpose: no count moves.
    Skip,
    /// The queue is empty: a completion claim, judged by the gates like any other.
    NoItem,
}

impl OutcomeStatus {
    /// The name the marker uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeStatus::Terminal => "terminal",
            OutcomeStatus::GateBlocked => "gate-blocked",
            OutcomeStatus::Error => "error",
            OutcomeStatus::Skip => "skip",
            OutcomeStatus::NoItem => "no-item",
        }
    }
}

/// A read `RALPH_OUTCOME` marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// What became of the item.
    pub status: OutcomeStatus,
    /// The item, when the agent names it.
    pub item_id: Option<String>,
}

/// Why a `RALPH_OUTCOME` marker cannot be read (said in the next
/// iteration's text, after "The marker in your last message was not read:").
#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// No `{` follows the marker, or its braces never close.
    #[error("no JSON object after it (or its braces do not close)")]
    NoObject,
    /// The object is not JSON.
    #[error("its object is not valid JSON ({0})")]
    NotJson(#[source] serde_json::Error),
    /// The object has no `status`.
    #[error("its object has no \"status\"")]
    NoStatus,
    /// The status is none ralph knows.
    #[error("status {0:?} is none of terminal, gate-blocked, error, skip, no-item")]
    UnknownStatus(String),
}

/// The last `RALPH_OUTCOME: {json}` of `message`: `None` without one,
/// `Some(Err(problem))` for one that cannot be read (said in the next
/// iteration's text). The object is found by a balanced-brace scan that
/// skips braces inside JSON strings, so it may span lines.
pub fn outcome(message: &str) -> Option<Result<Outcome, OutcomeError>> {
    let at = message.rfind(OUTCOME_MARKER)?;
    let rest = message[at + OUTCOME_MARKER.len()..].trim_start();
    let Some(object) = balanced_object(rest) else {
        return Some(Err(OutcomeError::NoObject));
    };
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Raw {
        status: Option<String>,
        item_id: Option<serde_json::Value>,
    }
    let raw: Raw = match serde_json::from_str(object) {
        Ok(raw) => raw,
        Err(e) => return Some(Err(OutcomeError::NotJson(e))),
    };
    let Some(status) = raw.status else {
        return Some(Err(OutcomeError::NoStatus));
    };
    let parsed = match status.trim().to_ascii_lowercase().as_str() {
        "terminal" => OutcomeStatus::Terminal,
        "gate-blocked" => OutcomeStatus::GateBlocked,
        "error" => OutcomeStatus::Error,
        "skip" => OutcomeStatus::Skip,
        "no-item" => OutcomeStatus::NoItem,
        _ => return Some(Err(OutcomeError::UnknownStatus(status))),
    };
    let item_id = raw.item_id.and_then(|v| match v {
        serde_json::Value::String(s) => Some(s),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    });
    Some(Ok(Outcome {
        status: parsed,
        item_id: item_id.map(|s| s.chars().take(200).collect()),
    }))
}

/// The JSON object `text` starts with, up to its matching brace.
fn balanced_object(text: &str) -> Option<&str> {
    if !text.starts_with('{') {
        return None;
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[..=i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Phrases that say the whole job is done.
const STRONG_PHRASES: &[&str] = &[
    "all tasks complete",
    "all tasks are complete",
    "all tasks completed",
    "all tasks are done",
    "all items are complete",
    "everything is complete",
    "everything is done",
    "the work is complete",
    "the project is complete",
    "implementation is complete",
    "nothing left to do",
    "no remaining work",
    "no remaining tasks",
    "all requirements are met",
];
/// Words that suggest completion.
const WEAK_WORDS: &[&str] = &[
    "complete",
    "completed",
    "done",
    "finished",
    "all tests pass",
];
/// Words that undo a completion word in the same sentence.
const NEGATIONS: &[&str] = &[
    "not ",
    "n't ",
    "never",
    "incomplete",
    "remaining",
    "remain",
    "until",
    "once ",
    "when ",
    "will ",
    "yet",
    "still",
    "left to",
];

/// The lines of `message` outside `RALPH_STATUS` blocks.
fn outside_status_blocks(message: &str) -> String {
    let mut inside = false;
    let mut out = Vec::new();
    for line in message.lines() {
        match marker(line).trim_matches('`') {
            "---RALPH_STATUS---" => inside = true,
            "---END_RALPH_STATUS---" => inside = false,
            _ if !inside => out.push(line),
            _ => {}
        }
    }
    out.join("\n")
}

/// Completion language in `message` outside status blocks: (any completion
/// word, any strong phrase), ignoring sentences that negate or defer it.
pub fn completion_language(message: &str) -> (bool, bool) {
    let lower = prose_lines(&outside_status_blocks(message))
        .join("\n")
        .to_ascii_lowercase();
    let mut weak = false;
    let mut strong = false;
    for sentence in lower.split(['.', '!', '?', '\n']) {
        let negated = |phrase: &str| {
            let at = sentence.find(phrase).unwrap_or(0);
            NEGATIONS
                .iter()
                .any(|n| sentence[..at].contains(n) || sentence.contains(&format!("{phrase} yet")))
                || (sentence.contains("remaining") && !sentence.contains("no remaining"))
        };
        if STRONG_PHRASES
            .iter()
            .any(|p| sentence.contains(p) && !negated(p))
        {
            strong = true;
            weak = true;
        } else if WEAK_WORDS.iter().any(|w| {
            let hit = if w.contains(' ') {
                sentence.contains(w)
            } else {
                // Whole words only; identifiers such as SIGNAL_COMPLETE are not language.
                sentence
                    .split_whitespace()
                    .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
                    .any(|t| t == *w)
            };
            hit && !negated(w)
        }) {
            weak = true;
        }
    }
    (weak, strong)
}

/// True when the message speaks of running tests and of nothing else done.
pub fn speaks_only_of_tests(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    let tests = ["test", "pytest", "jest", "vitest", "spec"];
    let work = [
        "implement",
        "added",
        "add ",
        "fixed",
        "fix ",
        "wrote",
        "write",
        "created",
        "create",
        "refactor",
        "updated",
        "changed",
        "edited",
        "removed",
        "renamed",
        "moved",
        "built",
    ];
    tests.iter().any(|t| lower.contains(t)) && !work.iter().any(|w| lower.contains(w))
}

#[cfg(test)]
mod abort_tests {
    use super::*;

    #[test]
    fn the_last_outcome_marker_is_read_by_its_balanced_braces() {
        let ok = |status, item: Option<&str>| {
            Some(Some(Outcome {
                status,
                item_id: item.map(str::to_string),
            }))
        };
        let outcome = |message| outcome(message).map(Result::ok);
        assert_eq!(outcome("No marker."), None);
        assert_eq!(
            outcome("Done.\nRALPH_OUTCOME: {\"status\": \"terminal\", \"itemId\": \"T-12\"}"),
            ok(OutcomeStatus::Terminal, Some("T-12"))
        );
        assert_eq!(
            outcome(
                "RALPH_OUTCOME: {\"status\":\"error\"}\nlater\nRALPH_OUTCOME: {\n  \"status\": \"no-item\",\n  \"note\": \"a } in a string\"\n}"
            ),
            ok(OutcomeStatus::NoItem, None)
        );
        assert_eq!(
            outcome("RALPH_OUTCOME: {\"status\": \"gate-blocked\", \"itemId\": 7}"),
            ok(OutcomeStatus::GateBlocked, Some("7"))
        );
        for bad in [
            "RALPH_OUTCOME: status error",
            "RALPH_OUTCOME: {\"status\": \"error\"",
            "RALPH_OUTCOME: {\"itemId\": \"x\"}",
            "RALPH_OUTCOME: {\"status\": \"done\"}",
            "RALPH_OUTCOME: {status: error}",
        ] {
            assert!(matches!(outcome(bad), Some(None)), "{bad}");
        }
        for (bad, problem) in [
            ("RALPH_OUTCOME: status error", "no JSON object after it"),
            (
                "RALPH_OUTCOME: {\"itemId\": \"x\"}",
                "its object has no \"status\"",
            ),
            (
                "RALPH_OUTCOME: {\"status\": \"done\"}",
                "status \"done\" is none of terminal, gate-blocked, error, skip, no-item",
            ),
            (
                "RALPH_OUTCOME: {status: error}",
                "its object is not valid JSON (key must be",
            ),
        ] {
            let said = super::outcome(bad)
                .and_then(Result::err)
                .map(|e| e.to_string());
            assert!(
                said.as_deref().is_some_and(|s| s.starts_with(problem)),
                "{bad}: {said:?}"
            );
        }
    }

    #[test]
    fn the_agent_stops_the_loop_by_a_marker_line_or_a_blocked_status_block() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Working on it.", None),
            (
                "I need the API key.\nRALPH_ABORT: no credentials for the staging API",
                Some("no credentials for the staging API"),
            ),
            ("  RALPH_ABORT:   ", Some("no reason given")),
            ("RALPH_ABORT: first\nRALPH_ABORT: second", Some("second")),
            ("Write `RALPH_ABORT: reason` when blocked.", None),
            ("```\nRALPH_ABORT: in a code block\n```", None),
            (
                "---RALPH_STATUS---\nSTATUS: BLOCKED\nRECOMMENDATION: answer question 2\n---END_RALPH_STATUS---",
                Some("answer question 2"),
            ),
            (
                "---RALPH_STATUS---\nSTATUS: blocked\n---END_RALPH_STATUS---",
                Some("its status block says BLOCKED"),
            ),
            (
                "---RALPH_STATUS---\nSTATUS: IN_PROGRESS\n---END_RALPH_STATUS---",
                None,
            ),
        ];
        for (message, want) in cases {
            assert_eq!(abort_request(message).as_deref(), *want, "{message:?}");
        }
    }

    #[test]
    fn the_agent_asks_by_a_marker_line_and_the_lines_after_it() {
        let cases: &[(&str, Option<&str>)] = &[
            ("Working on it.", None),
            (
                "Done with the parser.\nRALPH_ASK: Which database, Postgres or SQLite?",
                Some("Which database, Postgres or SQLite?"),
            ),
            (
                "RALPH_ASK: Which port?\nThe config says 80 and the docs 8080.\n\nI stopped here.",
                Some("Which port?\nThe config says 80 and the docs 8080."),
            ),
            ("RALPH_ASK:   ", None),
            ("RALPH_ASK: first\n\nRALPH_ASK: second", Some("second")),
            ("Write `RALPH_ASK: question` to ask.", None),
            ("```\nRALPH_ASK: in a code block\n```", None),
        ];
        for (message, want) in cases {
            assert_eq!(ask_request(message).as_deref(), *want, "{message:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";

    /// (message, is a signal claim)
    fn signal_cases() -> Vec<(String, bool)> {
        vec![
            // True claims.
            (S.into(), true),
            (
                format!("All findings are fixed and the tests pass.\n\n{S}"),
                true,
            ),
            (format!("Done.\n**{S}**\n"), true),
            (format!("Everything is verified.\n`{S}`"), true),
            (format!("All done. {S}"), true),
            (format!("Finished the audit! {S}"), true),
            (format!("<promise>{S}</promise>"), true),
            (
                format!("Work complete.\n<promise>\n  {S}\n</promise>"),
                true,
            ),
            (
                format!("The last fix landed; tests are green. <promise>{S}</promise>"),
                true,
            ),
            (
                format!("## Summary\n- fixed parser\n- fixed tests\n\n{S}."),
                true,
            ),
            (format!("```\ncargo test\n```\nAll passing.\n{S}"), true),
            // Mentions in a sentence.
            (
                format!("I will write {S} once the remaining two findings are fixed."),
                false,
            ),
            (format!("When everything passes I will output {S}"), false),
            (format!("Not done yet, so no {S} this time."), false),
            (format!("The prompt asks for {S} at the end."), false),
            (format!("I must not print {S} until the tests pass."), false),
            (format!("Next iteration: fix test_b, then {S}"), false),
            (format!("Reminder: {S}"), false),
            // Quoted or echoed.
            (format!("The task says: \"{S}\""), false),
            (format!("\"{S}\""), false),
            (
                format!("> Put {S} on its own line when done.\n\nStill working on it."),
                false,
            ),
            (format!("> {S}"), false),
            (
                format!("Here is the prompt:\n```\n{S}\n```\nI am on step 2."),
                false,
            ),
            (
                format!("~~~\n<promise>{S}</promise>\n~~~\nNot finished."),
                false,
            ),
            // Indented code blocks (4 spaces or a tab), like fenced ones.
            (format!("    {S}"), false),
            (format!("\t{S}"), false),
            (format!("  \t{S}"), false),
            (
                format!("The prompt ends with:\n\n    Output {S}\n    {S}\n\nI am on step 2."),
                false,
            ),
            (
                format!("Echoed:\n\n    step one\n\n    {S}\n\nStill working."),
                false,
            ),
            (format!("Echoed:\n\n        <promise>{S}</promise>"), false),
            (format!("Code:\n\n    ```\n\n{S}"), true),
            // Not code: under 4 columns, a lazy continuation of the line
            // before, or a list item's text.
            (format!("All done.\n\n   {S}"), true),
            (format!("All done.\n    {S}"), true),
            (format!("- fixed the parser\n\n    {S}"), true),
            (
                format!("1. fixed the parser\n    all tests pass.\n\n    {S}"),
                true,
            ),
            (
                format!("- fixed the parser\n\nThe list ended.\n\n    {S}\n"),
                false,
            ),
            (format!("    some code\n{S}"), true),
            // Near misses.
            (format!("{S}_PENDING"), false),
            (format!("NOT_{S}"), false),
            ("RALPH_AUDIT_COMPLETE".into(), false),
            (S.to_ascii_lowercase(), false),
            (format!("<promise>{S} soon</promise>"), false),
            (format!("<promise>{S}"), false),
            (format!("Thinking... {S}"), false),
            (String::new(), false),
        ]
    }

    #[test]
    fn signals_with_emphasis_characters_of_their_own() {
        for signal in ["DONE_", "_DONE_", "*DONE*", "DONE.", "`DONE`"] {
            assert!(signal_claim(signal, signal).is_some(), "{signal}");
            assert!(
                signal_claim(&format!("All good.\n{signal}\n"), signal).is_some(),
                "{signal}"
            );
            assert!(
                signal_claim(&format!("Finished. {signal}"), signal).is_some(),
                "{signal}"
            );
        }
    }

    #[test]
    fn signal_claims_table() {
        for (message, want) in signal_cases() {
            assert_eq!(signal_claim(&message, S).is_some(), want, "{message:?}");
        }
    }

    #[test]
    fn status_block_table() {
        let full = "Work summary.\n---RALPH_STATUS---\nSTATUS: COMPLETE\nTASKS_COMPLETED_THIS_LOOP: 3\nFILES_MODIFIED: 4\n\
                    TESTS_STATUS: PASSING\nWORK_TYPE: IMPLEMENTATION\nEXIT_SIGNAL: true\nRECOMMENDATION: ship it\n---END_RALPH_STATUS---";
        let block = status_block(full).unwrap();
        assert_eq!(
            block,
            StatusBlock {
                status: Some("COMPLETE".into()),
                tasks_completed_this_loop: Some("3".into()),
                files_modified: Some("4".into()),
                tests_status: Some("PASSING".into()),
                work_type: Some("IMPLEMENTATION".into()),
                exit_signal: Some(true),
                recommendation: Some("ship it".into()),
            }
        );
        // (message, STATUS, EXIT_SIGNAL)
        let cases: Vec<(&str, Option<&str>, Option<bool>)> = vec![
            (
                "---ralph_status---\nstatus: in_progress\nexit_signal: FALSE\n---end_ralph_status---",
                Some("in_progress"),
                Some(false),
            ),
            (
                "```\n--- RALPH_STATUS ---\nSTATUS:  COMPLETE \nEXIT_SIGNAL: Yes\n--- END_RALPH_STATUS ---\n```",
                Some("COMPLETE"),
                Some(true),
            ),
            (
                "---RALPH_STATUS---\n- **STATUS**: COMPLETE\n- **EXIT_SIGNAL**: `true`\n---END_RALPH_STATUS---",
                Some("COMPLETE"),
                Some(true),
            ),
            (
                "---RALPH_STATUS---\nStatus: Complete\nExit Signal: true",
                Some("Complete"),
                Some(true),
            ),
            (
                "---RALPH_STATUS---\nSTATUS: COMPLETE\nEXIT_SIGNAL: true\n---END_RALPH_STATUS---\nthen\n---RALPH_STATUS---\nSTATUS: IN_PROGRESS\nEXIT_SIGNAL: false\n---END_RALPH_STATUS---",
                Some("IN_PROGRESS"),
                Some(false),
            ),
            (
                "---RALPH_STATUS---\nSTATUS: COMPLETE\nEXIT_SIGNAL: maybe\n---END_RALPH_STATUS---",
                Some("COMPLETE"),
                None,
            ),
            (
                "---RALPH_STATUS---\nTASKS_COMPLETED_THIS_LOOP: COMPLETE the parser\n---END_RALPH_STATUS---",
                None,
                None,
            ),
        ];
        for (message, status, exit) in cases {
            let block = status_block(message).unwrap_or_else(|| panic!("{message:?}"));
            assert_eq!(block.status.as_deref(), status, "{message:?}");
            assert_eq!(block.exit_signal, exit, "{message:?}");
        }
        assert_eq!(
            status_block("No block here. STATUS: COMPLETE, EXIT_SIGNAL: true"),
            None
        );
    }

    #[test]
    fn completion_language_table() {
        // (message, weak, strong)
        let cases: &[(&str, bool, bool)] = &[
            ("All tasks complete. The tests pass.", true, true),
            ("Everything is done.", true, true),
            ("There is nothing left to do.", true, true),
            ("I finished the parser.", true, false),
            ("The migration is done.", true, false),
            ("The parser is not complete yet.", false, false),
            ("Two tasks remaining before it is done.", false, false),
            ("I will be done once the tests pass.", false, false),
            ("Still working on the parser.", false, false),
            ("Fixed one bug; three findings remain.", false, false),
            ("The prompt says:\n\n    All tasks complete.", false, false),
            (
                "---RALPH_STATUS---\nSTATUS: COMPLETE\n---END_RALPH_STATUS---",
                false,
                false,
            ),
            ("", false, false),
        ];
        for (message, weak, strong) in cases {
            assert_eq!(
                completion_language(message),
                (*weak, *strong),
                "{message:?}"
            );
        }
    }

    #[test]
    fn test_only_messages() {
        assert!(speaks_only_of_tests("Ran the test suite again: 42 passed."));
        assert!(speaks_only_of_tests("Re-ran pytest; all green."));
        assert!(!speaks_only_of_tests("Fixed the parser and ran the tests."));
        assert!(!speaks_only_of_tests("Refactored the module."));
    }
}
