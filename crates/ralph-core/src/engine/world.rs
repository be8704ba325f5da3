//! The world a stop reads and runs things in: the [`World`] trait, the
//! real one, and the walls its checks run inside.

use super::*;

/// Everything a stop reads or runs outside the process: the transcript, the
/// project's files, the verification commands, the clock.
pub trait World {
    /// The iteration that ended, from the transcript, waiting up to `wait`
    /// for the client to write it (see [`transcript::wait_for_stop`]; with
    /// `expected`, the stop's own final message). Returns the reading and
    /// how long was waited.
    fn iteration_tail(
        &self,
        transcript: &Path,
        wait: Duration,
        expected: Option<&str>,
    ) -> Result<(IterationTail, Duration), TranscriptError>;
    /// Whether the project changed since `previous` (the breaker's
    /// baseline), from the iteration's file edits or a check of the project
    /// (see [`progress::read`]).
    fn progress(
        &self,
        root: &Path,
        previous: Option<&progress::Baseline>,
        edits: &progress::ToolEdits,
    ) -> progress::Reading;
    /// The TDD scenario in progress.
    fn tdd_scenario(&self, root: &Path) -> Option<String>;
    /// The plan files' unchecked items.
    fn plan(&self, root: &Path, files: &[String]) -> PlanReport;
    /// Runs the verification commands, in order.
    /// Runs a claim's checks from `root` (the project `project`, or a
    /// worktree of it), walled as `walls` says (see [`Walls`]): they run
    /// the agent's code.
    fn verify(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
    ) -> Vec<VerifyResult>;
    /// Runs a claim's checks as [`World::verify`], in the clean room when
    /// `room` says so and `root` is the project itself (see
    /// [`crate::room`]): a copy of the claimed tree with an environment
    /// ralph made, outside the agent's reach.
    fn verify_claim(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
        room: Option<&RoomWanted>,
    ) -> Vec<VerifyResult> {
        let _ = room;
        self.verify(project, root, commands, walls)
    }
    /// The protected files changed since `before` was taken (`None`: the
    /// project could not be listed in time).
    fn protected_changes(&self, root: &Path, before: &ProtectedSnapshot) -> Option<Vec<String>> {
        protected::changes(root, before)
    }
    /// What the verify `commands` resolve to differently from `before`,
    /// the loop's start, run from `root` (a worktree of `project`, or it;
    /// see [`resolved::changes`]).
    fn check_changes(
        &self,
        root: &Path,
        project: &Path,
        before: &ResolvedChecks,
        commands: &[VerifyCommand],
    ) -> Vec<String> {
        resolved::changes(root, project, before, commands)
    }
    /// What the failed ones of a worktree's check `results` reached of the
    /// main checkout `project`, which they cannot see (see
    /// [`crate::observe::main_checkout`]): the editable installs of the
    /// virtual environments on the check's `PATH`, a path of the main
    /// checkout their output names. Empty for a check of the project
    /// itself, or one that passed.
    fn main_checkout_reach(
        &self,
        project: &Path,
        root: &Path,
        results: &[VerifyResult],
    ) -> Vec<String> {
        if project == root || results.iter().all(VerifyResult::passed) {
            return Vec::new();
        }
        let path = Walls::around(project, root, WallsWanted::Off)
            .path_for_check(&std::env::var("PATH").unwrap_or_default());
        let output: Vec<&str> = results
            .iter()
            .filter(|r| !r.passed())
            .map(|r| r.output_tail.as_str())
            .collect();
        crate::observe::main_checkout::reaches(project, root, &path, &output.join("\n"))
    }
    /// The files in the repository of `project` that send git elsewhere and
    /// differ from `before`, the loop's start, each in words (see
    /// [`own_git::record::changes`]).
    fn git_changes(&self, project: &Path, before: &own_git::record::GitRecord) -> Vec<String> {
        own_git::record::changes(project, before)
            .iter()
            .map(own_git::record::Changed::describe)
            .collect()
    }
    /// The time to record, RFC 3339.
    fn now(&self) -> Timestamp;
    /// PROMPT.md.
    fn prompt(&self, path: &Path) -> Result<String, PromptError>;
    /// guardrails.md, when there is one.
    fn guardrails(&self, path: &Path) -> Result<Option<String>, PromptError>;
    /// The model requests, tokens and API errors the transcript gained past
    /// `cursor` (see [`usage::read_new_since`]; requests before `since`, the
    /// loop's start, are not the loop's); times in seconds since the epoch.
    fn usage(
        &self,
        transcript: &Path,
        cursor: Option<&TranscriptCursor>,
        now: u64,
        since: u64,
    ) -> std::io::Result<UsageReading>;
}

/// The walls every check of the agent's work runs inside (see [`Walls`]),
/// for a check of `root` (the project `project`, or a worktree of it):
/// ralph's key folder hidden too, so that the agent's code cannot read the
/// key that signs ralph's records.
pub fn check_walls(project: &Path, root: &Path, wanted: WallsWanted) -> Walls {
    let walls = Walls::around(project, root, wanted);
    match crate::persist::mac::key_dir() {
        Some(keys) => walls.hide(keys),
        None => walls,
    }
}

/// The real world: the filesystem, git, `sh -c`, the system clock.
pub struct RealWorld;

impl World for RealWorld {
    fn iteration_tail(
        &self,
        transcript: &Path,
        wait: Duration,
        expected: Option<&str>,
    ) -> Result<(IterationTail, Duration), TranscriptError> {
        transcript::wait_for_stop(transcript, wait, expected)
    }
    fn progress(
        &self,
        root: &Path,
        previous: Option<&progress::Baseline>,
        edits: &progress::ToolEdits,
    ) -> progress::Reading {
        progress::read(root, previous, edits)
    }
    fn tdd_scenario(&self, root: &Path) -> Option<String> {
        progress::tdd_scenario(root)
    }
    fn plan(&self, root: &Path, files: &[String]) -> PlanReport {
        plan::read(root, files)
    }
    fn verify(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
    ) -> Vec<VerifyResult> {
        verify::run_all(root, commands, &check_walls(project, root, walls))
    }
    fn verify_claim(
        &self,
        project: &Path,
        root: &Path,
        commands: &[VerifyCommand],
        walls: WallsWanted,
        room: Option<&RoomWanted>,
    ) -> Vec<VerifyResult> {
        match room {
            Some(room) if project == root => {
                crate::room::run_checks(project, room, commands, walls)
            }
            _ => self.verify(project, root, commands, walls),
        }
    }
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
    fn prompt(&self, path: &Path) -> Result<String, PromptError> {
        prompt_text::read_prompt(path)
    }
    fn guardrails(&self, path: &Path) -> Result<Option<String>, PromptError> {
        prompt_text::read_guardrails(path)
    }
    fn usage(
        &self,
        transcript: &Path,
        cursor: Option<&TranscriptCursor>,
        now: u64,
        since: u64,
    ) -> std::io::Result<UsageReading> {
        usage::read_new_since(transcript, cursor, now, since)
    }
}
