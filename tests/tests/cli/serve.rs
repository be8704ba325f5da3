//! `ralph-ctl serve` over HTTP, without a browser or a client: the token
//! on every request, a change only as a same-origin POST, the loops as
//! JSON with a version, the page and its script embedded, Ctrl-C.

use std::time::Duration;

use ralph_tests::project::TempProject;
use ralph_tests::scenario::wait_until;
use ralph_tests::serve::Served;

const SESSION: &str = "5e55e55e-0000-4000-8000-000000000038";

fn served(name: &str) -> (TempProject, Served) {
    let project = TempProject::with_loop(name, SESSION, 5);
    let served = Served::start(&project, &[]);
    (project, served)
}

#[test]
fn every_request_without_the_token_is_refused() {
    let (project, served) = served("serve-token");
    assert!(
        served.url.starts_with("http://127.0.0.1:"),
        "{}",
        served.url
    );
    assert_eq!(served.token.len(), 64);
    // The token with its last digit changed (never to the digit it has).
    let last = if served.token.ends_with('0') {
        '1'
    } else {
        '0'
    };
    let wrong = format!("{}{last}", &served.token[..63]);
    for path in [
        "/".to_string(),
        "/app.js".into(),
        "/api/loops".into(),
        "/favicon.ico".into(),
        format!("/?token={wrong}"),
        format!("/api/loops?token={wrong}"),
        "/?token=".into(),
    ] {
        let answer = served.get(&path);
        assert_eq!(answer.status, 403, "{path}: {answer:?}");
        assert!(!answer.body.contains(&served.token));
    }
    let refused = served.request(
        "POST",
        "/api/cancel",
        &[("Origin", &served.origin)],
        "{\"loop\":\"main\"}",
    );
    assert_eq!(refused.status, 403, "{refused:?}");
    assert_eq!(
        project.status_json()["status"],
        "running",
        "nothing was changed"
    );
}

#[test]
fn the_loops_come_as_json_and_again_only_when_a_state_changed() {
    let (project, served) = served("serve-json");
    let answer = served.get(&served.with_token("/api/loops"));
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(answer.header("Access-Control-Allow-Origin").is_none());
    assert_eq!(answer.header("Cache-Control").as_deref(), Some("no-store"));
    let json = answer.json();
    let main = &json["loops"][0];
    assert_eq!(main["id"], "main");
    assert_eq!(main["status"], "running");
    assert_eq!(main["live"], true);
    let html = main["html"].as_str().unwrap();
    assert!(html.contains("data-status=\"running\""), "{html}");
    assert!(html.contains("<svg id=\"breaker-chart\""), "{html}");
    let version = json["version"].as_str().unwrap().to_string();
    let same = served.get(&served.with_token(&format!("/api/loops?since={version}")));
    assert_eq!(same.status, 204, "{same:?}");
    assert!(same.body.is_empty());

    project.ctl_exits(&["say", "look at <b>the logs</b>"], 0);
    let moved = served.get(&served.with_token(&format!("/api/loops?since={version}")));
    assert_eq!(moved.status, 200, "{moved:?}");
    assert_ne!(moved.json()["version"], version.as_str());
}

#[test]
fn a_change_is_a_same_origin_post_with_the_token() {
    let (project, mut served) = served("serve-post");
    let body = "{\"loop\":\"main\",\"text\":\"use the fixture <x>\"}";
    let path = served.with_token("/api/say");
    for (headers, why) in [
        (vec![], "no origin"),
        (
            vec![
                ("Origin", "http://evil.example"),
                ("Sec-Fetch-Site", "cross-site"),
            ],
            "another site",
        ),
        (vec![("Origin", "http://127.0.0.1:1")], "another port"),
        (vec![("Origin", "null")], "an opaque origin"),
    ] {
        let answer = served.request("POST", &path, &headers, body);
        assert_eq!(answer.status, 403, "{why}: {answer:?}");
        assert!(answer.header("Access-Control-Allow-Origin").is_none());
    }
    let get = served.get(&served.with_token("/api/cancel"));
    assert_eq!(get.status, 405, "{get:?}");
    assert!(project.status_json()["hint"].is_null(), "no note left");

    let said = served.post("/api/say", body);
    assert_eq!(said.status, 200, "{said:?}");
    assert_eq!(said.json()["ok"], true);
    assert!(
        said.json()["message"].as_str().unwrap().contains("noted"),
        "{said:?}"
    );
    assert_eq!(project.status_json()["hint"], "use the fixture <x>");

    let not_waiting = served.post("/api/answer", body);
    assert_eq!(not_waiting.status, 409, "{not_waiting:?}");
    let unknown = served.post("/api/cancel", "{\"loop\":\"item:../../x\"}");
    assert_eq!(unknown.status, 404, "{unknown:?}");
    let garbled = served.post("/api/cancel", "{\"loop\":");
    assert_eq!(garbled.status, 400, "{garbled:?}");

    let cancelled = served.post("/api/cancel", "{\"loop\":\"main\"}");
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    assert_eq!(project.status_json()["status"], "cancelled");
    served.read_lines(Duration::from_millis(300));
    assert!(
        served
            .output
            .iter()
            .any(|l| l.starts_with("cancel main from the page: Ralph loop cancelled")),
        "{:?}",
        served.output
    );
}

