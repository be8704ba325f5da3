//! Stand-ins for the issue trackers' command-line tools, `gh` (GitHub CLI)
//! and `bd` (beads), put first on `PATH`: each records every call (its
//! arguments) and answers with JSON in the shapes the real tools print
//! (`gh issue list --json number,title,body,labels`, `gh issue view
//! --json number,state`, `bd ready --json`), from files a test writes.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// An issue with its author: `(number, title, body, labels, login,
/// author_association)`.
pub type Issue<'a> = (u64, &'a str, &'a str, &'a [&'a str], &'a str, &'a str);

/// A folder holding fake `gh` and `bd`, their answers and their calls.
pub struct FakeTrackers {
    dir: PathBuf,
}

/// `gh`: `repo view` names the repository (`owner/repo`); any other call
/// fails as gh does where no git remote names a GitHub repository, unless
/// `GH_REPO` names one (recorded beside the call); `issue list` prints
/// `issues.json`; `issue view N` prints `issue-N.json` or fails as gh does
/// for an unknown issue; `api …` prints `api.json` (the REST API's issues,
/// with `author_association`, one array a page as `--paginate` prints
/// them), or with `--jq` and the one filter ralph gives (`.[] | [.number,
/// .author_association] | @tsv`) its lines, as gh's jq prints them (any
/// other filter fails); `pr create` prints a new pull request's address.
/// With a file `logged-out`, every call fails as gh does without a login.
const GH: &str = r#"#!/bin/sh
here=$(dirname "$0")
call="$here/calls/gh-$(date +%s%N)-$$"
printf '%s\0' "$@" > "$call"
if [ -e "$here/logged-out" ]; then
  echo "To get started with GitHub CLI, please run:  gh auth login" >&2
  exit 4
fi
if [ "$1 $2" = "repo view" ]; then
  echo '{"nameWithOwner":"owner/repo"}'
  exit 0
fi
# Without a repository named, gh finds none here (no GitHub remote).
if [ -z "$GH_REPO" ]; then
  echo "none of the git remotes configured for this repository point to a known GitHub host. To tell gh about a new GitHub host, please use \`gh auth login\`" >&2
  exit 1
fi
echo "$GH_REPO" > "$call.repo"
case "$1 $2" in
  "issue list") cat "$here/issues.json" ;;
  "issue view")
    eval "n=\${$#}"
    if [ -e "$here/issue-$n.json" ]; then cat "$here/issue-$n.json"
    else echo "GraphQL: Could not resolve to an issue or pull request with the number of $n. (repository.issue)" >&2; exit 1; fi ;;
  "api "*)
    jq=""
    prev=""
    for a in "$@"; do
      [ "$prev" = "--jq" ] && jq="$a"
      prev="$a"
    done
    if [ -z "$jq" ]; then cat "$here/api.json"; exit 0; fi
    if [ "$jq" != '.[] | [.number, .author_association] | @tsv' ]; then
      echo "the fake gh knows no --jq $jq" >&2; exit 1
    fi
    python3 -c '
import json, sys
text = open(sys.argv[1]).read()
decoder, at = json.JSONDecoder(), 0
while at < len(text):
    page, at = decoder.raw_decode(text, at)
    for issue in page:
        print("%s\t%s" % (issue["number"], issue["author_association"]))
    while at < len(text) and text[at].isspace():
        at += 1
' "$here/api.json" ;;
  "pr create")
    n=$(ls "$here/calls" | wc -l)
    echo "https://github.com/owner/repo/pull/$n" ;;
  *) echo "unknown command \"$1\" for \"gh\"" >&2; exit 1 ;;
esac
"#;

