//! A backlog's items, read from where the person keeps them: the unchecked
//! boxes of a markdown plan (`plan:PATH`), one file per item in a folder
//! (`dir:PATH`), the JSON array a configured command prints
//! (`cmd:COMMAND`), the stories of a prd.json (`prd:PATH`), open GitHub
//! issues (`github:FILTER`) or ready beads (`beads:`). Every source gives
//! the same item shape; an item's id is stable while the item itself is
//! unchanged, so a source read again (items are added while a backlog is
//! drained) names the same work the same way. An item may depend on others
//! (`after`), checked when the source is read ([`after::check`]).

pub(crate) mod after;
pub(crate) mod prd;
pub(crate) mod trackers;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use ralph_core::files::{self, Bounded};
use ralph_core::fnv::Fnv;
use ralph_core::observe::plan;
use ralph_core::process::group::{self, Collected, GroupChild, Lifetime};

/// Largest plan file or item file read.
pub(crate) const MAX_ITEM_FILE_BYTES: u64 = 1024 * 1024;
/// Most items a source may hold; past it the source is refused.
pub(crate) const MAX_ITEMS: usize = 10_000;
/// How long a `cmd:` source may take.
pub(crate) const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest output of a `cmd:` source read.
pub(crate) const MAX_COMMAND_OUTPUT: usize = 16 * 1024 * 1024;

/// One piece of work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    /// Stable while the item is unchanged: a plan item's is made from its
    /// text, a folder item's is its file name, a command's is its own.
    pub(crate) id: String,
    /// One line that names it.
    pub(crate) title: String,
    /// What the agent is told of it beyond the title (may be empty).
    pub(crate) body: String,
    /// The ids of the items it depends on that its source does not record
    /// as done yet: it is claimable only once each of them landed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) after: Vec<String>,
    /// Who wrote it, where the source says (a GitHub issue's author's
    /// login): its text is their input, not the person's instruction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) author: Option<String>,
}

impl Item {
    /// A name for the item's folder and branch: its id when that is made of
    /// letters, digits, `-` and `_` (at most 64), else `item-` and a hash
    /// of the id, so that no id can name a path or an invalid ref.
    pub(crate) fn slug(&self) -> String {
        slug_of(&self.id)
    }
}

/// The slug of the item whose id is `id` ([`Item::slug`]): what names its
/// loop's folder (`runtime/queue/<slug>/`) for one who knows only the id
/// (`RALPH_QUEUE_ITEM`, in the item's client).
pub(crate) fn slug_of(id: &str) -> String {
    if is_plain_id(id) {
        return id.to_string();
    }
    let mut hash = Fnv::new();
    hash.bytes(id.as_bytes());
    format!("item-{:016x}", hash.finish())
}

/// Whether item id `id` may name a folder, a branch or a ref as it is:
/// ASCII letters, digits, `-` and `_`, at most 64, not starting with `-`.
pub(crate) fn is_plain_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && !id.starts_with('-')
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Where a backlog's items come from (`--queue SOURCE`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `plan:PATH`: the unchecked `- [ ]` items of a markdown plan,
    /// outside sections headed Optional, Future or Nice to have.
    Plan(PathBuf),
    /// `dir:PATH`: each regular file of the folder (not hidden) is an item.
    Dir(PathBuf),
    /// `cmd:COMMAND`: a command (`sh -c`) that prints a JSON array of
    /// `{"id", "title", "body"}` objects (and, optionally, `"after"`).
    Command(String),
    /// `prd:PATH`: the stories of a prd.json whose `passes` is false.
    Prd(PathBuf),
    /// `github:FILTER`: the open issues `gh` lists for the filter
    /// (`label=ralph`, `assignee=…`, `milestone=…`, `author=…`,
    /// `trusted=collaborators`, `repo=…`); `trusted=collaborators` keeps
    /// the issues of the repository's owner, its organisation's members
    /// and its invited collaborators (any role, read-only included).
    Github {
        /// The filter as given.
        filter: String,
        /// The repository (`OWNER/NAME`) every call of `gh` names
        /// (`GH_REPO`), so that none reads it from the repository's git
        /// configuration, which the agent can write: the filter's `repo=`,
        /// else asked once at the start ([`Source::pin_repository`]).
        repo: Option<String>,
    },
    /// `beads:[FILTER]`: the issues `bd ready --json` lists.
    Beads(String),
}

