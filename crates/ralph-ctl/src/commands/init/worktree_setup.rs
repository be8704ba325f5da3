//! What a worktree of the project needs that the main checkout keeps out
//! of git, as `init` finds it: the `worktreeSetup` it offers (run in each
//! new worktree of a queue run or a `--worktree` loop, before its test
//! baseline), or what a worktree's check takes from the main checkout as
//! it is. Only files are read; docs/queue.md says what each costs.
//!
//! - `uv.lock`: `uv sync --frozen` (a virtual environment of the
//!   worktree's own, the project installed in it as uv installs it);
//! - a virtual environment (`.venv`, `venv`) holding an editable install
//!   of the project: a worktree's check cannot reach the main checkout's
//!   code it points to, so the worktree gets a virtual environment of its
//!   own, the project installed editable in it (with its test extra, when
//!   `pyproject.toml` names one);
//! - `node_modules` (npm, pnpm, yarn): nothing; a worktree's check finds the
//!   main checkout's, read-only, as node and npm look in every folder
//!   above (`npm ci` gives a worktree its own: see docs/queue.md);
//! - cargo and go: nothing; they build from the worktree's own files.

use std::path::Path;

use ralph_core::observe::main_checkout;

/// A `worktreeSetup` found for the project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    /// The command, run by `sh -c` in each new worktree.
    pub(crate) command: String,
    /// What it was found from, for the person.
    pub(crate) source: String,
}

/// The `worktreeSetup` the project needs, if a rule finds one.
pub(crate) fn detect(root: &Path) -> Option<Setup> {
    if root.join("uv.lock").is_file() {
        return Some(Setup {
            command: "uv sync --frozen".into(),
            source: "uv.lock".into(),
        });
    }
    for venv in [".venv", "venv"] {
        let folder = root.join(venv);
        if !folder.join("pyvenv.cfg").is_file() {
            continue;
        }
        let Some(install) = main_checkout::editable_installs_in(&folder, root)
            .into_iter()
            .next()
        else {
            continue;
        };
        let target = match ralph_core::observe::runnable::test_extra_in(root) {
            Some(extra) => format!("'.[{extra}]'"),
            None => ".".to_string(),
        };
        return Some(Setup {
            command: format!("python3 -m venv {venv} && {venv}/bin/pip install -q -e {target}"),
            source: format!("an editable install in {venv}/ ({install})"),
        });
    }
    None
}

/// The environment the project's maintainers make (uv's, tox's, nox's, a
/// requirements file's: `runnable::environment_maker`), when the check
/// `plan` writes runs in it: each worktree makes its own the same way.
pub(crate) fn environment_of(root: &Path, plan: &super::VerifyPlan) -> Option<Setup> {
    let super::VerifyPlan::Write(command, _) = plan else {
        return None;
    };
    let maker = ralph_core::observe::runnable::environment_maker(root)?;
    command
        .starts_with(&format!("{} ", maker.python()))
        .then_some(Setup {
            command: maker.make,
            source: maker.source,
        })
}

/// What a worktree's check takes from the main checkout as it is, when
/// `init` offers no setup for it: a line for the person, or `None`.
pub(crate) fn shared_note(root: &Path) -> Option<String> {
    let lockfile = ["package-lock.json", "pnpm-lock.yaml", "yarn.lock"]
        .into_iter()
        .find(|f| root.join(f).is_file())?;
    root.join("node_modules").is_dir().then(|| {
        format!(
            "Worktrees: a worktree's check (a queue item's, a --worktree iteration's) uses this checkout's \
             node_modules, read-only, as npm finds it from a worktree; for a worktree's own, installed from \
             its {lockfile}, set worktreeSetup (docs/queue.md#worktrees-get-their-environment)."
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, name: &str, text: &str) {
        let path = root.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn an_editable_install_gets_a_worktree_venv_with_the_test_extra() {
        let dir = crate::testdir::new("setup");
        let root = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(detect(&root), None);
        write(&root, ".venv/pyvenv.cfg", "home = /usr/bin\n");
        let site = ".venv/lib/python3.12/site-packages";
        write(&root, &format!("{site}/six.py"), "");
        // A virtual environment of dependencies only: nothing to set up.
        assert_eq!(detect(&root), None);
        write(
            &root,
            &format!("{site}/__editable__.pkg-1.0.pth"),
            &format!("{}\n", root.join("src").display()),
        );
        let found = detect(&root).unwrap();
        assert_eq!(
            found.command,
            "python3 -m venv .venv && .venv/bin/pip install -q -e ."
        );
        assert!(
            found.source.contains("__editable__.pkg-1.0.pth"),
            "{found:?}"
        );
        write(
            &root,
            "pyproject.toml",
            "[project]\nname = \"pkg\"\n\n[project.optional-dependencies]\ndocs = [\"x\"]\ntests = [\"pytest\"]\n\n[tool.x]\ntest = 1\n",
        );
        assert_eq!(
            detect(&root).unwrap().command,
            "python3 -m venv .venv && .venv/bin/pip install -q -e '.[tests]'"
        );
        write(&root, "uv.lock", "version = 1\n");
        assert_eq!(detect(&root).unwrap().command, "uv sync --frozen");
    }

    #[test]
    fn node_modules_are_shared_and_said_so() {
        let dir = crate::testdir::new("setup");
        let root = dir.path();
        assert_eq!(shared_note(root), None);
        write(root, "package-lock.json", "{}");
        assert_eq!(shared_note(root), None, "no node_modules yet");
        std::fs::create_dir_all(root.join("node_modules")).unwrap();
        assert!(shared_note(root).unwrap().contains("package-lock.json"));
        assert_eq!(detect(root), None);
    }
}
