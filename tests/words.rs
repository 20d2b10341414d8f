//! One word table per enum: every word either of the two former tables (the alert
//! parsers' and the snapshot loader's) accepted is still accepted, by both paths, in any
//! case; `c` and `p` for call and put are read everywhere.

use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::str::FromStr;
use strategy_webhook::alert::{Action, ActionWord};
use strategy_webhook::model::{
    AssetClass, Direction, Duration, Intent, LegAction, OptionSide, OrderType, PriceEffect, RequestKind,
};
use strategy_webhook::strategy::{OrderIntent, Selection, Status};

/// Reads `word` (as sent, upper-cased, padded) through `from_word`, `FromStr` and serde, and
/// checks that the canonical word written back reads as the same value.
fn reads<T>(word: &str, want: T, from_word: fn(&str) -> Option<T>, as_str: fn(T) -> &'static str)
where
    T: Copy + PartialEq + Debug + DeserializeOwned + serde::Serialize + FromStr,
{
    for w in [word.to_string(), word.to_uppercase(), format!(" {word} ")] {
        assert_eq!(from_word(&w), Some(want), "from_word({w:?})");
        assert_eq!(w.parse::<T>().ok(), Some(want), "parse({w:?})");
        let json = serde_json::to_string(&w).unwrap();
        assert_eq!(serde_json::from_str::<T>(&json).ok(), Some(want), "serde {json}");
    }
    assert_eq!(from_word(as_str(want)), Some(want), "the canonical word reads back");
    assert_eq!(serde_json::to_string(&want).unwrap(), format!("\"{}\"", as_str(want)));
}

macro_rules! check {
    ($t:ty, [$(($w:literal, $v:expr)),+ $(,)?]) => {
        $( reads::<$t>($w, $v, <$t>::from_word, <$t>::as_str); )+
    };
}

#[test]
fn every_word_accepted_before_is_accepted_by_both_paths() {
    check!(Direction, [("long", Direction::Long), ("short", Direction::Short)]);
    check!(OrderType, [("market", OrderType::Market), ("limit", OrderType::Limit)]);
    check!(Duration, [("day", Duration::Day), ("gtc", Duration::Gtc), ("fok", Duration::Fok)]);
    check!(
        OptionSide,
        [("call", OptionSide::Call), ("c", OptionSide::Call), ("put", OptionSide::Put), ("p", OptionSide::Put)]
    );
    check!(
        LegAction,
        [
            ("buy_to_open", LegAction::BuyToOpen),
            ("sell_to_open", LegAction::SellToOpen),
            ("buy_to_close", LegAction::BuyToClose),
            ("sell_to_close", LegAction::SellToClose),
        ]
    );
    check!(
        Action,
        [("open", Action::Open), ("close", Action::Close), ("modify", Action::Modify), ("cancel", Action::Cancel)]
    );
    check!(
        ActionWord,
        [
            ("buy", ActionWord::Buy),
            ("sell", ActionWord::Sell),
            ("entry", ActionWord::Entry),
            ("exit", ActionWord::Exit)
        ]
    );
    check!(
        Intent,
        [
            ("open_long", Intent::OpenLong),
            ("open_short", Intent::OpenShort),
            ("close_long", Intent::CloseLong),
            ("close_short", Intent::CloseShort),
        ]
    );
    check!(
        AssetClass,
        [("equity", AssetClass::Equity), ("option", AssetClass::Option), ("crypto", AssetClass::Crypto)]
    );
    check!(
        Status,
        [
            ("active", Status::Active),
            ("draft", Status::Draft),
            ("paused", Status::Paused),
            ("archived", Status::Archived)
        ]
    );
    check!(
        Selection,
        [
            ("internal", Selection::Internal),
            ("internal-selection", Selection::Internal),
            ("internal_selection", Selection::Internal),
            ("external", Selection::External),
            ("external-selection", Selection::External),
            ("external_selection", Selection::External),
        ]
    );
    check!(OrderIntent, [("entry", OrderIntent::Entry), ("exit", OrderIntent::Exit)]);
    check!(PriceEffect, [("debit", PriceEffect::Debit), ("credit", PriceEffect::Credit)]);
    check!(
        RequestKind,
        [("place", RequestKind::Place), ("replace", RequestKind::Replace), ("cancel", RequestKind::Cancel)]
    );
}

#[test]
fn canonical_words_are_unchanged() {
    assert_eq!(Direction::Long.as_str(), "LONG");
    assert_eq!(OptionSide::Put.as_str(), "PUT");
    assert_eq!(Action::Modify.as_str(), "MODIFY");
    assert_eq!(ActionWord::Exit.as_str(), "exit");
    assert_eq!(Intent::CloseShort.to_string(), "close_short");
    assert_eq!(Duration::default(), Duration::Day);
}

#[test]
fn a_wrong_word_names_the_accepted_ones() {
    let e = serde_json::from_str::<OptionSide>("\"straddle\"").unwrap_err().to_string();
    assert!(e.contains("\"straddle\" is not one of: call, c, put, p"), "{e}");
    let e = "sideways".parse::<Direction>().unwrap_err().to_string();
    assert_eq!(e, "\"sideways\" is not one of: long, short");
    assert_eq!(OptionSide::from_word("cal"), None);
    assert_eq!(Direction::from_word("longer"), None);
}

#[test]
fn the_snapshot_loader_and_the_alert_parser_agree_on_c_and_p() {
    let snapshot = serde_json::json!({
        "id": "s", "token_hash": "0".repeat(64), "status": "Active", "asset_class": "OPTION",
        "allowed_instruments": ["SPX"],
        "options": { "selection": "internal_selection",
                     "legs": { "long": [ { "side": "c", "action": "BUY_TO_OPEN", "strike": { "atm_offset": 0 } } ],
                               "short": [ { "side": "P", "action": "buy_to_open", "strike": { "atm_offset": 0 } } ] } },
        "bots": []
    });
    let s = strategy_webhook::Strategy::from_json(snapshot.to_string().as_bytes()).expect("loads");
    let o = s.options.expect("options");
    assert_eq!(o.legs.long[0].side, OptionSide::Call);
    assert_eq!(o.legs.short[0].side, OptionSide::Put);
    let body = br#"{"ticker":"SPX","action":"OPEN","direction":"long","legs":[{"side":"c","action":"buy_to_open","strike":4500,"expiration":"2024-01-19"}]}"#;
    let alerts = strategy_webhook::parse(body, Some("application/json")).expect("parses");
    assert_eq!(alerts[0].legs[0].side, Some(OptionSide::Call));

    let mut bad = snapshot.clone();
    bad["options"]["legs"]["long"][0]["side"] = serde_json::json!("straddle");
    let e = strategy_webhook::Strategy::from_json(bad.to_string().as_bytes()).unwrap_err().to_string();
    assert!(e.contains("is not one of: call, c, put, p"), "the loader names the accepted words: {e}");
}

/// A ticker that begins with a keyword and a dot (`DAY.A`, `LONG.A`) is one symbol, as `AB.A` is: the keyword
/// rule took the dot for a sentence's full stop, and the alert traded `A` with a day order (found by the
/// free-words proptest).
#[test]
fn a_ticker_that_begins_with_a_keyword_and_a_dot_is_one_symbol() {
    for (text, ticker) in [("CANCEL DAY.A", "DAY.A"), ("buy GTC.B", "GTC.B"), ("sell LONG.X", "LONG.X")] {
        let a = strategy_webhook::alert::text::parse(text).unwrap();
        assert_eq!(a[0].instrument, ticker, "{text}");
        assert_eq!((a[0].duration, a[0].direction), (None, None), "{text}");
    }
    // A keyword that ends a sentence is still the keyword.
    let a = strategy_webhook::alert::text::parse("buy AAPL day. long.").unwrap();
    assert_eq!(a[0].instrument, "AAPL");
    assert!(a[0].duration.is_some() && a[0].direction.is_some(), "{:?}", a[0]);
}
