//! The merge queue of a queue run (`run --queue --merge rebase`): a
//! finished item's branch is rebased onto the current base, its plan box
//! ticked in a commit of its own, the project's verify commands run on the
//! result, and the base fast-forwarded to it. One merge at a time: the
//! caller holds the merge lock (`ClaimStore::merge_lock`) across the
//! landing and its record. A conflict, a failing
//! verify or a base that cannot be fast-forwarded leaves the branch as it
//! was and says why: the item needs a person's review.
//!
//! Every git command goes through the safe configuration
//! (`worktree::git`): nothing the agent wrote into the repository's
//! configuration, hooks or attributes runs.

use std::path::Path;
use std::time::Duration;

use crate::queue::claims::store::ClaimStore;
use crate::queue::source::{self, DoneMark, Item};
use ralph_core::observe::verify::{self, VerifyCommand};
use ralph_core::walls::WallsWanted;

use crate::driver::worktree::{Worktree, git};
use crate::error::CtlError;
use crate::queue::remote::{Cause, Ending, Landing as RemoteLanding, Refused, RemoteBook};

/// How long a finished item waits for the merges before it.
pub(crate) const MERGE_PATIENCE: Duration = Duration::from_secs(6 * 3600);

/// What became of a finished item's branch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Landed {
    /// The base now holds it, at `commit`; its worktree and branch are gone.
    Merged {
        /// The base's new commit.
        commit: String,
        /// The base's commit found before the landing, when it was not the
        /// one expected: the base moved outside the merge queue.
        moved: Option<String>,
    },
    /// The item left no commit and no change: there was nothing to land
    /// (and its box, if any, is left unticked).
    Nothing,
    /// Kept on its branch for a person, and why.
    NeedsReview(String),
}

/// One finished item to land.
pub(crate) struct Landing<'a> {
    /// The main checkout.
    pub(crate) root: &'a Path,
    /// The branch the item lands on.
    pub(crate) base: &'a str,
    /// The item's worktree.
    pub(crate) worktree: &'a Worktree,
    /// The item.
    pub(crate) item: &'a Item,
    /// The file a landed item is marked done in (relative to the project):
    /// the queue's plan, or its prd.json.
    pub(crate) plan: Option<&'a Path>,
    /// How the item is marked done there (a box ticked, `passes` set).
    pub(crate) mark: DoneMark,
    /// A line the landing's last commit carries (`Fixes #N`).
    pub(crate) trailer: Option<String>,
    /// The queue's source, its plan or its folder of items, relative to the
    /// project (`None` for a command, or a source outside the project).
    pub(crate) source: Option<&'a Path>,
    /// The project's verify commands.
    pub(crate) verify: &'a [VerifyCommand],
    /// The claims, whose worktree lock is held while the worktree goes.
    pub(crate) claims: &'a ClaimStore,
    /// The base's commit as the run last left it, when known.
    pub(crate) expected_base: Option<&'a str>,
    /// How the checks are walled: they run the item's code.
    pub(crate) walls: WallsWanted,
    /// The shared remote the item lands through (`--remote`), if any.
    pub(crate) remote: Option<&'a RemoteBook>,
    /// How the remote's base is fetched (one fetch at a time here).
    pub(crate) fetch: Option<&'a dyn Fn() -> Result<String, Refused>>,
    /// The iterations the item's loop ran and what it cost, in dollars:
    /// recorded on the remote by the landing's own push.
    pub(crate) ran: (u32, f64),
}

