//! The canonical alert: what any sender's body means, independent of how it was written.
//!
//! Bytes come in through [`parse`], which picks JSON or plain text by content type,
//! and leave as one or two [`Alert`]s (a position reversal yields CLOSE then OPEN).
//! Nothing here knows about strategies or brokers: action words such as `buy` are
//! kept as words ([`ActionKind::Word`]) and resolved later by the strategy's rules.

pub mod fields;
mod json;
mod occ;
mod placeholder;
mod render;
pub mod text;
pub mod time;
mod transition;

use crate::decimal::Decimal;
use crate::model::words::words;
use compact_str::CompactString;

pub(crate) use crate::model::snippet;
pub use crate::model::{Date, Direction, Duration, LegAction, OptionSide, OrderIntent, OrderType, MAX_LEGS};
pub use placeholder::find_placeholder;
pub use transition::{transition, Position};

words! {
    /// What an alert asks for, once resolved.
    pub enum Action {
        /// Enter a position.
        Open = "OPEN",
        /// Exit the whole position in a direction.
        Close = "CLOSE",
        /// Change the price and/or size of a working order.
        Modify = "MODIFY",
        /// Pull a working entry order.
        Cancel = "CANCEL",
    }
}

words! {
    /// Sender vocabulary that only the strategy's `rules` can turn into an [`Action`].
    pub enum ActionWord {
        /// `buy`
        Buy = "buy",
        /// `sell`
        Sell = "sell",
        /// `entry`
        Entry = "entry",
        /// `exit`
        Exit = "exit",
    }
}

words! {
    /// Which quote prices an alert's limit order when it names one (TradersPost's
    /// `limitPriceType` / `marketPriceType`): it overrides the strategy's Limit Target for
    /// that alert.
    pub enum QuotePrice {
        /// The bid.
        Bid = "bid",
        /// The ask.
        Ask = "ask",
        /// The bid for a buy, the ask for a sell (the passive side).
        AskBid = "ask_bid" | "askbid" | "bid_ask",
        /// Halfway between bid and ask.
        Mark = "mark" | "mid" | "midpoint",
        /// The last trade.
        Last = "last",
    }
}

/// The action as sent: canonical, or a word awaiting the strategy's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// OPEN, CLOSE, MODIFY or CANCEL.
    Canonical(Action),
    /// buy, sell, entry or exit.
    Word(ActionWord),
}

/// One option leg as the alert gave it (external selection). Every field is optional
/// here; order building says which ones it needed and could not find.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leg {
    /// OCC option symbol, padded or not.
    pub symbol: Option<String>,
    /// CALL or PUT.
    pub side: Option<OptionSide>,
    /// buy_to_open, sell_to_open, buy_to_close, sell_to_close.
    pub action: Option<LegAction>,
    /// Strike price.
    pub strike: Option<Decimal>,
    /// Expiration date.
    pub expiration: Option<Date>,
    /// Per-leg limit price.
    pub price: Option<Decimal>,
    /// Live bid/ask price for the leg.
    pub live_price: Option<Decimal>,
    /// The leg's own size as sent (`ratio_qty`, `ratio`, `quantity`, `qty`), while the legs
    /// are read. Never the order's size, which the bot's sizing sets; it only tells a ratio
    /// spread (legs of unequal sizes, refused) from a spread of equal legs, and is cleared
    /// once the legs are found equal, so a canonical alert's legs never carry one.
    pub size: Option<Decimal>,
}

