//! The filter that keeps a walled check from making a unix socket: the
//! `socket(2)` call with `AF_UNIX` fails with EPERM, as it does for the
//! agent in the client's own sandbox. A unix socket reaches whatever
//! listens on one (a tmux server's, ssh-agent's, D-Bus, the docker
//! daemon's), and each of those runs commands outside every wall; an
//! abstract socket has no path, so no mount can hide it. `socketpair(2)`
//! stays open: its two ends reach nothing but each other (test runners use
//! it for their workers' pipes).
//!
//! The filter is a classic BPF program of thirteen instructions, for the
//! machine's own architecture and the 32-bit one its kernel also runs:
//! x86-64 (with x32's numbers, and i386 with its `socketcall`) and
//! aarch64 (with 32-bit ARM). bubblewrap loads it with `--seccomp FD`;
//! under Landlock the child loads it itself before it runs the check.

/// One BPF instruction, as the kernel reads it (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Instruction {
    code: u16,
    jump_true: u8,
    jump_false: u8,
    k: u32,
}

/// `BPF_LD | BPF_W | BPF_ABS`: load the 32-bit word at offset k of the
/// system call's data.
const LOAD: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K`: compare with k, jump by jt or jf.
const JUMP_EQUAL: u16 = 0x15;
/// `BPF_RET | BPF_K`: return k.
const RETURN: u16 = 0x06;
/// Offsets in `struct seccomp_data`: the call's number, the architecture,
/// the low word of the first argument (little-endian).
const NUMBER: u32 = 0;
const ARCH: u32 = 4;
const FIRST_ARGUMENT: u32 = 16;
/// `SECCOMP_RET_ALLOW`, and `SECCOMP_RET_ERRNO` with EPERM.
const ALLOW: u32 = 0x7fff_0000;
const REFUSE: u32 = 0x0005_0000 | 1;
/// `AF_UNIX`.
const UNIX_FAMILY: u32 = 1;

/// The numbers the filter compares: the native architecture and its
/// `socket` (twice: x32 numbers it with a high bit), the 32-bit
/// architecture and its `socketcall` and `socket`.
struct Numbers {
    native: u32,
    socket: u32,
    socket_other: u32,
    compat: u32,
    socketcall: u32,
    compat_socket: u32,
}

#[cfg(target_arch = "x86_64")]
// The system call numbers are decimal, as the kernel's tables write them.
#[allow(clippy::decimal_bitwise_operands)]
const NUMBERS: Option<Numbers> = Some(Numbers {
    // AUDIT_ARCH_X86_64, __NR_socket; x32: __X32_SYSCALL_BIT | 41.
    native: 0xc000_003e,
    socket: 41,
    socket_other: 0x4000_0000 | 41,
    // AUDIT_ARCH_I386: socketcall is 102, socket 359.
    compat: 0x4000_0003,
    socketcall: 102,
    compat_socket: 359,
});

#[cfg(target_arch = "aarch64")]
const NUMBERS: Option<Numbers> = Some(Numbers {
    // AUDIT_ARCH_AARCH64, __NR_socket.
    native: 0xc000_00b7,
    socket: 198,
    socket_other: 198,
    // AUDIT_ARCH_ARM (EABI, which has no socketcall): socket is 281.
    compat: 0x4000_0028,
    socketcall: 281,
    compat_socket: 281,
});

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NUMBERS: Option<Numbers> = None;

/// The program, or `None` on an architecture it is not written for.
pub(crate) fn program() -> Option<Vec<Instruction>> {
    let n = NUMBERS.as_ref()?;
    let i = |code, k, jump_true, jump_false| Instruction {
        code,
        jump_true,
        jump_false,
        k,
    };
    // Jumps count the instructions skipped, forward only.
    Some(vec![
        /* 0 */ i(LOAD, ARCH, 0, 0),
        /* 1 */ i(JUMP_EQUAL, n.native, 0, 3), // native: 2, else 5
        /* 2 */ i(LOAD, NUMBER, 0, 0),
        /* 3 */ i(JUMP_EQUAL, n.socket, 5, 0), // socket: 9
        /* 4 */ i(JUMP_EQUAL, n.socket_other, 4, 6), // socket: 9, else allow
        /* 5 */ i(JUMP_EQUAL, n.compat, 0, 5), // 32-bit: 6, else allow
        /* 6 */ i(LOAD, NUMBER, 0, 0),
        /* 7 */ i(JUMP_EQUAL, n.socketcall, 4, 0), // socketcall: refuse
        /* 8 */ i(JUMP_EQUAL, n.compat_socket, 0, 2), // socket: 9, else allow
        /* 9 */ i(LOAD, FIRST_ARGUMENT, 0, 0),
        /* 10 */ i(JUMP_EQUAL, UNIX_FAMILY, 1, 0), // AF_UNIX: refuse
        /* 11 */ i(RETURN, ALLOW, 0, 0),
        /* 12 */ i(RETURN, REFUSE, 0, 0),
    ])
}

/// The program as bytes, as bubblewrap reads it from `--seccomp FD`.
pub(crate) fn bytes(program: &[Instruction]) -> Vec<u8> {
    let mut out = Vec::with_capacity(program.len() * 8);
    for ins in program {
        out.extend_from_slice(&ins.code.to_ne_bytes());
        out.push(ins.jump_true);
        out.push(ins.jump_false);
        out.extend_from_slice(&ins.k.to_ne_bytes());
    }
    out
}

/// The program as the kernel's own type, for `prctl(PR_SET_SECCOMP)`.
#[cfg(target_os = "linux")]
pub(crate) fn filters(program: &[Instruction]) -> Vec<libc::sock_filter> {
    program
        .iter()
        .map(|ins| libc::sock_filter {
            code: ins.code,
            jt: ins.jump_true,
            jf: ins.jump_false,
            k: ins.k,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` over one system call's data, as the kernel would.
    fn run(program: &[Instruction], arch: u32, number: u32, first: u32) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&number.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        data[16..20].copy_from_slice(&first.to_le_bytes());
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let ins = program[pc];
            pc += 1;
            match ins.code {
                LOAD => {
                    let at = ins.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                JUMP_EQUAL => {
                    pc += usize::from(if acc == ins.k {
                        ins.jump_true
                    } else {
                        ins.jump_false
                    });
                }
                RETURN => return ins.k,
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn only_a_unix_socket_is_refused_on_every_architecture_the_kernel_runs() {
        let Some(program) = program() else {
            return;
        };
        let n = NUMBERS.as_ref().unwrap();
        assert_eq!(program.len(), 13);
        for (arch, socket) in [
            (n.native, n.socket),
            (n.native, n.socket_other),
            (n.compat, n.compat_socket),
        ] {
            assert_eq!(run(&program, arch, socket, UNIX_FAMILY), REFUSE);
            // AF_INET, AF_INET6, AF_NETLINK stay open.
            for family in [2, 10, 16] {
                assert_eq!(run(&program, arch, socket, family), ALLOW);
            }
        }
        assert_eq!(run(&program, n.compat, n.socketcall, 1), REFUSE);
        // Any other call, on any architecture, goes through.
        assert_eq!(run(&program, n.native, 0, UNIX_FAMILY), ALLOW);
        assert_eq!(run(&program, 0x1234, n.socket, UNIX_FAMILY), ALLOW);
        assert_eq!(bytes(&program).len(), 13 * 8);
    }
}
