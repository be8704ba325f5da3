//! Building the Claude Code command line, with no I/O: which program
//! `RALPH_CLAUDE` names, the arguments, the environment, and how the first
//! prompt reaches the client.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable naming the client (a path, a command name, or a
/// command with arguments such as `node /opt/claude-code/cli.js`).
pub(crate) const CLIENT_ENV: &str = "RALPH_CLAUDE";
/// The client started when [`CLIENT_ENV`] is unset or empty.
pub(crate) const DEFAULT_CLIENT: &str = "claude";
/// Claude Code's own cap on consecutive Stop hook blocks.
pub(crate) const BLOCK_CAP_ENV: &str = "CLAUDE_CODE_STOP_HOOK_BLOCK_CAP";
/// How far above the loop's cap the client's block cap is raised.
pub(crate) const BLOCK_CAP_MARGIN: u64 = 5;

/// The Claude Code client to start: a program and the arguments that come
/// with it in `RALPH_CLAUDE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientProgram {
    /// The executable, as found.
    pub(crate) program: PathBuf,
    /// Arguments that come before ours (`cli.js` in `node cli.js`).
    pub(crate) leading_args: Vec<String>,
}

impl ClientProgram {
    /// Reads `RALPH_CLAUDE` (`spec`; empty means `claude`): first as one
    /// program (a path may hold spaces), else as a command with arguments
    /// split on whitespace. `find` turns a name or path into the executable
    /// it means, or `None`.
    pub(crate) fn parse(
        spec: &str,
        find: impl Fn(&str) -> Option<PathBuf>,
    ) -> Option<ClientProgram> {
        let spec = if spec.trim().is_empty() {
            DEFAULT_CLIENT
        } else {
            spec
        };
        if let Some(program) = find(spec) {
            return Some(ClientProgram {
                program,
                leading_args: Vec::new(),
            });
        }
        let mut words = spec.split_whitespace();
        let program = find(words.next()?)?;
        Some(ClientProgram {
            program,
            leading_args: words.map(str::to_string).collect(),
        })
    }

    /// True when the program is a Windows batch file (`claude.cmd`, npm's
    /// shim), which cannot take a multi-line argument.
    fn is_batch_file(&self) -> bool {
        self.program
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("cmd") || e.eq_ignore_ascii_case("bat"))
    }
}

/// Finds `name` the way a shell would: a name with a path separator is a
/// path (relative to `base`) that must be an executable file; a bare name is
/// looked up in `path_var` (`PATH`). With `pathext` (Windows' `PATHEXT`, such
/// as `.COM;.EXE;.BAT;.CMD`), a name without an extension is tried with each
/// of them instead of as it is.
pub(crate) fn find_executable(
    name: &str,
    base: &Path,
    path_var: Option<&std::ffi::OsStr>,
    pathext: Option<&str>,
) -> Option<PathBuf> {
    if name.is_empty() {
        return None;
    }
    let extensions: Vec<&str> = match pathext {
        Some(list) if Path::new(name).extension().is_none() => {
            list.split(';').filter(|e| !e.is_empty()).collect()
        }
        _ => vec![""],
    };
    let candidates = |stem: PathBuf| {
        extensions
            .iter()
            .map(move |ext| {
                let mut with = stem.clone().into_os_string();
                with.push(ext);
                PathBuf::from(with)
            })
            .collect::<Vec<_>>()
    };
    let is_path = name.contains('/') || (pathext.is_some() && name.contains('\\'));
    if is_path {
        return candidates(base.join(name))
            .into_iter()
            .find(|p| is_executable(p));
    }
    std::env::split_paths(path_var?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .flat_map(|dir| candidates(dir.join(name)))
        .find(|p| is_executable(p))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file()
}

/// The value `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP` must have for a loop of
/// `max_iterations`, or `None` to keep `current`: a value of 0 (no cap) or
/// one already at least `max_iterations + 5` is kept, and so is one that is
/// not a number (the client's business); anything else is raised.
pub(crate) fn block_cap(current: Option<&str>, max_iterations: u32) -> Option<String> {
    let needed = u64::from(max_iterations) + BLOCK_CAP_MARGIN;
    match current.map(str::trim) {
        None | Some("") => Some(needed.to_string()),
        Some(value) => match value.parse::<i64>() {
            Ok(0) => None,
            // A negative value is below it too.
            Ok(n) if u64::try_from(n).ok().is_none_or(|n| n < needed) => Some(needed.to_string()),
            _ => None,
        },
    }
}

/// The platform's limit on passing the prompt as one argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Platform {
    /// Linux caps one argument at 128 KiB (`MAX_ARG_STRLEN`); macOS caps all
    /// arguments and the environment together at 1 MiB. The client reads a
    /// prompt piped on stdin instead, in both modes.
    Unix,
    /// A command line holds at most 32 767 characters, and a batch file
    /// (`claude.cmd`) cannot take a multi-line argument; the client cannot
    /// read a piped prompt in interactive mode there.
    Windows,
}

