//! The toolchains' caches of the agent and of the checks: never the
//! person's own. What the agent or a check writes into a cache, a later
//! build reads without checking it again (an unpacked crate under cargo's
//! `registry/src` with a `build.rs` added runs in the person's next
//! `cargo check` of another project; Go checks a cached output's size, not
//! its content, so a cache entry pointed at another build's output makes a
//! buggy package pass). So the person's caches ([`TOOLCHAIN_CACHES`]) stay
//! readable and are never writable, to the agent's sandbox as to the
//! checks' walls; each project gets two sets of caches of ralph's own,
//! in `ralph` in the person's cache folder ([`own_root`]):
//!
//! - `<project>/agent`: the agent's, named in the client's settings (`env`)
//!   and writable in its sandbox (`sandbox.filesystem.allowWrite`);
//! - `<project>/checks`: the checks', named in each check's environment by
//!   the walls and writable to checks only, kept between checks (a second
//!   check is warm). The agent cannot write it, so nothing it puts in its
//!   own cache makes a check pass.
//!
//! Each toolchain is sent there by its own variables ([`OwnCaches::env`]).
//! They are seeded from the person's caches, read-only: Go through
//! `GOPROXY=file://<the person's module cache>/cache/download,…` (each
//! module checked against `go.sum` as it is taken), cargo by a copy of the
//! person's downloaded crates and index (`registry/cache`, `registry/index`,
//! `git/db`) and of its `config.toml` into a `CARGO_HOME` of the set's own
//! ([`prepare`], as a loop starts). npm's, pip's and uv's start empty.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// Where a cache lies when its variable is not set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultPlace {
    /// None: the cache is only where its variable says (`CARGO_TARGET_DIR`:
    /// by default cargo's target folder is in the project).
    Nowhere,
    /// This folder of the home folder.
    Home(&'static str),
    /// This folder of the user's cache folder (`$XDG_CACHE_HOME`, else
    /// `~/.cache`), as Go's `os.UserCacheDir`, pip and uv find it.
    UserCache(&'static str),
    /// This folder of the first `GOPATH` entry, else of `~/go`.
    GoPath(&'static str),
}

/// One cache of the person's that a toolchain writes by itself.
#[derive(Clone, Copy, Debug)]
pub struct ToolchainCache {
    /// What it is, for the person.
    pub name: &'static str,
    /// The variables that name its folder, in the toolchain's order.
    pub variables: &'static [&'static str],
    /// Where it is when no variable names it.
    pub default: DefaultPlace,
    /// The folders of it a later build reads without checking them again
    /// (`""`: the folder itself).
    pub folders: &'static [&'static str],
}

/// The person's toolchain caches: never written by the agent nor by a
/// check (the one list; the e2e tests hash each of them around a loop).
pub const TOOLCHAIN_CACHES: [ToolchainCache; 7] = [
    ToolchainCache {
        name: "Go's build cache",
        variables: &["GOCACHE"],
        default: DefaultPlace::UserCache("go-build"),
        folders: &[""],
    },
    ToolchainCache {
        name: "Go's module cache",
        variables: &["GOMODCACHE"],
        default: DefaultPlace::GoPath("pkg/mod"),
        folders: &[""],
    },
    ToolchainCache {
        name: "cargo's registry and git sources",
        variables: &["CARGO_HOME"],
        default: DefaultPlace::Home(".cargo"),
        folders: &["registry", "git"],
    },
    ToolchainCache {
        name: "cargo's target folder",
        variables: &["CARGO_TARGET_DIR"],
        default: DefaultPlace::Nowhere,
        folders: &[""],
    },
    ToolchainCache {
        name: "npm's cache",
        variables: &["npm_config_cache", "NPM_CONFIG_CACHE"],
        default: DefaultPlace::Home(".npm"),
        folders: &[""],
    },
    ToolchainCache {
        name: "pip's cache",
        variables: &["PIP_CACHE_DIR"],
        default: DefaultPlace::UserCache("pip"),
        folders: &[""],
    },
    ToolchainCache {
        name: "uv's cache",
        variables: &["UV_CACHE_DIR"],
        default: DefaultPlace::UserCache("uv"),
        folders: &[""],
    },
];

