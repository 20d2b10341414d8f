//! The order of checks and every row of the spec's Errors table, with `now` stepped
//! explicitly.

mod common;

use common::*;
use serde_json::{json, Value};
use strategy_webhook::engine::MAX_BODY;
use strategy_webhook::{Decision, Engine, Level, Limits, RequestKind};

#[test]
fn processed_open_fans_out_to_every_bot() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    assert_eq!(o.response, r#"{"status":"processed"}"#);
    assert_eq!(o.orders.len(), 2);
    assert_eq!(&*o.orders[0].bot, "alpaca-main");
    assert_eq!(&*o.orders[1].bot, "schwab-main");
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"OPEN","instrument":"AAPL","direction":"LONG","price":null}"#);
    assert!(o.logs.iter().any(|l| l.level == Level::Info && l.message == "parsed buy AAPL"), "{:?}", o.logs);
    assert_eq!(o.strategy.as_deref(), Some("s1"));
}

/// `Engine::route` is the order of checks' first two steps alone: the strategy, or the very 400 or 404 a
/// delivery gets; it records nothing.
#[test]
fn route_answers_the_first_two_checks_and_records_nothing() {
    let e = engine();
    assert_eq!(&*e.route(TOKEN.as_bytes()).expect("a known token").id, "s1");
    for (token, status) in [(TOKEN[..63].to_string(), 400), ("0".repeat(64), 404)] {
        let answer = e.route(token.as_bytes()).expect_err("no strategy");
        let delivered = e.deliver(token.as_bytes(), b"{}", None, T0);
        assert_eq!((answer.http_status, &answer.response, answer.code), (status, &delivered.response, delivered.code));
        assert_eq!(answer.decision, Decision::Error);
    }
    for _ in 0..1000 {
        let _ = e.route(TOKEN.as_bytes());
    }
    // Nothing counted against the 60 a minute: the first delivery is processed, and 59 more fit after it.
    assert_eq!(post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0).decision, Decision::Processed);
    use strategy_webhook::state::StateStore;
    for _ in 0..59 {
        assert!(e.store().count("s1", T0));
    }
    assert!(!e.store().peek_count("s1", T0), "the 61st would be over");
}

#[test]
fn malformed_tokens_are_400() {
    let e = engine();
    let cases: Vec<String> = vec![
        TOKEN[..63].to_string(),
        format!("{TOKEN}a"),
        TOKEN.to_uppercase(),
        format!(" {}", &TOKEN[1..]),
        format!("{}\n", &TOKEN[1..]),
        format!("{}g", &TOKEN[1..]),
        String::new(),
    ];
    for t in cases {
        let o = e.deliver(t.as_bytes(), b"{}", None, T0);
        assert_eq!(o.http_status, 400, "{t:?}");
        let body = response(&o);
        assert_eq!(body["code"], "invalid_token");
        assert!(body["error"].as_str().unwrap().contains("64 lowercase hexadecimal"));
        assert!(!o.to_json().contains(&t) || t.is_empty(), "the token never appears in the outcome");
    }
}

#[test]
fn unknown_and_rotated_tokens_are_404() {
    let e = engine();
    let o = e.deliver(TOKEN2.as_bytes(), b"{}", None, T0);
    assert_eq!(o.http_status, 404);
    assert_eq!(response(&o)["code"], "unknown_token");

    // Rotation: the old token answers 404 at once and the state moves along.
    assert_eq!(post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0).decision, Decision::Processed);
    e.rotate("s1", strategy_webhook::TokenHash::parse(TOKEN2.as_bytes()).unwrap()).unwrap();
    assert_eq!(post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0 + 1).http_status, 404);
    let o = e.deliver(TOKEN2.as_bytes(), br#"{"ticker":"AAPL","action":"buy"}"#, Some("application/json"), T0 + 2);
    assert_eq!(o.decision, Decision::Duplicate, "dedup state followed the rotation");
}

#[test]
fn payload_limit_is_413_before_parsing() {
    let e = engine();
    let big = vec![b'x'; MAX_BODY + 1];
    let o = e.deliver(TOKEN.as_bytes(), &big, Some("application/json"), T0);
    assert_eq!(o.http_status, 413);
    assert_eq!(response(&o)["code"], "payload_too_large");
    // Exactly at the limit is read (and is not an alert).
    let at = vec![b'x'; MAX_BODY];
    let o = e.deliver(TOKEN.as_bytes(), &at, Some("text/plain"), T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected));
}

/// The fixture snapshot trading options, its contracts taken from the alerts' legs.
fn external_options() -> serde_json::Value {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["*"]);
    snap["options"] = json!({"selection": "external"});
    snap
}

#[test]
fn too_many_legs_is_422() {
    let snap = external_options();
    let e = engine_with(snap);
    let leg = json!({"side": "call", "action": "buy_to_open", "strike": 100, "expiration": "2024-01-19"});
    let body = json!({"ticker": "SPX", "action": "OPEN", "direction": "LONG", "legs": [leg, leg, leg, leg, leg]});
    let o = post(&e, &body.to_string(), T0);
    assert_eq!(o.http_status, 422);
    assert_eq!(response(&o)["code"], "too_many_legs");
    // A 4xx releases the key: the same body is answered the same way again, not as a duplicate.
    assert_eq!(post(&e, &body.to_string(), T0 + 1).http_status, 422);
    // Four legs (a condor) is what an order supports: not a 422.
    let four = json!({"ticker": "SPX", "action": "OPEN", "direction": "LONG", "legs": [leg, leg, leg, leg]});
    let o = post(&e, &four.to_string(), T0 + 2);
    assert_ne!(o.http_status, 422, "{}", o.to_json());
}

/// An entry's legs open: a closing leg in an OPEN would close part of a position at the bot's sizing, a size
/// no alert sets (a CLOSE takes its legs from the position). And a position's legs are the actions that opened
/// it: a closing one there would be reversed into an opening one by a CLOSE.
#[test]
fn closing_legs_are_refused_in_an_entry_and_in_a_position() {
    let mut snap = external_options();
    let e = engine_with(snap.clone());
    let leg = |action: &str| json!({"side": "call", "action": action, "strike": 100, "expiration": "2024-01-19"});
    let body = json!({"ticker": "SPY", "action": "OPEN", "direction": "LONG",
                      "legs": [leg("buy_to_open"), leg("sell_to_close")]});
    let o = post(&e, &body.to_string(), T0);
    assert!(o.orders.is_empty(), "{}", o.to_json());
    assert!(o.to_json().contains("an entry's legs open"), "{}", o.to_json());

    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "long", "quantity": "1",
        "legs": [{"symbol": "SPY240119C00100000", "action": "sell_to_close"}]}]);
    let refused = strategy_webhook::Strategy::from_json(snap.to_string().as_bytes()).unwrap_err();
    assert!(refused.to_string().contains("a position's legs are the actions that opened it"), "{refused}");
}

/// A sell that leaves the position flat closed a long; a buy, a short. The side was left to the positions held,
/// so `sell` with `marketPosition: flat` covered a short when only a short was held.
#[test]
fn a_fill_to_flat_closes_the_side_its_buy_or_sell_exits() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"] = json!([{ "id": "alpaca-main", "broker": "alpaca", "account_id": "PA0000000",
        "sizing": {"fixed_quantity": "10"},
        "positions": [{"instrument": "AAPL", "direction": "short", "quantity": "10"}] }]);
    let e = engine_with(snap.clone());
    for (i, key) in ["marketPosition", "sentiment"].iter().enumerate() {
        let body = json!({"ticker": "AAPL", "action": "sell", key.to_string(): "flat"}).to_string();
        let o = post(&e, &body, T0 + i as i64 * 400_000);
        assert!(o.orders.is_empty(), "{key}: {}", o.to_json());
        assert!(o.reason.as_deref().unwrap_or_default().contains("no open LONG position"), "{key}: {}", o.to_json());
    }
    // A buy to flat covers the short.
    let o = post(&e, &json!({"ticker": "AAPL", "action": "buy", "marketPosition": "flat"}).to_string(), T0 + 900_000);
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(o.orders[0].order.intent.as_str(), "close_short");
}

/// A leg field given twice, differently (a key repeated, or `expiration` beside `expiry`), is refused: the last
/// one silently won, so the contract traded depended on the order of the keys.
#[test]
fn a_leg_field_given_twice_differently_is_refused() {
    let parse = |legs: &str| {
        let body = format!(r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","legs":[{legs}]}}"#);
        strategy_webhook::alert::parse(body.as_bytes(), Some("application/json"))
    };
    for leg in [
        r#"{"side":"call","action":"buy_to_open","strike":100,"expiration":"2024-01-19","expiry":"2024-02-16"}"#,
        r#"{"side":"call","action":"buy_to_open","strike":100,"strike":105,"expiration":"2024-01-19"}"#,
        r#"{"side":"call","side":"put","action":"buy_to_open","strike":100,"expiration":"2024-01-19"}"#,
        r#"{"symbol":"SPY240119C00100000","symbol":"SPY240119C00105000","action":"buy_to_open"}"#,
        r#"{"side":"call","action":"buy_to_open","action":"sell_to_open","strike":100,"expiration":"2024-01-19"}"#,
    ] {
        let e = parse(leg).unwrap_err().to_string();
        assert!(e.contains("twice"), "{leg}: {e}");
    }
    // The same value under two names is one value.
    let same = r#"{"side":"call","action":"buy_to_open","strike":100,"expiration":"2024-01-19","expiry":"2024-01-19"}"#;
    assert!(parse(same).is_ok());
}

#[test]
fn rate_limit_61st_post_in_window() {
    let e = engine();
    for i in 0..60 {
        let o = post(&e, &format!(r#"{{"ticker":"TSLA","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#), T0 + i);
        assert_ne!(o.http_status, 429, "post {i}");
    }
    let o = post(&e, r#"{"ticker":"TSLA","action":"buy"}"#, T0 + 60);
    assert_eq!(o.http_status, 429);
    assert_eq!(o.response, r#"{"error":"rate limit exceeded"}"#);
    // 429s do not use up the budget: more of them change nothing.
    for _ in 0..10 {
        assert_eq!(post(&e, "{}", T0 + 100).http_status, 429);
    }
    // The first post expires at exactly T0 + 60,000: one slot frees up.
    assert_eq!(post(&e, "{}", T0 + 59_999).http_status, 429);
    assert_ne!(post(&e, "{}", T0 + 60_000).http_status, 429);
    assert_eq!(post(&e, "{}", T0 + 60_000).http_status, 429, "only one slot freed");
    assert_ne!(post(&e, "{}", T0 + 60_001).http_status, 429);
    // Long after, the webhook answers again in full.
    for i in 0..60 {
        assert_ne!(post(&e, &format!(r#"{{"n":{i}}}"#), T0 + 200_000 + i).http_status, 429);
    }
}

#[test]
fn inactive_statuses_answer_rejected_true() {
    for status in ["paused", "draft", "archived", "PAUSED"] {
        let mut snap = snapshot();
        snap["status"] = json!(status);
        let e = engine_with(snap);
        let o = post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0);
        assert_eq!((o.http_status, o.decision), (200, Decision::Inactive));
        assert_eq!(o.response, format!(r#"{{"rejected":true,"reason":"strategy is {}"}}"#, status.to_lowercase()));
        assert!(o.orders.is_empty());
        // An inactive strategy still counts against the rate limit.
        for i in 0..59 {
            post(&e, &format!("{{\"i\":{i}}}"), T0 + 1);
        }
        assert_eq!(post(&e, "{}", T0 + 2).http_status, 429);
    }
}

#[test]
fn dedup_window_edges() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Processed);
    let d = post(&e, body, T0 + 1);
    assert_eq!((d.http_status, &*d.response), (200, r#"{"status":"duplicate"}"#));
    assert_eq!(d.logs.len(), 1, "the first duplicate in a window is logged");
    assert!(post(&e, body, T0 + 2).logs.is_empty(), "later duplicates in the window are not");
    assert_eq!(post(&e, body, T0 + 299_999).decision, Decision::Duplicate);
    assert_eq!(post(&e, body, T0 + 300_000).decision, Decision::Processed, "the window has passed");
    // A new window logs its first duplicate again: the throttle is per window, not forever.
    let again = post(&e, body, T0 + 300_001);
    assert_eq!((again.decision, again.logs.len()), (Decision::Duplicate, 1), "{:?}", again.logs);
    assert!(post(&e, body, T0 + 300_002).logs.is_empty());
    // Any changed byte is a new alert.
    assert_eq!(post(&e, &format!("{body} "), T0 + 300_001).decision, Decision::Processed);
}

/// A host clock stepped back (an NTP correction, or marks restored from a run whose clock was ahead) leaves
/// entries later than the next deliveries' time. Measured from their own time they kept the webhook 429 and a
/// repeated body `duplicate` for as long as the step; each now lasts at most one window from the step.
#[test]
fn a_clock_stepped_back_keeps_each_window_one_window_long() {
    let e = engine();
    let hour = 3_600_000;
    let repeated = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(post(&e, repeated, T0 + hour).decision, Decision::Processed, "under a clock an hour ahead");
    // The clock is corrected: a retry a moment later is still the same alert.
    assert_eq!(post(&e, repeated, T0).decision, Decision::Duplicate);
    assert_eq!(post(&e, repeated, T0 + 299_999).decision, Decision::Duplicate);
    assert_eq!(post(&e, repeated, T0 + 300_000).decision, Decision::Processed, "one window from the step");
    // An alert every 10 s, a sixth of the limit: none is refused once the marks from before the step have aged.
    let refused: Vec<i64> = (0..120)
        .filter(|i| {
            let body = format!(r#"{{"ticker":"TSLA","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
            post(&e, &body, T0 + 300_001 + i * 10_000).http_status == 429
        })
        .collect();
    assert!(refused.is_empty(), "{} of 120 answered 429, first #{:?}", refused.len(), refused.first());
    // A time far ahead, once (a host passing microseconds by mistake), shuts nothing for good.
    let e = engine();
    assert_eq!(
        post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"us"}}"#, T0 * 1000).http_status,
        200
    );
    let refused = (0..100)
        .filter(|i| {
            let body = format!(r#"{{"ticker":"TSLA","action":"buy","metadata":{{"message_id":"n{i}"}}}}"#);
            post(&e, &body, T0 + i * 120_000).http_status == 429
        })
        .count();
    assert_eq!(refused, 0);
}

/// One delivery whose time is far behind (a thread stalled after reading the clock, a host passing 0 once) looks
/// like the clock gone back, and moved every recent key back to its time: once the deliveries on time resumed,
/// those keys counted as the step older, and a resend 101 s (or 1 s) after its alert traded again.
#[test]
fn one_time_far_behind_leaves_the_keys_their_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let late = r#"{"ticker":"MSFT","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, late, T0 - 200_000).decision, Decision::Processed);
    assert_eq!(post(&e, a, T0 + 101_000).decision, Decision::Duplicate, "seen 101 s ago");
    assert_eq!(post(&e, a, T0 + 300_000).decision, Decision::Processed, "a window after it was seen");
    for outlier in [0, T0 - 3_600_000] {
        let e = engine();
        assert_eq!(post(&e, a, T0).decision, Decision::Processed);
        assert_eq!(post(&e, late, outlier).decision, Decision::Processed, "{outlier}");
        assert_eq!(post(&e, a, T0 + 1_000).decision, Decision::Duplicate, "{outlier}: seen 1 s ago");
        // The late delivery's own resend is on time: a duplicate of it too.
        assert_eq!(post(&e, late, T0 + 2_000).decision, Decision::Duplicate, "{outlier}");
    }
}

/// One delivery far ahead (a host passing microseconds once) swept every key against its time, so back on the right
/// clock a resend a second after its alert traded again.
#[test]
fn one_time_far_ahead_deletes_no_key() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let ahead = r#"{"ticker":"MSFT","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, ahead, T0 * 1000).decision, Decision::Processed);
    assert_eq!(post(&e, a, T0 + 1_000).decision, Decision::Duplicate, "seen 1 s ago");
    assert_eq!(post(&e, ahead, T0 + 2_000).decision, Decision::Duplicate, "its resend on the right clock");
    assert_eq!(post(&e, a, T0 + 300_000).decision, Decision::Processed, "a window after it was seen");
}

/// A clock corrected back gave every key seen later a whole new window from the step, however old it was: an alert
/// 300 s after the same one (the next bar's) was answered duplicate for up to another 290 s. Keys keep their age.
#[test]
fn a_clock_corrected_back_keeps_each_keys_age() {
    let hour = 3_600_000;
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let b = r#"{"ticker":"TSLA","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0 + hour).decision, Decision::Processed, "under a clock an hour ahead");
    assert_eq!(post(&e, b, T0 + hour + 290_000).decision, Decision::Processed);
    // Corrected: the next delivery is 3,599 s behind the latest, 1 s after it.
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 + 291_000).decision, Decision::Processed);
    assert_eq!(post(&e, b, T0 + 299_000).decision, Decision::Duplicate, "b was seen 9 s ago");
    assert_eq!(post(&e, a, T0 + 301_000).decision, Decision::Processed, "a was seen 300 s ago");
    assert_eq!(post(&e, b, T0 + 591_000).decision, Decision::Processed, "b was seen 300 s ago, at the step");
}

/// A clock corrected back by less than a key's age moved only the keys seen later than the new time: an older key
/// kept its time from the old clock and lasted the step longer on the new one, so the same alert 301 s after the
/// first (a new alert) was answered `duplicate` and its order lost. Every key keeps its age.
#[test]
fn a_step_back_shorter_than_a_keys_age_still_keeps_its_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    // Deliveries on the clock, then the clock corrected back by 200 s, then deliveries on the new clock (dense
    // enough that the step is kept, not taken for an outlier).
    let other = |i: i64| format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
    // Steady: a lone time more than 30 s past the one before it may be one time ahead, which moves no key.
    for i in 1..=14 {
        assert_eq!(post(&e, &other(100 + i), T0 + i * 20_000).decision, Decision::Processed);
    }
    assert_eq!(post(&e, &other(0), T0 + 290_000).decision, Decision::Processed);
    let back = 200_000;
    for (i, real) in [291_000i64, 293_000, 295_000, 297_000, 299_000].into_iter().enumerate() {
        assert_eq!(post(&e, &other(1 + i as i64), T0 + real - back).decision, Decision::Processed);
    }
    // AAPL again, 301 s (real) after it was first seen: past the window, a new alert.
    let o = post(&e, a, T0 + 301_000 - back);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 301 s ago (290 s old at the step): {}", o.to_json());
}

/// Threads read the clock before they wait for a strategy's lock, so deliveries are counted a little out of time
/// order. Taken for a clock stepped back, each let the marks just counted go (every POST of a burst got past the
/// rate) and brought a key claimed a moment later back, shortening its window.
#[test]
fn times_a_little_out_of_order_are_no_clock_step() {
    let mut s = snapshot();
    s["bots"] = json!([]);
    let e = engine_with(s.clone());
    let ok = (0..120i64)
        .filter(|i| {
            let t = T0 + (i / 2) * 2 + (1 - i % 2); // T0+1, T0, T0+3, T0+2, ...
            let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
            post(&e, &body, t).http_status == 200
        })
        .count();
    assert_eq!(ok, 60, "the 61st within the minute is a 429");
    let e = engine_with(s);
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(post(&e, a, T0 + 5).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0).decision, Decision::Processed);
    assert_eq!(post(&e, a, T0 + 300_003).decision, Decision::Duplicate, "299,998 ms after its first delivery");
}

/// Issue 12 §1: the client order id is unique per processed delivery. The same body
/// processed again once the window has passed is a new trade, and brokers that refuse a
/// reused client order id (Alpaca, Coinbase) must see a new one; a dry run of the first
/// delivery's moment gives that delivery's ids back (what a host's stored request keeps).
#[test]
fn the_same_body_after_the_window_gets_new_client_order_ids() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let ids = |o: &strategy_webhook::Outcome| o.orders.iter().map(|r| r.client_order_id).collect::<Vec<_>>();
    let first = post(&e, body, T0);
    assert_eq!(first.decision, Decision::Processed);
    assert_eq!(first.orders.len(), 2);
    assert_eq!(post(&e, body, T0 + 299_999).decision, Decision::Duplicate);
    let again = post(&e, body, T0 + 300_000);
    assert_eq!(again.decision, Decision::Processed);
    assert_eq!(first.dedup_key, again.dedup_key, "one dedup key, claimed twice");
    for (a, b) in ids(&first).iter().zip(ids(&again)) {
        assert_ne!(*a, b, "a new claim of the key is a new order at the broker");
    }
    for r in first.orders.iter().chain(&again.orders) {
        assert_eq!(r.order.client_order_id, r.client_order_id);
    }
    // Validating at the first claim's moment gives that delivery's ids again.
    let strategy = e.strategy("s1").unwrap();
    let replay = strategy_webhook::validate(&strategy, body.as_bytes(), Some("application/json"), T0);
    assert_eq!(ids(&replay), ids(&first));
}

#[test]
fn message_id_is_the_key_when_sent() {
    let e = engine();
    let a = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"abc"}}"#;
    let b = r#"{"action":"buy","ticker":"AAPL","metadata":{"message_id":"abc"}}"#;
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, b, T0 + 1).decision, Decision::Duplicate, "same message_id, different bytes");
    let c = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"abd"}}"#;
    assert_eq!(post(&e, c, T0 + 2).decision, Decision::Processed);
}

#[test]
fn two_strategies_dedup_independently() {
    let e = engine();
    let mut other = snapshot();
    other["id"] = json!("s2");
    other["token_hash"] = json!(TOKEN2);
    e.upsert(strategy_from(&other)).unwrap();
    let body = br#"{"ticker":"AAPL","action":"buy"}"#;
    for t in [TOKEN, TOKEN2] {
        assert_eq!(e.deliver(t.as_bytes(), body, None, T0).decision, Decision::Processed);
    }
}

/// Spec, Deduplication rule 1, and DESIGN's order of checks (dedup, 6, before the parse's
/// 422, 7): the sender's `metadata.message_id` is the key also for a body whose alert does
/// not parse. Before, such a body was keyed by its hash, so a resend under an id already
/// traded answered 422 (or was rejected) instead of `duplicate`, and an id first seen on a
/// refused body traded when it came again.
#[test]
fn a_message_id_is_the_key_also_for_a_body_that_does_not_parse() {
    let mut snap = external_options();
    snap["bots"] = json!([]);
    let e = engine_with(snap);
    let leg = json!({"side": "call", "action": "buy_to_open", "strike": 100, "expiration": "2024-01-19"});
    let alert = |legs: usize, id: &str| {
        json!({"ticker": "SPY", "action": "OPEN", "direction": "LONG", "legs": vec![leg.clone(); legs],
               "metadata": {"message_id": id}})
        .to_string()
    };
    assert_eq!(post(&e, &alert(1, "k1"), T0).decision, Decision::Processed);
    let o = post(&e, &alert(5, "k1"), T0 + 1);
    assert_eq!((o.http_status, &*o.response), (200, r#"{"status":"duplicate"}"#), "{}", o.to_json());
    // A new id with too many legs is still a 422, and releases its id like any 4xx.
    assert_eq!(post(&e, &alert(5, "k2"), T0 + 2).http_status, 422);
    assert_eq!(post(&e, &alert(1, "k2"), T0 + 3).decision, Decision::Processed);

    // A refused body records its id: the same id again is a duplicate, whatever it says.
    let e = engine();
    let o = post(&e, r#"{"ticker":"AAPL","metadata":{"message_id":"m9"}}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"m9"}}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Duplicate, "{}", o.to_json());
    assert!(o.orders.is_empty());
    // A top-level `message_id` reads as it does on an alert that parses.
    let o = post(&e, r#"{"ticker":"{{ticker}}","action":"buy","message_id":"m10"}"#, T0 + 2);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert_eq!(
        post(&e, r#"{"ticker":"AAPL","action":"buy","message_id":"m10"}"#, T0 + 3).decision,
        Decision::Duplicate
    );
    // Without a readable id (invalid JSON, text, two ids that disagree) the body's hash is the key.
    for (i, body) in [
        r#"{"ticker":"AAPL","metadata":{"message_id":"m11"}"#,
        r#"{"ticker":"AAPL","message_id":"m12","metadata":{"message_id":"m13"}}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 10 + i as i64);
        assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    }
    for (i, id) in ["m11", "m12", "m13"].into_iter().enumerate() {
        let ok = format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"{id}"}}}}"#);
        assert_eq!(post(&e, &ok, T0 + 20 + i as i64).decision, Decision::Processed, "{id}");
    }
}

