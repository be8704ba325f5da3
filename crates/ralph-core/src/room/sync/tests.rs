use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use super::*;

struct Fixture {
    base: PathBuf,
    project: PathBuf,
    dir: PathBuf,
    tree: PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn fixture(name: &str) -> Fixture {
    let base = std::env::temp_dir().join(format!("ralph-room-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let project = base.join("project");
    let dir = base.join("room");
    let tree = dir.join("tree");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&tree).unwrap();
    let project = std::fs::canonicalize(&project).unwrap();
    let git = Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(git.success());
    Fixture {
        base,
        project,
        dir,
        tree,
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn mtime(path: &Path) -> SystemTime {
    std::fs::symlink_metadata(path).unwrap().modified().unwrap()
}

fn set_mtime(path: &Path, time: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

fn run(f: &Fixture) -> Synced {
    sync(&f.project, &f.dir, &f.tree).unwrap()
}

#[test]
fn equal_files_keep_their_copy_and_time_changed_ones_are_written_anew() {
    let f = fixture("content");
    write(&f.project, "src/lib.rs", "fn buggy() {}\n");
    write(&f.project, "README", "hello\n");
    let first = run(&f);
    assert_eq!((first.files, first.written), (2, 2));
    let copy = f.tree.join("src/lib.rs");
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "fn buggy() {}\n");
    // An old time stamp on the copy: it must survive a sync of equal bytes.
    let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    set_mtime(&copy, old);
    let again = run(&f);
    assert_eq!((again.written, again.read), (0, 1), "{again:?}");
    assert_eq!(mtime(&copy), old);
    // Nothing changed at all: nothing is read.
    let idle = run(&f);
    assert_eq!((idle.written, idle.read), (0, 0), "{idle:?}");
    // The agent's file touched to a time long past, same bytes: kept.
    set_mtime(&f.project.join("src/lib.rs"), old);
    assert_eq!(run(&f).written, 0);
    assert_eq!(mtime(&copy), old);
    // The fix, then the bug put back with an old time stamp (cargo's
    // stale binary): the copy holds the bytes of the project, and a
    // write gives it a fresh time, never the agent's.
    write(&f.project, "src/lib.rs", "fn fixed() {}\n");
    assert_eq!(run(&f).written, 1);
    write(&f.project, "src/lib.rs", "fn buggy() {}\n");
    set_mtime(&f.project.join("src/lib.rs"), old);
    assert_eq!(run(&f).written, 1);
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "fn buggy() {}\n");
    assert!(mtime(&copy) > old + Duration::from_secs(3600));
}

#[test]
fn a_copy_changed_in_the_room_is_put_back() {
    let f = fixture("roomside");
    write(&f.project, "a.txt", "project\n");
    run(&f);
    write(&f.tree, "a.txt", "changed by a check\n");
    assert_eq!(run(&f).written, 1);
    assert_eq!(
        std::fs::read_to_string(f.tree.join("a.txt")).unwrap(),
        "project\n"
    );
}

#[test]
fn deleted_files_go_ignored_ones_never_come_and_the_room_s_own_stay() {
    let f = fixture("gone");
    write(&f.project, ".gitignore", "build/\n*.log\n");
    write(&f.project, "keep.txt", "k\n");
    write(&f.project, "sub/dir/old.txt", "o\n");
    write(&f.project, "build/out.bin", "x\n");
    write(&f.project, "debug.log", "x\n");
    // An untracked environment in the project, not ignored: never copied.
    write(&f.project, ".venv/lib/site-packages/plugin.py", "evil\n");
    let first = run(&f);
    assert!(f.tree.join("keep.txt").is_file());
    assert!(f.tree.join("sub/dir/old.txt").is_file());
    assert!(!f.tree.join("build").exists());
    assert!(!f.tree.join("debug.log").exists());
    assert!(!f.tree.join(".venv").exists(), "{first:?}");
    // What the room's setup and builds made there is the room's.
    write(&f.tree, "target/debug/test-bin", "built\n");
    write(&f.tree, ".venv/pyvenv.cfg", "home\n");
    std::fs::remove_file(f.project.join("sub/dir/old.txt")).unwrap();
    let second = run(&f);
    assert_eq!(second.removed, 1);
    assert!(!f.tree.join("sub").exists(), "emptied folders go");
    assert!(f.tree.join("target/debug/test-bin").is_file());
    assert!(f.tree.join(".venv/pyvenv.cfg").is_file());
    assert!(f.tree.join("keep.txt").is_file());
}

#[cfg(unix)]
#[test]
fn the_executable_bit_is_kept_and_links_out_of_the_tree_are_left_out() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture("links");
    write(&f.project, "run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        f.project.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    write(&f.project, "data/real.txt", "r\n");
    std::os::unix::fs::symlink("data/real.txt", f.project.join("inside")).unwrap();
    std::os::unix::fs::symlink("../../etc/passwd", f.project.join("data/up")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", f.project.join("absolute")).unwrap();
    let synced = run(&f);
    let mode = std::fs::metadata(f.tree.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0o111);
    assert_eq!(
        std::fs::read_link(f.tree.join("inside")).unwrap(),
        Path::new("data/real.txt")
    );
    assert!(std::fs::symlink_metadata(f.tree.join("data/up")).is_err());
    assert!(std::fs::symlink_metadata(f.tree.join("absolute")).is_err());
    assert_eq!(synced.links_left_out.len(), 2, "{synced:?}");
    // The bit taken away is taken away in the room too.
    std::fs::set_permissions(
        f.project.join("run.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    run(&f);
    let mode = std::fs::metadata(f.tree.join("run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o111, 0);
}

#[test]
fn a_folder_that_is_no_repository_is_not_synced() {
    let base = std::env::temp_dir().join(format!("ralph-room-nogit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(base.join("p")).unwrap();
    let err = sync(&base.join("p"), &base.join("r"), &base.join("r/tree")).unwrap_err();
    assert!(matches!(err, RoomError::NotGit(_)), "{err:?}");
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_file_put_back_with_its_old_size_and_time_is_still_read() {
    let f = fixture("stamp");
    write(&f.project, "a.rs", "fixed");
    sync(&f.project, &f.dir, &f.tree).unwrap();
    let fixed_at = mtime(&f.project.join("a.rs"));
    // The bug back, the same size, the fixed file's time stamp given back.
    write(&f.project, "a.rs", "buggy");
    set_mtime(&f.project.join("a.rs"), fixed_at);
    let synced = sync(&f.project, &f.dir, &f.tree).unwrap();
    assert_eq!(synced.written, 1, "{synced:?}");
    assert_eq!(
        std::fs::read_to_string(f.tree.join("a.rs")).unwrap(),
        "buggy"
    );
}

#[test]
fn what_a_check_left_in_the_room_is_gone_at_the_next_sync() {
    let f = fixture("leftover");
    write(
        &f.project,
        "tests/test_a.py",
        "def test_a(): assert False\n",
    );
    sync(&f.project, &f.dir, &f.tree).unwrap();
    // A check's code wrote a conftest.py, a folder, and a file in the
    // kept build folder.
    write(&f.tree, "tests/conftest.py", "# marks every test passed\n");
    write(&f.tree, "planted/x.py", "");
    write(&f.tree, "target/debug/kept", "");
    sync(&f.project, &f.dir, &f.tree).unwrap();
    assert!(!f.tree.join("tests/conftest.py").exists());
    assert!(!f.tree.join("planted").exists());
    assert!(f.tree.join("tests/test_a.py").is_file());
    assert!(
        f.tree.join("target/debug/kept").is_file(),
        "builds stay warm"
    );
}

#[cfg(unix)]
#[test]
fn nothing_outside_the_room_is_removed_or_changed_through_a_link_in_it() {
    let f = fixture("roomlink");
    let outside = f.base.join("outside");
    write(&outside, "keep.txt", "the person's");
    write(&f.project, "a/keep.txt", "the project's");
    write(&f.project, "b/run.sh", "echo");
    sync(&f.project, &f.dir, &f.tree).unwrap();
    // A check replaced the room's folders by links to a folder outside.
    for folder in ["a", "b"] {
        std::fs::remove_dir_all(f.tree.join(folder)).unwrap();
        std::os::unix::fs::symlink(&outside, f.tree.join(folder)).unwrap();
    }
    write(&outside, "run.sh", "echo");
    // The project's a/keep.txt is gone, b/run.sh made executable.
    std::fs::remove_file(f.project.join("a/keep.txt")).unwrap();
    let run = f.project.join("b/run.sh");
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    sync(&f.project, &f.dir, &f.tree).unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "the person's"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(outside.join("run.sh"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o111, 0, "outside file's mode untouched");
    assert!(
        std::fs::symlink_metadata(f.tree.join("b"))
            .unwrap()
            .is_dir()
    );
    assert!(f.tree.join("b/run.sh").is_file());
}
