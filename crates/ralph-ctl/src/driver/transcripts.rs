//! Where the client keeps a session's transcript, and what a run left in
//! it that no stop counted. A leaf: the drivers and `liveness` read
//! through it, so none of them needs another for it.

use std::path::{Path, PathBuf};

use ralph_core::judge::state::LoopState;
use ralph_core::observe::usage::{self, UsageReading};
use ralph_core::paths::ProjectPaths;

/// Seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The client's configuration folder: `$CLAUDE_CONFIG_DIR`, else `~/.claude`.
fn client_config_dir() -> Option<PathBuf> {
    std::env::var_os("CLAUDE_CONFIG_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| PathBuf::from(h).join(".claude"))
        })
}

/// The transcript the client wrote for `session`: Claude Code keeps each
/// session in `<config>/projects/<the folder, mangled>/<session>.jsonl`;
/// the folder's name is looked for rather than rebuilt, so a change of the
/// mangling rule cannot lose it.
pub(crate) fn of_session(session: &str) -> Option<PathBuf> {
    in_config(&client_config_dir()?, session)
}

/// Whether the client can resume `session`: its transcript holds an
/// answer of the model (an `assistant` line), not only what the client
/// writes before one (a queue operation, the prompt), which it refuses to
/// resume ("No conversation found"). Read from the start, at most 256 KiB:
/// the first answer follows the prompt there.
pub(crate) fn resumable(session: &str) -> bool {
    use std::io::Read;
    const LOOKED_AT: u64 = 256 * 1024;
    const ANSWER: &[u8] = br#""type":"assistant""#;
    let Some(file) = of_session(session).and_then(|p| std::fs::File::open(p).ok()) else {
        return false;
    };
    let mut start = Vec::new();
    if file.take(LOOKED_AT).read_to_end(&mut start).is_err() {
        return false;
    }
    start.windows(ANSWER.len()).any(|w| w == ANSWER)
}

/// Moves the transcript of a session the client cannot resume (see
/// [`resumable`]) aside, to `<session>.jsonl.not-resumed` beside it: the
/// client refuses a new conversation of an id whose file is there ("is
/// already in use"). Returns where it went; `None` when there was none.
pub(crate) fn set_aside(session: &str) -> std::io::Result<Option<PathBuf>> {
    let Some(path) = of_session(session) else {
        return Ok(None);
    };
    let aside = path.with_extension("jsonl.not-resumed");
    std::fs::rename(&path, &aside)?;
    Ok(Some(aside))
}

/// [`of_session`] under the client's configuration folder `config`.
fn in_config(config: &Path, session: &str) -> Option<PathBuf> {
    let name = format!("{session}.jsonl");
    std::fs::read_dir(config.join("projects"))
        .ok()?
        .flatten()
        .map(|entry| entry.path().join(&name))
        .find(|path| path.is_file())
}

/// Where the client keeps the session's transcript when no stop has named
/// it yet: `<config>/projects/<the project folder with every character but
/// letters and digits as '-'>/<session>.jsonl`.
pub(crate) fn default_path(root: &Path, session_id: &str) -> Option<PathBuf> {
    let config_dir = client_config_dir()?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mangled: String = root
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    Some(
        config_dir
            .join("projects")
            .join(mangled)
            .join(format!("{session_id}.jsonl")),
    )
}

/// The transcript of the loop's session: where its last stop read when that
/// was this session's (a fresh loop's cursor may be an earlier
/// iteration's), else where the client keeps it.
pub(crate) fn of_loop(state: &LoopState, paths: &ProjectPaths) -> Option<PathBuf> {
    let session = std::ffi::OsStr::new(&state.session_id);
    state
        .transcript
        .as_ref()
        .map(|c| c.path.clone())
        .filter(|p| p.file_stem() == Some(session))
        .or_else(|| of_session(&state.session_id))
        .or_else(|| default_path(&paths.root, &state.session_id))
}

/// What the loop's transcript gained since its last stop read it, for a run
/// that ended without a stop after its last requests (the client's own
/// budget cap, a crash, a signal): those requests and tokens were spent too.
pub(crate) fn unstopped_usage(state: &LoopState, paths: &ProjectPaths) -> Option<UsageReading> {
    let path = of_loop(state, paths)?;
    let since = state.started_at.secs();
    usage::read_new_since(&path, state.transcript.as_ref(), now_secs(), since).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transcript_path_follows_the_clients_layout() {
        let path = default_path(Path::new("/nonexistent/my proj.x"), "s-1");
        if let Some(path) = path {
            let text = path.to_string_lossy().into_owned();
            assert!(
                text.ends_with("projects/-nonexistent-my-proj-x/s-1.jsonl"),
                "{text}"
            );
        }
    }

    #[test]
    fn the_transcript_is_found_by_its_session_whatever_the_folder_is_called() {
        let tmp = crate::testdir::new("transcripts");
        let dir = tmp.path();
        let folder = dir.join("projects").join("-tmp-some-project");
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::create_dir_all(dir.join("projects").join("-other")).unwrap();
        std::fs::write(folder.join("abc.jsonl"), "{}\n").unwrap();
        assert_eq!(in_config(dir, "abc"), Some(folder.join("abc.jsonl")));
        assert_eq!(in_config(dir, "abd"), None);
        assert_eq!(in_config(&dir.join("nowhere"), "abc"), None);
    }
}
