//! What each verify command runs, fixed at the loop's start
//! (`checkResolution` in the state) and read again at every completion
//! claim: a claim whose check resolves differently is rejected, naming what
//! changed. The config's command text is pinned, but the shell and the
//! runners look things up in the project the agent writes: `python3 -m
//! unittest` imports `./unittest/` before the standard library's, `npm
//! test` runs `scripts.test` of package.json, `make test` the Makefile's
//! recipe, `./node_modules/.bin/jest` whatever is there now.
//!
//! The rule, for each simple command of the line (split at `;`, `&&`,
//! `||`, `|` and newlines, quotes kept; `cd DIR` moves the folder the next
//! ones are resolved from; leading `VAR=value` words, `env`, `exec`,
//! `command`, `time`, `nice`, `nohup` and `timeout` are looked through):
//!
//! - **the program**, found as the shell would: a word with a `/` from the
//!   current folder, else a builtin, else the first executable on `PATH`
//!   (the `PATH` of the loop's start, recorded with the rest; relative
//!   entries from the current folder). One inside the project is recorded
//!   with a hash of its content (symlinks followed), one outside by its path;
//! - **`python`/`python3 -m MODULE`**: the project-local files Python would
//!   import for MODULE with the current folder first on `sys.path`
//!   (`MODULE.py`, `MODULE/__init__.py`, `MODULE/__main__.py`, a compiled
//!   `MODULE.*.so`/`.pyc`, for each dotted prefix), with their hashes; none
//!   at the start and one now is a change;
//! - **`sh`/`bash FILE`**: the script, when inside the project;
//! - **`npm test`, `npm run X`, `yarn X`, `pnpm X`** (and `npx`/`exec`
//!   forms): the `scripts` entry (with its `pre`/`post` scripts) of the
//!   nearest package.json, itself resolved by this same rule (with
//!   `node_modules/.bin` first on the path); a name that is no script is a
//!   program of `node_modules/.bin`;
//! - **`make`**: the Makefile (`GNUmakefile`, `makefile`, `Makefile`, or
//!   `-f FILE`) by its whole content: any change of it is a change of the
//!   check (a recipe is not parsed, and the variables, includes and
//!   pattern rules that decide it live in the same file);
//! - **`cargo`**: `.cargo/config.toml` (and `.cargo/config`) and the
//!   `rust-toolchain` files of the folder and every folder above it up to
//!   the project root (aliases, runners, a toolchain by path);
//! - **`go`**: `go.work` of the folder and the folders above it;
//! - **`npm`, `npx`, `pnpm`, `yarn`**: also `.npmrc` (and yarn's `.yarnrc`,
//!   `.yarnrc.yml`) of the folder and every folder above it up to the
//!   project root: `node-options=--require ./x.js` there preloads a file
//!   into every `node` the script starts, and `script-shell` replaces the
//!   shell that runs the scripts;
//! - **a command that runs Python** (`python`, a program whose `#!` line
//!   names Python, a makefile or script that may): the files that would
//!   stand in for its standard library or run at its start, found again
//!   at each claim, one added is a change (see [`python`]; its
//!   interpreter is asked once, at the start).
//!
//! The test runners' own configuration (`conftest.py`, `pytest.ini`, …)
//! is `protectedPaths`' (see [`crate::observe::protected`]).
//!
//! Bounded: no subprocess but the interpreter asked at the start (with
//! [`python::ASK_TIMEOUT`]), at most [`MAX_COMMANDS`] simple commands per
//! line, scripts followed [`MAX_DEPTH`] deep, files read with
//! [`read_bounded`] up to [`HASHED_BYTES`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::files::{Bounded, read_bounded};
use crate::fnv::Fnv;
use crate::observe::verify::VerifyCommand;
use crate::walls::Walls;

