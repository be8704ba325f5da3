//! The object `claude -p --output-format json` prints when it ends: whether
//! the run failed and how (`api_error_status`, `subtype`,
//! `terminal_reason`), and what it cost by the client's own accounting.

use serde::Deserialize;

/// The fields of the client's result object the supervisor reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
pub struct ClientResult {
    /// True when the run ended on an error.
    #[serde(default)]
    pub is_error: bool,
    /// `success`, `error_max_budget_usd`, `error_during_execution`, …
    #[serde(default)]
    pub subtype: Option<String>,
    /// `completed`, `api_error`, `budget_exhausted`, … (2.1 and later).
    #[serde(default)]
    pub terminal_reason: Option<String>,
    /// The HTTP status of the request that failed.
    #[serde(default)]
    pub api_error_status: Option<u16>,
    /// What the run cost.
    #[serde(default)]
    pub total_cost_usd: Option<f64>,
    /// The session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// The last answer, or the error text.
    #[serde(default)]
    pub result: Option<String>,
}

impl ClientResult {
    /// True when the run stopped because `--max-budget-usd` was spent.
    pub fn budget_spent(&self) -> bool {
        self.subtype.as_deref() == Some("error_max_budget_usd")
            || self.terminal_reason.as_deref() == Some("budget_exhausted")
    }
}

/// The last result object in the client's output (`type: "result"`), if any.
pub fn parse(output: &[u8]) -> Option<ClientResult> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(parse(b"not json\n"), None);
        assert_eq!(parse(b""), None);
    }
}
