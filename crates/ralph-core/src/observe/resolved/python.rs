//! The Python a check runs, and the files of the project that stand in
//! for its standard library or run at its start.
//!
//! A check that runs Python (`python3 -m unittest`, `pytest`, a Makefile
//! or script that may) imports the standard library from the folders
//! Python puts before it on `sys.path`: the script's folder (the current
//! one for `-m` and `-c`), `PYTHONPATH`, the folder `unittest discover`
//! starts from, and for pytest the folder above each test module's
//! package (the test files' folders, found here by pytest's and
//! unittest's default names: `test*.py`, `*_test.py`, `conftest.py`). A
//! `difflib.py` the agent puts there is imported by
//! `unittest` in place of the real one, and may load the real one and
//! patch the runner besides. So at the loop's start ralph asks the check's
//! own interpreter, once, which names are its standard library's
//! (`sys.stdlib_module_names`, less the modules built in, frozen or loaded
//! before any file could be found: those a file cannot replace) and where
//! its `site` reads `.pth` files, and records the files of those names
//! found then (a project's own `types.py` is the person's). At a claim, a
//! file of such a name found in one of those folders that was not there
//! at the start is a change of the check, named with its module. So is a
//! `.pth` file whose `import` line (run by `site` at every start) is new,
//! and a `sitecustomize` or `usercustomize` module added or changed where
//! `site` imports it (the site folders, `PYTHONPATH`).
//!
//! Not counted: a module present at the start whose content changed (it is
//! the project's code, as the code under test is); a folder without
//! `__init__.py` (Python takes the standard library's module before such a
//! namespace folder, unless the interpreter has no module of that name);
//! `test/` (`sys.stdlib_module_names` leaves the standard library's test
//! package out, and no runner imports it).
//!
//! The interpreter is asked with `-I -S` (no folder of the project on its
//! path, no `site`, no `PYTHONPATH`), inside the check's walls, with a
//! deadline; where it cannot answer (not found, older than Python 3.10,
//! refused) the names are [`super::stdlib_names::STDLIB_NAMES`], and the
//! record says which was used.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::stdlib_names::STDLIB_NAMES;
use super::{Roots, clean, content_hash, inside, is_module_suffix, is_python, shown, which};
use crate::files::{Bounded, read_bounded};
use crate::process::group::{Collected, GroupChild, Lifetime};
use crate::walls::Walls;

/// How long the interpreter has to answer at the loop's start.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(10);
/// Entries looked at at most when finding the test files' folders.
pub const WALK_LIMIT: usize = 20_000;
/// Bytes of a `.pth` file read at most (past that, it counts as code).
const PTH_BYTES: u64 = 1024 * 1024;
/// Entries of one folder read at most.
const MAX_DIR_ENTRIES: usize = 10_000;

/// What the interpreter is asked: its standard library's names that a
/// file could replace (not those loaded before it reads a line of its
/// command, taken first), those it has no module for, and its site
/// folders. Python 3.6 and later; with `-S`, importing `site` reads no
/// `.pth` file.
const ASK: &str = r"import sys
loaded = set(n.split('.')[0] for n in sys.modules)
import json
from importlib import machinery as m
names = getattr(sys, 'stdlib_module_names', None)
pool = sorted(names) if names is not None else []
fixed = set(sys.builtin_module_names) | loaded
fixed |= set(n for n in pool if m.FrozenImporter.find_spec(n) is not None)
missing = [n for n in pool if n not in fixed and m.PathFinder.find_spec(n) is None]
import site
dirs = list(site.getsitepackages()) if hasattr(site, 'getsitepackages') else []
if hasattr(site, 'getusersitepackages'):
    dirs.append(site.getusersitepackages())
print(json.dumps({'names': None if names is None else [n for n in pool if n not in fixed],
    'fixed': sorted(fixed), 'missing': missing, 'site': dirs}))
";

/// Programs that may run Python without saying so on the command line
/// (a makefile's recipe, a script, a test environment's tool): `python3`
/// on `PATH` stands for the Python they run.
const MAY_RUN_PYTHON: &[&str] = &[
    "make", "gmake", "sh", "bash", "dash", "zsh", "tox", "nox", "uv", "poetry", "pdm", "pipenv",
    "hatch", "rye",
];

