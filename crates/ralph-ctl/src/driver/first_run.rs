//! Whether the client has been set up in this home: the questions Claude
//! Code asks once (log in or use a key, pick a theme, trust the folder)
//! must be answered by a person before a loop runs, or its first run stops
//! at a dialog (interactive) or exits at once. The clients keep the answers
//! in their global config file (`~/.claude.json`, or `.claude.json` in
//! `CLAUDE_CONFIG_DIR`) and the login in `.credentials.json` of their
//! config folder (the macOS keychain there); this reads them, never writes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::command::ClientVersion;

/// The most of a settings or credentials file that is read.
const MAX_CONFIG_BYTES: u64 = 16 * 1024 * 1024;

/// The most of the client's global config file that is read: the client
/// keeps every project's history there, and files of hundreds of MB exist.
const MAX_CLIENT_CONFIG_BYTES: u64 = 1024 * 1024 * 1024;

/// The variables that make Claude Code 2.1.330 talk to a provider other
/// than Anthropic (its provider choice, read in its bundled JavaScript),
/// from the environment or a settings file's `env`: it then never asks
/// about an `ANTHROPIC_API_KEY`.
const PROVIDERS: [&str; 6] = [
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    "CLAUDE_CODE_USE_ANTHROPIC_AWS",
    "CLAUDE_CODE_USE_ANTHROPIC_GOOGLE_CLOUD",
    "CLAUDE_CODE_USE_MANTLE",
];

