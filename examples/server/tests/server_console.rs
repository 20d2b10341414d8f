//! The operator console: its pages render with the strategy's data, the admin API answers 404 for an unknown
//! strategy's logs and outbox and 400 for an out-of-range limit, logs filter by decision and text, and failed
//! outbox rows can be retried (only where a resend cannot double an order) or dismissed.

mod server_support;

use hyper::Method;
use serde_json::{json, Value};
use server_support::mock_broker::{Behave, MockBroker};
use server_support::*;
use std::time::{Duration, Instant};

const ID: &str = "con";

fn setup(name: &str, alpaca: &MockBroker, tradier: &MockBroker) -> (Dirs, std::path::PathBuf) {
    let dirs = Dirs::new(name);
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!([
        { "id": "alp", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } },
        { "id": "trd", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "5" } }
    ]);
    dirs.write("con.json", &v);
    let bots = json!({
        "alp": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 2000 },
        "trd": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 2000 }
    });
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, bots.to_string()).unwrap();
    (dirs, path)
}

async fn outbox(server: &Server) -> Vec<Value> {
    server.admin_get(&format!("/api/strategies/{ID}/outbox?limit=1000")).await["outbox"].as_array().cloned().unwrap()
}

/// Waits until no row is pending or sending.
async fn drained(server: &Server) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let rows = outbox(server).await;
        if !rows.is_empty() && rows.iter().all(|r| r["status"] != "pending" && r["status"] != "sending") {
            return rows;
        }
        assert!(Instant::now() < deadline, "the outbox did not drain: {rows:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn row<'a>(rows: &'a [Value], bot: &str) -> &'a Value {
    rows.iter().find(|r| r["bot"] == bot).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_rows_are_retried_only_where_safe_and_can_be_dismissed() {
    let (alpaca, tradier) = (MockBroker::start().await, MockBroker::start().await);
    let (dirs, bots) = setup("console-retry", &alpaca, &tradier);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    alpaca.script([Behave::Status(403, r#"{"message":"insufficient buying power"}"#)]);
    tradier.script([Behave::Status(400, r#"{"errors":{"error":"Account is closed"}}"#)]);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rows = drained(&server).await;
    let (alp, trd) = (row(&rows, "alp"), row(&rows, "trd"));
    assert_eq!((alp["status"].as_str(), trd["status"].as_str()), (Some("failed"), Some("failed")), "{rows:?}");
    // The API says which rows may be retried and why; the Strategy page shows it on the buttons.
    assert_eq!(alp["retry"]["safe"], true, "{alp}");
    assert_eq!(trd["retry"]["safe"], false, "{trd}");
    let page =
        server.admin(Method::GET, &format!("/strategies/{ID}?token={}", server.admin_token), None, "", false).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Retry (safe: the broker refuses a repeated client order id"), "{}", page.body);
    assert!(page.body.contains("No retry: the broker may already hold this order"), "{}", page.body);
    assert!(page.body.contains("insufficient buying power") && page.body.contains("st-failed"));

    // Tradier would take a resend as a second order: 409, nothing sent.
    let sent_before = tradier.received().len();
    let path = |id: &Value, act: &str| format!("/api/strategies/{ID}/outbox/{id}/{act}");
    let no = server.admin(Method::POST, &path(&trd["id"], "retry"), None, "", true).await;
    assert_eq!(no.status, 409, "{}", no.body);
    assert!(no.json()["error"].as_str().unwrap().contains("second one"), "{}", no.body);
    // Alpaca refuses a repeated client order id: the row goes back out, with the same id, and is done.
    let yes = server.admin(Method::POST, &path(&alp["id"], "retry"), None, "", true).await;
    assert_eq!(yes.status, 200, "{}", yes.body);
    let rows = drained(&server).await;
    assert_eq!(row(&rows, "alp")["status"], "done", "{rows:?}");
    let got = alpaca.received();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].json()["client_order_id"], got[1].json()["client_order_id"]);
    // A row that is not failed cannot be retried or dismissed; an unknown row or strategy is a 404.
    assert_eq!(server.admin(Method::POST, &path(&alp["id"], "retry"), None, "", true).await.status, 409);
    assert_eq!(server.admin(Method::POST, &path(&alp["id"], "dismiss"), None, "", true).await.status, 409);
    assert_eq!(server.admin(Method::POST, &path(&json!(999), "dismiss"), None, "", true).await.status, 404);
    let other = format!("/api/strategies/nope/outbox/{}/dismiss", trd["id"]);
    assert_eq!(server.admin(Method::POST, &other, None, "", true).await.status, 404);
    assert_eq!(server.admin(Method::GET, &path(&trd["id"], "retry"), None, "", true).await.status, 405);
    // Dismissed: set aside, never sent.
    let d = server.admin(Method::POST, &path(&trd["id"], "dismiss"), None, "", true).await;
    assert_eq!(d.status, 200, "{}", d.body);
    assert_eq!(row(&outbox(&server).await, "trd")["status"], "dismissed");
    assert_eq!(tradier.received().len(), sent_before);
    server.stop();
}

#[tokio::test]
async fn unknown_strategies_and_bad_limits_are_errors_and_logs_filter() {
    let dirs = Dirs::new("console-api");
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    let server = Server::start(&dirs, &[]);
    for path in ["/api/strategies/nope/logs", "/api/strategies/nope/outbox", "/api/strategies/nope/webhook_url"] {
        let a = server.admin(Method::GET, path, None, "", true).await;
        assert_eq!((a.status, a.json()["code"].as_str()), (404, Some("unknown_strategy")), "{path}");
    }
    for path in [
        "/api/strategies/ok/logs?limit=0",
        "/api/strategies/ok/logs?limit=1001",
        "/api/strategies/ok/outbox?limit=10001",
        "/api/strategies/ok/logs?decision=maybe",
    ] {
        assert_eq!(server.admin(Method::GET, path, None, "", true).await.status, 400, "{path}");
    }
    assert_eq!(server.admin_get("/api/strategies/ok/logs?limit=1000").await["logs"], json!([]));

    for body in [r#"{"ticker":"AAPL","action":"buy"}"#, r#"{"ticker":"TSLA","action":"buy"}"#] {
        assert_eq!(server.post(&token('a'), Some("application/json"), body).await.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.logs("ok").await.iter().filter(|r| r["decision"] == "rejected").count() == 0 {
        assert!(Instant::now() < deadline, "the rejected alert was not logged");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rejected = server.admin_get("/api/strategies/ok/logs?decision=rejected").await["logs"].clone();
    let rejected = rejected.as_array().unwrap();
    assert!(!rejected.is_empty() && rejected.iter().all(|r| r["decision"] == "rejected"), "{rejected:?}");
    let aapl = server.admin_get("/api/strategies/ok/logs?q=AAPL").await["logs"].clone();
    let aapl = aapl.as_array().unwrap();
    assert!(!aapl.is_empty() && aapl.iter().all(|r| r["decision"] == "processed"), "{aapl:?}");
    let url = server.admin_get("/api/strategies/ok/webhook_url").await;
    assert!(url["webhook_url"].as_str().unwrap().ends_with(&format!("/webhooks/{}", token('a'))), "{url}");

    // The pages: Strategies (no token on it), a strategy, the sample form; an unknown strategy's page is a 404.
    let t = &server.admin_token;
    let home = server.admin(Method::GET, &format!("/?token={t}"), None, "", false).await;
    assert_eq!(home.status, 200);
    assert!(
        home.body.contains("href=\"/strategies/ok?token=") && home.body.contains("processed</span> 1"),
        "{}",
        home.body
    );
    assert!(home.body.contains("rejected</span> 1") && !home.body.contains(&token('a')), "{}", home.body);
    let sample = server.admin(Method::GET, &format!("/strategies/ok/sample?token={t}"), None, "", false).await;
    assert!(sample.status == 200 && sample.body.contains("&quot;ticker&quot;:&quot;AAPL&quot;"), "{}", sample.body);
    let gone = server.admin(Method::GET, &format!("/strategies/nope/sample?token={t}"), None, "", false).await;
    assert_eq!(gone.status, 404);
    assert!(
        gone.content_type.starts_with("text/html") && gone.body.contains("No strategy with this id"),
        "{}",
        gone.body
    );
    assert_eq!(server.admin(Method::GET, "/strategies/ok", None, "", false).await.status, 401);
    let csp = home.headers.get("content-security-policy").unwrap().to_str().unwrap().to_owned();
    assert!(csp.contains("script-src 'nonce-") && csp.contains("default-src 'none'"), "{csp}");
    server.stop();
}

/// Retry and dismiss of one failed row at once (two operators, a double click): both read the row failed, and
/// both were answered 200 though only the first change applied, so one operator was told "dismissed" for an
/// order being sent (or "pending" for one set aside). The second is a 409 now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_and_a_dismiss_of_one_row_at_once_are_never_both_answered_done() {
    const ROWS: usize = 12;
    let (alpaca, tradier) = (MockBroker::start().await, MockBroker::start().await);
    let (dirs, bots) = setup("console-race", &alpaca, &tradier);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--rate-limit", "1000"]);
    let refused = || Behave::Status(403, r#"{"message":"insufficient buying power"}"#);
    alpaca.script(std::iter::repeat_with(refused).take(ROWS));
    tradier.script(std::iter::repeat_with(|| Behave::Status(400, r#"{"errors":{"error":"closed"}}"#)).take(ROWS));
    for n in 0..ROWS {
        let body = json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": format!("race-{n}") } });
        assert_eq!(server.post_json(&token('a'), &body).await.status, 200);
    }
    let rows = drained(&server).await;
    let failed: Vec<Value> =
        rows.iter().filter(|r| r["bot"] == "alp" && r["status"] == "failed").map(|r| r["id"].clone()).collect();
    assert_eq!(failed.len(), ROWS, "{rows:?}");
    let mut both = Vec::new();
    for id in failed {
        let (to_retry, to_dismiss) =
            (format!("/api/strategies/{ID}/outbox/{id}/retry"), format!("/api/strategies/{ID}/outbox/{id}/dismiss"));
        let (retry, dismiss) = tokio::join!(
            server.admin(Method::POST, &to_retry, None, "", true),
            server.admin(Method::POST, &to_dismiss, None, "", true)
        );
        assert!([200, 409].contains(&retry.status) && [200, 409].contains(&dismiss.status), "{retry:?} {dismiss:?}");
        if retry.status == 200 && dismiss.status == 200 {
            both.push(id);
        }
    }
    assert!(both.is_empty(), "rows answered both retried and dismissed: {both:?}");
    server.stop();
}

/// One Alpaca bot that settles fast (a lookup 200 ms after an uncertain attempt).
fn setup_alpaca(name: &str, alpaca: &MockBroker) -> (Dirs, std::path::PathBuf) {
    let dirs = Dirs::new(name);
    let mut v = snapshot(ID, &token('a'));
    v["bots"] = json!([{ "id": "alp", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("con.json", &v);
    let bots =
        json!({ "alp": { "delivery": "http", "base_url": alpaca.base_url(), "timeout_ms": 2000, "settle_ms": 200 } });
    let path = dirs.root.join("bots.json");
    std::fs::write(&path, bots.to_string()).unwrap();
    (dirs, path)
}

/// A limit entry whose first attempt reached Alpaca (its answer lost), whose resend was refused on a check
/// before the duplicate check (the buying power the first order took) and whose lookup could not tell: failed
/// as "unknown". The operator retries it (offered as safe), and the resend is refused the same way. The retry
/// took that refusal at its word, with no lookup, and called the row "refused" while the order stood at the
/// broker (a trader told so enters again: doubled). A re-queued row is looked up as any row whose attempt may
/// have reached the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_row_whose_first_attempt_may_have_reached_the_broker_is_looked_up_before_a_refusal_is_believed() {
    let alpaca = MockBroker::start().await;
    let (dirs, bots) = setup_alpaca("con-retry-refused", &alpaca);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let bp = || Behave::Status(403, r#"{"code":40310000,"message":"insufficient buying power"}"#);
    alpaca.script([Behave::TakeThenDrop, bp(), Behave::Status(403, r#"{"message":"forbidden"}"#)]);
    let limit = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":400.00}"#;
    assert_eq!(server.post(&token('a'), Some("application/json"), limit).await.status, 200);
    let rows = drained(&server).await;
    let first = row(&rows, "alp").clone();
    assert_eq!(first["status"], "failed", "{first}");
    assert!(first["result"].as_str().unwrap().contains("unknown whether the broker has it"), "{first}");
    assert_eq!(first["retry"]["safe"], true, "{first}");
    assert_eq!(alpaca.accepted().values().sum::<u32>(), 1, "the first attempt placed the order");
    // The operator retries; the broker refuses the repeat on its buying-power check again.
    alpaca.script([bp()]);
    let before = alpaca.received().len();
    let path = format!("/api/strategies/{ID}/outbox/{}/retry", first["id"]);
    let a = server.admin(Method::POST, &path, None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rows = drained(&server).await;
    let after = row(&rows, "alp").clone();
    let sent: Vec<String> = alpaca.received()[before..].iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    assert!(sent.iter().any(|s| s.starts_with("GET /v2/orders:by_client_order_id")), "no lookup: {sent:?}; {after}");
    assert_eq!(after["status"], "done", "the order stands at the broker, the row says: {after}");
    assert_eq!(alpaca.accepted().values().sum::<u32>(), 1, "one order");
    server.stop();
}

/// A CLOSE of a long position with a resting exit: the exit's cancel is refused, and the close, held back, is
/// then past its deadline. The cancel was offered "safe: a cancel cannot create an order"; retried, it pulled the
/// exit while the close it made way for could never go: the position left open without its exit. It is not
/// offered now, in the listing nor through the API (409).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_that_only_made_way_for_a_close_which_can_no_longer_go_is_not_offered_as_a_safe_retry() {
    refused_close_cancel_not_offered("con-retry-cancel", "1", Duration::from_millis(2000)).await;
}

/// The same with the close not yet past its deadline but with less of it left than the cancel may take (the bot's
/// 2 s timeout, the read-back's 3 s and its 0.2 s settle): retried, the cancel would be failed unsent by the
/// dispatcher, and sent, it would pull the exit and the close would expire behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_whose_close_could_not_follow_it_in_time_is_not_offered_as_a_safe_retry() {
    let refused = refused_close_cancel_not_offered("con-retry-cancel-late", "8", Duration::from_millis(4500)).await;
    assert!(refused.contains("too near it to follow the cancel"), "{refused}");
}

/// A CLOSE whose exit's cancel Alpaca refuses, both rows failed, looked at `after` the alert under a market order
/// TTL of `ttl_secs`: the cancel is not offered for a retry, in the listing nor through the API (its 409 answer is
/// returned), and the exit stays.
async fn refused_close_cancel_not_offered(name: &str, ttl_secs: &str, after: Duration) -> String {
    let alpaca = MockBroker::start().await;
    let (dirs, bots) = setup_alpaca(name, &alpaca);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", ttl_secs]);
    let st = json!({ "positions": [{ "instrument": "MSFT", "direction": "long", "quantity": "10" }],
                     "working_orders": [{ "id": "alp-exit", "instrument": "MSFT", "direction": "long",
                                          "intent": "exit", "order_type": "limit", "price": "420",
                                          "quantity": "10", "state": "open" }] });
    let path = format!("/api/strategies/{ID}/bots/alp/state");
    let a = server.admin(Method::PUT, &path, Some("application/json"), &st.to_string(), true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    alpaca.script([Behave::Status(422, r#"{"code":42210000,"message":"order is not cancelable"}"#)]);
    let close = r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#;
    let posted = Instant::now();
    assert_eq!(server.post(&token('a'), Some("application/json"), close).await.status, 200);
    drained(&server).await;
    tokio::time::sleep(after.saturating_sub(posted.elapsed())).await;
    let rows = outbox(&server).await;
    let cancel = rows.iter().find(|r| r["kind"] == "cancel").unwrap().clone();
    let held = rows.iter().find(|r| r["kind"] == "place").unwrap().clone();
    assert_eq!((cancel["status"].as_str(), held["status"].as_str()), (Some("failed"), Some("failed")));
    assert_eq!(held["retry"]["safe"], false, "the close waits for a failed cancel: {held}");
    assert_eq!(cancel["retry"]["safe"], false, "the cancel is offered alone: {cancel}");
    let retry = format!("/api/strategies/{ID}/outbox/{}/retry", cancel["id"]);
    let a = server.admin(Method::POST, &retry, None, "", true).await;
    assert_eq!(a.status, 409, "{}", a.body);
    let state = server.admin_get(&path).await;
    assert_eq!(state["working_orders"][0]["id"], "alp-exit", "the exit stays: {state}");
    server.stop();
    a.body
}

/// A CLOSE whose exit's cancel was refused: the close is held back and failed. It was offered "Retry (safe)" and,
/// retried, answered 200 "pending", then failed again at once without being sent (the cancel it waits for still
/// failed): the operator took it for on its way. It is not offered while the row before it is not done, and the
/// answer says which to retry first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_behind_a_failed_cancel_is_not_retried_before_the_cancel() {
    let alpaca = MockBroker::start().await;
    let (dirs, bots) = setup_alpaca("con-retry-follower", &alpaca);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let st = json!({ "positions": [{ "instrument": "MSFT", "direction": "long", "quantity": "10" }],
                     "working_orders": [{ "id": "alp-exit", "instrument": "MSFT", "direction": "long",
                                          "intent": "exit", "order_type": "limit", "price": "420",
                                          "quantity": "10", "state": "open" }] });
    let path = format!("/api/strategies/{ID}/bots/alp/state");
    let a = server.admin(Method::PUT, &path, Some("application/json"), &st.to_string(), true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    alpaca.script([Behave::Status(422, r#"{"code":42210000,"message":"order is not cancelable"}"#)]);
    let close = r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#;
    assert_eq!(server.post(&token('a'), Some("application/json"), close).await.status, 200);
    let rows = drained(&server).await;
    let held = rows.iter().find(|r| r["kind"] == "place").unwrap().clone();
    let cancel = rows.iter().find(|r| r["kind"] == "cancel").unwrap().clone();
    assert_eq!((cancel["status"].as_str(), held["status"].as_str()), (Some("failed"), Some("failed")));
    assert_eq!(held["retry"]["safe"], false, "offered as safe: {held}");
    let retry = format!("/api/strategies/{ID}/outbox/{}/retry", held["id"]);
    let a = server.admin(Method::POST, &retry, None, "", true).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.body.contains("retry that one first"), "{}", a.body);
    server.stop();
}

/// A CLOSE whose exit's cancel was refused (the close held back, failed, its deadline far off), then a later alert
/// on the same instrument delivered. The close's retry is refused as superseded (sent now, it would trade after
/// what the sender has done since); its cancel was judged with the close's own rules alone, and offered "safe: a
/// cancel cannot create an order": retried, it pulled the exit for a close that could never go, the position left
/// open without it. It is not offered, in the listing nor through the API, and the exit stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_cancel_is_not_offered_once_a_later_alert_has_superseded_its_close() {
    let alpaca = MockBroker::start().await;
    let (dirs, bots) = setup_alpaca("con-retry-superseded-close", &alpaca);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"]);
    let st = json!({ "positions": [{ "instrument": "MSFT", "direction": "long", "quantity": "10" }],
                     "working_orders": [{ "id": "alp-exit", "instrument": "MSFT", "direction": "long",
                                          "intent": "exit", "order_type": "limit", "price": "420",
                                          "quantity": "10", "state": "open" }] });
    let path = format!("/api/strategies/{ID}/bots/alp/state");
    let a = server.admin(Method::PUT, &path, Some("application/json"), &st.to_string(), true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    alpaca.script([Behave::Status(422, r#"{"code":42210000,"message":"order is not cancelable"}"#)]);
    let close = r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#;
    assert_eq!(server.post(&token('a'), Some("application/json"), close).await.status, 200);
    let rows = drained(&server).await;
    let cancel = rows.iter().find(|r| r["kind"] == "cancel").unwrap().clone();
    let held = rows.iter().find(|r| r["kind"] == "place").unwrap().clone();
    assert_eq!((cancel["status"].as_str(), held["status"].as_str()), (Some("failed"), Some("failed")));
    assert_eq!(cancel["retry"]["safe"], true, "nothing has superseded its close yet: {cancel}");
    // A later alert on the instrument, delivered.
    let open = r#"{"ticker":"MSFT","action":"OPEN","direction":"long","order_type":"limit","price":380.00}"#;
    let a = server.post(&token('a'), Some("application/json"), open).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rows = drained(&server).await;
    let later = rows.iter().find(|r| r["id"].as_i64() > held["id"].as_i64()).expect("the later alert's row").clone();
    assert_eq!(later["status"], "done", "{rows:?}");
    let listed = |id: &Value| rows.iter().find(|r| r["id"] == *id).unwrap().clone();
    assert_eq!(listed(&held["id"])["retry"]["safe"], false, "{:?}", listed(&held["id"]));
    let offered = listed(&cancel["id"]);
    assert_eq!(offered["retry"]["safe"], false, "the cancel makes way for a superseded close: {offered}");
    // The Logs view lists the CLOSE's alert alone, and judges it as the retry endpoint does.
    let alert = server.admin_get(&format!("/api/strategies/{ID}/outbox?created_ms={}", cancel["created_ms"])).await;
    let alone = alert["outbox"].as_array().unwrap().iter().find(|r| r["id"] == cancel["id"]).unwrap().clone();
    assert_eq!(alone["retry"]["safe"], false, "{alone}");
    let retry = format!("/api/strategies/{ID}/outbox/{}/retry", cancel["id"]);
    let a = server.admin(Method::POST, &retry, None, "", true).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert!(a.body.contains(&format!("row {}", later["id"])), "the later row is named: {}", a.body);
    drained(&server).await;
    let state = server.admin_get(&path).await;
    let exit = state["working_orders"].as_array().unwrap().iter().any(|o| o["id"] == "alp-exit");
    assert!(exit, "the exit stays: {state}");
    server.stop();
}

/// A strategy's file removed after one of its rows failed (its fate at the broker unknown): the API still listed
/// the row, and the console's page for the strategy answered 404 and hid it. The page shows the stored rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_the_failed_rows_of_a_removed_strategy() {
    let tradier = MockBroker::start().await;
    let dirs = Dirs::new("con-removed");
    let mut v = snapshot("gone", &token('b'));
    v["bots"] = json!([{ "id": "trd", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "5" } }]);
    dirs.write("gone.json", &v);
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "trd": { "delivery": "http", "base_url": tradier.base_url() } }).to_string())
        .unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap(), "--reload-interval-ms", "100"]);
    tradier.script([Behave::Status(400, r#"{"errors":{"error":"Account is closed"}}"#)]);
    let a = server.post(&token('b'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.admin_get("/api/strategies/gone/outbox").await["outbox"][0]["status"] != "failed" {
        assert!(Instant::now() < deadline, "the row never failed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(dirs.strategies.join("gone.json")).unwrap();
    while server.admin_get("/api/strategies").await.to_string().contains("\"gone\"") {
        assert!(Instant::now() < deadline, "the strategy was not unloaded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = &server.admin_token;
    let page = server.admin(Method::GET, &format!("/strategies/gone?token={t}"), None, "", false).await;
    assert_eq!(page.status, 200, "the failed row the API lists is not shown: {}", page.body);
    assert!(page.body.contains("not loaded") && page.body.contains("failed"), "{}", page.body);
    let unknown = server.admin(Method::GET, &format!("/strategies/never?token={t}"), None, "", false).await;
    assert_eq!(unknown.status, 404);
    server.stop();
}

/// The outbox listing (API `?limit=`, the console's newest 100, `swh-admin outbox`) judges a failed row whose row
/// before it is not on the page against its whole alert, as the retry does: judged against the page alone, a CLOSE
/// held behind its failed cancel, listed without that cancel (the page ends between the two), was shown
/// `retry: {"safe": true}` ("the broker refuses a repeated client order id") while the retry answered 409 "retry
/// that one first".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_cut_between_a_cancel_and_its_close_does_not_offer_the_close_as_safe() {
    let alpaca = MockBroker::start().await;
    let (dirs, bots) = setup_alpaca("con-retry-listing", &alpaca);
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    let st = json!({ "positions": [{ "instrument": "MSFT", "direction": "long", "quantity": "10" }],
                     "working_orders": [{ "id": "alp-exit", "instrument": "MSFT", "direction": "long",
                                          "intent": "exit", "order_type": "limit", "price": "420",
                                          "quantity": "10", "state": "open" }] });
    let path = format!("/api/strategies/{ID}/bots/alp/state");
    let a = server.admin(Method::PUT, &path, Some("application/json"), &st.to_string(), true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    alpaca.script([Behave::Status(422, r#"{"code":42210000,"message":"order is not cancelable"}"#)]);
    let close = r#"{"ticker":"MSFT","action":"CLOSE","direction":"long"}"#;
    assert_eq!(server.post(&token('a'), Some("application/json"), close).await.status, 200);
    let rows = drained(&server).await;
    let held = rows.iter().find(|r| r["kind"] == "place").unwrap().clone();
    assert_eq!(held["retry"]["safe"], false, "with the whole alert listed: {held}");
    // The newest row alone (a page that ends between the close and its cancel).
    let page = server.admin_get(&format!("/api/strategies/{ID}/outbox?limit=1")).await;
    let listed = page["outbox"][0].clone();
    assert_eq!(listed["id"], held["id"], "{page}");
    let retry = format!("/api/strategies/{ID}/outbox/{}/retry", held["id"]);
    let a = server.admin(Method::POST, &retry, None, "", true).await;
    assert_eq!(a.status, 409, "{}", a.body);
    assert_eq!(
        listed["retry"]["safe"], false,
        "the listing offers as safe a retry the API refuses ({}): {listed}",
        a.body
    );
    server.stop();
}