/// Lands `landing`'s item (the caller holds the merge lock); `Err` only
/// when git itself could not be run. With a shared remote, through it
/// ([`land_on_remote`]).
pub(crate) fn land(landing: &Landing<'_>) -> Result<Landed, CtlError> {
    if let Some(book) = landing.remote {
        return land_on_remote(landing, book);
    }
    let found = git(landing.root, &["rev-parse", landing.base])?;
    let moved_outside = landing
        .expected_base
        .filter(|expected| *expected != found)
        .map(|_| found);
    let wt = &landing.worktree.path;
    commit_leftovers(landing)?;
    let range = format!("{}..HEAD", landing.base);
    let ahead = count(wt, &range)?;
    // An item said done with no change of its own is not ticked off: its
    // agent's work may have failed unseen (a command the sandbox could not
    // start), and one with nothing to do says skip. Its own: not on the
    // base the queue last landed (the agent may have moved the base itself).
    let own: u64 = match landing.expected_base {
        Some(expected) if ahead == 0 => count(wt, &format!("{expected}..HEAD"))?,
        _ => ahead,
    };
    if own == 0 {
        remove(landing)?;
        return Ok(Landed::Nothing);
    }
    if let Some(why) = rebase_onto(landing, landing.base)? {
        return Ok(Landed::NeedsReview(why));
    }
    if let Some(why) = guarded_changes(landing, landing.base)? {
        return Ok(Landed::NeedsReview(why));
    }
    let tick_after = tick_in_branch(landing)?;
    carry_trailer(landing)?;
    if let Some(why) = failed_verify(landing, landing.base) {
        return Ok(Landed::NeedsReview(why));
    }
    let branch = &landing.worktree.branch;
    let head = git(wt, &["rev-parse", "HEAD"])?;
    let checked_out = git(
        landing.root,
        &["symbolic-ref", "--quiet", "--short", "HEAD"],
    )
    .ok();
    let moved = if checked_out.as_deref() == Some(landing.base) {
        git(landing.root, &["merge", "--ff-only", "--quiet", &head])
    } else {
        let old = git(landing.root, &["rev-parse", landing.base])?;
        let reference = format!("refs/heads/{}", landing.base);
        git(landing.root, &["update-ref", &reference, &head, &old])
    };
    if let Err(e) = moved {
        return Ok(Landed::NeedsReview(format!(
            "{} could not be fast-forwarded to branch {branch} ({e}); it is kept",
            landing.base
        )));
    }
    if let Some(plan) = tick_after {
        // Best effort: the item is landed, and recorded done either way.
        let _ = tick_file(&plan, landing);
    }
    remove(landing)?;
    Ok(Landed::Merged {
        commit: head,
        moved: moved_outside,
    })
}

/// How many times a landing through a remote fetches, rebases, checks and
/// pushes again after another machine landed first.
const PUSH_ROUNDS: u32 = 10;

