//! `ralph-ctl init`: installs ralph into the current project. Running it
//! twice changes nothing; existing prompts, settings and hooks are kept.

use std::fs;
use std::path::{Path, PathBuf};

use ralph_core::atomic;
use ralph_core::config::{Config, ProcessEnv};
use ralph_core::exit_codes;
use ralph_core::files::{self, Bounded};
use ralph_core::paths::ProjectPaths;
use ralph_core::registration;
use ralph_core::verify;
use serde_json::Value;

use crate::assets;
use crate::error::CtlError;
use crate::settings::{self, HOOK_BINARY_NAME};
use crate::CmdResult;

/// What happened to one file.
enum Change {
    Created,
    Updated,
    Unchanged,
    Kept,
}

fn report(change: Change, path: &Path, root: &Path) {
    let shown = path.strip_prefix(root).unwrap_or(path).display();
    let word = match change {
        Change::Created => "created  ",
        Change::Updated => "updated  ",
        Change::Unchanged => "unchanged",
        Change::Kept => "kept     ",
    };
    crate::say!("  {word} {shown}");
}

/// What stands at a path `init` may write.
enum Found {
    /// Nothing: the file is created.
    Nothing,
    /// A file of the person's own that is kept as it is (even through a
    /// link: it is read, never written).
    Kept,
    /// A regular file, with its permission bits.
    File(u32),
}

/// Looks at `path` without following a link there. A link is never written
/// through, nor replaced: it may be the person's own arrangement, or one a
/// cloned repository planted to make `init` overwrite a file elsewhere. So
/// it is refused, unless `keep_existing` and it leads to a regular file
/// (kept as it is). Anything else but a regular file is refused too.
fn inspect(path: &Path, keep_existing: bool) -> Result<Found, CtlError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Nothing),
        Err(e) => return Err(CtlError::io("inspect", path)(e)),
    };
    if meta.file_type().is_symlink() {
        if keep_existing && fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return Ok(Found::Kept);
        }
        return Err(CtlError::Unsafe {
            path: path.to_path_buf(),
            problem: "is a symbolic link",
        });
    }
    if !meta.is_file() {
        return Err(CtlError::Unsafe {
            path: path.to_path_buf(),
            problem: "is not a regular file",
        });
    }
    if keep_existing {
        return Ok(Found::Kept);
    }
    Ok(Found::File(permission_bits(&meta)))
}

#[cfg(unix)]
fn permission_bits(meta: &fs::Metadata) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    meta.permissions().mode() & 0o777
}

#[cfg(not(unix))]
fn permission_bits(_meta: &fs::Metadata) -> u32 {
    0o644
}

/// Writes `content` to `path` only when it differs; never touches an
/// existing file when `keep_existing` is set (the person's own prompts).
/// A new file gets `mode`; a replaced one keeps its own. The write is
/// [`atomic::write_file`]: a temp file under a random name, created
/// exclusively and never through a link, renamed over `path`.
fn install(path: &Path, content: &str, keep_existing: bool, mode: u32) -> Result<Change, CtlError> {
    let (change, mode) = match inspect(path, keep_existing)? {
        Found::Kept => return Ok(Change::Kept),
        Found::Nothing => (Change::Created, mode),
        Found::File(existing_mode) => {
            // Reading one byte more than `content` tells a longer file apart.
            let limit = content.len() as u64;
            match files::read_bounded(path, limit).map_err(CtlError::io("read", path))? {
                Bounded::Bytes(bytes) if bytes == content.as_bytes() => {
                    return Ok(Change::Unchanged)
                }
                Bounded::Missing => (Change::Created, mode),
                Bounded::Bytes(_) | Bounded::TooLarge => (Change::Updated, existing_mode),
            }
        }
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(CtlError::io("create", dir))?;
    }
    atomic::write_file(path, content.as_bytes(), mode).map_err(CtlError::io("write", path))?;
    Ok(change)
}

/// Makes the launcher executable (0755), on the file itself: never through
/// a link, never waiting on a FIFO put there meanwhile.
#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), CtlError> {
    atomic::set_mode(path, 0o755).map_err(CtlError::io("make executable", path))
}

#[cfg(not(unix))]
fn make_executable(_path: &Path) -> Result<(), CtlError> {
    Ok(())
}

/// The ralph-stop-hook to register: the given path, else the one beside this binary.
fn find_hook(hook_path: Option<PathBuf>) -> Result<PathBuf, CtlError> {
    let exe_name = format!("{HOOK_BINARY_NAME}{}", std::env::consts::EXE_SUFFIX);
    let candidate = match hook_path {
        Some(path) => path,
        None => std::env::current_exe()
            .and_then(fs::canonicalize)
            .map_err(|e| {
                CtlError::HookNotFound(format!(
                    "cannot locate ralph-ctl itself ({e}); pass --hook-path"
                ))
            })?
            .with_file_name(&exe_name),
    };
    let path = fs::canonicalize(&candidate).map_err(|_| {
        CtlError::HookNotFound(format!(
            "cannot find {exe_name} at {}; build it (cargo build --release) or pass --hook-path",
            candidate.display()
        ))
    })?;
    if !path.is_file() {
        return Err(CtlError::HookNotFound(format!(
            "{} is not a file; pass --hook-path",
            path.display()
        )));
    }
    Ok(path)
}

/// This `ralph-ctl`'s absolute path, when it can be told.
fn ctl_path() -> Option<String> {
    std::env::current_exe()
        .and_then(fs::canonicalize)
        .ok()
        .and_then(|p| p.to_str().map(str::to_string))
}

