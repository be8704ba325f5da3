use super::*;

fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::TempDir::new().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap().join("p");
    for sub in [".claude/ralph", ".git/hooks", ".git/info", "src"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join(".claude/ralph/config.json"), "{}").unwrap();
    (dir, root)
}

fn bwrap_or_skip() -> Option<&'static Mechanism> {
    match Mechanism::probe() {
        m @ Mechanism::Bubblewrap(_) => Some(m),
        other => {
            eprintln!("skipped: no bubblewrap here ({other:?})");
            None
        }
    }
}

fn run(walls: &Walls, root: &Path, script: &str) -> (i32, String) {
    let (mut cmd, _temp) = walls.shell(script).unwrap();
    cmd.current_dir(root);
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn a_check_builds_into_the_checks_own_caches_never_the_agents() {
    let (_dir, root) = project();
    let checks = caches::own_caches(&root, caches::Owner::Checks).unwrap();
    let agent = caches::own_caches(&root, caches::Owner::Agent).unwrap();
    // Open walls too: a check never reads what the agent cached.
    let open = Walls::around(&root, &root, WallsWanted::Off);
    assert_eq!(open.cache_env(), checks.env.as_slice());
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
    let folder = std::fs::canonicalize(&checks.folder).unwrap();
    assert_eq!(walls.caches(), std::slice::from_ref(&folder));
    let (code, output) = run(
        &walls,
        &root,
        "mkdir -p \"$GOCACHE\" && echo built > \"$GOCACHE/entry\" && echo \"$GOCACHE\"",
    );
    assert_eq!(code, 0, "{output}");
    let gocache = checks.folder.join("go-build");
    assert!(output.contains(&*gocache.to_string_lossy()), "{output}");
    assert!(gocache.join("entry").is_file(), "{output}");
    assert!(!agent.folder.join("go-build/entry").exists());
    let _ = std::fs::remove_dir_all(checks.folder.parent().unwrap());
}

#[test]
fn a_walled_check_writes_its_project_and_temp_and_nothing_else() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (dir, root) = project();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let home_like = std::fs::canonicalize(&outside).unwrap();
    let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
    assert!(walls.walled());
    // The temp dir holds both here, so the outside folder is made
    // read-only the way a home folder is: by not being writable.
    let walls = Walls {
        writable: walls
            .writable
            .iter()
            .filter(|p| !home_like.starts_with(p))
            .cloned()
            .collect(),
        ..walls
    };
    let script = format!(
        "echo ok > src/new.py && echo ok > new-at-root && echo t > \"$(mktemp -d /var/tmp/w.XXXX)/t\" && echo written; \
             echo evil > {out}/evil; echo s > .claude/settings.local.json; echo c >> .claude/ralph/config.json; \
             mv .claude .claude-moved; echo h > .git/hooks/post-commit; echo x >> .git/config; echo i > .git/info/attributes; \
             echo done",
        out = outside.display()
    );
    let (code, output) = run(&walls, &root, &script);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("written"), "{output}");
    assert!(root.join("src/new.py").is_file() && root.join("new-at-root").is_file());
    assert!(!outside.join("evil").exists(), "{output}");
    assert!(!root.join(".claude/settings.local.json").exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".claude/ralph/config.json")).unwrap(),
        "{}"
    );
    assert!(root.join(".claude").is_dir() && !root.join(".claude-moved").exists());
    assert!(!root.join(".git/hooks/post-commit").exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!root.join(".git/info/attributes").exists());
}

#[test]
fn a_walled_check_cannot_go_round_through_proc_nor_rename_git() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (dir, root) = project();
    let outside = std::fs::canonicalize(dir.path()).unwrap().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
    // The outside folder lies in the temp folder here: made read-only as
    // a home folder is, by not being writable.
    let walls = Walls {
        writable: walls
            .writable
            .iter()
            .filter(|p| !outside.starts_with(p))
            .cloned()
            .collect(),
        ..walls
    };
    let me = std::process::id();
    let script = format!(
        "echo evil > /proc/{me}/root{out}/evil; echo c >> /proc/{me}/root{root}/.git/config; \
             mv .git .git-old; mkdir -p .git-new; echo done",
        out = outside.display(),
        root = root.display()
    );
    let (_, output) = run(&walls, &root, &script);
    assert!(output.contains("done"), "{output}");
    assert!(!outside.join("evil").exists(), "{output}");
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(root.join(".git/config").is_file() && !root.join(".git-old").exists());
}

#[test]
fn a_hidden_folder_is_empty_to_the_check() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (dir, root) = project();
    let secret = dir.path().join("keys");
    std::fs::create_dir(&secret).unwrap();
    std::fs::write(secret.join("key"), "s3cret").unwrap();
    let walls = Walls::with_mechanism(&root, &root, WallsWanted::Auto, mechanism.clone())
        .hide(secret.clone());
    let (_, output) = run(
        &walls,
        &root,
        &format!("cat {}/key; echo end", secret.display()),
    );
    assert!(!output.contains("s3cret"), "{output}");
    assert!(output.contains("end"));
}

