//! The walls around every command ralph runs on the agent's work: the
//! verify commands, the test baseline, a formula's gates and autofix, the
//! merge queue's checks. Each of them runs the agent's code (the module a
//! test imports, a Makefile, `package.json`), so each runs with the agent's
//! limits, not the person's: it may write the folder it checks (the project
//! or an item's worktree), the repository's objects and refs, and the temp
//! folders; it may not write anything else, nor ralph's files (`.claude/`),
//! nor what makes git run programs (`.git/config`, `.git/hooks`,
//! `.git/info`), and it cannot read the folders [`Walls::hide`] names
//! (ralph's key). The network stays open: a check may need to fetch.
//!
//! On Linux the walls are bubblewrap's mount namespace, the tool the
//! client's own sandbox uses: the whole file system bound read-only, the
//! writable folders bound back read-write, the protected paths bound
//! read-only again on top (a bound path cannot be renamed away, nor a file
//! created inside it), the hidden folders covered by an empty tmpfs. It is
//! tried once per process (`bwrap … true`). Where it cannot run (not
//! installed, or user namespaces refused, as in many containers), the walls
//! are Landlock's ([`landlock`]), which cannot leave a read-only hole in a
//! writable folder, so they are coarser: see there. Where neither can, a
//! check with walls wanted (`auto`) runs without them and the caller says so
//! once, and one with walls required (`on`) is refused before it starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Whether the checks are to be walled: the loop's `sandbox` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WallsWanted {
    /// `sandbox: off`: the person chose no walls.
    Off,
    /// `sandbox: auto`: walls where this machine has them.
    Auto,
    /// `sandbox: on`: walls, or the check does not run.
    Required,
}

/// How a command is walled on this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// bubblewrap, at this path.
    Bubblewrap(PathBuf),
    /// Landlock (Linux 5.13 and later), where bubblewrap cannot run (why).
    Landlock(String),
    /// Nothing that walls a command here, and why.
    Missing(String),
}

/// The usual places of bubblewrap: a `bwrap` found only in a folder the
/// agent can write (the project's `node_modules/.bin`, say) is never taken.
const BWRAP_PLACES: [&str; 2] = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"];

impl Mechanism {
    /// What walls this machine's commands: looked up, and tried, once per
    /// process.
    pub fn probe() -> &'static Mechanism {
        static MECHANISM: OnceLock<Mechanism> = OnceLock::new();
        MECHANISM.get_or_init(|| {
            if !cfg!(target_os = "linux") {
                return Mechanism::Missing(
                    "walls around the checks are built with bubblewrap, on Linux only".into(),
                );
            }
            let bwrap = match find_bwrap() {
                None => {
                    Err("bubblewrap is not installed (`sudo apt-get install bubblewrap`)".into())
                }
                Some(bwrap) => match try_bwrap(&bwrap) {
                    Ok(()) => Ok(bwrap),
                    Err(why) => Err(format!(
                        "bubblewrap ({}) cannot run here: {why}",
                        bwrap.display()
                    )),
                },
            };
            match bwrap {
                Ok(bwrap) => Mechanism::Bubblewrap(bwrap),
                Err(why) if landlock::supported() => Mechanism::Landlock(why),
                Err(why) => Mechanism::Missing(format!("{why}, and this kernel has no Landlock")),
            }
        })
    }
}

/// `bwrap` in its usual places, else on PATH, taken only where the agent
/// cannot have put it: an executable owned by root that nobody else can
/// write, in a folder likewise (links resolved first). A `bwrap` of the
/// agent's would run every check without walls.
fn find_bwrap() -> Option<PathBuf> {
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
fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).is_ok_and(|m| m.uid() == 0 && m.mode() & 0o022 == 0)
}

#[cfg(not(unix))]
fn trusted(_path: &Path) -> bool {
    false
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(_path: &Path) -> bool {
    false
}

/// Runs `bwrap --ro-bind / / … true`: whether this machine lets it build a
/// mount namespace (user namespaces may be off, a container may forbid it).
fn try_bwrap(bwrap: &Path) -> Result<(), String> {
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
            "--new-session",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&output.stderr);
    Err(said
        .lines()
        .next()
        .unwrap_or("it failed")
        .trim()
        .to_string())
}

