//! Files `ralph-ctl init` installs, embedded so the binary works from anywhere.

/// The PROMPT.md template.
pub(crate) const PROMPT_TEMPLATE: &str = include_str!("../../../templates/PROMPT.md");
/// The guardrails.md template.
pub(crate) const GUARDRAILS_TEMPLATE: &str = include_str!("../../../templates/guardrails.md");
/// The starter formula `init --formula NAME` writes.
pub(crate) const FORMULA_TEMPLATE: &str = include_str!("../../../templates/formula.yaml");
/// The Unix launcher; `@RALPH_CTL@` is replaced by the path of `ralph-ctl`,
/// quoted for sh.
pub(crate) const LAUNCHER_SH: &str = include_str!("../../../launchers/ralph-audit.sh");
/// The Windows launcher; `@RALPH_CTL@` is replaced by the path of `ralph-ctl`
/// as a `set "NAME=value"` value (empty when it cannot be one).
pub(crate) const LAUNCHER_BAT: &str = include_str!("../../../launchers/ralph-audit.bat");
/// The placeholder in the launchers.
pub(crate) const CTL_PLACEHOLDER: &str = "@RALPH_CTL@";
