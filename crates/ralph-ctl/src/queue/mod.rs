//! The queue's home: a backlog drained by `run --queue`. Its items come
//! from a [`source`] (a plan, a folder, a command, a prd.json, GitHub
//! issues, beads); a run is joined or opened by [`join`] and drained by
//! [`run`]'s workers (the loop
//! that takes items, `worker`; what becomes of a finished item, `landing`;
//! its record, `settle`); who works which item is kept in [`claims`] (the
//! project's claims file, and with `--remote` the records on the shared git
//! remote, [`remote`]); finished items are landed through [`merge`]. Where
//! each item stands now, as `ralph-ctl queue` shows it, is [`standing`]; the
//! items' loops as `serve` and `report` read them are [`item_loops`]. What
//! a single loop uses too stays in `driver/`: the worktrees, the text an
//! item starts with (which a queue run's dry run shows, `item_text`), and
//! the `.git/config.lock` a queue run holds (`config_hold`, which every
//! loop's tidying and `status` look at).

pub(crate) mod claims;
pub(crate) mod item_loops;
pub(crate) mod join;
mod landing;
pub(crate) mod merge;
pub(crate) mod remote;
pub(crate) mod run;
mod settle;
pub(crate) mod source;
pub(crate) mod standing;
mod worker;
