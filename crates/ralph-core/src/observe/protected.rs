//! `protectedPaths`: files a completion claim may not have changed since
//! the loop started (the project's tests, typically). At the start, every
//! file matching the globs is listed with a hash of its content; at a
//! claim, the same globs are listed again and compared. Content, not
//! git: it works without git, without a first commit, and whatever the
//! agent committed, added or deleted meanwhile.
//!
//! What is judged is change, not addition: a file listed at the start may
//! not change or vanish, and a new file under the globs (a test the agent
//! wrote for its fix) is free. The test runners' configuration counts as
//! protected with them ([`RUNNER_CONFIG`]): `conftest.py`, `pytest.ini`
//! (and `.pytest.ini`, `pytest.toml`, `.pytest.toml`),
//! `tox.ini`, `jest.config.*`, `vitest.config.*`, `.mocharc.*` and karma's
//! at the project root or under a protected folder, whole, added ones too
//! (a new root `conftest.py` can pass every test as surely as an edited
//! one); of `pyproject.toml` and `setup.cfg` at the root only the pytest
//! tables (`[tool.pytest…]`, `[tool:pytest]`), so that their dependencies
//! and metadata stay the agent's to edit. Manifests say how tests run too
//! ([`MANIFESTS`]): of every `Cargo.toml` its targets' tables (`[lib]`,
//! `[[test]]`, `[[bin]]`, `[[bench]]`, `[[example]]`: `test = false`
//! switches a target's tests off) and `[package]`'s `auto…` keys
//! (`autotests = false`), of every `package.json` its runners' keys
//! (`jest`, `mocha`, `ava`, `vitest`, `tap`, `c8`, `nyc`), at any depth.
//! Those parts are read as their tools read them (TOML by its tables,
//! dotted keys and inline tables too; INI by its sections) and hashed by
//! their values; a file that does not parse is hashed whole.
//!
//! Globs, relative to the project root, in the manner of `.gitignore`: `*`
//! and `?` within a name, `**` for any number of folders; a glob with a
//! `/` (other than a trailing one) is anchored at the root, one without
//! matches a name at any depth; a glob that matches a folder covers
//! everything in it (`tests`, `spec/`, `src/**/*_test.go`, `*_test.go`).
//!
//! Bounded: at most [`WALK_LIMIT`] entries visited and [`WALK_TIME`] spent,
//! at most [`HASHED_BYTES`] read of each file; at most [`MAX_LISTED`]
//! files kept by name, past that a digest of them all and the time they
//! were listed: at a claim the digest is taken again over the files not
//! modified since (every one that changed has a later time, and is then
//! missing from it) and over the runners' configuration, so a new test
//! file is free there too.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// The names of the test runners' configuration files (globs of one
/// name), protected at the project root and under a protected folder
/// whenever `protectedPaths` names anything: added, changed or removed,
/// each is a change. `pyproject.toml` and `setup.cfg` only in their pytest
/// tables ([`runner_section`]).
pub const RUNNER_CONFIG: &[&str] = &[
    "conftest.py",
    "pytest.ini",
    ".pytest.ini",
    "pytest.toml",
    ".pytest.toml",
    "tox.ini",
    "setup.cfg",
    "pyproject.toml",
    "jest.config.*",
    "vitest.config.*",
    ".mocharc.*",
    "karma.conf.*",
    "karma.config.*",
];

/// Manifests whose test settings are protected wherever they are in the
/// project (a workspace's members too), in those settings only
/// ([`runner_section`]), when the snapshot lists them
/// ([`ProtectedSnapshot::manifests`]).
pub const MANIFESTS: &[&str] = &["Cargo.toml", "package.json"];

/// The keys of `package.json` that configure a test runner.
const PACKAGE_JSON_RUNNER_KEYS: &[&str] = &["jest", "mocha", "ava", "vitest", "tap", "c8", "nyc"];

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
    /// With a digest: the files it covers are those modified at or before
    /// this time (nanoseconds since 1970); a later one is new, or changed
    /// and then missing from it. Absent: every file counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest_before: Option<u64>,
    /// The test runners' configuration is listed too ([`RUNNER_CONFIG`]);
    /// false in a snapshot taken before ralph listed it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub runner_config: bool,
    /// The manifests' test settings are listed too ([`MANIFESTS`]); false
    /// in a snapshot taken before ralph listed them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub manifests: bool,
    /// The protected parts of files ([`runner_section`]) are hashed as
    /// parsed (TOML tables, INI sections); false in a snapshot taken
    /// before, whose hashes of them were of lines: such files are then not
    /// compared (their hashes cannot match), the whole files still are.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub parsed_sections: bool,
}