/// How a landed item is marked done in the file its source reads, in the
/// same commit as its change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DoneMark {
    /// A plan's `- [ ]` box ticked.
    PlanBox,
    /// A prd.json story's `passes` set to true (and a line added to the
    /// `progress.txt` beside it, when there is one).
    PrdPasses,
}

/// `text` (the file `mark` is for) with item `id` marked done; `None` when
/// it holds no such item not done yet.
pub(crate) fn mark_done(mark: DoneMark, text: &str, id: &str) -> Option<String> {
    match mark {
        DoneMark::PlanBox => tick(text, id),
        DoneMark::PrdPasses => prd::pass(text, id),
    }
}

/// Why a source could not be read, each naming the source and the fix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum QueueError {
    /// The source (`--queue` or `ralph-ctl queue`) has no known kind.
    #[error(
        "the queue source {0:?} says no kind: say where the items are, plan:PATH, dir:PATH or cmd:COMMAND, or a tracker: prd:PATH, github:label=NAME, beads:"
    )]
    UnknownSource(String),
    /// The kind is there, its path or command is not.
    #[error(
        "the queue source {0:?} has nothing after the colon; give the path, the command, or (github:) the filter, e.g. github:label=ralph"
    )]
    Empty(String),
    /// A file or folder could not be read.
    #[error("the queue's {what} {path} cannot be read: {why}")]
    Unreadable {
        /// "plan" or "folder" or "item file".
        what: &'static str,
        /// Where.
        path: String,
        /// The system's words.
        why: String,
    },
    /// A file is larger than [`MAX_ITEM_FILE_BYTES`].
    #[error("the queue's file {0} is larger than 1 MiB; split it")]
    TooLarge(String),
    /// More than [`MAX_ITEMS`] items.
    #[error("the queue {0} holds more than 10000 items; drain part of it first")]
    TooMany(String),
    /// The command could not start, failed, overran, or printed no item array.
    #[error("the queue's command `{command}` {why}")]
    Command {
        /// The command.
        command: String,
        /// What went wrong, and the fix.
        why: String,
    },
    /// A prd.json that is not what prd tools write.
    #[error("the queue's prd.json {path} {why}")]
    Prd {
        /// The file.
        path: String,
        /// What is wrong, and the fix.
        why: String,
    },
    /// A story of a prd.json that is not what prd tools write.
    #[error("the queue's prd.json {path} story {number}: {source}")]
    Story {
        /// The file.
        path: String,
        /// The story's place in `userStories`, from 1.
        number: usize,
        /// What is wrong with it, and the fix.
        source: Box<prd::StoryError>,
    },
    /// A tracker's filter holds a pair ralph does not know.
    #[error("the queue source {given:?} has {pair:?}, which ralph does not read; give {known}")]
    Filter {
        /// The source as given.
        given: String,
        /// The pair.
        pair: String,
        /// The pairs it takes.
        known: String,
    },
    /// `gh` or `bd` is missing, failed, or printed what ralph cannot read.
    #[error("the queue's tracker: `{program}` {why}")]
    Tool {
        /// The tool.
        program: String,
        /// What went wrong, and the fix.
        why: String,
    },
    /// An item depends on an id no item of the backlog has, and the source
    /// does not record it as done.
    #[error(
        "item {item} depends on {missing}, which the queue's source neither lists as an item nor records as done; fix the id or drop the dependency"
    )]
    MissingDependency {
        /// The item.
        item: String,
        /// The id it names.
        missing: String,
    },
    /// A `github:` filter that names a repository and selects nothing in
    /// it: every open issue, from anyone, would go to an agent.
    #[error(
        "the queue source {0:?} names a repository but selects no issues in it, so every open issue, from anyone, would go to an unattended agent; add label=NAME (a label only people with triage rights set), author=LOGIN, assignee=LOGIN, milestone=NAME, or trusted=collaborators (issues by the repository's owner, its organisation's members and its invited collaborators of any role only)"
    )]
    RepositoryAlone(String),
    /// Items depend on each other in a cycle: none of them could start.
    #[error("items depend on each other in a cycle ({}): none of them could ever be worked; break the cycle in the queue's source", .0.join(" → "))]
    DependencyCycle(Vec<String>),
}