/// The canonical alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// What to do.
    pub action: ActionKind,
    /// Underlying instrument, exchange prefix and `.P` suffix removed.
    pub instrument: CompactString,
    /// LONG or SHORT when known.
    pub direction: Option<Direction>,
    /// Limit price, or a spread's net price (positive debit, negative credit).
    pub price: Option<Decimal>,
    /// Per-alert override of the strategy's order type.
    pub order_type: Option<OrderType>,
    /// Time in force when the sender gave one.
    pub duration: Option<Duration>,
    /// New size; meaningful for MODIFY only.
    pub quantity: Option<Decimal>,
    /// New notional size; meaningful for MODIFY only.
    pub notional: Option<Decimal>,
    /// Which working order a MODIFY or CANCEL means when the side has several: the
    /// entry or the exit (`target`).
    pub target: Option<OrderIntent>,
    /// Which working order a MODIFY or CANCEL means, by the broker's order id (`order_id`).
    pub order_id: Option<String>,
    /// Option legs (JSON only).
    pub legs: Vec<Leg>,
    /// Caller-chosen dedup key.
    pub message_id: Option<CompactString>,
    /// When the sender says the alert was made, Unix milliseconds (`time`, `timenow`,
    /// `timestamp`, `alertTimestamp`, `date`), for the strategy's `max_alert_age`.
    pub sent_at_ms: Option<i64>,
    /// A time the alert carries that reads as none, when no other time key gives the alert's: with the
    /// strategy's `max_alert_age` it refuses the alert, whose age cannot be checked.
    pub unread_time: Option<UnreadTime>,
    /// An option contract under a key the parser does not read, when it is not the one contract the alert names:
    /// an option strategy refuses the alert, which would trade some other contract than the one the sender named.
    pub unread_contract: Option<UnreadContract>,
    /// The sender's position before the fill, when `prevMarketPosition` is sent without `marketPosition` (with both,
    /// the transition says what the fill did). Judged in decide: a `buy` from a short (a `sell` from a long) may
    /// have covered it or reversed it, so the rules may not make it an entry; from flat or the same side it enters
    /// or adds, so they may not make it a close; a CLOSE closes only the side held before (one naming no side,
    /// that one).
    pub held_before: Option<Position>,
    /// The sender's own bound on the alert's age, seconds (`max_lag`, `maxLag`).
    pub max_lag_s: Option<u64>,
    /// Per-alert Limit Target: which quote prices a limit order without a price.
    pub limit_target: Option<QuotePrice>,
}

/// A time key whose value reads as no time (`"time": "yesterday"`, a placeholder left in it), as sent: dropped,
/// it switched the strategy's `max_alert_age` off for the alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadTime {
    /// The key, as the sender wrote it.
    pub key: CompactString,
    /// The value, as sent (its first 40 characters).
    pub value: String,
}

/// An option contract under a key no field holds (`"symbol_name": "SPY240126P00480000"`), as sent: dropped, an
/// option strategy traded its own pick, or every position on the underlying, instead of the contract named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnreadContract {
    /// The key, as the sender wrote it.
    pub key: CompactString,
    /// The contract, as an OCC symbol without padding.
    pub contract: String,
}

impl Alert {
    /// A bare alert: an action on an instrument, nothing else.
    pub fn new(action: ActionKind, instrument: impl Into<CompactString>) -> Self {
        Alert {
            action,
            instrument: instrument.into(),
            direction: None,
            price: None,
            order_type: None,
            duration: None,
            quantity: None,
            notional: None,
            target: None,
            order_id: None,
            legs: Vec::new(),
            message_id: None,
            sent_at_ms: None,
            unread_time: None,
            unread_contract: None,
            held_before: None,
            max_lag_s: None,
            limit_target: None,
        }
    }
}

