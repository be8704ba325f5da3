//! End-to-end: a check that passes plainly passes in the walls, on the
//! real client, with HOME outside the temp folders (as a person's or a CI
//! container's is; a HOME under /tmp is re-bound by the walls and hides
//! what they refuse). The toolchains write their caches: Go's build cache
//! made in a fresh home, cargo's shared target folder
//! (`CARGO_TARGET_DIR`), a crate fetched into cargo's registry (from a
//! local registry: no network). The agent, in the client's sandbox, runs
//! the same check with the same rights. Under Landlock (bubblewrap hidden,
//! as root) cargo's first `target/` and pytest with `filterwarnings =
//! error`. And a queue on a Python project without a `.gitignore`: no
//! bytecode committed, nothing of the checks' in the way of a landing.

use std::path::{Path, PathBuf};
use std::process::Command;

use ralph_tests::client::ClientVersion;
use ralph_tests::listen::is_root;
use ralph_tests::mock_api::{MockApi, Reply, item_id_of, item_of, tool_results};
use ralph_tests::project::{TempProject, run_with_timeout, write_tree};
use ralph_tests::scenario::{Outcome, Scenario};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::Value;

/// A project with `files` committed, its check `command`, ralph installed,
/// and its HOME outside the temp folders.
fn project(name: &str, command: &str, files: &[(&str, &str)]) -> TempProject {
    let project = TempProject::new(name).home_outside_temp();
    let config = serde_json::json!({"verify": [
        {"name": "tests", "command": command, "timeoutSeconds": 60}
    ]});
    project.write(".claude/ralph/config.json", config.to_string());
    for (path, contents) in files {
        project.write(path, contents);
    }
    project.commit_all("the project");
    project.init();
    project
}

