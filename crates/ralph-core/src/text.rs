//! Text from the agent made harmless before a person's terminal shows it.
//!
//! What the agent writes (its messages, a `RALPH_ABORT` or `RALPH_ASK`
//! text, a claim's basis, what its code printed in a verify command's
//! output) is kept as it was written, and may hold a terminal's control
//! sequences: `ESC[2K` erases the line, `ESC[8m` hides what follows, OSC 52
//! (`ESC]52;c;…BEL`) writes the clipboard, a lone carriage return writes
//! over the line. Everything ralph shows a person passes through
//! [`printable`] at the edge where it is written: each control character
//! but a newline and a tab is shown as the visible escape `\xHH`, so the
//! words stay readable and the terminal obeys none of them.

use std::borrow::Cow;
use std::fmt::Write as _;

/// True for a character [`printable`] replaces: the C0 controls but a
/// newline and a tab (ESC, BEL, a carriage return, …), DEL, and the C1
/// controls U+0080–U+009F (U+009B is a CSI on its own).
fn is_replaced(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `word` as a person can paste it into sh: bare when every character is
/// one no shell reads specially, else single-quoted (a `'` as `'\''`).
/// For the commands ralph prints as the next step.
pub fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// `text` with every control character other than a newline and a tab
/// written as `\x` and its code point in two lowercase hex digits (ESC is
/// `\x1b`, BEL `\x07`, a carriage return `\x0d`, CSI U+009B `\x9b`); the
/// text itself when it holds none (nothing is copied).
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_replaced) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_replaced(c) {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// JSON text (as `serde_json` writes it) with DEL and the C1 controls
/// U+0080–U+009F inside its strings written as `\u00XX` escapes: the same
/// data, read back alike by any JSON reader, with no byte a terminal
/// obeys. `serde_json` escapes the C0 controls itself; these it leaves
/// raw. Outside strings JSON holds no such character, so every one found
/// is inside a string.
pub fn printable_json(json: &str) -> Cow<'_, str> {
    let replaced = |c: char| c.is_control() && u32::from(c) >= 0x7f;
    if !json.chars().any(replaced) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if replaced(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_controls_become_visible_escapes() {
        let cases: &[(&str, &str)] = &[
            ("plain words", "plain words"),
            ("two\nlines\tand a tab", "two\nlines\tand a tab"),
            ("\u{1b}[2Kloop complete", "\\x1b[2Kloop complete"),
            ("\u{1b}[8mhidden\u{1b}[0m", "\\x1b[8mhidden\\x1b[0m"),
            (
                "\u{1b}]52;c;ZXZpbA==\u{7}copied",
                "\\x1b]52;c;ZXZpbA==\\x07copied",
            ),
            ("progress 10%\rdone", "progress 10%\\x0ddone"),
            ("\u{9b}2K C1 CSI", "\\x9b2K C1 CSI"),
            ("\u{80}\u{9f}", "\\x80\\x9f"),
            ("DEL\u{7f}", "DEL\\x7f"),
            ("nul\u{0}bs\u{8}", "nul\\x00bs\\x08"),
            // Printable characters next to the controls are kept as they are.
            ("é → ✓ \u{a0}\u{a1}", "é → ✓ \u{a0}\u{a1}"),
        ];
        for (text, shown) in cases {
            assert_eq!(printable(text), *shown, "{text:?}");
        }
    }

    #[test]
    fn clean_text_is_not_copied() {
        assert!(matches!(printable("all clean\n"), Cow::Borrowed(_)));
        assert!(matches!(printable_json("{\"a\":1}"), Cow::Borrowed(_)));
    }

    #[test]
    fn what_is_shown_holds_no_control_but_newline_and_tab() {
        let every: String = (0u32..0x200).filter_map(char::from_u32).collect();
        let shown = printable(&every);
        assert!(
            shown
                .chars()
                .all(|c| !c.is_control() || c == '\n' || c == '\t'),
            "{shown:?}"
        );
        assert!(
            shown.contains("\\x1b") && shown.contains("\\x9b"),
            "{shown}"
        );
    }

    #[test]
    fn json_keeps_its_data_without_raw_c1_or_del() {
        let value = serde_json::json!({"reason": "a\u{1b}[2K\u{9b}31m\u{7f}z"});
        let raw = serde_json::to_string(&value).unwrap();
        assert!(raw.contains('\u{9b}'), "serde_json leaves C1 raw: {raw:?}");
        let shown = printable_json(&raw);
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert!(
            shown.contains("\\u009b") && shown.contains("\\u007f"),
            "{shown}"
        );
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap();
        assert_eq!(back, value);
    }
}
