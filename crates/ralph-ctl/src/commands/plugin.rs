//! What the Claude Code plugin's commands run: `/ralph-loop` expands to
//! `ralph-ctl loop-start` (a loop bound to the current session, with the
//! task given, on the same state, engine and gates as any other), started
//! from the prompt's hook or the command's text. (`/cancel-ralph` expands to
//! `ralph-ctl cancel`: `commands::cancel`.) Their output is written into the
//! command's text, so it is said to the agent (and the person) plainly.

use std::io::Write;

use ralph_core::exit_codes;
use ralph_core::judge::state::Status;
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;

use crate::driver::command::{BLOCK_CAP_ENV, block_cap};
use crate::driver::start;
use crate::error::CmdResult;
use crate::error::CtlError;

/// The session id Claude Code 2.1 and later gives the commands it runs.
pub(crate) const SESSION_ENV: &str = "CLAUDE_CODE_SESSION_ID";
/// How many blocked stops in a row Claude Code 2.1 allows by default.
pub(crate) const CLIENT_BLOCK_CAP: u32 = 8;

/// What `/ralph-loop` asked for: `ralph-ctl loop-start`'s arguments (its
/// help is the `LoopStartArgs` command's), also what a line typed in the
/// client is read as.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct LoopStartArgs {
    /// The task (the words are joined; --max-iterations and
    /// --completion-promise are found among them too, before the task or
    /// ending the line, as /ralph-loop passes its whole line as one
    /// argument; a value of several words is quoted).
    #[arg(value_name = "TASK", num_args = 0.., trailing_var_arg = true, allow_hyphen_values = true)]
    pub(crate) task: Vec<String>,
    /// The loop's iteration cap (default: maxIterations of the config, 25).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) max_iterations: Option<u32>,
    /// The loop ends when the agent's final message has TEXT on a line of
    /// its own (or `<promise>TEXT</promise>`); default: the config's signal.
    #[arg(long, value_name = "TEXT")]
    pub(crate) completion_promise: Option<String>,
    /// The session to bind the loop to (default: `CLAUDE_CODE_SESSION_ID`).
    #[arg(long, value_name = "ID")]
    pub(crate) session: Option<String>,
    /// Exit 0 even when the loop is not started: the output says why (for
    /// /ralph-loop, whose client drops the command's text on a failure).
    #[arg(long)]
    pub(crate) report: bool,
    /// Read the task (and its flags) from stdin too (a task from a file
    /// or a pipe).
    #[arg(long, conflicts_with_all = ["hook", "started"])]
    pub(crate) stdin: bool,
    /// Run as the plugin's `UserPromptSubmit` hook: for a prompt that is
    /// /ralph-loop …, start the loop from the line as typed, read from
    /// the hook's JSON on stdin (never through a shell); when it cannot
    /// start, answer the client's block decision with the reason. Any
    /// other prompt is left alone; the exit code is always 0.
    #[arg(long, conflicts_with_all = ["started", "report"])]
    pub(crate) hook: bool,
    /// Say whether the hook started this session's loop, with its task
    /// (what /ralph-loop expands to).
    #[arg(long)]
    pub(crate) started: bool,
    /// Start even though the check (verify) cannot run: making it run is
    /// the task (also read from the /ralph-loop line).
    #[arg(long)]
    pub(crate) check_may_not_run: bool,
}

impl LoopStartArgs {
    /// With `--stdin`, the task's words and then what stdin holds (bounded:
    /// past the task's cap the start is refused anyway).
    pub(crate) fn with_stdin_task(mut self) -> Self {
        if self.stdin {
            let mut text = String::new();
            let limit = 4 * MAX_TASK_BYTES as u64;
            let _ = std::io::Read::read_to_string(
                &mut std::io::Read::take(std::io::stdin(), limit),
                &mut text,
            );
            self.task.push(text);
        }
        self
    }
}

/// `ralph-ctl loop-start`: starts a loop bound to the session, with the
/// task as its prompt; says what it did (or why not) on `out`.
pub(crate) fn loop_start(
    paths: &ProjectPaths,
    request: LoopStartArgs,
    out: &mut dyn Write,
) -> CmdResult {
    let result = open(paths, &request);
    let (text, code) = match result {
        Ok((_, text)) => (text, exit_codes::OK),
        Err(e) => (
            format!(
                "The Ralph loop was NOT started: {e}\nTell the person this; do not start the task as a loop.\n"
            ),
            if request.report {
                exit_codes::OK
            } else {
                e.exit_code()
            },
        ),
    };
    super::written(
        out.write_all(text.as_bytes()).and_then(|()| out.flush()),
        code,
    )
}

/// The flags a `/ralph-loop` line may carry besides its task.
const LOOP_FLAGS: [&str; 3] = [
    "--max-iterations",
    "--completion-promise",
    crate::driver::start::CHECK_MAY_NOT_RUN,
];

