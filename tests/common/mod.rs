//! Fixtures shared by the integration tests.
#![allow(dead_code)]

use serde_json::{json, Value};
use strategy_webhook::{Engine, Outcome, Strategy};

/// The token of `strategy()`.
pub const TOKEN: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
/// A second strategy's token.
pub const TOKEN2: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// 2024-01-19 15:00 UTC (10:00 EST).
pub const T0: i64 = 1_705_676_400_000;

/// A two-bot equity strategy with a long AAPL position on one bot and a working
/// MSFT entry order.
pub fn snapshot() -> Value {
    json!({
        "id": "s1",
        "token_hash": TOKEN,
        "status": "active",
        "asset_class": "equity",
        "order_type": "market",
        "limit_target": "alert_price",
        "allowed_instruments": ["AAPL", "MSFT", "TSLA"],
        "directions": {"long": true, "short": false},
        "rules": {"buy": "open_long", "sell": "close_long", "entry": "open_long", "exit": "close_long"},
        "bots": [
            {"id": "alpaca-main", "broker": "alpaca", "account_id": "PA0000000",
             "sizing": {"fixed_quantity": "10"},
             "positions": [{"instrument": "AAPL", "direction": "long", "quantity": "10"}],
             "working_orders": [{"id": "61e69015-8549-4bfd-b9c3-01e75843f47d", "instrument": "MSFT", "direction": "long",
                                 "intent": "entry", "order_type": "limit", "price": "410.50", "quantity": "10", "state": "open"}]},
            {"id": "schwab-main", "broker": "schwab", "account_id": "ACCOUNTHASH0123",
             "sizing": {"fixed_notional": "1000"}}
        ],
        "market": {"quotes": {"AAPL": {"bid": "190.10", "ask": "190.15", "last": "190.12"},
                              "MSFT": {"bid": "415.20", "ask": "415.30"},
                              "TSLA": {"bid": "250.00", "ask": "250.10"}}}
    })
}

/// Loads a snapshot value into a Strategy.
pub fn strategy_from(v: &Value) -> Strategy {
    Strategy::from_json(v.to_string().as_bytes()).expect("fixture snapshot loads")
}

/// An engine holding `snapshot()`.
pub fn engine() -> Engine {
    engine_with(snapshot())
}

/// An engine holding one snapshot.
pub fn engine_with(v: Value) -> Engine {
    let e = Engine::new();
    e.upsert(strategy_from(&v)).unwrap();
    e
}

/// Delivers a JSON body.
pub fn post(e: &Engine, body: &str, now: i64) -> Outcome {
    e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), now)
}

/// The response body as JSON.
pub fn response(o: &Outcome) -> Value {
    serde_json::from_str(&o.response).expect("response is JSON")
}
