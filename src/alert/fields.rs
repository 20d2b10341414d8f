//! The one place where sender keys become alert fields, for JSON and text alike:
//! key synonyms, placeholders, value checks and position transitions. Parsers only
//! split the body into key/value pairs and hand them here, so a JSON body and the
//! same pairs sent as text always yield the same alert.

use super::occ::Contract;
use super::{
    find_placeholder, normalize_instrument, snippet, transition, Action, ActionKind, ActionWord, Alert, Alerts,
    Direction, Duration, Leg, OrderIntent, OrderType, ParseError, Position, QuotePrice, MAX_LEGS,
};
use super::{Date, LegAction, OptionSide};
use crate::decimal::{self, Decimal};
use compact_str::CompactString;
use std::borrow::Cow;

/// A value as the sender wrote it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// JSON `null`.
    Null,
    /// A string, or a bare word in text.
    Text(Cow<'a, str>),
    /// A JSON number token, digits untouched.
    Number(&'a str),
    /// `true` or `false`.
    Bool(bool),
    /// Something this field cannot hold (object, array): its kind.
    Other(&'static str),
}

/// The alert fields a sender can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Name {
    /// instrument / ticker / symbol
    Instrument,
    /// action / signal / side
    Action,
    /// direction
    Direction,
    /// price
    Price,
    /// order_type
    OrderType,
    /// duration / time_in_force / tif / orderTerm (E*TRADE)
    Duration,
    /// marketPosition / sentiment
    MarketPosition,
    /// prevMarketPosition
    PrevMarketPosition,
    /// marketPositionSize: the size after the fill, unsigned
    MarketPositionSize,
    /// prevMarketPositionSize: the size before the fill, unsigned
    PrevMarketPositionSize,
    /// quantity / qty
    Quantity,
    /// notional
    Notional,
    /// message_id
    MessageId,
    /// target: entry or exit, the working order a MODIFY or CANCEL means
    Target,
    /// order_id / orderId: the working order a MODIFY or CANCEL means
    OrderId,
    /// timenow / timestamp: when the alert was made
    SentAt,
    /// time: when the alert was made, or (TradingView's `{{time}}`) when its bar opened; read only where no
    /// `timenow` or `timestamp` says when the alert was made
    Time,
    /// alertTimestamp (TV-Hub) / date (PickMyTrade): when the alert was made, and the
    /// sender's idempotency key
    IdTime,
    /// max_lag / maxLag (3Commas, OKX): the sender's bound on the alert's age, seconds
    MaxLag,
    /// extendedHours (TradersPost): refused when true
    ExtendedHours,
    /// cancel: true (TradersPost): cancel the working entries before an exit (its side's) or an entry (both sides)
    CancelFirst,
    /// isBuy (TV-Hub)
    IsBuy,
    /// isSell (TV-Hub)
    IsSell,
    /// isClose (TV-Hub)
    IsClose,
    /// limitPriceType / marketPriceType (TradersPost): the per-alert Limit Target
    PriceType,
    /// pair (TV-Hub) / tv_instrument (3Commas): the instrument when no `ticker`, `symbol`
    /// or `instrument` names it
    InstrumentAlt,
    /// data (PickMyTrade): the action when no `action` names it
    ActionAlt,
    /// type (Alpaca's order body): the order type when its value names one
    OrderTypeAlt,
}

impl Name {
    /// Whether a JSON value of this field is read raw, as its exact text (a number with its digits, whatever its
    /// shape): prices and sizes, times, and the message id. TradingView's unquoted
    /// `{{strategy.market_position_size}}` is `0.5`, and a Unix time with a fraction `1705329000.5`, both floats that
    /// a scalar read would not take; a whole message id past 2^64 is a float to serde too, where the text reader
    /// keeps its digits.
    pub fn reads_raw(self) -> bool {
        matches!(
            self,
            Name::Price
                | Name::Quantity
                | Name::Notional
                | Name::MarketPositionSize
                | Name::PrevMarketPositionSize
                | Name::SentAt
                | Name::Time
                | Name::MessageId
        )
    }

    /// Maps a sender's key to a field: case, `_`, `-` and spaces do not matter.
    pub fn from_key(key: &str) -> Option<Name> {
        // Most senders use the documented spellings: answer those without normalizing.
        match key {
            "ticker" | "symbol" | "instrument" => return Some(Name::Instrument),
            "action" => return Some(Name::Action),
            "direction" => return Some(Name::Direction),
            "price" => return Some(Name::Price),
            "order_type" => return Some(Name::OrderType),
            "duration" => return Some(Name::Duration),
            "message_id" => return Some(Name::MessageId),
            "time" => return Some(Name::Time),
            "legs" | "metadata" | "comment" | "strategy" => return None,
            _ => {}
        }
        let mut buf = [0u8; 32];
        Some(match folded(key, &mut buf)? {
            b"instrument" | b"ticker" | b"symbol" => Name::Instrument,
            b"tvinstrument" | b"pair" => Name::InstrumentAlt,
            b"action" | b"signal" | b"side" | b"orderaction" | b"strategyorderaction" => Name::Action,
            b"data" => Name::ActionAlt,
            b"type" => Name::OrderTypeAlt,
            b"direction" => Name::Direction,
            b"price" | b"limitprice" | b"orderprice" => Name::Price,
            b"ordertype" => Name::OrderType,
            b"duration" | b"timeinforce" | b"tif" | b"orderterm" => Name::Duration,
            b"marketposition" | b"sentiment" | b"strategymarketposition" => Name::MarketPosition,
            b"prevmarketposition" | b"previousmarketposition" | b"strategyprevmarketposition" => {
                Name::PrevMarketPosition
            }
            b"marketpositionsize" | b"strategymarketpositionsize" => Name::MarketPositionSize,
            b"prevmarketpositionsize" | b"previousmarketpositionsize" | b"strategyprevmarketpositionsize" => {
                Name::PrevMarketPositionSize
            }
            b"quantity" | b"qty" => Name::Quantity,
            b"notional" => Name::Notional,
            b"messageid" | b"metadatamessageid" => Name::MessageId,
            b"target" => Name::Target,
            b"orderid" => Name::OrderId,
            b"time" => Name::Time,
            b"timenow" | b"timestamp" => Name::SentAt,
            b"alerttimestamp" | b"date" => Name::IdTime,
            b"maxlag" => Name::MaxLag,
            b"extendedhours" => Name::ExtendedHours,
            b"cancel" => Name::CancelFirst,
            b"isbuy" => Name::IsBuy,
            b"issell" => Name::IsSell,
            b"isclose" => Name::IsClose,
            b"limitpricetype" | b"marketpricetype" => Name::PriceType,
            _ => return None,
        })
    }

    const ALL: [Name; 28] = [
        Name::Instrument,
        Name::Action,
        Name::Direction,
        Name::Price,
        Name::OrderType,
        Name::Duration,
        Name::MarketPosition,
        Name::PrevMarketPosition,
        Name::MarketPositionSize,
        Name::PrevMarketPositionSize,
        Name::Quantity,
        Name::Notional,
        Name::MessageId,
        Name::Target,
        Name::OrderId,
        Name::SentAt,
        Name::Time,
        Name::IdTime,
        Name::MaxLag,
        Name::ExtendedHours,
        Name::CancelFirst,
        Name::IsBuy,
        Name::IsSell,
        Name::IsClose,
        Name::PriceType,
        Name::InstrumentAlt,
        Name::ActionAlt,
        Name::OrderTypeAlt,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Whether `key` is 3Commas' `strategy_info`, spelled as any key may be: in any case, with or without `_`/`-`
/// (`strategyInfo`, `StrategyInfo`, `strategy-info`). Matched exactly, the object under another spelling was
/// skipped whole: a partial exit closed the whole position, and a reversal lost its new side.
pub(crate) fn is_strategy_info(key: &str) -> bool {
    // Twelve letters at least: most keys asked (`metadata`) are turned away before they are folded.
    key.len() >= 12 && folded(key, &mut [0; 32]) == Some(b"strategyinfo".as_slice())
}

/// A key folded for comparison: lower case, without `_`, `-`, `.` and spaces, so that
/// `stop_loss`, `stopLoss` and `Stop-Loss` compare equal. `None` when longer than `buf`,
/// which no field name is.
fn folded<'b, const N: usize>(key: &str, buf: &'b mut [u8; N]) -> Option<&'b [u8]> {
    let mut n = 0;
    for b in key.trim().bytes() {
        if matches!(b, b'_' | b'-' | b' ' | b'.') {
            continue;
        }
        if n == buf.len() {
            return None;
        }
        buf[n] = b.to_ascii_lowercase();
        n += 1;
    }
    Some(&buf[..n])
}

/// True for a key that asks for a stop loss, take profit, trailing stop or stop order,
/// none of which the service places. Such a key is never dropped silently: an alert that
/// carries one is refused (see `bracket_refused`).
///
/// The names are the usual ones of senders, brokers and Pine Script (`strategy.exit`'s
/// `stop`, `limit`-less `profit` and `loss` in ticks, `trail_price`, `trail_points`,
/// `trail_offset`), numbered targets (`tp1`, `sl2`), and Alpaca's `order_class`. `limit`
/// is not among them: a limit price is the alert's `price`. None of them names an alert
/// field, so no accepted alert changes meaning.
pub fn is_bracket_key(key: &str) -> bool {
    const KEYS: [&[u8]; 27] = [
        // Pine's name for a limit price (`strategy.entry(…, limit=)`): not read, so an order asking for one is refused
        // rather than sent at market.
        b"limit",
        // TV-Hub's take-profit targets (`"targets": [{"takeProfitPercent": 1}]`); an empty list asks for nothing.
        b"targets",
        // PickMyTrade's stop loss and take profit in dollars, and its trailing stop.
        b"dollarsl",
        b"dollartp",
        b"trailsl",
        b"stoploss",
        b"stoplossprice",
        b"stoplosspercent",
        b"takeprofit",
        b"takeprofitprice",
        b"takeprofitpercent",
        b"stop",
        b"stopprice",
        b"trailingstop",
        b"trailingstopprice",
        b"trailingstoppercent",
        b"trailstop",
        b"trailprice",
        b"trailpercent",
        b"trailoffset",
        b"trailpoints",
        b"trailamount",
        b"profit",
        b"loss",
        b"orderclass",
        b"sl",
        b"tp",
    ];
    // Longer than the other keys' buffers: `trailingStopLossActivationPercent` folds to 33 bytes.
    let mut buf = [0u8; 48];
    let Some(k) = folded(key, &mut buf) else { return false };
    if KEYS.contains(&k) {
        return true;
    }
    // Every trailing stop's key and its switch (TV-Hub's `useTrailingStopLoss`, `trailingStopLossPercent`,
    // `trailingStopLossActivationPercent`): dropped, the entry went out with no stop at all.
    if k.starts_with(b"trailingstop") || k.starts_with(b"usetrailing") {
        return true;
    }
    // Numbered targets (tp1, tp2, sl1), and the names with a unit or a kind after them (sl_price, tp_pct,
    // stop_loss_pct, take_profit_percent, sl_pips, takeProfits, profit_target, target_price): an exact list let
    // them through, and the alert traded without its stop.
    // The number may come after the name or after the unit (tp1_price, tp_price1).
    const HEADS: [&[u8]; 6] = [b"stoploss", b"takeprofit", b"profittarget", b"targetprice", b"sl", b"tp"];
    // `expression`: TV-Hub's stop or take profit as a formula (`stopLossExpression`).
    const TAILS: [&[u8]; 16] = [
        b"",
        b"s",
        b"expression",
        b"price",
        b"pct",
        b"perc",
        b"percent",
        b"percentage",
        b"pips",
        b"points",
        b"pts",
        b"ticks",
        b"level",
        b"amount",
        b"distance",
        b"value",
    ];
    let digits = |b: &[u8]| b.iter().take_while(|c| c.is_ascii_digit()).count();
    HEADS.iter().filter_map(|h| k.strip_prefix(*h)).any(|rest| {
        let lead = digits(rest);
        let rest = &rest[lead..];
        let trail = rest.iter().rev().take_while(|b| b.is_ascii_digit()).count();
        let (tail, number) = rest.split_at(rest.len() - trail);
        lead <= 2 && number.len() <= 2 && TAILS.contains(&tail)
    })
}

/// What [`Value::Other`] says of an empty list, which asks for nothing where a list would ask for something (a
/// bracket key's `[]`).
pub const EMPTY_LIST: &str = "empty array";

/// A few senders' keys the alert has no field for and that change what an alert means, so they are never dropped
/// silently: read when present ([`Fields::set_guarded`]), refused where the service cannot do what they ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RareKey {
    /// TV-Hub's `isLimit`: a limit order at `price`.
    IsLimit,
    /// TV-Hub's `isMarket`: a market order.
    IsMarket,
    /// TV-Hub's `closeLong` (with `isClose`): the long side is the one to close.
    CloseLong,
    /// TV-Hub's `closeShort` (with `isClose`): the short side is the one to close.
    CloseShort,
    /// TradersPost's `quantityType`: `percent_of_position` sizes an exit as a part of the position, and anything
    /// but `fixed_quantity` makes a MODIFY's `quantity` other than a count of units.
    QuantityType,
    /// OKX's `investmentType`: `percentage_position` sizes an exit as the `amount` percent of the position.
    InvestmentType,
    /// 3Commas' `order.currency_type` (nested in its `order` object, [`Fields::set_order_object`]):
    /// `position_percent` sizes an exit as the `order.amount` percent of the position.
    CurrencyType,
    /// TV-Hub's `unitsType`: `percentPosition` sizes a close as the `units` (or `unitsPercent`) percent of the
    /// position (a scale-out).
    UnitsType,
    /// Alpaca's `position_intent` (`buy_to_open`, `buy_to_close`, `sell_to_open`, `sell_to_close`): whether the
    /// order opens or closes, and which side. Dropped, `sell` with `sell_to_close` (a long call closed) was traded
    /// by the strategy's rule for `sell` (a new short call), and `sell_to_open` sold a held long.
    PositionIntent,
    /// A size read only beside a percent-of-position key above (else the bot sizes the order): OKX's `amount`,
    /// 3Commas' `order.amount`, TV-Hub's `units` and `unitsPercent`.
    Amount,
    /// TradersPost's option selection (`optionType`, `strikesAway`, `strikePrice`, `strikeCount`,
    /// `intrinsicValue`, a top-level `expiration`): an option picked by the sender's rules.
    OptionChain,
    /// A contract, or a part of one, under a key of its own outside `legs` (Tradier's `option_symbol`, a `right` or
    /// `callPut`, an `exp`) or an order's legs under a broker's key (Tradier's `leg`, Schwab's
    /// `orderLegCollection`). Dropped, an internal-selection strategy bought its own pick (a call where a put was
    /// named), and a CLOSE naming one contract closed every position on the underlying.
    ContractKey,
    /// TV-Hub's `strategyComment`: one naming a close (`close`, `exit`, `flat`) makes TV-Hub close the position,
    /// whatever the other fields say.
    StrategyComment,
    /// Tastytrade's `price-effect` (`Credit`, `Debit`): whether a spread's positive `price` is received or paid.
    /// Dropped, a credit of 1.50 was sent as a debit of 1.50 (a bid to pay for a spread the sender meant to sell).
    PriceEffect,
    /// E*TRADE's `priceType` (`price_type`): its order type (`MARKET`, `LIMIT`), or a spread's price effect
    /// (`NET_CREDIT`, `NET_DEBIT`, `NET_EVEN`). Dropped, a credit of 1.50 was sent as a debit of 1.50.
    OrderPriceType,
    /// TV-Hub's `useLimitClose` (a close as a limit order at `price`) and `limitClosePercent` (a limit close at an
    /// offset from the market). Dropped, a take-profit close at 195 went out at market.
    LimitClose,
    /// TV-Hub's `cancelAllOrders` and `closeCurrentPosition`: set, they cancel every open order on the pair
    /// (entries and exits, both sides) or close the position whatever its side, before the trade. Dropped, an entry
    /// went out beside the working entry it was to replace, or added to the position it was to close. Read in part
    /// (as `cancel: true`, or beside closes only), each reading left some case wrong (the other side's entry left
    /// working, a MODIFY moving an order it was to cancel, a close refused): refused whole, naming what to send.
    /// (`cancelAllDcaOrders` only goes with a trailing stop, a bracket key refused on its own.)
    OrderReset,
    /// A broker's trading session (Schwab's `session`, E*TRADE's `marketSession`, IBKR's `outsideRth`): an
    /// extended one is refused as `extendedHours: true` is. Dropped, `session: SEAMLESS` went to the regular session.
    Session,
    /// TradersPost's `delay` (seconds, `+5 minutes`, or a time of day): it trades that much later. Dropped, the
    /// order went out at once, minutes before the sender meant it to.
    Delay,
    /// A limit order's lifetime: TradersPost's `cancelAfter` and TV-Hub's `cancelLimitOrderOffset` (cancel it after
    /// so many seconds), TV-Hub's `chaseLimitOrder` (re-price it at the moving touch, then at market). Dropped, the
    /// limit the sender gave up on rested for the day and filled hours later.
    LimitLifetime,
    /// TV-Hub's `updateCurrentLimitOrder`: it moves the working limit order to the touch (ignoring `price`), a
    /// change to an order, never a new one. Dropped, the body opened a second entry beside the working one.
    LimitUpdate,
}

