//! Finding the project's own test command, which `init` offers as the
//! completion check (`verify`): a loop whose claim of "done" is checked by
//! the project's tests cannot end `complete` while they fail.
//!
//! Only files are read (no program of the project is run: not even the
//! project's Python, whose start-up files the agent can write; the usual
//! `python3` is asked from `/` whether it has pytest, when that decides
//! between it and the environment the maintainers make); the first rule that
//! matches wins, the project's own entry points (a `test` target of make
//! or just) before the language's usual command.

use std::fs;
use std::path::Path;

use ralph_core::files::{self, Bounded};

/// A test command found in the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Detected {
    /// The command line, run by `sh -c` from the project root.
    pub(crate) command: String,
    /// What it was found from, for the person (`Cargo.toml`).
    pub(crate) source: String,
}

/// The largest file read to decide.
const MAX_READ: u64 = 256 * 1024;

/// The text of `root/name` when it is a regular file of at most [`MAX_READ`] bytes.
fn text(root: &Path, name: &str) -> Option<String> {
    match files::read_bounded(&root.join(name), MAX_READ) {
        Ok(Bounded::Bytes(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        _ => None,
    }
}

/// `root/name` read as TOML (its tables, dotted keys and inline tables
/// alike); `None` when it is absent, too large, or not TOML: each rule
/// that reads it then finds nothing in it, as in a file without the key.
fn toml_of(root: &Path, name: &str) -> Option<toml::Table> {
    text(root, name)?.parse().ok()
}

/// The value of `key` in `[section]` of `root/name`, an INI file read as
/// Python's configparser and pytest read them: by section, `=` or `:`
/// between key and value, `#` and `;` comment lines, indented lines
/// continuing a value (joined by line breaks); case-sensitive, as pytest
/// reads its section. `None` when the file is absent, too large or not
/// INI, or the key is not in that section.
fn ini_value(root: &Path, name: &str, section: &str, key: &str) -> Option<String> {
    let mut ini = configparser::ini::Ini::new_cs();
    ini.set_multiline(true);
    // As Python's configparser: a `#` or `;` inside a line is its text.
    ini.set_inline_comment_symbols(Some(&[]));
    ini.read(text(root, name)?).ok()?;
    ini.get(section, key)
}

fn exists(root: &Path, name: &str) -> bool {
    root.join(name).symlink_metadata().is_ok()
}

fn found(command: &str, source: &str) -> Option<Detected> {
    Some(Detected {
        command: command.into(),
        source: source.into(),
    })
}

/// The Python interpreter's usual name on this platform.
fn python() -> &'static str {
    if cfg!(windows) { "python" } else { "python3" }
}

/// The project's test command, if one of the rules finds it.
pub(crate) fn test_command(root: &Path) -> Option<Detected> {
    let usual_python_runs_pytest = || {
        ["VIRTUAL_ENV", "CONDA_PREFIX"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|v| !v.is_empty()))
            || python_has_module(python(), "pytest")
    };
    test_command_with(root, &venv_is_active, &usual_python_runs_pytest)
}

/// Whether `python` (the usual one, on `PATH`) can import `module`: asked
/// from `/`, with its `PYTHON*` variables ignored (`-E`), so that nothing
/// of the project is on its path; at most 10 s.
fn python_has_module(python: &str, module: &str) -> bool {
    let child = std::process::Command::new(python)
        .args([
            "-E",
            "-c",
            "import importlib.util, sys; sys.exit(importlib.util.find_spec(sys.argv[1]) is None)",
            module,
        ])
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return false;
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.success(),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
}

/// Whether `venv` (a virtual environment of the project) is the Python a
/// check's `python3` already runs: `$VIRTUAL_ENV` names it, or the first
/// `python3` on `PATH` is in it. Read from the environment and the files
/// alone, nothing run.
fn venv_is_active(venv: &Path) -> bool {
    let Ok(venv) = fs::canonicalize(venv) else {
        return false;
    };
    let named = std::env::var_os("VIRTUAL_ENV")
        .filter(|v| !v.is_empty())
        .and_then(|v| fs::canonicalize(v).ok())
        .is_some_and(|active| active == venv);
    let first_on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(python()))
            .find(|python| python.is_file())
    });
    named
        || first_on_path.is_some_and(|python| {
            python
                .parent()
                .and_then(|dir| fs::canonicalize(dir).ok())
                .is_some_and(|dir| dir.starts_with(&venv))
                || fs::canonicalize(&python).is_ok_and(|real| real.starts_with(&venv))
        })
}

