//! The client's own sandbox for unattended runs, and the permission rules
//! every run carries: whether this machine and client can sandbox the
//! agent's commands, what a run does when they cannot, and the `--settings`
//! object that says so to the client. Pure but for [`Machine::probe`] and
//! [`files_at_start`].
//!
//! In the sandbox (bubblewrap + socat on Linux, Seatbelt on macOS) the
//! client runs the agent's shell commands without prompts, and the operating
//! system refuses their writes outside the project and to the paths ralph
//! protects. Without it, a headless run gets `acceptEdits` plus one allow
//! rule, for `ralph-ctl check` (which runs the project's checks inside
//! ralph's walls), never for the checks' own commands (those would run the
//! agent's code in its own shell, unwalled, with the person's rights) nor
//! for git's add and commit (each reads a file the agent names:
//! `git commit -F ~/.local/share/ralph/record.key` put ralph's key into a
//! commit, `--pathspec-from-file` into an error message). Either way, the deny rules keep the file tools
//! off ralph's files.

use std::path::{Path, PathBuf};

use ralph_core::judge::config::SandboxSetting;
use serde_json::{Value, json};

use super::command::ClientVersion;

/// The oldest client whose sandbox ralph has seen hold. 2.0.77's does not
/// (docs/protocol-notes.md): its agent could rename `.claude` (the
/// read-only paths are the files listed, not the folder) and create a
/// settings file there that did not exist at the start, and its Bash tool
/// there loses the output of a pipeline (`echo alpha | tail -1` comes back
/// empty: its `< /dev/null` is quoted into the pipeline's last command).
/// No setting changes the last, and making `.claude` itself read-only,
/// which stops the first two, would wall in the worktrees under it. So
/// older clients get the unsandboxed rules, as on a machine without
/// bubblewrap.
pub(crate) const OLDEST_SANDBOXED_CLIENT: ClientVersion = ClientVersion(2, 1, 330);

/// The operating systems the client's sandbox knows.
// `MacOs` is the system's name, not a repetition of the enum's.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Os {
    /// bubblewrap and socat.
    Linux,
    /// Seatbelt (`sandbox-exec`), part of the system.
    MacOs,
    /// No sandbox in the client (native Windows and the rest).
    Other,
}

impl Os {
    /// The system this binary was built for.
    pub(crate) fn current() -> Os {
        if cfg!(target_os = "linux") {
            Os::Linux
        } else if cfg!(target_os = "macos") {
            Os::MacOs
        } else {
            Os::Other
        }
    }
}

/// What the machine has for the client's sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Machine {
    /// The system.
    pub(crate) os: Os,
    /// `bwrap` found on PATH (Linux).
    pub(crate) bubblewrap: bool,
    /// `socat` found on PATH (Linux).
    pub(crate) socat: bool,
    /// `/usr/bin/sandbox-exec` present (macOS).
    pub(crate) seatbelt: bool,
}

impl Machine {
    /// Looks at this machine: the programs on `path_var` (PATH).
    pub(crate) fn probe(path_var: Option<&std::ffi::OsStr>) -> Machine {
        let on_path = |name: &str| {
            super::command::find_executable(name, Path::new("/"), path_var, None).is_some()
        };
        Machine {
            os: Os::current(),
            bubblewrap: on_path("bwrap"),
            socat: on_path("socat"),
            seatbelt: Path::new("/usr/bin/sandbox-exec").exists(),
        }
    }
}

/// Whether a client on a machine can sandbox the agent's commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Support {
    /// It can.
    Ready,
    /// It cannot, and this says why and what to do (one sentence).
    Missing(String),
}

/// Whether `client` (its version, when known) on `machine` can sandbox:
/// when it cannot, every reason, the client's first.
pub(crate) fn support(machine: &Machine, client: Option<ClientVersion>) -> Support {
    // A client whose version cannot be read is taken to have a sandbox
    // that holds: an older one ignores the setting, and the breaker names
    // what it then refuses.
    let client_why = match client {
        Some(v) if v < OLDEST_SANDBOXED_CLIENT => Some(format!(
            "Claude Code {v}'s sandbox does not hold: its agent can rename `.claude` and \
             create settings files in it, and a pipeline's output is lost there; update it \
             to {OLDEST_SANDBOXED_CLIENT} or later (`npm install -g @anthropic-ai/claude-code`)"
        )),
        _ => None,
    };
    let machine_why = match machine.os {
        Os::Linux => {
            let missing: Vec<&str> = [("bubblewrap", machine.bubblewrap), ("socat", machine.socat)]
                .iter()
                .filter(|(_, found)| !found)
                .map(|(name, _)| *name)
                .collect();
            (!missing.is_empty()).then(|| {
                format!(
                    "{} not installed: `sudo apt-get install {}` (or your system's package manager)",
                    match missing.as_slice() {
                        [one] => format!("{one} is"),
                        _ => format!("{} are", missing.join(" and ")),
                    },
                    missing.join(" ")
                )
            })
        }
        Os::MacOs if machine.seatbelt => None,
        Os::MacOs => Some("/usr/bin/sandbox-exec (Seatbelt) is missing".into()),
        Os::Other => Some(
            "the client has no sandbox on this system (on Windows, run ralph and Claude Code in WSL2)"
                .into(),
        ),
    };
    let why: Vec<String> = client_why.into_iter().chain(machine_why).collect();
    if why.is_empty() {
        Support::Ready
    } else {
        Support::Missing(why.join("; and "))
    }
}

/// What one run does about the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The client runs the agent's commands in its sandbox.
    pub(crate) sandboxed: bool,
    /// Headless without the sandbox: allow rules for `ralph-ctl check` and
    /// for git.
    pub(crate) allow_checks: bool,
    /// One line for the person, when there is something to say.
    pub(crate) notice: Option<String>,
}

/// Why a run cannot start: `sandbox` is `on` and there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal(pub String);

/// What the person asked for on the command line (`--sandbox`,
/// `--no-sandbox`), over the config's `sandbox`.
pub(crate) fn setting(config: SandboxSetting, flag: Option<bool>) -> SandboxSetting {
    match flag {
        Some(true) => SandboxSetting::On,
        Some(false) => SandboxSetting::Off,
        None => config,
    }
}

/// Decides the sandbox for one run: `unattended` (headless, fresh, a
/// formula) runs get it by default; an interactive run only when it is
/// `on`. `own_settings` is true when the person passed `--settings`
/// (theirs wins: ralph adds no sandbox to it).
pub(crate) fn plan(
    setting: SandboxSetting,
    unattended: bool,
    support: &Support,
    own_settings: bool,
) -> Result<Plan, Refusal> {
    let unsandboxed = |notice: Option<String>| Plan {
        sandboxed: false,
        allow_checks: unattended,
        notice,
    };
    if own_settings {
        return Ok(Plan {
            sandboxed: false,
            allow_checks: false,
            notice: (setting != SandboxSetting::Off).then(|| {
                "sandbox: your --settings is merged with ralph's (its deny rules on ralph's files, \
                 its hooks), yours winning, and ralph adds no sandbox of its own (put \"sandbox\": \
                 {\"enabled\": true} in it to have one)"
                    .to_string()
            }),
        });
    }
    match (setting, support) {
        (SandboxSetting::Off, _) => Ok(unsandboxed(unattended.then(|| {
            "sandbox: off; the agent's commands run unsandboxed (without a permission mode of \
             yours: acceptEdits, with `ralph-ctl check` allowed; the agent's work is left \
             uncommitted)"
                .to_string()
        }))),
        (SandboxSetting::Auto, _) if !unattended => Ok(unsandboxed(None)),
        (_, Support::Ready) => Ok(Plan {
            sandboxed: true,
            allow_checks: false,
            notice: None,
        }),
        (SandboxSetting::On, Support::Missing(why)) => Err(Refusal(format!(
            "sandbox is on (config `sandbox`, RALPH_SANDBOX or --sandbox) but cannot run: {why}; \
             or run with --no-sandbox"
        ))),
        (SandboxSetting::Auto, Support::Missing(why)) => Ok(unsandboxed(Some(format!(
            "sandbox: not available ({why}); without a permission mode of yours the agent gets \
             acceptEdits with `ralph-ctl check` allowed instead, and its work is left uncommitted"
        )))),
    }
}