/// DESIGN's order of checks 2 to 4: an unknown token is 404 whatever the body, and an
/// oversized body is 413 even when the rate budget is spent (it is not counted either).
#[test]
fn unknown_token_then_size_then_rate() {
    let e = engine();
    let big = vec![b'x'; MAX_BODY + 1];
    assert_eq!(e.deliver(TOKEN2.as_bytes(), &big, None, T0).http_status, 404);
    for i in 0..60 {
        assert_ne!(post(&e, &format!(r#"{{"n":{i}}}"#), T0).http_status, 429);
    }
    assert_eq!(post(&e, "{}", T0).http_status, 429);
    assert_eq!(e.deliver(TOKEN.as_bytes(), &big, None, T0).http_status, 413);
}

/// Spec, Limits: the rate applies to every POST on the webhook, so duplicates and
/// rejections use up the budget as processed alerts do (only a 429 does not).
#[test]
fn duplicates_and_rejections_count_against_the_rate() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Processed);
    for i in 1..30 {
        assert_eq!(post(&e, body, T0 + i).decision, Decision::Duplicate);
    }
    for i in 30..60 {
        assert_eq!(
            post(&e, &format!(r#"{{"ticker":"NFLX","action":"buy","n":{i}}}"#), T0 + i).decision,
            Decision::Rejected
        );
    }
    let o = post(&e, body, T0 + 60);
    assert_eq!((o.http_status, &*o.response), (429, r#"{"error":"rate limit exceeded"}"#));
}

/// A delivery answered before the dedup check (429, or a strategy that is not Active)
/// claims no key: the same alert sent once the budget is back, or once the strategy is
/// active again, trades rather than being called a duplicate.
#[test]
fn rate_limited_and_inactive_deliveries_claim_no_dedup_key() {
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    for i in 0..60 {
        post(&e, &format!(r#"{{"n":{i}}}"#), T0);
    }
    assert_eq!(post(&e, body, T0 + 1).http_status, 429);
    assert_eq!(post(&e, body, T0 + 60_000).decision, Decision::Processed);

    let mut snap = snapshot();
    snap["status"] = json!("paused");
    let e = engine_with(snap.clone());
    assert_eq!(post(&e, body, T0).decision, Decision::Inactive);
    assert_eq!(post(&e, body, T0 + 1).decision, Decision::Inactive, "inactive comes before dedup");
    snap["status"] = json!("active");
    e.upsert(strategy_from(&snap)).unwrap();
    assert_eq!(post(&e, body, T0 + 2).decision, Decision::Processed);
}

/// Spec, Alert payload: `order_type` and `duration` on the alert override the strategy's
/// (`duration` defaults to `day`), and `quantity`/`notional` never size an entry or a
/// close: the bot's sizing and the whole position do.
#[test]
fn the_alert_chooses_type_and_duration_but_never_the_size() {
    let order = |o: &strategy_webhook::Outcome, i: usize| {
        let r = &o.orders[i].order;
        (r.order_type.as_str(), r.duration.as_str(), r.quantity.to_string())
    };
    let mut snap = snapshot();
    snap["order_type"] = json!("limit");
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","order_type":"market","quantity":500}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(order(&o, 0), ("market", "day", "10".to_string()));
    let e = engine();
    let body =
        r#"{"ticker":"AAPL","action":"buy","order_type":"limit","price":"189.50","duration":"gtc","notional":99}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(order(&o, 0), ("limit", "gtc", "10".to_string()));
    assert_eq!(o.orders[0].order.limit_price, strategy_webhook::decimal::parse("189.50"));
    // Schwab's bot sizes $1,000 at the alert's price: 5 shares, not the alert's 99.
    assert_eq!(order(&o, 1), ("limit", "gtc", "5".to_string()));
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","quantity":3}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(order(&o, 0), ("market", "day", "10".to_string()), "the whole position, no partial close");
}

/// A broker's own time-in-force or session key is read or refused, never dropped: with a gtc strategy,
/// E*TRADE's `orderTerm: IMMEDIATE_OR_CANCEL` rested for weeks, and Schwab's `session: SEAMLESS` went to the
/// regular session.
#[test]
fn a_brokers_time_in_force_or_session_key_is_read_or_refused() {
    let mut snap = snapshot();
    snap["duration"] = json!("gtc");
    let e = engine_with(snap);
    let limit =
        |extra: &str| format!(r#"{{"ticker":"AAPL","action":"buy","order_type":"limit","price":"190",{extra}}}"#);
    for (term, want) in [("GOOD_FOR_DAY", "day"), ("GOOD_UNTIL_CANCEL", "gtc"), ("FILL_OR_KILL", "fok")] {
        let o = e.dry_run(TOKEN.as_bytes(), limit(&format!(r#""orderTerm":"{term}""#)).as_bytes(), None, T0);
        assert_eq!(o.decision, Decision::Processed, "{term}: {}", o.to_json());
        assert_eq!(o.orders[0].order.duration.as_str(), want, "{term}");
    }
    for (extra, said) in [
        (r#""orderTerm":"IMMEDIATE_OR_CANCEL""#, "orderTerm"),
        (r#""orderTerm":"GOOD_FOR_DAY","duration":"gtc""#, "disagree"),
        (r#""session":"SEAMLESS""#, "extended-hours"),
        (r#""session":"am""#, "extended-hours"),
        (r#""marketSession":"EXTENDED""#, "extended-hours"),
        (r#""marketSession":"OVERNIGHT""#, "marketSession"),
        (r#""outsideRth":true"#, "extended-hours"),
        (r#""outside_rth":"maybe""#, "true or false"),
    ] {
        let o = e.dry_run(TOKEN.as_bytes(), limit(extra).as_bytes(), None, T0);
        assert_ne!(o.decision, Decision::Processed, "{extra}: {}", o.to_json());
        assert!(o.reason.as_deref().is_some_and(|r| r.contains(said)), "{extra}: {:?}", o.reason);
    }
    // The regular session's words, and a sender's own `session` (a session's name), change nothing.
    for extra in [
        r#""session":"NORMAL""#,
        r#""marketSession":"REGULAR""#,
        r#""outsideRth":false"#,
        r#""session":"London""#,
        r#""orderTerm":"GOOD_UNTIL_CANCEL","duration":"gtc""#,
    ] {
        let o = e.dry_run(TOKEN.as_bytes(), limit(extra).as_bytes(), None, T0);
        assert_eq!(o.decision, Decision::Processed, "{extra}: {}", o.to_json());
        assert_eq!(o.orders[0].order.duration.as_str(), "gtc", "{extra}");
    }
}

/// Spec, Processing rule 9: a crypto pair may be sent in either notation and trades the
/// same pair.
#[test]
fn crypto_pairs_in_either_notation_trade_the_same_pair() {
    let mut crypto = snapshot();
    crypto["asset_class"] = json!("crypto");
    crypto["allowed_instruments"] = json!(["BTCUSD"]);
    crypto["bots"] =
        json!([{"id": "c", "broker": "coinbase", "account_id": "x", "sizing": {"fixed_quantity": "0.01"}}]);
    crypto["market"] = json!({"quotes": {"BTCUSD": {"bid": "40000", "ask": "40001"}}});
    let e = engine_with(crypto);
    let mut bodies = Vec::new();
    for (i, t) in ["BTCUSD", "BTC/USD", "BTC-USD"].iter().enumerate() {
        let o = post(&e, &format!(r#"{{"ticker":"{t}","action":"buy"}}"#), T0 + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{t}: {}", o.to_json());
        bodies.push(
            serde_json::to_string(&o.orders[0].request.body).unwrap().replace(&*o.orders[0].client_order_id, "ID"),
        );
    }
    assert!(bodies.iter().all(|b| *b == bodies[0]), "{bodies:?}");
}

/// The spec: `instrument` / `ticker` / `symbol` are interchangeable, and for crypto "either form
/// may be sent" (`BTCUSD`, `BTC/USD`, `BTC-USD` name one pair, README). A `pair` beside a `ticker`
/// in two spellings of one pair agreed, and `NASDAQ:AAPL` beside `aapl` was one; but `ticker`
/// beside `symbol` (or `instrument`) naming the same pair in two spellings was refused as a
/// disagreement, so a template sending TradingView's `{{ticker}}` (BTCUSD) beside the broker's
/// spelling (BTC-USD) never traded.
#[test]
fn two_spellings_of_one_crypto_pair_under_ticker_and_symbol_agree() {
    let mut snap = snapshot();
    snap["asset_class"] = json!("crypto");
    snap["duration"] = json!("gtc");
    snap["allowed_instruments"] = json!(["BTC/USD"]);
    snap["bots"] = json!([{"id": "cb", "broker": "coinbase", "account_id": "x", "sizing": {"fixed_quantity": "0.01"}}]);
    snap["market"] = json!({"quotes": {"BTC/USD": {"bid": "40000", "ask": "40010"}}});
    let e = engine_with(snap);
    // `pair` beside `ticker`: agreed.
    let o = post(&e, r#"{"ticker":"BTCUSD","pair":"BTC-USD","action":"buy"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    // `symbol` beside `ticker`, the same pair: was refused.
    let o = post(&e, r#"{"ticker":"BTCUSD","symbol":"BTC-USD","action":"buy"}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "one pair in two spellings refused: {}", o.to_json());
    // Only a pair is read in its parts: `BRK.B` and `BRKB` are two tickers, however alike.
    let o = post(&e, r#"{"ticker":"BRK.B","symbol":"BRKB","action":"buy"}"#, T0 + 2);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.reason.as_deref().is_some_and(|r| r.contains("disagree")), "{}", o.to_json());
}

#[test]
fn rejected_outcomes_keep_their_key_and_errors_release_it() {
    let e = engine();
    let body = r#"{"ticker":"NFLX","action":"buy"}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Rejected);
    assert_eq!(post(&e, body, T0 + 1).decision, Decision::Duplicate);

    // A limit order with no quote for the limit target is a 500, which releases the key.
    let mut snap = snapshot();
    snap["limit_target"] = json!("mid");
    snap["allowed_instruments"] = json!(["*"]);
    let e = engine_with(snap);
    let body = r#"{"ticker":"NVDA","action":"buy","order_type":"market"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.http_status, 500, "{}", o.to_json());
    let err = response(&o)["error"].as_str().unwrap().to_string();
    assert!(err.contains("NVDA"), "the cause names the instrument: {err}");
    assert!(o.logs.iter().any(|l| l.level == Level::Error));
    assert_eq!(post(&e, body, T0 + 1).http_status, 500, "retried, not a duplicate");
}

fn reason(o: &strategy_webhook::Outcome) -> String {
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    let r = response(o);
    assert_eq!(r["status"], "rejected");
    assert!(o.logs.iter().any(|l| l.level == Level::Warn), "a rejection logs at WARN");
    r["reason"].as_str().unwrap().to_string()
}

#[test]
fn rejections_name_their_reason() {
    let e = engine();
    let cases = [
        (r#"{"ticker":"NFLX","action":"buy"}"#, "not in this strategy's allowed instruments"),
        (r#"{"ticker":"AAPL","action":"OPEN","direction":"short"}"#, "short trades are disabled"),
        (r#"{"ticker":"TSLA","action":"sell"}"#, "nothing to close"),
        (r#"{"ticker":"TSLA","action":"CLOSE","direction":"LONG"}"#, "nothing to close"),
        (
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":1}"#,
            "no working LONG order in AAPL to modify",
        ),
        (r#"{"ticker":"AAPL","action":"CANCEL","direction":"LONG"}"#, "no working LONG entry order in AAPL to cancel"),
        (r#"{"ticker":"AAPL","action":"buy","order_type":"limit"}"#, "order_type limit requires a price"),
        (r#"{"ticker":"{{ticker}}","action":"buy"}"#, "unresolved placeholder {{ticker}}"),
        (r#"{"ticker":"AAPL","action":"OPEN"}"#, "OPEN needs a direction"),
        (r#"{"ticker":"AAPL","action":"buy","direction":"short"}"#, "but the alert says SHORT"),
        (r#"[1,2,3]"#, "not an object"),
        (r#"{"ticker":"AAPL"}"#, "no action"),
        (r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG"}"#, "no working LONG order"),
        (r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG"}"#, "MODIFY needs a new price"),
    ];
    for (i, (body, want)) in cases.iter().enumerate() {
        let o = post(&e, body, T0 + i as i64);
        let r = reason(&o);
        assert!(r.contains(want), "{body}: {r:?} should contain {want:?}");
    }
}

/// A CANCEL or MODIFY naming an `order_id` (no direction) that matched no order it may act on was refused with
/// "no working with id x1 order in AAPL to cancel": the words out of order, where the directed form reads "no working
/// LONG entry order with id x1 in AAPL to cancel". And x1 was the bot's working exit: a CANCEL pulls entries only, so
/// the trader was told no such order was working while it was. A MODIFY naming its direction, target and id read
/// "no working LONG exit with id 42 order in AAPL to modify" the same way.
#[test]
fn a_refusal_naming_an_order_id_reads_as_a_sentence() {
    let mut s = snapshot();
    s["bots"][0]["working_orders"] = json!([
        {"id": "x1", "instrument": "AAPL", "direction": "long", "intent": "exit", "order_type": "limit",
         "price": "200", "quantity": "10", "state": "open"}
    ]);
    let e = engine_with(s);
    let o = post(&e, r#"{"ticker":"AAPL","action":"CANCEL","order_id":"x1"}"#, T0);
    let r = reason(&o);
    assert!(r.starts_with("no working order with id x1 in AAPL to cancel"), "{r:?}");
    assert!(r.contains("x1 is an exit") && r.contains("send CLOSE"), "{r:?}");
    let o = post(&e, r#"{"ticker":"AAPL","action":"CANCEL","order_id":"nope"}"#, T0 + 1);
    assert_eq!(reason(&o), "no working order with id nope in AAPL to cancel");
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","order_id":"nope","price":191}"#, T0 + 2);
    assert_eq!(reason(&o), "no working order with id nope in AAPL to modify");
    let body =
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","target":"exit","order_id":"nope","price":191}"#;
    assert_eq!(reason(&post(&e, body, T0 + 3)), "no working LONG exit order with id nope in AAPL to modify");
}

#[test]
fn limit_strategy_with_alert_price_target_needs_a_price() {
    let mut snap = snapshot();
    snap["order_type"] = json!("limit");
    let e = engine_with(snap.clone());
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0));
    assert!(r.contains("Limit Target: Alert Price"), "{r}");
    // Exits are limit orders too: a CLOSE without a price is refused the same way.
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG"}"#, T0 + 1));
    assert!(r.contains("Limit Target: Alert Price"), "{r}");
    // With a mid target, the quote sets the price instead (190.125, a buy rounds down).
    snap["limit_target"] = json!("mid");
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders[0].order.limit_price, strategy_webhook::decimal::parse("190.12"));
    // Processing rule 7 holds whatever the target: an alert's own `order_type: limit` needs its price.
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"buy","order_type":"limit"}"#, T0 + 1));
    assert_eq!(r, "order_type limit requires a price");
}

#[test]
fn close_takes_the_open_positions_direction() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.alerts[0].direction, Some(strategy_webhook::alert::Direction::Long));
    assert_eq!(o.orders.len(), 1, "only the bot holding the position closes");
    assert_eq!(&*o.orders[0].bot, "alpaca-main");
}

#[test]
fn reversal_without_a_position_still_opens() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    let e = engine_with(snap);
    let body = r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.alerts.len(), 1);
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"OPEN","instrument":"TSLA","direction":"SHORT","price":null}"#);
    assert!(o.logs.iter().any(|l| l.level == Level::Warn && l.message.contains("nothing to close")));
}

/// An action or a direction sent beside a position transition that says otherwise is refused, naming both: the
/// transition used to win silently, so a CANCEL sent with the last fill's positions (flat → long) became two
/// market buys and left the working entry to fill too, a MODIFY with long → flat sold the whole position, and an
/// OPEN SHORT with flat → long bought. Actions that agree with their transition go through as before.
#[test]
fn an_action_beside_a_transition_that_says_otherwise_is_refused() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    let e = engine_with(snap);
    let disagree = [
        r#"{"ticker":"MSFT","action":"CANCEL","direction":"LONG","prevMarketPosition":"flat","marketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","price":1,"prevMarketPosition":"long","marketPosition":"flat"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"SHORT","prevMarketPosition":"flat","marketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"SHORT","prevMarketPosition":"long","marketPosition":"flat"}"#,
        r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"long","marketPosition":"flat"}"#,
        r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"flat","marketPosition":"long"}"#,
        r#"{"ticker":"TSLA","direction":"short","prevMarketPosition":"flat","marketPosition":"long"}"#,
    ];
    for (i, body) in disagree.iter().enumerate() {
        let o = post(&e, body, T0 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("prevMarketPosition") && reason.contains("disagree"), "{body}: {reason}");
    }
    let agree = [
        (
            r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","prevMarketPosition":"flat","marketPosition":"long"}"#,
            "open_long",
        ),
        (
            r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","prevMarketPosition":"long","marketPosition":"flat"}"#,
            "close_long",
        ),
        (r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"long","marketPosition":"flat"}"#, "close_long"),
        (
            r#"{"ticker":"TSLA","action":"buy","direction":"long","prevMarketPosition":"flat","marketPosition":"long"}"#,
            "open_long",
        ),
        (
            r#"{"ticker":"AAPL","action":"OPEN","direction":"SHORT","prevMarketPosition":"long","marketPosition":"short"}"#,
            "close_long",
        ),
    ];
    for (i, (body, first)) in agree.iter().enumerate() {
        let o = post(&e, body, T0 + 100_000 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert_eq!(o.orders[0].order.intent.as_str(), *first, "{body}: {}", o.to_json());
    }
}

/// A strategy trading both sides, one bot short AAPL and one bot flat.
fn short_held() -> Value {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    snap
}

/// `prevMarketPosition` says the sender's strategy was SHORT before this fill; a `buy` from a
/// short position covers it (CLOSE SHORT, with `marketPosition: flat` the service does exactly
/// that). Sent without `marketPosition`, the position before was dropped and the `buy` was read as
/// the rule's OPEN LONG: the bot that was flat bought a new long position and the short stayed
/// open. The alert's own context contradicts the entry, so it must not be traded as one.
#[test]
fn a_buy_from_a_short_prev_position_is_not_a_new_long() {
    let e = engine_with(short_held());
    // With both ends the same buy is read right: it covers the short.
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"short","marketPosition":"flat"}"#, T0);
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"CLOSE","instrument":"AAPL","direction":"SHORT","price":null}"#);
    // With the position before alone, no long may be opened anywhere.
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"short"}"#, T0 + 1);
    let opens_long = o.orders.iter().any(|r| r.order.intent.as_str() == "open_long");
    assert!(!opens_long, "a buy from a short position opened a new LONG: {}", o.to_json());
}

/// A canonical OPEN names its side, so beside `prevMarketPosition` of the other side it is a reversal's entry the
/// sender states outright (its CLOSE sent before it): it trades as an OPEN does, and a bot still holding the other
/// side refuses it, as it refuses any OPEN there. Only the rule words (`buy`, `sell`) leave the fill's meaning open.
#[test]
fn an_open_long_beside_a_short_prev_position_is_an_open() {
    let e = engine_with(short_held());
    let o = post(&e, r#"{"ticker":"AAPL","action":"OPEN","direction":"LONG","prevMarketPosition":"short"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.orders.iter().all(|r| r.order.intent.as_str() == "open_long"), "{}", o.to_json());
    assert_eq!(o.orders.len(), 1, "the bot holding the short refuses the entry: {}", o.to_json());
    assert!(o.logs.iter().any(|l| l.message.contains("holds") && l.message.contains("SHORT")), "{}", o.to_json());
}

/// `prevMarketPosition` alone was never compared with the action: a sell from a long may close it or reverse it,
/// and was traded as an entry; a CLOSE of a side not held before closed a
/// position the sender's strategy never had. The first are refused asking for `marketPosition` where the rules make
/// the word an entry of the other side (where they make it a close, it closes either way), the second as
/// disagreeing; what agrees with the position before trades as it did.
#[test]
fn the_position_before_alone_must_agree_with_the_action() {
    let mut snap = short_held();
    snap["bots"][1]["positions"] = json!([{"instrument": "TSLA", "direction": "long", "quantity": "10"}]);
    let mut both_ways = snap.clone();
    both_ways["rules"]["sell"] = json!("open_short");
    let e = engine_with(snap);
    let reversing = engine_with(both_ways);
    let ambiguous = [
        (&e, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"short"}"#),
        (&reversing, r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"long"}"#),
    ];
    for (i, (e, body)) in ambiguous.iter().enumerate() {
        let o = post(e, body, T0 + i as i64 * 1_000);
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
        let r = reason(&o);
        assert!(r.contains("prevMarketPosition") && r.contains("send `marketPosition` too"), "{body}: {r}");
    }
    let contradicting = [
        r#"{"ticker":"TSLA","action":"CLOSE","direction":"SHORT","prevMarketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"SHORT","prevMarketPosition":"flat"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","prevMarketPosition":"short"}"#,
        r#"{"ticker":"TSLA","action":"CLOSE","direction":"LONG","prevMarketPosition":"flat"}"#,
    ];
    for (i, body) in contradicting.iter().enumerate() {
        let o = post(&e, body, T0 + 100_000 + i as i64 * 1_000);
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
        let r = reason(&o);
        assert!(r.contains("`prevMarketPosition` disagree"), "{body}: {r}");
    }
    let agree = [
        (r#"{"ticker":"MSFT","action":"buy","prevMarketPosition":"flat"}"#, "open_long"),
        (r#"{"ticker":"TSLA","action":"buy","prevMarketPosition":"long"}"#, "open_long"),
        (r#"{"ticker":"MSFT","action":"OPEN","direction":"LONG","prevMarketPosition":"flat"}"#, "open_long"),
        (r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","prevMarketPosition":"long"}"#, "open_long"),
        (r#"{"ticker":"TSLA","action":"CLOSE","direction":"LONG","prevMarketPosition":"long"}"#, "close_long"),
        // `sell` is `close_long` here: from a long it closes it, reversed or not.
        (r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"long"}"#, "close_long"),
    ];
    for (i, (body, intent)) in agree.iter().enumerate() {
        let o = post(&e, body, T0 + 200_000 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert_eq!(o.orders[0].order.intent.as_str(), *intent, "{body}: {}", o.to_json());
    }
}

/// A placeholder left in a field the alert does not read (a size on an entry or an exit, an order id on an
/// entry) refused the whole alert, and a message id that is a GUID in braces was taken for a placeholder: the exit
/// was refused, and the sender's resends under the same id were duplicates for five minutes. Fields the alert
/// reads are still checked.
#[test]
fn braces_in_a_field_the_alert_does_not_read_do_not_refuse_it() {
    let e = engine();
    let guid = r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","metadata":{"message_id":"{3F2504E0-4F89-11D3-9A0C-0305E82C3301}"}}"#;
    let o = post(&e, guid, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders[0].order.intent.as_str(), "close_long");
    // The GUID is the dedup key: the same id in another body is the same alert.
    let again = guid.replace("\"CLOSE\"", "\"close\"");
    assert_eq!(post(&e, &again, T0 + 1_000).decision, Decision::Duplicate);
    for (i, body) in [
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","quantity":"{{strategy.order.contracts}}"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","notional":"{{plot_0}}","order_id":"{{strategy.order.id}}"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 10_000 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert_eq!(o.orders[0].order.intent.as_str(), "open_long", "{body}");
    }
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":"{{strategy.order.contracts}}"}"#,
        r#"{"ticker":"MSFT","action":"CANCEL","direction":"LONG","order_id":"{{strategy.order.id}}"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","metadata":{"message_id":"{id}"}}"#,
        r#"{"ticker":"TSLA","action":"{{strategy.order.action}}","quantity":"{{x}}"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 20_000 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().unwrap_or_default().contains("placeholder"), "{body}: {:?}", o.reason);
    }
}

/// TradersPost's `cancel: true` on an entry ("cancel any open orders for the ticker first") was dropped: the new
/// entry went out beside the limit entry still working, and both could fill, doubling the position. The working
/// entry is cancelled first, and the new one waits for that cancel.
#[test]
fn cancel_true_on_an_entry_cancels_the_working_entry_first() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"MSFT","action":"buy","cancel":true}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let cancel = o.orders.iter().position(|r| r.kind == RequestKind::Cancel).expect("the working entry is cancelled");
    let place = o.orders.iter().position(|r| r.kind == RequestKind::Place && r.bot == o.orders[cancel].bot);
    let place = place.expect("and the entry placed");
    assert!(cancel < place, "{}", o.to_json());
    assert!(o.orders[place].after.is_some(), "the new entry waits for the cancel: {}", o.to_json());
    // The cancel pulls the ticker's working entries, whatever order the alert names (TradingView's
    // `{{strategy.order.id}}` is a Pine order name): taken as the order to cancel, it found none, and the entry
    // went out beside the working one.
    for (i, named) in ["{{strategy.order.id}}", "Long entry"].iter().enumerate() {
        let body = format!(r#"{{"ticker":"MSFT","action":"buy","cancel":true,"order_id":"{named}"}}"#);
        let o = post(&e, &body, T0 + 1_000 * (i as i64 + 1));
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        assert!(o.orders.iter().any(|r| r.kind == RequestKind::Cancel), "{named}: {}", o.to_json());
    }
}

/// `cancel: true` on an option entry took the entry's contracts as naming what to cancel, though they describe
/// the position to open: a working entry of the ticker on another strike stayed working beside the new one,
/// doubling the exposure should both fill. It is pulled, as an equity entry's is.
#[test]
fn cancel_true_on_an_option_entry_cancels_the_tickers_entry_on_another_contract() {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["*"]);
    snap["options"] = json!({"selection": "external"});
    snap["bots"] = json!([snap["bots"][0].clone()]);
    snap["bots"][0]["positions"] = json!([]);
    snap["bots"][0]["working_orders"] = json!([
        {"id": "W-450", "instrument": "SPY", "direction": "long", "intent": "entry", "order_type": "limit",
         "price": "2.50", "quantity": "10", "state": "open",
         "legs": [{"symbol": "SPY240119C00450000", "action": "buy_to_open"}]}
    ]);
    let e = engine_with(snap);
    let body = json!({"ticker": "SPY240119C455", "action": "buy", "cancel": true, "order_type": "market"});
    let o = post(&e, &body.to_string(), T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let cancel = o.orders.iter().find(|r| r.kind == RequestKind::Cancel).expect("W-450 is cancelled");
    assert_eq!(cancel.order_id.as_deref(), Some("W-450"));
    let place = o.orders.iter().find(|r| r.kind == RequestKind::Place).expect("and the entry placed");
    assert!(place.after.is_some(), "the new entry waits for the cancel: {}", o.to_json());
}

/// `cancel: true` on an entry into a disabled direction was answered processed with only the cancel sent: the
/// entry's refusal was skipped as a reversal's would be, though nothing was closed. It is the answer now.
#[test]
fn cancel_true_on_an_entry_into_a_disabled_direction_is_rejected() {
    let mut snap = snapshot();
    snap["rules"]["sell"] = json!("open_short");
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"MSFT","action":"sell","cancel":true}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "short trades are disabled: {}", o.to_json());
    assert!(o.orders.is_empty(), "{}", o.to_json());
}

/// `cancel: true` on an entry with entries working on both sides (a buy limit below and a sell-short limit above,
/// as a breakout bracket leaves them): only the new entry's side was pulled, and the other side's entry stayed
/// working, free to fill later into the position the sender meant to clear (TradersPost cancels "all open orders
/// for the specified ticker"). Both are cancelled, and the entry waits for the last cancel.
#[test]
fn cancel_true_on_an_entry_cancels_the_working_entries_of_both_sides() {
    let snap = json!({"id":"s1","token_hash":TOKEN,"status":"active","asset_class":"equity","order_type":"market",
      "allowed_instruments":["AAPL"],"directions":{"long":true,"short":true},
      "rules":{"buy":"open_long","sell":"open_short"},
      "bots":[{"id":"A","broker":"alpaca","account_id":"PA1","sizing":{"fixed_quantity":"10"},
        "working_orders":[
          {"id":"en-l","instrument":"AAPL","direction":"long","intent":"entry","order_type":"limit","price":"185",
           "quantity":"10","state":"open"},
          {"id":"en-s","instrument":"AAPL","direction":"short","intent":"entry","order_type":"limit","price":"195",
           "quantity":"10","state":"open"}]}],
      "market":{"quotes":{"AAPL":{"bid":"190.10","ask":"190.15"}}}});
    for (body, intent) in [
        (r#"{"ticker":"AAPL","action":"buy","cancel":true}"#, "open_long"),
        (r#"{"ticker":"AAPL","action":"sell","cancel":true}"#, "open_short"),
        // A direction sent with the entry names the side it opens, not the entries to pull.
        (r#"{"ticker":"AAPL","action":"add","sentiment":"bullish","cancel":true}"#, "open_long"),
    ] {
        let o = post(&engine_with(snap.clone()), body, T0);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        let mut pulled: Vec<&str> =
            o.orders.iter().filter(|r| r.kind == RequestKind::Cancel).filter_map(|r| r.order_id.as_deref()).collect();
        pulled.sort_unstable();
        assert_eq!(pulled, ["en-l", "en-s"], "{body}: {}", o.to_json());
        let [first, second, place] = o.orders.as_slice() else {
            panic!("{body}: two cancels and the entry: {}", o.to_json())
        };
        assert_eq!((second.kind, place.kind), (RequestKind::Cancel, RequestKind::Place), "{body}");
        assert_eq!(place.order.intent.as_str(), intent, "{body}");
        // The cancels go one after another and the entry after the last, so that should either entry have filled
        // (its cancel refused), the new one is not sent.
        assert_eq!(second.after, Some(first.client_order_id), "{body}: {}", o.to_json());
        assert_eq!(place.after, Some(second.client_order_id), "{body}: {}", o.to_json());
    }
}

/// `cancel: true` on an entry with entries working on both sides: the entry waits for the last of the chained
/// cancels, and stands in (at the server) only for an entry of its own side pulled by that cancel. Waiting for the
/// other side's, it stood in for nothing, and a CANCEL of its side decided meanwhile left it working. Whatever the
/// book's order, the entry's own side is pulled last.
#[test]
fn cancel_true_on_an_entry_pulls_the_entrys_own_side_last() {
    let long = json!({"id":"en-l","instrument":"AAPL","direction":"long","intent":"entry","order_type":"limit",
                      "price":"185","quantity":"10","state":"open"});
    let short = json!({"id":"en-s","instrument":"AAPL","direction":"short","intent":"entry","order_type":"limit",
                       "price":"195","quantity":"10","state":"open"});
    for book in [json!([long, short]), json!([short, long])] {
        let snap = json!({"id":"s1","token_hash":TOKEN,"status":"active","asset_class":"equity",
          "order_type":"market","allowed_instruments":["AAPL"],"directions":{"long":true,"short":true},
          "rules":{"buy":"open_long","sell":"open_short"},
          "bots":[{"id":"A","broker":"alpaca","account_id":"PA1","sizing":{"fixed_quantity":"10"},
            "working_orders":book}],
          "market":{"quotes":{"AAPL":{"bid":"190.10","ask":"190.15"}}}});
        for (body, own, other) in [
            (r#"{"ticker":"AAPL","action":"buy","cancel":true}"#, "en-l", "en-s"),
            (r#"{"ticker":"AAPL","action":"sell","cancel":true}"#, "en-s", "en-l"),
            (r#"{"ticker":"AAPL","action":"OPEN","direction":"short","cancel":true}"#, "en-s", "en-l"),
        ] {
            let o = post(&engine_with(snap.clone()), body, T0);
            assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
            let pulled: Vec<&str> = o.orders.iter().filter_map(|r| r.order_id.as_deref()).collect();
            assert_eq!(pulled, [other, own], "{body}, book {book}: {}", o.to_json());
            let [_, last, place] = o.orders.as_slice() else { panic!("{body}: {}", o.to_json()) };
            assert_eq!(place.after, Some(last.client_order_id), "{body}: {}", o.to_json());
        }
    }
}

/// A reversal's new side goes out at a bot only with its close: where the bot's broker
/// refuses the close (here Schwab and a fractional position, whole shares only), opening
/// the other side anyway would leave the bot holding both, so both steps are refused for
/// that bot and the others reverse as asked.
#[test]
fn a_reversal_whose_close_a_broker_refuses_does_not_open_the_other_side() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][1]["positions"] = json!([{"instrument": "AAPL", "direction": "long", "quantity": "10.5"}]);
    let e = engine_with(snap);
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let orders: Vec<_> = o.orders.iter().map(|r| (&*r.bot, r.order.intent.as_str())).collect();
    assert_eq!(orders, [("alpaca-main", "close_long"), ("alpaca-main", "open_short")], "{}", o.to_json());
    assert!(
        o.logs
            .iter()
            .any(|l| l.level == Level::Warn && l.message.contains("bot schwab-main") && l.message.contains("close")),
        "{:?}",
        o.logs
    );
}

/// An OPEN into the side opposite a position a bot holds is refused for that bot: the brokers keep one net
/// position per instrument, so Alpaca's `sell` of 10 against a long of 10 closed the long, and the answer said
/// a short was opened while the account ended flat. Bots holding nothing open as asked; a reversal (the close of
/// the held side first) is unchanged.
#[test]
fn an_open_into_the_other_side_of_a_held_position_is_refused_for_that_bot() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["rules"] = json!({"buy": "open_long", "sell": "open_short"});
    let e = engine_with(snap.clone());
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"sell"}"#,
        r#"{"ticker":"AAPL","action":"OPEN","direction":"SHORT"}"#,
        r#"{"ticker":"AAPL","action":"sell","marketPosition":"short"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 1000 * i as i64);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        let orders: Vec<_> = o.orders.iter().map(|r| (&*r.bot, r.order.intent.as_str())).collect();
        assert_eq!(orders, [("schwab-main", "open_short")], "{body}: {}", o.to_json());
        assert!(
            o.logs.iter().any(|l| l.level == Level::Warn
                && l.message.contains("bot alpaca-main")
                && l.message.contains("holds 10 AAPL LONG")
                && l.message.contains("send CLOSE LONG first")),
            "{body}: {:?}",
            o.logs
        );
    }
    // Where every bot holds the other side, nothing goes out: 200 rejected with the reason.
    snap["bots"][1]["positions"] = json!([{"instrument": "AAPL", "direction": "long", "quantity": "5"}]);
    let e = engine_with(snap.clone());
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"sell"}"#, T0));
    assert!(r.contains("bot alpaca-main") && r.contains("bot schwab-main: it holds 5 AAPL LONG"), "{r}");
    // The same side adds to the position, and the reversal closes first, as before.
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0 + 1);
    assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 2), "{}", o.to_json());
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0 + 2);
    let orders: Vec<_> = o.orders.iter().map(|r| (&*r.bot, r.order.intent.as_str(), r.after.is_some())).collect();
    assert_eq!(
        orders,
        [
            ("alpaca-main", "close_long", false),
            ("schwab-main", "close_long", false),
            ("alpaca-main", "open_short", true),
            ("schwab-main", "open_short", true)
        ],
        "{}",
        o.to_json()
    );
}

/// A reversal into a disabled direction closes the position it leaves and skips the entry
/// with a WARN: a disabled direction refuses entries only, so a position is never stranded
/// (docs/strategy.md, `directions`). Before, the whole delivery was rejected and the long
/// position stayed open after the sender's strategy had left it.
#[test]
fn a_reversal_into_a_disabled_direction_still_closes() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0);
    assert_eq!((o.http_status, &*o.response), (200, r#"{"status":"processed"}"#), "{}", o.to_json());
    assert_eq!(o.alerts.len(), 1);
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"CLOSE","instrument":"AAPL","direction":"LONG","price":null}"#);
    assert_eq!(o.orders.len(), 1, "only the bot holding the position closes");
    assert_eq!((&*o.orders[0].bot, o.orders[0].order.intent.as_str()), ("alpaca-main", "close_long"));
    assert!(
        o.logs
            .iter()
            .any(|l| l.level == Level::Warn && l.message == "skipped: short trades are disabled for this strategy"),
        "{:?}",
        o.logs
    );
    // An exit in a disabled direction goes through too: the switch refuses entries only.
    let mut snap = snapshot();
    snap["directions"] = json!({"long": false, "short": false});
    let off = engine_with(snap);
    let o = post(&off, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG"}"#, T0);
    assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 1), "{}", o.to_json());
    assert_eq!(
        reason(&post(&off, r#"{"ticker":"AAPL","action":"buy"}"#, T0 + 1)),
        "long trades are disabled for this strategy"
    );
    // Nothing to close and the entry disabled: rejected, naming both.
    let o = post(&e, &body.replace("AAPL", "TSLA"), T0 + 1);
    assert_eq!(
        o.reason.as_deref(),
        Some("no open LONG position in TSLA on any bot, so there is nothing to close; short trades are disabled for this strategy")
    );
    assert!(o.orders.is_empty());
}

/// A disabled direction refuses entries only: a working order in it can still be modified
/// or cancelled (docs/strategy.md), so nothing is left working that the sender wants gone.
#[test]
fn modify_and_cancel_go_through_in_a_disabled_direction() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": false, "short": false});
    let off = engine_with(snap);
    let o = post(&off, r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","price":"411.00"}"#, T0);
    assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 1), "{}", o.to_json());
    assert_eq!(o.orders[0].order_id.as_deref(), Some("61e69015-8549-4bfd-b9c3-01e75843f47d"));
    let o = post(&off, r#"{"ticker":"MSFT","action":"CANCEL"}"#, T0 + 1);
    assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 1), "{}", o.to_json());
    assert_eq!(o.orders[0].request.method.as_str(), "DELETE");
}

#[test]
fn modify_and_cancel_target_working_orders() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","price":"411.00"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1);
    assert_eq!(o.orders[0].order_id.as_deref(), Some("61e69015-8549-4bfd-b9c3-01e75843f47d"));
    assert_eq!(o.orders[0].keeps_order_id, Some(false), "Alpaca cancels and replaces");
    let o = post(&e, r#"{"ticker":"MSFT","action":"CANCEL"}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders[0].request.method.as_str(), "DELETE");
    // Only pending and open orders are working: a filled one is a position, which MODIFY
    // and CANCEL leave alone.
    let mut snap = snapshot();
    snap["bots"][0]["working_orders"][0]["state"] = json!("filled");
    let e = engine_with(snap);
    for (i, body) in [
        r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","price":"411.00"}"#,
        r#"{"ticker":"MSFT","action":"CANCEL","direction":"LONG"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + i as i64);
        assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
        assert!(o.orders.is_empty());
    }
}

/// Issue 12 §2: with an entry and an exit working on one side, MODIFY names them and asks
/// which; `target` (JSON or text) or `order_id` chooses; a Tradier re-size is a cancel and
/// a new order in the Outcome.
#[test]
fn modify_acts_on_one_working_order() {
    let mut snap = snapshot();
    let order = |id: &str, intent: &str, price: &str| {
        json!({"id": id, "instrument": "AAPL", "direction": "long", "intent": intent, "order_type": "limit",
               "price": price, "quantity": "10", "state": "open"})
    };
    snap["bots"] = json!([{"id": "tradier-main", "broker": "tradier", "account_id": "VA000001",
        "sizing": {"fixed_quantity": "10"}, "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "10"}],
        "working_orders": [order("185001", "entry", "185"), order("200001", "exit", "200")]}]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":186}"#, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert!(o.orders.is_empty());
    assert_eq!(
        o.reason.as_deref(),
        Some(
            "bot tradier-main: MODIFY LONG AAPL is ambiguous: 2 working orders — buy limit 185 (entry, id 185001), \
             sell limit 200 (exit, id 200001); send \"target\": \"entry\" or \"exit\", or \"order_id\""
        )
    );
    let o = e.deliver(
        TOKEN.as_bytes(),
        b"action=MODIFY;ticker=AAPL;direction=LONG;price=186;target=entry",
        Some("text/plain"),
        T0 + 1,
    );
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1);
    assert_eq!(o.orders[0].order_id.as_deref(), Some("185001"));
    assert_eq!(o.alerts[0].target, Some(strategy_webhook::model::OrderIntent::Entry));
    // A new size at Tradier: the old order is cancelled and a new one placed.
    let o =
        post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","order_id":"200001","quantity":4}"#, T0 + 2);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let kinds: Vec<_> =
        o.orders.iter().map(|r| (r.kind.as_str(), r.order_id.as_deref(), r.order.quantity.to_string())).collect();
    assert_eq!(kinds, [("cancel", Some("200001"), "10".to_string()), ("place", None, "4".to_string())]);
    assert_ne!(o.orders[0].client_order_id, o.orders[1].client_order_id);
    // A target with no such order is a rejection naming it.
    let mut snap = snapshot();
    snap["bots"][0]["working_orders"][0]["intent"] = json!("entry");
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","price":411,"target":"exit"}"#, T0);
    assert_eq!(o.reason.as_deref(), Some("no working LONG exit order in MSFT to modify"));
}

/// A MODIFY naming both a new `quantity` and a new `notional` that disagree (5 shares vs
/// $820 at 410.50, i.e. 1 share): which size the sender meant cannot be told, and every other
/// pair of fields that disagree is refused. The service silently re-sized to the quantity.
#[test]
fn a_modify_with_a_quantity_and_a_notional_that_disagree_is_refused() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","quantity":5,"notional":820}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "MODIFY re-sized to one of two disagreeing sizes: {}", o.to_json());
    assert!(o.orders.is_empty());
    assert_eq!(reason(&o), "`quantity` and `notional` disagree (\"5\" vs \"820\")");
}

/// MODIFY never opens a new trade: an exit re-sized above the position it closes would,
/// once filled past the position, open the other side. It is refused for that bot; an exit
/// made smaller, or as large as the position, goes out.
#[test]
fn modify_never_grows_an_exit_past_the_position() {
    let mut snap = snapshot();
    let bot = |id: &str, broker: &str| {
        json!({"id": id, "broker": broker, "account_id": "VA000001", "sizing": {"fixed_quantity": "10"},
               "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "10"}],
               "working_orders": [{"id": "200001", "instrument": "AAPL", "direction": "long", "intent": "exit",
                                   "order_type": "limit", "price": "200", "quantity": "6", "state": "open"}]})
    };
    snap["bots"] = json!([bot("alpaca-main", "alpaca"), bot("tradier-main", "tradier")]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":25}"#, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert!(o.orders.is_empty(), "{}", o.to_json());
    assert!(o.reason.as_deref().unwrap_or_default().contains("holds 10"), "{:?}", o.reason);
    for (i, q) in ["10", "4"].into_iter().enumerate() {
        let body = format!(r#"{{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":{q}}}"#);
        let o = post(&e, &body, T0 + 1 + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        assert!(o.orders.iter().filter(|r| r.kind.as_str() != "cancel").all(|r| r.order.quantity.to_string() == q));
    }
}

/// CLOSE closes the whole position, and never more: a resting exit of that position is
/// cancelled first and the close waits for that cancel (`after`). Sent beside it, both
/// could fill and leave the bot holding the other side, a trade nobody sent. In a reversal
/// the new side waits in turn for the close. Working limit entries are CANCEL's business (a market entry still
/// working is pulled: below).
#[test]
fn close_cancels_a_working_exit_before_closing() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    let order = |id: &str, intent: &str, price: &str, quantity: &str| {
        json!({"id": id, "instrument": "AAPL", "direction": "long", "intent": intent, "order_type": "limit",
               "price": price, "quantity": quantity, "state": "open"})
    };
    let bot = |id: &str, broker: &str| {
        json!({"id": id, "broker": broker, "account_id": "VA000001", "sizing": {"fixed_quantity": "10"},
               "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "10"}],
               "working_orders": [order("200001", "exit", "200", "6"), order("185001", "entry", "185", "5"),
                                  order("201001", "exit", "201", "4")]})
    };
    snap["bots"] = json!([bot("alpaca-main", "alpaca"), bot("tradier-main", "tradier")]);
    let e = engine_with(snap);
    let rows = |o: &strategy_webhook::Outcome| -> Vec<(String, String, String, Option<String>)> {
        o.orders
            .iter()
            .map(|r| {
                // `after` named by the position of the request it waits for.
                let after = r.after.as_ref().map(|a| {
                    let i = o.orders.iter().position(|p| &p.client_order_id == a).expect("waits for one of these");
                    assert_eq!(o.orders[i].bot, r.bot, "waits for its own bot's request");
                    i.to_string()
                });
                (
                    r.kind.as_str().to_string(),
                    r.order_id.clone().unwrap_or_default(),
                    r.order.quantity.to_string(),
                    after,
                )
            })
            .collect()
    };
    let row = |kind: &str, id: &str, q: &str, after: Option<usize>| {
        (kind.to_string(), id.to_string(), q.to_string(), after.map(|a| a.to_string()))
    };
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(
        rows(&o),
        [
            row("cancel", "200001", "6", None),
            row("cancel", "201001", "4", Some(0)),
            row("place", "", "10", Some(1)),
            row("cancel", "200001", "6", None),
            row("cancel", "201001", "4", Some(3)),
            row("place", "", "10", Some(4)),
        ],
        "{}",
        o.to_json()
    );
    assert!(o.orders.iter().filter(|r| r.kind.as_str() == "place").all(|r| r.order.intent.as_str() == "close_long"));
    let cids: std::collections::HashSet<_> = o.orders.iter().map(|r| &r.client_order_id).collect();
    assert_eq!(cids.len(), o.orders.len(), "each request its own client order id");
    // A reversal: the exits, then the close, then the new side, each waiting for the one before.
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    for bot in ["alpaca-main", "tradier-main"] {
        let mine: Vec<_> = o.orders.iter().filter(|r| &*r.bot == bot).collect();
        let steps: Vec<_> = mine.iter().map(|r| (r.kind.as_str(), r.order.intent.as_str())).collect();
        assert_eq!(
            steps,
            [("cancel", "close_long"), ("cancel", "close_long"), ("place", "close_long"), ("place", "open_short")],
            "{}",
            o.to_json()
        );
        assert_eq!(mine[0].after, None);
        for pair in mine.windows(2) {
            assert_eq!(pair[1].after.as_ref(), Some(&pair[0].client_order_id), "{}", o.to_json());
        }
    }
}

/// A one-bot AAPL strategy trading both sides, holding `positions` with `working` orders.
fn aapl_bot(positions: Value, working: Value) -> Engine {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"] = json!([{"id": "alpaca-main", "broker": "alpaca", "account_id": "PA0000000",
                           "sizing": {"fixed_quantity": "10"}, "positions": positions, "working_orders": working}]);
    engine_with(snap)
}

/// A working AAPL entry order.
fn aapl_entry(id: &str, direction: &str, order_type: &str, quantity: &str) -> Value {
    let mut o = json!({"id": id, "instrument": "AAPL", "direction": direction, "intent": "entry",
                       "order_type": order_type, "quantity": quantity, "state": "open"});
    if order_type == "limit" {
        o["price"] = json!("185");
    }
    o
}

const CLOSE_LONG_AAPL: &str = r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG"}"#;

/// A market entry still working at the broker (taken outside market hours, queued for the open) is the position the
/// sender's strategy holds: a CLOSE of its side and instrument pulls it. With no position on any bot the CLOSE is that
/// cancel alone. Rejected "nothing to close", the entry filled at the open, leaving a position the sender had closed.
#[test]
fn a_close_with_no_position_pulls_a_working_market_entry() {
    let e = aapl_bot(json!([]), json!([aapl_entry("m1", "long", "market", "10")]));
    let o = post(&e, CLOSE_LONG_AAPL, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(o.orders[0].kind, RequestKind::Cancel);
    assert_eq!(o.orders[0].order_id.as_deref(), Some("m1"));
    assert_eq!(o.orders[0].after, None);
}

/// Beside a position, the working market entry is cancelled first and the close of the position waits for that
/// cancel (`after`), as it does for the position's working exits: the close is of what is held, not of the entry too.
#[test]
fn a_close_pulls_a_working_market_entry_then_closes_the_position() {
    let e = aapl_bot(
        json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]),
        json!([aapl_entry("m1", "long", "market", "5")]),
    );
    let o = post(&e, CLOSE_LONG_AAPL, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 2, "{}", o.to_json());
    assert_eq!((o.orders[0].kind, o.orders[0].order_id.as_deref()), (RequestKind::Cancel, Some("m1")));
    assert_eq!(o.orders[1].kind, RequestKind::Place);
    assert_eq!(o.orders[1].order.intent.as_str(), "close_long");
    assert_eq!(o.orders[1].order.quantity.to_string(), "10");
    assert_eq!(o.orders[1].after.as_ref(), Some(&o.orders[0].client_order_id), "{}", o.to_json());
}

/// A limit entry rests until its price: CANCEL pulls it, a CLOSE does not. An entry of the other side is no part of
/// this side's position. With nothing held, the CLOSE is rejected as "nothing to close", as before.
#[test]
fn a_close_leaves_a_limit_entry_and_the_other_sides_market_entry() {
    let e = aapl_bot(json!([]), json!([aapl_entry("l1", "long", "limit", "10")]));
    let r = reason(&post(&e, CLOSE_LONG_AAPL, T0));
    assert!(r.contains("nothing to close"), "{r}");

    let e = aapl_bot(json!([]), json!([aapl_entry("s1", "short", "market", "10")]));
    let r = reason(&post(&e, CLOSE_LONG_AAPL, T0));
    assert!(r.contains("nothing to close"), "{r}");
    // Beside a long position it stays too: the close alone.
    let e = aapl_bot(
        json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]),
        json!([aapl_entry("s1", "short", "market", "10"), aapl_entry("l1", "long", "limit", "10")]),
    );
    let o = post(&e, CLOSE_LONG_AAPL, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(o.orders[0].kind, RequestKind::Place);
}

/// A reversal from a market entry still working: its cancel, then the new side, waiting for it. Sent beside it, the
/// entry could fill too and the bot hold both sides.
#[test]
fn a_reversal_from_a_working_market_entry_opens_after_pulling_it() {
    let e = aapl_bot(json!([]), json!([aapl_entry("m1", "long", "market", "10")]));
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"short"}"#;
    let o = post(&e, body, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let steps: Vec<_> = o.orders.iter().map(|r| (r.kind.as_str(), r.order.intent.as_str())).collect();
    assert_eq!(steps, [("cancel", "open_long"), ("place", "open_short")], "{}", o.to_json());
    assert_eq!(o.orders[1].after.as_ref(), Some(&o.orders[0].client_order_id), "{}", o.to_json());
}

/// `cancel: true` on an exit is a CANCEL, which pulls the side's working entries (market ones too), then the CLOSE:
/// the CLOSE does not pull the market entry a second time (a second cancel of one order, refused by the broker).
#[test]
fn a_cancel_first_close_pulls_a_working_market_entry_once() {
    let e = aapl_bot(
        json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]),
        json!([aapl_entry("m1", "long", "market", "5")]),
    );
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","cancel":true}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("m1")), (RequestKind::Place, None)], "{}", o.to_json());
    // Nothing held: the CANCEL alone.
    let e = aapl_bot(json!([]), json!([aapl_entry("m1", "long", "market", "5")]));
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","cancel":true}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("m1"))], "{}", o.to_json());
}

/// A CLOSE naming no side takes the side of a working market entry as it takes a position's: the one side held.
#[test]
fn a_close_naming_no_side_takes_a_working_market_entrys() {
    let e = aapl_bot(json!([]), json!([aapl_entry("m1", "long", "market", "10")]));
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("m1"))], "{}", o.to_json());
    // A limit entry is no position: nothing to close, as before.
    let e = aapl_bot(json!([]), json!([aapl_entry("l1", "long", "limit", "10")]));
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"CLOSE"}"#, T0));
    assert!(r.contains("nothing to close"), "{r}");
}

/// Options: a market entry still working is pulled as the position's exits are: by its underlying and side, and
/// where the alert names contracts, only an entry holding them. Beside a position, its cancel goes first and the
/// close waits for it.
#[test]
fn an_option_close_pulls_a_working_market_entry_of_the_contracts_it_names() {
    let entry = |id: &str, occ: &str| {
        json!({"id": id, "instrument": "SPY", "direction": "long", "intent": "entry", "order_type": "market",
               "quantity": "1", "state": "open", "legs": [{"symbol": occ, "action": "buy_to_open"}]})
    };
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([]);
    snap["bots"][0]["working_orders"] =
        json!([entry("c450", "SPY240119C00450000"), entry("c460", "SPY240119C00460000")]);
    let e = engine_with(snap.clone());
    // Naming the underlying: both entries, one after the other.
    let o = post(&e, r#"{"ticker":"SPY","action":"CLOSE","direction":"LONG"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert!(seq.iter().all(|r| r.0 == RequestKind::Cancel), "{}", o.to_json());
    assert_eq!(seq[1].3.as_deref(), Some(seq[0].2.as_str()), "{}", o.to_json());
    // Naming one contract: that one's entry only.
    let o = post(&e, r#"{"ticker":"SPY240119C450","action":"CLOSE","direction":"LONG"}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.iter().map(|r| (r.0, r.1.as_deref())).collect::<Vec<_>>(), [(RequestKind::Cancel, Some("c450"))]);
    // Beside a position of the contract: the entry's cancel, then the close waiting for it.
    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "long", "quantity": "1",
                                           "legs": [{"symbol": "SPY240119C00450000", "action": "buy_to_open"}]}]);
    snap["bots"][0]["working_orders"] = json!([entry("c450", "SPY240119C00450000")]);
    let o = post(
        &engine_with(snap),
        r#"{"ticker":"SPY240119C450","action":"CLOSE","direction":"LONG","order_type":"market"}"#,
        T0 + 2,
    );
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("c450")), "{}", o.to_json());
    assert_eq!((seq[1].0, seq[1].3.as_deref()), (RequestKind::Place, Some(seq[0].2.as_str())), "{}", o.to_json());
}

/// A reversal's new side waits for every close of the old side, not only the last: a
/// position held as several option structures closes with one order each, and were an
/// earlier one to fail, opening the new side would leave the bot holding both. The closes
/// go out one after another and the new side waits for the last of them.
#[test]
fn a_reversal_of_several_option_structures_opens_after_every_close() {
    let short = |call: &str| json!([{"symbol": call, "action": "sell_to_open"}]);
    let snap = json!({
        "id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "market",
        "allowed_instruments": ["SPX"], "directions": {"long": true, "short": true},
        "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                    "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
        "bots": [{"id": "tt", "broker": "tastytrade", "account_id": "5WT1", "sizing": {"fixed_quantity": "1"},
                  "positions": [
                      {"instrument": "SPX", "direction": "short", "quantity": "1", "legs": short("SPXW240119C04500000")},
                      {"instrument": "SPX", "direction": "short", "quantity": "2", "legs": short("SPXW240119C04505000")},
                      {"instrument": "SPX", "direction": "short", "quantity": "1", "legs": short("SPXW240119C04495000")}
                  ]}],
        "market": {"option_chains": {"SPX": {"underlying_price": "4502.30", "expirations": ["2024-01-19"],
                                              "strikes": ["4495", "4500", "4505"]}}}
    });
    let e = engine_with(snap);
    let body = r#"{"ticker":"SPX","action":"buy","prevMarketPosition":"short","marketPosition":"long"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let intents: Vec<_> = o.orders.iter().map(|r| (r.kind.as_str(), r.order.intent.as_str())).collect();
    assert_eq!(
        intents,
        [("place", "close_short"), ("place", "close_short"), ("place", "close_short"), ("place", "open_long")],
        "{}",
        o.to_json()
    );
    assert_eq!(o.orders[0].after, None);
    for pair in o.orders.windows(2) {
        assert_eq!(pair[1].after.as_ref(), Some(&pair[0].client_order_id), "{}", o.to_json());
    }
    // A plain CLOSE of the same structures: no new side waits, so each close goes out on its own.
    let o = post(&e, r#"{"ticker":"SPX","action":"CLOSE","direction":"SHORT"}"#, T0 + 1);
    assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 3), "{}", o.to_json());
    assert!(o.orders.iter().all(|r| r.after.is_none()), "{}", o.to_json());
}

/// Issue 12 §3: bad numbers are the sender's error, answered 200 rejected with a reason,
/// never a 500 that invites automatic resends.
#[test]
fn bad_prices_and_sizes_are_rejected_not_failed() {
    let e = engine();
    let cases = [
        (r#"{"ticker":"AAPL","action":"buy","order_type":"limit","price":-5}"#, "price -5 for AAPL is not above zero"),
        (r#"{"ticker":"AAPL","action":"buy","order_type":"limit","price":"0"}"#, "price 0 for AAPL is not above zero"),
        (r#"{"ticker":"AAPL","action":"buy","price":"-190.10"}"#, "price -190.10 for AAPL is not above zero"),
        (r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","price":-411}"#, "price -411 for MSFT"),
        (r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","quantity":0}"#, "`quantity` cannot be \"0\""),
        (r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","quantity":-3}"#, "`quantity` cannot be \"-3\""),
        (r#"{"ticker":"MSFT","action":"MODIFY","direction":"LONG","notional":"-1000"}"#, "`notional` cannot be"),
    ];
    for (i, (body, want)) in cases.into_iter().enumerate() {
        let o = post(&e, body, T0 + i as i64);
        assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().unwrap_or_default().contains(want), "{body}: {:?}", o.reason);
    }
    let mut crypto = snapshot();
    crypto["asset_class"] = json!("crypto");
    crypto["allowed_instruments"] = json!(["BTCUSD"]);
    crypto["bots"] =
        json!([{"id": "c", "broker": "coinbase", "account_id": "x", "sizing": {"fixed_quantity": "0.01"}}]);
    let e = engine_with(crypto);
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"buy","order_type":"limit","price":-1}"#, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
}

/// A time to the minute is no sender's dedup key: PickMyTrade's `date` written without seconds made a scale-in 40 s
/// after an entry (another size, another price) the entry's duplicate, and dropped it.
#[test]
fn a_date_to_the_minute_does_not_make_two_alerts_of_that_minute_one() {
    let mut snap = snapshot();
    snap["allowed_instruments"] = json!(["*"]);
    let e = engine_with(snap);
    let sent = 1_705_329_000_000;
    let first =
        r#"{"symbol":"AAPL","date":"2024-01-15T14:30Z","data":"buy","quantity":1,"price":"190.10","token":"x"}"#;
    let second =
        r#"{"symbol":"AAPL","date":"2024-01-15T14:30Z","data":"buy","quantity":2,"price":"190.55","token":"x"}"#;
    assert_eq!(post(&e, first, sent + 1_000).decision, Decision::Processed);
    let o = post(&e, second, sent + 40_000);
    assert_eq!(o.decision, Decision::Processed, "a second, different alert: {}", o.to_json());
    // The same body again is still a duplicate (its hash).
    assert_eq!(post(&e, second, sent + 41_000).decision, Decision::Duplicate);
    // TV-Hub's `{{ticker}}-<Unix time>` names its second after the dash: still the sender's key, so a resend at
    // another price is a duplicate (judged whole, it was no key, and the resend traded again).
    for key in ["AAPL-1705676400", "AAPL-1705676400123", "AAPL-2024-01-19T15:00:00Z"] {
        let e = engine();
        let body = |p: &str| format!(r#"{{"pair":"AAPL","isBuy":true,"price":"{p}","alertTimestamp":"{key}"}}"#);
        assert_eq!(post(&e, &body("190.10"), T0 + 500).decision, Decision::Processed, "{key}");
        let o = post(&e, &body("190.15"), T0 + 1_500);
        assert_eq!(o.decision, Decision::Duplicate, "{key}: a resend traded again: {}", o.to_json());
    }
}

/// A credit asked for options the alert only buys (one call, or a straddle) is the sender's bad number, as a
/// negative price for a stock is: a 200 with the reason, not a 500 that invites resends.
#[test]
fn a_credit_for_bought_options_is_rejected_not_failed() {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["*"]);
    snap["options"] = json!({"selection": "external"});
    snap["order_type"] = json!("limit");
    snap["bots"] = json!([snap["bots"][0].clone()]);
    snap["bots"][0]["positions"] = json!([]);
    let e = engine_with(snap);
    let straddle = json!({"ticker": "SPY", "action": "buy", "price": -4, "legs": [
        {"symbol": "SPY240119C00450000", "action": "buy_to_open"},
        {"symbol": "SPY240119P00450000", "action": "buy_to_open"}]});
    let one = json!({"ticker": "SPY240119C455", "action": "buy", "price": -1.5});
    for (i, body) in [one, straddle].into_iter().enumerate() {
        let o = post(&e, &body.to_string(), T0 + i as i64);
        assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().unwrap_or_default().contains("not above zero"), "{:?}", o.reason);
    }
}

/// Issue 12 §4: an Alpaca bot on an index-option strategy is refused when the snapshot
/// loads, naming the bot; with `"*"` the order fails naming the bot; a strategy with
/// internal selection refuses an alert that names contracts.
#[test]
fn option_strategies_refuse_what_they_cannot_trade() {
    let spx = |allowed: Value, selection: &str| {
        json!({
            "id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "market",
            "allowed_instruments": allowed,
            "options": {"selection": selection, "expiration": {"min_days": 0, "max_days": 7},
                        "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
            "bots": [{"id": "tt", "broker": "tastytrade", "account_id": "5WT1", "sizing": {"fixed_quantity": "1"}},
                     {"id": "paper-a", "broker": "alpaca", "account_id": "PA1", "sizing": {"fixed_quantity": "1"}}],
            "market": {"option_chains": {"SPX": {"underlying_price": "4502.30", "expirations": ["2024-01-19"],
                                                  "strikes": ["4495", "4500", "4505"]}}}
        })
    };
    let e = strategy_webhook::Strategy::from_json(spx(json!(["SPX"]), "internal").to_string().as_bytes()).unwrap_err();
    assert!(e.to_string().contains("`bots[1]` (paper-a) is on alpaca, which offers no index options"), "{e}");
    assert!(e.to_string().contains("names the index SPX"), "{e}");
    let e = engine_with(spx(json!(["*"]), "internal"));
    let o = post(&e, r#"{"ticker":"SPX","action":"OPEN","direction":"LONG"}"#, T0);
    assert_eq!(
        (o.http_status, o.reason.as_deref()),
        (500, Some("bot paper-a: alpaca offers no index options, so this bot cannot trade SPX options"))
    );
    assert!(o.orders.is_empty(), "all or nothing");
    // Internal selection picks its own contracts: legs in the alert are refused.
    let mut snap = spx(json!(["SPX"]), "internal");
    snap["bots"] = json!([snap["bots"][0].clone()]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"SPXW240119C4500","action":"OPEN","direction":"LONG"}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert_eq!(
        o.reason.as_deref(),
        Some(
            "this strategy picks its own contracts (internal selection), and the alert names an option leg \
             (SPXW240119C04500000); remove the legs (send the underlying's ticker) or switch the strategy to external \
             selection"
        )
    );
    let legs = json!({"ticker": "SPX", "action": "OPEN", "direction": "LONG",
        "legs": [{"side": "call", "strike": 4500, "expiration": "2024-01-19", "action": "buy_to_open"},
                 {"side": "call", "strike": 4505, "expiration": "2024-01-19", "action": "sell_to_open"}]});
    let o = post(&e, &legs.to_string(), T0 + 1);
    assert!(o.reason.as_deref().unwrap_or_default().contains("names 2 option legs;"), "{}", o.to_json());
    assert_eq!(
        post(&e, r#"{"ticker":"SPX","action":"OPEN","direction":"LONG"}"#, T0 + 2).decision,
        Decision::Processed
    );
}

/// An alert named its contract under Tradier's own key (`option_symbol`, as Tradier's order takes it) or another
/// common one: the key was dropped unread, and the internal-selection strategy bought its own pick (today's 480
/// CALL) where the sender named next week's 480 PUT. The top-level option-selection keys (`putCall`, `strike`,
/// `expiration`…) were refused for exactly this reason; these were not.
#[test]
fn a_contract_named_under_an_unread_key_is_never_traded_as_another() {
    let e = engine_with(json!({
        "id": "spy", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "limit",
        "limit_target": "mid", "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
        "rules": {"buy": "open_long", "sell": "open_short", "entry": "open_long", "exit": "close_long"},
        "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 45},
                    "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}],
                             "short": [{"side": "put", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
        "bots": [{"id": "t", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"}}],
        "market": {"option_chains": {"SPY": {"underlying_price": "480.30",
            "expirations": ["2024-01-19", "2024-01-22", "2024-01-26"],
            "strikes": ["470", "475", "480", "485", "490"]}}}
    }));
    let traded = |o: &strategy_webhook::Outcome| -> Vec<String> {
        o.orders.iter().flat_map(|r| r.order.legs.iter().map(|l| l.contract.occ_unpadded())).collect()
    };
    for key in ["option_symbol", "optionSymbol", "occ_symbol", "contract", "option"] {
        let body = format!(r#"{{"ticker":"SPY","action":"buy","price":3.10,"{key}":"SPY240126P00480000"}}"#);
        let o = post(&e, &body, T0);
        let other: Vec<String> = traded(&o).into_iter().filter(|c| c != "SPY240126P00480000").collect();
        assert!(other.is_empty(), "`{key}` named SPY240126P00480000, and {other:?} was bought: {}", o.to_json());
    }
    // The option's right under a key of its own, dropped: a CALL bought where a PUT was asked.
    for key in ["right", "callPut", "call_put"] {
        let body = format!(r#"{{"ticker":"SPY","action":"buy","price":3.10,"{key}":"put"}}"#);
        let o = post(&e, &body, T0);
        let calls: Vec<String> = traded(&o).into_iter().filter(|c| c.contains("C00")).collect();
        assert!(calls.is_empty(), "`{key}: put` and {calls:?} was bought: {}", o.to_json());
    }
    // The expiration under the names a leg's is read by (`exp`, `expDate`), dropped at the top level while
    // `expiration` and `expiry` were refused: today's contract bought where next week's was asked.
    for key in ["exp", "expDate"] {
        let body = format!(r#"{{"ticker":"SPY","action":"buy","price":3.10,"{key}":"2024-01-26"}}"#);
        let o = post(&e, &body, T0);
        let other: Vec<String> = traded(&o).into_iter().filter(|c| !c.starts_with("SPY240126")).collect();
        assert!(other.is_empty(), "`{key}: 2024-01-26` and {other:?} was bought: {}", o.to_json());
    }
    // Each is refused naming its key and where a contract goes.
    for key in ["option_symbol", "occSymbol", "contract", "option", "right", "callPut", "exp", "expDate", "leg"] {
        let body = format!(r#"{{"ticker":"SPY","action":"buy","price":3.20,"{key}":"SPY240126P00480000"}}"#);
        let o = post(&e, &body, T0);
        let reason = o.reason.as_deref().unwrap_or_default();
        assert_eq!(o.decision, Decision::Rejected, "{key}: {}", o.to_json());
        assert!(reason.contains(&format!("`{key}` is not read")) && reason.contains("`legs`"), "{key}: {reason}");
    }
    // Left empty by a template that fills every key, they ask for nothing.
    let o = post(&e, r#"{"ticker":"SPY","action":"buy","price":3.10,"option_symbol":"","right":null}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// A contract under a key of the sender's own (`symbol_name`, a `note`): dropped unread, the strategy traded its
/// own pick where the sender named another contract.
#[test]
fn an_option_strategy_refuses_a_contract_under_any_unread_key() {
    let snap = |asset: &str, selection: &str| {
        json!({
            "id": "spy", "token_hash": TOKEN, "status": "active", "asset_class": asset, "order_type": "market",
            "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
            "options": {"selection": selection, "expiration": {"min_days": 0, "max_days": 45},
                        "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
            "bots": [{"id": "t", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"}}],
            "market": {"option_chains": {"SPY": {"underlying_price": "480.30", "expirations": ["2024-01-26"],
                                                  "strikes": ["475", "480", "485"]}},
                       "quotes": {"SPY": {"bid": "480.20", "ask": "480.40", "last": "480.30"}}}
        })
    };
    let e = engine_with(snap("option", "internal"));
    for (body, kind) in [
        (
            r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","symbol_name":"SPY240126P00480000"}"#,
            "application/json",
        ),
        (r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","note":"SPY 240126P480"}"#, "application/json"),
        ("ticker=SPY action=OPEN direction=LONG note=SPY240126P00480000", "text/plain"),
    ] {
        let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some(kind), T0);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("names the option contract SPY240126P00480000, and is not read"), "{reason}");
        assert!(o.orders.is_empty(), "{}", o.to_json());
    }
    // Its key is quoted to a bound, as every key is: a 256 KiB key made a 256 KiB reason.
    let body = format!(
        r#"{{"ticker":"SPY","action":"OPEN","direction":"LONG","note{}":"SPY240126P00480000"}}"#,
        "x".repeat(MAX_BODY - 300)
    );
    let o = post(&e, &body, T0 + 10);
    assert_eq!(o.decision, Decision::Rejected, "{}", &o.to_json()[..200]);
    assert!(o.response.len() < 1024 && o.logs.iter().all(|l| l.message.len() < 1024), "{} bytes", o.response.len());
    // The one contract the alert names, said again under a key of its own, says nothing else.
    let e = engine_with(snap("option", "external"));
    let body = r#"{"ticker":"SPY240126P00480000","action":"OPEN","direction":"LONG","note":"SPY240126P00480000"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let body = r#"{"ticker":"SPY240126C00480000","action":"OPEN","direction":"LONG","note":"SPY240126P00480000"}"#;
    assert_eq!(post(&e, body, T0 + 1).decision, Decision::Rejected);
    // An equity strategy trades no contract: a note naming one is the sender's own.
    let e = engine_with(snap("equity", "internal"));
    let body = r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","note":"SPY240126P00480000"}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Processed);
}

/// Issue 12 §5: the Outcome's alerts are canonical wherever the rules resolved them, also
/// when the decision is a rejection.
#[test]
fn rejected_alerts_are_canonical_where_the_rules_resolved_them() {
    let e = engine();
    // `exit` means CLOSE LONG for this strategy; TSLA has no position.
    let o = post(&e, r#"{"ticker":"TSLA","action":"exit"}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"CLOSE","instrument":"TSLA","direction":"LONG","price":null}"#);
    // Not in the allowed instruments: the rule still says what `buy` means.
    let o = post(&e, r#"{"ticker":"NFLX","action":"buy","price":500}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Rejected);
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"OPEN","instrument":"NFLX","direction":"LONG","price":500}"#);
    // A word with no rule stays the word it was.
    let mut snap = snapshot();
    snap["rules"] = json!({"buy": "open_long"});
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"sell"}"#, T0);
    assert_eq!(o.decision, Decision::Rejected);
    assert_eq!(o.alerts[0].to_json(), r#"{"action":"sell","instrument":"AAPL","direction":null,"price":null}"#);
}

#[test]
fn dry_run_records_nothing() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    for _ in 0..100 {
        let o = e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, T0);
        assert_eq!(o.decision, Decision::Processed);
    }
    assert_eq!(post(&e, body, T0).decision, Decision::Processed, "neither dedup nor rate was touched");
    assert_eq!(e.dry_run(TOKEN.as_bytes(), body.as_bytes(), None, T0).decision, Decision::Duplicate);
}

#[test]
fn snapshot_errors_name_the_field() {
    let cases = [
        (json!({"token_hash": "abc"}), "token_hash"),
        (
            json!({"bots": [{"id": "b", "broker": "robinhood", "account_id": "x", "sizing": {"fixed_quantity": 1}}]}),
            "robinhood",
        ),
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": 1, "fixed_notional": 5}}]}),
            "exactly one",
        ),
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": "-1"}}]}),
            "above zero",
        ),
        (json!({"status": "running"}), "running"),
        (json!({"order_typ": "limit"}), "order_typ"),
        // Issue 12 §5: every kind of error names its field, enum words and types included.
        (json!({"status": "running"}), "`status`: "),
        (json!({"directions": {"long": "yes", "short": true}}), "`directions.long`: invalid type"),
        (json!({"asset_class": "stocks"}), "`asset_class`: "),
        (json!({"order_type": 5}), "`order_type`: "),
        (json!({"limit_target": "middle"}), "`limit_target`: "),
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": "-1"}}]}),
            "`bots[0].sizing`: sizing must be above zero",
        ),
        (
            json!({"bots": [{"id": "b", "broker": "robinhood", "account_id": "x", "sizing": {"fixed_quantity": 1}}]}),
            "`bots[0].broker`: unknown broker",
        ),
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": 1},
                             "positions": [{"instrument": "AAPL", "direction": "up", "quantity": 1}]}]}),
            "`bots[0].positions[0].direction`: ",
        ),
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": 1},
                             "working_orders": [{"id": "1", "instrument": "AAPL", "direction": "long", "intent": "entry",
                                                 "order_type": "limit", "price": "abc", "quantity": 1, "state": "open"}]}]}),
            "`bots[0].working_orders[0].price`: expected a decimal",
        ),
        (json!({"market": {"quotes": {"AAPL": {"bid": [1]}}}}), "`market.quotes.AAPL.bid`: "),
        // One order listed twice was cancelled twice (the second refused, holding back the CLOSE after it).
        (
            json!({"bots": [{"id": "b", "broker": "alpaca", "account_id": "x", "sizing": {"fixed_quantity": 1},
                             "working_orders": [
                                 {"id": "X", "instrument": "AAPL", "direction": "long", "intent": "exit",
                                  "order_type": "limit", "price": "200", "quantity": 1, "state": "open"},
                                 {"id": "X ", "instrument": "AAPL", "direction": "long", "intent": "exit",
                                  "order_type": "limit", "price": "200", "quantity": 1, "state": "open"}]}]}),
            "`bots[0].working_orders[1].id` \"X\" is listed twice",
        ),
        // Two bots on one account sent every order twice and each read the whole account as its own.
        (
            json!({"bots": [{"id": "a", "broker": "tradier", "account_id": "ABC", "sizing": {"fixed_quantity": 1}},
                            {"id": "b", "broker": "tradier", "account_id": " ABC", "sizing": {"fixed_quantity": 1}}]}),
            "trades the same tradier account \"ABC\" as bot \"a\"",
        ),
        (json!({"rules": {"buy": "go_long"}}), "`rules.buy`: "),
        // A single leg sized from one contract's premium went out ratio times over: double the notional at 2.
        (
            json!({"asset_class": "option", "allowed_instruments": ["SPY"],
                   "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                               "legs": {"long": [{"side": "call", "action": "buy_to_open",
                                                  "strike": {"atm_offset": 0}, "ratio": 2}], "short": []}}}),
            "`options.legs.long[0].ratio` is 2; a single leg's ratio must be 1",
        ),
    ];
    for (patch, want) in cases {
        let mut snap = snapshot();
        for (k, v) in patch.as_object().unwrap() {
            snap[k] = v.clone();
        }
        let err = strategy_webhook::Strategy::from_json(snap.to_string().as_bytes()).unwrap_err().to_string();
        assert!(err.contains(want), "{err:?} should mention {want:?}");
    }
}

#[test]
fn upsert_keeps_state_and_refuses_a_taken_token() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Processed);
    let mut snap = snapshot();
    snap["name"] = json!("renamed");
    e.upsert(strategy_from(&snap)).unwrap();
    assert_eq!(post(&e, body, T0 + 1).decision, Decision::Duplicate, "replace kept the dedup window");
    let mut clash = snapshot();
    clash["id"] = json!("other");
    assert!(e.upsert(strategy_from(&clash)).is_err());
    assert!(e.remove("s1"));
    assert_eq!(post(&e, body, T0 + 2).http_status, 404);
}

#[test]
fn engine_with_custom_limits() {
    let e = Engine::with_limits(Limits { rate_limit: 2, ..Limits::default() });
    e.upsert(strategy_from(&snapshot())).unwrap();
    assert_ne!(post(&e, "{}", T0).http_status, 429);
    assert_ne!(post(&e, "{ }", T0).http_status, 429);
    assert_eq!(post(&e, "{  }", T0).http_status, 429);
}

#[test]
fn memory_per_strategy_stays_bounded_at_the_maximum_rate() {
    let mut snap = snapshot();
    snap["bots"] = json!([]);
    let e = engine_with(snap);
    // 60 distinct alerts a minute for an hour: the dedup window (5 minutes) is full
    // from minute 5 on, and expired keys must be dropped.
    let mut peak = 0;
    for minute in 0..60i64 {
        for i in 0..60i64 {
            let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":{}}}"#, minute * 60 + i);
            let o = post(&e, &body, T0 + minute * 60_000 + i * 1_000);
            assert_eq!(o.decision, Decision::Processed, "minute {minute}, alert {i}");
        }
        peak = peak.max(e.store().heap_bytes("s1"));
    }
    eprintln!("peak heap for one strategy: {peak} bytes");
    assert!(peak > 10_000, "a full window holds ~300 keys, so the estimate cannot be tiny: {peak}");
    assert!(peak < 32 * 1024, "{peak} bytes for one strategy's windows; the budget is 32 KiB");
}

#[test]
fn host_can_release_and_restore_dedup_state() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let o = post(&e, body, T0);
    assert_eq!(o.decision, Decision::Processed);
    let key = o.dedup_key.expect("a processed outcome carries its dedup key");
    assert_eq!(key.len(), 64);
    assert_eq!(post(&e, body, T0 + 1).decision, Decision::Duplicate);
    // The host could not make the outcome durable: it releases the key, and the retry trades.
    assert!(e.release("s1", &key));
    assert!(!e.release("s1", "not-hex"));
    assert_eq!(post(&e, body, T0 + 2).decision, Decision::Processed);

    // After a restart the host restores what it persisted: the key and the rate window.
    let fresh = engine();
    let k = strategy_webhook::engine::parse_hex_key(&key).unwrap();
    fresh.store().restore_key("s1", &k, T0 + 2);
    assert_eq!(post(&fresh, body, T0 + 3).decision, Decision::Duplicate);
    assert_eq!(post(&fresh, body, T0 + 300_002).decision, Decision::Processed, "restored keys expire on time");
    let limited = engine();
    for i in 0..60 {
        limited.store().restore_rate("s1", T0 + i);
    }
    assert_eq!(post(&limited, "{}", T0 + 100).http_status, 429);
    assert_ne!(post(&limited, "{}", T0 + 60_000).http_status, 429);
}

#[test]
fn engine_is_send_and_sync() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Engine>();
    shareable::<std::sync::Arc<Engine>>();
}

/// The `order` object of the Outcome JSON's `index`-th request.
fn order_json(o: &strategy_webhook::Outcome, index: usize) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(&o.to_json()).expect("outcome is JSON");
    v["orders"][index]["order"].clone()
}

#[test]
fn each_request_carries_its_neutral_order() {
    // Equity: a limit entry sized from the bot's notional, the Rust value and its JSON.
    let e = engine();
    let o = post(&e, r#"{"ticker":"NASDAQ:AAPL","action":"buy","order_type":"limit","price":"190.10"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let schwab = &o.orders[1];
    assert_eq!(schwab.order.symbol, "AAPL");
    assert_eq!(schwab.order.client_order_id, schwab.client_order_id);
    assert_eq!(
        order_json(&o, 1),
        json!({
            "asset_class": "equity", "symbol": "AAPL", "intent": "open_long", "side": "buy",
            "quantity": 5, "order_type": "limit", "limit_price": 190.10, "duration": "day",
            "legs": [], "client_order_id": schwab.client_order_id, "reference_price": 190.10
        })
    );
    assert!(o.to_json().contains(r#""limit_price":190.10"#), "exact digits, as the sender wrote them");
    // A close sells the held 10; a market order has no price.
    let o = post(&e, r#"{"ticker":"AAPL","action":"sell"}"#, T0 + 1);
    let close = order_json(&o, 0);
    assert_eq!((close["intent"].as_str(), close["side"].as_str()), (Some("close_long"), Some("sell")));
    assert_eq!((close["quantity"].as_u64(), close["limit_price"].is_null()), (Some(10), true));
    // No alert price: the reference price is the quote's mid (190.10/190.15), what a paper broker fills at.
    assert_eq!(o.orders[0].order.reference_price, strategy_webhook::decimal::parse("190.125"));
    assert!(o.to_json().contains(r#""reference_price":190.125"#), "{}", o.to_json());

    // Else the quote's last; with neither an alert price nor a quote, none, and the key is left out.
    let mut quoted = snapshot();
    quoted["market"] = json!({"quotes": {"AAPL": {"last": "191.5"}}});
    let o = post(&engine_with(quoted), r#"{"ticker":"AAPL","action":"buy"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.orders.iter().all(|r| r.order.reference_price == strategy_webhook::decimal::parse("191.5")));
    let mut bare = snapshot();
    bare["market"] = json!({});
    let o = post(&engine_with(bare), r#"{"ticker":"AAPL","action":"sell"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!((o.orders[0].order.reference_price, order_json(&o, 0).get("reference_price").cloned()), (None, None));

    // Crypto: the pair as well as the symbol as sent.
    let crypto = json!({
        "id": "btc", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "limit",
        "duration": "gtc", "allowed_instruments": ["BTC/USD"],
        "bots": [{"id": "cb", "broker": "coinbase", "account_id": "default", "sizing": {"fixed_quantity": "0.0015"}}]
    });
    let o = post(
        &engine_with(crypto),
        r#"{"ticker":"COINBASE:BTCUSD","action":"OPEN","direction":"long","price":"65000.00"}"#,
        T0,
    );
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let c = order_json(&o, 0);
    assert_eq!(
        c,
        json!({
            "asset_class": "crypto", "symbol": "BTCUSD", "pair": "BTC/USD", "intent": "open_long", "side": "buy",
            "quantity": 0.0015, "order_type": "limit", "limit_price": 65000.00, "duration": "gtc",
            "legs": [], "client_order_id": o.orders[0].client_order_id, "reference_price": 65000.00
        })
    );

    // An option spread: every leg's contract, action and ratio, and the net's effect.
    let spx = json!({
        "id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "limit",
        "allowed_instruments": ["SPX"],
        "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                    "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}},
                                      {"side": "call", "action": "sell_to_open", "strike": {"atm_offset": 2}, "ratio": 2}]}},
        "bots": [{"id": "tt", "broker": "tastytrade", "account_id": "5WT00000", "sizing": {"fixed_quantity": "3"}}],
        "market": {"option_chains": {"SPX": {"underlying_price": "4502.30", "expirations": ["2024-01-19", "2024-01-22"],
                                              "strikes": ["4490", "4495", "4500", "4505", "4510"]}}}
    });
    let o = post(&engine_with(spx), r#"{"ticker":"SPX","action":"OPEN","direction":"long","price":"2.35"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let s = order_json(&o, 0);
    assert_eq!(
        s,
        json!({
            "asset_class": "option", "symbol": "SPX", "intent": "open_long", "side": "buy", "quantity": 3,
            "order_type": "limit", "limit_price": 2.35, "price_effect": "debit", "duration": "day",
            "legs": [
                {"symbol": "SPXW240119C04500000", "underlying": "SPX", "expiration": "2024-01-19", "side": "CALL",
                 "strike": 4500, "action": "buy_to_open", "ratio": 1},
                {"symbol": "SPXW240119C04510000", "underlying": "SPX", "expiration": "2024-01-19", "side": "CALL",
                 "strike": 4510, "action": "sell_to_open", "ratio": 2}
            ],
            "client_order_id": o.orders[0].client_order_id
        })
    );
    let legs = &o.orders[0].order.legs;
    assert_eq!(legs[1].contract.occ_padded(), "SPXW  240119C04510000");
}

#[test]
fn positions_changed_on_a_loaded_strategy_are_read_on_upsert() {
    // A host (the server's state tracking) sets positions on a loaded strategy and upserts it.
    let mut s = strategy_from(&snapshot());
    let mut tsla = s.bots[0].positions[0].clone();
    tsla.instrument = "tsla".into();
    s.bots[1].positions.push(tsla);
    let e = Engine::new();
    e.upsert(s.clone()).unwrap();
    let o = post(&e, r#"{"ticker":"TSLA","action":"sell"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(&*o.orders[0].bot, "schwab-main");
    // validate on a strategy deserialized without from_json reads its keys too.
    let raw: strategy_webhook::Strategy = serde_json::from_value(snapshot()).unwrap();
    let o = strategy_webhook::validate(&raw, br#"{"ticker":"AAPL","action":"sell"}"#, Some("application/json"), T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// A host that keeps its windows in its own transaction answers the count and the claim
/// itself; the engine decides as it would with its own store, and says what to keep.
#[test]
fn settled_answers_decide_like_the_engines_own_store_and_say_what_to_keep() {
    use strategy_webhook::state::{Claim, Settled};
    let e = engine();
    let body = br#"{"ticker":"AAPL","action":"buy"}"#;
    let ct = Some("application/json");

    let fresh = Settled::new(true, Claim::Fresh);
    let o = e.deliver_settled(&fresh, TOKEN.as_bytes(), body, ct, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(fresh.counted() && fresh.keeps_claim());
    // The engine's own store was not touched: its own delivery of the same body is fresh.
    assert_eq!(post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0).decision, Decision::Processed);

    let dup = Settled::new(true, Claim::Duplicate { log: true });
    let o = e.deliver_settled(&dup, TOKEN.as_bytes(), body, ct, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Duplicate));
    assert_eq!(o.logs.len(), 1, "the first duplicate in the window is logged");
    assert!(dup.counted() && !dup.keeps_claim());

    let full = Settled::new(false, Claim::Fresh);
    let o = e.deliver_settled(&full, TOKEN.as_bytes(), body, ct, T0);
    assert_eq!(o.http_status, 429);
    assert!(!full.counted() && !full.keeps_claim(), "a 429 is not counted and claims nothing");

    // A body that is not JSON is rejected (200): counted, and its claim kept.
    let bad = Settled::new(true, Claim::Fresh);
    let o = e.deliver_settled(&bad, TOKEN.as_bytes(), b"{\"ticker\":", ct, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert!(bad.counted() && bad.keeps_claim());

    // An error answer (here a 422) is counted, but its claim is given back so the retry trades once.
    let snap = external_options();
    let options = engine_with(snap);
    let leg = json!({"side": "call", "action": "buy_to_open", "strike": 100, "expiration": "2024-01-19"});
    let legs = json!({"ticker": "SPX", "action": "OPEN", "direction": "LONG", "legs": [leg, leg, leg, leg, leg]});
    let error = Settled::new(true, Claim::Fresh);
    let o = options.deliver_settled(&error, TOKEN.as_bytes(), legs.to_string().as_bytes(), ct, T0);
    assert_eq!(o.http_status, 422, "{}", o.to_json());
    assert!(error.counted() && !error.keeps_claim());
}

/// `deliver_into` answers as `deliver` does, delivery after delivery, into one Outcome
/// that held every kind of answer before (processed, duplicate, rejected, 400, 404, 413).
#[test]
fn deliver_into_answers_as_deliver_does() {
    let (a, b) = (engine(), engine());
    let big = "x".repeat(MAX_BODY + 1);
    let unknown = "f".repeat(64);
    let bodies: Vec<(&str, &str)> = vec![
        (TOKEN, r#"{"ticker":"AAPL","action":"buy"}"#),
        (TOKEN, r#"{"ticker":"AAPL","action":"buy"}"#),
        (TOKEN, r#"{"ticker":"TSLA","action":"buy"}"#),
        ("short", "{}"),
        (&unknown, "{}"),
        (TOKEN, &big),
        (TOKEN, r#"{"ticker":"AAPL","action":"sell","metadata":{"message_id":"m-2"}}"#),
        (TOKEN, "not json at all"),
    ];
    let mut reused = a.deliver(TOKEN.as_bytes(), b"{}", None, T0 - 1);
    let _ = b.deliver(TOKEN.as_bytes(), b"{}", None, T0 - 1);
    for (i, (token, body)) in bodies.iter().enumerate() {
        let now = T0 + i as i64 * 1000;
        a.deliver_into(&mut reused, token.as_bytes(), body.as_bytes(), Some("application/json"), now);
        let fresh = b.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), now);
        assert_eq!(reused.to_json(), fresh.to_json(), "delivery {i}");
        assert_eq!(reused, fresh, "delivery {i}");
    }
}

/// A CLOSE naming a contract no position holds is refused "nothing to close" (it closed whatever the underlying
/// held); a reversal's legs describe the position it opens, so its CLOSE still closes what is held.
#[test]
fn an_option_close_naming_a_contract_not_held_is_refused_and_a_reversal_still_closes() {
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "short", "quantity": "1",
        "legs": [{"symbol": "SPY240119P00100000", "action": "sell_to_open"}]}]);
    let e = engine_with(snap);
    let close = json!({"ticker": "SPY240119C100", "action": "CLOSE", "direction": "SHORT", "order_type": "market"});
    let o = post(&e, &close.to_string(), T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert!(o.to_json().contains("nothing to close"), "{}", o.to_json());
    assert!(o.orders.is_empty());
    // Reversing into a long call: the short put is closed, the call opened.
    let leg = json!({"symbol": "SPY240119C00100000", "action": "buy_to_open"});
    let reverse = json!({"ticker": "SPY", "action": "buy", "sentiment": "long", "order_type": "market", "price": 2.5, "legs": [leg]});
    let o = post(&e, &reverse.to_string(), T0 + 1);
    let json = o.to_json();
    assert!(json.contains("SPY240119P00100000") && json.contains("SPY240119C00100000"), "{json}");
}

/// `cancel: true` on an exit naming one contract made the alert two steps (CANCEL, then CLOSE), and any alert of
/// two steps was taken as a reversal, whose legs name nothing: the exit of one call closed every position on the
/// underlying. Only a CLOSE followed by an OPEN reads its legs as the new position.
#[test]
fn a_cancel_first_exit_naming_one_contract_closes_that_contract_only() {
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([
        {"instrument": "SPY", "direction": "long", "quantity": "1",
         "legs": [{"symbol": "SPY240119C00450000", "action": "buy_to_open"}]},
        {"instrument": "SPY", "direction": "long", "quantity": "1",
         "legs": [{"symbol": "SPY240119C00460000", "action": "buy_to_open"}]}
    ]);
    let e = engine_with(snap);
    let exit = json!({"ticker": "SPY240119C450", "action": "CLOSE", "direction": "LONG", "order_type": "market",
                      "cancel": true});
    let o = post(&e, &exit.to_string(), T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    let json = o.to_json();
    assert_eq!(o.orders.len(), 1, "one close: {json}");
    assert!(json.contains("SPY240119C00450000") && !json.contains("SPY240119C00460000"), "{json}");
}

/// A reversal's price is the new position's. The close of a long call reversed into a long put was priced at the
/// put's premium: a sell of the call at 12.40 that never filled, while the put was bought all the same. The close
/// onto other contracts is now priced from its own quotes, or refused (with the new side) where there are none;
/// an option ticker reversed on itself keeps the price, which is its own.
#[test]
fn an_option_reversal_onto_other_contracts_does_not_price_its_close_at_the_new_sides_price() {
    let held = json!([{"instrument": "SPY", "direction": "long", "quantity": "1",
                       "legs": [{"symbol": "SPY240119C00450000", "action": "buy_to_open"}]}]);
    let put = json!({"symbol": "SPY240119P00440000", "action": "buy_to_open"});
    let reverse = json!({"ticker": "SPY", "action": "sell", "sentiment": "short", "order_type": "limit",
                         "price": "12.40", "legs": [put]})
    .to_string();
    // Alert Price as the Limit Target: nothing prices the close, so neither side goes out.
    let mut snap = external_options();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][0]["positions"] = held.clone();
    let o = post(&engine_with(snap.clone()), &reverse, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    assert!(o.orders.is_empty(), "{}", o.to_json());
    assert!(o.reason.as_deref().unwrap_or_default().contains("is the new position's"), "{:?}", o.reason);
    // With quotes and a Limit Target, the close is priced from the call's quote, the put at the alert's price.
    snap["limit_target"] = json!("mid");
    snap["market"] = json!({"quotes": {"SPY240119C00450000": {"bid": "4.00", "ask": "4.20"}}});
    let o = post(&engine_with(snap), &reverse, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let prices: Vec<(String, String)> = o
        .orders
        .iter()
        .map(|r| (r.order.legs[0].contract.occ_unpadded(), r.order.limit_price.unwrap().to_string()))
        .collect();
    assert_eq!(
        prices,
        [("SPY240119C00450000".to_owned(), "4.10".to_owned()), ("SPY240119P00440000".to_owned(), "12.40".to_owned())],
        "{}",
        o.to_json()
    );
    // The same contract reversed on itself: the alert's price is the contract's, for both sides.
    let mut snap = external_options();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][0]["positions"] = held;
    let itself = json!({"ticker": "SPY240119C450", "action": "sell", "sentiment": "short", "order_type": "limit",
                        "price": "3.10"});
    let o = post(&engine_with(snap), &itself.to_string(), T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let held_by: Vec<String> = o
        .orders
        .iter()
        .filter(|r| &*r.bot == "alpaca-main")
        .map(|r| r.order.limit_price.unwrap().to_string())
        .collect();
    assert_eq!(held_by, ["3.10", "3.10"], "the close and the new side: {}", o.to_json());
    // A leg by side and strike alone names no expiration (the chain's nearest is taken, maybe not the one held):
    // not the same contract, so the price is not the close's.
    let mut snap = external_options();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "long", "quantity": "1",
                                          "legs": [{"symbol": "SPY240216C00450000", "action": "buy_to_open"}]}]);
    // A sold call's loss has no bound, so no amount of money sizes it: the other bot opens it by a quantity.
    snap["bots"][1]["sizing"] = json!({"fixed_quantity": "1"});
    snap["market"] = json!({"option_chains": {"SPY": {"underlying_price": "451", "expirations": ["2024-01-19", "2024-02-16"],
                                                      "strikes": ["445", "450", "455"]}}});
    let by_strike = json!({"ticker": "SPY", "action": "sell", "sentiment": "short", "order_type": "limit",
                           "price": "2.10", "legs": [{"side": "call", "strike": 450, "action": "sell_to_open"}]});
    let o = post(&engine_with(snap), &by_strike.to_string(), T0);
    // The bot holding the February call sends neither side; the other bot, holding nothing, opens.
    assert!(o.orders.iter().all(|r| &*r.bot != "alpaca-main"), "{}", o.to_json());
    assert!(o.to_json().contains("rejected for bot alpaca-main: the alert's price (2.10) is the new position's"));
}

/// An index's PM or weekly series trades under its own root (RUTW, NDXP, VIXW): read on the root, a RUTW position
/// was no RUT position, so a CLOSE RUT found nothing to close, and Tradier would have been sent `symbol=RUTW`.
#[test]
fn a_position_on_an_index_series_root_is_the_index_position() {
    let mut snap = external_options();
    snap["bots"] = json!([{"id": "trd", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"},
        "positions": [{"instrument": "RUTW", "direction": "long", "quantity": "1",
                       "legs": [{"symbol": "RUTW240122P02000000", "action": "buy_to_open"}]}]}]);
    let o =
        post(&engine_with(snap), r#"{"ticker":"RUT","action":"CLOSE","direction":"LONG","order_type":"market"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1);
    let body = String::from_utf8_lossy(o.orders[0].request.body.as_bytes()).into_owned();
    assert!(body.contains("symbol=RUT&") && body.contains("RUTW240122P02000000"), "{body}");
}

/// The snapshot's instruments are read as an alert's ticker is: a working exit written `NASDAQ:AAPL` (as the
/// alerts name it) beside the position `AAPL` was another instrument, so a CLOSE sold the position at market
/// and left the exit working, to sell again when it filled.
#[test]
fn a_close_cancels_a_working_exit_written_with_its_exchange_prefix() {
    let mut snap = snapshot();
    snap["bots"][0]["working_orders"] = json!([
        {"id": "exit-1", "instrument": "NASDAQ:AAPL ", "direction": "long", "intent": "exit",
         "order_type": "limit", "price": "200", "quantity": "10", "state": "open"}
    ]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let kinds: Vec<(RequestKind, Option<&str>)> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(kinds, [(RequestKind::Cancel, Some("exit-1")), (RequestKind::Place, None)], "{}", o.to_json());
}

/// A working order written with its exchange prefix was matched by its normalised name but sent under the raw
/// one: a re-size at Tradier (a cancel, then a new order) sent `symbol=NASDAQ:AAPL`, which the broker refuses after
/// the cancel went through, and a crypto exit written `COINBASE:BTCUSD` was no pair at all, so a CLOSE answered 500
/// at every bot. The order goes out as an alert's ticker would.
#[test]
fn a_working_order_written_with_its_exchange_prefix_goes_out_without_it() {
    let mut snap = snapshot();
    snap["bots"] = json!([{"id": "tradier-main", "broker": "tradier", "account_id": "VA000001",
        "sizing": {"fixed_quantity": "10"},
        "working_orders": [{"id": "1001", "instrument": "NASDAQ:AAPL", "direction": "long", "intent": "entry",
                            "order_type": "limit", "price": "185", "quantity": "10", "state": "open"}]}]);
    let o = post(&engine_with(snap), r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let bodies: Vec<String> =
        o.orders.iter().map(|r| String::from_utf8_lossy(r.request.body.as_bytes()).into_owned()).collect();
    assert!(bodies.iter().any(|b| b.contains("symbol=AAPL&")), "{bodies:?}");
    assert!(bodies.iter().all(|b| !b.contains("NASDAQ")), "{bodies:?}");

    let crypto = json!({
        "id": "c1", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "duration": "gtc", "allowed_instruments": ["BTCUSD"], "directions": {"long": true, "short": false},
        "bots": [{"id": "cb", "broker": "coinbase", "account_id": "C1", "sizing": {"fixed_quantity": "1"},
                  "positions": [{"instrument": "BTC/USD", "direction": "long", "quantity": "1"}],
                  "working_orders": [{"id": "x1", "instrument": "COINBASE:BTCUSD", "direction": "long",
                                      "intent": "exit", "order_type": "limit", "price": "90000", "quantity": "1",
                                      "state": "open", "duration": "gtc"}]}],
        "market": {"quotes": {"BTCUSD": {"bid": "60000", "ask": "60010"}}}
    });
    let o = post(&engine_with(crypto), r#"{"ticker":"COINBASE:BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let kinds: Vec<(RequestKind, Option<&str>)> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(kinds, [(RequestKind::Cancel, Some("x1")), (RequestKind::Place, None)], "{}", o.to_json());
}

/// A MODIFY re-sized a working order written with its exchange prefix (`COINBASE:ETHBTC`) from the name as written,
/// which is no pair: a notional in dollars was divided by a price in BTC (a 1-ETH bid became 20,000 ETH), and the
/// pair's base increment was not applied (refused by the broker after a processed answer).
#[test]
fn a_modify_sizes_a_prefixed_crypto_order_as_its_pair() {
    let crypto = |pair: &str, price: &str, increments: serde_json::Value| {
        json!({
            "id": "c1", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "limit",
            "duration": "gtc", "allowed_instruments": [pair], "directions": {"long": true, "short": false},
            "bots": [{"id": "cb", "broker": "coinbase", "account_id": "C1", "sizing": {"fixed_quantity": "1"},
                      "increments": increments,
                      "working_orders": [{"id": "x1", "instrument": format!("COINBASE:{pair}"), "direction": "long",
                                          "intent": "entry", "order_type": "limit", "price": price, "quantity": "100",
                                          "state": "open", "duration": "gtc"}]}]
        })
    };
    let e = engine_with(crypto("ETHBTC", "0.05", json!({})));
    let o = post(&e, r#"{"ticker":"ETHBTC","action":"MODIFY","direction":"long","notional":1000}"#, T0);
    assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(o.reason.as_deref().unwrap_or_default().contains("priced in BTC"), "{}", o.to_json());
    let inc = json!({"DOGE-USD": {"base_increment": "1", "quote_increment": "0.00001", "price_increment": "0.00001"}});
    let e = engine_with(crypto("DOGEUSD", "0.12", inc));
    let o = post(&e, r#"{"ticker":"DOGEUSD","action":"MODIFY","direction":"long","quantity":"150.75"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let body = String::from_utf8_lossy(o.orders[0].request.body.as_bytes()).into_owned();
    assert!(body.contains(r#""size":"150""#), "{body}");
}

/// A spread or ratio symbol names two instruments; read to its last colon, it bought the last leg alone.
#[test]
fn a_spread_symbol_is_refused_not_traded_as_its_last_leg() {
    let e = engine();
    for (i, body) in [
        r#"{"ticker":"NASDAQ:AAPL/NASDAQ:MSFT","action":"buy"}"#,
        r#"{"ticker":"NASDAQ:AAPL*2-NASDAQ:MSFT","action":"buy"}"#,
        r#"{"ticker":"AAPL/NASDAQ:MSFT","action":"buy"}"#,
        r#"{"ticker":"AAPL*2-NASDAQ:MSFT","action":"buy"}"#,
        // Option legs too: the last alone passed for the alert's one contract.
        r#"{"ticker":"OPRA:SPY261218C600.0-OPRA:SPY261218C610.0","action":"buy"}"#,
        r#"{"ticker":"NASDAQ:AAPL/OPRA:SPY261218C600.0","action":"buy"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + i as i64);
        assert_ne!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}");
    }
    let o = post(&e, "ticker=NASDAQ:AAPL/NASDAQ:MSFT;action=buy", T0 + 5);
    assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
    // One prefix is an exchange's.
    assert_eq!(post(&e, r#"{"ticker":"NASDAQ:MSFT","action":"buy"}"#, T0 + 6).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"BATS_X:TSLA","action":"buy"}"#, T0 + 7).decision, Decision::Processed);
    // Spaces around the colon are a template's, not a second symbol.
    for (i, spaced) in ["NASDAQ :AAPL", "NASDAQ: MSFT", " NYSE : TSLA"].into_iter().enumerate() {
        let body = format!(r#"{{"ticker":"{spaced}","action":"buy"}}"#);
        assert_eq!(post(&e, &body, T0 + 8 + i as i64).decision, Decision::Processed, "{spaced}");
    }
    let opt = strategy_webhook::alert::parse(
        br#"{"ticker":"OPRA:SPY261218C600.0-OPRA:SPY261218C610.0","action":"buy"}"#,
        Some("application/json"),
    );
    assert!(opt.is_err(), "an option spread symbol in any strategy: {opt:?}");
}

/// Where the credentials pick the account (Alpaca, Coinbase), the bot's `account_id` is a label: two bots that
/// share one are not taken for one account, while at brokers whose requests name it they are refused.
#[test]
fn two_bots_share_an_account_label_only_where_it_names_no_account() {
    let mut snap = snapshot();
    snap["bots"] = json!([
        {"id": "a", "broker": "alpaca", "account_id": "PA1", "sizing": {"fixed_quantity": 1}},
        {"id": "b", "broker": "alpaca", "account_id": "PA1", "sizing": {"fixed_quantity": 1}}
    ]);
    assert!(strategy_webhook::Strategy::from_json(snap.to_string().as_bytes()).is_ok());
    for broker in ["tradier", "schwab", "tastytrade"] {
        snap["bots"][0]["broker"] = json!(broker);
        snap["bots"][1]["broker"] = json!(broker);
        let e = strategy_webhook::Strategy::from_json(snap.to_string().as_bytes()).unwrap_err().to_string();
        assert!(e.contains("trades the same"), "{broker}: {e}");
    }
}

/// A stock limit price finer than a cent at or above $1 (or than $0.0001 below it) is refused before sending:
/// every US broker refuses it (SEC Rule 612), after the sender had been answered processed. The sender's digits
/// are not rounded away; the refusal names the prices either side. Trailing zeros are no finer.
#[test]
fn a_sub_penny_stock_limit_price_is_refused_before_sending() {
    let mut snap = snapshot();
    snap["bots"][1]["sizing"] = json!({"fixed_quantity": "10"});
    let e = engine_with(snap);
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"buy","order_type":"limit","price":190.123}"#, T0));
    for bot in ["alpaca-main", "schwab-main"] {
        assert!(r.contains(&format!("bot {bot}: the limit price 190.123 for AAPL is finer")), "{r}");
    }
    assert!(r.contains("send 190.12 or 190.13"), "{r}");
    let r = reason(&post(&e, r#"{"ticker":"TSLA","action":"buy","order_type":"limit","price":"0.12345"}"#, T0 + 1));
    assert!(r.contains("$0.0001 below $1") && r.contains("send 0.1234 or 0.1235"), "{r}");
    // A working order re-priced sub-penny is refused alike.
    let r = reason(&post(&e, r#"{"ticker":"MSFT","action":"MODIFY","price":"410.555"}"#, T0 + 2));
    assert!(r.contains("the limit price 410.555 for MSFT is finer"), "{r}");
    for (i, price) in ["190.10", "190.100", "190.1", "0.1234", "1"].iter().enumerate() {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","order_type":"limit","price":"{price}"}}"#);
        let o = post(&e, &body, T0 + 10 + i as i64);
        assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 2), "{price}: {}", o.to_json());
        assert!(o.orders[0].request.body.as_bytes().windows(price.len()).any(|w| w == price.as_bytes()), "{price}");
    }
}

/// TradersPost's `limitPriceType` prices an option's limit from the snapshot's quotes as it does a stock's: it
/// was ignored for options, so a buy asked at the bid (1.00) went out at the strategy's ask (1.20), $20 a
/// contract more, answered processed.
#[test]
fn an_option_alerts_own_limit_target_prices_it() {
    let e = engine_with(json!({
        "id": "o2", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "limit", "limit_target": "ask", "allowed_instruments": ["SPY"],
        "directions": {"long": true, "short": true},
        "rules": {"buy": "open_long", "sell": "close_long"},
        "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 45 } },
        "bots": [ {"id": "r", "broker": "tradier", "account_id": "R", "sizing": {"fixed_quantity": "1"}} ],
        "market": { "quotes": {
            "SPY240119C00450000": {"bid": "1.00", "ask": "1.20", "last": "1.15"},
            "SPY240119C00455000": {"bid": "0.40", "ask": "0.50", "last": "0.45"} } } }));
    let price_sent = |o: &strategy_webhook::Outcome| {
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        let body = String::from_utf8_lossy(o.orders[0].request.body.as_bytes()).into_owned();
        body.split('&').find_map(|kv| kv.strip_prefix("price=")).map(str::to_string).unwrap_or(body)
    };
    let single = r#"{"ticker":"SPY240119C00450000","action":"buy","limitPriceType":"WHICH"}"#;
    for (i, (which, want)) in
        [("bid", "1.00"), ("ask", "1.20"), ("mark", "1.10"), ("ask_bid", "1.00"), ("last", "1.15")]
            .into_iter()
            .enumerate()
    {
        let o = post(&e, &single.replace("WHICH", which), T0 + i as i64);
        assert_eq!(price_sent(&o), want, "{which}");
    }
    // Without one, the strategy's Limit Target (ask), as before; the alert's price still wins over both.
    assert_eq!(price_sent(&post(&e, r#"{"ticker":"SPY240119C00450000","action":"buy"}"#, T0 + 10)), "1.20");
    let priced = r#"{"ticker":"SPY240119C00450000","action":"buy","price":"1.05","limitPriceType":"bid"}"#;
    assert_eq!(price_sent(&post(&e, priced, T0 + 11)), "1.05");
    // A debit spread: its bid is 1.00 − 0.50, its ask 1.20 − 0.40.
    let spread = r#"{"ticker":"SPY","action":"buy","limitPriceType":"WHICH","legs":[
        {"symbol":"SPY240119C00450000","action":"buy_to_open"},{"symbol":"SPY240119C00455000","action":"sell_to_open"}]}"#;
    for (i, (which, want)) in [("bid", "0.50"), ("ask", "0.80"), ("ask_bid", "0.50")].into_iter().enumerate() {
        let o = post(&e, &spread.replace("WHICH", which), T0 + 20 + i as i64);
        assert_eq!(price_sent(&o), want, "spread at {which}");
    }
}

/// `entry` on an option ticker: the parse cannot tell the contract's side from the word before the strategy's
/// rules give the direction, so the one leg went to the builder without an action and every try was answered 500
/// (`legs[0] has no action`), though `buy` traded. The direction the rules decide says it; a structure's legs
/// must still each say theirs.
#[test]
fn an_entry_word_on_an_option_ticker_opens_by_the_rules_direction() {
    let snap = |rules: serde_json::Value| {
        json!({
            "id": "o3", "token_hash": TOKEN, "status": "active", "asset_class": "option",
            "order_type": "market", "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
            "rules": rules,
            "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 45 } },
            "bots": [ {"id": "r", "broker": "tradier", "account_id": "R", "sizing": {"fixed_quantity": "1"}} ] })
    };
    let leg_action = |rules: serde_json::Value, body: &str| {
        let o = post(&engine_with(snap(rules)), body, T0);
        assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
        o.orders[0].order.legs[0].action.as_str()
    };
    let entry = r#"{"ticker":"SPY240119C00450000","action":"entry"}"#;
    assert_eq!(leg_action(json!({"entry": "open_long", "exit": "close_long"}), entry), "buy_to_open");
    assert_eq!(leg_action(json!({"entry": "open_short", "exit": "close_short"}), entry), "sell_to_open");
    // Two legs without actions: which one is bought is not guessed.
    let e = engine_with(snap(json!({"entry": "open_long", "exit": "close_long"})));
    let spread =
        r#"{"ticker":"SPY","action":"entry","legs":[{"symbol":"SPY240119C00450000"},{"symbol":"SPY240119C00455000"}]}"#;
    let o = post(&e, spread, T0);
    assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// 3Commas' `strategy_info` under another spelling of its key (`strategyInfo`, `StrategyInfo`, `strategy-info`)
/// was skipped whole, as keys match in any case and with or without `_`/`-` everywhere else: a partial exit was
/// read as a plain `sell` and closed the whole position, and a reversal lost its new side.
#[test]
fn strategy_info_is_read_under_any_spelling_of_its_key() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    let partial = r#"{"market_position":"long","prev_market_position":"long","market_position_size":"5","prev_market_position_size":"10"}"#;
    let reversal = r#"{"market_position":"short","prev_market_position":"long"}"#;
    let mut at = T0;
    for key in ["strategy_info", "strategyInfo", "StrategyInfo", "strategy-info", "STRATEGY_INFO"] {
        for content_type in ["application/json", "text/plain"] {
            // An engine each: the same body as JSON and as text is one alert, a duplicate the second time.
            let e = engine_with(snap.clone());
            at += 1;
            let body = format!(r#"{{"ticker":"AAPL","action":"sell","{key}":{partial}}}"#);
            let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some(content_type), at);
            assert_ne!(o.decision, Decision::Processed, "{key} as {content_type}: {}", o.to_json());
            assert!(o.orders.is_empty(), "{key} as {content_type}: {}", o.to_json());
            at += 1;
            let body = format!(r#"{{"ticker":"AAPL","action":"sell","{key}":{reversal}}}"#);
            let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some(content_type), at);
            let intents: Vec<_> = o.orders.iter().map(|r| (&*r.bot, r.order.intent.as_str())).collect();
            let want = [("alpaca-main", "close_long"), ("alpaca-main", "open_short"), ("schwab-main", "open_short")];
            assert_eq!(intents, want, "{key} as {content_type}: {}", o.to_json());
        }
    }
}

/// A snapshot of one bot trading `instrument` of `asset_class`.
fn one_bot(bot: serde_json::Value, asset_class: &str, instrument: &str) -> strategy_webhook::Engine {
    let mut snap = snapshot();
    snap["asset_class"] = json!(asset_class);
    snap["allowed_instruments"] = json!([instrument]);
    snap["bots"] = json!([bot]);
    engine_with(snap)
}

/// Coinbase's `FAILED` and Tradier's `error` are final (rejected): taken for working, a CLOSE cancelled such an
/// order first and waited on that cancel, which the broker refuses, so the close was never sent.
#[test]
fn failed_and_error_orders_are_not_working() {
    for state in ["FAILED", "error"] {
        let e = one_bot(
            json!({"id": "cb", "broker": "coinbase", "account_id": "C", "sizing": {"fixed_quantity": "1"},
                "positions": [{"instrument": "BTC-USD", "direction": "long", "quantity": "1"}],
                "working_orders": [{"id": "dead-1", "instrument": "BTC-USD", "direction": "long", "intent": "exit",
                    "order_type": "limit", "price": "70000", "quantity": "1", "duration": "gtc", "state": state}]}),
            "crypto",
            "BTC-USD",
        );
        let o = post(&e, r#"{"ticker":"BTC-USD","action":"CLOSE","direction":"LONG"}"#, T0);
        assert_eq!(o.decision, Decision::Processed, "{state}: {}", o.to_json());
        let kinds: Vec<_> = o.orders.iter().map(|r| (r.kind.as_str(), r.after.is_some())).collect();
        assert_eq!(kinds, [("place", false)], "{state}: {}", o.to_json());
    }
}

/// A MODIFY's price for a working market order was dropped, the replace sent unchanged and answered processed:
/// the order filled at the market the sender meant to cap. It is refused, naming the order.
#[test]
fn a_modify_price_of_a_market_order_is_refused() {
    let e = one_bot(
        json!({"id": "a", "broker": "alpaca", "account_id": "A", "sizing": {"fixed_quantity": "1"},
            "working_orders": [{"id": "m-1", "instrument": "AAPL", "direction": "long", "intent": "entry",
                "order_type": "market", "quantity": "10", "state": "accepted"}]}),
        "equity",
        "AAPL",
    );
    let r = reason(&post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":180}"#, T0));
    assert!(r.contains("MODIFY cannot set the price 180 on working order m-1: it is a market order"), "{r}");
    // With a size that is the order's own (a template's `{{strategy.order.contracts}}` unchanged) it changed
    // nothing either: an unchanged replace went out and the price was dropped.
    let same = r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":181,"quantity":10}"#;
    let r = reason(&post(&e, same, T0 + 100));
    assert!(r.contains("MODIFY cannot set the price 181 on working order m-1"), "{r}");
    // A re-size of it goes out as before: by quantity, with or without a price beside it (a template's
    // `{{close}}`), and by notional, which the price sizes (1000 / 200 = 5).
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":5}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":5,"price":200}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","notional":1000,"price":200}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 1 + i as i64);
        assert_eq!((o.decision, o.orders.len()), (Decision::Processed, 1), "{body}: {}", o.to_json());
        assert_eq!(o.orders[0].order.quantity.to_string(), "5", "{body}: {}", o.to_json());
    }
}

/// The time is the host's, and a host's clock can be anything: at the ends of the range the windows' arithmetic
/// overflowed (a panic in a debug build, where the C ABI answered SWH_PANIC). Any time is answered, and a repeat
/// at the same time is a duplicate.
#[test]
fn any_time_the_host_passes_is_answered() {
    for now in [i64::MAX, i64::MAX / 2 + 1, i64::MIN, i64::MIN / 2 - 1, -1, 0] {
        let e = engine();
        let body = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"t"}}"#;
        let first = post(&e, body, now);
        assert_ne!(first.http_status, 500, "{now}: {}", first.to_json());
        let again = post(&e, body, now);
        assert_eq!(again.decision, Decision::Duplicate, "{now}: {}", again.to_json());
        // And a step either way from there.
        let _ = post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, now.saturating_add(1));
        let _ = post(&e, r#"{"ticker":"TSLA","action":"buy"}"#, now.saturating_sub(1));
    }
}

/// Spec, dedup rules 1 and 4: without `metadata.message_id` the key is the body, and any change makes a new alert.
/// PickMyTrade's `date` and TV-Hub's `alertTimestamp` key their own alerts (to the second, with what the alert does:
/// README), but a `date` in any other body is the sender's own note of the time: keyed by it, a scale-in at another
/// price in the same second was answered duplicate. Nor does a time key a MODIFY, whose price is what it says.
#[test]
fn a_date_keys_only_pickmytrades_alerts_and_never_a_modify_or_cancel() {
    let e = engine();
    let scale_in =
        |price: &str| format!(r#"{{"ticker":"AAPL","action":"buy","price":{price},"date":"2024-01-19T15:00:00Z"}}"#);
    assert_eq!(post(&e, &scale_in("190.10"), T0).decision, Decision::Processed);
    assert_eq!(post(&e, &scale_in("190.12"), T0 + 1_000).decision, Decision::Processed, "a scale-in");
    assert_eq!(post(&e, &scale_in("190.12"), T0 + 2_000).decision, Decision::Duplicate, "the same body again");

    let mut snap = snapshot();
    snap["bots"][0]["working_orders"] = json!([{"id": "w1", "instrument": "MSFT", "direction": "long",
        "intent": "entry", "order_type": "limit", "price": "410", "quantity": "10", "state": "open"}]);
    let e = engine_with(snap);
    let modify = |price: u32, time: &str| {
        format!(r#"{{"symbol":"MSFT","data":"modify","direction":"long","price":{price},"date":"{time}"}}"#)
    };
    assert_eq!(post(&e, &modify(411, "2024-01-19T15:00:00Z"), T0).decision, Decision::Processed);
    let o = post(&e, &modify(409, "2024-01-19T15:00:00Z"), T0 + 1_000);
    assert_eq!(o.decision, Decision::Processed, "a price correction in the same second: {}", o.to_json());

    // A CANCEL of another order in the same second is another alert too.
    let mut snap = snapshot();
    snap["bots"][0]["working_orders"] = json!([
        {"id": "w1", "instrument": "MSFT", "direction": "long", "intent": "entry", "order_type": "limit",
         "price": "410", "quantity": "10", "state": "open"},
        {"id": "w2", "instrument": "MSFT", "direction": "long", "intent": "entry", "order_type": "limit",
         "price": "405", "quantity": "10", "state": "open"}]);
    let e = engine_with(snap);
    let cancel =
        |id: &str| format!(r#"{{"symbol":"MSFT","data":"cancel","order_id":"{id}","date":"2024-01-19T15:00:00Z"}}"#);
    assert_eq!(post(&e, &cancel("w1"), T0).decision, Decision::Processed);
    assert_eq!(post(&e, &cancel("w2"), T0 + 1_000).decision, Decision::Processed, "a cancel of the other order");
    // A `data` that is only a note beside an `action` does not make a body PickMyTrade's.
    let e = engine();
    let noted = |price: &str| {
        format!(
            r#"{{"ticker":"AAPL","action":"buy","price":{price},"data":"RSI crossed 30","date":"2024-01-19T15:00:00Z"}}"#
        )
    };
    assert_eq!(post(&e, &noted("190.10"), T0).decision, Decision::Processed);
    assert_eq!(post(&e, &noted("190.12"), T0 + 1_000).decision, Decision::Processed, "a noted scale-in");

    // Two option contracts on one underlying in the same second are two alerts.
    let e = engine_with(json!({
        "id": "o2", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "market", "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
        "rules": {"buy": "open_long", "sell": "close_long"},
        "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 45 } },
        "bots": [ {"id": "r", "broker": "tradier", "account_id": "R", "sizing": {"fixed_quantity": "1"}} ] }));
    let option = |symbol: &str| format!(r#"{{"symbol":"{symbol}","data":"buy","date":"2024-01-19T15:00:00Z"}}"#);
    assert_eq!(post(&e, &option("SPY240119C00450000"), T0).decision, Decision::Processed);
    assert_eq!(post(&e, &option("SPY240119P00440000"), T0 + 1_000).decision, Decision::Processed, "the put");
    assert_eq!(post(&e, &option("SPY240119P00440000"), T0 + 2_000).decision, Decision::Duplicate, "its resend");

    // PickMyTrade's own alerts keep their key: a resend is a duplicate even with another price.
    let e = engine();
    let pmt =
        |price: &str| format!(r#"{{"symbol":"AAPL","data":"buy","price":{price},"date":"2024-01-19T15:00:00Z"}}"#);
    assert_eq!(post(&e, &pmt("190.10"), T0).decision, Decision::Processed);
    assert_eq!(post(&e, &pmt("190.12"), T0 + 1_000).decision, Decision::Duplicate);
}

/// A limit CLOSE priced by the alert, one bot's position holding a contract that no longer trades (the SPX
/// monthly on its expiration day): that bot's close is refused (its price is the whole structure's), and it was
/// a 500 for the whole delivery, so another bot's close, with nothing wrong with it, never went either.
#[test]
fn one_bots_dead_leg_does_not_take_the_other_bots_priced_close_down() {
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a, "ratio": 1 });
    let bots = json!([
        {"id": "a", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"},
         "positions": [{"instrument": "SPX", "direction": "long", "quantity": "1",
           "legs": [leg("SPX   240119C04500000", "sell_to_open"), leg("SPXW240126C04500000", "buy_to_open")]}]},
        {"id": "b", "broker": "tradier", "account_id": "VA2", "sizing": {"fixed_quantity": "1"},
         "positions": [{"instrument": "SPX", "direction": "long", "quantity": "1",
           "legs": [leg("SPXW240126C04500000", "buy_to_open"), leg("SPXW240126C04510000", "sell_to_open")]}]}
    ]);
    let snap = json!({"id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "limit", "limit_target": "alert_price", "allowed_instruments": ["SPX"],
        "directions": {"long": true, "short": true},
        "options": {"selection": "external", "expiration": {"min_days": 0, "max_days": 45}}, "bots": bots,
        "market": {"option_chains": {"SPX": {"underlying_price": "4502.30",
            "expirations": ["2024-01-19", "2024-01-22", "2024-01-24", "2024-01-26"],
            "strikes": ["4490", "4500", "4510"]}}}});
    let o = post(&engine_with(snap), r#"{"ticker":"SPX","action":"CLOSE","direction":"LONG","price":4.10}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "bot b's close still goes: {}", o.to_json());
    assert!(o.orders.iter().all(|r| &*r.bot == "b") && !o.orders.is_empty(), "{}", o.to_json());
    assert!(o.to_json().contains("prices the whole"), "bot a's refusal is told: {}", o.to_json());
}

/// No US listed option trades in less than a cent. A premium finer than that from the alert was sent, answered
/// processed, and refused by the broker (an exit then never happened); a stock's was already refused before
/// sending. An option's is now, at every broker, naming the cents either side.
#[test]
fn a_sub_penny_option_price_is_refused_before_sending() {
    for broker in strategy_webhook::broker::BrokerId::ALL.iter().map(|b| b.as_str()).filter(|b| *b != "coinbase") {
        let snap = json!({"id": "opt", "token_hash": TOKEN, "status": "active", "asset_class": "option",
            "order_type": "limit", "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
            "options": {"selection": "external", "expiration": {"min_days": 0, "max_days": 45}},
            "bots": [{"id": "b", "broker": broker, "account_id": "ACC1", "sizing": {"fixed_quantity": "1"}}]});
        let body = r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","price":2.555,
                       "legs":[{"symbol":"SPY240126P00470000","action":"buy_to_open"}]}"#;
        let o = post(&engine_with(snap.clone()), body, T0);
        assert_eq!(o.decision, Decision::Rejected, "{broker}: {}", o.to_json());
        assert!(o.to_json().contains("finer than option prices go (whole cents)"), "{broker}: {}", o.to_json());
        assert!(o.to_json().contains("send 2.55 or 2.56"), "{}", o.to_json());
        let ok = post(&engine_with(snap), &body.replace("2.555", "2.550"), T0 + 1_000);
        assert_eq!(ok.decision, Decision::Processed, "{broker}: {}", ok.to_json());
    }
}

/// Two bots: A holding AAPL with a take-profit working, B with an entry working.
fn two_bots_entry_and_exit() -> Value {
    json!({"id":"s1","token_hash":TOKEN,"status":"active","asset_class":"equity","order_type":"limit",
      "allowed_instruments":["AAPL"],"directions":{"long":true,"short":false},
      "bots":[{"id":"A","broker":"alpaca","account_id":"PA1","sizing":{"fixed_quantity":"10"},
        "positions":[{"instrument":"AAPL","direction":"long","quantity":"10"}],
        "working_orders":[{"id":"tp-a","instrument":"AAPL","direction":"long","intent":"exit","order_type":"limit",
                           "price":"200","quantity":"10","state":"open"}]},
       {"id":"B","broker":"alpaca","account_id":"PA2","sizing":{"fixed_quantity":"10"},
        "working_orders":[{"id":"en-b","instrument":"AAPL","direction":"long","intent":"entry","order_type":"limit",
                           "price":"180","quantity":"10","state":"open"}]}],
      "market":{"quotes":{"AAPL":{"bid":"190.10","ask":"190.15"}}}})
}

/// A MODIFY naming neither the entry nor the exit, with an entry working on one bot and an exit on another: one
/// price for both moved the exit to the entry's level or the entry to the exit's (a buy limit far above the
/// market, bought at once). Refused, asking which.
#[test]
fn a_modify_of_an_entry_on_one_bot_and_an_exit_on_another_asks_which() {
    let e = engine_with(two_bots_entry_and_exit());
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":205}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.orders.is_empty() && o.reason.as_deref().is_some_and(|r| r.contains("\"target\"")), "{}", o.to_json());
    // Naming the exit: bot A's take-profit alone moves.
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":205,"target":"exit"}"#, T0 + 1);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let moved: Vec<(&str, Option<&str>)> = o.orders.iter().map(|r| (&*r.bot, r.order_id.as_deref())).collect();
    assert_eq!(moved, [("A", Some("tp-a"))]);
    // A third bot holding both does not make the other two's one order: still refused whole.
    let mut s3 = two_bots_entry_and_exit();
    s3["bots"].as_array_mut().unwrap().push(json!({"id":"C","broker":"alpaca","account_id":"PA3",
        "sizing":{"fixed_quantity":"10"},"positions":[{"instrument":"AAPL","direction":"long","quantity":"10"}],
        "working_orders":[{"id":"en-c","instrument":"AAPL","direction":"long","intent":"entry","order_type":"limit",
                           "price":"180","quantity":"10","state":"open"},
                          {"id":"tp-c","instrument":"AAPL","direction":"long","intent":"exit","order_type":"limit",
                           "price":"200","quantity":"10","state":"open"}]}));
    let o = post(&engine_with(s3), r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":185}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.orders.is_empty());
}

/// `cancel: true` on an entry every bot refuses (here, holding the other side): the cancel was sent and the alert
/// answered processed, the resting entry gone and nothing in its place. A bot's cancels go with its refused
/// entry, and with no bot left the alert is rejected, as without `cancel: true`.
#[test]
fn cancel_true_on_an_entry_every_bot_refuses_is_rejected_whole() {
    let snap = |second_bot: bool| {
        let mut bots = vec![json!({"id":"A","broker":"alpaca","account_id":"PA1","sizing":{"fixed_quantity":"10"},
            "positions":[{"instrument":"AAPL","direction":"long","quantity":"10"}],
            "working_orders":[{"id":"en-s","instrument":"AAPL","direction":"short","intent":"entry",
                               "order_type":"limit","price":"195","quantity":"10","state":"open"}]})];
        if second_bot {
            bots.push(json!({"id":"B","broker":"alpaca","account_id":"PA2","sizing":{"fixed_quantity":"10"},
                "working_orders":[{"id":"en-b","instrument":"AAPL","direction":"short","intent":"entry",
                                   "order_type":"limit","price":"196","quantity":"10","state":"open"}]}));
        }
        json!({"id":"s1","token_hash":TOKEN,"status":"active","asset_class":"equity","order_type":"market",
          "allowed_instruments":["AAPL"],"directions":{"long":true,"short":true},
          "rules":{"buy":"open_long","sell":"open_short"},"bots":bots,
          "market":{"quotes":{"AAPL":{"bid":"190.10","ask":"190.15"}}}})
    };
    let body = r#"{"ticker":"AAPL","action":"sell","cancel":true}"#;
    let o = post(&engine_with(snap(false)), body, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.orders.is_empty());
    // A second bot that takes the entry: its cancel and entry go, bot A's cancel stays home.
    let o = post(&engine_with(snap(true)), body, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let sent: Vec<(&str, RequestKind)> = o.orders.iter().map(|r| (&*r.bot, r.kind)).collect();
    assert_eq!(sent, [("B", RequestKind::Cancel), ("B", RequestKind::Place)], "{}", o.to_json());
    assert!(o.logs.iter().any(|l| l.message.contains("working entries are left")), "{:?}", o.logs);
}

/// A dry run records nothing, whatever the time it is asked at: one asked at an earlier time was taken for the
/// clock gone back and rewound the real windows, so a resend 2 s after its alert traded again and a 61st POST in
/// the minute got through.
#[test]
fn a_dry_run_at_an_earlier_time_leaves_the_windows_as_they_are() {
    let e = engine();
    let body = r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"m-1"}}"#;
    assert_eq!(post(&e, body, T0).decision, Decision::Processed);
    let dry = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"MSFT","action":"buy"}"#, None, T0 - 299_000);
    assert_eq!(dry.http_status, 200);
    let again = post(&e, body, T0 + 2_000);
    assert_eq!(again.decision, Decision::Duplicate, "{}", again.to_json());
    let e = engine();
    for i in 0..60 {
        let b = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"r{i}"}}}}"#);
        assert_eq!(post(&e, &b, T0 + i).http_status, 200);
    }
    let _ = e.dry_run(TOKEN.as_bytes(), br#"{"ticker":"MSFT","action":"buy"}"#, None, T0 - 31_000);
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"r61"}}"#, T0 + 200);
    assert_eq!(o.http_status, 429, "the 61st POST within 60 s");
}

/// A bot's `symbols` map is the broker's spelling of the same pair: mapped to a pair priced in another currency
/// (`BTCUSD` to `BTC-EUR`), its orders were sized from the dollar notional and priced from the dollar quote, a euro
/// limit marketable by the exchange rate. Refused when the strategy loads; dollar stablecoins stand for the dollar.
#[test]
fn a_symbols_map_to_a_pair_in_another_currency_is_refused() {
    let snap = |to: &str| {
        json!({"id":"c","token_hash":TOKEN,"status":"active","asset_class":"crypto","order_type":"limit","duration":"gtc",
          "limit_target":"mid","allowed_instruments":["BTCUSD"],"directions":{"long":true,"short":false},
          "bots":[{"id":"b","broker":"coinbase","account_id":"C","sizing":{"fixed_notional":"100"},"symbols":{"BTCUSD": to}}],
          "market":{"quotes":{"BTCUSD":{"bid":"43000.10","ask":"43000.40"}}}})
    };
    for to in ["BTC-EUR", "BTC-GBP", "ETH-BTC"] {
        let e = strategy_webhook::Strategy::from_json(snap(to).to_string().as_bytes()).unwrap_err().to_string();
        assert!(e.contains("symbols") && e.contains("priced in"), "{to}: {e}");
    }
    for to in ["BTC-USD", "BTC-USDC", "BTC-USDT"] {
        assert!(strategy_webhook::Strategy::from_json(snap(to).to_string().as_bytes()).is_ok(), "{to}");
    }
}

/// docs/strategy.md says a crypto pair maps only to a pair, checked when the snapshot loads, but a pair mapped to no
/// pair at all (`"BTCUSD": "XBT"`) loaded, and then every BTCUSD alert was a 500 for the whole delivery: the bot
/// without the map never traded either, and the sender's retries failed the same way.
#[test]
fn a_crypto_pair_mapped_to_no_pair_is_refused_at_load() {
    let mut s = snapshot();
    s["asset_class"] = json!("crypto");
    s["allowed_instruments"] = json!(["BTC-USD"]);
    s["duration"] = json!("gtc");
    s["bots"] = json!([
        {"id": "cb", "broker": "coinbase", "account_id": "A1", "sizing": {"fixed_quantity": "0.01"},
         "symbols": {"BTCUSD": "XBT"}},
        {"id": "alp", "broker": "alpaca", "account_id": "A2", "sizing": {"fixed_quantity": "0.01"}}
    ]);
    s["market"] = json!({"quotes": {"BTC-USD": {"bid": "40000", "ask": "40001", "last": "40000"}}});
    match strategy_webhook::Strategy::from_json(s.to_string().as_bytes()) {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("bots[0].symbols") && e.contains("XBT"), "{e}");
        }
        Ok(_) => {
            let e = engine_with(s);
            let o = post(&e, r#"{"ticker":"BTCUSD","action":"OPEN","direction":"LONG"}"#, T0);
            panic!("the snapshot loaded; an OPEN is answered {} {:?}", o.http_status, o.reason);
        }
    }
    // A key that is no pair may map to anything: only a pair's spelling is held to a pair.
    s["bots"][0]["symbols"] = json!({"BTC-USD": "BTC-USD", "XBT": "XBT"});
    assert!(strategy_webhook::Strategy::from_json(s.to_string().as_bytes()).is_ok());
}

/// SPX and SPXW trade in $0.05 under $3 and $0.10 from $3 a contract, and their spreads in $0.05: a sender's price
/// off that tick was sent, answered processed, and rejected at the exchange, a CLOSE leaving the position open.
#[test]
fn an_spx_price_off_the_index_tick_is_refused_before_sending() {
    let spx = |bot: Value| {
        json!({"id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "limit",
            "allowed_instruments": ["SPX"], "directions": {"long": true, "short": true},
            "options": {"selection": "external", "expiration": {"min_days": 0, "max_days": 45}},
            "bots": [bot],
            "market": {"option_chains": {"SPX": {"underlying_price": "4502.30",
                "expirations": ["2024-01-19", "2024-01-22"], "strikes": ["4490", "4500", "4510"]}}}})
    };
    let single = spx(json!({"id": "t", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"},
        "positions": [{"instrument": "SPX", "direction": "long", "quantity": "2",
            "legs": [{"symbol": "SPXW240122C04500000", "action": "buy_to_open"}]}]}));
    let spread = spx(json!({"id": "s", "broker": "schwab", "account_id": "H1", "sizing": {"fixed_quantity": "1"},
        "positions": [{"instrument": "SPX", "direction": "long", "quantity": "2", "legs": [
            {"symbol": "SPXW240122C04500000", "action": "buy_to_open"},
            {"symbol": "SPXW240122C04510000", "action": "sell_to_open"}]}]}));
    let close = |price: &str| format!(r#"{{"ticker":"SPX","action":"CLOSE","direction":"LONG","price":"{price}"}}"#);
    for (snapshot, price, sent) in [
        (&single, "3.07", false),
        (&single, "3.05", false),
        (&single, "2.95", true),
        (&single, "3.10", true),
        (&spread, "-1.23", false),
        (&spread, "-1.25", true),
        (&spread, "-3.15", true),
    ] {
        let o = post(&engine_with(snapshot.clone()), &close(price), T0);
        let processed = o.decision == Decision::Processed && !o.orders.is_empty();
        assert_eq!(processed, sent, "{price}: {}", o.to_json());
        if !sent {
            assert!(o.to_json().contains("off the tick"), "{price}: {}", o.to_json());
        }
    }
}

/// Two deliveries' times out of line (two stalled threads) before the clock's own resume: the second, 30 s past
/// the first, kept the first as a corrected clock, and stacked on it, each key moved by two steps while the
/// resume undid one. Either way a key seen 200 s before its retry came back too old, and the retry traded again.
#[test]
fn two_times_out_of_line_leave_the_keys_their_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    for late in [[T0 - 120_000, T0 - 60_000], [T0 - 100_000, T0 - 200_000]] {
        let e = engine();
        assert_eq!(post(&e, a, T0).decision, Decision::Processed);
        for (i, t) in late.into_iter().enumerate() {
            let other = format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"late-{i}"}}}}"#);
            assert_eq!(post(&e, &other, t).decision, Decision::Processed);
        }
        assert_eq!(post(&e, a, T0 + 200_000).decision, Decision::Duplicate, "{late:?}: AAPL was seen 200 s ago");
    }
}

/// A far-ahead outlier leaves a step pending whose `from` is the outlier's time; a later delivery 30 s behind
/// the latest (a stalled thread) measures every key's age from that outlier.
#[test]
fn far_ahead_outlier_then_a_stalled_thread_expires_live_keys() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    // a host passing microseconds once
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 * 1000).decision, Decision::Processed);
    // back on the right clock
    assert_eq!(post(&e, r#"{"ticker":"TSLA","action":"buy"}"#, T0 + 1_000).decision, Decision::Processed);
    assert_eq!(post(&e, a, T0 + 2_000).decision, Decision::Duplicate, "AAPL seen 2 s ago");
    // a thread that read the clock 40 s ago and stalled
    assert_eq!(
        post(&e, r#"{"ticker":"TSLA","metadata":{"message_id":"n1"},"action":"buy"}"#, T0 - 40_000).decision,
        Decision::Processed
    );
    let o = post(&e, a, T0 + 3_000);
    assert_eq!(o.decision, Decision::Duplicate, "AAPL seen 3 s ago: {}", o.to_json());
}

/// The same pending step makes a key claimed on the right clock after the outlier look brand new at the next
/// step back: the same alert a window later is answered duplicate.
#[test]
fn far_ahead_outlier_then_a_step_back_renews_keys() {
    let b = r#"{"ticker":"TSLA","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 * 1000).decision, Decision::Processed);
    assert_eq!(post(&e, b, T0 + 1_000).decision, Decision::Processed);
    assert_eq!(
        post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"c"}}"#, T0 + 200_000).decision,
        Decision::Processed
    );
    // a thread stalled 40 s
    assert_eq!(
        post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":"d"}}"#, T0 + 160_000).decision,
        Decision::Processed
    );
    let o = post(&e, b, T0 + 302_000);
    assert_eq!(o.decision, Decision::Processed, "TSLA was seen 301 s ago");
}

/// A genuine NTP step of 60 s shortly after a far-ahead outlier.
#[test]
fn far_ahead_outlier_then_ntp_step_expires_live_keys() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 * 1000).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"TSLA","action":"buy"}"#, T0 + 2_000).decision, Decision::Processed);
    // NTP steps the clock back 60 s; the sender retries AAPL 5 s after it was first sent
    let o = post(&e, a, T0 + 5_000 - 60_000);
    assert_eq!(o.decision, Decision::Duplicate, "AAPL seen 5 s ago: {}", o.http_status);
}

/// Two deliveries timed in microseconds (one host code path's mistake), ten seconds apart: the alert between them
/// is forgotten, and its retry trades again.
#[test]
fn two_microsecond_times_forget_the_alert_between_them() {
    let b = r#"{"ticker":"TSLA","action":"buy"}"#;
    let e = engine();
    assert_eq!(
        post(&e, r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"u1"}}"#, T0 * 1000).decision,
        Decision::Processed
    );
    assert_eq!(post(&e, b, T0 + 1_000).decision, Decision::Processed);
    assert_eq!(
        post(&e, r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"u2"}}"#, (T0 + 10_000) * 1000).decision,
        Decision::Processed
    );
    let o = post(&e, b, T0 + 12_000);
    assert_eq!(o.decision, Decision::Duplicate, "TSLA seen 11 s ago");
}

/// The host's clock corrected back by 190 s (it ran fast), with deliveries every 20 s on the corrected clock: an
/// alert seen just before the correction comes again 370 s later, a new alert. Kept only a whole dedup window past
/// it, the correction was taken for an outlier once the new clock reached the old time, the keys moved forward by the
/// step, and the new alert was answered duplicate. A step is kept once deliveries come on the new clock.
#[test]
fn a_corrected_clock_with_deliveries_after_it_keeps_each_keys_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    deliveries_every(&e, "MSFT", T0 - 180_000, T0 + 170_000, 20_000);
    let o = post(&e, a, T0 + 180_000);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 370 s ago: {}", o.to_json());
}

