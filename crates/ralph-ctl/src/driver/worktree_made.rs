//! What each worktree was made with, so that a worktree found again (an
//! item queued again, an iteration taken up) is worked only while it is
//! what a new one would be: the commit it was made from, its
//! `worktreeSetup`, the loop that made it, and whether its setup and test
//! baseline passed. Kept in ralph's runtime folder (read-only to a
//! sandboxed agent), one file per worktree, each carrying ralph's MAC
//! (`ralph_core::persist::mac`): a record ralph cannot vouch for is none.
//!
//! A worktree whose record says its setup or baseline failed or never
//! finished, or whose setup changed since, is made afresh before any agent
//! runs in it; so is one whose base moved, or of which ralph has no record
//! (an older ralph made it), when it holds nothing of an agent's. What an
//! agent left in it that has not landed is kept on a branch of its own
//! (`WorktreePlan::set_aside`). Each record is signed for its own file: one
//! copied over another worktree's is none.

use std::path::PathBuf;

use ralph_core::files::{Bounded, read_bounded};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::mac::{self, Purpose};
use serde::{Deserialize, Serialize};

use crate::error::CtlError;

/// Folder (in the project's runtime folder) holding the records.
const MADE_DIR: &str = "worktrees";

/// Largest record read.
const MAX_RECORD_BYTES: u64 = 64 * 1024;

/// What a worktree was made with, and how far its making went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Made {
    /// When the loop that made it started: the same loop goes on in it.
    pub(crate) loop_started: String,
    /// The commit it was made from.
    pub(crate) base_commit: String,
    /// `worktreeSetup` as it ran in it (`None`: there was none).
    pub(crate) setup: Option<String>,
    /// Which worktree of its name it was ([`identity`]): a record kept
    /// from an earlier one, or restored, is none for a later one.
    #[serde(default)]
    pub(crate) worktree_id: Option<String>,
    /// How far its making went.
    pub(crate) ready: Readiness,
}

/// How far a worktree's making went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Readiness {
    /// Made; its setup and baseline not (yet) done.
    Making,
    /// Its setup and test baseline passed: an agent may work in it.
    Ready,
    /// Its `worktreeSetup` failed (or left files git does not ignore).
    SetupFailed,
    /// Its test baseline failed where the loop's passed.
    BaselineFailed,
}

/// The record of the worktree `name`.
fn file(paths: &ProjectPaths, name: &str) -> PathBuf {
    paths
        .project()
        .runtime_dir()
        .join(MADE_DIR)
        .join(format!("{name}.json"))
}

/// Records what the worktree `name` was made with, signed.
pub(crate) fn write(paths: &ProjectPaths, name: &str, made: &Made) -> Result<(), CtlError> {
    let path = file(paths, name);
    super::start::ignore_runtime(&paths.project())?;
    let folder = path.parent().unwrap_or(&path).to_path_buf();
    if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink() || !m.is_dir()) {
        return Err(CtlError::BadArgument(format!(
            "{} is not a plain folder (a link, or a file): ralph keeps its worktree records \
             there only in a folder of its own; remove it and run again",
            folder.display()
        )));
    }
    std::fs::create_dir_all(&folder).map_err(CtlError::io("create", &folder))?;
    // A struct of strings always serializes; an empty record would be
    // read as none (made afresh), never as fit.
    let json = serde_json::to_vec(made).unwrap_or_default();
    let key = mac::current(true).map_err(ralph_core::persist::store::StoreError::from)?;
    // Signed for its own file: a record copied over another worktree's
    // is none.
    let tag = key.tag(Purpose::Worktree, &path, &json);
    let mut bytes = json;
    bytes.push(b'\n');
    bytes.extend_from_slice(tag.as_bytes());
    bytes.push(b'\n');
    ralph_core::persist::atomic::write_file(&path, &bytes, 0o644)
        .map_err(CtlError::io("write", &path))
}

/// The record of the worktree `name`; `None` when there is none, or none
/// ralph can vouch for (unreadable, not signed by ralph's key).
pub(crate) fn read(paths: &ProjectPaths, name: &str) -> Option<Made> {
    let path = file(paths, name);
    let Ok(Bounded::Bytes(bytes)) = read_bounded(&path, MAX_RECORD_BYTES) else {
        return None;
    };
    let folder = path.parent()?;
    if std::fs::symlink_metadata(folder).map_or(true, |m| !m.is_dir()) {
        return None;
    }
    let text = std::str::from_utf8(&bytes).ok()?;
    let (json, tag) = text.trim_end().rsplit_once('\n')?;
    let key = mac::current(false).ok()?;
    if !key.verifies(Purpose::Worktree, &path, json.as_bytes(), tag.as_bytes()) {
        return None;
    }
    serde_json::from_str(json).ok()
}

/// Which worktree of its name the one at `path` is: its git admin folder
/// (`.git/worktrees/<name>`, made anew with each `git worktree add`) as
/// the file system knows it (its device and inode, with its birth time
/// where the file system keeps one, as an inode may be used again);
/// `None` when it cannot be told.
pub(crate) fn identity(path: &std::path::Path) -> Option<String> {
    let place = ralph_core::own_git::GitPlace::find(path).ok()?;
    let meta = std::fs::symlink_metadata(&place.git_dir).ok()?;
    let born = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(format!("{}:{}:{born}", meta.dev(), meta.ino()))
    }
    #[cfg(not(unix))]
    {
        (born != 0).then(|| born.to_string())
    }
}

/// The record of the worktree `name` at `path`, when it is this
/// worktree's ([`identity`]) and ralph can vouch for it ([`read`]).
pub(crate) fn read_for(paths: &ProjectPaths, name: &str, path: &std::path::Path) -> Option<Made> {
    let made = read(paths, name)?;
    (made.worktree_id.is_some() && made.worktree_id == identity(path)).then_some(made)
}

