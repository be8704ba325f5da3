//! The reading without git: a bounded scan of every file's stamp, skipping
//! `SCAN_IGNORES`.

use super::*;

/// Every file below `root` with its stamp, skipping [`SCAN_IGNORES`]; folders
/// in name order, so that a scan stopped at the limit always covers the same
/// files of an unchanged tree. `None` when `root` cannot be read or the scan
/// runs out of time.
pub(super) fn scan(root: &Path, limits: Limits) -> Option<Listing> {
    let started = Instant::now();
    let mut listing = Listing::new(Method::Scan);
    let mut stack: Vec<(PathBuf, Vec<u8>)> = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, relative)) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if relative.is_empty() => return None, // the project folder itself
            Err(_) => continue,
        };
        let mut entries: Vec<(std::ffi::OsString, fs::DirEntry)> =
            entries.flatten().map(|e| (e.file_name(), e)).collect();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut folders = Vec::new();
        for (name, entry) in entries {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let mut path = relative.clone();
            path.extend_from_slice(&path_bytes(Path::new(&name)));
            if kind.is_dir() {
                if !SCAN_IGNORES.iter().any(|i| name == **i) {
                    path.push(b'/');
                    folders.push((entry.path(), path));
                }
                continue;
            }
            if listing.digest.count >= limits.scan_files as u64 {
                listing.truncated = true;
                return Some(listing);
            }
            if listing.digest.count % 1024 == 1023 && started.elapsed() > limits.scan_time {
                return None;
            }
            let stamp = entry.metadata().map_or(ABSENT, |m| stamp_of(&m));
            listing.add(&path, stamp);
        }
        // Popped in name order.
        stack.extend(folders.into_iter().rev());
    }
    Some(listing)
}