fn rare_key(key: &str) -> Option<RareKey> {
    let mut buf = [0u8; 32];
    Some(match folded(key, &mut buf)? {
        b"islimit" => RareKey::IsLimit,
        b"ismarket" => RareKey::IsMarket,
        b"closelong" => RareKey::CloseLong,
        b"closeshort" => RareKey::CloseShort,
        b"quantitytype" => RareKey::QuantityType,
        b"investmenttype" => RareKey::InvestmentType,
        b"currencytype" => RareKey::CurrencyType,
        b"positionintent" => RareKey::PositionIntent,
        b"unitstype" => RareKey::UnitsType,
        b"amount" | b"units" | b"unitspercent" => RareKey::Amount,
        // A contract's strike, expiry or type at the top level (a leg's fields belong in `legs`): dropped, the
        // strategy's own contract traded, or shares on an equity strategy.
        b"optiontype" | b"strikesaway" | b"strikeprice" | b"strikecount" | b"intrinsicvalue" | b"expiration"
        | b"strike" | b"expiry" | b"expirationdate" | b"expirydate" | b"putcall" => RareKey::OptionChain,
        b"optionsymbol"
        | b"occsymbol"
        | b"contract"
        | b"option"
        | b"right"
        | b"callput"
        | b"exp"
        | b"expdate"
        | b"leg"
        | b"legcollection"
        | b"orderlegcollection"
        | b"optionlegs" => RareKey::ContractKey,
        b"strategycomment" => RareKey::StrategyComment,
        b"cancelallorders" | b"closecurrentposition" => RareKey::OrderReset,
        b"uselimitclose" | b"limitclosepercent" => RareKey::LimitClose,
        b"priceeffect" => RareKey::PriceEffect,
        b"pricetype" => RareKey::OrderPriceType,
        b"session" | b"marketsession" | b"outsiderth" => RareKey::Session,
        b"delay" => RareKey::Delay,
        b"cancelafter" | b"cancellimitorderoffset" | b"chaselimitorder" => RareKey::LimitLifetime,
        // `updateLimitOrderTimeInterval` only sets how often a chase re-prices: it asks nothing on its own.
        b"updatecurrentlimitorder" => RareKey::LimitUpdate,
        _ => return None,
    })
}

/// True for a key no alert field holds that must not be dropped silently: a bracket key ([`is_bracket_key`]) or
/// one of a few senders' own (`RareKey`). The parsers hand such a key to [`Fields::set_guarded`].
pub fn is_guarded_key(key: &str) -> bool {
    is_bracket_key(key) || rare_key(key).is_some()
}

/// True for a guarded key that is a size read only beside a percent-of-position key (`amount`, `units`): in free
/// words such a key is a size the sender wrote, refused as any unknown number is (`buy AAPL amount=50` traded the
/// bot's size).
pub fn is_percent_amount_key(key: &str) -> bool {
    rare_key(key) == Some(RareKey::Amount)
}

/// True for 3Commas' `order` object, read by [`Fields::set_order_object`].
pub(crate) fn is_order_object(key: &str) -> bool {
    key.trim().eq_ignore_ascii_case("order")
}

