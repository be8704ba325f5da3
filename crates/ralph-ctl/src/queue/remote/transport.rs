//! The remote itself, as the run found it at its start: every fetch, push
//! and listing of it through ralph's git runner (`own_git::GitCall`), the
//! safe transports only, ssh in batch mode, each call within a deadline
//! that stops git whole, and what a failed call comes to ([`Refused`],
//! its [`Cause`] kept).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ralph_core::own_git::{GitCall, GitError, GitPlace, SshCommand};

use crate::error::CtlError;

/// How long one git call on the remote may take before it is killed and
/// counted as the remote unreachable.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The transports a fetch or push may use: not `ext::` (it runs a command
/// the URL names), nor anything git adds later.
const SAFE_PROTOCOLS: &str = "file:git:http:https:ssh";

/// Refs as the remote lists them: each ref's name, with its commit.
pub(crate) type RefCommits = BTreeMap<String, String>;

/// The remote as the run found it at its start.
#[derive(Clone, Debug)]
pub(crate) struct Remote {
    /// The main checkout.
    pub(crate) root: PathBuf,
    /// Its name (`origin`).
    pub(crate) name: String,
    /// Its URL, read once.
    pub(crate) url: String,
    /// The ssh command every call reaches it through (the person's, in
    /// batch mode), read once.
    pub(crate) ssh: SshCommand,
    /// How long one git call on it may take ([`CALL_TIMEOUT`]).
    pub(crate) timeout: Duration,
}

