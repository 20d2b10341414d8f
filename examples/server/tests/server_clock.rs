//! A server restarted under a clock set back since the earlier run stored its rows, windows and marks (the earlier
//! run's clock was ahead, then corrected): the stored times are later than now. Trusted as they were, a repeated
//! body was a duplicate and every alert a 429 for as long as the step, a market order stored before the crash was
//! sent minutes late, and an order the broker took before the crash was called refused after its resend.
//! And servers sharing one PostgreSQL whose clocks differ by less than a second, or by a few: which alert came later
//! is not told by their clocks, and a row one stamps a little ahead is not taken by another for one stored under a
//! clock set back.

mod server_support;

use serde_json::{json, Value};
use server_support::brokers::{tradier_turning_writes_away, Fault, Kind, Mock};
use server_support::mock_broker::MockBroker;
use server_support::postgres::Postgres;
use server_support::*;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How far ahead of the restarted server's clock the earlier run's times are: a clock that was 1 h ahead when
/// the earlier run stored them, 10 min ago, and has since been set right (moved back by an hour).
const AHEAD_MS: i64 = 50 * 60_000;

/// Strategy `s`'s newest outbox row once it is neither pending nor sending, waiting at most `secs`.
async fn settled_row(server: &Server, secs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let rows: Value = server.admin_get("/api/strategies/s/outbox?limit=10").await;
        let row = rows["outbox"][0].clone();
        if row["status"] != "pending" && row["status"] != "sending" {
            return row;
        }
        assert!(Instant::now() < deadline, "{rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn db(dirs: &Dirs) -> rusqlite::Connection {
    rusqlite::Connection::open(dirs.data.join("webhook.db")).unwrap()
}

/// Sixty alerts in the minute before a crash, ten minutes ago: the rate window is long past.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_marks_stored_under_a_clock_set_back_since_do_not_refuse_every_alert() {
    let dirs = Dirs::new("clock-rate");
    dirs.write("s.json", &snapshot("s", &token('a')));
    let mut server = Server::start(&dirs, &["--rate-limit", "3"]);
    for i in 0..3 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
        let a = server.post(&token('a'), Some("application/json"), &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    server.kill();
    db(&dirs)
        .execute_batch(&format!(
            "UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}; UPDATE rate_marks SET second = second + {};",
            AHEAD_MS / 1000
        ))
        .unwrap();
    let server = Server::start(&dirs, &["--rate-limit", "3"]);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "the first alert after the restart: {}", a.body);
}

