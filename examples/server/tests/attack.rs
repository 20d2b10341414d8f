//! The attack suite: the server binary started under a 1 GiB address-space limit and a 1,024 open-file limit,
//! attacked from loopback, one attack at a time, each on a fresh server:
//!
//! 1. 2,000 connections with no valid token sending nearly 256 KiB bodies and holding them open;
//! 2. 1,100 idle TCP connections plus 200 bodies trickled slowly;
//! 3. 60 worst-case text bodies (256 KiB of `k=v ` pairs, slow to parse) to one strategy;
//! 4. 2,000 connections each sending a nearly 400 KiB request head (one long header) and holding it unfinished.
//!
//! Each time a legitimate alert to another strategy, from another address, must be answered 200 within 1 s, and
//! the server must still be running with its resident memory under 300 MB (printed). Attackers come from a
//! few addresses of 127.0.0.0/8 and the legitimate sender from 127.0.0.2, as on the internet the per-address
//! caps are what keeps one sender from using up the server for everyone.

mod server_support;

use server_support::{send_raw, snapshot, token, Dirs, Server};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;

const ADDRESS_SPACE: u64 = 1 << 30;
const OPEN_FILES: u64 = 1024;
const RSS_BOUND: u64 = 300 * 1024 * 1024;
const LEGIT: &str = "127.0.0.2";

/// The test opens thousands of sockets: raise its own soft open-file limit to the hard one.
fn raise_own_open_files() {
    let mut l = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain get/setrlimit on structs we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut l), 0);
        l.rlim_cur = l.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &l), 0);
    }
    assert!(l.rlim_cur >= 4096, "the test needs about 3,500 descriptors; the hard limit is {}", l.rlim_cur);
}

fn start(name: &str) -> (Dirs, Server) {
    let dirs = Dirs::new(name);
    dirs.write("flood.json", &snapshot("flood", &token('a')));
    dirs.write("victim.json", &snapshot("victim", &token('b')));
    let server = Server::start_limited(&dirs, &[], Some((ADDRESS_SPACE, OPEN_FILES)));
    (dirs, server)
}

/// A legitimate alert to the other strategy is answered 200 within 1 s, and the server is alive with bounded
/// memory.
async fn still_serving(server: &mut Server, attack: &str, n: usize) {
    for i in 0..n {
        let body = format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"{attack}-{i}"}}}}"#);
        let t = Instant::now();
        let answer = server.post_from(LEGIT, &token('b'), &body, Duration::from_secs(1)).await;
        let took = t.elapsed();
        let answer = answer.unwrap_or_else(|e| panic!("{attack}: the legitimate alert failed after {took:?}: {e}"));
        assert_eq!(answer.status, 200, "{attack}: {}", answer.body);
        println!("{attack}: legitimate alert answered {} in {took:?}", answer.status);
    }
    assert!(server.try_status().is_none(), "{attack}: the server died: {}", server.stderr_text());
    let rss = server.rss_bytes();
    println!("{attack}: server RSS {:.1} MB", rss as f64 / 1e6);
    assert!(rss > 0 && rss < RSS_BOUND, "{attack}: RSS {rss} bytes");
}

