//! `protectedPaths`: files a completion claim may not have changed since
//! the loop started (the project's tests, typically). At the start, every
//! file matching the globs is listed with a hash of its content; at a
//! claim, the same globs are listed again and compared. Content, not
//! git: it works without git, without a first commit, and whatever the
//! agent committed, added or deleted meanwhile.
//!
//! Globs, relative to the project root, in the manner of `.gitignore`: `*`
//! and `?` within a name, `**` for any number of folders; a glob with a
//! `/` (other than a trailing one) is anchored at the root, one without
//! matches a name at any depth; a glob that matches a folder covers
//! everything in it (`tests`, `spec/`, `src/**/*_test.go`, `*_test.go`).
//!
//! Bounded: at most [`WALK_LIMIT`] entries visited and [`WALK_TIME`] spent,
//! at most [`HASHED_BYTES`] read of each file; at most [`MAX_LISTED`]
//! files kept by name, past that a digest of them all.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::fnv::Fnv;
use crate::observe::progress::SCAN_IGNORES;

/// Entries (files and folders) visited at most.
pub const WALK_LIMIT: usize = 50_000;
/// Time a listing may take.
pub const WALK_TIME: Duration = Duration::from_secs(5);
/// Bytes of a file hashed (with its size, for a longer one).
pub const HASHED_BYTES: u64 = 16 * 1024 * 1024;
/// Protected files kept by name in the state; past that, only a digest.
pub const MAX_LISTED: usize = 2_000;

/// The protected files at the loop's start (`protectedFiles` in the state).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProtectedSnapshot {
    /// The globs, as `protectedPaths` said at the start: the claim is
    /// compared over the same ones.
    pub patterns: Vec<String>,
    /// Path (relative, `/`-separated) → content hash (16 hex digits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// With more than [`MAX_LISTED`] files: their count and one hash of all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Whether `path` (relative, `/`-separated) is covered by `pattern`.
pub fn matches(pattern: &str, path: &str) -> bool {
    let pattern = pattern.trim().trim_start_matches("./");
    let pattern = pattern.trim_end_matches('/');
    let anchored = pattern.starts_with('/') || pattern.contains('/');
    let pattern: Vec<&str> = pattern
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    if pattern.is_empty() {
        return false;
    }
    let path: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if anchored {
        segments_match(&pattern, &path)
    } else {
        (0..path.len()).any(|start| segments_match(&pattern, &path[start..]))
    }
}

/// `pattern`'s segments against a prefix of `path`'s (a folder covers its content).
fn segments_match(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => true,
        Some((&"**", rest)) => (0..=path.len()).any(|skip| segments_match(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, path_rest)) => {
                name_matches(first.as_bytes(), name.as_bytes()) && segments_match(rest, path_rest)
            }
            None => false,
        },
    }
}

/// `*` and `?` within one name.
fn name_matches(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && (pattern[p] == b'?' || pattern[p] == name[n]) {
            p += 1;
            n += 1;
        } else if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// The files under `patterns` with their content hashes; `None` when there
/// are no patterns, or the project cannot be listed in time.
pub fn snapshot(root: &Path, patterns: &[String]) -> Option<ProtectedSnapshot> {
    if patterns.is_empty() {
        return None;
    }
    let files = list(root, patterns)?;
    let mut snapshot = ProtectedSnapshot {
        patterns: patterns.to_vec(),
        ..Default::default()
    };
    if files.len() > MAX_LISTED {
        snapshot.digest = Some(digest(&files));
    } else {
        snapshot.files = files;
    }
    Some(snapshot)
}

/// The protected files changed, added or removed since `before` (over its
/// own globs), sorted; `None` when the project cannot be listed in time.
pub fn changes(root: &Path, before: &ProtectedSnapshot) -> Option<Vec<String>> {
    let now = list(root, &before.patterns)?;
    if let Some(old) = &before.digest {
        return Some(if *old == digest(&now) {
            Vec::new()
        } else {
            vec![format!(
                "some of the {} files under {}",
                now.len(),
                before.patterns.join(", ")
            )]
        });
    }
    let mut changed: Vec<String> = now
        .iter()
        .filter(|(path, hash)| before.files.get(*path) != Some(hash))
        .map(|(path, _)| path.clone())
        .collect();
    changed.extend(
        before
            .files
            .keys()
            .filter(|path| !now.contains_key(*path))
            .map(|path| format!("{path} (removed)")),
    );
    changed.sort();
    Some(changed)
}

/// Every file under `patterns` → its hash.
fn list(root: &Path, patterns: &[String]) -> Option<BTreeMap<String, String>> {
    let started = Instant::now();
    let mut visited = 0usize;
    let mut files = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(relative) = stack.pop() {
        let dir = if relative.is_empty() {
            root.to_path_buf()
        } else {
            root.join(&relative)
        };
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(_) if relative.is_empty() => return None,
            Err(_) => continue,
        };
        for entry in entries.flatten() {
            visited += 1;
            if visited > WALK_LIMIT || started.elapsed() > WALK_TIME {
                return None;
            }
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let path = if relative.is_empty() {
                name.to_string()
            } else {
                format!("{relative}/{name}")
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                if !SCAN_IGNORES.contains(&name) {
                    stack.push(path);
                }
            } else if patterns.iter().any(|p| matches(p, &path)) {
                files.insert(path, hash_file(&entry.path(), kind.is_symlink()));
            }
        }
    }
    Some(files)
}

