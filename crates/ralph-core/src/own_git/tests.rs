use super::*;
use std::process::Command;

/// git as the person runs it in `dir` (their configuration, none of ralph's).
fn person(dir: &Path, args: &[&str]) -> String {
    let out = runner::persons_git(dir)
        .args(["-c", "user.name=p", "-c", "user.email=p@x"])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository with one commit, and a worktree ralph would make.
fn repo() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::TempDir::new().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("p");
    std::fs::create_dir_all(&root).unwrap();
    person(&root, &["init", "-q", "-b", "main"]);
    std::fs::write(root.join("a.txt"), "a\n").unwrap();
    person(&root, &["add", "a.txt"]);
    person(&root, &["commit", "-q", "-m", "one"]);
    let tree = root.join(".claude/worktrees/item-a");
    person(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "ralph/item-a",
            tree.to_str().unwrap(),
        ],
    );
    (dir, root, tree)
}

/// A folder whose configuration runs `program`'s mark as an fsmonitor and
/// a signing program, made as the agent would: a copy of the real `.git`.
fn elsewhere(root: &Path, marks: &Path) -> PathBuf {
    let evil = root.parent().unwrap().join("evil");
    let copied = Command::new("cp")
        .arg("-r")
        .arg(root.join(".git"))
        .arg(&evil)
        .status()
        .unwrap();
    assert!(copied.success());
    let program = root.parent().unwrap().join("mark.sh");
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\ntouch {}/$(basename \"$0\")-ran\ncat\n",
            marks.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let config = evil.join("config");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[core]\n\tfsmonitor = {p}\n[commit]\n\tgpgSign = true\n[gpg]\n\tprogram = {p}\n",
        p = program.display()
    ));
    std::fs::write(&config, text).unwrap();
    evil
}

#[test]
fn a_checkout_is_its_own_git_folder() {
    let (_d, root, _tree) = repo();
    let inside = root.join("sub");
    std::fs::create_dir_all(&inside).unwrap();
    let place = GitPlace::find(&inside).unwrap();
    assert_eq!(
        place,
        GitPlace {
            git_dir: root.join(".git"),
            common_dir: root.join(".git"),
            work_tree: root.clone(),
        }
    );
}

#[test]
fn ralphs_worktree_is_found_by_its_name_never_by_its_git_file() {
    let (_d, root, tree) = repo();
    // The agent rewrites the worktree's .git file and its record's gitdir.
    std::fs::write(tree.join(".git"), "gitdir: /nowhere\n").unwrap();
    std::fs::write(root.join(".git/worktrees/item-a/gitdir"), "/nowhere/.git\n").unwrap();
    let place = GitPlace::find(&tree).unwrap();
    assert_eq!(
        place,
        GitPlace {
            git_dir: root.join(".git/worktrees/item-a"),
            common_dir: root.join(".git"),
            work_tree: tree.clone(),
        }
    );
    // Its branch, as ralph's git sees it through the place.
    let out = GitCall::new(&place, &tree)
        .args(["symbolic-ref", "--short", "HEAD"])
        .text()
        .unwrap();
    assert_eq!(out, "ralph/item-a");
}

#[test]
fn a_worktree_without_its_record_or_no_repository_is_said() {
    let (_d, root, tree) = repo();
    std::fs::remove_dir_all(root.join(".git/worktrees/item-a")).unwrap();
    let err = GitPlace::find(&tree).unwrap_err();
    assert!(matches!(err, PlaceError::NoWorktreeRecord { .. }), "{err}");
    assert!(err.to_string().contains("git worktree prune"), "{err}");
    let nothing = tempfile::TempDir::new().unwrap();
    let err = GitPlace::find(nothing.path()).unwrap_err();
    assert!(err.to_string().contains("in no git repository"), "{err}");
}

