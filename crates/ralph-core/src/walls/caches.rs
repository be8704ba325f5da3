//! The toolchains' caches a walled check may write: without them a check
//! that passes plainly fails in the walls (Go's build cache in a fresh
//! container: "read-only file system"; cargo's `.cargo-lock` in a shared
//! target folder; a crate the agent added, fetched into cargo's registry).
//!
//! [`TOOLCHAIN_CACHES`] is the one list: each entry is a folder a toolchain
//! writes on its own, found as the toolchain finds it (its variable first,
//! else its default place), and why it may be written. Never granted,
//! whatever a variable says ([`refusal`]): the home folder itself or a
//! folder that holds it, a folder on `PATH` or one holding one (what it
//! holds runs), the places that hold settings, secrets or code the person's
//! shell runs later (`~/.config`, the shell's rc files, `~/.ssh`,
//! `~/.gitconfig`, cargo's `config.toml`, `credentials.toml` and `bin/`,
//! …), ralph's key folder, the runtime folder, a temp folder itself, and
//! the project's `.git` and `.claude`. A variable that points at one of
//! them is refused with one line, and the check runs without that cache.
//!
//! The agent gets the same folders writable in the client's sandbox
//! (`sandbox.filesystem.allowWrite` in the settings ralph passes), so a
//! check has no right the agent lacks, and the agent can run the check it
//! is judged by.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where a cache lies when its variable is not set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefaultPlace {
    /// None: the cache is only where its variable says (`CARGO_TARGET_DIR`:
    /// by default cargo's target folder is in the project, writable anyway).
    Nowhere,
    /// This folder of the home folder.
    Home(&'static str),
    /// This folder of the user's cache folder (`$XDG_CACHE_HOME`, else
    /// `~/.cache`), as Go's `os.UserCacheDir`, pip and uv find it.
    UserCache(&'static str),
    /// This folder of the first `GOPATH` entry, else of `~/go`.
    GoPath(&'static str),
}

/// One cache a toolchain writes by itself.
#[derive(Clone, Copy, Debug)]
pub struct ToolchainCache {
    /// What it is, for the person.
    pub name: &'static str,
    /// The variables that name its folder, in the toolchain's order.
    pub variables: &'static [&'static str],
    /// Where it is when no variable names it.
    pub default: DefaultPlace,
    /// The folders of it granted (`""`: the folder itself).
    pub folders: &'static [&'static str],
    /// Files at the checked folder's top that say the project uses the
    /// toolchain: the cache is then made when it is missing (a fresh CI
    /// container has none), so that it can be granted.
    pub used_by: &'static [&'static str],
    /// Why it may be written.
    pub why: &'static str,
}

/// Files at a project's top that say it is a Python project.
const PYTHON_PROJECT: &[&str] = &[
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements.txt",
    "uv.lock",
];

