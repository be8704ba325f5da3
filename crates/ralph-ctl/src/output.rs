//! Lines for people that never panic: a closed or broken stdout
//! (`ralph-ctl init | head -1`) or a closed terminal must not stop a
//! command half way. What the command does is done; only the telling is
//! lost.

/// `println!` that never panics.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics.
macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub(crate) use say;
pub(crate) use say_err;
