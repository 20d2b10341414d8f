//! Order building from strategy snapshots given as JSON: option selection (internal and
//! external), option exits and changes, and the equity/crypto sizing and price edges.

use serde_json::{json, Value};
use strategy_webhook::alert::{self, ActionKind, Date, Direction, LegAction, OptionSide};
use strategy_webhook::builder::{build, BuildContext};
use strategy_webhook::decide::{decide, Decided};
use strategy_webhook::model::{BotAction, InstrumentKey, Intent, Order, OrderError, PriceEffect};
use strategy_webhook::strategy::Strategy;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Unix milliseconds for a UTC wall time.
fn utc(date: &str, h: i64, m: i64) -> i64 {
    let days = Date::parse_iso(date).expect("test date").days_since_epoch();
    (days * 86_400 + h * 3600 + m * 60) * 1000
}

/// Friday 2024-01-19, 10:00 in New York (EST, UTC−5).
fn friday() -> i64 {
    utc("2024-01-19", 15, 0)
}

/// Overlays `patch`'s top-level keys on `base`.
fn merged(mut base: Value, patch: Value) -> Value {
    if let (Some(b), Value::Object(p)) = (base.as_object_mut(), patch) {
        for (k, v) in p {
            b.insert(k, v);
        }
    }
    base
}

fn snapshot(v: Value) -> Strategy {
    Strategy::from_json(v.to_string().as_bytes()).expect("test snapshot is valid")
}

fn spx_chain() -> Value {
    json!({ "underlying_price": "4502.30",
            "expirations": ["2024-01-19", "2024-01-22", "2024-01-24", "2024-01-26", "2024-02-16"],
            "strikes": ["4490", "4495", "4500", "4505", "4510"] })
}

/// An internal-selection SPX strategy: long = call debit vertical (ATM / +2), short =
/// put credit vertical (sell ATM / buy −2); limit orders; one Tradier bot with 1 unit.
fn spx(patch: Value) -> Strategy {
    let base = json!({
        "id": "spx-0dte", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "limit", "limit_target": "mid", "allowed_instruments": ["SPX"],
        "options": {
            "selection": "internal",
            "expiration": { "min_days": 0, "max_days": 7 },
            "legs": {
                "long": [ { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } },
                          { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 2 } } ],
                "short": [ { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": 0 } },
                           { "side": "put", "action": "buy_to_open", "strike": { "atm_offset": -2 } } ]
            }
        },
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "VA1", "sizing": { "fixed_quantity": "1" } } ],
        "market": { "option_chains": { "SPX": spx_chain() } }
    });
    snapshot(merged(base, patch))
}

/// The SPX strategy with external selection (the alert names the contracts).
fn spx_external(patch: Value) -> Strategy {
    let options = json!({ "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 7 } } });
    spx(merged(options, patch))
}

fn equity(patch: Value) -> Strategy {
    let base = json!({
        "id": "aapl-swing", "token_hash": TOKEN, "status": "active", "asset_class": "equity",
        "order_type": "limit", "limit_target": "mid", "allowed_instruments": ["AAPL"],
        "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" } } ],
        "market": { "quotes": { "AAPL": { "bid": "190.10", "ask": "190.15", "last": "190.12" } } }
    });
    snapshot(merged(base, patch))
}

/// Builds the orders of the strategy's first bot for a JSON alert body.
fn run(s: &Strategy, body: Value, now_ms: i64) -> Result<Vec<BotAction>, OrderError> {
    let alerts = alert::parse(body.to_string().as_bytes(), Some("application/json")).expect("test alert parses");
    let a = &alerts[0];
    let action = match a.action {
        ActionKind::Canonical(action) => action,
        ActionKind::Word(w) => panic!("tests send canonical actions, not {w:?}"),
    };
    let decided = Decided {
        step: 0,
        action,
        direction: a.direction.unwrap_or(Direction::Long),
        order_type: a.order_type.unwrap_or(s.order_type),
        duration: a.duration.unwrap_or(s.duration),
        key: InstrumentKey::new(&a.instrument, s.asset_class),
        alert: a,
        // One alert, as `decide` reads it: its option legs name what a CLOSE, MODIFY or CANCEL acts on.
        named: alerts.len() == 1 && s.asset_class == strategy_webhook::model::AssetClass::Option,
        // The first step only: a reversal's close is driven through the engine (tests/engine.rs).
        reversing: false,
        reversed: false,
        both_sides: false,
        after_cancel: false,
    };
    let ctx = BuildContext { strategy: s, now_ms, dedup_key: "dedup", claimed_ms: now_ms };
    build(&ctx, &decided, &s.bots[0])
}

/// The single order placed for an alert.
fn place(s: &Strategy, body: Value, now_ms: i64) -> Order {
    let actions = run(s, body, now_ms).expect("order builds");
    assert_eq!(actions.len(), 1, "one action: {actions:?}");
    match actions.into_iter().next() {
        Some(BotAction::Place(o)) => o,
        other => panic!("expected a Place, got {other:?}"),
    }
}

fn unfillable(r: Result<Vec<BotAction>, OrderError>) -> String {
    match r {
        Err(e) if !e.is_rejection() => e.to_string(),
        other => panic!("expected Unfillable, got {other:?}"),
    }
}

fn rejected(r: Result<Vec<BotAction>, OrderError>) -> String {
    match r {
        Err(e) if e.is_rejection() => e.to_string(),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

fn symbols(o: &Order) -> Vec<String> {
    o.legs.iter().map(|l| l.contract.occ_unpadded()).collect()
}

fn leg_actions(o: &Order) -> Vec<LegAction> {
    o.legs.iter().map(|l| l.action).collect()
}

fn d(s: &str) -> strategy_webhook::decimal::Decimal {
    strategy_webhook::decimal::parse(s).expect("test decimal")
}

fn open_long(price: Option<&str>) -> Value {
    let mut v = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG" });
    if let Some(p) = price {
        v["price"] = json!(p.parse::<f64>().expect("test price"));
    }
    v
}

// ---------------------------------------------------------------------------------------
// Internal selection
// ---------------------------------------------------------------------------------------

#[test]
fn internal_debit_vertical_on_spxw_with_spx_underlying() {
    let o = place(&spx(json!({})), open_long(Some("2.35")), friday());
    assert_eq!(o.symbol, "SPX", "the underlying stays SPX");
    assert_eq!(symbols(&o), ["SPXW240119C04500000", "SPXW240119C04510000"]);
    assert_eq!(o.legs[0].contract.occ_padded(), "SPXW  240119C04500000");
    assert_eq!(leg_actions(&o), [LegAction::BuyToOpen, LegAction::SellToOpen]);
    assert!(o.legs.iter().all(|l| l.ratio == 1 && l.contract.root == "SPXW"));
    assert_eq!(o.intent, Intent::OpenLong);
    assert_eq!(o.quantity, d("1"));
    assert_eq!(o.limit_price, Some(d("2.35")));
    assert_eq!(o.price_effect, Some(PriceEffect::Debit));
}

#[test]
fn internal_credit_vertical_from_a_negative_price() {
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": -1.10 });
    let o = place(&spx(json!({})), body, friday());
    assert_eq!(symbols(&o), ["SPXW240119P04500000", "SPXW240119P04490000"]);
    assert_eq!(leg_actions(&o), [LegAction::SellToOpen, LegAction::BuyToOpen]);
    assert_eq!(o.intent, Intent::OpenShort);
    assert_eq!(o.limit_price, Some(d("1.10")), "the limit price is a magnitude");
    assert_eq!(o.price_effect, Some(PriceEffect::Credit));
}

#[test]
fn internal_iron_condor_has_four_distinct_legs() {
    let s = spx(json!({ "options": { "selection": "internal", "legs": { "long": [
        { "side": "put", "action": "buy_to_open", "strike": { "atm_offset": -2 } },
        { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": -1 } },
        { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 1 } },
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 2 } } ] } } }));
    let o = place(&s, open_long(Some("-1.5")), friday());
    assert_eq!(
        symbols(&o),
        ["SPXW240119P04490000", "SPXW240119P04495000", "SPXW240119C04505000", "SPXW240119C04510000"]
    );
    assert_eq!(
        leg_actions(&o),
        [LegAction::BuyToOpen, LegAction::SellToOpen, LegAction::SellToOpen, LegAction::BuyToOpen]
    );
    assert_eq!(o.limit_price, Some(d("1.5")));
    assert_eq!(o.price_effect, Some(PriceEffect::Credit));
}

/// A one-sided quote (a bid of 0) has no mid: halving its ask made the sizing price half the ask, and the order
/// twice the configured amount. It sizes from the last trade, else the higher side.
#[test]
fn a_one_sided_quote_sizes_from_its_last_or_its_ask_never_half_the_ask() {
    let sized = |quote: Value| {
        let s = equity(json!({ "order_type": "market",
            "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_notional": "1000" } } ],
            "market": { "quotes": { "AAPL": quote } } }));
        place(&s, json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG" }), friday()).quantity.to_string()
    };
    assert_eq!(sized(json!({ "bid": "0", "ask": "10", "last": "9.95" })), "100");
    assert_eq!(sized(json!({ "bid": "0", "ask": "10" })), "100");
    // Crossed: no mid either.
    assert_eq!(sized(json!({ "bid": "12", "ask": "10", "last": "11" })), "90");
    // Both sides quoted: the mid, as before.
    assert_eq!(sized(json!({ "bid": "9", "ask": "11", "last": "20" })), "100");
}

#[test]
fn a_market_order_has_no_limit_price_or_effect() {
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "order_type": "market" });
    let o = place(&spx(json!({})), body, friday());
    assert_eq!(o.legs.len(), 2);
    assert_eq!(o.limit_price, None);
    assert_eq!(o.price_effect, None);
}

fn chain_with(expirations: &[&str]) -> Value {
    let mut c = spx_chain();
    c["expirations"] = json!(expirations);
    json!({ "option_chains": { "SPX": c } })
}

fn rule(min: u32, max: u32) -> Value {
    json!({ "selection": "internal", "expiration": { "min_days": min, "max_days": max }, "legs": { "long": [
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } } ] } })
}

fn expiration_of(s: &Strategy, now_ms: i64) -> String {
    place(s, open_long(Some("2.35")), now_ms).legs[0].contract.expiration.to_string()
}

#[test]
fn a_saturday_alert_picks_monday() {
    let s = spx(json!({ "market": chain_with(&["2024-01-19", "2024-01-22", "2024-01-24"]) }));
    // Saturday 2024-01-20, noon in New York: Friday's expiration has passed.
    assert_eq!(expiration_of(&s, utc("2024-01-20", 17, 0)), "2024-01-22");
}

/// The Russell 2000 trades as the PM-settled `RUTW` series, as SPX does as `SPXW` (Cboe): its standard `RUT` series
/// exists on third Fridays only and stops trading the day before. Built on `RUT`, a Monday's contract did not exist
/// and a third Friday's no longer traded on the day: the broker refused every entry. Legs by OCC symbol or by
/// fields are mapped alike, and an alert naming the series keeps it.
#[test]
fn russell_contracts_are_rutw() {
    let chain = json!({ "underlying_price": "2000.10", "expirations": ["2024-01-19", "2024-01-22", "2024-02-16"],
                        "strikes": ["1990", "1995", "2000", "2005", "2010"] });
    let market = json!({ "option_chains": { "RUT": chain } });
    let entry = json!({ "ticker": "RUT", "action": "OPEN", "direction": "LONG", "price": 2.35 });
    for (window, want) in [(rule(1, 7), "RUTW240122C02000000"), (rule(0, 0), "RUTW240119C02000000")] {
        let s = spx(json!({ "allowed_instruments": ["RUT"], "market": market.clone(), "options": window }));
        assert_eq!(symbols(&place(&s, entry.clone(), friday())), [want]);
    }
    let external = spx_external(json!({ "allowed_instruments": ["RUT"], "market": market }));
    for leg in [
        json!({ "symbol": "RUT240122C02000000", "action": "buy_to_open" }),
        json!({ "side": "call", "strike": 2000, "expiration": "2024-01-22", "action": "buy_to_open" }),
        json!({ "symbol": "RUTW240122C02000000", "action": "buy_to_open" }),
    ] {
        let body = json!({ "ticker": "RUT", "action": "OPEN", "direction": "LONG", "price": 2.35, "legs": [leg] });
        assert_eq!(symbols(&place(&external, body, friday())), ["RUTW240122C02000000"]);
    }
}

/// NDX lists its dailies and weeklies as the PM-settled `NDXP` series; `NDX` is the AM-settled monthly (third
/// Friday), which stops trading the day before. VIX lists its standard monthly as `VIX` and every other expiration
/// as `VIXW` (all AM-settled). Built on `NDX` or `VIX`, a weekly's contract did not exist and the broker refused the
/// entry after a processed answer. Legs by OCC symbol or by fields are mapped alike; a contract that stopped
/// trading the day before is refused, saying why.
#[test]
fn ndx_and_vix_weeklies_are_ndxp_and_vixw() {
    let ndx = json!({ "underlying_price": "17302.30", "expirations": ["2024-01-19", "2024-01-22", "2024-02-16"],
                      "strikes": ["17250", "17275", "17300", "17325", "17350"] });
    let market = json!({ "option_chains": { "NDX": ndx } });
    let entry = json!({ "ticker": "NDX", "action": "OPEN", "direction": "LONG", "price": 35 });
    let s = spx(json!({ "allowed_instruments": ["NDX"], "market": market.clone(), "options": rule(1, 7) }));
    assert_eq!(symbols(&place(&s, entry.clone(), friday())), ["NDXP240122C17300000"]);
    // The third Friday's monthly is NDX, bought up to the Thursday before; on the day it no longer trades.
    let s = spx(json!({ "allowed_instruments": ["NDX"], "market": market.clone(), "options": rule(0, 7) }));
    assert_eq!(symbols(&place(&s, entry.clone(), utc("2024-01-18", 15, 0))), ["NDX240119C17300000"]);
    // After Thursday's close (16:30 in New York) the monthly no longer trades: the window moves on to Monday's NDXP,
    // as it skips today's expiration after the close.
    assert_eq!(symbols(&place(&s, entry.clone(), utc("2024-01-18", 21, 30))), ["NDXP240122C17300000"]);
    assert_eq!(symbols(&place(&s, entry.clone(), friday())), ["NDXP240122C17300000"]);
    let external = spx_external(json!({ "allowed_instruments": ["NDX"], "market": market }));
    let monthly = json!({ "ticker": "NDX", "action": "OPEN", "direction": "LONG", "price": 35,
                          "legs": [ { "symbol": "NDX240119C17300000", "action": "buy_to_open" } ] });
    // The index options' session runs to 16:15 in New York: the AM-settled monthly trades through it on its last
    // day (only PM-settled series expiring that day stop at 16:00).
    assert_eq!(symbols(&place(&external, monthly.clone(), utc("2024-01-18", 21, 14))), ["NDX240119C17300000"]);
    let refused = unfillable(run(&external, monthly, utc("2024-01-18", 21, 15)));
    assert!(refused.contains("NDX240119C17300000") && refused.contains("traded last on 2024-01-18"), "{refused}");
    for leg in [
        json!({ "symbol": "NDX240122C17300000", "action": "buy_to_open" }),
        json!({ "side": "call", "strike": 17300, "expiration": "2024-01-22", "action": "buy_to_open" }),
        json!({ "symbol": "NDXP240122C17300000", "action": "buy_to_open" }),
    ] {
        let body = json!({ "ticker": "NDX", "action": "OPEN", "direction": "LONG", "price": 35, "legs": [leg] });
        assert_eq!(symbols(&place(&external, body, friday())), ["NDXP240122C17300000"]);
    }
    // VIX: 2024-02-14 is February's standard expiration (30 days before March 15), 2024-01-24 a weekly.
    let vix = json!({ "underlying_price": "14.10", "expirations": ["2024-01-24", "2024-02-14"],
                      "strikes": ["13", "14", "15"] });
    let market = json!({ "option_chains": { "VIX": vix } });
    let entry = json!({ "ticker": "VIX", "action": "OPEN", "direction": "LONG", "price": 1.1 });
    for (window, want) in [(rule(1, 7), "VIXW240124C00014000"), (rule(20, 30), "VIX240214C00014000")] {
        let s = spx(json!({ "allowed_instruments": ["VIX"], "market": market.clone(), "options": window }));
        assert_eq!(symbols(&place(&s, entry.clone(), friday())), [want]);
    }
    // Every VIX series trades last the day before it expires: after Tuesday's close, Wednesday's weekly is passed.
    let s = spx(json!({ "allowed_instruments": ["VIX"], "market": market.clone(), "options": rule(0, 30) }));
    assert_eq!(symbols(&place(&s, entry.clone(), utc("2024-01-23", 20, 0))), ["VIXW240124C00014000"]);
    assert_eq!(symbols(&place(&s, entry.clone(), utc("2024-01-23", 21, 30))), ["VIX240214C00014000"]);
    // When the third Friday of the month after is a holiday (Juneteenth 2026, Good Friday 2025), the standard
    // series expires the business day before the Wednesday: a Tuesday, listed under VIX, not VIXW.
    for (today, expiration, want) in [
        ("2026-05-12", "2026-05-19", "VIX260519C00014000"),
        ("2025-03-11", "2025-03-18", "VIX250318C00014000"),
        ("2026-05-12", "2026-05-20", "VIXW260520C00014000"),
    ] {
        let vix = json!({ "underlying_price": "14.10", "expirations": [expiration], "strikes": ["13", "14", "15"] });
        let market = json!({ "option_chains": { "VIX": vix } });
        let s = spx(json!({ "allowed_instruments": ["VIX"], "market": market, "options": rule(0, 30) }));
        assert_eq!(symbols(&place(&s, entry.clone(), utc(today, 14, 0))), [want], "{expiration}");
        let external = spx_external(json!({ "allowed_instruments": ["VIX"], "market": {} }));
        let leg = json!({ "symbol": want.replace("VIXW", "VIX"), "action": "buy_to_open" });
        let body = json!({ "ticker": "VIX", "action": "OPEN", "direction": "LONG", "price": 1.1, "legs": [leg] });
        assert_eq!(symbols(&place(&external, body, utc(today, 14, 0))), [want], "external {expiration}");
    }
}

/// Options expiring today stop trading at the 16:00 close in New York: a 0 DTE strategy's alert after it (an
/// after-hours signal, or the 16:00 bar's) bought today's contracts, answered processed, and the broker refused
/// an order for a dead series. Tomorrow's listed expiration in the window is taken instead; with none, the alert
/// fails saying why; an external leg expiring today is refused after the close, and taken before it.
#[test]
fn todays_expiration_stops_at_the_close() {
    let market = chain_with(&["2024-01-19", "2024-01-22"]);
    let s = spx(json!({ "options": rule(0, 7), "market": market.clone() }));
    assert_eq!(expiration_of(&s, utc("2024-01-19", 20, 59)), "2024-01-19", "15:59 in New York");
    assert_eq!(expiration_of(&s, utc("2024-01-19", 21, 0)), "2024-01-22", "16:00");
    assert_eq!(expiration_of(&s, utc("2024-01-19", 21, 30)), "2024-01-22", "16:30");
    // In summer (EDT) the close is at 20:00 UTC.
    let summer = spx(json!({ "options": rule(0, 7), "market": chain_with(&["2024-07-19", "2024-07-22"]) }));
    assert_eq!(expiration_of(&summer, utc("2024-07-19", 19, 59)), "2024-07-19");
    assert_eq!(expiration_of(&summer, utc("2024-07-19", 20, 0)), "2024-07-22");
    let zero_dte = spx(json!({ "options": rule(0, 0), "market": market }));
    let e = unfillable(run(&zero_dte, open_long(Some("2.35")), utc("2024-01-19", 21, 30)));
    assert!(e.contains("today's stopped trading at the 16:00 close"), "{e}");
    let external = spx_external(json!({}));
    let body = |leg: &str| {
        json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 2.35,
                "legs": [ { "symbol": leg, "action": "buy_to_open" } ] })
    };
    let e = unfillable(run(&external, body("SPXW240119C04500000"), utc("2024-01-19", 21, 30)));
    assert!(e.contains("expires today (2024-01-19) and stopped trading at the 16:00 close"), "{e}");
    assert!(run(&external, body("SPXW240119C04500000"), utc("2024-01-19", 20, 0)).is_ok());
}

#[test]
fn a_holiday_missing_from_the_chain_is_skipped() {
    // Monday 2024-01-15 (Martin Luther King Jr. Day) is not listed.
    let s = spx(json!({ "options": rule(1, 7), "market": chain_with(&["2024-01-12", "2024-01-16", "2024-01-17"]) }));
    assert_eq!(expiration_of(&s, utc("2024-01-12", 15, 0)), "2024-01-16");
}

#[test]
fn expiration_bounds_are_inclusive_and_the_nearest_wins() {
    let market = json!(chain_with(&["2024-02-16", "2024-01-26", "2024-01-19", "2024-01-24", "2024-01-22"]));
    let with = |min, max| spx(json!({ "options": rule(min, max), "market": market.clone() }));
    assert_eq!(expiration_of(&with(0, 7), friday()), "2024-01-19", "0 days is today");
    assert_eq!(expiration_of(&with(3, 3), friday()), "2024-01-22", "exactly min = max = 3");
    assert_eq!(expiration_of(&with(4, 10), friday()), "2024-01-24", "nearest of 24th and 26th");
    assert_eq!(expiration_of(&with(8, 30), friday()), "2024-02-16");
    let e = unfillable(run(&with(8, 10), open_long(Some("2.35")), friday()));
    assert_eq!(e, "no expiration of SPX between 8 and 10 days from 2024-01-19 in the option chain");
}

