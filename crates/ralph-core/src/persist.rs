//! Persistence: the loop's state as a versioned record, the locked,
//! atomic store that keeps it, and the append-only audit log beside it.

pub mod log;
pub mod state;
pub mod store;