/// The walls for one check: what it may write, what stays read-only inside
/// that, what it cannot see, and how they are built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Walls {
    wanted: WallsWanted,
    mechanism: Mechanism,
    writable: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    hidden: Vec<PathBuf>,
}

/// Why a walled command was not started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the check was not run: {0}")]
pub struct WallsMissing(pub String);

impl Walls {
    /// No walls: the command runs with the caller's rights (`sandbox: off`,
    /// and ralph's own commands).
    pub fn open() -> Walls {
        Walls {
            wanted: WallsWanted::Off,
            mechanism: Mechanism::Missing("sandbox is off".into()),
            writable: Vec::new(),
            read_only: Vec::new(),
            hidden: Vec::new(),
        }
    }

    /// The walls around a check of `work_root` (the project, or a worktree
    /// of it), as `wanted`, with this machine's mechanism.
    pub fn around(project: &Path, work_root: &Path, wanted: WallsWanted) -> Walls {
        match wanted {
            WallsWanted::Off => Walls::open(),
            _ => Walls::with_mechanism(project, work_root, wanted, Mechanism::probe().clone()),
        }
    }

    /// [`Walls::around`] with a given mechanism (the tests').
    ///
    /// What is writable and what is not comes from `project` (the main
    /// checkout, ralph's own) and `work_root` (the project, or a worktree of
    /// it), never from a file the agent can write: the repository's folder
    /// is `project/.git` when that is a real folder, not where a worktree's
    /// `.git` file or its `commondir` point. Protected folders that do not
    /// exist yet are made first, so that their read-only walls stand.
    pub fn with_mechanism(
        project: &Path,
        work_root: &Path,
        wanted: WallsWanted,
        mechanism: Mechanism,
    ) -> Walls {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let (project, root) = (real(project), real(work_root));
        let mut writable = vec![root.clone()];
        let mut read_only = Vec::new();
        for checkout in [&project, &root] {
            let claude = checkout.join(".claude");
            let _ = std::fs::create_dir_all(&claude);
            if !read_only.contains(&claude) {
                read_only.push(claude);
            }
        }
        let git = project.join(".git");
        if std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
            // A mount of its own: the folder cannot be renamed away (and
            // another put in its place), its contents stay writable.
            writable.push(git.clone());
            for name in ["hooks", "info"] {
                let _ = std::fs::create_dir_all(git.join(name));
            }
            read_only.extend(["config", "config.worktree", "hooks", "info"].map(|n| git.join(n)));
        }
        // A worktree's `.git` file says where its repository is: ralph's git
        // in the worktree reads it, so the check may not rewrite it.
        let dot_git = root.join(".git");
        if root != project && std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
            read_only.push(dot_git);
        }
        let mut temp: Vec<PathBuf> = vec!["/tmp".into(), "/var/tmp".into()];
        if let Ok(dir) = std::fs::canonicalize(std::env::temp_dir()) {
            if !temp.contains(&dir) {
                temp.push(dir);
            }
        }
        temp.append(&mut writable);
        // The person's session bus and agents live in the runtime folder:
        // a socket there would run a command outside the walls.
        let hidden = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .map(|dir| real(&dir))
            .into_iter()
            .collect();
        Walls {
            wanted,
            mechanism,
            writable: temp,
            read_only,
            hidden,
        }
    }

    /// Hides `folder` from the walled command (an empty folder in its place).
    pub fn hide(mut self, folder: PathBuf) -> Walls {
        let folder = std::fs::canonicalize(&folder).unwrap_or(folder);
        self.hidden.push(folder);
        self
    }

    /// True when a command started through these walls runs walled.
    pub fn walled(&self) -> bool {
        self.wanted != WallsWanted::Off && !matches!(self.mechanism, Mechanism::Missing(_))
    }

    /// The one line for the person when checks are wanted walled and cannot
    /// be (`None`: walled, or off by choice).
    pub fn notice(&self) -> Option<String> {
        match (&self.wanted, &self.mechanism) {
            (WallsWanted::Off, _) | (_, Mechanism::Bubblewrap(_)) => None,
            (_, Mechanism::Landlock(why)) => Some(format!(
                "walls: Landlock's, as {why}: a check cannot create or remove an entry at the top \
                 of the project or of .git, nor list the folders on the way to ralph's key \
                 (bubblewrap's walls have neither limit)"
            )),
            (_, Mechanism::Missing(why)) => Some(format!(
                "walls: none for the checks ({why}); the verify commands run the agent's code with your rights"
            )),
        }
    }

    /// The platform shell running `command` inside the walls (the command
    /// itself without them when they are open or missing and not required).
    pub fn shell(&self, command: &str) -> Result<Command, WallsMissing> {
        self.wrap(super::group::shell(command))
    }

    /// `inner` run inside the walls: the same program, arguments,
    /// environment and folder.
    pub fn wrap(&self, mut inner: Command) -> Result<Command, WallsMissing> {
        if self.walled() {
            // Sockets to the person's session and keys: through them a
            // command would run, or sign, outside the walls.
            for var in [
                "DBUS_SESSION_BUS_ADDRESS",
                "SSH_AUTH_SOCK",
                "GPG_AGENT_INFO",
            ] {
                inner.env_remove(var);
            }
        }
        match (&self.wanted, &self.mechanism) {
            (WallsWanted::Off, _) => Ok(inner),
            (_, Mechanism::Bubblewrap(bwrap)) => Ok(self.bubblewrap(bwrap, inner)),
            (_, Mechanism::Landlock(_)) => landlock::wall(self, inner)
                .map_err(|why| WallsMissing(format!("its walls could not be built: {why}"))),
            (WallsWanted::Auto, Mechanism::Missing(_)) => Ok(inner),
            (WallsWanted::Required, Mechanism::Missing(why)) => Err(WallsMissing(format!(
                "walls are required (sandbox: on) but {why}; install it, or set sandbox to auto \
                 or off"
            ))),
        }
    }

    /// bubblewrap's arguments. Every mount lies over those before it, so
    /// they go from the shallowest path to the deepest: a worktree inside
    /// the read-only `.claude/` is writable again, and its own `.claude/`
    /// read-only again, whatever the order of the lists.
    pub fn bubblewrap_args(&self) -> Vec<OsString> {
        let mut mounts: Vec<(&str, &Path)> = Vec::new();
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
        // wall. A session of its own: no terminal to push input into.
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
        args.extend(["--unshare-pid", "--new-session", "--die-with-parent"].map(OsString::from));
        args
    }

    fn bubblewrap(&self, bwrap: &Path, inner: Command) -> Command {
        let mut walled = Command::new(bwrap);
        walled.args(self.bubblewrap_args());
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
        walled
    }
}