/// The positions beside a canonical action: a CLOSE leaving the position on its side is a partial close, as `exit`
/// is; an OPEN the positions contradict (the other side, flat after, a position that shrank) is refused. Taken as
/// context, each sold a whole position the sender still held or opened the side the sender was not on.
#[test]
fn a_canonical_action_the_positions_contradict_is_refused() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    let e = engine_with(snap);
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","prevMarketPosition":"long","marketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","prevMarketPosition":"long","marketPosition":"long","prevMarketPositionSize":"10","marketPositionSize":"15"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"SHORT","prevMarketPosition":"long","marketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","marketPosition":"long"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","marketPosition":"long"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"SHORT","prevMarketPosition":"long","marketPosition":"long","prevMarketPositionSize":"10","marketPositionSize":"15"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"SHORT","prevMarketPosition":"long","marketPosition":"long"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","prevMarketPosition":"long","marketPosition":"long","prevMarketPositionSize":"10","marketPositionSize":"5"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","marketPosition":"short"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","marketPosition":"flat"}"#,
        r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"flat","marketPosition":"flat"}"#,
        r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"flat","marketPosition":"flat"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + i as i64 * 1_000);
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
        assert_ne!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
    }
    // What agrees still trades: a long that grew beside OPEN LONG, a reversal's CLOSE LONG leaving a short, a
    // CLOSE leaving flat, an OPEN leaving its own side, the same sizes (no fill: the action decides).
    for (i, body) in [
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","prevMarketPosition":"long","marketPosition":"long","prevMarketPositionSize":"10","marketPositionSize":"15"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","direction":"LONG","marketPosition":"long"}"#,
        r#"{"ticker":"TSLA","action":"OPEN","marketPosition":"short"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","marketPosition":"flat"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","marketPosition":"short"}"#,
        r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG","prevMarketPosition":"long","marketPosition":"long","prevMarketPositionSize":"10","marketPositionSize":"10"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 100_000 + i as i64 * 1_000);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert!(!o.orders.is_empty(), "{body}: {}", o.to_json());
    }
}