#[test]
fn the_page_and_its_script_are_embedded_and_locked_down() {
    let (_project, served) = served("serve-page");
    let page = served.get(&served.with_token("/"));
    assert_eq!(page.status, 200, "{page:?}");
    let policy = page.header("Content-Security-Policy").unwrap();
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(
        page.body.contains(&format!(
            "<script src=\"/app.js?token={}\"></script>",
            served.token
        )),
        "{}",
        page.body
    );
    let script = served.get(&served.with_token("/app.js"));
    assert_eq!(script.status, 200);
    assert!(
        script
            .header("Content-Type")
            .unwrap()
            .starts_with("text/javascript")
    );
    assert!(script.body.contains("textContent"));
    assert!(!script.body.contains("innerHTML"));
    for text in [&page.body, &script.body] {
        for reference in ["https:", "http:", "//cdn", "@import"] {
            assert!(!text.contains(reference), "refers to {reference}");
        }
    }
    assert_eq!(served.get(&served.with_token("/nothing")).status, 404);
}

#[test]
fn ctrl_c_ends_it_and_another_address_is_said_loudly() {
    let project = TempProject::new("serve-stop");
    let mut served = Served::start(&project, &["--listen", "0.0.0.0"]);
    assert!(
        wait_until(Duration::from_secs(5), || {
            served.read_lines(Duration::from_millis(50));
            served.output.iter().any(|l| l.starts_with("WARNING:"))
        }),
        "{:?}",
        served.output
    );
    let json = served.get(&served.with_token("/api/loops")).json();
    assert_eq!(json["loops"], serde_json::json!([]), "no loop yet");
    served.stops_on_ctrl_c(Duration::from_secs(5));
}

/// How soon another client's answer must come while a connection is stuck.
const PROMPTLY: Duration = Duration::from_secs(2);

/// The page with the token, and how long it took to be answered.
fn timed_page(served: &Served) -> (u16, Duration) {
    let started = std::time::Instant::now();
    let page = served.get(&served.with_token("/"));
    (page.status, started.elapsed())
}

#[test]
fn a_body_that_never_comes_delays_no_other_client() {
    let (project, mut served) = served("serve-silent");
    let host = served.host().to_string();
    // No token, a body announced and never sent: refused at once, closed
    // without its body being waited for.
    let mut strangers: Vec<_> = ["/api/cancel", "/anything"]
        .iter()
        .map(|path| {
            served.hold(&format!(
                "POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n"
            ))
        })
        .collect();
    // The token and the page's origin, but more body than a change may
    // have: refused without reading it.
    let mut too_long = served.hold(&served.post_head("/api/say", 100_000));
    // The token and the page's origin, a short body that never comes.
    let mut silent = served.hold(&served.post_head("/api/say", 64));

    let (status, took) = timed_page(&served);
    assert_eq!(status, 200);
    assert!(took < PROMPTLY, "the page took {took:?}");
    for stranger in &mut strangers {
        let (said, closed) = Served::answered(stranger, PROMPTLY);
        assert!(said.starts_with("HTTP/1.1 403"), "{said}");
        assert!(closed, "the connection was left open: {said}");
    }
    let (said, closed) = Served::answered(&mut too_long, PROMPTLY);
    assert!(said.starts_with("HTTP/1.1 413"), "{said}");
    assert!(closed, "the connection was left open: {said}");

    // The silent body is waited for a few seconds, no more, while the
    // page and its polls are answered at once.
    for _ in 0..3 {
        let (status, took) = timed_page(&served);
        assert_eq!(status, 200);
        assert!(took < PROMPTLY, "the page took {took:?}");
        let poll = served.get(&served.with_token("/api/loops"));
        assert_eq!(poll.status, 200, "{poll:?}");
    }
    let (said, closed) = Served::answered(&mut silent, Duration::from_secs(10));
    assert!(said.starts_with("HTTP/1.1 408"), "{said}");
    assert!(closed, "the connection was left open: {said}");
    assert!(project.status_json()["hint"].is_null(), "no note left");
    assert_eq!(project.status_json()["status"], "running");
    let status = served.interrupt(PROMPTLY).expect("serve ends on Ctrl-C");
    assert_eq!(status.code(), Some(0), "{:?}", served.output);
}

