//! `swh-admin` against a running server: every subcommand answers `--help`, and each one does what it says
//! (list, logs, validate, bot state, outbox, retry refused where unsafe, dismiss, rotate only with --yes).

mod server_support;

use serde_json::json;
use server_support::mock_broker::{Behave, MockBroker};
use server_support::postgres::Postgres;
use server_support::*;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn admin_cli(server: &Server, dirs: &Dirs, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_swh-admin"))
        .env_remove("SWH_ADMIN_TOKEN")
        .arg("--admin")
        .arg(format!("http://{}", server.admin))
        .arg("--token-file")
        .arg(dirs.data.join("admin-token"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `logs --follow` read only the newest page at each poll: more rows than a page between two polls (a burst of
/// failed deliveries' ERROR rows) were never printed. It reads the pages before, down to the last row printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_prints_every_row_of_a_burst() {
    let dirs = Dirs::new("cli-follow");
    dirs.write("f.json", &snapshot("f", &token('c')));
    let server = Server::start(&dirs, &[]);
    let out = dirs.root.join("follow.txt");
    let mut follow = Command::new(env!("CARGO_BIN_EXE_swh-admin"))
        .env_remove("SWH_ADMIN_TOKEN")
        .arg("--admin")
        .arg(format!("http://{}", server.admin))
        .arg("--token-file")
        .arg(dirs.data.join("admin-token"))
        .args(["logs", "f", "--follow", "--limit", "5", "--level", "WARN"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    // Its first poll (nothing yet), then 20 rejected alerts, each a WARN row, within one poll.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..20 {
        let body = format!(r#"{{"ticker":"NOPE{i}","action":"buy"}}"#);
        assert_eq!(server.post(&token('c'), Some("application/json"), &body).await.status, 200);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&out).unwrap();
        let printed =
            (0..20).filter(|i| text.contains(&format!("NOPE{i}\"")) || text.contains(&format!("NOPE{i} "))).count();
        if printed == 20 {
            break;
        }
        assert!(Instant::now() < deadline, "{printed} of 20 rows printed:\n{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = follow.kill();
    let _ = follow.wait();
    server.stop();
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["strategies", "logs", "rotate", "validate", "bot-state", "outbox", "retry", "dismiss"] {
        let out = Command::new(env!("CARGO_BIN_EXE_swh-admin")).args([sub, "--help"]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains(&format!("Usage: swh-admin {sub}")), "{sub}: {text}");
    }
}

/// A strategy's file removed after one of its rows failed: the row was still listed ("retry: …") but its dismiss
/// answered 404 "no strategy has this id", and it stayed among the failed rows until the 30-day prune.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_row_of_a_removed_strategy_can_be_dismissed() {
    let tradier = MockBroker::start().await;
    let dirs = Dirs::new("cli-removed");
    let mut v = snapshot("gone", &token('b'));
    v["bots"] = json!([{ "id": "trd", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "5" } }]);
    dirs.write("gone.json", &v);
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "trd": { "delivery": "http", "base_url": tradier.base_url() } }).to_string())
        .unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    tradier.script([Behave::Status(400, r#"{"errors":{"error":"Account is closed"}}"#)]);
    let a = server.post(&token('b'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let o = admin_cli(&server, &dirs, &["outbox", "gone"]);
        if let Some(l) = o.stdout.lines().find(|l| l.contains("\tfailed\t")) {
            break l.split('\t').next().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no failed row: {}{}", o.stdout, o.stderr);
        std::thread::sleep(Duration::from_millis(50));
    };
    std::fs::remove_file(dirs.strategies.join("gone.json")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while admin_cli(&server, &dirs, &["strategies"]).stdout.contains("gone\t") {
        assert!(Instant::now() < deadline, "the strategy was not unloaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    let dismiss = admin_cli(&server, &dirs, &["dismiss", "gone", &failed]);
    assert!(dismiss.ok && dismiss.stdout.contains("is dismissed"), "{}{}", dismiss.stdout, dismiss.stderr);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_drives_a_running_server() {
    let tradier = MockBroker::start().await;
    let dirs = Dirs::new("cli");
    let mut v = snapshot("cli", &token('a'));
    v["bots"] = json!([
        { "id": "paper-1", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "3" } },
        { "id": "trd", "broker": "tradier", "account_id": "TR1", "sizing": { "fixed_quantity": "5" } }
    ]);
    dirs.write("cli.json", &v);
    let bots = dirs.root.join("bots.json");
    std::fs::write(&bots, json!({ "trd": { "delivery": "http", "base_url": tradier.base_url() } }).to_string())
        .unwrap();
    let server = Server::start(&dirs, &["--bots", bots.to_str().unwrap()]);
    tradier.script([Behave::Status(400, r#"{"errors":{"error":"Account is closed"}}"#)]);

    let list = admin_cli(&server, &dirs, &["strategies"]);
    assert!(list.ok && list.stdout.starts_with("cli\tactive\t2 bot(s)\t"), "{}{}", list.stdout, list.stderr);

    // validate: a dry run from a file, nothing sent.
    let file = dirs.root.join("alert.json");
    std::fs::File::create(&file).unwrap().write_all(br#"{"ticker":"AAPL","action":"buy"}"#).unwrap();
    let dry = admin_cli(&server, &dirs, &["validate", "cli", file.to_str().unwrap()]);
    assert!(dry.ok && dry.stdout.contains("decision: processed  (HTTP 200"), "{}{}", dry.stdout, dry.stderr);
    assert!(dry.stdout.contains("order: paper-1 (alpaca) POST /v2/orders"), "{}", dry.stdout);
    assert!(tradier.received().is_empty(), "a dry run sent an order");

    // The real alert: the paper bot fills, Tradier refuses.
    assert_eq!(
        server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy"}"#).await.status,
        200
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let outbox = loop {
        let o = admin_cli(&server, &dirs, &["outbox", "cli"]);
        if o.stdout.contains("\tdone\t") && o.stdout.contains("\tfailed\t") {
            break o.stdout;
        }
        assert!(Instant::now() < deadline, "the deliveries did not finish: {}{}", o.stdout, o.stderr);
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(outbox.contains("Account is closed") && outbox.contains("[retry: not safe]"), "{outbox}");
    let failed = outbox.lines().find(|l| l.contains("\tfailed\t")).unwrap().split('\t').next().unwrap().to_owned();

    let logs = admin_cli(&server, &dirs, &["logs", "cli", "--level", "ERROR"]);
    assert!(logs.ok && logs.stdout.contains("ERROR") && logs.stdout.contains("Account is closed"), "{}", logs.stdout);
    assert!(!logs.stdout.contains("INFO "), "{}", logs.stdout);
    let state = admin_cli(&server, &dirs, &["bot-state", "cli", "paper-1"]);
    assert!(
        state.ok && state.stdout.contains("\"instrument\": \"AAPL\"") && state.stdout.contains("\"3\""),
        "{}",
        state.stdout
    );

    // retry is refused where a resend could double the order; dismiss works.
    let retry = admin_cli(&server, &dirs, &["retry", "cli", &failed]);
    assert!(!retry.ok && retry.stderr.contains("HTTP 409") && retry.stderr.contains("not retried"), "{}", retry.stderr);
    let dismiss = admin_cli(&server, &dirs, &["dismiss", "cli", &failed]);
    assert!(dismiss.ok && dismiss.stdout.contains("is dismissed"), "{}{}", dismiss.stdout, dismiss.stderr);

    // rotate asks for --yes; then prints the new URL and the old token is gone.
    let no = admin_cli(&server, &dirs, &["rotate", "cli"]);
    assert!(!no.ok && no.stderr.contains("--yes"), "{}", no.stderr);
    let yes = admin_cli(&server, &dirs, &["rotate", "cli", "--yes"]);
    assert!(yes.ok && yes.stdout.contains("/webhooks/") && !yes.stdout.contains(&token('a')), "{}", yes.stdout);
    assert_eq!(server.post(&token('a'), Some("application/json"), "{}").await.status, 404);

    // Errors: an unknown strategy, a wrong token file.
    let unknown = admin_cli(&server, &dirs, &["logs", "nope"]);
    assert!(!unknown.ok && unknown.stderr.contains("HTTP 404"), "{}", unknown.stderr);
    std::fs::write(dirs.root.join("bad-token"), "0".repeat(64)).unwrap();
    let bad = Command::new(env!("CARGO_BIN_EXE_swh-admin"))
        .env_remove("SWH_ADMIN_TOKEN")
        .args(["--admin", &format!("http://{}", server.admin), "--token-file"])
        .arg(dirs.root.join("bad-token"))
        .arg("strategies")
        .output()
        .unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("HTTP 401"));
    server.stop();
}

/// A rotation the database did not confirm is answered 500 `rotation_unconfirmed` with the new URL, which
/// answers once the commit lands: the CLI printed only the error, which says "use webhook_url", and not the URL.
#[test]
fn a_rotation_whose_commit_is_unconfirmed_prints_the_new_url() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let url = "https://localhost:8443/webhooks/aaaa0000bbbb1111";
    let answer = serde_json::json!({
        "error": "the database did not confirm that the new token was stored; it may have been",
        "code": "rotation_unconfirmed", "token_hash": "aaaa0000bbbb1111", "webhook_url": url
    })
    .to_string();
    let server = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut buf = [0u8; 4096];
        let _ = c.read(&mut buf).unwrap();
        let head = format!(
            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n",
            answer.len()
        );
        c.write_all(head.as_bytes()).unwrap();
        c.write_all(answer.as_bytes()).unwrap();
    });
    let out = Command::new(env!("CARGO_BIN_EXE_swh-admin"))
        .env("SWH_ADMIN_TOKEN", "x")
        .args(["--admin", &format!("http://{addr}"), "rotate", "demo", "--yes"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    server.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(url), "the new URL is not printed: {stderr}");
}

/// On a shared database a log row's id is taken when it is written and seen when its transaction commits: a row
/// can appear below one `logs --follow` printed already (another server's batch, a commit waiting on a standby).
/// Following from the highest id printed alone, it was never printed: a delivery's ERROR row lost from the tail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_follow_on_a_shared_database_prints_a_row_committed_after_a_later_one() {
    let pg = Postgres::start();
    let url = pg.create_database("follow");
    let dirs = Dirs::new("cli-follow-shared");
    dirs.write("f.json", &snapshot("f", &token('c')));
    let server = Server::start(&dirs, &["--database", &url]);
    let out = dirs.root.join("follow.txt");
    let mut follow = Command::new(env!("CARGO_BIN_EXE_swh-admin"))
        .env_remove("SWH_ADMIN_TOKEN")
        .arg("--admin")
        .arg(format!("http://{}", server.admin))
        .arg("--token-file")
        .arg(dirs.data.join("admin-token"))
        .args(["logs", "f", "--follow"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A transaction that has taken its log row's id and not committed yet.
    let mut slow = Command::new("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut sql = slow.stdin.take().unwrap();
    writeln!(
        sql,
        "BEGIN; INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts) \
                   VALUES ({}, 'f', 'ERROR', 'order for bot x not delivered: LATE-ROW', 'processed', 200, '[]');",
        1_800_000_000_000i64
    )
    .unwrap();
    sql.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A later row commits first, and --follow prints it.
    let a = server.post(&token('c'), Some("application/json"), r#"{"ticker":"NOPE1","action":"buy"}"#).await;
    assert_eq!(a.status, 200);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&out).unwrap().contains("NOPE1") {
        assert!(Instant::now() < deadline, "the later row was not printed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The first transaction commits; two polls later its ERROR row should have been printed.
    writeln!(sql, "COMMIT;").unwrap();
    drop(sql);
    slow.wait().unwrap();
    let rows = pg.query_url(&url, "SELECT id, message FROM logs WHERE strategy = 'f' ORDER BY id");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = follow.kill();
    let _ = follow.wait();
    server.stop();
    assert!(text.contains("LATE-ROW"), "the ERROR row was never printed; stored: {rows:?}\nprinted:\n{text}");
}

/// An alert's sender wrote into `swh-admin logs` unfiltered: a placeholder's text is quoted in the log message with
/// its control characters, and a body holding terminal escapes (cursor up, erase line) hid the row printed before
/// it on the operator's terminal. They are printed escaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_do_not_print_a_senders_terminal_escapes() {
    let dirs = Dirs::new("cli-escapes");
    dirs.write("e.json", &snapshot("e", &token('e')));
    let server = Server::start(&dirs, &[]);
    let body = json!({ "ticker": "{{\u{1b}[1A\u{1b}[2K\r}}", "action": "buy" }).to_string();
    let a = server.post(&token('e'), Some("application/json"), &body).await;
    assert_eq!(a.status, 200, "{}", a.body);
    server.logs_when("e", |rows| !rows.is_empty()).await;
    let out = admin_cli(&server, &dirs, &["logs", "e"]);
    assert!(out.ok, "{}", out.stderr);
    assert!(
        !out.stdout.contains('\u{1b}') && !out.stdout.contains('\r'),
        "escapes reach the terminal: {:?}",
        out.stdout
    );
    assert!(out.stdout.contains("{{\\u{1b}[1A"), "the placeholder is shown, escaped: {:?}", out.stdout);
    server.stop();
}

/// `validate` sent every file as `application/json`: a text alert the webhook trades (`buy AAPL`, which
/// TradingView sends as text/plain) was dry-run as "rejected: the body is not valid JSON", and the operator
/// concluded it would not trade when it did. By default no content type is sent, so the body is read as the
/// webhook reads a sender's that declares none; `--content-type` still overrides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_reads_a_text_alert_as_the_webhook_does() {
    let dirs = Dirs::new("cli-validate-text");
    dirs.write("t.json", &snapshot("t", &token('f')));
    let server = Server::start(&dirs, &[]);
    let file = dirs.root.join("alert.txt");
    std::fs::write(&file, "buy AAPL\n").unwrap();
    let dry = admin_cli(&server, &dirs, &["validate", "t", file.to_str().unwrap()]);
    assert!(dry.ok && dry.stdout.contains("decision: processed  (HTTP 200"), "{}{}", dry.stdout, dry.stderr);
    let json_file = dirs.root.join("alert.json");
    std::fs::write(&json_file, r#"{"ticker":"AAPL","action":"buy"}"#).unwrap();
    let dry = admin_cli(&server, &dirs, &["validate", "t", json_file.to_str().unwrap()]);
    assert!(dry.ok && dry.stdout.contains("decision: processed  (HTTP 200"), "{}{}", dry.stdout, dry.stderr);
    // An explicit content type is still sent.
    let forced =
        admin_cli(&server, &dirs, &["validate", "t", file.to_str().unwrap(), "--content-type", "application/json"]);
    assert!(forced.ok && forced.stdout.contains("decision: rejected"), "{}{}", forced.stdout, forced.stderr);
    // The webhook agrees with the default: it trades the text alert.
    let live = server.post(&token('f'), Some("text/plain"), "buy AAPL\n").await;
    assert_eq!((live.status, live.json()["status"].as_str()), (200, Some("processed")), "{}", live.body);
    server.stop();
}
