//! End-to-end: `walls_parity`, the rule that a check ralph runs has no
//! right the agent lacks. One battery of probes (writes to the temp
//! folders, the home folder and its dotfiles, ralph's key folder and every
//! folder and top-level file of `.git`, locks and `commondir` included; a
//! toolchain's cache of the person's (Go's, the project being a Go module:
//! the agent and the checks build into caches of ralph's own) and cargo's
//! settings; a
//! unix socket under /tmp and an abstract one, each also through a socket
//! `io_uring` makes (`IORING_OP_SOCKET`); a datagram socketpair sent to a
//! datagram socket under /tmp and an abstract one; TCP and UDP to the
//! host's 127.0.0.1; a signal to, and the environment of, a process
//! outside; mount, umount and remount; capabilities; a terminal; the
//! variables that name the person's sockets) runs on 2.1.330: as the
//! agent's own command in the client's sandbox (the mode ralph chooses),
//! and as the loop's check, in bubblewrap's walls and in Landlock's
//! (bubblewrap hidden in a mount namespace). Whatever the client refuses the
//! agent, the check must be refused too. A probe counts as allowed by what
//! it did outside (the file the person then finds, the listener that was
//! reached, the process that got the signal), or for what only changes the
//! probe's own view (a mount, a capability, a variable) and for a write in
//! `.git` (which ralph tidies at the loop's end), by what the probe saw.
//! It runs as root and as an unprivileged user (uid 65534, the project and
//! its HOME theirs), and prints its table (docs/security.md has it).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use ralph_tests::client::ClientVersion;
use ralph_tests::listen::{Heard, PYTHON_URING_SOCKET, is_root};
use ralph_tests::mock_api::{MockApi, Reply};
use ralph_tests::project::{TEST_TASK, TempProject, run_with_timeout};
use ralph_tests::reach::{reachable, without_bubblewrap_as};
use ralph_tests::scenario::Scenario;
use ralph_tests::{LOOP_TIMEOUT, SIGNAL};
use serde_json::json;

/// The probes, in Python, up to the `io_uring` ones: each attempt's result goes to
/// `parity-out/<who>.json` in the project (the one folder both may write;
/// a folder, as Landlock's walls let a check create no entry at the
/// project's top).
const PROBE_BEFORE_URING: &str = r"import ctypes, json, mmap, os, signal, socket, struct, subprocess, sys
who = sys.argv[1]
cfg = json.load(open('parity-config.json'))
res = {}
def attempt(name, fn):
    try:
        said = fn()
        res[name] = 'done' + (': %s' % said if said else '')
    except Exception as e:
        res[name] = 'refused: %s' % e
def write(path):
    def f():
        with open(path, 'a') as fh:
            fh.write('parity %s\n' % who)
    return f
for path in cfg['writes']:
    attempt('write ' + path, write(path))
attempt('read key', lambda: open(cfg['key'], 'rb').read().hex())
def connect(address):
    def f():
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(3)
        s.connect(address)
        s.sendall(who.encode())
        s.close()
    return f
attempt('connect unix socket ' + cfg['socket'], connect(cfg['socket']))
attempt('connect abstract unix socket', connect('\0' + cfg['abstract']))
";

/// The probes after `uring_socket()` ([`PYTHON_URING_SOCKET`]) is defined.
const PROBE_AFTER_URING: &str = r"def uring_connect(address):
    def f():
        s = uring_socket()
        s.settimeout(3)
        s.connect(address)
        s.sendall((who + ' uring').encode())
        s.close()
    return f
attempt('io_uring: connect unix socket ' + cfg['socket'], uring_connect(cfg['socket']))
attempt('io_uring: connect abstract unix socket', uring_connect('\0' + cfg['abstract']))
def pair_send(address):
    def f():
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        a.sendto(who.encode(), address)
    return f
attempt('datagram socketpair: send to unix socket ' + cfg['dgram_socket'], pair_send(cfg['dgram_socket']))
attempt('datagram socketpair: send to abstract unix socket', pair_send('\0' + cfg['dgram_abstract']))
def tcp():
    s = socket.create_connection(('127.0.0.1', cfg['tcp']), timeout=3)
    s.sendall(who.encode())
    s.close()
