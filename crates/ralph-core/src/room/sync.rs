//! The claimed tree copied into the room by content: the files git lists
//! (`ls-files --cached --others --exclude-standard`: tracked, and untracked
//! but not ignored), each written only when its bytes differ from the
//! room's copy. A copy left alone keeps its time stamp (a build in the room
//! stays incremental); a copy written gets a fresh one, whatever time the
//! agent gave the project's file (a build in the room cannot take the old
//! file for the one it built from). Everything else in the room's tree is
//! removed (a file synced before and gone now, what a check left there: a
//! `conftest.py` its code wrote), but for the folders its setup and builds
//! keep at the top (`target`, `.venv`, `venv`, `node_modules`).
//!
//! A manifest beside the tree keeps each file's size, time stamps and hash,
//! on both sides: a file whose size, modification time, change time and
//! inode are as recorded, and whose copy's are too, is not read at all
//! (the change time is the kernel's, which no one sets: a file put back
//! with its old size and `touch -d` of its old time is still read).
//!
//! Nothing outside the project is read through a link: a link is copied
//! as a link when it points inside the tree (relative, staying inside),
//! else left out and named; a file is opened without following a link,
//! below folders that are no links. In the room, nothing is written,
//! removed or changed through a link either: every folder on the way to a
//! copy is made a real folder first (a link there, which a check may have
//! left, is removed), and a removal below a link is not done.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::RoomError;
use crate::own_git::runner::GitCall;

/// The manifest's file, beside the room's tree.
const MANIFEST: &str = "manifest.json";

/// Folders whose untracked files are an environment, never the project's
/// code: left out of the copy (the room makes its own).
pub const ENV_DIRS: [&str; 5] = [".venv", "venv", "node_modules", "target", "__pycache__"];

/// What one synced file was, on both sides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    /// The project's file: size, time stamp (ns), executable.
    size: u64,
    mtime: i128,
    exec: bool,
    /// The hash of its bytes (a link's: of its target).
    hash: String,
    /// Its target, when it is a link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    link: Option<String>,
    /// The room's copy after the sync: size and time stamp.
    room_size: u64,
    room_mtime: i128,
    /// The change time (ns) and inode of the project's file and of the
    /// room's copy: neither can be set by hand.
    #[serde(default)]
    stamp: (i128, u64),
    #[serde(default)]
    room_stamp: (i128, u64),
}

/// What a sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Synced {
    /// Files listed.
    pub files: usize,
    /// Files (and links) written.
    pub written: usize,
    /// Files removed from the room: gone from the project.
    pub removed: usize,
    /// Files read to compare (their size or time stamp changed).
    pub read: usize,
    /// Links left out: they point outside the tree.
    pub links_left_out: Vec<String>,
}

/// Syncs the tree of `project` into `tree` (the room `dir`'s).
pub fn sync(project: &Path, dir: &Path, tree: &Path) -> Result<Synced, RoomError> {
    let listed = list(project)?;
    let shown = dir.display().to_string();
    let io = |e: std::io::Error| RoomError::Io(shown.clone(), e.to_string());
    let manifest_path = dir.join(MANIFEST);
    let before: BTreeMap<String, Entry> = std::fs::read(&manifest_path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut after = BTreeMap::new();
    let mut synced = Synced {
        files: listed.len(),
        ..Synced::default()
    };
    let mut folders = HashSet::new();
    for rel in &listed {
        if !parents_are_folders(project, Path::new(rel), &mut folders) {
            continue;
        }
        if let Some(entry) = one(project, tree, rel, before.get(rel), &mut synced).map_err(io)? {
            after.insert(rel.clone(), entry);
        }
    }
    for gone in before.keys().filter(|k| !after.contains_key(*k)) {
        let path = tree.join(gone);
        // Below a link (a check may leave one), the path is not the room's.
        if !room_parents_are_folders(tree, Path::new(gone)) {
            continue;
        }
        if std::fs::symlink_metadata(&path).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(&path).map_err(io)?;
            synced.removed += 1;
            remove_empty_parents(tree, &path);
        }
    }
    synced.removed += prune(tree, &after).map_err(io)?;
    let text = serde_json::to_vec(&after).map_err(|e| io(std::io::Error::other(e)))?;
    write_atomic(&manifest_path, &text, false).map_err(io)?;
    Ok(synced)
}

/// Folders at the room tree's top that its setup and builds make and keep
/// between checks: never pruned.
const KEPT: [&str; 4] = ["target", ".venv", "venv", "node_modules"];