/// `bd`: `ready --json` prints `ready.json` less the beads closed since,
/// and the beads of `blocked.json` whose blockers are all closed (as bd
/// lists an issue once its blockers are closed); `close ID` closes it.
const BD: &str = r#"#!/bin/sh
here=$(dirname "$0")
call="$here/calls/bd-$(date +%s%N)-$$"
printf '%s\0' "$@" > "$call"
case "$1" in
  ready)
    if [ ! -s "$here/closed" ] && [ ! -s "$here/blocked.json" ]; then
      cat "$here/ready.json"; exit 0
    fi
    touch "$here/closed" "$here/blocked.json"
    python3 -c '
import json, sys
ready, closed, blocked = sys.argv[1:4]
closed = open(closed).read().split()
text = open(blocked).read().strip()
beads = json.load(open(ready)) + [b for b, by in (json.loads(text) if text else []) if all(c in closed for c in by)]
print(json.dumps([b for b in beads if b["id"] not in closed], indent=2))
' "$here/ready.json" "$here/closed" "$here/blocked.json" ;;
  close) eval "id=\${$#}"; echo "$id" >> "$here/closed"; echo "✓ Closed $id" ;;
  *) echo "Error: unknown command \"$1\" for \"bd\"" >&2; exit 1 ;;
esac
"#;

