//! Core of ralph, the Ralph loop for Claude Code: everything the two
//! binaries share. The folders are the layers, each using only those below
//! it:
//!
//! - [`process`]: every command ralph must stop whole, a process group
//!   with a deadline; [`walls`]: the walls every check of the agent's work
//!   runs inside; [`own_git`]: every git call, in the folders ralph found,
//!   running nothing the repository names;
//! - [`observe`]: reading the world, bounded (the hook's stdin, the
//!   transcript, the project's files and git, the plan, the prompt files,
//!   the registered hook) and running the verification commands;
//! - [`judge`]: pure rules over the loop's record ([`judge::state`]) and its
//!   configuration ([`judge::config`]): the stop's decision, the breaker,
//!   claims, completion gates, the lifecycle's rules;
//! - [`persist`]: the locked, atomic store of the record and the audit log;
//! - then [`pin`] (what decides a loop, fixed at its start), [`room`] (the
//!   clean room a claim is checked in), [`notify`],
//!   [`events`] (the lifecycle as events, one pure `apply`), and at the top
//!   [`engine`] (one stop, end to end) and [`transaction`] (every other
//!   change of a loop, one lock each).
//!
//! Below them all sit the small leaves: [`paths`], [`time`], [`exit_codes`],
//! [`fnv`], [`files`] (the person's files read bounded) and [`text`]
//! (what a person's terminal is given of the agent's text).
//!
//! I/O stays at the edges: `judge` never touches a file, a clock or an
//! environment variable.

pub mod judge;
pub mod observe;
pub mod persist;

pub mod files;
pub mod own_git;
pub mod process;
pub mod walls;

pub mod engine;
pub mod events;
pub mod exit_codes;
pub mod file_error;
pub mod fnv;
pub mod notify;
pub mod paths;
pub mod pin;
pub mod room;
pub mod text;
pub mod time;
pub mod transaction;
pub mod units;