/// Walls built with Landlock, for a machine where bubblewrap cannot run.
///
/// A Landlock rule grants rights on a whole folder and everything beneath
/// it; nothing can be taken back below. So a folder that holds a protected
/// path is not granted: each of its entries is, but the protected one
/// (down the path to it). What that costs, against bubblewrap: in the
/// checked folder and in `.git`, a check cannot create, remove or rename an
/// entry at the top (a new file in a subfolder is fine; an existing
/// top-level file can be written); a folder on the way to a hidden one
/// cannot be listed, nor a file created in it later read. The temp folders
/// that hold the checked folder (a project in `/tmp`) are walled the same
/// way. Writes to `/dev` (`/dev/null`, a terminal) are allowed.
#[cfg(target_os = "linux")]
mod landlock {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use landlock::{
        path_beneath_rules, Access, AccessFs, BitFlags, CompatLevel, Compatible, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope, ABI,
    };

    use super::Walls;

    /// The newest Landlock ABI ralph asks for; an older kernel gives what it has.
    const ABI_WANTED: ABI = ABI::V7;

    /// Whether this kernel enforces Landlock.
    pub(super) fn supported() -> bool {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(|r| r.create())
            .is_ok()
    }

    /// `rules` granting `access` on `dir` and everything beneath it but the
    /// paths `except` (and what lies beneath them).
    fn grant_except(
        rules: &mut Vec<(PathBuf, BitFlags<AccessFs>)>,
        dir: &Path,
        access: BitFlags<AccessFs>,
        except: &[PathBuf],
    ) {
        if except.iter().any(|e| e == dir) {
            return;
        }
        let meta = std::fs::symlink_metadata(dir);
        // A link in a walked folder may be the agent's (`ln -s / escape`): a
        // rule on it would grant its target. It gets none.
        if meta.as_ref().is_ok_and(|m| m.file_type().is_symlink()) {
            return;
        }
        let holds_one = except.iter().any(|e| e.starts_with(dir));
        if !holds_one || !meta.as_ref().is_ok_and(|m| m.is_dir()) {
            rules.push((dir.to_path_buf(), access));
            return;
        }
        // An unreadable folder grants nothing beneath it: less, never more.
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            grant_except(rules, &entry.path(), access, except);
        }
    }

    /// `inner` with the walls of `walls` applied to it as it starts: the
    /// ruleset is built here, and the child only restricts itself with it
    /// (two system calls, safe between fork and exec).
    pub(super) fn wall(walls: &Walls, mut inner: Command) -> Result<Command, String> {
        let all = AccessFs::from_all(ABI_WANTED);
        let read = AccessFs::from_read(ABI_WANTED);
        let mut rules = Vec::new();
        grant_except(&mut rules, Path::new("/"), read, &walls.hidden);
        for dir in &walls.writable {
            grant_except(&mut rules, dir, all, &walls.read_only);
        }
        rules.push((PathBuf::from("/dev"), all));
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(all)
            .and_then(|r| r.scope(Scope::from_all(ABI_WANTED)))
            .and_then(|r| r.create())
            .map_err(|e| format!("Landlock refused the walls: {e}"))?;
        for (path, access) in &rules {
            ruleset = ruleset
                .add_rules(path_beneath_rules([path], *access))
                .map_err(|e| format!("Landlock refused a rule for {}: {e}", path.display()))?;
        }
        let fd: Option<std::os::fd::OwnedFd> = ruleset.into();
        let fd = fd.ok_or("Landlock gave no ruleset")?;
        restrict_on_exec(&mut inner, fd);
        Ok(inner)
    }

    /// Has the child restrict itself with `ruleset` before it runs the
    /// program: no new privileges, then `landlock_restrict_self`. Only
    /// these two system calls run between fork and exec: nothing that
    /// allocates or takes a lock.
    #[allow(unsafe_code)]
    fn restrict_on_exec(command: &mut Command, ruleset: std::os::fd::OwnedFd) {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let fd = ruleset.as_raw_fd();
        // SAFETY: the closure makes two system calls on an fd the closure
        // keeps open (it owns `ruleset`), and returns the error they give.
        unsafe {
            command.pre_exec(move || {
                let _keep = &ruleset;
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod landlock {
    use std::process::Command;

    pub(super) fn supported() -> bool {
        false
    }

    pub(super) fn wall(_walls: &super::Walls, _inner: Command) -> Result<Command, String> {
        Err("Landlock is Linux's".into())
    }
}

/// The repository's common folder (`.git`, or for a worktree the main
/// checkout's `.git` its `gitdir` file leads to), when `root` has one.
pub fn git_common_dir(root: &Path) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git);
    }
    // A worktree: `.git` is a file, `gitdir: <its folder>`, and that folder's
    // `commondir` names the common folder (relative to it).
    let text = std::fs::read_to_string(&dot_git).ok()?;
    let gitdir = Path::new(text.strip_prefix("gitdir:")?.trim());
    let gitdir = root.join(gitdir);
    let common = std::fs::read_to_string(gitdir.join("commondir"))
        .map(|c| gitdir.join(c.trim()))
        .unwrap_or(gitdir);
    std::fs::canonicalize(common).ok()
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::TempDir::new().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap().join("p");
        for sub in [".claude/ralph", ".git/hooks", ".git/info", "src"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join(".claude/ralph/config.json"), "{}").unwrap();
        (dir, root)
    }

    fn bwrap_or_skip() -> Option<&'static Mechanism> {
        match Mechanism::probe() {
            m @ Mechanism::Bubblewrap(_) => Some(m),
            other => {
                eprintln!("skipped: no bubblewrap here ({other:?})");
                None
            }
        }
    }

    fn run(walls: &Walls, root: &Path, script: &str) -> (i32, String) {
        let mut cmd = walls.shell(script).unwrap();
        cmd.current_dir(root);
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    }

    #[test]
    fn a_walled_check_writes_its_project_and_temp_and_nothing_else() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (dir, root) = project();
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let home_like = std::fs::canonicalize(&outside).unwrap();
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        assert!(walls.walled());
        // The temp dir holds both here, so the outside folder is made
        // read-only the way a home folder is: by not being writable.
        let walls = Walls {
            writable: walls
                .writable
                .iter()
                .filter(|p| !home_like.starts_with(p))
                .cloned()
                .collect(),
            ..walls
        };
        let script = format!(
            "echo ok > src/new.py && echo ok > new-at-root && echo t > \"$(mktemp -d /var/tmp/w.XXXX)/t\" && echo written; \
             echo evil > {out}/evil; echo s > .claude/settings.local.json; echo c >> .claude/ralph/config.json; \
             mv .claude .claude-moved; echo h > .git/hooks/post-commit; echo x >> .git/config; echo i > .git/info/attributes; \
             echo done",
            out = outside.display()
        );
        let (code, output) = run(&walls, &root, &script);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("written"), "{output}");
        assert!(root.join("src/new.py").is_file() && root.join("new-at-root").is_file());
        assert!(!outside.join("evil").exists(), "{output}");
        assert!(!root.join(".claude/settings.local.json").exists());
        assert_eq!(
            std::fs::read_to_string(root.join(".claude/ralph/config.json")).unwrap(),
            "{}"
        );
        assert!(root.join(".claude").is_dir() && !root.join(".claude-moved").exists());
        assert!(!root.join(".git/hooks/post-commit").exists());
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!root.join(".git/info/attributes").exists());
    }

    #[test]
    fn a_walled_check_cannot_go_round_through_proc_nor_rename_git() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (dir, root) = project();
        let outside = std::fs::canonicalize(dir.path()).unwrap().join("outside");
        std::fs::create_dir(&outside).unwrap();
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        // The outside folder lies in the temp folder here: made read-only as
        // a home folder is, by not being writable.
        let walls = Walls {
            writable: walls
                .writable
                .iter()
                .filter(|p| !outside.starts_with(p))
                .cloned()
                .collect(),
            ..walls
        };
        let me = std::process::id();
        let script = format!(
            "echo evil > /proc/{me}/root{out}/evil; echo c >> /proc/{me}/root{root}/.git/config; \
             mv .git .git-old; mkdir -p .git-new; echo done",
            out = outside.display(),
            root = root.display()
        );
        let (_, output) = run(&walls, &root, &script);
        assert!(output.contains("done"), "{output}");
        assert!(!outside.join("evil").exists(), "{output}");
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(root.join(".git/config").is_file() && !root.join(".git-old").exists());
    }

    #[test]
    fn a_hidden_folder_is_empty_to_the_check() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (dir, root) = project();
        let secret = dir.path().join("keys");
        std::fs::create_dir(&secret).unwrap();
        std::fs::write(secret.join("key"), "s3cret").unwrap();
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Auto, mechanism.clone())
            .hide(secret.clone());
        let (_, output) = run(
            &walls,
            &root,
            &format!("cat {}/key; echo end", secret.display()),
        );
        assert!(!output.contains("s3cret"), "{output}");
        assert!(output.contains("end"));
    }

    #[test]
    fn a_worktree_writes_the_common_repository_but_not_its_configuration() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (_dir, root) = project();
        let tree = root.join(".claude/worktrees/item");
        let gitdir = root.join(".git/worktrees/item");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
        let walls = Walls::with_mechanism(&root, &tree, WallsWanted::Required, mechanism.clone());
        let (_, output) = run(
            &walls,
            &tree,
            &format!(
                "echo w > work.txt; echo r > {git}/worktrees/item/ORIG_HEAD; echo c >> {git}/config; \
                 echo p > {root}/.claude/ralph/PROMPT.md; echo done",
                git = root.join(".git").display(),
                root = root.display()
            ),
        );
        assert!(output.contains("done"), "{output}");
        assert!(tree.join("work.txt").is_file());
        assert!(gitdir.join("ORIG_HEAD").is_file());
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!root.join(".claude/ralph/PROMPT.md").exists());
    }

    /// A project outside the temp folders (Landlock's walls leave those
    /// writable, and a temp folder holding the project is walled too), in
    /// this crate's target folder.
    fn project_outside_temp(name: &str) -> (PathBuf, PathBuf) {
        let base = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/walls-tests")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("p");
        for sub in [".claude/ralph", ".git/hooks", ".git/info", "src"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join("README.md"), "# p\n").unwrap();
        std::fs::create_dir_all(base.join("outside")).unwrap();
        (
            std::fs::canonicalize(&base).unwrap(),
            std::fs::canonicalize(&root).unwrap(),
        )
    }

    #[test]
    fn landlock_walls_keep_a_checks_writes_in_its_project() {
        if !landlock::supported() {
            eprintln!("skipped: no Landlock");
            return;
        }
        let (base, root) = project_outside_temp("landlock");
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        assert!(walls.walled());
        assert!(walls.notice().unwrap().contains("Landlock"));
        let outside = base.join("outside");
        let script = format!(
            "echo ok > src/new.py && echo more >> README.md && echo t > \"$(mktemp)\" && echo q > /dev/null && echo written; \
             echo evil > {out}/evil; echo s > .claude/settings.local.json; mv .claude .claude-moved; \
             echo h > .git/hooks/post-commit; echo x >> .git/config; echo i > .git/info/attributes; echo done",
            out = outside.display()
        );
        let (code, output) = run(&walls, &root, &script);
        assert_eq!(code, 0, "{output}");
        assert!(
            output.contains("written") && output.contains("done"),
            "{output}"
        );
        assert!(root.join("src/new.py").is_file());
        assert_eq!(
            std::fs::read_to_string(root.join("README.md")).unwrap(),
            "# p\nmore\n"
        );
        assert!(!outside.join("evil").exists(), "{output}");
        assert!(!root.join(".claude/settings.local.json").exists());
        assert!(root.join(".claude").is_dir() && !root.join(".claude-moved").exists());
        assert!(!root.join(".git/hooks/post-commit").exists());
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!root.join(".git/info/attributes").exists());

        // A link the agent planted at the top grants nothing of its target.
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        let (_, output) = run(&walls, &root, "echo evil > escape/evil; echo done");
        assert!(output.contains("done"), "{output}");
        assert!(!outside.join("evil").exists(), "{output}");

        // A hidden folder cannot be read.
        let secret = base.join("keys");
        std::fs::create_dir_all(&secret).unwrap();
        std::fs::write(secret.join("key"), "s3cret").unwrap();
        let walls = walls.hide(secret.clone());
        let (_, output) = run(
            &walls,
            &root,
            &format!("cat {}/key; echo end", secret.display()),
        );
        assert!(
            !output.contains("s3cret") && output.contains("end"),
            "{output}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn required_walls_that_cannot_be_built_refuse_the_check() {
        let (_dir, root) = project();
        let missing = Mechanism::Missing("bubblewrap is not installed".into());
        let required = Walls::with_mechanism(&root, &root, WallsWanted::Required, missing.clone());
        let err = required.shell("true").unwrap_err();
        assert!(err.to_string().contains("bubblewrap is not installed"));
        let auto = Walls::with_mechanism(&root, &root, WallsWanted::Auto, missing);
        assert!(!auto.walled());
        assert!(auto.notice().unwrap().contains("with your rights"));
        assert_eq!(auto.shell("true").unwrap().get_program(), "sh");
        assert_eq!(Walls::open().notice(), None);
    }
}
