//! The one way ralph runs git, in both crates: [`GitCall`].
//!
//! Every call starts as a process group of its own ([`GroupChild`]) with a
//! deadline: at the deadline the whole group is killed, an ssh that git
//! started included, and its output is never waited for past a short grace
//! (a process that left the group may still hold a pipe). Every call also
//! gets what keeps it from waiting on a person: `GIT_TERMINAL_PROMPT=0`,
//! ssh in batch mode ([`SshCommand`]: the person's own ssh command with
//! `-o BatchMode=yes`), and a fixed locale (`LC_ALL=C`, no `LANGUAGE`), so
//! that what git says on stderr reads the same everywhere and is classified
//! in one place ([`GitError`]).

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{FIXED_CONFIG, GitPlace, PlaceError, REMOVED_VARS};
use crate::process::group::{Ended, GroupChild, Lifetime, Waiting};

/// The program every git call runs, ralph's and the tests' alike: git as
/// the `PATH` finds it. The only place either crate starts git.
fn git_program() -> Command {
    Command::new("git")
}

/// How long a call may take when its caller names no deadline: local work
/// (a rebase, a worktree checked out) that runs longer waits on something
/// that will not come (a lock, a filesystem that hangs).
pub const LOCAL_TIMEOUT: Duration = Duration::from_secs(600);

/// How long git's output may go on after git has exited and its group was
/// killed (something that left the group may still hold it).
pub const OUTPUT_GRACE: Duration = Duration::from_millis(200);

/// What a git call that exited 0 printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitOutput {
    /// Everything on stdout.
    pub stdout: Vec<u8>,
    /// Everything on stderr, as text.
    pub stderr: String,
}

impl GitOutput {
    /// Stdout as text, trimmed (what a ref, a commit id or a setting reads as).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

/// Why a git call did not do what was asked, told apart once here from
/// git's exit and its (fixed-locale) stderr, so that no caller matches
/// git's text itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GitError {
    /// git could not be started (none on this machine).
    #[error("git cannot run: {0}")]
    CannotStart(String),
    /// No repository ralph can settle holds the folder: no git runs there.
    #[error("git cannot be run safely: {0}")]
    Place(#[from] PlaceError),
    /// The repository's configuration names something ralph cannot turn
    /// off (a driver whose name a `-c` option cannot carry): no git runs.
    #[error("git cannot be run safely: {0}")]
    Unsafe(String),
    /// git found no repository where it was sent.
    #[error("{stderr}")]
    NotARepository {
        /// What git said.
        stderr: String,
    },
    /// Still running at its deadline: its whole group was killed.
    #[error("git did not answer within {} s", timeout.as_secs())]
    TimedOut {
        /// The deadline it was given, from its start.
        timeout: Duration,
    },
    /// The remote refuses such a push at all (a hook, a protected ref, no
    /// `--atomic`): trying again changes nothing.
    #[error("{why}")]
    Refused {
        /// The refused refs, or what git said.
        why: String,
    },
    /// Another writer won: a push's lease or fast-forward failed, a ref or
    /// lock was taken meanwhile. Read again, then try again.
    #[error("{why}")]
    Raced {
        /// The refs that lost, or what git said.
        why: String,
    },
    /// The remote could not be reached, or git failed on the way there.
    #[error("{why}")]
    Unreachable {
        /// What git said, on one line.
        why: String,
    },
    /// Anything else: git exited with `status` (`None`: killed by a signal,
    /// not waited for, or its output never ended).
    #[error("{}", failed_text(*status, stderr))]
    Failed {
        /// Its exit code.
        status: Option<i32>,
        /// What it said on stderr, trimmed.
        stderr: String,
    },
}

/// How [`GitError::Failed`] reads: what git said, or how it ended.
fn failed_text(status: Option<i32>, stderr: &str) -> String {
    match (stderr.is_empty(), status) {
        (false, _) => stderr.to_string(),
        (true, Some(code)) => format!("git exited with {code} and said nothing"),
        (true, None) => "git was killed and said nothing".into(),
    }
}

/// One git call of ralph's: built, then [`GitCall::run`] once.
#[derive(Debug)]
pub struct GitCall {
    command: Command,
    args: Vec<OsString>,
    timeout: Duration,
    input: Option<Vec<u8>>,
    reaching: bool,
    waiting: Waiting,
}

impl GitCall {
    /// `git` run from `cwd` in `place` with the fixed configuration every
    /// call of ralph's gets, so that nothing the repository's or the
    /// user's configuration says can make it start another program:
    ///
    /// - `GIT_DIR`, `GIT_COMMON_DIR` and `GIT_WORK_TREE` from [`GitPlace`]:
    ///   git never looks for its repository itself;
    /// - [`FIXED_CONFIG`];
    /// - `--no-pager` (git never pages into a pipe anyway);
    /// - `GIT_CONFIG_NOSYSTEM=1`: the system-wide configuration is not read;
    /// - `GIT_NO_REPLACE_OBJECTS=1`: a `refs/replace/` ref (the agent can
    ///   write refs) does not change what a commit holds;
    /// - `GIT_OPTIONAL_LOCKS=0`: a command that only reads (`git status`)
    ///   takes no lock and writes no index;
    /// - `GIT_NO_LAZY_FETCH=1` (git 2.45 and later) and `GIT_ALLOW_PROTOCOL`
    ///   empty: no transport, `core.sshCommand` or remote helper runs (a
    ///   call that reaches a remote says so: [`GitCall::reaching`]);
    ///   an empty `GIT_ASKPASS` and `GIT_EDITOR` and `GIT_SEQUENCE_EDITOR`
    ///   `:`: no askpass program, no editor;
    /// - [`REMOVED_VARS`] removed;
    /// - and what every call gets ([`GitCall::plain`]).
    pub fn new(place: &GitPlace, cwd: &Path) -> GitCall {
        let mut command = git_program();
        command.arg("--no-pager");
        for setting in FIXED_CONFIG {
            command.args(["-c", setting]);
        }
        command
            .current_dir(cwd)
            .env("GIT_DIR", &place.git_dir)
            .env("GIT_COMMON_DIR", &place.common_dir)
            .env("GIT_WORK_TREE", &place.work_tree)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_NO_REPLACE_OBJECTS", "1")
            .env("GIT_NO_LAZY_FETCH", "1")
            .env("GIT_ALLOW_PROTOCOL", "")
            .env("GIT_ASKPASS", "")
            .env("GIT_EDITOR", ":")
            .env("GIT_SEQUENCE_EDITOR", ":");
        for var in REMOVED_VARS {
            command.env_remove(var);
        }
        GitCall::plain(command)
    }

