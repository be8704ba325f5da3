//! The loop's configuration: defaults, overridden by `.claude/ralph/config.json`,
//! overridden by environment variables.
//!
//! Every value is validated; a bad one is an error that names the variable or
//! key and what it accepts, so the hook can let the stop through with one clear
//! line instead of running a loop the person did not ask for.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use thiserror::Error;

use crate::paths::{ProjectPaths, DEFAULT_PROMPT_FILE};

/// Default iteration cap.
pub const DEFAULT_MAX_ITERATIONS: u32 = 25;
/// Default completion signal.
pub const DEFAULT_COMPLETION_SIGNAL: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";
/// Default number of consecutive iterations with an unchanged findings count that opens the breaker.
pub const DEFAULT_CIRCUIT_BREAKER_THRESHOLD: u32 = 3;
/// Largest accepted iteration cap.
pub const MAX_ITERATIONS_LIMIT: u32 = 100_000;
/// Largest accepted circuit breaker threshold.
pub const THRESHOLD_LIMIT: u32 = 1_000;
/// Longest accepted completion signal, in characters.
pub const SIGNAL_MAX_CHARS: usize = 200;
/// Largest config file accepted; a bigger one is refused, not read.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// Environment variable names, in one place for the binaries and the docs.
pub mod env {
    /// Must be exactly `1` for the hook to do anything at all.
    pub const ACTIVE: &str = "RALPH_ACTIVE";
    /// Iteration cap.
    pub const MAX_ITERATIONS: &str = "RALPH_MAX_ITERATIONS";
    /// Completion signal.
    pub const COMPLETION_SIGNAL: &str = "RALPH_COMPLETION_SIGNAL";
    /// Findings-unchanged threshold of the circuit breaker.
    pub const CIRCUIT_BREAKER_THRESHOLD: &str = "RALPH_CIRCUIT_BREAKER_THRESHOLD";
    /// Prompt file path.
    pub const PROMPT_FILE: &str = "RALPH_PROMPT_FILE";
    /// Project root exported by Claude Code to its hooks.
    pub const CLAUDE_PROJECT_DIR: &str = "CLAUDE_PROJECT_DIR";
}

/// The resolved configuration of a loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Iteration cap: the stop that ends iteration `max_iterations` is let through.
    pub max_iterations: u32,
    /// The text whose presence in the agent's last message ends the loop.
    pub completion_signal: String,
    /// Consecutive iterations with an unchanged findings count that stop the loop.
    pub circuit_breaker_threshold: u32,
    /// The prompt file as configured (relative to the project root unless absolute).
    pub prompt_file: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_iterations: DEFAULT_MAX_ITERATIONS,
            completion_signal: DEFAULT_COMPLETION_SIGNAL.to_string(),
            circuit_breaker_threshold: DEFAULT_CIRCUIT_BREAKER_THRESHOLD,
            prompt_file: PathBuf::from(DEFAULT_PROMPT_FILE),
        }
    }
}

/// What can be wrong with the configuration.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// An environment variable holds a value out of its domain.
    #[error("environment variable {name}={value:?} is invalid: {accepts}")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// The value found (lossy if it was not UTF-8).
        value: String,
        /// What it accepts.
        accepts: String,
    },
    /// The config file exists but could not be read.
    #[error("cannot read {path}: {source}; fix its permissions or remove it")]
    Read {
        /// The config file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The config file is larger than [`MAX_CONFIG_BYTES`].
    #[error("{path} is larger than {} KiB; a ralph config is a few lines", MAX_CONFIG_BYTES / 1024)]
    TooLarge {
        /// The config file.
        path: PathBuf,
    },
    /// The config file is not valid JSON, has an unknown key or a wrong type.
    #[error("{path} is not a valid ralph config: {message}; accepted keys: maxIterations, completionSignal, circuitBreakerThreshold, promptFile")]
    Malformed {
        /// The config file.
        path: PathBuf,
        /// serde's explanation, with line and column.
        message: String,
    },
    /// A key of the config file holds a value out of its domain.
    #[error("{path}: key {key} = {value} is invalid: {accepts}")]
    BadKey {
        /// The config file.
        path: PathBuf,
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
        /// What it accepts.
        accepts: String,
    },
}

/// The keys `.claude/ralph/config.json` accepts; any other key is an error,
/// so that a typo is reported instead of silently ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    max_iterations: Option<i64>,
    completion_signal: Option<String>,
    circuit_breaker_threshold: Option<i64>,
    prompt_file: Option<String>,
}

/// A source of environment variables, so tests need not touch the process environment.
pub trait EnvSource {
    /// The variable's value; `Err` carries a lossy copy when it is not UTF-8.
    fn get(&self, name: &str) -> Option<Result<String, String>>;
}

/// The real process environment.
pub struct ProcessEnv;

