//! `ralph-ctl reload`: the running loop adopts the config files (and its
//! formula) as they are now. A loop decides by what it was pinned to when
//! it started (`ralph_core::pin`); this is the one way to change that.

use std::io::Write;

use ralph_core::events::{Event, Reload};
use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, FileLayers, ProcessEnv};
use ralph_core::observe::test_counts::CommandCounts;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::pin::Pinned;
use ralph_core::time;
use ralph_core::transaction::{self, Whose};
use serde_json::{Map, Value};

use crate::error::CmdResult;
use crate::error::CtlError;
use crate::formula;

/// Re-reads and checks the config files and the running formula's file,
/// pins them in the running (or paused) loop under the state lock, clears
/// its drift, logs `reload`, and writes what changed to `out`. A bad file
/// is refused with its error and the pin kept; with no loop, says so and
/// returns [`exit_codes::NO_LOOP`].
pub(crate) fn run(paths: &ProjectPaths, out: &mut dyn Write) -> CmdResult {
    let store = StateStore::new(paths);
    let no_loop = |out: &mut dyn Write, why: String| {
        super::written(
            writeln!(out, "{why}; the next start reads config.json as it is"),
            exit_codes::NO_LOOP,
        )
    };
    if !store.exists()? {
        return no_loop(
            out,
            format!(
                "No Ralph loop in {}: nothing to reload",
                paths.root.display()
            ),
        );
    }
    // Read and checked before the lock: a bad file changes nothing.
    let layers = FileLayers::read(paths, &ProcessEnv)?;
    let config = Config::from_layers(paths, &ProcessEnv, &layers)?;
    let now = time::Timestamp::now();
    let mut pin = Pinned::of(&layers, now);
    let before = store.read()?.filter(|s| s.status.is_live());
    // Where the Stop hook runs the checks, its timeout covers them as
    // reloaded (a `--fresh` or queue loop's are the driver's): before the
    // protectedPaths snapshot, so that ralph's own rewrite of the settings
    // is not taken for the agent's.
    if before.as_ref().is_some_and(|s| !s.fresh_context) {
        crate::driver::start::fit_hook_timeout(paths, &config);
    }
    let Measured {
        new_baseline,
        new_protected,
        checks,
        check_resolution,
    } = measure(paths, &config, before.as_ref())?;

    let no_loop_here = format!(
        "No Ralph loop in {}: nothing to reload",
        paths.root.display()
    );
    let mut reloaded = Err(no_loop_here);
    let changed = transaction::change(paths, Whose::Any, |draft| {
        let Some(state) = draft.state() else {
            return Ok(());
        };
        if !state.status.is_live() {
            reloaded = Err(format!(
                "The Ralph loop here is {}, not running: nothing to reload",
                state.status.as_str()
            ));
            return Ok(());
        }
        let old = state.pinned.clone();
        if let Some(pinned) = old.as_ref().and_then(|p| p.formula.as_ref()) {
            let formula = formula::load(paths, &formula::stem_of(pinned))?;
            check_gate_names(&formula, &config)?;
            pin.formula = Some(formula::pin(paths, &formula));
        }
        let mut changes = describe_changes(old.as_ref(), &pin);
        let test_baseline = baseline_now(&state.test_baseline, &config, new_baseline, &mut changes);
        if let Some(protected) = &new_protected {
            changes.push(format!(
                "protectedPaths snapshot taken now: {}",
                protected
                    .as_ref()
                    .map_or("none".to_string(), |p| p.patterns.join(", "))
            ));
        }
        if let (Some(old), Some(_)) = (&state.check_resolution, &check_resolution) {
            let moved =
                ralph_core::observe::resolved::changes(&paths.root, &paths.root, old, &checks);
            if !moved.is_empty() {
                changes.push(format!("the check recorded anew: {}", moved.join("; ")));
            }
        }
        let why = if changes.is_empty() {
            "reloaded: nothing changed".to_string()
        } else {
            format!("reloaded: {}", changes.join("; "))
        };
        draft.apply(Event::Reloaded(Box::new(Reload {
            pinned: pin,
            test_baseline,
            protected_files: new_protected,
            check_resolution: check_resolution.clone(),
            why,
        })));
        reloaded = Ok((old, changes));
        Ok::<_, CtlError>(())
    })?;
    crate::driver::told(changed);
    let (old, changes) = match reloaded {
        Ok(reloaded) => reloaded,
        Err(why) => return no_loop(out, why),
    };
    say_reloaded(old.is_none(), &changes, out)
}

