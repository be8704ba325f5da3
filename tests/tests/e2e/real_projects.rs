//! End-to-end: ralph on real open-source projects, each checked by its own
//! test suite, set up as their users set them up (`tests/corpus/fetch.sh`
//! fetches them from the package registries into `.cache/corpus/`; the
//! tests run offline):
//!
//! | project | from | its check, as `init --yes` finds it | set up |
//! |---|---|---|---|
//! | attrs 25.3.0 | `PyPI` sdist, src layout | `python3 -m pytest` | installed editable into `.venv`, the venv active |
//! | toolz 1.2.0 | `PyPI` sdist, tests in the package | `python3 -m pytest` | pytest only in `.venv`; `*.egg-info` ignored, `__pycache__` not |
//! | bytes 3.1.2 | Debian's source of node-bytes | `npm test` (mocha) | `node_modules` (ignored) from `npm ci` |
//! | signal-hook-registry 1.4.8 | crates.io | `cargo test` | its dependencies in `~/.cargo` |
//! | go-difflib 1.0.0 | Debian's golang-github-pmezard-go-difflib-dev | `go test ./...` | Debian's Go, no build cache yet |
//!
//! Per project, with the real client 2.1.330 against the mock, in the
//! permission mode ralph chooses, with HOME outside the temp folders (a
//! person's is; a check's walls let it write there), after `ralph-ctl init
//! --yes` and the project's check run plainly (it passes):
//! - a loop: the agent breaks a line the tests cover and claims done; the
//!   claim is rejected; it puts the line back and claims again: complete;
//! - a queue of two items (`run --queue plan:PLAN.md`, one worker): one
//!   item breaks the code and claims done, and must not land; the other
//!   adds a comment, and lands. The project's tests pass on main after.
//!
//! As root, and as an unprivileged user (uid 65534: the project and its
//! HOME theirs, the binaries reachable). The Rust project runs as root
//! only: the toolchain rustup installs lives in root's home. Where
//! bubblewrap cannot run (Landlock's walls, as root), the pytest and cargo
//! loops run once more.
//!
//! `tests/run.sh` (CI) runs each project's loop and queue once, in the
//! harder of its setups (as the unprivileged user, or under Landlock);
//! the same run as root is ignored there and run by `tests/run.sh --all`
//! (`#[ignore = "full corpus matrix …"]`), with the whole client matrix.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ralph_tests::client::ClientVersion;
use ralph_tests::corpus::{self, chown_tree, copy_tree};
use ralph_tests::listen::is_root;
use ralph_tests::mock_api::{MockApi, Reply, item_of, stop_hook_feedback};
use ralph_tests::project::{Run, TempProject, run_with_timeout};
use ralph_tests::reach::{reachable, without_bubblewrap};
use ralph_tests::scenario::{Scenario, script};
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::{Value, json};

/// The unprivileged user of the runs that are not root's.
const NOBODY: u32 = 65534;

/// What a project's folder gets beside its own files before it is used.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// Nothing: its dependencies come with the fetched folder (bytes'
    /// `node_modules`) or from the toolchain's cache in HOME.
    Nothing,
    /// A `.venv` with pytest.
    PytestVenv,
    /// A `.venv` with pytest and hypothesis, the project installed
    /// editable (its `.pth` names the checkout's `src`).
    EditableVenv,
}

/// One project of the corpus and the edits its scripted agent makes.
struct Real {
    /// Its folder in the cache (`.cache/corpus/src/<name>`).
    name: &'static str,
    /// Lines added to its `.gitignore` before the first commit, as its
    /// user had them.
    ignore: &'static str,
    /// What its folder gets.
    setup: Setup,
    /// Whether the `.venv` is active (first on PATH, `VIRTUAL_ENV`).
    activated: bool,
    /// The source file the agent edits.
    file: &'static str,
    /// A line of `file` the tests cover, and what the agent makes of it.
    line: (&'static str, &'static str),
    /// The comment syntax of `file`, for the item that lands.
    comment: &'static str,
    /// How the check `init --yes` must find begins (its flags may vary:
    /// `go test` needs one to print counts).
    check: &'static str,
    /// The check its person then sets instead, if any.
    verify: Option<&'static str>,
    /// The worktreeSetup its person then sets instead of the one `init`
    /// found, if any: what they set their own `.venv` up with.
    worktree_setup: Option<&'static str>,
}

