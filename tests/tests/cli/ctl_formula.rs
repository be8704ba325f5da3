//! Dry runs and formulas: what a run would set up, the starter formula,
//! its steps and gates, and formula files that cannot be read.

use super::ctl_common::{fake_client, launcher, recorded_stdin, snapshot};
use ralph_tests::project::TempProject;

#[test]
fn a_task_dry_run_says_what_the_run_would_set_up_and_writes_nothing() {
    let project = TempProject::new("task-dry-run");
    project.write("calc.py", "def add(a, b):\n    return a - b\n");
    project.write(
        "tests/test_calc.py",
        "import unittest\n\nimport calc\n\n\nclass T(unittest.TestCase):\n    \
         def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n",
    );
    let task = "Fix add() in calc.py.";
    let dry_run = |project: &TempProject| {
        project.ctl(
            &["run", "--task", task, "--dry-run"],
            &[("RALPH_CLAUDE", "true")],
        )
    };
    // Not installed yet: the install and its check are said, not done.
    let before = snapshot(&project.root);
    let dry = dry_run(&project);
    dry.assert_code(0).assert_stdout_has(&[
        "ralph is not installed here: a real run first installs it, as `ralph-ctl init` does",
        "Completion check: `python3 -m unittest discover -s tests` (from the unittest files in \
         tests/), asked in a terminal, taken without one",
        "The task would go into .claude/ralph/PROMPT.md; this dry run writes nothing.",
        "ralph dry run: nothing was started",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
    assert!(!dry.stdout.contains("still the template"), "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    // Installed, with a task of its own: that task stays where it is.
    project.init();
    let before = snapshot(&project.root);
    let dry = dry_run(&project);
    dry.assert_code(0).assert_stdout_has(&[
        "(the earlier task there kept in .claude/context/runtime/PROMPT.previous.md)",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
    assert!(!dry.stdout.contains("not installed"), "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    assert!(project.state().is_none(), "a dry run starts nothing");
    // The command line's settings reach the client (and its Stop hook) as
    // variables, as a real run gives them; the preview's task file does not.
    let dry = project.ctl(
        &[
            "run",
            "--task",
            task,
            "--max-iterations",
            "3",
            "--no-sandbox",
            "--dry-run",
        ],
        &[("RALPH_CLAUDE", "true")],
    );
    let env = dry
        .stdout
        .lines()
        .find(|l| l.starts_with("environment for the client:"))
        .unwrap_or_else(|| panic!("{dry:?}"));
    assert!(
        env.contains("RALPH_MAX_ITERATIONS=3") && env.contains("RALPH_SANDBOX=off"),
        "{env}"
    );
    assert!(!env.contains("RALPH_PROMPT_FILE"), "{env}");
    dry.assert_stdout_has(&[
        "[Ralph loop: iteration 1 of 3]",
        "# Task\n\nFix add() in calc.py.\n",
    ]);
}

#[test]
fn a_queue_dry_run_lists_the_items_and_shows_the_first_one_s_text_once() {
    let project = TempProject::new("queue-dry-run");
    project.write(
        "PLAN.md",
        "# Plan\n\n- [ ] add a greeting\n  say hello in hello.txt\n- [ ] add a farewell\n- [x] done already\n",
    );
    project.commit_all("the plan");
    project.init();
    let before = snapshot(&project.root);
    let dry = project.ctl(
        &[
            "run",
            "--queue",
            "plan:PLAN.md",
            "--workers",
            "2",
            "--dry-run",
        ],
        &[("RALPH_CLAUDE", "true")],
    );
    dry.assert_code(0).assert_stdout_has(&[
        "ralph dry run: nothing was started and no state was changed (a queue run: 2 worker(s) \
         drain plan:PLAN.md (2 item(s) to work now: \"add a greeting\", \"add a farewell\"",
        "at most 5 iteration(s), in a new git worktree under .claude/worktrees",
        "[Ralph loop: iteration 1 of 5]",
        "## Your item: add a greeting\n\nsay hello in hello.txt\n",
    ]);
    assert!(!dry.stdout.contains("still the template"), "{dry:?}");
    assert_eq!(dry.stdout.matches("## Your item:").count(), 1, "{dry:?}");
    assert_eq!(snapshot(&project.root), before, "nothing written");
    assert!(project.state().is_none(), "a dry run starts nothing");
    // Interactive, the text goes as an argument: it is shown once all the same.
    project.write_prompt("Tidy the README.");
    let dry = project.ctl(&["run", "--dry-run"], &[("RALPH_CLAUDE", "true")]);
    dry.assert_code(0);
    assert_eq!(dry.stdout.matches("Tidy the README.").count(), 1, "{dry:?}");
}

#[test]
fn init_writes_a_starter_formula_that_a_dry_run_shows() {
    let project = TempProject::initialised("init-formula");
    project.ctl_exits(&["init", "--formula", "feature"], 0);
    let file = project.path(".claude/ralph/formulas/feature.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("name: feature") && text.contains("model: opus"),
        "{text}"
    );
    // An existing formula is the person's: kept as it is.
    std::fs::write(&file, text.replace("Plan the task", "Plan it")).unwrap();
    project.ctl_exits(&["init", "--formula", "feature"], 0);
    assert!(std::fs::read_to_string(&file).unwrap().contains("Plan it"));
    let dry = project.ctl(
        &["run", "--formula", "feature", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    dry.assert_code(0);
    dry.assert_stdout_has(&[
        "formula feature, step 1/3 plan",
        "'--model' 'opus'",
        "Plan it",
    ]);
    assert!(project.state().is_none(), "a dry run starts nothing");
}

#[test]
fn a_fifo_formula_or_a_prompt_file_outside_the_project_is_refused_at_once() {
    let project = TempProject::initialised("formula-fifo");
    let folder = project.dir(".claude/ralph/formulas");
    let fifo = folder.join("stuck.yaml");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let started = std::time::Instant::now();
    let run = project.ctl(
        &["run", "--formula", "stuck", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("not a regular file"), "{run:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    std::fs::write(
        folder.join("leak.yaml"),
        "steps:\n  - id: a\n    promptFile: /etc/passwd\n",
    )
    .unwrap();
    let run = project.ctl(
        &["run", "--formula", "leak", "--dry-run"],
        &[("RALPH_CLAUDE", "true")],
    );
    assert_ne!(run.code, Some(0), "{run:?}");
    assert!(run.stderr.contains("outside the project"), "{run:?}");
    assert!(!run.stdout.contains("root:"), "{run:?}");
}

#[test]
fn a_formula_run_resumes_with_the_file_it_started_from() {
    // `name:` differs from the file's name, and another formula is named
    // like it: the resume takes neither, but what the loop was pinned to.
    let project = TempProject::initialised("formula-resume");
    project.write(
        ".claude/ralph/formulas/feat.yaml",
        "name: other\nsteps:\n  - id: a\n    prompt: The feature step.\n",
    );
    project.write(
        ".claude/ralph/formulas/other.yaml",
        "name: other\nsteps:\n  - id: b\n    prompt: The other formula's step.\n",
    );
    let client = fake_client(&project, 0);
    let env = [("RALPH_CLAUDE", client.as_str()), ("RALPH_SANDBOX", "off")];
    let first = launcher(&project, &["--formula", "feat"], &env);
    first.assert_code(12);
    let state = project.status_json();
    assert_eq!(
        state["pinned"]["formula"]["file"], ".claude/ralph/formulas/feat.yaml",
        "{state:#}"
    );
    let refused = launcher(&project, &["--resume", "--formula", "other"], &env);
    refused.assert_code(2);
    refused.assert_stderr_has(&["this loop runs the formula in .claude/ralph/formulas/feat.yaml"]);
    assert_eq!(
        project.status_json()["status"],
        "interrupted",
        "not taken up"
    );
    let resumed = launcher(&project, &["--resume"], &env);
    resumed.assert_code(12);
    let stdin = recorded_stdin(&client);
    assert!(
        stdin.contains("The feature step.") && !stdin.contains("other formula"),
        "{stdin}"
    );
}

#[test]
fn a_formula_gate_named_like_a_verify_command_is_a_formula_error() {
    let project = TempProject::initialised("formula-clash");
    project.write(
        ".claude/ralph/config.json",
        r#"{"verify": [{"name": "tests", "command": "true"}]}"#,
    );
    let folder = project.dir(".claude/ralph/formulas");
    std::fs::write(
        folder.join("feat.yaml"),
        "name: feat\nsteps:\n  - id: a\n    prompt: Do it.\n    gates:\n      - { name: tests, command: \"true\" }\n",
    )
    .unwrap();
    let client = fake_client(&project, 0);
    let run = launcher(
        &project,
        &["--formula", "feat", "--dry-run"],
        &[("RALPH_CLAUDE", client.as_str())],
    );
    run.assert_code(1);
    run.assert_stderr_has(&[
        "formula ",
        "feat.yaml",
        "gate \"tests\" of step \"a\" has the name of a verify command",
    ]);
}

#[test]
fn from_a_step_needs_a_formula_and_a_step_it_has() {
    let project = TempProject::initialised("from-step");
    let env = [("RALPH_CLAUDE", "true")];
    let alone = project.ctl(&["run", "--from", "implement"], &env);
    alone
        .assert_code(2)
        .assert_stderr_has(&["--from implement names a formula step", "--formula NAME"]);
    project.ctl_exits(&["init", "--formula", "ship"], 0);
    let unknown = project.ctl(&["run", "--formula", "ship", "--from", "deploy"], &env);
    unknown
        .assert_code(2)
        .assert_stderr_has(&["formula ship has no such step; its steps are"]);
    assert!(project.state().is_none(), "nothing started");
}
