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
const THIRD_ARGUMENT: u32 = 32;
const FOURTH_ARGUMENT: u32 = 40;
/// `MSG_FASTOPEN`: a TCP send that connects first, past Landlock's
/// connect rule (no `connect(2)` call is made).
const FAST_OPEN: u32 = 0x2000_0000;
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
/// `AF_INET`, `AF_INET6`, `AF_VSOCK`, `AF_SMC`; `IPPROTO_TCP`.
const INET: u32 = 2;
const INET6: u32 = 10;
const VSOCK: u32 = 40;
const SMC: u32 = 43;
const TCP: u32 = 6;

/// What the filter refuses besides unix sockets and `io_uring`, by the
/// check's way off the network.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Policy {
    /// `socket(AF_VSOCK)` refused: a vsock reaches the host of a virtual
    /// machine whatever the network namespace (a check off the network).
    pub(crate) no_vsock: bool,
    /// Of the internet families only TCP (`SOCK_STREAM`, protocol 0 or
    /// `IPPROTO_TCP`), `AF_SMC` refused, and a send with `MSG_FASTOPEN`:
    /// where Landlock's TCP rules stand in for a network namespace, a UDP
    /// socket, an MPTCP, SCTP or SMC one, and TCP Fast Open (none of which
    /// those rules cover), would reach the machine's own loopback.
    pub(crate) tcp_only: bool,
}

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

/// One architecture's `socket`, `socketpair`, `io_uring`'s three calls,
/// and the sends that take flags: those whose flags are the third
/// argument (`sendmsg`), and the fourth (`sendto`, `sendmmsg`).
struct Calls {
    socket: u32,
    socketpair: u32,
    io_uring: [u32; 3],
    sends_third: &'static [u32],
    sends_fourth: &'static [u32],
}

/// A native call's number on `$arch`: libc's (`libc::SYS_*`) where this
/// file is built for `$arch`, so the program that runs takes its numbers
/// from libc; written out elsewhere, where only the tests build that
/// architecture's program (libc has no other architecture's numbers; on
/// x32, a 64-bit x86 with 32-bit pointers, libc's carry x32's high bit,
/// which the filter takes off first).
macro_rules! native_call {
    ($($name:ident = $arch:literal $sys:ident $number:literal;)*) => {$(
        #[cfg(all(target_os = "linux", target_arch = $arch, target_pointer_width = "64"))]
        const $name: u32 = number(libc::$sys);
        #[cfg(not(all(target_os = "linux", target_arch = $arch, target_pointer_width = "64")))]
        const $name: u32 = $number;
    )*};
}

native_call! {
    X86_64_SOCKET = "x86_64" SYS_socket 41;
    X86_64_SOCKETPAIR = "x86_64" SYS_socketpair 53;
    X86_64_IO_URING_SETUP = "x86_64" SYS_io_uring_setup 425;
    X86_64_IO_URING_ENTER = "x86_64" SYS_io_uring_enter 426;
    X86_64_IO_URING_REGISTER = "x86_64" SYS_io_uring_register 427;
    X86_64_SENDMSG = "x86_64" SYS_sendmsg 46;
    X86_64_SENDTO = "x86_64" SYS_sendto 44;
    X86_64_SENDMMSG = "x86_64" SYS_sendmmsg 307;
    AARCH64_SOCKET = "aarch64" SYS_socket 198;
    AARCH64_SOCKETPAIR = "aarch64" SYS_socketpair 199;
    AARCH64_IO_URING_SETUP = "aarch64" SYS_io_uring_setup 425;
    AARCH64_IO_URING_ENTER = "aarch64" SYS_io_uring_enter 426;
    AARCH64_IO_URING_REGISTER = "aarch64" SYS_io_uring_register 427;
    AARCH64_SENDMSG = "aarch64" SYS_sendmsg 211;
    AARCH64_SENDTO = "aarch64" SYS_sendto 206;
    AARCH64_SENDMMSG = "aarch64" SYS_sendmmsg 269;
}

/// A libc call number as the filter compares it (every Linux call number
/// is small and positive).
#[cfg(all(
    target_os = "linux",
    target_pointer_width = "64",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
const fn number(sys: libc::c_long) -> u32 {
    sys as u32
}

