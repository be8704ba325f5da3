//! What the agent's last message says: a completion claim, a findings count.
//!
//! Only the latest assistant message is ever passed in here, never the
//! re-injected prompt (which quotes the signal) and never an earlier message.

/// The marker of a progress report: `RALPH_ITERATION_COMPLETE: N findings remain`.
pub const FINDINGS_MARKER: &str = "RALPH_ITERATION_COMPLETE:";

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// True when `signal` stands in `message` as a whole token (not as part of a
/// longer identifier such as `NOT_SIGNAL` or `SIGNAL_PENDING`). The official
/// plugin's `<promise>SIGNAL</promise>` form is such a token too.
pub fn claims_completion(message: &str, signal: &str) -> bool {
    if signal.is_empty() {
        return false;
    }
    let bytes = message.as_bytes();
    let sig = signal.as_bytes();
    let starts_word = is_word_byte(sig[0]);
    let ends_word = is_word_byte(sig[sig.len() - 1]);
    // Every occurrence, overlapping ones included: with `a:a`, the clean
    // token at the end of `xa:a:a` overlaps the glued one before it.
    let step = signal.chars().next().map_or(1, char::len_utf8);
    let mut from = 0;
    while let Some(found) = message[from..].find(signal) {
        let start = from + found;
        let end = start + sig.len();
        let clean_before = !starts_word || start == 0 || !is_word_byte(bytes[start - 1]);
        let clean_after = !ends_word || end == bytes.len() || !is_word_byte(bytes[end]);
        if clean_before && clean_after {
            return true;
        }
        // `start` begins with the signal's first character, so this is a char boundary.
        from = start + step;
    }
    false
}

/// The findings count of the last `RALPH_ITERATION_COMPLETE: N findings remain`
/// line in `message`, if any.
pub fn findings_count(message: &str) -> Option<u64> {
    message
        .match_indices(FINDINGS_MARKER)
        .filter_map(|(at, _)| {
            let rest =
                message[at + FINDINGS_MARKER.len()..].trim_start_matches([' ', '\t', '*', '`']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .last()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIG: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";

    #[test]
    fn completion_table() {
        let cases: &[(&str, bool)] = &[
            ("RALPH_AUDIT_COMPLETE_NO_FINDINGS", true),
            ("All done.\nRALPH_AUDIT_COMPLETE_NO_FINDINGS\n", true),
            ("All done. RALPH_AUDIT_COMPLETE_NO_FINDINGS", true),
            ("<promise>RALPH_AUDIT_COMPLETE_NO_FINDINGS</promise>", true),
            ("**RALPH_AUDIT_COMPLETE_NO_FINDINGS**", true),
            ("`RALPH_AUDIT_COMPLETE_NO_FINDINGS`.", true),
            ("Still working.", false),
            ("", false),
            ("RALPH_AUDIT_COMPLETE_NO_FINDINGS_YET", false),
            ("NOT_RALPH_AUDIT_COMPLETE_NO_FINDINGS", false),
            ("RALPH_AUDIT_COMPLETE", false),
            ("ralph_audit_complete_no_findings", false),
        ];
        for (msg, want) in cases {
            assert_eq!(claims_completion(msg, SIG), *want, "{msg:?}");
        }
    }

    #[test]
    fn completion_with_punctuated_signal() {
        assert!(claims_completion("ok <done/> bye", "<done/>"));
        assert!(claims_completion("x<done/>y", "<done/>"));
        assert!(!claims_completion("anything", ""));
    }

    #[test]
    fn completion_token_overlapping_a_glued_occurrence() {
        // The first occurrence of `a:a` in `xa:a:a` is glued to `x`; the
        // whole token is the one overlapping it at the end.
        assert!(claims_completion("xa:a:a", "a:a"));
        assert!(claims_completion("UNDONE-DONE-DONE", "DONE-DONE"));
        assert!(claims_completion("a:aa:a:a", "a:a"));
        assert!(!claims_completion("xa:a:ay", "a:a"));
        assert!(claims_completion("éa:éa:é", "a:é"));
    }

    #[test]
    fn findings_table() {
        let cases: &[(&str, Option<u64>)] = &[
            ("RALPH_ITERATION_COMPLETE: 4 findings remain", Some(4)),
            ("text\nRALPH_ITERATION_COMPLETE:0 findings remain", Some(0)),
            ("RALPH_ITERATION_COMPLETE: **12** findings remain", Some(12)),
            ("RALPH_ITERATION_COMPLETE: 1 finding remains", Some(1)),
            (
                "RALPH_ITERATION_COMPLETE: 5 findings remain\nlater\nRALPH_ITERATION_COMPLETE: 3 findings remain",
                Some(3),
            ),
            ("RALPH_ITERATION_COMPLETE: some findings remain", None),
            ("RALPH_ITERATION_COMPLETE: 99999999999999999999999 findings", None),
            ("no marker 4 findings remain", None),
        ];
        for (msg, want) in cases {
            assert_eq!(findings_count(msg), *want, "{msg:?}");
        }
    }
}
