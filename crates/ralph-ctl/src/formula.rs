//! Formulas: multi-step runs (`ralph-ctl run --formula NAME`). A formula in
//! `.claude/ralph/formulas/NAME.yaml` lists steps, each a fresh-context loop
//! with its own model, prompt, autofix command and gates; the steps run in
//! order in one loop, so the breaker, budgets, supervision and the log span
//! the whole run. This module reads and checks a formula: everything wrong
//! with it is refused before anything runs, naming the file, the line and
//! the fix. YAML is read with serde-saphyr (panic-free, maintained, and its
//! errors carry the line).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use ralph_core::judge::state::{FormulaRun, GateRun, StepRun};
use ralph_core::observe::verify::VerifyCommand;
use ralph_core::paths::ProjectPaths;
use ralph_core::pin::{Changed, PinnedFormula};
use serde::Deserialize;
use serde_saphyr::Spanned;

/// Folder (relative to the project root) holding the formulas.
pub(crate) const FORMULAS_DIR: &str = ".claude/ralph/formulas";
/// A gate's timeout when the formula gives none, in seconds.
pub(crate) const DEFAULT_GATE_TIMEOUT_SECS: u32 = 600;
/// Failures a gate allows when the formula gives no `retries`.
pub(crate) const DEFAULT_GATE_RETRIES: u32 = 3;
/// Longest accepted gate timeout, in seconds.
pub(crate) const GATE_TIMEOUT_LIMIT: u32 = 7_200;
/// The model aliases the client accepts.
const MODEL_ALIASES: &[&str] = &["opus", "sonnet", "haiku", "opusplan", "default"];

/// A formula, checked: ready to run (and pinned as it is, in JSON, when
/// a run starts: [`pin`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub(crate) struct Formula {
    /// Its name (the file's stem, or its `name`).
    pub(crate) name: String,
    /// The file it was read from.
    pub(crate) file: PathBuf,
    /// Its steps, in order (at least one).
    pub(crate) steps: Vec<Step>,
}

/// One step of a formula.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub(crate) struct Step {
    /// Its id, unique in the formula.
    pub(crate) id: String,
    /// The model its client runs (`--model`), when it names one.
    pub(crate) model: Option<String>,
    /// Its task: the prompt, or the prompt file's text.
    pub(crate) prompt: String,
    /// The most iterations it may take (the loop's cap bounds the run).
    pub(crate) max_iterations: Option<u32>,
    /// A command run after each of its iterations, before the gates.
    pub(crate) autofix: Option<String>,
    /// Its gates, checked on each completion claim (with the project's `verify`).
    pub(crate) gates: Vec<Gate>,
    /// Whether the project's `verify` (config.json) also gates its claims:
    /// `verify: false` for a step whose work comes before the tests can pass
    /// (a plan). Never false for the last step, which decides `complete`.
    #[serde(default = "run_project_verify")]
    pub(crate) verify: bool,
}

/// A step runs the project's `verify` unless it says otherwise (and pins
/// from before the key have it).
fn run_project_verify() -> bool {
    true
}

/// A step's gate: a command that must pass for the step to end.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, Deserialize)]
pub(crate) struct Gate {
    /// Its name, shown with its result.
    pub(crate) name: String,
    /// The command (run by `sh -c` in the folder the iteration worked in).
    pub(crate) command: String,
    /// How long it may run.
    pub(crate) timeout_seconds: u32,
    /// Failures allowed before the run ends `gate_failed`.
    pub(crate) retries: u32,
}

impl Gate {
    /// The gate as a verification command.
    pub(crate) fn as_verify(&self) -> VerifyCommand {
        VerifyCommand {
            name: self.name.clone(),
            command: self.command.clone(),
            timeout_seconds: self.timeout_seconds,
            network: false,
        }
    }
}

