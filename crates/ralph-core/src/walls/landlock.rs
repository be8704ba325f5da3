//! Walls built with Landlock, for a machine where bubblewrap cannot run.
//!
//! A Landlock rule grants rights on a whole folder and everything beneath
//! it; nothing can be taken back below. So a folder that holds a protected
//! path is not granted: each of its entries is, but the protected one
//! (down the path to it). What that costs, against bubblewrap: in the
//! checked folder, a check cannot create, remove or rename an entry at the
//! top (a new file in a subfolder is fine; an existing top-level file can
//! be written); a folder on the way to a hidden one cannot be listed, nor a
//! file created in it later read. The temp folders are not writable: the
//! check's TMPDIR is a folder of its own, removed after it. Writes to
//! `/dev` (`/dev/null`) are allowed, `/dev/shm` excepted; no terminal can
//! be opened (`/dev/tty`, `/dev/pts`, `/dev/console`).
//!
//! The rules are applied by the landlock crate's `restrict_self` in the
//! child, and its answer is read: walls the kernel enforces only in part
//! (an older kernel without some of the rights or scopes ralph asks for)
//! are refused where walls are required, and said once where they are
//! wanted ([`enforcement`]). The same child loads the filter that refuses
//! unix sockets (see `seccomp`), after Landlock has set no new privileges.
//!
//! Off the network, a check first enters a network namespace of its own,
//! with loopback only, up ([`OwnNetwork`]): as root directly, otherwise
//! inside a user namespace of its own (its own user and group mapped to
//! themselves). Where the machine refuses that (user namespaces off, as in
//! the containers where bubblewrap cannot run either), Landlock's TCP
//! rules (ABI 4) refuse it every TCP bind and connect instead, and the
//! filter every other internet socket (UDP, and MPTCP, SCTP and SMC, which
//! those rules do not cover) and a send with `MSG_FASTOPEN` (which connects
//! without `connect(2)`); with neither, walls that are required are
//! refused. Which one this machine gives, [`network_wall`] learns once.

use std::path::{Path, PathBuf};
use std::process::Command;

use std::ffi::CString;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreated, RulesetCreatedAttr, RulesetError, RulesetStatus, Scope, path_beneath_rules,
};

use super::{NetworkWall, Walls};

/// The newest Landlock ABI ralph asks for; an older kernel gives what it has,
/// and [`enforcement`] says so.
const ABI_WANTED: ABI = ABI::V7;

/// Why Landlock's walls could not be built, or are not enforced whole.
#[derive(Debug, thiserror::Error)]
pub(super) enum LandlockError {
    /// The ruleset itself was refused.
    #[error("Landlock refused the walls: {0}")]
    Walls(#[source] RulesetError),
    /// A rule of the probe was refused.
    #[error("Landlock refused a rule: {0}")]
    Rule(#[source] RulesetError),
    /// The rule for `path` was refused.
    #[error("Landlock refused a rule for {}: {source}", path.display())]
    RuleFor {
        /// The path the rule grants.
        path: PathBuf,
        /// What Landlock said.
        source: RulesetError,
    },
    /// The kernel enforces only part of the rights and scopes asked for.
    #[error(
        "this kernel enforces Landlock only in part (it lacks some of the rights of ABI {}, \
         or its scopes)",
        ABI_WANTED as u32
    )]
    InPart,
    /// The probe could not be restricted or run.
    #[error("Landlock could not restrict a process: {0}")]
    CannotRestrict(#[source] std::io::Error),
}

/// Whether this kernel enforces Landlock at all.
pub(super) fn supported() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(landlock::Ruleset::create)
        .is_ok()
}

