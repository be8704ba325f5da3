//! The files in `.git` that send git elsewhere, recorded at a loop's start
//! and compared at its claims and its end.
//!
//! ralph's own git never follows them ([`super::GitPlace`]), but the
//! person's does: a `.git/commondir` the agent wrote, naming a folder whose
//! configuration sets `core.fsmonitor`, runs that program at the person's
//! next `git status`. These are the files ([`COMMON_FILES`],
//! [`WORKTREE_FILES`]):
//!
//! - `commondir` (the shared folder: configuration, objects, refs),
//!   `gitdir` (a worktree's way back to its folder) and `config.worktree`
//!   (configuration read beside `config`), in the common folder and in every
//!   worktree's record under `worktrees/`;
//! - `objects/info/alternates` (objects taken from another folder),
//!   `info/grafts` and `shallow` (history cut or grafted), in the common
//!   folder;
//! - the checkout's own `.git` file when it is one (the person's worktree).
//!
//! A worktree's record made during the loop (ralph's own worktrees) was
//! not there at the start: its `commondir` must lead back to the common
//! folder, and a worktree of ralph's must have its `gitdir` lead back to
//! it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{GitPlace, pointer, same_file as same_folder};

/// The files of the common folder that send git elsewhere.
pub const COMMON_FILES: &[&str] = &[
    "commondir",
    "gitdir",
    "config.worktree",
    "objects/info/alternates",
    "info/grafts",
    "shallow",
];

/// The files of a worktree's record (`worktrees/<id>/`) that send git
/// elsewhere.
pub const WORKTREE_FILES: &[&str] = &["commondir", "gitdir", "config.worktree"];

/// Most worktree records looked at.
pub const MAX_WORKTREES: usize = 512;

/// Most bytes of a file kept whole in the record, so that it can be put
/// back; a longer one keeps only its hash.
pub const KEPT_BYTES: u64 = 4096;

/// Most bytes of a file hashed.
const HASHED_BYTES: u64 = 1024 * 1024;

/// One file as the record found it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedFile {
    /// The hash of its content (16 hex digits).
    pub hash: String,
    /// Its content, when short text, to put back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The files that send git elsewhere, as a loop's start found them
/// (`gitRecord` in the state).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GitRecord {
    /// The repository's common folder then.
    pub common_dir: PathBuf,
    /// The checkout's (or worktree's) top folder then.
    pub work_tree: PathBuf,
    /// The common folder's device and inode then: another folder put in
    /// its place differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_identity: Option<String>,
    /// Each file (absolute path) and what it held; `None`: absent.
    pub files: BTreeMap<String, Option<RecordedFile>>,
}

/// A file that differs from the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Changed {
    /// The file.
    pub path: PathBuf,
    /// How the person knows it (`.git/commondir`).
    pub shown: String,
    /// What it holds now, printable and short (`None`: absent).
    pub now: Option<String>,
    /// What to put back: `Some(None)` removes it, `Some(Some(text))`
    /// writes `text`; `None`: the record cannot rebuild it.
    pub restore: Option<Option<String>>,
}

impl Changed {
    /// One line for the person: the file, what happened to it, what it
    /// names now.
    pub fn describe(&self) -> String {
        match (&self.now, &self.restore) {
            (None, _) => format!("{} was removed", self.shown),
            (Some(now), Some(None)) => format!("{} appeared (it holds `{now}`)", self.shown),
            (Some(now), _) => format!("{} changed (it holds `{now}`)", self.shown),
        }
    }
}

/// What a file holds: its hash and, when short text, the text; `None` when
/// absent or empty.
fn read(path: &Path) -> Option<RecordedFile> {
    use crate::files::{Bounded, read_bounded};
    let bytes = match read_bounded(path, HASHED_BYTES) {
        // Empty says nothing (2.1.330's sandbox leaves empty files as the
        // mount points of paths it keeps read-only): as good as absent.
        Ok(Bounded::Bytes(bytes)) if bytes.is_empty() => return None,
        Ok(Bounded::Bytes(bytes)) => bytes,
        Ok(Bounded::Missing) => return None,
        // Too large or unreadable: recorded as such, never equal to text.
        Ok(Bounded::TooLarge) => b"\0(too large)".to_vec(),
        Err(e) => format!("\0(unreadable: {})", e.kind()).into_bytes(),
    };
    let hash = crate::fnv::hex(&bytes);
    let text = (bytes.len() as u64 <= KEPT_BYTES)
        .then(|| String::from_utf8(bytes).ok())
        .flatten();
    Some(RecordedFile { hash, text })
}

