//! What the agent's last message says about progress: a findings count.
//! (Completion claims are read by [`crate::judge::claims`].)
//!
//! Only the latest assistant message is ever passed in here, never the
//! re-injected prompt (which quotes the signal) and never an earlier message.

/// The marker of a progress report: `RALPH_ITERATION_COMPLETE: N findings remain`.
pub const FINDINGS_MARKER: &str = "RALPH_ITERATION_COMPLETE:";

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
            (
                "RALPH_ITERATION_COMPLETE: 99999999999999999999999 findings",
                None,
            ),
            ("no marker 4 findings remain", None),
        ];
        for (msg, want) in cases {
            assert_eq!(findings_count(msg), *want, "{msg:?}");
        }
    }
}
