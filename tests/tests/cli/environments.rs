//! `init` on Python projects whose test environment the maintainers make
//! with a tool (uv, pdm, a requirements file), when the usual `python3`
//! cannot run pytest: the check runs in that environment, `init` says to
//! make it, each worktree makes its own, and a start before it is made
//! names the command that makes it.

use ralph_tests::cli::Ctl;
use ralph_tests::project::TempProject;

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

/// PATH with a `python3` first that says whether it has pytest (`has`),
/// as the usual Python of the machine would.
fn usual_python(project: &TempProject, has: bool) -> String {
    let bin = project.dir("usual-python");
    let script = bin.join("python3");
    std::fs::write(&script, format!("#!/bin/sh\nexit {}\n", u8::from(!has))).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn init(project: &TempProject, path: &str) -> ralph_tests::project::Run {
    Ctl::new(project)
        .args(["init", "--yes"])
        .env("PATH", path)
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .run()
}

#[test]
fn init_pins_the_check_to_the_environment_the_maintainers_make() {
    let cases = [
        (
            "env-uv",
            ("uv.lock", "version = 1\n"),
            "uv",
            "uv.lock",
            "uv sync --frozen",
        ),
        (
            "env-pdm",
            ("pdm.lock", ""),
            "pdm",
            "pdm.lock",
            "pdm sync --dev",
        ),
        (
            "env-requirements",
            ("requirements-dev.txt", "pytest\n"),
            "pip",
            "requirements-dev.txt",
            "python3 -m venv .venv && .venv/bin/pip install -q -r requirements-dev.txt",
        ),
    ];
    for (name, file, tool, source, make) in cases {
        let project = pytest_project(name, &[file, (".gitignore", "usual-python/\n")]);
        let path = usual_python(&project, false);
        let init = init(&project, &path);
        init.assert_code(0);
        let check = ".venv/bin/python -m pytest";
        init.assert_stdout_has(&[
            &format!("Completion check: `{check}`"),
            &format!(
                "Environment: the check runs in .venv, which {tool} makes from {source} and which is \
                 not made yet: run `{make}` before the loop starts."
            ),
            &format!("Worktrees: `{make}` (worktreeSetup, for {source})"),
        ]);
        let config = project.config();
        assert_eq!(config["verify"][0]["command"], check, "{name}");
        assert_eq!(config["worktreeSetup"], make, "{name}");
        // Started before the environment is made: refused, naming how to make it.
        project.write_prompt(ralph_tests::project::TEST_TASK);
        let start = Ctl::new(&project)
            .args(["start"])
            .env("PATH", &path)
            .env_remove("VIRTUAL_ENV")
            .run();
        start.assert_code(3);
        start.assert_stderr_has(&[
            &format!("the check `{check}` cannot run: its program was not found"),
            &format!(
                "this project makes its test environment with {tool} ({source}): `{make}` makes .venv: run it"
            ),
        ]);
    }
}

#[test]
fn the_usual_python_with_pytest_or_other_tools_environments_change_nothing() {
    // pytest installed for the usual python3 (system-wide, --user, a container's).
    let project = pytest_project(
        "env-usual",
        &[("uv.lock", ""), (".gitignore", "usual-python/\n")],
    );
    let path = usual_python(&project, true);
    let run = init(&project, &path);
    run.assert_code(0);
    assert_eq!(
        project.config()["verify"][0]["command"],
        "python3 -m pytest"
    );
    assert!(!run.stdout.contains("Environment:"), "{}", run.stdout);
    // tox and poetry make environments ralph does not pin (a built copy of
    // the project; a cache folder of poetry's own).
    for (name, file) in [
        (
            "env-tox",
            (
                "tox.ini",
                "[tox]\nenvlist = py\n\n[testenv]\ndeps = pytest\n",
            ),
        ),
        ("env-poetry", ("poetry.lock", "")),
    ] {
        let project = pytest_project(name, &[file, (".gitignore", "usual-python/\n")]);
        let path = usual_python(&project, false);
        let run = init(&project, &path);
        run.assert_code(0);
        assert_eq!(
            project.config()["verify"][0]["command"],
            "python3 -m pytest",
            "{name}"
        );
        assert!(
            !run.stdout.contains("Environment:"),
            "{name}: {}",
            run.stdout
        );
    }
}
