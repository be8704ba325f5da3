//! Core of ralph, the Ralph loop for Claude Code.
//!
//! The folders show the architecture: [`judge`] (pure rules), [`observe`]
//! (reading the world, bounded), [`persist`] (the state and its store), and
//! [`engine`], the one per-stop sequence over them.
//!
//! Everything the two binaries share lives here: the configuration
//! ([`config`]), the loop's persisted state ([`state`]) and its locked,
//! atomic store ([`store`]), the parsers for what the Stop hook observes
//! ([`hook_input`], [`transcript`], [`signals`]), and the pure decision
//! function ([`decision`]) that turns all of that into "block" or "allow",
//! and the one per-stop sequence ([`engine`]) every driver of a loop runs.
//! I/O stays at the edges: `decision` never touches a file, a clock or an
//! environment variable.

pub mod judge;
pub mod observe;
pub mod persist;

pub mod config;
pub mod engine;
pub mod exit_codes;
pub mod notify;
pub mod paths;
pub mod pin;
pub mod time;
pub mod transaction;

// The modules by their own names, as the binaries and tests use them.
pub use judge::{breaker, claims, completion, decision, errors, events, lifecycle, signals};
pub use observe::{
    files, hook_input, liveness, plan, process, progress, prompt, protected, registration,
    test_counts, transcript, usage, verify,
};
pub use persist::{atomic, log, state, store};

#[cfg(test)]
pub(crate) mod tempdir {
    //! A self-deleting temp folder for unit tests.
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new() -> Self {
            let n = NEXT.fetch_add(1, Ordering::SeqCst);
            let path =
                std::env::temp_dir().join(format!("ralph-core-test-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            TempDir(path)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
