//! Which queue run a `run --queue` process works for: the project's
//! running run on the same source when a live process carries it (the
//! process joins it, and shares its claims), else a new run, its record
//! opened with the queue's source, landing, base and remote.

use crate::queue::claims::store::ClaimStore;
use ralph_core::events::Event;
use ralph_core::judge::config::Config;
use ralph_core::judge::state::{QueueRun, RunMode, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::pin::Pinned;
use ralph_core::time::Timestamp;
use ralph_core::transaction::{self, Whose};

use crate::driver::prepare::{MergeMode, QueueOptions};
use crate::driver::{carriers, say, start, worktree};
use crate::error::CtlError;

/// The run this process works for: the project's running queue run on the
/// same source when a live process carries it (this process joins), else
/// a new one.
pub(super) fn enter(
    paths: &ProjectPaths,
    options: &QueueOptions,
    config: &Config,
    pin: &Pinned,
    base: &str,
    run_mode: RunMode,
    remote: Option<String>,
) -> Result<String, CtlError> {
    // A run whose processes are all gone is recorded as interrupted first.
    if let Some(left) = carriers::reconcile(paths)? {
        say(&format!(
            "the previous loop (session {}) was left running; recorded as interrupted",
            left.session_id
        ));
    }
    for attempt in 0..2 {
        if let Ok(Some(state)) = StateStore::new(paths).read() {
            let same = state
                .queue
                .as_ref()
                .is_some_and(|q| q.source == options.source);
            if same && state.status == Status::Running && carriers::still_carried(&state).is_some()
            {
                let run = state.session_id;
                let changed = transaction::change(paths, Whose::Session(&run), |draft| {
                    draft.apply(Event::Joined(carriers::with_client(None)));
                    Ok::<_, CtlError>(())
                })?;
                crate::driver::told(changed);
                say(&format!(
                    "joining the queue run of session {run} (its workers and these share the claims)"
                ));
                return Ok(run);
            }
        }
        ClaimStore::new(paths).forget_unfinished(Timestamp::now())?;
        let queue = QueueRun {
            source: options.source.clone(),
            merge: match options.merge {
                MergeMode::Rebase => "rebase".into(),
                MergeMode::None => "none".into(),
            },
            base: base.to_string(),
            base_head: worktree::git(&paths.root, &["rev-parse", base]).ok(),
            items: Default::default(),
            joined: Vec::new(),
            remote: remote.clone(),
        };
        let started = start::open_loop(
            paths,
            config,
            pin.clone(),
            None,
            config.max_iterations,
            false,
            true,
            |state| {
                state.queue = Some(queue);
                state.run_mode = Some(run_mode.clone());
                // The run's iterations are its items': none yet.
                state.iteration = 0;
                // Carried by this process from its first write, so that
                // another `run --queue` joins it rather than start its own;
                // a process that joins is recorded in the run's queue.
                state.carriers = Some(carriers::with_client(None));
            },
        );
        match started {
            Ok(started) => return Ok(started.session_id),
            // Another process may have started the run a moment ago.
            Err(CtlError::Refused(_)) if attempt == 0 => {}
            Err(e) => return Err(e),
        }
    }
    unreachable!("the second attempt returns")
}