/// Waits until `done` reaches `n` (every attacker connected or was refused), at most `within`.
async fn settle(done: &AtomicUsize, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while done.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attacks_one_at_a_time_leave_other_strategies_served_with_bounded_memory() {
    raise_own_open_files();
    let suite = Instant::now();
    no_token_bodies_held_open().await;
    idle_connections_and_slow_bodies().await;
    worst_case_bodies_to_one_strategy().await;
    huge_heads_held_open().await;
    println!("attack suite: {:?}", suite.elapsed());
}

async fn no_token_bodies_held_open() {
    let (_dirs, mut server) = start("attack-no-token");
    let client = server.client();
    let done = Arc::new(AtomicUsize::new(0));
    let connected = Arc::new(AtomicUsize::new(0));
    let mut attackers = JoinSet::new();
    for i in 0..2000 {
        let (client, done, connected) = (client.clone(), Arc::clone(&done), Arc::clone(&connected));
        attackers.spawn(async move {
            let ip = format!("127.0.0.{}", 10 + i % 8);
            let path =
                if i % 2 == 0 { "/webhooks/not-a-token".to_owned() } else { format!("/webhooks/{}", token('f')) };
            let tls = tokio::time::timeout(Duration::from_secs(10), client.connect_from(&ip)).await;
            let Ok(Ok(mut tls)) = tls else {
                done.fetch_add(1, Ordering::Relaxed);
                return;
            };
            connected.fetch_add(1, Ordering::Relaxed);
            let head = format!("POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 262000\r\n\r\n");
            let body = vec![b'x'; 200 * 1024];
            let _ = tokio::time::timeout(Duration::from_secs(3), async {
                tls.write_all(head.as_bytes()).await?;
                tls.write_all(&body).await?;
                tls.flush().await
            })
            .await;
            done.fetch_add(1, Ordering::Relaxed);
            // Hold the connection open until the attack is called off.
            std::future::pending::<()>().await;
        });
    }
    settle(&done, 2000, Duration::from_secs(30)).await;
    println!(
        "no-token bodies: {} of 2000 attackers settled, {} got a TLS connection",
        done.load(Ordering::Relaxed),
        connected.load(Ordering::Relaxed)
    );
    // The attack landed: every source address got connections in before its cap.
    assert!(connected.load(Ordering::Relaxed) >= 8, "the attack never reached the server");
    still_serving(&mut server, "no-token bodies", 3).await;
    attackers.abort_all();
    while attackers.join_next().await.is_some() {}
    server.stop();
}

async fn idle_connections_and_slow_bodies() {
    let (_dirs, mut server) = start("attack-idle");
    let client = server.client();
    let done = Arc::new(AtomicUsize::new(0));
    let mut attackers = JoinSet::new();
    for _ in 0..1100 {
        let (client, done) = (client.clone(), Arc::clone(&done));
        attackers.spawn(async move {
            let tcp = tokio::time::timeout(Duration::from_secs(10), client.tcp_from("127.0.0.20")).await;
            done.fetch_add(1, Ordering::Relaxed);
            let _held = tcp;
            std::future::pending::<()>().await;
        });
    }
    let answered = Arc::new(AtomicUsize::new(0));
    for i in 0..200 {
        let (client, done, answered) = (client.clone(), Arc::clone(&done), Arc::clone(&answered));
        attackers.spawn(async move {
            let ip = format!("127.0.0.{}", 21 + i % 4);
            let tls = tokio::time::timeout(Duration::from_secs(10), client.connect_from(&ip)).await;
            done.fetch_add(1, Ordering::Relaxed);
            let Ok(Ok(mut tls)) = tls else { return };
            let head =
                format!("POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\ncontent-length: 200000\r\n\r\n", token('a'));
            send_raw(&mut tls, head.as_bytes()).await;
            // 20 bytes a second, until the server answers or closes.
            loop {
                if tls.write_all(&[b' '; 10]).await.is_err() || tls.flush().await.is_err() {
                    break;
                }
                let mut buf = [0u8; 256];
                let read =
                    tokio::time::timeout(Duration::from_millis(500), tokio::io::AsyncReadExt::read(&mut tls, &mut buf));
                match read.await {
                    Ok(Ok(n)) if n > 0 => {
                        if buf.starts_with(b"HTTP/1.1 408") {
                            answered.fetch_add(1, Ordering::Relaxed);
                        }
                        break;
                    }
                    Ok(_) => break,
                    Err(_) => {}
                }
            }
            std::future::pending::<()>().await;
        });
    }
    settle(&done, 1300, Duration::from_secs(30)).await;
    still_serving(&mut server, "idle connections and slow bodies", 3).await;
    // The minimum rate cuts the slow bodies that got in after about 2 s, not after the 30 s total.
    tokio::time::sleep(Duration::from_secs(3)).await;
    println!(
        "idle connections and slow bodies: {} slow bodies cut with 408 so far (the rest were refused by the caps)",
        answered.load(Ordering::Relaxed)
    );
    assert!(answered.load(Ordering::Relaxed) > 0, "no slow body was cut");
    still_serving(&mut server, "idle connections and slow bodies (later)", 1).await;
    attackers.abort_all();
    while attackers.join_next().await.is_some() {}
    server.stop();
}

async fn worst_case_bodies_to_one_strategy() {
    let (_dirs, mut server) = start("attack-worst-case");
    let client = server.client();
    let mut body = String::with_capacity(262_144);
    while body.len() + 4 <= 262_140 {
        body.push_str("k=v ");
    }
    let body = Arc::new(body);
    let decided = Arc::new(AtomicUsize::new(0));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut attackers = JoinSet::new();
    for i in 0..60 {
        let (client, body, decided, sent) =
            (client.clone(), Arc::clone(&body), Arc::clone(&decided), Arc::clone(&sent));
        attackers.spawn(async move {
            let ip = format!("127.0.0.{}", 30 + i % 2);
            let Ok(mut tls) = client.connect_from(&ip).await else { return };
            sent.fetch_add(1, Ordering::Relaxed);
            let head = format!(
                "POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                token('a'),
                body.len()
            );
            send_raw(&mut tls, head.as_bytes()).await;
            send_raw(&mut tls, body.as_bytes()).await;
            let (status, _) = server_support::read_raw_answer(&mut tls, Duration::from_secs(60)).await;
            if status != 0 {
                decided.fetch_add(1, Ordering::Relaxed);
            }
            std::future::pending::<()>().await;
        });
    }
    // Let the bodies arrive and queue up behind one another.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The attack landed: bodies were on their way from both addresses.
    assert!(sent.load(Ordering::Relaxed) >= 2, "no worst-case body reached the server");
    still_serving(&mut server, "worst-case bodies", 3).await;
    println!(
        "worst-case bodies: {} of 60 connected, {} answered by now",
        sent.load(Ordering::Relaxed),
        decided.load(Ordering::Relaxed)
    );
    attackers.abort_all();
    while attackers.join_next().await.is_some() {}
    drop(server);
}

async fn huge_heads_held_open() {
    let (_dirs, mut server) = start("attack-huge-heads");
    let client = server.client();
    let done = Arc::new(AtomicUsize::new(0));
    let connected = Arc::new(AtomicUsize::new(0));
    let mut attackers = JoinSet::new();
    for i in 0..2000 {
        let (client, done, connected) = (client.clone(), Arc::clone(&done), Arc::clone(&connected));
        attackers.spawn(async move {
            let ip = format!("127.0.0.{}", 30 + i % 16);
            let tls = tokio::time::timeout(Duration::from_secs(5), client.connect_from(&ip)).await;
            let Ok(Ok(mut tls)) = tls else {
                done.fetch_add(1, Ordering::Relaxed);
                return;
            };
            connected.fetch_add(1, Ordering::Relaxed);
            // A head just under hyper's default limit, never finished: the server holds whatever it buffers of
            // it until the head's time runs out.
            let mut head = format!("POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\nx-pad: ", token('a')).into_bytes();
            head.resize(390 * 1024, b'p');
            let _ = tokio::time::timeout(Duration::from_secs(5), async {
                tls.write_all(&head).await?;
                tls.flush().await
            })
            .await;
            done.fetch_add(1, Ordering::Relaxed);
            std::future::pending::<()>().await;
        });
    }
    settle(&done, 2000, Duration::from_secs(8)).await;
    // While the heads are still within their time (10 s), what the server holds of them.
    let mut peak = 0;
    for _ in 0..20 {
        peak = peak.max(server.rss_bytes());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "huge heads: {} connected, server RSS peaked at {:.1} MB",
        connected.load(Ordering::Relaxed),
        peak as f64 / 1e6
    );
    assert!(connected.load(Ordering::Relaxed) >= 16, "the attack never reached the server");
    assert!(peak < RSS_BOUND, "huge heads: RSS {peak} bytes");
    still_serving(&mut server, "huge heads", 3).await;
    attackers.abort_all();
    while attackers.join_next().await.is_some() {}
    server.stop();
}

/// Both listeners held full by idle connections (neither needs a token to hold one): the process keeps descriptors
/// for its brokers. With the admin listener's cap counted inside the public cap's reserve, the two together took
/// every descriptor ("Too many open files") and an alert answered processed could not reach its broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_full_leave_descriptors_for_the_rest() {
    raise_own_open_files();
    let dirs = Dirs::new("attack-both-full");
    dirs.write("a.json", &snapshot("a", &token('a')));
    let server = Server::start_limited(&dirs, &[], Some((ADDRESS_SPACE, OPEN_FILES)));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = || std::fs::read_dir(format!("/proc/{}/fd", server.pid())).map(|d| d.count()).unwrap_or(0);
    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = tokio::net::TcpStream::connect(server.admin).await {
            held.push(s);
        }
    }
    let client = server.client();
    for i in 0..(16 * 64) {
        if let Ok(s) = client.tcp_from(&format!("127.0.0.{}", 100 + i % 16)).await {
            held.push(s);
        }
    }
    // One more on each, to make each listener accept past its cap.
    held.extend(tokio::net::TcpStream::connect(server.admin).await);
    held.extend(client.tcp_from("127.0.0.200").await);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let at_most = open();
    let log = server.stderr_text();
    drop(held);
    server.stop();
    println!("both listeners full: {at_most} descriptors open of {OPEN_FILES}");
    assert!(!log.contains("Too many open files"), "the process ran out of descriptors ({at_most} open)");
    assert!(at_most as u64 <= OPEN_FILES - 100, "{at_most} descriptors open: too few left for the brokers");
}