pub mod python;
mod shell_words;
mod stdlib_names;
pub use python::{PythonRuntime, Shadow, ShadowKind};
use shell_words::{leading_assignments, look_through, words};
pub use shell_words::{program_of, split_command, starts_with_program};
pub use stdlib_names::STDLIB_NAMES;

/// The folders whose files are the project's: the one the check runs in
/// (a worktree, or the project) and the project's own.
struct Roots<'a> {
    work: &'a Path,
    project: &'a Path,
}

/// Bytes of a file hashed at most (past that, the file counts as its size).
pub const HASHED_BYTES: u64 = 16 * 1024 * 1024;
/// Simple commands resolved per command line at most.
pub const MAX_COMMANDS: usize = 64;
/// How deep a package.json script is followed into the commands it runs.
pub const MAX_DEPTH: usize = 2;
/// Entries of a folder read at most when looking for a Python module.
const MAX_DIR_ENTRIES: usize = 10_000;

/// What every verify command resolved to at the loop's start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedChecks {
    /// The `PATH` the programs were looked up on (the same one is used at
    /// every claim, so that a client's own `PATH` changes nothing).
    #[serde(default)]
    pub path: String,
    /// The `PYTHONPATH` of the loop's start (its folders come before the
    /// standard library), used at every claim likewise.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub python_path: String,
    /// The Python interpreters the checks run, as asked at the start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pythons: Vec<PythonRuntime>,
    /// Each command line's resolution.
    #[serde(default)]
    pub commands: Vec<ResolvedCommand>,
}

/// What one verify command line resolves to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCommand {
    /// The command line, as configured.
    pub command: String,
    /// What each part of it runs.
    #[serde(default)]
    pub targets: Vec<Target>,
    /// The files standing in for its Python's standard library or run at
    /// its start, at the loop's start (`None`: it runs no Python, or the
    /// loop was started before they were looked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadows: Option<Vec<Shadow>>,
}

/// One thing a command line runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// The words that name it (`python3 -m unittest`, `npm test`, `make`).
    pub what: String,
    /// What it runs, in words (`/usr/bin/python3`, `./unittest/__main__.py`,
    /// `` `node --test` ``).
    pub runs: String,
    /// The content hash of what it runs, when that lies in the project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
}

/// Resolves `commands` from the project `root` on `path` (`None`: this
/// process's `PATH`), asking each Python interpreter they run for its
/// standard library's names inside `walls` (the checks' own).
pub fn resolve(
    root: &Path,
    commands: &[VerifyCommand],
    path: Option<&str>,
    walls: &Walls,
) -> ResolvedChecks {
    resolve_in(root, root, commands, path, walls)
}

/// [`resolve`] from `root`, a worktree of `project` (a file in either
/// counts as the project's, as at a claim: see [`changes`]): a new
/// worktree's start.
pub fn resolve_in(
    root: &Path,
    project: &Path,
    commands: &[VerifyCommand],
    path: Option<&str>,
    walls: &Walls,
) -> ResolvedChecks {
    let root = &Roots {
        work: root,
        project,
    };
    let path = path.map_or_else(|| std::env::var("PATH").unwrap_or_default(), str::to_string);
    let python_path = std::env::var("PYTHONPATH").unwrap_or_default();
    let mut pythons: Vec<PythonRuntime> = Vec::new();
    let commands = commands
        .iter()
        .map(|c| {
            let found = resolve_line(root, &c.command, &path);
            let shadows = (!found.calls.is_empty()).then(|| {
                let mut shadows = Vec::new();
                for call in &found.calls {
                    let runtime = if let Some(known) = pythons
                        .iter()
                        .find(|r| r.interpreter == call.interpreter_shown)
                    {
                        known.clone()
                    } else {
                        let asked = python::ask(call, walls);
                        pythons.push(asked.clone());
                        asked
                    };
                    shadows.extend(python::shadows_of(root, call, &runtime, &python_path));
                }
                python::dedup(shadows)
            });
            ResolvedCommand {
                command: c.command.clone(),
                targets: found.targets,
                shadows,
            }
        })
        .collect();
    ResolvedChecks {
        path,
        python_path,
        pythons,
        commands,
    }
}

