//! The walls around every command ralph runs on the agent's work: the
//! verify commands, the test baseline, a formula's gates and autofix, the
//! merge queue's checks. Each of them runs the agent's code (the module a
//! test imports, a Makefile, `package.json`), so each runs with the agent's
//! limits, never with a right the agent lacks in the client's own sandbox
//! (docs/security.md has the rule and the parity table): it may write the
//! folder it checks (the project or an item's worktree) and a temp folder
//! of its own, removed after it; nothing else, not ralph's files
//! (`.claude/`), not the repository's `.git` (a check tests, it does not
//! commit); it cannot read the folders [`Walls::hide`] names (ralph's key),
//! make a unix socket nor use `io_uring` ([`seccomp`]: the person's tmux,
//! ssh-agent, D-Bus and docker listen on one), hold a capability, gain privileges, signal a
//! process outside its own, or reach a terminal; the variables that name
//! the person's sockets and sessions ([`SESSION_VARIABLES`]) are not passed.
//! It has no network but a loopback of its own (a network namespace: the
//! person's services on 127.0.0.1 are out of its reach, as they are out of
//! the agent's in the client's sandbox; where none can be made, Landlock's
//! TCP rules and the filter keep it off, see [`NetworkWall`]; where
//! nothing can, walls that are required are refused), nor a vsock, unless
//! its verify entry says `"network": true` (pinned with the config at the
//! loop's start, so the agent cannot add it later); `worktreeSetup`, which
//! installs dependencies, keeps the network (said at the start). No file
//! descriptor ralph inherited reaches it. A check of a
//! worktree (a queue item's, a `--worktree` iteration's) sees nothing of
//! the main checkout but its `.git` and the dependency folders it keeps out
//! of git ([`SHARED_DEPENDENCY_FOLDERS`]), both read-only: it tests the
//! worktree's code, never the main checkout's (an editable install's
//! pointer into the main checkout leads nowhere, and fails).
//!
//! On Linux the walls are bubblewrap's mount namespace, the tool the
//! client's own sandbox uses: the whole file system bound read-only, the
//! writable folder bound back read-write, the protected paths bound
//! read-only again on top (a bound path cannot be renamed away, nor a file
//! created inside it), the hidden folders covered by an empty tmpfs (a
//! worktree's main checkout among them, its `.git`, dependency folders and
//! the worktree bound again on top), and
//! `/tmp`, `/var/tmp` and `/dev/shm` fresh tmpfs of the check's own; a pid
//! namespace, a network namespace (loopback only) and a session of its
//! own, every capability dropped (as root too), and the unix-socket filter. It is tried once per process
//! (`bwrap … true`). Where it cannot run (not installed, or user namespaces
//! refused, as in many containers), the walls are Landlock's
//! ([`landlock`]), which cannot leave a read-only hole in a writable
//! folder, so they are coarser: see there. Where neither can, a check with
//! walls wanted (`auto`) runs without them and the caller says so once, and
//! one with walls required (`on`) is refused before it starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

pub mod caches;
#[cfg(target_os = "linux")]
mod landlock;
mod seccomp;

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
    /// Landlock (Linux 5.13 and later), fully enforced, where bubblewrap
    /// cannot run (why).
    Landlock(String),
    /// Landlock, where bubblewrap cannot run, on a kernel that enforces only
    /// part of the rights and scopes ralph asks for (why): used when walls
    /// are wanted (and said), refused when they are required.
    LandlockInPart(String),
    /// Nothing that walls a command here, and why.
    Missing(String),
}

/// The usual places of bubblewrap: a `bwrap` found only in a folder the
/// agent can write (the project's `node_modules/.bin`, say) is never taken.
const BWRAP_PLACES: [&str; 2] = ["/usr/bin/bwrap", "/usr/local/bin/bwrap"];

/// The variables that name the person's sockets, agents and sessions: a
/// walled check gets none of them. Through any of them a command would
/// run, sign or type outside the walls (a tmux server types into the
/// person's shell, ssh-agent and gpg-agent sign, D-Bus starts units, the
/// docker daemon runs containers as root, a display takes key presses).
/// The one list of what does not pass; every other variable does.
pub const SESSION_VARIABLES: [&str; 27] = [
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "SSH_ASKPASS",
    "GPG_AGENT_INFO",
    "GIT_ASKPASS",
    "DBUS_SESSION_BUS_ADDRESS",
    "DBUS_SYSTEM_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_ID",
    "TMUX",
    "TMUX_PANE",
    "STY",
    "ZELLIJ",
    "ZELLIJ_SESSION_NAME",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XAUTHORITY",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "PULSE_SERVER",
    "NOTIFY_SOCKET",
    "LISTEN_FDS",
    "KITTY_LISTEN_ON",
    "WEZTERM_UNIX_SOCKET",
    "VSCODE_IPC_HOOK_CLI",
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
];

/// The temp folders a walled check gets fresh, empty and its own (tmpfs
/// under bubblewrap; under Landlock, none of them writable and TMPDIR a
/// folder of the check's own).
const TEMP_FOLDERS: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

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
                Err(why) => landlock_instead(why),
            }
        })
    }
}

/// How a check without `"network": true` is kept off the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkWall {
    /// A network namespace of the check's own, loopback only.
    Namespace,
    /// Landlock's TCP rules (ABI 4), where no namespace can be made (why):
    /// no TCP bind or connect, and the filter refuses every other internet
    /// socket (UDP, MPTCP, SCTP, SMC) and TCP Fast Open's sends.
    TcpRules(String),
    /// Neither: the check has the machine's network (why). Refused where
    /// walls are required.
    Open(String),
}

impl NetworkWall {
    /// In words, for `doctor` and the line at the start.
    pub fn describe(&self) -> String {
        match self {
            NetworkWall::Namespace => {
                "a network namespace of its own, loopback only (as under bubblewrap)".into()
            }
            NetworkWall::TcpRules(why) => format!(
                "no network namespace ({why}): Landlock's TCP rules (ABI 4) refuse it every TCP \
                 bind and connect, and the filter every other internet socket (UDP, MPTCP, SCTP) \
                 and TCP Fast Open, so it has no loopback of its own either"
            ),
            NetworkWall::Open(why) => format!("none: it has this machine's network, as {why}"),
        }
    }
}

/// How `mechanism` keeps a check off the network on this machine.
fn network_wall_of(mechanism: &Mechanism) -> NetworkWall {
    match mechanism {
        Mechanism::Bubblewrap(_) => NetworkWall::Namespace,
        #[cfg(target_os = "linux")]
        Mechanism::Landlock(_) | Mechanism::LandlockInPart(_) => landlock::network_wall().clone(),
        Mechanism::Missing(why) => NetworkWall::Open(why.clone()),
        #[cfg(not(target_os = "linux"))]
        _ => NetworkWall::Open("Landlock is Linux's".into()),
    }
}

/// How a check without `"network": true` is kept off the network with
/// `mechanism`, in words (`doctor`).
pub fn network_walls(mechanism: &Mechanism) -> String {
    match network_wall_of(mechanism) {
        NetworkWall::Namespace => "a network namespace of its own, loopback only".into(),
        NetworkWall::Open(_) if matches!(mechanism, Mechanism::Missing(_)) => {
            "none: it has this machine's network".into()
        }
        wall => wall.describe(),
    }
}

/// What this kernel's Landlock has of what the walls use, in words
/// (`doctor`): its ABI, TCP rules (ABI 4), the scoping of abstract unix
/// sockets and signals (ABI 6).
#[cfg(target_os = "linux")]
pub fn landlock_features() -> String {
    let abi = landlock::kernel_abi();
    if abi == 0 {
        return "this kernel has no Landlock".into();
    }
    let has = |needed: i64| if abi >= needed { "yes" } else { "no" };
    format!(
        "Landlock ABI {abi}: TCP bind and connect rules (ABI 4) {}, abstract unix sockets and \
         signals scoped to the check (ABI 6) {}",
        has(4),
        has(6)
    )
}

#[cfg(not(target_os = "linux"))]
pub fn landlock_features() -> String {
    "Landlock is Linux's".into()
}

/// Landlock's walls where bubblewrap cannot run (`why`), as far as this
/// kernel enforces them.
#[cfg(target_os = "linux")]
fn landlock_instead(why: String) -> Mechanism {
    if !landlock::supported() {
        return Mechanism::Missing(format!("{why}, and this kernel has no Landlock"));
    }
    match landlock::enforcement() {
        Ok(()) => Mechanism::Landlock(why),
        Err(part) => Mechanism::LandlockInPart(format!("{why}, and {part}")),
    }
}

