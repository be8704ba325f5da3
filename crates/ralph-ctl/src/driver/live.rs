//! Live output of a fresh iteration: the client runs with `--output-format
//! stream-json --verbose`, which prints one JSON event per line as the
//! session goes; each is turned here into a readable line (what the agent
//! said, each tool call with its telling argument, each failed tool result)
//! so that the person sees the iteration's progress as it happens. The last
//! event, the result object, is read by [`super::result::parse`] as before.

use ralph_core::judge::completion::{REJECTED_NOTICE, rejected_by};
use ralph_core::observe::prompt_text::REJECTED;
use serde_json::Value;

/// The longest excerpt of a message, a tool's argument or a failure shown.
pub(crate) const EXCERPT_CHARS: usize = 160;

/// How the clients start the text a Stop hook's block gives the model.
const STOP_HOOK_FEEDBACK: &str = "Stop hook feedback:";

/// The readable lines for one line of the client's stream-json output.
/// Events that tell the person nothing (the result, successful tool results,
/// thinking, unknown kinds) give none; a line that is not JSON is shown as it is.
pub(crate) fn readable(line: &str) -> Vec<String> {
    let line = line.trim();
    if line.is_empty() {
        return Vec::new();
    }
    let Ok(event) = serde_json::from_str::<Value>(line) else {
        return vec![format!("  {}", excerpt(line))];
    };
    match event.get("type").and_then(Value::as_str) {
        Some("system") if event.get("subtype").and_then(Value::as_str) == Some("init") => {
            let model = event.get("model").and_then(Value::as_str).unwrap_or("?");
            vec![format!("  started: model {model}")]
        }
        // A session loop's next iteration on 2.1, which shows the Stop
        // hook's `systemMessage` ("Ralph iteration N/M") and nothing of the
        // context it goes on with.
        Some("system") if event.get("subtype").and_then(Value::as_str) == Some("informational") => {
            event
                .get("content")
                .and_then(Value::as_str)
                .and_then(|c| c.strip_prefix("Stop says: Ralph iteration "))
                .and_then(|c| {
                    let (numbers, rejected) = match c.trim().split_once("; ") {
                        Some((numbers, rest)) => (numbers, rest.strip_prefix(REJECTED)),
                        None => (c.trim(), None),
                    };
                    let (n, m) = numbers.split_once('/')?;
                    Some(next_iteration(n, m, rejected))
                })
                .into_iter()
                .collect()
        }
        Some("assistant") => blocks(&event)
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block.get("text").and_then(Value::as_str)?;
                    (!text.trim().is_empty()).then(|| format!("  says: {}", excerpt(text)))
                }
                Some("tool_use") => {
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("tool");
                    Some(match block.get("input").and_then(telling_argument) {
                        Some(argument) => format!("  → {name}: {}", excerpt(&argument)),
                        None => format!("  → {name}"),
                    })
                }
                _ => None,
            })
            .collect(),
        Some("user") => blocks(&event)
            .filter_map(|block| match block.get("type").and_then(Value::as_str) {
                Some("tool_result")
                    if block.get("is_error").and_then(Value::as_bool) == Some(true) =>
                {
                    Some(format!("  ✗ tool failed: {}", excerpt(&result_text(block))))
                }
                // A session loop's next iteration: the Stop hook's block,
                // as the client hands it to the model (2.0).
                Some("text") => block
                    .get("text")
                    .and_then(Value::as_str)
                    .and_then(|t| t.strip_prefix(STOP_HOOK_FEEDBACK))
                    .and_then(|t| {
                        let rejected = rejected_in_feedback(t);
                        t.lines().find_map(|l| {
                            let (n, m) = l
                                .trim()
                                .strip_prefix("[Ralph loop: iteration ")?
                                .strip_suffix(']')?
                                .split_once(" of ")?;
                            Some(next_iteration(n, m, rejected.as_deref()))
                        })
                    }),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The line that says a session loop goes on with iteration `n` of `m`,
/// and why the claim of done before it was rejected, when it was.
fn next_iteration(n: &str, m: &str, rejected: Option<&str>) -> String {
    match rejected {
        Some(why) => format!(
            "↻ iteration {} of {} ({REJECTED}{})",
            excerpt(n),
            excerpt(m),
            excerpt(why)
        ),
        None => format!("↻ iteration {} of {}", excerpt(n), excerpt(m)),
    }
}

/// The gates that rejected a claim, from the Stop hook's block as 2.0
/// hands it to the model (the failure notice's `- NAME gate: …` lines);
/// `None` when the block says no claim was rejected.
fn rejected_in_feedback(feedback: &str) -> Option<String> {
    let notice = feedback.split_once(REJECTED_NOTICE)?.1;
    Some(rejected_by(notice.lines().skip(1).map_while(|l| {
        l.strip_prefix("- ")?
            .split_once(" gate: ")
            .map(|(gate, _)| gate)
    })))
}

/// The content blocks of an assistant or user event.
fn blocks(event: &Value) -> impl Iterator<Item = &Value> {
    event
        .get("message")
        .and_then(|m| m.get("content"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The argument that says what a tool call does: a command, a file, a
/// pattern, an address; else the whole input, compact.
fn telling_argument(input: &Value) -> Option<String> {
    const TELLING: [&str; 8] = [
        "command",
        "file_path",
        "notebook_path",
        "pattern",
        "path",
        "url",
        "query",
        "description",
    ];
    TELLING
        .iter()
        .find_map(|key| input.get(key).and_then(Value::as_str))
        .map(str::to_string)
        .or_else(|| {
            input
                .as_object()
                .filter(|o| !o.is_empty())
                .map(|_| input.to_string())
        })
}

/// A tool result's text: a string, or the text blocks of a list.
fn result_text(block: &Value) -> String {
    match block.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// `text` on one line, at most [`EXCERPT_CHARS`] characters, `…` when cut.
pub(crate) fn excerpt(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= EXCERPT_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(EXCERPT_CHARS - 1).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tool_call_and_message_becomes_one_line() {
        let event = r#"{"type":"assistant","message":{"content":[
            {"type":"thinking","thinking":"hmm"},
            {"type":"text","text":"Running the tests\nnow."},
            {"type":"tool_use","id":"t1","name":"Bash","input":{"command":"cargo test","description":"Run tests"}},
            {"type":"tool_use","id":"t2","name":"Edit","input":{"file_path":"/p/src/lib.rs","old_string":"a","new_string":"b"}},
            {"type":"tool_use","id":"t3","name":"TodoWrite","input":{"todos":[]}},
            {"type":"tool_use","id":"t4","name":"Other","input":{}}]}}"#
            .replace('\n', " ");
        assert_eq!(
            readable(&event),
            vec![
                "  says: Running the tests now.",
                "  → Bash: cargo test",
                "  → Edit: /p/src/lib.rs",
                "  → TodoWrite: {\"todos\":[]}",
                "  → Other",
            ]
        );
    }

    #[test]
    fn failed_tool_results_are_shown_and_others_are_not() {
        let event = r#"{"type":"user","message":{"role":"user","content":[
            {"type":"tool_result","tool_use_id":"t1","content":"ok"},
            {"type":"tool_result","tool_use_id":"t2","is_error":true,"content":"Exit code 1\nerror[E0308]: mismatched types"},
            {"type":"tool_result","tool_use_id":"t3","is_error":true,"content":[{"type":"text","text":"File not found"}]}]}}"#
            .replace('\n', " ");
        assert_eq!(
            readable(&event),
            vec![
                "  ✗ tool failed: Exit code 1 error[E0308]: mismatched types",
                "  ✗ tool failed: File not found",
            ]
        );
    }

    #[test]
    fn a_session_loop_s_next_iteration_is_one_line() {
        // As 2.1.330 and 2.0.77 print the Stop hook's block in stream-json.
        let event = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Stop hook feedback:\n[Ralph loop: iteration 2 of 3]\nThis task is given back to you each time you stop."}]},"parent_tool_use_id":null}"#;
        assert_eq!(readable(event), vec!["↻ iteration 2 of 3"]);
        // 2.1.330 goes on with the context form, and shows only the
        // hook's systemMessage.
        let event = r#"{"type":"system","subtype":"informational","content":"Stop says: Ralph iteration 3/25","level":"notice"}"#;
        assert_eq!(readable(event), vec!["↻ iteration 3 of 25"]);
        // A rejected claim before it is said, with the gates that failed it.
        let event = r#"{"type":"system","subtype":"informational","content":"Stop says: Ralph iteration 3/25; claim of done rejected: the verification, test_count gates failed","level":"notice"}"#;
        assert_eq!(
            readable(event),
            vec![
                "↻ iteration 3 of 25 (claim of done rejected: the verification, test_count gates failed)"
            ]
        );
        let event = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"Stop hook feedback:\n[Ralph: completion claim rejected] You claimed completion (the signal), but these checks failed:\n- verification gate: 1 of 1 command(s) failed\nFix what failed.\n\n[Ralph loop: iteration 2 of 3]\nThe task."}]},"parent_tool_use_id":null}"#;
        assert_eq!(
            readable(event),
            vec!["↻ iteration 2 of 3 (claim of done rejected: the verification gate failed)"]
        );
        let event = r#"{"type":"system","subtype":"informational","content":"Stop says: Ralph loop stopped without completing: max_iterations","level":"notice"}"#;
        assert!(
            readable(event).is_empty(),
            "the ending is the closing line's"
        );
        // Other text the client echoes is not shown.
        let event = r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"the task"}]}}"#;
        assert!(readable(event).is_empty());
    }

    #[test]
    fn the_start_names_the_model_and_the_rest_is_quiet() {
        assert_eq!(
            readable(
                r#"{"type":"system","subtype":"init","model":"claude-sonnet-4-5","tools":[]}"#
            ),
            vec!["  started: model claude-sonnet-4-5"]
        );
        assert!(readable(r#"{"type":"result","subtype":"success","result":"done"}"#).is_empty());
        assert!(readable(r#"{"type":"system","subtype":"hook_response"}"#).is_empty());
        assert!(readable("   ").is_empty());
        assert_eq!(readable("not json"), vec!["  not json"]);
    }

    #[test]
    fn long_text_is_cut_to_one_short_line() {
        let long = "word ".repeat(100);
        let shown = excerpt(&long);
        assert_eq!(shown.chars().count(), EXCERPT_CHARS);
        assert!(shown.ends_with('…'));
    }
}