/// The ruleset every check's walls start from: every file right of
/// [`ABI_WANTED`] handled, every scope (signals and abstract unix sockets
/// kept inside the check's own processes), and, when `no_tcp`, TCP's bind
/// and connect handled with no port granted: every one refused.
fn base(no_tcp: bool) -> Result<RulesetCreated, LandlockError> {
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(ABI_WANTED));
    let ruleset = if no_tcp {
        ruleset.and_then(|r| r.handle_access(AccessNet::from_all(ABI_WANTED)))
    } else {
        ruleset
    };
    ruleset
        .and_then(|r| r.scope(Scope::from_all(ABI_WANTED)))
        .and_then(landlock::Ruleset::create)
        .map_err(LandlockError::Walls)
}

/// The Landlock ABI this kernel has (0: none).
#[allow(unsafe_code)]
// `syscall` answers a `c_long`: i64 here, i32 on a 32-bit target.
#[allow(clippy::useless_conversion)]
pub(super) fn kernel_abi() -> i64 {
    /// `LANDLOCK_CREATE_RULESET_VERSION`.
    const VERSION: libc::c_uint = 1;
    // SAFETY: asks the version, with no ruleset attributes to read.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            VERSION,
        )
    };
    i64::from(abi).max(0)
}

/// What this machine gives a check under Landlock off the network: learnt
/// once, by entering a network namespace in a child that runs `sh -c :`.
pub(super) fn network_wall() -> &'static NetworkWall {
    static WALL: OnceLock<NetworkWall> = OnceLock::new();
    WALL.get_or_init(|| {
        let mut probe = crate::process::group::shell(":");
        probe
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let own = OwnNetwork::prepare();
        own.enter_on_exec(&mut probe);
        let why = match probe.status() {
            Ok(status) if status.success() => return NetworkWall::Namespace,
            Ok(status) => format!("a network namespace could not be made ({status})"),
            Err(e) => format!("a network namespace could not be made ({e})"),
        };
        if kernel_abi() >= 4 {
            NetworkWall::TcpRules(why)
        } else {
            NetworkWall::Open(format!("{why} and this kernel has no Landlock ABI 4"))
        }
    })
}

/// What a child needs to enter a network namespace of its own, built
/// before the fork (nothing between fork and exec allocates): as root, the
/// namespace alone; otherwise a user namespace with it, and the maps that
/// keep the child's user and group its own inside.
pub(super) struct OwnNetwork {
    as_root: bool,
    maps: Vec<(CString, Vec<u8>)>,
}

impl OwnNetwork {
    #[allow(unsafe_code)]
    pub(super) fn prepare() -> OwnNetwork {
        // SAFETY: plain system calls with no arguments.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let map = |path: &str, text: String| (CString::new(path).unwrap_or_default(), text.into());
        if uid == 0 {
            return OwnNetwork {
                as_root: true,
                maps: Vec::new(),
            };
        }
        OwnNetwork {
            as_root: false,
            maps: vec![
                map("/proc/self/setgroups", "deny".into()),
                map("/proc/self/uid_map", format!("{uid} {uid} 1")),
                map("/proc/self/gid_map", format!("{gid} {gid} 1")),
            ],
        }
    }

    /// Has the child enter it before it runs the program.
    #[allow(unsafe_code)]
    fn enter_on_exec(self, command: &mut Command) {
        use std::os::unix::process::CommandExt;
        // SAFETY: `enter` makes system calls on memory it owns; no
        // allocation.
        unsafe {
            command.pre_exec(move || self.enter());
        }
    }

    /// Enters a new network namespace (in a new user namespace unless
    /// root) and brings its loopback up. Only system calls.
    #[allow(unsafe_code)]
    pub(super) fn enter(&self) -> std::io::Result<()> {
        let flags = if self.as_root {
            libc::CLONE_NEWNET
        } else {
            libc::CLONE_NEWUSER | libc::CLONE_NEWNET
        };
        // SAFETY: unshare(2), open(2), write(2), close(2), socket(2) and
        // ioctl(2) on memory this owns or on the stack.
        unsafe {
            if libc::unshare(flags) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for (path, text) in &self.maps {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, text.as_ptr().cast(), text.len());
                libc::close(fd);
                if written < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let mut request: libc::ifreq = std::mem::zeroed();
            for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
                *to = libc::c_char::from_ne_bytes([*from]);
            }
            let mut result = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &raw mut request);
            if result == 0 {
                request.ifr_ifru.ifru_flags |= libc::c_short::try_from(libc::IFF_UP).unwrap_or(1);
                result = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &raw mut request);
            }
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            if result != 0 {
                return Err(error);
            }
        }
        Ok(())
    }
}

