//! Property tests of the parsers the Stop hook runs on outside input: the
//! stdin object ([`hook_input::parse`]) and the agent's message
//! ([`claims::signal_claim`], [`claims::status_block`],
//! [`signals::findings_count`]). The transcript reader's properties live
//! beside it (`src/observe/transcript/properties.rs`).

use std::path::PathBuf;

use proptest::prelude::*;
use ralph_core::judge::claims;
use ralph_core::judge::signals::{self, FINDINGS_MARKER};
use ralph_core::observe::hook_input::{self, HookInput, InputError};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------- hook input

/// Any JSON value, nested a few levels.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::from),
        "[a-z0-9./_:-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::vec(("[a-z_]{0,8}", inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

const FIELDS: [&str; 6] = [
    "session_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "stop_hook_active",
    "last_assistant_message",
];

/// An object whose keys are mostly the fields the hook reads, with values of
/// any type (often the right one), plus unknown keys.
fn hook_like_object() -> impl Strategy<Value = Value> {
    let value = prop_oneof![
        3 => any_json(),
        2 => "[a-zA-Z0-9 ./_:-]{0,16}".prop_map(Value::from),
        1 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
        1 => Just(json!("")),
    ];
    let key = prop_oneof![
        4 => prop::sample::select(&FIELDS[..]).prop_map(str::to_owned),
        1 => "[a-z_]{1,12}",
    ];
    prop::collection::vec((key, value), 0..8)
        .prop_map(|entries| Value::Object(entries.into_iter().collect()))
}

/// Reference: what `parse` must make of a JSON object, or which field it
/// must name.
fn expected(map: &Map<String, Value>) -> Result<HookInput, &'static str> {
    fn string(
        map: &Map<String, Value>,
        field: &'static str,
    ) -> Result<Option<String>, &'static str> {
        match map.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(field),
        }
    }
    let session_id = string(map, "session_id")?;
    if let Some(id) = &session_id {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "-_.:".contains(c);
        if id.is_empty() || id.chars().count() > 200 || !id.chars().all(ok_char) {
            return Err("session_id");
        }
    }
    let stop_hook_active = match map.get("stop_hook_active") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("stop_hook_active"),
    };
    let path = |field| -> Result<Option<PathBuf>, &'static str> {
        Ok(string(map, field)?
            .filter(|s| !s.is_empty())
            .map(PathBuf::from))
    };
    Ok(HookInput {
        session_id,
        transcript_path: path("transcript_path")?,
        cwd: path("cwd")?,
        hook_event_name: string(map, "hook_event_name")?,
        stop_hook_active,
        last_assistant_message: string(map, "last_assistant_message")?,
        has_final_message_field: map.contains_key("last_assistant_message"),
        error: string(map, "error")?,
        error_details: match map.get("error_details") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        },
        reason: match map.get("reason") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        },
    })
}

/// A valid input and the JSON object that carries it (with unknown fields,
/// and absent fields sometimes written as `null`).
fn valid_input() -> impl Strategy<Value = (HookInput, Value)> {
    let text = || prop::option::of(any::<String>());
    let path = || prop::option::of("[^\u{0}]{1,40}".prop_map(PathBuf::from));
    (
        prop::option::of("[a-zA-Z0-9._:-]{1,200}"),
        path(),
        path(),
        text(),
        any::<bool>(),
        text(),
        prop::collection::vec(("[a-z]{1,10}_x", any_json()), 0..4),
        any::<bool>(),
    )
        .prop_map(
            |(session_id, transcript_path, cwd, event, active, message, extra, nulls)| {
                let input = HookInput {
                    session_id,
                    transcript_path,
                    cwd,
                    hook_event_name: event,
                    stop_hook_active: active,
                    last_assistant_message: message,
                    has_final_message_field: false,
                    error: None,
                    error_details: None,
                    reason: None,
                };
                let mut object: Map<String, Value> = extra.into_iter().collect();
                let mut put = |key: &str, value: Option<Value>| match value {
                    Some(v) => {
                        object.insert(key.to_owned(), v);
                    }
                    None if nulls => {
                        object.insert(key.to_owned(), Value::Null);
                    }
                    None => {}
                };
                let path_json =
                    |p: &Option<PathBuf>| p.as_ref().map(|p| json!(p.to_str().unwrap()));
                put("session_id", input.session_id.clone().map(Value::from));
                put("transcript_path", path_json(&input.transcript_path));
                put("cwd", path_json(&input.cwd));
                put(
                    "hook_event_name",
                    input.hook_event_name.clone().map(Value::from),
                );
                // `false` may also be said by leaving the field out.
                put(
                    "stop_hook_active",
                    (input.stop_hook_active || !nulls).then(|| json!(input.stop_hook_active)),
                );
                put(
                    "last_assistant_message",
                    input.last_assistant_message.clone().map(Value::from),
                );
                let input = HookInput {
                    has_final_message_field: object.contains_key("last_assistant_message"),
                    ..input
                };
                (input, Value::Object(object))
            },
        )
}

