//! The queue's room: what drains a backlog across workers and machines.

pub(crate) mod remote;