/// The loop's test baseline `kept` for the verify commands `config` still
/// has, with `taken` (the new commands') added, each said in `changes`.
fn baseline_now(
    kept: &[CommandCounts],
    config: &Config,
    taken: Vec<CommandCounts>,
    changes: &mut Vec<String>,
) -> Vec<CommandCounts> {
    let verify_now: Vec<&str> = config
        .completion
        .verify
        .iter()
        .map(|v| v.command.as_str())
        .collect();
    let mut baseline: Vec<CommandCounts> = kept
        .iter()
        .filter(|b| verify_now.contains(&b.command.as_str()))
        .cloned()
        .collect();
    for entry in taken {
        changes.push(format!(
            "test baseline of `{}` taken now: {}",
            entry.command,
            entry.counts.describe()
        ));
        baseline.push(entry);
    }
    baseline
}

/// What a reload measures outside the lock (the commands take their
/// time) for the loop `before` (`None`: none live).
struct Measured {
    /// The test baseline of each verify command that is new.
    new_baseline: Vec<ralph_core::observe::test_counts::CommandCounts>,
    /// A new snapshot, when protectedPaths changed (`Some(None)`: none now),
    /// as the `Reload` event carries it.
    #[allow(clippy::option_option)]
    new_protected: Option<Option<ralph_core::observe::protected::ProtectedSnapshot>>,
    /// The checks whose resolution is recorded: the verify commands and
    /// those recorded besides them (a formula's gates).
    checks: Vec<ralph_core::observe::verify::VerifyCommand>,
    /// How they resolve now, the person's to adopt.
    check_resolution: Option<ralph_core::observe::resolved::ResolvedChecks>,
}

/// Measures what judges a claim besides the config: a verify command
/// that is new gets its test baseline now, and changed protectedPaths a
/// new snapshot. Unchanged commands keep the start's baseline, taken
/// before the agent worked.
fn measure(
    paths: &ProjectPaths,
    config: &Config,
    before: Option<&ralph_core::judge::state::LoopState>,
) -> Result<Measured, CtlError> {
    let known: Vec<String> = before
        .iter()
        .flat_map(|s| s.test_baseline.iter().map(|b| b.command.clone()))
        .collect();
    let mut new_commands = config.clone();
    new_commands
        .completion
        .verify
        .retain(|v| !known.contains(&v.command));
    let new_baseline = match before {
        // A running loop is not stopped: a check that cannot run is said.
        Some(_) => crate::driver::start::test_baseline(paths, &new_commands, true)?,
        None => Vec::new(),
    };
    let old_patterns = before
        .and_then(|s| s.protected_files.as_ref())
        .map(|p| p.patterns.clone())
        .unwrap_or_default();
    let new_protected = (before.is_some() && old_patterns != config.completion.protected_paths)
        .then(|| crate::driver::start::protected_files(paths, config))
        .transpose()?;

    // The checks as they resolve now, the person's to adopt: the verify
    // commands and those recorded besides them (a formula's gates).
    let mut checks = config.completion.verify.clone();
    for recorded in before
        .iter()
        .filter_map(|s| s.check_resolution.as_ref())
        .flat_map(|r| &r.commands)
    {
        if !checks.iter().any(|c| c.command == recorded.command) {
            checks.push(ralph_core::observe::verify::VerifyCommand {
                name: "gate".into(),
                command: recorded.command.clone(),
                timeout_seconds: 0,
                network: false,
            });
        }
    }
    let walls = ralph_core::engine::check_walls(&paths.root, &paths.root, config.sandbox.walls());
    let check_resolution =
        before.map(|_| ralph_core::observe::resolved::resolve(&paths.root, &checks, None, &walls));
    Ok(Measured {
        new_baseline,
        new_protected,
        checks,
        check_resolution,
    })
}