/// The worktree records under `common/worktrees`, by name (at most
/// [`MAX_WORKTREES`]).
fn worktree_records(common: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(common.join("worktrees")) else {
        return Vec::new();
    };
    let mut found: Vec<(String, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
        .take(MAX_WORKTREES)
        .collect();
    found.sort();
    found
}

/// Every file the record covers in `place`, as absolute paths.
fn covered(place: &GitPlace) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = COMMON_FILES
        .iter()
        .map(|name| place.common_dir.join(name))
        .collect();
    for (_, record) in worktree_records(&place.common_dir) {
        files.extend(WORKTREE_FILES.iter().map(|name| record.join(name)));
    }
    let dot_git = place.work_tree.join(".git");
    if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        files.push(dot_git);
    }
    files
}

/// A folder's device and inode, as text.
#[cfg(unix)]
fn identity(folder: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(folder).ok()?;
    Some(format!("{}:{}", meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
fn identity(_folder: &Path) -> Option<String> {
    None
}

/// The record of `place` now (a loop's start).
pub fn record(place: &GitPlace) -> GitRecord {
    GitRecord {
        common_dir: place.common_dir.clone(),
        work_tree: place.work_tree.clone(),
        common_identity: identity(&place.common_dir),
        files: covered(place)
            .into_iter()
            .map(|path| (path.to_string_lossy().into_owned(), read(&path)))
            .collect(),
    }
}

/// Most characters of a file's content shown.
const SHOWN_CHARS: usize = 160;

/// A file's content as the person is shown it: its first line, printable, short.
fn excerpt(text: &str) -> String {
    let line = text.trim().lines().next().unwrap_or_default();
    let printable = crate::text::printable(line);
    let mut shown: String = printable.chars().take(SHOWN_CHARS).collect();
    if printable.chars().count() > SHOWN_CHARS {
        shown.push('…');
    }
    shown
}

/// What `path` holds now, for [`Changed::now`].
fn now_of(path: &Path) -> Option<String> {
    read(path).map(|file| match file.text {
        Some(text) => excerpt(&text),
        None => "(not short text)".to_string(),
    })
}

/// The files that differ from `record` now: each recorded one changed,
/// added or removed, and each worktree record made since whose `commondir`
/// does not lead back to the common folder, or (a worktree of ralph's,
/// `<project>/.claude/worktrees/<name>`) whose `gitdir` does not lead back
/// to it. The common folder itself replaced (another `.git` in its place)
/// is one change that cannot be put back.
pub fn changes(project: &Path, record: &GitRecord) -> Vec<Changed> {
    let shown = |path: &Path| super::shown_from(&record.work_tree, path);
    let common = &record.common_dir;
    if record.common_identity.is_some() && identity(common) != record.common_identity {
        return vec![Changed {
            path: common.clone(),
            shown: format!(
                "{} (the repository's folder: another one is in its place)",
                shown(common)
            ),
            now: None,
            restore: None,
        }];
    }
    let mut out = Vec::new();
    for (path, before) in &record.files {
        let path = PathBuf::from(path);
        let now = read(&path);
        if now.as_ref().map(|f| &f.hash) == before.as_ref().map(|f| &f.hash)
            || removed_with_its_worktree(project, record, &path)
        {
            continue;
        }
        let restore = match before {
            None => Some(None),
            Some(RecordedFile {
                text: Some(text), ..
            }) => Some(Some(text.clone())),
            Some(_) => None,
        };
        out.push(Changed {
            shown: shown(&path),
            now: now_of(&path),
            restore,
            path,
        });
    }
    for (name, folder) in worktree_records(common) {
        let commondir = folder.join("commondir");
        if record
            .files
            .contains_key(commondir.to_string_lossy().as_ref())
        {
            continue;
        }
        out.extend(new_worktree_record(project, common, &name, &folder, &shown));
    }
    out.extend(ralphs_git_files(project, common, &shown));
    out
}

/// Whether `path` is a file of the record of one of ralph's worktrees
/// (`<project>/.claude/worktrees/<name>`, as its recorded `gitdir` says)
/// that went whole with the worktree: its record folder and the worktree
/// both gone, as `git worktree remove` (or `prune`) leaves them when ralph
/// is done with an item. Nothing is left there for git to follow. A record
/// gone while its worktree stays, or a file gone from a record that stays,
/// is not this.
fn removed_with_its_worktree(project: &Path, record: &GitRecord, path: &Path) -> bool {
    let Some(folder) = path.parent() else {
        return false;
    };
    let Some(name) = folder.file_name() else {
        return false;
    };
    if folder.parent() != Some(record.common_dir.join("worktrees").as_path())
        || folder.symlink_metadata().is_ok()
    {
        return false;
    }
    let ours = project.join(super::WORKTREES_DIR).join(name);
    let gitdir = folder.join("gitdir");
    let recorded = record
        .files
        .get(gitdir.to_string_lossy().as_ref())
        .and_then(|file| file.as_ref()?.text.as_deref())
        .map(|text| folder.join(text.trim()));
    recorded.is_some_and(|named| {
        crate::paths::lexically_normal(&named) == crate::paths::lexically_normal(&ours.join(".git"))
    }) && ours.symlink_metadata().is_err()
}

/// The files of a worktree record made since the start that send git
/// elsewhere: a `commondir` that does not lead to the common folder
/// (`../..` puts it back), and for ralph's worktree `name` a `gitdir` that
/// does not lead to its `.git`.
fn new_worktree_record(
    project: &Path,
    common: &Path,
    name: &str,
    folder: &Path,
    shown: &dyn Fn(&Path) -> String,
) -> Vec<Changed> {
    let mut out = Vec::new();
    let commondir = folder.join("commondir");
    if let Some(text) = pointer(&commondir)
        && !same_folder(&folder.join(&text), common)
    {
        out.push(Changed {
            shown: shown(&commondir),
            now: Some(excerpt(&text)),
            restore: Some(Some("../..\n".into())),
            path: commondir,
        });
    }
    let ours = project.join(super::WORKTREES_DIR).join(name);
    let gitdir = folder.join("gitdir");
    if ours.join(".git").symlink_metadata().is_ok() {
        let leads_back = pointer(&gitdir)
            .is_some_and(|text| same_folder(&folder.join(text), &ours.join(".git")));
        if !leads_back {
            out.push(Changed {
                shown: shown(&gitdir),
                now: now_of(&gitdir),
                restore: Some(Some(format!("{}\n", ours.join(".git").display()))),
                path: gitdir,
            });
        }
    }
    out
}

/// The `.git` file of each worktree ralph made (`<project>/.claude/worktrees/<name>`)
/// that does not lead to its record `<common>/worktrees/<name>`: the
/// person's git in that folder would follow it (ralph's never reads it).
fn ralphs_git_files(
    project: &Path,
    common: &Path,
    shown: &dyn Fn(&Path) -> String,
) -> Vec<Changed> {
    let Ok(entries) = std::fs::read_dir(project.join(super::WORKTREES_DIR)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten().take(MAX_WORKTREES) {
        let folder = entry.path();
        let dot_git = folder.join(".git");
        let record = common.join("worktrees").join(entry.file_name());
        if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) || !record.is_dir() {
            continue;
        }
        let leads_back = pointer(&dot_git).is_some_and(|text| {
            text.strip_prefix("gitdir:")
                .is_some_and(|named| same_folder(&folder.join(named.trim()), &record))
        });
        if !leads_back {
            out.push(Changed {
                shown: shown(&dot_git),
                now: now_of(&dot_git),
                restore: Some(Some(format!("gitdir: {}\n", record.display()))),
                path: dot_git,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Puts back each of `changes` that can be (an added file removed, a
/// changed one written as it was); one line each for the person: what was
/// found and what became of it.
pub fn restore(changes: &[Changed]) -> Vec<String> {
    changes
        .iter()
        .map(|change| {
            let found = change.describe();
            let done = match &change.restore {
                Some(None) => match std::fs::remove_file(&change.path) {
                    Ok(()) => Ok("removed".to_string()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        Ok("gone already".to_string())
                    }
                    Err(e) => Err(e.to_string()),
                },
                Some(Some(text)) => std::fs::write(&change.path, text)
                    .map(|()| format!("put back as it was (`{}`)", excerpt(text)))
                    .map_err(|e| e.to_string()),
                None => Err("ralph cannot rebuild it".to_string()),
            };
            match done {
                Ok(done) => format!("{found}: {done}"),
                Err(why) => {
                    format!("{found}: left as it is ({why}); restore it before running git there")
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("p");
        for sub in [".git/objects/info", ".git/info", ".git/worktrees/item-a"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::create_dir_all(root.join(".claude/worktrees/item-a")).unwrap();
        std::fs::write(
            root.join(".claude/worktrees/item-a/.git"),
            "gitdir: ../../../.git/worktrees/item-a\n",
        )
        .unwrap();
        std::fs::write(root.join(".git/worktrees/item-a/commondir"), "../..\n").unwrap();
        std::fs::write(
            root.join(".git/worktrees/item-a/gitdir"),
            format!("{}\n", root.join(".claude/worktrees/item-a/.git").display()),
        )
        .unwrap();
        (dir, root)
    }

    #[test]
    fn nothing_changed_is_no_change() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        assert!(
            record.files.contains_key(
                root.join(".git/worktrees/item-a/commondir")
                    .to_string_lossy()
                    .as_ref()
            )
        );
        assert_eq!(changes(&root, &record), Vec::new());
    }

    #[test]
    fn a_commondir_that_appeared_is_named_and_removed() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        std::fs::write(root.join(".git/commondir"), "/tmp/evil\n").unwrap();
        let found = changes(&root, &record);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].shown, ".git/commondir");
        assert_eq!(
            found[0].describe(),
            ".git/commondir appeared (it holds `/tmp/evil`)"
        );
        let said = restore(&found);
        assert_eq!(
            said,
            [".git/commondir appeared (it holds `/tmp/evil`): removed"]
        );
        assert!(!root.join(".git/commondir").exists());
        assert_eq!(changes(&root, &record), Vec::new());
    }

    #[test]
    fn a_worktrees_commondir_changed_is_put_back() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        let file = root.join(".git/worktrees/item-a/commondir");
        std::fs::write(&file, "/tmp/evil\n").unwrap();
        std::fs::write(root.join(".git/objects/info/alternates"), "/tmp/objs\n").unwrap();
        let found = changes(&root, &record);
        let shown: Vec<&str> = found.iter().map(|c| c.shown.as_str()).collect();
        assert_eq!(
            shown,
            [
                ".git/objects/info/alternates",
                ".git/worktrees/item-a/commondir"
            ]
        );
        restore(&found);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "../..\n");
        assert!(!root.join(".git/objects/info/alternates").exists());
    }

    #[test]
    fn a_worktree_made_since_must_lead_back() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        // ralph's next worktree, as git makes it: nothing to say.
        let tree = root.join(".claude/worktrees/item-b");
        std::fs::create_dir_all(&tree).unwrap();
        let admin = root.join(".git/worktrees/item-b");
        std::fs::write(tree.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        std::fs::write(
            admin.join("gitdir"),
            format!("{}\n", tree.join(".git").display()),
        )
        .unwrap();
        assert_eq!(changes(&root, &record), Vec::new());
        // Then its agent sends all three elsewhere.
        std::fs::write(admin.join("commondir"), "/tmp/evil\n").unwrap();
        std::fs::write(admin.join("gitdir"), "/tmp/elsewhere/.git\n").unwrap();
        std::fs::write(tree.join(".git"), "gitdir: /tmp/evil\n").unwrap();
        let found = changes(&root, &record);
        let shown: Vec<&str> = found.iter().map(|c| c.shown.as_str()).collect();
        assert_eq!(
            shown,
            [
                ".git/worktrees/item-b/commondir",
                ".git/worktrees/item-b/gitdir",
                ".claude/worktrees/item-b/.git"
            ]
        );
        restore(&found);
        assert_eq!(changes(&root, &record), Vec::new());
    }

    #[test]
    fn a_worktree_of_ralphs_removed_whole_is_no_change_and_other_removals_are() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        // `git worktree remove` of ralph's worktree: its folder and its record go.
        std::fs::remove_dir_all(root.join(".claude/worktrees/item-a")).unwrap();
        std::fs::remove_dir_all(root.join(".git/worktrees/item-a")).unwrap();
        assert_eq!(restore(&changes(&root, &record)), Vec::<String>::new());
        // The same with a relative gitdir (worktree.useRelativePaths).
        let (_d, root) = repo();
        std::fs::write(
            root.join(".git/worktrees/item-a/gitdir"),
            "../../../.claude/worktrees/item-a/.git\n",
        )
        .unwrap();
        let record = super::record(&GitPlace::find(&root).unwrap());
        std::fs::remove_dir_all(root.join(".claude/worktrees/item-a")).unwrap();
        std::fs::remove_dir_all(root.join(".git/worktrees/item-a")).unwrap();
        assert_eq!(restore(&changes(&root, &record)), Vec::<String>::new());
        // Its record gone while the worktree is still there: said.
        let (_d, root) = repo();
        let record = super::record(&GitPlace::find(&root).unwrap());
        std::fs::remove_dir_all(root.join(".git/worktrees/item-a")).unwrap();
        let said = restore(&changes(&root, &record));
        assert!(
            said.iter().any(
                |l| l.starts_with(".git/worktrees/item-a/commondir was removed: left as it is")
            ),
            "{said:?}"
        );
        // Only its commondir removed: said, and put back.
        let (_d, root) = repo();
        let record = super::record(&GitPlace::find(&root).unwrap());
        std::fs::remove_file(root.join(".git/worktrees/item-a/commondir")).unwrap();
        assert_eq!(
            restore(&changes(&root, &record)),
            vec![".git/worktrees/item-a/commondir was removed: put back as it was (`../..`)"]
        );
    }

    #[test]
    fn a_record_survives_the_state_file() {
        let (_d, root) = repo();
        let record = record(&GitPlace::find(&root).unwrap());
        let json = serde_json::to_string(&record).unwrap();
        let back: GitRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back, record);
    }
}
