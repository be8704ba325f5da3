use super::*;
use crate::process::group::Waiting;
use std::fs;
use std::path::PathBuf;

/// A repository with one commit, in a temp folder.
fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::TempDir::new().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap().join("p");
    fs::create_dir_all(&root).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["-c", "user.name=p", "-c", "user.email=p@x"],
    ] {
        let mut git = persons_git(&root);
        git.args(args).env("GIT_CONFIG_GLOBAL", "/dev/null");
        if args[0] == "-c" {
            git.args(["commit", "-q", "--allow-empty", "-m", "one"]);
        }
        assert!(git.status().unwrap().success(), "{args:?}");
    }
    (dir, root)
}

/// An executable script at `path`.
fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

#[test]
fn every_call_gets_no_prompt_batch_ssh_and_the_fixed_locale() {
    let mut sh = Command::new("sh");
    sh.args([
        "-c",
        "printf '%s|%s|%s|%s' \"$GIT_TERMINAL_PROMPT\" \"$LC_ALL\" \"${LANGUAGE-unset}\" \"$GIT_SSH_COMMAND\"",
    ])
    .env("LANGUAGE", "de")
    .env("LC_ALL", "de_DE.UTF-8");
    let out = stand_in(sh, Waiting::Pidfd).text().unwrap();
    let fields: Vec<&str> = out.split('|').collect();
    assert_eq!(fields[..3], ["0", "C", "unset"], "{out}");
    assert!(fields[3].ends_with(" -o BatchMode=yes"), "{out}");
}

