//! `prd:PATH`: the `userStories` of a prd.json as the most used Ralph loop
//! (snarktank/ralph and its forks) writes it: each story an `id`, `title`,
//! `description`, `acceptanceCriteria`, `priority`, `passes` and `notes`,
//! and in several forks `dependencies`. The stories whose `passes` is not
//! true are the items, by `priority` (1 first) then file order. A landed
//! story's `passes` is set to true by [`pass`], which changes those five
//! bytes and nothing else of the file, and a `progress.txt` beside it gets
//! a line ([`progress_line`]).

use serde_json::Value;

use super::{Item, QueueError};

/// The file beside a prd.json that the loop appends what it did to.
pub(crate) const PROGRESS_FILE_NAME: &str = "progress.txt";

/// A story's fields as ralph reads them.
struct Story {
    id: String,
    title: String,
    body: String,
    priority: Option<f64>,
    passes: bool,
    dependencies: Vec<String>,
}

/// The stories of prd.json `text` (read from `path`, which errors name)
/// not yet passing, by priority then file order, each depending on the
/// stories of its `dependencies` that do not pass yet.
pub(super) fn items(text: &str, path: &str) -> Result<Vec<Item>, QueueError> {
    let bad = |why: String| QueueError::Prd {
        path: path.to_string(),
        why,
    };
    let document: Value = serde_json::from_str(text).map_err(|e| {
        bad(format!(
            "is not JSON ({e}); fix it or write it again with your prd tool"
        ))
    })?;
    let Some(stories) = document.get("userStories").and_then(Value::as_array) else {
        return Err(bad(
            "has no `userStories` array; a prd.json lists its stories there".into(),
        ));
    };
    let mut read: Vec<Story> = Vec::with_capacity(stories.len());
    for (n, story) in stories.iter().enumerate() {
        let story = self::story(story).map_err(|source| QueueError::Story {
            path: path.to_string(),
            number: n + 1,
            source: Box::new(source),
        })?;
        if read.iter().any(|seen| seen.id == story.id) {
            return Err(bad(format!(
                "has the story id {:?} twice; ids must be unique",
                story.id
            )));
        }
        read.push(story);
    }
    let passing: Vec<&str> = read
        .iter()
        .filter(|s| s.passes)
        .map(|s| s.id.as_str())
        .collect();
    let mut open: Vec<&Story> = read.iter().filter(|s| !s.passes).collect();
    // Stable: equal priorities keep the file's order; none given, last.
    open.sort_by(|a, b| {
        let key = |s: &Story| s.priority.unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    Ok(open
        .into_iter()
        .map(|s| Item {
            author: None,
            id: s.id.clone(),
            title: s.title.clone(),
            body: s.body.clone(),
            after: s
                .dependencies
                .iter()
                .filter(|d| !passing.contains(&d.as_str()))
                .cloned()
                .collect(),
        })
        .collect())
}

/// Why one story of a prd.json cannot be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StoryError {
    /// No usable `id`.
    #[error("has no `id` (a string such as \"US-001\")")]
    NoId,
    /// No `title` string.
    #[error("{id} has no `title` string")]
    NoTitle {
        /// The story.
        id: String,
    },
    /// `passes` is not a boolean.
    #[error("{id}'s `passes` is {value}, not true or false")]
    Passes {
        /// The story.
        id: String,
        /// What it holds.
        value: Value,
    },
    /// `priority` is not a number.
    #[error("{id}'s `priority` is {value}, not a number")]
    Priority {
        /// The story.
        id: String,
        /// What it holds.
        value: Value,
    },
    /// `dependencies` or `dependsOn` is not an array.
    #[error("{id}'s `{key}` is {value}, not an array of story ids")]
    NotAList {
        /// The story.
        id: String,
        /// `dependencies` or `dependsOn`.
        key: &'static str,
        /// What it holds.
        value: Value,
    },
    /// An entry of that array is no story id.
    #[error("{id}'s `{key}` holds {value}; list the story ids it depends on")]
    NotAnId {
        /// The story.
        id: String,
        /// `dependencies` or `dependsOn`.
        key: &'static str,
        /// The entry.
        value: Value,
    },
}

/// One story, or why it cannot be read.
fn story(story: &Value) -> Result<Story, StoryError> {
    let id = match story.get("id") {
        Some(Value::String(id)) if !id.trim().is_empty() => id.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(StoryError::NoId),
    };
    let Some(title) = story.get("title").and_then(Value::as_str) else {
        return Err(StoryError::NoTitle { id });
    };
    let passes = match story.get("passes") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(passes)) => *passes,
        Some(other) => {
            return Err(StoryError::Passes {
                id,
                value: other.clone(),
            });
        }
    };
    let priority = match story.get("priority") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => n.as_f64(),
        Some(other) => {
            return Err(StoryError::Priority {
                id,
                value: other.clone(),
            });
        }
    };
    // `dependencies` (snarktank's forks) or `dependsOn` (ralph-tui).
    let mut dependencies: Vec<String> = Vec::new();
    for key in ["dependencies", "dependsOn"] {
        let ids = match story.get(key) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(ids)) => ids,
            Some(other) => {
                return Err(StoryError::NotAList {
                    id,
                    key,
                    value: other.clone(),
                });
            }
        };
        for d in ids {
            let d = match d {
                Value::String(d) => d.clone(),
                Value::Number(n) => n.to_string(),
                other => {
                    return Err(StoryError::NotAnId {
                        id,
                        key,
                        value: other.clone(),
                    });
                }
            };
            if !dependencies.contains(&d) {
                dependencies.push(d);
            }
        }
    }
    let mut body = String::new();
    if let Some(description) = story.get("description").and_then(Value::as_str) {
        body.push_str(description.trim());
        body.push('\n');
    }
    let criteria: Vec<&str> = story
        .get("acceptanceCriteria")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !criteria.is_empty() {
        body.push_str("\nAcceptance criteria:\n");
        for criterion in criteria {
            body.push_str(&format!("- {criterion}\n"));
        }
    }
    if let Some(notes) = story.get("notes").and_then(Value::as_str)
        && !notes.trim().is_empty()
    {
        body.push_str(&format!("\nNotes: {}\n", notes.trim()));
    }
    Ok(Story {
        id,
        title: title.to_string(),
        body,
        priority,
        passes,
        dependencies,
    })
}

