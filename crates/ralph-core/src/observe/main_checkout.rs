//! What a worktree's check reaches of the main checkout, which it cannot
//! see (see [`crate::walls`]): an editable Python install
//! whose pointer leads into the main checkout's code, a path of the main
//! checkout in the check's output. A check that fails on it is named for
//! what it is, for the person and in the agent's rejection, with the fix:
//! `worktreeSetup`, which gives each worktree an environment of its own.
//!
//! Bounded: the virtual environments on the check's `PATH` only, at most
//! [`MAX_ENTRIES`] entries of each `site-packages`, files read up to
//! [`MAX_FILE_BYTES`].

use std::path::{Path, PathBuf};

use crate::files::{Bounded, read_bounded};
use crate::walls;

/// Entries of a `site-packages` folder read at most.
pub const MAX_ENTRIES: usize = 5_000;
/// Bytes of a `.pth`, finder or `direct_url.json` file read at most.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;

/// What the person is told to do about a check that reaches into the main
/// checkout.
pub const FIX: &str = "set worktreeSetup in .claude/ralph/config.json to a command that gives each \
                       worktree its own environment (docs/queue.md lists one per ecosystem)";

/// [`FIX`] for the project at `root`, naming the setup of its own
/// ecosystem as its files show it (a lockfile first): npm, pnpm, yarn,
/// uv, a Python project (an editable install, or its requirements); the
/// general advice where none is recognised.
pub fn fix_for(root: &Path) -> String {
    let has = |name: &str| root.join(name).is_file();
    let setup = if has("uv.lock") {
        Some(("uv sync --frozen", "uv's"))
    } else if has("pnpm-lock.yaml") {
        Some(("pnpm install --frozen-lockfile", "pnpm's"))
    } else if has("yarn.lock") {
        Some(("yarn install --frozen-lockfile", "yarn's"))
    } else if has("package-lock.json") || has("npm-shrinkwrap.json") {
        Some(("npm ci", "npm's"))
    } else if has("package.json") {
        Some(("npm install", "npm's"))
    } else if has("pyproject.toml") || has("setup.py") {
        Some((
            "python3 -m venv .venv && .venv/bin/pip install -q -e .",
            "an editable install in a virtual environment of the worktree's own",
        ))
    } else if has("requirements.txt") {
        Some((
            "python3 -m venv .venv && .venv/bin/pip install -q -r requirements.txt",
            "a virtual environment of the worktree's own",
        ))
    } else {
        None
    };
    match setup {
        Some((command, what)) => format!(
            "set worktreeSetup in .claude/ralph/config.json to a command that gives each worktree its own \
             environment: here `{command}` ({what}; docs/queue.md lists one per ecosystem)"
        ),
        None => FIX.to_string(),
    }
}

/// Everything a check of `worktree` run on `path` (its `PATH`, as the
/// walls give it) reaches of the main checkout `project`: the editable
/// installs of its virtual environments, then a path of the main checkout
/// its `output` names. Empty when nothing is found.
pub fn reaches(project: &Path, worktree: &Path, path: &str, output: &str) -> Vec<String> {
    let mut found = editable_installs(project, worktree, path);
    if let Some(named) = named_in_output(project, worktree, output) {
        found.push(format!(
            "its output names {}, in the main checkout, which a worktree's check cannot see",
            named.display()
        ));
    }
    found
}

/// The editable installs of the virtual environments on `path` (a folder
/// of `PATH` that is a virtual environment's `bin`) whose pointers lead
/// into the main checkout `project`, out of sight of a check of
/// `worktree`: a `.pth` line, an editable finder's mapping, a
/// `direct_url.json`. One sentence each.
pub fn editable_installs(project: &Path, worktree: &Path, path: &str) -> Vec<String> {
    let mut venvs: Vec<PathBuf> = Vec::new();
    for entry in path.split(':').map(Path::new).filter(|p| p.is_absolute()) {
        let Some(venv) = entry.parent() else {
            continue;
        };
        if venv.join("pyvenv.cfg").is_file() && !venvs.iter().any(|v| v == venv) {
            venvs.push(venv.to_path_buf());
        }
    }
    let hidden = |p: &Path| walls::hidden_from_worktree(project, worktree, p);
    let mut found = Vec::new();
    for venv in &venvs {
        for site in site_packages(venv) {
            found.extend(pointers_in(project, &hidden, &site));
        }
    }
    found
}

