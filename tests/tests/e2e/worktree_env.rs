//! End-to-end: a worktree's check tests the worktree's code, in the
//! worktree's environment (`run --queue`, each item in its worktree, on
//! 2.1.330 through the mock). The main checkout is out of a worktree
//! check's sight but for its `.git` and the dependency folders it keeps
//! out of git: an editable install into the main checkout fails there and
//! is named, never passing on the main checkout's code; an npm project's
//! runner in the main checkout's `node_modules` is found as npm finds it;
//! a file the main checkout generated comes from `worktreeSetup`, and
//! without it the worktree's own baseline names the failure before any
//! item is spent on it.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ralph_tests::client::ClientVersion;
use ralph_tests::mock_api::{MockApi, Reply, item_of};
use ralph_tests::project::{TempProject, git_out};
use ralph_tests::scenario::{Scenario, script};
use serde_json::{Value, json};

use crate::queue::{committing_worker, file_of};

/// `project` with ralph installed, `config` as its config.json, `plan` as
/// PLAN.md and `.gitignore`, every file committed on main, run as a queue
/// of PLAN.md with one worker on 2.1.330.
fn queue_of(project: TempProject, config: Value, plan: &str, ignored: &str) -> Scenario {
    project.write(".claude/ralph/config.json", config.to_string());
    project.write("PLAN.md", plan);
    project.write(".gitignore", ignored);
    project.init();
    project.commit_all("the project");
    Scenario::around(project, ClientVersion::V2_1_330).args(&[
        "--queue",
        "plan:PLAN.md",
        "--workers",
        "1",
    ])
}

/// The `PATH` of the tests with `first` before it.
fn path_with(first: &Path) -> String {
    format!(
        "{}:{}",
        first.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A src-layout package `toy` installed editable into the project's
/// `.venv` (outside the temp folders, as a person's project is): the
/// `.pth` and the `direct_url.json` pip writes for it, naming the main
/// checkout's `src`. Its test imports `toy`.
fn editable_project(name: &str) -> (TempProject, PathBuf) {
    let project = TempProject::outside_temp(name);
    project.write(
        "pyproject.toml",
        "[build-system]\nrequires = [\"setuptools>=64\"]\nbuild-backend = \"setuptools.build_meta\"\n\n\
         [project]\nname = \"toy\"\nversion = \"0.1\"\n",
    );
    project.write("src/toy/__init__.py", "def add(a, b):\n    return a + b\n");
    project.write(
        "tests/test_toy.py",
        "import unittest\n\nfrom toy import add\n\n\nclass AddTest(unittest.TestCase):\n    \
         def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
    );
    let venv = project.make_venv();
    let site = project
        .command(venv.join("bin/python"))
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = PathBuf::from(String::from_utf8_lossy(&site.stdout).trim());
    let root = std::fs::canonicalize(&project.root).unwrap();
    std::fs::write(
        site.join("__editable__.toy-0.1.pth"),
        format!("{}\n", root.join("src").display()),
    )
    .unwrap();
    let dist = site.join("toy-0.1.dist-info");
    std::fs::create_dir_all(&dist).unwrap();
    for (file, text) in [
        (
            "METADATA",
            "Metadata-Version: 2.1\nName: toy\nVersion: 0.1\n".to_string(),
        ),
        ("INSTALLER", "pip\n".to_string()),
        (
            "direct_url.json",
            format!(
                "{{\"dir_info\": {{\"editable\": true}}, \"url\": \"file://{}\"}}",
                root.display()
            ),
        ),
    ] {
        std::fs::write(dist.join(file), text).unwrap();
    }
    // As the person's shell has it: `toy` imports from anywhere.
    let imported = project
        .command(venv.join("bin/python"))
        .args(["-c", "import toy; print(toy.__file__)"])
        .current_dir("/")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&imported.stdout).contains("/src/toy/__init__.py"),
        "{imported:?}"
    );
    (project, venv.join("bin"))
}

