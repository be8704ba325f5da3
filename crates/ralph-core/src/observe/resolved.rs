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
pub use shell_words::split_command;
use shell_words::{leading_assignments, look_through, words};
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
mod tests {
    use super::*;
    use crate::walls::{Mechanism, WallsWanted};
    use std::os::unix::fs::PermissionsExt;
    use tempfile::TempDir;

    fn check(command: &str) -> Vec<VerifyCommand> {
        vec![VerifyCommand {
            name: "tests".into(),
            command: command.into(),
            timeout_seconds: 60,
            network: false,
        }]
    }

    /// A project with `files`, resolved at the start with `command`; then
    /// `change` applied; the changes named.
    fn changed_after(
        files: &[(&str, &str)],
        command: &str,
        change: impl FnOnce(&Path),
    ) -> Vec<String> {
        changed_after_setup(files, |_| {}, command, change)
    }

    /// [`changed_after`], with `setup` run on the project before the start.
    fn changed_after_setup(
        files: &[(&str, &str)],
        setup: impl FnOnce(&Path),
        command: &str,
        change: impl FnOnce(&Path),
    ) -> Vec<String> {
        let dir = TempDir::new().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        setup(dir.path());
        let commands = check(command);
        let path = format!("{}:/usr/bin:/bin", dir.path().join("bin").display());
        let before = resolve(dir.path(), &commands, Some(&path), &Walls::open());
        assert!(changes(dir.path(), dir.path(), &before, &commands).is_empty());
        change(dir.path());
        changes(dir.path(), dir.path(), &before, &commands)
    }

