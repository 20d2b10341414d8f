//! The webhook listener over the wire: every row of the spec's Errors table, the 256 KiB limit (announced and
//! chunked, without reading past it), methods and paths, the share URL, and plain HTTP getting no service.

mod server_support;

use hyper::Method;
use serde_json::json;
use server_support::*;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

const LIMIT: usize = 262_144;

fn dirs_with_strategies(name: &str) -> Dirs {
    let dirs = Dirs::new(name);
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    let mut paused = snapshot("paused", &token('b'));
    paused["status"] = json!("paused");
    dirs.write("paused.json", &paused);
    dirs.write("fail.json", &failing_snapshot("fail", &token('c')));
    let mut options = snapshot("opts", &token('d'));
    options["asset_class"] = json!("option");
    options["allowed_instruments"] = json!(["*"]);
    options["options"] = json!({ "selection": "external" });
    dirs.write("opts.json", &options);
    dirs.write("rate.json", &snapshot("rate", &token('e')));
    dirs
}

#[tokio::test]
async fn every_row_of_the_errors_table() {
    let dirs = dirs_with_strategies("errors");
    let server = Server::start(&dirs, &[]);
    let ok = token('a');

    // 200 processed, then the same body again: 200 duplicate.
    let buy = json!({ "ticker": "AAPL", "action": "buy", "direction": "long" });
    let a = server.post_json(&ok, &buy).await;
    assert_eq!((a.status, a.body.as_str()), (200, r#"{"status":"processed"}"#));
    assert_eq!(a.content_type, "application/json");
    let a = server.post_json(&ok, &buy).await;
    assert_eq!((a.status, a.body.as_str()), (200, r#"{"status":"duplicate"}"#));

    // 200 rejected with a reason.
    let a = server.post_json(&ok, &json!({ "ticker": "NFLX", "action": "buy" })).await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json()["status"], "rejected");
    assert!(a.json()["reason"].as_str().unwrap().contains("NFLX"), "{}", a.body);

    // 200 rejected:true for a strategy that is not active.
    let a = server.post_json(&token('b'), &buy).await;
    assert_eq!((a.status, a.body.as_str()), (200, r#"{"rejected":true,"reason":"strategy is paused"}"#));

    // 400 for a malformed token, 404 for an unknown one.
    for bad in [token('A'), format!("{}z", &ok[1..]), ok[..63].to_string(), format!("%20{}", &ok[1..])] {
        let a = server.post_json(&bad, &buy).await;
        assert_eq!(a.status, 400, "{bad}: {}", a.body);
        assert_eq!(a.json()["code"], "invalid_token");
        assert_eq!(a.content_type, "application/json");
    }
    let a = server.post_json(&token('f'), &buy).await;
    assert_eq!(a.status, 404);
    assert_eq!(a.json()["code"], "unknown_token");

    // 422: more option legs than an order supports.
    let leg = json!({ "side": "call", "action": "buy_to_open", "strike": 100, "expiration": "2024-01-19" });
    let legs = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "legs": [leg, leg, leg, leg, leg] });
    let a = server.post_json(&token('d'), &legs).await;
    assert_eq!(a.status, 422, "{}", a.body);
    assert_eq!(a.json()["code"], "too_many_legs");
    // Failures are recorded in the strategy's logs too (the spec's Errors, rule 3).
    server.logs_when("opts", |rows| rows.iter().any(|r| r["http_status"] == 422 && r["level"] == "ERROR")).await;

    // 500 with the cause named.
    let a = server.post_json(&token('c'), &json!({ "ticker": "NVDA", "action": "buy" })).await;
    assert_eq!(a.status, 500, "{}", a.body);
    assert!(a.json()["error"].as_str().unwrap().contains("NVDA"), "{}", a.body);

    // 429 on the 61st alert within a minute; the exact body.
    let rate = token('e');
    for i in 0..60 {
        let a = server
            .post_json(
                &rate,
                &json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": format!("m{i}") } }),
            )
            .await;
        assert_eq!(a.status, 200, "alert {i}: {}", a.body);
    }
    let a = server.post_json(&rate, &json!({ "ticker": "AAPL", "action": "buy" })).await;
    assert_eq!((a.status, a.body.as_str()), (429, r#"{"error":"rate limit exceeded"}"#));
    assert_eq!(a.content_type, "application/json");

    // The request Content-Type reaches the engine: words are invalid JSON as application/json and an
    // alert as text/plain. (Different bytes each time: a rejected delivery keeps its dedup key.)
    let a = server.post(&ok, Some("application/json"), "buy long MSFT").await;
    assert_eq!(a.json()["status"], "rejected", "{}", a.body);
    assert!(a.body.contains("not valid JSON"), "{}", a.body);
    assert_eq!(server.post(&ok, Some("text/plain"), "long MSFT buy").await.body, r#"{"status":"processed"}"#);
    // A JSON-looking body sent as text/plain is not JSON-decoded but yields the same alert, its
    // `metadata.message_id` included, so it is a duplicate of the JSON delivery.
    let first = r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"ct-1"}}"#;
    let again = r#"{"action":"buy","ticker":"MSFT","metadata":{"message_id":"ct-1"}}"#;
    assert_eq!(server.post(&ok, Some("application/json"), first).await.body, r#"{"status":"processed"}"#);
    assert_eq!(server.post(&ok, Some("text/plain"), again).await.body, r#"{"status":"duplicate"}"#);

    // The token never reaches the server's own logs, nor the stored log rows.
    let logs = server.stderr_text();
    assert!(logs.contains("/webhooks/<redacted>"), "requests are logged, redacted");
    for t in ['a', 'b', 'c', 'd', 'e', 'f'] {
        assert!(!logs.contains(&token(t)), "a token leaked into the server's logs");
    }
    for id in ["ok", "paused", "fail", "opts", "rate"] {
        let rows = serde_json::to_string(&server.logs(id).await).unwrap();
        assert!(!rows.contains(&token('a')[..16]) && !rows.contains(&token('c')[..16]), "{rows}");
    }
    let stderr = server.stop();
    assert!(stderr.contains("stopped"), "{stderr}");
}

#[tokio::test]
async fn bodies_over_256_kib_get_413_without_being_read() {
    let dirs = dirs_with_strategies("limit");
    let server = Server::start(&dirs, &[]);
    let ok = token('a');

    // Exactly the limit is read and answered (as text it is no alert: 200 rejected).
    let at = vec![b'x'; LIMIT];
    let a = server.request(Method::POST, &format!("/webhooks/{ok}"), Some("text/plain"), &at).await;
    assert_eq!(a.status, 200, "{}", a.body);

    // One byte more, with a Content-Length: 413.
    let over = vec![b'x'; LIMIT + 1];
    let a = server.request(Method::POST, &format!("/webhooks/{ok}"), Some("text/plain"), &over).await;
    assert_eq!(a.status, 413, "{}", a.body);
    assert_eq!(a.json()["code"], "payload_too_large");
    assert_eq!(a.content_type, "application/json");
    server.logs_when("ok", |rows| rows.iter().any(|r| r["http_status"] == 413 && r["level"] == "ERROR")).await;

    // An announced length far over the limit is answered before a single body byte is sent.
    let mut s = server.connect().await;
    let head = format!(
        "POST /webhooks/{ok} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n"
    );
    send_raw(&mut s, head.as_bytes()).await;
    let (status, text) = read_raw_answer(&mut s, Duration::from_secs(10)).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "{text}");

    // The same with `Expect: 100-continue`: the refusal comes instead of the go-ahead.
    let mut s = server.connect().await;
    let head = format!(
        "POST /webhooks/{ok} HTTP/1.1\r\nhost: localhost\r\nexpect: 100-continue\r\ncontent-length: 300000\r\n\r\n"
    );
    send_raw(&mut s, head.as_bytes()).await;
    let (status, text) = read_raw_answer(&mut s, Duration::from_secs(10)).await;
    assert_eq!(status, 413, "{text}");
    assert!(!text.contains("100 Continue"), "{text}");

    // A chunked body that never ends: 413 as soon as 262,145 bytes have arrived.
    let mut s = server.connect().await;
    let head = format!("POST /webhooks/{ok} HTTP/1.1\r\nhost: localhost\r\ntransfer-encoding: chunked\r\n\r\n");
    send_raw(&mut s, head.as_bytes()).await;
    let chunk = vec![b'y'; 4096];
    let mut sent = 0;
    while sent <= LIMIT {
        let n = chunk.len().min(LIMIT + 1 - sent).max(1);
        let mut frame = format!("{n:x}\r\n").into_bytes();
        frame.extend_from_slice(&chunk[..n]);
        frame.extend_from_slice(b"\r\n");
        s.write_all(&frame).await.unwrap();
        sent += n;
    }
    s.flush().await.unwrap();
    // No terminating chunk is ever sent: the answer must not wait for one.
    let started = Instant::now();
    let (status, text) = read_raw_answer(&mut s, Duration::from_secs(10)).await;
    assert_eq!(status, 413, "{text}");
    assert!(started.elapsed() < Duration::from_secs(5), "the server waited for the rest of the body");

    // Under the limit in chunks is fine.
    let mut s = server.connect().await;
    let head = format!(
        "POST /webhooks/{ok} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    send_raw(&mut s, head.as_bytes()).await;
    let body = r#"{"ticker":"MSFT","action":"buy"}"#;
    send_raw(&mut s, format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()).as_bytes()).await;
    let (status, text) = read_raw_answer(&mut s, Duration::from_secs(10)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#"{"status":"processed"}"#), "{text}");
}

#[tokio::test]
async fn methods_paths_and_the_share_url() {
    let dirs = dirs_with_strategies("routes");
    let server = Server::start(&dirs, &[]);
    let ok = token('a');
    for method in [Method::GET, Method::PUT, Method::DELETE, Method::PATCH] {
        let a = server.request(method.clone(), &format!("/webhooks/{ok}"), None, b"").await;
        assert_eq!(a.status, 405, "{method}");
        assert_eq!(a.headers.get("allow").unwrap(), "POST");
        assert_eq!(a.content_type, "application/json");
    }
    for path in ["/", "/webhooks", "/webhook/x", &format!("/{ok}"), "/api/strategies"] {
        let a = server.request(Method::POST, path, None, b"{}").await;
        assert_eq!(a.status, 404, "{path}");
        assert_eq!(a.content_type, "application/json");
    }

    // The public share URL shows the strategy, never its token, and never takes an alert.
    let a = server.request(Method::GET, "/share/ok", None, b"").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json(), json!({ "id": "ok", "name": "test ok", "status": "active" }));
    assert!(!a.body.contains(&ok));
    for path in ["/share/ok".to_string(), format!("/share/{ok}")] {
        let a =
            server.request(Method::POST, &path, Some("application/json"), br#"{"ticker":"AAPL","action":"buy"}"#).await;
        assert_eq!(a.status, 405, "{path}");
        assert_eq!(a.headers.get("allow").unwrap(), "GET");
    }
    assert_eq!(server.request(Method::GET, "/share/nope", None, b"").await.status, 404);
    // Nothing above was an alert.
    assert!(server.logs("ok").await.is_empty());
}

#[tokio::test]
async fn plain_http_on_the_port_gets_no_service() {
    let dirs = dirs_with_strategies("plain");
    let server = Server::start(&dirs, &[]);
    let mut tcp = tokio::net::TcpStream::connect(server.webhook).await.unwrap();
    let req = format!(
        "POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{{}}",
        token('a')
    );
    send_raw(&mut tcp, req.as_bytes()).await;
    let (_, text) = read_raw_answer(&mut tcp, Duration::from_secs(10)).await;
    assert!(!text.contains("HTTP/"), "plain HTTP got an HTTP answer: {text:?}");
    assert!(server.logs("ok").await.is_empty(), "nothing was delivered");
}

/// A sender that writes a whole alert and closes its side at once (a script's `print(request); close()`, a pipe into
/// `openssl s_client`): the server read end-of-stream before the handler had taken the body and dropped the request,
/// so most such alerts were neither decided nor logged. A complete request is answered whatever the sender does next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_alert_sent_just_before_the_sender_closes_is_decided() {
    let dirs = Dirs::new("closenotify");
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    let server = Server::start(&dirs, &[]);
    let ok = token('a');
    let ids: Vec<String> = (0..10).map(|i| format!("cn-{i}")).collect();
    for id in &ids {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"{id}"}}}}"#);
        let mut s = server.connect().await;
        let r = format!(
            "POST /webhooks/{ok} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        send_raw(&mut s, r.as_bytes()).await;
        // close_notify, then FIN; the answer is never read.
        let _ = s.shutdown().await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = server.logs("ok").await;
        let lost: Vec<&String> =
            ids.iter().filter(|id| !rows.iter().any(|r| r["alerts"].to_string().contains(id.as_str()))).collect();
        if lost.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "complete alerts neither decided nor logged: {lost:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.stop();
}