impl QueueError {
    /// Whether the source's spelling itself is wrong (a usage error), rather
    /// than what it names.
    pub(crate) fn is_misspelled(&self) -> bool {
        matches!(self, QueueError::UnknownSource(_) | QueueError::Empty(_))
    }
}

impl FromStr for Source {
    type Err = QueueError;

    fn from_str(text: &str) -> Result<Source, QueueError> {
        let (kind, rest) = text
            .split_once(':')
            .ok_or_else(|| QueueError::UnknownSource(text.to_string()))?;
        if kind == "beads" {
            trackers::beads_filter(text, rest)?;
            return Ok(Source::Beads(rest.trim().to_string()));
        }
        if rest.trim().is_empty() {
            return Err(QueueError::Empty(text.to_string()));
        }
        match kind {
            "plan" => Ok(Source::Plan(PathBuf::from(rest))),
            "dir" => Ok(Source::Dir(PathBuf::from(rest))),
            "cmd" => Ok(Source::Command(rest.to_string())),
            "prd" => Ok(Source::Prd(PathBuf::from(rest))),
            "github" => {
                let repo = trackers::github_filter(text, rest)?;
                Ok(Source::Github {
                    filter: rest.trim().to_string(),
                    repo,
                })
            }
            _ => Err(QueueError::UnknownSource(text.to_string())),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Plan(path) => write!(f, "plan:{}", path.display()),
            Source::Dir(path) => write!(f, "dir:{}", path.display()),
            Source::Command(command) => write!(f, "cmd:{command}"),
            Source::Prd(path) => write!(f, "prd:{}", path.display()),
            Source::Github { filter, .. } => write!(f, "github:{filter}"),
            Source::Beads(filter) => write!(f, "beads:{filter}"),
        }
    }
}

/// An item a source's reading left out: its id starts with `-`, which a
/// tracker's tool (bd, gh) would read as an option. Said as a warning line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeftOut {
    /// The item's id.
    pub(crate) id: String,
    /// The source, as given.
    pub(crate) source: String,
}

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "warning: item id {:?} of the queue source {} starts with \"-\", which a tracker's tool (bd, gh) would read as an option: it is left out; rename it in the queue's source",
            self.id, self.source
        )
    }
}

impl Source {
    /// The source's items as they are now, in its order; paths are taken
    /// from `root` unless absolute, and a command (or a tracker's tool)
    /// runs there. Refused when an item depends on an id no item has, or
    /// items depend on each other in a cycle ([`after::check`]).
    pub(crate) fn read(&self, root: &Path) -> Result<Vec<Item>, QueueError> {
        Ok(self.read_leaving_out(root)?.0)
    }

