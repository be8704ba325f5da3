//! The text fed back to the agent at each blocked stop: a short header, the
//! current PROMPT.md (re-read at every stop, so edits apply at once), and the
//! guardrails when present.

use std::io;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::files::{Bounded, read_bounded};

/// Largest prompt or guardrails file accepted: it is re-sent at every iteration.
pub const MAX_PROMPT_BYTES: u64 = 1024 * 1024;

/// Why the prompt (or guardrails) file cannot be used.
#[derive(Debug, Error)]
pub enum PromptError {
    /// The prompt file does not exist.
    #[error(
        "prompt file {path} does not exist; create it (ralph-ctl init writes a template) or set promptFile / RALPH_PROMPT_FILE"
    )]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// The prompt file is empty.
    #[error("prompt file {path} is empty; write the task into it")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is not UTF-8 text; save it as plain text")]
    NotText {
        /// The file.
        path: PathBuf,
    },
    /// The file is too large to re-send at every iteration.
    #[error("{path} is larger than {} KiB; shorten it", MAX_PROMPT_BYTES / 1024)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// Reading failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

fn read_text(path: &Path) -> Result<Option<String>, PromptError> {
    let io_err = |source| PromptError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bytes = match read_bounded(path, MAX_PROMPT_BYTES).map_err(io_err)? {
        Bounded::Missing => return Ok(None),
        Bounded::TooLarge => {
            return Err(PromptError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        Bounded::Bytes(bytes) => bytes,
    };
    if bytes.contains(&0) {
        return Err(PromptError::NotText {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| PromptError::NotText {
            path: path.to_path_buf(),
        })
}

/// Reads the prompt file: it must exist, be UTF-8 text, and not be blank.
pub fn read_prompt(path: &Path) -> Result<String, PromptError> {
    match read_text(path)? {
        None => Err(PromptError::Missing {
            path: path.to_path_buf(),
        }),
        Some(text) if text.trim().is_empty() => Err(PromptError::Empty {
            path: path.to_path_buf(),
        }),
        Some(text) => Ok(text),
    }
}

/// The sentence of the PROMPT.md template (`templates/PROMPT.md`) that
/// stands where the task goes: while a prompt still holds it, the task was
/// never written, and a loop would only run the template's generic steps.
pub const TEMPLATE_PLACEHOLDER: &str = "Replace this text with the task for the loop.";

/// Whether `prompt` still holds the template's placeholder sentence
/// ([`TEMPLATE_PLACEHOLDER`]), however its lines were wrapped or indented:
/// the untouched template, or one whose task was never written in.
pub fn is_template(prompt: &str) -> bool {
    let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
    words(prompt).contains(TEMPLATE_PLACEHOLDER)
}

/// Reads the optional guardrails file; missing or blank is `None`.
pub fn read_guardrails(path: &Path) -> Result<Option<String>, PromptError> {
    Ok(read_text(path)?.filter(|t| !t.trim().is_empty()))
}

/// The command the agent runs its checks with, as every text ralph gives
/// it names it: `ralph-ctl check` runs the loop's checks inside the walls
/// a stop runs them in and prints what a claim of done would meet. The
/// one command a run's allow rules let the agent run for its checks.
pub const CHECK_COMMAND: &str = "ralph-ctl check";

/// The full text given to the agent for `iteration`: the circuit breaker's
/// notice when there is one, the header (naming the loop's completion
/// `signal`), the prompt, the guardrails.
pub fn iteration_text(
    signal: &str,
    iteration: u32,
    max_iterations: u32,
    notice: Option<&str>,
    prompt: &str,
    guardrails: Option<&str>,
) -> String {
    let mut text = notice.map(|n| format!("{n}\n\n")).unwrap_or_default();
    text += &format!(
        "[Ralph loop: iteration {iteration} of {max_iterations}]\n\
         This task is given back to you each time you stop, until it is done. The loop ends when \
         your final message has {signal} on a line of its own (write it only when the work is \
         genuinely complete and verified), or after iteration {max_iterations}. Check your work with \
         `{CHECK_COMMAND}`, not the test command itself: it runs the loop's checks as a claim of done \
         is judged, and says which gate a claim would fail now. To report progress, \
         end your message with a line `RALPH_ITERATION_COMPLETE: N findings remain`. If only the \
         person can answer something you need (a decision, a fact), end it with a line \
         `RALPH_ASK: <your question>`: the loop waits for their answer, which comes first in your \
         next text. If you cannot go on at all without them (an access, a credential), end it with \
         a line `RALPH_ABORT: <what you need>` instead: the loop stops for them.\n\n---\n\n"
    );
    text.push_str(prompt.trim_end());
    text.push('\n');
    if let Some(guardrails) = guardrails {
        text.push_str("\n---\n\n");
        text.push_str(guardrails.trim_end());
        text.push('\n');
    }
    text
}

/// The person's notes for the next iteration (`say`, an answer to the
/// agent's question), as they head its text.
pub fn person_note(note: &str) -> String {
    format!("[Ralph: a note from the person watching] {note}")
}

/// The one-line notice shown to the person watching (never sent to the model).
pub fn system_message(iteration: u32, max_iterations: u32, rejected: Option<&str>) -> String {
    match rejected {
        Some(why) => format!("Ralph iteration {iteration}/{max_iterations}; {REJECTED}{why}"),
        None => format!("Ralph iteration {iteration}/{max_iterations}"),
    }
}

/// What starts the part of [`system_message`] that says the stop's claim
/// of done was rejected, before the gates that failed it.
pub const REJECTED: &str = "claim of done rejected: ";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::config::Config;
    use std::fs;
    use tempfile::TempDir;

    #[test]
    fn text_has_header_prompt_and_guardrails() {
        let config = Config::default();
        let text = iteration_text(
            &config.completion_signal,
            3,
            25,
            None,
            "Fix the bugs.\n\n",
            Some("Never delete tests.\n"),
        );
        assert!(text.starts_with("[Ralph loop: iteration 3 of 25]\n"));
        assert!(text.contains(&config.completion_signal));
        // The agent checks its work with the walled check, not the raw command.
        assert!(
            text.contains("Check your work with `ralph-ctl check`, not the test command itself")
        );
        let prompt_at = text.find("Fix the bugs.").unwrap();
        let guard_at = text.find("Never delete tests.").unwrap();
        assert!(prompt_at < guard_at);
        assert!(
            !iteration_text(&config.completion_signal, 1, 2, None, "p", None)
                .contains("---\n\np\n\n---")
        );
        let warned = iteration_text(
            &config.completion_signal,
            4,
            25,
            Some("[Ralph circuit breaker: half-open] Detected: x."),
            "p",
            None,
        );
        assert!(warned.starts_with(
            "[Ralph circuit breaker: half-open] Detected: x.\n\n[Ralph loop: iteration 4 of 25]"
        ));
    }

    #[test]
    fn prompt_file_problems_are_named() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("PROMPT.md");
        assert!(matches!(
            read_prompt(&path),
            Err(PromptError::Missing { .. })
        ));
        fs::write(&path, " \n").unwrap();
        assert!(matches!(read_prompt(&path), Err(PromptError::Empty { .. })));
        fs::write(&path, b"\x00\x01binary").unwrap();
        assert!(matches!(
            read_prompt(&path),
            Err(PromptError::NotText { .. })
        ));
        fs::write(&path, [0xffu8, 0xfe, b'a']).unwrap();
        assert!(matches!(
            read_prompt(&path),
            Err(PromptError::NotText { .. })
        ));
        fs::write(
            &path,
            "a".repeat(usize::try_from(MAX_PROMPT_BYTES).unwrap() + 1),
        )
        .unwrap();
        assert!(matches!(
            read_prompt(&path),
            Err(PromptError::TooLarge { .. })
        ));
        assert!(read_prompt(dir.path()).is_err());
        fs::write(&path, "Do it.").unwrap();
        assert_eq!(read_prompt(&path).unwrap(), "Do it.");
    }

    #[test]
    fn the_template_is_told_by_its_placeholder_however_wrapped() {
        let template =
            "# Task\n\nReplace this text with the task for the loop. Say what \"done\" means.\n";
        assert!(is_template(template));
        assert!(is_template(&template.replace('\n', "\r\n")));
        assert!(is_template(
            "Replace this text\n   with the task\tfor the loop.\n\nFix the parser."
        ));
        assert!(!is_template(
            "# Task\n\nFix the parser so that `cargo test` passes.\n"
        ));
        assert!(!is_template("Replace this text with the task for the loop"));
    }

    #[test]
    fn guardrails_are_optional() {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("guardrails.md");
        assert_eq!(read_guardrails(&path).unwrap(), None);
        fs::write(&path, "\n").unwrap();
        assert_eq!(read_guardrails(&path).unwrap(), None);
        fs::write(&path, "Be careful.").unwrap();
        assert_eq!(
            read_guardrails(&path).unwrap().as_deref(),
            Some("Be careful.")
        );
    }
}
