//! Stopping a child process that overran its time (git, verification
//! commands): the one place that sends a signal.

/// Sends SIGKILL to `pid`, or with `group` to the process group it leads.
/// Pids that do not fit a positive `pid_t` above 1 are ignored. No-op off Unix.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn kill(pid: u32, group: bool) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 1 {
            // SAFETY: kill(2) on one positive pid, or on the negative id of a
            // group that pid leads, only sends a signal.
            unsafe {
                libc::kill(if group { -pid } else { pid }, libc::SIGKILL);
            }
        }
    }
}

#[cfg(not(unix))]
pub(crate) fn kill(_pid: u32, _group: bool) {}
