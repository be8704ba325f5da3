//! The readers of the agent's message on any text: the first byte gives the
//! signal's length, the signal and the message follow. A claim must quote the
//! signal; the status-block, completion-language and findings readers must
//! never panic, and a findings count must come from the marker.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_core::judge::claims;
use ralph_core::judge::signals::{self, FINDINGS_MARKER};

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut split = usize::from(n % 32).min(text.len());
    while !text.is_char_boundary(split) {
        split -= 1;
    }
    let (signal, message) = text.split_at(split);

    if claims::signal_claim(message, signal).is_some() {
        assert!(
            message.contains(signal),
            "message {message:?}, signal {signal:?}"
        );
    }
    assert!(claims::signal_claim(message, "").is_none());
    let _ = claims::status_block(message);
    let _ = claims::completion_language(message);
    let _ = claims::signal_claim(message, "RALPH_AUDIT_COMPLETE_NO_FINDINGS");

    if let Some(count) = signals::findings_count(message) {
        assert!(message.contains(FINDINGS_MARKER));
        assert!(message.contains(&count.to_string()) || count == 0);
    }
    // An identifier-like signal alone on its line is always a claim.
    if !signal.is_empty()
        && signal
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        assert!(claims::signal_claim(signal, signal).is_some(), "{signal:?}");
    }
});
