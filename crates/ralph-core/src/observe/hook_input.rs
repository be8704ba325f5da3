//! The JSON object Claude Code writes to the hook's stdin (at `Stop`,
//! `StopFailure` and `SessionEnd`), read leniently: unknown fields are
//! ignored, optional ones may be missing, and anything malformed is an
//! error that names the field, never a panic.

use std::io::{self, Read};
use std::path::PathBuf;

use serde_json::{Map, Value};
use thiserror::Error;

/// Most bytes read from stdin; a larger input is refused, not buffered.
pub const MAX_INPUT_BYTES: u64 = 16 * 1024 * 1024;
/// Longest accepted `session_id`.
pub const MAX_SESSION_ID_CHARS: usize = 200;

/// The fields of the Stop hook input that ralph uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HookInput {
    /// The stopping session.
    pub session_id: Option<String>,
    /// The session's transcript (JSONL).
    pub transcript_path: Option<PathBuf>,
    /// The session's working folder.
    pub cwd: Option<PathBuf>,
    /// `Stop`, `StopFailure` or `SessionEnd` (or `SubagentStop` when
    /// registered there by mistake); none is taken as `Stop`.
    pub hook_event_name: Option<String>,
    /// True on every stop that follows a block.
    pub stop_hook_active: bool,
    /// The text of the final assistant message (Claude Code 2.1 and later);
    /// on `StopFailure`, the error text shown in its place.
    pub last_assistant_message: Option<String>,
    /// The input has a `last_assistant_message` field, as Claude Code 2.1
    /// and later send: those clients also continue a session on a Stop
    /// hook's `hookSpecificOutput.additionalContext` (2.0 does not).
    pub has_final_message_field: bool,
    /// `StopFailure`: the client's name for the API error (`rate_limit`, `server_error`, …).
    pub error: Option<String>,
    /// `StopFailure`: the client's details of the error, as text.
    pub error_details: Option<String>,
    /// Why the session ended (`SessionEnd`: `exit`, `clear`, `logout`, …).
    pub reason: Option<String>,
}

/// Why the input could not be used.
#[derive(Debug, Error)]
pub enum InputError {
    /// Reading stdin failed.
    #[error("cannot read the hook input on stdin: {0}")]
    Read(#[from] io::Error),
    /// Stdin held more than [`MAX_INPUT_BYTES`].
    #[error("the hook input on stdin is larger than {} MiB", MAX_INPUT_BYTES / 1024 / 1024)]
    TooLarge,
    /// Stdin was empty.
    #[error("the hook input on stdin is empty (expected Claude Code's Stop hook JSON object)")]
    Empty,
    /// Stdin was not valid UTF-8.
    #[error("the hook input on stdin is not valid UTF-8")]
    NotUtf8,
    /// Stdin was not valid JSON.
    #[error("the hook input on stdin is not valid JSON: {0}")]
    NotJson(String),
    /// Stdin was JSON but not an object.
    #[error("the hook input on stdin is a JSON {0}, expected an object")]
    NotObject(&'static str),
    /// A known field has the wrong type or an unusable value.
    #[error("the hook input field `{field}` {problem}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Reads at most [`MAX_INPUT_BYTES`] from `reader`.
pub fn read_bounded(reader: impl Read) -> Result<Vec<u8>, InputError> {
    let mut bytes = Vec::new();
    reader.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(InputError::TooLarge);
    }
    Ok(bytes)
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn optional_string(
    map: &Map<String, Value>,
    field: &'static str,
) -> Result<Option<String>, InputError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(InputError::BadField {
            field,
            problem: "must be a string",
        }),
    }
}

/// True for session ids ralph accepts (from Claude Code or `--session-id`):
/// 1 to 200 letters, digits, `-`, `_`, `.` or `:`, so an id can never name a
/// path or break a line.
pub fn is_valid_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.chars().count() <= MAX_SESSION_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
}