impl Platform {
    /// The platform this binary runs on.
    pub(crate) const fn current() -> Platform {
        if cfg!(windows) {
            Platform::Windows
        } else {
            Platform::Unix
        }
    }

    /// The longest prompt (in bytes) passed as an argument in interactive mode.
    pub(crate) const fn argument_limit(self) -> usize {
        match self {
            Platform::Unix => 100 * 1024,
            Platform::Windows => 30_000,
        }
    }
}

/// How the first prompt reaches the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PromptDelivery {
    /// As the positional prompt argument (interactive mode, a prompt that fits).
    Argument,
    /// On the client's stdin, which both modes read as the prompt when it is
    /// not a terminal (headless always; interactive when the prompt is too
    /// long for an argument: the client then reads the keyboard from the terminal).
    Stdin,
    /// Written to a file, with a short first message naming it (interactive
    /// mode on Windows, when the prompt cannot be an argument).
    File(PathBuf),
}

/// Everything the client command is built from.
#[derive(Debug, Clone)]
pub(crate) struct Launch<'a> {
    /// The client.
    pub(crate) client: &'a ClientProgram,
    /// `claude -p --output-format json` instead of the terminal UI.
    pub(crate) headless: bool,
    /// The loop's session, passed with `--session-id`.
    pub(crate) session_id: &'a str,
    /// The loop's cap, for the block cap.
    pub(crate) max_iterations: u32,
    /// The first prompt (header, PROMPT.md, guardrails).
    pub(crate) prompt: &'a str,
    /// Arguments given after `--`, passed on unchanged.
    pub(crate) client_args: &'a [OsString],
    /// The inherited `CLAUDE_CODE_STOP_HOOK_BLOCK_CAP`, if any.
    pub(crate) block_cap: Option<&'a str>,
    /// Where the prompt goes when it must be pointed at (see [`PromptDelivery::File`]).
    pub(crate) prompt_file: &'a Path,
    /// The platform's limits.
    pub(crate) platform: Platform,
    /// Continue the session (`--resume ID`) instead of starting it (`--session-id ID`).
    pub(crate) resume: bool,
    /// The budget left for this run, passed as `--max-budget-usd` (headless only).
    pub(crate) max_budget_usd: Option<f64>,
    /// More settings for this run (`--settings JSON`).
    pub(crate) extra_settings: Option<&'a str>,
    /// One iteration in a fresh process: the Stop hook stays out of it (no
    /// `RALPH_ACTIVE`, no block cap); the driver judges the iteration.
    pub(crate) fresh: bool,
    /// Headless, the client's JSON result as the person's output
    /// (`--output-format json`), not its events shown as readable lines.
    pub(crate) json: bool,
    /// The run's settings from its command line (`RALPH_MAX_ITERATIONS`,
    /// `RALPH_SANDBOX`, …), given to the client as variables so that its
    /// Stop hook reads what the run reads.
    pub(crate) run_env: &'a [(&'static str, String)],
    /// The project whose loop this client works for (its main checkout),
    /// given to the client as `RALPH_LOOP_PROJECT`.
    pub(crate) loop_project: &'a Path,
}