/// The program an install script prints (`tests/install-<what>.sh`), or
/// `None`, said, where it cannot be installed here.
fn installed(what: &str) -> Option<PathBuf> {
    let script = ralph_tests::bins::workspace_root().join(format!("tests/install-{what}.sh"));
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", script.display()));
    if !out.status.success() {
        eprintln!(
            "skipped: {what} cannot be installed here ({} failed)",
            script.display()
        );
        return None;
    }
    Some(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// What rustup's `cargo` needs when HOME is not the one it was installed
/// in: its own folder (and the toolchain this test runs under).
fn rustup_env(scenario: Scenario) -> Scenario {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home.map(|h| h.join(".rustup")));
    let mut scenario = scenario;
    if let Some(dir) = rustup_home.filter(|d| d.is_dir()) {
        scenario = scenario.env("RUSTUP_HOME", &dir.display().to_string());
    }
    if let Ok(toolchain) = std::env::var("RUSTUP_TOOLCHAIN") {
        scenario = scenario.env("RUSTUP_TOOLCHAIN", &toolchain);
    }
    scenario
}

/// What the agent's shell shows when the check it ran passed.
const AGENT_PASSED: &str = "agent-exit: 0";

/// What `ralph-ctl check` answers when the checks pass.
const CHECK_PASSED: &str = "a claim of done now would pass these gates";

/// The agent runs `check` in its own shell (in the client's sandbox where
/// ralph gives it one), then claims done.
fn agent_runs(check: &str) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static + use<> {
    let command = match check {
        "ralph-ctl check" => check.to_string(),
        _ => format!(
            "{check} > $TMPDIR/check.log 2>&1; echo agent-exit: $?; tail -5 $TMPDIR/check.log"
        ),
    };
    move |turn, _| match turn {
        0 => Reply::bash(command.clone()),
        _ => Reply::text(format!("The tests pass.\n{SIGNAL}")),
    }
}

/// The loop completed at its first claim, and the agent's own run of the
/// check passed (`passed`: what its shell then shows).
fn completed_and_the_agent_ran_it(outcome: &Outcome, api: &MockApi, passed: &str) {
    outcome.ended(0, "complete");
    let results = tool_results(api);
    assert!(
        results.contains(passed),
        "the agent could not run the check in its own shell: {results}\n{outcome:?}"
    );
}

const GO_MOD: &str = "module example.com/calc\n\ngo 1.19\n";
const GO_CALC: &str = "package calc\n\nfunc Add(a, b int) int { return a + b }\n";
const GO_TEST: &str = "package calc\n\nimport \"testing\"\n\n\
func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"2 + 3\")\n\t}\n}\n";

#[ralph_tests::on_both_clients(
    differs = "2.0.77 has no sandbox: its agent runs ralph-ctl check, not go test"
)]
fn a_go_check_with_no_build_cache_yet_passes_in_the_walls(client: ClientVersion) {
    let Some(go) = installed("go") else { return };
    let project = project(
        "caches-go",
        "go test ./...",
        &[
            ("go.mod", GO_MOD),
            ("calc.go", GO_CALC),
            ("calc_test.go", GO_TEST),
        ],
    );
    let cache = project.home.join(".cache/go-build");
    assert!(!cache.exists());
    let path = format!(
        "{}:{}",
        go.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The mode ralph chooses: 2.1.330 in its sandbox, where the agent runs
    // the check itself; 2.0.77 without one, where it runs `ralph-ctl check`.
    let (check, passed) = match client {
        ClientVersion::V2_1_330 => ("go test ./...", AGENT_PASSED),
        ClientVersion::V2_0_77 => ("ralph-ctl check", CHECK_PASSED),
    };
    let scenario = Scenario::around(project, client)
        .env("PATH", &path)
        .exact_args(&["--headless", "--max-iterations", "2"]);
    let api = MockApi::start(agent_runs(check));
    let outcome = scenario.run(&api);
    completed_and_the_agent_ran_it(&outcome, &api, passed);
    let built = std::fs::read_dir(&cache).map_or(0, std::iter::Iterator::count);
    assert!(built > 0, "Go's build cache was not written: {outcome:?}");
}

const CARGO_TOML: &str = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n";
const CARGO_LIB: &str = "pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n\n\
#[test]\nfn adds() {\n    assert_eq!(add(2, 3), 5);\n}\n";

/// A cargo check offline (its dependencies fetched already), and what
/// `.gitignore` says then.
const OFFLINE: (&str, &str) = ("cargo test -q --offline", "/target\n");

/// A cargo check that may fetch, and what `.gitignore` says then.
const FETCHING: (&str, &str) = ("cargo test -q", "/target\nCargo.lock\n");

/// A crate with its test ([`CARGO_TOML`], [`CARGO_LIB`]), checked by
/// `command` with `ignored` in `.gitignore`; see [`project`].
fn cargo_project(name: &str, (command, ignored): (&str, &str)) -> TempProject {
    let files = [
        ("Cargo.toml", CARGO_TOML),
        ("src/lib.rs", CARGO_LIB),
        (".gitignore", ignored),
    ];
    project(name, command, &files)
}

#[test]
fn a_cargo_check_builds_into_a_shared_target_folder_outside_the_project() {
    let client = ClientVersion::V2_1_330;
    let project = cargo_project("caches-cargo-target", OFFLINE);
    let shared = project.home.parent().unwrap().join("shared-target");
    let scenario = rustup_env(Scenario::around(project, client))
        .env("CARGO_TARGET_DIR", &shared.display().to_string())
        .exact_args(&["--headless", "--max-iterations", "2"]);
    let api = MockApi::start(agent_runs("cargo test -q --offline"));
    let outcome = scenario.run(&api);
    completed_and_the_agent_ran_it(&outcome, &api, AGENT_PASSED);
    assert!(
        shared.join("debug").is_dir(),
        "nothing was built in {}: {outcome:?}",
        shared.display()
    );
}

/// A local registry (cargo's `local-registry` source) at `dir` holding
/// one crate, `tinydep` 0.1.0 (`two()`), and `home`'s cargo configured to
/// take crates.io's crates from it: a dependency fetched without a network.
fn local_registry(dir: &Path, home: &Path) {
    write_tree(
        &dir.join("source/tinydep-0.1.0"),
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"tinydep\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("src/lib.rs", "pub fn two() -> u32 {\n    2\n}\n"),
        ],
    );
    let registry = dir.join("registry");
    std::fs::create_dir_all(registry.join("index/ti/ny")).unwrap();
    let crate_file = registry.join("tinydep-0.1.0.crate");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&crate_file)
        .arg("-C")
        .arg(dir.join("source"))
        .arg("tinydep-0.1.0")
        .status()
        .unwrap();
    assert!(tar.success());
    let sum = Command::new("sha256sum").arg(&crate_file).output().unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sum = sum.split_whitespace().next().unwrap();
    std::fs::write(
        registry.join("index/ti/ny/tinydep"),
        format!(
            "{{\"name\":\"tinydep\",\"vers\":\"0.1.0\",\"deps\":[],\"cksum\":\"{sum}\",\
             \"features\":{{}},\"yanked\":false}}\n"
        ),
    )
    .unwrap();
    std::fs::create_dir_all(home.join(".cargo")).unwrap();
    std::fs::write(
        home.join(".cargo/config.toml"),
        format!(
            "[source.crates-io]\nreplace-with = \"local\"\n\n[source.local]\nlocal-registry = \"{}\"\n",
            registry.display()
        ),
    )
    .unwrap();
}