#[cfg(not(target_os = "linux"))]
fn landlock_instead(why: String) -> Mechanism {
    Mechanism::Missing(why)
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
            "--unshare-net",
            "--new-session",
            "--cap-drop",
            "ALL",
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
    /// What lies in a temp folder but must stay in sight, read-only, over
    /// the check's fresh one: the home folder and the `PATH` folders (a
    /// HOME under `/tmp`, as in many CI containers, holds the toolchains'
    /// configuration and caches).
    seen_in_temp: Vec<PathBuf>,
    /// One line for each toolchain cache a variable sends where no check
    /// may write ([`caches`]): said at the start, not granted.
    refused_caches: Vec<String>,
    /// The main checkout, when the checked folder is a worktree of it.
    worktree_of: Option<WorktreeOf>,
    /// True when the check keeps the machine's network (`"network": true`);
    /// otherwise it gets a network namespace of its own, loopback only.
    network: bool,
    /// How this machine keeps a check off the network with `mechanism`.
    off_network: NetworkWall,
    /// Whether the socket filter ([`seccomp`]) is written for this
    /// machine's architecture.
    socket_filter: bool,
}

/// A check of a worktree: the main checkout it belongs to is out of the
/// check's sight but for its `.git` and the dependency folders it keeps
/// out of git ([`SHARED_DEPENDENCY_FOLDERS`], read-only), so that the
/// check tests the worktree's code and never the main checkout's; a `PATH`
/// entry (and `VIRTUAL_ENV`) in the main checkout is the worktree's own
/// where the worktree has it (a virtual environment `worktreeSetup` made).
#[derive(Clone, Debug, PartialEq, Eq)]
struct WorktreeOf {
    /// The main checkout (its real path).
    project: PathBuf,
    /// The worktree (its real path).
    worktree: PathBuf,
}

/// The dependency folders a project keeps out of git that a worktree's
/// check sees of the main checkout, read-only, where they are: Node's
/// `node_modules` (node and npm look for it in every folder above the
/// worktree, as they do by hand) and a Python virtual environment (found
/// by the `PATH` the person runs ralph with). Nothing of the project's own
/// code lies in them, but an editable install's pointer to it, which
/// leads into the hidden main checkout and fails (and is named, see
/// [`crate::observe::main_checkout`]).
pub const SHARED_DEPENDENCY_FOLDERS: [&str; 3] = ["node_modules", ".venv", "venv"];

/// Why a walled command was not started.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the check was not run: {0}")]
pub struct WallsMissing(pub String);

/// What must outlive a walled command while it runs: the temp folder of
/// its own that Landlock's walls give it, removed when this is dropped
/// (bubblewrap's are tmpfs, gone with the command's namespace).
#[derive(Debug, Default)]
pub struct CheckTemp(Option<PathBuf>);

