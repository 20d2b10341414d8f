//! The admin listener: authentication, the strategies list, stored logs (levels, paging, surviving a restart),
//! the dry run, token rotation (the old token is 404 at once and after a restart) and the Logs view page.

mod server_support;

use hyper::Method;
use serde_json::{json, Value};
use server_support::*;

fn dirs(name: &str) -> Dirs {
    let dirs = Dirs::new(name);
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    dirs.write("fail.json", &failing_snapshot("fail", &token('c')));
    dirs
}

#[tokio::test]
async fn the_api_needs_the_admin_token() {
    let dirs = dirs("auth");
    let server = Server::start(&dirs, &[]);
    for (method, path) in [
        (Method::GET, "/api/strategies"),
        (Method::GET, "/api/strategies/ok/logs"),
        (Method::POST, "/api/strategies/ok/rotate"),
        (Method::POST, "/api/strategies/ok/validate"),
    ] {
        let a = server.admin(method.clone(), path, None, "", false).await;
        assert_eq!(a.status, 401, "{method} {path}");
        assert_eq!(a.headers.get("www-authenticate").unwrap(), "Bearer");
    }
    // A wrong token of the right length, and the right token in the query of an API call, are refused too.
    let tcp = tokio::net::TcpStream::connect(server.admin).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp)).await.unwrap();
    tokio::spawn(conn);
    let wrong = hyper::Request::get("/api/strategies")
        .header("host", "localhost")
        .header("authorization", format!("Bearer {}", "0".repeat(64)))
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .unwrap();
    assert_eq!(send.send_request(wrong).await.unwrap().status(), 401);
    let path = format!("/api/strategies?token={}", server.admin_token);
    assert_eq!(server.admin(Method::GET, &path, None, "", false).await.status, 401);
    // Pages take the token from the query.
    assert_eq!(server.admin(Method::GET, "/logs/ok", None, "", false).await.status, 401);
    let page = server.admin(Method::GET, &format!("/logs/ok?token={}", server.admin_token), None, "", false).await;
    assert_eq!(page.status, 200);
    assert!(page.content_type.starts_with("text/html"));
    assert_eq!(server.admin(Method::GET, "/nope", None, "", true).await.status, 404);
    assert_eq!(server.admin(Method::DELETE, "/api/strategies", None, "", true).await.status, 405);
}