/// Folders never searched for test files (pytest's `norecursedirs`, and
/// where installed packages live).
const WALK_SKIPS: &[&str] = &[
    "node_modules",
    "__pycache__",
    "site-packages",
    "dist-packages",
    "venv",
    "build",
    "dist",
    "target",
    "_darcs",
    "CVS",
    "{arch}",
];

/// A Python interpreter a check runs, as asked at the loop's start.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PythonRuntime {
    /// The interpreter, as found on the check's `PATH` (or by a script's
    /// `#!` line).
    pub interpreter: String,
    /// Where the names came from, in words: the interpreter asked, or
    /// ralph's built-in list and why.
    pub names_from: String,
    /// The standard library's module names a file of the project could
    /// stand in for.
    #[serde(default)]
    pub names: Vec<String>,
    /// Of those, the names this interpreter has no module for: a folder
    /// without `__init__.py` takes their place too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// The folders whose `.pth` files `site` reads at every start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub site_dirs: Vec<String>,
}

/// What a file found does to the check's Python.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ShadowKind {
    /// A module or package imported in place of the standard library's.
    StdlibModule,
    /// A `.pth` file with an `import` line, run by `site` at every start.
    PthCode,
    /// `sitecustomize` or `usercustomize`, imported by `site` at every start.
    Customize,
}

/// A file that changes what the check's Python runs before or in place of
/// its standard library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shadow {
    /// What it does.
    pub kind: ShadowKind,
    /// The file (`./difflib.py`, or a path outside the project).
    pub file: String,
    /// The module it stands for (`difflib`, `sitecustomize`), or the
    /// `.pth` file's name.
    pub module: String,
    /// The interpreter it is found for.
    pub python: String,
    /// The content's hash, for the files `site` runs (a module's content
    /// is the project's, not compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// The command that would run it (not recorded: the claim's is shown).
    #[serde(skip)]
    pub what: String,
}

impl Shadow {
    /// The same file doing the same thing, with the same content where
    /// that is compared.
    fn same(&self, other: &Shadow) -> bool {
        self.kind == other.kind
            && self.file == other.file
            && self.module == other.module
            && self.python == other.python
            && self.hash == other.hash
    }
}

/// One simple command that runs Python: which one, from where, and what
/// it lets in.
#[derive(Clone, Debug)]
pub(super) struct PythonCall {
    /// The command's words, for the messages.
    pub what: String,
    /// The folder it runs in.
    pub cwd: PathBuf,
    /// The interpreter to ask (`None`: not found).
    pub interpreter: Option<PathBuf>,
    /// The interpreter in words (its path, or the word that named it).
    pub interpreter_shown: String,
    /// The folder Python puts first on `sys.path` (`None` with `-I`/`-P`).
    pub first: Option<PathBuf>,
    /// Folders the runner puts first besides (`unittest discover -s DIR
    /// -t TOP`).
    pub runner_first: Vec<PathBuf>,
    /// Whether `PYTHONPATH` is read (not with `-E`/`-I`).
    pub reads_env: bool,
    /// Whether `site` runs (not with `-S`).
    pub site: bool,
    /// A `PYTHONPATH=` set on the command line itself.
    pub python_path: Option<String>,
    /// The top package of `-m MODULE`, whose files the command's own
    /// target compares already.
    pub module: Option<String>,
}

