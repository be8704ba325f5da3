//! Running the built binaries as another user, or where bubblewrap is
//! missing: what the tests that compare walls and the corpus of real
//! projects share.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether a user other than the owner can reach `path` (every folder on
/// the way searchable by others, the file itself readable and executable).
pub fn reachable_by_others(path: &Path) -> bool {
    let mut at = Some(path);
    while let Some(p) = at {
        match std::fs::metadata(p) {
            Ok(m) if m.permissions().mode() & 0o001 != 0 => {}
            _ => return false,
        }
        at = p.parent();
    }
    true
}

/// `file` where every user reaches it: as it is, or linked (or copied)
/// into `dir` once.
pub fn reachable(file: &Path, dir: &Path) -> PathBuf {
    if reachable_by_others(file) {
        return file.to_path_buf();
    }
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let to = dir.join(file.file_name().unwrap());
    // A second copy onto a link to the same file would empty it.
    if to.exists() {
        return to;
    }
    if std::fs::hard_link(file, &to).is_err() {
        std::fs::copy(file, &to).unwrap();
    }
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    to
}

/// Makes `cmd` run its program from a copy every user reaches
/// ([`reachable`], into `dir`), for a test that runs it as another user: a
/// clone under a home of mode 700 holds the built binaries out of that
/// user's reach. `cmd`'s environment must be set in full (`env_clear`, as
/// `TempProject::command` does), as only what it sets is carried over.
pub fn run_from_reach(cmd: &mut Command, dir: &Path) {
    let program = reachable(Path::new(cmd.get_program()), dir);
    let mut moved = Command::new(program);
    moved.env_clear().args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            moved.env(key, value);
        }
    }
    if let Some(dir) = cmd.get_current_dir() {
        moved.current_dir(dir);
    }
    *cmd = moved;
}

/// `cmd` run where bubblewrap is not to be had, as in many containers: in
/// a mount namespace of its own (as root) with `/dev/null` bound over every
/// `bwrap` ralph would take, so that its checks are walled by Landlock.
pub fn without_bubblewrap(cmd: Command) -> Command {
    without_bubblewrap_as(cmd, None)
}

/// [`without_bubblewrap`], `cmd` run as `uid` (and its group) when given:
/// the mount namespace is made as root, then `setpriv` becomes the user.
pub fn without_bubblewrap_as(cmd: Command, uid: Option<u32>) -> Command {
    let mut wrapped = Command::new("unshare");
    let become_user = uid.map_or(String::new(), |uid| {
        format!("setpriv --reuid={uid} --regid={uid} --clear-groups -- ")
    });
    wrapped.args([
        "-m",
        "--",
        "sh",
        "-c",
        &format!(
            "for b in /usr/bin/bwrap /usr/local/bin/bwrap; do \
               [ -e \"$b\" ] && mount --bind /dev/null \"$b\"; done; exec {become_user}\"$0\" \"$@\""
        ),
    ]);
    wrapped.arg(cmd.get_program()).args(cmd.get_args());
    wrapped.env_clear();
    for (key, value) in cmd.get_envs() {
        if let Some(value) = value {
            wrapped.env(key, value);
        }
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}