    /// [`GitCall::new`] in the place ralph settles for `folder`
    /// ([`GitPlace::find`]), run from `folder`.
    pub fn find(folder: &Path) -> Result<GitCall, GitError> {
        let place = GitPlace::find(folder)?;
        Ok(GitCall::new(&place, folder))
    }

    /// `command` (git, or a stand-in in the tests) with what every call
    /// gets: no terminal prompt, ssh in batch mode, the fixed locale.
    fn plain(mut command: Command) -> GitCall {
        command
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", SshCommand::from_environment().as_str())
            .env("LC_ALL", "C")
            .env_remove("LANGUAGE");
        GitCall {
            command,
            args: Vec::new(),
            timeout: LOCAL_TIMEOUT,
            input: None,
            reaching: false,
            waiting: Waiting::Pidfd,
        }
    }

    /// Adds one argument (after every `-c` setting).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> GitCall {
        self.args.push(arg.as_ref().to_os_string());
        self
    }

    /// Adds arguments (after every `-c` setting).
    pub fn args<I, S>(mut self, args: I) -> GitCall
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
        self
    }

    /// `-c setting` for this call (before the command's own arguments).
    pub fn config(mut self, setting: impl AsRef<OsStr>) -> GitCall {
        self.command.arg("-c").arg(setting);
        self
    }

    /// Sets one variable of git's environment.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> GitCall {
        self.command.env(key, value);
        self
    }

    /// The deadline, counted from the start of [`GitCall::run`].
    pub fn timeout(mut self, timeout: Duration) -> GitCall {
        self.timeout = timeout;
        self
    }

    /// Bytes written to git's stdin (otherwise it reads nothing).
    pub fn input(mut self, input: impl Into<Vec<u8>>) -> GitCall {
        self.input = Some(input.into());
        self
    }

    /// This call reaches a remote: the transports `protocols` allow
    /// (`GIT_ALLOW_PROTOCOL`, never `ext::`), through `ssh`; a failure on
    /// the way is [`GitError::Unreachable`] unless the remote refused.
    pub fn reaching(mut self, protocols: &str, ssh: &SshCommand) -> GitCall {
        self.command
            .args(["-c", "protocol.ext.allow=never"])
            .env("GIT_ALLOW_PROTOCOL", protocols)
            .env("GIT_SSH_COMMAND", ssh.as_str());
        self.reaching = true;
        self
    }

    /// Runs git until it exits or its deadline: what it printed when it
    /// exited 0, else why not.
    pub fn run(mut self) -> Result<GitOutput, GitError> {
        let deadline = Instant::now() + self.timeout;
        self.command
            .args(&self.args)
            .stdin(if self.input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Not guarded: ralph waits for git anyway, and a guard's process
        // would cost every stop a start.
        let mut child = GroupChild::spawn(&mut self.command, Lifetime::Independent)
            .map_err(|e| GitError::CannotStart(e.to_string()))?;
        if let (Some(input), Some(mut stdin)) = (self.input, child.child().stdin.take()) {
            // A writer of its own: git may read nothing before it exits,
            // and the pipe closes when its group is killed.
            std::thread::spawn(move || {
                let _ = stdin.write_all(&input);
            });
        }
        match child.collect_outputs_waiting(deadline, OUTPUT_GRACE, self.waiting) {
            Ended::TimedOut => Err(GitError::TimedOut {
                timeout: self.timeout,
            }),
            Ended::Failed => Err(GitError::Failed {
                status: None,
                stderr: "git could not be waited for".into(),
            }),
            Ended::Exited {
                status,
                stdout: Some(stdout),
                stderr: Some(stderr),
            } => {
                let stderr = String::from_utf8_lossy(&stderr).into_owned();
                if status.success() {
                    Ok(GitOutput { stdout, stderr })
                } else {
                    Err(classify(self.reaching, status.code(), &stdout, &stderr))
                }
            }
            Ended::Exited { .. } => Err(GitError::Failed {
                status: None,
                stderr: "git's output did not end: a process it started still holds it".into(),
            }),
        }
    }

    /// [`GitCall::run`], its stdout as trimmed text.
    pub fn text(self) -> Result<String, GitError> {
        self.run().map(|out| out.text())
    }
}

