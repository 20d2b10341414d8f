//! PineConnector's comma-separated lines: `LicenseID,Command,Symbol,key=value…`
//! (<https://docs.pineconnector.com/syntax>).
//!
//! The license id (a long number) is the sender's account with PineConnector and is skipped;
//! the command says what to do, sometimes two things (`closelongbuy`: close the longs, then
//! buy); `key=value` items go through the same field assembly as any alert, so `sl=` and
//! `tp=` are refused as brackets and `risk=` (PineConnector's size) is left to the bot's
//! sizing. A line is read this way only when its command is one of PineConnector's, after a
//! license id or as the first item, and every item after the symbol is a `key=value`.

use super::super::fields::{Fields, Name, Value};
use super::super::{Action, ActionKind, ActionWord, Alerts, Direction, ParseError};
use std::borrow::Cow;

/// What one command asks for: one step, or two in order.
enum Command {
    Steps(Step, Option<Step>),
    /// Refused: the reason.
    Refused(&'static str),
}

type Step = (ActionKind, Option<Direction>);

const BUY: ActionKind = ActionKind::Word(ActionWord::Buy);
const SELL: ActionKind = ActionKind::Word(ActionWord::Sell);
const OPEN: ActionKind = ActionKind::Canonical(Action::Open);
const CLOSE: ActionKind = ActionKind::Canonical(Action::Close);
const CANCEL: ActionKind = ActionKind::Canonical(Action::Cancel);
const LONG: Option<Direction> = Some(Direction::Long);
const SHORT: Option<Direction> = Some(Direction::Short);

fn command(word: &str) -> Option<Command> {
    // Commands are short ASCII words: anything else is answered without building anything,
    // so ordinary comma-separated alerts pay next to nothing for this check.
    let mut buf = [0u8; 16];
    if word.len() > buf.len() || !word.bytes().all(|b| b.is_ascii_alphabetic()) {
        return None;
    }
    for (d, b) in buf.iter_mut().zip(word.bytes()) {
        *d = b.to_ascii_lowercase();
    }
    let lower = std::str::from_utf8(&buf[..word.len()]).ok()?;
    use Command::{Refused, Steps};
    Some(match lower {
        "buy" | "long" | "bull" | "bullish" => Steps((BUY, None), None),
        "sell" | "short" | "bear" | "bearish" => Steps((SELL, None), None),
        "closelong" => Steps((CLOSE, LONG), None),
        "closeshort" => Steps((CLOSE, SHORT), None),
        "closelongshort" => Steps((CLOSE, LONG), Some((CLOSE, SHORT))),
        "closelongbuy" => Steps((CLOSE, LONG), Some((OPEN, LONG))),
        "closeshortsell" => Steps((CLOSE, SHORT), Some((OPEN, SHORT))),
        "closelongsell" => Steps((CLOSE, LONG), Some((OPEN, SHORT))),
        "closeshortbuy" => Steps((CLOSE, SHORT), Some((OPEN, LONG))),
        "cancellong" => Steps((CANCEL, LONG), None),
        "cancelshort" => Steps((CANCEL, SHORT), None),
        "buystop" | "sellstop" => Refused("stop orders are not supported; send buy or sell when the price is reached"),
        "buylimit" | "selllimit" => Refused(
            "PineConnector's pending orders read `price=` in pips, percent or price as the EA is set, which \
             this service cannot know; send buy or sell with the limit price as `price` in a KEY=VALUE or JSON alert",
        ),
        "newsltplong" | "newsltpshort" => Refused(
            "stop and bracket orders (stop loss, take profit, trailing stop) are not supported, so there is none \
             to change",
        ),
        "closeall" | "closealleaoff" => Refused(
            "it closes every position of the account, whatever the symbol; send closelong or closeshort for \
             each symbol",
        ),
        "eaon" | "eaoff" => {
            Refused("it switches PineConnector's EA on or off, which is not a trade; pause the strategy instead")
        }
        _ => return None,
    })
}

/// PineConnector keys that move a stop after the entry (breakeven, trailing, ATR stops):
/// brackets by another name, refused like `sl=`.
fn is_stop_key(key: &str) -> bool {
    const KEYS: [&str; 9] = [
        "betrigger",
        "beoffset",
        "trailtrig",
        "traildist",
        "trailstep",
        "atrtrigger",
        "atrmultiplier",
        "atrperiod",
        "atrshift",
    ];
    KEYS.iter().any(|k| key.eq_ignore_ascii_case(k))
}

/// Reads a PineConnector line, or `None` when the text is not one (it then goes to the
/// other shapes).
pub(super) fn parse(text: &str) -> Option<Result<Alerts, ParseError>> {
    if !text.contains(',') {
        return None;
    }
    let mut items = text.split(',').map(str::trim);
    let mut first = items.next()?;
    let licensed = first.len() >= 6 && first.bytes().all(|b| b.is_ascii_digit());
    if licensed {
        first = items.next()?;
    }
    let cmd = command(first)?;
    // Without a license id, `buy,AAPL,price=190` is any sender's list and is left to the
    // other shapes, as before; PineConnector's own commands cannot be anything else.
    if !licensed && matches!(cmd, Command::Steps((ActionKind::Word(_), _), None)) {
        return None;
    }
    let symbol = items.next().filter(|s| !s.is_empty() && !s.contains('=') && !s.contains(char::is_whitespace));
    let rest: Vec<&str> = items.collect();
    if !rest.iter().all(|i| i.contains('=')) {
        return None;
    }
    let (first_step, second) = match cmd {
        Command::Refused(reason) => {
            return Some(Err(ParseError::Unsupported(format!("PineConnector's `{first}`: {reason}"))));
        }
        Command::Steps(a, b) => (a, b),
    };
    let Some(symbol) = symbol else {
        return licensed.then_some(Err(ParseError::MissingInstrument));
    };
    Some(build(first_step, second, symbol, &rest))
}

/// Refuses an item whose key or value holds a space where PineConnector's grammar has none: after a comma left out,
/// `risk=1 sl=180` read `risk` as `1 sl=180`, skipped it, and the entry went out without the stop that
/// `risk=1,sl=180` is refused for. Only `comment=` is free text; unquoted, it may not hide another `key=` either
/// (`comment=entry sl=180`). A value in double quotes is taken whole.
fn hidden_item(item: &str, key: &str, value: &str) -> Result<(), ParseError> {
    let quoted =
        value.len() >= 2 && value.starts_with('"') && value.ends_with('"') && !value[1..value.len() - 1].contains('"');
    let spaced = |s: &str| s.contains(char::is_whitespace);
    let free_text = key.eq_ignore_ascii_case("comment");
    let hides_key = value.split_whitespace().skip(1).any(|w| w.contains('='));
    if spaced(key) || (!quoted && spaced(value) && (!free_text || hides_key)) {
        return Err(ParseError::NotAnAlert(format!(
            "PineConnector's item `{}` holds a space where one value was expected: a comma left out hides the next \
             item (such as a stop); send one `key=value` per comma (`risk=1,sl=180`), and a comment in double quotes",
            super::super::snippet(item)
        )));
    }
    Ok(())
}

fn build(first: Step, second: Option<Step>, symbol: &str, rest: &[&str]) -> Result<Alerts, ParseError> {
    let market = matches!(first.0, ActionKind::Word(_)) || first.0 == CLOSE;
    let mut fields = Fields::default();
    fields.set_named(Name::Instrument, Cow::Borrowed("symbol"), Value::Text(Cow::Borrowed(symbol)))?;
    fields.set_named(Name::Action, Cow::Borrowed("command"), Value::Text(Cow::Borrowed(first.0.as_str())))?;
    if let Some(d) = first.1 {
        fields.set_named(Name::Direction, Cow::Borrowed("command"), Value::Text(Cow::Borrowed(d.as_str())))?;
    }
    for item in rest {
        let (k, v) = item.split_once('=').unwrap_or((item, ""));
        let (k, v) = (k.trim(), v.trim());
        hidden_item(item, k, v)?;
        let v = v.trim_matches('"');
        let value = Value::Text(Cow::Borrowed(v));
        // PineConnector's filters skip the signal unless the account or the market meets them (`accfilter=`: the
        // balance, equity or margin over a mark; `spread=`: the spread at most so much). Dropped, the entry went out
        // where PineConnector would have skipped it.
        if ["accfilter", "spread"].iter().any(|f| k.eq_ignore_ascii_case(f)) {
            return Err(ParseError::Unsupported(format!(
                "PineConnector's `{k}=` is a condition on the account or the market this service cannot check; send \
                 the alert without it"
            )));
        }
        if is_stop_key(k) {
            fields.set_guarded(Cow::Borrowed(k), &value);
            continue;
        }
        // `risk=` is PineConnector's size (the bot's sizing decides here), `comment=` a
        // note; a market command's `price=` is ignored by PineConnector itself.
        if market && Name::from_key(k) == Some(Name::Price) {
            continue;
        }
        if Name::from_key(k).is_some_and(|n| matches!(n, Name::Instrument | Name::Action | Name::Direction)) {
            continue;
        }
        fields.set(Cow::Borrowed(k), value)?;
    }
    let mut alerts = fields.build()?;
    if let Some((action, direction)) = second {
        match alerts.as_slice() {
            [] => {}
            // The command's first step, as the command says it: the second follows it.
            [a] if a.action == first.0 && first.1.map_or(true, |d| a.direction == Some(d)) => {
                let mut next = a.clone();
                next.action = action;
                next.direction = direction;
                // An option ticker's leg is the step's own (PineConnector's text names no legs): copied, the new
                // side's leg kept the close's `sell_to_close`, and the whole alert failed, the close with it.
                let own = crate::alert::fields::leg_action(action, direction);
                for leg in next.legs.iter_mut().filter(|l| l.action.is_some()) {
                    leg.action = own;
                }
                alerts.push(next);
            }
            // The position keys (`prevMarketPosition`, `marketPosition`) made the alert a reversal already. It
            // must be the command's own: a second opening step added to it would double the new side.
            [_, last] if last.action == action && last.direction == direction => {}
            // Anything else the keys made (one step that is not the command's first, such as the new side alone
            // after `prevMarketPosition=flat`) disagrees with the command: refused, not doubled.
            [.., last] => {
                let step = |a: ActionKind, d: Option<Direction>| match d {
                    Some(d) => format!("{} {}", a.as_str(), d.as_str()),
                    None => a.as_str().to_owned(),
                };
                return Err(ParseError::Conflict {
                    first: "command".into(),
                    second: "marketPosition".into(),
                    first_value: format!("then {}", step(action, direction)),
                    second_value: format!("then {}", step(last.action, last.direction)),
                });
            }
        }
    }
    Ok(alerts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_pineconnector_lines_take_this_route() {
        // Any sender's comma list without a license id reads as before, its price a limit.
        assert!(parse("buy,AAPL,price=190.25").is_none());
        assert!(parse("AAPL,buy").is_none());
        assert!(parse("buy long AAPL").is_none());
        assert!(parse("ticker=AAPL,action=buy").is_none());
        // A license id, or one of PineConnector's own commands, makes it PineConnector's.
        assert!(parse("60123456789,buy,AAPL").is_some());
        assert!(parse("closelong,AAPL").is_some());
        // A non-pair item after the symbol is not PineConnector's syntax.
        assert!(parse("closelong,AAPL,now").is_none());
    }

    #[test]
    fn a_two_step_command_with_the_position_keys_is_its_two_steps_once() {
        // The keys made the reversal already: a third step (the new side opened twice) was added to it.
        for text in [
            "closelongsell,AAPL,prevMarketPosition=long,marketPosition=short",
            "closelongsell,AAPL,marketPosition=short,prevMarketPosition=long",
            "closelongsell,AAPL",
        ] {
            let a = parse(text).unwrap().unwrap();
            let steps: Vec<_> = a.iter().map(|a| (a.action.as_str(), a.direction)).collect();
            assert_eq!(steps, [("CLOSE", Some(Direction::Long)), ("OPEN", Some(Direction::Short))], "{text}");
        }
        // Keys that end the position on another side than the command's: refused, not guessed.
        let e = parse("closelongsell,AAPL,prevMarketPosition=short,marketPosition=long").unwrap();
        assert!(e.is_err(), "{e:?}");
        // Keys that make one step other than the command's first (flat, then short: the new side alone) gave
        // that step and the command's second on top of it, the new side twice.
        for text in [
            "60123456789,closelongsell,EURUSD,prevMarketPosition=flat,marketPosition=short",
            "60123456789,closeshortbuy,EURUSD,prevMarketPosition=flat,marketPosition=long",
        ] {
            let e = parse(text).unwrap();
            assert!(e.is_err(), "{text}: {e:?}");
        }
    }

    #[test]
    fn a_licensed_market_command_ignores_price_and_keeps_the_symbol() {
        let a = parse("60123456789,sell,NASDAQ:AAPL,price=190,risk=2").unwrap().unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!((a[0].action, a[0].instrument.as_str(), a[0].price), (SELL, "AAPL", None));
        // Under any of the price's names: `limit_price=` made the market command a limit order at 190.
        for key in ["limit_price", "orderPrice", "PRICE"] {
            let a = parse(&format!("60123456789,sell,AAPL,{key}=190")).unwrap().unwrap();
            assert_eq!(a[0].price, None, "{key}");
        }
    }

    /// PineConnector's account and spread filters skip a signal PineConnector would not trade: dropped, the entry
    /// went out anyway.
    #[test]
    fn an_account_or_spread_filter_is_refused_not_dropped() {
        for text in ["60123456789,buy,EURUSD,risk=1,accfilter=500", "60123456789,buy,EURUSD,risk=1,spread=2"] {
            let e = parse(text).unwrap();
            assert!(e.as_ref().is_err_and(|e| e.to_string().contains("cannot check")), "{text}: {e:?}");
        }
        assert!(parse("60123456789,buy,EURUSD,risk=1,comment=x").unwrap().is_ok());
    }

    /// A comma left out hid the next item in a value: `risk=1 sl=180` read `risk` as `1 sl=180`, skipped it, and
    /// the entry went out without its stop. A value (or a key) holding a space is refused, naming the item; a
    /// comment is free text, taken whole in quotes, and unquoted as long as it hides no `key=`.
    #[test]
    fn an_item_hidden_after_a_space_in_a_value_is_refused() {
        for text in [
            "60123456789,buy,AAPL,risk=1 sl=180",
            "60123456789,buy,AAPL,risk=1 tp=200",
            "60123456789,buy,AAPL,risk=1\u{A0}sl=180",
            "60123456789,buy,AAPL,risk=1 180",
            "60123456789,buy,AAPL,sl=180 risk=1",
            "60123456789,buy,AAPL,risk=1,x sl=180",
            "60123456789,buy,AAPL,risk=1,comment=entry sl=180",
            "60123456789,closelong,AAPL,comment=exit betrigger=5",
        ] {
            let e = parse(text).unwrap();
            let item = text.rsplit(',').next().unwrap();
            assert!(e.as_ref().is_err_and(|e| e.to_string().contains(item)), "{text}: {e:?}");
        }
        for text in [
            "60123456789,buy,EURUSD,risk=1,comment=RSI long signal",
            "60123456789,buy,EURUSD,risk=1,comment=\"entry sl=180 later\"",
            "60123456789,buy,EURUSD,risk=1 ,comment= x ",
            "60123456789,buy,EURUSD,risk=\"1\"",
        ] {
            assert!(parse(text).unwrap().is_ok(), "{text}");
        }
    }
}