/// The editable installs of the virtual environment `venv` whose pointers
/// lead into `project` (outside `venv`): what a worktree of `project`
/// cannot use, one sentence each (`init` offers `worktreeSetup` for them).
pub fn editable_installs_in(venv: &Path, project: &Path) -> Vec<String> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (venv_real, project_real) = (real(venv), real(project));
    let inside = |p: &Path| {
        let p = real(p);
        p.starts_with(&project_real) && !p.starts_with(&venv_real)
    };
    site_packages(venv)
        .iter()
        .flat_map(|site| pointers_in(project, &inside, site))
        .collect()
}

/// The `site-packages` folders of the virtual environment `venv`, each
/// once (`lib64` is often a link to `lib`).
fn site_packages(venv: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for lib in ["lib", "lib64"] {
        let Ok(entries) = std::fs::read_dir(venv.join(lib)) else {
            continue;
        };
        for entry in entries.take(64).flatten() {
            let site = entry.path().join("site-packages");
            let Ok(real) = std::fs::canonicalize(&site) else {
                continue;
            };
            if entry.file_name().to_string_lossy().starts_with("python")
                && real.is_dir()
                && !seen.contains(&real)
            {
                seen.push(real);
                out.push(site);
            }
        }
    }
    out
}

/// The pointers into the main checkout in one `site-packages` folder: the
/// `.pth` lines and editable finders that put the main checkout's code on
/// the check's Python path, else (an installer that writes neither) the
/// editable installs its `direct_url.json` files record.
fn pointers_in(project: &Path, leads_in: &dyn Fn(&Path) -> bool, site: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(site) else {
        return Vec::new();
    };
    let mut names: Vec<PathBuf> = entries
        .take(MAX_ENTRIES)
        .flatten()
        .map(|e| e.path())
        .collect();
    names.sort();
    let (mut on_path, mut recorded) = (Vec::new(), Vec::new());
    for file in names {
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let hidden = |leads: Vec<PathBuf>| leads.into_iter().find(|p| leads_in(p));
        if name.ends_with(".pth") {
            let lines = text_of(&file)
                .lines()
                .map(str::trim)
                .filter(|l| !l.starts_with('#') && !l.starts_with("import"))
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .collect();
            on_path.extend(hidden(lines).map(|lead| (file.clone(), lead)));
        } else if name.starts_with("__editable__") && name.ends_with("_finder.py") {
            let mapped = paths_named(project, &text_of(&file));
            on_path.extend(hidden(mapped).map(|lead| (file.clone(), lead)));
        } else if name.ends_with(".dist-info") {
            let url = editable_url(&file.join("direct_url.json"));
            recorded.extend(hidden(url.into_iter().collect()).map(|lead| (file.clone(), lead)));
        }
    }
    if !on_path.is_empty() {
        return on_path
            .iter()
            .map(|(file, lead)| {
                format!(
                    "{} puts {} on the check's Python path (an editable install of the main \
                     checkout's code, which a worktree's check cannot see)",
                    file.display(),
                    lead.display()
                )
            })
            .collect();
    }
    recorded
        .iter()
        .map(|(file, lead)| {
            format!(
                "{} records an editable install from {}, in the main checkout, which a \
                 worktree's check cannot see",
                file.display(),
                lead.display()
            )
        })
        .collect()
}

