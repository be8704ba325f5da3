//! What must never run: the model's text, a program that git's
//! configuration names; and verification commands die with a killed
//! hook.

use super::{
    assistant_line, block_reason, ended, hook_command, run_hook, to_bytes, transcript_input,
};
use ralph_tests::SIGNAL;
use ralph_tests::cli::{SID, looping, looping_idle, stop_input};
use ralph_tests::project::{
    TempProject, process_group_of, processes_in_group, processes_in_pid_namespace,
    processes_matching, signal_process,
};
use serde_json::json;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

#[test]
fn model_text_is_never_executed() {
    let project = looping_idle("no-exec", 25);
    let marker = |n: u32| project.tmp.join(format!("pwned-{n}"));
    let texts = [
        format!("$(touch {})", marker(1).display()),
        format!("`touch {}`", marker(2).display()),
        format!("; touch {} #", marker(3).display()),
        format!(
            "| touch {}\n&& touch {}",
            marker(4).display(),
            marker(5).display()
        ),
        format!("${{IFS}}$(touch${{IFS}}{})", marker(6).display()),
    ];
    for text in &texts {
        let run = run_hook(
            hook_command(&project),
            &to_bytes(&stop_input(&project, Some(text))),
        );
        block_reason(&run);
        let state = project.state().unwrap();
        let last = state["history"].as_array().unwrap().last().unwrap().clone();
        assert_eq!(
            last["excerpt"].as_str().unwrap(),
            text.split_whitespace().collect::<Vec<_>>().join(" "),
            "kept as text"
        );
    }
    // The same from the transcript, and from PROMPT.md (which is echoed back).
    let transcript = project.path("transcript.jsonl");
    fs::write(
        &transcript,
        assistant_line("m1", &format!("$(touch {})", marker(7).display())),
    )
    .unwrap();
    project.write_prompt(&format!(
        "Do it `touch {}` $(touch {})\n",
        marker(8).display(),
        marker(9).display()
    ));
    let run = run_hook(
        hook_command(&project),
        &transcript_input(&project, &transcript),
    );
    assert!(block_reason(&run).contains(&format!("$(touch {})", marker(9).display())));
    for n in 1..=9 {
        assert!(!marker(n).exists(), "{} was created", marker(n).display());
    }
}

// ------------------------------------------------ programs ralph never runs

#[test]
fn git_never_runs_a_program_the_users_or_the_repositorys_configuration_names() {
    let project = TempProject::initialised("git-programs");
    project.write_prompt("Do the task.\n");
    fs::write(project.path("notes.txt"), "notes\n").unwrap();
    project.git(&["add", "notes.txt"]);
    project.git(&["commit", "-q", "-m", "notes"]);
    let marker = project.tmp.join("git-ran");
    let trap = format!("touch '{}'", marker.display());
    // The user's own configuration (HOME is the project's) defines a clean
    // filter that the repository's attributes name; the repository names an
    // fsmonitor.
    fs::write(
        project.home.join(".gitconfig"),
        format!("[filter \"mine\"]\n\tclean = {trap}\n\trequired = true\n"),
    )
    .unwrap();
    fs::write(project.path(".gitattributes"), "*.txt filter=mine\n").unwrap();
    let script = project.tmp.join("fsmonitor.sh");
    fs::write(&script, format!("#!/bin/sh\n{trap}\n")).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    project.git(&["config", "core.fsmonitor", &script.display().to_string()]);
    // Same content, new stamp: git compares the content, through the filter.
    let rewrite = || {
        thread::sleep(Duration::from_millis(20));
        fs::write(project.path("notes.txt"), "notes\n").unwrap();
    };
    rewrite();
    project
        .ctl(&["start", "--session-id", SID], &[])
        .assert_code(0);
    assert!(!marker.exists(), "ralph-ctl start ran it");

    rewrite();
    fs::write(project.path("README.md"), "# test project, edited\n").unwrap();
    fs::write(project.path("new.txt"), "new\n").unwrap();
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some("Working on it."))),
    );
    block_reason(&run);
    assert!(!marker.exists(), "the hook ran it");
    assert!(run.elapsed < Duration::from_secs(5), "{:?}", run.elapsed);
    // The progress check still saw what changed, with git.
    let state = project.state().unwrap();
    assert_eq!(
        state["history"].as_array().unwrap().last().unwrap()["progress"],
        "git"
    );
    let files = &state["breaker"]["progress"]["files"];
    for file in ["README.md", "new.txt"] {
        assert!(files.get(file).is_some(), "{file} not seen: {files}");
    }
    assert!(files.get("notes.txt").is_none(), "same content: {files}");

    // As a person runs it, git runs both.
    project.git(&["status"]);
    assert!(marker.exists(), "plain git status runs the user's filter");
}

/// Where a verification command's processes live, as seen from the test:
/// its own pid namespace when the walls gave it one, else its process group.
#[derive(Debug, Clone)]
enum Scope {
    Namespace(PathBuf),
    Group(u32),
}

