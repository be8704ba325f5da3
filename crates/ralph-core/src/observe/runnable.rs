//! Whether a check can run at all: a check that cannot run (its program or
//! its runner's module not found, its test script missing, the runner
//! refusing its own arguments or configuration) is told apart from one
//! whose tests run and fail. Failing tests are a loop's work; a check that
//! cannot run rejects every claim whatever the agent does, so a loop must
//! not start on it unasked.
//!
//! Read from what the check did (its exit code and the last lines of its
//! output) and a few files of the project (a virtual environment, the
//! project's own modules), never by running anything. Each rule is general
//! (no project is named) and tested below with the runners' real output.

use std::path::Path;

use crate::observe::resolved::{program_of, starts_with_program};
use crate::observe::verify::VerifyResult;

mod environment;
pub use environment::{EnvironmentMaker, environment_maker, test_extra, test_extra_in};

/// How sure ralph is that the check cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// It cannot run: every claim would be rejected, the start stops.
    CannotRun,
    /// It runs but proves nothing yet (no test collected): said, not stopped,
    /// as writing the first tests may be the task.
    Warning,
}

/// Why a check cannot run, and what the person can do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// Whether the start stops.
    pub severity: Severity,
    /// The rule that found it, in a few words ("its program was not found").
    pub rule: &'static str,
    /// What the check said, one line of its output (or its exit code).
    pub evidence: String,
    /// What to do: activate the venv, install the runner, set `verify`.
    pub fix: String,
}

impl Diagnosis {
    /// One sentence for the person: what failed and how to fix it.
    pub fn describe(&self, command: &str) -> String {
        format!(
            "the check `{command}` cannot run: {} ({}); {}",
            self.rule, self.evidence, self.fix
        )
    }
}

/// How to set another check, said at the end of every fix.
const SET_VERIFY: &str = "or set another check with `ralph-ctl init --verify CMD`";

/// The folders a Python virtual environment of the project usually lives in.
const VENV_FOLDERS: [&str; 4] = [".venv", "venv", "env", ".env"];

/// Why `result` (a check run from `root`) cannot run, if a rule says so.
/// A check that passed, or that ran tests of which some passed, always runs;
/// one that ran tests is never said to refuse its arguments or toolchain.
pub fn diagnose(root: &Path, result: &VerifyResult) -> Option<Diagnosis> {
    if result.passed() || result.timed_out {
        return None;
    }
    if result.counts.is_some_and(|c| c.passed > 0) {
        return None;
    }
    // Tests ran: what their output says of arguments or downloads is the
    // tests' own (a test of a `--verbose` still to write), the loop's
    // work; a runner that refuses its own arguments runs none.
    let ran_tests = result.counts.is_some_and(|c| c.run > 0);
    let output = result.output_tail.as_str();
    let Some(code) = result.exit_code else {
        // Killed by a signal, or never started (the walls refused it).
        return Some(Diagnosis {
            severity: Severity::CannotRun,
            rule: "it could not be started",
            evidence: first_line(output).unwrap_or("no exit code").to_string(),
            fix: format!("fix what the line above names, {SET_VERIFY}"),
        });
    };
    not_found(root, code, output, &result.command)
        .or_else(|| not_executable(code, output))
        .or_else(|| python_module_missing(root, output, &result.command))
        .or_else(|| npm_script_missing(output))
        .or_else(|| node_module_missing(root, output))
        .or_else(|| runner_usage_error(code, output).filter(|_| !ran_tests))
        .or_else(|| toolchain_cannot_start(output).filter(|_| !ran_tests))
        .or_else(|| no_tests_collected(code, output, result))
}

fn first_line(output: &str) -> Option<&str> {
    output.lines().map(str::trim).find(|l| !l.is_empty())
}

/// The first line of `output` containing `needle`, trimmed.
fn line_with<'a>(output: &'a str, needle: &str) -> Option<&'a str> {
    output.lines().map(str::trim).find(|l| l.contains(needle))
}

