//! The queue's room: a queue run (`run --queue`, [`run`]) joined or opened
//! by [`join`], its claims kept in [`claims`] and its items landed through
//! [`merge`]. What a single loop uses too stays in `driver/`: the
//! worktrees, the text an item starts with (which a queue run's dry run
//! shows, `item_text`), and the `.git/config.lock` a queue run holds
//! (`config_hold`, which every loop's tidying and `status` look at).

pub(crate) mod claims;
pub(crate) mod join;
pub(crate) mod merge;
pub(crate) mod remote;
pub(crate) mod run;
