use super::*;

#[test]
fn every_setting_has_one_key_one_variable_and_is_listed() {
    let keys: Vec<(&str, &str)> = number_settings()
        .map(|s| (s.key, s.env))
        .chain(WORD_SETTINGS.iter().map(|s| (s.key, s.env)))
        .collect();
    let mut names: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
    let mut vars: Vec<&str> = keys.iter().map(|(_, v)| *v).collect();
    names.sort_unstable();
    vars.sort_unstable();
    let (n, v) = (names.len(), vars.len());
    names.dedup();
    vars.dedup();
    assert_eq!((names.len(), vars.len()), (n, v), "{keys:?}");
    let listed = accepted_keys();
    for (key, var) in &keys {
        assert!(listed.contains(key), "{key} ({var}) not in {listed}");
    }
    // `null` leaves a word setting as it was.
    let mut config = Config::default();
    config
        .apply_text(
            Path::new("c.json"),
            r#"{"notify": null, "maxCostUsd": null, "sandbox": null}"#,
            Scope::Project,
        )
        .unwrap();
    assert_eq!(config, Config::default());
    // Read from the file and the environment through the same entry.
    for setting in WORD_SETTINGS {
        let file = format!(
            "{{\"{}\": {}}}",
            setting.key,
            match setting.written {
                Written::Text => "\"?\"",
                Written::Number => "-1",
                Written::Bool => "\"yes\"",
            }
        );
        let mut config = Config::default();
        let from_file = config.apply_text(Path::new("c.json"), &file, Scope::Project);
        let from_env = Config::default().apply_env(&[(setting.env, "-1?")]);
        match setting.key {
            // Any text is a command; a signal may be any word.
            "notify" | "completionSignal" | "promptFile" => {}
            _ => {
                assert!(
                    matches!(from_file, Err(ConfigError::BadKey { key, .. }) if key == setting.key),
                    "{file}"
                );
                assert!(
                    matches!(from_env, Err(ConfigError::BadEnv { name, .. }) if name == setting.env),
                    "{}",
                    setting.env
                );
            }
        }
    }
}
use std::fs;

fn project_with_config(json: Option<&str>) -> (tempfile::TempDir, ProjectPaths) {
    let dir = tempfile::TempDir::new().unwrap();
    let paths = ProjectPaths::new(dir.path());
    if let Some(json) = json {
        fs::create_dir_all(paths.ralph_dir()).unwrap();
        fs::write(paths.config_file(), json).unwrap();
    }
    (dir, paths)
}

/// An environment with a per-user config folder.
struct WithUserDir(PathBuf, Vec<(&'static str, &'static str)>);

impl EnvSource for WithUserDir {
    fn get(&self, name: &str) -> Option<Result<String, NotUtf8>> {
        self.1
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| Ok((*v).to_string()))
    }
    fn user_config_dir(&self) -> Option<PathBuf> {
        Some(self.0.clone())
    }
}