/// x32's own `sendmsg` and `sendmmsg` (`__X32_SYSCALL_BIT` taken off), and
/// the 32-bit architectures' calls: libc has only the numbers of the
/// architecture it is built for, so these are written out (from the
/// kernel's syscall tables: `arch/x86/entry/syscalls/syscall_64.tbl`,
/// `syscall_32.tbl`, `arch/arm/tools/syscall.tbl`).
const X32_SENDMSG: u32 = 518;
const X32_SENDMMSG: u32 = 538;

// Each architecture's numbers are built into every program's test.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const X86_64: Numbers = Numbers {
    // AUDIT_ARCH_X86_64; x32 numbers its calls with __X32_SYSCALL_BIT.
    native: 0xc000_003e,
    native_mask: !0x4000_0000,
    native_calls: Calls {
        socket: X86_64_SOCKET,
        socketpair: X86_64_SOCKETPAIR,
        io_uring: [
            X86_64_IO_URING_SETUP,
            X86_64_IO_URING_ENTER,
            X86_64_IO_URING_REGISTER,
        ],
        sends_third: &[X86_64_SENDMSG, X32_SENDMSG],
        sends_fourth: &[X86_64_SENDTO, X86_64_SENDMMSG, X32_SENDMMSG],
    },
    // AUDIT_ARCH_I386.
    compat: 0x4000_0003,
    compat_calls: Calls {
        socket: 359,
        socketpair: 360,
        io_uring: [425, 426, 427],
        sends_third: &[370],
        sends_fourth: &[369, 345],
    },
    socketcall: Some(102),
};

#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
const AARCH64: Numbers = Numbers {
    // AUDIT_ARCH_AARCH64.
    native: 0xc000_00b7,
    native_mask: !0,
    native_calls: Calls {
        socket: AARCH64_SOCKET,
        socketpair: AARCH64_SOCKETPAIR,
        io_uring: [
            AARCH64_IO_URING_SETUP,
            AARCH64_IO_URING_ENTER,
            AARCH64_IO_URING_REGISTER,
        ],
        sends_third: &[AARCH64_SENDMSG],
        sends_fourth: &[AARCH64_SENDTO, AARCH64_SENDMMSG],
    },
    // AUDIT_ARCH_ARM (EABI, which has no socketcall).
    compat: 0x4000_0028,
    compat_calls: Calls {
        socket: 281,
        socketpair: 288,
        io_uring: [425, 426, 427],
        sends_third: &[296],
        sends_fourth: &[290, 374],
    },
    socketcall: None,
};

/// This machine's numbers, `None` on an architecture the filter is not
/// written for.
#[cfg(target_arch = "x86_64")]
const NUMBERS: Option<&Numbers> = Some(&X86_64);
#[cfg(target_arch = "aarch64")]
const NUMBERS: Option<&Numbers> = Some(&AARCH64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NUMBERS: Option<&Numbers> = None;

/// Whether the filter is written for this machine's architecture.
pub(crate) fn available() -> bool {
    NUMBERS.is_some()
}

/// Where a jump goes: the next instruction, or a label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum To {
    Next,
    Compat,
    Socket,
    Pair,
    Inet,
    SendThird,
    SendFourth,
    Allow,
    Refuse,
}

/// The program for `policy`, or `None` on an architecture it is not
/// written for.
pub(crate) fn program(policy: Policy) -> Option<Vec<Instruction>> {
    NUMBERS.map(|n| program_for(n, policy))
}

/// One line of the program before its jumps are counted: (instruction,
/// k, where it jumps when equal, where else).
type Line = (u16, u32, To, To);