attempt('connect TCP on the host 127.0.0.1', tcp)
def udp():
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(who.encode(), ('127.0.0.1', cfg['udp']))
attempt('send UDP to the host 127.0.0.1', udp)
def environ():
    seen = open('/proc/%d/environ' % cfg['sentinel'], 'rb').read()
    if not seen:
        raise OSError('empty')
    return '%d bytes' % len(seen)
attempt('read the environment of a process outside', environ)
attempt('signal a process outside', lambda: os.kill(cfg['sentinel'], signal.SIGUSR1))
def run(command):
    def f():
        r = subprocess.run(command, shell=True, capture_output=True, text=True)
        if r.returncode:
            raise OSError((r.stderr or r.stdout).strip()[:160])
    return f
os.makedirs('parity-out/mnt', exist_ok=True)
attempt('mount a tmpfs', run('mount -t tmpfs none parity-out/mnt'))
attempt('umount the key folder', run('umount ' + cfg['key_dir']))
attempt('umount /proc', run('umount /proc'))
attempt('remount / read-write', run('mount -o remount,rw /'))
def caps():
    for line in open('/proc/self/status'):
        if line.startswith('CapEff:') and int(line.split()[1], 16):
            return line.split()[1]
    raise OSError('no capability')
attempt('hold a capability', caps)
def tty():
    os.close(os.open('/dev/tty', os.O_RDWR))
attempt('open a terminal', tty)
def variables():
    seen = [v for v in cfg['variables'] if os.environ.get(v)]
    if not seen:
        raise OSError('none set')
    return ' '.join(seen)
attempt('see the session variables', variables)
json.dump(res, open('parity-out/%s.json' % who, 'w'), indent=1)
print('probed', len(res))
";

/// The variables that name the person's sockets and sessions, set for
/// both runs.
const SESSION_VARIABLES: [&str; 6] = [
    "SSH_AUTH_SOCK",
    "DBUS_SESSION_BUS_ADDRESS",
    "TMUX",
    "DISPLAY",
    "DOCKER_HOST",
    "XDG_RUNTIME_DIR",
];

/// A process outside both runs, of the runs' user, that leaves a mark
/// when it gets SIGUSR1.
struct Sentinel {
    child: std::process::Child,
    mark: PathBuf,
}

impl Sentinel {
    fn start(dir: &Path, uid: Option<u32>) -> Sentinel {
        let mark = dir.join("sentinel-signalled");
        let mut cmd = Command::new("python3");
        cmd.args([
            "-c",
            &format!(
                "import signal, time\nsignal.signal(signal.SIGUSR1, lambda *a: open({:?}, 'a').write('x'))\ntime.sleep(600)",
                mark.display().to_string()
            ),
        ]);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let child = cmd.spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        Sentinel { child, mark }
    }

    /// Whether it got the signal since the last time this was asked.
    fn take_signal(&self) -> bool {
        std::fs::remove_file(&self.mark).is_ok()
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run of the battery: `who` is `agent`, `check`, or
/// `landlock` (the check where bubblewrap cannot run).
struct Run {
    who: &'static str,
    project: PathBuf,
    home: PathBuf,
    key_dir: PathBuf,
    writes: Vec<PathBuf>,
    results: BTreeMap<String, String>,
    /// Keeps the project and its HOME until the run is judged.
    _scenario: Scenario,
}

/// The files the battery writes: the temp folders, the home folder and its
/// dotfiles, the key folder, and `.git`: a new file in each of its folders,
/// every top-level file appended to, and the files that redirect or lock it.
fn writes_of(who: &str, tag: &str, project: &Path, home: &Path, key_dir: &Path) -> Vec<PathBuf> {
    let name = format!("parity-{who}-{tag}");
    let mut writes: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(|d| Path::new(d).join(&name))
        .collect();
    writes.extend([
        home.join(&name),
        home.join(".bashrc"),
        home.join(".profile"),
        home.join(".gitconfig"),
        home.join(".config").join(&name),
        key_dir.join(&name),
        // The person's toolchain cache (the project is a Go module: the
        // agent and the checks get caches of ralph's own), and cargo's
        // settings beside its caches, which name programs cargo runs.
        home.join(".cache/go-build").join(&name),
        home.join(".cargo/config.toml"),
    ]);
    let git = project.join(".git");
    for special in [
        "commondir",
        "gitdir",
        "config.worktree",
        "objects/info/alternates",
        "index.lock",
        "HEAD.lock",
        "config.lock",
        "refs/heads/main.lock",
    ] {
        writes.push(git.join(special));
    }
    let mut folders = vec![git.clone()];
    while let Some(dir) = folders.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                writes.push(path.join(&name));
                folders.push(path);
            } else if dir == git && !writes.contains(&path) {
                writes.push(path);
            }
        }
    }
    writes.sort();
    writes.dedup();
    writes
}

