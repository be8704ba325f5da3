//! The docs that describe the code, held to the tree: a module added,
//! moved or removed without its row in docs/internals.md fails here, as does
//! a row naming a module that is gone, a glossary entry whose place in the
//! code is gone, or a mode of `ralph-ctl run` missing from the README's
//! modes table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's top folder.
fn top() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The part of `doc` (the file `file`) from its heading `heading` to the
/// next `## ` heading, the heading left out; a missing heading names both.
fn section<'a>(doc: &'a str, file: &str, heading: &str) -> &'a str {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{file} has no {heading:?}"));
    let section = &doc[start + heading.len()..];
    &section[..section.find("\n## ").unwrap_or(section.len())]
}

/// Fails, `what` then each line found, unless `found` is empty.
fn assert_none<S: AsRef<str>>(found: &[S], what: &str) {
    let lines: Vec<&str> = found.iter().map(AsRef::as_ref).collect();
    assert!(lines.is_empty(), "{what}:\n{}", lines.join("\n"));
}

/// Every module file of a crate's `src/`, as its path there without `.rs`
/// (`driver/launch`), but the crate roots, unit-test files, and files that
/// only declare and re-export modules.
fn module_files(src: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "tests" {
                    folders.push(path);
                }
                continue;
            }
            let Some(stem) = name.strip_suffix(".rs") else {
                continue;
            };
            if stem == "tests" || only_declares(&read(&path)) || test_only(&path) {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let relative = relative.to_string_lossy().replace('\\', "/");
            found.insert(
                relative
                    .strip_suffix("/mod")
                    .unwrap_or(&relative)
                    .to_string(),
            );
        }
    }
    found
}

/// Whether the module a file holds is compiled for the tests alone: its
/// parent declares it under `#[cfg(test)]` (or hides it as test support).
fn test_only(path: &Path) -> bool {
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let folder = path.parent().unwrap();
    let parents = [
        folder.with_extension("rs"),
        folder.join("mod.rs"),
        folder.join("lib.rs"),
    ];
    parents.iter().filter(|p| p.is_file()).any(|parent| {
        let text = read(parent);
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        lines.windows(2).any(|pair| {
            matches!(pair[0], "#[cfg(test)]" | "#[doc(hidden)]")
                && pair[1].ends_with(&format!("mod {stem};"))
        })
    })
}

/// Whether a file holds nothing but module declarations, imports, attributes
/// and comments: a folder's glue, described by its modules' rows.
fn only_declares(text: &str) -> bool {
    text.lines().map(str::trim).all(|line| {
        line.is_empty()
            || line.starts_with("//")
            || line.starts_with("#[")
            || line.starts_with("#![")
            || [
                "mod ",
                "pub mod ",
                "pub(crate) mod ",
                "use ",
                "pub use ",
                "pub(crate) use ",
            ]
            .iter()
            .any(|p| line.starts_with(p))
    })
}

/// The rows of the module table under `heading` in internals.md: each row's
/// names (the backticked words of its first cell) and its whole text.
fn table_rows(doc: &str, heading: &str) -> Vec<(Vec<String>, String)> {
    section(doc, "docs/internals.md", heading)
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|row| {
            let first = row[1..].split(" | ").next().unwrap_or_default();
            let names = first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect();
            (names, row.to_string())
        })
        .collect()
}

/// Whether a table name stands for the module file `module` (`driver/launch`):
/// its path from `src/` or the end of it (`decision` for `judge/decision`,
/// `own_git/record`), `/` or Rust's `::` between the names.
fn names(name: &str, module: &str) -> bool {
    let name = name.trim_end_matches(".rs").replace("::", "/");
    let name = name.strip_suffix("/mod").unwrap_or(&name);
    module == name || module.ends_with(&format!("/{name}"))
}

