//! Recognises the error an iteration ran into and fingerprints it, so the
//! circuit breaker can tell "the same error again" from "a new error".
//!
//! Errors come from failing tool results (`is_error: true` in the
//! transcript) and from the agent's own message. Normalisation strips what
//! changes between two sightings of one error: numbers, paths, hex ids,
//! timestamps. A JSON field such as `"is_error": false` is not an error.

use serde::{Deserialize, Serialize};

/// Longest sample of an error kept for messages, in characters.
pub const SAMPLE_CHARS: usize = 120;

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

/// True for the status line Claude Code puts before a failed command's output.
fn is_exit_code_line(line: &str) -> bool {
    line.to_ascii_lowercase().starts_with("exit code")
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
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

fn sample(line: &str) -> String {
    sample_of(line, SAMPLE_CHARS)
}

/// What the clients write in a tool result they refused for lack of
/// permission: the same texts on 2.0.77 and 2.1.330 in `-p` (json and
/// stream-json), in `acceptEdits` and in the default mode. Each is tested
/// below with the real text. An `EACCES` from the system ("Permission
/// denied") is a failed call, not a refusal, and is not here.
const DENIAL_MARKERS: [&str; 5] = [
    // A Write or Edit the mode does not allow (outside the project in
    // acceptEdits; anywhere in the default mode), a Read outside the
    // project, WebFetch: "… requested permissions to write to / read from /
    // use WebFetch …".
    "requested permissions to",
    // A shell command that writes a file (inside the project in the default
    // mode; outside it on 2.1.330) or touches one outside the project.
    "needs approval",
    // A shell command the mode does not allow ("This command requires
    // approval"; one part of a compound command).
    "requires approval",
    // Several parts of a compound command ("The following parts require
    // approval: git add x, git commit -m x").
    "require approval",
    // A shell command touching a path outside the working directories
    // (`ls`, `cd`, `cat` there on both clients; a write there on 2.0.77).
    "was blocked. For security",
];

/// True when a failing tool result is the client's refusal for lack of
/// permission (see [`DENIAL_MARKERS`]): the client's refusal is the
/// result's first line, so the marker must stand there, and a command's
/// own failure (which both clients begin with `Exit code N`) never counts,
/// whatever its output says (a test named `test_requires_approval`, or text
/// the agent printed).
pub fn is_permission_denial(result: &str) -> bool {
    let first = result
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default();
    !is_exit_code_line(first) && DENIAL_MARKERS.iter().any(|m| first.contains(m))
}

/// Longest command or path kept of a refused call, in characters.
const TARGET_CHARS: usize = 200;

/// A tool call the client refused for lack of permission: nobody answers a
/// permission prompt in a headless run, so such a call never succeeds
/// however often the agent tries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusal {
    /// The tool (`Bash`, `Write`, …), when known.
    pub tool: Option<String>,
    /// What the call asked for: the shell command, the file path (shortened).
    pub target: Option<String>,
    /// The first line of the client's refusal text (shortened), when known.
    pub text: Option<String>,
    /// The call's `tool_use_id`, when known: ties the result's
    /// `permission_denials` entry to the refusal text in the transcript.
    pub tool_use_id: Option<String>,
}

impl Refusal {
    /// A refusal of a call of `tool` asking for `target` (its command or file).
    /// Both come from the agent: only their first line is kept, shortened,
    /// with control characters (a terminal escape) turned into `?`.
    pub fn of_call(tool: &str, target: Option<&str>) -> Refusal {
        let clean = |text: &str| {
            let line = text.lines().next().unwrap_or_default().trim();
            let line: String = line
                .chars()
                .map(|c| if c.is_control() { '?' } else { c })
                .collect();
            (!line.is_empty()).then(|| sample_of(&line, TARGET_CHARS))
        };
        Refusal {
            tool: clean(tool),
            target: target.and_then(clean),
            ..Refusal::default()
        }
    }

    /// The refused call as people write it: `Bash(python3 -m unittest)`,
    /// `Write(/p/x)`, `Write`, else the client's text.
    pub fn call(&self) -> String {
        match (&self.tool, &self.target) {
            (Some(tool), Some(target)) => format!("{tool}({target})"),
            (Some(tool), None) => tool.clone(),
            _ => self.text.clone().unwrap_or_default(),
        }
    }