impl ProtectedSnapshot {
    /// The files listed at the start whose whole content is protected (not
    /// the pytest tables of `pyproject.toml` or `setup.cfg`), sorted; none
    /// past [`MAX_LISTED`], where only a digest was kept.
    pub fn whole_files(&self) -> Vec<&str> {
        self.files
            .keys()
            .filter(|path| self.covers(path) || runner_section(path).is_none())
            .map(String::as_str)
            .collect()
    }

    /// Whether the globs cover `path` (whole), as opposed to the runners'
    /// configuration listed beside them.
    fn covers(&self, path: &str) -> bool {
        self.patterns.iter().any(|p| matches(p, path))
    }
}

/// Whether `path` (relative, `/`-separated) is a test runner's
/// configuration file protected with `patterns`: one of [`RUNNER_CONFIG`]
/// at the project root or under a protected folder.
pub fn is_runner_config(path: &str, patterns: &[String]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    RUNNER_CONFIG
        .iter()
        .any(|glob| name_matches(glob.as_bytes(), name.as_bytes()))
        && (!path.contains('/') || patterns.iter().any(|p| matches(p, path)))
}

/// Whether `path` is one of the [`MANIFESTS`], at any depth.
fn is_manifest(path: &str) -> bool {
    MANIFESTS.contains(&path.rsplit('/').next().unwrap_or(path))
}

