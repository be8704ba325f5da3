//! `ralph-ctl watch`: a running loop, live. In a terminal, a view redrawn
//! whenever the state changes (iteration, time per iteration, the last
//! message's excerpt, the breaker, cost), until `q`; elsewhere, one line
//! per change, until the loop ends. The state is read, never written.

use std::io::{IsTerminal, Write};
use std::time::{Duration, SystemTime};

use crossterm::{cursor, event, execute, terminal};
use ralph_core::exit_codes;
use ralph_core::judge::config::{Config, ProcessEnv};
use ralph_core::judge::lifecycle;
use ralph_core::judge::state::{LoopState, Status};
use ralph_core::paths::ProjectPaths;
use ralph_core::persist::store::StateStore;
use ralph_core::text::printable;

use crate::error::CmdResult;
use crate::error::CtlError;

/// How often the state file is looked at.
pub(crate) const POLL: Duration = Duration::from_millis(250);

/// Runs the view on the process's terminal, or plain lines on `out`.
pub(crate) fn run(paths: &ProjectPaths, out: &mut dyn Write) -> CmdResult {
    if std::io::stdout().is_terminal() && std::io::stdin().is_terminal() {
        live(paths)
    } else {
        plain(paths, out)
    }
}

/// The state, and when its file last changed.
fn read(paths: &ProjectPaths) -> Result<(Option<LoopState>, Option<SystemTime>), CtlError> {
    let stamp = std::fs::metadata(paths.state_file())
        .and_then(|m| m.modified())
        .ok();
    Ok((StateStore::new(paths).read()?, stamp))
}

/// True while the loop may still change on its own.
fn live_status(state: &LoopState) -> bool {
    state.status.is_live()
}

/// One line for a state: what the loop is doing now.
pub(crate) fn line(state: &LoopState, config: Option<&Config>) -> String {
    let last = match (&state.question, state.status) {
        (Some(question), Status::Waiting) => format!(
            "the agent asks: {} (`ralph-ctl answer TEXT`)",
            excerpt(&question.text, 80)
        ),
        _ => state.history.last().map_or_else(
            || "no iteration ended yet".to_string(),
            |r| format!("last: {} ({})", r.why, excerpt(&r.excerpt, 60)),
        ),
    };
    let windows: String = state
        .usage_windows
        .iter()
        .map(|(name, w)| format!(" · {name} {}", w.utilization.percent()))
        .collect();
    let queue = state
        .queue
        .as_ref()
        .map(|q| format!(" · queue {}", q.counts_line()))
        .unwrap_or_default();
    format!(
        "iteration {}/{} {}{queue} · {} · breaker {} · {}{windows}",
        state.iteration,
        state.max_iterations,
        state.status.as_str(),
        last,
        breaker_summary(state, config),
        state.cost_so_far()
    )
}

fn breaker_summary(state: &LoopState, config: Option<&Config>) -> String {
    crate::render::breaker_line(state, config)
}

fn excerpt(text: &str, chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= chars {
        flat
    } else {
        format!("{}…", flat.chars().take(chars - 1).collect::<String>())
    }
}

/// Plain lines: one per change of the state, until the loop ends.
fn plain(paths: &ProjectPaths, out: &mut dyn Write) -> CmdResult {
    let config = Config::load(paths, &ProcessEnv).ok();
    let mut last_shown = None;
    loop {
        let (state, _) = read(paths)?;
        let Some(state) = state else {
            let said = writeln!(out, "no loop in {}", paths.root.display());
            return super::written(said, exit_codes::NO_LOOP);
        };
        // The agent's text (its last message, a question) shown, never obeyed.
        let shown = printable(&line(&state, config.as_ref())).into_owned();
        if last_shown.as_ref() != Some(&shown) {
            if let Err(e) = writeln!(out, "{shown}").and_then(|()| out.flush()) {
                return super::written(Err(e), exit_codes::OK);
            }
            last_shown = Some(shown);
        }
        if crate::driver::carriers::left_behind(&state) {
            // Shown, never recorded from here: whoever next changes the
            // loop records it (and runs its `notify`).
            let said = writeln!(
                out,
                "interrupted: its driver is gone (the loop is still recorded as running; \
                 `ralph-ctl run --resume` takes it up again, `ralph-ctl cancel` or `reset` records its end)"
            );
            return super::written(said, exit_codes::INTERRUPTED);
        }
        if !live_status(&state) {
            let state = crate::driver::finish::believed(paths, state);
            let said = writeln!(out, "{}", printable(&lifecycle::outcome_line(&state)));
            return super::written(said, lifecycle::exit_code_of(&state));
        }
        std::thread::sleep(POLL);
    }
}

