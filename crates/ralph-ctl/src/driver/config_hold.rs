//! The repository's `.git/config.lock`, held by a queue run while its
//! workers' clients run sandboxed. 2.1.330's sandbox keeps the
//! repository's git configuration read-only: when a Bash call starts it
//! lists `config.lock` among the paths to mount over, creates it as a mount
//! point when it is missing and removes it after. Two workers whose calls
//! start together race on that file, and the loser's command fails before
//! it runs (`bwrap: Can't find source path …/.git/config.lock`). With the
//! lock file there for the whole run, no client creates or removes it and
//! the race is gone. Meanwhile a git that writes the configuration (`git
//! config`, `git branch -D`, `git remote add`) fails as it does while any
//! git holds it ("could not lock config file"); the run says so at its
//! start.
//!
//! Every `run --queue` process on the repository shares the hold (a shared
//! `flock` on a file beside the lock, so that two projects in one
//! repository count together); the last to leave removes the lock file,
//! and only one that says ralph holds it. One left by a run
//! that was killed is taken over by the next queue run, which removes it
//! when it ends.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fs2::FileExt;

/// The first line ralph writes into the lock file it holds: what a person
/// who finds it reads, and how a later run knows it is ralph's.
const MARK: &str = "# held by ralph-ctl run --queue";

/// How long a lock file that is not ralph's (a git writing the
/// configuration) is waited for before the run goes without the hold.
const FOREIGN_WAIT: Duration = Duration::from_secs(3);

/// The name of the file beside the lock file whose shared locks count the
/// processes that hold it.
const HOLDERS_FILE: &str = "ralph-config-holders";

/// How long a joining process waits for the holders' file (a process that
/// is leaving holds it a moment).
const HOLDERS_WAIT: Duration = Duration::from_secs(5);

/// A queue process's share of the hold: released (and the lock file
/// removed when no other process shares it) when dropped.
#[derive(Debug)]
pub(crate) struct ConfigHold {
    holders: Option<File>,
    holders_path: PathBuf,
    lock: PathBuf,
}

/// Why the lock file could not be held: the run goes on without it, and
/// the person is told this.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct NotHeld(pub(crate) String);

