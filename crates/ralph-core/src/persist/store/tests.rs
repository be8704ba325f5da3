use super::*;
#[allow(unused_imports)]
use crate::time::Timestamp;
use tempfile::TempDir;

fn store() -> (TempDir, StateStore) {
    let dir = TempDir::new().unwrap();
    let store = StateStore::at(dir.path().join("runtime").join("ralph-state.json"));
    (dir, store)
}

#[test]
fn missing_state_reads_as_none() {
    let (_d, store) = store();
    assert!(store.read().unwrap().is_none());
    assert!(!store.exists().unwrap());
}

#[test]
fn write_then_read_round_trips_and_leaves_no_temp_file() {
    let (_d, store) = store();
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    store.lock(true).unwrap().write(&state).unwrap();
    assert_eq!(store.read().unwrap(), Some(state));
    let names: Vec<_> = fs::read_dir(store.path().parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
}

#[test]
fn a_state_the_reader_would_refuse_is_never_written() {
    let (_d, store) = store();
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    let lock = store.lock(true).unwrap();
    lock.write(&state).unwrap();
    let mut huge = state.clone();
    huge.hint = Some("x".repeat(usize::try_from(MAX_STATE_BYTES).unwrap()));
    let err = lock.write(&huge).unwrap_err();
    assert!(matches!(err, StoreError::TooLarge { .. }), "{err}");
    assert!(err.to_string().contains("more than the 4194304"), "{err}");
    drop(lock);
    assert_eq!(store.read().unwrap(), Some(state), "the old state stays");
}

#[test]
fn a_read_under_the_lock_parses_only_a_state_that_changed() {
    let (_d, store) = store();
    let first = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    store.lock(true).unwrap().write(&first).unwrap();
    let snapshot = store.snapshot().unwrap();
    assert_eq!(snapshot.state.as_ref(), Some(&first));
    let lock = store.lock(false).unwrap();
    let again = lock.read_again(&snapshot).unwrap();
    assert!(matches!(again, Reread::Unchanged), "{again:?}");
    assert_eq!(again.state(&snapshot), Some(&first));

    // Another stop wrote meanwhile: the new state, parsed.
    let mut second = first.clone();
    second.iteration = 2;
    lock.write(&second).unwrap();
    let again = lock.read_again(&snapshot).unwrap();
    assert!(
        matches!(&again, Reread::Changed(Some(s)) if **s == second),
        "{again:?}"
    );
    assert_eq!(again.state(&snapshot), Some(&second));

    // Reset meanwhile: no state.
    lock.remove().unwrap();
    let again = lock.read_again(&snapshot).unwrap();
    assert!(matches!(again, Reread::Changed(None)), "{again:?}");

    // Garbage meanwhile: an error, never the old state.
    fs::write(store.path(), b"{ not json").unwrap();
    assert!(matches!(
        lock.read_again(&snapshot),
        Err(StoreError::Corrupt { .. })
    ));
    // And no state file at all when the snapshot was taken.
    let (_e, empty) = self::store();
    let none = empty.snapshot().unwrap();
    assert_eq!(none.state, None);
}

#[cfg(unix)]
#[test]
fn files_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let (_d, store) = store();
    store
        .lock(true)
        .unwrap()
        .write(&LoopState::new("s".into(), 3, Timestamp::from_secs(0)))
        .unwrap();
    let mode = fs::metadata(store.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
fn corrupt_states_are_reported_not_replaced() {
    let (_d, store) = store();
    fs::create_dir_all(store.path().parent().unwrap()).unwrap();
    for content in [
        "",
        "  \n",
        "{not json",
        "[]",
        "{\"status\":\"running\"}",
        "{\"status\":\"bogus\",\"iteration\":1}",
    ] {
        fs::write(store.path(), content).unwrap();
        let err = store.read().unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt { .. }),
            "{content:?}: {err}"
        );
        assert!(err.to_string().contains("ralph-ctl reset"));
        assert_eq!(fs::read_to_string(store.path()).unwrap(), content);
    }
}

#[test]
fn a_directory_or_symlink_is_corrupt() {
    let (dir, store) = store();
    fs::create_dir_all(store.path()).unwrap();
    assert!(matches!(store.read(), Err(StoreError::Corrupt { .. })));
    fs::remove_dir(store.path()).unwrap();
    #[cfg(unix)]
    {
        let target = dir.path().join("elsewhere.json");
        fs::write(&target, "{}").unwrap();
        std::os::unix::fs::symlink(&target, store.path()).unwrap();
        assert!(matches!(store.read(), Err(StoreError::Corrupt { .. })));
    }
    let _ = dir;
}

