//! Reading one transcript line for what the iteration reader needs, and
//! nothing else, in one streaming pass: no JSON tree is built, a content
//! array is folded block by block, and what is kept of a line is bounded.
//!
//! A JSON tree of a crafted 4 MiB line (millions of tiny values) took tens
//! of times the line's size; here a line costs at most about its own size
//! (its text), whatever its shape. The meaning is the tree's: a field of the
//! wrong type counts as absent, the last of two equal keys wins, a line that
//! is not JSON (or not UTF-8) says nothing. Numbers and strings in fields
//! that are not read are checked for their syntax only.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{ApiErrorMessage, EDIT_TOOLS, Entry, ToolOutcome, ToolUse, contains};

/// Most tool calls, and most tool results, kept from one line (the client
/// writes one content block per line); past it they are counted, not kept.
pub(super) const MAX_LINE_ITEMS: usize = 1024;
/// Longest id kept (message, tool call, tool result ids are ~30 bytes):
/// longer ones are cut to this.
const MAX_ID_BYTES: usize = 256;
/// Longest file path an edit tool may name (Linux's `PATH_MAX`); a call
/// naming a longer one counts as a tool whose effect is not described.
const MAX_PATH_BYTES: usize = 4096;
/// Bytes kept of a failing tool result's text: enough for the
/// [`super::MAX_TOOL_ERROR_CHARS`] characters the reader keeps.
const MAX_ERROR_TEXT_BYTES: usize = 4 * super::MAX_TOOL_ERROR_CHARS;
/// Bytes kept of a shell tool's command (to name a refused call).
const MAX_COMMAND_BYTES: usize = 1024;
/// Longest `type`, `model` or tool name compared with a known one.
const MAX_NAME_BYTES: usize = 256;

/// What a transcript line means, or `None` for lines that do not matter
/// (sub-agents', system and bookkeeping lines, broken lines).
pub(super) fn classify(line: &[u8]) -> Option<Entry> {
    // Cheap pre-filter: only assistant and user lines matter, and the
    // attachment a Stop hook's additional context makes.
    if !(contains(line, b"\"assistant\"")
        || contains(line, b"\"user\"")
        || contains(line, b"\"hook_additional_context\""))
    {
        return None;
    }
    // Checked whole first: strings that are skipped are not checked by the parser.
    let text = std::str::from_utf8(line).ok()?;
    // A tool result's text is read only when the line may hold a failing
    // one: unescaping every large successful result cost more than the rest.
    let results = says_is_error_true(line);
    let mut parser = serde_json::Deserializer::from_str(text);
    let fields = LineSeed { results }.deserialize(&mut parser).ok()?;
    parser.end().ok()?;
    fields.entry()
}

/// Whether `line` has `"is_error"` set to `true` anywhere (white space
/// around the colon allowed; a key written with `\u` escapes, which no
/// serializer writes, is not seen).
fn says_is_error_true(line: &[u8]) -> bool {
    crate::observe::bytes::find_iter(line, b"\"is_error\"").any(|at| {
        let rest = &line[at + b"\"is_error\"".len()..];
        let rest = rest.trim_ascii_start();
        rest.strip_prefix(b":")
            .is_some_and(|value| value.trim_ascii_start().starts_with(b"true"))
    })
}

/// Any JSON value, kept when it is a string, a boolean or a non-negative integer.
#[derive(Default)]
enum Scalar {
    #[default]
    Other,
    Bool(bool),
    U64(u64),
    /// A string, whole or cut to the limit it was read with.
    Str {
        text: String,
        cut: bool,
    },
}

impl Scalar {
    fn str(&self) -> Option<&str> {
        match self {
            Scalar::Str { text, .. } => Some(text),
            _ => None,
        }
    }
    fn into_string(self) -> Option<String> {
        match self {
            Scalar::Str { text, .. } => Some(text),
            _ => None,
        }
    }
    fn is(&self, literal: &str) -> bool {
        matches!(self, Scalar::Str { text, cut: false } if text == literal)
    }
    fn is_true(&self) -> bool {
        matches!(self, Scalar::Bool(true))
    }
}

/// The first `limit` bytes of `s`, cut at a character boundary.
fn cut_to(s: &str, limit: usize) -> (&str, bool) {
    if s.len() <= limit {
        return (s, false);
    }
    let mut end = limit;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    (&s[..end], true)
}

