//! Merging the Stop hook into `.claude/settings.json` without disturbing
//! anything else a person or another tool put there, and the settings the
//! driver adds for one run (the `StopFailure` hook, which only Claude Code
//! 2.1 and later know: 2.0 skips a whole settings file that names it).

use serde_json::{Map, Value, json};

/// The hook timeout `init` registers at least, in seconds: room for one
/// verify command with the default `timeoutSeconds` and the hook's own
/// work, so a check added later without a timeout of its own fits. Claude
/// Code kills a hook that outlives it and lets the session stop.
pub(crate) const DEFAULT_HOOK_TIMEOUT_SECS: u32 =
    ralph_core::observe::verify::DEFAULT_TIMEOUT_SECS + 30;
pub(crate) use ralph_core::observe::registration::HOOK_BINARY_NAME;

/// The command line Claude Code runs: the binary's absolute path, quoted
/// when it holds a space.
pub(crate) fn hook_command(hook_path: &str) -> String {
    if hook_path.contains(' ') {
        format!("\"{hook_path}\"")
    } else {
        hook_path.to_string()
    }
}

/// A part of the settings whose shape ralph cannot merge into (then
/// nothing is changed): "`hooks` is not an object".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{part} is not {expected}")]
pub(crate) struct ShapeError {
    /// The part: "the file", "`hooks.Stop`".
    pub(crate) part: String,
    /// What it should be: "an object", "an array".
    pub(crate) expected: &'static str,
}

impl ShapeError {
    fn new(part: impl Into<String>, expected: &'static str) -> ShapeError {
        ShapeError {
            part: part.into(),
            expected,
        }
    }
}

/// Adds (or updates) our Stop hook in `settings`, keeping every other key,
/// hook and event. Returns an error naming what has an unexpected shape.
pub(crate) fn merge_stop_hook(
    settings: &mut Value,
    command: &str,
    timeout: u32,
) -> Result<(), ShapeError> {
    merge_hook(settings, "Stop", command, timeout)
}

/// Adds (or updates) our hook for `event` in `settings`, keeping every
/// other key, hook and event. Returns an error naming what has an
/// unexpected shape, and then changes nothing.
pub(crate) fn merge_hook(
    settings: &mut Value,
    event: &str,
    command: &str,
    timeout: u32,
) -> Result<(), ShapeError> {
    let Value::Object(root) = settings else {
        return Err(ShapeError::new("the file", "a JSON object"));
    };
    let hooks = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(hooks) = hooks else {
        return Err(ShapeError::new("`hooks`", "an object"));
    };
    let stop = hooks
        .entry(event)
        .or_insert_with(|| Value::Array(Vec::new()));
    let Value::Array(groups) = stop else {
        return Err(ShapeError::new(format!("`hooks.{event}`"), "an array"));
    };
    let ours = json!({"type": "command", "command": command, "timeout": timeout});
    for group in groups.iter_mut() {
        if let Some(Value::Array(entries)) = group.get_mut("hooks") {
            for entry in entries.iter_mut() {
                let is_ours = entry
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains(HOOK_BINARY_NAME));
                if is_ours {
                    *entry = ours;
                    return Ok(());
                }
            }
        }
    }
    groups.push(json!({"hooks": [ours]}));
    Ok(())
}

/// The permission rules `init` adds to `permissions.deny`: the agent's file
/// tools may not touch the loop's runtime folder (its state, log and
/// history), ralph's config or formulas, nor git's configuration, hooks
/// and `info` (programs git runs: the next client's, ralph's own and the
/// merge queue's git would run what the agent named there), and its shell
/// may not reset,
/// restart, steer, answer or reload the loop, nor report usage windows to
/// it (`say`, `answer`, `reload` are the person's, `statusline` the
/// client's).
/// Claude Code applies deny rules in every permission mode. The literal
/// forms (a leading `/`: relative to the settings file, no glob) are also
/// read-only paths in the client's sandbox on both 2.0.77 and 2.1.330
/// (2.0.77 skips a glob there); outside the sandbox they are a first fence
/// (a shell command can still write a file), behind which a completion
/// ralph did not record is reported as one (`ralph-ctl finish`, exit 17).
pub(crate) const DENY_RULES: &[&str] = &[
    "Edit(.claude/context/runtime/**)",
    "Edit(/.claude/context/runtime/**)",
    "Edit(/.claude/context/runtime)",
    "Edit(/.claude/ralph/config.json)",
    "Edit(/.claude/ralph/formulas)",
    "Edit(/.git/config)",
    "Edit(/.git/hooks)",
    "Edit(/.git/info)",
    "Bash(ralph-ctl reset:*)",
    "Bash(ralph-ctl start:*)",
    "Bash(ralph-ctl say:*)",
    "Bash(ralph-ctl answer:*)",
    "Bash(ralph-ctl reload:*)",
    "Bash(ralph-ctl statusline:*)",
];

