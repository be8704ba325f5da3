//! Whether the client has been set up in this home: the questions Claude
//! Code asks once (log in or use a key, pick a theme, trust the folder)
//! must be answered by a person before a loop runs, or its first run stops
//! at a dialog (interactive) or exits at once. The clients keep the answers
//! in their global config file (`~/.claude.json`, or `.claude.json` in
//! `CLAUDE_CONFIG_DIR`) and the login in `.credentials.json` of their
//! config folder (the macOS keychain there); this reads them, never writes.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The most of the client's config file that is read.
const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// What was found of the client's first-run answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    /// The global config file looked at.
    pub(crate) config_file: PathBuf,
    /// It exists and is a JSON object.
    pub(crate) has_config: bool,
    /// Onboarding (the theme, the first screens) was completed.
    pub(crate) onboarded: bool,
    /// How the client logs in, when something was found.
    pub(crate) login: Option<String>,
    /// The login is a subscription's (a Claude plan's OAuth token, in the
    /// environment or stored by the client), not an API key or a cloud
    /// provider: `claude -p` then draws the plan's Agent SDK credit.
    pub(crate) subscription: bool,
    /// The project folder (or a folder above it) was trusted.
    pub(crate) trusted: bool,
}

/// One thing the person still has to do, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    /// What is missing.
    pub(crate) what: String,
    /// How to set it up.
    pub(crate) fix: String,
}

impl Setup {
    /// Looks at this home's client config for `project`.
    pub(crate) fn probe(project: &Path) -> Setup {
        let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let config_dir = env("CLAUDE_CONFIG_DIR")
            .map(PathBuf::from)
            .or_else(|| dirs::home_dir().map(|h| h.join(".claude")))
            .unwrap_or_else(|| PathBuf::from(".claude"));
        // The clients' own rule: `.config.json` in the config folder when it
        // exists, else `.claude.json` in CLAUDE_CONFIG_DIR or the home.
        let legacy = config_dir.join(".config.json");
        let config_file = if legacy.is_file() {
            legacy
        } else {
            env("CLAUDE_CONFIG_DIR")
                .map(PathBuf::from)
                .or_else(dirs::home_dir)
                .unwrap_or_default()
                .join(".claude.json")
        };
        let config = read_json(&config_file);
        let settings = read_json(&config_dir.join("settings.json"));
        let credentials = config_dir.join(".credentials.json");
        let subscription = env("ANTHROPIC_API_KEY").is_none()
            && env("ANTHROPIC_AUTH_TOKEN").is_none()
            && !["CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"]
                .iter()
                .any(|v| env(v).is_some())
            && (env("CLAUDE_CODE_OAUTH_TOKEN").is_some()
                || read_json(&credentials).is_some_and(|c| c.get("claudeAiOauth").is_some()));
        let login = if env("ANTHROPIC_API_KEY").is_some() {
            Some("the ANTHROPIC_API_KEY variable".to_string())
        } else if env("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
            Some("the CLAUDE_CODE_OAUTH_TOKEN variable".to_string())
        } else if env("ANTHROPIC_AUTH_TOKEN").is_some() {
            Some("the ANTHROPIC_AUTH_TOKEN variable".to_string())
        } else if ["CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"]
            .iter()
            .any(|v| env(v).is_some())
        {
            Some("a cloud provider (Bedrock or Vertex)".to_string())
        } else if config_dir.join(".credentials.json").is_file() {
            Some(format!(
                "the login in {}",
                config_dir.join(".credentials.json").display()
            ))
        } else if config
            .as_ref()
            .is_some_and(|c| c.get("primaryApiKey").is_some())
        {
            Some(format!("the API key in {}", config_file.display()))
        } else if settings
            .as_ref()
            .is_some_and(|s| s.get("apiKeyHelper").is_some())
        {
            Some("the apiKeyHelper of its settings".to_string())
        } else {
            None
        };
        Setup {
            has_config: config.is_some(),
            onboarded: config
                .as_ref()
                .and_then(|c| c.get("hasCompletedOnboarding"))
                .and_then(Value::as_bool)
                == Some(true),
            trusted: config.as_ref().is_some_and(|c| trusted(c, project)),
            login,
            subscription,
            config_file,
        }
    }

