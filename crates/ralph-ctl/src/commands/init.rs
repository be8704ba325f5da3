//! `ralph-ctl init`: installs ralph into the current project. Running it
//! twice changes nothing; existing prompts, settings and hooks are kept.

use std::fs;
use std::path::{Path, PathBuf};

use ralph_core::config::{Config, ProcessEnv};
use ralph_core::exit_codes;
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
    println!("  {word} {shown}");
}

/// Writes `content` to `path` only when it differs; never touches an
/// existing file when `keep_existing` is set (the person's own prompts).
fn install(path: &Path, content: &str, keep_existing: bool) -> Result<Change, CtlError> {
    let existing = fs::read(path).ok();
    let change = match existing {
        Some(_) if keep_existing => return Ok(Change::Kept),
        Some(bytes) if bytes == content.as_bytes() => return Ok(Change::Unchanged),
        Some(_) => Change::Updated,
        None => Change::Created,
    };
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).map_err(CtlError::io("create", dir))?;
    }
    write_atomically(path, content.as_bytes())?;
    Ok(change)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CtlError> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    fs::write(&tmp, bytes)
        .and_then(|()| fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = fs::remove_file(&tmp);
            CtlError::io("write", path)(e)
        })
}

#[cfg(unix)]
fn make_executable(path: &Path) -> Result<(), CtlError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(CtlError::io("make executable", path))
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
        eprintln!("ralph-ctl: warning: {warning}");
    }
    let root = &paths.root;
    println!("Installing ralph into {}", root.display());
    let ralph_dir = paths.ralph_dir();

    let prompt = ralph_dir.join("PROMPT.md");
    report(
        install(&prompt, assets::PROMPT_TEMPLATE, true)?,
        &prompt,
        root,
    );
    let guardrails = paths.guardrails_file();
    report(
        install(&guardrails, assets::GUARDRAILS_TEMPLATE, true)?,
        &guardrails,
        root,
    );

    // Where ralph-ctl is, quoted for each script; an empty value makes the
    // launchers look at RALPH_CTL and PATH instead.
    let ctl = ctl_path();
    let sh = ralph_dir.join("ralph-audit.sh");
    let sh_value = sh_quoted(ctl.as_deref().unwrap_or_default());
    report(
        install(
            &sh,
            &assets::LAUNCHER_SH.replace(assets::CTL_PLACEHOLDER, &sh_value),
            false,
        )?,
        &sh,
        root,
    );
    make_executable(&sh)?;
    let bat = ralph_dir.join("ralph-audit.bat");
    let bat_value = ctl.as_deref().and_then(bat_set_value).unwrap_or_default();
    let bat_text = assets::LAUNCHER_BAT
        .replace(assets::CTL_PLACEHOLDER, &bat_value)
        .replace("\r\n", "\n")
        .replace('\n', "\r\n");
    report(install(&bat, &bat_text, false)?, &bat, root);

    let settings_path = paths.settings_file();
    let mut settings: Value = match fs::read_to_string(&settings_path) {
        Ok(text) if text.trim().is_empty() => Value::Object(Default::default()),
        Ok(text) => serde_json::from_str(&text).map_err(|e| CtlError::Settings {
            path: settings_path.clone(),
            problem: format!("it is not valid JSON ({e})"),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Object(Default::default()),
        Err(e) => return Err(CtlError::io("read", &settings_path)(e)),
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
    let change = if settings == before && settings_path.exists() {
        Change::Unchanged
    } else {
        let mut text = serde_json::to_string_pretty(&settings).expect("settings serialize");
        text.push('\n');
        install(&settings_path, &text, false)?
    };
    report(change, &settings_path, root);

    println!();
    println!(
        "Next: write the task into .claude/ralph/PROMPT.md, then run .claude/ralph/ralph-audit.sh"
    );
    println!("(the Stop hook is {}, timeout {timeout}s).", hook.display());
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
