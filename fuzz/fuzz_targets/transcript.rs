//! The transcript's iteration reader on any file. The first three bytes choose
//! small bounds (so lines span chunks, some are over the line limit, some
//! scans stop early); the rest is written to a temp file, which is read
//! with the real bounds and with the small ones. Both must agree with the
//! reference that reads the whole file forward. The seeds in
//! `seeds/transcript/` are transcripts behind such a three-byte header.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use ralph_core::observe::transcript::{self, testing, CHUNK_BYTES, MAX_LINE_BYTES, MAX_SCAN_BYTES};

/// One file per fuzzing process, written for every input and then removed;
/// in memory (/dev/shm) when there is one, several times faster than a disk.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!(
            "ralph-fuzz-transcript-{}.jsonl",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let (bounds, content) = data.split_at(data.len().min(3));
    let small = match *bounds {
        [a, b, c] => {
            // At most about 128 chunks, so that large inputs stay fast.
            let chunk = (usize::from(a % 64) + 1).max(content.len() / 128);
            let max_line = match b {
                255 => usize::MAX,
                b => chunk + usize::from(b) * 4,
            };
            let max_scan = match c {
                128.. => u64::MAX,
                c => u64::from(c) * 16 + 1,
            };
            Some((chunk, max_line, max_scan))
        }
        _ => None,
    };

    let path = scratch();
    std::fs::write(path, content).unwrap();
    let real = transcript::read_iteration_tail(path).unwrap();
    let with_small = small.map(|(chunk, max_line, max_scan)| {
        testing::read_iteration_tail_with(path, chunk, max_line, max_scan).unwrap()
    });
    std::fs::remove_file(path).unwrap();

    assert_eq!(
        real,
        testing::reference(content, CHUNK_BYTES, MAX_LINE_BYTES, MAX_SCAN_BYTES)
    );
    if let (Some((chunk, max_line, max_scan)), Some(got)) = (small, with_small) {
        assert_eq!(got, testing::reference(content, chunk, max_line, max_scan));
    }
});