/// The shell's "not found" (exit 127): `sh: 1: pytest: not found`,
/// `bash: pytest: command not found`.
fn not_found(root: &Path, code: i32, output: &str, command: &str) -> Option<Diagnosis> {
    // The shell's code, or make's report of it (`make: *** [test] Error 127`).
    if code != 127 && !output.contains("] Error 127") {
        return None;
    }
    let line = output.lines().map(str::trim).find(|l| {
        l.ends_with(": not found")
            || l.ends_with(": command not found")
            || l.ends_with(": No such file or directory")
    });
    let named = program_of(command);
    let program = line
        .and_then(|l| {
            let head = l
                .strip_suffix(": not found")
                .or_else(|| l.strip_suffix(": command not found"))
                .or_else(|| l.strip_suffix(": No such file or directory"))?;
            head.rsplit(": ").next()
        })
        .or(named.as_deref())
        .unwrap_or(command)
        .trim();
    let name = program.rsplit('/').next().unwrap_or(program);
    // The environment the check is pinned to, not made yet: made as the
    // maintainers make it (before any other venv that has the program).
    let unmade =
        environment_maker(root).filter(|maker| program.starts_with(&format!("{}/", maker.venv)));
    let fix = if let Some(maker) = unmade {
        make_fix(&maker, command)
    } else if let Some(venv) = venv_with(root, |venv| venv.join("bin").join(name).is_file()) {
        let use_it = (starts_with_program(command) && named.as_deref() == Some(program))
            .then(|| with_program(command, &format!("{venv}/bin/{name}")));
        activate_fix(&venv, &format!("`{name}` is in {venv}/bin"), use_it)
    } else if root.join("node_modules/.bin").join(name).is_file() {
        format!(
            "`{name}` is in node_modules/.bin, which only npm puts on PATH: run it through the \
             package manager (`npm test`, `npx {name}`), {SET_VERIFY}"
        )
    } else if root.join("package.json").is_file() && !root.join("node_modules").is_dir() {
        format!("install the project's dependencies (`npm ci` or `npm install`), {SET_VERIFY}")
    } else {
        format!("install `{name}` or put it on PATH, {SET_VERIFY}")
    };
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "its program was not found",
        evidence: line.map_or_else(|| format!("exit {code}"), str::to_string),
        fix,
    })
}

/// The shell's exit 126: the program was found but cannot be executed.
fn not_executable(code: i32, output: &str) -> Option<Diagnosis> {
    if code != 126 {
        return None;
    }
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "its program cannot be executed",
        evidence: line_with(output, "Permission denied")
            .or_else(|| first_line(output))
            .unwrap_or("exit 126")
            .to_string(),
        fix: format!(
            "make it executable (`chmod +x`) or run it through its interpreter, {SET_VERIFY}"
        ),
    })
}

/// Python's `python3: No module named pytest` (the runner run by `-m`), or a
/// `ModuleNotFoundError` naming a module that is not the project's own (a
/// dependency not installed where the check's Python looks): the project's
/// own module missing is the loop's work.
fn python_module_missing(root: &Path, output: &str, command: &str) -> Option<Diagnosis> {
    let (line, module) = output.lines().map(str::trim).find_map(|l| {
        let (_, rest) = l.split_once("No module named ")?;
        let module = rest
            .trim()
            .trim_matches(|c| c == '\'' || c == '"')
            .split(['.', '\'', '"', ' '])
            .next()?;
        (!module.is_empty()).then(|| (l, module.to_string()))
    })?;
    let own = [
        root.join(&module),
        root.join(format!("{module}.py")),
        root.join("src").join(&module),
        root.join("src").join(format!("{module}.py")),
    ]
    .iter()
    .any(|p| p.exists());
    if own {
        return None;
    }
    let installed_in = venv_with(root, |venv| module_in_venv(venv, &module));
    let maker = environment_maker(root);
    let fix = match (installed_in, maker, venv_with(root, |_| true)) {
        (Some(venv), _, _) => {
            let python_verify = is_python_check(command)
                .then(|| with_program(command, &format!("{venv}/bin/python")));
            activate_fix(
                &venv,
                &format!("`{module}` is installed in {venv}"),
                python_verify,
            )
        }
        // The project says how its environment is made: as its maintainers do.
        (None, Some(maker), _) => make_fix(&maker, command),
        (None, None, Some(venv)) => format!(
            "install `{module}` into the project's virtual environment and activate it \
             (`{venv}/bin/python -m pip install {module}`, then `. {venv}/bin/activate`), {SET_VERIFY}"
        ),
        (None, None, None) => format!(
            "install `{module}` for the Python the check runs (`python3 -m pip install {module}`, \
             or activate the virtual environment that has it), {SET_VERIFY}"
        ),
    };
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "a module it needs is not installed",
        evidence: line.to_string(),
        fix,
    })
}

