//! Issue 17: the alerts written for other services, through `validate` (what
//! `validate --json` prints) and through the engine's dry run, and the two safety features
//! their users ask for: stale alerts (`max_alert_age`, `max_lag`) and per-bot symbols.
//!
//! The bodies are the corpus files `tests/corpus/{traderspost,pineconnector,signal_bots,
//! pickmytrade_tvhub,tradingview_variables}.jsonl`, each line citing its documentation page.

mod common;

use common::*;
use serde_json::{json, Value};
use strategy_webhook::model::Intent;
use strategy_webhook::{validate, Decision, Engine, RequestKind};

/// 2024-01-15T14:30:00Z, the time the corpus bodies carry.
const SENT: i64 = 1_705_329_000_000;

const PEER_FILES: [(&str, usize); 5] = [
    ("traderspost", 10),
    ("pineconnector", 10),
    ("signal_bots", 5),
    ("pickmytrade_tvhub", 5),
    ("tradingview_variables", 5),
];

/// A strategy that accepts any instrument in either direction, so that what a peer's
/// body means is all that decides the answer.
fn open_snapshot() -> Value {
    let mut v = snapshot();
    v["allowed_instruments"] = json!(["*"]);
    v["directions"] = json!({"long": true, "short": true});
    v["max_alert_age"] = json!(300);
    v
}

#[test]
fn every_peer_body_through_validate_and_the_engine() {
    let strategy = strategy_from(&open_snapshot());
    let engine = engine_with(open_snapshot());
    let now = SENT + 10_000;
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
    let mut failures = Vec::new();
    for (file, at_least) in PEER_FILES {
        let text = std::fs::read_to_string(format!("{dir}/{file}.jsonl")).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(lines.len() >= at_least, "{file}: {} bodies, the issue asks for {at_least}", lines.len());
        for line in lines {
            let case: Value = serde_json::from_str(line).unwrap();
            let name = case["name"].as_str().unwrap();
            assert!(case["source"].as_str().is_some_and(|s| s.starts_with("https://")), "{name}: no source page");
            let body = case["body"].as_str().unwrap().as_bytes();
            let ct = case["content_type"].as_str();
            let v = validate(&strategy, body, ct, now);
            let d = engine.dry_run(TOKEN.as_bytes(), body, ct, now);
            // The dry run answers as `validate` does (nothing is recorded by either).
            if (v.http_status, v.decision, &v.reason) != (d.http_status, d.decision, &d.reason) {
                failures.push(format!("{name}: validate and dry run differ:\n  {}\n  {}", v.to_json(), d.to_json()));
            }
            match (&case["expect"]["alerts"], &case["expect"]["error"]) {
                (Value::Array(want), _) => {
                    // Parsed: every alert reaches the decision (whatever the rules and the
                    // positions then make of it), each logged as parsed.
                    let parsed = v.logs.iter().filter(|l| l.message.starts_with("parsed ")).count();
                    if parsed != want.len() {
                        failures.push(format!("{name}: {parsed} alerts, expected {}: {}", want.len(), v.to_json()));
                    }
                }
                (_, Value::String(want)) => {
                    let ok = v.http_status == 200
                        && v.decision == Decision::Rejected
                        && v.reason.as_deref().is_some_and(|r| r.contains(want.as_str()));
                    if !ok {
                        failures.push(format!("{name}: expected a rejection naming {want:?}: {}", v.to_json()));
                    }
                }
                _ => failures.push(format!("{name}: no expectation")),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn with(f: impl FnOnce(&mut Value)) -> Engine {
    let mut v = open_snapshot();
    f(&mut v);
    engine_with(v)
}

#[test]
fn an_alert_older_than_max_alert_age_is_rejected_naming_its_age() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    let body = r#"{"ticker":"AAPL","action":"buy","timestamp":"2024-01-15T14:30:00Z"}"#;
    let o = post(&e, body, SENT + 61_000);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert_eq!(
        o.reason.as_deref(),
        Some(
            "stale alert: it was made 1 min 1 s ago, more than the strategy's max_alert_age of 60 s; a delayed \
             alert is not traded at an old price"
        )
    );
    assert!(o.orders.is_empty());
    // Fresh, it goes out; Unix seconds and milliseconds read the same.
    let e = with(|v| v["max_alert_age"] = json!(60));
    for body in [body, r#"{"ticker":"AAPL","action":"buy","time":1705329000}"#] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 59_000);
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    }
    // Off by default: the same old alert is traded.
    let e = with(|v| {
        v.as_object_mut().unwrap().remove("max_alert_age");
    });
    assert_eq!(post(&e, body, SENT + 3_600_000).decision, Decision::Processed);
}

/// A Unix time with a fraction (Python's `time.time()`, quoted or a JSON float) was no time at all, so a stale
/// alert carrying one was traded at an old price.
#[test]
fn a_unix_time_with_a_fraction_is_read_for_staleness() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    for time in [r#""1705329000.123""#, "1705329000.123"] {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","timestamp":{time}}}"#);
        for ct in ["application/json", "text/plain"] {
            let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some(ct), SENT + 3_600_000);
            assert_eq!(o.decision, Decision::Rejected, "{ct} {}", o.to_json());
            assert!(o.reason.as_deref().is_some_and(|r| r.starts_with("stale alert: it was made 59 min 59 s ago")));
            let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some(ct), SENT + 30_000);
            assert_eq!(o.decision, Decision::Processed, "{ct} {}", o.to_json());
        }
    }
}

/// One instant written under two time keys (ISO and Unix seconds, or ISO with and without milliseconds) is one
/// time: compared as text, the alert was refused for two times that "disagree".
#[test]
fn one_instant_under_two_time_keys_trades() {
    let e = with(|v| v["max_alert_age"] = json!(300));
    for body in [
        r#"{"ticker":"AAPL","action":"buy","timenow":"2024-01-15T14:30:00Z","timestamp":"1705329000"}"#,
        r#"{"ticker":"AAPL","action":"buy","timenow":"2024-01-15T14:30:00Z","timestamp":1705329000000}"#,
        r#"{"ticker":"AAPL","action":"buy","time":"2024-01-15T14:30:00Z","Time":"2024-01-15T14:30:00.000Z"}"#,
    ] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 5_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
    }
    // Two instants are still two times.
    let body = r#"{"ticker":"AAPL","action":"buy","timenow":"2024-01-15T14:30:00Z","timestamp":"1705329060"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 5_000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("disagree")), "{:?}", o.reason);
}

/// TradingView's `{{time}}` is the bar's open, `{{timenow}}` the alert's: the common template sending both was
/// refused on every bar (two times that disagree), exits included. The alert's age is counted from `timenow`.
#[test]
fn bar_time_beside_timenow_is_not_the_alerts_time() {
    let e = with(|v| v["max_alert_age"] = json!(300));
    let body = r#"{"ticker":"AAPL","action":"buy","time":"2024-01-15T14:00:00Z","timenow":"2024-01-15T14:30:00Z"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 5_000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.alerts[0].sent_at_ms, Some(SENT));
    // Late by `timenow`, it is stale whatever the bar's time.
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 301_000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    // `time` alone is still the alert's time.
    let body = r#"{"ticker":"AAPL","action":"buy","time":"2024-01-15T14:30:00Z"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 301_000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
}

