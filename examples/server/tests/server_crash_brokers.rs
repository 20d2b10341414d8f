//! Crash safety against the five broker mocks: the server is SIGKILLed at random points while senders push
//! distinct alerts (retrying those with no answer or a 5xx, hanging up early, or firing once), and about one
//! order write in ten misbehaves at the broker (the order taken and the answer lost, the connection cut before
//! the order is taken, the answer later than the bot's timeout). After the last restart and the outbox's
//! drain, every alert that has a row reached each of its bots' brokers exactly once — also at the three
//! brokers that do not refuse a reused client order id, and at Schwab, which keeps none and where the server
//! recognises its order by its terms (so each equity alert trades an instrument of its own) — and no row is
//! left `failed` (every row's order exists at its broker).

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{test_ec_key, Fault, Kind, Mock};
use server_support::*;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// The equity strategy, the crypto one (its one bot at Coinbase), and, when Tradier's bot has a strategy of
/// its own, that one.
const EQ: &str = "crasheq";
const CX: &str = "crashcx";
const TR: &str = "crashtr";
const ALERTS: usize = 320;
const SENDERS: usize = 4;
const KILLS: usize = 16;
const KINDS: [Kind; 5] = [Kind::Alpaca, Kind::Tradier, Kind::Schwab, Kind::Tastytrade, Kind::Coinbase];
/// A bot's timeout; a delayed answer comes later than this.
const TIMEOUT_MS: u64 = 800;
const SETTLE_MS: u64 = 200;

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

/// Every fifth alert goes to the crypto strategy.
fn crypto(i: usize) -> bool {
    i % 5 == 4
}

/// Alert `i`'s equity: one of its own (`QAAA`, `QAAB`, …), so that Schwab's lookup by terms finds one order.
fn equity(i: usize) -> String {
    let l = |n: usize| char::from(b'A' + (n % 26) as u8);
    format!("Q{}{}{}", l(i / 676), l(i / 26), l(i))
}

fn body(i: usize) -> String {
    let ticker = if crypto(i) { "BTC/USD".to_owned() } else { equity(i) };
    json!({ "ticker": ticker, "action": "buy", "message_id": format!("alert-{i}") }).to_string()
}

/// Alert `i`'s strategy and its token's letter. With `tradier_alone`, every fifth alert goes to a strategy
/// whose one bot is at Tradier, so that Tradier takes fewer orders than one page of its order list holds.
fn strategy(i: usize, tradier_alone: bool) -> (&'static str, char) {
    if crypto(i) {
        (CX, 'b')
    } else if tradier_alone && i % 5 == 3 {
        (TR, 'c')
    } else {
        (EQ, 'a')
    }
}

/// The brokers of a strategy's bots.
fn kinds_of(id: &str, tradier_alone: bool) -> Vec<Kind> {
    match id {
        CX => vec![Kind::Coinbase],
        TR => vec![Kind::Tradier],
        _ if tradier_alone => vec![Kind::Alpaca, Kind::Schwab, Kind::Tastytrade],
        _ => vec![Kind::Alpaca, Kind::Tradier, Kind::Schwab, Kind::Tastytrade],
    }
}

