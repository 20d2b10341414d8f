//! Three servers on loopback sharing one real PostgreSQL (`--database`): a race between servers trades once,
//! the rate limit holds across them, a rotation through one reaches the others within a second and outlives
//! restarts, and with one server SIGKILLed at random moments every alert reaches the mock brokers exactly once
//! (the killed server's bots are taken over by the others when its leases expire).

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{tradier_turning_writes_away, Fault, Kind, Mock};
use server_support::postgres::Postgres;
use server_support::*;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::Barrier;

/// Three data directories with the same strategy files, and the arguments that point them at `url`.
fn three(name: &str, url: &str, snapshots: &[(&str, Value)], extra: &[&str]) -> (Vec<Dirs>, Vec<String>) {
    let dirs: Vec<Dirs> = (0..3).map(|n| Dirs::new(&format!("{name}{n}"))).collect();
    for d in &dirs {
        for (file, s) in snapshots {
            d.write(file, s);
        }
    }
    let mut args: Vec<String> = vec!["--database".into(), url.into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    (dirs, args)
}

fn start(dirs: &Dirs, args: &[String]) -> Server {
    Server::start(dirs, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// One POST on a connection opened beforehand, sent when `go` opens: three of them reach three servers at
/// about the same instant.
async fn post_at(server: &Server, token: &str, body: &str, go: &Barrier) -> (u16, String) {
    let mut stream = server.connect().await;
    let req = format!(
        "POST /webhooks/{token} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    go.wait().await;
    send_raw(&mut stream, req.as_bytes()).await;
    read_raw_answer(&mut stream, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_body_at_three_servers_at_once_is_processed_once_per_round() {
    let pg = Postgres::start();
    let url = pg.create_database("race");
    let (dirs, args) =
        three("race", &url, &[("race.json", snapshot("race", &token('a')))], &["--rate-limit", "100000"]);
    let servers: Vec<Arc<Server>> = dirs.iter().map(|d| Arc::new(start(d, &args))).collect();
    const ROUNDS: usize = 200;
    let mut processed_by = [0usize; 3];
    for round in 0..ROUNDS {
        let body = json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("round-{round}") }).to_string();
        let go = Arc::new(Barrier::new(3));
        let tasks: Vec<_> = servers
            .iter()
            .map(|s| {
                let (s, body, go) = (Arc::clone(s), body.clone(), Arc::clone(&go));
                tokio::spawn(async move { post_at(&s, &token('a'), &body, &go).await })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        for (status, text) in &answers {
            assert_eq!(*status, 200, "round {round}: {text}");
        }
        let processed: Vec<usize> = (0..3).filter(|&i| answers[i].1.contains(r#""status":"processed""#)).collect();
        let duplicates = answers.iter().filter(|a| a.1.contains(r#""status":"duplicate""#)).count();
        assert_eq!((processed.len(), duplicates), (1, 2), "round {round}: {answers:?}");
        processed_by[processed[0]] += 1;
    }
    // The same body four times at once to one server (its batches hold a key once; a repeat waits for the next
    // batch and finds the claim committed).
    for round in 0..20 {
        let body = json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("again-{round}") }).to_string();
        let go = Arc::new(Barrier::new(4));
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (s, body, go) = (Arc::clone(&servers[round % 3]), body.clone(), Arc::clone(&go));
                tokio::spawn(async move { post_at(&s, &token('a'), &body, &go).await })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        let processed = answers.iter().filter(|a| a.0 == 200 && a.1.contains(r#""status":"processed""#)).count();
        let duplicates = answers.iter().filter(|a| a.0 == 200 && a.1.contains(r#""status":"duplicate""#)).count();
        assert_eq!((processed, duplicates), (1, 3), "round {round} at one server: {answers:?}");
    }
    // The race was real: more than one server won rounds.
    assert!(processed_by.iter().filter(|&&n| n > 0).count() >= 2, "one server won every round: {processed_by:?}");
    // Any server's admin API shows every server's rows: 200 processed alerts in the shared logs.
    let logs = servers[2].admin_get("/api/strategies/race/logs?limit=1000&decision=processed").await;
    let rows = logs["logs"].as_array().cloned().unwrap_or_default();
    let mut alerts: Vec<String> = rows.iter().map(|r| r["ts_ms"].to_string() + &r["alerts"].to_string()).collect();
    alerts.sort();
    alerts.dedup();
    assert_eq!(alerts.len(), ROUNDS + 20, "{logs}");
    for s in servers {
        Arc::try_unwrap(s).ok().unwrap().stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_one_alerts_over_three_servers_within_a_minute_get_exactly_one_429() {
    let pg = Postgres::start();
    let url = pg.create_database("rate");
    let (dirs, args) = three("rate", &url, &[("rate.json", snapshot("rate", &token('b')))], &[]);
    let servers: Vec<Arc<Server>> = dirs.iter().map(|d| Arc::new(start(d, &args))).collect();
    // Sent concurrently, three at a time (one per server), so the servers count at the same moments.
    let mut statuses = Vec::new();
    for chunk in (0..61).collect::<Vec<usize>>().chunks(3) {
        let go = Arc::new(Barrier::new(chunk.len()));
        let tasks: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let (s, go) = (Arc::clone(&servers[i % 3]), Arc::clone(&go));
                let body = json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("m{i}") }).to_string();
                tokio::spawn(async move { post_at(&s, &token('b'), &body, &go).await.0 })
            })
            .collect();
        for t in tasks {
            statuses.push(t.await.unwrap());
        }
    }
    let refused = statuses.iter().filter(|&&s| s == 429).count();
    let ok = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!((ok, refused), (60, 1), "{statuses:?}");
    // A batch claims its keys before it knows the window's room, and gives back those of the alerts it refuses:
    // the alert answered 429 holds no claim, so its resend once the window has room is traded.
    let claimed = pg.query("rate", "SELECT count(*) FROM dedup_keys WHERE strategy = 'rate'");
    assert_eq!(claimed, ["60"], "{statuses:?}");
    for s in servers {
        Arc::try_unwrap(s).ok().unwrap().stop();
    }
}

/// The Errors table's keys on the shared database, each answer resent: processed and rejected keep their key (the
/// resend is a duplicate), a 422, a 500 and an inactive strategy keep none (the resend is answered as the first
/// was), and keys are per strategy (one body to two strategies trades at both). The claim and its release live
/// in the batch's transaction here, not in the engine's windows as on one server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_answer_keeps_or_gives_back_its_key_per_strategy_on_the_shared_database() {
    let pg = Postgres::start();
    let url = pg.create_database("keys");
    let mut paused = snapshot("paused", &token('c'));
    paused["status"] = json!("paused");
    let files = [
        ("a.json", snapshot("a", &token('a'))),
        ("b.json", snapshot("b", &token('b'))),
        ("paused.json", paused),
        ("fail.json", failing_snapshot("fail", &token('d'))),
    ];
    let dirs = Dirs::new("keys");
    for (file, s) in &files {
        dirs.write(file, s);
    }
    let server = start(&dirs, &["--database".to_owned(), url]);
    let twice = |t: char, body: Value| {
        let server = &server;
        async move {
            let first = server.post_json(&token(t), &body).await;
            let again = server.post_json(&token(t), &body).await;
            ((first.status, first.body), (again.status, again.body))
        }
    };
    let processed = (200, r#"{"status":"processed"}"#.to_owned());
    let duplicate = (200, r#"{"status":"duplicate"}"#.to_owned());
    let buy = json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": "same-1" } });
    assert_eq!(twice('a', buy.clone()).await, (processed.clone(), duplicate.clone()));
    assert_eq!(twice('b', buy.clone()).await, (processed, duplicate.clone()), "keys are per strategy");
    let (first, again) = twice('a', json!({ "ticker": "NFLX", "action": "buy" })).await;
    assert!(first.0 == 200 && first.1.contains("rejected"), "{first:?}");
    assert_eq!(again, duplicate, "a rejection keeps its key");
    let leg = json!({ "side": "call", "action": "buy_to_open", "strike": 100, "expiration": "2024-01-19" });
    let legs = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "legs": [leg, leg, leg, leg, leg] });
    let (first, again) = twice('a', legs).await;
    assert_eq!(first.0, 422, "{first:?}");
    assert_eq!(again, first, "a 422 keeps no key");
    let (first, again) = twice('d', json!({ "ticker": "NVDA", "action": "buy" })).await;
    assert_eq!(first.0, 500, "{first:?}");
    assert_eq!(again, first, "a 500 keeps no key: the sender's retry is decided again");
    let (first, again) = twice('c', buy).await;
    assert_eq!(first, (200, r#"{"rejected":true,"reason":"strategy is paused"}"#.to_owned()));
    assert_eq!(again, first);
    let keys =
        pg.query("keys", "SELECT strategy || ':' || count(*) FROM dedup_keys GROUP BY strategy ORDER BY strategy");
    assert_eq!(keys, ["a:2", "b:1"], "the processed and rejected alerts' keys alone");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rotation_through_one_server_makes_the_old_token_404_on_the_others_at_once() {
    let pg = Postgres::start();
    let url = pg.create_database("rotate");
    let old = token('c');
    let (dirs, args) = three("rotate", &url, &[("rot.json", snapshot("rot", &old))], &[]);
    let servers: Vec<Server> = dirs.iter().map(|d| start(d, &args)).collect();
    let body = |n: u32| json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("r{n}") }).to_string();
    for (n, s) in servers.iter().enumerate() {
        assert_eq!(s.post(&old, Some("application/json"), &body(n as u32)).await.status, 200);
    }
    let a = servers[0].admin(hyper::Method::POST, "/api/strategies/rot/rotate", None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rotated = Instant::now();
    let new = a.json()["token_hash"].as_str().unwrap().to_owned();
    assert_eq!(servers[0].post(&old, Some("application/json"), &body(10)).await.status, 404);
    // The old token is refused at once on the others too (the spec: "old token invalid immediately"): each
    // alert's batch reads the rotated token under its strategy's lock.
    for (n, s) in servers[1..].iter().enumerate() {
        let a = s.post(&old, Some("application/json"), &body(20 + n as u32)).await;
        assert_eq!(a.status, 404, "right after the rotation: {}", a.body);
    }
    // The new token is taken by the others within a second (their poll).
    let mut n = 30;
    for s in &servers[1..] {
        loop {
            n += 1;
            let status = s.post(&new, Some("application/json"), &body(n)).await.status;
            if status == 200 {
                break;
            }
            assert_eq!(status, 404);
            assert!(rotated.elapsed() < Duration::from_secs(1), "the new token still refused after 1 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    println!("the new token answered everywhere {} ms after the rotation", rotated.elapsed().as_millis());
    // The rotation outlives a restart of every server.
    for s in servers {
        s.stop();
    }
    let again = start(&dirs[2], &args);
    assert_eq!(again.post(&old, Some("application/json"), &body(100)).await.status, 404);
    assert_eq!(again.post(&new, Some("application/json"), &body(101)).await.status, 200);
    again.stop();
}

/// Two rotations on other servers commit in the other order than they drew their versions (the first one's
/// writer transaction is still open when the second commits): the first one's new token is still taken here
/// within a second, though this server had already seen a later version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_that_commits_after_a_later_one_is_still_taken_by_the_others() {
    let pg = Postgres::start();
    let url = pg.create_database("rotorder");
    let (dirs, args) =
        three("rotorder", &url, &[("x.json", snapshot("x", &token('1'))), ("y.json", snapshot("y", &token('2')))], &[]);
    let server = start(&dirs[0], &args);
    let (slow, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let (fast, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    // What another server's writer does for a rotation (`Op::SetToken`), inside its group transaction.
    let rotate = "INSERT INTO token_overrides (strategy, token_hash, rotated_ms) VALUES ($1, $2, 0)
                  ON CONFLICT (strategy) DO UPDATE SET token_hash = EXCLUDED.token_hash,
                      rotated_ms = EXCLUDED.rotated_ms, version = nextval('token_versions')";
    slow.batch_execute("BEGIN").await.unwrap();
    slow.execute(rotate, &[&"x", &token('3')]).await.unwrap();
    fast.execute(rotate, &[&"y", &token('4')]).await.unwrap();
    // This server polls meanwhile and sees y's rotation, with the later version.
    tokio::time::sleep(Duration::from_millis(800)).await;
    slow.batch_execute("COMMIT").await.unwrap();
    let committed = Instant::now();
    let mut n = 0;
    loop {
        n += 1;
        let body = json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("o{n}") }).to_string();
        let status = server.post(&token('3'), Some("application/json"), &body).await.status;
        if status == 200 {
            break;
        }
        assert_eq!(status, 404);
        assert!(committed.elapsed() < Duration::from_secs(2), "x's new token still refused 2 s after its rotation");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
}

/// A server that stops answering in the middle of a batch (its machine frozen or cut off: its connections to
/// PostgreSQL stay open, unlike a killed process's) does not hold its strategies' locks for good: the other
/// servers' alerts for them are answered within seconds, not after the kernel's keepalive (two hours).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_frozen_inside_a_batch_does_not_stall_the_others() {
    let pg = Postgres::start();
    let url = pg.create_database("frozen");
    let (dirs, args) = three("frozen", &url, &[("f.json", snapshot("f", &token('5')))], &[]);
    let mut slow_args = args.clone();
    slow_args.extend(["--test-commit-delay-ms".to_owned(), "3000".to_owned()]);
    let frozen = Arc::new(start(&dirs[0], &slow_args));
    let other = start(&dirs[1], &args);
    let body = |m: &str| json!({ "ticker": "AAPL", "action": "buy", "message_id": m }).to_string();
    // Its batch holds the strategy's lock through the commit's delay; the machine freezes meanwhile.
    let first = {
        let (s, b) = (Arc::clone(&frozen), body("first"));
        tokio::spawn(async move { s.post(&token('5'), Some("application/json"), &b).await.status })
    };
    let locked = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted";
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query("frozen", locked) == ["0"] {
        assert!(Instant::now() < deadline, "the first batch never took its lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: kill(2) with the pid of a child this test started and has not reaped.
    unsafe { libc::kill(frozen.pid() as libc::pid_t, libc::SIGSTOP) };
    let sent = Instant::now();
    let mut stream = other.connect().await;
    let b = body("second");
    let req = raw_alert(&token('5'), &b);
    send_raw(&mut stream, req.as_bytes()).await;
    let (status, text) = read_raw_answer(&mut stream, Duration::from_secs(20)).await;
    let waited = sent.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(frozen.pid() as libc::pid_t, libc::SIGCONT) };
    assert!(status == 200 && text.contains("processed"), "after {waited:?}: {status} {text}");
    assert!(waited < Duration::from_secs(15), "answered only after {waited:?}");
    // The frozen server's batch was given up by PostgreSQL: its alert is answered 500 (nothing of it kept),
    // so its sender's retry trades once.
    assert_eq!(first.await.unwrap(), 500);
    let a = frozen.post(&token('5'), Some("application/json"), &body("first")).await;
    assert!(a.status == 200 && a.body.contains("processed"), "{}", a.body);
    Arc::try_unwrap(frozen).ok().unwrap().stop();
    other.stop();
}

/// Alert `i`'s equity: one of its own, so each alert's orders are told apart at the mocks.
fn equity(i: usize) -> String {
    let l = |n: usize| char::from(b'A' + (n % 26) as u8);
    format!("Q{}{}{}", l(i / 676), l(i / 26), l(i))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_one_server_killed_at_random_moments_every_alert_reaches_each_broker_exactly_once() {
    const ALERTS: usize = 300;
    const SENDERS: usize = 6;
    const KILLS: usize = 6;
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("seed {seed} (CRASH_SEED={seed} replays the kills)");
    let mut rng = seed;
    let mut below = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };

    let pg = Postgres::start();
    let url = pg.create_database("kill");
    // A broker that refuses a reused client order id, and one that does not (its rows are marked `sending`,
    // and looked up by their tag after a kill).
    let alpaca = Mock::start(Kind::Alpaca).await;
    let tradier = Mock::start(Kind::Tradier).await;
    alpaca.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
    tradier.require_headers(&[("Authorization", "Bearer tr-token")]);
    // About one order write in eight misbehaves: taken with the answer lost, cut before it is taken, or
    // answered after the bot's timeout. Sends are then slow and uncertain while servers die.
    for mock in [&alpaca, &tradier] {
        mock.faults((0..ALERTS * 2).map(|_| match below(24) {
            0 => Fault::Lose,
            1 => Fault::Cut,
            2 => Fault::Delay(Duration::from_millis(2400)),
            _ => Fault::Pass,
        }));
    }
    let root = Dirs::new("killshared");
    let bots: PathBuf = root.root.join("bots.json");
    let tradier_token = root.root.join("tradier-token");
    std::fs::write(&tradier_token, "tr-token\n").unwrap();
    std::fs::write(
        &bots,
        json!({
            "alpaca": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 2000,
                        "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                     "APCA-API-SECRET-KEY": { "value": "s3cret" } } },
            // The mocks list an order as soon as they take it, so a short settle finds it (the default's wait
            // for a broker that lists orders late is tested in server_brokers).
            "tradier": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 2000, "settle_ms": 200,
                         "auth": { "header": "Authorization", "prefix": "Bearer ",
                                   "file": tradier_token.to_str().unwrap() } },
        })
        .to_string(),
    )
    .unwrap();
    let mut s = snapshot("kill", &token('d'));
    s["allowed_instruments"] = json!(["*"]);
    s["bots"] = json!([
        { "id": "alpaca", "broker": "alpaca", "account_id": "ACC1", "sizing": { "fixed_quantity": "1" } },
        { "id": "tradier", "broker": "tradier", "account_id": "VA12345678", "sizing": { "fixed_quantity": "1" } },
    ]);
    // Leases of 3 s instead of 10, so that each takeover waits less.
    let extra = [
        "--bots",
        bots.to_str().unwrap(),
        "--rate-limit",
        "1000000",
        "--market-order-ttl-secs",
        "600",
        "--test-lease-ttl-ms",
        "3000",
    ];
    let (dirs, args) = three("kill", &url, &[("kill.json", s)], &extra);
    let servers: Vec<Arc<Swapped>> = dirs.iter().map(|d| Arc::new(RwLock::new(Arc::new(start(d, &args))))).collect();

    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let heard = Arc::new(Mutex::new(vec![None; ALERTS]));
    let mut senders = Vec::new();
    for _ in 0..SENDERS {
        let (servers, next, finished, heard) =
            (servers.clone(), Arc::clone(&next), Arc::clone(&finished), Arc::clone(&heard));
        senders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= ALERTS {
                    return;
                }
                let body = json!({ "ticker": equity(i), "action": "buy", "message_id": format!("k{i}") }).to_string();
                // Alert `i` goes first to server `i % 3`, and each retry to the next, as behind a load balancer.
                let all: Vec<&Swapped> = servers.iter().map(|s| s.as_ref()).collect();
                let h =
                    post_until_answered_by(&all, i, &token('d'), &body, Instant::now(), Duration::from_secs(120)).await;
                heard.lock().unwrap()[i] = Some(h);
                finished.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    // The kills are spread over the deliveries (orders reaching the mocks), not the answers, which come
    // much faster: a server dies while it holds bots' leases and sends under them.
    let delivered = || alpaca.orders().len() + tradier.orders().len();
    let mut threshold = 0;
    for _ in 0..KILLS {
        threshold += 20 + below((2 * ALERTS / KILLS) as u64 - 20) as usize;
        let waiting = Instant::now();
        while delivered() < threshold.min(2 * ALERTS - 1) && waiting.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(below(50))).await;
        // Mostly the server holding a bot's lease (its name in the lease table starts with its process id),
        // so that its leases expire and the others take its bots over; else any server.
        let holders = pg.query("kill", "SELECT holder FROM bot_leases WHERE holder IS NOT NULL");
        let pids: Vec<u32> = servers.iter().map(|s| s.read().unwrap().pid()).collect();
        let holding: Vec<usize> =
            (0..3).filter(|&n| holders.iter().any(|h| h.starts_with(&format!("{}-", pids[n])))).collect();
        let victim = if !holding.is_empty() && below(3) != 0 {
            holding[below(holding.len() as u64) as usize]
        } else {
            below(3) as usize
        };
        kill_and_restart(&servers[victim], &dirs[victim], &arg_refs, Duration::from_millis(below(300))).await;
    }
    for s in senders {
        s.await.unwrap();
    }
    let heard = heard.lock().unwrap().clone();
    assert!(heard.iter().all(Option::is_some), "every alert was answered");

    // Drain: no row left to send (a killed server's bots wait for its leases to expire), none failed.
    let any = Arc::clone(&servers[0].read().unwrap());
    let deadline = Instant::now() + Duration::from_secs(90);
    let rows = loop {
        let out = any.admin_get("/api/strategies/kill/outbox?limit=10000").await;
        let rows = out["outbox"].as_array().cloned().unwrap_or_default();
        let open = rows.iter().filter(|r| r["status"] == "pending" || r["status"] == "sending").count();
        if open == 0 && rows.len() == 2 * ALERTS {
            break rows;
        }
        assert!(Instant::now() < deadline, "seed {seed}: the outbox did not drain: {open} open of {}", rows.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failed: Vec<&Value> = rows.iter().filter(|r| r["status"] != "done").collect();
    assert!(failed.is_empty(), "seed {seed}: rows not done: {failed:#?}");
    for mock in [&alpaca, &tradier] {
        let mut per_symbol: HashMap<String, usize> = HashMap::new();
        for o in mock.orders() {
            *per_symbol.entry(o.symbol.clone()).or_default() += 1;
        }
        for i in 0..ALERTS {
            assert_eq!(
                per_symbol.get(&equity(i)).copied().unwrap_or(0),
                1,
                "seed {seed}: alert {i} at {:?}: {:?}",
                mock.kind,
                mock.orders().iter().filter(|o| o.symbol == equity(i)).collect::<Vec<_>>()
            );
        }
        assert_eq!(per_symbol.values().sum::<usize>(), ALERTS, "{:?}: no order of anything else", mock.kind);
    }
    for s in servers {
        let s = Arc::clone(&s.read().unwrap());
        s.terminate();
    }
}

#[test]
fn a_server_whose_database_is_unreachable_does_not_start_and_says_why() {
    let dirs = Dirs::new("pgdown-start");
    dirs.write("s.json", &snapshot("s", &token('e')));
    // A loopback port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("postgres://swh:hunter2@127.0.0.1:{port}/nothing");
    let err = start_refused(&dirs, &[], &[("SWH_DATABASE", url.as_str())]);
    assert!(err.contains("cannot use the shared database: PostgreSQL is unreachable"), "{err}");
    assert!(!err.contains("hunter2"), "the password is never printed: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_postgresql_goes_away_alerts_are_answered_500_with_the_cause_and_nothing_is_processed() {
    let pg = Postgres::start();
    let url = pg.create_database("gone");
    let dirs = Dirs::new("pggone");
    dirs.write("gone.json", &snapshot("gone", &token('f')));
    let server = Server::start(&dirs, &["--database", &url]);
    let body = r#"{"ticker":"AAPL","action":"buy","message_id":"before"}"#;
    assert_eq!(server.post(&token('f'), Some("application/json"), body).await.status, 200);
    // The console and the admin API read the shared database.
    let page = server.admin(hyper::Method::GET, &format!("/?token={}", server.admin_token), None, "", false).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("gone"), "{}", page.body);
    let logs = server.logs("gone").await;
    assert!(logs.iter().any(|r| r["decision"] == "processed"), "{logs:?}");

    drop(pg);
    for n in 0..3 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","message_id":"after-{n}"}}"#);
        let a = server.post(&token('f'), Some("application/json"), &body).await;
        assert_eq!(a.status, 500, "{}", a.body);
        let v = a.json();
        assert_eq!(v["code"], "store_unavailable", "{v}");
        let error = v["error"].as_str().unwrap();
        assert!(error.contains("PostgreSQL") && error.contains("nothing was sent, please retry"), "{error}");
    }
    // The server lives on, answering what needs no database.
    assert_eq!(server.post(&token('0'), Some("application/json"), body).await.status, 404);
    // Its last commit at shutdown cannot be made either: it says so and exits non-zero.
    let mut server = server;
    server.terminate();
    assert!(!server.wait(Duration::from_secs(30)).success());
    assert!(server.stderr_text().contains("PostgreSQL is unreachable"), "{}", server.stderr_text());
}

/// An alert whose batch PostgreSQL refused was answered 500 "nothing was sent", and the strategy's Logs had no row
/// for it (the batch's rows went with its rollback), where the embedded database's Logs get an ERROR row. The same
/// row is written here, once the database takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_whose_batch_failed_leaves_an_error_row_in_the_logs() {
    let pg = Postgres::start();
    let url = pg.create_database("refused");
    let dirs = Dirs::new("pgrefused");
    let mut s = snapshot("refused", &token('e'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("refused.json", &s);
    let server = Server::start(&dirs, &["--database", &url]);
    let warm = server.post(&token('e'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    pg.query(
        "refused",
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
    );
    pg.query("refused", "CREATE TRIGGER refuse BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION refuse()");
    let a = server.post(&token('e'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!((a.status, a.json()["code"].as_str()), (500, Some("store_unavailable")), "{}", a.body);
    pg.query("refused", "DROP TRIGGER refuse ON outbox");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = server.logs("refused").await;
        let row = rows.iter().find(|r| r["message"].as_str().unwrap_or_default().contains("could not be stored"));
        if let Some(r) = row {
            assert_eq!((r["level"].as_str(), r["decision"].as_str()), (Some("ERROR"), Some("error")), "{r}");
            assert!(r["alerts"].to_string().contains("MSFT"), "the row names the alert: {r}");
            // An earlier attempt of the same alert may be stored (its answer lost, or taken by another server): the
            // row does not tell the operator to send it again blind.
            let m = r["message"].as_str().unwrap_or_default();
            assert!(m.contains("earlier attempt may be stored") && !m.ends_with("send it again"), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "no row says the alert was not stored: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop();
}

/// PostgreSQL hangs (its host frozen: the connections stay open and nothing answers): alerts are still
/// answered 500 with the cause within seconds, not left waiting for good, and once it answers again alerts are
/// processed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_postgresql_hangs_alerts_are_answered_500_within_seconds() {
    let pg = Postgres::start();
    let url = pg.create_database("hang");
    let dirs = Dirs::new("pghang");
    dirs.write("hang.json", &snapshot("hang", &token('4')));
    let server = Server::start(&dirs, &["--database", &url]);
    let body = |m: &str| json!({ "ticker": "AAPL", "action": "buy", "message_id": m }).to_string();
    assert_eq!(server.post(&token('4'), Some("application/json"), &body("before")).await.status, 200);
    pg.freeze(true);
    let mut stream = server.connect().await;
    let b = body("during");
    let req = raw_alert(&token('4'), &b);
    let sent = Instant::now();
    send_raw(&mut stream, req.as_bytes()).await;
    let (status, text) = read_raw_answer(&mut stream, Duration::from_secs(20)).await;
    let waited = sent.elapsed();
    pg.freeze(false);
    assert_eq!(status, 500, "after {waited:?}: {text}");
    assert!(text.contains("store_unavailable") && text.contains("please retry"), "{text}");
    assert!(waited < Duration::from_secs(10), "answered only after {waited:?}");
    // Answering again: the sender's retry is processed (nothing of the first attempt was kept).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let a = server.post(&token('4'), Some("application/json"), &b).await;
        if a.status == 200 {
            assert!(a.body.contains("processed"), "{}", a.body);
            break;
        }
        assert!(Instant::now() < deadline, "still refused after PostgreSQL answered again: {}", a.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop();
}

/// A paper bot's opens and closes alternate over the three servers: each close is decided on a server that
/// did not necessarily fill the open (it reads the bot's state other servers stored), and each accepted order
/// and the rotation are notified exactly once, though all three servers send notifications.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn positions_filled_on_one_server_are_seen_by_the_others_and_each_event_is_notified_once() {
    use server_support::receiver::Receiver;
    let receiver = Receiver::start().await;
    let pg = Postgres::start();
    let url = pg.create_database("notify");
    let mut v = snapshot("n", &token('9'));
    v["bots"] = json!([{ "id": "paper-1", "broker": "alpaca", "account_id": "PA1",
                         "sizing": { "fixed_quantity": "2" } }]);
    let root = Dirs::new("notifyshared");
    let url_file = root.root.join("hook-url");
    std::fs::write(&url_file, format!("http://127.0.0.1:{}/api/webhooks/1/secret\n", receiver.port)).unwrap();
    let notifications = root.root.join("notifications.json");
    std::fs::write(&notifications, json!({ "n": { "url": { "file": url_file } } }).to_string()).unwrap();
    let (dirs, args) = three("notify", &url, &[("n.json", v)], &["--notifications", notifications.to_str().unwrap()]);
    let servers: Vec<Server> = dirs.iter().map(|d| start(d, &args)).collect();
    const ALERTS: usize = 12;
    for i in 0..ALERTS {
        let action = if i % 2 == 0 { "buy" } else { "sell" };
        let body = json!({ "ticker": "AAPL", "action": action, "message_id": format!("n{i}") }).to_string();
        let a = servers[i % 3].post(&token('9'), Some("application/json"), &body).await;
        assert!(a.status == 200 && a.body.contains("processed"), "alert {i} ({action}): {}", a.body);
        // The fill's message arrives, and its state is stored (the message is committed just before the
        // delivery's own record, and may be sent in between): the next alert, on another server, must see it.
        let deadline = Instant::now() + Duration::from_secs(20);
        while receiver.taken().len() < i + 1 {
            assert!(Instant::now() < deadline, "no message for alert {i}: {:?}", receiver.taken());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let held = |pg: &Postgres| {
            let rows = pg.query("notify", "SELECT state FROM bot_state WHERE strategy = 'n' AND bot = 'paper-1'");
            rows.first()
                .and_then(|t| serde_json::from_str::<Value>(t).ok())
                .is_some_and(|st| st["positions"].as_array().is_some_and(|p| p.is_empty() == (action == "sell")))
        };
        while !held(&pg) {
            assert!(Instant::now() < deadline, "the fill of alert {i} was never stored");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let rotated = servers[1].admin(hyper::Method::POST, "/api/strategies/n/rotate", None, "", true).await;
    assert_eq!(rotated.status, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let taken = receiver.taken();
    assert_eq!(taken.len(), ALERTS + 1, "one message per order and one for the rotation: {taken:#?}");
    assert_eq!(taken.iter().filter(|t| t.contains("accepted")).count(), ALERTS, "{taken:#?}");
    // The bot ends flat, as the last alert (a close) left it, on every server's view.
    let state = servers[2].admin_get("/api/strategies/n/bots/paper-1/state").await;
    assert_eq!(state["positions"], json!([]), "{state}");
    for s in servers {
        s.stop();
    }
}

#[test]
fn the_schema_is_migrated_once_and_a_newer_one_is_refused() {
    let pg = Postgres::start();
    let url = pg.create_database("schema");
    let dirs = Dirs::new("schema");
    dirs.write("s.json", &snapshot("s", &token('8')));
    let server = Server::start(&dirs, &["--database", &url]);
    server.stop();
    let again = Server::start(&dirs, &["--database", &url]);
    again.stop();
    assert_eq!(
        pg.query("schema", "SELECT version FROM schema_migrations ORDER BY version"),
        ["1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12", "13"]
    );
    // A database a newer server has migrated is not touched by this one.
    pg.query("schema", "INSERT INTO schema_migrations (version, applied_ms) VALUES (99, 0)");
    let err = start_refused(&dirs, &["--database", &url], &[]);
    assert!(err.contains("the database's schema is version 99; this server knows up to 13"), "{err}");
}

/// Servers whose bots files disagree: a row one server stored for a broker (down, so it waits) is taken over,
/// once that server is gone, by another whose bots file has the bot on paper. That server does not "fill" it on
/// paper nor send it anywhere: it fails it, saying why, and the broker never sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_bots_file_differs_fails_the_rows_it_takes_over_instead_of_delivering_them_elsewhere() {
    let pg = Postgres::start();
    let url = pg.create_database("differ");
    let broker = server_support::mock_broker::MockBroker::start().await;
    broker.stop();
    let root = Dirs::new("differ");
    let (to_broker, to_paper) = (root.root.join("bots-broker.json"), root.root.join("bots-paper.json"));
    let entry = json!({ "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 300 });
    std::fs::write(&to_broker, json!({ "x": entry }).to_string()).unwrap();
    std::fs::write(&to_paper, json!({}).to_string()).unwrap();
    let mut s = snapshot("differ", &token('6'));
    s["bots"] = json!([{ "id": "x", "broker": Kind::Alpaca.name(), "account_id": Kind::Alpaca.account(),
                         "sizing": { "fixed_quantity": "3" } }]);
    let (dirs, args) = three("differ", &url, &[("differ.json", s)], &["--test-lease-ttl-ms", "1500"]);
    let with = |bots: &PathBuf| {
        let mut a = args.clone();
        a.extend(["--bots".to_owned(), bots.to_str().unwrap().to_owned()]);
        a
    };
    let mut a = start(&dirs[0], &with(&to_broker));
    let answer = a.post(&token('6'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let stored = format!("http://{}", broker.addr);
    assert_eq!(pg.query("differ", "SELECT status || ' ' || target FROM outbox"), [format!("pending {stored}")]);
    a.kill();
    broker.restart().await;

    let b = start(&dirs[1], &with(&to_paper));
    let outbox = || pg.query("differ", "SELECT status || ' ' || coalesce(result, '') FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox()[0].starts_with("pending") {
        assert!(Instant::now() < deadline, "the row was never taken over: {}", b.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let row = outbox().remove(0);
    assert!(
        row.starts_with(&format!(
            "failed order for bot x not sent: it was stored for delivery to {stored} and this server now delivers \
             bot x on paper"
        )),
        "{row}"
    );
    let state = b.admin_get("/api/strategies/differ/bots/x/state").await;
    assert_eq!(state["positions"], json!([]), "filled on paper: {state}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(broker.received().is_empty(), "{:?}", broker.received());
    b.stop();
}

/// A server stopped with SIGTERM while a bot's rows wait (its broker is down) gives the bot's lease back, so
/// another server takes it over at once instead of after the lease's time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_gives_its_bots_leases_back() {
    let pg = Postgres::start();
    let url = pg.create_database("handback");
    let root = Dirs::new("handback");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let bots = root.root.join("bots.json");
    std::fs::write(
        &bots,
        json!({ "alpaca": { "delivery": "http", "base_url": format!("http://127.0.0.1:{dead}"), "timeout_ms": 300 } })
            .to_string(),
    )
    .unwrap();
    let mut s = snapshot("hb", &token('7'));
    s["bots"] =
        json!([{ "id": "alpaca", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    let (dirs, args) = three("handback", &url, &[("hb.json", s)], &["--bots", bots.to_str().unwrap()]);
    let server = start(&dirs[0], &args);
    let a = server.post(&token('7'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let holder =
        |pg: &Postgres| pg.query("handback", "SELECT coalesce(holder, '-') FROM bot_leases WHERE bot = 'alpaca'");
    let ours = format!("{}-", server.pid());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !holder(&pg).iter().any(|h| h.starts_with(&ours)) {
        assert!(Instant::now() < deadline, "the bot's lease was never taken: {:?}", holder(&pg));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = server.stop();
    assert!(log.contains("gave the bots' leases back"), "{log}");
    assert_eq!(holder(&pg), ["-"], "the lease is free for the others");
}

/// A run whose clock was 50 min ahead was killed holding a bot's lease, and the server restarted under a clock
/// set right. The lease's expiry, written by the clock that was ahead, held the bot for the whole step: the next
/// alert's order stayed pending until it expired. The lease is taken over (the dead run's row looked up, since
/// it may have gone out), and the new order sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_left_by_a_run_whose_clock_was_ahead_does_not_hold_the_bot_after_a_restart() {
    let pg = Postgres::start();
    let url = pg.create_database("stepped");
    let broker = server_support::mock_broker::MockBroker::start().await;
    broker.stop();
    let dirs = Dirs::new("pgstepped");
    let bots = dirs.root.join("bots.json");
    std::fs::write(
        &bots,
        json!({ "alpaca": { "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 300 } }).to_string(),
    )
    .unwrap();
    let mut s = snapshot("stepped", &token('9'));
    s["bots"] =
        json!([{ "id": "alpaca", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("stepped.json", &s);
    let args = ["--database", url.as_str(), "--bots", bots.to_str().unwrap()];
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('9'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let holder = || pg.query("stepped", "SELECT coalesce(holder, '-') FROM bot_leases WHERE bot = 'alpaca'");
    let ours = format!("{}-", server.pid());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !holder().iter().any(|h| h.starts_with(&ours)) {
        assert!(Instant::now() < deadline, "the bot's lease was never taken: {:?}", holder());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill();
    // What the dead run stored, as if its clock had been 50 min ahead of the restarted one's.
    const STEP_MS: i64 = 50 * 60_000;
    for sql in [
        format!("UPDATE outbox SET created_ms = created_ms + {STEP_MS}, deadline_ms = deadline_ms + {STEP_MS}"),
        format!("UPDATE dedup_keys SET ts_ms = ts_ms + {STEP_MS}"),
        format!("UPDATE rate_marks SET ts_ms = ts_ms + {STEP_MS}"),
        format!("UPDATE rate_seconds SET second = second + {}", STEP_MS / 1000),
        format!("UPDATE bot_leases SET expires_ms = expires_ms + {STEP_MS}, renewed_ms = renewed_ms + {STEP_MS}"),
    ] {
        pg.query("stepped", &sql);
    }
    broker.restart().await;
    let server = Server::start(&dirs, &args);
    let a = server.post(&token('9'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!((a.status, a.json()["status"].as_str()), (200, Some("processed")), "{}", a.body);
    let aapl = || broker.received().iter().any(|r| r.method == "POST" && r.json()["symbol"] == "AAPL");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !aapl() {
        assert!(
            Instant::now() < deadline,
            "the order was never sent: {:?}\n{}",
            pg.query("stepped", "SELECT status || ' ' || coalesce(result, '') FROM outbox"),
            server.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop();
}

/// A server paused (or cut off) past its lease's time while it retries a bot's order loses the bot to another
/// server, which looks the order up, does not find it, and sends it. The paused server, once it runs again,
/// must not send it a second time (Tradier does not refuse a repeated tag) nor record a result of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_its_lease_while_retrying_an_order_does_not_send_it_again() {
    let pg = Postgres::start();
    let url = pg.create_database("paused");
    // Every write is turned away (429) until the server is paused: it backs off and tries again.
    let (tradier, _root, bots, s) = tradier_turning_writes_away("paused", '8').await;
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600", "--test-lease-ttl-ms", "2000"];
    let (dirs, args) = three("paused", &url, &[("paused.json", s)], &extra);
    let a = start(&dirs[0], &args);
    let answer = a.post(&token('8'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    // The server's own line for the third refusal, not the broker's count of them: the broker counts a refusal
    // as it answers, and a pause then caught the server before it had read the answer, mid-attempt (the path of
    // an attempt cut at the lease's end, `client`'s unit tests), rather than in the back-off this test is about.
    let backing_off =
        || a.stderr_text().lines().any(|l| l.contains("broker not reached; retrying") && l.contains("attempt=3"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !backing_off() {
        assert!(Instant::now() < deadline, "the order was never tried: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Paused while it backs off (0.8 s after the third refusal); the broker takes orders again and another server
    // takes the bot over.
    // SAFETY: kill(2) on the server process this test started.
    unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGSTOP) };
    tradier.clear_faults();
    let b = start(&dirs[1], &args);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tradier.orders().is_empty() {
        if Instant::now() > deadline {
            // SAFETY: as above.
            unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGCONT) };
            panic!("the other server never sent the order: {}", b.stderr_text());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let outbox = || pg.query("paused", "SELECT status || ' ' || result FROM outbox");
    while !outbox().iter().all(|r| r.starts_with("done ")) {
        assert!(Instant::now() < deadline, "the other server never recorded the order: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let taken_over = outbox();
    // SAFETY: as above.
    unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGCONT) };
    // The paused server's back-off ends at once; longer than its longest back-off for what it does next.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let orders = tradier.orders();
    assert_eq!(orders.len(), 1, "the order went out once: {orders:#?}\n{}", a.stderr_text());
    assert_eq!(outbox(), taken_over, "the new holder's result stands");
    let log = a.stop();
    // A machine busy enough to hold the test's poll past the 0.8 s back-off lets a later attempt start before
    // the pause: it is then cut at the lease's end instead, just as safe (both asserted above), and said so.
    let cut = log.contains("the request was cut when the bot's lease ran out");
    assert!(log.contains("the row is left to the server that holds it now") || cut, "{log}");
    b.stop();
}

/// One alert as raw HTTP/1.1, sent on a connection of its own: the tests that freeze a process read its answer
/// with a deadline of their own.
fn raw_alert(token: &str, body: &str) -> String {
    format!(
        "POST /webhooks/{token} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A bot state set through the admin API of a server that does not hold the bot's lease was answered 200, yet
/// the server holding the lease kept deciding and filling against its own copy and overwrote it with its next
/// fill. It is now refused (409) while another server holds the bot, and taken where the lease is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_state_set_through_a_server_without_the_bots_lease_is_refused() {
    let pg = Postgres::start();
    let url = pg.create_database("putstate");
    let mut s = snapshot("ps", &token('8'));
    s["bots"] = json!([{ "id": "p", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    let (dirs, args) = three("putstate", &url, &[("ps.json", s)], &[]);
    let server = start(&dirs[0], &args);
    server.wait_for_strategies("the strategy", |l| l.iter().any(|x| x["id"] == "ps")).await;
    let state = json!({ "positions": [{ "instrument": "AAPL", "direction": "long", "quantity": "7" }] }).to_string();
    let path = "/api/strategies/ps/bots/p/state";
    // Another server holds the bot, its leases lasting a minute (another --lease-ttl-secs than this one's 10 s).
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 60_000;
    pg.query(
        "putstate",
        &format!("INSERT INTO bot_leases (strategy, bot, holder, expires_ms) VALUES ('ps', 'p', 'other', {until})"),
    );
    let a = server.admin(hyper::Method::PUT, path, Some("application/json"), &state, true).await;
    assert_eq!(a.status, 409, "{}", a.body);
    let stored = pg.query("putstate", "SELECT count(*) FROM bot_state WHERE strategy = 'ps' AND bot = 'p'");
    assert_eq!(stored, ["0"], "nothing stored");
    // The bot is free: the state is set, stored and used.
    pg.query("putstate", "UPDATE bot_leases SET holder = NULL, expires_ms = 0");
    let a = server.admin(hyper::Method::PUT, path, Some("application/json"), &state, true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let got = server.admin_get("/api/strategies/ps/bots/p/state").await;
    assert_eq!(got["positions"][0]["quantity"], "7", "{got}");
    server.stop();
}

/// A server paused (or cut off) past its lease while its sync's reads were on their way finds, once it runs again,
/// that another server took the bot over and recorded an order since. Its reads, made before that order, must not
/// be stored over the other server's state: the bot would lose track of a working order (a CANCEL finding none, a
/// CLOSE not cancelling it first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_while_reading_an_account_does_not_overwrite_the_state_of_the_one_that_took_the_bot_over() {
    let pg = Postgres::start();
    let url = pg.create_database("syncpause");
    let alpaca = Mock::start(Kind::Alpaca).await;
    let root = Dirs::new("syncpauseshared");
    let bots = root.root.join("bots.json");
    // Syncs only at start and after each delivery.
    let conf = json!({ "alpaca": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 30000,
                                   "sync_interval_secs": 3600 } });
    std::fs::write(&bots, conf.to_string()).unwrap();
    let mut s = snapshot("sp", &token('7'));
    s["allowed_instruments"] = json!(["*"]);
    s["bots"] =
        json!([{ "id": "alpaca", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    let extra = ["--bots", bots.to_str().unwrap(), "--test-lease-ttl-ms", "2000"];
    let (dirs, args) = three("syncpause", &url, &[("sp.json", s)], &extra);
    let list_reads =
        || alpaca.seen().iter().filter(|r| r.method == "GET" && r.target.starts_with("/v2/orders?")).count();
    let a = start(&dirs[0], &args);
    let deadline = Instant::now() + Duration::from_secs(20);
    while list_reads() == 0 {
        assert!(Instant::now() < deadline, "the first server never read the account: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A market buy through the first server; the read of the account that follows it is slow, and the server is
    // paused while it is on its way.
    let before = list_reads();
    alpaca.slow_list(Duration::from_secs(3));
    let answer = a.post(&token('7'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    while list_reads() == before {
        assert!(Instant::now() < deadline, "the read after the delivery never came: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: kill(2) on the server process this test started.
    unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGSTOP) };
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The second server takes the bot over (its lease ran out) and places a limit order, which it records.
    let b = start(&dirs[1], &args);
    let stored = || {
        let rows = pg.query("syncpause", "SELECT state FROM bot_state WHERE strategy = 'sp' AND bot = 'alpaca'");
        rows.first().and_then(|t| serde_json::from_str::<Value>(t).ok()).unwrap_or(Value::Null)
    };
    let limit = r#"{"ticker":"MSFT","action":"buy","order_type":"limit","price":100}"#;
    let answer = b.post(&token('7'), Some("application/json"), limit).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let working = |st: &Value| st["working_orders"].as_array().is_some_and(|w| !w.is_empty());
    while !working(&stored()) {
        if Instant::now() > deadline {
            // SAFETY: as above.
            unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGCONT) };
            panic!("the second server never recorded its order: {}\n{}", stored(), b.stderr_text());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let taken_over = stored();
    // What the first server logged before it runs again (it has been stopped for seconds: all of it is read).
    let before_resume = a.stderr_text().len();
    // The first server runs again: its slow read (made before the MSFT order) comes back.
    // SAFETY: as above.
    unsafe { libc::kill(a.pid() as libc::pid_t, libc::SIGCONT) };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let now = stored();
    assert!(working(&now), "the MSFT order was dropped from the stored state: {now}\nwas {taken_over}");
    let log = a.stop();
    // Its reads came back and were dropped at the lease check; or, on a loaded machine, the state changed under
    // them (the second server's reaching it first) and the reads made again stored nothing. Never a stored sync.
    let resumed = log.get(before_resume..).unwrap_or_default();
    assert!(
        resumed.contains("the reads are dropped") || !resumed.contains("bot state synced from the broker"),
        "{resumed}"
    );
    b.stop();
}

/// A TCP relay to PostgreSQL whose connections can be cut off without being closed: after [`Relay::blackhole`],
/// connections made before forward nothing more (their other end never learns: the host behind them hung or
/// went away without a reset, the kernel here still taking the bytes), while new ones reach PostgreSQL (a
/// failover's new primary).
struct Relay {
    port: u16,
    generation: Arc<AtomicUsize>,
}

impl Relay {
    async fn start(to: u16) -> Relay {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(AtomicUsize::new(0));
        let g = Arc::clone(&generation);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let born = g.load(Ordering::SeqCst);
                let Ok(outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else { continue };
                let (ri, wi) = inbound.into_split();
                let (ro, wo) = outbound.into_split();
                for (mut r, mut w) in [
                    (
                        Box::new(ri) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
                        Box::new(wo) as Box<dyn tokio::io::AsyncWrite + Unpin + Send>,
                    ),
                    (Box::new(ro), Box::new(wi)),
                ] {
                    let g = Arc::clone(&g);
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            let n = match r.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            if g.load(Ordering::SeqCst) > born {
                                // Cut off: hold both ends open, forward nothing, and swallow what comes.
                                let _keep = w;
                                while let Ok(n) = r.read(&mut buf).await {
                                    if n == 0 {
                                        break;
                                    }
                                }
                                std::future::pending::<()>().await;
                                return;
                            }
                            if w.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            }
        });
        Relay { port, generation }
    }

    fn blackhole(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// PostgreSQL's host goes away without resetting the server's connections (a failover by DNS or address, a
/// host powered off): the pooled connections hang. Alerts are soon answered (500, then processed over new
/// connections), and the orders they store must then be sent too: every lease statement waited on a dead
/// connection for good, holding the lease table's lock, and no server sent anything while alerts were
/// answered `processed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_postgresqls_host_vanishes_the_orders_stored_over_new_connections_are_sent() {
    let pg = Postgres::start();
    let url = pg.create_database("vanish");
    let port: u16 = url.rsplit(':').next().unwrap().split('/').next().unwrap().parse().unwrap();
    let relay = Relay::start(port).await;
    let url = url.replace(&format!(":{port}/"), &format!(":{}/", relay.port));
    let alpaca = Mock::start(Kind::Alpaca).await;
    let root = Dirs::new("vanish");
    let bots = root.root.join("bots.json");
    std::fs::write(
        &bots,
        json!({ "alpaca": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 2000 } }).to_string(),
    )
    .unwrap();
    let mut s = snapshot("vanish", &token('9'));
    s["allowed_instruments"] = json!(["*"]);
    s["bots"] =
        json!([{ "id": "alpaca", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    let dirs = Dirs::new("vanish0");
    dirs.write("vanish.json", &s);
    let server = Server::start(&dirs, &["--database", &url, "--bots", bots.to_str().unwrap()]);
    let sent_to_broker = |symbol: &str| alpaca.orders().iter().filter(|o| o.symbol == symbol).count();

    // Warm: the pool holds connections, the bot's lease has been taken and given back.
    let a = server.post(&token('9'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(15);
    while sent_to_broker("AAPL") == 0 {
        assert!(Instant::now() < deadline, "the first order was never sent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    relay.blackhole();
    let body = r#"{"ticker":"MSFT","action":"buy"}"#;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match server.try_post(&token('9'), body, Duration::from_secs(20)).await {
            Ok(a) if a.status == 200 => {
                assert!(a.body.contains("processed"), "{}", a.body);
                break;
            }
            Ok(a) => assert_eq!(a.status, 500, "{}", a.body),
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "no alert was processed over new connections");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let answered = Instant::now();
    while sent_to_broker("MSFT") == 0 {
        assert!(
            answered.elapsed() < Duration::from_secs(45),
            "processed, but not sent within 45 s: {}",
            server.stderr_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(sent_to_broker("MSFT"), 1);
    server.stop();
}

/// A fleet server restarted without its database URL (its environment file gone missing) started on an empty
/// SQLite database of its own and answered 200: a token rotated away through the shared database traded again,
/// and its own dedup and rate windows ignored the other servers'. It refuses to start now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_server_restarted_without_its_database_url_refuses_to_start() {
    let pg = Postgres::start();
    let url = pg.create_database("nourl");
    let dirs = Dirs::new("nourl");
    dirs.write("n.json", &snapshot("n", &token('7')));
    let server = Server::start(&dirs, &["--database", &url]);
    let a = server.admin(hyper::Method::POST, "/api/strategies/n/rotate", None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    server.stop();
    let err = start_refused(&dirs, &[], &[]);
    assert!(err.contains("shared PostgreSQL database") && err.contains("--fresh-database"), "{err}");
    // Back with its URL it starts, and the token rotated away stays away.
    let server = Server::start(&dirs, &["--database", &url]);
    assert_eq!(server.post_json(&token('7'), &json!({ "ticker": "AAPL", "action": "buy" })).await.status, 404);
    server.stop();
}

/// A single server moved onto the shared database with the same data directory (as deploy.md's "several
/// machines" says: the same flags, plus `--database`): its own database's rotated tokens and unsent orders
/// were silently left behind (the new token answered 404, the one rotated away 200 again). Refused until the
/// operator leaves them behind on purpose; then set aside, so that going back does not revive them either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_server_with_rotated_tokens_onto_the_shared_database_is_refused_until_meant() {
    let pg = Postgres::start();
    let url = pg.create_database("moved");
    let dirs = Dirs::new("moved");
    dirs.write("m.json", &snapshot("m", &token('6')));
    let server = Server::start(&dirs, &[]);
    let a = server.admin(hyper::Method::POST, "/api/strategies/m/rotate", None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    server.stop();

    let err = start_refused(&dirs, &["--database", &url], &[]);
    assert!(
        err.contains("webhook.db") && err.contains("1 rotated token(s)") && err.contains("--fresh-database"),
        "{err}"
    );
    // Nothing was written to the shared database meanwhile.
    assert!(pg.query("moved", "SELECT 1 FROM pg_tables WHERE tablename = 'outbox'").is_empty());

    let server = Server::start(&dirs, &["--database", &url, "--fresh-database"]);
    assert!(
        server.stderr_text().contains("left this data directory's own database behind"),
        "{}",
        server.stderr_text()
    );
    server.stop();
    assert!(!dirs.data.join("webhook.db").exists(), "set aside");
    // Back without --database: refused, the directory has run on the shared database.
    let err = start_refused(&dirs, &[], &[]);
    assert!(err.contains("shared PostgreSQL database"), "{err}");
    // A server that has run on the shared database is not refused later for a local database left over (put
    // back here, as a version before this check left it in place): the check is for the move only.
    let aside = std::fs::read_dir(&dirs.data)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("webhook.db.left-"))
        .expect("the set-aside database");
    std::fs::copy(&aside, dirs.data.join("webhook.db")).unwrap();
    let server = Server::start(&dirs, &["--database", &url]);
    assert_eq!(server.post_json(&token('6'), &json!({ "ticker": "AAPL", "action": "buy" })).await.status, 200);
    server.stop();
}

/// An alert that waited behind a batch stuck on PostgreSQL was decided with the batch's time: its market order
/// got a fresh deadline from there and went out that much later than the sender's alert. Its deadline counts
/// from the alert's arrival: past it when stored, it expires unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_queued_behind_a_stuck_batch_keeps_the_deadline_of_its_arrival() {
    let pg = Postgres::start();
    let url = pg.create_database("queued");
    let alpaca = Mock::start(Kind::Alpaca).await;
    let root = Dirs::new("queued");
    let bots = root.root.join("bots.json");
    std::fs::write(
        &bots,
        json!({ "alpaca": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 2000 } }).to_string(),
    )
    .unwrap();
    let mut s = snapshot("queued", &token('b'));
    s["allowed_instruments"] = json!(["*"]);
    s["bots"] =
        json!([{ "id": "alpaca", "broker": "alpaca", "account_id": "A1", "sizing": { "fixed_quantity": "1" } }]);
    let dirs = Dirs::new("queued0");
    dirs.write("queued.json", &s);
    let server = Arc::new(Server::start(
        &dirs,
        &["--database", &url, "--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "2"],
    ));
    let warm = server.post(&token('b'), Some("application/json"), r#"{"ticker":"SPY","action":"buy"}"#).await;
    assert_eq!(warm.status, 200, "{}", warm.body);

    // PostgreSQL hangs: a first alert's batch waits on it, and a second alert queues behind that batch.
    pg.freeze(true);
    let first = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            server.try_post(&token('b'), r#"{"ticker":"AAPL","action":"buy"}"#, Duration::from_secs(30)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = {
        let server = Arc::clone(&server);
        tokio::spawn(async move {
            server.try_post(&token('b'), r#"{"ticker":"MSFT","action":"buy"}"#, Duration::from_secs(30)).await
        })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    pg.freeze(false);
    let second = second.await.unwrap().expect("answered");
    let _ = first.await.unwrap();
    // Whatever the answer, nothing of MSFT may reach the broker past its 2 s: it was received 4 s before it
    // could be stored.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        alpaca.orders().iter().all(|o| o.symbol != "MSFT"),
        "sent past its deadline: {:?} ({})",
        alpaca.orders(),
        second.body
    );
    assert_eq!(second.status, 200, "the queued alert is answered once PostgreSQL answers: {}", second.body);
    let server = Arc::try_unwrap(server).ok().expect("one owner");
    server.stop();
}

/// On the shared database an alert held its per-address in-flight slot until its batch committed, not only while
/// it was read and decided: a burst of alerts from one address (a charting platform sends many users' from a
/// few) met the cap while a commit ran and was refused 503. Decided, it holds no slot now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_waiting_for_its_batch_commit_holds_no_in_flight_slot() {
    let pg = Postgres::start();
    let url = pg.create_database("slot");
    let dirs = Dirs::new("shared-slot");
    dirs.write("a.json", &snapshot("a", &token('a')));
    dirs.write("b.json", &snapshot("b", &token('b')));
    let args: Vec<String> = ["--database", &url, "--max-in-flight-per-address", "1", "--test-commit-delay-ms", "800"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let server = start(&dirs, &args);
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let first = {
        let client = server.client();
        tokio::spawn(async move { client.post_from("127.0.0.6", &token('a'), body, Duration::from_secs(15)).await })
    };
    // The first alert is decided at once and then waits in its batch for the commit.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = server.post_from("127.0.0.6", &token('b'), body, Duration::from_secs(15)).await.unwrap();
    assert_eq!(second.status, 200, "{}", second.body);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status, 200, "{}", first.body);
    server.stop();
}

/// Strategy `id` with a paper bot, under token `tk`.
fn moving(id: &str, tk: char) -> Value {
    let mut s = snapshot(id, &token(tk));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    s
}

/// An alert keyed by `id`.
fn moved_body(id: &str) -> String {
    format!(r#"{{"ticker":"AAPL","action":"buy","price":190,"message_id":"{id}"}}"#)
}

/// Strategy x under token `tk` on database `db`; an alert for x (`in-flight`) waits for its batch while another
/// session holds x's lock, and x's token moves to strategy y meanwhile. The server, that alert's answer, and the
/// other session (its transaction rolled back).
async fn token_moved_while_an_alert_waits(
    pg: &Postgres,
    db: &str,
    url: &str,
    dirs: &Dirs,
    tk: char,
) -> (Arc<Server>, Answer, tokio_postgres::Client) {
    dirs.write("x.json", &moving("x", tk));
    let server = Arc::new(Server::start(dirs, &["--database", url]));
    let warm = server.post(&token(tk), Some("application/json"), &moved_body("warm")).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    // Another server's batch of strategy x holds its lock a moment, while x's token moves to y.
    let (mut other, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended('x', 0))", &[]).await.unwrap();
    let answer = {
        let (s, b) = (Arc::clone(&server), moved_body("in-flight"));
        tokio::spawn(async move { s.post(&token(tk), Some("application/json"), &b).await })
    };
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query(db, waiting) == ["0"] {
        assert!(Instant::now() < deadline, "the batch never waited for x's lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    std::fs::remove_file(dirs.strategies.join("x.json")).unwrap();
    dirs.write("y.json", &moving("y", tk));
    server
        .wait_for_strategies("y instead of x", |l| {
            l.iter().any(|s| s["id"] == "y") && !l.iter().any(|s| s["id"] == "x")
        })
        .await;
    tx.rollback().await.unwrap();
    let a = answer.await.unwrap();
    (server, a, other)
}

/// The operator moves a webhook's token to another strategy (the old file removed, a new one carrying the same
/// `token_hash`) while an alert routed to the old strategy waits for its batch: the engine then decides it for
/// the new strategy, whose window and claim the batch never took. It was answered 200 `processed` with no order
/// stored and no log row; it is answered 503 (nothing stored), and the sender's retry trades for the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_whose_token_moves_to_another_strategy_while_it_waits_is_asked_to_retry_not_lost() {
    let pg = Postgres::start();
    let url = pg.create_database("moved");
    let dirs = Dirs::new("pgmoved");
    let (server, a, other) = token_moved_while_an_alert_waits(&pg, "moved", &url, &dirs, 'd').await;
    let body = moved_body;
    assert_eq!(a.status, 503, "{}", a.body);
    assert_eq!(a.json()["code"], "strategy_changed", "{}", a.body);
    assert_eq!(pg.query("moved", "SELECT count(*) FROM outbox WHERE strategy = 'y'"), ["0"], "nothing stored");
    // The sender's retry is decided for y, and its order stored.
    let retry = server.post(&token('d'), Some("application/json"), &body("in-flight")).await;
    assert_eq!((retry.status, retry.json()["status"].as_str()), (200, Some("processed")), "{}", retry.body);
    assert_eq!(pg.query("moved", "SELECT count(*) FROM outbox WHERE strategy = 'y'"), ["1"], "the retry's order");
    drop(other);
    Arc::try_unwrap(server).ok().expect("the only handle").stop();
}

/// An alert answered 503 `strategy_changed` (its token moved from x to y while it waited for its batch) kept its
/// dedup claim on x: the engine kept the claim it decided with for y, and that was taken for x's. Once the token
/// named x again, the sender's retry was a duplicate and its order never stored. Nothing of the 503 is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alert_asked_to_retry_after_its_token_moved_keeps_no_claim_on_the_old_strategy() {
    let pg = Postgres::start();
    let url = pg.create_database("movedback");
    let dirs = Dirs::new("pgmovedback");
    let (server, a, other) = token_moved_while_an_alert_waits(&pg, "movedback", &url, &dirs, 'c').await;
    let (body, with_bot) = (moved_body, |id: &str| moving(id, 'c'));
    assert_eq!((a.status, a.json()["code"].as_str()), (503, Some("strategy_changed")), "{}", a.body);
    let keys_of_x = || pg.query("movedback", "SELECT count(*) FROM dedup_keys WHERE strategy = 'x'");
    assert_eq!(keys_of_x(), ["1"], "only the warm-up's key is x's");
    // The token names x again; the sender's retry is decided for x, and its order stored.
    std::fs::remove_file(dirs.strategies.join("y.json")).unwrap();
    dirs.write("x.json", &with_bot("x"));
    server
        .wait_for_strategies("x instead of y", |l| {
            l.iter().any(|s| s["id"] == "x") && !l.iter().any(|s| s["id"] == "y")
        })
        .await;
    let retry = server.post(&token('c'), Some("application/json"), &body("in-flight")).await;
    assert_eq!((retry.status, retry.json()["status"].as_str()), (200, Some("processed")), "{}", retry.body);
    assert_eq!(keys_of_x(), ["2"], "the retry's key, claimed once");
    assert_eq!(pg.query("movedback", "SELECT count(*) FROM outbox WHERE strategy = 'x'"), ["2"]);
    drop(other);
    Arc::try_unwrap(server).ok().expect("the only handle").stop();
}

/// The deploy guide's synchronous standby drops out: commits wait for it longer than the batch waits for a
/// commit (2 s). The batch gave its commit up and answered 500 "nothing was sent, please retry", yet the commit
/// landed once the standby was back, and the order was sent: a sender who re-entered it by hand doubled it. The
/// answer now says the alert may be stored; while no standby holds it, it is not visible and nothing is sent;
/// once the standby confirms it, its order is stored once and the retry is a duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_held_by_a_missing_synchronous_standby_is_answered_maybe_stored_and_trades_once() {
    let pg = Postgres::start();
    let url = pg.create_database("syncrep");
    let dirs = Dirs::new("pgsyncrep");
    let mut s = snapshot("sr", &token('e'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("sr.json", &s);
    let server = Server::start(&dirs, &["--database", &url]);
    let body = |id: &str| format!(r#"{{"ticker":"AAPL","action":"buy","price":190,"message_id":"{id}"}}"#);
    let warm = server.post(&token('e'), Some("application/json"), &body("warm")).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    pg.query("syncrep", "ALTER SYSTEM SET synchronous_standby_names = 'standby_away'");
    pg.query("syncrep", "SELECT pg_reload_conf()");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = server.post(&token('e'), Some("application/json"), &body("m1")).await;
    let while_away = pg.query("syncrep", "SELECT count(*) FROM outbox");
    // The sender retries while the standby is still away: the first commit holds the strategy's lock, and the
    // retry is not decided either. It was answered "nothing was sent", and the first then traded.
    let early = server.post(&token('e'), Some("application/json"), &body("m1")).await;
    pg.query("syncrep", "ALTER SYSTEM RESET synchronous_standby_names");
    pg.query("syncrep", "SELECT pg_reload_conf()");
    assert_eq!(a.status, 500, "{}", a.body);
    assert_eq!(a.json()["code"], "store_unconfirmed", "{}", a.body);
    assert!(!a.body.contains("nothing was sent"), "{}", a.body);
    assert_eq!(while_away, ["1"], "m1's order visible (and sendable) with no standby holding it");
    assert_eq!((early.status, early.json()["code"].as_str()), (500, Some("store_unconfirmed")), "{}", early.body);
    assert!(!early.body.contains("nothing was sent"), "{}", early.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query("syncrep", "SELECT count(*) FROM outbox") != ["2"] {
        assert!(Instant::now() < deadline, "the commit did not land once the standby was back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let retry = server.post(&token('e'), Some("application/json"), &body("m1")).await;
    assert_eq!((retry.status, retry.json()["status"].as_str()), (200, Some("duplicate")), "{}", retry.body);
    assert_eq!(pg.query("syncrep", "SELECT count(*) FROM outbox"), ["2"], "m1's order once");
    server.stop();
}

/// As the test above, the sender's retry reaching the other server behind the load balancer. It waited for the
/// strategy's lock, which the first commit holds, and was answered `store_unavailable` "PostgreSQL is
/// unreachable … nothing was sent"; the first commit then landed and traded: a trader who placed it by hand
/// doubled it. The wait ends in PostgreSQL's lock timeout now, answered as maybe stored by another attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_server_waiting_for_a_commit_held_by_a_missing_standby_is_not_told_nothing_was_sent() {
    let pg = Postgres::start();
    let url = pg.create_database("syncrep2");
    let dirs: Vec<Dirs> = (0..2).map(|n| Dirs::new(&format!("pgsyncrep-peer{n}"))).collect();
    let mut s = snapshot("sr", &token('e'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    for d in &dirs {
        d.write("sr.json", &s);
    }
    let a_srv = Server::start(&dirs[0], &["--database", &url]);
    let b_srv = Server::start(&dirs[1], &["--database", &url]);
    let body = |id: &str| format!(r#"{{"ticker":"AAPL","action":"buy","price":190,"message_id":"{id}"}}"#);
    for srv in [&a_srv, &b_srv] {
        let warm = srv.post(&token('e'), Some("application/json"), &body("warm")).await;
        assert_eq!(warm.status, 200, "{}", warm.body);
    }
    pg.query("syncrep2", "ALTER SYSTEM SET synchronous_standby_names = 'standby_away'");
    pg.query("syncrep2", "SELECT pg_reload_conf()");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let a = a_srv.post(&token('e'), Some("application/json"), &body("m1")).await;
    let early = b_srv.post(&token('e'), Some("application/json"), &body("m1")).await;
    pg.query("syncrep2", "ALTER SYSTEM RESET synchronous_standby_names");
    pg.query("syncrep2", "SELECT pg_reload_conf()");
    assert_eq!((a.status, a.json()["code"].as_str()), (500, Some("store_unconfirmed")), "{}", a.body);
    assert_eq!((early.status, early.json()["code"].as_str()), (500, Some("store_locked")), "{}", early.body);
    assert!(!early.body.contains("nothing was sent"), "{}", early.body);
    assert!(early.body.contains("do not place it by hand"), "{}", early.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query("syncrep2", "SELECT count(*) FROM outbox") != ["2"] {
        assert!(Instant::now() < deadline, "the commit did not land once the standby was back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // B's attempt kept no claim: its retry finds A's.
    let retry = b_srv.post(&token('e'), Some("application/json"), &body("m1")).await;
    assert_eq!((retry.status, retry.json()["status"].as_str()), (200, Some("duplicate")), "{}", retry.body);
    assert_eq!(pg.query("syncrep2", "SELECT count(*) FROM outbox"), ["2"], "m1's order once");
    // B's Logs row of the attempt says what its answer said: it invited placing the alert by hand.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = b_srv.logs("sr").await;
        let row = rows.iter().find(|r| r["message"].as_str().unwrap_or_default().contains("store_locked"));
        if let Some(r) = row {
            let m = r["message"].as_str().unwrap_or_default();
            assert!(m.contains("Do not place it by hand") && !m.contains("sending it again by hand"), "{m}");
            break;
        }
        assert!(Instant::now() < deadline, "no row for the attempt answered store_locked: {rows:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a_srv.stop();
    b_srv.stop();
}

/// PostgreSQL's host freezes between a batch's opening and its commit: the commit goes unanswered, and so does
/// its cancel. The alert may be stored (the frozen server runs the commit once it wakes), so the answer says
/// exactly that instead of "nothing was sent"; and whatever became of it, the sender's retry leaves one order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_that_never_answers_is_answered_unconfirmed_and_the_retry_trades_once() {
    let pg = Postgres::start();
    let url = pg.create_database("unconfirmed");
    let dirs = Dirs::new("pgunconfirmed");
    let mut s = snapshot("uc", &token('c'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("uc.json", &s);
    let server = Arc::new(Server::start(&dirs, &["--database", &url, "--test-commit-delay-ms", "1000"]));
    let body = |id: &str| format!(r#"{{"ticker":"AAPL","action":"buy","price":190,"message_id":"{id}"}}"#);
    let warm = server.post(&token('c'), Some("application/json"), &body("warm")).await;
    assert_eq!(warm.status, 200, "{}", warm.body);
    let answer = {
        let (s, b) = (Arc::clone(&server), body("m1"));
        tokio::spawn(async move { s.post(&token('c'), Some("application/json"), &b).await })
    };
    // Frozen while the batch sleeps before its commit.
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg.freeze(true);
    let a = answer.await.unwrap();
    pg.freeze(false);
    assert_eq!(a.status, 500, "{}", a.body);
    assert_eq!(a.json()["code"], "store_unconfirmed", "{}", a.body);
    assert!(a.body.contains("do not place it by hand") && !a.body.contains("nothing was sent"), "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = server.post(&token('c'), Some("application/json"), &body("m1")).await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the retry is still refused: {}", r.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(pg.query("unconfirmed", "SELECT count(*) FROM outbox"), ["2"], "the warm-up's order and m1's, once");
    Arc::try_unwrap(server).ok().expect("the only handle").stop();
}

/// A server takes a paper bot's lease fresh after another server filled orders for it; the read of the stored
/// states that should replace its own old copy fails (here: the table is locked for longer than a read waits).
/// The server carried on with its old copy, filled the next order on it, and stored that state over the newer
/// one: the other server's fill was gone from the bot's book. It gives the lease back and takes it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_lease_whose_state_read_failed_does_not_overwrite_the_newer_state() {
    let pg = Postgres::start();
    let url = pg.create_database("adopt");
    let mut s = snapshot("ad", &token('a'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    let da = Dirs::new("pgadopta");
    da.write("ad.json", &s);
    let db = Dirs::new("pgadoptb");
    db.write("ad.json", &s);
    let a = Server::start(&da, &["--database", &url]);
    let b = Server::start(&db, &["--database", &url]);
    let body =
        |t: &str, p: u32, id: &str| format!(r#"{{"ticker":"{t}","action":"buy","price":{p},"message_id":"{id}"}}"#);
    let done = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let d = pg.query("adopt", "SELECT count(*) FROM outbox WHERE status = 'done'");
            if d == [n.to_string()] {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{n} rows never done: {:?}",
                pg.query("adopt", "SELECT id, status, result FROM outbox")
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // AAPL through A (filled by A), then MSFT through B (filled by B, which adopts AAPL first).
    assert_eq!(a.post(&token('a'), Some("application/json"), &body("AAPL", 190, "m1")).await.status, 200);
    done(1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(b.post(&token('a'), Some("application/json"), &body("MSFT", 415, "m2")).await.status, 200);
    done(2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stored = pg.query("adopt", "SELECT state FROM bot_state");
    assert!(stored[0].contains("AAPL") && stored[0].contains("MSFT"));
    // Nobody may take the bot while B stores SPY's order; B then stops.
    let (mut c1, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let t1 = c1.transaction().await.unwrap();
    t1.execute("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
    assert_eq!(b.post(&token('a'), Some("application/json"), &body("SPY", 512, "m3")).await.status, 200);
    b.stop();
    // The bot states cannot be read for a few seconds (longer than a read waits) as A takes the bot.
    let (mut c2, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let t2 = c2.transaction().await.unwrap();
    t2.batch_execute("LOCK TABLE bot_state IN ACCESS EXCLUSIVE MODE").await.unwrap();
    t1.rollback().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.stderr_text().contains("reading the bots' states failed") {
        assert!(Instant::now() < deadline, "A never failed to read the states: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    t2.rollback().await.unwrap();
    done(3);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = pg.query("adopt", "SELECT state FROM bot_state");
    assert!(stored[0].contains("SPY"));
    assert!(stored[0].contains("MSFT"), "B's MSFT fill was overwritten by A's old copy: {stored:?}");
    a.stop();
}

/// A rotation whose commit waits past the writer's 10 s for an absent synchronous standby was answered
/// `rotation_failed`, "the old one still answers"; once the standby was back the commit landed, the old token
/// was refused (404) on every server, and the new one had never been shown to the operator. It is answered
/// `rotation_unconfirmed` now, with the new token and its URL, which answers once the commit lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_whose_commit_is_unconfirmed_gives_the_operator_the_new_token() {
    let pg = Postgres::start();
    let url = pg.create_database("rotsync");
    let dirs = Dirs::new("pgrotsync");
    let old = token('d');
    dirs.write("rs.json", &snapshot("rs", &old));
    let server = Server::start(&dirs, &["--database", &url]);
    let body = |id: &str| json!({ "ticker": "AAPL", "action": "buy", "message_id": id }).to_string();
    assert_eq!(server.post(&old, Some("application/json"), &body("warm")).await.status, 200);
    pg.query("rotsync", "ALTER SYSTEM SET synchronous_standby_names = 'standby_away'");
    pg.query("rotsync", "SELECT pg_reload_conf()");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = server.admin(hyper::Method::POST, "/api/strategies/rs/rotate", None, "", true).await;
    pg.query("rotsync", "ALTER SYSTEM RESET synchronous_standby_names");
    pg.query("rotsync", "SELECT pg_reload_conf()");
    assert_eq!(r.status, 500, "{}", r.body);
    assert_eq!(r.json()["code"], "rotation_unconfirmed", "{}", r.body);
    assert!(!r.body.contains("the old one still answers"), "{}", r.body);
    let new = r.json()["token_hash"].as_str().expect("the new token").to_owned();
    assert!(r.json()["webhook_url"].as_str().is_some_and(|u| u.contains(&new)), "{}", r.body);
    // The commit lands once the standby is back: the new token answers, the old one not.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let after = server.post(&new, Some("application/json"), &body("after")).await;
        if after.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the new token never answered: {} {}", after.status, after.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(server.post(&old, Some("application/json"), &body("old")).await.status, 404);
    server.stop();
}

/// The deploy guide: "Bot state, log rows, and the admin API's views: positions and working orders … Any server's
/// admin API and console show every server's rows." A fill made by server B is not shown by server A's admin API
/// (nor its console) until A happens to decide an alert of that strategy: an operator reading A saw flat where a
/// position was open. Both read the stored states of bots they do not hold first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fill_made_on_one_server_is_shown_by_the_others_admin_api() {
    let pg = Postgres::start();
    let url = pg.create_database("view");
    let mut s = snapshot("vw", &token('b'));
    s["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    let da = Dirs::new("pgviewa");
    da.write("vw.json", &s);
    let db = Dirs::new("pgviewb");
    db.write("vw.json", &s);
    let a = Server::start(&da, &["--database", &url]);
    let b = Server::start(&db, &["--database", &url]);
    let body = r#"{"ticker":"AAPL","action":"buy","price":190,"message_id":"v1"}"#;
    assert_eq!(b.post(&token('b'), Some("application/json"), body).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    while pg.query("view", "SELECT count(*) FROM bot_state WHERE state LIKE '%AAPL%'") != ["1"] {
        assert!(Instant::now() < deadline, "never filled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let on_b = b.admin_get("/api/strategies/vw/bots/paper/state").await;
    let on_a = a.admin_get("/api/strategies/vw/bots/paper/state").await;
    assert_eq!(on_a["positions"], on_b["positions"], "server A's admin API shows a position B filled 3 s ago");
    a.stop();
    b.stop();
}

/// On a shared database an alert's rows are stamped with its arrival, and its Logs row was stamped when its batch
/// ran: in a burst, the console's Logs view found none of the alert's broker requests by that time and said "No
/// broker request from this alert". Both now carry the arrival; `outbox?created_ms=` lists an alert's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_alerts_on_a_shared_database_finds_each_alerts_requests() {
    let pg = Postgres::start();
    let url = pg.create_database("logsburst");
    let dirs = Dirs::new("shared-logs-burst");
    let mut v = snapshot("paper", &token('a'));
    v["allowed_instruments"] = json!(["*"]);
    v["bots"] = json!([{ "id": "p", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("paper.json", &v);
    let server = Arc::new(Server::start(&dirs, &["--database", &url, "--rate-limit", "1000"]));
    let tasks: Vec<_> = (0..20)
        .map(|n| {
            let s = Arc::clone(&server);
            tokio::spawn(async move {
                s.post_json(
                    &token('a'),
                    &json!({"ticker": "AAPL", "action": "buy", "metadata": {"message_id": format!("m{n}")}}),
                )
                .await
            })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap().json()["status"], "processed");
    }
    let logs = server.admin_get("/api/strategies/paper/logs?decision=processed&limit=1000").await["logs"]
        .as_array()
        .cloned()
        .unwrap();
    // The alerts' rows (a delivery's own rows carry no alert).
    let alert_rows = logs.iter().filter(|l| l["alerts"].as_array().is_some_and(|a| !a.is_empty()));
    let mut times: Vec<i64> = alert_rows.filter_map(|l| l["ts_ms"].as_i64()).collect();
    times.dedup();
    assert!(!times.is_empty(), "{logs:?}");
    let mut found = 0;
    for t in &times {
        let rows = server.admin_get(&format!("/api/strategies/paper/outbox?created_ms={t}")).await["outbox"]
            .as_array()
            .cloned()
            .unwrap();
        assert!(!rows.is_empty(), "no broker request found for the alert logged at {t}");
        assert!(rows.iter().all(|r| r["created_ms"] == json!(t)), "{rows:?}");
        found += rows.len();
    }
    assert_eq!(found, 20, "each alert's one order, found by its Logs row's time");
}

/// An alert's body for the lock tests: `ticker` bought, keyed by `id`.
fn bought(ticker: &str, id: &str) -> String {
    json!({ "ticker": ticker, "action": "buy", "message_id": id }).to_string()
}

/// A session of the test's own on `url` holding strategy `s`'s lock in an open transaction, as another server's
/// batch whose commit waits for a synchronous standby does; and that session's backend pid.
async fn hold_lock(url: &str, s: &str) -> (tokio_postgres::Client, i32) {
    let (holder, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    holder.batch_execute("BEGIN").await.unwrap();
    holder.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&s]).await.unwrap();
    let pid: i32 = holder.query_one("SELECT pg_backend_pid()", &[]).await.unwrap().get(0);
    (holder, pid)
}

/// Waits until a server's batch waits in PostgreSQL for a lock the test holds.
async fn until_a_batch_waits_for_a_lock(pg: &Postgres, db: &str) {
    let waiting = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted";
    let deadline = Instant::now() + Duration::from_secs(5);
    while pg.query(db, waiting) == ["0"] {
        assert!(Instant::now() < deadline, "no batch waited for the held lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Review (pgstore): one strategy's lock held elsewhere (another server's commit waiting for a synchronous
/// standby) stalled every other strategy's alerts on the server for the 6 s lock wait: its one batch at a time
/// waited in PostgreSQL for the lock. deploy.md promises "different strategies' batches proceed side by side",
/// and that only the locked strategies' next alerts wait 6 s and are answered store_locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_whose_lock_is_held_elsewhere_does_not_stall_another_strategys_alert() {
    let pg = Postgres::start();
    let url = pg.create_database("sidebyside");
    let dirs = Dirs::new("sidebyside");
    dirs.write("a.json", &snapshot("a", &token('5')));
    dirs.write("b.json", &snapshot("b", &token('6')));
    let server = Arc::new(Server::start(&dirs, &["--database", &url]));
    let (holder, _) = hold_lock(&url, "a").await;
    let for_a = {
        let (s, b) = (Arc::clone(&server), bought("AAPL", "a1"));
        tokio::spawn(async move { s.post(&token('5'), Some("application/json"), &b).await })
    };
    // a's alert is waiting for a's lock.
    until_a_batch_waits_for_a_lock(&pg, "sidebyside").await;
    let sent = Instant::now();
    let answer = server.post(&token('6'), Some("application/json"), &bought("AAPL", "b1")).await;
    let (status, text) = (answer.status, answer.body);
    let waited = sent.elapsed();
    let a = for_a.await.unwrap();
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!((a.status, a.json()["code"].as_str()), (500, Some("store_locked")), "the locked strategy's alert");
    assert!(
        status == 200 && text.contains("processed") && waited < Duration::from_secs(3),
        "strategy b, whose lock nobody holds, answered {status} after {waited:?}: {text}"
    );
    Arc::try_unwrap(server).ok().unwrap().stop();
}

/// The same with both alerts in one batch (sent together while the server's previous batch commits): the batch
/// waited for every strategy's lock, and the lock wait's timeout failed all of its alerts with 500 store_locked,
/// the free strategy's too. Its sender does not retry a 500, so that trade was lost. The free strategy's alert is
/// processed at once; the held one's waits for its lock and is answered store_locked, having stored nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_strategys_alert_in_the_same_batch_as_a_free_ones_fails_alone() {
    let pg = Postgres::start();
    let url = pg.create_database("onebatch");
    let dirs = Dirs::new("onebatch");
    for (s, t) in [("a", '5'), ("b", '6'), ("c", '7')] {
        dirs.write(&format!("{s}.json"), &snapshot(s, &token(t)));
    }
    // Each processed alert's batch holds its commit 400 ms: alerts sent meanwhile queue for the next batch.
    let server = Arc::new(Server::start(&dirs, &["--database", &url, "--test-commit-delay-ms", "400"]));
    let (holder, holder_pid) = hold_lock(&url, "a").await;
    let for_c = {
        let s = Arc::clone(&server);
        tokio::spawn(async move { s.post(&token('7'), Some("application/json"), &bought("AAPL", "c1")).await })
    };
    // c's batch holds c's lock until its commit.
    let held_by_the_server =
        format!("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid <> {holder_pid}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while pg.query("onebatch", &held_by_the_server) == ["0"] {
        assert!(Instant::now() < deadline, "c's batch never took its lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let go = Arc::new(Barrier::new(2));
    let [for_a, for_b] = [('5', "a1"), ('6', "b1")].map(|(t, id)| {
        let (s, go) = (Arc::clone(&server), Arc::clone(&go));
        tokio::spawn(async move {
            let answer = post_at(&s, &token(t), &bought("AAPL", id), &go).await;
            (answer, Instant::now())
        })
    });
    let sent = Instant::now();
    let ((b_status, b_text), b_at) = for_b.await.unwrap();
    let ((a_status, a_text), a_at) = for_a.await.unwrap();
    let c = for_c.await.unwrap();
    assert!(c.status == 200 && c.body.contains("processed"), "{}", c.body);
    assert!(
        b_status == 200 && b_text.contains("processed") && b_at - sent < Duration::from_secs(3),
        "strategy b, whose lock nobody holds, answered {b_status} after {:?}: {b_text}",
        b_at - sent
    );
    assert!(a_status == 500 && a_text.contains("store_locked"), "{a_status} {a_text}");
    assert!(a_at - sent >= Duration::from_secs(5), "a's alert did not wait for its lock: {:?}", a_at - sent);
    assert_eq!(pg.query("onebatch", "SELECT count(*) FROM dedup_keys WHERE strategy = 'a'"), ["0"], "a's claim");
    holder.batch_execute("ROLLBACK").await.unwrap();
    // Nothing of a's attempt was kept: the sender's retry, its lock free, trades.
    let retry = server.post(&token('5'), Some("application/json"), &bought("AAPL", "a1")).await;
    assert_eq!((retry.status, retry.json()["status"].as_str()), (200, Some("processed")), "{}", retry.body);
    Arc::try_unwrap(server).ok().unwrap().stop();
}

/// Alerts of a strategy whose lock is held elsewhere wait behind each other and are decided in the order they
/// came once the lock is free (an open, then its close, sent milliseconds apart), while another strategy's alert
/// sent meanwhile is not held up by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_waiting_for_their_strategys_lock_are_decided_in_the_order_they_came() {
    let pg = Postgres::start();
    let url = pg.create_database("inorder");
    let dirs = Dirs::new("inorder");
    let mut a = snapshot("a", &token('5'));
    a["bots"] =
        json!([{ "id": "paper", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("a.json", &a);
    dirs.write("b.json", &snapshot("b", &token('6')));
    let server = Arc::new(Server::start(&dirs, &["--database", &url]));
    let (holder, _) = hold_lock(&url, "a").await;
    let post_a = |ticker: &'static str, id: &'static str| {
        let s = Arc::clone(&server);
        tokio::spawn(async move { s.post(&token('5'), Some("application/json"), &bought(ticker, id)).await })
    };
    let first = post_a("AAPL", "a1");
    until_a_batch_waits_for_a_lock(&pg, "inorder").await;
    let second = post_a("MSFT", "a2");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let sent = Instant::now();
    let b = server.post(&token('6'), Some("application/json"), &bought("AAPL", "b1")).await;
    let waited = sent.elapsed();
    assert!(
        b.status == 200 && b.body.contains("processed") && waited < Duration::from_secs(3),
        "{waited:?} {}",
        b.body
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    for (answer, id) in [(first.await.unwrap(), "a1"), (second.await.unwrap(), "a2")] {
        assert!(answer.status == 200 && answer.body.contains("processed"), "{id}: {}", answer.body);
    }
    let tickers = pg.query(
        "inorder",
        "SELECT CASE WHEN position('AAPL' IN convert_from(body, 'UTF8')) > 0 THEN 'AAPL' ELSE 'MSFT' END
         FROM outbox WHERE strategy = 'a' ORDER BY id",
    );
    assert_eq!(tickers, ["AAPL", "MSFT"], "a's orders stored in the order their alerts came");
    Arc::try_unwrap(server).ok().unwrap().stop();
}

/// An entry one server is still retrying (its broker turning every write away) is overtaken by the sender's CLOSE
/// decided by another server sharing the database (rejected: nothing to close): the first server reads the CLOSE from
/// the shared logs and does not send the entry once the broker takes orders again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_retried_on_one_server_is_not_sent_after_a_close_decided_on_another() {
    let pg = Postgres::start();
    let url = pg.create_database("overtaken");
    let (tradier, _root, bots, s) = tradier_turning_writes_away("overtaken", '7').await;
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"];
    let (dirs, args) = three("overtaken", &url, &[("overtaken.json", s)], &extra);
    let (a, b) = (start(&dirs[0], &args), start(&dirs[1], &args));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let answer = a.post(&token('7'), Some("application/json"), &open).await;
    assert!(answer.status == 200 && answer.body.contains("processed"), "{}", answer.body);
    let refused = || tradier.seen().iter().filter(|r| r.method == "POST" && r.status == 429).count();
    let deadline = Instant::now() + Duration::from_secs(20);
    while refused() < 2 {
        assert!(Instant::now() < deadline, "the entry was never tried: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let closed = b.post(&token('7'), Some("application/json"), &close).await;
    assert!(closed.status == 200 && closed.body.contains("rejected"), "{}", closed.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    tradier.clear_faults();
    let outbox = || pg.query("overtaken", "SELECT status || ' ' || coalesce(result, '') FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "the entry was never settled: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = outbox();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].starts_with("failed ") && rows[0].contains("later alert") && rows[0].contains("CLOSE"), "{rows:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(tradier.orders().is_empty(), "the entry went out after the CLOSE: {:?}", tradier.orders());
    a.stop();
    b.stop();
}