#[test]
fn ctrl_c_ends_it_while_connections_hang() {
    let (_project, mut served) = served("serve-stop-held");
    let host = served.host().to_string();
    let _held = [
        served.hold(&format!(
            "POST /api/cancel HTTP/1.1\r\nHost: {host}\r\nContent-Length: 100000\r\n\r\n"
        )),
        served.hold(&served.post_head("/api/say", 64)),
        served.hold("GET /?token="),
    ];
    // The server has taken them all.
    std::thread::sleep(Duration::from_millis(300));
    served.stops_on_ctrl_c(PROMPTLY);
}

#[test]
fn the_requests_answered_at_once_are_bounded() {
    // As many requests as serve answers at once, each with the token and a
    // body that never comes.
    const AT_ONCE: usize = 32;
    let (_project, served) = served("serve-bounded");
    let held: Vec<_> = (0..AT_ONCE)
        .map(|_| served.hold(&served.post_head("/api/say", 64)))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let busy = served.get(&served.with_token("/"));
    assert_eq!(busy.status, 503, "{busy:?}");
    assert!(started.elapsed() < PROMPTLY, "{:?}", started.elapsed());
    assert!(
        busy.json()["message"]
            .as_str()
            .unwrap()
            .contains("too many connections")
    );
    drop(held);
    assert!(
        wait_until(PROMPTLY, || served.get(&served.with_token("/")).status
            == 200),
        "the places were not given back"
    );
}

#[test]
fn a_connection_that_sends_no_request_head_within_a_second_is_closed() {
    let (_project, served) = served("serve-head-time");
    let mut silent = served.hold("");
    let mut half = served.hold("GET /?token=");
    let started = std::time::Instant::now();
    let (said, closed) = Served::answered(&mut silent, Duration::from_secs(3));
    assert!(closed && said.is_empty(), "{said}");
    let (said, closed) = Served::answered(&mut half, Duration::from_secs(3));
    assert!(closed, "the connection was left open: {said}");
    assert!(
        started.elapsed() < Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
}

/// One GET of `path` that gives up after a few seconds: its status, if an
/// answer came.
fn status_of(host: &str, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = host.parse().ok()?;
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    let head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).ok()?;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn the_person_is_served_while_64_threads_hold_half_sent_requests() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const HOGS: usize = 64;
    let (_project, served) = served("serve-hogs");
    let host = served.host().to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicUsize::new(0));
    // Each hog opens a connection, sends half a request's head and waits;
    // closed, it opens the next at once. Bounded: they stop with the test.
    let hogs: Vec<_> = (0..HOGS)
        .map(|_| {
            let (host, stop, opened) = (host.clone(), Arc::clone(&stop), Arc::clone(&opened));
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let until = std::time::Instant::now() + Duration::from_secs(60);
                while !stop.load(Ordering::SeqCst) && std::time::Instant::now() < until {
                    let Ok(mut stream) = std::net::TcpStream::connect(&host) else {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    opened.fetch_add(1, Ordering::SeqCst);
                    let _ =
                        stream.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n").as_bytes());
                    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut sink = [0u8; 512];
                    while !stop.load(Ordering::SeqCst) {
                        match stream.read(&mut sink) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e)
                                if matches!(
                                    e.kind(),
                                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                ) => {}
                            Err(_) => break,
                        }
                    }
                }
            })
        })
        .collect();
    // The hogs hold their connections before the person asks.
    assert!(
        wait_until(PROMPTLY, || opened.load(Ordering::SeqCst) >= HOGS),
        "the hogs did not connect"
    );
    std::thread::sleep(Duration::from_millis(300));
    let path = served.with_token("/api/loops");
    let answered: Vec<Option<u16>> = (0..10)
        .map(|_| {
            let status = status_of(&host, &path);
            std::thread::sleep(Duration::from_millis(100));
            status
        })
        .collect();
    stop.store(true, Ordering::SeqCst);
    for hog in hogs {
        hog.join().unwrap();
    }
    let served_ok = answered.iter().filter(|s| **s == Some(200)).count();
    eprintln!(
        "{served_ok} of 10 served while {HOGS} threads hogged ({} connections opened)",
        opened.load(Ordering::SeqCst)
    );
    assert!(
        served_ok >= 9,
        "{served_ok} of 10 of the person's requests served while {HOGS} threads hogged \
         ({} connections opened): {answered:?}",
        opened.load(Ordering::SeqCst)
    );
}

/// A project with its own running loop and `items` queue items' loops,
/// each running (states signed as ralph signs them).
fn with_items(name: &str, items: usize) -> TempProject {
    let project = TempProject::with_loop(name, SESSION, 25);
    let state = project.state().unwrap();
    for n in 0..items {
        let mut item = state.clone();
        item["sessionId"] = format!("5e55e55e-0000-4000-8000-0000000001{n:02}").into();
        item["queueItem"] = format!("plan-{n}").into();
        project.write_item_state(&format!("plan-{n}"), &item);
    }
    project
}