#[test]
fn the_date_is_new_york_time_across_the_march_clock_change() {
    let s = spx(json!({ "options": rule(1, 7), "market": chain_with(&["2024-03-11", "2024-03-12"]) }));
    // 23:30 EDT on Sunday 2024-03-10 (the night the clocks went forward) is 03:30 UTC on
    // the 11th: today is the 10th, so the 11th is one day away.
    assert_eq!(expiration_of(&s, utc("2024-03-11", 3, 30)), "2024-03-11");
    // 00:30 EDT on the 11th (04:30 UTC; 23:30 on the 10th had the clocks not changed).
    assert_eq!(expiration_of(&s, utc("2024-03-11", 4, 30)), "2024-03-12");
}

#[test]
fn the_date_is_new_york_time_across_the_november_clock_change() {
    let s = spx(json!({ "options": rule(1, 7), "market": chain_with(&["2024-11-04", "2024-11-05"]) }));
    // 23:30 EST on Sunday 2024-11-03 (the clocks went back that morning) is 04:30 UTC on
    // the 4th; on daylight time it would already be the 4th.
    assert_eq!(expiration_of(&s, utc("2024-11-04", 4, 30)), "2024-11-04");
    // 00:30 EST on the 4th.
    assert_eq!(expiration_of(&s, utc("2024-11-04", 5, 30)), "2024-11-05");
}

fn atm_strike(underlying: &str) -> String {
    let mut c = spx_chain();
    c["underlying_price"] = json!(underlying);
    let s = spx(json!({ "options": rule(0, 7), "market": { "option_chains": { "SPX": c } } }));
    place(&s, open_long(Some("2.35")), friday()).legs[0].contract.strike.to_string()
}

#[test]
fn at_the_money_is_the_nearest_strike_and_a_tie_goes_lower() {
    assert_eq!(atm_strike("4502.30"), "4500");
    assert_eq!(atm_strike("4502.50"), "4500", "halfway between 4500 and 4505");
    assert_eq!(atm_strike("4502.51"), "4505");
    assert_eq!(atm_strike("4000"), "4490", "below the chain: its lowest strike");
    assert_eq!(atm_strike("9000"), "4510", "above the chain: its highest strike");
}

#[test]
fn unsorted_chain_strikes_are_counted_in_order() {
    let mut c = spx_chain();
    c["strikes"] = json!(["4510", "4490", "4500", "4505", "4495", "4500"]);
    let s = spx(json!({ "market": { "option_chains": { "SPX": c } } }));
    let o = place(&s, open_long(Some("2.35")), friday());
    assert_eq!(symbols(&o), ["SPXW240119C04500000", "SPXW240119C04510000"]);
}

#[test]
fn an_offset_beyond_the_chain_names_the_missing_strike() {
    let up = spx(json!({ "options": { "selection": "internal", "legs": { "long": [
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 3 } } ] } } }));
    let e = unfillable(run(&up, open_long(Some("2.35")), friday()));
    assert_eq!(e, "no strike 3 above at-the-money 4500 in the SPX chain (it lists 4490 to 4510)");
    let down = spx(json!({ "options": { "selection": "internal", "legs": { "long": [
        { "side": "put", "action": "buy_to_open", "strike": { "atm_offset": -3 } } ] } } }));
    let e = unfillable(run(&down, open_long(Some("2.35")), friday()));
    assert!(e.starts_with("no strike 3 below at-the-money 4500 in the SPX chain"), "{e}");
}

#[test]
fn no_chain_and_no_rules_are_named() {
    let s = spx(json!({ "market": {} }));
    assert_eq!(unfillable(run(&s, open_long(Some("2.35")), friday())), "no option chain for SPX in the market data");
    let s = spx(json!({ "options": { "selection": "internal", "legs": { "long": [] } } }));
    let e = unfillable(run(&s, open_long(Some("2.35")), friday()));
    assert!(e.contains("no option leg rules for LONG entries"), "{e}");
}

#[test]
fn rules_resolving_to_one_contract_are_refused() {
    let s = spx(json!({ "options": { "selection": "internal", "legs": { "long": [
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } },
        { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 0 } } ] } } }));
    let e = unfillable(run(&s, open_long(Some("0")), friday()));
    assert!(e.contains("legs 0 and 1 are the same contract SPXW240119C04500000"), "{e}");
}

fn leg_quotes() -> Value {
    json!({
        "SPXW240119C04500000": { "bid": "5.10", "ask": "5.30" },
        "SPXW  240119C04510000": { "bid": "2.60", "ask": "2.75" }
    })
}

#[test]
fn a_limit_entry_without_a_price_uses_the_target_from_leg_quotes() {
    let market = json!({ "option_chains": { "SPX": spx_chain() }, "quotes": leg_quotes() });
    // Spread bid = 5.10 − 2.75 = 2.35, ask = 5.30 − 2.60 = 2.70, mid = 2.525 → 2.50 on
    // the $0.05 tick (a half rounds to the debit's patient side).
    let o = place(&spx(json!({ "market": market.clone() })), open_long(None), friday());
    assert_eq!(o.limit_price, Some(d("2.50")));
    assert_eq!(o.price_effect, Some(PriceEffect::Debit));
    let o = place(&spx(json!({ "market": market.clone(), "limit_target": "ask" })), open_long(None), friday());
    assert_eq!(o.limit_price, Some(d("2.70")));
    let custom = spx(json!({ "market": market, "limit_target": { "custom": "0.8" } }));
    // 2.35 + 0.8 × 0.35 = 2.63 → 2.65, the nearest $0.05.
    assert_eq!(place(&custom, open_long(None), friday()).limit_price, Some(d("2.65")));
}

#[test]
fn a_limit_entry_without_a_price_or_quotes_names_the_missing_data() {
    let market = json!({ "option_chains": { "SPX": spx_chain() },
                         "quotes": { "SPXW240119C04500000": { "bid": "5.10", "ask": "5.30" } } });
    let e = unfillable(run(&spx(json!({ "market": market })), open_long(None), friday()));
    assert!(e.starts_with("no bid/ask quote for SPXW240119C04510000 in the market data"), "{e}");
}

#[test]
fn a_credit_spread_target_rounds_toward_more_credit() {
    let market = json!({ "option_chains": { "SPX": spx_chain() }, "quotes": {
        "SPXW240119P04500000": { "bid": "4.00", "ask": "4.20" },
        "SPXW240119P04490000": { "bid": "2.10", "ask": "2.25" } } });
    // Sell 4500 put, buy 4490 put: bid = 2.10 − 4.20 = −2.10, ask = 2.25 − 4.00 = −1.75,
    // mid = −1.925 → a credit of 1.95 (the half goes to the patient side: more credit).
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT" });
    let o = place(&spx(json!({ "market": market })), body, friday());
    assert_eq!(o.limit_price, Some(d("1.95")));
    assert_eq!(o.price_effect, Some(PriceEffect::Credit));
}

// ---------------------------------------------------------------------------------------
// Sizing of option entries
// ---------------------------------------------------------------------------------------

fn sized(sizing: Value, price: &str) -> Result<Vec<BotAction>, OrderError> {
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1", "equity": "20000",
                                    "sizing": sizing } ] }));
    run(&s, open_long(Some(price)), friday())
}

fn quantity(r: Result<Vec<BotAction>, OrderError>) -> String {
    match r {
        Ok(a) => match a.as_slice() {
            [BotAction::Place(o)] => o.quantity.to_string(),
            other => panic!("expected one Place, got {other:?}"),
        },
        Err(e) => panic!("expected an order, got {e:?}"),
    }
}

/// An amount sizes an option entry by the structure's maximum loss at expiration × 100: a debit vertical's is its
/// debit, as when sizing divided by the net price; a credit vertical's its width less the credit.
#[test]
fn option_sizing_divides_by_the_maximum_loss_times_100() {
    assert_eq!(quantity(sized(json!({ "fixed_quantity": "3" }), "2.35")), "3");
    // Buy 4500C, sell 4510C: 1000 / (2.35 × 100) = 4.26 → 4 spreads.
    assert_eq!(quantity(sized(json!({ "fixed_notional": "1000" }), "2.35")), "4");
    // Sell 4500P, buy 4490P for 1.10: 2000 / ((10 − 1.10) × 100) = 2.25 → 2 (by the credit, 1000 / 110 made 9).
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1",
                                    "sizing": { "fixed_notional": "2000" } } ] }));
    let credit = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": -1.10 });
    assert_eq!(quantity(run(&s, credit, friday())), "2");
    // 5% of 20000 = 1000 → 4.
    assert_eq!(quantity(sized(json!({ "percent_of_equity": "5" }), "2.35")), "4");
    let reason = rejected(sized(json!({ "fixed_notional": "200" }), "2.35"));
    assert_eq!(reason, "bot bot's sizing (fixed_notional 200) at 235 a unit comes to less than one whole unit");
}

#[test]
fn market_option_entries_size_from_leg_quotes_not_the_underlying() {
    let market = json!({ "option_chains": { "SPX": spx_chain() }, "quotes": leg_quotes() });
    let s = spx(json!({ "market": market, "order_type": "market",
                        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_notional": "1000" } } ] }));
    // Mid net = 5.20 − 2.675 = 2.525 → 1000 / 252.5 = 3.96 → 3.
    let o = place(&s, open_long(None), friday());
    assert_eq!(o.quantity, d("3"));
    assert_eq!(o.limit_price, None);
    let bare = spx(json!({ "order_type": "market",
                           "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_notional": "1000" } } ] }));
    let e = unfillable(run(&bare, open_long(None), friday()));
    assert!(e.contains("no quote for SPXW240119C04500000"), "{e}");
}

/// A leg quoted on one side (bid 0, far from the money) or only by a last trade has no mid. A sold leg was read
/// at its higher side, as a bought one is: the debit spread netted a credit it would never get at the market, and
/// $1,000 bought 100 spreads that cost about $12,000. A leg without a mid now counts anywhere from its lowest
/// quoted price to its highest, and the structure is sized from the largest net those allow.
#[test]
fn a_sold_legs_one_sided_quote_does_not_shrink_a_spreads_net() {
    let size = |sold: Value| {
        let quotes = json!({ "SPXW240119C04500000": { "bid": "1.00", "ask": "1.20" }, "SPXW240119C04510000": sold });
        let s = spx(json!({ "market": { "option_chains": { "SPX": spx_chain() }, "quotes": quotes },
                            "order_type": "market",
                            "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A",
                                        "sizing": { "fixed_notional": "1000" } } ] }));
        place(&s, open_long(None), friday()).quantity
    };
    // Bought at its mid (1.10), sold for nothing: 1000 / 110 = 9.09 → 9 (it was 1000 / 10 = 100).
    assert_eq!(size(json!({ "bid": "0", "ask": "1.00" })), d("9"));
    // A stale last trade on the sold leg: the same.
    assert_eq!(size(json!({ "bid": "0", "ask": "1.00", "last": "0.95" })), d("9"));
    // No bid quoted at all, only an ask and a last: sold at its lowest quoted price, 0.40 → 1000 / 70 = 14.
    assert_eq!(size(json!({ "ask": "1.00", "last": "0.40" })), d("14"));
    // Both sides quoted: the mid, as before (1.10 − 0.55 = 0.55 → 18).
    assert_eq!(size(json!({ "bid": "0.50", "ask": "0.60" })), d("18"));
}

// ---------------------------------------------------------------------------------------
// External selection
// ---------------------------------------------------------------------------------------

fn external(legs: Value, price: Option<f64>) -> Value {
    let mut v = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "legs": legs });
    if let Some(p) = price {
        v["price"] = json!(p);
    }
    v
}

#[test]
fn external_legs_by_occ_symbol_padded_or_not() {
    let legs = json!([ { "symbol": "SPXW  240119C04500000", "action": "buy_to_open" },
                       { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let o = place(&spx_external(json!({})), external(legs, Some(2.35)), friday());
    assert_eq!(symbols(&o), ["SPXW240119C04500000", "SPXW240119C04510000"]);
    assert_eq!(leg_actions(&o), [LegAction::BuyToOpen, LegAction::SellToOpen]);
    assert_eq!(o.symbol, "SPX");
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.35")), Some(PriceEffect::Debit)));
}

#[test]
fn external_legs_by_strike_side_and_expiration_get_the_spxw_root() {
    let legs = json!([ { "side": "PUT", "strike": 4500, "expiration": "2024-01-24", "action": "sell_to_open" },
                       { "side": "PUT", "strike": 4490, "expiration": "2024-01-24", "action": "buy_to_open" } ]);
    let o = place(&spx_external(json!({})), external(legs, Some(-1.2)), friday());
    assert_eq!(symbols(&o), ["SPXW240124P04500000", "SPXW240124P04490000"]);
    assert_eq!(o.legs[0].contract.side, OptionSide::Put);
    assert_eq!((o.limit_price, o.price_effect), (Some(d("1.2")), Some(PriceEffect::Credit)));
}

#[test]
fn external_leg_prices_are_summed_for_a_limit_spread() {
    let debit = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "price": 3.10 },
                        { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "price": 0.75 } ]);
    let o = place(&spx_external(json!({})), external(debit, None), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.35")), Some(PriceEffect::Debit)));
    // A sold leg's price may come signed or not: it is received either way.
    let credit = json!([ { "symbol": "SPXW240119P04500000", "action": "sell_to_open", "price": -3.10 },
                         { "symbol": "SPXW240119P04490000", "action": "buy_to_open", "price": 0.75 } ]);
    let o = place(&spx_external(json!({})), external(credit, None), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.35")), Some(PriceEffect::Credit)));
    // The alert's net price wins over the legs' prices.
    let priced = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "price": 3.10 },
                         { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "price": 0.75 } ]);
    let o = place(&spx_external(json!({})), external(priced, Some(2.2)), friday());
    assert_eq!(o.limit_price, Some(d("2.2")));
}

#[test]
fn a_leg_without_a_price_on_a_limit_spread_is_named() {
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "price": 3.10 },
                       { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let e = unfillable(run(&spx_external(json!({})), external(legs, None), friday()));
    assert!(e.starts_with("the alert has no price and legs[1] has none"), "{e}");
    let unpriced = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let e = unfillable(run(&spx_external(json!({})), external(unpriced, None), friday()));
    assert!(e.contains("no bid/ask quote for SPXW240119C04500000"), "{e}");
}

#[test]
fn external_leg_with_a_decimal_strike() {
    let s = spx_external(json!({}));
    let body = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "price": 1.25,
                       "legs": [ { "side": "CALL", "strike": 190.5, "expiration": "2024-01-19", "action": "buy_to_open" } ] });
    let o = place(&s, body, friday());
    assert_eq!(symbols(&o), ["AAPL240119C00190500"]);
    assert_eq!(o.legs[0].contract.occ_padded(), "AAPL  240119C00190500");
    assert_eq!(o.symbol, "AAPL");
    assert_eq!((o.limit_price, o.price_effect), (Some(d("1.25")), Some(PriceEffect::Debit)));
}

#[test]
fn a_single_sold_option_is_a_credit_whatever_the_sign() {
    let leg = json!([ { "symbol": "SPXW240119P04490000", "action": "sell_to_open" } ]);
    let o = place(&spx_external(json!({})), external(leg, Some(1.2)), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("1.2")), Some(PriceEffect::Credit)));
}

#[test]
fn a_missing_expiration_is_filled_from_the_strategy_rule() {
    let s = spx_external(json!({}));
    let legs = json!([ { "side": "CALL", "strike": 4500, "action": "buy_to_open" },
                       { "side": "CALL", "strike": 4510, "action": "sell_to_open" } ]);
    // Saturday: the nearest allowed expiration is Monday the 22nd.
    let o = place(&s, external(legs.clone(), Some(2.35)), utc("2024-01-20", 17, 0));
    assert_eq!(symbols(&o), ["SPXW240122C04500000", "SPXW240122C04510000"]);
    let no_chain = spx_external(json!({ "market": {} }));
    let e = unfillable(run(&no_chain, external(legs, Some(2.35)), friday()));
    assert_eq!(e, "legs[0] has no expiration, and no option chain for SPX in the market data");
}

#[test]
fn external_legs_that_cannot_be_traded_are_named() {
    let s = spx_external(json!({}));
    let cases = [
        // One leg without an action takes the entry's direction (an option ticker with `entry`); a structure's
        // legs must each say theirs.
        (
            json!([ { "symbol": "SPXW240119C04500000" }, { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]),
            "legs[0] has no action",
        ),
        (json!([ { "strike": 4500, "action": "buy_to_open" } ]), "legs[0] has neither an OCC symbol nor a side"),
        (json!([ { "side": "CALL", "action": "buy_to_open" } ]), "legs[0] has neither an OCC symbol nor a strike"),
        (
            json!([ { "symbol": "AAPL240119C00190000", "action": "buy_to_open" } ]),
            "is an option on AAPL, not on the alert's SPX",
        ),
        (
            json!([ { "side": "CALL", "strike": 4500.1234, "expiration": "2024-01-19", "action": "buy_to_open" } ]),
            "cannot be written in an OCC symbol",
        ),
        (json!([ { "symbol": "SPXW240118C04500000", "action": "buy_to_open" } ]), "expired on 2024-01-18"),
        (
            json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                 { "symbol": "SPXW  240119C04500000", "action": "sell_to_open" } ]),
            "legs 0 and 1 are the same contract",
        ),
    ];
    for (legs, expected) in cases {
        let e = unfillable(run(&s, external(legs.clone(), Some(1.0)), friday()));
        assert!(e.contains(expected), "{legs}: {e}");
    }
    let e = unfillable(run(&s, open_long(Some("1")), friday()));
    assert!(e.contains("the alert has no legs"), "{e}");
    // A symbol that is no OCC symbol, or that disagrees with its leg's fields, is the
    // sender's error: the parser refuses it (200 rejected) before any order is built.
    for legs in [
        json!([ { "symbol": "NOT-A-SYMBOL", "action": "buy_to_open" } ]),
        json!([ { "symbol": "SPXW240119C04500000", "strike": 4505, "action": "buy_to_open" } ]),
    ] {
        let body = external(legs.clone(), Some(1.0)).to_string();
        assert!(alert::parse(body.as_bytes(), Some("application/json")).is_err(), "{legs}");
    }
}

// ---------------------------------------------------------------------------------------
// CLOSE, MODIFY and CANCEL of options
// ---------------------------------------------------------------------------------------

fn vertical_legs() -> Value {
    json!([ { "symbol": "SPXW  240119C04500000", "action": "buy_to_open" },
            { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "ratio": 1 } ])
}

fn with_positions(positions: Value) -> Strategy {
    spx(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                           "positions": positions } ] }))
}

#[test]
fn close_reverses_the_held_legs_for_the_whole_position() {
    let s = with_positions(json!([
        { "instrument": "SPX", "direction": "long", "quantity": "2", "legs": vertical_legs() },
        { "instrument": "SPXW", "direction": "long", "quantity": "1", "legs": vertical_legs() },
        { "instrument": "SPX", "direction": "short", "quantity": "5", "legs": vertical_legs() }
    ]));
    let body = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "price": -2.80 });
    let o = place(&s, body, friday());
    assert_eq!(o.intent, Intent::CloseLong);
    assert_eq!(o.quantity, d("3"), "both long positions of the same spread, not the short one");
    assert_eq!(symbols(&o), ["SPXW240119C04500000", "SPXW240119C04510000"]);
    assert_eq!(leg_actions(&o), [LegAction::SellToClose, LegAction::BuyToClose]);
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.80")), Some(PriceEffect::Credit)));
    assert_eq!(o.symbol, "SPX");
}

#[test]
fn close_of_two_different_structures_places_one_order_each() {
    let other = json!([ { "symbol": "SPXW240122C04500000", "action": "buy_to_open" } ]);
    let s = with_positions(json!([
        { "instrument": "SPX", "direction": "long", "quantity": "2", "legs": vertical_legs() },
        { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": other }
    ]));
    let body = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "order_type": "market" });
    let actions = run(&s, body, friday()).expect("closes");
    let orders: Vec<&Order> = actions
        .iter()
        .map(|a| match a {
            BotAction::Place(o) => o,
            other => panic!("expected Place, got {other:?}"),
        })
        .collect();
    assert_eq!(orders.len(), 2);
    assert_eq!(orders[0].legs.len(), 2);
    assert_eq!(orders[1].legs[0].action, LegAction::SellToClose);
    assert_eq!(orders[1].quantity, d("1"));
    assert_ne!(orders[0].client_order_id, orders[1].client_order_id, "each order its own client id");
    let priced = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "price": 1.0 });
    let e = unfillable(run(&s, priced, friday()));
    assert!(e.contains("held as 2 different option structures"), "{e}");
}

#[test]
fn close_of_a_position_without_legs_is_named() {
    let s = with_positions(json!([ { "instrument": "SPX", "direction": "long", "quantity": "2" } ]));
    let e =
        unfillable(run(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "price": 1 }), friday()));
    assert_eq!(e, "the LONG SPX position (quantity 2) has no option legs, so it cannot be closed");
    let none = with_positions(json!([]));
    let r = run(&none, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "price": 1 }), friday());
    assert_eq!(r, Ok(Vec::new()), "no position: nothing to do");
}

#[test]
fn close_without_a_price_uses_the_target_from_the_closing_legs_quotes() {
    let s = spx(json!({
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical_legs() } ] } ],
        "market": { "quotes": leg_quotes() } }));
    // Sell 4500 call, buy 4510 call: bid = 2.60 − 5.30 = −2.70, ask = 2.75 − 5.10 = −2.35,
    // mid −2.525 → a credit of 2.55.
    let o = place(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG" }), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.55")), Some(PriceEffect::Credit)));
}

fn with_working(orders: Value) -> Strategy {
    spx(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "H", "sizing": { "fixed_quantity": "1" },
                           "working_orders": orders } ] }))
}