fn chown(path: &Path, uid: u32) {
    let status = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Runs the battery as `who` in a project of its own: the agent's command
/// in the client's sandbox, or the loop's check.
fn run_battery(who: &'static str, uid: Option<u32>, shared: &Shared, bins: &Path) -> (Run, String) {
    let client = ClientVersion::V2_1_330;
    let project = TempProject::new(&format!("parity-{who}"));
    let verify = match who {
        // A second check that says it needs the network: said at the start.
        "check" | "landlock" => json!([
            {"name": "tests", "command": format!("python3 parity_probe.py {who}")},
            {"name": "fetch", "command": "true", "network": true}
        ]),
        _ => json!([]),
    };
    project.write(
        ".claude/ralph/config.json",
        json!({ "verify": verify }).to_string(),
    );
    project.write(".gitignore", "parity-*\n");
    project.write(
        "parity_probe.py",
        format!("{PROBE_BEFORE_URING}{PYTHON_URING_SOCKET}{PROBE_AFTER_URING}"),
    );
    project.write("go.mod", "module example.com/parity\n\ngo 1.19\n");
    project.write("parity-out/.keep", "");
    project.commit_all("the probes");
    // ralph installed by the binaries the runs' user reaches.
    let ctl = reachable(&ralph_tests::bins::ctl(), bins);
    reachable(&ralph_tests::bins::hook(), bins);
    let init = run_with_timeout(
        {
            let mut cmd = project.command(&ctl);
            cmd.args(["init"]);
            cmd
        },
        None,
        std::time::Duration::from_secs(30),
    );
    assert_eq!(init.code, Some(0), "{init:?}");
    project.write_prompt(TEST_TASK);
    std::fs::create_dir_all(project.home.join(".config")).unwrap();
    std::fs::create_dir_all(project.home.join(".cargo")).unwrap();
    let key_dir = project.key_dir();
    let writes = writes_of(who, &shared.tag, &project.root, &project.home, &key_dir);
    let config = json!({
        "writes": writes,
        "key": key_dir.join("record.key"),
        "key_dir": key_dir,
        "socket": shared.socket_path,
        "abstract": shared.abstract_name,
        "sentinel": shared.sentinel.child.id(),
        "dgram_socket": shared.dgram_path,
        "dgram_abstract": shared.dgram_abstract,
        "tcp": shared.tcp_port,
        "udp": shared.udp_port,
        "variables": SESSION_VARIABLES,
    });
    project.write("parity-config.json", config.to_string());
    let (root, home) = (project.root.clone(), project.home.clone());
    if let Some(uid) = uid {
        chown(project.root.parent().unwrap(), uid);
    }
    let api = match who {
        "agent" => MockApi::start(|turn, _| match turn {
            0 => Reply::bash("python3 parity_probe.py agent"),
            _ => Reply::text(format!("Probed.\n{SIGNAL}")),
        }),
        _ => MockApi::start(|_, _| Reply::text(format!("Probed.\n{SIGNAL}"))),
    };
    let scenario = Scenario::around(project, client).exact_args(&["--headless"]);
    let mut cmd = scenario.command(&api);
    cmd.env("RALPH_CLAUDE", reachable(&client.executable(), bins));
    for var in SESSION_VARIABLES {
        let value = match var {
            "XDG_RUNTIME_DIR" => shared.runtime.display().to_string(),
            "TMUX" => format!("{},1,0", shared.socket_path.display()),
            _ => format!("unix:path={}", shared.socket_path.display()),
        };
        cmd.env(var, value);
    }
    if who == "landlock" {
        cmd = without_bubblewrap_as(cmd, uid);
    } else if let Some(uid) = uid {
        cmd.uid(uid).gid(uid);
    }
    let outcome = run_with_timeout(cmd, None, LOOP_TIMEOUT);
    let said = std::fs::read_to_string(root.join(format!("parity-out/{who}.json")))
        .unwrap_or_else(|e| panic!("the {who} battery left no results ({e}): {outcome:?}"));
    let results: BTreeMap<String, String> = serde_json::from_str(&said).unwrap();
    let run = Run {
        who,
        project: root,
        home,
        key_dir,
        writes,
        results,
        _scenario: scenario,
    };
    (run, format!("{outcome:?}"))
}

/// What the probes shared by both runs reach outside them.
struct Shared {
    tag: String,
    socket_path: PathBuf,
    abstract_name: String,
    dgram_path: PathBuf,
    dgram_abstract: String,
    tcp_port: u16,
    udp_port: u16,
    runtime: PathBuf,
    sentinel: Sentinel,
}

impl Run {
    /// Whether each probe got through, judged by what it did outside where
    /// it can be seen from outside.
    fn allowed(&self, shared: &Shared, heard: &Listeners) -> BTreeMap<String, bool> {
        let mut allowed = BTreeMap::new();
        let mark = format!("parity {}", self.who);
        for path in &self.writes {
            // In the project's `.git`, what the probe saw: ralph puts back
            // what the agent left there (locks, a `gitdir`) when the loop
            // ends. Elsewhere, what the person finds: a write to a temp
            // folder of the check's own went through and reached no one.
            let written = if path.starts_with(&self.project) {
                let key = format!("write {}", path.display());
                self.results
                    .get(&key)
                    .is_some_and(|r| r.starts_with("done"))
            } else {
                std::fs::read_to_string(path).is_ok_and(|t| t.contains(&mark))
            };
            // Folders named by hashes differ between the two projects: one
            // row for them all, allowed when any was.
            *allowed
                .entry(format!("write {}", self.shown(path)))
                .or_insert(false) |= written;
        }
        let key = std::fs::read(self.key_dir.join("record.key")).unwrap_or_default();
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let read = self
            .results
            .get("read key")
            .is_some_and(|r| !hex.is_empty() && r.contains(&hex));
        allowed.insert("read ralph's key".into(), read);
        let uring = format!("{} uring", self.who);
        let heard_from = |listener: &Heard, text: &str| listener.all().iter().any(|t| t == text);
        for (row, listener, text) in [
            (
                format!("connect unix socket {}", shared.socket_path.display()),
                &heard.socket,
                self.who,
            ),
            (
                "connect abstract unix socket".into(),
                &heard.abstract_,
                self.who,
            ),
            (
                format!(
                    "io_uring: connect unix socket {}",
                    shared.socket_path.display()
                ),
                &heard.socket,
                uring.as_str(),
            ),
            (
                "io_uring: connect abstract unix socket".into(),
                &heard.abstract_,
                uring.as_str(),
            ),
            (
                format!(
                    "datagram socketpair: send to unix socket {}",
                    shared.dgram_path.display()
                ),
                &heard.dgram,
                self.who,
            ),
            (
                "datagram socketpair: send to abstract unix socket".into(),
                &heard.dgram_abstract,
                self.who,
            ),
            (
                "connect TCP on the host 127.0.0.1".into(),
                &heard.tcp,
                self.who,
            ),
            (
                "send UDP to the host 127.0.0.1".into(),
                &heard.udp,
                self.who,
            ),
        ] {
            allowed.insert(row, heard_from(listener, text));
        }
        for (name, result) in &self.results {
            let by_itself = [
                "mount a tmpfs",
                "umount the key folder",
                "umount /proc",
                "remount / read-write",
                "hold a capability",
                "open a terminal",
                "see the session variables",
                "read the environment of a process outside",
            ];
            if by_itself.contains(&name.as_str()) {
                allowed.insert(name.clone(), result.starts_with("done"));
            }
        }
        allowed
    }

    /// `path` with the run's own folders named, so both runs' rows meet.
    fn shown(&self, path: &Path) -> String {
        let text = path.display().to_string();
        let text = text.replace(&self.key_dir.display().to_string(), "<key folder>");
        let text = text.replace(&self.project.display().to_string(), "<project>");
        let text = text.replace(&self.home.display().to_string(), "~");
        let text = text.replace(&format!("parity-{}-", self.who), "parity-<who>-");
        match text.split_once("/.git/objects/") {
            Some((head, rest))
                if rest.len() > 3
                    && rest.as_bytes()[2] == b'/'
                    && rest[..2].bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                format!("{head}/.git/objects/<xx>/{}", &rest[3..])
            }
            _ => text,
        }
    }
}