/// What [`RareKey`]s an alert carried, read: boxed, since few alerts carry any.
#[derive(Debug, Clone, Default)]
struct Rare<'a> {
    /// `isLimit: true` (limit) and `isMarket: true` (market), each with its key.
    order_types: Vec<(Cow<'a, str>, OrderType)>,
    /// `closeLong: true` and `closeShort: true`, each with its key.
    close_sides: Vec<(Cow<'a, str>, Direction)>,
    /// A flag whose value is no boolean: its key and value.
    bad_flag: Option<(Cow<'a, str>, String)>,
    /// The key of a `quantityType: percent_of_position`.
    percent_of_position: Option<Cow<'a, str>>,
    /// A `quantityType` other than a count of units (`dollar_amount`, `percent_of_equity`, …): its key and value.
    quantity_not_units: Option<(Cow<'a, str>, String)>,
    /// The key and value of a key sizing an exit as a percent of the position (OKX's `investmentType:
    /// percentage_position`, 3Commas' `order.currency_type: position_percent`, TV-Hub's `unitsType:
    /// percentPosition`).
    percentage_position: Option<(Cow<'a, str>, &'static str)>,
    /// The percent beside it (`amount`, `order.amount`, `units`, `unitsPercent`), as sent, with its key.
    amount: Option<(Cow<'a, str>, String)>,
    /// A second percent that differs from the first, with its key: which one sized the exit depended on the
    /// order of the keys.
    amount_twice: Option<(Cow<'a, str>, String)>,
    /// Alpaca's `position_intent` as sent, with its key.
    position_intent: Option<(Cow<'a, str>, String)>,
    /// The first option-selection key that asks for something.
    option_chain: Option<Cow<'a, str>>,
    /// The first [`RareKey::ContractKey`] that names something.
    contract_key: Option<Cow<'a, str>>,
    /// The first keys no field holds whose text is an option contract, with the contract, each contract once and
    /// at most [`UNREAD_CONTRACTS`]: refused by an option strategy unless it is the alert's own contract (see
    /// [`super::UnreadContract`]). Keeping only the first, a second contract after one repeating the alert's own
    /// was dropped, and the alert traded.
    unread_contracts: Vec<(Cow<'a, str>, Contract)>,
    /// A `strategyComment` naming a close: its key and value.
    closing_comment: Option<(Cow<'a, str>, String)>,
    /// The first of TV-Hub's order resets set true: its key.
    order_reset: Option<Cow<'a, str>>,
    /// TV-Hub's `useLimitClose: true`: its key.
    limit_close: Option<Cow<'a, str>>,
    /// TV-Hub's `limitClosePercent` asking for an offset: its key.
    limit_close_offset: Option<Cow<'a, str>>,
    /// Every `price-effect` as sent, with its key (two that differ contradict each other).
    price_effects: Vec<(Cow<'a, str>, String)>,
    /// E*TRADE's `priceType` that is no price effect (an order type, or not), with its key: the first, and the
    /// first that says otherwise.
    price_types: Vec<(Cow<'a, str>, String)>,
    /// The first session key asking for an extended session (`session: SEAMLESS`, `outsideRth: true`), with its
    /// value as sent.
    extended_session: Option<(Cow<'a, str>, String)>,
    /// The first `marketSession` that is neither `REGULAR` nor `EXTENDED`, with its key.
    unknown_market_session: Option<(Cow<'a, str>, String)>,
    /// The first timing key asking for something ([`RareKey::Delay`], [`RareKey::LimitUpdate`]): its kind and key.
    timing: Option<(RareKey, Cow<'a, str>)>,
    /// The first limit-lifetime key asking for something ([`RareKey::LimitLifetime`]): refused unless the alert's
    /// order is a market one, which no such key changes.
    lifetime: Option<Cow<'a, str>>,
}

/// A flag's value: a JSON boolean, or the words true/false, 1/0 (empty is false). `None`: no flag.
fn flag_value(v: &Value<'_>) -> Option<bool> {
    let t = match v {
        Value::Bool(b) => return Some(*b),
        Value::Text(t) => super::trim(t),
        Value::Number(n) => n,
        Value::Null | Value::Other(_) => return None,
    };
    if t.eq_ignore_ascii_case("true") || t == "1" {
        Some(true)
    } else if t.eq_ignore_ascii_case("false") || t == "0" || t.is_empty() {
        Some(false)
    } else {
        None
    }
}

/// Whether a bracket key's value asks for anything. Senders fill templates with every
/// key and leave the unused ones empty, so null, `false`, `""`, zero and the words that
/// charting platforms print for "no value" (`NaN`, `na`, `none`, `off`) ask for nothing;
/// Alpaca's `order_class` asks for nothing when it is `simple`.
/// Why an alert asking for a stop, a take-profit or a limit price under a key this reader does not take is refused.
fn bracket_refused(key: &str) -> ParseError {
    let mut buf = [0u8; 32];
    if folded(key, &mut buf) == Some(b"limit") {
        return ParseError::Unsupported(format!(
            "`{}`: a limit price is read from `price` (with `order_type: limit`), not from `{0}`; sent as it is, the \
             order would go out without it",
            snippet(key)
        ));
    }
    ParseError::Unsupported(format!(
        "`{}`: stop and bracket orders (stop loss, take profit, trailing stop) are not supported; \
         send the exit as its own alert when it is due",
        snippet(key)
    ))
}

fn asks_for_bracket(key: &str, value: &Value<'_>) -> bool {
    let text = match value {
        Value::Null | Value::Bool(false) | Value::Other(EMPTY_LIST) => return false,
        Value::Bool(true) | Value::Other(_) => return true,
        Value::Text(t) => t.trim(),
        Value::Number(n) => n,
    };
    const NOTHING: [&str; 7] = ["", "nan", "na", "none", "null", "false", "off"];
    if NOTHING.iter().any(|w| text.eq_ignore_ascii_case(w)) || decimal::parse(text).is_some_and(|d| d.is_zero()) {
        return false;
    }
    let mut buf = [0u8; 32];
    !(folded(key, &mut buf) == Some(b"orderclass") && text.eq_ignore_ascii_case("simple"))
}

#[derive(Debug, Clone)]
struct Field<'a> {
    key: Cow<'a, str>,
    value: Value<'a>,
}

/// [`Fields`] dropped by [`Fields::clear`], which drops the few slots that own memory rather than all 28 (see
/// there): what the JSON scan collects a usual alert into.
#[derive(Default)]
pub(crate) struct Scratch<'a>(std::mem::ManuallyDrop<Fields<'a>>);

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

impl<'a> std::ops::Deref for Scratch<'a> {
    type Target = Fields<'a>;
    fn deref(&self) -> &Fields<'a> {
        &self.0
    }
}

impl<'a> std::ops::DerefMut for Scratch<'a> {
    fn deref_mut(&mut self) -> &mut Fields<'a> {
        &mut self.0
    }
}

/// 1 when a pair holds memory of its own (a key or text built rather than borrowed from the body).
// The key's `Cow` is the point: whether it is owned.
#[allow(clippy::ptr_arg)]
fn owns(key: &Cow<'_, str>, value: &Value<'_>) -> u32 {
    u32::from(matches!(key, Cow::Owned(_)) || matches!(value, Value::Text(Cow::Owned(_))))
}

/// Key/value pairs collected from a body, ready to become alerts.
#[derive(Debug, Clone, Default)]
pub struct Fields<'a> {
    slots: [Option<Field<'a>>; Name::ALL.len()],
    legs: Option<Vec<Leg>>,
    /// The first key that asked for a bracket, as the sender wrote it.
    bracket: Option<Cow<'a, str>>,
    /// No value holds a brace, so none is an unresolved placeholder.
    no_braces: bool,
    /// The few senders' keys no field holds ([`RareKey`]), when the alert carried any.
    rare: Option<Box<Rare<'a>>>,
    /// Bit `i` set once `slots[i]` was given an owned key or value: [`Fields::clear`] drops those alone.
    owned: u32,
}

// Every slot has its bit in `owned`.
const _: () = assert!(Name::ALL.len() <= 32);

impl<'a> Fields<'a> {
    /// Records one pair. Unknown keys are ignored (returns `Ok(false)`); a second value
    /// for the same field that differs from the first is a conflict.
    pub fn set(&mut self, key: Cow<'a, str>, value: Value<'a>) -> Result<bool, ParseError> {
        let Some(name) = Name::from_key(&key) else {
            if is_guarded_key(&key) {
                self.set_guarded(key, &value);
            } else {
                self.set_unread(key, &value);
            }
            return Ok(false);
        };
        self.set_named(name, key, value)?;
        Ok(true)
    }

    /// Records a value for a known field.
    // Inlined, with the rare second value out of line: the value is then built straight
    // into its slot, where passing it through memory to a call stalled on reading back what
    // had just been written.
    #[inline(always)]
    pub fn set_named(&mut self, name: Name, key: Cow<'a, str>, value: Value<'a>) -> Result<(), ParseError> {
        // PickMyTrade's `data` is its action word; elsewhere `data` is often a nested
        // object of the sender's own, which says nothing about the trade.
        if name == Name::ActionAlt && !matches!(value, Value::Text(_)) {
            return Ok(());
        }
        let slot = &mut self.slots[name.index()];
        if slot.is_none() {
            self.owned |= owns(&key, &value) << name.index();
            // The slot is empty: what `replace` hands back is `None`, nothing to drop. Assigned over, the empty
            // slot went through the fields' drop glue, a call per field.
            std::mem::forget(slot.replace(Field { key, value }));
            return Ok(());
        }
        self.set_again(name, key, value)
    }

    /// [`Fields::set_named`] for a field that already has a value.
    #[inline(never)]
    fn set_again(&mut self, name: Name, key: Cow<'a, str>, value: Value<'a>) -> Result<(), ParseError> {
        let slot = &mut self.slots[name.index()];
        match slot {
            Some(prev) if !agree(name, &prev.value, &value) => {
                if matches!(prev.value, Value::Null) {
                    self.owned |= owns(&key, &value) << name.index();
                    *slot = Some(Field { key, value });
                    return Ok(());
                }
                if matches!(value, Value::Null) {
                    return Ok(());
                }
                Err(ParseError::Conflict {
                    first: prev.key.to_string(),
                    second: key.to_string(),
                    first_value: snippet(&display(&prev.value)),
                    second_value: snippet(&display(&value)),
                })
            }
            Some(_) => Ok(()),
            None => {
                self.owned |= owns(&key, &value) << name.index();
                *slot = Some(Field { key, value });
                Ok(())
            }
        }
    }

    /// Records 3Commas' `order` object (`{"amount": 50, "currency_type": "position_percent", "order_type":
    /// "limit", "price": "180"}`): its order type and limit price as the alert's own, and its size where it makes
    /// the exit a part of the position (refused). Skipped, a limit entry at 180 went out at market and a half exit
    /// closed the whole. A price relative to the market (`price_percent`) is refused; other keys are not read, as
    /// 3Commas does not read keys it does not document.
    pub fn set_order_object<I>(&mut self, pairs: I) -> Result<(), ParseError>
    where
        I: IntoIterator<Item = (Cow<'a, str>, Value<'a>)>,
    {
        for (k, v) in pairs {
            let mut buf = [0u8; 32];
            let shown = || Cow::Owned(format!("order.{}", k.trim()));
            match folded(&k, &mut buf) {
                Some(b"amount") => self.set_rare(RareKey::Amount, shown(), &v),
                Some(b"currencytype") => self.set_rare(RareKey::CurrencyType, shown(), &v),
                Some(b"ordertype") => self.set_named(Name::OrderType, shown(), v)?,
                Some(b"price") => self.set_named(Name::Price, shown(), v)?,
                Some(b"pricepercent") if asks_for_bracket(&k, &v) => {
                    return Err(ParseError::Unsupported(format!(
                        "`{}`: a limit price relative to the market is not supported; send the limit price itself \
                         (`order.price`)",
                        snippet(&shown())
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Records a key no field holds ([`is_guarded_key`]). A bracket key whose value asks for a stop loss, take
    /// profit or trailing stop makes [`Fields::build`] refuse the alert naming the key: trading it without the
    /// protection its sender asked for would be worse than not trading it. A `RareKey` is read for what it
    /// asks, and refused where the service cannot do it.
    pub fn set_guarded(&mut self, key: Cow<'a, str>, value: &Value<'_>) {
        if let Some(rare) = rare_key(&key) {
            self.set_rare(rare, key, value);
            return;
        }
        if self.bracket.is_none() && asks_for_bracket(&key, value) {
            self.bracket = Some(key);
        }
    }

    /// Records a key no field holds and no guard names: one whose text is an option contract is kept, so that an
    /// option strategy refuses the alert (dropped, the contract named under `symbol_name` or a sender's own key was
    /// never traded, and the strategy's own pick, or every position on the underlying, was).
    pub fn set_unread(&mut self, key: Cow<'a, str>, value: &Value<'_>) {
        let Value::Text(t) = value else { return };
        if self.rare.as_ref().is_some_and(|r| r.unread_contracts.len() >= UNREAD_CONTRACTS) {
            return;
        }
        if let Some(c) = unread_contract(t) {
            let kept = &mut self.rare.get_or_insert_with(Box::default).unread_contracts;
            if kept.iter().all(|(_, k)| *k != c) {
                kept.push((key, c));
            }
        }
    }

    #[inline(never)]
    fn set_rare(&mut self, kind: RareKey, key: Cow<'a, str>, value: &Value<'_>) {
        // A template that fills every key leaves the unused ones null: they ask for nothing.
        if matches!(value, Value::Null) {
            return;
        }
        let rare = self.rare.get_or_insert_with(Box::default);
        let flag = |rare: &mut Rare<'a>, key: Cow<'a, str>| match flag_value(value) {
            Some(on) => Some((key, on)),
            None => {
                rare.bad_flag.get_or_insert((key, snippet(&display(value))));
                None
            }
        };
        match kind {
            RareKey::IsLimit | RareKey::IsMarket => {
                if let Some((key, true)) = flag(rare, key) {
                    let t = if kind == RareKey::IsLimit { OrderType::Limit } else { OrderType::Market };
                    rare.order_types.push((key, t));
                }
            }
            RareKey::LimitClose => {
                let mut buf = [0u8; 32];
                if folded(&key, &mut buf) == Some(b"limitclosepercent") {
                    if asks_for_bracket(&key, value) {
                        rare.limit_close_offset.get_or_insert(key);
                    }
                } else if let Some((key, true)) = flag(rare, key) {
                    rare.limit_close.get_or_insert(key);
                }
            }
            RareKey::CloseLong | RareKey::CloseShort => {
                if let Some((key, true)) = flag(rare, key) {
                    let d = if kind == RareKey::CloseLong { Direction::Long } else { Direction::Short };
                    rare.close_sides.push((key, d));
                }
            }
            RareKey::QuantityType => {
                let asks = matches!(value, Value::Text(t) if t.trim().eq_ignore_ascii_case("percent_of_position"));
                let said = display(value);
                let mut buf = [0u8; 32];
                let units = matches!(folded(&said, &mut buf), Some(b"" | b"fixedquantity"));
                if !units {
                    rare.quantity_not_units.get_or_insert_with(|| (key.clone(), snippet(&said)));
                }
                if asks {
                    rare.percent_of_position.get_or_insert(key);
                }
            }
            RareKey::InvestmentType | RareKey::CurrencyType | RareKey::UnitsType => {
                let word = match kind {
                    RareKey::InvestmentType => "percentage_position",
                    RareKey::CurrencyType => "position_percent",
                    _ => "percentPosition",
                };
                let asks = matches!(value, Value::Text(t) if t.trim().eq_ignore_ascii_case(word));
                if asks {
                    rare.percentage_position.get_or_insert((key, word));
                }
            }
            RareKey::PositionIntent => {
                rare.position_intent.get_or_insert_with(|| (key, display(value).trim().to_owned()));
            }
            RareKey::Amount => {
                let sent = display(value).trim().to_owned();
                match &rare.amount {
                    None => rare.amount = Some((key, sent)),
                    Some((_, first)) => {
                        let same = match (crate::decimal::parse(first), crate::decimal::parse(&sent)) {
                            (Some(a), Some(b)) => a == b,
                            _ => *first == sent,
                        };
                        if !same && rare.amount_twice.is_none() {
                            rare.amount_twice = Some((key, sent));
                        }
                    }
                }
            }
            RareKey::OptionChain => {
                // Left empty by a template that fills every key, it asks for nothing.
                if asks_for_bracket(&key, value) {
                    rare.option_chain.get_or_insert(key);
                }
            }
            RareKey::ContractKey => {
                if asks_for_bracket(&key, value) {
                    rare.contract_key.get_or_insert(key);
                }
            }
            RareKey::OrderReset => {
                if let Some((key, true)) = flag(rare, key) {
                    rare.order_reset.get_or_insert(key);
                }
            }
            // E*TRADE's `priceType` holds its order type where it holds no mark: kept to check against the alert's.
            RareKey::OrderPriceType if effect_of(&display(value)).is_none() => {
                let said = display(value);
                let same = |a: &str| match (OrderType::from_word(a), OrderType::from_word(&said)) {
                    (Some(x), Some(y)) => x == y,
                    _ => a.trim().eq_ignore_ascii_case(said.trim()),
                };
                if rare.price_types.is_empty() || (rare.price_types.len() == 1 && !same(&rare.price_types[0].1)) {
                    rare.price_types.push((key, said));
                }
            }
            RareKey::PriceEffect | RareKey::OrderPriceType => {
                // The first mark, and the first that reads otherwise: enough to refuse two that differ, however many
                // times the key is repeated.
                let said = display(value);
                let differs = |(_, v): &(Cow<'_, str>, String)| effect_of(v) != effect_of(&said);
                if rare.price_effects.is_empty() || (rare.price_effects.len() == 1 && differs(&rare.price_effects[0])) {
                    rare.price_effects.push((key, said));
                }
            }
            RareKey::Session => {
                let mut buf = [0u8; 32];
                let said = display(value);
                let extended = match folded(&key, &mut buf) {
                    Some(b"outsiderth") => matches!(flag(rare, key.clone()), Some((_, true))),
                    Some(b"marketsession") => {
                        let extended = said.trim().eq_ignore_ascii_case("extended");
                        let regular = said.trim().eq_ignore_ascii_case("regular") || said.trim().is_empty();
                        if !extended && !regular {
                            rare.unknown_market_session.get_or_insert_with(|| (key.clone(), snippet(&said)));
                        }
                        extended
                    }
                    // Schwab's words only: any other `session` is a sender's own (a session's name), not the broker's.
                    _ => ["am", "pm", "seamless", "extended"].iter().any(|w| said.trim().eq_ignore_ascii_case(w)),
                };
                if extended {
                    rare.extended_session.get_or_insert_with(|| (key, snippet(&said)));
                }
            }
            RareKey::Delay | RareKey::LimitLifetime | RareKey::LimitUpdate => {
                // Zero, `false` and empty ask for nothing: a template that fills every key sends them so.
                if asks_for_bracket(&key, value) {
                    if kind == RareKey::LimitLifetime {
                        rare.lifetime.get_or_insert(key);
                    } else {
                        rare.timing.get_or_insert((kind, key));
                    }
                }
            }
            RareKey::StrategyComment => {
                if let Value::Text(t) = value {
                    let lower = t.to_ascii_lowercase();
                    if ["close", "exit", "flat"].iter().any(|w| lower.contains(w)) {
                        rare.closing_comment.get_or_insert((key, snippet(t)));
                    }
                }
            }
        }
    }

    /// What the [`RareKey`]s an alert carried ask that no field says: refusals first, then the order type of
    /// TV-Hub's `isLimit`/`isMarket` and the side of its `closeLong`/`closeShort`.
    fn rare_asks(&self) -> Result<(Option<OrderType>, Option<Direction>), ParseError> {
        let Some(rare) = self.rare.as_deref() else { return Ok((None, None)) };
        if let Some(key) = &rare.option_chain {
            return Err(ParseError::Unsupported(format!(
                "`{}`: option selection by the sender (type, strikes, expiration) is not supported; send the option's \
                 ticker (`SPY 250620P00590000`) or its `legs`, or let the strategy's `options` pick it",
                snippet(key)
            )));
        }
        if let Some(key) = &rare.contract_key {
            let key = snippet(key);
            return Err(ParseError::Unsupported(format!(
                "`{key}` is not read: an option contract is named by the alert's ticker (`SPY 240126P00480000`) or in \
                 its `legs` (each by `symbol`, or by `side`, `strike` and `expiration`); send the contract there, or \
                 leave `{key}` out"
            )));
        }
        if let Some(key) = &rare.order_reset {
            return Err(ParseError::Unsupported(format!(
                "`{}: true` is not read: it cancels every open order on the pair (entries and exits, both sides) or \
                 closes the position whatever its side, before the trade; send the alert without it (a close pulls \
                 the position's working exits first), with `cancel: true` to pull the working entries first, or \
                 close with an alert of its own",
                snippet(key)
            )));
        }
        if let Some((kind, key)) = &rare.timing {
            let key = snippet(key);
            return Err(ParseError::Unsupported(match kind {
                RareKey::Delay => {
                    format!("`{key}`: delayed execution is not supported: send the alert when it is due")
                }
                _ => format!(
                    "`{key}` moves the working limit order to the market, which is not supported; send a MODIFY \
                     with the new `price` instead"
                ),
            }));
        }
        if let Some((key, value)) = &rare.bad_flag {
            return Err(ParseError::InvalidField {
                field: key.to_string(),
                value: value.clone(),
                expected: "true or false",
            });
        }
        if let Some(key) = &rare.percent_of_position {
            // The whole position is a CLOSE; any other part of it is a partial close.
            let whole = self.get(Name::Quantity).and_then(|f| number(f).ok()).is_some_and(|q| q == Decimal::from(100));
            if !whole {
                return Err(ParseError::Unsupported(format!(
                    "partial closes are not supported: `{}: percent_of_position` sizes the exit as a part of the \
                     position; exit the whole position instead (leave `{}` out, or send a quantity of 100)",
                    snippet(key),
                    snippet(key)
                )));
            }
        }
        if let Some((key, word)) = &rare.percentage_position {
            if let (Some((first_key, first)), Some((second_key, second))) = (&rare.amount, &rare.amount_twice) {
                return Err(ParseError::Conflict {
                    first: first_key.to_string(),
                    second: second_key.to_string(),
                    first_value: snippet(first),
                    second_value: snippet(second),
                });
            }
            // An exit of a part of the position (OKX, 3Commas, TV-Hub): read as the whole, an amount of 50 sold it
            // all.
            let amount = rare.amount.as_ref();
            let whole = amount.and_then(|(_, a)| crate::decimal::parse(a));
            if whole != Some(Decimal::from(100)) {
                let (amount_key, sent) = match amount {
                    Some((k, a)) => (snippet(k), snippet(a)),
                    None => ("the percent".to_owned(), "missing".to_owned()),
                };
                return Err(ParseError::Unsupported(format!(
                    "partial closes are not supported: `{}: {word}` with `{amount_key}` {sent} sizes the exit as a \
                     part of the position; exit the whole position instead (a percent of 100)",
                    snippet(key),
                )));
            }
        }
        // Two flags of one kind set (`isLimit` and `isMarket`, `closeLong` and `closeShort`) contradict each other.
        // One flag given twice, or under two spellings (`isLimit`, `is_limit`), says one thing once, as any other
        // field given twice alike does: refused, the sender's one limit order was never placed.
        let both = |a: &str, b: &str| ParseError::Conflict {
            first: a.to_owned(),
            second: b.to_owned(),
            first_value: "true".into(),
            second_value: "true".into(),
        };
        fn differing<K, T: PartialEq>(said: &[(K, T)]) -> Option<(&K, &K)> {
            let (a, first) = said.first()?;
            said.iter().find(|(_, t)| t != first).map(|(b, _)| (a, b))
        }
        if let Some((a, b)) = differing(&rare.order_types) {
            return Err(both(a, b));
        }
        if let Some((a, b)) = differing(&rare.close_sides) {
            return Err(both(a, b));
        }
        Ok((rare.order_types.first().map(|(_, t)| *t), rare.close_sides.first().map(|(_, d)| *d)))
    }

    /// Refuses a broker's extended session asked for (`session: SEAMLESS`, `marketSession: EXTENDED`,
    /// `outsideRth: true`), as `extendedHours: true` is: the service sends every order to the regular session.
    fn regular_session(&self) -> Result<(), ParseError> {
        let Some(rare) = self.rare.as_deref() else { return Ok(()) };
        if let Some((key, said)) = &rare.extended_session {
            return Err(ParseError::Unsupported(format!(
                "`{}: {said}`: extended-hours orders are not supported; orders go to the regular session (leave `{0}` \
                 out, or send the regular session's word)",
                snippet(key)
            )));
        }
        if let Some((key, said)) = &rare.unknown_market_session {
            return Err(ParseError::InvalidField {
                field: key.to_string(),
                value: said.clone(),
                expected: "REGULAR (extended-hours orders are not supported)",
            });
        }
        Ok(())
    }

    /// The order type TV-Hub's `useLimitClose: true` asks of a close: a limit at the alert's `price` (none refuses
    /// the limit where it is decided). Beside anything but a close it is refused: TV-Hub applies it to the close of
    /// the other side an entry makes first, which a reversal here would send at market. `limitClosePercent` (a
    /// limit at an offset from the market) is refused. Without `useLimitClose`, a close with `isLimit` goes out at
    /// market, as TV-Hub sends it ("`useLimitClose: true` is the only way to exit a position via limit"): read as a
    /// limit at `price`, the close rested while the price ran away from it.
    fn limit_close(
        &self,
        action: Option<ActionKind>,
        flag_type: Option<OrderType>,
    ) -> Result<Option<OrderType>, ParseError> {
        let Some(rare) = self.rare.as_deref() else { return Ok(flag_type) };
        if let Some(key) = &rare.limit_close_offset {
            return Err(ParseError::Unsupported(format!(
                "`{}`: a limit close at an offset from the market is not supported; send the close's `price` with \
                 `useLimitClose: true`, or close at market",
                snippet(key)
            )));
        }
        let closes = matches!(action, Some(ActionKind::Canonical(Action::Close) | ActionKind::Word(ActionWord::Exit)));
        let Some(key) = &rare.limit_close else {
            return Ok(match flag_type {
                Some(OrderType::Limit) if closes => Some(OrderType::Market),
                t => t,
            });
        };
        if !closes {
            return Err(ParseError::Unsupported(format!(
                "`{}: true` asks for a limit close, and this alert is no close (`isClose`); send it without it",
                snippet(key)
            )));
        }
        if flag_type == Some(OrderType::Market) {
            return Err(ParseError::Conflict {
                first: key.to_string(),
                second: "isMarket".into(),
                first_value: "true".into(),
                second_value: "true".into(),
            });
        }
        Ok(Some(OrderType::Limit))
    }

    /// The action and direction as Alpaca's `position_intent` says them (`sell_to_close`: CLOSE LONG), where the
    /// alert has one; it must agree with the alert's own action word and direction, or the alert is refused naming
    /// both.
    fn position_intent(
        &self,
        action: Option<ActionKind>,
        direction: Option<Direction>,
    ) -> Result<(Option<ActionKind>, Option<Direction>), ParseError> {
        let Some((key, said)) = self.rare.as_deref().and_then(|r| r.position_intent.as_ref()) else {
            return Ok((action, direction));
        };
        // Beside a market position (TradersPost's `sentiment`, TradingView's positions), which decides partial closes,
        // reversals and entries beside `flat` from the action word: read as a CLOSE or OPEN, a `sell` leaving a long
        // of 5 (refused as a partial close) sold the whole position.
        if let Some(f) = self.get(Name::MarketPosition).or_else(|| self.get(Name::PrevMarketPosition)) {
            return Err(ParseError::Unsupported(format!(
                "`{}` beside `{}` is not read: the market position already says what the alert does; send one or the \
                 other",
                snippet(key),
                snippet(&f.key)
            )));
        }
        let mut buf = [0u8; 32];
        let (open, buy, side) = match folded(said, &mut buf) {
            Some(b"buytoopen") => (true, true, Direction::Long),
            Some(b"selltoclose") => (false, false, Direction::Long),
            Some(b"selltoopen") => (true, false, Direction::Short),
            Some(b"buytoclose") => (false, true, Direction::Short),
            _ => {
                return Err(ParseError::InvalidField {
                    field: key.to_string(),
                    value: snippet(said),
                    expected: "buy_to_open, buy_to_close, sell_to_open or sell_to_close",
                })
            }
        };
        let agrees = match action {
            None => true,
            Some(ActionKind::Word(ActionWord::Buy)) => buy,
            Some(ActionKind::Word(ActionWord::Sell)) => !buy,
            Some(ActionKind::Canonical(Action::Open) | ActionKind::Word(ActionWord::Entry)) => open,
            Some(ActionKind::Canonical(Action::Close) | ActionKind::Word(ActionWord::Exit)) => !open,
            Some(_) => false,
        } && direction.map_or(true, |d| d == side);
        if !agrees {
            let first = self.get(Name::Action).or_else(|| self.get(Name::ActionAlt));
            let first = first.or_else(|| self.order_type_action().map(|(f, _)| f));
            return Err(ParseError::Conflict {
                first: first.map_or_else(|| "direction".to_owned(), |f| f.key.to_string()),
                second: key.to_string(),
                first_value: format!(
                    "{} {}",
                    action.map_or("no action", ActionKind::as_str),
                    direction.map_or("", Direction::as_str)
                )
                .trim_end()
                .to_owned(),
                second_value: snippet(said),
            });
        }
        let canonical = if open { Action::Open } else { Action::Close };
        Ok((Some(ActionKind::Canonical(canonical)), Some(side)))
    }

    /// The unresolved placeholders (field, placeholder) in the fields the alert reads. Only when some value
    /// holds a brace: most hold none, and pay nothing for the check.
    #[inline(never)]
    fn unresolved(&self) -> Vec<(String, String)> {
        let mut unresolved: Vec<(String, String)> = Vec::new();
        // The fields only a MODIFY (its size) or a MODIFY and a CANCEL (the order they act on) read: in any other
        // alert they are ignored (the spec: `quantity` and `notional` are ignored on entries), and a placeholder
        // left in one refused an exit that did not read it. An action that cannot be read keeps them checked.
        let action = self.get(Name::Action).or_else(|| self.get(Name::ActionAlt));
        let action = action.and_then(|f| match &f.value {
            Value::Text(t) => ActionKind::from_word(t),
            _ => None,
        });
        let reads_size = !matches!(action, Some(a) if a != ActionKind::Canonical(Action::Modify));
        let reads_order = reads_size || action == Some(ActionKind::Canonical(Action::Cancel));
        for name in Name::ALL {
            // A fallback the alert does not use (a `pair` beside a `ticker`) is not read.
            let unused = match name {
                Name::SentAt | Name::Time => true,
                Name::Quantity | Name::Notional => !reads_size,
                Name::Target | Name::OrderId => !reads_order,
                Name::InstrumentAlt => self.get(Name::Instrument).is_some(),
                Name::ActionAlt => self.get(Name::Action).is_some(),
                // Read only when it names an order type, which a placeholder does not.
                Name::OrderTypeAlt => true,
                _ => false,
            };
            if unused {
                continue;
            }
            if let Some(Field { key, value: Value::Text(t) }) = self.get(name) {
                // A GUID in braces (.NET's `Guid.ToString("B")`) is an id, not a template's leftover.
                if name == Name::MessageId && is_braced_guid(t) {
                    continue;
                }
                if let Some(p) = find_placeholder(t) {
                    unresolved.push((key.to_string(), p));
                }
            }
        }
        unresolved
    }

    /// Sets the option legs (JSON only). More than [`MAX_LEGS`] is its own error; legs of
    /// unequal sizes (a ratio spread) are refused.
    pub fn set_legs(&mut self, mut legs: Vec<Leg>) -> Result<(), ParseError> {
        if legs.len() > MAX_LEGS {
            return Err(ParseError::TooManyLegs(legs.len()));
        }
        // Every order is built with one contract per leg per unit: legs sent at 1 and 2
        // would otherwise trade as a plain spread, a structure the sender did not ask for.
        // Equal sizes are the order's size, which the bot's sizing sets; a leg without one
        // stands at 1 beside legs that give theirs.
        if let Some(first) = legs.iter().find_map(|l| l.size) {
            let unequal = legs.iter().any(|l| l.size.is_some_and(|s| s != first))
                || (first != Decimal::ONE && legs.iter().any(|l| l.size.is_none()));
            if unequal {
                return Err(unequal_legs());
            }
        }
        // Equal sizes say nothing the bot's sizing does not: the canonical alert carries none, so it renders
        // and parses back to itself.
        for leg in &mut legs {
            leg.size = None;
        }
        // Two `legs` that differ are two structures: refused like any other repeated field that disagrees (the
        // last one won, so which structure traded turned on key order).
        if let Some(first) = self.legs.as_ref().filter(|first| **first != legs) {
            return Err(ParseError::Conflict {
                first: "legs".into(),
                second: "legs".into(),
                first_value: snippet(&format!("{} legs", first.len())),
                second_value: snippet(&format!("{} other legs", legs.len())),
            });
        }
        self.legs = Some(legs);
        Ok(())
    }

    /// Tells that no value holds a brace (the JSON scan saw every byte), so [`Fields::build`]
    /// need not look for placeholders.
    pub(crate) fn without_braces(&mut self) {
        self.no_braces = true;
    }

    fn get(&self, name: Name) -> Option<&Field<'a>> {
        self.slots[name.index()].as_ref().filter(|f| !matches!(f.value, Value::Null))
    }

    /// The sender's message id alone (`metadata.message_id`), when it reads as one: what
    /// the dedup key is made of for a body whose alert does not build.
    pub(crate) fn message_id(&self) -> Option<CompactString> {
        self.get(Name::MessageId).and_then(|f| message_id(f).ok().flatten())
    }

    /// Turns the pairs into canonical alerts.
    pub fn build(mut self) -> Result<Alerts, ParseError> {
        self.build_in_place()
    }

    /// Drops what the pairs own, for a [`Scratch`]: only the slots whose bit `owned` has set are dropped; the others borrow all they hold. The drop glue of all
    /// 28 slots, each checked for an owned key and an owned value, cost a usual JSON alert's parse about 4 %
    /// (some 300 instructions by callgrind). Every write to a slot sets its bit when it owns memory, so nothing
    /// owned is left behind; a slot written without it (a future writer missing its bit) would leak, never be
    /// read freed, and the debug assertion finds it in the tests.
    fn clear(&mut self) {
        let mut owned = self.owned;
        while owned != 0 {
            self.slots[owned.trailing_zeros() as usize] = None;
            owned &= owned - 1;
        }
        self.owned = 0;
        self.legs = None;
        self.bracket = None;
        self.rare = None;
        debug_assert!(
            self.slots.iter().flatten().all(|f| owns(&f.key, &f.value) == 0),
            "a slot given an owned key or value without its bit in `owned`"
        );
    }

    /// [`Fields::build`] without moving the (large) value: the legs are taken out, the
    /// rest is left as it was.
    pub(crate) fn build_in_place(&mut self) -> Result<Alerts, ParseError> {
        if let Some(key) = &self.bracket {
            return Err(bracket_refused(key));
        }
        // Every field the alert uses is checked for placeholders first, so the sender
        // hears about `{{ticker}}` rather than about a symbol that looks odd.
        // Every one is named, so a template with several (`{{strategy.order.action}}`,
        // `{{plot_0}}`) is fixed in one go. A time the alert only reports is not checked:
        // an unreadable one is kept as such, refused only where `max_alert_age` needs it.
        let mut unresolved = if self.no_braces { Vec::new() } else { self.unresolved() };
        match unresolved.len() {
            0 => {}
            1 => {
                let (field, placeholder) = unresolved.remove(0);
                return Err(ParseError::Placeholder { field, placeholder });
            }
            _ => return Err(ParseError::Placeholders(unresolved)),
        }
        if let Some(f) = self.get(Name::ExtendedHours) {
            if flag(f)? {
                return Err(ParseError::Unsupported(format!(
                    "`{}`: extended-hours orders are not supported; orders go to the regular session \
                     (send `{}: false`, or leave it out)",
                    snippet(&f.key),
                    snippet(&f.key)
                )));
            }
        }
        self.regular_session()?;

        let (instrument, contract) = match self.get(Name::Instrument).or_else(|| self.get(Name::InstrumentAlt)) {
            None => {
                // A pairs body whose action is no action word (`Signal: buy AAPL long`) is told so first: told of the
                // missing instrument, the sender added one and was refused again, for the action.
                if let Some(f) = self.get(Name::Action).or_else(|| self.get(Name::ActionAlt)) {
                    word(f, action_word, ACTION_WORDS)?;
                }
                return Err(ParseError::MissingInstrument);
            }
            Some(f) => {
                // An option contract may be written with a space (TradersPost's `SPY 250624C596`).
                // Never for a spread symbol, whose last leg alone would pass for the alert's one contract.
                let symbol = instrument(f).or_else(|e| {
                    let raw = text(f, "").ok().filter(|raw| !names_two_instruments(raw));
                    raw.map(normalize_instrument).filter(|s| Contract::parse(s).is_some()).ok_or(e)
                })?;
                // TradingView names an option by its own ticker (`SPY261218C600.0`): the
                // alert is then on the underlying, with that contract as its one leg.
                match Contract::parse(&symbol) {
                    Some(_) if self.legs.as_ref().is_some_and(|l| !l.is_empty()) => {
                        return Err(invalid(
                            f,
                            symbol.to_string(),
                            "the underlying's symbol (SPY, not SPY261218C600.0) when the alert has `legs`",
                        ))
                    }
                    Some(c) => (CompactString::new(&c.root), Some(c)),
                    None => (symbol, None),
                }
            }
        };
        // A fallback (`pair`, PickMyTrade's `data`) beside the field it stands in for is read only to check it says
        // the same: dropped, `buy AAPL pair=TSLA` bought AAPL and `data=sell` beside `action: buy` bought. Two
        // spellings of one pair agree (`BTCUSD`, `BTC/USD`); a `data` that is no action word is a note.
        self.fallbacks_agree()?;
        // `from_flags`: the action is TV-Hub's way of saying it (`isBuy`, `isSell`, `isClose`, `orderType: buy`).
        let typed = self.order_type_action();
        let (action, implied, from_flags) = match self.get(Name::Action).or_else(|| self.get(Name::ActionAlt)) {
            Some(f) => {
                let (a, d) = word(f, action_word, ACTION_WORDS)?;
                // `orderType: buy` beside an action must say the same, as the flags must.
                if let Some((o, _)) = typed.filter(|(_, said)| *said != a) {
                    return Err(disagree(f, o));
                }
                // TV-Hub's flags beside an action must say the same: dropped, `buy` with `isClose` (a template
                // given an `action` covering a short) opened a long.
                if let Some((flagged, said)) = self.flags()? {
                    let agrees = said == a
                        || (said == ActionKind::Canonical(Action::Close) && a == ActionKind::Word(ActionWord::Exit));
                    if !agrees {
                        return Err(ParseError::Conflict {
                            first: f.key.to_string(),
                            second: flagged.key.to_string(),
                            first_value: snippet(&display(&f.value)),
                            second_value: "true".into(),
                        });
                    }
                }
                (Some(a), d, false)
            }
            None => match (self.flags()?, typed) {
                (Some((flagged, said)), Some((o, a))) if said != a => {
                    return Err(ParseError::Conflict {
                        first: o.key.to_string(),
                        second: flagged.key.to_string(),
                        first_value: snippet(&display(&o.value)),
                        second_value: "true".into(),
                    })
                }
                (Some((_, a)), _) | (None, Some((_, a))) => (Some(a), None, true),
                (None, None) => (None, None, false),
            },
        };
        let direction =
            self.get(Name::Direction).map(|f| word(f, Direction::from_word, "LONG or SHORT")).transpose()?;
        // An action that names its side (`exit_long`) and a `direction` naming the other disagree: which side to
        // close or open is the one thing the sender must not leave to a guess.
        // Both fields are there when both sides are known: the action's names one, the direction the other.
        if implied.zip(direction).is_some_and(|(said, named)| said != named) {
            if let (Some(a), Some(d)) =
                (self.get(Name::Action).or_else(|| self.get(Name::ActionAlt)), self.get(Name::Direction))
            {
                return Err(disagree(a, d));
            }
        }
        let direction = direction.or(implied);
        let (flag_type, close_side) = self.rare_asks()?;
        // TV-Hub's `closeLong`/`closeShort` say which side an `isClose` closes (hedge mode): taken from the one
        // position held, a `closeShort` sold the long.
        let direction = match (close_side, direction) {
            (None, d) => d,
            (Some(side), None) if action == Some(ActionKind::Canonical(Action::Close)) => Some(side),
            (Some(side), d) => {
                let key = if side == Direction::Long { "closeLong" } else { "closeShort" };
                return Err(ParseError::Conflict {
                    first: key.into(),
                    second: "the alert's action and direction".into(),
                    first_value: "true".into(),
                    second_value: format!(
                        "{} {}",
                        action.map_or("no action", ActionKind::as_str),
                        d.map_or("", Direction::as_str)
                    )
                    .trim_end()
                    .to_owned(),
                });
            }
        };
        let flag_type = self.limit_close(action, flag_type)?;
        let (action, direction) = self.position_intent(action, direction)?;
        let is_add = self
            .get(Name::Action)
            .or_else(|| self.get(Name::ActionAlt))
            .is_some_and(|f| matches!(&f.value, Value::Text(t) if t.trim().eq_ignore_ascii_case("add")));
        let position = |n| self.get(n).map(|f| word(f, position_word, "long, short or flat")).transpose();
        let market_position = position(Name::MarketPosition)?;
        let prev_market_position = position(Name::PrevMarketPosition)?;
        let market_size = self.get(Name::MarketPositionSize).map(size).transpose()?;
        let prev_market_size = self.get(Name::PrevMarketPositionSize).map(size).transpose()?;
        let (price, priced_mark) = self.signed_price(self.get(Name::Price).map(number).transpose()?)?;
        // TV-Hub's `isLimit`/`isMarket`: the order type, where no `order_type` says it (one that says another is a
        // contradiction). Dropped, an `isLimit` buy at 42000 went out at market.
        let order_type = match (self.order_type()?, flag_type) {
            (Some(a), Some(b)) if a != b => {
                // The flag as sent: a close's `isLimit` says market ([`Self::limit_close`]).
                let flagged = self.rare.as_deref().and_then(|r| r.order_types.first()).map(|(k, _)| k.to_string());
                return Err(ParseError::Conflict {
                    first: self.get(Name::OrderType).map_or_else(|| "type".to_owned(), |f| f.key.to_string()),
                    second: flagged
                        .unwrap_or_else(|| if b == OrderType::Limit { "isLimit" } else { "isMarket" }.into()),
                    first_value: a.as_str().into(),
                    second_value: "true".into(),
                });
            }
            (a, b) => a.or(b),
        };
        let order_type = self.with_price_type(order_type)?;
        // A limit's lifetime asks nothing of a market order (TV-Hub's `cancelLimitOrderOffset` "only runs with
        // isLimit=true"; a market order does not rest for `cancelAfter` to cancel). Refused short of a market one:
        // an alert saying no type takes the strategy's, which may be limit.
        if let Some(key) =
            self.rare.as_deref().and_then(|r| r.lifetime.as_ref()).filter(|_| order_type != Some(OrderType::Market))
        {
            return Err(ParseError::Unsupported(format!(
                "`{}`: cancelling or re-pricing a limit order after a time is not supported; send a CANCEL (or a \
                 MODIFY with the new `price`) when the order is to go",
                snippet(key)
            )));
        }
        // Tradier's `credit`/`debit` are its priced order types, and a price marked with its effect is a limit: left
        // to the strategy's market type, the sender's floor of a 1.50 credit went out as a market spread.
        let order_type = match (priced_mark, order_type) {
            (Some(_), None | Some(OrderType::Limit)) => Some(OrderType::Limit),
            (Some((key, said)), Some(OrderType::Market)) => {
                return Err(ParseError::Conflict {
                    first: self.get(Name::OrderType).map_or_else(|| "order_type".to_owned(), |f| f.key.to_string()),
                    second: key,
                    first_value: "market".into(),
                    second_value: snippet(&said),
                })
            }
            (None, t) => t,
        };
        let limit_target = self
            .get(Name::PriceType)
            .map(|f| word(f, price_type_word, "bid, ask, ask_bid, mark, last, fixedPrice or bestPrice"))
            .transpose()?
            .flatten();
        let read_time = |f: &'_ Field<'_>| text(f, "a time").ok().and_then(super::time::parse_ms);
        // TV-Hub recommends `{{ticker}}-{{timenow}}` as its `alertTimestamp`: the time after the ticker. Read whole
        // only, such a key carried no time, and `max_alert_age` let an alert an hour late trade.
        // The part read as the time, with its time: kept, so that the sender's key below judges that part alone.
        fn read_id_time<'f>(f: &'f Field<'_>) -> Option<(&'f str, i64)> {
            let t = text(f, "a time").ok()?;
            // Only the dashes near the end can start a time: no time is longer than `time::MAX_LEN` once trimmed,
            // and the part after an earlier dash is never shorter. Tried after every dash, 256 KiB of them took
            // milliseconds of hostile work per alert.
            let end = t.trim_end();
            let fits = |i: usize| end.get(i + 1..).map_or(true, |p| p.trim_start().len() <= super::time::MAX_LEN);
            let from = t.rmatch_indices('-').take_while(|&(i, _)| fits(i)).last().map_or(t.len(), |(i, _)| i);
            let after_dashes = t[from..].match_indices('-').map(|(i, _)| &t[from + i + 1..]);
            std::iter::once(t).chain(after_dashes).find_map(|part| super::time::parse_ms(part).map(|ms| (part, ms)))
        }
        let id_time = self.get(Name::IdTime).and_then(|f| read_id_time(f).map(|(part, t)| (f, part, t)));
        // `timenow`/`timestamp` is the alert's time; `time` may be its bar's open (TradingView's `{{time}}`), read
        // only where neither is sent. Taken beside them, the bar's time refused every alert of the common template.
        let sent_at = self.get(Name::SentAt).or_else(|| self.get(Name::Time));
        // `date`/`alertTimestamp` and `timenow`/`timestamp` both say when the alert was made: two instants are
        // refused, as two of `timenow`/`timestamp` are. Taken over `timenow` unasked, a `date` holding the bar's
        // open refused a fresh alert as stale, and a fresh `date` let an alert an hour late trade.
        if let (Some((id_field, part, at)), Some(sent)) = (id_time, self.get(Name::SentAt)) {
            if read_time(sent).is_some_and(|t| t != at) {
                return Err(ParseError::Conflict {
                    first: id_field.key.to_string(),
                    second: sent.key.to_string(),
                    first_value: snippet(part.trim()),
                    second_value: snippet(display(&sent.value).trim()),
                });
            }
        }
        let sent_at_ms = id_time.map(|(_, _, t)| t).or_else(|| sent_at.and_then(read_time));
        // A time sent that reads as none is kept, so that `max_alert_age` refuses the alert rather than pass it
        // unchecked.
        let unread_time = match sent_at_ms {
            Some(_) => None,
            None => sent_at.or_else(|| self.get(Name::IdTime)).map(|f| super::UnreadTime {
                key: CompactString::new(super::key_shown(f.key.trim())),
                value: snippet(display(&f.value).trim()),
            }),
        };
        let max_lag_s = self.get(Name::MaxLag).map(max_lag).transpose()?;
        // PickMyTrade's `data: close` "would close open position and cancel open orders as well": read as a bare
        // CLOSE, the ticker's working entry stayed, and could fill later into the position the sender left.
        let pickmytrade_close = self.get(Name::Action).is_none()
            && self
                .get(Name::ActionAlt)
                .is_some_and(|f| text(f, "an action").is_ok_and(|t| t.trim().eq_ignore_ascii_case("close")));
        let cancel_first = self.get(Name::CancelFirst).map(flag).transpose()?.unwrap_or(pickmytrade_close);
        let duration = self.get(Name::Duration).map(|f| word(f, duration_word, "day, gtc or fok")).transpose()?;
        // The sender's idempotency key: `metadata.message_id`, else the alert's own time
        // when the sender documents it as one (PickMyTrade's `date`, TV-Hub's
        // `alertTimestamp`). An `id` is not one: OKX's is the Pine order id, the same on
        // every entry.
        // `date` is PickMyTrade's key only in PickMyTrade's body (its action in `data`): any other sender's `date`
        // is its own note of the time, and keyed by it, a scale-in at another price in the same second was answered
        // as a duplicate.
        let sender_key = id_time.filter(|(f, part, _)| {
            let mut buf = [0u8; 32];
            // Judged on the part read as the time: TV-Hub's `{{ticker}}-<Unix time>` names its second after the dash
            // (judged whole, its letters made it no key, and a resend at another price traded again).
            super::time::to_the_second(part)
                && (folded(&f.key, &mut buf) != Some(b"date")
                    || (self.get(Name::Action).is_none() && self.get(Name::ActionAlt).is_some()))
        });
        let (message_id, id_is_time) = match self.get(Name::MessageId) {
            Some(f) => (message_id(f)?, false),
            // Only a readable time: a bare date (`2024-01-15`) would make every alert of the
            // day one alert.
            None => (sender_key.map(|(f, _, _)| message_id(f)).transpose()?.flatten(), true),
        };

        // The transition, when both ends are known and differ, says what happened.
        // One step, or two for a reversal; kept off the heap because nearly every alert has one.
        type Step = (ActionKind, Option<Direction>);
        // An action or direction that the positions contradict, named beside them. Always refused, whatever field
        // said it: a TV-Hub flag (`isSell`) or `closeShort` has no `action` to name, and falling through traded the
        // positions' side, the opposite one.
        let disagrees_with_positions = || {
            let said = self.get(Name::Action).or_else(|| self.get(Name::ActionAlt));
            let said = said.or_else(|| typed.map(|(f, _)| f));
            let said = said.or_else(|| self.get(Name::Direction));
            let said = said.or_else(|| {
                [Name::IsBuy, Name::IsSell, Name::IsClose]
                    .into_iter()
                    .filter_map(|n| self.get(n))
                    .find(|f| flag(f).unwrap_or(false))
            });
            let (first, first_value) = match said {
                Some(a) => (a.key.to_string(), snippet(&display(&a.value))),
                None => ("closeLong/closeShort".to_owned(), direction.map_or("", Direction::as_str).to_owned()),
            };
            let shown = |n: Name| self.get(n).map(|f| (f.key.to_string(), snippet(&display(&f.value))));
            let (second, second_value) = match (shown(Name::PrevMarketPosition), shown(Name::MarketPosition)) {
                (Some((pk, pv)), Some((mk, mv))) => (format!("{pk} → {mk}"), format!("{pv} → {mv}")),
                // One end alone: named alone, not beside an empty other end.
                (Some(one), None) | (None, Some(one)) => one,
                (None, None) => Default::default(),
            };
            ParseError::Conflict { first, second, first_value, second_value }
        };
        // A canonical OPEN or CLOSE beside a fill that left the position on one side: an OPEN of the other side
        // (or into a position the sizes say shrank), or a CLOSE of the side not held, disagrees with it. Taken as
        // context, OPEN SHORT beside a long that grew opened a short on every bot.
        if let (Some(p @ (Position::Long | Position::Short)), Some(m), Some(ActionKind::Canonical(a))) =
            (prev_market_position, market_position, action)
        {
            let side = if p == Position::Long { Direction::Long } else { Direction::Short };
            let sizes = prev_market_size.zip(market_size);
            let unchanged = sizes.is_some_and(|(a, b)| a == b);
            let shrank = sizes.is_some_and(|(a, b)| b < a);
            let other_side = direction.is_some_and(|d| d != side);
            if p == m
                && !unchanged
                && matches!(a, Action::Open | Action::Close)
                && (other_side || (a == Action::Open && shrank))
            {
                return Err(disagrees_with_positions());
            }
        }
        // Flat before and after reports no fill, and a buy or a sell means what its fill did: read as the word alone
        // (a sell beside `flat` closes a long), a sell closed a long the sender's strategy says was never held.
        if let (Some(Position::Flat), Some(Position::Flat), Some(ActionKind::Word(_))) =
            (prev_market_position, market_position, action)
        {
            return Err(disagrees_with_positions());
        }
        let same_side = match (prev_market_position, market_position) {
            (Some(p), Some(m)) if p == m => same_side_fill(m, prev_market_size, market_size, action)?,
            _ => None,
        };
        // A position that grew on its side is an entry there: a `sell` (or `exit`, `isSell`, the other `direction`)
        // beside a long that grew disagrees with it. Taken over silently, the sizes bought where the sender sold.
        if let Some((ActionKind::Canonical(Action::Open), Some(d))) = same_side {
            if !fits_transition(action, direction, &[(Action::Open, d)]) {
                return Err(disagrees_with_positions());
            }
        }
        // Set where `cancel: true` put a CANCEL in front: that CANCEL pulls the working entries of the ticker
        // (TradersPost: "cancel any open orders for the ticker"), not an order the alert names.
        let mut pull_first = false;
        let (first, second): (Step, Option<Step>) = match (
            prev_market_position,
            market_position.and_then(|m| prev_market_position.and_then(|p| transition(p, m))),
            same_side,
        ) {
            (_, _, Some(step)) if cancel_first => {
                pull_first = true;
                ((ActionKind::Canonical(Action::Cancel), None), Some(step))
            }
            (_, _, Some(step)) => (step, None),
            (Some(_), Some(t), None) => {
                // The transition says what happened; an action or a direction sent beside it must agree with it.
                // Taken over silently, a CANCEL (or MODIFY) sent with the last fill's positions, as a script that
                // attaches them to every message does, became that fill's trade: a market order, where the spec
                // has a CANCEL and a MODIFY never open one.
                if !fits_transition(action, direction, t.as_slice()) {
                    return Err(disagrees_with_positions());
                }
                let step = |(a, d): (Action, Direction)| (ActionKind::Canonical(a), Some(d));
                match t.as_slice() {
                    // `cancel: true` with the fill's positions: the working entries are pulled first, as without
                    // them; dropped, the entry went out beside a working one.
                    [a] if cancel_first => {
                        pull_first = true;
                        ((ActionKind::Canonical(Action::Cancel), None), Some(step(*a)))
                    }
                    [a] => (step(*a), None),
                    [_, _] if cancel_first => return Err(cancel_on_reversal()),
                    [a, b] => (step(*a), Some(step(*b))),
                    _ => return Err(ParseError::MissingAction),
                }
            }
            _ => {
                let mut action = action.ok_or(ParseError::MissingAction)?;
                let mut direction = direction;
                let sentiment = self.get(Name::MarketPosition).is_some_and(|f| f.key.eq_ignore_ascii_case("sentiment"));
                // The position before the fill, without the one after, is kept ([`Alert::held_before`]) and judged in
                // decide: whether a buy from a short opens the other side, or a sell from a long closes, only the
                // strategy's rules tell, and a CLOSE it contradicts is refused there however it is asked.
                // The position after the fill, without the one before: a sell that leaves it
                // long (a buy that leaves it short, an exit that leaves either) made it
                // smaller, as with both ends known; read as a direction it would close all.
                if let (None, false, Some(after @ (Position::Long | Position::Short)), ActionKind::Word(w)) =
                    (prev_market_position, sentiment, market_position, action)
                {
                    let shrinks = matches!(
                        (w, after),
                        (ActionWord::Exit, _) | (ActionWord::Sell, Position::Long) | (ActionWord::Buy, Position::Short)
                    );
                    if shrinks {
                        same_side_fill(after, None, market_size, Some(action))?;
                    }
                }
                // The same for a canonical action: an OPEN cannot leave the position flat or on the other side, and
                // a CLOSE that leaves its own side held closed part of it. Taken as context, OPEN LONG beside
                // `marketPosition: short` bought where the sender was short, and a CLOSE beside a scale-out's
                // `long` sold the whole position.
                if let (None, Some(after), ActionKind::Canonical(a @ (Action::Open | Action::Close))) =
                    (prev_market_position, market_position, action)
                {
                    match (a, after.side()) {
                        (Action::Open, None) => return Err(disagrees_with_positions()),
                        (Action::Open, Some(h)) if direction.is_some_and(|d| d != h) => {
                            return Err(disagrees_with_positions())
                        }
                        (Action::Close, Some(h)) if direction.map_or(true, |d| d == h) => {
                            same_side_fill(after, None, market_size, Some(action))?;
                        }
                        _ => {}
                    }
                }
                match market_position {
                    // "flat after the fill" means the fill closed the position, and a buy or a sell says which
                    // one: a sell that leaves it flat closed a long, a buy a short (TradersPost: "buy with
                    // sentiment flat only exits a short"). Left open, the side was taken from whatever the bots
                    // held, and a sell could cover a short.
                    Some(Position::Flat) if matches!(action, ActionKind::Word(_)) => {
                        // The side the word closes: a sell a long's, a buy a short's. An entry cannot leave the
                        // position flat, nor a buy close a long: taken as a CLOSE, both sold the long held.
                        let closes = match action {
                            ActionKind::Word(ActionWord::Sell) => Some(Direction::Long),
                            ActionKind::Word(ActionWord::Buy) => Some(Direction::Short),
                            _ => None,
                        };
                        let entry = action == ActionKind::Word(ActionWord::Entry);
                        if entry || closes.zip(direction).is_some_and(|(c, d)| c != d) {
                            let said =
                                if entry { self.get(Name::Action).or_else(|| self.get(Name::ActionAlt)) } else { None };
                            let said = said.or_else(|| self.get(Name::Direction));
                            let flat = self.get(Name::MarketPosition);
                            if let (Some(a), Some(m)) = (said, flat) {
                                return Err(disagree(a, m));
                            }
                        }
                        direction = direction.or(closes);
                        action = ActionKind::Canonical(Action::Close);
                    }
                    Some(Position::Long) if direction.is_none() => direction = Some(Direction::Long),
                    Some(Position::Short) if direction.is_none() => direction = Some(Direction::Short),
                    _ => {}
                }
                // TradersPost's `sentiment` is the position after the trade, and a buy or
                // sell there first exits the opposite position: a reversal when one is held.
                // (`flat` turned the word into a CLOSE above.)
                match (sentiment, action, market_position) {
                    (true, ActionKind::Word(w @ (ActionWord::Buy | ActionWord::Sell)), Some(p)) => {
                        if cancel_first
                            && matches!((w, p), (ActionWord::Buy, Position::Long) | (ActionWord::Sell, Position::Short))
                        {
                            // Three steps (cancel, close, open) where an alert makes two: dropped, the old side's
                            // working entries could fill after the close and reopen it.
                            return Err(cancel_on_reversal());
                        }
                        let (exit, enter) = match (w, p) {
                            (ActionWord::Buy, Position::Long) => (Direction::Short, Direction::Long),
                            (ActionWord::Sell, Position::Short) => (Direction::Long, Direction::Short),
                            (_, held) => {
                                let held = if held == Position::Long { "long" } else { "short" };
                                return Err(ParseError::Unsupported(format!(
                                    "partial closes are not supported: `{}` with `sentiment: {held}` leaves a \
                                     smaller {held} position; exit the whole position instead (send `exit`, or \
                                     `sentiment: flat`)",
                                    w.as_str()
                                )));
                            }
                        };
                        (
                            (ActionKind::Canonical(Action::Close), Some(exit)),
                            Some((ActionKind::Canonical(Action::Open), Some(enter))),
                        )
                    }
                    _ => {
                        if is_add && direction.is_none() {
                            return Err(ParseError::Unsupported(
                                "`add` needs `sentiment` (bullish or bearish) to say which position to add to".into(),
                            ));
                        }
                        let trades = !matches!(action, ActionKind::Canonical(Action::Modify | Action::Cancel));
                        if cancel_first && trades {
                            pull_first = true;
                            // TradersPost's `cancel: true` ("cancel any open orders for the ticker first"): pull the
                            // working entries, then trade. On an exit, so that none fills after the close; on an
                            // entry too, where it was dropped: the new entry went out beside the one still working,
                            // and both could fill, doubling the position.
                            ((ActionKind::Canonical(Action::Cancel), direction), Some((action, direction)))
                        } else {
                            ((action, direction), None)
                        }
                    }
                }
            }
        };
        let steps = std::iter::once(first).chain(second);
        // TV-Hub closes on a `strategyComment` naming a close, whatever its flags say: an alert whose flags (its
        // own way of saying what it does) make no CLOSE is a contradiction. Only there: TradingView's default
        // comment on a `strategy.close()` order ("Close entry(s) order Long") rides beside an `action` that the
        // strategy's rules (or the positions sent with it) make a close, and refused, the position stayed open.
        if let Some((key, value)) = self.rare.as_deref().and_then(|r| r.closing_comment.as_ref()) {
            if from_flags && !steps.clone().any(|(a, _)| a == ActionKind::Canonical(Action::Close)) {
                return Err(ParseError::Conflict {
                    first: key.to_string(),
                    second: "action".into(),
                    first_value: value.clone(),
                    second_value: action.map_or("none", ActionKind::as_str).to_owned(),
                });
            }
        }

        let is_modify = steps.clone().any(|(a, _)| a == ActionKind::Canonical(Action::Modify));
        let (quantity, notional) = if is_modify {
            (self.get(Name::Quantity).map(number).transpose()?, self.get(Name::Notional).map(number).transpose()?)
        } else {
            (None, None)
        };
        // A new count and a new amount are two sizes, and which one the sender meant cannot be told from the alert:
        // taken over silently, the count won (5 shares where $820 at 410.50 is 1).
        if let (Some(_), Some(_), Some(q), Some(n)) =
            (quantity, notional, self.get(Name::Quantity), self.get(Name::Notional))
        {
            return Err(disagree(q, n));
        }
        // A MODIFY's `quantity` is the new count of units: read as one, TradersPost's `quantityType: dollar_amount`
        // of 5000 re-sized the order to 5000 shares.
        if let (true, Some(_), Some((key, said))) =
            (is_modify, quantity, self.rare.as_deref().and_then(|r| r.quantity_not_units.as_ref()))
        {
            return Err(ParseError::Unsupported(format!(
                "`{}: {said}`: a MODIFY's `quantity` is the new number of shares, contracts or coins; send it with \
                 `{0}: fixed_quantity` (or without `{0}`), or an amount in dollars as `notional`",
                snippet(key)
            )));
        }
        // Which working order is meant matters to MODIFY and CANCEL only; other alerts
        // ignore these keys as before (a sender's `order_id` is often an unrelated name).
        let acts_on_working =
            is_modify || (!pull_first && steps.clone().any(|(a, _)| a == ActionKind::Canonical(Action::Cancel)));
        let (target, order_id) = if acts_on_working {
            (
                self.get(Name::Target).map(|f| word(f, OrderIntent::from_word, "entry or exit")).transpose()?,
                self.get(Name::OrderId).map(order_id).transpose()?.flatten(),
            )
        } else {
            // A `target` that is a price (`"target": 200`) is a take-profit, not the `entry`/`exit` a MODIFY or
            // CANCEL reads: ignored, the entry went out and the sender counted on an exit that never existed.
            if let Some(f) = self.get(Name::Target).filter(|f| asks_for_bracket(&f.key, &f.value)) {
                if matches!(&f.value, Value::Number(_))
                    || matches!(&f.value, Value::Text(t) if decimal::parse(t.trim()).is_some())
                {
                    return Err(bracket_refused(&f.key));
                }
            }
            (None, None)
        };
        for (label, v) in [("quantity", &quantity), ("notional", &notional)] {
            if v.is_some_and(|q| q <= Decimal::ZERO) {
                return Err(ParseError::InvalidField {
                    field: label.into(),
                    value: v.unwrap().to_string(),
                    expected: "a size above zero",
                });
            }
        }
        let mut legs = self.legs.take().unwrap_or_default();
        let mut instrument = instrument;
        // A sender's time keys its alert to the second only: one strategy's alerts fired in the
        // same second (an exit and the entry after it on one bar, or one alert per symbol at a
        // bar's close) carry the same `{{timenow}}`. Keyed by the time alone, all but the first
        // would be answered as duplicates and their orders lost; keyed by the time with what the
        // alert does, a resend is still the same alert, and they are not.
        // A MODIFY's price or size, a CANCEL's order, is what it says: another sent in the same second is another
        // alert, keyed by its body (keyed by the time, a price correction was answered as a duplicate and the order
        // kept resting at the old price; a cancel of a second order left it working).
        let mut message_id = match message_id {
            Some(_) if id_is_time && acts_on_working => None,
            Some(time) if id_is_time => {
                let mut key = format!("{time} {}", instrument.as_str());
                // The contracts too: two option alerts on one underlying in one second (a call, then a put) are two
                // alerts, and keyed by the underlying alone the second was answered as a duplicate.
                if let Some(c) = &contract {
                    key.push_str(&format!(" {} {} {} {}", c.root, c.expiration, c.side.as_str(), c.strike));
                }
                for l in &legs {
                    key.push_str(&format!(
                        " [{} {} {} {} {}]",
                        l.symbol.as_deref().unwrap_or(""),
                        l.side.map_or("", |s| s.as_str()),
                        l.strike.map(|k| k.to_string()).unwrap_or_default(),
                        l.expiration.map(|e| e.to_string()).unwrap_or_default(),
                        l.action.map_or("", |a| a.as_str())
                    ));
                }
                for (action, direction) in steps.clone() {
                    key.push(' ');
                    key.push_str(action.as_str());
                    if let Some(d) = direction {
                        key.push(' ');
                        key.push_str(d.as_str());
                    }
                }
                Some(CompactString::from(key))
            }
            id => id,
        };
        // Only beside no position after the fill: with both ends, the transition already said what the fill did.
        let held_before = match (prev_market_position, market_position) {
            (Some(p), None) => Some(p),
            _ => None,
        };
        // The first unread contract that is not the one contract the alert names: that one says nothing the alert
        // does not. Any other, wherever it stands among the keys, names a contract the alert would not trade.
        let named = |c: &Contract| match (&contract, legs.as_slice()) {
            (Some(t), _) => t == c,
            (None, [l]) => l.symbol.as_deref().and_then(Contract::parse).as_ref() == Some(c),
            _ => false,
        };
        let unread_contract =
            self.rare.as_deref().and_then(|r| r.unread_contracts.iter().find(|(_, c)| !named(c))).map(|(key, c)| {
                super::UnreadContract { key: CompactString::new(super::key_shown(key.trim())), contract: c.occ() }
            });
        let mut order_id = order_id;
        // The last step takes the owned values; earlier ones (a reversal's CLOSE) copy.
        macro_rules! alert {
            ($step:expr, $take:expr) => {{
                let (action, direction): Step = $step;
                let take: bool = $take;
                Alert {
                    action,
                    instrument: if take { std::mem::take(&mut instrument) } else { instrument.clone() },
                    direction,
                    price,
                    order_type,
                    duration,
                    quantity,
                    notional,
                    target,
                    order_id: if take { order_id.take() } else { order_id.clone() },
                    legs: match &contract {
                        Some(c) => vec![c.leg(leg_action(action, direction))],
                        None if take => std::mem::take(&mut legs),
                        None => legs.clone(),
                    },
                    message_id: if take { message_id.take() } else { message_id.clone() },
                    sent_at_ms,
                    unread_time: unread_time.clone(),
                    unread_contract: unread_contract.clone(),
                    held_before,
                    max_lag_s,
                    limit_target,
                }
            }};
        }
        // One step, as nearly every alert has, is written where it is returned: pushed, the alert (296 bytes) was
        // built on the stack and copied into the vector, then the vector into the result.
        Ok(match second {
            None => Alerts::from_buf([alert!(first, true)]),
            Some(second) => {
                let mut out = Alerts::new();
                out.push(alert!(first, false));
                out.push(alert!(second, true));
                out
            }
        })
    }
}

/// The leg action of an alert on one option contract (TradingView's option ticker). Only
/// an entry trades the alert's legs (an exit closes the legs held), so a buy or sell word,
/// whatever the strategy's rules make of it, is the opening action; an `entry` or `exit`
/// word needs the direction to say which side, and MODIFY and CANCEL take none.
pub(crate) fn leg_action(action: ActionKind, direction: Option<Direction>) -> Option<LegAction> {
    use Direction::{Long, Short};
    match (action, direction) {
        (ActionKind::Word(ActionWord::Buy), _) => Some(LegAction::BuyToOpen),
        (ActionKind::Word(ActionWord::Sell), _) => Some(LegAction::SellToOpen),
        (ActionKind::Canonical(Action::Open) | ActionKind::Word(ActionWord::Entry), Some(Long)) => {
            Some(LegAction::BuyToOpen)
        }
        (ActionKind::Canonical(Action::Open) | ActionKind::Word(ActionWord::Entry), Some(Short)) => {
            Some(LegAction::SellToOpen)
        }
        (ActionKind::Canonical(Action::Close) | ActionKind::Word(ActionWord::Exit), Some(Long)) => {
            Some(LegAction::SellToClose)
        }
        (ActionKind::Canonical(Action::Close) | ActionKind::Word(ActionWord::Exit), Some(Short)) => {
            Some(LegAction::BuyToClose)
        }
        _ => None,
    }
}

/// A fill that left the position on the same side (long before and after, or short
/// before and after): a grown position is an OPEN in that direction, a smaller one a
/// partial close, which the service does not do and refuses. The sizes decide when both
/// are known; otherwise the fill's side does (a sell while long can only have made the
/// position smaller). `None` when neither says: the alert's other fields decide, as before.
fn same_side_fill(
    side: Position,
    prev_size: Option<Decimal>,
    size: Option<Decimal>,
    action: Option<ActionKind>,
) -> Result<Option<(ActionKind, Option<Direction>)>, ParseError> {
    let direction = match side {
        Position::Long => Direction::Long,
        Position::Short => Direction::Short,
        Position::Flat => return Ok(None),
    };
    let sizes = match (prev_size, size) {
        // Unchanged sizes report no fill: the alert's other fields decide.
        (Some(prev), Some(next)) if prev == next => return Ok(None),
        (Some(prev), Some(next)) => Some((prev, next)),
        _ => None,
    };
    let grew = match (action, sizes) {
        // A MODIFY or a CANCEL is no fill: the positions are context. A CLOSE that leaves the position on its side
        // closed part of it, as an `exit` does (taken as a CLOSE, it sold the whole position the sender's strategy
        // still holds); an OPEN beside it added to it (the caller refused one of the other side, or beside a
        // position that shrank).
        (Some(ActionKind::Canonical(Action::Modify | Action::Cancel)), _) => return Ok(None),
        (Some(ActionKind::Canonical(Action::Close)), _) => false,
        (Some(ActionKind::Canonical(Action::Open)), _) => true,
        (_, Some((prev, next))) => next > prev,
        (Some(ActionKind::Word(w)), None) => matches!(
            (w, direction),
            (ActionWord::Entry, _) | (ActionWord::Buy, Direction::Long) | (ActionWord::Sell, Direction::Short)
        ),
        (None, None) => return Ok(None),
    };
    if grew {
        return Ok(Some((ActionKind::Canonical(Action::Open), Some(direction))));
    }
    let side = direction.as_str().to_ascii_lowercase();
    let change = match (prev_size, size) {
        (Some(prev), Some(next)) => format!("the fill takes the {side} position from {prev} to {next}"),
        _ => format!("the fill leaves a smaller {side} position"),
    };
    Err(ParseError::Unsupported(format!(
        "partial closes are not supported: {change}; exit the whole position instead \
         (send CLOSE {}, or have the strategy close all of it)",
        direction.as_str()
    )))
}

/// Builds one option leg from its pairs (JSON, or a JSON-looking object sent as text).
///
/// A `symbol` is read as an OCC symbol (padded or not, or with the strike as a plain number:
/// `SPXW 240119C4500`) and kept in OCC form; the side, strike and expiration it names fill
/// the leg's own fields, and must agree with them where the sender gave both
/// ([`ParseError::LegMismatch`]).
pub fn leg<'v>(index: usize, pairs: impl IntoIterator<Item = (Cow<'v, str>, Value<'v>)>) -> Result<Leg, ParseError> {
    let bad = |field: &str, value: &str, expected: &'static str| ParseError::InvalidField {
        field: format!("legs[{index}].{field}"),
        value: snippet(value),
        expected,
    };
    let mut leg = Leg::default();
    let mut contract = None;
    // A bare buy or sell (Alpaca's leg `side`, Schwab's `BUY`), with its key and value: it says the side of the
    // leg's action, never whether it opens or closes.
    let mut buys: Option<(bool, String, String)> = None;
    // Each field under the names brokers' own APIs give it (Alpaca's `expiration_date` and `position_intent`,
    // Schwab's `expirationDate`, `putCall` and `instruction`): skipped, a leg's expiration sent as `expiration_date`
    // traded the strategy's next expiration, and a put bought under `instruction` was sold.
    const KEYS: [&[u8]; 23] = [
        b"symbol",
        b"side",
        b"putcall",
        b"optiontype",
        b"action",
        b"instruction",
        b"positionintent",
        b"orderaction",
        b"strike",
        b"strikeprice",
        b"expiration",
        b"expiry",
        b"expirationdate",
        b"expirydate",
        b"expdate",
        b"exp",
        b"price",
        b"limitprice",
        b"liveprice",
        b"ratioqty",
        b"ratio",
        b"quantity",
        b"qty",
    ];
    for (k, v) in pairs {
        let mut buf = [0u8; 32];
        let key = folded(&k, &mut buf).unwrap_or_default();
        if !KEYS.contains(&key) {
            // A buy or a sell under a key no leg field holds (another broker's name for the action) is refused:
            // skipped, the leg took its side from the alert's direction, and a put bought went out sold.
            if let Value::Text(t) = &v {
                if leg_word(t).is_some() {
                    return Err(bad(
                        &k,
                        t.trim(),
                        "no buy or sell: a leg's action goes under `action` (buy_to_open, sell_to_open, buy_to_close \
                         or sell_to_close)",
                    ));
                }
            }
            // So is its put or call, or its contract, under a key no leg field holds (`type`, `right`, Tradier's
            // `option_symbol`, Schwab's `instrument.symbol`): skipped, a CLOSE leg naming the 480 put matched every
            // contract at 480 (a call vertical closed beside it), or every contract held.
            const CONTRACT_KEYS: [&[u8]; 6] =
                [b"type", b"right", b"callput", b"optionsymbol", b"occsymbol", b"instrument"];
            let names = match &v {
                Value::Null => false,
                Value::Text(t) => {
                    let t = t.trim();
                    !t.is_empty()
                        && (CONTRACT_KEYS.contains(&key)
                            || OptionSide::from_word(t).is_some()
                            || Contract::parse(t).is_some())
                }
                _ => CONTRACT_KEYS.contains(&key),
            };
            if names {
                return Err(bad(
                    &k,
                    display(&v).trim(),
                    "no put, call or contract: a leg's put or call goes under `side` (CALL or PUT), its contract \
                     under `symbol` (an OCC symbol such as SPY240126P00480000)",
                ));
            }
            continue;
        }
        let text = match &v {
            Value::Null => continue,
            Value::Text(t) => t.trim(),
            Value::Number(n) => n,
            other => return Err(bad(&k, &display(other), "a string or a number")),
        };
        if let Some(p) = find_placeholder(text) {
            return Err(ParseError::Placeholder { field: format!("legs[{index}].{k}"), placeholder: p });
        }
        let dec = |expected| decimal::parse(text).ok_or_else(|| bad(&k, text, expected));
        // A field given twice (a key repeated, or two of its names: `expiration` and `expiry`) must say the same:
        // the last one silently won, so which contract traded depended on the order of the keys.
        let twice = || bad(&k, text, "one value: this leg gives the field twice, differently");
        fn once<T: PartialEq, E>(slot: &mut Option<T>, v: T, twice: impl FnOnce() -> E) -> Result<(), E> {
            if slot.as_ref().is_some_and(|prev| *prev != v) {
                return Err(twice());
            }
            *slot = Some(v);
            Ok(())
        }
        match key {
            b"symbol" => {
                const OCC: &str = "an OCC option symbol such as SPXW240119C04500000";
                let c = Contract::parse(text).ok_or_else(|| bad(&k, text, OCC))?;
                if contract.as_ref().is_some_and(|(_, prev): &(String, Contract)| *prev != c) {
                    return Err(twice());
                }
                contract = Some((snippet(text), c));
            }
            b"side" | b"putcall" | b"optiontype" => match (OptionSide::from_word(text), leg_word(text)) {
                (Some(s), _) => once(&mut leg.side, s, twice)?,
                // Tradier's own legs carry their action as `side` (`side[0]=buy_to_open`).
                (None, Some(LegWord::Action(a))) if key == b"side" => once(&mut leg.action, a, twice)?,
                (None, Some(LegWord::Buys(b))) if key == b"side" => {
                    bare_side(&mut buys, b, &k, text).ok_or_else(twice)?
                }
                _ => return Err(bad(&k, text, "CALL or PUT")),
            },
            b"action" | b"instruction" | b"positionintent" | b"orderaction" => match leg_word(text) {
                Some(LegWord::Action(a)) => once(&mut leg.action, a, twice)?,
                Some(LegWord::Buys(b)) => bare_side(&mut buys, b, &k, text).ok_or_else(twice)?,
                None => return Err(bad(&k, text, "buy_to_open, sell_to_open, buy_to_close or sell_to_close")),
            },
            b"strike" | b"strikeprice" => {
                let s = dec("a strike price such as 4500")?;
                if s <= Decimal::ZERO {
                    return Err(bad(&k, text, "a strike price above zero"));
                }
                once(&mut leg.strike, s, twice)?;
            }
            b"expiration" | b"expiry" | b"expirationdate" | b"expirydate" | b"expdate" | b"exp" => {
                let e = Date::parse_iso(text).ok_or_else(|| bad(&k, text, "a date as YYYY-MM-DD"))?;
                once(&mut leg.expiration, e, twice)?;
            }
            b"price" | b"limitprice" | b"liveprice" => {
                let p = dec("a decimal price such as 1.25")?;
                let slot = if key == b"liveprice" { &mut leg.live_price } else { &mut leg.price };
                once(slot, p, twice)?;
            }
            b"ratioqty" | b"ratio" | b"quantity" | b"qty" => {
                let q = dec("a size above zero, such as 1")?;
                if q <= Decimal::ZERO {
                    return Err(bad(&k, text, "a size above zero, such as 1"));
                }
                // A ratio and a quantity on one leg both say how it stands to the others.
                if leg.size.is_some_and(|s| s != q) {
                    return Err(unequal_legs());
                }
                leg.size = Some(q);
            }
            _ => {}
        }
    }
    // A bare buy or sell checks the action's side; alone it cannot say whether the leg opens or closes.
    if let Some((b, k, text)) = buys {
        match leg.action {
            Some(a) if a.is_buy() == b => {}
            Some(_) => {
                return Err(bad(&k, &text, "the side of the leg's action (buy for buy_to_open or buy_to_close)"));
            }
            None => {
                return Err(bad(
                    &k,
                    &text,
                    "the leg's action, which says open or close too: buy_to_open, sell_to_open, buy_to_close or \
                     sell_to_close",
                ));
            }
        }
    }
    if let Some((symbol, c)) = contract {
        let mismatch = |field, from_symbol: String, given: String| ParseError::LegMismatch {
            index,
            symbol: symbol.clone(),
            field,
            from_symbol,
            given,
        };
        match (leg.side, leg.strike, leg.expiration) {
            (Some(s), _, _) if s != c.side => return Err(mismatch("side", c.side.as_str().into(), s.as_str().into())),
            (_, Some(k), _) if k != c.strike => return Err(mismatch("strike", c.strike.to_string(), k.to_string())),
            (_, _, Some(e)) if e != c.expiration => {
                return Err(mismatch("expiration", c.expiration.to_string(), e.to_string()))
            }
            _ => {}
        }
        let from_symbol = c.leg(leg.action);
        leg.symbol = from_symbol.symbol;
        leg.side = from_symbol.side;
        leg.expiration = from_symbol.expiration;
        // The strike keeps the sender's digits when it was given (they are equal).
        leg.strike = leg.strike.or(from_symbol.strike);
    }
    Ok(leg)
}

/// Notes a leg's bare buy (`true`) or sell under key `k`; `None` when another key of the leg said the other side.
fn bare_side(noted: &mut Option<(bool, String, String)>, buys: bool, k: &str, text: &str) -> Option<()> {
    if noted.as_ref().is_some_and(|(prev, ..)| *prev != buys) {
        return None;
    }
    *noted = Some((buys, k.to_owned(), text.to_owned()));
    Some(())
}

/// A leg's action word, or a bare buy or sell that says its side alone.
enum LegWord {
    /// buy_to_open, sell_to_close, …
    Action(LegAction),
    /// A bare buy (true) or sell (false).
    Buys(bool),
}

/// A leg's action as the brokers write it, in any case and with or without `_`: Alpaca's `position_intent`
/// (`buy_to_open`), Schwab's `instruction` (`BUY_TO_OPEN`, or a bare `BUY`), Alpaca's leg `side` (`buy`).
fn leg_word(text: &str) -> Option<LegWord> {
    let mut buf = [0u8; 32];
    Some(match folded(text, &mut buf)? {
        // E*TRADE's `orderAction` says `BUY_OPEN`, `SELL_CLOSE`.
        b"buytoopen" | b"buyopen" => LegWord::Action(LegAction::BuyToOpen),
        b"selltoopen" | b"sellopen" => LegWord::Action(LegAction::SellToOpen),
        b"buytoclose" | b"buyclose" => LegWord::Action(LegAction::BuyToClose),
        b"selltoclose" | b"sellclose" => LegWord::Action(LegAction::SellToClose),
        b"buy" => LegWord::Buys(true),
        b"sell" => LegWord::Buys(false),
        _ => return None,
    })
}

/// Legs of unequal sizes: a ratio spread.
fn unequal_legs() -> ParseError {
    ParseError::Unsupported(
        "ratio spreads are not supported: the legs have unequal sizes (ratio_qty, ratio or quantity), and every \
         order trades one contract of each leg per unit; send legs of equal size, or none"
            .into(),
    )
}

const ACTION_WORDS: &str =
    "OPEN, CLOSE, MODIFY, CANCEL, buy, sell, entry, exit, add, enter_long, exit_long, enter_short or exit_short";

/// `cancel: true` on a reversal: three steps (cancel, close, open) where an alert makes two.
fn cancel_on_reversal() -> ParseError {
    ParseError::Unsupported(
        "`cancel: true` with a reversal is not supported; send the cancel and exit first (`exit` with `cancel: true`), \
         then the entry"
            .into(),
    )
}

/// Whether an alert's `action` and `direction` (either may be absent) agree with the steps its position
/// transition makes (one, or a reversal's two). A MODIFY or a CANCEL never does: neither is a fill. A canonical
/// OPEN or CLOSE, an entry or an exit is one of the steps; a buy or a sell is on the side of every step (a buy
/// closes a short or opens a long); a direction is that of a step the action names (of any step, without one).
fn fits_transition(action: Option<ActionKind>, direction: Option<Direction>, steps: &[(Action, Direction)]) -> bool {
    let names = |a: Action| direction.map_or(true, |d| steps.contains(&(a, d))) && steps.iter().any(|s| s.0 == a);
    let buys =
        |s: &(Action, Direction)| matches!(s, (Action::Close, Direction::Short) | (Action::Open, Direction::Long));
    match action {
        None => direction.map_or(true, |d| steps.iter().any(|s| s.1 == d)),
        Some(ActionKind::Canonical(Action::Modify | Action::Cancel)) => false,
        Some(ActionKind::Canonical(a)) => names(a),
        Some(ActionKind::Word(ActionWord::Entry)) => names(Action::Open),
        Some(ActionKind::Word(ActionWord::Exit)) => names(Action::Close),
        Some(ActionKind::Word(w @ (ActionWord::Buy | ActionWord::Sell))) => {
            steps.iter().all(|s| buys(s) == (w == ActionWord::Buy))
                && direction.map_or(true, |d| steps.iter().any(|s| s.1 == d))
        }
    }
}

/// An action word, with the direction the word itself names: 3Commas' and OKX's
/// `enter_long` / `exit_short`, and TradersPost's `add` (an OPEN whose direction comes from
/// `sentiment`).
fn action_word(s: &str) -> Option<(ActionKind, Option<Direction>)> {
    if let Some(a) = ActionKind::from_word(s) {
        return Some((a, None));
    }
    let mut buf = [0u8; 32];
    let (a, d) = match folded(s, &mut buf)? {
        b"enterlong" => (Action::Open, Direction::Long),
        b"exitlong" => (Action::Close, Direction::Long),
        b"entershort" => (Action::Open, Direction::Short),
        b"exitshort" => (Action::Close, Direction::Short),
        // TradersPost's `add`: an entry in the direction its `sentiment` gives.
        b"add" => return Some((ActionKind::Canonical(Action::Open), None)),
        _ => return None,
    };
    Some((ActionKind::Canonical(a), Some(d)))
}

/// A `limitPriceType` / `marketPriceType`: the quote that prices the limit, or none. TV-Hub's words (same key) are
/// read as well: `fixedPrice`, its default, uses `price` as sent (no quote), and `bestPrice` is the best bid for a
/// buy and the best ask for a sell, TradersPost's `ask_bid`. Refused as unknown, a TV-Hub body that spelled out its
/// default could not trade.
fn price_type_word(s: &str) -> Option<Option<QuotePrice>> {
    let mut buf = [0u8; 32];
    match folded(s, &mut buf) {
        Some(b"fixedprice") => Some(None),
        Some(b"bestprice") => Some(Some(QuotePrice::AskBid)),
        _ => QuotePrice::from_word(s).map(Some),
    }
}

/// A flag as senders write it: a JSON boolean, or the words true/false, 1/0.
fn flag(f: &Field<'_>) -> Result<bool, ParseError> {
    const EXPECTED: &str = "true or false";
    flag_value(&f.value)
        .ok_or_else(|| invalid(f, text(f, EXPECTED).map_or_else(|_| display(&f.value), str::to_owned), EXPECTED))
}

/// An order type; the stop kinds TradersPost and others name are refused by name, since
/// the service places market and limit orders only.
fn order_type(f: &Field<'_>) -> Result<OrderType, ParseError> {
    const EXPECTED: &str = "market or limit";
    let t = text(f, EXPECTED)?;
    if let Some(o) = OrderType::from_word(t) {
        return Ok(o);
    }
    let mut buf = [0u8; 32];
    // Every stop, take-profit and trailing kind, in the spellings of the exchanges' and brokers' APIs (`STP`,
    // `STOP_LOSS_LIMIT`, `TAKE_PROFIT_MARKET`, `TRAILING_STOP_MARKET`): a `type` that is none of the order types is
    // the sender's own and ignored, so one of these missed there made a breakout stop at 195 a buy limit at 195,
    // filled at once below it.
    let stop_kind = |w: &[u8]| {
        ["stop", "trail", "takeprofit", "profit"].iter().any(|p| w.starts_with(p.as_bytes()))
            || matches!(w, b"stp" | b"stplmt" | b"stplimit" | b"mit" | b"lit" | b"sl" | b"tp")
    };
    match folded(t, &mut buf) {
        Some(w) if stop_kind(w) => Err(ParseError::Unsupported(format!(
            "`{}` is {}: stop, stop-limit and trailing-stop orders are not supported; send market or limit",
            snippet(&f.key),
            snippet(t)
        ))),
        _ => Err(invalid(f, t.to_string(), EXPECTED)),
    }
}

/// What a price-effect mark says: `Some(Some(true))` a credit, `Some(Some(false))` a debit, `Some(None)` even, `None`
/// no price effect at all. Marks are compared by this, not by their text (`Credit` and `NET_CREDIT` are one).
fn effect_of(said: &str) -> Option<Option<bool>> {
    // Every mark starts with c, d, e or n: an order type's `limit` or `market` is turned away before it is folded
    // (this runs for every alert that names its order type).
    // The first byte the fold keeps (it drops `_`, `-`, `.` and spaces): `_credit` is a mark. A non-ASCII one is
    // left to the fold.
    let first = said.bytes().find(|b| !b.is_ascii_whitespace() && !matches!(b, b'_' | b'-' | b'.'))?;
    if first.is_ascii() && !matches!(first.to_ascii_lowercase(), b'c' | b'd' | b'e' | b'n') {
        return None;
    }
    let mut buf = [0u8; 32];
    match folded(said, &mut buf) {
        Some(b"credit" | b"netcredit") => Some(Some(true)),
        Some(b"debit" | b"netdebit") => Some(Some(false)),
        Some(b"even" | b"netzero" | b"netzeroprice" | b"neteven") => Some(None),
        _ => None,
    }
}

/// Whether a word names a credit or a debit (`credit spread`, `DebitSpread`), in any case.
fn names_effect(said: &str) -> bool {
    let has = |w: &[u8]| said.as_bytes().windows(w.len()).any(|x| x.eq_ignore_ascii_case(w));
    has(b"credit") || has(b"debit")
}

/// Whether an order type's field holds a price effect (Tradier's `credit`/`debit`/`even`, Schwab's `NET_CREDIT`,
/// `NET_DEBIT`, `NET_ZERO`): a priced spread, read by [`Fields::signed_price`].
fn is_price_effect(f: &Field<'_>) -> bool {
    text(f, "").is_ok_and(|t| effect_of(t).is_some())
}

/// `max_lag` in whole seconds (3Commas sends it as a string).
fn max_lag(f: &Field<'_>) -> Result<u64, ParseError> {
    const EXPECTED: &str = "a number of seconds such as 300";
    let t = text(f, EXPECTED)?;
    t.parse::<u64>().map_err(|_| invalid(f, t.to_string(), EXPECTED))
}

/// A price-effect mark as sent: its key and value.
type Mark = (String, String);

impl Fields<'_> {
    /// The price with the sign a price effect gives it, where the alert names one: Tradier's `type` (`credit`,
    /// `debit`, `even`), Tastytrade's `price-effect`, Schwab's `NET_CREDIT`/`NET_DEBIT`/`NET_ZERO`. A spread's net
    /// price is positive for a debit and negative for a credit (DESIGN): a positive price marked credit is received.
    /// Dropped, a credit of 1.50 went out as a debit of 1.50, a bid to pay for a spread the sender meant to sell. A
    /// price signed against its mark, two marks that differ, an even price, or a mark that is no price effect is
    /// refused. With the price, the mark that signed it: a priced mark makes the order a limit.
    fn signed_price(&self, price: Option<Decimal>) -> Result<(Option<Decimal>, Option<Mark>), ParseError> {
        let from_type =
            |n: Name| self.get(n).filter(|f| is_price_effect(f)).map(|f| (f.key.to_string(), display(&f.value)));
        let rare = self.rare.as_deref().map_or(&[][..], |r| r.price_effects.as_slice());
        let (named, alt) = (from_type(Name::OrderType), from_type(Name::OrderTypeAlt));
        // The usual alert has no mark: nothing gathered.
        if rare.is_empty() && named.is_none() && alt.is_none() {
            return Ok((price, None));
        }
        let marks: Vec<Mark> = rare.iter().map(|(k, v)| (k.to_string(), v.clone())).chain(named).chain(alt).collect();
        let Some((key, said)) = marks.first().cloned() else { return Ok((price, None)) };
        // Two marks that say otherwise (`type: debit` beside `price-effect: Credit`): whichever was read first signed
        // the price, and a spread to sell went out as a bid to pay.
        if let Some((other, other_said)) = marks.iter().skip(1).find(|(_, v)| effect_of(v) != effect_of(&said)) {
            return Err(ParseError::Conflict {
                first: key,
                second: other.clone(),
                first_value: snippet(&said),
                second_value: snippet(other_said),
            });
        }
        let credit = match effect_of(&said) {
            Some(Some(credit)) => credit,
            Some(None) => {
                return Err(ParseError::Unsupported(format!(
                    "`{}: {}`: an even (zero) net price is not supported; send the net price, negative for a credit",
                    snippet(&key),
                    snippet(&said)
                )))
            }
            None => {
                return Err(ParseError::InvalidField { field: key, value: snippet(&said), expected: "credit or debit" })
            }
        };
        // A mark prices a spread: without the price it was left to the strategy's type, a market spread.
        let Some(price) = price else {
            return Err(ParseError::Unsupported(format!(
                "`{}: {}` marks a net price, and the alert has none: send the spread's net `price`",
                snippet(&key),
                snippet(&said)
            )));
        };
        let price = Some(price);
        let signed = match price {
            Some(p) if credit && p > Decimal::ZERO => Some(-p),
            Some(p) if !credit && p < Decimal::ZERO => {
                return Err(ParseError::Conflict {
                    first: key,
                    second: "price".into(),
                    first_value: snippet(&said),
                    second_value: p.to_string(),
                })
            }
            p => p,
        };
        Ok((signed, price.map(|_| (key, said))))
    }

    /// The order type: `order_type`, else a `type` whose value is an order type (an
    /// Alpaca-style body's `"type": "limit"` must not become the strategy's market order);
    /// a `type` meaning anything else is the sender's own and ignored.
    fn order_type(&self) -> Result<Option<OrderType>, ParseError> {
        // Schwab's `orderType: NET_CREDIT` is a priced spread, signed and made a limit by its mark ([`Self::signed_price`]).
        let named = match self.get(Name::OrderType).map(|f| (f, order_type(f))) {
            Some((f, Err(_))) if is_price_effect(f) => None,
            // TV-Hub's `orderType: buy` is the action ([`Self::order_type_action`]), and says no order type.
            Some((_, Err(_))) if self.order_type_action().is_some() => None,
            other => other.map(|(_, t)| t).transpose()?,
        };
        let alt = match self.get(Name::OrderTypeAlt) {
            // A `type` that names a credit or a debit and is no mark (`credit spread`): ignored as the sender's own,
            // a spread to sell for 1.50 went out as a bid to pay 1.50.
            Some(f) => match order_type(f) {
                Err(ParseError::InvalidField { value, .. }) if !is_price_effect(f) && names_effect(&value) => {
                    return Err(ParseError::Unsupported(format!(
                        "`{}: {}` names a credit or a debit and is no price effect: mark the net price with `credit` \
                         or `debit` (or `NET_CREDIT`, `NET_DEBIT`), or send a credit as a negative `price`",
                        snippet(&f.key),
                        snippet(&value)
                    )));
                }
                Err(ParseError::InvalidField { .. }) => None,
                other => Some((f, other?)),
            },
            None => None,
        };
        match (named, alt, self.get(Name::OrderType)) {
            (Some(a), Some((f, b)), Some(first)) if a != b => Err(ParseError::Conflict {
                first: first.key.to_string(),
                second: f.key.to_string(),
                first_value: a.as_str().to_string(),
                second_value: b.as_str().to_string(),
            }),
            (Some(a), _, _) => Ok(Some(a)),
            (None, alt, _) => Ok(alt.map(|(_, b)| b)),
        }
    }

    /// The order type with E*TRADE's `priceType` where it names one (`LIMIT`, `MARKET`; its price effects are read
    /// as marks, [`Self::signed_price`]): one that says another type than the alert's own is a contradiction, and
    /// any other value (a stop kind, a word it does not know) is refused rather than dropped.
    fn with_price_type(&self, alert_type: Option<OrderType>) -> Result<Option<OrderType>, ParseError> {
        let Some(types) = self.rare.as_deref().map(|r| r.price_types.as_slice()).filter(|t| !t.is_empty()) else {
            return Ok(alert_type);
        };
        let (key, said) = &types[0];
        if let Some((other, other_said)) = types.get(1) {
            return Err(ParseError::Conflict {
                first: key.to_string(),
                second: other.to_string(),
                first_value: snippet(said),
                second_value: snippet(other_said),
            });
        }
        let f = Field { key: Cow::Borrowed(key.as_ref()), value: Value::Text(Cow::Borrowed(said.as_str())) };
        let t = match order_type(&f) {
            Err(ParseError::InvalidField { field, value, .. }) => {
                return Err(ParseError::InvalidField {
                    field,
                    value,
                    expected: "market, limit, net_credit or net_debit",
                })
            }
            other => other?,
        };
        match alert_type {
            Some(a) if a != t => Err(ParseError::Conflict {
                first: self
                    .get(Name::OrderType)
                    .or_else(|| self.get(Name::OrderTypeAlt))
                    .map_or_else(|| "the order type".to_owned(), |f| f.key.to_string()),
                second: key.to_string(),
                first_value: a.as_str().into(),
                second_value: snippet(said),
            }),
            _ => Ok(Some(t)),
        }
    }

    /// Refuses a fallback field that says otherwise than the field it stands in for (see its call).
    #[inline(never)]
    fn fallbacks_agree(&self) -> Result<(), ParseError> {
        if let (Some(main), Some(alt)) = (self.get(Name::Instrument), self.get(Name::InstrumentAlt)) {
            // A template's placeholder left in the fallback is no instrument (the fallback is not read).
            let name = |f: &Field<'_>| {
                text(f, "")
                    .ok()
                    .filter(|t| !t.contains('{'))
                    .map(|t| normalize_instrument(t).bytes().filter(u8::is_ascii_alphanumeric).collect::<Vec<u8>>())
            };
            if let (Some(x), Some(y)) = (name(main), name(alt)) {
                if !y.is_empty() && x != y {
                    return Err(disagree(main, alt));
                }
            }
        }
        if let (Some(main), Some(alt)) = (self.get(Name::Action), self.get(Name::ActionAlt)) {
            if let (Ok((x, _)), Ok((y, _))) =
                (word(main, action_word, ACTION_WORDS), word(alt, action_word, ACTION_WORDS))
            {
                if x != y {
                    return Err(disagree(main, alt));
                }
            }
        }
        Ok(())
    }

    /// TV-Hub's strategy form: `orderType` holding `{{strategy.order.action}}`, `buy` (its `isBuy`) or `sell`
    /// (`isSell`), is the action, and says no order type (TradersPost's `market`, `limit` under the same key do).
    /// Refused as no order type, the strategy's alerts could not trade. Only at the top level: 3Commas'
    /// `order.order_type` is an order type alone.
    fn order_type_action(&self) -> Option<(&Field<'_>, ActionKind)> {
        let f = self.get(Name::OrderType)?;
        // Every alert with an order type asks this.
        let Value::Text(said) = &f.value else { return None };
        // `market`, `limit`: told by their first letter (no space before it to trim), before any trim.
        let first = said.as_bytes().first();
        if first.is_some_and(|b| b.is_ascii_alphanumeric() && !matches!(b, b'b' | b'B' | b's' | b'S')) {
            return None;
        }
        let said = super::trim(said).trim();
        if !(3..=4).contains(&said.len()) {
            return None;
        }
        let a = if said.eq_ignore_ascii_case("buy") {
            ActionWord::Buy
        } else if said.eq_ignore_ascii_case("sell") {
            ActionWord::Sell
        } else {
            return None;
        };
        let mut buf = [0u8; 32];
        (folded(&f.key, &mut buf) == Some(b"ordertype")).then_some((f, ActionKind::Word(a)))
    }

    /// The TV-Hub flag set true (`isBuy`, `isSell`, `isClose`) and the action it says; two set is a conflict.
    fn flags(&self) -> Result<Option<(&Field<'_>, ActionKind)>, ParseError> {
        let mut found: Option<(&Field<'_>, ActionKind)> = None;
        for (name, action) in [
            (Name::IsBuy, ActionKind::Word(ActionWord::Buy)),
            (Name::IsSell, ActionKind::Word(ActionWord::Sell)),
            (Name::IsClose, ActionKind::Canonical(Action::Close)),
        ] {
            let Some(f) = self.get(name) else { continue };
            if !flag(f)? {
                continue;
            }
            if let Some((first, _)) = found {
                return Err(ParseError::Conflict {
                    first: first.key.to_string(),
                    second: f.key.to_string(),
                    first_value: "true".into(),
                    second_value: "true".into(),
                });
            }
            found = Some((f, action));
        }
        Ok(found)
    }
}

fn position_word(s: &str) -> Option<Position> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("bullish") {
        Some(Position::Long)
    } else if s.eq_ignore_ascii_case("bearish") {
        Some(Position::Short)
    } else {
        Position::from_word(s)
    }
}

fn same_value(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Text(x), Value::Text(y)) => x.trim() == y.trim(),
        (Value::Number(x), Value::Number(y)) => x == y,
        (Value::Text(t), Value::Number(n)) | (Value::Number(n), Value::Text(t)) => t.trim() == *n,
        (Value::Null, Value::Null) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        _ => false,
    }
}

/// Whether a field's second value says what its first did.
fn agree(name: Name, first: &Value<'_>, second: &Value<'_>) -> bool {
    if name == Name::MessageId {
        return same_id(first, second);
    }
    same_value(first, second)
        || (matches!(name, Name::Instrument | Name::InstrumentAlt) && same_instrument(first, second))
        || (matches!(name, Name::SentAt | Name::Time) && same_instant(first, second))
        || (name == Name::Duration && same_duration(first, second))
}

/// A time in force as senders and brokers write it: `day`, `gtc`, `fok`, or E*TRADE's `orderTerm` words
/// (`GOOD_FOR_DAY`, `GOOD_UNTIL_CANCEL`, `FILL_OR_KILL`). Its `IMMEDIATE_OR_CANCEL` is none, refused as `ioc` is.
fn duration_word(s: &str) -> Option<Duration> {
    // The usual words first: folding costs about as much again as the whole lookup, on every alert with a `duration`.
    Duration::from_word(s).or_else(|| {
        let mut buf = [0u8; 32];
        match folded(s, &mut buf)? {
            b"goodforday" => Some(Duration::Day),
            b"gooduntilcancel" => Some(Duration::Gtc),
            b"fillorkill" => Some(Duration::Fok),
            _ => None,
        }
    })
}

/// Whether two times in force read as one (`duration: gtc` beside `orderTerm: GOOD_UNTIL_CANCEL`).
fn same_duration(a: &Value<'_>, b: &Value<'_>) -> bool {
    let read = |v: &Value<'_>| match v {
        Value::Text(t) => duration_word(t),
        _ => None,
    };
    read(a).is_some_and(|d| read(b) == Some(d))
}

/// Whether two times read as one instant (`2024-01-15T14:30:00Z` beside `1705329000`): a sender writing its time
/// twice, in two forms, sent one time.
fn same_instant(a: &Value<'_>, b: &Value<'_>) -> bool {
    let read = |v: &Value<'_>| match v {
        Value::Text(t) => super::time::parse_ms(t),
        Value::Number(n) => super::time::parse_ms(n),
        _ => None,
    };
    read(a).is_some_and(|t| read(b) == Some(t))
}

/// Whether two instrument fields name one instrument as the alert reads it (`ticker: "NASDAQ:AAPL"` beside
/// `symbol: "AAPL"`, or `aapl` beside `AAPL`): the keys are interchangeable (spec, Alert payload), so only
/// instruments that differ once read are a conflict. Two spellings of one crypto pair (`BTCUSD`, `BTC-USD`,
/// `BTC/USD`) are one, split as the instrument key splits them: refused, a template sending TradingView's `BTCUSD`
/// beside the broker's `BTC-USD` never traded. Text that is no pair is compared whole, so `BRK.B` and `BRKB` stay
/// two.
fn same_instrument(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Text(x), Value::Text(y)) => {
            let (x, y) = (super::normalize_instrument(x), super::normalize_instrument(y));
            let pair = crate::model::CryptoPair::split;
            !x.is_empty() && (x == y || pair(&x).is_some_and(|p| pair(&y) == Some(p)))
        }
        _ => false,
    }
}

pub(crate) fn display(v: &Value<'_>) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Text(t) => t.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Other(kind) if kind.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {kind}"),
        Value::Other(kind) => format!("a {kind}"),
    }
}

fn text<'f>(f: &'f Field<'_>, expected: &'static str) -> Result<&'f str, ParseError> {
    match &f.value {
        Value::Text(t) => Ok(super::trim(t)),
        Value::Number(n) => Ok(n),
        other => Err(invalid(f, display(other), expected)),
    }
}

fn invalid(f: &Field<'_>, value: String, expected: &'static str) -> ParseError {
    ParseError::InvalidField { field: f.key.to_string(), value: snippet(&value), expected }
}

fn word<T>(f: &Field<'_>, read: fn(&str) -> Option<T>, expected: &'static str) -> Result<T, ParseError> {
    let t = text(f, expected)?;
    read(t).ok_or_else(|| invalid(f, t.to_string(), expected))
}

fn number(f: &Field<'_>) -> Result<Decimal, ParseError> {
    const EXPECTED: &str = "a decimal number such as 190.25";
    match &f.value {
        Value::Number(n) => decimal::parse(n).ok_or_else(|| invalid(f, n.to_string(), EXPECTED)),
        Value::Text(t) => decimal::parse(t).ok_or_else(|| invalid(f, t.to_string(), EXPECTED)),
        other => Err(invalid(f, display(other), EXPECTED)),
    }
}

/// A position size as TradingView reports it (`{{strategy.market_position_size}}`): a
/// number, read without its sign, since the position word already says the side.
fn size(f: &Field<'_>) -> Result<Decimal, ParseError> {
    number(f).map(|n| n.abs())
}

/// Two fields that say different things of one matter, named with their values.
fn disagree(a: &Field<'_>, b: &Field<'_>) -> ParseError {
    ParseError::Conflict {
        first: a.key.to_string(),
        second: b.key.to_string(),
        first_value: snippet(&display(&a.value)),
        second_value: snippet(&display(&b.value)),
    }
}

/// Whether a ticker is a spread or ratio symbol (`NASDAQ:AAPL/NASDAQ:MSFT`, `AAPL*2-NASDAQ:MSFT`,
/// `OPRA:SPY261218C600.0-OPRA:SPY261218C610.0`): read to its last colon, it traded the last leg alone. What comes
/// before an exchange prefix's colon is an exchange's name (letters, digits, `_`: `NASDAQ`, `CME_MINI`, spaces
/// around it aside), never another symbol.
fn names_two_instruments(raw: &str) -> bool {
    // Byte by byte, as `normalize_instrument` finds the colon: this runs on every alert's ticker.
    let b = raw.as_bytes();
    b.iter()
        .rposition(|&c| c == b':')
        .is_some_and(|i| !b[..i].iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b' ' | b'\t')))
}