/// What [`slow_reading_broker`] saw: when each read (GET) and each order (POST) arrived, the reads answered and
/// the connections accepted.
#[derive(Default, Clone)]
struct Seen {
    gets: Arc<Mutex<Vec<Instant>>>,
    posts: Arc<Mutex<Vec<Instant>>>,
    reads: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

impl Seen {
    fn orders(&self) -> usize {
        self.posts.lock().unwrap().len()
    }
}

/// A keep-alive broker on 127.0.0.1 that answers every read after `read_delay` (404: the sync's reads fail, which
/// is all these tests need of them) and takes every order at once. Returns its base URL and what it saw.
async fn slow_reading_broker(read_delay: Duration) -> (String, Seen) {
    use http_body_util::{BodyExt, Full};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Seen::default();
    let counters = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counters.connections.fetch_add(1, Ordering::SeqCst);
            let seen = counters.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let seen = seen.clone();
                    async move {
                        let get = req.method() == hyper::Method::GET;
                        let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let (status, text) = if get {
                            seen.gets.lock().unwrap().push(Instant::now());
                            tokio::time::sleep(read_delay).await;
                            seen.reads.fetch_add(1, Ordering::SeqCst);
                            (404, r#"{"message":"not imitated"}"#.to_owned())
                        } else {
                            let n = {
                                let mut posts = seen.posts.lock().unwrap();
                                posts.push(Instant::now());
                                posts.len()
                            };
                            let order: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                            let coid = order["client_order_id"].as_str().unwrap_or_default().to_owned();
                            let answer = serde_json::json!({ "id": format!("ord-{n}"), "client_order_id": coid,
                                                             "status": "accepted" });
                            (200, answer.to_string())
                        };
                        let mut res = hyper::Response::new(Full::new(bytes::Bytes::from(text)));
                        *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                        res.headers_mut().insert("content-type", "application/json".parse().unwrap());
                        Ok::<_, std::convert::Infallible>(res)
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
            });
        }
    });
    (url, seen)
}

