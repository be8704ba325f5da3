//! The filter that keeps a walled check from making a unix socket, by any
//! door, and from `io_uring`: the `socket(2)` call with `AF_UNIX` fails with
//! EPERM, as it does for the agent in the client's own sandbox, and so do
//! `io_uring_setup(2)`, `io_uring_enter(2)` and `io_uring_register(2)`
//! (`io_uring`'s `IORING_OP_SOCKET` and `IORING_OP_CONNECT` make and connect
//! a socket without a `socket(2)` call the filter could see; the agent
//! gets EPERM from `io_uring_setup` too). A unix socket reaches whatever
//! listens on one (a tmux server's, ssh-agent's, D-Bus, the docker
//! daemon's), and each of those runs commands outside every wall; an
//! abstract socket has no path, so no mount can hide it. `socketpair(2)`
//! with `AF_UNIX` stays open for a stream or a seqpacket pair, whose two
//! ends reach nothing but each other (asyncio's loop and test runners'
//! workers use one); a datagram pair (`SOCK_DGRAM`, and `SOCK_RAW`, which
//! a unix socket takes as datagram) is refused: a datagram socket can be
//! connected again, or sent to, at any address.
//!
//! The filter is a classic BPF program, for the machine's own architecture
//! and the 32-bit one its kernel also runs: x86-64 (with x32's numbers,
//! and i386 with its `socketcall`, refused whole) and aarch64 (with 32-bit
//! ARM). bubblewrap loads it with `--seccomp FD`; under Landlock the child
//! loads it itself before it runs the check.

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
/// `BPF_ALU | BPF_AND | BPF_K`: and the accumulator with k.
const AND: u16 = 0x54;
/// `BPF_JMP | BPF_JEQ | BPF_K`: compare with k, jump by jt or jf.
const JUMP_EQUAL: u16 = 0x15;
/// `BPF_RET | BPF_K`: return k.
const RETURN: u16 = 0x06;
/// Offsets in `struct seccomp_data`: the call's number, the architecture,
/// the low words of the first and second arguments (little-endian).
const NUMBER: u32 = 0;
const ARCH: u32 = 4;
const FIRST_ARGUMENT: u32 = 16;
const SECOND_ARGUMENT: u32 = 24;
/// `SECCOMP_RET_ALLOW`, and `SECCOMP_RET_ERRNO` with EPERM.
const ALLOW: u32 = 0x7fff_0000;
const REFUSE: u32 = 0x0005_0000 | 1;
/// `AF_UNIX`.
const UNIX_FAMILY: u32 = 1;
/// `SOCK_TYPE_MASK`, and the pairs' types that stay open: `SOCK_STREAM`,
/// `SOCK_SEQPACKET`.
const TYPE_MASK: u32 = 0xf;
const STREAM: u32 = 1;
const SEQPACKET: u32 = 5;

/// The numbers the filter compares: the native architecture, the mask
/// that takes x32's high bit off its calls' numbers, and its calls; the
/// 32-bit architecture and its calls.
struct Numbers {
    native: u32,
    native_mask: u32,
    native_calls: Calls,
    compat: u32,
    compat_calls: Calls,
    /// The 32-bit `socketcall`, refused whole (its arguments lie in memory
    /// the filter cannot read).
    socketcall: Option<u32>,
}

/// One architecture's `socket`, `socketpair`, and `io_uring`'s three calls.
struct Calls {
    socket: u32,
    socketpair: u32,
    io_uring: [u32; 3],
}

#[cfg(target_arch = "x86_64")]
const NUMBERS: Option<Numbers> = Some(Numbers {
    // AUDIT_ARCH_X86_64; x32 numbers its calls with __X32_SYSCALL_BIT.
    native: 0xc000_003e,
    native_mask: !0x4000_0000,
    native_calls: Calls {
        socket: 41,
        socketpair: 53,
        io_uring: [425, 426, 427],
    },
    // AUDIT_ARCH_I386.
    compat: 0x4000_0003,
    compat_calls: Calls {
        socket: 359,
        socketpair: 360,
        io_uring: [425, 426, 427],
    },
    socketcall: Some(102),
});

#[cfg(target_arch = "aarch64")]
const NUMBERS: Option<Numbers> = Some(Numbers {
    // AUDIT_ARCH_AARCH64.
    native: 0xc000_00b7,
    native_mask: !0,
    native_calls: Calls {
        socket: 198,
        socketpair: 199,
        io_uring: [425, 426, 427],
    },
    // AUDIT_ARCH_ARM (EABI, which has no socketcall).
    compat: 0x4000_0028,
    compat_calls: Calls {
        socket: 281,
        socketpair: 288,
        io_uring: [425, 426, 427],
    },
    socketcall: None,
});

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NUMBERS: Option<Numbers> = None;

/// Where a jump goes: the next instruction, or a label.
#[derive(Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Compat,
    Socket,
    Pair,
    Allow,
    Refuse,
}

