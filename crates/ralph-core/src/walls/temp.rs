//! What a check would write or see outside the folder it checks: its own
//! temp folder ([`CheckTemp`]), the temp folders' entries it sees
//! read-only, what Python and pytest would write beside the code
//! ([`OUT_OF_THE_TREE`]), and what a toolchain makes first at the top.

use super::*;

/// What must outlive a walled command while it runs: the temp folder of
/// its own that Landlock's walls give it, removed when this is dropped
/// (bubblewrap's are tmpfs, gone with the command's namespace).
#[derive(Debug, Default)]
pub struct CheckTemp(Option<PathBuf>);

impl CheckTemp {
    /// A new, empty folder of the check's own in the system's temp folder
    /// (0700), named at random.
    pub(super) fn make() -> std::io::Result<CheckTemp> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
            let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let dir = base.join(format!("ralph-check-{name}"));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(CheckTemp(Some(std::fs::canonicalize(&dir)?))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for the check's temp folder",
        ))
    }

    /// The folder, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.0.as_deref()
    }
}

impl Drop for CheckTemp {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The home folder and the `PATH` folders that lie in a temp folder (real
/// paths, each once, none inside another): the check sees them read-only
/// over its fresh temp folders, as the agent sees them in the client's
/// sandbox.
pub(super) fn seen_in_temp() -> Vec<PathBuf> {
    seen_in_temp_of(std::env::var_os("HOME"), std::env::var_os("PATH"))
}

pub(super) fn seen_in_temp_of(home: Option<OsString>, path: Option<OsString>) -> Vec<PathBuf> {
    let home = home.map(PathBuf::from);
    let path: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut seen: Vec<PathBuf> = home
        .into_iter()
        .chain(path)
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter(|p| {
            TEMP_FOLDERS
                .iter()
                .any(|t| p.starts_with(t) && p != Path::new(t))
        })
        .collect();
    seen.sort();
    seen.dedup();
    let all = seen.clone();
    seen.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    seen
}

/// What a check's Python and pytest would write beside the code they run,
/// kept out of the tree: Python's bytecode is not written
/// (`PYTHONDONTWRITEBYTECODE=1`: what is imported is compiled each time,
/// the installed modules' bytecode still read), and pytest's cache goes to
/// this folder of the check's temp folder (`-o cache_dir=…` added to
/// `PYTEST_ADDOPTS`), gone when the check ends. Written into the tree, the
/// check's bytecode was committed with a queue item's work and blocked the
/// landing of the next one; pytest's `.pytest_cache` cannot even be made at
/// the top of a project under Landlock's walls.
pub const OUT_OF_THE_TREE: [(&str, &str); 2] = [
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTEST_ADDOPTS", "pytest-cache"),
];

/// Keeps what a check's Python and pytest would write out of the tree
/// ([`OUT_OF_THE_TREE`]); `temp` is the check's own temp folder as the
/// check sees it. Ours comes after the person's own `PYTEST_ADDOPTS`, so
/// that it wins.
pub(super) fn out_of_the_tree(inner: &mut Command, temp: &Path) {
    let [(bytecode, off), (addopts, cache_dir)] = OUT_OF_THE_TREE;
    inner.env(bytecode, off);
    let theirs = match inner.get_envs().find(|(key, _)| *key == addopts) {
        Some((_, value)) => value.map(OsString::from),
        None => std::env::var_os(addopts),
    };
    let ours = format!(
        "-o {}",
        shell_quoted(&format!("cache_dir={}", temp.join(cache_dir).display()))
    );
    let value = match theirs.as_ref().and_then(|t| t.to_str()) {
        Some(theirs) if !theirs.trim().is_empty() => format!("{theirs} {ours}"),
        _ => ours,
    };
    inner.env(addopts, value);
}

/// `word` as one word of a POSIX shell (and of Python's `shlex.split`,
/// which pytest reads `PYTEST_ADDOPTS` with).
pub(super) fn shell_quoted(word: &str) -> String {
    let plain = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-=+,:@".contains(&b));
    if plain && !word.is_empty() {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\"'\"'"))
}

/// A check run without walls (`sandbox: off`, or none to be had): its own
/// temp folder for what [`out_of_the_tree`] sends there; without one, as it
/// is.
pub(super) fn unwalled(mut inner: Command) -> (Command, CheckTemp) {
    match CheckTemp::make() {
        Ok(temp) => {
            if let Some(dir) = temp.path() {
                out_of_the_tree(&mut inner, dir);
            }
            (inner, temp)
        }
        Err(_) => (inner, CheckTemp::default()),
    }
}

/// The entries a toolchain makes at the top of a project the first time it
/// runs there, each with the file that says the project uses it: Landlock's
/// walls cannot let a check create an entry at the top (see [`landlock`]),
/// so ralph makes them first, with the person's rights, when they are
/// missing. A folder is made empty (git does not see an empty folder); a
/// file empty (cargo fills an empty `Cargo.lock` as it would have written a
/// new one).
#[cfg(target_os = "linux")]
pub(super) const MADE_FIRST_AT_THE_TOP: [(&str, &str, bool); 2] = [
    // (the file that says so, the entry, a folder)
    ("Cargo.toml", "target", true),
    ("Cargo.toml", "Cargo.lock", false),
];

/// Makes [`MADE_FIRST_AT_THE_TOP`]'s entries in `root` where its project
/// uses their toolchain and they are missing (best effort: a check that
/// then cannot make one says so itself).
#[cfg(target_os = "linux")]
pub(super) fn made_first_at_the_top(root: &Path) {
    for (used_by, entry, folder) in MADE_FIRST_AT_THE_TOP {
        let path = root.join(entry);
        if !root.join(used_by).is_file() || std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        let _ = if folder {
            std::fs::create_dir(&path)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map(drop)
        };
    }
}
