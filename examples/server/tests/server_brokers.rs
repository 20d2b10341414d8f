//! Real brokers end to end against mock brokers that imitate each one's write and read endpoints and its
//! authentication: the server reads positions and working orders back (state sync), so a fill at the broker
//! lets a CLOSE through with no admin call, a filled limit entry cannot be modified, a position closed at the
//! broker cannot be closed again; and each session scheme (static keys, OAuth2 refresh, ES256 JWT) holds.

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{test_ec_key, Fault, Kind, Mock};
use server_support::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const ID: &str = "live";
const BOT: &str = "b";

/// What the test trades at this broker: equities (AAPL, MSFT) or, at the crypto broker, BTC/USD.
fn ticker(kind: Kind) -> &'static str {
    if kind == Kind::Coinbase {
        "BTC/USD"
    } else {
        "AAPL"
    }
}

/// A strategy with one bot at the mock, its bots file with the broker's auth, and the server.
fn setup(name: &str, mock: &Mock, key_pem: Option<&str>) -> (Dirs, PathBuf) {
    setup_with(name, mock, key_pem, |_| {})
}

/// [`setup`] with the strategy changed by `tweak` before it is written.
fn setup_with(name: &str, mock: &Mock, key_pem: Option<&str>, tweak: impl Fn(&mut Value)) -> (Dirs, PathBuf) {
    let dirs = Dirs::new(name);
    let kind = mock.kind;
    let mut v = snapshot(ID, &token('a'));
    if kind == Kind::Coinbase {
        v["asset_class"] = json!("crypto");
        v["duration"] = json!("gtc");
        v["allowed_instruments"] = json!(["BTC/USD"]);
        v["market"] = json!({ "quotes": { "BTC/USD": { "bid": "60000", "ask": "60010", "last": "60005" } } });
    } else {
        v["allowed_instruments"] = json!(["AAPL", "MSFT"]);
    }
    let size = if kind == Kind::Coinbase { "0.5" } else { "10" };
    v["bots"] = json!([{ "id": BOT, "broker": kind.name(), "account_id": kind.account(),
                         "sizing": { "fixed_quantity": size } }]);
    tweak(&mut v);
    dirs.write("live.json", &v);
    let bot = mock.bot_conf(&dirs.root, 1, key_pem);
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, json!({ BOT: bot }).to_string()).unwrap();
    (dirs, path)
}

async fn start(name: &str, kind: Kind) -> (Mock, Dirs, Server) {
    let mock = Mock::start(kind).await;
    let key = (kind == Kind::Coinbase).then(|| {
        let (pem, public) = test_ec_key();
        mock.require_jwt("organizations/o1/apiKeys/k1", public);
        pem
    });
    let (dirs, bots) = setup(name, &mock, key.as_deref());
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    (mock, dirs, server)
}

async fn outbox(server: &Server) -> Vec<Value> {
    server.outbox_rows(ID).await
}

async fn drained(server: &Server) -> Vec<Value> {
    server.drained_outbox(ID).await
}

async fn post(server: &Server, body: &str) -> Value {
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    drained(server).await;
    a.json()
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

fn holds(s: &Value, instrument: &str) -> bool {
    s["positions"].as_array().is_some_and(|p| p.iter().any(|p| p["instrument"] == instrument))
}

fn working(s: &Value) -> usize {
    s["working_orders"].as_array().map_or(0, Vec::len)
}

/// Waits (the log rows are written after the answer) for a row at `level` containing `text`.
async fn logged(server: &Server, level: &str, text: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let logs = server.logs(ID).await;
        if logs.iter().any(|l| l["level"] == level && l["message"].as_str().unwrap_or_default().contains(text)) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// OPEN filled at the broker → CLOSE processed with no admin call; then a CLOSE with nothing left is rejected.
async fn open_then_close(kind: Kind) {
    let (mock, _dirs, server) = start(&format!("brk-close-{}", kind.name()), kind).await;
    let t = ticker(kind);
    let open = json!({ "ticker": t, "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    assert_eq!(mock.positions().len(), 1, "the market order filled at the broker: {:?}", mock.orders());
    wait_state(&server, "the synced position", |s| holds(s, t)).await;

    let close = json!({ "ticker": t, "action": "CLOSE", "direction": "long" }).to_string();
    assert_eq!(post(&server, &close).await["status"], "processed");
    let orders = mock.orders();
    assert_eq!(orders.len(), 2, "{orders:?}");
    assert!(!orders[1].buy && orders[1].qty == orders[0].qty, "the close sells what was bought: {orders:?}");
    assert!(mock.positions().is_empty(), "{:?}", mock.positions());
    wait_state(&server, "the position gone", |s| !holds(s, t)).await;
    let again = json!({ "ticker": t, "action": "CLOSE", "direction": "long", "message_id": "again" }).to_string();
    assert_eq!(post(&server, &again).await["status"], "rejected");
    assert_eq!(mock.orders().len(), 2, "nothing sent for a CLOSE with nothing to close");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpaca_open_filled_then_close_without_admin() {
    open_then_close(Kind::Alpaca).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tradier_open_filled_then_close_without_admin() {
    open_then_close(Kind::Tradier).await;
}

/// A bot's `account_id` edited while the server was stopped: at start the stored state, read from the old account,
/// was loaded for the new one, and a CLOSE sent the old account's quantity to the new account. The state names the
/// account it was read from and is not used for another: until the new account is read a CLOSE finds nothing (the
/// broker's reads are down here), and then the sync reads the new account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_edited_while_the_server_was_stopped_is_read_anew_at_start() {
    let mock = Mock::start(Kind::Tradier).await;
    let (dirs, bots) = setup("brk-account-edited", &mock, None);
    let args = ["--bots", bots.to_str().unwrap()];
    let server = Server::start(&dirs, &args);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    let s = wait_state(&server, "the synced position", |s| holds(s, "AAPL")).await;
    assert_eq!(s["source"]["account"], Kind::Tradier.account(), "{s}");
    server.stop();

    let mut v: Value = serde_json::from_slice(&std::fs::read(dirs.strategies.join("live.json")).unwrap()).unwrap();
    v["bots"][0]["account_id"] = json!("VA99999999");
    dirs.write("live.json", &v);
    mock.reads_down(true);
    let server = Server::start(&dirs, &args);
    let s = state(&server).await;
    assert!(!holds(&s, "AAPL"), "the old account's position was loaded for the new account: {s}");
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long" }).to_string();
    let a = server.post(&token('a'), Some("application/json"), &close).await;
    assert_eq!(a.json()["status"], "rejected", "{}", a.body);
    drained(&server).await;
    assert_eq!(mock.orders().len(), 1, "sent to the new account: {:?}", mock.orders());
    let told = server.stderr_text().matches("is not used").count();
    assert_eq!(told, 1, "one WARN for the stored state: {}", server.stderr_text());

    // Once the broker answers reads again, the new account is read.
    mock.reads_down(false);
    let s = wait_state(&server, "the new account read", |s| holds(s, "AAPL")).await;
    assert_eq!(s["source"]["account"], "VA99999999", "{s}");
    let read = |r: &server_support::brokers::Seen| r.method == "GET" && r.target.contains("/accounts/VA99999999/");
    assert!(mock.seen().iter().any(read), "{:?}", mock.seen());
    server.stop();
}

/// A working order the trader replaced in the broker's own screens (or that a MODIFY delivered first replaced):
/// its cancel is refused, and it reads back `replaced`, nothing filled. Taken for cancelled, it released what
/// waited for the cancel (a close, a re-size) beside the replacement, which works on. It fails, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_an_order_replaced_meanwhile_fails_naming_the_replacement() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-cancel-replaced", &mock, None);
    // A slow sync, so the state still holds the old order when the cancel is decided.
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
    v[BOT]["sync_interval_secs"] = json!(300);
    std::fs::write(&bots, v.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let limit = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":150.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let old = mock.orders()[0].id.clone();
    let new = mock.replace_by_hand(&old);
    let cancel = r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#;
    assert_eq!(post(&server, cancel).await["status"], "processed");
    let rows = drained(&server).await;
    let row = rows.iter().find(|r| r["kind"] == "cancel").expect("the cancel row");
    assert_eq!(row["status"], "failed", "{row}");
    let why = row["result"].as_str().unwrap();
    assert!(why.contains("replaced") && why.contains(&new), "{row}");
    server.stop();
}

/// An Alpaca bot with a limit entry at 150 working, past the read that follows its delivery, and a slow sync: no
/// read lists what changes next before the alerts that follow are decided. The mock, the server, the entry's id.
async fn a_working_alpaca_entry(name: &str) -> (Mock, Server, String) {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup(name, &mock, None);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
    v[BOT]["sync_interval_secs"] = json!(300);
    std::fs::write(&bots, v.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let limit = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":150.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    drained(&server).await;
    let old = mock.orders()[0].id.clone();
    wait_state(&server, "the entry working", |s| s["working_orders"][0]["id"] == json!(old)).await;
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    (mock, server, old)
}

/// A MODIFY and a CANCEL of one working entry, both decided before the MODIFY was delivered (two alerts on one bar):
/// the replace goes out first and the broker answers it with a new order. The cancel, stored for the old order,
/// was refused (that order is replaced) and failed, the replacement working on: the entry the sender pulled could
/// fill. It is sent to the replacement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_decided_before_a_modify_was_delivered_pulls_the_replacement() {
    let (mock, server, old) = a_working_alpaca_entry("brk-cancel-after-modify").await;
    // The replace is answered half a second later: the CANCEL is decided against the old order meanwhile.
    mock.faults([Fault::Delay(Duration::from_millis(500))]);
    for body in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#,
        r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
    ] {
        let a = server.post(&token('a'), Some("application/json"), body).await;
        assert_eq!(a.json()["status"], "processed", "{body}: {}", a.body);
    }
    let rows = drained(&server).await;
    let row = rows.iter().find(|r| r["kind"] == "cancel").expect("the cancel row");
    assert_eq!(row["status"], "done", "{row}");
    let new = format!("{old}-new");
    assert!(row["result"].as_str().unwrap().contains(&new), "{row}");
    let orders = mock.orders();
    let replacement = orders.iter().find(|o| o.id == new).expect("the replacement");
    assert_eq!(replacement.status, "cancelled", "{orders:?}");
    server.stop();
}

/// Two MODIFYs of one working entry, both decided before the first was delivered (two alerts on
/// one bar): the first replace goes out and Alpaca answers it with a new order. The second replace, stored for the
/// old id, is refused (that order is replaced) and the trader's latest price is lost: the replacement works on at
/// the first MODIFY's price.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_modify_decided_before_the_first_was_delivered_changes_the_replacement() {
    let (mock, server, _) = a_working_alpaca_entry("brk-modify-after-modify").await;
    mock.faults([Fault::Delay(Duration::from_millis(500))]);
    for body in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":152.00}"#,
    ] {
        let a = server.post(&token('a'), Some("application/json"), body).await;
        assert_eq!(a.json()["status"], "processed", "{body}: {}", a.body);
    }
    let rows = drained(&server).await;
    let replaces: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "replace").collect();
    assert_eq!(replaces.len(), 2, "{rows:?}");
    for r in &replaces {
        assert_eq!(r["status"], "done", "{r}");
    }
    let orders = mock.orders();
    let working: Vec<_> = orders.iter().filter(|o| o.status == "working").collect();
    assert_eq!(working.len(), 1, "{orders:?}");
    assert_eq!(working[0].limit, Some("152".parse().unwrap()), "the latest MODIFY's price: {orders:?}");
    server.stop();
}

/// The limit prices of the orders working at the mock, as the trader would see them there.
fn working_limits(mock: &Mock) -> Vec<String> {
    let limit = |o: &server_support::brokers::MockOrder| o.limit.map_or("market".into(), |l| l.normalize().to_string());
    mock.orders().iter().filter(|o| o.status == "working").map(limit).collect()
}

/// Retries a failed outbox row through the admin API and lets the outbox drain: the answer's status and body.
async fn retry_row(server: &Server, row: &Value) -> (u16, String) {
    let path = format!("/api/strategies/{ID}/outbox/{}/retry", row["id"]);
    let a = server.admin(hyper::Method::POST, &path, None, "", true).await;
    drained(server).await;
    (a.status, a.body)
}

/// The row of `rows` with `row`'s id, as listed now.
fn listed<'a>(rows: &'a [Value], row: &Value) -> &'a Value {
    rows.iter().find(|r| r["id"] == row["id"]).expect("the row is listed")
}