/// Whose set of caches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The agent's commands, in the client's sandbox.
    Agent,
    /// ralph's checks of the agent's work, in the walls.
    Checks,
}

impl Owner {
    /// The set's folder name.
    fn folder(self) -> &'static str {
        match self {
            Owner::Agent => "agent",
            Owner::Checks => "checks",
        }
    }
}

/// One owner's caches of one project: the folder holding them all, and the
/// variables that send each toolchain there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnCaches {
    /// The folder of the set (`<own_root>/<project>-<hash>/<owner>`).
    pub folder: PathBuf,
    /// The variables, in this order, for the owner's environment.
    pub env: Vec<(String, OsString)>,
}

/// ralph's own caches' folder: `ralph` in the person's cache folder
/// (`dirs::cache_dir()`: `$XDG_CACHE_HOME` or `~/.cache` on Linux). Not in
/// ralph's data folder beside the key: that one is hidden from the agent
/// and from every check. `None` when the system names no cache folder.
pub fn own_root() -> Option<PathBuf> {
    #[cfg(test)]
    {
        // ralph-core's own unit tests never touch the person's cache folder.
        return Some(
            std::env::temp_dir()
                .join("ralph-core-unit-tests")
                .join("caches"),
        );
    }
    #[allow(unreachable_code)]
    dirs::cache_dir().map(|dir| dir.join("ralph"))
}

/// The folder of `project`'s sets in `root`: its name and a hash of its
/// real path, so that two projects of one name keep theirs apart and a
/// project's worktrees share the main checkout's.
pub fn project_folder(root: &Path, project: &Path) -> PathBuf {
    let real = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
    let digest = Sha256::digest(real.as_os_str().as_encoded_bytes());
    let mut hash = String::with_capacity(12);
    for byte in digest.iter().take(6) {
        hash.push_str(&format!("{byte:02x}"));
    }
    let name: String = real
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    root.join(format!("{name}-{hash}"))
}

/// `owner`'s caches of `project` (the main checkout: its worktrees share
/// them), as this process's environment finds the person's.
pub fn own_caches(project: &Path, owner: Owner) -> Option<OwnCaches> {
    let root = own_root()?;
    Some(own_caches_with(&root, project, owner, &|name| {
        std::env::var_os(name)
    }))
}

/// [`own_caches`] in `root`, with the person's variables `lookup` gives.
pub fn own_caches_with(
    root: &Path,
    project: &Path,
    owner: Owner,
    lookup: &dyn Fn(&str) -> Option<OsString>,
) -> OwnCaches {
    let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let folder = project_folder(root, project).join(owner.folder());
    let mut env: Vec<(String, OsString)> = Vec::new();
    let mut set = |name: &str, value: OsString| env.push((name.to_string(), value));
    set("GOCACHE", folder.join("go-build").into());
    set("GOMODCACHE", folder.join("go-mod").into());
    // The module cache's files writable, so that ralph can remove the set.
    let flags = match var("GOFLAGS").and_then(|f| f.into_string().ok()) {
        Some(theirs) if theirs.split_whitespace().any(|f| f == "-modcacherw") => theirs,
        Some(theirs) => format!("{theirs} -modcacherw"),
        None => "-modcacherw".into(),
    };
    set("GOFLAGS", flags.into());
    if let Some(proxy) = go_proxy(root, &var) {
        set("GOPROXY", proxy.into());
    }
    set("CARGO_HOME", folder.join("cargo").into());
    if let Some(theirs) = var("CARGO_TARGET_DIR").map(PathBuf::from) {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let project = real(project);
        let inside = !theirs.is_absolute() || real(&theirs).starts_with(&project);
        if !inside {
            set("CARGO_TARGET_DIR", folder.join("target").into());
        }
    }
    set("npm_config_cache", folder.join("npm").into());
    set("NPM_CONFIG_CACHE", folder.join("npm").into());
    set("PIP_CACHE_DIR", folder.join("pip").into());
    set("UV_CACHE_DIR", folder.join("uv").into());
    OwnCaches { folder, env }
}