/// Says what the reload changed on `out` (`unpinned`: the loop had no
/// pin before).
fn say_reloaded(unpinned: bool, changes: &[String], out: &mut dyn Write) -> CmdResult {
    let mut text = String::new();
    if unpinned {
        text.push_str("The loop had no pin (it was started by an older ralph).\n");
    }
    if changes.is_empty() {
        text.push_str("Reloaded: nothing changed; the loop goes on with the same config.\n");
    } else {
        text.push_str("Reloaded; from the next stop the loop decides by:\n");
        for change in changes {
            text.push_str(&format!("  {change}\n"));
        }
    }
    // The changes quote the config files, which the agent can write.
    let text = ralph_core::text::printable(&text);
    super::written(
        out.write_all(text.as_bytes()).and_then(|()| out.flush()),
        exit_codes::OK,
    )
}

/// A gate's result is found by its name among a claim's checks, so a gate
/// may not share a name with a `verify` command (as `run` checks).
fn check_gate_names(formula: &formula::Formula, config: &Config) -> Result<(), CtlError> {
    for step in &formula.steps {
        for gate in &step.gates {
            if config.completion.verify.iter().any(|v| v.name == gate.name) {
                return Err(CtlError::BadArgument(format!(
                    "gate {:?} of step {:?} in {} has the name of a verify command in config.json: \
                     rename one of them; the loop keeps its pin",
                    gate.name,
                    step.id,
                    formula.file.display()
                )));
            }
        }
    }
    Ok(())
}

/// What differs between two pins, one line per key (`key: old → new`), the
/// per-user file's keys marked, the formula in one line.
pub(crate) fn describe_changes(old: Option<&Pinned>, new: &Pinned) -> Vec<String> {
    let mut lines = Vec::new();
    let old_layers = old.map(Pinned::layers).unwrap_or_default();
    let files = [
        ("", &old_layers.project, &new.config),
        ("(per-user defaults) ", &old_layers.user, &new.user_config),
    ];
    for (label, before, after) in files {
        let before = object(before.as_deref());
        let after = object(after.as_deref());
        let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
        keys.sort();
        keys.dedup();
        for key in keys {
            let (b, a) = (before.get(key), after.get(key));
            if b != a {
                lines.push(format!("{label}{key}: {} → {}", shown(b), shown(a)));
            }
        }
    }
    let old_formula = old.and_then(|p| p.formula.as_ref());
    if let Some(formula) = &new.formula
        && old_formula.map(|f| &f.digest) != Some(&formula.digest)
    {
        lines.push(format!(
            "formula {} ({}): {} → {}",
            formula.name,
            formula.file,
            old_formula.map_or("(none)", |f| f.digest.as_str()),
            formula.digest
        ));
    }
    lines
}

/// A config text's keys (empty when there is none; it was checked).
fn object(text: Option<&str>) -> Map<String, Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default()
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "(unset)".to_string(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(project: Option<&str>, user: Option<&str>) -> Pinned {
        Pinned::of(
            &FileLayers {
                project: project.map(str::to_string),
                user: user.map(str::to_string),
            },
            ralph_core::time::Timestamp::from_secs(0),
        )
    }

    #[test]
    fn changes_are_listed_key_by_key() {
        let cases: &[(Option<&str>, Option<&str>, &[&str])] = &[
            (Some("{}"), Some("{}"), &[]),
            (Some(r#"{"a": 1}"#), Some(r#"{ "a" : 1 }"#), &[]),
            (
                Some(r#"{"maxIterations": 5}"#),
                Some(r#"{"maxIterations": 8}"#),
                &["maxIterations: 5 → 8"],
            ),
            (
                Some(r#"{"verify": [{"name": "t", "command": "false"}]}"#),
                Some(r#"{"notify": "n"}"#),
                &[
                    "notify: (unset) → \"n\"",
                    "verify: [{\"name\":\"t\",\"command\":\"false\"}] → (unset)",
                ],
            ),
            (
                None,
                Some(r#"{"completionMode": "dual"}"#),
                &["completionMode: (unset) → \"dual\""],
            ),
        ];
        for (before, after, expected) in cases {
            let lines = describe_changes(Some(&pin(*before, None)), &pin(*after, None));
            assert_eq!(lines, *expected, "{before:?} → {after:?}");
        }
        let lines = describe_changes(None, &pin(None, Some(r#"{"breakerPatience": 2}"#)));
        assert_eq!(lines, ["(per-user defaults) breakerPatience: (unset) → 2"]);
    }
}
