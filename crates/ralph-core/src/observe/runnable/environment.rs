//! How a Python project makes the environment its tests run in, as its
//! maintainers do: uv's lock, pdm's, a requirements file of test
//! dependencies, a test extra; each makes `.venv` in the project with the
//! project installed editable, so a check there runs the code as it is now.
//! Read from the project's files alone: what `init` pins a check to when
//! no environment holds the runner yet, and the fix a check that cannot
//! run is told.
//!
//! Not taken: tox's and nox's environments (they install the project as a
//! built package, so a check there would run the code as it was when the
//! environment was made; nox names them per Python version), nor poetry's
//! (in its own cache folder unless configured otherwise).

use std::path::Path;

use crate::files::{self, Bounded};

/// The largest file read to decide.
const MAX_READ: u64 = 256 * 1024;

/// How the project makes its test environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentMaker {
    /// The tool, for the person (`uv`, `pdm`, `pip`).
    pub tool: &'static str,
    /// The file that says so (`uv.lock`, `requirements-dev.txt`).
    pub source: String,
    /// The command, run from the project's folder, that makes it.
    pub make: String,
    /// The environment it makes, relative to the project (`.venv`): its
    /// `bin/python` runs the tests.
    pub venv: String,
}

impl EnvironmentMaker {
    /// The environment's Python, from the project's folder.
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

/// `pyproject.toml` of the project at `root`, read as TOML (its tables,
/// dotted keys and inline tables alike); `None` when it is absent, too
/// large, or not TOML: then it declares nothing, as a file without the
/// key (pip, uv or pdm says what is wrong with it when they read it).
fn pyproject(root: &Path) -> Option<toml::Table> {
    text(root, "pyproject.toml")?.parse().ok()
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
    let pyproject = pyproject(root).unwrap_or_default();
    let maker = |tool, source: &str, make: &str| {
        Some(EnvironmentMaker {
            tool,
            source: source.to_string(),
            make: make.to_string(),
            venv: ".venv".to_string(),
        })
    };
    if root.join("uv.lock").is_file() {
        return maker("uv", "uv.lock", "uv sync --frozen");
    }
    if root.join("pdm.lock").is_file() {
        return maker("pdm", "pdm.lock", "pdm sync --dev");
    }
    // `pip install -e .` builds the project: a pyproject.toml of tools'
    // settings alone is no package.
    let installable = pyproject.contains_key("project")
        || pyproject.contains_key("build-system")
        || root.join("setup.py").is_file()
        || root.join("setup.cfg").is_file();
    if let Some(file) = REQUIREMENTS.iter().find(|f| root.join(f).is_file()) {
        let project = if installable { " -e ." } else { "" };
        return maker(
            "pip",
            file,
            &format!("python3 -m venv .venv && .venv/bin/pip install -q -r {file}{project}"),
        );
    }
    let extra = extra_of(&pyproject).filter(|_| installable)?;
    maker(
        "pip",
        &format!("the `{extra}` extra of pyproject.toml"),
        &format!("python3 -m venv .venv && .venv/bin/pip install -q -e '.[{extra}]'"),
    )
}

/// The test extra the `pyproject.toml` of the project at `root` declares
/// (see [`test_extra`]).
pub fn test_extra_in(root: &Path) -> Option<&'static str> {
    extra_of(&pyproject(root)?)
}

/// The test extra `pyproject.toml` (its text) declares in
/// `[project.optional-dependencies]` (`tests = [...]`): the first of
/// [`TEST_EXTRAS`]. `None` when the text is not TOML.
pub fn test_extra(pyproject: &str) -> Option<&'static str> {
    extra_of(&pyproject.parse().ok()?)
}

/// [`test_extra`] of the parsed file.
fn extra_of(pyproject: &toml::Table) -> Option<&'static str> {
    let declared = pyproject
        .get("project")
        .and_then(|p| p.get("optional-dependencies"))
        .and_then(toml::Value::as_table)?;
    TEST_EXTRAS
        .into_iter()
        .find(|extra| declared.contains_key(*extra))
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

    fn made(files: &[(&str, &str)]) -> Option<String> {
        environment_maker(project(files).path()).map(|m| m.make)
    }

    /// A project's files, and the command expected of them.
    type Row = (Vec<(&'static str, &'static str)>, Option<&'static str>);

    #[test]
    fn each_way_of_making_the_environment_is_found_from_its_files() {
        let package = "[project]\nname = \"x\"\n";
        let table: Vec<Row> = vec![
            (
                vec![("uv.lock", ""), ("requirements-dev.txt", "")],
                Some("uv sync --frozen"),
            ),
            (vec![("pdm.lock", "")], Some("pdm sync --dev")),
            (
                vec![("requirements-dev.txt", "pytest\n"), ("setup.py", "")],
                Some(
                    "python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt -e .",
                ),
            ),
            // A pyproject.toml of tools' settings is no package to install.
            (
                vec![
                    ("requirements/test.txt", "pytest\n"),
                    ("pyproject.toml", "[tool.pytest.ini_options]\n"),
                ],
                Some("python3 -m venv .venv && .venv/bin/pip install -q -r requirements/test.txt"),
            ),
            (
                vec![(
                    "pyproject.toml",
                    "[project]\nname = \"x\"\n[project.optional-dependencies]\ndocs = [\"s\"]\ntests = [\"pytest\"]\n",
                )],
                Some("python3 -m venv .venv && .venv/bin/pip install -q -e '.[tests]'"),
            ),
            (vec![("pyproject.toml", package)], None),
            // tox, nox and poetry make environments ralph does not pin.
            (vec![("tox.ini", "[tox]\n[testenv]\ndeps = pytest\n")], None),
            (vec![("noxfile.py", "import nox\n")], None),
            (vec![("poetry.lock", ""), ("pyproject.toml", package)], None),
        ];
        for (files, want) in table {
            assert_eq!(made(&files).as_deref(), want, "{files:?}");
        }
    }

    #[test]
    fn the_test_extra_is_a_key_of_project_optional_dependencies_only() {
        let cases: [(&str, Option<&str>); 7] = [
            (
                "[project.optional-dependencies]\ndocs = [\"s\"]\n\"test\" = [\"pytest\"]\n",
                Some("test"),
            ),
            // An inline table, and dotted keys.
            (
                "[project]\nname = \"x\"\noptional-dependencies = { testing = [\"pytest\"] }\n",
                Some("testing"),
            ),
            (
                "project.optional-dependencies.dev = [\"pytest\"]\n",
                Some("dev"),
            ),
            // A line of a multi-line array, or another table's key, is none.
            (
                "[project.optional-dependencies]\ndocs = [\n  \"sphinx\",\n  \"tests = 1\",\n]\n",
                None,
            ),
            (
                "[project]\nname = \"x\"\n\n[tool.hatch.envs.default]\ntests = \"x\"\n",
                None,
            ),
            // Taken in the order of TEST_EXTRAS, not the file's.
            (
                "[project.optional-dependencies]\ndev = []\ntests = []\n",
                Some("tests"),
            ),
            // Not TOML: none, no panic.
            ("[project.optional-dependencies\ntests = [", None),
        ];
        for (text, want) in cases {
            assert_eq!(test_extra(text), want, "{text:?}");
            let dir = project(&[("pyproject.toml", text)]);
            assert_eq!(test_extra_in(dir.path()), want, "{text:?}");
        }
    }
}
