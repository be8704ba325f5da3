use super::*;
use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::thread;
use tempfile::TempDir;

fn git(dir: &Path, args: &[&str]) {
    let ok = crate::own_git::runner::persons_git(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A repository at `dir` with `files` committed.
fn repository(dir: &Path, files: &[&str]) {
    git(dir, &["init", "-q"]);
    for file in files {
        let path = dir.join(file);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, format!("{file}\n")).unwrap();
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "start"]);
}

/// Waits past the filesystem's timestamp granularity so an edit gets a new mtime.
fn tick() {
    thread::sleep(Duration::from_millis(20));
}

fn append(path: &Path, text: &str) {
    tick();
    let mut old = fs::read(path).unwrap_or_default();
    old.extend_from_slice(text.as_bytes());
    fs::write(path, old).unwrap();
}

/// A loop's stops as the breaker sees them: each reading is compared with
/// the baseline the previous one left (or the start's).
struct Stops {
    root: PathBuf,
    baseline: Option<Baseline>,
    limits: Limits,
}

impl Stops {
    fn start(root: &Path) -> Stops {
        Stops::start_within(root, LIMITS)
    }

    fn start_within(root: &Path, limits: Limits) -> Stops {
        let baseline = full_check(&canonical(root), limits).map(Listing::into_baseline);
        assert!(baseline.is_some(), "a baseline of {}", root.display());
        Stops {
            root: root.to_path_buf(),
            baseline,
            limits,
        }
    }

    /// A stop after an iteration whose tools did not say what changed (Bash).
    fn full(&mut self) -> Reading {
        self.stop(ToolEdits::default())
    }

    /// A stop after an iteration whose file tools changed `files`
    /// (relative to the root); `alone`: no other tool ran.
    fn edited(&mut self, files: &[&str], alone: bool) -> Reading {
        self.stop(ToolEdits {
            changed_files: files.iter().map(|f| self.root.join(f)).collect(),
            fully_described: alone,
        })
    }

    fn stop(&mut self, edits: ToolEdits) -> Reading {
        let reading = read_within(&self.root, self.baseline.as_ref(), &edits, self.limits);
        if let Some(baseline) = &reading.baseline {
            // What the state keeps between stops: it must survive JSON.
            let json = serde_json::to_string(baseline).unwrap();
            let back: Baseline = serde_json::from_str(&json).unwrap();
            assert_eq!(&back, baseline, "{json}");
            self.baseline = Some(back);
        }
        reading
    }

    fn changed(&mut self) -> Option<bool> {
        self.full().changed
    }
}

#[test]
fn git_sees_edits_untracked_files_deletions_and_commits() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt", "b.txt"]);
    let mut stops = Stops::start(root);
    let reading = stops.full();
    assert_eq!(
        (reading.changed, reading.method),
        (Some(false), Method::Git)
    );

    fs::create_dir_all(root.join(".claude/context/runtime")).unwrap();
    fs::write(root.join(".claude/context/runtime/ralph-state.json"), "{}").unwrap();
    fs::create_dir_all(root.join("sub/.claude")).unwrap();
    fs::write(root.join("sub/.claude/settings.json"), "{}").unwrap();
    assert_eq!(stops.changed(), Some(false), ".claude/ files do not count");

    tick();
    fs::write(root.join("new.txt"), "new").unwrap();
    assert_eq!(stops.changed(), Some(true), "an untracked file");
    assert_eq!(stops.changed(), Some(false), "counted once");
    append(&root.join("new.txt"), "more");
    assert_eq!(
        stops.changed(),
        Some(true),
        "an untracked file edited again"
    );
    append(&root.join("a.txt"), "edit");
    assert_eq!(stops.changed(), Some(true), "a tracked file edited");
    append(&root.join("a.txt"), "again");
    assert_eq!(stops.changed(), Some(true), "a modified file edited again");
    assert_eq!(stops.changed(), Some(false));

    git(root, &["add", "-A"]);
    assert_eq!(
        stops.changed(),
        Some(false),
        "staging alone changes no file"
    );
    git(root, &["commit", "-q", "-m", "two"]);
    assert_eq!(stops.changed(), Some(true), "a commit");
    assert_eq!(stops.changed(), Some(false));
    git(root, &["commit", "-q", "--allow-empty", "-m", "empty"]);
    assert_eq!(
        stops.changed(),
        Some(false),
        "a commit that changes no file"
    );

    fs::remove_file(root.join("b.txt")).unwrap();
    assert_eq!(stops.changed(), Some(true), "a tracked file deleted");
    git(root, &["checkout", "--", "b.txt"]);
    assert_eq!(stops.changed(), Some(true), "and restored");

    fs::write(root.join(".gitignore"), "*.log\n").unwrap();
    assert_eq!(stops.changed(), Some(true));
    fs::write(root.join("noise.log"), "noise").unwrap();
    assert_eq!(stops.changed(), Some(false), "ignored files do not count");
}

