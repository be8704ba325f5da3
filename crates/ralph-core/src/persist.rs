//! Persistence: the loop's state as a versioned record, the locked,
//! atomic store that keeps it, the append-only audit log beside it, and the
//! one atomic file write every file ralph creates goes through.

pub mod atomic;
pub mod log;
pub mod state;
pub mod store;