impl Formula {
    /// A new run of this formula: every step at its start.
    pub(crate) fn new_run(&self) -> FormulaRun {
        FormulaRun {
            name: self.name.clone(),
            step: 0,
            steps: self
                .steps
                .iter()
                .map(|step| StepRun {
                    id: step.id.clone(),
                    model: step.model.clone(),
                    gates: step
                        .gates
                        .iter()
                        .map(|g| GateRun {
                            name: g.name.clone(),
                            retries: g.retries,
                            ..GateRun::default()
                        })
                        .collect(),
                    ..StepRun::default()
                })
                .collect(),
        }
    }
}

/// Everything wrong with a formula, with where and how to fix it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FormulaError {
    /// No such formula.
    #[error("no formula {name:?}: {} does not exist{}", file.display(), known_list(known))]
    Missing {
        /// The name asked for.
        name: String,
        /// Where it was looked for.
        file: PathBuf,
        /// The formulas there are.
        known: Vec<String>,
    },
    /// The name cannot be a file name.
    #[error(
        "{0:?} is not a formula name: use letters, digits, '-' and '_' (the file .claude/ralph/formulas/NAME.yaml)"
    )]
    BadName(String),
    /// It cannot be read.
    #[error("cannot read the formula {}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is wrong.
    #[error("formula {}{}: {problem}", file.display(), line.map(|l| format!(", line {l}")).unwrap_or_default())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Where, when known.
        line: Option<u64>,
        /// What is wrong, and the fix.
        problem: String,
    },
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "; `ralph-ctl init --formula feature` writes a starter one".into()
    } else {
        format!("; the formulas there: {}", known.join(", "))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FormulaFile {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    steps: Option<Spanned<Vec<Spanned<StepFile>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StepFile {
    id: Spanned<String>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    prompt_file: Option<Spanned<String>>,
    #[serde(default)]
    max_iterations: Option<Spanned<u32>>,
    #[serde(default)]
    autofix: Option<String>,
    #[serde(default)]
    gates: Vec<Spanned<GateFile>>,
    #[serde(default)]
    verify: Option<Spanned<bool>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GateFile {
    name: String,
    command: String,
    #[serde(default)]
    timeout_seconds: Option<u32>,
    #[serde(default)]
    retries: Option<u32>,
}

/// The formula file of `name` in the project.
pub(crate) fn file_of(paths: &ProjectPaths, name: &str) -> Result<PathBuf, FormulaError> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(FormulaError::BadName(name.to_string()));
    }
    Ok(paths.root.join(FORMULAS_DIR).join(format!("{name}.yaml")))
}

/// The pin of `formula` (its content as the run uses it, prompt files'
/// texts included), which the loop decides by from its start.
pub(crate) fn pin(paths: &ProjectPaths, formula: &Formula) -> PinnedFormula {
    let file = formula
        .file
        .strip_prefix(&paths.root)
        .unwrap_or(&formula.file);
    // A Formula is strings and numbers: it always has a JSON form.
    let content = serde_json::to_value(formula).unwrap_or_default();
    PinnedFormula::new(&formula.name, &file.display().to_string(), content)
}

/// The name `--formula` took for the pinned formula: its file's stem
/// (`feat` for `formulas/feat.yaml`), never the `name:` inside it, which may
/// be another formula's file.
pub(crate) fn stem_of(pinned: &PinnedFormula) -> String {
    Path::new(&pinned.file)
        .file_stem()
        .map_or_else(|| pinned.name.clone(), |s| s.to_string_lossy().into_owned())
}

/// The formula a loop is pinned to.
pub(crate) fn from_pin(pinned: &PinnedFormula) -> Result<Formula, FormulaError> {
    serde_json::from_value(pinned.content.clone()).map_err(|e| FormulaError::Invalid {
        file: PathBuf::from(&pinned.file),
        line: None,
        problem: format!(
            "the loop's pinned copy of it cannot be read ({e}); `ralph-ctl reload` pins it again"
        ),
    })
}

/// The pinned formula's file, when it now differs from the pin (by the
/// content it loads to: its text and its prompt files); one that no longer
/// loads is a change with its problem.
pub(crate) fn changes(paths: &ProjectPaths, pinned: &PinnedFormula) -> Option<Changed> {
    let (digest, problem) = match load(paths, &stem_of(pinned)) {
        Ok(formula) => (pin(paths, &formula).digest, None),
        Err(e) => ("unreadable".to_string(), Some(e.to_string())),
    };
    (digest != pinned.digest).then(|| Changed {
        file: pinned.file.clone(),
        digest,
        problem,
    })
}

/// The most a formula file may hold.
pub(crate) const MAX_FORMULA_BYTES: u64 = 256 * 1024;
/// The most a step's `promptFile` may hold.
pub(crate) const MAX_PROMPT_FILE_BYTES: u64 = 256 * 1024;

/// A text file of at most `limit` bytes: bounded, never waiting on a FIFO
/// or reading a device (`ralph_core::files::read_bounded`), UTF-8.
fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    use ralph_core::files::{Bounded, read_bounded};
    match read_bounded(path, limit)? {
        Bounded::Missing => Err(std::io::ErrorKind::NotFound.into()),
        Bounded::TooLarge => Err(std::io::Error::other(format!(
            "it is larger than the {} KiB it may be",
            limit / 1024
        ))),
        Bounded::Bytes(bytes) => {
            String::from_utf8(bytes).map_err(|_| std::io::Error::other("it is not UTF-8 text"))
        }
    }
}