#[test]
fn a_subfolder_project_counts_only_its_own_folder() {
    let dir = TempDir::new().unwrap();
    let top = dir.path();
    repository(top, &["mono/app/lib.txt", "mono/other/x.txt", "top.txt"]);
    let root = top.join("mono/app");
    let mut stops = Stops::start(&root);
    assert_eq!(stops.full().method, Method::Git);
    assert_eq!(stops.changed(), Some(false));

    append(&top.join("mono/other/x.txt"), "elsewhere");
    fs::write(top.join("mono/other/new.txt"), "elsewhere").unwrap();
    append(&top.join("top.txt"), "elsewhere");
    assert_eq!(stops.changed(), Some(false), "changes outside the project");

    append(&root.join("lib.txt"), "1");
    assert_eq!(stops.changed(), Some(true), "a tracked file of the project");
    append(&root.join("lib.txt"), "2");
    assert_eq!(stops.changed(), Some(true), "the same file edited again");
    fs::write(root.join("notes.md"), "n").unwrap();
    assert_eq!(
        stops.changed(),
        Some(true),
        "an untracked file in the project"
    );
    assert_eq!(stops.changed(), Some(false));
    let files = &stops.baseline.as_ref().unwrap().files;
    assert_eq!(
        files.keys().collect::<Vec<_>>(),
        ["lib.txt", "notes.md"],
        "paths relative to the project, nothing from outside"
    );

    git(top, &["add", "mono/other"]);
    git(top, &["commit", "-q", "-m", "outside"]);
    assert_eq!(
        stops.changed(),
        Some(false),
        "a commit of files outside the project"
    );
    git(top, &["add", "-A"]);
    git(top, &["commit", "-q", "-m", "inside"]);
    assert_eq!(
        stops.changed(),
        Some(true),
        "a commit of the project's files"
    );
    assert_eq!(stops.changed(), Some(false));
}

#[test]
fn a_project_its_repository_ignores_is_scanned() {
    let dir = TempDir::new().unwrap();
    let top = dir.path();
    repository(top, &[]);
    fs::write(top.join(".gitignore"), "scratch/\n").unwrap();
    let root = top.join("scratch/project");
    fs::create_dir_all(&root).unwrap();
    fs::write(root.join("a.txt"), "a").unwrap();
    let mut stops = Stops::start(&root);
    assert_eq!(stops.full().method, Method::Scan);
    append(&root.join("a.txt"), "b");
    let reading = stops.full();
    assert_eq!(
        (reading.changed, reading.method),
        (Some(true), Method::Scan)
    );
    assert_eq!(stops.changed(), Some(false));
}

/// Names git and the baseline must carry intact.
const AWKWARD: &[&str] = &[
    "with space.txt",
    "quote\"d 'name'.txt",
    "non-ascii-é-日本.txt",
    "new\nline.txt",
    "back\\slash.txt",
];

fn awkward_names_work(root: &Path, method: Method) {
    let mut stops = Stops::start(root);
    for name in AWKWARD {
        fs::write(root.join(name), "x").unwrap();
        let reading = stops.full();
        assert_eq!(
            (reading.changed, reading.method),
            (Some(true), method),
            "{name:?} created"
        );
        assert_eq!(stops.changed(), Some(false), "{name:?} unchanged");
        append(&root.join(name), "y");
        assert_eq!(stops.changed(), Some(true), "{name:?} edited");
        assert_eq!(stops.changed(), Some(false));
    }
    let baseline = stops.baseline.as_ref().unwrap();
    for name in AWKWARD {
        assert!(baseline.lists(name), "{name:?} in {baseline:?}");
    }
    for name in AWKWARD {
        assert_eq!(
            stops.edited(&[name], true).changed,
            Some(true),
            "{name:?} written by a file tool"
        );
        assert_eq!(stops.changed(), Some(false), "{name:?} counted once");
    }
}

#[test]
fn awkward_file_names_with_git() {
    let dir = TempDir::new().unwrap();
    repository(dir.path(), &[]);
    let root = dir.path().join("sub folder é");
    fs::create_dir_all(&root).unwrap();
    awkward_names_work(&root, Method::Git);
}

#[test]
fn awkward_file_names_without_git() {
    let dir = TempDir::new().unwrap();
    awkward_names_work(dir.path(), Method::Scan);
}

#[cfg(unix)]
#[test]
fn file_names_that_are_not_utf8() {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::OsStr::from_bytes(b"latin1-\xe9.txt");
    for with_git in [true, false] {
        let dir = TempDir::new().unwrap();
        let root = dir.path();
        if with_git {
            repository(root, &[]);
        }
        let mut stops = Stops::start(root);
        if fs::write(root.join(name), "x").is_err() {
            return; // a filesystem that refuses such names
        }
        assert_eq!(stops.changed(), Some(true));
        assert_eq!(stops.changed(), Some(false));
        let baseline = stops.baseline.as_ref().unwrap();
        if with_git {
            let key = baseline.files.keys().next().unwrap();
            assert_eq!(key_bytes(key).unwrap(), name.as_bytes(), "{key:?}");
        }
        assert!(baseline.lists(&key_of(name.as_bytes())), "{baseline:?}");
        append(&root.join(name), "y");
        assert_eq!(stops.changed(), Some(true), "with git: {with_git}");
    }
}

#[test]
fn keys_give_their_path_back() {
    for bytes in [
        &b"plain/path.txt"[..],
        b"\xff\xfe",
        "é/日本".as_bytes(),
        b"a\nb",
    ] {
        assert_eq!(key_bytes(&key_of(bytes)).unwrap(), bytes);
    }
    assert_ne!(key_of(b"\xff"), key_of("\u{fffd}".as_bytes()));
    assert_eq!(key_bytes("\0zz"), None);
}

