//! One backlog drained from several machines (`run --queue --remote NAME`):
//! the git remote every clone already shares is the lock. Each item has one
//! record on the remote, the ref `refs/ralph/queue/<source>/<item>`,
//! pointing at a commit (with no files) whose message holds the record as
//! JSON: who claims the item until when, then how it ended. Every change is
//! a push with a lease (`--force-with-lease=REF:EXPECTED`): it lands only
//! when the ref still holds what this worker last read, which the remote
//! checks under its own ref lock. Two machines that claim one item at once
//! both push; one push lands, the other is refused and its worker moves on.
//!
//! The remote's URL is read once, when the run starts, and used for every
//! fetch and push: the agent can write the repository's configuration
//! meanwhile, and no `remote.<name>.receivepack` or URL it wrote is used.
//! Only the transports git names safe run (`file`, `git`, `http(s)`,
//! `ssh`; never `ext::`).

mod protocol;
mod record;
mod transport;

pub(crate) use protocol::{Landing, PATIENCE, RemoteBook};
pub(crate) use record::{Ending, Record, short};
pub(crate) use transport::{Cause, Refused, Remote};

#[cfg(test)]
pub(crate) mod tests;
