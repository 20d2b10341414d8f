//! The grammar rule by rule, then the walk and the shapes.

use super::*;
use crate::alert::{Action, ActionKind, ActionWord, Direction};
use pest::{consumes_to, fails_with, parses_to};

/// True when `rule` alone matches all of `input`.
fn whole(rule: Rule, input: &str) -> bool {
    AlertParser::parse(rule, input).is_ok_and(|p| p.as_str() == input)
}

/// How much of `input` the rule matches from the start, if it matches at all.
fn prefix(rule: Rule, input: &str) -> Option<&str> {
    AlertParser::parse(rule, input).ok().map(|p| p.as_str())
}

#[test]
fn rule_number() {
    for ok in ["190.25", "-1.5", "+3", ".5", "1e-3", "65000", "0"] {
        assert!(whole(Rule::number, ok), "{ok}");
    }
    for bad in ["", "-", "abc", "e5", "."] {
        assert!(!whole(Rule::number, bad), "{bad}");
    }
    // A trailing full stop ends a sentence; it is not part of the number.
    assert_eq!(prefix(Rule::number, "1."), Some("1"));
    fails_with! { parser: AlertParser, input: "x1", rule: Rule::number, positives: vec![Rule::number], negatives: vec![], pos: 0 };
}

#[test]
fn rule_placeholder() {
    assert!(whole(Rule::placeholder, "{{ticker}}"));
    assert!(whole(Rule::placeholder, "{{strategy.order.action}}"));
    assert!(!whole(Rule::placeholder, "{ticker}"));
    assert!(!whole(Rule::placeholder, "{{ticker"));
    assert!(!whole(Rule::placeholder, "{{tic\nker}}"));
    // Its end is looked for no further than the next `{{`, so a line of unclosed ones is
    // read in linear time.
    assert!(!whole(Rule::placeholder, "{{a {{b}}"));
    assert_eq!(prefix(Rule::placeholder, "{{plot(\"RSI 14\")}} {{x"), Some("{{plot(\"RSI 14\")}}"));
}

#[test]
fn rule_symbol() {
    for ok in
        ["AAPL", "NASDAQ:AAPL", "BINANCE:BTCUSDT.P", "BTC/USD", "BTC-USD", "NQ1!", "CME_MINI:NQ1!", "BRK.B", "6E1!"]
    {
        assert!(whole(Rule::symbol, ok), "{ok}");
    }
    // Joiners need a letter or digit after them; an exchange prefix needs a ticker.
    assert_eq!(prefix(Rule::symbol, "AAPL."), Some("AAPL"));
    assert_eq!(prefix(Rule::symbol, "AAPL-"), Some("AAPL"));
    assert_eq!(prefix(Rule::symbol, "TSLA: sell"), Some("TSLA"));
    for bad in ["", ".AAPL", "/USD", ":AAPL", "{{ticker}}", "$AAPL"] {
        assert!(!whole(Rule::symbol, bad), "{bad}");
    }
}

#[test]
fn rule_quoted() {
    for ok in ["\"AAPL\"", "'AAPL'", "“AAPL”", "‘AAPL’", "”AAPL”", "\"say \\\"hi\\\"\"", "\"\""] {
        assert!(whole(Rule::quoted, ok), "{ok}");
    }
    parses_to! {
        parser: AlertParser, input: "“ticker”", rule: Rule::quoted,
        tokens: [quoted(0, 12, [dq_inner(3, 9)])]
    };
    for bad in ["\"AAPL", "AAPL\"", "'AAPL"] {
        assert!(!whole(Rule::quoted, bad), "{bad}");
    }
}

#[test]
fn rule_bare_key() {
    for ok in ["ticker", "order_type", "strategy.order.action", "time-in-force", "_x", "note(v2)"] {
        assert!(whole(Rule::bare_key, ok), "{ok}");
    }
    for (input, key) in [("ticker=AAPL", "ticker"), ("ticker: AAPL", "ticker"), ("a b", "a"), ("k\"v", "k")] {
        assert_eq!(prefix(Rule::bare_key, input), Some(key), "{input}");
    }
    for bad in ["1ticker", "", "-x", "{ticker}"] {
        assert!(!whole(Rule::bare_key, bad), "{bad}");
    }
}

#[test]
fn rule_fill() {
    let ok = "order sell @ 2 filled on NASDAQ:AAPL. New strategy position is -1";
    parses_to! {
        parser: AlertParser, input: ok, rule: Rule::fill,
        tokens: [fill(0, 65, [
            fill_side(6, 10), fill_quantity(13, 14), fill_instrument(25, 36), fill_position(63, 65)
        ])]
    };
    assert!(whole(Rule::fill, "ORDER BUY @ 0.5 filled on BTC/USD. new strategy position is 0.5."));
    assert!(whole(Rule::fill, "order buy @ 1 filled on BINANCE:BTCUSDT.P. New strategy position is 1"));
    assert!(whole(
        Rule::fill,
        "order {{strategy.order.action}} @ {{strategy.order.contracts}} filled on {{ticker}}. New strategy position is \
         {{strategy.position_size}}"
    ));
    for bad in [
        "order hold @ 1 filled on AAPL. New strategy position is 1",
        "order buy @ x filled on AAPL. New strategy position is 1",
        "order buy @ 1 filled on AAPL New strategy position is 1",
        "orders buy @ 1 filled on AAPL. New strategy position is 1",
        "order buy  @ 1 filled on AAPL. New strategy position is 1",
        "order buy @ 1 filled on AAPL. New strategy position is",
    ] {
        assert!(!whole(Rule::fill, bad), "{bad}");
    }
}

#[test]
fn rule_fill_slots() {
    assert!(whole(Rule::fill_side, "buy"));
    assert!(whole(Rule::fill_side, "SELL"));
    assert!(!whole(Rule::fill_side, "buyer"));
    assert!(whole(Rule::fill_quantity, "1.5"));
    assert!(!whole(Rule::fill_quantity, "one"));
    assert!(whole(Rule::fill_instrument, "NASDAQ:AAPL"));
    assert!(whole(Rule::fill_instrument, "{{ticker}}"));
    assert!(whole(Rule::fill_position, "-1.5"));
    assert!(!whole(Rule::fill_position, "flat"));
}