/// What a failed git call comes to, from its exit code and what it printed
/// (in the fixed locale). A call that reaches a remote: the refs a push
/// lists as refused (`--porcelain`: `!` before each) are a race lost
/// ([`GitError::Raced`]) or a refusal ([`GitError::Refused`],
/// [`refuses_outright`]); anything else failed on the way
/// ([`GitError::Unreachable`]). A local call: a lock or a ref another
/// writer held is a race, no repository is said as such, and the rest is
/// [`GitError::Failed`].
pub(crate) fn classify(
    reaching: bool,
    status: Option<i32>,
    stdout: &[u8],
    stderr: &str,
) -> GitError {
    if reaching {
        let stdout = String::from_utf8_lossy(stdout);
        let refused: Vec<&str> = stdout.lines().filter(|l| l.starts_with('!')).collect();
        return if stderr.contains("does not support --atomic") {
            GitError::Refused {
                why: one_line(stderr),
            }
        } else if refused.is_empty() {
            GitError::Unreachable {
                why: one_line(stderr),
            }
        } else if refused.iter().any(|l| refuses_outright(l)) {
            GitError::Refused {
                why: refused.join("; "),
            }
        } else {
            GitError::Raced {
                why: refused.join("; "),
            }
        };
    }
    let stderr = stderr.trim().to_string();
    const RACES: &[&str] = &[
        "cannot lock ref",
        "Unable to create '",
        "could not lock config file",
        "but expected",
    ];
    if RACES.iter().any(|race| stderr.contains(race)) {
        GitError::Raced { why: stderr }
    } else if stderr.contains("not a git repository") {
        GitError::NotARepository { stderr }
    } else {
        GitError::Failed { status, stderr }
    }
}

/// Whether a refused ref's `--porcelain` line says the remote takes no
/// such push at all (a hook, a protected ref), not that another push won
/// the race: a remote that loses the race for its own ref lock answers
/// `[remote rejected] (failed to update ref)`, `(failed to lock)` or, for
/// an atomic push, `(atomic transaction failed)`: a race lost like
/// `[rejected] (stale info)`.
pub(crate) fn refuses_outright(line: &str) -> bool {
    let raced = [
        "failed to update ref",
        "failed to lock",
        "cannot lock",
        "incorrect old value",
        // An atomic push whose ref transaction lost to another push.
        "atomic transaction failed",
    ];
    line.contains("[remote rejected]") && !raced.iter().any(|r| line.contains(r))
}

/// What git said, on one line of at most 300 characters.
fn one_line(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if line.is_empty() {
        "git said nothing".into()
    } else {
        line.chars().take(300).collect()
    }
}

