//! Lock files left in `.git`: `index.lock`, `HEAD.lock`, `config.lock`,
//! `refs/heads/<branch>.lock`, a worktree's `worktrees/<id>/index.lock`.
//! git takes one for each file it rewrites and removes it when done, also
//! when it fails or is interrupted; one that stays was left by a git that
//! was killed (a check's, an agent's, when ralph ended its process group)
//! or written on purpose, and every later git that needs the file fails
//! ("Unable to create '…/index.lock': File exists"), the person's too.
//!
//! [`clear`] removes every lock file no live process can be holding:
//! none has it open, and no git process works in the repository (for a
//! worktree's own locks, in that worktree). Where that cannot be told
//! (no `/proc`), each is named and left.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::GitPlace;

/// Most entries of `.git` looked at for lock files.
pub const WALK_LIMIT: usize = 20_000;
/// Longest time the look for lock files and their holders may take.
pub const WALK_TIME: Duration = Duration::from_secs(2);

/// The folders of a git folder (the common one, or a worktree's record)
/// that hold lock files besides its top: refs and their logs, the info
/// and pack folders; never the object store's fan-out folders.
const LOCK_FOLDERS: &[&str] = &["refs", "logs", "info", "objects/info", "objects/pack"];

/// A lock file found, as it was found (a later one in its place is not it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeftLock {
    /// The file.
    pub path: PathBuf,
    /// The worktree whose record holds it (`worktrees/<id>/…`), if any.
    pub worktree: Option<String>,
    identity: Option<(u64, u64, i64)>,
}

/// What became of a lock file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Removed: nothing held it.
    Removed,
    /// Left, and why.
    Kept(String),
}

/// Every lock file under `place`'s common folder (its worktrees' records
/// included), at most [`WALK_LIMIT`] entries looked at.
pub fn find(place: &GitPlace) -> Vec<LeftLock> {
    let deadline = Instant::now() + WALK_TIME;
    let mut budget = WALK_LIMIT;
    let mut found = Vec::new();
    let common = &place.common_dir;
    look(common, None, false, &mut found, &mut budget, deadline);
    for sub in LOCK_FOLDERS {
        look(
            &common.join(sub),
            None,
            true,
            &mut found,
            &mut budget,
            deadline,
        );
    }
    if let Ok(records) = std::fs::read_dir(common.join("worktrees")) {
        for record in records.flatten() {
            if !record.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let id = record.file_name().to_string_lossy().into_owned();
            let folder = record.path();
            look(&folder, Some(&id), false, &mut found, &mut budget, deadline);
            for sub in ["refs", "logs"] {
                look(
                    &folder.join(sub),
                    Some(&id),
                    true,
                    &mut found,
                    &mut budget,
                    deadline,
                );
            }
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// The lock files in `folder` (and below it when `deep`).
fn look(
    folder: &Path,
    worktree: Option<&str>,
    deep: bool,
    found: &mut Vec<LeftLock>,
    budget: &mut usize,
    deadline: Instant,
) {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return;
    };
    for entry in entries.flatten() {
        if *budget == 0 || Instant::now() >= deadline {
            return;
        }
        *budget -= 1;
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() && deep {
            look(&path, worktree, true, found, budget, deadline);
        } else if !kind.is_dir() && entry.file_name().to_string_lossy().ends_with(".lock") {
            found.push(LeftLock {
                identity: identity(&path),
                path,
                worktree: worktree.map(str::to_string),
            });
        }
    }
}

/// The file's device, inode and change time: what tells it from another
/// put in its place.
#[cfg(unix)]
fn identity(path: &Path) -> Option<(u64, u64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    Some((
        meta.dev(),
        meta.ino(),
        meta.ctime_nsec() + meta.ctime() * 1_000_000_000,
    ))
}

#[cfg(not(unix))]
fn identity(_path: &Path) -> Option<(u64, u64, i64)> {
    None
}

/// The live processes that could be holding a lock file: the git processes
/// and the folders they work in, and the processes that have one of the
/// lock files open.
struct Holders {
    /// A git process: its id and its working folder.
    gits: Vec<(u32, PathBuf)>,
    /// A lock file (canonical) open in a process: the process.
    open: Vec<(PathBuf, u32)>,
}

/// The live processes that could hold `locks`, from `/proc`; `None` where
/// `/proc` cannot be read.
fn holders(locks: &[LeftLock], deadline: Instant) -> Option<Holders> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let wanted: HashSet<PathBuf> = locks
        .iter()
        .filter_map(|l| std::fs::canonicalize(&l.path).ok())
        .collect();
    let me = std::process::id();
    let mut holders = Holders {
        gits: Vec::new(),
        open: Vec::new(),
    };
    let mut seen_any = false;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        seen_any = true;
        if pid == me {
            continue;
        }
        if Instant::now() >= deadline {
            return None;
        }
        let proc_dir = entry.path();
        let comm = std::fs::read_to_string(proc_dir.join("comm")).unwrap_or_default();
        let comm = comm.trim();
        if (comm == "git" || comm.starts_with("git-"))
            && let Ok(cwd) = std::fs::read_link(proc_dir.join("cwd"))
        {
            holders.gits.push((pid, cwd));
        }
        if let Ok(fds) = std::fs::read_dir(proc_dir.join("fd")) {
            for fd in fds.flatten() {
                if let Ok(target) = std::fs::read_link(fd.path())
                    && wanted.contains(&target)
                {
                    holders.open.push((target, pid));
                }
            }
        }
    }
    seen_any.then_some(holders)
}