/// npm's `Missing script: "test"` (npm 7 and later; `npm ERR!` or `npm error`).
fn npm_script_missing(output: &str) -> Option<Diagnosis> {
    let line = line_with(output, "Missing script:")?;
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "package.json has no such script",
        evidence: line.to_string(),
        fix: format!("add the script to package.json's \"scripts\", {SET_VERIFY}"),
    })
}

/// Node's `Error: Cannot find module 'mocha'` for a package (not a file of
/// the project: `./x`, `/x`): the dependencies are not installed.
fn node_module_missing(root: &Path, output: &str) -> Option<Diagnosis> {
    let line = output.lines().map(str::trim).find(|l| {
        l.split_once("Cannot find module '")
            .and_then(|(_, rest)| rest.split('\'').next())
            .is_some_and(|m| !m.is_empty() && !m.starts_with('.') && !m.starts_with('/'))
    })?;
    let fix = if root.join("node_modules").is_dir() {
        format!("add the package to the project's dependencies and install it, {SET_VERIFY}")
    } else {
        format!("install the project's dependencies (`npm ci` or `npm install`), {SET_VERIFY}")
    };
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "a package it needs is not installed",
        evidence: line.to_string(),
        fix,
    })
}

/// A runner that refuses its own arguments or configuration, or fails
/// inside itself, rather than reporting tests: pytest's usage error (exit
/// 4: `ERROR: usage: …`, `ERROR: file or directory not found: …`, a bad
/// ini file) and internal error (exit 3: `INTERNALERROR>`), a runner's
/// `error: unrecognized arguments` or `Unknown option`.
fn runner_usage_error(code: i32, output: &str) -> Option<Diagnosis> {
    let line = output.lines().map(str::trim).find(|l| {
        (code == 4 && l.starts_with("ERROR: "))
            || (code == 3 && l.starts_with("INTERNALERROR>"))
            || l.contains("error: unrecognized arguments")
            || l.starts_with("error: unknown option")
            || l.starts_with("Unknown option")
    })?;
    Some(Diagnosis {
        severity: Severity::CannotRun,
        rule: "its test runner refused its arguments or configuration",
        evidence: line.to_string(),
        fix: format!("fix the command or the runner's configuration, {SET_VERIFY}"),
    })
}

/// A toolchain that cannot even build the test harness for want of
/// something outside the code: no manifest, a missing subcommand or
/// toolchain, a dependency it cannot fetch, Go's module errors.
fn toolchain_cannot_start(output: &str) -> Option<Diagnosis> {
    const SIGNS: &[(&str, &str)] = &[
        (
            "error: could not find `Cargo.toml`",
            "run it in the crate's folder",
        ),
        ("error: no such command:", "install the cargo subcommand"),
        (
            "is not installed",
            "install the toolchain it names (`rustup toolchain install …`)",
        ),
        (
            "linker `",
            "install the C toolchain (`apt-get install build-essential`)",
        ),
        (
            "failed to get `",
            "make the dependencies available (`cargo fetch` while online)",
        ),
        (
            "failed to download",
            "make the dependencies available (`cargo fetch` while online)",
        ),
        (
            "go: cannot find main module",
            "run it in the module's folder (where go.mod is)",
        ),
        (
            "go.mod file not found",
            "run it in the module's folder (where go.mod is)",
        ),
        (
            "no required module provides package",
            "add the module (`go get …`, `go mod tidy`)",
        ),
        (
            "missing go.sum entry",
            "complete go.sum (`go mod download`, `go mod tidy`)",
        ),
        (
            "go: updates to go.mod needed",
            "update go.mod (`go mod tidy`)",
        ),
        ("go: errors parsing go.mod", "fix go.mod"),
    ];
    output.lines().map(str::trim).find_map(|line| {
        let (_, fix) = SIGNS.iter().find(|(sign, _)| {
            line.contains(sign)
                && (*sign != "is not installed" || line.starts_with("error: toolchain"))
                && (*sign != "linker `" || line.contains("not found"))
        })?;
        Some(Diagnosis {
            severity: Severity::CannotRun,
            rule: "its toolchain cannot build the tests",
            evidence: line.to_string(),
            fix: format!("{fix}, {SET_VERIFY}"),
        })
    })
}

