//! Review of the shared-database mode (several servers on one PostgreSQL): defects found by the reviewer, each
//! test failing on the code it was written against.

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{Fault, Kind, Mock};
use server_support::postgres::Postgres;
use server_support::*;
use std::time::{Duration, Instant};

/// Data directories with the same strategy files, and the arguments that point them at `url`.
fn fleet(name: &str, n: usize, url: &str, snapshots: &[(&str, Value)], extra: &[&str]) -> (Vec<Dirs>, Vec<String>) {
    let dirs: Vec<Dirs> = (0..n).map(|i| Dirs::new(&format!("{name}{i}"))).collect();
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

/// The sender's CLOSE reaches server B 0.2 s after its OPEN reached server A, and B's clock is 0.5 s behind A's
/// (within the "well within a second" the deploy guide asks for). B decides the CLOSE after A stored the entry (its
/// batch takes the strategy's lock after A's committed: its log row's id is later), rejected since the entry has
/// not filled. The entry, retried on A while its broker turns writes away, must then not go out: the dispatcher's
/// `overtaken` check and the admin retry's `later_alert` look for later alerts by wall-clock time
/// (`logs.ts_ms >= outbox.created_ms`), two different servers' clocks, so the CLOSE stamped by B's clock reads as
/// earlier than the entry and the entry is sent after the CLOSE: a position the sender closed is opened.
///
/// The CLOSE's log rows are re-stamped as B's clock 0.5 s behind would have stamped them (0.3 s before the entry's
/// `created_ms`); everything else is as the servers wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_is_not_sent_after_a_close_decided_later_on_a_server_whose_clock_is_a_little_behind() {
    let pg = Postgres::start();
    let url = pg.create_database("overskew");
    let tradier = Mock::start(Kind::Tradier).await;
    tradier.require_headers(&[("Authorization", "Bearer tr-token")]);
    tradier.faults((0..1000).map(|_| Fault::Refuse(429, "too many requests")));
    let root = Dirs::new("overskewshared");
    let bots = root.root.join("bots.json");
    let tradier_token = root.root.join("tradier-token");
    std::fs::write(&tradier_token, "tr-token\n").unwrap();
    std::fs::write(
        &bots,
        json!({ "tradier": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 1000,
                             "auth": { "header": "Authorization", "prefix": "Bearer ",
                                       "file": tradier_token.to_str().unwrap() } } })
        .to_string(),
    )
    .unwrap();
    let mut s = snapshot("overskew", &token('7'));
    s["bots"] = json!([
        { "id": "tradier", "broker": "tradier", "account_id": "VA12345678", "sizing": { "fixed_quantity": "1" } },
    ]);
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"];
    let (dirs, args) = fleet("overskew", 2, &url, &[("overskew.json", s)], &extra);
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
    // B's clock 0.5 s behind A's: its CLOSE, received 0.2 s after the OPEN, is stamped 0.3 s before it. Decided
    // later all the same (its log rows' ids follow the entry's alert's).
    let restamped = pg.query(
        "overskew",
        "WITH e AS (SELECT created_ms, alert_log_id FROM outbox LIMIT 1)
         UPDATE logs SET ts_ms = (SELECT created_ms FROM e) - 300
         WHERE id > (SELECT alert_log_id FROM e) AND alerts <> '[]' AND alerts LIKE '%CLOSE%' RETURNING id",
    );
    assert!(!restamped.is_empty(), "the CLOSE's log rows: {:?}", pg.query("overskew", "SELECT id, alerts FROM logs"));
    tradier.clear_faults();
    let outbox = || pg.query("overskew", "SELECT status || ' ' || coalesce(result, '') FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "the entry was never settled: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let orders = tradier.orders();
    a.stop();
    b.stop();
    assert!(orders.is_empty(), "the entry went out after the CLOSE decided after it on B: {orders:?}; {:?}", outbox());
}