impl CheckTemp {
    /// A new, empty folder of the check's own in the system's temp folder
    /// (0700), named at random.
    fn make() -> std::io::Result<CheckTemp> {
        let base = std::env::temp_dir();
        for _ in 0..16 {
            let mut bytes = [0u8; 8];
            getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
            let name: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            let dir = base.join(format!("ralph-check-{name}"));
            let mut builder = std::fs::DirBuilder::new();
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
            match builder.create(&dir) {
                Ok(()) => return Ok(CheckTemp(Some(std::fs::canonicalize(&dir)?))),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(
            "no free name for the check's temp folder",
        ))
    }

    /// The folder, when there is one.
    pub fn path(&self) -> Option<&Path> {
        self.0.as_deref()
    }
}

impl Drop for CheckTemp {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The main checkout and the worktree, when `root` is a worktree of
/// `project` (both real paths): another folder than the project.
fn worktree_of(project: &Path, root: &Path) -> Option<WorktreeOf> {
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let (project, worktree) = (real(project), real(root));
    (project != worktree && !project.starts_with(&worktree))
        .then_some(WorktreeOf { project, worktree })
}

/// Whether a check of `worktree`, a worktree of the main checkout
/// `project`, cannot see `path`: it lies in the main checkout, neither in
/// the worktree, nor in its `.git`, nor in a shared dependency folder.
pub fn hidden_from_worktree(project: &Path, worktree: &Path, path: &Path) -> bool {
    worktree_of(project, worktree).is_some_and(|of| of.hides(&real_as_far_as_it_goes(path)))
}

/// `path` with its longest existing beginning made real (links
/// resolved) and the rest as given.
fn real_as_far_as_it_goes(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut head = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(head) {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (head.parent(), head.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                head = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

impl WorktreeOf {
    /// Whether `path` (a real path) lies in the main checkout where the
    /// check cannot see: not the worktree, its `.git`, nor a shared
    /// dependency folder.
    fn hides(&self, path: &Path) -> bool {
        path.starts_with(&self.project)
            && !path.starts_with(&self.worktree)
            && !path.starts_with(self.project.join(".git"))
            && !SHARED_DEPENDENCY_FOLDERS
                .iter()
                .any(|name| path.starts_with(self.project.join(name)))
    }

    /// `folder` (as given) as the check takes it: the worktree's same
    /// folder when it lies in the main checkout and the worktree has it.
    fn own(&self, folder: &Path) -> Option<PathBuf> {
        let real = std::fs::canonicalize(folder).ok()?;
        if real.starts_with(&self.worktree) {
            return None;
        }
        let inside = real.strip_prefix(&self.project).ok()?;
        let own = self.worktree.join(inside);
        own.is_dir().then_some(own)
    }

    fn path_for_check(&self, path: &str) -> String {
        path.split(':')
            .map(|entry| {
                let folder = Path::new(entry);
                match folder.is_absolute().then(|| self.own(folder)).flatten() {
                    Some(own) => own.to_string_lossy().into_owned(),
                    None => entry.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join(":")
    }

    /// `PATH` and `VIRTUAL_ENV` of `command` (its own, else this
    /// process's) taken from the worktree where they lead into the main
    /// checkout and the worktree has the same folder.
    fn take_environment(&self, command: &mut Command) {
        let given = |command: &Command, name: &str| -> Option<OsString> {
            match command.get_envs().find(|(key, _)| *key == name) {
                Some((_, value)) => value.map(OsString::from),
                None => std::env::var_os(name),
            }
        };
        if let Some(path) = given(command, "PATH").and_then(|p| p.into_string().ok()) {
            command.env("PATH", self.path_for_check(&path));
        }
        if let Some(own) = given(command, "VIRTUAL_ENV").and_then(|v| self.own(Path::new(&v))) {
            command.env("VIRTUAL_ENV", own);
        }
    }
}

/// The home folder and the `PATH` folders that lie in a temp folder (real
/// paths, each once, none inside another): the check sees them read-only
/// over its fresh temp folders, as the agent sees them in the client's
/// sandbox.
fn seen_in_temp() -> Vec<PathBuf> {
    seen_in_temp_of(std::env::var_os("HOME"), std::env::var_os("PATH"))
}

fn seen_in_temp_of(home: Option<OsString>, path: Option<OsString>) -> Vec<PathBuf> {
    let home = home.map(PathBuf::from);
    let path: Vec<PathBuf> = path
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let mut seen: Vec<PathBuf> = home
        .into_iter()
        .chain(path)
        .filter(|p| p.is_absolute())
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .filter(|p| {
            TEMP_FOLDERS
                .iter()
                .any(|t| p.starts_with(t) && p != Path::new(t))
        })
        .collect();
    seen.sort();
    seen.dedup();
    let all = seen.clone();
    seen.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
    seen
}

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
            seen_in_temp: Vec::new(),
            refused_caches: Vec::new(),
            worktree_of: None,
            network: true,
            off_network: NetworkWall::Open("sandbox is off".into()),
            socket_filter: seccomp::available(),
        }
    }

    /// The walls around a check of `work_root` (the project, or a worktree
    /// of it), as `wanted`, with this machine's mechanism. Open walls of a
    /// worktree still take its `PATH` entries from the worktree (see
    /// [`Walls::path_for_check`]).
    pub fn around(project: &Path, work_root: &Path, wanted: WallsWanted) -> Walls {
        match wanted {
            WallsWanted::Off => Walls {
                worktree_of: worktree_of(project, work_root),
                ..Walls::open()
            },
            _ => Walls::with_mechanism(project, work_root, wanted, Mechanism::probe().clone()),
        }
    }

    /// [`Walls::around`] with a given mechanism (the tests').
    ///
    /// What is writable and what is not comes from `project` (the main
    /// checkout, ralph's own) and `work_root` (the project, or a worktree of
    /// it), never from a file the agent can write: the repository's folder
    /// is `project/.git`, not where a worktree's `.git` file or its
    /// `commondir` point, and it is read-only whole, as is a worktree's own
    /// `.git` file. Protected folders that do not exist yet are made first,
    /// so that their read-only walls stand.
    pub fn with_mechanism(
        project: &Path,
        work_root: &Path,
        wanted: WallsWanted,
        mechanism: Mechanism,
    ) -> Walls {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let (project, root) = (real(project), real(work_root));
        let worktree_of = worktree_of(&project, &root);
        let mut writable = vec![root.clone()];
        let mut read_only = Vec::new();
        for checkout in [&project, &root] {
            let claude = checkout.join(".claude");
            let _ = std::fs::create_dir_all(&claude);
            // A worktree's check sees nothing of the main checkout's own.
            if !read_only.contains(&claude) && (worktree_of.is_none() || checkout == &root) {
                read_only.push(claude);
            }
        }
        // The repository, whole: its configuration, hooks and `commondir`
        // make git run programs; its locks would leave the person's git
        // failing; its objects and refs are ralph's to change, not a check's.
        for dot_git in [project.join(".git"), root.join(".git")] {
            if std::fs::symlink_metadata(&dot_git).is_ok() && !read_only.contains(&dot_git) {
                read_only.push(dot_git);
            }
        }
        // The person's session bus and agents live in the runtime folder:
        // a socket there would run a command outside the walls.
        let mut hidden: Vec<PathBuf> = std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .filter(|dir| dir.is_absolute())
            .map(|dir| real(&dir))
            .into_iter()
            .collect();
        let mut seen_in_temp = seen_in_temp();
        if let Some(of) = &worktree_of {
            // The main checkout out of sight: its `.git` and the dependency
            // folders it keeps out of git seen again, read-only.
            hidden.push(of.project.clone());
            for name in SHARED_DEPENDENCY_FOLDERS {
                let folder = of.project.join(name);
                // A link there could lead anywhere: only a folder is shared.
                let is_folder = std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir());
                if is_folder && !read_only.contains(&folder) {
                    read_only.push(folder);
                }
            }
            // A folder of it that lies in a temp folder stays out of sight too.
            seen_in_temp.retain(|seen| !of.hides(seen));
        }
        // What the toolchains write outside the project by themselves.
        let caches = caches::toolchain_caches(&root, &read_only);
        writable.extend(caches.folders);
        Walls {
            wanted,
            writable,
            read_only,
            hidden,
            seen_in_temp,
            refused_caches: caches.refused,
            worktree_of,
            network: false,
            off_network: network_wall_of(&mechanism),
            socket_filter: seccomp::available(),
            mechanism,
        }
    }

    /// The `PATH` a check of these walls runs with, from `path` (this
    /// process's, or the one a loop recorded): in a worktree, each entry in
    /// the main checkout is the worktree's same folder where the worktree
    /// has it (its own virtual environment, its own `node_modules/.bin`),
    /// else kept (a dependency folder it sees of the main checkout, or
    /// nothing).
    pub fn path_for_check(&self, path: &str) -> String {
        match &self.worktree_of {
            Some(of) => of.path_for_check(path),
            None => path.to_string(),
        }
    }

    /// These walls with the machine's network left to the check when
    /// `network` (a verify entry's `"network": true`), else with a network
    /// namespace of its own, loopback only.
    pub fn with_network(mut self, network: bool) -> Walls {
        self.network = network;
        self
    }

    /// Whether a check in these walls keeps the machine's network.
    pub fn network(&self) -> bool {
        self.network || !self.walled()
    }

    /// What the socket filter refuses besides unix sockets and `io_uring`:
    /// a vsock off the network, and every internet socket but TCP where
    /// Landlock's TCP rules stand in for a namespace.
    fn filter_policy(&self) -> seccomp::Policy {
        let landlock = matches!(
            self.mechanism,
            Mechanism::Landlock(_) | Mechanism::LandlockInPart(_)
        );
        seccomp::Policy {
            no_vsock: !self.network,
            tcp_only: !self.network
                && landlock
                && matches!(self.off_network, NetworkWall::TcpRules(_)),
        }
    }

    /// The line for the person at the start about a command that keeps the
    /// machine's network (`what`: ``the check `fetch` ``, a verify entry
    /// with `"network": true`, or `worktreeSetup`), and what the other
    /// checks get instead (`None`: not walled, nothing to say).
    pub fn network_line(&self, what: &str, why: &str) -> Option<String> {
        if !self.walled() {
            return None;
        }
        let others = match &self.off_network {
            NetworkWall::Namespace => "the others have a loopback of their own".to_string(),
            NetworkWall::TcpRules(_) => "the others are refused every TCP bind and connect and \
                 every other internet socket (Landlock's TCP rules: no network namespace here)"
                .to_string(),
            NetworkWall::Open(_) => "so do the others (nothing here keeps them off it)".to_string(),
        };
        Some(format!(
            "walls: {what} keeps this machine's network ({why}); {others}"
        ))
    }

    /// Keeps `folder`, a folder inside the one checked, read-only to the
    /// check (the clean room's environment, which its setup made: code the
    /// check runs must not leave a plugin in it for the next check). A
    /// link, or nothing, there is left as it is.
    pub fn keep_read_only(mut self, folder: &Path) -> Walls {
        if std::fs::symlink_metadata(folder).is_ok_and(|m| m.is_dir()) {
            let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf());
            if !self.read_only.contains(&folder) {
                self.read_only.push(folder);
            }
        }
        self
    }

    /// Hides `folder` from the walled command (an empty folder in its place);
    /// a toolchain cache that lies in it or holds it is not writable then.
    pub fn hide(mut self, folder: PathBuf) -> Walls {
        let folder = std::fs::canonicalize(&folder).unwrap_or(folder);
        let root = self.writable.first().cloned();
        let hides = |cache: &PathBuf| {
            Some(cache) != root.as_ref()
                && (cache.starts_with(&folder) || folder.starts_with(cache))
        };
        for cache in self.writable.iter().filter(|c| hides(c)) {
            self.refused_caches.push(format!(
                "walls: {} is not writable for the checks: {} is kept from every check",
                cache.display(),
                folder.display()
            ));
        }
        self.writable.retain(|c| !hides(c));
        self.hidden.push(folder);
        self
    }

    /// The toolchain caches a check may write besides the folder it checks
    /// (see [`caches`]): the same folders the agent gets in the client's
    /// sandbox.
    pub fn caches(&self) -> &[PathBuf] {
        self.writable.get(1..).unwrap_or_default()
    }

    /// One line for each toolchain cache a variable sends where no check
    /// may write, for the person at the start.
    pub fn refused_caches(&self) -> &[String] {
        &self.refused_caches
    }

    /// True when a command started through these walls runs walled.
    pub fn walled(&self) -> bool {
        self.wanted != WallsWanted::Off && !matches!(self.mechanism, Mechanism::Missing(_))
    }

    /// The one line for the person when checks are wanted walled and cannot
    /// be, or only in part (`None`: walled, or off by choice): Landlock's
    /// limits, a network kept by TCP rules only (or not at all), no socket
    /// filter for this architecture.
    pub fn notice(&self) -> Option<String> {
        let landlock = "a check cannot create or remove an entry at the top of the project \
                        (Landlock cannot keep .git and .claude read-only inside a writable \
                        folder; ralph makes cargo's target/ and Cargo.lock first, Python \
                        writes no bytecode and pytest its cache in the check's temp folder), \
                        nor write /dev/shm (a multiprocessing lock fails), nor list the folders \
                        on the way to ralph's key (bubblewrap's walls have none of these limits)";
        let mut said = match (&self.wanted, &self.mechanism) {
            (WallsWanted::Off, _) => return None,
            (_, Mechanism::Bubblewrap(_)) => String::new(),
            (_, Mechanism::Landlock(why)) => format!("walls: Landlock's, as {why}: {landlock}"),
            (WallsWanted::Auto, Mechanism::LandlockInPart(why)) => format!(
                "walls: Landlock's, in part, as {why}: what this kernel lacks, a check may do; \
                 {landlock}"
            ),
            (_, Mechanism::LandlockInPart(why) | Mechanism::Missing(why)) => {
                return Some(format!(
                    "walls: none for the checks ({why}); the verify commands run the agent's code with your rights"
                ));
            }
        };
        let mut more = Vec::new();
        if !matches!(self.off_network, NetworkWall::Namespace) {
            more.push(format!("off the network: {}", self.off_network.describe()));
        }
        if !self.socket_filter {
            more.push(format!(
                "no socket filter for this architecture ({}): a check may make a unix socket \
                 and use io_uring",
                std::env::consts::ARCH
            ));
        }
        if more.is_empty() {
            return (!said.is_empty()).then_some(said);
        }
        said.push_str(if said.is_empty() { "walls: " } else { "; " });
        said.push_str(&more.join("; "));
        Some(said)
    }

    /// The platform shell running `command` inside the walls (the command
    /// itself without them when they are open or missing and not required),
    /// and what must live until it ends.
    pub fn shell(&self, command: &str) -> Result<(Command, CheckTemp), WallsMissing> {
        self.wrap(super::group::shell(command))
    }

    /// `inner` run inside the walls: the same program, arguments,
    /// environment and folder; the environment without
    /// [`SESSION_VARIABLES`], TMPDIR the check's own temp folder. The
    /// [`CheckTemp`] must live until the command ends.
    pub fn wrap(&self, mut inner: Command) -> Result<(Command, CheckTemp), WallsMissing> {
        if self.walled() {
            for var in SESSION_VARIABLES {
                inner.env_remove(var);
            }
        }
        if let Some(of) = &self.worktree_of {
            of.take_environment(&mut inner);
        }
        let refused = |why: &str| {
            WallsMissing(format!(
                "walls are required (sandbox: on) but {why}; install bubblewrap, or set sandbox \
                 to auto or off"
            ))
        };
        if let Some(why) = self.required_but_open() {
            return Err(WallsMissing(why));
        }
        match (&self.wanted, &self.mechanism) {
            (WallsWanted::Off, _) | (WallsWanted::Auto, Mechanism::Missing(_)) => {
                Ok(unwalled(inner))
            }
            (_, Mechanism::Bubblewrap(bwrap)) => {
                for var in ["TMPDIR", "TMP", "TEMP"] {
                    inner.env(var, "/tmp");
                }
                out_of_the_tree(&mut inner, Path::new("/tmp"));
                let walled = self
                    .bubblewrap(bwrap, inner)
                    .map_err(|e| WallsMissing(format!("its walls could not be built: {e}")))?;
                Ok((walled, CheckTemp::default()))
            }
            (WallsWanted::Required, Mechanism::LandlockInPart(why)) => Err(refused(why)),
            (_, Mechanism::Landlock(_) | Mechanism::LandlockInPart(_)) => self.landlock(inner),
            (WallsWanted::Required, Mechanism::Missing(why)) => Err(refused(why)),
        }
    }

    /// Why walls that are required cannot hold here though a mechanism
    /// runs: no socket filter for this architecture, or no way to keep a
    /// check off the network (`None`: they hold, or are not required).
    fn required_but_open(&self) -> Option<String> {
        if self.wanted != WallsWanted::Required || matches!(self.mechanism, Mechanism::Missing(_)) {
            return None;
        }
        if !self.socket_filter {
            return Some(format!(
                "walls are required (sandbox: on) but ralph has no socket filter for this \
                 architecture ({}): a check could make a unix socket and use io_uring; set \
                 sandbox to auto (the checks run walled without the filter, said at the start) \
                 or off",
                std::env::consts::ARCH
            ));
        }
        match &self.off_network {
            NetworkWall::Open(why) if !self.network => Some(format!(
                "walls are required (sandbox: on) but a check cannot be kept off the network \
                 here ({why}); install bubblewrap, allow user namespaces or use a kernel with \
                 Landlock ABI 4; give a check that needs the network `\"network\": true` in its \
                 verify entry; or set sandbox to auto"
            )),
            _ => None,
        }
    }

    #[cfg(target_os = "linux")]
    fn landlock(&self, mut inner: Command) -> Result<(Command, CheckTemp), WallsMissing> {
        let failed = |why: String| WallsMissing(format!("its walls could not be built: {why}"));
        let temp = CheckTemp::make().map_err(|e| failed(format!("no temp folder: {e}")))?;
        let dir = temp.path().unwrap_or(Path::new("/")).to_path_buf();
        for var in ["TMPDIR", "TMP", "TEMP"] {
            inner.env(var, &dir);
        }
        out_of_the_tree(&mut inner, &dir);
        if let Some(root) = self.writable.first() {
            made_first_at_the_top(root);
        }
        let required = self.wanted == WallsWanted::Required;
        let walled = landlock::wall(self, inner, &dir, required).map_err(failed)?;
        Ok((walled, temp))
    }

    #[cfg(not(target_os = "linux"))]
    fn landlock(&self, _inner: Command) -> Result<(Command, CheckTemp), WallsMissing> {
        Err(WallsMissing("Landlock is Linux's".into()))
    }

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
    fn bubblewrap(&self, bwrap: &Path, inner: Command) -> std::io::Result<Command> {
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

/// What a check's Python and pytest would write beside the code they run,
/// kept out of the tree: Python's bytecode is not written
/// (`PYTHONDONTWRITEBYTECODE=1`: what is imported is compiled each time,
/// the installed modules' bytecode still read), and pytest's cache goes to
/// this folder of the check's temp folder (`-o cache_dir=…` added to
/// `PYTEST_ADDOPTS`), gone when the check ends. Written into the tree, the
/// check's bytecode was committed with a queue item's work and blocked the
/// landing of the next one; pytest's `.pytest_cache` cannot even be made at
/// the top of a project under Landlock's walls.
pub const OUT_OF_THE_TREE: [(&str, &str); 2] = [
    ("PYTHONDONTWRITEBYTECODE", "1"),
    ("PYTEST_ADDOPTS", "pytest-cache"),
];

/// Keeps what a check's Python and pytest would write out of the tree
/// ([`OUT_OF_THE_TREE`]); `temp` is the check's own temp folder as the
/// check sees it. Ours comes after the person's own `PYTEST_ADDOPTS`, so
/// that it wins.
fn out_of_the_tree(inner: &mut Command, temp: &Path) {
    let [(bytecode, off), (addopts, cache_dir)] = OUT_OF_THE_TREE;
    inner.env(bytecode, off);
    let theirs = match inner.get_envs().find(|(key, _)| *key == addopts) {
        Some((_, value)) => value.map(OsString::from),
        None => std::env::var_os(addopts),
    };
    let ours = format!(
        "-o {}",
        shell_quoted(&format!("cache_dir={}", temp.join(cache_dir).display()))
    );
    let value = match theirs.as_ref().and_then(|t| t.to_str()) {
        Some(theirs) if !theirs.trim().is_empty() => format!("{theirs} {ours}"),
        _ => ours,
    };
    inner.env(addopts, value);
}

/// `word` as one word of a POSIX shell (and of Python's `shlex.split`,
/// which pytest reads `PYTEST_ADDOPTS` with).
fn shell_quoted(word: &str) -> String {
    let plain = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-=+,:@".contains(&b));
    if plain && !word.is_empty() {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', "'\"'\"'"))
}

/// A check run without walls (`sandbox: off`, or none to be had): its own
/// temp folder for what [`out_of_the_tree`] sends there; without one, as it
/// is.
fn unwalled(mut inner: Command) -> (Command, CheckTemp) {
    match CheckTemp::make() {
        Ok(temp) => {
            if let Some(dir) = temp.path() {
                out_of_the_tree(&mut inner, dir);
            }
            (inner, temp)
        }
        Err(_) => (inner, CheckTemp::default()),
    }
}

/// The entries a toolchain makes at the top of a project the first time it
/// runs there, each with the file that says the project uses it: Landlock's
/// walls cannot let a check create an entry at the top (see [`landlock`]),
/// so ralph makes them first, with the person's rights, when they are
/// missing. A folder is made empty (git does not see an empty folder); a
/// file empty (cargo fills an empty `Cargo.lock` as it would have written a
/// new one).
#[cfg(target_os = "linux")]
const MADE_FIRST_AT_THE_TOP: [(&str, &str, bool); 2] = [
    // (the file that says so, the entry, a folder)
    ("Cargo.toml", "target", true),
    ("Cargo.toml", "Cargo.lock", false),
];

/// Makes [`MADE_FIRST_AT_THE_TOP`]'s entries in `root` where its project
/// uses their toolchain and they are missing (best effort: a check that
/// then cannot make one says so itself).
#[cfg(target_os = "linux")]
fn made_first_at_the_top(root: &Path) {
    for (used_by, entry, folder) in MADE_FIRST_AT_THE_TOP {
        let path = root.join(entry);
        if !root.join(used_by).is_file() || std::fs::symlink_metadata(&path).is_ok() {
            continue;
        }
        let _ = if folder {
            std::fs::create_dir(&path)
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map(drop)
        };
    }
}

/// A pipe's read end holding `bytes` (a filter: far below a pipe's
/// buffer), numbered 3 or above so that no standard stream set up for the
/// child lands on it.
#[cfg(unix)]
fn filter_on_a_pipe(bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    let (reader, mut writer) = std::io::pipe()?;
    writer.write_all(bytes)?;
    drop(writer);
    // `try_clone` duplicates to the lowest free number from 3 on.
    let reader = std::os::fd::OwnedFd::from(reader).try_clone()?;
    Ok(reader)
}

#[cfg(unix)]
fn fd_number(fd: &std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// Has the child mark every descriptor from 3 up close-on-exec, see
/// [`close_on_exec_from_3`].
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn close_inherited_on_exec(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure makes system calls only, on the stack.
    unsafe {
        command.pre_exec(close_on_exec_from_3);
    }
}

/// Marks every file descriptor from 3 up close-on-exec, between fork and
/// exec: one ralph inherited without that mark (a service manager's
/// `LISTEN_FDS` socket, an editor's terminal) would reach the check, and a
/// unix socket among them is one it could use without `socket(2)`.
/// `close_range(2)` where the kernel has it (5.11), else each number
/// `/proc/self/fd` lists (read with `getdents64(2)` into the stack: no
/// allocation), else every number below the descriptor limit.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn close_on_exec_from_3() -> std::io::Result<()> {
    /// `CLOSE_RANGE_CLOEXEC`.
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    let mark = |fd: libc::c_int| {
        // SAFETY: fcntl(2) on a number; a closed one fails, harmlessly.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    };
    // SAFETY: close_range(2) with plain numbers.
    let closed = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if closed == 0 {
        return Ok(());
    }
    // SAFETY: open(2) of a constant path; getdents64(2) into a buffer on
    // the stack, read within the lengths the kernel wrote; close(2).
    unsafe {
        let dir = libc::open(
            c"/proc/self/fd".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        );
        if dir >= 0 {
            let mut buffer = [0u8; 4096];
            loop {
                let read =
                    libc::syscall(libc::SYS_getdents64, dir, buffer.as_mut_ptr(), buffer.len());
                let Ok(read) = usize::try_from(read) else {
                    break;
                };
                if read == 0 {
                    break;
                }
                let mut at = 0;
                // struct linux_dirent64: ino (8), off (8), reclen (2),
                // type (1), then the name, NUL-ended.
                while at + 19 < read {
                    let reclen =
                        usize::from(u16::from_ne_bytes([buffer[at + 16], buffer[at + 17]]));
                    let mut fd: libc::c_int = 0;
                    let mut digits = 0;
                    for &b in &buffer[at + 19..(at + reclen).min(read)] {
                        if !b.is_ascii_digit() {
                            break;
                        }
                        fd = fd
                            .saturating_mul(10)
                            .saturating_add(libc::c_int::from(b - b'0'));
                        digits += 1;
                    }
                    if digits > 0 && fd >= 3 && fd != dir {
                        mark(fd);
                    }
                    if reclen == 0 {
                        break;
                    }
                    at += reclen;
                }
            }
            libc::close(dir);
            return Ok(());
        }
        let mut limit: libc::rlimit = std::mem::zeroed();
        let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) == 0 {
            libc::c_int::try_from(limit.rlim_cur).unwrap_or(libc::c_int::MAX)
        } else {
            1 << 16
        };
        for fd in 3..top {
            mark(fd);
        }
    }
    Ok(())
}

/// Has the child keep `fd` open across exec (it is close-on-exec here):
/// one `fcntl` between fork and exec, on an fd the closure owns.
#[cfg(unix)]
#[allow(unsafe_code)]
fn inherit_on_exec(command: &mut Command, fd: std::os::fd::OwnedFd) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let number = fd.as_raw_fd();
    // SAFETY: fcntl(2) on an fd the closure keeps open (it owns `fd`); no
    // allocation, and the error is built from errno.
    unsafe {
        command.pre_exec(move || {
            let _keep = &fd;
            if libc::fcntl(number, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
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
        let (mut cmd, _temp) = walls.shell(script).unwrap();
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
    fn a_worktree_check_writes_its_tree_but_not_the_repository() {
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
                 echo /elsewhere > {git}/worktrees/item/commondir; echo l > {git}/index.lock; \
                 echo g > .git; echo p > {root}/.claude/ralph/PROMPT.md; echo done",
                git = root.join(".git").display(),
                root = root.display()
            ),
        );
        assert!(output.contains("done"), "{output}");
        assert!(tree.join("work.txt").is_file());
        assert!(!gitdir.join("ORIG_HEAD").exists(), "{output}");
        assert!(!root.join(".git/index.lock").exists(), "{output}");
        assert_eq!(
            std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
            "../..\n"
        );
        assert!(
            std::fs::read_to_string(tree.join(".git"))
                .unwrap()
                .starts_with("gitdir: ")
        );
        assert_eq!(
            std::fs::read_to_string(root.join(".git/config")).unwrap(),
            "[core]\n"
        );
        assert!(!root.join(".claude/ralph/PROMPT.md").exists());
    }

    /// Runs `script` walled by `mechanism` in a fresh project, with the
    /// person's session variables set, as root when the tests are.
    fn probe(mechanism: &Mechanism, script: &str) -> (PathBuf, String) {
        let (dir, root) = project();
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        let mut inner = super::super::group::shell(script);
        for var in SESSION_VARIABLES {
            inner.env(var, "/tmp/the-persons-socket");
        }
        let (mut cmd, _temp) = walls.wrap(inner).unwrap();
        cmd.current_dir(&root);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        std::mem::forget(dir);
        (root, text)
    }

    /// What a check must not do, whatever user runs it: hold a capability,
    /// make a unix socket (pathname or abstract), write a temp folder
    /// anyone else sees, see the person's session variables.
    const ESCAPES: &str = "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
        python3 -c 'import socket\nfor a in (\"/tmp/x.sock\", \"\\0ralph-walls-abstract\"):\n  try:\n    socket.socket(socket.AF_UNIX).connect(a)\n  except OSError as e: print(\"unix:\", e.errno)'; \
        python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair:\", b.recv(1))'; \
        python3 -c 'import socket\ntry:\n  socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); print(\"dgram: made\")\nexcept OSError as e: print(\"dgram:\", e.errno)'; \
        python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); r = c.syscall(425, 4, ctypes.create_string_buffer(120)); print(\"uring:\", ctypes.get_errno() if r < 0 else \"made\")'; \
        echo t > /tmp/ralph-walls-probe && echo t > /var/tmp/ralph-walls-probe && echo t > /dev/shm/ralph-walls-probe && echo \"tmpdir: $TMPDIR\" && echo temp-written; \
        env | grep -E '^(SSH_AUTH_SOCK|TMUX|DISPLAY|DOCKER_HOST|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS)=' | sed 's/^/leaked: /'; \
        echo done";

    /// Whether this machine lets a process make an `io_uring` at all
    /// (`kernel.io_uring_disabled` refuses it EPERM too, walls or none).
    fn io_uring_here() -> bool {
        let out = super::super::group::shell(
            "python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); r = c.syscall(425, 4, ctypes.create_string_buffer(120)); print(\"uring:\", ctypes.get_errno() if r < 0 else \"made\")'",
        )
        .output()
        .unwrap();
        String::from_utf8_lossy(&out.stdout) == "uring: made\n"
    }

    /// The check's `io_uring_setup` failed with EPERM, where one outside
    /// the walls succeeds (else the refusal proves nothing: skipped, said).
    fn assert_uring_refused(output: &str) {
        if io_uring_here() {
            assert!(output.contains("uring: 1\n"), "{output}");
        } else {
            eprintln!("skipped the io_uring half: this machine refuses io_uring to every process");
        }
    }

    fn assert_no_escape(output: &str) {
        assert!(output.contains("done"), "{output}");
        assert!(
            output.contains("CapEff:\t0000000000000000") && output.contains("NoNewPrivs:\t1"),
            "{output}"
        );
        // EPERM (1) from the filter, for the pathname and the abstract one.
        assert_eq!(output.matches("unix: 1").count(), 2, "{output}");
        assert!(output.contains("pair: b'x'"), "{output}");
        // A datagram pair, and io_uring (which makes sockets of its own).
        assert!(output.contains("dgram: 1\n"), "{output}");
        assert_uring_refused(output);
        assert!(output.contains("temp-written"), "{output}");
        assert!(!output.contains("leaked:"), "{output}");
        for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
            let probe = Path::new(dir).join("ralph-walls-probe");
            assert!(
                !probe.exists(),
                "{} is the person's: {output}",
                probe.display()
            );
        }
    }

    #[test]
    fn a_bubblewrap_check_has_no_capability_no_unix_socket_and_temp_of_its_own() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (_, output) = probe(mechanism, ESCAPES);
        assert!(output.contains("tmpdir: /tmp"), "{output}");
        assert_no_escape(&output);
        // Not even as root can it take the tmpfs off what it must not see.
        let (root, output) = probe(
            mechanism,
            "umount /proc && echo unmounted; mount -o remount,rw / && echo remounted; \
             touch .git/HEAD.lock && echo locked; echo done",
        );
        assert!(output.contains("done"), "{output}");
        for word in ["unmounted", "remounted", "locked"] {
            assert!(!output.contains(word), "{output}");
        }
        assert!(!root.join(".git/HEAD.lock").exists());
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

        // Nothing a check must not do, and the temp folder its own, gone after.
        let mut inner =
            super::super::group::shell(&format!("{ESCAPES}; echo \"$TMPDIR\" > src/tmpdir.txt"));
        for var in SESSION_VARIABLES {
            inner.env(var, "/tmp/the-persons-socket");
        }
        let (mut cmd, temp) = walls.wrap(inner).unwrap();
        let out = cmd.current_dir(&root).output().unwrap();
        let output = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let tmpdir = temp.path().unwrap().to_path_buf();
        assert_eq!(
            std::fs::read_to_string(root.join("src/tmpdir.txt"))
                .unwrap()
                .trim(),
            tmpdir.display().to_string(),
            "{output}"
        );
        // The temp folders themselves are refused; the check's own is not.
        assert!(!output.contains("temp-written"), "{output}");
        assert!(!Path::new("/tmp/ralph-walls-probe").exists(), "{output}");
        assert!(output.contains("CapEff:\t0000000000000000"), "{output}");
        assert_eq!(output.matches("unix: 1").count(), 2, "{output}");
        assert!(
            output.contains("pair: b'x'") && !output.contains("leaked:"),
            "{output}"
        );
        assert!(output.contains("dgram: 1\n"), "{output}");
        assert_uring_refused(&output);
        drop(temp);
        assert!(!tmpdir.exists(), "the check's temp folder outlived it");
        let (_, output) = run(
            &walls,
            &root,
            "echo t > \"$(mktemp)\" && echo own-temp; umount /proc && echo unmounted; \
             (: < /dev/tty) && echo terminal; echo done",
        );
        assert!(
            output.contains("own-temp") && output.contains("done"),
            "{output}"
        );
        assert!(
            !output.contains("unmounted") && !output.contains("terminal"),
            "{output}"
        );
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

    /// What reached the host's listeners on 127.0.0.1 (TCP and UDP) from
    /// a check in `walls`, and what the check said: it also serves and
    /// reaches a listener of its own on its loopback.
    fn loopback_reached(walls: &Walls, root: &Path) -> (Vec<String>, String) {
        use std::io::Read;
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        udp.set_nonblocking(true).unwrap();
        let script = format!(
            "python3 -c 'import socket\n\
             try:\n  s = socket.create_connection((\"127.0.0.1\", {tcp}), timeout=3); s.sendall(b\"tcp\"); s.close(); print(\"tcp: sent\")\n\
             except OSError as e: print(\"tcp:\", e.errno)\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"udp\", (\"127.0.0.1\", {udp})); print(\"udp: sent\")\n\
             except OSError as e: print(\"udp:\", e.errno)\n\
             own = socket.socket(); own.bind((\"127.0.0.1\", 0)); own.listen()\n\
             socket.create_connection(own.getsockname(), timeout=3).close(); print(\"own loopback: reached\")'",
            tcp = tcp.local_addr().unwrap().port(),
            udp = udp.local_addr().unwrap().port()
        );
        let (_, output) = run(walls, root, &script);
        let mut heard = Vec::new();
        if let Ok((mut stream, _)) = tcp.accept() {
            stream.set_nonblocking(false).unwrap();
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            heard.push(text);
        }
        let mut buf = [0u8; 16];
        if let Ok(n) = udp.recv(&mut buf) {
            heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        (heard, output)
    }

    #[test]
    fn a_check_reaches_no_listener_on_the_hosts_loopback_unless_it_needs_the_network() {
        let mut mechanisms = Vec::new();
        if let Some(bwrap) = bwrap_or_skip() {
            mechanisms.push(bwrap.clone());
        }
        if landlock::supported() {
            mechanisms.push(Mechanism::Landlock("a test".into()));
        } else {
            eprintln!("skipped Landlock's half: no Landlock");
        }
        if mechanisms.is_empty() {
            eprintln!("skipped: neither bubblewrap nor Landlock walls a check here");
            return;
        }
        for mechanism in mechanisms {
            let (base, root) = project_outside_temp("network");
            let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism);
            assert!(!walls.network());
            let (heard, output) = loopback_reached(&walls, &root);
            // ECONNREFUSED in its own namespace, as the agent gets.
            assert!(heard.is_empty(), "{heard:?} {output}");
            assert!(output.contains("tcp: 111"), "{output}");
            assert!(output.contains("own loopback: reached"), "{output}");
            let walls = walls.with_network(true);
            assert!(walls.network());
            let (heard, output) = loopback_reached(&walls, &root);
            assert_eq!(heard, ["tcp", "udp"], "{output}");
            let _ = std::fs::remove_dir_all(&base);
        }
    }

    /// Runs `script` in `walls` as Landlock builds them with `network` as
    /// this machine's way off the network; what it said.
    fn run_landlock_with(
        walls: &Walls,
        root: &Path,
        network: &NetworkWall,
        script: &str,
    ) -> String {
        let walls = Walls {
            off_network: network.clone(),
            ..walls.clone()
        };
        run(&walls, root, script).1
    }

    #[test]
    fn required_walls_refuse_a_check_that_would_keep_the_machines_network() {
        if !landlock::supported() {
            eprintln!("skipped: no Landlock");
            return;
        }
        let (base, root) = project_outside_temp("open-network");
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        let walls = Walls {
            off_network: NetworkWall::Open("no namespace and no ABI 4 here".into()),
            ..walls
        };
        let err = walls.shell("true").unwrap_err().to_string();
        assert!(
            err.contains("no namespace and no ABI 4 here") && err.contains("\"network\": true"),
            "{err}"
        );
        // Wanted (auto), it runs and is said; and a check that says it
        // needs the network needs no wall off it.
        let auto = Walls {
            wanted: WallsWanted::Auto,
            ..walls.clone()
        };
        assert!(auto.shell("true").is_ok());
        let notice = auto.notice().unwrap();
        assert!(
            notice.contains("off the network: none: it has this machine's network"),
            "{notice}"
        );
        assert!(walls.clone().with_network(true).shell("true").is_ok());
        let line = walls
            .with_network(true)
            .network_line("the check `fetch`", "\"network\": true");
        assert!(
            line.as_deref()
                .is_some_and(|l| l.contains("so do the others")),
            "{line:?}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn under_tcp_rules_mptcp_fast_open_and_udp_reach_nothing_of_the_host() {
        if !landlock::supported() || landlock::kernel_abi() < 4 {
            eprintln!("skipped: no Landlock ABI 4");
            return;
        }
        let (base, root) = project_outside_temp("mptcp");
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        let (heard, output) = mptcp_and_udp_reached(&walls, &root);
        assert!(heard.is_empty(), "{heard:?} {output}");
        assert!(output.contains("udp: 1\n"), "{output}");
        // TCP Fast Open connects from sendto(2), past Landlock's connect rule.
        assert!(output.contains("tfo: 1\n"), "{output}");
        if output.contains("mptcp: none here") {
            eprintln!("skipped the MPTCP half: this kernel has no MPTCP");
        } else {
            assert!(output.contains("mptcp: 1\n"), "{output}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    /// What of the host's TCP and UDP listeners on 127.0.0.1 a check in
    /// `walls` (Landlock's, with TCP rules) reached by MPTCP and by UDP.
    fn mptcp_and_udp_reached(walls: &Walls, root: &Path) -> (Vec<String>, String) {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        udp.set_nonblocking(true).unwrap();
        // IPPROTO_MPTCP is 262; where this kernel has none, not even an
        // unwalled socket is made.
        let here = "python3 -c 'import socket\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).close(); print(\"mptcp here\")\n\
             except OSError: print(\"mptcp: none here\")'";
        let script = format!(
            "python3 -c 'import socket\n\
             try:\n  s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); s.settimeout(3); s.connect((\"127.0.0.1\", {tcp})); s.sendall(b\"mptcp\"); s.close(); print(\"mptcp: sent\")\n\
             except OSError as e: print(\"mptcp:\", e.errno)\n\
             try:\n  socket.socket().sendto(b\"tfo\", socket.MSG_FASTOPEN, (\"127.0.0.1\", {tcp})); print(\"tfo: sent\")\n\
             except OSError as e: print(\"tfo:\", e.errno)\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"udp\", (\"127.0.0.1\", {udp})); print(\"udp: sent\")\n\
             except OSError as e: print(\"udp:\", e.errno)'",
            tcp = tcp.local_addr().unwrap().port(),
            udp = udp.local_addr().unwrap().port()
        );
        let said_here = {
            let out = super::super::group::shell(here).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let rules = NetworkWall::TcpRules("a test".into());
        let output = said_here + &run_landlock_with(walls, root, &rules, &script);
        let mut heard = Vec::new();
        std::thread::sleep(std::time::Duration::from_millis(100));
        if let Ok((mut stream, _)) = tcp.accept() {
            use std::io::Read;
            stream.set_nonblocking(false).unwrap();
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            heard.push(format!("tcp: {text}"));
        }
        let mut buf = [0u8; 16];
        if let Ok(n) = udp.recv(&mut buf) {
            heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        (heard, output)
    }

    /// A file descriptor that ralph inherited without close-on-exec (a
    /// service manager's socket, an editor's terminal), as the number
    /// `fd` of this process: open while the returned guard lives.
    struct Leaked(i32);

    impl Leaked {
        #[allow(unsafe_code)]
        fn at(fd: i32) -> Leaked {
            use std::os::fd::AsRawFd;
            let file = std::fs::File::open("/dev/null").unwrap();
            // SAFETY: dup2(2) onto a number no test uses; fcntl(2) on it.
            unsafe {
                assert_eq!(libc::dup2(file.as_raw_fd(), fd), fd);
                assert_eq!(libc::fcntl(fd, libc::F_SETFD, 0), 0);
            }
            Leaked(fd)
        }
    }

    impl Drop for Leaked {
        #[allow(unsafe_code)]
        fn drop(&mut self) {
            // SAFETY: closes the number this guard made.
            unsafe {
                libc::close(self.0);
            }
        }
    }

    #[test]
    fn a_descriptor_ralph_inherited_does_not_reach_the_check() {
        let leaked = Leaked::at(907);
        let script = "[ -e /dev/fd/907 ] && echo fd: inherited || echo fd: none";
        let unwalled = super::super::group::shell(script).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&unwalled.stdout), "fd: inherited\n");
        let mut mechanisms = Vec::new();
        if let Some(bwrap) = bwrap_or_skip() {
            mechanisms.push(bwrap.clone());
        }
        if landlock::supported() {
            mechanisms.push(Mechanism::Landlock("a test".into()));
        } else {
            eprintln!("skipped Landlock's half: no Landlock");
        }
        for mechanism in mechanisms {
            let (base, root) = project_outside_temp("inherited-fd");
            let walls =
                Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
            let (_, output) = run(&walls, &root, script);
            assert_eq!(output, "fd: none\n", "{mechanism:?}");
            let _ = std::fs::remove_dir_all(&base);
        }
        drop(leaked);
    }

    #[test]
    fn a_check_makes_no_vsock_socket_unless_it_needs_the_network() {
        // AF_VSOCK (40) reaches the host of a VM whatever the namespace.
        let script = "python3 -c 'import socket\ntry:\n  socket.socket(40, socket.SOCK_STREAM).close(); print(\"vsock: made\")\nexcept OSError as e: print(\"vsock:\", e.errno)'";
        let unwalled = super::super::group::shell(script).output().unwrap();
        if String::from_utf8_lossy(&unwalled.stdout) != "vsock: made\n" {
            eprintln!("skipped: this kernel makes no vsock socket");
            return;
        }
        let mut mechanisms = Vec::new();
        if let Some(bwrap) = bwrap_or_skip() {
            mechanisms.push(bwrap.clone());
        }
        if landlock::supported() {
            mechanisms.push(Mechanism::Landlock("a test".into()));
        }
        for mechanism in mechanisms {
            let (base, root) = project_outside_temp("vsock");
            let walls =
                Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
            let (_, output) = run(&walls, &root, script);
            assert_eq!(output, "vsock: 1\n", "{mechanism:?}");
            let (_, output) = run(&walls.with_network(true), &root, script);
            assert_eq!(output, "vsock: made\n", "{mechanism:?}");
            let _ = std::fs::remove_dir_all(&base);
        }
    }

    #[test]
    fn where_no_network_namespace_can_be_made_landlock_refuses_every_tcp_connect() {
        if !landlock::supported() || landlock::kernel_abi() < 4 {
            eprintln!("skipped: no Landlock ABI 4");
            return;
        }
        let (base, root) = project_outside_temp("tcp-rules");
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let script = format!(
            "python3 -c 'import socket\ntry:\n  socket.create_connection((\"127.0.0.1\", {}), timeout=3); print(\"tcp: reached\")\nexcept OSError as e: print(\"tcp:\", e.errno)'",
            listener.local_addr().unwrap().port()
        );
        let rules = NetworkWall::TcpRules("a test".into());
        let output = run_landlock_with(&walls, &root, &rules, &script);
        // EACCES from Landlock; nothing reached the listener.
        assert!(output.contains("tcp: 13"), "{output}");
        assert!(listener.accept().is_err(), "{output}");
        // Said at the start: no loopback of its own, TCP rules only.
        let walls = Walls {
            off_network: rules,
            ..walls
        };
        let notice = walls.notice().unwrap();
        assert!(notice.contains("Landlock's TCP rules (ABI 4)"), "{notice}");
        let line = walls
            .network_line("the check `fetch`", "\"network\": true")
            .unwrap();
        assert!(
            !line.contains("a loopback of their own") && line.contains("TCP rules"),
            "{line}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_home_in_a_temp_folder_stays_in_sight_read_only() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (dir, root) = project();
        let home = std::fs::canonicalize(dir.path()).unwrap().join("home");
        std::fs::create_dir_all(home.join(".config")).unwrap();
        std::fs::write(home.join(".config/tool.toml"), "cache = true\n").unwrap();
        let bin = home.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let path = std::env::join_paths([bin.clone(), PathBuf::from("/usr/bin")]).unwrap();
        let seen = seen_in_temp_of(Some(home.clone().into()), Some(path));
        if !TEMP_FOLDERS.iter().any(|t| home.starts_with(t)) {
            assert!(seen.is_empty(), "{seen:?}");
            eprintln!("skipped: the temp folder is not /tmp here");
            return;
        }
        // One entry: the PATH folder lies inside the home folder.
        assert_eq!(seen, vec![home.clone()]);
        let walls = Walls {
            seen_in_temp: seen,
            ..Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone())
        };
        let (_, output) = run(
            &walls,
            &root,
            &format!(
                "cat {home}/.config/tool.toml; echo x > {home}/.bashrc && echo wrote; echo done",
                home = home.display()
            ),
        );
        assert!(
            output.contains("cache = true") && output.contains("done"),
            "{output}"
        );
        assert!(
            !output.contains("wrote") && !home.join(".bashrc").exists(),
            "{output}"
        );
    }

    /// A main checkout outside the temp folders with its own code, a
    /// `node_modules` and a `.venv` it keeps out of git, and a worktree of
    /// it under `.claude/worktrees/` with code of its own.
    fn main_and_worktree(name: &str) -> (PathBuf, PathBuf, PathBuf) {
        let (base, root) = project_outside_temp(name);
        std::fs::write(root.join("src/code.py"), "main-code\n").unwrap();
        std::fs::write(root.join(".claude/ralph/config.json"), "{}").unwrap();
        for (dir, file, text) in [
            ("node_modules/dep", "index.js", "dep-code\n"),
            (".venv/bin", "tool", "venv-tool\n"),
        ] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
            std::fs::write(root.join(dir).join(file), text).unwrap();
        }
        let tree = root.join(".claude/worktrees/item");
        let gitdir = root.join(".git/worktrees/item");
        std::fs::create_dir_all(tree.join("src")).unwrap();
        std::fs::create_dir_all(&gitdir).unwrap();
        std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
        std::fs::write(tree.join("src/code.py"), "tree-code\n").unwrap();
        (base, root, tree)
    }

    /// What a worktree's check must and must not reach of the main checkout.
    fn assert_main_checkout_out_of_reach(mechanism: Mechanism, name: &str) {
        let (base, root, tree) = main_and_worktree(name);
        let walls = Walls::with_mechanism(&root, &tree, WallsWanted::Required, mechanism);
        let script = format!(
            "cat src/code.py; cat {root}/src/code.py; ls {root}/.claude/ralph; \
             cat {root}/node_modules/dep/index.js {root}/.venv/bin/tool; head -1 {root}/.git/config; \
             echo x > {root}/node_modules/dep/index.js; echo y > {root}/src/code.py; \
             echo w > src/new.py && echo written; echo done",
            root = root.display()
        );
        let (_, output) = run(&walls, &tree, &script);
        assert!(
            output.contains("done") && output.contains("written"),
            "{output}"
        );
        assert!(output.contains("tree-code"), "{output}");
        assert!(!output.contains("main-code"), "{output}");
        assert!(!output.contains("config.json"), "{output}");
        assert!(
            output.contains("dep-code") && output.contains("venv-tool"),
            "{output}"
        );
        assert!(output.contains("[core]"), "{output}");
        assert_eq!(
            std::fs::read_to_string(root.join("node_modules/dep/index.js")).unwrap(),
            "dep-code\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("src/code.py")).unwrap(),
            "main-code\n"
        );
        assert!(tree.join("src/new.py").is_file());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_worktree_check_sees_of_the_main_checkout_only_git_and_dependencies_bubblewrap() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        assert_main_checkout_out_of_reach(mechanism.clone(), "hidden-bwrap");
    }

    #[test]
    fn a_worktree_check_sees_of_the_main_checkout_only_git_and_dependencies_landlock() {
        if !landlock::supported() {
            eprintln!("skipped: no Landlock");
            return;
        }
        assert_main_checkout_out_of_reach(Mechanism::Landlock("a test".into()), "hidden-landlock");
    }

    #[test]
    fn a_worktree_check_takes_a_path_folder_from_the_worktree_where_it_has_it() {
        let (base, root, tree) = main_and_worktree("path");
        let venv = root.join(".venv/bin");
        let modules = root.join("node_modules/.bin");
        std::fs::create_dir_all(&modules).unwrap();
        let path = format!("{}:{}:/usr/bin", venv.display(), modules.display());
        let walls = Walls::around(&root, &tree, WallsWanted::Off);
        // The worktree has no environment of its own yet: the main checkout's.
        assert_eq!(walls.path_for_check(&path), path);
        std::fs::create_dir_all(tree.join(".venv/bin")).unwrap();
        assert_eq!(
            walls.path_for_check(&path),
            format!(
                "{}:{}:/usr/bin",
                tree.join(".venv/bin").display(),
                modules.display()
            )
        );
        let mut command = super::super::group::shell("echo \"$PATH|$VIRTUAL_ENV\"");
        command
            .env("PATH", &path)
            .env("VIRTUAL_ENV", root.join(".venv"));
        let (mut command, _temp) = walls.wrap(command).unwrap();
        let out = command.output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            said.trim(),
            format!(
                "{}:{}:/usr/bin|{}",
                tree.join(".venv/bin").display(),
                modules.display(),
                tree.join(".venv").display()
            )
        );
        // The main checkout's own walls change nothing.
        let own = Walls::around(&root, &root, WallsWanted::Off);
        assert_eq!(own.path_for_check(&path), path);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn a_toolchain_cache_in_a_home_in_a_temp_folder_stays_writable() {
        let Some(mechanism) = bwrap_or_skip() else {
            return;
        };
        let (dir, root) = project();
        let home = std::fs::canonicalize(dir.path()).unwrap().join("home");
        let cache = home.join(".cache/go-build");
        std::fs::create_dir_all(&cache).unwrap();
        let walled = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        let walls = Walls {
            seen_in_temp: vec![home.clone()],
            writable: vec![root.clone(), cache.clone()],
            ..walled
        };
        assert_eq!(walls.caches(), std::slice::from_ref(&cache));
        let (_, output) = run(
            &walls,
            &root,
            &format!(
                "echo built > {cache}/entry && echo cached; echo x > {home}/.bashrc && echo wrote; echo done",
                cache = cache.display(),
                home = home.display()
            ),
        );
        assert!(
            output.contains("cached") && output.contains("done"),
            "{output}"
        );
        assert!(cache.join("entry").is_file(), "{output}");
        assert!(
            !output.contains("wrote") && !home.join(".bashrc").exists(),
            "{output}"
        );
        // A cache hidden with ralph's key folder is writable no more.
        let walls = walls.hide(home.join(".cache"));
        assert!(walls.caches().is_empty());
        assert_eq!(
            walls.refused_caches().len(),
            1,
            "{:?}",
            walls.refused_caches()
        );
    }

    #[test]
    fn a_checks_bytecode_and_pytest_cache_stay_out_of_the_tree() {
        let (_dir, root) = project();
        std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
        let script = "python3 -c 'import calc, sys; print(\"written\", sys.dont_write_bytecode)'; \
                      echo \"addopts $PYTEST_ADDOPTS\"";
        let mut mechanisms = vec![Walls::open()];
        if let Some(mechanism) = bwrap_or_skip() {
            mechanisms.push(Walls::with_mechanism(
                &root,
                &root,
                WallsWanted::Required,
                mechanism.clone(),
            ));
        }
        for walls in mechanisms {
            let (code, output) = run(&walls, &root, script);
            assert_eq!(code, 0, "{output}");
            assert!(output.contains("written True"), "{output}");
            assert!(
                output.contains("addopts -o cache_dir=/") && output.contains("/pytest-cache"),
                "{output}"
            );
            assert!(!root.join("__pycache__").exists(), "{output}");
        }
        assert_eq!(shell_quoted("cache_dir=/a b/c"), "'cache_dir=/a b/c'");
        assert_eq!(shell_quoted("cache_dir=/tmp/x"), "cache_dir=/tmp/x");
        assert_eq!(shell_quoted("it's"), "'it'\"'\"'s'");
    }

    #[test]
    fn landlock_walls_make_cargos_first_entries_before_the_check() {
        if !landlock::supported() {
            eprintln!("skipped: no Landlock");
            return;
        }
        let (base, root) = project_outside_temp("landlock-cargo");
        std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
        let walls = Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            Mechanism::Landlock("a test".into()),
        );
        let (_, output) = run(
            &walls,
            &root,
            "mkdir -p target/debug && echo t > target/debug/x && echo lock >> Cargo.lock && echo built; \
             echo n > new-at-top && echo made; echo done",
        );
        assert!(
            output.contains("built") && output.contains("done"),
            "{output}"
        );
        assert!(root.join("target/debug/x").is_file());
        assert_eq!(
            std::fs::read_to_string(root.join("Cargo.lock")).unwrap(),
            "lock\n"
        );
        // Any other new entry at the top is still refused.
        assert!(!output.contains("made") && !root.join("new-at-top").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn this_kernel_enforces_every_landlock_right_ralph_asks_for() {
        if !landlock::supported() {
            eprintln!("skipped: no Landlock");
            return;
        }
        // What `restrict_self` said in a child restricted as a check is.
        assert_eq!(landlock::enforcement(), Ok(()));
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
        assert_eq!(auto.shell("true").unwrap().0.get_program(), "sh");
        assert_eq!(Walls::open().notice(), None);

        // Landlock that this kernel enforces only in part: refused when the
        // walls are required, used and said when they are wanted.
        let part = Mechanism::LandlockInPart("it lacks ABI 6".into());
        let required = Walls::with_mechanism(&root, &root, WallsWanted::Required, part.clone());
        let err = required.shell("true").unwrap_err();
        assert!(err.to_string().contains("it lacks ABI 6"), "{err}");
        let auto = Walls::with_mechanism(&root, &root, WallsWanted::Auto, part);
        assert!(auto.notice().unwrap().contains("in part"));

        // No socket filter for this architecture: refused when the walls
        // are required, said when they are wanted.
        let bwrap = Mechanism::Bubblewrap("/usr/bin/bwrap".into());
        let unfiltered = Walls {
            socket_filter: false,
            ..Walls::with_mechanism(&root, &root, WallsWanted::Required, bwrap)
        };
        let err = unfiltered.shell("true").unwrap_err().to_string();
        assert!(
            err.contains("no socket filter for this architecture")
                && err.contains("sandbox to auto"),
            "{err}"
        );
        let wanted = Walls {
            wanted: WallsWanted::Auto,
            ..unfiltered
        };
        let notice = wanted.notice().unwrap_or_default();
        assert!(
            notice.contains("no socket filter for this architecture"),
            "{notice}"
        );
        if landlock::supported() {
            let (cmd, temp) = auto.shell("true").unwrap();
            assert_eq!(cmd.get_program(), "sh");
            assert!(temp.path().is_some_and(Path::is_dir));
        }
    }
}