/// Lands `landing`'s item through the shared remote: fetches the base,
/// rebases the item onto it, ticks its box, runs the checks, then pushes
/// it to the base (without force) and the item's record (done, leased on
/// its claim) in one atomic push. A push refused because another machine landed first
/// starts over from the fetch; a conflict, a failing check or a claim lost
/// pushes the item's branch for review; a remote that stays unreachable
/// keeps the branch here. The base checked out here follows when it can
/// be fast-forwarded.
fn land_on_remote(landing: &Landing<'_>, book: &RemoteBook) -> Result<Landed, CtlError> {
    let remote = book.remote();
    let branch = &landing.worktree.branch;
    let wt = &landing.worktree.path;
    let base_shown = format!("{}/{}", remote.name, landing.base);
    let unreachable = |why: &Cause| unreachable(book, branch, &why.to_string());
    let fetch = || match landing.fetch.map(|f| f()) {
        Some(result) => result,
        None => book.patiently("fetching the base", || remote.fetch_base(landing.base)),
    };
    let mut onto = match fetch() {
        Ok(onto) => onto,
        Err(Refused::Rejected(why) | Refused::Unreachable(why) | Refused::Forbidden(why)) => {
            return Ok(unreachable(&why));
        }
    };
    commit_leftovers(landing)?;
    if count(wt, &format!("{onto}..HEAD"))? == 0 {
        remove(landing)?;
        return Ok(Landed::Nothing);
    }
    let for_review = |why: String| Ok(for_review(book, branch, &why));
    for round in 0..PUSH_ROUNDS {
        if round > 0 {
            onto = match fetch() {
                Ok(onto) => onto,
                Err(
                    Refused::Rejected(why) | Refused::Unreachable(why) | Refused::Forbidden(why),
                ) => return Ok(unreachable(&why)),
            };
        }
        if let Some(why) = rebase_onto(landing, &onto)? {
            return for_review(why.replace(&onto, &base_shown));
        }
        if let Some(why) = guarded_changes(landing, &onto)? {
            return for_review(why);
        }
        // The tick is made again on each round: ticks of neighbouring
        // boxes that landed meanwhile would conflict with it in a rebase.
        let untick = git(wt, &["rev-parse", "HEAD"])?;
        let tick_after = tick_in_branch(landing)?;
        carry_trailer(landing)?;
        if let Some(why) = failed_verify(landing, &base_shown) {
            return for_review(why);
        }
        let head = git(wt, &["rev-parse", "HEAD"])?;
        let ending = Ending {
            why: Some(format!(
                "landed on {} at {}",
                landing.base,
                crate::queue::remote::short(&head)
            )),
            iterations: landing.ran.0,
            cost_usd: landing.ran.1,
            branch: None,
            landed: Some(head.clone()),
        };
        let pushed = book.patiently("landing on the base", || {
            book.land(&landing.item.id, landing.base, &head, &ending)
        });
        match pushed {
            Ok(RemoteLanding::Landed) => {
                return landed_on_remote(landing, book, head, tick_after.as_deref());
            }
            Ok(RemoteLanding::ClaimLost) => {
                return for_review(
                    "its claim was taken over by another worker before it landed".into(),
                );
            }
            Ok(RemoteLanding::BaseMoved) | Err(Refused::Rejected(_)) => {
                crate::driver::say(&format!(
                    "item {}: {base_shown} moved on (another worker landed first); fetching, rebasing and checking again",
                    landing.item.id
                ));
                git(wt, &["reset", "--quiet", "--hard", &untick])?;
            }
            Err(Refused::Unreachable(why)) => return Ok(unreachable(&why)),
            Err(Refused::Forbidden(why)) => {
                return Ok(Landed::NeedsReview(format!(
                    "remote {} refuses the push to {} ({why}); branch {branch} is kept here",
                    remote.name, landing.base
                )));
            }
        }
    }
    for_review(format!(
        "{base_shown} moved on each of {PUSH_ROUNDS} times it was about to land"
    ))
}

/// A landing through the remote that could not reach it: the branch kept.
fn unreachable(book: &RemoteBook, branch: &str, why: &str) -> Landed {
    Landed::NeedsReview(format!(
        "remote {} could not be reached to land it ({why}); branch {branch} is kept here",
        book.remote().name
    ))
}

/// An item that cannot land through the remote (`why`): its branch pushed
/// there for review, else kept here.
fn for_review(book: &RemoteBook, branch: &str, why: &str) -> Landed {
    let remote = book.remote();
    let pushed = book.patiently("pushing a branch for review", || {
        remote.push(&[&format!("+refs/heads/{branch}:refs/heads/{branch}")], &[])
    });
    Landed::NeedsReview(match pushed {
        Ok(()) => format!("{why}; branch {branch} is pushed to {}", remote.name),
        Err(_) => format!(
            "{why}; branch {branch} is kept here (the push to {} failed)",
            remote.name
        ),
    })
}

/// The remote's base now at `head`: its tracking ref here and the base
/// here follow, the box ticked in the project's plan (`tick_after`), the
/// item's worktree removed.
fn landed_on_remote(
    landing: &Landing<'_>,
    book: &RemoteBook,
    head: String,
    tick_after: Option<&Path>,
) -> Result<Landed, CtlError> {
    let _ = git(
        landing.root,
        &["update-ref", &book.remote().tracking(landing.base), &head],
    );
    follow_locally(landing, &head);
    if let Some(plan) = tick_after {
        let _ = tick_file(plan, landing);
    }
    remove(landing)?;
    Ok(Landed::Merged {
        commit: head,
        moved: None,
    })
}

/// After a landing through the remote: the base here fast-forwarded to
/// `head` when it can be (checked out, a merge that touches nothing of the
/// person's; else its ref, when `head` descends from it). Best effort.
fn follow_locally(landing: &Landing<'_>, head: &str) {
    let checked_out = git(
        landing.root,
        &["symbolic-ref", "--quiet", "--short", "HEAD"],
    )
    .ok();
    if checked_out.as_deref() == Some(landing.base) {
        let _ = git(landing.root, &["merge", "--ff-only", "--quiet", head]);
        return;
    }
    let Ok(old) = git(landing.root, &["rev-parse", landing.base]) else {
        return;
    };
    if git(landing.root, &["merge-base", "--is-ancestor", &old, head]).is_ok() {
        let reference = format!("refs/heads/{}", landing.base);
        let _ = git(landing.root, &["update-ref", &reference, head, &old]);
    }
}

