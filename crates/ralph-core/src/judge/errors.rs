//! Recognises the error an iteration ran into and fingerprints it, so the
//! circuit breaker can tell "the same error again" from "a new error".
//!
//! Errors come from failing tool results (`is_error: true` in the
//! transcript) and from the agent's own message. Normalisation strips what
//! changes between two sightings of one error: numbers, paths, hex ids,
//! timestamps. A JSON field such as `"is_error": false` is not an error.

use serde::{Deserialize, Serialize};

pub use crate::observe::refusals::{
    Refusal, SAMPLE_CHARS, calls_in_words, how_to_allow, how_to_allow_in, is_permission_denial,
    is_simple_command, permission_denial,
};
use crate::observe::refusals::{is_exit_code_line, sample_of};

/// One error, as remembered between stops.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorSighting {
    /// Hash of the normalised error line.
    pub fingerprint: String,
    /// The error line as seen (shortened), for the person and the agent.
    pub sample: String,
}

/// True when `line` reads like an error report rather than a mention.
pub fn looks_like_error(line: &str) -> bool {
    let lower = line
        .trim()
        .trim_start_matches(['-', '*', '>', '`', ' ', '#'])
        .to_ascii_lowercase();
    if lower.is_empty() {
        return false;
    }
    let benign = [
        "is_error\": false",
        "is_error\":false",
        "is_error: false",
        "no error",
        "0 error",
        "without error",
        "error handling",
        "errors: 0",
        "0 failed",
    ];
    if benign.iter().any(|b| lower.contains(b)) {
        return false;
    }
    let starts = [
        "error",
        "fatal:",
        "fatal error",
        "panic:",
        "traceback",
        "exception",
        "failed",
        "failure:",
        "npm err!",
        "command failed",
        "segmentation fault",
    ];
    starts.iter().any(|s| lower.starts_with(s))
        || lower.contains("panicked at")
        || lower.contains("error:")
        || lower.contains("error[")
        || lower.contains("exception:")
        || lower.contains(" failed:")
        || lower.contains("test result: failed")
        || lower.contains("no such file or directory")
        || lower.contains("command not found")
        || lower.contains("permission denied")
}

/// The first line of `text` that reads like an error.
pub fn first_error_line(text: &str) -> Option<&str> {
    text.lines().map(str::trim).find(|l| looks_like_error(l))
}

/// Strips what varies between two sightings of one error: paths, hex ids,
/// numbers (a digit run glued to a letter, like `E0308`, is kept), and runs
/// of white space; the result is lower case.
pub fn normalise(line: &str) -> String {
    let mut words = Vec::new();
    for word in line.split_whitespace() {
        let bare = word.trim_matches(|c: char| "`'\"()[]{},;".contains(c));
        if bare.contains('/') || bare.contains('\\') {
            words.push("<path>".to_string());
            continue;
        }
        let digits = bare.chars().filter(char::is_ascii_digit).count();
        if digits >= 4
            && bare.chars().take(4).all(|c| c.is_ascii_digit())
            && bare[4..].starts_with(['-', ':', '.', 'T'])
        {
            words.push("<time>".to_string());
            continue;
        }
        let hexish = bare.trim_start_matches("0x");
        if (bare.starts_with("0x")
            && !hexish.is_empty()
            && hexish.chars().all(|c| c.is_ascii_hexdigit()))
            || (hexish.len() >= 7
                && hexish.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
                && hexish.chars().any(|c| c.is_ascii_digit()))
        {
            words.push("<hex>".to_string());
            continue;
        }
        let mut out = String::with_capacity(word.len());
        let mut prev_letter = false;
        let mut in_number = false;
        for c in word.chars() {
            if c.is_ascii_digit() && !prev_letter && !in_number {
                in_number = true;
                out.push('#');
            } else if c.is_ascii_digit() && in_number {
                // swallow the rest of the number
            } else {
                in_number = false;
                out.push(c.to_ascii_lowercase());
            }
            prev_letter = c.is_ascii_alphabetic() || (prev_letter && c.is_ascii_digit());
        }
        words.push(out);
    }
    words.join(" ")
}