/// The deny rules `init` wrote over `protectedPaths` before they were
/// judged by change, not addition (`Edit(p/**)` and `Write(p/**)` for a
/// folder, a glob ending with `/` or one `is_dir` says is a folder;
/// `Edit(**/p)` and `Write(**/p)` for a name matched at any depth; `Edit(p)`
/// and `Write(p)` otherwise): `init` takes them out again, since they
/// refused the agent a new test, and 2.1.330 ignores the `Write` ones
/// anyway (only `Edit(path)` rules are matched, it warns).
pub(crate) fn former_protected_rules(
    globs: &[String],
    is_dir: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut rules = Vec::new();
    for glob in globs {
        let glob = glob.trim().trim_start_matches("./");
        let bare = glob.trim_end_matches('/');
        if bare.is_empty() {
            continue;
        }
        let target = if glob.ends_with('/') || is_dir(bare) {
            format!("{bare}/**")
        } else if !bare.contains('/') {
            format!("**/{bare}")
        } else {
            bare.to_string()
        };
        for tool in ["Edit", "Write"] {
            rules.push(format!("{tool}({target})"));
        }
    }
    rules
}

/// Takes `rules` out of `settings`' `permissions.deny`, keeping every other
/// rule (a list it leaves empty stays, empty).
pub(crate) fn remove_deny_rules(settings: &mut Value, rules: &[String]) {
    if let Some(Value::Array(deny)) = settings.pointer_mut("/permissions/deny") {
        deny.retain(|r| !r.as_str().is_some_and(|r| rules.iter().any(|x| x == r)));
    }
}

/// `ralph-ctl statusline`'s name, as ralph writes it into an interactive
/// loop's client settings (`pauseAtUtilization`).
pub(crate) const STATUSLINE_SUBCOMMAND: &str = "statusline";

/// Seconds between the client's runs of the status line command.
pub(crate) const STATUSLINE_REFRESH_SECONDS: u64 = 2;

/// The `statusLine` setting that runs `ralph_ctl statusline` every
/// [`STATUSLINE_REFRESH_SECONDS`].
pub(crate) fn statusline_setting(ralph_ctl: &std::path::Path) -> Value {
    let program = ralph_ctl.display().to_string();
    let quoted = format!("'{}'", program.replace('\'', r"'\''"));
    serde_json::json!({
        "type": "command",
        "command": format!("{quoted} {STATUSLINE_SUBCOMMAND}"),
        "refreshInterval": STATUSLINE_REFRESH_SECONDS,
    })
}

/// Adds each of [`DENY_RULES`] that `settings` lacks to its
/// `permissions.deny`, keeping every other rule. An error names a part of
/// unexpected shape, and then nothing changes.
pub(crate) fn merge_deny_rules(settings: &mut Value) -> Result<(), ShapeError> {
    let Value::Object(root) = settings else {
        return Err(ShapeError::new("the file", "a JSON object"));
    };
    if !matches!(root.get("permissions"), None | Some(Value::Object(_))) {
        return Err(ShapeError::new("`permissions`", "an object"));
    }
    if !matches!(
        root.get("permissions").and_then(|p| p.get("deny")),
        None | Some(Value::Array(_))
    ) {
        return Err(ShapeError::new("`permissions.deny`", "an array"));
    }
    let permissions = root
        .entry("permissions")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(Value::Array(deny)) = permissions
        .as_object_mut()
        .map(|p| p.entry("deny").or_insert_with(|| Value::Array(Vec::new())))
    else {
        return Err(ShapeError::new("`permissions.deny`", "an array"));
    };
    let key_rules = key_deny_rules(
        ralph_core::persist::mac::key_dir().as_deref(),
        dirs::home_dir().as_deref(),
    );
    for rule in DENY_RULES
        .iter()
        .copied()
        .chain(key_rules.iter().map(String::as_str))
    {
        if !deny.iter().any(|r| r.as_str() == Some(rule)) {
            deny.push(Value::String(rule.into()));
        }
    }
    Ok(())
}

