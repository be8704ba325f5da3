//! Keeps ralph's files out of the project's own formatters and linters.
//!
//! A project whose check (or a `package.json` script) runs a tool that walks
//! the whole tree (`prettier --check .`, `remark . --frail`) would, right
//! after `init`, flag or rewrite ralph's files: its prompt and guardrails,
//! its config and the settings `init` writes, and the loop's state (which,
//! inside the walls, the tool cannot even write). Each such tool reads an
//! ignore file of its own (not the nested `.gitignore` files ralph keeps):
//! `init` adds ralph's paths there, creating the file when the tool is used
//! and it is missing, and adds to one that is there whether or not the tool
//! is seen running. Once the lines are there, a second `init` adds nothing.

use std::path::Path;

use ralph_core::files::{self, Bounded};
use ralph_core::judge::config::{Config, ConfigError};

use super::{Change, VerifyPlan};

/// A tool that walks the tree and reads an ignore file of its own, in the
/// `.gitignore` syntax.
struct Tool {
    /// Its program, as a check names it.
    program: &'static str,
    /// Its ignore file, at the project's top.
    ignore_file: &'static str,
    /// Files whose presence says the tool reads `ignore_file` (an empty
    /// list: it always does). `.eslintignore` is read by the legacy
    /// configuration only: a flat one warns about it.
    only_with: &'static [&'static str],
}

/// The tools whose ignore files get ralph's paths.
const TOOLS: &[Tool] = &[
    Tool {
        program: "prettier",
        ignore_file: ".prettierignore",
        only_with: &[],
    },
    Tool {
        program: "remark",
        ignore_file: ".remarkignore",
        only_with: &[],
    },
    Tool {
        program: "markdownlint",
        ignore_file: ".markdownlintignore",
        only_with: &[],
    },
    Tool {
        program: "eslint",
        ignore_file: ".eslintignore",
        only_with: &[
            ".eslintrc",
            ".eslintrc.js",
            ".eslintrc.cjs",
            ".eslintrc.json",
            ".eslintrc.yml",
            ".eslintrc.yaml",
        ],
    },
];

/// The comment above the lines `init` adds.
const HEADER: &str = "# ralph's own files (ralph-ctl init): not the project's to format or lint";

/// ralph's paths, from the project's top: its folder (prompt, guardrails,
/// config, launchers, formulas), the loop's state, the worktrees its loops
/// run in, and the settings files `init` writes the Stop hook into.
pub(super) const RALPH_PATHS: &[&str] = &[
    "/.claude/ralph/",
    "/.claude/context/",
    "/.claude/worktrees/",
    "/.claude/settings.json",
    "/.claude/settings.local.json",
];

/// The most of an ignore file read: a larger one is left alone.
const MAX_IGNORE_FILE: u64 = 1 << 20;

/// The commands the project's check runs: the one `init` pins, else the
/// ones configured.
pub(super) fn check_commands(
    plan: &VerifyPlan,
    config: &Result<Config, ConfigError>,
) -> Vec<String> {
    match (plan, config) {
        (VerifyPlan::Write(command, _), _) => vec![command.clone()],
        (_, Ok(config)) => config
            .completion
            .verify
            .iter()
            .map(|v| v.command.clone())
            .collect(),
        _ => Vec::new(),
    }
}

