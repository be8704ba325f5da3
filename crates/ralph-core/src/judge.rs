//! Pure judgement: from what a stop observed and the loop's state to the
//! new state and the verdict. Nothing here touches a file, a clock, a
//! process or the environment, so every rule is table-tested.

pub mod breaker;
pub mod claims;
pub mod completion;
pub mod decision;
pub mod errors;
pub mod events;
pub mod lifecycle;
pub mod signals;