/// Times in forms that read as none (microseconds, JavaScript's `toUTCString`, ISO without seconds, a ` UTC`
/// zone) switched `max_alert_age` off: an alert an hour late traded. They are read now.
#[test]
fn more_time_forms_are_read_for_staleness() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    for t in [
        "1705329000123456",
        "1705329000123456789",
        "Mon, 15 Jan 2024 14:30:00 GMT",
        "2024-01-15T14:30Z",
        "2024-01-15 14:30:00 UTC",
    ] {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","time":"{t}"}}"#);
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 3_600_000);
        assert_eq!(o.decision, Decision::Rejected, "{t}: {}", o.to_json());
        assert!(o.reason.as_deref().is_some_and(|r| r.starts_with("stale alert: it was made")), "{t}: {:?}", o.reason);
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 30_000);
        assert_eq!(o.decision, Decision::Processed, "{t}: {}", o.to_json());
    }
}

/// A time key sent with a value that reads as no time, under `max_alert_age`, is refused naming it: its age cannot
/// be checked, and passed unchecked an hour-late alert traded. Without `max_alert_age` nothing is checked.
#[test]
fn an_unreadable_time_is_refused_under_max_alert_age() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    for (key, t) in
        [("time", "yesterday"), ("timenow", "{{timenow}}"), ("timestamp", "15.01.2024 14:30"), ("date", "2024-01-15")]
    {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","{key}":"{t}"}}"#);
        for ct in ["application/json", "text/plain"] {
            let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some(ct), SENT);
            assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
            let reason = o.reason.as_deref().unwrap_or_default();
            assert!(reason.starts_with(&format!("`{key}` is {t:?}, which reads as no time")), "{reason}");
            assert!(reason.contains("max_alert_age of 60 s"), "{reason}");
        }
        let off = with(|v| {
            v.as_object_mut().unwrap().remove("max_alert_age");
        });
        let o = off.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
    }
    // Beside a readable `timenow`, a `time` that is not read (it may be the bar's) refuses nothing.
    let body = r#"{"ticker":"AAPL","action":"buy","time":"{{time}}","timenow":"2024-01-15T14:30:00Z"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

#[test]
fn the_senders_own_max_lag_applies_too() {
    let e = with(|v| {
        v.as_object_mut().unwrap().remove("max_alert_age");
    });
    // 3Commas: the documented strategy body, delivered after its 300 s.
    let body =
        json!({"secret": "token", "max_lag": "300", "timestamp": "2024-01-15T14:30:00Z", "trigger_price": "190.1",
        "tv_exchange": "NASDAQ", "tv_instrument": "AAPL", "action": "buy", "bot_uuid": "u",
        "strategy_info": {"market_position": "long", "market_position_size": "10",
                          "prev_market_position": "flat", "prev_market_position_size": "0"},
        "order": {"amount": "10", "currency_type": "base"}})
        .to_string();
    let o = post(&e, &body, SENT + 301_000);
    assert_eq!(o.decision, Decision::Rejected);
    assert!(o.reason.as_deref().unwrap().contains("more than the alert's max_lag of 300 s"), "{:?}", o.reason);
    // The smaller of the strategy's and the alert's limits wins.
    let e = with(|v| v["max_alert_age"] = json!(100));
    let o = post(&e, &body, SENT + 101_000);
    assert!(o.reason.as_deref().unwrap().contains("the strategy's max_alert_age of 100 s"), "{:?}", o.reason);
    let o = post(&with(|_| {}), &body, SENT + 200_000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    // order.amount is not the size: the bot's sizing (10 and $1000) is.
    assert_eq!(o.orders[0].order.quantity.to_string(), "10");
}

/// A text alert whose template carries `{{timenow}}` bare (`buy AAPL [{{timenow}}]`): the time was recognised and
/// dropped, so `max_alert_age` was silently off and an alert an hour late traded at market. It is the alert's time
/// now; times in free words that name no one instant refuse the alert under `max_alert_age`.
#[test]
fn a_bare_time_in_a_text_alert_counts_for_max_alert_age() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    for body in ["buy AAPL [2024-01-15T14:30:00Z]", "buy AAPL 2024-01-15T14:30:00Z"] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT + 3_600_000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(
            o.reason.as_deref().is_some_and(|r| r.starts_with("stale alert: it was made 1 h 0 min ago")),
            "{:?}",
            o.reason
        );
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT + 5_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
    }
    for body in ["buy AAPL 10:30:00", "buy AAPL 2024-01-15T14:30:00Z 2024-01-15T14:31:00Z"] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().is_some_and(|r| r.contains("which reads as no time")), "{:?}", o.reason);
        let off = with(|v| {
            v.as_object_mut().unwrap().remove("max_alert_age");
        });
        let o = off.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
    }
}

/// The sender's `max_lag` beside a time that reads as no time: refused as the strategy's `max_alert_age` refuses it
/// (its age cannot be checked). Checked against `max_alert_age` alone, it traded an hour late though the sender
/// asked for nothing older than 30 s.
#[test]
fn max_lag_beside_an_unreadable_time_is_refused() {
    let e = with(|v| {
        v.as_object_mut().unwrap().remove("max_alert_age");
    });
    let body = r#"{"ticker":"AAPL","action":"buy","timestamp":"15/01/2024 14:30:00","max_lag":"30"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 3_600_000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    let reason = o.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("`timestamp` is \"15/01/2024 14:30:00\", which reads as no time"), "{reason}");
    assert!(reason.contains("the alert's max_lag of 30 s"), "{reason}");
    // Both set: the smaller is named.
    let e = with(|v| v["max_alert_age"] = json!(300));
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT);
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("the alert's max_lag of 30 s")), "{:?}", o.reason);
    let body = body.replace("\"30\"", "\"600\"");
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT);
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("the strategy's max_alert_age of 300 s")), "{:?}", o.reason);
}

/// A `max_lag` sent without any time key asks for a bound that cannot be checked: refused, naming why, rather than
/// traded however late it came.
#[test]
fn max_lag_without_a_time_is_refused() {
    let e = with(|v| {
        v.as_object_mut().unwrap().remove("max_alert_age");
    });
    for body in [r#"{"ticker":"AAPL","action":"buy","max_lag":"30"}"#, "buy AAPL max_lag=30"] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, SENT);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("max_lag of 30 s") && reason.contains("no time"), "{body}: {reason}");
    }
}

#[test]
fn a_bots_symbols_map_the_instrument_in_the_dry_run_and_the_request() {
    let e = with(|v| {
        v["bots"][0]["symbols"] = json!({"brk.b": "BRK/B", "ES1!": "ESZ6"});
        v["bots"][1]["sizing"] = json!({"fixed_quantity": "1"});
    });
    let o = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"NYSE:BRK.B","action":"buy"}"#, None, SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.alerts[0].instrument, "BRK.B", "the alert keeps the sender's instrument");
    assert_eq!(&*o.orders[0].bot, "alpaca-main");
    assert_eq!(o.orders[0].order.symbol, "BRK/B");
    assert!(o.to_json().contains("BRK/B"));
    // The other bot has no mapping and sends the instrument as it is.
    assert_eq!(o.orders[1].order.symbol, "BRK.B");
}

