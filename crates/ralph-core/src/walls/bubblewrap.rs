//! bubblewrap: the one trusted `bwrap` ([`find_bwrap`], tried once by
//! [`try_bwrap`]) and the walls as its arguments ([`Walls::bubblewrap_args`]),
//! the filter given on a pipe.

use super::*;

/// The usual places of bubblewrap: a `bwrap` found only in a folder the
/// agent can write (the project's `node_modules/.bin`, say) is never taken.
pub(super) const BWRAP_PLACES: [&str; 2] = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"];

/// `bwrap` in its usual places, else on PATH, taken only where the agent
/// cannot have put it: an executable owned by root that nobody else can
/// write, in a folder likewise (links resolved first). A `bwrap` of the
/// agent's would run every check without walls.
pub(super) fn find_bwrap() -> Option<PathBuf> {
    let usual = BWRAP_PLACES.iter().map(PathBuf::from);
    let on_path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    usual
        .chain(
            on_path
                .into_iter()
                .filter(|dir| dir.is_absolute())
                .map(|dir| dir.join("bwrap")),
        )
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .find(|p| is_executable(p) && trusted(p) && p.parent().is_some_and(trusted))
}

/// Owned by root, and writable by its owner alone (Unix).
#[cfg(unix)]
pub(super) fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
}

#[cfg(not(unix))]
pub(super) fn trusted(_path: &Path) -> bool {
    false
}

#[cfg(unix)]
pub(super) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
pub(super) fn is_executable(_path: &Path) -> bool {
    false
}

/// Why bubblewrap cannot run here ([`try_bwrap`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum BwrapError {
    /// It could not be started.
    #[error("{0}")]
    CannotStart(#[source] std::io::Error),
    /// It ran and failed: the first line it said (`it failed` when none).
    #[error("{0}")]
    Failed(String),
}

/// Runs `bwrap --ro-bind / / … true`: whether this machine lets it build a
/// mount namespace (user namespaces may be off, a container may forbid it).
pub(super) fn try_bwrap(bwrap: &Path) -> Result<(), BwrapError> {
    let output = Command::new(bwrap)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--dev-bind",
            "/dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-pid",
            "--unshare-net",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(BwrapError::CannotStart)?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(BwrapError::Failed(
        said.lines()
            .next()
            .unwrap_or("it failed")
            .trim()
            .to_string(),
    ))
}

impl Walls {
    /// bubblewrap's arguments (but the unix-socket filter's, which needs a
    /// file descriptor: see [`Walls::bubblewrap`]). Every mount lies over
    /// those before it, so they go from the shallowest path to the deepest:
    /// the checked folder inside `/tmp` is bound again over the fresh
    /// tmpfs, a worktree inside the read-only `.claude/` is writable again,
    /// and its own `.claude/` and `.git` read-only again, whatever the order
    /// of the lists.
    pub fn bubblewrap_args(&self) -> Vec<OsString> {
        let mut mounts: Vec<(&str, &Path)> = Vec::new();
        mounts.extend(TEMP_FOLDERS.iter().map(|p| ("--tmpfs", Path::new(*p))));
        mounts.extend(
            self.seen_in_temp
                .iter()
                .map(|p| ("--ro-bind-try", p.as_path())),
        );
        mounts.extend(self.writable.iter().map(|p| ("--bind-try", p.as_path())));
        mounts.extend(
            self.read_only
                .iter()
                .map(|p| ("--ro-bind-try", p.as_path())),
        );
        mounts.extend(
            self.hidden
                .iter()
                .filter(|p| p.is_dir())
                .map(|p| ("--tmpfs", p.as_path())),
        );
        mounts.sort_by_key(|(_, path)| path.components().count());
        let mut args: Vec<OsString> = Vec::new();
        // A pid namespace of its own, with its own /proc: through the host's,
        // `/proc/<pid>/root` of any process outside would lead past every
        // wall, and no process outside can be signalled. A network
        // namespace of its own, loopback only, unless it needs the network:
        // the person's services on 127.0.0.1 and the host's abstract unix
        // sockets are out of reach. A session of its own: no terminal to
        // push input into.
        let base = [
            ("--ro-bind", Path::new("/")),
            ("--dev-bind", Path::new("/dev")),
            ("--proc", Path::new("/proc")),
        ];
        for (flag, path) in base.into_iter().chain(mounts) {
            args.push(flag.into());
            args.push(path.into());
            if flag != "--tmpfs" && flag != "--proc" {
                args.push(path.into());
            }
        }
        // No capability, as root too (bubblewrap keeps root's otherwise:
        // with them a check unmounts the tmpfs over the key, or remounts `/`
        // read-write). bubblewrap always sets no new privileges.
        if !self.network {
            args.push("--unshare-net".into());
        }
        args.extend(
            [
                "--unshare-pid",
                "--new-session",
                "--die-with-parent",
                "--cap-drop",
                "ALL",
            ]
            .map(OsString::from),
        );
        args
    }

    /// `inner` as bubblewrap's command, with the unix-socket filter handed
    /// to it on a pipe (`--seccomp FD`) the child inherits.
    pub(super) fn bubblewrap(&self, bwrap: &Path, inner: Command) -> std::io::Result<Command> {
        let mut walled = Command::new(bwrap);
        walled.args(self.bubblewrap_args());
        // Before the filter's descriptor is made inheritable: what ralph
        // itself inherited stays out of the check.
        #[cfg(target_os = "linux")]
        close_inherited_on_exec(&mut walled);
        #[cfg(unix)]
        if let Some(program) = seccomp::program(self.filter_policy()) {
            let fd = filter_on_a_pipe(&seccomp::bytes(&program))?;
            walled.arg("--seccomp").arg(fd_number(&fd).to_string());
            inherit_on_exec(&mut walled, fd);
        }
        if let Some(dir) = inner.get_current_dir() {
            walled.current_dir(dir).arg("--chdir").arg(dir);
        }
        for (key, value) in inner.get_envs() {
            match value {
                Some(value) => walled.env(key, value),
                None => walled.env_remove(key),
            };
        }
        walled
            .arg("--")
            .arg(inner.get_program())
            .args(inner.get_args());
        Ok(walled)
    }
}