fn working(id: &str, intent: &str, state: &str, price: &str) -> Value {
    // An exit's legs close the vertical the entry opened.
    let legs = if intent == "exit" {
        json!([ { "symbol": "SPXW  240119C04500000", "action": "sell_to_close" },
                { "symbol": "SPXW240119C04510000", "action": "buy_to_close", "ratio": 1 } ])
    } else {
        vertical_legs()
    };
    json!({ "id": id, "instrument": "SPX", "direction": "long", "intent": intent, "order_type": "limit",
            "price": price, "quantity": "2", "state": state, "legs": legs })
}

/// A MODIFY's `notional` on an option order divides by what one unit risks, as an entry sized by an amount does:
/// divided by the premium, 1000 on a 10-wide credit put vertical at 0.50 made it 20 spreads ($19,000 at risk).
#[test]
fn a_modify_notional_of_a_credit_spread_divides_by_its_maximum_loss() {
    let s = with_working(json!([{ "id": "w1", "instrument": "SPX", "direction": "short", "intent": "entry",
        "order_type": "limit", "price": "-0.50", "quantity": "2", "state": "open", "legs": [
            { "symbol": "SPXW240119P04500000", "action": "sell_to_open" },
            { "symbol": "SPXW240119P04490000", "action": "buy_to_open" } ] }]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "SHORT", "price": -0.50, "notional": 2000 });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    // (10 − 0.50) × 100 = 950 a spread: 2000 → 2.
    assert_eq!((order.quantity, order.price_effect), (d("2"), Some(PriceEffect::Credit)));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "SHORT", "price": -0.50, "notional": 5000 });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(order.quantity, d("5"), "5000 / 950");
}

/// A MODIFY's `notional` on an option EXIT is sized by its premium: it closes what is held and risks nothing new
/// (read as an opening structure, a long call's exit was refused as a naked call and a vertical's exit at a credit of
/// 8 was sized by 10 − 8 = 2, closing five times what the sender sized). An order of one leg sends `ratio` contracts
/// a unit, priced by the contract: sized by one contract, it sent twice the money.
#[test]
fn a_modify_notional_of_an_exit_is_sized_by_its_premium_and_a_single_leg_by_its_ratio() {
    let exit = |price: &str, legs: Value| {
        json!({ "id": "x1", "instrument": "SPX", "direction": "long", "intent": "exit", "order_type": "limit",
                "price": price, "quantity": "1", "state": "open", "legs": legs })
    };
    let held = |legs: Value| json!([{ "instrument": "SPX", "direction": "long", "quantity": "10", "legs": legs }]);
    let bot = |positions: Value, working: Value| {
        spx(
            json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "H", "sizing": { "fixed_quantity": "1" },
                                "positions": positions, "working_orders": working } ] }),
        )
    };
    let resized = |s: &Strategy, price: f64, notional: u32| {
        let body =
            json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "price": price, "notional": notional });
        let actions = run(s, body, friday()).expect("modifies");
        match actions.as_slice() {
            [BotAction::Replace { order, .. }] => order.quantity,
            [_, BotAction::Place(o)] => o.quantity,
            other => panic!("{other:?}"),
        }
    };
    let call = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let s = bot(
        held(call),
        json!([exit("5.00", json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ]))]),
    );
    assert_eq!(resized(&s, 5.00, 1000), d("2"), "1000 of premium at $500 a contract");
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let s = bot(
        held(vertical),
        json!([exit(
            "-8.00",
            json!([
        { "symbol": "SPXW240119C04500000", "action": "sell_to_close" },
        { "symbol": "SPXW240119C04510000", "action": "buy_to_close" } ])
        )]),
    );
    assert_eq!(resized(&s, -8.00, 2000), d("2"), "2000 of premium at $800 a spread");
    let ratio_two = json!([{ "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
        "order_type": "limit", "price": "2.00", "quantity": "1", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "ratio": 2 } ] }]);
    assert_eq!(resized(&bot(json!([]), ratio_two), 2.00, 1000), d("2"), "two contracts at $200 each a unit");
}

/// A MODIFY's `notional` on a working MARKET option entry, priced by its legs listed in another order than the
/// order's own: sized from the net matched by contract, not from the alert's leg prices paired by position (a
/// double calendar at a 2.60 debit read as 0.40 and re-sized to 65 units on $2,600; a vertical refused as riskless).
#[test]
fn a_modify_notional_of_a_market_entry_sizes_from_its_legs_matched_by_contract() {
    let working = |legs: Value| {
        spx_external(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "working_orders": [ { "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
                "order_type": "market", "quantity": "1", "state": "open", "legs": legs } ] } ] }))
    };
    let resized = |s: &Strategy, body: Value| {
        let actions = run(s, body, friday()).expect("modifies");
        match actions.as_slice() {
            [BotAction::Replace { order, .. }] => order.quantity,
            [_, BotAction::Place(o)] => o.quantity,
            other => panic!("{other:?}"),
        }
    };
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a });
    let priced = |sym: &str, a: &str, p: f64| json!({ "symbol": sym, "action": a, "price": p });
    let calendar = working(json!([
        leg("SPXW240126P04500000", "buy_to_open"),
        leg("SPXW240119P04500000", "sell_to_open"),
        leg("SPXW240126C04510000", "buy_to_open"),
        leg("SPXW240119C04510000", "sell_to_open")
    ]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "notional": 2600, "legs": [
        priced("SPXW240126P04500000", "buy_to_open", 12.00), priced("SPXW240119P04500000", "sell_to_open", 10.50),
        priced("SPXW240119C04510000", "sell_to_open", 9.90), priced("SPXW240126C04510000", "buy_to_open", 11.00) ] });
    assert_eq!(resized(&calendar, body), d("10"), "a 2.60 debit, $260 a unit");
    let vertical =
        working(json!([leg("SPXW240119C04500000", "buy_to_open"), leg("SPXW240119C04510000", "sell_to_open")]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "notional": 1000, "legs": [
        priced("SPXW240119C04510000", "sell_to_open", 1.20), priced("SPXW240119C04500000", "buy_to_open", 3.00) ] });
    assert_eq!(resized(&vertical, body), d("5"), "a 1.80 debit, $180 a spread");
}

/// A bought leg that expires before the sold one covers it only until then: sized as covered, $1,000 bought 20
/// diagonals whose sold call stood naked for a week, and $10,000 ten whose sold put did.
#[test]
fn a_sold_leg_outliving_its_cover_is_sized_as_uncovered() {
    let notional = |amount: &str| {
        spx(json!({ "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 7 } },
                    "bots": [ { "id": "bot", "broker": "schwab", "account_id": "H",
                                "sizing": { "fixed_notional": amount } } ] }))
    };
    let calls = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                        { "symbol": "SPXW240126C04510000", "action": "sell_to_open" } ]);
    match run(&notional("1000"), external(calls, Some(0.50)), friday()) {
        Err(e) => assert!(e.is_rejection() && e.to_string().contains("no bound"), "{e}"),
        Ok(a) => panic!("a call sold past its cover's expiration sized as covered: {a:?}"),
    }
    let puts = json!([ { "symbol": "SPXW240119P04500000", "action": "buy_to_open" },
                       { "symbol": "SPXW240126P04510000", "action": "sell_to_open" } ]);
    // The 4510 put alone after Jan 19: (4510 + 0.50 paid) × 100 a unit, so $10,000 sizes none.
    let r = run(&notional("10000"), external(puts.clone(), Some(0.50)), friday());
    assert!(r.as_ref().is_err_and(|e| e.is_rejection()), "{r:?}");
    // An iron condor whose put wing expires before its call wing: each wing covers its own sold leg (with the put
    // wing dropped, it was priced as a naked put, $449,300 a unit), and the market can end below the puts on the
    // 19th and above the calls on the 26th: (5 + 5 − 2) × 100 = $800 a unit, not one wing's $300.
    let condor = json!([ { "symbol": "SPXW240119P04495000", "action": "sell_to_open" },
                         { "symbol": "SPXW240119P04490000", "action": "buy_to_open" },
                         { "symbol": "SPXW240126C04505000", "action": "sell_to_open" },
                         { "symbol": "SPXW240126C04510000", "action": "buy_to_open" } ]);
    let actions = run(&notional("8000"), external(condor, Some(-2.00)), friday()).expect("sized");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(o.quantity, d("10"), "8000 / $800");
    // A calendar the other way round (sold near, bought far) is covered throughout: its debit.
    let calendar = json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_open" },
                           { "symbol": "SPXW240126C04500000", "action": "buy_to_open" } ]);
    let actions = run(&notional("1000"), external(calendar, Some(2.00)), friday()).expect("sized");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(o.quantity, d("5"), "1000 / $200");
}

#[test]
fn modify_of_an_option_order_keeps_its_legs_and_sets_the_net_price() {
    let s = with_working(json!([working("w1", "entry", "open", "2.35")]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "price": 2.40, "quantity": 3 });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order_id, order, quantity_changed, .. }] = actions.as_slice() else {
        panic!("expected one Replace, got {actions:?}")
    };
    assert_eq!(order_id, "w1");
    assert!(*quantity_changed);
    assert_eq!(order.quantity, d("3"));
    assert_eq!(leg_actions(order), [LegAction::BuyToOpen, LegAction::SellToOpen], "not reversed");
    assert_eq!((order.limit_price, order.price_effect), (Some(d("2.40")), Some(PriceEffect::Debit)));
    // Re-sized by notional: 1000 / (2.40 × 100) = 4.17 → 4.
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "price": 2.40, "notional": 1000 });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(order.quantity, d("4"));
    // A credit working order keeps its sign when only the size changes.
    let s = with_working(json!([working("w2", "entry", "open", "-1.10")]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "quantity": 1 });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!((order.limit_price, order.price_effect), (Some(d("1.10")), Some(PriceEffect::Credit)));
}

#[test]
fn cancel_of_option_orders_targets_working_entries_only() {
    let s = with_working(json!([
        working("entry-open", "entry", "open", "2.35"),
        working("exit-open", "exit", "open", "-2.80"),
        working("entry-filled", "entry", "filled", "2.35"),
        working("entry-pending", "entry", "pending", "2.30")
    ]));
    let actions = run(&s, json!({ "ticker": "SPX", "action": "CANCEL", "direction": "LONG" }), friday()).expect("ok");
    let ids: Vec<&str> = actions
        .iter()
        .map(|a| match a {
            BotAction::Cancel { order_id, order } => {
                assert_eq!(order.legs.len(), 2);
                assert_eq!(order.symbol, "SPX");
                order_id.as_str()
            }
            other => panic!("expected Cancel, got {other:?}"),
        })
        .collect();
    assert_eq!(ids, ["entry-open", "entry-pending"]);
}

/// A working exit listed with the actions that opened its position (a host that copied the position's legs) was
/// sent again by a MODIFY with those actions: a debit paid to open a credit spread, the take-profit gone and the
/// spread doubled. Refused, naming the order; an exit listed with its own closing actions is changed as asked.
#[test]
fn a_modify_of_an_exit_listed_with_opening_legs_is_refused() {
    let mut w = working("tp", "exit", "open", "-2.80");
    w["legs"] = vertical_legs();
    let s = with_working(json!([w]));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "target": "exit", "price": -2.70 });
    let e = unfillable(run(&s, body.clone(), friday()));
    assert!(e.contains("working order tp") && e.contains("buy_to_open"), "{e}");
    let s = with_working(json!([working("tp", "exit", "open", "-2.80")]));
    let actions = run(&s, body, friday()).expect("an exit with closing legs is modified");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    assert!(order.legs.iter().all(|l| !l.action.is_open()), "{:?}", order.legs);
}

/// A working option order listed without its legs cannot be changed (its legs are sent again), and the refusal
/// names it. It can be pulled: a cancel goes by the broker's id alone. Refused, an exit listed that way failed every
/// CLOSE of its position, a 500 at every bot and every retry.
#[test]
fn a_working_option_order_without_legs_is_named_when_changed_and_pulled_when_cancelled() {
    let mut w = working("w9", "entry", "open", "2.35");
    w["legs"] = json!([]);
    let s = with_working(json!([w.clone()]));
    let modify = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "price": 2.5 });
    let e = unfillable(run(&s, modify, friday()));
    assert_eq!(e, "the working SPX order has no option legs (working order w9)");
    let actions = run(&s, json!({ "ticker": "SPX", "action": "CANCEL", "direction": "LONG" }), friday()).unwrap();
    let [BotAction::Cancel { order_id, order }] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!(
        (order_id.as_str(), order.asset_class, order.symbol.as_str()),
        ("w9", strategy_webhook::model::AssetClass::Option, "SPX")
    );
    // The exit of a held vertical, listed without legs, is cancelled before the CLOSE, which goes out.
    let mut exit = working("x9", "exit", "open", "-4.00");
    exit["legs"] = json!([]);
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let s = spx(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "tradier", "account_id": "VA1",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical } ],
        "working_orders": [ exit ] } ] }));
    let actions = run(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG" }), friday()).unwrap();
    assert!(
        matches!(actions.as_slice(), [BotAction::Cancel { order_id, .. }, BotAction::Place(_)] if order_id == "x9"),
        "{actions:?}"
    );
}

/// A structure whose legs are all sold only receives, and one all bought only pays: read by the sign alone, a short
/// strangle at 3.00 went out as a debit (paying to sell two options) and a bought straddle at -4.00 as a credit. As
/// for one contract: all sold is a credit whatever the sign, all bought a debit, and a credit on it is refused.
#[test]
fn a_structure_all_sold_is_a_credit_and_all_bought_a_debit_whatever_the_sign() {
    let strangle = spx(json!({ "options": { "selection": "internal", "legs": {
        "short": [ { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 2 } },
                   { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": -2 } } ] } } }));
    for price in [3.0, -3.0] {
        let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": price });
        let o = place(&strangle, body, friday());
        assert_eq!(symbols(&o), ["SPXW240119C04510000", "SPXW240119P04490000"]);
        assert_eq!(leg_actions(&o), [LegAction::SellToOpen, LegAction::SellToOpen]);
        assert_eq!((o.limit_price, o.price_effect), (Some(d("3")), Some(PriceEffect::Credit)), "price {price}");
    }
    let straddle = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119P04500000", "action": "buy_to_open" } ]);
    let r = run(&spx_external(json!({})), external(straddle.clone(), Some(-4.0)), friday());
    assert!(matches!(r, Err(OrderError::LimitNotPositive { .. })), "{r:?}");
    let o = place(&spx_external(json!({})), external(straddle, Some(4.0)), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("4")), Some(PriceEffect::Debit)));
    // A structure with legs on both sides still follows the sign.
    let o = place(&spx(json!({})), open_long(Some("-1.5")), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("1.5")), Some(PriceEffect::Credit)));
}

/// The same for closes and MODIFYs: the close of a long strangle sells both legs (a credit whatever the sign), the
/// close of a short one buys both back (a debit; a credit refused), and a MODIFY re-prices a sold strangle's entry
/// as a credit.
#[test]
fn closes_and_modifies_of_a_structure_on_one_side_keep_its_price_effect() {
    let strangle = |action: &str| {
        json!([ { "symbol": "SPXW240119C04510000", "action": action },
                { "symbol": "SPXW240119P04490000", "action": action } ])
    };
    let s = with_positions(json!([ { "instrument": "SPX", "direction": "long", "quantity": "1",
                                     "legs": strangle("buy_to_open") } ]));
    for price in [2.5, -2.5] {
        let o = place(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "price": price }), friday());
        assert_eq!(leg_actions(&o), [LegAction::SellToClose, LegAction::SellToClose]);
        assert_eq!((o.limit_price, o.price_effect), (Some(d("2.5")), Some(PriceEffect::Credit)), "price {price}");
    }
    let s = with_positions(json!([ { "instrument": "SPX", "direction": "short", "quantity": "1",
                                     "legs": strangle("sell_to_open") } ]));
    let r = run(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "SHORT", "price": -1.0 }), friday());
    assert!(matches!(r, Err(OrderError::LimitNotPositive { .. })), "{r:?}");
    let o = place(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "SHORT", "price": 1.0 }), friday());
    assert_eq!(leg_actions(&o), [LegAction::BuyToClose, LegAction::BuyToClose]);
    assert_eq!((o.limit_price, o.price_effect), (Some(d("1")), Some(PriceEffect::Debit)));
    let entry = json!({ "id": "w1", "instrument": "SPX", "direction": "short", "intent": "entry",
        "order_type": "limit", "price": "-3.00", "quantity": "1", "state": "open", "legs": strangle("sell_to_open") });
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "SHORT", "price": 3.2 });
    let actions = run(&with_working(json!([entry])), body, friday()).expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("{actions:?}") };
    assert_eq!((order.limit_price, order.price_effect), (Some(d("3.2")), Some(PriceEffect::Credit)));
}

/// An internal strategy whose short side is a bear call spread on the long side's bull call spread's strikes, with
/// `positions` for its Tradier bot.
fn opposite_verticals(positions: Value) -> Strategy {
    spx(json!({
        "options": { "selection": "internal", "legs": {
            "long": [ { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } },
                      { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 2 } } ],
            "short": [ { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 0 } },
                       { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 2 } } ] } },
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "positions": positions } ] }))
}

/// An OPEN SHORT selling to open the 4500 call the bot holds bought (and buying the 4510 it holds sold) went out:
/// the broker nets per contract, so it flattened the held vertical while the answer said a short spread opened.
/// Refused for that bot; adding to the held vertical on its own side goes, and a held leg that cannot be read is
/// refused rather than guessed.
#[test]
fn an_option_open_on_contracts_held_the_other_way_is_refused() {
    let held = |legs: Value| json!([ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": legs } ]);
    // Listed in a broker's own spacing: still the same contract.
    let vertical = json!([ { "symbol": "SPXW  240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let s = opposite_verticals(held(vertical));
    let short = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": -2.0 });
    let e = rejected(run(&s, short, friday()));
    assert!(e.contains("SPXW240119C04500000 bought in its LONG SPX position") && e.contains("sell_to_open"), "{e}");
    let o = place(&s, open_long(Some("2.0")), friday());
    assert_eq!(leg_actions(&o), [LegAction::BuyToOpen, LegAction::SellToOpen], "adding on the same side goes");
    // One shared contract is enough: a held put does not stop it, a held short 4500 call blocks the long's buy.
    let s = opposite_verticals(held(json!([ { "symbol": "SPXW240119P04500000", "action": "buy_to_open" } ])));
    assert!(run(&s, open_long(Some("2.0")), friday()).is_ok());
    let s = opposite_verticals(held(json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_open" } ])));
    let e = rejected(run(&s, open_long(Some("2.0")), friday()));
    assert!(e.contains("SPXW240119C04500000 sold") && e.contains("buy_to_open"), "{e}");
    let s = opposite_verticals(held(json!([ { "symbol": "SPX 4500C 1/19", "action": "buy_to_open" } ])));
    let e = rejected(run(&s, open_long(Some("2.0")), friday()));
    assert!(e.contains("\"SPX 4500C 1/19\"") && e.contains("not an OCC option symbol"), "{e}");
}

// ---------------------------------------------------------------------------------------
// Equity and crypto sizing and prices
// ---------------------------------------------------------------------------------------

fn aapl(action: &str, direction: &str) -> Value {
    json!({ "ticker": "AAPL", "action": action, "direction": direction })
}

#[test]
fn mid_prices_round_to_the_tick_on_the_passive_side() {
    let s = equity(json!({}));
    // bid 190.10, ask 190.15: mid 190.125.
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).limit_price, Some(d("190.12")), "a buy rounds down");
    assert_eq!(place(&s, aapl("OPEN", "SHORT"), friday()).limit_price, Some(d("190.13")), "a sell rounds up");
    let s = equity(
        json!({ "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                                       "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "4" } ] } ] }),
    );
    assert_eq!(place(&s, aapl("CLOSE", "LONG"), friday()).limit_price, Some(d("190.13")), "closing a long sells");
}

#[test]
fn custom_limit_targets_are_fractions_of_the_spread() {
    let at = |f: &str, direction: &str| {
        let s = equity(json!({ "limit_target": { "custom": f } }));
        place(&s, aapl("OPEN", direction), friday()).limit_price.expect("limit").to_string()
    };
    assert_eq!(at("0", "LONG"), "190.10");
    assert_eq!(at("1", "LONG"), "190.15");
    assert_eq!(at("0.8", "LONG"), "190.14");
    // 190.10 + 0.3 × 0.05 = 190.115: half a tick.
    assert_eq!(at("0.3", "LONG"), "190.11");
    assert_eq!(at("0.3", "SHORT"), "190.12");
    let s = equity(json!({ "limit_target": "bid" }));
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).limit_price, Some(d("190.10")));
}

#[test]
fn the_quote_tick_is_used_when_given() {
    let s = equity(json!({ "market": { "quotes": { "AAPL": { "bid": "190.10", "ask": "190.20", "tick": "0.05" } } } }));
    // mid 190.15 is on the 0.05 tick.
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).limit_price, Some(d("190.15")));
    let s = equity(json!({ "market": { "quotes": { "AAPL": { "bid": "190.10", "ask": "190.15", "tick": "0.05" } } } }));
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).limit_price, Some(d("190.10")));
    assert_eq!(place(&s, aapl("OPEN", "SHORT"), friday()).limit_price, Some(d("190.15")));
}

#[test]
fn a_missing_or_crossed_quote_is_named() {
    let s = equity(json!({ "market": {} }));
    let e = unfillable(run(&s, aapl("OPEN", "LONG"), friday()));
    assert_eq!(e, "no bid/ask quote for AAPL in the market data, so the limit price cannot be set");
    let s = equity(json!({ "market": { "quotes": { "AAPL": { "last": "190" } } } }));
    assert!(unfillable(run(&s, aapl("OPEN", "LONG"), friday())).starts_with("no bid quote for AAPL"));
    let s = equity(json!({ "market": { "quotes": { "AAPL": { "bid": "191", "ask": "190" } } } }));
    assert!(unfillable(run(&s, aapl("OPEN", "LONG"), friday())).contains("crossed"));
    let s = equity(json!({ "limit_target": "alert_price" }));
    assert!(rejected(run(&s, aapl("OPEN", "LONG"), friday())).contains("Alert Price"));
}

