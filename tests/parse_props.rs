//! No input of any bytes panics the parser, and a canonical alert rendered as JSON
//! parses back to itself.

mod props_support;

use props_support::{action, leg};
use proptest::prelude::*;
use strategy_webhook::alert::{
    self, Action, ActionKind, Alert, Direction, Duration, OrderIntent, OrderType, Position, QuotePrice,
};
use strategy_webhook::decimal::Decimal;

fn decimal() -> impl Strategy<Value = Decimal> {
    (any::<i64>(), 0u32..10).prop_map(|(m, s)| Decimal::new(m % 10_000_000_000, s))
}

fn positive_decimal() -> impl Strategy<Value = Decimal> {
    (1i64..10_000_000_000, 0u32..10).prop_map(|(m, s)| Decimal::new(m, s))
}

prop_compose! {
    fn canonical_alert()(
        action in action(),
        instrument in "[A-Z]{1,5}|[A-Z]{3}/USD|NQ1!",
        direction in proptest::option::of(prop_oneof![Just(Direction::Long), Just(Direction::Short)]),
        price in proptest::option::of(decimal()),
        order_type in proptest::option::of(prop_oneof![Just(OrderType::Market), Just(OrderType::Limit)]),
        duration in proptest::option::of(prop_oneof![Just(Duration::Day), Just(Duration::Gtc), Just(Duration::Fok)]),
        quantity in proptest::option::of(positive_decimal()),
        notional in proptest::option::of(positive_decimal()),
        legs in proptest::collection::vec(leg(), 0..=4),
        message_id in proptest::option::of("[A-Za-z0-9_.:-]{1,40}"),
        target in proptest::option::of(prop_oneof![Just(OrderIntent::Entry), Just(OrderIntent::Exit)]),
        order_id in proptest::option::of("[A-Za-z0-9_.:-]{1,40}"),
        // Unix milliseconds with 13 digits (2001 to 2286), as `{{timenow}}` senders' times read back.
        sent_at_ms in proptest::option::of(1_000_000_000_000i64..9_999_999_999_999),
        max_lag_s in proptest::option::of(0u64..1_000_000),
        limit_target in proptest::option::of(prop_oneof![
            Just(QuotePrice::Bid), Just(QuotePrice::Ask), Just(QuotePrice::AskBid),
            Just(QuotePrice::Mark), Just(QuotePrice::Last),
        ]),
        held_before in proptest::option::of(prop_oneof![Just(Position::Long), Just(Position::Short), Just(Position::Flat)]),
    ) -> Alert {
        let modify = action == ActionKind::Canonical(Action::Modify);
        let working = modify || action == ActionKind::Canonical(Action::Cancel);
        Alert {
            action, instrument: instrument.into(), direction, price, order_type, duration,
            quantity: quantity.filter(|_| modify),
            // A MODIFY with both is refused (two sizes: which one was meant cannot be told), so it carries one.
            notional: notional.filter(|_| modify && quantity.is_none()),
            target: target.filter(|_| working),
            order_id: order_id.filter(|_| working),
            legs, message_id: message_id.map(Into::into), sent_at_ms, unread_time: None, unread_contract: None,
            held_before, max_lag_s, limit_target,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for ct in [None, Some("application/json"), Some("text/plain"), Some("application/x-www-form-urlencoded")] {
            let _ = alert::parse(&body, ct);
        }
    }

    #[test]
    fn json_shaped_noise_never_panics(body in r#"\{("[a-zA-Z_]{1,12}":("[^"\\]{0,12}"|-?[0-9]{1,6}(\.[0-9]{1,4})?|null|true|\[\]|\{\}),?){0,8}\}"#) {
        let _ = alert::parse(body.as_bytes(), Some("application/json"));
        let _ = alert::parse(body.as_bytes(), None);
    }

    #[test]
    fn canonical_alert_round_trips_through_json(a in canonical_alert()) {
        let json = a.to_json();
        let back = alert::parse(json.as_bytes(), Some("application/json"));
        prop_assert_eq!(back.map(|b| b.into_vec()), Ok(vec![a]), "{}", json);
    }
}

proptest! {
    /// Any exponent, `i64::MIN` and `i64::MAX` among them, is a number or none, never a panic: `1e-9223372036854775808`
    /// overflowed the exponent's absolute value, and every resend of an alert priced so panicked.
    #[test]
    fn a_decimal_with_any_exponent_never_panics(
        mantissa in "-?[0-9]{1,3}(\\.[0-9]{1,3})?",
        exponent in prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(i64::MIN + 1), any::<i64>(), -70i64..70],
        capital in any::<bool>(),
    ) {
        let text = format!("{mantissa}{}{exponent}", if capital { 'E' } else { 'e' });
        let got = strategy_webhook::decimal::parse(&text);
        if (-20..=20).contains(&exponent) && !mantissa.starts_with('-') {
            prop_assert!(got.is_some(), "{text}");
        }
    }
}