/// How a simple command runs Python, if it does: a `python`/`pypy`
/// program, a program whose `#!` line names one (`pytest`), or one of
/// [`MAY_RUN_PYTHON`].
pub(super) fn call_of(
    cwd: &Path,
    program: &str,
    args: &[String],
    assigned: &[(String, String)],
    path: &str,
    what: &str,
) -> Option<PythonCall> {
    let located = if program.contains('/') {
        Some(cwd.join(program))
    } else {
        which(cwd, program, path)
    };
    let name = file_name(program);
    let script = if is_python(&name) {
        Vec::new()
    } else {
        located.as_deref().and_then(shebang).unwrap_or_default()
    };
    let may_run_python = |word: &str| MAY_RUN_PYTHON.contains(&file_name(word).as_str());
    let (interpreter, wanted, flags) = match script.split_first() {
        _ if is_python(&name) => (located, name, python_flags(args, cwd)),
        Some((python, options)) if is_python(&file_name(python)) => {
            let interpreter = if python.contains('/') {
                Some(PathBuf::from(python))
            } else {
                which(cwd, python, path)
            };
            // The script is Python's argument: its folder comes first.
            let mut argv = options.to_vec();
            argv.push(located.as_ref()?.to_string_lossy().into_owned());
            (interpreter, python.clone(), python_flags(&argv, cwd))
        }
        Some((runner, _)) if may_run_python(runner) => {
            (python3(cwd, path), "python3".into(), Flags::plain(cwd))
        }
        _ if may_run_python(&name) => (python3(cwd, path), "python3".into(), Flags::plain(cwd)),
        _ => return None,
    };
    let interpreter_shown = interpreter.as_deref().map_or_else(
        || format!("{wanted} (not found on PATH)"),
        |p| clean(p).to_string_lossy().into_owned(),
    );
    Some(PythonCall {
        what: what.to_string(),
        cwd: cwd.to_path_buf(),
        interpreter,
        interpreter_shown,
        runner_first: match flags.module.as_deref() {
            Some("unittest") => discover_folders(cwd, args),
            _ => Vec::new(),
        },
        first: flags.first,
        reads_env: flags.reads_env,
        site: flags.site,
        python_path: assigned
            .iter()
            .find(|(k, _)| k == "PYTHONPATH")
            .map(|(_, v)| v.clone()),
        module: flags.module,
    })
}

/// `python3` on `PATH`, else `python`: the Python a makefile or a
/// script most likely runs.
fn python3(cwd: &Path, path: &str) -> Option<PathBuf> {
    which(cwd, "python3", path).or_else(|| which(cwd, "python", path))
}

/// What Python's own options say of its path.
struct Flags {
    first: Option<PathBuf>,
    reads_env: bool,
    site: bool,
    module: Option<String>,
}

impl Flags {
    /// No options: the current folder first, `PYTHONPATH` and `site` read.
    fn plain(cwd: &Path) -> Flags {
        Flags {
            first: Some(cwd.to_path_buf()),
            reads_env: true,
            site: true,
            module: None,
        }
    }
}

/// Python's options up to the module, command or script: the folder put
/// first on `sys.path` (the script's, else the current one), and whether
/// `-I`, `-P`, `-E` or `-S` take the path, `PYTHONPATH` or `site` away.
fn python_flags(args: &[String], cwd: &Path) -> Flags {
    let mut flags = Flags::plain(cwd);
    let mut no_first = false;
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if arg == "--" {
            if let Some(script) = args.get(i) {
                flags.first = Some(script_folder(cwd, script));
            }
            break;
        }
        if arg == "--check-hash-based-pycs" {
            i += 1;
            continue;
        }
        if arg.starts_with("--") {
            continue;
        }
        let Some(options) = arg.strip_prefix('-').filter(|o| !o.is_empty()) else {
            if arg != "-" {
                flags.first = Some(script_folder(cwd, arg));
            }
            break;
        };
        let mut ends = false;
        for (at, option) in options.char_indices() {
            match option {
                'I' => {
                    no_first = true;
                    flags.reads_env = false;
                }
                'P' => no_first = true,
                'E' => flags.reads_env = false,
                'S' => flags.site = false,
                'm' => {
                    ends = true;
                    let rest = &options[at + 1..];
                    let module = if rest.is_empty() {
                        args.get(i).map(String::as_str)
                    } else {
                        Some(rest)
                    };
                    flags.module = module.and_then(|m| m.split('.').next()).map(str::to_string);
                }
                'c' => ends = true,
                // Their value is the rest of the word, or the next one.
                'W' | 'X' if at + 1 == options.len() => i += 1,
                _ => {}
            }
            if ends || matches!(option, 'W' | 'X') {
                break;
            }
        }
        if ends {
            break;
        }
    }
    if no_first {
        flags.first = None;
    }
    flags
}

