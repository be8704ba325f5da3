//! How a Python project makes the environment its tests run in, as its
//! maintainers do: uv's lock, pdm's, poetry's, a tox or nox environment, a
//! requirements file of test dependencies, a test extra. Read from the
//! project's files alone (nothing is run): what `init` pins a check to
//! when no environment of the project holds the runner yet, and the fix a
//! check that cannot run is told.

use std::path::Path;

use crate::observe::files::{self, Bounded};

/// The largest file read to decide.
const MAX_READ: u64 = 256 * 1024;

/// How the project makes its test environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentMaker {
    /// The tool, for the person (`uv`, `tox`, `pip`).
    pub tool: &'static str,
    /// The file that says so (`uv.lock`, `tox.ini`, `requirements-dev.txt`).
    pub source: String,
    /// The command, run from the project's folder, that makes it.
    pub make: String,
    /// The environment it makes, relative to the project (`.venv`,
    /// `.tox/py`): its `bin/python` runs the tests.
    pub venv: String,
}

impl EnvironmentMaker {
    /// `python -m module …` in the environment, for a check.
    pub fn python(&self) -> String {
        format!("{}/bin/python", self.venv)
    }

    /// One sentence: the environment and how to make it.
    pub fn describe(&self) -> String {
        format!(
            "this project makes its test environment with {} ({}): `{}` makes {}",
            self.tool, self.source, self.make, self.venv
        )
    }
}

/// The text of `root/name` when it is a regular file of at most [`MAX_READ`] bytes.
fn text(root: &Path, name: &str) -> Option<String> {
    match files::read_bounded(&root.join(name), MAX_READ) {
        Ok(Bounded::Bytes(bytes)) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        _ => None,
    }
}

/// Whether `text` (an INI or TOML file) has a section whose header starts
/// with `prefix` (`[testenv`, `[tool.tox`).
fn has_section(text: &str, prefix: &str) -> bool {
    text.lines().map(str::trim).any(|l| l.starts_with(prefix))
}

/// The files of test dependencies pip installs from, in the order taken.
const REQUIREMENTS: [&str; 8] = [
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements-tests.txt",
    "dev-requirements.txt",
    "test-requirements.txt",
    "requirements/dev.txt",
    "requirements/test.txt",
    "requirements/tests.txt",
];

/// The extras of `pyproject.toml` a test environment is usually named by,
/// in the order they are taken.
const TEST_EXTRAS: [&str; 4] = ["tests", "test", "testing", "dev"];

/// How the project at `root` makes its test environment, if its files say.
pub fn environment_maker(root: &Path) -> Option<EnvironmentMaker> {
    let pyproject = text(root, "pyproject.toml").unwrap_or_default();
    let maker = |tool, source: &str, make: &str, venv: &str| {
        Some(EnvironmentMaker {
            tool,
            source: source.to_string(),
            make: make.to_string(),
            venv: venv.to_string(),
        })
    };
    if root.join("uv.lock").is_file() {
        return maker("uv", "uv.lock", "uv sync --frozen", ".venv");
    }
    if root.join("pdm.lock").is_file() {
        return maker("pdm", "pdm.lock", "pdm sync --dev", ".venv");
    }
    if root.join("poetry.lock").is_file() {
        return maker(
            "poetry",
            "poetry.lock",
            "poetry config virtualenvs.in-project true --local && poetry install",
            ".venv",
        );
    }
    let tox_ini = text(root, "tox.ini")
        .filter(|t| has_section(t, "[tox]") || has_section(t, "[testenv"))
        .map(|_| "tox.ini");
    let tox_toml = root.join("tox.toml").is_file().then_some("tox.toml");
    let tox_pyproject = has_section(&pyproject, "[tool.tox").then_some("pyproject.toml");
    if let Some(source) = tox_ini.or(tox_toml).or(tox_pyproject) {
        return maker("tox", source, "tox -e py --notest", ".tox/py");
    }
    if let Some(noxfile) = text(root, "noxfile.py") {
        let session = nox_test_session(&noxfile)?;
        return maker(
            "nox",
            "noxfile.py",
            &format!("nox -s {session} --install-only"),
            &format!(".nox/{session}"),
        );
    }
    let installable = root.join("pyproject.toml").is_file() || root.join("setup.py").is_file();
    if let Some(file) = REQUIREMENTS.iter().find(|f| root.join(f).is_file()) {
        let project = if installable { " -e ." } else { "" };
        return maker(
            "pip",
            file,
            &format!("python3 -m venv .venv && .venv/bin/pip install -q -r {file}{project}"),
            ".venv",
        );
    }
    let extra = test_extra(&pyproject)?;
    maker(
        "pip",
        &format!("the `{extra}` extra of pyproject.toml"),
        &format!("python3 -m venv .venv && .venv/bin/pip install -q -e '.[{extra}]'"),
        ".venv",
    )
}