/// The admin retry's side of the same defect: an entry refused by its broker (failed) on server A, then the sender's
/// CLOSE decided on server B (rejected: nothing to close), whose clock is 0.5 s behind A's. A retry of the failed
/// entry must be refused ("a later alert of this strategy was received since"), as it is when both servers' clocks
/// agree: `later_alert` compares the CLOSE's `logs.ts_ms` (B's clock) with the entry's `created_ms` (A's clock), so
/// the retry is accepted and the entry is placed after the CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_of_a_failed_entry_is_refused_after_a_close_decided_on_a_server_whose_clock_is_a_little_behind() {
    let pg = Postgres::start();
    let url = pg.create_database("retryskew");
    let tradier = Mock::start(Kind::Alpaca).await;
    tradier.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
    tradier.faults((0..1).map(|_| Fault::Refuse(400, "buying power")));
    let root = Dirs::new("retryskewshared");
    let bots = root.root.join("bots.json");
    let tradier_token = root.root.join("tradier-token");
    std::fs::write(&tradier_token, "s3cret\n").unwrap();
    std::fs::write(
        &bots,
        json!({ "tradier": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 1000,
                             "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                          "APCA-API-SECRET-KEY": { "file": tradier_token.to_str().unwrap() } } } })
        .to_string(),
    )
    .unwrap();
    let mut s = snapshot("retryskew", &token('8'));
    s["bots"] = json!([
        { "id": "tradier", "broker": "alpaca", "account_id": Kind::Alpaca.account(), "sizing": { "fixed_quantity": "1" } },
    ]);
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"];
    let (dirs, args) = fleet("retryskew", 2, &url, &[("retryskew.json", s)], &extra);
    let (a, b) = (start(&dirs[0], &args), start(&dirs[1], &args));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let answer = a.post(&token('8'), Some("application/json"), &open).await;
    assert!(answer.status == 200 && answer.body.contains("processed"), "{}", answer.body);
    let outbox = || pg.query("retryskew", "SELECT id || ' ' || status FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !outbox().iter().any(|r| r.ends_with(" failed")) {
        assert!(Instant::now() < deadline, "the entry never failed: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let closed = b.post(&token('8'), Some("application/json"), &close).await;
    assert!(closed.status == 200 && closed.body.contains("rejected"), "{}", closed.body);
    let restamped = pg.query(
        "retryskew",
        "WITH e AS (SELECT created_ms, alert_log_id FROM outbox LIMIT 1)
         UPDATE logs SET ts_ms = (SELECT created_ms FROM e) - 300
         WHERE id > (SELECT alert_log_id FROM e) AND alerts <> '[]' AND alerts LIKE '%CLOSE%' RETURNING id",
    );
    assert!(!restamped.is_empty());
    let id = outbox()[0].split(' ').next().unwrap().to_owned();
    let path = format!("/api/strategies/retryskew/outbox/{id}/retry");
    let r = a.admin(hyper::Method::POST, &path, None, "", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let orders = tradier.orders();
    a.stop();
    b.stop();
    println!("retry answer: {} {}", r.status, r.body);
    assert_eq!(
        r.status, 409,
        "the retry of an entry the sender closed since was accepted: {}; orders {orders:?}",
        r.body
    );
}

/// Two servers whose clocks are 2 s apart: server A (ahead) stores a market order, and server B delivers it (B holds
/// the bot's lease: it is delivering the bot's earlier rows, or reading its account). B takes the row, stored 2 s
/// "ahead" of its clock, for one stored under a clock gone back (`stored_ahead`, `CLOCK_SLACK_MS` = 1 s) and expires
/// it unsent: the sender was answered `processed` and the order never goes out. Yet A's batch accepted the alert
/// knowing its clock was 2 s off the database's (the batch reads the database's time, and refuses only at 30 s):
/// every server whose clock is 1 to 30 s off the database's stores orders that its peers then expire.
///
/// Simulated on one machine: the bot's lease is held by a "peer" while A stores the row; the row is then stamped
/// as A's clock 2 s ahead would have stamped it (its `created_ms` and `deadline_ms` 2 s later), the peer gives the
/// lease back, and a second alert wakes the dispatcher, which delivers both rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_market_order_stored_by_a_server_2_s_ahead_is_sent_not_expired_by_its_peer() {
    let pg = Postgres::start();
    let url = pg.create_database("aheadrow");
    let mut v = snapshot("k", &token('5'));
    v["bots"] = json!([{ "id": "paper-1", "broker": "alpaca", "account_id": "PA1",
                         "sizing": { "fixed_quantity": "1" } }]);
    let (dirs, args) = fleet("aheadrow", 1, &url, &[("k.json", v)], &[]);
    let server = start(&dirs[0], &args);
    pg.query(
        "aheadrow",
        "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms)
         VALUES ('k', 'paper-1', 'peer', floor(extract(epoch FROM now()) * 1000)::BIGINT + 60000,
                 floor(extract(epoch FROM now()) * 1000)::BIGINT)",
    );
    let buy = |id: &str| json!({ "ticker": "AAPL", "action": "buy", "message_id": id }).to_string();
    let a = server.post(&token('5'), Some("application/json"), &buy("m1")).await;
    assert!(a.status == 200 && a.body.contains("processed"), "{}", a.body);
    // As a server 2 s ahead stamps it.
    pg.query(
        "aheadrow",
        "UPDATE outbox SET created_ms = created_ms + 2000, deadline_ms = deadline_ms + 2000 RETURNING id",
    );
    pg.query("aheadrow", "UPDATE bot_leases SET holder = NULL, expires_ms = 0 RETURNING 1");
    let b = server.post(&token('5'), Some("application/json"), &buy("m2")).await;
    assert!(b.status == 200 && b.body.contains("processed"), "{}", b.body);
    let rows =
        || pg.query("aheadrow", "SELECT id || ' ' || status || ' ' || coalesce(result, '') FROM outbox ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows().iter().any(|r| r.contains(" pending") || r.contains(" sending")) {
        assert!(Instant::now() < deadline, "never settled: {:?}", rows());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = rows();
    server.stop();
    assert!(rows[0].contains(" done "), "an order answered processed was never sent: {rows:?}");
}