#[cfg(unix)]
#[test]
fn linked_folders_are_refused_by_every_operation() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("project");
    let elsewhere = dir.path().join("other-project");
    fs::create_dir_all(elsewhere.join(".claude/context/runtime")).unwrap();
    let other = StateStore::new(&ProjectPaths::new(&elsewhere));
    other
        .lock(false)
        .unwrap()
        .write(&LoopState::new("theirs".into(), 3, Timestamp::from_secs(0)))
        .unwrap();
    let before = fs::read(other.path()).unwrap();
    // A link at each level between the project and the state.
    for (link, target) in [
        (".claude", elsewhere.join(".claude")),
        (".claude/context", elsewhere.join(".claude/context")),
        (
            ".claude/context/runtime",
            elsewhere.join(".claude/context/runtime"),
        ),
    ] {
        let _ = fs::remove_dir_all(&root);
        let link = root.join(link);
        fs::create_dir_all(link.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let store = StateStore::new(&ProjectPaths::new(&root));
        let linked = |e: StoreError| match e {
            StoreError::LinkedFolder(path) => assert_eq!(path, link),
            other => panic!("{other}"),
        };
        linked(store.exists().unwrap_err());
        linked(store.read().unwrap_err());
        linked(store.lock(true).err().unwrap());
        linked(store.lock(false).err().unwrap());
    }
    assert_eq!(fs::read(other.path()).unwrap(), before);
}

#[cfg(unix)]
#[test]
fn a_folder_that_cannot_be_searched_is_an_error_not_a_missing_state() {
    use std::os::unix::fs::PermissionsExt;
    let (_d, store) = store();
    store
        .lock(true)
        .unwrap()
        .write(&LoopState::new("s".into(), 3, Timestamp::from_secs(0)))
        .unwrap();
    let folder = store.path().parent().unwrap().to_path_buf();
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o000)).unwrap();
    // Root searches any folder: nothing to see then.
    let searchable = fs::symlink_metadata(store.path()).is_ok();
    let exists = store.exists();
    let read = store.read();
    fs::set_permissions(&folder, fs::Permissions::from_mode(0o700)).unwrap();
    if !searchable {
        let err = exists.unwrap_err().to_string();
        assert!(err.contains("Permission denied"), "{err}");
        assert!(read.unwrap_err().to_string().contains("Permission denied"));
    }
}

#[test]
fn the_lock_holds_whatever_happens_to_files_in_the_folder() {
    // The lock is the folder's: deleting or replacing a file beside the
    // state (an older version's lock file, say) cannot let two in.
    let (_d, store) = store();
    let held = store.lock(true).unwrap();
    let folder = store.path().parent().unwrap();
    fs::write(folder.join("ralph-state.json.lock"), "").unwrap();
    fs::remove_file(folder.join("ralph-state.json.lock")).unwrap();
    let other = StateStore::at(store.path());
    let started = Instant::now();
    std::thread::scope(|scope| {
        let waiter = scope.spawn(|| other.lock(false).map(|_| started.elapsed()));
        std::thread::sleep(Duration::from_millis(200));
        drop(held);
        let waited = waiter.join().unwrap().unwrap();
        assert!(waited >= Duration::from_millis(150), "{waited:?}");
    });
}

#[test]
fn stale_temp_files_are_cleaned_under_the_lock() {
    let (_d, store) = store();
    let dir = store.path().parent().unwrap().to_path_buf();
    fs::create_dir_all(&dir).unwrap();
    let stale = dir.join(".ralph-state.json.tmp-999999");
    fs::write(&stale, "half a sta").unwrap();
    drop(store.lock(false).unwrap());
    assert!(!stale.exists());
}

