//! Pure judgement: the loop's record ([`state`]) and the configuration it
//! is judged by ([`config`]), and the rules from what a stop observed and
//! that record to the new record and the verdict ([`decision`], the
//! breaker, claims, completion gates), and the lifecycle's rules outside a
//! stop ([`lifecycle`]). Nothing here touches a file, a clock, a process or
//! the environment but [`config`]'s reading of its files and variables, so
//! every rule is table-tested.

pub mod breaker;
pub mod claims;
pub mod completion;
pub mod config;
pub mod decision;
pub mod errors;
pub mod lifecycle;
pub mod signals;
pub mod state;