/// Whether this kernel enforces every right and scope the walls ask for:
/// learnt once, by restricting a child that then runs `sh -c :` (the
/// status `restrict_self` returns is only known where it ran). `Err` says
/// what is missing.
pub(super) fn enforcement() -> Result<(), LandlockError> {
    let ruleset = base(false)?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(ABI_WANTED)))
        .map_err(LandlockError::Rule)?;
    let mut probe = crate::process::group::shell(":");
    probe
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    restrict_on_exec(&mut probe, ruleset, None, None, true);
    match probe.status() {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Err(LandlockError::InPart),
        Err(e) => Err(LandlockError::CannotRestrict(e)),
    }
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
    if !holds_one || !meta.as_ref().is_ok_and(std::fs::Metadata::is_dir) {
        rules.push((dir.to_path_buf(), access));
        return;
    }
    // An unreadable folder grants nothing beneath it: less, never more.
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        grant_except(rules, &entry.path(), access, except);
    }
}

/// `inner` with the walls of `walls` applied to it as it starts, its
/// private temp folder `temp` writable, off the network as the walls'
/// [`NetworkWall`] says: the ruleset is built here, and the child only
/// restricts itself with it (see [`restrict_on_exec`]).
pub(super) fn wall(
    walls: &Walls,
    mut inner: Command,
    temp: &Path,
    required: bool,
) -> Result<Command, LandlockError> {
    let all = AccessFs::from_all(ABI_WANTED);
    let read = AccessFs::from_read(ABI_WANTED);
    // No terminal: Landlock's check stays in ralph's session (a session of
    // its own would take it out of the process group that is killed with
    // it), so its controlling terminal is ralph's, and through it a check
    // could push input (TIOCSTI). It cannot open one.
    let terminals = ["/dev/tty", "/dev/pts", "/dev/console"].map(PathBuf::from);
    let unseen: Vec<PathBuf> = walls
        .hidden
        .iter()
        .cloned()
        .chain(terminals.clone())
        .collect();
    let mut rules = Vec::new();
    grant_except(&mut rules, Path::new("/"), read, &unseen);
    // What stays in sight, read-only, inside a hidden folder: a worktree's
    // main checkout's `.git` and shared dependency folders.
    for dir in &walls.read_only {
        if walls.hidden.iter().any(|hidden| dir.starts_with(hidden)) {
            grant_except(&mut rules, dir, read, &unseen);
        }
    }
    for dir in &walls.writable {
        grant_except(&mut rules, dir, all, &walls.read_only);
    }
    rules.push((temp.to_path_buf(), all));
    let not_in_dev: Vec<PathBuf> = terminals
        .into_iter()
        .chain([PathBuf::from("/dev/shm")])
        .collect();
    grant_except(&mut rules, Path::new("/dev"), all, &not_in_dev);
    let (own_network, no_tcp) = match (walls.network, &walls.off_network) {
        (true, _) | (false, NetworkWall::Open(_)) => (None, false),
        (false, NetworkWall::Namespace) => (Some(OwnNetwork::prepare()), false),
        (false, NetworkWall::TcpRules(_)) => (None, true),
    };
    let mut ruleset = base(no_tcp)?;
    for (path, access) in &rules {
        ruleset = ruleset
            .add_rules(path_beneath_rules([path], *access))
            .map_err(|source| LandlockError::RuleFor {
                path: path.clone(),
                source,
            })?;
    }
    let filters =
        super::seccomp::program(walls.filter_policy()).map(|p| super::seccomp::filters(&p));
    restrict_on_exec(&mut inner, ruleset, own_network, filters, required);
    Ok(inner)
}