/// The paths of a project the agent must never write: ralph's config,
/// formulas, prompt and launchers (`.claude/ralph`), the loop's state and
/// log (`.claude/context`), and the client's settings files, which hold the
/// hooks that run outside the sandbox. Each is one literal path (no glob:
/// 2.0 skips globs in its sandbox on Linux). `extra` adds the files of
/// `protectedPaths` that existed at the loop's start ([`files_at_start`]),
/// relative to the project unless absolute: never a folder of them, so
/// that the agent can add a test.
pub(crate) fn protected_paths(root: &Path, extra: &[PathBuf]) -> Vec<PathBuf> {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let claude = root.join(".claude");
    let mut paths = vec![
        claude.join("ralph"),
        claude.join("context"),
        claude.join("settings.json"),
        claude.join("settings.local.json"),
    ];
    paths.extend(extra.iter().map(|p| root.join(p)));
    paths.extend(git_paths(&root));
    paths
}

/// The parts of the repository's common git folder `root` uses (its
/// `.git`, or for a worktree ralph made the main checkout's `.git`, found
/// by the worktree's name, never through its `.git` file or a `commondir`
/// the agent could have rewritten: `own_git::GitPlace`) that name
/// programs git runs: `config`
/// and `config.worktree` (`core.fsmonitor`, `core.hooksPath`, a merge
/// driver), `hooks`, and `info` (`info/attributes` names a merge driver
/// or a filter). The next client, ralph's git and the merge queue's
/// rebase all read them. The rest (`index`, objects, refs, logs) stays
/// writable: the agent commits. None outside a git project.
pub(crate) fn git_paths(root: &Path) -> Vec<PathBuf> {
    // Where the repository's own folder is, never where a `commondir` the
    // agent wrote would send git.
    ralph_core::own_git::GitPlace::locate(root)
        .ok()
        .and_then(|place| std::fs::canonicalize(place.common_dir).ok())
        .map(|common| {
            ["config", "config.worktree", "hooks", "info"]
                .iter()
                .map(|name| common.join(name))
                .collect()
        })
        .unwrap_or_default()
}

/// ralph's settings `settings` (JSON) for a client started in `worktree`,
/// a worktree of the main checkout `main` under `.claude/worktrees/`:
/// beside each deny rule on a path of the main checkout, the same rule on
/// the worktree's own copy of it (its `.claude/ralph`, its settings files,
/// its protected files), so that the agent there is walled as in the main
/// checkout. The common git folder's rules are the worktree's already.
/// Settings that cannot be read are given back as they are.
pub(crate) fn in_worktree(settings: &str, main: &Path, worktree: &Path) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(settings) else {
        return settings.to_string();
    };
    let Some(deny) = value
        .pointer_mut("/permissions/deny")
        .and_then(Value::as_array_mut)
    else {
        return settings.to_string();
    };
    let main = std::fs::canonicalize(main).unwrap_or_else(|_| main.to_path_buf());
    let worktree = std::fs::canonicalize(worktree).unwrap_or_else(|_| worktree.to_path_buf());
    let twins: Vec<Value> = deny
        .iter()
        .filter_map(|rule| {
            let path = rule.as_str()?.strip_prefix("Edit(/")?.strip_suffix(')')?;
            let relative = Path::new(path).strip_prefix(&main).ok()?;
            let shared = relative.starts_with(".git")
                || relative.starts_with(super::worktree::WORKTREES_DIR)
                || relative.as_os_str().is_empty();
            (!shared).then(|| Value::String(deny_rule(&worktree.join(relative))))
        })
        .collect();
    for twin in twins {
        if !deny.contains(&twin) {
            deny.push(twin);
        }
    }
    value.to_string()
}

/// The `ralph-ctl` commands that are the person's, not the agent's: its
/// shell is refused them (a wrapper or a script still runs; in the sandbox
/// their writes to the state fail).
pub(crate) const PERSONS_COMMANDS: [&str; 6] = [
    "ralph-ctl reset",
    "ralph-ctl start",
    "ralph-ctl say",
    "ralph-ctl answer",
    "ralph-ctl reload",
    "ralph-ctl statusline",
];

/// The files of `protectedPaths` given deny rules (and read-only paths in
/// the sandbox) of their own, at most: past that, none is, and the claim's
/// gate alone judges them (the client's settings stay small).
pub(crate) const MAX_DENIED_FILES: usize = 100;

/// The files under `protectedPaths` at the loop's start, relative to the
/// project, each to be kept off the agent's file tools (and read-only in
/// the sandbox): the whole files of `snapshot` (the pytest tables of
/// `pyproject.toml` and `setup.cfg` are the claim's to judge; the rest of
/// those files is the agent's), none when they are more than
/// [`MAX_DENIED_FILES`]. The folders stay writable: a new file in them
/// (a test for the fix) is the agent's to add.
pub(crate) fn protected_files(
    snapshot: Option<&ralph_core::observe::protected::ProtectedSnapshot>,
) -> Vec<PathBuf> {
    let files = snapshot.map(|s| s.whole_files()).unwrap_or_default();
    if files.len() > MAX_DENIED_FILES {
        return Vec::new();
    }
    files.into_iter().map(PathBuf::from).collect()
}

/// The protected files' snapshot a run's deny rules are made from: the
/// loop's own when the run resumes it (files the agent added since are
/// not among them), else the files as they are now, which the loop about
/// to start records as its own. `None` without `protectedPaths`.
pub(crate) fn files_at_start(
    paths: &ralph_core::paths::ProjectPaths,
    patterns: &[String],
    resume: bool,
) -> Option<ralph_core::observe::protected::ProtectedSnapshot> {
    if resume && let Ok(Some(state)) = ralph_core::persist::store::StateStore::new(paths).read() {
        return state.protected_files;
    }
    ralph_core::observe::protected::snapshot(&paths.root, patterns)
}

/// The deny rule that keeps the file tools, and in the sandbox the agent's
/// commands, off `path`: `Edit(//absolute/path)`. Both clients turn such a
/// rule into a read-only path in their sandbox.
pub(crate) fn deny_rule(path: &Path) -> String {
    format!("Edit(/{})", path.display())
}