/// The dedup key of alert `i`: the hash of its `message_id`, so it is known here without asking the server.
fn dedup_key(i: usize) -> String {
    let mut h = Sha256::new();
    h.update(b"strategy-webhook message_id\0");
    h.update(format!("alert-{i}").as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The bots file entry for a bot at `mock`, with the broker's auth (its secrets written under `root`).
fn bot_entry(root: &std::path::Path, mock: &Mock, key_pem: Option<&str>) -> Value {
    let secret = |file: &str, value: &str| {
        let p = root.join(format!("{}-{file}", mock.kind.name()));
        std::fs::write(&p, format!("{value}\n")).unwrap();
        p
    };
    let base = mock.base_url();
    let mut v = match mock.kind {
        Kind::Alpaca => {
            mock.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
            json!({ "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                 "APCA-API-SECRET-KEY": { "file": secret("secret", "s3cret") } } })
        }
        Kind::Tradier => {
            mock.require_headers(&[("Authorization", "Bearer tr-token")]);
            json!({ "auth": { "header": "Authorization", "prefix": "Bearer ", "file": secret("token", "tr-token") } })
        }
        Kind::Schwab => {
            // Killed between a grant and writing a rotated token down, the server would hold a dead one; the
            // real refresh token lasts its seven days.
            mock.keep_refresh_token();
            json!({ "auth": { "type": "oauth2", "token_url": format!("{base}/v1/oauth/token"),
            "client_id": { "value": "app-key" }, "client_secret": { "file": secret("app-secret", "app-secret") },
            "refresh_token": { "file": secret("refresh", "refresh-0") } } })
        }
        Kind::Tastytrade => {
            mock.require_headers(&[("User-Agent", "strategy-webhook/0.1")]);
            json!({ "headers": { "User-Agent": { "value": "strategy-webhook/0.1" } },
                    "auth": { "type": "oauth2", "token_url": format!("{base}/oauth/token"), "client_auth": "body",
                              "body": "json", "client_secret": { "file": secret("app-secret", "app-secret") },
                              "refresh_token": { "file": secret("refresh", "refresh-0") } } })
        }
        Kind::Coinbase => {
            json!({ "auth": { "type": "jwt_es256", "key_name": { "value": "organizations/o1/apiKeys/k1" },
                      "private_key": { "file": secret("ec.pem", key_pem.unwrap()) } } })
        }
    };
    v["delivery"] = json!("http");
    v["base_url"] = json!(base);
    v["timeout_ms"] = json!(TIMEOUT_MS);
    // The mocks list an order as soon as they take it (before a lost or late answer), so a short settle finds
    // it; the default's wait for a broker that lists orders late is tested in server_brokers.
    v["settle_ms"] = json!(SETTLE_MS);
    v
}

/// Scripts faults on about one order write in ten at `mock`.
fn script_faults(mock: &Mock, rng: &mut Rng, writes: usize) -> usize {
    let mut n = 0;
    mock.faults((0..writes).map(|_| {
        if rng.below(10) != 0 {
            return Fault::Pass;
        }
        n += 1;
        match rng.below(3) {
            0 => Fault::Lose,
            1 => Fault::Cut,
            _ => Fault::Delay(Duration::from_millis(TIMEOUT_MS + 400)),
        }
    }));
    n
}

async fn outbox(server: &Server, id: &str) -> Vec<Value> {
    server.admin_get(&format!("/api/strategies/{id}/outbox?limit=10000")).await["outbox"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_at_random_points_with_broker_faults_every_alert_reaches_each_broker_exactly_once() {
    run(true).await;
}

/// The same with Tradier's bot among the equity bots, so that Tradier takes about 250 orders in the run:
/// more than one page (100) of the order list its lookup reads, so a lost answer is found on a later page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tradier_with_more_orders_than_one_lookup_page_reconciles_after_crashes() {
    run(false).await;
}

async fn run(tradier_alone: bool) {
    let seed = std::env::var("CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("seed {seed} (CRASH_SEED={seed} replays the kills and faults)");
    let mut rng = Rng(seed);
    let dirs = Dirs::new("crashbrk");

    let mut mocks: Vec<Mock> = Vec::new();
    for kind in KINDS {
        mocks.push(Mock::start(kind).await);
    }
    let mut faulted = 0;
    let mut bots = serde_json::Map::new();
    for m in &mocks {
        let key = (m.kind == Kind::Coinbase).then(|| {
            let (pem, public) = test_ec_key();
            m.require_jwt("organizations/o1/apiKeys/k1", public);
            pem
        });
        bots.insert(m.kind.name().to_owned(), bot_entry(&dirs.root, m, key.as_deref()));
        faulted += script_faults(m, &mut rng, ALERTS * 2);
    }
    let bots_file: PathBuf = dirs.root.join("bots.json");
    std::fs::write(&bots_file, Value::Object(bots).to_string()).unwrap();

    let mut ids = vec![EQ, CX];
    if tradier_alone {
        ids.push(TR);
    }
    for (id, letter) in [(EQ, 'a'), (TR, 'c')] {
        if !ids.contains(&id) {
            continue;
        }
        let mut eq = snapshot(id, &token(letter));
        eq["allowed_instruments"] = json!(["*"]);
        eq["bots"] = json!(kinds_of(id, tradier_alone)
            .iter()
            .map(|&k| json!({ "id": k.name(), "broker": k.name(), "account_id": k.account(),
                              "sizing": { "fixed_quantity": "1" } }))
            .collect::<Vec<_>>());
        dirs.write(&format!("{id}.json"), &eq);
    }
    let mut cx = snapshot(CX, &token('b'));
    cx["asset_class"] = json!("crypto");
    cx["duration"] = json!("gtc");
    cx["allowed_instruments"] = json!(["BTC/USD"]);
    cx["market"] = json!({ "quotes": { "BTC/USD": { "bid": "60000", "ask": "60010", "last": "60005" } } });
    cx["bots"] = json!([{ "id": "coinbase", "broker": "coinbase", "account_id": Kind::Coinbase.account(),
                          "sizing": { "fixed_quantity": "0.001" } }]);
    dirs.write("crashcx.json", &cx);
    // Nothing expires during the run: every alert is still fresh when the last restart delivers it.
    let args = ["--bots", bots_file.to_str().unwrap(), "--rate-limit", "1000000", "--market-order-ttl-secs", "600"];

    let server = Arc::new(RwLock::new(Arc::new(Server::start(&dirs, &args))));
    let next = Arc::new(AtomicUsize::new(0));
    let finished = Arc::new(AtomicUsize::new(0));
    let answers = Arc::new(Mutex::new(vec![(0u32, 0u32); ALERTS]));
    let started = Instant::now();
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
                let (b, tok) = (body(i), token(strategy(i, tradier_alone).1));
                match sender {
                    0 => {
                        let s = Arc::clone(&server.read().unwrap());
                        let hang_up = Duration::from_millis(1 + jitter.below(3));
                        let _ = s.post_and_hang_up(&tok, &b, hang_up).await;
                    }
                    1 => {
                        once.lock().unwrap()[i] = true;
                        let s = Arc::clone(&server.read().unwrap());
                        let heard = s.post_and_hang_up(&tok, &b, Duration::from_millis(1000)).await;
                        // Its answer is kept: an alert it heard processed must have reached the broker.
                        if heard.is_ok_and(|a| a.status == 200 && a.body.contains("\"processed\"")) {
                            answers.lock().unwrap()[i].0 += 1;
                        }
                        finished.fetch_add(1, Ordering::SeqCst);
                        // Slower than the others, so that it sends about a quarter of the alerts rather than
                        // burning through them while the server is down.
                        tokio::time::sleep(Duration::from_millis(30 + jitter.below(40))).await;
                        continue;
                    }
                    _ => {}
                }
                match post_until_answered(&server, &tok, &b, started, Duration::from_secs(120)).await {
                    Heard::Processed => answers.lock().unwrap()[i].0 += 1,
                    Heard::Duplicate => answers.lock().unwrap()[i].1 += 1,
                }
                finished.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }

    let mut kills = 0;
    let mut threshold = 0;
    while kills < KILLS {
        threshold += 5 + rng.below(ALERTS as u64 / KILLS as u64) as usize;
        while finished.load(Ordering::SeqCst) < threshold.min(ALERTS - 1) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        kill_and_restart(&server, &dirs, &args, Duration::from_millis(rng.below(50))).await;
        kills += 1;
    }
    for s in senders {
        s.await.unwrap();
    }

    // Drain: no row of either strategy left to send, none failed.
    let server = Arc::clone(&server.read().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let rows = loop {
        let mut rows = Vec::new();
        for id in &ids {
            rows.extend(outbox(&server, id).await);
        }
        let open = rows.iter().filter(|r| r["status"] == "pending" || r["status"] == "sending").count();
        if open == 0 {
            break rows;
        }
        assert!(Instant::now() < deadline, "the outbox did not drain: {open} open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let failed: Vec<&Value> = rows.iter().filter(|r| r["status"] != "done").collect();
    assert!(failed.is_empty(), "seed {seed}: rows not done: {failed:#?}");

    // Each row's alert, found through its client order id (derived from the dedup key and the claim time, stored
    // with the key: the row's `created_ms` is the alert's arrival, which may come before its decision).
    let keys: Vec<String> = (0..ALERTS).map(dedup_key).collect();
    let claimed: HashMap<(String, String), i64> = {
        let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
        let mut q = db.prepare("SELECT strategy, key, ts_ms FROM dedup_keys").unwrap();
        let rows = q.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?))).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let mut rows_of: HashMap<(usize, String), Vec<String>> = HashMap::new();
    for r in &rows {
        let (bot, coid) = (r["bot"].as_str().unwrap(), r["client_order_id"].as_str().unwrap());
        let i = (0..ALERTS)
            .find(|&i| {
                let s = strategy(i, tradier_alone).0;
                claimed
                    .get(&(s.to_owned(), keys[i].clone()))
                    .is_some_and(|&at| strategy_webhook::builder::client_order_id(s, &keys[i], at, bot, 0) == coid)
            })
            .unwrap_or_else(|| panic!("outbox row {r} belongs to no alert"));
        rows_of.entry((i, bot.to_owned())).or_default().push(coid.to_owned());
    }

    let answers = answers.lock().unwrap().clone();
    let once = once.lock().unwrap().clone();
    let orders: Vec<Vec<_>> = mocks.iter().map(Mock::orders).collect();
    let mut expected = vec![0usize; mocks.len()];
    for (i, (p, _)) in answers.iter().enumerate() {
        for (m, mock) in mocks.iter().enumerate() {
            if !kinds_of(strategy(i, tradier_alone).0, tradier_alone).contains(&mock.kind) {
                continue;
            }
            let bot = mock.kind.name();
            let coids = rows_of.get(&(i, bot.to_owned())).cloned().unwrap_or_default();
            // A fire-once alert may have died with a killed server before it was decided.
            if once[i] && coids.is_empty() {
                assert_eq!(*p, 0, "alert {i} was answered processed to its fire-once sender, yet has no row for {bot}");
                continue;
            }
            assert_eq!(coids.len(), 1, "seed {seed}: alert {i} has {} outbox rows for {bot}", coids.len());
            expected[m] += 1;
            // Equity orders are told apart by their instrument (Schwab keeps no client order id), crypto ones
            // by the client order id the broker keeps.
            let at_broker = orders[m]
                .iter()
                .filter(|o| if crypto(i) { o.client_id == coids[0] } else { o.symbol == equity(i) })
                .count();
            assert_eq!(
                at_broker,
                1,
                "seed {seed}: alert {i} (answered processed: {}) reached {bot} {at_broker} times",
                *p > 0
            );
        }
    }
    for (m, mock) in mocks.iter().enumerate() {
        assert_eq!(orders[m].len(), expected[m], "seed {seed}: {} took an order no alert asked for", mock.kind.name());
    }
    // Order writes the brokers dropped (taken and the answer lost, or cut before being taken).
    let dropped: Vec<usize> =
        mocks.iter().map(|m| m.seen().iter().filter(|r| r.method == "POST" && r.status == 0).count()).collect();
    assert!(dropped.iter().sum::<usize>() > 0, "seed {seed}: no fault reached a broker");
    let processed = answers.iter().filter(|a| a.0 > 0).count();
    println!(
        "{ALERTS} alerts ({} fired once), {kills} kills, {processed} answered processed, {faulted} faults scripted, \
         writes dropped per broker {dropped:?}, orders per broker {:?}, {:?}",
        once.iter().filter(|&&o| o).count(),
        expected,
        started.elapsed()
    );
    drop(server);
}