    fn write(root: &Path, name: &str, text: &str) {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn executable(root: &Path, name: &str, text: &str) {
        write(root, name, text);
        std::fs::set_permissions(root.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn a_python_module_shadowing_the_installed_one_is_named() {
        let changes = changed_after(&[], "python3 -m unittest", |root| {
            write(root, "unittest/__init__.py", "");
            write(root, "unittest/__main__.py", "print('OK')");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with(
                "`python3 -m unittest` now runs ./unittest/__init__.py and ./unittest/__main__.py, \
                 not the one at the loop's start (the installed module"
            ),
            "{changes:?}"
        );
        for shadow in [
            "pytest.py",
            "pytest/__init__.py",
            "pytest.cpython-311-x86_64-linux-gnu.so",
        ] {
            let changes = changed_after(&[], "cd sub && python -m pytest -q", |root| {
                write(root, &format!("sub/{shadow}"), "x");
            });
            assert_eq!(changes.len(), 1, "{shadow}: {changes:?}");
        }
    }

    #[test]
    fn a_project_module_the_check_ran_may_not_change() {
        let changes = changed_after(
            &[("tools/__init__.py", ""), ("tools/check.py", "ok")],
            "python3 -m tools.check",
            |root| write(root, "tools/check.py", "print('OK')"),
        );
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].contains("as changed since the loop's start"),
            "{changes:?}"
        );
        // Code the module does not resolve to is free.
        assert!(
            changed_after(&[], "python3 -m unittest", |root| write(
                root, "calc.py", "x"
            ))
            .is_empty()
        );
    }

    #[test]
    fn the_program_is_found_as_the_shell_would() {
        // A project folder on PATH: a runner placed there is a change.
        let changes = changed_after(&[], "pytest -q", |root| {
            executable(root, "bin/pytest", "#!/bin/sh\necho ok\n");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with("`pytest` now runs ./bin/pytest, not"),
            "{changes:?}"
        );
        // A relative program: its content.
        let changes = changed_after(
            &[("node_modules/.bin/jest", "real")],
            "./node_modules/.bin/jest --ci",
            |root| write(root, "node_modules/.bin/jest", "echo ok"),
        );
        assert_eq!(changes.len(), 1, "{changes:?}");
        // A script run by a shell.
        let changes = changed_after(&[("run.sh", "pytest")], "bash run.sh", |root| {
            write(root, "run.sh", "exit 0");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        // Builtins are the shell's; wrappers and assignments looked through.
        let changes = changed_after(
            &[],
            "true && FOO=1 timeout 60 env -i python3 -m unittest",
            |root| write(root, "unittest.py", ""),
        );
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn npm_scripts_are_the_check() {
        let package = r#"{"scripts": {"test": "node --test"}}"#;
        let changes = changed_after(&[("package.json", package)], "npm test", |root| {
            write(root, "package.json", r#"{"scripts": {"test": "echo ok"}}"#);
        });
        assert!(
            changes.contains(&"`npm test (scripts.test of package.json)` now runs `echo ok`, not the one at the loop's start (`node --test`)".to_string()),
            "{changes:?}"
        );
        // A pretest added is a change too; other keys are free.
        let changes = changed_after(&[("package.json", package)], "npm run test", |root| {
            write(
                root,
                "package.json",
                r#"{"scripts": {"pretest": "exit 0", "test": "node --test"}}"#,
            );
        });
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            changed_after(&[("package.json", package)], "yarn test", |root| write(
                root,
                "package.json",
                r#"{"version": "2.0.0", "scripts": {"test": "node --test"}}"#
            ))
            .is_empty()
        );
        // The script's own programs: node_modules/.bin first.
        let changes = changed_after(
            &[("package.json", r#"{"scripts": {"test": "jest"}}"#)],
            "pnpm test",
            |root| executable(root, "node_modules/.bin/jest", "#!/bin/sh\necho ok\n"),
        );
        assert!(
            changes
                .iter()
                .any(|c| c.starts_with("`jest` now runs ./node_modules/.bin/jest")),
            "{changes:?}"
        );
    }

    #[test]
    fn a_worktree_s_script_finds_the_main_checkout_s_runner_as_npm_does() {
        // The main checkout keeps node_modules out of git; a worktree of it
        // has the package.json only, and npm looks in every folder above.
        let dir = TempDir::new().unwrap();
        let project = dir.path();
        let package = r#"{"scripts": {"test": "mocha"}}"#;
        write(project, "package.json", package);
        executable(project, "node_modules/.bin/mocha", "#!/bin/sh\necho ok\n");
        let tree = project.join(".claude/worktrees/item");
        write(&tree, "package.json", package);
        let commands = check("npm test");
        let before = resolve(project, &commands, Some("/usr/bin:/bin"), &Walls::open());
        assert!(
            before.commands[0]
                .targets
                .iter()
                .any(|t| t.what == "mocha" && t.runs == "./node_modules/.bin/mocha"),
            "{before:?}"
        );
        assert_eq!(
            changes(&tree, project, &before, &commands),
            Vec::<String>::new()
        );
        // The worktree's own runner, where it installs one, comes first.
        executable(&tree, "node_modules/.bin/mocha", "#!/bin/sh\necho other\n");
        let changes = changes(&tree, project, &before, &commands);
        assert!(
            changes
                .iter()
                .any(|c| c.starts_with("`mocha` now runs ./node_modules/.bin/mocha as changed")),
            "{changes:?}"
        );
    }

    #[test]
    fn a_makefile_change_is_a_change_of_the_check() {
        let makefile = "test:\n\tpython3 -m unittest\n";
        let changes = changed_after(&[("Makefile", makefile)], "make test", |root| {
            write(root, "Makefile", "test:\n\t@echo ok\n");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].contains("(its makefile)"), "{changes:?}");
        // A GNUmakefile added is read before the Makefile.
        let changes = changed_after(&[("Makefile", makefile)], "make -C . test", |root| {
            write(root, "GNUmakefile", "test:\n\t@echo ok\n");
        });
        assert!(changes[0].contains("./GNUmakefile"), "{changes:?}");
    }

    #[test]
    fn cargo_and_go_configuration_added_is_a_change() {
        let changes = changed_after(&[], "cargo test", |root| {
            write(root, ".cargo/config.toml", "[alias]\ntest = \"version\"\n");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].contains("./.cargo/config.toml"), "{changes:?}");
        let changes = changed_after(&[], "go test ./...", |root| {
            write(root, "go.work", "go 1.22\n");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    /// What a fake `bin/python3` answers when asked: `difflib`, `json`,
    /// `html`, `random` and `msvcrt` are its standard library, `msvcrt`
    /// missing here, `abc` frozen.
    const ANSWER: &str = r#"{"names": ["difflib", "html", "json", "msvcrt", "random"], "fixed": ["abc", "sys"], "missing": ["msvcrt"], "site": []}"#;

    /// [`changed_after`] with a fake `bin/python3` on `PATH` answering
    /// [`ANSWER`] (its names decide, whatever Python this machine has).
    fn shadowed_after(
        files: &[(&str, &str)],
        command: &str,
        change: impl FnOnce(&Path),
    ) -> Vec<String> {
        let answer = format!("#!/bin/sh\necho '{ANSWER}'\n");
        changed_after_setup(
            files,
            |root| executable(root, "bin/python3", &answer),
            command,
            change,
        )
    }

    #[test]
    fn a_module_the_loop_added_in_place_of_the_standard_librarys_is_named() {
        let project = [
            ("calc.py", "x"),
            ("tests/__init__.py", ""),
            ("tests/test_calc.py", ""),
        ];
        let changes = shadowed_after(&project, "python3 -m unittest", |root| {
            write(root, "difflib.py", "import unittest.result");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        let bin = "bin/python3";
        assert!(
            changes[0].starts_with(
                "`python3 -m unittest` would import ./difflib.py in place of the standard \
                 library's `difflib` (not there at the loop's start; the standard library's \
                 names as /"
            ) && changes[0].contains(&format!("{bin} names them): rename it")),
            "{changes:?}"
        );
        // A package, a compiled module, a folder the tests put first.
        for (file, module) in [
            ("json/__init__.py", "json"),
            ("random.cpython-311-x86_64-linux-gnu.so", "random"),
            ("tests/json.py", "json"),
        ] {
            let changes =
                shadowed_after(&[("tests/test_calc.py", "")], "python3 -m pytest", |root| {
                    write(root, file, "x");
                });
            assert_eq!(changes.len(), 1, "{file}: {changes:?}");
            assert!(
                changes[0].contains(&format!(
                    "./{file} in place of the standard library's `{module}`"
                )),
                "{changes:?}"
            );
        }
    }

    #[test]
    fn what_does_not_shadow_or_was_there_at_the_start_is_free() {
        // The person's own `json.py`, changed by the loop: the project's code.
        assert!(
            shadowed_after(
                &[("json.py", "a"), ("test_a.py", "")],
                "python3 -m unittest",
                |root| write(root, "json.py", "b")
            )
            .is_empty()
        );
        let free = [
            // The test package: not in sys.stdlib_module_names.
            "test/__init__.py",
            "test/test_more.py",
            // A folder without __init__.py: Python takes the real `html`.
            "html/index.html",
            // Built in or frozen: found before any file.
            "abc.py",
            "sys.py",
            // Inside a package: `pkg.random`, not `random`.
            "pkg/__init__.py",
            "pkg/random.py",
            // Not the standard library's.
            "helpers.py",
        ];
        let changes = shadowed_after(&[("test_a.py", "")], "python3 -m unittest", |root| {
            for file in free {
                write(root, file, "x");
            }
        });
        assert!(changes.is_empty(), "{changes:?}");
        // A name this Python has no module of: a bare folder takes its place.
        let changes = shadowed_after(&[], "python3 -m unittest", |root| {
            write(root, "msvcrt/x.py", "");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].contains("import ./msvcrt in place"),
            "{changes:?}"
        );
        // With -I the current folder is not on the path.
        assert!(
            shadowed_after(&[], "python3 -I -m unittest", |root| write(
                root,
                "difflib.py",
                "x"
            ))
            .is_empty()
        );
    }

    #[test]
    fn pythonpath_a_scripts_folder_and_a_makefile_put_their_folders_first() {
        let changes = shadowed_after(&[], "PYTHONPATH=src python3 run.py", |root| {
            write(root, "src/difflib.py", "x");
            write(root, "src/sitecustomize.py", "x");
            write(root, "difflib.py", "x");
        });
        assert_eq!(changes.len(), 3, "{changes:?}");
        assert!(
            changes
                .iter()
                .any(|c| c.contains("./src/sitecustomize.py (`sitecustomize`)")),
            "{changes:?}"
        );
        // pytest's `#!` names Python: its own folder comes first.
        let pytest = "#!/usr/bin/env python3\nimport pytest\n";
        let setup = |root: &Path| {
            executable(root, "bin/pytest", pytest);
            executable(
                root,
                "bin/python3",
                &format!("#!/bin/sh\necho '{ANSWER}'\n"),
            );
        };
        let changes = changed_after_setup(&[], setup, "pytest -q", |root| {
            write(root, "bin/json.py", "x");
            write(root, "difflib.py", "x");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with("`pytest -q` would import ./bin/json.py"),
            "{changes:?}"
        );
        // Two commands of a line finding the same file: named once.
        let changes = shadowed_after(&[], "python3 -m unittest; python3 -m pytest", |root| {
            write(root, "difflib.py", "x");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        // `sh -c` runs the Python its line names; a line without one, none.
        let changes = shadowed_after(&[], "sh -c 'cd sub && python3 -m pytest'", |root| {
            write(root, "sub/difflib.py", "x");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        let dir = TempDir::new().unwrap();
        let quiet = resolve(dir.path(), &check("sh -c 'exit 0'"), None, &Walls::open());
        assert!(quiet.pythons.is_empty() && quiet.commands[0].shadows.is_none());
        // A makefile's recipe may run Python from the current folder.
        let changes = shadowed_after(
            &[("Makefile", "test:\n\tpython3 -m unittest\n")],
            "make test",
            |root| write(root, "difflib.py", "x"),
        );
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn the_interpreter_is_asked_once_and_its_failure_falls_back_to_the_list() {
        let dir = TempDir::new().unwrap();
        executable(dir.path(), "bin/python3", "#!/bin/sh\necho not json\n");
        let path = format!("{}:/usr/bin:/bin", dir.path().join("bin").display());
        let commands = [check("python3 -m unittest"), check("python3 -m pytest")].concat();
        let before = resolve(dir.path(), &commands, Some(&path), &Walls::open());
        assert_eq!(before.pythons.len(), 1, "{before:?}");
        let names_from = &before.pythons[0].names_from;
        assert!(
            names_from.starts_with("from ralph's built-in list, as ")
                && names_from.ends_with("bin/python3 could not be asked: its answer could not be read (expected ident at line 1 column 2)"),
            "{names_from}"
        );
        assert_eq!(before.pythons[0].names.len(), STDLIB_NAMES.len());
        write(dir.path(), "difflib.py", "x");
        let changes = changes(dir.path(), dir.path(), &before, &commands);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            changes[0].contains("names from ralph's built-in list"),
            "{changes:?}"
        );
    }

    #[test]
    fn this_machines_python_is_asked_for_its_standard_library() {
        let dir = TempDir::new().unwrap();
        // Inside the checks' walls, where this machine has them.
        let walls = Walls::around(dir.path(), dir.path(), WallsWanted::Required);
        let before = resolve(dir.path(), &check("python3 -m unittest"), None, &walls);
        let runtime = &before.pythons[0];
        let path = std::env::var("PATH").unwrap_or_default();
        let python = which(dir.path(), "python3", &path);
        let why_not = match (&python, Mechanism::probe()) {
            (None, _) => Some("it was not found".to_string()),
            (_, Mechanism::Missing(why)) => Some(why.clone()),
            _ => None,
        };
        if let Some(why) = why_not {
            assert!(
                runtime.names_from.starts_with("from ralph's built-in list")
                    && runtime.names_from.contains(&why),
                "{runtime:?}"
            );
            return;
        }
        let python = python.unwrap();
        assert_eq!(
            runtime.names_from,
            format!("as {} names them", python.display())
        );
        for name in ["difflib", "json", "unittest"] {
            assert!(runtime.names.iter().any(|n| n == name), "{runtime:?}");
        }
        // `sys` is built in: no file takes its place.
        assert!(
            !runtime.names.iter().any(|n| n == "sys" || n == "test"),
            "{runtime:?}"
        );
    }

    #[test]
    fn a_record_from_before_shadows_were_looked_for_is_not_compared() {
        let dir = TempDir::new().unwrap();
        let commands = check("python3 -m unittest");
        let mut before = resolve(dir.path(), &commands, None, &Walls::open());
        before.commands[0].shadows = None;
        write(dir.path(), "difflib.py", "x");
        assert!(changes(dir.path(), dir.path(), &before, &commands).is_empty());
    }

    #[test]
    fn a_package_managers_configuration_is_part_of_the_check() {
        let package = r#"{"scripts": {"test": "node --test"}}"#;
        let changes = changed_after(&[("package.json", package)], "npm test", |root| {
            write(root, ".npmrc", "node-options=--require ./pass.js\n");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with("`npm test (reads ./.npmrc)` now runs ./.npmrc"),
            "{changes:?}"
        );
        let changes = changed_after(&[("package.json", package)], "yarn test", |root| {
            write(root, ".yarnrc.yml", "x");
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn a_command_no_longer_configured_is_not_compared() {
        let dir = TempDir::new().unwrap();
        let before = resolve(
            dir.path(),
            &check("python3 -m unittest"),
            None,
            &Walls::open(),
        );
        write(dir.path(), "unittest.py", "");
        assert!(changes(dir.path(), dir.path(), &before, &check("make")).is_empty());
        assert_eq!(
            changes(
                dir.path(),
                dir.path(),
                &before,
                &check("python3 -m unittest")
            )
            .len(),
            1
        );
    }

    #[test]
    fn a_worktree_of_the_project_resolves_as_the_project() {
        let project = TempDir::new().unwrap();
        let worktree = TempDir::new().unwrap();
        for root in [project.path(), worktree.path()] {
            write(root, "package.json", r#"{"scripts": {"test": "jest"}}"#);
        }
        executable(project.path(), ".venv/bin/pytest", "#!/bin/sh\n");
        let path = format!(
            "{}:/usr/bin:/bin",
            project.path().join(".venv/bin").display()
        );
        let commands = [check("pytest -q"), check("npm test")].concat();
        let before = resolve(project.path(), &commands, Some(&path), &Walls::open());
        assert!(
            changes(worktree.path(), project.path(), &before, &commands).is_empty(),
            "{before:?}"
        );
        write(
            worktree.path(),
            "package.json",
            r#"{"scripts": {"test": "true"}}"#,
        );
        let changed = changes(worktree.path(), project.path(), &before, &commands);
        assert!(
            changed[0].starts_with("`npm test (scripts.test of package.json)` now runs `true`"),
            "{changed:?}"
        );
    }

    #[test]
    fn words_and_commands_split_as_the_shell_does() {
        // A redirection's `&` joins no command: `2>&1` runs no program `1`.
        let dir = TempDir::new().unwrap();
        let found = resolve(
            dir.path(),
            &check("true 2>&1 | cat >&2 & echo done"),
            Some("/usr/bin:/bin"),
            &Walls::open(),
        );
        let whats: Vec<&str> = found.commands[0]
            .targets
            .iter()
            .map(|t| t.what.as_str())
            .collect();
        assert_eq!(whats, ["true", "cat", "echo"]);
        assert_eq!(
            words(r#"FOO="a b" 'py thon' x\ y 2>&1 > out"#),
            vec!["FOO=a b", "py thon", "x y"]
        );
        assert_eq!(
            look_through(&words("nice -n 5 timeout -s KILL 60 make")),
            vec!["make"]
        );
    }
}
