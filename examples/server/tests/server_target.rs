//! Each outbox row is sent only where it was stored to go. A row records its bot's delivery target when the
//! alert is stored (`paper`, or the http bot's base URL); when the bots file says otherwise at delivery (the bot
//! removed or misspelled, so paper; added as an http bot; its `base_url` moved to another endpoint), the row is
//! neither sent nor filled: it ends `failed` with an ERROR row naming both targets. Rows of an older version,
//! which recorded no target, are delivered as configured, as they always were.
//!
//! Rows are kept pending across a restart the way they are in production: the bot's broker is down (connections
//! refused), or the paper fill's record cannot be committed (a full disk, played by a trigger) when the process
//! dies.

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::Kind;
use server_support::mock_broker::MockBroker;
use server_support::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const ID: &str = "tg";
const BOT: &str = "b1";

/// A strategy whose one bot trades 10 shares at a broker that refuses a repeated client order id (so that its
/// rows stay `pending`, never `sending`, while the broker is down), and the path of its bots file.
fn setup(name: &str) -> (Dirs, PathBuf) {
    let dirs = Dirs::new(name);
    let mut v = snapshot(ID, &token('c'));
    v["allowed_instruments"] = json!(["*"]);
    v["bots"] = json!([{ "id": BOT, "broker": Kind::Alpaca.name(), "account_id": Kind::Alpaca.account(),
                          "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("tg.json", &v);
    let bots = dirs.root.join("bots.json");
    (dirs, bots)
}

/// Writes the bots file: the bot on `base_url`, or not listed (paper) when `None`.
fn bots_file(path: &Path, base_url: Option<&str>) {
    let v = match base_url {
        Some(url) => json!({ BOT: { "delivery": "http", "base_url": url, "timeout_ms": 300 } }),
        None => json!({}),
    };
    std::fs::write(path, v.to_string()).unwrap();
}

fn start(dirs: &Dirs, bots: &Path) -> Server {
    Server::start(dirs, &["--bots", bots.to_str().unwrap()])
}

async fn outbox(server: &Server) -> Vec<Value> {
    server.admin_get(&format!("/api/strategies/{ID}/outbox?limit=100")).await["outbox"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The strategy's one outbox row once it is finished.
async fn finished(server: &Server) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = outbox(server).await;
        if rows.len() == 1 && rows[0]["status"] != "pending" && rows[0]["status"] != "sending" {
            return rows[0].clone();
        }
        assert!(Instant::now() < deadline, "the row was not finished: {rows:?}\n{}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Posts the alert, which is stored (200 processed) with one row for the bot.
async fn post(server: &Server) {
    let a =
        server.post(&token('c'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy","price":190.10}"#).await;
    assert_eq!((a.status, a.json()), (200, json!({ "status": "processed" })), "{}", a.body);
}

/// The row is still to send: its broker is down.
async fn pending(server: &Server) -> Value {
    let rows = outbox(server).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "pending", "{rows:?}");
    rows[0].clone()
}

async fn positions(server: &Server) -> Value {
    server.admin_get(&format!("/api/strategies/{ID}/bots/{BOT}/state")).await["positions"].clone()
}

/// The strategy's ERROR rows.
async fn errors(server: &Server) -> Vec<String> {
    let logs = server.logs(ID).await;
    logs.iter()
        .filter(|l| l["level"] == "ERROR")
        .map(|l| l["message"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Stored for a broker (down, so the row waits), then the bot is taken out of the bots file and the server
/// restarted: the bot is paper now, but the row is not "filled" on paper (the trader would be told of a fill
/// that never happened at the broker), nor sent anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stored_for_a_broker_is_not_filled_on_paper_after_the_bot_left_the_bots_file() {
    let broker = MockBroker::start().await;
    broker.stop();
    let (dirs, bots) = setup("target-http-paper");
    bots_file(&bots, Some(&broker.base_url()));
    let mut server = start(&dirs, &bots);
    post(&server).await;
    let stored_for = format!("http://{}", broker.addr);
    assert_eq!(pending(&server).await["target"], stored_for, "the row shows where it was stored to go");
    let page = format!("/strategies/{ID}?token={}", server.admin_token);
    let page = server.admin(hyper::Method::GET, &page, None, "", false).await;
    assert!(page.body.contains(&format!(", to {stored_for}</span>")), "the console shows it too: {}", page.body);
    server.kill();

    broker.restart().await;
    bots_file(&bots, None);
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "failed", "{row}");
    // Rows at this broker are never marked `sending` (it refuses a repeated id): the earlier run's attempts may
    // have reached it, for all the server can tell, and the trader is told so.
    let want = format!(
        "order for bot {BOT} not sent: it was stored for delivery to {stored_for} and this server now delivers bot \
         {BOT} on paper (the bots file has changed since, or differs between servers); nothing was sent or filled \
         now, but an earlier attempt (before the server stopped, or before the row was queued again) may have \
         reached {stored_for}: check the position there"
    );
    assert_eq!(row["result"], want);
    assert_eq!(errors(&server).await, [want], "one ERROR row, naming both targets");
    assert_eq!(positions(&server).await, json!([]), "nothing was filled on paper");
    assert_eq!(row["retry"]["safe"], false, "a retry would fail the same way: {row}");
    // The broker is up again: anything sent would have reached it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(broker.received().is_empty(), "{:?}", broker.received());
    server.stop();
}

/// Filled on paper, but the fill's record could not be committed (the disk full) when the process died: the
/// row is still pending. Restarted with the bot on a broker, the row, stored for paper, is not sent there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stored_for_paper_is_not_sent_to_a_broker_the_bot_was_given_since() {
    let broker = MockBroker::start().await;
    let (dirs, bots) = setup("target-paper-http");
    bots_file(&bots, None);
    let mut server = start(&dirs, &bots);
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute_batch(
        "CREATE TRIGGER hold BEFORE UPDATE OF status ON outbox BEGIN SELECT RAISE(ABORT, 'simulated failure'); END;",
    )
    .unwrap();
    post(&server).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("recording a delivery failed") {
        assert!(Instant::now() < deadline, "the fill was never recorded: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pending(&server).await["target"], "paper");
    server.kill();
    db.execute_batch("DROP TRIGGER hold").unwrap();
    drop(db);

    bots_file(&bots, Some(&broker.base_url()));
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "failed", "{row}");
    let result = row["result"].as_str().unwrap();
    let now_at = format!("now delivers bot {BOT} to http://{}", broker.addr);
    assert!(result.contains(&format!("it was stored for delivery on paper and this server {now_at}")), "{result}");
    assert!(errors(&server).await.iter().any(|e| e == result), "{:?}", errors(&server).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(broker.received().is_empty(), "the broker got an order meant for paper: {:?}", broker.received());
    server.stop();
}

/// Stored for one broker endpoint (down), restarted with the bot's `base_url` on another (a paper account's
/// endpoint moved to a live one, say): neither gets the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stored_for_one_base_url_is_not_sent_to_another() {
    let (first, second) = (MockBroker::start().await, MockBroker::start().await);
    first.stop();
    let (dirs, bots) = setup("target-moved");
    bots_file(&bots, Some(&format!("{}/", first.base_url())));
    let mut server = start(&dirs, &bots);
    post(&server).await;
    pending(&server).await;
    server.kill();

    first.restart().await;
    bots_file(&bots, Some(&second.base_url()));
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "failed", "{row}");
    let result = row["result"].as_str().unwrap();
    let want = format!(
        "stored for delivery to http://{} and this server now delivers bot {BOT} to http://{}",
        first.addr, second.addr
    );
    assert!(result.contains(&want), "{result}");
    assert_eq!(errors(&server).await.len(), 1, "{:?}", errors(&server).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(second.received().is_empty(), "sent to the new endpoint: {:?}", second.received());
    assert!(first.received().is_empty(), "{:?}", first.received());
    server.stop();
}

/// A database of the version before targets (no `target` column) opens, gains the column, and its rows still to
/// send (no target) are delivered where the bot is delivered now, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_databases_pending_rows_are_delivered_as_configured() {
    let broker = MockBroker::start().await;
    broker.stop();
    let (dirs, bots) = setup("target-old-db");
    bots_file(&bots, Some(&broker.base_url()));
    let mut server = start(&dirs, &bots);
    post(&server).await;
    pending(&server).await;
    server.kill();
    // The database as the previous version left it: its outbox had no `target`.
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.execute_batch("ALTER TABLE outbox DROP COLUMN target; PRAGMA user_version = 5;").unwrap();
    drop(db);

    broker.restart().await;
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "done", "{row}");
    assert_eq!(row["target"], Value::Null);
    assert_eq!(broker.received().len(), 1, "{:?}", broker.received());
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    let version: u32 = db.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(version, 9, "the current schema");
    drop(db);
    server.stop();
}

/// Writes the bots file with the bot on `base_url` under the key pair `key` (its broker's headers).
fn keyed_bots_file(path: &Path, base_url: &str, key: &str) {
    let headers = json!({ "APCA-API-KEY-ID": { "value": key }, "APCA-API-SECRET-KEY": { "value": "secret" } });
    let v = json!({ BOT: { "delivery": "http", "base_url": base_url, "timeout_ms": 300, "headers": headers } });
    std::fs::write(path, v.to_string()).unwrap();
}

/// Alpaca takes the account from the keys and names none in its paths: stored under account A's keys (the broker
/// down), restarted with account B's on the same base URL, the row went to account B. It fails with an ERROR naming
/// both targets (the keys' fingerprints), and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stored_under_one_accounts_keys_is_not_sent_with_anothers() {
    let broker = MockBroker::start().await;
    broker.stop();
    let (dirs, bots) = setup("target-keys");
    keyed_bots_file(&bots, &broker.base_url(), "KEY-OF-ACCOUNT-A");
    let mut server = start(&dirs, &bots);
    post(&server).await;
    let stored_for = pending(&server).await["target"].as_str().unwrap().to_owned();
    assert!(stored_for.starts_with(&format!("http://{} (keys ", broker.addr)), "{stored_for}");
    assert!(!stored_for.contains("KEY-OF"), "{stored_for}");
    server.kill();

    broker.restart().await;
    keyed_bots_file(&bots, &broker.base_url(), "KEY-OF-ACCOUNT-B");
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "failed", "{row}");
    let result = row["result"].as_str().unwrap();
    assert!(result.contains(&format!("stored for delivery to {stored_for} and this server now delivers")), "{result}");
    assert!(!result.contains(&format!("now delivers bot {BOT} to {stored_for}")), "{result}");
    assert_eq!(errors(&server).await, [result], "one ERROR row, naming both targets");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(broker.received().is_empty(), "sent with the other account's keys: {:?}", broker.received());
    server.stop();
}

/// A row stored by the version before fingerprints records the bare base URL: after the upgrade it is delivered
/// under the keys of now, as it was before, rather than failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_stored_before_fingerprints_is_delivered_under_the_keys_of_now() {
    let broker = MockBroker::start().await;
    broker.stop();
    let (dirs, bots) = setup("target-keys-legacy");
    keyed_bots_file(&bots, &broker.base_url(), "KEY-OF-ACCOUNT-A");
    let mut server = start(&dirs, &bots);
    post(&server).await;
    pending(&server).await;
    server.kill();
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.execute("UPDATE outbox SET target = ?1", [format!("http://{}", broker.addr)]).unwrap();
    drop(db);

    broker.restart().await;
    let server = start(&dirs, &bots);
    let row = finished(&server).await;
    assert_eq!(row["status"], "done", "{row}");
    assert_eq!(broker.received().len(), 1, "{:?}", broker.received());
    server.stop();
}