/// Has the child restrict itself with `ruleset` before it runs the
/// program: a network namespace of its own first when `own_network`
/// ([`OwnNetwork::enter`]) (every descriptor from 3 up, inherited
/// ones among them, marked close-on-exec before that), every capability dropped ([`drop_capabilities`]), then the
/// crate's `restrict_self` (no new privileges, then
/// `landlock_restrict_self`), refuse to run when `required` and the kernel
/// enforced the rules only in part (the spawn fails with ENOTSUP), then
/// load `filters` (the unix-socket filter). Nothing between fork and exec
/// allocates or takes a lock: the ruleset and the filters are built here.
#[allow(unsafe_code)]
fn restrict_on_exec(
    command: &mut Command,
    ruleset: RulesetCreated,
    own_network: Option<OwnNetwork>,
    filters: Option<Vec<libc::sock_filter>>,
    required: bool,
) {
    use std::os::unix::process::CommandExt;
    let mut ruleset = Some(ruleset);
    // SAFETY: the closure takes the ruleset it owns, makes the system calls
    // of `restrict_self` and `prctl` on memory it owns, and returns the
    // error they give, built from an errno (no allocation).
    unsafe {
        command.pre_exec(move || {
            let errno = std::io::Error::from_raw_os_error;
            super::close_on_exec_from_3()?;
            if let Some(own) = &own_network {
                own.enter()?;
            }
            drop_capabilities()?;
            let ruleset = ruleset.take().ok_or_else(|| errno(libc::EINVAL))?;
            let status = ruleset
                .restrict_self()
                .map_err(|_| std::io::Error::last_os_error())?;
            if required && status.ruleset != RulesetStatus::FullyEnforced {
                return Err(errno(libc::ENOTSUP));
            }
            if status.ruleset == RulesetStatus::NotEnforced {
                return Err(errno(libc::ENOTSUP));
            }
            if let Some(filters) = &filters {
                let Ok(len) = u16::try_from(filters.len()) else {
                    return Err(errno(libc::EINVAL));
                };
                let program = libc::sock_fprog {
                    len,
                    filter: filters.as_ptr().cast_mut(),
                };
                if libc::prctl(
                    libc::PR_SET_SECCOMP,
                    libc::SECCOMP_MODE_FILTER,
                    &raw const program,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// The kernel's `__user_cap_header_struct`, for `capset(2)`.
#[repr(C)]
struct CapabilityHeader {
    version: u32,
    pid: libc::c_int,
}

/// The kernel's `__user_cap_data_struct`, for `capset(2)`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapabilityData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two data structs, 64 capabilities.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability of the calling process for good, as root too
/// (Landlock leaves them: a root check could load a kernel module): the
/// bounding set emptied first, so that no program it runs gets any back,
/// then the ambient, effective, permitted and inheritable sets. A process
/// without capabilities is refused the bounding-set drop (EPERM), which
/// leaves nothing to drop. Only system calls: safe between fork and exec.
#[allow(unsafe_code)]
fn drop_capabilities() -> std::io::Result<()> {
    // SAFETY: prctl(2) and capset(2) on this process, with a header and
    // data on the stack; no allocation.
    unsafe {
        for capability in 0..64 {
            if libc::prctl(libc::PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 {
                let error = *libc::__errno_location();
                // EINVAL: past the kernel's last capability; EPERM: none to drop.
                if error == libc::EINVAL || error == libc::EPERM {
                    break;
                }
                return Err(std::io::Error::from_raw_os_error(error));
            }
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        let header = CapabilityHeader {
            version: CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapabilityData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if libc::syscall(libc::SYS_capset, &header, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
