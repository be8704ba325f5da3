//! The repository's `.git` tidied after a loop's agent (a plain loop's end,
//! a queue item's before it lands, a queue run's end): a file that sends
//! git elsewhere and differs from the loop's start is put back (removed
//! when it was not there), and a lock file no process holds is removed
//! (`ralph_core::own_git`). ralph's own git never went through
//! either; the person's next `git status` would have: it would have run
//! the programs the other folder's configuration names, or failed on the
//! lock. Each file is named on stderr and in the loop's audit log (a `git`
//! line).

use ralph_core::events::Event;
use ralph_core::own_git::{self, GitPlace, PlaceError, record::GitRecord};
use ralph_core::paths::ProjectPaths;
use ralph_core::transaction::{self, Whose};

use super::{config_hold, say};
use crate::error::CtlError;

/// What the tidying found.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Tidied {
    /// Each file that sent git elsewhere, what was found and what became
    /// of it: the loop's agent changed what git follows.
    pub(crate) put_back: Vec<String>,
    /// Each lock file left in `.git` and what became of it.
    pub(crate) locks: Vec<String>,
}

/// Tidies the repository of the loop at `paths` against `record`, its
/// start's (`None`: a loop from before records, or outside git: the lock
/// files only); says and logs each file. With `worktree`, a queue item's
/// (its worktree's name), the other worktrees' files are left to their
/// own items' workers.
pub(crate) fn after_loop(
    paths: &ProjectPaths,
    record: Option<&GitRecord>,
    worktree: Option<&str>,
) -> Tidied {
    let put_back = match record {
        Some(record) => {
            let mut changes = own_git::record::changes(&paths.root, record);
            if let Some(name) = worktree {
                changes.retain(|change| concerns(paths, record, &change.path, name));
            }
            own_git::record::restore(&changes)
        }
        None => Vec::new(),
    };
    let locks = match GitPlace::find(&paths.root) {
        Ok(place) => own_git::locks::clear(&place, &config_hold::is_ralphs)
            .iter()
            .map(|(lock, fate)| own_git::locks::describe(&place, lock, fate))
            .collect(),
        Err(PlaceError::NoRepository(_)) => Vec::new(),
        Err(e) => vec![format!("lock files not looked for: {e}")],
    };
    let lines: Vec<String> = put_back
        .iter()
        .chain(&locks)
        .map(|line| format!("git: {line}"))
        .collect();
    for line in &lines {
        say(line);
    }
    if !lines.is_empty() {
        let logged = transaction::change(paths, Whose::Any, |draft| {
            for line in &lines {
                draft.apply(Event::GitTidied(line.clone()));
            }
            Ok::<_, CtlError>(())
        });
        if let Err(e) = logged {
            say(&format!(
                "warning: the lines above could not be logged: {e}"
            ));
        }
    }
    Tidied { put_back, locks }
}