/// Why a body could not be read as an alert. Messages are sentences a trader can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Nothing was sent.
    #[error("the body is empty")]
    Empty,
    /// The body is not UTF-8 text.
    #[error("the body is not UTF-8 text")]
    NotText,
    /// `application/json` with invalid JSON.
    #[error("the body is not valid JSON: {0}")]
    InvalidJson(String),
    /// JSON, but not an object.
    #[error("the body is JSON but not an object; send an object such as {{\"ticker\":\"AAPL\",\"action\":\"buy\"}}")]
    NotAnObject,
    /// No instrument could be found.
    #[error("the alert has no instrument (send `ticker`, `symbol` or `instrument`)")]
    MissingInstrument,
    /// No action could be found.
    #[error("the alert has no action (send `action`: OPEN, CLOSE, MODIFY, CANCEL, buy, sell, entry or exit)")]
    MissingAction,
    /// A charting-platform placeholder was sent unresolved.
    #[error("unresolved placeholder {placeholder} in `{}`: the sender did not fill it in, so no trade is made", key_shown(.field))]
    Placeholder {
        /// The field it was found in.
        field: String,
        /// The placeholder text, e.g. `{{ticker}}`.
        placeholder: String,
    },
    /// Several placeholders were sent unresolved: each with the field it was found in.
    #[error("unresolved placeholders {}: the sender did not fill them in, so no trade is made", list_placeholders(.0))]
    Placeholders(Vec<(String, String)>),
    /// A field has a value it cannot take.
    #[error("`{}` cannot be {value:?}: {expected}", key_shown(.field))]
    InvalidField {
        /// Field name as the sender wrote it.
        field: String,
        /// The offending value (shortened).
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// Two fields disagree (for example `ticker` and `symbol`).
    #[error("`{}` and `{}` disagree ({first_value:?} vs {second_value:?})", key_shown(.first), key_shown(.second))]
    Conflict {
        /// First field name.
        first: String,
        /// Second field name.
        second: String,
        /// First value.
        first_value: String,
        /// Second value.
        second_value: String,
    },
    /// More legs than an order supports.
    #[error("the alert has {0} option legs; an order supports at most 4")]
    TooManyLegs(usize),
    /// Option legs in a text alert.
    #[error("option legs need a JSON alert; a text alert cannot carry them")]
    LegsNeedJson,
    /// Text that is not a trading instruction (for example a price alert's default message).
    #[error("not a trading alert: {0}")]
    NotAnAlert(String),
    /// An option leg's OCC symbol names another contract than the leg's own `side`,
    /// `strike` or `expiration`. The leg is counted from 1 in the message, with its index.
    #[error("leg {} (`legs[{index}]`): symbol {symbol} says {field} {from_symbol} but {field} is {given}", index + 1)]
    LegMismatch {
        /// The leg's index in `legs`, from 0.
        index: usize,
        /// The symbol as sent (shortened).
        symbol: String,
        /// `side`, `strike` or `expiration`.
        field: &'static str,
        /// What the symbol says.
        from_symbol: String,
        /// What the leg's field says.
        given: String,
    },
    /// The alert asks for something the service does not do (a partial close, a stop loss
    /// or take profit). It is refused whole rather than traded without that part; the
    /// message names what was asked and what to send instead.
    #[error("{0}")]
    Unsupported(String),
}

impl ParseError {
    /// True for the one parse error the HTTP layer answers with 422 rather than a rejection.
    pub fn is_unprocessable(&self) -> bool {
        matches!(self, ParseError::TooManyLegs(_))
    }
}

/// A key as a message quotes it. Keys are matched with `_`, `-`, `.` and spaces folded out, so `ticker` followed by
/// 250,000 underscores is the ticker: quoted whole, one such key made a 256 KiB reason, answer and log row, where
/// values are cut to 40 characters. Keys of any real sender are far shorter than the cut.
pub(crate) fn key_shown(key: &str) -> std::borrow::Cow<'_, str> {
    const MAX: usize = 64;
    match key.char_indices().nth(MAX) {
        None => std::borrow::Cow::Borrowed(key),
        Some((at, _)) => std::borrow::Cow::Owned(format!("{}…", &key[..at])),
    }
}

fn list_placeholders(list: &[(String, String)]) -> String {
    let parts: Vec<String> = list.iter().map(|(field, p)| format!("{p} in `{}`", key_shown(field))).collect();
    parts.join(", ")
}