/// The toolchains' caches a walled check may write (and the agent, through
/// the client's settings): the one list.
pub const TOOLCHAIN_CACHES: [ToolchainCache; 7] = [
    ToolchainCache {
        name: "Go's build cache",
        variables: &["GOCACHE"],
        default: DefaultPlace::UserCache("go-build"),
        folders: &[""],
        used_by: &["go.mod", "go.work"],
        why: "compiled packages and test results, each filed under the hash of all its \
              inputs; `go build` and `go test` refuse to run without it",
    },
    ToolchainCache {
        name: "Go's module cache",
        variables: &["GOMODCACHE"],
        default: DefaultPlace::GoPath("pkg/mod"),
        folders: &[""],
        used_by: &["go.mod", "go.work"],
        why: "the modules a build downloads, checked against go.sum as they are fetched",
    },
    ToolchainCache {
        name: "cargo's registry and git sources",
        variables: &["CARGO_HOME"],
        default: DefaultPlace::Home(".cargo"),
        // Never CARGO_HOME itself: its config.toml names programs cargo
        // runs, credentials.toml holds the registry's token, bin/ is on PATH.
        folders: &["registry", "git"],
        used_by: &["Cargo.toml"],
        why: "the index and the crates a build fetches (each checked against its checksum \
              as it is fetched), and git dependencies",
    },
    ToolchainCache {
        name: "cargo's target folder",
        variables: &["CARGO_TARGET_DIR"],
        default: DefaultPlace::Nowhere,
        folders: &[""],
        used_by: &["Cargo.toml"],
        why: "a build's output, shared by projects; cargo locks it (`.cargo-lock`) as it builds",
    },
    ToolchainCache {
        name: "npm's cache",
        variables: &["npm_config_cache", "NPM_CONFIG_CACHE"],
        default: DefaultPlace::Home(".npm"),
        // Not `_npx`: the packages `npx` installed there run, unchecked,
        // the next time the person types `npx` with that name.
        folders: &["_cacache", "_logs"],
        used_by: &["package.json"],
        why: "downloaded packages filed by their content's hash (checked as they are read), \
              and npm's logs",
    },
    ToolchainCache {
        name: "pip's cache",
        variables: &["PIP_CACHE_DIR"],
        default: DefaultPlace::UserCache("pip"),
        folders: &[""],
        used_by: PYTHON_PROJECT,
        why: "downloaded packages and the wheels pip built",
    },
    ToolchainCache {
        name: "uv's cache",
        variables: &["UV_CACHE_DIR"],
        default: DefaultPlace::UserCache("uv"),
        folders: &[""],
        used_by: PYTHON_PROJECT,
        why: "downloaded packages, built wheels and the environments uv makes",
    },
];

/// The home folder's entries that hold settings, secrets or code the
/// person's shell runs later: a cache may neither lie in one nor hold one.
const NEVER_WRITTEN_IN_HOME: [&str; 24] = [
    ".config",
    ".ssh",
    ".gnupg",
    ".gitconfig",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".pydistutils.cfg",
    ".docker",
    ".aws",
    ".kube",
    ".local/bin",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    "go/bin",
];

/// cargo's own files beside its caches: its settings (which name programs
/// cargo runs), the registry's token, the programs it installed.
const NEVER_WRITTEN_IN_CARGO_HOME: [&str; 5] = [
    "config",
    "config.toml",
    "credentials",
    "credentials.toml",
    "bin",
];

/// What a check may write of the toolchains' caches, and what was refused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Granted {
    /// The folders (real paths), each once.
    pub folders: Vec<PathBuf>,
    /// One line for each cache a variable sends where no check may write.
    pub refused: Vec<String>,
}

/// The places no cache may lie in or hold, besides those of
/// [`NEVER_WRITTEN_IN_HOME`].
struct Forbidden {
    home: Option<PathBuf>,
    /// Each with what it is, for the refusal's line.
    places: Vec<(PathBuf, String)>,
    path_folders: Vec<PathBuf>,
}

/// The toolchains' caches a check of `work_root` may write, as this
/// process's environment finds them; none may lie in or hold a folder of
/// `keep_out` (ralph's key folder, the main checkout's `.git` and
/// `.claude`). Only caches that exist: a check never makes one, so that it
/// writes no folder the agent's sandbox was not given at the start
/// ([`make_missing`] makes them then).
pub fn toolchain_caches(work_root: &Path, keep_out: &[PathBuf]) -> Granted {
    toolchain_caches_with(work_root, keep_out, &|name| std::env::var_os(name), false)
}

/// Makes the caches of the toolchains the project at `work_root` uses
/// that are missing (a fresh container has no Go build cache), as a loop
/// starts, before the agent's sandbox is given the same folders.
pub fn make_missing(work_root: &Path, keep_out: &[PathBuf]) {
    toolchain_caches_with(work_root, keep_out, &|name| std::env::var_os(name), true);
}