impl EnvSource for ProcessEnv {
    fn get(&self, name: &str) -> Option<Result<String, String>> {
        std::env::var_os(name).map(|v| {
            v.into_string()
                .map_err(|v| v.to_string_lossy().into_owned())
        })
    }
}

impl<const N: usize> EnvSource for [(&str, &str); N] {
    fn get(&self, name: &str) -> Option<Result<String, String>> {
        self.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| Ok((*v).to_string()))
    }
}

fn accepts_count(limit: u32) -> String {
    format!("a whole number from 1 to {limit}")
}

fn signal_accepts() -> String {
    format!("a non-empty single line of at most {SIGNAL_MAX_CHARS} characters")
}

fn validate_count(raw: i64, limit: u32) -> Option<u32> {
    u32::try_from(raw).ok().filter(|v| (1..=limit).contains(v))
}

fn validate_signal(raw: &str) -> Option<String> {
    let trimmed = raw.trim();
    (!trimmed.is_empty()
        && !trimmed.contains(['\n', '\r'])
        && trimmed.chars().count() <= SIGNAL_MAX_CHARS)
        .then(|| trimmed.to_string())
}

impl Config {
    /// Loads the configuration of the project at `paths`: defaults, then the
    /// config file if present, then the environment.
    pub fn load(paths: &ProjectPaths, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        config.apply_file(&paths.config_file())?;
        config.apply_env(env)?;
        Ok(config)
    }