#[test]
fn a_worktree_check_writes_its_tree_but_not_the_repository() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (_dir, root) = project();
    let tree = root.join(".claude/worktrees/item");
    let gitdir = root.join(".git/worktrees/item");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::create_dir_all(&gitdir).unwrap();
    std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
    std::fs::write(gitdir.join("commondir"), "../..\n").unwrap();
    let walls = Walls::with_mechanism(&root, &tree, WallsWanted::Required, mechanism.clone());
    let (_, output) = run(
        &walls,
        &tree,
        &format!(
            "echo w > work.txt; echo r > {git}/worktrees/item/ORIG_HEAD; echo c >> {git}/config; \
                 echo /elsewhere > {git}/worktrees/item/commondir; echo l > {git}/index.lock; \
                 echo g > .git; echo p > {root}/.claude/ralph/PROMPT.md; echo done",
            git = root.join(".git").display(),
            root = root.display()
        ),
    );
    assert!(output.contains("done"), "{output}");
    assert!(tree.join("work.txt").is_file());
    assert!(!gitdir.join("ORIG_HEAD").exists(), "{output}");
    assert!(!root.join(".git/index.lock").exists(), "{output}");
    assert_eq!(
        std::fs::read_to_string(gitdir.join("commondir")).unwrap(),
        "../..\n"
    );
    assert!(
        std::fs::read_to_string(tree.join(".git"))
            .unwrap()
            .starts_with("gitdir: ")
    );
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!root.join(".claude/ralph/PROMPT.md").exists());
}

/// Runs `script` walled by `mechanism` in a fresh project, with the
/// person's session variables set, as root when the tests are.
fn probe(mechanism: &Mechanism, script: &str) -> (PathBuf, String) {
    let (dir, root) = project();
    let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
    let mut inner = crate::process::group::shell(script);
    for var in SESSION_VARIABLES {
        inner.env(var, "/tmp/the-persons-socket");
    }
    let (mut cmd, _temp) = walls.wrap(inner).unwrap();
    cmd.current_dir(&root);
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    std::mem::forget(dir);
    (root, text)
}

/// What a check must not do, whatever user runs it: hold a capability,
/// make a unix socket (pathname or abstract), write a temp folder
/// anyone else sees, see the person's session variables.
const ESCAPES: &str = "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
        python3 -c 'import socket\nfor a in (\"/tmp/x.sock\", \"\\0ralph-walls-abstract\"):\n  try:\n    socket.socket(socket.AF_UNIX).connect(a)\n  except OSError as e: print(\"unix:\", e.errno)'; \
        python3 -c 'import socket; a, b = socket.socketpair(); a.send(b\"x\"); print(\"pair:\", b.recv(1))'; \
        python3 -c 'import socket\ntry:\n  socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM); print(\"dgram: made\")\nexcept OSError as e: print(\"dgram:\", e.errno)'; \
        python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); r = c.syscall(425, 4, ctypes.create_string_buffer(120)); print(\"uring:\", ctypes.get_errno() if r < 0 else \"made\")'; \
        echo t > /tmp/ralph-walls-probe && echo t > /var/tmp/ralph-walls-probe && echo t > /dev/shm/ralph-walls-probe && echo \"tmpdir: $TMPDIR\" && echo temp-written; \
        env | grep -E '^(SSH_AUTH_SOCK|TMUX|DISPLAY|DOCKER_HOST|XDG_RUNTIME_DIR|DBUS_SESSION_BUS_ADDRESS)=' | sed 's/^/leaked: /'; \
        echo done";

/// Whether this machine lets a process make an `io_uring` at all
/// (`kernel.io_uring_disabled` refuses it EPERM too, walls or none).
fn io_uring_here() -> bool {
    let out = crate::process::group::shell(
            "python3 -c 'import ctypes; c = ctypes.CDLL(None, use_errno=True); r = c.syscall(425, 4, ctypes.create_string_buffer(120)); print(\"uring:\", ctypes.get_errno() if r < 0 else \"made\")'",
        )
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout) == "uring: made\n"
}

/// The check's `io_uring_setup` failed with EPERM, where one outside
/// the walls succeeds (else the refusal proves nothing: skipped, said).
fn assert_uring_refused(output: &str) {
    if io_uring_here() {
        assert!(output.contains("uring: 1\n"), "{output}");
    } else {
        eprintln!("skipped the io_uring half: this machine refuses io_uring to every process");
    }
}