/// A MODIFY of a working entry refused by the broker (failed for good), then a later MODIFY of the same entry
/// delivered: the entry works at 152. The failed row was offered as safe to retry (Alpaca refuses a repeated client
/// order id) and, re-aimed at the replacement the later MODIFY made, put the entry back at the superseded 151: the
/// trader's latest price undone without a word. It is not offered, and a retry is refused naming the later row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_modify_is_not_retried_over_a_later_change_of_its_order() {
    let (mock, server, _) = a_working_alpaca_entry("brk-retry-modify-superseded").await;
    mock.faults([Fault::Refuse(422, "limit price too far from the market")]);
    let first = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#;
    assert_eq!(post(&server, first).await["status"], "processed");
    let failed = outbox(&server).await.into_iter().find(|r| r["kind"] == "replace").expect("the first MODIFY's row");
    assert_eq!(failed["status"], "failed", "{failed}");
    let second = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":152.00}"#;
    assert_eq!(post(&server, second).await["status"], "processed");
    let rows = drained(&server).await;
    let later = rows.iter().find(|r| r["kind"] == "replace" && r["id"] != failed["id"]).expect("the second MODIFY");
    assert_eq!(later["status"], "done", "{later}");
    assert_eq!(working_limits(&mock), ["152"], "{:?}", mock.orders());
    let offered = listed(&rows, &failed).clone();

    let (code, body) = retry_row(&server, &failed).await;
    assert_eq!(code, 409, "the retry answered {code} {body}; the entry now works at {:?}", working_limits(&mock));
    assert!(body.contains(&format!("row {}", later["id"])), "the later row is named: {body}");
    assert_eq!(offered["retry"]["safe"], false, "{offered}");
    assert!(offered["retry"]["why"].as_str().unwrap().contains(&format!("row {}", later["id"])), "{offered}");
    // The Logs view lists the failed row's alert alone, and judges it as the retry endpoint does.
    let alert = server.admin_get(&format!("/api/strategies/{ID}/outbox?created_ms={}", failed["created_ms"])).await;
    let alone = listed(alert["outbox"].as_array().unwrap(), &failed);
    assert_eq!(alone["retry"]["safe"], false, "{alone}");
    assert_eq!(working_limits(&mock), ["152"], "{:?}", mock.orders());
    assert_eq!(listed(&outbox(&server).await, &failed)["status"], "failed");
    server.stop();
}

/// A CANCEL of a working entry refused by the broker (the entry works on), then, the sync having read it back, a
/// MODIFY of the same entry delivered: the trader's latest word on it is "work at 151". Retried, the failed cancel
/// was offered as safe ("a cancel cannot create an order") and, re-aimed at the replacement, pulled the entry the
/// later MODIFY had re-priced. It is not offered, and a retry is refused naming the later row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_cancel_is_not_retried_over_a_later_change_of_its_order() {
    let (mock, _dirs, server) = start("brk-retry-cancel-superseded", Kind::Alpaca).await;
    let limit = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":150.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let old = mock.orders()[0].id.clone();
    wait_state(&server, "the entry working", |s| s["working_orders"][0]["id"] == json!(old)).await;
    mock.faults([Fault::Refuse(422, "order is not cancelable")]);
    let cancel = r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#;
    assert_eq!(post(&server, cancel).await["status"], "processed");
    let failed = outbox(&server).await.into_iter().find(|r| r["kind"] == "cancel").expect("the cancel's row");
    assert_eq!(failed["status"], "failed", "{failed}");
    // The sync reads the entry back as working, and a MODIFY of it is decided and delivered.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    wait_state(&server, "the entry working again", |s| s["working_orders"][0]["id"] == json!(old)).await;
    let modify = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#;
    assert_eq!(post(&server, modify).await["status"], "processed");
    let rows = drained(&server).await;
    let later = rows.iter().find(|r| r["kind"] == "replace").expect("the MODIFY's row");
    assert_eq!(later["status"], "done", "{later}");
    assert_eq!(working_limits(&mock), ["151"], "{:?}", mock.orders());
    let offered = listed(&rows, &failed).clone();

    let (code, body) = retry_row(&server, &failed).await;
    assert_eq!(code, 409, "the retry answered {code} {body}; orders working now: {:?}", working_limits(&mock));
    assert!(body.contains(&format!("row {}", later["id"])), "the later row is named: {body}");
    assert_eq!(offered["retry"]["safe"], false, "{offered}");
    assert_eq!(working_limits(&mock), ["151"], "{:?}", mock.orders());
    server.stop();
}

/// Two MODIFYs of one working entry decided before the first was delivered (two alerts on one bar): the first (151)
/// replaces the entry with a new order; the second (152), stored against the entry's first id, is re-aimed at that
/// replacement when sent, and refused there (failed). A third MODIFY (149) then changes the replacement, under its
/// own id. The failed row still names the first id, so, matched by order id, nothing had superseded it: it was
/// offered as safe, and retried, re-aimed along both replacements, put the older 152 back over the trader's latest
/// 149. It is not offered, and a retry is refused naming the later row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_modify_re_aimed_at_a_replacement_is_not_retried_over_a_later_change_of_it() {
    let (mock, server, old) = a_working_alpaca_entry("brk-retry-reaimed-superseded").await;
    // The first replace is answered half a second later (the second MODIFY is decided against the first id
    // meanwhile); the second, re-aimed, is refused.
    mock.faults([Fault::Delay(Duration::from_millis(500)), Fault::Refuse(422, "limit price too far from the market")]);
    for body in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":152.00}"#,
    ] {
        let a = server.post(&token('a'), Some("application/json"), body).await;
        assert_eq!(a.json()["status"], "processed", "{body}: {}", a.body);
    }
    let rows = drained(&server).await;
    let replacement = format!("{old}-new");
    let failed = rows.iter().find(|r| r["kind"] == "replace" && r["status"] == "failed").expect("the refused MODIFY");
    assert_eq!(failed["order_id"], json!(old), "stored against the first id: {failed}");
    assert!(failed["result"].as_str().unwrap().contains(&replacement), "re-aimed at the replacement: {failed}");
    let failed = failed.clone();
    assert_eq!(working_limits(&mock), ["151"], "{:?}", mock.orders());
    let third = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":149.00}"#;
    assert_eq!(post(&server, third).await["status"], "processed");
    let rows = drained(&server).await;
    let later = rows.iter().find(|r| r["kind"] == "replace" && r["order_id"] == json!(replacement));
    let later = later.expect("the third MODIFY, of the replacement");
    assert_eq!(later["status"], "done", "{later}");
    assert_eq!(working_limits(&mock), ["149"], "{:?}", mock.orders());
    let offered = listed(&rows, &failed).clone();

    let (code, body) = retry_row(&server, &failed).await;
    assert_eq!(code, 409, "the retry answered {code} {body}; the entry now works at {:?}", working_limits(&mock));
    assert!(body.contains(&format!("row {}", later["id"])), "the later row is named: {body}");
    assert_eq!(offered["retry"]["safe"], false, "{offered}");
    // The Logs view lists the failed row's alert alone, and judges it as the retry endpoint does.
    let alert = server.admin_get(&format!("/api/strategies/{ID}/outbox?created_ms={}", failed["created_ms"])).await;
    let alone = listed(alert["outbox"].as_array().unwrap(), &failed);
    assert_eq!(alone["retry"]["safe"], false, "{alone}");
    assert_eq!(working_limits(&mock), ["149"], "{:?}", mock.orders());
    server.stop();
}

/// A limit entry refused by the broker (failed for good), then a later entry of the same instrument filled and
/// a CLOSE of it delivered: the sender is flat. The failed entry was offered as safe to retry (Alpaca refuses a
/// repeated client order id) and, retried, left a limit buy working that the sender had since entered and closed
/// without. It is not offered, and a retry is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_entry_is_not_retried_after_a_later_entry_and_close_of_its_instrument() {
    let (mock, _dirs, server) = start("brk-retry-entry-superseded", Kind::Alpaca).await;
    mock.faults([Fault::Refuse(403, "insufficient buying power")]);
    let limit = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":150.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let failed = outbox(&server).await.into_iter().find(|r| r["kind"] == "place").expect("the entry's row");
    assert_eq!(failed["status"], "failed", "{failed}");
    let open = r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#;
    assert_eq!(post(&server, open).await["status"], "processed");
    wait_state(&server, "the synced position", |s| holds(s, "AAPL")).await;
    let close = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
    assert_eq!(post(&server, close).await["status"], "processed");
    assert!(mock.positions().is_empty(), "{:?}", mock.positions());
    let rows = drained(&server).await;
    let offered = listed(&rows, &failed).clone();

    let (code, body) = retry_row(&server, &failed).await;
    assert_eq!(
        code,
        409,
        "the retry answered {code} {body}; orders working now: {:?}, positions {:?}",
        working_limits(&mock),
        mock.positions()
    );
    assert_eq!(offered["retry"]["safe"], false, "{offered}");
    assert!(working_limits(&mock).is_empty(), "{:?}", mock.orders());
    server.stop();
}

