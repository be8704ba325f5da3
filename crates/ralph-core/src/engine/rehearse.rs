//! A claim of done judged now, writing nothing: what `ralph-ctl check`
//! shows the agent before it claims.

use super::*;

/// What a claim of done made now would meet: what `ralph-ctl check` shows
/// the agent (and the person) before anyone claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rehearsal {
    /// The checks a claim is verified by: the loop's pinned verify
    /// commands (with no loop, the config files' as they are), a formula
    /// step's gates.
    pub checks: Vec<VerifyCommand>,
    /// What each check did, run inside the walls a stop runs it in.
    pub verification: Vec<VerifyResult>,
    /// Each completion gate's result, as the stop would judge it.
    pub gates: Vec<GateResult>,
    /// The test counts of the loop's start, one entry per check that
    /// counted tests then.
    pub baseline: Vec<crate::observe::test_counts::CommandCounts>,
    /// The one line for the person when the checks were wanted walled and
    /// could not be (see [`Walls::notice`]).
    pub walls_notice: Option<String>,
    /// What a stop would record of the claim were it accepted: what was
    /// checked, and why nothing was verified when no check ran (none
    /// configured, or a formula step turned verification off).
    pub accepted_summary: String,
}

impl Rehearsal {
    /// Whether the claim would pass every gate judged here.
    pub fn accepted(&self) -> bool {
        self.gates.iter().all(|g| g.passed)
    }
}

/// The basis of a rehearsed claim: no message made it.
pub(super) const REHEARSAL_BASIS: &str = "`ralph-ctl check`";

/// Judges a claim of done as the next stop of `state`'s loop would, with
/// the same code, and writes nothing: the config the stop would use (the
/// loop's pin, `stop`'s formula gates; with no loop, the config files as
/// they are now), the checks run from `stop`'s work root inside the walls
/// the stop runs them in, compared with the loop's start (test counts,
/// protected files, what each check resolves to), and the plan. What a
/// stop reads of its own iteration is not judged here: the final message
/// (its signal, its status block) and the calls the client refused.
pub fn rehearse_claim(
    paths: &ProjectPaths,
    env: &dyn EnvSource,
    state: Option<&LoopState>,
    stop: &Stop,
    world: &dyn World,
) -> Result<Rehearsal, EngineError> {
    let none_yet;
    let owned = if let Some(state) = state {
        state
    } else {
        // No loop: one that starts now, with nothing recorded of a start.
        none_yet = LoopState::new(String::new(), 0, world.now());
        &none_yet
    };
    let (config, _) = stop_config(paths, env, stop, world, owned)?;
    let mut observed = Observation::of_session(None, false);
    observed.plan = world.plan(work_root(paths, stop), &plan_files(&config, stop));
    let claim = decision::ClaimJudgement {
        assessment: crate::judge::completion::Assessment {
            claimed: true,
            basis: REHEARSAL_BASIS.into(),
            ..Default::default()
        },
        saturation: 0,
    };
    check_claim(paths, &config, stop, world, owned, &claim, &mut observed);
    let gates = decision::claim_gates(&config, owned, &observed, &claim.assessment, &[]);
    let walls_notice = if config.completion.verify.is_empty() {
        None
    } else {
        check_walls(&paths.root, work_root(paths, stop), config.sandbox.walls()).notice()
    };
    Ok(Rehearsal {
        accepted_summary: crate::judge::completion::accepted_summary(
            &gates,
            config.completion.verify_off_by_formula,
        ),
        checks: config.completion.verify,
        verification: observed.verification.unwrap_or_default(),
        gates,
        baseline: owned.test_baseline.clone(),
        walls_notice,
    })
}