fn program_for(n: &Numbers, policy: Policy) -> Vec<Instruction> {
    let mut code: Vec<Line> = Vec::new();
    let mut labels: Vec<(To, usize)> = Vec::new();
    let calls = |code: &mut Vec<Line>, c: &Calls| {
        code.push((JUMP_EQUAL, c.socket, To::Socket, To::Next));
        code.push((JUMP_EQUAL, c.socketpair, To::Pair, To::Next));
        for number in c.io_uring {
            code.push((JUMP_EQUAL, number, To::Refuse, To::Next));
        }
        if policy.tcp_only {
            for &number in c.sends_third {
                code.push((JUMP_EQUAL, number, To::SendThird, To::Next));
            }
            for &number in c.sends_fourth {
                code.push((JUMP_EQUAL, number, To::SendFourth, To::Next));
            }
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
    code.push((JUMP_EQUAL, UNIX_FAMILY, To::Refuse, To::Next));
    if policy.no_vsock {
        code.push((JUMP_EQUAL, VSOCK, To::Refuse, To::Next));
    }
    if policy.tcp_only {
        code.push((JUMP_EQUAL, SMC, To::Refuse, To::Next));
        code.push((JUMP_EQUAL, INET, To::Inet, To::Next));
        code.push((JUMP_EQUAL, INET6, To::Inet, To::Next));
    }
    code.push((RETURN, ALLOW, To::Next, To::Next));
    if policy.tcp_only {
        // A stream of protocol 0 or TCP, nothing else.
        labels.push((To::Inet, code.len()));
        code.push((LOAD, SECOND_ARGUMENT, To::Next, To::Next));
        code.push((AND, TYPE_MASK, To::Next, To::Next));
        code.push((JUMP_EQUAL, STREAM, To::Next, To::Refuse));
        code.push((LOAD, THIRD_ARGUMENT, To::Next, To::Next));
        code.push((JUMP_EQUAL, 0, To::Allow, To::Next));
        code.push((JUMP_EQUAL, TCP, To::Allow, To::Refuse));
        // A send without MSG_FASTOPEN, nothing else.
        for (label, argument) in [
            (To::SendThird, THIRD_ARGUMENT),
            (To::SendFourth, FOURTH_ARGUMENT),
        ] {
            labels.push((label, code.len()));
            code.push((LOAD, argument, To::Next, To::Next));
            code.push((AND, FAST_OPEN, To::Next, To::Next));
            code.push((JUMP_EQUAL, 0, To::Allow, To::Refuse));
        }
    }
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
    assemble(&code, &labels)
}

/// `code` with its jumps counted (the instructions skipped, forward only).
/// The program is built from constants, so a jump to a label it lacks, or
/// farther than a jump can count (255), is a mistake in this file: it
/// panics as the program is built (every architecture's is, by a test),
/// never a jump to the next instruction, which would let a call through.
fn assemble(code: &[Line], labels: &[(To, usize)]) -> Vec<Instruction> {
    let offset = |from: usize, to: To| -> u8 {
        let at = match to {
            To::Next => from + 1,
            label => match labels.iter().find(|(l, _)| *l == label) {
                Some((_, at)) => *at,
                None => panic!("the filter jumps to a label it lacks: {label:?}"),
            },
        };
        assert!(at > from, "the filter jumps backwards: {from} to {at}");
        u8::try_from(at - from - 1)
            .unwrap_or_else(|e| panic!("the filter jumps too far: {from} to {at} ({e})"))
    };
    code.iter()
        .enumerate()
        .map(|(at, &(code, k, yes, no))| Instruction {
            code,
            jump_true: offset(at, yes),
            jump_false: offset(at, no),
            k,
        })
        .collect()
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
    fn run(program: &[Instruction], arch: u32, number: u32, args: [u32; 4]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&number.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        data[16..20].copy_from_slice(&args[0].to_le_bytes());
        data[24..28].copy_from_slice(&args[1].to_le_bytes());
        data[32..36].copy_from_slice(&args[2].to_le_bytes());
        data[40..44].copy_from_slice(&args[3].to_le_bytes());
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

    const POLICIES: [Policy; 4] = [
        Policy {
            no_vsock: false,
            tcp_only: false,
        },
        Policy {
            no_vsock: true,
            tcp_only: false,
        },
        Policy {
            no_vsock: false,
            tcp_only: true,
        },
        Policy {
            no_vsock: true,
            tcp_only: true,
        },
    ];

    #[test]
    fn unix_sockets_by_every_door_and_io_uring_are_refused_on_every_architecture() {
        assert_eq!(program(Policy::default()).is_some(), NUMBERS.is_some());
        for n in [&X86_64, &AARCH64] {
            for policy in POLICIES {
                refuses_what_it_must(n, policy);
            }
        }
    }

    /// What `n`'s program for `policy` refuses and lets through.
    fn refuses_what_it_must(n: &Numbers, policy: Policy) {
        let program = program_for(n, policy);
        let x32 = !n.native_mask;
        // SOCK_NONBLOCK | SOCK_CLOEXEC, as a caller may add them to the type.
        let flags = 0x800 | 0x8_0000;
        let (refused_if, allowed) = (|b: bool| if b { REFUSE } else { ALLOW }, ALLOW);
        for (arch, calls, high) in [
            (n.native, &n.native_calls, 0),
            (n.native, &n.native_calls, x32),
            (n.compat, &n.compat_calls, 0),
        ] {
            let (socket, pair) = (calls.socket | high, calls.socketpair | high);
            let call = |number: u32, [a, b, c]: [u32; 3]| run(&program, arch, number, [a, b, c, 0]);
            assert_eq!(call(socket, [UNIX_FAMILY, STREAM, 0]), REFUSE);
            // A TCP socket of either family and AF_NETLINK stay open.
            for family in [INET, INET6, 16] {
                assert_eq!(call(socket, [family, STREAM, 0]), allowed);
                assert_eq!(call(socket, [family, STREAM | flags, 0]), allowed);
                assert_eq!(call(pair, [family, 2, 0]), allowed);
            }
            for family in [INET, INET6] {
                assert_eq!(call(socket, [family, STREAM, TCP]), allowed);
                // UDP, MPTCP (262), SCTP (132) and ICMP: only where TCP
                // rules stand in for a namespace.
                for (kind, protocol) in [(2, 0), (2, 17), (STREAM, 262), (STREAM, 132), (2, 1)] {
                    assert_eq!(
                        call(socket, [family, kind, protocol]),
                        refused_if(policy.tcp_only),
                        "{policy:?} {family} {kind} {protocol}"
                    );
                }
            }
            assert_eq!(call(socket, [SMC, STREAM, 0]), refused_if(policy.tcp_only));
            assert_eq!(
                call(socket, [VSOCK, STREAM, 0]),
                refused_if(policy.no_vsock)
            );
            // A stream or seqpacket pair reaches only itself; a datagram
            // pair (SOCK_RAW is one too) can be sent anywhere.
            for kind in [STREAM, SEQPACKET, STREAM | flags] {
                assert_eq!(call(pair, [UNIX_FAMILY, kind, 0]), ALLOW);
            }
            for kind in [2, 3, 2 | flags] {
                assert_eq!(call(pair, [UNIX_FAMILY, kind, 0]), REFUSE);
            }
            for number in calls.io_uring {
                assert_eq!(call(number | high, [0, 0, 0]), REFUSE);
            }
            // A send connects first with MSG_FASTOPEN (TCP Fast Open).
            let send = |number: u32, args: [u32; 4]| run(&program, arch, number | high, args);
            for &number in calls.sends_third {
                assert_eq!(send(number, [3, 0, 0, 0]), ALLOW);
                assert_eq!(
                    send(number, [3, 0, FAST_OPEN | 0x40, 0]),
                    refused_if(policy.tcp_only)
                );
                assert_eq!(send(number, [3, 0, 0, FAST_OPEN]), ALLOW);
            }
            for &number in calls.sends_fourth {
                assert_eq!(send(number, [3, 0, 1, 0x40]), ALLOW);
                assert_eq!(
                    send(number, [3, 0, 1, FAST_OPEN]),
                    refused_if(policy.tcp_only)
                );
            }
        }
        if let Some(socketcall) = n.socketcall {
            assert_eq!(run(&program, n.compat, socketcall, [1, 0, 0, 0]), REFUSE);
        }
        // Any other call, on any architecture, goes through.
        assert_eq!(run(&program, n.native, 0, [UNIX_FAMILY, 2, 0, 0]), ALLOW);
        let other = 0x1234;
        assert_eq!(
            run(
                &program,
                other,
                n.native_calls.socket,
                [UNIX_FAMILY, 1, 0, 0]
            ),
            ALLOW
        );
        assert_eq!(bytes(&program).len(), program.len() * 8);
    }

    #[test]
    #[should_panic(expected = "a label it lacks")]
    fn a_jump_to_a_missing_label_stops_the_build() {
        let code = [
            (JUMP_EQUAL, 1, To::Refuse, To::Next),
            (RETURN, ALLOW, To::Next, To::Next),
        ];
        assemble(&code, &[]);
    }

    #[test]
    #[should_panic(expected = "too far")]
    fn a_jump_farther_than_255_stops_the_build() {
        let mut code = vec![(JUMP_EQUAL, 1, To::Refuse, To::Next)];
        code.extend(std::iter::repeat_n((AND, 1, To::Next, To::Next), 300));
        let refuse = code.len();
        code.push((RETURN, REFUSE, To::Next, To::Next));
        assemble(&code, &[(To::Refuse, refuse)]);
    }
}