/// docs/strategy.md says a one-sided quote (a bid of 0) has no mid, yet the `mid` Limit Target took one from it: a
/// limit CLOSE of 10 AAPL held long, quoted bid 0 / ask 190.15 / last 190.12, went out as a sell limit at 95.08,
/// half the market, which sold the position at the first bid above that. A `custom` target and an alert's
/// `limitPriceType: mark` priced from the same half spread.
#[test]
fn a_one_sided_quote_gives_no_mid_limit_price() {
    let held = json!([ { "id": "bot", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" },
                         "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" } ] } ]);
    let quoted = |bid: &str, ask: &str, target: Value| {
        equity(json!({ "limit_target": target, "bots": held,
                       "market": { "quotes": { "AAPL": { "bid": bid, "ask": ask, "last": "190.12" } } } }))
    };
    for target in [json!("mid"), json!({ "custom": "0.5" })] {
        let s = quoted("0", "190.15", target.clone());
        let e = unfillable(run(&s, aapl("CLOSE", "LONG"), friday()));
        assert!(e.contains("one-sided") && e.contains("bid 0") && e.contains("AAPL"), "{target}: {e}");
        // An entry rested at 95.07 beside a size computed from the last (190.12).
        let s = quoted("190.10", "0", target.clone());
        let e = unfillable(run(&s, aapl("OPEN", "LONG"), friday()));
        assert!(e.contains("one-sided") && e.contains("ask 0"), "{target}: {e}");
    }
    let s = quoted("-1", "190.15", json!("bid"));
    let mark = json!({ "ticker": "AAPL", "action": "CLOSE", "direction": "LONG", "limitPriceType": "mark" });
    assert!(unfillable(run(&s, mark, friday())).contains("one-sided"));
    // A target on the quoted side still prices from it; on the side quoted at 0 it is refused, never priced at 0.
    let s = quoted("0", "190.15", json!("ask"));
    assert_eq!(place(&s, aapl("CLOSE", "LONG"), friday()).limit_price, Some(d("190.15")));
    let s = quoted("0", "190.15", json!("bid"));
    assert!(run(&s, aapl("CLOSE", "LONG"), friday()).is_err());
}

/// A crossed quote (bid above the ask: stale or broken market data) was refused for the `mid` and `custom` Limit
/// Targets and for every target of an option leg, but a stock's `bid` and `ask` targets took it as it was: a
/// strategy resting its buys at the bid, quoted bid 195 / ask 190.15, sent a buy limit at 195, 4.85 above the
/// offer, and one selling at the ask sent a sell below the bid. An alert's own `limitPriceType` did the same.
#[test]
fn a_crossed_quote_prices_no_limit_at_the_bid_or_the_ask() {
    let held = json!([ { "id": "bot", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "10" },
                         "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" } ] } ]);
    let crossed = |target: &str| {
        equity(json!({ "limit_target": target, "bots": held,
                       "market": { "quotes": { "AAPL": { "bid": "195", "ask": "190.15", "last": "190.12" } } } }))
    };
    let e = unfillable(run(&crossed("bid"), aapl("OPEN", "LONG"), friday()));
    assert!(e.contains("crossed") && e.contains("bid 195"), "{e}");
    let e = unfillable(run(&crossed("ask"), aapl("CLOSE", "LONG"), friday()));
    assert!(e.contains("crossed"), "{e}");
    for which in ["bid", "ask", "ask_bid", "last"] {
        let body = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "limitPriceType": which });
        let e = unfillable(run(&crossed("mid"), body, friday()));
        assert!(e.contains("crossed"), "{which}: {e}");
    }
}

fn equity_sized(sizing: Value, equity_value: &str) -> Strategy {
    equity(json!({ "order_type": "market",
                   "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": sizing, "equity": equity_value } ] }))
}

#[test]
fn notional_smaller_than_one_share_is_rejected_with_a_reason() {
    let s = equity_sized(json!({ "fixed_notional": "100" }), "1000");
    let reason = rejected(run(&s, aapl("OPEN", "LONG"), friday()));
    assert_eq!(reason, "bot bot's sizing (fixed_notional 100) at 190.125 a unit comes to less than one whole unit");
}

#[test]
fn notional_and_percent_of_equity_round_down_to_whole_shares() {
    let s = equity_sized(json!({ "fixed_notional": "1000" }), "1000");
    // 1000 / 190.125 (mid) = 5.26 → 5.
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).quantity, d("5"));
    let s = equity_sized(json!({ "percent_of_equity": "2" }), "50000");
    // 2% of 50000 = 1000 → 5.
    assert_eq!(place(&s, aapl("OPEN", "LONG"), friday()).quantity, d("5"));
    // The alert's price is the sizing price when given: 1000 / 100 = 10.
    let mut body = aapl("OPEN", "LONG");
    body["price"] = json!(100);
    assert_eq!(place(&s, body, friday()).quantity, d("10"));
    let small = equity_sized(json!({ "percent_of_equity": "0.1" }), "50000");
    let reason = rejected(run(&small, aapl("OPEN", "LONG"), friday()));
    assert!(reason.contains("percent_of_equity 0.1 of equity 50000 = 50"), "{reason}");
}

#[test]
fn crypto_quantities_keep_the_broker_scale_and_round_down() {
    let s = snapshot(json!({
        "id": "btc", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "allowed_instruments": ["BTCUSD"],
        "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_notional": "100" } } ],
        "market": { "quotes": { "BTC/USD": { "last": "43000.123" } } }
    }));
    let o = place(&s, json!({ "ticker": "BTCUSD", "action": "OPEN", "direction": "LONG" }), friday());
    // 100 / 43000.123 = 0.0023255747… → 0.00232557 at 8 decimals, never rounded up.
    assert_eq!(o.quantity.to_string(), "0.00232557");
    assert_eq!(o.pair.as_ref().map(ToString::to_string).as_deref(), Some("BTC/USD"));
    let tiny = snapshot(json!({
        "id": "btc", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "allowed_instruments": ["BTCUSD"],
        "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_notional": "0.000001" } } ],
        "market": { "quotes": { "BTCUSD": { "last": "43000" } } }
    }));
    let reason = rejected(run(&tiny, json!({ "ticker": "BTCUSD", "action": "OPEN", "direction": "LONG" }), friday()));
    assert!(reason.contains("comes to less than the smallest size coinbase accepts"), "{reason}");
}

/// A Coinbase crypto strategy whose bot's snapshot carries product increments.
fn crypto_with_increments(order_type: &str, sizing: Value, increments: Value, quotes: Value) -> Strategy {
    snapshot(json!({
        "id": "coins", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": order_type,
        "limit_target": "mid", "allowed_instruments": ["BTCUSD", "DOGE-USD"],
        "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": sizing, "increments": increments } ],
        "market": { "quotes": quotes }
    }))
}

/// The increments of the Coinbase product fixtures (BTC-USD and DOGE-USD).
fn fixture_increments() -> Value {
    json!({
        "BTC/USD": { "base_increment": "0.00000001", "quote_increment": "0.01", "price_increment": "0.01" },
        "DOGE-USD": { "base_increment": 1, "quote_increment": "0.00001", "price_increment": "0.00001" }
    })
}

fn open(ticker: &str, direction: &str) -> Value {
    json!({ "ticker": ticker, "action": "OPEN", "direction": direction })
}

#[test]
fn crypto_sizes_round_down_to_the_pairs_base_increment() {
    let quotes = json!({ "DOGEUSD": { "last": "0.3" }, "BTC-USD": { "last": "43000.123" } });
    let s = crypto_with_increments("market", json!({ "fixed_notional": "100" }), fixture_increments(), quotes);
    // 100 / 0.3 = 333.33… → 333 whole coins at a base increment of 1, never 334.
    let doge = place(&s, open("DOGEUSD", "LONG"), friday());
    assert_eq!(doge.quantity.to_string(), "333");
    // BTC's increment is the broker's own eight decimals: 0.0023255747… → 0.00232557.
    let btc = place(&s, open("BTCUSD", "LONG"), friday());
    assert_eq!(btc.quantity.to_string(), "0.00232557");
    // The exact digits reach Coinbase's body: no padding to eight decimals.
    let body = |o: &Order| {
        let r = strategy_webhook::broker::BrokerId::Coinbase.broker().place("", o).expect("coinbase formats");
        serde_json::to_string(&r.body).expect("body serialises")
    };
    assert!(body(&doge).contains(r#""base_size":"333""#), "{}", body(&doge));
    assert!(body(&btc).contains(r#""base_size":"0.00232557""#), "{}", body(&btc));
    // A coarser increment with decimals keeps just its digits: 0.0012999 → 0.0012.
    let fine =
        json!({ "BTCUSD": { "base_increment": "0.0001", "quote_increment": "0.01", "price_increment": "0.01" } });
    let s = crypto_with_increments("market", json!({ "fixed_quantity": "0.0012999" }), fine, json!({}));
    let o = place(&s, open("BTCUSD", "LONG"), friday());
    assert_eq!(o.quantity.to_string(), "0.0012");
    assert!(body(&o).contains(r#""base_size":"0.0012""#), "{}", body(&o));
}

#[test]
fn a_crypto_size_below_the_base_increment_is_refused_naming_it() {
    let quotes = json!({ "DOGE/USD": { "last": "0.3" } });
    let s = crypto_with_increments("market", json!({ "fixed_notional": "0.2" }), fixture_increments(), quotes);
    let reason = rejected(run(&s, open("DOGEUSD", "LONG"), friday()));
    assert_eq!(
        reason,
        "bot bot's sizing (fixed_notional 0.2) at 0.3 a unit comes to less than the base increment 1 for DOGEUSD at coinbase"
    );
    // Without increments for the pair the eight decimals still allow it.
    let s = crypto_with_increments(
        "market",
        json!({ "fixed_notional": "0.2" }),
        json!({}),
        json!({ "DOGE/USD": { "last": "0.3" } }),
    );
    assert_eq!(place(&s, open("DOGEUSD", "LONG"), friday()).quantity.to_string(), "0.66666666");
}

/// A CLOSE sent the position's size as it was held: a coin balance finer than the pair trades in (half a DOGE
/// where the base increment is 1, a wallet's twelve decimals) was refused by Coinbase, or by the format before it,
/// and the whole position stayed open. What the pair can trade is sold; a position all dust is refused, naming it.
#[test]
fn a_crypto_close_sells_what_the_pair_trades_in() {
    let close = |held: &str, increments: Value| {
        let s = snapshot(json!({
            "id": "coins", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
            "allowed_instruments": ["ETHUSD", "DOGE-USD"],
            "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_quantity": "1" },
                        "increments": increments,
                        "positions": [ { "instrument": "DOGE-USD", "direction": "long", "quantity": held },
                                       { "instrument": "ETH-USD", "direction": "long", "quantity": held } ] } ],
            "market": { "quotes": { "DOGEUSD": { "last": "0.3" }, "ETHUSD": { "last": "3000" } } }
        }));
        move |ticker: &str| run(&s, json!({ "ticker": ticker, "action": "CLOSE", "direction": "LONG" }), friday())
    };
    let sold = |r: Result<Vec<BotAction>, OrderError>| match r {
        Ok(a) => match a.as_slice() {
            [BotAction::Place(o)] => o.quantity.to_string(),
            other => panic!("expected one Place, got {other:?}"),
        },
        Err(e) => panic!("expected a close, got {e:?}"),
    };
    assert_eq!(sold(close("333.5", fixture_increments())("DOGEUSD")), "333");
    // No increments for ETH: Coinbase's eight decimals.
    assert_eq!(sold(close("1.234567891234", fixture_increments())("ETHUSD")), "1.23456789");
    // A whole balance is sold whole.
    assert_eq!(sold(close("2.5", json!({}))("ETHUSD")), "2.5");
    let reason = rejected(close("0.5", fixture_increments())("DOGEUSD"));
    assert!(reason.contains("bot bot's DOGEUSD position of 0.5") && reason.contains("base increment 1"), "{reason}");
}

#[test]
fn crypto_limit_prices_move_passively_onto_the_price_increment() {
    let coarse =
        json!({ "BTC-USD": { "base_increment": "0.00000001", "quote_increment": "0.01", "price_increment": "0.5" } });
    // Mid of 43000.10 / 43000.40 is 43000.25: a buy goes down to 43000.0, a sell up to 43000.5,
    // where a plain nearest-tick rounding would have moved the buy up.
    let quotes = json!({ "BTCUSD": { "bid": "43000.10", "ask": "43000.40" } });
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "0.01" }), coarse.clone(), quotes);
    let buy = place(&s, open("BTCUSD", "LONG"), friday());
    assert_eq!(buy.limit_price.map(|p| p.to_string()).as_deref(), Some("43000.0"));
    let sell = place(&s, open("BTCUSD", "SHORT"), friday());
    assert_eq!(sell.limit_price.map(|p| p.to_string()).as_deref(), Some("43000.5"));
    // The alert's own price is moved too, as the broker refuses one off the increment.
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "1" }), fixture_increments(), json!({}));
    let mut body = open("DOGEUSD", "LONG");
    body["price"] = json!("0.123456");
    assert_eq!(place(&s, body.clone(), friday()).limit_price, Some(d("0.12345")));
    body["direction"] = json!("SHORT");
    body["price"] = json!("0.123451");
    let short = place(&s, body, friday());
    assert_eq!(short.limit_price, Some(d("0.12346")), "a sell goes up");
    // A price already on the increment stays where it is.
    let mut on = open("DOGEUSD", "LONG");
    on["price"] = json!("0.12345");
    assert_eq!(place(&s, on, friday()).limit_price, Some(d("0.12345")));
}

/// A limit price worked out from quotes was put on a cent for every coin before the pair's increment was applied:
/// a DOGE mid of 0.12345 became 0.12 (a sell 3 % below the bid), a SHIB one zero.
#[test]
fn crypto_prices_from_quotes_keep_the_coins_own_digits() {
    let quotes = json!({ "DOGEUSD": { "bid": "0.12341", "ask": "0.12349" } });
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "1" }), fixture_increments(), quotes.clone());
    let buy = place(&s, open("DOGEUSD", "LONG"), friday());
    assert_eq!(buy.limit_price, Some(d("0.12345")));
    let sell = place(&s, open("DOGEUSD", "SHORT"), friday());
    assert_eq!(sell.limit_price, Some(d("0.12345")));
    // Without the bot's increments: the coin's fifth significant digit, an exact half to the passive side.
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "1" }), json!({}), quotes);
    assert_eq!(place(&s, open("DOGEUSD", "LONG"), friday()).limit_price, Some(d("0.12345")));
    let shib = json!({ "DOGEUSD": { "bid": "0.00001231", "ask": "0.00001236" } });
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "1" }), json!({}), shib);
    // The mid is 0.000012335: a buy's half goes down, a sell's up.
    assert_eq!(place(&s, open("DOGEUSD", "LONG"), friday()).limit_price, Some(d("0.000012335")));
    let shib_half = json!({ "DOGEUSD": { "bid": "0.0000123", "ask": "0.0000124" } });
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "1" }), json!({}), shib_half);
    assert_eq!(place(&s, open("DOGEUSD", "LONG"), friday()).limit_price, Some(d("0.00001235")));
    // A coin above $1000 keeps the cent.
    let btc = json!({ "BTCUSD": { "bid": "43000.10", "ask": "43000.13" } });
    let s = crypto_with_increments("limit", json!({ "fixed_quantity": "0.01" }), json!({}), btc);
    assert_eq!(place(&s, open("BTCUSD", "LONG"), friday()).limit_price, Some(d("43000.11")));
    assert_eq!(place(&s, open("BTCUSD", "SHORT"), friday()).limit_price, Some(d("43000.12")));
}

#[test]
fn increments_are_validated() {
    let bad = |inc: Value| {
        Strategy::from_json(
            json!({
                "id": "c", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
                "allowed_instruments": ["BTCUSD"],
                "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_quantity": "1" },
                            "increments": inc } ]
            })
            .to_string()
            .as_bytes(),
        )
        .expect_err("refused")
        .to_string()
    };
    let zero =
        bad(json!({ "BTCUSD": { "base_increment": "0", "quote_increment": "0.01", "price_increment": "0.01" } }));
    assert!(zero.contains("`bots[0].increments.BTCUSD.base_increment` must be above zero"), "{zero}");
    let neg =
        bad(json!({ "BTCUSD": { "base_increment": "1", "quote_increment": "0.01", "price_increment": "-0.01" } }));
    assert!(neg.contains("price_increment` must be above zero"), "{neg}");
    let pair =
        bad(json!({ "BITCOIN": { "base_increment": "1", "quote_increment": "0.01", "price_increment": "0.01" } }));
    assert!(pair.contains("is not a crypto pair"), "{pair}");
    let missing = bad(json!({ "BTCUSD": { "base_increment": "1", "quote_increment": "0.01" } }));
    assert!(missing.contains("price_increment"), "{missing}");
}

/// A quote's tick of zero or below was ignored for the default tick: a typo silently changed the rounding.
#[test]
fn a_quote_tick_not_above_zero_is_refused() {
    for tick in ["0", "-0.01"] {
        let e = Strategy::from_json(
            json!({
                "id": "q", "token_hash": TOKEN, "status": "active", "asset_class": "equity", "order_type": "limit",
                "limit_target": "mid", "allowed_instruments": ["AAPL"],
                "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": { "fixed_quantity": "1" } } ],
                "market": { "quotes": { "AAPL": { "bid": "190.10", "ask": "190.15", "tick": tick } } }
            })
            .to_string()
            .as_bytes(),
        )
        .expect_err("refused")
        .to_string();
        assert!(e.contains("`market.quotes.AAPL.tick` must be above zero"), "{tick}: {e}");
    }
}

#[test]
fn close_closes_the_whole_position_summed_over_positions() {
    let s = equity(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" },
                       { "instrument": "aapl", "direction": "long", "quantity": "5" },
                       { "instrument": "AAPL", "direction": "short", "quantity": "7" },
                       { "instrument": "MSFT", "direction": "long", "quantity": "3" } ] } ] }));
    let o = place(&s, aapl("CLOSE", "LONG"), friday());
    assert_eq!(o.quantity, d("15"), "AAPL long 10 + 5; not the short, not MSFT");
    assert_eq!(o.intent, Intent::CloseLong);
    let o = place(&s, aapl("CLOSE", "SHORT"), friday());
    assert_eq!((o.quantity, o.intent), (d("7"), Intent::CloseShort));
}

fn equity_working(orders: Value) -> Strategy {
    equity(json!({ "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                              "working_orders": orders } ] }))
}

fn equity_order(id: &str, intent: &str, state: &str, direction: &str) -> Value {
    json!({ "id": id, "instrument": "AAPL", "direction": direction, "intent": intent, "order_type": "limit",
            "price": "189.50", "quantity": "10", "state": state })
}

#[test]
fn modify_re_sizes_by_quantity_or_notional() {
    let s = equity_working(json!([
        equity_order("w1", "entry", "open", "long"),
        equity_order("w2", "exit", "open", "long")
    ]));
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "quantity": 7, "target": "exit" });
    let actions = run(&s, body, friday()).expect("modifies");
    let [BotAction::Replace { order_id, order: exit, quantity_changed, .. }] = actions.as_slice() else {
        panic!("one replace of the exit: {actions:?}")
    };
    assert_eq!(order_id, "w2");
    assert_eq!(exit.quantity, d("7"));
    assert!(*quantity_changed);
    assert_eq!(exit.limit_price, Some(d("189.50")), "the working price stays");
    assert_eq!(exit.intent, Intent::CloseLong);
    let s = equity_working(json!([equity_order("w1", "entry", "open", "long")]));
    // 1000 at the new price 190 → 5.26 → 5.
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "price": 190, "notional": 1000 });
    let actions = run(&s, body, friday()).expect("modifies");
    let BotAction::Replace { order, .. } = &actions[0] else { panic!() };
    assert_eq!((order.quantity, order.limit_price), (d("5"), Some(d("190"))));
    // Price only: the size is unchanged.
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "price": 190.05 });
    let actions = run(&s, body, friday()).expect("modifies");
    let BotAction::Replace { order, quantity_changed, .. } = &actions[0] else { panic!() };
    assert_eq!((order.quantity, *quantity_changed), (d("10"), false));
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "price": -190 });
    assert_eq!(rejected(run(&s, body, friday())), "the limit price -190 for AAPL is not above zero");
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "quantity": 0.5 });
    assert_eq!(rejected(run(&s, body, friday())), "MODIFY quantity 0.5 comes to less than one whole unit");
}