/// The person's listeners the probes try to reach.
struct Listeners {
    socket: Heard,
    abstract_: Heard,
    dgram: Heard,
    dgram_abstract: Heard,
    tcp: Heard,
    udp: Heard,
}

#[allow(clippy::too_many_lines)] // the person's sockets and services set up, then each wall tried on them
fn parity(uid: Option<u32>) {
    let base = std::env::temp_dir().join(format!(
        "ralph-parity-{}-{}",
        uid.map_or("root".to_string(), |u| u.to_string()),
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o777)).unwrap();
    let tag = format!("{}{}", std::process::id(), uid.unwrap_or(0));
    let (tcp_port, tcp) = Heard::tcp();
    let (udp_port, udp) = Heard::udp();
    let shared = Shared {
        socket_path: PathBuf::from(format!("/tmp/parity-{tag}.sock")),
        abstract_name: format!("ralph-parity-{tag}"),
        dgram_path: PathBuf::from(format!("/tmp/parity-{tag}.dgram")),
        dgram_abstract: format!("ralph-parity-dgram-{tag}"),
        tcp_port,
        udp_port,
        runtime: base.join("run"),
        sentinel: Sentinel::start(&base, uid),
        tag,
    };
    std::fs::create_dir_all(&shared.runtime).unwrap();
    // The person's sockets: a pathname one under /tmp (open to the
    // unprivileged user, as theirs would be), and an abstract one.
    // The person's services on 127.0.0.1, TCP and UDP, and datagram
    // sockets, pathname and abstract.
    let heard = Listeners {
        socket: Heard::unix(&shared.socket_path, uid.is_some(), false),
        abstract_: Heard::abstract_unix(&shared.abstract_name),
        dgram: Heard::unix_datagram(&shared.dgram_path.display().to_string()),
        dgram_abstract: Heard::unix_datagram(&format!("\0{}", shared.dgram_abstract)),
        tcp,
        udp,
    };
    let bins = base.join("bin");
    let (agent, agent_run) = run_battery("agent", uid, &shared, &bins);
    let mut agent_allowed = agent.allowed(&shared, &heard);
    agent_allowed.insert(
        "signal a process outside".into(),
        shared.sentinel.take_signal(),
    );
    // The check as bubblewrap walls it, and as Landlock does where
    // bubblewrap cannot run (hidden from it in a mount namespace).
    let mut runs = Vec::new();
    for who in ["check", "landlock"] {
        let (run, said) = run_battery(who, uid, &shared, &bins);
        // The check that needs the network is named at the start.
        assert!(
            said.contains("walls: the check `fetch` keeps this machine's network"),
            "{said}"
        );
        let mut allowed = run.allowed(&shared, &heard);
        allowed.insert(
            "signal a process outside".into(),
            shared.sentinel.take_signal(),
        );
        runs.push((run, said, allowed));
    }
    let _ = std::fs::remove_file(&shared.socket_path);
    let _ = std::fs::remove_file(&shared.dgram_path);
    for run in std::iter::once(&agent).chain(runs.iter().map(|(run, _, _)| run)) {
        for path in &run.writes {
            if path.starts_with("/tmp")
                || path.starts_with("/var/tmp")
                || path.starts_with("/dev/shm")
            {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    let user = uid.map_or("root".to_string(), |u| format!("uid {u}"));
    let heads: Vec<&str> = runs.iter().map(|(run, _, _)| run.who).collect();
    let mut table = format!(
        "walls_parity as {user}: probe | client's sandbox | {}\n",
        heads.join(" | ")
    );
    let word = |b: bool| if b { "allowed" } else { "refused" };
    for (probe, agent_may) in &agent_allowed {
        let mut row = format!("{probe} | {}", word(*agent_may));
        for (_, _, allowed) in &runs {
            let check_may = allowed.get(probe).copied().unwrap_or(false);
            row.push_str(&format!(" | {}", word(check_may)));
        }
        table.push_str(&row);
        table.push('\n');
    }
    let judged: Vec<(&str, &BTreeMap<String, bool>)> = runs
        .iter()
        .map(|(run, _, allowed)| (run.who, allowed))
        .collect();
    let broken = broken_rows(&agent_allowed, &judged);
    for (run, _, allowed) in &runs {
        for probe in allowed.keys() {
            assert!(
                agent_allowed.contains_key(probe),
                "the {} probe {probe} has no row of the agent's: {agent_allowed:?}",
                run.who
            );
        }
    }
    eprintln!("{table}");
    // The battery did run on every side.
    assert!(agent_allowed.len() > 40, "{table}\n{agent_run}");
    let said: Vec<String> = runs
        .iter()
        .map(|(run, said, _)| format!("{}: {:?}\n{said}", run.who, run.results))
        .collect();
    assert!(
        broken.is_empty(),
        "the check may do what the client refuses the agent: {broken:?}\n{table}\nagent: {:?}\n{}",
        agent.results,
        said.join("\n")
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// The probes a check may get through in ralph's walls, by the start of
/// their row: none (the person's toolchain caches no more: a check writes
/// caches of ralph's own). Every row is refused, whatever the client lets
/// its agent do: where ralph's walls are stricter than the client's sandbox
/// (a write in `.git`, a datagram sent to a socket under /tmp, a capability
/// as root, the person's session variables), a check that got through has
/// lost a wall.
const A_CHECK_MAY: [&str; 0] = [];

/// The rows that break the rule, as `probe (who)`: a check (each of
/// `runs`, by who it is) got through where the client refused the agent,
/// or anywhere but [`A_CHECK_MAY`].
fn broken_rows(
    agent: &BTreeMap<String, bool>,
    runs: &[(&str, &BTreeMap<String, bool>)],
) -> Vec<String> {
    let mut broken = Vec::new();
    for (probe, agent_may) in agent {
        for (who, allowed) in runs {
            let check_may = allowed.get(probe).copied().unwrap_or(false);
            let may = A_CHECK_MAY.iter().any(|row| probe.starts_with(row));
            if check_may && (!agent_may || !may) {
                broken.push(format!("{probe} ({who})"));
            }
        }
    }
    broken
}

#[test]
fn a_check_that_lost_a_stricter_wall_breaks_the_rule() {
    let table = |rows: &[(&str, bool)]| -> BTreeMap<String, bool> {
        rows.iter().map(|(p, b)| ((*p).to_string(), *b)).collect()
    };
    // The client lets its agent write `.git` and hold a capability as
    // root; ralph's walls refuse a check both, and must go on refusing.
    let agent = table(&[
        ("write <project>/.git/HEAD", true),
        ("hold a capability", true),
        ("write ~/.cache/go-build/parity-<who>-1", false),
        ("connect TCP on the host 127.0.0.1", false),
    ]);
    let held = table(&[
        ("write <project>/.git/HEAD", false),
        ("hold a capability", false),
        ("write ~/.cache/go-build/parity-<who>-1", false),
        ("connect TCP on the host 127.0.0.1", false),
    ]);
    assert_eq!(
        broken_rows(&agent, &[("check", &held)]),
        Vec::<String>::new()
    );
    let lost = table(&[
        ("write <project>/.git/HEAD", true),
        ("hold a capability", true),
        ("write ~/.cache/go-build/parity-<who>-1", true),
        ("connect TCP on the host 127.0.0.1", true),
    ]);
    assert_eq!(
        broken_rows(&agent, &[("check", &held), ("landlock", &lost)]),
        [
            "connect TCP on the host 127.0.0.1 (landlock)",
            "hold a capability (landlock)",
            "write <project>/.git/HEAD (landlock)",
            "write ~/.cache/go-build/parity-<who>-1 (landlock)",
        ]
    );
}

#[test]
fn walls_parity_as_root() {
    if !is_root() {
        eprintln!(
            "skipped: not root (walls_parity_as_an_unprivileged_user runs the battery as this user)"
        );
        return;
    }
    parity(None);
}

#[test]
fn walls_parity_as_an_unprivileged_user() {
    // As root, the battery runs as uid 65534; as anyone else, as them.
    parity(is_root().then_some(65534));
}