/// `value` as one single-quoted sh word: every byte literal, a `'` written
/// as `'\''`.
pub fn sh_quoted(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// `value` for `set "NAME=value"` in a batch file: `%` doubled, the only
/// character expanded there (delayed expansion is off). `None` when it holds
/// what such a line cannot carry (`"`, a line break).
pub fn bat_set_value(value: &str) -> Option<String> {
    if value.contains(['"', '\r', '\n']) {
        return None;
    }
    Some(value.replace('%', "%%"))
}

/// Installs templates, launchers and the hook registration.
pub fn run(paths: &ProjectPaths, hook_path: Option<PathBuf>, timeout: Option<u32>) -> CmdResult {
    let hook = find_hook(hook_path)?;
    // The registered timeout must leave room for the verification commands.
    let verify_total = Config::load(paths, &ProcessEnv)
        .map(|c| verify::total_timeout(&c.completion.verify))
        .unwrap_or(0);
    let timeout = timeout.unwrap_or_else(|| {
        let needed = verify_total + 30;
        u32::try_from(needed.max(u64::from(settings::DEFAULT_HOOK_TIMEOUT_SECS)))
            .unwrap_or(u32::MAX)
    });
    if let Some(warning) = registration::timeout_warning(verify_total, u64::from(timeout)) {
        crate::warn!("ralph-ctl: warning: {warning}");
    }
    let root = &paths.root;
    crate::say!("Installing ralph into {}", root.display());
    let ralph_dir = paths.ralph_dir();

    let prompt = ralph_dir.join("PROMPT.md");
    let guardrails = paths.guardrails_file();
    let sh = ralph_dir.join("ralph-audit.sh");
    let bat = ralph_dir.join("ralph-audit.bat");
    let settings_path = paths.settings_file();
    // Refuse a link (or a folder, a FIFO...) at any destination before
    // writing anything.
    for (path, keep_existing) in [
        (&prompt, true),
        (&guardrails, true),
        (&sh, false),
        (&bat, false),
        (&settings_path, false),
    ] {
        inspect(path, keep_existing)?;
    }

    // The registration is computed (settings.json read and merged) before
    // anything is written: an invalid settings.json leaves the project as it was.
    // Bounded, and never waiting on a FIFO (a link was refused above).
    let mut settings: Value = match registration::read_settings(&settings_path)? {
        Some(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {
            Value::Object(Default::default())
        }
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| CtlError::Settings {
            path: settings_path.clone(),
            problem: format!("it is not valid JSON ({e})"),
        })?,
        None => Value::Object(Default::default()),
    };
    let before = settings.clone();
    settings::merge_stop_hook(
        &mut settings,
        &settings::hook_command(&hook.display().to_string()),
        timeout,
    )
    .map_err(|problem| CtlError::Settings {
        path: settings_path.clone(),
        problem,
    })?;
    report(
        install(&prompt, assets::PROMPT_TEMPLATE, true, 0o644)?,
        &prompt,
        root,
    );
    report(
        install(&guardrails, assets::GUARDRAILS_TEMPLATE, true, 0o644)?,
        &guardrails,
        root,
    );

    // Where ralph-ctl is, quoted for each script; an empty value makes the
    // launchers look at RALPH_CTL and PATH instead.
    let ctl = ctl_path();
    let sh_value = sh_quoted(ctl.as_deref().unwrap_or_default());
    report(
        install(
            &sh,
            &assets::LAUNCHER_SH.replace(assets::CTL_PLACEHOLDER, &sh_value),
            false,
            0o755,
        )?,
        &sh,
        root,
    );
    make_executable(&sh)?;
    let bat_value = ctl.as_deref().and_then(bat_set_value).unwrap_or_default();
    let bat_text = assets::LAUNCHER_BAT
        .replace(assets::CTL_PLACEHOLDER, &bat_value)
        .replace("\r\n", "\n")
        .replace('\n', "\r\n");
    report(install(&bat, &bat_text, false, 0o644)?, &bat, root);

    let change = if settings == before && settings_path.exists() {
        Change::Unchanged
    } else {
        let mut text = serde_json::to_string_pretty(&settings).expect("settings serialize");
        text.push('\n');
        install(&settings_path, &text, false, 0o644)?
    };
    report(change, &settings_path, root);

    crate::say!();
    crate::say!(
        "Next: write the task into .claude/ralph/PROMPT.md, then run .claude/ralph/ralph-audit.sh"
    );
    crate::say!("(the Stop hook is {}, timeout {timeout}s).", hook.display());
    Ok(exit_codes::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn sh_quoting_survives_any_path() {
        for path in [
            "/usr/local/bin/ralph-ctl",
            "/tmp/x/it's a dir/ralph-ctl",
            "/a b/$(touch pwned)/`id`/\"q\"/\\n/*/ralph-ctl",
            "/new\nline/ralph-ctl",
            "''",
            "",
        ] {
            let script = format!("installed={}\nprintf '%s' \"$installed\"", sh_quoted(path));
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .current_dir(std::env::temp_dir())
                .output()
                .unwrap();
            assert!(out.status.success(), "{path:?}: {out:?}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), path, "{script}");
        }
    }

    #[test]
    fn bat_values_double_percent_and_refuse_quotes_and_line_breaks() {
        assert_eq!(
            bat_set_value(r"C:\Program Files\it's & 100%\ralph-ctl.exe").as_deref(),
            Some(r"C:\Program Files\it's & 100%%\ralph-ctl.exe")
        );
        assert_eq!(bat_set_value("/x/\"q\"/ralph-ctl"), None);
        assert_eq!(bat_set_value("/x/\n/ralph-ctl"), None);
    }
}
