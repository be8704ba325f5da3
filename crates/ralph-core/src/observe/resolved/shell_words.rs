//! A command line read as the shell reads it, as far as resolving needs:
//! its simple commands, their words (quotes and escapes taken off), the
//! variable assignments before a program, and the wrappers (`env`,
//! `timeout`, `nice`, …) looked through to the program they run.

/// Splits a command line into its simple commands as `sh` does: at its
/// control operators `;`, `&`, `&&`, `|`, `||` and newlines. Inside quotes
/// (`'…'`, `"…"`) and after a backslash these are literal, and an `&` or a
/// `|` that follows `>` or `<` belongs to a redirection (`2>&1`, `<&3`,
/// `>|`), not to the command line's structure. A lone `&` runs what is
/// before it in the background and goes on with what follows: two
/// commands, as `&&` makes two.
pub fn split_command(command: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    // Whether the last character read was a `>` or `<` outside quotes: an
    // `&` or `|` right after it is part of that redirection.
    let mut redirecting = false;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('"'), '\\') => {
                current.push(c);
                current.extend(chars.next());
            }
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (Some(_), c) => current.push(c),
            (None, '\\') => {
                current.push(c);
                current.extend(chars.next());
            }
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (None, '&' | '|') if redirecting => current.push(c),
            (None, '&' | '|') if chars.peek() == Some(&c) => {
                chars.next();
                parts.push(std::mem::take(&mut current));
            }
            (None, ';' | '|' | '\n' | '&') => parts.push(std::mem::take(&mut current)),
            (None, c) => current.push(c),
        }
        redirecting = quote.is_none() && matches!(c, '>' | '<');
    }
    parts.push(current);
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The program a command line runs first, as `sh` reads it: the first word
/// of its first simple command, quotes and escapes taken off, past the
/// variable assignments before it (`A=b cmd`) and the wrappers that run
/// another program (`env`, `exec`, `timeout`, `nice`, …); `None` when it
/// names none (empty, or assignments alone).
pub fn program_of(command: &str) -> Option<String> {
    let first = split_command(command).into_iter().next()?;
    let words = words(&first);
    let (_, words) = leading_assignments(&words);
    look_through(words).into_iter().next()
}

/// Whether `command` starts with its program as a plain word (no
/// assignment, wrapper or quote before or around it): then the text up to
/// the first blank is the program, and can be replaced as text.
pub fn starts_with_program(command: &str) -> bool {
    let first = command.split_whitespace().next();
    first.is_some() && program_of(command).as_deref() == first
}

/// The words of a simple command, quotes removed (no expansion;
/// redirections dropped; a `(` or `{` grouping word skipped).
pub(super) fn words(simple: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut started = false;
    let mut quote: Option<char> = None;
    let mut chars = simple.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => {
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            (Some(_), c) => current.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    current.push(n);
                    started = true;
                }
            }
            (None, c) if c.is_whitespace() => {
                if started || !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            (None, c) => current.push(c),
        }
    }
    if started || !current.is_empty() {
        out.push(current);
    }
    // Redirections (`2>&1`, `> out`, `<in`) name no program.
    let mut kept = Vec::new();
    let mut skip_next = false;
    for w in out {
        if skip_next {
            skip_next = false;
            continue;
        }
        let bare = w.trim_start_matches(|c: char| c.is_ascii_digit());
        if bare.starts_with('>') || bare.starts_with('<') {
            skip_next = bare.trim_start_matches(['>', '<', '&']).is_empty();
            continue;
        }
        if kept.is_empty() && matches!(w.as_str(), "(" | "{" | "!") {
            continue;
        }
        kept.push(w.trim_start_matches('(').to_string());
    }
    kept
}

/// The leading `NAME=value` words and the rest.
pub(super) fn leading_assignments(words: &[String]) -> (Vec<(String, String)>, &[String]) {
    let mut assigned = Vec::new();
    let mut i = 0;
    while let Some((name, value)) = words.get(i).and_then(|w| assignment(w)) {
        assigned.push((name, value));
        i += 1;
    }
    (assigned, &words[i..])
}

fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then(|| (name.to_string(), value.to_string()))
}