/// A MODIFY changes price and size; one naming another order type or time in force than the working order's was
/// answered processed and sent as a limit day order again (the sender's move to market, or to GTC, dropped).
#[test]
fn modify_naming_another_type_or_time_in_force_is_refused() {
    let s = equity_working(json!([equity_order("w1", "entry", "open", "long")]));
    let modify = |extra: Value| merged(json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG" }), extra);
    assert_eq!(
        rejected(run(&s, modify(json!({ "order_type": "market", "price": 190.12 })), friday())),
        "MODIFY changes only the price and quantity of working order w1: it is a limit order and the alert asks \
         for order type market; send CANCEL and a new order to change its order type"
    );
    assert_eq!(
        rejected(run(&s, modify(json!({ "duration": "gtc", "price": 189 })), friday())),
        "MODIFY changes only the price and quantity of working order w1: it is a day order and the alert asks for \
         time in force gtc; send CANCEL and a new order to change its time in force"
    );
    // A market order's time in force is not judged: Tradier sends every market order as a day order, so the same
    // template's GTC re-size of the order it placed was refused at every try.
    let market = equity_working(json!([merged(
        equity_order("m1", "entry", "pending", "long"),
        json!({ "order_type": "market", "price": null })
    )]));
    let actions = run(&market, modify(json!({ "order_type": "market", "duration": "gtc", "quantity": 5 })), friday());
    let actions = actions.expect("re-sizes");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("one replace") };
    assert_eq!((order.quantity, order.duration), (d("5"), strategy_webhook::model::Duration::Day));
    // The order's own terms, as a template sending them on every alert writes them, are no change.
    let actions = run(&s, modify(json!({ "order_type": "limit", "duration": "day", "price": 189 })), friday());
    let actions = actions.expect("modifies");
    let [BotAction::Replace { order, .. }] = actions.as_slice() else { panic!("one replace") };
    assert_eq!((order.limit_price, order.duration), (Some(d("189")), strategy_webhook::model::Duration::Day));
}

/// A working order listed with `"duration": "other"` is in a time in force of the broker's own (Tastytrade's GTC
/// Ext, Alpaca's `opg`, Tradier's `pre`), which no order this library sends has. Listed as `day` before, a MODIFY
/// re-sent it as a day order: a GTC Ext take-profit moved expired that night, an `opg` order filled intraday, and a
/// re-size at a broker that cancels and places again placed a day order. Every MODIFY of it is refused with the
/// reason; a CANCEL, and a CLOSE's cancel of it as a working exit, pull it by its id as before.
#[test]
fn modify_of_a_working_order_in_the_brokers_own_time_in_force_is_refused() {
    let listed = |id: &str, intent: &str| {
        merged(equity_order(id, intent, "open", "long"), json!({ "duration": "other", "quantity": "5" }))
    };
    let at = |broker: &str, positions: Value, orders: Value| {
        equity(json!({ "bots": [ { "id": "bot", "broker": broker, "account_id": "A",
            "sizing": { "fixed_quantity": "1" }, "positions": positions, "working_orders": orders } ] }))
    };
    let refusal = |id: &str| {
        format!(
            "working order {id} has a time in force this library does not send (the broker's own); a MODIFY would \
             re-send it as another: change it at the broker, or send CANCEL and a new order"
        )
    };
    let modify = |extra: Value| merged(json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG" }), extra);
    // Replaced in place (Alpaca), or pulled and placed again at the new size (Tradier).
    for broker in ["alpaca", "tradier"] {
        let s = at(broker, json!([]), json!([listed("w1", "entry")]));
        for extra in [
            json!({ "price": 189 }),
            json!({ "quantity": 3 }),
            // Not "it is a day order": its time in force is none of the library's.
            json!({ "duration": "gtc", "price": 189 }),
            json!({ "order_type": "limit", "duration": "day", "price": 189 }),
        ] {
            assert_eq!(rejected(run(&s, modify(extra.clone()), friday())), refusal("w1"), "{broker} {extra}");
        }
        // A market order's too: an `opg` market order re-sent as a day order fills at once.
        let market = at(broker, json!([]), json!([merged(listed("m1", "entry"), json!({ "order_type": "market" }))]));
        assert_eq!(rejected(run(&market, modify(json!({ "quantity": 3 })), friday())), refusal("m1"), "{broker}");

        let actions = run(&s, aapl("CANCEL", "LONG"), friday()).expect("cancels");
        let [BotAction::Cancel { order_id, .. }] = actions.as_slice() else { panic!("one cancel: {actions:?}") };
        assert_eq!(order_id, "w1");

        let held = json!([ { "instrument": "AAPL", "direction": "long", "quantity": "5" } ]);
        let s = at(broker, held, json!([listed("x1", "exit")]));
        let actions = run(&s, aapl("CLOSE", "LONG"), friday()).expect("closes");
        let [BotAction::Cancel { order_id, .. }, BotAction::Place(close)] = actions.as_slice() else {
            panic!("a close and the cancel of its exit: {actions:?}")
        };
        assert_eq!((order_id.as_str(), close.quantity), ("x1", d("5")), "{broker}");
    }
    // `other` is the one word beside the library's own: any other is refused on load, as every snapshot field is.
    let snapshot = json!({ "id": "s", "token_hash": TOKEN, "status": "active", "asset_class": "equity",
        "allowed_instruments": ["AAPL"], "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "working_orders": [ merged(listed("w1", "entry"), json!({ "duration": "gtd" })) ] } ] });
    let e = Strategy::from_json(snapshot.to_string().as_bytes()).expect_err("an unknown time in force");
    assert!(e.to_string().contains(r#""gtd" is not one of: day, gtc, fok, other"#), "{e}");
}

#[test]
fn cancel_targets_working_entry_orders_only() {
    let s = equity_working(json!([
        equity_order("entry-open", "entry", "open", "long"),
        equity_order("exit-open", "exit", "open", "long"),
        equity_order("entry-filled", "entry", "filled", "long"),
        equity_order("entry-cancelled", "entry", "cancelled", "long"),
        equity_order("entry-short", "entry", "open", "short"),
        equity_order("entry-pending", "entry", "Pending", "long")
    ]));
    let actions = run(&s, aapl("CANCEL", "LONG"), friday()).expect("cancels");
    let ids: Vec<&str> = actions
        .iter()
        .map(|a| match a {
            BotAction::Cancel { order_id, .. } => order_id.as_str(),
            other => panic!("expected Cancel, got {other:?}"),
        })
        .collect();
    assert_eq!(ids, ["entry-open", "entry-pending"]);
}

/// `cancel: true` (a CANCEL leading the alert's trade) with entries working on both sides: leading an entry, only
/// the entry's side was pulled, and the other side's entry stayed working beside the new one, free to fill into
/// the opposite position. It pulls both sides' entries (TradersPost cancels "all open orders for the specified
/// ticker"); leading an exit, those of the side the exit closes, as before.
#[test]
fn a_cancel_leading_an_entry_pulls_the_working_entries_of_both_sides() {
    let s = equity(json!({ "directions": { "long": true, "short": true },
        "rules": { "buy": "open_long", "sell": "open_short", "exit": "close_long" },
        "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" } ],
                    "working_orders": [ equity_order("buy-stop", "entry", "open", "long"),
                                        equity_order("sell-stop", "entry", "open", "short") ] } ] }));
    let planned = |body: &Value| -> Vec<String> {
        let alerts = alert::parse(body.to_string().as_bytes(), Some("application/json")).expect("test alert parses");
        let plan = decide(&s, &alerts).expect("decided");
        let ctx = BuildContext { strategy: &s, now_ms: friday(), dedup_key: "dedup", claimed_ms: friday() };
        let steps = plan.steps.iter().map(|d| build(&ctx, d, &s.bots[0]).expect("builds"));
        steps
            .flatten()
            .map(|a| match a {
                BotAction::Cancel { order_id, .. } => format!("cancel {order_id}"),
                BotAction::Place(o) => format!("place {}", o.intent.as_str()),
                other => panic!("a cancel or a place: {other:?}"),
            })
            .collect()
    };
    for body in [
        json!({ "ticker": "AAPL", "action": "buy", "cancel": true }),
        json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "cancel": true }),
    ] {
        // The entry's own side last: the entry waits for that cancel, and stands in for the order it pulls.
        assert_eq!(planned(&body), ["cancel sell-stop", "cancel buy-stop", "place open_long"], "{body}");
    }
    let exit = json!({ "ticker": "AAPL", "action": "exit", "cancel": true });
    assert_eq!(planned(&exit), ["cancel buy-stop", "place close_long"]);
}

/// The direction an entry's `cancel: true` CANCEL carries (an OPEN LONG's, an `add` bullish's) names the side the
/// entry opens: asked of it, the other side's entry working alone was nothing to pull, and stayed working.
#[test]
fn a_cancel_leading_a_directed_entry_pulls_the_other_sides_entry() {
    let s = equity(json!({ "directions": { "long": true, "short": true },
        "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "working_orders": [ equity_order("sell-stop", "entry", "open", "short") ] } ] }));
    let body = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "cancel": true });
    let alerts = alert::parse(body.to_string().as_bytes(), Some("application/json")).expect("test alert parses");
    let plan = decide(&s, &alerts).expect("decided");
    let ctx = BuildContext { strategy: &s, now_ms: friday(), dedup_key: "dedup", claimed_ms: friday() };
    let actions: Vec<BotAction> = plan.steps.iter().flat_map(|d| build(&ctx, d, &s.bots[0]).expect("builds")).collect();
    let [BotAction::Cancel { order_id, .. }, BotAction::Place(o)] = actions.as_slice() else {
        panic!("the cancel, then the entry: {actions:?} (skipped: {:?})", plan.skipped)
    };
    assert_eq!((order_id.as_str(), o.intent), ("sell-stop", Intent::OpenLong));
}

#[test]
fn a_limit_alert_price_that_is_not_positive_is_named() {
    let mut body = aapl("OPEN", "LONG");
    body["price"] = json!(-5);
    let e = rejected(run(&equity(json!({})), body, friday()));
    assert_eq!(e, "the limit price -5 for AAPL is not above zero");
}

#[test]
fn huge_numbers_are_a_cause_text_not_a_panic() {
    let s = equity(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
        "sizing": { "fixed_notional": "79000000000000000000000000000" } } ] }));
    let mut body = aapl("OPEN", "LONG");
    body["price"] = json!("0.0000000000000000000000000001");
    // The sender's price: refused for this bot, as any size past what an order holds is, not a 500.
    assert!(rejected(run(&s, body, friday())).contains("more units than any order can hold"));
    let s = equity(json!({ "market": { "quotes": { "AAPL": {
        "bid": "79000000000000000000000000000", "ask": "79000000000000000000000000000" } } } }));
    assert!(unfillable(run(&s, aapl("OPEN", "LONG"), friday())).contains("too large"));
}

// ---------------------------------------------------------------------------------------
// MODIFY acts on one working order (issue 12 §2)
// ---------------------------------------------------------------------------------------

/// A resting buy-limit entry at 185 and a resting sell-limit exit at 200 on the long side.
fn entry_and_exit(broker: &str) -> Strategy {
    let order = |id: &str, intent: &str, price: &str| {
        json!({ "id": id, "instrument": "AAPL", "direction": "long", "intent": intent, "order_type": "limit",
                "price": price, "quantity": "10", "duration": "gtc", "state": "open" })
    };
    equity(json!({ "bots": [ { "id": "bot", "broker": broker, "account_id": "A", "sizing": { "fixed_quantity": "1" },
                              "working_orders": [ order("e-1", "entry", "185"), order("x-1", "exit", "200") ] } ] }))
}

fn modify(patch: Value) -> Value {
    merged(json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG" }), patch)
}

#[test]
fn modify_with_an_entry_and_an_exit_working_is_refused_naming_both() {
    let s = entry_and_exit("alpaca");
    let e = rejected(run(&s, modify(json!({ "price": 186 })), friday()));
    assert_eq!(
        e,
        "MODIFY LONG AAPL is ambiguous: 2 working orders — buy limit 185 (entry, id e-1), sell limit 200 (exit, id x-1); \
         send \"target\": \"entry\" or \"exit\", or \"order_id\""
    );
}

#[test]
fn modify_moves_only_the_order_the_alert_names() {
    let s = entry_and_exit("alpaca");
    let replaced = |patch: Value| match run(&s, modify(patch), friday()).expect("modifies").as_slice() {
        [BotAction::Replace { order_id, order, .. }] => (order_id.clone(), order.limit_price),
        other => panic!("one replace: {other:?}"),
    };
    assert_eq!(replaced(json!({ "price": 186, "target": "entry" })), ("e-1".into(), Some(d("186"))));
    assert_eq!(replaced(json!({ "price": 199, "target": "EXIT" })), ("x-1".into(), Some(d("199"))));
    assert_eq!(replaced(json!({ "price": 199, "order_id": "x-1" })), ("x-1".into(), Some(d("199"))));
    assert_eq!(replaced(json!({ "price": 186, "orderId": "e-1" })), ("e-1".into(), Some(d("186"))));
    // An id that is not there leaves this bot nothing to change.
    assert_eq!(run(&s, modify(json!({ "price": 186, "order_id": "gone" })), friday()).unwrap(), []);
    // Two entries: the target alone cannot choose, the id can.
    let two = equity_working(json!([
        equity_order("w1", "entry", "open", "long"),
        equity_order("w3", "entry", "open", "long")
    ]));
    let e = rejected(run(&two, modify(json!({ "price": 186, "target": "entry" })), friday()));
    assert!(e.ends_with("send the \"order_id\" of the one to change"), "{e}");
}

/// Brokers whose replace cannot carry a new quantity: the working order is cancelled and
/// a new one placed at the new size, with its own client order id.
#[test]
fn re_sizing_where_the_broker_cannot_change_the_quantity_cancels_and_places_anew() {
    for broker in ["tradier", "tastytrade"] {
        let s = entry_and_exit(broker);
        let body = modify(json!({ "target": "entry", "quantity": 25, "price": 186 }));
        let actions = run(&s, body, friday()).expect("re-sizes");
        let [BotAction::Cancel { order_id, order: pulled }, BotAction::Place(placed)] = actions.as_slice() else {
            panic!("{broker}: a cancel then a place, got {actions:?}")
        };
        assert_eq!(order_id, "e-1", "{broker}");
        assert_eq!(pulled.quantity, d("10"), "{broker}: the cancel names the order as it stood");
        assert_eq!((placed.quantity, placed.limit_price), (d("25"), Some(d("186"))), "{broker}");
        assert_eq!(placed.intent, Intent::OpenLong, "{broker}");
        assert_eq!(placed.duration, strategy_webhook::model::Duration::Gtc, "{broker}: the working order's duration");
        assert_ne!(placed.client_order_id, pulled.client_order_id, "{broker}");
        // Each formats for the broker: a DELETE of the old id, then a new order.
        let bot = &s.bots[0];
        let cancel = strategy_webhook::broker::format(bot.broker, &bot.account_id, &actions[0]).expect("cancel");
        let place = strategy_webhook::broker::format(bot.broker, &bot.account_id, &actions[1]).expect("place");
        assert_eq!(cancel.method.as_str(), "DELETE", "{broker}");
        assert!(cancel.path.ends_with("/orders/e-1"), "{broker}: {}", cancel.path);
        assert_eq!(place.method.as_str(), "POST", "{broker}");
        // A new price alone still changes the order in place.
        let actions = run(&s, modify(json!({ "target": "entry", "price": 186 })), friday()).expect("re-prices");
        assert!(matches!(actions.as_slice(), [BotAction::Replace { quantity_changed: false, .. }]), "{broker}");
    }
    // Brokers that re-size in place keep one replace.
    for broker in ["alpaca", "schwab"] {
        let s = entry_and_exit(broker);
        let actions = run(&s, modify(json!({ "target": "entry", "quantity": 25 })), friday()).expect("re-sizes");
        assert!(matches!(actions.as_slice(), [BotAction::Replace { quantity_changed: true, .. }]), "{broker}");
    }
}

#[test]
fn re_sizing_an_option_order_at_tastytrade_keeps_its_legs() {
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "tastytrade", "account_id": "5WT0001",
        "sizing": { "fixed_quantity": "1" }, "working_orders": [ working("w1", "entry", "open", "2.35") ] } ] }));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "quantity": 3 });
    let actions = run(&s, body, friday()).expect("re-sizes");
    let [BotAction::Cancel { order_id, .. }, BotAction::Place(placed)] = actions.as_slice() else {
        panic!("{actions:?}")
    };
    assert_eq!(order_id, "w1");
    assert_eq!(placed.quantity, d("3"));
    assert_eq!(leg_actions(placed), [LegAction::BuyToOpen, LegAction::SellToOpen]);
    assert_eq!((placed.limit_price, placed.price_effect), (Some(d("2.35")), Some(PriceEffect::Debit)));
}

// ---------------------------------------------------------------------------------------
// Option legs as the spec describes them (issue 12 §4)
// ---------------------------------------------------------------------------------------

#[test]
fn spx_leg_symbols_trade_as_spxw() {
    let legs = json!([ { "symbol": "SPX240119C04500000", "action": "buy_to_open" },
                       { "symbol": "SPX   240119C04510000", "action": "sell_to_open" } ]);
    let o = place(&spx_external(json!({})), external(legs, Some(2.35)), friday());
    assert_eq!(symbols(&o), ["SPXW240119C04500000", "SPXW240119C04510000"]);
    assert_eq!(o.symbol, "SPX");
}

#[test]
fn external_legs_are_checked_against_the_chain() {
    let s = spx_external(json!({}));
    let cases = [
        (
            json!([ { "symbol": "SPXW240119C04502000", "action": "buy_to_open" } ]),
            "legs[0] (SPXW240119C04502000) has strike 4502, which the SPX option chain does not list",
        ),
        (
            json!([ { "side": "PUT", "strike": 4500, "expiration": "2024-01-23", "action": "sell_to_open" } ]),
            "legs[0] (SPXW240123P04500000) expires on 2024-01-23, which the SPX option chain does not list",
        ),
        (
            json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                    { "symbol": "SPXW240126C04600000", "action": "sell_to_open" } ]),
            "legs[1] (SPXW240126C04600000) has strike 4600",
        ),
    ];
    for (legs, want) in cases {
        let e = unfillable(run(&s, external(legs.clone(), Some(1.0)), friday()));
        assert!(e.starts_with(want), "{legs}: {e}");
    }
}

#[test]
fn without_a_chain_a_weekend_or_holiday_expiration_is_named() {
    let s = spx_external(json!({ "market": {} }));
    let cases = [
        (
            "2024-01-20",
            "legs[0] (SPXW240120C04500000) expires on 2024-01-20, a Saturday: no option expires on a weekend",
        ),
        ("2024-01-21", "a Sunday"),
        ("2024-02-19", "legs[0] (SPXW240219C04500000) expires on 2024-02-19, a market holiday (Washington's Birthday)"),
        ("2024-03-29", "a market holiday (Good Friday)"),
    ];
    for (expiration, want) in cases {
        let legs = json!([ { "side": "CALL", "strike": 4500, "expiration": expiration, "action": "buy_to_open" } ]);
        let e = unfillable(run(&s, external(legs, Some(1.0)), friday()));
        assert!(e.contains(want), "{expiration}: {e}");
    }
    // A trading day without a chain is taken as sent.
    let legs = json!([ { "side": "CALL", "strike": 4500, "expiration": "2024-02-20", "action": "buy_to_open" } ]);
    assert_eq!(symbols(&place(&s, external(legs, Some(1.0)), friday())), ["SPXW240220C04500000"]);
}

#[test]
fn live_prices_price_legs_the_market_data_has_no_quote_for() {
    // Mid target, no quotes: each leg at its live price (a spread's bid and ask alike).
    let s = spx_external(json!({}));
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "live_price": 3.10 },
                       { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "liveprice": "0.75" } ]);
    let o = place(&s, external(legs, None), friday());
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.35")), Some(PriceEffect::Debit)));
    // A quote in the market data wins over the live price.
    let quoted = spx_external(json!({ "market": { "option_chains": { "SPX": spx_chain() },
        "quotes": { "SPXW240119C04500000": { "bid": "3.00", "ask": "3.20" } } } }));
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "live_price": 9.90 } ]);
    assert_eq!(place(&quoted, external(legs, None), friday()).limit_price, Some(d("3.10")));
    // Sizing by amount uses the live prices too: 1000 / (2.35 × 100) = 4.25 → 4.
    let sized = spx_external(json!({ "order_type": "market",
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_notional": "1000" } } ] }));
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "live_price": 3.10 },
                       { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "live_price": 0.75 } ]);
    assert_eq!(place(&sized, external(legs, None), friday()).quantity, d("4"));
    // An alert asking for the last price (`limitPriceType: last`) reads a leg without one in the market data at
    // its live price too, rather than failing the entry.
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "live_price": 3.10 },
                       { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "live_price": 0.75 } ]);
    let mut body = external(legs, None);
    body["limitPriceType"] = json!("last");
    assert_eq!(place(&s, body, friday()).limit_price, Some(d("2.35")));
}

/// A working order the host says is partly filled (`filled`) carries its fills into a MODIFY, so a broker whose
/// edit states the whole size (Coinbase) is sent remaining plus filled; absent, nothing has filled.
#[test]
fn a_partly_filled_working_order_carries_its_fills_into_a_modify() {
    let working = |filled: Option<&str>| {
        let mut o = json!({ "id": "cb-1", "instrument": "BTC/USD", "direction": "long", "intent": "entry",
                            "order_type": "limit", "price": "60000", "quantity": "0.7", "duration": "gtc",
                            "state": "open" });
        if let Some(f) = filled {
            o["filled"] = json!(f);
        }
        o
    };
    for (filled, want) in [(Some("0.3"), "0.3"), (None, "0")] {
        let mut s = json!({
            "id": "coins", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "limit",
            "duration": "gtc", "allowed_instruments": ["BTCUSD"],
            "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_quantity": "1" },
                        "working_orders": [ working(filled) ] } ]
        });
        let s = snapshot(std::mem::take(&mut s));
        let modify = json!({ "ticker": "BTCUSD", "action": "MODIFY", "direction": "LONG", "price": "61000" });
        let actions = run(&s, modify, friday()).unwrap();
        let [BotAction::Replace { order, filled, .. }] = actions.as_slice() else { panic!("{actions:?}") };
        assert_eq!((order.quantity, *filled), (d("0.7"), d(want)));
        let req = strategy_webhook::broker::format(strategy_webhook::broker::BrokerId::Coinbase, "C", &actions[0]);
        let body = String::from_utf8(req.unwrap().body.to_bytes()).unwrap();
        let size = if want == "0" { r#""size":"0.7""# } else { r#""size":"1.0""# };
        assert!(body.contains(size), "{body}");
    }
}

