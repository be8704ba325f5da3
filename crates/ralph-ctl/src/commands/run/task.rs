//! `ralph-ctl run --task TEXT`: a loop from nothing in one command. Ralph
//! is installed into the project when it is not there yet (as `init` does,
//! with the project's test command as the completion check: asked in a
//! terminal, taken with `--yes`), and the task becomes PROMPT.md's; `run`
//! then starts the loop as it always does. With `--dry-run` all of it is
//! only said, and the dry run shows the task's text.

use std::path::Path;

use ralph_core::observe::prompt_text as prompt_file;
use ralph_core::observe::registration;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::atomic;

use crate::assets;
use crate::commands::{init, plugin};
use crate::driver::start;
use crate::error::CtlError;

/// Where the PROMPT.md a new task replaced is kept, in the runtime folder
/// (git-ignored): a person's earlier task is never lost.
pub(crate) const PREVIOUS_PROMPT: &str = "PROMPT.previous.md";

/// PROMPT.md for `task`: the template, with the task in place of its
/// placeholder paragraph and the loop's completion signal where the
/// template names the default one.
pub(crate) fn prompt_for(task: &str, signal: &str) -> String {
    let template = assets::PROMPT_TEMPLATE;
    let rest = template
        .find("\n## ")
        .map_or("", |at| &template[at..])
        .replace(ralph_core::judge::config::DEFAULT_COMPLETION_SIGNAL, signal);
    format!("# Task\n\n{}\n{rest}", task.trim())
}

/// Gets the project ready for a loop on `task`: installs ralph when the
/// Stop hook is not registered there, refuses while a loop is in the way
/// (before PROMPT.md is touched: a running loop reads it), and writes the
/// task into PROMPT.md, keeping a different earlier one aside.
pub(crate) fn prepare(
    paths: &ProjectPaths,
    task: &str,
    yes: bool,
    reset: bool,
) -> Result<(), CtlError> {
    let task = checked(task)?;
    set_up(paths, yes)?;
    let (config, _) = start::pinned_config(paths, &ralph_core::judge::config::ProcessEnv)?;
    // `--reset` clears a loop that is not carried: only that one refuses.
    start::refuse_if_in_the_way(paths, &config, reset)?;
    let path = paths.resolve(&config.prompt_file);
    let text = prompt_for(task, &config.completion_signal);
    if let Ok(before) = prompt_file::read_prompt(&path) {
        if before == text {
            return Ok(());
        }
        if !prompt_file::is_template(&before) {
            keep_aside(paths, &before)?;
        }
    }
    atomic::write_file(&path, text.as_bytes(), 0o644).map_err(CtlError::io("write", &path))?;
    crate::output::say!("Task written into {}", shown(&path, &paths.root));
    Ok(())
}

/// The task's text, trimmed, or why `--task` cannot take it.
fn checked(task: &str) -> Result<&str, CtlError> {
    let task = task.trim();
    if task.is_empty() {
        return Err(CtlError::BadArgument(
            "--task needs the task's text, e.g. --task \"make the failing tests pass\"".into(),
        ));
    }
    if task.len() > plugin::MAX_TASK_BYTES {
        return Err(CtlError::BadArgument(format!(
            "the task is {} bytes, more than the {} KiB --task takes: write it into \
             .claude/ralph/PROMPT.md and run without --task",
            task.len(),
            plugin::MAX_TASK_BYTES / 1024
        )));
    }
    Ok(task)
}

