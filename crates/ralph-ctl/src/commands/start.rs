//! `ralph-ctl start`: writes a fresh running state owned by one session.

use ralph_core::config::{Config, ProcessEnv, MAX_ITERATIONS_LIMIT};
use ralph_core::exit_codes;
use ralph_core::hook_input;
use ralph_core::paths::ProjectPaths;
use ralph_core::progress;
use ralph_core::prompt;
use ralph_core::registration;
use ralph_core::state::{LoopState, Status};
use ralph_core::store::{StateStore, StoreError};
use ralph_core::time;
use ralph_core::verify;

use crate::error::CtlError;
use crate::{session_id, CmdResult};

/// Starts a loop; prints `SESSION_ID MAX_ITERATIONS` for the launchers.
pub fn run(
    paths: &ProjectPaths,
    session: Option<String>,
    max_iterations: Option<u32>,
    force: bool,
) -> CmdResult {
    let config = Config::load(paths, &ProcessEnv)?;
    // Fail now, not at the first stop, when the prompt cannot be used.
    prompt::read_prompt(&paths.resolve(&config.prompt_file))?;
    prompt::read_guardrails(&paths.guardrails_file())?;
    let max = match max_iterations {
        Some(n) if (1..=MAX_ITERATIONS_LIMIT).contains(&n) => n,
        Some(n) => {
            return Err(CtlError::BadArgument(format!(
                "--max-iterations {n} is invalid: a whole number from 1 to {MAX_ITERATIONS_LIMIT}"
            )))
        }
        None => config.max_iterations,
    };
    let session = match session {
        Some(id) if hook_input::is_valid_session_id(&id) => id,
        Some(id) => {
            return Err(CtlError::BadArgument(format!(
                "--session-id {id:?} is invalid: 1 to 200 letters, digits, '-', '_', '.' or ':'"
            )))
        }
        None => session_id::new_uuid(),
    };

    let store = StateStore::new(paths);
    let lock = store.lock(true)?;
    let now = time::now_rfc3339();
    match lock.read() {
        Ok(Some(current)) if current.status == Status::Running && !force => {
            return Err(CtlError::Refused(format!(
                "a loop is already running in {} (session {}, iteration {} of {}, last stop {}); \
                 let it finish, or run `ralph-ctl reset`, or start with --force",
                paths.root.display(),
                current.session_id,
                current.iteration,
                current.max_iterations,
                current.last_run_at.as_deref().unwrap_or("none yet")
            )));
        }
        Ok(Some(current))
            if current.status == Status::CircuitOpen
                && !force
                && !cooled_down(&current, &config) =>
        {
            let reason = current
                .breaker
                .last_transition
                .as_ref()
                .map(|t| t.reason.clone())
                .or(current.ended_because.clone())
                .unwrap_or_default();
            let cooldown = match config.cooldown_minutes {
                Some(m) => {
                    format!(", or wait until {m} minute(s) after it opened (CB_COOLDOWN_MINUTES)")
                }
                None => String::new(),
            };
            return Err(CtlError::Refused(format!(
                "the circuit breaker is open in {}: the last loop stalled at iteration {} ({reason}); \
                 fix what blocked it, then run `ralph-ctl reset` (or the launcher with --reset){cooldown}",
                paths.root.display(),
                current.iteration
            )));
        }
        Err(e @ StoreError::Corrupt { .. }) => {
            if !force {
                return Err(CtlError::Refused(format!("{e}; or start with --force")));
            }
            let aside = lock.quarantine(&now)?;
            eprintln!("ralph-ctl: moved the corrupt state to {}", aside.display());
        }
        Err(e) => return Err(e.into()),
        Ok(_) => {}
    }
    let verify_total = verify::total_timeout(&config.completion.verify);
    if verify_total > 0 {
        let timeout = registration::registered_timeout(&paths.settings_file())
            .unwrap_or(registration::CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS);
        if let Some(warning) = registration::timeout_warning(verify_total, timeout) {
            eprintln!("ralph-ctl: warning: {warning}");
        }
    }
    let mut state = LoopState::new(session.clone(), max, now);
    // The baseline the first stop is compared with: no change by then is no progress.
    state.breaker.progress = progress::baseline(&paths.root);
    lock.write(&state)?;
    println!("{session} {max}");
    Ok(exit_codes::OK)
}

/// True when the breaker opened longer ago than the configured cooldown.
fn cooled_down(state: &LoopState, config: &Config) -> bool {
    let Some(minutes) = config.cooldown_minutes else {
        return false;
    };
    let opened = state
        .breaker
        .last_transition
        .as_ref()
        .map(|t| t.at.as_str())
        .or(state.ended_at.as_deref())
        .and_then(time::parse_rfc3339);
    match opened.and_then(|at| std::time::SystemTime::now().duration_since(at).ok()) {
        Some(elapsed) => elapsed.as_secs() >= u64::from(minutes) * 60,
        None => false,
    }
}