/// How the body was declared by the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` (or `+json`): always JSON-decoded.
    Json,
    /// `text/plain`: never JSON-decoded.
    Text,
    /// Anything else or missing: JSON when the body is a JSON object, else text.
    Sniff,
}

impl BodyKind {
    /// Classifies a `Content-Type` header value (parameters such as charset are ignored).
    pub fn from_content_type(content_type: Option<&str>) -> Self {
        let Some(ct) = content_type else { return BodyKind::Sniff };
        // The usual headers, answered before any splitting and case folding.
        match ct {
            "application/json" => return BodyKind::Json,
            "text/plain" => return BodyKind::Text,
            _ => {}
        }
        let essence = ct.split(';').next().unwrap_or("").trim();
        if essence.eq_ignore_ascii_case("application/json")
            || essence
                .as_bytes()
                .rsplit(|&b| b == b'+')
                .next()
                .is_some_and(|suffix| suffix.eq_ignore_ascii_case(b"json") && essence.len() > 5)
        {
            BodyKind::Json
        } else if essence.eq_ignore_ascii_case("text/plain") {
            BodyKind::Text
        } else {
            BodyKind::Sniff
        }
    }
}

/// The alerts one body yields: one, or two for a reversal (CLOSE then OPEN).
pub type Alerts = smallvec::SmallVec<[Alert; 1]>;

/// Parses a raw webhook body into canonical alerts.
///
/// `content_type` is the request's `Content-Type` header value, if any.
pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<Alerts, ParseError> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ParseError::Empty);
    }
    match BodyKind::from_content_type(content_type) {
        BodyKind::Json => json::parse(body),
        BodyKind::Text => text::parse(as_text(body)?),
        BodyKind::Sniff => {
            let first = body.iter().find(|b| !b.is_ascii_whitespace());
            if matches!(first, Some(b'{' | b'[')) {
                match json::parse(body) {
                    Err(ParseError::InvalidJson(_)) => text::parse(as_text(body)?),
                    other => other,
                }
            } else {
                text::parse(as_text(body)?)
            }
        }
    }
}

/// The sender's message id in a body whose alert did not parse (see [`parse`]): read from
/// a JSON object (also one sent as text, which parses as JSON would) so that the dedup key
/// is the sender's id whenever the body carries one. `None` for any other body.
pub fn message_id_of_unparsed(body: &[u8]) -> Option<CompactString> {
    let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        json::message_id(body)
    } else {
        None
    }
}

use crate::model::words::trim;

fn as_text(body: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(body).map_err(|_| ParseError::NotText)
}

/// Removes an exchange prefix (`NASDAQ:AAPL`) and the perpetual suffix `.P`, trims, and
/// upper-cases. Continuous futures names such as `NQ1!` are kept as sent.
pub fn normalize_instrument(raw: &str) -> CompactString {
    let s = trim(raw);
    // Searched byte by byte: names are short, and a call to memrchr costs more.
    let s = match s.bytes().rposition(|b| b == b':') {
        Some(i) if i + 1 < s.len() => &s[i + 1..],
        _ => s,
    };
    let s = trim(s);
    let s = if s.len() > 2 && (s.ends_with(".P") || s.ends_with(".p")) { &s[..s.len() - 2] } else { s };
    let mut out = CompactString::new(s);
    // Names nearly always come upper case already: upper-cased anyway, the name was written back a byte at a
    // time and then read back whole as it was returned, stalling on store forwarding.
    if s.bytes().any(|b| b.is_ascii_lowercase()) {
        out.make_ascii_uppercase();
    }
    out
}

impl ActionKind {
    /// Reads any accepted action word.
    pub fn from_word(s: &str) -> Option<ActionKind> {
        let s = s.trim();
        Action::from_word(s).map(ActionKind::Canonical).or_else(|| ActionWord::from_word(s).map(ActionKind::Word))
    }

    /// OPEN/CLOSE/MODIFY/CANCEL upper case; unresolved words lower case, so the two stay distinguishable.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Canonical(a) => a.as_str(),
            ActionKind::Word(w) => w.as_str(),
        }
    }
}

