//! The entries the client's sandbox mounts at the project's top, kept out
//! of git's view while a sandboxed run is on.
//!
//! 2.1.330's sandbox protects a list of dotfiles and folders by mounting
//! over them in the command's folder, creating what is missing as a mount
//! point: inside the sandbox `git status` lists up to 22 untracked entries
//! that do not exist outside it (11 of them in `.claude`), and `git add -A` fails on the first
//! (`.bash_profile: can only add regular files, symbolic links or
//! git-directories`). The agent is told to commit its work; with this block
//! in the repository's `info/exclude` (written outside the sandbox, where
//! the agent cannot), `git add -A && git commit` works as written. Only
//! names the project does not have are listed, anchored at the project's
//! folder, and the block goes when the run ends, so the person's own `git
//! add` of a new `.vscode/` later is never silently skipped.

use std::path::{Path, PathBuf};

use ralph_core::own_git::GitPlace;
use ralph_core::paths::ProjectPaths;

/// What 2.1.330's sandbox mounts (`/dev/null`, a character device) in
/// the folder a command runs in, and in its `.claude`, where they are
/// missing (docs/protocol-notes.md).
pub(crate) const SANDBOX_MOUNTS: [&str; 22] = [
    ".bash_profile",
    ".bashrc",
    ".gitconfig",
    ".gitmodules",
    ".idea",
    ".mcp.json",
    ".profile",
    ".ripgreprc",
    ".vscode",
    ".zprofile",
    ".zshrc",
    ".claude/agents",
    ".claude/commands",
    ".claude/hooks",
    ".claude/launch.json",
    ".claude/loop.md",
    ".claude/output-styles",
    ".claude/routines",
    ".claude/scheduled_tasks.json",
    ".claude/settings.local.json",
    ".claude/skills",
    ".claude/workflows",
];

/// The block written for a run, and this process's share of it (a shared
/// `flock` on a file beside `info/exclude`'s folder): the last run to
/// leave removes the block when this is dropped.
#[derive(Debug)]
pub(crate) struct Excluded {
    file: PathBuf,
    begin: String,
    holders: Option<std::fs::File>,
    holders_path: PathBuf,
}

/// The file beside `info/` whose shared locks count the runs that hold a
/// block (as `config_hold` counts the holders of `config.lock`).
const HOLDERS_FILE: &str = "ralph-exclude-holders";

/// The first line of the block for the project at `relative` (from the
/// checkout's top): each project in a repository has its own.
fn begin_line(relative: &str) -> String {
    format!("# >>> ralph: the client's sandbox's mount points in /{relative} (while a run is on)")
}

const END_LINE: &str = "# <<< ralph";