/// Adds ralph's paths to the ignore file of each tool the project's check
/// runs (its `commands`) or a script of `package.json` runs (`npm test`
/// may run any), and to each such file already there; says, one
/// line a file, which file got which lines and why. A file that cannot be
/// read or written is said and left alone: `init` goes on.
pub(super) fn keep_ralph_out(root: &Path, commands: &[String]) {
    let scripts = package_scripts(root);
    // `npm test` and the like run package.json's scripts.
    let check_runs_scripts = commands
        .iter()
        .any(|c| ["npm", "pnpm", "yarn", "bun"].iter().any(|p| runs(c, p)));
    for tool in TOOLS {
        let path = root.join(tool.ignore_file);
        let exists = path.symlink_metadata().is_ok();
        let reads_it =
            tool.only_with.is_empty() || tool.only_with.iter().any(|f| root.join(f).exists());
        let in_check = reads_it && commands.iter().any(|c| runs(c, tool.program));
        let in_script = reads_it && scripts.iter().any(|c| runs(c, tool.program));
        let why = match (in_check, in_script, exists) {
            (true, _, _) => format!("{} runs in the project's check", tool.program),
            (false, true, _) if check_runs_scripts => format!(
                "{} runs in the project's check (a script of package.json)",
                tool.program
            ),
            (false, true, _) => format!("a script of package.json runs {}", tool.program),
            (false, false, true) => format!("the project has {}", tool.ignore_file),
            (false, false, false) => continue,
        };
        match add_lines(&path) {
            Ok((Change::Unchanged | Change::Kept, _)) => {}
            Ok((change, added)) => {
                let word = if matches!(change, Change::Created) {
                    "created  "
                } else {
                    "updated  "
                };
                crate::output::say!(
                    "  {word} {} (+ {}): {why} and walks the tree; ralph's files are not the project's to format",
                    tool.ignore_file,
                    added.join(" ")
                );
            }
            Err(e) => crate::output::say!(
                "  skipped   {}: {e}; {why}: add {} to it yourself, or it may flag ralph's files",
                tool.ignore_file,
                RALPH_PATHS.join(" ")
            ),
        }
    }
}