#[test]
fn ssh_is_run_in_batch_mode() {
    let (dir, root) = repo();
    let bin = dir.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let said = dir.path().join("ssh-args");
    script(
        &bin.join("ssh"),
        &format!("echo \"$@\" > '{}'\nexit 255", said.display()),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let ssh = SshCommand::from_sources(&SshSources::default());
    assert_eq!(ssh.as_str(), "ssh -o BatchMode=yes");
    let err = GitCall::find(&root)
        .unwrap()
        .reaching("ssh", &ssh)
        .env("PATH", path)
        .args(["ls-remote", "ssh://127.0.0.1/nowhere.git"])
        .timeout(Duration::from_secs(20))
        .run()
        .unwrap_err();
    assert!(matches!(err, GitError::Unreachable { .. }), "{err:?}");
    let args = fs::read_to_string(&said).unwrap();
    assert!(args.contains("-o BatchMode=yes"), "ssh ran with {args:?}");
}

#[test]
fn the_persons_ssh_command_keeps_its_own_options_and_gains_batch_mode() {
    let command = |sources: SshSources| SshCommand::from_sources(&sources).as_str().to_string();
    assert_eq!(command(SshSources::default()), "ssh -o BatchMode=yes");
    // GIT_SSH_COMMAND wins over core.sshCommand, which wins over GIT_SSH.
    let theirs = SshSources {
        env_command: Some("ssh -i ~/.ssh/work".into()),
        config_command: Some("ssh -F cfg".into()),
        program: Some("/usr/bin/ssh".into()),
        variant: None,
    };
    assert_eq!(
        command(theirs.clone()),
        "ssh -i ~/.ssh/work -o BatchMode=yes"
    );
    let config = SshSources {
        env_command: None,
        ..theirs.clone()
    };
    assert_eq!(command(config), "ssh -F cfg -o BatchMode=yes");
    let program = SshSources {
        program: Some("/opt/my ssh/ssh".into()),
        ..SshSources::default()
    };
    assert_eq!(command(program), "'/opt/my ssh/ssh' -o BatchMode=yes");
    // PuTTY's programs take no OpenSSH option; neither does `simple`.
    let plink = SshSources {
        program: Some(r"C:\Program Files\PuTTY\plink.exe".into()),
        ..SshSources::default()
    };
    assert_eq!(command(plink), r"'C:\Program Files\PuTTY\plink.exe'");
    let simple = SshSources {
        env_command: Some("my-wrapper".into()),
        variant: Some("simple".into()),
        ..SshSources::default()
    };
    assert_eq!(command(simple), "my-wrapper");
    // The program as the shell finds it: past assignments and wrappers,
    // quotes taken off.
    for line in [
        "PLINK_PROTOCOL=ssh plink -batch",
        "env -u DISPLAY \"/opt/Pu TTY/plink\"",
    ] {
        let plink = SshSources {
            env_command: Some(line.into()),
            ..SshSources::default()
        };
        assert_eq!(command(plink), line);
    }
}

#[test]
fn a_hung_ssh_is_cut_at_the_deadline_with_its_whole_group() {
    let (dir, root) = repo();
    // Named `ssh`, so git takes it for OpenSSH and runs it at once
    // (another name would be probed first, its pipes not git's).
    fs::create_dir(dir.path().join("hung")).unwrap();
    let fake = dir.path().join("hung/ssh");
    // As a hung ssh does: it answers nothing and keeps every pipe it was
    // given open (git's, and ralph's stderr through git).
    script(&fake, "exec sleep 30");
    let ssh = SshCommand::from_sources(&SshSources {
        env_command: Some(fake.display().to_string()),
        ..SshSources::default()
    });
    for (url, waiting) in [
        ("ssh://127.0.0.1/remote.git", Waiting::Pidfd),
        ("127.0.0.1:remote.git", Waiting::Threads),
    ] {
        let mut call = GitCall::find(&root)
            .unwrap()
            .reaching("ssh", &ssh)
            .args(["ls-remote", url])
            .timeout(Duration::from_secs(2));
        call.waiting = waiting;
        let started = Instant::now();
        let err = call.run().unwrap_err();
        let took = started.elapsed();
        assert_eq!(
            err,
            GitError::TimedOut {
                timeout: Duration::from_secs(2)
            },
            "{url}"
        );
        assert!(
            err.to_string().contains("did not answer within 2 s"),
            "{err}"
        );
        assert!(
            took < Duration::from_secs(6),
            "{url}: returned after {took:?}"
        );
    }
}

#[test]
fn input_reaches_git_and_failures_are_told_apart() {
    let (dir, root) = repo();
    let blob = GitCall::find(&root)
        .unwrap()
        .args(["hash-object", "--stdin"])
        .input("hello\n")
        .text()
        .unwrap();
    assert_eq!(blob, "ce013625030ba8dba906f756967f9e9ca394464a");
    let err = GitCall::find(&root)
        .unwrap()
        .args(["rev-parse", "--verify", "--quiet", "no-such-ref"])
        .run()
        .unwrap_err();
    assert_eq!(
        err,
        GitError::Failed {
            status: Some(1),
            stderr: String::new()
        }
    );
    // Another writer's lock: a race, not a failure of the repository.
    fs::write(root.join(".git/refs/heads/main.lock"), "").unwrap();
    let err = GitCall::find(&root)
        .unwrap()
        .args(["update-ref", "refs/heads/main", "HEAD"])
        .run()
        .unwrap_err();
    assert!(matches!(err, GitError::Raced { .. }), "{err:?}");
    let err = GitCall::find(&dir.path().join("elsewhere")).unwrap_err();
    assert!(matches!(err, GitError::Place(_)), "{err:?}");
    let nowhere = GitPlace {
        git_dir: dir.path().join("none/.git"),
        common_dir: dir.path().join("none/.git"),
        work_tree: dir.path().to_path_buf(),
    };
    let err = GitCall::new(&nowhere, dir.path())
        .args(["rev-parse", "HEAD"])
        .run()
        .unwrap_err();
    assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
}

#[test]
fn a_push_s_refused_refs_are_a_race_or_a_refusal() {
    let classify = |stdout: &str, stderr: &str| classify(true, Some(1), stdout.as_bytes(), stderr);
    let lost = "!\tabc:refs/ralph/queue/x/1\t[remote rejected] (failed to update ref)";
    assert!(matches!(classify(lost, ""), GitError::Raced { .. }));
    for raced in [
        "!\tabc:refs/heads/main\t[remote rejected] (atomic transaction failed)",
        "!\tabc:refs/heads/main\t[rejected] (fetch first)",
        "!\tabc:refs/ralph/queue/x/1\t[rejected] (stale info)",
    ] {
        assert!(
            matches!(classify(raced, ""), GitError::Raced { .. }),
            "{raced}"
        );
    }
    let hook = "!\tabc:refs/ralph/queue/x/1\t[remote rejected] (pre-receive hook declined)";
    assert!(matches!(classify(hook, ""), GitError::Refused { .. }));
    let atomic = "fatal: the receiving end does not support --atomic push";
    assert!(matches!(classify("", atomic), GitError::Refused { .. }));
    let gone = "fatal: Could not read from remote repository.\n\nPlease make sure";
    assert_eq!(
        classify("", gone),
        GitError::Unreachable {
            why: "fatal: Could not read from remote repository. Please make sure".into()
        }
    );
}

#[cfg(unix)]
fn gone(pid: &str) -> bool {
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // A zombie until its new parent reaps it counts as gone.
        match fs::read_to_string(&stat) {
            Err(_) => return true,
            Ok(s) if s.contains(") Z ") => return true,
            Ok(_) if Instant::now() > deadline => return false,
            Ok(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn git_is_killed_with_its_whole_group() {
    let run = |script: &str, timeout: Duration, waiting| {
        let mut sh = Command::new("sh");
        sh.args(["-c", script]);
        stand_in(sh, waiting).timeout(timeout).run()
    };
    let long = Duration::from_secs(20);
    for waiting in [Waiting::Pidfd, Waiting::Threads] {
        let dir = tempfile::TempDir::new().unwrap();
        let pid_file = dir.path().join("sleeper.pid");
        let sleeper = format!("sleep 30 & echo $! > '{}';", pid_file.display());
        // Overruns its deadline: killed, with what it started.
        let started = Instant::now();
        let got = run(
            &format!("{sleeper} sleep 30"),
            Duration::from_millis(300),
            waiting,
        );
        assert!(matches!(got, Err(GitError::TimedOut { .. })), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(gone(&fs::read_to_string(&pid_file).unwrap()));
        // Ends, but what it started holds its output open: killed too.
        fs::remove_file(&pid_file).unwrap();
        let started = Instant::now();
        let got = run(&format!("{sleeper} echo done"), long, waiting).unwrap();
        assert_eq!(got.stdout, b"done\n");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(gone(&fs::read_to_string(&pid_file).unwrap()));
        // Output, stderr, exit codes and a start that fails, either way.
        let got = run("printf 'a\\0b'; echo said >&2; exit 0", long, waiting).unwrap();
        assert_eq!((&got.stdout[..], &got.stderr[..]), (&b"a\0b"[..], "said\n"));
        let got = run("echo broken >&2; exit 3", long, waiting);
        assert_eq!(
            got,
            Err(GitError::Failed {
                status: Some(3),
                stderr: "broken".into()
            })
        );
        let got = stand_in(Command::new(dir.path().join("no-such-git")), waiting).run();
        assert!(matches!(got, Err(GitError::CannotStart(_))), "{got:?}");
        // A large output is read whole (more than a pipe holds), both pipes.
        let got = run(
            "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2",
            long,
            waiting,
        )
        .unwrap();
        assert_eq!((got.stdout.len(), got.stderr.len()), (300_000, 200_000));
    }
}
