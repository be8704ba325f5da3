//! The doctor's checks of the Claude Code client: its version, the
//! sandbox it gives a run, the walls ralph's checks run in, and whether a
//! shell profile leaves `RALPH_ACTIVE` set.

use std::path::PathBuf;

use ralph_core::judge::config::Config;
use ralph_core::paths::ProjectPaths;

use super::{Check, TESTED_CLIENTS, Verdict, check};
use crate::driver::command::ClientVersion;

pub(super) fn client(paths: &ProjectPaths) -> (Check, Option<ClientVersion>) {
    const NAME: &str = "client";
    let program = match crate::driver::prepare::find_client(paths) {
        Ok(program) => program,
        Err(e) => {
            return (
                check(
                    NAME,
                    Verdict::Fail,
                    e.to_string(),
                    Some("install Claude Code: npm install -g @anthropic-ai/claude-code".into()),
                ),
                None,
            );
        }
    };
    let version = crate::driver::client::version(&program);
    let verdict = match version {
        Some(version) if TESTED_CLIENTS.contains(&version) => check(
            NAME,
            Verdict::Ok,
            format!(
                "{} is Claude Code {version}, a version ralph is tested on{}",
                program.program.display(),
                plugin_on(version)
            ),
            None,
        ),
        Some(version) => check(
            NAME,
            Verdict::Warn,
            format!(
                "{} is Claude Code {version}; ralph is tested on {}",
                program.program.display(),
                TESTED_CLIENTS.map(|v| v.to_string()).join(" and ")
            ),
            Some("it most likely works; if a loop misbehaves, try a tested version".into()),
        ),
        None => check(
            NAME,
            Verdict::Fail,
            format!(
                "{} does not say its version (`--version`)",
                program.program.display()
            ),
            Some("reinstall Claude Code, or set RALPH_CLAUDE to the client's path".into()),
        ),
    };
    (verdict, version)
}

/// What the plugin's `/ralph-loop` does on this client, where it cannot run
/// a loop: Claude Code 2.0 gives a command's `!` block no session id, and its
/// terminal UI knows the plugin's commands only by their namespaced name, so
/// a bare `/ralph-loop` there is "Unknown slash command" and no hook of
/// ralph's runs to say so. Empty on 2.1 and later.
pub(super) fn plugin_on(version: ClientVersion) -> &'static str {
    if version < ClientVersion(2, 1, 0) {
        "; its sessions cannot run the plugin's /ralph-loop (it needs Claude Code 2.1 or later; \
         2.0's terminal UI answers a bare /ralph-loop \"Unknown slash command\", and \
         /ralph:ralph-loop says why it cannot start): loop with ralph-ctl run"
    } else {
        ""
    }
}

/// Whether unattended runs will have the client's sandbox: bubblewrap and
/// socat (Linux) or Seatbelt (macOS), and a client that has it.
pub(super) fn sandbox(config: &Config, version: Option<ClientVersion>) -> Check {
    use crate::driver::sandbox::{self, Support};
    use ralph_core::judge::config::SandboxSetting;
    const NAME: &str = "sandbox";
    if config.sandbox == SandboxSetting::Off {
        return check(
            NAME,
            Verdict::Ok,
            "off (config `sandbox` or RALPH_SANDBOX): unattended runs use permission rules only"
                .into(),
            None,
        );
    }
    let machine = sandbox::Machine::probe(std::env::var_os("PATH").as_deref());
    match sandbox::support(&machine, version) {
        Support::Ready => check(
            NAME,
            Verdict::Ok,
            "unattended runs put the client in its sandbox: the agent's commands run without \
             prompts, inside the project only"
                .into(),
            None,
        ),
        Support::Missing(why) => check(
            NAME,
            if config.sandbox == SandboxSetting::On {
                Verdict::Fail
            } else {
                Verdict::Warn
            },
            format!("no sandbox for unattended runs: {why}"),
            Some(
                "install what it names; until then the agent gets `ralph-ctl check` allowed and \
                 its work is left uncommitted (or set \"sandbox\": \"off\" to silence this)"
                    .into(),
            ),
        ),
    }
}

