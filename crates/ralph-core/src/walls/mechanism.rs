//! Which walls this machine can build: bubblewrap, else Landlock, else
//! none ([`Mechanism::probe`], once per process), and what keeps a check
//! off the network under each ([`NetworkWall`]).

use super::*;

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
pub(super) fn network_wall_of(mechanism: &Mechanism) -> NetworkWall {
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
pub(super) fn landlock_instead(why: String) -> Mechanism {
    if !landlock::supported() {
        return Mechanism::Missing(format!("{why}, and this kernel has no Landlock"));
    }
    match landlock::enforcement() {
        Ok(()) => Mechanism::Landlock(why),
        Err(part) => Mechanism::LandlockInPart(format!("{why}, and {part}")),
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn landlock_instead(why: String) -> Mechanism {
    Mechanism::Missing(why)
}
