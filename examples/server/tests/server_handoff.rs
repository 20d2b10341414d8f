//! The hand-off whatever the sender does (issue 14): a sender that hangs up does not strand its committed
//! orders, a retry that arrives while the first attempt is still being committed waits for that commit, and a
//! request older than its deadline is never sent.

mod server_support;

use serde_json::{json, Value};
use server_support::mock_broker::{Behave, MockBroker};
use server_support::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ID: &str = "handoff";

fn one_bot(dirs: &Dirs, broker: &str) {
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!([{ "id": "b", "broker": broker, "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("live.json", &v);
}

async fn outbox(server: &Server) -> Vec<Value> {
    server.admin_get(&format!("/api/strategies/{ID}/outbox?limit=1000")).await["outbox"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Waits until every outbox row is finished (or the time is up) and returns them.
async fn finished(server: &Server, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    loop {
        let rows = outbox(server).await;
        if !rows.is_empty() && rows.iter().all(|r| r["status"] != "pending" && r["status"] != "sending") {
            return rows;
        }
        assert!(Instant::now() < deadline, "the outbox did not finish: {rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A data directory whose strategy has one Tradier bot `t` on account TR1, delivered to `broker`: the directory,
/// the strategy's snapshot (to edit and write back as `live.json`) and the bots file.
fn tradier_bot(name: &str, broker: &MockBroker) -> (Dirs, Value, PathBuf) {
    let dirs = Dirs::new(name);
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!([{ "id": "t", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("live.json", &v);
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "t": { "delivery": "http", "base_url": broker.base_url() } }).to_string()).unwrap();
    (dirs, v, bots)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_during_the_first_commit_is_answered_after_it() {
    let dirs = Dirs::new("handoff-held");
    one_bot(&dirs, "alpaca");
    let server = Arc::new(Server::start(&dirs, &["--test-commit-delay-ms", "1500"]));
    let body = r#"{"ticker":"AAPL","action":"buy","message_id":"held-1"}"#;

    let started = Instant::now();
    let first = {
        let s = Arc::clone(&server);
        tokio::spawn(async move { (s.post(&token('a'), Some("application/json"), body).await, started.elapsed()) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = server.post(&token('a'), Some("application/json"), body).await;
    let retry_at = started.elapsed();
    let (first, first_at) = first.await.unwrap();
    assert_eq!((first.status, first.json()), (200, json!({ "status": "processed" })));
    assert_eq!((retry.status, retry.json()), (200, json!({ "status": "duplicate" })));
    // Without the wait the retry would have been answered at once, 1.2 s before the first commit.
    assert!(retry_at >= Duration::from_millis(1400), "the retry was answered after {retry_at:?}");
    assert!(retry_at + Duration::from_millis(100) >= first_at, "retry {retry_at:?}, first {first_at:?}");
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    Arc::try_unwrap(server).ok().unwrap().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_during_a_commit_that_fails_is_processed_not_duplicate() {
    let dirs = Dirs::new("handoff-released");
    one_bot(&dirs, "alpaca");
    // Three a minute: the two POSTs below take two, and a third alert still fits.
    let server = Arc::new(Server::start(&dirs, &["--test-commit-delay-ms", "1500", "--rate-limit", "3"]));
    // The first attempt's commit fails, as a full disk would.
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute_batch(
        "CREATE TRIGGER fail_commit BEFORE INSERT ON dedup_keys BEGIN SELECT RAISE(ABORT, 'simulated failure'); END;",
    )
    .unwrap();
    let body = r#"{"ticker":"AAPL","action":"buy","message_id":"released-1"}"#;

    let first = {
        let s = Arc::clone(&server);
        tokio::spawn(async move { s.post(&token('a'), Some("application/json"), body).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let retry = {
        let s = Arc::clone(&server);
        tokio::spawn(async move { s.post(&token('a'), Some("application/json"), body).await })
    };
    // The disk comes back after the first commit failed (at 1.5 s) and before the retry's own (at 3 s).
    tokio::time::sleep(Duration::from_millis(1900)).await;
    db.execute_batch("DROP TRIGGER fail_commit").unwrap();
    let (first, retry) = (first.await.unwrap(), retry.await.unwrap());
    assert_eq!(first.status, 500, "{}", first.body);
    assert_eq!(first.json()["code"], "store_failed");
    // Never "duplicate" for an alert whose first attempt was released: the retry is the one processed.
    assert_eq!((retry.status, retry.json()), (200, json!({ "status": "processed" })));
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "done");
    // The retry was decided twice (a duplicate while the first commit ran, then afresh) and counted once: a
    // third alert is the window's third, not its fourth.
    let third = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(third.status, 200, "{}", third.body);
    Arc::try_unwrap(server).ok().unwrap().stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sender_that_hangs_up_still_gets_its_order_sent_at_once() {
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("handoff-hangup");
    one_bot(&dirs, "alpaca");
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "b": { "delivery": "http", "base_url": broker.base_url() } }).to_string()).unwrap();
    // A slow commit, so that the sender is surely gone before it ends. The outbox sweep, which would send a row
    // whose wake-up was lost within its second, is made a minute: the order must go out on its own wake-up.
    let args = ["--bots", bots.to_str().unwrap(), "--test-commit-delay-ms", "300", "--test-sweep-ms", "60000"];
    let server = Server::start(&dirs, &args);
    let body = r#"{"ticker":"AAPL","action":"buy","message_id":"gone-1"}"#;
    let sent = Instant::now();
    let hung_up = server.try_post(&token('a'), body, Duration::from_millis(50)).await;
    assert!(hung_up.is_err(), "the sender left before the answer: {hung_up:?}");
    // No other alert follows: the order goes out at once after the 300 ms commit, on its own wake-up (a market
    // order waiting for a sweep would be late, and filled a move away). The margin is for a loaded machine (a CI
    // run with both cores busy took over 3 s); the sweep is a minute away, so a lost wake-up still fails.
    let deadline = sent + Duration::from_secs(10);
    while broker.accepted().is_empty() {
        assert!(Instant::now() < deadline, "the order of a hung-up sender was not sent at once");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rows = finished(&server, Duration::from_secs(5)).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["status"], "done");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_down_past_the_deadline_gets_no_stale_market_order() {
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("handoff-fresh");
    one_bot(&dirs, "alpaca");
    let bots = dirs.root.join("bots.json");
    let conf = json!({ "b": { "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 500 } });
    std::fs::write(&bots, conf.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "2"]);

    broker.stop();
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    // Down for longer than the deadline, then back.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    broker.restart().await;
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert_eq!(rows[0]["status"], "expired", "{rows:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(broker.received().is_empty(), "a stale market order reached the broker: {:?}", broker.received());
    let logs = server.logs(ID).await;
    assert!(
        logs.iter().any(|l| {
            let m = l["message"].as_str().unwrap_or_default();
            l["level"] == "ERROR" && m.contains("s old, past its deadline of 2.0 s") && m.contains("not sent")
        }),
        "{logs:?}"
    );

    // A new alert, with the broker up, is sent as usual.
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    let deadline = Instant::now() + Duration::from_secs(5);
    while broker.accepted().len() != 1 {
        assert!(Instant::now() < deadline, "the fresh order was not sent");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_to_one_broker_reuse_one_connection() {
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("handoff-pool");
    one_bot(&dirs, "alpaca");
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "b": { "delivery": "http", "base_url": broker.base_url() } }).to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    for i in 0..5 {
        let body = json!({ "ticker": "AAPL", "action": "buy", "message_id": format!("pool-{i}") }).to_string();
        let a = server.post(&token('a'), Some("application/json"), &body).await;
        assert_eq!(a.json(), json!({ "status": "processed" }));
        let deadline = Instant::now() + Duration::from_secs(5);
        while broker.accepted().len() != i + 1 {
            assert!(Instant::now() < deadline, "order {i} was not sent");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert_eq!(broker.received().len(), 5);
    // The state sync's reads of the account share the pool: one in flight while an order goes out takes a
    // second connection. Without the pool every order (and every read) would make its own: five or more.
    let connections = broker.connections();
    assert!((1..=2).contains(&connections), "orders go on kept-alive connections: {connections} for 5 orders");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_cut_by_a_crash_is_looked_up_at_the_next_start() {
    use server_support::mock_broker::Behave;
    let broker = MockBroker::start().await;
    let (dirs, _, bots) = tradier_bot("handoff-sending", &broker);
    let args = ["--bots", bots.to_str().unwrap()];
    let kill = |s: &Server| {
        std::process::Command::new("kill").args(["-KILL", &s.pid().to_string()]).status().unwrap();
    };
    let wait_for = |n: usize| {
        let broker = broker.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while broker.received().len() < n {
                assert!(Instant::now() < deadline, "the broker got {:?}", broker.received());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let methods = || broker.received().iter().map(|r| r.method.clone()).collect::<Vec<_>>();

    // The broker takes the order, and the server is killed before the answer: at the next start the row is
    // `sending`, the order is found by its tag, and it is done, not sent again.
    broker.script([Behave::Slow(Duration::from_secs(5))]);
    let server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    wait_for(1).await;
    kill(&server);
    drop(server);
    let server = Server::start(&dirs, &args);
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert_eq!(rows[0]["status"], "done", "{rows:?}");
    assert!(rows[0]["result"].as_str().unwrap().contains("found at the broker"), "{rows:?}");
    assert_eq!(methods(), ["POST", "GET"]);
    assert_eq!(broker.accepted().len(), 1);

    // The broker never took it: the lookup finds nothing, and a second one a settle later neither (a broker
    // still working on the request would list it by then), so it is sent again, once.
    broker.script([Behave::Stall(Duration::from_secs(5))]);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    wait_for(3).await;
    kill(&server);
    drop(server);
    let server = Server::start(&dirs, &args);
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.accepted().len() < 2 {
        assert!(Instant::now() < deadline, "the order was not sent again: {:?}", methods());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert!(rows.iter().all(|r| r["status"] == "done"), "{rows:?}");
    assert_eq!(methods(), ["POST", "GET", "POST", "GET", "GET", "POST"]);
    assert_eq!(broker.accepted().len(), 2);
    server.stop();
}

/// A row left `sending` by a crash, and the strategy's `account_id` edited before the restart: the lookup searched
/// the new account, found nothing, and the row was sent again to the old account (its stored path), where the
/// first order stood. A row whose request names another account than its bot's now fails unsent instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_of_an_account_edited_away_while_it_was_open_is_not_sent_again() {
    use server_support::mock_broker::Behave;
    let broker = MockBroker::start().await;
    let (dirs, mut v, bots) = tradier_bot("handoff-account", &broker);
    let args = ["--bots", bots.to_str().unwrap()];
    // The broker takes the order, and the server is killed before the answer.
    broker.script([Behave::Slow(Duration::from_secs(5))]);
    let server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.received().is_empty() {
        assert!(Instant::now() < deadline, "the order was never sent");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::process::Command::new("kill").args(["-KILL", &server.pid().to_string()]).status().unwrap();
    drop(server);
    v["bots"][0]["account_id"] = json!("TR2");
    dirs.write("live.json", &v);
    let server = Server::start(&dirs, &args);
    let rows = finished(&server, Duration::from_secs(10)).await;
    assert_eq!(rows[0]["status"], "failed", "{rows:?}");
    let why = rows[0]["result"].as_str().unwrap();
    assert!(why.contains("account_id has changed") && why.contains("/v1/accounts/TR1/orders"), "{why}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let got: Vec<(String, String)> = broker.received().iter().map(|r| (r.method.clone(), r.path.clone())).collect();
    assert_eq!(got, [("POST".to_owned(), "/v1/accounts/TR1/orders".to_owned())], "one order, nothing more");
    assert_eq!(broker.accepted().len(), 1);
    server.stop();
}

/// The account check ran once, before the first attempt: an `account_id` edited while a row backed off (the broker
/// answering 429) let the next attempt trade the old account. It is made before every attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_edited_while_a_row_backs_off_stops_the_row() {
    use server_support::mock_broker::Behave;
    let broker = MockBroker::start().await;
    let (dirs, mut v, bots) = tradier_bot("handoff-account-retry", &broker);
    // Turned away for a while: the row backs off (0.2 s doubling to 5 s) and tries again.
    broker.script((0..8).map(|_| Behave::Status(429, r#"{"errors":{"error":"Rate limit exceeded"}}"#)));
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"]);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.received().len() < 2 {
        assert!(Instant::now() < deadline, "the order was not tried: {:?}", broker.received());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    v["bots"][0]["account_id"] = json!("TR2");
    dirs.write("live.json", &v);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.stderr_text().contains("strategy reloaded") {
        assert!(Instant::now() < deadline, "the edit was not reloaded: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = finished(&server, Duration::from_secs(30)).await;
    assert_eq!(rows[0]["status"], "failed", "{rows:?}");
    assert!(rows[0]["result"].as_str().unwrap().contains("account_id has changed"), "{rows:?}");
    assert!(broker.accepted().is_empty(), "nothing taken at either account: {:?}", broker.received());
    server.stop();
}

/// An order whose answer was lost, its strategy's `account_id` edited (and reloaded) during the settle before its
/// lookup: the lookup searched the new account, found nothing, and the row failed saying nothing was sent while the
/// order stood at the old account (sent again by hand, a second position). It fails as unknown, naming both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_edit_during_the_lookup_of_an_uncertain_order_leaves_it_unknown() {
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("handoff-account-lookup");
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!([{ "id": "t", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("live.json", &v);
    let bots = dirs.root.join("bots.json");
    let file = json!({ "t": { "delivery": "http", "base_url": broker.base_url(), "settle_ms": 3000 } });
    std::fs::write(&bots, file.to_string()).unwrap();
    broker.script([Behave::TakeThenDrop]);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--reload-interval-ms", "100"]);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.json(), json!({ "status": "processed" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.accepted().is_empty() {
        assert!(Instant::now() < deadline, "the order was never taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    v["bots"][0]["account_id"] = json!("TR2");
    dirs.write("live.json", &v);
    let rows = finished(&server, Duration::from_secs(30)).await;
    assert_eq!(broker.accepted().len(), 1, "the order stands at TR1");
    let why = rows[0]["result"].as_str().unwrap_or_default();
    assert!(!why.contains("nothing was sent,"), "the row says nothing was sent while the order stands at TR1: {why}");
    assert!(why.contains("may have reached the old account"), "{why}");
    let searched_new = broker.received().iter().any(|r| r.path.contains("/TR2/"));
    assert!(!searched_new, "the new account was searched for the old account's order");
    server.stop();
}