/// The project a formula file belongs to: `.claude/ralph/formulas/NAME.yaml`
/// lies four levels below it (a file elsewhere: its own folder, see `parse`).
fn project_of(file: &Path) -> Option<&Path> {
    file.ancestors().nth(4)
}

/// Reads and checks the formula `name` of the project.
pub(crate) fn load(paths: &ProjectPaths, name: &str) -> Result<Formula, FormulaError> {
    let file = file_of(paths, name)?;
    let text = match read_text(&file, MAX_FORMULA_BYTES) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut known: Vec<String> = std::fs::read_dir(paths.root.join(FORMULAS_DIR))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".yaml").map(str::to_string)
                })
                .collect();
            known.sort();
            return Err(FormulaError::Missing {
                name: name.to_string(),
                file,
                known,
            });
        }
        Err(source) => return Err(FormulaError::Read { file, source }),
    };
    parse(&text, &file, name)
}

/// Checks the formula text read from `file`; `stem` names it when it has
/// no `name`. Prompt files are read relative to the formula's folder.
pub(crate) fn parse(text: &str, file: &Path, stem: &str) -> Result<Formula, FormulaError> {
    let invalid = |line: Option<u64>, problem: String| FormulaError::Invalid {
        file: file.to_path_buf(),
        line: line.filter(|l| *l > 0),
        problem,
    };
    let parsed: FormulaFile = serde_saphyr::from_str(text).map_err(|e| {
        let line = e.location().map(|l| l.line());
        invalid(line, yaml_problem(&e.to_string()))
    })?;
    let Some(steps) = parsed.steps.filter(|s| !s.value.is_empty()) else {
        return Err(invalid(
            None,
            "no steps: add `steps:`, a list of steps each with an `id` and a `prompt` (or `promptFile`)".into(),
        ));
    };
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    // Where the step just read said `verify: false`.
    let mut last_verify_line = None;
    for spanned in steps.value {
        let line = spanned.referenced.line();
        let step = spanned.value;
        let id = step.id.value.trim().to_string();
        if id.is_empty() {
            return Err(invalid(
                Some(step.id.referenced.line()),
                "a step's `id` is empty: give each step a short name such as plan or test".into(),
            ));
        }
        if !seen.insert(id.clone()) {
            return Err(invalid(
                Some(step.id.referenced.line()),
                format!("the step id {id:?} is used twice: give each step an id of its own"),
            ));
        }
        let model = match step.model {
            Some(model) => {
                let name = model.value.trim().to_string();
                if !valid_model(&name) {
                    return Err(invalid(
                        Some(model.referenced.line()),
                        format!(
                            "step {id:?}: model {name:?} is not a Claude model: use opus, sonnet, haiku, or a full model name such as claude-sonnet-4-5"
                        ),
                    ));
                }
                Some(name)
            }
            None => None,
        };
        let prompt = step_prompt(&id, step.prompt, step.prompt_file, line, file, &invalid)?;
        if prompt.trim().is_empty() {
            return Err(invalid(
                Some(line),
                format!("step {id:?}: its prompt is empty"),
            ));
        }
        if let Some(max) = &step.max_iterations
            && max.value == 0
        {
            return Err(invalid(
                Some(max.referenced.line()),
                format!("step {id:?}: maxIterations 0: give a whole number from 1 up"),
            ));
        }
        let gates = step_gates(&id, step.gates, &invalid)?;
        out.push(Step {
            id,
            model,
            prompt,
            max_iterations: step.max_iterations.map(|m| m.value),
            autofix: step.autofix.filter(|a| !a.trim().is_empty()),
            gates,
            verify: step.verify.as_ref().is_none_or(|v| v.value),
        });
        last_verify_line = step
            .verify
            .filter(|v| !v.value)
            .map(|v| v.referenced.line());
    }
    if let (Some(line), Some(last)) = (last_verify_line, out.last()) {
        return Err(invalid(
            Some(line),
            format!(
                "step {:?} is the last: the run is `complete` once it passes, so the project's \
                 verify gates it; remove its `verify: false`",
                last.id
            ),
        ));
    }
    Ok(Formula {
        name: parsed
            .name
            .filter(|n| !n.trim().is_empty())
            .unwrap_or_else(|| stem.to_string()),
        file: file.to_path_buf(),
        steps: out,
    })
}