/// An option CLOSE, MODIFY or CANCEL whose alert names a contract (an OCC ticker, or legs) acts on the positions and
/// orders holding it only. It acted on every contract of the underlying: a CLOSE naming one call sold a put held
/// beside it, a MODIFY re-priced an order on another strike, a CANCEL pulled the entries of every contract.
#[test]
fn an_option_close_modify_or_cancel_acts_only_on_the_contracts_the_alert_names() {
    let call = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let put = json!([ { "symbol": "SPXW240119P04490000", "action": "buy_to_open" } ]);
    let working = |id: &str, legs: &Value| {
        json!({ "id": id, "instrument": "SPX", "direction": "long", "intent": "entry", "order_type": "limit",
                "price": "3.00", "quantity": "1", "state": "open", "legs": legs })
    };
    let s = spx_external(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": call },
                       { "instrument": "SPX", "direction": "long", "quantity": "2", "legs": put } ],
        "working_orders": [ working("w-put", &put) ] } ] }));
    let close = json!({ "ticker": "SPXW240119C4500", "action": "CLOSE", "direction": "LONG", "order_type": "market" });
    let actions = run(&s, close, friday()).expect("closes");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("one close, of the named call: {actions:?}") };
    assert_eq!(symbols(o), ["SPXW240119C04500000"]);
    assert_eq!(o.quantity, d("1"));
    // The whole underlying, when the alert names no contract: both positions.
    let all =
        run(&s, json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "order_type": "market" }), friday());
    assert_eq!(all.expect("closes").len(), 2);

    // The only working order is on the put: a MODIFY or CANCEL naming the call finds none.
    let modify = json!({ "ticker": "SPXW240119C4500", "action": "MODIFY", "direction": "LONG", "price": 9.5 });
    assert_eq!(run(&s, modify, friday()), Ok(Vec::new()));
    let cancel = json!({ "ticker": "SPXW240119C4500", "action": "CANCEL", "direction": "LONG" });
    assert_eq!(run(&s, cancel, friday()), Ok(Vec::new()));
    let cancel_put = json!({ "ticker": "SPXW240119P4490", "action": "CANCEL", "direction": "LONG" });
    let actions = run(&s, cancel_put, friday()).expect("cancels");
    assert!(matches!(actions.as_slice(), [BotAction::Cancel { order_id, .. }] if order_id == "w-put"), "{actions:?}");
}

/// A working order's state in a broker's own words (`partially_filled`, `new`) was taken for done: a CLOSE did
/// not cancel the exit first, and both could fill (a short). Every state but a done one is working.
#[test]
fn a_working_order_in_a_brokers_own_words_is_working() {
    for state in ["partially_filled", "new", "accepted", " Open "] {
        let s = equity(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" } ],
            "working_orders": [ equity_order("x-1", "exit", state, "long") ] } ] }));
        let actions = run(&s, aapl("CLOSE", "LONG"), friday()).expect("closes");
        assert!(
            matches!(actions.as_slice(), [BotAction::Cancel { order_id, .. }, BotAction::Place(_)] if order_id == "x-1"),
            "{state}: {actions:?}"
        );
    }
    for state in ["filled", "Cancelled", "canceled", "rejected", "expired", "replaced"] {
        let s = equity_working(json!([equity_order("x-1", "exit", state, "long")]));
        assert!(!s.bots[0].working_orders[0].is_working(), "{state}");
    }
}

/// An amount of account money (a notional, a share of equity) was divided by a price in another coin: ETH/BTC at
/// 0.05 BTC made $1,000 into 20,000 ETH (about $60M); BTC/EUR was off by the exchange rate. Such a pair is sized
/// by fixed_quantity only; dollar-like quotes are sized as before.
#[test]
fn an_amount_in_dollars_does_not_size_a_pair_priced_in_another_currency() {
    let quotes = json!({ "ETHBTC": { "bid": "0.0499", "ask": "0.0501" }, "BTC-EUR": { "last": "55000" },
                         "BTC-USDT": { "last": "60000" } });
    let s = snapshot(json!({
        "id": "coins", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
        "allowed_instruments": ["*"],
        "bots": [ { "id": "bot", "broker": "coinbase", "account_id": "C", "sizing": { "percent_of_equity": "10" },
                    "equity": "10000" } ],
        "market": { "quotes": quotes }
    }));
    for (ticker, quote) in [("ETHBTC", "BTC"), ("BTC-EUR", "EUR")] {
        let e = unfillable(run(&s, open(ticker, "LONG"), friday()));
        assert!(e.contains(&format!("is priced in {quote}")) && e.contains("fixed_quantity"), "{e}");
    }
    let o = place(&s, open("BTC-USDT", "LONG"), friday());
    assert_eq!(o.quantity, d("0.01666666"), "1,000 dollars at 60,000");
}

/// A MODIFY that makes an exit larger is held to the position less what the bot's other exits on it cover: long
/// 10 with two exits of 5, one made 10 would sell 15 if both filled, opening a short.
#[test]
fn a_modify_cannot_grow_an_exit_past_what_the_other_exits_leave() {
    let exit = |id: &str, q: &str| {
        json!({ "id": id, "instrument": "AAPL", "direction": "long", "intent": "exit", "order_type": "limit",
                "price": "200", "quantity": q, "state": "open" })
    };
    let with = |tp2: &str| {
        equity(json!({ "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "10" } ],
            "working_orders": [ exit("tp1", "5"), exit("tp2", tp2) ] } ] }))
    };
    let grow =
        |q: u32| json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "order_id": "tp1", "quantity": q });
    let e = rejected(run(&with("5"), grow(10), friday()));
    assert!(e.contains("the bot holds 10, 5 of it under its other working exits"), "{e}");
    let actions = run(&with("3"), grow(7), friday()).expect("7 + 3 fits in 10");
    assert!(matches!(actions.as_slice(), [BotAction::Replace { order_id, .. }] if order_id == "tp1"), "{actions:?}");
    assert!(run(&with("3"), grow(8), friday()).is_err(), "8 + 3 does not");
}

/// An option exit's room is its own contracts': counted by underlying, a MODIFY of an exit of 1 call to 6 passed
/// on 5 puts held beside the call, and sold 5 calls naked (or, refused by the broker after the cancel, left the
/// call with no exit).
#[test]
fn a_modify_counts_only_the_positions_of_the_exits_own_contracts() {
    let call = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let put = json!([ { "symbol": "SPXW240119P04490000", "action": "buy_to_open" } ]);
    let s = spx_external(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": call },
                       { "instrument": "SPX", "direction": "long", "quantity": "5", "legs": put } ],
        "working_orders": [ { "id": "tp", "instrument": "SPX", "direction": "long", "intent": "exit",
            "order_type": "limit", "price": "-6.00", "quantity": "1", "state": "open",
            "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ] } ] } ] }));
    let grow =
        |q: u32| json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "order_id": "tp", "quantity": q });
    let e = rejected(run(&s, grow(6), friday()));
    assert!(e.contains("the bot holds 1"), "{e}");
    assert!(run(&s, grow(1), friday()).is_ok(), "the exit's own size still fits");
}

/// A limit CLOSE that names its legs and prices each (decide lets it through, "their prices are summed into the
/// net") was priced from the quotes or refused for want of an alert price: the sender's 3.00 credit ignored.
/// A CLOSE naming one contract of a vertical closes the whole vertical, but only a working exit holding the named
/// contract was cancelled first: an exit legging out on the other leg stayed working beside the close, and both
/// could fill (that leg sold twice: a naked short call). Every working exit of the positions closed goes first; an
/// exit of a position the alert does not close stays.
#[test]
fn a_named_close_cancels_every_exit_of_the_positions_it_closes() {
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    // Another vertical sharing the 4500 call, with its own take-profit: not closed, so its exit stays.
    let other = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                        { "symbol": "SPXW240119C04520000", "action": "sell_to_open" } ]);
    let leg_out = json!({ "id": "leg-out", "instrument": "SPX", "direction": "long", "intent": "exit",
        "order_type": "limit", "price": "12.00", "quantity": "1", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ] });
    let other_tp = json!({ "id": "other-tp", "instrument": "SPX", "direction": "long", "intent": "exit",
        "order_type": "limit", "price": "-8.00", "quantity": "1", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" },
                  { "symbol": "SPXW240119C04520000", "action": "buy_to_close" } ] });
    let s =
        spx_external(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "schwab", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical },
                       { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": other } ],
        "working_orders": [ leg_out, other_tp ] } ] }));
    let actions = run(&s, json!({ "ticker": "SPXW240119C4510", "action": "CLOSE", "direction": "LONG" }), friday())
        .expect("closes");
    let cancels: Vec<&str> = actions
        .iter()
        .filter_map(|a| match a {
            BotAction::Cancel { order_id, .. } => Some(order_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(cancels, ["leg-out"], "{actions:?}");
    let places = actions.iter().filter(|a| matches!(a, BotAction::Place(_))).count();
    assert_eq!(places, 1, "the vertical is closed, the other position is not: {actions:?}");
}

/// Which exits a named CLOSE pulls when the bot holds more than the position it closes: those the positions left
/// still cover stay (a single call's take-profit on a contract the closed vertical shared), those they could not
/// cover go. An exit listed without legs goes when nothing is left; with positions left, whose exit it is cannot
/// be told, and the CLOSE is refused naming it.
#[test]
fn a_named_close_keeps_the_exits_the_positions_left_cover() {
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let single = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let exit = |id: &str, legs: Value| {
        json!({ "id": id, "instrument": "SPX", "direction": "long", "intent": "exit", "order_type": "limit",
                "price": "20.00", "quantity": "1", "state": "open", "legs": legs })
    };
    let single_tp = exit("single-tp", json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ]));
    let run_with = |positions: Value, working: Value| {
        let s = spx_external(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "schwab",
            "account_id": "A", "sizing": { "fixed_quantity": "1" }, "positions": positions, "working_orders": working } ] }));
        run(&s, json!({ "ticker": "SPXW240119C4510", "action": "CLOSE", "direction": "LONG" }), friday())
    };
    let cancels = |r: Result<Vec<BotAction>, OrderError>| -> Vec<String> {
        r.expect("closes")
            .iter()
            .filter_map(|a| match a {
                BotAction::Cancel { order_id, .. } => Some(order_id.clone()),
                _ => None,
            })
            .collect()
    };
    let both = json!([ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical },
                       { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": single } ]);
    let only_vertical = json!([ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical } ]);
    assert!(cancels(run_with(both.clone(), json!([single_tp.clone()]))).is_empty(), "the single call covers its exit");
    assert_eq!(cancels(run_with(only_vertical.clone(), json!([single_tp]))), ["single-tp"], "nothing left covers it");
    let legless = exit("x9", json!([]));
    assert_eq!(
        cancels(run_with(only_vertical, json!([legless.clone()]))),
        ["x9"],
        "nothing is left: it is the close's"
    );
    let e = unfillable(run_with(both, json!([legless])));
    assert!(e.contains("working exit x9 lists no option legs"), "{e}");
}

/// On a half day (the day after Thanksgiving, July 3 and December 24 before their holidays) today's options stop
/// trading at the 13:00 close: at 13:30 a 0 DTE strategy bought contracts the broker refused, and a CLOSE of a
/// calendar sent its dead front leg with its live back one, so the broker refused both.
#[test]
fn on_a_half_day_todays_options_stop_at_one() {
    // 2026-11-27 is EST (UTC-5): 13:00 in New York is 18:00 UTC.
    let market = chain_with(&["2026-11-27", "2026-11-30"]);
    let s = spx(json!({ "options": rule(0, 7), "market": market.clone() }));
    assert_eq!(expiration_of(&s, utc("2026-11-27", 17, 59)), "2026-11-27", "12:59 in New York");
    assert_eq!(expiration_of(&s, utc("2026-11-27", 18, 0)), "2026-11-30", "13:00");
    let zero_dte = spx(json!({ "options": rule(0, 0), "market": market }));
    let e = unfillable(run(&zero_dte, open_long(Some("2.35")), utc("2026-11-27", 18, 30)));
    assert!(e.contains("today's stopped trading at the 13:00 close"), "{e}");
    let external = spx_external(json!({ "market": chain_with(&["2026-11-27", "2026-11-30"]) }));
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 2.35,
                       "legs": [ { "symbol": "SPXW261127C04500000", "action": "buy_to_open" } ] });
    let e = unfillable(run(&external, body.clone(), utc("2026-11-27", 18, 30)));
    assert!(e.contains("expires today (2026-11-27) and stopped trading at the 13:00 close"), "{e}");
    let r = run(&external, body, utc("2026-11-27", 17, 30));
    assert!(r.is_ok(), "{:?}", r.err());
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a, "ratio": 1 });
    let calendar = spx(json!({ "order_type": "market",
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": [
                        leg("SPXW261127C04500000", "sell_to_open"), leg("SPXW261204C04500000", "buy_to_open") ] } ] } ] }));
    let close = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG" });
    let legs_placed = |now| -> Vec<Vec<String>> {
        run(&calendar, close.clone(), now)
            .expect("closes")
            .iter()
            .filter_map(|a| match a {
                BotAction::Place(o) => Some(symbols(o)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(legs_placed(utc("2026-11-27", 18, 30)), [["SPXW261204C04500000"]]);
    assert_eq!(legs_placed(utc("2026-11-27", 17, 30))[0].len(), 2, "both legs before 13:00");
}

/// A position the host read back as every contract held on the underlying (verticals opened on three days) had more
/// legs than an order carries, and no CLOSE could ever go out (a 500 at every try). It goes out as one order per
/// expiration, each after the one before. Contracts that no longer trade (today's after the 16:00 close, the NDX
/// monthly on its expiration day) are left out; a position of nothing else is refused, naming them.
#[test]
fn a_close_goes_out_in_orders_an_order_can_carry_and_leaves_out_contracts_that_no_longer_trade() {
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a, "ratio": 1 });
    let held = |legs: Value| {
        spx(json!({ "allowed_instruments": ["SPX", "NDX"], "order_type": "market",
                    "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                                "positions": [ { "instrument": if legs.to_string().contains("NDX") { "NDX" } else { "SPX" },
                                                 "direction": "long", "quantity": "1", "legs": legs } ] } ] }))
    };
    let close = |ticker: &str| json!({ "ticker": ticker, "action": "CLOSE", "direction": "LONG" });
    let placed = |r: Result<Vec<BotAction>, OrderError>| -> Vec<Vec<String>> {
        r.expect("closes")
            .iter()
            .filter_map(|a| match a {
                BotAction::Place(o) => Some(symbols(o)),
                _ => None,
            })
            .collect()
    };
    let six = held(json!([
        leg("SPXW240126C04500000", "buy_to_open"),
        leg("SPXW240126C04510000", "sell_to_open"),
        leg("SPXW240122C04500000", "buy_to_open"),
        leg("SPXW240122C04510000", "sell_to_open"),
        leg("SPXW240124C04500000", "buy_to_open"),
        leg("SPXW240124C04510000", "sell_to_open")
    ]));
    assert_eq!(
        placed(run(&six, close("SPX"), friday())),
        [
            ["SPXW240122C04500000", "SPXW240122C04510000"],
            ["SPXW240124C04500000", "SPXW240124C04510000"],
            ["SPXW240126C04500000", "SPXW240126C04510000"]
        ]
    );
    // A calendar whose front leg expired at today's close: the back leg alone is sold.
    let calendar = held(json!([leg("SPXW240119C04500000", "sell_to_open"), leg("SPXW240126C04500000", "buy_to_open")]));
    assert_eq!(placed(run(&calendar, close("SPX"), utc("2024-01-19", 21, 30))), [["SPXW240126C04500000"]]);
    assert_eq!(placed(run(&calendar, close("SPX"), utc("2024-01-19", 20, 0))).len(), 1, "both legs before 16:00");
    assert_eq!(placed(run(&calendar, close("SPX"), utc("2024-01-19", 20, 0)))[0].len(), 2);
    // Today's 0DTE after the close, and the NDX monthly on its expiration day: nothing that trades.
    let zero = held(json!([leg("SPXW240119C04500000", "buy_to_open")]));
    // Refused for this bot alone (a rejection): other bots' closes, and a reversal's new side, still go.
    let e = rejected(run(&zero, close("SPX"), utc("2024-01-19", 21, 30)));
    assert!(e.contains("SPXW240119C04500000") && e.contains("no longer trade"), "{e}");
    let monthly = held(json!([leg("NDX240119C17000000", "buy_to_open")]));
    let e = rejected(run(&monthly, close("NDX"), friday()));
    assert!(e.contains("NDX240119C17000000"), "{e}");
    assert_eq!(placed(run(&monthly, close("NDX"), utc("2024-01-18", 15, 0))), [["NDX240119C17000000"]]);
    // On its last day it trades through the index options' session, to 16:15 in New York: a CLOSE at 16:05 was
    // refused, the position left to the next morning's settlement. After 16:15 it no longer trades.
    assert_eq!(placed(run(&monthly, close("NDX"), utc("2024-01-18", 21, 5))), [["NDX240119C17000000"]]);
    let e = rejected(run(&monthly, close("NDX"), utc("2024-01-18", 21, 15)));
    assert!(e.contains("NDX240119C17000000"), "{e}");
    // A CLOSE naming one vertical of the six-leg position closes that vertical alone.
    let s = spx_external(json!({ "order_type": "market", "bots": [ { "id": "bot", "broker": "tradier",
        "account_id": "A", "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "1", "legs": [
            leg("SPXW240126C04500000", "buy_to_open"), leg("SPXW240126C04510000", "sell_to_open"),
            leg("SPXW240122C04500000", "buy_to_open"), leg("SPXW240122C04510000", "sell_to_open"),
            leg("SPXW240124C04500000", "buy_to_open"), leg("SPXW240124C04510000", "sell_to_open") ] } ] } ] }));
    assert_eq!(placed(run(&s, close("SPXW240122C4500"), friday())), [["SPXW240122C04500000", "SPXW240122C04510000"]]);
}

#[test]
fn a_close_priced_by_its_named_legs_takes_their_net() {
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let s = spx_external(json!({ "limit_target": "alert_price", "bots": [ { "id": "bot", "broker": "tradier",
        "account_id": "A", "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "2", "legs": vertical } ] } ] }));
    let close = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "order_type": "limit",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close", "price": "5.00" },
                  { "symbol": "SPXW240119C04510000", "action": "buy_to_close", "price": "2.00" } ] });
    let actions = run(&s, close, friday()).expect("closes at the legs' net");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("one close: {actions:?}") };
    assert_eq!((o.limit_price, o.price_effect, o.quantity), (Some(d("3.00")), Some(PriceEffect::Credit), d("2")));
    // Legs that price only part of the structure do not price it: with Alert Price as the target, refused.
    let part = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG", "order_type": "limit",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close", "price": "5.00" } ] });
    assert!(run(&s, part, friday()).is_err());
}

/// An alert on an index's series (RUTW) asks for that series' contracts: reading RUTW as RUT built them on RUT's
/// root, contracts that do not exist on a weekly date (the entry refused, lost) or the AM-settled monthly.
#[test]
fn an_alert_on_an_index_series_builds_that_series_contracts() {
    let s = spx(json!({ "allowed_instruments": ["RUTW", "RUT"], "order_type": "market",
                        "market": { "option_chains": { "RUTW": spx_chain() } } }));
    let actions = run(&s, json!({ "ticker": "RUTW", "action": "OPEN", "direction": "LONG" }), friday()).expect("opens");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("one order: {actions:?}") };
    assert!(o.legs.iter().all(|l| l.contract.root == "RUTW"), "{:?}", symbols(o));
    assert_eq!(o.symbol, "RUT", "Tradier's symbol is the index");
    // Beside the index's own chain (its monthlies), the series' chain gives the series' dates.
    let monthly = json!({ "underlying_price": "4502.30", "expirations": ["2024-02-16"],
                          "strikes": ["4490", "4495", "4500", "4505", "4510"] });
    let s = spx(json!({ "allowed_instruments": ["RUTW", "RUT"], "order_type": "market",
                        "market": { "option_chains": { "RUT": monthly, "RUTW": spx_chain() } } }));
    let actions = run(&s, json!({ "ticker": "RUTW", "action": "OPEN", "direction": "LONG" }), friday()).expect("opens");
    let [BotAction::Place(o)] = actions.as_slice() else { panic!("one order: {actions:?}") };
    assert_eq!(o.legs[0].contract.expiration.to_string(), "2024-01-19", "{:?}", symbols(o));
}

/// The standard SPX and RUT series (those roots; the PM-settled ones are SPXW and RUTW) are AM-settled and trade
/// last the day before they expire, as the README says; only NDX and VIX were treated so. On the third Friday a
/// CLOSE sent the dead SPX monthly beside a live SPXW leg, and the broker refused the whole order; a RUT monthly
/// alone got an order that could never fill instead of the bot's refusal.
#[test]
fn spx_and_rut_monthlies_are_left_out_of_a_close_on_their_expiration_day() {
    let leg = |sym: &str| json!({ "symbol": sym, "action": "buy_to_open", "ratio": 1 });
    let held = |underlying: &str, legs: Value| {
        spx(json!({ "allowed_instruments": ["SPX", "RUT"], "order_type": "market",
                    "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                                "positions": [ { "instrument": underlying, "direction": "long", "quantity": "1",
                                                 "legs": legs } ] } ] }))
    };
    let close = |ticker: &str| json!({ "ticker": ticker, "action": "CLOSE", "direction": "LONG" });
    let spx_pos = held("SPX", json!([leg("SPX   240119C04500000"), leg("SPXW240126C04600000")]));
    let placed: Vec<Vec<String>> = run(&spx_pos, close("SPX"), friday())
        .expect("closes")
        .iter()
        .filter_map(|a| match a {
            BotAction::Place(o) => Some(symbols(o)),
            _ => None,
        })
        .collect();
    assert_eq!(placed, [["SPXW240126C04600000"]]);
    let rut = held("RUT", json!([leg("RUT240119P01900000")]));
    let e = rejected(run(&rut, close("RUT"), friday()));
    assert!(e.contains("RUT240119P01900000") && e.contains("no longer trade"), "{e}");
    // The day before, through its close, it trades.
    assert!(run(&rut, close("RUT"), utc("2024-01-18", 15, 0)).is_ok());
}