/// `text` without the block that starts with `begin` (the whole block, to
/// its end line).
fn without_block(text: &str, begin: &str) -> String {
    let mut kept = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == begin {
            inside = true;
            continue;
        }
        if inside {
            if line == END_LINE {
                inside = false;
            }
            continue;
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// `info/exclude`'s text: empty when it is missing; an error when it is
/// anything but a regular file (a link the agent planted would have ralph
/// read, and then write, a file of the person's).
fn read_exclude(file: &Path) -> std::io::Result<String> {
    match std::fs::symlink_metadata(file) {
        Ok(meta) if meta.file_type().is_file() => std::fs::read_to_string(file),
        Ok(_) => Err(std::io::Error::other("it is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Writes `text` to `file` whole: a new temp file of a random name in its
/// folder (never one that exists, never through a link), renamed over it.
fn write_whole(file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    let folder = file.parent().unwrap_or(Path::new("."));
    let mut temp = tempfile::Builder::new()
        .prefix(".ralph-exclude-")
        .tempfile_in(folder)?;
    temp.write_all(text.as_bytes())?;
    temp.persist(file).map(|_| ()).map_err(|e| e.error)
}

/// Opens the holders' file at `path` for writing, made when it is missing,
/// never through a link: `.git` is the agent's to write, and a link it put
/// there (or anything else that is no regular file) is removed and a file
/// made in its place, so ralph never makes or locks a file of the
/// person's elsewhere. The file opened is the one looked at.
fn open_holders(path: &Path) -> std::io::Result<std::fs::File> {
    for _ in 0..3 {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.file_type().is_file() => {
                let file = std::fs::OpenOptions::new().write(true).open(path)?;
                if same_file(&file.metadata()?, &meta) {
                    return Ok(file);
                }
                continue;
            }
            Ok(_) => std::fs::remove_file(path)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        // `create_new` makes the file or fails: it never follows a link.
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(file) => return Ok(file),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other(format!(
        "{} kept changing while it was opened",
        path.display()
    )))
}

/// Whether two metadata are of the same file (its device and inode).
#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Off unix, the look before the open alone tells.
#[cfg(not(unix))]
fn same_file(_a: &std::fs::Metadata, _b: &std::fs::Metadata) -> bool {
    true
}

/// Takes this process's share of the block's hold, waiting a moment for a
/// run that is leaving (and may be removing it).
fn share(holders_path: &Path) -> std::io::Result<std::fs::File> {
    let holders = open_holders(holders_path)?;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match holders.try_lock_shared() {
            Ok(()) => return Ok(holders),
            Err(_) if std::time::Instant::now() < until => {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
    }
}

/// Removes the block starting with `begin` from `file` when no run holds
/// it any more; true when a block was there and went. The holders' file is
/// in `.git`, which the agent can write: a run's share is its lock on the
/// file it opened, whose inode the block names, so a file deleted, renamed
/// or replaced under live runs is still held by them ([`held_elsewhere`],
/// on Linux). The exclusive lock keeps a joining run from writing its
/// block meanwhile.
fn remove_unheld(file: &Path, begin: &str, holders_path: &Path) -> bool {
    use fs2::FileExt;
    if !read_exclude(file).is_ok_and(|text| text.lines().any(|l| l == begin)) {
        return false;
    }
    // Made again when the agent removed it: the block goes all the same.
    let Ok(holders) = open_holders(holders_path) else {
        return false;
    };
    if holders.try_lock_exclusive().is_err() {
        return false;
    }
    let inodes = read_exclude(file).map_or_else(|_| Vec::new(), |text| inodes_of(&text, begin));
    let removed = !held_elsewhere(&inodes, &holders)
        && match read_exclude(file) {
            Ok(text) if text.lines().any(|l| l == begin) => {
                write_whole(file, &without_block(&text, begin)).is_ok()
            }
            _ => false,
        };
    let _ = holders.unlock();
    removed
}

/// The line of a block naming the inode of a holders' file a run took its
/// share on (a comment to git): a file removed or renamed since is still
/// found by its inode.
const INODE_LINE: &str = "# ralph: held through inode ";

/// The inodes the block starting with `begin` in `text` names.
fn inodes_of(text: &str, begin: &str) -> Vec<u64> {
    text.lines()
        .skip_while(|line| *line != begin)
        .take_while(|line| *line != END_LINE)
        .filter_map(|line| line.strip_prefix(INODE_LINE)?.parse().ok())
        .collect()
}

/// The inode of `file`, where there are inodes.
fn inode_of(file: &std::fs::File) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        file.metadata().ok().map(|meta| meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        None
    }
}

/// Whether a process holds a `flock` on a holders' file of the block (its
/// `inodes`) other than `ours`, which this process holds exclusively (so no
/// other lock is on it): a run's share, on a file removed or renamed since.
/// Only a lock counts, never a file merely open (another look's, for a
/// moment). Linux's `/proc/locks` names each lock's `MAJ:MIN:INODE`; the
/// inode alone is matched, as the device a file's `stat` gives differs from
/// the lock's on some file systems (btrfs, overlayfs), and a stray match
/// only keeps the block until the next look.
#[cfg(target_os = "linux")]
fn held_elsewhere(inodes: &[u64], ours: &std::fs::File) -> bool {
    let ours = inode_of(ours);
    let others: Vec<u64> = inodes
        .iter()
        .copied()
        .filter(|inode| Some(*inode) != ours)
        .collect();
    if others.is_empty() {
        return false;
    }
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return false;
    };
    flocked_inodes(&locks).any(|inode| others.contains(&inode))
}

/// The inodes `/proc/locks` (its text, `locks`) shows a `flock` held on
/// (`1: FLOCK  ADVISORY  WRITE 1234 08:01:123456 0 EOF`; a waiter's line,
/// `1: -> FLOCK …`, holds nothing).
#[cfg(any(target_os = "linux", test))]
fn flocked_inodes(locks: &str) -> impl Iterator<Item = u64> + '_ {
    locks.lines().filter_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        if fields.next()? != "FLOCK" {
            return None;
        }
        let place = fields.nth(3)?;
        place.rsplit(':').next()?.parse().ok()
    })
}

/// Off Linux there is no `/proc/locks` to read: the lock on the file at
/// the holders' path alone tells.
#[cfg(not(target_os = "linux"))]
fn held_elsewhere(_inodes: &[u64], _ours: &std::fs::File) -> bool {
    false
}

/// Where the block of the project at `paths` lives: the project's folder
/// from the checkout's top, the repository's `info/exclude`, and the
/// holders' file beside `info/`. `None` outside git.
fn place_of(paths: &ProjectPaths) -> Option<(String, PathBuf, PathBuf)> {
    let place = GitPlace::find(&paths.root).ok()?;
    let root = std::fs::canonicalize(&paths.root).ok()?;
    let top = std::fs::canonicalize(&place.work_tree).ok()?;
    let relative = root.strip_prefix(&top).ok()?.to_string_lossy().into_owned();
    Some((
        relative,
        place.common_dir.join("info").join("exclude"),
        place.common_dir.join(HOLDERS_FILE),
    ))
}

/// A block a run killed outright left (no run holds it), removed, and the
/// line that says so: what the commands that look (`status`, `reset`,
/// `doctor`, `run`) say.
pub(crate) fn clear_abandoned(paths: &ProjectPaths) -> Option<String> {
    let (relative, file, holders_path) = place_of(paths)?;
    remove_unheld(&file, &begin_line(&relative), &holders_path).then(|| {
        format!(
            "git: removed the block of the client's sandbox's mount points from {}, left by a \
             run that was stopped outright",
            file.display()
        )
    })
}

/// The block for the project at `paths` in its repository's
/// `info/exclude`: the sandbox's mount points the project does not have,
/// anchored at its folder. `None`, and nothing written, outside git or
/// when every name exists; a write that fails is said, never fatal.
pub(crate) fn exclude(paths: &ProjectPaths) -> Option<Excluded> {
    let (relative, file, holders_path) = place_of(paths)?;
    let names: Vec<&str> = SANDBOX_MOUNTS
        .into_iter()
        .filter(|name| std::fs::symlink_metadata(paths.root.join(name)).is_err())
        .collect();
    if names.is_empty() {
        return None;
    }
    let folder = if relative.is_empty() {
        String::new()
    } else {
        format!("{relative}/")
    };
    let begin = begin_line(&relative);
    let mut block = format!("{begin}\n");
    for name in names {
        block.push_str(&format!("/{folder}{name}\n"));
    }
    let info = file.parent().unwrap_or(Path::new("."));
    let written = std::fs::create_dir_all(info)
        .and_then(|()| share(&holders_path))
        .and_then(|holders| {
            let before = read_exclude(&file)?;
            // The inodes other runs hold the block through stay named.
            let mut inodes = inodes_of(&before, &begin);
            inodes.extend(inode_of(&holders));
            inodes.sort_unstable();
            inodes.dedup();
            let mut block = block.clone();
            for inode in inodes {
                block.push_str(&format!("{INODE_LINE}{inode}\n"));
            }
            block.push_str(END_LINE);
            block.push('\n');
            write_whole(&file, &(without_block(&before, &begin) + &block))?;
            Ok(holders)
        });
    match written {
        Ok(holders) => Some(Excluded {
            file,
            begin,
            holders: Some(holders),
            holders_path,
        }),
        Err(e) => {
            super::say(&format!(
                "warning: cannot write {}: {e}; inside the sandbox `git add -A` may fail on the \
                 entries it mounts (.bash_profile …): add files by name",
                file.display()
            ));
            None
        }
    }
}

impl Drop for Excluded {
    fn drop(&mut self) {
        // This run's share goes first; the block goes when no other run
        // (a joined queue process) still holds one.
        drop(self.holders.take());
        remove_unheld(&self.file, &self.begin, &self.holders_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;

    #[test]
    fn the_block_lists_what_is_missing_and_goes_with_the_run() {
        let tmp = crate::testdir::new("sandbox-mounts");
        let root = tmp.path().join("repo");
        let project = root.join("sub");
        std::fs::create_dir_all(project.join(".vscode")).unwrap();
        sh(&root, &["init", "-q"]);
        let file = root.join(".git/info/exclude");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "# the person's\n*.log\n").unwrap();
        let paths = ProjectPaths::new(&project);
        let held = exclude(&paths).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.starts_with("# the person's\n*.log\n# >>> ralph"),
            "{text}"
        );
        assert!(text.contains("\n/sub/.bash_profile\n"), "{text}");
        assert!(!text.contains(".vscode"), "the project has one: {text}");
        // A second run's block replaces the first's, never doubles it, and
        // stays while either run holds it.
        let again = exclude(&paths).unwrap();
        let twice = std::fs::read_to_string(&file).unwrap();
        assert_eq!(twice.matches("# >>> ralph").count(), 1, "{twice}");
        drop(again);
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph")
        );
        assert_eq!(clear_abandoned(&paths), None, "held by the first run");
        drop(held);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "# the person's\n*.log\n"
        );
        // A run killed outright leaves its block: the next look removes it.
        let killed = exclude(&paths).unwrap();
        std::mem::forget(killed);
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph")
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_block_goes_whatever_the_agent_did_to_the_holders_file() {
        let tmp = crate::testdir::new("sandbox-mounts-holders");
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        sh(&root, &["init", "-q"]);
        let paths = ProjectPaths::new(&root);
        let file = root.join(".git/info/exclude");
        let holders = root.join(".git").join(HOLDERS_FILE);
        // The agent removes the holders' file while the run holds it: the
        // run's open share still holds the block, and its end removes it.
        let held = exclude(&paths).unwrap();
        std::fs::remove_file(&holders).unwrap();
        assert_eq!(clear_abandoned(&paths), None, "a live run holds it");
        assert!(
            std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph")
        );
        drop(held);
        assert!(
            !std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph"),
            "the run's end removed it"
        );
        // A new file in its place (the agent's, locked by no one): the
        // live run still holds the block, and its end removes it.
        let held = exclude(&paths).unwrap();
        std::fs::remove_file(&holders).unwrap();
        std::fs::write(&holders, "").unwrap();
        assert_eq!(clear_abandoned(&paths), None, "a live run holds it");
        drop(held);
        assert!(
            !std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph")
        );
        // A block left with no holders' file at all goes at the next look.
        std::fs::remove_file(&holders).unwrap();
        let block = format!("{}\n/.bashrc\n{END_LINE}\n", begin_line(""));
        std::fs::write(&file, format!("*.log\n{block}")).unwrap();
        assert!(
            clear_abandoned(&paths)
                .unwrap()
                .contains("removed the block")
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "*.log\n");
        // The file renamed while the run holds it: still held, by the
        // run's lock on it, and its end removes the block.
        let held = exclude(&paths).unwrap();
        std::fs::rename(&holders, root.join(".git/moved")).unwrap();
        assert_eq!(clear_abandoned(&paths), None, "a live run holds it");
        drop(held);
        assert!(
            !std::fs::read_to_string(&file)
                .unwrap()
                .contains("# >>> ralph"),
            "the run's end removed it"
        );
        // A file open without a lock (another look's, for a moment) holds
        // nothing: a block no run holds goes.
        std::fs::write(&file, format!("*.log\n{block}")).unwrap();
        let looking = std::fs::File::open(&holders).unwrap();
        assert!(
            clear_abandoned(&paths)
                .unwrap()
                .contains("removed the block")
        );
        drop(looking);
    }

    #[test]
    fn only_a_held_flock_names_its_inode() {
        let locks = "1: POSIX  ADVISORY  WRITE 812 00:1b:77 0 EOF\n\
                     2: FLOCK  ADVISORY  READ 900 fd:01:123456 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 901 fd:01:654321 0 EOF\n\
                     3: OFDLCK ADVISORY  READ -1 00:05:99 0 EOF\n";
        assert_eq!(flocked_inodes(locks).collect::<Vec<_>>(), [123456]);
    }

    #[cfg(unix)]
    #[test]
    fn a_link_in_the_holders_file_s_place_is_never_followed() {
        let tmp = crate::testdir::new("sandbox-mounts-holders-link");
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        sh(&root, &["init", "-q"]);
        let paths = ProjectPaths::new(&root);
        let file = root.join(".git/info/exclude");
        let holders = root.join(".git").join(HOLDERS_FILE);
        // The agent's link, to a file of the person's that is not there
        // yet: ralph never makes it, whether a run starts or looks.
        let planted = tmp.path().join("planted");
        std::os::unix::fs::symlink(&planted, &holders).unwrap();
        let block = format!("{}\n/.bashrc\n{END_LINE}\n", begin_line(""));
        std::fs::write(&file, format!("*.log\n{block}")).unwrap();
        assert!(
            clear_abandoned(&paths)
                .unwrap()
                .contains("removed the block")
        );
        assert!(!planted.exists(), "made through the link");
        std::fs::remove_file(&holders).ok();
        std::os::unix::fs::symlink(&planted, &holders).unwrap();
        let held = exclude(&paths).unwrap();
        assert!(!planted.exists(), "made through the link");
        assert!(
            std::fs::symlink_metadata(&holders)
                .unwrap()
                .file_type()
                .is_file()
        );
        drop(held);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "*.log\n");
    }

    #[test]
    fn a_block_no_run_holds_goes_at_the_next_look_and_a_link_is_never_followed() {
        let tmp = crate::testdir::new("sandbox-mounts-left");
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(&root).unwrap();
        sh(&root, &["init", "-q"]);
        let paths = ProjectPaths::new(&root);
        let file = root.join(".git/info/exclude");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "").unwrap();
        // What a run killed outright leaves: the block, and no flock.
        let block = format!("{}\n/.bashrc\n{END_LINE}\n", begin_line(""));
        std::fs::write(&file, format!("*.log\n{block}")).unwrap();
        std::fs::write(root.join(".git").join(HOLDERS_FILE), "").unwrap();
        assert!(
            clear_abandoned(&paths)
                .unwrap()
                .contains("removed the block")
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "*.log\n");
        // A link in exclude's place is the agent's: nothing is read or written through it.
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "the person's\n").unwrap();
        std::fs::remove_file(&file).unwrap();
        std::os::unix::fs::symlink(&secret, &file).unwrap();
        assert!(exclude(&paths).is_none());
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "the person's\n");
    }
}