/// How [`parse`] says what is wrong at a line of the formula.
type Invalid<'a> = dyn Fn(Option<u64>, String) -> FormulaError + 'a;

/// A step's prompt: its `prompt`, or its `promptFile` read (inside the
/// project only, relative to the formula's folder); one of the two.
fn step_prompt(
    id: &str,
    prompt: Option<String>,
    prompt_file: Option<Spanned<String>>,
    line: u64,
    file: &Path,
    invalid: &Invalid<'_>,
) -> Result<String, FormulaError> {
    let folder = file.parent().unwrap_or(Path::new("."));
    Ok(match (prompt, prompt_file) {
        (Some(_), Some(f)) => {
            return Err(invalid(
                Some(f.referenced.line()),
                format!("step {id:?} has both `prompt` and `promptFile`: keep one"),
            ));
        }
        (Some(prompt), None) => prompt,
        (None, Some(f)) => {
            let path = folder.join(&f.value);
            let unreadable = |why: String| {
                invalid(
                    Some(f.referenced.line()),
                    format!(
                        "step {id:?}: its promptFile {} cannot be read ({why}); the path is taken from the formula's folder",
                        path.display()
                    ),
                )
            };
            // Inside the project only: a formula may come with the
            // project, and must not read what lies outside it.
            let inside = std::fs::canonicalize(&path).map_err(|e| unreadable(e.to_string()))?;
            let project = project_of(file)
                .or(Some(folder))
                .and_then(|p| std::fs::canonicalize(p).ok());
            if Path::new(&f.value).is_absolute() || !project.is_some_and(|p| inside.starts_with(p))
            {
                return Err(invalid(
                    Some(f.referenced.line()),
                    format!(
                        "step {id:?}: its promptFile {:?} is outside the project: give a path inside it, relative to the formula's folder",
                        f.value
                    ),
                ));
            }
            read_text(&inside, MAX_PROMPT_FILE_BYTES).map_err(|e| unreadable(e.to_string()))?
        }
        (None, None) => {
            return Err(invalid(
                Some(line),
                format!(
                    "step {id:?} has no `prompt` (or `promptFile`): say what the step is to do"
                ),
            ));
        }
    })
}

