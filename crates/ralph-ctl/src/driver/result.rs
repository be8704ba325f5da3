//! The object `claude -p --output-format json` prints when it ends: whether
//! the run failed and how (`api_error_status`, `subtype`,
//! `terminal_reason`), what it cost by the client's own accounting, and
//! the tool calls it refused for lack of permission.

use ralph_core::judge::errors::Refusal;
use ralph_core::judge::state::WindowUse;
use ralph_core::observe::usage::plausible_reset;
use ralph_core::time::Timestamp;
use ralph_core::units::PerMille;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The fields of the client's result object the supervisor reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub(crate) struct ClientResult {
    /// True when the run ended on an error.
    #[serde(default)]
    pub(crate) is_error: bool,
    /// `success`, `error_max_budget_usd`, `error_during_execution`, …
    #[serde(default)]
    pub(crate) subtype: Option<String>,
    /// `completed`, `api_error`, `budget_exhausted`, … (2.1 and later).
    #[serde(default)]
    pub(crate) terminal_reason: Option<String>,
    /// The HTTP status of the request that failed.
    #[serde(default)]
    pub(crate) api_error_status: Option<u16>,
    /// What the run cost.
    #[serde(default)]
    pub(crate) total_cost_usd: Option<f64>,
    /// The session.
    #[serde(default)]
    pub(crate) session_id: Option<String>,
    /// The last answer, or the error text.
    #[serde(default)]
    pub(crate) result: Option<String>,
    /// The tool calls the client refused for lack of permission
    /// (`permission_denials`: `tool_name`, `tool_use_id`, `tool_input`, on
    /// 2.0.77 and 2.1.330 alike); `None` when the result has no such list.
    /// An entry of another shape is kept as a refusal of an unknown call.
    #[serde(default, deserialize_with = "denials")]
    pub(crate) permission_denials: Option<Vec<Refusal>>,
    /// When the plan's limit that refused the run resets (Unix seconds):
    /// from the stream's last `rate_limit_event` with status `rejected`,
    /// which a subscription's 2.1 client writes instead of retrying (its
    /// result says only "You've hit your 5-hour limit · resets Dec 1,
    /// 1:48am (UTC)"). Not in the result object: see [`parse_stream`].
    #[serde(skip)]
    pub(crate) limit_resets_at: Option<u64>,
    /// Why the client would not start at all (2.1.330:
    /// `sandbox_required_unavailable` when `--settings` fails its
    /// validation and `sandbox.failIfUnavailable` is set), its words in
    /// `errors`: a configuration no retry changes.
    #[serde(default, deserialize_with = "text")]
    pub(crate) startup_failure_reason: Option<String>,
    /// The client's words for an error with no turn (`errors`, a list of
    /// strings; anything else in it is left out).
    #[serde(default, deserialize_with = "texts")]
    pub(crate) errors: Vec<String>,
}

/// A string, or nothing (a field of another type is no failed parse).
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Value::deserialize(d)?.as_str().map(str::to_string))
}

/// The strings of a list, or none.
fn texts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let value = Value::deserialize(d)?;
    Ok(value
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default())
}

/// Reads `permission_denials` leniently: a list of anything (a field of the
/// wrong type is no refusal list, never a failed parse of the result).
fn denials<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Refusal>>, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    let Some(list) = value.as_array() else {
        return Ok(None);
    };
    Ok(Some(
        list.iter()
            .map(|entry| {
                let input = &entry["tool_input"];
                // What the call asked for: a shell command, else a file.
                let target = ["command", "file_path", "notebook_path", "path", "url"]
                    .iter()
                    .find_map(|key| input[key].as_str());
                Refusal {
                    tool_use_id: entry["tool_use_id"].as_str().map(str::to_string),
                    ..Refusal::of_call(entry["tool_name"].as_str().unwrap_or_default(), target)
                }
            })
            .collect(),
    ))
}