/// An alert's net price for a calendar whose front leg expired at today's close was put on the back leg alone:
/// a debit of 1.20 for an option worth many times that, answered processed and never filled. The price prices
/// the whole structure, so with legs left out the close is refused, saying to send it without a price.
#[test]
fn a_structure_price_is_not_put_on_the_legs_left_after_dead_ones_are_dropped() {
    let leg = |sym: &str, a: &str| json!({ "symbol": sym, "action": a, "ratio": 1 });
    let s = spx(json!({ "order_type": "limit",
        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                    "positions": [ { "instrument": "SPX", "direction": "short", "quantity": "1", "legs": [
                        leg("SPXW240119C04500000", "buy_to_open"), leg("SPXW240126C04500000", "sell_to_open") ] } ] } ] }));
    let body = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "SHORT", "price": 1.20 });
    let e = rejected(run(&s, body, utc("2024-01-19", 21, 30)));
    assert!(e.contains("prices the whole") && e.contains("SPXW240119C04500000"), "{e}");
}

/// A spread's MODIFY priced by its legs (README: the alert's `price`, else the legs' prices summed) takes their net:
/// read from `price` alone, it was refused without a size ("needs a new price") and dropped beside one, the order
/// re-sized at the price the sender replaced. Legs that are not the order's own are refused, never guessed.
#[test]
fn a_modify_priced_by_its_legs_takes_their_net() {
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let s = spx_external(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "working_orders": [ { "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
            "order_type": "limit", "price": "2.35", "quantity": "1", "state": "open", "legs": vertical } ] } ] }));
    let priced = |bought: f64, sold: f64, quantity: Option<u32>| {
        let mut body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG",
            "legs": [ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "price": bought },
                      { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "price": sold } ] });
        if let Some(q) = quantity {
            body["quantity"] = json!(q);
        }
        body
    };
    for (quantity, size) in [(Some(3), "3"), (None, "1")] {
        match run(&s, priced(3.00, 1.20, quantity), friday()).as_deref() {
            Ok([BotAction::Replace { order, .. }]) => {
                assert_eq!(order.limit_price, Some(d("1.80")), "{quantity:?}");
                assert_eq!(order.quantity, d(size));
            }
            other => panic!("{quantity:?}: {other:?}"),
        }
    }
    // A price for one of its two contracts: no net for the order, refused rather than guessed.
    let mut one = priced(3.00, 1.20, Some(3));
    one["legs"].as_array_mut().unwrap().pop();
    let refused = run(&s, one, friday());
    assert!(refused.is_err(), "{refused:?}");
}

/// An option exit made larger is counted contract by contract against the position and the bot's other exits,
/// as a CLOSE counts them. Counted by whole structure, an exit legging out of a held vertical (one leg of it) was
/// not counted against the vertical's own exit made 10 on 10 held, and 15 of that call were sold; and the leg-out
/// itself could not grow at all ("the bot holds 0").
#[test]
fn a_modify_of_an_option_exit_counts_each_contract() {
    let vertical = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04510000", "action": "sell_to_open" } ]);
    let tp = json!({ "id": "tp", "instrument": "SPX", "direction": "long", "intent": "exit", "order_type": "limit",
        "price": "-4.00", "quantity": "5", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" },
                  { "symbol": "SPXW240119C04510000", "action": "buy_to_close" } ] });
    let leg_out = json!({ "id": "leg-out", "instrument": "SPX", "direction": "long", "intent": "exit",
        "order_type": "limit", "price": "9.00", "quantity": "5", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ] });
    let strategy = |orders: Value| {
        spx_external(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "10", "legs": vertical } ],
            "working_orders": orders } ] }))
    };
    let modify = |id: &str, q: u32| json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "order_id": id, "quantity": q });
    let both = strategy(json!([tp.clone(), leg_out.clone()]));
    match run(&both, modify("tp", 10), friday()) {
        Err(OrderError::ExitPastPosition { held, covered, .. }) => assert_eq!((held, covered), (d("10"), d("5"))),
        other => panic!("the 4500 calls would be sold 15 times on 10 held: {other:?}"),
    }
    assert!(run(&both, modify("tp", 5), friday()).is_ok(), "unchanged");
    let alone = strategy(json!([leg_out]));
    // Tradier's change carries no new size: the exit is pulled and placed again at 8.
    match run(&alone, modify("leg-out", 8), friday()).as_deref() {
        Ok([BotAction::Cancel { .. }, BotAction::Place(order)]) => assert_eq!(order.quantity, d("8")),
        other => panic!("8 of 10 held: {other:?}"),
    }
    assert!(run(&alone, modify("leg-out", 11), friday()).is_err(), "11 of 10 held");
    // A put exit makes no room on calls held, and a call held none for a put exit.
    let put_exit = json!({ "id": "put", "instrument": "SPX", "direction": "long", "intent": "exit",
        "order_type": "limit", "price": "1.00", "quantity": "1", "state": "open",
        "legs": [ { "symbol": "SPXW240119P04500000", "action": "sell_to_close" } ] });
    assert!(run(&strategy(json!([put_exit])), modify("put", 2), friday()).is_err(), "no put held");
}

/// A leg's expiration, strike and side under the names brokers' APIs give them (Alpaca's `expiration_date`,
/// Schwab's `expirationDate`/`putCall`, `strike_price`): skipped, the leg traded the strategy's next expiration
/// (a 0DTE spread for one expiring a week later).
#[test]
fn a_legs_fields_under_the_brokers_names_are_read() {
    for key in ["expiration_date", "expirationDate", "exp"] {
        let legs = json!([ { "side": "CALL", "strike": 4500, key: "2024-01-26", "action": "buy_to_open" },
                           { "putCall": "CALL", "strike_price": 4510, key: "2024-01-26", "action": "sell_to_open" } ]);
        let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 2.35, "legs": legs });
        let o = place(&spx_external(json!({})), body, friday());
        assert_eq!(symbols(&o), ["SPXW240126C04500000", "SPXW240126C04510000"], "{key}");
    }
}

/// A strike or an expiry at the top level (a leg's fields outside `legs`): dropped, an internal strategy traded
/// its own contract.
#[test]
fn a_top_level_strike_or_expiry_is_refused() {
    for (k, v) in [("strike", json!(4490)), ("expiry", json!("2024-01-26")), ("expiration_date", json!("2024-01-26"))] {
        let mut body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 2.35 });
        body[k] = v;
        let parsed = alert::parse(body.to_string().as_bytes(), Some("application/json"));
        assert!(parsed.is_err(), "{k}: read as {parsed:?}");
    }
    // Left empty by a template that fills every key, it asks for nothing.
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 2.35, "strike": "" });
    assert!(alert::parse(body.to_string().as_bytes(), Some("application/json")).is_ok());
}

/// Stop, take-profit and trailing kinds in a `type` (the exchanges' `STP`, `STOP_LOSS_LIMIT`,
/// `TAKE_PROFIT_MARKET`): a `type` that is no order type is ignored, so these made a breakout stop at 195 a buy
/// limit at 195, filled at once.
#[test]
fn stop_kinds_in_a_type_are_refused() {
    for t in ["STP", "stop_loss", "STOP_LOSS_LIMIT", "take_profit", "TAKE_PROFIT_MARKET", "TRAILING_STOP_MARKET"] {
        let body = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "type": t, "price": 195 });
        let parsed = alert::parse(body.to_string().as_bytes(), Some("application/json"));
        assert!(parsed.is_err(), "type {t}: read as {parsed:?}");
    }
    // A `type` that is the sender's own (no order kind) is still ignored.
    let body = json!({ "ticker": "AAPL", "action": "OPEN", "direction": "LONG", "type": "signal", "price": 195 });
    assert!(alert::parse(body.to_string().as_bytes(), Some("application/json")).is_ok());
}

/// A negative (credit) price on one bought contract was sent as a debit of the same size.
#[test]
fn a_credit_for_one_bought_contract_is_refused() {
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": -1.5, "legs": legs });
    let r = run(&spx_external(json!({})), body, friday());
    assert!(matches!(r, Err(OrderError::LimitNotPositive { .. })), "{r:?}");
    // A sold contract's premium written as a positive number is read as received, as before.
    let legs = json!([ { "symbol": "SPXW240119P04400000", "action": "sell_to_open" } ]);
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": 1.5, "legs": legs });
    if let Ok(actions) = run(&spx_external(json!({})), body, friday()) {
        for a in actions {
            if let BotAction::Place(o) = a {
                assert_eq!(o.price_effect, Some(PriceEffect::Credit));
            }
        }
    }
}

/// An option exit made larger beside another exit that lists no legs: counted as covering nothing, the Replace to
/// 10 went out with 5 more sold by the other (15 calls on 10 held). Refused, as a CLOSE refuses to guess.
#[test]
fn an_option_exit_is_not_grown_beside_an_exit_listing_no_legs() {
    let call = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ]);
    let exit = |id: &str, legs: Value| {
        let mut o = json!({ "id": id, "instrument": "SPX", "direction": "long", "intent": "exit", "order_type": "limit",
                            "price": "9.00", "quantity": "5", "state": "open" });
        if !legs.is_null() {
            o["legs"] = legs;
        }
        o
    };
    let sold = json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_close" } ]);
    let s = |other: Value| {
        spx_external(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "10", "legs": call } ],
            "working_orders": [ exit("tp", sold.clone()), other ] } ] }))
    };
    let grow = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "order_id": "tp", "quantity": 10 });
    let r = run(&s(exit("tp2", Value::Null)), grow.clone(), friday());
    assert!(r.as_ref().is_err_and(|e| e.to_string().contains("lists no option legs")), "{r:?}");
    // With its legs listed, the other exit's 5 are counted: 10 + 5 on 10 held is refused as past the position.
    let r = run(&s(exit("tp2", sold.clone())), grow, friday());
    assert!(matches!(r, Err(OrderError::ExitPastPosition { .. })), "{r:?}");
}

/// A credit (negative price) for one bought contract in a MODIFY, or in a CLOSE buying one short contract back, was
/// sent as a debit of the same size: the bid raised to what the sender wrote as money to receive.
#[test]
fn a_credit_for_one_bought_contract_is_refused_in_a_modify_and_a_close() {
    let working = json!({ "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
        "order_type": "limit", "price": "2.00", "quantity": "1", "state": "open",
        "legs": [ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ] });
    let s = spx_external(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A",
        "sizing": { "fixed_quantity": "1" }, "working_orders": [working] } ] }));
    let modify = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "price": -2.5 });
    let r = run(&s, modify, friday());
    assert!(r.as_ref().is_err_and(|e| e.to_string().contains("not above zero")), "{r:?}");
    let short = json!({ "instrument": "SPX", "direction": "short", "quantity": "1",
        "legs": [ { "symbol": "SPXW240126P04450000", "action": "sell_to_open" } ] });
    let s = spx_external(json!({ "order_type": "limit", "bots": [ { "id": "bot", "broker": "tradier",
        "account_id": "A", "sizing": { "fixed_quantity": "1" }, "positions": [short] } ] }));
    let close = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "SHORT", "price": -0.5 });
    let r = run(&s, close, friday());
    assert!(r.as_ref().is_err_and(|e| e.to_string().contains("not above zero")), "{r:?}");
    // A positive price buys it back, as before.
    let close = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "SHORT", "price": 0.5 });
    assert!(run(&s, close, friday()).is_ok());
}

/// A coin held is held in every pair of it the strategy trades (BTC/USD and BTC/USDC): a CLOSE through one pair left
/// the coin's take-profit on the other working (its hold keeping the close from selling the coin), and a MODIFY grew
/// an exit past the coin beside the other pair's exit.
#[test]
fn a_coins_exits_on_its_other_pair_count_for_a_close_and_a_modify() {
    let crypto = |orders: Value| {
        snapshot(json!({
            "id": "coins", "token_hash": TOKEN, "status": "active", "asset_class": "crypto", "order_type": "market",
            "duration": "gtc", "allowed_instruments": ["BTC-USD", "BTC-USDC"],
            "bots": [ { "id": "cb", "broker": "coinbase", "account_id": "C", "sizing": { "fixed_quantity": "0.1" },
                "positions": [ { "instrument": "BTC-USD", "direction": "long", "quantity": "1" },
                               { "instrument": "BTC-USDC", "direction": "long", "quantity": "1" } ],
                "working_orders": orders } ],
            "market": { "quotes": { "BTCUSD": { "bid": "60000", "ask": "60010" },
                                    "BTCUSDC": { "bid": "60000", "ask": "60010" } } }
        }))
    };
    let exit = |id: &str, pair: &str, q: &str| {
        json!({ "id": id, "instrument": pair, "direction": "long", "intent": "exit", "order_type": "limit",
                "price": "80000", "quantity": q, "state": "open", "duration": "gtc" })
    };
    let s = crypto(json!([exit("TP-USDC", "BTC-USDC", "1")]));
    let close = json!({ "ticker": "BTCUSD", "action": "CLOSE", "direction": "LONG" });
    let actions = run(&s, close, friday()).expect("closes");
    assert!(
        actions.iter().any(|a| matches!(a, BotAction::Cancel { order_id, .. } if order_id == "TP-USDC")),
        "the coin's exit on the other pair stays working: {actions:?}"
    );
    let s = crypto(json!([exit("TP-USD", "BTC-USD", "0.5"), exit("TP-USDC", "BTC-USDC", "0.5")]));
    let modify = json!({ "ticker": "BTCUSD", "action": "MODIFY", "direction": "LONG", "quantity": "1" });
    let r = run(&s, modify, friday());
    assert!(matches!(r, Err(OrderError::ExitPastPosition { .. })), "1.5 BTC of exits on 1 held: {r:?}");
}

/// A single leg's buy or sell under the brokers' own keys (Schwab's `instruction`, Alpaca's `position_intent`):
/// skipped, the leg took its side from the alert's direction, and a put bought on a SHORT alert was sold naked.
#[test]
fn a_leg_action_under_a_brokers_name_is_not_dropped() {
    let s = spx_external(json!({}));
    for key in ["action", "instruction", "position_intent", "positionIntent"] {
        for said in ["BUY_TO_OPEN", "buy_to_open"] {
            let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": 5,
                               "legs": [ { "symbol": "SPXW240122P04500000", key: said } ] });
            assert_eq!(leg_actions(&place(&s, body, friday())), [LegAction::BuyToOpen], "{key}: {said}");
        }
    }
    // Two names that disagree are refused, as any field given twice differently.
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": 5,
                       "legs": [ { "symbol": "SPXW240122P04500000", "instruction": "BUY_TO_OPEN",
                                   "position_intent": "sell_to_open" } ] });
    assert!(alert::parse(body.to_string().as_bytes(), Some("application/json")).is_err());
}

/// E*TRADE's leg `orderAction` (`BUY_OPEN`) and Tradier's own leg `side` (`buy_to_open`) were skipped: the leg took
/// its side from the alert's direction, and a put bought on a SHORT alert went out sold. Read as the action; a buy
/// or sell under any other key of a leg is refused, never skipped.
#[test]
fn a_leg_action_under_etrade_or_tradier_names_is_read_and_other_keys_refused() {
    let s = spx_external(json!({}));
    let body =
        |leg: Value| json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": 5, "legs": [leg] });
    for (key, said) in [("orderAction", "BUY_OPEN"), ("order_action", "buy_open"), ("side", "buy_to_open")] {
        let b = body(json!({ "symbol": "SPXW240122P04500000", key: said }));
        assert_eq!(leg_actions(&place(&s, b, friday())), [LegAction::BuyToOpen], "{key}: {said}");
    }
    let b = body(json!({ "symbol": "SPXW240122P04500000", "orderAction": "SELL_CLOSE" }));
    let read = alert::parse(b.to_string().as_bytes(), Some("application/json")).expect("read");
    assert_eq!(read[0].legs.iter().map(|l| l.action).collect::<Vec<_>>(), [Some(LegAction::SellToClose)]);
    for (key, said) in [("leg_side", "BUY"), ("openClose", "buy_to_open"), ("intent", "BUY_OPEN")] {
        let b = body(json!({ "symbol": "SPXW240122P04500000", key: said }));
        let read = alert::parse(b.to_string().as_bytes(), Some("application/json"));
        let err = read.expect_err(key).to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}

/// Alpaca's leg `side` (`buy`, `sell`) and Schwab's bare `BUY`/`SELL` say the side of the leg's action: read beside
/// it (and refused where they disagree), and refused alone, which cannot say whether the leg opens or closes.
#[test]
fn a_legs_bare_buy_or_sell_checks_its_action_and_is_refused_alone() {
    let s = spx_external(json!({}));
    let leg = |extra: Value| {
        let mut l = json!({ "symbol": "SPXW240122P04500000" });
        for (k, v) in extra.as_object().expect("test leg") {
            l[k] = v.clone();
        }
        json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT", "price": 5, "legs": [l] })
    };
    let agreeing = leg(json!({ "side": "buy", "position_intent": "buy_to_open" }));
    assert_eq!(leg_actions(&place(&s, agreeing, friday())), [LegAction::BuyToOpen]);
    for extra in [
        json!({ "side": "sell", "position_intent": "buy_to_open" }),
        json!({ "side": "buy" }),
        json!({ "instruction": "BUY" }),
        json!({ "instruction": "SELL_SHORT" }),
    ] {
        let body = leg(extra.clone());
        let parsed = alert::parse(body.to_string().as_bytes(), Some("application/json"));
        assert!(parsed.is_err(), "{extra}: read as {parsed:?}");
    }
}

// ---------------------------------------------------------------------------------------
// Sizing an option entry by an amount: the structure's maximum loss, not its premium
// ---------------------------------------------------------------------------------------

/// The SPX strategy with its own leg rules, sized by `sizing` (the bot's equity is 20,000).
fn spx_rules(legs: Value, sizing: Value) -> Strategy {
    spx(json!({ "options": { "selection": "internal", "legs": legs },
                "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1", "equity": "20000",
                            "sizing": sizing } ] }))
}

fn open_priced(direction: &str, price: f64) -> Value {
    json!({ "ticker": "SPX", "action": "OPEN", "direction": direction, "price": price })
}

/// The default short rules sell the 4500 put and buy the 4490 put (10 wide). Sized by its credit, $1,000 sold
/// 20 spreads at 0.50, risking $19,000; each risks (10 − 0.50) × 100 = $950.
#[test]
fn a_credit_vertical_is_sized_by_its_width_less_the_credit() {
    let notional = |amount: &str| {
        spx(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1",
                                "sizing": { "fixed_notional": amount } } ] }))
    };
    let o = place(&notional("1000"), open_priced("SHORT", -0.50), friday());
    assert_eq!((o.quantity, o.price_effect), (d("1"), Some(PriceEffect::Credit)));
    assert_eq!(place(&notional("2000"), open_priced("SHORT", -0.50), friday()).quantity, d("2"));
    let reason = rejected(run(&notional("900"), open_priced("SHORT", -0.50), friday()));
    assert_eq!(reason, "bot bot's sizing (fixed_notional 900) at 950 a unit comes to less than one whole unit");
}

/// Sell the 4500 put and 4505 call, buy the 4490 put and 4510 call: the put wing (10) is the wider, so a unit
/// risks (10 − 2.00) × 100 = $800 at a credit of 2.00.
#[test]
fn an_iron_condor_is_sized_by_its_wider_wing_less_the_credit() {
    let legs = json!({ "short": [
        { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": 0 } },
        { "side": "put", "action": "buy_to_open", "strike": { "atm_offset": -2 } },
        { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 1 } },
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 2 } } ] });
    let o = place(&spx_rules(legs, json!({ "fixed_notional": "2000" })), open_priced("SHORT", -2.0), friday());
    assert_eq!(o.legs.len(), 4);
    assert_eq!(o.quantity, d("2"), "2000 / 800 = 2.5 → 2");
}

/// Buy the 4510 call, sell the 4490 put, for 0.05: sized by the premium, $1,000 bought 200 of them, each a naked
/// SPX put. A unit risks the put's strike: (4490 + 0.05) × 100 = $449,005.
#[test]
fn a_risk_reversal_is_sized_by_its_sold_puts_strike() {
    let legs = json!({ "long": [
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 2 } },
        { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": -2 } } ] });
    let reason = rejected(run(
        &spx_rules(legs.clone(), json!({ "fixed_notional": "1000" })),
        open_priced("LONG", 0.05),
        friday(),
    ));
    assert_eq!(reason, "bot bot's sizing (fixed_notional 1000) at 449005 a unit comes to less than one whole unit");
    let o = place(&spx_rules(legs, json!({ "fixed_notional": "1000000" })), open_priced("LONG", 0.05), friday());
    assert_eq!(o.quantity, d("2"));
}

/// A sold call (alone, or more calls sold than bought) loses without bound as the index rises: no amount of money
/// sizes it, so the entry is refused with a reason; a fixed quantity still trades it.
#[test]
fn a_naked_call_is_not_sized_by_an_amount() {
    let naked = json!({ "short": [ { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 0 } } ] });
    for sizing in [json!({ "fixed_notional": "1000" }), json!({ "percent_of_equity": "5" })] {
        let e = rejected(run(&spx_rules(naked.clone(), sizing), open_priced("SHORT", 1.20), friday()));
        assert!(e.contains("sells more calls than it buys") && e.contains("fixed_quantity"), "{e}");
    }
    let ratio = json!({ "long": [
        { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } },
        { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 2 }, "ratio": 2 } ] });
    let e = rejected(run(&spx_rules(ratio, json!({ "fixed_notional": "1000" })), open_priced("LONG", 0.50), friday()));
    assert!(e.contains("SPX spread sells more calls than it buys"), "{e}");
    let fixed = place(&spx_rules(naked, json!({ "fixed_quantity": "1" })), open_priced("SHORT", 1.20), friday());
    assert_eq!(fixed.quantity, d("1"));
}