/// The ssh command git reaches a remote through (`GIT_SSH_COMMAND`, which
/// wins over every other setting): the person's own (`GIT_SSH_COMMAND`,
/// else `core.sshCommand`, else `GIT_SSH`, else `ssh`), with
/// `-o BatchMode=yes` added for OpenSSH, so that ssh fails at once where it
/// would ask for a password, a passphrase or a host key. `PuTTY`'s programs
/// (and the `simple` variant) take no such option and are left as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshCommand(String);

/// Where the person's ssh command can come from, in git's order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshSources {
    /// `GIT_SSH_COMMAND` (a shell command line).
    pub env_command: Option<String>,
    /// `core.sshCommand` (a shell command line).
    pub config_command: Option<String>,
    /// `GIT_SSH` (a program, no arguments).
    pub program: Option<String>,
    /// `GIT_SSH_VARIANT`, else `ssh.variant`.
    pub variant: Option<String>,
}

impl SshCommand {
    /// The command from `sources`, as git would pick it, in batch mode.
    pub fn from_sources(sources: &SshSources) -> SshCommand {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
        let command = given(&sources.env_command)
            .or_else(|| given(&sources.config_command))
            .or_else(|| given(&sources.program).map(|p| shell_quoted(&p)))
            .unwrap_or_else(|| "ssh".into());
        let program = crate::observe::resolved::program_of(&command).unwrap_or_default();
        let variant = sources
            .variant
            .clone()
            .filter(|v| !v.is_empty() && v != "auto")
            .unwrap_or_else(|| variant_of(&program));
        let takes_options = !matches!(
            variant.to_ascii_lowercase().as_str(),
            "plink" | "putty" | "tortoiseplink" | "simple"
        );
        if takes_options {
            SshCommand(format!("{command} -o BatchMode=yes"))
        } else {
            SshCommand(command)
        }
    }

    /// The person's command from this process's environment only (every
    /// call that reaches no remote: it never runs, yet is set).
    pub fn from_environment() -> SshCommand {
        let var = |name: &str| std::env::var(name).ok();
        SshCommand::from_sources(&SshSources {
            env_command: var("GIT_SSH_COMMAND"),
            config_command: None,
            program: var("GIT_SSH"),
            variant: var("GIT_SSH_VARIANT"),
        })
    }

    /// The person's command from this process's environment and, when it
    /// names none, the repository's configuration in `place`
    /// (`core.sshCommand`, `ssh.variant`): read once, when a run that
    /// reaches a remote starts.
    pub fn resolve(place: &GitPlace) -> SshCommand {
        let var = |name: &str| std::env::var(name).ok();
        let mut sources = SshSources {
            env_command: var("GIT_SSH_COMMAND"),
            config_command: None,
            program: var("GIT_SSH"),
            variant: var("GIT_SSH_VARIANT"),
        };
        let listed = GitCall::new(place, &place.work_tree)
            .args(["config", "--null", "--get-regexp"])
            .arg(r"^(core\.sshcommand|ssh\.variant)$")
            .timeout(Duration::from_secs(10))
            .run();
        if let Ok(listed) = listed {
            for entry in listed.stdout.split(|b| *b == 0) {
                let entry = String::from_utf8_lossy(entry);
                match entry.split_once('\n') {
                    Some(("core.sshcommand", value)) => {
                        sources.config_command = Some(value.to_string());
                    }
                    Some(("ssh.variant", value)) if sources.variant.is_none() => {
                        sources.variant = Some(value.to_string());
                    }
                    _ => {}
                }
            }
        }
        SshCommand::from_sources(&sources)
    }

    /// The command line, as `GIT_SSH_COMMAND` holds it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// git's ssh variant of `program`, by its file name (as git guesses it).
fn variant_of(program: &str) -> String {
    let name = program
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let name = name.strip_suffix(".exe").unwrap_or(&name);
    match name {
        "plink" | "tortoiseplink" | "putty" => name.to_string(),
        _ => "ssh".into(),
    }
}

/// `text` as one shell word.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// git as a person runs it in `dir`, their configuration and none of
/// ralph's settings: for the unit tests of both crates that build
/// repositories to test ralph's git against (the one place they start git).
/// Never called by the binaries.
#[doc(hidden)]
pub fn persons_git(dir: &Path) -> Command {
    let mut command = git_program();
    command.current_dir(dir);
    command
}

/// A [`GitCall`] of any program (a stand-in for git) in the tests.
#[cfg(test)]
pub(crate) fn stand_in(command: Command, waiting: Waiting) -> GitCall {
    let mut call = GitCall::plain(command);
    call.waiting = waiting;
    call
}

#[cfg(test)]
mod tests;