/// The program, or `None` on an architecture it is not written for.
pub(crate) fn program() -> Option<Vec<Instruction>> {
    let n = NUMBERS.as_ref()?;
    // (instruction, where it jumps when equal, where else), then the labels.
    let mut code: Vec<(u16, u32, To, To)> = Vec::new();
    let mut labels: Vec<(To, usize)> = Vec::new();
    let calls = |code: &mut Vec<(u16, u32, To, To)>, c: &Calls| {
        code.push((JUMP_EQUAL, c.socket, To::Socket, To::Next));
        code.push((JUMP_EQUAL, c.socketpair, To::Pair, To::Next));
        for number in c.io_uring {
            code.push((JUMP_EQUAL, number, To::Refuse, To::Next));
        }
        code.push((RETURN, ALLOW, To::Next, To::Next));
    };
    code.push((LOAD, ARCH, To::Next, To::Next));
    code.push((JUMP_EQUAL, n.native, To::Next, To::Compat));
    code.push((LOAD, NUMBER, To::Next, To::Next));
    code.push((AND, n.native_mask, To::Next, To::Next));
    calls(&mut code, &n.native_calls);
    labels.push((To::Compat, code.len()));
    code.push((JUMP_EQUAL, n.compat, To::Next, To::Allow));
    code.push((LOAD, NUMBER, To::Next, To::Next));
    if let Some(socketcall) = n.socketcall {
        code.push((JUMP_EQUAL, socketcall, To::Refuse, To::Next));
    }
    calls(&mut code, &n.compat_calls);
    labels.push((To::Socket, code.len()));
    code.push((LOAD, FIRST_ARGUMENT, To::Next, To::Next));
    code.push((JUMP_EQUAL, UNIX_FAMILY, To::Refuse, To::Allow));
    labels.push((To::Pair, code.len()));
    code.push((LOAD, FIRST_ARGUMENT, To::Next, To::Next));
    code.push((JUMP_EQUAL, UNIX_FAMILY, To::Next, To::Allow));
    code.push((LOAD, SECOND_ARGUMENT, To::Next, To::Next));
    code.push((AND, TYPE_MASK, To::Next, To::Next));
    code.push((JUMP_EQUAL, STREAM, To::Allow, To::Next));
    code.push((JUMP_EQUAL, SEQPACKET, To::Allow, To::Refuse));
    labels.push((To::Allow, code.len()));
    code.push((RETURN, ALLOW, To::Next, To::Next));
    labels.push((To::Refuse, code.len()));
    code.push((RETURN, REFUSE, To::Next, To::Next));
    // Jumps count the instructions skipped, forward only.
    let offset = |from: usize, to: To| -> u8 {
        let at = match to {
            To::Next => from + 1,
            label => labels
                .iter()
                .find(|(l, _)| *l == label)
                .map_or(from + 1, |(_, at)| *at),
        };
        u8::try_from(at - from - 1).unwrap_or(0)
    };
    Some(
        code.iter()
            .enumerate()
            .map(|(at, &(code, k, yes, no))| Instruction {
                code,
                jump_true: offset(at, yes),
                jump_false: offset(at, no),
                k,
            })
            .collect(),
    )
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
    fn run(program: &[Instruction], arch: u32, number: u32, args: [u32; 2]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&number.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        data[16..20].copy_from_slice(&args[0].to_le_bytes());
        data[24..28].copy_from_slice(&args[1].to_le_bytes());
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let ins = program[pc];
            pc += 1;
            match ins.code {
                LOAD => {
                    let at = ins.k as usize;
                    acc = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
                }
                AND => acc &= ins.k,
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
    fn unix_sockets_by_every_door_and_io_uring_are_refused_on_every_architecture() {
        let Some(program) = program() else {
            return;
        };
        let n = NUMBERS.as_ref().unwrap();
        let x32 = !n.native_mask;
        // SOCK_NONBLOCK | SOCK_CLOEXEC, as a caller may add them to the type.
        let flags = 0x800 | 0x8_0000;
        for (arch, calls, high) in [
            (n.native, &n.native_calls, 0),
            (n.native, &n.native_calls, x32),
            (n.compat, &n.compat_calls, 0),
        ] {
            let (socket, pair) = (calls.socket | high, calls.socketpair | high);
            assert_eq!(run(&program, arch, socket, [UNIX_FAMILY, STREAM]), REFUSE);
            // AF_INET, AF_INET6, AF_NETLINK stay open.
            for family in [2, 10, 16] {
                assert_eq!(run(&program, arch, socket, [family, STREAM]), ALLOW);
                assert_eq!(run(&program, arch, pair, [family, 2]), ALLOW);
            }
            // A stream or seqpacket pair reaches only itself; a datagram
            // pair (SOCK_RAW is one too) can be sent anywhere.
            for kind in [STREAM, SEQPACKET, STREAM | flags] {
                assert_eq!(run(&program, arch, pair, [UNIX_FAMILY, kind]), ALLOW);
            }
            for kind in [2, 3, 2 | flags] {
                assert_eq!(run(&program, arch, pair, [UNIX_FAMILY, kind]), REFUSE);
            }
            for call in calls.io_uring {
                assert_eq!(run(&program, arch, call | high, [0, 0]), REFUSE);
            }
        }
        if let Some(socketcall) = n.socketcall {
            assert_eq!(run(&program, n.compat, socketcall, [1, 0]), REFUSE);
        }
        // Any other call, on any architecture, goes through.
        assert_eq!(run(&program, n.native, 0, [UNIX_FAMILY, 2]), ALLOW);
        let other = 0x1234;
        assert_eq!(
            run(&program, other, n.native_calls.socket, [UNIX_FAMILY, 1]),
            ALLOW
        );
        assert_eq!(bytes(&program).len(), program.len() * 8);
    }
}
