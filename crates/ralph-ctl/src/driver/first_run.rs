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
    /// How the client logs in, when something was found (for `claude -p`,
    /// which takes `ANTHROPIC_API_KEY` whenever it is set).
    pub(crate) login: Option<String>,
    /// `claude -p` logs in with a subscription (a Claude plan's OAuth
    /// token, in the environment or stored by the client), not an API key
    /// or a cloud provider: it then draws from the plan's usage limits.
    pub(crate) subscription: bool,
    /// A subscription login there is, described, whether or not an API key
    /// goes first.
    pub(crate) subscription_login: Option<String>,
    /// `ANTHROPIC_API_KEY` is set (and the client talks to Anthropic, not a
    /// cloud provider): what the client recorded of it.
    pub(crate) api_key: Option<KeyAnswer>,
    /// The project folder (or a folder above it) was trusted.
    pub(crate) trusted: bool,
}

/// What the client recorded of the `ANTHROPIC_API_KEY` it was given, in
/// `customApiKeyResponses` of its global config (the key's last 20
/// characters in `approved` or `rejected`). Its terminal UI uses the key
/// only when approved and asks at start when neither; `claude -p` uses the
/// key whatever was recorded (2.0.77 and 2.1.330 alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyAnswer {
    /// The person said yes: interactive runs use the key.
    Approved,
    /// The person said no: interactive runs use the client's other login.
    Declined,
    /// Never asked: the terminal UI opens on "Detected a custom API key …
    /// Do you want to use this API key?", defaulting to No.
    NotAsked,
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
        let cloud = ["CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"]
            .iter()
            .any(|v| env(v).is_some());
        let subscription_login = if env("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
            Some("the CLAUDE_CODE_OAUTH_TOKEN variable".to_string())
        } else if read_json(&credentials).is_some_and(|c| c.get("claudeAiOauth").is_some()) {
            Some(format!("the login in {}", credentials.display()))
        } else {
            None
        }
        .filter(|_| !cloud && env("ANTHROPIC_AUTH_TOKEN").is_none());
        let subscription = env("ANTHROPIC_API_KEY").is_none() && subscription_login.is_some();
        let api_key = env("ANTHROPIC_API_KEY")
            .filter(|_| !cloud)
            .map(|key| key_answer(config.as_ref(), &key.to_string_lossy()));
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
            subscription_login,
            api_key,
            config_file,
        }
    }

    /// What runs of `claude -p` (headless, fresh-context, queue) are billed
    /// to, when a subscription login is involved (said at their start and
    /// by `doctor`); none with only an API key or a cloud provider.
    pub(crate) fn headless_billing(&self) -> Option<String> {
        if self.subscription {
            return Some(SUBSCRIPTION_BILLING.to_string());
        }
        let subscription = self.subscription_login.as_ref()?;
        self.api_key?;
        Some(format!(
            "ANTHROPIC_API_KEY and a subscription login ({subscription}) are both set: `claude -p` \
             (headless, fresh-context and queue runs) uses the key, billed per token at API rates, \
             not the plan (in -p the client takes the variable whatever it recorded of the key); \
             unset ANTHROPIC_API_KEY for these runs to draw from the plan's usage limits instead \
             (docs/overnight.md). {}",
            self.interactive_key_use(subscription)
        ))
    }

    /// Which login an interactive run uses, `ANTHROPIC_API_KEY` being set
    /// beside `other` (a sentence).
    fn interactive_key_use(&self, other: &str) -> String {
        match self.api_key {
            Some(KeyAnswer::Approved) => {
                "An interactive run uses the key too: you approved it in the client".to_string()
            }
            Some(KeyAnswer::Declined) => {
                format!("An interactive run uses {other}: you declined the key in the client")
            }
            _ => format!(
                "An interactive run asks first which to use (\"Detected a custom API key\"), \
                 and its default, No, uses {other}"
            ),
        }
    }

    /// The question an interactive run opens on about `ANTHROPIC_API_KEY`,
    /// when the client never recorded an answer for it (in a home where it
    /// never ran, it is one of the first-run screens).
    pub(crate) fn key_question(&self) -> Option<Missing> {
        if self.api_key != Some(KeyAnswer::NotAsked) || !self.has_config {
            return None;
        }
        let (default, fix) = match &self.subscription_login {
            Some(login) => (
                format!("uses {login}, not the key"),
                "run `claude` once in a terminal with this ANTHROPIC_API_KEY set and answer it \
                 (Yes: the key pays for interactive runs; No: the subscription does), or unset \
                 ANTHROPIC_API_KEY",
            ),
            None => (
                "leaves the client without a login".to_string(),
                "run `claude` once in a terminal with this ANTHROPIC_API_KEY set and answer Yes",
            ),
        };
        Some(Missing {
            what: format!(
                "the client has no answer recorded for this ANTHROPIC_API_KEY (customApiKeyResponses \
                 in {}): an interactive run opens on \"Detected a custom API key … Do you want to \
                 use this API key?\", which nobody answers in an unattended run; its default, No, \
                 {default}",
                self.config_file.display()
            ),
            fix: fix.to_string(),
        })
    }

    /// The screens the client's terminal UI opens on before it takes a
    /// prompt, which no loop answers (its first run, the question of an
    /// `ANTHROPIC_API_KEY` it has no answer for): empty when there are none.
    pub(crate) fn first_screens(&self) -> Vec<Missing> {
        let first_run = "run `claude` once in a terminal, in this project's folder, and answer its \
                         questions (log in, theme, trust the folder)";
        if !self.has_config {
            return vec![Missing {
                what: format!(
                    "Claude Code has never run in this home ({} does not exist)",
                    self.config_file.display()
                ),
                fix: first_run.to_string(),
            }];
        }
        let mut missing = Vec::new();
        if !self.onboarded {
            missing.push(Missing {
                what: format!(
                    "Claude Code's first-run screens were not completed ({} has no hasCompletedOnboarding)",
                    self.config_file.display()
                ),
                fix: first_run.to_string(),
            });
        }
        missing.extend(self.key_question());
        missing
    }

    /// What the person still has to do before a run of the client, first
    /// things first (empty when it is set up): for the terminal UI its first
    /// run and a login, for `claude -p` (which shows no first-run screens)
    /// only the login. On macOS the login may be in the keychain, which is
    /// not read: no login found is said only elsewhere.
    pub(crate) fn missing_for(&self, headless: bool) -> Vec<Missing> {
        let mut missing = if headless {
            Vec::new()
        } else {
            self.first_screens()
        };
        if !headless && !self.has_config {
            return missing;
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

/// What the client recorded of `key` in `config` (the clients' rule: the
/// key's last 20 characters, after trimming it, in
/// `customApiKeyResponses.approved` or `.rejected`).
fn key_answer(config: Option<&Value>, key: &str) -> KeyAnswer {
    let key = key.trim();
    let tail: String = {
        let chars: Vec<char> = key.chars().collect();
        chars[chars.len().saturating_sub(20)..].iter().collect()
    };
    let listed = |list: &str| {
        config
            .and_then(|c| c.get("customApiKeyResponses"))
            .and_then(|r| r.get(list))
            .and_then(Value::as_array)
            .is_some_and(|keys| keys.iter().any(|k| k.as_str() == Some(tail.as_str())))
    };
    if listed("approved") {
        KeyAnswer::Approved
    } else if listed("rejected") {
        KeyAnswer::Declined
    } else {
        KeyAnswer::NotAsked
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
/// fresh, queue): said at their start and by `doctor`. What is in force,
/// with the day it was last read and where: a separate Agent SDK credit
/// was announced in May 2026 for 2026-06-15 and paused on that day.
pub(crate) const SUBSCRIPTION_BILLING: &str = "on a subscription login, `claude -p` (headless, \
    fresh-context and queue runs) draws from the plan's usage limits, as a loop in your own \
    session does (checked 2026-12-02 in Anthropic's help center article on using the Agent SDK \
    with a Claude plan: the separate monthly Agent SDK credit announced for 2026-06-15 was paused \
    that day, and notice is to come before any change). A limit reached pauses the run until it \
    resets (docs/overnight.md)";

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
            subscription_login: None,
            api_key: None,
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
    fn a_key_s_answer_is_read_by_its_last_20_characters() {
        let key = "sk-ant-api03-0123456789abcdefghijKLMNOPQRST";
        let config = |list: &str| serde_json::json!({"customApiKeyResponses": {list: ["abcdefghijKLMNOPQRST"]}});
        assert_eq!(
            key_answer(Some(&config("approved")), key),
            KeyAnswer::Approved
        );
        assert_eq!(
            key_answer(Some(&config("rejected")), key),
            KeyAnswer::Declined
        );
        // 2.1.330 trims the key before it takes the tail.
        let padded = format!("  {key}\n");
        assert_eq!(
            key_answer(Some(&config("approved")), &padded),
            KeyAnswer::Approved
        );
        assert_eq!(
            key_answer(Some(&config("approved")), "sk-other"),
            KeyAnswer::NotAsked
        );
        assert_eq!(key_answer(None, key), KeyAnswer::NotAsked);
        // The question comes only in a home where the client ran (before,
        // it is one of the first-run screens).
        let mut asked = setup(true, true, true);
        asked.api_key = Some(KeyAnswer::NotAsked);
        assert!(
            asked.first_screens()[0]
                .what
                .contains("Detected a custom API key")
        );
        asked.has_config = false;
        assert!(asked.key_question().is_none());
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
