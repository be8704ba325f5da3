use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::queue::claims::store::ItemStatus;
use crate::queue::source::Item;
use ralph_core::own_git::{GitError, SshCommand};
use ralph_core::time::Timestamp;

use super::record::{parse_record, prefix_of, ref_component};
use super::transport::CALL_TIMEOUT;
use super::*;
use crate::error::CtlError;
use crate::testdir::git_as_person as sh;

/// A bare remote and `n` clones of it, each with one commit on main.
pub(crate) fn clones(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("remote.git");
    sh(
        dir.path(),
        &["init", "-q", "--bare", "-b", "main", "remote.git"],
    );
    let first = dir.path().join("c0");
    sh(dir.path(), &["init", "-q", "-b", "main", "c0"]);
    std::fs::write(first.join("a.txt"), "a\n").unwrap();
    sh(&first, &["add", "-A"]);
    sh(&first, &["commit", "-q", "-m", "start"]);
    sh(
        &first,
        &["remote", "add", "origin", &bare.to_string_lossy()],
    );
    sh(&first, &["push", "-q", "origin", "main"]);
    let mut all = vec![first];
    for i in 1..n {
        let name = format!("c{i}");
        sh(dir.path(), &["clone", "-q", &bare.to_string_lossy(), &name]);
        all.push(dir.path().join(name));
    }
    (dir, all)
}

pub(crate) fn items(n: usize) -> Vec<Item> {
    (1..=n)
        .map(|i| Item {
            author: None,
            id: format!("item-{i}"),
            title: format!("task {i}"),
            body: String::new(),
            after: Vec::new(),
        })
        .collect()
}

pub(crate) fn book(root: &Path) -> RemoteBook {
    let remote = Remote::find(root, "origin").unwrap();
    RemoteBook::new(remote, &"plan:PLAN.md".parse().unwrap()).with_patience(Duration::from_secs(2))
}

const TTL: Duration = Duration::from_secs(60);

#[test]
fn two_clones_never_claim_one_item_and_each_sees_the_other_s_claims() {
    let (_dir, clones) = clones(2);
    let (a, b) = (book(&clones[0]), book(&clones[1]));
    let list = items(3);
    let first = a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
    let second = b.claim_next(&list, "2-1", TTL).unwrap().unwrap();
    assert_eq!(first.id, "item-1");
    assert_eq!(second.id, "item-2");
    let held = a.held(Timestamp::now()).unwrap();
    assert_eq!(held, vec!["item-1".to_string(), "item-2".to_string()]);
    // b's stale view of item-1 (read before a claimed it) is refused.
    let stale = b.claim_record(&list[0], "2-1", Timestamp::now(), TTL, None);
    assert!(matches!(b.put(&stale, None), Err(Refused::Rejected(_))));
    // A settled item is no one's to take; the records say who did what.
    assert!(
        a.settle(
            "item-1",
            ItemStatus::Done,
            &Ending {
                iterations: 2,
                landed: Some("abc".into()),
                ..Ending::default()
            }
        )
        .unwrap()
    );
    let records = b.read().unwrap();
    let (_, one) = &records["item-1"];
    assert_eq!(one.status, ItemStatus::Done);
    assert_eq!(one.iterations, Some(2));
    assert!(one.worker.ends_with("/1-1"), "{}", one.worker);
    assert_eq!(b.claim_next(&list[..1], "2-1", TTL).unwrap(), None);
}

#[test]
fn an_item_whose_dependency_has_no_done_record_is_not_claimed() {
    let (_dir, clones) = clones(2);
    let (a, b) = (book(&clones[0]), book(&clones[1]));
    let mut list = items(2);
    list[0].after = vec!["item-2".into()];
    let first = a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
    assert_eq!(first.id, "item-2");
    // Held on the remote, not landed: item-1 waits, on every machine.
    assert_eq!(b.claim_next(&list, "2-1", TTL).unwrap(), None);
    a.settle("item-2", ItemStatus::Done, &Ending::default())
        .unwrap();
    let next = b.claim_next(&list, "2-1", TTL).unwrap().unwrap();
    assert_eq!(next.id, "item-1");
}