/// A step's gates, each with a name of its own, a command and a timeout
/// in range.
fn step_gates(
    id: &str,
    files: Vec<Spanned<GateFile>>,
    invalid: &Invalid<'_>,
) -> Result<Vec<Gate>, FormulaError> {
    let mut gate_names = HashSet::new();
    let mut gates = Vec::new();
    for gate in files {
        let at = gate.referenced.line();
        let gate = gate.value;
        if gate.name.trim().is_empty() || gate.command.trim().is_empty() {
            return Err(invalid(
                Some(at),
                format!("step {id:?}: a gate needs a `name` and a `command`"),
            ));
        }
        if !gate_names.insert(gate.name.clone()) {
            return Err(invalid(
                Some(at),
                format!(
                    "step {id:?}: two gates are named {:?}: name each gate once",
                    gate.name
                ),
            ));
        }
        let timeout = gate.timeout_seconds.unwrap_or(DEFAULT_GATE_TIMEOUT_SECS);
        if !(1..=GATE_TIMEOUT_LIMIT).contains(&timeout) {
            return Err(invalid(
                Some(at),
                format!(
                    "step {id:?}: gate {:?} timeoutSeconds {timeout}: give 1 to {GATE_TIMEOUT_LIMIT}",
                    gate.name
                ),
            ));
        }
        gates.push(Gate {
            name: gate.name,
            command: gate.command,
            timeout_seconds: timeout,
            retries: gate.retries.unwrap_or(DEFAULT_GATE_RETRIES),
        });
    }
    Ok(gates)
}

/// The gate name the starter gives the tests it runs itself: not one `init`
/// gives a verify command, so the two never clash.
pub(crate) const STARTER_TEST_GATE: &str = "formula-tests";

/// The starter formula `init --formula NAME` writes: the template, named,
/// and with `test_command` as its last step's gate when the project has no
/// `verify` of its own to gate the steps (with one, the gate would only run
/// the same tests twice).
pub(crate) fn starter(name: &str, test_command: Option<&str>) -> String {
    let gates = match test_command {
        Some(command) => format!(
            "gates:\n      - {{ name: {STARTER_TEST_GATE}, command: {}, timeoutSeconds: 600 }}",
            serde_json::Value::from(command)
        ),
        None => "# The project's verify (config.json) gates this step.".to_string(),
    };
    crate::assets::FORMULA_TEMPLATE
        .replace("--formula feature", &format!("--formula {name}"))
        .replacen("name: feature", &format!("name: {name}"), 1)
        .replace("# TEST GATES", &gates)
}

/// A model the client can be given: an alias, or a full Claude model name.
fn valid_model(name: &str) -> bool {
    MODEL_ALIASES.contains(&name)
        || (name.starts_with("claude-")
            && name.len() > "claude-".len()
            && name.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.' | '[' | ']')
            }))
}

