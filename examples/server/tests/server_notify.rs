//! Notifications: a local receiver gets one message per accepted order, per failed delivery and per rotation,
//! and messages queued while it was down arrive after a restart of the server, none lost and none twice.

mod server_support;

use hyper::Method;
use serde_json::json;
use server_support::mock_broker::{Behave, MockBroker};
use server_support::receiver::Receiver;
use server_support::*;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

async fn wait_for(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_message_per_order_failure_and_rotation_and_none_lost_across_a_restart() {
    let receiver = Receiver::start().await;
    let tradier = MockBroker::start().await;
    let dirs = Dirs::new("notify");
    let mut v = snapshot("n", &token('a'));
    v["bots"] = json!([
        { "id": "paper-1", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "2" } },
        { "id": "trd", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "5" } }
    ]);
    dirs.write("n.json", &v);
    // A second strategy without a receiver: its events are not sent anywhere.
    dirs.write("quiet.json", &snapshot("quiet", &token('b')));
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "trd": { "delivery": "http", "base_url": tradier.base_url() } }).to_string())
        .unwrap();
    let url_file = dirs.root.join("hook-url");
    std::fs::write(&url_file, format!("http://127.0.0.1:{}/api/webhooks/1/secret\n", receiver.port)).unwrap();
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, json!({ "n": { "url": { "file": url_file } } }).to_string()).unwrap();
    let args = ["--bots", bots.to_str().unwrap(), "--notifications", notifications.to_str().unwrap()];

    // While the receiver is up: the paper order is accepted, Tradier refuses its order, the token is rotated.
    let server = Server::start(&dirs, &args);
    tradier.script([Behave::Status(400, r#"{"errors":{"error":"Account is closed"}}"#)]);
    assert_eq!(
        server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await.status,
        200
    );
    assert_eq!(
        server.post(&token('b'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await.status,
        200
    );
    assert_eq!(server.admin(Method::POST, "/api/strategies/n/rotate", None, "", true).await.status, 200);
    wait_for("three messages", || receiver.taken().len() >= 3).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = receiver.taken();
    assert_eq!(taken.len(), 3, "{taken:?}");
    assert_eq!(taken.iter().filter(|t| t.contains("paper-1") && t.contains("accepted")).count(), 1, "{taken:?}");
    assert_eq!(taken.iter().filter(|t| t.contains("trd") && t.contains("Account is closed")).count(), 1, "{taken:?}");
    assert_eq!(taken.iter().filter(|t| t.contains("token rotated")).count(), 1, "{taken:?}");
    assert!(taken.iter().all(|t| t.contains("[n]")), "only the strategy with a receiver: {taken:?}");
    // Slack reads `text`, Discord `content`: both carry the message.
    let first = receiver.got.lock().unwrap()[0].1.clone();
    assert_eq!(first["content"], first["text"]);

    // The receiver fails: the next alert's messages wait in the database through a restart.
    receiver.answer.store(503, Ordering::SeqCst);
    let rotated = server.admin_get("/api/strategies").await;
    assert!(rotated["strategies"].as_array().unwrap().iter().any(|s| s["id"] == "n"));
    let new_token = {
        let url = server.admin_get("/api/strategies/n/webhook_url").await;
        url["webhook_url"].as_str().unwrap().rsplit('/').next().unwrap().to_owned()
    };
    let tries_before = receiver.tries();
    assert_eq!(
        server.post(&new_token, Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await.status,
        200
    );
    wait_for("a refused try", || receiver.tries() > tries_before).await;
    server.stop();
    assert_eq!(receiver.taken().len(), 3);

    receiver.answer.store(200, Ordering::SeqCst);
    let server = Server::start(&dirs, &args);
    wait_for("the queued messages", || receiver.taken().len() >= 5).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let taken = receiver.taken();
    assert_eq!(taken.len(), 5, "none lost and none twice: {taken:?}");
    // The MSFT alert's two accepted orders, each once (Tradier takes this one).
    let after: Vec<&String> = taken[3..].iter().collect();
    assert!(after.iter().any(|t| t.contains("paper-1") && t.contains("MSFT")), "{after:?}");
    assert!(after.iter().any(|t| t.contains("bot trd accepted")), "{after:?}");
    server.stop();
}

/// One sender sent every strategy's due messages one after another, each allowed 10 s: a receiver that accepts
/// connections and never answers held every other strategy's messages behind its own, 10 s per message queued
/// ahead (a failed order's warning minutes late). Strategies are now sent side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_answers_does_not_hold_up_another_strategys_messages() {
    let receiver = Receiver::start().await;
    // Accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let dirs = Dirs::new("notify-hol");
    for (id, t) in [("slow", 'a'), ("n", 'b')] {
        let mut v = snapshot(id, &token(t));
        v["bots"] =
            json!([{ "id": "p", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
        dirs.write(&format!("{id}.json"), &v);
    }
    let (slow_url, url) = (dirs.root.join("slow-url"), dirs.root.join("n-url"));
    std::fs::write(&slow_url, format!("http://127.0.0.1:{silent_port}/hook\n")).unwrap();
    std::fs::write(&url, format!("http://127.0.0.1:{}/hook\n", receiver.port)).unwrap();
    let notifications = dirs.root.join("notifications.json");
    let conf = json!({ "slow": { "url": { "file": slow_url } }, "n": { "url": { "file": url } } });
    std::fs::write(&notifications, conf.to_string()).unwrap();
    let server = Server::start(&dirs, &["--notifications", notifications.to_str().unwrap()]);
    // Five accepted orders for the strategy whose receiver hangs, then one for the other.
    for i in 0..5 {
        let alert = json!({ "ticker": "AAPL", "action": "buy", "n": i });
        assert_eq!(server.post_json(&token('a'), &alert).await.status, 200);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sent = Instant::now();
    assert_eq!(server.post_json(&token('b'), &json!({ "ticker": "AAPL", "action": "buy" })).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(8);
    while !receiver.taken().iter().any(|t| t.contains("[n]")) {
        assert!(Instant::now() < deadline, "the other strategy's message waits behind the silent receiver");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(sent.elapsed() < Duration::from_secs(8));
    holder.abort();
    server.stop();
}

/// A strategy's sender that met a failure woke the reader at once, so each of the strategy's next messages spent a
/// try (and up to its timeout) on a receiver that was down, one after another. The next messages now wait for
/// the next read, a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_is_down_gets_one_try_per_read_not_one_per_queued_message() {
    let receiver = Receiver::start().await;
    receiver.answer.store(503, Ordering::SeqCst);
    let dirs = Dirs::new("notify-down");
    let mut v = snapshot("n", &token('a'));
    v["bots"] = json!([{ "id": "p", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("n.json", &v);
    let url = dirs.root.join("n-url");
    std::fs::write(&url, format!("http://127.0.0.1:{}/hook\n", receiver.port)).unwrap();
    let notifications = dirs.root.join("notifications.json");
    std::fs::write(&notifications, json!({ "n": { "url": { "file": url } } }).to_string()).unwrap();
    let args = ["--notifications", notifications.to_str().unwrap()];
    let server = Server::start(&dirs, &args);
    for i in 0..5 {
        let alert = json!({ "ticker": "AAPL", "action": "buy", "n": i });
        assert_eq!(server.post_json(&token('a'), &alert).await.status, 200);
    }
    server.stop();
    // Every message due again (their backoffs of a second or two over) when the server starts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = receiver.tries();
    let server = Server::start(&dirs, &args);
    wait_for("the first try after the start", || receiver.tries() > before).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    let tries = receiver.tries() - before;
    assert!(tries <= 2, "{tries} tries within 0.6 s of the first, one per queued message");
    assert_eq!(receiver.taken().len(), 0);
    server.stop();
}