/// A `/ralph-loop` line (its words joined by spaces; `--stdin`'s text
/// kept as it came): the task, verbatim (its newlines, lists and code
/// blocks kept), and its flags, read the official plugin's way, from the
/// two ends of the line:
///
/// - before the task: `--max-iterations N`, `--completion-promise VALUE`
///   (or `--flag=VALUE`), VALUE one word or quoted (`'…'` or `"…"`);
/// - after it: the run of flags that ends the line, read from the end
///   backwards, in any order. There a bare promise is one word, or the words
///   up to the next flag when they are written like a signal (no lowercase
///   letter: `--completion-promise ALL DONE`). The run is taken when it
///   starts a line or follows the end of a sentence (`.`, `!`, `?`, `:`, a
///   quote or a bracket), or when each of its flags is written as only a
///   flag is: `--max-iterations` and a number, `--flag=VALUE`, a quoted
///   value, a bare promise written like a signal (`--completion-promise
///   DONE`). Otherwise the flags' names are the task's prose ("Implement
///   the --completion-promise option", "Document --max-iterations 5 in the
///   README"); a flag with no value is written as a flag when other flags
///   are with it (`--max-iterations 6 --completion-promise`).
///
/// A task that is one quoted string loses its quotes. A flag taken without
/// a value, or with a bad one, is an error.
pub(crate) fn parse_words(request: &LoopStartArgs) -> Result<LoopStartArgs, CtlError> {
    let line = request.task.join(" ");
    let mut out = LoopStartArgs {
        task: Vec::new(),
        ..request.clone()
    };
    // Before the task.
    let mut rest = line.as_str();
    while let Some(flag) = flag_at(rest.trim_start(), false) {
        apply_flag(&mut out, flag.name, &flag.value?)?;
        rest = flag.after;
    }
    // After it: the leftmost place from which only flags follow.
    let mut task_end = rest.len();
    for (at, _) in rest.match_indices("--") {
        let before = &rest[..at];
        if !(before.is_empty() || before.ends_with(char::is_whitespace)) {
            continue;
        }
        let ended = before.trim_end_matches([' ', '\t']);
        let sentence_ended = ended.is_empty()
            || ended.ends_with('\n')
            || ended.ends_with(['.', '!', '?', ':', '"', '\'', ')', ']', '`']);
        let mut tail = &rest[at..];
        let mut flags = Vec::new();
        while let Some(flag) = flag_at(tail.trim_start(), true) {
            tail = flag.after;
            flags.push(flag);
        }
        if flags.is_empty() || !tail.trim().is_empty() {
            continue;
        }
        // A flag with no value is named, not used, unless other flags are with it.
        let used = |f: &Flag| f.unlike_prose || (f.value.is_err() && flags.len() > 1);
        if sentence_ended || flags.iter().all(used) {
            for flag in flags {
                apply_flag(&mut out, flag.name, &flag.value?)?;
            }
            task_end = at;
            break;
        }
    }
    let task = unquoted(rest[..task_end].trim());
    if !task.is_empty() {
        out.task.push(task.to_string());
    }
    Ok(out)
}

/// A task given as one quoted string (`"Fix the findings"`, as the official
/// plugin's help writes it) without its quotes; any other text as it is.
fn unquoted(task: &str) -> &str {
    ['"', '\'']
        .into_iter()
        .find_map(|q| {
            let inner = task.strip_prefix(q)?.strip_suffix(q)?;
            (!inner.contains(q)).then_some(inner.trim())
        })
        .unwrap_or(task)
}

/// One flag read from a `/ralph-loop` line.
struct Flag<'a> {
    /// Its name, one of [`LOOP_FLAGS`].
    name: &'static str,
    /// Its value (`Err` when it has none, or an unclosed quote).
    value: Result<String, CtlError>,
    /// Written as only a flag is, never as prose: `--max-iterations` and a
    /// number, `--flag=VALUE`, a quoted value, a bare promise with no
    /// lowercase letter.
    unlike_prose: bool,
    /// What follows it.
    after: &'a str,
}

/// Whether `word` is written like a completion signal: something, and no
/// lowercase letter (`DONE`, `TASK_COMPLETE`).
fn signal_like(word: &str) -> bool {
    !word.is_empty() && !word.chars().any(char::is_lowercase)
}

/// The flag `text` starts with, if any. After the task (`trailing`), a
/// bare promise runs over the words written like a signal up to the next
/// flag or the end of the line; before it, a bare value is one word.
fn flag_at(text: &str, trailing: bool) -> Option<Flag<'_>> {
    let name = LOOP_FLAGS.into_iter().find(|f| {
        text.strip_prefix(f)
            .is_some_and(|r| r.is_empty() || r.starts_with(['=', ' ', '\t', '\n']))
    })?;
    let rest = &text[name.len()..];
    let joined = rest.starts_with('=');
    let rest = rest.strip_prefix('=').unwrap_or_else(|| rest.trim_start());
    let flag = |value, unlike_prose, after| Flag {
        name,
        value,
        unlike_prose,
        after,
    };
    if name == crate::driver::start::CHECK_MAY_NOT_RUN {
        // A switch: no value.
        return Some(flag(Ok(String::new()), true, &text[name.len()..]));
    }
    let missing = || Err(CtlError::BadArgument(format!("{name} needs a value")));
    let Some(first) = rest.chars().next() else {
        return Some(flag(missing(), joined, rest));
    };
    if first == '"' || first == '\'' {
        return Some(match rest[1..].find(first) {
            Some(close) => flag(Ok(rest[1..=close].to_string()), true, &rest[close + 2..]),
            None => flag(
                Err(CtlError::BadArgument(format!(
                    "{name}'s value opens a quote it does not close"
                ))),
                true,
                "",
            ),
        });
    }
    if first.is_whitespace() || LOOP_FLAGS.iter().any(|f| rest.starts_with(f)) {
        return Some(flag(missing(), joined, rest));
    }
    let word_end = |s: &str| s.find(char::is_whitespace).unwrap_or(s.len());
    let mut end = word_end(rest);
    let word = &rest[..end];
    let unlike_prose = joined
        || if name == "--max-iterations" {
            word.parse::<u64>().is_ok()
        } else {
            signal_like(word)
        };
    if trailing && name == "--completion-promise" && signal_like(word) {
        // More words written like a signal, on the same line, up to a flag.
        loop {
            let after = &rest[end..];
            let gap = after.len() - after.trim_start_matches([' ', '\t']).len();
            let next = &after[gap..];
            let next_word = &next[..word_end(next)];
            if next_word.is_empty()
                || !signal_like(next_word)
                || LOOP_FLAGS.iter().any(|f| next_word.starts_with(f))
            {
                break;
            }
            end += gap + next_word.len();
        }
    }
    Some(flag(
        Ok(rest[..end].to_string()),
        unlike_prose,
        &rest[end..],
    ))
}

