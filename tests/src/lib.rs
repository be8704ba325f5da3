//! Test support for ralph: a scripted mock of the Anthropic Messages API,
//! and helpers that build temp projects, run the built binaries the way
//! Claude Code does, and drive the real Claude Code client through the
//! launcher, headless or in a pseudo-terminal.

// The helpers panic on purpose: a panic fails the test that called them.
#![allow(clippy::missing_panics_doc)]

pub mod bins;
pub mod browser;
pub mod cli;
pub mod client;
pub mod corpus;
pub mod interactive;
pub mod listen;
pub mod mock_api;
pub mod project;
pub mod reach;
pub mod scenario;
pub mod serve;
pub mod trackers;

pub use ralph_test_macros::on_both_clients;

/// The completion signal of the template PROMPT.md the scenarios use.
pub const SIGNAL: &str = "RALPH_AUDIT_COMPLETE_NO_FINDINGS";

/// A bound on a whole scenario's launcher run (they take seconds), never a
/// wait: a scenario that hangs fails with what it saw instead of never ending.
pub const LOOP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// Whether `value` is a JSON string that contains `needle` (a state's
/// `endedBecause`, an event's `reason`): false for any other JSON.
#[must_use]
pub fn json_text_has(value: &serde_json::Value, needle: &str) -> bool {
    value.as_str().is_some_and(|text| text.contains(needle))
}

/// Panics, naming the needle missing and showing `text`, unless `text`
/// contains every one of `needles`.
pub fn assert_has_all(text: &str, needles: &[&str]) {
    for needle in needles {
        assert!(text.contains(needle), "{needle:?} missing in:\n{text}");
    }
}
