//! The signals that end a loop early, caught so that `ralph-ctl run`
//! survives them long enough to pass them on, wait for the client and record
//! the end.
//!
//! signal-hook's flag handlers only set an atomic (async-signal-safe); the
//! driver's loop reads them. Once installed they stay for the life of the
//! process, so a signal during the final write cannot kill it either.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A signal the driver acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    /// SIGINT: Ctrl-C, where the terminal turns it into a signal (headless
    /// mode; the interactive client reads it as a key). The terminal sent it
    /// to the client too, so it is not passed on.
    Interrupt,
    /// SIGTERM: passed on to the client.
    Terminate,
    /// SIGHUP: the terminal closed; passed on to the client.
    Hangup,
}

impl Signal {
    /// Every signal the driver catches (SIGHUP only on Unix).
    pub(crate) const ALL: [Signal; 3] = [Signal::Interrupt, Signal::Terminate, Signal::Hangup];

    /// The signal's name, as people know it.
    #[cfg(test)]
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
            Signal::Hangup => "SIGHUP",
        }
    }

    /// Its number (the same on every Unix for these three).
    pub(crate) const fn number(self) -> i32 {
        match self {
            Signal::Interrupt => 2,
            Signal::Terminate => 15,
            Signal::Hangup => 1,
        }
    }

    /// Whether the driver passes it on to the client.
    pub(crate) const fn forwarded(self) -> bool {
        !matches!(self, Signal::Interrupt)
    }

    /// The driver's exit code when this signal ended the loop (128 + number).
    pub(crate) const fn exit_code(self) -> i32 {
        ralph_core::exit_codes::signalled(self.number())
    }

    /// How the loop's end names it.
    pub(crate) fn describe(self) -> String {
        match self {
            Signal::Interrupt => "Ctrl-C (SIGINT)".to_string(),
            Signal::Terminate => "SIGTERM".to_string(),
            Signal::Hangup => "SIGHUP (the terminal closed)".to_string(),
        }
    }
}

/// Where the driver learns about signals (a fake one in tests).
pub(crate) trait SignalSource {
    /// The signals received since the last call, in a fixed order.
    fn take(&mut self) -> Vec<Signal>;
}

/// The process's signal flags, installed once by [`Signals::install`].
pub(crate) struct Signals {
    flags: Vec<(Signal, Arc<AtomicBool>)>,
}

impl Signals {
    /// Catches SIGINT, SIGTERM and (on Unix) SIGHUP from now on: they no
    /// longer end the process, they are reported by [`SignalSource::take`].
    /// A SIGHUP the process was started ignoring (`nohup ralph-ctl run`)
    /// stays ignored: the person asked for the run to outlive the terminal.
    pub(crate) fn install() -> io::Result<Signals> {
        let mut flags = Vec::new();
        for signal in Signal::ALL {
            if signal == Signal::Hangup
                && (cfg!(not(unix)) || ralph_core::process::signal_ignored(signal.number()))
            {
                continue;
            }
            let flag = Arc::new(AtomicBool::new(false));
            signal_hook::flag::register(signal.number(), Arc::clone(&flag))?;
            flags.push((signal, flag));
        }
        Ok(Signals { flags })
    }
}

impl SignalSource for Signals {
    fn take(&mut self) -> Vec<Signal> {
        self.flags
            .iter()
            .filter(|(_, flag)| flag.swap(false, Ordering::SeqCst))
            .map(|(signal, _)| *signal)
            .collect()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn numbers_names_and_exit_codes() {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        assert_eq!(Signal::Interrupt.number(), SIGINT);
        assert_eq!(Signal::Terminate.number(), SIGTERM);
        assert_eq!(Signal::Hangup.number(), SIGHUP);
        assert_eq!(Signal::Interrupt.exit_code(), 130);
        assert_eq!(Signal::Terminate.exit_code(), 143);
        assert_eq!(Signal::Hangup.exit_code(), 129);
        assert!(!Signal::Interrupt.forwarded());
        assert!(Signal::Terminate.forwarded() && Signal::Hangup.forwarded());
    }
}