/// Sets what `flag` asks for, its value checked.
fn apply_flag(out: &mut LoopStartArgs, flag: &str, value: &str) -> Result<(), CtlError> {
    if flag == "--max-iterations" {
        let n = value
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=ralph_core::judge::config::MAX_ITERATIONS_LIMIT).contains(n))
            .ok_or_else(|| {
                CtlError::BadArgument(format!(
                    "--max-iterations {value:?} is invalid: a whole number from 1 to {}",
                    ralph_core::judge::config::MAX_ITERATIONS_LIMIT
                ))
            })?;
        out.max_iterations = Some(n);
    } else if flag == crate::driver::start::CHECK_MAY_NOT_RUN {
        out.check_may_not_run = true;
    } else {
        out.completion_promise = Some(value.to_string());
    }
    Ok(())
}

/// Starts the loop `request` asks for: what the line was read as (one line,
/// for the person) and the whole started message.
fn open(paths: &ProjectPaths, request: &LoopStartArgs) -> Result<(String, String), CtlError> {
    let request = &parse_words(request)?;
    let session = session_of(request.session.clone())?;
    let task = request.task.join(" ").trim().to_string();
    if task.is_empty() {
        return Err(CtlError::BadArgument(
            "no task: /ralph-loop TASK [--max-iterations N] [--completion-promise TEXT]".into(),
        ));
    }
    if task.len() > MAX_TASK_BYTES {
        return Err(CtlError::BadArgument(format!(
            "the task is {} bytes, more than the {} KiB a loop's task may be: put the details in a file \
             of the project and name it in the task",
            task.len(),
            MAX_TASK_BYTES / 1024
        )));
    }
    if request.check_may_not_run {
        start::allow_check_not_running();
    }
    let before = std::fs::read(paths.config_file()).ok();
    let adopted = adopt_found_check(paths)?;
    // A start refused after the found check was written leaves the config
    // as it was: the person never chose that check.
    let put_back = |adopted: &Option<String>| {
        if adopted.is_some() {
            let _ = match &before {
                Some(bytes) => std::fs::write(paths.config_file(), bytes),
                None => std::fs::remove_file(paths.config_file()),
            };
        }
    };
    let (mut config, pin) =
        match start::pinned_config(paths, &ralph_core::judge::config::ProcessEnv) {
            Ok(pinned) => pinned,
            Err(e) => {
                put_back(&adopted);
                return Err(e);
            }
        };
    if let Some(promise) = &request.completion_promise {
        config.completion_signal =
            ralph_core::judge::config::validate_signal(promise).ok_or_else(|| {
                CtlError::BadArgument(format!(
                    "--completion-promise {promise:?} cannot be a completion signal: {}",
                    ralph_core::judge::config::signal_accepts()
                ))
            })?;
    }
    let max = request.max_iterations.unwrap_or(config.max_iterations);
    let promise = request
        .completion_promise
        .as_ref()
        .map(|_| config.completion_signal.clone());
    let started = match start::open_loop(
        paths,
        &config,
        pin,
        Some(session),
        max,
        false,
        false,
        |state| {
            state.task = Some(task.clone());
            state.completion_signal = promise.clone();
        },
    ) {
        Ok(started) => started,
        Err(e) => {
            put_back(&adopted);
            return Err(e);
        }
    };
    let _ = started;
    let read = Read {
        task: &task,
        max: (max, request.max_iterations.is_some()),
        signal: (
            &config.completion_signal,
            request.completion_promise.is_some(),
        ),
        checks: config.completion.verify.len(),
        first_check: config.completion.verify.first().map(|v| v.command.as_str()),
        adopted: adopted.as_deref(),
    };
    Ok((read_line(&read), started_message(read)))
}

/// In a project whose config names no check (`/ralph-loop` without
/// `init`), the test command `init` would find becomes the check, as `init
/// --yes` makes it: written to `.claude/ralph/config.json`, so the loop
/// pins it and every claim runs it. Returns what was found and from where;
/// `None` when the config has a `verify` of its own (even an empty one:
/// the person's choice) or nothing is found.
fn adopt_found_check(paths: &ProjectPaths) -> Result<Option<String>, CtlError> {
    let config_path = paths.config_file();
    let config = super::init::read_json_object(&config_path)?;
    if config.get("verify").is_some() {
        return Ok(None);
    }
    let Some((command, source)) = super::init::test_command(&paths.root) else {
        return Ok(None);
    };
    let mut value = config;
    value["verify"] = serde_json::json!([{"name": "tests", "command": command}]);
    if let Some(dir) = config_path.parent() {
        std::fs::create_dir_all(dir).map_err(CtlError::io("create", dir))?;
    }
    std::fs::write(&config_path, super::init::json_text(&value))
        .map_err(CtlError::io("write", &config_path))?;
    Ok(Some(format!("`{command}` (found from {source})")))
}

