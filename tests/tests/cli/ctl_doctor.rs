//! `doctor`, `--version`, completions, the help and the README: what
//! they name (every exit code, every link) is there.

use super::ctl_common::make_executable;
use ralph_tests::bins;
use ralph_tests::project::TempProject;
use std::path::Path;

#[test]
fn doctor_passes_after_init_and_names_a_hook_that_points_nowhere() {
    let project = TempProject::initialised("doctor");
    // A client that says a tested version.
    let client = project.path("fake-claude");
    std::fs::write(&client, "#!/bin/sh\necho '2.1.330 (Claude Code)'\n").unwrap();
    std::fs::set_permissions(&client, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let env = [
        ("RALPH_CLAUDE", client.to_str().unwrap()),
        ("ANTHROPIC_API_KEY", "sk-test-key-for-the-doctor-check"),
    ];
    // A home where Claude Code never ran, with a key: ready for headless
    // runs, the first run still to do for interactive ones.
    let fresh = project.ctl(&["doctor"], &env);
    fresh.assert_code(0);
    fresh.assert_stdout_has(&[
        // init without --yes writes no config.json.
        "config.json does not exist: the defaults apply",
        "ok    login: logs in with the ANTHROPIC_API_KEY variable",
        "warn  first run: Claude Code has never run in this home",
        "interactive runs will show the first-run screens (headless runs do not)",
        "fix: run `claude` once in a terminal",
        "ready for headless runs",
    ]);
    let interactive = project.ctl(&["doctor", "--interactive"], &env);
    interactive.assert_code(1);
    interactive.assert_stdout_has(&[
        "FAIL  first run: Claude Code has never run in this home",
        "FAIL  folder trust: this folder is not trusted yet",
        "not ready for interactive runs: 2 problem(s)",
    ]);
    // What the client's first run leaves: onboarding done, the key
    // approved, the folder trusted.
    ralph_tests::interactive::write_first_run_config(
        &project.home,
        &project.root,
        "sk-test-key-for-the-doctor-check",
    );
    let doctor = project.ctl(&["doctor"], &env);
    doctor.assert_code(0);
    doctor.assert_stdout_has(&[
        "ok    first run: done",
        "ok    login: logs in with the ANTHROPIC_API_KEY variable",
        "ok    folder trust",
    ]);
    doctor.assert_stdout_has(&["ok    hook:", "ready for headless runs"]);
    project
        .ctl(&["doctor", "--interactive"], &env)
        .assert_code(0)
        .assert_stdout_has(&["ready for interactive runs"]);
    // The registered hook moved away: named, and the exit code says so.
    let settings = project.path(".claude/settings.json");
    let text = std::fs::read_to_string(&settings).unwrap();
    let hook = bins::hook().display().to_string();
    std::fs::write(&settings, text.replace(&hook, "/nowhere/ralph-stop-hook")).unwrap();
    let report = project
        .ctl(&["doctor", "--json"], &env)
        .assert_code(1)
        .json();
    assert_eq!(report["ok"], false);
    let hook_check = &report["checks"][0];
    assert_eq!(hook_check["verdict"], "fail", "{report:#}");
    let detail = hook_check["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("/nowhere/ralph-stop-hook"), "{report:#}");
}

#[test]
fn doctor_tells_a_2_0_client_s_user_that_the_plugin_loop_needs_2_1() {
    // Claude Code 2.0's terminal UI answers a bare /ralph-loop "Unknown slash
    // command" and runs no hook of ralph's: doctor is where ralph can say so.
    let project = TempProject::initialised("doctor-2-0");
    let client = project.path("fake-claude");
    for (version, said) in [("2.0.77", true), ("2.1.330", false)] {
        std::fs::write(
            &client,
            format!("#!/bin/sh\necho '{version} (Claude Code)'\n"),
        )
        .unwrap();
        make_executable(&client);
        let doctor = project.ctl(&["doctor"], &[("RALPH_CLAUDE", client.to_str().unwrap())]);
        let line = doctor
            .stdout
            .lines()
            .find(|l| l.starts_with("ok    client:"))
            .unwrap_or_else(|| panic!("{}", doctor.stdout))
            .to_string();
        assert_eq!(
            line.contains(
                "its sessions cannot run the plugin's /ralph-loop (it needs Claude Code 2.1 or later; \
                 2.0's terminal UI answers a bare /ralph-loop \"Unknown slash command\", and \
                 /ralph:ralph-loop says why it cannot start): loop with ralph-ctl run"
            ),
            said,
            "{version}: {line}"
        );
    }
}

#[test]
fn doctor_before_any_setup_names_the_one_command_and_the_tests_it_found() {
    // A project ralph is not installed in yet, with a test script: each
    // fix names the quick start's command, and the check it would take.
    let project = TempProject::new("doctor-bare");
    project.write(
        "package.json",
        r#"{"name": "sum", "scripts": {"test": "node --test"}}"#,
    );
    let doctor = project.ctl(&["doctor"], &[("RALPH_CLAUDE", "true")]);
    doctor.assert_stdout_has(&[
        "hook: ",
        "fix: `ralph-ctl run --task \"TEXT\"` installs ralph as it starts a loop on TEXT; \
         `ralph-ctl init` installs it without starting",
        "warn  verify: no verify command",
        "fix: `ralph-ctl init --yes` makes `npm test` (found from the test script of \
         package.json) the check",
    ]);
    assert!(!project.path(".claude").exists(), "doctor writes nothing");
    project.init_untouched();
    project
        .ctl(&["doctor"], &[("RALPH_CLAUDE", "true")])
        .assert_stdout_has(&[
            "ok    PROMPT.md:",
            "is still the template: a queue run (`--queue`) and /ralph-loop bring their own tasks \
             and take it as it is; a plain loop refuses to start on it",
            "or start with `ralph-ctl run --task \"TEXT\"`, which writes TEXT there",
        ]);
}

#[test]
fn version_and_completions_answer() {
    let project = TempProject::new("completions");
    let version = project.ctl_exits(&["--version"], 0);
    assert!(
        version.stdout.starts_with("ralph-ctl 0.1.0"),
        "{}",
        version.stdout
    );
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let script = project.ctl_exits(&["completions", shell], 0);
        assert!(
            script.stdout.contains("ralph-ctl") && script.stdout.contains("loop-start"),
            "{shell}: {}",
            &script.stdout[..script.stdout.len().min(300)]
        );
    }
    // The bash script loads in bash and completes a subcommand.
    let check = std::process::Command::new("bash")
        .arg("-c")
        .arg("source /dev/stdin; COMP_WORDS=(ralph-ctl doc); COMP_CWORD=1; _ralph__ctl ralph-ctl doc ralph-ctl; printf '%s\\n' \"${COMPREPLY[@]}\"")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write as _;
            let script = project.ctl(&["completions", "bash"], &[]).stdout;
            child.stdin.take().unwrap().write_all(script.as_bytes())?;
            child.wait_with_output()
        })
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&check.stdout).trim(), "doctor");
}