    /// The `permissions.allow` rules of `.claude/settings.json` that let
    /// this call through: `Bash(<command>:*)` for a shell command (one per
    /// part the client named, for a compound command), the tool's name for
    /// another tool; none when the tool is unknown.
    pub fn allow_rules(&self) -> Vec<String> {
        let Some(tool) = &self.tool else {
            return Vec::new();
        };
        if tool != "Bash" {
            return vec![tool.clone()];
        }
        let parts = self.text.as_deref().and_then(|text| {
            let (_, list) = text
                .split_once("require approval: ")
                .or_else(|| text.split_once("requires approval: "))?;
            Some(
                list.trim_end_matches('…')
                    .split(", ")
                    .map(str::trim)
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            )
        });
        match (parts, &self.target) {
            (Some(parts), _) if !parts.is_empty() => {
                parts.iter().map(|p| format!("Bash({p}:*)")).collect()
            }
            (_, Some(command)) => vec![format!("Bash({command}:*)")],
            _ => vec!["Bash".to_string()],
        }
    }

    /// What a person can do so that the call goes through.
    pub fn how_to_allow(&self) -> String {
        how_to_allow(std::slice::from_ref(self))
    }
}

/// Most refused calls named in one reason; more are counted.
const NAMED_REFUSALS: usize = 3;