/// The deny rules that keep the agent off ralph's key folder `dir`
/// (`ralph_core::persist::mac::key_dir`): reading it, with the file tools
/// and, in the sandbox, with its commands (a read-denied path there), and
/// writing it. With the key, anything could sign a state `complete`. Each
/// as the literal path (the sandbox on 2.0.77 takes no glob) and the folder's
/// contents (the file tools match a pattern).
pub(crate) fn key_rules(dir: Option<&Path>) -> Vec<String> {
    let Some(dir) = dir else {
        return Vec::new();
    };
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let dir = dir.display();
    ["Read", "Edit"]
        .iter()
        .flat_map(|tool| [format!("{tool}(/{dir})"), format!("{tool}(/{dir}/**)")])
        .collect()
}

/// The allow rules of a headless run without the sandbox: `ralph-ctl
/// check` as the agent types it (the name, which the client's PATH finds,
/// see [`path_with_ralph_ctl`]; and the full path of `ralph_ctl`, this
/// program, when given), so the agent can check its work. Never a check's
/// own command: run by the agent, it would run the agent's code (the
/// module a test imports) in the agent's own shell, outside every wall,
/// with the person's rights; `ralph-ctl check` runs it inside the walls a
/// stop's check runs in. Nor git's add and commit: a rule admits every
/// command that starts with its words, and each of them reads a file the
/// agent names (`git commit -F`, `--template`, `--pathspec-from-file`,
/// `git add --pathspec-from-file`), ralph's key among them, outside any
/// sandbox. The agent's work stays in the tree: a plain loop leaves it for
/// the person, a `--worktree` iteration's worktree is kept with it, and the
/// merge queue commits it.
pub(crate) fn allow_rules(ralph_ctl: Option<&Path>) -> Vec<String> {
    let check = ralph_core::observe::prompt_text::CHECK_COMMAND;
    let mut rules = vec![format!("Bash({check}:*)")];
    if let Some(program) = ralph_ctl.and_then(|p| p.to_str()) {
        let subcommand = check.trim_start_matches("ralph-ctl");
        let rule = format!("Bash({program}{subcommand}:*)");
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }
    rules
}

/// The client's PATH (`path_var`, the inherited one) with the folder of
/// `ralph_ctl` (this program) added at its end, when no `ralph-ctl` is
/// found on it: so `ralph-ctl check`, as every text ralph gives the agent
/// names it, runs this ralph-ctl. `None` when one is found (the person's
/// own stays first) or `ralph_ctl` has no folder.
pub(crate) fn path_with_ralph_ctl(
    path_var: Option<&std::ffi::OsStr>,
    ralph_ctl: &Path,
) -> Option<std::ffi::OsString> {
    let folder = ralph_ctl.parent().filter(|f| f.is_absolute())?;
    let found = super::command::find_executable("ralph-ctl", Path::new("/"), path_var, None);
    if found.is_some() {
        return None;
    }
    let mut folders: Vec<PathBuf> = path_var
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    folders.push(folder.to_path_buf());
    std::env::join_paths(folders).ok()
}

/// Everything ralph passes with `--settings`: the sandbox (when `plan`
/// has it; the agent may not step outside it), the deny rules for
/// `protected`, the allow rules `allow`, and ralph's hook for `StopFailure`
/// when given. `None` when there is nothing to say.
pub(crate) fn settings(
    plan: &Plan,
    protected: &[PathBuf],
    allow: &[String],
    stop_failure_hook: Option<&str>,
    required: bool,
) -> Option<Value> {
    let mut settings = json!({});
    if plan.sandboxed {
        settings["sandbox"] = json!({
            "enabled": true,
            "autoAllowBashIfSandboxed": true,
            "allowUnsandboxedCommands": false,
        });
        if required {
            settings["sandbox"]["failIfUnavailable"] = json!(true);
        }
    }
    if !protected.is_empty() {
        let mut deny: Vec<String> = protected.iter().map(|p| deny_rule(p)).collect();
        deny.extend(PERSONS_COMMANDS.iter().map(|c| format!("Bash({c}:*)")));
        deny.extend(key_rules(ralph_core::persist::mac::key_dir().as_deref()));
        settings["permissions"]["deny"] = json!(deny);
    }
    if plan.allow_checks && !allow.is_empty() {
        settings["permissions"]["allow"] = json!(allow);
    }
    if let Some(command) = stop_failure_hook {
        settings["hooks"] = json!({"StopFailure": [{"hooks": [
            {"type": "command", "command": command, "timeout": 30}
        ]}]});
    }
    (settings != json!({})).then_some(settings)
}

/// What the agent's commands leave in the tree: nothing of Python's
/// bytecode (`PYTHONDONTWRITEBYTECODE=1` in the settings' `env`, which the
/// client passes to every command it runs), so that a `__pycache__` of the
/// agent's runs is never committed with its work. ralph's checks send
/// theirs to their own temp folder (`walls::OUT_OF_THE_TREE`).
pub(crate) const AGENT_ENV: [(&str, &str); 1] = [("PYTHONDONTWRITEBYTECODE", "1")];

/// `settings` with the agent's own toolchain caches `caches`
/// (`walls::caches`, [`Owner::Agent`](ralph_core::walls::caches::Owner)):
/// their variables in the settings' `env` (which the client passes to every
/// command it runs, sandboxed or not) and, in the client's sandbox
/// (`plan`), their folder writable to the agent's commands, as
/// `sandbox.filesystem.allowWrite` (read by 2.1.330; 2.0.77, which ralph
/// does not sandbox, takes its write roots from `Edit` allow rules only).
/// Never the person's caches nor the checks': what the agent writes there
/// no build of the person's and no check of ralph's reads. And [`AGENT_ENV`].
pub(crate) fn with_check_rights(
    settings: Option<Value>,
    plan: &Plan,
    caches: Option<&ralph_core::walls::caches::OwnCaches>,
) -> Option<Value> {
    let mut settings = settings.unwrap_or_else(|| json!({}));
    if let Some(caches) = caches {
        if plan.sandboxed && settings["sandbox"].is_object() {
            let folder = caches.folder.display().to_string();
            settings["sandbox"]["filesystem"] = json!({ "allowWrite": [folder] });
        }
        for (key, value) in &caches.env {
            settings["env"][key] = json!(value.to_string_lossy());
        }
    }
    for (key, value) in AGENT_ENV {
        settings["env"][key] = json!(value);
    }
    Some(settings)
}