impl ClientResult {
    /// The client's words when it refused to start on its configuration
    /// (`startup_failure_reason`): no turn ran, and none would on a retry.
    pub(crate) fn refused_to_start(&self) -> Option<String> {
        let reason = self.startup_failure_reason.as_deref()?;
        let words = if self.errors.is_empty() {
            self.result.clone().unwrap_or_else(|| reason.to_string())
        } else {
            self.errors.join("; ")
        };
        Some(words.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    /// The client's words when it has no login at all: an error result
    /// ending in "Please run /login" (2.1.330: "Not logged in · Please run
    /// /login"; 2.0.77: "Invalid API key · Please run /login"), which no
    /// retry changes.
    pub(crate) fn not_logged_in(&self) -> Option<String> {
        let words = self.result.as_deref()?.trim();
        (self.is_error && words.ends_with("Please run /login") && words.len() < 200)
            .then(|| ralph_core::text::printable(words).into_owned())
    }

    /// True when the run stopped because `--max-budget-usd` was spent.
    pub(crate) fn budget_spent(&self) -> bool {
        self.subtype.as_deref() == Some("error_max_budget_usd")
            || self.terminal_reason.as_deref() == Some("budget_exhausted")
    }
}

/// The last result object in the client's output (`type: "result"`), if any.
pub(crate) fn parse(output: &[u8]) -> Option<ClientResult> {
    #[derive(Deserialize)]
    struct Kind {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    output
        .split(|&b| b == b'\n')
        .rev()
        .filter(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
        .find_map(|line| {
            let kind: Kind = serde_json::from_slice(line).ok()?;
            if kind.kind.as_deref() != Some("result") {
                return None;
            }
            serde_json::from_slice(line).ok()
        })
}

/// [`parse`], with the reset of a limit that refused the run read from
/// the stream around it ([`ClientResult::limit_resets_at`]), at `now`.
pub(crate) fn parse_stream(output: &[u8], now: Timestamp) -> Option<ClientResult> {
    let mut result = parse(output)?;
    result.limit_resets_at = output
        .split(|&b| b == b'\n')
        .filter(|line| {
            line.windows(b"rate_limit_event".len())
                .any(|w| w == b"rate_limit_event")
        })
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(|event| {
            event["type"] == "rate_limit_event" && event["rate_limit_info"]["status"] == "rejected"
        })
        .filter_map(|event| {
            let at = event["rate_limit_info"]["resetsAt"].as_f64()?;
            plausible_reset(at, now.secs())
        })
        .next_back();
    Some(result)
}

/// The plan's usage windows the client reported in its stream-json output
/// (`rate_limit_event` lines, which a subscription's 2.1 client writes
/// after a response carrying `anthropic-ratelimit-unified-*` headers): the
/// last seen of each window by name (`five_hour`, `seven_day`), read at
/// `now`. A window without a share from 0 to 1 is left out; a reset that
/// is no plausible time ([`plausible_reset`]: more than a week and a day
/// ahead, say) is dropped; so is a line that is not such an event.
pub(crate) fn usage_windows(
    output: &[u8],
    now: Timestamp,
) -> std::collections::BTreeMap<String, WindowUse> {
    let mut windows = std::collections::BTreeMap::new();
    let reset = |value: &Value| {
        value
            .as_f64()
            .and_then(|t| plausible_reset(t, now.secs()))
            .map(Timestamp::from_secs)
    };
    for line in output.split(|&b| b == b'\n') {
        if !line
            .windows(b"rate_limit_event".len())
            .any(|w| w == b"rate_limit_event")
        {
            continue;
        }
        let Ok(event) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if event["type"] != "rate_limit_event" {
            continue;
        }
        let info = &event["rate_limit_info"];
        let mut seen = |name: &str, window: &Value| {
            let Some(utilization) = window["utilization"].as_f64().and_then(PerMille::of) else {
                return;
            };
            windows.insert(
                name.to_string(),
                WindowUse {
                    utilization,
                    resets_at: reset(&window["resetsAt"]),
                    seen_at: now,
                },
            );
        };
        if let Some(each) = info["unifiedWindows"].as_object() {
            for (name, window) in each {
                seen(name, window);
            }
        } else if let Some(name) = info["rateLimitType"].as_str() {
            seen(name, info);
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_without_a_login_says_so_in_its_result() {
        // As both clients wrote it with no login at all (`HOME` a new
        // folder, no ANTHROPIC_API_KEY), trimmed; both exit 1.
        let v2_1 = r#"{"type":"result","subtype":"success","is_error":true,"duration_api_ms":0,"num_turns":1,"result":"Not logged in · Please run /login","terminal_reason":"api_error"}"#;
        let v2_0 = r#"{"type":"result","subtype":"success","is_error":true,"duration_api_ms":0,"num_turns":1,"result":"Invalid API key · Please run /login"}"#;
        for (out, words) in [
            (v2_1, "Not logged in · Please run /login"),
            (v2_0, "Invalid API key · Please run /login"),
        ] {
            assert_eq!(
                parse(out.as_bytes()).unwrap().not_logged_in().as_deref(),
                Some(words)
            );
        }
        // A key the API refused is another matter (the key is there).
        let refused = r#"{"type":"result","is_error":true,"result":"Invalid API key · Fix external API key"}"#;
        assert_eq!(parse(refused.as_bytes()).unwrap().not_logged_in(), None);
        let answer = r#"{"type":"result","is_error":false,"result":"Please run /login"}"#;
        assert_eq!(parse(answer.as_bytes()).unwrap().not_logged_in(), None);
    }

    #[test]
    fn a_client_that_refused_to_start_says_why() {
        // As 2.1.330 wrote it for a --settings whose sandbox failed its
        // validation, with `sandbox.failIfUnavailable` (trimmed).
        let out = br#"{"type":"result","subtype":"error_during_execution","duration_ms":0,"is_error":true,"num_turns":0,"stop_reason":null,"total_cost_usd":0,"errors":["Sandbox required but unavailable: the settings passed with --settings or the SDK's settings option configure the sandbox but failed validation, so none of them apply (sandbox.filesystem.allowWrite: Expected array, but received string). Fix them and start again."],"startup_failure_reason":"sandbox_required_unavailable"}
"#;
        let result = parse(out).unwrap();
        let words = result.refused_to_start().unwrap();
        assert!(
            words.starts_with("Sandbox required but unavailable")
                && words.contains("Expected array, but received string"),
            "{words}"
        );
        // An error of a run that started is no refusal to start.
        let api = br#"{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"num_turns":1}"#;
        assert_eq!(parse(api).unwrap().refused_to_start(), None);
    }

    #[test]
    fn a_limit_that_refused_the_run_gives_its_reset() {
        // As 2.1.330 wrote it on a subscription login refused by a limit
        // (`-p --output-format stream-json --verbose`), trimmed.
        let now = Timestamp::from_secs(1_795_830_000);
        let out = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","isUsingOverage":false}}
{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1796089689,"rateLimitType":"five_hour","isUsingOverage":false}}
{"type":"assistant","message":{"model":"<synthetic>","content":[{"type":"text","text":"You've hit your 5-hour limit, resets Dec 1, 1:48am (UTC)"}]}}
{"type":"result","subtype":"success","is_error":true,"api_error_status":429,"api_error":"usage_limit_reached","terminal_reason":"api_error","result":"You've hit your 5-hour limit"}
"#;
        let result = parse_stream(out, now).unwrap();
        assert_eq!(result.limit_resets_at, Some(1_796_089_689));
        assert_eq!(result.api_error_status, Some(429));
        // Allowed, or a reset no limit has: none.
        let allowed = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1796089689}}
{"type":"result","is_error":true,"api_error_status":429}
"#;
        assert_eq!(parse_stream(allowed, now).unwrap().limit_resets_at, None);
        let absurd = br#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":32503680000}}
{"type":"result","is_error":true,"api_error_status":429}
"#;
        assert_eq!(parse_stream(absurd, now).unwrap().limit_resets_at, None);
    }

    #[test]
    fn reads_the_last_utilization_of_each_window() {
        // As 2.1.330 wrote it (`-p --output-format stream-json --verbose`,
        // a subscription's login, the mock's 5h headers at 0.85).
        let out = br#"{"type":"system","subtype":"init"}
{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1795345200,"rateLimitType":"five_hour","isUsingOverage":false,"unifiedWindows":{"five_hour":{"utilization":0.5,"resetsAt":1795345200,"status":"allowed"}}}}
{"type":"rate_limit_event","rate_limit_info":{"status":"allowed","resetsAt":1795345200,"rateLimitType":"five_hour","isUsingOverage":false,"unifiedWindows":{"five_hour":{"utilization":0.85,"resetsAt":1795345200,"status":"allowed_warning"},"seven_day":{"utilization":0.2,"resetsAt":1795900000.5}}}}
{"type":"rate_limit_event","rate_limit_info":{"rateLimitType":"seven_day","utilization":7}}
not json rate_limit_event
{"type":"result","subtype":"success"}
"#;
        let now = Timestamp::from_secs(1_795_341_600);
        let windows = usage_windows(out, now);
        assert_eq!(windows.len(), 2, "{windows:?}");
        let five = &windows["five_hour"];
        assert_eq!(five.utilization, PerMille(850));
        assert_eq!(five.resets_at, Some(Timestamp::from_secs(1_795_345_200)));
        assert_eq!(five.seen_at, now);
        assert_eq!(windows["seven_day"].utilization, PerMille(200));
        assert!(usage_windows(b"", now).is_empty());
        // Only the top-level shape: the window it names.
        let plain = br#"{"type":"rate_limit_event","rate_limit_info":{"rateLimitType":"five_hour","utilization":0.9,"resetsAt":1e300}}"#;
        let windows = usage_windows(plain, now);
        assert_eq!(windows["five_hour"].utilization, PerMille(900));
        assert_eq!(windows["five_hour"].resets_at, None, "no plausible time");
        // Nine days ahead is further than any window of the plan.
        let far = format!(
            r#"{{"type":"rate_limit_event","rate_limit_info":{{"rateLimitType":"seven_day","utilization":0.9,"resetsAt":{}}}}}"#,
            1_795_341_600 + 9 * 24 * 3600
        );
        assert_eq!(
            usage_windows(far.as_bytes(), now)["seven_day"].resets_at,
            None
        );
    }

    #[test]
    fn reads_the_refused_calls() {
        // As 2.1.330 and 2.0.77 wrote it (`-p --output-format json`, acceptEdits).
        let out = br#"{"type":"result","subtype":"success","is_error":false,"result":"done","permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_mock_0","tool_input":{"command":"python3 -m unittest","description":"Run a command"}},{"tool_name":"Write","tool_use_id":"toolu_mock_10","tool_input":{"file_path":"/tmp/p/outside2.txt","content":"x\n"}}]}"#;
        let denied = parse(out).unwrap().permission_denials.unwrap();
        assert_eq!(denied.len(), 2);
        assert_eq!(denied[0].call(), "Bash(python3 -m unittest)");
        assert_eq!(denied[0].tool_use_id.as_deref(), Some("toolu_mock_0"));
        assert_eq!(denied[1].call(), "Write(/tmp/p/outside2.txt)");
        let none = parse(br#"{"type":"result","permission_denials":[]}"#).unwrap();
        assert_eq!(none.permission_denials, Some(vec![]));
        // A list of the wrong shape is no list; the rest of the result is read.
        let odd =
            parse(br#"{"type":"result","total_cost_usd":0.5,"permission_denials":"x"}"#).unwrap();
        assert_eq!(
            (odd.permission_denials, odd.total_cost_usd),
            (None, Some(0.5))
        );
        let strange =
            parse(br#"{"type":"result","permission_denials":[7,{"tool_name":3}]}"#).unwrap();
        assert_eq!(strange.permission_denials.unwrap().len(), 2);
    }

    #[test]
    fn reads_the_last_result_object() {
        let out = br#"{"type":"system","subtype":"init"}
{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"terminal_reason":"api_error","total_cost_usd":0.0123,"session_id":"s","result":"API Error: 529 Overloaded"}
"#;
        let r = parse(out).unwrap();
        assert!(r.is_error);
        assert_eq!(r.api_error_status, Some(529));
        assert_eq!(r.total_cost_usd, Some(0.0123));
        assert!(!r.budget_spent());
        let spent = parse(br#"{"type":"result","subtype":"error_max_budget_usd","is_error":false,"total_cost_usd":1.2}"#).unwrap();
        assert!(spent.budget_spent());
        assert_eq!(r.permission_denials, None, "2.1 results without the list");
        assert_eq!(parse(b"not json\n"), None);
        assert_eq!(parse(b""), None);
    }
}
