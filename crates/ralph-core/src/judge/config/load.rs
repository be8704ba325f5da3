//! Reading a loop's config: the per-user defaults, the project's file and
//! the environment, in that order, each key checked against what it
//! accepts ([`Config::load`] and the layers it reads).

use super::*;

impl Config {
    /// Loads the configuration of the project at `paths`: defaults, then the
    /// config file if present, then the environment.
    pub fn load(paths: &ProjectPaths, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        Config::from_layers(paths, env, &FileLayers::read(paths, env)?)
    }

    /// The configuration made of `layers` (the files' texts as read, or as
    /// pinned when the loop started): defaults, then the per-user file, then
    /// the project's, then the environment, which is the person's and always
    /// applies.
    pub fn from_layers(
        paths: &ProjectPaths,
        env: &dyn EnvSource,
        layers: &FileLayers,
    ) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        if let Some(text) = &layers.user {
            let path = env
                .user_config_dir()
                .unwrap_or_else(|| PathBuf::from("~/.config"))
                .join(USER_CONFIG_FILE);
            config.apply_text(&path, text, Scope::User)?;
        }
        if let Some(text) = &layers.project {
            config.apply_text(&paths.config_file(), text, Scope::Project)?;
        }
        config.apply_env(env)?;
        Ok(config)
    }

    pub(super) fn apply_text(
        &mut self,
        path: &Path,
        text: &str,
        scope: Scope,
    ) -> Result<(), ConfigError> {
        let malformed = |e: serde_json::Error| ConfigError::Malformed {
            path: path.to_path_buf(),
            message: e.to_string(),
        };
        let bad = |key: &'static str, value: String, accepts: String| ConfigError::BadKey {
            path: path.to_path_buf(),
            key,
            value,
            accepts,
        };
        let mut object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(text).map_err(malformed)?;
        for setting in number_settings() {
            if let Some(raw) = object.remove(setting.key) {
                let value = raw
                    .as_i64()
                    .and_then(|n| validate_range(n, setting.min, setting.max))
                    .ok_or_else(|| {
                        bad(
                            setting.key,
                            raw.to_string(),
                            accepts_range(setting.min, setting.max),
                        )
                    })?;
                setting.target.apply(self, value);
            }
        }
        for setting in WORD_SETTINGS {
            // `null` leaves the setting as it was, as it always did.
            if let Some(raw) = object.remove(setting.key).filter(|raw| !raw.is_null()) {
                let text = match (setting.written, &raw) {
                    (Written::Text, serde_json::Value::String(text)) => Some(text.clone()),
                    (Written::Number, serde_json::Value::Number(n)) => {
                        n.as_f64().map(|n| n.to_string())
                    }
                    (Written::Bool, serde_json::Value::Bool(b)) => Some(b.to_string()),
                    _ => None,
                };
                text.and_then(|text| (setting.apply)(self, &text))
                    .ok_or_else(|| bad(setting.key, raw.to_string(), (setting.accepts)()))?;
            }
        }
        if let Some(key) = object.keys().find(|k| !FILE_KEYS.contains(&k.as_str())) {
            let known: Vec<&str> = number_settings()
                .map(|s| s.key)
                .chain(WORD_SETTINGS.iter().map(|s| s.key))
                .chain(FILE_KEYS.iter().copied())
                .collect();
            return Err(ConfigError::UnknownKey {
                path: path.to_path_buf(),
                key: key.clone(),
                suggestion: did_you_mean(key, &known)
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default(),
            });
        }
        // Read again from the text, so serde's errors keep their line and column.
        let file: ConfigFile = serde_json::from_str(text).map_err(|e| ConfigError::Mistyped {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        self.apply_completion(&file, scope, &bad)?;
        self.apply_worktree_setup(&file, scope, &bad)?;
        Ok(())
    }

    /// `worktreeSetup`, a project's only (no command runs in a project
    /// that did not ask for it), with a command and a deadline it accepts.
    fn apply_worktree_setup(
        &mut self,
        file: &ConfigFile,
        scope: Scope,
        bad: &dyn Fn(&'static str, String, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        let Some(entry) = &file.worktree_setup else {
            return Ok(());
        };
        if scope == Scope::User {
            return Err(bad(
                "worktreeSetup",
                "in the per-user defaults".into(),
                "a command only in a project's .claude/ralph/config.json, so no command runs in a \
                 project that did not ask for it"
                    .into(),
            ));
        }
        let (command, timeout_seconds) = match entry {
            WorktreeSetupEntry::Command(command) => {
                (command.clone(), DEFAULT_WORKTREE_SETUP_TIMEOUT_SECS)
            }
            WorktreeSetupEntry::Timed {
                command,
                timeout_seconds,
            } => (command.clone(), *timeout_seconds),
        };
        if command.trim().is_empty() {
            return Err(bad(
                "worktreeSetup",
                format!("{command:?}"),
                "a non-empty command (such as \"npm ci\"), or remove the key".into(),
            ));
        }
        if !(1..=VERIFY_TIMEOUT_LIMIT).contains(&timeout_seconds) {
            return Err(bad(
                "worktreeSetup",
                format!("timeoutSeconds {timeout_seconds}"),
                accepts_range(1, VERIFY_TIMEOUT_LIMIT),
            ));
        }
        self.worktree_setup = Some(VerifyCommand {
            name: "worktreeSetup".into(),
            command,
            timeout_seconds,
            // It installs the worktree's dependencies: it fetches.
            network: true,
        });
        Ok(())
    }

    /// The completion settings of a config file: the signal, the mode, plan
    /// files, verify commands (a project's only), confidence weights,
    /// `allowFewerTests` and `protectedPaths`.
    fn apply_completion(
        &mut self,
        file: &ConfigFile,
        scope: Scope,
        bad: &dyn Fn(&'static str, String, String) -> ConfigError,
    ) -> Result<(), ConfigError> {
        if let Some(files) = &file.plan_files {
            if files.iter().any(|f| f.trim().is_empty()) {
                return Err(bad(
                    "planFiles",
                    format!("{files:?}"),
                    "a list of non-empty paths".into(),
                ));
            }
            self.completion.plan_files = files.clone();
        }
        if let (Some(_), Scope::User) = (&file.verify, scope) {
            return Err(bad(
                "verify",
                "in the per-user defaults".into(),
                "verification commands only in a project's .claude/ralph/config.json, so no command runs in a project that did not ask for it".into(),
            ));
        }
        if let Some(commands) = &file.verify {
            for c in commands {
                if c.name.trim().is_empty() || c.command.trim().is_empty() {
                    return Err(bad(
                        "verify",
                        format!("{c:?}"),
                        "entries with a non-empty name and command".into(),
                    ));
                }
                if !(1..=VERIFY_TIMEOUT_LIMIT).contains(&c.timeout_seconds) {
                    return Err(bad(
                        "verify",
                        format!("timeoutSeconds {} of {:?}", c.timeout_seconds, c.name),
                        accepts_range(1, VERIFY_TIMEOUT_LIMIT),
                    ));
                }
            }
            self.completion.verify = commands.clone();
        }
        if let Some(weights) = &file.confidence {
            if weights.threshold == 0 {
                return Err(bad(
                    "confidence.threshold",
                    "0".into(),
                    "a whole number above 0".into(),
                ));
            }
            self.completion.weights = weights.clone();
        }
        if let Some(globs) = &file.protected_paths {
            if let Some(bad_glob) = globs.iter().find(|g| !valid_protected(g)) {
                return Err(bad(
                    "protectedPaths",
                    format!("{bad_glob:?}"),
                    PROTECTED_ACCEPTS.into(),
                ));
            }
            self.completion.protected_paths = globs.iter().map(|g| g.trim().to_string()).collect();
        }
        Ok(())
    }

    pub(super) fn apply_env(&mut self, env: &dyn EnvSource) -> Result<(), ConfigError> {
        // An empty variable counts as unset: `VAR= cmd` is how shells unset for one command.
        let read = |name: &'static str,
                    accepts: &dyn Fn() -> String|
         -> Result<Option<String>, ConfigError> {
            match env.get(name) {
                None => Ok(None),
                Some(Ok(v)) if v.is_empty() => Ok(None),
                Some(Ok(v)) => Ok(Some(v)),
                Some(Err(super::NotUtf8 { lossy })) => Err(ConfigError::BadEnv {
                    name,
                    value: lossy,
                    accepts: format!("{} (valid UTF-8)", accepts()),
                }),
            }
        };
        for setting in number_settings() {
            let accepts = || accepts_range(setting.min, setting.max);
            if let Some(v) = read(setting.env, &accepts)? {
                let value = v
                    .trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(|n| validate_range(n, setting.min, setting.max))
                    .ok_or(ConfigError::BadEnv {
                        name: setting.env,
                        value: v,
                        accepts: accepts(),
                    })?;
                setting.target.apply(self, value);
            }
        }
        for setting in WORD_SETTINGS {
            if let Some(v) = read(setting.env, &setting.accepts)? {
                (setting.apply)(self, &v).ok_or_else(|| ConfigError::BadEnv {
                    name: setting.env,
                    value: v.clone(),
                    accepts: (setting.accepts)(),
                })?;
            }
        }
        Ok(())
    }
}