/// [`test_command`], `active` saying whether a virtual environment of the
/// project is the Python that runs, `usual_runs_pytest` whether the usual
/// `python3` runs pytest as it is (an environment of the person's own is
/// active, or pytest is installed for it).
fn test_command_with(
    root: &Path,
    active: &dyn Fn(&Path) -> bool,
    usual_runs_pytest: &dyn Fn() -> bool,
) -> Option<Detected> {
    make_target(root)
        .or_else(|| just_recipe(root))
        .or_else(|| cargo(root))
        .or_else(|| node(root))
        .or_else(|| node_test_runner(root))
        .or_else(|| {
            // `-v`: go test names each test it ran, so their counts are read.
            exists(root, "go.mod")
                .then(|| found("go test -v ./...", "go.mod"))
                .flatten()
        })
        .or_else(|| python_tests(root, active, usual_runs_pytest))
        .or_else(|| other_ecosystems(root))
}

/// `cargo test`; in a workspace (a `workspace` table, `[workspace]`,
/// `[workspace.…]` or dotted keys, with or without a root package) `cargo
/// test --workspace`, every member's tests: plain `cargo test` at a root
/// package runs that package's alone, and a break in a member would pass.
/// A `Cargo.toml` that is not TOML is read as no workspace: cargo itself
/// says what is wrong with it when the check runs.
fn cargo(root: &Path) -> Option<Detected> {
    if !exists(root, "Cargo.toml") {
        return None;
    }
    let workspace = toml_of(root, "Cargo.toml").is_some_and(|m| m.contains_key("workspace"));
    if workspace {
        found(
            "cargo test --workspace",
            "Cargo.toml, a workspace: every member's tests",
        )
    } else {
        found("cargo test", "Cargo.toml")
    }
}

/// `make test` when a makefile has a `test` target.
fn make_target(root: &Path) -> Option<Detected> {
    ["GNUmakefile", "makefile", "Makefile"]
        .iter()
        .find_map(|name| {
            let text = text(root, name)?;
            let has_test = text.lines().any(|line| {
                line.strip_prefix("test").is_some_and(|rest| {
                    rest.trim_start().starts_with(':') && !rest.trim_start().starts_with(":=")
                })
            });
            has_test
                .then(|| found("make test", &format!("the test target of {name}")))
                .flatten()
        })
}

/// `just test` when a justfile has a `test` recipe.
fn just_recipe(root: &Path) -> Option<Detected> {
    ["justfile", "Justfile", ".justfile"]
        .iter()
        .find_map(|name| {
            let text = text(root, name)?;
            let has_test = text.lines().any(|line| {
                line.strip_prefix("test").is_some_and(|rest| {
                    let rest = rest.trim_start();
                    (rest.starts_with(':') && !rest.starts_with(":="))
                        || rest.starts_with(|c: char| c.is_alphabetic() || c == '*' || c == '+')
                })
            });
            has_test
                .then(|| found("just test", &format!("the test recipe of {name}")))
                .flatten()
        })
}

/// The `test` script of package.json (not npm's placeholder), run by the
/// package manager its lock file names.
fn node(root: &Path) -> Option<Detected> {
    let package: serde_json::Value = serde_json::from_str(&text(root, "package.json")?).ok()?;
    let script = package.pointer("/scripts/test")?.as_str()?;
    if script.trim().is_empty() || script.contains("no test specified") {
        return None;
    }
    let manager = if exists(root, "pnpm-lock.yaml") {
        "pnpm test"
    } else if exists(root, "yarn.lock") {
        "yarn test"
    } else if exists(root, "bun.lockb") || exists(root, "bun.lock") {
        "bun run test"
    } else {
        "npm test"
    };
    found(manager, "the test script of package.json")
}

/// `node --test` when no `test` script says otherwise (none, or npm's
/// placeholder) and the test files node finds on its own (any script in
/// `test/`, or one named like `x.test.js` in the project folder or `tests/`)
/// use its built-in runner (`node:test`).
fn node_test_runner(root: &Path) -> Option<Detected> {
    let is_script = |name: &str| [".js", ".mjs", ".cjs"].iter().any(|e| name.ends_with(e));
    let named_as_test = |name: &str| {
        let stem = name.rsplit_once('.').map_or(name, |(stem, _)| stem);
        stem == "test"
            || stem.starts_with("test-")
            || stem.ends_with(".test")
            || stem.ends_with("-test")
            || stem.ends_with("_test")
    };
    for (folder, any_name) in [("test", true), ("tests", false), ("", false)] {
        let dir = root.join(folder);
        let mut names: Vec<String> = fs::read_dir(&dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| is_script(n) && (any_name || named_as_test(n)))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let uses_node_test = names
            .iter()
            .take(MAX_TEST_FILES_READ)
            .any(|n| text(&dir, n).is_some_and(|t| t.contains("node:test")));
        if uses_node_test {
            let source = match folder {
                "" => "the node:test files in the project folder".to_string(),
                folder => format!("the node:test files in {folder}/"),
            };
            return found("node --test", &source);
        }
    }
    None
}

