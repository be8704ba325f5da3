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

mod bubblewrap;
pub mod caches;
mod descriptors;
#[cfg(target_os = "linux")]
mod landlock;
mod mechanism;
mod seccomp;
mod temp;
mod worktree;

use bubblewrap::*;
use descriptors::*;
use mechanism::*;
pub use mechanism::{Mechanism, NetworkWall, landlock_features, network_walls};
use temp::*;
pub use temp::{CheckTemp, OUT_OF_THE_TREE};
pub use worktree::hidden_from_worktree;
use worktree::*;

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
    /// The variables that send the toolchains to the checks' own caches
    /// ([`caches::Owner::Checks`]), never the person's.
    cache_env: Vec<(String, OsString)>,
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

/// The dependency folders a project keeps out of git that a worktree's
/// check sees of the main checkout, read-only, where they are: Node's
/// `node_modules` (node and npm look for it in every folder above the
/// worktree, as they do by hand) and a Python virtual environment (found
/// by the `PATH` the person runs ralph with). Nothing of the project's own
/// code lies in them, but an editable install's pointer to it, which
/// leads into the hidden main checkout and fails (and is named, see
/// `observe::main_checkout`).
pub const SHARED_DEPENDENCY_FOLDERS: [&str; 3] = ["node_modules", ".venv", "venv"];

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
            seen_in_temp: Vec::new(),
            refused_caches: Vec::new(),
            cache_env: Vec::new(),
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
            WallsWanted::Off => {
                let (folder, cache_env) = checks_caches(project);
                Walls {
                    worktree_of: worktree_of(project, work_root),
                    cache_env,
                    refused_caches: folder.err().map(|e| e.to_string()).into_iter().collect(),
                    ..Walls::open()
                }
            }
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
        // What the toolchains write outside the project by themselves: the
        // checks' own caches, never the person's.
        let (caches_folder, cache_env) = checks_caches(&project);
        let mut refused_caches = Vec::new();
        match caches_folder {
            Ok(folder) => writable.push(folder),
            Err(line) => refused_caches.push(line.to_string()),
        }
        Walls {
            wanted,
            writable,
            read_only,
            hidden,
            seen_in_temp,
            refused_caches,
            cache_env,
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

    /// The variables that send a check's toolchains to [`Walls::caches`].
    pub fn cache_env(&self) -> &[(String, OsString)] {
        &self.cache_env
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
        self.wrap(crate::process::group::shell(command))
    }

    /// `inner` run inside the walls: the same program, arguments,
    /// environment and folder; the environment without
    /// [`SESSION_VARIABLES`], TMPDIR the check's own temp folder. The
    /// [`CheckTemp`] must live until the command ends.
    pub fn wrap(&self, mut inner: Command) -> Result<(Command, CheckTemp), WallsMissing> {
        for (name, value) in &self.cache_env {
            inner.env(name, value);
        }
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
        let walled =
            landlock::wall(self, inner, &dir, required).map_err(|e| failed(e.to_string()))?;
        Ok((walled, temp))
    }

    #[cfg(not(target_os = "linux"))]
    fn landlock(&self, _inner: Command) -> Result<(Command, CheckTemp), WallsMissing> {
        Err(WallsMissing("Landlock is Linux's".into()))
    }
}

/// The checks' own caches of `project` (made here, by ralph, before the
/// check: a check never makes a folder it may write) and the variables
/// that send the toolchains there. Where that set cannot be written (a
/// `ralph-ctl check` the agent runs in the client's sandbox, which lets it
/// write only its own set), the agent's: what such a check decides nothing.
/// The folder is `Err` with the line for the person when neither can be.
fn checks_caches(project: &Path) -> (Result<PathBuf, CachesRefused>, Vec<(String, OsString)>) {
    let writable = |folder: &Path| {
        if std::fs::create_dir_all(folder).is_err() {
            return false;
        }
        let probe = folder.join(format!(".ralph-probe-{}", std::process::id()));
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
            .is_ok();
        let _ = std::fs::remove_file(&probe);
        made
    };
    let sets = [caches::Owner::Checks, caches::Owner::Agent]
        .into_iter()
        .filter_map(|owner| caches::own_caches(project, owner));
    let mut first = None;
    for set in sets {
        if writable(&set.folder) {
            let folder = std::fs::canonicalize(&set.folder).unwrap_or(set.folder);
            return (Ok(folder), set.env);
        }
        first.get_or_insert(set);
    }
    match first {
        Some(set) => (Err(CachesRefused::Unwritable(set.folder)), set.env),
        None => (Err(CachesRefused::NoFolder), Vec::new()),
    }
}

/// Why the checks have no caches of their own ([`checks_caches`]), as the
/// line for the person.
#[derive(Debug, thiserror::Error)]
enum CachesRefused {
    /// Neither the checks' set nor the agent's can be written.
    #[error(
        "walls: the checks' caches ({}) cannot be written: the toolchains' caches stay \
         read-only for the checks",
        .0.display()
    )]
    Unwritable(PathBuf),
    /// The system names no cache folder.
    #[error(
        "walls: the system names no cache folder (is HOME set?): the toolchains' caches stay \
         read-only for the checks"
    )]
    NoFolder,
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