/// A market order committed 10 minutes ago and never sent (the broker was down, then the server crashed) is past
/// its 60 s deadline: after the restart it is expired, not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_market_order_stored_under_a_clock_set_back_since_is_not_sent_minutes_late() {
    let broker = MockBroker::start().await;
    let dirs = Dirs::new("clock-stale");
    let mut v = snapshot("s", &token('a'));
    v["bots"] = json!([{ "id": "alp", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("s.json", &v);
    let bots = json!({ "alp": { "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 2000,
        "headers": { "APCA-API-KEY-ID": { "value": "k" }, "APCA-API-SECRET-KEY": { "value": "s" } } } });
    let bots_path = dirs.root.join("bots.json");
    std::fs::write(&bots_path, bots.to_string()).unwrap();
    let args = ["--bots", bots_path.to_str().unwrap()];
    // The broker is down: the row waits, pending, retried until its deadline.
    broker.stop();
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    let c = db(&dirs);
    let (status, kind, created, deadline): (String, String, i64, i64) = c
        .query_row("SELECT status, kind, created_ms, deadline_ms FROM outbox", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap();
    assert_eq!((status.as_str(), kind.as_str()), ("pending", "place"));
    assert_eq!(deadline - created, 60_000, "a market order");
    c.execute_batch(&format!(
        "UPDATE outbox SET created_ms = created_ms + {AHEAD_MS}, deadline_ms = deadline_ms + {AHEAD_MS};
         UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}; UPDATE rate_marks SET second = second + {};",
        AHEAD_MS / 1000
    ))
    .unwrap();
    drop(c);
    broker.restart().await;
    let server = Server::start(&dirs, &args);
    let row = settled_row(&server, 20).await;
    // Looked up by its id (an earlier attempt may have reached the broker), never sent.
    let sent: Vec<_> = broker.received().into_iter().filter(|r| r.method == "POST").collect();
    assert!(sent.is_empty(), "a 10-minute-old market order reached the broker: {sent:?}; row {row}");
    assert!(row["result"].as_str().unwrap_or_default().contains("ahead of this server's clock"), "{row}");
    assert_eq!(row["status"], "expired", "{row}");
}

/// An Alpaca bot whose broker took a market order (answering slowly) when the server was killed before the answer
/// came: the broker, the server's directories and its bots file.
async fn killed_with_the_order_at_the_broker(name: &str) -> (MockBroker, Dirs, PathBuf) {
    use server_support::mock_broker::Behave;
    let broker = MockBroker::start().await;
    let dirs = Dirs::new(name);
    let mut v = snapshot("s", &token('a'));
    v["bots"] = json!([{ "id": "alp", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } }]);
    dirs.write("s.json", &v);
    let bots = json!({ "alp": { "delivery": "http", "base_url": broker.base_url(), "timeout_ms": 20000,
        "headers": { "APCA-API-KEY-ID": { "value": "k" }, "APCA-API-SECRET-KEY": { "value": "s" } } } });
    let bots_path = dirs.root.join("bots.json");
    std::fs::write(&bots_path, bots.to_string()).unwrap();
    let args = ["--bots", bots_path.to_str().unwrap()];
    broker.script([Behave::Slow(Duration::from_secs(10))]);
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    let deadline = Instant::now() + Duration::from_secs(10);
    while broker.received().is_empty() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    (broker, dirs, bots_path)
}

/// The broker (one that refuses a repeated client order id and finds an order by it) took the order and the server
/// was killed before the answer came; at the restart the resend is refused on the broker's buying-power check (the
/// first order used it). With the clock as it was, the row is known to be an earlier run's, so the refusal is not
/// believed and the order is looked up (found: done). With the clock set back since, the row looked like this
/// run's own, and the order standing at the broker was called refused; it is now looked up by its id first.
async fn refusing_restart(name: &str, ahead_ms: i64) -> Value {
    use server_support::mock_broker::Behave;
    let (broker, dirs, bots_path) = killed_with_the_order_at_the_broker(name).await;
    let args = ["--bots", bots_path.to_str().unwrap()];
    // Only the row's times: the windows are left as they were.
    db(&dirs)
        .execute_batch(&format!(
            "UPDATE outbox SET created_ms = created_ms + {ahead_ms}, deadline_ms = deadline_ms + {ahead_ms};"
        ))
        .unwrap();
    if ahead_ms == 0 {
        broker.script([Behave::Status(403, r#"{"code":40310000,"message":"insufficient buying power"}"#)]);
    }
    let server = Server::start(&dirs, &args);
    let row = settled_row(&server, 30).await;
    assert_eq!(broker.accepted().values().sum::<u32>(), 1, "one order at the broker: {row}");
    if ahead_ms > 0 {
        let posts = broker.received().iter().filter(|r| r.method == "POST").count();
        assert_eq!(posts, 1, "found by its id, not sent again: {row}");
    }
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_taken_before_a_crash_is_found_after_a_refused_resend() {
    let row = refusing_restart("clock-control", 0).await;
    assert_eq!(row["status"], "done", "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_taken_before_a_crash_is_found_after_a_refused_resend_with_the_clock_set_back() {
    let row = refusing_restart("clock-back", 20 * 60_000).await;
    assert_eq!(row["status"], "done", "{row}");
}

/// As `refusing_restart`, with the clock set back between the runs by less than the wait at the restart: another row
/// of the bot, ahead of this one, takes 3 s at the broker, so at this row's turn its time (3 s after the test's
/// clock at the restart) is not ahead of this clock, yet it is after this run's start. Told by time, the row was
/// taken for this run's own, the resend's refusal (the buying power the first order used) believed and the row
/// failed while the order stood; a row the outbox held when the server started is an earlier run's whatever its
/// time. `offset_ms` places the row's time against the test's clock at the restart.
async fn refusing_restart_behind(name: &str, offset_ms: i64) -> Value {
    use server_support::mock_broker::Behave;
    let (broker, dirs, bots_path) = killed_with_the_order_at_the_broker(name).await;
    let args = ["--bots", bots_path.to_str().unwrap()];
    let c = db(&dirs);
    let (coid, body, meaning): (String, Vec<u8>, Option<String>) = c
        .query_row("SELECT client_order_id, body, meaning FROM outbox WHERE kind = 'place'", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .unwrap();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let at = now + offset_ms;
    c.execute(
        "UPDATE outbox SET id = id + 1, created_ms = ?1, deadline_ms = ?1 + 60000 WHERE client_order_id = ?2",
        rusqlite::params![at, coid],
    )
    .unwrap();
    // The row ahead of it: another order of the bot, stored earlier, that the broker answers after 3 s.
    let other = format!("p{}", &coid[1..]);
    let swap = |s: &str| s.replace(&coid, &other);
    c.execute(
        "INSERT INTO outbox (id, strategy, bot, broker, kind, client_order_id, method, path, content_type, body, meaning,
                             status, created_ms, deadline_ms, target)
         SELECT 1, strategy, bot, broker, kind, ?1, method, path, content_type, ?2, ?3, 'pending', ?4, ?4 + 60000,
                target
         FROM outbox WHERE client_order_id = ?5",
        rusqlite::params![other, swap(&String::from_utf8(body).unwrap()).into_bytes(), meaning.as_deref().map(swap),
                          at.min(now) - 1000, coid],
    )
    .unwrap();
    drop(c);
    broker.script([
        Behave::Slow(Duration::from_secs(3)),
        Behave::Status(403, r#"{"code":40310000,"message":"insufficient buying power"}"#),
    ]);
    let server = Server::start(&dirs, &args);
    let deadline = Instant::now() + Duration::from_secs(30);
    let row = loop {
        let rows: Value = server.admin_get("/api/strategies/s/outbox?limit=10").await;
        let row = rows["outbox"].as_array().unwrap().iter().find(|r| r["client_order_id"] == coid.as_str()).cloned();
        let row = row.unwrap_or_else(|| panic!("{rows}"));
        if row["status"] != "pending" && row["status"] != "sending" {
            break row;
        }
        assert!(Instant::now() < deadline, "{rows}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let accepted = broker.accepted();
    assert_eq!(accepted.get(&coid), Some(&1), "one order at the broker: {accepted:?}; row {row}");
    assert_eq!(accepted.get(&other), Some(&1), "the row ahead was sent: {accepted:?}; row {row}");
    row
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_taken_before_a_crash_is_found_after_a_refused_resend_with_the_clock_set_back_a_moment() {
    let row = refusing_restart_behind("clock-moment", 3_000).await;
    assert_eq!(row["status"], "done", "{row}");
}

/// Control: stored before the restart, the row is told as an earlier run's by its time too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_taken_before_a_crash_is_found_after_a_refused_resend_stored_before_the_restart() {
    let row = refusing_restart_behind("clock-moment-control", -2_000).await;
    assert_eq!(row["status"], "done", "{row}");
}

/// At a broker that keeps no client order id and finds an order by its terms among those entered around the send
/// (a window of time), a row left `sending` by a crash is looked up from its stored time. Stored under a clock set
/// back since, that window lies in the future: the order was not found there and sent a second time. It is now
/// not sent again, and the row fails saying to check the broker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_left_sending_under_a_clock_set_back_since_is_not_sent_again_where_lookups_need_its_time() {
    use server_support::brokers::{Kind, Mock};
    let mock = Mock::start(Kind::Schwab).await;
    mock.keep_refresh_token();
    let dirs = Dirs::new("clock-window");
    let mut v = snapshot("s", &token('a'));
    let name = Kind::Schwab.name();
    v["bots"] = json!([{ "id": name, "broker": name, "account_id": Kind::Schwab.account(),
                         "sizing": { "fixed_quantity": "1" } }]);
    dirs.write("s.json", &v);
    let secret = |file: &str, value: &str| {
        let p = dirs.root.join(file);
        std::fs::write(&p, format!("{value}\n")).unwrap();
        p
    };
    let bot = |base: &str| {
        json!({ name: { "delivery": "http", "base_url": base, "timeout_ms": 2000, "settle_ms": 200,
            "auth": { "type": "oauth2", "token_url": format!("{base}/v1/oauth/token"),
                      "client_id": { "value": "app-key" },
                      "client_secret": { "file": secret("app-secret", "app-secret") },
                      "refresh_token": { "file": secret("refresh", "refresh-0") } } } })
    };
    let bots_path = dirs.root.join("bots.json");
    // First run: the broker cannot be reached, so the limit order waits in the outbox.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    std::fs::write(&bots_path, bot(&closed).to_string()).unwrap();
    let args = ["--bots", bots_path.to_str().unwrap()];
    let mut server = Server::start(&dirs, &args);
    let a =
        server.post(&token('a'), Some("application/json"), r#"{"ticker":"AAPL","action":"buy","price":190.1}"#).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.kill();
    // As if the earlier run had sent it, its answer lost, under a clock 50 minutes ahead.
    let base = mock.base_url();
    let c = db(&dirs);
    let n = c
        .execute(
            &format!(
                "UPDATE outbox SET status = 'sending', target = ?1, created_ms = created_ms + {AHEAD_MS},
                 deadline_ms = deadline_ms + {AHEAD_MS} WHERE kind = 'place'"
            ),
            [&base],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(c);
    std::fs::write(&bots_path, bot(&base).to_string()).unwrap();
    let server = Server::start(&dirs, &args);
    let row = settled_row(&server, 20).await;
    assert!(mock.orders().is_empty(), "sent again: {:?}; row {row}", mock.orders());
    assert_eq!(row["status"], "failed", "{row}");
    let result = row["result"].as_str().unwrap_or_default();
    assert!(result.contains("ahead of this server's clock") && result.contains("check the broker"), "{row}");
}

/// As `rate_marks_stored_under_a_clock_set_back_since_do_not_refuse_every_alert`, on a shared PostgreSQL: its windows
/// are not the core's, and kept answering 429 for as long as the step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_rate_marks_stored_under_a_clock_set_back_since_do_not_refuse_every_alert() {
    let pg = Postgres::start();
    let url = pg.create_database("clock_rate");
    let dirs = Dirs::new("clock-shared-rate");
    dirs.write("s.json", &snapshot("s", &token('a')));
    let args = ["--database", url.as_str(), "--rate-limit", "3"];
    let mut server = Server::start(&dirs, &args);
    for i in 0..3 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
        let a = server.post(&token('a'), Some("application/json"), &body).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    server.kill();
    pg.query_url(
        &url,
        &format!(
            "UPDATE rate_marks SET ts_ms = ts_ms + {AHEAD_MS}; UPDATE rate_seconds SET second = second + {}; \
             UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}",
            AHEAD_MS / 1000
        ),
    );
    let server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(a.status, 200, "the first alert after the restart: {}", a.body);
}

/// README "Dedup and rate, exactly": no key outlasts one window from the step. On PostgreSQL, with a 2 s window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_key_stored_under_a_clock_set_back_since_lasts_one_window_from_the_step() {
    let pg = Postgres::start();
    let url = pg.create_database("clock_dedup");
    let dirs = Dirs::new("clock-shared-dedup");
    dirs.write("s.json", &snapshot("s", &token('a')));
    let args = ["--database", url.as_str(), "--dedup-window-ms", "2000"];
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    server.kill();
    // The earlier run's clock was ahead for its marks as for its keys.
    pg.query_url(
        &url,
        &format!(
            "UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}; UPDATE rate_marks SET ts_ms = ts_ms + {AHEAD_MS}; \
             UPDATE rate_seconds SET second = second + {}",
            AHEAD_MS / 1000
        ),
    );
    let server = Server::start(&dirs, &args);
    // Another alert first: the step is seen now.
    let b = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(b.json()["status"], "processed", "{}", b.body);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "the same alert a window after the step: {}", a.body);
}

/// Control: the same on the embedded store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_control_a_key_stored_under_a_clock_set_back_since_lasts_one_window_from_the_step() {
    let dirs = Dirs::new("clock-dedup");
    dirs.write("s.json", &snapshot("s", &token('a')));
    let args = ["--dedup-window-ms", "2000"];
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    server.kill();
    rusqlite::Connection::open(dirs.data.join("webhook.db"))
        .unwrap()
        .execute_batch(&format!("UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}"))
        .unwrap();
    let server = Server::start(&dirs, &args);
    // Another alert first: the step is seen now.
    let b = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(b.json()["status"], "processed", "{}", b.body);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "the same alert a window after the step: {}", a.body);
}

/// As the control above, with a restart after the step: the key was brought back to the step in memory only, and
/// the table kept its time ahead, so every restart within the step restored it for another window and the same
/// alert was answered `duplicate` long after its window. The restart brings it back to its time in the table too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_stored_under_a_clock_set_back_since_lasts_one_window_from_the_step_across_restarts() {
    let dirs = Dirs::new("clock-dedup-restart");
    dirs.write("s.json", &snapshot("s", &token('a')));
    let args = ["--dedup-window-ms", "2000"];
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let mut server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "{}", a.body);
    server.kill();
    db(&dirs)
        .execute_batch(&format!(
            "UPDATE dedup_keys SET ts_ms = ts_ms + {AHEAD_MS}; UPDATE rate_marks SET second = second + {};",
            AHEAD_MS / 1000
        ))
        .unwrap();
    let mut server = Server::start(&dirs, &args);
    let b = server.post(&token('a'), Some("application/json"), r#"{"ticker":"MSFT","action":"buy"}"#).await;
    assert_eq!(b.json()["status"], "processed", "{}", b.body);
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    server.kill();
    let server = Server::start(&dirs, &args);
    let a = server.post(&token('a'), Some("application/json"), body).await;
    assert_eq!(a.json()["status"], "processed", "the same alert a window after the step, restarted: {}", a.body);
}

/// Data directories with the same strategy files, and the arguments that point them at `url`.
fn fleet(name: &str, n: usize, url: &str, snapshots: &[(&str, Value)], extra: &[&str]) -> (Vec<Dirs>, Vec<String>) {
    let dirs: Vec<Dirs> = (0..n).map(|i| Dirs::new(&format!("{name}{i}"))).collect();
    for d in &dirs {
        for (file, s) in snapshots {
            d.write(file, s);
        }
    }
    let mut args: Vec<String> = vec!["--database".into(), url.into()];
    args.extend(extra.iter().map(|s| s.to_string()));
    (dirs, args)
}

fn start(dirs: &Dirs, args: &[String]) -> Server {
    Server::start(dirs, &args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The sender's CLOSE reaches server B 0.2 s after its OPEN reached server A, and B's clock is 0.5 s behind A's
/// (within the "well within a second" the deploy guide asks for). B decides the CLOSE after A stored the entry (its
/// batch takes the strategy's lock after A's committed: its log row's id is later), rejected since the entry has
/// not filled. The entry, retried on A while its broker turns writes away, must then not go out: the dispatcher's
/// `overtaken` check and the admin retry's `later_alert` looked for later alerts by wall-clock time
/// (`logs.ts_ms >= outbox.created_ms`), two different servers' clocks, so the CLOSE stamped by B's clock read as
/// earlier than the entry and the entry was sent after the CLOSE: a position the sender closed was opened. Later is
/// now told by log row ids.
///
/// The CLOSE's log rows are re-stamped as B's clock 0.5 s behind would have stamped them (0.3 s before the entry's
/// `created_ms`); everything else is as the servers wrote it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_entry_is_not_sent_after_a_close_decided_later_on_a_server_whose_clock_is_a_little_behind() {
    let pg = Postgres::start();
    let url = pg.create_database("overskew");
    let (tradier, _root, bots, s) = tradier_turning_writes_away("overskew", '7').await;
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"];
    let (dirs, args) = fleet("overskew", 2, &url, &[("overskew.json", s)], &extra);
    let (a, b) = (start(&dirs[0], &args), start(&dirs[1], &args));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let answer = a.post(&token('7'), Some("application/json"), &open).await;
    assert!(answer.status == 200 && answer.body.contains("processed"), "{}", answer.body);
    let refused = || tradier.seen().iter().filter(|r| r.method == "POST" && r.status == 429).count();
    let deadline = Instant::now() + Duration::from_secs(20);
    while refused() < 2 {
        assert!(Instant::now() < deadline, "the entry was never tried: {}", a.stderr_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let closed = b.post(&token('7'), Some("application/json"), &close).await;
    assert!(closed.status == 200 && closed.body.contains("rejected"), "{}", closed.body);
    // B's clock 0.5 s behind A's: its CLOSE, received 0.2 s after the OPEN, is stamped 0.3 s before it. Decided
    // later all the same (its log rows' ids follow the entry's alert's).
    let restamped = pg.query(
        "overskew",
        "WITH e AS (SELECT created_ms, alert_log_id FROM outbox LIMIT 1)
         UPDATE logs SET ts_ms = (SELECT created_ms FROM e) - 300
         WHERE id > (SELECT alert_log_id FROM e) AND alerts <> '[]' AND alerts LIKE '%CLOSE%' RETURNING id",
    );
    assert!(!restamped.is_empty(), "the CLOSE's log rows: {:?}", pg.query("overskew", "SELECT id, alerts FROM logs"));
    tradier.clear_faults();
    let outbox = || pg.query("overskew", "SELECT status || ' ' || coalesce(result, '') FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(30);
    while outbox().iter().any(|r| r.starts_with("pending") || r.starts_with("sending")) {
        assert!(Instant::now() < deadline, "the entry was never settled: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let orders = tradier.orders();
    a.stop();
    b.stop();
    assert!(orders.is_empty(), "the entry went out after the CLOSE decided after it on B: {orders:?}; {:?}", outbox());
}

/// The admin retry's side of the same defect: an entry refused by its broker (failed) on server A, then the sender's
/// CLOSE decided on server B (rejected: nothing to close), whose clock is 0.5 s behind A's. A retry of the failed
/// entry must be refused ("a later alert of this strategy was received since"), as it is when both servers' clocks
/// agree: `later_alert` compares the CLOSE's `logs.ts_ms` (B's clock) with the entry's `created_ms` (A's clock), so
/// the retry is accepted and the entry is placed after the CLOSE.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_of_a_failed_entry_is_refused_after_a_close_decided_on_a_server_whose_clock_is_a_little_behind() {
    let pg = Postgres::start();
    let url = pg.create_database("retryskew");
    let tradier = Mock::start(Kind::Alpaca).await;
    tradier.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
    tradier.faults((0..1).map(|_| Fault::Refuse(400, "buying power")));
    let root = Dirs::new("retryskewshared");
    let bots = root.root.join("bots.json");
    let tradier_token = root.root.join("tradier-token");
    std::fs::write(&tradier_token, "s3cret\n").unwrap();
    std::fs::write(
        &bots,
        json!({ "tradier": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 1000,
                             "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                          "APCA-API-SECRET-KEY": { "file": tradier_token.to_str().unwrap() } } } })
        .to_string(),
    )
    .unwrap();
    let mut s = snapshot("retryskew", &token('8'));
    s["bots"] = json!([
        { "id": "tradier", "broker": "alpaca", "account_id": Kind::Alpaca.account(), "sizing": { "fixed_quantity": "1" } },
    ]);
    let extra = ["--bots", bots.to_str().unwrap(), "--market-order-ttl-secs", "600"];
    let (dirs, args) = fleet("retryskew", 2, &url, &[("retryskew.json", s)], &extra);
    let (a, b) = (start(&dirs[0], &args), start(&dirs[1], &args));
    let open = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "long", "message_id": "o1" }).to_string();
    let answer = a.post(&token('8'), Some("application/json"), &open).await;
    assert!(answer.status == 200 && answer.body.contains("processed"), "{}", answer.body);
    let outbox = || pg.query("retryskew", "SELECT id || ' ' || status FROM outbox");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !outbox().iter().any(|r| r.ends_with(" failed")) {
        assert!(Instant::now() < deadline, "the entry never failed: {:?}", outbox());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let close = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "long", "message_id": "c1" }).to_string();
    let closed = b.post(&token('8'), Some("application/json"), &close).await;
    assert!(closed.status == 200 && closed.body.contains("rejected"), "{}", closed.body);
    let restamped = pg.query(
        "retryskew",
        "WITH e AS (SELECT created_ms, alert_log_id FROM outbox LIMIT 1)
         UPDATE logs SET ts_ms = (SELECT created_ms FROM e) - 300
         WHERE id > (SELECT alert_log_id FROM e) AND alerts <> '[]' AND alerts LIKE '%CLOSE%' RETURNING id",
    );
    assert!(!restamped.is_empty());
    let id = outbox()[0].split(' ').next().unwrap().to_owned();
    let path = format!("/api/strategies/retryskew/outbox/{id}/retry");
    let r = a.admin(hyper::Method::POST, &path, None, "", true).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let orders = tradier.orders();
    a.stop();
    b.stop();
    println!("retry answer: {} {}", r.status, r.body);
    assert_eq!(
        r.status, 409,
        "the retry of an entry the sender closed since was accepted: {}; orders {orders:?}",
        r.body
    );
}

/// Two servers whose clocks are 2 s apart: server A (ahead) is asked to store a market order that server B delivers
/// (B holds the bot's lease: it is delivering the bot's earlier rows, or reading its account). Stored with A's times,
/// the row is 2 s "ahead" of B's clock, which takes it for one stored under a clock gone back (`stored_ahead`,
/// `CLOCK_SLACK_MS` = 1 s) and expires it unsent: the sender was answered `processed` and the order never went. A
/// batch accepted any server within 30 s of the database's clock. A server further off the database than deliveries
/// tolerate between two servers now refuses the alert (500, the cause said; nothing stored) and says so on its
/// health check, so the sender's retry goes to a peer whose clock is right, which processes and sends it.
///
/// The bot's lease is held by a "peer" while A is asked; it is then given back, and a second alert wakes B's
/// dispatcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_market_order_stored_by_a_server_2_s_ahead_is_sent_not_expired_by_its_peer() {
    let pg = Postgres::start();
    let url = pg.create_database("aheadrow");
    let mut v = snapshot("k", &token('5'));
    v["bots"] = json!([{ "id": "paper-1", "broker": "alpaca", "account_id": "PA1",
                         "sizing": { "fixed_quantity": "1" } }]);
    let (dirs, args) = fleet("aheadrow", 2, &url, &[("k.json", v)], &[]);
    let mut ahead_args = args.clone();
    ahead_args.extend(["--test-clock-offset-ms".to_owned(), "2000".to_owned()]);
    let (a, b) = (start(&dirs[0], &ahead_args), start(&dirs[1], &args));
    pg.query(
        "aheadrow",
        "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms)
         VALUES ('k', 'paper-1', 'peer', floor(extract(epoch FROM now()) * 1000)::BIGINT + 60000,
                 floor(extract(epoch FROM now()) * 1000)::BIGINT)",
    );
    let buy = |id: &str| json!({ "ticker": "AAPL", "action": "buy", "message_id": id }).to_string();
    let refused = a.post(&token('5'), Some("application/json"), &buy("m1")).await;
    let stored = pg.query("aheadrow", "SELECT id || ' ' || status || ' ' || created_ms FROM outbox ORDER BY id");
    assert!(
        refused.status == 500 && refused.body.contains("clock") && stored.is_empty(),
        "an alert to a server 2 s ahead of the database: {} {}; stored {stored:?}",
        refused.status,
        refused.body
    );
    let health = a.request(hyper::Method::GET, "/healthz", None, b"").await;
    assert!(health.status == 503 && health.body.contains("clock"), "{} {}", health.status, health.body);
    let retried = b.post(&token('5'), Some("application/json"), &buy("m1")).await;
    assert!(retried.status == 200 && retried.body.contains("processed"), "{}", retried.body);
    pg.query("aheadrow", "UPDATE bot_leases SET holder = NULL, expires_ms = 0 RETURNING 1");
    let next = b.post(&token('5'), Some("application/json"), &buy("m2")).await;
    assert!(next.status == 200 && next.body.contains("processed"), "{}", next.body);
    let rows =
        || pg.query("aheadrow", "SELECT id || ' ' || status || ' ' || coalesce(result, '') FROM outbox ORDER BY id");
    let deadline = Instant::now() + Duration::from_secs(20);
    while rows().iter().any(|r| r.contains(" pending") || r.contains(" sending")) {
        assert!(Instant::now() < deadline, "never settled: {:?}", rows());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = rows();
    let healthy = b.request(hyper::Method::GET, "/healthz", None, b"").await;
    a.stop();
    b.stop();
    assert_eq!(healthy.status, 200, "{}", healthy.body);
    assert!(rows.len() == 2 && rows.iter().all(|r| r.contains(" done ")), "an order answered processed: {rows:?}");
}