/// `GOPROXY` that takes the modules the person downloaded from their
/// module cache first (read-only: Go copies what it takes into the set's
/// own, checking it against `go.sum`), then what the person's `GOPROXY`
/// says (Go's default when none). `None` when the person has no module
/// downloaded, or their `GOPROXY` already leads into ralph's (a check the
/// agent runs: its proxy is kept).
fn go_proxy(root: &Path, var: &dyn Fn(&str) -> Option<OsString>) -> Option<String> {
    let theirs = var("GOPROXY").and_then(|p| p.into_string().ok());
    if theirs
        .as_deref()
        .is_some_and(|p| p.contains(&*root.to_string_lossy()))
    {
        return theirs;
    }
    let modules = persons_cache(&TOOLCHAIN_CACHES[1], var)?;
    if modules.starts_with(root) {
        return theirs;
    }
    let downloaded = modules.join("cache/download");
    let downloaded = downloaded.is_dir().then_some(downloaded)?;
    let rest = theirs.unwrap_or_else(|| "https://proxy.golang.org,direct".into());
    Some(format!("file://{},{rest}", downloaded.display()))
}

/// Where the person's `cache` lies, as its toolchain finds it.
pub fn persons_cache(
    cache: &ToolchainCache,
    var: &dyn Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    let named = cache
        .variables
        .iter()
        .find_map(|v| var(v).filter(|v| !v.is_empty()).map(PathBuf::from));
    match named {
        Some(path) if path.is_absolute() => Some(path),
        Some(_) => None,
        None => {
            let home = var("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
            default_place(cache.default, home.as_deref(), var)
        }
    }
}

/// The folders of the person's caches a later build of theirs reads, as
/// this process's environment finds them (those that exist).
pub fn persons_caches() -> Vec<PathBuf> {
    let lookup = |name: &str| std::env::var_os(name);
    let mut folders = Vec::new();
    for cache in &TOOLCHAIN_CACHES {
        let Some(base) = persons_cache(cache, &lookup) else {
            continue;
        };
        for folder in cache.folders {
            let path = if folder.is_empty() {
                base.clone()
            } else {
                base.join(folder)
            };
            if path.is_dir() && !folders.contains(&path) {
                folders.push(path);
            }
        }
    }
    folders
}

/// Where `default` lies for this home folder and these variables.
fn default_place(
    default: DefaultPlace,
    home: Option<&Path>,
    var: &dyn Fn(&str) -> Option<OsString>,
) -> Option<PathBuf> {
    match default {
        DefaultPlace::Nowhere => None,
        DefaultPlace::Home(folder) => home.map(|h| h.join(folder)),
        DefaultPlace::UserCache(folder) => var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join(".cache")))
            .map(|cache| cache.join(folder)),
        DefaultPlace::GoPath(folder) => var("GOPATH")
            .and_then(|p| std::env::split_paths(&p).next())
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join("go")))
            .map(|gopath| gopath.join(folder)),
    }
}

/// cargo's files the sets copy from the person's `CARGO_HOME` as a loop
/// starts: its settings (a source replacement, a registry's address) and
/// what it downloaded, each checked against the index's checksum as cargo
/// unpacks it. Never `credentials.toml` (the registry's token), `bin/`
/// (programs), nor the unpacked sources (`registry/src`, `git/checkouts`:
/// cargo unpacks them again from what is copied).
const CARGO_SEEDS: [&str; 5] = [
    "config.toml",
    "config",
    "registry/index",
    "registry/cache",
    "git/db",
];

/// Makes both sets of caches of `project` and seeds them from the person's
/// (as a loop starts, before any agent or check runs). Errors are left
/// unsaid: a set that could not be seeded is a cold cache.
pub fn prepare(project: &Path) {
    let Some(root) = own_root() else { return };
    prepare_with(&root, project, &|name| std::env::var_os(name));
}

