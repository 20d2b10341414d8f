//! Properties of the plain-text parser: it answers any input without panicking, and a
//! canonical alert written out as text (`Alert::to_text`, or as free words) reads back as
//! the same alert.

mod props_support;

use props_support::{action, leg};
use proptest::prelude::*;
use strategy_webhook::alert::{self, Action, ActionKind, Alert, Direction, Duration, OrderIntent, OrderType, Position};
use strategy_webhook::decimal::Decimal;

/// Instruments in canonical form: upper case, no exchange prefix, no `.P` suffix.
fn instrument() -> impl Strategy<Value = String> {
    "[A-Z][A-Z0-9]{0,6}(/[A-Z]{3}|-[A-Z]{3}|1!|\\.[A-OQ-Z]|_[A-Z0-9]{1,3})?"
}

/// A decimal with up to eight places, kept with its scale (`190.50` stays `190.50`).
fn decimal(min: i64) -> impl Strategy<Value = Decimal> {
    (min..1_000_000_000_000i64, 0u32..=8).prop_map(|(m, scale)| Decimal::new(m, scale))
}

prop_compose! {
    fn canonical_alert()(
        action in action(),
        instrument in instrument(),
        direction in prop::option::of(prop_oneof![Just(Direction::Long), Just(Direction::Short)]),
        price in prop::option::of(decimal(-1_000_000_000_000)),
        order_type in prop::option::of(prop_oneof![Just(OrderType::Market), Just(OrderType::Limit)]),
        duration in prop::option::of(prop_oneof![Just(Duration::Day), Just(Duration::Gtc), Just(Duration::Fok)]),
        quantity in prop::option::of(decimal(1)),
        notional in prop::option::of(decimal(1)),
        message_id in prop::option::of("[A-Za-z0-9_-]{1,24}"),
        target in prop::option::of(prop_oneof![Just(OrderIntent::Entry), Just(OrderIntent::Exit)]),
        order_id in prop::option::of("[A-Za-z0-9_-]{1,24}"),
        held_before in prop::option::of(prop_oneof![Just(Position::Long), Just(Position::Short), Just(Position::Flat)]),
    ) -> Alert {
        let mut a = Alert::new(action, instrument);
        a.direction = direction;
        a.price = price;
        a.order_type = order_type;
        a.duration = duration;
        // Sizes only survive on MODIFY: everywhere else the bot's sizing decides. One of them: a MODIFY with both is
        // refused (two sizes: which one was meant cannot be told).
        if action == ActionKind::Canonical(Action::Modify) {
            a.quantity = quantity;
            a.notional = notional.filter(|_| quantity.is_none());
        }
        // Which working order is meant survives on MODIFY and CANCEL only.
        if matches!(action, ActionKind::Canonical(Action::Modify | Action::Cancel)) {
            a.target = target;
            a.order_id = order_id;
        }
        a.message_id = message_id.map(Into::into);
        a.held_before = held_before;
        a
    }
}

/// The same alert as free words: `buy LONG AAPL @ 190.25 limit gtc id=abc`.
fn as_words(a: &Alert) -> String {
    let mut out = format!("{} {}", a.action.as_str(), a.instrument);
    if let Some(d) = a.direction {
        out = format!("{} {out}", d.as_str());
    }
    if let Some(p) = &a.price {
        out.push_str(&format!(" @ {p}"));
    }
    if let Some(t) = a.order_type {
        out.push_str(&format!(" {}", t.as_str()));
    }
    if let Some(d) = a.duration {
        out.push_str(&format!(" {}", d.as_str()));
    }
    if let Some(t) = a.target {
        out.push_str(&format!(" target={}", t.as_str()));
    }
    if let Some(id) = &a.order_id {
        out.push_str(&format!(" order_id={id}"));
    }
    if let Some(id) = &a.message_id {
        out.push_str(&format!(" id={id}"));
    }
    out
}