/// PineConnector's `closelongshort` on an option ticker is a CLOSE of each side, no reversal: it closes the positions
/// holding the named contract. Taken as a reversal (whose legs describe the position it opens), it closed every
/// option position on the underlying, the February put and the short put spread with the named call spread.
#[test]
fn closelongshort_on_an_option_ticker_closes_only_the_named_contracts_positions() {
    let e = spy_options(json!([
            {"instrument": "SPY", "direction": "long", "quantity": "2", "legs": [
                {"symbol": "SPY240119C00450000", "action": "buy_to_open"},
                {"symbol": "SPY240119C00455000", "action": "sell_to_open"}]},
            {"instrument": "SPY", "direction": "long", "quantity": "4", "legs": [
                {"symbol": "SPY240216P00400000", "action": "buy_to_open"}]},
            {"instrument": "SPY", "direction": "short", "quantity": "3", "legs": [
                {"symbol": "SPY240119P00440000", "action": "sell_to_open"},
                {"symbol": "SPY240119P00435000", "action": "buy_to_open"}]}]));
    let text = |t: &str, n: i64| e.deliver(TOKEN.as_bytes(), t.as_bytes(), Some("text/plain"), T0 + n);
    let one = text("closelong,SPY240119C450", 0);
    assert_eq!((one.decision, one.orders.len()), (Decision::Processed, 1), "{}", one.to_json());
    let both = text("closelongshort,SPY240119C450", 1_000);
    assert_eq!(both.decision, Decision::Processed, "{}", both.to_json());
    assert_eq!(both.orders.len(), 1, "closed positions the alert never named: {}", both.to_json());
}