/// Checks one crate's table against its tree; returns what is wrong.
fn check_table(doc: &str, heading: &str, src: &Path) -> Vec<String> {
    let modules = module_files(src);
    let rows = table_rows(doc, heading);
    let mut wrong = Vec::new();
    for module in &modules {
        let named = rows
            .iter()
            .any(|(names_, _)| names_.iter().any(|n| names(n, module)));
        // A file of a folder module may be described in its folder's row,
        // by its path from that folder (`progress/git.rs`).
        let parts: Vec<&str> = module.split('/').collect();
        let described = parts.len() >= 2 && {
            let tail = format!("{}.rs", parts[parts.len() - 2..].join("/"));
            rows.iter().any(|(_, row)| row.contains(&tail))
        };
        if !named && !described {
            wrong.push(format!("{heading}: no row for `{module}.rs`"));
        }
    }
    for (row_names, _) in &rows {
        for name in row_names {
            // A folder module's row (its glue declares the files below it).
            let folder = src.join(name.trim_end_matches(".rs").replace("::", "/"));
            if !modules.iter().any(|m| names(name, m)) && !folder.is_dir() {
                wrong.push(format!(
                    "{heading}: the row `{name}` names no module of {}",
                    src.display()
                ));
            }
        }
    }
    wrong
}

#[test]
fn internals_has_a_row_for_every_module_and_none_for_a_module_that_is_gone() {
    let doc = read(&top().join("docs/internals.md"));
    let mut wrong = check_table(
        &doc,
        "## ralph-core modules",
        &top().join("crates/ralph-core/src"),
    );
    wrong.extend(check_table(
        &doc,
        "## ralph-ctl modules",
        &top().join("crates/ralph-ctl/src"),
    ));
    assert_none(&wrong, "docs/internals.md is behind the code");
}

#[test]
fn the_glossary_points_at_places_that_exist() {
    // Each entry's "where" cell names files (`driver/launch.rs`): each must
    // be a file of a crate's src/ (or of the tree).
    let doc = read(&top().join("ARCHITECTURE.md"));
    let section = section(&doc, "ARCHITECTURE.md", "## Words the code uses");
    // Every source file of the crates, by its path from the top.
    let mut sources = Vec::new();
    let mut folders = vec![top().join("crates")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                sources.push(path.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    let mut wrong = Vec::new();
    for row in section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| word"))
    {
        let place = row
            .trim_end_matches('|')
            .rsplit(" | ")
            .next()
            .unwrap_or_default();
        for file in place
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| w.ends_with(".rs"))
        {
            let file = file.split(' ').next().unwrap_or(file);
            let exists = sources.iter().any(|s| s.ends_with(&format!("/{file}")));
            if !exists {
                wrong.push(format!("`{file}` in: {}", &row[..row.len().min(80)]));
            }
        }
    }
    assert_none(&wrong, "the glossary names files that are not there");
}

#[test]
fn the_readme_s_modes_table_has_every_way_run_drives_a_loop() {
    let readme = read(&top().join("README.md"));
    let header = section(&readme, "README.md", "## Modes side by side")
        .lines()
        .find(|l| l.starts_with("| |"))
        .expect("the table's header");
    for mode in [
        "interactive",
        "--headless",
        "--fresh",
        "--formula",
        "--queue",
        "--remote",
        "/ralph-loop",
    ] {
        assert!(
            header.contains(mode),
            "the modes table lacks {mode}: {header}"
        );
    }
}

#[test]
fn the_benchmark_figures_are_one_full_run_of_bench_run_sh() {
    // bench/run.sh writes its tables between the page's markers; the rest
    // of the page holds no measured table of its own that could fall behind.
    let doc = read(&top().join("docs/benchmarks.md"));
    let begin = "<!-- bench/run.sh writes from here to the end marker; not edited by hand -->";
    let end = "<!-- bench/run.sh: end -->";
    let (Some(from), Some(to)) = (doc.find(begin), doc.find(end)) else {
        panic!("docs/benchmarks.md lacks bench/run.sh's markers");
    };
    let block = &doc[from + begin.len()..to];
    assert!(
        block.contains("### ralph-stop-hook") && block.contains("- mode: full"),
        "the block is not a full run's output:\n{block}"
    );
    let outside = format!("{}{}", &doc[..from], &doc[to..]);
    let units = [" ms", " µs", " ns", " MiB", " bytes", " %"];
    let measured: Vec<&str> = outside
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter(|l| {
            units.iter().any(|unit| {
                l.match_indices(unit)
                    .any(|(i, _)| l[..i].ends_with(|c: char| c.is_ascii_digit()))
            })
        })
        .collect();
    assert_none(&measured, "measured rows outside bench/run.sh's block");
}