fn assert_no_escape(output: &str) {
    assert!(output.contains("done"), "{output}");
    assert!(
        output.contains("CapEff:\t0000000000000000") && output.contains("NoNewPrivs:\t1"),
        "{output}"
    );
    // EPERM (1) from the filter, for the pathname and the abstract one.
    assert_eq!(output.matches("unix: 1").count(), 2, "{output}");
    assert!(output.contains("pair: b'x'"), "{output}");
    // A datagram pair, and io_uring (which makes sockets of its own).
    assert!(output.contains("dgram: 1\n"), "{output}");
    assert_uring_refused(output);
    assert!(output.contains("temp-written"), "{output}");
    assert!(!output.contains("leaked:"), "{output}");
    for dir in ["/tmp", "/var/tmp", "/dev/shm"] {
        let probe = Path::new(dir).join("ralph-walls-probe");
        assert!(
            !probe.exists(),
            "{} is the person's: {output}",
            probe.display()
        );
    }
}

#[test]
fn a_bubblewrap_check_has_no_capability_no_unix_socket_and_temp_of_its_own() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (_, output) = probe(mechanism, ESCAPES);
    assert!(output.contains("tmpdir: /tmp"), "{output}");
    assert_no_escape(&output);
    // Not even as root can it take the tmpfs off what it must not see.
    let (root, output) = probe(
        mechanism,
        "umount /proc && echo unmounted; mount -o remount,rw / && echo remounted; \
             touch .git/HEAD.lock && echo locked; echo done",
    );
    assert!(output.contains("done"), "{output}");
    for word in ["unmounted", "remounted", "locked"] {
        assert!(!output.contains(word), "{output}");
    }
    assert!(!root.join(".git/HEAD.lock").exists());
}

/// A project outside the temp folders (Landlock's walls leave those
/// writable, and a temp folder holding the project is walled too), in
/// this crate's target folder.
fn project_outside_temp(name: &str) -> (PathBuf, PathBuf) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/walls-tests")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("p");
    for sub in [".claude/ralph", ".git/hooks", ".git/info", "src"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(root.join("README.md"), "# p\n").unwrap();
    std::fs::create_dir_all(base.join("outside")).unwrap();
    (
        std::fs::canonicalize(&base).unwrap(),
        std::fs::canonicalize(&root).unwrap(),
    )
}