#[test]
fn tool_edits_are_progress_without_a_check_and_are_counted_once() {
    for with_git in [true, false] {
        let dir = TempDir::new().unwrap();
        let root = dir.path();
        if with_git {
            repository(root, &["a.txt", "b.txt"]);
        } else {
            fs::write(root.join("a.txt"), "a").unwrap();
            fs::write(root.join("b.txt"), "b").unwrap();
        }
        let mut stops = Stops::start(root);
        // A Write, then a Bash stop that changed another file, then nothing.
        append(&root.join("a.txt"), "tool");
        let reading = stops.edited(&["a.txt"], true);
        assert_eq!(
            (reading.changed, reading.method),
            (Some(true), Method::ToolEdits)
        );
        append(&root.join("b.txt"), "command");
        assert_eq!(stops.changed(), Some(true), "the command's change");
        assert_eq!(stops.changed(), Some(false), "git: {with_git}");

        // A file created by a tool, then nothing: not counted again.
        tick();
        fs::write(root.join("c.txt"), "created").unwrap();
        assert_eq!(stops.edited(&["c.txt"], true).changed, Some(true));
        assert_eq!(stops.changed(), Some(false), "no double count");

        // A file a tool touched, later changed by a command: seen.
        append(&root.join("c.txt"), "by a command");
        assert_eq!(stops.changed(), Some(true), "a later change of it");
        assert_eq!(stops.changed(), Some(false));
    }
}

#[test]
fn a_tool_edit_that_restores_the_committed_content_is_counted_once() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt"]);
    append(&root.join("a.txt"), "draft");
    let mut stops = Stops::start(root);
    tick();
    fs::write(root.join("a.txt"), "a.txt\n").unwrap(); // HEAD's content again
    assert_eq!(stops.edited(&["a.txt"], true).changed, Some(true));
    assert_eq!(
        stops.changed(),
        Some(false),
        "clean again, but not changed since"
    );
    append(&root.join("a.txt"), "more");
    assert_eq!(stops.changed(), Some(true));
}

#[test]
fn tool_edits_beside_other_tools_leave_no_false_answer() {
    for with_git in [true, false] {
        let dir = TempDir::new().unwrap();
        let root = dir.path();
        if with_git {
            repository(root, &["a.txt", "b.txt"]);
        } else {
            fs::write(root.join("a.txt"), "a").unwrap();
            fs::write(root.join("b.txt"), "b").unwrap();
        }
        let mut stops = Stops::start(root);
        // Edit a.txt with a tool, and b.txt with a command, in one iteration.
        append(&root.join("a.txt"), "tool");
        append(&root.join("b.txt"), "command");
        assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
        // b.txt's change belongs to that stop: never counted again, but the
        // next check cannot prove "nothing changed" either.
        assert_eq!(stops.changed(), None, "git: {with_git}");
        assert_eq!(stops.changed(), Some(false));

        // After such a stop, a later change of the touched file is seen.
        append(&root.join("a.txt"), "tool again");
        assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
        append(&root.join("a.txt"), "by a command");
        assert_eq!(stops.changed(), Some(true));
        assert_eq!(stops.changed(), Some(false));

        // Two such stops in a row keep every touched file's latest stamp.
        append(&root.join("a.txt"), "1");
        assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
        append(
            &root.join("a.txt"),
            "2 (by a command in the same iteration)",
        );
        append(&root.join("b.txt"), "1");
        assert_eq!(stops.edited(&["b.txt"], false).changed, Some(true));
        assert_eq!(stops.changed(), None, "a.txt's change was that stop's");
        assert_eq!(stops.changed(), Some(false));
        append(&root.join("a.txt"), "3");
        assert_eq!(stops.edited(&["a.txt"], false).changed, Some(true));
        append(&root.join("b.txt"), "2");
        assert_eq!(stops.edited(&["b.txt"], false).changed, Some(true));
        append(&root.join("a.txt"), "4 (by a command)");
        assert_eq!(stops.changed(), Some(true), "a file touched two stops ago");
    }
}

#[test]
fn edits_that_do_not_count_lead_to_a_full_check() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt"]);
    let outside = TempDir::new().unwrap();
    let mut stops = Stops::start(root);
    for file in [
        root.join(".claude/notes.md"),
        root.join("target/debug/out.txt"),
        root.join("web/node_modules/x/index.js"),
        outside.path().join("elsewhere.txt"),
        root.join("../elsewhere.txt"),
        PathBuf::from("relative.txt"),
    ] {
        let reading = stops.stop(ToolEdits {
            changed_files: vec![file.clone()],
            fully_described: true,
        });
        assert_eq!(
            (reading.changed, reading.method),
            (Some(false), Method::Git),
            "{}",
            file.display()
        );
    }
    // Through `..` and `.` back into the project, it counts.
    let reading = stops.stop(ToolEdits {
        changed_files: vec![root.join("target/../a.txt"), root.join("./a.txt")],
        fully_described: true,
    });
    assert_eq!(reading.method, Method::ToolEdits);
}

