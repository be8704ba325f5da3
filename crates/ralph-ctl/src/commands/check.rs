//! `ralph-ctl check`: what a claim of done would meet now. It runs the
//! loop's pinned checks (with no loop, the config files' verify commands)
//! inside the walls a stop runs them in, and prints what the stop would
//! judge: each check's result, its test counts against the loop's start,
//! and each completion gate, judged by the engine's own code
//! (`ralph_core::engine::rehearse_claim`). It writes nothing: no iteration,
//! no state, no log line.
//!
//! This is the agent's one way to run the project's checks where the
//! client has no sandbox that holds: ralph's allow rules name it, and never
//! the checks' own commands, which would run the agent's code in its own
//! shell, outside every wall, with the person's rights.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::queue::source::{self, Source};
use ralph_core::engine::{self, RealWorld, Rehearsal, Stop};
use ralph_core::exit_codes;
use ralph_core::judge::completion::{self, GateResult};
use ralph_core::judge::config::{EnvSource, ProcessEnv};
use ralph_core::judge::state::LoopState;
use ralph_core::observe::verify::VerifyResult;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::text::{printable, printable_json};

use crate::error::{CmdResult, CtlError};
use crate::formula;

/// The variable a queue item's client carries: the item's id, which names
/// its loop (`runtime/queue/<slug>/`).
pub(crate) const QUEUE_ITEM_ENV: &str = "RALPH_QUEUE_ITEM";

/// `ralph-ctl check`'s arguments (its help is the command's).
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// Print the checks' results and the gates as one JSON object instead.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `ralph-ctl check` from the current folder (in a worktree of the
/// project, that worktree is checked), for the loop of the queue item in
/// `RALPH_QUEUE_ITEM` when it is set, on stdout. Inside a loop's client
/// (the agent's shell) the project is the one whose loop started the
/// client, and `--project` is refused: see [`AgentShell`].
pub(crate) fn command(paths: &ProjectPaths, args: CheckArgs) -> CmdResult {
    let cwd = std::env::current_dir().ok();
    let item = std::env::var(QUEUE_ITEM_ENV)
        .ok()
        .filter(|id| !id.is_empty());
    let shell = AgentShell::from_env(&ProcessEnv);
    let paths = shell.project(paths);
    let target = Target::find(&paths, cwd.as_deref(), item.as_deref());
    run(&target, shell, args.json, &mut std::io::stdout())
}

/// Whether `ralph-ctl check` runs in a loop's client, the agent's shell
/// (`RALPH_ACTIVE` or `RALPH_DRIVEN` set), and the project whose loop
/// started it (`RALPH_LOOP_PROJECT`). There the agent chooses the
/// arguments and the folder, so neither may choose what runs: no
/// `--project`, the loop's own project whatever the folder, and only the
/// checks the loop pinned at its start (a config file in a folder the
/// agent wrote is not run, walled or not).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct AgentShell {
    /// In a loop's client.
    pub(crate) inside: bool,
    /// The loop's project, as the driver gave it.
    pub(crate) loop_project: Option<PathBuf>,
}

impl AgentShell {
    /// Read from the environment.
    pub(crate) fn from_env(env: &dyn EnvSource) -> AgentShell {
        use ralph_core::judge::config::env;
        let set = |name: &str| matches!(env.get(name), Some(Ok(v)) if !v.is_empty());
        AgentShell {
            inside: set(env::ACTIVE) || set(crate::driver::command::DRIVEN_ENV),
            loop_project: match env.get(env::LOOP_PROJECT) {
                Some(Ok(dir)) if !dir.is_empty() => Some(PathBuf::from(dir)),
                _ => None,
            },
        }
    }