/// Whether `path` is the business of the item working in worktree `name`:
/// anything but another worktree's record or folder.
fn concerns(paths: &ProjectPaths, record: &GitRecord, path: &std::path::Path, name: &str) -> bool {
    let worktrees = [
        record.common_dir.join("worktrees"),
        paths.root.join(own_git::WORKTREES_DIR),
    ];
    !worktrees.iter().any(|folder| {
        path.strip_prefix(folder)
            .ok()
            .and_then(|rest| rest.components().next())
            .is_some_and(|first| first.as_os_str() != name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::git_as_person as sh;

    #[test]
    fn what_the_agent_left_in_git_is_put_back_said_and_logged() {
        let dir = crate::testdir::new("git-tidy");
        let root = dir.path().to_path_buf();
        sh(&root, &["init", "-q", "-b", "main"]);
        sh(&root, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let paths = ProjectPaths::new(&root);
        let record = own_git::record::record(&GitPlace::find(&root).unwrap());
        let mut state = ralph_core::judge::state::LoopState::new(
            "s".into(),
            3,
            ralph_core::time::Timestamp::now(),
        );
        state.git_record = Some(record.clone());
        transaction::replace(&paths, |_| {
            Ok::<_, CtlError>(Event::Started {
                state: Box::new(state),
                why: "started".into(),
            })
        })
        .unwrap();
        std::fs::write(root.join(".git/commondir"), "/tmp/evil\n").unwrap();
        std::fs::write(root.join(".git/index.lock"), "").unwrap();
        std::fs::write(root.join(".git/HEAD.lock"), "").unwrap();
        let tidied = after_loop(&paths, Some(&record), None);
        assert_eq!(
            tidied.put_back,
            [".git/commondir appeared (it holds `/tmp/evil`): removed"]
        );
        assert_eq!(tidied.locks.len(), 2, "{tidied:?}");
        assert!(
            tidied.locks[0].starts_with("removed .git/HEAD.lock")
                && tidied.locks[1].starts_with("removed .git/index.lock"),
            "{tidied:?}"
        );
        assert!(!root.join(".git/commondir").exists());
        assert!(!root.join(".git/index.lock").exists());
        // The person's git works again.
        sh(&root, &["commit", "-q", "--allow-empty", "-m", "two"]);
        let log = std::fs::read_to_string(ralph_core::persist::log::log_path(&paths.state_file()))
            .unwrap();
        assert_eq!(log.matches("\"event\":\"git\"").count(), 3, "{log}");
        assert!(log.contains(".git/commondir appeared"), "{log}");
        // Nothing left: nothing said.
        assert_eq!(after_loop(&paths, Some(&record), None), Tidied::default());
    }

    #[test]
    fn the_worktrees_ralph_removed_at_the_run_s_end_are_no_warning() {
        let dir = crate::testdir::new("git-tidy-removed");
        let root = dir.path().to_path_buf();
        sh(&root, &["init", "-q", "-b", "main"]);
        sh(&root, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let plan = crate::driver::worktree::plan(&root, None, false).unwrap();
        plan.create("item-US-001").unwrap();
        plan.create("item-US-002").unwrap();
        // The run's start found them (an earlier run's, kept); they land
        // and go, one removed and the other pruned once its folder went.
        let record = own_git::record::record(&GitPlace::find(&root).unwrap());
        sh(
            &root,
            &[
                "worktree",
                "remove",
                "--force",
                ".claude/worktrees/item-US-001",
            ],
        );
        std::fs::remove_dir_all(root.join(".claude/worktrees/item-US-002")).unwrap();
        sh(&root, &["worktree", "prune"]);
        let run = after_loop(&ProjectPaths::new(&root), Some(&record), None);
        assert_eq!(run, Tidied::default());
    }

    #[test]
    fn an_item_answers_for_its_own_worktree_and_the_shared_files_only() {
        let dir = crate::testdir::new("git-tidy-item");
        let root = dir.path().to_path_buf();
        sh(&root, &["init", "-q", "-b", "main"]);
        sh(&root, &["commit", "-q", "--allow-empty", "-m", "one"]);
        let plan = crate::driver::worktree::plan(&root, None, false).unwrap();
        plan.create("item-a").unwrap();
        plan.create("item-b").unwrap();
        let paths = ProjectPaths::new(&root).for_item("a");
        let record = own_git::record::record(&GitPlace::find(&root).unwrap());
        for name in ["item-a", "item-b"] {
            let file = root.join(format!(".git/worktrees/{name}/commondir"));
            std::fs::write(file, "/tmp/evil\n").unwrap();
        }
        let tidied = after_loop(&paths, Some(&record), Some("item-a"));
        assert_eq!(
            tidied.put_back,
            [
                ".git/worktrees/item-a/commondir changed (it holds `/tmp/evil`): put back as it was (`../..`)"
            ]
        );
        let b = root.join(".git/worktrees/item-b/commondir");
        assert_eq!(std::fs::read_to_string(b).unwrap(), "/tmp/evil\n");
        // The run's end puts back the rest.
        let run = after_loop(&ProjectPaths::new(&root), Some(&record), None);
        assert_eq!(run.put_back.len(), 1, "{run:?}");
    }
}