/// As `both_listeners_full_leave_descriptors_for_the_rest`, with 150 http bots (15 strategies of 10) at one
/// keep-alive broker that answers their state reads in half a second. Each bot's sync read on its own
/// connection, all at once, and the pool kept each one open: with the reserve fixed at 160 descriptors, both
/// listeners held full ran the process out of them ("accept failed: Too many open files"), and an order needing
/// a new connection to its broker was not sent until it expired. Now the sync's reads share a few connections,
/// the pool keeps a few idle per host, and the reserve counts them: an alert answered during the attack reaches
/// the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_listeners_full_leave_descriptors_with_many_http_bots() {
    const STRATEGIES: usize = 15;
    const BOTS_EACH: usize = 10;
    raise_own_open_files();
    let (url, seen) = slow_reading_broker(Duration::from_millis(500)).await;
    let dirs = Dirs::new("attack-many-bots");
    let mut bots = serde_json::Map::new();
    let mut add = |id: String| {
        let bot = serde_json::json!({ "id": id, "broker": "alpaca", "account_id": "PA1",
                                      "sizing": { "fixed_quantity": "1" } });
        // Keys of its own: bots on one account are refused at load (each would read the whole account as its own).
        let headers = serde_json::json!({ "APCA-API-KEY-ID": { "value": format!("key-{id}") } });
        bots.insert(
            id,
            serde_json::json!({ "delivery": "http", "base_url": url, "timeout_ms": 5000, "headers": headers }),
        );
        bot
    };
    for s in 0..STRATEGIES {
        // Tokens are hex: 0-9 and a-e here, f for the live strategy.
        let mut v = snapshot(&format!("many-{s}"), &token(char::from_digit(s as u32, 16).unwrap()));
        v["bots"] = serde_json::Value::Array((0..BOTS_EACH).map(|b| add(format!("s{s}-b{b}"))).collect());
        dirs.write(&format!("many-{s}.json"), &v);
    }
    let mut live = snapshot("live", &token('f'));
    live["bots"] = serde_json::json!([add("live-bot".to_owned())]);
    dirs.write("live.json", &live);
    let bots_file = dirs.root.join("bots.json");
    std::fs::write(&bots_file, serde_json::Value::Object(bots).to_string()).unwrap();
    let server =
        Server::start_limited(&dirs, &["--bots", bots_file.to_str().unwrap()], Some((ADDRESS_SPACE, OPEN_FILES)));
    // Every bot's first sync read answered: the connections they used are open, idle, in the pool.
    let all = STRATEGIES * BOTS_EACH + 1;
    let deadline = Instant::now() + Duration::from_secs(20);
    while seen.reads.load(Ordering::SeqCst) < all && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(seen.reads.load(Ordering::SeqCst) >= all, "the first syncs did not all come: {}", server.stderr_text());
    let open = || std::fs::read_dir(format!("/proc/{}/fd", server.pid())).map(|d| d.count()).unwrap_or(0);
    let before = open();
    let client = server.client();
    // The legitimate sender's connection, made before the listener is full.
    let mut legit = client.connect_from(LEGIT).await.expect("the legitimate sender connects");
    let mut held = Vec::new();
    for _ in 0..200 {
        if let Ok(s) = tokio::net::TcpStream::connect(server.admin).await {
            held.push(s);
        }
    }
    for i in 0..(16 * 64) {
        if let Ok(s) = client.tcp_from(&format!("127.0.0.{}", 100 + i % 16)).await {
            held.push(s);
        }
    }
    held.extend(tokio::net::TcpStream::connect(server.admin).await);
    held.extend(client.tcp_from("127.0.0.200").await);
    let body = r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"during-the-attack"}}"#;
    let request = format!(
        "POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        token('f'),
        body.len()
    );
    send_raw(&mut legit, request.as_bytes()).await;
    let (status, answer) = server_support::read_raw_answer(&mut legit, Duration::from_secs(5)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("processed"), "{answer}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.orders() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let at_most = open();
    let log = server.stderr_text();
    drop(held);
    server.stop();
    println!(
        "many http bots: {before} descriptors open before the attack, {at_most} during it, of {OPEN_FILES}; \
         {} connections made to the broker, {} orders sent",
        seen.connections.load(Ordering::SeqCst),
        seen.orders()
    );
    assert!(!log.contains("Too many open files"), "the process ran out of descriptors ({at_most} open)");
    // At least once: an answer lost under load is looked up, and this broker's lookups find nothing.
    assert!(seen.orders() >= 1, "the order of the alert answered during the attack was not sent");
}