    /// Whether `--project` may be given: not inside a loop's client.
    pub(crate) fn allows_project(&self) -> Result<(), CtlError> {
        if self.inside {
            return Err(CtlError::Refused(
                "--project is refused inside a loop's Claude Code session: `ralph-ctl check` there \
                 judges the loop that started the session, in its own project; run `ralph-ctl check` \
                 without it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The project to check: `paths` outside a client; inside one, the
    /// loop's project (from a client no driver started, `paths`).
    fn project(&self, paths: &ProjectPaths) -> ProjectPaths {
        match (&self.loop_project, self.inside) {
            (Some(root), true) => ProjectPaths::new(root.clone()),
            _ => paths.clone(),
        }
    }
}

/// Which loop a check judges for, and where its checks run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// The loop's paths: the main checkout's, a queue item's.
    pub(crate) paths: ProjectPaths,
    /// The worktree the checks run in, when not the project itself.
    pub(crate) work_root: Option<PathBuf>,
    /// The queue item, by its id.
    pub(crate) item: Option<String>,
}

impl Target {
    /// The loop of the project `paths` names, as seen from `cwd`: inside a
    /// worktree of it (`.claude/worktrees/NAME`, where a fresh iteration
    /// or a queue item works) the main checkout's loop, checked in that
    /// worktree; with `item`, that queue item's loop.
    pub(crate) fn find(paths: &ProjectPaths, cwd: Option<&Path>, item: Option<&str>) -> Target {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let root = real(&paths.root);
        let in_tree = worktree_of(&root).or_else(|| {
            cwd.map(real)
                .and_then(|cwd| worktree_of(&cwd))
                .filter(|(main, _)| *main == root)
        });
        let (main, work_root) = match in_tree {
            Some((main, tree)) if main.join(ralph_core::paths::RALPH_DIR).is_dir() => {
                (main, Some(tree))
            }
            _ => (paths.root.clone(), None),
        };
        let project = ProjectPaths::new(main);
        Target {
            paths: match item {
                Some(id) => project.for_item(&source::slug_of(id)),
                None => project,
            },
            work_root,
            item: item.map(str::to_string),
        }
    }
}

/// The main checkout and the worktree when `path` is in one of its
/// worktrees (`MAIN/.claude/worktrees/NAME/…`).
fn worktree_of(path: &Path) -> Option<(PathBuf, PathBuf)> {
    path.ancestors().find_map(|tree| {
        let worktrees = tree.parent()?;
        let claude = worktrees.parent()?;
        let main = claude.parent()?;
        (worktrees.file_name()? == "worktrees" && claude.file_name()? == ".claude")
            .then(|| (main.to_path_buf(), tree.to_path_buf()))
    })
}

/// What the check found: the loop it judged for, how its record was read,
/// and what a claim would meet.
struct Found {
    state: Option<LoopState>,
    /// Why the record was read without its MAC checked (ralph's key out of
    /// this process's reach), when it was.
    unverified: Option<String>,
    rehearsal: Rehearsal,
}

/// Runs the check for `target`, writes it to `out`; exit 0 when a claim
/// would pass every gate judged here, [`exit_codes::CHECK_FAILED`] when
/// one fails. Inside a loop's client (`shell`), only a loop's pinned checks run.
pub(crate) fn run(
    target: &Target,
    shell: AgentShell,
    json: bool,
    out: &mut dyn Write,
) -> CmdResult {
    let found = judge(target, &shell)?;
    let code = if found.rehearsal.accepted() {
        exit_codes::OK
    } else {
        exit_codes::CHECK_FAILED
    };
    let written = if json {
        write_json(target, &found, out)
    } else {
        write_text(target, &found, out)
    };
    super::written(written.and_then(|()| out.flush()), code)
}

/// Reads the loop (never writes it) and judges a claim made now.
fn judge(target: &Target, shell: &AgentShell) -> Result<Found, CtlError> {
    let (state, unverified) = StateStore::new(&target.paths).read_for_a_look()?;
    if shell.inside && state.is_none() {
        return Err(CtlError::Refused(format!(
            "no loop in {}: inside a loop's Claude Code session, `ralph-ctl check` runs only the \
             checks a loop pinned at its start, never a config file as it is now; run it from the \
             loop's project, without --project",
            target.paths.root.display()
        )));
    }
    let mut stop = Stop {
        work_root: target.work_root.clone(),
        ..Stop::default()
    };
    if let Some(state) = &state {
        // A formula run's claim is checked by its step's gates too, as the
        // driver's stop does.
        if let Some(pinned) = state.pinned.as_ref().and_then(|p| p.formula.as_ref()) {
            let formula = formula::from_pin(pinned)?;
            let step = crate::driver::steps::current(&formula, state);
            stop.extra_verify = step.gates.iter().map(formula::Gate::as_verify).collect();
            stop.skip_project_verify = !step.verify;
        }
    }
    if target.item.is_some() {
        stop.not_plans = queue_plan(&target.paths.project());
    }
    let rehearsal = engine::rehearse_claim(
        &target.paths,
        &ProcessEnv,
        state.as_ref(),
        &stop,
        &RealWorld,
    )
    .map_err(CtlError::from)?;
    Ok(Found {
        state,
        unverified,
        rehearsal,
    })
}

/// A queue run's plan, which gates no item's claim (its other items are
/// other workers'): the run's `plan:PATH` source, when it is one.
fn queue_plan(project: &ProjectPaths) -> Vec<String> {
    let run = StateStore::new(project)
        .read_for_a_look()
        .ok()
        .and_then(|r| r.0);
    match run
        .and_then(|s| s.queue)
        .map(|q| q.source.parse::<Source>())
    {
        Some(Ok(Source::Plan(path))) => vec![path.to_string_lossy().into_owned()],
        _ => Vec::new(),
    }
}

/// Which loop the checks are for, in one line.
fn loop_line(target: &Target, found: &Found) -> String {
    let whose = match &target.item {
        Some(id) => format!("queue item {}'s loop", printable(id)),
        None => "the loop".to_string(),
    };
    let mut line = match &found.state {
        Some(state) => format!(
            "{whose}: {} at iteration {} of {}; its checks as pinned at its start",
            state.status.as_str(),
            state.iteration,
            state.max_iterations
        ),
        None => format!(
            "no loop in {}: the checks of .claude/ralph/config.json as they are, as a loop \
             started now would judge a claim (no test counts of a start to compare with)",
            target.paths.root.display()
        ),
    };
    if let Some(tree) = &target.work_root {
        line.push_str(&format!("; run in the worktree {}", tree.display()));
    }
    line
}

fn write_text(target: &Target, found: &Found, out: &mut dyn Write) -> io::Result<()> {
    let rehearsal = &found.rehearsal;
    writeln!(
        out,
        "ralph-ctl check: what a claim of done would meet now, judged as the loop's next stop \
         judges it; nothing is recorded"
    )?;
    writeln!(out, "{}", loop_line(target, found))?;
    if let Some(why) = &found.unverified {
        writeln!(
            out,
            "note: the loop's record was read without its signature checked ({}: ralph's key is \
             out of this shell's reach, as in the client's sandbox); the stop judges by the \
             record it verifies",
            printable(why)
        )?;
    }
    if let Some(notice) = &rehearsal.walls_notice {
        writeln!(out, "{notice}")?;
    }
    writeln!(out)?;
    if rehearsal.checks.is_empty() {
        writeln!(out, "checks: none")?;
    }
    for check in &rehearsal.checks {
        let result = rehearsal
            .verification
            .iter()
            .find(|r| r.name == check.name && r.command == check.command);
        write_check(out, &check.name, &check.command, result, rehearsal)?;
    }
    writeln!(out, "gates:")?;
    for gate in &rehearsal.gates {
        write_gate(out, gate)?;
    }
    writeln!(
        out,
        "not judged here: your final message (the completion signal, a status block) and the \
         calls the client refused, which the stop reads too"
    )?;
    if rehearsal.accepted() {
        writeln!(
            out,
            "result: a claim of done now would pass these gates ({})",
            printable(&rehearsal.accepted_summary)
        )
    } else {
        let failed = rehearsal
            .gates
            .iter()
            .filter(|g| !g.passed)
            .map(|g| g.gate.as_str());
        writeln!(
            out,
            "result: a claim of done now would be rejected: {}",
            completion::rejected_by(failed)
        )
    }
}

/// One check: its command, how it ended, its counts against the start,
/// and, when it failed, the last lines of its output.
fn write_check(
    out: &mut dyn Write,
    name: &str,
    command: &str,
    result: Option<&VerifyResult>,
    rehearsal: &Rehearsal,
) -> io::Result<()> {
    writeln!(out, "check `{}`: {}", printable(name), printable(command))?;
    let Some(result) = result else {
        return writeln!(out, "  did not run");
    };
    let ended = if result.timed_out {
        "timed out".to_string()
    } else {
        match result.exit_code {
            Some(0) => "passed".to_string(),
            Some(code) => format!("failed (exit {code})"),
            None => "could not run".to_string(),
        }
    };
    writeln!(out, "  {ended} in {} ms", result.duration_ms)?;
    let now = result
        .counts
        .map_or_else(|| "no test summary".to_string(), |c| c.describe());
    let start = rehearsal
        .baseline
        .iter()
        .find(|b| b.command == result.command)
        .map(|b| b.counts.describe());
    match start {
        Some(start) => writeln!(out, "  tests: {now}; at the loop's start: {start}")?,
        None => writeln!(out, "  tests: {now}; no count of the loop's start")?,
    }
    let lost = result
        .failure_headers
        .iter()
        .any(|h| !result.output_tail.contains(h.trim_end_matches('…')));
    if !result.passed() && lost {
        writeln!(out, "  the failing tests it named:")?;
        for header in &result.failure_headers {
            writeln!(out, "    {}", printable(header))?;
        }
    }
    if !result.passed() && !result.output_tail.trim().is_empty() {
        writeln!(out, "  last lines of its output:")?;
        for line in result.output_tail.lines() {
            match line.trim_end() {
                "" => writeln!(out)?,
                line => writeln!(out, "    {}", printable(line))?,
            }
        }
    }
    Ok(())
}

/// One gate, on one line (the verification's without the output the
/// checks above show whole).
fn write_gate(out: &mut dyn Write, gate: &GateResult) -> io::Result<()> {
    let detail = match gate.gate {
        completion::Gate::Verification => {
            let first = gate.detail.lines().next().unwrap_or_default();
            match first
                .strip_suffix("; last lines of its output:")
                .or_else(|| {
                    first
                        .split_once("; the failing tests it named")
                        .map(|(said, _)| said)
                }) {
                Some(said) => format!("{said} (its output is above)"),
                None => first.to_string(),
            }
        }
        _ => completion::detail_on_one_line(&gate.detail),
    };
    writeln!(
        out,
        "  {} {}: {}",
        if gate.passed { "pass" } else { "FAIL" },
        gate.gate.as_str(),
        printable(&detail)
    )
}

fn write_json(target: &Target, found: &Found, out: &mut dyn Write) -> io::Result<()> {
    let rehearsal = &found.rehearsal;
    let value = serde_json::json!({
        "accepted": rehearsal.accepted(),
        "loop": found.state.as_ref().map(|s| serde_json::json!({
            "sessionId": s.session_id,
            "status": s.status.as_str(),
            "iteration": s.iteration,
            "maxIterations": s.max_iterations,
            "queueItem": target.item,
        })),
        "workRoot": target.work_root,
        "recordUnverified": found.unverified,
        "walls": rehearsal.walls_notice,
        "checks": rehearsal.checks,
        "verification": rehearsal.verification,
        "baseline": rehearsal.baseline,
        "gates": rehearsal.gates,
    });
    let json = serde_json::to_string_pretty(&value).expect("the check serializes");
    writeln!(out, "{}", printable_json(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worktree_is_found_from_inside_it_and_its_loop_is_the_main_checkouts() {
        let tmp = crate::testdir::new("check-target");
        let main = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(main.join(".claude/ralph")).unwrap();
        let tree = main.join(".claude/worktrees/item-T-1");
        std::fs::create_dir_all(tree.join("src")).unwrap();
        assert_eq!(
            worktree_of(&tree.join("src")),
            Some((main.clone(), tree.clone()))
        );
        assert_eq!(worktree_of(&main), None);
        // Found by the main checkout (no .claude/ralph in the worktree).
        let paths = ProjectPaths::new(main.clone());
        let target = Target::find(&paths, Some(&tree.join("src")), None);
        assert_eq!(target.paths, ProjectPaths::new(main.clone()));
        assert_eq!(target.work_root, Some(tree.clone()));
        // Found by the worktree itself (its own committed .claude/ralph).
        std::fs::create_dir_all(tree.join(".claude/ralph")).unwrap();
        let target = Target::find(&ProjectPaths::new(tree.clone()), Some(&tree), None);
        assert_eq!(target.paths, ProjectPaths::new(main.clone()));
        assert_eq!(target.work_root, Some(tree.clone()));
        // A queue item's loop, by the id its client carries.
        let target = Target::find(&paths, Some(&tree), Some("T-1"));
        assert_eq!(
            target.paths,
            ProjectPaths::new(main.clone()).for_item("T-1")
        );
        let odd = Target::find(&paths, Some(&main), Some("a/b"));
        assert_eq!(
            odd.paths,
            ProjectPaths::new(main.clone()).for_item(&source::slug_of("a/b"))
        );
        assert_eq!(odd.work_root, None);
        // Elsewhere: the project as named.
        let other = crate::testdir::new("check-elsewhere");
        let target = Target::find(&paths, Some(other.path()), None);
        assert_eq!(target.paths, paths);
        assert_eq!(target.work_root, None);
    }
}