/// A quiet 200 s between two alerts, then the clock corrected back 210 s: taken for a jump ahead (any gap over 30 s),
/// the step aged AAPL from the time before the gap and gave it a whole new window, and its repeat 310 s later was
/// answered duplicate. Only a jump no clock makes is taken for an outlier.
#[test]
fn a_quiet_gap_then_a_corrected_clock_renews_old_keys() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 + 200_000).decision, Decision::Processed);
    // NTP steps the clock back 210 s; deliveries every 10 s on the corrected clock
    deliveries_every(&e, "TSLA", T0 - 10_000, T0 + 90_000, 10_000);
    let o = post(&e, a, T0 + 100_000);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 310 s ago: {}", o.to_json());
}

/// The same with the corrected clock seen again only once it caught up (the step undone): AAPL's key was moved 200 s
/// later than it was seen, and a new alert 310 s after it was answered duplicate.
#[test]
fn a_quiet_gap_then_a_sparse_corrected_clock_renews_old_keys() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 + 200_000).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"TSLA","action":"buy"}"#, T0 - 10_000).decision, Decision::Processed);
    let b = r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"b"}}"#;
    assert_eq!(post(&e, b, T0 + 210_000).decision, Decision::Processed);
    let o = post(&e, a, T0 + 310_000);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 310 s ago on the clock: {}", o.to_json());
}