/// The `/ralph-loop` command a prompt starts with, as the person typed it:
/// the bare skill name or the plugin's namespaced command. Returns the rest
/// of the line (the task and its flags), or `None` for any other prompt.
pub(crate) fn loop_command_rest(prompt: &str) -> Option<&str> {
    let prompt = prompt.trim_start();
    ["/ralph-loop", "/ralph:ralph-loop"]
        .into_iter()
        .find_map(|command| {
            let rest = prompt.strip_prefix(command)?;
            (rest.is_empty() || rest.starts_with(char::is_whitespace)).then_some(rest)
        })
}

/// Whether `prompt` is `/ralph-status` (alone, as the command takes no
/// arguments), with or without the plugin's prefix.
pub(crate) fn is_status_command(prompt: &str) -> bool {
    matches!(prompt.trim(), "/ralph-status" | "/ralph:ralph-status")
}

/// The most of a `UserPromptSubmit` hook's input `--hook` reads: a task at
/// its cap, escaped in JSON, and the other fields.
pub(crate) const MAX_HOOK_INPUT_BYTES: usize = 8 * MAX_TASK_BYTES;

/// The parts of Claude Code's `UserPromptSubmit` hook input `--hook` reads.
#[derive(Debug, serde::Deserialize)]
struct PromptSubmit {
    hook_event_name: Option<String>,
    session_id: Option<String>,
    prompt: Option<String>,
    cwd: Option<std::path::PathBuf>,
}

/// [`loop_start_hook`] on the hook's JSON read from `input`, at most
/// [`MAX_HOOK_INPUT_BYTES`] of it (past that, a `/ralph-loop` line is
/// refused by its size); input that cannot be read is left alone.
pub(crate) fn loop_start_hook_on(
    input: impl std::io::Read,
    project_dir: Option<std::path::PathBuf>,
    client_session: Option<String>,
    out: &mut dyn Write,
) -> i32 {
    let mut read = Vec::new();
    let limit = MAX_HOOK_INPUT_BYTES as u64 + 1;
    if std::io::Read::read_to_end(&mut input.take(limit), &mut read).is_err() {
        return exit_codes::OK;
    }
    let whole = read.len() <= MAX_HOOK_INPUT_BYTES;
    loop_start_hook(&read, whole, project_dir, client_session, out)
}

/// `ralph-ctl loop-start --hook`: the plugin's `UserPromptSubmit` hook.
/// For a prompt that is `/ralph-loop …`, starts the loop from the line as
/// the person typed it, read from the hook's JSON (`input`; `whole` false
/// when it was longer than [`MAX_HOOK_INPUT_BYTES`]): the task never
/// passes through a shell. The session is the hook's `session_id`, which
/// must be the client's own (`client_session`, `CLAUDE_CODE_SESSION_ID`,
/// given by Claude Code 2.1 and later); the project is `project_dir`
/// (`CLAUDE_PROJECT_DIR`), else the hook's `cwd`. Any other prompt, and
/// input that is not a hook's, is left alone (nothing said). A started loop
/// answers `{"systemMessage": "ralph: loop started: task …"}`: the client
/// shows the person what the line was read as. A refused
/// start answers `{"decision": "block", "reason": …}` on `out`: the client
/// shows the reason to the person instead of running the command. Always
/// exits 0: an exit code of 2 would block every prompt when something else
/// fails (an old `ralph-ctl`).
pub(crate) fn loop_start_hook(
    input: &[u8],
    whole: bool,
    project_dir: Option<std::path::PathBuf>,
    client_session: Option<String>,
    out: &mut dyn Write,
) -> i32 {
    // A block: the client shows its reason to the person, and the prompt
    // goes no further.
    let block = |out: &mut dyn Write, reason: &str| {
        let answer = serde_json::json!({ "decision": "block", "reason": reason });
        let _ = writeln!(out, "{answer}");
        exit_codes::OK
    };
    let refuse = |out: &mut dyn Write, why: &str| {
        block(
            out,
            &format!("ralph: the Ralph loop was NOT started: {why}"),
        )
    };
    if !whole {
        // Too long to read whole: refused only when it is a /ralph-loop line.
        let head = String::from_utf8_lossy(&input[..input.len().min(64 * 1024)]);
        let is_loop = head
            .split("\"prompt\"")
            .nth(1)
            .and_then(|after| after.trim_start().strip_prefix(':'))
            .and_then(|after| after.trim_start().strip_prefix('"'))
            .is_some_and(|text| loop_command_rest(text).is_some());
        if is_loop {
            return refuse(
                out,
                &format!(
                    "the /ralph-loop line is longer than the {} KiB a loop's task may be: put the details in a \
                     file of the project and name it in the task",
                    MAX_TASK_BYTES / 1024
                ),
            );
        }
        return exit_codes::OK;
    }
    let Ok(submit) = serde_json::from_slice::<PromptSubmit>(input) else {
        return exit_codes::OK;
    };
    if submit
        .hook_event_name
        .as_deref()
        .is_some_and(|e| e != "UserPromptSubmit")
    {
        return exit_codes::OK;
    }
    // The session's folder: CLAUDE_PROJECT_DIR, else the hook's cwd.
    let root = project_dir
        .filter(|d| !d.as_os_str().is_empty())
        .or(submit.cwd);
    // Claude Code 2.1 shows a block's reason to the person (`-p` too);
    // 2.0.77 drops it silently, so there the command goes on as written
    // (the model shows the status). Only 2.1 gives the session's id.
    if client_session.is_some() && submit.prompt.as_deref().is_some_and(is_status_command) {
        // Answered here: no model request is spent on reading a status.
        let Some(root) = root else {
            return exit_codes::OK;
        };
        let mut text = Vec::new();
        if super::status::run(&ProjectPaths::new(root), false, &mut text).is_err() {
            return exit_codes::OK;
        }
        return block(out, String::from_utf8_lossy(&text).trim_end());
    }
    let Some(rest) = submit.prompt.as_deref().and_then(loop_command_rest) else {
        return exit_codes::OK;
    };
    let Some(root) = root else {
        return refuse(
            out,
            "the hook was not told the session's folder (no CLAUDE_PROJECT_DIR, no cwd)",
        );
    };
    let Some(session) = submit.session_id.filter(|s| !s.trim().is_empty()) else {
        return refuse(
            out,
            "the hook input has no session_id, so the loop cannot be bound to this session",
        );
    };
    // Claude Code 2.0 runs this hook after the command's own text is made
    // (which then says the loop was not started) and gives no session id
    // to commands or hooks: the loop is 2.1's, which gives both.
    if client_session.as_deref() != Some(session.as_str()) {
        return exit_codes::OK;
    }
    let request = LoopStartArgs {
        task: vec![rest.to_string()],
        session: Some(session),
        ..LoopStartArgs::default()
    };
    match open(&ProjectPaths::new(root), &request) {
        // Shown to the person (not the model): what the line was read as.
        Ok((read, _)) => {
            let answer = serde_json::json!({ "systemMessage": read.trim_end() });
            let _ = writeln!(out, "{answer}");
            exit_codes::OK
        }
        Err(e) => refuse(out, &e.to_string()),
    }
}