/// The part of a file that is protected, when not all of it: how to hash
/// it (`None` when the file has none of it: as if absent), and its name.
type Section = (fn(&Path) -> Option<String>, &'static str);

/// The part of a runner's file or a manifest that is protected, when not
/// all of it: of `pyproject.toml` the `tool.pytest` table, of `setup.cfg`
/// its `[tool:pytest]` section, of a `Cargo.toml` its targets' tables and
/// `package`'s `auto…` keys, of a `package.json` its runners' keys. Read
/// as their tools read them, so that dotted keys, inline tables and
/// quoted keys count as their tables, and a header inside a string does
/// not.
fn runner_section(path: &str) -> Option<Section> {
    match path {
        "pyproject.toml" => Some((
            |file| hash_toml(file, pyproject_pytest),
            "[tool.pytest…] tables",
        )),
        "setup.cfg" => Some((|file| hash_ini(file, "tool:pytest"), "[tool:pytest] table")),
        _ => match path.rsplit('/').next().unwrap_or(path) {
            "Cargo.toml" => Some((
                |file| hash_toml(file, cargo_test_settings),
                "test targets and auto… keys",
            )),
            "package.json" => Some((package_json_runner_keys, "test runner keys")),
            _ => None,
        },
    }
}

/// pytest's settings in `pyproject.toml`: the `tool.pytest` table
/// (`[tool.pytest.ini_options]`, pytest 9's `[tool.pytest]`).
fn pyproject_pytest(manifest: &toml::Table) -> Vec<(String, &toml::Value)> {
    manifest
        .get("tool")
        .and_then(|tool| tool.get("pytest"))
        .map(|pytest| vec![("tool.pytest".to_string(), pytest)])
        .unwrap_or_default()
}

/// What in `Cargo.toml` says how tests are found or run: a target's table
/// whole (`[lib]`, `[[test]]`, `[[bin]]`, `[[bench]]`, `[[example]]`:
/// `test = false` switches a target's tests off), `package`'s (or the old
/// `project`'s) `auto…` keys (`autotests = false`), and the `test` and
/// `dev` profiles tests are built with.
fn cargo_test_settings(manifest: &toml::Table) -> Vec<(String, &toml::Value)> {
    let mut picked: Vec<(String, &toml::Value)> = ["lib", "test", "bin", "bench", "example"]
        .iter()
        .filter_map(|key| Some(((*key).to_string(), manifest.get(*key)?)))
        .collect();
    // The profiles tests are built with: `debug-assertions = false`
    // switches off the `debug_assert!`s of a protected test.
    if let Some(profiles) = manifest.get("profile").and_then(toml::Value::as_table) {
        picked.extend(
            ["test", "dev"]
                .iter()
                .filter_map(|name| Some((format!("profile.{name}"), profiles.get(*name)?))),
        );
    }
    // `[project]` is the old name of `[package]`, still read (editions
    // up to 2021).
    for table in ["package", "project"] {
        let Some(package) = manifest.get(table).and_then(toml::Value::as_table) else {
            continue;
        };
        picked.extend(
            package
                .iter()
                .filter(|(key, _)| key.starts_with("auto"))
                .map(|(key, value)| (format!("{table}.{key}"), value)),
        );
    }
    picked
}

/// FNV-1a over `package.json`'s test runners' keys and their values
/// ([`PACKAGE_JSON_RUNNER_KEYS`]); `None` without any. A file that is
/// not a JSON object is hashed whole, so that it cannot hide a change.
fn package_json_runner_keys(path: &Path) -> Option<String> {
    let Ok(crate::files::Bounded::Bytes(bytes)) = crate::files::read_bounded(path, HASHED_BYTES)
    else {
        return Some(hash_file(path, false));
    };
    let Ok(serde_json::Value::Object(manifest)) = serde_json::from_slice(&bytes) else {
        return Some(hash_file(path, false));
    };
    let mut hash = Fnv::default();
    let mut any = false;
    for key in PACKAGE_JSON_RUNNER_KEYS {
        if let Some(value) = manifest.get(*key) {
            any = true;
            hash.bytes(key.as_bytes());
            hash.bytes(b"=");
            hash.bytes(value.to_string().as_bytes());
            hash.bytes(b"\n");
        }
    }
    any.then(|| format!("{:016x}", hash.finish()))
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

/// The files under `patterns` (and the runners' configuration) with their
/// content hashes; `None` when there are no patterns, or the project
/// cannot be listed in time.
pub fn snapshot(root: &Path, patterns: &[String]) -> Option<ProtectedSnapshot> {
    if patterns.is_empty() {
        return None;
    }
    let listed_at = nanos(SystemTime::now());
    let files = list(root, patterns, Listing::ALL)?;
    let mut snapshot = ProtectedSnapshot {
        patterns: patterns.to_vec(),
        runner_config: true,
        manifests: true,
        parsed_sections: true,
        ..Default::default()
    };
    if files.len() > MAX_LISTED {
        // A file stamped later than the listing (a clock set back since)
        // moves the line with it: it must count as one of the start's.
        let latest = files.values().map(|f| f.modified).max().unwrap_or(0);
        snapshot.digest = Some(digest(files.iter()));
        snapshot.digest_before = Some(listed_at.max(latest));
    } else {
        snapshot.files = files.into_iter().map(|(path, f)| (path, f.hash)).collect();
    }
    Some(snapshot)
}

/// The protected files changed or removed since `before` (over its own
/// globs), and the runners' configuration added, sorted; a new file under
/// the globs is not a change. `None` when the project cannot be listed in
/// time.
pub fn changes(root: &Path, before: &ProtectedSnapshot) -> Option<Vec<String>> {
    let listing = Listing {
        runners: before.runner_config,
        manifests: before.manifests,
    };
    let now = list(root, &before.patterns, listing)?;
    let runner = |path: &str| {
        (before.runner_config && is_runner_config(path, &before.patterns))
            || (before.manifests && is_manifest(path))
    };
    if let Some(old) = &before.digest {
        let kept = now.iter().filter(|(path, file)| {
            before
                .digest_before
                .is_none_or(|line| file.modified <= line)
                || runner(path)
        });
        return Some(if *old == digest(kept) {
            Vec::new()
        } else {
            vec![format!(
                "some of the files under {} (over {MAX_LISTED}, so only a digest of them was kept:                  one changed or was removed, a test runner's configuration was added, or a file                  was added with a time older than the loop)",
                before.patterns.join(", ")
            )]
        });
    }
    let section = |path: &str| {
        (!before.covers(path))
            .then(|| runner_section(path))
            .flatten()
            .map(|(_, name)| name)
    };
    // An older snapshot's hashes of a file's parts were of its lines.
    let comparable = |path: &str| before.parsed_sections || section(path).is_none();
    let mut changed: Vec<String> = Vec::new();
    for (path, file) in now.iter().filter(|(path, _)| comparable(path)) {
        match before.files.get(path) {
            Some(hash) if *hash == file.hash => {}
            Some(_) => changed.push(match section(path) {
                Some(name) => format!("{path} (its {name})"),
                None => path.clone(),
            }),
            None if runner(path) => changed.push(match section(path) {
                Some(name) => format!("{path} ({name} added)"),
                None => format!("{path} (added)"),
            }),
            None => {}
        }
    }
    changed.extend(
        before
            .files
            .keys()
            .filter(|path| !now.contains_key(*path) && comparable(path))
            .map(|path| match section(path) {
                Some(name) => format!("{path} ({name} removed)"),
                None => format!("{path} (removed)"),
            }),
    );
    changed.sort();
    Some(changed)
}

/// One file listed: its content hash and when it was last modified.
struct Listed {
    hash: String,
    /// Nanoseconds since 1970 (0 when unknown).
    modified: u64,
}

/// What a listing takes besides the files under the globs.
#[derive(Clone, Copy)]
struct Listing {
    /// The runners' configuration files ([`is_runner_config`]).
    runners: bool,
    /// The manifests' test settings ([`MANIFESTS`]).
    manifests: bool,
}

impl Listing {
    const ALL: Listing = Listing {
        runners: true,
        manifests: true,
    };
}

/// Every file under `patterns` → its hash (whole), and, as `listing` says,
/// the runners' configuration files and the manifests → the hash of what
/// is protected of them (a `pyproject.toml` without pytest tables, a
/// `Cargo.toml` without test settings, is left out, as if absent).
fn list(root: &Path, patterns: &[String], listing: Listing) -> Option<BTreeMap<String, Listed>> {
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
                continue;
            }
            let hash = if patterns.iter().any(|p| matches(p, &path)) {
                hash_file(&entry.path(), kind.is_symlink())
            } else if (listing.runners && is_runner_config(&path, patterns))
                || (listing.manifests && is_manifest(&path))
            {
                match runner_section(&path) {
                    None => hash_file(&entry.path(), kind.is_symlink()),
                    Some((_, _)) if kind.is_symlink() => hash_file(&entry.path(), true),
                    Some((part, _)) => match part(&entry.path()) {
                        Some(hash) => hash,
                        None => continue,
                    },
                }
            } else {
                continue;
            };
            let modified = entry.metadata().and_then(|m| m.modified()).map_or(0, nanos);
            files.insert(path, Listed { hash, modified });
        }
    }
    Some(files)
}