/// FNV-1a over the file's first [`HASHED_BYTES`] and its size (a symbolic
/// link: over where it points).
fn hash_file(path: &Path, symlink: bool) -> String {
    let mut hash = Fnv::default();
    if symlink {
        hash.bytes(b"link:");
        if let Ok(target) = fs::read_link(path) {
            hash.bytes(target.to_string_lossy().as_bytes());
        }
        return format!("{:016x}", hash.finish());
    }
    match crate::observe::files::open_without_waiting(path) {
        Ok(file) => {
            let size = file.metadata().map(|m| m.len()).unwrap_or(0);
            hash.bytes(&size.to_le_bytes());
            let mut reader = file.take(HASHED_BYTES);
            let mut buf = [0u8; 64 * 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                hash.bytes(&buf[..n]);
            }
        }
        Err(_) => hash.bytes(b"unreadable"),
    }
    format!("{:016x}", hash.finish())
}

fn digest(files: &BTreeMap<String, String>) -> String {
    let mut hash = Fnv::default();
    for (path, file_hash) in files {
        hash.bytes(path.as_bytes());
        hash.bytes(&[0]);
        hash.bytes(file_hash.as_bytes());
    }
    format!("{} files, {:016x}", files.len(), hash.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_gitignore() {
        let cases = [
            ("tests", "tests/test_a.py", true),
            ("tests/", "tests/unit/test_a.py", true),
            ("tests", "pkg/tests/test_a.py", true),
            ("/tests", "pkg/tests/test_a.py", false),
            ("tests", "tests_helper.py", false),
            ("*_test.go", "internal/x/calc_test.go", true),
            ("*_test.go", "internal/x/calc.go", false),
            ("src/**/*_test.go", "src/a/b/c_test.go", true),
            ("src/**/*_test.go", "src/c_test.go", true),
            ("src/**/*_test.go", "lib/src/c_test.go", false),
            ("test_*.py", "test_calc.py", true),
            ("spec/*.rb", "spec/a_spec.rb", true),
            ("spec/*.rb", "spec/models/a_spec.rb", false),
            ("./__tests__", "__tests__/a.test.js", true),
            ("t?st", "test/x", true),
            ("**", "anything/at/all", true),
            ("", "x", false),
        ];
        for (pattern, path, want) in cases {
            assert_eq!(matches(pattern, path), want, "{pattern} ~ {path}");
        }
    }

    #[test]
    fn changed_added_and_removed_protected_files_are_named() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path();
        for (path, text) in [
            ("tests/test_a.py", "a"),
            ("tests/test_b.py", "b"),
            ("src/calc.py", "c"),
            ("node_modules/tests/x.js", "x"),
        ] {
            fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            fs::write(root.join(path), text).unwrap();
        }
        let patterns = vec!["tests".to_string()];
        let before = snapshot(root, &patterns).unwrap();
        assert_eq!(
            before.files.keys().collect::<Vec<_>>(),
            ["tests/test_a.py", "tests/test_b.py"],
            "ignored folders are not walked"
        );
        assert_eq!(changes(root, &before), Some(vec![]));
        // Outside the globs: not a change.
        fs::write(root.join("src/calc.py"), "fixed").unwrap();
        assert_eq!(changes(root, &before), Some(vec![]));
        // Same size, other content; one removed; one added.
        fs::write(root.join("tests/test_a.py"), "A").unwrap();
        fs::remove_file(root.join("tests/test_b.py")).unwrap();
        fs::write(root.join("tests/test_c.py"), "c").unwrap();
        assert_eq!(
            changes(root, &before),
            Some(vec![
                "tests/test_a.py".to_string(),
                "tests/test_b.py (removed)".to_string(),
                "tests/test_c.py".to_string(),
            ])
        );
        assert_eq!(snapshot(root, &[]), None);
    }
}