/// A client version, from `claude --version` ("2.1.330 (Claude Code)").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct ClientVersion(pub u32, pub u32, pub u32);

impl std::fmt::Display for ClientVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

impl ClientVersion {
    /// The first `X.Y.Z` in `text`.
    pub(crate) fn parse(text: &str) -> Option<ClientVersion> {
        text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .find_map(|word| {
                let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
                match (parts.next(), parts.next(), parts.next()) {
                    (Some(Some(a)), Some(Some(b)), Some(Some(c))) => Some(ClientVersion(a, b, c)),
                    _ => None,
                }
            })
    }

    /// 2.1 and later fire `StopFailure` when an API error ends a turn (2.0
    /// runs the Stop hook then, and skips a settings file that names it).
    pub(crate) fn has_stop_failure(self) -> bool {
        self >= ClientVersion(2, 1, 0)
    }

    /// 2.1 and later report the whole session's cost in `total_cost_usd`,
    /// a resumed run included; 2.0 reports the run's own.
    pub(crate) fn reports_session_cost(self) -> bool {
        self >= ClientVersion(2, 1, 0)
    }
}

/// The command to run: program, arguments, the environment it adds, and
/// what it gets on stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClientCommand {
    /// The executable.
    pub(crate) program: PathBuf,
    /// Its arguments.
    pub(crate) args: Vec<OsString>,
    /// Variables set for the client only (`RALPH_ACTIVE=1`, the block cap).
    pub(crate) env: Vec<(String, String)>,
    /// How the first prompt is passed.
    pub(crate) delivery: PromptDelivery,
    /// The text written to stdin, or to the prompt file.
    pub(crate) prompt: String,
}

/// Chooses how the prompt reaches the client.
pub(crate) fn delivery(launch: &Launch) -> PromptDelivery {
    if launch.headless {
        return PromptDelivery::Stdin;
    }
    let fits = launch.prompt.len() <= launch.platform.argument_limit();
    match launch.platform {
        Platform::Unix if fits => PromptDelivery::Argument,
        Platform::Unix => PromptDelivery::Stdin,
        Platform::Windows if fits && !launch.client.is_batch_file() => PromptDelivery::Argument,
        Platform::Windows => PromptDelivery::File(launch.prompt_file.to_path_buf()),
    }
}

/// The short first message that names the file holding the prompt.
pub(crate) fn pointer_message(prompt_file: &Path, max_iterations: u32) -> String {
    format!(
        "[Ralph loop: iteration 1 of {max_iterations}] This iteration's task is too long for \
         the command line, so it is in the file {}. Read that whole file (in parts if it is \
         long) and do what it says.",
        prompt_file.display()
    )
}

/// The permission mode a headless run gets when the person names none:
/// file edits in the project (and, as the clients judge them, shell
/// commands that only touch the project) go through without a prompt.
pub(crate) const HEADLESS_PERMISSION_MODE: &str = "acceptEdits";

/// Whether the client arguments already say how permissions are handled.
pub(crate) fn names_permissions(client_args: &[OsString]) -> bool {
    client_args.iter().any(|arg| {
        let arg = arg.to_string_lossy();
        [
            "--permission-mode",
            "--dangerously-skip-permissions",
            "--allow-dangerously-skip-permissions",
            "--permission-prompt-tool",
        ]
        .iter()
        .any(|flag| arg == *flag || arg.starts_with(&format!("{flag}=")))
    })
}

/// Whether the client arguments carry the person's own `--settings`.
pub(crate) fn names_settings(client_args: &[OsString]) -> bool {
    client_args.iter().any(|arg| {
        let arg = arg.to_string_lossy();
        arg == "--settings" || arg.starts_with("--settings=")
    })
}

/// Set for a fresh iteration's client: the driver, not a Stop hook, judges
/// its stop (the plugin's hook steps aside, see `ralph-stop-hook --plugin`).
pub(crate) const DRIVEN_ENV: &str = "RALPH_DRIVEN";

