//! Property tests of the backwards transcript reader against a reference that
//! reads the whole file forward, on generated transcripts: assistant, user,
//! system and other lines, broken and blank lines, long lines, no final
//! newline; with the real bounds and with tiny ones (so lines span many
//! chunks and some are over the line limit).
//!
//! Lines are written the way JSON serializers (Claude Code's included) write
//! them: the reader's pre-filter looks for the literal `"assistant"` and
//! `"user"`, so a type spelled with `\u` escapes (`"assist\u0061nt"`), which
//! no serializer produces, is deliberately outside these properties.

use std::fmt;
use std::fs;
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{Value, json};

use super::testing::reference;
use super::{LIMITS, Limits, read_iteration_tail, read_iteration_tail_within};
use tempfile::TempDir;

/// The lines of a generated transcript, shown as text when a case fails.
#[derive(Clone)]
struct Lines(Vec<Vec<u8>>);

impl fmt::Debug for Lines {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|l| String::from_utf8_lossy(l)))
            .finish()
    }
}

impl Lines {
    fn bytes(&self, final_newline: bool) -> Vec<u8> {
        let mut out = self.0.join(&b'\n');
        if final_newline && !self.0.is_empty() {
            out.push(b'\n');
        }
        out
    }
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "[a-z \"\\\\\n\té€]{0,12}",
        1 => Just("\"assistant\"".to_string()),
        1 => Just("type\":\"user".to_string()),
        1 => Just(String::new()),
    ]
    .boxed()
}

fn message_id() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => Just(Value::Null),
        6 => "m[0-2]".prop_map(Value::from),
        1 => Just(json!(7)),
    ]
    .boxed()
}

fn sidechain() -> BoxedStrategy<Value> {
    prop_oneof![6 => Just(Value::Null), 1 => Just(json!(true)), 1 => Just(json!(false))].boxed()
}