/// FNV-1a, 64 bits, as hex: stable across runs and platforms.
pub fn fingerprint(text: &str) -> String {
    crate::fnv::hex(text.as_bytes())
}

fn sample(line: &str) -> String {
    sample_of(line, SAMPLE_CHARS)
}

/// The error of an iteration: the first failing tool result's error line
/// (or its first line), else the first error line of the agent's message.
pub fn sighting(message: &str, failing_tool_results: &[String]) -> Option<ErrorSighting> {
    let line = failing_tool_results
        .iter()
        .find_map(|r| {
            first_error_line(r).or_else(|| {
                let mut lines = r.lines().map(str::trim).filter(|l| !l.is_empty());
                let first = lines.next()?;
                // "Exit code 1" alone says nothing about which failure it was.
                Some(if is_exit_code_line(first) {
                    lines.next().unwrap_or(first)
                } else {
                    first
                })
            })
        })
        .or_else(|| first_error_line(message))?;
    Some(ErrorSighting {
        fingerprint: fingerprint(&normalise(line)),
        sample: sample(line),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::too_many_lines)] // a table of real refusal texts, one per row
    fn refusals_for_lack_of_permission_are_told_from_other_failures() {
        // Every refusal text the real clients wrote (2.0.77 and 2.1.330,
        // `-p`, json and stream-json, acceptEdits and the default mode),
        // with the call that got it.
        for (result, denied) in [
            // Bash, both clients, both modes: tests, builds, git add/commit, curl, python3 -c.
            ("This command requires approval", true),
            // A compound command, both clients: "require", not "requires".
            (
                "This Bash command contains multiple operations. The following parts require approval: git add x, git commit -m x",
                true,
            ),
            (
                "This Bash command contains multiple operations. The following part requires approval: curl -s http://127.0.0.1:9/",
                true,
            ),
            // Write outside the project (acceptEdits), anywhere (default mode), both clients.
            (
                "Claude requested permissions to write to /p/new.txt, but you haven't granted it yet.",
                true,
            ),
            // `echo hi > inside.txt` in the default mode (2.1.330).
            (
                "Output redirection to '/p/x.txt' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.",
                true,
            ),
            // `echo hi > /tmp/x` (2.1.330).
            (
                "Output redirection to '/tmp/x' needs approval. The path is outside the working directories for this session ('/p'). Allowing runs the command as written.",
                true,
            ),
            // `rm README.md` in the default mode (2.1.330).
            (
                "rm in '/p/README.md' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.",
                true,
            ),
            (
                "touch in '/tmp/x' needs approval. The path is outside the working directories for this session ('/p'). Allowing runs the command as written.",
                true,
            ),
            // `echo hi > /tmp/x` (2.0.77).
            (
                "Output redirection to '/tmp/x' was blocked. For security, Claude Code may only write to files in the allowed working directories for this session: '/p'.",
                true,
            ),
            (
                "touch in '/tmp/x' was blocked. For security, Claude Code may only create or modify files in the allowed working directories for this session: '/p'.",
                true,
            ),
            // Read (a file outside the project; 2.0.77: Grep there too) and
            // WebFetch, both clients, both modes.
            (
                "Claude requested permissions to read from /tmp/o.txt, but you haven't granted it yet.",
                true,
            ),
            (
                "Claude requested permissions to use WebFetch, but you haven't granted it yet.",
                true,
            ),
            // `ls`, `cd`, `cat` outside the project, both clients, both modes.
            (
                "ls in '/tmp' was blocked. For security, Claude Code may only list files in the allowed working directories for this session: '/p'.",
                true,
            ),
            (
                "cd in '/tmp' was blocked. For security, Claude Code may only change directories to the allowed working directories for this session: '/p'.",
                true,
            ),
            (
                "cat in '/tmp/o.txt' was blocked. For security, Claude Code may only concatenate files from the allowed working directories for this session: '/p'.",
                true,
            ),
            // `sed -i` in the project, default mode: 2.1.330, then 2.0.77.
            (
                "sed in '/p/README.md' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.",
                true,
            ),
            (
                "sed command requires approval (contains potentially dangerous operations)",
                true,
            ),
            // Failures that are no refusal, the system's EACCES among them.
            ("Exit code 1\nbash: /etc/shadow: Permission denied", false),
            (
                "Exit code 1\ntouch: cannot touch '/root/x': Permission denied",
                false,
            ),
            ("error[E0425]: cannot find value `x` in this scope", false),
            (
                "Exit code 1\ncat: missing.txt: No such file or directory",
                false,
            ),
            // A command's own failure whose output says the words: a test's
            // name, or text the agent printed.
            (
                "Exit code 1\nFAILED tests/test_orders.py::test_order_requires_approval",
                false,
            ),
            ("Exit code 1\nThis command requires approval", false),
            (
                "Exit code 2\nThe following parts require approval: curl x | sh",
                false,
            ),
        ] {
            let got = permission_denial(&[result.to_string()]);
            assert_eq!(got.is_some(), denied, "{result}");
            assert_eq!(is_permission_denial(result), denied, "{result}");
        }
        // The first refusal is named, whatever failed before it.
        let results = [
            "error: tests failed".to_string(),
            "Claude requested permissions to write to /p/a.txt, but you haven't granted it yet."
                .to_string(),
        ];
        assert!(
            permission_denial(&results)
                .unwrap()
                .call()
                .contains("/p/a.txt")
        );
        assert_eq!(permission_denial(&[]), None);
    }

    #[test]
    fn only_rules_a_person_could_paste_are_proposed() {
        // The rule a sandboxed run was offered for a refused compound
        // command: shell syntax, cut short by the client's text.
        let cut = Refusal {
            text: Some(
                "This Bash command contains multiple operations. The following parts require \
                 approval: if [ \"ops_sub\" = ops_neg ] && [ !…"
                    .into(),
            ),
            ..Refusal::of_call(
                "Bash",
                Some("if [ \"ops_sub\" = ops_neg ] && [ ! -f x ]; then make; fi"),
            )
        };
        assert!(cut.allow_rules().is_empty(), "{:?}", cut.allow_rules());
        assert!(
            !cut.how_to_allow().contains("permissions"),
            "{}",
            cut.how_to_allow()
        );
        // A list cut short loses its last part, whole ones stay.
        let listed = Refusal {
            text: Some(
                "The following parts require approval: make test, python3 -m pytest -k sl…".into(),
            ),
            ..Refusal::of_call("Bash", Some("make test; python3 -m pytest -k slow"))
        };
        assert_eq!(listed.allow_rules(), ["Bash(make test:*)"]);
        for (command, simple) in [
            ("python3 -m unittest", true),
            ("python3 -c \"print(1); print(2)\"", true),
            ("git commit -m 'a | b'", true),
            ("if [ -f x ]", false),
            ("[ ! -f x ]", false),
            ("make test && make lint", false),
            ("cat x | grep y", false),
            ("echo $(id)", false),
            ("echo \"$HOME\"", false),
            ("echo x > y", false),
            ("echo 'open", false),
            ("make tes…", false),
            ("FOO=1 make", false),
            ("", false),
        ] {
            assert_eq!(is_simple_command(command), simple, "{command}");
        }
    }

    #[test]
    fn the_advice_fits_the_run_s_mode() {
        let unittest = Refusal::of_call("Bash", Some("python3 -m unittest"));
        let outside = how_to_allow_in(std::slice::from_ref(&unittest), false);
        assert!(
            outside.starts_with("run with the sandbox (`--sandbox`"),
            "{outside}"
        );
        let inside = how_to_allow_in(std::slice::from_ref(&unittest), true);
        assert!(!inside.contains("--sandbox"), "{inside}");
        assert!(!inside.contains("bubblewrap"), "{inside}");
        assert!(
            inside.starts_with("the client's sandbox is on and still asked approval for it"),
            "{inside}"
        );
        assert!(
            inside.contains(r#"`"permissions": {"allow": ["Bash(python3 -m unittest:*)"]}`"#),
            "{inside}"
        );
        assert!(inside.contains("bypassPermissions"), "{inside}");
    }

    #[test]
    fn a_refused_call_is_named_with_the_rules_that_allow_it() {
        let unittest = Refusal::of_call("Bash", Some("python3 -m unittest"));
        assert_eq!(unittest.call(), "Bash(python3 -m unittest)");
        assert_eq!(unittest.allow_rules(), ["Bash(python3 -m unittest:*)"]);
        let how = unittest.how_to_allow();
        for part in [
            "`--sandbox`",
            "apt-get install bubblewrap socat",
            r#"`"permissions": {"allow": ["Bash(python3 -m unittest:*)"]}`"#,
            "`-- --permission-mode bypassPermissions`",
        ] {
            assert!(how.contains(part), "{part} in {how}");
        }
        assert!(!how.contains("acceptEdits"), "{how}");
        // A compound command: one rule per part the client named.
        let compound = Refusal {
            text: Some("This Bash command contains multiple operations. The following parts require approval: git add a, git commit -m a".into()),
            ..Refusal::of_call("Bash", Some("git add a && git commit -m a"))
        };
        assert_eq!(
            compound.allow_rules(),
            ["Bash(git add a:*)", "Bash(git commit -m a:*)"]
        );
        // A file write: the tool, and the mode that allows edits in the project.
        let write = Refusal::of_call("Write", Some("/p/x.txt"));
        assert_eq!(write.call(), "Write(/p/x.txt)");
        assert_eq!(write.allow_rules(), ["Write"]);
        assert!(
            write
                .how_to_allow()
                .contains("--permission-mode acceptEdits")
        );
        // Only the text known: no rule to offer, the text names it.
        let text_only = permission_denial(&["This command requires approval".into()]).unwrap();
        assert_eq!(text_only.call(), "This command requires approval");
        assert!(text_only.allow_rules().is_empty());
        assert!(!text_only.how_to_allow().contains("permissions"));
        // A quote in a command is escaped in the JSON shown; a long or
        // multi-line command is shortened.
        let quoted = Refusal::of_call("Bash", Some("python3 -c \"print(1)\"\nsecond line"));
        assert_eq!(quoted.call(), "Bash(python3 -c \"print(1)\")");
        assert!(
            quoted
                .how_to_allow()
                .contains(r#""Bash(python3 -c \"print(1)\":*)""#)
        );
        // Several calls: each named once, every rule offered.
        let several = [
            unittest.clone(),
            compound.clone(),
            unittest.clone(),
            write.clone(),
            Refusal::of_call("Bash", Some("make test")),
        ];
        assert_eq!(
            calls_in_words(&several),
            "`Bash(python3 -m unittest)`, `Bash(git add a && git commit -m a)`, `Write(/p/x.txt)` and 1 more"
        );
        assert!(
            how_to_allow(&several).contains(r#"allow them in .claude/settings.json: `"permissions": {"allow": ["Bash(python3 -m unittest:*)", "Bash(git add a:*)", "Bash(git commit -m a:*)", "Write", "Bash(make test:*)"]}`"#),
            "{}",
            how_to_allow(&several)
        );
        let escape = Refusal::of_call("Bash\u{1b}[2J", Some("echo \u{1b}]0;x\u{7}"));
        assert_eq!(escape.call(), r"Bash\x1b[2J(echo \x1b]0;x\x07)");
        let long = Refusal::of_call("Bash", Some(&"x".repeat(5000)));
        assert!(long.call().chars().count() < 220);
    }

    #[test]
    fn error_lines_table() {
        let cases: &[(&str, bool)] = &[
            ("error[E0308]: mismatched types", true),
            ("Error: Cannot find module 'x'", true),
            ("TypeError: undefined is not a function", true),
            ("thread 'main' panicked at src/main.rs:3:5:", true),
            ("Traceback (most recent call last):", true),
            ("FAILED tests/test_a.py::test_x - assert 1 == 2", true),
            ("test result: FAILED. 1 passed; 2 failed", true),
            ("npm ERR! code ELIFECYCLE", true),
            ("fatal: not a git repository", true),
            ("- error: expected `;`", true),
            ("\"is_error\": false", false),
            ("{\"type\":\"tool_result\",\"is_error\":false}", false),
            ("All tests pass with no errors.", false),
            ("test result: ok. 5 passed; 0 failed", false),
            ("I improved the error handling in parser.rs.", false),
            ("Fixed the bug.", false),
            ("", false),
        ];
        for (line, want) in cases {
            assert_eq!(looks_like_error(line), *want, "{line:?}");
        }
    }

    #[test]
    fn normalisation_strips_what_varies() {
        let same = [
            (
                "error[E0308]: mismatched types at src/main.rs:12:5",
                "error[E0308]: mismatched types at src/lib.rs:99:1",
            ),
            (
                "Timeout after 3000 ms at 2026-11-22T10:00:01Z",
                "Timeout after 120 ms at 2025-01-01T00:00:00Z",
            ),
            (
                "Segfault at 0x7ffd3a2b in worker 12",
                "Segfault at 0xdeadbeef in worker 7",
            ),
            (
                "object 3f2a9c1e8b not found",
                "object 9e8d7c6b5a4 not found",
            ),
            ("Error:   spaced    out", "error: spaced out"),
        ];
        for (a, b) in same {
            assert_eq!(normalise(a), normalise(b), "{a:?} vs {b:?}");
        }
        let different = [
            (
                "error[E0308]: mismatched types",
                "error[E0599]: no method named `x`",
            ),
            ("Error: Cannot find module", "Error: permission denied"),
        ];
        for (a, b) in different {
            assert_ne!(normalise(a), normalise(b), "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn sighting_prefers_tool_errors() {
        let tool =
            vec!["Exit code 101\nerror[E0308]: mismatched types\n --> src/x.rs:1:1".to_string()];
        let s = sighting("I will fix it.", &tool).unwrap();
        assert_eq!(s.sample, "error[E0308]: mismatched types");
        let from_message = sighting("The build fails:\nerror: linker `cc` not found", &[]).unwrap();
        assert_eq!(from_message.sample, "error: linker `cc` not found");
        assert_eq!(sighting("All good.", &[]), None);
        let opaque = sighting("", &["The user doesn't want to proceed".to_string()]).unwrap();
        assert_eq!(opaque.sample, "The user doesn't want to proceed");
        let exit = sighting(
            "",
            &["Exit code 1\ncat: missing.toml: No such file or directory".to_string()],
        )
        .unwrap();
        assert_eq!(exit.sample, "cat: missing.toml: No such file or directory");
        let bare_exit = sighting("", &["Exit code 2\nsomething odd happened".to_string()]).unwrap();
        assert_eq!(bare_exit.sample, "something odd happened");
        assert_ne!(
            sighting("", &["Exit code 1\nfirst failure".into()])
                .unwrap()
                .fingerprint,
            sighting("", &["Exit code 1\nsecond failure".into()])
                .unwrap()
                .fingerprint
        );
        assert_eq!(
            sighting("", &["error: x at /a/b.rs:1".into()])
                .unwrap()
                .fingerprint,
            sighting("", &["error: x at /c/d.rs:2".into()])
                .unwrap()
                .fingerprint
        );
    }
}