#[cfg(unix)]
#[test]
fn edits_named_through_a_symbolic_link_count() {
    let dir = TempDir::new().unwrap();
    let real = dir.path().join("real");
    fs::create_dir_all(&real).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    fs::write(real.join("a.txt"), "a").unwrap();
    let mut stops = Stops::start(&dir.path().join("link"));
    append(&real.join("a.txt"), "b");
    let reading = stops.stop(ToolEdits {
        changed_files: vec![real.join("a.txt")],
        fully_described: true,
    });
    assert_eq!(reading.method, Method::ToolEdits);
    assert_eq!(stops.changed(), Some(false));
}

#[test]
fn a_scan_keeps_its_listing_as_hashes_and_takes_tool_edits_exactly() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("src")).unwrap();
    for i in 0..100 {
        fs::write(root.join(format!("src/{i}.txt")), "x").unwrap();
    }
    let mut stops = Stops::start(root);
    let baseline = stops.baseline.clone().unwrap();
    assert_eq!(baseline.source, Method::Scan);
    assert!(baseline.files.is_empty() && baseline.digest.is_none());
    // 32 characters a file, no path: what each stop reads and writes.
    let json = serde_json::to_string(&baseline).unwrap();
    assert!(json.len() < 100 * 32 + 100, "{json}");
    assert!(baseline.lists("src/7.txt") && !baseline.lists("src/100.txt"));
    assert_eq!(stops.changed(), Some(false));

    // A tool's edit, a new file and a file the agent removed: each is
    // counted at its own stop, and never again.
    append(&root.join("src/7.txt"), "tool");
    fs::write(root.join("src/new.txt"), "n").unwrap();
    assert_eq!(
        stops.edited(&["src/7.txt", "src/new.txt"], true).changed,
        Some(true)
    );
    assert!(!stops.baseline.as_ref().unwrap().stale);
    assert_eq!(stops.changed(), Some(false), "the edits were taken in");
    fs::remove_file(root.join("src/8.txt")).unwrap();
    assert_eq!(stops.edited(&["src/8.txt"], true).changed, Some(true));
    assert_eq!(
        stops.changed(),
        Some(false),
        "the file is gone from the listing"
    );
    append(&root.join("src/9.txt"), "bash");
    assert_eq!(stops.changed(), Some(true), "a change no tool reported");
    assert_eq!(stops.changed(), Some(false));
}

#[cfg(unix)]
#[test]
fn a_scan_never_counts_a_tool_edit_through_a_linked_folder_twice() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    fs::create_dir_all(root.join("real")).unwrap();
    fs::write(root.join("real/a.txt"), "a").unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("link")).unwrap();
    let mut stops = Stops::start(root);
    append(&root.join("real/a.txt"), "b");
    // Named through the link: not a path the scan lists, so the
    // listing cannot take it in exactly and goes stale instead.
    assert_eq!(stops.edited(&["link/a.txt"], true).changed, Some(true));
    assert!(stops.baseline.as_ref().unwrap().stale);
    assert_ne!(stops.changed(), Some(true), "counted once");
    assert_eq!(stops.changed(), Some(false));
}

#[test]
fn a_long_listing_is_kept_as_a_digest() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt"]);
    fs::create_dir_all(root.join("many")).unwrap();
    for i in 0..=MAX_LISTED {
        fs::write(root.join(format!("many/{i}.txt")), "x").unwrap();
    }
    let mut stops = Stops::start(root);
    let baseline = stops.baseline.clone().unwrap();
    assert!(baseline.files.is_empty() && baseline.digest.is_some());
    assert!(serde_json::to_string(&baseline).unwrap().len() < 200);
    assert_eq!(stops.changed(), Some(false));
    append(&root.join("many/7.txt"), "y");
    assert_eq!(stops.changed(), Some(true));
    fs::remove_file(root.join("many/8.txt")).unwrap();
    assert_eq!(stops.changed(), Some(true), "a file gone");
    assert_eq!(stops.changed(), Some(false));

    // A digest cannot take a tool's edit: the baseline goes stale.
    append(&root.join("a.txt"), "tool");
    assert_eq!(stops.edited(&["a.txt"], true).changed, Some(true));
    assert!(stops.baseline.as_ref().unwrap().stale);
    assert_eq!(stops.changed(), None);
    assert_eq!(stops.changed(), Some(false));
}

#[test]
fn the_baseline_stays_bounded() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    fs::write(root.join("a.txt"), "a").unwrap();
    let mut stops = Stops::start(root);
    let names: Vec<String> = (0..MAX_LISTED + 50).map(|i| format!("f{i}.txt")).collect();
    for name in &names {
        fs::write(root.join(name), "x").unwrap();
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    for alone in [true, false] {
        assert_eq!(stops.edited(&refs, alone).changed, Some(true));
        let baseline = stops.baseline.as_ref().unwrap();
        assert!(baseline.files.len() <= MAX_LISTED);
        assert!(baseline.hashed_files.as_ref().map_or(0, String::len) <= MAX_LISTED * 32);
        assert!(baseline.touched.len() <= MAX_LISTED);
    }
}

