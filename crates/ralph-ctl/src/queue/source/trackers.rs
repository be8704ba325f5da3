//! Backlogs kept in an issue tracker, read through its own command-line
//! tool: `github:FILTER` (open issues, `gh issue list --json`) and
//! `beads:[FILTER]` (`bd ready --json`: the issues whose blockers are
//! closed). What each tool prints is read as its documented JSON; what
//! ralph cannot read is named, never guessed. The same tools close the
//! loop: a landed bead is closed (`bd close`), and a finished issue's
//! branch becomes a pull request (`gh pr create`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::{Item, QueueError, after};
use ralph_core::process::group::{Collected, GroupChild, Lifetime};

/// How long one call of `gh` or `bd` may take.
pub(crate) const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest output of one call read.
const MAX_TOOL_OUTPUT: usize = 16 * 1024 * 1024;
/// Most issues asked of `gh` at once (`--limit`).
const GITHUB_LIMIT: &str = "1000";

/// The `gh` options a `github:` filter's `key=value` pairs stand for
/// (`trusted=` is ralph's own, [`TRUSTED`]).
const GITHUB_KEYS: [(&str, &str); 6] = [
    ("label", "--label"),
    ("assignee", "--assignee"),
    ("milestone", "--milestone"),
    ("author", "--author"),
    ("trusted", TRUSTED),
    ("repo", "--repo"),
];

/// `trusted=collaborators`: only issues whose author is the repository's
/// owner, a member of its organisation or a collaborator invited to it,
/// as GitHub's `author_association` says. That is no check of write
/// access: a member may have read access only, and a collaborator any
/// role, read included.
const TRUSTED: &str = "trusted";

/// The `author_association` values `trusted=collaborators` keeps: the
/// repository's owner, its organisation's members (any member) and its
/// invited collaborators (any role).
const TRUSTED_ASSOCIATIONS: [&str; 3] = ["OWNER", "MEMBER", "COLLABORATOR"];

/// The `bd ready` options a `beads:` filter's pairs stand for.
const BEADS_KEYS: [(&str, &str); 2] = [("assignee", "--assignee"), ("priority", "--priority")];

