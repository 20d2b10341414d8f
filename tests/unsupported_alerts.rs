//! What the service does not support is refused whole, with a 200 rejection that says
//! why, never traded in part (issue 12, §3 and §4 of the parse layer).

mod common;

use common::*;
use serde_json::json;
use strategy_webhook::{Decision, Engine, Outcome};

/// `snapshot()` as an option strategy that takes its contracts from the alert.
fn options_engine() -> Engine {
    let mut snap = snapshot();
    snap["asset_class"] = json!("option");
    snap["allowed_instruments"] = json!(["*"]);
    snap["options"] = json!({"selection": "external"});
    engine_with(snap)
}

fn text(body: &str) -> Outcome {
    engine().deliver(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), T0)
}

/// A 200 `{"status":"rejected"}` whose reason holds `want`, and no order.
fn assert_rejected(o: &Outcome, want: &str) {
    assert_eq!((o.http_status, o.decision), (200, Decision::Rejected), "{}", o.to_json());
    let body = response(o);
    assert_eq!(body["status"], "rejected", "{}", o.response);
    let reason = body["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(want), "reason {reason:?} lacks {want:?}");
    assert!(o.orders.is_empty(), "{}", o.to_json());
}

#[test]
fn a_fill_that_shrinks_the_position_is_refused_not_closed_whole() {
    // The fixture holds 10 AAPL long: selling 3 leaves 7.
    let o = text("RSI exit: order sell @ 3 filled on AAPL. New strategy position is 7");
    assert_rejected(&o, "partial closes are not supported: the fill takes the long position from 10 to 7");
    assert!(response(&o)["reason"].as_str().unwrap().contains("send CLOSE LONG"));

    // Selling all of it is still a close of the whole position.
    let o = text("RSI exit: order sell @ 10 filled on AAPL. New strategy position is 0");
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    assert!(!o.orders.is_empty());
}

#[test]
fn the_json_fill_report_of_a_partial_close_is_refused() {
    let body = r#"{"ticker":"AAPL","action":"sell","prevMarketPosition":"long","marketPosition":"long",
                   "prevMarketPositionSize":"10","marketPositionSize":"4"}"#;
    assert_rejected(&post(&engine(), body, T0), "partial closes are not supported");
}

#[test]
fn a_stop_loss_is_refused_rather_than_dropped() {
    let body = r#"{"ticker":"AAPL","action":"buy","stopLoss":{"type":"stop","stopPrice":185}}"#;
    assert_rejected(&post(&engine(), body, T0), "`stopLoss`: stop and bracket orders");
    let o = text("ticker=AAPL;action=buy;take_profit=200");
    assert_rejected(&o, "`take_profit`: stop and bracket orders");
    assert!(response(&o)["reason"].as_str().unwrap().contains("send the exit as its own alert"));
}

#[test]
fn an_occ_leg_that_disagrees_with_its_fields_is_refused_naming_the_leg() {
    let body = json!({"ticker": "SPY", "action": "OPEN", "direction": "LONG", "price": "1.20", "legs": [
        {"symbol": "SPY240119C00445000", "action": "buy_to_open"},
        {"symbol": "SPY240119C00450000", "side": "call", "strike": 455, "action": "sell_to_open"}]});
    assert_rejected(
        &post(&options_engine(), &body.to_string(), T0),
        "leg 2 (`legs[1]`): symbol SPY240119C00450000 says strike 450 but strike is 455",
    );
}

