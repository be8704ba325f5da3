//! What the page's buttons do: `cancel`, `say` and `answer`, each the
//! command itself run on the chosen loop, its words returned to the page.

use ralph_core::judge::config::EnvSource;
use ralph_core::paths::ProjectPaths;
use serde::Deserialize;

use super::loops;
use crate::error::CtlError;

/// A change the page asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// `ralph-ctl cancel`.
    Cancel,
    /// `ralph-ctl say TEXT`.
    Say,
    /// `ralph-ctl answer TEXT`.
    Answer,
}

impl Action {
    /// The action a POST's path names (`/api/cancel`, …).
    pub(crate) fn of_path(path: &str) -> Option<Action> {
        match path {
            "/api/cancel" => Some(Action::Cancel),
            "/api/say" => Some(Action::Say),
            "/api/answer" => Some(Action::Answer),
            _ => None,
        }
    }
}

/// A POST's body: which loop, and the text of a note or an answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Asked {
    /// [`loops::LoopId::name`].
    #[serde(rename = "loop")]
    pub(crate) loop_name: String,
    /// The note or the answer (none for a cancel).
    #[serde(default)]
    pub(crate) text: String,
}

/// The longest body a POST may have: a note's bound, and room for JSON's escapes.
pub(crate) const MAX_BODY: usize = 6 * super::super::say::MAX_NOTE_BYTES;

/// Runs `action` as its command would, on the loop `asked` names; the
/// HTTP status and what the command said (or why it refused).
pub(crate) fn run(
    project: &ProjectPaths,
    action: Action,
    asked: &Asked,
    env: &dyn EnvSource,
) -> (u16, String) {
    let Some(id) = loops::find(project, &asked.loop_name) else {
        return (
            404,
            format!("no loop {:?} in this project", asked.loop_name),
        );
    };
    let paths = id.paths(project);
    let words = [asked.text.clone()];
    let mut said = Vec::new();
    let result = match action {
        Action::Cancel => {
            super::super::cancel::run(&paths, super::super::cancel::Reader::Person, &mut said)
        }
        Action::Say => super::super::say::run(&paths, &words, &mut said),
        Action::Answer => super::super::answer::run(&paths, &words, env, &mut said),
    };
    let said = String::from_utf8_lossy(&said).trim().to_string();
    match result {
        Ok(_) => (200, said),
        Err(e) => {
            let status = match &e {
                CtlError::Refused(_) => 409,
                CtlError::BadArgument(_) => 400,
                _ => 500,
            };
            (status, e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_ENV: [(&str, &str); 0] = [];

    fn asked(name: &str, text: &str) -> Asked {
        Asked {
            loop_name: name.into(),
            text: text.into(),
        }
    }

    #[test]
    fn the_paths_name_the_actions() {
        assert_eq!(Action::of_path("/api/cancel"), Some(Action::Cancel));
        assert_eq!(Action::of_path("/api/say"), Some(Action::Say));
        assert_eq!(Action::of_path("/api/answer"), Some(Action::Answer));
        assert_eq!(Action::of_path("/api/reset"), None);
    }

    #[test]
    fn an_unknown_loop_is_not_found_and_nothing_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectPaths::new(dir.path());
        let (status, said) = run(&project, Action::Cancel, &asked("item:../x", ""), &NO_ENV);
        assert_eq!(status, 404, "{said}");
        assert!(!project.runtime_dir().exists());
    }

    #[test]
    fn a_note_to_no_loop_is_refused_as_say_refuses_it() {
        let dir = tempfile::tempdir().unwrap();
        let project = ProjectPaths::new(dir.path());
        let (status, said) = run(&project, Action::Say, &asked("main", "hi"), &NO_ENV);
        assert_eq!(status, 409, "{said}");
        assert!(said.contains("nothing to say to"), "{said}");
        let (status, said) = run(&project, Action::Say, &asked("main", " "), &NO_ENV);
        assert_eq!(status, 400, "{said}");
    }
}
