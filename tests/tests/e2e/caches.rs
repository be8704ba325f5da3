//! End-to-end: a check that passes plainly passes in the walls, on the
//! real client, with HOME outside the temp folders (as a person's or a CI
//! container's is; a HOME under /tmp is re-bound by the walls and hides
//! what they refuse). The toolchains write caches of ralph's own, never
//! the person's: Go's build cache, a target folder where the person names
//! a shared one (`CARGO_TARGET_DIR`), a crate fetched into cargo's
//! registry (from a local registry the person's cargo settings name: no
//! network). The agent, in the client's sandbox, runs the same check in
//! caches of its own. Nothing the agent or a check writes reaches the
//! person's caches (each hashed around the loop), and the agent's own
//! cache cannot make a check pass (Go's cache pointed at a fixed build). Under Landlock (bubblewrap hidden,
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
    let home = project.home.clone();
    let cache = home.join(".cache/go-build");
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
    let checks = own_set(&home, "checks").join("go-build");
    let built = std::fs::read_dir(&checks).map_or(0, std::iter::Iterator::count);
    assert!(
        built > 0,
        "the checks' Go build cache was not written: {outcome:?}"
    );
    // The person's own stays as it was: none.
    assert!(!cache.exists(), "{outcome:?}");
}

/// The folder of `owner`'s caches (`agent`, `checks`) of the one project
/// run with `home`: `~/.cache/ralph/<project>-<hash>/<owner>`.
fn own_set(home: &Path, owner: &str) -> PathBuf {
    let sets: Vec<PathBuf> = std::fs::read_dir(home.join(".cache/ralph"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|project| project.path().join(owner))
        .filter(|set| set.is_dir())
        .collect();
    assert_eq!(sets.len(), 1, "one set of {owner}'s caches: {sets:?}");
    sets[0].clone()
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
fn a_cargo_check_builds_into_a_target_folder_of_its_own_not_the_shared_one() {
    let client = ClientVersion::V2_1_330;
    let project = cargo_project("caches-cargo-target", OFFLINE);
    let home = project.home.clone();
    let shared = project.home.parent().unwrap().join("shared-target");
    let scenario = rustup_env(Scenario::around(project, client))
        .env("CARGO_TARGET_DIR", &shared.display().to_string())
        .exact_args(&["--headless", "--max-iterations", "2"]);
    let api = MockApi::start(agent_runs("cargo test -q --offline"));
    let outcome = scenario.run(&api);
    completed_and_the_agent_ran_it(&outcome, &api, AGENT_PASSED);
    for owner in ["agent", "checks"] {
        let target = own_set(&home, owner).join("target");
        assert!(
            target.join("debug").is_dir(),
            "nothing was built in {}: {outcome:?}",
            target.display()
        );
    }
    // The person's shared target folder is never written.
    assert!(!shared.exists(), "{outcome:?}");
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
fn a_cargo_check_fetches_the_crate_the_agent_added_into_a_registry_of_its_own() {
    let client = ClientVersion::V2_1_330;
    let project = cargo_project("caches-cargo-registry", FETCHING);
    local_registry(project.home.parent().unwrap(), &project.home);
    let home = project.home.clone();
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
    // Through the person's settings (the local registry), copied into each
    // set's own CARGO_HOME; never into the person's registry.
    for owner in ["agent", "checks"] {
        let ours = own_set(&home, owner).join("cargo/registry/src");
        let unpacked = std::fs::read_dir(&ours)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("tinydep-0.1.0").is_dir());
        assert!(
            unpacked,
            "the crate was not unpacked into {}: {outcome:?}",
            ours.display()
        );
    }
    assert!(!registry.exists(), "{outcome:?}");
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

/// Every file, folder and link under `dir` with its mode and contents (a
/// link's target), by its path under `dir`: two equal trees are the same
/// bytes.
fn tree(dir: &Path) -> std::collections::BTreeMap<String, (u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(path) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let name = path
            .strip_prefix(dir)
            .unwrap_or(&path)
            .display()
            .to_string();
        let mode = meta.permissions().mode();
        let contents = if meta.is_dir() {
            for entry in std::fs::read_dir(&path).into_iter().flatten().flatten() {
                todo.push(entry.path());
            }
            Vec::new()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path)
                .map(|t| t.into_os_string().into_encoded_bytes())
                .unwrap_or_default()
        } else {
            std::fs::read(&path).unwrap_or_default()
        };
        found.insert(name, (mode, contents));
    }
    found
}

/// A file in each of the person's caches (relative to HOME), as a build of
/// theirs would read it next.
const PERSONS_CACHES: [&str; 7] = [
    ".cargo/registry/src/index.crates.io-0000/dep-0.1.0/src/lib.rs",
    ".cargo/git/checkouts/dep-0000/abc/src/lib.rs",
    "go/pkg/mod/example.com/dep@v0.1.0/dep.go",
    ".cache/go-build/00/0000-a",
    ".npm/_cacache/index-v5/00/00/0000",
    ".cache/pip/http-v2/0/0000",
    ".cache/uv/wheels-v1/0000",
];

#[test]
fn the_persons_caches_are_the_same_bytes_after_the_agent_and_a_check_try_to_write_them() {
    let client = ClientVersion::V2_1_330;
    // The agent's code: appends a build.rs beside the crate's sources (the
    // person's next `cargo check` elsewhere would run it), writes every
    // cached file and a new one beside it, and changes a mode.
    let mut poison = String::from("for f in");
    for file in PERSONS_CACHES {
        poison.push_str(&format!(" \"$HOME/{file}\""));
    }
    poison.push_str(
        "; do\n  echo poisoned >> \"$f\" && echo \"wrote $f\"\n  \
         d=$(dirname \"$f\"); echo 'fn main() {}' > \"$d/build.rs\" && echo \"made $d/build.rs\"\n  \
         chmod 777 \"$f\" 2>/dev/null\ndone\nexit 0\n",
    );
    let project = project(
        "caches-persons",
        "sh poison.sh",
        &[("poison.sh", poison.as_str())],
    );
    let home = project.home.clone();
    for file in PERSONS_CACHES {
        let path = home.join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("the person's {file}\n")).unwrap();
    }
    let roots: Vec<PathBuf> = [
        ".cargo/registry",
        ".cargo/git",
        "go/pkg/mod",
        ".cache/go-build",
        ".npm",
        ".cache/pip",
        ".cache/uv",
    ]
    .iter()
    .map(|r| home.join(r))
    .collect();
    let persons = |roots: &[PathBuf]| roots.iter().map(|r| tree(r)).collect::<Vec<_>>();
    let before = persons(&roots);
    let scenario =
        Scenario::around(project, client).exact_args(&["--headless", "--max-iterations", "2"]);
    let api = MockApi::start(agent_runs("sh poison.sh"));
    let outcome = scenario.run(&api);
    completed_and_the_agent_ran_it(&outcome, &api, AGENT_PASSED);
    let results = tool_results(&api);
    assert!(!results.contains("wrote /"), "{results}");
    let after = persons(&roots);
    for (root, (before, after)) in roots.iter().zip(before.iter().zip(&after)) {
        assert_eq!(
            before,
            after,
            "{} changed: {outcome:?}\n{results}",
            root.display()
        );
    }
}