    /// What the person still has to do before a run of the client, first
    /// things first (empty when it is set up): for the terminal UI its first
    /// run and a login, for `claude -p` (which shows no first-run screens)
    /// only the login. On macOS the login may be in the keychain, which is
    /// not read: no login found is said only elsewhere.
    pub(crate) fn missing_for(&self, headless: bool) -> Vec<Missing> {
        let first_run = "run `claude` once in a terminal, in this project's folder, and answer its \
                         questions (log in, theme, trust the folder)";
        let mut missing = Vec::new();
        if !headless {
            if !self.has_config {
                missing.push(Missing {
                    what: format!(
                        "Claude Code has never run in this home ({} does not exist)",
                        self.config_file.display()
                    ),
                    fix: first_run.to_string(),
                });
                return missing;
            }
            if !self.onboarded {
                missing.push(Missing {
                    what: format!(
                        "Claude Code's first-run screens were not completed ({} has no hasCompletedOnboarding)",
                        self.config_file.display()
                    ),
                    fix: first_run.to_string(),
                });
            }
        }
        if self.login.is_none() && !cfg!(target_os = "macos") {
            missing.push(Missing {
                what: "Claude Code is not logged in (no ANTHROPIC_API_KEY, no .credentials.json)"
                    .to_string(),
                fix: "run `claude` and log in (or `claude setup-token`), or set ANTHROPIC_API_KEY"
                    .to_string(),
            });
        }
        missing
    }
}

/// Whether the folder, or one above it, was trusted (the clients' rule:
/// `projects[<path>].hasTrustDialogAccepted`, by the real path).
fn trusted(config: &Value, project: &Path) -> bool {
    let real = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
    real.ancestors().any(|folder| {
        config
            .get("projects")
            .and_then(|p| p.get(folder.to_string_lossy().as_ref()))
            .and_then(|p| p.get("hasTrustDialogAccepted"))
            .and_then(Value::as_bool)
            == Some(true)
    })
}

/// A JSON object file, when it is one.
fn read_json(path: &Path) -> Option<Value> {
    match ralph_core::observe::files::read_bounded(path, MAX_CONFIG_BYTES).ok()? {
        ralph_core::observe::files::Bounded::Bytes(bytes) => {
            serde_json::from_slice::<Value>(&bytes)
                .ok()
                .filter(Value::is_object)
        }
        _ => None,
    }
}

/// What a subscription login costs runs that start `claude -p` (headless,
/// fresh, queue): said at their start and by `doctor`.
pub(crate) const SUBSCRIPTION_BILLING: &str = "on a subscription login, `claude -p` (headless, \
    fresh-context and queue runs) draws the plan's Agent SDK credit, billed at API rates, not \
    the plan's usage limits; a loop in your own session (`/ralph-loop`, an interactive run) uses \
    the plan's limits. When the credit runs out, the run ends or stays paused for you \
    (docs/overnight.md)";

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(has_config: bool, onboarded: bool, login: bool) -> Setup {
        Setup {
            config_file: PathBuf::from("/h/.claude.json"),
            has_config,
            onboarded,
            login: login.then(|| "a key".to_string()),
            subscription: false,
            trusted: false,
        }
    }

    #[test]
    fn a_fresh_home_needs_the_first_run_and_a_set_up_one_nothing() {
        let fresh = setup(false, false, false).missing_for(false);
        assert_eq!(fresh.len(), 1);
        assert!(fresh[0].what.contains("never run in this home"));
        assert!(fresh[0].fix.contains("run `claude` once"));
        assert!(setup(true, true, true).missing_for(false).is_empty());
        // `claude -p` shows no first-run screens: only the login counts.
        assert!(setup(false, false, true).missing_for(true).is_empty());
        if !cfg!(target_os = "macos") {
            let headless = setup(false, false, false).missing_for(true);
            assert_eq!(headless.len(), 1, "{headless:?}");
            assert!(headless[0].what.contains("not logged in"));
        }
        let not_onboarded = setup(true, false, true).missing_for(false);
        assert!(not_onboarded[0].what.contains("hasCompletedOnboarding"));
        if !cfg!(target_os = "macos") {
            assert!(
                setup(true, true, false).missing_for(false)[0]
                    .what
                    .contains("not logged in")
            );
        }
    }

    #[test]
    fn trust_is_by_the_folder_or_one_above_it() {
        let dir = std::env::temp_dir();
        let real = std::fs::canonicalize(&dir).unwrap();
        let parent = real
            .parent()
            .unwrap_or(&real)
            .to_string_lossy()
            .into_owned();
        let config = serde_json::json!({"projects": {parent: {"hasTrustDialogAccepted": true}}});
        assert!(trusted(&config, &real.join("some-project")));
        let config =
            serde_json::json!({"projects": {"/elsewhere": {"hasTrustDialogAccepted": true}}});
        assert!(!trusted(&config, &real));
    }
}