/// A host passing microseconds once, then a thread stalled 40 s, then deliveries on time: the step from the outlier
/// was never undone (nothing comes back near its time), AAPL stayed aged by the stall, and its resend 280 s later
/// traded again. The step runs from the time before the jump, and the first delivery on time undoes it.
#[test]
fn far_ahead_outlier_then_a_stalled_thread_first_ages_keys_by_the_stall() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 * 1000).decision, Decision::Processed);
    let late = r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"late"}}"#;
    assert_eq!(post(&e, late, T0 - 40_000).decision, Decision::Processed);
    let b = r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"b"}}"#;
    assert_eq!(post(&e, b, T0 + 1_000).decision, Decision::Processed);
    let o = post(&e, a, T0 + 280_000);
    assert_eq!(o.decision, Decision::Duplicate, "AAPL seen 280 s ago: {}", o.to_json());
}

/// PineConnector's `closelongsell` on an option ticker: the new side's step copied the close's leg (`sell_to_close`),
/// and the whole alert failed with a 500, the close of the long with it. It closes the long, then sells to open, as
/// TradersPost's `sell` with `sentiment: bearish` does.
#[test]
fn closelongsell_on_an_option_ticker_closes_then_opens_like_the_traderspost_reversal() {
    let e = spy_options(json!([{"instrument": "SPY", "direction": "long", "quantity": "2", "legs": [
            {"symbol": "SPY240119C00450000", "action": "buy_to_open"}]}]));
    let tp = e.dry_run(
        TOKEN.as_bytes(),
        br#"{"ticker":"SPY240119C00450000","action":"sell","sentiment":"bearish"}"#,
        Some("application/json"),
        T0,
    );
    assert_eq!((tp.decision, tp.orders.len()), (Decision::Processed, 2), "{}", tp.to_json());
    let pc = e.dry_run(TOKEN.as_bytes(), b"60123456789,closelongsell,SPY240119C450", Some("text/plain"), T0 + 1000);
    assert_eq!((pc.http_status, pc.decision, pc.orders.len()), (200, Decision::Processed, 2), "{}", pc.to_json());
    let legs: Vec<String> =
        pc.orders.iter().flat_map(|r| r.order.legs.iter().map(|l| format!("{:?}", l.action))).collect();
    assert_eq!(legs, ["SellToClose", "SellToOpen"], "{}", pc.to_json());
}

/// Two far-ahead outliers in a row (a host passing microseconds twice), then a stalled thread: the second took the
/// first for the clock before it, the step ran from the stall itself, and a resend 280 s after its alert traded again.
#[test]
fn two_far_ahead_outliers_then_a_stalled_thread_keep_the_keys_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0 * 1000).decision, Decision::Processed);
    let again = r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"m2"}}"#;
    assert_eq!(post(&e, again, T0 * 1000 + 2_000).decision, Decision::Processed);
    let late = r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"late"}}"#;
    assert_eq!(post(&e, late, T0 - 40_000).decision, Decision::Processed);
    let b = r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"b"}}"#;
    assert_eq!(post(&e, b, T0 + 1_000).decision, Decision::Processed);
    let o = post(&e, a, T0 + 280_000);
    assert_eq!(o.decision, Decision::Duplicate, "AAPL seen 280 s ago: {}", o.to_json());
}

/// Distinct alerts on `ticker` from `from` to `to` (both included), one every `every` ms, each processed: deliveries
/// on a clock, for the clock-step cases.
fn deliveries_every(e: &Engine, ticker: &str, from: i64, to: i64, every: i64) {
    let mut t = from;
    let mut i = 0;
    while t <= to {
        let other = format!(r#"{{"ticker":"{ticker}","action":"buy","metadata":{{"message_id":"m-{i}"}}}}"#);
        assert_eq!(post(e, &other, t).decision, Decision::Processed, "{t}");
        t += every;
        i += 1;
    }
}

/// Both directions of SPY options, contracts named by the alert, one Tradier bot holding `positions`.
fn spy_options(positions: Value) -> Engine {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["SPY"]);
    snap["directions"] = json!({"long": true, "short": true});
    snap["options"] = json!({"selection": "external"});
    snap["bots"] = json!([{"id": "t", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"},
        "positions": positions}]);
    engine_with(snap)
}