/// A small file's text; empty when it cannot be read.
fn text_of(path: &Path) -> String {
    match read_bounded(path, MAX_FILE_BYTES) {
        Ok(Bounded::Bytes(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
}

/// The folder an editable install's `direct_url.json` names, when it says
/// the install is editable and names a local folder.
fn editable_url(path: &Path) -> Option<PathBuf> {
    let value: serde_json::Value = serde_json::from_str(&text_of(path)).ok()?;
    if value["dir_info"]["editable"] != serde_json::Value::Bool(true) {
        return None;
    }
    let url = value["url"].as_str()?.strip_prefix("file://")?;
    Some(PathBuf::from(percent_decoded(url)))
}

/// `%XX` escapes of a URL's path decoded (invalid ones kept as they are).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every path in `text` that starts with the folder `project` (as given or
/// as its real path), cut at the first character no path in a message
/// holds (a blank, a quote, a bracket, a comma or a colon).
fn paths_named(project: &Path, text: &str) -> Vec<PathBuf> {
    let mut spellings = vec![project.to_string_lossy().into_owned()];
    if let Ok(real) = std::fs::canonicalize(project) {
        let real = real.to_string_lossy().into_owned();
        if !spellings.contains(&real) {
            spellings.push(real);
        }
    }
    let mut out = Vec::new();
    for spelling in spellings.iter().filter(|s| s.len() > 1) {
        for (at, _) in text.match_indices(spelling.as_str()) {
            let rest = &text[at..];
            let end = rest
                .find(|c: char| c.is_whitespace() || "'\"`,:;()[]{}<>".contains(c))
                .unwrap_or(rest.len());
            let path = rest[..end].trim_end_matches('.');
            // The folder itself, or something in it: not a longer name.
            let next = path[spelling.len()..].chars().next();
            if matches!(next, None | Some('/')) {
                out.push(PathBuf::from(path));
            }
        }
    }
    out
}

/// The first path of the main checkout `project` that `output` names and
/// a check of `worktree` cannot see (its `.git` and shared dependency
/// folders are seen; the worktree is the check's own).
pub fn named_in_output(project: &Path, worktree: &Path, output: &str) -> Option<PathBuf> {
    paths_named(project, output)
        .into_iter()
        .find(|p| walls::hidden_from_worktree(project, worktree, p))
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_fix_names_the_setup_of_the_project_s_own_ecosystem() {
        let cases: [(&[&str], &str); 9] = [
            (
                &["package.json", "package-lock.json"],
                "here `npm ci` (npm's",
            ),
            (
                &["package.json", "pnpm-lock.yaml"],
                "here `pnpm install --frozen-lockfile`",
            ),
            (
                &["package.json", "yarn.lock"],
                "here `yarn install --frozen-lockfile`",
            ),
            (&["package.json", "Makefile"], "here `npm install`"),
            (&["pyproject.toml", "uv.lock"], "here `uv sync --frozen`"),
            (
                &["pyproject.toml"],
                "here `python3 -m venv .venv && .venv/bin/pip install -q -e .`",
            ),
            (&["requirements.txt"], "pip install -q -r requirements.txt`"),
            (
                &["Makefile"],
                "a command that gives each worktree its own environment (docs/queue.md",
            ),
            (
                &["go.mod"],
                "a command that gives each worktree its own environment (docs/queue.md",
            ),
        ];
        for (files, said) in cases {
            let dir = tempfile::TempDir::new().unwrap();
            for file in files {
                std::fs::write(dir.path().join(file), "").unwrap();
            }
            let fix = fix_for(dir.path());
            assert!(fix.contains(said), "{files:?}: {fix}");
            assert!(
                files
                    .iter()
                    .any(|f| f.ends_with(".toml") || *f == "requirements.txt")
                    || !fix.contains("venv"),
                "no Python advice for {files:?}: {fix}"
            );
        }
    }

    use super::*;

    /// A main checkout with a worktree and a virtual environment whose
    /// `site-packages` holds what pip's editable installs write.
    fn project() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
        let dir = tempfile::TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("p");
        let tree = root.join(".claude/worktrees/item");
        let site = root.join(".venv/lib/python3.11/site-packages");
        for sub in [tree.join("src"), root.join("src/pkg"), site.clone()] {
            std::fs::create_dir_all(sub).unwrap();
        }
        std::fs::write(root.join(".venv/pyvenv.cfg"), "home = /usr/bin\n").unwrap();
        std::fs::create_dir_all(root.join(".venv/bin")).unwrap();
        (dir, root, tree, site)
    }

    #[test]
    fn an_editable_install_into_the_main_checkout_is_named_by_its_file() {
        let (_dir, root, tree, site) = project();
        let path = format!("{}:/usr/bin", root.join(".venv/bin").display());
        assert!(editable_installs(&root, &tree, &path).is_empty());
        // What pip writes for a src layout (a `.pth` naming the folder).
        std::fs::write(
            site.join("__editable__.pkg-1.0.pth"),
            format!("{}\n", root.join("src").display()),
        )
        .unwrap();
        let found = editable_installs(&root, &tree, &path);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("__editable__.pkg-1.0.pth")
                && found[0].contains(&root.join("src").display().to_string()),
            "{found:?}"
        );
        // A finder's mapping and a direct_url.json say the same.
        std::fs::remove_file(site.join("__editable__.pkg-1.0.pth")).unwrap();
        std::fs::write(
            site.join("__editable___pkg_1_0_finder.py"),
            format!(
                "MAPPING: dict[str, str] = {{'pkg': '{}'}}\n",
                root.join("src/pkg").display()
            ),
        )
        .unwrap();
        let dist = site.join("pkg-1.0.dist-info");
        std::fs::create_dir_all(&dist).unwrap();
        std::fs::write(
            dist.join("direct_url.json"),
            format!(
                "{{\"dir_info\": {{\"editable\": true}}, \"url\": \"file://{}\"}}",
                root.display()
            ),
        )
        .unwrap();
        let found = editable_installs(&root, &tree, &path);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("_finder.py"), "{found:?}");
        std::fs::remove_file(site.join("__editable___pkg_1_0_finder.py")).unwrap();
        let found = editable_installs(&root, &tree, &path);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("pkg-1.0.dist-info records an editable install from"),
            "{found:?}"
        );
        // Where lib64 is lib, each file once.
        std::os::unix::fs::symlink("lib", root.join(".venv/lib64")).unwrap();
        assert_eq!(editable_installs(&root, &tree, &path).len(), 1);
        // Not on the check's PATH: not the check's Python.
        assert!(editable_installs(&root, &tree, "/usr/bin").is_empty());
        // An install of the worktree's own code is the worktree's.
        std::fs::remove_dir_all(&dist).unwrap();
        std::fs::write(
            site.join("__editable__.pkg-1.0.pth"),
            format!("{}\n", tree.join("src").display()),
        )
        .unwrap();
        assert!(editable_installs(&root, &tree, &path).is_empty());
        // The main checkout's own install, as `init` looks for it.
        assert!(editable_installs_in(&root.join(".venv"), &root).len() == 1);
        std::fs::remove_file(site.join("__editable__.pkg-1.0.pth")).unwrap();
        assert!(editable_installs_in(&root.join(".venv"), &root).is_empty());
    }

    #[test]
    fn a_main_checkout_path_in_the_output_is_named_but_the_worktree_s_and_shared_ones_not() {
        let (_dir, root, tree, _site) = project();
        let said = |text: &str| named_in_output(&root, &tree, text);
        assert_eq!(said("all good"), None);
        let own = format!("File \"{}/src/x.py\", line 3", tree.display());
        assert_eq!(said(&own), None);
        let shared = format!(
            "  {}/.venv/lib/python3.11/site-packages/_pytest/x.py:4",
            root.display()
        );
        assert_eq!(said(&shared), None);
        let main = format!(
            "FileNotFoundError: [Errno 2] No such file or directory: '{}/data/fixture.json'",
            root.display()
        );
        assert_eq!(said(&main), Some(root.join("data/fixture.json")));
        let longer = format!("{}-other/x", root.display());
        assert_eq!(said(&longer), None);
        let found = reaches(&root, &tree, "/usr/bin", &main);
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("data/fixture.json"), "{found:?}");
    }

    #[test]
    fn percent_escapes_of_a_url_are_decoded() {
        assert_eq!(percent_decoded("/a%20b/c%zz"), "/a b/c%zz");
    }
}