/// pytest's exit 5 (and any runner's summary of no test): it runs, but no
/// test was collected. Said, never stopped: writing the first tests may be
/// the task.
fn no_tests_collected(code: i32, output: &str, result: &VerifyResult) -> Option<Diagnosis> {
    let none_counted = result.counts.is_some_and(|c| c.run == 0 && c.skipped == 0);
    let pytest_none = code == 5 && line_with(output, "no tests ran").is_some();
    if !(pytest_none || none_counted) {
        return None;
    }
    Some(Diagnosis {
        severity: Severity::Warning,
        rule: "it collected no test",
        evidence: line_with(output, "no tests ran")
            .map_or_else(|| format!("exit {code}"), str::to_string),
        fix: format!(
            "every claim is rejected until it finds tests: point it at them (a folder, a file \
             pattern) unless writing them is the task, {SET_VERIFY}"
        ),
    })
}

/// The first of the project's virtual environments (a folder of
/// [`VENV_FOLDERS`] with a `pyvenv.cfg` and a `bin/python`) that has
/// `module` installed, by name (`.venv`): what a Python check of the
/// project can run with when the system's Python has not the module.
pub fn venv_with_module(root: &Path, module: &str) -> Option<String> {
    venv_with(root, |venv| {
        venv.join("bin").join("python").exists() && module_in_venv(venv, module)
    })
}

/// The first of the project's virtual environments (a folder of
/// [`VENV_FOLDERS`] with a `pyvenv.cfg`) for which `has` holds, by name.
fn venv_with(root: &Path, has: impl Fn(&Path) -> bool) -> Option<String> {
    VENV_FOLDERS.iter().find_map(|name| {
        let venv = root.join(name);
        (venv.join("pyvenv.cfg").is_file() && has(&venv)).then(|| name.to_string())
    })
}

/// Whether `module` is installed in `venv` (its `site-packages` holds a
/// package, a module file or a distribution of that name).
fn module_in_venv(venv: &Path, module: &str) -> bool {
    let Ok(versions) = std::fs::read_dir(venv.join("lib")) else {
        return false;
    };
    versions.flatten().take(16).any(|version| {
        let site = version.path().join("site-packages");
        site.join(module).is_dir()
            || site.join(format!("{module}.py")).is_file()
            || std::fs::read_dir(&site).is_ok_and(|entries| {
                entries.flatten().take(4096).any(|e| {
                    let name = e.file_name().to_string_lossy().to_lowercase();
                    name.starts_with(&format!("{}-", module.to_lowercase()))
                        && name.ends_with(".dist-info")
                })
            })
    })
}

/// Make the project's environment as its maintainers do, and make the
/// check `command` use it (when it is Python's: its program replaced by the
/// environment's Python).
fn make_fix(maker: &EnvironmentMaker, command: &str) -> String {
    let use_it = if is_python_check(command) && !command.starts_with(&maker.python()) {
        format!(
            ", then make the check use it (`ralph-ctl init --verify '{}'`)",
            with_program(command, &maker.python())
        )
    } else {
        String::new()
    };
    format!("{}: run it{use_it}, {SET_VERIFY}", maker.describe())
}