/// The pids of live processes (not zombies) in `scope`.
fn scope_members(scope: &Scope) -> Vec<u32> {
    match scope {
        Scope::Namespace(ns) => processes_in_pid_namespace(ns),
        Scope::Group(pgid) => processes_in_group(*pgid),
    }
}

/// The scope of the shell whose command line holds `token`. Walls may put
/// it in a pid namespace of its own, where the pid it knows itself by means
/// nothing outside; the `bwrap` that started it holds the token too, so a
/// process in another namespace wins.
fn scope_of_command_holding(token: &str) -> Option<Scope> {
    let ours = fs::read_link("/proc/self/ns/pid").unwrap();
    let holding = processes_matching(token);
    let namespace = holding.iter().find_map(|(pid, _)| {
        fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .filter(|ns| *ns != ours)
    });
    match namespace {
        Some(ns) => Some(Scope::Namespace(ns)),
        None => holding
            .iter()
            .find_map(|(pid, _)| process_group_of(*pid))
            .map(Scope::Group),
    }
}

/// Kills a verification command's processes when a test ends, whatever
/// happened.
struct KillScope(Scope);

impl Drop for KillScope {
    fn drop(&mut self) {
        match self.0 {
            Scope::Group(pgid) if pgid > 1 => {
                ralph_tests::project::signal_group(pgid, libc::SIGKILL);
            }
            Scope::Group(_) => {}
            Scope::Namespace(_) => {
                for pid in scope_members(&self.0) {
                    signal_process(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// Claude Code kills a hook that outlives its timeout: the verification
/// command it was running, and everything that command started, must die
/// with it, and write nothing afterwards.
fn verification_dies_with_the_hook(signal: i32, name: &str) {
    let project = looping(name, 5);
    // In the project: the check's own temp folder is out of the test's sight.
    let leader = project.path("verify.pid");
    let marker = project.path("written-after-the-hook-died");
    // A grandchild that writes into the project a second later, and a long
    // run; only once armed (the test baseline `reload` takes of a new
    // command passes at once).
    let armed = project.path("armed");
    let command = format!(
        "[ -f '{a}' ] || exit 0; (sleep 1; echo late >> '{m}') & echo $$ > '{l}.tmp' && mv '{l}.tmp' '{l}'; sleep 30",
        a = armed.display(),
        m = marker.display(),
        l = leader.display()
    );
    fs::write(
        project.path(".claude/ralph/config.json"),
        serde_json::to_vec(&json!({"verify": [
            {"name": "tests", "command": command, "timeoutSeconds": 60}
        ]}))
        .unwrap(),
    )
    .unwrap();
    // The person's change, adopted by the running loop.
    project.ctl(&["reload"], &[]).assert_code(0);
    fs::write(&armed, "").unwrap();
    let mut hook = hook_command(&project);
    hook.stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = hook.spawn().unwrap();
    let input = to_bytes(&stop_input(&project, Some(&format!("All done.\n{SIGNAL}"))));
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !leader.exists() {
        assert!(Instant::now() < deadline, "the verification never started");
        thread::sleep(Duration::from_millis(10));
    }
    let started = Instant::now();
    let scope = scope_of_command_holding(&leader.display().to_string())
        .expect("the verification's shell is found by its command line");
    let _cleanup = KillScope(scope.clone());
    assert!(!scope_members(&scope).is_empty());
    signal_process(child.id(), signal);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(signal), "the hook died of the signal");
    let deadline = Instant::now() + Duration::from_secs(3);
    while !scope_members(&scope).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the verification outlived the hook: {scope:?} {:?}",
            scope_members(&scope)
        );
        thread::sleep(Duration::from_millis(20));
    }
    // Past the moment the grandchild would have written.
    thread::sleep(Duration::from_secs(2).saturating_sub(started.elapsed()));
    assert!(!marker.exists(), "written after the hook died");
}

#[test]
fn verification_dies_with_a_hook_killed_by_sigkill() {
    verification_dies_with_the_hook(libc::SIGKILL, "verify-sigkill");
}

#[test]
fn verification_dies_with_a_hook_killed_by_sigterm() {
    verification_dies_with_the_hook(libc::SIGTERM, "verify-sigterm");
}

#[test]
fn a_signal_in_an_indented_code_block_does_not_end_the_loop() {
    let project = looping("indented-signal", 5);
    for message in [
        format!("The prompt ends with:\n\n    {SIGNAL}\n\nStill on step 2."),
        format!("Echoed:\n\n\t{SIGNAL}"),
    ] {
        let run = run_hook(
            hook_command(&project),
            &to_bytes(&stop_input(&project, Some(&message))),
        );
        assert!(
            block_reason(&run).starts_with("[Ralph loop: iteration"),
            "{message:?}"
        );
        assert_eq!(project.state().unwrap()["status"], "running");
    }
    // The same signal on its own line, unindented, claims.
    let message = format!("The prompt ends with:\n\n    {SIGNAL}\n\nAll done.\n{SIGNAL}");
    let run = run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some(&message))),
    );
    assert!(ended(&run).starts_with("Ralph loop complete"), "{run:?}");
    assert_eq!(project.state().unwrap()["status"], "complete");
}