/// The commands of `package.json`'s scripts (none when it is missing or
/// not an object with scripts): `npm test` may run any of them.
fn package_scripts(root: &Path) -> Vec<String> {
    let path = root.join("package.json");
    let Ok(Bounded::Bytes(bytes)) = files::read_bounded(&path, MAX_IGNORE_FILE) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Vec::new();
    };
    value
        .get("scripts")
        .and_then(serde_json::Value::as_object)
        .map(|scripts| {
            scripts
                .values()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether `command` runs `program`: a word of it (split at blanks and the
/// shell's `;&|()`, quotes taken off) is the program, by itself or as a
/// path's last part (`./node_modules/.bin/prettier`).
fn runs(command: &str, program: &str) -> bool {
    command
        .split(|c: char| c.is_whitespace() || ";&|()".contains(c))
        .map(|word| word.trim_matches(['"', '\'', '`']))
        .any(|word| word.rsplit('/').next() == Some(program))
}

/// The same ignore line, whatever its anchoring slash or trailing slash.
fn same_line(a: &str, b: &str) -> bool {
    let bare = |s: &str| {
        s.trim()
            .trim_start_matches('/')
            .trim_end_matches('/')
            .to_string()
    };
    bare(a) == bare(b)
}

/// `existing` with ralph's paths it lacks added below a comment, and
/// those lines; `None` when it has them all.
fn with_ralph_paths(existing: &str) -> Option<(String, Vec<&'static str>)> {
    let missing: Vec<&'static str> = RALPH_PATHS
        .iter()
        .copied()
        .filter(|path| !existing.lines().any(|line| same_line(line, path)))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut text = existing.to_string();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if !text.is_empty() && !text.ends_with("\n\n") {
        text.push('\n');
    }
    if !existing.lines().any(|line| line.trim() == HEADER) {
        text.push_str(HEADER);
        text.push('\n');
    }
    for path in &missing {
        text.push_str(path);
        text.push('\n');
    }
    Some((text, missing))
}

/// Adds ralph's paths to the ignore file at `path` (created when missing):
/// what changed and the lines added. Never through a link.
fn add_lines(path: &Path) -> Result<(Change, Vec<&'static str>), String> {
    super::inspect(path, false).map_err(|e| e.to_string())?;
    let existing = match files::read_bounded(path, MAX_IGNORE_FILE) {
        Ok(Bounded::Bytes(bytes)) => {
            String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())?
        }
        Ok(Bounded::Missing) => String::new(),
        Ok(Bounded::TooLarge) => return Err(format!("it is larger than {MAX_IGNORE_FILE} bytes")),
        Err(e) => return Err(format!("cannot read it ({e})")),
    };
    let Some((text, added)) = with_ralph_paths(&existing) else {
        return Ok((Change::Unchanged, Vec::new()));
    };
    let change = super::install(path, &text, false, 0o644).map_err(|e| e.to_string())?;
    Ok((change, added))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_runs_as_a_word_of_the_command_not_as_part_of_one() {
        assert!(runs("prettier --check .", "prettier"));
        assert!(runs("npx prettier --check . && mocha", "prettier"));
        assert!(runs("./node_modules/.bin/prettier -c .", "prettier"));
        assert!(runs("(remark . --frail --output)", "remark"));
        assert!(runs("\"eslint\" .", "eslint"));
        assert!(!runs("eslint-plugin-prettier-check", "prettier"));
        assert!(!runs("markdownlint-cli2 '**/*.md'", "markdownlint"));
        assert!(!runs("cargo test", "prettier"));
    }

    #[test]
    fn the_lines_are_added_once_below_what_is_there() {
        let (text, added) = with_ralph_paths("dist\n").unwrap();
        assert_eq!(added, RALPH_PATHS);
        assert!(text.starts_with("dist\n\n# ralph's own files"), "{text}");
        for path in RALPH_PATHS {
            assert!(text.contains(&format!("\n{path}\n")), "{text}");
        }
        assert_eq!(with_ralph_paths(&text), None);
    }

    #[test]
    fn a_line_the_person_wrote_otherwise_anchored_is_not_added_again() {
        let (text, added) = with_ralph_paths(".claude/ralph\n/.claude/context/").unwrap();
        assert!(!added.contains(&"/.claude/ralph/"), "{added:?}");
        assert!(!added.contains(&"/.claude/context/"), "{added:?}");
        assert!(
            text.starts_with(".claude/ralph\n/.claude/context/\n\n"),
            "{text}"
        );
    }

    #[test]
    fn a_new_file_gets_the_comment_and_the_lines_only() {
        let (text, _) = with_ralph_paths("").unwrap();
        assert!(text.starts_with(HEADER), "{text}");
        assert_eq!(text.lines().count(), 1 + RALPH_PATHS.len());
    }

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, body) in files {
            std::fs::write(dir.path().join(path), body).unwrap();
        }
        dir
    }

    #[test]
    fn the_ignore_file_of_a_tool_the_check_runs_is_made_and_others_are_left_alone() {
        let dir = project(&[(
            "package.json",
            r#"{"scripts": {"test": "npm run fmt && mocha", "fmt": "prettier --check ."}}"#,
        )]);
        keep_ralph_out(dir.path(), &["npm test".to_string()]);
        let made = std::fs::read_to_string(dir.path().join(".prettierignore")).unwrap();
        assert!(made.contains("/.claude/ralph/\n"), "{made}");
        for other in [".remarkignore", ".markdownlintignore", ".eslintignore"] {
            assert!(!dir.path().join(other).exists(), "{other}");
        }
        // A second init adds nothing.
        keep_ralph_out(dir.path(), &["npm test".to_string()]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join(".prettierignore")).unwrap(),
            made
        );
    }

    #[test]
    fn an_ignore_file_there_gets_the_lines_and_a_flat_eslint_gets_no_legacy_file() {
        let dir = project(&[
            (".remarkignore", "node_modules"),
            ("eslint.config.js", "export default [];\n"),
        ]);
        keep_ralph_out(dir.path(), &["eslint . && cargo test".to_string()]);
        let remark = std::fs::read_to_string(dir.path().join(".remarkignore")).unwrap();
        assert!(remark.starts_with("node_modules\n\n"), "{remark}");
        assert!(remark.contains("/.claude/context/\n"), "{remark}");
        assert!(!dir.path().join(".eslintignore").exists());
        assert!(!dir.path().join(".prettierignore").exists());

        std::fs::write(dir.path().join(".eslintrc.json"), "{}").unwrap();
        keep_ralph_out(dir.path(), &["eslint . && cargo test".to_string()]);
        let eslint = std::fs::read_to_string(dir.path().join(".eslintignore")).unwrap();
        assert!(eslint.contains("/.claude/ralph/\n"), "{eslint}");
    }
}