fn block() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => text().prop_map(|t| json!({"type": "text", "text": t})),
        1 => Just(json!({"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}})),
        1 => ("t[0-2]", prop_oneof![Just("Write"), Just("Edit"), Just("Read")], "/p/[ab]")
            .prop_map(|(id, name, path)| json!({"type": "tool_use", "id": id, "name": name, "input": {"file_path": path}})),
        1 => text().prop_map(|t| json!({"type": "thinking", "thinking": t})),
        1 => Just(json!({"type": "text", "text": 5})),
        1 => Just(json!("text")),
    ]
    .boxed()
}

fn content() -> BoxedStrategy<Value> {
    prop_oneof![
        1 => text().prop_map(Value::from),
        4 => prop::collection::vec(block(), 0..4).prop_map(Value::from),
        1 => Just(Value::Null),
    ]
    .boxed()
}

/// Inserts `key: value` unless `value` is null (the key is then absent).
fn with(mut line: Value, key: &str, value: Value) -> Value {
    if !value.is_null() {
        line[key] = value;
    }
    line
}

fn json_line(max_pad: usize) -> BoxedStrategy<Value> {
    let pad = move || (0..=max_pad).prop_map(|n| "p".repeat(n));
    let assistant = (message_id(), content(), sidechain(), pad()).prop_map(|(id, c, side, pad)| {
        let message = with(json!({"role": "assistant", "content": c}), "id", id);
        with(
            json!({"type": "assistant", "message": message, "uuid": pad}),
            "isSidechain",
            side,
        )
    });
    let edit_result = prop_oneof![
        2 => Just(Value::Null),
        1 => Just(json!({"type": "create", "structuredPatch": []})),
        1 => Just(json!({"type": "update", "structuredPatch": []})),
        1 => Just(json!({"type": "update", "structuredPatch": [{"lines": ["+x"]}]})),
    ];
    let user = (
        text(),
        any::<bool>(),
        any::<bool>(),
        "t[0-2]",
        edit_result,
        sidechain(),
        pad(),
    )
        .prop_map(|(t, tool, is_error, id, result, side, pad)| {
            let content = if tool {
                json!([{"type": "tool_result", "tool_use_id": id, "is_error": is_error, "content": format!("{t}{pad}")}])
            } else {
                json!(format!("{t}{pad}"))
            };
            let line = with(
                json!({"type": "user", "message": {"role": "user", "content": content}}),
                "isSidechain",
                side,
            );
            with(line, "toolUseResult", result)
        });
    let other = (text(), pad()).prop_flat_map(|(t, pad)| {
        prop_oneof![
            Just(json!({"type": "system", "subtype": "stop_hook_summary", "note": t, "pad": pad})),
            Just(json!({"type": "attachment", "attachment": {"type": "assistant", "text": t}})),
            Just(json!({"type": "queue-operation", "content": "assistant"})),
            Just(json!({"message": {"role": "assistant", "content": t}})),
            Just(json!({"type": 3, "message": "assistant"})),
            Just(json!(["assistant", "user"])),
        ]
    });
    prop_oneof![5 => assistant, 3 => user, 2 => other].boxed()
}

fn line(max_pad: usize) -> BoxedStrategy<Vec<u8>> {
    let json = json_line(max_pad).prop_map(|v| serde_json::to_vec(&v).unwrap());
    let broken = prop_oneof![
        // A line cut short (a partial write).
        (json_line(max_pad), any::<prop::sample::Index>()).prop_map(|(v, at)| {
            let bytes = serde_json::to_vec(&v).unwrap();
            let cut = at.index(bytes.len());
            bytes[..cut].to_vec()
        }),
        // Random bytes, invalid UTF-8 included.
        prop::collection::vec(
            any::<u8>().prop_filter("no newline", |b| *b != b'\n'),
            0..20
        ),
        // A valid line with a byte replaced by one that is not UTF-8.
        (json_line(max_pad), any::<prop::sample::Index>()).prop_map(|(v, at)| {
            let mut bytes = serde_json::to_vec(&v).unwrap();
            let i = at.index(bytes.len());
            bytes[i] = 0xff;
            bytes
        }),
        Just(Vec::new()),
        Just(b" \t\r".to_vec()),
    ];
    prop_oneof![6 => json, 1 => broken].boxed()
}

fn check(dir: &TempDir, lines: &Lines, final_newline: bool, limits: Limits) {
    let bytes = lines.bytes(final_newline);
    let path: PathBuf = dir.path().join("t.jsonl");
    fs::write(&path, &bytes).unwrap();
    let got = if limits.chunk_bytes == LIMITS.chunk_bytes
        && limits.max_line_bytes == LIMITS.max_line_bytes
        && limits.max_scan_bytes == LIMITS.max_scan_bytes
    {
        read_iteration_tail(&path).unwrap()
    } else {
        read_iteration_tail_within(&path, limits).unwrap()
    };
    assert_eq!(
        got,
        reference(
            &bytes,
            limits.chunk_bytes,
            limits.max_line_bytes,
            limits.max_scan_bytes
        ),
        "{limits:?}"
    );
}

fn tiny_limits(file_len: usize) -> impl Strategy<Value = Limits> {
    (1..=48usize).prop_flat_map(move |chunk| {
        let max_line = prop_oneof![
            3 => chunk..=chunk + 150,
            1 => Just(usize::MAX),
        ];
        let max_scan = prop_oneof![
            3 => Just(u64::MAX),
            1 => 1..=file_len as u64 + 1,
        ];
        (max_line, max_scan).prop_map(move |(max_line_bytes, max_scan_bytes)| Limits {
            chunk_bytes: chunk,
            max_line_bytes,
            max_scan_bytes,
        })
    })
}

proptest! {
    /// Tiny chunks, line limits and scan bounds: every line spans chunk
    /// boundaries, some lines are over the limit, some scans stop early.
    #[test]
    fn tiny_chunks_agree_with_the_forward_reference(
        (lines, final_newline, limits) in (
            prop::collection::vec(line(60), 0..24).prop_map(Lines),
            any::<bool>(),
        ).prop_flat_map(|(lines, nl)| {
            let len = lines.bytes(nl).len();
            (Just(lines), Just(nl), tiny_limits(len))
        })
    ) {
        let dir = TempDir::new().unwrap();
        check(&dir, &lines, final_newline, limits);
    }
}

proptest! {
    /// Any bytes at all (newlines, invalid UTF-8): no panic, same answer.
    #[test]
    fn arbitrary_bytes_agree_with_the_forward_reference(
        (bytes, limits) in prop::collection::vec(
            prop_oneof![4 => any::<u8>(), 1 => Just(b'\n')],
            0..300,
        ).prop_flat_map(|bytes| {
            let len = bytes.len();
            (Just(bytes), tiny_limits(len))
        })
    ) {
        let dir = TempDir::new().unwrap();
        let path = dir.path().join("t.jsonl");
        fs::write(&path, &bytes).unwrap();
        let got = read_iteration_tail_within(&path, limits).unwrap();
        prop_assert_eq!(got, reference(&bytes, limits.chunk_bytes, limits.max_line_bytes, limits.max_scan_bytes));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The real bounds, on files of 0 to a few hundred KiB whose long lines
    /// put the 64 KiB chunk boundaries at arbitrary places.
    #[test]
    fn real_chunks_agree_with_the_forward_reference(
        lines in prop::collection::vec(
            prop_oneof![8 => line(3000), 1 => line(90_000)],
            0..40,
        ).prop_map(Lines),
        final_newline in any::<bool>(),
    ) {
        let dir = TempDir::new().unwrap();
        check(&dir, &lines, final_newline, LIMITS);
    }
}

/// A value for a field the reader reads, of the right type or not.
fn field_value() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(Value::Null),
        Just(json!(true)),
        Just(json!(false)),
        Just(json!(529)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!(70_000)),
        Just(json!("529")),
        Just(json!("server_error")),
        Just(json!("<synthetic>")),
        Just(json!("create")),
        Just(json!("text")),
        Just(json!("tool_result")),
        Just(json!([])),
        Just(json!([{"text": "a"}, {"text": 5}, "b", {"text": "c"}])),
        Just(json!({})),
        Just(json!({"file_path": "/p/x", "structuredPatch": [1]})),
        text().prop_map(Value::from),
    ]
    .boxed()
}