/// A limit entry of 10 at Alpaca fills 4 between the bot's last read of it and a price MODIFY
/// (the sync reads every 30 s by default; fills come whenever). The replace states `qty` 10, the remainder the bot
/// last knew, and Alpaca's replacement is a new order of that size, the old one's 4 fills staying with it: 14 bought
/// where the sizing said 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_modify_of_a_partly_filled_alpaca_order_does_not_grow_the_position() {
    let (mock, server, old) = a_working_alpaca_entry("brk-modify-part-filled").await;
    let sized = mock.orders()[0].qty;
    // 4 fill at the broker; the bot's next read is minutes away.
    mock.fill_part(&old, "4");
    let modify = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151.00}"#;
    assert_eq!(post(&server, modify).await["status"], "processed");
    let orders = mock.orders();
    let was = orders.iter().find(|o| o.id == old).unwrap();
    let new = orders.iter().find(|o| o.id == format!("{old}-new")).expect("the replacement");
    let most = was.filled + new.qty;
    assert!(most <= sized, "at most {most} shares can be bought where {sized} were sized: {orders:?}");
    server.stop();
}

/// A MODIFY of the position's exit and a CLOSE decided before the MODIFY was delivered: the close waits for the
/// cancel of the exit, which the MODIFY replaced meanwhile. Not aimed at the replacement, the cancel failed, the
/// close was held back and the position stayed open under the re-priced exit. The close is sized from the position,
/// not from the exit: the replacement is pulled and the position closed. With a MODIFY that shrinks the exit (10
/// to 4), the re-aimed cancel's read-back measured the replacement against the old exit's size and read 6 filled
/// that never were: measured against the replacement's own size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_decided_before_its_exits_modify_was_delivered_closes() {
    for (name, modify) in [
        ("brk-close-after-modify", r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":161.00}"#),
        ("brk-close-after-resize", r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":4}"#),
    ] {
        let mock = Mock::start(Kind::Alpaca).await;
        let (dirs, bots) = setup(name, &mock, None);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
        v[BOT]["sync_interval_secs"] = json!(300);
        std::fs::write(&bots, v.to_string()).unwrap();
        let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
        let open = r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#;
        assert_eq!(post(&server, open).await["status"], "processed");
        wait_state(&server, "held", |s| holds(s, "AAPL")).await;
        let exit = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long","order_type":"limit","price":160.00}"#;
        assert_eq!(post(&server, exit).await["status"], "processed");
        wait_state(&server, "exit working", |s| s["working_orders"].as_array().is_some_and(|o| !o.is_empty())).await;
        // Past the read that follows a delivery.
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        mock.faults([Fault::Delay(Duration::from_millis(500))]);
        for body in [modify, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#] {
            let a = server.post(&token('a'), Some("application/json"), body).await;
            assert_eq!(a.json()["status"], "processed", "{name} {body}: {}", a.body);
        }
        let rows = drained(&server).await;
        let cancel = rows.iter().find(|r| r["kind"] == "cancel").expect("the exit's cancel");
        assert_eq!(cancel["status"], "done", "{name}: {cancel}");
        assert!(!cancel["result"].as_str().unwrap_or_default().contains("filled"), "{name}: {cancel}");
        let closes: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "place").collect();
        assert!(closes.iter().all(|r| r["status"] == "done"), "{name}: {closes:?}");
        let working: Vec<_> = mock.orders().into_iter().filter(|o| o.status == "working").collect();
        assert!(working.is_empty(), "{name}: the re-priced exit still works: {working:?}");
        server.stop();
    }
}

/// An exit that filled 3 of 10 after a MODIFY (shrinking it to 4) and a CLOSE were decided, before the MODIFY was
/// delivered: the CLOSE's cancel, re-aimed at the replacement, measured the replacement only (nothing filled), and
/// the close sold 10 on 7 held, leaving the account short 3. What the replaced order filled since the decision is
/// read back too, and holds the close back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaimed_cancel_counts_what_the_replaced_order_filled_since_the_decision() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-reaimed-old-fill", &mock, None);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
    v[BOT]["sync_interval_secs"] = json!(300);
    std::fs::write(&bots, v.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    wait_state(&server, "held", |s| holds(s, "AAPL")).await;
    let exit = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long","order_type":"limit","price":160.00}"#;
    assert_eq!(post(&server, exit).await["status"], "processed");
    let s =
        wait_state(&server, "exit working", |s| s["working_orders"].as_array().is_some_and(|o| !o.is_empty())).await;
    let exit_id = s["working_orders"][0]["id"].as_str().unwrap().to_owned();
    // Past the read that follows a delivery: the bot's state does not know of the fill below.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    mock.fill_part(&exit_id, "3");
    mock.faults([Fault::Delay(Duration::from_millis(500))]);
    for body in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":4}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#,
    ] {
        assert_eq!(server.post(&token('a'), Some("application/json"), body).await.json()["status"], "processed");
    }
    let rows = drained(&server).await;
    let cancel = rows.iter().find(|r| r["kind"] == "cancel").expect("the exit's cancel");
    assert_eq!(cancel["status"], "failed", "{cancel}");
    assert!(cancel["result"].as_str().unwrap_or_default().contains("filled 3"), "{cancel}");
    let close = rows.iter().filter(|r| r["kind"] == "place").max_by_key(|r| r["id"].as_i64()).unwrap();
    assert_ne!(close["status"], "done", "3 sold by the exit since the decision, and a close of 10 went out: {close}");
    let sold: Vec<_> = mock.orders().into_iter().filter(|o| !o.buy && o.limit.is_none()).collect();
    assert!(sold.is_empty(), "a market sell went out: {sold:?}");
    server.stop();
}

/// Schwab's refresh token ends 7 days after the browser login whatever the renewals, and the bot then stops, its
/// exits with it. With `refresh_token_lifetime_secs` configured, the sync warns a day before (once a run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refresh_token_near_its_end_is_warned_of_a_day_before() {
    let mock = Mock::start(Kind::Schwab).await;
    let (dirs, bots) = setup("brk-expiring", &mock, None);
    let with_lifetime = |secs: u64| {
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
        v[BOT]["auth"]["refresh_token_lifetime_secs"] = json!(secs);
        std::fs::write(&bots, v.to_string()).unwrap();
    };
    let warned = |rows: &[Value]| {
        rows.iter()
            .filter(|r| {
                r["level"] == "WARN" && r["message"].as_str().unwrap_or_default().contains("refresh token ends")
            })
            .count()
    };
    // Seven days from now: nothing to say yet.
    with_lifetime(7 * 24 * 3600);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(warned(&server.logs(ID).await), 0);
    server.stop();
    // A login whose token lasts an hour from when this server first saw it (at the first start): warned at once,
    // and once.
    with_lifetime(3600);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let rows = server.logs_when(ID, |rows| warned(rows) >= 1).await;
    let row = rows.iter().find(|r| r["message"].as_str().unwrap_or_default().contains("refresh token ends")).unwrap();
    assert!(row["message"].as_str().unwrap().contains("log in to the broker again"), "{row}");
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(warned(&server.logs(ID).await), 1, "told once");
    server.stop();
}