/// What changed since `before` (empty: nothing), one sentence each, for the
/// commands of `before` that are still configured in `commands` (a command
/// added since has no start to compare with), resolved from `root` (a
/// worktree of `project`, or `project` itself: a file in either counts as
/// the project's).
pub fn changes(
    root: &Path,
    project: &Path,
    before: &ResolvedChecks,
    commands: &[VerifyCommand],
) -> Vec<String> {
    let root = &Roots {
        work: root,
        project,
    };
    let mut out = Vec::new();
    for then in &before.commands {
        if !commands.iter().any(|c| c.command == then.command) {
            continue;
        }
        let found = resolve_line(root, &then.command, &before.path);
        if let Some(shadows) = &then.shadows {
            let now = current_shadows(root, before, &found.calls);
            out.extend(python::shadow_changes(shadows, &now, &before.pythons));
        }
        let now = found.targets;
        for target in &now {
            match then.targets.iter().find(|t| t.what == target.what) {
                Some(old) if old == target => {}
                Some(old) if old.runs == target.runs => out.push(format!(
                    "`{}` now runs {} as changed since the loop's start",
                    target.what, target.runs
                )),
                Some(old) => out.push(format!(
                    "`{}` now runs {}, not the one at the loop's start ({})",
                    target.what, target.runs, old.runs
                )),
                None => out.push(format!(
                    "`{}` now runs {}, which the check did not run at the loop's start",
                    target.what, target.runs
                )),
            }
        }
        for old in &then.targets {
            if !now.iter().any(|t| t.what == old.what) {
                out.push(format!(
                    "`{}` no longer runs {} (the check's commands changed since the loop's start)",
                    old.what, old.runs
                ));
            }
        }
    }
    out
}

/// The files found now for `calls` with the Python recorded at the start
/// (an interpreter not asked then: ralph's built-in list).
fn current_shadows(
    root: &Roots,
    before: &ResolvedChecks,
    calls: &[python::PythonCall],
) -> Vec<Shadow> {
    let mut out = Vec::new();
    for call in calls {
        let runtime = before
            .pythons
            .iter()
            .find(|r| r.interpreter == call.interpreter_shown)
            .cloned()
            .unwrap_or_else(|| {
                python::built_in(
                    &call.interpreter_shown,
                    "it was not run by the check at the loop's start".into(),
                )
            });
        out.extend(python::shadows_of(
            root,
            call,
            &runtime,
            &before.python_path,
        ));
    }
    python::dedup(out)
}

/// What one command line runs: its targets, and each simple command of
/// it that runs Python.
#[derive(Default)]
struct Found {
    targets: Vec<Target>,
    calls: Vec<python::PythonCall>,
}

/// The targets of one command line.
fn resolve_line(root: &Roots, line: &str, path: &str) -> Found {
    let mut out = Found::default();
    let mut cwd = root.work.to_path_buf();
    resolve_into(root, &mut cwd, line, path, 0, &mut out);
    out
}