#[cfg(test)]
mod tests {

    proptest::proptest! {
        #[test]
        fn trim_is_str_trim(s in "[ \\t\\n\\u{a0}\\u{2003}\\u{3000}a-zA-Z0-9:.{}é]{0,12}") {
            proptest::prop_assert_eq!(trim(&s), s.trim());
        }
    }
    use super::*;

    #[test]
    fn instrument_normalization() {
        assert_eq!(normalize_instrument("NASDAQ:AAPL"), "AAPL");
        assert_eq!(normalize_instrument("BINANCE:BTCUSDT.P"), "BTCUSDT");
        assert_eq!(normalize_instrument("NQ1!"), "NQ1!");
        assert_eq!(normalize_instrument(" aapl "), "AAPL");
        assert_eq!(normalize_instrument("CME_MINI:NQ1!"), "NQ1!");
    }

    #[test]
    fn content_types() {
        assert_eq!(BodyKind::from_content_type(Some("application/json; charset=utf-8")), BodyKind::Json);
        assert_eq!(BodyKind::from_content_type(Some("Application/JSON")), BodyKind::Json);
        assert_eq!(BodyKind::from_content_type(Some("application/vnd.api+json")), BodyKind::Json);
        assert_eq!(BodyKind::from_content_type(Some("text/plain;charset=UTF-8")), BodyKind::Text);
        assert_eq!(BodyKind::from_content_type(Some("application/x-www-form-urlencoded")), BodyKind::Sniff);
        assert_eq!(BodyKind::from_content_type(None), BodyKind::Sniff);
    }

    /// The id of a body that does not parse is read as a parsed alert's would be, and only
    /// from one JSON object: anything doubtful leaves the key to the body's hash.
    #[test]
    fn message_ids_of_unparsed_bodies() {
        let id = |b: &str| message_id_of_unparsed(b.as_bytes());
        assert!(parse(br#"{"legs":[1],"metadata":{"message_id":" a-1 "}}"#, None).is_err());
        assert_eq!(id(r#"{"legs":[1],"metadata":{"message_id":" a-1 "}}"#).as_deref(), Some("a-1"));
        assert_eq!(id("\u{feff}\n {\"Message_ID\":\"b\"}").as_deref(), Some("b"));
        assert_eq!(id(r#"{"message_id":"c","metadata":{"message_id":"c"}}"#).as_deref(), Some("c"));
        assert_eq!(
            id(r#"{"legs":[1],"message_id":123456789012345678901234}"#).as_deref(),
            Some("123456789012345678901234")
        );
        for none in [
            r#"{"message_id":"c","metadata":{"message_id":"d"}}"#,
            r#"{"metadata":{"message_id":"c","messageId":"d"}}"#,
            r#"{"metadata":{"message_id":1.5}}"#,
            r#"{"message_id":1e3}"#,
            r#"{"metadata":{"message_id":"e"}} trailing"#,
            r#"{"metadata":{"message_id":"f"}"#,
            r#"{"metadata":"g"}"#,
            r#"{"metadata":{"message_id":""}}"#,
            r#"[{"metadata":{"message_id":"h"}}]"#,
            "message_id=i",
            "",
        ] {
            assert_eq!(id(none), None, "{none}");
        }
    }

    #[test]
    fn non_ascii_content_types_do_not_panic() {
        // Found by the ffi fuzz target: a suffix slice landed inside a UTF-8 character.
        assert_eq!(BodyKind::from_content_type(Some("{\"tick\u{feff}:A\"")), BodyKind::Sniff);
        assert_eq!(BodyKind::from_content_type(Some("é+json")), BodyKind::Json);
        assert_eq!(BodyKind::from_content_type(Some("+json")), BodyKind::Sniff);
        assert_eq!(BodyKind::from_content_type(Some("ééé")), BodyKind::Sniff);
    }
}
