//! What the clients write when they refuse a tool call for lack of
//! permission, and the refused calls in words: read from the transcript
//! and the result object (observe), named in the breaker's notices and the
//! permission gate (judge). Also which of the client's tools edit a file.

/// Longest sample of an error kept for messages, in characters.
pub const SAMPLE_CHARS: usize = 120;

/// The file tools that edit a file, with the input field naming it.
pub const EDIT_TOOLS: &[(&str, &str)] = &[
    ("Write", "file_path"),
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// True for a file tool that edits a file (`Write`, `Edit`, …).
pub fn is_edit_tool(name: &str) -> bool {
    EDIT_TOOLS.iter().any(|(tool, _)| *tool == name)
}

/// True for the status line Claude Code puts before a failed command's output.
pub fn is_exit_code_line(line: &str) -> bool {
    line.to_ascii_lowercase().starts_with("exit code")
}

/// What the clients write in a tool result they refused for lack of
/// permission: the same texts on 2.0.77 and 2.1.330 in `-p` (json and
/// stream-json), in `acceptEdits` and in the default mode. Each is tested
/// with the real text (`judge::errors`'s tests). An `EACCES` from the system ("Permission
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
    /// with control characters (a terminal escape) made visible
    /// ([`crate::text::printable`]).
    pub fn of_call(tool: &str, target: Option<&str>) -> Refusal {
        let clean = |text: &str| {
            let line = text.lines().next().unwrap_or_default().trim();
            let line = crate::text::printable(line).replace('\t', " ");
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
    /// another tool; none when the tool is unknown. Only rules a person
    /// could paste: a part that is not one whole simple command (shell
    /// syntax such as `if [ … ] && [ !`, a quote left open, a command cut
    /// short) gives none.
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
            let mut parts: Vec<String> = list
                .trim_end_matches('…')
                .split(", ")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            // The text was cut: its last part may be too.
            if list.ends_with('…') {
                parts.pop();
            }
            Some(parts)
        });
        let commands = match (parts, &self.target) {
            (Some(parts), _) if !parts.is_empty() => parts,
            (_, Some(command)) => vec![command.clone()],
            _ => return vec!["Bash".to_string()],
        };
        commands
            .iter()
            .filter(|command| is_simple_command(command))
            .map(|command| format!("Bash({command}:*)"))
            .collect()
    }

    /// What a person can do so that the call goes through, outside the
    /// client's sandbox.
    pub fn how_to_allow(&self) -> String {
        how_to_allow(std::slice::from_ref(self))
    }
}

/// Words that start shell syntax rather than a command.
const SHELL_KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "for", "while", "until", "do", "done", "case", "esac",
    "function", "select", "[", "[[", "!", "{", "}", "(", ")", "time",
];

/// Whether `command` is one whole simple command (a program and its
/// words), which a `Bash(<command>:*)` rule can name: no shell keyword at
/// its start, no operator, redirection, substitution or line break outside
/// quotes, every quote closed, not cut short (`…`).
pub fn is_simple_command(command: &str) -> bool {
    let command = command.trim();
    let Some(first) = command.split_whitespace().next() else {
        return false;
    };
    if SHELL_KEYWORDS.contains(&first) || command.ends_with('…') || first.contains('=') {
        return false;
    }
    let mut quote: Option<char> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                chars.next();
            }
            (Some('"'), '$' | '`') => return false,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ';' | '&' | '|' | '<' | '>' | '`' | '$' | '(' | ')' | '\n' | '{' | '}') => {
                return false;
            }
            (None, _) => {}
        }
    }
    quote.is_none()
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

/// What a person can do so that the refused calls go through, in a run
/// outside the client's sandbox: the sandbox, `permissions.allow` rules
/// for each call, a permission mode.
pub fn how_to_allow(refusals: &[Refusal]) -> String {
    how_to_allow_in(refusals, false)
}

/// What a person can do so that the refused calls go through, true to the
/// run's mode: outside the client's sandbox (`sandboxed` false), the
/// sandbox first; inside it, which already runs commands without asking,
/// only what it still asks approval for can be allowed (the rules a person
/// could paste, a permission mode), and the sandbox is never proposed.
pub fn how_to_allow_in(refusals: &[Refusal], sandboxed: bool) -> String {
    let mut ways = Vec::new();
    if !sandboxed {
        ways.push(
            "run with the sandbox (`--sandbox`, needs bubblewrap and socat: `apt-get install bubblewrap socat`)"
                .to_string(),
        );
    }
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
    if refusals
        .iter()
        .any(|r| r.tool.as_deref().is_some_and(is_edit_tool))
    {
        ways.push("pass `-- --permission-mode acceptEdits` (edits inside the project)".into());
    }
    ways.push("pass `-- --permission-mode bypassPermissions`".into());
    let ways = ways.join(", or ");
    if sandboxed {
        format!(
            "the client's sandbox is on and still asked approval for it (a command the sandbox does \
         not run on its own); {ways}"
        )
    } else {
        ways
    }
}

/// `text` cut to `chars` characters, with `…` when it was longer.
pub fn sample_of(text: &str, chars: usize) -> String {
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
            text: Some(sample_of(
                r.lines().next().unwrap_or_default().trim(),
                SAMPLE_CHARS,
            )),
            ..Refusal::default()
        })
}