/// prd.json `text` with story `id`'s `"passes": false` made `true`, every
/// other byte as it was (the other fields, their order, the indentation,
/// `notes`); `None` when no story has that id with `passes` false.
pub(crate) fn pass(text: &str, id: &str) -> Option<String> {
    let (start, end) = passes_span(text.as_bytes(), id)?;
    (&text[start..end] == "false").then(|| format!("{}true{}", &text[..start], &text[end..]))
}

/// The line a landed story adds to `progress.txt`: when, which story, and
/// that ralph's merge queue landed it.
pub(crate) fn progress_line(item: &Item, at: ralph_core::time::Timestamp) -> String {
    let title: Vec<&str> = item.title.split_whitespace().collect();
    format!(
        "{} - {}: {} (landed by ralph's merge queue, passes: true)\n",
        ralph_core::time::rfc3339_of_secs(at.secs()),
        item.id,
        title.join(" ")
    )
}

/// Where the value of the `passes` of the story whose id is `id` lies in
/// a valid JSON document `b` (the top object's `userStories` array).
fn passes_span(b: &[u8], id: &str) -> Option<(usize, usize)> {
    let mut scan = Scan { b, at: 0 };
    let mut found = None;
    scan.object(&mut |scan, key| {
        if key != "userStories" || scan.peek() != Some(b'[') {
            return scan.skip_value();
        }
        scan.array(&mut |scan| {
            if scan.peek() != Some(b'{') {
                return scan.skip_value();
            }
            let mut story_id = None;
            let mut passes = None;
            scan.object(&mut |scan, key| match key.as_str() {
                "id" => {
                    let start = scan.at;
                    scan.skip_value()?;
                    let raw = std::str::from_utf8(&scan.b[start..scan.at]).ok()?;
                    story_id = match serde_json::from_str::<Value>(raw).ok()? {
                        Value::String(s) => Some(s),
                        Value::Number(n) => Some(n.to_string()),
                        _ => None,
                    };
                    Some(())
                }
                "passes" => {
                    let start = scan.at;
                    scan.skip_value()?;
                    passes = Some((start, scan.at));
                    Some(())
                }
                _ => scan.skip_value(),
            })?;
            if found.is_none() && story_id.as_deref() == Some(id) {
                found = passes;
            }
            Some(())
        })
    })?;
    found
}