const ATTRS: Real = Real {
    name: "attrs",
    ignore: "",
    setup: Setup::EditableVenv,
    activated: true,
    file: "src/attr/validators.py",
    line: (
        "if not isinstance(value, self.type):",
        "if False and isinstance(value, self.type):",
    ),
    comment: "#",
    check: "python3 -m pytest",
    // The whole suite takes 15 s a run here, and one of its tests fails on
    // Debian 12's Python 3.11.2 (TestPipe::test_wrapped_annotation): its
    // person checks the module they work on.
    verify: Some("python3 -m pytest tests/test_validators.py"),
    // init finds `pip install -e '.[tests]'`, whose extras (mypy, …) this
    // offline corpus does not hold: its person installs what their own
    // `.venv` has.
    worktree_setup: Some(
        "python3 -m venv .venv && .venv/bin/pip install -q --no-compile pytest hypothesis \
         && .venv/bin/pip install -q --no-compile -e .",
    ),
};

const TOOLZ: Real = Real {
    name: "toolz",
    ignore: ".venv/\n*.egg-info/\n",
    setup: Setup::PytestVenv,
    activated: true,
    file: "toolz/functoolz.py",
    line: ("    return x\n\n\ndef", "    return None\n\n\ndef"),
    comment: "#",
    check: "python3 -m pytest",
    verify: None,
    // Its tests read its installed metadata (`toolz.egg-info`, made from
    // the sdist, git-ignored): a new worktree has none until its own venv
    // has toolz installed, as the worktree's baseline says.
    worktree_setup: Some(
        "python3 -m venv .venv && .venv/bin/pip install -q --no-compile pytest \
         && .venv/bin/pip install -q --no-compile -e .",
    ),
};

const BYTES: Real = Real {
    name: "bytes",
    ignore: "",
    setup: Setup::Nothing,
    activated: false,
    file: "index.js",
    line: ("kb: 1 << 10,", "kb: 1 << 11,"),
    comment: "//",
    check: "npm test",
    verify: None,
    worktree_setup: None,
};

const SIGNAL_HOOK_REGISTRY: Real = Real {
    name: "signal-hook-registry",
    ignore: "/target\n",
    setup: Setup::Nothing,
    activated: false,
    file: "src/vec_map.rs",
    line: ("        self.0.is_empty()", "        !self.0.is_empty()"),
    comment: "//",
    check: "cargo test",
    verify: None,
    worktree_setup: None,
};

const GO_DIFFLIB: Real = Real {
    name: "go-difflib",
    ignore: "",
    setup: Setup::Nothing,
    activated: false,
    file: "difflib/difflib.go",
    line: (
        "func min(a, b int) int {\n\tif a < b {",
        "func min(a, b int) int {\n\tif a > b {",
    ),
    comment: "//",
    check: "go test",
    verify: None,
    worktree_setup: None,
};

/// Where a run's ralph and client binaries are, reachable by its user.
struct Bins {
    ctl: PathBuf,
    client: PathBuf,
}

/// A project of the corpus set up for one run: the folders, the user, the
/// environment every command of the run gets.
struct Prepared {
    scenario: Scenario,
    uid: Option<u32>,
    env: Vec<(String, String)>,
    bins: Bins,
}

/// `real`'s edit of `from` into `to`, as a shell command (Python, which
/// every project's machine has, so that a line break is no trouble).
fn edit(real: &Real, from: &str, to: &str) -> String {
    format!(
        "python3 -c 'import sys; p = sys.argv[1]; s = open(p).read(); assert sys.argv[2] in s, \"not found\"; open(p, \"w\").write(s.replace(sys.argv[2], sys.argv[3], 1))' {} {} {}",
        real.file,
        shell_quote(from),
        shell_quote(to)
    )
}

/// `text` as one shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A venv without packages in HOME, first on a Python project's PATH after
/// the active venv: the `python3` of a machine where pytest is not
/// installed, whatever this one has.
const BARE_PYTHON: &str = ".bare-python";

/// The PATH of a run: the system's folders, cargo's, a bare Python for a
/// Python project, and the active venv's first.
fn path_of(real: &Real, root: &Path, home: &Path) -> String {
    let mut dirs = Vec::new();
    if real.activated {
        dirs.push(root.join(".venv/bin").display().to_string());
    }
    if real.setup != Setup::Nothing {
        dirs.push(home.join(BARE_PYTHON).join("bin").display().to_string());
    }
    dirs.push("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    if let Some(cargo) = corpus::folder_of_program("cargo") {
        dirs.push(cargo.display().to_string());
    }
    dirs.join(":")
}

