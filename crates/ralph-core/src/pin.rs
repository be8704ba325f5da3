//! What judges a loop is fixed when it starts: the config files' texts (and
//! a formula run's formula) are pinned in the loop's state, and every stop
//! decides by the pin, never by the files as they are now. The agent can
//! write every file of the project, config.json included; a change made
//! mid-loop is detected (by content), logged once per new content and
//! shown by `ralph-ctl status`, and only `ralph-ctl reload` adopts it.
//!
//! Environment variables are the person's (the launcher's, through the
//! client) and keep applying on top of the pin.
//!
//! A loop whose state predates pinning has no pin: its first stop pins the
//! config files as that stop reads them.

use std::path::Path;

use crate::judge::config::USER_CONFIG_FILE;
use crate::judge::config::{Config, ConfigError, EnvSource, FileLayers, read_config_text};
use crate::judge::state::LoopState;
use crate::paths::ProjectPaths;

pub use crate::judge::state::{Changed, ConfigDrift, Pinned, PinnedFormula};

/// The content digest used for pins and drift: FNV-1a, 64 bits, in hex.
/// It names contents for people and the log; whether a file differs from
/// its pin is decided on the whole text, never on the digest alone.
pub fn digest(bytes: &[u8]) -> String {
    crate::fnv::hex(bytes)
}

/// The digest of both config files' texts (a missing file counts as such).
pub fn layers_digest(layers: &FileLayers) -> String {
    let mut all = Vec::new();
    for text in [&layers.user, &layers.project] {
        match text {
            Some(text) => {
                all.push(1u8);
                all.extend_from_slice(&(text.len() as u64).to_le_bytes());
                all.extend_from_slice(text.as_bytes());
            }
            None => all.push(0),
        }
    }
    digest(&all)
}

impl PinnedFormula {
    /// Pins `content`, the checked formula `name` read from `file`.
    pub fn new(name: &str, file: &str, content: serde_json::Value) -> PinnedFormula {
        PinnedFormula {
            name: name.to_string(),
            file: file.to_string(),
            digest: digest(content.to_string().as_bytes()),
            content,
        }
    }
}

impl Pinned {
    /// The pin of the config files' texts `layers`, taken at `at`.
    pub fn of(layers: &FileLayers, at: crate::time::Timestamp) -> Pinned {
        Pinned {
            config_digest: layers_digest(layers),
            config: layers.project.clone(),
            user_config: layers.user.clone(),
            formula: None,
            at,
        }
    }

    /// The pinned texts.
    pub fn layers(&self) -> FileLayers {
        FileLayers {
            user: self.user_config.clone(),
            project: self.config.clone(),
        }
    }

    /// The configuration the pin stands for, with the environment on top.
    pub fn config(&self, paths: &ProjectPaths, env: &dyn EnvSource) -> Result<Config, ConfigError> {
        Config::from_layers(paths, env, &self.layers())
    }
}

/// The configuration that decides `state`'s loop: its pin, or, for a loop
/// that predates pinning, the files as they are now.
pub fn loop_config(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    state: &LoopState,
) -> Result<Config, ConfigError> {
    match &state.pinned {
        Some(pin) => pin.config(paths, env),
        None => Config::load(paths, env),
    }
}

/// What `status` and the log say of a drift, with the fix.
pub const DRIFT_FIX: &str = "not obeyed. `ralph-ctl reload` adopts it";

impl ConfigDrift {
    /// The drift of `files` (none when empty), seen at `at`.
    pub fn of(files: Vec<Changed>, at: crate::time::Timestamp) -> Option<ConfigDrift> {
        if files.is_empty() {
            return None;
        }
        let joined: Vec<String> = files
            .iter()
            .map(|f| format!("{}\0{}", f.file, f.digest))
            .collect();
        Some(ConfigDrift {
            digest: digest(joined.join("\0").as_bytes()),
            seen_at: at,
            files,
        })
    }

    /// One line: what changed, that it is not obeyed, and the fix; a
    /// content that cannot be used says why.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.files.iter().map(|f| f.file.as_str()).collect();
        let mut line = format!(
            "{} changed since the loop started; {DRIFT_FIX}",
            names.join(" and ")
        );
        for problem in self.files.iter().filter_map(|f| f.problem.as_deref()) {
            line.push_str(&format!(" (it cannot be used as it is: {problem})"));
        }
        line
    }
}