/// Activate `venv`, or make the check use it (`use_it`: the command that
/// does, when ralph can write it).
fn activate_fix(venv: &str, found: &str, use_it: Option<String>) -> String {
    let use_it = match use_it {
        Some(command) => format!(
            "or make the check use it (`ralph-ctl init --verify '{command}'`), or set another check \
             with `ralph-ctl init --verify CMD`"
        ),
        None => format!("or make the check use it, {SET_VERIFY}"),
    };
    format!(
        "{found}, which the check does not use: activate it (`. {venv}/bin/activate`) and start again, \
         {use_it}"
    )
}

/// `command` with its first word, the program, replaced by `program`.
/// Whether `command` runs a Python (`python3`, `/usr/bin/python3.12`) as its
/// first word, which [`with_program`] can then replace.
fn is_python_check(command: &str) -> bool {
    starts_with_program(command)
        && program_of(command).is_some_and(|program| {
            program
                .rsplit('/')
                .next()
                .unwrap_or(&program)
                .starts_with("python")
        })
}

fn with_program(command: &str, program: &str) -> String {
    let (_, rest) = command.trim().split_once(' ').unwrap_or((command, ""));
    match rest.trim() {
        "" => program.to_string(),
        rest => format!("{program} {rest}"),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use crate::observe::test_counts::TestCounts;

    fn result(command: &str, code: Option<i32>, output: &str) -> VerifyResult {
        VerifyResult {
            name: "tests".into(),
            command: command.into(),
            exit_code: code,
            timed_out: false,
            duration_ms: 5,
            output_tail: output.into(),
            counts: crate::observe::test_counts::parse(output),
            by_runner: Vec::new(),
            failure_headers: Vec::new(),
        }
    }

    /// A case: its name, the project's files, the command, its exit code,
    /// its output, and what is wanted.
    type Case<'a, W> = (&'a str, &'a [&'a str], &'a str, Option<i32>, &'a str, W);

    fn project(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in files {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            if !file.ends_with('/') {
                std::fs::write(&path, "").unwrap();
            }
        }
        dir
    }

    /// Each rule, on the real output of the runner it reads (captured on
    /// this project's test machine: Debian 12, Python 3.11, npm 10,
    /// pytest 8, cargo 1.95, go 1.19).
    #[test]
    #[allow(clippy::too_many_lines)] // a table of cases, one per rule
    fn each_rule_finds_a_check_that_cannot_run() {
        let venv_with_pytest = [
            ".venv/pyvenv.cfg",
            ".venv/bin/python",
            ".venv/bin/pytest",
            ".venv/lib/python3.11/site-packages/pytest/__init__.py",
        ];
        let cases: &[Case<Option<(&str, &str)>>] = &[
            (
                "the runner's module only in an unactivated venv",
                &venv_with_pytest,
                "python3 -m pytest",
                Some(1),
                "/root/.pyenv/versions/3.11.7/bin/python3: No module named pytest\n",
                Some((
                    "a module it needs is not installed",
                    "`pytest` is installed in .venv, which the check does not use: activate it (`. .venv/bin/activate`)",
                )),
            ),
            (
                "the venv's fix names the venv's python",
                &venv_with_pytest,
                "python3 -m pytest -q",
                Some(1),
                "/usr/bin/python3: No module named pytest\n",
                Some((
                    "a module",
                    "`ralph-ctl init --verify '.venv/bin/python -m pytest -q'`",
                )),
            ),
            (
                "a venv without the module",
                &[".venv/pyvenv.cfg"],
                "python3 -m pytest",
                Some(1),
                "/usr/bin/python3: No module named pytest\n",
                Some(("a module", "`.venv/bin/python -m pip install pytest`")),
            ),
            (
                "no venv at all",
                &[],
                "python3 -m pytest",
                Some(1),
                "/usr/bin/python3: No module named pytest\n",
                Some(("a module", "`python3 -m pip install pytest`")),
            ),
            (
                "a dependency of the tests missing",
                &["tests/test_a.py"],
                "python3 -m unittest discover -s tests",
                Some(1),
                "E\n======================================================================\n\
                 ERROR: test_a (unittest.loader._FailedTest.test_a)\n\
                 ImportError: Failed to import test module: test_a\n\
                 ModuleNotFoundError: No module named 'numpy'\n\
                 Ran 1 test in 0.000s\n\nFAILED (errors=1)\n",
                Some(("a module", "install `numpy`")),
            ),
            (
                "the program not found, and in the venv",
                &[".venv/pyvenv.cfg", ".venv/bin/pytest"],
                "pytest -x",
                Some(127),
                "sh: 1: pytest: not found\n",
                Some((
                    "its program was not found",
                    "`pytest` is in .venv/bin, which the check does not use: activate it (`. .venv/bin/activate`) and start again, or make the check use it (`ralph-ctl init --verify '.venv/bin/pytest -x'`)",
                )),
            ),
            (
                "the program not found anywhere",
                &[],
                "make test",
                Some(127),
                "sh: 1: make: not found\n",
                Some(("its program was not found", "install `make`")),
            ),
            (
                "npm's runner not installed",
                &["package.json"],
                "npm test",
                Some(127),
                "\n> test\n> mocha\n\nsh: 1: mocha: not found\n",
                Some(("its program was not found", "`npm ci`")),
            ),
            (
                "make's report of the shell's 127",
                &[],
                "make test",
                Some(2),
                "python3 -m nose\nmake: python3: No such file or directory\nmake: *** [Makefile:2: test] Error 127\n",
                Some(("its program was not found", "install `python3`")),
            ),
            (
                "bash's wording",
                &[],
                "bash -c tox",
                Some(127),
                "bash: line 1: tox: command not found\n",
                Some(("its program was not found", "install `tox`")),
            ),
            (
                "not executable",
                &[],
                "./run-tests.sh",
                Some(126),
                "sh: 1: ./run-tests.sh: Permission denied\n",
                Some(("cannot be executed", "chmod +x")),
            ),
            (
                "npm's missing script",
                &["package.json"],
                "npm test",
                Some(1),
                "npm error Missing script: \"test\"\nnpm error\nnpm error To see a list of scripts, run:\nnpm error   npm run\n",
                Some(("no such script", "\"scripts\"")),
            ),
            (
                "node's package missing",
                &["package.json"],
                "node --test",
                Some(1),
                "node:internal/modules/cjs/loader:1228\n  throw err;\n  ^\n\nError: Cannot find module 'chai'\nRequire stack:\n",
                Some(("a package it needs", "`npm ci`")),
            ),
            (
                "pytest's usage error",
                &[],
                "python3 -m pytest --bogus",
                Some(4),
                "ERROR: usage: __main__.py [options] [file_or_dir] [file_or_dir] [...]\n__main__.py: error: unrecognized arguments: --bogus\n",
                Some(("refused its arguments", "ERROR: usage")),
            ),
            (
                "pytest's missing path",
                &[],
                "python3 -m pytest tests",
                Some(4),
                "ERROR: file or directory not found: tests\n\n\n============================ no tests ran in 0.00s =============================\n",
                Some(("refused its arguments", "not found: tests")),
            ),
            (
                "pytest's internal error",
                &[],
                "python3 -m pytest",
                Some(3),
                "INTERNALERROR> Traceback (most recent call last):\nINTERNALERROR> ValueError: bad\n",
                Some(("refused its arguments", "INTERNALERROR>")),
            ),
            (
                "cargo without a manifest",
                &[],
                "cargo test",
                Some(101),
                "error: could not find `Cargo.toml` in `/p` or any parent directory\n",
                Some(("its toolchain", "crate's folder")),
            ),
            (
                "cargo without the subcommand",
                &[],
                "cargo nextest run",
                Some(101),
                "error: no such command: `nextest`\n\n\tView all installed commands with `cargo --list`\n",
                Some(("its toolchain", "subcommand")),
            ),
            (
                "go without its module's dependency",
                &[],
                "go test ./...",
                Some(1),
                "x_test.go:4:2: no required module provides package github.com/pkg/errors; to add it:\n\tgo get github.com/pkg/errors\n",
                Some(("its toolchain", "go get")),
            ),
            (
                "go outside its module",
                &[],
                "go test ./...",
                Some(1),
                "go: go.mod file not found in current directory or any parent directory; see 'go help modules'\n",
                Some(("its toolchain", "go.mod")),
            ),
            (
                "a check the walls refused to start",
                &[],
                "make test",
                None,
                "walls are required (sandbox: on) but bubblewrap is missing\n",
                Some(("could not be started", "walls are required")),
            ),
            (
                "pytest collected nothing: a warning",
                &[],
                "python3 -m pytest",
                Some(5),
                "============================ no tests ran in 0.01s =============================\n",
                Some(("it collected no test", "rejected until it finds tests")),
            ),
        ];
        for (name, files, command, code, output, want) in cases {
            let dir = project(files);
            let got = diagnose(dir.path(), &result(command, *code, output));
            match (want, &got) {
                (None, None) => {}
                (Some((rule, fix)), Some(d)) => {
                    let text = d.describe(command);
                    assert!(text.contains(rule), "{name}: {text}");
                    assert!(text.contains(fix), "{name}: {text}");
                    assert!(text.contains("ralph-ctl init --verify"), "{name}: {text}");
                    let warning = *rule == "it collected no test";
                    assert_eq!(d.severity == Severity::Warning, warning, "{name}");
                }
                _ => panic!("{name}: want {want:?}, got {got:?}"),
            }
        }
    }

    /// Tests that run and fail are the loop's work, never "cannot run".
    #[test]
    fn a_check_that_runs_and_fails_can_run() {
        let cases: &[Case<()>] = &[
            (
                "pytest with failures",
                &[],
                "python3 -m pytest",
                Some(1),
                "FAILED test_x.py::test_b - assert 1 == 2\n==== 1 failed, 3 passed in 0.12s ====\n",
                (),
            ),
            (
                "unittest failing",
                &[],
                "python3 -m unittest",
                Some(1),
                "F\n======================================================================\n\
                 FAIL: test_add (test_calc.AddTest.test_add)\n\
                 AssertionError: 0 != 4\n\nRan 1 test in 0.000s\n\nFAILED (failures=1)\n",
                (),
            ),
            (
                "the project's own module missing: the loop's to write",
                &["calc/__init__.py"],
                "python3 -m pytest",
                Some(2),
                "E   ModuleNotFoundError: No module named 'calc.parser'\n\
                 !!!!!!!!!!!!!!!!!!!! Interrupted: 1 error during collection !!!!!!!!!!!!!!!!!!!!\n\
                 =============================== 1 error in 0.05s ===============================\n",
                (),
            ),
            (
                "a missing dependency while other tests pass",
                &[],
                "python3 -m pytest",
                Some(1),
                "ModuleNotFoundError: No module named 'numpy'\n==== 1 failed, 30 passed in 1.2s ====\n",
                (),
            ),
            (
                "failing tests of an option still to write, none passing",
                &[],
                "python3 -m pytest",
                Some(1),
                "E   SystemExit: 2\n----- Captured stderr call -----\n\
                 usage: tool [-h]\ntool: error: unrecognized arguments: --verbose\n\
                 FAILED test_cli.py::test_verbose - SystemExit: 2\n==== 1 failed in 0.05s ====\n",
                (),
            ),
            (
                "a compile error in the code: the loop's to fix",
                &[],
                "cargo test",
                Some(101),
                "error[E0425]: cannot find value `x` in this scope\nerror: could not compile `vi` (lib test) due to 1 previous error\n",
                (),
            ),
            (
                "make's failure over a failing test",
                &[],
                "make test",
                Some(2),
                "./run-tests\nFAIL: adds\nmake: *** [Makefile:4: test] Error 1\n",
                (),
            ),
            (
                "a plain failure",
                &[],
                "sh check.sh",
                Some(1),
                "the output differs\n",
                (),
            ),
            ("a pass", &[], "true", Some(0), "", ()),
        ];
        for (name, files, command, code, output, ()) in cases {
            let dir = project(files);
            let got = diagnose(dir.path(), &result(command, *code, output));
            assert_eq!(got, None, "{name}");
        }
        // Counted tests of which some passed: it runs, whatever else it says.
        let mut ran = result("python3 -m pytest", Some(4), "ERROR: something\n");
        ran.counts = Some(TestCounts::new(3, 1, 0));
        assert_eq!(diagnose(Path::new("/"), &ran), None);
    }
}