#[test]
fn rule_object_member_array_scalar() {
    assert!(whole(Rule::object, r#"{"ticker":"AAPL","action":"buy"}"#));
    assert!(whole(Rule::object, "{ “ticker”: “AAPL”,\n  “action”: “buy”,\n}"));
    assert!(whole(Rule::object, "{ticker: {{ticker}}, price: 1.5, x: null}"));
    assert!(whole(Rule::object, r#"{"metadata": {"message_id": "m1"}, "legs": [{"side": "CALL"}, {"side": "PUT"}]}"#));
    assert!(whole(Rule::object, "{}"));
    for bad in [r#"{"ticker":"AAPL""#, r#"{"ticker" "AAPL"}"#, r#"{"a":1 "b":2}"#, "{{ticker}}"] {
        assert!(!whole(Rule::object, bad), "{bad}");
    }
    assert!(whole(Rule::member, "\"price\": 190.25"));
    assert!(!whole(Rule::member, "\"price\" 190.25"));
    assert!(whole(Rule::array, "[1, [2, 3], {\"a\": \"]\"}]"));
    assert!(!whole(Rule::array, "[1, 2"));
    assert!(whole(Rule::scalar, "190.25"));
    assert!(whole(Rule::scalar, "{{close}}"));
    assert_eq!(prefix(Rule::scalar, "null}"), Some("null"));
    assert!(!whole(Rule::scalar, ""));
}

#[test]
fn rule_pair_and_text_value() {
    parses_to! {
        parser: AlertParser, input: "ticker = AAPL", rule: Rule::pair,
        tokens: [pair(0, 13, [bare_key(0, 6), text_value(9, 13)])]
    };
    parses_to! {
        parser: AlertParser, input: "\"ticker\": \"AAPL\"", rule: Rule::pair,
        tokens: [pair(0, 16, [quoted(0, 8, [dq_inner(1, 7)]), quoted(10, 16, [dq_inner(11, 15)])])]
    };
    // An unquoted value stops at a separator or at the next `key=` on the line.
    assert_eq!(prefix(Rule::pair, "comment=RSI long signal;x=1"), Some("comment=RSI long signal"));
    assert_eq!(prefix(Rule::pair, "ticker=AAPL action=buy"), Some("ticker=AAPL"));
    assert_eq!(prefix(Rule::pair, "ticker: AAPL action: buy"), Some("ticker: AAPL"));
    assert_eq!(prefix(Rule::pair, "ticker: NASDAQ:AAPL\r\n"), Some("ticker: NASDAQ:AAPL"));
    assert_eq!(prefix(Rule::pair, "ticker=AAPL\\naction=buy"), Some("ticker=AAPL"));
    assert_eq!(prefix(Rule::text_value, "AAPL  ;"), Some("AAPL"));
    for bad in ["ticker", "=AAPL", "1x=2", "buy long AAPL"] {
        assert!(!whole(Rule::pair, bad), "{bad}");
    }
}

#[test]
fn rule_pairs_body() {
    assert!(whole(Rule::pairs_body, "ticker=AAPL;action=buy"));
    assert!(whole(Rule::pairs_body, "ticker: AAPL\r\naction: buy\r\n"));
    assert!(whole(Rule::pairs_body, "ticker=AAPL action=buy"));
    assert!(whole(Rule::pairs_body, "\n;ticker=AAPL\\naction=buy\\n"));
    // Every item must be a pair.
    assert!(!whole(Rule::pairs_body, "ticker=AAPL;buy;long"));
    assert!(!whole(Rule::pairs_body, "buy long AAPL"));
}

#[test]
fn rule_keywords() {
    for (rule, words) in [
        (Rule::direction, &["long", "SHORT", "Bullish", "bearish"][..]),
        (Rule::action, &["OPEN", "close", "Modify", "cancel", "buy", "SELL", "entry", "exit"][..]),
        (Rule::order_type, &["market", "LIMIT"][..]),
        (Rule::duration, &["day", "GTC", "fok"][..]),
    ] {
        for w in words {
            assert!(whole(rule, w), "{rule:?} {w}");
            let longer = format!("{w}er");
            assert!(AlertParser::parse(rule, &longer).is_err(), "{rule:?} must not match {longer}");
        }
    }
    fails_with! { parser: AlertParser, input: "longer", rule: Rule::direction, positives: vec![Rule::direction], negatives: vec![], pos: 0 };
    fails_with! { parser: AlertParser, input: "buy_it", rule: Rule::action, positives: vec![Rule::action], negatives: vec![], pos: 0 };
    assert!(AlertParser::parse(Rule::duration, "today").is_err());
}

#[test]
fn rule_price() {
    for ok in ["@ 190.25", "@190.25", "at 190.25", "AT 65000.5", "@ -1.25"] {
        assert!(whole(Rule::price, ok), "{ok}");
    }
    for bad in ["@", "at", "at190", "@ x", "atom 1", "@ 1x"] {
        assert!(!whole(Rule::price, bad), "{bad}");
    }
    parses_to! {
        parser: AlertParser, input: "@ 1.5", rule: Rule::price,
        tokens: [price(0, 5, [number(2, 5)])]
    };
}

#[test]
fn rule_eq_pair_label_braced_other() {
    assert!(whole(Rule::eq_pair, "id=abc"));
    assert!(whole(Rule::eq_pair, "price = 190.25"));
    assert!(whole(Rule::eq_pair, "\"message_id\"=\"a b\""));
    assert_eq!(prefix(Rule::eq_pair, "id=abc long"), Some("id=abc"));
    assert!(!whole(Rule::eq_pair, "id"));
    assert!(!whole(Rule::eq_pair, "=abc"));

    assert!(whole(Rule::label, "message_id"));
    assert!(whole(Rule::label, "NASDAQ:TSLA"));
    assert!(!whole(Rule::label, "a b"));

    for ok in ["{{ticker}}", "NASDAQ:{{ticker}}", "x}", "{"] {
        assert!(whole(Rule::braced, ok), "{ok}");
    }
    assert!(!whole(Rule::braced, "AAPL"));
    assert_eq!(prefix(Rule::braced, "{{a}} b"), Some("{{a}}"));

    assert!(whole(Rule::other, "🚀"));
    assert!(whole(Rule::other, "$AAPL"));
    assert!(!whole(Rule::other, ""));
    assert_eq!(prefix(Rule::other, "(v2) x"), Some("(v2)"));
}

#[test]
fn rule_words_body() {
    parses_to! {
        parser: AlertParser, input: "buy long NASDAQ:AAPL @ 1.5", rule: Rule::words_body,
        tokens: [words_body(0, 26, [
            action(0, 3), direction(4, 8), symbol(9, 20), price(21, 26, [number(23, 26)]), EOI(26, 26)
        ])]
    };
    parses_to! {
        parser: AlertParser, input: "TSLA: sell, short.", rule: Rule::words_body,
        tokens: [words_body(0, 18, [label(0, 4), action(6, 10), direction(12, 17), EOI(18, 18)])]
    };
    // `longer` is a symbol, not a direction word.
    parses_to! {
        parser: AlertParser, input: "longer", rule: Rule::words_body,
        tokens: [words_body(0, 6, [symbol(0, 6), EOI(6, 6)])]
    };
}

#[test]
fn top_rules_consume_everything() {
    // Each top rule ends in EOI: trailing text the shape does not allow is a failure, not ignored.
    let fill = "order buy @ 1 filled on AAPL. New strategy position is 1";
    assert!(AlertParser::parse(Rule::fill_body, &format!("{fill}\r\n")).is_ok());
    assert!(AlertParser::parse(Rule::fill_body, &format!("{fill} and then some")).is_err());
    assert!(AlertParser::parse(Rule::fill, &format!("{fill} and then some")).is_ok(), "without EOI it would pass");

    assert!(AlertParser::parse(Rule::json_body, "{\"a\":1}\n").is_ok());
    fails_with! {
        parser: AlertParser, input: "{\"a\":1} x", rule: Rule::json_body,
        positives: vec![Rule::EOI], negatives: vec![], pos: 8
    };
    assert!(AlertParser::parse(Rule::pairs_body, "ticker=AAPL;action=buy\n").is_ok());
    assert!(AlertParser::parse(Rule::pairs_body, "ticker=AAPL;buy long").is_err());

    // Free words read any text to its end.
    for s in ["buy long AAPL", "", " ; ", "🚀 (v2) \\n x", "a\u{0}b", "{{"] {
        let p = AlertParser::parse(Rule::words_body, s).unwrap();
        assert_eq!(p.as_str(), s);
        assert_eq!(p.flatten().last().map(|p| p.as_rule()), Some(Rule::EOI));
    }
}

// ── Routing and the walk ────────────────────────────────────────────────────

#[test]
fn routes() {
    assert_eq!(route("My (v2): RSI: order buy @ 1 filled on AAPL. New strategy position is 1").kind(), "fill");
    assert_eq!(route("order buy @ 1 filled on AAPL. New strategy position is 1").kind(), "fill");
    // Not a fill (no `filled`): a pairs attempt, which falls back to words when no key is a field.
    assert_eq!(route("Note: order buy more").kind(), "pairs");
    assert_eq!(route(" {\"ticker\":\"AAPL\"}").kind(), "json");
    assert_eq!(route("{{ticker}} buy").kind(), "words");
    assert_eq!(route("ticker=AAPL").kind(), "pairs");
    assert_eq!(route("ticker: AAPL").kind(), "pairs");
    assert_eq!(route("ticker:AAPL").kind(), "pairs");
    assert_eq!(route("“ticker”: “AAPL”").kind(), "pairs");
    assert_eq!(route("NASDAQ:AAPL buy long").kind(), "words");
    assert_eq!(route("buy long AAPL").kind(), "words");
}

impl Route<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Route::Fill(_) => "fill",
            Route::Json => "json",
            Route::Pairs => "pairs",
            Route::Words => "words",
        }
    }
}

fn pieces(rule: Rule, text: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    from_pairs(AlertParser::parse(rule, text).unwrap(), &mut |p| {
        out.push(p);
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn walk_types_every_piece() {
    assert_eq!(
        pieces(Rule::words_body, "Bullish buy AAPL @ 1 limit gtc 7 {{x}} 🚀 id: abc"),
        vec![
            Piece::Word(Word::Direction("long")),
            Piece::Word(Word::Action("buy")),
            Piece::Word(Word::Symbol("AAPL")),
            Piece::Word(Word::Price("1")),
            Piece::Word(Word::OrderType("limit")),
            Piece::Word(Word::Duration("gtc")),
            Piece::Word(Word::Number("7")),
            Piece::Word(Word::Braced("{{x}}")),
            Piece::Word(Word::Other("🚀")),
            Piece::Label("id"),
            Piece::Word(Word::Symbol("abc")),
        ]
    );
    assert_eq!(
        pieces(Rule::json_body, r#"{"ticker":"A\"B","x":null,"y":true,"legs":[],"metadata":{"message_id":"m","z":1}}"#),
        vec![
            Piece::Pair("ticker".into(), Value::Text("A\"B".into())),
            Piece::Pair("x".into(), Value::Null),
            Piece::Pair("y".into(), Value::Bool(true)),
            Piece::Legs(Vec::new()),
            Piece::Pair("metadata.message_id".into(), Value::Text("m".into())),
        ]
    );
    assert_eq!(
        pieces(Rule::fill_body, "order sell @ 2 filled on AAPL. New strategy position is {{p}}"),
        vec![Piece::Fill(Fill {
            side: Slot::Value("sell"),
            quantity: Slot::Value("2"),
            instrument: Slot::Value("AAPL"),
            position: Slot::Placeholder("{{p}}"),
        })]
    );
}

#[test]
fn unescapes_json_strings() {
    assert_eq!(unescape(r#"a\"b\\c\/d\n"#), "a\"b\\c/d\n");
    assert_eq!(unescape(r"\u00e9\ud83d\ude80"), "é🚀");
    assert_eq!(unescape(r"\ud83d"), "\u{FFFD}");
    assert_eq!(unescape(r"\uzz"), "\\uzz");
    assert_eq!(unescape("end\\"), "end\\");
}

// ── Shapes end to end ───────────────────────────────────────────────────────

fn one(text: &str) -> crate::alert::Alert {
    let mut a = parse(text).unwrap_or_else(|e| panic!("{text:?}: {e}"));
    assert_eq!(a.len(), 1, "{text:?}");
    a.remove(0)
}

#[test]
fn free_words_in_any_order() {
    for text in ["buy long AAPL", "AAPL buy long", "long AAPL BUY", "NASDAQ:AAPL long buy."] {
        let a = one(text);
        assert_eq!(
            (a.action, a.direction, a.instrument.as_str()),
            (ActionKind::Word(ActionWord::Buy), Some(Direction::Long), "AAPL")
        );
    }
    let a = one("AAPL long OPEN @ 190.25 limit gtc");
    assert_eq!(a.action, ActionKind::Canonical(Action::Open));
    assert_eq!(a.price.map(|p| p.to_string()).as_deref(), Some("190.25"));
}

#[test]
fn fill_reversal_is_close_then_open() {
    let a =
        parse("My Strat (v2), test: RSI: order sell @ 2 filled on NASDAQ:AAPL. New strategy position is -1").unwrap();
    assert_eq!(a.len(), 2);
    assert_eq!((a[0].action, a[0].direction), (ActionKind::Canonical(Action::Close), Some(Direction::Long)));
    assert_eq!((a[1].action, a[1].direction), (ActionKind::Canonical(Action::Open), Some(Direction::Short)));
    assert!(a.iter().all(|x| x.price.is_none() && x.quantity.is_none()));
}

#[test]
fn refusals_are_not_an_alert() {
    for text in ["EURUSD Less Than 1.06304", "AAPL Crossing 190", "buy long AAPL TSLA", "buy long AAPL 190"] {
        assert!(matches!(parse(text), Err(ParseError::NotAnAlert(_))), "{text}");
    }
    assert_eq!(parse(" \r\n\\n "), Err(ParseError::Empty));
    assert_eq!(parse("buy long SPX legs:"), Err(ParseError::LegsNeedJson));
    assert_eq!(parse("buy long SPX legs: x"), Err(ParseError::LegsNeedJson));
}

#[test]
fn json_with_legs_sent_as_text_keeps_them() {
    // TradingView sends text/plain when the message ends with a newline.
    let bodies = [
        r#"{"ticker":"SPX","action":"OPEN","direction":"LONG","price":2.35,"legs":[{"symbol":"SPXW240119C04500000","action":"buy_to_open","price":3.1},{"side":"call","action":"sell_to_open","strike":"4510","expiration":"2024-01-19","live_price":0.5}],"metadata":{"message_id":"m-1"}}"#,
        "{\n  \"ticker\": \"SPY\",\n  \"action\": \"buy\",\n  \"legs\": [\n    {\"symbol\": \"SPY 240119P445\", \"action\": \"buy_to_open\"}\n  ]\n}",
    ];
    for body in bodies {
        let json = crate::alert::parse(body.as_bytes(), Some("application/json")).unwrap();
        let text = crate::alert::parse(format!("{body}\n").as_bytes(), Some("text/plain")).unwrap();
        assert!(!json[0].legs.is_empty(), "{body}");
        assert_eq!(text, json, "{body}");
    }
}

// ── Bounded work ────────────────────────────────────────────────────────────

/// The engine's largest body (its `MAX_BODY`, on a floor above this one).
const SIZE_LIMIT: usize = 256 * 1024;

/// `unit` repeated to the engine's largest body.
fn at_size_limit(unit: &str) -> String {
    unit.repeat(SIZE_LIMIT / unit.len())
}

fn refused_as_too_long(text: &str) -> bool {
    matches!(parse(text), Err(ParseError::NotAnAlert(m)) if m.contains(&format!("longer than {MAX_WORDS} words")))
}

#[test]
fn hostile_bodies_at_the_size_limit_are_refused_before_pest() {
    for unit in [
        "k: ",
        "k=v ",
        "k=v;",
        "@ ",
        "[",
        "{\"a\":",
        "a ",
        "order buy @ ",
        "=",
        "é 😀 ",
        "k=\"v ",
        "{{",
        "a:",
        "a)",
        "buy long AAPL ",
        "1",
        "a",
    ] {
        assert!(refused_as_too_long(&at_size_limit(unit)), "{unit:?}");
    }
    // Long runs of blanks weigh too, wherever they are.
    let blanks = " ".repeat(100_000);
    for text in [format!("buy a{blanks}b"), format!("ticker=a{blanks} action=buy"), format!("{{\"a\":{blanks}1}}")] {
        assert!(refused_as_too_long(&text), "{}", &text[..10]);
    }
    // A blank body is empty however long it is.
    assert_eq!(parse(&at_size_limit(" ")), Err(ParseError::Empty));
    assert_eq!(parse(&at_size_limit("\n")), Err(ParseError::Empty));
}

#[test]
fn ordinary_alerts_are_far_under_the_budget() {
    let legs = r#"{
        "ticker": "SPX", "action": "OPEN", "direction": "LONG", "price": 1.25,
        "legs": [
            {"symbol": "SPX   261218C06000000", "side": "CALL", "action": "buy_to_open", "strike": 6000, "expiration": "2026-12-18"},
            {"symbol": "SPX   261218C06050000", "side": "CALL", "action": "sell_to_open", "strike": 6050, "expiration": "2026-12-18"},
            {"symbol": "SPX   261218P05900000", "side": "PUT", "action": "sell_to_open", "strike": 5900, "expiration": "2026-12-18"},
            {"symbol": "SPX   261218P05850000", "side": "PUT", "action": "buy_to_open", "strike": 5850, "expiration": "2026-12-18"}
        ],
        "metadata": {"message_id": "iron-condor-2026-11-22"}
    }"#;
    assert!(prescan::weigh(legs, usize::MAX) < prescan::BUDGET / 2, "{}", prescan::weigh(legs, usize::MAX));
    assert_eq!(parse(legs).map(|a| a[0].legs.len()), Ok(4));
    let comment =
        format!("ticker=AAPL;action=buy;comment=\"{}\"", "RSI crossed above seventy on the hourly. ".repeat(15));
    assert!(!refused_as_too_long(&comment));
    assert!(parse(&comment).is_ok());
}

/// The pre-scan's weight bounds the items pest produces, whatever the text: this is what
/// keeps pest's work proportional to a budget rather than to the text.
#[test]
fn the_weight_bounds_what_pest_produces() {
    let units = [
        "k: ",
        "k=v ",
        "@ ",
        "@1 ",
        "[",
        "]",
        "{",
        "}",
        "\"a\":",
        "a ",
        "order buy @ 1 ",
        "=",
        "é",
        "😀",
        "k=\"v\" ",
        "{{x}} ",
        "{{",
        "a:",
        "a)",
        ".",
        "!",
        "?",
        "1.5 ",
        "NASDAQ:AAPL ",
        "id=x ",
        "  ",
        "\\n",
        ";",
        "\u{A0}",
        "x",
        "long ",
    ];
    // A deterministic mix of every unit, in many orders and lengths.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..300 {
        let mut text = String::new();
        let len = (seed % 200) as usize;
        for _ in 0..len {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            text.push_str(units[(seed % units.len() as u64) as usize]);
        }
        let weight = prescan::weigh(&text, usize::MAX);
        for rule in [Rule::words_body, Rule::pairs_body, Rule::json_body] {
            if let Ok(pairs) = AlertParser::parse(rule, &text) {
                let produced = pairs.flatten().count();
                assert!(produced <= 2 * weight + 2, "{rule:?} made {produced} pairs from weight {weight}: {text:?}");
            }
        }
    }
}

#[test]
fn the_fuzz_regression_is_refused_quickly_and_cleanly() {
    let body = include_str!("../../../fuzz/regressions/parse_text/timeout-4e0e79cfddca633c36f128f2d901b1d93353d6d4");
    let err = parse(body).unwrap_err().to_string();
    assert!(!err.contains("too complex"), "{err}");
    assert!(prescan::weigh(body, usize::MAX) <= prescan::BUDGET);
}

mod hand_paths {
    use super::super::{parse, parse_with};
    use proptest::prelude::*;

    const KEYS: [&str; 16] = [
        "ticker",
        "action",
        "direction",
        "price",
        "order_type",
        "duration",
        "message_id",
        "legs",
        "qty",
        "note",
        "TICKER",
        "strategy.order.action",
        "stop_loss",
        "_x",
        "1k",
        "id",
    ];
    const VALUES: [&str; 26] = [
        "AAPL",
        "NASDAQ:AAPL",
        "buy",
        "sell",
        "long",
        "SHORT",
        "OPEN",
        "190.25",
        "-1",
        "limit",
        "gtc",
        "abc-123",
        "{{ticker}}",
        "",
        "a b",
        "\"q\"",
        "x=y",
        "BTC/USD",
        "NQ1!",
        "flat",
        "0",
        "é",
        "RSI",
        "10",
        "a\\nb",
        "true",
    ];

    fn text() -> impl Strategy<Value = String> {
        let item = (
            prop::sample::select(KEYS.to_vec()),
            prop::sample::select(vec!["=", "=", "=", ":", " = ", ": "]),
            prop::sample::select(VALUES.to_vec()),
        );
        let sep = prop::sample::select(vec![";", ";", ";", ",", "\n", " ", ";;", "; "]);
        (prop::collection::vec((item, sep), 1..8), prop::sample::select(vec!["", "", ";", " x"])).prop_map(
            |(items, end)| {
                let mut t = String::new();
                for (i, ((k, a, v), sep)) in items.iter().enumerate() {
                    if i > 0 {
                        t.push_str(sep);
                    }
                    t.push_str(&format!("{k}{a}{v}"));
                }
                t + end
            },
        )
    }

    #[test]
    fn the_usual_pairs_take_the_hand_path_and_agree() {
        for t in ["ticker=AAPL;action=buy;direction=long", "ticker=AAPL;note=x", "note=x;qty=1", "legs=x;ticker=A"] {
            assert_eq!(parse(t), parse_with(t, false), "{t}");
        }
        assert!(super::super::plain_pairs("ticker=AAPL;action=buy").is_some());
        assert!(super::super::plain_pairs("note=x;qty2=1").is_none(), "no field named: free words decide");
        assert!(super::super::plain_pairs("ticker=AAPL; action=buy").is_none());
    }

    const WORDS: [&str; 56] = [
        "buy",
        "SELL",
        "long",
        "Short",
        "bullish",
        "bearish",
        "open",
        "CLOSE",
        "modify",
        "cancel",
        "entry",
        "exit",
        "market",
        "limit",
        "day",
        "GTC",
        "fok",
        "AAPL",
        "msft",
        "NQ1",
        "600519",
        "1e5",
        "12e",
        "1E2",
        "at",
        "AT",
        "longer",
        "buyer",
        "x",
        "0",
        "BTCUSD",
        "e5",
        "@",
        "@",
        "190.25",
        "NASDAQ:AAPL",
        "id=abc-123",
        "price=1",
        "long=x",
        "a:b:c",
        "1:2",
        "at:x",
        "x=",
        "=x",
        "k=a:b",
        "ticker:AAPL",
        "_k=v",
        "2k=v",
        "id:abc",
        "190.",
        ".5",
        "1.2.3",
        "message_id=m1",
        "legs=x",
        "stop_loss=1",
        "order_type=limit",
    ];

    #[test]
    fn the_usual_words_take_the_hand_path_and_agree() {
        for t in [
            "buy long AAPL",
            "AAPL MSFT buy",
            "sell",
            "AAPL",
            "buy long AAPL 12",
            "exit short NQ1 gtc limit",
            "NASDAQ:AAPL long OPEN @ 190.25 limit gtc id=abc-123",
        ] {
            assert!(super::super::plain_words(t).is_some(), "{t}");
            assert_eq!(parse(t), parse_with(t, false), "{t}");
        }
        for t in ["buy at 12", "buy  long", "buy long AAPL.", "buy @ x", "buy @", "buy @12", "a=\"b\""] {
            assert!(super::super::plain_words(t).is_none(), "{t}");
        }
    }

    #[test]
    fn the_usual_fill_takes_the_hand_path_and_agrees() {
        for t in [
            "My Strategy (20, 50): order sell @ 2 filled on NASDAQ:AAPL. New strategy position is -1",
            "S: order BUY @ 0.5 filled on BTC/USD. new strategy position is 0.5.",
            "order buy @ 1 filled on BINANCE:BTCUSDT.P. New strategy position is 1",
        ] {
            let tail = &t[t.find("order").unwrap()..];
            assert!(super::super::plain_fill(tail).is_some(), "{t}");
            assert_eq!(parse(t), parse_with(t, false), "{t}");
        }
    }

    #[test]
    fn the_usual_object_takes_the_hand_path_and_agrees() {
        for t in [
            r#"{"ticker": "AAPL", "action": "buy", "price": 190.25, "metadata": {"message_id": "m1"}}"#,
            r#"{"ticker":"AAPL","action":"buy"}"#,
            r#"{ "ticker" : "AAPL" , "action" : "sell" , "x": {"a": 1} }"#,
        ] {
            assert!(super::super::plain_object(t).is_some(), "{t}");
            assert_eq!(parse(t), parse_with(t, false), "{t}");
        }
    }

    const MEMBER_KEYS: [&str; 14] = [
        "\"ticker\"",
        "\"action\"",
        "\"direction\"",
        "\"price\"",
        "\"metadata\"",
        "\"message_id\"",
        "\"legs\"",
        "\" legs\"",
        "\"Metadata\"",
        "\"x\"",
        "ticker",
        "\"a b\"",
        "\"order_type\"",
        "\"stop_loss\"",
    ];
    const MEMBER_VALUES: [&str; 26] = [
        "\"AAPL\"",
        "\"NASDAQ:AAPL\"",
        "\"buy\"",
        "\"long\"",
        "190.25",
        "-1",
        "null",
        "true",
        "false",
        "NULL",
        "\"\"",
        "\"a\\\"b\"",
        "{}",
        "{\"message_id\": \"m1\"}",
        "{\"message_id\": 5, \"a\": null}",
        "{\"a\": {}}",
        "[]",
        "[{\"side\": \"call\"}]",
        "AAPL",
        "{{ticker}}",
        "\"{{ticker}}\"",
        "1e5",
        "\"limit\"",
        "\"é\"",
        "a:b",
        "\"0\"",
    ];

    fn object_text() -> impl Strategy<Value = String> {
        let member = (
            prop::sample::select(MEMBER_KEYS.to_vec()),
            prop::sample::select(vec![":", ": ", " : ", "="]),
            prop::sample::select(MEMBER_VALUES.to_vec()),
        );
        (
            prop::collection::vec(member, 0..7),
            prop::sample::select(vec![",", ", ", " , ", ";", ",,"]),
            prop::sample::select(vec!["{", "{ ", "{\n"]),
            prop::sample::select(vec!["}", " }", ",}", "} x"]),
        )
            .prop_map(|(members, sep, open, close)| {
                let inner: Vec<String> = members.iter().map(|(k, a, v)| format!("{k}{a}{v}")).collect();
                format!("{open}{}{close}", inner.join(sep))
            })
    }

    fn fill_text() -> impl Strategy<Value = String> {
        let pick = |v: Vec<&'static str>| prop::sample::select(v);
        (
            pick(vec!["My Strategy (20, 50): ", "T: ", "", "a: b: ", "x; "]),
            pick(vec!["order ", "ORDER ", "order  ", "orders "]),
            pick(vec!["buy", "sell", "SELL", "Buy", "buyx", "{{strategy.order.action}}"]),
            pick(vec![" @ ", " @", "@ "]),
            pick(vec!["1", "2", "0.5", "0", "1.", ".5", "1e2", "-1", "{{q}}", "10.25"]),
            pick(vec![" filled on ", " FILLED ON ", " filled  on "]),
            pick(vec![
                "NASDAQ:AAPL",
                "AAPL",
                "BTC/USD",
                "BTCUSDT.P",
                "NQ1!",
                "A:",
                "BRK.B",
                "a-b-",
                "^SPX",
                ":X",
                "AAPL.",
            ]),
            pick(vec![". New strategy position is ", ". new STRATEGY position is ", " New strategy position is "]),
            pick(vec!["-1", "1", "0", "+2", "1.5", "-0.5", "1e3", "-", "{{p}}"]),
            pick(vec!["", ".", "..", " ", ";", "x"]),
        )
            .prop_map(|(a, b, c, d, e, f, g, h, i, j)| [a, b, c, d, e, f, g, h, i, j].concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn objects_answer_as_the_grammar_does(t in object_text()) {
            prop_assert_eq!(parse(&t), parse_with(&t, false), "{:?}", t);
        }

        #[test]
        fn fills_answer_as_the_grammar_does(t in fill_text()) {
            prop_assert_eq!(parse(&t), parse_with(&t, false), "{:?}", t);
        }

        #[test]
        fn plain_words_answer_as_the_grammar_does(
            words in prop::collection::vec(prop::sample::select(WORDS.to_vec()), 1..8),
            sep in prop::sample::select(vec![" ", " ", " ", "  ", ";", "\t"]),
        ) {
            let t = words.join(sep);
            prop_assert_eq!(parse(&t), parse_with(&t, false), "{:?}", t);
        }

        #[test]
        fn hand_paths_answer_as_the_grammar_does(t in text()) {
            prop_assert_eq!(parse(&t), parse_with(&t, false), "{:?}", t);
        }

        #[test]
        fn plain_pairs_answer_as_the_grammar_does(
            items in prop::collection::vec((prop::sample::select(KEYS.to_vec()), prop::sample::select(VALUES.to_vec())), 1..10)
        ) {
            // The hand path's own shape, with now and then a value it must leave to pest.
            let t = items.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(";");
            prop_assert_eq!(parse(&t), parse_with(&t, false), "{:?}", t);
        }
    }
}

/// A cashtag or a symbol in quotes, brackets or bold names the instrument: skipped, another word became it
/// (`Buy $TSLA now` traded NOW, ServiceNow). Such a word is now a candidate like any symbol, so a second word that
/// could be the instrument refuses the text instead of trading it.
#[test]
fn wrapped_symbols_are_instrument_candidates() {
    for (text, symbol) in [
        ("Buy $TSLA", "TSLA"),
        ("buy (AAPL) long", "AAPL"),
        ("Buy **NVDA** @ 120", "NVDA"),
        ("sell \"BRK.B\"", "BRK.B"),
    ] {
        assert_eq!(one(text).instrument, symbol, "{text}");
    }
    // An exchange prefix, as the grammar reads a symbol: skipped, `Buy **NASDAQ:TSLA** now` bought NOW. A time
    // in marks still says nothing, and a field pair in marks is a pair.
    assert_eq!(one("Buy **NASDAQ:TSLA**").instrument, "TSLA");
    for text in ["Buy AAPL [14:30Z]", "Buy AAPL (14:30Z)", "Buy AAPL [2024-01-15T14:30Z]", "Buy AAPL (ticker:AAPL)"] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
    for text in [
        "Buy $TSLA now",
        "Buy **AAPL** now",
        "Buy (TSLA) now",
        "Buy **NASDAQ:TSLA** now",
        "Buy (NASDAQ:TSLA) now",
        "Buy \"NASDAQ:TSLA\" now",
        "Buy $NASDAQ:TSLA now",
        "Close long [NYSE:F] now",
        "Buy [BINANCE:BTCUSDT] now",
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("more than one word could be the instrument"), "{text}: {e}");
    }
    // A handle, an amount and a wrapped keyword stay what they were.
    assert_eq!(one("@trader1 buy AAPL").instrument, "AAPL");
    assert!(parse("$5000 buy AAPL").unwrap_err().to_string().contains("not marked as a price"));
    assert_eq!(one("(limit) buy AAPL").instrument, "AAPL");
}

/// A keyword in bold, brackets or quotes, or before a comma, was skipped: `Close **SHORT** AAPL` closed whichever
/// side was held, and `(limit) buy AAPL @ 190` went out at market.
#[test]
fn wrapped_keywords_say_what_they_say() {
    use crate::model::{Duration, OrderType};
    for text in ["Close **SHORT** AAPL", "close \"short\" AAPL", "Close (short) AAPL", "close AAPL short."] {
        let a = one(text);
        assert_eq!((a.instrument.as_str(), a.direction), ("AAPL", Some(Direction::Short)), "{text}");
    }
    let a = one("(limit) buy AAPL @ 190");
    assert_eq!((a.order_type, a.price.map(|p| p.to_string())), (Some(OrderType::Limit), Some("190".into())));
    assert_eq!(one("buy AAPL `gtc`").duration, Some(Duration::Gtc));
    // Two directions, one of them wrapped, disagree as two plain ones do.
    assert!(parse("Sell (long) AAPL short").is_err());
    // A number in marks is a tag, as before.
    assert_eq!(one("buy long AAPL (#1)").instrument, "AAPL");
}

/// A number with a unit (`50%`, `5000$`) was skipped: `sell AAPL 50%` closed the whole position. Like a bare
/// number, it is refused.
#[test]
fn numbers_with_a_unit_are_refused_as_numbers_not_marked_as_a_price() {
    for text in [
        "sell AAPL 50%",
        "close 25% TSLA",
        "buy AAPL 5000$",
        "buy AAPL 500\u{20ac}",
        "sell AAPL -2",
        "buy AAPL +5%",
        "sell AAPL 50%.",
        "close TSLA 25%!",
        "buy AAPL 5000$.",
        "sell AAPL 50%: target hit",
        "sell AAPL **50%**",
        "sell AAPL (50%)",
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("not marked as a price"), "{text}: {e}");
    }
    // A time is no amount: TradingView's {{timenow}} in a text template still trades.
    for text in ["buy AAPL 2024-01-15T14:30:00Z", "buy AAPL 10:30:00"] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
}

/// Words free words could not read were skipped however much they said: a keyword in typographic quotes lost the
/// side (`Close “SHORT” AAPL` closed whichever was held), a number inside other marks lost a stop, a target or a
/// part of the position (`TP@200 SL@180`, `sell AAPL 50％`, `Sell ½ AAPL`), a contraction lost its negation
/// (`Don't buy AAPL` bought), and `close all` closed Allstate. Each now reads or refuses; times, dates, tags,
/// handles and links still say nothing.
#[test]
fn words_that_say_something_are_read_or_refused_never_skipped() {
    use crate::model::OrderType;
    for (text, direction) in [
        ("Close \u{201c}SHORT\u{201d} AAPL", Direction::Short),
        ("Close \u{2018}short\u{2019} AAPL", Direction::Short),
        ("close \u{ab}short\u{bb} AAPL", Direction::Short),
        ("Close AAPL short\u{2026}", Direction::Short),
        ("close AAPL short\u{3000}", Direction::Short),
    ] {
        assert_eq!(one(text).direction, Some(direction), "{text}");
    }
    assert_eq!(one("Buy AAPL \u{201c}limit\u{201d} @ 190").order_type, Some(OrderType::Limit));
    let e = parse("Buy \u{201c}TSLA\u{201d} now").unwrap_err().to_string();
    assert!(e.contains("more than one word could be the instrument"), "{e}");
    for text in [
        "BUY AAPL @190 TP@200 SL@180",
        "Buy AAPL @ 190 (SL:180)",
        "Buy AAPL @ 190 [TP=200]",
        "Sell \u{bd} AAPL",
        "sell AAPL 50\u{ff05}",
        "buy AAPL \u{20ac}5000",
        "buy AAPL @ \u{ff11}\u{ff19}\u{ff10}",
        "Don't buy AAPL",
        "Close AAPL, don\u{2019}t short",
        "close all",
        "cancel ALL long",
    ] {
        assert!(parse(text).is_err(), "{text}: {:?}", parse(text));
    }
    for (text, symbol) in [
        ("buy AAPL 10:30:00", "AAPL"),
        ("buy long AAPL (#1)", "AAPL"),
        ("@trader1 buy AAPL", "AAPL"),
        ("buy AAPL 2024-01-15T14:30:00Z", "AAPL"),
        // A time in marks, as a template's `[{{timenow}}]` writes it, and apostrophes that are no negation.
        ("[2024-01-15T14:30:00Z] buy AAPL", "AAPL"),
        ("buy AAPL (10:30:00)", "AAPL"),
        ("buy AAPL \"2024-01-15T14:30:00Z\"", "AAPL"),
        ("buy AAPL **10:30:00**", "AAPL"),
        ("Let's buy AAPL", "AAPL"),
        ("It\u{2019}s buy long AAPL", "AAPL"),
    ] {
        assert_eq!(one(text).instrument, symbol, "{text}");
    }
}

/// 2024-01-15T14:30:00Z.
const SENT: i64 = 1_705_329_000_000;

/// A template's bare `{{timenow}}` (`buy AAPL 2024-01-15T14:30:00Z`, `[{{timenow}}]`) was recognised as a time and
/// dropped: the alert had no time, and the strategy's `max_alert_age` let it trade an hour late. One full date-time
/// with its zone is the alert's time, in marks or not, written once or more.
#[test]
fn one_zoned_date_time_in_free_words_is_the_alerts_time() {
    for text in [
        "buy AAPL 2024-01-15T14:30:00Z",
        "buy AAPL [2024-01-15T14:30:00Z]",
        "[2024-01-15T14:30:00Z] buy AAPL",
        "buy AAPL \"2024-01-15T14:30:00Z\"",
        "buy AAPL (2024-01-15T15:30:00+01:00)",
        "buy AAPL 2024-01-15T14:30:00.000Z.",
        "buy AAPL [2024-01-15T14:30Z]",
        "buy AAPL 2024-01-15T14:30:00Z [2024-01-15T15:30:00+01:00]",
    ] {
        let a = one(text);
        assert_eq!((a.instrument.as_str(), a.sent_at_ms, a.unread_time), ("AAPL", Some(SENT), None), "{text}");
    }
}

/// Times in free words that name no one instant (two instants, a time without a date or a zone, a date alone) are
/// kept as a time that reads as none, so that `max_alert_age` refuses the alert rather than pass it unchecked.
#[test]
fn times_in_free_words_naming_no_one_instant_read_as_none() {
    for (text, value) in [
        ("buy AAPL 2024-01-15T14:30:00Z 2024-01-15T15:30:00Z", "2024-01-15T14:30:00Z or 2024-01-15T15:30:00Z"),
        ("buy AAPL 10:30:00", "10:30:00 (no date)"),
        ("Buy AAPL [14:30Z]", "14:30Z (no date)"),
        ("buy AAPL (2024-01-15)", "2024-01-15 (no time)"),
        ("buy AAPL 2024-01-15T14:30:00", "2024-01-15T14:30:00 (no zone)"),
        ("buy AAPL (01/15/2024T14:30Z)", "01/15/2024T14:30Z (no ISO 8601 date)"),
    ] {
        let a = one(text);
        assert_eq!(a.instrument, "AAPL", "{text}");
        assert_eq!(a.sent_at_ms, None, "{text}");
        let u = a.unread_time.unwrap_or_else(|| panic!("{text}: no unread time"));
        assert_eq!((u.key.as_str(), crate::alert::time::parse_ms(&u.value)), ("time", None), "{text}");
        assert!(u.value.starts_with(&value[..value.len().min(40)]), "{text}: {}", u.value);
    }
    // Times inside other words (ids, TV-Hub's `{{ticker}}-{{timenow}}`) and a `time=` pair are read as before.
    let a = one("buy AAPL id=tv-2024-01-15T14:30:00Z");
    assert_eq!((a.sent_at_ms, a.unread_time), (None, None));
    let a = one("buy AAPL time=2024-01-15T14:30:00Z");
    assert_eq!(a.sent_at_ms, Some(SENT));
    let a = one("buy AAPL timenow=2024-01-15T14:30:00Z 10:30:00");
    assert_eq!((a.sent_at_ms, a.unread_time), (Some(SENT), None));
}

/// A date-time in a fill message's title (`{{timenow}}: order …`, `My strategy [{{timenow}}]: order …`) was dropped
/// with the title: the fill had no time, and `max_alert_age` let it trade an hour late. A full date-time there is
/// read as in free words; a date or a clock alone, or numbers, are part of the strategy's name, as before.
#[test]
fn a_date_time_in_a_fill_messages_title_is_its_time() {
    const FILL: &str = ": order buy @ 1 filled on AAPL. New strategy position is 1";
    for title in ["2024-01-15T14:30:00Z", "My strategy [2024-01-15T14:30:00Z]", "Bot (2024-01-15T15:30:00+01:00) v2"] {
        let text = format!("{title}{FILL}");
        let a = one(&text);
        assert_eq!((a.instrument.as_str(), a.sent_at_ms, a.unread_time), ("AAPL", Some(SENT), None), "{text}");
    }
    for (title, value) in [
        ("2024-01-15T14:30:00Z 2024-01-15T15:30:00Z", "2024-01-15T14:30:00Z or 2024-01-15T15:30:00Z"),
        ("Bot 2024-01-15T14:30:00", "2024-01-15T14:30:00 (no zone)"),
    ] {
        let text = format!("{title}{FILL}");
        let a = one(&text);
        assert_eq!(a.sent_at_ms, None, "{text}");
        let u = a.unread_time.unwrap_or_else(|| panic!("{text}: no unread time"));
        assert!(u.value.starts_with(&value[..value.len().min(40)]), "{text}: {}", u.value);
    }
    for title in [
        "ORB 09:30",
        "Since 2024-01-15",
        "EMA 9-21-50 cross",
        "MACD (12, 26, 9)",
        "Session 09:30-16:00 [5m]",
        "Strategy 01/15/2024: v1.2",
        "tv-2024-01-15T14:30:00Z-bot",
    ] {
        let text = format!("{title}{FILL}");
        let a = one(&text);
        assert_eq!((a.instrument.as_str(), a.sent_at_ms, a.unread_time), ("AAPL", None, None), "{text}");
    }
}

/// Why `text` is refused; a panic naming the alert it was read as when it is not.
fn refusal(text: &str) -> String {
    match parse(text) {
        Ok(a) => panic!("{text:?} was read as {a:?}"),
        Err(e) => e.to_string(),
    }
}

/// A keyword in marks the reader did not list (HTML bold from a chat relay, table pipes, Markdown strikethrough or
/// highlight, a command-line flag) was skipped: `close <b>SHORT</b> AAPL` closed whichever side was held, a stop
/// went out as a limit and a limit at market. A word whose only letters make one keyword reads as it; one that holds
/// a keyword or a stop word among other letters is refused.
#[test]
fn keywords_in_other_marks_are_read_or_refused_never_skipped() {
    use crate::model::OrderType;
    for text in [
        "close <b>SHORT</b> AAPL",
        "close <strong>short</strong> AAPL",
        "close |short| AAPL",
        "close short| AAPL",
        "close ==short== AAPL",
        "close ~~short~~ AAPL",
    ] {
        let a = one(text);
        assert_eq!((a.instrument.as_str(), a.direction), ("AAPL", Some(Direction::Short)), "{text}");
    }
    for text in ["buy AAPL @ 190 <b>limit</b>", "buy AAPL @ 190 |limit|"] {
        let a = one(text);
        assert_eq!(
            (a.order_type, a.price.map(|p| p.to_string())),
            (Some(OrderType::Limit), Some("190".into())),
            "{text}"
        );
    }
    // A stop is no limit (`buy AAPL @ 190 stop` is refused too); a flag's name beside the keyword, and two keywords
    // in one word, leave what it says unclear.
    for text in [
        "sell AAPL @ 180 <i>stop loss</i>",
        "buy AAPL @ 190 <b>STOP</b>",
        "buy AAPL @ 190 |stop|",
        "close AAPL --direction=short",
        "close AAPL <b>long</b>/<b>short</b>",
    ] {
        let e = refusal(text);
        assert!(e.contains("cannot place"), "{text}: {e}");
    }
    // Marks with no keyword still say nothing, and a link says nothing whatever its path holds.
    for text in ["buy AAPL <b>!</b>", "buy AAPL ~~", "buy AAPL https://www.tradingview.com/chart/long-short/"] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
}

/// A percent or a currency sign written after a price with a space was skipped as punctuation, and the price read as
/// dollars: `close long AAPL @ 50 %` (half the position) closed all of it with a sell limit at $50. A word made only
/// of unit signs is refused, as `@ 50%` is.
#[test]
fn a_unit_sign_after_a_price_is_refused_not_read_as_dollars() {
    for text in [
        "close long AAPL @ 50 %",
        "sell AAPL @ 2 % limit",
        "buy AAPL price=5 %",
        "sell AAPL @ 2 \u{ff05}",
        "buy AAPL @ 5 \u{2030}",
        "buy AAPL @ 190 \u{a2}",
        "buy AAPL @ 190 \u{20ac}.",
        "close long AAPL @ 50%",
    ] {
        let e = refusal(text);
        assert!(e.contains("is not a plain number"), "{text}: {e}");
    }
    // Away from a price it is refused all the same: a unit says the sender meant an amount.
    for text in ["sell AAPL %", "buy \u{20ac} AAPL"] {
        assert!(matches!(parse(text), Err(ParseError::NotAnAlert(_))), "{text}: {:?}", parse(text));
    }
}

/// A part of the position under a key no field holds was refused only in ASCII digits (`percent=50`, `size=50%`):
/// `size=50％`, `size=½`, `size=1/2`, `percent=5e1`, `size=(50)`, `size=~50` or `percent=50pct` was skipped and the
/// CLOSE sold the whole position. A value that starts with a number, past its marks, is a number.
#[test]
fn a_number_under_an_unknown_key_is_refused_in_any_spelling() {
    for text in [
        "close long AAPL percent=50",
        "close long AAPL size=50%",
        "close long AAPL size=50\u{ff05}",
        "close long AAPL size=\u{bd}",
        "close long AAPL size=1/2",
        "close long AAPL percent=5e1",
        "close long AAPL size=(50)",
        "close long AAPL size=~50",
        "close long AAPL percent=50pct",
        "close long AAPL size=\u{ff15}\u{ff10}",
    ] {
        let e = refusal(text);
        assert!(e.contains("is no field this reader knows"), "{text}: {e}");
    }
    // A label holding a digit, and a date or a time, say nothing about the size.
    for text in ["buy AAPL tag=breakout2", "buy AAPL ref=abc-123", "buy AAPL bar=2024-01-15", "buy AAPL at_bar=10:30"] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
}

/// A keyword written as a heading (`BUY: AAPL`) was taken for a candidate instrument, and the text refused as naming
/// no action: the very word the sender wrote. It reads as the keyword; another word before a colon still names the
/// instrument.
#[test]
fn a_keyword_before_a_colon_reads_as_the_keyword() {
    for (text, action, direction) in [
        ("BUY: AAPL", ActionKind::Word(ActionWord::Buy), None),
        ("SELL: AAPL short", ActionKind::Word(ActionWord::Sell), Some(Direction::Short)),
        ("Close: AAPL long", ActionKind::Canonical(Action::Close), Some(Direction::Long)),
        ("Entry: long AAPL", ActionKind::Word(ActionWord::Entry), Some(Direction::Long)),
        ("Buy: long AAPL", ActionKind::Word(ActionWord::Buy), Some(Direction::Long)),
        ("buy AAPL Long:", ActionKind::Word(ActionWord::Buy), Some(Direction::Long)),
    ] {
        let a = one(text);
        assert_eq!((a.action, a.instrument.as_str(), a.direction), (action, "AAPL", direction), "{text}");
    }
    assert_eq!(one("TSLA: sell short").instrument, "TSLA");
}

/// Bracket keys spelled with a unit or a kind after the name (`sl_price=180`) were ignored as unknown keys: the
/// entry traded without its stop. They refuse the alert as the plain names do.
#[test]
fn bracket_keys_with_a_unit_refuse_the_alert() {
    for text in
        ["buy long AAPL sl_price=180 tp_price=200", "ticker=AAPL;action=buy;stop_loss_pct=2", "buy AAPL slPrice=180"]
    {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains("stop and bracket orders"), "{text}: {e}");
    }
}

/// The README's example of pairs with a bad action: `Signal: buy AAPL long` was answered "no instrument", and with
/// a ticker added, refused again for its action. A present action that is no action word is named first.
#[test]
fn pairs_with_a_bad_action_and_no_instrument_name_the_action() {
    let e = crate::alert::parse(b"Signal: buy AAPL long", Some("text/plain")).unwrap_err();
    assert!(e.to_string().contains("`Signal` cannot be \"buy AAPL long\""), "{e}");
    let e = crate::alert::parse(b"{\"action\":\"hold\"}", Some("application/json")).unwrap_err();
    assert!(e.to_string().contains("`action` cannot be \"hold\""), "{e}");
    // With a good action (or none), the instrument is what is missing.
    for body in [&b"Signal: buy"[..], b"{\"action\":\"buy\"}", b"{}"] {
        let e = crate::alert::parse(body, None).unwrap_err();
        assert_eq!(e, crate::alert::ParseError::MissingInstrument, "{}", String::from_utf8_lossy(body));
    }
}

/// HTML tags are bold as a chat relay writes it: a symbol or a keyword in them reads as in `**…**`. Skipped,
/// `Buy <b>NVDA</b> now` bought NOW. An arrow or a comparison is no tag.
#[test]
fn a_word_in_html_tags_reads_as_in_bold() {
    assert_eq!(one("buy <b>NVDA</b>").instrument, "NVDA");
    assert_eq!(one("<strong>BUY</strong> <i>NASDAQ:TSLA</i>").instrument, "TSLA");
    for text in ["Buy <b>NVDA</b> now", "Buy **NVDA** now"] {
        let e = refusal(text);
        assert!(e.contains("more than one word could be the instrument (NVDA, now)"), "{text}: {e}");
    }
    let a = one("close <em>short</em> AAPL");
    assert_eq!((a.instrument.as_str(), a.direction), ("AAPL", Some(Direction::Short)));
    assert_eq!(without_tags("<b>NVDA</b>"), "NVDA");
    assert_eq!(without_tags("</b><b>x</b></b>"), "x");
    for kept in ["<-AAPL", "a<b", "<verylongname>AAPL", "<b>", "x>"] {
        assert_eq!(without_tags(kept).len(), kept.len() - usize::from(kept == "<b>") * 3, "{kept}");
    }
}

/// A label under an unknown key that merely starts with a digit is no number: a UUID, `tag=1st`, `strategy=2ma`, a
/// chart interval (`1D`). Read as one, such alerts were refused; a number alone or with a unit still is.
#[test]
fn a_label_starting_with_a_digit_under_an_unknown_key_is_no_number() {
    for text in [
        "buy AAPL ref=550e8400-e29b-41d4-a716-446655440000",
        "buy AAPL uuid=9b2f4c1e",
        "buy AAPL tag=1st",
        "buy AAPL interval=1D",
        "buy AAPL tf=15m",
    ] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
    // A number with any other unit is an amount: skipped, a CLOSE sold the whole position. A label like `2ma` is
    // refused with them (a missed trade is told; a size skipped is traded).
    for text in [
        "close long AAPL size=5k",
        "close long AAPL size=100shares",
        "close long AAPL percent=1.5E1",
        "close long BTCUSD size=0.5BTC",
        "close long AAPL size=10%equity",
        "close long AAPL size=50%pos",
        "close long AAPL size=5M",
        "buy AAPL strategy=2ma",
    ] {
        refusal(text);
    }
}

/// A cashtag is a symbol whatever its letters, and a bare word a stop's key merely starts like is one too: `$SLS`
/// (SELLAS) was refused as a stop in marks. A stop's own word in marks is still no symbol.
#[test]
fn a_cashtag_is_a_symbol_whatever_its_letters() {
    for text in ["buy SLS", "buy $SLS", "buy $TP", "buy **SLS**"] {
        assert_eq!(one(text).instrument, text.trim_start_matches("buy ").trim_matches(['$', '*']), "{text}");
    }
    for text in ["buy AAPL @ 190 <b>STOP</b>", "buy AAPL (TP)"] {
        refusal(text);
    }
}

/// A stop or a target glued to `@` is no handle: `buy AAPL @tp=200` bought with no target.
#[test]
fn a_stop_or_target_glued_to_an_at_sign_is_never_skipped() {
    for text in ["buy AAPL @tp=200", "buy AAPL @sl=180"] {
        refusal(text);
    }
}

/// A handle names someone and says nothing, whatever keyword it holds (README): `close AAPL @short` is no CLOSE
/// SHORT, and `@Short_Signals` is no keyword beside other letters to refuse.
#[test]
fn a_handle_says_nothing_even_when_it_holds_a_keyword() {
    for text in ["sell AAPL @Short_Signals", "buy AAPL @long_bot", "buy AAPL @day_trader", "close AAPL @short"] {
        let a = one(text);
        assert_eq!((a.instrument.as_str(), a.direction), ("AAPL", None), "{text}");
    }
}

/// A size glued to `@` is no handle (skipped, the CLOSE sold the whole position), and a handle before a sentence's
/// punctuation still names someone.
#[test]
fn a_size_glued_to_an_at_sign_is_refused_and_a_handle_before_punctuation_names_someone() {
    for text in ["close long AAPL @percent=50", "close long AAPL @size=5", "close long AAPL @qty=5"] {
        refusal(text);
    }
    for text in ["@Short_Signals: buy AAPL", "@long_calls! buy AAPL", "@Short.Signals, buy AAPL"] {
        let a = one(text);
        assert_eq!((a.instrument.as_str(), a.direction), ("AAPL", None), "{text}");
    }
}

/// A size grouped with `'` or `_`, or after its currency's code, is a number; a chart interval spelled out under an
/// interval's key is none.
#[test]
fn sizes_in_other_spellings_are_numbers_and_spelled_out_intervals_are_not() {
    for text in ["close long AAPL size=1'000", "close long AAPL size=1_000", "close long AAPL size=USD500"] {
        refusal(text);
    }
    for text in [
        "buy AAPL tf=1hour",
        "buy AAPL timeframe=4hours",
        "buy AAPL interval=15min",
        "buy AAPL interval=30sec",
        "buy AAPL interval=100T",
        "buy AAPL time_frame=4h",
        "buy AAPL res=1H",
    ] {
        assert_eq!(one(text).instrument, "AAPL", "{text}");
    }
}
