//! Persistence: the locked, atomic store that keeps the loop's record
//! (`judge::state`), the append-only audit log beside it, and the one
//! atomic file write every file ralph creates goes through; the MAC under
//! the person's key that both carry, so only ralph's own record is believed,
//! and the sequence numbers kept beside that key, so only its latest.

pub mod atomic;
pub mod lock;
pub mod log;
pub mod mac;
pub mod sequence;
pub mod store;