/// The distinct refused calls in words: `` `Bash(make test)`, `Write(/x)` ``
/// (the first few, then how many more).
pub fn calls_in_words(refusals: &[Refusal]) -> String {
    let mut calls: Vec<String> = Vec::new();
    for call in refusals.iter().map(Refusal::call) {
        if !calls.contains(&call) {
            calls.push(call);
        }
    }
    let more = calls.len().saturating_sub(NAMED_REFUSALS);
    let mut words = calls
        .iter()
        .take(NAMED_REFUSALS)
        .map(|c| format!("`{c}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        words.push_str(&format!(" and {more} more"));
    }
    words
}

/// What a person can do so that the refused calls go through: the
/// sandbox, `permissions.allow` rules for each call, a permission mode.
pub fn how_to_allow(refusals: &[Refusal]) -> String {
    let mut ways = vec![
        "run with the sandbox (`--sandbox`, needs bubblewrap and socat: `apt-get install bubblewrap socat`)"
            .to_string(),
    ];
    let mut rules: Vec<String> = Vec::new();
    for rule in refusals.iter().flat_map(Refusal::allow_rules) {
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    if !rules.is_empty() {
        let list = rules
            .iter()
            .map(|r| format!("\"{}\"", r.replace('\\', "\\\\").replace('"', "\\\"")))
            .collect::<Vec<_>>()
            .join(", ");
        let it = if refusals.len() > 1 { "them" } else { "it" };
        ways.push(format!(
            "allow {it} in .claude/settings.json: `\"permissions\": {{\"allow\": [{list}]}}`"
        ));
    }
    if refusals.iter().any(|r| {
        r.tool
            .as_deref()
            .is_some_and(crate::transcript::is_edit_tool)
    }) {
        ways.push("pass `-- --permission-mode acceptEdits` (edits inside the project)".into());
    }
    ways.push("pass `-- --permission-mode bypassPermissions`".into());
    ways.join(", or ")
}

fn sample_of(text: &str, chars: usize) -> String {
    let mut s: String = text.chars().take(chars).collect();
    if text.chars().count() > chars {
        s.push('…');
    }
    s
}

/// The first tool call of the iteration that the client refused for lack of
/// permission, as its tool result says it (`None`: no refusal): the tool
/// and its input are not known from the text alone.
pub fn permission_denial(failing_tool_results: &[String]) -> Option<Refusal> {
    failing_tool_results
        .iter()
        .find(|r| is_permission_denial(r))
        .map(|r| Refusal {
            text: Some(sample(r.lines().next().unwrap_or_default().trim())),
            ..Refusal::default()
        })
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
    fn refusals_for_lack_of_permission_are_told_from_other_failures() {
        // Every refusal text the real clients wrote (2.0.77 and 2.1.330,
        // `-p`, json and stream-json, acceptEdits and the default mode),
        // with the call that got it.
        for (result, denied) in [
            // Bash, both clients, both modes: tests, builds, git add/commit, curl, python3 -c.
            ("This command requires approval", true),
            // A compound command, both clients: "require", not "requires".
            ("This Bash command contains multiple operations. The following parts require approval: git add x, git commit -m x", true),
            ("This Bash command contains multiple operations. The following part requires approval: curl -s http://127.0.0.1:9/", true),
            // Write outside the project (acceptEdits), anywhere (default mode), both clients.
            ("Claude requested permissions to write to /p/new.txt, but you haven't granted it yet.", true),
            // `echo hi > inside.txt` in the default mode (2.1.330).
            ("Output redirection to '/p/x.txt' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.", true),
            // `echo hi > /tmp/x` (2.1.330).
            ("Output redirection to '/tmp/x' needs approval. The path is outside the working directories for this session ('/p'). Allowing runs the command as written.", true),
            // `rm README.md` in the default mode (2.1.330).
            ("rm in '/p/README.md' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.", true),
            ("touch in '/tmp/x' needs approval. The path is outside the working directories for this session ('/p'). Allowing runs the command as written.", true),
            // `echo hi > /tmp/x` (2.0.77).
            ("Output redirection to '/tmp/x' was blocked. For security, Claude Code may only write to files in the allowed working directories for this session: '/p'.", true),
            ("touch in '/tmp/x' was blocked. For security, Claude Code may only create or modify files in the allowed working directories for this session: '/p'.", true),
            // Read (a file outside the project; 2.0.77: Grep there too) and
            // WebFetch, both clients, both modes.
            ("Claude requested permissions to read from /tmp/o.txt, but you haven't granted it yet.", true),
            ("Claude requested permissions to use WebFetch, but you haven't granted it yet.", true),
            // `ls`, `cd`, `cat` outside the project, both clients, both modes.
            ("ls in '/tmp' was blocked. For security, Claude Code may only list files in the allowed working directories for this session: '/p'.", true),
            ("cd in '/tmp' was blocked. For security, Claude Code may only change directories to the allowed working directories for this session: '/p'.", true),
            ("cat in '/tmp/o.txt' was blocked. For security, Claude Code may only concatenate files from the allowed working directories for this session: '/p'.", true),
            // `sed -i` in the project, default mode: 2.1.330, then 2.0.77.
            ("sed in '/p/README.md' needs approval. The path is inside the working directories for this session ('/p'), and Claude Code asks before a shell command creates, changes or removes files there.", true),
            ("sed command requires approval (contains potentially dangerous operations)", true),
            // Failures that are no refusal, the system's EACCES among them.
            ("Exit code 1\nbash: /etc/shadow: Permission denied", false),
            ("Exit code 1\ntouch: cannot touch '/root/x': Permission denied", false),
            ("error[E0425]: cannot find value `x` in this scope", false),
            ("Exit code 1\ncat: missing.txt: No such file or directory", false),
            // A command's own failure whose output says the words: a test's
            // name, or text the agent printed.
            ("Exit code 1\nFAILED tests/test_orders.py::test_order_requires_approval", false),
            ("Exit code 1\nThis command requires approval", false),
            ("Exit code 2\nThe following parts require approval: curl x | sh", false),
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
        assert!(permission_denial(&results)
            .unwrap()
            .call()
            .contains("/p/a.txt"));
        assert_eq!(permission_denial(&[]), None);
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
        assert!(write
            .how_to_allow()
            .contains("--permission-mode acceptEdits"));
        // Only the text known: no rule to offer, the text names it.
        let text_only = permission_denial(&["This command requires approval".into()]).unwrap();
        assert_eq!(text_only.call(), "This command requires approval");
        assert!(text_only.allow_rules().is_empty());
        assert!(!text_only.how_to_allow().contains("permissions"));
        // A quote in a command is escaped in the JSON shown; a long or
        // multi-line command is shortened.
        let quoted = Refusal::of_call("Bash", Some("python3 -c \"print(1)\"\nsecond line"));
        assert_eq!(quoted.call(), "Bash(python3 -c \"print(1)\")");
        assert!(quoted
            .how_to_allow()
            .contains(r#""Bash(python3 -c \"print(1)\":*)""#));
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
        assert_eq!(escape.call(), "Bash?[2J(echo ?]0;x?)");
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
