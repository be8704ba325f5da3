//! Hostile session ids, private file modes, and symbolic links never
//! followed for writing: at the state, its folder, the settings and the
//! temp names `init` writes.

use super::{
    TIMEOUT, block_reason, drop_root, hook_command, mode, one_line, rejected, replace_with_special,
    run_hook, run_hook_quick, state_behind_a_link, to_bytes, working,
};
use ralph_tests::SIGNAL;
use ralph_tests::bins;
use ralph_tests::cli::{SID, looping, stop_input};
use ralph_tests::project::{INSTALLED_FILES, TempProject, run_with_timeout};
use serde_json::json;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn state_symlink_is_refused_and_its_target_untouched() {
    let project = looping("state-symlink", 5);
    let (target, before) = state_behind_a_link(&project);
    let state = project.state_path();
    let input = working(&project);
    one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is a symbolic link; ralph only uses a regular file here)"],
    );
    assert_eq!(
        fs::read(&target).unwrap(),
        before,
        "the target is untouched"
    );
    assert!(fs::symlink_metadata(&state).unwrap().is_symlink());
}

// ---------------------------------------------------------------- security

#[test]
fn escaping_session_ids_are_rejected() {
    let project = looping("session-escape", 5);
    let runtime = project.runtime_dir();
    let listing = || {
        let mut names: Vec<_> = fs::read_dir(&runtime)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let files = listing();
    let long = "a".repeat(201);
    for id in [
        "../..",
        "../../../../etc/passwd",
        "/",
        "/etc/passwd",
        "a/b",
        "..\\..",
        "a\u{0}b",
        "\u{0}",
        long.as_str(),
        "a b",
        "a\nb",
        "é",
        "",
        "$(touch pwned)",
    ] {
        let mut input = stop_input(&project, Some("working"));
        input["session_id"] = json!(id);
        rejected(
            &project,
            &to_bytes(&input),
            &[
                "the hook input field `session_id` must be 1 to 200 letters, digits, '-', '_', '.' or ':'",
            ],
        );
    }
    assert_eq!(listing(), files, "nothing created next to the state");
    assert!(!project.path("pwned").exists());
}

/// Runs `cmd` with umask 000, so only the modes ralph asks for apply.
#[allow(unsafe_code)]
fn with_open_umask(cmd: &mut Command) {
    // SAFETY: umask(2) is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
}

#[test]
fn state_files_are_private() {
    let project = TempProject::initialised("modes");
    project.write_prompt("Do the task.\n");
    let mut start = project.command(bins::ctl());
    start.args(["start", "--session-id", SID]);
    with_open_umask(&mut start);
    run_with_timeout(start, None, TIMEOUT).assert_code(0);
    assert_eq!(mode(&project.state_path()), 0o600, "after ralph-ctl start");

    let mut hook = hook_command(&project);
    with_open_umask(&mut hook);
    block_reason(&run_hook(hook, &working(&project)));
    assert_eq!(project.state().unwrap()["iteration"], 2);
    assert_eq!(mode(&project.state_path()), 0o600, "after a hook run");
}

#[test]
fn a_symlinked_state_is_never_followed_for_writing() {
    let project = looping("symlink-write", 5);
    let (target, before) = state_behind_a_link(&project);
    let state = project.state_path();
    let input = to_bytes(&stop_input(&project, Some(&format!("done {SIGNAL}"))));
    one_line(
        &run_hook(hook_command(&project), &input),
        &["symbolic link"],
    );
    assert_eq!(fs::read(&target).unwrap(), before);

    // `start` refuses it; `start --force` and `reset` move the link aside.
    project
        .ctl(&["start", "--session-id", SID], &[])
        .assert_code(3);
    assert_eq!(fs::read(&target).unwrap(), before);
    project
        .ctl(&["start", "--force", "--session-id", SID], &[])
        .assert_code(0);
    assert_eq!(fs::read(&target).unwrap(), before, "start --force");
    assert!(!fs::symlink_metadata(&state).unwrap().is_symlink());
    fs::remove_file(&state).unwrap();
    std::os::unix::fs::symlink(&target, &state).unwrap();
    project.ctl(&["reset"], &[]).assert_code(0);
    assert_eq!(fs::read(&target).unwrap(), before, "reset");
    assert!(fs::symlink_metadata(&state).is_err());
}

#[test]
fn a_linked_state_folder_is_refused_by_the_hook_and_ralph_ctl() {
    // A link where the state folder should be (as a cloned repository could
    // ship) points at another project's loop: nothing may read or replace it.
    let other = looping("linked-other", 5);
    let theirs = other.runtime_dir();
    let before = fs::read(other.state_path()).unwrap();
    let project = looping("linked-mine", 5);
    let mine = project.runtime_dir();
    fs::remove_dir_all(&mine).unwrap();
    std::os::unix::fs::symlink(&theirs, &mine).unwrap();
    let needle = format!("{} is a symbolic link", mine.display());
    let input = to_bytes(&stop_input(&project, Some(&format!("done {SIGNAL}"))));
    one_line(&run_hook(hook_command(&project), &input), &[&needle]);
    for args in [
        &["status"][..],
        &["start", "--force", "--session-id", SID],
        &["reset"],
        &["log"],
        &["finish", "--session-id", SID],
    ] {
        let run = project.ctl(args, &[]);
        assert_eq!(run.code, Some(1), "{args:?}: {run:?}");
        assert!(run.stderr.contains(&needle), "{args:?}: {run:?}");
    }
    assert_eq!(fs::read(other.state_path()).unwrap(), before);
    assert!(fs::symlink_metadata(&mine).unwrap().is_symlink());
}

#[test]
fn an_unsearchable_state_folder_is_named_not_taken_for_no_loop() {
    let project = looping("unsearchable", 5);
    let runtime = project.runtime_dir();
    let before = project.state_bytes();
    let mut hook = hook_command(&project);
    drop_root(&project, &mut hook);
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o000)).unwrap();
    let run = run_hook(hook, &working(&project));
    let mut reset = project.command(bins::ctl());
    reset.arg("reset");
    drop_root(&project, &mut reset);
    let reset = run_with_timeout(reset, None, TIMEOUT);
    fs::set_permissions(&runtime, fs::Permissions::from_mode(0o755)).unwrap();
    let needle = format!(
        "cannot look at {}: Permission denied",
        project.state_path().display()
    );
    one_line(&run, &[&needle]);
    assert_eq!(reset.code, Some(1), "{reset:?}");
    assert!(reset.stderr.contains(&needle), "{reset:?}");
    assert_eq!(project.state_bytes(), before);
}

