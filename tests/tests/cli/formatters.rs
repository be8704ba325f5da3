//! `init` on a project whose check runs a formatter over the whole tree
//! (`prettier --check .`, `remark . --output` in `npm test`): the check that passed before
//! `init` still passes after it, run plainly and as `ralph-ctl check` runs
//! it, and with a loop's state written, because `init` puts ralph's files
//! in the formatter's ignore file.
//! With the real prettier and remark, installed by tests/install-prettier.sh
//! and tests/install-remark.sh.

use std::path::PathBuf;
use std::process::Command;

use ralph_tests::cli::Ctl;
use ralph_tests::project::{Run, TempProject};

/// The folder of the program `tests/install-<what>.sh` installs, or
/// `None`, said, where it cannot be installed here (no npm, no network).
fn installed_bin(what: &str) -> Option<PathBuf> {
    let script = ralph_tests::bins::workspace_root().join(format!("tests/install-{what}.sh"));
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", script.display()));
    if !out.status.success() {
        eprintln!(
            "skipped: {what} cannot be installed here ({} failed)",
            script.display()
        );
        return None;
    }
    let program = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    program.parent().map(PathBuf::from)
}

/// `PATH` with `bin` first.
fn path_with(bin: &std::path::Path) -> String {
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// `npm test` in `project`, with prettier on `path`.
fn npm_test(project: &TempProject, path: &str) -> Run {
    ralph_tests::project::run_with_timeout(
        {
            let mut cmd = project.command("npm");
            cmd.args(["test", "--silent"]).env("PATH", path);
            cmd
        },
        None,
        std::time::Duration::from_secs(120),
    )
}

#[test]
fn a_check_running_prettier_over_the_tree_passes_after_init_as_before() {
    let Some(bin) = installed_bin("prettier") else {
        return;
    };
    let path = path_with(&bin);
    let project = TempProject::new("prettier-check");
    // The project's own style (tabs), which ralph's JSON files (two
    // spaces) do not follow.
    project.write(".prettierrc", "{\n\t\"useTabs\": true\n}\n");
    project.write(
        "package.json",
        "{\n\t\"name\": \"toy\",\n\t\"private\": true,\n\t\"scripts\": {\n\t\t\"test\": \"prettier --check .\"\n\t}\n}\n",
    );
    project.write("index.js", "export const answer = 42;\n");
    project.commit_all("a project formatted by prettier");
    npm_test(&project, &path).assert_code(0);

    let init = Ctl::new(&project)
        .args(["init", "--yes"])
        .env("PATH", &path)
        .run();
    init.assert_code(0);
    let config = project.read_json(".claude/ralph/config.json");
    assert_eq!(config["verify"][0]["command"], "npm test", "{config}");

    // Plainly, as the person runs it.
    let plain = npm_test(&project, &path);
    assert_eq!(plain.code, Some(0), "npm test after init:\n{plain:?}");
    // With a loop's state written.
    project.write_prompt("# Task\n\nNothing.\n");
    project
        .ctl(
            &["start", "--max-iterations", "3"],
            &[("PATH", path.as_str())],
        )
        .assert_code(0);
    let plain = npm_test(&project, &path);
    assert_eq!(
        plain.code,
        Some(0),
        "npm test with a loop's state:\n{plain:?}"
    );
    // As a claim of done is judged.
    let check = project.ctl(&["check"], &[("PATH", path.as_str())]);
    assert_eq!(
        check.code,
        Some(0),
        "ralph-ctl check after init:\n{check:?}"
    );

    assert!(
        init.stdout
            .contains("created   .prettierignore (+ /.claude/ralph/ ")
            && init.stdout.contains("prettier runs in the project's check"),
        "init says what it added and why:\n{}",
        init.stdout
    );

    // A second init adds nothing.
    let ignore = project.read(".prettierignore");
    let again = Ctl::new(&project)
        .args(["init", "--yes"])
        .env("PATH", &path)
        .run();
    again.assert_code(0);
    assert!(
        !again.stdout.contains(".prettierignore"),
        "{}",
        again.stdout
    );
    assert_eq!(project.read(".prettierignore"), ignore);
}

#[test]
fn a_check_rewriting_the_markdown_with_remark_leaves_ralphs_files_alone() {
    let Some(bin) = installed_bin("remark") else {
        return;
    };
    let path = path_with(&bin);
    let project = TempProject::new("remark-output");
    // remark writes `*` bullets back, where ralph's guardrails have `-`;
    // the check fails on any file it changed that git tracks.
    project.write(
        "package.json",
        r#"{"name": "toy", "private": true, "scripts": {"test": "remark . --frail --quiet --output && git diff --exit-code"}}"#,
    );
    project.write("README.md", "# Toy\n\n* one\n* two\n");
    project.commit_all("a project whose markdown remark formats");
    npm_test(&project, &path).assert_code(0);

    let init = Ctl::new(&project)
        .args(["init", "--yes"])
        .env("PATH", &path)
        .run();
    init.assert_code(0);
    project.commit_all("ralph installed");
    let plain = npm_test(&project, &path);
    assert_eq!(plain.code, Some(0), "npm test after init:\n{plain:?}");
    assert_eq!(
        project.read(".claude/ralph/guardrails.md"),
        include_str!("../../../templates/guardrails.md")
    );
    let check = project.ctl(&["check"], &[("PATH", path.as_str())]);
    assert_eq!(
        check.code,
        Some(0),
        "ralph-ctl check after init:\n{check:?}"
    );
    assert!(
        init.stdout
            .contains("created   .remarkignore (+ /.claude/ralph/ ")
            && init.stdout.contains("remark runs in the project's check"),
        "init says what it added and why:\n{}",
        init.stdout
    );
}