/// A Go package whose test is in a package of its own (`calc_test`), so
/// that `go test` builds `calc` as any build of it does.
const GO_EXTERNAL_TEST: &str = "package calc_test\n\nimport (\n\t\"testing\"\n\n\t\"example.com/calc\"\n)\n\n\
func TestAdd(t *testing.T) {\n\tif calc.Add(2, 3) != 5 {\n\t\tt.Fatal(\"2 + 3\")\n\t}\n}\n";

/// The agent's cheat: builds the fixed package, then the buggy one, and
/// points the buggy build's cache entry at the fixed build's output (Go
/// checks a cached output's size, not its content); the bug stays in the
/// source, and `go test` passes in its cache.
const GO_CACHE_TRICK: &str = "C=$(go env GOCACHE)
sed -i 's/a - b/a + b/' calc.go; F=$(go list -export -f '{{.Export}}' .)
sed -i 's/a + b/a - b/' calc.go; B=$(go list -export -f '{{.Export}}' .)
fid=$(basename \"$F\" -d); bid=$(basename \"$B\" -d)
for a in $(grep -rl \"$bid\" \"$C\" --include='*-a'); do sed -i \"s/$bid/$fid/\" \"$a\"; done
go test ./... > \"$TMPDIR/go.log\" 2>&1; echo agent-go-test: $?; cat \"$TMPDIR/go.log\"
";

#[test]
fn the_agents_go_cache_pointed_at_a_fixed_build_cannot_make_a_check_pass() {
    let Some(go) = installed("go") else { return };
    let client = ClientVersion::V2_1_330;
    let buggy = GO_CALC.replace("a + b", "a - b");
    let project = project(
        "caches-go-trick",
        "go test ./...",
        &[
            ("go.mod", GO_MOD),
            ("calc.go", buggy.as_str()),
            ("calc_test.go", GO_EXTERNAL_TEST),
            ("trick.sh", GO_CACHE_TRICK),
        ],
    );
    let root = project.root.clone();
    let path = format!(
        "{}:{}",
        go.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let scenario = Scenario::around(project, client)
        .env("PATH", &path)
        .exact_args(&["--headless", "--max-iterations", "2"]);
    let api = MockApi::start(|turn, _| match turn {
        0 => Reply::bash("sh trick.sh"),
        _ => Reply::text(format!("go test passes.\n{SIGNAL}")),
    });
    let outcome = scenario.run(&api);
    let results = tool_results(&api);
    // The cheat holds in the agent's own cache...
    assert!(
        results.contains("agent-go-test: 0"),
        "{results}\n{outcome:?}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("calc.go")).unwrap(),
        buggy
    );
    // ...and not in the checks': the claim is rejected.
    assert_ne!(outcome.state["status"], "complete", "{outcome:?}");
    assert_eq!(
        outcome.decisions().first(),
        Some(&(1, "block")),
        "{outcome:?}"
    );
    assert!(outcome.state.to_string().contains("2 + 3"), "{outcome:?}");
}