#[test]
fn ids_of_any_text_are_claimed_each_under_a_ref_of_its_own() {
    let (_dir, clones) = clones(2);
    let (a, b) = (book(&clones[0]), book(&clones[1]));
    // Not valid in a ref, a file and a folder of one another, a ref's
    // own syntax, and text beyond ASCII.
    let ids = ["a b", "a", "a/b", "x..y.lock", "-dash", "élan", "sha256.00"];
    let list: Vec<Item> = ids
        .iter()
        .map(|id| Item {
            author: None,
            id: (*id).to_string(),
            title: format!("task {id}"),
            body: String::new(),
            after: Vec::new(),
        })
        .collect();
    let mut taken = Vec::new();
    for (n, book) in [&a, &b].iter().cycle().take(ids.len()).enumerate() {
        let item = book.claim_next(&list, &format!("{n}-1"), TTL).unwrap();
        taken.push(item.expect("an item is left to claim").id);
    }
    taken.sort();
    let mut want: Vec<String> = ids.iter().map(|s| (*s).to_string()).collect();
    want.sort();
    assert_eq!(taken, want);
    assert_eq!(a.claim_next(&list, "0-2", TTL).unwrap(), None);
    let records = b.read().unwrap();
    assert_eq!(records.keys().cloned().collect::<Vec<_>>(), want);
    assert_eq!(ref_component("item-1"), "item-1");
    assert!(ref_component("a b").starts_with("sha256."));
}

#[test]
fn a_lapsed_claim_is_taken_over_once_and_its_holder_learns_it_lost_it() {
    let (_dir, clones) = clones(3);
    let (a, b, c) = (book(&clones[0]), book(&clones[1]), book(&clones[2]));
    let list = items(1);
    let short_ttl = Duration::from_secs(0);
    assert!(a.claim_next(&list, "1-1", short_ttl).unwrap().is_some());
    // Lapsed at once: b takes it over; c, reading after, finds it held.
    let taken = b.claim_next(&list, "2-1", TTL).unwrap();
    assert_eq!(taken.map(|i| i.id), Some("item-1".into()));
    assert_eq!(c.claim_next(&list, "3-1", TTL).unwrap(), None);
    // a's renewal is refused: its claim is lost, and it may not land.
    assert!(!a.renew("item-1", TTL).unwrap());
    let records = c.read().unwrap();
    assert_eq!(records["item-1"].1.claims, 2);
    assert!(records["item-1"].1.worker.ends_with("/2-1"));
    // b still holds it and renews it.
    assert!(b.renew("item-1", TTL).unwrap());
}

/// A commit on `clone`'s main, its id.
fn commit_on(clone: &Path, file: &str) -> String {
    std::fs::write(clone.join(file), file).unwrap();
    sh(clone, &["add", "-A"]);
    sh(clone, &["commit", "-q", "-m", file]);
    crate::driver::worktree::git(clone, &["rev-parse", "HEAD"]).unwrap()
}

#[test]
fn a_landing_moves_the_base_and_records_done_together_or_neither() {
    let (_dir, clones) = clones(3);
    let (a, b, c) = (book(&clones[0]), book(&clones[1]), book(&clones[2]));
    let list = items(2);
    let ending = Ending {
        why: Some("landed".into()),
        iterations: 1,
        ..Ending::default()
    };
    let base =
        |book: &RemoteBook| book.remote().list("refs/heads/").unwrap()["refs/heads/main"].clone();
    // a claims item-1 and lands it: base and record move together.
    a.claim_next(&list, "1-1", TTL).unwrap().unwrap();
    let head = commit_on(&clones[0], "one.txt");
    assert_eq!(
        a.land("item-1", "main", &head, &ending).unwrap(),
        Landing::Landed
    );
    assert_eq!(base(&a), head);
    let (_, record) = &c.read().unwrap()["item-1"];
    assert_eq!(record.status, ItemStatus::Done);
    assert_eq!(record.landed.as_deref(), Some(head.as_str()));
    assert!(a.settle("item-1", ItemStatus::Done, &ending).unwrap());
    // b's item-2 was made on the old base: the push is refused as a
    // base moved on, and its record is untouched.
    b.claim_next(&list, "2-1", Duration::from_secs(0))
        .unwrap()
        .unwrap();
    let stale = commit_on(&clones[1], "two.txt");
    assert_eq!(
        b.land("item-2", "main", &stale, &ending).unwrap(),
        Landing::BaseMoved
    );
    assert_eq!(c.read().unwrap()["item-2"].1.status, ItemStatus::Claimed);
    // b's claim lapsed and c took it over: b's landing, even on the
    // right base, moves nothing.
    c.claim_next(&list, "3-1", TTL).unwrap().unwrap();
    sh(&clones[1], &["pull", "-q", "--rebase", "origin", "main"]);
    let rebased = crate::driver::worktree::git(&clones[1], &["rev-parse", "HEAD"]).unwrap();
    assert_eq!(
        b.land("item-2", "main", &rebased, &ending).unwrap(),
        Landing::ClaimLost
    );
    assert_eq!(base(&c), head);
    assert!(c.read().unwrap()["item-2"].1.worker.ends_with("/3-1"));
}