#[test]
fn an_item_that_breaks_an_editable_package_never_lands_and_the_reach_back_is_named() {
    let (project, venv_bin) = editable_project("editable");
    let root = std::fs::canonicalize(&project.root).unwrap();
    let config = json!({"verify": [{
        "name": "tests",
        "command": "python -m unittest discover -s tests -v",
        "timeoutSeconds": 30,
    }]});
    let scenario = queue_of(
        project,
        config,
        "# Plan\n\n- [ ] change add\n",
        ".venv/\n__pycache__/\n",
    )
    .env("PATH", &path_with(&venv_bin));
    // The item's agent breaks `add` in its worktree and says it is done.
    let api = MockApi::start(|turn, body| {
        if item_of(body).is_none() {
            return Reply::text("No item in sight.");
        }
        match turn {
            0 => Reply::bash(
                "sed -i 's/a + b/a - b/' src/toy/__init__.py && git commit -qam 'change add' && echo committed",
            ),
            _ => script::item_done("Changed.", body),
        }
    });
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    // Nothing of the item landed: main keeps its `add`.
    let subjects = git_out(&root, &["log", "--format=%s", "main"]);
    assert!(!subjects.contains("change add"), "{subjects}\n{stderr}");
    assert_eq!(
        std::fs::read_to_string(root.join("src/toy/__init__.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
    outcome.ended(23, "complete");
    // The worktree's check could not import the main checkout's code: its
    // baseline failed there before any change, named with the `.pth` that
    // leads into the main checkout and the fix, and no agent was spent.
    outcome.only_item_failed_with(&[
        "the test baseline of the new worktree",
        "where it passed in the main checkout",
        "__editable__.toy-0.1.pth puts",
        &root.join("src").display().to_string(),
        "worktreeSetup",
    ]);
    assert!(stderr.contains("__editable__.toy-0.1.pth puts"), "{stderr}");
    assert_eq!(api.main_requests().len(), 0, "{stderr}");
}

/// The `node_modules` of mocha, installed once by tests/install-mocha.sh.
fn mocha_modules() -> &'static Path {
    static MODULES: OnceLock<PathBuf> = OnceLock::new();
    MODULES.get_or_init(|| {
        let script = ralph_tests::bins::workspace_root().join("tests/install-mocha.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .output()
            .unwrap();
        assert!(out.status.success(), "install-mocha.sh: {out:?}");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

#[test]
fn an_npm_project_whose_runner_is_in_its_ignored_node_modules_lands_its_items() {
    let project = TempProject::outside_temp("npm");
    project.write(
        "package.json",
        r#"{"name": "toy", "version": "1.0.0", "scripts": {"test": "mocha"}}"#,
    );
    project.write("index.js", "exports.add = (a, b) => a + b;\n");
    project.write(
        "test/add.test.js",
        "const assert = require('assert');\nconst { add } = require('..');\n\n\
         describe('add', () => {\n  it('adds', () => assert.strictEqual(add(2, 3), 5));\n});\n",
    );
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(mocha_modules())
        .arg(project.path("node_modules"))
        .status()
        .unwrap();
    assert!(copied.success());
    let config =
        json!({"verify": [{"name": "tests", "command": "npm test", "timeoutSeconds": 60}]});
    let scenario = queue_of(
        project,
        config,
        "# Plan\n\n- [ ] note one\n- [ ] note two\n",
        "node_modules/\n",
    );
    let root = scenario.path("");
    let api = MockApi::start(committing_worker());
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    let items = outcome.state["queue"]["items"].as_object().unwrap();
    assert_eq!(items.len(), 2, "{items:?}");
    for item in items.values() {
        assert_eq!(item["status"], "done", "{item}\n{stderr}");
    }
    for title in ["note one", "note two"] {
        assert_eq!(
            std::fs::read_to_string(root.join(file_of(title)))
                .unwrap()
                .trim(),
            title
        );
    }
    // Each worktree measured its own baseline, with the main checkout's runner.
    assert_eq!(
        stderr
            .matches("test baseline of `npm test`: 1 run (1 passed, 0 failed)")
            .count(),
        3,
        "{stderr}"
    );
}

/// A Python project whose test needs `toy.egg-info`, which git ignores
/// and `python3 make_egg_info.py` generates (as `pip install -e .` does):
/// the main checkout has it, a new worktree does not.
fn generated_file_project(name: &str, extra: Value) -> Scenario {
    let project = TempProject::new(name);
    project.write(
        "make_egg_info.py",
        "import os\nos.makedirs('toy.egg-info', exist_ok=True)\n\
         open('toy.egg-info/PKG-INFO', 'w').write('Metadata-Version: 2.1\\nName: toy\\nVersion: 0.3\\n')\n",
    );
    project.write(
        "test_version.py",
        "import importlib.metadata\nimport unittest\n\n\nclass VersionTest(unittest.TestCase):\n    \
         def test_version(self):\n        self.assertEqual(importlib.metadata.version('toy'), '0.3')\n",
    );
    let made = project
        .command("python3")
        .arg("make_egg_info.py")
        .status()
        .unwrap();
    assert!(made.success());
    let mut config = json!({
        "verify": [{"name": "tests", "command": "python3 -m unittest -v", "timeoutSeconds": 30}],
        "maxIterationsPerItem": 2,
    });
    for (key, value) in extra.as_object().unwrap() {
        config[key] = value.clone();
    }
    queue_of(
        project,
        config,
        "# Plan\n\n- [ ] note one\n",
        "*.egg-info/\n__pycache__/\n",
    )
}

#[test]
fn a_generated_file_the_worktree_lacks_comes_from_worktree_setup() {
    let scenario = generated_file_project(
        "generated",
        json!({"worktreeSetup": "python3 make_egg_info.py"}),
    );
    let root = scenario.path("");
    let api = MockApi::start(committing_worker());
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    assert_eq!(outcome.only_item()["status"], "done", "{stderr}");
    assert!(root.join(file_of("note one")).is_file());
    assert!(
        stderr.contains("worktreeSetup `python3 make_egg_info.py`")
            && stderr
                .contains("test baseline of `python3 -m unittest -v`: 1 run (1 passed, 0 failed)"),
        "{stderr}"
    );
}

#[test]
fn without_worktree_setup_the_failure_is_named_as_the_worktree_baseline_s() {
    let scenario = generated_file_project("generated-missing", json!({}));
    let api = MockApi::start(committing_worker());
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(23, "complete");
    outcome.only_item_failed_with(&[
        "the test baseline of the new worktree",
        "`python3 -m unittest -v` exited 1 (1 run (0 passed, 1 failed), 0 skipped) there before any change",
        "where it passed in the main checkout",
        "set worktreeSetup",
        "PackageNotFoundError",
    ]);
    // No iteration was spent on a failure no change of the item can fix.
    assert_eq!(api.main_requests().len(), 0, "{stderr}");
    let item = outcome.only_item();
    assert_eq!(item["iterations"], 0, "{item}");
}

#[test]
fn a_rerun_with_worktree_setup_makes_the_failed_worktree_afresh_and_lands_the_item() {
    let scenario = generated_file_project("generated-rerun", json!({}));
    let root = scenario.path("");
    let api = MockApi::start(committing_worker());
    let first = scenario.run(&api);
    first.ended(23, "complete");
    assert_eq!(api.main_requests().len(), 0, "{}", first.run.stderr);
    // Set as the failure advised, and the queue run again: the worktree
    // the first run left is made afresh, set up and measured.
    let config_path = root.join(".claude/ralph/config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["worktreeSetup"] = json!("python3 make_egg_info.py");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let outcome = scenario.run(&api);
    let stderr = &outcome.run.stderr;
    outcome.ended(0, "complete");
    assert_eq!(outcome.only_item()["status"], "done", "{stderr}");
    assert!(root.join(file_of("note one")).is_file(), "{stderr}");
    for words in [
        "made afresh from main: its test baseline failed",
        "worktreeSetup `python3 make_egg_info.py`",
        "test baseline of `python3 -m unittest -v`: 1 run (1 passed, 0 failed)",
    ] {
        assert!(stderr.contains(words), "{words:?} in {stderr}");
    }
    assert!(!stderr.contains("the claim failed its gates"), "{stderr}");
    // Landed and removed: its record goes with it.
    let records: Vec<_> = std::fs::read_dir(root.join(".claude/context/runtime/worktrees"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert!(records.is_empty(), "{records:?}");
}