proptest! {
    #[test]
    fn parse_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = hook_input::parse(&bytes);
    }

    #[test]
    fn parse_never_panics_on_json_like_text(text in r#"[{}\[\]":,. a-z0-9_\\\n-]{0,80}"#) {
        let _ = hook_input::parse(text.as_bytes());
    }

    /// Any JSON value: a non-object is refused as such; an object gives the
    /// fields the reference expects, or an error naming the bad field.
    #[test]
    fn parse_any_json_value(
        value in prop_oneof![any_json(), hook_like_object()],
        pretty in any::<bool>(),
    ) {
        let text = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            serde_json::to_string(&value).unwrap()
        };
        let got = hook_input::parse(text.as_bytes());
        match (&value, got) {
            (Value::Object(map), got) => match (expected(map), got) {
                (Ok(want), Ok(got)) => prop_assert_eq!(got, want),
                (Err(field), Err(InputError::BadField { field: named, .. })) => {
                    prop_assert_eq!(named, field);
                }
                (want, got) => prop_assert!(false, "{text}: want {want:?}, got {got:?}"),
            },
            (_, Err(InputError::NotObject(_))) => {}
            (_, got) => prop_assert!(false, "{text}: got {got:?}"),
        }
    }

    #[test]
    fn parse_round_trips_a_valid_input((input, object) in valid_input(), pretty in any::<bool>()) {
        let text = if pretty {
            serde_json::to_vec_pretty(&object).unwrap()
        } else {
            serde_json::to_vec(&object).unwrap()
        };
        prop_assert_eq!(hook_input::parse(&text).unwrap(), input);
    }
}

// ------------------------------------------------------------------ signals

/// Reference: the number after the last marker that is followed (past
/// spaces, tabs, `*` and backquotes) by digits that fit a `u64`.
fn reference_findings(message: &str) -> Option<u64> {
    (0..message.len())
        .rev()
        .filter(|&i| message.is_char_boundary(i) && message[i..].starts_with(FINDINGS_MARKER))
        .find_map(|i| {
            let rest =
                message[i + FINDINGS_MARKER.len()..].trim_start_matches([' ', '\t', '*', '`']);
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
}

/// A signal as people configure them: an identifier, maybe with `:`, `-`, `<`, `>`.
fn signal() -> impl Strategy<Value = String> {
    "[A-Z][A-Z0-9_:<>-]{0,15}"
}

/// Prose lines with no fence, no block quote and none of the signal's letters.
/// Plain prose lines: none opens a code fence (three backticks).
fn prose() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        "[a-z .,!?*`()]{0,20}".prop_filter("a code fence is not prose", |line: &String| {
            !line.trim_start().starts_with("```")
        }),
        0..4,
    )
}

/// A line that opens a list item, inside which indented lines are text.
fn is_list_start(line: &str) -> bool {
    let t = line.trim_start();
    line.len() - t.len() < 4 && (t.starts_with("* ") || t == "*")
}

fn check_claim_implies_occurrence(message: &str, signal: &str) -> Result<(), TestCaseError> {
    if claims::signal_claim(message, signal).is_some() {
        prop_assert!(
            message.contains(signal),
            "message {:?}, signal {:?}",
            message,
            signal
        );
    }
    Ok(())
}

/// A message with findings markers, numbers (some too large for `u64`) and
/// the characters skipped between them.
fn findings_message() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        3 => Just(FINDINGS_MARKER.to_string()),
        1 => Just("RALPH_ITERATION_COMPLETE".to_string()),
        3 => "[0-9]{1,3}",
        1 => "[0-9]{19,22}",
        3 => "[ \t*`]{0,3}",
        1 => Just(" findings remain\n".to_string()),
        2 => "[a-zé:\n]{0,4}",
    ];
    prop::collection::vec(piece, 0..12).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn signal_parsers_never_panic(message in any::<String>(), signal in any::<String>()) {
        check_claim_implies_occurrence(&message, &signal)?;
        let _ = claims::status_block(&message);
        let _ = claims::completion_language(&message);
        prop_assert_eq!(signals::findings_count(&message), reference_findings(&message));
    }

    /// The signal on a line of its own, among any plain prose, is a claim.
    #[test]
    fn the_signal_on_its_own_line_claims(signal in signal(), before in prose(), after in prose()) {
        let message = [before, vec![signal.clone()], after].concat().join("\n");
        prop_assert!(claims::signal_claim(&message, &signal).is_some(), "{:?}", message);
    }

    /// The signal in a fenced code block or a block quote (an echoed prompt) is no claim.
    #[test]
    fn an_echoed_signal_never_claims(signal in signal(), before in prose(), inside in prose(), after in prose()) {
        let fenced = [before.clone(), vec!["```".into()], inside, vec![signal.clone(), "```".into()], after.clone()]
            .concat()
            .join("\n");
        prop_assert!(claims::signal_claim(&fenced, &signal).is_none(), "{:?}", fenced);
        let quoted = [before, vec![format!("> {signal}")], after].concat().join("\n");
        prop_assert!(claims::signal_claim(&quoted, &signal).is_none(), "{:?}", quoted);
    }

    /// The signal in an indented code block (4 spaces or a tab, after a
    /// blank line) is no claim either, whatever prose is around it.
    #[test]
    fn a_signal_in_an_indented_code_block_never_claims(
        signal in signal(),
        before in prose(),
        after in prose(),
        indent in prop_oneof![Just("    "), Just("\t"), Just("      "), Just(" \t")],
    ) {
        let before: Vec<String> = before.into_iter().filter(|l| !is_list_start(l)).collect();
        let code = [String::new(), format!("{indent}{signal}"), String::new()];
        let message = [before, code.to_vec(), after].concat().join("\n");
        prop_assert!(claims::signal_claim(&message, &signal).is_none(), "{:?}", message);
    }

    /// The signal inside a sentence (words after it on its line) is no claim.
    #[test]
    fn a_signal_inside_a_sentence_never_claims(
        signal in signal(),
        lead in "[a-z]{1,8}( [a-z]{1,8}){0,3}",
        tail in "[a-z]{1,8}( [a-z]{1,8}){0,3}",
    ) {
        let message = format!("{lead} {signal} {tail}.");
        prop_assert!(claims::signal_claim(&message, &signal).is_none(), "{:?}", message);
    }

    #[test]
    fn findings_count_is_the_last_readable_marker(message in findings_message()) {
        prop_assert_eq!(signals::findings_count(&message), reference_findings(&message));
    }
}
