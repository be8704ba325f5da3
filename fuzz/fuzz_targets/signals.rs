//! The readers of the agent's message on any text: the first byte gives the
//! signal's length, the signal and the message follow. `claims_completion`
//! must agree with a whole-token reference; `findings_count` must never
//! panic and only report a number written after the marker.

#![no_main]

use libfuzzer_sys::fuzz_target;
use ralph_core::signals::{self, FINDINGS_MARKER};

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Some occurrence of `signal` (overlapping ones included) does not extend a word.
fn reference_claims(message: &str, signal: &str) -> bool {
    let (m, s) = (message.as_bytes(), signal.as_bytes());
    if s.is_empty() || s.len() > m.len() {
        return false;
    }
    (0..=m.len() - s.len())
        .filter(|&i| &m[i..i + s.len()] == s)
        .any(|i| {
            let end = i + s.len();
            let before = i == 0 || !(is_word_byte(s[0]) && is_word_byte(m[i - 1]));
            let after = end == m.len() || !(is_word_byte(s[s.len() - 1]) && is_word_byte(m[end]));
            before && after
        })
}

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

    assert_eq!(
        signals::claims_completion(message, signal),
        reference_claims(message, signal),
        "message {message:?}, signal {signal:?}"
    );
    assert!(!signals::claims_completion(message, ""));

    if let Some(count) = signals::findings_count(message) {
        assert!(message.contains(FINDINGS_MARKER));
        assert!(message.contains(&count.to_string()) || count == 0);
    }
    // The signal alone, and the default signal in the fuzzed message.
    assert!(signal.is_empty() || signals::claims_completion(signal, signal));
    let _ = signals::claims_completion(message, "RALPH_AUDIT_COMPLETE_NO_FINDINGS");
});