/// One broker hangs (it accepts connections and never answers a read: an outage behind a load balancer), with 48
/// bots at it reading every second under the default 10 s timeout; one bot at another, healthy broker delivers an
/// order. The read a delivery asks for (and the next periodic one) must not wait behind the hung broker's: with
/// the sync's reads sharing 16 slots among all brokers, each of the hung reads held one for 10 s, and the
/// healthy bot's account was read back only about 27 s after its order (87 s with 150 bots at the default
/// interval), so its CLOSE, MODIFY and CANCEL were decided on a state that old.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_broker_does_not_delay_another_brokers_state_reads() {
    let (hung, _) = slow_reading_broker(Duration::from_secs(3600)).await;
    let (healthy, seen) = slow_reading_broker(Duration::ZERO).await;
    let dirs = Dirs::new("attack-hung-broker");
    let mut bots = serde_json::Map::new();
    let mut add = |id: String, url: &str| {
        bots.insert(id.clone(), serde_json::json!({ "delivery": "http", "base_url": url, "sync_interval_secs": 1 }));
        serde_json::json!({ "id": id, "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } })
    };
    let mut many = snapshot("many", &token('a'));
    many["bots"] = serde_json::Value::Array((0..48).map(|b| add(format!("h{b}"), &hung)).collect());
    dirs.write("many.json", &many);
    let mut live = snapshot("live", &token('f'));
    live["bots"] = serde_json::json!([add("live-bot".to_owned(), &healthy)]);
    dirs.write("live.json", &live);
    let bots_file = dirs.root.join("bots.json");
    std::fs::write(&bots_file, serde_json::Value::Object(bots).to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots_file.to_str().unwrap()]);
    // Every bot's sync started, the hung broker's reads waiting for their answers.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let body = r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"hung-1"}}"#;
    let answer = server.post_from(LEGIT, &token('f'), body, Duration::from_secs(5)).await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while seen.orders() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sent = *seen.posts.lock().unwrap().first().expect("the order was sent (orders do not wait for sync reads)");
    // Past 5 s the answer is known: too late.
    let deadline = sent + Duration::from_secs(5);
    let read_after = loop {
        if let Some(t) = seen.gets.lock().unwrap().iter().copied().find(|t| *t > sent) {
            break Some(t - sent);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    server.stop();
    println!("healthy broker: order sent, its account read back after {read_after:?}");
    assert!(read_after.is_some(), "the healthy bot's account was not read back within 5 s of its order");
}