#[test]
#[allow(clippy::too_many_lines)] // one walled check, then each write it made checked in turn
fn landlock_walls_keep_a_checks_writes_in_its_project() {
    if !landlock::supported() {
        eprintln!("skipped: no Landlock");
        return;
    }
    let (base, root) = project_outside_temp("landlock");
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    assert!(walls.walled());
    assert!(walls.notice().unwrap().contains("Landlock"));
    let outside = base.join("outside");
    let script = format!(
        "echo ok > src/new.py && echo more >> README.md && echo t > \"$(mktemp)\" && echo q > /dev/null && echo written; \
             echo evil > {out}/evil; echo s > .claude/settings.local.json; mv .claude .claude-moved; \
             echo h > .git/hooks/post-commit; echo x >> .git/config; echo i > .git/info/attributes; echo done",
        out = outside.display()
    );
    let (code, output) = run(&walls, &root, &script);
    assert_eq!(code, 0, "{output}");
    assert!(
        output.contains("written") && output.contains("done"),
        "{output}"
    );
    assert!(root.join("src/new.py").is_file());
    assert_eq!(
        std::fs::read_to_string(root.join("README.md")).unwrap(),
        "# p\nmore\n"
    );
    assert!(!outside.join("evil").exists(), "{output}");
    assert!(!root.join(".claude/settings.local.json").exists());
    assert!(root.join(".claude").is_dir() && !root.join(".claude-moved").exists());
    assert!(!root.join(".git/hooks/post-commit").exists());
    assert_eq!(
        std::fs::read_to_string(root.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!root.join(".git/info/attributes").exists());

    // A link the agent planted at the top grants nothing of its target.
    std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    let (_, output) = run(&walls, &root, "echo evil > escape/evil; echo done");
    assert!(output.contains("done"), "{output}");
    assert!(!outside.join("evil").exists(), "{output}");

    // Nothing a check must not do, and the temp folder its own, gone after.
    let mut inner =
        crate::process::group::shell(&format!("{ESCAPES}; echo \"$TMPDIR\" > src/tmpdir.txt"));
    for var in SESSION_VARIABLES {
        inner.env(var, "/tmp/the-persons-socket");
    }
    let (mut cmd, temp) = walls.wrap(inner).unwrap();
    let out = cmd.current_dir(&root).output().unwrap();
    let output =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let tmpdir = temp.path().unwrap().to_path_buf();
    assert_eq!(
        std::fs::read_to_string(root.join("src/tmpdir.txt"))
            .unwrap()
            .trim(),
        tmpdir.display().to_string(),
        "{output}"
    );
    // The temp folders themselves are refused; the check's own is not.
    assert!(!output.contains("temp-written"), "{output}");
    assert!(!Path::new("/tmp/ralph-walls-probe").exists(), "{output}");
    assert!(output.contains("CapEff:\t0000000000000000"), "{output}");
    assert_eq!(output.matches("unix: 1").count(), 2, "{output}");
    assert!(
        output.contains("pair: b'x'") && !output.contains("leaked:"),
        "{output}"
    );
    assert!(output.contains("dgram: 1\n"), "{output}");
    assert_uring_refused(&output);
    drop(temp);
    assert!(!tmpdir.exists(), "the check's temp folder outlived it");
    let (_, output) = run(
        &walls,
        &root,
        "echo t > \"$(mktemp)\" && echo own-temp; umount /proc && echo unmounted; \
             (: < /dev/tty) && echo terminal; echo done",
    );
    assert!(
        output.contains("own-temp") && output.contains("done"),
        "{output}"
    );
    assert!(
        !output.contains("unmounted") && !output.contains("terminal"),
        "{output}"
    );
    assert!(output.contains("done"), "{output}");
    assert!(!outside.join("evil").exists(), "{output}");

    // A hidden folder cannot be read.
    let secret = base.join("keys");
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("key"), "s3cret").unwrap();
    let walls = walls.hide(secret.clone());
    let (_, output) = run(
        &walls,
        &root,
        &format!("cat {}/key; echo end", secret.display()),
    );
    assert!(
        !output.contains("s3cret") && output.contains("end"),
        "{output}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

/// What reached the host's listeners on 127.0.0.1 (TCP and UDP) from
/// a check in `walls`, and what the check said: it also serves and
/// reaches a listener of its own on its loopback.
fn loopback_reached(walls: &Walls, root: &Path) -> (Vec<String>, String) {
    use std::io::Read;
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    udp.set_nonblocking(true).unwrap();
    let script = format!(
        "python3 -c 'import socket\n\
             try:\n  s = socket.create_connection((\"127.0.0.1\", {tcp}), timeout=3); s.sendall(b\"tcp\"); s.close(); print(\"tcp: sent\")\n\
             except OSError as e: print(\"tcp:\", e.errno)\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"udp\", (\"127.0.0.1\", {udp})); print(\"udp: sent\")\n\
             except OSError as e: print(\"udp:\", e.errno)\n\
             own = socket.socket(); own.bind((\"127.0.0.1\", 0)); own.listen()\n\
             socket.create_connection(own.getsockname(), timeout=3).close(); print(\"own loopback: reached\")'",
        tcp = tcp.local_addr().unwrap().port(),
        udp = udp.local_addr().unwrap().port()
    );
    let (_, output) = run(walls, root, &script);
    let mut heard = Vec::new();
    if let Ok((mut stream, _)) = tcp.accept() {
        stream.set_nonblocking(false).unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        heard.push(text);
    }
    let mut buf = [0u8; 16];
    if let Ok(n) = udp.recv(&mut buf) {
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    (heard, output)
}

#[test]
fn a_check_reaches_no_listener_on_the_hosts_loopback_unless_it_needs_the_network() {
    let mut mechanisms = Vec::new();
    if let Some(bwrap) = bwrap_or_skip() {
        mechanisms.push(bwrap.clone());
    }
    if landlock::supported() {
        mechanisms.push(Mechanism::Landlock("a test".into()));
    } else {
        eprintln!("skipped Landlock's half: no Landlock");
    }
    if mechanisms.is_empty() {
        eprintln!("skipped: neither bubblewrap nor Landlock walls a check here");
        return;
    }
    for mechanism in mechanisms {
        let (base, root) = project_outside_temp("network");
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism);
        assert!(!walls.network());
        let (heard, output) = loopback_reached(&walls, &root);
        // ECONNREFUSED in its own namespace, as the agent gets.
        assert!(heard.is_empty(), "{heard:?} {output}");
        assert!(output.contains("tcp: 111"), "{output}");
        assert!(output.contains("own loopback: reached"), "{output}");
        let walls = walls.with_network(true);
        assert!(walls.network());
        let (heard, output) = loopback_reached(&walls, &root);
        assert_eq!(heard, ["tcp", "udp"], "{output}");
        let _ = std::fs::remove_dir_all(&base);
    }
}

/// Runs `script` in `walls` as Landlock builds them with `network` as
/// this machine's way off the network; what it said.
fn run_landlock_with(walls: &Walls, root: &Path, network: &NetworkWall, script: &str) -> String {
    let walls = Walls {
        off_network: network.clone(),
        ..walls.clone()
    };
    run(&walls, root, script).1
}

#[test]
fn required_walls_refuse_a_check_that_would_keep_the_machines_network() {
    if !landlock::supported() {
        eprintln!("skipped: no Landlock");
        return;
    }
    let (base, root) = project_outside_temp("open-network");
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    let walls = Walls {
        off_network: NetworkWall::Open("no namespace and no ABI 4 here".into()),
        ..walls
    };
    let err = walls.shell("true").unwrap_err().to_string();
    assert!(
        err.contains("no namespace and no ABI 4 here") && err.contains("\"network\": true"),
        "{err}"
    );
    // Wanted (auto), it runs and is said; and a check that says it
    // needs the network needs no wall off it.
    let auto = Walls {
        wanted: WallsWanted::Auto,
        ..walls.clone()
    };
    assert!(auto.shell("true").is_ok());
    let notice = auto.notice().unwrap();
    assert!(
        notice.contains("off the network: none: it has this machine's network"),
        "{notice}"
    );
    assert!(walls.clone().with_network(true).shell("true").is_ok());
    let line = walls
        .with_network(true)
        .network_line("the check `fetch`", "\"network\": true");
    assert!(
        line.as_deref()
            .is_some_and(|l| l.contains("so do the others")),
        "{line:?}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn under_tcp_rules_mptcp_fast_open_and_udp_reach_nothing_of_the_host() {
    if !landlock::supported() || landlock::kernel_abi() < 4 {
        eprintln!("skipped: no Landlock ABI 4");
        return;
    }
    let (base, root) = project_outside_temp("mptcp");
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    let (heard, output) = mptcp_and_udp_reached(&walls, &root);
    assert!(heard.is_empty(), "{heard:?} {output}");
    assert!(output.contains("udp: 1\n"), "{output}");
    // TCP Fast Open connects from sendto(2), past Landlock's connect rule.
    assert!(output.contains("tfo: 1\n"), "{output}");
    if output.contains("mptcp: none here") {
        eprintln!("skipped the MPTCP half: this kernel has no MPTCP");
    } else {
        assert!(output.contains("mptcp: 1\n"), "{output}");
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// What of the host's TCP and UDP listeners on 127.0.0.1 a check in
/// `walls` (Landlock's, with TCP rules) reached by MPTCP and by UDP.
fn mptcp_and_udp_reached(walls: &Walls, root: &Path) -> (Vec<String>, String) {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    udp.set_nonblocking(true).unwrap();
    // IPPROTO_MPTCP is 262; where this kernel has none, not even an
    // unwalled socket is made.
    let here = "python3 -c 'import socket\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).close(); print(\"mptcp here\")\n\
             except OSError: print(\"mptcp: none here\")'";
    let script = format!(
        "python3 -c 'import socket\n\
             try:\n  s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262); s.settimeout(3); s.connect((\"127.0.0.1\", {tcp})); s.sendall(b\"mptcp\"); s.close(); print(\"mptcp: sent\")\n\
             except OSError as e: print(\"mptcp:\", e.errno)\n\
             try:\n  socket.socket().sendto(b\"tfo\", socket.MSG_FASTOPEN, (\"127.0.0.1\", {tcp})); print(\"tfo: sent\")\n\
             except OSError as e: print(\"tfo:\", e.errno)\n\
             try:\n  socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b\"udp\", (\"127.0.0.1\", {udp})); print(\"udp: sent\")\n\
             except OSError as e: print(\"udp:\", e.errno)'",
        tcp = tcp.local_addr().unwrap().port(),
        udp = udp.local_addr().unwrap().port()
    );
    let said_here = {
        let out = crate::process::group::shell(here).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rules = NetworkWall::TcpRules("a test".into());
    let output = said_here + &run_landlock_with(walls, root, &rules, &script);
    let mut heard = Vec::new();
    std::thread::sleep(std::time::Duration::from_millis(100));
    if let Ok((mut stream, _)) = tcp.accept() {
        use std::io::Read;
        stream.set_nonblocking(false).unwrap();
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        heard.push(format!("tcp: {text}"));
    }
    let mut buf = [0u8; 16];
    if let Ok(n) = udp.recv(&mut buf) {
        heard.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    (heard, output)
}

/// A file descriptor that ralph inherited without close-on-exec (a
/// service manager's socket, an editor's terminal), as the number
/// `fd` of this process: open while the returned guard lives.
struct Leaked(i32);

impl Leaked {
    #[allow(unsafe_code)]
    fn at(fd: i32) -> Leaked {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: dup2(2) onto a number no test uses; fcntl(2) on it.
        unsafe {
            assert_eq!(libc::dup2(file.as_raw_fd(), fd), fd);
            assert_eq!(libc::fcntl(fd, libc::F_SETFD, 0), 0);
        }
        Leaked(fd)
    }
}

impl Drop for Leaked {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: closes the number this guard made.
        unsafe {
            libc::close(self.0);
        }
    }
}

#[test]
fn a_descriptor_ralph_inherited_does_not_reach_the_check() {
    let leaked = Leaked::at(907);
    let script = "[ -e /dev/fd/907 ] && echo fd: inherited || echo fd: none";
    let unwalled = crate::process::group::shell(script).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&unwalled.stdout), "fd: inherited\n");
    let mut mechanisms = Vec::new();
    if let Some(bwrap) = bwrap_or_skip() {
        mechanisms.push(bwrap.clone());
    }
    if landlock::supported() {
        mechanisms.push(Mechanism::Landlock("a test".into()));
    } else {
        eprintln!("skipped Landlock's half: no Landlock");
    }
    for mechanism in mechanisms {
        let (base, root) = project_outside_temp("inherited-fd");
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        let (_, output) = run(&walls, &root, script);
        assert_eq!(output, "fd: none\n", "{mechanism:?}");
        let _ = std::fs::remove_dir_all(&base);
    }
    drop(leaked);
}

#[test]
fn a_check_makes_no_vsock_socket_unless_it_needs_the_network() {
    // AF_VSOCK (40) reaches the host of a VM whatever the namespace.
    let script = "python3 -c 'import socket\ntry:\n  socket.socket(40, socket.SOCK_STREAM).close(); print(\"vsock: made\")\nexcept OSError as e: print(\"vsock:\", e.errno)'";
    let unwalled = crate::process::group::shell(script).output().unwrap();
    if String::from_utf8_lossy(&unwalled.stdout) != "vsock: made\n" {
        eprintln!("skipped: this kernel makes no vsock socket");
        return;
    }
    let mut mechanisms = Vec::new();
    if let Some(bwrap) = bwrap_or_skip() {
        mechanisms.push(bwrap.clone());
    }
    if landlock::supported() {
        mechanisms.push(Mechanism::Landlock("a test".into()));
    }
    for mechanism in mechanisms {
        let (base, root) = project_outside_temp("vsock");
        let walls = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
        let (_, output) = run(&walls, &root, script);
        assert_eq!(output, "vsock: 1\n", "{mechanism:?}");
        let (_, output) = run(&walls.with_network(true), &root, script);
        assert_eq!(output, "vsock: made\n", "{mechanism:?}");
        let _ = std::fs::remove_dir_all(&base);
    }
}

#[test]
fn where_no_network_namespace_can_be_made_landlock_refuses_every_tcp_connect() {
    if !landlock::supported() || landlock::kernel_abi() < 4 {
        eprintln!("skipped: no Landlock ABI 4");
        return;
    }
    let (base, root) = project_outside_temp("tcp-rules");
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "python3 -c 'import socket\ntry:\n  socket.create_connection((\"127.0.0.1\", {}), timeout=3); print(\"tcp: reached\")\nexcept OSError as e: print(\"tcp:\", e.errno)'",
        listener.local_addr().unwrap().port()
    );
    let rules = NetworkWall::TcpRules("a test".into());
    let output = run_landlock_with(&walls, &root, &rules, &script);
    // EACCES from Landlock; nothing reached the listener.
    assert!(output.contains("tcp: 13"), "{output}");
    assert!(listener.accept().is_err(), "{output}");
    // Said at the start: no loopback of its own, TCP rules only.
    let walls = Walls {
        off_network: rules,
        ..walls
    };
    let notice = walls.notice().unwrap();
    assert!(notice.contains("Landlock's TCP rules (ABI 4)"), "{notice}");
    let line = walls
        .network_line("the check `fetch`", "\"network\": true")
        .unwrap();
    assert!(
        !line.contains("a loopback of their own") && line.contains("TCP rules"),
        "{line}"
    );
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_home_in_a_temp_folder_stays_in_sight_read_only() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (dir, root) = project();
    let home = std::fs::canonicalize(dir.path()).unwrap().join("home");
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::fs::write(home.join(".config/tool.toml"), "cache = true\n").unwrap();
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let path = std::env::join_paths([bin.clone(), PathBuf::from("/usr/bin")]).unwrap();
    let seen = seen_in_temp_of(Some(home.clone().into()), Some(path));
    if !TEMP_FOLDERS.iter().any(|t| home.starts_with(t)) {
        assert!(seen.is_empty(), "{seen:?}");
        eprintln!("skipped: the temp folder is not /tmp here");
        return;
    }
    // One entry: the PATH folder lies inside the home folder.
    assert_eq!(seen, vec![home.clone()]);
    let walls = Walls {
        seen_in_temp: seen,
        ..Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone())
    };
    let (_, output) = run(
        &walls,
        &root,
        &format!(
            "cat {home}/.config/tool.toml; echo x > {home}/.bashrc && echo wrote; echo done",
            home = home.display()
        ),
    );
    assert!(
        output.contains("cache = true") && output.contains("done"),
        "{output}"
    );
    assert!(
        !output.contains("wrote") && !home.join(".bashrc").exists(),
        "{output}"
    );
}

/// A main checkout outside the temp folders with its own code, a
/// `node_modules` and a `.venv` it keeps out of git, and a worktree of
/// it under `.claude/worktrees/` with code of its own.
fn main_and_worktree(name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let (base, root) = project_outside_temp(name);
    std::fs::write(root.join("src/code.py"), "main-code\n").unwrap();
    std::fs::write(root.join(".claude/ralph/config.json"), "{}").unwrap();
    for (dir, file, text) in [
        ("node_modules/dep", "index.js", "dep-code\n"),
        (".venv/bin", "tool", "venv-tool\n"),
    ] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
        std::fs::write(root.join(dir).join(file), text).unwrap();
    }
    let tree = root.join(".claude/worktrees/item");
    let gitdir = root.join(".git/worktrees/item");
    std::fs::create_dir_all(tree.join("src")).unwrap();
    std::fs::create_dir_all(&gitdir).unwrap();
    std::fs::write(tree.join(".git"), format!("gitdir: {}\n", gitdir.display())).unwrap();
    std::fs::write(tree.join("src/code.py"), "tree-code\n").unwrap();
    (base, root, tree)
}

/// What a worktree's check must and must not reach of the main checkout.
fn assert_main_checkout_out_of_reach(mechanism: Mechanism, name: &str) {
    let (base, root, tree) = main_and_worktree(name);
    let walls = Walls::with_mechanism(&root, &tree, WallsWanted::Required, mechanism);
    let script = format!(
        "cat src/code.py; cat {root}/src/code.py; ls {root}/.claude/ralph; \
             cat {root}/node_modules/dep/index.js {root}/.venv/bin/tool; head -1 {root}/.git/config; \
             echo x > {root}/node_modules/dep/index.js; echo y > {root}/src/code.py; \
             echo w > src/new.py && echo written; echo done",
        root = root.display()
    );
    let (_, output) = run(&walls, &tree, &script);
    assert!(
        output.contains("done") && output.contains("written"),
        "{output}"
    );
    assert!(output.contains("tree-code"), "{output}");
    assert!(!output.contains("main-code"), "{output}");
    assert!(!output.contains("config.json"), "{output}");
    assert!(
        output.contains("dep-code") && output.contains("venv-tool"),
        "{output}"
    );
    assert!(output.contains("[core]"), "{output}");
    assert_eq!(
        std::fs::read_to_string(root.join("node_modules/dep/index.js")).unwrap(),
        "dep-code\n"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("src/code.py")).unwrap(),
        "main-code\n"
    );
    assert!(tree.join("src/new.py").is_file());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_worktree_check_sees_of_the_main_checkout_only_git_and_dependencies_bubblewrap() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    assert_main_checkout_out_of_reach(mechanism.clone(), "hidden-bwrap");
}