/// The commits in `range`, counted in `dir`.
fn count(dir: &Path, range: &str) -> Result<u64, CtlError> {
    Ok(git(dir, &["rev-list", "--count", range])?
        .parse()
        .unwrap_or(0))
}

/// Commits what the agent left uncommitted in the item's worktree: it is
/// part of its work.
fn commit_leftovers(landing: &Landing<'_>) -> Result<(), CtlError> {
    let wt = &landing.worktree.path;
    if git(wt, &["status", "--porcelain", "--ignore-submodules=all"])?.is_empty() {
        return Ok(());
    }
    git(wt, &["add", "--all"])?;
    // Not the empty files 2.1.330's sandbox leaves as mount points of
    // the paths it protects (`.claude/settings.local.json`,
    // `.gitmodules`, …): they are no work of the agent's.
    let added = git(
        wt,
        &["diff", "--cached", "--name-only", "-z", "--diff-filter=A"],
    )?;
    let mut not_work: Vec<&str> = Vec::new();
    for path in added.split('\0').filter(|p| !p.is_empty()) {
        let empty = std::fs::symlink_metadata(wt.join(path)).is_ok_and(|m| m.len() == 0);
        if (empty && guarded_path(path, landing)) || never_work(path) {
            not_work.push(path);
        }
    }
    for some in not_work.chunks(500) {
        let args: Vec<&str> = ["rm", "--cached", "--quiet", "--"]
            .into_iter()
            .chain(some.iter().copied())
            .collect();
        git(wt, &args)?;
    }
    if !git(wt, &["diff", "--cached", "--name-only"])?.is_empty() {
        let message = format!("{} ({})", landing.item.title, landing.item.id);
        as_committer(wt, &["commit", "--quiet", "--no-verify", "-m", &message])?;
    }
    Ok(())
}

/// What a check or Python itself writes beside the code, never an item's
/// work: Python's bytecode (`__pycache__/`, `*.pyc`, `*.pyo`) and
/// pytest's cache. ralph's checks send theirs out of the tree and the
/// agent's commands write none (`sandbox::AGENT_ENV`); what is left
/// untracked anyway (a command of the agent's that set its own
/// environment) is not committed with the item's leftovers: committed, it
/// would meet the main checkout's own untracked copies and block the
/// landing.
const NEVER_WORK: [&str; 4] = ["__pycache__", ".pytest_cache", ".pyc", ".pyo"];

/// Whether `path` (relative to the worktree) is of [`NEVER_WORK`].
fn never_work(path: &str) -> bool {
    let [pycache, pytest_cache, pyc, pyo] = NEVER_WORK;
    Path::new(path)
        .components()
        .any(|c| c.as_os_str() == pycache || c.as_os_str() == pytest_cache)
        || path.ends_with(pyc)
        || path.ends_with(pyo)
}

/// git in `dir` with a committer named when the repository names none.
fn as_committer(dir: &Path, args: &[&str]) -> Result<String, CtlError> {
    let all: Vec<&str> = identity(dir)
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    git(dir, &all)
}

/// Rebases the item's branch onto `onto`; why it needs review when it
/// could not be (a conflict: the rebase is undone).
fn rebase_onto(landing: &Landing<'_>, onto: &str) -> Result<Option<String>, CtlError> {
    let wt = &landing.worktree.path;
    let branch = &landing.worktree.branch;
    let Err(e) = as_committer(wt, &["rebase", "--quiet", onto]) else {
        return Ok(None);
    };
    let conflicts = git(wt, &["diff", "--name-only", "--diff-filter=U"]).unwrap_or_default();
    let _ = git(wt, &["rebase", "--abort"]);
    let files = conflicts.lines().collect::<Vec<_>>().join(", ");
    Ok(Some(if files.is_empty() {
        format!("branch {branch} could not be rebased onto {onto}: {e}")
    } else {
        format!("branch {branch} conflicts with {onto} in {files}; it is kept as it was")
    }))
}

