//! The settings a run's command line gives (`--max-iterations`,
//! `--max-cost-usd`, `--sandbox`/`--no-sandbox`, a dry run's task file),
//! which rank as their environment variables do. They are passed, never set
//! in ralph's own environment: the run's config reads go through
//! [`RunEnv`], and the client's command carries them as variables, so that
//! its Stop hook (the client's child) reads the same.

use std::path::PathBuf;

use ralph_core::judge::config::{EnvSource, NotUtf8, ProcessEnv};

/// The process environment with the run's own settings over it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RunEnv {
    overrides: Vec<(&'static str, String)>,
}

impl RunEnv {
    /// Sets `name` to `value` for the run (the last setting of a name wins).
    pub(crate) fn set(&mut self, name: &'static str, value: impl Into<String>) {
        let value = value.into();
        match self.overrides.iter_mut().find(|(n, _)| *n == name) {
            Some(entry) => entry.1 = value,
            None => self.overrides.push((name, value)),
        }
    }

    /// The run's settings as variables, for the client's environment.
    pub(crate) fn overrides(&self) -> &[(&'static str, String)] {
        &self.overrides
    }
}

impl EnvSource for RunEnv {
    fn get(&self, name: &str) -> Option<Result<String, NotUtf8>> {
        match self.overrides.iter().find(|(n, _)| *n == name) {
            Some((_, value)) => Some(Ok(value.clone())),
            None => ProcessEnv.get(name),
        }
    }

    fn user_config_dir(&self) -> Option<PathBuf> {
        ProcessEnv.user_config_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_setting_ranks_over_the_environment_and_the_last_one_wins() {
        let mut env = RunEnv::default();
        assert_eq!(
            env.get("PATH"),
            ProcessEnv.get("PATH"),
            "the rest is the process's"
        );
        env.set("PATH", "/run/only");
        env.set("RALPH_SANDBOX", "on");
        env.set("RALPH_SANDBOX", "off");
        assert_eq!(env.get("PATH"), Some(Ok("/run/only".into())));
        assert_eq!(env.get("RALPH_SANDBOX"), Some(Ok("off".into())));
        assert_eq!(
            env.overrides(),
            &[
                ("PATH", "/run/only".to_string()),
                ("RALPH_SANDBOX", "off".to_string())
            ]
        );
        assert_ne!(
            std::env::var("PATH").ok().as_deref(),
            Some("/run/only"),
            "never set"
        );
    }
}
