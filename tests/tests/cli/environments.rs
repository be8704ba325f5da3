//! `init` on Python projects whose test environment the maintainers make
//! with a tool (uv, tox, nox, pdm, poetry, a requirements file): the check
//! runs in that environment, `init` says to make it, each worktree makes
//! its own, and a start before it is made names the command that makes it.

use ralph_tests::cli::Ctl;
use ralph_tests::project::TempProject;
use serde_json::Value;

/// A git project whose tests pytest runs, with `extra` files beside.
fn pytest_project(name: &str, extra: &[(&str, &str)]) -> TempProject {
    let project = TempProject::new(name);
    project.write("pyproject.toml", "[tool.pytest.ini_options]\n");
    project.write("tests/test_a.py", "def test_a():\n    assert True\n");
    for (path, body) in extra {
        project.write(path, body);
    }
    project.commit_all("a project");
    project
}

fn config(project: &TempProject) -> Value {
    serde_json::from_slice(&std::fs::read(project.path(".claude/ralph/config.json")).unwrap())
        .unwrap()
}

#[test]
fn init_pins_the_check_to_the_environment_the_maintainers_make() {
    let cases = [
        (
            "env-uv",
            ("uv.lock", "version = 1\n"),
            ".venv",
            "uv",
            "uv.lock",
            "uv sync --frozen",
        ),
        (
            "env-tox",
            (
                "tox.ini",
                "[tox]\nenvlist = py\n\n[testenv]\ndeps = pytest\ncommands = pytest\n",
            ),
            ".tox/py",
            "tox",
            "tox.ini",
            "tox -e py --notest",
        ),
        (
            "env-requirements",
            ("requirements-dev.txt", "pytest\n"),
            ".venv",
            "pip",
            "requirements-dev.txt",
            "python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt -e .",
        ),
    ];
    for (name, file, venv, tool, source, make) in cases {
        let project = pytest_project(name, &[file]);
        let init = Ctl::new(&project)
            .args(["init", "--yes"])
            .env_remove("VIRTUAL_ENV")
            .run();
        init.assert_code(0);
        let check = format!("{venv}/bin/python -m pytest");
        init.assert_stdout_has(&[
            &format!("Completion check: `{check}`"),
            &format!(
                "Environment: the check runs in {venv}, which {tool} makes from {source} and which is \
                 not made yet: run `{make}` before the loop starts."
            ),
            &format!("Worktrees: `{make}` (worktreeSetup, for {source})"),
        ]);
        let config = config(&project);
        assert_eq!(config["verify"][0]["command"], check.as_str(), "{name}");
        assert_eq!(config["worktreeSetup"], make, "{name}");
        // Started before the environment is made: refused, naming how to make it.
        project.write_prompt(ralph_tests::project::TEST_TASK);
        let start = Ctl::new(&project)
            .args(["start"])
            .env_remove("VIRTUAL_ENV")
            .run();
        start.assert_code(3);
        start.assert_stderr_has(&[
            &format!("the check `{check}` cannot run: its program was not found"),
            &format!(
                "this project makes its test environment with {tool} ({source}): `{make}` makes {venv}: run it"
            ),
        ]);
    }
}

#[test]
fn a_tox_ini_of_other_tools_settings_changes_nothing() {
    let project = pytest_project(
        "env-flake8",
        &[("tox.ini", "[flake8]\nmax-line-length = 99\n")],
    );
    let init = Ctl::new(&project)
        .args(["init", "--yes"])
        .env_remove("VIRTUAL_ENV")
        .run();
    init.assert_code(0);
    assert_eq!(
        config(&project)["verify"][0]["command"],
        "python3 -m pytest"
    );
    assert!(!init.stdout.contains("Environment:"), "{}", init.stdout);
}
