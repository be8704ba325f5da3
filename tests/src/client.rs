//! The real Claude Code client, pinned at two versions and installed by
//! `tests/install-clients.sh` into `.cache/claude-code/<version>/`.

use std::path::PathBuf;

use crate::bins::workspace_root;

/// A pinned Claude Code version the end-to-end tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientVersion {
    /// Native binary; sends `last_assistant_message`; caps consecutive blocks at 8.
    V2_1_330,
    /// `cli.js` on Node; no `last_assistant_message` (the transcript is read); no block cap.
    V2_0_77,
}

impl ClientVersion {
    /// Both pinned versions.
    pub const ALL: [ClientVersion; 2] = [ClientVersion::V2_1_330, ClientVersion::V2_0_77];

    /// The npm version string.
    pub fn version(self) -> &'static str {
        match self {
            ClientVersion::V2_1_330 => "2.1.330",
            ClientVersion::V2_0_77 => "2.0.77",
        }
    }

    /// The executable to use as `RALPH_CLAUDE`; panics with the fix when the
    /// client is not installed (a missing client is a failure, never a skip).
    pub fn executable(self) -> PathBuf {
        let package = workspace_root()
            .join(".cache/claude-code")
            .join(self.version())
            .join("node_modules/@anthropic-ai/claude-code");
        let exe = match self {
            ClientVersion::V2_1_330 => package.join("bin/claude.exe"),
            ClientVersion::V2_0_77 => package.join("cli.js"),
        };
        assert!(
            exe.is_file(),
            "Claude Code {} is not installed at {}: run tests/install-clients.sh (tests/run.sh does)",
            self.version(),
            exe.display()
        );
        exe
    }
}
