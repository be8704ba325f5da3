//! A real headless Chromium, driven by puppeteer-core through
//! `tests/browser/driver.mjs`: one JSON command per call, each wait bounded.
//! The browser is the one `tests/install-browser.sh` gives
//! (`RALPH_TEST_BROWSER`), the driver the one `tests/install-puppeteer.sh`
//! installs (`RALPH_PUPPETEER`; installed on first use when unset).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

use crate::bins::workspace_root;
use crate::project::{TempProject, kill_group};

/// A running browser with one page.
pub struct Browser {
    child: Child,
    stdin: Option<ChildStdin>,
    answers: Receiver<String>,
}

/// The folder of puppeteer-core's `node_modules`: `RALPH_PUPPETEER`, else
/// what `tests/install-puppeteer.sh` installs (or finds) in `.cache/`.
fn puppeteer_dir() -> String {
    if let Ok(dir) = std::env::var("RALPH_PUPPETEER") {
        return dir;
    }
    let out = Command::new(workspace_root().join("tests/install-puppeteer.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("tests/install-puppeteer.sh runs");
    assert!(out.status.success(), "puppeteer-core is not installed");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Browser {
    /// Starts Chromium with a fresh profile in `project`'s temp folder.
    pub fn start(project: &TempProject) -> Browser {
        let profile = project.path("../tmp/browser-profile");
        let mut child = Command::new("node")
            .arg(workspace_root().join("tests/browser/driver.mjs"))
            .env("RALPH_PUPPETEER", puppeteer_dir())
            .env(
                "RALPH_TEST_BROWSER",
                std::env::var("RALPH_TEST_BROWSER").unwrap_or_else(|_| "chromium".into()),
            )
            .env("RALPH_BROWSER_PROFILE", &profile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("node runs the browser driver");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap();
        let (send, answers) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Browser {
            child,
            stdin,
            answers,
        }
    }

    /// Runs one driver command (`{"op": …}`); its value, or what went wrong.
    pub fn call(&mut self, command: Value) -> Result<Value, String> {
        let timeout = command["timeout"].as_u64().unwrap_or(10_000);
        let stdin = self.stdin.as_mut().expect("the driver runs");
        writeln!(stdin, "{command}").map_err(|e| format!("the driver is gone: {e}"))?;
        stdin.flush().map_err(|e| e.to_string())?;
        // The driver's own bound, and room for the browser to start.
        let line = self
            .answers
            .recv_timeout(Duration::from_millis(timeout) + Duration::from_secs(30))
            .map_err(|_| format!("no answer to {command}"))?;
        let answer: Value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        if answer["ok"] == true {
            Ok(answer["value"].clone())
        } else {
            Err(answer["error"].as_str().unwrap_or("failed").to_string())
        }
    }

    /// [`Browser::call`] that panics with what went wrong.
    pub fn must(&mut self, command: Value) -> Value {
        let shown = command.to_string();
        self.call(command)
            .unwrap_or_else(|e| panic!("browser: {shown}: {e}"))
    }

    /// Opens `url`; the page's HTTP status.
    pub fn open(&mut self, url: &str) -> u64 {
        self.must(json!({"op": "open", "url": url, "timeout": 20_000}))
            .as_u64()
            .unwrap_or(0)
    }

    /// Waits up to `timeout` for `selector`'s text to contain `text`; its text.
    pub fn wait_text(&mut self, selector: &str, text: &str, timeout: Duration) -> String {
        let value = self.must(json!({
            "op": "waitText", "selector": selector, "text": text,
            "timeout": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        }));
        value.as_str().unwrap_or_default().to_string()
    }

    /// Types `text` into `selector`.
    pub fn type_in(&mut self, selector: &str, text: &str) {
        self.must(json!({"op": "type", "selector": selector, "text": text}));
    }

    /// Clicks `selector`.
    pub fn click(&mut self, selector: &str) {
        self.must(json!({"op": "click", "selector": selector}));
    }

    /// The value of `expression` in the page.
    pub fn eval(&mut self, expression: &str) -> Value {
        self.must(json!({"op": "eval", "expression": expression}))
    }

    /// Lays the page out `width` px wide, `height` px shown at once.
    pub fn viewport(&mut self, width: u32, height: u32) {
        self.must(json!({"op": "viewport", "width": width, "height": height}));
    }

    /// The height of the page's content, in px, as laid out now (however
    /// little of the window it fills).
    pub fn height(&mut self) -> u64 {
        self.eval("Math.ceil(document.body.getBoundingClientRect().bottom + window.scrollY)")
            .as_u64()
            .unwrap_or(0)
    }

    /// A PNG of the whole page at `path`.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        let path = path.to_str().expect("a path in UTF-8");
        self.must(json!({"op": "screenshot", "path": path, "timeout": 20_000}));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Its stdin closed, the driver closes the browser; whatever is
        // left of the group after a moment is killed.
        drop(self.stdin.take());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        kill_group(self.child.id());
        let _ = self.child.wait();
    }
}
