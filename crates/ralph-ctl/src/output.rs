//! Lines for people that never panic: a closed or broken stdout
//! (`ralph-ctl init | head -1`) or a closed terminal must not stop a
//! command half way. What the command does is done; only the telling is
//! lost. Each line passes through [`ralph_core::text::printable`]: what
//! it tells may be the agent's text, and the terminal obeys none of its
//! control characters.

/// `println!` that never panics, its control characters made visible.
macro_rules! say {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let _ = writeln!(std::io::stdout(), "{}", ralph_core::text::printable(&line));
    }};
}

/// `eprintln!` that never panics, its control characters made visible.
macro_rules! say_err {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($arg)*);
        let _ = writeln!(std::io::stderr(), "{}", ralph_core::text::printable(&line));
    }};
}

pub(crate) use say;
pub(crate) use say_err;