/// Reads any value as a [`Scalar`], keeping at most `.0` bytes of a string.
struct ScalarSeed(usize);

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = Scalar;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Scalar, D::Error> {
        d.deserialize_any(self)
    }
}

/// Consumes the rest of a sequence.
fn skip_seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<(), A::Error> {
    while seq.next_element::<IgnoredAny>()?.is_some() {}
    Ok(())
}

/// Consumes the rest of a map.
fn skip_map<'de, A: MapAccess<'de>>(mut map: A) -> Result<(), A::Error> {
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
    Ok(())
}

/// The `visit_*` methods of a visitor that reads maps (and `visit_seq` too
/// when `seq` is given) and takes every other value as its default.
macro_rules! other_values_are_default {
    ($value:ty) => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_str<E: de::Error>(self, _: &str) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<$value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<$value, E> {
            Ok(Default::default())
        }
    };
    ($value:ty, seq) => {
        other_values_are_default!($value);
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<$value, A::Error> {
            skip_seq(seq)?;
            Ok(Default::default())
        }
    };
}

impl<'de> Visitor<'de> for ScalarSeed {
    type Value = Scalar;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(u64::try_from(v).map_or(Scalar::Other, Scalar::U64))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(Scalar::U64(v))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        let (kept, cut) = cut_to(v, self.0);
        Ok(Scalar::Str {
            text: kept.to_owned(),
            cut,
        })
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        if v.len() <= self.0 {
            return Ok(Scalar::Str {
                text: v,
                cut: false,
            });
        }
        self.visit_str(&v)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_none<E: de::Error>(self) -> Result<Scalar, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Scalar, A::Error> {
        skip_seq(seq)?;
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Scalar, A::Error> {
        skip_map(map)?;
        Ok(Scalar::Other)
    }
}

/// The keys read anywhere in a line; any other key is skipped.
enum Key {
    Type,
    IsSidechain,
    IsApiErrorMessage,
    Error,
    ApiErrorStatus,
    Message,
    ToolUseResult,
    Id,
    Model,
    Content,
    Text,
    Name,
    ToolUseId,
    IsError,
    Input,
    FilePath,
    NotebookPath,
    Command,
    StructuredPatch,
    Attachment,
    HookEvent,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "type" => Key::Type,
                    "isSidechain" => Key::IsSidechain,
                    "isApiErrorMessage" => Key::IsApiErrorMessage,
                    "error" => Key::Error,
                    "apiErrorStatus" => Key::ApiErrorStatus,
                    "message" => Key::Message,
                    "toolUseResult" => Key::ToolUseResult,
                    "id" => Key::Id,
                    "model" => Key::Model,
                    "content" => Key::Content,
                    "text" => Key::Text,
                    "name" => Key::Name,
                    "tool_use_id" => Key::ToolUseId,
                    "is_error" => Key::IsError,
                    "input" => Key::Input,
                    "file_path" => Key::FilePath,
                    "notebook_path" => Key::NotebookPath,
                    "command" => Key::Command,
                    "structuredPatch" => Key::StructuredPatch,
                    "attachment" => Key::Attachment,
                    "hookEvent" => Key::HookEvent,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// The fields of a line that matter.
#[derive(Default)]
struct LineFields {
    kind: Scalar,
    sidechain: Scalar,
    api_error_flag: Scalar,
    /// `error`, when the key is there (whatever its value).
    error: Option<Scalar>,
    api_error_status: Scalar,
    message: MessageFields,
    /// `toolUseResult` of a file edit: created or patched (see `edit_changed`).
    edit_changed: Option<bool>,
    /// `attachment` of an attachment line: its type and hook event.
    attachment: AttachmentFields,
}

/// The parts of an `attachment` the reader needs: a Stop hook's
/// `additionalContext` (Claude Code 2.1) is where the next iteration starts.
#[derive(Default)]
struct AttachmentFields {
    kind: Scalar,
    hook_event: Scalar,
}

impl<'de> Deserialize<'de> for AttachmentFields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AttachmentFields, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = AttachmentFields;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an attachment")
            }
            other_values_are_default!(AttachmentFields, seq);
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<AttachmentFields, A::Error> {
                let mut fields = AttachmentFields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Type => {
                            fields.kind = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?;
                        }
                        Key::HookEvent => {
                            fields.hook_event = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?;
                        }
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(fields)
            }
        }
        d.deserialize_any(V)
    }
}