#[test]
fn a_scan_past_its_limit_never_says_unchanged() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    for i in 0..30 {
        fs::write(root.join(format!("f{i:02}.txt")), "x").unwrap();
    }
    let limits = Limits {
        scan_files: 10,
        scan_time: SCAN_TIMEOUT,
    };
    let mut stops = Stops::start_within(root, limits);
    assert!(stops.baseline.as_ref().unwrap().truncated);
    let reading = stops.full();
    assert_eq!(
        (reading.changed, reading.method),
        (None, Method::Scan),
        "an unchanged start proves nothing about the rest"
    );
    append(&root.join("f25.txt"), "past the limit");
    assert_eq!(
        stops.changed(),
        None,
        "a change past the limit is not denied"
    );
    append(&root.join("f03.txt"), "within the limit");
    assert_eq!(stops.changed(), Some(true), "a change it reached");
    fs::remove_file(root.join("f29.txt")).unwrap();
    for i in 0..20 {
        fs::remove_file(root.join(format!("f{i:02}.txt"))).unwrap();
    }
    assert_eq!(stops.changed(), Some(true), "under the limit again");
    assert_eq!(stops.changed(), Some(false), "and now it can tell");
}

#[test]
fn the_scan_skips_its_ignored_folders() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    fs::write(root.join("a.txt"), "a").unwrap();
    let mut stops = Stops::start(root);
    for folder in [
        "node_modules/x",
        "target/debug",
        ".claude/ralph",
        "src/__pycache__",
    ] {
        fs::create_dir_all(root.join(folder)).unwrap();
        fs::write(root.join(folder).join("f"), "x").unwrap();
    }
    assert_eq!(stops.changed(), Some(false));
    fs::write(root.join("src/lib.rs"), "x").unwrap();
    assert_eq!(stops.changed(), Some(true));
}

#[test]
fn without_a_baseline_a_reading_tells_nothing_but_leaves_one() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt"]);
    let reading = read(root, None, &ToolEdits::default());
    assert_eq!((reading.changed, reading.method), (None, Method::Git));
    assert!(reading.baseline.is_some());
    let reading = read(
        root,
        None,
        &ToolEdits {
            changed_files: vec![root.join("a.txt")],
            fully_described: true,
        },
    );
    assert_eq!((reading.changed, reading.baseline), (Some(true), None));
}

#[test]
fn a_hand_edited_baseline_is_never_passed_to_git() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    repository(root, &["a.txt"]);
    let mut baseline = baseline(root).unwrap();
    baseline.head = Some("--output=pwned".into());
    let reading = read(root, Some(&baseline), &ToolEdits::default());
    assert_eq!(reading.changed, None);
    assert!(!root.join("pwned").exists());
    let json = r#"{"source": "tool_edits", "files": {"a.txt": "zz"}}"#;
    let odd: Baseline = serde_json::from_str(json).unwrap();
    assert_eq!(read(root, Some(&odd), &ToolEdits::default()).changed, None);
}

// ------------------------------------------- programs git must not run

/// A shell command that leaves `marker` behind: had git run it, it shows.
fn trap(marker: &Path) -> String {
    format!("touch '{}'", marker.display())
}

/// `trap` as an executable script (for `core.fsmonitor`).
fn trap_script(dir: &Path, marker: &Path) -> PathBuf {
    let script = dir.join("trap.sh");
    fs::write(&script, format!("#!/bin/sh\n{}\n", trap(marker))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    }
    script
}

/// `git ARGS` in `dir` as a person runs it (stopped after 5 s), to prove
/// that the repository really makes git run the program.
fn plain_git(dir: &Path, args: &[&str]) {
    use crate::process::group::{GroupChild, Lifetime};
    let mut command = crate::own_git::runner::persons_git(dir);
    command
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = GroupChild::spawn(&mut command, Lifetime::DiesWithParent).unwrap();
    let _ = child.wait_then_kill_group(Instant::now() + Duration::from_secs(5));
}

/// Rewrites `a.txt` with the same content: a new stamp, so git compares
/// the content, through whatever filter the file's attributes name.
fn rewrite_unchanged(root: &Path) {
    tick();
    let path = root.join("a.txt");
    fs::write(&path, fs::read(&path).unwrap()).unwrap();
}

/// Stops in `root`, a repository of `a.txt` and `b.txt` made hostile so
/// that git would run a program leaving `marker`: the readings never run
/// it, end well inside git's timeout, and still see what really changed
/// (`method`: how). The caller then proves the program is live.
fn stops_in_a_hostile_repository(root: &Path, marker: &Path, method: Method) {
    let started = Instant::now();
    let mut stops = Stops::start(root);
    rewrite_unchanged(root);
    let reading = stops.full();
    assert_eq!(reading.method, method);
    if method == Method::Git {
        assert_eq!(reading.changed, Some(false), "the same content again");
    }
    append(&root.join("b.txt"), "edit");
    assert_eq!(stops.changed(), Some(true), "a tracked file edited");
    tick();
    fs::write(root.join("new.txt"), "new").unwrap();
    let reading = stops.full();
    assert_eq!(
        (reading.changed, reading.method),
        (Some(true), method),
        "a new file"
    );
    assert!(!marker.exists(), "git ran the program the repository names");
    assert!(
        started.elapsed() < GIT_TIMEOUT,
        "the readings waited for git's timeout: {:?}",
        started.elapsed()
    );
    rewrite_unchanged(root);
}