/// Takes (or joins) the hold on `git_dir`'s `config.lock` (the
/// repository's common git folder).
pub(crate) fn hold(git_dir: &Path) -> Result<ConfigHold, NotHeld> {
    let lock = git_dir.join("config.lock");
    let not_held = |why: String| {
        NotHeld(format!(
            "{why}: the workers' sandboxed commands may fail now and then when two start at once \
             (`bwrap: Can't find source path …/config.lock`)"
        ))
    };
    let holders_path = git_dir.join(HOLDERS_FILE);
    let holders = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&holders_path)
        .map_err(|e| not_held(format!("cannot open {}: {e}", holders_path.display())))?;
    // Waits for a process that is leaving (and may be removing the file).
    let waited_until = Instant::now() + HOLDERS_WAIT;
    while let Err(e) = holders.try_lock_shared() {
        if Instant::now() >= waited_until {
            return Err(not_held(format!(
                "cannot lock {}: {e}",
                holders_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + FOREIGN_WAIT;
    loop {
        match OpenOptions::new().write(true).create_new(true).open(&lock) {
            Ok(mut file) => {
                let text = format!(
                    "{MARK} (process {}) while its workers' clients run sandboxed; it goes when \
                     the run ends, and may be removed by hand when no ralph-ctl runs\n",
                    std::process::id()
                );
                if let Err(e) = file.write_all(text.as_bytes()) {
                    let _ = std::fs::remove_file(&lock);
                    return Err(not_held(format!("cannot write {}: {e}", lock.display())));
                }
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if is_ralphs(&lock) {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(not_held(format!(
                        "{} is held by another program (a git writing the repository's \
                         configuration, or one that stopped midway: remove it if no git runs)",
                        lock.display()
                    )));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(not_held(format!("cannot create {}: {e}", lock.display()))),
        }
    }
    Ok(ConfigHold {
        holders: Some(holders),
        holders_path,
        lock,
    })
}

/// The hold on the project's repository's `.git/config.lock` (its common
/// git folder's) for a queue run, said on stderr, or `None` (and why, said)
/// when it cannot be had.
pub(crate) fn for_project(paths: &ralph_core::paths::ProjectPaths) -> Option<ConfigHold> {
    // The common folder as ralph finds it (never where a `commondir` the
    // agent wrote would send git).
    let git_dir = match ralph_core::own_git::GitPlace::find(&paths.root) {
        Ok(place) => place.common_dir,
        Err(e) => {
            super::say(&format!("warning: {e}"));
            return None;
        }
    };
    match hold(&git_dir) {
        Ok(hold) => {
            super::say(
                "git: .git/config.lock is held while the workers' clients run sandboxed (their \
                 sandboxes race on it otherwise); until the run ends, `git config` in this \
                 repository fails with \"could not lock config file\"",
            );
            Some(hold)
        }
        Err(NotHeld(why)) => {
            super::say(&format!("warning: {why}"));
            None
        }
    }
}

/// What a look at the hold found ([`look`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Looked {
    /// No lock file of ralph's.
    Nothing,
    /// A running queue run holds it.
    Held,
    /// It was left by a queue run killed outright, and is gone now.
    Removed,
}

/// The hold on `git_dir`'s `config.lock` as a ralph command finds it: a
/// lock file of ralph's that no process shares any more (a queue run killed
/// outright keeps no `flock`) is removed, under the exclusive lock that
/// keeps a joining run from taking it up meanwhile; one a live run holds is
/// left.
pub(crate) fn look(git_dir: &Path) -> Looked {
    let lock = git_dir.join("config.lock");
    if !is_ralphs(&lock) {
        return Looked::Nothing;
    }
    let holders_path = git_dir.join(HOLDERS_FILE);
    let Ok(holders) = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&holders_path)
    else {
        return Looked::Held;
    };
    if holders.try_lock_exclusive().is_err() {
        return Looked::Held;
    }
    let removed = is_ralphs(&lock) && std::fs::remove_file(&lock).is_ok();
    let _ = holders.unlock();
    if removed {
        Looked::Removed
    } else {
        Looked::Nothing
    }
}

/// [`look`] for the project's repository, and a sandbox's exclude block
/// no run holds ([`super::sandbox_mounts::clear_abandoned`]), as the lines
/// a person reads (`None`: nothing to say): what every command that looks
/// (status, reset, doctor, run) says.
pub(crate) fn looked_at(paths: &ralph_core::paths::ProjectPaths) -> Option<String> {
    // The exclude block a sandboxed run killed outright left goes too.
    let block = super::sandbox_mounts::clear_abandoned(paths);
    let lock = lock_looked_at(paths);
    match (lock, block) {
        (Some(lock), Some(block)) => Some(format!("{lock}\n{block}")),
        (lock, block) => lock.or(block),
    }
}

/// [`looked_at`] for `config.lock` alone.
fn lock_looked_at(paths: &ralph_core::paths::ProjectPaths) -> Option<String> {
    let git_dir = ralph_core::own_git::GitPlace::find(&paths.root)
        .ok()?
        .common_dir;
    let lock = git_dir.join("config.lock");
    match look(&git_dir) {
        Looked::Nothing => None,
        Looked::Held => Some(format!(
            "git: {} is held by a running queue run (its workers' sandboxes race on it \
             otherwise): `git config` in this repository fails until the run ends",
            lock.display()
        )),
        Looked::Removed => Some(format!(
            "git: removed {}, left by a queue run that was stopped outright (no ralph-ctl held \
             it any more): `git config` works again",
            lock.display()
        )),
    }
}

/// Whether the lock file at `lock` is one ralph holds (or held): the lock
/// files left in `.git` that ralph removes never include it.
pub(crate) fn is_ralphs(lock: &Path) -> bool {
    std::fs::read_to_string(lock).is_ok_and(|text| text.starts_with(MARK))
}

impl Drop for ConfigHold {
    fn drop(&mut self) {
        // This process's share goes first; then, if no other process holds
        // one, the lock file goes, under the exclusive lock that keeps a
        // joining process from taking it up meanwhile.
        drop(self.holders.take());
        let Ok(holders) = OpenOptions::new().write(true).open(&self.holders_path) else {
            return;
        };
        if holders.try_lock_exclusive().is_ok() {
            if is_ralphs(&self.lock) {
                let _ = std::fs::remove_file(&self.lock);
            }
            let _ = holders.unlock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn places(label: &str) -> (tempfile::TempDir, PathBuf) {
        let tmp = crate::testdir::new(label);
        let git = tmp.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        (tmp, git)
    }

    #[test]
    fn the_lock_file_is_there_while_held_and_gone_after() {
        let (_tmp, git) = places("hold-one");
        let lock = git.join("config.lock");
        let hold = hold(&git).unwrap();
        let text = std::fs::read_to_string(&lock).unwrap();
        assert!(text.starts_with(MARK), "{text}");
        // git cannot take it meanwhile.
        assert!(
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
                .is_err()
        );
        drop(hold);
        assert!(!lock.exists());
    }

    #[test]
    fn the_last_holder_removes_it() {
        let (_tmp, git) = places("hold-two");
        let lock = git.join("config.lock");
        let first = hold(&git).unwrap();
        let second = hold(&git).unwrap();
        drop(first);
        assert!(lock.exists(), "the second still holds it");
        drop(second);
        assert!(!lock.exists());
    }

    #[test]
    fn one_left_by_a_killed_run_is_taken_over_and_removed() {
        let (_tmp, git) = places("hold-stale");
        let lock = git.join("config.lock");
        std::fs::write(&lock, format!("{MARK} (process 1) …\n")).unwrap();
        let hold = hold(&git).unwrap();
        drop(hold);
        assert!(!lock.exists());
    }

    #[test]
    fn a_look_removes_a_lock_no_run_holds_and_leaves_a_held_one() {
        let (_tmp, git) = places("hold-look");
        let lock = git.join("config.lock");
        assert_eq!(look(&git), Looked::Nothing);
        let held = hold(&git).unwrap();
        assert_eq!(look(&git), Looked::Held);
        assert!(lock.exists());
        drop(held);
        // A run killed outright: its file stays, its share of the hold
        // (the flock) went with the process.
        std::fs::write(&lock, format!("{MARK} (process 1) …\n")).unwrap();
        assert_eq!(look(&git), Looked::Removed);
        assert!(!lock.exists());
        std::fs::write(&lock, "[core]\n").unwrap();
        assert_eq!(
            look(&git),
            Looked::Nothing,
            "another program's lock is left"
        );
        assert!(lock.exists());
    }

    #[test]
    fn another_program_s_lock_is_left_alone_and_named() {
        let (_tmp, git) = places("hold-foreign");
        let lock = git.join("config.lock");
        std::fs::write(&lock, "[core]\n\tbare = false\n").unwrap();
        let NotHeld(why) = hold(&git).unwrap_err();
        assert!(why.contains("held by another program"), "{why}");
        assert!(why.contains("config.lock"), "{why}");
        assert_eq!(
            std::fs::read_to_string(&lock).unwrap(),
            "[core]\n\tbare = false\n"
        );
    }

    #[test]
    fn a_git_that_finishes_within_the_wait_is_waited_for() {
        let (_tmp, git) = places("hold-wait");
        let lock = git.join("config.lock");
        std::fs::write(&lock, "[core]\n").unwrap();
        let gone = lock.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            std::fs::remove_file(gone).unwrap();
        });
        let hold = hold(&git).unwrap();
        writer.join().unwrap();
        assert!(is_ralphs(&lock));
        drop(hold);
        assert!(!lock.exists());
    }
}
