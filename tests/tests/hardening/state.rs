//! The loop's state file: empty, corrupt, not a regular file, extreme
//! counters, its folder a file, anything at the lock's path, a FIFO or a
//! link to a device for `status`.

use super::{
    block_reason, ended, hook_command, mkfifo, one_line, rejected, replace_with_special, run_hook,
    to_bytes, working,
};
use ralph_tests::cli::{looping, stop_input};
use serde_json::json;
use std::fs::{self, File};
use std::time::Duration;

// ------------------------------------------------------------------- state

#[test]
fn state_empty() {
    let project = looping("state-empty", 5);
    fs::write(project.state_path(), "").unwrap();
    rejected(
        &project,
        &working(&project),
        &[
            "is corrupt (the file is empty); see it with `ralph-ctl status`, clear it with `ralph-ctl reset`",
        ],
    );
}

#[test]
fn state_corrupt() {
    let project = looping("state-corrupt", 5);
    let input = working(&project);
    let good = project.state_bytes();
    let half = &good[..good.len() / 2];
    let bogus = String::from_utf8(good.clone())
        .unwrap()
        .replace("\"running\"", "\"bogus\"");
    for content in [half, b"[]", b"\xff\xfe", bogus.as_bytes(), b"\x00\x00"] {
        fs::write(project.state_path(), content).unwrap();
        rejected(&project, &input, &["is corrupt (", "ralph-ctl reset"]);
    }
    // Over 4 MiB (sparse): refused without being read.
    let file = File::create(project.state_path()).unwrap();
    file.set_len(5 << 20).unwrap();
    rejected(
        &project,
        &input,
        &["is corrupt (5242880 bytes, more than the 4194304 a state can hold)"],
    );
}

#[test]
fn state_not_a_regular_file() {
    let project = looping("state-dir", 5);
    let input = working(&project);
    let state = project.state_path();
    fs::remove_file(&state).unwrap();
    fs::create_dir(&state).unwrap();
    let line = one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is not a regular file)", "ralph-ctl reset"],
    );
    assert!(line.contains(&state.display().to_string()));
    assert!(state.is_dir() && fs::read_dir(&state).unwrap().next().is_none());
    fs::remove_dir(&state).unwrap();
    mkfifo(&state);
    one_line(
        &run_hook(hook_command(&project), &input),
        &["is corrupt (it is not a regular file)"],
    );
}

#[test]
fn state_with_extreme_counters_never_panics() {
    // Values a hand-edited state may hold: the largest the fields accept.
    let project = looping("state-extreme", 5);
    let mut state = project.state().unwrap();
    state["lastFindingsCount"] = json!(4);
    state["breaker"]["state"] = json!("half_open");
    state["breaker"]["halfOpenIterations"] = json!(u32::MAX);
    state["breaker"]["counters"]["findingsStuck"] = json!(u32::MAX);
    state["testOnlyIterations"] = json!(u32::MAX);
    project.write_state(&state);
    let stuck = to_bytes(&stop_input(
        &project,
        Some("RALPH_ITERATION_COMPLETE: 4 findings remain"),
    ));
    let message = ended(&run_hook(hook_command(&project), &stuck));
    assert!(message.contains("circuit breaker"), "{message}");
    let after = project.state().unwrap();
    assert_eq!(after["status"], "circuit_open", "{after:#}");
    assert_eq!(
        after["breaker"]["counters"]["findingsStuck"],
        json!(u32::MAX)
    );

    let project = looping("state-extreme-cap", 5);
    let mut state = project.state().unwrap();
    state["iteration"] = json!(u32::MAX);
    state["maxIterations"] = json!(u32::MAX);
    state["lastFindingsCount"] = json!(u64::MAX);
    project.write_state(&state);
    let big = format!("RALPH_ITERATION_COMPLETE: {} findings remain", u64::MAX);
    let message = ended(&run_hook(
        hook_command(&project),
        &to_bytes(&stop_input(&project, Some(&big))),
    ));
    assert!(message.contains("iteration cap"), "{message}");
    assert_eq!(project.state().unwrap()["status"], "max_iterations");
}

#[test]
fn state_folder_is_a_file() {
    let project = looping("runtime-file", 5);
    let runtime = project.runtime_dir();
    fs::remove_dir_all(&runtime).unwrap();
    fs::write(&runtime, "not a folder").unwrap();
    let run = run_hook(hook_command(&project), &working(&project));
    one_line(&run, &["runtime is not a folder; move it aside"]);
    assert_eq!(fs::read_to_string(&runtime).unwrap(), "not a folder");
}

#[test]
fn anything_at_a_lock_file_path_changes_nothing() {
    // The lock is the state folder's own: a directory or a link where an
    // older version kept its lock file is neither used nor followed.
    let project = looping("old-lock-path", 5);
    let lock = project.path(".claude/context/runtime/ralph-state.json.lock");
    let _ = fs::remove_file(&lock);
    fs::create_dir(&lock).unwrap();
    let input = working(&project);
    block_reason(&run_hook(hook_command(&project), &input));
    fs::remove_dir(&lock).unwrap();
    let missing = project.path("created-through-the-link");
    std::os::unix::fs::symlink(&missing, &lock).unwrap();
    block_reason(&run_hook(hook_command(&project), &input));
    assert!(!missing.exists(), "no file created through the link");
    assert_eq!(project.state().unwrap()["iteration"], 3);
}

#[test]
fn status_of_a_state_that_is_a_fifo_or_a_link_to_a_device_returns_at_once() {
    let project = looping("status-fifo", 5);
    let state = project.state_path();
    for kind in ["a FIFO", "a link to /dev/zero"] {
        replace_with_special(&state, kind);
        let run = project.ctl(&["status"], &[]);
        assert_eq!(run.code, Some(1), "{kind}: {run:?}");
        assert!(run.stdout.contains("is corrupt"), "{kind}: {run:?}");
        assert!(!run.stdout.contains("it begins"), "{kind}: {run:?}");
        println!("status, state {kind}: {:?}", run.elapsed);
        assert!(run.elapsed < Duration::from_secs(5), "{run:?}");
    }
}