#[test]
fn git_never_runs_the_fsmonitor_the_repository_names() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    let marker = dir.path().join("ran");
    let script = trap_script(dir.path(), &marker);
    git(
        &root,
        &["config", "core.fsmonitor", &script.display().to_string()],
    );
    stops_in_a_hostile_repository(&root, &marker, Method::Git);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the fsmonitor");
}

#[test]
fn git_never_runs_a_clean_filter_named_in_gitattributes() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    let marker = dir.path().join("ran");
    // Names with dots, quotes, capitals, or none at all are all disabled.
    for name in ["trap", "x.y", "it's", "Up", ""] {
        git(
            &root,
            &["config", &format!("filter.{name}.clean"), &trap(&marker)],
        );
    }
    git(&root, &["config", "filter.trap.required", "true"]);
    fs::write(root.join(".gitattributes"), "*.txt filter=trap\n").unwrap();
    stops_in_a_hostile_repository(&root, &marker, Method::Git);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the clean filter");
    for name in ["x.y", "it's", "Up", ""] {
        fs::remove_file(&marker).unwrap();
        fs::write(
            root.join(".gitattributes"),
            format!("*.txt filter={name}\n"),
        )
        .unwrap();
        let before = baseline(&root);
        rewrite_unchanged(&root);
        let reading = read(&root, before.as_ref(), &ToolEdits::default());
        assert_eq!(reading.method, Method::Git, "{name}");
        assert!(!marker.exists(), "the filter {name:?} ran");
        plain_git(&root, &["status"]);
        assert!(marker.exists(), "plain git status runs the filter {name:?}");
    }
}

#[test]
fn git_never_runs_a_process_filter_from_an_included_file() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    let marker = dir.path().join("ran");
    let included = dir.path().join("included.gitconfig");
    fs::write(
        &included,
        format!("[filter \"long\"]\n\tprocess = {}\n", trap(&marker)),
    )
    .unwrap();
    git(
        &root,
        &["config", "include.path", &included.display().to_string()],
    );
    fs::write(root.join(".gitattributes"), "*.txt filter=long\n").unwrap();
    stops_in_a_hostile_repository(&root, &marker, Method::Git);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the process filter");
}

#[test]
fn git_never_runs_a_filter_named_in_info_attributes() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    let marker = dir.path().join("ran");
    git(&root, &["config", "filter.hidden.clean", &trap(&marker)]);
    fs::write(root.join(".git/info/attributes"), "* filter=hidden\n").unwrap();
    stops_in_a_hostile_repository(&root, &marker, Method::Git);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the filter");
}

#[test]
fn git_never_runs_a_filter_of_the_repository_above_a_folder_that_only_looks_like_one() {
    // `app/.git` is an empty folder: git passes it by and takes the
    // repository above, whose configuration names the filter.
    let dir = TempDir::new().unwrap();
    let top = dir.path().join("repo");
    let root = top.join("app");
    fs::create_dir_all(&root).unwrap();
    repository(&top, &["app/a.txt", "app/b.txt"]);
    let marker = dir.path().join("ran");
    git(&top, &["config", "filter.above.clean", &trap(&marker)]);
    fs::write(top.join(".gitattributes"), "* filter=above\n").unwrap();
    fs::create_dir(root.join(".git")).unwrap();
    let mut stops = Stops::start(&root);
    rewrite_unchanged(&root);
    stops.full();
    assert!(!marker.exists(), "the hook ran the filter");
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the filter");
}

/// Environment variables for [`may_name_filters`].
type Vars<'a> = [(&'a str, &'a Path)];

/// What [`configuration_may_name_filters`] answers for `root` with the
/// environment `vars` (and nothing else).
fn may_name_filters(root: &Path, vars: &Vars) -> bool {
    let vars: Vec<(String, OsString)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.as_os_str().to_owned()))
        .collect();
    configuration_may_name_filters(root, &|name| {
        vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    })
}

#[test]
fn git_config_is_asked_for_merge_drivers_only_when_a_file_may_name_one() {
    let dir = TempDir::new().unwrap();
    let home = dir.path().join("home");
    let root = dir.path().join("repo");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&root).unwrap();
    repository(&root, &["a.txt"]);
    let env = |name: &str| (name == "HOME").then(|| home.as_os_str().to_owned());
    let config = root.join(".git/config");
    let plain = fs::read_to_string(&config).unwrap();
    // An upstream's `merge = refs/heads/main` names no driver.
    fs::write(
            &config,
            format!("{plain}[branch \"main\"]\n\tmerge = refs/heads/main\n[merge]\n\tconflictStyle = diff3\n"),
        )
        .unwrap();
    assert!(!configuration_may_name_merge_drivers(&root, &env));
    for driver in [
        "[merge \"x\"]\n\tdriver = x\n",
        "[ MERGE  \"x\" ]\n\tdriver = x\n",
        "[merge.x]\n\tdriver = x\n",
        "[include]\n\tpath = other\n",
    ] {
        fs::write(&config, format!("{plain}{driver}")).unwrap();
        assert!(
            configuration_may_name_merge_drivers(&root, &env),
            "{driver}"
        );
    }
}