/// Why a change (or a reading) of the remote did not happen: what it
/// comes to for the claim protocol, and its [`Cause`], git's kind kept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// The remote refused it: the ref no longer holds what was read (another
    /// worker changed it), or a push to the base was not a fast-forward
    /// ([`GitError::Raced`]).
    #[error("refused: {0}")]
    Rejected(#[source] Cause),
    /// The remote could not be reached, or git (or the work here) failed on
    /// the way.
    #[error("unreachable: {0}")]
    Unreachable(#[source] Cause),
    /// The remote refuses such pushes at all (`[remote rejected]`: a hook,
    /// a protected ref, refs outside `refs/heads/` not allowed:
    /// [`GitError::Refused`]), or has no branch to land on.
    #[error("the remote refuses the push: {0}")]
    Forbidden(#[source] Cause),
}

/// What a [`Refused`] came from.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Cause {
    /// A git call, its failure as ralph's runner told it apart (timed out,
    /// unreachable, raced, refused, ...).
    #[error("{0}")]
    Git(#[from] GitError),
    /// The remote has no branch of this name to land on.
    #[error("the remote has no branch {0} to land on")]
    NoBranch(String),
    /// Work on this machine failed on the way (an object or a ref written,
    /// the fetch lock taken).
    #[error("{0}")]
    Here(#[source] Box<CtlError>),
}

impl Refused {
    /// Work on this machine that failed on the way: counted as the remote
    /// out of reach, as a git call that failed would be.
    pub(crate) fn here(e: impl Into<CtlError>) -> Refused {
        Refused::Unreachable(Cause::Here(Box::new(e.into())))
    }

    /// What it came from.
    pub(crate) fn cause(&self) -> &Cause {
        match self {
            Refused::Rejected(cause) | Refused::Unreachable(cause) | Refused::Forbidden(cause) => {
                cause
            }
        }
    }
}

impl From<GitError> for Refused {
    /// What a failed call on the remote comes to: a push's refs refused
    /// outright or lost to another push, else the remote out of reach.
    fn from(e: GitError) -> Refused {
        match e {
            GitError::Refused { .. } => Refused::Forbidden(e.into()),
            GitError::Raced { .. } => Refused::Rejected(e.into()),
            e => Refused::Unreachable(e.into()),
        }
    }
}

impl Remote {
    /// The remote `name` of the repository at `root`, refused with the fix
    /// when the repository has none of that name.
    pub(crate) fn find(root: &Path, name: &str) -> Result<Remote, CtlError> {
        let valid = ralph_core::judge::config::validate_remote_name(name)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                CtlError::BadArgument(format!(
                    "--remote {name:?} is not a remote's name: give one that `git remote` lists"
                ))
            })?;
        let key = format!("remote.{valid}.url");
        // `git config --get` exits 1, saying nothing, for a key it does
        // not have; any other failure is git's, said with its kind.
        let url = match crate::driver::worktree::git(root, &["config", "--get", &key]) {
            Ok(url) => url,
            Err(CtlError::Git {
                source: GitError::Failed {
                    status: Some(1), ..
                },
                ..
            }) => {
                return Err(CtlError::BadArgument(format!(
                    "--remote {valid}: this repository has no remote of that name (`git remote -v` \
                     lists them; `git remote add {valid} URL` adds one)"
                )));
            }
            Err(e) => return Err(e),
        };
        if url.starts_with("ext::") || url.starts_with('-') {
            return Err(CtlError::BadArgument(format!(
                "--remote {valid}: its URL {url:?} runs a command; give a remote reached over file, git, http(s) or ssh"
            )));
        }
        let ssh = GitPlace::find(root).map_or_else(
            |_| SshCommand::from_environment(),
            |place| SshCommand::resolve(&place),
        );
        Ok(Remote {
            root: root.to_path_buf(),
            name: valid,
            url,
            ssh,
            timeout: CALL_TIMEOUT,
        })
    }

    /// The same remote, each call on it given at most `timeout`.
    pub(crate) fn within(&self, timeout: Duration) -> Remote {
        Remote {
            timeout,
            ..self.clone()
        }
    }

    /// git in the main checkout with the driver's safe configuration, the
    /// safe transports only, ssh in batch mode, nothing asked of a person,
    /// and at most [`Remote::timeout`]: its stdout, or why not.
    fn call(&self, args: &[&str]) -> Result<String, GitError> {
        let out = self
            .local()?
            .reaching(SAFE_PROTOCOLS, &self.ssh)
            .args(args)
            .run()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// git in the main checkout with the driver's safe configuration, on
    /// this repository alone, at most [`Remote::timeout`].
    pub(super) fn local(&self) -> Result<GitCall, GitError> {
        Ok(
            ralph_core::own_git::safe_git(&self.root, ralph_core::observe::progress::GIT_TIMEOUT)?
                .timeout(self.timeout),
        )
    }

    /// `git fetch` of `refspecs` from the remote (objects, and the refs the
    /// refspecs name), nothing else.
    pub(crate) fn fetch(&self, refspecs: &[&str]) -> Result<(), Refused> {
        let mut args = vec![
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            "--no-recurse-submodules",
            &self.url,
        ];
        args.extend_from_slice(refspecs);
        self.call(&args).map(|_| ()).map_err(Refused::from)
    }

    /// The remote's branch `base` as the remote has it now: its commit (as
    /// the remote names it, fetched), also set as `refs/remotes/<name>/<base>`
    /// for the person. The commit, not that ref, is what an item starts from
    /// and lands on: the agents of other items can write this repository's
    /// refs meanwhile, and a commit id is the remote's word.
    pub(crate) fn fetch_base(&self, base: &str) -> Result<String, Refused> {
        let wanted = format!("refs/heads/{base}");
        let out = self.call(&["ls-remote", "--refs", &self.url, &wanted])?;
        let commit = out
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .find(|(_, name)| *name == wanted)
            .map(|(sha, _)| sha.to_string())
            .ok_or_else(|| Refused::Forbidden(Cause::NoBranch(base.to_string())))?;
        self.fetch(&[&commit])?;
        let _ = crate::driver::worktree::git(
            &self.root,
            &["update-ref", &self.tracking(base), &commit],
        );
        Ok(commit)
    }

    /// Where this machine keeps the remote's branch `base`.
    pub(crate) fn tracking(&self, base: &str) -> String {
        format!("refs/remotes/{}/{base}", self.name)
    }

    /// Pushes `refspecs`, each ref changed only when it holds what `leases`
    /// expects of it (`REF:EXPECTED`, an empty EXPECTED: the ref must not
    /// exist); `Ok` when every ref took its new value.
    pub(crate) fn push(&self, refspecs: &[&str], leases: &[String]) -> Result<(), Refused> {
        self.push_with(refspecs, leases, false)
    }

    /// [`Remote::push`], `--atomic` when `atomic`.
    fn push_with(&self, refspecs: &[&str], leases: &[String], atomic: bool) -> Result<(), Refused> {
        let mut args = vec!["push", "--porcelain", "--quiet", "--no-verify"];
        if atomic {
            args.push("--atomic");
        }
        let leases: Vec<String> = leases
            .iter()
            .map(|l| format!("--force-with-lease={l}"))
            .collect();
        args.extend(leases.iter().map(String::as_str));
        args.push(&self.url);
        args.extend_from_slice(refspecs);
        // `--porcelain` lists each ref, `!` before one refused: the runner
        // tells a race lost from a refusal.
        self.call(&args).map(|_| ()).map_err(Refused::from)
    }

    /// [`Remote::push`] of several refs at once, all or none (`--atomic`).
    pub(crate) fn push_atomic(&self, refspecs: &[&str], leases: &[String]) -> Result<(), Refused> {
        self.push_with(refspecs, leases, true)
    }

    /// Every ref under `prefix` on the remote, by name, with its commit.
    pub(crate) fn list(&self, prefix: &str) -> Result<RefCommits, Refused> {
        let pattern = format!("{prefix}*");
        let out = self.call(&["ls-remote", "--refs", &self.url, &pattern])?;
        Ok(out
            .lines()
            .filter_map(|line| {
                let (sha, name) = line.split_once('\t')?;
                Some((name.to_string(), sha.to_string()))
            })
            .collect())
    }
}