// ------------------------------------------ files ralph-ctl init writes and reads

/// The last pid the kernel handed out (Linux); the next ones follow it.
fn last_pid() -> u32 {
    fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn init_never_writes_through_links_planted_at_the_next_pids_temp_names() {
    // A cloned repository can ship `.claude/ralph/.PROMPT.md.tmp-<pid>`
    // links to a file elsewhere for thousands of pids.
    const AHEAD: u32 = 3000;
    let names = [
        ".claude/ralph/.PROMPT.md.tmp-",
        ".claude/ralph/.guardrails.md.tmp-",
        ".claude/ralph/.ralph-audit.sh.tmp-",
        ".claude/ralph/.ralph-audit.bat.tmp-",
        ".claude/.settings.json.tmp-",
    ];
    for attempt in 1.. {
        let project = TempProject::new("planted-temp");
        fs::create_dir_all(project.path(".claude/ralph")).unwrap();
        let victim = project.tmp.join("victim.txt");
        fs::write(&victim, "keep me\n").unwrap();
        fs::set_permissions(&victim, fs::Permissions::from_mode(0o644)).unwrap();
        let from = last_pid() + 1;
        for pid in from..from + AHEAD {
            for name in names {
                std::os::unix::fs::symlink(&victim, project.path(format!("{name}{pid}"))).unwrap();
            }
        }
        let mut cmd = project.command(bins::ctl());
        cmd.arg("init")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let pid = child.id();
        let (status, stdout, stderr) = ralph_tests::project::wait_with_timeout(&mut child, TIMEOUT);
        if !(from..from + AHEAD).contains(&pid) {
            // Other processes took every planted pid first: plant again.
            assert!(attempt < 5, "ralph-ctl never got a planted pid");
            continue;
        }
        assert!(status.is_some_and(|s| s.success()), "{stdout}\n{stderr}");
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        assert_eq!(mode(&victim), 0o644);
        for file in INSTALLED_FILES {
            let meta = fs::symlink_metadata(project.path(file)).unwrap();
            assert!(meta.is_file(), "{file} is a regular file");
        }
        // Run again: every file is rewritten (the launcher's path changes
        // nothing, so change the settings), still never through a link.
        fs::write(project.path(".claude/settings.json"), "{}\n").unwrap();
        project.init();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "keep me\n");
        println!(
            "ralph-ctl init ran as pid {pid}, planted {from}..{}",
            from + AHEAD
        );
        break;
    }
}