    /// [`Source::read`], and the items it left out, each said by its
    /// [`LeftOut`] (for the caller to name once): an id that starts with
    /// `-`, which a tracker's tool given it would read as an option.
    pub(crate) fn read_leaving_out(
        &self,
        root: &Path,
    ) -> Result<(Vec<Item>, Vec<LeftOut>), QueueError> {
        let mut items = match self {
            Source::Plan(path) => plan_items(&read_small(&root.join(path), "plan")?),
            Source::Dir(path) => dir_items(&root.join(path))?,
            Source::Command(command) => command_items(command, root)?,
            Source::Prd(path) => {
                let file = root.join(path);
                prd::items(&read_small(&file, "prd.json")?, &path.display().to_string())?
            }
            Source::Github { filter, repo } => {
                trackers::github_items(filter, repo.as_deref(), root)?
            }
            Source::Beads(filter) => trackers::beads_items(filter, root)?,
        };
        if items.len() > MAX_ITEMS {
            return Err(QueueError::TooMany(self.to_string()));
        }
        // An id is passed to the tracker's tool (after `--` where it takes
        // one); one that reads as an option is never an item. The others
        // go on.
        let mut left_out = Vec::new();
        items.retain(|item| {
            let dash = item.id.starts_with('-');
            if dash {
                left_out.push(LeftOut {
                    id: item.id.clone(),
                    source: self.to_string(),
                });
            }
            !dash
        });
        after::check(&items)?;
        Ok((items, left_out))
    }

    /// The file the source reads that a landed item is marked done in
    /// (relative to the project unless absolute), and how.
    pub(crate) fn done_mark(&self) -> Option<(&Path, DoneMark)> {
        match self {
            Source::Plan(path) => Some((path, DoneMark::PlanBox)),
            Source::Prd(path) => Some((path, DoneMark::PrdPasses)),
            _ => None,
        }
    }

    /// The file or folder the source reads in the project, which an item's
    /// own change may not touch (ralph marks it itself).
    pub(crate) fn file(&self) -> Option<&Path> {
        match self {
            Source::Plan(path) | Source::Dir(path) | Source::Prd(path) => Some(path),
            _ => None,
        }
    }

    /// A line the commit that lands `item` carries: `Fixes #N` for a
    /// GitHub issue, which closes it once the commit reaches the
    /// repository's default branch.
    pub(crate) fn landing_trailer(&self, item: &Item) -> Option<String> {
        matches!(self, Source::Github { .. }).then(|| trackers::fixes(item))
    }

    /// For a `github:` source without `repo=`: asks `gh` once which
    /// repository the project is (`gh repo view`), before any agent runs,
    /// and names it in every later call. Other sources: nothing to do.
    pub(crate) fn pin_repository(&mut self, root: &Path) -> Result<(), QueueError> {
        if let Source::Github {
            repo: repo @ None, ..
        } = self
        {
            *repo = Some(trackers::github_repository(root)?);
        }
        Ok(())
    }
}