impl FakeTrackers {
    /// The fakes in `dir` (made), answering nothing yet.
    pub fn new(dir: &Path) -> FakeTrackers {
        std::fs::create_dir_all(dir.join("calls")).expect("make the fakes' folder");
        for (name, script) in [("gh", GH), ("bd", BD)] {
            let path = dir.join(name);
            std::fs::write(&path, script).expect("write a fake");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
                    .expect("make a fake runnable");
            }
        }
        FakeTrackers {
            dir: dir.to_path_buf(),
        }
    }

    /// `PATH` with the fakes first.
    pub fn path_env(&self) -> String {
        format!(
            "{}:{}",
            self.dir.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    /// Open issues as `gh issue list --json number,title,body,labels,author`
    /// prints them: `(number, title, body, labels)`, each by the
    /// repository's owner.
    pub fn issues(&self, issues: &[(u64, &str, &str, &[&str])]) {
        let by: Vec<Issue> = issues
            .iter()
            .map(|&(number, title, body, labels)| {
                (number, title, body, labels, "maintainer", "OWNER")
            })
            .collect();
        self.issues_by(&by);
    }

    /// Open issues with their authors: `(number, title, body, labels,
    /// login, author_association)`, as `gh issue list` prints them and as
    /// the REST API's `repos/OWNER/NAME/issues` gives them (`gh api`).
    pub fn issues_by(&self, issues: &[Issue]) {
        let printed: Vec<Value> = issues
            .iter()
            .map(|(number, title, body, labels, login, _)| {
                serde_json::json!({
                    "author": {"id": format!("U_kgDO{login}"), "is_bot": false, "login": login, "name": ""},
                    "body": body,
                    "labels": labels.iter().map(|name| serde_json::json!({
                        "id": format!("LA_kwDO{number}{name}"),
                        "name": name,
                        "description": "",
                        "color": "ededed",
                    })).collect::<Vec<_>>(),
                    "number": number,
                    "title": title,
                })
            })
            .collect();
        self.write(
            "issues.json",
            &serde_json::to_string_pretty(&printed).unwrap(),
        );
        // The REST API's pages, as `gh api --paginate` prints them: one
        // array after another.
        let rest: Vec<Value> = issues
            .iter()
            .map(|(number, title, body, _, login, association)| {
                serde_json::json!({
                    "number": number, "title": title, "body": body, "state": "open",
                    "user": {"login": login, "type": "User"},
                    "author_association": association,
                })
            })
            .collect();
        let pages: String = rest
            .chunks(2)
            .map(|page| serde_json::to_string(page).unwrap())
            .collect();
        self.write("api.json", if pages.is_empty() { "[]" } else { &pages });
    }

    /// Issue `number`'s state, as `gh issue view N --json number,state` prints it.
    pub fn issue_state(&self, number: u64, state: &str) {
        let printed = serde_json::json!({"number": number, "state": state});
        self.write(&format!("issue-{number}.json"), &printed.to_string());
    }

    /// What `bd ready --json` prints (beads' issues, as given).
    pub fn ready(&self, beads: &Value) {
        self.write("ready.json", &serde_json::to_string_pretty(beads).unwrap());
    }

    /// Beads `bd ready` lists only once every blocker of theirs is
    /// closed: `(bead, blockers)`.
    pub fn blocked(&self, beads: &[(Value, &[&str])]) {
        let pairs: Vec<Value> = beads
            .iter()
            .map(|(bead, by)| serde_json::json!([bead, by]))
            .collect();
        self.write("blocked.json", &Value::Array(pairs).to_string());
    }

    /// Makes `gh` answer every call as it does without a login.
    pub fn log_out(&self) {
        self.write("logged-out", "");
    }

    /// Every call of `tool` so far, in order, each its arguments.
    pub fn calls(&self, tool: &str) -> Vec<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(self.dir.join("calls"))
            .expect("read the calls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(&format!("{tool}-")) && !name.ends_with(".repo"))
            .collect();
        names.sort_by_key(|name| {
            let stamp = name.split('-').nth(1).unwrap_or_default();
            stamp.parse::<u128>().unwrap_or(0)
        });
        names
            .iter()
            .map(|name| {
                let bytes = std::fs::read(self.dir.join("calls").join(name)).expect("read a call");
                String::from_utf8_lossy(&bytes)
                    .split('\0')
                    .filter(|a| !a.is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .collect()
    }

    /// The calls of `tool` so far whose arguments begin with `command`
    /// (`["pr", "create"]`), in order, each its arguments.
    pub fn calls_to(&self, tool: &str, command: &[&str]) -> Vec<Vec<String>> {
        self.calls(tool)
            .into_iter()
            .filter(|call| {
                call.len() >= command.len() && call.iter().zip(command).all(|(a, b)| a == b)
            })
            .collect()
    }

    /// The `GH_REPO` each `gh` call that needed a repository ran with.
    pub fn gh_repositories(&self) -> Vec<String> {
        std::fs::read_dir(self.dir.join("calls"))
            .expect("read the calls")
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".repo"))
            .map(|e| {
                std::fs::read_to_string(e.path())
                    .unwrap()
                    .trim()
                    .to_string()
            })
            .collect()
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.dir.join(name), text).expect("write a fake's answer");
    }
}

/// A prd.json as snarktank/ralph's prd skill writes it: four stories,
/// none passing yet; the third (among the first by priority) depends on
/// the first, which comes last by priority, so a queue that ignored the
/// order would take the dependent before its dependency.
pub const PRD_JSON: &str = r#"{
  "project": "Greeter",
  "branchName": "ralph/greeter",
  "description": "Greeter - files that greet",
  "userStories": [
    {
      "id": "US-001",
      "title": "Add hello.txt",
      "description": "As a user, I want a hello file.",
      "acceptanceCriteria": [
        "hello.txt holds hello",
        "Tests pass"
      ],
      "priority": 3,
      "passes": false,
      "notes": ""
    },
    {
      "id": "US-002",
      "title": "Add bye.txt",
      "description": "As a user, I want a bye file.",
      "acceptanceCriteria": [
        "bye.txt holds bye"
      ],
      "priority": 1,
      "passes": false,
      "notes": ""
    },
    {
      "id": "US-003",
      "title": "Add again.txt",
      "description": "As a user, I want again.txt, made after hello.txt.",
      "acceptanceCriteria": [
        "again.txt holds again"
      ],
      "priority": 1,
      "passes": false,
      "notes": "Needs hello.txt first",
      "dependencies": ["US-001"]
    },
    {
      "id": "US-004",
      "title": "Add welcome.txt",
      "description": "As a user, I want a welcome file.",
      "acceptanceCriteria": [
        "welcome.txt holds welcome"
      ],
      "priority": 2,
      "passes": false,
      "notes": ""
    }
  ]
}
"#;