/// The most test files read to tell unittest's from pytest's.
const MAX_TEST_FILES_READ: usize = 64;

/// pytest when the project names it; else, over the test files, unittest
/// when every one of them is unittest's (a `TestCase`, named `test*.py`),
/// and pytest otherwise: unittest would run none of a plain `def test_…`
/// and pass (Python before 3.12 exits 0 on "Ran 0 tests").
fn python_tests(
    root: &Path,
    active: &dyn Fn(&Path) -> bool,
    usual_runs_pytest: &dyn Fn() -> bool,
) -> Option<Detected> {
    let python = python();
    // pytest in the project's virtual environment, which carries the
    // project's dependencies: its Python runs the tests, unless it is the
    // Python already active (then `python3` is it).
    let pytest = |source: &str| -> Option<Detected> {
        let venv = cfg!(unix)
            .then(|| ralph_core::observe::runnable::venv_with_module(root, "pytest"))
            .flatten()
            .filter(|venv| !active(&root.join(venv)));
        match venv {
            Some(venv) => found(
                &format!("{venv}/bin/python -m pytest"),
                &format!("{source}; pytest is installed in {venv}, which is not the active Python"),
            ),
            // No environment of the project has pytest, and the usual
            // `python3` cannot run it: the environment the maintainers
            // make (uv, pdm, a requirements file), once made, runs the
            // tests with the project's dependencies.
            None => match ralph_core::observe::runnable::environment_maker(root).filter(|maker| {
                cfg!(unix) && !active(&root.join(&maker.venv)) && !usual_runs_pytest()
            }) {
                Some(maker) => found(
                    &format!("{} -m pytest", maker.python()),
                    &format!("{source}; {}", maker.describe()),
                ),
                None => found(&format!("{python} -m pytest"), source),
            },
        }
    };
    let names_pytest = exists(root, "pytest.ini")
        || exists(root, "conftest.py")
        || [
            "pyproject.toml",
            "setup.cfg",
            "tox.ini",
            "requirements.txt",
            "requirements-dev.txt",
            "Pipfile",
        ]
        .iter()
        .any(|name| text(root, name).is_some_and(|t| t.contains("pytest")));
    if names_pytest {
        return pytest("the project's pytest configuration");
    }
    let is_test_file = |name: &str| {
        name.ends_with(".py") && (name.starts_with("test") || name.ends_with("_test.py"))
    };
    // Whether `dir` has test files, whether they are all unittest's, and
    // whether one imports relatively (`from . import …`: it runs only as
    // part of its package).
    let test_files_in = |dir: &Path| -> (bool, bool, bool) {
        let mut names: Vec<String> = fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| is_test_file(n))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        let read: Vec<String> = names
            .iter()
            .take(MAX_TEST_FILES_READ)
            .map(|n| text(dir, n).unwrap_or_default())
            .collect();
        let unittest_style = !names.is_empty()
            && names
                .iter()
                .zip(&read)
                .all(|(n, t)| n.starts_with("test") && t.contains("TestCase"));
        let relative = read.iter().any(|t| {
            t.lines()
                .any(|l| l.trim_start().starts_with("from .") && l.contains(" import "))
        });
        (!names.is_empty(), unittest_style, relative)
    };
    for folder in ["tests", "test"] {
        let (any, unittest_style, relative) = test_files_in(&root.join(folder));
        if any {
            // A tests package whose files import relatively is discovered
            // from the project's folder (`-t .`), so each is imported as
            // `tests.test_x`: from the folder itself (`-s tests` alone)
            // every relative import fails.
            let package = relative && root.join(folder).join("__init__.py").is_file();
            let top = if package { " -t ." } else { "" };
            return if unittest_style {
                found(
                    &format!("{python} -m unittest discover -s {folder}{top}"),
                    &format!("the unittest files in {folder}/"),
                )
            } else {
                pytest(&format!("the test files in {folder}/"))
            };
        }
    }
    let (any, unittest_style, _) = test_files_in(root);
    if any {
        return if unittest_style {
            found(
                &format!("{python} -m unittest"),
                "the unittest files in the project folder",
            )
        } else {
            pytest("the test files in the project folder")
        };
    }
    None
}

