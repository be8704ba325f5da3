//! The usage reader (requests, tokens and the last `api_error` line of a
//! transcript, which the agent can write) on any file, and what a stop then
//! does with an API error's reset time. Nothing may panic, and a reset time
//! that is believed lies within the window a real usage limit has.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ralph_core::observe::usage::{self, MAX_RESET_AHEAD_SECS};
use ralph_core::time;

/// The time the readings are made at (a fixed one: the same input, the same result).
const NOW: u64 = 1_790_000_000;

/// One file per fuzzing process, written for every input and then removed.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("ralph-fuzz-usage-{}.jsonl", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).unwrap();
    let reading = usage::read_new(path, None, NOW).unwrap();
    std::fs::remove_file(path).unwrap();
    if let Some(error) = &reading.last_api_error {
        if let Some(at) = error.resets_at {
            assert!(at <= NOW + MAX_RESET_AHEAD_SECS, "{at}");
            // What a pause records as its resume time, and reads back.
            let written = time::rfc3339_of_secs(at);
            assert_eq!(time::epoch_secs(&written), Some(at));
        }
    }
});
