use super::*;
use crate::walls::{Mechanism, WallsWanted};
use std::os::unix::fs::PermissionsExt;
use tempfile::TempDir;

fn check(command: &str) -> Vec<VerifyCommand> {
    vec![VerifyCommand {
        name: "tests".into(),
        command: command.into(),
        timeout_seconds: 60,
        network: false,
    }]
}

/// A project with `files`, resolved at the start with `command`; then
/// `change` applied; the changes named.
fn changed_after(files: &[(&str, &str)], command: &str, change: impl FnOnce(&Path)) -> Vec<String> {
    changed_after_setup(files, |_| {}, command, change)
}

/// [`changed_after`], with `setup` run on the project before the start.
fn changed_after_setup(
    files: &[(&str, &str)],
    setup: impl FnOnce(&Path),
    command: &str,
    change: impl FnOnce(&Path),
) -> Vec<String> {
    let dir = TempDir::new().unwrap();
    for (name, text) in files {
        let path = dir.path().join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    setup(dir.path());
    let commands = check(command);
    let path = format!("{}:/usr/bin:/bin", dir.path().join("bin").display());
    let before = resolve(dir.path(), &commands, Some(&path), &Walls::open());
    assert!(changes(dir.path(), dir.path(), &before, &commands).is_empty());
    change(dir.path());
    changes(dir.path(), dir.path(), &before, &commands)
}

fn write(root: &Path, name: &str, text: &str) {
    let path = root.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn executable(root: &Path, name: &str, text: &str) {
    write(root, name, text);
    std::fs::set_permissions(root.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_python_module_shadowing_the_installed_one_is_named() {
    let changes = changed_after(&[], "python3 -m unittest", |root| {
        write(root, "unittest/__init__.py", "");
        write(root, "unittest/__main__.py", "print('OK')");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with(
            "`python3 -m unittest` now runs ./unittest/__init__.py and ./unittest/__main__.py, \
                 not the one at the loop's start (the installed module"
        ),
        "{changes:?}"
    );
    for shadow in [
        "pytest.py",
        "pytest/__init__.py",
        "pytest.cpython-311-x86_64-linux-gnu.so",
    ] {
        let changes = changed_after(&[], "cd sub && python -m pytest -q", |root| {
            write(root, &format!("sub/{shadow}"), "x");
        });
        assert_eq!(changes.len(), 1, "{shadow}: {changes:?}");
    }
}

#[test]
fn a_project_module_the_check_ran_may_not_change() {
    let changes = changed_after(
        &[("tools/__init__.py", ""), ("tools/check.py", "ok")],
        "python3 -m tools.check",
        |root| write(root, "tools/check.py", "print('OK')"),
    );
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].contains("as changed since the loop's start"),
        "{changes:?}"
    );
    // Code the module does not resolve to is free.
    assert!(
        changed_after(&[], "python3 -m unittest", |root| write(
            root, "calc.py", "x"
        ))
        .is_empty()
    );
}

#[test]
fn the_program_is_found_as_the_shell_would() {
    // A project folder on PATH: a runner placed there is a change.
    let changes = changed_after(&[], "pytest -q", |root| {
        executable(root, "bin/pytest", "#!/bin/sh\necho ok\n");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with("`pytest` now runs ./bin/pytest, not"),
        "{changes:?}"
    );
    // A relative program: its content.
    let changes = changed_after(
        &[("node_modules/.bin/jest", "real")],
        "./node_modules/.bin/jest --ci",
        |root| write(root, "node_modules/.bin/jest", "echo ok"),
    );
    assert_eq!(changes.len(), 1, "{changes:?}");
    // A script run by a shell.
    let changes = changed_after(&[("run.sh", "pytest")], "bash run.sh", |root| {
        write(root, "run.sh", "exit 0");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    // Builtins are the shell's; wrappers and assignments looked through.
    let changes = changed_after(
        &[],
        "true && FOO=1 timeout 60 env -i python3 -m unittest",
        |root| write(root, "unittest.py", ""),
    );
    assert_eq!(changes.len(), 1, "{changes:?}");
}

#[test]
fn npm_scripts_are_the_check() {
    let package = r#"{"scripts": {"test": "node --test"}}"#;
    let changes = changed_after(&[("package.json", package)], "npm test", |root| {
        write(root, "package.json", r#"{"scripts": {"test": "echo ok"}}"#);
    });
    assert!(
            changes.contains(&"`npm test (scripts.test of package.json)` now runs `echo ok`, not the one at the loop's start (`node --test`)".to_string()),
            "{changes:?}"
        );
    // A pretest added is a change too; other keys are free.
    let changes = changed_after(&[("package.json", package)], "npm run test", |root| {
        write(
            root,
            "package.json",
            r#"{"scripts": {"pretest": "exit 0", "test": "node --test"}}"#,
        );
    });
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        changed_after(&[("package.json", package)], "yarn test", |root| write(
            root,
            "package.json",
            r#"{"version": "2.0.0", "scripts": {"test": "node --test"}}"#
        ))
        .is_empty()
    );
    // The script's own programs: node_modules/.bin first.
    let changes = changed_after(
        &[("package.json", r#"{"scripts": {"test": "jest"}}"#)],
        "pnpm test",
        |root| executable(root, "node_modules/.bin/jest", "#!/bin/sh\necho ok\n"),
    );
    assert!(
        changes
            .iter()
            .any(|c| c.starts_with("`jest` now runs ./node_modules/.bin/jest")),
        "{changes:?}"
    );
}

#[test]
fn a_worktree_s_script_finds_the_main_checkout_s_runner_as_npm_does() {
    // The main checkout keeps node_modules out of git; a worktree of it
    // has the package.json only, and npm looks in every folder above.
    let dir = TempDir::new().unwrap();
    let project = dir.path();
    let package = r#"{"scripts": {"test": "mocha"}}"#;
    write(project, "package.json", package);
    executable(project, "node_modules/.bin/mocha", "#!/bin/sh\necho ok\n");
    let tree = project.join(".claude/worktrees/item");
    write(&tree, "package.json", package);
    let commands = check("npm test");
    let before = resolve(project, &commands, Some("/usr/bin:/bin"), &Walls::open());
    assert!(
        before.commands[0]
            .targets
            .iter()
            .any(|t| t.what == "mocha" && t.runs == "./node_modules/.bin/mocha"),
        "{before:?}"
    );
    assert_eq!(
        changes(&tree, project, &before, &commands),
        Vec::<String>::new()
    );
    // The worktree's own runner, where it installs one, comes first.
    executable(&tree, "node_modules/.bin/mocha", "#!/bin/sh\necho other\n");
    let changes = changes(&tree, project, &before, &commands);
    assert!(
        changes
            .iter()
            .any(|c| c.starts_with("`mocha` now runs ./node_modules/.bin/mocha as changed")),
        "{changes:?}"
    );
}

#[test]
fn a_makefile_change_is_a_change_of_the_check() {
    let makefile = "test:\n\tpython3 -m unittest\n";
    let changes = changed_after(&[("Makefile", makefile)], "make test", |root| {
        write(root, "Makefile", "test:\n\t@echo ok\n");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].contains("(its makefile)"), "{changes:?}");
    // A GNUmakefile added is read before the Makefile.
    let changes = changed_after(&[("Makefile", makefile)], "make -C . test", |root| {
        write(root, "GNUmakefile", "test:\n\t@echo ok\n");
    });
    assert!(changes[0].contains("./GNUmakefile"), "{changes:?}");
}

#[test]
fn cargo_and_go_configuration_added_is_a_change() {
    let changes = changed_after(&[], "cargo test", |root| {
        write(root, ".cargo/config.toml", "[alias]\ntest = \"version\"\n");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(changes[0].contains("./.cargo/config.toml"), "{changes:?}");
    let changes = changed_after(&[], "go test ./...", |root| {
        write(root, "go.work", "go 1.22\n");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
}

/// What a fake `bin/python3` answers when asked: `difflib`, `json`,
/// `html`, `random` and `msvcrt` are its standard library, `msvcrt`
/// missing here, `abc` frozen.
const ANSWER: &str = r#"{"names": ["difflib", "html", "json", "msvcrt", "random"], "fixed": ["abc", "sys"], "missing": ["msvcrt"], "site": []}"#;

/// [`changed_after`] with a fake `bin/python3` on `PATH` answering
/// [`ANSWER`] (its names decide, whatever Python this machine has).
fn shadowed_after(
    files: &[(&str, &str)],
    command: &str,
    change: impl FnOnce(&Path),
) -> Vec<String> {
    let answer = format!("#!/bin/sh\necho '{ANSWER}'\n");
    changed_after_setup(
        files,
        |root| executable(root, "bin/python3", &answer),
        command,
        change,
    )
}

#[test]
fn a_module_the_loop_added_in_place_of_the_standard_librarys_is_named() {
    let project = [
        ("calc.py", "x"),
        ("tests/__init__.py", ""),
        ("tests/test_calc.py", ""),
    ];
    let changes = shadowed_after(&project, "python3 -m unittest", |root| {
        write(root, "difflib.py", "import unittest.result");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    let bin = "bin/python3";
    assert!(
        changes[0].starts_with(
            "`python3 -m unittest` would import ./difflib.py in place of the standard \
                 library's `difflib` (not there at the loop's start; the standard library's \
                 names as /"
        ) && changes[0].contains(&format!("{bin} names them): rename it")),
        "{changes:?}"
    );
    // A package, a compiled module, a folder the tests put first.
    for (file, module) in [
        ("json/__init__.py", "json"),
        ("random.cpython-311-x86_64-linux-gnu.so", "random"),
        ("tests/json.py", "json"),
    ] {
        let changes = shadowed_after(&[("tests/test_calc.py", "")], "python3 -m pytest", |root| {
            write(root, file, "x");
        });
        assert_eq!(changes.len(), 1, "{file}: {changes:?}");
        assert!(
            changes[0].contains(&format!(
                "./{file} in place of the standard library's `{module}`"
            )),
            "{changes:?}"
        );
    }
}

#[test]
fn what_does_not_shadow_or_was_there_at_the_start_is_free() {
    // The person's own `json.py`, changed by the loop: the project's code.
    assert!(
        shadowed_after(
            &[("json.py", "a"), ("test_a.py", "")],
            "python3 -m unittest",
            |root| write(root, "json.py", "b")
        )
        .is_empty()
    );
    let free = [
        // The test package: not in sys.stdlib_module_names.
        "test/__init__.py",
        "test/test_more.py",
        // A folder without __init__.py: Python takes the real `html`.
        "html/index.html",
        // Built in or frozen: found before any file.
        "abc.py",
        "sys.py",
        // Inside a package: `pkg.random`, not `random`.
        "pkg/__init__.py",
        "pkg/random.py",
        // Not the standard library's.
        "helpers.py",
    ];
    let changes = shadowed_after(&[("test_a.py", "")], "python3 -m unittest", |root| {
        for file in free {
            write(root, file, "x");
        }
    });
    assert!(changes.is_empty(), "{changes:?}");
    // A name this Python has no module of: a bare folder takes its place.
    let changes = shadowed_after(&[], "python3 -m unittest", |root| {
        write(root, "msvcrt/x.py", "");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].contains("import ./msvcrt in place"),
        "{changes:?}"
    );
    // With -I the current folder is not on the path.
    assert!(
        shadowed_after(&[], "python3 -I -m unittest", |root| write(
            root,
            "difflib.py",
            "x"
        ))
        .is_empty()
    );
}

#[test]
fn pythonpath_a_scripts_folder_and_a_makefile_put_their_folders_first() {
    let changes = shadowed_after(&[], "PYTHONPATH=src python3 run.py", |root| {
        write(root, "src/difflib.py", "x");
        write(root, "src/sitecustomize.py", "x");
        write(root, "difflib.py", "x");
    });
    assert_eq!(changes.len(), 3, "{changes:?}");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("./src/sitecustomize.py (`sitecustomize`)")),
        "{changes:?}"
    );
    // pytest's `#!` names Python: its own folder comes first.
    let pytest = "#!/usr/bin/env python3\nimport pytest\n";
    let setup = |root: &Path| {
        executable(root, "bin/pytest", pytest);
        executable(
            root,
            "bin/python3",
            &format!("#!/bin/sh\necho '{ANSWER}'\n"),
        );
    };
    let changes = changed_after_setup(&[], setup, "pytest -q", |root| {
        write(root, "bin/json.py", "x");
        write(root, "difflib.py", "x");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with("`pytest -q` would import ./bin/json.py"),
        "{changes:?}"
    );
    // Two commands of a line finding the same file: named once.
    let changes = shadowed_after(&[], "python3 -m unittest; python3 -m pytest", |root| {
        write(root, "difflib.py", "x");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    // `sh -c` runs the Python its line names; a line without one, none.
    let changes = shadowed_after(&[], "sh -c 'cd sub && python3 -m pytest'", |root| {
        write(root, "sub/difflib.py", "x");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    let dir = TempDir::new().unwrap();
    let quiet = resolve(dir.path(), &check("sh -c 'exit 0'"), None, &Walls::open());
    assert!(quiet.pythons.is_empty() && quiet.commands[0].shadows.is_none());
    // A makefile's recipe may run Python from the current folder.
    let changes = shadowed_after(
        &[("Makefile", "test:\n\tpython3 -m unittest\n")],
        "make test",
        |root| write(root, "difflib.py", "x"),
    );
    assert_eq!(changes.len(), 1, "{changes:?}");
}

#[test]
fn the_interpreter_is_asked_once_and_its_failure_falls_back_to_the_list() {
    let dir = TempDir::new().unwrap();
    executable(dir.path(), "bin/python3", "#!/bin/sh\necho not json\n");
    let path = format!("{}:/usr/bin:/bin", dir.path().join("bin").display());
    let commands = [check("python3 -m unittest"), check("python3 -m pytest")].concat();
    let before = resolve(dir.path(), &commands, Some(&path), &Walls::open());
    assert_eq!(before.pythons.len(), 1, "{before:?}");
    let names_from = &before.pythons[0].names_from;
    assert!(
            names_from.starts_with("from ralph's built-in list, as ")
                && names_from.ends_with("bin/python3 could not be asked: its answer could not be read (expected ident at line 1 column 2)"),
            "{names_from}"
        );
    assert_eq!(before.pythons[0].names.len(), STDLIB_NAMES.len());
    write(dir.path(), "difflib.py", "x");
    let changes = changes(dir.path(), dir.path(), &before, &commands);
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert!(
        changes[0].contains("names from ralph's built-in list"),
        "{changes:?}"
    );
}

#[test]
fn this_machines_python_is_asked_for_its_standard_library() {
    let dir = TempDir::new().unwrap();
    // Inside the checks' walls, where this machine has them.
    let walls = Walls::around(dir.path(), dir.path(), WallsWanted::Required);
    let before = resolve(dir.path(), &check("python3 -m unittest"), None, &walls);
    let runtime = &before.pythons[0];
    let path = std::env::var("PATH").unwrap_or_default();
    let python = which(dir.path(), "python3", &path);
    let why_not = match (&python, Mechanism::probe()) {
        (None, _) => Some("it was not found".to_string()),
        (_, Mechanism::Missing(why)) => Some(why.clone()),
        _ => None,
    };
    if let Some(why) = why_not {
        assert!(
            runtime.names_from.starts_with("from ralph's built-in list")
                && runtime.names_from.contains(&why),
            "{runtime:?}"
        );
        return;
    }
    let python = python.unwrap();
    assert_eq!(
        runtime.names_from,
        format!("as {} names them", python.display())
    );
    for name in ["difflib", "json", "unittest"] {
        assert!(runtime.names.iter().any(|n| n == name), "{runtime:?}");
    }
    // `sys` is built in: no file takes its place.
    assert!(
        !runtime.names.iter().any(|n| n == "sys" || n == "test"),
        "{runtime:?}"
    );
}

#[test]
fn a_record_from_before_shadows_were_looked_for_is_not_compared() {
    let dir = TempDir::new().unwrap();
    let commands = check("python3 -m unittest");
    let mut before = resolve(dir.path(), &commands, None, &Walls::open());
    before.commands[0].shadows = None;
    write(dir.path(), "difflib.py", "x");
    assert!(changes(dir.path(), dir.path(), &before, &commands).is_empty());
}

#[test]
fn a_package_managers_configuration_is_part_of_the_check() {
    let package = r#"{"scripts": {"test": "node --test"}}"#;
    let changes = changed_after(&[("package.json", package)], "npm test", |root| {
        write(root, ".npmrc", "node-options=--require ./pass.js\n");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with("`npm test (reads ./.npmrc)` now runs ./.npmrc"),
        "{changes:?}"
    );
    let changes = changed_after(&[("package.json", package)], "yarn test", |root| {
        write(root, ".yarnrc.yml", "x");
    });
    assert_eq!(changes.len(), 1, "{changes:?}");
}

#[test]
fn a_command_no_longer_configured_is_not_compared() {
    let dir = TempDir::new().unwrap();
    let before = resolve(
        dir.path(),
        &check("python3 -m unittest"),
        None,
        &Walls::open(),
    );
    write(dir.path(), "unittest.py", "");
    assert!(changes(dir.path(), dir.path(), &before, &check("make")).is_empty());
    assert_eq!(
        changes(
            dir.path(),
            dir.path(),
            &before,
            &check("python3 -m unittest")
        )
        .len(),
        1
    );
}

#[test]
fn a_worktree_of_the_project_resolves_as_the_project() {
    let project = TempDir::new().unwrap();
    let worktree = TempDir::new().unwrap();
    for root in [project.path(), worktree.path()] {
        write(root, "package.json", r#"{"scripts": {"test": "jest"}}"#);
    }
    executable(project.path(), ".venv/bin/pytest", "#!/bin/sh\n");
    let path = format!(
        "{}:/usr/bin:/bin",
        project.path().join(".venv/bin").display()
    );
    let commands = [check("pytest -q"), check("npm test")].concat();
    let before = resolve(project.path(), &commands, Some(&path), &Walls::open());
    assert!(
        changes(worktree.path(), project.path(), &before, &commands).is_empty(),
        "{before:?}"
    );
    write(
        worktree.path(),
        "package.json",
        r#"{"scripts": {"test": "true"}}"#,
    );
    let changed = changes(worktree.path(), project.path(), &before, &commands);
    assert!(
        changed[0].starts_with("`npm test (scripts.test of package.json)` now runs `true`"),
        "{changed:?}"
    );
}

#[test]
fn words_and_commands_split_as_the_shell_does() {
    // A redirection's `&` joins no command: `2>&1` runs no program `1`.
    let dir = TempDir::new().unwrap();
    let found = resolve(
        dir.path(),
        &check("true 2>&1 | cat >&2 & echo done"),
        Some("/usr/bin:/bin"),
        &Walls::open(),
    );
    let whats: Vec<&str> = found.commands[0]
        .targets
        .iter()
        .map(|t| t.what.as_str())
        .collect();
    assert_eq!(whats, ["true", "cat", "echo"]);
    assert_eq!(
        words(r#"FOO="a b" 'py thon' x\ y 2>&1 > out"#),
        vec!["FOO=a b", "py thon", "x y"]
    );
    assert_eq!(
        look_through(&words("nice -n 5 timeout -s KILL 60 make")),
        vec!["make"]
    );
}