/// serde-saphyr's message, with the fix for the common case of a key the
/// formula does not know.
fn yaml_problem(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message).trim();
    // The line is said already: drop "error: line 4 column 5: ".
    let first = first.strip_prefix("error: ").unwrap_or(first);
    let first = match first.split_once(": ") {
        Some((at, rest)) if at.starts_with("line ") && at.contains(" column ") => rest,
        _ => first,
    };
    if first.contains("unknown field") {
        format!(
            "{first}; a formula has `name` and `steps`, a step `id`, `model`, `prompt` or `promptFile`, \
             `maxIterations`, `autofix`, `gates` and `verify`, a gate `name`, `command`, `timeoutSeconds` and `retries`"
        )
    } else {
        first.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assets::FORMULA_TEMPLATE as STARTER;

    fn check(text: &str) -> Result<Formula, FormulaError> {
        parse(text, Path::new("/p/.claude/ralph/formulas/f.yaml"), "f")
    }

    fn refused(text: &str) -> String {
        check(text).unwrap_err().to_string()
    }

    #[test]
    fn the_starter_formula_is_valid_and_runs_three_models() {
        let formula = check(STARTER).unwrap();
        let models: Vec<_> = formula.steps.iter().map(|s| s.model.as_deref()).collect();
        assert_eq!(models, [Some("opus"), Some("sonnet"), Some("haiku")]);
        assert_eq!(formula.steps[2].max_iterations, Some(5));
        let run = formula.new_run();
        assert_eq!(run.position(), "step 1/3 plan");
        // The plan is not held to the tests; the steps after it are.
        let verified: Vec<_> = formula.steps.iter().map(|s| s.verify).collect();
        assert_eq!(verified, [false, true, true]);
    }

    #[test]
    fn the_written_starter_runs_the_given_tests_or_leaves_them_to_verify() {
        let quoted = r#"python3 -m pytest -q -k "not slow""#;
        let formula = check(&starter("ship", Some(quoted))).unwrap();
        assert_eq!(formula.name, "ship");
        let gates = &formula.steps[2].gates;
        assert_eq!(gates.len(), 1);
        assert_eq!(gates[0].name, STARTER_TEST_GATE);
        assert_eq!(gates[0].command, quoted, "quoted as YAML reads it back");
        assert!(starter("ship", None).contains("--formula ship"));
        let formula = check(&starter("ship", None)).unwrap();
        assert!(formula.steps.iter().all(|s| s.gates.is_empty()));
    }

    #[test]
    fn the_last_step_always_runs_the_project_s_verify() {
        let text = "steps:\n  - id: a\n    prompt: x\n    verify: false\n  - id: b\n    prompt: y\n    verify: false\n";
        let problem = refused(text);
        assert!(problem.contains("line 7"), "{problem}");
        assert!(problem.contains("step \"b\" is the last"), "{problem}");
        let formula = check(
            "steps:\n  - id: a\n    prompt: x\n    verify: false\n  - id: b\n    prompt: y\n",
        )
        .unwrap();
        assert!(!formula.steps[0].verify && formula.steps[1].verify);
    }

    #[test]
    fn each_mistake_is_named_with_its_line_and_fix() {
        let cases = [
            (
                "steps:\n  - id: a\n    prompt: x\n    modle: opus\n",
                "line 4",
                "unknown field",
            ),
            ("name: x\n", "no steps", ""),
            ("steps: []\n", "no steps", ""),
            (
                "steps:\n  - id: a\n    prompt: x\n  - id: a\n    prompt: y\n",
                "line 4",
                "used twice",
            ),
            (
                "steps:\n  - id: a\n    promptFile: nowhere.md\n",
                "line 3",
                "cannot be read",
            ),
            (
                "steps:\n  - id: a\n    prompt: x\n    model: gpt-4\n",
                "line 4",
                "not a Claude model",
            ),
            (
                "steps:\n  - id: a\n    model: opus\n",
                "line 2",
                "no `prompt`",
            ),
            (
                "steps:\n  - id: a\n    prompt: x\n    gates:\n      - { name: t, command: '' }\n",
                "line 5",
                "needs a `name` and a `command`",
            ),
            ("steps:\n  - id: a\n    prompt: [x\n", "line", ""),
        ];
        for (text, at, what) in cases {
            let err = refused(text);
            assert!(
                err.starts_with("formula /p/.claude/ralph/formulas/f.yaml")
                    && err.contains(at)
                    && err.contains(what),
                "{text:?} → {err}"
            );
        }
    }

    #[test]
    fn a_prompt_file_is_read_from_the_formula_s_folder() {
        let dir = crate::testdir::new("formula");
        std::fs::write(dir.path().join("plan.md"), "Plan it.\n").unwrap();
        let formula = parse(
            "steps:\n  - id: plan\n    promptFile: plan.md\n",
            &dir.path().join("f.yaml"),
            "f",
        )
        .unwrap();
        assert_eq!(formula.steps[0].prompt, "Plan it.\n");
        assert_eq!(formula.name, "f");
    }

    #[test]
    fn formula_and_prompt_files_are_bounded_fifo_safe_and_inside_the_project() {
        let dir = crate::testdir::new("formula-reads");
        let paths = ProjectPaths::new(dir.path());
        let folder = dir.path().join(FORMULAS_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        let step =
            |prompt_file: &str| format!("steps:\n  - id: a\n    promptFile: {prompt_file}\n");
        let refused = |text: String| {
            std::fs::write(folder.join("f.yaml"), text).unwrap();
            load(&paths, "f").unwrap_err().to_string()
        };
        for outside in [
            "/dev/zero",
            "/etc/passwd",
            "../../../../../../../../etc/passwd",
        ] {
            let err = refused(step(outside));
            assert!(err.contains("outside the project"), "{outside}: {err}");
        }
        std::fs::write(dir.path().join("big.md"), "x".repeat(300 * 1024)).unwrap();
        let err = refused(step("../../../big.md"));
        assert!(err.contains("larger than the 256 KiB"), "{err}");
        std::fs::write(dir.path().join("ok.md"), "Do it.\n").unwrap();
        std::fs::write(folder.join("f.yaml"), step("../../../ok.md")).unwrap();
        assert_eq!(load(&paths, "f").unwrap().steps[0].prompt, "Do it.\n");
        // A FIFO as the formula or as a prompt file: refused at once, not waited on.
        let fifo = folder.join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let started = std::time::Instant::now();
        let err = load(&paths, "fifo").unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let err = refused(step("fifo.yaml"));
        assert!(err.contains("not a regular file"), "{err}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        std::fs::write(folder.join("big.yaml"), "#".repeat(300 * 1024)).unwrap();
        let err = load(&paths, "big").unwrap_err().to_string();
        assert!(err.contains("larger than the 256 KiB"), "{err}");
    }

    #[test]
    fn names_that_are_not_files_are_refused() {
        let paths = ProjectPaths::new("/p");
        assert!(file_of(&paths, "../etc").is_err());
        assert!(file_of(&paths, "").is_err());
        assert_eq!(
            file_of(&paths, "feature").unwrap(),
            Path::new("/p/.claude/ralph/formulas/feature.yaml")
        );
    }

    #[test]
    fn a_pinned_formula_keeps_its_steps_and_prompt_files_and_changes_are_found() {
        let dir = crate::testdir::new("formula-pin");
        let paths = ProjectPaths::new(dir.path());
        let folder = paths.root.join(FORMULAS_DIR);
        std::fs::create_dir_all(&folder).unwrap();
        let file = folder.join("f.yaml");
        std::fs::write(
            &file,
            "steps:\n  - id: a\n    promptFile: a.md\n    gates:\n      - { name: g, command: 'false' }\n",
        )
        .unwrap();
        std::fs::write(folder.join("a.md"), "Do a.").unwrap();
        let formula = load(&paths, "f").unwrap();
        let pinned = pin(&paths, &formula);
        assert_eq!(pinned.file, ".claude/ralph/formulas/f.yaml");
        assert_eq!(from_pin(&pinned).unwrap(), formula);
        assert_eq!(changes(&paths, &pinned), None);
        // A prompt file's text is the formula's content too.
        std::fs::write(folder.join("a.md"), "Do something else.").unwrap();
        let changed = changes(&paths, &pinned).expect("a prompt file changed");
        assert_eq!(changed.problem, None);
        assert_eq!(from_pin(&pinned).unwrap().steps[0].prompt, "Do a.");
        // A gate rewritten, then a file that no longer loads.
        std::fs::write(folder.join("a.md"), "Do a.").unwrap();
        std::fs::write(
            &file,
            std::fs::read_to_string(&file)
                .unwrap()
                .replace("'false'", "'true'"),
        )
        .unwrap();
        assert!(changes(&paths, &pinned).is_some());
        std::fs::write(&file, "steps: [").unwrap();
        let broken = changes(&paths, &pinned).expect("a broken formula is a change");
        assert_eq!(broken.digest, "unreadable");
        assert!(broken.problem.unwrap().contains("f.yaml"));
    }
}
