//! Order building answers every input with an order or a cause text, never a panic:
//! prices, sizes and strikes anywhere in the decimal range, any clock, any action.

use proptest::prelude::*;
use serde_json::json;
use strategy_webhook::alert::{self, ActionKind, Direction};
use strategy_webhook::builder::{build, BuildContext};
use strategy_webhook::decide::Decided;
use strategy_webhook::decimal::Decimal;
use strategy_webhook::model::InstrumentKey;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// A decimal above zero (sizes the snapshot loader accepts), small or huge.
fn positive() -> impl proptest::strategy::Strategy<Value = String> {
    prop_oneof![
        (1i64..i64::MAX, 0u32..=28).prop_map(|(m, s)| Decimal::new(m, s).to_string()),
        (1i64..100, 0u32..=2).prop_map(|(m, s)| Decimal::new(m, s).to_string()),
        Just(Decimal::MAX.to_string()),
        Just("79000000000000000000000000000".to_string()),
    ]
}

/// Any decimal: a 64-bit mantissa at any scale, or one near the type's limits.
fn dec() -> impl proptest::strategy::Strategy<Value = String> {
    prop_oneof![
        (any::<i64>(), 0u32..=28).prop_map(|(m, s)| Decimal::new(m, s).to_string()),
        (1i64..1000, 0u32..=4).prop_map(|(m, s)| Decimal::new(m, s).to_string()),
        Just(Decimal::MAX.to_string()),
        Just(Decimal::MIN.to_string()),
        Just("0.0000000000000000000000000001".to_string()),
        Just("0".to_string()),
    ]
}

#[allow(clippy::too_many_arguments)]
fn snapshot(
    asset: &str,
    selection: &str,
    sizing: serde_json::Value,
    bid: &str,
    ask: &str,
    strike: &str,
    offset: i32,
    working_price: &str,
    held: &str,
) -> serde_json::Value {
    let instrument = if asset == "crypto" { "BTCUSD" } else { "SPX" };
    json!({
        "id": "p", "token_hash": TOKEN, "status": "active", "asset_class": asset, "order_type": "limit",
        "limit_target": "mid", "allowed_instruments": ["*"],
        "options": { "selection": selection, "expiration": { "min_days": 0, "max_days": 30 }, "legs": {
            "long": [ { "side": "call", "action": "buy_to_open", "strike": { "atm_offset": 0 } },
                      { "side": "call", "action": "sell_to_open", "strike": { "atm_offset": offset } } ],
            "short": [ { "side": "put", "action": "sell_to_open", "strike": { "atm_offset": offset } } ] } },
        "bots": [ { "id": "b", "broker": "coinbase", "account_id": "A", "equity": held, "sizing": sizing,
            "positions": [ { "instrument": instrument, "direction": "long", "quantity": held,
                             "legs": [ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ] } ],
            "working_orders": [ { "id": "w", "instrument": instrument, "direction": "long", "intent": "entry",
                                  "order_type": "limit", "price": working_price, "quantity": held, "state": "open",
                                  "legs": [ { "symbol": "SPXW240119C04500000", "action": "buy_to_open" } ] } ] } ],
        "market": {
            "quotes": { instrument: { "bid": bid, "ask": ask, "last": bid },
                        "SPXW240119C04500000": { "bid": bid, "ask": ask },
                        "SPXW240119C04505000": { "bid": bid, "ask": ask, "tick": working_price } },
            "option_chains": { "SPX": { "underlying_price": strike, "expirations": ["2024-01-19", "2024-01-22"],
                                        "strikes": [strike, "4500", "4505"] } } }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn building_never_panics(
        asset in prop::sample::select(vec!["equity", "option", "crypto"]),
        selection in prop::sample::select(vec!["internal", "external"]),
        kind in prop::sample::select(vec!["fixed_quantity", "fixed_notional", "percent_of_equity"]),
        amount in positive(),
        held in positive(),
        bid in dec(),
        ask in dec(),
        strike in dec(),
        working_price in dec(),
        price in prop::option::of(dec()),
        leg_price in prop::option::of(dec()),
        action in prop::sample::select(vec!["OPEN", "CLOSE", "MODIFY", "CANCEL"]),
        direction in prop::sample::select(vec!["LONG", "SHORT"]),
        order_type in prop::sample::select(vec!["market", "limit"]),
        offset in -4i32..4,
        now_ms in prop_oneof![any::<i64>(), 1_700_000_000_000i64..1_800_000_000_000],
    ) {
        let v = snapshot(asset, selection, json!({ kind: amount }), &bid, &ask, &strike, offset, &working_price, &held);
        // Snapshots the loader refuses (sizing not above zero, percent over 100…) never reach the builder.
        let Ok(s) = strategy_webhook::strategy::Strategy::from_json(v.to_string().as_bytes()) else { return Ok(()) };
        let instrument = if asset == "crypto" { "BTCUSD" } else { "SPX" };
        let mut body = json!({ "ticker": instrument, "action": action, "direction": direction, "order_type": order_type,
                               "quantity": amount, "notional": amount,
                               "legs": [ { "side": "CALL", "strike": strike, "action": "buy_to_open" },
                                         { "symbol": "SPXW240119C04505000", "action": "sell_to_open" } ] });
        if let Some(p) = &price {
            body["price"] = json!(p);
        }
        if let Some(p) = &leg_price {
            body["legs"][1]["price"] = json!(p);
        }
        let Ok(alerts) = alert::parse(body.to_string().as_bytes(), Some("application/json")) else { return Ok(()) };
        for a in &alerts {
            let ActionKind::Canonical(action) = a.action else { continue };
            let decided = Decided {
                step: 0,
                action,
                direction: a.direction.unwrap_or(Direction::Long),
                order_type: a.order_type.unwrap_or(s.order_type),
                duration: a.duration.unwrap_or(s.duration),
                key: InstrumentKey::new(&a.instrument, s.asset_class),
                alert: a,
                named: alerts.len() == 1 && s.asset_class == strategy_webhook::model::AssetClass::Option,
                // Both ways of pricing a close are driven: a reversal's close does not take the alert's price.
                reversing: alerts.len() > 1 && action == strategy_webhook::alert::Action::Close,
                reversed: alerts.len() > 1 && action == strategy_webhook::alert::Action::Open,
                // A `cancel: true` CANCEL is driven pulling both sides, as one leading an entry does.
                both_sides: alerts.len() > 1 && action == strategy_webhook::alert::Action::Cancel,
                // A `cancel: true` CLOSE is driven as the CLOSE after its CANCEL.
                after_cancel: alerts.len() > 1 && action == strategy_webhook::alert::Action::Close,
            };
            let ctx = BuildContext { strategy: &s, now_ms, dedup_key: "k", claimed_ms: now_ms };
            let built = build(&ctx, &decided, &s.bots[0]);
            if let Ok(actions) = built {
                for action in actions {
                    let order = match &action {
                        strategy_webhook::model::BotAction::Place(o) => o,
                        strategy_webhook::model::BotAction::Replace { order, .. } => order,
                        strategy_webhook::model::BotAction::Cancel { order, .. } => order,
                    };
                    prop_assert!(order.limit_price.map_or(true, |p| p >= Decimal::ZERO), "a limit price is a magnitude");
                    prop_assert!(order.quantity >= Decimal::ZERO);
                    prop_assert!(order.legs.len() <= 4);
                }
            }
        }
    }
}
