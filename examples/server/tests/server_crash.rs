//! Crash safety of the durable hand-off: the server is killed with SIGKILL at random points while senders
//! push a stream of distinct alerts and retry every one that got no answer or a 5xx. After the last restart
//! and the outbox's drain, every alert that was answered 200 `processed` reached the (Alpaca-like) mock
//! broker exactly once, every other alert too (its commit happened, only the answer was lost), and no order
//! was taken twice.
//!
//! One sender hangs up 1–3 ms into every first attempt and then retries (hyper drops its handler while the
//! hand-off may be running); another fires each alert once and never retries (its alert may or may not have
//! been processed, but if it was, its order reached the broker once and nothing was left pending).

mod server_support;

use serde_json::json;
use server_support::mock_broker::MockBroker;
use server_support::*;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

const ID: &str = "crash";
const ALERTS: usize = 240;
const SENDERS: usize = 4;
const KILLS: usize = 12;
const BOTS: [&str; 2] = ["alp-1", "alp-2"];

/// A small deterministic generator (xorshift), seeded from the clock and printed so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn body(i: usize) -> String {
    json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("alert-{i}") }).to_string()
}

/// The dedup key of alert `i`: the hash of its `message_id`, so it is known here without asking the server.
fn dedup_key(i: usize) -> String {
    let mut h = Sha256::new();
    h.update(b"strategy-webhook message_id\0");
    h.update(format!("alert-{i}").as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Which alert an outbox row belongs to: the core derives the client order id from the alert's dedup key
/// and the moment the key was claimed (`claimed`, by key), so each row names exactly one alert.
fn alert_of(keys: &[String], claimed: &HashMap<String, i64>, bot: &str, client_order_id: &str) -> Option<usize> {
    keys.iter().position(|k| {
        claimed
            .get(k)
            .is_some_and(|&at| strategy_webhook::builder::client_order_id(ID, k, at, bot, 0) == client_order_id)
    })
}

/// When each stored dedup key was claimed, by key. Not the rows' `created_ms`: that is the alert's arrival,
/// which may come before its decision.
fn claim_times(dirs: &Dirs) -> HashMap<String, i64> {
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    let mut q = db.prepare("SELECT key, ts_ms FROM dedup_keys WHERE strategy = ?1").unwrap();
    let rows = q.query_map([ID], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_every_processed_alert_reaches_the_broker_exactly_once() {
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    println!("seed {seed}");
    let mut rng = Rng(seed);
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("crash");
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!(BOTS
        .iter()
        .map(|b| json!({ "id": b, "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }))
        .collect::<Vec<_>>());
    dirs.write("crash.json", &v);
    let bots: serde_json::Map<_, _> = BOTS
        .iter()
        .map(|b| {
            // Keys of its own: two bots on one account are refused at load (each would read it all as its own).
            let headers = json!({ "APCA-API-KEY-ID": { "value": format!("key-{b}") } });
            let entry =
                json!({ "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 2000, "headers": headers });
            (b.to_string(), entry)
        })
        .collect();
    let bots_file = dirs.root.join("bots.json");
    std::fs::write(&bots_file, serde_json::Value::Object(bots).to_string()).unwrap();
    let args = ["--bots", bots_file.to_str().unwrap(), "--rate-limit", "1000000"];

    let server = Arc::new(RwLock::new(Arc::new(Server::start(&dirs, &args))));
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    // Per alert: how many times it was answered processed, and duplicate.
    let answers = Arc::new(Mutex::new(vec![(0u32, 0u32); ALERTS]));
    let started = Instant::now();

    // Alerts sent once and never retried: whether they were processed is not known to the sender.
    let once = Arc::new(Mutex::new(vec![false; ALERTS]));
    let mut senders = Vec::new();
    for sender in 0..SENDERS {
        let (server, next, finished, answers, once) =
            (Arc::clone(&server), Arc::clone(&next), Arc::clone(&finished), Arc::clone(&answers), Arc::clone(&once));
        let mut jitter = Rng(seed.rotate_left(sender as u32 * 8) | 1);
        senders.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= ALERTS {
                    return;
                }
                let b = body(i);
                match sender {
                    // Hangs up 1–3 ms in, then retries like the others.
                    0 => {
                        let s = Arc::clone(&server.read().unwrap());
                        let hang_up = Duration::from_millis(1 + jitter.below(3));
                        let _ = s.post_and_hang_up(&token('a'), &b, hang_up).await;
                    }
                    // Fires once and never retries.
                    1 => {
                        once.lock().unwrap()[i] = true;
                        let s = Arc::clone(&server.read().unwrap());
                        let heard = s.post_and_hang_up(&token('a'), &b, Duration::from_millis(1000)).await;
                        // Its answer is kept: an alert it heard processed must have reached the broker.
                        if heard.is_ok_and(|a| a.status == 200 && a.body.contains("\"processed\"")) {
                            answers.lock().unwrap()[i].0 += 1;
                        }
                        finished.fetch_add(1, Ordering::SeqCst);
                        // At the pace of the others, so that it sends about a quarter of the alerts.
                        tokio::time::sleep(Duration::from_millis(5 + jitter.below(10))).await;
                        continue;
                    }
                    _ => {}
                }
                match post_until_answered(&server, &token('a'), &b, started, Duration::from_secs(90)).await {
                    Heard::Processed => answers.lock().unwrap()[i].0 += 1,
                    Heard::Duplicate => answers.lock().unwrap()[i].1 += 1,
                }
                finished.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }

    // Kill at random points of the stream: after a random number of finished alerts plus a random delay, so
    // that kills land before, during and after commits, answers and deliveries.
    let mut kills = 0;
    let mut threshold = 0;
    while kills < KILLS {
        threshold += 5 + rng.below(ALERTS as u64 / KILLS as u64) as usize;
        while finished.load(Ordering::SeqCst) < threshold.min(ALERTS - 1) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(40))).await;
        kill_and_restart(&server, &dirs, &args, Duration::from_millis(rng.below(50))).await;
        kills += 1;
    }
    for s in senders {
        s.await.unwrap();
    }

    // Drain: every outbox row delivered.
    let server = Arc::clone(&server.read().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let rows = server.admin_get(&format!("/api/strategies/{ID}/outbox?limit=10000")).await["outbox"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let open = rows.iter().filter(|r| r["status"] == "pending" || r["status"] == "sending").count();
        let failed: Vec<_> = rows
            .iter()
            .filter(|r| r["status"] != "pending" && r["status"] != "sending" && r["status"] != "done")
            .collect();
        assert!(failed.is_empty(), "failed deliveries: {failed:?}");
        if open == 0 {
            break rows;
        }
        assert!(Instant::now() < deadline, "the outbox did not drain: {open} open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    let accepted = broker.accepted();
    let answers = answers.lock().unwrap().clone();
    let processed = answers.iter().filter(|a| a.0 > 0).count();
    // Each alert's row per bot, found through its client order id.
    let keys: Vec<String> = (0..ALERTS).map(dedup_key).collect();
    let claimed = claim_times(&dirs);
    let mut ids: HashMap<(usize, String), Vec<String>> = HashMap::new();
    for r in &rows {
        let (bot, coid) = (r["bot"].as_str().unwrap(), r["client_order_id"].as_str().unwrap());
        let i = alert_of(&keys, &claimed, bot, coid).unwrap_or_else(|| panic!("outbox row {r} belongs to no alert"));
        ids.entry((i, bot.to_owned())).or_default().push(coid.to_owned());
    }
    let once = once.lock().unwrap().clone();
    let mut orders = 0;
    for (i, (p, _)) in answers.iter().enumerate() {
        for bot in BOTS {
            let coids = ids.get(&(i, bot.to_string())).cloned().unwrap_or_default();
            // One row per alert and bot: nothing committed twice, nothing lost (a fire-once alert may have
            // been lost with a killed server before it was decided).
            if once[i] && coids.is_empty() {
                assert_eq!(*p, 0, "alert {i} was answered processed to its fire-once sender, yet has no row for {bot}");
                continue;
            }
            assert_eq!(coids.len(), 1, "alert {i} has {} outbox rows for {bot}", coids.len());
            orders += 1;
            let n = accepted.get(&coids[0]).copied().unwrap_or(0);
            assert_eq!(n, 1, "alert {i} (answered processed: {}) reached the broker for {bot} {n} times", *p > 0);
        }
    }
    assert_eq!(rows.len(), orders, "an outbox row belongs to no alert");
    assert_eq!(accepted.len(), orders, "the broker took an order no alert asked for");
    let fired_once = once.iter().filter(|&&o| o).count();
    assert!(fired_once > 0 && fired_once < ALERTS);
    let received = broker.received().len();
    println!(
        "{ALERTS} alerts ({fired_once} fired once), {kills} kills, {processed} answered processed, {} others, \
         {received} requests at the broker for {} orders, {:?}",
        ALERTS - processed,
        accepted.len(),
        started.elapsed()
    );
    drop(server);
}