/// The folders a git process must work in to be taking `lock`: the
/// worktree's own folder for a lock in its record (ralph's
/// `.claude/worktrees/<id>`, and where its `gitdir` leads), else any folder
/// of the repository (the common folder, the main checkout, every
/// worktree).
fn scope(place: &GitPlace, lock: &LeftLock) -> Vec<PathBuf> {
    let main = main_checkout(place);
    let worktree_folders = |id: &str| -> Vec<PathBuf> {
        let mut folders = vec![main.join(super::WORKTREES_DIR).join(id)];
        let gitdir = place.worktree_record(id).join("gitdir");
        if let Some(text) = super::pointer(&gitdir)
            && let Some(parent) = Path::new(&text).parent()
        {
            folders.push(place.worktree_record(id).join(parent));
        }
        folders
    };
    if let Some(id) = &lock.worktree {
        worktree_folders(id)
    } else {
        let mut folders = vec![
            place.common_dir.clone(),
            main.clone(),
            place.work_tree.clone(),
        ];
        if let Ok(records) = std::fs::read_dir(place.common_dir.join("worktrees")) {
            for record in records.flatten() {
                folders.extend(worktree_folders(&record.file_name().to_string_lossy()));
            }
        }
        folders
    }
}

/// The main checkout's folder: the common folder's parent when it is a
/// `.git`, else the place's own work tree.
fn main_checkout(place: &GitPlace) -> PathBuf {
    match (place.common_dir.file_name(), place.common_dir.parent()) {
        (Some(name), Some(parent)) if name == ".git" => parent.to_path_buf(),
        _ => place.work_tree.clone(),
    }
}

/// Why `lock` may be held by a live process, if it may.
fn held(place: &GitPlace, lock: &LeftLock, holders: &Holders) -> Option<String> {
    let canonical = std::fs::canonicalize(&lock.path).ok();
    if let Some((_, pid)) = holders
        .open
        .iter()
        .find(|(path, _)| Some(path) == canonical.as_ref())
    {
        return Some(format!("process {pid} has it open"));
    }
    let folders: Vec<PathBuf> = scope(place, lock)
        .into_iter()
        .map(|f| std::fs::canonicalize(&f).unwrap_or(f))
        .collect();
    holders
        .gits
        .iter()
        .find(|(_, cwd)| folders.iter().any(|f| cwd.starts_with(f)))
        .map(|(pid, cwd)| format!("git process {pid} works in {}", cwd.display()))
}