fn instrument(f: &Field<'_>) -> Result<CompactString, ParseError> {
    const EXPECTED: &str = "a symbol such as AAPL, NASDAQ:AAPL or BTC/USD";
    let raw = text(f, EXPECTED)?;
    if names_two_instruments(raw) {
        return Err(invalid(f, raw.to_string(), "one instrument (a spread of two is not traded)"));
    }
    let sym = normalize_instrument(raw);
    let ok = !sym.is_empty()
        && sym.len() <= 32
        && sym
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'/' | b'-' | b'!' | b'_' | b'=' | b'^' | b'&'));
    if ok {
        Ok(sym)
    } else {
        Err(invalid(f, raw.to_string(), EXPECTED))
    }
}

/// How many distinct contracts under unread keys are kept: of two, at most one is the alert's own, so the alert is
/// refused whatever follows, and a body of many such keys costs no more.
const UNREAD_CONTRACTS: usize = 2;

/// The option contract a value under an unread key names, read as the ticker reads one ([`normalize_instrument`]):
/// read raw, TradingView's `OPRA:SPY240126P480.0` was no contract, and the strategy traded its own pick.
fn unread_contract(t: &str) -> Option<Contract> {
    // What follows the exchange must have a contract's length (9 to 32 bytes, and a `.P`) before anything is copied:
    // most unread values are notes and numbers, and go no further.
    let s = super::trim(t);
    let after = match s.bytes().rposition(|b| b == b':') {
        Some(i) if i + 1 < s.len() => &s[i + 1..],
        _ => s,
    };
    if !(9..=34).contains(&super::trim(after).len()) {
        return None;
    }
    Contract::parse(&normalize_instrument(t))
}

