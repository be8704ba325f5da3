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
