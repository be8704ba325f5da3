//! Where ralph's files live inside a user's project.
//!
//! The layout is compatible with the agent-studio layout: everything the
//! person edits sits in `.claude/ralph/`, the loop's state in
//! `.claude/context/runtime/`.

use std::path::{Path, PathBuf};

/// Folder (relative to the project root) holding PROMPT.md, guardrails.md,
/// config.json and the launchers.
pub const RALPH_DIR: &str = ".claude/ralph";
/// Default prompt file, relative to the project root.
pub const DEFAULT_PROMPT_FILE: &str = ".claude/ralph/PROMPT.md";
/// Folder (relative to the project root) holding the loop's state.
pub const RUNTIME_DIR: &str = ".claude/context/runtime";
/// File name of the loop's state inside [`RUNTIME_DIR`].
pub const STATE_FILE_NAME: &str = "ralph-state.json";

/// The absolute locations of ralph's files for one project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectPaths {
    /// The project root: `CLAUDE_PROJECT_DIR`, the hook input's `cwd`, or the folder `ralph-ctl` runs in.
    pub root: PathBuf,
    /// The folder of this loop's state, when not the project's own
    /// (a backlog item's loop: [`ProjectPaths::for_item`]).
    runtime: Option<PathBuf>,
}

/// Folder (inside [`RUNTIME_DIR`]) holding the loops of a backlog's items.
pub const QUEUE_DIR: &str = "queue";

impl ProjectPaths {
    /// Paths for the project rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ProjectPaths {
            root: root.into(),
            runtime: None,
        }
    }

    /// The same project, with the state, log and locks of the loop that
    /// works backlog item `slug` (`.claude/context/runtime/queue/<slug>/`):
    /// each item of a queue run is a loop of its own, with the project's
    /// config, prompt and guardrails.
    pub fn for_item(&self, slug: &str) -> ProjectPaths {
        ProjectPaths {
            root: self.root.clone(),
            runtime: Some(self.root.join(RUNTIME_DIR).join(QUEUE_DIR).join(slug)),
        }
    }

    /// Whether these are a backlog item's loop's paths.
    pub fn is_item(&self) -> bool {
        self.runtime.is_some()
    }

    /// The project's own paths (its loop's state), from an item's.
    pub fn project(&self) -> ProjectPaths {
        ProjectPaths::new(self.root.clone())
    }

    /// `.claude/ralph/`.
    pub fn ralph_dir(&self) -> PathBuf {
        self.root.join(RALPH_DIR)
    }

    /// `.claude/ralph/config.json` (optional).
    pub fn config_file(&self) -> PathBuf {
        self.ralph_dir().join("config.json")
    }

    /// `.claude/ralph/guardrails.md` (optional), appended to every re-injected prompt.
    pub fn guardrails_file(&self) -> PathBuf {
        self.ralph_dir().join("guardrails.md")
    }

    /// `.claude/context/runtime/` (an item's loop: its folder under `queue/`).
    pub fn runtime_dir(&self) -> PathBuf {
        match &self.runtime {
            Some(folder) => folder.clone(),
            None => self.root.join(RUNTIME_DIR),
        }
    }

    /// `.claude/context/runtime/ralph-state.json`.
    pub fn state_file(&self) -> PathBuf {
        self.runtime_dir().join(STATE_FILE_NAME)
    }

    /// `.claude/settings.json`, where the Stop hook is registered.
    pub fn settings_file(&self) -> PathBuf {
        self.root.join(".claude").join("settings.json")
    }

    /// `.claude/settings.local.json`: the person's own settings (not
    /// committed), where `ralph-ctl init --local` registers the hook.
    pub fn local_settings_file(&self) -> PathBuf {
        self.root.join(".claude").join("settings.local.json")
    }

    /// Resolves a configured path: relative paths are taken from the project root.
    pub fn resolve(&self, configured: &Path) -> PathBuf {
        if configured.is_absolute() {
            configured.to_path_buf()
        } else {
            self.root.join(configured)
        }
    }
}
/// `path` with its `.` and `..` taken away by its text alone, without
/// touching the disk (what it names may be gone, or not be looked at).
pub fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}