/// Builds the client command: `[leading args] -p --output-format
/// stream-json --verbose --session-id ID [client args]` with the prompt on
/// stdin (headless; `--output-format json` for `--json` in session mode), or
/// `[leading args] [PROMPT] --session-id ID [client args]` (interactive).
pub(crate) fn build(launch: &Launch) -> ClientCommand {
    let delivery = delivery(launch);
    let mut args: Vec<OsString> = launch
        .client
        .leading_args
        .iter()
        .map(OsString::from)
        .collect();
    if launch.fresh || (launch.headless && !launch.json) {
        // One event per line as the session goes, shown live (driver::live).
        args.extend(["-p", "--output-format", "stream-json", "--verbose"].map(OsString::from));
    } else if launch.headless {
        args.extend(["-p", "--output-format", "json"].map(OsString::from));
    }
    match &delivery {
        PromptDelivery::Argument => args.push(launch.prompt.into()),
        PromptDelivery::File(path) => {
            args.push(pointer_message(path, launch.max_iterations).into());
        }
        PromptDelivery::Stdin => {}
    }
    let session_flag = if launch.resume {
        "--resume"
    } else {
        "--session-id"
    };
    args.extend([session_flag, launch.session_id].map(OsString::from));
    if let Some(settings) = launch.extra_settings {
        args.extend(["--settings", settings].map(OsString::from));
    }
    if let (true, Some(budget)) = (launch.headless, launch.max_budget_usd) {
        args.extend(["--max-budget-usd".into(), format!("{budget:.6}").into()]);
    }
    if launch.headless && !names_permissions(launch.client_args) {
        // Nobody is there to answer a permission prompt: without a mode,
        // every file edit is denied and the loop only burns its budget.
        args.extend(["--permission-mode", HEADLESS_PERMISSION_MODE].map(OsString::from));
    }
    args.extend(launch.client_args.iter().cloned());
    let mut env: Vec<(String, String)> = launch
        .run_env
        .iter()
        .map(|(name, value)| (name.to_string(), value.clone()))
        .collect();
    env.push((
        ralph_core::judge::config::env::LOOP_PROJECT.to_string(),
        launch.loop_project.display().to_string(),
    ));
    if launch.fresh {
        // The driver judges this iteration: the plugin's hook keeps out of it.
        env.push((DRIVEN_ENV.to_string(), "1".to_string()));
    } else {
        env.push(("RALPH_ACTIVE".to_string(), "1".to_string()));
        if launch.headless {
            // The client exits right after the loop's last stop: the driver
            // then charges its cost and tells the person, cost included.
            env.push((
                ralph_core::judge::config::env::DRIVER_SETTLES.to_string(),
                "1".to_string(),
            ));
        }
        if let Some(cap) = block_cap(launch.block_cap, launch.max_iterations) {
            env.push((BLOCK_CAP_ENV.to_string(), cap));
        }
    }
    ClientCommand {
        program: launch.client.program.clone(),
        args,
        env,
        delivery,
        prompt: launch.prompt.to_string(),
    }
}

