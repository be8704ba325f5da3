//! Observation: reading the world a stop judges (the hook's stdin, the
//! transcript, the project's files and git, the plan, the prompt files, the
//! registered hook) and running what it must (verification commands), each
//! bounded so a hostile or huge input can neither stall nor exhaust a stop.

pub mod bytes;
pub mod hook_input;
pub mod liveness;
pub mod main_checkout;
pub mod plan;
pub mod progress;
pub mod prompt_text;
pub mod protected;
pub mod refusals;
pub mod registration;
pub mod resolved;
pub mod runnable;
pub mod test_counts;
pub mod transcript;
pub mod usage;
pub mod verify;