#[tokio::test]
async fn logs_rotation_and_dry_run_survive_a_restart() {
    let dirs = dirs("admin");
    let files_before: Vec<Vec<u8>> =
        ["ok.json", "fail.json"].iter().map(|f| std::fs::read(dirs.strategies.join(f)).unwrap()).collect();
    let server = Server::start(&dirs, &[]);
    let old = token('a');

    // The strategies list: id, name, status, bot count, and no token.
    let list = server.admin_get("/api/strategies").await;
    assert_eq!(
        list["strategies"],
        json!([
            { "id": "fail", "name": "test fail", "status": "active", "bots": 1 },
            { "id": "ok", "name": "test ok", "status": "active", "bots": 0 },
        ])
    );
    assert!(!list.to_string().contains(&old[..16]));

    // A processed, a rejected and a failed alert leave INFO, WARN and ERROR rows.
    let processed = server.post_json(&old, &json!({ "ticker": "AAPL", "action": "buy" })).await;
    assert_eq!(processed.body, r#"{"status":"processed"}"#);
    let rejected = server.post_json(&old, &json!({ "ticker": "NFLX", "action": "buy" })).await;
    assert_eq!(rejected.json()["status"], "rejected");
    assert_eq!(server.post_json(&token('c'), &json!({ "ticker": "NVDA", "action": "buy" })).await.status, 500);

    let rows = wait_rows(&server, "ok", 3).await;
    let levels: Vec<&str> = rows.iter().map(|r| r["level"].as_str().unwrap()).collect();
    assert!(levels.contains(&"INFO") && levels.contains(&"WARN"), "{levels:?}");
    let newest = &rows[0];
    assert_eq!(newest["decision"], "rejected");
    assert_eq!(newest["http_status"], 200);
    assert!(newest["message"].as_str().unwrap().contains("NFLX"));
    assert!(newest["alerts"].is_array());
    assert!(newest["time"].as_str().unwrap().ends_with('Z'));
    let processed_row = rows.iter().find(|r| r["decision"] == "processed").unwrap();
    assert_eq!(processed_row["alerts"][0]["instrument"], "AAPL");
    let fail_rows = wait_rows(&server, "fail", 1).await;
    assert!(fail_rows.iter().any(|r| r["level"] == "ERROR" && r["http_status"] == 500), "{fail_rows:?}");

    // Filters and paging: newest first, `before_id` continues where a page ended.
    let warn = server.admin_get("/api/strategies/ok/logs?level=WARN").await;
    assert!(warn["logs"].as_array().unwrap().iter().all(|r| r["level"] != "INFO"), "{warn}");
    let page1 = server.admin_get("/api/strategies/ok/logs?limit=1").await;
    let cursor = page1["next_before_id"].as_i64().unwrap();
    assert_eq!(page1["logs"][0]["id"].as_i64().unwrap(), cursor);
    let page2 = server.admin_get(&format!("/api/strategies/ok/logs?limit=1&before_id={cursor}")).await;
    assert!(page2["logs"][0]["id"].as_i64().unwrap() < cursor);
    let future = server.admin_get("/api/strategies/ok/logs?since=99999999999999").await;
    assert_eq!(future["logs"], json!([]));
    let until = server.admin_get("/api/strategies/ok/logs?until=1").await;
    assert_eq!(until["logs"], json!([]));
    let bad = server.admin(Method::GET, "/api/strategies/ok/logs?limit=x", None, "", true).await;
    assert_eq!(bad.status, 400);

    // The dry run answers what the webhook would, and records nothing: no row, no dedup key.
    let sample = r#"{"ticker":"MSFT","action":"buy"}"#;
    let a = server.admin(Method::POST, "/api/strategies/ok/validate", Some("application/json"), sample, true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let dry = a.json();
    assert_eq!(dry["decision"], "processed");
    assert_eq!(dry["http_status"], 200);
    assert_eq!(dry["response"], json!({ "status": "processed" }));
    assert!(dry["orders"].is_array() && dry["logs"].is_array());
    let aapl = json!({ "ticker": "AAPL", "action": "buy" }).to_string();
    let dup = server.admin(Method::POST, "/api/strategies/ok/validate", Some("application/json"), &aapl, true).await;
    assert_eq!(dup.json()["decision"], "duplicate", "the dry run sees the live dedup state");
    let dry_text =
        server.admin(Method::POST, "/api/strategies/ok/validate?content_type=text/plain", None, "AAPL buy", true).await;
    assert_eq!(dry_text.status, 200);
    // `content_type=` empty (the console's default since the dry run of a text alert was read as JSON) is no type,
    // whatever the browser's own header says: a text
    // alert is read as text and a JSON one as JSON, as the webhook reads a sender that names none.
    for (body, header) in [("MSFT buy", Some("text/plain;charset=UTF-8")), (sample, Some("text/plain;charset=UTF-8"))] {
        let a = server.admin(Method::POST, "/api/strategies/ok/validate?content_type=", header, body, true).await;
        let dry = a.json();
        assert_eq!(
            (dry["decision"].as_str(), dry["alerts"][0]["instrument"].as_str()),
            (Some("processed"), Some("MSFT"))
        );
    }
    assert_eq!(server.logs("ok").await.len(), rows.len(), "a dry run stores no row");
    assert_eq!(server.post(&old, Some("application/json"), sample).await.body, r#"{"status":"processed"}"#);
    let unknown = server.admin(Method::POST, "/api/strategies/nope/validate", None, "{}", true).await;
    assert_eq!(unknown.status, 404);

    // Rotation: a new 64-hex token; the old one answers 404 at once.
    let a = server.admin(Method::POST, "/api/strategies/ok/rotate", None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let rotated = a.json();
    let new = rotated["token_hash"].as_str().unwrap().to_owned();
    assert_eq!(new.len(), 64);
    assert!(new.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    assert_ne!(new, old);
    assert!(rotated["webhook_url"].as_str().unwrap().ends_with(&format!("/webhooks/{new}")));
    let buy = json!({ "ticker": "SPY", "action": "buy" });
    assert_eq!(server.post_json(&old, &buy).await.status, 404);
    let a = server.post_json(&new, &buy).await;
    assert_eq!(a.body, r#"{"status":"processed"}"#);
    assert_eq!(server.admin(Method::POST, "/api/strategies/nope/rotate", None, "", true).await.status, 404);
    let rows_before_restart = wait_rows(&server, "ok", rows.len() + 2).await;

    // Neither the rotated token nor the old one went into the server's logs or the log rows.
    let stderr = server.stop();
    assert!(!stderr.contains(&new) && !stderr.contains(&old), "a token leaked into the server's logs");
    assert!(!serde_json::to_string(&rows_before_restart).unwrap().contains(&new));

    // After a restart: the old token is still 404, the new one works, the rows are all there, and no
    // secret was written to the strategy files.
    let server = Server::start(&dirs, &[]);
    assert_eq!(server.post_json(&old, &buy).await.status, 404);
    assert_eq!(server.post_json(&new, &json!({ "ticker": "MSFT", "action": "buy", "n": 2 })).await.status, 200);
    let after = server.logs("ok").await;
    for row in &rows_before_restart {
        assert!(after.contains(row), "row lost across the restart: {row}");
    }
    let files_after: Vec<Vec<u8>> =
        ["ok.json", "fail.json"].iter().map(|f| std::fs::read(dirs.strategies.join(f)).unwrap()).collect();
    assert_eq!(files_before, files_after, "the strategy files are never written");
    server.stop();
}

/// Rotated tokens were kept by strategy id alone: a rotated strategy's file given another id, or copied into a
/// new strategy, answered the token rotated away (perhaps because it leaked) again, and for the rename the
/// senders of the new token lost theirs. Such a file is refused, now and after a restart.
#[tokio::test]
async fn a_token_rotated_away_never_answers_again_from_a_renamed_id_or_a_copied_file() {
    let dirs = dirs("retired");
    let server = Server::start(&dirs, &[]);
    let old = token('a');
    let a = server.admin(Method::POST, "/api/strategies/ok/rotate", None, "", true).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let new = a.json()["token_hash"].as_str().unwrap().to_owned();
    let buy = |n: u32| json!({ "ticker": "SPY", "action": "buy", "n": n });

    // The file's id changed after the rotation: refused, and the strategy keeps answering its new token.
    dirs.write("ok.json", &snapshot("ok-v2", &old));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !server.stderr_text().contains("was rotated away from strategy ok") {
        assert!(std::time::Instant::now() < deadline, "the renamed file was not refused: {}", server.stderr_text());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(server.post_json(&old, &buy(1)).await.status, 404);
    assert_eq!(server.post_json(&new, &buy(2)).await.status, 200);
    dirs.write("ok.json", &snapshot("ok", &old));

    // A copy of the rotated strategy's file under a new id: refused.
    dirs.write("copy.json", &snapshot("copy", &old));
    while server.stderr_text().matches("was rotated away from strategy ok").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "the copy was not refused: {}", server.stderr_text());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(server.post_json(&old, &buy(3)).await.status, 404);
    let list = server.admin_get("/api/strategies").await;
    assert!(list["strategies"].as_array().unwrap().iter().all(|s| s["id"] != "copy"), "{list}");
    // An edit of the rotated strategy's own file (its id kept, the old token still written in it) takes effect,
    // and the strategy goes on answering its new token, not the old one (the spec's Authentication, 3 and 4).
    let mut edited = snapshot("ok", &old);
    edited["status"] = json!("paused");
    dirs.write("ok.json", &edited);
    let paused = r#"{"rejected":true,"reason":"strategy is paused"}"#;
    while server.post_json(&new, &buy(6)).await.body != paused {
        assert!(std::time::Instant::now() < deadline, "the edit was not loaded: {}", server.stderr_text());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(server.post_json(&old, &buy(7)).await.status, 404);
    edited["status"] = json!("active");
    dirs.write("ok.json", &edited);
    while server.post_json(&new, &buy(8)).await.body != r#"{"status":"processed"}"# {
        assert!(std::time::Instant::now() < deadline, "the edit was not loaded: {}", server.stderr_text());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.stop();

    // After a restart too.
    let server = Server::start(&dirs, &[]);
    assert_eq!(server.post_json(&old, &buy(4)).await.status, 404);
    assert_eq!(server.post_json(&new, &buy(5)).await.status, 200);
    server.stop();
}

/// A rotation whose strategy was unloaded during its commit (its file removed meanwhile) was committed, the old
/// token retired, and answered 404: the operator never learned the new token, and once the file came back every
/// sender was refused. The rotation is answered with its new token, which the strategy answers once it loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_committed_while_its_file_was_removed_still_gives_its_token() {
    let dirs = dirs("rotate-unloaded");
    let server = std::sync::Arc::new(Server::start(&dirs, &["--reload-interval-ms", "100"]));
    let old = token('a');
    // The database held by another writer: the rotation's commit waits for it.
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let rotation = {
        let s = std::sync::Arc::clone(&server);
        tokio::spawn(async move { s.admin(Method::POST, "/api/strategies/ok/rotate", None, "", true).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let file = dirs.strategies.join("ok.json");
    let saved = std::fs::read(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    server.wait_for_strategies("the file's removal", |list| list.iter().all(|s| s["id"] != "ok")).await;
    db.execute_batch("COMMIT").unwrap();
    let answer = rotation.await.unwrap();
    assert_eq!(answer.status, 200, "{}", answer.body);
    let new = answer.json()["token_hash"].as_str().unwrap().to_owned();
    std::fs::write(&file, saved).unwrap();
    server.wait_for_strategies("the file back", |list| list.iter().any(|s| s["id"] == "ok")).await;
    let buy = json!({ "ticker": "SPY", "action": "buy" });
    assert_eq!(server.post_json(&new, &buy).await.status, 200);
    assert_eq!(server.post_json(&old, &buy).await.status, 404);
    std::sync::Arc::try_unwrap(server).ok().unwrap().stop();
}

#[tokio::test]
async fn the_logs_page_renders_rows_with_levels_and_escapes_them() {
    let dirs = dirs("page");
    let server = Server::start(&dirs, &[]);
    let ok = token('a');
    server.post_json(&ok, &json!({ "ticker": "AAPL", "action": "buy" })).await;
    server.post_json(&ok, &json!({ "ticker": "<b>X</b>", "action": "buy" })).await;
    wait_logs(&server, "ok", |rows| rows.iter().any(|r| r["message"].as_str().unwrap_or("").contains("<b>X</b>")))
        .await;
    let page = server.admin(Method::GET, &format!("/logs/ok?token={}", server.admin_token), None, "", false).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(r#"class="row lvl-INFO""#) && page.body.contains(r#"class="row lvl-WARN""#),
        "{}",
        page.body
    );
    assert!(page.body.contains("&lt;b&gt;X&lt;/b&gt;") && !page.body.contains("<b>X</b>"), "sender text is escaped");
    assert!(!page.body.contains(&ok), "the webhook token is not on the page");
    let csp = page.headers.get("content-security-policy").unwrap().to_str().unwrap();
    assert!(csp.contains("script-src 'nonce-"), "{csp}");
    assert_eq!(page.headers.get("referrer-policy").unwrap(), "no-referrer");
    let index = server.admin(Method::GET, &format!("/?token={}", server.admin_token), None, "", false).await;
    assert!(index.body.contains("/logs/ok?token=") && index.body.contains("/logs/fail?token="), "{}", index.body);
}

/// A strategy id is data in the page's inline script: one holding `</script>` must not end that script.
#[tokio::test]
async fn a_strategy_id_cannot_break_out_of_the_logs_page_script() {
    let dirs = Dirs::new("page-script");
    let id = "x</script><script>alert(1)</script>";
    dirs.write("x.json", &snapshot(id, &token('d')));
    let server = Server::start(&dirs, &[]);
    server.wait_for_strategies("the strategy", |list| list.iter().any(|s| s["id"] == id)).await;
    server.post_json(&token('d'), &json!({ "ticker": "AAPL", "action": "buy" })).await;
    let encoded = "x%3C%2Fscript%3E%3Cscript%3Ealert(1)%3C%2Fscript%3E";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.admin_get(&format!("/api/strategies/{encoded}/logs")).await["logs"]
        .as_array()
        .map_or(true, Vec::is_empty)
    {
        assert!(std::time::Instant::now() < deadline, "the alert's row was never stored");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let path = format!("/logs/{encoded}?token={}", server.admin_token);
    let page = server.admin(Method::GET, &path, None, "", false).await;
    assert_eq!(page.status, 200, "{}", page.body);
    // The page's own script is the only one; the id is in it as JSON with `<` and `>` escaped.
    assert_eq!(page.body.matches("<script").count(), 1, "{}", page.body);
    assert_eq!(page.body.matches("</script>").count(), 1, "{}", page.body);
    assert!(page.body.contains(r#"const id = "x\u003c/script\u003e\u003cscript\u003ealert(1)\u003c/script\u003e";"#));
    assert!(page.body.contains("x&lt;/script&gt;"), "the id is escaped in the markup: {}", page.body);
    assert!(page.body.contains(r#"class="row lvl-INFO""#), "the row is shown: {}", page.body);
}

/// The log rows of a strategy once at least `n` are stored (the writer commits asynchronously).
async fn wait_rows(server: &Server, id: &str, n: usize) -> Vec<Value> {
    wait_logs(server, id, |rows| rows.len() >= n).await
}

/// The log rows of a strategy once `ready` holds for them.
async fn wait_logs(server: &Server, id: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    server.logs_when(id, ready).await
}

/// A rotation's commit and its taking effect were one request's work: an operator who gave up waiting (a
/// script's timeout, Ctrl-C) while the commit waited for the database dropped the request between the two. The
/// database then held the new token while the server kept answering the old one (perhaps leaked) until a
/// restart, which switched every sender to a token nobody had been given. The change now finishes on its own.
#[tokio::test]
async fn a_rotation_the_operator_walks_away_from_still_takes_effect() {
    use tokio::io::AsyncWriteExt;
    let dirs = dirs("walkaway");
    let server = Server::start(&dirs, &[]);
    let old = token('a');
    let buy = |n: u32| json!({ "ticker": "SPY", "action": "buy", "n": n });
    assert_eq!(server.post_json(&old, &buy(1)).await.status, 200);

    // The database is busy: the server's commit waits (its busy timeout is 5 s).
    let db = rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut tcp = tokio::net::TcpStream::connect(server.admin).await.unwrap();
    let head = format!(
        "POST /api/strategies/ok/rotate HTTP/1.1\r\nHost: admin\r\nAuthorization: Bearer {}\r\nContent-Length: 0\r\n\r\n",
        server.admin_token
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    drop(tcp);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    db.execute_batch("COMMIT").unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let stored = loop {
        let row: Option<String> =
            db.query_row("SELECT token_hash FROM token_overrides WHERE strategy = 'ok'", [], |r| r.get(0)).ok();
        if let Some(t) = row {
            break t;
        }
        assert!(std::time::Instant::now() < deadline, "the rotation was never committed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_ne!(stored, old);
    // Committed, so in effect: the old token is gone and the new one is the URL the server hands out.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while server.post_json(&old, &buy(2)).await.status != 404 {
        assert!(std::time::Instant::now() < deadline, "the old token still answers after the rotation was committed");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let url = server.admin_get("/api/strategies/ok/webhook_url").await;
    assert!(url["webhook_url"].as_str().unwrap().ends_with(&format!("/webhooks/{stored}")), "{url}");
    assert_eq!(server.post_json(&stored, &buy(3)).await.status, 200);
    server.stop();
}

/// A bots file whose entry names no bot (a typo in the key: `alp-lvie` for `alp-live`) started the server as if
/// it were not there: the strategy's alpaca bot fell back to the paper broker, its alerts answered `processed`
/// and filled on paper while the account never traded, and nothing said so. Bots not listed stay on paper (the
/// demo needs that), but with a bots file given both halves of the mistake are an ERROR at load, once per load
/// rather than per alert, and the strategy's page says where the bot's orders go and why.
#[tokio::test]
async fn a_bots_file_entry_that_names_no_bot_is_not_silently_ignored() {
    let dirs = Dirs::new("bots-typo");
    let mut v = snapshot("live", &token('d'));
    v["bots"] = json!([{ "id": "alp-live", "broker": "alpaca", "account_id": "PA1",
                         "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("live.json", &v);
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "alp-lvie": { "delivery": "http", "base_url": "http://127.0.0.1:9" } }).to_string())
        .unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    for action in ["buy", "sell"] {
        let a = server.post_json(&token('d'), &json!({ "ticker": "AAPL", "action": action })).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let rows = loop {
        let rows = server.admin_get("/api/strategies/live/outbox").await["outbox"].clone();
        let done = rows.as_array().is_some_and(|r| r.len() >= 2 && r.iter().all(|r| r["status"] == "done"));
        if done || std::time::Instant::now() > deadline {
            break rows;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    // The rule stands: the unlisted bot is delivered on paper.
    assert_eq!(rows[0]["target"], "paper", "{rows}");
    let stderr = server.stderr_text();
    let errors: Vec<&str> = stderr.lines().filter(|l| l.contains("ERROR")).collect();
    let unused: Vec<&&str> = errors.iter().filter(|l| l.contains("alp-lvie") && l.contains("no strategy")).collect();
    assert_eq!(unused.len(), 1, "nothing says the bots file's entry is unused (once): {stderr}");
    let on_paper: Vec<&&str> = errors
        .iter()
        .filter(|l| l.contains("`alp-live`") && l.contains("`live`") && l.contains("not in the bots file"))
        .collect();
    assert_eq!(on_paper.len(), 1, "nothing says (once, not per alert) that bot alp-live goes to paper: {stderr}");
    assert!(on_paper[0].contains("paper"), "{}", on_paper[0]);

    // Where the operator looks: the strategy's page.
    let t = &server.admin_token;
    let page = server.admin(Method::GET, &format!("/strategies/live?token={t}"), None, "", false).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("not in the bots file"), "{}", page.body);

    // A reload of the strategy says it again; the fixed bots file is read at the next start.
    v["name"] = json!("edited");
    dirs.write("live.json", &v);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.stderr_text().matches("is not in the bots file").count() < 2 {
        assert!(std::time::Instant::now() < deadline, "a reload does not say it again: {}", server.stderr_text());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server.stop();
}

/// Every admin answer says `Cache-Control: no-store`: the webhook URL the console's Reveal and Copy fetch holds the
/// token that trades the strategy, and a rotation's answer the new one; a browser keeps a GET it is not told not
/// to store in its disk cache, so the token ended up in the operator's browser profile, where the pages were not.
#[tokio::test]
async fn no_admin_answer_is_stored_by_a_browser() {
    let dirs = dirs("no-store");
    let server = Server::start(&dirs, &[]);
    let token = server.admin_token.clone();
    for (method, path, auth) in [
        (Method::GET, "/api/strategies/ok/webhook_url".to_owned(), true),
        (Method::POST, "/api/strategies/ok/rotate".to_owned(), true),
        (Method::GET, "/api/strategies/ok/logs".to_owned(), true),
        (Method::GET, "/api/strategies/ok/outbox".to_owned(), true),
        (Method::GET, "/api/strategies".to_owned(), true),
        (Method::GET, "/api/strategies/nope/webhook_url".to_owned(), true),
        (Method::GET, "/api/strategies".to_owned(), false),
        (Method::GET, format!("/logs/ok?token={token}"), false),
    ] {
        let a = server.admin(method.clone(), &path, None, "", auth).await;
        let cache = a.headers.get("cache-control").and_then(|v| v.to_str().ok()).unwrap_or("");
        assert_eq!(cache, "no-store", "{method} {path} answered {} with Cache-Control {cache:?}", a.status);
    }
}

/// A NUL in the Logs filter or in a strategy id is the operator's typing, not the store's failure: PostgreSQL
/// refuses a NUL in text and answered 500 `store_error`; it is a 400 (the filter) or an unknown strategy (404).
#[tokio::test]
async fn a_nul_in_a_filter_or_an_id_is_the_callers_error() {
    let dirs = dirs("nul");
    let server = Server::start(&dirs, &[]);
    let a = server.admin(Method::GET, "/api/strategies/ok/logs?q=AAPL%00", None, "", true).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("NUL"), "{}", a.body);
    let a = server.admin(Method::GET, "/api/strategies/o%00k/logs", None, "", true).await;
    assert_eq!(a.status, 404, "{}", a.body);
}