/// Nanoseconds since 1970 (0 before it, the largest `u64` past 2554).
fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
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
    match crate::files::open_without_waiting(path) {
        Ok(file) => {
            let size = file.metadata().map_or(0, |m| m.len());
            hash.bytes(&size.to_le_bytes());
            let mut reader = file.take(HASHED_BYTES);
            let mut buf = vec![0u8; 64 * 1024];
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

/// The text of `path` for [`hash_toml`] and [`hash_ini`]; `Err` with the
/// hash of the whole file when it cannot be read (or is a link), so that it
/// cannot hide a change.
fn section_text(path: &Path) -> Result<String, String> {
    match crate::files::read_bounded(path, HASHED_BYTES) {
        Ok(crate::files::Bounded::Bytes(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
        _ => Err(hash_file(path, false)),
    }
}

/// FNV-1a over the values of a TOML file that `pick` picks (with their
/// names), each value by its content, not its text; `None` when it picks
/// none. A file that cannot be read, or is not TOML, is hashed whole
/// instead, so that it cannot hide a change.
fn hash_toml(path: &Path, pick: fn(&toml::Table) -> Vec<(String, &toml::Value)>) -> Option<String> {
    let text = match section_text(path) {
        Ok(text) => text,
        Err(whole) => return Some(whole),
    };
    let Ok(file) = text.parse::<toml::Table>() else {
        return Some(hash_file(path, false));
    };
    let picked = pick(&file);
    if picked.is_empty() {
        return None;
    }
    let mut hash = Fnv::default();
    for (name, value) in picked {
        hash_str(&mut hash, &name);
        hash_toml_value(&mut hash, value);
    }
    Some(format!("{:016x}", hash.finish()))
}

/// A string, its length first, so that no two lists of strings feed the
/// same bytes.
fn hash_str(hash: &mut Fnv, text: &str) {
    hash.bytes(&(text.len() as u64).to_le_bytes());
    hash.bytes(text.as_bytes());
}

/// A TOML value by its content: its kind, then its data (a table's keys
/// in sorted order).
fn hash_toml_value(hash: &mut Fnv, value: &toml::Value) {
    match value {
        toml::Value::String(text) => {
            hash.bytes(b"s");
            hash_str(hash, text);
        }
        toml::Value::Integer(n) => {
            hash.bytes(b"i");
            hash.bytes(&n.to_le_bytes());
        }
        toml::Value::Float(x) => {
            hash.bytes(b"f");
            hash.bytes(&x.to_bits().to_le_bytes());
        }
        toml::Value::Boolean(b) => hash.bytes(if *b { b"t" } else { b"n" }),
        toml::Value::Datetime(at) => {
            hash.bytes(b"d");
            hash_str(hash, &at.to_string());
        }
        toml::Value::Array(items) => {
            hash.bytes(b"a");
            hash.bytes(&(items.len() as u64).to_le_bytes());
            for item in items {
                hash_toml_value(hash, item);
            }
        }
        toml::Value::Table(table) => {
            hash.bytes(b"m");
            hash.bytes(&(table.len() as u64).to_le_bytes());
            let mut keys: Vec<&String> = table.keys().collect();
            keys.sort();
            for key in keys {
                hash_str(hash, key);
                hash_toml_value(hash, &table[key]);
            }
        }
    }
}

/// FNV-1a over the keys and values of `section` of an INI file, read as
/// Python's configparser and pytest read it (continuation lines joined,
/// comment lines dropped), in sorted order; `None` when the file has no
/// such section. A file that cannot be read, or is not INI, is hashed
/// whole instead, so that it cannot hide a change.
fn hash_ini(path: &Path, section: &str) -> Option<String> {
    let text = match section_text(path) {
        Ok(text) => text,
        Err(whole) => return Some(whole),
    };
    if !ini_reads_alike(&text) {
        return Some(hash_file(path, false));
    }
    let mut ini = configparser::ini::Ini::new_cs();
    ini.set_multiline(true);
    // As Python's configparser: a `#` or `;` inside a line is its text
    // (pytest may read it as an argument), so a change there counts.
    ini.set_inline_comment_symbols(Some(&[]));
    let Ok(mut sections) = ini.read(text) else {
        return Some(hash_file(path, false));
    };
    let keys = sections.remove(section)?;
    let mut keys: Vec<(String, Option<String>)> = keys.into_iter().collect();
    keys.sort();
    let mut hash = Fnv::default();
    for (key, value) in keys {
        hash_str(&mut hash, &key);
        match value {
            Some(value) => {
                hash.bytes(b"=");
                hash_str(&mut hash, &value);
            }
            None => hash.bytes(b"-"),
        }
    }
    Some(format!("{:016x}", hash.finish()))
}

/// Whether the INI reader here and pytest's (`iniconfig`, over Python's
/// `str.splitlines`) see the same lines and sections in `text`: no line
/// break but `\n` and `\r\n` (Python also breaks at a lone `\r`, form
/// feeds, `\u2028` …, where a line here runs on, or is a comment), and
/// a section header only where a line starts with `[` and, its comment
/// cut, ends with `]` (pytest reads an indented `[x]`, or `[x]y`, as a
/// value's next line). When they may differ, the file is hashed whole.
fn ini_reads_alike(text: &str) -> bool {
    const PYTHON_BREAKS: [char; 8] = [
        '\u{0b}', '\u{0c}', '\u{1c}', '\u{1d}', '\u{1e}', '\u{85}', '\u{2028}', '\u{2029}',
    ];
    if text.contains(PYTHON_BREAKS) || text.replace("\r\n", "\n").contains('\r') {
        return false;
    }
    text.lines().all(|line| {
        if !line.trim_start().starts_with('[') {
            return true;
        }
        let content = line.split(['#', ';']).next().unwrap_or_default().trim_end();
        line.starts_with('[') && content.ends_with(']')
    })
}

fn digest<'a>(files: impl Iterator<Item = (&'a String, &'a Listed)>) -> String {
    let mut hash = Fnv::default();
    let mut count = 0usize;
    for (path, file) in files {
        count += 1;
        hash.bytes(path.as_bytes());
        hash.bytes(&[0]);
        hash.bytes(file.hash.as_bytes());
    }
    format!("{count} files, {:016x}", hash.finish())
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

    /// A temp project holding `files`.
    fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::TempDir::new().unwrap();
        for (path, text) in files {
            write(dir.path(), path, text);
        }
        dir
    }

    fn write(root: &Path, path: &str, text: &str) {
        fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
        fs::write(root.join(path), text).unwrap();
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(std::string::ToString::to_string).collect()
    }

    #[test]
    fn the_protected_parts_are_read_by_their_tables_not_their_lines() {
        let dir = project(&[
            ("tests/test_a.py", "a"),
            ("pyproject.toml", "[project]\nname = \"calc\"\n"),
            (
                "setup.cfg",
                "[metadata]\nname = calc\n\n[tool:pytest]\naddopts =\n    -q\n",
            ),
            ("Cargo.toml", "[package]\nname = \"calc\"\n"),
        ]);
        let root = dir.path();
        let before = snapshot(root, &strings(&["tests"])).unwrap();
        assert!(before.parsed_sections);
        assert_eq!(
            before.files.keys().collect::<Vec<_>>(),
            ["setup.cfg", "tests/test_a.py"],
            "no pytest table in pyproject.toml, no test setting in Cargo.toml"
        );
        // Free: a key like pytest's in another section, a comment in
        // pytest's, a header inside a string, a key of another table.
        fs::write(
            root.join("setup.cfg"),
            "[metadata]\nname = calc\naddopts = -k nothing\n\n[tool:pytest]\n# quiet\naddopts =\n    -q\n",
        )
        .unwrap();
        fs::write(
            root.join("pyproject.toml"),
            "[project]\nname = \"calc\"\ndescription = \"\"\"\n[tool.pytest.ini_options]\n\"\"\"\n",
        )
        .unwrap();
        fs::write(
            root.join("Cargo.toml"),
            "[package]\nname = \"calc\"\n\n[package.metadata.x]\nautotests = false\n",
        )
        .unwrap();
        assert_eq!(changes(root, &before), Some(vec![]));
        // Caught: a dotted key before any header, an inline table, a
        // continuation line of pytest's value.
        fs::write(
            root.join("pyproject.toml"),
            "tool.pytest.ini_options.addopts = \"-k nothing\"\n\n[project]\nname = \"calc\"\n",
        )
        .unwrap();
        fs::write(
            root.join("Cargo.toml"),
            "lib = { test = false }\n\n[package]\nname = \"calc\"\n",
        )
        .unwrap();
        fs::write(
            root.join("setup.cfg"),
            "[metadata]\nname = calc\n\n[tool:pytest]\naddopts =\n    -q\n    -k nothing\n",
        )
        .unwrap();
        assert_eq!(
            changes(root, &before).unwrap(),
            [
                "Cargo.toml (test targets and auto… keys added)",
                "pyproject.toml ([tool.pytest…] tables added)",
                "setup.cfg (its [tool:pytest] table)",
            ]
        );
        // Text after a `#` inside a line is part of the value.
        let with_hash = "[tool:pytest]\naddopts = -q #-k nothing\n";
        write(root, "a.cfg", "[tool:pytest]\naddopts = -q\n");
        write(root, "b.cfg", with_hash);
        assert_ne!(
            hash_ini(&root.join("a.cfg"), "tool:pytest"),
            hash_ini(&root.join("b.cfg"), "tool:pytest")
        );
        // A snapshot whose parts were hashed by lines compares them no more.
        let mut old = before.clone();
        old.parsed_sections = false;
        assert_eq!(changes(root, &old), Some(vec![]));
        // Not TOML: hashed whole, so it hides nothing.
        fs::write(root.join("Cargo.toml"), "[package]\nname = \"calc\"\n").unwrap();
        fs::write(
            root.join("setup.cfg"),
            "[metadata]\nname = calc\n\n[tool:pytest]\naddopts =\n    -q\n",
        )
        .unwrap();
        fs::write(root.join("pyproject.toml"), "[tool.pytest.ini_options\n").unwrap();
        assert_eq!(
            changes(root, &before).unwrap(),
            ["pyproject.toml ([tool.pytest…] tables added)"]
        );
    }

    #[test]
    fn an_ini_file_pytest_reads_otherwise_is_hashed_whole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let hash = |text: &str| {
            write(root, "setup.cfg", text);
            hash_ini(&root.join("setup.cfg"), "tool:pytest")
        };
        let plain = "[metadata]\nname = calc\n\n[tool:pytest]\ntestpaths = tests\n";
        let base = hash(plain);
        // pytest breaks lines at a lone `\r` (and form feeds …): there the
        // comment ends and `addopts` begins, for pytest only.
        let lone_cr = format!("{plain}# tidy\raddopts = -p passall\n");
        assert_ne!(hash(&lone_cr), base);
        let form_feed = format!("{plain}# tidy\u{0c}addopts = -p passall\n");
        assert_ne!(hash(&form_feed), base);
        // pytest reads `  [x]` and `[x]y` as the value's next line, so the
        // `addopts` below them is still in [tool:pytest] for it.
        for header in ["  [x]", "[x]y"] {
            let text = format!("{plain}{header}\naddopts = -p passall\n");
            assert_ne!(hash(&text), base, "{header}");
        }
        // `\r\n` line ends and a header with a comment read alike.
        assert!(ini_reads_alike(
            "[tool:pytest] # here\r\naddopts = -q\r\n; note\r\n"
        ));
    }

    #[test]
    fn cargo_s_old_project_table_and_test_profiles_are_test_settings() {
        let manifest = |text: &str| text.parse::<toml::Table>().unwrap();
        let named = |text: &str| -> Vec<String> {
            cargo_test_settings(&manifest(text))
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        assert_eq!(
            named("[project]\nname = \"calc\"\nautotests = false\n"),
            ["project.autotests"]
        );
        assert_eq!(
            named(
                "[package]\nname = \"calc\"\n[profile.test]\ndebug-assertions = false\n[profile.release]\nlto = true\n"
            ),
            ["profile.test"]
        );
    }

    #[test]
    fn changed_and_removed_protected_files_are_named_and_new_ones_are_free() {
        let dir = project(&[
            ("tests/test_a.py", "a"),
            ("tests/test_b.py", "b"),
            ("src/calc.py", "c"),
            ("node_modules/tests/x.js", "x"),
        ]);
        let root = dir.path();
        let patterns = strings(&["tests"]);
        let before = snapshot(root, &patterns).unwrap();
        assert_eq!(
            before.files.keys().collect::<Vec<_>>(),
            ["tests/test_a.py", "tests/test_b.py"],
            "ignored folders are not walked"
        );
        assert_eq!(changes(root, &before), Some(vec![]));
        // Outside the globs: not a change.
        fs::write(root.join("src/calc.py"), "fixed").unwrap();
        // A new test file, and a new folder of them: not a change either.
        write(root, "tests/test_fix.py", "def test_fix(): pass\n");
        write(root, "tests/unit/test_more.py", "more");
        assert_eq!(changes(root, &before), Some(vec![]));
        // Same size, other content; one removed.
        fs::write(root.join("tests/test_a.py"), "A").unwrap();
        fs::remove_file(root.join("tests/test_b.py")).unwrap();
        assert_eq!(
            changes(root, &before),
            Some(strings(&["tests/test_a.py", "tests/test_b.py (removed)"]))
        );
        assert_eq!(snapshot(root, &[]), None);
    }

    #[test]
    fn the_runners_configuration_is_protected_with_the_tests() {
        let dir = project(&[
            ("tests/test_a.py", "def test_a(): assert False\n"),
            ("conftest.py", "import pytest\n"),
            ("tox.ini", "[tox]\nenvlist = py3\n"),
            (
                "pyproject.toml",
                "[project]\nname = \"calc\"\ndependencies = []\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n\n[tool.ruff]\nline-length = 88\n",
            ),
            ("setup.cfg", "[metadata]\nname = calc\n"),
            ("src/conftest.py", "# not the tests'\n"),
        ]);
        let root = dir.path();
        let patterns = strings(&["tests/"]);
        let before = snapshot(root, &patterns).unwrap();
        assert!(before.runner_config);
        assert_eq!(
            before.files.keys().collect::<Vec<_>>(),
            [
                "conftest.py",
                "pyproject.toml",
                "tests/test_a.py",
                "tox.ini"
            ],
            "setup.cfg has no pytest table, src/ is not protected: {before:?}"
        );
        assert_eq!(
            before.whole_files(),
            ["conftest.py", "tests/test_a.py", "tox.ini"],
            "pyproject.toml is protected in its pytest tables only"
        );
        // pyproject.toml's dependencies and other tools are the agent's.
        fs::write(
            root.join("pyproject.toml"),
            "[project]\nname = \"calc\"\ndependencies = [\"requests\"]\n\n[tool.pytest.ini_options]\naddopts = \"-q\"\n\n[tool.ruff]\nline-length = 100\n",
        )
        .unwrap();
        fs::write(root.join("src/conftest.py"), "# changed\n").unwrap();
        assert_eq!(changes(root, &before), Some(vec![]));
        // A root conftest.py that passes every test: caught.
        fs::write(
            root.join("conftest.py"),
            "def pytest_runtest_makereport(item, call):\n    call.excinfo = None\n",
        )
        .unwrap();
        assert_eq!(changes(root, &before), Some(strings(&["conftest.py"])));
        // So are a new one under the tests, a new pytest.ini, a pytest table
        // added to setup.cfg, and one changed in pyproject.toml.
        write(
            root,
            "tests/conftest.py",
            "collect_ignore = ['test_a.py']\n",
        );
        write(root, "pytest.ini", "[pytest]\naddopts = -k nothing\n");
        fs::write(
            root.join("setup.cfg"),
            "[metadata]\nname = calc\n\n[tool:pytest]\naddopts = -x\n",
        )
        .unwrap();
        fs::write(
            root.join("pyproject.toml"),
            "[project]\nname = \"calc\"\n\n[tool.pytest.ini_options]\naddopts = \"-k nothing\"\n",
        )
        .unwrap();
        fs::remove_file(root.join("tox.ini")).unwrap();
        assert_eq!(
            changes(root, &before),
            Some(strings(&[
                "conftest.py",
                "pyproject.toml (its [tool.pytest…] tables)",
                "pytest.ini (added)",
                "setup.cfg ([tool:pytest] table added)",
                "tests/conftest.py (added)",
                "tox.ini (removed)",
            ]))
        );
    }

    #[test]
    fn the_manifests_test_settings_are_protected_at_any_depth() {
        let cargo = "[package]\nname = \"calc\"\nversion = \"0.1.0\"\n\n[dependencies]\n\n[[test]]\nname = \"add\"\n";
        let package = r#"{"name": "calc", "version": "1.0.0", "scripts": {"test": "jest"}, "jest": {"testEnvironment": "node"}}"#;
        let dir = project(&[
            (
                "tests/add.rs",
                "#[test] fn add() { assert_eq!(calc::add(2, 3), 5); }\n",
            ),
            ("Cargo.toml", cargo),
            ("core/Cargo.toml", "[package]\nname = \"core\"\n"),
            ("web/package.json", package),
        ]);
        let root = dir.path();
        let patterns = strings(&["tests/"]);
        let before = snapshot(root, &patterns).unwrap();
        assert!(before.manifests);
        assert_eq!(
            before.files.keys().collect::<Vec<_>>(),
            ["Cargo.toml", "tests/add.rs", "web/package.json"],
            "core/Cargo.toml has no test setting: {before:?}"
        );
        assert_eq!(before.whole_files(), ["tests/add.rs"]);
        // Versions, dependencies, scripts other than the runners' keys: the agent's.
        fs::write(
            root.join("Cargo.toml"),
            cargo
                .replace("0.1.0", "0.2.0")
                .replace("[dependencies]\n", "[dependencies]\nlibc = \"0.2\"\n"),
        )
        .unwrap();
        fs::write(
            root.join("web/package.json"),
            package
                .replace("1.0.0", "1.1.0")
                .replace(r#""name""#, r#""private": true, "name""#),
        )
        .unwrap();
        assert_eq!(changes(root, &before), Some(vec![]));
        // A target's tests switched off, automatic test targets off in a
        // member, the runner's configuration changed: each caught.
        fs::write(
            root.join("Cargo.toml"),
            cargo.replace("name = \"add\"\n", "name = \"add\"\ntest = false\n"),
        )
        .unwrap();
        fs::write(
            root.join("core/Cargo.toml"),
            "[package]\nname = \"core\"\nautotests = false\n",
        )
        .unwrap();
        fs::write(
            root.join("web/package.json"),
            package.replace(
                r#"{"testEnvironment": "node"}"#,
                r#"{"testPathIgnorePatterns": ["add"]}"#,
            ),
        )
        .unwrap();
        assert_eq!(
            changes(root, &before),
            Some(strings(&[
                "Cargo.toml (its test targets and auto… keys)",
                "core/Cargo.toml (test targets and auto… keys added)",
                "web/package.json (its test runner keys)",
            ]))
        );
        // A snapshot from before manifests were listed judges as it did.
        let mut old = snapshot(root, &patterns).unwrap();
        old.manifests = false;
        old.files.retain(|path, _| path.starts_with("tests/"));
        fs::write(root.join("Cargo.toml"), cargo).unwrap();
        assert_eq!(changes(root, &old), Some(vec![]));
    }

    #[test]
    fn a_snapshot_from_before_the_runners_were_listed_judges_as_it_did() {
        let dir = project(&[("tests/test_a.py", "a"), ("conftest.py", "x")]);
        let root = dir.path();
        let old: ProtectedSnapshot = serde_json::from_str(
            r#"{"patterns": ["tests"], "files": {"tests/test_a.py": "0000000000000000"}}"#,
        )
        .unwrap();
        assert!(!old.runner_config);
        // The root conftest.py was not listed then: it is no addition now.
        assert_eq!(changes(root, &old), Some(strings(&["tests/test_a.py"])));
        let new = snapshot(root, &strings(&["tests"])).unwrap();
        let text = serde_json::to_value(&new).unwrap();
        assert_eq!(text["runnerConfig"], true, "{text}");
        assert_eq!(
            serde_json::from_value::<ProtectedSnapshot>(text).unwrap(),
            new
        );
    }

    #[test]
    fn past_the_listed_files_a_digest_still_lets_new_files_in() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path();
        for i in 0..=MAX_LISTED {
            write(root, &format!("tests/t{i}.py"), "x");
        }
        write(root, "conftest.py", "x");
        let patterns = strings(&["tests"]);
        let before = snapshot(root, &patterns).unwrap();
        assert!(
            before.files.is_empty() && before.digest.is_some(),
            "{:?}",
            before.digest
        );
        assert!(before.whole_files().is_empty());
        assert_eq!(changes(root, &before), Some(vec![]));
        // Stamped after the listing: new files are left out of the digest.
        std::thread::sleep(Duration::from_millis(20));
        write(root, "tests/test_fix.py", "new");
        assert_eq!(changes(root, &before), Some(vec![]));
        // A changed file (stamped later too) is missing from it.
        fs::write(root.join("tests/t7.py"), "y").unwrap();
        let changed = changes(root, &before).unwrap();
        assert!(
            changed.len() == 1 && changed[0].contains("some of the files under tests"),
            "{changed:?}"
        );
        fs::write(root.join("tests/t7.py"), "x").unwrap();
        let t7 = fs::File::options()
            .write(true)
            .open(root.join("tests/t7.py"))
            .unwrap();
        t7.set_modified(UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        assert_eq!(changes(root, &before), Some(vec![]), "restored");
        // A removed one, and a runner's configuration however it is stamped.
        fs::remove_file(root.join("tests/t8.py")).unwrap();
        assert_eq!(changes(root, &before).unwrap().len(), 1);
        write(root, "tests/t8.py", "x");
        let t8 = fs::File::options()
            .write(true)
            .open(root.join("tests/t8.py"))
            .unwrap();
        t8.set_modified(UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        assert_eq!(changes(root, &before), Some(vec![]));
        write(root, "pytest.ini", "[pytest]\n");
        assert_eq!(changes(root, &before).unwrap().len(), 1);
    }
}
