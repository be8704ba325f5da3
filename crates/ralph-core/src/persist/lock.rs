//! The one way ralph waits for an exclusive lock: `flock` tried again with
//! a short backoff (1 ms doubling to 20 ms) until a deadline, so a stuck
//! holder is named instead of waited on forever.

use std::fs::File;
use std::io;
use std::thread;
use std::time::{Duration, Instant};

use fs2::FileExt;

/// Takes an exclusive lock on `file`, trying until `deadline`: `Ok(true)`
/// when taken (released when the file is closed or unlocked), `Ok(false)`
/// when someone else still held it at the deadline.
pub fn exclusive_until(file: &File, deadline: Instant) -> io::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock_exclusive() {
            Ok(()) => return Ok(true),
            Err(e)
                if e.kind() == fs2::lock_contended_error().kind()
                    || e.kind() == io::ErrorKind::WouldBlock =>
            {
                if Instant::now() >= deadline {
                    return Ok(false);
                }
                thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_is_waited_for_until_the_deadline_then_taken_once_free() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("l");
        let holder = File::create(&path).unwrap();
        assert!(exclusive_until(&holder, Instant::now()).unwrap());
        let other = File::open(&path).unwrap();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(50);
        assert!(!exclusive_until(&other, deadline).unwrap());
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(holder);
        assert!(exclusive_until(&other, Instant::now() + Duration::from_secs(5)).unwrap());
    }
}