/// The project's test folders and test file patterns, offered as
/// `protectedPaths` (a claim may not change them): the usual test folders
/// at the root (folder names end with `/`), those inside the project's
/// packages (`toolz/tests/`, `src/pkg/tests/`: see [`nested_test_folders`]),
/// the test files under pytest's `testpaths` when it names a package, and
/// the test file names of Go (`*_test.go`) and Python (`test_*.py`,
/// `*_test.py`) when such files sit at the root.
pub(crate) fn test_paths(root: &Path) -> Vec<String> {
    let mut paths: Vec<String> = ["tests", "test", "spec", "__tests__", "src/test"]
        .iter()
        .filter(|dir| root.join(dir).symlink_metadata().is_ok_and(|m| m.is_dir()))
        .map(|dir| format!("{dir}/"))
        .collect();
    for path in nested_test_folders(root)
        .into_iter()
        .chain(pytest_testpaths(root))
    {
        let covered = paths
            .iter()
            .any(|p| p.ends_with('/') && path.starts_with(p.as_str()));
        if !covered && !paths.contains(&path) {
            paths.push(path);
        }
    }
    let names: Vec<String> = fs::read_dir(root)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if exists(root, "go.mod") || names.iter().any(|n| n.ends_with("_test.go")) {
        paths.push("*_test.go".into());
    }
    if names
        .iter()
        .any(|n| n.starts_with("test_") && n.ends_with(".py"))
    {
        paths.push("test_*.py".into());
    }
    if names.iter().any(|n| n.ends_with("_test.py")) {
        paths.push("*_test.py".into());
    }
    paths
}

/// The names of test folders, wherever they sit.
const TEST_FOLDERS: [&str; 4] = ["tests", "test", "__tests__", "spec"];
/// How deep under the root test folders are looked for (`src/pkg/tests` is 3).
const NESTED_DEPTH: usize = 3;
/// Entries read at most while looking for them.
const NESTED_ENTRIES: usize = 20_000;

