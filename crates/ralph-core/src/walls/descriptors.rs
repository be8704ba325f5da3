//! The file descriptors a walled check gets: none that ralph inherited
//! (every one from 3 up marked close-on-exec), and the filter's pipe.

use super::*;

/// A pipe's read end holding `bytes` (a filter: far below a pipe's
/// buffer), numbered 3 or above so that no standard stream set up for the
/// child lands on it.
#[cfg(unix)]
pub(super) fn filter_on_a_pipe(bytes: &[u8]) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::io::Write;
    let (reader, mut writer) = std::io::pipe()?;
    writer.write_all(bytes)?;
    drop(writer);
    // `try_clone` duplicates to the lowest free number from 3 on.
    let reader = std::os::fd::OwnedFd::from(reader).try_clone()?;
    Ok(reader)
}

#[cfg(unix)]
pub(super) fn fd_number(fd: &std::os::fd::OwnedFd) -> i32 {
    use std::os::fd::AsRawFd;
    fd.as_raw_fd()
}

/// Has the child mark every descriptor from 3 up close-on-exec, see
/// [`close_on_exec_from_3`].
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(super) fn close_inherited_on_exec(command: &mut Command) {
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
pub(super) fn close_on_exec_from_3() -> std::io::Result<()> {
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
pub(super) fn inherit_on_exec(command: &mut Command, fd: std::os::fd::OwnedFd) {
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
