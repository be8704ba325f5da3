//! Test support for ralph: a scripted mock of the Anthropic Messages API,
//! and helpers that build temp projects, run the built binaries the way
//! Claude Code does, and drive the real Claude Code client through the
//! launcher, headless or in a pseudo-terminal.

pub mod bins;
pub mod cli;
pub mod client;
pub mod interactive;
pub mod mock_api;
pub mod project;

/// Generates one `#[test]` per pinned client version, each calling the
/// function of the same name with that version (an e2e scenario).
#[macro_export]
macro_rules! on_both_clients {
    ($($name:ident),* $(,)?) => {
        mod v2_1_330 {
            $(#[test] fn $name() { super::$name($crate::client::ClientVersion::V2_1_330) })*
        }
        mod v2_0_77 {
            $(#[test] fn $name() { super::$name($crate::client::ClientVersion::V2_0_77) })*
        }
    };
}