#[test]
fn a_cargo_check_fetches_the_crate_the_agent_added_into_the_registry() {
    let client = ClientVersion::V2_1_330;
    let project = cargo_project("caches-cargo-registry", FETCHING);
    local_registry(project.home.parent().unwrap(), &project.home);
    let registry = project.home.join(".cargo/registry");
    assert!(!registry.exists());
    let scenario = rustup_env(Scenario::around(project, client)).exact_args(&[
        "--headless",
        "--max-iterations",
        "2",
    ]);
    // The agent adds the dependency, runs the check, and claims.
    let check = agent_runs("cargo test -q");
    let api = MockApi::start(move |turn, body| match turn {
        0 => Reply::bash(
            "printf '\\n[dependencies]\\ntinydep = \"0.1\"\\n' >> Cargo.toml && \
             printf '\\n#[test]\\nfn four() {\\n    assert_eq!(add(tinydep::two(), 2), 4);\\n}\\n' >> src/lib.rs",
        ),
        _ => check(turn - 1, body),
    });
    let outcome = scenario.run(&api);
    completed_and_the_agent_ran_it(&outcome, &api, AGENT_PASSED);
    let unpacked = std::fs::read_dir(registry.join("src"))
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("tinydep-0.1.0").is_dir());
    assert!(
        unpacked,
        "the crate was not unpacked into the registry: {outcome:?}"
    );
}

/// `cmd` run where bubblewrap is not to be had (see `walls_parity`), so
/// that ralph's checks are walled by Landlock.
fn under_landlock(scenario: &Scenario, api: &MockApi) -> Outcome {
    let cmd = ralph_tests::reach::without_bubblewrap(scenario.command(api));
    let run = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    let state = scenario.status_json();
    Outcome { run, state }
}

/// The agent of a Landlock case: claims at once.
fn claims() -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static {
    |_, _| Reply::text(format!("The tests pass.\n{SIGNAL}"))
}

/// Whether this run can take bubblewrap away (root's mount namespace);
/// says the case is skipped when not.
fn landlock_can_be_tested() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: not root (bubblewrap is hidden in a mount namespace of root's)");
    }
    root
}

/// A headless scenario of `project` on 2.1.330, at most 2 iterations.
fn at_most_2(project: TempProject) -> Scenario {
    Scenario::around(project, ClientVersion::V2_1_330).args(&[
        "--headless",
        "--max-iterations",
        "2",
    ])
}

/// Panics unless the scenario, its agent claiming at once, completes with
/// its checks walled by Landlock (as the launcher says); its outcome.
fn completes_under_landlock(scenario: &Scenario) -> Outcome {
    let api = MockApi::start(claims());
    let outcome = under_landlock(scenario, &api);
    assert!(
        outcome.run.stderr.contains("walls: Landlock's"),
        "{outcome:?}"
    );
    outcome.ended(0, "complete");
    outcome
}

