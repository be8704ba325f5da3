//! The errors of `ralph-ctl` and their exit codes.

use std::io;
use std::path::PathBuf;

use ralph_core::exit_codes;
use ralph_core::file_error::FileError;
use ralph_core::judge::config::ConfigError;
use ralph_core::observe::prompt_text::PromptError;
use ralph_core::observe::registration::SettingsError;
use ralph_core::own_git::GitError;
use ralph_core::persist::store::StoreError;
use thiserror::Error;

use crate::queue::remote::Refused;

/// Everything a `ralph-ctl` command can fail with.
#[derive(Debug, Error)]
pub(crate) enum CtlError {
    /// Invalid configuration.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// The state file is unusable.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// The prompt or guardrails file is unusable.
    #[error("{0}")]
    Prompt(#[from] PromptError),
    /// A file operation failed.
    #[error(transparent)]
    Io(#[from] FileError),
    /// A command-line value is invalid.
    #[error("{0}")]
    BadArgument(String),
    /// `start` refused to replace a loop.
    #[error("{0}")]
    Refused(String),
    /// A loop was not started: its check cannot run (its program or
    /// runner not found, a usage error), so every claim would be rejected.
    #[error("{0}")]
    CheckCannotRun(String),
    /// `.claude/settings.json` cannot be read.
    #[error("{0}")]
    Registration(#[from] SettingsError),
    /// A path `init` would write holds a link or something else than a
    /// regular file; nothing is written through it or over it.
    #[error("{} {problem}; ralph-ctl init writes only regular files there, never through or over a link: move it aside and run `ralph-ctl init` again", path.display())]
    Unsafe {
        /// The path.
        path: PathBuf,
        /// What stands there ("is a symbolic link", "is not a regular file").
        problem: &'static str,
    },
    /// `.claude/settings.json` cannot be merged.
    #[error("{path} cannot be updated: {problem}; fix it by hand and run `ralph-ctl init` again")]
    Settings {
        /// The settings file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The hook binary to register cannot be found.
    #[error("{0}")]
    HookNotFound(String),
    /// The Claude Code client `RALPH_CLAUDE` names cannot be found.
    #[error("{0}")]
    ClientNotFound(String),
    /// The Claude Code client cannot be run or watched. Never a git
    /// failure: those are [`CtlError::Git`], or [`CtlError::Remote`] on a
    /// queue's shared remote, which keep git's kind.
    #[error("{0}")]
    Client(String),
    /// The shared git remote of a queue run (`--remote`) refused a change
    /// of its records or could not be reached: `source` keeps what it came
    /// to for the claims and the git failure (or the work here) behind it.
    #[error("{}", remote_text(name, *doing, source))]
    Remote {
        /// The remote's name.
        name: String,
        /// What ralph was doing with it.
        doing: RemoteDoing,
        /// How it failed.
        source: Refused,
    },
    /// A git command ralph ran failed, as git's runner told it apart (not
    /// started, timed out, unreachable, raced, refused, ...).
    #[error("{doing} failed: {source}{}", git_fix(source))]
    Git {
        /// What ralph was doing (`git worktree add ... in /project`).
        doing: String,
        /// How git failed.
        source: GitError,
    },
    /// A formula is missing or malformed.
    #[error("{0}")]
    Formula(#[from] crate::formula::FormulaError),
    /// A backlog's source is misspelled or cannot be read.
    #[error("{0}")]
    Queue(#[from] crate::queue::source::QueueError),
    /// A claim could not be judged (`check`): the loop's config or state.
    #[error("{0}")]
    Engine(#[from] ralph_core::engine::EngineError),
    /// A backlog's claims cannot be read or changed.
    #[error("{0}")]
    Claims(#[from] crate::queue::claims::store::ClaimError),
}

impl CtlError {
    /// The exit code of this error.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            CtlError::Refused(_) | CtlError::CheckCannotRun(_) => exit_codes::REFUSED,
            CtlError::BadArgument(_) => exit_codes::USAGE,
            CtlError::Queue(e) if e.is_misspelled() => exit_codes::USAGE,
            CtlError::ClientNotFound(_) => exit_codes::CLIENT_NOT_FOUND,
            _ => exit_codes::ERROR,
        }
    }

    /// Wraps a git failure with what ralph was doing.
    pub(crate) fn git(doing: impl Into<String>) -> impl FnOnce(GitError) -> CtlError {
        let doing = doing.into();
        move |source| CtlError::Git { doing, source }
    }

    /// Wraps an I/O error with what was being done to which file.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> CtlError {
        let path = path.into();
        move |source| CtlError::Io(FileError::new(action, path, source))
    }
}

/// What ralph was doing with a queue's shared remote when it failed
/// ([`CtlError::Remote`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RemoteDoing {
    /// Reading its records (`ralph-ctl queue --remote`).
    Reading,
    /// Draining the backlog through it (`run --queue --remote`): claiming,
    /// settling, releasing.
    Draining,
}

/// How a failure of a queue's shared remote `name` reads, with the fix.
fn remote_text(name: &str, doing: RemoteDoing, refused: &Refused) -> String {
    match (doing, refused) {
        (RemoteDoing::Reading, refused) => format!(
            "remote {name} could not be read ({}); check `git ls-remote {name}`",
            refused.cause()
        ),
        (RemoteDoing::Draining, Refused::Rejected(why)) => {
            format!("remote {name} refused: {why}")
        }
        (RemoteDoing::Draining, Refused::Unreachable(why)) => format!(
            "remote {name} could not be reached for {} s ({why}); the items stay as they were",
            crate::queue::remote::PATIENCE.as_secs()
        ),
        (RemoteDoing::Draining, Refused::Forbidden(why)) => format!(
            "remote {name} refuses ralph's queue records ({why}): it takes no push outside \
             refs/heads/, or a hook refuses them; use a remote that takes them, or drain without \
             --remote"
        ),
    }
}

/// What a person can do about a git failure of this kind, as the end of
/// its message (empty when what git said is all there is to tell).
fn git_fix(error: &GitError) -> &'static str {
    match error {
        GitError::CannotStart(_) => "; install git or put it on PATH, then run the command again",
        GitError::TimedOut { .. } => {
            "; something holds the repository (a lock, a slow filesystem, a hook waiting): \
             free it and run the command again"
        }
        GitError::Unreachable { .. } => {
            "; check the remote with `git ls-remote` and run the command again"
        }
        GitError::Raced { .. } => {
            "; another writer changed the same refs meanwhile: run the command again"
        }
        GitError::Refused { .. } => {
            "; the remote refuses it whatever the moment: change the remote's rules or use another remote"
        }
        GitError::Place(_)
        | GitError::Unsafe(_)
        | GitError::NotARepository { .. }
        | GitError::Failed { .. } => "",
    }
}

/// What a command returns: its exit code, or the error to report.
pub(crate) type CmdResult = Result<i32, CtlError>;

/// How a command that printed to a reader ends: with `code` once its output
/// is written, and with `code` too when the reader went away early
/// (`ralph-ctl log | head -1`): it had what it wanted. Any other failure to
/// write is an error.
pub(crate) fn written(result: io::Result<()>, code: i32) -> CmdResult {
    match result {
        Ok(()) => Ok(code),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(code),
        Err(e) => Err(CtlError::io("write to", "standard output")(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_git_failure_keeps_its_kind_and_says_what_to_do() {
        let error = CtlError::git("git fetch in /p")(GitError::TimedOut {
            timeout: Duration::from_secs(30),
        });
        assert!(matches!(
            error,
            CtlError::Git {
                source: GitError::TimedOut { .. },
                ..
            }
        ));
        let text = error.to_string();
        assert!(
            text.starts_with("git fetch in /p failed: git did not answer within 30 s; "),
            "{text}"
        );
        assert!(text.contains("run the command again"), "{text}");
        assert_eq!(error.exit_code(), exit_codes::ERROR);
    }

    #[test]
    fn a_remote_s_failure_keeps_git_s_kind_behind_its_message() {
        use crate::queue::remote::Cause;
        let timed_out: Refused = GitError::TimedOut {
            timeout: Duration::from_secs(60),
        }
        .into();
        let error = CtlError::Remote {
            name: "origin".into(),
            doing: RemoteDoing::Draining,
            source: timed_out,
        };
        assert!(matches!(
            &error,
            CtlError::Remote {
                source: Refused::Unreachable(Cause::Git(GitError::TimedOut { .. })),
                ..
            }
        ));
        assert_eq!(
            error.to_string(),
            "remote origin could not be reached for 600 s (git did not answer within 60 s); \
             the items stay as they were"
        );
        let source = std::error::Error::source(&error).and_then(std::error::Error::source);
        assert!(
            source
                .and_then(|s| s.downcast_ref::<Cause>())
                .is_some_and(|c| matches!(c, Cause::Git(GitError::TimedOut { .. }))),
            "{source:?}"
        );

        let raced: Refused = GitError::Raced {
            why: "refs/ralph/queue/x\t[rejected] (stale info)".into(),
        }
        .into();
        assert!(matches!(
            raced,
            Refused::Rejected(Cause::Git(GitError::Raced { .. }))
        ));
        let refused: Refused = GitError::Refused {
            why: "hook declined".into(),
        }
        .into();
        let reading = CtlError::Remote {
            name: "origin".into(),
            doing: RemoteDoing::Reading,
            source: refused,
        };
        assert!(matches!(
            &reading,
            CtlError::Remote {
                source: Refused::Forbidden(Cause::Git(GitError::Refused { .. })),
                ..
            }
        ));
        assert_eq!(
            reading.to_string(),
            "remote origin could not be read (hook declined); check `git ls-remote origin`"
        );
        assert_eq!(reading.exit_code(), exit_codes::ERROR);
    }

    #[test]
    fn a_git_failure_with_nothing_to_add_is_what_git_said() {
        let error = CtlError::git("git status in /p")(GitError::Failed {
            status: Some(128),
            stderr: "fatal: bad object".into(),
        });
        assert_eq!(
            error.to_string(),
            "git status in /p failed: fatal: bad object"
        );
    }
}