/// Removes from the room's `tree` what is not synced (`listed`) and not
/// [`KEPT`]: what a check left there (a `conftest.py` its code wrote, a
/// file in place of one) does not reach the next check. Links are removed,
/// never followed. Returns how many entries went.
fn prune(tree: &Path, listed: &BTreeMap<String, Entry>) -> std::io::Result<usize> {
    let mut folders: HashSet<PathBuf> = HashSet::new();
    for rel in listed.keys() {
        let mut at = PathBuf::new();
        let parts: Vec<Component> = Path::new(rel).components().collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            at.push(part);
            folders.insert(at.clone());
        }
    }
    let mut removed = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel_dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(tree.join(&rel_dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let rel = rel_dir.join(entry.file_name());
            if rel_dir.as_os_str().is_empty() && KEPT.iter().any(|k| entry.file_name() == *k) {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if folders.contains(&rel) {
                    stack.push(rel);
                } else {
                    std::fs::remove_dir_all(entry.path())?;
                    removed += 1;
                }
            } else if !listed.contains_key(rel.to_string_lossy().as_ref()) {
                std::fs::remove_file(entry.path())?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

/// The files git lists in `project`, tracked and untracked but not
/// ignored, as relative paths that stay inside it; none in `.git`, none
/// untracked in an environment folder ([`ENV_DIRS`]).
fn list(project: &Path) -> Result<Vec<String>, RoomError> {
    let ls = |args: &[&str]| -> Result<Vec<String>, RoomError> {
        let call = GitCall::find(project)
            .map_err(|e| RoomError::NotGit(format!("{} ({e})", project.display())))?;
        let out = call.arg("ls-files").args(args).run().map_err(|e| {
            RoomError::Io(project.display().to_string(), format!("git ls-files: {e}"))
        })?;
        Ok(split_z(&out.stdout))
    };
    let tracked = ls(&["-z", "--cached"])?;
    let untracked = ls(&["-z", "--others", "--exclude-standard"])?;
    let in_env = |rel: &String| {
        Path::new(rel)
            .components()
            .any(|c| ENV_DIRS.iter().any(|d| c.as_os_str() == *d))
    };
    let mut all: Vec<String> = tracked
        .into_iter()
        .chain(untracked.into_iter().filter(|rel| !in_env(rel)))
        .filter(|rel| stays_inside(Path::new(rel)))
        .collect();
    all.sort();
    all.dedup();
    Ok(all)
}

/// The NUL-separated names of git's `-z` output.
fn split_z(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// Whether `rel` is a relative path of normal parts, none `.git`.
fn stays_inside(rel: &Path) -> bool {
    rel.components()
        .all(|c| matches!(c, Component::Normal(p) if p != ".git"))
        && rel.components().next().is_some()
}

/// Whether every folder on the way from `root` to `rel`'s parent is a
/// folder, no link: a file below a link is not read. `seen` holds the
/// folders found so already (each is looked at once per sync).
fn parents_are_folders(root: &Path, rel: &Path, seen: &mut HashSet<PathBuf>) -> bool {
    let mut at = root.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        if seen.contains(&at) {
            continue;
        }
        if !std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_dir()) {
            return false;
        }
        seen.insert(at.clone());
    }
    true
}

/// Whether every folder on the way from the room's `tree` to `rel`'s
/// parent is a real folder, no link (nothing else changes the room while
/// it is synced: its lock is held).
fn room_parents_are_folders(tree: &Path, rel: &Path) -> bool {
    let mut at = tree.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    parts[..parts.len().saturating_sub(1)].iter().all(|part| {
        at.push(part);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_dir())
    })
}

/// The change time (ns) and inode of `meta`: what no one sets by hand.
fn stamp_of(meta: &std::fs::Metadata) -> (i128, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (
            i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            meta.ino(),
        )
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        (0, 0)
    }
}

/// Nanoseconds since the epoch of `meta`'s modification (0 when unknown).
fn mtime_of(meta: &std::fs::Metadata) -> i128 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// Whether `meta` is an executable file.
fn exec_of(meta: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        false
    }
}

/// Syncs one listed file; its manifest entry, or `None` when it is not
/// copied (gone, a folder such as a submodule, a link out of the tree).
fn one(
    project: &Path,
    tree: &Path,
    rel: &str,
    before: Option<&Entry>,
    synced: &mut Synced,
) -> std::io::Result<Option<Entry>> {
    let rel_path = Path::new(rel);
    let source = project.join(rel_path);
    let Ok(meta) = std::fs::symlink_metadata(&source) else {
        return Ok(None);
    };
    let target = tree.join(rel_path);
    // The copy's folders are real folders before the copy is looked at:
    // nothing is read, written or changed through a link in the room.
    make_parents(tree, rel_path)?;
    if meta.file_type().is_symlink() {
        return link(&source, &target, tree, rel, synced);
    }
    if !meta.file_type().is_file() {
        return Ok(None);
    }
    let (size, mtime, exec, stamp) = (meta.len(), mtime_of(&meta), exec_of(&meta), stamp_of(&meta));
    let copy = std::fs::symlink_metadata(&target)
        .ok()
        .filter(|m| m.file_type().is_file());
    if let (Some(b), Some(c)) = (before, &copy) {
        let source_same = b.size == size
            && b.mtime == mtime
            && b.stamp == stamp
            && b.exec == exec
            && b.link.is_none();
        let copy_same =
            b.room_size == c.len() && b.room_mtime == mtime_of(c) && b.room_stamp == stamp_of(c);
        if source_same && copy_same {
            return Ok(Some(b.clone()));
        }
    }
    let bytes = read_no_follow(&source)?;
    synced.read += 1;
    let hash = crate::fnv::hex(&bytes);
    let same_bytes = match &copy {
        Some(c) if c.len() == bytes.len() as u64 => {
            std::fs::read(&target).is_ok_and(|b| b == bytes)
        }
        _ => false,
    };
    if same_bytes {
        set_exec(&target, exec)?;
    } else {
        if std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
            std::fs::remove_dir_all(&target)?;
        }
        write_atomic(&target, &bytes, exec)?;
        synced.written += 1;
    }
    let after = std::fs::symlink_metadata(&target)?;
    Ok(Some(Entry {
        size,
        mtime,
        exec,
        hash,
        link: None,
        room_size: after.len(),
        room_mtime: mtime_of(&after),
        stamp,
        room_stamp: stamp_of(&after),
    }))
}