/// A filter's `key=value,key=value` pairs as the tool's options, refused
/// when a key is not one of `keys` (or a pair has no `=`).
fn options(source: &str, filter: &str, keys: &[(&str, &str)]) -> Result<Vec<String>, QueueError> {
    let mut args = Vec::new();
    for pair in filter.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let known = pair
            .split_once('=')
            .and_then(|(key, value)| Some((keys.iter().find(|(k, _)| *k == key.trim())?, value)));
        match known {
            Some(((_, option), value)) if !value.trim().is_empty() => {
                args.push(option.to_string());
                args.push(value.trim().to_string());
            }
            _ => {
                return Err(QueueError::Filter {
                    given: source.to_string(),
                    pair: pair.to_string(),
                    known: keys
                        .iter()
                        .map(|(k, _)| format!("{k}=…"))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
    }
    Ok(args)
}

/// Checks a `github:` filter (at least one pair, each known); the
/// repository its `repo=` names, if any.
pub(super) fn github_filter(source: &str, filter: &str) -> Result<Option<String>, QueueError> {
    let args = options(source, filter, &GITHUB_KEYS)?;
    if args.is_empty() {
        return Err(QueueError::Empty(source.to_string()));
    }
    for pair in args.chunks(2) {
        if pair[0] == TRUSTED && pair[1] != "collaborators" {
            return Err(QueueError::Filter {
                given: source.to_string(),
                pair: format!("trusted={}", pair[1]),
                known: "trusted=collaborators".into(),
            });
        }
    }
    // A repository alone selects every open issue, from anyone.
    if args.chunks(2).all(|pair| pair[0] == "--repo") {
        return Err(QueueError::RepositoryAlone(source.to_string()));
    }
    Ok(args
        .chunks(2)
        .find(|pair| pair[0] == "--repo")
        .map(|pair| pair[1].clone()))
}

/// The repository `OWNER/NAME` of the project at `root`, as `gh repo view`
/// finds it (from the repository's remotes, read now, at the start).
pub(super) fn github_repository(root: &Path) -> Result<String, QueueError> {
    let args: Vec<String> = ["repo", "view", "--json", "nameWithOwner"]
        .map(String::from)
        .to_vec();
    let printed = run("gh", &args, root, None)?;
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Repository {
        name_with_owner: String,
    }
    let repository: Repository = serde_json::from_slice(&printed).map_err(|e| {
        unreadable(
            "gh",
            &args,
            &printed,
            &format!("a repository with its `nameWithOwner` ({e})"),
        )
    })?;
    Ok(repository.name_with_owner)
}

/// Checks a `beads:` filter (may be empty: every ready issue).
pub(super) fn beads_filter(source: &str, filter: &str) -> Result<(), QueueError> {
    options(source, filter, &BEADS_KEYS).map(|_| ())
}

/// An issue as `gh issue list --json number,title,body,labels,author`
/// prints it.
#[derive(Deserialize)]
struct GithubIssue {
    number: u64,
    title: String,
    #[serde(default)]
    body: Option<String>,
    /// `null` for an account that was deleted.
    #[serde(default)]
    author: Option<GithubUser>,
}

/// An account as gh prints it (`author`).
#[derive(Deserialize)]
struct GithubUser {
    login: String,
}

/// An issue as `gh issue view N --json number,state` prints it.
#[derive(Deserialize)]
struct GithubState {
    state: String,
}

/// The open issues `filter` selects, oldest first (the order they were
/// filed), each depending on the issues its body says it depends on that
/// are still open.
pub(super) fn github_items(
    filter: &str,
    repo: Option<&str>,
    root: &Path,
) -> Result<Vec<Item>, QueueError> {
    let source = format!("github:{filter}");
    let selection = options(&source, filter, &GITHUB_KEYS)?;
    let trusted_only = selection.chunks(2).any(|pair| pair[0] == TRUSTED);
    let mut args: Vec<String> = ["issue", "list", "--state", "open", "--limit", GITHUB_LIMIT]
        .map(String::from)
        .to_vec();
    for pair in selection.chunks(2).filter(|pair| pair[0] != TRUSTED) {
        args.extend(pair.iter().cloned());
    }
    args.extend([
        "--json".to_string(),
        "number,title,body,labels,author".to_string(),
    ]);
    let printed = run("gh", &args, root, repo)?;
    let mut issues: Vec<GithubIssue> = serde_json::from_slice(&printed).map_err(|e| {
        unreadable(
            "gh",
            &args,
            &printed,
            &format!("an array of issues with `number` and `title` ({e})"),
        )
    })?;
    if trusted_only {
        let trusted = trusted_issues(repo, root)?;
        issues.retain(|i| trusted.contains(&i.number));
    }
    issues.sort_by_key(|i| i.number);
    let open: Vec<String> = issues.iter().map(|i| i.number.to_string()).collect();
    let mut closed: Vec<String> = Vec::new();
    let mut items = Vec::with_capacity(issues.len());
    for issue in issues {
        let body = issue.body.unwrap_or_default();
        let mut waits_on = Vec::new();
        for number in after::issue_numbers_depended_on(&body) {
            if !open.contains(&number)
                && (closed.contains(&number) || is_closed(&number, repo, root)?)
            {
                closed.push(number);
                continue;
            }
            waits_on.push(number);
        }
        items.push(Item {
            id: issue.number.to_string(),
            title: issue.title,
            body,
            after: waits_on,
            author: issue.author.map(|a| a.login),
        });
    }
    Ok(items)
}

/// The numbers of the repository's open issues whose author is its owner,
/// an organisation member or an invited collaborator ([`TRUSTED_ASSOCIATIONS`]),
/// from GitHub's REST API, page by page (`gh api --paginate`), each issue
/// cut by gh's jq to its number and association (`--jq`, a line each,
/// tab-separated), so a big repository's issues are never read whole.
fn trusted_issues(repo: Option<&str>, root: &Path) -> Result<Vec<u64>, QueueError> {
    let args: Vec<String> = [
        "api",
        "--paginate",
        "--jq",
        ASSOCIATIONS_JQ,
        "repos/{owner}/{repo}/issues?state=open&per_page=100",
    ]
    .map(String::from)
    .to_vec();
    let printed = run("gh", &args, root, repo)?;
    let text = String::from_utf8_lossy(&printed);
    let mut trusted = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let parsed = line.split_once('\t').and_then(|(number, association)| {
            Some((number.trim().parse::<u64>().ok()?, association.trim()))
        });
        let Some((number, association)) = parsed else {
            return Err(unreadable(
                "gh",
                &args,
                &printed,
                &format!(
                    "lines of an issue's number and `author_association`, tab-separated ({line:?})"
                ),
            ));
        };
        if TRUSTED_ASSOCIATIONS.contains(&association) {
            trusted.push(number);
        }
    }
    Ok(trusted)
}

/// gh's jq filter for [`trusted_issues`]: each issue of a page as its
/// number and its author's association, tab-separated.
const ASSOCIATIONS_JQ: &str = ".[] | [.number, .author_association] | @tsv";

/// Whether issue `number` is closed (`gh issue view`); an issue `gh`
/// cannot find is not (the backlog is then refused, naming it).
fn is_closed(number: &str, repo: Option<&str>, root: &Path) -> Result<bool, QueueError> {
    let args: Vec<String> = ["issue", "view", "--json", "number,state", "--", number]
        .map(String::from)
        .to_vec();
    let Ok(printed) = run("gh", &args, root, repo) else {
        return Ok(false);
    };
    let issue: GithubState = serde_json::from_slice(&printed).map_err(|e| {
        unreadable(
            "gh",
            &args,
            &printed,
            &format!("an issue with its `state` ({e})"),
        )
    })?;
    Ok(issue.state.eq_ignore_ascii_case("closed"))
}

/// Opens a pull request of `branch` (pushed already) onto `base` for
/// issue `item`, its body saying `Fixes #N`; `gh`'s answer (the
/// request's address).
pub(crate) fn open_pull_request(
    repo: Option<&str>,
    root: &Path,
    base: &str,
    branch: &str,
    item: &Item,
) -> Result<String, QueueError> {
    let args: Vec<String> = vec![
        "pr".into(),
        "create".into(),
        "--base".into(),
        base.into(),
        "--head".into(),
        branch.into(),
        "--title".into(),
        item.title.clone(),
        "--body".into(),
        format!(
            "{}\n\nWorked by ralph's queue on branch {branch}.",
            fixes(item)
        ),
    ];
    let printed = run("gh", &args, root, repo)?;
    Ok(String::from_utf8_lossy(&printed).trim().to_string())
}

/// The line that closes issue `item` when the commit that carries it
/// reaches the repository's default branch.
pub(crate) fn fixes(item: &Item) -> String {
    format!("Fixes #{}", item.id)
}

/// An issue as `bd ready --json` prints it (beads' `Issue`).
#[derive(Deserialize)]
struct Bead {
    id: String,
    title: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    design: Option<String>,
    #[serde(default)]
    acceptance_criteria: Option<String>,
}

/// The ready issues of the beads database in `root` (`bd ready --json`),
/// in bd's order; bd lists no issue whose blockers are open, so none
/// depends on another here.
pub(super) fn beads_items(filter: &str, root: &Path) -> Result<Vec<Item>, QueueError> {
    let source = format!("beads:{filter}");
    let mut args = vec!["ready".to_string(), "--json".to_string()];
    args.extend(options(&source, filter, &BEADS_KEYS)?);
    let printed = run("bd", &args, root, None)?;
    let beads: Option<Vec<Bead>> = serde_json::from_slice(&printed).map_err(|e| {
        unreadable(
            "bd",
            &args,
            &printed,
            &format!("an array of issues with a string `id` and `title` ({e})"),
        )
    })?;
    Ok(beads
        .unwrap_or_default()
        .into_iter()
        .map(|bead| {
            let mut body = String::new();
            for (heading, text) in [
                ("", bead.description),
                ("Design", bead.design),
                ("Acceptance criteria", bead.acceptance_criteria),
            ] {
                let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
                    continue;
                };
                if !body.is_empty() {
                    body.push('\n');
                }
                if !heading.is_empty() {
                    body.push_str(&format!("{heading}:\n"));
                }
                body.push_str(text.trim());
                body.push('\n');
            }
            Item {
                author: None,
                id: bead.id,
                title: bead.title,
                body,
                after: Vec::new(),
            }
        })
        .collect())
}

/// Closes bead `id` (`bd close`), naming the commit that landed it.
pub(crate) fn close_bead(root: &Path, id: &str, commit: &str) -> Result<(), QueueError> {
    let reason = format!("Landed in {commit} by ralph's merge queue");
    // The id after `--`: one the agent wrote (`--db=…`) is never an option.
    let args: Vec<String> = vec![
        "close".into(),
        "--reason".into(),
        reason,
        "--".into(),
        id.into(),
    ];
    run("bd", &args, root, None).map(|_| ())
}

/// What a tool printed that ralph cannot read, named with what was expected.
fn unreadable(program: &str, args: &[String], printed: &[u8], expected: &str) -> QueueError {
    let shown: String = String::from_utf8_lossy(printed).chars().take(120).collect();
    QueueError::Tool {
        program: program.to_string(),
        why: format!(
            "`{program} {}` printed {shown:?}, and ralph reads {expected}; is `{program}` the tool \
             ralph expects, in a version that prints that?",
            args.join(" ")
        ),
    }
}

/// Runs `program` with `args` in `root` in a process group of its own, cut
/// off at [`TOOL_TIMEOUT`], naming the GitHub repository `repo` (`GH_REPO`)
/// when given: what it printed, or why it failed, naming the tool missing,
/// or what it said on stderr (not logged in, say).
fn run(
    program: &str,
    args: &[String],
    root: &Path,
    repo: Option<&str>,
) -> Result<Vec<u8>, QueueError> {
    let failed = |why: String| QueueError::Tool {
        program: program.to_string(),
        why,
    };
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(root)
        .env_remove("RALPH_ACTIVE")
        // Never a prompt, a pager or colour: the output is read.
        .env("GH_PROMPT_DISABLED", "1")
        .env("GH_PAGER", "cat")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(repo) = repo {
        command.env("GH_REPO", repo);
    }
    let mut child = match GroupChild::spawn(&mut command, Lifetime::DiesWithParent) {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(failed(format!(
                "is not on PATH: install it ({}), or give the items another way",
                match program {
                    "gh" => "GitHub CLI, https://cli.github.com, then `gh auth login`",
                    "bd" => "beads, https://github.com/steveyegge/beads",
                    _ => "its vendor's",
                }
            )));
        }
        Err(e) => return Err(failed(format!("cannot start: {e}"))),
    };
    // stderr read beside stdout, so that neither fills its pipe.
    let (sent, said) = mpsc::channel::<Vec<u8>>();
    if let Some(stderr) = child.child().stderr.take() {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.take(64 * 1024).read_to_end(&mut bytes);
            let _ = sent.send(bytes);
        });
    }
    let collected = child.collect_output(Instant::now() + TOOL_TIMEOUT, Duration::from_millis(200));
    let stderr = said
        .recv_timeout(Duration::from_secs(1))
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let shown = format!("`{program} {}`", args.join(" "));
    match collected {
        Collected::Exited {
            status,
            output: Some(bytes),
        } if status.success() => {
            if bytes.len() > MAX_TOOL_OUTPUT {
                return Err(failed(format!("{shown} printed more than 16 MiB")));
            }
            Ok(bytes)
        }
        Collected::Exited { status, .. } if !status.success() => {
            let hint = match program {
                "gh" => " (is gh logged in? `gh auth status` says)",
                "bd" => " (is there a beads database here? `bd init` makes one)",
                _ => "",
            };
            Err(failed(format!(
                "{shown} failed ({status}){hint}: {}",
                if stderr.is_empty() {
                    "it said nothing"
                } else {
                    &stderr
                }
            )))
        }
        _ => Err(failed(format!(
            "{shown} did not finish within {} s",
            TOOL_TIMEOUT.as_secs()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_the_tools_options_and_unknown_keys_are_refused() {
        assert_eq!(
            options(
                "github:label=ralph,repo=o/r",
                "label=ralph,repo=o/r",
                &GITHUB_KEYS
            )
            .unwrap(),
            ["--label", "ralph", "--repo", "o/r"]
        );
        let said = options("github:lable=x", "lable=x", &GITHUB_KEYS)
            .unwrap_err()
            .to_string();
        assert!(
            said.contains("lable=x") && said.contains("label=…"),
            "{said}"
        );
        assert!(beads_filter("beads:", "").is_ok());
        assert!(github_filter("github:", "").is_err());
        // A repository alone selects every open issue, from anyone.
        let said = github_filter("github:repo=o/r", "repo=o/r")
            .unwrap_err()
            .to_string();
        assert!(said.contains("trusted=collaborators"), "{said}");
        assert_eq!(
            github_filter(
                "github:repo=o/r,trusted=collaborators",
                "repo=o/r,trusted=collaborators"
            ),
            Ok(Some("o/r".into()))
        );
        assert!(github_filter("github:trusted=everyone", "trusted=everyone").is_err());
    }

    #[test]
    fn a_tool_not_on_path_is_named_with_the_fix() {
        let dir = tempfile::TempDir::new().unwrap();
        let said = run("ralph-no-such-tool", &[], dir.path(), None)
            .unwrap_err()
            .to_string();
        assert!(said.contains("is not on PATH"), "{said}");
    }
}