/// A walk over a JSON document already known valid, by byte offsets.
struct Scan<'a> {
    b: &'a [u8],
    at: usize,
}

impl Scan<'_> {
    fn space(&mut self) {
        while self.b.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.b.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Past a string; its raw text, quotes included.
    fn string(&mut self) -> Option<&str> {
        self.space();
        let start = self.at;
        self.expect(b'"')?;
        loop {
            match *self.b.get(self.at)? {
                b'\\' => self.at += 2,
                b'"' => {
                    self.at += 1;
                    return std::str::from_utf8(&self.b[start..self.at]).ok();
                }
                _ => self.at += 1,
            }
        }
    }

    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' => self.object(&mut |scan, _| scan.skip_value()),
            b'[' => self.array(&mut |scan| scan.skip_value()),
            _ => {
                while self
                    .b
                    .get(self.at)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.at += 1;
                }
                Some(())
            }
        }
    }

    /// An object, `each` called with the scan at each key's value.
    fn object(&mut self, each: &mut dyn FnMut(&mut Self, String) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            let key: String = serde_json::from_str(self.string()?).ok()?;
            self.expect(b':')?;
            self.space();
            each(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array, `each` called with the scan at each element.
    fn array(&mut self, each: &mut dyn FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            self.space();
            each(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A prd.json as snarktank/ralph's prd skill writes it (two-space
    /// indentation, its fields in its order).
    const PRD: &str = r#"{
  "project": "MyApp",
  "branchName": "ralph/task-priority",
  "description": "Task Priority System - Add priority levels to tasks",
  "userStories": [
    {
      "id": "US-001",
      "title": "Add priority field to database",
      "description": "As a developer, I need to store task priority so it persists across sessions.",
      "acceptanceCriteria": [
        "Add priority column to tasks table: 'high' | 'medium' | 'low' (default 'medium')",
        "Typecheck passes"
      ],
      "priority": 2,
      "passes": false,
      "notes": ""
    },
    {
      "id": "US-002",
      "title": "Display priority indicator on task cards",
      "description": "As a user, I want to see task priority at a glance.",
      "acceptanceCriteria": ["Each task card shows a colored priority badge", "Typecheck passes"],
      "priority": 1,
      "passes": false,
      "notes": "The \"passes\": false of US-001 is not this one",
      "dependencies": ["US-001"]
    },
    {
      "id": "US-003",
      "title": "Add priority selector to task edit",
      "description": "As a user, I want to change a task's priority.",
      "acceptanceCriteria": [],
      "priority": 1,
      "passes": true,
      "notes": ""
    },
    {
      "id": "US-004",
      "title": "Filter tasks by priority",
      "description": "As a user, I want to see only high-priority tasks.",
      "acceptanceCriteria": ["Filter dropdown"],
      "priority": 3,
      "passes": false,
      "notes": "",
      "dependencies": ["US-003"]
    }
  ]
}
"#;

    #[test]
    fn the_stories_not_passing_are_the_items_by_priority_then_file_order() {
        let items = items(PRD, "prd.json").unwrap();
        let ids: Vec<&str> = items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(ids, ["US-002", "US-001", "US-004"]);
        assert_eq!(items[0].after, ["US-001"]);
        // A story depending on one that passes already waits on nothing.
        assert!(items[2].after.is_empty());
        assert_eq!(
            items[1].body,
            "As a developer, I need to store task priority so it persists across sessions.\n\n\
             Acceptance criteria:\n\
             - Add priority column to tasks table: 'high' | 'medium' | 'low' (default 'medium')\n\
             - Typecheck passes\n"
        );
        assert!(
            items[0]
                .body
                .ends_with("Notes: The \"passes\": false of US-001 is not this one\n")
        );
    }

    #[test]
    fn passing_a_story_changes_its_passes_alone_byte_for_byte() {
        let passed = pass(PRD, "US-001").unwrap();
        assert_eq!(passed.len(), PRD.len() - 1);
        let at = PRD.find("\"passes\": false").unwrap();
        assert_eq!(
            passed,
            format!("{}\"passes\": true{}", &PRD[..at], &PRD[at + 15..])
        );
        // US-002's notes name US-001's passes; its own is the second.
        let both = pass(&passed, "US-002").unwrap();
        let left = items(&both, "prd.json").unwrap();
        assert_eq!(
            left.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["US-004"]
        );
        assert!(
            both.contains("\"notes\": \"The \\\"passes\\\": false of US-001 is not this one\"")
        );
        // Already passing, or no such story: nothing to change.
        assert_eq!(pass(PRD, "US-003"), None);
        assert_eq!(pass(PRD, "US-404"), None);
        // ralph-tui's `dependsOn`.
        let tui = r#"{"name": "x", "userStories": [{"id": "A", "title": "a", "passes": false, "dependsOn": ["B"]}, {"id": "B", "title": "b", "passes": false, "dependsOn": []}]}"#;
        assert_eq!(items(tui, "prd.json").unwrap()[0].after, ["B"]);
        // Minified, and with the fields in another order.
        let tight = r#"{"userStories":[{"passes":false,"id":"A","title":"a"},{"id":"B","passes":false,"title":"b"}]}"#;
        assert_eq!(
            pass(tight, "B").unwrap(),
            r#"{"userStories":[{"passes":false,"id":"A","title":"a"},{"id":"B","passes":true,"title":"b"}]}"#
        );
    }

    #[test]
    fn a_prd_that_cannot_be_read_is_named_with_the_fix() {
        for (text, said) in [
            ("{not json", "is not JSON"),
            (r#"{"stories": []}"#, "no `userStories` array"),
            (
                r#"{"userStories": [{"title": "x"}]}"#,
                "story 1: has no `id`",
            ),
            (r#"{"userStories": [{"id": "A"}]}"#, "A has no `title`"),
            (
                r#"{"userStories": [{"id": "A", "title": "a", "passes": "no"}]}"#,
                "`passes` is \"no\"",
            ),
            (
                r#"{"userStories": [{"id": "A", "title": "a"}, {"id": "A", "title": "b"}]}"#,
                "\"A\" twice",
            ),
            (
                r#"{"userStories": [{"id": "A", "title": "a", "dependencies": "B"}]}"#,
                "not an array of story ids",
            ),
        ] {
            let error = items(text, "docs/prd.json").unwrap_err().to_string();
            assert!(
                error.contains("docs/prd.json") && error.contains(said),
                "{error}"
            );
        }
        let second =
            r#"{"userStories": [{"id": "A", "title": "a"}, {"id": "B", "priority": "high"}]}"#;
        assert!(matches!(
            items(second, "prd.json").unwrap_err(),
            QueueError::Story { number: 2, source, .. } if matches!(*source, StoryError::NoTitle { .. })
        ));
    }

    #[test]
    fn a_progress_line_names_the_story_and_when() {
        let item = Item {
            author: None,
            id: "US-001".into(),
            title: "Add  priority\nfield".into(),
            body: String::new(),
            after: Vec::new(),
        };
        assert_eq!(
            progress_line(&item, ralph_core::time::Timestamp::from_secs(0)),
            "1970-01-01T00:00:00Z - US-001: Add priority field (landed by ralph's merge queue, passes: true)\n"
        );
    }
}