#[test]
fn init_refuses_a_link_where_it_writes_and_writes_nothing() {
    for name in [
        ".claude/settings.json",
        ".claude/ralph/ralph-audit.sh",
        ".claude/ralph/ralph-audit.bat",
    ] {
        let project = TempProject::new("init-link");
        let victim = project.tmp.join("victim.json");
        fs::write(&victim, "{\"model\": \"opus\"}\n").unwrap();
        let path = project.path(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let run = project.ctl(&["init"], &[]);
        assert_eq!(run.code, Some(1), "{name}: {run:?}");
        let line = format!(
            "ralph-ctl: {} is a symbolic link; ralph-ctl init writes only regular files there",
            path.display()
        );
        assert!(run.stderr.starts_with(&line), "{name}: {run:?}");
        assert_eq!(run.stderr.lines().count(), 1, "{run:?}");
        assert_eq!(
            fs::read_to_string(&victim).unwrap(),
            "{\"model\": \"opus\"}\n"
        );
        assert!(fs::symlink_metadata(&path).unwrap().is_symlink());
        assert!(
            !project.path(".claude/ralph/PROMPT.md").exists(),
            "{name}: nothing written before the refusal"
        );
    }

    // A PROMPT.md that is a link to a regular file is the person's: kept,
    // read through, never written. A dangling one is refused.
    let project = TempProject::new("init-prompt-link");
    let shared = project.tmp.join("shared-prompt.md");
    fs::write(&shared, "The shared task.\n").unwrap();
    let prompt = project.path(".claude/ralph/PROMPT.md");
    fs::create_dir_all(prompt.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&shared, &prompt).unwrap();
    let run = project.ctl(&["init"], &[]);
    run.assert_code(0);
    assert!(
        run.stdout.contains("kept      .claude/ralph/PROMPT.md"),
        "{run:?}"
    );
    assert_eq!(fs::read_to_string(&shared).unwrap(), "The shared task.\n");
    assert!(fs::symlink_metadata(&prompt).unwrap().is_symlink());
    fs::remove_file(&shared).unwrap();
    let run = project.ctl(&["init"], &[]);
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.stderr
            .contains(&format!("{} is a symbolic link", prompt.display())),
        "{run:?}"
    );
    assert!(!shared.exists(), "nothing created through the link");
}

#[test]
fn settings_json_as_a_fifo_or_a_device_is_named_at_once() {
    let project = looping("settings-fifo", 5);
    fs::write(
        project.path(".claude/ralph/config.json"),
        r#"{"verify": [{"name": "ok", "command": "true", "timeoutSeconds": 5}]}"#,
    )
    .unwrap();
    let settings = project.path(".claude/settings.json");
    let shown = settings.display().to_string();
    for (kind, init_problem) in [
        ("a FIFO", "is not a regular file"),
        ("a link to /dev/zero", "is a symbolic link"),
    ] {
        replace_with_special(&settings, kind);

        // Each command answers at once, with `code` and its first line
        // of stderr starting `says`.
        let at_once = |args: &[&str], code: i32, says: &str| {
            let run = project.ctl(args, &[]);
            let what = format!("{}, settings.json {kind}", args[0]);
            assert_eq!(run.code, Some(code), "{what}: {run:?}");
            assert!(run.stderr.starts_with(says), "{what}: {run:?}");
            println!("{what}: {:?}", run.elapsed);
            assert!(run.elapsed < Duration::from_secs(5), "{run:?}");
        };
        at_once(&["init"], 1, &format!("ralph-ctl: {shown} {init_problem}"));
        at_once(
            &["start", "--force", "--session-id", SID],
            0,
            &format!("ralph-ctl: warning: cannot read {shown}: not a regular file"),
        );

        // The hook does not read it (the timeout's fit is said once, at the
        // start): a claim is judged at once, with nothing to say about it.
        let input = to_bytes(&stop_input(&project, Some(&format!("All done.\n{SIGNAL}"))));
        let run = run_hook_quick(hook_command(&project), &input);
        assert!(run.stderr.is_empty(), "hook, {kind}: {run:?}");
        assert!(
            run.stdout.contains("Ralph loop complete"),
            "hook, {kind}: {run:?}"
        );
        println!("hook, settings.json {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");
        assert_eq!(project.state().unwrap()["status"], "complete");
    }
}
