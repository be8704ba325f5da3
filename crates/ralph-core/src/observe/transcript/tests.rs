use super::*;
use std::fs;
use tempfile::TempDir;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

fn write(dir: &TempDir, content: &[u8]) -> PathBuf {
    let path = dir.path().join("t.jsonl");
    fs::write(&path, content).unwrap();
    path
}

fn assistant(id: &str, blocks: &str) -> String {
    format!(
        r#"{{"type":"assistant","message":{{"id":"{id}","role":"assistant","content":{blocks}}}}}"#
    )
}

#[test]
fn real_transcripts() {
    let text = last_assistant_text(&fixture("transcript-text-only.jsonl")).unwrap();
    assert_eq!(text.as_deref(), Some("All done. RALPH_DONE"));
    let tools = last_assistant_text(&fixture("transcript-tool-use.jsonl")).unwrap();
    assert_eq!(tools.as_deref(), Some("Done. RALPH_DONE"));
}

#[test]
fn table() {
    let user = r#"{"type":"user","message":{"role":"user","content":"Stop hook feedback:\nSay RALPH_DONE when done"}}"#;
    let system = r#"{"type":"system","subtype":"stop_hook_summary"}"#;
    let cases: Vec<(String, Option<&str>)> = vec![
        (String::new(), None),
        (format!("{user}\n"), None),
        // The iteration that started with the feedback has no message
        // yet: the previous iteration's message is never taken for it.
        (
            format!(
                "{}\n{user}\n",
                assistant("a", r#"[{"type":"text","text":"old"}]"#)
            ),
            None,
        ),
        (
            format!(
                "{}\n{user}\n{}\n{system}\n",
                assistant("a", r#"[{"type":"text","text":"old RALPH_DONE"}]"#),
                assistant("b", r#"[{"type":"text","text":"new"}]"#)
            ),
            Some("new"),
        ),
        // One message split over several lines sharing message.id.
        (
            format!(
                "{user}\n{}\n{}\n",
                assistant("m", r#"[{"type":"text","text":"part one"}]"#),
                assistant(
                    "m",
                    r#"[{"type":"tool_use","id":"t","name":"Bash","input":{}},{"type":"text","text":"part two"}]"#
                )
            ),
            Some("part one\npart two"),
        ),
        // The last message is a tool call only: it has no text, and an earlier message does not count.
        (
            format!(
                "{}\n{}\n",
                assistant("a", r#"[{"type":"text","text":"RALPH_DONE"}]"#),
                assistant(
                    "b",
                    r#"[{"type":"tool_use","id":"t","name":"Bash","input":{}}]"#
                )
            ),
            Some(""),
        ),
        // Partial last line and broken lines are skipped.
        (
            format!(
                "{}\n{{\"type\":\"assis",
                assistant("a", r#"[{"type":"text","text":"kept"}]"#)
            ),
            Some("kept"),
        ),
        (
            format!(
                "{}\nnot json \"assistant\"\n\n",
                assistant("a", r#""plain string content""#)
            ),
            Some("plain string content"),
        ),
        // A sub-agent's message is not the agent's last message.
        (
            format!(
                "{}\n{}\n",
                assistant("a", r#"[{"type":"text","text":"main"}]"#),
                r#"{"type":"assistant","isSidechain":true,"message":{"id":"s","content":[{"type":"text","text":"side"}]}}"#
            ),
            Some("main"),
        ),
        // No trailing newline on a complete last line.
        (
            assistant("a", r#"[{"type":"text","text":"no newline"}]"#),
            Some("no newline"),
        ),
    ];
    let dir = TempDir::new().unwrap();
    for (content, want) in cases {
        let path = write(&dir, content.as_bytes());
        assert_eq!(
            last_assistant_text(&path).unwrap().as_deref(),
            want,
            "{content}"
        );
    }
}

#[test]
fn lines_spanning_many_chunks_and_oversize_lines() {
    let dir = TempDir::new().unwrap();
    let big_text = "x".repeat(CHUNK_BYTES * 3 + 17);
    let content = format!(
        "{}\n{}\n",
        assistant("a", r#"[{"type":"text","text":"before"}]"#),
        assistant("b", &format!(r#"[{{"type":"text","text":"{big_text}"}}]"#)),
    );
    let path = write(&dir, content.as_bytes());
    assert_eq!(last_assistant_text(&path).unwrap(), Some(big_text));

    let huge = format!(
        r#"{{"type":"user","message":{{"content":"{}"}}}}"#,
        "y".repeat(MAX_LINE_BYTES + 5)
    );
    let content = format!(
        "{}\n{huge}\n",
        assistant("a", r#"[{"type":"text","text":"survives"}]"#)
    );
    let path = write(&dir, content.as_bytes());
    assert_eq!(
        last_assistant_text(&path).unwrap().as_deref(),
        Some("survives")
    );
}

/// A user line with one tool result.
fn tool(id: &str, err: bool, text: &str) -> String {
    format!(
        r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","is_error":{err},"content":"{text}"}}]}}}}"#
    )
}

#[test]
fn failing_tool_results_of_the_last_iteration() {
    let prompt =
        |text: &str| format!(r#"{{"type":"user","message":{{"role":"user","content":"{text}"}}}}"#);
    let lines = [
        prompt("Do the task"),
        assistant(
            "a",
            r#"[{"type":"tool_use","id":"t0","name":"Bash","input":{}}]"#,
        ),
        tool("t0", true, "error: old iteration"),
        assistant("b", r#"[{"type":"text","text":"Tried."}]"#),
        prompt("Stop hook feedback:\\nDo the task"),
        assistant(
            "c",
            r#"[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]"#,
        ),
        tool("t1", true, "error[E0308]: mismatched types"),
        assistant(
            "d",
            r#"[{"type":"tool_use","id":"t2","name":"Bash","input":{}}]"#,
        ),
        tool("t2", false, "ok"),
        assistant("e", r#"[{"type":"text","text":"Still failing."}]"#),
    ];
    let dir = TempDir::new().unwrap();
    let path = write(&dir, (lines.join("\n") + "\n").as_bytes());
    let tail = read_iteration_tail(&path).unwrap();
    assert_eq!(tail.final_message.as_deref(), Some("Still failing."));
    assert!(tail.caught_up && tail.whole);
    assert_eq!(tail.tool_calls, 2);
    assert_eq!(
        tail.failing_tool_results,
        vec!["error[E0308]: mismatched types".to_string()]
    );
}

#[test]
fn a_stop_hook_s_additional_context_starts_the_next_iteration() {
    // As 2.1.330 writes a session that a Stop hook's
    // `hookSpecificOutput.additionalContext` continued: the hook's own
    // line, the context as an attachment, the hook summary, then the
    // next turn; no user line between the iterations.
    let lines = [
            r#"{"type":"user","message":{"role":"user","content":"Do the task"}}"#.to_string(),
            assistant(
                "a",
                r#"[{"type":"tool_use","id":"t0","name":"Bash","input":{}}]"#,
            ),
            tool("t0", true, "error: old iteration"),
            assistant("b", r#"[{"type":"text","text":"Tried."}]"#),
            r#"{"parentUuid":"p","isSidechain":false,"attachment":{"type":"hook_success","hookName":"Stop","hookEvent":"Stop","content":"","stdout":"{"hookSpecificOutput":{"hookEventName":"Stop","additionalContext":"Do the task"}}
","exitCode":0},"type":"attachment","uuid":"u1","userType":"external"}"#.to_string(),
            r#"{"parentUuid":"u1","isSidechain":false,"attachment":{"type":"hook_additional_context","content":["Do the task"],"hookName":"Stop","toolUseID":"x","hookEvent":"Stop"},"type":"attachment","uuid":"u2","userType":"external"}"#.to_string(),
            r#"{"parentUuid":"u2","isSidechain":false,"type":"system","subtype":"stop_hook_summary","hookCount":1,"hookErrors":[],"hookAdditionalContext":["Do the task"],"preventedContinuation":false}"#.to_string(),
            assistant(
                "c",
                r#"[{"type":"tool_use","id":"t1","name":"Bash","input":{}}]"#,
            ),
            tool("t1", true, "error[E0308]: mismatched types"),
            assistant("d", r#"[{"type":"text","text":"Still failing."}]"#),
        ];
    let dir = TempDir::new().unwrap();
    let path = write(&dir, (lines.join("\n") + "\n").as_bytes());
    let tail = read_iteration_tail(&path).unwrap();
    assert_eq!(tail.final_message.as_deref(), Some("Still failing."));
    assert!(tail.caught_up && tail.whole);
    assert_eq!(tail.tool_calls, 1, "only this iteration's call");
    assert_eq!(
        tail.failing_tool_results,
        vec!["error[E0308]: mismatched types".to_string()]
    );
}

#[test]
fn a_message_split_over_chunks_is_joined() {
    // One message split over two lines, the older one longer than the bound.
    let dir = TempDir::new().unwrap();
    let long = "x".repeat(CHUNK_BYTES + 10);
    let content = format!(
        "{}\n{}\n",
        assistant("m", &format!(r#"[{{"type":"text","text":"{long}"}}]"#)),
        assistant("m", r#"[{"type":"text","text":"tail"}]"#)
    );
    let path = write(&dir, content.as_bytes());
    assert_eq!(
        last_assistant_text(&path).unwrap(),
        Some(format!("{long}\ntail"))
    );
}

#[test]
fn invalid_utf8_lines_are_skipped() {
    let dir = TempDir::new().unwrap();
    let mut content = assistant("a", r#"[{"type":"text","text":"good"}]"#).into_bytes();
    content
        .extend_from_slice(b"\n{\"type\":\"assistant\",\"message\":{\"content\":\"\xff\xfe\"}}\n");
    let path = write(&dir, &content);
    assert_eq!(last_assistant_text(&path).unwrap().as_deref(), Some("good"));
}

#[test]
fn missing_file_and_directory_are_errors() {
    let dir = TempDir::new().unwrap();
    assert!(matches!(
        last_assistant_text(&dir.path().join("nope.jsonl")),
        Err(TranscriptError::Io { .. })
    ));
    assert!(last_assistant_text(dir.path()).is_err());
}

fn prompt(text: &str) -> String {
    format!(r#"{{"type":"user","message":{{"role":"user","content":"{text}"}}}}"#)
}

fn call(id: &str, name: &str, input: &str) -> String {
    assistant(
        &format!("m-{id}"),
        &format!(r#"[{{"type":"tool_use","id":"{id}","name":"{name}","input":{input}}}]"#),
    )
}

fn result(id: &str, is_error: bool, text: &str, tool_use_result: &str) -> String {
    let extra = if tool_use_result.is_empty() {
        String::new()
    } else {
        format!(r#","toolUseResult":{tool_use_result}"#)
    };
    format!(
        r#"{{"type":"user","message":{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"{id}","is_error":{is_error},"content":"{text}"}}]}}{extra}}}"#
    )
}

fn tail_of(lines: &[String]) -> IterationTail {
    let dir = TempDir::new().unwrap();
    let path = write(&dir, (lines.join("\n") + "\n").as_bytes());
    read_iteration_tail(&path).unwrap()
}

#[test]
fn the_real_sample_with_tool_calls() {
    let tail = read_iteration_tail(&fixture("transcript-tool-use.jsonl")).unwrap();
    assert_eq!(tail.final_message.as_deref(), Some("Done. RALPH_DONE"));
    assert!(tail.caught_up && tail.whole);
    // Iteration 2 ran one Bash call; iteration 1's Write is not its own.
    assert_eq!(tail.tool_calls, 1);
    assert_eq!(tail.edits, ToolEdits::default());
    assert!(tail.failing_tool_results.is_empty());
}

#[test]
fn an_answer_before_the_final_message_is_the_previous_iterations() {
    // Seen on 2.1.330: the stop's final message is in the file, but its
    // feedback line, tool call and result are not yet; the lines before
    // it are the previous iteration's, and never charged to this one.
    let lines = [
        prompt("Do the task"),
        call("t1", "Bash", r#"{"command":"echo fine"}"#),
        result("t1", false, "fine", ""),
        assistant("m1", r#"[{"type":"text","text":"Step one done."}]"#),
        assistant(
            "m2",
            r#"[{"type":"text","text":"Step two hit a missing file."}]"#,
        ),
    ];
    let tail = tail_of(&lines);
    assert_eq!(
        tail.final_message.as_deref(),
        Some("Step two hit a missing file.")
    );
    assert_eq!(
        tail.tool_calls, 0,
        "the previous iteration's call is not this one's"
    );
    assert_eq!(
        tail.previous_final_message.as_deref(),
        Some("Step one done.")
    );
}

#[test]
fn the_clients_own_api_error_message_is_marked() {
    // As 2.0.77 writes it (then runs the Stop hook), and as 2.1.330 does.
    let old = r#"{"type":"assistant","isSidechain":false,"isApiErrorMessage":true,"error":"unknown","message":{"id":"e1","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"API Error: 529 {\"type\":\"error\"}"}]}}"#;
    let new = r#"{"type":"assistant","isSidechain":false,"isApiErrorMessage":true,"error":"authentication_failed","apiErrorStatus":401,"message":{"id":"e2","model":"<synthetic>","role":"assistant","content":[{"type":"text","text":"Invalid API key · Fix external API key"}]}}"#;
    for (line, error, status) in [
        (old, "unknown", Some(529)),
        (new, "authentication_failed", Some(401)),
    ] {
        let tail = tail_of(&[prompt("Do the task"), line.to_string()]);
        assert_eq!(
            tail.api_error,
            Some(ApiErrorMessage {
                error: Some(error.into()),
                status
            })
        );
    }
    // The model's own answer is not one.
    let tail = tail_of(&[
        prompt("Do the task"),
        assistant(
            "m1",
            r#"{"type":"text","text":"API Error: 529 is what I saw"}"#,
        ),
    ]);
    assert_eq!(tail.api_error, None);
}

#[test]
fn an_iteration_is_bounded_by_its_own_prompt_line() {
    // Iteration 2 hit an error; iteration 3 has begun (its feedback line
    // is written) but its final message is not written yet.
    let lines = [
        prompt("Do the task"),
        call("t1", "Write", r#"{"file_path":"/p/a.txt","content":"x"}"#),
        result("t1", true, "Permission to use Write has been denied.", ""),
        assistant("m2", r#"[{"type":"text","text":"Could not write."}]"#),
        prompt("Stop hook feedback:\\nDo the task"),
    ];
    let tail = tail_of(&lines);
    assert_eq!(tail.final_message, None);
    assert!(!tail.caught_up);
    assert!(tail.whole);
    assert!(tail.failing_tool_results.is_empty(), "{tail:?}");
    assert_eq!(tail.tool_calls, 0);
    // The previous iteration's final message is kept apart, for a stop
    // that could not see it in time.
    assert_eq!(
        tail.previous_final_message.as_deref(),
        Some("Could not write.")
    );
}

#[test]
fn caught_up_only_when_the_turn_ended_on_a_message_without_tool_calls() {
    let base = vec![prompt("Do the task")];
    let with = |extra: &[String]| {
        let mut lines = base.clone();
        lines.extend_from_slice(extra);
        tail_of(&lines)
    };
    let bash = call("t1", "Bash", r#"{"command":"ls"}"#);
    let ok = result("t1", false, "a.txt", "");
    let text = assistant("m9", r#"[{"type":"text","text":"Looked."}]"#);
    assert!(!with(&[]).caught_up, "nothing after the prompt");
    assert!(
        !with(std::slice::from_ref(&bash)).caught_up,
        "a tool call awaits its result"
    );
    assert!(
        !with(&[bash.clone(), ok.clone()]).caught_up,
        "the result awaits an answer"
    );
    let done = with(&[bash.clone(), ok.clone(), text.clone()]);
    assert!(done.caught_up);
    assert_eq!(done.final_message.as_deref(), Some("Looked."));
    assert_eq!(done.tool_calls, 1);
    assert!(!done.edits.fully_described, "Bash may change anything");
    assert!(
        with(std::slice::from_ref(&text)).caught_up,
        "a text-only iteration"
    );
    // The final message came before the call's result: still behind.
    let early = with(&[bash.clone(), text.clone()]);
    assert!(!early.caught_up, "a call whose result is not written yet");
    let late_result = with(&[bash, text, ok]);
    assert!(late_result.caught_up, "written out of order, but all there");
    assert_eq!(late_result.final_message.as_deref(), Some("Looked."));
}

#[test]
fn refused_calls_are_named_with_their_command_or_file() {
    // The refusal texts both clients wrote in acceptEdits (`-p`).
    let lines = [
        prompt("Stop hook feedback:\\nDo the task"),
        call(
            "t",
            "Bash",
            r#"{"command":"python3 -m unittest","description":"Run"}"#,
        ),
        result("t", true, "This command requires approval", ""),
        call("g", "Bash", r#"{"command":"git add a && git commit -m a"}"#),
        result(
            "g",
            true,
            "This Bash command contains multiple operations. The following parts require approval: git add a, git commit -m a",
            "",
        ),
        call(
            "w",
            "Write",
            r#"{"file_path":"/tmp/out.txt","content":"x"}"#,
        ),
        result(
            "w",
            true,
            "Claude requested permissions to write to /tmp/out.txt, but you haven't granted it yet.",
            "",
        ),
        // A failure that is no refusal, and the system's EACCES.
        call("c", "Bash", r#"{"command":"cat /etc/shadow"}"#),
        result(
            "c",
            true,
            "Exit code 1\\ncat: /etc/shadow: Permission denied",
            "",
        ),
        call("ok", "Bash", r#"{"command":"ls"}"#),
        result("ok", false, "README.md", ""),
        assistant("end", r#"[{"type":"text","text":"Tried."}]"#),
    ];
    let tail = tail_of(&lines);
    let calls: Vec<_> = tail
        .refusals
        .iter()
        .map(super::super::refusals::Refusal::call)
        .collect();
    assert_eq!(
        calls,
        [
            "Bash(python3 -m unittest)",
            "Bash(git add a && git commit -m a)",
            "Write(/tmp/out.txt)"
        ]
    );
    assert_eq!(tail.refusals[0].tool_use_id.as_deref(), Some("t"));
    assert_eq!(
        tail.refusals[1].allow_rules(),
        ["Bash(git add a:*)", "Bash(git commit -m a:*)"]
    );
    assert_eq!(tail.failing_tool_results.len(), 4);
}

#[test]
fn file_tool_edits_are_read_from_the_clients_results() {
    let write = |id: &str, path: &str| {
        call(
            id,
            "Write",
            &format!(r#"{{"file_path":"{path}","content":"x"}}"#),
        )
    };
    let lines = [
        prompt("Stop hook feedback:\\nDo the task"),
        write("c", "/p/created.txt"),
        result(
            "c",
            false,
            "File created",
            r#"{"type":"create","filePath":"/p/created.txt","structuredPatch":[]}"#,
        ),
        write("u", "/p/patched.txt"),
        result(
            "u",
            false,
            "updated",
            r#"{"type":"update","structuredPatch":[{"oldStart":1,"lines":["-a","+b"]}]}"#,
        ),
        write("same", "/p/same.txt"),
        result(
            "same",
            false,
            "updated",
            r#"{"type":"update","structuredPatch":[]}"#,
        ),
        call(
            "e",
            "Edit",
            r#"{"file_path":"/p/denied.txt","old_string":"a","new_string":"b"}"#,
        ),
        result("e", true, "Permission to use Edit has been denied.", ""),
        // An older client writes no toolUseResult: a successful edit counts.
        call(
            "o",
            "Edit",
            r#"{"file_path":"/p/old-client.txt","old_string":"a","new_string":"b"}"#,
        ),
        result("o", false, "The file has been updated.", ""),
        call("r", "Read", r#"{"file_path":"/p/created.txt"}"#),
        result("r", false, "x", ""),
        assistant("end", r#"[{"type":"text","text":"Wrote files."}]"#),
    ];
    let tail = tail_of(&lines);
    assert_eq!(tail.tool_calls, 6);
    assert_eq!(
        tail.edits,
        ToolEdits {
            changed_files: ["/p/created.txt", "/p/patched.txt", "/p/old-client.txt"]
                .map(PathBuf::from)
                .to_vec(),
            fully_described: true,
        }
    );
    assert_eq!(
        tail.failing_tool_results,
        vec!["Permission to use Edit has been denied.".to_string()]
    );

    // A Bash call in the same iteration: the edits are no longer all of it.
    let mut with_bash = lines.to_vec();
    with_bash.insert(1, call("b", "Bash", r#"{"command":"make"}"#));
    with_bash.insert(2, result("b", false, "ok", ""));
    assert!(!tail_of(&with_bash).edits.fully_described);
}

#[test]
fn a_large_successful_tool_result_is_read_without_its_text() {
    let big = "y".repeat(16 * 1024);
    let lines = [
        prompt("Do the task"),
        call(
            "w",
            "Write",
            r#"{"file_path":"/p/big.txt","content":"..."}"#,
        ),
        result(
            "w",
            false,
            &big,
            &format!(
                r#"{{"type":"update","content":"{big}","structuredPatch":[{{"lines":["+y"]}}]}}"#
            ),
        ),
        assistant("end", r#"[{"type":"text","text":"Done."}]"#),
    ];
    let tail = tail_of(&lines);
    assert_eq!(tail.edits.changed_files, vec![PathBuf::from("/p/big.txt")]);
    assert!(tail.edits.fully_described);
}

#[test]
fn an_iteration_longer_than_the_scan_bound_is_not_whole() {
    let dir = TempDir::new().unwrap();
    let mut lines = vec![prompt("Do the task")];
    for i in 0..40 {
        lines.push(call(&format!("t{i}"), "Read", r#"{"file_path":"/p/a"}"#));
        lines.push(result(&format!("t{i}"), false, &"z".repeat(100), ""));
    }
    lines.push(assistant(
        "end",
        r#"[{"type":"text","text":"Read a lot."}]"#,
    ));
    let path = write(&dir, (lines.join("\n") + "\n").as_bytes());
    let tail = testing::read_iteration_tail_with(&path, 64, 4096, 2048).unwrap();
    assert!(!tail.whole);
    assert!(!tail.edits.fully_described);
    assert_eq!(tail.final_message.as_deref(), Some("Read a lot."));
    assert!(tail.tool_calls > 0 && tail.tool_calls < 40);
}

#[test]
fn the_final_message_is_bounded_in_memory() {
    // Many lines sharing one message id: only the newest MAX_MESSAGE_BYTES are kept.
    let dir = TempDir::new().unwrap();
    let part = "w".repeat(64 * 1024);
    let line = assistant("same", &format!(r#"[{{"type":"text","text":"{part}"}}]"#));
    let mut content = prompt("Do the task") + "\n";
    for _ in 0..(MAX_MESSAGE_BYTES / part.len() + 8) {
        content.push_str(&line);
        content.push('\n');
    }
    let path = write(&dir, content.as_bytes());
    let message = last_assistant_text(&path).unwrap().unwrap();
    // The parts' bytes, and the line breaks that join them.
    assert!(message.len() <= MAX_MESSAGE_BYTES + 64, "{}", message.len());
    assert!(message.len() >= MAX_MESSAGE_BYTES);

    // One line's text larger than the bound: its end is kept.
    let big = format!(
        "{}é{}THE END",
        "x".repeat(2 << 20),
        "y".repeat(MAX_MESSAGE_BYTES - 8)
    );
    let line = assistant("one", &format!(r#"[{{"type":"text","text":"{big}"}}]"#));
    let path = write(
        &dir,
        format!("{}\n{line}\n", prompt("Do the task")).as_bytes(),
    );
    let message = last_assistant_text(&path).unwrap().unwrap();
    assert!(message.len() <= MAX_MESSAGE_BYTES, "{}", message.len());
    assert!(
        message.ends_with("yTHE END") && message.starts_with('y'),
        "cut at a character boundary"
    );
}

#[test]
fn waiting_for_the_stop_sees_a_final_message_written_late() {
    let dir = TempDir::new().unwrap();
    let path = write(&dir, (prompt("Do the task") + "\n").as_bytes());
    let late = path.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let mut file = fs::OpenOptions::new().append(true).open(&late).unwrap();
        use std::io::Write as _;
        writeln!(
            file,
            "{}",
            assistant("m", r#"[{"type":"text","text":"Late."}]"#)
        )
        .unwrap();
    });
    let (tail, waited) = wait_for_stop(&path, Duration::from_secs(5), None).unwrap();
    writer.join().unwrap();
    assert!(tail.caught_up);
    assert_eq!(tail.final_message.as_deref(), Some("Late."));
    assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5));

    // A transcript the client has not created yet: waited for too.
    let path = dir.path().join("created-late.jsonl");
    let late = path.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(150));
        let lines = prompt("Do the task")
            + "\n"
            + &assistant("m", r#"[{"type":"text","text":"First."}]"#)
            + "\n";
        fs::write(&late, lines).unwrap();
    });
    let (tail, waited) = wait_for_stop(&path, Duration::from_secs(5), Some("First.")).unwrap();
    writer.join().unwrap();
    assert_eq!(tail.final_message.as_deref(), Some("First."));
    assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(5));
    // One that never appears: the same bounded wait, then the error.
    let missing = dir.path().join("never.jsonl");
    let started = Instant::now();
    let error = wait_for_stop(&missing, Duration::from_millis(200), None).unwrap_err();
    assert!(matches!(error, TranscriptError::Io { .. }), "{error}");
    assert!(started.elapsed() >= Duration::from_millis(200));

    // A transcript that never catches up: the wait is bounded.
    let path = write(&dir, (prompt("Do the task") + "\n").as_bytes());
    let (tail, waited) = wait_for_stop(&path, Duration::from_millis(200), None).unwrap();
    assert!(!tail.caught_up);
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(2));
    // The stop's own message is expected: an older final message is not it.
    let path = write(
        &dir,
        (prompt("Go") + "\n" + &assistant("m", r#"[{"type":"text","text":"Old."}]"#) + "\n")
            .as_bytes(),
    );
    let (tail, _) = wait_for_stop(&path, Duration::from_millis(100), Some("New.")).unwrap();
    assert!(tail.caught_up);
    let (_, waited) = wait_for_stop(&path, Duration::from_millis(100), Some(" Old.\n")).unwrap();
    assert!(waited < Duration::from_millis(100));
}
