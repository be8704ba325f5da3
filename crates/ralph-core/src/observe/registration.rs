//! What `.claude/settings.json` says about ralph's Stop hook, so both
//! binaries can check that the registered timeout leaves room for the
//! verification commands (Claude Code kills a hook that outlives it).

use std::fs;
use std::path::Path;

use serde_json::Value;

/// Claude Code's timeout for a command hook that sets none, in seconds.
pub const CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS: u64 = 60;
/// Seconds the hook needs beside its verification commands.
pub const HOOK_OVERHEAD_SECS: u64 = 10;
/// The name by which a registration of ralph's hook is recognised.
pub const HOOK_BINARY_NAME: &str = "ralph-stop-hook";

/// Ralph's entry among the Stop hooks of `settings`, if it is registered.
fn registered_entry(settings: &Path) -> Option<Value> {
    let value: Value = serde_json::from_slice(&fs::read(settings).ok()?).ok()?;
    value
        .pointer("/hooks/Stop")?
        .as_array()?
        .iter()
        .filter_map(|group| group.get("hooks")?.as_array())
        .flatten()
        .find(|entry| {
            entry
                .get("command")
                .and_then(Value::as_str)
                .is_some_and(|c| c.contains(HOOK_BINARY_NAME))
        })
        .cloned()
}

/// The timeout registered for ralph's Stop hook in `settings`, if it is registered.
pub fn registered_timeout(settings: &Path) -> Option<u64> {
    registered_entry(settings).map(|entry| {
        entry
            .get("timeout")
            .and_then(Value::as_u64)
            .unwrap_or(CLAUDE_DEFAULT_HOOK_TIMEOUT_SECS)
    })
}

/// The command line registered for ralph's Stop hook in `settings`, if it is registered.
pub fn registered_command(settings: &Path) -> Option<String> {
    registered_entry(settings)?
        .get("command")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// A warning when verification commands taking up to `verify_total` seconds
/// may not fit in a hook `timeout`.
pub fn timeout_warning(verify_total: u64, timeout: u64) -> Option<String> {
    (verify_total > 0 && verify_total + HOOK_OVERHEAD_SECS > timeout).then(|| {
        format!(
            "the verify commands may take up to {verify_total} s but the Stop hook's timeout is {timeout} s, \
             so Claude Code could kill the hook mid-verification; run `ralph-ctl init` again (it sizes the \
             timeout to fit) or lower their timeoutSeconds"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_registered_timeout() {
        let dir = crate::tempdir::TempDir::new();
        let path = dir.path().join("settings.json");
        assert_eq!(registered_timeout(&path), None);
        fs::write(
            &path,
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"notify"}]},{"hooks":[{"type":"command","command":"/x/ralph-stop-hook","timeout":90}]}]}}"#,
        )
        .unwrap();
        assert_eq!(registered_timeout(&path), Some(90));
        fs::write(
            &path,
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"ralph-stop-hook"}]}]}}"#,
        )
        .unwrap();
        assert_eq!(registered_timeout(&path), Some(60));
        assert!(timeout_warning(55, 60).is_some());
        assert!(timeout_warning(50, 60).is_none());
        assert!(timeout_warning(0, 5).is_none());
    }
}