fn resolve_into(
    root: &Roots,
    cwd: &mut PathBuf,
    line: &str,
    path: &str,
    depth: usize,
    out: &mut Found,
) {
    for simple in split_command(line).iter().take(MAX_COMMANDS) {
        let words = words(simple);
        let (assigned, words) = leading_assignments(&words);
        let path = assigned
            .iter()
            .find(|(k, _)| k == "PATH")
            .map_or(path, |(_, v)| v.as_str());
        let words = look_through(words);
        let Some(program) = words.first() else {
            continue;
        };
        if program == "cd" {
            if let Some(dir) = words.get(1) {
                *cwd = cwd.join(dir);
            }
            continue;
        }
        let shown = words.join(" ");
        out.targets.push(program_target(root, cwd, program, path));
        let name = Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let args = &words[1..];
        let is_shell = matches!(name.as_str(), "sh" | "bash" | "dash" | "zsh");
        let inline = args
            .iter()
            .position(|a| a == "-c")
            .and_then(|at| args.get(at + 1));
        match inline {
            // `sh -c 'LINE'`: the Python that LINE runs, if any.
            Some(line) if is_shell => {
                if depth < MAX_DEPTH {
                    let mut inner = Found::default();
                    resolve_into(root, &mut cwd.clone(), line, path, depth + 1, &mut inner);
                    out.calls.append(&mut inner.calls);
                }
            }
            _ if BUILTINS.contains(&program.as_str()) => {}
            _ => out
                .calls
                .extend(python::call_of(cwd, program, args, &assigned, path, &shown)),
        }
        let targets = &mut out.targets;
        match name.as_str() {
            n if is_python(n) => targets.extend(python_target(root, cwd, &shown, args)),
            "sh" | "bash" | "dash" | "zsh" => {
                if let Some(script) = args.iter().find(|a| !a.starts_with('-'))
                    && !args.iter().any(|a| a == "-c")
                {
                    targets.push(file_target(root, &shown, &cwd.join(script)));
                }
            }
            "npm" | "yarn" | "pnpm" | "npx" if depth < MAX_DEPTH => {
                let invocation = Invocation {
                    tool: &name,
                    shown: &shown,
                    args,
                };
                node_targets(root, cwd, &invocation, path, depth, out);
            }
            "make" | "gmake" => targets.push(make_target(root, cwd, &shown, args)),
            "cargo" => targets.extend(config_files(
                root,
                cwd,
                &shown,
                &[
                    ".cargo/config.toml",
                    ".cargo/config",
                    "rust-toolchain.toml",
                    "rust-toolchain",
                ],
            )),
            "go" => targets.extend(config_files(root, cwd, &shown, &["go.work"])),
            _ => {}
        }
    }
}

/// The shell's builtins that are never looked up on `PATH`.
const BUILTINS: &[&str] = &[
    ":", ".", "[", "alias", "break", "cd", "command", "continue", "echo", "eval", "exec", "exit",
    "export", "false", "getopts", "hash", "kill", "printf", "pwd", "read", "readonly", "return",
    "set", "shift", "source", "test", "times", "trap", "true", "type", "ulimit", "umask",
    "unalias", "unset", "wait",
];

/// The program of a simple command.
fn program_target(root: &Roots, cwd: &Path, program: &str, path: &str) -> Target {
    let what = program.to_string();
    if program.contains('/') {
        return file_target(root, &what, &cwd.join(program));
    }
    if BUILTINS.contains(&program) {
        return Target {
            what,
            runs: "the shell's builtin".into(),
            hash: None,
        };
    }
    match which(cwd, program, path) {
        Some(found) => file_target(root, &what, &found),
        None => Target {
            what,
            runs: "nothing (not found on PATH)".into(),
            hash: None,
        },
    }
}

/// The first executable regular file named `program` on `path`.
fn which(cwd: &Path, program: &str, path: &str) -> Option<PathBuf> {
    path.split(':').find_map(|dir| {
        let dir = if dir.is_empty() {
            cwd.to_path_buf()
        } else {
            cwd.join(dir)
        };
        let candidate = dir.join(program);
        is_executable(&candidate).then_some(candidate)
    })
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// `path` made lexically absolute and clean (no `.` or `..`).
fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// `path` relative to the project, when it lies inside it (symlinks
/// followed where they can be).
fn inside(root: &Roots, path: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| clean(path));
    for root in [root.work, root.project] {
        let root_real = std::fs::canonicalize(root).unwrap_or_else(|_| clean(root));
        if let Ok(rel) = real.strip_prefix(&root_real) {
            return Some(rel.to_path_buf());
        }
        if let Ok(rel) = clean(path).strip_prefix(clean(root)) {
            return Some(rel.to_path_buf());
        }
    }
    None
}

