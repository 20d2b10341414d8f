//! Proptest strategies shared by the parsing property tests.

use proptest::prelude::*;
use strategy_webhook::alert::{Action, ActionKind, ActionWord, Date, Leg, LegAction, OptionSide};
use strategy_webhook::decimal::Decimal;

/// Any action a sender can write: the four canonical ones and the four words.
pub fn action() -> impl Strategy<Value = ActionKind> {
    prop_oneof![
        Just(ActionKind::Canonical(Action::Open)),
        Just(ActionKind::Canonical(Action::Close)),
        Just(ActionKind::Canonical(Action::Modify)),
        Just(ActionKind::Canonical(Action::Cancel)),
        Just(ActionKind::Word(ActionWord::Buy)),
        Just(ActionKind::Word(ActionWord::Sell)),
        Just(ActionKind::Word(ActionWord::Entry)),
        Just(ActionKind::Word(ActionWord::Exit)),
    ]
}

fn decimal() -> impl Strategy<Value = Decimal> {
    (any::<i64>(), 0u32..10).prop_map(|(m, s)| Decimal::new(m % 10_000_000_000, s))
}

fn positive_decimal() -> impl Strategy<Value = Decimal> {
    (1i64..10_000_000_000, 0u32..10).prop_map(|(m, s)| Decimal::new(m, s))
}

/// A leg as the parser gives it back: with an OCC symbol, the side, strike and expiration
/// the symbol names are filled in; without one, any of them may be missing.
pub fn leg() -> impl Strategy<Value = Leg> {
    let side = || prop_oneof![Just(OptionSide::Call), Just(OptionSide::Put)];
    // OCC symbols carry years 2000 to 2099 and strikes of 0.001 to 99999.999.
    let contract = ("[A-Z]{1,5}", 10_957i64..47_482, side(), 1i64..100_000_000).prop_map(|(root, day, side, milli)| {
        let e = Date::from_days_since_epoch(day);
        let cp = if side == OptionSide::Call { 'C' } else { 'P' };
        let symbol = format!("{root}{:02}{:02}{:02}{cp}{milli:08}", e.year % 100, e.month, e.day);
        (Some(symbol), Some(side), Some(Decimal::new(milli, 3).normalize()), Some(e))
    });
    let loose = (
        proptest::option::of(side()),
        proptest::option::of(positive_decimal()),
        proptest::option::of((0i64..20_000).prop_map(Date::from_days_since_epoch)),
    )
        .prop_map(|(side, strike, expiration)| (None, side, strike, expiration));
    (
        prop_oneof![contract, loose],
        proptest::option::of(prop_oneof![
            Just(LegAction::BuyToOpen),
            Just(LegAction::SellToOpen),
            Just(LegAction::BuyToClose),
            Just(LegAction::SellToClose)
        ]),
        proptest::option::of(decimal()),
        proptest::option::of(decimal()),
    )
        .prop_map(|((symbol, side, strike, expiration), action, price, live_price)| Leg {
            symbol,
            side,
            action,
            strike,
            expiration,
            price,
            live_price,
            size: None,
        })
}
