//! `ralph-ctl reset`: clears the loop's state so a new loop can start.

use ralph_core::exit_codes;
use ralph_core::paths::ProjectPaths;
use ralph_core::store::{StateStore, StoreError};
use ralph_core::time;

use crate::CmdResult;

/// Removes the state under the lock; a corrupt one is moved aside so nothing is lost.
pub fn run(paths: &ProjectPaths) -> CmdResult {
    let store = StateStore::new(paths);
    if !store.exists() {
        println!(
            "Nothing to reset: no loop state in {}.",
            paths.root.display()
        );
        return Ok(exit_codes::OK);
    }
    let lock = store.lock(false)?;
    match lock.read() {
        Ok(_) => {
            lock.remove()?;
            println!("Reset: removed {}.", store.path().display());
        }
        Err(StoreError::Corrupt { .. }) => {
            let aside = lock.quarantine(&time::now_rfc3339())?;
            println!("Reset: the corrupt state was moved to {}.", aside.display());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(exit_codes::OK)
}
