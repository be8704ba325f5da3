//! The launcher with a fake client: its arguments, environment and stdin,
//! a prompt near its size limit, an install path with a quote and a space,
//! its caps and its exit codes.

use super::ctl_common::{fake_client, launcher, make_executable, recorded_stdin, settings};
use ralph_tests::bins;
use ralph_tests::cli::Launcher;
use ralph_tests::project::{TempProject, run_with_timeout};
use std::path::Path;

/// The arguments the fake client recorded.
fn recorded_args(client: &str) -> Vec<String> {
    std::fs::read_to_string(format!("{client}.args"))
        .unwrap()
        .split("\n--ARG--\n")
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn launcher_starts_the_client_with_the_prompt_and_session() {
    let project = TempProject::initialised("launch");
    project.write_prompt("Unique task text 4711.\n");
    let client = fake_client(&project, 0);
    let run = launcher(
        &project,
        &["--headless", "--no-sandbox", "--", "--model", "sonnet"],
        &[("RALPH_CLAUDE", &client), ("RALPH_MAX_ITERATIONS", "30")],
    );
    // The fake client never stops through the hook, so the loop was cut short.
    run.assert_code(12);
    run.assert_stderr_has(&["interrupted"]);
    let state = project.status_json();
    // Headless: the prompt goes on stdin, never on the command line.
    let args = recorded_args(&client);
    assert_eq!(
        [&args[..6], &args[8..]].concat(),
        [
            "-p",
            // Readable progress is made from the client's events.
            "--output-format",
            "stream-json",
            "--verbose",
            "--session-id",
            state["sessionId"].as_str().unwrap(),
            // Nobody answers prompts in headless mode: edits are accepted.
            "--permission-mode",
            "acceptEdits",
            "--model",
            "sonnet"
        ]
    );
    // No sandbox: the settings keep the agent off ralph's files, and it
    // may run the checks, never git (`git commit -F` reads any file).
    assert_eq!(args[6], "--settings");
    let settings: serde_json::Value = serde_json::from_str(&args[7]).unwrap();
    assert_eq!(settings.get("sandbox"), None, "{settings}");
    let deny = settings["permissions"]["deny"].to_string();
    assert!(
        deny.contains("/.claude/ralph)") && deny.contains("Bash(ralph-ctl say:*)"),
        "{deny}"
    );
    let allow = settings["permissions"]["allow"].to_string();
    assert!(
        allow.contains("ralph-ctl check:*)") && !allow.contains("Bash(git"),
        "{settings}"
    );
    run.assert_stderr_has(&["sandbox: off;"]);
    let stdin = recorded_stdin(&client);
    assert!(
        stdin.contains("Unique task text 4711.") && stdin.contains("iteration 1 of 30"),
        "{stdin}"
    );
    let env = std::fs::read_to_string(format!("{client}.env")).unwrap();
    assert_eq!(
        env.trim(),
        "1 35",
        "RALPH_ACTIVE=1 and the block cap raised above the loop's max"
    );

    // Interactive: a prompt that fits is the first argument, as the person would type it.
    let run = launcher(
        &project,
        &["--", "--model", "sonnet"],
        &[("RALPH_CLAUDE", &client), ("RALPH_MAX_ITERATIONS", "30")],
    );
    run.assert_code(12);
    let args = recorded_args(&client);
    assert!(
        args[0].contains("Unique task text 4711.") && args[0].contains("iteration 1 of 30"),
        "{}",
        args[0]
    );
    assert_eq!(
        [&args[1..3], &args[5..]].concat(),
        [
            "--session-id",
            project.status_json()["sessionId"].as_str().unwrap(),
            "--model",
            "sonnet"
        ]
    );
    // Interactive: no sandbox (the person answers), the deny rules all the same.
    assert_eq!(args[3], "--settings");
    assert!(
        args[4].contains("/.claude/ralph)") && !args[4].contains("sandbox"),
        "{}",
        args[4]
    );
    assert_eq!(recorded_stdin(&client), "", "stdin stays the terminal's");
}

#[test]
fn the_block_cap_and_ralph_active_are_set_for_the_client_only() {
    let project = TempProject::initialised("launch-env");
    let client = fake_client(&project, 0);
    for (inherited, want) in [("8", "30"), ("0", "0"), ("100", "100"), ("many", "many")] {
        launcher(
            &project,
            &["--headless"],
            &[
                ("RALPH_CLAUDE", &client),
                ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", inherited),
            ],
        )
        .assert_code(12);
        let env = std::fs::read_to_string(format!("{client}.env")).unwrap();
        assert_eq!(env.trim(), format!("1 {want}"), "inherited {inherited}");
    }
}

#[test]
fn a_prompt_near_its_size_limit_reaches_the_client_intact() {
    let project = TempProject::initialised("launch-large");
    // 950 KiB of many distinct lines: far past the 128 KiB a single argument may hold.
    let mut prompt = String::from("BEGIN-OF-TASK\n");
    let mut n = 0;
    while prompt.len() < 950 * 1024 {
        prompt.push_str(&format!("line {n}: fix finding {n} in module {}\n", n % 97));
        n += 1;
    }
    prompt.push_str("END-OF-TASK\n");
    project.write_prompt(&prompt);
    let client = fake_client(&project, 0);
    for mode in [&["--headless"][..], &[][..]] {
        let run = launcher(&project, mode, &[("RALPH_CLAUDE", &client)]);
        run.assert_code(12);
        assert!(
            !run.stderr.contains("Argument list too long"),
            "{}",
            run.stderr
        );
        let stdin = recorded_stdin(&client);
        assert!(
            stdin.len() > prompt.len(),
            "{mode:?}: {} bytes",
            stdin.len()
        );
        assert!(
            stdin.contains(&prompt),
            "{mode:?}: the whole PROMPT.md arrives, byte for byte"
        );
        let args = recorded_args(&client);
        // ralph's `--settings` (its rules name the project's paths) may be
        // long; no argument holds the prompt.
        let settings = args.iter().position(|a| a == "--settings").map(|i| i + 1);
        assert!(
            args.iter()
                .enumerate()
                .all(|(i, a)| !a.contains("END-OF-TASK") && (Some(i) == settings || a.len() < 1024)),
            "{mode:?}: no argument carries the prompt"
        );
        assert!(args.contains(&"--session-id".to_string()), "{args:?}");
    }
}

#[test]
fn client_arguments_after_the_double_dash_pass_through_unchanged() {
    let project = TempProject::initialised("launch-args");
    let client = fake_client(&project, 0);
    let odd = [
        "a b",
        "it's",
        "",
        "--",
        "$HOME",
        "*",
        "--headless",
        "line\nbreak",
        "\"quoted\"",
    ];
    let mut args = vec!["--headless", "--"];
    args.extend(odd);
    // RALPH_CLAUDE may be a command with arguments of its own.
    let spec = format!("/bin/sh {client}");
    launcher(&project, &args, &[("RALPH_CLAUDE", &spec)]).assert_code(12);
    let recorded = std::fs::read_to_string(format!("{client}.args")).unwrap();
    let recorded: Vec<&str> = recorded.split("\n--ARG--\n").collect();
    // (the last element is what follows the final separator: nothing)
    // After -p, the output format, the session, ralph's settings and the
    // permission mode.
    assert_eq!(&recorded[10..recorded.len() - 1], odd);
    assert_eq!(recorded[0], "-p");
}

#[test]
fn launcher_installed_from_a_path_with_a_quote_and_a_space() {
    let project = TempProject::new("launch-quote");
    let dir = project.tmp.join("x").join("it's a dir");
    std::fs::create_dir_all(&dir).unwrap();
    for bin in [bins::ctl(), bins::hook()] {
        let to = dir.join(bin.file_name().unwrap());
        std::fs::copy(&bin, &to).unwrap();
        make_executable(&to);
    }
    let ctl = dir.join("ralph-ctl");
    let mut init = project.command(&ctl);
    init.arg("init");
    run_with_timeout(init, None, std::time::Duration::from_secs(30)).assert_code(0);
    project.write_prompt(ralph_tests::project::TEST_TASK);
    let text = project.read(".claude/ralph/ralph-audit.sh");
    assert!(text.contains("it'\\''s a dir/ralph-ctl'"), "{text}");
    let bat = project.read(".claude/ralph/ralph-audit.bat");
    assert!(
        bat.contains(&format!("set \"INSTALLED={}\"", ctl.display())),
        "{bat}"
    );

    // Only the path init wrote can lead to ralph-ctl: no RALPH_CTL, none on PATH.
    let client = fake_client(&project, 0);
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.env("PATH", "/usr/bin:/bin")
        .env("RALPH_CLAUDE", &client)
        .arg("--headless");
    let run = run_with_timeout(cmd, None, std::time::Duration::from_secs(60));
    run.assert_code(12);
    assert!(
        recorded_args(&client).contains(&"--session-id".to_string()),
        "the client ran"
    );

    // The registered hook command runs in a shell, as Claude Code runs it.
    let command = settings(&project)["hooks"]["Stop"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(command.contains("it's a dir"), "{command}");
    let mut hook = project.command("sh");
    hook.args(["-c", &command]).env("RALPH_ACTIVE", "1");
    let run = run_with_timeout(hook, Some(b"{}"), std::time::Duration::from_secs(30));
    run.assert_code(0);
    assert!(run.stderr.starts_with("ralph-stop-hook:"), "{}", run.stderr);
}

#[test]
fn launcher_exit_codes() {
    let project = TempProject::initialised("launch-codes");
    let client = fake_client(&project, 0);
    Launcher::new(&project).arg("--help").run().assert_code(0);
    Launcher::new(&project).arg("--bogus").run().assert_code(2);
    Launcher::new(&project)
        .arg("--headless")
        .env("RALPH_CLAUDE", "/nonexistent/claude")
        .run()
        .assert_code(127)
        .assert_stderr_has(&["RALPH_CLAUDE"]);
    Launcher::new(&project)
        .arg("--headless")
        .env("RALPH_CLAUDE", &client)
        .env("RALPH_MAX_ITERATIONS", "lots")
        .run()
        .assert_code(1)
        .assert_stderr_has(&["RALPH_MAX_ITERATIONS"]);
    assert!(
        !Path::new(&format!("{client}.args")).exists(),
        "the client never ran"
    );

    // Found, but it cannot start (its interpreter is missing): the loop it
    // started is not left running.
    let broken = project.path("broken-claude");
    std::fs::write(&broken, "#!/nonexistent/interpreter\n").unwrap();
    make_executable(&broken);
    let run = launcher(
        &project,
        &["--headless"],
        &[("RALPH_CLAUDE", broken.to_str().unwrap())],
    );
    run.assert_code(127);
    run.assert_stderr_has(&["cannot start the Claude Code client"]);
    let state = project.status_json();
    assert_eq!(state["status"], "interrupted");
    assert!(
        state["endedBecause"]
            .as_str()
            .unwrap()
            .contains("could not start"),
        "{state:#}"
    );

    project.ctl_exits(&["start"], 0);
    let busy = launcher(&project, &["--headless"], &[("RALPH_CLAUDE", &client)]);
    busy.assert_code(3);
    busy.assert_stderr_has(&["already running"]);
    // --reset clears the old loop first.
    Launcher::new(&project)
        .args(["--headless", "--reset"])
        .env("RALPH_CLAUDE", &client)
        .run()
        .assert_code(12);
}

#[test]
fn the_launcher_s_caps_refuse_what_they_cannot_be() {
    let project = TempProject::initialised("caps-refused");
    for (flag, value, says) in [
        ("--max-iterations", "0", "0 is not in 1..=100000"),
        ("--max-iterations", "many", "invalid digit"),
        ("--max-cost-usd", "-1", "a dollar amount above 0"),
        ("--max-cost-usd", "NaN", "a dollar amount above 0"),
    ] {
        let run = project.ctl(&["run", "--headless", flag, value], &[]);
        assert_eq!(run.code, Some(2), "{flag} {value}: {run:?}");
        assert!(
            run.stderr.contains(flag) && run.stderr.contains(says),
            "{flag} {value}: {}",
            run.stderr
        );
        assert!(project.state().is_none(), "nothing started");
    }
}
