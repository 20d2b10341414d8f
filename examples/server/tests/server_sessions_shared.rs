//! Broker sessions on servers sharing one PostgreSQL.

mod server_support;

use serde_json::json;
use server_support::brokers::{Kind, Mock};
use server_support::postgres::Postgres;
use server_support::*;
use std::time::{Duration, Instant};

/// A Schwab re-login on two servers sharing PostgreSQL: the new refresh token is configured on both and the servers
/// restarted one at a time. Until the second restarts, its session is stopped (the old token died), while the
/// first has a live session. The stopped server took the bot's lease and failed every row it took (an exit among
/// them), though its peer could deliver them: it leaves them to the peer now. With no peer left (the live one
/// stopped), it fails them itself a few seconds later, saying the bot is stopped, never that the broker refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_with_a_stopped_session_leaves_the_rows_to_a_peer_that_can_send_them() {
    let pg = Postgres::start();
    let url = pg.create_database("revauth");
    let mock = Mock::start(Kind::Schwab).await;
    mock.keep_refresh_token();
    let dirs: Vec<Dirs> = (0..2).map(|n| Dirs::new(&format!("revauth{n}"))).collect();
    let mut s = snapshot("ra", &token('8'));
    s["allowed_instruments"] = json!(["AAPL", "MSFT", "IBM"]);
    s["bots"] = json!([{ "id": "b", "broker": Kind::Schwab.name(), "account_id": Kind::Schwab.account(),
                         "sizing": { "fixed_quantity": "1" } }]);
    let base = mock.base_url();
    let mut bots = Vec::new();
    // Server 0 was restarted with the new login's token; server 1 still runs with the old one.
    for (d, refresh) in dirs.iter().zip(["refresh-0", "refresh-before-the-relogin"]) {
        d.write("ra.json", &s);
        let secret = d.root.join("refresh");
        std::fs::write(&secret, format!("{refresh}\n")).unwrap();
        let app = d.root.join("app-secret");
        std::fs::write(&app, "app-secret\n").unwrap();
        let path = d.root.join("bots.json");
        let bot = json!({ "delivery": "http", "base_url": base, "sync_interval_secs": 1,
            "auth": { "type": "oauth2", "token_url": format!("{base}/v1/oauth/token"),
                      "client_id": { "value": "app-key" }, "client_secret": { "file": app },
                      "refresh_token": { "file": secret } } });
        std::fs::write(&path, json!({ "b": bot }).to_string()).unwrap();
        bots.push(path);
    }
    let start = |i: usize| {
        Server::start(
            &dirs[i],
            &["--database", &url, "--bots", bots[i].to_str().unwrap(), "--test-lease-ttl-ms", "1500"],
        )
    };
    let live = start(0);
    let stale = start(1);
    tokio::time::sleep(Duration::from_secs(3)).await;
    for ticker in ["AAPL", "MSFT", "IBM"] {
        let body = format!(r#"{{"ticker":"{ticker}","action":"OPEN","direction":"long"}}"#);
        let a = stale.post(&token('8'), Some("application/json"), &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let rows = || pg.query("revauth", "SELECT status || ' ' || coalesce(result, '') FROM outbox ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(40);
    while rows().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "rows never settled: {:?}", rows());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed: Vec<String> = rows().into_iter().filter(|r| r.starts_with("failed")).collect();
    if !failed.is_empty() {
        let (_l, _s) = (live.stop(), stale.stop());
        panic!("rows failed on the stopped server while its peer could send them: {failed:#?}");
    }
    assert!(rows().iter().all(|r| r.starts_with("done")), "{:?}", rows());
    assert_eq!(mock.orders().len(), 3, "{:?}", mock.seen());

    // The live server is gone: the stopped one is alone, and an exit fails there within seconds, truthfully worded.
    live.stop();
    let a = stale.post(&token('8'), Some("application/json"), r#"{"ticker":"AAPL","action":"CLOSE"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows().len() < 4 || rows().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "the exit was held past the few seconds left to peers: {:?}", rows());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stale.stop();
    let last = rows().pop().unwrap_or_default();
    assert!(last.starts_with("failed") && last.contains("not sent: the bot is stopped"), "{last}");
    assert!(!last.contains("refused by the broker"), "the token endpoint refused, not the broker: {last}");
    assert_eq!(mock.orders().len(), 3, "nothing more reached the broker: {:?}", mock.seen());
}

/// Two servers sharing PostgreSQL, each with its own login at the broker (a refresh token each), both live. The
/// second server's login then ends (a re-login elsewhere retires its refresh token) while the access tokens lapse:
/// the first row it sends meets the stop there and then. Nothing of it reached the broker, so it is given back
/// unsent and left to the peer, whose session is live; it had failed at once ("the bot is stopped"), the 5 s left to
/// peers applying only to a stop known before a send.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_that_meets_the_stop_mid_send_is_left_to_the_live_peer() {
    let pg = Postgres::start();
    let url = pg.create_database("revmid");
    let mock = Mock::start(Kind::Schwab).await;
    mock.keep_refresh_token();
    mock.accept_refresh_token("refresh-of-server-1");
    let dirs: Vec<Dirs> = (0..2).map(|n| Dirs::new(&format!("revmid{n}"))).collect();
    let mut s = snapshot("rm", &token('8'));
    s["allowed_instruments"] = json!(["AAPL"]);
    s["bots"] = json!([{ "id": "b", "broker": Kind::Schwab.name(), "account_id": Kind::Schwab.account(),
                         "sizing": { "fixed_quantity": "1" } }]);
    let base = mock.base_url();
    let mut bots = Vec::new();
    for (d, refresh) in dirs.iter().zip(["refresh-0", "refresh-of-server-1"]) {
        d.write("rm.json", &s);
        let secret = d.root.join("refresh");
        std::fs::write(&secret, format!("{refresh}\n")).unwrap();
        let app = d.root.join("app-secret");
        std::fs::write(&app, "app-secret\n").unwrap();
        let path = d.root.join("bots.json");
        // A sync far apart: the stop is met by the send, not by a read of the account.
        let bot = json!({ "delivery": "http", "base_url": base, "sync_interval_secs": 30,
            "auth": { "type": "oauth2", "token_url": format!("{base}/v1/oauth/token"),
                      "client_id": { "value": "app-key" }, "client_secret": { "file": app },
                      "refresh_token": { "file": secret } } });
        std::fs::write(&path, json!({ "b": bot }).to_string()).unwrap();
        bots.push(path);
    }
    let start = |i: usize| {
        Server::start(
            &dirs[i],
            &["--database", &url, "--bots", bots[i].to_str().unwrap(), "--test-lease-ttl-ms", "1500"],
        )
    };
    let live = start(0);
    let stale = start(1);
    tokio::time::sleep(Duration::from_secs(4)).await;
    // Server 1's login ends and the access tokens lapse; server 0 renews its own.
    mock.retire_refresh_token("refresh-of-server-1");
    mock.expire_access_tokens();
    let a = stale
        .post(&token('8'), Some("application/json"), r#"{"ticker":"AAPL","action":"OPEN","direction":"long"}"#)
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rows = || pg.query("revmid", "SELECT status || ' ' || coalesce(result, '') FROM outbox ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(30);
    while rows().is_empty() || rows().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "rows never settled: {:?}", rows());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = rows();
    let (_l, _s) = (live.stop(), stale.stop());
    assert!(got.iter().all(|r| r.starts_with("done")), "failed on the stopped server, its peer live: {got:#?}");
    assert_eq!(mock.orders().len(), 1, "placed once: {:?}", mock.seen());
}