/// The folders `unittest discover` puts first on `sys.path`: its top
/// folder, which is its start folder unless `-t` says otherwise (`-s DIR`,
/// `-t DIR`, or the words after `discover`: start, pattern, top).
fn discover_folders(cwd: &Path, args: &[String]) -> Vec<PathBuf> {
    let mut words = args.iter().skip_while(|a| *a != "discover").skip(1);
    let (mut start, mut top) = (None, None);
    let mut plain = Vec::new();
    while let Some(word) = words.next() {
        match word.as_str() {
            "-s" | "--start-directory" => start = words.next(),
            "-t" | "--top-level-directory" => top = words.next(),
            "-p" | "--pattern" | "-k" => {
                words.next();
            }
            w if w.starts_with('-') => {}
            _ => plain.push(word),
        }
    }
    let start = start.or(plain.first().copied());
    let top = top.or(plain.get(2).copied()).or(start);
    top.map(|t| vec![cwd.join(t)]).unwrap_or_default()
}

/// The folder of a script Python runs: first on its path.
fn script_folder(cwd: &Path, script: &str) -> PathBuf {
    let script = cwd.join(script);
    script
        .parent()
        .map_or_else(|| cwd.to_path_buf(), Path::to_path_buf)
}

/// The program a script's `#!` line runs, with its words (`env` and its
/// options looked through): `#!/usr/bin/python3 -I` is `["/usr/bin/python3",
/// "-I"]`, `#!/usr/bin/env python3` is `["python3"]`. Only the first 512
/// bytes of the file are read.
fn shebang(program: &Path) -> Option<Vec<String>> {
    use std::io::Read;
    if !program.is_file() {
        return None;
    }
    let mut head = Vec::new();
    crate::files::open_without_waiting(program)
        .ok()?
        .take(512)
        .read_to_end(&mut head)
        .ok()?;
    let line = head.strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&b| b == b'\n').unwrap_or(line.len())];
    let words: Vec<String> = String::from_utf8_lossy(line)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if words.first().map(|w| file_name(w)).as_deref() != Some("env") {
        return Some(words);
    }
    Some(
        words
            .into_iter()
            .skip(1)
            .skip_while(|w| w.starts_with('-') || w.contains('='))
            .collect(),
    )
}