#[test]
fn an_unreachable_remote_is_tried_again_then_named() {
    let (_dir, clones) = clones(1);
    let remote = Remote {
        url: clones[0]
            .join("no-such-remote.git")
            .to_string_lossy()
            .into_owned(),
        ..Remote::find(&clones[0], "origin").unwrap()
    };
    let book = RemoteBook::new(remote, &"plan:PLAN.md".parse().unwrap())
        .with_patience(Duration::from_millis(1500));
    let started = Instant::now();
    let err = book.claim_next(&items(1), "1-1", TTL).unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "tried again once"
    );
    assert!(matches!(err, Refused::Unreachable(_)), "{err:?}");
}

#[test]
fn a_remote_that_refuses_refs_outside_its_branches_is_named_not_taken_for_a_race() {
    let (dir, clones) = clones(1);
    let hook = dir.path().join("remote.git/hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nwhile read old new ref; do case $ref in refs/heads/*) ;; *) echo \"only branches\"; exit 1;; esac; done\n",
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let err = book(&clones[0])
        .claim_next(&items(2), "1-1", TTL)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Refused::Forbidden(Cause::Git(GitError::Refused { .. }))
        ),
        "{err:?}"
    );
}

#[test]
fn a_remote_that_is_not_there_or_runs_a_command_is_refused_with_the_fix() {
    let (_dir, clones) = clones(1);
    let err = Remote::find(&clones[0], "upstream")
        .unwrap_err()
        .to_string();
    assert!(err.contains("git remote add upstream URL"), "{err}");
    sh(
        &clones[0],
        &["remote", "add", "evil", "ext::sh -c touch% /tmp/x"],
    );
    let err = Remote::find(&clones[0], "evil").unwrap_err().to_string();
    assert!(err.contains("runs a command"), "{err}");
    let err = Remote::find(&clones[0], "--upload-pack=x")
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a remote's name"), "{err}");
    // A folder git cannot work in is git's failure, not a missing remote.
    let nowhere = crate::testdir::new("remote-nowhere");
    let err = Remote::find(nowhere.path(), "origin").unwrap_err();
    assert!(matches!(err, CtlError::Git { .. }), "{err:?}");
}

/// `remote` reached over ssh at `url` through a script that hangs as
/// an ssh whose host never answers: it reads nothing, says nothing and
/// keeps every pipe it was given open (git's, and through git ralph's
/// stderr), each call given `timeout`.
fn behind_a_hung_ssh(remote: &Remote, dir: &Path, url: &str, timeout: Duration) -> Remote {
    // Named `ssh`, so git takes it for OpenSSH and runs it at once
    // (another name would be probed first, its pipes not git's).
    let bin = dir.join("hung");
    std::fs::create_dir_all(&bin).unwrap();
    let fake = bin.join("ssh");
    std::fs::write(&fake, "#!/bin/sh\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let ssh = SshCommand::from_sources(&ralph_core::own_git::runner::SshSources {
        env_command: Some(fake.display().to_string()),
        ..Default::default()
    });
    Remote {
        url: url.into(),
        ssh,
        ..remote.within(timeout)
    }
}

