//! What several `ralph-ctl` areas share: fake clients, the launcher,
//! the audit log and the stops that write it.

use ralph_tests::project::{Run, TempProject, run_with_timeout};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Every file under `dir`, with its bytes.
pub(crate) fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

pub(crate) fn settings(project: &TempProject) -> Value {
    serde_json::from_slice(&std::fs::read(project.path(".claude/settings.json")).unwrap()).unwrap()
}

/// A fake client that records its arguments, environment and stdin, then exits with `code`.
pub(crate) fn fake_client(project: &TempProject, code: i32) -> String {
    // The client's first run done in this home: an interactive run is not
    // refused for its screens.
    let config = project.home.join(".claude.json");
    if !config.exists() {
        std::fs::write(&config, r#"{"hasCompletedOnboarding": true}"#).unwrap();
    }
    client_script(
        project,
        "fake-claude.sh",
        &format!(
            "for a in \"$@\"; do printf '%s\\n--ARG--\\n' \"$a\"; done > \"$0.args\"\n\
             printf '%s %s\\n' \"$RALPH_ACTIVE\" \"$CLAUDE_CODE_STOP_HOOK_BLOCK_CAP\" > \"$0.env\"\n\
             cat > \"$0.stdin\"\nexit {code}\n"
        ),
    )
}

/// A fake client at `name` in the project: a shell script that answers
/// `--version` as Claude Code 2.0.77 does and otherwise runs `body`; its
/// path.
pub(crate) fn client_script(project: &TempProject, name: &str, body: &str) -> String {
    let path = project.path(name);
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo '2.0.77 (Claude Code)'; exit 0; }}\n{body}"
        ),
    )
    .unwrap();
    make_executable(&path);
    path.display().to_string()
}

pub(crate) fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub(crate) fn launcher(project: &TempProject, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = project.command(project.path(".claude/ralph/ralph-audit.sh"));
    cmd.args(args).envs(env.iter().copied());
    run_with_timeout(cmd, None, std::time::Duration::from_secs(60))
}

/// What the fake client read on stdin.
pub(crate) fn recorded_stdin(client: &str) -> String {
    std::fs::read_to_string(format!("{client}.stdin")).unwrap()
}