#[test]
fn under_landlock_a_cargo_check_makes_its_first_target_folder() {
    if !landlock_can_be_tested() {
        return;
    }
    let project = cargo_project("caches-landlock-cargo", OFFLINE);
    let root = project.root.clone();
    let scenario = rustup_env(at_most_2(project));
    let outcome = completes_under_landlock(&scenario);
    assert!(root.join("target/debug").is_dir(), "{outcome:?}");
    // The repository and ralph's files stay the check's to read only.
    assert!(!root.join(".git/index.lock").exists());
}

#[test]
fn under_landlock_a_pytest_check_with_warnings_as_errors_passes() {
    if !landlock_can_be_tested() {
        return;
    }
    let Some(python) = installed("pytest") else {
        return;
    };
    let project = project(
        "caches-landlock-pytest",
        &format!("{} -m pytest -q", python.display()),
        &[
            (
                "pyproject.toml",
                "[tool.pytest.ini_options]\nfilterwarnings = [\"error\"]\n",
            ),
            ("calc.py", "def add(a, b):\n    return a + b\n"),
            (
                "test_calc.py",
                "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            ),
        ],
    );
    let root = project.root.clone();
    let scenario = at_most_2(project);
    let outcome = completes_under_landlock(&scenario);
    // Nothing of the check's in the tree.
    for left in [".pytest_cache", "__pycache__"] {
        assert!(!root.join(left).exists(), "{left} left: {outcome:?}");
    }
}

#[test]
fn a_queue_on_python_without_a_gitignore_lands_no_bytecode() {
    let project = project(
        "caches-queue-python",
        "python3 -m unittest -q",
        &[
            ("calc.py", "def add(a, b):\n    return a + b\n"),
            (
                "test_calc.py",
                "import unittest\n\nfrom calc import add\n\n\n\
                 class T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
            ),
            ("PLAN.md", "# Plan\n\n- [ ] double\n- [ ] triple\n"),
        ],
    );
    let root = project.root.clone();
    let scenario = Scenario::around(project, ClientVersion::V2_1_330).args(&[
        "--queue",
        "plan:PLAN.md",
        "--max-iterations",
        "4",
    ]);
    // Each item's agent adds a module and its test, runs the tests as it
    // would, leaves them uncommitted (the queue commits them), and claims.
    let api = MockApi::start(|turn, body| {
        let id = item_id_of(body);
        let title = item_of(body).unwrap_or_else(|| "none".into());
        let factor = if title == "double" { 2 } else { 3 };
        match turn {
            0 => Reply::bash(format!(
                "printf 'def {title}(x):\\n    return {factor} * x\\n' > {title}.py && \
                 printf 'import unittest\\n\\nfrom {title} import {title}\\n\\n\\nclass T(unittest.TestCase):\\n    def test_{title}(self):\\n        self.assertEqual({title}(2), {twice})\\n' > test_{title}.py && \
                 python3 -m unittest -q 2>&1 | tail -2; \
                 test -d __pycache__ && echo agent-left-bytecode || echo agent-left-no-bytecode",
                twice = 2 * factor
            )),
            _ => Reply::text(format!(
                "Done.\n{SIGNAL}\nRALPH_OUTCOME: {{\"status\": \"terminal\", \"itemId\": {id}}}"
            )),
        }
    });
    let outcome = scenario.run(&api);
    let items = outcome.state["queue"]["items"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(items.len(), 2, "{outcome:?}");
    for item in items.values() {
        assert_eq!(item["status"], "done", "{item}\n{outcome:?}");
    }
    outcome.ended(0, "complete");
    // The agent's own run of the tests wrote no bytecode either.
    let results = tool_results(&api);
    assert!(
        results.contains("agent-left-no-bytecode") && !results.contains("agent-left-bytecode"),
        "{results}"
    );
    let tree = Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["log", "--name-only", "--format=", "main"])
        .output()
        .unwrap();
    let committed = String::from_utf8_lossy(&tree.stdout);
    assert!(
        committed.contains("double.py") && committed.contains("triple.py"),
        "{committed}"
    );
    assert!(
        !committed.contains(".pyc") && !committed.contains("__pycache__"),
        "bytecode was committed: {committed}"
    );
}