/// A broker's order id: text or a number, at most 128 characters; empty means none.
fn order_id(f: &Field<'_>) -> Result<Option<String>, ParseError> {
    const EXPECTED: &str = "the working order's id, at most 128 characters";
    let t = text(f, EXPECTED)?;
    if t.is_empty() {
        return Ok(None);
    }
    if t.len() > 128 || t.chars().any(char::is_control) {
        return Err(invalid(f, t.to_string(), EXPECTED));
    }
    Ok(Some(t.to_string()))
}

/// A GUID in braces as .NET and Windows write it: `{3F2504E0-4F89-11D3-9A0C-0305E82C3301}` (or its 32 digits
/// without the dashes). No template's placeholder (`{id}`, `{0}`, `{{strategy.order.id}}`) has that shape.
fn is_braced_guid(t: &str) -> bool {
    let Some(inner) = t.trim().strip_prefix('{').and_then(|r| r.strip_suffix('}')) else { return false };
    let b = inner.as_bytes();
    match b.len() {
        32 => b.iter().all(u8::is_ascii_hexdigit),
        36 => b
            .iter()
            .enumerate()
            .all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { *c == b'-' } else { c.is_ascii_hexdigit() }),
        _ => false,
    }
}

fn message_id(f: &Field<'_>) -> Result<Option<CompactString>, ParseError> {
    const EXPECTED: &str = "a string of at most 256 characters, or a whole number";
    // A whole number has one spelling, its digits, however many; a fraction or an exponent spells one value several
    // ways (`1.5`, `1.50`, `15e-1`), which would be several dedup keys, and may be a float the sender already rounded.
    let whole;
    let t = match f.value {
        Value::Number(n) if !is_whole(n) => return Err(invalid(f, n.to_string(), EXPECTED)),
        Value::Number(n) => {
            whole = whole_id(n);
            &*whole
        }
        _ => text(f, EXPECTED)?,
    };
    if t.is_empty() {
        return Ok(None);
    }
    if t.len() > 256 {
        return Err(invalid(f, t.to_string(), EXPECTED));
    }
    Ok(Some(CompactString::new(t)))
}