#[test]
#[allow(clippy::too_many_lines)] // one repository taken through each kind of configuration file
fn git_config_is_asked_only_when_a_configuration_file_may_name_a_filter() {
    let dir = TempDir::new().unwrap();
    let home = dir.path().join("home");
    let root = dir.path().join("repo");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&root).unwrap();
    repository(&root, &["a.txt"]);
    let vars = [("HOME", home.as_path())];
    assert!(!may_name_filters(&root, &vars), "nothing names a filter");
    assert!(
        !may_name_filters(&root.join("sub"), &vars),
        "from a subfolder"
    );

    // Each file git reads, with a filter or an include in it.
    let xdg = dir.path().join("xdg");
    let global = dir.path().join("global");
    let with_xdg = [("HOME", home.as_path()), ("XDG_CONFIG_HOME", xdg.as_path())];
    let with_global = [
        ("HOME", home.as_path()),
        ("GIT_CONFIG_GLOBAL", global.as_path()),
    ];
    let cases: [(&Vars, PathBuf, &str); 7] = [
        (
            &vars,
            home.join(".gitconfig"),
            "[Filter \"x\"]\n\tclean = x\n",
        ),
        (
            &vars,
            home.join(".config/git/config"),
            "[filter.x]\nclean = x\n",
        ),
        (
            &with_xdg,
            xdg.join("git/config"),
            "[FILTER \"x\"]\n\tsmudge = x\n",
        ),
        (
            &with_global,
            global.clone(),
            "[filter \"x\"]\n\tprocess = x\n",
        ),
        (
            &vars,
            root.join(".git/config.worktree"),
            "[filter \"x\"]\nclean=x\n",
        ),
        (
            &vars,
            root.join(".git/config"),
            "[includeIf \"onbranch:main\"]\npath = x\n",
        ),
        (
            &vars,
            dir.path().join(".git/config"),
            "[filter \"x\"]\nclean = x\n",
        ),
    ];
    for (vars, file, text) in cases {
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        let before = fs::read(&file).ok();
        let mut with = before.clone().unwrap_or_default();
        with.extend_from_slice(text.as_bytes());
        fs::write(&file, with).unwrap();
        assert!(
            may_name_filters(&root, vars),
            "{} with {text:?}",
            file.display()
        );
        match before {
            Some(bytes) => fs::write(&file, bytes).unwrap(),
            None => fs::remove_file(&file).unwrap(),
        }
        assert!(
            !may_name_filters(&root, vars),
            "{} restored",
            file.display()
        );
    }
    // The same file elsewhere is not read by git, and not here either.
    fs::write(home.join("unrelated"), "[filter \"x\"]\n").unwrap();
    assert!(!may_name_filters(&root, &vars));

    // What cannot be settled without git.
    assert!(may_name_filters(&root, &[]), "no HOME");
    let count = [
        ("HOME", home.as_path()),
        ("GIT_CONFIG_COUNT", Path::new("1")),
    ];
    assert!(
        may_name_filters(&root, &count),
        "configuration in the environment"
    );
    fs::write(root.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    assert!(
        may_name_filters(&root, &vars),
        "a folder that may be a bare repository"
    );
    fs::remove_file(root.join("HEAD")).unwrap();
    fs::write(root.join(".git/commondir"), "..\n").unwrap();
    assert!(
        may_name_filters(&root, &vars),
        "a shared configuration elsewhere"
    );
    fs::remove_file(root.join(".git/commondir")).unwrap();
    let worktree = dir.path().join("worktree");
    fs::create_dir(&worktree).unwrap();
    fs::write(worktree.join(".git"), "gitdir: ../repo/.git\n").unwrap();
    assert!(may_name_filters(&worktree, &vars), "a .git file");
    #[cfg(unix)]
    {
        let fifo = home.join(".gitconfig");
        let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        assert!(
            may_name_filters(&root, &vars),
            "a configuration that is a FIFO"
        );
    }
    assert!(!may_name_filters(
        &dir.path().join("elsewhere"),
        &[("HOME", Path::new("/nonexistent"))]
    ));
}

#[test]
fn a_filter_name_git_cannot_be_told_to_disable_means_a_scan() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    let marker = dir.path().join("ran");
    // `-c filter.a=b.clean=` would set `filter.a` to `b.clean=`.
    git(&root, &["config", "filter.a=b.clean", &trap(&marker)]);
    fs::write(root.join(".git/info/attributes"), "* filter=a=b\n").unwrap();
    stops_in_a_hostile_repository(&root, &marker, Method::Scan);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status runs the filter");
}

#[test]
fn git_never_runs_textconv_or_external_diff_programs() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt", "c.md"]);
    let markers: Vec<PathBuf> = ["command", "textconv", "external"]
        .iter()
        .map(|m| dir.path().join(m))
        .collect();
    git(&root, &["config", "diff.trap.command", &trap(&markers[0])]);
    git(&root, &["config", "diff.trap.textconv", &trap(&markers[1])]);
    git(&root, &["config", "diff.external", &trap(&markers[2])]);
    fs::write(root.join(".gitattributes"), "*.txt diff=trap\n").unwrap();
    stops_in_a_hostile_repository(&root, &markers[0], Method::Git);
    // A commit between two stops: the trees are compared too.
    let mut stops = Stops::start(&root);
    append(&root.join("c.md"), "edit");
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-q", "-m", "two"]);
    assert_eq!(stops.changed(), Some(true), "a commit");
    for marker in &markers {
        assert!(!marker.exists(), "{} ran", marker.display());
    }
    plain_git(&root, &["diff", "HEAD~1", "HEAD"]);
    plain_git(&root, &["diff", "--no-ext-diff", "HEAD~1", "HEAD"]);
    for marker in &markers {
        assert!(marker.exists(), "plain git diff runs {}", marker.display());
    }
}