/// A file's name as shown: relative to the project's root when inside it.
fn shown(paths: &ProjectPaths, path: &Path) -> String {
    path.strip_prefix(&paths.root)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A file's problem as it is kept and shown (status, the hook's warning,
/// the log): the file is the agent's to write, so its text (an unknown key
/// echoed back) is one line of at most 300 characters, control characters
/// made visible ([`crate::text::printable`]).
fn shown_problem(problem: &str) -> String {
    crate::judge::state::one_line(&crate::text::printable(problem), 300)
}

/// The config files that differ from `pin` now (compared on their whole
/// text). A file that cannot be read or used now is a change with its
/// problem, never an error: the pin goes on deciding.
pub fn config_changes(paths: &ProjectPaths, env: &dyn EnvSource, pin: &Pinned) -> Vec<Changed> {
    let user_path = env.user_config_dir().map(|d| d.join(USER_CONFIG_FILE));
    let project_path = paths.config_file();
    let mut now = pin.layers();
    let mut changes = Vec::new();
    let sources = [
        (user_path.as_deref(), &pin.user_config, true),
        (Some(project_path.as_path()), &pin.config, false),
    ];
    for (path, pinned, user) in sources {
        let Some(path) = path else { continue };
        let (text, digest_now, problem) = match read_config_text(path) {
            Ok(text) if text == *pinned => continue,
            Ok(Some(text)) => {
                let d = digest(text.as_bytes());
                (Some(text), d, None)
            }
            Ok(None) => (None, "missing".to_string(), None),
            Err(e) => (
                None,
                "unreadable".to_string(),
                Some(shown_problem(&e.to_string())),
            ),
        };
        if problem.is_none() {
            if user {
                now.user = text;
            } else {
                now.project = text;
            }
        }
        changes.push(Changed {
            file: shown(paths, path),
            digest: digest_now,
            problem,
        });
    }
    if !changes.is_empty()
        && changes.iter().all(|c| c.problem.is_none())
        && let Err(e) = Config::from_layers(paths, env, &now)
        && let Some(last) = changes.last_mut()
    {
        last.problem = Some(shown_problem(&e.to_string()));
    }
    changes
}

/// Records `changes` (what differs from the pin now) in `state` at `at`:
/// the drift is set when its content is new (and `Some` of the log line to
/// write is returned, once per new content), kept when it is the same, and
/// cleared when nothing differs any more.
pub fn record_drift(
    state: &mut LoopState,
    changes: Vec<Changed>,
    at: crate::time::Timestamp,
) -> Option<String> {
    match ConfigDrift::of(changes, at) {
        None => {
            state.config_drift = None;
            None
        }
        Some(drift) => {
            if state
                .config_drift
                .as_ref()
                .is_some_and(|d| d.digest == drift.digest)
            {
                return None;
            }
            let line = drift.describe();
            state.config_drift = Some(drift);
            Some(line)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[allow(unused_imports)]
    use crate::time::Timestamp;

    #[test]
    fn a_files_problem_is_one_short_line_without_control_characters() {
        let shown = shown_problem(&format!("unknown key \u{1b}[31m{}\nnext", "k".repeat(5000)));
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\n'),
            "{shown}"
        );
        assert!(shown.chars().count() <= 301, "{}", shown.len());
        assert!(shown.starts_with("unknown key \\x1b[31m"), "{shown}");
    }
    use tempfile::TempDir;

    fn project() -> (TempDir, ProjectPaths) {
        let dir = TempDir::new().unwrap();
        let paths = ProjectPaths::new(dir.path().to_path_buf());
        std::fs::create_dir_all(paths.config_file().parent().unwrap()).unwrap();
        (dir, paths)
    }

    fn write(paths: &ProjectPaths, text: &str) {
        std::fs::write(paths.config_file(), text).unwrap();
    }

    fn pin_now(paths: &ProjectPaths) -> Pinned {
        Pinned::of(
            &FileLayers::read(paths, &[]).unwrap(),
            Timestamp::from_secs(0),
        )
    }

    #[test]
    fn the_digest_is_fnv1a_and_tells_contents_apart() {
        assert_eq!(digest(b""), "cbf29ce484222325");
        assert_eq!(digest(b"a"), "af63dc4c8601ec8c");
        let a = FileLayers {
            user: None,
            project: Some("{}".into()),
        };
        let b = FileLayers {
            user: Some("{}".into()),
            project: None,
        };
        assert_ne!(layers_digest(&a), layers_digest(&b));
        assert_ne!(layers_digest(&a), layers_digest(&FileLayers::default()));
    }

    #[test]
    fn the_pin_decides_whatever_the_file_says_now() {
        let (_dir, paths) = project();
        write(
            &paths,
            r#"{"maxIterations": 7, "verify": [{"name": "t", "command": "false"}]}"#,
        );
        let pin = pin_now(&paths);
        write(
            &paths,
            r#"{"maxIterations": 9, "verify": [{"name": "t", "command": "true"}]}"#,
        );
        let config = pin.config(&paths, &[]).unwrap();
        assert_eq!(config.max_iterations, 7);
        assert_eq!(config.completion.verify[0].command, "false");
        // The environment is the person's: it applies on top of the pin.
        let config = pin
            .config(&paths, &[(crate::judge::config::env::MAX_ITERATIONS, "3")])
            .unwrap();
        assert_eq!(config.max_iterations, 3);
    }

    #[test]
    fn changes_are_found_by_content_with_what_is_wrong() {
        let (_dir, paths) = project();
        // (pinned, now, changed?, a problem?)
        type Case<'a> = (Option<&'a str>, Option<&'a str>, bool, bool);
        let cases: &[Case] = &[
            (Some("{}"), Some("{}"), false, false),
            (None, None, false, false),
            (Some("{}"), Some("{ }"), true, false),
            (None, Some(r#"{"notify": "x"}"#), true, false),
            (Some("{}"), None, true, false),
            (Some("{}"), Some("{not json"), true, true),
            (Some("{}"), Some(r#"{"maxIterations": 0}"#), true, true),
            (Some("{}"), Some(r#"{"verfy": []}"#), true, true),
        ];
        for (pinned, now, changed, problem) in cases {
            let _ = std::fs::remove_file(paths.config_file());
            if let Some(text) = pinned {
                write(&paths, text);
            }
            let pin = pin_now(&paths);
            let _ = std::fs::remove_file(paths.config_file());
            if let Some(text) = now {
                write(&paths, text);
            }
            let changes = config_changes(&paths, &[], &pin);
            assert_eq!(!changes.is_empty(), *changed, "{pinned:?} → {now:?}");
            if let Some(change) = changes.first() {
                assert_eq!(change.file, ".claude/ralph/config.json");
                let expected = now.map_or("missing".to_string(), |t| digest(t.as_bytes()));
                assert_eq!(change.digest, expected);
                assert_eq!(change.problem.is_some(), *problem, "{now:?}: {change:?}");
            }
        }
    }

    #[test]
    fn a_drift_is_recorded_once_per_content_and_cleared_when_gone() {
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        let change = |d: &str| Changed {
            file: ".claude/ralph/config.json".into(),
            digest: d.into(),
            problem: None,
        };
        let line = record_drift(&mut state, vec![change("a")], Timestamp::from_secs(1)).unwrap();
        assert_eq!(
            line,
            ".claude/ralph/config.json changed since the loop started; not obeyed. `ralph-ctl reload` adopts it"
        );
        assert_eq!(
            state.config_drift.as_ref().unwrap().seen_at,
            Timestamp::from_secs(1)
        );
        // The same content again: nothing new to log, first seen kept.
        assert_eq!(
            record_drift(&mut state, vec![change("a")], Timestamp::from_secs(2)),
            None
        );
        assert_eq!(
            state.config_drift.as_ref().unwrap().seen_at,
            Timestamp::from_secs(1)
        );
        // Other content: logged again.
        assert!(record_drift(&mut state, vec![change("b")], Timestamp::from_secs(3)).is_some());
        assert_eq!(
            state.config_drift.as_ref().unwrap().seen_at,
            Timestamp::from_secs(3)
        );
        // Back to the pin: no drift.
        assert_eq!(
            record_drift(&mut state, vec![], Timestamp::from_secs(4)),
            None
        );
        assert_eq!(state.config_drift, None);
    }

    #[test]
    fn a_state_without_a_pin_reads_and_a_pinned_one_round_trips() {
        let (_dir, paths) = project();
        write(&paths, r#"{"maxIterations": 4}"#);
        let mut state = LoopState::new("s".into(), 5, Timestamp::from_secs(0));
        let json = serde_json::to_string(&state).unwrap();
        assert!(!json.contains("pinned"), "{json}");
        let old: LoopState = serde_json::from_str(&json).unwrap();
        assert_eq!(old.pinned, None);
        assert_eq!(loop_config(&paths, &[], &old).unwrap().max_iterations, 4);
        state.pinned = Some(pin_now(&paths));
        write(&paths, r#"{"maxIterations": 8}"#);
        let json = serde_json::to_string(&state).unwrap();
        assert!(json.contains(r#""pinned":{"configDigest":"#), "{json}");
        let back: LoopState = serde_json::from_str(&json).unwrap();
        assert_eq!(back, state);
        assert_eq!(loop_config(&paths, &[], &back).unwrap().max_iterations, 4);
    }
}