#[test]
fn the_persons_own_linked_checkout_is_read_from_its_git_file() {
    let (_d, root, _tree) = repo();
    let linked = root.parent().unwrap().join("linked");
    person(
        &root,
        &[
            "worktree",
            "add",
            "-q",
            "-b",
            "mine",
            linked.to_str().unwrap(),
        ],
    );
    let place = GitPlace::find(&linked).unwrap();
    assert_eq!(place.common_dir.canonicalize().unwrap(), root.join(".git"));
    assert_eq!(
        place.git_dir.canonicalize().unwrap(),
        root.join(".git/worktrees/linked")
    );
    std::fs::write(linked.join(".git"), "nonsense\n").unwrap();
    let err = GitPlace::find(&linked).unwrap_err();
    assert!(err.to_string().contains("gitdir:"), "{err}");
}

#[test]
fn a_planted_commondir_keeps_every_git_of_ralphs_out() {
    let (dir, root, tree) = repo();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let evil = elsewhere(&root, &marks);
    let record = root.join(".git/worktrees/item-a/commondir");
    let planted = root.join(".git/commondir");
    for (file, folder) in [(&planted, &root), (&record, &tree)] {
        std::fs::write(file, format!("{}\n", evil.display())).unwrap();
        match GitPlace::find(folder) {
            Err(PlaceError::Redirected { file: named, names }) => {
                assert_eq!(&named, file);
                assert_eq!(names, evil.display().to_string());
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(file).unwrap();
    }
    // A worktree record's own `../..` is what git writes: fine.
    std::fs::write(&record, "../..\n").unwrap();
    assert!(GitPlace::find(&tree).is_ok());
    // Why: git's refs follow the file, whatever GIT_COMMON_DIR says.
    std::fs::write(&planted, format!("{}\n", evil.display())).unwrap();
    let place = GitPlace {
        git_dir: root.join(".git"),
        common_dir: root.join(".git"),
        work_tree: root.clone(),
    };
    let out = GitCall::new(&place, &root)
        .args(["-c", "user.name=r", "-c", "user.email=r@x"])
        .args(["commit", "-q", "--allow-empty", "-m", "through it"])
        .run();
    assert!(out.is_ok(), "{out:?}");
    std::fs::remove_file(&planted).unwrap();
    assert_eq!(person(&root, &["log", "--format=%s", "-1"]), "one");
    // Its programs stay off all the same.
    let ran: Vec<String> = std::fs::read_dir(&marks)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(ran.is_empty(), "ralph's git ran {ran:?}");
}

#[test]
fn signing_the_repository_asks_for_is_off_in_ralphs_commits() {
    let (dir, root, tree) = repo();
    let marks = dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let program = dir.path().join("gpg.sh");
    std::fs::write(
        &program,
        format!("#!/bin/sh\ntouch {}/gpg-ran\nexit 1\n", marks.display()),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    // The item's commit, made before the repository asks for signatures.
    std::fs::write(tree.join("b.txt"), "b\n").unwrap();
    person(&tree, &["add", "b.txt"]);
    person(&tree, &["commit", "-q", "-m", "item"]);
    person(&root, &["config", "commit.gpgSign", "true"]);
    person(&root, &["config", "gpg.program", program.to_str().unwrap()]);
    person(&root, &["config", "merge.verifySignatures", "true"]);
    let place = GitPlace::find(&root).unwrap();
    let out = GitCall::new(&place, &root)
        .args(["merge", "--ff-only", "--quiet", "ralph/item-a"])
        .run();
    assert!(out.is_ok(), "{out:?}");
    let out = GitCall::new(&place, &root)
        .args(["-c", "user.name=r", "-c", "user.email=r@x"])
        .args(["commit", "-q", "--allow-empty", "-m", "unsigned"])
        .run();
    assert!(out.is_ok(), "{out:?}");
    assert!(
        !marks.join("gpg-ran").exists(),
        "ralph's git ran gpg.program"
    );
    // The person's own git would have run it.
    let out = runner::persons_git(&root)
        .args(["-c", "user.name=p", "-c", "user.email=p@x"])
        .args(["commit", "-q", "--allow-empty", "-m", "theirs"])
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        marks.join("gpg-ran").exists(),
        "the test's gpg.program works"
    );
}