    fn apply_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let read_err = |source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let file = match crate::files::open_without_waiting(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(source) => return Err(read_err(source)),
        };
        // A FIFO would block the read and a device such as /dev/zero never ends.
        if !file.metadata().map_err(read_err)?.is_file() {
            return Err(read_err(io::Error::other("not a regular file")));
        }
        let mut bytes = Vec::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_err)?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = String::from_utf8(bytes).map_err(|_| {
            read_err(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream did not contain valid UTF-8",
            ))
        })?;
        let file: ConfigFile = serde_json::from_str(&text).map_err(|e| ConfigError::Malformed {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let bad = |key: &'static str, value: String, accepts: String| ConfigError::BadKey {
            path: path.to_path_buf(),
            key,
            value,
            accepts,
        };
        if let Some(raw) = file.max_iterations {
            self.max_iterations = validate_count(raw, MAX_ITERATIONS_LIMIT).ok_or_else(|| {
                bad(
                    "maxIterations",
                    raw.to_string(),
                    accepts_count(MAX_ITERATIONS_LIMIT),
                )
            })?;
        }
        if let Some(raw) = file.circuit_breaker_threshold {
            self.circuit_breaker_threshold =
                validate_count(raw, THRESHOLD_LIMIT).ok_or_else(|| {
                    bad(
                        "circuitBreakerThreshold",
                        raw.to_string(),
                        accepts_count(THRESHOLD_LIMIT),
                    )
                })?;
        }
        if let Some(raw) = file.completion_signal {
            self.completion_signal = validate_signal(&raw)
                .ok_or_else(|| bad("completionSignal", format!("{raw:?}"), signal_accepts()))?;
        }
        if let Some(raw) = file.prompt_file {
            if raw.trim().is_empty() {
                return Err(bad(
                    "promptFile",
                    format!("{raw:?}"),
                    "a non-empty path".into(),
                ));
            }
            self.prompt_file = PathBuf::from(raw);
        }
        Ok(())
    }

    fn apply_env(&mut self, env: &dyn EnvSource) -> Result<(), ConfigError> {
        // An empty variable counts as unset: `VAR= cmd` is how shells unset for one command.
        let read = |name: &'static str,
                    accepts: &dyn Fn() -> String|
         -> Result<Option<String>, ConfigError> {
            match env.get(name) {
                None => Ok(None),
                Some(Ok(v)) if v.is_empty() => Ok(None),
                Some(Ok(v)) => Ok(Some(v)),
                Some(Err(lossy)) => Err(ConfigError::BadEnv {
                    name,
                    value: lossy,
                    accepts: format!("{} (valid UTF-8)", accepts()),
                }),
            }
        };
        let count = |name: &'static str, limit: u32| -> Result<Option<u32>, ConfigError> {
            let accepts = || accepts_count(limit);
            match read(name, &accepts)? {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(|n| validate_count(n, limit))
                    .map(Some)
                    .ok_or(ConfigError::BadEnv {
                        name,
                        value: v,
                        accepts: accepts(),
                    }),
            }
        };
        if let Some(n) = count(env::MAX_ITERATIONS, MAX_ITERATIONS_LIMIT)? {
            self.max_iterations = n;
        }
        if let Some(n) = count(env::CIRCUIT_BREAKER_THRESHOLD, THRESHOLD_LIMIT)? {
            self.circuit_breaker_threshold = n;
        }
        if let Some(v) = read(env::COMPLETION_SIGNAL, &signal_accepts)? {
            self.completion_signal = validate_signal(&v).ok_or(ConfigError::BadEnv {
                name: env::COMPLETION_SIGNAL,
                value: v,
                accepts: signal_accepts(),
            })?;
        }
        if let Some(v) = read(env::PROMPT_FILE, &|| "a path".to_string())? {
            self.prompt_file = PathBuf::from(v);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn project_with_config(json: Option<&str>) -> (crate::tempdir::TempDir, ProjectPaths) {
        let dir = crate::tempdir::TempDir::new();
        let paths = ProjectPaths::new(dir.path());
        if let Some(json) = json {
            fs::create_dir_all(paths.ralph_dir()).unwrap();
            fs::write(paths.config_file(), json).unwrap();
        }
        (dir, paths)
    }

    #[test]
    fn defaults_without_file_or_env() {
        let (_d, paths) = project_with_config(None);
        assert_eq!(Config::load(&paths, &[]).unwrap(), Config::default());
    }

    #[test]
    fn env_overrides_file_overrides_defaults() {
        let (_d, paths) = project_with_config(Some(
            r#"{"maxIterations": 7, "completionSignal": "FILE_DONE", "circuitBreakerThreshold": 4, "promptFile": "p.md"}"#,
        ));
        let from_file = Config::load(&paths, &[]).unwrap();
        assert_eq!(from_file.max_iterations, 7);
        assert_eq!(from_file.completion_signal, "FILE_DONE");
        assert_eq!(from_file.circuit_breaker_threshold, 4);
        assert_eq!(from_file.prompt_file, PathBuf::from("p.md"));
        let env = [
            (env::MAX_ITERATIONS, "12"),
            (env::COMPLETION_SIGNAL, " ENV_DONE "),
        ];
        let both = Config::load(&paths, &env).unwrap();
        assert_eq!(both.max_iterations, 12);
        assert_eq!(both.completion_signal, "ENV_DONE");
        assert_eq!(both.circuit_breaker_threshold, 4);
    }

    #[test]
    fn empty_env_counts_as_unset() {
        let (_d, paths) = project_with_config(None);
        let env = [(env::MAX_ITERATIONS, ""), (env::COMPLETION_SIGNAL, "")];
        assert_eq!(Config::load(&paths, &env).unwrap(), Config::default());
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let (_d, paths) = project_with_config(None);
        let cases: [(&str, &str); 9] = [
            (env::MAX_ITERATIONS, "abc"),
            (env::MAX_ITERATIONS, "0"),
            (env::MAX_ITERATIONS, "-3"),
            (env::MAX_ITERATIONS, "2.5"),
            (env::MAX_ITERATIONS, "100001"),
            (env::CIRCUIT_BREAKER_THRESHOLD, "zero"),
            (env::CIRCUIT_BREAKER_THRESHOLD, "0"),
            (env::COMPLETION_SIGNAL, "   "),
            (env::COMPLETION_SIGNAL, "two\nlines"),
        ];
        for (name, value) in cases {
            let env = [(name, value)];
            let err = Config::load(&paths, &env).unwrap_err().to_string();
            assert!(err.contains(name), "{name}={value:?}: {err}");
        }
    }

    #[test]
    fn bad_file_values_name_the_key_or_file() {
        let cases = [
            (r#"{"maxIterations": 0}"#, "maxIterations"),
            (r#"{"maxIterations": -1}"#, "maxIterations"),
            (r#"{"maxIterations": "ten"}"#, "config.json"),
            (
                r#"{"circuitBreakerThreshold": 0}"#,
                "circuitBreakerThreshold",
            ),
            (r#"{"completionSignal": ""}"#, "completionSignal"),
            (r#"{"promptFile": " "}"#, "promptFile"),
            (r#"{"maxIteration": 5}"#, "unknown field `maxIteration`"),
            (r#"{"maxIterations": 5"#, "config.json"),
            ("[]", "config.json"),
            ("", "config.json"),
        ];
        for (json, needle) in cases {
            let (_d, paths) = project_with_config(Some(json));
            let err = Config::load(&paths, &[]).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
        let big = format!("{{{}}}", " ".repeat(MAX_CONFIG_BYTES as usize));
        let (_d, paths) = project_with_config(Some(&big));
        let err = Config::load(&paths, &[]).unwrap_err();
        assert!(matches!(err, ConfigError::TooLarge { .. }), "{err}");
        let (_d, paths) = project_with_config(Some("{}"));
        fs::write(paths.config_file(), b"{\xff}").unwrap();
        let err = Config::load(&paths, &[]).unwrap_err().to_string();
        assert!(err.contains("not contain valid UTF-8"), "{err}");
    }
}