/// `ralph-ctl loop-start --started`: what `/ralph-loop` expands to once its
/// hook has run. Says on `out` that the loop the hook started for this
/// session (`CLAUDE_CODE_SESSION_ID`, or `session`) runs, with its task
/// (for the agent's first iteration), or that none was started and why.
pub(crate) fn loop_started(
    paths: &ProjectPaths,
    session: Option<String>,
    out: &mut dyn Write,
) -> CmdResult {
    let text = match started_text(paths, session) {
        Ok(text) => text,
        Err(e) => format!(
            "The Ralph loop was NOT started: {e}\nTell the person this; do not start the task as a loop.\n"
        ),
    };
    super::written(
        out.write_all(text.as_bytes()).and_then(|()| out.flush()),
        exit_codes::OK,
    )
}

/// The session a loop is bound to: `given` (`--session`), else the one
/// Claude Code 2.1 gives the commands and hooks it runs.
fn session_of(given: Option<String>) -> Result<String, CtlError> {
    given
        .or_else(|| std::env::var(SESSION_ENV).ok())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            CtlError::BadArgument(format!(
                "cannot tell which session the loop is for: {SESSION_ENV} is not set (Claude Code 2.0 does not \
                 give it to commands or hooks; outside Claude Code, pass --session ID); use Claude Code 2.1 or \
                 later, or the launcher (`ralph-ctl init`, then .claude/ralph/ralph-audit.sh)"
            ))
        })
}

fn started_text(paths: &ProjectPaths, session: Option<String>) -> Result<String, CtlError> {
    let session = session_of(session)?;
    let state = StateStore::new(paths).read()?;
    let Some(state) = state
        .filter(|s| s.session_id == session && s.status == Status::Running && s.task.is_some())
    else {
        return Err(CtlError::Refused(
            "the plugin's UserPromptSubmit hook started no loop for this session (is the plugin loaded \
             whole, hooks/hooks.json included, with ralph-ctl on PATH?)"
                .into(),
        ));
    };
    let config =
        ralph_core::pin::loop_config(paths, &ralph_core::judge::config::ProcessEnv, &state)?;
    let signal = state
        .completion_signal
        .clone()
        .unwrap_or_else(|| config.completion_signal.clone());
    // The cap differs from the config's only when the line set it; the
    // state keeps a promise only when the line gave one.
    Ok(started_message(Read {
        task: state.task.as_deref().unwrap_or_default(),
        max: (
            state.max_iterations,
            state.max_iterations != config.max_iterations,
        ),
        signal: (&signal, state.completion_signal.is_some()),
        checks: config.completion.verify.len(),
        first_check: config.completion.verify.first().map(|v| v.command.as_str()),
        adopted: None,
    }))
}

/// What a `/ralph-loop` line was read as: the task, and each setting with
/// whether the line gave it.
struct Read<'a> {
    /// The task.
    task: &'a str,
    /// The iteration cap; true when `--max-iterations` set it.
    max: (u32, bool),
    /// The completion signal; true when `--completion-promise` set it.
    signal: (&'a str, bool),
    /// How many verify commands check a claim (0: it is not verified).
    checks: usize,
    /// The first verify command, named when it is the only one.
    first_check: Option<&'a str>,
    /// The test command found and made the check for this loop, if it was.
    adopted: Option<&'a str>,
}