/// Whether the checks of the agent's work (verify, gates, the baseline) run
/// walled on this machine: bubblewrap, else Landlock; none is a warning
/// (`sandbox: auto`: they run with the person's rights) or, with `sandbox:
/// on`, a failure (they are refused). Every run's checks, whoever runs them.
pub(super) fn walls(config: &Config) -> Check {
    use ralph_core::walls::{self, Mechanism, WallsWanted};
    const NAME: &str = "walls";
    let wanted = config.sandbox.walls();
    if wanted == WallsWanted::Off {
        return check(
            NAME,
            Verdict::Ok,
            "off (config `sandbox` or RALPH_SANDBOX): the checks run the agent's code with your rights"
                .into(),
            None,
        );
    }
    let mechanism = Mechanism::probe();
    let network = format!(
        "network: {} (a verify entry with \"network\": true keeps this machine's)",
        walls::network_walls(mechanism)
    );
    match mechanism {
        Mechanism::Bubblewrap(bwrap) => check(
            NAME,
            Verdict::Ok,
            format!(
                "the checks of the agent's work run inside bubblewrap ({}); {network}",
                bwrap.display()
            ),
            None,
        ),
        Mechanism::Landlock(why) => check(
            NAME,
            Verdict::Ok,
            format!(
                "the checks run inside Landlock's walls, as {why} (coarser: a check cannot create \
                 an entry at the top of the project); {network}; {}",
                walls::landlock_features()
            ),
            None,
        ),
        Mechanism::LandlockInPart(why) if wanted == WallsWanted::Auto => check(
            NAME,
            Verdict::Warn,
            format!(
                "the checks run inside Landlock's walls in part, as {why}: what this kernel \
                 does not enforce, a check may do; {network}; {}",
                walls::landlock_features()
            ),
            Some("install bubblewrap (`sudo apt-get install bubblewrap`)".into()),
        ),
        Mechanism::Missing(why) | Mechanism::LandlockInPart(why) => check(
            NAME,
            if wanted == WallsWanted::Required {
                Verdict::Fail
            } else {
                Verdict::Warn
            },
            if wanted == WallsWanted::Required {
                format!("no walls for the checks ({why}): with sandbox on, every check is refused")
            } else {
                format!(
                    "no walls for the checks ({why}): they run the agent's code with your rights"
                )
            },
            Some("install bubblewrap (`sudo apt-get install bubblewrap`)".into()),
        ),
    }
}

/// Shell profiles that export `RALPH_ACTIVE`: every session would be a loop's.
pub(super) fn active_in_profiles() -> Check {
    const NAME: &str = "RALPH_ACTIVE";
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let files = [
        ".bashrc",
        ".bash_profile",
        ".profile",
        ".zshrc",
        ".zprofile",
        ".zshenv",
        ".config/fish/config.fish",
    ];
    let found: Vec<String> = home
        .iter()
        .flat_map(|home| files.iter().map(move |f| home.join(f)))
        .filter(|path| {
            std::fs::read_to_string(path).is_ok_and(|text| {
                text.lines().any(|line| {
                    let line = line.trim_start();
                    !line.starts_with('#') && line.contains("RALPH_ACTIVE")
                })
            })
        })
        .map(|p| p.display().to_string())
        .collect();
    let in_env = std::env::var_os("RALPH_ACTIVE").is_some();
    if found.is_empty() && !in_env {
        check(
            NAME,
            Verdict::Ok,
            "not set by a shell profile nor in this shell".into(),
            None,
        )
    } else {
        let mut places = found;
        if in_env {
            places.push("this shell's environment".into());
        }
        check(
            NAME,
            Verdict::Fail,
            format!(
                "RALPH_ACTIVE is set in {}: every Claude Code session started from there acts as a loop's",
                places.join(", ")
            ),
            Some("remove it: only the launcher sets it, for the client it starts".into()),
        )
    }
}