/// The last part of a path, as text.
fn file_name(word: &str) -> String {
    Path::new(word)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The interpreter asked at the loop's start, inside `walls`; ralph's
/// built-in list when it cannot answer.
pub(super) fn ask(call: &PythonCall, walls: &Walls) -> PythonRuntime {
    let Some(interpreter) = &call.interpreter else {
        return built_in(&call.interpreter_shown, "it was not found".into());
    };
    let answer = match query(interpreter, &call.cwd, walls) {
        Ok(answer) => answer,
        Err(why) => return built_in(&call.interpreter_shown, why.to_string()),
    };
    let site_dirs = answer.site;
    let Some(names) = answer.names else {
        // Before Python 3.10: the list, less what it has built in.
        let fixed: HashSet<&str> = answer.fixed.iter().map(String::as_str).collect();
        let mut runtime = built_in(
            &call.interpreter_shown,
            "it has no sys.stdlib_module_names (Python 3.9 or older)".into(),
        );
        runtime.names.retain(|n| !fixed.contains(n.as_str()));
        runtime.site_dirs = site_dirs;
        return runtime;
    };
    PythonRuntime {
        interpreter: call.interpreter_shown.clone(),
        names_from: format!("as {} names them", call.interpreter_shown),
        names,
        missing: answer.missing,
        site_dirs,
    }
}

/// The standard library's names from ralph's own list, for an
/// interpreter that could not be asked (`why`).
pub(super) fn built_in(interpreter: &str, why: String) -> PythonRuntime {
    PythonRuntime {
        interpreter: interpreter.to_string(),
        names_from: format!(
            "from ralph's built-in list, as {interpreter} could not be asked: {why}"
        ),
        names: STDLIB_NAMES
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        missing: Vec::new(),
        site_dirs: Vec::new(),
    }
}

/// The interpreter's answer to [`ASK`].
#[derive(Deserialize)]
struct Answer {
    names: Option<Vec<String>>,
    #[serde(default)]
    fixed: Vec<String>,
    #[serde(default)]
    missing: Vec<String>,
    #[serde(default)]
    site: Vec<String>,
}

/// Why an interpreter could not be asked its names ([`query`]), as the
/// end of "… could not be asked: …".
#[derive(Debug, thiserror::Error)]
enum AskError {
    /// The walls around it could not be built.
    #[error("{0}")]
    Walls(#[source] crate::walls::WallsMissing),
    /// It could not be started.
    #[error("it could not start: {0}")]
    CannotStart(#[source] std::io::Error),
    /// Its answer is not the JSON asked for.
    #[error("its answer could not be read ({0})")]
    Unreadable(#[source] serde_json::Error),
    /// It exited with a failure.
    #[error("it failed ({0})")]
    Failed(std::process::ExitStatus),
    /// It did not answer in time.
    #[error("it did not answer within {} s", ASK_TIMEOUT.as_secs())]
    Silent,
}

/// Runs `interpreter -I -S -c ASK` from `cwd` inside `walls`.
fn query(interpreter: &Path, cwd: &Path, walls: &Walls) -> Result<Answer, AskError> {
    let mut inner = Command::new(interpreter);
    inner
        .args(["-I", "-S", "-c", ASK])
        .current_dir(cwd)
        .env_remove("RALPH_ACTIVE");
    // `_temp`: the asked interpreter's own temp folder under Landlock,
    // kept until it has answered.
    let (mut command, _temp) = walls.wrap(inner).map_err(AskError::Walls)?;
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let child =
        GroupChild::spawn(&mut command, Lifetime::DiesWithParent).map_err(AskError::CannotStart)?;
    match child.collect_output(Instant::now() + ASK_TIMEOUT, Duration::from_millis(200)) {
        Collected::Exited {
            status,
            output: Some(bytes),
        } if status.success() => serde_json::from_slice(&bytes).map_err(AskError::Unreadable),
        Collected::Exited { status, .. } => Err(AskError::Failed(status)),
        Collected::Failed => Err(AskError::Silent),
    }
}

/// The files found for `call` with `runtime`'s names and site folders
/// (`env_path`: the `PYTHONPATH` of the loop's start).
pub(super) fn shadows_of(
    root: &Roots,
    call: &PythonCall,
    runtime: &PythonRuntime,
    env_path: &str,
) -> Vec<Shadow> {
    let names: HashSet<&str> = runtime.names.iter().map(String::as_str).collect();
    let missing: HashSet<&str> = runtime.missing.iter().map(String::as_str).collect();
    let python_path: Vec<PathBuf> = match (&call.python_path, call.reads_env) {
        (_, false) => Vec::new(),
        (Some(set), true) => split_path(&call.cwd, set),
        (None, true) => split_path(&call.cwd, env_path),
    };
    let mut folders: Vec<PathBuf> = call.first.iter().cloned().collect();
    folders.extend(call.runner_first.iter().cloned());
    folders.extend(python_path.iter().cloned());
    folders.extend(test_folders(root, &call.cwd));
    let mut seen = HashSet::new();
    folders.retain(|f| seen.insert(clean(f)));
    let shadow = |kind, file: &Path, module: &str, hash| Shadow {
        kind,
        file: display(root, file),
        module: module.to_string(),
        python: runtime.interpreter.clone(),
        hash,
        what: call.what.clone(),
    };
    let mut out = Vec::new();
    for folder in &folders {
        for (file, module) in stdlib_named(folder, &names, &missing) {
            if call.module.as_ref() == Some(&module) {
                continue;
            }
            out.push(shadow(ShadowKind::StdlibModule, &file, &module, None));
        }
    }
    if call.site {
        let site: Vec<PathBuf> = runtime.site_dirs.iter().map(PathBuf::from).collect();
        for (dir, pth) in site
            .iter()
            .map(|d| (d, true))
            .chain(python_path.iter().map(|d| (d, false)))
        {
            for (kind, file, module, hash) in run_at_start(dir, pth) {
                out.push(shadow(kind, &file, &module, Some(hash)));
            }
        }
    }
    dedup(out)
}

/// `shadows` with each file once (two commands of a line may find it).
pub(super) fn dedup(mut shadows: Vec<Shadow>) -> Vec<Shadow> {
    let mut seen = HashSet::new();
    shadows.retain(|s| seen.insert((s.kind, s.file.clone())));
    shadows
}

/// The entries of a `PYTHONPATH`-like list, from `cwd`.
fn split_path(cwd: &Path, list: &str) -> Vec<PathBuf> {
    list.split(':')
        .filter(|e| !e.is_empty())
        .map(|e| cwd.join(e))
        .collect()
}

/// A file in the project's words, or its path outside it.
fn display(root: &Roots, path: &Path) -> String {
    inside(root, path).map_or_else(
        || clean(path).to_string_lossy().into_owned(),
        |rel| shown(&rel),
    )
}

/// The modules and packages in `folder` named like the standard library's
/// (`names`): each file, with the module it stands for. A folder without
/// `__init__` only for a name the interpreter has no module of (`missing`).
fn stdlib_named(
    folder: &Path,
    names: &HashSet<&str>,
    missing: &HashSet<&str>,
) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.take(MAX_DIR_ENTRIES).flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if path.is_dir() {
            if !names.contains(name) {
                continue;
            }
            match super::module_files(&path, "__init__").into_iter().next() {
                Some(init) => out.push((init, name.to_string())),
                None if missing.contains(name) => out.push((path, name.to_string())),
                None => {}
            }
            continue;
        }
        if let Some((stem, rest)) = name.split_once('.')
            && names.contains(stem)
            && is_module_suffix(rest)
        {
            out.push((path, stem.to_string()));
        }
    }
    out.sort();
    out
}

/// What `site` runs from `dir` at every start: with `pth`, each `.pth`
/// file with an `import` line; and `sitecustomize`/`usercustomize`. Each
/// with its content's hash.
fn run_at_start(dir: &Path, pth: bool) -> Vec<(ShadowKind, PathBuf, String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.take(MAX_DIR_ENTRIES).flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = entry.path();
        if pth && name.ends_with(".pth") && path.is_file() {
            if let Some(hash) = pth_code(&path) {
                out.push((ShadowKind::PthCode, path, name.to_string(), hash));
            }
            continue;
        }
        let (stem, module_file) = match name.split_once('.') {
            Some((stem, rest)) if is_module_suffix(rest) => (stem, Some(path.clone())),
            None if path.is_dir() => (
                name,
                super::module_files(&path, "__init__").into_iter().next(),
            ),
            _ => continue,
        };
        if let (true, Some(file)) = (
            matches!(stem, "sitecustomize" | "usercustomize"),
            module_file,
        ) {
            let hash = content_hash(&file).unwrap_or_default();
            out.push((ShadowKind::Customize, file, stem.to_string(), hash));
        }
    }
    out.sort();
    out
}

/// The hash of a `.pth` file that runs code (a line beginning `import `
/// or `import\t`, as `site` reads it); `None` for one of paths only.
fn pth_code(path: &Path) -> Option<String> {
    match read_bounded(path, PTH_BYTES) {
        Ok(Bounded::Bytes(bytes)) => bytes
            .split(|&b| b == b'\n')
            .any(|line| line.starts_with(b"import ") || line.starts_with(b"import\t"))
            .then(|| crate::fnv::hex(&bytes)),
        Ok(Bounded::Missing) => None,
        Ok(Bounded::TooLarge) => content_hash(path),
        Err(e) => Some(format!("unreadable:{}", e.kind())),
    }
}

/// The folders Python would put first for the test files under `cwd`:
/// for each test module (`test*.py`, `*_test.py`) and `conftest.py`, the
/// first folder above it without `__init__.py` (pytest's rootdir-relative
/// insertion; unittest's start folder). Only inside the project, skipping
/// hidden folders, virtual environments and [`WALK_SKIPS`]; at most
/// [`WALK_LIMIT`] entries, each folder in name order.
fn test_folders(root: &Roots, cwd: &Path) -> Vec<PathBuf> {
    let top = clean(root.work);
    let start = clean(cwd);
    if !start.starts_with(&top) {
        return Vec::new();
    }
    let mut out: Vec<PathBuf> = Vec::new();
    let mut stack = vec![start];
    let mut visited = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut entries: Vec<_> = entries.take(MAX_DIR_ENTRIES).flatten().collect();
        entries.sort_by_key(std::fs::DirEntry::file_name);
        let mut folders = Vec::new();
        let mut has_tests = false;
        for entry in entries {
            visited += 1;
            if visited > WALK_LIMIT {
                return out;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let skip = name.starts_with('.')
                    || WALK_SKIPS.contains(&name)
                    || name.ends_with(".egg")
                    || entry.path().join("pyvenv.cfg").exists();
                if !skip {
                    folders.push(entry.path());
                }
            } else if is_test_file(name) {
                has_tests = true;
            }
        }
        if has_tests {
            let mut base = dir.clone();
            while base != top && base.join("__init__.py").is_file() {
                if !base.pop() {
                    break;
                }
            }
            if !out.contains(&base) {
                out.push(base);
            }
        }
        // Depth first, in name order.
        stack.extend(folders.into_iter().rev());
    }
    out
}