/// The command a wrapper (`env`, `exec`, `command`, `time`, `nice`,
/// `nohup`, `timeout`) runs.
pub(super) fn look_through(mut words: &[String]) -> Vec<String> {
    loop {
        let Some(first) = words.first() else {
            return Vec::new();
        };
        let rest = &words[1..];
        // Options, and those of them that take a value.
        let options = |with_value: &[&str]| {
            let mut n = 0;
            while let Some(w) = rest.get(n).filter(|w| w.starts_with('-')) {
                n += 1 + usize::from(with_value.contains(&w.as_str()));
            }
            n
        };
        let skip = match first.as_str() {
            // Its options (`-u NAME`, `-C DIR` take a value) and assignments.
            "env" => {
                let mut n = 0;
                while let Some(w) = rest.get(n) {
                    if matches!(w.as_str(), "-u" | "--unset" | "-C" | "--chdir") {
                        n += 2;
                    } else if w.starts_with('-') || assignment(w).is_some() {
                        n += 1;
                    } else {
                        break;
                    }
                }
                n
            }
            "exec" | "command" | "time" | "nohup" => options(&[]),
            "nice" => options(&["-n"]),
            // and the duration
            "timeout" => options(&["-s", "-k", "--signal", "--kill-after"]) + 1,
            _ => return words.to_vec(),
        };
        words = &rest[skip.min(rest.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::{program_of, split_command, starts_with_program};

    #[test]
    fn the_program_of_a_command_line_is_its_first_word_as_sh_reads_it() {
        let table: &[(&str, Option<&str>)] = &[
            ("pytest -q", Some("pytest")),
            ("  /bin/ralph-stop-hook", Some("/bin/ralph-stop-hook")),
            // Quoted, with a blank inside; quotes inside a word.
            (r#""/my tools/hook" --plugin"#, Some("/my tools/hook")),
            ("'/my tools/ssh' -p 22", Some("/my tools/ssh")),
            (
                r#"/opt/"my tools"/plink -batch"#,
                Some("/opt/my tools/plink"),
            ),
            (r"/my\ tools/ssh", Some("/my tools/ssh")),
            // Assignments before it, and wrappers around it.
            ("A=b PYTHONPATH=src python3 -m pytest", Some("python3")),
            ("env -i A=b plink -batch", Some("plink")),
            ("env -u DISPLAY -C /tmp plink", Some("plink")),
            ("timeout -s KILL 60 python -m pytest", Some("python")),
            ("nice -n 5 make test", Some("make")),
            // The first simple command's program.
            ("cd src && cargo test", Some("cd")),
            ("make test 2>&1 | tee log", Some("make")),
            // None named.
            ("", None),
            ("   ", None),
            ("A=b", None),
            ("; ;", None),
        ];
        for (line, want) in table {
            assert_eq!(program_of(line).as_deref(), *want, "{line:?}");
        }
    }

    #[test]
    fn a_program_starts_a_command_line_only_as_a_plain_first_word() {
        assert!(starts_with_program("pytest -q"));
        assert!(starts_with_program(".venv/bin/pytest"));
        assert!(!starts_with_program("A=b pytest"));
        assert!(!starts_with_program("timeout 60 pytest"));
        assert!(!starts_with_program("'pytest' -q"));
        assert!(!starts_with_program(""));
    }

    /// Each line as `sh` (dash) reads it: its simple commands.
    #[test]
    fn a_command_line_splits_at_the_control_operators_sh_sees() {
        let table: &[(&str, &[&str])] = &[
            (
                "a && b || c; d | e\nf & g",
                &["a", "b", "c", "d", "e", "f", "g"],
            ),
            // A lone `&` ends a command as `;` does; `&&` likewise.
            ("a & b", &["a", "b"]),
            ("a &", &["a"]),
            ("a&&b", &["a", "b"]),
            // `sh` has no `&>`: `a` runs in the background, then a
            // redirection alone.
            ("a &> out", &["a", "> out"]),
            // An `&` or `|` after `>` or `<` belongs to a redirection.
            ("pytest 2>&1 | tee log", &["pytest 2>&1", "tee log"]),
            ("make test >&2 && echo ok", &["make test >&2", "echo ok"]),
            ("read x <&3", &["read x <&3"]),
            ("a >| out", &["a >| out"]),
            // Quoted or escaped, they are literal.
            (
                r#"echo 'a & b' && echo "c && d""#,
                &["echo 'a & b'", r#"echo "c && d""#],
            ),
            (r"echo a\&b; echo c\|d", &[r"echo a\&b", r"echo c\|d"]),
            (r#"echo "a \" & b" & c"#, &[r#"echo "a \" & b""#, "c"]),
            (r"echo '\' & b", &[r"echo '\'", "b"]),
            ("", &[]),
            (" ; & ", &[]),
        ];
        for (line, commands) in table {
            assert_eq!(split_command(line), *commands, "{line:?}");
        }
    }
}