/// The one line that says what a `/ralph-loop` line was read as, so the
/// person sees at once where the task ended and which flags were taken:
/// `ralph: loop started: task "…"; max iterations 6 (from
/// --max-iterations); completion promise "DONE" (from --completion-promise)`.
/// A long task is shown by its start and its end.
fn read_line(read: &Read) -> String {
    const HEAD: usize = 120;
    const TAIL: usize = 60;
    let chars = read.task.chars().count();
    let shown = if chars > HEAD + TAIL + 20 {
        let head: String = read.task.chars().take(HEAD).collect();
        let tail: String = read.task.chars().skip(chars - TAIL).collect();
        format!("{} … {}", head.trim_end(), tail.trim_start())
    } else {
        read.task.to_string()
    };
    // Quoted the Rust way: newlines, quotes and every control shown escaped
    // (`\n`, `\"`, `\u{1b}`), never obeyed.
    let task = format!("{shown:?}");
    let (max, max_given) = read.max;
    let (signal, signal_given) = read.signal;
    let signal = format!("{signal:?}");
    let from = |given: bool, flag: &str, value: &str| {
        if given {
            format!("from {flag}")
        } else {
            format!("the default; {flag} {value} sets it")
        }
    };
    let check = match (read.checks, read.adopted) {
        (_, Some(found)) => format!(
            "checked by {found}, the project's tests, now the verify command in \
             .claude/ralph/config.json (change it there, or `ralph-ctl init --verify CMD`)"
        ),
        (1, None) if read.first_check.is_some() => format!(
            "checked by `{}` (the verify command in .claude/ralph/config.json)",
            read.first_check.unwrap_or_default()
        ),
        (0, None) => "not verified: no verify command in .claude/ralph/config.json, so the promise ends the loop \
              without running anything (`ralph-ctl init --verify CMD` adds one)"
            .to_string(),
        (n, None) => format!(
            "checked by {n} verify command{} (.claude/ralph/config.json)",
            if n == 1 { "" } else { "s" }
        ),
    };
    format!(
        "ralph: loop started: task {task}; max iterations {max} ({}); completion promise {signal} ({}); {check}\n",
        from(max_given, "--max-iterations", "N"),
        from(signal_given, "--completion-promise", "TEXT"),
    )
}

/// What `/ralph-loop` says once its loop runs: what the line was read as
/// (for the person), then to the agent (work on the task now, how the loop
/// ends) and to the person (the client's block cap).
fn started_message(read: Read) -> String {
    let (max, signal, task) = (read.max.0, read.signal.0, read.task);
    let mut text = read_line(&read);
    text.push_str(&format!(
        "Ralph loop started in this session (at most {max} iterations, state in .claude/context/runtime/). \
         Work on the task below now. Each time you stop, it is given back to you, until your final message \
         has {signal} on a line of its own (only when the task is genuinely complete and verified) or the \
         iteration cap is reached. Check your work with `{}`: it runs the loop's checks as a claim \
         of done is judged. The person ends it with /cancel-ralph.\n",
        ralph_core::observe::prompt_text::CHECK_COMMAND
    ));
    if let Some(needed) = block_cap(std::env::var(BLOCK_CAP_ENV).ok().as_deref(), max)
        .filter(|_| max > CLIENT_BLOCK_CAP)
    {
        text.push_str(&format!(
            "Note for the person: Claude Code 2.1 lets a session be held at most {CLIENT_BLOCK_CAP} stops in a \
             row, so this loop may end early; to allow all {max} iterations, start claude with \
             {BLOCK_CAP_ENV}={needed}.\n"
        ));
    }
    text.push_str(&format!("\nTask:\n{task}\n"));
    text
}

