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
//! - **`go`**: `go.work` of the folder and the folders above it.
//!
//! The test runners' own configuration (`conftest.py`, `pytest.ini`, …)
//! is `protectedPaths`' (see [`crate::observe::protected`]).
//!
//! Bounded: no subprocess, at most [`MAX_COMMANDS`] simple commands per
//! line, scripts followed [`MAX_DEPTH`] deep, files read with
//! [`read_bounded`] up to [`HASHED_BYTES`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fnv::Fnv;
use crate::observe::files::{read_bounded, Bounded};
use crate::observe::verify::VerifyCommand;

mod shell_words;
pub use shell_words::split_command;
use shell_words::{leading_assignments, look_through, words};

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
/// process's `PATH`).
pub fn resolve(root: &Path, commands: &[VerifyCommand], path: Option<&str>) -> ResolvedChecks {
    let root = &Roots {
        work: root,
        project: root,
    };
    let path = path
        .map(str::to_string)
        .unwrap_or_else(|| std::env::var("PATH").unwrap_or_default());
    let commands = commands
        .iter()
        .map(|c| ResolvedCommand {
            command: c.command.clone(),
            targets: resolve_line(root, &c.command, &path),
        })
        .collect();
    ResolvedChecks { path, commands }
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
        let now = resolve_line(root, &then.command, &before.path);
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

/// The targets of one command line.
fn resolve_line(root: &Roots, line: &str, path: &str) -> Vec<Target> {
    let mut out = Vec::new();
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
    out: &mut Vec<Target>,
) {
    for simple in split_command(line).iter().take(MAX_COMMANDS) {
        let words = words(simple);
        let (assigned, words) = leading_assignments(&words);
        let path = assigned
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())
            .unwrap_or(path);
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
        out.push(program_target(root, cwd, program, path));
        let name = Path::new(program)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let args = &words[1..];
        match name.as_str() {
            n if is_python(n) => out.extend(python_target(root, cwd, &shown, args)),
            "sh" | "bash" | "dash" | "zsh" => {
                if let Some(script) = args.iter().find(|a| !a.starts_with('-')) {
                    if !args.iter().any(|a| a == "-c") {
                        out.push(file_target(root, &shown, &cwd.join(script)));
                    }
                }
            }
            "npm" | "yarn" | "pnpm" | "npx" if depth < MAX_DEPTH => {
                out.extend(node_targets(root, cwd, &name, &shown, args, path, depth));
            }
            "make" | "gmake" => out.push(make_target(root, cwd, &shown, args)),
            "cargo" => out.extend(config_files(
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
            "go" => out.extend(config_files(root, cwd, &shown, &["go.work"])),
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
            let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
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
    let what = shown_words
        .split_once(&module)
        .map(|(before, _)| format!("{before}{module}"))
        .unwrap_or_else(|| shown_words.to_string());
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
            let Some(rest) = n.strip_prefix(name).and_then(|r| r.strip_prefix('.')) else {
                return false;
            };
            rest == "py"
                || rest == "pyc"
                || rest.ends_with(".so")
                || rest == "so"
                || rest.ends_with(".pyd")
                || rest == "pyd"
        })
        .map(|e| e.path())
        .collect();
    out.sort();
    out
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

/// `npm test`, `npm run X`, `yarn X`, `pnpm X`, `npx X`: the scripts they
/// run, each resolved again.
fn node_targets(
    root: &Roots,
    cwd: &Path,
    tool: &str,
    shown_words: &str,
    args: &[String],
    path: &str,
    depth: usize,
) -> Vec<Target> {
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
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let Some((dir, package)) = package_json(root, cwd) else {
        if bin_fallback {
            out.push(file_target(
                root,
                shown_words,
                &cwd.join("node_modules/.bin").join(name),
            ));
        }
        return out;
    };
    let bin_path = format!("{}:{path}", dir.join("node_modules/.bin").to_string_lossy());
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
                out.push(Target {
                    what: format!("{shown_words} (scripts.{hook} of package.json)"),
                    runs,
                    hash: None,
                });
                if let Some(text) = text {
                    let mut inner = dir.clone();
                    resolve_into(root, &mut inner, text, &bin_path, depth + 1, &mut out);
                }
            }
        }
        None if bin_fallback => out.push(file_target(
            root,
            shown_words,
            &dir.join("node_modules/.bin").join(name),
        )),
        None => out.push(Target {
            what: format!("{shown_words} (scripts.{name} of package.json)"),
            runs: "nothing (no such script)".into(),
            hash: None,
        }),
    }
    out
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
    use std::os::unix::fs::PermissionsExt;
    use tempfile::TempDir;

    fn check(command: &str) -> Vec<VerifyCommand> {
        vec![VerifyCommand {
            name: "tests".into(),
            command: command.into(),
            timeout_seconds: 60,
        }]
    }

    /// A project with `files`, resolved at the start with `command`; then
    /// `change` applied; the changes named.
    fn changed_after(
        files: &[(&str, &str)],
        command: &str,
        change: impl FnOnce(&Path),
    ) -> Vec<String> {
        let dir = TempDir::new().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
        }
        let commands = check(command);
        let path = format!("{}:/usr/bin:/bin", dir.path().join("bin").display());
        let before = resolve(dir.path(), &commands, Some(&path));
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
        assert!(changed_after(&[], "python3 -m unittest", |root| write(
            root, "calc.py", "x"
        ))
        .is_empty());
    }

    #[test]
    fn the_program_is_found_as_the_shell_would() {
        // A project folder on PATH: a runner placed there is a change.
        let changes = changed_after(&[], "pytest -q", |root| {
            executable(root, "bin/pytest", "#!/bin/sh\necho ok\n")
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
            write(root, "run.sh", "exit 0")
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
            write(root, "package.json", r#"{"scripts": {"test": "echo ok"}}"#)
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
            )
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
    fn a_makefile_change_is_a_change_of_the_check() {
        let makefile = "test:\n\tpython3 -m unittest\n";
        let changes = changed_after(&[("Makefile", makefile)], "make test", |root| {
            write(root, "Makefile", "test:\n\t@echo ok\n")
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].contains("(its makefile)"), "{changes:?}");
        // A GNUmakefile added is read before the Makefile.
        let changes = changed_after(&[("Makefile", makefile)], "make -C . test", |root| {
            write(root, "GNUmakefile", "test:\n\t@echo ok\n")
        });
        assert!(changes[0].contains("./GNUmakefile"), "{changes:?}");
    }

    #[test]
    fn cargo_and_go_configuration_added_is_a_change() {
        let changes = changed_after(&[], "cargo test", |root| {
            write(root, ".cargo/config.toml", "[alias]\ntest = \"version\"\n")
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(changes[0].contains("./.cargo/config.toml"), "{changes:?}");
        let changes = changed_after(&[], "go test ./...", |root| {
            write(root, "go.work", "go 1.22\n")
        });
        assert_eq!(changes.len(), 1, "{changes:?}");
    }

    #[test]
    fn a_command_no_longer_configured_is_not_compared() {
        let dir = TempDir::new().unwrap();
        let before = resolve(dir.path(), &check("python3 -m unittest"), None);
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
        let before = resolve(project.path(), &commands, Some(&path));
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
        assert_eq!(
            split_command("a && b || c; d | e\nf & g"),
            vec!["a", "b", "c", "d", "e", "f", "g"]
        );
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