/// A line of [`json_line`] with more fields set anywhere the reader looks
/// (right types and wrong ones), written with its keys in any order and
/// some keys twice (the last wins, as in a JSON tree).
fn tree_line() -> BoxedStrategy<Vec<u8>> {
    const PLACES: &[&str] = &[
        "/isApiErrorMessage",
        "/error",
        "/apiErrorStatus",
        "/isSidechain",
        "/type",
        "/toolUseResult",
        "/toolUseResult/type",
        "/toolUseResult/structuredPatch",
        "/message",
        "/message/model",
        "/message/id",
        "/message/content",
        "/message/content/0",
        "/message/content/0/type",
        "/message/content/0/content",
        "/message/content/0/is_error",
        "/message/content/0/tool_use_id",
        "/message/content/0/input",
        "/message/content/0/name",
        "/message/content/0/text",
    ];
    let edits = prop::collection::vec((0..PLACES.len(), field_value()), 0..4);
    (json_line(64), edits, any::<u64>())
        .prop_map(|(mut line, edits, seed)| {
            for (place, value) in edits {
                let (parent, key) = PLACES[place].rsplit_once('/').unwrap();
                match line.pointer_mut(parent) {
                    Some(Value::Object(map)) => {
                        map.insert(key.to_string(), value);
                    }
                    Some(Value::Array(items)) if key == "0" && !items.is_empty() => {
                        items[0] = value;
                    }
                    _ => {}
                }
            }
            let mut out = Vec::new();
            write_shuffled(&line, &mut Shuffle(seed | 1), &mut out);
            out
        })
        .boxed()
}

struct Shuffle(u64);

impl Shuffle {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Writes `value` as JSON with each object's keys in a shuffled order, and
/// now and then a key written twice (first with a decoy value).
fn write_shuffled(value: &Value, rng: &mut Shuffle, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, usize::try_from(rng.next() % (i as u64 + 1)).unwrap());
            }
            out.push(b'{');
            let mut first = true;
            for (key, value) in entries {
                let decoys = [
                    json!(null),
                    json!("tool_use"),
                    json!([{"type": "text"}]),
                    json!(7),
                ];
                let twice = rng.next().is_multiple_of(6);
                let written: Vec<&Value> = if twice {
                    vec![&decoys[(rng.next() % 4) as usize], value]
                } else {
                    vec![value]
                };
                for v in written {
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    out.extend(serde_json::to_vec(key).unwrap());
                    out.push(b':');
                    write_shuffled(v, rng, out);
                }
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_shuffled(item, rng, out);
            }
            out.push(b']');
        }
        other => out.extend(serde_json::to_vec(other).unwrap()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// The streaming reading of a line is the JSON tree's, on any line:
    /// fields of wrong types, keys in any order and repeated, broken lines.
    #[test]
    fn a_line_reads_as_its_json_tree_does(line in prop_oneof![3 => tree_line(), 1 => line(64)]) {
        if let Err(diff) = super::testing::line_reading_agrees(&line) {
            prop_assert!(false, "{}\n{}", String::from_utf8_lossy(&line), diff);
        }
    }
}

/// The real client's transcripts in `tests/fixtures/` read line by line as
/// their JSON trees do.
#[test]
fn the_real_transcripts_read_as_their_json_trees_do() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let mut lines = 0;
    for entry in fs::read_dir(fixtures).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            for line in fs::read(&path).unwrap().split(|&b| b == b'\n') {
                if let Err(diff) = super::testing::line_reading_agrees(line) {
                    panic!(
                        "{}: {}\n{diff}",
                        path.display(),
                        String::from_utf8_lossy(line)
                    );
                }
                lines += 1;
            }
        }
    }
    assert!(lines > 10, "{lines} lines");
}