/// A whole number's one spelling as an id: `-0` is `0`, and leading zeros (text that looks like JSON) are dropped,
/// so that each whole number is one key.
fn whole_id(n: &str) -> Cow<'_, str> {
    let (minus, digits) = n.strip_prefix('-').map_or(("", n), |d| ("-", d));
    match digits.trim_start_matches('0') {
        "" => Cow::Borrowed("0"),
        d if d.len() == digits.len() => Cow::Borrowed(n),
        d => Cow::Owned(format!("{minus}{d}")),
    }
}

/// Whether two message ids are one key ([`message_id`]): a whole number by its one spelling, text as trimmed. Values
/// that are no id are left to [`same_value`] (and refused by [`message_id`]).
fn same_id(a: &Value<'_>, b: &Value<'_>) -> bool {
    fn key<'v>(v: &'v Value<'_>) -> Option<Cow<'v, str>> {
        match v {
            Value::Number(n) if is_whole(n) => Some(whole_id(n)),
            Value::Text(t) => Some(Cow::Borrowed(super::trim(t))),
            _ => None,
        }
    }
    match (key(a), key(b)) {
        (Some(x), Some(y)) => x == y,
        _ => same_value(a, b),
    }
}

/// Whether a number token is a whole number: digits, after a minus sign or none.
fn is_whole(n: &str) -> bool {
    let digits = n.strip_prefix('-').unwrap_or(n);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields<'a>(pairs: &[(&'a str, &'a str)]) -> Fields<'a> {
        let mut f = Fields::default();
        for (k, v) in pairs {
            f.set(Cow::Borrowed(k), Value::Text(Cow::Borrowed(v))).unwrap();
        }
        f
    }

    #[test]
    fn key_synonyms() {
        assert_eq!(Name::from_key("TICKER"), Some(Name::Instrument));
        assert_eq!(Name::from_key("market_position"), Some(Name::MarketPosition));
        assert_eq!(Name::from_key("prevMarketPosition"), Some(Name::PrevMarketPosition));
        assert_eq!(Name::from_key("Time-In-Force"), Some(Name::Duration));
        assert_eq!(Name::from_key("comment"), None);
        assert_eq!(Name::from_key(&"x".repeat(100)), None);
    }

    /// `timenow`/`timestamp` are the alert's time and win over `time`, which may be the bar's; two values of one
    /// that read as the same instant agree, two instants do not.
    #[test]
    fn the_alerts_time_wins_over_the_bars_and_one_instant_agrees() {
        let sent = |pairs: &[(&str, &str)]| {
            let mut f = fields(&[("ticker", "AAPL"), ("action", "buy")]);
            for (k, v) in pairs {
                f.set(Cow::Borrowed(k), Value::Text(Cow::Borrowed(v)))?;
            }
            f.build().map(|a| a[0].sent_at_ms)
        };
        let t = 1_705_329_000_000;
        assert_eq!(sent(&[("time", "2024-01-15T14:00:00Z"), ("timenow", "2024-01-15T14:30:00Z")]), Ok(Some(t)));
        assert_eq!(sent(&[("timestamp", "1705329000"), ("time", "1705327200")]), Ok(Some(t)));
        assert_eq!(sent(&[("time", "1705329000")]), Ok(Some(t)));
        assert_eq!(sent(&[("timenow", "2024-01-15T14:30:00Z"), ("timestamp", "1705329000000")]), Ok(Some(t)));
        assert_eq!(sent(&[("time", "2024-01-15T15:30:00+01:00"), ("TIME", "2024-01-15T14:30:00.000Z")]), Ok(Some(t)));
        for two in [
            [("timenow", "2024-01-15T14:30:00Z"), ("timestamp", "1705329001")],
            [("time", "2024-01-15T14:30:00Z"), ("Time", "2024-01-15T14:00:00Z")],
            // Unread, two texts are two times: which one is meant cannot be told.
            [("timenow", "yesterday"), ("timestamp", "today")],
        ] {
            assert!(matches!(sent(&two), Err(ParseError::Conflict { .. })), "{two:?}");
        }
    }

    /// E*TRADE's `orderTerm` is a time in force; a broker's extended session (Schwab's `session`, E*TRADE's
    /// `marketSession`, IBKR's `outsideRth`) is refused as `extendedHours: true` is, its regular one read as nothing.
    #[test]
    fn a_brokers_time_in_force_and_session_keys() {
        let build = |pairs: &[(&str, Value<'static>)]| {
            let mut f = fields(&[("ticker", "AAPL"), ("action", "buy")]);
            for (k, v) in pairs {
                f.set(Cow::Owned(k.to_string()), v.clone())?;
            }
            f.build().map(|a| a[0].duration)
        };
        let text = |t: &'static str| Value::Text(Cow::Borrowed(t));
        assert_eq!(Name::from_key("orderTerm"), Some(Name::Duration));
        assert_eq!(build(&[("orderTerm", text("GOOD_FOR_DAY"))]), Ok(Some(Duration::Day)));
        assert_eq!(build(&[("order_term", text("good_until_cancel"))]), Ok(Some(Duration::Gtc)));
        assert_eq!(build(&[("orderTerm", text("FILL_OR_KILL")), ("tif", text("fok"))]), Ok(Some(Duration::Fok)));
        assert!(matches!(build(&[("orderTerm", text("IMMEDIATE_OR_CANCEL"))]), Err(ParseError::InvalidField { .. })));
        let two = build(&[("duration", text("day")), ("orderTerm", text("GOOD_UNTIL_CANCEL"))]);
        assert!(matches!(two, Err(ParseError::Conflict { .. })), "{two:?}");
        for extended in [
            ("session", text("SEAMLESS")),
            ("session", text("AM")),
            ("Session", text("pm")),
            ("session", text("EXTENDED")),
            ("marketSession", text("EXTENDED")),
            ("outsideRth", Value::Bool(true)),
            ("outside_rth", text("true")),
        ] {
            let got = build(std::slice::from_ref(&extended));
            assert!(
                matches!(&got, Err(ParseError::Unsupported(m)) if m.contains("extended-hours")),
                "{extended:?}: {got:?}"
            );
        }
        for regular in [
            ("session", text("NORMAL")),
            ("session", text("regular")),
            ("session", text("London")),
            ("session", Value::Null),
            ("marketSession", text("REGULAR")),
            ("marketSession", text("")),
            ("outsideRth", Value::Bool(false)),
            ("outsideRth", Value::Null),
        ] {
            assert_eq!(build(std::slice::from_ref(&regular)), Ok(None), "{regular:?}");
        }
        assert!(matches!(build(&[("marketSession", text("NIGHT"))]), Err(ParseError::InvalidField { .. })));
        assert!(matches!(build(&[("outsideRth", text("maybe"))]), Err(ParseError::InvalidField { .. })));
    }

    #[test]
    fn bracket_spellings() {
        for k in [
            "stopLoss",
            "stop_loss",
            "STOP-LOSS",
            "takeProfit",
            "take_profit",
            "sl",
            "SL",
            "tp",
            "tp1",
            "sl2",
            "stop",
            "stop_price",
            "trailingStop",
            "trailing_stop",
            "trail_price",
            "trail_percent",
            "trail_offset",
            "trail_points",
            "profit",
            "loss",
            "order_class",
            "dollar_sl",
            "dollar_tp",
            "trail_sl",
            // With a unit or a kind after the name: an exact list let these through, and the stop was dropped.
            "sl_price",
            "slPrice",
            "tp_pct",
            "sl_percent",
            "stop_loss_pct",
            "take_profit_pct",
            "take_profit_percent",
            "profit_target",
            "target_price",
            "takeProfits",
            "sl_pips",
            "tp_points2",
            "tp1_price",
            "tp2_pct",
            "sl_perc",
            "stop_loss_percentage",
            "sl_percentage",
            // Pine's limit price: not read, so refused rather than sent at market.
            "limit",
            "Limit",
        ] {
            assert!(is_bracket_key(k), "{k}");
        }
        // Alert fields and near misses keep their meaning.
        for k in [
            "price",
            "limit_price",
            "target",
            "ticker",
            "slippage",
            "tpx",
            "tp123",
            "stops",
            "profitable",
            "comment",
            "slot",
            "tpsl",
            "stoplossed",
            "percentage_tp",
        ] {
            assert!(!is_bracket_key(k), "{k}");
        }
        for k in ["price", "order_type", "quantity", "symbol", "side"] {
            assert!(Name::from_key(k).is_some() && !is_bracket_key(k), "{k}");
        }
    }

    #[test]
    fn bracket_values_that_ask_for_nothing() {
        let asks = |k: &str, v: Value<'_>| asks_for_bracket(k, &v);
        assert!(!asks("sl", Value::Null));
        assert!(!asks("sl", Value::Bool(false)));
        assert!(!asks("sl", Value::Number("0.00")));
        assert!(!asks("sl", Value::Text(" NaN ".into())));
        assert!(!asks("order_class", Value::Text("simple".into())));
        assert!(asks("sl", Value::Number("180")));
        assert!(asks("trailingStop", Value::Bool(true)));
        assert!(asks("stopLoss", Value::Other("object")));
        assert!(asks("order_class", Value::Text("bracket".into())));
        assert!(asks("sl", Value::Text("simple".into())));
    }

    #[test]
    fn conflicting_instruments_are_refused() {
        let mut f = Fields::default();
        f.set("ticker".into(), Value::Text("AAPL".into())).unwrap();
        f.set("symbol".into(), Value::Text("AAPL".into())).unwrap();
        assert!(matches!(f.set("instrument".into(), Value::Text("MSFT".into())), Err(ParseError::Conflict { .. })));
    }

    /// `ticker: "NASDAQ:AAPL"` beside `symbol: "AAPL"` (or `aapl` beside `AAPL`) name one instrument: the keys are
    /// interchangeable, and the alert was refused as two that disagree, its entry lost.
    #[test]
    fn instrument_keys_naming_one_instrument_agree() {
        for (first, second) in
            [("NASDAQ:AAPL", "AAPL"), ("aapl", "AAPL"), (" AAPL", "BATS:aapl"), ("BTCUSDT.P", "BTCUSDT")]
        {
            let a = fields(&[("ticker", first), ("symbol", second), ("action", "buy")]).build();
            assert_eq!(a.map(|a| a[0].instrument.clone()), Ok(normalize_instrument(second)), "{first} / {second}");
        }
        // Two spellings of one crypto pair are one pair, as `pair` beside `ticker` is: refused, a template sending
        // TradingView's `BTCUSD` beside the broker's `BTC-USD` never traded. The alert keeps its first spelling.
        for (first, second) in [("BTCUSD", "BTC-USD"), ("BITSTAMP:btc/usd", "BTCUSD"), ("ETH_USDT", "ethusdt")] {
            let a = fields(&[("ticker", first), ("symbol", second), ("action", "buy")]).build();
            assert_eq!(a.map(|a| a[0].instrument.clone()), Ok(normalize_instrument(first)), "{first} / {second}");
        }
        for (first, second) in [
            ("AAPL", "MSFT"),
            ("NASDAQ:AAPL", "NASDAQ:AAP"),
            ("BTC/USD", "ETH/USD"),
            ("BTCUSD", "BTC/USDT"),
            // Only pairs are read in parts: `BRK.B` and `BRKB` are two tickers, however alike.
            ("BRK.B", "BRKB"),
        ] {
            let mut f = Fields::default();
            f.set("ticker".into(), Value::Text(first.into())).unwrap();
            let e = f.set("symbol".into(), Value::Text(second.into()));
            assert!(matches!(e, Err(ParseError::Conflict { .. })), "{first} / {second}: {e:?}");
        }
    }

    #[test]
    fn flat_after_a_word_is_a_close() {
        let a = fields(&[("ticker", "AAPL"), ("action", "sell"), ("marketPosition", "flat")]).build().unwrap();
        assert_eq!(a[0].action, ActionKind::Canonical(Action::Close));
    }

    #[test]
    fn target_and_order_id_only_kept_for_modify_and_cancel() {
        let a = fields(&[("ticker", "AAPL"), ("action", "modify"), ("target", "Exit"), ("orderId", "42")]).build();
        let a = &a.unwrap()[0];
        assert_eq!((a.target, a.order_id.as_deref()), (Some(OrderIntent::Exit), Some("42")));
        let a = &fields(&[("ticker", "AAPL"), ("action", "cancel"), ("order_id", "42")]).build().unwrap()[0];
        assert_eq!(a.order_id.as_deref(), Some("42"));
        // Elsewhere they are ignored, as before: a sender's order id is often an unrelated name.
        let a = &fields(&[("ticker", "AAPL"), ("action", "buy"), ("target", "exit"), ("order_id", "Long")]).build();
        assert_eq!((a.as_ref().unwrap()[0].target, a.as_ref().unwrap()[0].order_id.as_deref()), (None, None));
        // But a `target` that is a price is a take-profit, refused as brackets are: ignored, the entry went out
        // and the exit the sender counted on never existed. One that asks for nothing (0, empty) is no ask.
        let e = fields(&[("ticker", "AAPL"), ("action", "buy"), ("target", "200")]).build().unwrap_err();
        assert!(e.to_string().starts_with("`target`: stop and bracket orders"), "{e}");
        assert!(fields(&[("ticker", "AAPL"), ("action", "buy"), ("target", "0")]).build().is_ok());
        assert!(fields(&[("ticker", "AAPL"), ("action", "buy"), ("target", "")]).build().is_ok());
        let e = fields(&[("ticker", "AAPL"), ("action", "modify"), ("target", "both")]).build().unwrap_err();
        assert_eq!(e.to_string(), "`target` cannot be \"both\": entry or exit");
    }

    #[test]
    fn quantity_only_kept_for_modify() {
        let a = fields(&[("ticker", "AAPL"), ("action", "buy"), ("quantity", "5")]).build().unwrap();
        assert_eq!(a[0].quantity, None);
        let a = fields(&[("ticker", "AAPL"), ("action", "modify"), ("quantity", "5")]).build().unwrap();
        assert_eq!(a[0].quantity, Some(Decimal::from(5)));
        let e = fields(&[("ticker", "AAPL"), ("action", "modify"), ("quantity", "0")]).build().unwrap_err();
        assert!(matches!(e, ParseError::InvalidField { .. }));
        // Two new sizes: which one was meant cannot be told. Only a MODIFY reads them.
        let e = fields(&[("ticker", "AAPL"), ("action", "modify"), ("qty", "5"), ("notional", "820")]).build();
        assert_eq!(e.unwrap_err().to_string(), "`qty` and `notional` disagree (\"5\" vs \"820\")");
        assert!(fields(&[("ticker", "AAPL"), ("action", "buy"), ("qty", "5"), ("notional", "820")]).build().is_ok());
    }

    /// `exit_long` with `direction: short` was read as CLOSE SHORT: the explicit direction silently won over
    /// the side the action names.
    #[test]
    fn an_action_naming_its_side_and_a_direction_naming_the_other_conflict() {
        for (action, direction) in [("exit_long", "short"), ("enter_long", "short"), ("exit_short", "LONG")] {
            let e = fields(&[("ticker", "AAPL"), ("action", action), ("direction", direction)]).build().unwrap_err();
            assert!(matches!(e, ParseError::Conflict { .. }), "{action} {direction}: {e}");
        }
        let a = fields(&[("ticker", "AAPL"), ("action", "exit_long"), ("direction", "long")]).build().unwrap();
        assert_eq!((a[0].action.as_str(), a[0].direction), ("CLOSE", Some(Direction::Long)));
        let a = fields(&[("ticker", "AAPL"), ("action", "buy"), ("direction", "short")]).build().unwrap();
        assert_eq!(a[0].direction, Some(Direction::Short), "a word names no side: the direction says it");
    }
}