/// `./rel` in the project's words.
fn shown(rel: &Path) -> String {
    format!("./{}", rel.to_string_lossy())
}

/// The hash of a file's content: `None` when it is missing.
fn content_hash(path: &Path) -> Option<String> {
    match read_bounded(path, HASHED_BYTES) {
        Ok(Bounded::Missing) => None,
        Ok(Bounded::Bytes(bytes)) => Some(crate::fnv::hex(&bytes)),
        Ok(Bounded::TooLarge) => {
            let len = std::fs::metadata(path).map_or(0, |m| m.len());
            Some(format!("large:{len}"))
        }
        Err(e) => Some(format!("unreadable:{}", e.kind())),
    }
}

/// A file the command runs: inside the project by its content, outside by
/// its path.
fn file_target(root: &Roots, what: &str, path: &Path) -> Target {
    match inside(root, path) {
        Some(rel) => {
            let hash = content_hash(path);
            Target {
                what: what.to_string(),
                runs: if hash.is_some() {
                    shown(&rel)
                } else {
                    format!("nothing ({} does not exist)", shown(&rel))
                },
                hash,
            }
        }
        None => Target {
            what: what.to_string(),
            runs: clean(path).to_string_lossy().into_owned(),
            hash: None,
        },
    }
}

fn is_python(name: &str) -> bool {
    let rest = name
        .strip_prefix("python")
        .or_else(|| name.strip_prefix("pypy"));
    rest.is_some_and(|r| r.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// `python -m MODULE`: the project-local files Python would import for it
/// with the current folder first on `sys.path`.
fn python_target(root: &Roots, cwd: &Path, shown_words: &str, args: &[String]) -> Option<Target> {
    let mut i = 0;
    let module = loop {
        let arg = args.get(i)?;
        match arg.as_str() {
            "-m" => break args.get(i + 1)?.clone(),
            a if a.starts_with("-m") => break a[2..].to_string(),
            "-W" | "-X" => i += 2,
            "-c" => return None,
            a if a.starts_with('-') => i += 1,
            _ => return None,
        }
    };
    let what = shown_words.split_once(&module).map_or_else(
        || shown_words.to_string(),
        |(before, _)| format!("{before}{module}"),
    );
    let parts: Vec<&str> = module.split('.').filter(|p| !p.is_empty()).collect();
    let mut found: Vec<PathBuf> = Vec::new();
    let mut dir = cwd.to_path_buf();
    for (n, part) in parts.iter().enumerate() {
        let last = n + 1 == parts.len();
        let package = dir.join(part);
        found.extend(
            ["__init__.py", "__init__.pyc"]
                .iter()
                .map(|f| package.join(f))
                .filter(|p| p.is_file()),
        );
        if last {
            let main = package.join("__main__.py");
            if main.is_file() {
                found.push(main);
            }
        }
        found.extend(module_files(&dir, part));
        dir = package;
    }
    let hash = (!found.is_empty()).then(|| {
        let mut fnv = Fnv::new();
        for file in &found {
            fnv.bytes(file.to_string_lossy().as_bytes());
            fnv.bytes(content_hash(file).unwrap_or_default().as_bytes());
        }
        format!("{:016x}", fnv.finish())
    });
    let runs = if found.is_empty() {
        "the installed module (none in the project)".to_string()
    } else {
        found
            .iter()
            .map(|f| inside(root, f).map(|r| shown(&r)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join(" and ")
    };
    Some(Target { what, runs, hash })
}

/// `NAME.py`, `NAME.pyc` and compiled `NAME.*.so` / `NAME.*.pyd` in `dir`.
fn module_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .take(MAX_DIR_ENTRIES)
        .filter_map(Result::ok)
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.strip_prefix(name)
                .and_then(|r| r.strip_prefix('.'))
                .is_some_and(is_module_suffix)
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// What follows a module's name in a file Python imports as that module:
/// `py`, `pyc`, or a compiled extension's `so`/`pyd` (with its tag,
/// `cpython-311-x86_64-linux-gnu.so`).
fn is_module_suffix(rest: &str) -> bool {
    rest == "py"
        || rest == "pyc"
        || rest.ends_with(".so")
        || rest == "so"
        || rest.ends_with(".pyd")
        || rest == "pyd"
}

/// The nearest package.json from `cwd` up to the project root.
fn package_json(root: &Roots, cwd: &Path) -> Option<(PathBuf, serde_json::Value)> {
    let root = clean(root.work);
    let mut dir = clean(cwd);
    loop {
        let file = dir.join("package.json");
        if let Ok(Bounded::Bytes(bytes)) = read_bounded(&file, HASHED_BYTES) {
            let value = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            return Some((dir, value));
        }
        if dir == root || !dir.pop() || !dir.starts_with(&root) {
            return None;
        }
    }
}

/// A package manager's command: which one, its words, its arguments.
struct Invocation<'a> {
    tool: &'a str,
    shown: &'a str,
    args: &'a [String],
}

/// The configuration files a package manager reads from the project: in
/// `.npmrc`, `node-options` preloads code into every `node` a script
/// starts and `script-shell` replaces the shell that runs the scripts.
fn package_manager_config(tool: &str) -> &'static [&'static str] {
    match tool {
        "yarn" => &[".npmrc", ".yarnrc", ".yarnrc.yml"],
        _ => &[".npmrc"],
    }
}

/// `npm test`, `npm run X`, `yarn X`, `pnpm X`, `npx X`: the scripts they
/// run, each resolved again, and the package manager's configuration.
fn node_targets(
    root: &Roots,
    cwd: &Path,
    invocation: &Invocation,
    path: &str,
    depth: usize,
    found: &mut Found,
) {
    let &Invocation {
        tool,
        shown: shown_words,
        args,
    } = invocation;
    let plain: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    // (script name, whether a name that is no script is a program of
    // node_modules/.bin)
    let (name, bin_fallback) = match (tool, plain.as_slice()) {
        ("npx", [bin, ..]) => (*bin, true),
        (_, ["exec" | "dlx", bin, ..]) => (*bin, true),
        ("npm", ["test" | "t" | "tst", ..]) => ("test", false),
        ("npm", ["start", ..]) => ("start", false),
        ("npm", ["run" | "run-script" | "rum" | "urn", script, ..]) => (*script, false),
        ("yarn" | "pnpm", ["run" | "run-script", script, ..]) => (*script, true),
        ("yarn" | "pnpm", ["test" | "t", ..]) => ("test", true),
        ("yarn" | "pnpm", [script, ..])
            if !matches!(*script, "install" | "add" | "remove" | "i") =>
        {
            (*script, true)
        }
        _ => return,
    };
    found.targets.extend(config_files(
        root,
        cwd,
        shown_words,
        package_manager_config(tool),
    ));
    let Some((dir, package)) = package_json(root, cwd) else {
        if bin_fallback {
            found
                .targets
                .push(file_target(root, shown_words, &node_bin(cwd, name)));
        }
        return;
    };
    let bin_path = format!("{}:{path}", node_bin_path(&dir));
    let scripts = package.get("scripts");
    let script = |n: &str| scripts.and_then(|s| s.get(n)).and_then(|s| s.as_str());
    let is_exec = tool == "npx" || plain.first().is_some_and(|p| matches!(*p, "exec" | "dlx"));
    match script(name).filter(|_| !is_exec) {
        Some(_) => {
            for hook in [
                format!("pre{name}"),
                name.to_string(),
                format!("post{name}"),
            ] {
                let (runs, text) = match script(&hook) {
                    Some(t) => (format!("`{t}`"), Some(t)),
                    None if hook == name => continue,
                    None => ("nothing".to_string(), None),
                };
                found.targets.push(Target {
                    what: format!("{shown_words} (scripts.{hook} of package.json)"),
                    runs,
                    hash: None,
                });
                if let Some(text) = text {
                    let mut inner = dir.clone();
                    resolve_into(root, &mut inner, text, &bin_path, depth + 1, found);
                }
            }
        }
        None if bin_fallback => {
            found
                .targets
                .push(file_target(root, shown_words, &node_bin(&dir, name)));
        }
        None => found.targets.push(Target {
            what: format!("{shown_words} (scripts.{name} of package.json)"),
            runs: "nothing (no such script)".into(),
            hash: None,
        }),
    }
}

/// The `node_modules/.bin` folders a package manager puts first on the
/// `PATH` of a script run from `dir`: its own, then every folder's above
/// it (so a worktree's script finds the main checkout's, as npm does by
/// hand), nearest first.
fn node_bin_path(dir: &Path) -> String {
    clean(dir)
        .ancestors()
        .map(|folder| {
            folder
                .join("node_modules/.bin")
                .to_string_lossy()
                .into_owned()
        })
        .collect::<Vec<_>>()
        .join(":")
}

/// The program `name` of the nearest `node_modules/.bin` from `dir` up
/// that has it, else `dir`'s own (which does not exist).
fn node_bin(dir: &Path, name: &str) -> PathBuf {
    let own = clean(dir).join("node_modules/.bin").join(name);
    clean(dir)
        .ancestors()
        .map(|folder| folder.join("node_modules/.bin").join(name))
        .find(|program| is_executable(program))
        .unwrap_or(own)
}

/// `make`: the makefile it reads, by its whole content.
fn make_target(root: &Roots, cwd: &Path, shown_words: &str, args: &[String]) -> Target {
    let mut dir = cwd.to_path_buf();
    let mut file: Option<PathBuf> = None;
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-C" | "--directory" => {
                if let Some(d) = args.get(i + 1) {
                    dir = dir.join(d);
                }
                i += 1;
            }
            "-f" | "--file" | "--makefile" => {
                file = args.get(i + 1).map(PathBuf::from);
                i += 1;
            }
            a if a.starts_with("-C") && a.len() > 2 => dir = dir.join(&a[2..]),
            a if a.starts_with("-f") && a.len() > 2 => file = Some(PathBuf::from(&a[2..])),
            _ => {}
        }
        i += 1;
    }
    let path = match file {
        Some(f) => dir.join(f),
        None => ["GNUmakefile", "makefile", "Makefile"]
            .iter()
            .map(|n| dir.join(n))
            .find(|p| p.is_file())
            .unwrap_or_else(|| dir.join("Makefile")),
    };
    let mut target = file_target(root, "", &path);
    target.what = format!("{shown_words} (its makefile)");
    target
}

/// Configuration files of `names` in `cwd` and every folder above it up
/// to the project root, each a target (absent ones too: one added is a
/// change).
fn config_files(root: &Roots, cwd: &Path, shown_words: &str, names: &[&str]) -> Vec<Target> {
    let root = clean(root.work);
    let mut dir = clean(cwd);
    let mut out = Vec::new();
    for _ in 0..64 {
        if !dir.starts_with(&root) {
            break;
        }
        for name in names {
            let file = dir.join(name);
            let rel = file.strip_prefix(&root).unwrap_or(&file).to_path_buf();
            let hash = content_hash(&file);
            out.push(Target {
                what: format!("{shown_words} (reads {})", shown(&rel)),
                runs: match &hash {
                    Some(_) => shown(&rel),
                    None => "no such file".into(),
                },
                hash,
            });
        }
        if dir == root || !dir.pop() {
            break;
        }
    }
    out
}

#[cfg(all(test, unix))]
mod tests;