/// The client arguments with the person's own `--settings` (given after
/// `--`) merged into ralph's, as one `--settings`: the client takes one
/// (2.1.330 kept the last of two, so the person's replaced ralph's deny
/// rules). The person's keys win; ralph's deny rules and hooks are added
/// to theirs. Their value may be JSON or a file (read bounded). When it
/// cannot be read as a JSON object, everything is passed as given and the
/// third value says what the person loses.
pub(crate) fn merge_own_settings(
    client_args: &[std::ffi::OsString],
    ralph: Option<Value>,
    base: &Path,
) -> (Vec<std::ffi::OsString>, Option<Value>, Option<String>) {
    let position = client_args.iter().position(|a| {
        let a = a.to_string_lossy();
        a == "--settings" || a.starts_with("--settings=")
    });
    let (Some(at), Some(ours)) = (position, ralph.clone()) else {
        return (client_args.to_vec(), ralph, None);
    };
    let flag = client_args[at].to_string_lossy().into_owned();
    let (value, taken) = match flag.strip_prefix("--settings=") {
        Some(v) => (Some(v.to_string()), 1),
        None => (
            client_args
                .get(at + 1)
                .map(|v| v.to_string_lossy().into_owned()),
            2,
        ),
    };
    let theirs = value.as_deref().and_then(|v| {
        let text = if v.trim_start().starts_with('{') {
            v.to_string()
        } else {
            match ralph_core::files::read_bounded(&base.join(v), 1024 * 1024).ok()? {
                ralph_core::files::Bounded::Bytes(bytes) => String::from_utf8(bytes).ok()?,
                _ => return None,
            }
        };
        serde_json::from_str::<Value>(&text)
            .ok()
            .filter(Value::is_object)
    });
    let Some(merged) = theirs else {
        return (
            client_args.to_vec(),
            ralph,
            Some(
                "your --settings could not be read as a JSON object, so it is passed as given: \
                 the client may then keep only one of it and ralph's (its deny rules on ralph's \
                 files, its StopFailure hook)"
                    .into(),
            ),
        );
    };
    let merged = merged_settings(ours, merged);
    let mut args = client_args.to_vec();
    args.drain(at..(at + taken).min(args.len()));
    (args, Some(merged), None)
}

/// A settings value of the shape ralph merges into, or any other value,
/// kept as it is (the client says what is wrong with it).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum Shaped<T> {
    Known(T),
    Other(Value),
}

/// A list of rules, hook entries or folders.
type List = Shaped<Vec<Value>>;

/// The settings object as far as ralph merges it (`permissions`, `hooks`,
/// `sandbox`, `env`); every other key kept, in `extra`.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    permissions: Option<Shaped<Permissions>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hooks: Option<Shaped<serde_json::Map<String, Value>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sandbox: Option<Shaped<Sandbox>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    env: Option<Shaped<serde_json::Map<String, Value>>>,
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

/// `permissions`: the rules ralph adds to.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Permissions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deny: Option<List>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow: Option<List>,
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

/// `sandbox`: whether the client must refuse to start without it, and its
/// file system.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Sandbox {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fail_if_unavailable: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filesystem: Option<Shaped<Filesystem>>,
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

/// `sandbox.filesystem`: the folders the agent's commands may write.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filesystem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow_write: Option<List>,
    #[serde(flatten)]
    extra: serde_json::Map<String, Value>,
}

/// `into` with each of `ours` it lacks added after its own.
fn add_missing(into: &mut Vec<Value>, ours: &[Value]) {
    for value in ours {
        if !into.contains(value) {
            into.push(value.clone());
        }
    }
}

/// The list of `ours` added to `theirs`: theirs first; a value of theirs
/// that is no list gives way to ralph's (its deny rules and hooks hold).
fn merged_list(theirs: Option<List>, ours: &[Value]) -> List {
    match theirs {
        Some(Shaped::Known(mut list)) => {
            add_missing(&mut list, ours);
            Shaped::Known(list)
        }
        _ => Shaped::Known(ours.to_vec()),
    }
}

/// The list in `list`, if it is one.
fn known_list(list: Option<&List>) -> Option<&[Value]> {
    match list {
        Some(Shaped::Known(list)) => Some(list),
        _ => None,
    }
}

/// The person's settings `theirs` (a JSON object) with ralph's `ours`
/// merged in: their keys win; ralph's deny and allow rules and hooks are
/// added to theirs; ralph's sandbox where they have none, else its
/// `failIfUnavailable` where theirs says nothing and its cache folders
/// added to their `allowWrite`; ralph's variables where theirs name none.
/// A value of theirs of another shape than the client's is kept as it is
/// (the client names it), but for the lists ralph's protection rests on.
/// Settings that cannot be merged (theirs or ralph's no object) give
/// ralph's as they are: the merge never drops ralph's deny rules.
fn merged_settings(ours: Value, theirs: Value) -> Value {
    let ralphs = ours.clone();
    let Ok(ours) = serde_json::from_value::<Settings>(ours) else {
        return ralphs;
    };
    let Ok(mut merged) = serde_json::from_value::<Settings>(theirs) else {
        return ralphs;
    };
    if let Some(Shaped::Known(ours)) = &ours.permissions {
        let mut permissions = match merged.permissions.take() {
            Some(Shaped::Known(permissions)) => permissions,
            _ => Permissions::default(),
        };
        if let Some(deny) = known_list(ours.deny.as_ref()) {
            permissions.deny = Some(merged_list(permissions.deny.take(), deny));
        }
        if let Some(allow) = known_list(ours.allow.as_ref()) {
            permissions.allow = Some(merged_list(permissions.allow.take(), allow));
        }
        merged.permissions = Some(Shaped::Known(permissions));
    }
    if let Some(Shaped::Known(ours)) = &ours.hooks {
        let mut hooks = match merged.hooks.take() {
            Some(Shaped::Known(hooks)) => hooks,
            _ => serde_json::Map::new(),
        };
        for (event, entries) in ours {
            let Some(entries) = entries.as_array() else {
                continue;
            };
            let mut list = match hooks.remove(event) {
                Some(Value::Array(list)) => list,
                _ => Vec::new(),
            };
            list.extend(entries.iter().cloned());
            hooks.insert(event.clone(), Value::Array(list));
        }
        merged.hooks = Some(Shaped::Known(hooks));
    }
    match (&mut merged.sandbox, ours.sandbox) {
        (None, ours) => merged.sandbox = ours,
        (Some(Shaped::Known(theirs)), Some(Shaped::Known(ours))) => {
            // A sandbox ralph requires stays required with theirs.
            if theirs.fail_if_unavailable.is_none() {
                theirs.fail_if_unavailable = ours.fail_if_unavailable;
            }
            // Their sandbox still lets the agent write the toolchains'
            // caches its checks write, so it can run them.
            let roots = match &ours.filesystem {
                Some(Shaped::Known(filesystem)) => known_list(filesystem.allow_write.as_ref()),
                _ => None,
            };
            if let Some(roots) = roots {
                match &mut theirs.filesystem {
                    None => {
                        theirs.filesystem = Some(Shaped::Known(Filesystem {
                            allow_write: Some(Shaped::Known(roots.to_vec())),
                            ..Filesystem::default()
                        }));
                    }
                    Some(Shaped::Known(filesystem)) => match &mut filesystem.allow_write {
                        None => filesystem.allow_write = Some(Shaped::Known(roots.to_vec())),
                        Some(Shaped::Known(list)) => add_missing(list, roots),
                        Some(Shaped::Other(_)) => {}
                    },
                    Some(Shaped::Other(_)) => {}
                }
            }
        }
        _ => {}
    }
    // ralph's variables (no bytecode in the tree) where theirs name none.
    match (&mut merged.env, ours.env) {
        (None, ours) => merged.env = ours,
        (Some(Shaped::Known(theirs)), Some(Shaped::Known(ours))) => {
            for (name, value) in ours {
                theirs.entry(name).or_insert(value);
            }
        }
        _ => {}
    }
    serde_json::to_value(merged).unwrap_or(ralphs)
}