/// The terminal view, redrawn on every change; `q` (or Esc, or Ctrl-C) quits.
fn live(paths: &ProjectPaths) -> CmdResult {
    let mut term = std::io::stdout();
    terminal::enable_raw_mode().map_err(CtlError::io("set up", "the terminal"))?;
    let _ = execute!(term, terminal::EnterAlternateScreen, cursor::Hide);
    let result = view(paths, &mut term);
    let _ = execute!(term, cursor::Show, terminal::LeaveAlternateScreen);
    let _ = terminal::disable_raw_mode();
    result
}

fn view(paths: &ProjectPaths, term: &mut std::io::Stdout) -> CmdResult {
    let config = Config::load(paths, &ProcessEnv).ok();
    let mut drawn = None;
    loop {
        let (state, stamp) = read(paths)?;
        let key = (stamp, state.as_ref().map(|s| (s.iteration, s.status)));
        if drawn != Some(key) {
            draw(term, paths, state.as_ref(), config.as_ref())
                .map_err(CtlError::io("draw on", "the terminal"))?;
            drawn = Some(key);
        }
        if event::poll(POLL).map_err(CtlError::io("read", "the terminal"))?
            && let Ok(event::Event::Key(key)) = event::read()
        {
            let ctrl_c = key.modifiers.contains(event::KeyModifiers::CONTROL)
                && key.code == event::KeyCode::Char('c');
            if ctrl_c || matches!(key.code, event::KeyCode::Char('q') | event::KeyCode::Esc) {
                return Ok(exit_codes::OK);
            }
        }
    }
}

fn draw(
    term: &mut std::io::Stdout,
    paths: &ProjectPaths,
    state: Option<&LoopState>,
    config: Option<&Config>,
) -> std::io::Result<()> {
    execute!(
        term,
        terminal::Clear(terminal::ClearType::All),
        cursor::MoveTo(0, 0)
    )?;
    let mut lines = vec![
        format!("Ralph loop in {}   (q quits)", paths.root.display()),
        String::new(),
    ];
    match state {
        None => lines.push("no loop here yet: waiting for one to start".into()),
        Some(state) => {
            lines.push(format!(
                "status     {}   iteration {} of {}",
                state.status.as_str(),
                state.iteration,
                state.max_iterations
            ));
            if let Some(run) = &state.formula {
                lines.push(format!("formula    {}, {}", run.name, run.position()));
            }
            if let Some(queue) = &state.queue {
                lines.push(format!(
                    "queue      {}, {}",
                    queue.source,
                    queue.counts_line()
                ));
                for (id, item) in &queue.items {
                    lines.push(format!(
                        "  {:<13} {:<20} {:<10} {}",
                        item.status.as_str(),
                        excerpt(id, 20),
                        item.worker,
                        excerpt(&item.title, 40)
                    ));
                }
            }
            lines.push(format!("breaker    {}", breaker_summary(state, config)));
            lines.push(format!("cost       {}", state.cost_so_far()));
            lines.push(String::new());
            lines.push("recent iterations:".into());
            let start = state.history.len().saturating_sub(8);
            let mut previous = start.checked_sub(1).map(|i| state.history[i].at);
            for r in &state.history[start..] {
                let took = previous.map_or_else(
                    || "    –".into(),
                    |a| format!("{:>4} s", r.at.secs().saturating_sub(a.secs())),
                );
                lines.push(format!(
                    "  #{:<3} {took}  {}  {}",
                    r.iteration,
                    excerpt(&r.why, 50),
                    excerpt(&r.excerpt, 50)
                ));
                previous = Some(r.at);
            }
            if !live_status(state) {
                lines.push(String::new());
                lines.push(lifecycle::outcome_line(state));
            }
        }
    }
    for line in lines {
        // Raw mode: a line feed does not return the cursor. What is drawn
        // quotes the agent: its control characters are shown, not obeyed.
        write!(term, "{}\r\n", printable(&line))?;
    }
    term.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_says_the_iteration_the_breaker_and_the_cost() {
        let mut state = LoopState::new(
            "s".into(),
            25,
            ralph_core::time::Timestamp::from_secs(1767225600),
        );
        state.iteration = 3;
        assert_eq!(
            line(&state, None),
            "iteration 3/25 running · no iteration ended yet · breaker closed · $0.00"
        );
    }
}