/// A file pytest or unittest collects by default, or pytest's conftest.
fn is_test_file(name: &str) -> bool {
    let Some(stem) = name.strip_suffix(".py") else {
        return false;
    };
    stem.starts_with("test") || stem.ends_with("_test") || stem == "conftest"
}

/// The files found now that were not there at the start (`then`), or not
/// so, one sentence each.
pub(super) fn shadow_changes(
    then: &[Shadow],
    now: &[Shadow],
    runtimes: &[PythonRuntime],
) -> Vec<String> {
    now.iter()
        .filter(|s| !then.iter().any(|t| t.same(s)))
        .map(|s| match s.kind {
            ShadowKind::StdlibModule => {
                let from = runtimes
                    .iter()
                    .find(|r| r.interpreter == s.python)
                    .map_or("from ralph's built-in list", |r| r.names_from.as_str());
                format!(
                    "`{}` would import {} in place of the standard library's `{}` (not there \
                     at the loop's start; the standard library's names {from}): rename it",
                    s.what, s.file, s.module
                )
            }
            ShadowKind::PthCode => format!(
                "`{}` would run the `import` line of {} at every start of {} (a .pth file \
                 added or changed since the loop's start): remove it, or have the person run \
                 `ralph-ctl reload` if a package was installed on purpose",
                s.what, s.file, s.python
            ),
            ShadowKind::Customize => format!(
                "`{}` would run {} (`{}`) at every start of {} (added or changed since the \
                 loop's start): remove it",
                s.what, s.file, s.module, s.python
            ),
        })
        .collect()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use tempfile::TempDir;

    fn write(root: &Path, name: &str, text: &str) {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn pythons_options_decide_its_first_folder() {
        let cwd = Path::new("/p");
        let first = |line: &str| python_flags(&words(line), cwd).first;
        assert_eq!(first("-m unittest"), Some(cwd.into()));
        assert_eq!(
            first("-W ignore -X dev tools/run.py -m x"),
            Some("/p/tools".into())
        );
        assert_eq!(first("-Wignore -c pass"), Some(cwd.into()));
        assert_eq!(first("-I -m unittest"), None);
        assert_eq!(first("-P -m pytest"), None);
        assert_eq!(first("-Im unittest"), None);
        let discover = |line: &str| {
            let call = call_of(cwd, "/usr/bin/python3", &words(line), &[], "", line).unwrap();
            call.runner_first
        };
        assert_eq!(
            discover("-m unittest discover -s tests"),
            [cwd.join("tests")]
        );
        assert_eq!(
            discover("-m unittest discover -s tests -t ."),
            [cwd.join(".")]
        );
        assert_eq!(
            discover("-m unittest discover src 'test*.py' ."),
            [cwd.join(".")]
        );
        assert!(discover("-m unittest").is_empty());
        let flags = python_flags(&words("-E -S -munittest.main"), cwd);
        assert!(!flags.reads_env && !flags.site);
        assert_eq!(flags.module.as_deref(), Some("unittest"));
    }

    #[test]
    fn what_site_runs_at_start_is_found_when_new_or_changed() {
        let project = TempDir::new().unwrap();
        let root = &Roots {
            work: project.path(),
            project: project.path(),
        };
        let site = project.path().join(".venv/lib/python3.11/site-packages");
        write(&site, "paths.pth", "/somewhere\n");
        write(
            &site,
            "installed.pth",
            "import installed; installed.hook()\n",
        );
        let runtime = PythonRuntime {
            interpreter: "/usr/bin/python3".into(),
            names_from: "as /usr/bin/python3 names them".into(),
            names: vec!["difflib".into()],
            missing: Vec::new(),
            site_dirs: vec![site.to_string_lossy().into_owned()],
        };
        let call = call_of(
            project.path(),
            "/usr/bin/python3",
            &words("-m pytest"),
            &[],
            "",
            "python3 -m pytest",
        )
        .unwrap();
        let found = |root: &Roots| shadows_of(root, &call, &runtime, "");
        let start = found(root);
        // The .pth that runs code is recorded; the one of paths is not.
        assert_eq!(start.len(), 1, "{start:?}");
        assert!(start[0].file.ends_with("installed.pth"), "{start:?}");
        assert!(shadow_changes(&start, &found(root), std::slice::from_ref(&runtime)).is_empty());

        write(
            &site,
            "paths.pth",
            "/somewhere\nimport sys; sys.modules.clear()\n",
        );
        write(&site, "sitecustomize.py", "import unittest\n");
        write(&site, "more.pth", "/elsewhere\n");
        let changes = shadow_changes(&start, &found(root), std::slice::from_ref(&runtime));
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert!(
            changes[0].starts_with(
                "`python3 -m pytest` would run the `import` line of \
                 ./.venv/lib/python3.11/site-packages/paths.pth at every start of /usr/bin/python3"
            ),
            "{changes:?}"
        );
        assert!(
            changes[1].starts_with(
                "`python3 -m pytest` would run ./.venv/lib/python3.11/site-packages/sitecustomize.py \
                 (`sitecustomize`) at every start of /usr/bin/python3"
            ),
            "{changes:?}"
        );
        // With -S, site runs nothing.
        let quiet = call_of(
            project.path(),
            "/usr/bin/python3",
            &words("-S -m pytest"),
            &[],
            "",
            "python3 -S -m pytest",
        )
        .unwrap();
        assert!(shadows_of(root, &quiet, &runtime, "").is_empty());
    }

    #[test]
    fn the_test_files_folders_are_those_above_their_packages() {
        let project = TempDir::new().unwrap();
        let top = project.path();
        let root = &Roots {
            work: top,
            project: top,
        };
        write(top, "tests/unit/test_a.py", "");
        write(top, "pkg/__init__.py", "");
        write(top, "pkg/tests/__init__.py", "");
        write(top, "pkg/tests/test_b.py", "");
        write(top, "lib/conftest.py", "");
        write(top, "lib/b_test.py", "");
        write(top, ".hidden/test_c.py", "");
        write(top, "node_modules/x/test_d.py", "");
        write(top, "env/pyvenv.cfg", "");
        write(top, "env/lib/test_e.py", "");
        write(top, "docs/testing.md", "");
        let mut found: Vec<String> = test_folders(root, top)
            .iter()
            .map(|f| display(root, f))
            .collect();
        found.sort();
        assert_eq!(found, ["./", "./lib", "./tests/unit"]);
    }
}
