//! The doctor's checks of how the client logs in and what it asks a person
//! at its first run in a folder: the login, the API key, the first-run
//! screens, the folder's trust.

use super::{Check, Runs, Verdict, check};

/// Whether the client can log in (every run needs it): a key or token in
/// the environment, a cloud provider, or a login the client stored.
pub(super) fn login(setup: &crate::driver::first_run::Setup) -> Check {
    const NAME: &str = "login";
    match &setup.login {
        // What an interactive run logs in with is the `API key` check's.
        Some(login) if api_key(setup, Runs::Headless).is_some() => check(
            NAME,
            Verdict::Ok,
            format!("headless runs log in with {login}; interactive runs: see `API key`"),
            None,
        ),
        Some(login) => check(NAME, Verdict::Ok, format!("logs in with {login}"), None),
        // On macOS the login may be in the keychain, which is not read.
        None if cfg!(target_os = "macos") => check(
            NAME,
            Verdict::Ok,
            "no login in a file or the environment (it may be in the keychain)".into(),
            None,
        ),
        None => check(
            NAME,
            Verdict::Fail,
            "Claude Code cannot log in: no ANTHROPIC_API_KEY (nor another key or token), no \
             .credentials.json"
                .into(),
            Some(
                "set ANTHROPIC_API_KEY, or run `claude` and log in (or `claude setup-token`)"
                    .into(),
            ),
        ),
    }
}

/// What an interactive run does with `ANTHROPIC_API_KEY`: the client's
/// terminal UI asks first whether to use a key it has no answer for, and
/// uses a declined key's other login (`claude -p` never asks).
pub(super) fn api_key(setup: &crate::driver::first_run::Setup, runs: Runs) -> Option<Check> {
    use crate::driver::first_run::KeyAnswer;
    const NAME: &str = "API key";
    if let Some(question) = setup.key_question() {
        return Some(check(
            NAME,
            runs.interactive_only(),
            format!(
                "{} (headless runs use the key without asking)",
                question.what
            ),
            Some(question.fix),
        ));
    }
    match (setup.api_key?, &setup.other_login) {
        (KeyAnswer::Declined, Some(other)) => Some(check(
            NAME,
            Verdict::Ok,
            format!(
                "you declined ANTHROPIC_API_KEY in the client: interactive runs log in with \
                 {other}, headless runs with the key"
            ),
            None,
        )),
        (KeyAnswer::Declined, None) if !cfg!(target_os = "macos") => Some(check(
            NAME,
            runs.interactive_only(),
            format!(
                "you declined ANTHROPIC_API_KEY in the client ({}): interactive runs have no \
                 login (headless runs use the key)",
                setup.config_file.display()
            ),
            Some("approve the key in `claude` (/config, \"Use custom API key\"), or log in".into()),
        )),
        _ => None,
    }
}

/// Whether the client's first-run screens (theme, onboarding) were done in
/// this home: an interactive run shows them first, a headless one never.
pub(super) fn first_run(setup: &crate::driver::first_run::Setup, runs: Runs) -> Check {
    const NAME: &str = "first run";
    if let Some(unread) = setup.config_unread() {
        return check(
            NAME,
            Verdict::Warn,
            unread,
            Some(
                "nothing, if `claude` starts in this folder without a first-run screen; else run \
                 it once in a terminal here and answer them"
                    .into(),
            ),
        );
    }
    let not_done = if !setup.has_config {
        format!(
            "Claude Code has never run in this home ({} does not exist)",
            setup.config_file.display()
        )
    } else if !setup.onboarded {
        format!(
            "Claude Code's first-run screens were not completed ({} has no hasCompletedOnboarding)",
            setup.config_file.display()
        )
    } else {
        return check(
            NAME,
            Verdict::Ok,
            format!("done ({})", setup.config_file.display()),
            None,
        );
    };
    check(
        NAME,
        runs.interactive_only(),
        format!(
            "{not_done}: interactive runs will show the first-run screens (headless runs do not)"
        ),
        Some(
            "run `claude` once in a terminal, in this project's folder, and answer its questions \
             (theme, trust the folder)"
                .into(),
        ),
    )
}

/// Whether the project's folder is trusted: an interactive client asks
/// first (headless ones do not), and a loop started before waits there.
pub(super) fn folder_trust(setup: &crate::driver::first_run::Setup, runs: Runs) -> Check {
    const NAME: &str = "folder trust";
    if setup.trusted {
        return check(
            NAME,
            Verdict::Ok,
            "this folder (or one above it) is trusted".into(),
            None,
        );
    }
    if setup.unreadable.is_some() {
        return check(
            NAME,
            Verdict::Warn,
            format!(
                "not known: {} could not be read (see `first run`)",
                setup.config_file.display()
            ),
            None,
        );
    }
    let why = if setup.has_config {
        "this folder is not trusted yet"
    } else {
        "this folder is not trusted yet (Claude Code never ran in this home)"
    };
    check(
        NAME,
        runs.interactive_only(),
        format!(
            "{why}: interactive runs will start at the trust question (headless runs do not ask)"
        ),
        Some("run `claude` once in this folder and trust it".into()),
    )
}