/// Why the item may not land when it changed what decides and runs later
/// (the person's: the item may not change it, however its agent got at
/// it), from `onto` to its head.
fn guarded_changes(landing: &Landing<'_>, onto: &str) -> Result<Option<String>, CtlError> {
    let wt = &landing.worktree.path;
    let branch = &landing.worktree.branch;
    let range = format!("{onto}..HEAD");
    let changed = git(wt, &["diff", "--name-only", "--no-renames", "-z", &range])?;
    let added = git(
        wt,
        &[
            "diff",
            "--name-only",
            "--no-renames",
            "-z",
            "--diff-filter=A",
            &range,
        ],
    )?;
    let added: Vec<&str> = added.split('\0').collect();
    // An empty file added (a sandbox's mount point the agent's `git add -A`
    // took) says nothing and runs nothing: it does not hold the item back.
    let added_empty = |path: &str| {
        added.contains(&path)
            && git(wt, &["cat-file", "-s", &format!("HEAD:{path}")]).is_ok_and(|size| size == "0")
    };
    let guarded: Vec<&str> = changed
        .split('\0')
        .filter(|path| !path.is_empty() && guarded_path(path, landing) && !added_empty(path))
        .collect();
    Ok((!guarded.is_empty()).then(|| {
        format!(
            "branch {branch} changes {}, which an item may not change (ralph's files, the \
             client's settings, git attributes, the queue's source); it is kept for review",
            guarded.join(", ")
        )
    }))
}

/// Ticks the item's box in the merged history (a commit on its branch),
/// unless the person has the plan open with changes of their own: then the
/// plan to tick in their copy after the landing.
fn tick_in_branch(landing: &Landing<'_>) -> Result<Option<std::path::PathBuf>, CtlError> {
    let Some(plan) = landing.plan else {
        return Ok(None);
    };
    let wt = &landing.worktree.path;
    let shown = plan.to_string_lossy().into_owned();
    let theirs_changed = !git(landing.root, &["status", "--porcelain", "--", &shown])?.is_empty();
    let in_branch = wt.join(plan);
    if theirs_changed || !in_branch.is_file() {
        return Ok(Some(landing.root.join(plan)));
    }
    if tick_file(&in_branch, landing)? {
        git(wt, &["add", "--", &shown])?;
        if landing.mark == DoneMark::PrdPasses && add_progress(&in_branch, landing.item)? {
            let progress = plan.with_file_name(source::prd::PROGRESS_FILE_NAME);
            git(wt, &["add", "--", &progress.to_string_lossy()])?;
        }
        let message = format!("Tick {} in {shown}", landing.item.title);
        as_committer(wt, &["commit", "--quiet", "--no-verify", "-m", &message])?;
    }
    Ok(None)
}

/// Why the item may not land when a verify command fails on it, rebased
/// onto `onto` (run inside the walls: they run the item's code).
fn failed_verify(landing: &Landing<'_>, onto: &str) -> Option<String> {
    let wt = &landing.worktree.path;
    let branch = &landing.worktree.branch;
    for command in landing.verify {
        let result = verify::run(
            wt,
            command,
            &ralph_core::engine::check_walls(landing.root, wt, landing.walls),
        );
        if !result.passed() {
            let how = if result.timed_out {
                format!("timed out after {} s", command.timeout_seconds)
            } else {
                format!(
                    "exit {}: {}",
                    result.exit_code.map_or("?".into(), |c| c.to_string()),
                    crate::driver::live::excerpt(&result.output_tail)
                )
            };
            return Some(format!(
                "the project's verify `{}` failed on branch {branch} rebased onto {onto} ({how}); it is kept",
                command.name
            ));
        }
    }
    None
}