#[test]
fn a_worktree_check_sees_of_the_main_checkout_only_git_and_dependencies_landlock() {
    if !landlock::supported() {
        eprintln!("skipped: no Landlock");
        return;
    }
    assert_main_checkout_out_of_reach(Mechanism::Landlock("a test".into()), "hidden-landlock");
}

#[test]
fn a_worktree_check_takes_a_path_folder_from_the_worktree_where_it_has_it() {
    let (base, root, tree) = main_and_worktree("path");
    let venv = root.join(".venv/bin");
    let modules = root.join("node_modules/.bin");
    std::fs::create_dir_all(&modules).unwrap();
    let path = format!("{}:{}:/usr/bin", venv.display(), modules.display());
    let walls = Walls::around(&root, &tree, WallsWanted::Off);
    // The worktree has no environment of its own yet: the main checkout's.
    assert_eq!(walls.path_for_check(&path), path);
    std::fs::create_dir_all(tree.join(".venv/bin")).unwrap();
    assert_eq!(
        walls.path_for_check(&path),
        format!(
            "{}:{}:/usr/bin",
            tree.join(".venv/bin").display(),
            modules.display()
        )
    );
    let mut command = crate::process::group::shell("echo \"$PATH|$VIRTUAL_ENV\"");
    command
        .env("PATH", &path)
        .env("VIRTUAL_ENV", root.join(".venv"));
    let (mut command, _temp) = walls.wrap(command).unwrap();
    let out = command.output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said.trim(),
        format!(
            "{}:{}:/usr/bin|{}",
            tree.join(".venv/bin").display(),
            modules.display(),
            tree.join(".venv").display()
        )
    );
    // The main checkout's own walls change nothing.
    let own = Walls::around(&root, &root, WallsWanted::Off);
    assert_eq!(own.path_for_check(&path), path);
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_toolchain_cache_in_a_home_in_a_temp_folder_stays_writable() {
    let Some(mechanism) = bwrap_or_skip() else {
        return;
    };
    let (dir, root) = project();
    let home = std::fs::canonicalize(dir.path()).unwrap().join("home");
    let cache = home.join(".cache/go-build");
    std::fs::create_dir_all(&cache).unwrap();
    let walled = Walls::with_mechanism(&root, &root, WallsWanted::Required, mechanism.clone());
    let walls = Walls {
        seen_in_temp: vec![home.clone()],
        writable: vec![root.clone(), cache.clone()],
        ..walled
    };
    assert_eq!(walls.caches(), std::slice::from_ref(&cache));
    let (_, output) = run(
        &walls,
        &root,
        &format!(
            "echo built > {cache}/entry && echo cached; echo x > {home}/.bashrc && echo wrote; echo done",
            cache = cache.display(),
            home = home.display()
        ),
    );
    assert!(
        output.contains("cached") && output.contains("done"),
        "{output}"
    );
    assert!(cache.join("entry").is_file(), "{output}");
    assert!(
        !output.contains("wrote") && !home.join(".bashrc").exists(),
        "{output}"
    );
    // A cache hidden with ralph's key folder is writable no more.
    let walls = walls.hide(home.join(".cache"));
    assert!(walls.caches().is_empty());
    assert_eq!(
        walls.refused_caches().len(),
        1,
        "{:?}",
        walls.refused_caches()
    );
}