/// Reads a [`LineFields`].
#[derive(Clone, Copy)]
struct LineSeed {
    /// Whether a tool result's text may be needed (see [`classify`]).
    results: bool,
}

impl<'de> DeserializeSeed<'de> for LineSeed {
    type Value = LineFields;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<LineFields, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LineSeed {
    type Value = LineFields;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a transcript line")
    }
    other_values_are_default!(LineFields, seq);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LineFields, A::Error> {
        let mut line = LineFields::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Type => line.kind = map.next_value_seed(ScalarSeed(MAX_NAME_BYTES))?,
                Key::IsSidechain => line.sidechain = map.next_value_seed(ScalarSeed(0))?,
                Key::IsApiErrorMessage => {
                    line.api_error_flag = map.next_value_seed(ScalarSeed(0))?;
                }
                Key::Error => line.error = Some(map.next_value_seed(ScalarSeed(usize::MAX))?),
                Key::ApiErrorStatus => {
                    line.api_error_status = map.next_value_seed(ScalarSeed(0))?;
                }
                Key::Message => {
                    line.message = map.next_value_seed(MessageSeed {
                        results: self.results,
                    })?;
                }
                Key::ToolUseResult => line.edit_changed = map.next_value::<EditResult>()?.changed(),
                Key::Attachment => line.attachment = map.next_value()?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(line)
    }
}

impl LineFields {
    fn entry(self) -> Option<Entry> {
        if self.sidechain.is_true() {
            return None;
        }
        let content = self.message.content;
        if self.kind.is("assistant") {
            let (text, tool_uses, unlisted_calls) = match content {
                Content::Text(text) => (text, Vec::new(), 0),
                Content::Blocks(blocks) => (blocks.text, blocks.tool_uses, blocks.extra_calls),
                Content::Other => (String::new(), Vec::new(), 0),
            };
            let flagged = self.api_error_flag.is_true();
            let synthetic = self.message.model.is("<synthetic>") && self.error.is_some();
            let api_error = (flagged || synthetic).then(|| ApiErrorMessage {
                status: match self.api_error_status {
                    Scalar::U64(n) => u16::try_from(n).ok(),
                    _ => None,
                }
                .or_else(|| ApiErrorMessage::status_in_text(&text)),
                error: self.error.and_then(Scalar::into_string),
            });
            return Some(Entry::Assistant {
                id: self.message.id.into_string(),
                text,
                tool_uses,
                unlisted_calls,
                api_error,
            });
        }
        if self.kind.is("attachment") {
            // The text a Stop hook gave the session to go on with (2.1's
            // `additionalContext`): the next iteration starts here, as at
            // a `Stop hook feedback:` user line.
            let goes_on = self.attachment.kind.is("hook_additional_context")
                && self.attachment.hook_event.is("Stop");
            return goes_on.then_some(Entry::Prompt);
        }
        if !self.kind.is("user") {
            return None;
        }
        match content {
            Content::Blocks(blocks) if blocks.all_tool_results => {
                let single = blocks.count == 1;
                let mut outcomes = blocks.outcomes;
                if single {
                    for outcome in &mut outcomes {
                        outcome.changed = self.edit_changed;
                    }
                }
                Some(Entry::ToolResults {
                    outcomes,
                    overflow: blocks.outcomes_overflow,
                })
            }
            Content::Text(_) | Content::Blocks(_) => Some(Entry::Prompt),
            Content::Other => None,
        }
    }
}

mod content;
mod results;