/// The deny rules `init` adds for ralph's key folder `key_dir`
/// (`ralph_core::persist::mac::key_dir`): the agent may neither read nor
/// edit it, the folder or what is in it. Written `~/…` when the folder is
/// in the home folder `home` (the settings file may be committed and
/// shared), else by its absolute path (`//…`).
pub(crate) fn key_deny_rules(
    key_dir: Option<&std::path::Path>,
    home: Option<&std::path::Path>,
) -> Vec<String> {
    let Some(dir) = key_dir else {
        return Vec::new();
    };
    let shown = match home.and_then(|home| dir.strip_prefix(home).ok()) {
        Some(relative) => format!("~/{}", relative.display()),
        None => format!("/{}", dir.display()),
    };
    ["Read", "Edit"]
        .iter()
        .flat_map(|tool| [format!("{tool}({shown})"), format!("{tool}({shown}/**)")])
        .collect()
}

/// Removes ralph's Stop hook from `settings` (and a group it leaves empty),
/// keeping everything else: `init` registers it in one file only, since
/// Claude Code would run a hook registered in two.
pub(crate) fn remove_stop_hook(settings: &mut Value) {
    let Some(Value::Array(groups)) = settings.pointer_mut("/hooks/Stop") else {
        return;
    };
    for group in groups.iter_mut() {
        if let Some(Value::Array(entries)) = group.get_mut("hooks") {
            entries.retain(|entry| {
                !entry
                    .get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains(HOOK_BINARY_NAME))
            });
        }
    }
    groups.retain(
        |group| !matches!(group.get("hooks"), Some(Value::Array(entries)) if entries.is_empty()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statusline_setting_runs_this_program_quoted() {
        let s = statusline_setting(std::path::Path::new("/opt/it's here/ralph-ctl"));
        assert_eq!(s["command"], r"'/opt/it'\''s here/ralph-ctl' statusline");
        assert_eq!(s["refreshInterval"], STATUSLINE_REFRESH_SECONDS);
    }

    #[test]
    fn adds_to_empty_settings() {
        let mut s = json!({});
        merge_stop_hook(&mut s, "/bin/ralph-stop-hook", 60).unwrap();
        assert_eq!(
            s,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/bin/ralph-stop-hook", "timeout": 60}]}]}})
        );
    }

    #[test]
    fn keeps_other_settings_and_hooks_and_is_idempotent() {
        let mut s = json!({
            "model": "opus",
            "permissions": {"allow": ["Bash(ls)"]},
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]
            }
        });
        merge_stop_hook(&mut s, "/x/ralph-stop-hook", 60).unwrap();
        let once = s.clone();
        merge_stop_hook(&mut s, "/x/ralph-stop-hook", 60).unwrap();
        assert_eq!(s, once);
        assert_eq!(s["model"], "opus");
        assert_eq!(s["hooks"]["PreToolUse"][0]["matcher"], "Bash");
        assert_eq!(s["hooks"]["Stop"][0]["hooks"][0]["command"], "notify.sh");
        assert_eq!(
            s["hooks"]["Stop"][1]["hooks"][0]["command"],
            "/x/ralph-stop-hook"
        );
    }

    #[test]
    fn updates_an_older_registration_in_place() {
        let mut s = json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/old/ralph-stop-hook", "timeout": 5}]}]}});
        merge_stop_hook(&mut s, "/new/ralph-stop-hook", 90).unwrap();
        assert_eq!(s["hooks"]["Stop"].as_array().unwrap().len(), 1);
        assert_eq!(
            s["hooks"]["Stop"][0]["hooks"][0]["command"],
            "/new/ralph-stop-hook"
        );
        assert_eq!(s["hooks"]["Stop"][0]["hooks"][0]["timeout"], 90);
    }

    #[test]
    fn refuses_unexpected_shapes() {
        for bad in [
            json!([]),
            json!({"hooks": []}),
            json!({"hooks": {"Stop": {}}}),
        ] {
            let mut s = bad.clone();
            assert!(
                merge_stop_hook(&mut s, "/x/ralph-stop-hook", 60).is_err(),
                "{bad}"
            );
            assert_eq!(s, bad, "nothing changes on error");
        }
    }

    #[test]
    fn deny_rules_are_added_once_beside_the_person_s_own() {
        crate::testdir::keep_key_apart();
        let mut s = json!({"permissions": {"deny": ["Read(.env)"], "allow": ["Bash(ls)"]}});
        merge_deny_rules(&mut s).unwrap();
        let once = s.clone();
        merge_deny_rules(&mut s).unwrap();
        assert_eq!(s, once);
        let deny = s["permissions"]["deny"].as_array().unwrap();
        assert_eq!(deny[0], "Read(.env)");
        let key_rules = key_deny_rules(
            ralph_core::persist::mac::key_dir().as_deref(),
            dirs::home_dir().as_deref(),
        );
        assert_eq!(deny.len(), 1 + DENY_RULES.len() + key_rules.len());
        assert_eq!(s["permissions"]["allow"][0], "Bash(ls)");
        let mut empty = json!({});
        merge_deny_rules(&mut empty).unwrap();
        assert_eq!(
            empty["permissions"]["deny"].as_array().unwrap().len(),
            DENY_RULES.len() + key_rules.len()
        );
        for bad in [
            json!({"permissions": []}),
            json!({"permissions": {"deny": "x"}}),
            json!([]),
        ] {
            let mut s = bad.clone();
            assert!(merge_deny_rules(&mut s).is_err(), "{bad}");
            assert_eq!(s, bad);
        }
    }

    #[test]
    fn removes_only_its_own_hook() {
        let mut s = json!({"hooks": {"Stop": [
            {"hooks": [{"type": "command", "command": "notify.sh"}]},
            {"hooks": [{"type": "command", "command": "/x/ralph-stop-hook", "timeout": 60}]}
        ]}, "model": "opus"});
        remove_stop_hook(&mut s);
        assert_eq!(
            s,
            json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify.sh"}]}]}, "model": "opus"})
        );
        let mut odd = json!({"hooks": "x"});
        remove_stop_hook(&mut odd);
        assert_eq!(odd, json!({"hooks": "x"}));
    }

    #[test]
    fn quotes_paths_with_spaces() {
        assert_eq!(
            hook_command("/a b/ralph-stop-hook"),
            "\"/a b/ralph-stop-hook\""
        );
        assert_eq!(hook_command("/ab/ralph-stop-hook"), "/ab/ralph-stop-hook");
    }

    #[test]
    fn the_former_rules_over_protected_paths_are_taken_out() {
        let globs: Vec<String> = ["tests/", "spec", "*_test.go", "src/**/*.snap"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        let rules = former_protected_rules(&globs, |p| p == "spec");
        assert_eq!(
            rules,
            [
                "Edit(tests/**)",
                "Write(tests/**)",
                "Edit(spec/**)",
                "Write(spec/**)",
                "Edit(**/*_test.go)",
                "Write(**/*_test.go)",
                "Edit(src/**/*.snap)",
                "Write(src/**/*.snap)",
            ]
        );
        let mut s = json!({"permissions": {"deny": ["Edit(tests/**)", "Bash(rm:*)", "Write(tests/**)", "Edit(docs/**)"]}});
        crate::testdir::keep_key_apart();
        merge_deny_rules(&mut s).unwrap();
        remove_deny_rules(&mut s, &rules);
        let deny = s["permissions"]["deny"].as_array().unwrap();
        assert!(
            !deny.iter().any(|r| r.as_str().unwrap().contains("tests")),
            "{deny:?}"
        );
        assert!(
            deny.iter().any(|r| r == "Bash(rm:*)") && deny.iter().any(|r| r == "Edit(docs/**)")
        );
        assert!(
            deny.iter()
                .all(|r| !r.as_str().unwrap().starts_with("Write(")),
            "only rule forms the client matches: {deny:?}"
        );
        assert!(deny.iter().any(|r| r == DENY_RULES[0]));
    }

    #[test]
    fn the_key_folder_is_denied_in_the_home_relative_form_when_it_can_be() {
        let home = std::path::Path::new("/home/ann");
        let dir = home.join(".local/share/ralph");
        assert_eq!(
            key_deny_rules(Some(&dir), Some(home)),
            [
                "Read(~/.local/share/ralph)",
                "Read(~/.local/share/ralph/**)",
                "Edit(~/.local/share/ralph)",
                "Edit(~/.local/share/ralph/**)",
            ]
        );
        let elsewhere = std::path::Path::new("/data/ann/ralph");
        assert_eq!(
            key_deny_rules(Some(elsewhere), Some(home))[0],
            "Read(//data/ann/ralph)"
        );
        assert_eq!(key_deny_rules(None, Some(home)), Vec::<String>::new());
    }
}