/// `value` as one single-quoted sh word: every byte literal, a `'` written
/// as `'\''`.
pub(crate) fn sh_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finder(known: &'static [&'static str]) -> impl Fn(&str) -> Option<PathBuf> {
        move |name| {
            known
                .contains(&name)
                .then(|| PathBuf::from(format!("/bin/{name}")))
        }
    }

    #[test]
    fn client_spec_is_one_program_or_a_command_with_arguments() {
        let find = finder(&["claude", "node", "/opt/my claude/claude"]);
        let parse = |spec| ClientProgram::parse(spec, &find);
        assert_eq!(
            parse("").unwrap(),
            ClientProgram {
                program: "/bin/claude".into(),
                leading_args: vec![]
            }
        );
        assert_eq!(parse("  ").unwrap().program, PathBuf::from("/bin/claude"));
        assert_eq!(
            parse("node /opt/claude-code/cli.js --verbose").unwrap(),
            ClientProgram {
                program: "/bin/node".into(),
                leading_args: vec!["/opt/claude-code/cli.js".into(), "--verbose".into()]
            }
        );
        // A path with a space is one program when it exists as a whole.
        assert_eq!(
            parse("/opt/my claude/claude").unwrap().leading_args,
            Vec::<String>::new()
        );
        assert_eq!(parse("/nonexistent/claude"), None);
        assert_eq!(parse("missing --flag"), None);
    }

    #[test]
    fn block_cap_is_raised_above_the_loop_unless_already_enough_or_off() {
        assert_eq!(block_cap(None, 25).as_deref(), Some("30"));
        assert_eq!(block_cap(Some(""), 25).as_deref(), Some("30"));
        assert_eq!(block_cap(Some("8"), 25).as_deref(), Some("30"));
        assert_eq!(block_cap(Some("-1"), 25).as_deref(), Some("30"));
        assert_eq!(block_cap(Some("29"), 25).as_deref(), Some("30"));
        assert_eq!(block_cap(Some("30"), 25), None);
        assert_eq!(block_cap(Some("500"), 25), None);
        assert_eq!(block_cap(Some("0"), 25), None, "0 disables the cap");
        assert_eq!(block_cap(Some("lots"), 25), None, "not ours to judge");
        assert_eq!(
            block_cap(None, 100_000).as_deref(),
            Some("100005"),
            "no overflow at the largest cap"
        );
    }

    fn launch<'a>(
        client: &'a ClientProgram,
        headless: bool,
        prompt: &'a str,
        client_args: &'a [OsString],
        platform: Platform,
    ) -> Launch<'a> {
        Launch {
            client,
            headless,
            session_id: "s-1",
            max_iterations: 7,
            prompt,
            client_args,
            block_cap: None,
            prompt_file: Path::new("/p/.claude/context/runtime/ralph-first-prompt.md"),
            platform,
            resume: false,
            max_budget_usd: None,
            extra_settings: None,
            fresh: false,
            json: true,
            run_env: &[],
            loop_project: Path::new("/p"),
        }
    }

    fn args(command: &ClientCommand) -> Vec<String> {
        command
            .args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn headless_passes_the_prompt_on_stdin_whatever_its_size() {
        let client = ClientProgram {
            program: "/bin/node".into(),
            leading_args: vec!["cli.js".into()],
        };
        let extra = [OsString::from("--model"), OsString::from("a b")];
        for size in [10, 2 * 1024 * 1024] {
            let prompt = "x".repeat(size);
            for platform in [Platform::Unix, Platform::Windows] {
                let command = build(&launch(&client, true, &prompt, &extra, platform));
                assert_eq!(command.delivery, PromptDelivery::Stdin);
                assert_eq!(command.prompt, prompt);
                assert_eq!(
                    args(&command),
                    [
                        "cli.js",
                        "-p",
                        "--output-format",
                        "json",
                        "--session-id",
                        "s-1",
                        "--permission-mode",
                        "acceptEdits",
                        "--model",
                        "a b"
                    ]
                );
                assert_eq!(command.program, PathBuf::from("/bin/node"));
                assert_eq!(
                    command.env,
                    [
                        ("RALPH_LOOP_PROJECT".to_string(), "/p".to_string()),
                        ("RALPH_ACTIVE".to_string(), "1".to_string()),
                        ("RALPH_DRIVER_SETTLES".to_string(), "1".to_string()),
                        (BLOCK_CAP_ENV.to_string(), "12".to_string())
                    ],
                    "the hook leaves the ending's notification to the driver"
                );
            }
        }
    }

    #[test]
    fn a_fresh_iteration_runs_without_the_hook_s_guard_or_block_cap() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let mut launch = launch(&client, true, "Do it.", &[], Platform::Unix);
        launch.fresh = true;
        let command = build(&launch);
        assert_eq!(
            command.env,
            [
                ("RALPH_LOOP_PROJECT".to_string(), "/p".to_string()),
                (DRIVEN_ENV.to_string(), "1".to_string())
            ],
            "no RALPH_ACTIVE, no block cap; the plugin's hook told to keep out"
        );
        let args = args(&command);
        assert!(args.contains(&"--session-id".to_string()));
        assert_eq!(
            args[..4],
            ["-p", "--output-format", "stream-json", "--verbose"],
            "a fresh iteration's events are streamed, to be shown live"
        );
    }

    #[test]
    fn the_run_s_settings_reach_the_client_and_its_hook_as_variables() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let run_env = [
            ("RALPH_MAX_ITERATIONS", "3".to_string()),
            ("RALPH_SANDBOX", "off".to_string()),
        ];
        let mut launch = launch(&client, true, "Do it.", &[], Platform::Unix);
        launch.run_env = &run_env;
        let command = build(&launch);
        for (name, value) in &run_env {
            assert!(
                command.env.contains(&(name.to_string(), value.clone())),
                "{name}: {:?}",
                command.env
            );
        }
        assert!(
            command
                .env
                .contains(&("RALPH_ACTIVE".to_string(), "1".to_string()))
        );
    }

    #[test]
    fn client_versions() {
        assert_eq!(
            ClientVersion::parse("2.1.330 (Claude Code)"),
            Some(ClientVersion(2, 1, 330))
        );
        assert_eq!(
            ClientVersion::parse("v2.0.77"),
            Some(ClientVersion(2, 0, 77))
        );
        assert_eq!(ClientVersion::parse("Claude Code"), None);
        assert!(ClientVersion(2, 1, 330).has_stop_failure());
        assert!(!ClientVersion(2, 0, 77).has_stop_failure());
        assert!(ClientVersion(3, 0, 0).reports_session_cost());
    }

    #[test]
    fn headless_gets_a_permission_mode_unless_the_person_gave_one() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let mode = |headless: bool, extra: &[&str]| {
            let extra: Vec<OsString> = extra.iter().map(OsString::from).collect();
            let args = args(&build(&launch(
                &client,
                headless,
                "task",
                &extra,
                Platform::Unix,
            )));
            args.windows(2)
                .filter(|w| w[0] == "--permission-mode")
                .map(|w| w[1].clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(mode(true, &[]), ["acceptEdits"]);
        assert_eq!(mode(true, &["--model", "x"]), ["acceptEdits"]);
        assert_eq!(mode(true, &["--permission-mode", "plan"]), ["plan"]);
        assert_eq!(
            mode(true, &["--permission-mode=plan"]),
            Vec::<String>::new()
        );
        assert_eq!(
            mode(true, &["--dangerously-skip-permissions"]),
            Vec::<String>::new()
        );
        assert_eq!(
            mode(true, &["--permission-prompt-tool", "mcp__x"]),
            Vec::<String>::new()
        );
        // Interactive: the person answers the prompts.
        assert_eq!(mode(false, &[]), Vec::<String>::new());
    }

    #[test]
    fn a_resumed_run_continues_the_session_with_the_budget_left() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let mut headless = launch(&client, true, "task", &[], Platform::Unix);
        headless.resume = true;
        headless.max_budget_usd = Some(1.25);
        headless.extra_settings = Some("{}");
        assert_eq!(
            args(&build(&headless)),
            [
                "-p",
                "--output-format",
                "json",
                "--resume",
                "s-1",
                "--settings",
                "{}",
                "--max-budget-usd",
                "1.250000",
                "--permission-mode",
                "acceptEdits"
            ]
        );
        // The budget is a print-mode flag: an interactive run has none.
        let mut interactive = launch(&client, false, "task", &[], Platform::Unix);
        interactive.resume = true;
        interactive.max_budget_usd = Some(1.25);
        assert_eq!(args(&build(&interactive)), ["task", "--resume", "s-1"]);
    }

    #[test]
    fn interactive_passes_a_prompt_that_fits_as_the_argument_before_client_args() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let extra = [OsString::from("--add-dir"), OsString::from("/x")];
        let prompt = "task\nline two\n";
        let command = build(&launch(&client, false, prompt, &extra, Platform::Unix));
        assert_eq!(command.delivery, PromptDelivery::Argument);
        assert_eq!(
            args(&command),
            [prompt, "--session-id", "s-1", "--add-dir", "/x"]
        );
        let limit = "y".repeat(Platform::Unix.argument_limit());
        assert_eq!(
            build(&launch(&client, false, &limit, &[], Platform::Unix)).delivery,
            PromptDelivery::Argument
        );
    }

    #[test]
    fn interactive_sends_a_prompt_too_long_for_an_argument_on_stdin_on_unix() {
        let client = ClientProgram {
            program: "/bin/claude".into(),
            leading_args: vec![],
        };
        let prompt = "z".repeat(Platform::Unix.argument_limit() + 1);
        let command = build(&launch(&client, false, &prompt, &[], Platform::Unix));
        assert_eq!(command.delivery, PromptDelivery::Stdin);
        assert_eq!(args(&command), ["--session-id", "s-1"]);
        assert_eq!(command.prompt, prompt);
    }

    #[test]
    fn interactive_on_windows_points_at_a_file_when_the_prompt_cannot_be_an_argument() {
        let exe = ClientProgram {
            program: "C:/bin/claude.exe".into(),
            leading_args: vec![],
        };
        let shim = ClientProgram {
            program: "C:/npm/claude.CMD".into(),
            leading_args: vec![],
        };
        let short = "task\n";
        let long = "w".repeat(Platform::Windows.argument_limit() + 1);
        assert_eq!(
            build(&launch(&exe, false, short, &[], Platform::Windows)).delivery,
            PromptDelivery::Argument
        );
        for (client, prompt) in [(&exe, long.as_str()), (&shim, short)] {
            let command = build(&launch(client, false, prompt, &[], Platform::Windows));
            let file = PathBuf::from("/p/.claude/context/runtime/ralph-first-prompt.md");
            assert_eq!(command.delivery, PromptDelivery::File(file.clone()));
            assert_eq!(command.prompt, prompt, "the whole prompt goes to the file");
            let first = &args(&command)[0];
            assert!(
                first.contains(&file.display().to_string())
                    && first.contains("iteration 1 of 7")
                    && !first.contains('\n'),
                "{first}"
            );
            assert_eq!(&args(&command)[1..], ["--session-id", "s-1"]);
        }
    }

    #[test]
    fn find_executable_searches_path_and_checks_paths() {
        let tmp = crate::testdir::new("find");
        let dir = tmp.path().to_path_buf();
        let bin = dir.join("bin dir");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("fake-claude");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let plain = bin.join("not-executable");
        std::fs::write(&plain, "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path_var = std::env::join_paths([dir.join("missing"), bin.clone()]).unwrap();
        let find = |name: &str| find_executable(name, &dir, Some(&path_var), None);
        assert_eq!(find("fake-claude"), Some(exe.clone()));
        assert_eq!(
            find("bin dir/fake-claude"),
            Some(dir.join("bin dir/fake-claude"))
        );
        assert_eq!(find(&exe.display().to_string()), Some(exe.clone()));
        assert_eq!(find("nope"), None);
        assert_eq!(find(""), None);
        #[cfg(unix)]
        assert_eq!(find("not-executable"), None);
        assert_eq!(find_executable("fake-claude", &dir, None, None), None);
        // Windows: a bare name is tried with each PATHEXT extension, never as it is.
        std::fs::write(bin.join("fake-claude.CMD"), "").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                bin.join("fake-claude.CMD"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
        let windows = |name: &str| find_executable(name, &dir, Some(&path_var), Some(".EXE;.CMD"));
        assert_eq!(windows("fake-claude"), Some(bin.join("fake-claude.CMD")));
        assert_eq!(
            windows("fake-claude.CMD"),
            Some(bin.join("fake-claude.CMD"))
        );
        assert_eq!(windows("nope"), None);
    }
}