/// [`toolchain_caches`] with the variables `lookup` gives (the tests').
pub fn toolchain_caches_with(
    work_root: &Path,
    keep_out: &[PathBuf],
    lookup: &dyn Fn(&str) -> Option<OsString>,
    make: bool,
) -> Granted {
    let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
    let home = var("HOME").map(PathBuf::from).filter(|h| h.is_absolute());
    let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let root = real(work_root);
    let forbidden = forbidden(&root, home.as_deref(), keep_out, &var);
    let mut granted = Granted::default();
    for cache in &TOOLCHAIN_CACHES {
        let named = cache
            .variables
            .iter()
            .find_map(|v| var(v).map(|value| (*v, PathBuf::from(value))));
        // `GOCACHE=off`: Go keeps no cache (and then refuses to build).
        if named
            .as_ref()
            .is_some_and(|(_, p)| p.as_os_str() == "off" && cache.variables.contains(&"GOCACHE"))
        {
            continue;
        }
        let base = match &named {
            Some((_, path)) if path.is_absolute() => Some(path.clone()),
            Some((_, path)) => Some(root.join(path)),
            None => default_place(cache.default, home.as_deref(), &var),
        };
        let Some(base) = base else { continue };
        let uses = cache.used_by.iter().any(|f| root.join(f).exists());
        for folder in cache.folders {
            let path = if folder.is_empty() {
                base.clone()
            } else {
                base.join(folder)
            };
            let refused = |at: &Path, why: String| match &named {
                Some((variable, _)) => format!(
                    "walls: {variable}={} is not writable for the checks: {why}; point \
                     {variable} at a folder of its own",
                    at.display()
                ),
                None => format!(
                    "walls: {} ({}) is not writable for the checks: {why}",
                    cache.name,
                    at.display()
                ),
            };
            if let Some(why) = forbidden.refusal(&path) {
                granted.refused.push(refused(&path, why));
                continue;
            }
            // A missing cache is made for a project of its toolchain.
            if !path.exists() && (!make || !uses || std::fs::create_dir_all(&path).is_err()) {
                continue;
            }
            let path = real(&path);
            if let Some(why) = forbidden.refusal(&path) {
                granted.refused.push(refused(&path, why));
                continue;
            }
            let in_checked_folder = path.starts_with(&root);
            if path.is_dir() && !in_checked_folder && !granted.folders.contains(&path) {
                granted.folders.push(path);
            }
        }
    }
    granted.refused.dedup();
    granted
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

/// Everything a cache may neither lie in nor hold.
fn forbidden(
    root: &Path,
    home: Option<&Path>,
    keep_out: &[PathBuf],
    var: &dyn Fn(&str) -> Option<OsString>,
) -> Forbidden {
    let mut places: Vec<(PathBuf, String)> = Vec::new();
    let mut add = |path: PathBuf, what: String| {
        for p in [path.clone(), std::fs::canonicalize(&path).unwrap_or(path)] {
            if !places.iter().any(|(q, _)| *q == p) {
                places.push((p, what.clone()));
            }
        }
    };
    if let Some(home) = home {
        for entry in NEVER_WRITTEN_IN_HOME {
            add(
                home.join(entry),
                format!("~/{entry} holds settings, secrets or what runs later"),
            );
        }
    }
    let config_home = var("XDG_CONFIG_HOME").map(PathBuf::from);
    if let Some(config) = config_home.filter(|p| p.is_absolute()) {
        add(
            config,
            "the settings folder ($XDG_CONFIG_HOME) names programs".into(),
        );
    }
    let cargo_home = var("CARGO_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| home.map(|h| h.join(".cargo")));
    if let Some(cargo_home) = cargo_home {
        for entry in NEVER_WRITTEN_IN_CARGO_HOME {
            add(
                cargo_home.join(entry),
                format!("cargo's {entry} holds its settings, a token or its programs"),
            );
        }
    }
    for dir in [".git", ".claude"] {
        add(
            root.join(dir),
            format!("the project's {dir} is not a check's"),
        );
    }
    for dir in keep_out {
        add(
            dir.clone(),
            format!("{} is kept from every check", dir.display()),
        );
    }
    if let Some(runtime) = var("XDG_RUNTIME_DIR").map(PathBuf::from) {
        add(
            runtime,
            "the runtime folder holds the person's sockets".into(),
        );
    }
    let path_folders = var("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.is_absolute())
        .flat_map(|p| [p.clone(), std::fs::canonicalize(&p).unwrap_or(p)])
        .collect();
    Forbidden {
        home: home.map(Path::to_path_buf),
        places,
        path_folders,
    }
}

impl Forbidden {
    /// Why no check may write `path`, if so.
    fn refusal(&self, path: &Path) -> Option<String> {
        if !path.is_absolute() || path.parent().is_none() {
            return Some("it is not a folder of its own".into());
        }
        for temp in super::TEMP_FOLDERS {
            if Path::new(temp).starts_with(path) {
                return Some(format!("it holds {temp}, which every check gets fresh"));
            }
        }
        if let Some(home) = &self.home {
            let real_home = std::fs::canonicalize(home).unwrap_or_else(|_| home.clone());
            if home.starts_with(path) || real_home.starts_with(path) {
                return Some("it is the home folder, or holds it".into());
            }
        }
        if let Some(folder) = self
            .path_folders
            .iter()
            .find(|f| path.starts_with(f) || f.starts_with(path))
        {
            return Some(format!(
                "{} is on PATH: what it holds runs",
                folder.display()
            ));
        }
        self.places
            .iter()
            .find(|(place, _)| path.starts_with(place) || place.starts_with(path))
            .map(|(_, what)| what.clone())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    struct Setup {
        _dir: tempfile::TempDir,
        home: PathBuf,
        project: PathBuf,
    }

    fn setup(marker: Option<&str>) -> Setup {
        let dir = tempfile::TempDir::new().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let (home, project) = (base.join("home"), base.join("project"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(project.join(".git")).unwrap();
        if let Some(marker) = marker {
            std::fs::write(project.join(marker), "").unwrap();
        }
        Setup {
            _dir: dir,
            home,
            project,
        }
    }

    fn caches(setup: &Setup, vars: &[(&str, String)]) -> Granted {
        let mut all: Vec<(String, String)> = vec![
            ("HOME".into(), setup.home.display().to_string()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ];
        all.extend(vars.iter().map(|(k, v)| (k.to_string(), v.clone())));
        toolchain_caches_with(
            &setup.project,
            &[],
            &|name| {
                all.iter()
                    .rev()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| OsString::from(v))
            },
            true,
        )
    }

    #[test]
    fn a_check_never_makes_a_cache_the_start_did_not() {
        let setup = setup(Some("go.mod"));
        let lookup = |name: &str| match name {
            "HOME" => Some(OsString::from(&setup.home)),
            "PATH" => Some(OsString::from("/usr/bin:/bin")),
            _ => None,
        };
        let granted = toolchain_caches_with(&setup.project, &[], &lookup, false);
        assert!(granted.folders.is_empty(), "{granted:?}");
        assert!(!setup.home.join(".cache/go-build").exists());
    }

    #[test]
    fn a_go_project_gets_its_build_and_module_caches_made_and_granted() {
        let setup = setup(Some("go.mod"));
        let granted = caches(&setup, &[]);
        let build = setup.home.join(".cache/go-build");
        let modules = setup.home.join("go/pkg/mod");
        assert_eq!(granted.folders, vec![build.clone(), modules.clone()]);
        assert!(build.is_dir() && modules.is_dir());
        assert!(granted.refused.is_empty(), "{granted:?}");
        // Nothing of another toolchain is made for it.
        assert!(!setup.home.join(".cargo").exists());
    }

    #[test]
    fn the_variables_are_followed_and_only_the_projects_toolchain_is_made() {
        let setup = setup(Some("Cargo.toml"));
        let shared = setup.home.join("shared-target");
        let cargo_home = setup.home.join("cargo-home");
        let pip = setup.home.join("pip-cache");
        std::fs::create_dir_all(&pip).unwrap();
        let granted = caches(
            &setup,
            &[
                ("CARGO_TARGET_DIR", shared.display().to_string()),
                ("CARGO_HOME", cargo_home.display().to_string()),
                ("PIP_CACHE_DIR", pip.display().to_string()),
            ],
        );
        assert_eq!(
            granted.folders,
            vec![
                cargo_home.join("registry"),
                cargo_home.join("git"),
                shared.clone(),
                pip.clone()
            ]
        );
        // Never cargo's home itself, nor its settings.
        assert!(!cargo_home.join("config.toml").exists());
        // A target folder inside the project is the project's: not listed.
        let inside = setup.project.join("target");
        let granted = caches(
            &setup,
            &[("CARGO_TARGET_DIR", inside.display().to_string())],
        );
        assert!(
            !granted
                .folders
                .iter()
                .any(|f| f.starts_with(&setup.project))
        );
    }

    #[test]
    fn a_variable_sending_a_cache_where_code_or_secrets_lie_is_refused_in_one_line() {
        let setup = setup(Some("go.mod"));
        let home = setup.home.display().to_string();
        for (variable, value, why) in [
            ("GOCACHE", home.clone(), "home folder"),
            ("GOCACHE", format!("{home}/.config/go"), "~/.config"),
            ("GOMODCACHE", format!("{home}/.ssh"), "~/.ssh"),
            ("CARGO_TARGET_DIR", "/usr".into(), "PATH"),
            ("CARGO_TARGET_DIR", "/usr/bin/x".into(), "PATH"),
            ("PIP_CACHE_DIR", "/".into(), "folder of its own"),
            ("UV_CACHE_DIR", "/tmp".into(), "fresh"),
            (
                "GOCACHE",
                setup.project.join(".git/go").display().to_string(),
                ".git",
            ),
            ("CARGO_HOME", format!("{home}/.cargo"), ""),
        ] {
            let granted = caches(&setup, &[(variable, value.clone())]);
            if why.is_empty() {
                assert!(granted.refused.is_empty(), "{variable}: {granted:?}");
                continue;
            }
            assert_eq!(granted.refused.len(), 1, "{variable}={value}: {granted:?}");
            let line = &granted.refused[0];
            assert!(
                line.starts_with(&format!("walls: {variable}={value}")) && line.contains(why),
                "{line}"
            );
            assert!(line.contains(&format!("point {variable} at")), "{line}");
            assert!(
                !granted.folders.contains(&PathBuf::from(&value)),
                "{granted:?}"
            );
        }
        assert!(!setup.home.join(".config").exists());
    }

    #[test]
    fn a_cache_holding_a_folder_kept_from_the_checks_is_refused() {
        let setup = setup(Some("package.json"));
        let keys = setup.home.join(".local/share/ralph");
        std::fs::create_dir_all(&keys).unwrap();
        let npm = setup.home.join(".local/share");
        let mut vars = vec![
            ("HOME".to_string(), setup.home.display().to_string()),
            ("npm_config_cache".to_string(), npm.display().to_string()),
        ];
        vars.push(("PATH".into(), "/usr/bin".into()));
        let granted = toolchain_caches_with(
            &setup.project,
            std::slice::from_ref(&keys),
            &|name| {
                vars.iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| OsString::from(v))
            },
            true,
        );
        // _cacache and _logs of it: neither holds the key folder, both granted.
        assert_eq!(
            granted.folders,
            vec![npm.join("_cacache"), npm.join("_logs")]
        );
        let vars = [
            ("HOME".to_string(), setup.home.display().to_string()),
            ("npm_config_cache".to_string(), keys.display().to_string()),
        ];
        let granted = toolchain_caches_with(
            &setup.project,
            std::slice::from_ref(&keys),
            &|name| {
                vars.iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| OsString::from(v))
            },
            true,
        );
        assert!(granted.folders.is_empty(), "{granted:?}");
        assert_eq!(granted.refused.len(), 2, "{granted:?}");
    }
}