/// Forgets the record of the worktree `name` (it is gone).
pub(crate) fn forget(paths: &ProjectPaths, name: &str) {
    let _ = std::fs::remove_file(file(paths, name));
}

/// Forgets the record of the worktree at `path` of the project at `root`
/// (removed: landed, or empty after its iteration).
pub(crate) fn forget_removed(root: &std::path::Path, path: &std::path::Path) {
    if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
        forget(&ProjectPaths::new(root), name);
    }
}

/// What a worktree found again is, for the loop that finds it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// It may be worked as it is.
    Fit,
    /// Made afresh, in words why; what an agent left in it is kept first
    /// (whatever the record says: it may be wrong, and an untouched
    /// worktree keeps nothing anyway).
    Stale(String),
    /// The base moved since it was made, or ralph has no record of it (an
    /// older ralph made it): made afresh unless it holds an agent's work,
    /// which goes on in it.
    UnlessWorked(String),
}

/// What the worktree recorded as `made` (`None`: no record) is to the loop
/// started at `loop_started`, whose `worktreeSetup` is `setup` and whose
/// base is at `base` now.
pub(crate) fn judge(
    made: Option<&Made>,
    loop_started: &str,
    setup: Option<&str>,
    base: &str,
) -> Found {
    let Some(made) = made else {
        return Found::UnlessWorked(
            "ralph has no record of its worktreeSetup and test baseline".to_string(),
        );
    };
    match made.ready {
        Readiness::Making => {
            return Found::Stale("its worktreeSetup and test baseline never finished".into());
        }
        Readiness::SetupFailed => return Found::Stale("its worktreeSetup failed".into()),
        Readiness::BaselineFailed => return Found::Stale("its test baseline failed".into()),
        Readiness::Ready => {}
    }
    if made.loop_started == loop_started {
        return Found::Fit;
    }
    if made.setup.as_deref() != setup {
        let shown = |s: Option<&str>| s.map_or("none".to_string(), |s| format!("`{s}`"));
        return Found::Stale(format!(
            "worktreeSetup changed since it was made ({} then, {} now)",
            shown(made.setup.as_deref()),
            shown(setup)
        ));
    }
    if made.base_commit != base {
        return Found::UnlessWorked(format!(
            "the base moved since it was made (from {} to {})",
            short(&made.base_commit),
            short(base)
        ));
    }
    Found::Fit
}

/// The first 12 characters of a commit.
fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(ready: Readiness) -> Made {
        Made {
            loop_started: "1".into(),
            base_commit: "aaaa".into(),
            setup: Some("make env".into()),
            worktree_id: Some("1:2".into()),
            ready,
        }
    }

    #[test]
    fn a_worktree_is_fit_only_while_it_is_what_a_new_one_would_be() {
        let ready = made(Readiness::Ready);
        let setup = Some("make env");
        assert_eq!(judge(Some(&ready), "1", setup, "bbbb"), Found::Fit);
        assert_eq!(judge(Some(&ready), "2", setup, "aaaa"), Found::Fit);
        assert!(matches!(
            judge(None, "1", setup, "aaaa"),
            Found::UnlessWorked(why) if why.contains("no record")
        ));
        for (ready, words) in [
            (Readiness::Making, "never finished"),
            (Readiness::SetupFailed, "worktreeSetup failed"),
            (Readiness::BaselineFailed, "test baseline failed"),
        ] {
            match judge(Some(&made(ready)), "1", setup, "aaaa") {
                Found::Stale(why) => assert!(why.contains(words), "{why}"),
                other => panic!("{ready:?}: {other:?}"),
            }
        }
        match judge(Some(&ready), "2", None, "aaaa") {
            Found::Stale(why) => {
                assert!(why.contains("(`make env` then, none now)"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            judge(Some(&ready), "2", setup, "bbbb"),
            Found::UnlessWorked("the base moved since it was made (from aaaa to bbbb)".into())
        );
    }

    #[test]
    fn a_record_ralph_did_not_sign_is_none() {
        let dir = crate::testdir::new("worktree-made");
        let paths = ProjectPaths::new(dir.path());
        assert_eq!(read(&paths, "item-a"), None);
        write(&paths, "item-a", &made(Readiness::Ready)).unwrap();
        assert_eq!(read(&paths, "item-a"), Some(made(Readiness::Ready)));
        let path = file(&paths, "item-a");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            text.replace(r#""ready":"ready""#, r#""ready":"making""#),
        )
        .unwrap();
        assert_eq!(read(&paths, "item-a"), None, "changed: not ralph's");
        // A record ralph signed for another worktree is none here.
        write(&paths, "item-a", &made(Readiness::Ready)).unwrap();
        std::fs::copy(&path, file(&paths, "item-b")).unwrap();
        assert_eq!(
            read(&paths, "item-b"),
            None,
            "item-a's record, not item-b's"
        );
        forget_removed(&paths.root, &paths.root.join(".claude/worktrees/item-a"));
        assert!(!path.exists());
    }

    #[test]
    fn records_are_kept_only_in_a_real_folder() {
        let dir = crate::testdir::new("worktree-made");
        let paths = ProjectPaths::new(dir.path());
        let folder = file(&paths, "item-a").parent().unwrap().to_path_buf();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(folder.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &folder).unwrap();
        let err = write(&paths, "item-a", &made(Readiness::Ready)).unwrap_err();
        assert!(err.to_string().contains("not a plain folder"), "{err}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        assert_eq!(read(&paths, "item-a"), None);
    }
}