/// The same alert as a JSON object, numbers as JSON numbers and the id under `metadata`.
fn as_json_body(a: &Alert) -> String {
    let mut out = format!(r#"{{"ticker": "{}", "action": "{}""#, a.instrument, a.action.as_str());
    if let Some(d) = a.direction {
        out.push_str(&format!(r#", "direction": "{}""#, d.as_str()));
    }
    if let Some(p) = &a.price {
        out.push_str(&format!(r#", "price": {p}"#));
    }
    if let Some(t) = a.order_type {
        out.push_str(&format!(r#", "order_type": "{}""#, t.as_str()));
    }
    if let Some(d) = a.duration {
        out.push_str(&format!(r#", "duration": "{}""#, d.as_str()));
    }
    if let Some(q) = &a.quantity {
        out.push_str(&format!(r#", "quantity": {q}"#));
    }
    if let Some(n) = &a.notional {
        out.push_str(&format!(r#", "notional": "{n}""#));
    }
    if let Some(t) = a.target {
        out.push_str(&format!(r#", "target": "{}""#, t.as_str()));
    }
    if let Some(id) = &a.order_id {
        out.push_str(&format!(r#", "orderId": "{id}""#));
    }
    if let Some(p) = a.held_before {
        let word = match p {
            Position::Long => "long",
            Position::Short => "short",
            Position::Flat => "flat",
        };
        out.push_str(&format!(r#", "prevMarketPosition": "{word}""#));
    }
    if let Some(id) = &a.message_id {
        out.push_str(&format!(r#", "metadata": {{"message_id": "{id}"}}"#));
    }
    out.push('}');
    out
}

/// A message id member's value as senders write one: a string, or a JSON number whole or not, of any length.
fn id_value() -> impl Strategy<Value = String> {
    prop_oneof![
        "\"[A-Za-z0-9_.-]{0,12}\"",
        "-?[1-9][0-9]{0,30}",
        "-?(0|[1-9][0-9]{0,20})\\.[0-9]{1,4}",
        "-?[1-9][0-9]{0,3}(\\.[0-9]{1,2})?[eE][+-]?[0-9]{1,2}",
        Just("0".to_owned()),
        Just("null".to_owned()),
    ]
}

/// `ticker` and `action`, then message ids at the top level and in `metadata`, under any of the id's spellings.
fn body_with_ids() -> impl Strategy<Value = String> {
    let members = || {
        let key = prop::sample::select(vec!["message_id", "messageId", "MessageID", "message-id"]);
        prop::collection::vec((key, id_value()).prop_map(|(k, v)| format!(r#""{k}": {v}"#)), 0..3)
    };
    (members(), prop::option::of(members())).prop_map(|(top, metadata)| {
        let mut out = vec![r#""ticker": "AAPL""#.to_owned(), r#""action": "buy""#.to_owned()];
        out.extend(top);
        if let Some(m) = metadata {
            out.push(format!(r#""metadata": {{{}}}"#, m.join(", ")));
        }
        format!("{{{}}}", out.join(", "))
    })
}

fn is_keyword(word: &str) -> bool {
    const WORDS: [&str; 19] = [
        "LONG", "SHORT", "BULLISH", "BEARISH", "OPEN", "CLOSE", "MODIFY", "CANCEL", "BUY", "SELL", "ENTRY", "EXIT",
        "MARKET", "LIMIT", "DAY", "GTC", "FOK", "AT", "ID",
    ];
    WORDS.contains(&word)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn any_string_gets_an_answer(s in any::<String>()) {
        let _ = alert::text::parse(&s);
        let _ = alert::parse(s.as_bytes(), Some("text/plain"));
        let _ = alert::parse(s.as_bytes(), None);
    }

    #[test]
    fn any_bytes_get_an_answer(b in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = alert::parse(&b, Some("text/plain"));
        let _ = alert::parse(&b, None);
    }

    /// Text made of the grammar's own pieces reaches the deeper rules more often than
    /// random characters do.
    #[test]
    fn alert_like_text_gets_an_answer(
        s in "([A-Za-z0-9]{1,6}|order|filled on|New strategy position is|buy|LONG|@|at|=|:|;|,|\\{|\\}|\\[|\\]|\"|“|”|'|\\\\n|\r\n|\n| |\\.|-|!|\\{\\{ticker\\}\\}|[0-9]{1,3}\\.[0-9]{1,3}){0,40}"
    ) {
        let _ = alert::parse(s.as_bytes(), Some("text/plain"));
    }

    #[test]
    fn to_text_reads_back(a in canonical_alert()) {
        let text = a.to_text();
        let back = alert::parse(text.as_bytes(), Some("text/plain"));
        prop_assert_eq!(back.as_ref().map(|v| v.iter().map(Alert::to_json).collect::<Vec<_>>()), Ok(vec![a.to_json()]), "{}", text);
        prop_assert_eq!(back.map(|b| b.into_vec()), Ok(vec![a]));
    }

    /// A JSON body sent as text/plain is read without JSON decoding, and must still give
    /// what the JSON parser gives.
    #[test]
    fn json_sent_as_text_matches_json(a in canonical_alert()) {
        let body = as_json_body(&a);
        let json = alert::parse(body.as_bytes(), Some("application/json"));
        let text = alert::parse(body.as_bytes(), Some("text/plain"));
        prop_assert_eq!(&json, &Ok(smallvec::smallvec![a]), "{}", body);
        prop_assert_eq!(text, json, "{}", body);
    }

    /// TradingView sends a JSON message as text/plain when it ends with a newline: the legs
    /// must survive that, and the text must give what the JSON gives.
    #[test]
    fn json_with_legs_sent_as_text_matches_json(mut a in canonical_alert(), legs in prop::collection::vec(leg(), 1..=4)) {
        a.legs = legs;
        let body = a.to_json();
        let json = alert::parse(body.as_bytes(), Some("application/json"));
        let text = alert::parse(format!("{body}\n").as_bytes(), Some("text/plain"));
        prop_assert_eq!(&json, &Ok(smallvec::smallvec![a]), "{}", body);
        prop_assert_eq!(text, json, "{}", body);
    }

    /// The message id is the dedup key: a JSON body sent as text (by the text reader's hand path, and with line
    /// breaks by its grammar) gets the same id or the same refusal, however the id is spelled and written. A body
    /// whose alert reads has the same id when only its id is read, as it is for a body refused for another reason.
    #[test]
    fn message_ids_sent_as_text_match_json(body in body_with_ids()) {
        let json = alert::parse(body.as_bytes(), Some("application/json"));
        for sent in [body.clone(), body.replace(", ", ",\n")] {
            let text = alert::parse(sent.as_bytes(), Some("text/plain"));
            prop_assert_eq!(&text, &json, "{}", sent);
        }
        if let Ok(a) = &json {
            prop_assert_eq!(alert::message_id_of_unparsed(body.as_bytes()), a[0].message_id.clone(), "{}", body);
        }
    }

    #[test]
    fn free_words_read_back(mut a in canonical_alert()) {
        prop_assume!(!is_keyword(&a.instrument));
        prop_assume!(a.quantity.is_none() && a.notional.is_none());
        // Free words have no way to say the position before the fill.
        a.held_before = None;
        let text = as_words(&a);
        let back = alert::parse(text.as_bytes(), Some("text/plain"));
        prop_assert_eq!(back.as_ref().map(|v| v.iter().map(Alert::to_json).collect::<Vec<_>>()), Ok(vec![a.to_json()]), "{}", text);
    }
}
