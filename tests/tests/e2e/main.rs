//! End-to-end tests: the real Claude Code client (both pinned versions),
//! driven by ralph against a scripted mock of the Messages API on
//! 127.0.0.1, one module per area.
//!
//! Compiled only with the `e2e` feature (tests/run.sh turns it on). Run one
//! area alone with e.g. `tests/run.sh -p ralph-tests --test e2e queue::`,
//! one scenario with `tests/run.sh -p ralph-tests --test e2e
//! session::completes_on_signal::v2_0_77`.

mod background;
mod cheats;
mod client_walls;
mod counts;
mod first_hour;
mod formula;
mod fresh;
mod integrity;
mod interactive;
mod pacing;
mod permissions;
mod pinning;
mod plugin;
mod queue;
mod report;
mod sandbox;
mod session;
mod supervisor;
mod walls;
