//! The server over time: live reload of strategy files (keeping dedup state, surviving a broken file,
//! removing a deleted one) and graceful shutdown with a request in flight.

mod server_support;

use serde_json::json;
use server_support::*;
use std::time::{Duration, Instant};

#[tokio::test]
async fn edited_files_reload_live_and_keep_dedup_state() {
    let dirs = Dirs::new("reload");
    let mut snap = snapshot("live", &token('a'));
    snap["allowed_instruments"] = json!(["AAPL"]);
    dirs.write("live.json", &snap);
    let server = Server::start(&dirs, &[]);
    let t = token('a');

    let first = json!({ "ticker": "TSLA", "action": "buy", "metadata": { "message_id": "m1" } });
    let a = server.post_json(&t, &first).await;
    assert_eq!(a.json()["status"], "rejected", "{}", a.body);

    // A new version of the file: TSLA allowed, new name.
    snap["allowed_instruments"] = json!(["AAPL", "TSLA"]);
    snap["name"] = json!("version 2");
    dirs.write("live.json", &snap);
    server.wait_for_strategies("the edit", |s| s.iter().any(|x| x["name"] == "version 2")).await;
    // The dedup state was kept: the same message id is still a duplicate ...
    assert_eq!(server.post_json(&t, &first).await.body, r#"{"status":"duplicate"}"#);
    // ... and the new configuration is live.
    let second = json!({ "ticker": "TSLA", "action": "buy", "metadata": { "message_id": "m2" } });
    assert_eq!(server.post_json(&t, &second).await.body, r#"{"status":"processed"}"#);

    // A broken file is reported and the previous version stays live.
    std::fs::write(dirs.strategies.join("live.json"), b"{ \"id\": \"live\", oops").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("strategy file not loaded") {
        assert!(Instant::now() < deadline, "the broken file was not reported: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let third = json!({ "ticker": "TSLA", "action": "buy", "metadata": { "message_id": "m3" } });
    assert_eq!(server.post_json(&t, &third).await.body, r#"{"status":"processed"}"#);
    // A snapshot error (not just bad JSON) is reported with its cause.
    let mut invalid = snap.clone();
    invalid["allowed_instruments"] = json!([]);
    dirs.write("live.json", &invalid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("allowed_instruments") {
        assert!(Instant::now() < deadline, "the snapshot error was not reported: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fourth = json!({ "ticker": "TSLA", "action": "buy", "metadata": { "message_id": "m4" } });
    assert_eq!(server.post_json(&t, &fourth).await.body, r#"{"status":"processed"}"#);

    // A new file adds a strategy; a deleted file removes its strategy.
    dirs.write("other.json", &snapshot("other", &token('b')));
    server.wait_for_strategies("the new file", |s| s.iter().any(|x| x["id"] == "other")).await;
    assert_eq!(server.post_json(&token('b'), &json!({ "ticker": "AAPL", "action": "buy" })).await.status, 200);
    std::fs::remove_file(dirs.strategies.join("live.json")).unwrap();
    server.wait_for_strategies("the removal", |s| s.iter().all(|x| x["id"] != "live")).await;
    assert_eq!(server.post_json(&t, &second).await.status, 404);
    assert!(!server.stderr_text().contains(&t), "a token leaked into the server's logs");
    server.stop();
}

/// A strategy file renamed is gone and new in one scan. Its strategy was removed with its dedup and rate
/// windows, then loaded afresh: the sender's retry of an alert it had processed was processed again.
#[tokio::test]
async fn a_renamed_file_keeps_its_strategys_dedup_state() {
    let dirs = Dirs::new("rename");
    dirs.write("keep.json", &snapshot("keep", &token('c')));
    let server = Server::start(&dirs, &[]);
    let t = token('c');
    let alert = json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": "r1" } });
    assert_eq!(server.post_json(&t, &alert).await.body, r#"{"status":"processed"}"#);
    std::fs::rename(dirs.strategies.join("keep.json"), dirs.strategies.join("keep-renamed.json")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("strategy removed") {
        assert!(Instant::now() < deadline, "the rename was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.wait_for_strategies("the renamed file", |s| s.iter().any(|x| x["id"] == "keep")).await;
    assert_eq!(server.post_json(&t, &alert).await.body, r#"{"status":"duplicate"}"#);
    server.stop();
}

/// A rename by copy then delete: the copy is refused while the original defines its id, then the original is
/// deleted and its strategy unloaded. The copy was never read again (its file unchanged), so every alert of the
/// strategy answered 404 until a file was touched or the server restarted.
#[tokio::test]
async fn a_strategy_copied_then_its_original_deleted_stays_loaded_from_the_copy() {
    let dirs = Dirs::new("copy-delete");
    dirs.write("keep.json", &snapshot("keep", &token('d')));
    let server = Server::start(&dirs, &[]);
    let t = token('d');
    let alert = json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": "c1" } });
    assert_eq!(server.post_json(&t, &alert).await.body, r#"{"status":"processed"}"#);
    std::fs::copy(dirs.strategies.join("keep.json"), dirs.strategies.join("keep-copy.json")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("already defines this strategy id") {
        assert!(Instant::now() < deadline, "the copy was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(dirs.strategies.join("keep.json")).unwrap();
    while !server.stderr_text().contains("strategy removed") {
        assert!(Instant::now() < deadline, "the deletion was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.wait_for_strategies("the copy taking over", |s| s.iter().any(|x| x["id"] == "keep")).await;
    assert_eq!(server.post_json(&t, &alert).await.body, r#"{"status":"duplicate"}"#);
    server.stop();
}

/// Strategy files given as symbolic links (a Kubernetes ConfigMap mount, a link into a checkout) were skipped
/// without a word: the directory entry's own metadata is the link's, which is not a file.
#[tokio::test]
async fn a_strategy_file_that_is_a_symbolic_link_is_loaded() {
    let dirs = Dirs::new("symlink");
    let elsewhere = dirs.root.join("linked-target.json");
    std::fs::write(&elsewhere, snapshot("linked", &token('e')).to_string()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dirs.strategies.join("linked.json")).unwrap();
    let server = Server::start(&dirs, &[]);
    server.wait_for_strategies("the linked file", |s| s.iter().any(|x| x["id"] == "linked")).await;
    let alert = json!({ "ticker": "AAPL", "action": "buy" });
    assert_eq!(server.post_json(&token('e'), &alert).await.status, 200);
    server.stop();
}

#[tokio::test]
async fn sigterm_lets_a_request_in_flight_finish() {
    let dirs = Dirs::new("shutdown");
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    let mut server = Server::start(&dirs, &[]);
    let body = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"slow-1"}}"#;

    // A slow sender: the head and half of the body now, the rest after SIGTERM.
    let mut slow = server.connect().await;
    let head = format!(
        "POST /webhooks/{} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        token('a'),
        body.len()
    );
    send_raw(&mut slow, head.as_bytes()).await;
    let (part1, part2) = body.split_at(body.len() / 2);
    send_raw(&mut slow, part1.as_bytes()).await;
    // An idle keep-alive connection must not hold the shutdown up.
    let _idle = server.connect().await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    server.terminate();
    // New connections are refused once the listener is closed.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(server.webhook).await.is_ok() {
        assert!(Instant::now() < deadline, "the listener still accepts after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(server.try_status().is_none(), "the server must wait for the request in flight");

    tokio::time::sleep(Duration::from_millis(300)).await;
    send_raw(&mut slow, part2.as_bytes()).await;
    let (status, text) = read_raw_answer(&mut slow, Duration::from_secs(10)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#"{"status":"processed"}"#), "{text}");
    assert!(text.to_ascii_lowercase().contains("connection: close"), "the answer says the connection ends: {text}");

    let status = server.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {}", server.stderr_text());
    drop(server);

    // The store was flushed: the answered request's rows are there after a restart.
    let server = Server::start(&dirs, &[]);
    let rows = server.logs("ok").await;
    assert!(rows.iter().any(|r| r["decision"] == "processed"), "{rows:?}");
    server.stop();
}

#[tokio::test]
async fn log_rows_are_pruned_by_count_and_age() {
    let dirs = Dirs::new("prune");
    dirs.write("ok.json", &snapshot("ok", &token('a')));
    let server = Server::start(&dirs, &[]);
    for i in 0..4 {
        let alert = json!({ "ticker": "AAPL", "action": "buy", "metadata": { "message_id": format!("p{i}") } });
        assert_eq!(server.post_json(&token('a'), &alert).await.status, 200);
    }
    server.stop();

    let server = Server::start(&dirs, &[]);
    let all = server.logs("ok").await;
    assert!(all.len() >= 4, "{all:?}");
    server.stop();

    // Pruning runs at start (and every 10 minutes): at most 3 rows per strategy, the newest.
    let server = Server::start(&dirs, &["--log-max-rows", "3"]);
    assert_eq!(server.logs("ok").await, all[..3], "the newest rows are kept");
    server.stop();

    // Retention 0 days: everything older than now goes.
    let server = Server::start(&dirs, &["--log-retention-days", "0"]);
    assert!(server.logs("ok").await.is_empty());
    server.stop();
}

/// A file edited to the id another file has is refused (it keeps its old strategy live); once that other file
/// is deleted, the edited one must load. It was never read again (unchanged since), so the id stayed unloaded,
/// every alert a 404, and the file's old strategy kept trading.
#[tokio::test]
async fn a_file_refused_for_another_files_id_loads_once_that_file_is_gone() {
    let dirs = Dirs::new("clash-retry");
    dirs.write("a.json", &snapshot("swing", &token('1')));
    dirs.write("b.json", &snapshot("swing-test", &token('2')));
    let server = Server::start(&dirs, &[]);
    server.wait_for_strategies("both files", |s| s.len() == 2).await;
    dirs.write("b.json", &snapshot("swing", &token('3')));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.stderr_text().contains("already defines this strategy id") {
        assert!(Instant::now() < deadline, "the clash was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(dirs.strategies.join("a.json")).unwrap();
    server
        .wait_for_strategies("the edited file's version", |s| s.len() == 1 && s.iter().any(|x| x["id"] == "swing"))
        .await;
    let alert = json!({ "ticker": "AAPL", "action": "buy" });
    assert_eq!(server.post_json(&token('3'), &alert).await.status, 200);
    assert_eq!(server.post_json(&token('2'), &alert).await.status, 404, "the file's old strategy is gone");
    assert_eq!(server.post_json(&token('1'), &alert).await.status, 404);
    server.stop();
}

/// With a long `--reload-interval-ms`, a stop waited out the reload thread's whole sleep after everything else
/// had finished (ten minutes at 600000), past any supervisor's grace period, which then killed it.
#[tokio::test]
async fn a_long_reload_interval_does_not_hold_up_a_stop() {
    let dirs = Dirs::new("slow-reload");
    dirs.write("s.json", &snapshot("s", &token('5')));
    let mut server = Server::start(&dirs, &["--reload-interval-ms", "120000"]);
    let alert = json!({ "ticker": "AAPL", "action": "buy" });
    assert_eq!(server.post_json(&token('5'), &alert).await.status, 200);
    let asked = Instant::now();
    server.terminate();
    assert!(server.wait(Duration::from_secs(20)).success());
    assert!(asked.elapsed() < Duration::from_secs(10), "stopped only after {:?}", asked.elapsed());
}

/// A `--strategies` that is not a readable directory (a typo, a file given for it) started a server that served
/// nothing, every alert a 404; it is refused at start like a bad `--bots` file.
#[test]
fn a_strategies_path_that_is_not_a_directory_is_refused_at_start() {
    let dirs = Dirs::new("bad-strategies");
    let file = dirs.root.join("one-strategy.json");
    std::fs::write(&file, snapshot("s", &token('6')).to_string()).unwrap();
    for path in [file.clone(), dirs.root.join("no-such-dir")] {
        let stderr = dirs.root.join("stderr.txt");
        let mut child = std::process::Command::new(server_exe())
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--strategies"])
            .arg(&path)
            .arg("--data-dir")
            .arg(&dirs.data)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        // A server that starts anyway runs until stopped: it is given 10 s to refuse.
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let err = std::fs::read_to_string(&stderr).unwrap();
        assert!(status.is_some_and(|s| !s.success()), "started with --strategies {}: {err}", path.display());
        assert!(err.contains("not a readable directory") && err.contains(&*path.to_string_lossy()), "{err}");
    }
}

/// A chain of refused files: `0-new.json` wants the id `b.json` holds, and `b.json` was edited to the id
/// `a.json` holds. Deleting `a.json` lets `b.json` take its id, which frees `b.json`'s old one for
/// `0-new.json`; one retry pass (in name order, `0-new.json` first) left that one unloaded for good.
#[tokio::test]
async fn a_chain_of_files_refused_for_each_others_ids_loads_once_the_first_is_gone() {
    let dirs = Dirs::new("clash-chain");
    dirs.write("a.json", &snapshot("x", &token('1')));
    dirs.write("b.json", &snapshot("y", &token('2')));
    let server = Server::start(&dirs, &[]);
    server.wait_for_strategies("both files", |s| s.len() == 2).await;
    let refusals = || server.stderr_text().matches("already defines this strategy id").count();
    let deadline = Instant::now() + Duration::from_secs(20);
    dirs.write("0-new.json", &snapshot("y", &token('3')));
    while refusals() < 1 {
        assert!(Instant::now() < deadline, "the first clash was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    dirs.write("b.json", &snapshot("x", &token('4')));
    while refusals() < 2 {
        assert!(Instant::now() < deadline, "the second clash was not seen: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(dirs.strategies.join("a.json")).unwrap();
    let alert = json!({ "ticker": "AAPL", "action": "buy" });
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.post_json(&token('3'), &alert).await.status != 200 {
        assert!(Instant::now() < deadline, "0-new.json never loaded: {}", server.stderr_text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(server.post_json(&token('4'), &alert).await.status, 200, "b.json's edit is live");
    for gone in ['1', '2'] {
        assert_eq!(server.post_json(&token(gone), &alert).await.status, 404);
    }
    server.stop();
}