fn unverified(store: &StateStore) -> String {
    match store.read() {
        Err(e @ StoreError::Unverified { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_state_ralph_did_not_sign_is_never_believed() {
    let (_d, store) = store();
    let mut state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    store.lock(true).unwrap().write(&state).unwrap();
    let signed = fs::read_to_string(store.path()).unwrap();
    assert!(signed.starts_with("{\n  \"mac\": \""), "{signed}");

    // Tampered: one field changed, the MAC kept.
    let tampered = signed.replace("\"status\": \"running\"", "\"status\": \"complete\"");
    assert_ne!(tampered, signed);
    fs::write(store.path(), &tampered).unwrap();
    let err = unverified(&store);
    assert!(
        err.contains("not written by ralph on this machine"),
        "{err}"
    );
    assert!(err.contains("MAC does not match"), "{err}");
    assert!(err.contains("ralph-ctl reset"), "{err}");

    // Signed with another key.
    state.status = crate::judge::state::Status::Complete;
    let other = signed_json(
        &state,
        Purpose::State,
        store.path(),
        &mac::test_key(7),
        Some(u64::MAX),
    )
    .unwrap();
    fs::write(store.path(), other).unwrap();
    assert!(unverified(&store).contains("MAC does not match"));

    // No MAC at all (an older ralph, a hand-written or committed file).
    fs::write(store.path(), serde_json::to_vec_pretty(&state).unwrap()).unwrap();
    assert!(unverified(&store).contains("it carries no MAC"));

    // Moved here from another folder (another project, the history).
    let (_e, elsewhere) = self::store();
    elsewhere.lock(true).unwrap().write(&state).unwrap();
    fs::copy(elsewhere.path(), store.path()).unwrap();
    assert!(unverified(&store).contains("MAC does not match"));

    // Under the lock and after a snapshot, the same.
    let lock = store.lock(false).unwrap();
    assert!(matches!(lock.read(), Err(StoreError::Unverified { .. })));
    assert!(matches!(
        lock.read_again(&Snapshot::default()),
        Err(StoreError::Unverified { .. })
    ));
    drop(lock);
    assert!(matches!(
        store.lock_existing(),
        Err(StoreError::Unverified { .. })
    ));

    // Its own key's MAC, in its own folder, numbered as the last state
    // ralph wrote there: believed.
    let last = sequence::kept_for(store.path().parent().unwrap())
        .unwrap()
        .unwrap()
        .state;
    let ours = signed_json(
        &state,
        Purpose::State,
        store.path(),
        &mac::current(false).unwrap(),
        Some(last),
    )
    .unwrap();
    fs::write(store.path(), ours).unwrap();
    assert_eq!(store.read().unwrap(), Some(state));
}

#[test]
fn a_kept_loop_is_signed_as_kept_not_as_a_state() {
    let (_d, store) = store();
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    let lock = store.lock(true).unwrap();
    let kept = lock.archive(&state).unwrap();
    drop(lock);
    let archived = store.archived().unwrap();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].1.as_ref().unwrap(), &state);
    // Copied back over the state: not a state ralph wrote there.
    fs::copy(&kept, store.path()).unwrap();
    assert!(unverified(&store).contains("MAC does not match"));
}

fn stale(result: Result<Option<LoopState>, StoreError>) -> String {
    match result {
        Err(e @ StoreError::Stale { .. }) => e.to_string(),
        other => panic!("{other:?}"),
    }
}

/// The numbers kept for the folder of `store`'s state.
fn kept(store: &StateStore) -> Kept {
    sequence::kept_for(store.folder()).unwrap().unwrap()
}

#[test]
fn an_earlier_state_put_back_is_stale_and_never_believed() {
    let (_d, store) = store();
    let mut first = LoopState::new("s-1".into(), 3, Timestamp::from_secs(0));
    first.status = crate::judge::state::Status::Complete;
    store.lock(true).unwrap().write(&first).unwrap();
    let signed = fs::read_to_string(store.path()).unwrap();
    assert!(
        signed.contains("\",\n  \"sequence\": 1,\n"),
        "numbered after its MAC: {signed}"
    );
    let copy = fs::read(store.path()).unwrap();
    let second = LoopState::new("s-2".into(), 3, Timestamp::from_secs(9));
    store.lock(false).unwrap().write(&second).unwrap();
    assert_eq!(kept(&store).state, 2);
    // The earlier, completed loop's state written back in its place.
    fs::write(store.path(), &copy).unwrap();
    let err = stale(store.read());
    assert!(
        err.contains("is stale: its number is 1")
            && err.contains("(number 2)")
            && err.contains("not even that the work is done")
            && err.contains("ralph-ctl reset"),
        "{err}"
    );
    // By every reader: under the lock, a change, a snapshot.
    let lock = store.lock(false).unwrap();
    assert!(matches!(lock.read(), Err(StoreError::Stale { .. })));
    drop(lock);
    assert!(matches!(
        store.lock_existing(),
        Err(StoreError::Stale { .. })
    ));
    assert!(matches!(store.snapshot(), Err(StoreError::Stale { .. })));
    // Moved aside by a reset, which takes a number of its own: neither
    // state comes back to life.
    let lock = store.lock(false).unwrap();
    lock.quarantine("2026-01-01T00:00:00Z").unwrap();
    drop(lock);
    assert_eq!(kept(&store).state, 3);
    fs::write(store.path(), &copy).unwrap();
    assert!(stale(store.read()).contains("(number 3)"));
    // A new loop's state is the latest again.
    store.lock(false).unwrap().write(&second).unwrap();
    assert_eq!(store.read().unwrap(), Some(second));
}

#[test]
fn a_state_removed_by_a_reset_does_not_come_back() {
    let (_d, store) = store();
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    store.lock(true).unwrap().write(&state).unwrap();
    let copy = fs::read(store.path()).unwrap();
    store.lock(false).unwrap().remove().unwrap();
    assert_eq!(store.read().unwrap(), None);
    fs::write(store.path(), &copy).unwrap();
    assert!(stale(store.read()).contains("its number is 1"));
}

#[test]
fn a_state_put_back_between_a_snapshot_and_the_lock_is_stale() {
    let (_d, store) = store();
    let first = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    store.lock(true).unwrap().write(&first).unwrap();
    let snapshot = store.snapshot().unwrap();
    let copy = fs::read(store.path()).unwrap();
    let mut second = first.clone();
    second.iteration = 2;
    store.lock(false).unwrap().write(&second).unwrap();
    // The same bytes as the snapshot's: unchanged, but not the latest.
    fs::write(store.path(), &copy).unwrap();
    let lock = store.lock(false).unwrap();
    assert!(matches!(
        lock.read_again(&snapshot),
        Err(StoreError::Stale { .. })
    ));
}

#[test]
fn a_crash_before_the_number_is_kept_leaves_the_state_believed() {
    let (_d, store) = store();
    let mut state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    for i in 1..=3 {
        state.iteration = i;
        store.lock(true).unwrap().write(&state).unwrap();
    }
    assert_eq!(kept(&store), Kept { state: 3, log: 0 });
    // As if the writer of state 3 died before keeping its number, and
    // then the numbers were lost altogether.
    let keys = mac::key_dir().unwrap();
    sequence::write(&keys, store.folder(), Kept { state: 2, log: 0 }).unwrap();
    assert_eq!(store.read().unwrap(), Some(state.clone()), "ahead is fine");
    fs::remove_file(sequence::kept_file(&keys, store.folder())).unwrap();
    assert_eq!(store.read().unwrap(), Some(state.clone()));
    // The next write is numbered past the state it read, so the one
    // before it, put back, is stale again.
    let copy = fs::read(store.path()).unwrap();
    let lock = store.lock(false).unwrap();
    lock.read().unwrap();
    state.iteration = 4;
    lock.write(&state).unwrap();
    drop(lock);
    assert_eq!(kept(&store).state, 4);
    fs::write(store.path(), &copy).unwrap();
    assert!(stale(store.read()).contains("its number is 3"));
}

#[test]
fn a_state_from_before_numbering_is_believed_until_ralph_numbers_its_folder() {
    let (_d, store) = store();
    fs::create_dir_all(store.folder()).unwrap();
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    let unnumbered = signed_json(
        &state,
        Purpose::State,
        store.path(),
        &mac::current(true).unwrap(),
        None,
    )
    .unwrap();
    fs::write(store.path(), &unnumbered).unwrap();
    assert_eq!(store.read().unwrap(), Some(state.clone()));
    store.lock(false).unwrap().write(&state).unwrap();
    fs::write(store.path(), &unnumbered).unwrap();
    assert!(stale(store.read()).contains("it carries no number"));
}

#[test]
fn each_folder_has_its_own_count_and_kept_loops_are_never_stale() {
    let dir = TempDir::new().unwrap();
    let project = StateStore::at(dir.path().join("runtime/ralph-state.json"));
    let item = StateStore::at(dir.path().join("runtime/queue/a-item/ralph-state.json"));
    let state = LoopState::new("s".into(), 3, Timestamp::from_secs(0));
    project.lock(true).unwrap().write(&state).unwrap();
    let lock = project.lock(false).unwrap();
    lock.archive(&state).unwrap();
    drop(lock);
    for _ in 0..3 {
        item.lock(true).unwrap().write(&state).unwrap();
        project.lock(false).unwrap().write(&state).unwrap();
    }
    assert_eq!(item.read().unwrap(), Some(state.clone()));
    assert_eq!(project.read().unwrap(), Some(state.clone()));
    assert_eq!(kept(&item).state, 3);
    assert_eq!(kept(&project).state, 4);
    // The kept loop is older than every state since, and still read.
    let archived = project.archived().unwrap();
    assert_eq!(archived.len(), 1);
    assert_eq!(archived[0].1.as_ref().unwrap(), &state);
}

#[test]
fn quarantine_keeps_the_bad_file() {
    let (_d, store) = store();
    fs::create_dir_all(store.path().parent().unwrap()).unwrap();
    fs::write(store.path(), "garbage").unwrap();
    let lock = store.lock(false).unwrap();
    let aside = lock.quarantine("2026-11-22T10:00:00Z").unwrap();
    assert_eq!(fs::read_to_string(aside).unwrap(), "garbage");
    assert!(!store.exists().unwrap());
}