#[test]
fn user_defaults_sit_below_the_project_config_and_the_environment() {
    let (_d, paths) = project_with_config(Some(r#"{"maxIterations": 7}"#));
    let user = tempfile::TempDir::new().unwrap();
    fs::create_dir_all(user.path().join("ralph")).unwrap();
    let file = user.path().join(USER_CONFIG_FILE);
    fs::write(
        &file,
        r#"{"maxIterations": 40, "completionMode": "dual", "breakerPatience": 4}"#,
    )
    .unwrap();
    let c = Config::load(&paths, &WithUserDir(user.path().into(), vec![])).unwrap();
    assert_eq!(c.max_iterations, 7, "the project's file wins");
    assert_eq!(
        c.completion.mode,
        CompletionMode::Dual,
        "the user's default applies"
    );
    assert_eq!(c.breaker.patience, 4);
    let env = WithUserDir(user.path().into(), vec![(env::PATIENCE, "2")]);
    assert_eq!(Config::load(&paths, &env).unwrap().breaker.patience, 2);

    fs::write(&file, r#"{"verify": [{"name": "t", "command": "true"}]}"#).unwrap();
    let err = Config::load(&paths, &WithUserDir(user.path().into(), vec![]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("verify") && err.contains(&file.display().to_string()),
        "{err}"
    );
    fs::write(&file, r#"{"maxIterations": 0}"#).unwrap();
    let err = Config::load(&paths, &WithUserDir(user.path().into(), vec![]))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&file.display().to_string()), "{err}");
}

#[test]
fn worktree_setup_is_a_command_with_a_deadline_from_the_project_only() {
    let setup = |json: &str| {
        let (_d, paths) = project_with_config(Some(json));
        Config::load(&paths, &[]).map(|c| c.worktree_setup)
    };
    let plain = setup(r#"{"worktreeSetup": "npm ci"}"#).unwrap().unwrap();
    assert_eq!(
        (
            plain.name.as_str(),
            plain.command.as_str(),
            plain.timeout_seconds
        ),
        (
            "worktreeSetup",
            "npm ci",
            DEFAULT_WORKTREE_SETUP_TIMEOUT_SECS
        )
    );
    let timed =
        setup(r#"{"worktreeSetup": {"command": "uv sync --frozen", "timeoutSeconds": 90}}"#)
            .unwrap()
            .unwrap();
    assert_eq!(timed.timeout_seconds, 90);
    assert_eq!(setup("{}").unwrap(), None);
    for (json, words) in [
        (r#"{"worktreeSetup": " "}"#, "non-empty command"),
        (
            r#"{"worktreeSetup": {"command": "x", "timeoutSeconds": 0}}"#,
            "from 1 to 3600",
        ),
        (r#"{"worktreeSetup": 3}"#, "worktreeSetup (a command"),
    ] {
        let err = setup(json).unwrap_err().to_string();
        assert!(
            err.contains("worktreeSetup") && err.contains(words),
            "{json}: {err}"
        );
    }
    let (_d, paths) = project_with_config(None);
    let user = tempfile::TempDir::new().unwrap();
    fs::create_dir_all(user.path().join("ralph")).unwrap();
    fs::write(
        user.path().join(USER_CONFIG_FILE),
        r#"{"worktreeSetup": "npm ci"}"#,
    )
    .unwrap();
    let err = Config::load(&paths, &WithUserDir(user.path().into(), vec![]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("worktreeSetup") && err.contains("per-user"),
        "{err}"
    );
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
    assert_eq!(from_file.breaker.threshold(Signal::FindingsStuck), 4);
    assert_eq!(from_file.prompt_file, PathBuf::from("p.md"));
    let env = [
        (env::MAX_ITERATIONS, "12"),
        (env::COMPLETION_SIGNAL, " ENV_DONE "),
    ];
    let both = Config::load(&paths, &env).unwrap();
    assert_eq!(both.max_iterations, 12);
    assert_eq!(both.completion_signal, "ENV_DONE");
    assert_eq!(both.breaker.threshold(Signal::FindingsStuck), 4);
}

#[test]
fn pause_at_utilization_is_a_share_from_the_file_or_the_env() {
    let (_d, paths) = project_with_config(Some(r#"{"pauseAtUtilization": 0.8}"#));
    let c = Config::load(&paths, &[]).unwrap();
    assert_eq!(c.supervision.pause_at_utilization, Some(PerMille(800)));
    let env = [(env::PAUSE_AT_UTILIZATION, " 0.855 ")];
    let c = Config::load(&paths, &env).unwrap();
    assert_eq!(c.supervision.pause_at_utilization, Some(PerMille(855)));
    assert_eq!(PerMille(855).percent(), "85.5%");
    for bad in ["0", "1.5", "-0.2", "80%", "NaN"] {
        let err = Config::load(&paths, &[(env::PAUSE_AT_UTILIZATION, bad)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("RALPH_PAUSE_AT_UTILIZATION") && err.contains("such as 0.8"),
            "{bad}: {err}"
        );
    }
    let (_d, paths) = project_with_config(Some(r#"{"pauseAtUtilization": 80}"#));
    let err = Config::load(&paths, &[]).unwrap_err().to_string();
    assert!(
        err.contains("pauseAtUtilization") && err.contains("at most 1"),
        "{err}"
    );
}

#[test]
fn sandbox_from_file_and_env_with_the_env_winning() {
    let (_d, paths) = project_with_config(None);
    assert_eq!(
        Config::load(&paths, &[]).unwrap().sandbox,
        SandboxSetting::Auto
    );
    let (_d, paths) = project_with_config(Some(r#"{"sandbox": "off"}"#));
    assert_eq!(
        Config::load(&paths, &[]).unwrap().sandbox,
        SandboxSetting::Off
    );
    let env = [(env::SANDBOX, " ON ")];
    assert_eq!(
        Config::load(&paths, &env).unwrap().sandbox,
        SandboxSetting::On
    );
    let err = Config::load(&paths, &[(env::SANDBOX, "yes")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("RALPH_SANDBOX") && err.contains("auto, on or off"),
        "{err}"
    );
    let (_d, paths) = project_with_config(Some(r#"{"sandbox": true}"#));
    let err = Config::load(&paths, &[]).unwrap_err().to_string();
    assert!(err.contains("sandbox"), "{err}");
}

#[test]
fn context_mode_and_iteration_budget_from_file_and_env() {
    let (_d, paths) = project_with_config(Some(
        r#"{"contextMode": "fresh", "iterationBudgetUsd": 0.5}"#,
    ));
    let from_file = Config::load(&paths, &[]).unwrap();
    assert_eq!(from_file.context_mode, ContextMode::Fresh);
    assert_eq!(from_file.iteration_budget, Some(Usd::from_dollars(0.5)));
    let env = [
        (env::CONTEXT_MODE, " Session "),
        (env::ITERATION_BUDGET_USD, "2"),
    ];
    let both = Config::load(&paths, &env).unwrap();
    assert_eq!(both.context_mode, ContextMode::Session);
    assert_eq!(both.iteration_budget, Some(Usd::from_dollars(2.0)));
    let err = Config::load(&paths, &[(env::CONTEXT_MODE, "new")])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("RALPH_CONTEXT_MODE") && err.contains("session or fresh"),
        "{err}"
    );
    let (_d, paths) = project_with_config(Some(r#"{"contextMode": "fres"}"#));
    let err = Config::load(&paths, &[]).unwrap_err().to_string();
    assert!(
        err.contains("contextMode") && err.contains("session or fresh"),
        "{err}"
    );
    let (_d, paths) = project_with_config(Some(r#"{"iterationBudgetUsd": -1}"#));
    assert!(Config::load(&paths, &[]).is_err());
}

#[test]
fn the_idle_timeout_is_off_unless_set_and_zero_turns_it_off() {
    let (_d, paths) = project_with_config(Some(r#"{"idleTimeoutSeconds": 600}"#));
    assert_eq!(Config::default().idle_timeout_seconds, None);
    assert_eq!(
        Config::load(&paths, &[]).unwrap().idle_timeout_seconds,
        Some(600)
    );
    let off = Config::load(&paths, &[(env::IDLE_TIMEOUT_SECONDS, "0")]).unwrap();
    assert_eq!(off.idle_timeout_seconds, None);
    let err = Config::load(&paths, &[(env::IDLE_TIMEOUT_SECONDS, "soon")])
        .unwrap_err()
        .to_string();
    assert!(err.contains("RALPH_IDLE_TIMEOUT_SECONDS"), "{err}");
}

#[test]
fn breaker_settings_from_file_and_env() {
    let (_d, paths) = project_with_config(Some(
        r#"{"noProgressThreshold": 4, "sameErrorThreshold": 6, "outputDeclineThreshold": 50,
            "tddStuckThreshold": 5, "sameRejectedClaimThreshold": 2, "breakerPatience": 3, "cooldownMinutes": 30}"#,
    ));
    let c = Config::load(&paths, &[]).unwrap();
    assert_eq!(
        c.breaker,
        BreakerConfig {
            patience: 3,
            ..BreakerConfig::default()
        }
        .with(Signal::NoProgress, 4)
        .with(Signal::SameError, 6)
        .with(Signal::OutputDecline, 50)
        .with(Signal::TddStuck, 5)
        .with(Signal::SameRejectedClaim, 2)
    );
    assert_eq!(c.cooldown_minutes, Some(30));
    let env = [
        ("CB_NO_PROGRESS_THRESHOLD", "2"),
        (env::COOLDOWN_MINUTES, "0"),
        (env::PATIENCE, "1"),
    ];
    let c = Config::load(&paths, &env).unwrap();
    assert_eq!(
        (
            c.breaker.threshold(Signal::NoProgress),
            c.breaker.patience,
            c.cooldown_minutes
        ),
        (2, 1, None)
    );
}

#[test]
fn completion_settings() {
    let (_d, paths) = project_with_config(Some(
        r#"{"completionMode": "confidence", "planFiles": ["PLAN.md"],
            "verify": [{"name": "tests", "command": "cargo test", "timeoutSeconds": 120}, {"name": "lint", "command": "cargo clippy"}],
            "confidence": {"threshold": 80, "planComplete": 30}}"#,
    ));
    let c = Config::load(&paths, &[]).unwrap();
    assert_eq!(c.completion.mode, CompletionMode::Confidence);
    assert_eq!(c.completion.plan_files, vec!["PLAN.md".to_string()]);
    assert_eq!(c.completion.verify.len(), 2);
    assert_eq!(c.completion.verify[0].timeout_seconds, 120);
    assert_eq!(
        c.completion.verify[1].timeout_seconds,
        crate::observe::verify::DEFAULT_TIMEOUT_SECS
    );
    assert_eq!(c.completion.weights.threshold, 80);
    assert_eq!(c.completion.weights.plan_complete, 30);
    assert_eq!(
        c.completion.weights.status_block_exit, 50,
        "unset weights keep their default"
    );
    let c = Config::load(&paths, &[(env::COMPLETION_MODE, "Dual")]).unwrap();
    assert_eq!(c.completion.mode, CompletionMode::Dual);
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
    let cases: [(&str, &str); 15] = [
        (env::COMPLETION_MODE, "lenient"),
        (env::ALLOW_FEWER_TESTS, "sometimes"),
        ("CB_NO_PROGRESS_THRESHOLD", "0"),
        ("CB_OUTPUT_DECLINE_THRESHOLD", "100"),
        (env::PATIENCE, "soon"),
        (env::COOLDOWN_MINUTES, "-5"),
        (env::MAX_ITERATIONS, "abc"),
        (env::MAX_ITERATIONS, "0"),
        (env::MAX_ITERATIONS, "-3"),
        (env::MAX_ITERATIONS, "2.5"),
        (env::MAX_ITERATIONS, "100001"),
        ("RALPH_CIRCUIT_BREAKER_THRESHOLD", "zero"),
        ("RALPH_CIRCUIT_BREAKER_THRESHOLD", "0"),
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
        (
            r#"{"maxIteration": 5}"#,
            "unknown key `maxIteration` (did you mean `maxIterations`?)",
        ),
        (
            r#"{"sameRejectedClaimThreshhold": 5}"#,
            "did you mean `sameRejectedClaimThreshold`?",
        ),
        (r#"{"colour": 5}"#, "unknown key `colour`; accepted keys"),
        (r#"{"allowFewerTests": "yes"}"#, "config.json"),
        (r#"{"protectedPaths": ["../x"]}"#, "protectedPaths"),
        (r#"{"protectedPaths": ["/etc"]}"#, "protectedPaths"),
        (r#"{"protectedPaths": [" "]}"#, "protectedPaths"),
        (r#"{"protectedPaths": "tests"}"#, "config.json"),
        (r#"{"maxIterations": 5"#, "config.json"),
        ("[]", "config.json"),
        ("", "config.json"),
    ];
    for (json, needle) in cases {
        let (_d, paths) = project_with_config(Some(json));
        let err = Config::load(&paths, &[]).unwrap_err().to_string();
        assert!(err.contains(needle), "{json}: {err}");
    }
    let big = format!(
        "{{{}}}",
        " ".repeat(usize::try_from(MAX_CONFIG_BYTES).unwrap())
    );
    let (_d, paths) = project_with_config(Some(&big));
    let err = Config::load(&paths, &[]).unwrap_err();
    assert!(matches!(err, ConfigError::TooLarge { .. }), "{err}");
    let (_d, paths) = project_with_config(Some("{}"));
    fs::write(paths.config_file(), b"{\xff}").unwrap();
    let err = Config::load(&paths, &[]).unwrap_err().to_string();
    assert!(err.contains("not contain valid UTF-8"), "{err}");
}

#[test]
fn integrity_keys_from_the_file_and_the_environment() {
    let (_d, paths) = project_with_config(Some(
        r#"{"allowFewerTests": true, "protectedPaths": ["tests", " *_test.go "]}"#,
    ));
    let config = Config::load(&paths, &[]).unwrap();
    assert!(config.completion.allow_fewer_tests);
    assert_eq!(config.completion.protected_paths, ["tests", "*_test.go"]);
    let off = Config::load(&paths, &[(env::ALLOW_FEWER_TESTS, "FALSE")]).unwrap();
    assert!(!off.completion.allow_fewer_tests);
    let (_d, paths) = project_with_config(None);
    assert!(
        !Config::load(&paths, &[])
            .unwrap()
            .completion
            .allow_fewer_tests
    );
    let on = Config::load(&paths, &[(env::ALLOW_FEWER_TESTS, "1")]).unwrap();
    assert!(on.completion.allow_fewer_tests);
}