#[test]
fn a_remote_behind_a_hung_ssh_answers_at_the_call_s_deadline() {
    let (dir, clones) = clones(1);
    let book = book(&clones[0]);
    book.claim_next(&items(1), "1-1", TTL).unwrap().unwrap();
    let timeout = Duration::from_secs(2);
    for url in ["ssh://127.0.0.1/remote.git", "127.0.0.1:remote.git"] {
        let hung = book.reached_through(behind_a_hung_ssh(book.remote(), dir.path(), url, timeout));
        let started = Instant::now();
        let err = hung.renew("item-1", TTL).unwrap_err();
        let took = started.elapsed();
        assert!(
            took < Duration::from_secs(6),
            "{url}: the renewal took {took:?}"
        );
        assert!(
            matches!(
                &err,
                Refused::Unreachable(Cause::Git(GitError::TimedOut { timeout }))
                    if *timeout == Duration::from_secs(2)
            ),
            "{url}: {err:?}"
        );
        // Not renewed, and the caller can tell: still held as last pushed.
        assert!(
            hung.expires("item-1")
                .is_some_and(|at| at > Timestamp::now())
        );
        let started = Instant::now();
        let err = hung.remote().list("refs/heads/").unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{url}: the listing"
        );
        assert!(matches!(err, Refused::Unreachable(_)), "{url}: {err:?}");
    }
}

#[test]
fn a_renewal_that_hangs_ends_when_the_claim_lapses_and_says_so() {
    let (dir, clones) = clones(1);
    let book = book(&clones[0]);
    // A claim with three seconds to live, renewed through a remote
    // whose calls may take the whole minute.
    let ttl = Duration::from_secs(3);
    book.claim_next(&items(1), "1-1", ttl).unwrap().unwrap();
    let hung = book.reached_through(behind_a_hung_ssh(
        book.remote(),
        dir.path(),
        "ssh://127.0.0.1/remote.git",
        CALL_TIMEOUT,
    ));
    let started = Instant::now();
    let err = hung.renew("item-1", TTL).unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "the renewal took {took:?}");
    assert!(matches!(err, Refused::Unreachable(_)), "{err:?}");
    // Its caller sees the claim lapsed (the claim book's `Lost`).
    assert!(
        hung.expires("item-1")
            .is_some_and(|at| at <= Timestamp::now())
    );
}

#[test]
fn a_record_whose_count_is_at_its_bound_is_taken_over_without_overflow() {
    let (_dir, clones) = clones(2);
    let (a, b) = (book(&clones[0]), book(&clones[1]));
    let list = items(1);
    // A record anyone with push access wrote: its count at the bound.
    let mut forged = a.claim_record(&list[0], "x-1", Timestamp::from_secs(0), TTL, None);
    forged.claims = u32::MAX;
    a.put(&forged, None).unwrap();
    b.claim_next(&list, "2-1", TTL)
        .unwrap()
        .expect("lapsed: taken");
    assert_eq!(b.read().unwrap()["item-1"].1.claims, u32::MAX);
}

#[test]
fn one_backlog_has_one_prefix_however_its_source_is_spelled() {
    let root = Path::new("/p");
    let a = prefix_of(root, &"plan:PLAN.md".parse().unwrap());
    let b = prefix_of(root, &"plan:./PLAN.md".parse().unwrap());
    let c = prefix_of(root, &"plan:OTHER.md".parse().unwrap());
    assert_eq!(a, b);
    assert_ne!(a, c);
    assert!(a.starts_with("refs/ralph/queue/") && a.ends_with('/'));
}

#[test]
fn a_record_reads_back_from_its_commit_message_and_nothing_else_does() {
    let (_dir, clones) = clones(1);
    let book = book(&clones[0]);
    let record = book.claim_record(&items(1)[0], "1-1", Timestamp::from_secs(7), TTL, None);
    let message = record.message();
    assert!(
        message.starts_with("ralph queue record: item-1 claimed by "),
        "{message}"
    );
    assert_eq!(parse_record(&message), Some(record));
    assert_eq!(parse_record("fix: a person's commit\n\n{}"), None);
}