/// A sold put risks its strike less the credit (a cash-secured put's cash); a bought call or put its premium.
#[test]
fn single_legs_risk_the_premium_bought_and_the_strike_sold() {
    let single = |side: &str, action: &str| json!({ "long": [ { "side": side, "action": action, "strike": { "atm_offset": 0 } } ] });
    let sized = |legs: Value, notional: &str, price: f64| {
        place(&spx_rules(legs, json!({ "fixed_notional": notional })), open_priced("LONG", price), friday()).quantity
    };
    // 1000 / 235 = 4.26 → 4, as before.
    assert_eq!(sized(single("call", "buy_to_open"), "1000", 2.35), d("4"));
    assert_eq!(sized(single("put", "buy_to_open"), "1000", 2.35), d("4"));
    // (4500 − 1.20) × 100 = 449,880 a put: 1,000,000 sells 2 (sized by the premium, 1000 sold 8).
    assert_eq!(sized(single("put", "sell_to_open"), "1000000", 1.20), d("2"));
    let reason = rejected(run(
        &spx_rules(single("put", "sell_to_open"), json!({ "fixed_notional": "1000" })),
        open_priced("LONG", 1.20),
        friday(),
    ));
    assert!(reason.contains("at 449880 a unit"), "{reason}");
}

/// A calendar (buy the later 4500 call, sell the earlier) is taken as if both expired together: it risks its debit.
/// A diagonal (sell the earlier 4500 call, buy the later 4510 call) risks its vertical's width less the credit.
#[test]
fn calendars_and_diagonals_are_sized_as_if_their_legs_expired_together() {
    let s = spx(json!({ "options": { "selection": "external", "expiration": { "min_days": 0, "max_days": 7 } },
                        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1",
                                    "sizing": { "fixed_notional": "1000" } } ] }));
    let calendar = json!([ { "symbol": "SPXW240126C04500000", "action": "buy_to_open" },
                           { "symbol": "SPXW240119C04500000", "action": "sell_to_open" } ]);
    assert_eq!(place(&s, external(calendar, Some(1.50)), friday()).quantity, d("6"), "1000 / 150 = 6.67 → 6");
    let diagonal = json!([ { "symbol": "SPXW240119C04500000", "action": "sell_to_open" },
                           { "symbol": "SPXW240126C04510000", "action": "buy_to_open" } ]);
    let o = place(&s, external(diagonal, Some(-1.00)), friday());
    assert_eq!(o.quantity, d("1"), "1000 / ((10 − 1) × 100) = 1.1 → 1");
}

/// A credit as wide as the spread (or a debit spread sold for a credit) could not lose: a mistyped price. Nothing is
/// divided by a loss of zero or below.
#[test]
fn a_structure_that_cannot_lose_at_its_price_is_not_sized() {
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1",
                                    "sizing": { "fixed_notional": "1000" } } ] }));
    let e = rejected(run(&s, open_priced("SHORT", -10.0), friday()));
    assert_eq!(
        e,
        "the SPX spread at a credit of 10 could not lose at expiration, which no market prices it at (a price or sign \
         mistyped?): nothing is sized from it"
    );
    let e = rejected(run(&s, open_priced("LONG", -1.10), friday()));
    assert!(e.contains("at a credit of 1.1 could not lose"), "{e}");
}

/// A market credit spread sized from quotes: the sold 4500 put at its mid (4.10), the bought 4490 put without one
/// (bid 0, ask 2.25). The structure risks the most where the bought leg costs its highest: a credit of 1.85, a loss
/// of (10 − 1.85) × 100 = $815. Sized by the largest credit (4.10), a unit risked $590 and $2,000 sold 3.
#[test]
fn a_credit_spread_sized_from_quotes_takes_the_least_credit() {
    let quotes = json!({ "SPXW240119P04500000": { "bid": "4.00", "ask": "4.20" },
                         "SPXW240119P04490000": { "bid": "0", "ask": "2.25" } });
    let market = json!({ "option_chains": { "SPX": spx_chain() }, "quotes": quotes });
    let s = spx(json!({ "market": market, "order_type": "market",
                        "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A1",
                                    "sizing": { "fixed_notional": "2000" } } ] }));
    let body = json!({ "ticker": "SPX", "action": "OPEN", "direction": "SHORT" });
    assert_eq!(place(&s, body, friday()).quantity, d("2"));
}

// ---------------------------------------------------------------------------------------
// Leg ratios with a common factor
// ---------------------------------------------------------------------------------------

/// SPY leg rules written with a common factor ("two contracts a leg"): long a 450/455 call vertical 2:2, short a
/// 450/445 put vertical 2:2; limit orders at the mid; one Tastytrade bot sized by `sizing`.
fn spy_two_by_two(sizing: Value) -> Strategy {
    snapshot(json!({
        "id": "spy", "token_hash": TOKEN, "status": "active", "asset_class": "option",
        "order_type": "limit", "limit_target": "mid", "allowed_instruments": ["SPY"],
        "options": {
            "selection": "internal",
            "expiration": { "min_days": 0, "max_days": 7 },
            "legs": {
                "long": [ { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 }, "ratio": 2 },
                          { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": 1 }, "ratio": 2 } ],
                "short": [ { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": 0 }, "ratio": 2 },
                           { "side": "put", "action": "buy_to_open", "strike": { "atm_offset": -1 }, "ratio": 2 } ]
            }
        },
        "bots": [ { "id": "bot", "broker": "tastytrade", "account_id": "5WX00000", "sizing": sizing } ],
        "market": {
            "option_chains": { "SPY": { "underlying_price": "450.2", "expirations": ["2024-01-19"],
                                        "strikes": ["445", "450", "455"] } },
            "quotes": { "SPY240119C00450000": { "bid": "1.00", "ask": "1.10" },
                        "SPY240119C00455000": { "bid": "0.40", "ask": "0.46" },
                        "SPY240119P00450000": { "bid": "0.90", "ask": "1.00" },
                        "SPY240119P00445000": { "bid": "0.30", "ask": "0.36" } }
        }
    }))
}

fn ratios(o: &Order) -> Vec<u32> {
    o.legs.iter().map(|l| l.ratio).collect()
}

/// Leg rules whose ratios share a factor (a vertical written 2:2) pass the snapshot's checks. Brokers price a
/// structure per unit in its simplest ratios (Tastytrade counts an order's units as the greatest common divisor of
/// its legs' quantities, Alpaca wants `ratio_qty` in simplest form): priced as written, the 2:2 unit's mid (1.25)
/// went out as the price of one vertical whose mid is 0.62, a debit at twice the target and a credit that never
/// fills. The order goes out as two verticals, each at the vertical's price.
#[test]
fn a_leg_ratio_with_a_common_factor_sends_a_price_per_reduced_unit() {
    let s = spy_two_by_two(json!({ "fixed_quantity": "1" }));
    let actions = run(&s, json!({"ticker": "SPY", "action": "OPEN", "direction": "LONG"}), friday()).expect("opens");
    assert_eq!(actions.len(), 1, "{actions:?}");
    let bot = &s.bots[0];
    let req = strategy_webhook::broker::format(bot.broker, &bot.account_id, &actions[0]).expect("formats");
    let body: Value = serde_json::from_slice(&req.body.to_bytes()).expect("a JSON body");
    let quantities: Vec<u64> =
        body["legs"].as_array().expect("legs").iter().map(|l| l["quantity"].as_u64().expect("a count")).collect();
    // One vertical's mid is 0.62 (bid 1.00 − 0.46, ask 1.10 − 0.40), 0.60 on the $0.05 tick; the order is two
    // units of one vertical each, so its price is the vertical's.
    assert_eq!(
        (body["price"].as_str(), body["price-effect"].as_str(), quantities.as_slice()),
        (Some("0.60"), Some("Debit"), &[2, 2][..]),
        "{body}"
    );
    // A credit the same way: the put vertical's mid is a credit of 0.62 (bid 0.30 − 1.00, ask 0.36 − 0.90).
    let o = place(&s, json!({"ticker": "SPY", "action": "OPEN", "direction": "SHORT"}), friday());
    assert_eq!((o.quantity, ratios(&o)), (d("2"), vec![1, 1]));
    assert_eq!((o.limit_price, o.price_effect), (Some(d("0.60")), Some(PriceEffect::Credit)));
}

/// Reduced to its simplest ratios, a 2:2 rule still trades the contracts it did: a fixed quantity of 1 is two
/// verticals, and an amount is sized in the rule's own units (two verticals each) by their maximum loss.
#[test]
fn a_rule_with_a_common_factor_is_sized_in_its_own_units() {
    let long = json!({"ticker": "SPY", "action": "OPEN", "direction": "LONG"});
    let short = json!({"ticker": "SPY", "action": "OPEN", "direction": "SHORT"});
    let o = place(&spy_two_by_two(json!({ "fixed_quantity": "3" })), long.clone(), friday());
    assert_eq!((o.quantity, ratios(&o)), (d("6"), vec![1, 1]), "three 2:2 units are six verticals");
    // A vertical at a 0.60 debit risks $60, the rule's unit $120: 1150 / 120 = 9.6 → 9 units, 18 verticals.
    let o = place(&spy_two_by_two(json!({ "fixed_notional": "1150" })), long, friday());
    assert_eq!((o.quantity, ratios(&o)), (d("18"), vec![1, 1]));
    // A 5-wide put vertical at a 0.60 credit risks $440, the rule's unit $880: 2300 / 880 = 2.6 → 2 units.
    let o = place(&spy_two_by_two(json!({ "fixed_notional": "2300" })), short, friday());
    assert_eq!((o.quantity, ratios(&o)), (d("4"), vec![1, 1]));
    assert_eq!((o.limit_price, o.price_effect), (Some(d("0.60")), Some(PriceEffect::Credit)));
}

/// A position a host lists with legs 2:2 closes as verticals, each priced as one: closed at the quotes' credit for
/// the whole 2:2 unit (5.05), the vertical's sell asked twice its worth and never filled. Held beside the same
/// vertical listed 1:1, the two are one structure and close as one order.
#[test]
fn a_close_of_a_position_listed_with_a_common_factor_is_priced_per_reduced_unit() {
    let two_by_two = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "ratio": 2 },
                             { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "ratio": 2 } ]);
    let positions = |also: Option<Value>| {
        let mut p = vec![json!({ "instrument": "SPX", "direction": "long", "quantity": "1", "legs": two_by_two })];
        p.extend(also);
        spx(json!({
            "bots": [ { "id": "bot", "broker": "tradier", "account_id": "A", "sizing": { "fixed_quantity": "1" },
                        "positions": p } ],
            "market": { "option_chains": { "SPX": spx_chain() }, "quotes": leg_quotes() } }))
    };
    let close = json!({ "ticker": "SPX", "action": "CLOSE", "direction": "LONG" });
    // Sell 4500 call, buy 4510 call: mid −2.525 → a credit of 2.55 a vertical.
    let o = place(&positions(None), close.clone(), friday());
    assert_eq!((o.quantity, ratios(&o)), (d("2"), vec![1, 1]));
    assert_eq!(leg_actions(&o), [LegAction::SellToClose, LegAction::BuyToClose]);
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.55")), Some(PriceEffect::Credit)));
    let one_by_one = json!({ "instrument": "SPX", "direction": "long", "quantity": "1", "legs": vertical_legs() });
    let o = place(&positions(Some(one_by_one)), close, friday());
    assert_eq!((o.quantity, ratios(&o)), (d("3"), vec![1, 1]), "two verticals and one, as one order");
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.55")), Some(PriceEffect::Credit)));
}

/// A working order a host lists with legs 2:2 is changed as verticals: its size counted as listed (a unit of two
/// verticals) and what filled of it likewise, its new price per vertical, a notional divided by what the listed unit
/// risks (or, for an exit, its premium), and the legs' prices summed for one vertical.
#[test]
fn a_modify_of_an_order_listed_with_a_common_factor_is_priced_per_reduced_unit() {
    let entry = json!({ "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
        "order_type": "limit", "price": "2.50", "quantity": "2", "filled": "1", "state": "open", "legs": [
            { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "ratio": 2 },
            { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "ratio": 2 } ] });
    let exit = json!({ "id": "x1", "instrument": "SPX", "direction": "long", "intent": "exit",
        "order_type": "limit", "price": "-8.00", "quantity": "1", "state": "open", "legs": [
            { "symbol": "SPXW240119C04500000", "action": "sell_to_close", "ratio": 2 },
            { "symbol": "SPXW240119C04510000", "action": "buy_to_close", "ratio": 2 } ] });
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "H",
        "sizing": { "fixed_quantity": "1" }, "working_orders": [entry, exit],
        "positions": [ { "instrument": "SPX", "direction": "long", "quantity": "10", "legs": vertical_legs() } ] } ] }));
    let changed = |body: Value| {
        let actions = run(&s, body, friday()).expect("modifies");
        match actions.as_slice() {
            [BotAction::Replace { order, filled, .. }] => (order.clone(), *filled),
            other => panic!("{other:?}"),
        }
    };
    let modify = |patch: Value| {
        merged(json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "target": "entry" }), patch)
    };
    let (o, filled) = changed(modify(json!({ "price": 2.40, "quantity": 3 })));
    assert_eq!((o.quantity, ratios(&o)), (d("6"), vec![1, 1]), "three listed units, six verticals");
    assert_eq!(filled, d("2"), "one listed unit filled is two verticals");
    assert_eq!((o.limit_price, o.price_effect), (Some(d("2.4")), Some(PriceEffect::Debit)));
    // A 10-wide vertical at a 2.00 debit risks $200, the listed unit $400: 1000 / 400 = 2.5 → 2 units.
    let (o, _) = changed(modify(json!({ "price": 2.00, "notional": 1000 })));
    assert_eq!((o.quantity, ratios(&o)), (d("4"), vec![1, 1]));
    let priced = |sym: &str, a: &str, p: f64| json!({ "symbol": sym, "action": a, "price": p });
    let (o, _) = changed(modify(json!({ "legs": [ priced("SPXW240119C04500000", "buy_to_open", 3.00),
                                             priced("SPXW240119C04510000", "sell_to_open", 1.20) ] })));
    assert_eq!((o.quantity, o.limit_price, o.price_effect), (d("4"), Some(d("1.8")), Some(PriceEffect::Debit)));
    // The exit by its premium: 8.00 a vertical is $800, the listed unit $1,600: 2000 / 1600 → 1 unit.
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "target": "exit",
                       "price": -8.00, "notional": 2000 });
    let (o, _) = changed(body);
    assert_eq!((o.quantity, ratios(&o)), (d("2"), vec![1, 1]));
    assert_eq!((o.limit_price, o.price_effect), (Some(d("8")), Some(PriceEffect::Credit)));
}

/// A MODIFY's quantity written with more than 28 significant digits is refused in plain notation, and was rounded
/// to nearest in scientific notation (`Decimal::from_scientific`): 2.999…9 (29 nines) became 3, and the working
/// order was re-sized UP to 3 shares where truncating the quantity sent gives 2 (every other size here rounds
/// down). Both spellings are now refused alike; one that fits is read exactly, and sized down as ever.
#[test]
fn a_modify_quantity_in_scientific_notation_is_never_rounded_up() {
    let s = equity_working(json!([equity_order("w1", "entry", "open", "long")]));
    for quantity in ["2.99999999999999999999999999999", "2.99999999999999999999999999999e0"] {
        let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "quantity": quantity });
        let refused = alert::parse(body.to_string().as_bytes(), Some("application/json"));
        assert!(
            matches!(&refused, Err(alert::ParseError::InvalidField { field, .. }) if field == "quantity"),
            "{quantity}: {refused:?}"
        );
    }
    let fits = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "quantity": "2.9999e0" });
    match run(&s, fits, friday()).expect("a MODIFY of the working entry").as_slice() {
        [BotAction::Replace { order, .. }] => assert_eq!(order.quantity, d("2"), "truncated, never rounded up"),
        other => panic!("{other:?}"),
    }
}

/// A sender's tiny price on a crypto pair with a base increment: the size fits a number, but not once counted in
/// steps of the increment. Refused for this bot like any size past what an order holds, never a 500 failing every
/// bot's order (as it was, after the quotient itself had been made a refusal).
#[test]
fn a_tiny_crypto_price_past_the_base_increments_steps_is_a_refusal() {
    let s = crypto_with_increments("market", json!({ "fixed_notional": "1000" }), fixture_increments(), json!({}));
    let body = json!({ "ticker": "BTCUSD", "action": "OPEN", "direction": "LONG", "price": "0.00000000000000000001" });
    let r = run(&s, body, friday());
    assert!(matches!(&r, Err(e) if e.is_rejection()), "{r:?}");
    assert!(rejected(r).contains("more units than any order can hold"));
}

/// A MODIFY's size past any number once put in simplest ratios (an order listed 2:2): the sender's number, refused
/// as a size past what an order holds, never a 500 failing every bot's order.
#[test]
fn a_huge_modify_quantity_on_an_order_listed_2_2_is_a_refusal() {
    let entry = json!({ "id": "w1", "instrument": "SPX", "direction": "long", "intent": "entry",
        "order_type": "limit", "price": "2.50", "quantity": "2", "filled": "0", "state": "open", "legs": [
            { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "ratio": 2 },
            { "symbol": "SPXW240119C04510000", "action": "sell_to_open", "ratio": 2 } ] });
    let s = spx(json!({ "bots": [ { "id": "bot", "broker": "schwab", "account_id": "H",
        "sizing": { "fixed_quantity": "1" }, "working_orders": [entry] } ] }));
    let body = json!({ "ticker": "SPX", "action": "MODIFY", "direction": "LONG", "target": "entry",
                       "quantity": "50000000000000000000000000000" });
    let r = run(&s, body, friday());
    assert!(matches!(&r, Err(e) if e.is_rejection()), "{r:?}");
}

/// An exit MODIFY to a size past any number beside another working exit is past the position, refused as such; the
/// sum overflowed into a 500.
#[test]
fn a_huge_exit_modify_beside_another_exit_is_refused_as_past_the_position() {
    let s = equity(json!({ "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
        "sizing": { "fixed_quantity": "1" },
        "positions": [ { "instrument": "AAPL", "direction": "long", "quantity": "30" } ],
        "working_orders": [ equity_order("w2", "exit", "open", "long"), equity_order("w3", "exit", "open", "long") ] } ] }));
    let body = json!({ "ticker": "AAPL", "action": "MODIFY", "direction": "LONG", "target": "exit", "order_id": "w2",
                       "quantity": "79228162514264337593543950335" });
    let r = run(&s, body, friday());
    assert!(matches!(&r, Err(OrderError::ExitPastPosition { .. })), "{r:?}");
}

/// Leg prices that sum past any number are the sender's bad numbers: refused, never a 500.
#[test]
fn leg_prices_summing_past_any_number_are_a_refusal() {
    let legs = json!([ { "symbol": "SPXW240119C04500000", "action": "buy_to_open", "price": "50000000000000000000000000000" },
                       { "symbol": "SPXW240119P04500000", "action": "buy_to_open", "price": "50000000000000000000000000000" } ]);
    let r = run(&spx_external(json!({})), external(legs, None), friday());
    assert!(matches!(&r, Err(OrderError::PriceBeyondAny { .. })), "{r:?}");
}

/// Alpaca's PATCH takes whole shares only ("Qty of equity fractional orders are not allowed to change", its
/// OpenAPI): a working fractional order (the market CLOSE of a 2.5-share position, sent after the close and waiting
/// for the open) re-sized by a MODIFY went out as one PATCH, which Alpaca refused after the sender was answered
/// processed. It is re-sized by a cancel and a new order, as at the brokers whose change takes no size; a whole
/// share order is still changed in place.
#[test]
fn a_fractional_share_order_at_alpaca_is_re_sized_by_a_cancel_and_a_new_order() {
    let with_exit = |quantity: &str| {
        equity(json!({ "bots": [ { "id": "bot", "broker": "alpaca", "account_id": "A",
            "sizing": { "fixed_quantity": "1" },
            "working_orders": [ { "id": "x-1", "instrument": "AAPL", "direction": "long", "intent": "exit",
                "order_type": "market", "quantity": quantity, "duration": "day", "state": "open" } ] } ] }))
    };
    let s = with_exit("2.5");
    let actions = run(&s, modify(json!({ "target": "exit", "quantity": 2 })), friday()).expect("re-sizes");
    match actions.as_slice() {
        [BotAction::Cancel { order_id, order: pulled }, BotAction::Place(placed)] => {
            assert_eq!((order_id.as_str(), pulled.quantity.to_string()), ("x-1", "2.5".to_owned()));
            assert_eq!(placed.quantity.to_string(), "2");
            for a in &actions {
                assert!(strategy_webhook::broker::format(s.bots[0].broker, "A", a).is_ok(), "{a:?}");
            }
        }
        other => panic!("a fractional order re-sized in place: {other:?}"),
    }
    let s = with_exit("3");
    let actions = run(&s, modify(json!({ "target": "exit", "quantity": 2 })), friday()).expect("re-sizes");
    assert!(matches!(actions.as_slice(), [BotAction::Replace { order_id, .. }] if order_id == "x-1"), "{actions:?}");
}