use content::*;
use results::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::transcript::read_iteration_tail;

    fn assistant(blocks: &str) -> String {
        format!(
            r#"{{"type":"assistant","message":{{"id":"m","role":"assistant","content":[{blocks}]}}}}"#
        )
    }

    #[test]
    fn a_stop_hook_s_context_is_a_prompt_line_and_other_attachments_are_not() {
        let line = |attachment: &str| {
            format!(r#"{{"type":"attachment","attachment":{attachment},"uuid":"u"}}"#)
        };
        let context =
            line(r#"{"type":"hook_additional_context","content":["go on"],"hookEvent":"Stop"}"#);
        assert_eq!(classify(context.as_bytes()), Some(Entry::Prompt));
        for other in [
            r#"{"type":"hook_additional_context","content":["x"],"hookEvent":"PostToolUse"}"#,
            r#"{"type":"hook_success","hookEvent":"Stop","stdout":"hook_additional_context"}"#,
            r#"{"type":"hook_additional_context","hookEvent":5}"#,
            r#""hook_additional_context""#,
        ] {
            assert_eq!(classify(line(other).as_bytes()), None, "{other}");
        }
        // A user line whose attachment field is odd is still a user line.
        let user = r#"{"type":"user","attachment":7,"message":{"role":"user","content":"Go"}}"#;
        assert_eq!(classify(user.as_bytes()), Some(Entry::Prompt));
    }

    #[test]
    fn calls_past_the_bound_of_a_line_are_counted_not_kept() {
        let blocks =
            vec![r#"{"type":"tool_use","id":"t","name":"Read","input":{}}"#; 3000].join(",");
        let Some(Entry::Assistant {
            tool_uses,
            unlisted_calls,
            ..
        }) = classify(assistant(&blocks).as_bytes())
        else {
            panic!("an assistant line");
        };
        assert_eq!(
            (tool_uses.len(), unlisted_calls),
            (MAX_LINE_ITEMS, 3000 - MAX_LINE_ITEMS)
        );

        // Read by the reader: all are counted, and what they did is not fully described.
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        let answer = r#"{"type":"assistant","message":{"id":"end","role":"assistant","content":[{"type":"text","text":"Done."}]}}"#;
        let prompt = r#"{"type":"user","message":{"role":"user","content":"Go"}}"#;
        let blocks = vec![r#"{"type":"tool_use","name":"Read","input":{}}"#; 3000].join(",");
        std::fs::write(
            &path,
            format!("{prompt}\n{}\n{answer}\n", assistant(&blocks)),
        )
        .unwrap();
        let tail = read_iteration_tail(&path).unwrap();
        assert_eq!(tail.tool_calls, 3000);
        assert!(!tail.edits.fully_described);
        assert!(tail.caught_up);
    }

    #[test]
    fn results_past_the_bound_of_a_line_are_dropped_and_said_so() {
        let blocks =
            vec![r#"{"type":"tool_result","tool_use_id":"t","content":"ok"}"#; 2000].join(",");
        let line = format!(r#"{{"type":"user","message":{{"role":"user","content":[{blocks}]}}}}"#);
        let Some(Entry::ToolResults { outcomes, overflow }) = classify(line.as_bytes()) else {
            panic!("a tool results line");
        };
        assert_eq!(outcomes.len(), MAX_LINE_ITEMS);
        assert!(overflow);
    }

    #[test]
    fn ids_are_cut_and_an_unwritable_path_is_not_described() {
        let long_id = "i".repeat(10_000);
        let long_path = format!("/p/{}", "d".repeat(MAX_PATH_BYTES));
        let line = assistant(&format!(
            r#"{{"type":"tool_use","id":"{long_id}","name":"Write","input":{{"file_path":"{long_path}"}}}},{{"type":"tool_use","id":"w","name":"Edit","input":{{"file_path":"/p/a"}}}}"#
        ));
        let Some(Entry::Assistant { tool_uses, .. }) = classify(line.as_bytes()) else {
            panic!("an assistant line");
        };
        assert_eq!(tool_uses[0].id.as_deref().map(str::len), Some(MAX_ID_BYTES));
        assert_eq!(
            (
                tool_uses[0].name.as_str(),
                tool_uses[0].edited_file.as_deref()
            ),
            ("", None)
        );
        assert_eq!(tool_uses[1].edited_file.as_deref(), Some("/p/a"));
    }

    #[test]
    fn a_failing_results_text_is_read_only_when_the_line_says_so() {
        let big = "x".repeat(100_000);
        for (flag, want) in [
            (r#""is_error":true"#, Some("x".repeat(MAX_ERROR_TEXT_BYTES))),
            (
                r#""is_error" :  true"#,
                Some("x".repeat(MAX_ERROR_TEXT_BYTES)),
            ),
            (r#""is_error":false"#, None),
        ] {
            let line = format!(
                r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":"{big}",{flag}}}]}}}}"#
            );
            let Some(Entry::ToolResults { outcomes, .. }) = classify(line.as_bytes()) else {
                panic!("a tool results line");
            };
            assert_eq!(outcomes[0].error, want, "{flag}");
        }
        assert!(says_is_error_true(
            br#"{"a":1, "is_error"	:
 true}"#
        ));
        assert!(!says_is_error_true(br#"{"is_error":"true"}"#));
    }
}
