//! A temp git project with its own HOME and TMPDIR, and helpers that run the
//! built binaries and the real client in it the way a person (or Claude
//! Code) does.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::bins;
use crate::client::ClientVersion;
use crate::mock_api::MockApi;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// What a finished process left behind.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    /// Everything it printed on stdout.
    pub stdout: String,
    /// Everything it printed on stderr.
    pub stderr: String,
    /// How long it ran.
    pub elapsed: Duration,
}

impl Run {
    /// Panics with the whole output unless the exit code is `code`.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code,
            Some(code),
            "unexpected exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self
    }
}

/// A temp project: `root` is a git repository; `home` and `tmp` keep the
/// client's files apart from other tests.
pub struct TempProject {
    base: PathBuf,
    /// The project folder.
    pub root: PathBuf,
    /// HOME for every process run here.
    pub home: PathBuf,
    /// TMPDIR for every process run here.
    pub tmp: PathBuf,
    /// The folder outside the temp folders that holds `home`, when
    /// [`TempProject::home_outside_temp`] moved it there.
    outside: Option<PathBuf>,
}

impl Drop for TempProject {
    fn drop(&mut self) {
        let folders = std::iter::once(&self.base).chain(self.outside.as_ref());
        for folder in folders {
            if std::env::var_os("RALPH_KEEP_TEST_DIRS").is_none() {
                let _ = std::fs::remove_dir_all(folder);
            } else {
                eprintln!("kept test folder {}", folder.display());
            }
        }
    }
}

/// Runs `cmd` to its end (or `timeout`, then kills its whole process group),
/// feeding `stdin` and capturing both outputs.
pub fn run_with_timeout(mut cmd: Command, stdin: Option<&[u8]>, timeout: Duration) -> Run {
    use std::os::unix::process::CommandExt;
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let start = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let bytes = bytes.to_vec();
        thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    let (status, stdout, stderr) = wait_with_timeout(&mut child, timeout);
    Run {
        code: status.and_then(|s| s.code()),
        stdout,
        stderr,
        elapsed: start.elapsed(),
    }
}

/// Waits for `child`, killing its process group after `timeout`; returns the
/// status (`None` on timeout) and both outputs.
pub fn wait_with_timeout(
    child: &mut Child,
    timeout: Duration,
) -> (Option<ExitStatus>, String, String) {
    let reader = |pipe: Option<Box<dyn Read + Send>>| {
        thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let mut bytes = Vec::new();
                let _ = pipe.read_to_end(&mut bytes);
                text = String::from_utf8_lossy(&bytes).into_owned();
            }
            text
        })
    };
    let out = reader(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = reader(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                kill_group(child.id());
                let _ = child.wait();
                break None;
            }
        }
    };
    // A grandchild that kept the pipes open is killed with the group.
    kill_group(child.id());
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if status.is_none() {
        stderr.push_str(&format!("\n[killed after {timeout:?}]"));
    }
    (status, stdout, stderr)
}

/// Sends SIGKILL to the process group led by `pid` (never to anything else:
/// a pid that does not fit a positive `pid_t` is ignored).
pub fn kill_group(pid: u32) {
    signal_group(pid, libc::SIGKILL);
}

