//! The read back after an entry (`--read-back-wait-ms`): a strategy that fires an OPEN and its CLOSE within
//! milliseconds (an exit on the same bar). The bot's state learns of the entry's fill only when the account is read
//! back after the delivery; a CLOSE decided before that found nothing to close (or only the older part of the
//! position after an add-on) and the position stayed open. An alert whose decision depends on an instrument with an
//! entry not yet read back waits for that read, bounded; every other alert goes as before.

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{Fault, Kind, Mock};
use server_support::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strategy_webhook::decimal::Decimal;

const ID: &str = "live";
const BOT: &str = "b";

/// A strategy trading AAPL and MSFT with one bot at the mock (10 shares an entry), and its bots file. The account is
/// read every 30 s besides the reads after deliveries: a test sees the read a delivery asks for, not an interval's.
fn setup(name: &str, mock: &Mock) -> (Dirs, PathBuf) {
    let dirs = Dirs::new(name);
    let kind = mock.kind;
    let mut v = snapshot(ID, &token('a'));
    v["allowed_instruments"] = json!(["AAPL", "MSFT"]);
    v["bots"] = json!([{ "id": BOT, "broker": kind.name(), "account_id": kind.account(),
                         "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("live.json", &v);
    let bot = mock.bot_conf(&dirs.root, 30, None);
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, json!({ BOT: bot }).to_string()).unwrap();
    (dirs, path)
}

async fn start(name: &str, kind: Kind, extra: &[&str]) -> (Mock, Dirs, Server) {
    let mock = Mock::start(kind).await;
    let (dirs, bots) = setup(name, &mock);
    let mut args = vec!["--bots", bots.to_str().unwrap()];
    args.extend_from_slice(extra);
    let server = Server::start(&dirs, &args);
    // The first read of the account (at start) is done: the tests' reads are the deliveries'.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    (mock, dirs, server)
}

async fn state(server: &Server) -> Value {
    server.admin_get(&format!("/api/strategies/{ID}/bots/{BOT}/state")).await
}

async fn wait_state(server: &Server, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = state(server).await;
        if f(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: the bot's state is {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn drained(server: &Server) -> Vec<Value> {
    server.drained_outbox(ID).await
}

/// POSTs an alert and says its answer's `status` and how long the answer took.
async fn post(server: &Server, body: &str) -> (String, Duration, Value) {
    let t = Instant::now();
    let a = server.post(&token('a'), Some("application/json"), body).await;
    let took = t.elapsed();
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    let v = a.json();
    (v["status"].as_str().unwrap_or_default().to_owned(), took, v)
}

fn held(mock: &Mock, symbol: &str) -> Decimal {
    mock.positions().get(symbol).copied().unwrap_or_default()
}

fn ten() -> Decimal {
    "10".parse().unwrap()
}

/// OPEN then CLOSE within milliseconds: the CLOSE is decided after the entry's fill was read back, and sells it.
async fn open_then_close_at_once(kind: Kind) {
    let (mock, _dirs, server) = start(&format!("rb-open-close-{}", kind.name()), kind, &[]).await;
    let (open, _, o) = post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await;
    assert_eq!(open, "processed", "{o}");
    let (close, _, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert_eq!(close, "processed", "the CLOSE right after its OPEN found nothing to close: {c}");
    drained(&server).await;
    let orders = mock.orders();
    assert_eq!(orders.len(), 2, "{orders:?}");
    assert!(!orders[1].buy && orders[1].qty == ten(), "the close sells what was bought: {orders:?}");
    assert_eq!(held(&mock, "AAPL"), Decimal::ZERO, "the position the sender closed stays open: {orders:?}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_its_open_closes_the_position() {
    open_then_close_at_once(Kind::Alpaca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_its_open_closes_the_position_at_a_broker_answering_ids() {
    open_then_close_at_once(Kind::Tradier).await;
}

/// 10 held and read back; an add-on entry and the CLOSE right after it: the CLOSE sells all 20, not only the 10
/// the state held before the add-on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_right_after_an_add_on_entry_sells_the_whole_position() {
    let (mock, _dirs, server) = start("rb-add-on", Kind::Alpaca, &[]).await;
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    drained(&server).await;
    wait_state(&server, "the first entry read back", |s| {
        s["positions"].as_array().is_some_and(|p| p.iter().any(|p| p["instrument"] == "AAPL"))
    })
    .await;
    let add = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","message_id":"add-on"}"#;
    assert_eq!(post(&server, add).await.0, "processed");
    let (close, _, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert_eq!(close, "processed", "{c}");
    drained(&server).await;
    let orders = mock.orders();
    assert_eq!(held(&mock, "AAPL"), Decimal::ZERO, "the add-on's 10 stay open: {orders:?}");
    server.stop();
}

/// OPEN long, then at once a CLOSE and a reversal into a short, each its own alert: the CLOSE waits for the read,
/// and the short's OPEN, queued behind it, is not decided before it (decided first, it sold the long away as an
/// entry, and the CLOSE then found nothing: flat instead of short); it waits in turn for the close's read, and
/// opens the short (decided against the long not yet read closed, it was refused as holding the other side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_and_a_reversal_sent_together_keep_their_order() {
    let (mock, _dirs, server) = start("rb-order", Kind::Alpaca, &[]).await;
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    let close = {
        let client = server.client();
        tokio::spawn(async move {
            client
                .post_from(
                    "127.0.0.1",
                    &token('a'),
                    r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#,
                    Duration::from_secs(10),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (short, _, s) = post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"short"}"#).await;
    let close = close.await.unwrap().unwrap();
    assert_eq!(close.json()["status"], "processed", "{}", close.body);
    assert_eq!(short, "processed", "{s}");
    drained(&server).await;
    let orders = mock.orders();
    assert_eq!(held(&mock, "AAPL"), -ten(), "closed, then short 10: {orders:?}");
    server.stop();
}

/// While an AAPL entry is on its way to the broker (its answer delayed), a buy of MSFT is decided at once: only
/// alerts whose decision depends on AAPL's position wait. The AAPL CLOSE waits, and closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_alerts_on_the_entrys_instrument_wait() {
    let (mock, _dirs, server) = start("rb-narrow", Kind::Alpaca, &[]).await;
    mock.faults([Fault::Delay(Duration::from_millis(800))]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    let (other, took, o) = post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await;
    assert_eq!(other, "processed", "{o}");
    assert!(took < Duration::from_millis(400), "a buy of another symbol waited {took:?}");
    let (same, took, s) = post(&server, r#"{"ticker":"AAPL","action":"buy","message_id":"add"}"#).await;
    assert_eq!(same, "processed", "{s}");
    assert!(took < Duration::from_millis(400), "an add-on entry (its decision depends on no position) waited {took:?}");
    let (close, took, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert_eq!(close, "processed", "{c}");
    assert!(took >= Duration::from_millis(200), "the CLOSE did not wait for the entry: {took:?}");
    drained(&server).await;
    assert_eq!(held(&mock, "AAPL"), Decimal::ZERO, "{:?}", mock.orders());
    assert_eq!(held(&mock, "MSFT"), ten(), "{:?}", mock.orders());
    server.stop();
}

/// The bot's account cannot be read (its reads answer 503): nothing is waited for (the sync reports the failing
/// reads), and the CLOSE is decided at once against the state as it stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_waits_for_a_bot_whose_reads_fail() {
    let (mock, _dirs, server) = start("rb-reads-down", Kind::Alpaca, &[]).await;
    mock.reads_down(true);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    drained(&server).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, took, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert!(took < Duration::from_millis(500), "the CLOSE waited {took:?} for reads that fail: {c}");
    server.stop();
}

/// `--read-back-wait-ms 0`: nothing waits, as before the read back (the CLOSE right after its OPEN is decided
/// against the state without the fill).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_of_zero_turns_the_read_back_off() {
    let (mock, _dirs, server) = start("rb-off", Kind::Alpaca, &["--read-back-wait-ms", "0"]).await;
    mock.faults([Fault::Delay(Duration::from_millis(800))]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    let (close, took, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert_eq!(close, "rejected", "{c}");
    assert!(took < Duration::from_millis(400), "waited {took:?}");
    drained(&server).await;
    server.stop();
}

/// An entry whose answer takes longer than the bound: the CLOSE waits the bound, then is decided as the state
/// stands, and says so in the Logs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_waits_at_most_the_bound() {
    let (mock, _dirs, server) = start("rb-bound", Kind::Alpaca, &["--read-back-wait-ms", "300"]).await;
    mock.faults([Fault::Delay(Duration::from_millis(2000))]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    let (_, took, c) = post(&server, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#).await;
    assert!(took >= Duration::from_millis(250) && took < Duration::from_millis(1500), "waited {took:?}: {c}");
    let logs = server
        .logs_when(ID, |l| l.iter().any(|r| r["message"].as_str().unwrap_or_default().contains("read back")))
        .await;
    assert!(
        logs.iter().any(|r| r["level"] == "WARN" && r["message"].as_str().unwrap_or_default().contains("read back")),
        "{logs:?}"
    );
    drained(&server).await;
    server.stop();
}

/// A CLOSE waiting for the read back gives up its in-flight slot: another strategy's alert from the same address
/// (a charting platform sends many users' alerts from a few) is not refused 503 meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_close_holds_no_in_flight_slot() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("rb-slots", &mock);
    dirs.write("other.json", &snapshot("other", &token('b')));
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--max-in-flight-per-address", "1"]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    mock.faults([Fault::Delay(Duration::from_millis(1000))]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await.0, "processed");
    let waiting = {
        let client = server.client();
        tokio::spawn(async move {
            client
                .post_from(
                    "127.0.0.5",
                    &token('a'),
                    r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#,
                    Duration::from_secs(10),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = server
        .post_from(
            "127.0.0.5",
            &token('b'),
            r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#,
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    let waited = waiting.await.unwrap().unwrap();
    assert_eq!(other.status, 200, "another strategy's alert was refused while the CLOSE waited: {}", other.body);
    assert_eq!(waited.json()["status"], "processed", "{}", waited.body);
    server.stop();
}