/// Whether an item's change of `path` (relative to the repository) keeps
/// it from landing: anything under `.claude/` (ralph's config, prompt,
/// formulas and launchers, the client's settings and their hooks), a
/// `.gitattributes` anywhere (it names git's filters and merge drivers),
/// and the queue's source (the plan, whose box ralph ticks itself, or the
/// folder of items).
fn guarded_path(path: &str, landing: &Landing<'_>) -> bool {
    let path = Path::new(path);
    let source = |given: Option<&Path>| given.is_some_and(|s| path.starts_with(s));
    // Names compared without case: on a file system that ignores it
    // (macOS, Windows) `.CLAUDE` is `.claude`.
    let first = path
        .components()
        .next()
        .map(std::path::Component::as_os_str);
    let named = |os: Option<&std::ffi::OsStr>, name: &str| {
        os.and_then(|n| n.to_str())
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
    };
    named(first, ".claude")
        || named(path.file_name(), ".gitattributes")
        || named(first, ".gitmodules")
        || source(landing.plan)
        || source(landing.source)
}

/// `-c` options naming a committer when the repository names none (git
/// refuses to commit or rebase without one).
fn identity(dir: &Path) -> Vec<&'static str> {
    match git(dir, &["var", "GIT_COMMITTER_IDENT"]) {
        Ok(_) => Vec::new(),
        Err(_) => vec!["-c", "user.name=ralph", "-c", "user.email=ralph@localhost"],
    }
}

/// The landing's item marked done in the file at `path` (its plan's box
/// ticked, its prd.json story's `passes` set, every other byte kept); false
/// when the file holds no such item not done (marked or edited meanwhile).
fn tick_file(path: &Path, landing: &Landing<'_>) -> Result<bool, CtlError> {
    let text = std::fs::read_to_string(path).map_err(CtlError::io("read", path))?;
    match source::mark_done(landing.mark, &text, &landing.item.id) {
        Some(ticked) => {
            ralph_core::persist::atomic::write_file(path, ticked.as_bytes(), 0o644)
                .map_err(CtlError::io("write", path))?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Adds `item`'s line to the `progress.txt` beside the prd.json at `prd`,
/// when there is one; whether there was.
fn add_progress(prd: &Path, item: &Item) -> Result<bool, CtlError> {
    let progress = prd.with_file_name(source::prd::PROGRESS_FILE_NAME);
    if !progress.is_file() {
        return Ok(false);
    }
    let mut text = std::fs::read_to_string(&progress).map_err(CtlError::io("read", &progress))?;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&source::prd::progress_line(
        item,
        ralph_core::time::Timestamp::now(),
    ));
    ralph_core::persist::atomic::write_file(&progress, text.as_bytes(), 0o644)
        .map_err(CtlError::io("write", &progress))?;
    Ok(true)
}

/// Puts the landing's trailer (`Fixes #N`) in the message of the item's
/// last commit, unless it says it already.
fn carry_trailer(landing: &Landing<'_>) -> Result<(), CtlError> {
    let Some(trailer) = &landing.trailer else {
        return Ok(());
    };
    let wt = &landing.worktree.path;
    let message = git(wt, &["log", "-1", "--format=%B"])?;
    if message.lines().any(|line| line.trim() == trailer) {
        return Ok(());
    }
    let message = format!("{}\n\n{trailer}\n", message.trim_end());
    as_committer(
        wt,
        &[
            "commit",
            "--quiet",
            "--no-verify",
            "--amend",
            "-m",
            &message,
        ],
    )?;
    Ok(())
}

/// The landed item's worktree and branch, removed. The branch goes by its
/// ref alone: `git branch -D` also rewrites `.git/config` (its section),
/// and a `config.lock` that comes and goes while another worker's client
/// sets up its sandbox fails that client's command (2.1.330's bwrap
/// mounts over the lock file it listed a moment before).
fn remove(landing: &Landing<'_>) -> Result<(), CtlError> {
    let path = landing.worktree.path.to_string_lossy().into_owned();
    let _held = landing
        .claims
        .worktree_lock(Duration::from_secs(120))
        .map_err(CtlError::from)?;
    git(landing.root, &["worktree", "remove", "--force", &path])?;
    crate::driver::worktree_made::forget_removed(landing.root, &landing.worktree.path);
    let reference = format!("refs/heads/{}", landing.worktree.branch);
    git(landing.root, &["update-ref", "-d", &reference])?;
    Ok(())
}

#[cfg(test)]
mod tests;