/// The test extra `pyproject.toml` declares (`[project.optional-dependencies]`
/// `tests = [...]`), the first of [`TEST_EXTRAS`].
fn test_extra(pyproject: &str) -> Option<&'static str> {
    let mut in_extras = false;
    let mut declared = Vec::new();
    for line in pyproject.lines().map(str::trim) {
        if line.starts_with('[') {
            in_extras = line == "[project.optional-dependencies]";
            continue;
        }
        if in_extras && let Some((key, _)) = line.split_once('=') {
            declared.push(key.trim().trim_matches('"').to_string());
        }
    }
    TEST_EXTRAS
        .into_iter()
        .find(|extra| declared.iter().any(|d| d == extra))
}

/// The nox session that runs the tests: the first `@nox.session` function
/// whose name has `test` in it (`tests`, `test`, `unit_tests`).
fn nox_test_session(noxfile: &str) -> Option<String> {
    let mut after_decorator = false;
    for line in noxfile.lines().map(str::trim) {
        if line.starts_with("@nox.session") || line.starts_with("@session") {
            after_decorator = true;
            continue;
        }
        if after_decorator && let Some(rest) = line.strip_prefix("def ") {
            after_decorator = false;
            let name = rest.split('(').next()?.trim();
            if name.contains("test") {
                return Some(name.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, body) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        dir
    }

    fn made(files: &[(&str, &str)]) -> Option<(String, String)> {
        environment_maker(project(files).path()).map(|m| (m.make, m.venv))
    }

    /// A project's files, and the command and environment expected of them.
    type Row = (
        Vec<(&'static str, &'static str)>,
        Option<(&'static str, &'static str)>,
    );

    #[test]
    fn each_way_of_making_the_environment_is_found_from_its_files() {
        let table: Vec<Row> = vec![
            (
                vec![("uv.lock", ""), ("tox.ini", "[tox]\n")],
                Some(("uv sync --frozen", ".venv")),
            ),
            (vec![("pdm.lock", "")], Some(("pdm sync --dev", ".venv"))),
            (
                vec![(
                    "tox.ini",
                    "[tox]\nenvlist = py3\n[testenv]\ndeps = pytest\n",
                )],
                Some(("tox -e py --notest", ".tox/py")),
            ),
            // A tox.ini holding only other tools' settings is no tox project.
            (vec![("tox.ini", "[flake8]\nmax-line-length = 99\n")], None),
            (
                vec![("pyproject.toml", "[tool.tox]\nlegacy_tox_ini = \"\"\n")],
                Some(("tox -e py --notest", ".tox/py")),
            ),
            (
                vec![(
                    "noxfile.py",
                    "import nox\n\n@nox.session\ndef lint(session):\n    pass\n\n\
                     @nox.session(python=[\"3.11\"])\ndef tests(session):\n    session.install('.')\n",
                )],
                Some(("nox -s tests --install-only", ".nox/tests")),
            ),
            (
                vec![("requirements-dev.txt", "pytest\n"), ("setup.py", "")],
                Some((
                    "python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt -e .",
                    ".venv",
                )),
            ),
            (
                vec![(
                    "pyproject.toml",
                    "[project]\nname = \"x\"\n[project.optional-dependencies]\ndocs = [\"s\"]\ntests = [\"pytest\"]\n",
                )],
                Some((
                    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[tests]'",
                    ".venv",
                )),
            ),
            (vec![("pyproject.toml", "[project]\nname = \"x\"\n")], None),
        ];
        for (files, want) in table {
            let want = want.map(|(m, v)| (m.to_string(), v.to_string()));
            assert_eq!(made(&files), want, "{files:?}");
        }
    }
}