#[test]
fn the_readme_s_exit_code_table_names_every_exit_code() {
    // Every code of exit_codes.rs has a row of its own (or shares one) in
    // the README's table, and the table names no code that does not exist.
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let table = readme
        .split("## Exit codes")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("an Exit codes section");
    let in_table: std::collections::BTreeSet<i32> = table
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| code"))
        .filter_map(|l| l.split('|').nth(1))
        .flat_map(|cell| {
            cell.split(',')
                .filter_map(|n| n.trim().parse::<i32>().ok())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(
        in_table,
        defined_exit_codes(),
        "README table vs exit_codes.rs"
    );
}

/// Every exit code of `exit_codes.rs`'s table, the signals' (128 + the
/// number) `run` gives included.
fn defined_exit_codes() -> std::collections::BTreeSet<i32> {
    ralph_core::exit_codes::MEANINGS
        .iter()
        .map(|(code, _)| *code)
        .collect()
}

#[test]
fn the_help_names_every_exit_code() {
    // `ralph-ctl --help` and `run --help` each say what every code means.
    let project = TempProject::new("help-exit-codes");
    for args in [&["--help"][..], &["run", "--help"]] {
        let help = project.ctl(args, &[]);
        help.assert_code(0);
        let codes = help
            .stdout
            .split("Exit codes:")
            .nth(1)
            .and_then(|rest| rest.split("Usage:").next())
            .unwrap_or_else(|| panic!("no exit codes in {args:?}: {}", help.stdout));
        let named: std::collections::BTreeSet<i32> = codes
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        let missing: Vec<i32> = defined_exit_codes().difference(&named).copied().collect();
        assert!(
            missing.is_empty(),
            "{args:?} does not name {missing:?}:\n{codes}"
        );
    }
}

#[test]
fn the_readme_s_links_reach_their_files_and_headings() {
    // The contents list and the docs/ links: each file exists, and each
    // `#anchor` is a heading of its file (GitHub's rule: lower case, only
    // letters, digits, '-', '_' and spaces kept, spaces made '-').
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let anchor = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let anchors_of = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with('#'))
            .map(|l| anchor(l.trim_start_matches('#')))
            .collect()
    };
    let mut files = vec!["README.md".to_string(), "ARCHITECTURE.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| format!("docs/{}", e.unwrap().file_name().to_string_lossy()))
        .filter(|f| f.ends_with(".md"))
        .collect();
    docs.sort();
    files.extend(docs);
    for file in &files {
        let file = file.as_str();
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let here = Path::new(file).parent().unwrap().to_path_buf();
        let mut rest = text.as_str();
        let mut seen = 0;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http") {
                continue;
            }
            seen += 1;
            let (path, hash) = target.split_once('#').unwrap_or((target, ""));
            let linked = if path.is_empty() {
                root.join(file)
            } else {
                root.join(&here).join(path)
            };
            // A picture is only there; a page is read for its headings.
            let linked_bytes =
                std::fs::read(&linked).unwrap_or_else(|e| panic!("{file} links to {target}: {e}"));
            if !hash.is_empty() {
                let linked_text = String::from_utf8_lossy(&linked_bytes);
                assert!(
                    anchors_of(&linked_text).iter().any(|a| a == hash),
                    "{file} links to {target}: no such heading"
                );
            }
        }
        assert!(seen > 0 || file != "README.md", "{file} has no links");
    }
}