/// A host passing microseconds for good (from the start, or after milliseconds): keys seen past the last time a clock
/// reads were never swept, and one alert a second grew a strategy's windows past 200 KB in an hour (budget 32 KiB).
#[test]
fn a_host_passing_microseconds_for_good_keeps_the_windows_bounded() {
    for first_ms in [false, true] {
        let mut snap = snapshot();
        snap["bots"] = json!([]);
        let e = engine_with(snap);
        if first_ms {
            assert_eq!(post(&e, r#"{"ticker":"MSFT","action":"buy"}"#, T0).decision, Decision::Processed);
        }
        let mut peak = 0;
        for s in 0..3600i64 {
            let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":{s}}}"#);
            let o = post(&e, &body, T0 * 1000 + s * 1_000_000);
            assert_eq!(o.decision, Decision::Processed, "second {s}");
            peak = peak.max(e.store().heap_bytes("s1"));
        }
        assert!(peak < 32 * 1024, "{peak} bytes (milliseconds first: {first_ms}); the budget is 32 KiB");
    }
}

/// A host on microseconds for a few seconds, then back on milliseconds: keys seen in those seconds were swept a
/// window (in microseconds) after, so the resend of an alert first sent 5 s before traded again. Such keys last a
/// thousand windows of the host's units, a window of its real time.
#[test]
fn microseconds_for_a_while_then_milliseconds_keep_the_alerts_keys() {
    let x = r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"x"}}"#;
    for ms_first in [true, false] {
        let e = engine();
        if ms_first {
            assert_eq!(post(&e, r#"{"ticker":"AAPL","action":"buy"}"#, T0).decision, Decision::Processed);
        }
        assert_eq!(post(&e, x, T0 * 1000).decision, Decision::Processed);
        for (i, s) in [2_000i64, 4_000].iter().enumerate() {
            let b = format!(r#"{{"ticker":"TSLA","action":"buy","metadata":{{"message_id":"u{i}"}}}}"#);
            assert_eq!(post(&e, &b, (T0 + s) * 1000).decision, Decision::Processed);
        }
        let o = post(&e, x, T0 + 5_000);
        assert_eq!(o.decision, Decision::Duplicate, "x first sent 5 s ago ({ms_first}): {}", o.to_json());
    }
}

/// A host passing microseconds for good, twenty alerts a second: its rate counts in microseconds too (60 in 60 µs),
/// so its keys, kept a window of its real time, grew past 200 KB in five minutes. At most a full window's count of
/// them is kept.
#[test]
fn a_host_passing_microseconds_at_twenty_a_second_stays_in_budget() {
    let mut snap = snapshot();
    snap["bots"] = json!([]);
    let e = engine_with(snap);
    let mut peak = 0;
    for i in 0..6_000i64 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":{i}}}"#);
        post(&e, &body, T0 * 1000 + i * 50_000);
        peak = peak.max(e.store().heap_bytes("s1"));
    }
    assert!(peak < 32 * 1024, "{peak} bytes; the budget is 32 KiB");
}

/// A crypto CLOSE leaves the dust below the pair's base increment (what the pair cannot trade stays). A
/// `closelongbuy` on that dust took the refused close for a close that may still fill and held the entry back:
/// every later close-and-buy on the pair lost its entry. Dust is nothing to close; the entry goes out, and the
/// close's refusal is still reported.
#[test]
fn dust_left_by_a_close_does_not_stop_the_entry_after_it() {
    let mut s = snapshot();
    s["asset_class"] = json!("crypto");
    s["duration"] = json!("gtc");
    s["allowed_instruments"] = json!(["DOGEUSD"]);
    s["bots"] = json!([{"id": "c", "broker": "coinbase", "account_id": "x", "sizing": {"fixed_quantity": "100"},
        "increments": {"DOGE-USD": {"base_increment": "0.1", "quote_increment": "0.00001", "price_increment": "0.00001"}},
        "positions": [{"instrument": "DOGE-USD", "direction": "long", "quantity": "0.05"}]}]);
    s["market"] = json!({"quotes": {"DOGEUSD": {"bid": "0.12", "ask": "0.1201"}}});
    let e = engine_with(s.clone());
    let o = e.deliver(TOKEN.as_bytes(), b"60123456789,closelongbuy,DOGEUSD", Some("text/plain"), T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let intents: Vec<&str> = o.orders.iter().map(|r| r.order.intent.as_str()).collect();
    assert_eq!(intents, ["open_long"], "{}", o.to_json());
    assert!(o.logs.iter().any(|l| l.message.contains("base increment 0.1")), "the dust is named: {}", o.to_json());
    // A CLOSE of the dust alone is still refused, naming it.
    let e = engine_with(s);
    let o = e.deliver(TOKEN.as_bytes(), b"60123456789,closelong,DOGEUSD", Some("text/plain"), T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.orders.is_empty());
}

/// A price so small that a bot's amount divided by it overflows (1e-27) is the sender's bad number: that bot is
/// refused with the reason and the bot sized by a fixed quantity still trades, answered 200. It was a 500 that
/// failed both bots' orders, and each automatic resend failed the same way. A MODIFY's `notional` divides the same.
#[test]
fn a_tiny_price_refuses_the_amount_sized_bot_and_the_other_still_trades() {
    let e = engine();
    let tiny = "0.000000000000000000000000001";
    let o = post(&e, &format!(r#"{{"ticker":"TSLA","action":"buy","price":{tiny}}}"#), T0);
    assert_eq!(o.http_status, 200, "{}", o.to_json());
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(&*o.orders[0].bot, "alpaca-main");
    let refused = o.logs.iter().find(|l| l.message.contains("schwab-main")).map(|l| l.message.to_string());
    assert!(
        refused.as_deref().is_some_and(|m| m.contains("more units than any order can hold")),
        "{refused:?}\n{}",
        o.to_json()
    );

    // One bot, sized by an amount, asked to re-size its working MSFT entry to an amount at that price.
    let mut v = snapshot();
    v["bots"][0]["sizing"] = json!({ "fixed_notional": "1000" });
    v["bots"].as_array_mut().unwrap().truncate(1);
    let e = engine_with(v);
    let body = format!(r#"{{"ticker":"MSFT","action":"MODIFY","notional":5000,"price":{tiny}}}"#);
    let o = post(&e, &body, T0);
    assert_eq!(o.http_status, 200, "{}", o.to_json());
    assert!(o.response.contains("more units than any order can hold"), "{}", o.to_json());
}

/// A whole number has one spelling, so one key: `-0` is the id `0`, and its resend (re-serialized as `-0`) is a
/// duplicate rather than a second trade. The same holds for a body sent as text, and for one that does not parse.
#[test]
fn a_negative_zero_message_id_is_the_id_zero() {
    let e = engine();
    let first = post(&e, r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":0}}"#, T0);
    assert_eq!(first.decision, Decision::Processed, "{}", first.to_json());
    for (body, ct) in [
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":-0}}"#, Some("application/json")),
        (r#"{"ticker":"AAPL","action":"buy","metadata":{"message_id":-0}}"#, Some("text/plain")),
        (r#"{"ticker":"AAPL","action":"buy","message_id":-0,"price":"x"}"#, Some("application/json")),
    ] {
        let again = e.deliver(TOKEN.as_bytes(), body.as_bytes(), ct, T0 + 1);
        assert_eq!(again.decision, Decision::Duplicate, "{body} as {ct:?}: {}", again.to_json());
    }
}

/// Two ids are one when they are one key: `-0` beside `0` or `"0"` is the id `0`, not a conflict; `-0` beside the
/// string `"-0"` (the key `-0`, a string keyed as written) is two keys, refused as two ids.
#[test]
fn a_message_id_given_twice_agrees_by_its_key() {
    let alert = |id1: &str, id2: &str| {
        format!(r#"{{"ticker":"AAPL","action":"buy","message_id":{id1},"metadata":{{"message_id":{id2}}}}}"#)
    };
    for (a, b) in [("-0", "0"), ("-0", r#""0""#), ("0", "-0"), ("7", r#"" 7 ""#)] {
        for ct in ["application/json", "text/plain"] {
            let r = strategy_webhook::parse(alert(a, b).as_bytes(), Some(ct));
            let id = r.as_ref().map(|a| a[0].message_id.clone());
            let want = if a == "7" { "7" } else { "0" };
            assert_eq!(id.as_ref().ok().and_then(|i| i.as_deref()), Some(want), "{a} beside {b} as {ct}: {r:?}");
        }
    }
    for (a, b) in [("-0", r#""-0""#), ("1", "2")] {
        let r = strategy_webhook::parse(alert(a, b).as_bytes(), Some("application/json"));
        assert!(r.is_err(), "{a} beside {b}: {r:?}");
    }
}

/// A working order whose size is not known, in the snapshot's words: a trader's market order sized by an amount of
/// money (`notional`), listed with `"size_known": false` and a `quantity` of 0.
fn by_amount(id: &str, direction: &str, intent: &str, notional: &str) -> Value {
    json!({"id": id, "instrument": "AAPL", "direction": direction, "intent": intent, "order_type": "market",
           "quantity": "0", "size_known": false, "notional": notional, "state": "accepted"})
}

/// One Alpaca bot holding 10 AAPL long with `working` orders.
fn holding_aapl(working: Value) -> Engine {
    let mut snap = snapshot();
    snap["allowed_instruments"] = json!(["AAPL"]);
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"] = json!([{"id": "a", "broker": "alpaca", "account_id": "PA1", "sizing": {"fixed_quantity": "10"},
        "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "10"}], "working_orders": working}]);
    engine_with(snap)
}

/// The requests of an outcome: kind, working order id, size, and which earlier request each waits for.
fn requests(o: &strategy_webhook::Outcome) -> Vec<(RequestKind, Option<String>, String, Option<usize>)> {
    o.orders
        .iter()
        .map(|r| {
            let after = r.after.as_ref().and_then(|a| o.orders.iter().position(|p| &p.client_order_id == a));
            (r.kind, r.order_id.clone(), r.order.quantity.to_string(), after)
        })
        .collect()
}

/// A trader's sell of $500 of a stock the bot holds long, working beside the position: a CLOSE pulls it first and
/// sells the whole position once it is pulled, as it does a sell sized by count. Left working beside the close, the
/// broker refused the close (the shares held for the sell), or both filled and the account went short.
#[test]
fn a_close_cancels_a_working_exit_whose_size_is_not_known_first() {
    let e = holding_aapl(json!([by_amount("n1", "long", "exit", "500")]));
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","direction":"LONG"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert_eq!(
        requests(&o),
        [
            (RequestKind::Cancel, Some("n1".to_owned()), "0".to_owned(), None),
            (RequestKind::Place, None, "10".to_owned(), Some(0))
        ],
        "{}",
        o.to_json()
    );
}

/// A CANCEL pulls a working entry whose size is not known (a trader's $500 buy) as it pulls any working entry, alone
/// or beside the bot's own.
#[test]
fn a_cancel_pulls_a_working_entry_whose_size_is_not_known() {
    let own = json!({"id": "e1", "instrument": "AAPL", "direction": "long", "intent": "entry", "order_type": "limit",
                     "price": "180", "quantity": "10", "state": "open"});
    for (working, pulled) in [
        (json!([by_amount("n1", "long", "entry", "500")]), vec!["n1"]),
        (json!([own, by_amount("n1", "long", "entry", "500")]), vec!["e1", "n1"]),
    ] {
        let e = holding_aapl(working);
        let o = post(&e, r#"{"ticker":"AAPL","action":"CANCEL","direction":"LONG"}"#, T0);
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        let ids: Vec<&str> = o.orders.iter().filter_map(|r| r.order_id.as_deref()).collect();
        assert!(o.orders.iter().all(|r| r.kind == RequestKind::Cancel), "{}", o.to_json());
        assert_eq!(ids, pulled, "{}", o.to_json());
        // Named by its id, or with no direction (its side is the one working).
        let o = post(&e, r#"{"ticker":"AAPL","action":"CANCEL","order_id":"n1"}"#, T0 + 1);
        let ids: Vec<&str> = o.orders.iter().filter_map(|r| r.order_id.as_deref()).collect();
        assert_eq!(ids, ["n1"], "{}", o.to_json());
    }
}

/// A MODIFY never changes an order whose size is not known: a change states a size, and sized from the listed 0 it
/// went out as an order of nothing. Named by its id it is refused with the reason; beside the bot's own entry it is
/// none of the MODIFY's candidates, so a MODIFY naming neither moves the bot's entry (it was refused as ambiguous),
/// with or without a direction.
#[test]
fn a_modify_never_changes_a_working_order_whose_size_is_not_known() {
    let own = json!({"id": "e1", "instrument": "AAPL", "direction": "long", "intent": "entry", "order_type": "limit",
                     "price": "180", "quantity": "10", "state": "open"});
    let e =
        holding_aapl(json!([own, by_amount("n1", "long", "exit", "500"), by_amount("n2", "short", "entry", "900")]));
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":181}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","price":181}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        let sent: Vec<_> = o.orders.iter().map(|r| (r.order_id.as_deref(), r.order.limit_price)).collect();
        assert_eq!(sent, [(Some("e1"), Some("181".parse().unwrap()))], "{body}: {}", o.to_json());
    }
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","order_id":"n1","quantity":3}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","order_id":"n1","quantity":3}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","target":"exit","quantity":3}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 10 + i as i64);
        assert_eq!(o.decision, Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.orders.is_empty(), "{body}: {}", o.to_json());
        let r = reason(&o);
        assert!(
            r.contains("working order n1 is sized by an amount of money (500), not by a count")
                && r.contains("change it at the broker"),
            "{body}: {r}"
        );
    }
    // Two bots: the bot's own entry on one, a trader's dollar sell on the other. Naming neither was refused as
    // ambiguous (an entry on one bot, an exit on another); the entry moves, and the other bot's order is left
    // alone with the reason.
    let mut snap = two_bots_entry_and_exit();
    snap["bots"][0]["working_orders"] = json!([by_amount("n1", "long", "exit", "500")]);
    let o = post(&engine_with(snap), r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":181}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let moved: Vec<(&str, Option<&str>)> = o.orders.iter().map(|r| (&*r.bot, r.order_id.as_deref())).collect();
    assert_eq!(moved, [("B", Some("en-b"))], "{}", o.to_json());
    assert!(
        o.logs.iter().any(|l| l.level == Level::Warn && l.message.contains("bot A: working order n1 is sized")),
        "{:?}",
        o.logs
    );
}

/// A MODIFY growing the bot's exit beside a trader's sell of an amount of money on the same position: taken as
/// covering nothing, the exit grew to the whole position and both could sell it. Its part is not known, so the
/// growth is refused naming it; a smaller exit or a new price still goes.
#[test]
fn a_modify_never_grows_an_exit_beside_one_whose_size_is_not_known() {
    let own = json!({"id": "x1", "instrument": "AAPL", "direction": "long", "intent": "exit", "order_type": "limit",
                     "price": "200", "quantity": "4", "state": "open"});
    let e = holding_aapl(json!([own, by_amount("n1", "long", "exit", "500")]));
    let o = post(&e, r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":6}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    assert!(o.orders.is_empty(), "{}", o.to_json());
    let r = reason(&o);
    assert!(
        r.contains("working exit n1 is sized by an amount of money (500)")
            && r.contains("could sell past the position")
            && r.contains("(working order x1)"),
        "{r}"
    );
    for (i, body) in [
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","quantity":3}"#,
        r#"{"ticker":"AAPL","action":"MODIFY","direction":"LONG","price":201}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + 1 + i as i64);
        assert_eq!(o.decision, Decision::Processed, "{body}: {}", o.to_json());
        assert!(o.orders.iter().all(|r| r.order_id.as_deref() == Some("x1")), "{body}: {}", o.to_json());
    }
}

/// `size_known: false` is the only way to list an order of 0, and it is written 0; `notional` goes with it alone.
#[test]
fn a_working_order_of_zero_is_only_one_whose_size_is_not_known() {
    let with = |order: Value| {
        let mut snap = snapshot();
        snap["bots"][0]["working_orders"] = json!([order]);
        strategy_webhook::Strategy::from_json(snap.to_string().as_bytes()).map(|_| ()).map_err(|e| e.to_string())
    };
    let order = |extra: Value| {
        let mut o = json!({"id": "n1", "instrument": "AAPL", "direction": "long", "intent": "exit",
                           "order_type": "market", "quantity": "0", "state": "open"});
        o.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        o
    };
    assert_eq!(with(order(json!({"size_known": false, "notional": "500"}))), Ok(()));
    assert_eq!(with(order(json!({"size_known": false}))), Ok(()), "a size the broker left out");
    let refused = |extra: Value, says: &str| {
        let e = with(order(extra)).expect_err(says);
        assert!(e.contains(says), "{e}");
    };
    refused(json!({}), "`bots[0].working_orders[0].quantity` must be above zero");
    refused(json!({"notional": "500"}), "`bots[0].working_orders[0].quantity` must be above zero");
    refused(json!({"size_known": false, "quantity": "3"}), "`bots[0].working_orders[0].quantity` must be 0 when");
    refused(json!({"quantity": "3", "notional": "500"}), "`bots[0].working_orders[0].notional` is only for");
    refused(json!({"size_known": false, "notional": "0"}), "`bots[0].working_orders[0].notional` must be above zero");
    refused(json!({"size_known": "no"}), "`bots[0].working_orders[0].size_known`");
}

/// A bot sized by `percent_of_equity` whose equity times the percentage is past any number here is refused for
/// that bot alone, as an amount past any unit cost is (`sizing::past_any_cost`, `SizeBeyondAny`): the other bots'
/// orders still go. Mapped to `OrderError::Overflow`, it was a 500 for the whole delivery: the Alpaca bot's 10 shares were
/// not sent either, and every resend failed the same way.
#[test]
fn an_equity_past_any_amount_refuses_that_bot_and_lets_the_others_trade() {
    let mut snap = snapshot();
    snap["bots"][1]["sizing"] = json!({"percent_of_equity": "100"});
    snap["bots"][1]["equity"] = json!("1000000000000000000000000000");
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","price":"190.10"}"#, T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(&*o.orders[0].bot, "alpaca-main");
    assert_eq!(o.orders[0].order.quantity.to_string(), "10");
    let said = o.to_json();
    assert!(said.contains("more units than any order can hold") && said.contains("schwab-main"), "{said}");
}

/// A number whose exponent is `i64::MIN` (22 bytes, within every length guard) is no number: `exponent.abs()`
/// overflowed (a panic with overflow checks, `i64::MIN` again without them, which passed the `> 64` guard and had
/// 9.2e18 zeros written out: "capacity overflow"): every resend of such an alert panicked.
#[test]
fn an_exponent_of_i64_min_is_no_number_and_no_panic() {
    for text in
        ["1e-9223372036854775808", "1E-9223372036854775808", "-1.5e-9223372036854775808", "1e-09223372036854775808"]
    {
        let got = std::panic::catch_unwind(|| strategy_webhook::decimal::parse(text));
        assert!(matches!(got, Ok(None)), "{text}: {:?}", got.map_err(|_| "panicked"));
    }
}

/// The same through a whole delivery: a price (or a MODIFY's quantity, a leg's strike) of that spelling is a
/// clear 200 rejection naming the field, not a panic out of `Engine::deliver`.
#[test]
fn a_price_with_an_exponent_of_i64_min_is_rejected_not_a_panic() {
    for body in [
        r#"{"ticker":"AAPL","action":"buy","price":"1e-9223372036854775808"}"#,
        r#"{"ticker":"AAPL","action":"buy","price":1e-9223372036854775808}"#,
    ] {
        let e = engine();
        let got = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| post(&e, body, T0)));
        let o = got.unwrap_or_else(|_| panic!("{body}: Engine::deliver panicked"));
        assert_eq!(o.http_status, 200, "{}", o.to_json());
        assert!(o.reason.as_deref().is_some_and(|r| r.contains("`price`")), "{}", o.to_json());
    }
}

/// The same number in a text alert and in a leg's strike: every reader of a decimal reaches it.
#[test]
fn an_exponent_of_i64_min_in_text_or_a_leg_is_no_panic() {
    for (body, ct) in [
        ("buy AAPL @ 1e-9223372036854775808", "text/plain"),
        ("ticker=AAPL action=buy price=1e-9223372036854775808", "text/plain"),
        (
            r#"{"ticker":"SPX","action":"buy","legs":[{"symbol":"SPXW240119C04500000","strike":"1e-9223372036854775808"}]}"#,
            "application/json",
        ),
        (r#"{"ticker":"AAPL","action":"MODIFY","quantity":"1e-9223372036854775808"}"#, "application/json"),
    ] {
        let got = std::panic::catch_unwind(|| {
            strategy_webhook::alert::parse(body.as_bytes(), Some(ct)).map(|_| ()).map_err(|e| e.to_string())
        });
        assert!(got.is_ok(), "{body}: alert::parse panicked");
    }
}

/// A flag repeated, or sent under two of its spellings, with the same value (`isLimit: true` twice, `isLimit` and
/// `is_limit`) says one thing once: every other field given twice alike is taken (`ticker` twice, `ticker` and
/// `symbol` naming one instrument). Each `true` was pushed to a list and any two were "a conflict", so the alert was
/// refused as "`isLimit` and `isLimit` disagree ("true" vs "true")" and no order went out. Two that differ still contradict each other.
#[test]
fn a_flag_repeated_alike_is_no_conflict() {
    let e = engine();
    let mut now = T0;
    // Control: each flag once is taken.
    for body in [
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isLimit":true}"#,
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isMarket":true}"#,
    ] {
        now += 1000;
        assert_eq!(post(&e, body, now).decision, strategy_webhook::Decision::Processed, "{body}");
    }
    for body in [
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isLimit":true,"isLimit":true}"#,
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isLimit":true,"is_limit":true}"#,
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isMarket":true,"isMarket":"true"}"#,
    ] {
        // The same shape with `ticker` repeated is taken:
        now += 1000;
        let o = post(&e, &body.replace(r#""price""#, r#""ticker":"AAPL","price""#), now);
        assert!(!o.reason.as_deref().unwrap_or_default().contains("disagree"), "{body}: {}", o.to_json());
        assert_eq!(o.http_status, 200, "{body}: {}", o.to_json());
        assert_eq!(o.decision, strategy_webhook::Decision::Processed, "{body}: {}", o.to_json());
    }
    for body in [
        r#"{"ticker":"AAPL","action":"buy","price":"190.10","isLimit":true,"is_limit":true,"isMarket":true}"#,
        r#"{"ticker":"AAPL","action":"sell","isClose":true,"closeLong":true,"closeLong":true,"closeShort":true}"#,
    ] {
        now += 1000;
        let o = post(&e, body, now);
        assert_eq!(o.decision, strategy_webhook::Decision::Rejected, "{body}: {}", o.to_json());
        assert!(o.reason.as_deref().unwrap_or_default().contains("disagree"), "{body}: {}", o.to_json());
    }
}

/// A key is read with `_`, `-`, `.` and spaces folded out, so `ticker` followed by 250,000 underscores is the
/// ticker; every error naming such a key quoted it whole, before (`invalid`, a conflict, a placeholder, a leg's,
/// `strategy_info`'s or `order`'s key), where values are cut to 40 characters: a 256 KiB body made a 256 KiB
/// reason, response body and ERROR/WARN log row (and more in the Outcome's JSON). Each stays short now.
#[test]
fn an_error_never_quotes_a_key_whole() {
    let long = |key: &str| format!("{key}{}", "_".repeat(MAX_BODY - 300));
    let json_bodies = [
        format!(r#"{{"{}":"$$","action":"buy"}}"#, long("ticker")),
        format!(r#"{{"ticker":"AAPL","{}":"MSFT","action":"buy"}}"#, long("ticker")),
        format!(r#"{{"{}":"{{{{ticker}}}}","action":"buy"}}"#, long("ticker")),
        format!(r#"{{"ticker":"AAPL","action":"buy","{}":"abc"}}"#, long("price")),
        format!(r#"{{"ticker":"SPX","action":"buy","legs":[{{"{}":"x"}}]}}"#, long("strike")),
        format!(r#"{{"ticker":"AAPL","action":"buy","strategy_info":{{"{}":"zz"}}}}"#, long("market_position")),
        format!(r#"{{"ticker":"AAPL","action":"buy","order":{{"{}":"zz"}}}}"#, long("price")),
    ];
    let e = engine();
    let mut now = T0;
    for body in &json_bodies {
        assert!(body.len() <= MAX_BODY);
        now += 1000;
        let o = post(&e, body, now);
        let reason = o.reason.as_deref().unwrap_or_default();
        let longest_log = o.logs.iter().map(|l| l.message.len()).max().unwrap_or(0);
        assert!(
            reason.len() < 1024 && o.response.len() < 1024 && longest_log < 1024,
            "{}…: reason {} bytes, response {} bytes, longest log row {} bytes: {}…",
            &body[..40],
            reason.len(),
            o.response.len(),
            longest_log,
            reason.chars().take(60).collect::<String>()
        );
    }
}

/// The same through a text alert: the pre-scan lets a key of about 30 KiB through (64 bytes of a word weigh one
/// word), quoted whole in the error it was.
#[test]
fn a_text_error_never_quotes_a_key_whole() {
    let body = format!("action=buy ticker{}=$$", "_".repeat(30_000));
    let err = strategy_webhook::alert::parse(body.as_bytes(), Some("text/plain")).expect_err("no ticker").to_string();
    assert!(err.len() < 1024, "{} bytes: {}…", err.len(), err.chars().take(60).collect::<String>());
}

/// The messages written with the key in them (extended hours, a stop order type) and an unread time's key, kept
/// for `max_alert_age`'s refusal, are cut likewise.
#[test]
fn more_keys_never_quoted_whole() {
    let long = |key: &str| format!("{key}{}", "_".repeat(MAX_BODY - 300));
    for body in [
        format!(r#"{{"ticker":"AAPL","action":"buy","{}":true}}"#, long("extendedHours")),
        format!(r#"{{"ticker":"AAPL","action":"buy","{}":"stop"}}"#, long("order_type")),
        format!(r#"{{"ticker":"AAPL","action":"buy","{}":"yesterday-ish"}}"#, long("time")),
        format!(r#"{{"ticker":"AAPL","action":"buy","{}":"yesterday-ish"}}"#, long("alertTimestamp")),
    ] {
        let got = strategy_webhook::alert::parse(body.as_bytes(), Some("application/json"));
        let shown = match &got {
            Ok(a) => format!("{:?}", a),
            Err(e) => e.to_string(),
        };
        assert!(shown.len() < 2048, "{}…: {} bytes", &body[..40], shown.len());
    }
}

/// A long-only strategy (`sell` → `close_long`, the rules of `docs/strategy.md`'s own example) whose sender's
/// template carries TradingView's `{{strategy.prev_market_position}}` without `marketPosition`: its exit, a sell from
/// a long, was refused at parse as "may have closed it or reversed it", though under these rules a sell is a close
/// either way and no entry of the other side can come of it. The exit never went out and the long stayed open.
#[test]
fn a_sell_from_a_long_on_a_long_only_strategy_still_closes() {
    let e = engine();
    let o = post(&e, r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "the long-only exit was refused: {}", o.to_json());
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
    assert_eq!(o.orders[0].order.intent.as_str(), "close_long", "{}", o.to_json());
}

/// The option strategy of `an_option_strategy_refuses_a_contract_under_any_unread_key`.
fn unread_contract_strategy(selection: &str) -> Value {
    json!({
        "id": "spy", "token_hash": TOKEN, "status": "active", "asset_class": "option", "order_type": "market",
        "allowed_instruments": ["SPY"], "directions": {"long": true, "short": true},
        "options": {"selection": selection, "expiration": {"min_days": 0, "max_days": 45},
                    "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
        "bots": [{"id": "t", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"}}],
        "market": {"option_chains": {"SPY": {"underlying_price": "480.30", "expirations": ["2024-01-26"],
                                              "strikes": ["475", "480", "485"]}},
                   "quotes": {"SPY": {"bid": "480.20", "ask": "480.40", "last": "480.30"}}}
    })
}

/// TradingView names an option as `{{exchange}}:{{ticker}}`, `OPRA:SPY240126P480.0`: as the ticker that reads as the
/// contract (the prefix is cut), but under a key the parser does not read it was not seen as one, and the
/// internal-selection strategy bought its own pick, the 480 CALL, where the sender named the 480 PUT.
#[test]
fn an_unread_contract_with_its_exchange_prefix_is_refused() {
    let e = engine_with(unread_contract_strategy("internal"));
    // Without the prefix it is refused.
    let o = post(&e, r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","note":"SPY240126P480.0"}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    // The same contract as TradingView spells it with its exchange.
    let o = post(&e, r#"{"ticker":"SPY","action":"OPEN","direction":"LONG","note":"OPRA:SPY240126P480.0"}"#, T0 + 1000);
    let bought: Vec<String> =
        o.orders.iter().flat_map(|r| r.order.legs.iter().map(|l| l.contract.occ_unpadded())).collect();
    assert_eq!(o.decision, Decision::Rejected, "`note` named the 480 PUT and {bought:?} was bought: {}", o.to_json());
}

/// Only the first unread key naming a contract is kept: when it repeats the alert's own contract, a second key
/// naming another contract is dropped, and the alert trades. The same body with the two keys swapped is refused:
/// whether the sender's second contract is heeded depends on the order of the keys.
#[test]
fn a_second_unread_contract_is_not_dropped() {
    let e = engine_with(unread_contract_strategy("external"));
    let swapped = r#"{"ticker":"SPY240126P00480000","action":"OPEN","direction":"LONG","hedge":"SPY240126C00485000","note":"SPY240126P00480000"}"#;
    assert_eq!(post(&e, swapped, T0).decision, Decision::Rejected, "control: the other contract first is refused");
    let body = r#"{"ticker":"SPY240126P00480000","action":"OPEN","direction":"LONG","note":"SPY240126P00480000","hedge":"SPY240126C00485000"}"#;
    let o = post(&e, body, T0 + 1000);
    assert_eq!(o.decision, Decision::Rejected, "`hedge` named SPY240126C00485000 and was dropped: {}", o.to_json());
}

/// `CLOSE LONG` beside `prevMarketPosition: short` alone is refused at parse (the strategy was short before the
/// fill: there was no long to close); the same close reached through the rules (`sell` → `close_long`, judged in
/// decide) was not, and sold the bot's long, which the sender's strategy never had.
#[test]
fn a_rule_close_of_a_side_not_held_before_is_refused_as_the_canonical_one() {
    let mut snap = short_held();
    snap["bots"][1]["positions"] = json!([{"instrument": "TSLA", "direction": "long", "quantity": "10"}]);
    let e = engine_with(snap);
    let canonical =
        post(&e, r#"{"ticker":"TSLA","action":"CLOSE","direction":"LONG","prevMarketPosition":"short"}"#, T0);
    assert!(canonical.orders.is_empty(), "{}", canonical.to_json());
    let word = post(&e, r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"short"}"#, T0 + 1_000);
    assert!(word.orders.is_empty(), "a sell from a short closed the long: {}", word.to_json());
    assert_eq!(word.decision, Decision::Rejected, "{}", word.to_json());
    let r = reason(&word);
    assert!(r.contains("`prevMarketPosition` disagree") && r.contains("a sell enters or adds"), "{r}");
    let r = reason(&canonical);
    assert!(r.contains("`prevMarketPosition` disagree") && r.contains("no LONG position to close"), "{r}");
    // From a long, the same sell closes the long.
    let o = post(&e, r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"long"}"#, T0 + 2_000);
    assert_eq!(o.orders.iter().map(|r| r.order.intent.as_str()).collect::<Vec<_>>(), ["close_long"], "{}", o.to_json());
}

/// A CLOSE naming no side took the side of the one position held, so a sender whose strategy was long before the
/// fill had the bot's short bought back. The side held before is the side it closes.
#[test]
fn an_undirected_close_closes_the_side_held_before() {
    let e = engine_with(short_held());
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","prevMarketPosition":"long"}"#, T0);
    assert!(o.orders.is_empty(), "a CLOSE from a long bought back the short: {}", o.to_json());
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    let o = post(&e, r#"{"ticker":"AAPL","action":"CLOSE","prevMarketPosition":"short"}"#, T0 + 1_000);
    assert_eq!(
        o.orders.iter().map(|r| r.order.intent.as_str()).collect::<Vec<_>>(),
        ["close_short"],
        "{}",
        o.to_json()
    );
}

/// `prevMarketPosition` alone is the sender's side: a strategy whose rules fade its sender (`buy` → `open_short`,
/// `sell` → `close_short`) exits when the sender sells from a long and adds when it buys from a long. Compared with
/// the side the rules give, the fading strategy's exit was refused and its short stayed open.
#[test]
fn a_fading_strategy_is_judged_by_its_senders_side() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["rules"] = json!({"buy": "open_short", "sell": "close_short"});
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long"}"#, T0);
    assert_eq!(
        o.orders.iter().map(|r| r.order.intent.as_str()).collect::<Vec<_>>(),
        ["close_short"],
        "{}",
        o.to_json()
    );
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"long"}"#, T0 + 1_000);
    assert_eq!(o.decision, Decision::Processed, "a pyramiding buy: {}", o.to_json());
    // From a short the sender's buy may have been a cover: the fading entry is refused.
    let o = post(&e, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"short"}"#, T0 + 2_000);
    assert!(o.orders.is_empty() && o.decision == Decision::Rejected, "{}", o.to_json());
}

/// After `prevMarketPosition: flat` the sender held nothing: a CLOSE, however it is asked (canonical with or without
/// a side, or a word the rules make a close), closed the bot's position all the same.
#[test]
fn a_close_beside_prev_flat_alone_is_refused_however_it_is_asked() {
    let mut snap = short_held();
    snap["bots"][1]["positions"] = json!([{"instrument": "TSLA", "direction": "long", "quantity": "10"}]);
    let e = engine_with(snap);
    for (i, body) in [
        r#"{"ticker":"TSLA","action":"CLOSE","prevMarketPosition":"flat"}"#,
        r#"{"ticker":"TSLA","action":"CLOSE","direction":"LONG","prevMarketPosition":"flat"}"#,
        r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"flat"}"#,
    ]
    .iter()
    .enumerate()
    {
        let o = post(&e, body, T0 + i as i64 * 1_000);
        assert!(o.orders.is_empty(), "{body} sold the long: {}", o.to_json());
        assert!(reason(&o).contains("`prevMarketPosition` disagree"), "{body}: {}", reason(&o));
    }
    // An entry from flat goes.
    let o = post(&e, r#"{"ticker":"MSFT","action":"buy","prevMarketPosition":"flat"}"#, T0 + 10_000);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// PineConnector's `closelongshort` beside `prevMarketPosition=long` (each step carrying it): the short's CLOSE had
/// nothing the sender held, and its refusal refused the whole command, so the long stayed open.
#[test]
fn closelongshort_beside_prev_long_still_closes_the_long() {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]);
    let e = engine_with(snap);
    let body = "60123456789,closelongshort,AAPL,prevMarketPosition=long";
    let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), T0);
    assert_eq!(o.orders.iter().map(|r| r.order.intent.as_str()).collect::<Vec<_>>(), ["close_long"], "{}", o.to_json());
}

/// Every alert an Outcome shows parses back to itself, a rejected one included: a `sell` the rules made
/// `close_long` beside `prevMarketPosition: short` showed as `CLOSE LONG` beside it, which the parser refused.
#[test]
fn a_rejected_rule_close_renders_an_alert_that_parses_back() {
    let mut snap = short_held();
    snap["bots"][1]["positions"] = json!([{"instrument": "TSLA", "direction": "long", "quantity": "10"}]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"TSLA","action":"sell","prevMarketPosition":"short"}"#, T0);
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    for a in &o.alerts {
        let back = strategy_webhook::alert::parse(a.to_json().as_bytes(), Some("application/json"));
        assert_eq!(back.as_ref().map(|b| b[0].clone()), Ok(a.clone()), "{} does not parse back", a.to_json());
    }
}

fn both_sides_held() -> serde_json::Value {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": true, "short": true});
    snap
}

#[track_caller]
fn refused_with_no_orders(o: &strategy_webhook::Outcome, what: &str) {
    assert!(o.orders.is_empty(), "{what} sent orders: {}", o.to_json());
    assert_eq!(o.decision, Decision::Rejected, "{what}: {}", o.to_json());
}

/// D1. The commit refuses a CLOSE beside `prevMarketPosition: flat` "however it is asked" (canonical, or a buy/sell
/// the rules make a close), but the `exit` word the rules make `close_long` is not judged: the bot's long is sold
/// though the sender's strategy held nothing before the fill.
#[test]
fn exit_beside_prev_flat_alone_is_refused_like_sell() {
    let e = engine(); // long-only: exit -> close_long; alpaca-main holds 10 AAPL long
    let sell = post(&e, r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"flat"}"#, T0);
    refused_with_no_orders(&sell, "sell beside prev flat");
    let exit = post(&e, r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"flat"}"#, T0 + 1_000);
    refused_with_no_orders(&exit, "exit beside prev flat");
    let text =
        e.deliver(TOKEN.as_bytes(), b"ticker=AAPL;action=exit;prevMarketPosition=flat", Some("text/plain"), T0 + 2_000);
    refused_with_no_orders(&text, "KEY=VALUE exit beside prev flat");
}

/// D2. Regression of 69c6e36: before it, any CLOSE (a word the rules make a close included) of a side other than
/// `prevMarketPosition` alone was refused (ClosesSideNotHeld). Now `sell` from a short is refused (EntryMadeClose)
/// but `exit` from a short under `exit -> close_long` sells the bot's long, a position the sender never had.
#[test]
fn exit_from_a_short_under_close_long_is_refused_like_sell() {
    let e = engine();
    let sell = post(&e, r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"short"}"#, T0);
    refused_with_no_orders(&sell, "sell from a short");
    let exit = post(&e, r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"short"}"#, T0 + 1_000);
    refused_with_no_orders(&exit, "exit from a short (rules: close_long)");
    // Both directions, one bot long and one short: the sender's exit from its short sells the long and leaves the
    // short open.
    let mut snap = both_sides_held();
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]);
    snap["bots"][1]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    let e = engine_with(snap);
    let exit = post(&e, r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"short"}"#, T0 + 2_000);
    refused_with_no_orders(&exit, "exit from a short, both sides held (rules: close_long)");
}

/// D3. TradersPost's `cancel: true` on a canonical CLOSE the sender's `prevMarketPosition` contradicts: the CLOSE is
/// skipped as if it were one of PineConnector's `closelongshort` steps (`reversal` is any two-step alert), and the
/// leading CANCEL still pulls the working entry, answered `processed`. The same body with `sell` is refused whole.
#[test]
fn cancel_true_close_beside_prev_flat_is_refused_whole() {
    // alpaca-main holds MSFT long and has a working MSFT long entry.
    let mut snap = snapshot();
    snap["bots"][0]["positions"] = json!([{"instrument": "MSFT", "direction": "long", "quantity": "10"}]);
    let e = engine_with(snap);
    // The word form is refused whole (EntryMadeClose): neither the cancel nor the close goes.
    let sell = post(&e, r#"{"ticker":"MSFT","action":"sell","cancel":true,"prevMarketPosition":"flat"}"#, T0);
    refused_with_no_orders(&sell, "cancel:true sell beside prev flat");
    // The canonical form: CLOSE refused (ClosesSideNotHeld) but skipped, the CANCEL pulls the entry, `processed`.
    let close = post(&e, r#"{"ticker":"MSFT","action":"CLOSE","cancel":true,"prevMarketPosition":"flat"}"#, T0 + 1_000);
    refused_with_no_orders(&close, "cancel:true CLOSE beside prev flat");
    let close = post(
        &e,
        r#"{"ticker":"MSFT","action":"CLOSE","direction":"LONG","cancel":true,"prevMarketPosition":"short"}"#,
        T0 + 2_000,
    );
    refused_with_no_orders(&close, "cancel:true CLOSE LONG beside prev short");
}

/// D4. The Outcome's canonical alerts (after the rules) carry `prevMarketPosition`, and beside it a canonical action
/// is judged differently from the word it came from: a processed fading exit shows `CLOSE SHORT` beside `long`
/// (refused when sent), a rejected buy-from-a-short shows `OPEN LONG` beside `short` (traded when sent).
#[test]
fn outcome_alerts_redelivered_decide_the_same() {
    let mut snap = both_sides_held();
    snap["rules"] = json!({"buy": "open_short", "sell": "close_short"});
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    let fading = engine_with(snap);
    let mut snap = both_sides_held();
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    let plain = engine_with(snap);
    let cases = [
        (&fading, r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long"}"#),
        (&plain, r#"{"ticker":"AAPL","action":"buy","prevMarketPosition":"short"}"#),
    ];
    for (i, (e, body)) in cases.iter().enumerate() {
        let o = post(e, body, T0 + i as i64 * 10_000);
        for a in &o.alerts {
            let again = post(e, &a.to_json(), T0 + i as i64 * 10_000 + 1_000);
            assert_eq!(
                again.decision,
                o.decision,
                "{body} was {:?}, its canonical alert {} is {:?}: {}",
                o.decision,
                a.to_json(),
                again.decision,
                again.to_json()
            );
        }
    }
}

/// A short-only strategy with the given rules; the bots hold a short AAPL position.
fn short_only(rules: serde_json::Value) -> Engine {
    let mut snap = snapshot();
    snap["directions"] = json!({"long": false, "short": true});
    snap["rules"] = rules;
    snap["bots"][0]["positions"] = json!([{"instrument": "AAPL", "direction": "short", "quantity": "10"}]);
    engine_with(snap)
}

/// A short-only strategy fading a long-only sender that sends `entry`/`exit` (no buy/sell rules): the sender held
/// long, the bots hold the faded short; `exit` -> close_short is its close; judged as not fading (from buy/sell
/// rules it does not have), it was refused.
#[test]
fn a_fading_exit_with_entry_and_exit_rules_alone_trades() {
    let e = short_only(json!({"entry": "open_short", "exit": "close_short"}));
    let o = post(&e, r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    assert!(!o.orders.is_empty(), "{}", o.to_json());
}

/// Only an exit rule (entries sent canonical): same.
#[test]
fn a_fading_exit_with_an_exit_rule_alone_trades() {
    let e = short_only(json!({"exit": "close_short"}));
    let o = post(&e, r#"{"ticker":"AAPL","action":"exit","prevMarketPosition":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

/// README: behind `cancel: true` a CLOSE the sender's prevMarketPosition contradicts refuses the whole alert. Beside
/// flat with no position to infer a side from, the CLOSE was NothingToClose (skipped) and the CANCEL went, processed.
#[test]
fn cancel_true_close_beside_prev_flat_no_position_refused_whole() {
    let e = engine(); // MSFT: a working long entry, no position
    let o = post(&e, r#"{"ticker":"MSFT","action":"CLOSE","cancel":true,"prevMarketPosition":"flat"}"#, T0);
    assert!(o.orders.is_empty(), "sent orders: {}", o.to_json());
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
}

// ----- crypto: a product's minimum order size -----

/// The bytes of a Coinbase answer kept under tests/fixtures/brokers/coinbase.
fn coinbase_fixture(file: &str) -> Vec<u8> {
    std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/brokers/coinbase").join(file))
        .unwrap()
}

/// A Coinbase DOGE-USD strategy whose bot holds `held` DOGE, with the product's steps as the server reads them
/// from Coinbase (`GET /products/DOGE-USD`: base_increment 0.1, base_min_size 1, quote_min_size 1).
fn doge_engine(held: &str, sizing: Value) -> Engine {
    let mut s = snapshot();
    s["asset_class"] = json!("crypto");
    s["duration"] = json!("gtc");
    s["order_type"] = json!("limit");
    s["allowed_instruments"] = json!(["DOGEUSD"]);
    s["bots"] = json!([{"id": "c", "broker": "coinbase", "account_id": "x", "sizing": sizing,
        "positions": if held == "0" { json!([]) } else { json!([{"instrument": "DOGE-USD", "direction": "long", "quantity": held}]) }}]);
    s["market"] = json!({"quotes": {"DOGEUSD": {"bid": "0.18", "ask": "0.1801"}}});
    let mut strategy = strategy_from(&s);
    let product = strategy_webhook::broker::BrokerId::Coinbase
        .broker()
        .parse_product(&coinbase_fixture("product_doge.json"))
        .unwrap();
    strategy.bots[0].increments.insert("DOGE-USD".into(), product);
    let e = Engine::new();
    e.upsert(strategy).unwrap();
    e
}

/// Coinbase's minimum order sizes were never read (only its increments were): a CLOSE of 0.9 DOGE (on the 0.1
/// increment, under DOGE-USD's 1 DOGE `base_min_size`) went out as a SELL of 0.9, the sender heard processed, and
/// Coinbase refused it. It is refused for the bot with the reason, before anything is sent.
#[test]
fn crypto_a_close_below_the_products_minimum_size_is_not_sent() {
    let e = doge_engine("0.9", json!({"fixed_quantity": "100"}));
    let o = e.deliver(
        TOKEN.as_bytes(),
        br#"{"ticker":"DOGEUSD","action":"close","direction":"long","price":"0.18"}"#,
        Some("application/json"),
        T0,
    );
    let sent: Vec<String> =
        o.orders.iter().map(|r| String::from_utf8_lossy(r.request.body.as_bytes()).into_owned()).collect();
    assert!(sent.is_empty(), "a SELL Coinbase refuses (under base_min_size 1) was sent: {sent:?}");
    assert_ne!(o.decision, Decision::Processed, "{}", o.to_json());
    let json = o.to_json();
    assert!(json.contains("minimum order size") && json.contains("at the broker"), "{json}");
}

/// The same minimum on an entry: a bot sized by $0.50 bought 2.7 DOGE at 0.18 (on the 0.1 increment, under
/// Coinbase's 1 DOGE and $1 minimums), sent and refused after the sender heard processed.
#[test]
fn crypto_an_entry_below_the_products_minimum_size_is_not_sent() {
    let e = doge_engine("0", json!({"fixed_notional": "0.5"}));
    let o = e.deliver(
        TOKEN.as_bytes(),
        br#"{"ticker":"DOGEUSD","action":"buy","price":"0.18"}"#,
        Some("application/json"),
        T0,
    );
    let sent: Vec<String> =
        o.orders.iter().map(|r| String::from_utf8_lossy(r.request.body.as_bytes()).into_owned()).collect();
    assert!(sent.is_empty(), "a BUY Coinbase refuses (under quote_min_size $1) was sent: {sent:?}");
    assert!(o.to_json().contains("minimum order value 1"), "{}", o.to_json());
    // Above both minimums (5.5 DOGE, $0.99 at 0.18 is under $1; 6 DOGE at 0.18 is $1.08): sent.
    let e = doge_engine("0", json!({"fixed_quantity": "6"}));
    let o = e.deliver(
        TOKEN.as_bytes(),
        br#"{"ticker":"DOGEUSD","action":"buy","price":"0.18"}"#,
        Some("application/json"),
        T0,
    );
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
}

// ----- crypto: orders of a kind this library does not place, and sells of the coin on another pair -----

/// A Coinbase working-orders answer holding a trader's own orders on BTC: a stop-limit sell, a bracket, a limit
/// sell good till a date and a stop-limit good till a date on BTC-USD, a limit sell and a limit buy on BTC-USDC
/// (shapes from the Advanced Trade API reference and coinbase-advanced-py's `OrderConfiguration`).
const COINBASE_TRADERS_BTC_ORDERS: &str = r#"{"orders":[
  {"order_id":"sl1","product_id":"BTC-USD","side":"SELL","status":"OPEN","filled_size":"0",
   "order_configuration":{"stop_limit_stop_limit_gtc":{"base_size":"0.05","limit_price":"58000",
     "stop_price":"58500","stop_direction":"STOP_DIRECTION_STOP_DOWN"}}},
  {"order_id":"tb1","product_id":"BTC-USD","side":"SELL","status":"OPEN","filled_size":"0",
   "order_configuration":{"trigger_bracket_gtc":{"base_size":"0.05","limit_price":"70000","stop_trigger_price":"55000"}}},
  {"order_id":"gtd1","product_id":"BTC-USD","side":"SELL","status":"OPEN","filled_size":"0",
   "order_configuration":{"limit_limit_gtd":{"base_size":"0.05","limit_price":"72000","end_time":"2026-12-31T00:00:00Z",
     "post_only":false}}},
  {"order_id":"slgtd1","product_id":"BTC-USD","side":"SELL","status":"OPEN","filled_size":"0",
   "order_configuration":{"stop_limit_stop_limit_gtd":{"base_size":"0.05","limit_price":"57000","stop_price":"57500",
     "end_time":"2026-12-31T00:00:00Z","stop_direction":"STOP_DIRECTION_STOP_DOWN"}}},
  {"order_id":"usdc-sell","product_id":"BTC-USDC","side":"SELL","status":"OPEN","filled_size":"0",
   "order_configuration":{"limit_limit_gtc":{"base_size":"0.05","limit_price":"75000","post_only":false}}},
  {"order_id":"usdc-buy","product_id":"BTC-USDC","side":"BUY","status":"OPEN","filled_size":"0",
   "order_configuration":{"limit_limit_gtc":{"base_size":"0.05","limit_price":"50000","post_only":false}}}
  ],"has_next":false,"cursor":""}"#;

/// A Coinbase BTC/USD strategy whose bot holds 0.05 BTC, with `working` as its working orders.
fn btc_usd_with(working: Value) -> Engine {
    engine_with(json!({
        "id": "c1", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "duration": "gtc", "allowed_instruments": ["BTC/USD"], "directions": {"long": true, "short": false},
        "bots": [{"id": "cb", "broker": "coinbase", "account_id": "C1", "sizing": {"fixed_quantity": "0.05"},
                  "positions": [{"instrument": "BTC/USD", "direction": "long", "quantity": "0.05"}],
                  "working_orders": working}],
        "market": {"quotes": {"BTC/USD": {"bid": "60000", "ask": "60010"}}}
    }))
}

/// A working order of the bot as a host lists it (the reference server's sync writes a kind or a time in force the
/// core has no word for as `other`).
fn listed(id: &str, instrument: &str, intent: &str, order_type: &str, price: &str, duration: &str) -> Value {
    json!({"id": id, "instrument": instrument, "direction": "long", "intent": intent, "order_type": order_type,
           "price": price, "quantity": "0.05", "state": "open", "duration": duration})
}

/// The requests a delivery made: (kind, the working order's id, client order id, the one it waits on).
fn sequence(o: &strategy_webhook::Outcome) -> Vec<(RequestKind, Option<String>, String, Option<String>)> {
    o.orders
        .iter()
        .map(|r| (r.kind, r.order_id.clone(), r.client_order_id.to_string(), r.after.as_ref().map(|a| a.to_string())))
        .collect()
}

/// Coinbase reads a working order in a configuration this library does not place (a stop-limit, a bracket) with no
/// order type and no time in force: the reference server's sync dropped it, and a CLOSE then sold the whole balance
/// beside the coins it held, which Coinbase refused (insufficient balance): the position stayed open. Listed as
/// `other`, it is cancelled first, and the close waits on that cancel.
#[test]
fn crypto_a_close_cancels_a_working_stop_limit_sell_first() {
    use strategy_webhook::broker::BrokerId;
    use strategy_webhook::model::{Intent, OrderStatus};
    let read = BrokerId::Coinbase.broker().parse_orders(COINBASE_TRADERS_BTC_ORDERS.as_bytes()).unwrap();
    let row = |id: &str| read.iter().find(|o| o.order_id == id).unwrap();
    for id in ["sl1", "tb1", "slgtd1"] {
        let o = row(id);
        assert_eq!(
            (o.status, o.intent, o.order_type, o.duration, o.quantity.to_string()),
            (OrderStatus::Working, Some(Intent::CloseLong), None, None, "0.05".into()),
            "{id}"
        );
    }
    let e = btc_usd_with(json!([listed("sl1", "BTC/USD", "exit", "other", "58000", "other")]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("sl1")), "{}", o.to_json());
    assert_eq!((seq[1].0, seq[1].3.as_deref()), (RequestKind::Place, Some(seq[0].2.as_str())), "the sell waits");
    let cancel = String::from_utf8_lossy(o.orders[0].request.body.as_bytes()).into_owned();
    assert!(o.orders[0].request.path.ends_with("batch_cancel") && cancel.contains("sl1"), "{cancel}");
    let sell = String::from_utf8_lossy(o.orders[1].request.body.as_bytes()).into_owned();
    assert!(sell.contains(r#""side":"SELL""#) && sell.contains(r#""base_size":"0.05""#), "{sell}");
}

/// A trader's sell of BTC on BTC-USDC holds the coins a BTC/USD strategy's CLOSE sells: listed as an exit of the
/// coin under its own pair, it is cancelled before the close, which waits on it.
#[test]
fn crypto_a_close_cancels_a_working_sell_of_the_coin_on_another_pair_first() {
    let read = strategy_webhook::broker::BrokerId::Coinbase
        .broker()
        .parse_orders(COINBASE_TRADERS_BTC_ORDERS.as_bytes())
        .unwrap();
    let sell = read.iter().find(|o| o.order_id == "usdc-sell").unwrap();
    assert_eq!((sell.instrument.as_str(), sell.intent), ("BTC/USDC", Some(strategy_webhook::model::Intent::CloseLong)));
    let e = btc_usd_with(json!([listed("usdc-sell", "BTC/USDC", "exit", "limit", "75000", "gtc")]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("usdc-sell")), "{}", o.to_json());
    assert_eq!((seq[1].0, seq[1].3.as_deref()), (RequestKind::Place, Some(seq[0].2.as_str())), "the sell waits");
}

/// A trader's buy of ETH on ETH-BTC pays in BTC, which the broker holds for it: the reference server's sync lists it
/// as an exit of BTC under the pair the other way round (`BTC/ETH`), of kind `other`, sized by the BTC it holds back
/// and with no price. A BTC/USD CLOSE cancels it first, and the sell waits on that cancel.
#[test]
fn crypto_a_close_cancels_a_working_buy_paid_in_the_coin_first() {
    let exit = json!({"id": "eb1", "instrument": "BTC/ETH", "direction": "long", "intent": "exit",
                      "order_type": "other", "quantity": "0.04", "state": "open", "duration": "gtc"});
    let e = btc_usd_with(json!([exit]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("eb1")), "{}", o.to_json());
    assert_eq!((seq[1].0, seq[1].3.as_deref()), (RequestKind::Place, Some(seq[0].2.as_str())), "the sell waits");
    // No MODIFY restates it.
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"MODIFY","direction":"long","price":"70000"}"#, T0 + 1);
    assert!(o.orders.iter().all(|r| r.order_id.as_deref() != Some("eb1")), "{}", o.to_json());
}

/// A buy of the coin on another pair spends another currency and holds none of the coins a CLOSE sells: listed (a
/// host may list it as an entry of its pair), no CLOSE cancels it while it rests at a limit (a market buy still
/// working is the position not yet filled, and is pulled: below).
#[test]
fn crypto_a_close_leaves_a_buy_on_another_pair_alone() {
    let e = btc_usd_with(json!([listed("usdc-buy", "BTC/USDC", "entry", "limit", "50000", "gtc")]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!((seq.len(), seq[0].0, seq[0].3.as_deref()), (1, RequestKind::Place, None), "{}", o.to_json());
}

/// A market buy of the coin still working (on its pair, or on another pair of the coin, whose coins the sync files
/// as held in every pair) is the position not yet filled: a CLOSE pulls it first, as it does the coin's exits on
/// any pair, and the sell waits for the cancel. A limit buy stays (above).
#[test]
fn crypto_a_close_pulls_a_working_market_buy_of_the_coin_first() {
    for (id, pair) in [("usd-buy", "BTC/USD"), ("usdc-buy", "BTC/USDC")] {
        let mut buy = listed(id, pair, "entry", "market", "0", "gtc");
        buy["price"] = Value::Null;
        let e = btc_usd_with(json!([buy]));
        let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
        assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
        let seq = sequence(&o);
        assert_eq!(seq.len(), 2, "{}", o.to_json());
        assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some(id)), "{}", o.to_json());
        assert_eq!((seq[1].0, seq[1].3.as_deref()), (RequestKind::Place, Some(seq[0].2.as_str())), "the sell waits");
    }
}

/// A MODIFY re-sends an order in its own terms, and a stop-limit or a bracket is no order this library can state:
/// re-sent, it would go out as another kind. Meant alone it is refused with the reason; beside the bot's own exit,
/// a MODIFY naming neither changes the bot's own (not refused as ambiguous).
#[test]
fn crypto_a_modify_never_restates_an_order_of_a_kind_this_library_does_not_place() {
    let e = btc_usd_with(json!([listed("sl1", "BTC/USD", "exit", "other", "58000", "other")]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"MODIFY","direction":"long","price":"59000"}"#, T0);
    assert!(o.orders.is_empty(), "{}", o.to_json());
    assert_eq!(o.decision, Decision::Rejected, "{}", o.to_json());
    let why = o.reason.clone().unwrap_or_default();
    assert!(why.contains("sl1") && why.contains("kind this library does not place"), "{why}");
    let e = btc_usd_with(json!([
        listed("sl1", "BTC/USD", "exit", "other", "58000", "other"),
        listed("x1", "BTC/USD", "exit", "limit", "90000", "gtc"),
    ]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"MODIFY","direction":"long","price":"91000"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let ids: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.as_deref())).collect();
    assert_eq!(ids, [(RequestKind::Replace, Some("x1"))], "{}", o.to_json());
    let o = post(
        &e,
        r#"{"ticker":"BTCUSD","action":"MODIFY","direction":"long","order_id":"sl1","price":"59000"}"#,
        T0 + 1,
    );
    assert!(o.orders.is_empty() && o.reason.as_deref().unwrap_or_default().contains("sl1"), "{}", o.to_json());
}

/// A bot holding only contracts that no longer trade (the SPX monthly, AM-settled, on its expiration day) and a
/// market entry on a live contract still working (queued for the open). A CLOSE LONG means that entry too
/// (`close_pulls`): it is the position the sender holds, not yet filled. The bot's close of the dead contracts is
/// refused ("no longer trade"); that refusal had taken the entry's cancel with it, and the entry filled at the open,
/// the sender having closed. The cancel goes, the close's refusal told beside it.
#[test]
fn a_close_pulls_the_market_entry_beside_a_position_of_contracts_that_no_longer_trade() {
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a, "ratio": 1 });
    let bots = json!([
        {"id": "a", "broker": "tradier", "account_id": "VA1", "sizing": {"fixed_quantity": "1"},
         "positions": [{"instrument": "SPX", "direction": "long", "quantity": "1",
           "legs": [leg("SPX   240119C04500000", "buy_to_open")]}],
         "working_orders": [{"id": "m1", "instrument": "SPX", "direction": "long", "intent": "entry",
           "order_type": "market", "quantity": "1", "state": "open",
           "legs": [leg("SPXW240126C04500000", "buy_to_open")]}]}
    ]);
    let snap = json!({"id": "spx", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "market", "allowed_instruments": ["SPX"],
        "directions": {"long": true, "short": true},
        "options": {"selection": "external", "expiration": {"min_days": 0, "max_days": 45}}, "bots": bots,
        "market": {"option_chains": {"SPX": {"underlying_price": "4502.30",
            "expirations": ["2024-01-19", "2024-01-22", "2024-01-24", "2024-01-26"],
            "strikes": ["4490", "4500", "4510"]}}}});
    let o = post(&engine_with(snap), r#"{"ticker":"SPX","action":"CLOSE","direction":"LONG"}"#, T0);
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect();
    assert_eq!(
        seq,
        [(RequestKind::Cancel, Some("m1".to_owned()))],
        "the working market entry is not pulled: {}",
        o.to_json()
    );
}

/// A notional market entry (size not known) queued for the open is pulled by a CLOSE, alone or beside a position
/// and an `other` stop exit.
#[test]
fn a_close_pulls_a_notional_market_entry() {
    let mut m = aapl_entry("n1", "long", "market", "0");
    m["size_known"] = json!(false);
    m["notional"] = json!("500");
    let e = aapl_bot(json!([]), json!([m]));
    let o = post(&e, CLOSE_LONG_AAPL, T0);
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("n1".to_owned()))], "{}", o.to_json());
    // Beside a position, with an `other` stop exit too.
    let stop = json!({"id": "sl", "instrument": "AAPL", "direction": "long", "intent": "exit",
                      "order_type": "other", "quantity": "10", "state": "open"});
    let mut m = aapl_entry("n1", "long", "market", "0");
    m["size_known"] = json!(false);
    m["notional"] = json!("500");
    let e = aapl_bot(json!([{"instrument": "AAPL", "direction": "long", "quantity": "10"}]), json!([m, stop]));
    let o = post(&e, CLOSE_LONG_AAPL, T0 + 1);
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone(), r.after.is_some())).collect();
    assert_eq!(seq.len(), 3, "{}", o.to_json());
}

/// The sync's buy paid in the coin with no limit price (a market buy, or one sized in money) is
/// listed `BTC/ETH`, exit, `other`, size not known. A BTC/USD CLOSE still cancels it first.
#[test]
fn a_close_cancels_a_buy_paid_in_the_coin_of_unknown_size() {
    let exit = json!({"id": "eb1", "instrument": "BTC/ETH", "direction": "long", "intent": "exit",
                      "order_type": "other", "quantity": "0", "size_known": false, "state": "open", "duration": "gtc"});
    let e = btc_usd_with(json!([exit]));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("eb1")), "{}", o.to_json());
}

/// A strategy trading BTC/USD and ETH/BTC; its bot's limit buy on ETH/BTC (as the sync files it: an ETH/BTC entry)
/// pays in BTC, which the wallet holds for it and counts in the 0.05 BTC position. A CLOSE of BTC/USD sold all 0.05
/// beside that hold without cancelling the buy first: the broker refused it (insufficient balance) and the position
/// stayed open. It cancels the buy first and sells after it; a sell on ETH/BTC (spending ETH) and a buy on ETH/USD
/// (spending dollars) hold no BTC and stay.
#[test]
fn a_close_of_the_coin_pulls_a_buy_paid_in_it_on_a_pair_the_strategy_trades() {
    let entry = json!({"id": "eb1", "instrument": "ETH/BTC", "direction": "long", "intent": "entry",
                       "order_type": "limit", "price": "0.04", "quantity": "1", "state": "open", "duration": "gtc"});
    let sell = json!({"id": "es1", "instrument": "ETH/BTC", "direction": "long", "intent": "exit",
                      "order_type": "limit", "price": "0.06", "quantity": "1", "state": "open", "duration": "gtc"});
    let usd = json!({"id": "eu1", "instrument": "ETH/USD", "direction": "long", "intent": "entry",
                     "order_type": "limit", "price": "2000", "quantity": "1", "state": "open", "duration": "gtc"});
    let e = engine_with(json!({
        "id": "c1", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "duration": "gtc", "allowed_instruments": ["BTC/USD", "ETH/BTC", "ETH/USD"], "directions": {"long": true, "short": false},
        "bots": [{"id": "cb", "broker": "coinbase", "account_id": "C1", "sizing": {"fixed_quantity": "0.05"},
                  "positions": [{"instrument": "BTC/USD", "direction": "long", "quantity": "0.05"}],
                  "working_orders": [sell, entry, usd]}],
        "market": {"quotes": {"BTC/USD": {"bid": "60000", "ask": "60010"}}}
    }));
    let o = post(&e, r#"{"ticker":"BTCUSD","action":"CLOSE","direction":"long"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq = sequence(&o);
    assert_eq!(seq.len(), 2, "{}", o.to_json());
    assert_eq!((seq[0].0, seq[0].1.as_deref()), (RequestKind::Cancel, Some("eb1")), "{}", o.to_json());
    assert_eq!(seq[1].0, RequestKind::Place, "{}", o.to_json());
    assert_eq!(seq[1].3.as_deref(), Some(seq[0].2.as_str()), "the sell waits for the cancel: {}", o.to_json());
    assert_eq!(o.orders[1].order.quantity.to_string(), "0.05", "{}", o.to_json());
}

/// Two positions on SPY held long (the 450 call, and the 460 call with the trader's OCO on it at the broker:
/// a take-profit limit and a stop, both selling the one 460 call, only one of which can fill). A CLOSE naming the
/// 450 call closes that position: the 460's take-profit and stop protect what stays and are not pulled.
#[test]
fn a_close_of_one_position_keeps_the_other_positions_oco() {
    let exit = |id: &str, occ: &str, kind: &str| {
        let mut o = json!({"id": id, "instrument": "SPY", "direction": "long", "intent": "exit", "order_type": kind,
               "quantity": "1", "state": "open", "legs": [{"symbol": occ, "action": "sell_to_close"}]});
        if kind == "limit" {
            o["price"] = json!("9.50");
        }
        o
    };
    let pos = |occ: &str| {
        json!({"instrument": "SPY", "direction": "long", "quantity": "1",
               "legs": [{"symbol": occ, "action": "buy_to_open"}]})
    };
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([pos("SPY240119C00450000"), pos("SPY240119C00460000")]);
    snap["bots"][0]["working_orders"] =
        json!([exit("tp460", "SPY240119C00460000", "limit"), exit("sl460", "SPY240119C00460000", "other"),]);
    let e = engine_with(snap.clone());
    let o = post(&e, r#"{"ticker":"SPY240119C450","action":"CLOSE","direction":"LONG","order_type":"market"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect();
    assert_eq!(seq, [(RequestKind::Place, None)], "{}", o.to_json());
}

/// A short put held, with the trader's buy-stop to close it (`other`): a CLOSE SHORT cancels it first.
#[test]
fn a_close_of_a_short_option_cancels_its_buy_stop() {
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "short", "quantity": "1",
        "legs": [{"symbol": "SPY240119P00450000", "action": "sell_to_open"}]}]);
    snap["bots"][0]["working_orders"] = json!([{"id": "bs1", "instrument": "SPY", "direction": "short",
        "intent": "exit", "order_type": "other", "quantity": "1", "state": "open", "duration": "other",
        "legs": [{"symbol": "SPY240119P00450000", "action": "buy_to_close"}]}]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"SPY","action":"CLOSE","direction":"SHORT","order_type":"market"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("bs1".into())), (RequestKind::Place, None)], "{}", o.to_json());
}

/// The 460 call held, a market entry of the 450 call still working (queued for the open). A CLOSE naming
/// the 450 call means that entry: it is pulled, and the 460 position stays.
#[test]
fn a_close_naming_a_queued_entrys_contract_beside_another_position_pulls_it() {
    let mut snap = external_options();
    snap["bots"][0]["positions"] = json!([{"instrument": "SPY", "direction": "long", "quantity": "1",
        "legs": [{"symbol": "SPY240119C00460000", "action": "buy_to_open"}]}]);
    snap["bots"][0]["working_orders"] = json!([{"id": "m450", "instrument": "SPY", "direction": "long",
        "intent": "entry", "order_type": "market", "quantity": "1", "state": "open",
        "legs": [{"symbol": "SPY240119C00450000", "action": "buy_to_open"}]}]);
    let e = engine_with(snap);
    let o = post(&e, r#"{"ticker":"SPY240119C450","action":"CLOSE","direction":"LONG","order_type":"market"}"#, T0);
    assert_eq!(o.decision, Decision::Processed, "{}", o.to_json());
    let seq: Vec<_> = o.orders.iter().map(|r| (r.kind, r.order_id.clone())).collect();
    assert_eq!(seq, [(RequestKind::Cancel, Some("m450".into()))], "{}", o.to_json());
}