/// Keys regenerated at the broker: every read is answered 401 after the session's resend. Only a stopped OAuth
/// session was reported; here the server's log alone said it, and the trader's first word was the next order
/// (an exit, perhaps) failing. An ERROR row says it once, and again only after a good read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_keys_the_broker_refuses_are_reported_once() {
    let (mock, _dirs, server) = start("brk-keys-refused", Kind::Alpaca).await;
    // A first good read, so the refusal below is one after a sync that worked.
    wait_state(&server, "a first sync", |_| mock.seen().iter().any(|r| r.method == "GET" && r.status == 200)).await;
    let refused = |rows: &[Value]| {
        rows.iter()
            .filter(|r| {
                r["level"] == "ERROR" && r["message"].as_str().unwrap_or_default().contains("refuses its credentials")
            })
            .count()
    };
    mock.require_headers(&[("APCA-API-KEY-ID", "regenerated"), ("APCA-API-SECRET-KEY", "new-secret")]);
    let rows = server.logs_when(ID, |rows| refused(rows) >= 1).await;
    assert!(rows.iter().any(|r| r["message"].as_str().unwrap_or_default().contains("HTTP 401")), "{rows:?}");
    // Several syncs later (one a second), still one row.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    assert_eq!(refused(&server.logs(ID).await), 1);
    // Fixed, read again, then refused again: told again.
    mock.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    mock.require_headers(&[("APCA-API-KEY-ID", "revoked"), ("APCA-API-SECRET-KEY", "s3cret")]);
    server.logs_when(ID, |rows| refused(rows) == 2).await;
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tradier_market_orders_of_a_gtc_strategy_go_out_as_day_orders() {
    // Tradier answers a market order marked gtc with `MarketOrderIsGtc` (HTTP 200, `errors`): a strategy whose
    // limit entries rest gtc could neither enter at market nor close its position.
    let mock = Mock::start(Kind::Tradier).await;
    let (dirs, bots) = setup_with("brk-tr-gtc", &mock, None, |v| v["duration"] = json!("gtc"));
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    assert_eq!(mock.positions().len(), 1, "the market entry filled: {:?}", outbox(&server).await);
    wait_state(&server, "the synced position", |s| holds(s, "AAPL")).await;
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long" }).to_string();
    assert_eq!(post(&server, &close).await["status"], "processed");
    assert!(mock.positions().is_empty(), "the market close filled: {:?}", outbox(&server).await);
    // A gtc limit entry keeps its gtc; a gtc short sale is refused before anything is sent.
    let limit = json!({ "ticker": "MSFT", "action": "OPEN", "direction": "long", "order_type": "limit",
                        "price": "400.5" })
    .to_string();
    assert_eq!(post(&server, &limit).await["status"], "processed");
    let short = json!({ "ticker": "MSFT", "action": "OPEN", "direction": "short", "order_type": "limit",
                        "price": "401.5", "message_id": "short" })
    .to_string();
    let a = server.post(&token('a'), Some("application/json"), &short).await;
    assert_eq!(a.json()["status"], "rejected", "{}", a.body);
    assert!(a.body.contains("short sale"), "{}", a.body);
    assert_eq!(mock.orders().len(), 3, "open, close and the limit entry: {:?}", mock.orders());
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tradier_working_orders_past_the_first_page_are_in_the_state() {
    // Tradier lists 25 orders a page unless asked for more: the sync must read every page, or the orders
    // past the first (ours among them) drop out of the state and a CANCEL or MODIFY cannot find them.
    let mock = Mock::start(Kind::Tradier).await;
    mock.rest_by_hand("MSFT", 30);
    let (dirs, bots) = setup("brk-tr-pages", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    wait_state(&server, "the orders placed by hand", |s| working(s) == 30).await;
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let ours = mock.orders().last().unwrap().id.clone();
    let syncs = |m: &Mock| m.seen().iter().filter(|r| r.method == "GET" && r.target.contains("/orders")).count();
    let before = syncs(&mock);
    let deadline = Instant::now() + Duration::from_secs(20);
    while syncs(&mock) < before + 4 {
        assert!(Instant::now() < deadline, "no sync after the order");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = wait_state(&server, "our order on the second page", |s| working(s) == 31).await;
    assert!(s["working_orders"].as_array().unwrap().iter().any(|o| o["id"] == ours.as_str()), "{s}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schwab_open_filled_then_close_without_admin() {
    open_then_close(Kind::Schwab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tastytrade_open_filled_then_close_without_admin() {
    open_then_close(Kind::Tastytrade).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coinbase_open_filled_then_close_without_admin() {
    open_then_close(Kind::Coinbase).await;
    // The JWT of every request was verified by the mock (signature, claims, uri, nonce).
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_entry_filled_at_the_broker_cannot_be_modified_and_a_position_closed_by_hand_cannot_be_closed() {
    let (mock, _dirs, server) = start("brk-limit", Kind::Alpaca).await;
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    wait_state(&server, "the resting order", |s| working(s) == 1).await;
    let id = mock.orders()[0].id.clone();
    assert_eq!(state(&server).await["working_orders"][0]["id"], json!(id));

    mock.fill(&id);
    let s = wait_state(&server, "the fill", |s| working(s) == 0 && holds(s, "MSFT")).await;
    assert_eq!(s["positions"][0]["quantity"], "10");
    let modify = r#"{"ticker":"MSFT","action":"MODIFY","direction":"long","price":401.50}"#;
    assert_eq!(post(&server, modify).await["status"], "rejected");
    assert!(logged(&server, "WARN", "no working LONG order in MSFT to modify").await, "{:?}", server.logs(ID).await);
    assert_eq!(mock.orders().len(), 1, "nothing sent for the MODIFY");

    mock.close_by_hand("MSFT");
    wait_state(&server, "the position closed by hand", |s| !holds(s, "MSFT")).await;
    let close = r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#;
    assert_eq!(post(&server, close).await["status"], "rejected");
    assert!(logged(&server, "WARN", "nothing to close").await, "{:?}", server.logs(ID).await);
    assert_eq!(mock.orders().len(), 1, "nothing sent for the CLOSE");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schwab_access_tokens_are_refreshed_across_expiry_and_rotated_refresh_tokens_kept_private() {
    let mock = Mock::start(Kind::Schwab).await;
    mock.set_access_lifetime(Duration::from_secs(2));
    let (dirs, bots) = setup("brk-schwab-refresh", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    assert_eq!(mock.orders().len(), 2);
    assert!(mock.token_requests() >= 2, "tokens renewed across the 2 s expiry: {}", mock.token_requests());
    let unauthorized = mock.seen().iter().filter(|r| r.method == "POST" && r.status == 401).count();
    assert_eq!(unauthorized, 0, "no order was sent with an expired token");

    // The rotated refresh token is kept for the next start in a file only the owner reads, and never logged.
    let dir = dirs.data.join("sessions");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1);
    let kept: Value = serde_json::from_slice(&std::fs::read(files[0].path()).unwrap()).unwrap();
    let current = mock.state.lock().unwrap().refresh_token.clone();
    assert_eq!(kept["refresh_token"], json!(current));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(files[0].metadata().unwrap().permissions().mode() & 0o777, 0o600);
    }
    let text = server.stop();
    assert!(!text.contains(&current) && !text.contains("access-"), "a token in the server's output");

    // After a restart the kept token is used: the configured one was retired by the rotation.
    assert_ne!(current, "refresh-0");
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let again = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","message_id":"after-restart"}"#;
    assert_eq!(post(&server, again).await["status"], "processed");
    assert_eq!(mock.orders().len(), 3, "{:?}", mock.seen());
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_schwab_refresh_token_stops_the_bot_with_a_clear_error() {
    let mock = Mock::start(Kind::Schwab).await;
    mock.set_access_lifetime(Duration::from_secs(2));
    let (dirs, bots) = setup("brk-schwab-dead", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    // The 7 days are over: the refresh token dies, and the access token runs out in its own time.
    mock.expire_refresh_token();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rows = {
        post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await;
        drained(&server).await
    };
    assert_eq!(rows[0]["status"], "failed", "{rows:?}");
    assert!(logged(&server, "ERROR", "refused the refresh token").await, "{:?}", server.logs(ID).await);
    assert!(mock.orders().is_empty(), "nothing reached the broker");
    let asked = mock.token_requests();
    // Stopped: later deliveries fail at once with the same message, without asking the token endpoint again.
    post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(mock.token_requests(), asked, "a stopped session does not retry the refresh");
    let text = server.stop();
    assert!(text.contains("ERROR") && text.contains("the bot is stopped"), "{text}");
}

/// Schwab's refresh token dies after seven days, often over a weekend with nothing to deliver: the sync's
/// renewal found it refused and stopped the bot with a line in the server's log alone, and the first word to the
/// trader was the next order (an exit, perhaps) failing. The stop is an ERROR row and a failure notification at
/// once, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_stopped_by_the_sync_is_reported_at_once_and_once() {
    let receiver = server_support::receiver::Receiver::start().await;
    let mock = Mock::start(Kind::Schwab).await;
    mock.set_access_lifetime(Duration::from_secs(2));
    let (dirs, bots) = setup("brk-schwab-stop-told", &mock, None);
    let url = dirs.root.join("hook-url");
    std::fs::write(&url, format!("http://127.0.0.1:{}/api/webhooks/1/secret\n", receiver.port)).unwrap();
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, json!({ ID: { "url": { "file": url } } }).to_string()).unwrap();
    let server =
        Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--notifications", notifications.to_str().unwrap()]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    mock.expire_refresh_token();
    // No alert: the sync alone finds it.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !receiver.taken().iter().any(|t| t.contains("stopped") && t.contains("Log in")) {
        assert!(Instant::now() < deadline, "no notification of the stop: {:?}", receiver.taken());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(logged(&server, "ERROR", "refused the refresh token").await, "{:?}", server.logs(ID).await);
    // Syncs go on failing; the stop is told once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let told = receiver.taken().iter().filter(|t| t.contains("stopped")).count();
    assert_eq!(told, 1, "{:?}", receiver.taken());
    let rows = server.logs(ID).await;
    let errors = rows
        .iter()
        .filter(|l| l["level"] == "ERROR" && l["message"].as_str().unwrap_or("").contains("stopped"))
        .count();
    assert_eq!(errors, 1, "{rows:?}");
    server.stop();
}

/// Schwab's edge server refuses the token endpoint for a while with its HTML "Access Denied" page (403): that is
/// not the token service saying the refresh token is dead. It stopped the bot for good (every order failed,
/// exits included, until a restart); the renewal is tried again, and the orders go out once it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_servers_403_at_the_token_endpoint_does_not_stop_the_bot() {
    let mock = Mock::start(Kind::Schwab).await;
    mock.set_access_lifetime(Duration::from_secs(2));
    let (dirs, bots) = setup("brk-schwab-edge", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    mock.token_edge_403(2);
    // The access token runs out within 2 s: the renewals meet both refusals.
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.state.lock().unwrap().token_edge_403 > 0 {
        assert!(Instant::now() < deadline, "the token endpoint was not asked again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.orders().is_empty() {
        assert!(Instant::now() < deadline, "the order never went out: {:?}", server.logs(ID).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!logged(&server, "ERROR", "refused the refresh token").await, "{:?}", server.logs(ID).await);
    assert_eq!(post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    let deadline = Instant::now() + Duration::from_secs(20);
    while mock.orders().len() < 2 {
        assert!(Instant::now() < deadline, "the second order never went out: {:?}", server.logs(ID).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = server.stop();
    assert!(!text.contains("the bot is stopped"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tastytrade_401_renews_the_access_token() {
    let (mock, _dirs, server) = start("brk-tasty-401", Kind::Tastytrade).await;
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    let before = mock.token_requests();
    // The broker ends the session early: the next read gets a 401, and the session renews its token.
    mock.expire_access_tokens();
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.token_requests() == before {
        assert!(Instant::now() < deadline, "no new token after the 401");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The read is sent once more with the new token; on a loaded machine it may come a moment after the renewal.
    let read_again = || {
        let seen = mock.seen();
        let first_401 = seen.iter().position(|r| r.status == 401).expect("a 401 was answered");
        let again = seen[first_401..].iter().any(|r| r.method == "GET" && r.status == 200);
        (again, seen)
    };
    while !read_again().0 {
        assert!(Instant::now() < deadline, "reads succeed again: {:?}", read_again().1);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    assert_eq!(mock.orders().len(), 1);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_answered_401_renews_the_token_and_is_sent_once_more() {
    let (mock, _dirs, server) = start("brk-tasty-order-401", Kind::Tastytrade).await;
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    let before = mock.token_requests();
    // The broker refuses the order write with a 401 (it did not take it) and voids the access token.
    mock.faults([Fault::Unauthorized]);
    let rows = {
        post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await;
        drained(&server).await
    };
    assert_eq!(rows[0]["status"], "done", "{rows:?}");
    assert_eq!(mock.orders().len(), 1, "the order is at the broker once");
    assert!(mock.token_requests() > before, "a new access token was minted after the 401");
    let writes: Vec<u16> =
        mock.seen().iter().filter(|r| r.method == "POST" && !r.target.contains("token")).map(|r| r.status).collect();
    assert_eq!(writes.len(), 2, "the write answered 401 was sent once more: {writes:?}");
    assert_eq!(writes[0], 401, "{writes:?}");
    assert!((200..300).contains(&writes[1]), "{writes:?}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_delivery_has_the_account_read_back_soon_after() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-poke", &mock, None);
    // The periodic sync is an hour away: only the read after each delivery can show the broker's changes.
    let mut v: Value = serde_json::from_slice(&std::fs::read(&bots).unwrap()).unwrap();
    v[BOT]["sync_interval_secs"] = json!(3600);
    std::fs::write(&bots, v.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    assert_eq!(post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    wait_state(&server, "the position", |s| holds(s, "MSFT")).await;
    // Closed at the broker by hand: nothing tells the server until it reads the account again.
    mock.close_by_hand("MSFT");
    let reads = mock.seen().iter().filter(|r| r.method == "GET").count();
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    let s = wait_state(&server, "the hand-closed position gone after the AAPL delivery", |s| !holds(s, "MSFT")).await;
    assert!(holds(&s, "AAPL"), "{s}");
    assert!(mock.seen().iter().filter(|r| r.method == "GET").count() > reads, "the account was read again");
    server.stop();
}

/// The read right after a delivery comes within milliseconds, before a broker whose list lags its writes lists
/// the new order: the sync dropped it from the state, so a CANCEL found no working order (and the order could
/// still fill). An order the list lacks is now read back by id, and kept while it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_the_broker_lists_late_stays_in_the_state_and_can_be_cancelled() {
    let (mock, _dirs, server) = start("brk-listlate", Kind::Alpaca).await;
    mock.list_late(Duration::from_secs(3));
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let id = mock.orders()[0].id.clone();
    // The delivery's own read of the account, with the order not listed yet.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !mock.seen().iter().any(|r| r.method == "GET" && r.target == format!("/v2/orders/{id}")) {
        assert!(Instant::now() < deadline, "the unlisted order was never read back: {:?}", mock.seen());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s = state(&server).await;
    assert_eq!(s["working_orders"][0]["id"], json!(id), "the order is still tracked: {s}");
    // Partly filled while still unlisted: the next read keeps what remains and what filled, as the list would
    // (kept at its first size, a CLOSE's cancel of it read the fills as filled "before it took effect").
    mock.fill_part(&id, "4");
    let reads = mock.seen().len();
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"buy"}"#).await["status"], "processed");
    let s = wait_state(&server, "the partial fill", |s| s["working_orders"][0]["filled"] == "4").await;
    assert_eq!(s["working_orders"][0]["quantity"], "6", "{s}");
    assert!(mock.seen().len() > reads);
    let cancel = r#"{"ticker":"MSFT","action":"CANCEL","direction":"long"}"#;
    assert_eq!(post(&server, cancel).await["status"], "processed");
    assert_eq!(mock.orders()[0].status, "cancelled", "{:?}\n{:?}", mock.seen(), outbox(&server).await);
    let rows = outbox(&server).await;
    assert!(rows.iter().all(|r| r["status"] == "done"), "the cancel confirmed, nothing held back: {rows:?}");
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coinbase_requests_carry_a_jwt_the_mock_verifies() {
    let (mock, _dirs, server) = start("brk-coinbase-jwt", Kind::Coinbase).await;
    assert_eq!(
        post(&server, r#"{"ticker":"BTC/USD","action":"OPEN","direction":"long"}"#).await["status"],
        "processed"
    );
    assert_eq!(mock.orders().len(), 1);
    assert!(mock.jwt_checked() >= 2, "reads and the order were verified: {}", mock.jwt_checked());
    // Another key: the mock refuses the signature and nothing is taken.
    let (_, other) = test_ec_key();
    mock.require_jwt("organizations/o1/apiKeys/k1", other);
    let rows = {
        post(&server, r#"{"ticker":"BTC/USD","action":"OPEN","direction":"long","message_id":"2"}"#).await;
        drained(&server).await
    };
    assert!(rows.iter().any(|r| r["status"] == "failed"), "{rows:?}");
    assert_eq!(mock.orders().len(), 1);
    server.stop();
}

/// The server reads each allowed pair's product increments from the broker and the builder rounds to them: a
/// fixed_notional of 100 at 0.3 a DOGE is 333.3 coins at DOGE-USD's base increment of 0.1, not 333.33333333.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coinbase_sizes_are_rounded_to_the_products_base_increment() {
    let mock = Mock::start(Kind::Coinbase).await;
    let (pem, public) = test_ec_key();
    mock.require_jwt("organizations/o1/apiKeys/k1", public);
    let (dirs, bots) = setup("brk-coinbase-increments", &mock, Some(&pem));
    let mut v = snapshot(ID, &token('a'));
    v["asset_class"] = json!("crypto");
    v["order_type"] = json!("market");
    v["duration"] = json!("gtc");
    v["allowed_instruments"] = json!(["BTC/USD", "DOGEUSD", "*"]);
    v["market"] = json!({ "quotes": { "DOGE/USD": { "bid": "0.2999", "ask": "0.3001" } } });
    v["bots"] = json!([{ "id": BOT, "broker": "coinbase", "account_id": Kind::Coinbase.account(),
                         "sizing": { "fixed_notional": "100" } }]);
    dirs.write("live.json", &v);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    // The sync task reads the products, puts them into the snapshot, then reads the account: an account read
    // after both product reads means the snapshot carries the increments.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let seen = mock.seen();
        let at = |product: &str| {
            seen.iter().position(|r| r.method == "GET" && r.target.ends_with(product) && r.status == 200)
        };
        if let (Some(doge), Some(btc)) = (at("/products/DOGE-USD"), at("/products/BTC-USD")) {
            if seen.iter().skip(doge.max(btc)).any(|r| r.target.starts_with("/api/v3/brokerage/accounts")) {
                assert!(!seen.iter().any(|r| r.target.contains("/products/*")), "`*` names no product");
                break;
            }
        }
        assert!(Instant::now() < deadline, "the products were not read: {seen:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let open = r#"{"ticker":"DOGEUSD","action":"OPEN","direction":"long"}"#;
    assert_eq!(post(&server, open).await["status"], "processed");
    let orders = mock.orders();
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!((orders[0].symbol.as_str(), orders[0].qty.to_string()), ("DOGE-USD", "333.3".to_string()));
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bot_whose_state_cannot_be_read_gets_one_warn_per_staleness_episode() {
    let mock = Mock::start(Kind::Tradier).await;
    let (dirs, bots) = setup("brk-stale", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--stale-state-secs", "1"]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    wait_state(&server, "the synced position", |s| holds(s, "AAPL")).await;
    let stale = |logs: &[Value]| {
        logs.iter()
            .filter(|l| l["level"] == "WARN" && l["message"].as_str().unwrap_or_default().contains("last read"))
            .count()
    };
    mock.reads_down(true);
    assert!(logged(&server, "WARN", "were last read from the broker").await, "{:?}", server.logs(ID).await);
    // Several more failed reads (every second) in the same episode: still one row.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(stale(&server.logs(ID).await), 1);
    // The state the bot had stays: decisions use the last known state.
    assert!(holds(&state(&server).await, "AAPL"));
    // Reads come back, then fail again: a second episode, a second row.
    mock.reads_down(false);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(stale(&server.logs(ID).await), 1);
    mock.reads_down(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    while stale(&server.logs(ID).await) < 2 {
        assert!(Instant::now() < deadline, "no second staleness row");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mocks_lose_delay_cut_and_duplicate_order_writes() {
    let (mock, _dirs, server) = start("brk-faults", Kind::Alpaca).await;
    // Lost after taking the order: the server sends it again, Alpaca refuses the repeated client order id,
    // and the order is there once.
    mock.faults([Fault::Lose]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    assert_eq!(mock.orders().len(), 1);
    let posts = |m: &Mock| m.seen().iter().filter(|r| r.method == "POST").count();
    assert_eq!(posts(&mock), 2, "{:?}", mock.seen());
    // Cut before taking it: sent again and taken once.
    mock.faults([Fault::Cut]);
    post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long"}"#).await;
    assert_eq!(mock.orders().len(), 2);
    assert_eq!(posts(&mock), 4);
    // Delayed: taken, answered late (within the bot's timeout).
    mock.faults([Fault::Delay(Duration::from_millis(300))]);
    let started = Instant::now();
    post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long","message_id":"3"}"#).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(mock.orders().len(), 3);
    // Duplicated by the broker: two orders for one request.
    mock.faults([Fault::Duplicate]);
    post(&server, r#"{"ticker":"MSFT","action":"OPEN","direction":"long","message_id":"4"}"#).await;
    let orders = mock.orders();
    assert_eq!(orders.len(), 5);
    assert_eq!(orders[3].client_id, orders[4].client_id);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resting_order_filled_at_the_broker_is_notified_once() {
    let receiver = server_support::receiver::Receiver::start().await;
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-fill-notify", &mock, None);
    let url_file = dirs.root.join("hook-url");
    std::fs::write(&url_file, format!("http://127.0.0.1:{}/hook\n", receiver.port)).unwrap();
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, json!({ ID: { "url": { "file": url_file } } }).to_string()).unwrap();
    let server =
        Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--notifications", notifications.to_str().unwrap()]);
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    wait_state(&server, "the resting order", |s| working(s) == 1).await;
    let id = mock.orders()[0].id.clone();

    mock.fill(&id);
    wait_state(&server, "the fill", |s| working(s) == 0 && holds(s, "MSFT")).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let fills = || receiver.taken().into_iter().filter(|t| t.contains("filled at the broker")).collect::<Vec<_>>();
    while fills().is_empty() {
        assert!(Instant::now() < deadline, "no fill message: {:?}", receiver.taken());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Later syncs see the same state: the fill is reported once.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let f = fills();
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].contains(&id) && f[0].contains("MSFT") && f[0].contains("entry"), "{}", f[0]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schwab_order_cut_before_the_broker_took_it_is_not_taken_for_an_earlier_identical_order() {
    let (mock, _dirs, server) = start("brk-schwab-twin", Kind::Schwab).await;
    let open =
        |id: &str| json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": id }).to_string();
    assert_eq!(post(&server, &open("first")).await["status"], "processed");
    assert_eq!(mock.orders().len(), 1);
    // The same terms a moment later, cut before Schwab took it: Schwab keeps no client order id, so the lookup
    // by terms sees the first order, which is another row's.
    mock.faults([Fault::Cut]);
    assert_eq!(post(&server, &open("second")).await["status"], "processed");
    let rows = drained(&server).await;
    let (orders, second) = (mock.orders(), &rows[0]);
    // Placed after all (and done), or left to the trader as unknown: never "done" on the strength of the first
    // order, never failed while it stands at the broker, never placed twice.
    match orders.len() {
        2 => assert_eq!(second["status"], "done", "placed, so not to be re-entered by hand: {second}"),
        1 => {
            assert_eq!(second["status"], "failed", "the second order was never placed, yet its row is {second}");
            let why = second["result"].as_str().unwrap_or_default();
            assert!(why.contains("unknown whether the broker has it"), "{second}");
        }
        n => panic!("{n} orders at the broker for two alerts: {orders:?}"),
    }
    server.stop();
}

/// A market order's fill that shows at the broker a moment after the order was taken was looked for once, by the
/// sync the delivery pokes (within milliseconds), and then not before the next interval: a CLOSE or reversal in
/// between was decided as flat. The sync reads the account again a couple of seconds after each delivery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_fill_that_shows_late_is_read_soon_after_the_delivery() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-market-late", &mock, None);
    let mut file: Value = serde_json::from_str(&std::fs::read_to_string(&bots).unwrap()).unwrap();
    file[BOT]["sync_interval_secs"] = json!(300);
    std::fs::write(&bots, file.to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    mock.market_fills_late(Duration::from_millis(500));
    post(&server, r#"{"ticker":"AAPL","action":"buy","order_type":"market","message_id":"late"}"#).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let st = state(&server).await;
        let held = st["positions"].as_array().is_some_and(|p| p.iter().any(|p| p["instrument"] == "AAPL"));
        if held {
            break;
        }
        assert!(Instant::now() < deadline, "the fill was never read (next sync in 300 s): {st}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(mock.positions().get("AAPL").map(ToString::to_string).as_deref(), Some("10"));
    server.stop();
}

/// The same, with the price written with other digits (`190.50`, then `190.5`): one price to the lookup by terms,
/// two to the check for other rows, which compared bodies byte for byte. The first order was taken for the
/// second's, whose row was marked done: an order never placed, reported as placed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schwab_order_cut_before_the_broker_took_it_is_not_taken_for_an_earlier_one_of_the_same_price_in_other_digits(
) {
    let (mock, _dirs, server) = start("brk-schwab-twin-digits", Kind::Schwab).await;
    let open = |id: &str, price: &str| {
        format!(
            r#"{{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":{price},"message_id":"{id}"}}"#
        )
    };
    assert_eq!(post(&server, &open("first", "190.50")).await["status"], "processed");
    assert_eq!(mock.orders().len(), 1);
    mock.faults([Fault::Cut]);
    assert_eq!(post(&server, &open("second", "190.5")).await["status"], "processed");
    let rows = drained(&server).await;
    let (orders, second) = (mock.orders(), &rows[0]);
    match orders.len() {
        2 => assert_eq!(second["status"], "done", "{second}"),
        1 => {
            assert_eq!(second["status"], "failed", "the second order was never placed, yet its row is {second}");
            let why = second["result"].as_str().unwrap_or_default();
            assert!(why.contains("unknown whether the broker has it"), "{second}");
        }
        n => panic!("{n} orders at the broker for two alerts: {orders:?}"),
    }
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_whose_answer_was_lost_is_not_called_refused_when_its_resend_is() {
    let (mock, _dirs, server) = start("brk-lost-then-refused", Kind::Alpaca).await;
    // Taken and the answer lost; the resend refused on a check that comes before the repeated client order id
    // (the first order used the buying power): the order stands at the broker all the same.
    mock.faults([Fault::Lose, Fault::Refuse(403, "insufficient buying power")]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    let orders = mock.orders();
    assert_eq!(orders.len(), 1, "{orders:?}");
    let rows = drained(&server).await;
    assert_eq!(rows[0]["status"], "done", "the order is at the broker: {}", rows[0]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_sent_long_after_its_alert_is_looked_up_around_its_send_after_a_crash() {
    let (mock, dirs, server) = start("brk-late-send", Kind::Schwab).await;
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    assert_eq!(mock.orders().len(), 1);
    server.stop();
    // As if the alert had come ten minutes before the send (its limit order waited for a broker that was down)
    // and the server had died before recording the send: the row is left `sending`, and Schwab entered the
    // order just now.
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.execute_batch(
        "UPDATE outbox SET status = 'sending', result = NULL, done_ms = NULL, created_ms = created_ms - 600000",
    )
    .unwrap();
    drop(db);
    let bots = dirs.root.join("bots.json");
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let rows = drained(&server).await;
    let orders = mock.orders();
    assert_eq!(orders.len(), 1, "the order was placed a second time: {orders:?}");
    assert_eq!(rows[0]["status"], "done", "{}", rows[0]);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_answered_429_is_sent_again_once_the_broker_takes_requests_again() {
    let (mock, _dirs, server) = start("brk-429", Kind::Alpaca).await;
    // Too many requests: the broker did not look at the order, so sending it again cannot double it.
    mock.faults([Fault::Refuse(429, "too many requests")]);
    assert_eq!(post(&server, r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#).await["status"], "processed");
    let rows = drained(&server).await;
    assert_eq!(rows[0]["status"], "done", "{}", rows[0]);
    assert_eq!(mock.orders().len(), 1, "{:?}", mock.orders());
    server.stop();
}

/// A broker that takes an order only after its client gave up (the answer lost, the connection cut, a proxy's
/// 502 for a backend still at it) lists it late. Looked up at once it was "not there", so the order was sent
/// again and taken twice at every broker that does not refuse a repeated client order id.
async fn an_order_taken_late_after_its_send_was_cut_is_found_not_sent_again(kind: Kind, name: &str) {
    let (mock, _dirs, server) = start(name, kind).await;
    mock.faults([Fault::TakeLate(Duration::from_millis(600))]);
    let open = json!({ "ticker": ticker(kind), "action": "OPEN", "direction": "long" }).to_string();
    let a = server.post(&token('a'), Some("application/json"), &open).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained(&server).await;
    // Anything still on its way (a resend, the late order) lands within this.
    tokio::time::sleep(Duration::from_millis(800)).await;
    let orders = mock.orders();
    assert_eq!(orders.len(), 1, "one alert, one order: {orders:?}");
    assert_eq!(rows[0]["status"], "done", "{}", rows[0]);
    let posts = mock.seen().iter().filter(|r| r.method == "POST" && !r.target.contains("oauth")).count();
    assert_eq!(posts, 1, "not sent again: {:?}", mock.seen());
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tradier_order_taken_late_is_found_not_sent_again() {
    an_order_taken_late_after_its_send_was_cut_is_found_not_sent_again(Kind::Tradier, "brk-late-tradier").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schwab_order_taken_late_is_found_not_sent_again() {
    an_order_taken_late_after_its_send_was_cut_is_found_not_sent_again(Kind::Schwab, "brk-late-schwab").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tastytrade_order_taken_late_is_found_not_sent_again() {
    an_order_taken_late_after_its_send_was_cut_is_found_not_sent_again(Kind::Tastytrade, "brk-late-tasty").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coinbase_order_taken_late_is_found_not_sent_again() {
    an_order_taken_late_after_its_send_was_cut_is_found_not_sent_again(Kind::Coinbase, "brk-late-coinbase").await;
}

/// A sync read the positions, then the working orders: an entry filled between the two reads was in neither,
/// and the state said flat with nothing working until the next sync (a CLOSE then refused, the exit lost; a
/// filled exit read the same way left the position to be closed a second time). The orders are read first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_filled_between_a_syncs_reads_is_never_in_neither() {
    let (mock, _dirs, server) = start("brk-sync-order", Kind::Alpaca).await;
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    wait_state(&server, "the resting order", |s| working(s) == 1).await;
    let id = mock.orders()[0].id.clone();
    mock.fill_after_next_positions_read(&id);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = state(&server).await;
        assert!(
            working(&s) == 1 || holds(&s, "MSFT"),
            "the filled entry is in neither the orders nor the positions: {s}"
        );
        if holds(&s, "MSFT") {
            break;
        }
        assert!(Instant::now() < deadline, "the fill was never read: {s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop();
}

/// An uncertain send whose order the broker took and then refused: the lookup finds it, rejected. It was
/// recorded as accepted and resting ("found after an uncertain send"), the broker's refusal never shown and a
/// later MODIFY or CANCEL aimed at a dead order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_found_rejected_after_an_uncertain_send_is_a_refusal() {
    let (mock, _dirs, server) = start("brk-found-rejected", Kind::Tradier).await;
    mock.faults([Fault::LoseRejected]);
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(post(&server, limit).await["status"], "processed");
    let rows = drained(&server).await;
    assert_eq!(rows[0]["status"], "failed", "{}", rows[0]);
    assert!(rows[0]["result"].as_str().unwrap_or_default().contains("refused by the broker"), "{}", rows[0]);
    assert_eq!(mock.orders().len(), 1, "not sent again: {:?}", mock.orders());
    let s = state(&server).await;
    assert_eq!(working(&s), 0, "a rejected order is no working order: {s}");
    server.stop();
}

/// Alpaca refuses a repeated client order id, so an uncertain send there is simply sent again; but when the
/// order's deadline passes first, it is looked up before it is called expired. That lookup ran at once: an
/// order the broker took late was "not there", the row expired and the trader told it never traded, while the
/// position opened. The lookup now waits a settle after the last uncertain attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alpaca_order_taken_late_past_its_deadline_is_found_not_expired() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-late-expiry", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "1"]);
    mock.faults([Fault::TakeLate(Duration::from_millis(1500)), Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut]);
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(mock.orders().len(), 1, "{:?}", mock.orders());
    assert_eq!(rows[0]["status"], "done", "the broker has the order: {}", rows[0]);
    server.stop();
}

/// A market order's deadline was checked only before each attempt: an attempt that then waited for a slow token
/// renewal (or a 401's renewal and resend) went out seconds past it, into a market that had moved. Once its
/// credentials are ready a request goes out only within its deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_order_is_not_sent_past_its_deadline_after_a_slow_token_renewal() {
    let mock = Mock::start(Kind::Schwab).await;
    let (dirs, bots) = setup("brk-slow-token", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "2"]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    mock.slow_tokens(Duration::from_secs(4));
    mock.expire_access_tokens();
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(mock.orders().is_empty(), "sent past its deadline: {:?}", mock.orders());
    assert_eq!(rows[0]["status"], "expired", "{}", rows[0]);
    server.stop();
}

/// Alpaca still working on the first attempt (its answer lost) refuses the resend on a check that comes before
/// its duplicate check (the buying power the first one holds): the order was looked up at once, not listed yet,
/// and the row failed "refused by the broker" while the order stood (a trader re-entering doubled it). The
/// lookup now waits the bot's settle, as the one at a deadline does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alpaca_order_taken_late_whose_resend_is_refused_is_found_not_failed() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("brk-late-refused", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    mock.faults([Fault::TakeLate(Duration::from_millis(1500)), Fault::Refuse(403, "insufficient buying power")]);
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    // The first attempt's order is taken by now whatever the row says.
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert_eq!(mock.orders().len(), 1, "{:?}", mock.orders());
    assert_eq!(rows[0]["status"], "done", "the broker has the order: {}", rows[0]);
    server.stop();
}

async fn drained_or_expired(server: &Server) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = outbox(server).await;
        if rows.iter().all(|r| ["done", "failed", "expired"].contains(&r["status"].as_str().unwrap_or_default())) {
            return rows;
        }
        assert!(Instant::now() < deadline, "the outbox did not drain: {rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Schwab's token endpoint answers its edge "Access Denied" page (an outage) while the access token, inside its
/// renewal margin, is still good: a market order goes out with that token before its deadline. The failed early
/// renewal threw the token away, and the order expired unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_order_goes_out_with_the_still_good_token_while_the_early_renewal_fails() {
    let mock = Mock::start(Kind::Schwab).await;
    // A 20 s token, renewed 10 s early (half its life).
    mock.set_access_lifetime(Duration::from_secs(20));
    let (dirs, bots) = setup("brk-renewal-outage", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "5"]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    let minted = Instant::now();
    mock.token_edge_403(1_000_000);
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(minted.elapsed())).await;
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    assert!(minted.elapsed() < Duration::from_secs(20), "the token ran out during the test");
    assert_eq!(rows[0]["status"], "done", "the order was held though its token was good: {}", rows[0]);
    assert_eq!(mock.orders().len(), 1);
    server.stop();
}

/// One Alpaca bot's bots file sending it to `base`.
fn alpaca_bots_at(dirs: &Dirs, base: &str) -> PathBuf {
    let bot = json!({ "delivery": "http", "base_url": base, "sync_interval_secs": 1,
                      "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                   "APCA-API-SECRET-KEY": { "value": "s3cret" } } });
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, json!({ BOT: bot }).to_string()).unwrap();
    path
}

/// "Paper to real" at Alpaca: the bot's `base_url` moves from the paper-trading endpoint to the live one, which
/// takes the account from other keys and names none in its paths. The state read from the paper account named
/// the same broker and `account_id`, so it was taken for the live account at start: until the live account was
/// read, a CLOSE sold the paper account's 10 shares there, leaving it short. A state read at another target is
/// not used now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_read_at_alpacas_paper_endpoint_is_not_used_at_the_live_one() {
    let paper_api = Mock::start(Kind::Alpaca).await;
    let live_api = Mock::start(Kind::Alpaca).await;
    let dirs = Dirs::new("brk-paper-to-live");
    let mut v = snapshot(ID, &token('a'));
    v["allowed_instruments"] = json!(["AAPL"]);
    v["bots"] =
        json!([{ "id": BOT, "broker": "alpaca", "account_id": "PA0000000", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("live.json", &v);
    let bots = alpaca_bots_at(&dirs, &paper_api.base_url());
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(server.post(&token('a'), Some("application/json"), &open).await.json()["status"], "processed");
    drained_or_expired(&server).await;
    wait_state(&server, "the paper account's position", |s| holds(s, "AAPL")).await;
    server.stop();
    // The same bot at the live endpoint, whose account holds nothing and cannot be read yet.
    let bots = alpaca_bots_at(&dirs, &live_api.base_url());
    live_api.reads_down(true);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long" }).to_string();
    let a = server.post(&token('a'), Some("application/json"), &close).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.stop();
    assert_eq!(a.json()["status"], "rejected", "{}", a.body);
    assert!(
        live_api.orders().is_empty(),
        "the paper account's quantity was sold at the live account: {:?}",
        live_api.orders()
    );
}

/// Schwab's token endpoint is slow (6 s) while the access token, inside its renewal margin, still has 8 s left: a
/// market order arriving meanwhile goes out at once with that token. The early renewal held the session's lock for
/// as long as the endpoint took, every request of the bot waited behind it, and the order expired unsent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_early_renewal_does_not_hold_a_market_order_that_has_a_good_token() {
    let mock = Mock::start(Kind::Schwab).await;
    // A 20 s token, renewed 10 s early (half its life).
    mock.set_access_lifetime(Duration::from_secs(20));
    let (dirs, bots) = setup("brk-slow-renewal", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "3"]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    let minted = Instant::now();
    // Renewals from now on take 6 s (well within the bot's 10 s timeout: they succeed).
    mock.slow_tokens(Duration::from_secs(6));
    // Inside the margin (10 s after the mint) the sync starts the early renewal; the token is good until 20 s.
    tokio::time::sleep(Duration::from_secs(12).saturating_sub(minted.elapsed())).await;
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    assert!(minted.elapsed() < Duration::from_secs(20) || rows[0]["status"] != "done", "the token ran out");
    assert_eq!(
        rows[0]["status"], "done",
        "the order was held behind the early renewal though its token was good: {}",
        rows[0]
    );
    assert_eq!(mock.orders().len(), 1);
    server.stop();
}

/// The server is stopped (SIGTERM, a clean stop) while the state sync's renewal is at the token endpoint, which
/// has taken the refresh token and rotated it: the stop waits for the renewal, which writes the rotated token
/// down, and the restarted bot sends. The stop did not wait: the rotated token was never written down, and after
/// the restart the session renewed with the retired one, was refused and stopped the bot until a new login.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_during_a_renewal_keeps_the_rotated_refresh_token() {
    let mock = Mock::start(Kind::Schwab).await;
    mock.set_access_lifetime(Duration::from_secs(2));
    let (dirs, bots) = setup("brk-stop-renewal", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    wait_state(&server, "a first sync", |_| mock.token_requests() >= 1).await;
    let before = mock.token_requests();
    // The next renewal is answered 3 s after the endpoint took it (and rotated the refresh token).
    mock.slow_tokens(Duration::from_secs(3));
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.token_requests() == before {
        assert!(Instant::now() < deadline, "no renewal");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let rotated_to = mock.state.lock().unwrap().refresh_token.clone();
    server.stop();
    let kept: Value = serde_json::from_slice(
        &std::fs::read(std::fs::read_dir(dirs.data.join("sessions")).unwrap().flatten().next().unwrap().path())
            .unwrap(),
    )
    .unwrap();
    mock.slow_tokens(Duration::ZERO);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let a = server
        .post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let rows = drained_or_expired(&server).await;
    assert_eq!(
        rows[0]["status"], "done",
        "the bot stopped after a clean restart: kept {} while the endpoint rotated to {rotated_to}: {}",
        kept["refresh_token"], rows[0]
    );
    server.stop();
}

/// Alpaca's keys pick the account (`account_id` is a label there, which the core cannot check): two bots of one
/// strategy given the same base URL and keys trade one account. Loaded, each bot's sync read the whole account
/// as its own, and one CLOSE sold the position twice (the account ended short 20). The strategy is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_bots_of_a_strategy_on_the_same_keys_are_refused() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, _) = setup_with("two-bots-one-account", &mock, None, |v| {
        v["bots"] = json!([
            { "id": "b", "broker": "alpaca", "account_id": "ACC1", "sizing": { "fixed_quantity": "10" } },
            { "id": "b2", "broker": "alpaca", "account_id": "ACC1-big", "sizing": { "fixed_quantity": "10" } }
        ]);
    });
    // The same entry (base URL and keys) for both bots.
    let secret = dirs.root.join("alpaca-secret");
    let entry = json!({ "delivery": "http", "base_url": mock.base_url(), "sync_interval_secs": 1,
        "headers": { "APCA-API-KEY-ID": { "value": "key-id" }, "APCA-API-SECRET-KEY": { "file": secret } } });
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, json!({ "b": entry.clone(), "b2": entry }).to_string()).unwrap();
    let server = Server::start(&dirs, &["--bots", path.to_str().unwrap()]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    let answered = server.post(&token('a'), Some("application/json"), &open).await;
    let stderr = server.stop();
    assert_eq!(answered.status, 404, "the strategy was loaded: {}", answered.body);
    assert!(mock.orders().is_empty(), "{:?}", mock.orders());
    assert!(
        stderr.contains(r#"`bots[1]` "b2" trades the same alpaca account as bot "b""#),
        "the ERROR names both bots: {stderr}"
    );
}

/// The bots file is keyed by bot id, so two strategies naming bot `b` trade one account. Strategy `other`, which
/// never bought, was handed `live`'s 10 AAPL by its sync, and its CLOSE sold them. Both files are there at start:
/// neither has traded yet, so the first in name order (`live.json`) loads and `other` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_whose_bot_shares_another_strategys_account_and_instruments_is_refused() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("bot-two-strategies", &mock, None);
    let mut other = snapshot("other", &token('c'));
    other["allowed_instruments"] = json!(["nasdaq:aapl"]);
    other["bots"] =
        json!([{ "id": BOT, "broker": "alpaca", "account_id": "ACC1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("other.json", &other);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    assert_eq!(mock.positions().get("AAPL").map(ToString::to_string).as_deref(), Some("10"));
    // Time for strategy `other`'s sync, were it loaded, to read the account.
    wait_state(&server, "a sync", |s| holds(s, "AAPL")).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long" }).to_string();
    let answered = server.post(&token('c'), Some("application/json"), &close).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let positions = mock.positions();
    let stderr = server.stop();
    assert_eq!(
        positions.get("AAPL").map(ToString::to_string).as_deref(),
        Some("10"),
        "strategy `other` (which bought nothing) was answered {} and sold strategy `live`'s shares: {:?}",
        answered.body,
        mock.orders()
    );
    assert_eq!(answered.status, 404, "strategy `other` is not loaded: {}", answered.body);
    assert!(
        stderr.contains(r#"bot "b" of strategy "other" trades the same alpaca account as bot "b" of strategy "live""#),
        "the ERROR names both strategies and bots: {stderr}"
    );
}

/// Two strategies may share an account when their instruments cannot overlap: each one's sync keeps its own
/// instruments, so neither is handed the other's position and a CLOSE sells only its own. A reload that makes
/// them overlap is refused, and the version loaded before stays live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategies_sharing_an_account_on_other_instruments_each_keep_to_their_own() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup_with("bot-two-strategies-apart", &mock, None, |v| {
        v["allowed_instruments"] = json!(["AAPL"]);
    });
    let mut other = snapshot("other", &token('c'));
    other["allowed_instruments"] = json!(["MSFT"]);
    other["bots"] =
        json!([{ "id": BOT, "broker": "alpaca", "account_id": "ACC1", "sizing": { "fixed_quantity": "7" } }]);
    dirs.write("other.json", &other);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let open = |t: &str| json!({ "ticker": t, "action": "OPEN", "direction": "long" }).to_string();
    let close = |t: &str| json!({ "ticker": t, "action": "CLOSE", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open("AAPL")).await["status"], "processed");
    let c = server.post(&token('c'), Some("application/json"), &open("MSFT")).await;
    assert_eq!(c.json()["status"], "processed", "{}", c.body);
    drained(&server).await;
    let other_state = || server.admin_get("/api/strategies/other/bots/b/state");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (a, c) = (state(&server).await, other_state().await);
        if holds(&a, "AAPL") && holds(&c, "MSFT") {
            break;
        }
        assert!(Instant::now() < deadline, "states: {a} {c}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A few syncs of each.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (a, c) = (state(&server).await, other_state().await);
    assert!(!holds(&a, "MSFT") && !holds(&c, "AAPL"), "each strategy holds its own only: {a} {c}");
    // `other`'s CLOSE of AAPL is not its instrument; `live`'s CLOSE sells its 10 AAPL and leaves the 7 MSFT.
    let refused = server.post(&token('c'), Some("application/json"), &close("AAPL")).await;
    assert_ne!(refused.json()["status"], "processed", "{}", refused.body);
    assert_eq!(post(&server, &close("AAPL")).await["status"], "processed");
    let positions = mock.positions();
    assert_eq!(positions.get("MSFT").map(ToString::to_string).as_deref(), Some("7"), "{positions:?}");
    assert!(positions.get("AAPL").map_or(true, |q| q.is_zero()), "{positions:?}");
    // Edited to trade AAPL too while the server runs: refused, the MSFT-only version stays live.
    other["allowed_instruments"] = json!(["MSFT", "AAPL"]);
    dirs.write("other.json", &other);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains(r#"bot "b" of strategy "other" trades the same alpaca account"#) {
        assert!(Instant::now() < deadline, "no ERROR for the edit: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let still = server.post(&token('c'), Some("application/json"), &open("AAPL")).await;
    server.stop();
    assert_ne!(still.json()["status"], "processed", "the edit was applied: {}", still.body);
}

/// Two stored strategies whose bots share an account and instruments at start: the one already trading there
/// (a state of its bot stored) loads, whatever the names of the files, and the other is refused with an ERROR
/// while the server starts. By name order, a file added beside a trading strategy and sorting before it took the
/// account over at the next restart, its sync handed the other's position, and the trading strategy stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_start_the_strategy_already_trading_an_account_keeps_it() {
    let mock = Mock::start(Kind::Alpaca).await;
    let (dirs, bots) = setup("bot-two-strategies-restart", &mock, None);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    wait_state(&server, "a sync", |s| holds(s, "AAPL")).await;
    server.stop();
    // Added while the server was stopped, sorting before `live.json`.
    let mut added = snapshot("added", &token('c'));
    added["allowed_instruments"] = json!(["*"]);
    added["bots"] =
        json!([{ "id": BOT, "broker": "alpaca", "account_id": "ACC1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("added.json", &added);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long" }).to_string();
    let refused = server.post(&token('c'), Some("application/json"), &close).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let positions = mock.positions();
    let still = state(&server).await;
    let stderr = server.stop();
    assert_eq!(refused.status, 404, "strategy `added` is loaded: {}", refused.body);
    assert_eq!(positions.get("AAPL").map(ToString::to_string).as_deref(), Some("10"), "{:?}", mock.orders());
    assert!(holds(&still, "AAPL"), "strategy `live` is loaded and holds its position: {still}");
    assert!(
        stderr.contains(r#"bot "b" of strategy "added" trades the same alpaca account as bot "b" of strategy "live""#),
        "{stderr}"
    );
}

/// A refused entry, then the sender's CLOSE, decided into no request (there was no position to close, the entry
/// having failed): no later row stands for the close, yet the entry must not be offered nor retried, or it opens the
/// position the sender has closed. Any later alert of the strategy (but a duplicate) refuses a failed order's retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_entry_is_not_retried_after_a_later_close_of_its_instrument_decided_into_nothing() {
    let (mock, _dirs, server) = start("brk-review-entry-closed", Kind::Alpaca).await;
    mock.faults([Fault::Refuse(403, "insufficient buying power")]);
    let open = r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#;
    assert_eq!(post(&server, open).await["status"], "processed");
    let failed = outbox(&server).await.into_iter().find(|r| r["kind"] == "place").expect("the entry's row");
    assert_eq!(failed["status"], "failed", "{failed}");
    let close = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
    let closed = post(&server, close).await;
    let rows = drained(&server).await;
    assert_eq!(rows.len(), 1, "the CLOSE stored no request: {rows:?}");
    let offered = listed(&rows, &failed).clone();
    assert_eq!(offered["retry"]["safe"], false, "{offered}");
    let (code, body) = retry_row(&server, &failed).await;
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        code,
        409,
        "the CLOSE answered {closed}; the listing offered {offered}; the retry answered {code} {body}; positions now: \
         {:?}",
        mock.positions()
    );
    assert!(body.contains("later alert"), "{body}");
    server.stop();
}

/// The broker does not take the OPEN's market order at once (each attempt cut, as during a short outage) and
/// the sender's CLOSE comes while the OPEN is still being retried: the CLOSE is rejected ("nothing to close"). The
/// OPEN, decided before the CLOSE and not yet at the broker, is not sent after it (sent, it filled into the position
/// the sender had closed): it fails naming the CLOSE that overtook it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_decided_while_its_open_is_retried_stops_the_open() {
    let (mock, _dirs, server) = start("brk-close-during-retry", Kind::Alpaca).await;
    mock.faults([Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let a = server.post(&token('a'), Some("application/json"), &open).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let answer = server.post(&token('a'), Some("application/json"), &close).await.json();
    let rows = drained(&server).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        mock.positions().is_empty(),
        "the CLOSE was answered {answer}; the OPEN went out after it: {:?}; orders {:?}",
        mock.positions(),
        mock.orders()
    );
    let entry = rows.iter().find(|r| r["kind"] == "place").expect("the entry's row");
    assert_eq!(entry["status"], "failed", "{entry}");
    let why = entry["result"].as_str().unwrap_or_default();
    assert!(why.contains("later alert") && why.contains("CLOSE"), "{entry}");
    server.stop();
}

/// A limit entry the broker does not take at once (attempts cut) and the sender's CANCEL of it while it is
/// being retried: the CANCEL is rejected ("no working … order"), and the entry is not sent after it (sent, it
/// rested at the broker, the order the sender had cancelled).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_decided_while_its_limit_entry_is_retried_stops_the_entry() {
    let (mock, _dirs, server) = start("brk-cancel-during-retry", Kind::Alpaca).await;
    mock.faults([Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut]);
    let open =
        r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":150.00,"message_id":"o1"}"#;
    let a = server.post(&token('a'), Some("application/json"), open).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let cancel = r#"{"ticker":"AAPL","action":"CANCEL","direction":"long","message_id":"c1"}"#;
    let answer = server.post(&token('a'), Some("application/json"), cancel).await.json();
    drained(&server).await;
    let working: Vec<_> = mock.orders().into_iter().filter(|o| o.status == "working").collect();
    assert!(working.is_empty(), "the CANCEL was answered {answer}; the entry went out after it and works: {working:?}");
    server.stop();
}

/// A later OPEN of the same direction (an add) does not overtake an entry still being retried: it was decided to go
/// beside it, so both go, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_later_open_of_the_same_direction_does_not_stop_a_retried_entry() {
    let (mock, _dirs, server) = start("brk-add-during-retry", Kind::Alpaca).await;
    mock.faults([Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut, Fault::Cut]);
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let a = server.post(&token('a'), Some("application/json"), &open).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let add = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o2" }).to_string();
    let answer = server.post(&token('a'), Some("application/json"), &add).await.json();
    assert_eq!(answer["status"], "processed", "{answer}");
    let rows = drained(&server).await;
    let places: Vec<_> = rows.iter().filter(|r| r["kind"] == "place").collect();
    assert_eq!(places.len(), 2, "{rows:?}");
    assert!(places.iter().all(|r| r["status"] == "done"), "both entries go: {places:?}");
    let taken: Vec<_> = mock.orders().into_iter().filter(|o| o.symbol == "AAPL" && o.buy).collect();
    assert_eq!(taken.len(), 2, "{taken:?}");
    server.stop();
}

/// A CLOSE while the sender's market entry still works at the broker (taken outside market hours, queued for the
/// open; here: filling 6 s after it was taken), the working entry read back by the sync: the CLOSE pulls the entry,
/// and nothing is left open when it would have filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_while_its_market_entry_still_works_leaves_no_position() {
    let (mock, _dirs, server) = start("brk-close-queued-open", Kind::Alpaca).await;
    mock.market_fills_late(Duration::from_secs(6));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    let st = wait_state(&server, "the working market entry", |s| working(s) == 1).await;
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let answer = post(&server, &close).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        mock.positions().is_empty(),
        "state {st}; the CLOSE was answered {answer} and the entry then filled, leaving {:?}; orders {:?}",
        mock.positions(),
        mock.orders()
    );
    server.stop();
}

/// The same, the entry filling at the broker after the sync last read it working and before the CLOSE's cancel
/// reaches it: the cancel is refused, read back as filled, and fails saying so (an ERROR; nothing else of the CLOSE
/// waited for it, as nothing was held when it was decided). The position the entry bought is left to the trader;
/// the next CLOSE, decided against the sync's read of it, closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_whose_market_entry_filled_before_its_cancel_fails_saying_so() {
    let (mock, _dirs, server) = start("brk-close-entry-filled", Kind::Alpaca).await;
    mock.market_fills_late(Duration::from_secs(60));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    assert_eq!(post(&server, &open).await["status"], "processed");
    wait_state(&server, "the working market entry", |s| working(s) == 1).await;
    // The next list read answers late, as it stood when it came: no sync reads the fill before the CLOSE is decided.
    mock.slow_list(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let id = mock.orders()[0].id.clone();
    mock.fill(&id);
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    assert_eq!(post(&server, &close).await["status"], "processed");
    let rows = drained(&server).await;
    let row = rows.iter().find(|r| r["kind"] == "cancel").expect("the cancel row");
    assert_eq!(row["status"], "failed", "{row}");
    let why = row["result"].as_str().unwrap_or_default();
    assert!(why.contains("filled"), "{row}");
    assert!(logged(&server, "ERROR", "filled").await, "{:?}", server.logs(ID).await);
    assert_eq!(mock.positions().get("AAPL").map(|q| q.to_string()), Some("10".to_owned()));
    // Once the sync reads the position, a CLOSE closes it (market orders filling at once again).
    wait_state(&server, "the filled entry", |s| working(s) == 0 && holds(s, "AAPL")).await;
    mock.market_fills_late(Duration::ZERO);
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c2" }).to_string();
    assert_eq!(post(&server, &close).await["status"], "processed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(mock.positions().is_empty(), "{:?}", mock.positions());
    server.stop();
}