/// What was found of the client's first-run answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setup {
    /// The global config file looked at.
    pub(crate) config_file: PathBuf,
    /// It exists and was read (a JSON object).
    pub(crate) has_config: bool,
    /// It exists but could not be read, and why (too large, not JSON): what
    /// the client recorded is then not known, and nothing is refused on it.
    pub(crate) unreadable: Option<String>,
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
    /// Every login but `ANTHROPIC_API_KEY`, described: what an interactive
    /// run uses when the key is declined (a subscription, a token, a cloud
    /// provider, an apiKeyHelper, a stored key).
    pub(crate) other_login: Option<String>,
    /// An apiKeyHelper beside a stored subscription login, described: the
    /// helper goes first, so no run draws from the plan.
    pub(crate) helper_over_subscription: Option<String>,
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
    /// Looks at this home's client config for `project`, for the client of
    /// `version` (when it said): 2.1 and later never ask about the key with
    /// a provider other than Anthropic, 2.0.77 asks whatever the provider.
    pub(crate) fn probe(project: &Path, version: Option<ClientVersion>) -> Setup {
        let config_dir = client_config_dir();
        let config_file = client_config_file(&config_dir);
        let read = read_client_config(&config_file);
        let (config, unreadable) = match read {
            ConfigRead::Read(config) => (Some(*config), None),
            ConfigRead::Missing => (None, None),
            ConfigRead::Unreadable(why) => (None, Some(why)),
        };
        let settings = client_settings(&config_dir, project);
        let provider = cloud_provider(&settings);
        let key_helper = settings
            .iter()
            .find(|(_, s)| s.get("apiKeyHelper").is_some_and(set))
            .map(|(path, _)| format!("the apiKeyHelper of {}", path.display()));
        let credentials = config_dir.join(".credentials.json");
        let stored_subscription =
            read_json(&credentials).is_some_and(|c| c.get("claudeAiOauth").is_some());
        let subscription_login = if env("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
            Some("the CLAUDE_CODE_OAUTH_TOKEN variable".to_string())
        } else if stored_subscription && key_helper.is_none() {
            Some(format!("the login in {}", credentials.display()))
        } else {
            None
        }
        .filter(|_| provider.is_none() && env("ANTHROPIC_AUTH_TOKEN").is_none());
        // An apiKeyHelper goes before a stored subscription login (an
        // exported key goes before both in `claude -p`).
        let helper_over_subscription = (stored_subscription
            && env("ANTHROPIC_API_KEY").is_none()
            && env("CLAUDE_CODE_OAUTH_TOKEN").is_none()
            && provider.is_none())
        .then(|| key_helper.clone())
        .flatten();
        let subscription = env("ANTHROPIC_API_KEY").is_none() && subscription_login.is_some();
        // 2.1 and later skip the question with another provider; 2.0 asks.
        let asks_with_provider = version.is_some_and(|v| v < ClientVersion(2, 1, 0));
        let api_key = env("ANTHROPIC_API_KEY")
            .filter(|_| provider.is_none() || asks_with_provider)
            .map(|key| {
                key_answer(
                    config.as_ref().and_then(|c| c.key_responses.as_ref()),
                    &key.to_string_lossy(),
                )
            });
        let other_login = other_login(
            provider.as_deref(),
            key_helper.as_deref(),
            &credentials,
            config.as_ref(),
            &config_file,
        );
        let login = if env("ANTHROPIC_API_KEY").is_some() {
            Some("the ANTHROPIC_API_KEY variable".to_string())
        } else {
            other_login.clone()
        };
        Setup {
            has_config: config.is_some(),
            unreadable,
            onboarded: config
                .as_ref()
                .and_then(|c| c.onboarding.as_ref())
                .and_then(Value::as_bool)
                == Some(true),
            trusted: config
                .as_ref()
                .is_some_and(|c| trusted(&c.projects, project)),
            login,
            other_login,
            subscription,
            subscription_login,
            helper_over_subscription,
            api_key,
            config_file,
        }
    }

    /// What runs of `claude -p` (headless, fresh-context, queue) are billed
    /// to, when a subscription login is involved (said at their start and
    /// by `doctor`); none with only an API key or a cloud provider.
    pub(crate) fn headless_billing(&self) -> Option<String> {
        if let Some(helper) = &self.helper_over_subscription {
            return Some(format!(
                "{helper} and a subscription login are both set: the client uses the helper's key \
                 first, in every run (headless and interactive), billed per token at API rates, \
                 not the plan; remove apiKeyHelper from the settings for runs to draw from the \
                 plan's usage limits instead (docs/overnight.md)"
            ));
        }
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
        let (default, fix) = match &self.other_login {
            Some(login) => (
                format!("uses {login}, not the key"),
                "run `claude` once in a terminal with this ANTHROPIC_API_KEY set and answer it \
                 (Yes: the key pays for interactive runs; No: the other login does), or unset \
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
        if self.unreadable.is_some() {
            // What the client recorded is not known: nothing is refused
            // (`config_unread` says why).
            return Vec::new();
        }
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

    /// Why the client's global config file could not be read, when it
    /// exists: said at an interactive start and by `doctor`, which then
    /// cannot tell whether the first-run screens were done.
    pub(crate) fn config_unread(&self) -> Option<String> {
        self.unreadable.as_ref().map(|why| {
            format!(
                "{} could not be read ({why}): whether the client's first-run screens were done, \
                 and its answer for an ANTHROPIC_API_KEY, are not known, and an interactive run is \
                 not refused on them",
                self.config_file.display()
            )
        })
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
        if !headless && !self.has_config && self.unreadable.is_none() {
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

/// An environment variable that is set and not empty.
fn env(name: &str) -> Option<std::ffi::OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

/// The client's config folder: `CLAUDE_CONFIG_DIR`, else `~/.claude`.
fn client_config_dir() -> PathBuf {
    env("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| dirs::home_dir().map(|h| h.join(".claude")))
        .unwrap_or_else(|| PathBuf::from(".claude"))
}

/// The client's global config file, by the clients' own rule:
/// `.config.json` in the config folder when it exists, else `.claude.json`
/// in `CLAUDE_CONFIG_DIR` or the home.
fn client_config_file(config_dir: &Path) -> PathBuf {
    let legacy = config_dir.join(".config.json");
    if legacy.is_file() {
        legacy
    } else {
        env("CLAUDE_CONFIG_DIR")
            .map(PathBuf::from)
            .or_else(dirs::home_dir)
            .unwrap_or_default()
            .join(".claude.json")
    }
}

/// The user's settings, then the project's, each that reads as JSON with
/// its path: their `env` blocks are the client's environment too, and any
/// may name an apiKeyHelper.
fn client_settings(config_dir: &Path, project: &Path) -> Vec<(PathBuf, Value)> {
    [
        config_dir.join("settings.json"),
        project.join(".claude").join("settings.json"),
        project.join(".claude").join("settings.local.json"),
    ]
    .into_iter()
    .filter_map(|path| read_json(&path).map(|value| (path, value)))
    .collect()
}

/// The first cloud provider switched on, in the environment or in the
/// `env` block of one of `settings`, described with where it was found.
fn cloud_provider(settings: &[(PathBuf, Value)]) -> Option<String> {
    PROVIDERS.iter().find_map(|name| {
        if env(name).is_some() {
            return Some(format!("{name} in the environment"));
        }
        settings.iter().find_map(|(path, s)| {
            s.get("env")
                .and_then(|e| e.get(*name))
                .filter(|v| set(v))
                .map(|_| format!("{name} in the env of {}", path.display()))
        })
    })
}

/// Every login but the key in the environment, the first found: what an
/// interactive run uses when the key is declined.
fn other_login(
    provider: Option<&str>,
    key_helper: Option<&str>,
    credentials: &Path,
    config: Option<&ClientConfig>,
    config_file: &Path,
) -> Option<String> {
    if env("CLAUDE_CODE_OAUTH_TOKEN").is_some() {
        Some("the CLAUDE_CODE_OAUTH_TOKEN variable".to_string())
    } else if env("ANTHROPIC_AUTH_TOKEN").is_some() {
        Some("the ANTHROPIC_AUTH_TOKEN variable".to_string())
    } else if let Some(provider) = provider {
        Some(format!("a cloud provider ({provider})"))
    } else if let Some(helper) = key_helper {
        Some(helper.to_string())
    } else if credentials.is_file() {
        Some(format!("the login in {}", credentials.display()))
    } else if config.is_some_and(|c| c.primary_api_key.as_ref().is_some_and(set)) {
        Some(format!("the API key in {}", config_file.display()))
    } else {
        None
    }
}

/// What the client recorded of `key` in `responses` (its
/// `customApiKeyResponses`: the key's last 20 characters in `approved` or
/// `rejected`; 2.1.330 trims the key first, 2.0.77 does not, so either
/// tail counts).
fn key_answer(responses: Option<&Value>, key: &str) -> KeyAnswer {
    let tail = |key: &str| -> String {
        let chars: Vec<char> = key.chars().collect();
        chars[chars.len().saturating_sub(20)..].iter().collect()
    };
    let tails = [tail(key), tail(key.trim())];
    let listed = |list: &str| {
        responses
            .and_then(|r| r.get(list))
            .and_then(Value::as_array)
            .is_some_and(|keys| {
                keys.iter()
                    .any(|k| k.as_str().is_some_and(|k| tails.iter().any(|t| t == k)))
            })
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
fn trusted(projects: &BTreeMap<String, Trust>, project: &Path) -> bool {
    let real = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
    real.ancestors().any(|folder| {
        projects
            .get(folder.to_string_lossy().as_ref())
            .is_some_and(|p| p.0)
    })
}

/// A setting's value that is set (a non-empty string, `true`, a number).
fn set(value: &Value) -> bool {
    match value {
        Value::String(s) => !s.is_empty(),
        Value::Bool(b) => *b,
        Value::Number(_) | Value::Object(_) | Value::Array(_) => true,
        Value::Null => false,
    }
}

/// What ralph reads of the client's global config file: the few keys it
/// needs, every other one skipped as it is read.
#[derive(Debug, Default, Deserialize)]
struct ClientConfig {
    #[serde(rename = "hasCompletedOnboarding", default)]
    onboarding: Option<Value>,
    #[serde(rename = "customApiKeyResponses", default)]
    key_responses: Option<Value>,
    #[serde(rename = "primaryApiKey", default)]
    primary_api_key: Option<Value>,
    #[serde(default, deserialize_with = "projects")]
    projects: BTreeMap<String, Trust>,
}

/// Whether a project's entry says it was trusted.
#[derive(Debug, Default)]
struct Trust(bool);

impl<'de> Deserialize<'de> for Trust {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let entry = Value::deserialize(d)?;
        Ok(Trust(
            entry.get("hasTrustDialogAccepted").and_then(Value::as_bool) == Some(true),
        ))
    }
}

/// `projects`, each entry read for its trust alone and let go; a value
/// that is not an object of entries reads as none.
fn projects<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Trust>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = BTreeMap<String, Trust>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("the projects' entries")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut entries = BTreeMap::new();
            while let Some((path, trust)) = map.next_entry::<String, Trust>()? {
                entries.insert(path, trust);
            }
            Ok(entries)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(BTreeMap::new())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(BTreeMap::new())
        }
    }
    d.deserialize_any(Entries)
}

/// How the client's global config file was read.
#[derive(Debug)]
enum ConfigRead {
    /// It does not exist: the client never ran in this home.
    Missing,
    /// It exists but was not read, and why.
    Unreadable(String),
    /// What was read of it.
    Read(Box<ClientConfig>),
}

/// Reads the client's global config file as it streams (a file the
/// person's client wrote, up to [`MAX_CLIENT_CONFIG_BYTES`]).
fn read_client_config(path: &Path) -> ConfigRead {
    use std::io::BufRead;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return ConfigRead::Missing,
        Err(e) => return ConfigRead::Unreadable(e.to_string()),
    };
    match file.metadata() {
        Ok(meta) if meta.len() > MAX_CLIENT_CONFIG_BYTES => {
            return ConfigRead::Unreadable(format!(
                "{} MiB, more than the {} MiB ralph reads",
                meta.len() / (1024 * 1024),
                MAX_CLIENT_CONFIG_BYTES / (1024 * 1024)
            ));
        }
        Ok(meta) if meta.is_dir() => return ConfigRead::Unreadable("a folder".into()),
        Ok(_) => {}
        Err(e) => return ConfigRead::Unreadable(e.to_string()),
    }
    let mut reader = std::io::BufReader::with_capacity(
        64 * 1024,
        std::io::Read::take(file, MAX_CLIENT_CONFIG_BYTES),
    );
    // A JSON object, nothing else (serde would take an array for the struct).
    let first = loop {
        match reader.fill_buf() {
            Ok([]) => break None,
            Ok(buf) => {
                if let Some(at) = buf.iter().position(|b| !b.is_ascii_whitespace()) {
                    break Some(buf[at]);
                }
                let len = buf.len();
                reader.consume(len);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return ConfigRead::Unreadable(e.to_string()),
        }
    };
    if first != Some(b'{') {
        return ConfigRead::Unreadable("not a JSON object".into());
    }
    match serde_json::from_reader::<_, ClientConfig>(reader) {
        Ok(config) => ConfigRead::Read(Box::new(config)),
        Err(e) => ConfigRead::Unreadable(format!("not valid JSON: {e}")),
    }
}

/// A JSON object file, when it is one.
fn read_json(path: &Path) -> Option<Value> {
    match ralph_core::files::read_bounded(path, MAX_CONFIG_BYTES).ok()? {
        ralph_core::files::Bounded::Bytes(bytes) => serde_json::from_slice::<Value>(&bytes)
            .ok()
            .filter(Value::is_object),
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
            other_login: None,
            helper_over_subscription: None,
            unreadable: None,
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
        let config = |list: &str| serde_json::json!({list: ["abcdefghijKLMNOPQRST"]});
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
        // 2.0.77 takes the tail of the key as given, untrimmed: a key
        // exported with a trailing newline is recorded with it.
        let untrimmed = format!("{key}\n");
        let tail_2_0: String = untrimmed
            .chars()
            .skip(untrimmed.chars().count() - 20)
            .collect();
        let recorded = serde_json::json!({"approved": [tail_2_0]});
        assert_eq!(key_answer(Some(&recorded), &untrimmed), KeyAnswer::Approved);
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
        let projects = |json: serde_json::Value| -> BTreeMap<String, Trust> {
            serde_json::from_value::<ClientConfig>(json)
                .unwrap()
                .projects
        };
        let config = projects(
            serde_json::json!({"projects": {parent: {"hasTrustDialogAccepted": true, "history": [1]}}}),
        );
        assert!(trusted(&config, &real.join("some-project")));
        let config = projects(
            serde_json::json!({"projects": {"/elsewhere": {"hasTrustDialogAccepted": true}}}),
        );
        assert!(!trusted(&config, &real));
        assert!(projects(serde_json::json!({"projects": "odd"})).is_empty());
    }

    #[test]
    fn a_large_or_broken_config_is_read_or_named_never_taken_for_a_fresh_home() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".claude.json");
        assert!(matches!(read_client_config(&path), ConfigRead::Missing));
        // Larger than any bound of a small file: a client's history of many
        // projects (real files of 65 to 238 MB exist).
        let history = "x".repeat(40 * 1024 * 1024);
        std::fs::write(
            &path,
            format!(
                r#"{{"projects": {{"/p": {{"history": ["{history}"], "hasTrustDialogAccepted": true}}}},
                "hasCompletedOnboarding": true, "customApiKeyResponses": {{"approved": ["k"]}}}}"#
            ),
        )
        .unwrap();
        drop(history);
        match read_client_config(&path) {
            ConfigRead::Read(config) => {
                assert_eq!(config.onboarding, Some(Value::Bool(true)));
                assert!(config.projects["/p"].0);
                assert!(config.key_responses.is_some());
            }
            other => panic!("{other:?}"),
        }
        for (text, why) in [
            ("{\"hasCompletedOnboarding\": tru", "not valid JSON"),
            ("[1, 2]", "not a JSON object"),
            ("", "not a JSON object"),
        ] {
            std::fs::write(&path, text).unwrap();
            match read_client_config(&path) {
                ConfigRead::Unreadable(said) => assert!(said.contains(why), "{said}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        // Not read: nothing is refused, and the cause is said.
        let mut unread = setup(false, false, true);
        unread.unreadable = Some("not valid JSON: EOF".into());
        assert!(unread.first_screens().is_empty());
        assert!(unread.missing_for(false).is_empty());
        let said = unread.config_unread().unwrap();
        assert!(
            said.contains("could not be read (not valid JSON: EOF)")
                && said.contains("not refused"),
            "{said}"
        );
    }
}
