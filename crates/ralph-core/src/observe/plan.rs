//! The plan gate: a claim of completion is refused while a plan file still
//! has unchecked `- [ ]` items outside sections headed Optional, Future or
//! Nice to have.

use std::fs;
use std::path::Path;

/// Plan files looked for at the project root when none are configured.
pub const DEFAULT_PLAN_FILES: &[&str] = &[
    "IMPLEMENTATION_PLAN.md",
    "fix_plan.md",
    "@fix_plan.md",
    "TODO.md",
];
/// Largest plan file read.
pub const MAX_PLAN_BYTES: u64 = 4 * 1024 * 1024;

/// One plan file's checkboxes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanFile {
    /// The file, as configured (relative to the project root unless absolute).
    pub path: String,
    /// The text of each unchecked item outside optional sections.
    pub unchecked: Vec<String>,
    /// How many items are checked.
    pub checked: usize,
}

/// Every plan file found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanReport {
    /// The files that exist, in the configured order.
    pub files: Vec<PlanFile>,
}

impl PlanReport {
    /// True when at least one plan file exists.
    pub fn exists(&self) -> bool {
        !self.files.is_empty()
    }

    /// True when plan files exist and none has an unchecked required item.
    pub fn complete(&self) -> bool {
        self.exists() && self.files.iter().all(|f| f.unchecked.is_empty())
    }
}

fn heading(line: &str) -> Option<(usize, String)> {
    let t = line.trim_start();
    let level = t.chars().take_while(|&c| c == '#').count();
    ((1..=6).contains(&level) && t[level..].starts_with(' '))
        .then(|| (level, t[level..].trim().to_ascii_lowercase()))
}

fn is_optional(title: &str) -> bool {
    ["optional", "future", "nice to have", "nice-to-have"]
        .iter()
        .any(|w| title.contains(w))
}

/// The checkbox of a list item: `Some(true)` checked, `Some(false)` unchecked,
/// with the item's text.
fn checkbox(line: &str) -> Option<(bool, String)> {
    let t = line.trim_start();
    let rest = if let Some(r) = t.strip_prefix(['-', '*', '+']) {
        r
    } else {
        let digits = t.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        t[digits..].strip_prefix(['.', ')'])?
    };
    let rest = rest.strip_prefix(' ')?.trim_start();
    let (checked, text) = if let Some(text) = rest.strip_prefix("[ ]") {
        (false, text)
    } else if let Some(text) = rest
        .strip_prefix("[x]")
        .or_else(|| rest.strip_prefix("[X]"))
    {
        (true, text)
    } else {
        return None;
    };
    Some((checked, text.trim().to_string()))
}

/// One line of a plan as the gate reads it: the line (with its newline),
/// its checkbox if it is a list item with one outside a code fence, and
/// whether it stands in an optional section.
type PlanLine<'a> = (&'a str, Option<(bool, String)>, bool);

/// Every line of `markdown`, read as [`PlanLine`]s.
fn walk(markdown: &str) -> Vec<PlanLine<'_>> {
    let mut lines = Vec::new();
    let mut optional_level: Option<usize> = None;
    let mut in_fence = false;
    for line in markdown.split_inclusive('\n') {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            in_fence = !in_fence;
            lines.push((line, None, optional_level.is_some()));
            continue;
        }
        if in_fence {
            lines.push((line, None, optional_level.is_some()));
            continue;
        }
        if let Some((level, title)) = heading(line) {
            if optional_level.is_some_and(|l| level <= l) {
                optional_level = None;
            }
            if optional_level.is_none() && is_optional(&title) {
                optional_level = Some(level);
            }
            lines.push((line, None, optional_level.is_some()));
            continue;
        }
        lines.push((line, checkbox(line), optional_level.is_some()));
    }
    lines
}

/// The unchecked required items and the number of checked items of a plan.
pub fn parse(markdown: &str) -> (Vec<String>, usize) {
    let mut unchecked = Vec::new();
    let mut checked = 0;
    for (_, found, optional) in walk(markdown) {
        match found {
            Some((true, _)) => checked += 1,
            Some((false, text)) if !optional => unchecked.push(text),
            _ => {}
        }
    }
    (unchecked, checked)
}

/// The texts of the checked boxes of `markdown`: the items a backlog
/// drained from it records as done (an item's `after:` may name them).
pub fn checked(markdown: &str) -> Vec<String> {
    walk(markdown)
        .into_iter()
        .filter_map(|(_, found, _)| match found {
            Some((true, text)) => Some(text),
            _ => None,
        })
        .collect()
}

/// Every line of `markdown` (with its newline), and the text of its
/// checkbox when it is an unchecked required item: what a backlog drained
/// from a plan works on (see ralph-ctl's `queue::source`).
pub fn boxes(markdown: &str) -> Vec<(&str, Option<String>)> {
    walk(markdown)
        .into_iter()
        .map(|(line, found, optional)| {
            let unchecked = match found {
                Some((false, text)) if !optional => Some(text),
                _ => None,
            };
            (line, unchecked)
        })
        .collect()
}

/// Reads the plan files that exist under `root` (missing ones are skipped).
pub fn read(root: &Path, files: &[String]) -> PlanReport {
    let mut report = PlanReport::default();
    for name in files {
        let path = root.join(name);
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        // Bounded and FIFO-safe even if the file changes under the check above.
        let text = match crate::files::read_bounded(&path, MAX_PLAN_BYTES) {
            Ok(crate::files::Bounded::Bytes(b)) => String::from_utf8_lossy(&b).into_owned(),
            _ => String::new(),
        };
        let (unchecked, checked) = parse(&text);
        report.files.push(PlanFile {
            path: name.clone(),
            unchecked,
            checked,
        });
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        // (plan, unchecked items, checked count)
        let cases: Vec<(&str, Vec<&str>, usize)> = vec![
            ("- [x] parser\n- [ ] lexer\n", vec!["lexer"], 1),
            ("* [X] a\n+ [ ] b\n1. [ ] c\n2) [x] d\n", vec!["b", "c"], 2),
            (
                "# Plan\n- [x] a\n## Optional\n- [ ] polish\n## Core\n- [ ] tests\n",
                vec!["tests"],
                1,
            ),
            (
                "## Future work\n- [ ] plugins\n### Details\n- [ ] nested\n## Now\n- [x] done\n",
                vec![],
                1,
            ),
            (
                "## Nice to have\n- [ ] emoji\n# Next\n- [ ] real\n",
                vec!["real"],
                0,
            ),
            ("```\n- [ ] in a fence\n```\n- [x] ok\n", vec![], 1),
            ("- [] malformed\n-[ ] no space\n- [ ]\n", vec![""], 0),
            ("No checkboxes at all.\n", vec![], 0),
            ("  - [ ] indented item\n", vec!["indented item"], 0),
        ];
        for (plan, unchecked, checked) in cases {
            let (got, n) = parse(plan);
            assert_eq!(got, unchecked, "{plan:?}");
            assert_eq!(n, checked, "{plan:?}");
        }
    }

    #[test]
    fn read_skips_missing_files() {
        let dir = tempfile::TempDir::new().unwrap();
        fs::write(dir.path().join("TODO.md"), "- [ ] write docs\n").unwrap();
        let files: Vec<String> = DEFAULT_PLAN_FILES
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let report = read(dir.path(), &files);
        assert_eq!(report.files.len(), 1);
        assert_eq!(report.files[0].path, "TODO.md");
        assert!(!report.complete());
        assert!(!read(&dir.path().join("none"), &files).exists());
    }
}