/// A file's text, refused past [`MAX_ITEM_FILE_BYTES`]; never waiting on a
/// FIFO or reading a device (the project's files are the agent's to change).
fn read_small(path: &Path, what: &'static str) -> Result<String, QueueError> {
    let unreadable = |why: String| QueueError::Unreadable {
        what,
        path: path.display().to_string(),
        why,
    };
    match files::read_bounded(path, MAX_ITEM_FILE_BYTES) {
        Ok(Bounded::Bytes(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        Ok(Bounded::TooLarge) => Err(QueueError::TooLarge(path.display().to_string())),
        Ok(Bounded::Missing) => Err(unreadable("it does not exist".into())),
        Err(e) => Err(unreadable(e.to_string())),
    }
}

/// The id of a plan item: `plan-` and 12 hex digits of a hash of its text
/// (spaces collapsed), so editing, adding or removing other lines keeps it;
/// a second item of the same text gets `-2`, a third `-3`.
fn plan_id(text: &str, seen: &mut Vec<String>) -> String {
    let normalized: Vec<&str> = text.split_whitespace().collect();
    let mut hash = Fnv::new();
    hash.bytes(normalized.join(" ").as_bytes());
    let base = format!("plan-{:012x}", hash.finish() >> 16);
    let mut id = base.clone();
    let mut n = 1;
    while seen.contains(&id) {
        n += 1;
        id = format!("{base}-{n}");
    }
    seen.push(id.clone());
    id
}

/// The unchecked required items of a markdown plan, each with the lines
/// indented under it as its body; an indented `after: X` line (X another
/// item's id or text, several separated by commas) says the item depends
/// on X, unless X's box is checked already (done).
pub(crate) fn plan_items(markdown: &str) -> Vec<Item> {
    let mut items = plan_items_as_written(markdown);
    let done = plan::checked(markdown);
    let named: Vec<(String, String)> = items
        .iter()
        .map(|i| (i.id.clone(), i.title.clone()))
        .collect();
    for item in &mut items {
        let mut after = Vec::new();
        for wanted in std::mem::take(&mut item.after) {
            let same = |text: &str| text.split_whitespace().eq(wanted.split_whitespace());
            let found = named
                .iter()
                .find(|(id, title)| *id == wanted || same(title))
                .map(|(id, _)| id.clone());
            match found {
                Some(id) => after.push(id),
                None if done
                    .iter()
                    .any(|text| same(text) || plan_id(text, &mut Vec::new()) == wanted) => {}
                None => after.push(wanted),
            }
        }
        after.dedup();
        item.after = after;
    }
    items
}

/// [`plan_items`] with each `after:` as written, not yet resolved.
fn plan_items_as_written(markdown: &str) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::new();
    let mut seen = Vec::new();
    // The indentation of the item whose body is being read.
    let mut open: Option<usize> = None;
    for (line, unchecked) in plan::boxes(markdown) {
        let indent = line.len() - line.trim_start().len();
        match unchecked {
            Some(text) => {
                let id = plan_id(&text, &mut seen);
                items.push(Item {
                    author: None,
                    id,
                    title: text,
                    body: String::new(),
                    after: Vec::new(),
                });
                open = Some(indent);
            }
            None => match (open, items.last_mut()) {
                (Some(at), Some(item)) if indent > at && !line.trim().is_empty() => {
                    if let Some(named) = after_line(line) {
                        item.after.extend(named);
                    } else {
                        item.body.push_str(line.trim());
                        item.body.push('\n');
                    }
                }
                (Some(_), _) if line.trim().is_empty() => {}
                _ => open = None,
            },
        }
    }
    items
}

/// The items an indented `after: X, Y` line names (any case, a list
/// marker before it allowed); `None` for any other line.
fn after_line(line: &str) -> Option<Vec<String>> {
    let text = line.trim().trim_start_matches(['-', '*']).trim_start();
    let (word, rest) = text.split_once(':')?;
    if !word.trim().eq_ignore_ascii_case("after") {
        return None;
    }
    Some(
        rest.split(',')
            .map(|named| {
                let named = named.trim();
                named
                    .strip_prefix('`')
                    .and_then(|n| n.strip_suffix('`'))
                    .unwrap_or(named)
                    .to_string()
            })
            .filter(|named| !named.is_empty())
            .collect(),
    )
}

/// `markdown` with the box of plan item `id` ticked (`- [ ]` to `- [x]`);
/// `None` when no unchecked item has that id.
pub(crate) fn tick(markdown: &str, id: &str) -> Option<String> {
    let mut seen = Vec::new();
    let mut out = String::with_capacity(markdown.len());
    let mut ticked = false;
    for (line, unchecked) in plan::boxes(markdown) {
        let mut line = line.to_string();
        if let Some(text) = unchecked
            && !ticked
            && plan_id(&text, &mut seen) == id
        {
            line = line.replacen("[ ]", "[x]", 1);
            ticked = true;
        }
        out.push_str(&line);
    }
    ticked.then_some(out)
}

/// One item per regular, not hidden file of `folder`, by name.
fn dir_items(folder: &Path) -> Result<Vec<Item>, QueueError> {
    let entries = std::fs::read_dir(folder).map_err(|e| QueueError::Unreadable {
        what: "folder",
        path: folder.display().to_string(),
        why: e.to_string(),
    })?;
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| !name.starts_with('.'))
        .collect();
    if names.len() > MAX_ITEMS {
        return Err(QueueError::TooMany(format!("dir:{}", folder.display())));
    }
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let text = read_small(&folder.join(&name), "item file")?;
            let title = text
                .lines()
                .map(|l| l.trim().trim_start_matches('#').trim())
                .find(|l| !l.is_empty())
                .unwrap_or(&name)
                .to_string();
            Ok(Item {
                author: None,
                id: name,
                title,
                body: text,
                after: Vec::new(),
            })
        })
        .collect()
}