/// Sends `signal` to the process group led by `pid`.
#[allow(unsafe_code)]
pub fn signal_group(pid: u32, signal: i32) {
    if let Ok(pgid) = libc::pid_t::try_from(pid)
        && pgid > 1
    {
        // SAFETY: kill(2) with a negative pid only sends a signal to that group.
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}

/// Sends `signal` to the single process `pid`.
#[allow(unsafe_code)]
pub fn signal_process(pid: u32, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid)
        && pid > 1
    {
        // SAFETY: kill(2) on one positive pid only sends a signal.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// The PROMPT.md [`TempProject::init`] writes: a task, so that a loop
/// starts (the untouched template is refused).
pub const TEST_TASK: &str = "# Task\n\nDo what the project needs, then say so.\n";

/// Every file `ralph-ctl init` installs, relative to the project.
pub const INSTALLED_FILES: [&str; 6] = [
    ".claude/ralph/PROMPT.md",
    ".claude/ralph/guardrails.md",
    ".claude/ralph/ralph-audit.sh",
    ".claude/ralph/ralph-audit.bat",
    ".claude/settings.json",
    ".claude/context/runtime/.gitignore",
];

/// The temp folders a check's walls give it fresh (ralph-core's walls).
const TEMP_FOLDERS: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// Where the tests' projects and homes that must lie outside the temp
/// folders go: `~/.cache/ralph-tests/` (HOME outside the temp folders and
/// the workspace), else the workspace's `target/` (a workspace outside the
/// temp folders).
pub fn outside_the_temp_folders() -> PathBuf {
    let in_temp = |path: &Path| TEMP_FOLDERS.iter().any(|temp| path.starts_with(temp));
    let workspace = std::fs::canonicalize(bins::workspace_root())
        .unwrap_or_else(|e| panic!("the workspace {}: {e}", bins::workspace_root().display()));
    // HOME's cache first, as long as it lies outside the workspace: a
    // folder inside the workspace is inside its Cargo workspace, which
    // cargo then takes a test's own cargo project (a check's, in ralph's
    // clean room under the test's HOME) for a member of.
    match std::env::var_os("HOME").map(PathBuf::from) {
        Some(home) if home.is_absolute() && !in_temp(&home) && !home.starts_with(&workspace) => {
            home.join(".cache/ralph-tests")
        }
        _ if !in_temp(&workspace) => workspace.join("target"),
        _ => panic!(
            "the workspace ({}) is in a temp folder and HOME is not set outside one: \
             set HOME to a folder outside {TEMP_FOLDERS:?}, or clone elsewhere",
            workspace.display()
        ),
    }
}

impl TempProject {
    /// A fresh git project named `name` (for the folder's name only).
    pub fn new(name: &str) -> TempProject {
        TempProject::in_folder(&std::env::temp_dir(), name)
    }

    /// [`TempProject::new`] outside the temp folders (in
    /// [`outside_the_temp_folders`]`/e2e-projects/`), where a person's
    /// project lies: a check's walls give it fresh temp folders, which hide
    /// a project in one.
    pub fn outside_temp(name: &str) -> TempProject {
        TempProject::in_folder(&outside_the_temp_folders().join("e2e-projects"), name)
    }

    /// A fresh git project named `name` in `folder`.
    fn in_folder(folder: &Path, name: &str) -> TempProject {
        let project = TempProject::empty_in(folder, name);
        project.git(&["init", "-q", "-b", "main"]);
        project.git(&["config", "user.email", "test@example.invalid"]);
        project.git(&["config", "user.name", "ralph test"]);
        std::fs::write(project.root.join("README.md"), "# test project\n").unwrap();
        project.git(&["add", "-A"]);
        project.git(&["commit", "-q", "-m", "start"]);
        project
    }

    /// Empty folders for a project named `name` (for the folder's name
    /// only), its HOME and its TMPDIR, under `parent`: no git yet. For a
    /// test whose HOME must not be under the temp folder, where a check's
    /// walls let it write.
    pub fn empty_in(parent: &Path, name: &str) -> TempProject {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let base = parent.join(format!("ralph-test-{}-{n}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let project = TempProject {
            root: base.join("project"),
            home: base.join("home"),
            tmp: base.join("tmp"),
            base,
            outside: None,
        };
        for dir in [&project.root, &project.home, &project.tmp] {
            std::fs::create_dir_all(dir).unwrap();
        }
        project
    }

    /// The project with its HOME in a folder outside `/tmp` and `/var/tmp`
    /// ([`outside_the_temp_folders`], removed with the project), as a
    /// person's or a CI container's home is: the walls re-bind a HOME that
    /// lies in a temp folder, so a test with its HOME there does not see
    /// what a check may write of the real one. Call it before anything
    /// writes to HOME.
    pub fn home_outside_temp(mut self) -> TempProject {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let name = self.base.file_name().unwrap_or_default().to_owned();
        let outside = outside_the_temp_folders()
            .join("test-homes")
            .join(format!("{}-{n}", name.to_string_lossy()));
        let _ = std::fs::remove_dir_all(&outside);
        let home = outside.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let home = std::fs::canonicalize(home).unwrap();
        let _ = std::fs::remove_dir_all(&self.home);
        self.home = home;
        self.outside = Some(outside);
        self
    }

    /// A project with ralph installed, a one-line PROMPT.md, and a running
    /// loop of `max` iterations owned by `session_id` (as `ralph-ctl start` writes it).
    pub fn with_loop(name: &str, session_id: &str, max: u32) -> TempProject {
        TempProject::started(name, session_id, max, None)
    }

    /// [`TempProject::with_loop`], with `config` as config.json before the
    /// start: the config the loop is pinned to.
    pub fn with_loop_and_config(
        name: &str,
        session_id: &str,
        max: u32,
        config: &str,
    ) -> TempProject {
        TempProject::started(name, session_id, max, Some(config))
    }

    /// A project with ralph installed, a one-line PROMPT.md, `config` (if
    /// any) as config.json, and a loop started as `ralph-ctl start` does.
    fn started(name: &str, session_id: &str, max: u32, config: Option<&str>) -> TempProject {
        let project = TempProject::new(name);
        project.init();
        project.write_prompt("Do the task.\n");
        if let Some(config) = config {
            std::fs::write(project.path(".claude/ralph/config.json"), config).unwrap();
        }
        project
            .ctl(
                &[
                    "start",
                    "--session-id",
                    session_id,
                    "--max-iterations",
                    &max.to_string(),
                ],
                &[],
            )
            .assert_code(0);
        project
    }

    /// Drops the loop's pin from its state, as a state written before
    /// pinning: its next stop reads config.json (and pins it).
    pub fn unpin(&self) {
        let mut state = self.state().expect("a loop was started");
        state
            .as_object_mut()
            .and_then(|o| o.remove("pinned"))
            .expect("the loop was pinned");
        self.write_state(&state);
    }

    /// ralph's key folder for the processes run here: `ralph` in the data
    /// folder of this project's own HOME (their environment has no
    /// `XDG_DATA_HOME`), never the real one's.
    pub fn key_dir(&self) -> PathBuf {
        if cfg!(target_os = "macos") {
            self.home.join("Library/Application Support/ralph")
        } else {
            self.home.join(".local/share/ralph")
        }
    }

    /// Writes `entries` (JSON objects, as a test builds them) as the
    /// project's audit log, each line numbered and signed as ralph does it
    /// with the key of this project's HOME (the numbers kept there too).
    pub fn write_log(&self, entries: &[Value]) {
        use ralph_core::persist::{log, mac, sequence};
        let path = self.log_path();
        let folder = path.parent().unwrap();
        std::fs::create_dir_all(folder).unwrap();
        let keys = self.key_dir();
        let key = mac::Key::load_or_create(&keys).expect("the test HOME's key");
        let mut kept = sequence::read(&keys, folder).unwrap().unwrap_or_default();
        let mut text = Vec::new();
        for entry in entries {
            let entry: log::LogEntry = serde_json::from_value(entry.clone()).unwrap();
            let number = kept.next();
            text.extend(log::signed_line(&entry, &path, &key, Some(number)).unwrap());
            text.push(b'\n');
            kept.log = number;
        }
        std::fs::write(&path, text).unwrap();
        sequence::write(&keys, folder, kept).unwrap();
    }

    /// Writes `state` as the project's loop state the way ralph writes it:
    /// pretty JSON signed with the key of this project's HOME (made when
    /// missing). For a test that must hand-make a state ralph believes; one
    /// written any other way is not ralph's (`status` says so).
    pub fn write_state(&self, state: &Value) {
        self.write_state_at(&self.state_path(), state);
    }

    /// [`TempProject::write_state`] for the loop of queue item `slug`
    /// (`runtime/queue/<slug>/`), as a queue run's worker writes it.
    pub fn write_item_state(&self, slug: &str, state: &Value) {
        let path = self
            .root
            .join(".claude/context/runtime/queue")
            .join(slug)
            .join("ralph-state.json");
        self.write_state_at(&path, state);
    }

    fn write_state_at(&self, path: &Path, state: &Value) {
        use ralph_core::persist::{mac, sequence, store};
        let folder = path.parent().unwrap();
        std::fs::create_dir_all(folder).unwrap();
        let keys = self.key_dir();
        let key = mac::Key::load_or_create(&keys).expect("the test HOME's key");
        let mut state = state.clone();
        // A state read back (`state()`) carries its old MAC and number.
        state.as_object_mut().map(|o| {
            o.remove("mac");
            o.remove("sequence")
        });
        let mut json = serde_json::to_vec_pretty(&state).unwrap();
        json.push(b'\n');
        // Numbered past every record of its folder, as ralph numbers it.
        let mut kept = sequence::read(&keys, folder).unwrap().unwrap_or_default();
        kept.state = kept.next();
        let signed =
            store::sign_json(&json, mac::Purpose::State, path, &key, Some(kept.state)).unwrap();
        std::fs::write(path, signed).unwrap();
        sequence::write(&keys, folder, kept).unwrap();
    }

    /// Runs git in the project.
    pub fn git(&self, args: &[&str]) {
        let status = Command::new("git")
            .args(args)
            .current_dir(&self.root)
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .stdout(Stdio::null())
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?} failed");
    }

    /// Makes a bare repository `name` beside the project (branch `main`),
    /// adds it as the remote `origin` and pushes `main` there; its path.
    pub fn bare_origin(&self, name: &str) -> PathBuf {
        let bare = self.root.parent().unwrap().join(name);
        git_out(
            bare.parent().unwrap(),
            &["init", "-q", "--bare", "-b", "main", name],
        );
        self.git(&["remote", "add", "origin", &bare.to_string_lossy()]);
        self.git(&["push", "-q", "origin", "main"]);
        bare
    }

    /// Makes `.venv` in the project with `python3 -m venv --without-pip`;
    /// its real path.
    pub fn make_venv(&self) -> PathBuf {
        let made = self
            .command("python3")
            .args(["-m", "venv", "--without-pip", ".venv"])
            .status()
            .unwrap();
        assert!(made.success(), "python3 -m venv");
        std::fs::canonicalize(self.path(".venv")).unwrap()
    }

    /// Stages every file and commits it with `message`.
    pub fn commit_all(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "-m", message]);
    }

    /// The project's `relative`, read as text; panics naming it when it
    /// cannot be read.
    pub fn read(&self, relative: impl AsRef<Path>) -> String {
        let path = self.path(relative);
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()))
    }

    /// The project's `relative`, read as JSON; panics naming it when it
    /// is missing or not JSON.
    pub fn read_json(&self, relative: &str) -> Value {
        let text = std::fs::read(self.path(relative))
            .unwrap_or_else(|e| panic!("{relative} cannot be read: {e}"));
        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("{relative} is not JSON: {e}"))
    }

    /// The project's `.claude/ralph/config.json`, read as JSON; panics
    /// naming it when it is missing or not JSON.
    pub fn config(&self) -> Value {
        self.read_json(".claude/ralph/config.json")
    }

    /// `.claude/ralph/config.json` as `change` leaves it.
    pub fn edit_config(&self, change: impl FnOnce(&mut Value)) {
        const CONFIG: &str = ".claude/ralph/config.json";
        let mut config = self.read_json(CONFIG);
        change(&mut config);
        self.write(CONFIG, config.to_string());
    }

    /// A command with a clean environment: PATH, HOME and TMPDIR only.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .current_dir(&self.root);
        cmd
    }

    /// A project with one Python module and its unittest test, which
    /// fails: `add` in calc.py subtracts. `sed -i 's/a - b/a + b/' calc.py`
    /// fixes it.
    pub fn python_with_a_failing_test(name: &str) -> TempProject {
        let project = TempProject::new(name);
        project.write("calc.py", "def add(a, b):\n    return a - b\n");
        let test = "import unittest\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 2), 4)\n";
        project.write("test_calc.py", test);
        project
    }

    /// A project whose check is a stand-in test runner, `sh tests.sh`: one
    /// test a line of `tests.txt` (`pass` or `fail`), a pytest summary
    /// line (`=== 1 failed, 1 passed in 0.01s ===`), exit 1 when one
    /// fails, the failing lines printed. Its output never varies, for
    /// snapshots. ralph installed, [`TEST_TASK`] as PROMPT.md, no loop.
    pub fn with_counted_tests(name: &str, tests: &str) -> TempProject {
        const RUNNER: &str = "#!/bin/sh\n\
            # A stand-in test runner: one test a line of tests.txt, pass or fail.\n\
            passed=$(grep -c '^pass' tests.txt)\n\
            failed=$(grep -c '^fail' tests.txt)\n\
            if [ \"$failed\" -gt 0 ]; then\n\
            \x20 grep -n '^fail' tests.txt\n\
            \x20 echo \"=== $failed failed, $passed passed in 0.01s ===\"\n\
            \x20 exit 1\n\
            fi\n\
            echo \"=== $passed passed in 0.01s ===\"\n";
        let project = TempProject::new(name);
        project.write(
            ".claude/ralph/config.json",
            r#"{"verify": [{"name": "tests", "command": "sh tests.sh", "timeoutSeconds": 20}]}"#,
        );
        project.write("tests.sh", RUNNER);
        project.write("tests.txt", tests);
        project.init();
        project
    }

    /// A new project `name` set up by [`TempProject::init`].
    pub fn initialised(name: &str) -> TempProject {
        let project = TempProject::new(name);
        project.init();
        project
    }

    /// `ralph-ctl init`, which must succeed, then [`TEST_TASK`] as PROMPT.md.
    pub fn init(&self) {
        self.init_untouched();
        self.write_prompt(TEST_TASK);
    }

    /// `ralph-ctl init`, leaving PROMPT.md the template (which a loop
    /// refuses to start on without `--force`).
    pub fn init_untouched(&self) {
        self.ctl(&["init"], &[]).assert_code(0);
    }

    /// Replaces PROMPT.md.
    pub fn write_prompt(&self, text: &str) {
        std::fs::write(self.root.join(".claude/ralph/PROMPT.md"), text).unwrap();
    }

    /// The state file's path.
    pub fn state_path(&self) -> PathBuf {
        self.runtime_dir().join("ralph-state.json")
    }

    /// The folder of the loop's state, log and queue claims.
    pub fn runtime_dir(&self) -> PathBuf {
        self.root.join(".claude/context/runtime")
    }

    /// The state file's bytes; panics when it cannot be read.
    pub fn state_bytes(&self) -> Vec<u8> {
        std::fs::read(self.state_path())
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", self.state_path().display()))
    }

    /// The state file parsed, or `None` when it does not exist.
    pub fn state(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.state_path()).ok()?;
        Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("state is not JSON ({e}): {text}")),
        )
    }

    /// The audit log's text (`ralph-log.jsonl`); empty when there is none.
    pub fn audit_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The audit log, `ralph-log.jsonl`.
    pub fn log_path(&self) -> PathBuf {
        self.runtime_dir().join("ralph-log.jsonl")
    }

    /// The queue's claims, `ralph-queue.json`.
    pub fn queue_claims_path(&self) -> PathBuf {
        self.runtime_dir().join("ralph-queue.json")
    }

    /// The audit log's first line of `event`; panics with the log when
    /// there is none.
    pub fn log_line(&self, event: &str) -> String {
        let log = self.audit_log();
        let needle = format!("\"event\":\"{event}\"");
        let line = log.lines().find(|l| l.contains(&needle));
        line.unwrap_or_else(|| panic!("no {event} in the audit log: {log}"))
            .to_string()
    }

    /// `ralph-ctl status --json`, parsed.
    pub fn status_json(&self) -> Value {
        let run = self.ctl(&["status", "--json"], &[]);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {run:?}"))
    }

    /// Runs the built hook with `stdin` and `env` (plus `RALPH_ACTIVE=1`
    /// unless `env` sets it), as Claude Code does.
    pub fn hook(&self, stdin: &[u8], env: &[(&str, &str)]) -> Run {
        let mut cmd = self.command(bins::hook());
        if !env.iter().any(|(k, _)| *k == "RALPH_ACTIVE") {
            cmd.env("RALPH_ACTIVE", "1");
        }
        cmd.envs(env.iter().copied());
        run_with_timeout(cmd, Some(stdin), Duration::from_secs(30))
    }

    /// The environment that points the real client at the mock, offline.
    pub fn client_env(&self, client: ClientVersion, api: &MockApi) -> Vec<(String, String)> {
        vec![
            (
                "RALPH_CLAUDE".into(),
                client.executable().display().to_string(),
            ),
            ("ANTHROPIC_BASE_URL".into(), api.base_url()),
            ("ANTHROPIC_API_KEY".into(), "test-key".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            ("IS_SANDBOX".into(), "1".into()),
        ]
    }

    /// The launcher, headless, with the real client and bypassed permissions.
    pub fn launcher_command(
        &self,
        client: ClientVersion,
        api: &MockApi,
        env: &[(&str, &str)],
    ) -> Command {
        self.launcher(
            client,
            api,
            &["--headless", "--", "--permission-mode", "bypassPermissions"],
            env,
        )
    }

    /// The launcher with `args` (its own, then `--` and the client's), the
    /// real client against `api`, and `env`.
    pub fn launcher(
        &self,
        client: ClientVersion,
        api: &MockApi,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Command {
        let mut cmd = self.command(self.root.join(".claude/ralph/ralph-audit.sh"));
        cmd.args(args)
            .envs(self.client_env(client, api))
            .envs(env.iter().copied());
        cmd
    }

    /// Runs the launcher to its end (killed after `timeout`).
    pub fn run_launcher(
        &self,
        client: ClientVersion,
        api: &MockApi,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Run {
        run_with_timeout(self.launcher_command(client, api, env), None, timeout)
    }

    /// Runs the real client directly (no launcher): a plain `claude -p` session.
    pub fn run_client(
        &self,
        client: ClientVersion,
        api: &MockApi,
        prompt: &str,
        env: &[(&str, &str)],
        timeout: Duration,
    ) -> Run {
        let mut cmd = self.command(client.executable());
        cmd.args([
            "-p",
            prompt,
            "--output-format",
            "json",
            "--permission-mode",
            "bypassPermissions",
        ])
        .envs(self.client_env(client, api))
        .envs(env.iter().copied());
        run_with_timeout(cmd, None, timeout)
    }

    /// A path inside the project.
    pub fn path(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.root.join(relative)
    }

    /// A folder inside the project, made with its parents if missing;
    /// panics naming it when it cannot be made.
    pub fn dir(&self, relative: impl AsRef<Path>) -> PathBuf {
        let path = self.path(relative);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("{} cannot be made: {e}", path.display()));
        path
    }

    /// Writes `contents` to the project's file `relative`, making its
    /// folders first.
    pub fn write(&self, relative: impl AsRef<Path>, contents: impl AsRef<[u8]>) {
        let path = self.path(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// A transcript as the client has written it by the time its Stop hook
    /// sees `message`: the task, then the final assistant message (without a
    /// message id, so it counts no model request). The hook waits for the
    /// transcript to show the stop's message, and for a missing file to
    /// appear, so an input that carries a message points at one of these.
    /// Kept outside the project, where the client keeps it; named after the
    /// message, so stops saying different things get their own.
    pub fn transcript_ending_with(&self, message: &str) -> PathBuf {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        message.hash(&mut hasher);
        let path = self.home.join(format!(
            ".claude/projects/test/{:016x}.jsonl",
            hasher.finish()
        ));
        let prompt = serde_json::json!({"type": "user",
            "message": {"role": "user", "content": "Do the task"}});
        let answer = serde_json::json!({"type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "text", "text": message}]}});
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("{prompt}\n{answer}\n")).unwrap();
        path
    }
}

/// A path in the temp folder named `name` and this process's id, with
/// nothing at it: a mark a test's attacker leaves outside the project,
/// where another run of the tests does not meet it.
pub fn fresh_temp_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Runs `cmd` with stdin fed by `feed` on a thread; returns the run and the
/// process's peak resident memory in KiB (from wait4's rusage; it counts
/// what this process held when it started the child, so measure from a
/// process that stays small). Killed after `timeout`.
#[allow(unsafe_code)]
pub fn run_measured(
    mut cmd: Command,
    timeout: Duration,
    feed: impl FnOnce(std::process::ChildStdin) + Send + 'static,
) -> (Run, u64) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = cmd.spawn().unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let feeder = thread::spawn({
        let stdin = child.stdin.take().unwrap();
        move || feed(stdin)
    });
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    // Wait for the exit without reaping (WNOWAIT), so that the timeout can
    // still kill this very process and no other.
    loop {
        // SAFETY: siginfo_t is plain data; all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) on our own child with a valid out pointer.
        let r = unsafe {
            libc::waitid(
                libc::P_PID,
                pid.cast_unsigned(),
                &raw mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        assert_eq!(r, 0, "waitid: {}", std::io::Error::last_os_error());
        // SAFETY: waitid filled `info` (si_pid stays 0 while the child runs).
        if unsafe { info.si_pid() } == pid {
            break;
        }
        if start.elapsed() > timeout {
            signal_process(child.id(), libc::SIGKILL);
        }
        thread::sleep(Duration::from_millis(5));
    }
    let mut status = 0;
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: reaps our own exited child, with valid out pointers.
    let r = unsafe { libc::wait4(pid, &raw mut status, 0, &raw mut usage) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    let elapsed = start.elapsed();
    drop(child); // already reaped; dropping a Child never waits
    let _ = feeder.join();
    let run = Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        elapsed,
    };
    (run, u64::try_from(usage.ru_maxrss).unwrap_or(0))
}

/// Limits the size of every file `cmd` writes (`RLIMIT_FSIZE`), as a full
/// disk or a quota would.
#[allow(unsafe_code)]
pub fn limit_file_size(cmd: &mut Command, bytes: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit(2) is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The live (not zombie) processes whose command line contains `needle`,
/// from `/proc`, with their command lines.
pub fn processes_matching(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for (pid, _, dir) in live_processes() {
        let Ok(raw) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&raw).replace('\0', " ");
        if line.contains(needle) && pid != std::process::id() {
            found.push((pid, line.trim().to_string()));
        }
    }
    found
}

/// Every process of `/proc` that is not a zombie: its pid, the fields of
/// its `stat` after the command name (state, ppid, pgrp, ...), and its
/// folder in `/proc`.
fn live_processes() -> Vec<(u32, Vec<String>, PathBuf)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let fields: Vec<String> = after.split_whitespace().map(String::from).collect();
        if fields.first().is_some_and(|state| state != "Z") {
            found.push((pid, fields, entry.path()));
        }
    }
    found
}

/// The model requests a loop's state counted (`recentCalls`, over all its
/// minutes): what every request served must add up to.
pub fn counted_requests(state: &Value) -> u64 {
    state["recentCalls"].as_array().map_or(0, |minutes| {
        minutes.iter().filter_map(|m| m["calls"].as_u64()).sum()
    })
}

/// The session's total cost a transcript's last `cost-state` line gives
/// (Claude Code 2.1 writes one when a process of the session ends).
pub fn last_cost_state(transcript: &str) -> Option<f64> {
    transcript
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "cost-state")
        .find_map(|v| v["totalCostUSD"].as_f64())
}

/// The live (not zombie) processes whose process group is `pgid`, from `/proc`.
pub fn processes_in_group(pgid: u32) -> Vec<u32> {
    let group = pgid.to_string();
    let in_group = |fields: &[String]| fields.get(2) == Some(&group);
    live_processes()
        .into_iter()
        .filter(|(_, fields, _)| in_group(fields))
        .map(|(pid, _, _)| pid)
        .collect()
}

/// The live (not zombie) processes in the pid namespace `ns` (the target
/// of a `/proc/<pid>/ns/pid` link), from `/proc`.
pub fn processes_in_pid_namespace(ns: &Path) -> Vec<u32> {
    live_processes()
        .into_iter()
        .filter(|(_, _, dir)| std::fs::read_link(dir.join("ns/pid")).is_ok_and(|n| n == ns))
        .map(|(pid, _, _)| pid)
        .collect()
}

/// The process group of the live process `pid`, from `/proc`.
pub fn process_group_of(pid: u32) -> Option<u32> {
    live_processes()
        .into_iter()
        .find(|(p, _, _)| *p == pid)
        .and_then(|(_, fields, _)| fields.get(2)?.parse().ok())
}

/// The pid of a child of `parent` (Linux: /proc).
pub fn child_of(parent: u32) -> Option<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{parent}/task")).ok()?;
    for task in tasks.flatten() {
        if let Ok(children) = std::fs::read_to_string(task.path().join("children"))
            && let Some(pid) = children.split_whitespace().next()
        {
            return pid.parse().ok();
        }
    }
    None
}

/// git in `dir`, with no system configuration and nothing on stdin.
fn git_in(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// git in `dir`: its exit code (-1 when killed) and trimmed stdout, for a
/// test that expects it may fail.
pub fn git_status_out(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = git_in(dir, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

/// git in `dir`: its trimmed stdout; panics, showing the output, unless it
/// succeeded.
pub fn git_out(dir: &Path, args: &[&str]) -> String {
    let out = git_in(dir, args);
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes each `(name, contents)` of `files` under `dir`, making the
/// folders they need.
pub fn write_tree(dir: &Path, files: &[(&str, &str)]) {
    for (name, contents) in files {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&path, contents).unwrap();
    }
}

/// The files named `import-*` in `folder` of the project `root` and of each
/// of ralph's clean rooms under `home` (a claim's check runs the agent's
/// code in the room's copy of the tree, the test baseline in the project):
/// what the agent's module recorded each time a check imported it.
pub fn import_records(root: &Path, home: &Path, folder: &str) -> Vec<String> {
    let rooms = std::fs::read_dir(home.join(".local/state/ralph/rooms"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|room| room.path().join("tree").join(folder));
    std::iter::once(root.join(folder))
        .chain(rooms)
        .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with("import-"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect()
}