/// The longest task `/ralph-loop` takes: it is kept in the state and fed
/// back at every stop.
pub(crate) const MAX_TASK_BYTES: usize = 256 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(words: &[&str]) -> LoopStartArgs {
        parse_words(&LoopStartArgs {
            task: words.iter().map(std::string::ToString::to_string).collect(),
            ..LoopStartArgs::default()
        })
        .unwrap()
    }

    /// What a line is read as: the task, the cap, the promise.
    fn read_as(line: &str) -> (String, Option<u32>, Option<String>) {
        let p = parsed(&[line]);
        (p.task.join(" "), p.max_iterations, p.completion_promise)
    }

    #[test]
    fn flags_are_read_from_the_end_of_the_line_backwards_in_the_official_forms() {
        let (task, six, done) = ("Fix the findings", Some(6), Some("DONE".to_string()));
        for line in [
            // The official plugin's documented form, and as people type it.
            "Fix the findings --max-iterations 6 --completion-promise DONE",
            "Fix the findings --completion-promise DONE --max-iterations 6",
            "Fix the findings --max-iterations 6 --completion-promise 'DONE'",
            "Fix the findings --max-iterations 6 --completion-promise \"DONE\"",
            "Fix the findings --max-iterations=6 --completion-promise=DONE",
            "Fix the findings --completion-promise='DONE' --max-iterations=6",
            "\"Fix the findings\" --max-iterations 6 --completion-promise DONE",
            "'Fix the findings' --max-iterations 6 --completion-promise DONE",
            "Fix the findings\n--max-iterations 6\n--completion-promise DONE",
            // Before the task, as the official help's examples have them.
            "--max-iterations 6 --completion-promise DONE Fix the findings",
            "--completion-promise DONE Fix the findings --max-iterations 6",
        ] {
            assert_eq!(read_as(line), (task.into(), six, done.clone()), "{line:?}");
        }
        // One flag alone, at the end.
        for (line, task, max, promise) in [
            (
                "Fix the findings --max-iterations 6",
                "Fix the findings",
                six,
                None,
            ),
            (
                "Fix the findings --completion-promise DONE",
                "Fix the findings",
                None,
                done.clone(),
            ),
            (
                "Fix the findings --completion-promise=done",
                "Fix the findings",
                None,
                Some("done".into()),
            ),
            (
                "Fix the findings --completion-promise 'all done'",
                "Fix the findings",
                None,
                Some("all done".into()),
            ),
            // After the end of a sentence or a line, any one-word value is a flag's.
            (
                "Fix the findings. --completion-promise done",
                "Fix the findings.",
                None,
                Some("done".into()),
            ),
            (
                "Fix the findings\n--completion-promise finished",
                "Fix the findings",
                None,
                Some("finished".into()),
            ),
        ] {
            assert_eq!(read_as(line), (task.to_string(), max, promise), "{line:?}");
        }
    }

    #[test]
    fn a_bare_promise_of_several_words_runs_to_the_next_flag_when_written_like_a_signal() {
        for (line, task, max, promise) in [
            (
                "Tidy up --completion-promise ALL DONE",
                "Tidy up",
                None,
                "ALL DONE",
            ),
            (
                "Tidy up --completion-promise TASK COMPLETE --max-iterations 3",
                "Tidy up",
                Some(3),
                "TASK COMPLETE",
            ),
            (
                "Tidy up --max-iterations 3 --completion-promise ALL TESTS PASS",
                "Tidy up",
                Some(3),
                "ALL TESTS PASS",
            ),
            (
                "Tidy up --completion-promise 'ALL DONE'",
                "Tidy up",
                None,
                "ALL DONE",
            ),
        ] {
            assert_eq!(
                read_as(line),
                (task.to_string(), max, Some(promise.to_string())),
                "{line:?}"
            );
        }
        // Words not written like a signal are never swallowed: the line's
        // end is then no run of flags, and the flag's name is prose.
        for prose in [
            "Tidy up --completion-promise all done",
            "Tidy up --completion-promise ALL done",
        ] {
            assert_eq!(read_as(prose), (prose.to_string(), None, None), "{prose:?}");
        }
    }

    #[test]
    fn a_flag_named_in_prose_stays_the_task_s_text() {
        for prose in [
            "Implement the --completion-promise option",
            "Add a --max-iterations flag",
            "Add a --max-iterations flag. Then test it",
            "Document --max-iterations 5 in the README",
            "Explain how --completion-promise works in the README",
            "Fix the findings --max-iterations 6 --completion-promise done later",
            // A flag at the end without a value, mid-sentence: named, not used.
            "Add support for --max-iterations",
            "Make the parser accept --completion-promise",
            "Fix the --completion-promise option --max-iterations many",
            // Quotes that do not enclose the whole task are the task's.
            "\"Fix\" the \"findings\"",
            "'Fix' it",
        ] {
            assert_eq!(read_as(prose), (prose.to_string(), None, None), "{prose:?}");
        }
        // Prose that names a flag, then flags: only the flags are read.
        assert_eq!(
            read_as(
                "Implement the --completion-promise option --max-iterations 4 --completion-promise DONE"
            ),
            (
                "Implement the --completion-promise option".to_string(),
                Some(4),
                Some("DONE".into())
            )
        );
        assert_eq!(
            read_as("Fix the --completion-promise option --max-iterations 6"),
            (
                "Fix the --completion-promise option".to_string(),
                Some(6),
                None
            )
        );
    }

    #[test]
    fn the_task_is_kept_verbatim_and_bad_flags_are_refused() {
        // Newlines, lists and code blocks are kept; flags on a last line of their own.
        let text = "Fix it:\n\n- one\n- two\n\n```sh\nmake  test\n```\n--max-iterations 4\n";
        let kept = parsed(&[text]);
        assert_eq!(
            kept.task,
            ["Fix it:\n\n- one\n- two\n\n```sh\nmake  test\n```"]
        );
        assert_eq!(kept.max_iterations, Some(4));
        // Words as a shell passes them (`ralph-ctl loop-start …`), quotes kept.
        let quoted = parsed(&[
            "--completion-promise",
            "'ALL",
            "DONE'",
            "Tidy",
            "up",
            "--max-iterations=3",
        ]);
        assert_eq!(quoted.task, ["Tidy up"]);
        assert_eq!(quoted.completion_promise.as_deref(), Some("ALL DONE"));
        assert_eq!(quoted.max_iterations, Some(3));
        for (bad, says) in [
            ("x. --max-iterations", "--max-iterations needs a value"),
            (
                "Fix it\n--completion-promise",
                "--completion-promise needs a value",
            ),
            ("x --max-iterations=", "--max-iterations needs a value"),
            ("x. --max-iterations 0", "--max-iterations \"0\" is invalid"),
            ("x --max-iterations 0", "--max-iterations \"0\" is invalid"),
            (
                "x --max-iterations 100001",
                "--max-iterations \"100001\" is invalid",
            ),
            (
                "Fix it.\n--max-iterations lots",
                "--max-iterations \"lots\" is invalid",
            ),
            (
                "--max-iterations many x",
                "--max-iterations \"many\" is invalid",
            ),
            (
                "x. --completion-promise 'open",
                "opens a quote it does not close",
            ),
            (
                "x --max-iterations 6 --completion-promise",
                "--completion-promise needs a value",
            ),
        ] {
            let request = LoopStartArgs {
                task: vec![bad.to_string()],
                ..LoopStartArgs::default()
            };
            let said = parse_words(&request).unwrap_err().to_string();
            assert!(said.contains(says), "{bad:?}: {said}");
        }
    }

    #[test]
    fn the_started_loop_says_what_the_line_was_read_as() {
        let given = read_line(&Read {
            task: "Fix the findings",
            max: (6, true),
            signal: ("DONE", true),
            checks: 1,
            first_check: None,
            adopted: None,
        });
        assert_eq!(
            given,
            "ralph: loop started: task \"Fix the findings\"; max iterations 6 (from --max-iterations); \
             completion promise \"DONE\" (from --completion-promise); checked by 1 verify command \
             (.claude/ralph/config.json)\n"
        );
        let defaults = read_line(&Read {
            task: "Fix it:\n- \"one\"\u{1b}[2J",
            max: (25, false),
            signal: ("RALPH_AUDIT_COMPLETE_NO_FINDINGS", false),
            checks: 0,
            first_check: None,
            adopted: None,
        });
        assert_eq!(
            defaults,
            "ralph: loop started: task \"Fix it:\\n- \\\"one\\\"\\u{1b}[2J\"; max iterations 25 (the default; \
             --max-iterations N sets it); completion promise \"RALPH_AUDIT_COMPLETE_NO_FINDINGS\" (the default; \
             --completion-promise TEXT sets it); not verified: no verify command in .claude/ralph/config.json, \
             so the promise ends the loop without running anything (`ralph-ctl init --verify CMD` adds one)\n"
        );
        // A long task: its start and its end, where flags would be.
        let long = format!("{} the end --max-iterations", "word ".repeat(100));
        let said = read_line(&Read {
            task: &long,
            max: (25, false),
            signal: ("DONE", false),
            checks: 2,
            first_check: None,
            adopted: None,
        });
        assert!(said.contains("word word … "), "{said}");
        assert!(said.contains("the end --max-iterations\";"), "{said}");
        assert!(
            said.ends_with("checked by 2 verify commands (.claude/ralph/config.json)\n"),
            "{said}"
        );
        assert!(said.len() < 450, "{said}");
    }

    fn hook(
        input: &str,
        whole: bool,
        root: &std::path::Path,
        client_session: Option<&str>,
    ) -> (i32, String) {
        let mut out = Vec::new();
        let code = loop_start_hook(
            input.as_bytes(),
            whole,
            Some(root.to_path_buf()),
            client_session.map(str::to_string),
            &mut out,
        );
        (code, String::from_utf8(out).unwrap())
    }

    fn submit(prompt: &str) -> String {
        serde_json::json!({
            "hook_event_name": "UserPromptSubmit",
            "session_id": "s-1",
            "prompt": prompt,
        })
        .to_string()
    }

    #[test]
    fn the_hook_leaves_every_other_prompt_and_any_garbage_alone() {
        let dir = crate::testdir::new("loop-hook-alone");
        for (input, whole) in [
            ("not json at all".to_string(), true),
            (String::new(), true),
            ("{}".to_string(), true),
            (submit("Fix the /ralph-loop command's docs."), true),
            (submit("/ralph-loopy Fix it."), true),
            (submit("/ralph-status please"), true),
            (
                serde_json::json!({"hook_event_name": "Stop", "session_id": "s-1", "prompt": "/ralph-loop x"})
                    .to_string(),
                true,
            ),
            (format!("{{\"prompt\": \"Say hello{}", "x".repeat(100)), false),
        ] {
            assert_eq!(hook(&input, whole, dir.path(), Some("s-1")), (0, String::new()), "{input}");
        }
        assert!(!dir.path().join(".claude").exists(), "nothing written");
        // `/ralph-status` is answered by the hook on 2.1 (which gives the
        // session's id): the status as the block's reason, no model turn.
        let (code, said) = hook(&submit("/ralph-status"), true, dir.path(), Some("s-1"));
        assert_eq!(code, 0);
        assert!(
            block_reason(&said).starts_with("No Ralph loop in"),
            "{said}"
        );
        // 2.0.77 drops a block's reason: there the command runs as written.
        assert_eq!(
            hook(&submit("/ralph-status"), true, dir.path(), None),
            (0, String::new())
        );
        assert!(!dir.path().join(".claude").exists(), "nothing written");
    }

    /// The reason of the hook's `{"decision": "block"}` answer `said`.
    fn block_reason(said: &str) -> String {
        let answer: serde_json::Value = serde_json::from_str(said).unwrap();
        assert_eq!(answer["decision"], "block", "{said}");
        answer["reason"].as_str().unwrap().to_string()
    }

    #[test]
    fn the_hook_starts_the_loop_from_the_line_and_refuses_with_a_reason() {
        let dir = crate::testdir::new("loop-hook-start");
        // Claude Code 2.0: no session id of the client's own, nothing done.
        assert_eq!(
            hook(&submit("/ralph-loop Fix it."), true, dir.path(), None),
            (0, String::new())
        );
        assert!(!dir.path().join(".claude").exists());
        // The namespaced command, a task with lines, a flag on its own line.
        let line = "/ralph:ralph-loop Fix it.\n$(touch x)\n--max-iterations 3";
        let (code, said) = hook(&submit(line), true, dir.path(), Some("s-1"));
        assert_eq!(code, 0);
        // The person is shown what the line was read as, the model nothing.
        let answer: serde_json::Value = serde_json::from_str(&said).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({
                "systemMessage": "ralph: loop started: task \"Fix it.\\n$(touch x)\"; max iterations 3 \
                                  (from --max-iterations); completion promise \"RALPH_AUDIT_COMPLETE_NO_FINDINGS\" \
                                  (the default; --completion-promise TEXT sets it); not verified: no verify command \
                                  in .claude/ralph/config.json, so the promise ends the loop without running anything \
                                  (`ralph-ctl init --verify CMD` adds one)"
            })
        );
        let state = StateStore::new(&ProjectPaths::new(dir.path()))
            .read()
            .unwrap()
            .unwrap();
        assert_eq!(state.task.as_deref(), Some("Fix it.\n$(touch x)"));
        assert_eq!(
            (state.session_id.as_str(), state.max_iterations),
            ("s-1", 3)
        );
        // A second start while that loop runs: refused, with the reason.
        let (code, said) = hook(
            &submit("/ralph-loop Another."),
            true,
            dir.path(),
            Some("s-1"),
        );
        assert_eq!(code, 0);
        assert!(
            block_reason(&said).starts_with("ralph: the Ralph loop was NOT started: "),
            "{said}"
        );
        // A line past what may be read whole: refused by its size.
        let (_, said) = hook(&submit("/ralph-loop Big."), false, dir.path(), Some("s-1"));
        assert!(said.contains("longer than the 256 KiB"), "{said}");
    }
}