#[test]
fn a_tradingview_option_ticker_trades_that_contract() {
    let e = options_engine();
    let body = r#"{"ticker":"OPRA:SPY261218C600.0","action":"OPEN","direction":"LONG","price":"2.50"}"#;
    let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    assert_eq!(o.alerts[0].instrument, "SPY");
    assert_eq!(o.alerts[0].legs[0].symbol.as_deref(), Some("SPY261218C00600000"));
    // Each bot buys to open that one contract, not shares of the underlying.
    assert_eq!(o.orders.len(), 2);
    let json = o.to_json();
    assert!(json.contains(r#""symbol":"SPY261218C00600000","qty":10,"side":"buy""#), "{json}");
    assert!(
        json.contains(
            r#""instruction":"BUY_TO_OPEN","instrument":{"assetType":"OPTION","symbol":"SPY   261218C00600000"}"#
        ),
        "{json}"
    );
}

#[test]
fn json_legs_sent_as_text_plain_are_traded() {
    // TradingView sends text/plain when the message ends with a newline.
    let body = "{\"ticker\":\"SPY\",\"action\":\"OPEN\",\"direction\":\"LONG\",\"price\":\"2.50\",\
                \"legs\":[{\"symbol\":\"SPY261218C00600000\",\"action\":\"buy_to_open\"}]}\n";
    let o = options_engine().deliver(TOKEN.as_bytes(), body.as_bytes(), Some("text/plain"), T0);
    assert_eq!((o.http_status, o.decision), (200, Decision::Processed), "{}", o.to_json());
    assert_eq!(o.alerts[0].legs.len(), 1);
    assert!(o.to_json().contains(r#""symbol":"SPY261218C00600000","qty":10,"side":"buy""#), "{}", o.to_json());
}

/// TV-Hub's `cancelAllOrders` and `closeCurrentPosition` (its "Close and cancel" page: cancel every open order on
/// the pair, entries and exits; close the open position whatever its side) were dropped as unknown keys: an entry
/// went out beside the working entry it was to replace (the fixture's MSFT limit), or added a second long to the
/// AAPL long it was to close. Read in part, each reading left a case wrong (the other side's entry working, a
/// MODIFY moving an order it was to cancel, a close refused), so set true they are refused whole, beside any
/// action, naming what to send instead. Set false (a template's default), they ask nothing.
#[test]
fn tv_hubs_order_resets_are_refused_rather_than_dropped() {
    for (body, key) in [
        (r#"{"exchange":"binance-futures","pair":"MSFT","isBuy":true,"cancelAllOrders":true}"#, "cancelAllOrders"),
        (
            r#"{"exchange":"binance-futures","pair":"AAPL","isBuy":true,"closeCurrentPosition":true}"#,
            "closeCurrentPosition",
        ),
        (r#"{"pair":"AAPL","isClose":true,"cancelAllOrders":true}"#, "cancelAllOrders"),
        (r#"{"pair":"AAPL","isClose":true,"closeCurrentPosition":"true"}"#, "closeCurrentPosition"),
        (r#"{"ticker":"MSFT","action":"modify","price":"400","cancelAllOrders":true}"#, "cancelAllOrders"),
    ] {
        let o = post(&engine(), body, T0);
        assert_rejected(&o, &format!("`{key}: true` is not read"));
        assert!(response(&o)["reason"].as_str().unwrap().contains("cancel: true"), "{}", o.response);
    }
    assert_rejected(&text("ticker=AAPL action=buy cancelAllOrders=true"), "`cancelAllOrders: true` is not read");
    let unset = r#"{"pair":"AAPL","isBuy":true,"cancelAllOrders":false,"closeCurrentPosition":false}"#;
    assert_eq!(post(&engine(), unset, T0).decision, Decision::Processed);
    // `cancelAllDcaOrders` goes only with a trailing stop (itself refused): alone it asks nothing.
    let dca = r#"{"pair":"AAPL","isBuy":true,"cancelAllDcaOrders":true}"#;
    assert_eq!(post(&engine(), dca, T0).decision, Decision::Processed);
}

/// A price range in brackets or quotes (`buy AAPL @ (190-191)`, as signal channels write an entry zone) was taken
/// for a date, which says nothing, and skipped: the order went out at market. And a body of two fill messages (a
/// relay joining them) was read as its last, the first fill taken for a title and never traded. Both are refused;
/// a date and a time beside a trade still say nothing.
#[test]
fn a_price_range_in_marks_and_two_fill_messages_are_refused() {
    use strategy_webhook::alert;
    for body in [
        "buy AAPL @ (190-191)",
        "BUY AAPL [190-191]",
        "buy AAPL \"190.25-191\"",
        "buy AAPL (190-191)",
        // A ladder, and a pair of prices joined by a colon: no date nor time either.
        "buy AAPL @ (190-189-188)",
        "buy AAPL (190.5-190-189.5)",
        "buy AAPL @ [190/189/188]",
        "buy BTCUSD @ (60000-59500-59000) gtc",
        "buy AAPL (190:191)",
        // After `@`, whole prices up to 31 have a date's shape: still a ladder.
        "buy F @ (12-11-10)",
        "buy F @ [11/10/09]",
        "buy F @ \"12-11-10\"",
        "buy F limit @ (1/2/26)",
    ] {
        let r = alert::parse(body.as_bytes(), Some("text/plain"));
        assert!(r.is_err(), "{body}: read as {r:?}");
    }
    for body in [
        "buy AAPL [2024-01-15]",
        "buy AAPL 2024-01-15T14:30:00Z",
        "buy AAPL (10:30)",
        "buy AAPL [2024-01-15T14:30:00.123+00:00]",
        "buy AAPL (01/15/2024)",
        "buy AAPL (15/01/2024),",
        "buy AAPL (09:30:00)",
        // An offset alone, and milliseconds after a third colon.
        "buy AAPL (+05:30)",
        "buy AAPL [14:30:00:123]",
    ] {
        let r = alert::parse(body.as_bytes(), Some("text/plain"));
        assert!(r.as_ref().is_ok_and(|a| a[0].price.is_none()), "{body}: {r:?}");
    }
    let two = "S: order buy @ 1 filled on AAPL. New strategy position is 1\n\
               S: order sell @ 1 filled on MSFT. New strategy position is -1";
    let r = alert::parse(two.as_bytes(), Some("text/plain"));
    assert!(r.as_ref().is_err_and(|e| e.to_string().contains("more than one fill message")), "{r:?}");
    let one = "RSI exit: order buy @ 1 filled on AAPL. New strategy position is 1";
    assert!(alert::parse(one.as_bytes(), Some("text/plain")).is_ok());
    // A strategy name holding the words is a title, not a fill.
    let named = "Order Flow (filled gaps): order buy @ 1 filled on AAPL. New strategy position is 1";
    let r = alert::parse(named.as_bytes(), Some("text/plain"));
    assert!(r.as_ref().is_ok_and(|a| a[0].instrument == "AAPL"), "{r:?}");
}

/// A MODIFY's `quantity` sized in dollars or percent (TradersPost's `quantityType`): read as units, $5,000 asked
/// re-sized the working MSFT entry to 5,000 shares (about $2M).
#[test]
fn a_modify_quantity_in_dollars_or_percent_is_not_read_as_units() {
    for (kind, quantity) in
        [("dollar_amount", 5000), ("percent_of_equity", 10), ("percent_of_position", 100), ("risk_dollar_amount", 50)]
    {
        let body = format!(
            r#"{{"ticker":"MSFT","action":"MODIFY","direction":"long","quantity":{quantity},"quantityType":"{kind}"}}"#
        );
        let o = post(&engine(), &body, T0);
        assert_rejected(&o, "a MODIFY's `quantity` is the new number of shares");
    }
    // A count of units is one.
    let body = r#"{"ticker":"MSFT","action":"MODIFY","direction":"long","quantity":5,"quantityType":"fixed_quantity"}"#;
    let o = post(&engine(), body, T0);
    assert_eq!(o.orders.len(), 1, "{}", o.to_json());
}

/// E*TRADE's `priceType` (`price_type`) is its order type, and marks a spread's net price (`NET_CREDIT`): dropped, a
/// credit of 1.50 went out as a debit of 1.50. A `type` naming a credit that is no mark (`credit spread`) was read
/// as a debit the same way.
#[test]
fn a_price_type_mark_is_not_dropped() {
    let parse = |body: String| strategy_webhook::alert::parse(body.as_bytes(), Some("application/json"));
    for key in ["priceType", "price_type"] {
        let body = format!(r#"{{"ticker":"SPX","action":"OPEN","direction":"long","price":1.5,"{key}":"NET_CREDIT"}}"#);
        let read = parse(body).expect("a credit reads");
        assert_eq!(read[0].price.map(|p| p.to_string()).as_deref(), Some("-1.5"), "{key}");
        assert_eq!(read[0].order_type.map(|t| t.as_str()), Some("limit"), "{key}");
        // An order type it names is the alert's; one that disagrees with the alert's own, a stop kind, an even
        // price or a word it does not know is refused.
        let body = format!(r#"{{"ticker":"AAPL","action":"OPEN","direction":"long","price":190,"{key}":"LIMIT"}}"#);
        assert_eq!(parse(body).expect("a limit reads")[0].order_type.map(|t| t.as_str()), Some("limit"));
        for (extra, said) in [
            (r#""order_type":"market","#, "LIMIT"),
            ("", "STOP"),
            ("", "NET_EVEN"),
            ("", "mark"),
            (r#""type":"debit","#, "NET_CREDIT"),
        ] {
            let body =
                format!(r#"{{"ticker":"SPX","action":"OPEN","direction":"long","price":1.5,{extra}"{key}":"{said}"}}"#);
            assert!(parse(body).is_err(), "{key}: {said} beside {extra}");
        }
    }
    for said in ["credit spread", "DebitSpread"] {
        let body = format!(r#"{{"ticker":"SPX","action":"OPEN","direction":"long","price":1.5,"type":"{said}"}}"#);
        assert!(parse(body).is_err(), "type {said}");
    }
}