/// The run's `--settings` for one item's client, with `RALPH_QUEUE_ITEM`
/// (the item's id) in its `env`. Two 2.1.330 clients given the same
/// settings text share one temp file named by its hash, which the first to
/// end removes while the other's sandbox still mounts it (its Bash calls
/// then fail): each item's text is its own.
pub(crate) fn item_settings(settings: Option<&str>, id: &str) -> Option<String> {
    let mut value: serde_json::Value = serde_json::from_str(settings?).ok()?;
    let object = value.as_object_mut()?;
    let env = object.entry("env").or_insert_with(|| serde_json::json!({}));
    if let Some(env) = env.as_object_mut() {
        env.insert("RALPH_QUEUE_ITEM".into(), id.into());
    }
    Some(value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_item_s_settings_text_is_its_own_and_keeps_the_run_s() {
        let run = r#"{"sandbox":{"enabled":true},"env":{"KEEP":"1"}}"#;
        let one = item_settings(Some(run), "T-1").unwrap();
        let two = item_settings(Some(run), "T-2").unwrap();
        assert_ne!(one, two);
        let one: serde_json::Value = serde_json::from_str(&one).unwrap();
        assert_eq!(one["sandbox"]["enabled"], true);
        assert_eq!(one["env"]["KEEP"], "1");
        assert_eq!(one["env"]["RALPH_QUEUE_ITEM"], "T-1");
        let bare = item_settings(Some(r#"{"permissions":{}}"#), "x").unwrap();
        assert!(bare.contains(r#""env":{"RALPH_QUEUE_ITEM":"x"}"#), "{bare}");
        assert_eq!(item_settings(None, "x"), None);
    }

    fn linux(bubblewrap: bool, socat: bool) -> Machine {
        Machine {
            os: Os::Linux,
            bubblewrap,
            socat,
            seatbelt: false,
        }
    }

    const V2_1: Option<ClientVersion> = Some(ClientVersion(2, 1, 330));

    #[test]
    fn support_names_what_is_missing_and_how_to_install_it() {
        assert_eq!(support(&linux(true, true), V2_1), Support::Ready);
        let Support::Missing(both) = support(&linux(false, false), V2_1) else {
            panic!("no sandbox without bubblewrap")
        };
        assert!(
            both.contains("bubblewrap and socat are not installed")
                && both.contains("apt-get install bubblewrap socat"),
            "{both}"
        );
        let Support::Missing(one) = support(&linux(true, false), V2_1) else {
            panic!("no sandbox without socat")
        };
        assert!(
            one.contains("socat is not installed") && one.contains("install socat"),
            "{one}"
        );
        let Support::Missing(old) = support(&linux(true, true), Some(ClientVersion(1, 0, 100)))
        else {
            panic!("an old client has none")
        };
        assert!(old.contains("1.0.100") && old.contains("2.1.330"), "{old}");
        // 2.0.77 has a sandbox, but one the agent can step around.
        let Support::Missing(v2_0) = support(&linux(true, true), Some(ClientVersion(2, 0, 77)))
        else {
            panic!("2.0.77's sandbox does not hold")
        };
        assert!(
            v2_0.contains("Claude Code 2.0.77's sandbox does not hold")
                && v2_0.contains("rename `.claude`")
                && v2_0.contains("pipeline")
                && v2_0.contains("npm install -g @anthropic-ai/claude-code"),
            "{v2_0}"
        );
        // Both reasons, the client's first.
        let Support::Missing(both) = support(&linux(false, true), Some(ClientVersion(2, 0, 77)))
        else {
            panic!("neither holds")
        };
        assert!(
            both.starts_with("Claude Code 2.0.77's sandbox")
                && both.ends_with(
                    "`sudo apt-get install bubblewrap` (or your system's package manager)"
                ),
            "{both}"
        );
        assert_eq!(support(&linux(true, true), None), Support::Ready);
        assert!(matches!(
            support(&linux(false, true), None),
            Support::Missing(_)
        ));
        let windows = Machine {
            os: Os::Other,
            bubblewrap: true,
            socat: true,
            seatbelt: false,
        };
        assert!(matches!(support(&windows, V2_1), Support::Missing(w) if w.contains("WSL2")));
        let mac = Machine {
            os: Os::MacOs,
            bubblewrap: false,
            socat: false,
            seatbelt: true,
        };
        assert_eq!(support(&mac, V2_1), Support::Ready);
    }

    #[test]
    fn plan_table() {
        let ready = Support::Ready;
        let missing = Support::Missing("bubblewrap is not installed".into());
        use SandboxSetting::*;
        // (setting, unattended, support, own settings) → (sandboxed, allow checks, notice?)
        let cases = [
            (Auto, true, &ready, false, Some((true, false, false))),
            (Auto, true, &missing, false, Some((false, true, true))),
            (Auto, false, &ready, false, Some((false, false, false))),
            (Auto, false, &missing, false, Some((false, false, false))),
            (On, true, &ready, false, Some((true, false, false))),
            (On, false, &ready, false, Some((true, false, false))),
            (On, true, &missing, false, None),
            (On, false, &missing, false, None),
            (Off, true, &ready, false, Some((false, true, true))),
            (Off, false, &ready, false, Some((false, false, false))),
            (Auto, true, &ready, true, Some((false, false, true))),
            (On, true, &missing, true, Some((false, false, true))),
            (Off, true, &ready, true, Some((false, false, false))),
        ];
        for (setting, unattended, support, own, want) in cases {
            let got = plan(setting, unattended, support, own);
            match want {
                None => {
                    let Err(Refusal(why)) = got else {
                        panic!("{setting:?} {unattended} {support:?} should refuse: {got:?}")
                    };
                    assert!(
                        why.contains("bubblewrap is not installed") && why.contains("--no-sandbox"),
                        "{why}"
                    );
                }
                Some((sandboxed, allow, notice)) => {
                    let got = got.unwrap();
                    assert_eq!(
                        (got.sandboxed, got.allow_checks, got.notice.is_some()),
                        (sandboxed, allow, notice),
                        "{setting:?} unattended={unattended} {support:?} own={own}: {got:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn protected_files_are_the_files_of_the_start_never_their_folders() {
        let tmp = crate::testdir::new("protected-files");
        let dir = tmp.path();
        for (path, text) in [
            ("tests/test_a.py", "a"),
            ("tests/unit/test_b.py", "b"),
            ("conftest.py", "c"),
            (
                "pyproject.toml",
                "[project]\nname = \"x\"\n[tool.pytest.ini_options]\naddopts = \"-q\"\n",
            ),
            ("calc.py", "d"),
        ] {
            std::fs::create_dir_all(dir.join(path).parent().unwrap()).unwrap();
            std::fs::write(dir.join(path), text).unwrap();
        }
        let snapshot =
            ralph_core::observe::protected::snapshot(dir, &["tests/".to_string()]).unwrap();
        // pyproject.toml is judged in its pytest tables only: the rest is the agent's.
        assert_eq!(
            protected_files(Some(&snapshot)),
            ["conftest.py", "tests/test_a.py", "tests/unit/test_b.py"].map(PathBuf::from)
        );
        let rules: Vec<String> = protected_paths(dir, &protected_files(Some(&snapshot)))
            .iter()
            .map(|p| deny_rule(p))
            .collect();
        assert!(
            rules
                .iter()
                .all(|r| !r.ends_with("/tests)") && r.starts_with("Edit(//")),
            "{rules:?}"
        );
        assert_eq!(protected_files(None), Vec::<PathBuf>::new());
        // Past the bound, none: the claim's gate judges them alone.
        for i in 0..MAX_DENIED_FILES {
            std::fs::write(dir.join(format!("tests/test_{i}.py")), "x").unwrap();
        }
        let many = ralph_core::observe::protected::snapshot(dir, &["tests/".to_string()]).unwrap();
        assert!(many.whole_files().len() > MAX_DENIED_FILES);
        assert_eq!(protected_files(Some(&many)), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_persons_setting_of_another_shape_is_kept_for_the_client_to_name() {
        // 2.1.330 refuses to start on an `allowWrite` that is no list (with
        // `failIfUnavailable`): the value goes to it as the person gave it,
        // and a sandbox ralph requires stays required.
        let ours = json!({
            "sandbox": {"enabled": true, "failIfUnavailable": true,
                        "filesystem": {"allowWrite": ["/h/.cache/go-build"]}},
            "permissions": {"deny": ["Edit(//p/.claude/ralph)"]},
            "env": {"PYTHONDONTWRITEBYTECODE": "1"}
        });
        let theirs = |text: &str| -> Value {
            let args: Vec<std::ffi::OsString> = ["--settings", text].map(Into::into).to_vec();
            merge_own_settings(&args, Some(ours.clone()), Path::new("/"))
                .1
                .unwrap()
        };
        let merged =
            theirs(r#"{"sandbox": {"enabled": true, "filesystem": {"allowWrite": "/tmp"}}}"#);
        assert_eq!(merged["sandbox"]["filesystem"]["allowWrite"], "/tmp");
        assert_eq!(merged["sandbox"]["failIfUnavailable"], true);
        assert_eq!(
            merged["permissions"]["deny"],
            json!(["Edit(//p/.claude/ralph)"])
        );
        // Shapes that made the index-based merge panic.
        for text in [
            r#"{"sandbox": true}"#,
            r#"{"sandbox": {"filesystem": 3}}"#,
            r#"{"permissions": "all", "hooks": [], "env": "x"}"#,
            r#"{"permissions": {"deny": {"a": 1}}, "hooks": {"StopFailure": 2}}"#,
            r#"{"sandbox": null, "permissions": null}"#,
        ] {
            let merged = theirs(text);
            assert_eq!(
                merged["permissions"]["deny"],
                json!(["Edit(//p/.claude/ralph)"]),
                "{text}: {merged}"
            );
            let _ = in_worktree(&merged.to_string(), Path::new("/p"), Path::new("/p/w"));
        }
        assert_eq!(theirs(r#"{"sandbox": true}"#)["sandbox"], true);
        assert_eq!(theirs(r#"{"env": "x"}"#)["env"], "x");
    }

    mod shapes {
        use super::*;
        use proptest::prelude::*;

        /// JSON values built from the keys the merge reads, at any depth,
        /// with values of every kind.
        fn settings_json() -> impl Strategy<Value = Value> {
            let key = prop_oneof![
                Just("permissions"),
                Just("deny"),
                Just("allow"),
                Just("hooks"),
                Just("StopFailure"),
                Just("sandbox"),
                Just("filesystem"),
                Just("allowWrite"),
                Just("failIfUnavailable"),
                Just("env"),
                Just("model"),
            ]
            .prop_map(String::from);
            let leaf = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::from),
                any::<i64>().prop_map(Value::from),
                "[a-z/]{0,6}".prop_map(Value::from),
            ];
            leaf.prop_recursive(4, 48, 6, move |inner| {
                prop_oneof![
                    proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                    proptest::collection::btree_map(key.clone(), inner, 0..5)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(512))]

            /// Whatever the person's `--settings` holds, and whatever shape
            /// ralph's own has: no panic, and an object of theirs is merged
            /// with ralph's deny rules in it.
            #[test]
            fn any_settings_shape_merges_without_a_panic(
                theirs in settings_json(),
                ours in settings_json(),
            ) {
                let deny = json!(["Edit(//p/.claude/ralph)"]);
                let ralphs = json!({
                    "permissions": {"deny": deny},
                    "sandbox": {"enabled": true, "failIfUnavailable": true,
                                "filesystem": {"allowWrite": ["/c"]}},
                    "hooks": {"StopFailure": [{"hooks": []}]},
                    "env": {"PYTHONDONTWRITEBYTECODE": "1"}
                });
                for ralph in [ralphs, ours] {
                    let text = theirs.to_string();
                    let args: Vec<std::ffi::OsString> = ["--settings", &text].map(Into::into).to_vec();
                    let (rest, merged, notice) =
                        merge_own_settings(&args, Some(ralph.clone()), Path::new("/nowhere"));
                    if theirs.is_object() {
                        prop_assert!(rest.is_empty() && notice.is_none());
                        let merged = merged.unwrap();
                        if ralph["permissions"]["deny"] == deny {
                            let rules = merged.pointer("/permissions/deny").and_then(Value::as_array);
                            prop_assert!(rules.is_some_and(|r| r.contains(&deny[0])), "{}", merged);
                        }
                        let _ = in_worktree(&merged.to_string(), Path::new("/p"), Path::new("/p/w"));
                    } else {
                        prop_assert!(notice.is_some());
                    }
                    let _ = item_settings(Some(&theirs.to_string()), "T-1");
                }
            }
        }
    }

    #[test]
    fn settings_that_cannot_be_merged_never_lose_ralph_s_rules() {
        // Not an object (merge_own_settings passes none, but the merge is
        // no place to drop ralph's deny rules): ralph's settings stand.
        let ours = json!({
            "permissions": {"deny": ["Edit(//p/.claude/ralph)"]},
            "hooks": {"StopFailure": [{"hooks": [{"type": "command", "command": "h"}]}]}
        });
        for theirs in [json!(["x"]), json!("x"), json!(7), Value::Null] {
            let merged = merged_settings(ours.clone(), theirs.clone());
            assert_eq!(
                merged.pointer("/permissions/deny/0"),
                Some(&json!("Edit(//p/.claude/ralph)")),
                "{theirs} gave {merged}"
            );
        }
    }

    #[test]
    fn the_persons_settings_are_merged_with_ralphs_theirs_winning() {
        let ours = json!({
            "permissions": {"deny": ["Edit(//p/.claude/ralph)"]},
            "hooks": {"StopFailure": [{"hooks": [{"type": "command", "command": "h"}]}]}
        });
        let args: Vec<std::ffi::OsString> = [
            "--model",
            "opus",
            "--settings",
            r#"{"model": "x", "permissions": {"deny": ["Bash(rm:*)"]}}"#,
            "--verbose",
        ]
        .map(Into::into)
        .to_vec();
        let (rest, merged, notice) = merge_own_settings(&args, Some(ours.clone()), Path::new("/"));
        assert_eq!(
            rest,
            ["--model", "opus", "--verbose"].map(std::ffi::OsString::from)
        );
        assert_eq!(notice, None);
        let merged = merged.unwrap();
        assert_eq!(merged["model"], "x");
        assert_eq!(
            merged["permissions"]["deny"],
            json!(["Bash(rm:*)", "Edit(//p/.claude/ralph)"])
        );
        assert_eq!(
            merged["hooks"]["StopFailure"][0]["hooks"][0]["command"],
            "h"
        );
        // A file of theirs, with `=`.
        let tmp = crate::testdir::new("own-settings");
        let dir = tmp.path();
        std::fs::write(dir.join("s.json"), r#"{"env": {"A": "1"}}"#).unwrap();
        let (rest, merged, _) =
            merge_own_settings(&["--settings=s.json".into()], Some(ours.clone()), dir);
        assert!(rest.is_empty());
        assert_eq!(merged.unwrap()["env"]["A"], "1");
        // Their sandbox and env win, with ralph's cache roots and variables added.
        let ralphs = json!({
            "sandbox": {"enabled": true, "filesystem": {"allowWrite": ["/h/.cache/go-build"]}},
            "env": {"PYTHONDONTWRITEBYTECODE": "1", "A": "ralph"}
        });
        let theirs: Vec<std::ffi::OsString> = [
            "--settings",
            r#"{"sandbox": {"enabled": true, "filesystem": {"allowWrite": ["/data"]}}, "env": {"A": "1"}}"#,
        ]
        .map(Into::into)
        .to_vec();
        let merged = merge_own_settings(&theirs, Some(ralphs), dir).1.unwrap();
        assert_eq!(
            merged["sandbox"]["filesystem"]["allowWrite"],
            json!(["/data", "/h/.cache/go-build"])
        );
        assert_eq!(
            merged["env"],
            json!({"A": "1", "PYTHONDONTWRITEBYTECODE": "1"})
        );
        // Not readable: passed as given, and said.
        let args: Vec<std::ffi::OsString> = ["--settings", "nowhere.json"].map(Into::into).to_vec();
        let (rest, merged, notice) = merge_own_settings(&args, Some(ours.clone()), dir);
        assert_eq!(rest, args);
        assert_eq!(merged, Some(ours));
        assert!(notice.unwrap().contains("passed as given"));
    }

    #[test]
    fn flags_override_the_config() {
        assert_eq!(setting(SandboxSetting::Off, Some(true)), SandboxSetting::On);
        assert_eq!(
            setting(SandboxSetting::On, Some(false)),
            SandboxSetting::Off
        );
        assert_eq!(setting(SandboxSetting::Auto, None), SandboxSetting::Auto);
    }

    #[test]
    fn protected_paths_are_literal_absolute_folders_and_files() {
        let tmp = crate::testdir::new("sandbox");
        let dir = tmp.path().to_path_buf();
        let real = std::fs::canonicalize(&dir).unwrap();
        let paths = protected_paths(&dir, &[PathBuf::from("tests/test_a.py")]);
        let rules: Vec<String> = paths.iter().map(|p| deny_rule(p)).collect();
        let root = real.display().to_string();
        assert_eq!(
            rules,
            [
                format!("Edit(/{root}/.claude/ralph)"),
                format!("Edit(/{root}/.claude/context)"),
                format!("Edit(/{root}/.claude/settings.json)"),
                format!("Edit(/{root}/.claude/settings.local.json)"),
                format!("Edit(/{root}/tests/test_a.py)"),
            ]
        );
        assert!(
            rules
                .iter()
                .all(|r| r.starts_with("Edit(//") && !r.contains('*'))
        );
    }

    #[test]
    fn allow_rules_name_ralph_ctl_check_never_git_nor_a_checks_own_command() {
        assert_eq!(
            allow_rules(Some(Path::new("/opt/ralph/bin/ralph-ctl"))),
            [
                "Bash(ralph-ctl check:*)",
                "Bash(/opt/ralph/bin/ralph-ctl check:*)",
            ]
        );
        assert_eq!(allow_rules(None), ["Bash(ralph-ctl check:*)"]);
        // No rule admits a command that reads a file the agent names:
        // `git commit -F ~/.local/share/ralph/record.key` put the key in a commit.
        for command in [
            "git commit --allow-empty --cleanup=verbatim -F ~/.local/share/ralph/record.key",
            "git commit -m x --pathspec-from-file=/k",
            "git add --pathspec-from-file=/k",
        ] {
            for rule in allow_rules(Some(Path::new("/bin/ralph-ctl"))) {
                let prefix = rule.trim_start_matches("Bash(").trim_end_matches(":*)");
                assert!(!command.starts_with(prefix), "{rule} admits {command}");
            }
        }
    }

    #[test]
    fn the_clients_path_finds_ralph_ctl_as_the_texts_name_it() {
        let tmp = crate::testdir::new("path-ctl");
        let ours = tmp.path().join("ours");
        let theirs = tmp.path().join("theirs");
        for dir in [&ours, &theirs] {
            std::fs::create_dir_all(dir).unwrap();
            let exe = dir.join("ralph-ctl");
            std::fs::write(&exe, "#!/bin/sh\n").unwrap();
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        let me = ours.join("ralph-ctl");
        // None on PATH: this one's folder goes last.
        let path = std::env::join_paths([Path::new("/usr/bin")]).unwrap();
        let got = path_with_ralph_ctl(Some(&path), &me).unwrap();
        assert_eq!(
            std::env::split_paths(&got).collect::<Vec<_>>(),
            [PathBuf::from("/usr/bin"), ours.clone()]
        );
        assert_eq!(
            path_with_ralph_ctl(None, &me).map(|p| std::env::split_paths(&p).collect::<Vec<_>>()),
            Some(vec![ours.clone()])
        );
        // One on PATH already (the person's, or this one): PATH stays.
        let path = std::env::join_paths([&theirs]).unwrap();
        assert_eq!(path_with_ralph_ctl(Some(&path), &me), None);
        assert_eq!(
            path_with_ralph_ctl(Some(&path), Path::new("ralph-ctl")),
            None
        );
    }

    #[test]
    fn the_agent_gets_its_own_caches_never_the_persons_and_writes_no_bytecode() {
        use ralph_core::walls::caches;
        let sandboxed = Plan {
            sandboxed: true,
            allow_checks: false,
            notice: None,
        };
        let own = Path::new("/h/.cache/ralph");
        let env = |name: &str| match name {
            "HOME" => Some(std::ffi::OsString::from("/h")),
            _ => None,
        };
        let agent = caches::own_caches_with(own, Path::new("/p"), caches::Owner::Agent, &env);
        let checks = caches::own_caches_with(own, Path::new("/p"), caches::Owner::Checks, &env);
        let ours = settings(&sandboxed, &[], &[], None, false);
        let s = with_check_rights(ours, &sandboxed, Some(&agent)).unwrap();
        let folder = agent.folder.display().to_string();
        assert_eq!(s["sandbox"]["filesystem"], json!({"allowWrite": [folder]}));
        assert!(
            !s.to_string().contains(&*checks.folder.to_string_lossy()),
            "{s}"
        );
        assert!(!s.to_string().contains("/h/.cache/go-build"), "{s}");
        assert_eq!(s["sandbox"]["enabled"], true);
        assert_eq!(s["env"]["PYTHONDONTWRITEBYTECODE"], "1");
        let gocache = agent.folder.join("go-build").display().to_string();
        assert_eq!(s["env"]["GOCACHE"], json!(gocache));
        assert!(
            s["env"]["CARGO_HOME"]
                .as_str()
                .is_some_and(|h| h.starts_with(&folder)),
            "{s}"
        );
        // Without the client's sandbox: no sandbox key, the same env.
        let unsandboxed = Plan {
            sandboxed: false,
            allow_checks: true,
            notice: None,
        };
        let s = with_check_rights(None, &unsandboxed, Some(&agent)).unwrap();
        assert!(s.get("sandbox").is_none(), "{s}");
        assert_eq!(s["env"]["GOCACHE"], json!(gocache));
        let s = with_check_rights(None, &unsandboxed, None).unwrap();
        assert_eq!(s, json!({"env": {"PYTHONDONTWRITEBYTECODE": "1"}}));
    }

    #[test]
    fn settings_carry_the_sandbox_the_rules_and_the_stop_failure_hook() {
        crate::testdir::keep_key_apart();
        let sandboxed = Plan {
            sandboxed: true,
            allow_checks: false,
            notice: None,
        };
        let protected = [PathBuf::from("/p/.claude/ralph")];
        let allow = allow_rules(Some(Path::new("/bin/ralph-ctl")));
        let s = settings(&sandboxed, &protected, &allow, Some("/bin/hook"), true).unwrap();
        let mut deny = vec![
            "Edit(//p/.claude/ralph)",
            "Bash(ralph-ctl reset:*)",
            "Bash(ralph-ctl start:*)",
            "Bash(ralph-ctl say:*)",
            "Bash(ralph-ctl answer:*)",
            "Bash(ralph-ctl reload:*)",
            "Bash(ralph-ctl statusline:*)",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>();
        // ralph's key folder, never readable by the agent.
        let key_rules = key_rules(ralph_core::persist::mac::key_dir().as_deref());
        assert_eq!(key_rules.len(), 4, "{key_rules:?}");
        deny.extend(key_rules);
        assert_eq!(
            s,
            json!({
                "sandbox": {"enabled": true, "autoAllowBashIfSandboxed": true,
                            "allowUnsandboxedCommands": false, "failIfUnavailable": true},
                "permissions": {"deny": deny},
                "hooks": {"StopFailure": [{"hooks": [{"type": "command", "command": "/bin/hook", "timeout": 30}]}]}
            })
        );
        let fallback = Plan {
            sandboxed: false,
            allow_checks: true,
            notice: None,
        };
        let s = settings(&fallback, &protected, &allow, None, false).unwrap();
        assert_eq!(s.get("sandbox"), None);
        assert_eq!(
            s["permissions"]["allow"],
            json!(["Bash(ralph-ctl check:*)", "Bash(/bin/ralph-ctl check:*)"])
        );
        let nothing = Plan {
            sandboxed: false,
            allow_checks: false,
            notice: None,
        };
        assert_eq!(settings(&nothing, &[], &allow, None, false), None);
    }

    #[test]
    fn gits_configuration_is_protected_for_the_checkout_and_its_worktrees() {
        let tmp = crate::testdir::new("git-paths");
        let main = std::fs::canonicalize(tmp.path()).unwrap();
        let git = |dir: &Path, args: &[&str]| {
            let out = ralph_core::own_git::runner::persons_git(dir)
                .args(args)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&main, &["init", "-q"]);
        git(
            &main,
            &[
                "-c",
                "user.name=a",
                "-c",
                "user.email=a@b",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "a",
            ],
        );
        let common = main.join(".git");
        let wanted: Vec<PathBuf> = ["config", "config.worktree", "hooks", "info"]
            .iter()
            .map(|n| common.join(n))
            .collect();
        assert_eq!(git_paths(&main), wanted);
        let paths = protected_paths(&main, &[]);
        assert!(wanted.iter().all(|p| paths.contains(p)), "{paths:?}");
        // A worktree's are the main checkout's common folder's.
        let tree = main.join(".claude/worktrees/w1");
        git(
            &main,
            &["worktree", "add", "-q", "-b", "w1", tree.to_str().unwrap()],
        );
        assert_eq!(git_paths(&tree), wanted);
        // A project in a subfolder of the repository: the repository's.
        let sub = main.join("sub");
        std::fs::create_dir_all(&sub).unwrap();
        assert_eq!(git_paths(&sub), wanted);
        // A commondir the agent wrote changes none of it.
        std::fs::write(common.join("commondir"), "/elsewhere\n").unwrap();
        std::fs::write(common.join("worktrees/w1/commondir"), "/elsewhere\n").unwrap();
        assert_eq!(git_paths(&main), wanted);
        assert_eq!(git_paths(&tree), wanted);
        // Not a git project: none.
        let outside = crate::testdir::new("git-paths-plain");
        assert_eq!(git_paths(outside.path()), Vec::<PathBuf>::new());
    }

    #[test]
    fn a_worktree_gets_the_main_checkouts_walls_on_its_own_copies() {
        let tmp = crate::testdir::new("in-worktree");
        let main = std::fs::canonicalize(tmp.path()).unwrap();
        let tree = main.join(".claude/worktrees/w1");
        std::fs::create_dir_all(&tree).unwrap();
        let m = main.display();
        let t = tree.display();
        let settings = json!({
            "sandbox": {"enabled": true},
            "permissions": {"deny": [
                format!("Edit(/{m}/.claude/ralph)"),
                format!("Edit(/{m}/.claude/settings.local.json)"),
                format!("Edit(/{m}/tests/test_a.py)"),
                format!("Edit(/{m}/.git/config)"),
                "Edit(//elsewhere/key)",
                "Bash(ralph-ctl say:*)",
            ]},
        })
        .to_string();
        let got: Value = serde_json::from_str(&in_worktree(&settings, &main, &tree)).unwrap();
        assert_eq!(
            got["permissions"]["deny"],
            json!([
                format!("Edit(/{m}/.claude/ralph)"),
                format!("Edit(/{m}/.claude/settings.local.json)"),
                format!("Edit(/{m}/tests/test_a.py)"),
                format!("Edit(/{m}/.git/config)"),
                "Edit(//elsewhere/key)",
                "Bash(ralph-ctl say:*)",
                format!("Edit(/{t}/.claude/ralph)"),
                format!("Edit(/{t}/.claude/settings.local.json)"),
                format!("Edit(/{t}/tests/test_a.py)"),
            ])
        );
        assert_eq!(got["sandbox"]["enabled"], true);
        // Twice changes nothing more; settings that are not JSON pass as given.
        let again = in_worktree(&got.to_string(), &main, &tree);
        assert_eq!(serde_json::from_str::<Value>(&again).unwrap(), got);
        assert_eq!(in_worktree("not json", &main, &tree), "not json");
    }

    #[test]
    fn the_key_folder_is_denied_to_reading_and_writing() {
        let tmp = crate::testdir::new("key-rules");
        let dir = tmp.path().join("data").join("ralph");
        let shown = dir.display();
        assert_eq!(
            key_rules(Some(&dir)),
            [
                format!("Read(/{shown})"),
                format!("Read(/{shown}/**)"),
                format!("Edit(/{shown})"),
                format!("Edit(/{shown}/**)"),
            ]
        );
        assert!(key_rules(Some(&dir))[0].starts_with("Read(//"));
        assert_eq!(key_rules(None), Vec::<String>::new());
    }
}