/// The environment of every command of a run: offline toolchains (no
/// registry but the caches in HOME), the venv when active.
fn env_of(real: &Real, project: &TempProject) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "PATH".to_string(),
            path_of(real, &project.root, &project.home),
        ),
        ("CARGO_NET_OFFLINE".into(), "true".into()),
        ("GOPROXY".into(), "off".into()),
        ("GOFLAGS".into(), "-mod=mod".into()),
        ("npm_config_offline".into(), "true".into()),
        ("npm_config_update_notifier".into(), "false".into()),
        ("PIP_NO_INDEX".into(), "1".into()),
        (
            "PIP_FIND_LINKS".into(),
            project.home.join("wheels").display().to_string(),
        ),
        ("PIP_DISABLE_PIP_VERSION_CHECK".into(), "1".into()),
    ];
    if let Some(rustup) = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
    {
        env.push(("RUSTUP_HOME".into(), rustup.display().to_string()));
    }
    if real.activated {
        let venv = project.root.join(".venv");
        env.push(("VIRTUAL_ENV".into(), venv.display().to_string()));
    }
    env
}

/// `program args` in `dir` as the run's user with the run's environment
/// (and HOME), no TMPDIR (a person's default), killed after `timeout`.
fn run_as(
    prepared_env: &[(String, String)],
    home: &Path,
    uid: Option<u32>,
    dir: &Path,
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Run {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env_clear()
        .env("HOME", home)
        .envs(prepared_env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir);
    if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    run_with_timeout(cmd, None, timeout)
}

/// Runs `script` with `sh -c` in `dir` as root before the project is handed
/// to its user; panics with its output when it fails.
fn setup_sh(project: &TempProject, env: &[(String, String)], dir: &Path, script: &str) {
    let run = run_as(
        env,
        &project.home,
        None,
        dir,
        "sh",
        &["-c", script],
        Duration::from_secs(300),
    );
    assert_eq!(run.code, Some(0), "setting up: {script}\n{run:?}");
}

/// The project's folder from the cache, its `.gitignore` lines, one commit
/// on `main`, then what its user set up: the venv, the toolchains' caches
/// in HOME (npm's, cargo's registry, the wheels pip may install offline).
fn lay_out(real: &Real, project: &TempProject, env: &[(String, String)]) {
    let cache = corpus::cache();
    copy_tree(&corpus::source(real.name), &project.root);
    if !real.ignore.is_empty() {
        let path = project.path(".gitignore");
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str(real.ignore);
        std::fs::write(&path, text).unwrap();
    }
    project.git(&["init", "-q", "-b", "main"]);
    project.git(&["config", "user.email", "test@example.invalid"]);
    project.git(&["config", "user.name", "ralph test"]);
    project.git(&["add", "-A"]);
    project.git(&["commit", "-q", "-m", &format!("{} as released", real.name)]);
    copy_tree(&cache.join("wheels"), &project.home.join("wheels"));
    copy_tree(&cache.join("npm"), &project.home.join(".npm"));
    copy_tree(
        &cache.join("cargo/registry"),
        &project.home.join(".cargo/registry"),
    );
    let venv = format!(
        "/usr/bin/python3 -m venv --without-pip {} && /usr/bin/python3 -m venv .venv && .venv/bin/pip install -q --no-compile pytest",
        project.home.join(BARE_PYTHON).display()
    );
    match real.setup {
        Setup::Nothing => {}
        Setup::PytestVenv => setup_sh(project, env, &project.root, &venv),
        Setup::EditableVenv => setup_sh(
            project,
            env,
            &project.root,
            &format!("{venv} hypothesis && .venv/bin/pip install -q --no-compile -e ."),
        ),
    }
}

/// `real` set up for a run as `uid` (root when `None`): laid out, `plan`
/// committed as PLAN.md, handed to its user, `ralph-ctl init --yes` run by
/// them, the task written and `config` merged into config.json.
fn prepare(real: &Real, uid: Option<u32>, config: Value, plan: Option<&str>) -> Prepared {
    let started = Instant::now();
    let project = TempProject::empty_in(&corpus::runs_dir(), real.name);
    let env = env_of(real, &project);
    lay_out(real, &project, &env);
    if let Some(plan) = plan {
        project.write("PLAN.md", plan);
        project.git(&["add", "PLAN.md"]);
        project.git(&["commit", "-q", "-m", "the plan"]);
    }
    let bins_dir = project.root.parent().unwrap().join("bin");
    let ctl = reachable(&ralph_tests::bins::ctl(), &bins_dir);
    reachable(&ralph_tests::bins::hook(), &bins_dir);
    let client = reachable(&ClientVersion::V2_1_330.executable(), &bins_dir);
    if let Some(uid) = uid {
        chown_tree(project.root.parent().unwrap(), uid);
    }
    let ctl_path = ctl.display().to_string();
    let init = run_as(
        &env,
        &project.home,
        uid,
        &project.root,
        &ctl_path,
        &["init", "--yes"],
        Duration::from_secs(60),
    );
    assert_eq!(init.code, Some(0), "ralph-ctl init --yes: {init:?}");
    let config_path = project.path(".claude/ralph/config.json");
    let mut merged: Value = serde_json::from_slice(&std::fs::read(&config_path).unwrap()).unwrap();
    let found = merged["verify"][0]["command"].as_str().unwrap_or_default();
    assert!(
        found.starts_with(real.check),
        "the check init found: {found:?}; {init:?}"
    );
    if let Some(verify) = real.verify {
        merged["verify"][0]["command"] = json!(verify);
    }
    if let Some(setup) = real.worktree_setup {
        merged["worktreeSetup"] = json!(setup);
    }
    for (key, value) in config.as_object().unwrap() {
        merged[key] = value.clone();
    }
    std::fs::write(&config_path, merged.to_string()).unwrap();
    project.write_prompt(&format!(
        "# Task\n\nImprove {}: make the change asked, keep its tests passing, commit it.\n",
        real.name
    ));
    if let Some(uid) = uid {
        chown_tree(&project.root.join(".claude"), uid);
    }
    eprintln!(
        "real_projects: {} set up for {} in {:.1}s",
        real.name,
        who(uid),
        started.elapsed().as_secs_f64()
    );
    Prepared {
        scenario: Scenario::around(project, ClientVersion::V2_1_330),
        uid,
        env,
        bins: Bins { ctl, client },
    }
}

fn who(uid: Option<u32>) -> String {
    uid.map_or("root".into(), |u| format!("uid {u}"))
}

impl Prepared {
    /// The project's check (config.json's first verify command) run
    /// plainly, as its user would run it by hand: no walls.
    fn plain_check(&self, dir: &Path) -> Run {
        let config = self.scenario.config();
        let check = config["verify"][0]["command"].as_str().unwrap().to_string();
        let started = Instant::now();
        let run = run_as(
            &self.env,
            &self.scenario.home,
            self.uid,
            dir,
            "sh",
            &["-c", &check],
            Duration::from_secs(300),
        );
        eprintln!(
            "real_projects: `{check}` plainly in {}: exit {:?} in {:.1}s",
            dir.display(),
            run.code,
            started.elapsed().as_secs_f64()
        );
        run
    }

    /// The launcher with `args` (ralph's own: ralph chooses the client's
    /// permission mode) against `api`, as the run's user; then `status --json`.
    fn launch(&self, api: &MockApi, args: &[&str]) -> (Run, Value) {
        self.launch_walled(api, args, false)
    }

    /// [`Prepared::launch`] where bubblewrap cannot run (a mount namespace
    /// with `/dev/null` over it, as root): the checks' walls are Landlock's.
    fn launch_without_bubblewrap(&self, api: &MockApi, args: &[&str]) -> (Run, Value) {
        self.launch_walled(api, args, true)
    }

    fn launch_walled(&self, api: &MockApi, args: &[&str], landlock: bool) -> (Run, Value) {
        let mut cmd = self
            .scenario
            .launcher(ClientVersion::V2_1_330, api, args, &[]);
        cmd.env_remove("TMPDIR")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RALPH_CLAUDE", &self.bins.client);
        if landlock {
            cmd = without_bubblewrap(cmd);
        }
        if let Some(uid) = self.uid {
            cmd.uid(uid).gid(uid);
        }
        let started = Instant::now();
        let run = run_with_timeout(cmd, None, LOOP_TIMEOUT * 2);
        eprintln!(
            "real_projects: launcher {args:?} in {}: exit {:?} in {:.1}s",
            self.scenario.root.display(),
            run.code,
            started.elapsed().as_secs_f64()
        );
        let status = run_as(
            &self.env,
            &self.scenario.home,
            self.uid,
            &self.scenario.root,
            &self.bins.ctl.display().to_string(),
            &["status", "--json"],
            Duration::from_secs(30),
        );
        let state = serde_json::from_str(&status.stdout)
            .unwrap_or_else(|e| panic!("status --json ({e}): {status:?}\nthe run: {run:?}"));
        (run, state)
    }
}

/// git in `dir` (whoever owns it), its output.
fn git_out(dir: &Path, args: &[&str]) -> String {
    let anyone: Vec<&str> = ["-c", "safe.directory=*"]
        .iter()
        .chain(args)
        .copied()
        .collect();
    ralph_tests::project::git_out(dir, &anyone)
}

/// The text of the stop hook's last feedback the agent was sent: why its
/// claim was rejected.
fn last_feedback(api: &MockApi) -> String {
    api.main_requests()
        .iter()
        .rev()
        .find_map(|r| stop_hook_feedback(&r.body).pop())
        .unwrap_or_default()
}

/// The loop: init, the baseline, the agent breaks a line the tests cover
/// and claims done (rejected), puts it back and claims again (complete).
fn loop_on(real: &Real, uid: Option<u32>, landlock: bool) {
    let prepared = prepare(real, uid, json!({"maxIterations": 4}), None);
    let root = prepared.scenario.root.clone();
    let original = std::fs::read_to_string(root.join(real.file)).unwrap();
    let (from, to) = real.line;
    let (break_it, fix_it) = (edit(real, from, to), edit(real, to, from));
    let api = MockApi::start(move |turn, _| match turn {
        0 => Reply::bash(break_it.clone()),
        1 => Reply::text(format!("The change is made.\n{SIGNAL}")),
        2 => Reply::bash(fix_it.clone()),
        _ => Reply::text(format!("Fixed: the tests pass.\n{SIGNAL}")),
    });
    let (run, state) = if landlock {
        // Without bubblewrap the client has no sandbox either: the agent's
        // commands run with bypassed permissions, the checks in Landlock.
        let bypass = ["--headless", "--", "--permission-mode", "bypassPermissions"];
        prepared.launch_without_bubblewrap(&api, &bypass)
    } else {
        prepared.launch(&api, &["--headless"])
    };
    let said = format!(
        "{run:?}\nstate: {state:#}\nfeedback: {}",
        last_feedback(&api)
    );
    // Run by hand after the loop (before, it would leave the toolchains'
    // caches the first walled check must make), on the code as it began.
    let plain = prepared.plain_check(&root);
    assert_eq!(
        plain.code,
        Some(0),
        "the check passes plainly: {plain:?}\n{said}"
    );
    // The baseline was measured, with the project's tests counted.
    let baseline = &state["testBaseline"][0];
    assert!(
        baseline["run"].as_u64().unwrap_or(0) > 0,
        "no test baseline: {said}"
    );
    assert_eq!(baseline["failed"], 0, "{said}");
    // The broken claim was rejected, the fixed one accepted.
    let first = &state["history"][0];
    assert_eq!(
        first["claim"]["accepted"], false,
        "the broken claim: {said}"
    );
    assert_eq!(run.code, Some(0), "{said}");
    assert_eq!(state["status"], "complete", "{said}");
    assert_eq!(state["iteration"], 2, "{said}");
    assert_eq!(
        std::fs::read_to_string(root.join(real.file)).unwrap(),
        original,
        "{said}"
    );
}

/// The queue's plan: the item that breaks the code first, then the one
/// that lands.
const PLAN: &str = "# Plan\n\n- [ ] Speed up the hot path\n- [ ] Note the module's purpose\n";

/// The item agents: "Speed up the hot path" breaks the covered line and
/// commits it, "Note the module's purpose" appends a comment and commits
/// it; each then claims done with its outcome.
fn queue_agent(real: &Real) -> impl Fn(usize, &Value) -> Reply + Send + Sync + 'static + use<> {
    let (from, to) = real.line;
    let break_it = edit(real, from, to);
    let note = format!(
        "printf '\\n%s\\n' {} >> {}",
        shell_quote(&format!(
            "{} Reviewed: the module's purpose is in its docs.",
            real.comment
        )),
        real.file
    );
    let file = real.file;
    move |turn, body| {
        let Some(title) = item_of(body) else {
            return Reply::text("No item in sight.");
        };
        let change = if title.starts_with("Speed up") {
            &break_it
        } else {
            &note
        };
        match turn {
            0 => Reply::bash(format!(
                "{change}; git add {file} && git commit -q -m {} ; git log --oneline -1",
                shell_quote(&title)
            )),
            _ => script::item_done(&format!("{title}: done."), body),
        }
    }
}

