//! The Stop hook's stdin parser on any bytes: it never panics, what it
//! accepts obeys the documented rules, and an accepted input written back
//! as JSON parses to the same input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_core::observe::hook_input::{self, MAX_SESSION_ID_CHARS};
use serde_json::{json, Value};

fuzz_target!(|data: &[u8]| {
    assert_eq!(hook_input::read_bounded(data).unwrap(), data);
    let Ok(input) = hook_input::parse(data) else {
        return;
    };
    if let Some(id) = &input.session_id {
        assert!(!id.is_empty() && id.chars().count() <= MAX_SESSION_ID_CHARS);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)));
    }
    for path in [&input.transcript_path, &input.cwd].into_iter().flatten() {
        assert!(!path.as_os_str().is_empty());
    }
    let path = |p: &Option<std::path::PathBuf>| match p {
        Some(p) => json!(p.to_str().expect("parsed from a JSON string")),
        None => Value::Null,
    };
    let mut again = json!({
        "session_id": input.session_id,
        "transcript_path": path(&input.transcript_path),
        "cwd": path(&input.cwd),
        "hook_event_name": input.hook_event_name,
        "stop_hook_active": input.stop_hook_active,
        "last_assistant_message": input.last_assistant_message,
        "error": input.error,
        // Kept as text whatever its shape, so written back as that text.
        "error_details": input.error_details,
        "reason": input.reason,
    });
    // Whether the field was there at all (null or not) is kept too.
    if !input.has_final_message_field {
        again
            .as_object_mut()
            .unwrap()
            .remove("last_assistant_message");
    }
    let reparsed = hook_input::parse(&serde_json::to_vec(&again).unwrap()).unwrap();
    assert_eq!(reparsed, input);
});
