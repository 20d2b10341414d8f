//! `GET /metrics` on the admin listener: after a known set of alerts, the counters say exactly that.

mod server_support;

use hyper::Method;
use serde_json::json;
use server_support::*;
use std::time::{Duration, Instant};

/// The value of the sample `name{labels}` in the text, if there is one.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test]
async fn metrics_count_alerts_answers_commits_and_deliveries() {
    let dirs = Dirs::new("metrics");
    let mut v = snapshot("m", &token('a'));
    v["bots"] =
        json!([{ "id": "paper-1", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("m.json", &v);
    let server = Server::start(&dirs, &[]);
    assert_eq!(server.admin(Method::GET, "/metrics", None, "", false).await.status, 401);

    for (body, status) in [
        (r#"{"ticker":"AAPL","action":"buy"}"#, 200),
        (r#"{"ticker":"MSFT","action":"buy"}"#, 200),
        (r#"{"ticker":"TSLA","action":"buy"}"#, 200),
    ] {
        assert_eq!(server.post(&token('a'), Some("application/json"), body).await.status, status, "{body}");
    }
    assert_eq!(server.post(&token('f'), Some("application/json"), "{}").await.status, 404);

    // The two orders reach the paper broker asynchronously: wait for both deliveries.
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let a = server.admin(Method::GET, "/metrics", None, "", true).await;
        assert_eq!(a.status, 200);
        assert!(a.content_type.starts_with("application/openmetrics-text"), "{}", a.content_type);
        if sample(&a.body, r#"swh_outbox_rows{strategy="m",state="done"}"#) == Some(2.0) {
            break a.body;
        }
        assert!(Instant::now() < deadline, "the deliveries were not counted: {}", a.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let get = |series: &str| sample(&text, series).unwrap_or_else(|| panic!("no {series} in {text}"));
    assert_eq!(get(r#"swh_alerts_total{strategy="m",decision="processed"}"#), 2.0);
    assert_eq!(get(r#"swh_alerts_total{strategy="m",decision="rejected"}"#), 1.0);
    assert_eq!(get(r#"swh_http_responses_total{status="200"}"#), 3.0);
    assert_eq!(get(r#"swh_http_responses_total{status="404"}"#), 1.0);
    assert_eq!(get(r#"swh_broker_deliveries_total{broker="alpaca",result="done"}"#), 2.0);
    assert_eq!(get("swh_decide_seconds_count"), 3.0);
    assert_eq!(get("swh_commit_seconds_count"), 2.0);
    assert!(get("swh_commit_seconds_sum") > 0.0);
    // Each processed alert's commit waited in the writer's queue once, inside a transaction that was timed (the
    // writer's other commits, its log rows and deliveries, add transactions but no awaited queueing of alerts).
    assert!(get("swh_store_queue_seconds_count") >= 2.0);
    assert!(get("swh_store_transaction_seconds_count") >= 1.0);
    assert!(text.contains("# TYPE swh_requests_in_flight gauge"), "{text}");
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    // The open-connection gauge counts the webhook listener's connections: three held open show, and go once
    // closed (the scrape's own connection is on the admin listener).
    let open = || async {
        let a = server.admin(Method::GET, "/metrics", None, "", true).await;
        sample(&a.body, "swh_connections_open").unwrap_or_else(|| panic!("no gauge in {}", a.body))
    };
    let before = open().await;
    let held = vec![server.connect().await, server.connect().await, server.connect().await];
    let deadline = Instant::now() + Duration::from_secs(10);
    while open().await < before + 3.0 {
        assert!(Instant::now() < deadline, "three open connections not counted: {}", open().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(held);
    while open().await > before {
        assert!(Instant::now() < deadline, "closed connections still counted: {}", open().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop();
}