/// Removes every lock file under `place`'s common folder that no live
/// process can be holding; `ours` says which are ralph's own on purpose
/// (the queue's held `config.lock`), left alone and not named. Each other
/// lock file, with what became of it.
pub fn clear(place: &GitPlace, ours: &dyn Fn(&Path) -> bool) -> Vec<(LeftLock, Fate)> {
    let locks: Vec<LeftLock> = find(place).into_iter().filter(|l| !ours(&l.path)).collect();
    if locks.is_empty() {
        return Vec::new();
    }
    let Some(holders) = holders(&locks, Instant::now() + WALK_TIME) else {
        return locks
            .into_iter()
            .map(|lock| {
                let why =
                    "whether a process holds it cannot be told here: remove it if no git runs";
                (lock, Fate::Kept(why.to_string()))
            })
            .collect();
    };
    locks
        .into_iter()
        .map(|lock| {
            if let Some(why) = held(place, &lock, &holders) {
                return (lock, Fate::Kept(why));
            }
            if identity(&lock.path) != lock.identity {
                return (lock, Fate::Kept("it was replaced meanwhile".into()));
            }
            let fate = match std::fs::remove_file(&lock.path) {
                Ok(()) => Fate::Removed,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Fate::Removed,
                Err(e) => Fate::Kept(format!("it cannot be removed: {e}")),
            };
            (lock, fate)
        })
        .collect()
}

/// One line for the person of what became of `lock`.
pub fn describe(place: &GitPlace, lock: &LeftLock, fate: &Fate) -> String {
    let shown = super::shown_from(&main_checkout(place), &lock.path);
    match fate {
        Fate::Removed => format!(
            "removed {shown}: a lock file no process held (left by a git that was stopped, or \
             written by the agent); git would fail on it"
        ),
        Fate::Kept(why) => format!("left {shown}: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place() -> (tempfile::TempDir, GitPlace) {
        let dir = tempfile::TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        for sub in [
            ".git/refs/heads/ralph",
            ".git/worktrees/item-a",
            ".git/objects/ab",
        ] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        let place = GitPlace::find(&root).unwrap();
        (dir, place)
    }

    #[test]
    fn the_lock_files_of_the_repository_and_its_worktrees_are_found() {
        let (_d, place) = place();
        let common = &place.common_dir;
        for lock in [
            "index.lock",
            "HEAD.lock",
            "config.lock",
            "refs/heads/ralph/item-a.lock",
            "worktrees/item-a/index.lock",
            "objects/ab/not-a-lock-folder.lock",
        ] {
            std::fs::write(common.join(lock), "").unwrap();
        }
        std::fs::write(common.join("index"), "").unwrap();
        let found: Vec<String> = find(&place).iter().map(|l| place.shown(&l.path)).collect();
        assert_eq!(
            found,
            [
                ".git/HEAD.lock",
                ".git/config.lock",
                ".git/index.lock",
                ".git/refs/heads/ralph/item-a.lock",
                ".git/worktrees/item-a/index.lock"
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_lock_nothing_holds_goes_and_an_open_one_or_ours_stays() {
        let (_d, place) = place();
        let common = place.common_dir.clone();
        for lock in ["index.lock", "HEAD.lock", "config.lock"] {
            std::fs::write(common.join(lock), "").unwrap();
        }
        std::fs::write(common.join("config.lock"), "# ours\n").unwrap();
        // A process of the person's holds HEAD.lock open.
        let mut holder = std::process::Command::new("sh")
            .arg("-c")
            .arg("exec 3<HEAD.lock; read -r _")
            .current_dir(&common)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Its fd 3 is the lock (a count of its fds would also see what it
        // inherited from this test binary's other threads).
        let opened = || {
            std::fs::read_link(format!("/proc/{}/fd/3", holder.id()))
                .is_ok_and(|target| target.ends_with("HEAD.lock"))
        };
        let until = Instant::now() + Duration::from_secs(5);
        while !opened() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let ours =
            |path: &Path| std::fs::read_to_string(path).is_ok_and(|t| t.starts_with("# ours"));
        let fates: Vec<(String, Fate)> = clear(&place, &ours)
            .into_iter()
            .map(|(lock, fate)| (place.shown(&lock.path), fate))
            .collect();
        drop(holder.stdin.take());
        let _ = holder.wait();
        assert_eq!(fates.len(), 2, "{fates:?}");
        assert_eq!(fates[1], (".git/index.lock".to_string(), Fate::Removed));
        assert_eq!(fates[0].0, ".git/HEAD.lock");
        assert!(
            matches!(&fates[0].1, Fate::Kept(why) if why.contains("has it open")),
            "{fates:?}"
        );
        assert!(!common.join("index.lock").exists());
        assert!(common.join("HEAD.lock").exists());
        assert!(common.join("config.lock").exists(), "ours is left alone");
    }
}
