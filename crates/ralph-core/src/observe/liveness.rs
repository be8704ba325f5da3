//! Whether the processes that carry a driven loop still live.
//!
//! `ralph-ctl run` records itself and the client it starts in the state
//! ([`Carriers`]). A `running` loop whose carriers are all gone was left
//! behind by a launcher that could not record its end (SIGKILL, a closed
//! terminal, a reboot): it is not running, and must not refuse the next
//! start. A pid can be given to a new process later, so each is recorded
//! with its start time where the system tells it (Linux), and a process
//! that has exited but is not yet reaped counts as gone.

use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::units::ProcessId;

/// The processes that carry a driven loop: while one of them lives the loop
/// is really running; once all are gone (the launcher killed, its terminal
/// closed, the machine restarted) a `running` loop is not, and is taken for
/// interrupted (see `liveness`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Carriers {
    /// The machine they run on: from another one, nothing can be told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// `ralph-ctl run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<ProcessId>,
    /// The Claude Code client it started, while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<ProcessId>,
}

/// This process.
pub fn this_process() -> ProcessId {
    of_pid(std::process::id())
}

/// The process `pid`, with its start time when it can be read.
pub fn of_pid(pid: u32) -> ProcessId {
    ProcessId {
        pid,
        started: proc_stat(pid).map(|stat| stat.started),
    }
}

/// The carriers of a loop driven from this process, before its client starts.
pub fn carriers_of_this_process() -> Carriers {
    Carriers {
        host: host_name(),
        driver: Some(this_process()),
        client: None,
    }
}

/// Whether every process in `carriers` is gone. `false` when that cannot be
/// told: no process recorded, or recorded on another machine.
pub fn all_gone(carriers: &Carriers) -> bool {
    if carriers.host.is_some() && carriers.host != host_name() {
        return false;
    }
    let recorded: Vec<&ProcessId> = carriers.driver.iter().chain(&carriers.client).collect();
    !recorded.is_empty() && recorded.into_iter().all(|p| !is_alive(p))
}

/// Whether the process still lives (and is the one recorded).
pub fn is_alive(process: &ProcessId) -> bool {
    let Ok(pid) = libc::pid_t::try_from(process.pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    #[allow(unsafe_code)]
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks the pid.
    let exists = unsafe { libc::kill(pid, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    match proc_stat(process.pid) {
        Some(stat) => {
            !stat.zombie
                && process
                    .started
                    .is_none_or(|started| started == stat.started)
        }
        // No /proc (not Linux): the pid exists, which is all that can be told.
        None => true,
    }
}

/// What /proc/<pid>/stat says of a process.
struct ProcStat {
    started: u64,
    zombie: bool,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text =
        std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything:
    // the fields after it start past the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field 3 is the state, field 22 the start time.
    let state = fields.first()?;
    let started = fields.get(22 - 3)?.parse().ok()?;
    Some(ProcStat {
        started,
        zombie: *state == "Z" || *state == "X",
    })
}

/// This machine's name.
pub fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    #[allow(unsafe_code)]
    // SAFETY: gethostname(2) writes at most `len` bytes into the buffer.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    if !ok {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn this_process_is_alive_and_a_reaped_child_is_gone() {
        assert!(is_alive(&this_process()));
        let mut child = Command::new("true").spawn().unwrap();
        let recorded = of_pid(child.id());
        child.wait().unwrap();
        assert!(!is_alive(&recorded));
    }

    #[test]
    fn an_exited_child_not_yet_reaped_is_gone() {
        let mut child = Command::new("true").spawn().unwrap();
        let recorded = of_pid(child.id());
        // Wait for it to exit without reaping it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while is_alive(&recorded) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_alive(&recorded));
        child.wait().unwrap();
    }

    #[test]
    fn a_pid_given_to_a_later_process_is_not_the_recorded_one() {
        let mut me = this_process();
        if let Some(started) = me.started {
            me.started = Some(started + 1);
            assert!(!is_alive(&me));
        }
    }

    #[test]
    fn carriers_are_gone_only_when_all_are_and_only_on_this_machine() {
        let mut child = Command::new("true").spawn().unwrap();
        let dead = of_pid(child.id());
        child.wait().unwrap();
        let host = host_name();
        let gone = |driver, client| {
            all_gone(&Carriers {
                host: host.clone(),
                driver,
                client,
            })
        };
        assert!(gone(Some(dead), None));
        assert!(gone(Some(dead), Some(dead)));
        assert!(
            !gone(Some(dead), Some(this_process())),
            "the client still runs"
        );
        assert!(!gone(None, None), "nothing recorded: nothing to tell");
        let elsewhere = Carriers {
            host: Some("another-machine.invalid".into()),
            driver: Some(dead),
            client: None,
        };
        assert!(!all_gone(&elsewhere));
    }
}