/// `run --task TEXT --dry-run`: says what the run would do first (install
/// ralph, with which completion check; replace PROMPT.md), and gives the
/// dry run the task's PROMPT.md to show, as a file outside the project (the
/// caller makes it the run's `RALPH_PROMPT_FILE`). Nothing in the project
/// is written; the file goes when the returned one is dropped.
pub(crate) fn preview(
    paths: &ProjectPaths,
    task: &str,
    yes: bool,
    reset: bool,
) -> Result<tempfile::NamedTempFile, CtlError> {
    let task = checked(task)?;
    let installed = installed(paths)?;
    if !installed {
        crate::output::say!(
            "ralph is not installed here: a real run first installs it, as `ralph-ctl init` does \
             (PROMPT.md, guardrails.md, the launchers, the Stop hook in .claude/settings.json)."
        );
        if let Some((command, source)) = init::test_command(&paths.root) {
            crate::output::say!(
                "Completion check: `{command}` (from {source}), {}.",
                if yes {
                    "taken, as --yes says"
                } else {
                    "asked in a terminal, taken without one (--yes takes it without asking)"
                }
            );
        } else {
            crate::output::say!(
                "No test command found: a claim of done would be accepted unchecked \
             (`ralph-ctl init --verify CMD` sets one)."
            );
        }
    }
    let (config, _) = start::pinned_config(paths, &ralph_core::judge::config::ProcessEnv)?;
    if let Err(refusal) = start::refuse_if_in_the_way(paths, &config, reset) {
        crate::output::say!("warning: a real run would be refused: {refusal}");
    }
    let path = paths.resolve(&config.prompt_file);
    let text = prompt_for(task, &config.completion_signal);
    let earlier = prompt_file::read_prompt(&path)
        .ok()
        .filter(|before| *before != text && !prompt_file::is_template(before));
    crate::output::say!(
        "The task would go into {}{}; this dry run writes nothing.",
        shown(&path, &paths.root),
        match earlier {
            Some(_) => format!(
                " (the earlier task there kept in {})",
                shown(&paths.runtime_dir().join(PREVIOUS_PROMPT), &paths.root)
            ),
            None => String::new(),
        }
    );
    if !installed {
        crate::output::say!("(The text below has no guardrails.md yet: the install writes it.)");
    }
    crate::output::say!();
    // In the temp folder, private, removed when the dry run is done.
    let mut file = tempfile::Builder::new()
        .prefix("ralph-task-")
        .suffix(".md")
        .tempfile()
        .map_err(CtlError::io("create", std::env::temp_dir()))?;
    {
        use std::io::Write as _;
        file.write_all(text.as_bytes())
            .map_err(CtlError::io("write", file.path()))?;
    }
    Ok(file)
}

/// Whether ralph is installed in the project: the Stop hook registered
/// there, and `.claude/ralph/` in place.
fn installed(paths: &ProjectPaths) -> Result<bool, CtlError> {
    Ok(registration::registered_command_in(paths)
        .map_err(|e| CtlError::Refused(format!("{e}; fix it, or run `ralph-ctl init`")))?
        .is_some()
        && paths.ralph_dir().is_dir())
}

/// What `run` does with the project before the loop starts: with `--task`,
/// the task is written (or, with `--dry-run`, only shown: the returned
/// file holds its PROMPT.md until the dry run has read it); a queue run
/// sets up a project never set up as `--task` does, before it claims
/// anything. `--yes` answers that setup's question, so it goes with one of
/// them.
pub(crate) fn set_up_for_run(
    paths: &ProjectPaths,
    args: &super::RunArgs,
) -> Result<Option<tempfile::NamedTempFile>, CtlError> {
    let (yes, reset) = (args.yes, args.reset);
    match args.task.as_deref() {
        Some(task) if args.dry_run => preview(paths, task, yes, reset).map(Some),
        Some(task) => prepare(paths, task, yes, reset).map(|()| None),
        None if args.queue.is_some() => set_up(paths, yes).map(|()| None),
        None if yes => Err(CtlError::BadArgument(
            "--yes goes with --task or --queue (it answers the question of setting the project up)"
                .into(),
        )),
        None => Ok(None),
    }
}

/// Installs ralph into the project when the Stop hook is not registered
/// there (as `init` does; the test command found becomes the completion
/// check when `yes`, when the person says so, or when there is no terminal
/// to ask in), so that a run never starts in a project half set up.
pub(crate) fn set_up(paths: &ProjectPaths, yes: bool) -> Result<(), CtlError> {
    let installed = installed(paths)?;
    if !installed {
        init::run(
            paths,
            init::InitArgs {
                yes,
                then_runs: true,
                ..init::InitArgs::default()
            },
        )?;
        crate::output::say!();
    }
    Ok(())
}

/// Keeps the PROMPT.md a new task replaces in the runtime folder.
fn keep_aside(paths: &ProjectPaths, before: &str) -> Result<(), CtlError> {
    let runtime = paths.runtime_dir();
    std::fs::create_dir_all(&runtime).map_err(CtlError::io("create", &runtime))?;
    let aside = runtime.join(PREVIOUS_PROMPT);
    atomic::write_file(&aside, before.as_bytes(), 0o644).map_err(CtlError::io("write", &aside))?;
    crate::output::say!(
        "The earlier task in PROMPT.md is kept in {}",
        shown(&aside, &paths.root)
    );
    Ok(())
}

fn shown(path: &Path, root: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_takes_the_template_s_place_and_keeps_its_instructions() {
        let text = prompt_for("  Fix the parser.\n", "ALL_DONE");
        assert!(text.starts_with("# Task\n\nFix the parser.\n\n## Each iteration"));
        assert!(!prompt_file::is_template(&text));
        assert!(text.contains("`ALL_DONE`"));
        assert!(!text.contains(ralph_core::judge::config::DEFAULT_COMPLETION_SIGNAL));
    }
}