/// Copies the link `source` to `target` when it points inside the tree.
fn link(
    source: &Path,
    target: &Path,
    tree: &Path,
    rel: &str,
    synced: &mut Synced,
) -> std::io::Result<Option<Entry>> {
    let to = std::fs::read_link(source)?;
    let inside = !to.is_absolute() && {
        let parent = Path::new(rel).parent().unwrap_or(Path::new(""));
        let mut depth: i64 = i64::try_from(parent.components().count()).unwrap_or(i64::MAX);
        to.components().all(|c| {
            match c {
                Component::ParentDir => depth -= 1,
                Component::Normal(_) => depth += 1,
                Component::CurDir => {}
                _ => return false,
            }
            depth >= 0
        })
    };
    // Where it really leads, links of the project followed: inside too.
    let inside = inside
        && tree.parent().is_some()
        && source
            .parent()
            .and_then(|dir| std::fs::canonicalize(dir.join(&to)).ok())
            .zip(project_root_of(source, rel))
            .is_some_and(|(real, root)| real.starts_with(root));
    if !inside {
        synced
            .links_left_out
            .push(format!("{rel} -> {}", to.display()));
        if std::fs::symlink_metadata(target).is_ok_and(|m| !m.is_dir()) {
            std::fs::remove_file(target)?;
        }
        return Ok(None);
    }
    let text = to.to_string_lossy().into_owned();
    if std::fs::read_link(target).ok().as_deref() != Some(to.as_path()) {
        match std::fs::symlink_metadata(target) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(target)?,
            Ok(_) => std::fs::remove_file(target)?,
            Err(_) => {}
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink(&to, target)?;
        synced.written += 1;
    }
    Ok(Some(Entry {
        hash: crate::fnv::hex(text.as_bytes()),
        link: Some(text),
        ..Entry::default()
    }))
}

/// The project's folder, real path, from a file `source` of it at `rel`.
fn project_root_of(source: &Path, rel: &str) -> Option<PathBuf> {
    let mut root = source.to_path_buf();
    for _ in Path::new(rel).components() {
        root = root.parent()?.to_path_buf();
    }
    std::fs::canonicalize(root).ok()
}

/// The bytes of `path`, opened without following a link.
fn read_no_follow(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
    let mut file = options.open(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Makes the folders of `rel`'s parent in `tree`, replacing a file or a
/// link where a folder must be (nothing is written through a link).
fn make_parents(tree: &Path, rel: &Path) -> std::io::Result<()> {
    let mut at = tree.to_path_buf();
    let parts: Vec<Component> = rel.components().collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_dir() => continue,
            Ok(_) => std::fs::remove_file(&at)?,
            Err(_) => {}
        }
        std::fs::create_dir(&at)?;
    }
    Ok(())
}

/// Sets or clears the executable bits of `path`.
fn set_exec(path: &Path, exec: bool) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::symlink_metadata(path)?;
        if !meta.file_type().is_file() {
            return Ok(());
        }
        let mode = meta.permissions().mode();
        let wanted = if exec { mode | 0o111 } else { mode & !0o111 };
        if wanted != mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))?;
        }
    }
    #[cfg(not(unix))]
    let _ = (path, exec);
    Ok(())
}

/// Writes `bytes` to `path` through a new file renamed over it.
fn write_atomic(path: &Path, bytes: &[u8], exec: bool) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = path.with_file_name(format!(".{name}.ralph-sync"));
    let _ = std::fs::remove_file(&temp);
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, if exec { 0o755 } else { 0o644 });
        let mut file = options.open(&temp)?;
        file.write_all(bytes)?;
    }
    std::fs::rename(&temp, path)
}

/// Removes the folders above `path` in `tree` that are left empty.
fn remove_empty_parents(tree: &Path, path: &Path) {
    let mut at: Option<PathBuf> = path.parent().map(Path::to_path_buf);
    while let Some(dir) = at {
        if dir == tree || !dir.starts_with(tree) || std::fs::remove_dir(&dir).is_err() {
            break;
        }
        at = dir.parent().map(Path::to_path_buf);
    }
}

#[cfg(test)]
mod tests;