/// Test folders inside the project's folders (`toolz/tests/`,
/// `src/pkg/tests/`), up to [`NESTED_DEPTH`] deep and [`NESTED_ENTRIES`]
/// entries read; hidden folders and those of tools (`node_modules`, a
/// venv, `target`) skipped, as the root's own test folders are found by
/// [`test_paths`]. Sorted.
fn nested_test_folders(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut budget = NESTED_ENTRIES;
    let mut pending: Vec<(std::path::PathBuf, String, usize)> =
        vec![(root.to_path_buf(), String::new(), 0)];
    while let Some((dir, relative, depth)) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !entry.file_type().is_ok_and(|t| t.is_dir())
                || name.starts_with('.')
                || ralph_core::observe::progress::SCAN_IGNORES.contains(&name.as_str())
            {
                continue;
            }
            let path = format!("{relative}{name}/");
            if TEST_FOLDERS.contains(&name.as_str()) {
                if depth > 0 {
                    found.push(path);
                }
            } else if depth + 1 < NESTED_DEPTH {
                pending.push((entry.path(), path, depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// pytest's `testpaths` (see [`testpaths_values`]), as protected paths: a
/// test folder whole; a package (a folder with an `__init__.py`: the tests
/// live among the code, `testpaths = toolz`) by its test files only
/// (`toolz/**/test_*.py`, `toolz/**/*_test.py`), so that its code stays
/// the agent's to change.
fn pytest_testpaths(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    for value in testpaths_values(root) {
        let value = value.trim_matches('/').trim_start_matches("./");
        if value.is_empty() || value.contains("..") || value.contains('*') {
            continue;
        }
        let dir = root.join(value);
        if !dir.is_dir() {
            continue;
        }
        let found = if dir.join("__init__.py").is_file() {
            vec![
                format!("{value}/**/test_*.py"),
                format!("{value}/**/*_test.py"),
            ]
        } else {
            vec![format!("{value}/")]
        };
        for path in found {
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths
}

/// The INI files pytest reads its settings from, and the section it reads
/// them in.
const PYTEST_INI: [(&str, &str); 4] = [
    ("pytest.ini", "pytest"),
    (".pytest.ini", "pytest"),
    ("tox.ini", "pytest"),
    ("setup.cfg", "tool:pytest"),
];

/// The TOML files pytest reads its settings from, and the table it reads
/// them in.
const PYTEST_TOML: [(&str, &[&str]); 4] = [
    ("pyproject.toml", &["tool", "pytest", "ini_options"]),
    ("pyproject.toml", &["tool", "pytest"]),
    ("pytest.toml", &["pytest"]),
    (".pytest.toml", &["pytest"]),
];

/// The values of pytest's `testpaths` in every file pytest may read it
/// from, each in pytest's own section or table only: `testpaths = a b`
/// in INI (words, over its continuation lines too), `testpaths = ["a",
/// "b"]` (or one string of words) in TOML. A file that does not parse is
/// passed over.
fn testpaths_values(root: &Path) -> Vec<String> {
    let words = |value: &str| -> Vec<String> {
        value
            .split_whitespace()
            .map(|w| w.trim_matches(['"', '\'']).to_string())
            .filter(|w| !w.is_empty())
            .collect()
    };
    let mut values = Vec::new();
    for (name, section) in PYTEST_INI {
        if let Some(value) = ini_value(root, name, section, "testpaths") {
            values.extend(words(&value));
        }
    }
    for (name, table) in PYTEST_TOML {
        let Some(file) = toml_of(root, name) else {
            continue;
        };
        let mut at = Some(&file);
        for key in table {
            at = at.and_then(|t| t.get(*key)).and_then(toml::Value::as_table);
        }
        match at.and_then(|t| t.get("testpaths")) {
            Some(toml::Value::String(value)) => values.extend(words(value)),
            Some(toml::Value::Array(items)) => values.extend(
                items
                    .iter()
                    .filter_map(toml::Value::as_str)
                    .map(str::to_string),
            ),
            _ => {}
        }
    }
    values
}

/// Deno, Elixir, Ruby, the JVM, PHP and .NET, by their usual files.
fn other_ecosystems(root: &Path) -> Option<Detected> {
    if exists(root, "deno.json") || exists(root, "deno.jsonc") {
        return found("deno test", "deno.json");
    }
    if exists(root, "mix.exs") {
        return found("mix test", "mix.exs");
    }
    if exists(root, "Gemfile") && exists(root, "spec") {
        return found("bundle exec rspec", "Gemfile and spec/");
    }
    if exists(root, "gradlew") {
        return found("./gradlew test", "gradlew");
    }
    if exists(root, "build.gradle") || exists(root, "build.gradle.kts") {
        return found("gradle test", "build.gradle");
    }
    if exists(root, "mvnw") {
        return found("./mvnw -q test", "mvnw");
    }
    if exists(root, "pom.xml") {
        return found("mvn -q test", "pom.xml");
    }
    if let Some(composer) = text(root, "composer.json") {
        let value: serde_json::Value = serde_json::from_str(&composer).ok()?;
        if value.pointer("/scripts/test").is_some() {
            return found("composer test", "the test script of composer.json");
        }
    }
    let dotnet = fs::read_dir(root).ok()?.flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.ends_with(".sln") || name.ends_with(".csproj") || name.ends_with(".fsproj")
    });
    if dotnet {
        return found("dotnet test", "the .NET solution or project");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = crate::testdir::new("detect");
        for (name, text) in files {
            let path = dir.path().join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        dir
    }

    fn command(files: &[(&str, &str)]) -> Option<String> {
        test_command(project(files).path()).map(|d| d.command)
    }

    #[test]
    #[cfg(unix)]
    fn pytest_in_the_venv_is_run_by_the_venv_s_python_unless_it_is_active() {
        let venv_with_pytest = [
            ("pyproject.toml", "[tool.pytest.ini_options]\n"),
            (".venv/pyvenv.cfg", "home = /usr/bin\n"),
            (".venv/bin/python", ""),
            (".venv/lib/python3.11/site-packages/pytest/__init__.py", ""),
        ];
        let dir = project(&venv_with_pytest);
        // Whether or not the system's python3 has pytest: the venv has the
        // project's dependencies.
        let inactive = test_command_with(dir.path(), &|_| false, &|| false).unwrap();
        assert_eq!(inactive.command, ".venv/bin/python -m pytest");
        assert_eq!(
            inactive.source,
            "the project's pytest configuration; pytest is installed in .venv, which is not the \
             active Python"
        );
        // The venv is the active Python: python3 is it.
        let active =
            test_command_with(dir.path(), &|venv| venv.ends_with(".venv"), &|| true).unwrap();
        assert_eq!(active.command, "python3 -m pytest");
        // A venv without pytest changes nothing.
        let dir = project(&venv_with_pytest[..3]);
        let other = test_command_with(dir.path(), &|_| false, &|| false).unwrap();
        assert_eq!(other.command, "python3 -m pytest");
    }

    #[test]
    #[cfg(unix)]
    fn pytest_runs_in_the_environment_the_maintainers_make_when_none_has_it_yet() {
        let pytest_project = ("pyproject.toml", "[tool.pytest.ini_options]\n");
        let pinned = |extra: &[(&str, &str)], usual_runs: bool| {
            let mut files = vec![pytest_project];
            files.extend_from_slice(extra);
            let dir = project(&files);
            test_command_with(dir.path(), &|_| false, &|| usual_runs).map(|d| (d.command, d.source))
        };
        let (command, source) = pinned(&[("uv.lock", "")], false).unwrap();
        assert_eq!(command, ".venv/bin/python -m pytest");
        assert_eq!(
            source,
            "the project's pytest configuration; this project makes its test environment with uv \
             (uv.lock): `uv sync --frozen` makes .venv"
        );
        let requirements = ("requirements-dev.txt", "pytest\n");
        assert_eq!(
            pinned(&[requirements], false).unwrap().0,
            ".venv/bin/python -m pytest"
        );
        // tox's environments hold a built copy of the project: not taken.
        let tox = ("tox.ini", "[tox]\nenvlist = py\n[testenv]\ndeps = pytest\n");
        assert_eq!(pinned(&[tox], false).unwrap().0, "python3 -m pytest");
        // pytest installed for the usual python3, or the person's own
        // environment active: the usual Python, as before.
        assert_eq!(
            pinned(&[("uv.lock", "")], true).unwrap().0,
            "python3 -m pytest"
        );
        // Nothing says how the environment is made: the usual Python.
        assert_eq!(pinned(&[], false).unwrap().0, "python3 -m pytest");
    }

    /// A unittest test file.
    const UNITTEST: &str =
        "import unittest\n\nclass T(unittest.TestCase):\n    def test_a(self):\n        pass\n";
    /// A test file of node's own runner.
    const NODE_TEST: &str = "const test = require('node:test');\ntest('sum', () => {});\n";
    /// A test file with a plain pytest test function.
    const PYTEST: &str = "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n";

    #[test]
    fn a_cargo_workspace_runs_every_member_s_tests() {
        type Files<'a> = Vec<(&'a str, &'a str)>;
        let cases: Vec<(Files, Option<String>)> = vec![
            // A workspace, with a root package or without: every member.
            (
                vec![(
                    "Cargo.toml",
                    "[package]\nname = \"a\"\n\n[workspace]\nmembers = [\"core\"]\n",
                )],
                Some("cargo test --workspace".into()),
            ),
            (
                vec![(
                    "Cargo.toml",
                    "[workspace] # all\nmembers = [\"a\", \"b\"]\n",
                )],
                Some("cargo test --workspace".into()),
            ),
            (
                vec![("Cargo.toml", "[package]\n[workspace.lints]\n")],
                Some("cargo test --workspace".into()),
            ),
            (
                vec![("Cargo.toml", "[package]\nname = \"workspace\"\n")],
                Some("cargo test".into()),
            ),
        ];
        for (files, expected) in cases {
            assert_eq!(command(&files), expected, "{files:?}");
        }
    }

    #[test]
    #[allow(clippy::too_many_lines)] // a table of projects, one per ecosystem and layout
    fn each_ecosystem_gets_its_usual_command() {
        let py = python();
        type Files<'a> = Vec<(&'a str, &'a str)>;
        let cases: Vec<(Files, Option<String>)> = vec![
            (vec![], None),
            (vec![("README.md", "hi")], None),
            (vec![("Cargo.toml", "[package]")], Some("cargo test".into())),
            (
                vec![("go.mod", "module x")],
                Some("go test -v ./...".into()),
            ),
            (
                vec![("package.json", r#"{"scripts":{"test":"vitest run"}}"#)],
                Some("npm test".into()),
            ),
            (
                vec![
                    ("package.json", r#"{"scripts":{"test":"jest"}}"#),
                    ("pnpm-lock.yaml", ""),
                ],
                Some("pnpm test".into()),
            ),
            (
                vec![
                    ("package.json", r#"{"scripts":{"test":"jest"}}"#),
                    ("yarn.lock", ""),
                ],
                Some("yarn test".into()),
            ),
            (
                vec![(
                    "package.json",
                    r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#,
                )],
                None,
            ),
            (vec![("package.json", r#"{"name":"x"}"#)], None),
            // node's own runner, with no test script (or npm's placeholder).
            (
                vec![
                    ("package.json", r#"{"name":"x"}"#),
                    ("test/sum.js", NODE_TEST),
                ],
                Some("node --test".into()),
            ),
            (
                vec![
                    (
                        "package.json",
                        r#"{"scripts":{"test":"echo \"Error: no test specified\" && exit 1"}}"#,
                    ),
                    ("sum.test.mjs", NODE_TEST),
                ],
                Some("node --test".into()),
            ),
            (
                vec![("tests/sum.test.cjs", NODE_TEST)],
                Some("node --test".into()),
            ),
            // Not where node looks, or not its runner: nothing guessed.
            (vec![("tests/sum.js", NODE_TEST)], None),
            (
                vec![("test/sum.test.js", "describe('sum', () => {});\n")],
                None,
            ),
            (
                vec![
                    ("package.json", r#"{"scripts":{"test":"jest"}}"#),
                    ("test/sum.js", NODE_TEST),
                ],
                Some("npm test".into()),
            ),
            (
                vec![("pyproject.toml", "[tool.pytest.ini_options]\n")],
                Some(format!("{py} -m pytest")),
            ),
            (
                vec![("calc.py", ""), ("test_calc.py", UNITTEST)],
                Some(format!("{py} -m unittest")),
            ),
            (
                vec![("calc.py", ""), ("tests/test_calc.py", UNITTEST)],
                Some(format!("{py} -m unittest discover -s tests")),
            ),
            // A tests package whose files import relatively: discovered from
            // the project's folder, so that they are its modules.
            (
                vec![
                    ("calc.py", ""),
                    ("tests/__init__.py", ""),
                    ("tests/helpers.py", ""),
                    (
                        "tests/test_calc.py",
                        "from . import helpers\nimport unittest\n\nclass T(unittest.TestCase):\n    pass\n",
                    ),
                ],
                Some(format!("{py} -m unittest discover -s tests -t .")),
            ),
            // A package whose files import absolutely: as before.
            (
                vec![
                    ("calc.py", ""),
                    ("tests/__init__.py", ""),
                    ("tests/test_calc.py", UNITTEST),
                ],
                Some(format!("{py} -m unittest discover -s tests")),
            ),
            // Plain test functions: unittest would run none of them, and pass.
            (
                vec![("calc.py", ""), ("tests/test_calc.py", PYTEST)],
                Some(format!("{py} -m pytest")),
            ),
            (
                vec![("calc.py", ""), ("test_calc.py", PYTEST)],
                Some(format!("{py} -m pytest")),
            ),
            (
                vec![
                    ("tests/test_a.py", UNITTEST),
                    ("tests/test_b.py", PYTEST),
                    ("tests/helpers.py", ""),
                ],
                Some(format!("{py} -m pytest")),
            ),
            (
                vec![("calc.py", ""), ("tests/calc_test.py", "")],
                Some(format!("{py} -m pytest")),
            ),
            (
                vec![
                    (
                        "Makefile",
                        "build:\n\tcc x.c\n\ntest: build\n\t./run-tests\n",
                    ),
                    ("Cargo.toml", ""),
                ],
                Some("make test".into()),
            ),
            (vec![("Makefile", "TESTS := a b\nbuild:\n\tcc x.c\n")], None),
            (
                vec![("justfile", "test *args:\n  cargo test {{args}}\n")],
                Some("just test".into()),
            ),
            (vec![("deno.json", "{}")], Some("deno test".into())),
            (vec![("pom.xml", "<project/>")], Some("mvn -q test".into())),
            (
                vec![("app.csproj", "<Project/>")],
                Some("dotnet test".into()),
            ),
        ];
        for (files, expected) in cases {
            assert_eq!(command(&files), expected, "{files:?}");
        }
    }

    #[test]
    fn cargo_toml_is_read_by_its_tables() {
        let cases = [
            // `[workspace]` inside a string is no table.
            (
                "[package]\nname = \"a\"\ndescription = \"\"\"\n[workspace]\n\"\"\"\n",
                "cargo test",
            ),
            // Dotted keys, a quoted key and an inline table make one.
            (
                "workspace.members = [\"a\"]\n\n[package]\nname = \"a\"\n",
                "cargo test --workspace",
            ),
            (
                "\"workspace\" = { members = [\"a\"] }\n",
                "cargo test --workspace",
            ),
            // Not TOML: as a manifest without a workspace (cargo says why).
            ("[package\nname = ", "cargo test"),
        ];
        for (manifest, want) in cases {
            assert_eq!(
                command(&[("Cargo.toml", manifest)]).as_deref(),
                Some(want),
                "{manifest:?}"
            );
        }
    }

    #[test]
    fn testpaths_count_in_pytest_s_own_section_only() {
        let folders = [("checks/test_a.py", ""), ("more/test_b.py", "")];
        let cases: Vec<(&str, &str, Vec<&str>)> = vec![
            // Another tool's section, or a section-less key: not pytest's.
            (
                "setup.cfg",
                "[flake8]\ntestpaths = checks\n\n[tool:pytest]\naddopts = -q\n",
                vec![],
            ),
            ("tox.ini", "[testenv]\ntestpaths = checks\n", vec![]),
            // pytest's section, its value over continuation lines, `:` as
            // the delimiter, comment lines between.
            (
                "tox.ini",
                "[tox]\nenvlist = py\n\n[pytest]\ntestpaths =\n    checks\n    more\n",
                vec!["checks/", "more/"],
            ),
            (
                "setup.cfg",
                "[tool:pytest]\n# where\ntestpaths: checks\n[flake8]\nmax-line-length = 88\n",
                vec!["checks/"],
            ),
            ("pytest.ini", "[pytest]\ntestpaths = more\n", vec!["more/"]),
            // Another tool's table in pyproject.toml: not pytest's.
            (
                "pyproject.toml",
                "[tool.black]\ntestpaths = [\"checks\"]\n",
                vec![],
            ),
            // An inline table, a quoted key, a comment with brackets inside
            // the array, and one string of words.
            (
                "pyproject.toml",
                "[tool.pytest]\nini_options = { testpaths = [\"checks\"] }\n",
                vec!["checks/"],
            ),
            (
                "pyproject.toml",
                "[tool.pytest.ini_options]\n\"testpaths\" = [ # see [docs]\n  \"checks\",\n  \"more\",\n]\n",
                vec!["checks/", "more/"],
            ),
            (
                "pyproject.toml",
                "[tool.pytest.ini_options]\ntestpaths = \"checks more\"\n",
                vec!["checks/", "more/"],
            ),
            // pytest 9's own table, and pytest.toml.
            (
                "pyproject.toml",
                "[tool.pytest]\ntestpaths = [\"more\"]\n",
                vec!["more/"],
            ),
            (
                "pytest.toml",
                "[pytest]\ntestpaths = [\"checks\"]\n",
                vec!["checks/"],
            ),
            // Not TOML, not INI: passed over, no panic.
            (
                "pyproject.toml",
                "[tool.pytest.ini_options\ntestpaths = [\"checks\"]\n",
                vec![],
            ),
            ("setup.cfg", "[tool:pytest\ntestpaths = checks\n", vec![]),
        ];
        for (name, text, want) in cases {
            let mut files = folders.to_vec();
            files.push((name, text));
            assert_eq!(test_paths(project(&files).path()), want, "{name}: {text:?}");
        }
    }

    #[test]
    fn test_folders_and_file_patterns_are_found() {
        type Files<'a> = Vec<(&'a str, &'a str)>;
        let cases: Vec<(Files, Vec<&str>)> = vec![
            (vec![("README.md", "")], vec![]),
            (
                vec![("tests/test_a.py", ""), ("spec/a_spec.rb", "")],
                vec!["tests/", "spec/"],
            ),
            (
                vec![("go.mod", "module x"), ("test/data.txt", "")],
                vec!["test/", "*_test.go"],
            ),
            (
                vec![("calc.py", ""), ("test_calc.py", ""), ("x_test.py", "")],
                vec!["test_*.py", "*_test.py"],
            ),
            (
                vec![
                    ("__tests__/a.test.js", ""),
                    ("src/test/java/ATest.java", ""),
                ],
                vec!["__tests__/", "src/test/"],
            ),
            // A file named like a folder is not one.
            (vec![("tests", "")], vec![]),
            // Tests inside the package (toolz's layout, pytest's testpaths
            // naming the package): the test folder, and the test files
            // under the package, protected; its code is not.
            (
                vec![
                    ("setup.cfg", "[tool:pytest]\ntestpaths = toolz\n"),
                    ("toolz/__init__.py", ""),
                    ("toolz/itertoolz.py", ""),
                    ("toolz/tests/test_itertoolz.py", ""),
                ],
                vec!["toolz/tests/", "toolz/**/test_*.py", "toolz/**/*_test.py"],
            ),
            (
                vec![
                    (
                        "pyproject.toml",
                        "[tool.pytest.ini_options]\ntestpaths = [\n  \"pkg\",\n  \"checks\",\n]\n",
                    ),
                    ("pkg/__init__.py", ""),
                    ("checks/test_a.py", ""),
                ],
                vec!["pkg/**/test_*.py", "pkg/**/*_test.py", "checks/"],
            ),
            (
                vec![("src/pkg/__init__.py", ""), ("src/pkg/tests/test_a.py", "")],
                vec!["src/pkg/tests/"],
            ),
            // Folders of tools and hidden ones are not the project's tests.
            (
                vec![
                    ("node_modules/x/test/a.js", ""),
                    (".venv/lib/x/tests/t.py", ""),
                    ("a/b/c/tests/too_deep.py", ""),
                ],
                vec![],
            ),
        ];
        for (files, want) in cases {
            assert_eq!(test_paths(project(&files).path()), want, "{files:?}");
        }
    }
}