/// Parses the hook input.
pub fn parse(bytes: &[u8]) -> Result<HookInput, InputError> {
    let text = std::str::from_utf8(bytes).map_err(|_| InputError::NotUtf8)?;
    if text.trim().is_empty() {
        return Err(InputError::Empty);
    }
    let value: Value =
        serde_json::from_str(text).map_err(|e| InputError::NotJson(e.to_string()))?;
    let Value::Object(map) = value else {
        return Err(InputError::NotObject(kind(&value)));
    };
    let session_id = optional_string(&map, "session_id")?;
    if let Some(id) = &session_id
        && !is_valid_session_id(id)
    {
        return Err(InputError::BadField {
            field: "session_id",
            problem: "must be 1 to 200 letters, digits, '-', '_', '.' or ':'",
        });
    }
    let stop_hook_active = match map.get("stop_hook_active") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(InputError::BadField {
                field: "stop_hook_active",
                problem: "must be a boolean",
            });
        }
    };
    let path = |field| {
        optional_string(&map, field).map(|s| s.filter(|s| !s.is_empty()).map(PathBuf::from))
    };
    Ok(HookInput {
        session_id,
        transcript_path: path("transcript_path")?,
        cwd: path("cwd")?,
        hook_event_name: optional_string(&map, "hook_event_name")?,
        stop_hook_active,
        last_assistant_message: optional_string(&map, "last_assistant_message")?,
        has_final_message_field: map.contains_key("last_assistant_message"),
        error: optional_string(&map, "error")?,
        // Whatever shape the details take, kept as text.
        error_details: match map.get("error_details") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        },
        // Any shape: only shown.
        reason: match map.get("reason") {
            Some(Value::String(s)) => Some(s.clone()),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_real_samples() {
        let first = parse(include_bytes!(
            "../../../../tests/fixtures/stop-input-first.json"
        ))
        .unwrap();
        assert_eq!(
            first.session_id.as_deref(),
            Some("c0563e5b-5d19-4827-8166-f6f26bb447e0")
        );
        assert!(!first.stop_hook_active);
        assert_eq!(
            first.last_assistant_message.as_deref(),
            Some("Working on it. Iteration text.")
        );
        assert_eq!(first.hook_event_name.as_deref(), Some("Stop"));
        assert_eq!(first.cwd, Some(PathBuf::from("/home/user/proj")));
        let after = parse(include_bytes!(
            "../../../../tests/fixtures/stop-input-after-block.json"
        ))
        .unwrap();
        assert!(after.stop_hook_active);
        let failure = parse(include_bytes!(
            "../../../../tests/fixtures/stop-failure-input.json"
        ))
        .unwrap();
        assert_eq!(failure.hook_event_name.as_deref(), Some("StopFailure"));
        assert_eq!(failure.error.as_deref(), Some("rate_limit"));
        assert_eq!(
            failure.error_details.as_deref(),
            Some("[]"),
            "any shape, kept as text"
        );
    }

    #[test]
    fn lenient_about_unknown_and_missing_fields() {
        let input = parse(
            br#"{"session_id":"abc","future_field":{"x":[1,2]},"last_assistant_message":null}"#,
        )
        .unwrap();
        assert_eq!(input.session_id.as_deref(), Some("abc"));
        assert_eq!(input.last_assistant_message, None);
        assert_eq!(parse(b"{}").unwrap(), HookInput::default());
    }

    #[test]
    fn bad_inputs_are_named() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "empty"),
            (b"  \n", "empty"),
            (b"{not json", "not valid JSON"),
            (b"[1,2]", "JSON array"),
            (b"\"text\"", "JSON string"),
            (b"\xff\xfe{}", "UTF-8"),
            (br#"{"session_id": 5}"#, "`session_id`"),
            (br#"{"session_id": "../../etc/passwd"}"#, "`session_id`"),
            (br#"{"session_id": ""}"#, "`session_id`"),
            (br#"{"stop_hook_active": "yes"}"#, "`stop_hook_active`"),
            (
                br#"{"last_assistant_message": ["a"]}"#,
                "`last_assistant_message`",
            ),
            (br#"{"transcript_path": 1}"#, "`transcript_path`"),
            (br#"{"cwd": false}"#, "`cwd`"),
        ];
        for (bytes, needle) in cases {
            let err = parse(bytes).unwrap_err().to_string();
            assert!(
                err.contains(needle),
                "{:?}: {err}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn read_is_bounded() {
        let big = io::repeat(b' ').take(MAX_INPUT_BYTES + 10);
        assert!(matches!(read_bounded(big), Err(InputError::TooLarge)));
        assert_eq!(read_bounded(&b"{}"[..]).unwrap(), b"{}");
    }
}
