//! Persistence: the loop's state as a versioned record, and the locked,
//! atomic store that keeps it.

pub mod state;
pub mod store;