#[test]
fn git_never_recurses_into_a_submodule_with_its_own_configuration() {
    let dir = TempDir::new().unwrap();
    let inner = dir.path().join("inner");
    fs::create_dir(&inner).unwrap();
    repository(&inner, &["s.txt"]);
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt", "b.txt"]);
    git(
        &root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &inner.display().to_string(),
            "sm",
        ],
    );
    git(&root, &["commit", "-q", "-m", "submodule"]);
    let marker = dir.path().join("ran");
    let sm = root.join("sm");
    git(&sm, &["config", "filter.sub.clean", &trap(&marker)]);
    let script = trap_script(dir.path(), &marker);
    git(
        &sm,
        &["config", "core.fsmonitor", &script.display().to_string()],
    );
    fs::write(sm.join(".git/info/attributes"), "* filter=sub\n")
        .or_else(|_| {
            let gitdir = root.join(".git/modules/sm/info");
            fs::create_dir_all(&gitdir)?;
            fs::write(gitdir.join("attributes"), "* filter=sub\n")
        })
        .unwrap();
    tick();
    fs::write(sm.join("s.txt"), "s.txt\n").unwrap();
    stops_in_a_hostile_repository(&root, &marker, Method::Git);
    // A commit inside the submodule moves what the superproject records.
    let mut stops = Stops::start(&root);
    fs::write(sm.join("s.txt"), "changed\n").unwrap();
    git(
        &sm,
        &[
            "-c",
            "core.fsmonitor=false",
            "-c",
            "filter.sub.clean=",
            "commit",
            "-q",
            "-am",
            "inner",
        ],
    );
    assert_eq!(stops.changed(), Some(true), "the submodule's HEAD moved");
    assert!(!marker.exists(), "git ran the submodule's program");
    tick();
    fs::write(sm.join("s.txt"), "changed\n").unwrap();
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status recurses and runs it");
}

#[test]
fn a_partial_clone_never_fetches_a_missing_object() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["d/a.txt"]);
    let marker = dir.path().join("ran");
    for (key, value) in [
        ("core.repositoryformatversion", "1"),
        ("extensions.partialClone", "origin"),
        ("remote.origin.url", "ssh://example.invalid/x"),
        ("remote.origin.promisor", "true"),
        ("core.sshCommand", &format!("{}; false", trap(&marker))),
    ] {
        git(&root, &["config", key, value]);
    }
    // The index no longer matches HEAD's tree of `d`, and that tree is gone.
    append(&root.join("d/a.txt"), "staged");
    git(&root, &["add", "d/a.txt"]);
    let out = crate::own_git::runner::persons_git(&root)
        .args(["rev-parse", "HEAD:d"])
        .output()
        .unwrap();
    let tree = String::from_utf8(out.stdout).unwrap();
    let tree = tree.trim();
    fs::remove_file(root.join(format!(".git/objects/{}/{}", &tree[..2], &tree[2..]))).unwrap();
    let started = Instant::now();
    let mut stops = Stops::start(&root);
    tick();
    fs::write(root.join("new.txt"), "new").unwrap();
    assert_eq!(stops.changed(), Some(true), "seen by the scan");
    assert!(!marker.exists(), "git fetched through core.sshCommand");
    assert!(started.elapsed() < GIT_TIMEOUT);
    plain_git(&root, &["status"]);
    assert!(marker.exists(), "plain git status fetches the tree");
}

#[cfg(unix)]
#[test]
fn a_configuration_that_blocks_git_costs_the_reading_not_the_stop() {
    let dir = TempDir::new().unwrap();
    let root = dir.path().join("repo");
    fs::create_dir(&root).unwrap();
    repository(&root, &["a.txt"]);
    // Included, it is opened for reading, and nothing ever writes to it.
    let fifo = dir.path().join("included.gitconfig");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    git(
        &root,
        &["config", "include.path", &fifo.display().to_string()],
    );
    let started = Instant::now();
    let listed = disabled_filters(&root, Instant::now() + Duration::from_millis(300));
    assert!(matches!(
        listed,
        Err(crate::own_git::drivers::DriverError::Failed)
    ));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn tdd_scenario_is_read_when_present() {
    let dir = TempDir::new().unwrap();
    assert_eq!(tdd_scenario(dir.path()), None);
    let runtime = dir.path().join(RUNTIME_DIR);
    fs::create_dir_all(&runtime).unwrap();
    fs::write(
        runtime.join(TDD_STATE_FILE),
        r#"{"currentScenario": "login works", "other": 1}"#,
    )
    .unwrap();
    assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("login works"));
    fs::write(runtime.join(TDD_STATE_FILE), r#"{"currentScenario": 7}"#).unwrap();
    assert_eq!(tdd_scenario(dir.path()).as_deref(), Some("7"));
    fs::write(runtime.join(TDD_STATE_FILE), "not json").unwrap();
    assert_eq!(tdd_scenario(dir.path()), None);
}