#[test]
fn each_queue_item_s_loop_is_shown_and_steered_on_its_own() {
    let project = with_items("serve-items", 2);
    let served = Served::start(&project, &[]);
    let json = served.get(&served.with_token("/api/loops")).json();
    let shown: Vec<(&str, &str)> = json["loops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["id"].as_str().unwrap(), l["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("main", "running"),
            ("item:plan-0", "running"),
            ("item:plan-1", "running")
        ]
    );
    let cancelled = served.post("/api/cancel", "{\"loop\":\"item:plan-1\"}");
    assert_eq!(cancelled.status, 200, "{cancelled:?}");
    let item = project.path(".claude/context/runtime/queue/plan-1/ralph-state.json");
    let item: serde_json::Value = serde_json::from_slice(&std::fs::read(item).unwrap()).unwrap();
    assert_eq!(item["status"], "cancelled");
    assert_eq!(project.status_json()["status"], "running", "only the item");
}

/// `ralph-ctl serve` with 10 loops shown, measured as `bench/run.sh` asks
/// (it runs this with `--ignored`, the release binaries in
/// `RALPH_BIN_DIR`): the CPU it takes over `SERVE_BENCH_SECONDS` (default
/// 10) with no client, then with a page polling as the page does (every
/// second, with the version it has seen), and the time from a state's
/// change (a `say`) to that page getting the new loops, over
/// `SERVE_BENCH_CHANGES` changes (default 10), and how long an answer
/// with every loop rendered takes. Prints one `serve-bench:` line of figures.
#[test]
#[ignore = "a benchmark: bench/run.sh runs it"]
fn benchmark_idle_cpu_and_update_latency() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    let seconds: u64 = std::env::var("SERVE_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let changes: usize = std::env::var("SERVE_BENCH_CHANGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let project = with_items("serve-bench", 9);
    let served = Served::start(&project, &[]);
    let first = served.get(&served.with_token("/api/loops")).json();
    assert_eq!(
        first["loops"].as_array().unwrap().len(),
        10,
        "10 loops shown"
    );
    let pid = served.pid();
    // user + system time of the server, in seconds.
    let cpu = || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .unwrap()
            .1
            .split_whitespace()
            .collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
        ticks as f64 / 100.0
    };
    let measure = |what: &dyn Fn()| {
        let (cpu0, t0) = (cpu(), Instant::now());
        what();
        (cpu() - cpu0) / t0.elapsed().as_secs_f64() * 100.0
    };
    let no_client = measure(&|| std::thread::sleep(Duration::from_secs(seconds)));

    // A page: polls every second with the version it has seen.
    let stop = Arc::new(AtomicBool::new(false));
    let seen: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let page = {
        let (stop, seen) = (Arc::clone(&stop), Arc::clone(&seen));
        let (origin, token) = (served.origin.clone(), served.token.clone());
        std::thread::spawn(move || {
            let poller = Served::client(&origin, &token);
            let mut version = first["version"].as_str().unwrap().to_string();
            while !stop.load(Ordering::SeqCst) {
                let answer = poller.get(&poller.with_token(&format!("/api/loops?since={version}")));
                if answer.status == 200 {
                    version = answer.json()["version"].as_str().unwrap().to_string();
                    seen.lock().unwrap().push((Instant::now(), version.clone()));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let polled = measure(&|| std::thread::sleep(Duration::from_secs(seconds)));

    // A page's first answer, or one after a change: every loop read and rendered.
    let started = Instant::now();
    for _ in 0..10 {
        assert_eq!(served.get(&served.with_token("/api/loops")).status, 200);
    }
    let full_ms = started.elapsed().as_secs_f64() * 1000.0 / 10.0;

    let mut latencies = Vec::new();
    for n in 0..changes {
        let before = seen.lock().unwrap().len();
        project.ctl_exits(&["say", &format!("note {n}")], 0);
        let changed = Instant::now();
        assert!(
            wait_until(Duration::from_secs(5), || seen.lock().unwrap().len()
                > before),
            "the change never reached the page"
        );
        let at = seen.lock().unwrap()[before].0;
        latencies.push(u64::try_from(at.saturating_duration_since(changed).as_millis()).unwrap());
        // Changes at different moments of the page's second.
        std::thread::sleep(Duration::from_millis(300 + 170 * n as u64 % 700));
    }
    stop.store(true, Ordering::SeqCst);
    page.join().unwrap();
    latencies.sort_unstable();
    println!(
        "serve-bench: loops=10 seconds={seconds} idle_cpu_no_client_pct={no_client:.2} \
         idle_cpu_polled_pct={polled:.2} full_answer_ms={full_ms:.1} changes={changes} \
         latency_median_ms={} latency_max_ms={}",
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
}