/// Each queue item's stops (why each ended, the gates a claim failed) and
/// what the gates of its last rejected claim said (from the items' own
/// states, kept in the project).
fn rejections(root: &Path) -> String {
    let mut said = String::new();
    let queue = root.join(".claude/context/runtime/queue");
    for entry in std::fs::read_dir(queue).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("ralph-state.json")) else {
            continue;
        };
        let state: Value = serde_json::from_str(&text).unwrap_or_default();
        let item = entry.file_name().to_string_lossy().into_owned();
        for stop in state["history"].as_array().into_iter().flatten() {
            said.push_str(&format!(
                "- {item} iteration {}: {} {}\n",
                stop["iteration"], stop["why"], stop["claim"]["failedGates"]
            ));
        }
        for gate in state["lastClaim"]["gates"].as_array().into_iter().flatten() {
            if gate["passed"] == false {
                said.push_str(&format!(
                    "- {item} ({}): {}\n",
                    gate["gate"],
                    gate["detail"].as_str().unwrap_or("")
                ));
            }
        }
    }
    said
}

/// The queue: two items, one worker; the breaking item must not land, the
/// other must; the project's tests pass on main after.
fn queue_on(real: &Real, uid: Option<u32>) {
    let prepared = prepare(
        real,
        uid,
        json!({"maxIterationsPerItem": 2, "maxIterations": 6}),
        Some(PLAN),
    );
    let root = prepared.scenario.root.clone();
    let api = MockApi::start(queue_agent(real));
    let (run, state) = prepared.launch(&api, &["--queue", "plan:PLAN.md", "--workers", "1"]);
    let said = format!(
        "{run:?}\nstate: {state:#}\nwhy the items' claims were rejected:\n{}",
        rejections(&root)
    );
    let items = state["queue"]["items"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let status_of = |prefix: &str| {
        items
            .values()
            .find(|i| i["title"].as_str().is_some_and(|t| t.starts_with(prefix)))
            .map_or_else(
                || "never taken".into(),
                |i| i["status"].as_str().unwrap_or("?").to_string(),
            )
    };
    let main_file = git_out(&root, &["show", &format!("main:{}", real.file)]);
    let landed_log = git_out(&root, &["log", "--format=%s", "main"]);
    let tracked = git_out(&root, &["ls-tree", "-r", "--name-only", "main"]);
    let after = prepared.plain_check(&root);
    // The breaking change never lands.
    assert!(
        !main_file.contains(real.line.1),
        "the breaking item landed on main ({}): {landed_log}\n{said}",
        status_of("Speed up")
    );
    assert_ne!(status_of("Speed up"), "done", "{said}");
    assert_eq!(
        after.code,
        Some(0),
        "main's tests after the run: {after:?}\n{said}"
    );
    // The passing item lands.
    assert_eq!(status_of("Note"), "done", "{said}");
    assert!(
        main_file.contains("Reviewed: the module's purpose"),
        "{landed_log}\n{said}"
    );
    // Nothing a check wrote was committed.
    let written: Vec<&str> = tracked
        .lines()
        .filter(|p| {
            p.contains("__pycache__")
                || p.ends_with(".pyc")
                || p.contains(".pytest_cache")
                || p.starts_with("target/")
                || p.starts_with("node_modules/")
                || p.contains(".egg-info/")
        })
        .collect();
    assert!(
        written.is_empty(),
        "what the checks wrote was committed: {written:?}\n{said}"
    );
    assert_eq!(run.code, Some(23), "one item landed, one did not: {said}");
}

/// toolz as its user left it: pytest only in `.venv`, not active. `init`
/// then takes the venv's Python as the check; its user sets
/// `python3 -m pytest` instead.
const TOOLZ_VENV_NOT_ACTIVE: Real = Real {
    activated: false,
    check: ".venv/bin/python -m pytest",
    verify: Some("python3 -m pytest"),
    ..TOOLZ
};

/// A check that cannot run at the start stops the start: toolz's
/// `python3 -m pytest` with pytest only in the inactive `.venv`.
fn stops_when_the_check_cannot_run(uid: Option<u32>) {
    let real = &TOOLZ_VENV_NOT_ACTIVE;
    let prepared = prepare(real, uid, json!({"maxIterations": 2}), None);
    let root = prepared.scenario.root.clone();
    let plain = prepared.plain_check(&root);
    assert_ne!(plain.code, Some(0), "pytest is not on this PATH: {plain:?}");
    let api = MockApi::start(|_, _| Reply::text(format!("Done.\n{SIGNAL}")));
    let (run, state) = prepared.launch(&api, &["--headless"]);
    let said = format!("{run:?}\nstate: {state:#}");
    assert!(
        api.main_requests().is_empty(),
        "the loop started with a check that cannot run: {said}"
    );
    assert_ne!(run.code, Some(0), "{said}");
    assert!(
        run.stderr.contains("pytest") && run.stderr.contains(".venv"),
        "the start names what failed and the venv: {said}"
    );
}

/// The tests of the corpus, one a line: `name => call;` is
/// `#[test] fn name() { call; }`, each its own test under its own name
/// (CI filters and the docs name them), with the attributes written before
/// it (`#[ignore = …]`).
macro_rules! real_tests {
    ($($(#[$meta:meta])* $name:ident => $body:expr;)*) => {
        $(
            #[test]
            $(#[$meta])*
            fn $name() {
                $body;
            }
        )*
    };
}

/// toolz under Landlock's walls: its one test that takes a
/// `multiprocessing` lock (`test_fold`) needs `/dev/shm`, which Landlock
/// cannot give a check of its own (docs/security.md says so, and the start's
/// notice); its person, without bubblewrap, checks the rest.
const TOOLZ_UNDER_LANDLOCK: Real = Real {
    verify: Some("python3 -m pytest --deselect toolz/sandbox/tests/test_parallel.py::test_fold"),
    ..TOOLZ
};

/// A loop on `real` under Landlock's walls, bubblewrap hidden: as root only
/// (hiding bubblewrap needs a mount namespace); skipped, and says so, else.
fn loop_under_landlock(real: &Real) {
    if !is_root() {
        eprintln!("skipped: not root (hiding bubblewrap needs a mount namespace)");
        return;
    }
    loop_on(real, None, true);
}

real_tests! {
    attrs_loop_as_root => loop_on(&ATTRS, None, false);
    #[ignore = "full corpus matrix: tests/run.sh --all"]
    attrs_queue_as_root => queue_on(&ATTRS, None);
    attrs_queue_as_nobody => queue_on(&ATTRS, unprivileged());
    #[ignore = "full corpus matrix: tests/run.sh --all"]
    toolz_loop_as_root => loop_on(&TOOLZ, None, false);
    toolz_loop_under_landlock => loop_under_landlock(&TOOLZ_UNDER_LANDLOCK);
    toolz_queue_as_root => queue_on(&TOOLZ, None);
    toolz_start_stops_when_pytest_is_only_in_the_inactive_venv =>
        stops_when_the_check_cannot_run(None);
    bytes_loop_as_root => loop_on(&BYTES, None, false);
    #[ignore = "full corpus matrix: tests/run.sh --all"]
    bytes_queue_as_root => queue_on(&BYTES, None);
    bytes_queue_as_nobody => queue_on(&BYTES, unprivileged());
    #[ignore = "full corpus matrix: tests/run.sh --all"]
    signal_hook_registry_loop_as_root => loop_on(&SIGNAL_HOOK_REGISTRY, None, false);
    signal_hook_registry_loop_under_landlock => loop_under_landlock(&SIGNAL_HOOK_REGISTRY);
    signal_hook_registry_queue_as_root => queue_on(&SIGNAL_HOOK_REGISTRY, None);
    #[ignore = "full corpus matrix: tests/run.sh --all"]
    go_difflib_loop_as_root => loop_on(&GO_DIFFLIB, None, false);
    go_difflib_loop_as_nobody => loop_on(&GO_DIFFLIB, unprivileged(), false);
    go_difflib_queue_as_root => queue_on(&GO_DIFFLIB, None);
}

/// The unprivileged user as root, or this user (`None`) as anyone else.
fn unprivileged() -> Option<u32> {
    is_root().then_some(NOBODY)
}