/// An item as a command prints it: the id may be a number.
#[derive(Deserialize)]
struct PrintedItem {
    id: serde_json::Value,
    title: String,
    #[serde(default)]
    body: String,
    #[serde(default)]
    after: Vec<serde_json::Value>,
}

/// The items a command prints, run with `sh -c` from `root` in a process
/// group of its own, cut off at [`COMMAND_TIMEOUT`].
fn command_items(command: &str, root: &Path) -> Result<Vec<Item>, QueueError> {
    let failed = |why: String| QueueError::Command {
        command: command.to_string(),
        why,
    };
    let mut shell = group::shell(command);
    shell
        .current_dir(root)
        .env_remove("RALPH_ACTIVE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let child = GroupChild::spawn(&mut shell, Lifetime::DiesWithParent)
        .map_err(|e| failed(format!("cannot start: {e}")))?;
    let deadline = Instant::now() + COMMAND_TIMEOUT;
    let bytes = match child.collect_output(deadline, Duration::from_millis(200)) {
        Collected::Exited {
            status,
            output: Some(bytes),
        } if status.success() => bytes,
        Collected::Exited { status, .. } if !status.success() => {
            return Err(failed(format!(
                "failed ({status}); run it by hand to see why"
            )));
        }
        _ => {
            return Err(failed(format!(
                "did not finish within {} s; make it faster or give the items another way",
                COMMAND_TIMEOUT.as_secs()
            )));
        }
    };
    if bytes.len() > MAX_COMMAND_OUTPUT {
        return Err(failed("printed more than 16 MiB".into()));
    }
    let printed: Vec<PrintedItem> = serde_json::from_slice(&bytes).map_err(|e| {
        failed(format!(
            "did not print a JSON array of {{\"id\", \"title\", \"body\"}} objects ({e})"
        ))
    })?;
    let mut items: Vec<Item> = Vec::with_capacity(printed.len());
    for item in printed {
        let id = match item.id {
            serde_json::Value::String(id) if !id.trim().is_empty() => id,
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(failed(format!(
                    "printed an item whose id is {other}; give each item a string or number id"
                )));
            }
        };
        if items.iter().any(|seen| seen.id == id) {
            return Err(failed(format!(
                "printed the id {id:?} twice; ids must be unique"
            )));
        }
        let after = item
            .after
            .iter()
            .map(|d| match d {
                serde_json::Value::String(d) => Ok(d.clone()),
                serde_json::Value::Number(n) => Ok(n.to_string()),
                other => Err(failed(format!(
                    "printed item {id:?} whose `after` holds {other}; list the ids it depends on"
                ))),
            })
            .collect::<Result<_, _>>()?;
        items.push(Item {
            author: None,
            id,
            title: item.title,
            body: item.body,
            after,
        });
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const PLAN: &str = "# Plan\n\
        - [x] the parser\n\
        - [ ] write the user guide\n  \
          covering install and first run\n\
        - [ ] add `--json`\n\
        \n\
        ## Nice to have\n\
        - [ ] emoji output\n";

    #[test]
    fn a_slug_is_the_id_when_it_is_plain_and_a_hash_when_it_could_name_a_path() {
        let slug = |id: &str| {
            Item {
                author: None,
                id: id.into(),
                title: String::new(),
                body: String::new(),
                after: Vec::new(),
            }
            .slug()
        };
        assert_eq!(slug("plan-0123456789ab"), "plan-0123456789ab");
        assert_eq!(slug("42"), "42");
        for odd in [
            "../x",
            "a/b",
            ".lock",
            "-rf",
            "",
            "a b",
            "é",
            &"x".repeat(65),
        ] {
            let made = slug(odd);
            assert!(
                made.starts_with("item-") && made.len() == 21,
                "{odd:?} → {made}"
            );
        }
        assert_ne!(slug("a/b"), slug("a/c"));
    }

    #[test]
    fn sources_are_read_from_their_spelling_and_refused_with_the_fix() {
        assert_eq!("plan:TODO.md".parse(), Ok(Source::Plan("TODO.md".into())));
        assert_eq!("dir:backlog".parse(), Ok(Source::Dir("backlog".into())));
        assert_eq!(
            "cmd:gh issue list --json number,title".parse(),
            Ok(Source::Command("gh issue list --json number,title".into()))
        );
        assert_eq!(
            "github:label=ralph,repo=o/r".parse(),
            Ok(Source::Github {
                filter: "label=ralph,repo=o/r".into(),
                repo: Some("o/r".into())
            })
        );
        for bad in ["TODO.md", "todo:TODO.md"] {
            let error = bad.parse::<Source>().unwrap_err().to_string();
            assert!(
                error.contains("plan:PATH, dir:PATH or cmd:COMMAND, or a tracker: prd:PATH"),
                "{error}"
            );
        }
        let error = "plan: ".parse::<Source>().unwrap_err().to_string();
        assert!(error.contains("nothing after the colon"), "{error}");
    }

    #[test]
    fn a_plan_gives_its_unchecked_required_items_with_their_bodies() {
        let items = plan_items(PLAN);
        let titles: Vec<&str> = items.iter().map(|i| i.title.as_str()).collect();
        assert_eq!(titles, ["write the user guide", "add `--json`"]);
        assert_eq!(items[0].body, "covering install and first run\n");
        assert_eq!(items[1].body, "");
        assert!(items.iter().all(|i| i.id.starts_with("plan-")));
    }

    #[test]
    fn a_plan_item_keeps_its_id_when_other_lines_change() {
        let before = plan_items(PLAN);
        let edited = PLAN
            .replace(
                "- [x] the parser\n",
                "- [x] the parser\n- [ ] a new first item\n",
            )
            .replace(
                "write the user guide\n",
                "write the user guide\n\nSome prose.\n",
            );
        let after = plan_items(&edited);
        let id_of = |items: &[Item], title: &str| {
            items
                .iter()
                .find(|i| i.title == title)
                .map(|i| i.id.clone())
        };
        for title in ["write the user guide", "add `--json`"] {
            assert_eq!(id_of(&before, title), id_of(&after, title), "{title}");
        }
        // The same text twice: two items, two ids.
        let twice = plan_items("- [ ] same\n- [ ] same\n");
        assert_eq!(twice.len(), 2);
        assert_ne!(twice[0].id, twice[1].id);
    }

    #[test]
    fn a_plan_item_depends_on_what_its_after_line_names_unless_it_is_ticked() {
        let plan = "- [x] the parser\n\
            - [ ] write the guide\n  \
              after: add `--json`, the parser\n  \
              covering install\n\
            - [ ] add `--json`\n\
            - [ ] emoji\n  \
              After: write the guide\n";
        let items = plan_items(plan);
        let id_of = |title: &str| items.iter().find(|i| i.title == title).unwrap().id.clone();
        assert_eq!(items[0].after, [id_of("add `--json`")]);
        assert_eq!(items[0].body, "covering install\n");
        assert_eq!(items[2].after, [id_of("write the guide")]);
        // By id too; a name no box has is kept, for the read to refuse.
        let by_id = format!("- [ ] one\n  after: {}\n- [ ] two\n", id_of("add `--json`"));
        let items = plan_items(&by_id);
        assert_eq!(items[0].after.len(), 1);
        let said = after::check(&items).unwrap_err().to_string();
        assert!(said.contains("depends on plan-"), "{said}");
        let cycle = plan_items("- [ ] a\n  after: b\n- [ ] b\n  after: a\n");
        assert!(matches!(
            after::check(&cycle),
            Err(QueueError::DependencyCycle(_))
        ));
    }

    #[test]
    fn ticking_an_item_changes_its_box_alone() {
        let items = plan_items(PLAN);
        let ticked = tick(PLAN, &items[1].id).unwrap();
        assert_eq!(
            ticked,
            PLAN.replace("- [ ] add `--json`", "- [x] add `--json`")
        );
        let left = plan_items(&ticked);
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].id, items[0].id);
        assert_eq!(tick(PLAN, "plan-000000000000"), None);
        // The second of two items of the same text.
        let twice = "- [ ] same\n- [ ] same\n";
        let second = plan_items(twice)[1].id.clone();
        assert_eq!(tick(twice, &second).unwrap(), "- [ ] same\n- [x] same\n");
    }

    #[test]
    fn a_folder_gives_one_item_per_file_by_name() {
        let dir = tempfile::TempDir::new().unwrap();
        std::fs::write(
            dir.path().join("002-docs.md"),
            "# Write the docs\nAll of them.\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("001-fix.md"), "\n\nFix the parser\n").unwrap();
        std::fs::write(dir.path().join(".hidden"), "not an item").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let items = Source::Dir(dir.path().into()).read(Path::new("/")).unwrap();
        let got: Vec<(&str, &str)> = items
            .iter()
            .map(|i| (i.id.as_str(), i.title.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("001-fix.md", "Fix the parser"),
                ("002-docs.md", "Write the docs")
            ]
        );
        assert_eq!(items[1].body, "# Write the docs\nAll of them.\n");
        let missing = Source::Dir(dir.path().join("none")).read(Path::new("/"));
        assert!(matches!(
            missing,
            Err(QueueError::Unreadable { what: "folder", .. })
        ));
        // A FIFO is named, not waited on: as a plan, and in a folder (skipped).
        #[cfg(unix)]
        {
            let fifo = dir.path().join("003-pipe");
            let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
            assert!(made.success());
            let said = Source::Plan(fifo)
                .read(Path::new("/"))
                .unwrap_err()
                .to_string();
            assert!(said.contains("not a regular file"), "{said}");
            let items = Source::Dir(dir.path().into()).read(Path::new("/")).unwrap();
            assert_eq!(items.len(), 2);
        }
    }

    #[test]
    fn a_command_prints_the_items_or_is_refused_saying_why() {
        let dir = tempfile::TempDir::new().unwrap();
        let read = |command: &str| Source::Command(command.into()).read(dir.path());
        let items = read(r#"echo '[{"id": 7, "title": "Fix it", "body": "details"}, {"id": "T-2", "title": "Docs"}]'"#)
            .unwrap();
        assert_eq!(
            items[0],
            Item {
                author: None,
                id: "7".into(),
                title: "Fix it".into(),
                body: "details".into(),
                after: Vec::new(),
            }
        );
        assert_eq!(items[1].id, "T-2");
        assert_eq!(items[1].body, "");
        // An item may say what it depends on, by id.
        let ordered =
            read(r#"echo '[{"id": 1, "title": "a"}, {"id": "b", "title": "b", "after": [1]}]'"#)
                .unwrap();
        assert_eq!(ordered[1].after, ["1"]);
        let said = read(r#"echo '[{"id": "b", "title": "b", "after": ["a"]}]'"#)
            .unwrap_err()
            .to_string();
        assert!(said.contains("item b depends on a"), "{said}");
        for (command, said) in [
            ("exit 3", "failed (exit status: 3)"),
            ("echo not json", "did not print a JSON array"),
            (r#"echo '[{"id": null, "title": "x"}]'"#, "whose id is null"),
            (
                r#"echo '[{"id": 1, "title": "a"}, {"id": 1, "title": "b"}]'"#,
                "printed the id \"1\" twice",
            ),
        ] {
            let error = read(command).unwrap_err().to_string();
            assert!(
                error.contains(said) && error.contains(command),
                "{command}: {error}"
            );
        }
    }
}
