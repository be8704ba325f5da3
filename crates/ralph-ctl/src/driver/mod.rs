//! The pieces of `ralph-ctl run` (see `commands::run`): building the
//! client's command line ([`command`], pure), the signals that end a loop
//! early ([`signals`]), and the running client with the loop that watches
//! it ([`client`]).

pub mod client;
pub mod command;
pub mod signals;