#[test]
fn a_checks_bytecode_and_pytest_cache_stay_out_of_the_tree() {
    let (_dir, root) = project();
    std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a + b\n").unwrap();
    let script = "python3 -c 'import calc, sys; print(\"written\", sys.dont_write_bytecode)'; \
                      echo \"addopts $PYTEST_ADDOPTS\"";
    let mut mechanisms = vec![Walls::open()];
    if let Some(mechanism) = bwrap_or_skip() {
        mechanisms.push(Walls::with_mechanism(
            &root,
            &root,
            WallsWanted::Required,
            mechanism.clone(),
        ));
    }
    for walls in mechanisms {
        let (code, output) = run(&walls, &root, script);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("written True"), "{output}");
        assert!(
            output.contains("addopts -o cache_dir=/") && output.contains("/pytest-cache"),
            "{output}"
        );
        assert!(!root.join("__pycache__").exists(), "{output}");
    }
    assert_eq!(shell_quoted("cache_dir=/a b/c"), "'cache_dir=/a b/c'");
    assert_eq!(shell_quoted("cache_dir=/tmp/x"), "cache_dir=/tmp/x");
    assert_eq!(shell_quoted("it's"), "'it'\"'\"'s'");
}

#[test]
fn landlock_walls_make_cargos_first_entries_before_the_check() {
    if !landlock::supported() {
        eprintln!("skipped: no Landlock");
        return;
    }
    let (base, root) = project_outside_temp("landlock-cargo");
    std::fs::write(root.join("Cargo.toml"), "[package]\n").unwrap();
    let walls = Walls::with_mechanism(
        &root,
        &root,
        WallsWanted::Required,
        Mechanism::Landlock("a test".into()),
    );
    let (_, output) = run(
        &walls,
        &root,
        "mkdir -p target/debug && echo t > target/debug/x && echo lock >> Cargo.lock && echo built; \
             echo n > new-at-top && echo made; echo done",
    );
    assert!(
        output.contains("built") && output.contains("done"),
        "{output}"
    );
    assert!(root.join("target/debug/x").is_file());
    assert_eq!(
        std::fs::read_to_string(root.join("Cargo.lock")).unwrap(),
        "lock\n"
    );
    // Any other new entry at the top is still refused.
    assert!(!output.contains("made") && !root.join("new-at-top").exists());
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn this_kernel_enforces_every_landlock_right_ralph_asks_for() {
    if !landlock::supported() {
        eprintln!("skipped: no Landlock");
        return;
    }
    // What `restrict_self` said in a child restricted as a check is.
    let enforced = landlock::enforcement();
    assert!(enforced.is_ok(), "{enforced:?}");
}

#[test]
fn required_walls_that_cannot_be_built_refuse_the_check() {
    let (_dir, root) = project();
    let missing = Mechanism::Missing("bubblewrap is not installed".into());
    let required = Walls::with_mechanism(&root, &root, WallsWanted::Required, missing.clone());
    let err = required.shell("true").unwrap_err();
    assert!(err.to_string().contains("bubblewrap is not installed"));
    let auto = Walls::with_mechanism(&root, &root, WallsWanted::Auto, missing);
    assert!(!auto.walled());
    assert!(auto.notice().unwrap().contains("with your rights"));
    assert_eq!(auto.shell("true").unwrap().0.get_program(), "sh");
    assert_eq!(Walls::open().notice(), None);

    // Landlock that this kernel enforces only in part: refused when the
    // walls are required, used and said when they are wanted.
    let part = Mechanism::LandlockInPart("it lacks ABI 6".into());
    let required = Walls::with_mechanism(&root, &root, WallsWanted::Required, part.clone());
    let err = required.shell("true").unwrap_err();
    assert!(err.to_string().contains("it lacks ABI 6"), "{err}");
    let auto = Walls::with_mechanism(&root, &root, WallsWanted::Auto, part);
    assert!(auto.notice().unwrap().contains("in part"));

    // No socket filter for this architecture: refused when the walls
    // are required, said when they are wanted.
    let bwrap = Mechanism::Bubblewrap("/usr/bin/bwrap".into());
    let unfiltered = Walls {
        socket_filter: false,
        ..Walls::with_mechanism(&root, &root, WallsWanted::Required, bwrap)
    };
    let err = unfiltered.shell("true").unwrap_err().to_string();
    assert!(
        err.contains("no socket filter for this architecture") && err.contains("sandbox to auto"),
        "{err}"
    );
    let wanted = Walls {
        wanted: WallsWanted::Auto,
        ..unfiltered
    };
    let notice = wanted.notice().unwrap_or_default();
    assert!(
        notice.contains("no socket filter for this architecture"),
        "{notice}"
    );
    if landlock::supported() {
        let (cmd, temp) = auto.shell("true").unwrap();
        assert_eq!(cmd.get_program(), "sh");
        assert!(temp.path().is_some_and(Path::is_dir));
    }
}