/// [`prepare`] in `root`, with the person's variables `lookup` gives.
pub fn prepare_with(root: &Path, project: &Path, lookup: &dyn Fn(&str) -> Option<OsString>) {
    let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let cargo_home = persons_cache(&TOOLCHAIN_CACHES[2], &var).filter(|h| !h.starts_with(root));
    for owner in [Owner::Agent, Owner::Checks] {
        let set = own_caches_with(root, project, owner, lookup);
        if std::fs::create_dir_all(&set.folder).is_err() {
            continue;
        }
        let Some(theirs) = &cargo_home else { continue };
        let ours = set.folder.join("cargo");
        for seed in CARGO_SEEDS {
            let _ = copy_missing(
                &theirs.join(seed),
                &ours.join(seed),
                seed.starts_with("config"),
            );
        }
    }
}

/// Copies `from` (a file or a folder) to `to`: each file `to` lacks (all of
/// them with `replace`), never a link; cargo's locks are left out.
fn copy_missing(from: &Path, to: &Path, replace: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_file() {
        if replace || std::fs::symlink_metadata(to).is_err() {
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(from, to)?;
        }
        return Ok(());
    }
    if !meta.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if name == ".package-cache" || name == ".package-cache-mutate" || name == ".cargo-lock" {
            continue;
        }
        let _ = copy_missing(&entry.path(), &to.join(&name), replace);
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    fn value(caches: &OwnCaches, name: &str) -> Option<String> {
        caches
            .env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn the_agent_and_the_checks_get_sets_of_their_own_never_the_persons() {
        let dir = tempfile::TempDir::new().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, home, project) = (base.join("own"), base.join("home"), base.join("p"));
        std::fs::create_dir_all(&project).unwrap();
        let env = [("HOME", home.display().to_string())];
        let agent = own_caches_with(&root, &project, Owner::Agent, &vars(&env));
        let checks = own_caches_with(&root, &project, Owner::Checks, &vars(&env));
        assert_ne!(agent.folder, checks.folder);
        assert!(agent.folder.starts_with(&root) && checks.folder.starts_with(&root));
        assert_eq!(agent.folder.parent(), checks.folder.parent());
        for caches in [&agent, &checks] {
            for name in [
                "GOCACHE",
                "GOMODCACHE",
                "CARGO_HOME",
                "npm_config_cache",
                "NPM_CONFIG_CACHE",
                "PIP_CACHE_DIR",
                "UV_CACHE_DIR",
            ] {
                let path = value(caches, name).unwrap_or_else(|| panic!("{name} is set"));
                assert!(
                    Path::new(&path).starts_with(&caches.folder),
                    "{name}={path}"
                );
            }
            assert_eq!(value(caches, "GOFLAGS").as_deref(), Some("-modcacherw"));
            // No module downloaded: Go's proxy as the person has it.
            assert_eq!(value(caches, "GOPROXY"), None);
            // No target folder of the person's: cargo's stays in the project.
            assert_eq!(value(caches, "CARGO_TARGET_DIR"), None);
        }
        // Another project, another set.
        let other = own_caches_with(&root, &base.join("q"), Owner::Agent, &vars(&env));
        assert_ne!(other.folder, agent.folder);
    }

    #[test]
    fn go_takes_the_persons_modules_first_and_keeps_their_flags_and_proxy() {
        let dir = tempfile::TempDir::new().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, project) = (base.join("own"), base.join("p"));
        let modules = base.join("gopath/pkg/mod");
        std::fs::create_dir_all(modules.join("cache/download")).unwrap();
        let env = [
            ("HOME", base.join("home").display().to_string()),
            ("GOPATH", base.join("gopath").display().to_string()),
            ("GOFLAGS", "-mod=mod".into()),
            ("GOPROXY", "https://goproxy.example,direct".into()),
        ];
        let set = own_caches_with(&root, &project, Owner::Checks, &vars(&env));
        assert_eq!(
            value(&set, "GOPROXY").unwrap(),
            format!(
                "file://{}/cache/download,https://goproxy.example,direct",
                modules.display()
            )
        );
        assert_eq!(value(&set, "GOFLAGS").unwrap(), "-mod=mod -modcacherw");
        // A check the agent runs: its environment already leads into ralph's.
        let agent = own_caches_with(&root, &project, Owner::Agent, &vars(&env));
        let nested: Vec<(String, String)> = agent
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string_lossy().into_owned()))
            .collect();
        let nested: Vec<(&str, String)> = nested
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        let again = own_caches_with(&root, &project, Owner::Checks, &vars(&nested));
        assert_eq!(value(&again, "GOPROXY"), value(&agent, "GOPROXY"));
        assert_eq!(value(&again, "GOFLAGS").unwrap(), "-mod=mod -modcacherw");
    }

    #[test]
    fn a_target_folder_outside_the_project_is_replaced_one_inside_kept() {
        let dir = tempfile::TempDir::new().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, project) = (base.join("own"), base.join("p"));
        std::fs::create_dir_all(&project).unwrap();
        let outside = [(
            "CARGO_TARGET_DIR",
            base.join("shared").display().to_string(),
        )];
        let set = own_caches_with(&root, &project, Owner::Checks, &vars(&outside));
        assert_eq!(
            value(&set, "CARGO_TARGET_DIR").unwrap(),
            set.folder.join("target").display().to_string()
        );
        for inside in [project.join("t").display().to_string(), "target2".into()] {
            let env = [("CARGO_TARGET_DIR", inside)];
            let set = own_caches_with(&root, &project, Owner::Checks, &vars(&env));
            assert_eq!(value(&set, "CARGO_TARGET_DIR"), None);
        }
    }

    #[test]
    fn cargo_is_seeded_with_the_persons_downloads_and_settings_never_their_token() {
        let dir = tempfile::TempDir::new().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (root, project, home) = (base.join("own"), base.join("p"), base.join("home"));
        let theirs = home.join(".cargo");
        for (path, text) in [
            ("config.toml", "[net]\noffline = true\n"),
            ("credentials.toml", "token = \"secret\"\n"),
            ("bin/cargo-x", "#!/bin/sh\n"),
            ("registry/cache/idx/tinydep-0.1.0.crate", "crate"),
            ("registry/index/idx/.cache/ti/ny/tinydep", "index"),
            ("registry/src/idx/tinydep-0.1.0/build.rs", "fn main() {}"),
            ("registry/cache/.package-cache", ""),
        ] {
            let file = theirs.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        let env = [("HOME", home.display().to_string())];
        prepare_with(&root, &project, &vars(&env));
        for owner in [Owner::Agent, Owner::Checks] {
            let ours = own_caches_with(&root, &project, owner, &vars(&env))
                .folder
                .join("cargo");
            assert!(
                ours.join("registry/cache/idx/tinydep-0.1.0.crate")
                    .is_file()
            );
            assert!(
                ours.join("registry/index/idx/.cache/ti/ny/tinydep")
                    .is_file()
            );
            assert!(ours.join("config.toml").is_file());
            for never in [
                "credentials.toml",
                "bin",
                "registry/src",
                "registry/cache/.package-cache",
            ] {
                assert!(!ours.join(never).exists(), "{never} copied");
            }
            // What the owner changed in its own copy of the settings is
            // replaced at the next start; a crate it has stays.
            std::fs::write(ours.join("config.toml"), "evil").unwrap();
        }
        prepare_with(&root, &project, &vars(&env));
        let checks = own_caches_with(&root, &project, Owner::Checks, &vars(&env)).folder;
        assert_eq!(
            std::fs::read_to_string(checks.join("cargo/config.toml")).unwrap(),
            "[net]\noffline = true\n"
        );
    }

    #[test]
    fn the_persons_caches_are_found_as_their_toolchains_find_them() {
        let home = PathBuf::from("/h");
        let env = [
            ("HOME", "/h".to_string()),
            ("XDG_CACHE_HOME", "/xdg".into()),
            ("GOMODCACHE", "/m".into()),
        ];
        let found: Vec<Option<PathBuf>> = TOOLCHAIN_CACHES
            .iter()
            .map(|c| persons_cache(c, &vars(&env)))
            .collect();
        assert_eq!(
            found,
            vec![
                Some("/xdg/go-build".into()),
                Some("/m".into()),
                Some(home.join(".cargo")),
                None,
                Some(home.join(".npm")),
                Some("/xdg/pip".into()),
                Some("/xdg/uv".into()),
            ]
        );
    }
}