/// A crypto `symbols` key matches the pair in any spelling, as allowed instruments, positions and quotes do:
/// written `BTC/USD`, it missed an alert's `BTCUSD`, and the order went to the unmapped product.
#[test]
fn a_bots_symbols_map_a_crypto_pair_in_any_spelling() {
    let e = with(|v| {
        v["asset_class"] = json!("crypto");
        v["duration"] = json!("gtc");
        v["allowed_instruments"] = json!(["BTC/USD"]);
        v["bots"] = json!([{"id": "cb", "broker": "coinbase", "account_id": "acct",
                            "sizing": {"fixed_quantity": "0.01"}, "symbols": {"BTC/USD": "BTC-USDC"}}]);
        v["market"] = json!({"quotes": {"BTC/USD": {"bid": "60000", "ask": "60010"}}});
    });
    for ticker in ["BTCUSD", "BTC/USD", "COINBASE:BTC-USD", "btcusd"] {
        let body = format!(r#"{{"ticker":"{ticker}","action":"buy"}}"#);
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, SENT);
        assert_eq!(o.decision, Decision::Processed, "{ticker}: {}", o.to_json());
        assert!(o.to_json().contains(r#""product_id":"BTC-USDC""#), "{ticker}: {}", o.to_json());
    }
}

#[test]
fn a_per_alert_limit_target_prices_from_the_quotes() {
    let e = with(|v| {
        v["order_type"] = json!("limit");
        v["bots"].as_array_mut().unwrap().truncate(1);
    });
    // AAPL quotes 190.10 × 190.15, last 190.12.
    let limit = |body: &str| {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, SENT);
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        o.orders[0].order.limit_price.unwrap().to_string()
    };
    assert_eq!(limit(r#"{"ticker":"AAPL","action":"buy","limitPriceType":"ask_bid"}"#), "190.10");
    assert_eq!(limit(r#"{"ticker":"AAPL","action":"sell","limitPriceType":"ask_bid"}"#), "190.15");
    assert_eq!(limit(r#"{"ticker":"AAPL","action":"buy","marketPriceType":"ask"}"#), "190.15");
    assert_eq!(limit(r#"{"ticker":"AAPL","action":"buy","limitPriceType":"last"}"#), "190.12");
    // The midpoint 190.125 goes to the passive side of the tick: down for a buy.
    assert_eq!(limit(r#"{"ticker":"AAPL","action":"buy","limitPriceType":"mark"}"#), "190.12");
    // Without one the strategy's Limit Target (here: the alert must carry a price) decides.
    let o = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"AAPL","action":"buy"}"#, None, SENT);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
}

#[test]
fn the_senders_time_key_dedups_and_an_order_id_does_not() {
    let e = engine_with(open_snapshot());
    // PickMyTrade: the same `date` twice is one alert, even with another price.
    let a = r#"{"symbol":"AAPL","date":"2024-01-15T14:30:00Z","data":"buy","price":"190.1"}"#;
    let b = r#"{"symbol":"AAPL","date":"2024-01-15T14:30:00Z","data":"buy","price":"190.2"}"#;
    assert_eq!(post(&e, a, SENT + 1000).decision, Decision::Processed);
    assert_eq!(post(&e, b, SENT + 2000).decision, Decision::Duplicate);
    // OKX: `id` is the Pine order id, the same on every entry; two entries are two alerts.
    let e = engine_with(open_snapshot());
    let okx = |ts: &str| {
        format!(
            r#"{{"id":"Long","action":"buy","marketPosition":"long","prevMarketPosition":"flat","instrument":"AAPL","signalToken":"x","timestamp":"{ts}"}}"#
        )
    };
    let first = post(&e, &okx("2024-01-15T14:30:00Z"), SENT + 1000);
    let second = post(&e, &okx("2024-01-15T14:30:05Z"), SENT + 6000);
    assert_eq!((first.decision, second.decision), (Decision::Processed, Decision::Processed));
    assert_eq!(first.alerts[0].message_id, None);
}

#[test]
fn alerts_sent_in_the_same_second_that_do_different_things_are_not_duplicates() {
    // TradingView's `{{timenow}}` is to the second. One alert per symbol at a bar's close, or an exit and the
    // entry after it on one bar, all carry the same `date`: each is its own alert, and none is lost as a
    // duplicate of another. The same alert resent is still one.
    let e = engine_with(open_snapshot());
    let body = |symbol: &str, data: &str| {
        format!(r#"{{"symbol":"{symbol}","date":"2024-01-15T14:30:00Z","data":"{data}","price":"190.1"}}"#)
    };
    let tv_hub = |pair: &str| {
        format!(r#"{{"pair":"{pair}","isBuy":true,"price":"120.5","alertTimestamp":"2024-01-15T14:30:00Z"}}"#)
    };
    let sent = [body("AAPL", "buy"), body("MSFT", "buy"), body("AAPL", "close"), tv_hub("TSLA"), tv_hub("NVDA")];
    for (i, b) in sent.iter().enumerate() {
        let o = post(&e, b, SENT + 1000 + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{b}: {}", o.to_json());
        assert!(!o.orders.is_empty(), "{b}: {}", o.to_json());
    }
    for (i, b) in sent.iter().enumerate() {
        assert_eq!(post(&e, b, SENT + 2000 + i as i64).decision, Decision::Duplicate, "{b} resent");
    }
}

#[test]
fn traderspost_cancel_then_exit_cancels_the_working_entry() {
    let e = engine_with(open_snapshot());
    // MSFT has a working limit entry and no position: the cancel goes out, the exit is skipped.
    let o = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"MSFT","action":"exit","cancel":true}"#, None, SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1);
    assert_eq!(o.orders[0].kind, RequestKind::Cancel);
    assert_eq!(o.orders[0].order_id.as_deref(), Some("61e69015-8549-4bfd-b9c3-01e75843f47d"));
    // AAPL has a position and no working order: the cancel is skipped, the exit goes out.
    let o = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"AAPL","action":"exit","cancel":true}"#, None, SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.orders.iter().all(|r| r.kind == RequestKind::Place) && !o.orders.is_empty());
}

/// TradersPost's `cancel: true` on an exit, with working entries on both sides (a buy limit adding to the long
/// and a sell-short limit): the CANCEL was refused as ambiguous and took the exit down with it, leaving the long
/// open. It pulls the entries of the side the exit closes (its rule's, its own, or the one position's), and the
/// exit goes out.
#[test]
fn traderspost_cancel_then_exit_with_entries_on_both_sides_still_exits() {
    let two_sided = |rule: &str| {
        with(|v| {
            v["rules"]["exit"] = json!(rule);
            v["bots"][0]["working_orders"] = json!([
                {"id": "buy-more", "instrument": "AAPL", "direction": "long", "intent": "entry", "order_type": "limit",
                 "price": "185", "quantity": "10", "state": "open"},
                {"id": "go-short", "instrument": "AAPL", "direction": "short", "intent": "entry", "order_type": "limit",
                 "price": "195", "quantity": "10", "state": "open"}
            ]);
        })
    };
    for (rule, body) in [
        ("close_long", r#"{"ticker":"AAPL","action":"exit","cancel":true}"#),
        // No rule says the side of a CLOSE: the one position's.
        ("close_long", r#"{"ticker":"AAPL","action":"close","cancel":true}"#),
    ] {
        let e = two_sided(rule);
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, SENT);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        let cancels: Vec<_> =
            o.orders.iter().filter(|r| r.kind == RequestKind::Cancel).map(|r| r.order_id.as_deref()).collect();
        assert_eq!(cancels, [Some("buy-more")], "{body}: {}", o.to_json());
        let closes: Vec<_> = o
            .orders
            .iter()
            .filter(|r| r.kind == RequestKind::Place)
            .map(|r| (r.order.intent, r.order.quantity.to_string()))
            .collect();
        assert_eq!(closes, [(Intent::CloseLong, "10".to_string())], "{body}: {}", o.to_json());
    }
}

#[test]
fn pineconnector_closelongbuy_closes_then_opens() {
    let e = engine_with(open_snapshot());
    let o = e.dry_run(TOKEN.as_bytes(), b"60123456789,closelongbuy,AAPL,risk=1", Some("text/plain"), SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.alerts.len(), 2);
    // alpaca-main holds 10 AAPL: a sell of 10, then a buy on each bot.
    let sides: Vec<String> = o.orders.iter().map(|r| format!("{}:{:?}", r.bot, r.order.intent)).collect();
    assert_eq!(o.orders.len(), 3, "{sides:?}");
}

/// PickMyTrade's `data: close` "would close open position and cancel open orders as well": read as a bare CLOSE,
/// the ticker's working entry stayed (rejected, with no position; beside one, only the sell went out), and could
/// fill later into the position the sender left.
#[test]
fn pickmytrade_close_pulls_the_working_entries_too() {
    let close =
        |ticker: &str| format!(r#"{{"symbol":"{ticker}","date":"2024-01-15T14:30:00Z","data":"close","token":"x"}}"#);
    // A working MSFT entry and no MSFT position.
    let o = post(&engine(), &close("MSFT"), T0);
    assert!(o.orders.iter().any(|r| r.kind == RequestKind::Cancel), "{}", o.to_json());
    // A long AAPL position and a working AAPL entry: the entry pulled, the position sold.
    let mut snap = snapshot();
    snap["bots"][0]["working_orders"] = json!([{"id": "W-AAPL-1", "instrument": "AAPL", "direction": "long",
        "intent": "entry", "order_type": "limit", "price": "185.00", "quantity": "10", "state": "open"}]);
    let o = post(&engine_with(snap), &close("AAPL"), T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.orders.iter().any(|r| r.kind == RequestKind::Cancel), "{}", o.to_json());
    assert!(o.orders.iter().any(|r| r.kind == RequestKind::Place && !r.order.intent.is_open()), "{}", o.to_json());
}

/// TV-Hub recommends `{{ticker}}-{{timenow}}` as its `alertTimestamp`: the time after the ticker is the alert's.
/// Read whole only, such a key carried no time, and an alert an hour late traded despite `max_alert_age`.
#[test]
fn tvhub_recommended_alert_timestamp_is_read_for_staleness() {
    let mut snap = snapshot();
    snap["max_alert_age"] = json!(60);
    let e = engine_with(snap);
    let late = SENT + 3_600_000;
    for key in ["2024-01-15T14:30:00Z", "AAPL-2024-01-15T14:30:00Z", "BTC-USD-2024-01-15T14:30:00Z"] {
        let body = format!(r#"{{"pair":"AAPL","isBuy":true,"alertTimestamp":"{key}"}}"#);
        let o = post(&e, &body, late);
        assert_eq!(o.decision, Decision::Rejected, "{key}: {}", o.to_json());
    }
    // On time, it trades.
    let mut snap = snapshot();
    snap["max_alert_age"] = json!(60);
    let o = post(
        &engine_with(snap),
        r#"{"pair":"AAPL","isBuy":true,"alertTimestamp":"AAPL-2024-01-15T14:30:00Z"}"#,
        SENT + 5_000,
    );
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// OKX's exit with `investmentType: percentage_position` closes `amount` percent of the position: read as a full
/// CLOSE, `amount: 50` sold it all. Refused unless the amount is 100 (the whole position), as TradersPost's
/// `quantityType: percent_of_position` is.
#[test]
fn okx_exit_of_part_of_the_position_is_refused() {
    let body = |amount: &str| {
        format!(
            r#"{{"action":"EXIT_LONG","instrument":"AAPL","signalToken":"x","timestamp":"1705329000","maxLag":"60","orderType":"market","investmentType":"percentage_position","amount":"{amount}"}}"#
        )
    };
    let o = engine().dry_run(TOKEN.as_bytes(), body("50").as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("partial closes")), "{}", o.to_json());
    let whole = engine().dry_run(TOKEN.as_bytes(), body("100").as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(whole.decision, Decision::Processed, "{}", whole.to_json());
    // Another investment type sizes nothing here: the bot sizes the order.
    let entry = r#"{"action":"ENTER_LONG","instrument":"AAPL","signalToken":"x","timestamp":"1705329000","maxLag":"60","investmentType":"percentage_balance","amount":"50"}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), entry.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    // In free words `amount=` stays a size the sender wrote, refused as any unknown number is.
    let words = strategy_webhook::alert::parse(b"buy AAPL amount=50", Some("text/plain"));
    assert!(words.is_err(), "{words:?}");
}

/// 3Commas' exit with `order.currency_type: position_percent` sells `order.amount` percent of the position: the
/// `order` object was skipped whole, and `amount: 50` sold it all. Refused unless the amount is 100; the same in
/// text/plain (the body is read as JSON all the same).
#[test]
fn threecommas_exit_of_part_of_the_position_is_refused() {
    let body = |amount: &str| {
        format!(
            r#"{{"secret":"s","bot_uuid":"u","action":"exit_long","tv_exchange":"NASDAQ","tv_instrument":"AAPL","order":{{"amount":{amount},"currency_type":"position_percent"}},"max_lag":300,"timestamp":"2024-01-15T14:30:00Z"}}"#
        )
    };
    for (amount, ct) in [("50", "application/json"), ("\"50\"", "application/json"), ("50", "text/plain")] {
        let o = engine().dry_run(TOKEN.as_bytes(), body(amount).as_bytes(), Some(ct), SENT + 1000);
        assert_eq!(o.decision, Decision::Rejected, "{amount} {ct}: {}", o.to_json());
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("partial closes") && reason.contains("order.currency_type"), "{reason}");
    }
    let whole = engine().dry_run(TOKEN.as_bytes(), body("100").as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(whole.decision, Decision::Processed, "{}", whole.to_json());
    let sold: Vec<String> = whole.orders.iter().map(|r| r.order.quantity.to_string()).collect();
    assert_eq!(sold, ["10"], "alpaca-main's whole position");
}

/// 3Commas' limit entry: `order.order_type: limit` with `order.price`. The `order` object was skipped and the
/// entry went out at market; now its order type and price are the alert's, and a price relative to the market
/// (`price_percent`) is refused.
#[test]
fn threecommas_limit_entry_keeps_its_price() {
    let body = r#"{"secret":"s","bot_uuid":"u","action":"enter_long","tv_exchange":"NASDAQ","tv_instrument":"AAPL","order":{"amount":150,"currency_type":"quote","order_type":"limit","price":"180"},"max_lag":300,"timestamp":"2024-01-15T14:30:00Z"}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(!o.orders.is_empty());
    for r in &o.orders {
        assert_eq!(r.order.limit_price.map(|p| p.to_string()).as_deref(), Some("180"), "{}", o.to_json());
    }
    let relative = body.replace(r#""price":"180""#, r#""price_percent":"-1""#);
    let o = engine().dry_run(TOKEN.as_bytes(), relative.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("order.price_percent")), "{}", o.to_json());
    // A market entry stays one; an `order` that is no object is skipped as before.
    let market = body.replace(r#""order_type":"limit","price":"180""#, r#""order_type":"market""#);
    let o = engine().dry_run(TOKEN.as_bytes(), market.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.orders.iter().all(|r| r.order.limit_price.is_none()), "{}", o.to_json());
    let word = r#"{"ticker":"AAPL","action":"buy","order":"first"}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), word.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// TV-Hub's `unitsType: percentPosition` closes `units` (or `unitsPercent`) percent of the position, a scale-out:
/// the keys were dropped and a 50 % close sold it all. Refused unless 100.
#[test]
fn tvhub_close_of_part_of_the_position_is_refused() {
    for body in [
        r#"{"token":"x","exchange":"binance","pair":"AAPL","isClose":true,"closeLong":true,"unitsType":"percentPosition","units":50}"#,
        r#"{"token":"x","exchange":"binance","pair":"AAPL","isClose":true,"unitsType":"percentPosition","unitsPercent":50}"#,
        r#"{"token":"x","exchange":"binance","pair":"AAPL","isClose":true,"unitsType":"percentPosition"}"#,
    ] {
        let o = engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().is_some_and(|r| r.contains("partial closes")), "{}", o.to_json());
    }
    let whole = r#"{"token":"x","exchange":"binance","pair":"AAPL","isClose":true,"closeLong":true,"unitsType":"percentPosition","units":100}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), whole.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    // In free words `units=` is a size the sender wrote, refused as any unknown number is.
    let words = strategy_webhook::alert::parse(b"buy AAPL units=50", Some("text/plain"));
    assert!(words.is_err(), "{words:?}");
}

/// Two percents of the position that disagree (two keys, or one repeated): the first read decided, so the same
/// keys in another order were a whole exit or a refusal.
#[test]
fn two_differing_percents_of_the_position_are_refused() {
    for body in [
        r#"{"pair":"AAPL","isClose":true,"closeLong":true,"unitsType":"percentPosition","units":100,"unitsPercent":50}"#,
        r#"{"tv_instrument":"AAPL","action":"exit_long","amount":"100","order":{"amount":"50","currency_type":"position_percent"}}"#,
        r#"{"tv_instrument":"AAPL","action":"exit_long","order":{"amount":"100","amount":"50","currency_type":"position_percent"}}"#,
    ] {
        let parsed = strategy_webhook::alert::parse(body.as_bytes(), Some("application/json"));
        assert!(parsed.is_err(), "{body}: {parsed:?}");
    }
    // The same percent twice is one percent.
    let same = r#"{"pair":"AAPL","isClose":true,"closeLong":true,"unitsType":"percentPosition","units":100,"unitsPercent":"100.0"}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), same.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// A time written without an offset by a sender east of UTC (Python's `datetime.now().isoformat()` at UTC+8) is
/// read as UTC, hours ahead: it was never stale, and an alert two hours late traded at market. A time further
/// ahead than the limit is refused; a little ahead (clocks differ) is not.
#[test]
fn an_alert_time_ahead_of_the_clock_by_more_than_the_limit_is_refused() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    // 23:00 local at UTC+8 is 15:00Z; delivered two hours late.
    let body = r#"{"ticker":"AAPL","action":"buy","time":"2024-01-15T22:30:00.000000"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 7_200_000);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("ahead of this clock")), "{}", o.to_json());
    // A few seconds ahead is a clock a little off: traded.
    let near = r#"{"ticker":"AAPL","action":"buy","timestamp":"2024-01-15T14:30:05Z"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), near.as_bytes(), Some("application/json"), SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    // Without a limit, the time is not checked.
    let e = with(|v| {
        v.as_object_mut().unwrap().remove("max_alert_age");
    });
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// Alpaca's own order body carries `position_intent`: dropped, `sell` with `sell_to_close` (closing a long call) was
/// traded by the strategy's rule for `sell` (a new short call), and `sell` with `sell_to_open` sold a held long.
/// Read as the action and side it names, and refused where it disagrees with the alert's own.
#[test]
fn alpaca_position_intent_is_read_or_refused() {
    let parse = |b: &str| strategy_webhook::alert::parse(b.as_bytes(), Some("application/json"));
    let close = parse(r#"{"symbol":"SPY240126C00480000","side":"sell","type":"limit","limit_price":"2.50","qty":"1","position_intent":"sell_to_close"}"#)
        .expect("read");
    assert_eq!(close[0].action.as_str(), "CLOSE");
    assert_eq!(close[0].direction.map(|d| d.as_str()), Some("LONG"));
    // On the fixture strategy (10 AAPL held long, `sell` closes it), `sell_to_open` opens a short: not the long sold.
    let o = engine().dry_run(
        TOKEN.as_bytes(),
        br#"{"symbol":"AAPL","side":"sell","type":"market","qty":"10","position_intent":"sell_to_open"}"#,
        Some("application/json"),
        SENT + 1000,
    );
    assert!(o.alerts.iter().all(|a| a.action.as_str() == "OPEN"), "{}", o.to_json());
    assert!(!o.orders.iter().any(|r| r.order.intent == Intent::CloseLong), "the long was sold: {}", o.to_json());
    // A side that disagrees with the intent, and an intent that is no intent, are refused.
    assert!(parse(r#"{"symbol":"AAPL","side":"buy","position_intent":"sell_to_close"}"#).is_err());
    assert!(parse(r#"{"symbol":"AAPL","side":"buy","position_intent":"sideways"}"#).is_err());
    assert!(
        parse(r#"{"symbol":"AAPL","action":"CLOSE","direction":"SHORT","position_intent":"sell_to_close"}"#).is_err()
    );
}

/// `position_intent` beside a market position (TradersPost's `sentiment`, TradingView's positions) turned a `sell`
/// leaving a long of 5, refused as a partial close, into a CLOSE of the whole position: refused, send one or the other.
#[test]
fn position_intent_beside_a_market_position_is_refused() {
    for b in [
        r#"{"ticker":"AAPL","action":"sell","sentiment":"long","position_intent":"sell_to_close"}"#,
        r#"{"ticker":"AAPL","action":"sell","marketPosition":"long","marketPositionSize":"5","position_intent":"sell_to_close"}"#,
        r#"{"ticker":"AAPL","action":"buy","sentiment":"flat","position_intent":"buy_to_open"}"#,
    ] {
        let o = engine().dry_run(TOKEN.as_bytes(), b.as_bytes(), Some("application/json"), SENT + 1000);
        assert!(o.orders.is_empty(), "{b}: {}", o.to_json());
    }
}

/// TV-Hub's trailing stop (`useTrailingStopLoss` with `trailingStopLossPercent`) and its stop as a formula
/// (`stopLossType: absolute` with `stopLossExpression`) were dropped: the entry went out with no stop. Refused as
/// every stop is; left off or empty, they ask for nothing.
#[test]
fn tvhub_trailing_stop_and_stop_expression_are_refused() {
    for body in [
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"useTrailingStopLoss":true,"trailingStopLossPercent":1.5}"#,
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"trailingStopLossActivationPercent":2}"#,
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"stopLossType":"absolute","stopLossExpression":"190-0.02*190"}"#,
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"takeProfitExpression":"190*1.02"}"#,
    ] {
        let o = engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
    }
    let off = r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"useTrailingStopLoss":false,"trailingStopLossPercent":0,"stopLossExpression":""}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), off.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// TV-Hub's `useLimitClose: true` closes with a limit order at `price`: dropped, a take-profit close at 195 sold the
/// whole position at market. Read as a limit close; beside an entry, or with `limitClosePercent` (an offset from the
/// market), refused.
#[test]
fn tvhub_limit_close_is_a_limit_at_the_price() {
    let body = r#"{"exchange":"binance","pair":"AAPL","isClose":true,"useLimitClose":true,"price":195}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(!o.orders.is_empty(), "{}", o.to_json());
    for r in &o.orders {
        let body = String::from_utf8_lossy(r.request.body.as_bytes()).into_owned();
        assert!(!body.contains("market") && body.contains("195"), "{body}");
    }
    for body in [
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"useLimitClose":true,"price":195}"#,
        r#"{"exchange":"binance","pair":"AAPL","isClose":true,"useLimitClose":true,"isMarket":true,"price":195}"#,
        r#"{"exchange":"binance","pair":"AAPL","isClose":true,"limitClosePercent":0.5}"#,
        r#"{"exchange":"binance","pair":"AAPL","isClose":true,"useLimitClose":"yes"}"#,
    ] {
        let o = engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000);
        assert_ne!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
    }
    // Off, it asks for nothing: the close goes at the strategy's type.
    let off = r#"{"exchange":"binance","pair":"AAPL","isClose":true,"useLimitClose":false,"limitClosePercent":0}"#;
    let o = engine().dry_run(TOKEN.as_bytes(), off.as_bytes(), Some("application/json"), SENT + 1000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// A spread's price marked credit in a broker's own words (Tradier's `type: credit`, Tastytrade's `price-effect`,
/// Schwab's `NET_CREDIT`): the price was kept positive, a debit, and a bull put spread the sender meant to sell for
/// 1.50 went out as a bid to pay 1.50. A positive price marked credit is received; a negative one marked debit, or
/// an even price, is refused.
#[test]
fn a_spread_price_marked_credit_is_a_credit() {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["*"]);
    snap["options"] = json!({"selection": "external"});
    let e = engine_with(snap);
    let legs = r#"[{"symbol":"SPY261218P00600000","action":"sell_to_open"},{"symbol":"SPY261218P00595000","action":"buy_to_open"}]"#;
    let body = |marker: &str, price: &str| {
        format!(
            r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","order_type":"limit","price":"{price}",{marker},"legs":{legs}}}"#
        )
    };
    for (i, marker) in
        [r#""type":"credit""#, r#""price-effect":"Credit""#, r#""price_effect":"NET_CREDIT""#, r#""type":"NET_CREDIT""#]
            .iter()
            .enumerate()
    {
        let o = e.dry_run(TOKEN.as_bytes(), body(marker, "1.50").as_bytes(), Some("application/json"), SENT + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{marker}: {}", o.to_json());
        let json = o.to_json();
        assert!(
            json.contains(r#""price_effect":"credit""#) && !json.contains(r#""price_effect":"debit""#),
            "{marker}: {json}"
        );
    }
    // Marked debit, a positive price is the debit it always was; a credit's negative price stays one.
    let o =
        e.dry_run(TOKEN.as_bytes(), body(r#""type":"debit""#, "1.50").as_bytes(), Some("application/json"), SENT + 10);
    assert!(o.to_json().contains(r#""price_effect":"debit""#), "{}", o.to_json());
    let o = e.dry_run(
        TOKEN.as_bytes(),
        body(r#""type":"credit""#, "-1.50").as_bytes(),
        Some("application/json"),
        SENT + 11,
    );
    assert!(o.to_json().contains(r#""price_effect":"credit""#), "{}", o.to_json());
    for (marker, price) in
        [(r#""type":"debit""#, "-1.50"), (r#""type":"even""#, "0"), (r#""price-effect":"maybe""#, "1.50")]
    {
        let o = e.dry_run(TOKEN.as_bytes(), body(marker, price).as_bytes(), Some("application/json"), SENT + 20);
        assert_ne!(o.decision, Decision::Processed, "{marker} {price}: {}", o.to_json());
        assert!(o.orders.is_empty());
    }
}

/// Two price-effect marks that say otherwise (`type: debit` beside `price-effect: Credit`, or the key twice) were
/// settled by whichever was read first; a priced mark on a strategy trading at market went out as a market spread,
/// the sender's floor lost. Disagreeing marks are refused; a priced mark is a limit (beside `order_type: market`,
/// refused).
#[test]
fn price_effect_marks_that_disagree_are_refused_and_a_priced_mark_is_a_limit() {
    let spread = |order_type: &str| {
        let mut snap = snapshot();
        snap["asset_class"] = json!("option");
        snap["allowed_instruments"] = json!(["*"]);
        snap["order_type"] = json!(order_type);
        snap["options"] = json!({"selection": "external"});
        engine_with(snap)
    };
    let legs = r#"[{"symbol":"SPY261218P00600000","action":"sell_to_open"},{"symbol":"SPY261218P00595000","action":"buy_to_open"}]"#;
    let e = spread("limit");
    for (i, markers) in [
        r#""type":"debit","price-effect":"Credit""#,
        r#""type":"credit","price-effect":"Debit""#,
        r#""price_effect":"Debit","price-effect":"Credit""#,
        r#""order_type":"market","type":"credit""#,
        r#""price-effect":"Credit","price_effect":"Credit","priceEffect":"Credit","PriceEffect":"Credit","PRICE_EFFECT":"Debit""#,
        r#""price-effect":"Credit","price_effect":"NET_CREDIT","priceEffect":"Debit""#,
        r#""price-effect":"credit","price-effect":"net_credit","price-effect":"debit""#,
    ]
    .iter()
    .enumerate()
    {
        let body =
            format!(r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","price":"1.50",{markers},"legs":{legs}}}"#);
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + i as i64);
        assert_ne!(o.decision, Decision::Processed, "{markers}: {}", o.to_json());
        assert!(o.orders.is_empty());
    }
    // A mark prices a spread: without a price it is refused, not left to the strategy's type.
    let body =
        format!(r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","orderType":"NET_CREDIT","legs":{legs}}}"#);
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 8);
    assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
    // Spelled with a leading separator, as keys may be: still the credit it says.
    for (i, mark) in ["_credit", "-credit", "_NET_CREDIT"].iter().enumerate() {
        let body = format!(
            r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","price":"1.50","type":"{mark}","legs":{legs}}}"#
        );
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 30 + i as i64);
        assert!(o.to_json().contains(r#""price_effect":"credit""#), "{mark}: {}", o.to_json());
    }
    // Schwab's own spelling, under `orderType`.
    let body = format!(
        r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","orderType":"NET_CREDIT","price":"1.50","legs":{legs}}}"#
    );
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 9);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.to_json().contains(r#""price_effect":"credit""#), "{}", o.to_json());
    let e = spread("market");
    let body = format!(
        r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","price":"1.50","type":"credit","legs":{legs}}}"#
    );
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 10);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let json = o.to_json();
    assert!(!json.contains(r#""order_type":"market""#) && json.contains(r#""price_effect":"credit""#), "{json}");
}

// ---- peer payload keys found by review against the peers' own documents ----

fn peer_dry(body: &str) -> strategy_webhook::Outcome {
    engine().dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 1000)
}

/// TradersPost's `delay` (https://traderspost.io/reference/webhook-field/delay): "TradersPost will wait the given
/// delay period after receiving the signal before executing the trade" (1..3600 s, "+5 minutes", or an absolute
/// time). Dropped silently, the order goes out at once, minutes before the sender meant it to.
#[test]
fn traderspost_delay_is_not_dropped() {
    for body in [
        r#"{"ticker":"AAPL","action":"buy","delay":60}"#,
        r#"{"ticker":"AAPL","action":"buy","delay":"+5 minutes"}"#,
        r#"{"ticker":"AAPL","action":"exit","delay":"2026-01-25 05:30 pm EST"}"#,
    ] {
        let o = peer_dry(body);
        assert_ne!(o.decision, Decision::Processed, "{body}: traded at once: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
    }
}

/// TV-Hub (https://www.tv-hub.org/docs/trade-command/limit-order-management/): "`useLimitClose: true` is the only
/// way to exit a position via limit. Without it, an orderType=close payload is forced to market". `isClose` with
/// `isLimit` and a `price` is read here as a resting limit close at that price: the position the sender closed at
/// market stays open while the price runs away from the limit.
#[test]
fn tvhub_islimit_does_not_make_a_close_rest_as_a_limit() {
    let body = r#"{"exchange":"binance","pair":"AAPL","isClose":true,"isLimit":true,"price":195}"#;
    let o = peer_dry(body);
    let resting_limit = o.orders.iter().any(|r| {
        let b = String::from_utf8_lossy(r.request.body.as_bytes()).into_owned();
        b.contains("195") && !b.contains("market")
    });
    assert!(
        !(o.decision == Decision::Processed && resting_limit),
        "isClose + isLimit went out as a resting limit close at 195, TV-Hub closes at market: {}",
        o.to_json()
    );
}

/// TV-Hub's `updateCurrentLimitOrder: true` "reposition[s] the open limit order nearest to market" (it ignores
/// `price`): a change to a working order, never a new one. Dropped, the body is read as a new limit entry beside
/// the working one: the entry is doubled.
#[test]
fn tvhub_update_current_limit_order_is_not_a_new_entry() {
    let body =
        r#"{"exchange":"kucoin","pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"updateCurrentLimitOrder":true}"#;
    let o = peer_dry(body);
    assert_ne!(o.decision, Decision::Processed, "a reposition became a new entry: {}", o.to_json());
    assert!(o.orders.is_empty(), "{}", o.to_json());
}

/// A limit entry the sender bounds in time or asks to chase: TradersPost's `cancelAfter` ("a per-signal cancel
/// delay in seconds for the entry order", https://traderspost.io/reference/strategy-field/cancel-open-entry-order-after-delay),
/// TV-Hub's `cancelLimitOrderOffset` ("auto-cancels the still-pending entry/DCA limit orders" after N s) and
/// `chaseLimitOrder` (re-prices at the touch until it fills). Dropped, the limit rests at its price for the day or
/// until cancelled, and fills hours after the sender gave it up.
#[test]
fn limit_order_lifetime_keys_are_not_dropped() {
    for body in [
        r#"{"ticker":"AAPL","action":"buy","orderType":"limit","limitPrice":190,"cancelAfter":30}"#,
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"cancelLimitOrderOffset":60}"#,
        r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"chaseLimitOrder":true}"#,
    ] {
        let o = peer_dry(body);
        assert_ne!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
    }
}

/// TV-Hub's `limitPriceType` (same key as TradersPost's) takes `fixedPrice` (its default: "use price verbatim") and
/// `bestPrice` ("the current best bid (buys) or best ask (sells)", TradersPost's `ask_bid`). Both are refused as
/// "bid, ask, ask_bid, mark or last".
#[test]
fn tvhub_limit_price_type_words_are_read() {
    use strategy_webhook::alert;
    let ct = Some("application/json");
    let fixed = r#"{"pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"limitPriceType":"fixedPrice"}"#;
    let plain = r#"{"pair":"AAPL","isBuy":true,"isLimit":true,"price":190}"#;
    assert_eq!(alert::parse(fixed.as_bytes(), ct), alert::parse(plain.as_bytes(), ct), "fixedPrice");
    let best = r#"{"pair":"AAPL","isBuy":true,"isLimit":true,"limitPriceType":"bestPrice"}"#;
    let ask_bid = r#"{"pair":"AAPL","isBuy":true,"isLimit":true,"limitPriceType":"ask_bid"}"#;
    assert_eq!(alert::parse(best.as_bytes(), ct), alert::parse(ask_bid.as_bytes(), ct), "bestPrice");
}

/// TV-Hub's strategy-alert form puts `{{strategy.order.action}}` under `orderType` ("buy" → isBuy, "sell" → isSell,
/// https://www.tv-hub.org/docs/trade-command/anatomy/). Refused as "`orderType` cannot be \"buy\": market or limit",
/// a reason that sends the sender to change the wrong thing.
#[test]
fn tvhub_order_type_action_words_are_read() {
    use strategy_webhook::alert;
    let ct = Some("application/json");
    for (tvh, flag) in [
        (
            r#"{"exchange":"binance","pair":"BTCUSDT","orderType":"buy"}"#,
            r#"{"exchange":"binance","pair":"BTCUSDT","isBuy":true}"#,
        ),
        (
            r#"{"exchange":"binance","pair":"BTCUSDT","orderType":"sell"}"#,
            r#"{"exchange":"binance","pair":"BTCUSDT","isSell":true}"#,
        ),
    ] {
        assert_eq!(alert::parse(tvh.as_bytes(), ct), alert::parse(flag.as_bytes(), ct), "{tvh}");
    }
}

/// README: unresolved placeholders refuse the alert "naming every one of them". TradingView's default fill message
/// left unresolved names two of its three, and files `{{strategy.order.contracts}}` under `position`.
#[test]
fn fill_message_names_every_unresolved_placeholder() {
    use strategy_webhook::alert;
    let body = "My Strategy: order {{strategy.order.action}} @ {{strategy.order.contracts}} filled on AAPL. New \
                strategy position is {{strategy.position_size}}";
    let e = alert::parse(body.as_bytes(), Some("text/plain")).unwrap_err().to_string();
    assert!(e.contains("{{strategy.position_size}}"), "{e}");
}

/// The timing keys refuse with a reason that says what to send instead, and zero, `false`, empty and `null` (a
/// template that fills every key) ask for nothing: the alert trades as it would without them.
#[test]
fn timing_keys_refuse_with_a_reason_and_off_values_pass() {
    use strategy_webhook::alert;
    let ct = Some("application/json");
    for (body, reason) in [
        (
            r#"{"ticker":"AAPL","action":"buy","delay":"5"}"#,
            "delayed execution is not supported: send the alert when it is due",
        ),
        (
            r#"{"ticker":"AAPL","action":"buy","cancelAfter":"30"}"#,
            "`cancelAfter`: cancelling or re-pricing a limit order",
        ),
        (r#"{"pair":"AAPL","isBuy":true,"chaseLimitOrder":"true"}"#, "`chaseLimitOrder`: cancelling or re-pricing"),
        (r#"{"pair":"AAPL","isBuy":true,"updateCurrentLimitOrder":true}"#, "send a MODIFY with the new `price`"),
        // Named after a lifetime key that a market order ignores: the delay is still refused.
        (
            r#"{"pair":"AAPL","isBuy":true,"isMarket":true,"cancelLimitOrderOffset":60,"delay":"5"}"#,
            "delayed execution is not supported",
        ),
    ] {
        let e = alert::parse(body.as_bytes(), ct).unwrap_err().to_string();
        assert!(e.contains(reason), "{body}: {e}");
    }
    // Only a chase's cadence: asks nothing on its own.
    let cadence = alert::parse(br#"{"pair":"AAPL","isBuy":true,"updateLimitOrderTimeInterval":30}"#, ct);
    assert_eq!(cadence, alert::parse(br#"{"pair":"AAPL","isBuy":true}"#, ct));
    let plain = alert::parse(br#"{"pair":"AAPL","isBuy":true,"isLimit":true,"price":190}"#, ct).unwrap();
    for off in [r#"0"#, r#""""#, r#"false"#, r#"null"#, r#""0""#] {
        let body = format!(
            r#"{{"pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"delay":{off},"cancelAfter":{off},
                "cancelLimitOrderOffset":{off},"chaseLimitOrder":{off},"updateCurrentLimitOrder":{off},
                "updateLimitOrderTimeInterval":{off}}}"#
        );
        assert_eq!(alert::parse(body.as_bytes(), ct), Ok(plain.clone()), "{off}");
    }
}

/// A TV-Hub close with `isLimit` and no `useLimitClose` goes out at market, as TV-Hub sends it; `useLimitClose`
/// still makes it a limit at `price`, and an `isLimit` entry is still a limit.
#[test]
fn tvhub_close_with_islimit_is_a_market_close() {
    use strategy_webhook::alert::{self, OrderType};
    let ct = Some("application/json");
    let read = |b: &str| alert::parse(b.as_bytes(), ct).unwrap()[0].order_type;
    assert_eq!(read(r#"{"pair":"AAPL","isClose":true,"isLimit":true,"price":195}"#), Some(OrderType::Market));
    assert_eq!(read(r#"{"pair":"AAPL","action":"exit","isLimit":true,"price":195}"#), Some(OrderType::Market));
    assert_eq!(
        read(r#"{"pair":"AAPL","isClose":true,"isLimit":true,"useLimitClose":true,"price":195}"#),
        Some(OrderType::Limit)
    );
    assert_eq!(read(r#"{"pair":"AAPL","isBuy":true,"isLimit":true,"price":190}"#), Some(OrderType::Limit));
    let o = peer_dry(r#"{"exchange":"binance","pair":"AAPL","isClose":true,"isLimit":true,"price":195}"#);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    for r in &o.orders {
        assert_eq!(r.order.order_type, OrderType::Market, "{}", o.to_json());
    }
}

/// TV-Hub's `orderType: buy`/`sell` must agree with an `action` or a flag beside it; TradersPost's `orderType`
/// `market`/`limit` is still the order type, and `stop` still refused by name.
#[test]
fn tvhub_order_type_action_words_must_agree() {
    use strategy_webhook::alert::{self, OrderType};
    let ct = Some("application/json");
    for body in [
        r#"{"pair":"AAPL","orderType":"buy","action":"sell"}"#,
        r#"{"pair":"AAPL","orderType":"sell","isBuy":true}"#,
        r#"{"pair":"AAPL","orderType":"buy","isClose":true}"#,
    ] {
        let e = alert::parse(body.as_bytes(), ct).unwrap_err();
        assert!(matches!(e, alert::ParseError::Conflict { .. }), "{body}: {e}");
    }
    let same = alert::parse(br#"{"pair":"AAPL","orderType":"buy","action":"buy","isBuy":true}"#, ct).unwrap();
    assert_eq!(same, alert::parse(br#"{"pair":"AAPL","action":"buy"}"#, ct).unwrap());
    let limit = alert::parse(br#"{"ticker":"AAPL","action":"buy","orderType":"limit","price":190}"#, ct).unwrap();
    assert_eq!(limit[0].order_type, Some(OrderType::Limit));
    let e = alert::parse(br#"{"ticker":"AAPL","action":"buy","orderType":"stop"}"#, ct).unwrap_err().to_string();
    assert!(e.contains("stop"), "{e}");
}

/// A fill message whose side is filled in but whose contracts are not is refused naming the contracts: the
/// placeholder is never filed where a buy would not read it.
#[test]
fn fill_message_with_unresolved_contracts_alone_is_refused() {
    use strategy_webhook::alert;
    let body = "My Strategy: order buy @ {{strategy.order.contracts}} filled on AAPL. New strategy position is 5";
    let e = alert::parse(body.as_bytes(), Some("text/plain")).unwrap_err().to_string();
    assert!(e.contains("{{strategy.order.contracts}}") && e.contains("quantity"), "{e}");
}

/// TV-Hub's `cancelLimitOrderOffset` "Only runs with isLimit=true and a value greater than 0", and
/// `updateLimitOrderTimeInterval` only tunes the cadence of a chase (`chaseLimitOrder`/`updateCurrentLimitOrder`)
/// (https://www.tv-hub.org/docs/trade-command/limit-order-management/). A template that keeps them filled in and
/// sends a market entry (or a limit with no chase) asks nothing of them at TV-Hub: it traded here before 0fe6388 and
/// is now refused as "cancelling or re-pricing a limit order after a time is not supported" / "moves the working
/// limit order to the market". The controls (the same bodies without the key) are processed.
#[test]
fn tvhub_limit_timing_keys_that_ask_nothing_do_not_refuse_a_market_entry() {
    let mut refused = Vec::new();
    for (body, control) in [
        (
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isMarket":true,"cancelLimitOrderOffset":60}"#,
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isMarket":true}"#,
        ),
        (
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isMarket":true,"updateLimitOrderTimeInterval":20}"#,
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isMarket":true}"#,
        ),
        (
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"chaseLimitOrder":false,"updateLimitOrderTimeInterval":20}"#,
            r#"{"exchange":"binance","pair":"AAPL","isBuy":true,"isLimit":true,"price":190,"chaseLimitOrder":false}"#,
        ),
    ] {
        let c = peer_dry(control);
        assert_eq!(c.decision, Decision::Processed, "control {control}: {}", c.to_json());
        let o = peer_dry(body);
        if o.decision != Decision::Processed {
            refused.push(format!("{body}: {}", o.reason.clone().unwrap_or_default()));
        }
    }
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}

/// `date` or `alertTimestamp` beside `timenow` says when the alert was made too: two instants are refused, as two of
/// `timenow`/`timestamp` are, and one instant written twice is read once. Taken over `timenow` unasked, a `date`
/// holding the bar's open (30 min earlier) refused an alert 5 s old as stale, and a fresh `date` let an alert made
/// an hour before trade.
#[test]
fn a_date_beside_timenow_must_name_the_same_instant() {
    let e = with(|v| v["max_alert_age"] = json!(300));
    for key in ["date", "alertTimestamp"] {
        let body = format!(
            r#"{{"ticker":"AAPL","action":"buy","{key}":"2024-01-15T14:00:00Z","timenow":"2024-01-15T14:30:00Z"}}"#
        );
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 5_000);
        assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
        let reason = o.reason.clone().unwrap_or_default();
        assert!(reason.contains(key) && reason.contains("timenow"), "{reason}");
        assert!(!reason.starts_with("stale alert"), "{reason}");
        // The hour-old alert with a fresh `date`: refused too, never traded.
        let body = format!(
            r#"{{"ticker":"AAPL","action":"buy","{key}":"2024-01-15T15:30:00Z","timenow":"2024-01-15T14:30:00Z"}}"#
        );
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 3_605_000);
        assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
    }
    // TV-Hub's `{{ticker}}-{{timenow}}` beside `timenow`: one instant, and fresh.
    let body = r#"{"ticker":"AAPL","action":"buy","alertTimestamp":"AAPL-2024-01-15T14:30:00Z","timenow":"2024-01-15T14:30:00Z"}"#;
    let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), SENT + 5_000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// The free-words fix makes a template's bare `{{timenow}}` the alert's time, but TradingView's
/// fill message drops it when it is in the title (`{{timenow}}: order buy @ 1 filled on AAPL. …`, or after the
/// strategy's name): no time, so `max_alert_age` is off again and a fill an hour late trades at market.
#[test]
fn a_zoned_time_in_a_fill_messages_title_counts_for_max_alert_age() {
    let e = with(|v| v["max_alert_age"] = json!(60));
    for body in [
        "2024-01-15T14:30:00Z: order buy @ 1 filled on AAPL. New strategy position is 1",
        "My strategy [2024-01-15T14:30:00Z]: order buy @ 1 filled on AAPL. New strategy position is 1",
    ] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT + 3_600_000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: an hour late, {}", o.to_json());
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT + 5_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: on time, {}", o.to_json());
    }
}

/// A PineConnector item whose value holds a space hides what follows it: `sl=180`
/// after `risk=1 ` (a comma left out) is read as part of the risk, skipped, and the entry goes out with no stop,
/// where `risk=1,sl=180` is refused as a bracket.
#[test]
fn a_stop_hidden_after_a_space_in_a_pineconnector_value_is_not_skipped() {
    let e = with(|_| {});
    for body in ["60123456789,buy,AAPL,risk=1 sl=180", "60123456789,buy,AAPL,risk=1 tp=200"] {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), SENT);
        assert_ne!(
            o.decision,
            Decision::Processed,
            "{body}: traded without its stop or target: {:?}",
            o.orders.iter().map(|x| x.request.path.clone()).collect::<Vec<_>>()
        );
    }
}
