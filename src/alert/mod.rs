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
mod transition;

use crate::decimal::Decimal;
use std::fmt;

pub use placeholder::find_placeholder;
pub use transition::{transition, Position};

/// Most legs a single order can carry at any supported broker.
pub const MAX_LEGS: usize = 4;

/// What an alert asks for, once resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Enter a position.
    Open,
    /// Exit the whole position in a direction.
    Close,
    /// Change the price and/or size of a working order.
    Modify,
    /// Pull a working entry order.
    Cancel,
}

/// Sender vocabulary that only the strategy's `rules` can turn into an [`Action`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionWord {
    /// `buy`
    Buy,
    /// `sell`
    Sell,
    /// `entry`
    Entry,
    /// `exit`
    Exit,
}

/// The action as sent: canonical, or a word awaiting the strategy's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ActionKind {
    /// OPEN, CLOSE, MODIFY or CANCEL.
    Canonical(Action),
    /// buy, sell, entry or exit.
    Word(ActionWord),
}

/// Long or short.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Profits when the price rises.
    Long,
    /// Profits when the price falls.
    Short,
}

/// Market or limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OrderType {
    /// Fill at the market.
    Market,
    /// Fill at the limit price or better.
    Limit,
}

/// Time in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Duration {
    /// Good for the trading day (the default).
    #[default]
    Day,
    /// Good till cancelled.
    Gtc,
    /// Fill or kill.
    Fok,
}

/// Call or put.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OptionSide {
    /// A call option.
    Call,
    /// A put option.
    Put,
}

/// An option leg's opening or closing side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LegAction {
    /// buy_to_open
    BuyToOpen,
    /// sell_to_open
    SellToOpen,
    /// buy_to_close
    BuyToClose,
    /// sell_to_close
    SellToClose,
}

/// A calendar date (proleptic Gregorian), as in option expirations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    /// Four-digit year.
    pub year: u16,
    /// 1..=12
    pub month: u8,
    /// 1..=31
    pub day: u8,
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
}

/// The canonical alert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    /// What to do.
    pub action: ActionKind,
    /// Underlying instrument, exchange prefix and `.P` suffix removed.
    pub instrument: String,
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
    /// Option legs (JSON only).
    pub legs: Vec<Leg>,
    /// Caller-chosen dedup key.
    pub message_id: Option<String>,
}

impl Alert {
    /// A bare alert: an action on an instrument, nothing else.
    pub fn new(action: ActionKind, instrument: impl Into<String>) -> Self {
        Alert {
            action,
            instrument: instrument.into(),
            direction: None,
            price: None,
            order_type: None,
            duration: None,
            quantity: None,
            notional: None,
            legs: Vec::new(),
            message_id: None,
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
    #[error("unresolved placeholder {placeholder} in `{field}`: the sender did not fill it in, so no trade is made")]
    Placeholder {
        /// The field it was found in.
        field: String,
        /// The placeholder text, e.g. `{{ticker}}`.
        placeholder: String,
    },
    /// A field has a value it cannot take.
    #[error("`{field}` cannot be {value:?}: {expected}")]
    InvalidField {
        /// Field name as the sender wrote it.
        field: String,
        /// The offending value (shortened).
        value: String,
        /// What would have been accepted.
        expected: &'static str,
    },
    /// Two fields disagree (for example `ticker` and `symbol`).
    #[error("`{first}` and `{second}` disagree ({first_value:?} vs {second_value:?})")]
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
pub type Alerts = Vec<Alert>;

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

fn as_text(body: &[u8]) -> Result<&str, ParseError> {
    std::str::from_utf8(body).map_err(|_| ParseError::NotText)
}

/// Removes an exchange prefix (`NASDAQ:AAPL`) and the perpetual suffix `.P`, trims, and
/// upper-cases. Continuous futures names such as `NQ1!` are kept as sent.
pub fn normalize_instrument(raw: &str) -> String {
    let s = raw.trim();
    let s = match s.rfind(':') {
        Some(i) if i + 1 < s.len() => &s[i + 1..],
        _ => s,
    };
    let s = s.trim();
    let s = if s.len() > 2 && (s.ends_with(".P") || s.ends_with(".p")) { &s[..s.len() - 2] } else { s };
    s.to_ascii_uppercase()
}

/// Shortens a sender's value for an error message, so a 256 KiB field never lands in a log.
pub(crate) fn snippet(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}

impl Action {
    /// Reads OPEN, CLOSE, MODIFY, CANCEL in any case.
    pub fn from_word(s: &str) -> Option<Action> {
        const WORDS: [(&str, Action); 4] =
            [("open", Action::Open), ("close", Action::Close), ("modify", Action::Modify), ("cancel", Action::Cancel)];
        WORDS.iter().find(|(w, _)| s.eq_ignore_ascii_case(w)).map(|(_, a)| *a)
    }

    /// The canonical upper-case word.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Open => "OPEN",
            Action::Close => "CLOSE",
            Action::Modify => "MODIFY",
            Action::Cancel => "CANCEL",
        }
    }
}

impl ActionWord {
    /// Reads buy, sell, entry, exit in any case.
    pub fn from_word(s: &str) -> Option<ActionWord> {
        const WORDS: [(&str, ActionWord); 4] = [
            ("buy", ActionWord::Buy),
            ("sell", ActionWord::Sell),
            ("entry", ActionWord::Entry),
            ("exit", ActionWord::Exit),
        ];
        WORDS.iter().find(|(w, _)| s.eq_ignore_ascii_case(w)).map(|(_, a)| *a)
    }

    /// The lower-case word, as the strategy's `rules` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionWord::Buy => "buy",
            ActionWord::Sell => "sell",
            ActionWord::Entry => "entry",
            ActionWord::Exit => "exit",
        }
    }
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

impl Direction {
    /// Reads LONG or SHORT in any case.
    pub fn from_word(s: &str) -> Option<Direction> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("long") {
            Some(Direction::Long)
        } else if s.eq_ignore_ascii_case("short") {
            Some(Direction::Short)
        } else {
            None
        }
    }

    /// `LONG` or `SHORT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Long => "LONG",
            Direction::Short => "SHORT",
        }
    }

    /// The other direction.
    pub fn opposite(self) -> Direction {
        match self {
            Direction::Long => Direction::Short,
            Direction::Short => Direction::Long,
        }
    }
}

impl OrderType {
    /// Reads market or limit in any case.
    pub fn from_word(s: &str) -> Option<OrderType> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("market") {
            Some(OrderType::Market)
        } else if s.eq_ignore_ascii_case("limit") {
            Some(OrderType::Limit)
        } else {
            None
        }
    }

    /// `market` or `limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            OrderType::Market => "market",
            OrderType::Limit => "limit",
        }
    }
}

impl Duration {
    /// Reads day, gtc, fok in any case.
    pub fn from_word(s: &str) -> Option<Duration> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("day") {
            Some(Duration::Day)
        } else if s.eq_ignore_ascii_case("gtc") {
            Some(Duration::Gtc)
        } else if s.eq_ignore_ascii_case("fok") {
            Some(Duration::Fok)
        } else {
            None
        }
    }

    /// `day`, `gtc` or `fok`.
    pub fn as_str(self) -> &'static str {
        match self {
            Duration::Day => "day",
            Duration::Gtc => "gtc",
            Duration::Fok => "fok",
        }
    }
}

impl OptionSide {
    /// Reads CALL/PUT (also C/P) in any case.
    pub fn from_word(s: &str) -> Option<OptionSide> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("call") || s.eq_ignore_ascii_case("c") {
            Some(OptionSide::Call)
        } else if s.eq_ignore_ascii_case("put") || s.eq_ignore_ascii_case("p") {
            Some(OptionSide::Put)
        } else {
            None
        }
    }

    /// `CALL` or `PUT`.
    pub fn as_str(self) -> &'static str {
        match self {
            OptionSide::Call => "CALL",
            OptionSide::Put => "PUT",
        }
    }
}

impl LegAction {
    /// Reads buy_to_open, sell_to_open, buy_to_close, sell_to_close in any case.
    pub fn from_word(s: &str) -> Option<LegAction> {
        const WORDS: [(&str, LegAction); 4] = [
            ("buy_to_open", LegAction::BuyToOpen),
            ("sell_to_open", LegAction::SellToOpen),
            ("buy_to_close", LegAction::BuyToClose),
            ("sell_to_close", LegAction::SellToClose),
        ];
        let s = s.trim();
        WORDS.iter().find(|(w, _)| s.eq_ignore_ascii_case(w)).map(|(_, a)| *a)
    }

    /// The snake_case word.
    pub fn as_str(self) -> &'static str {
        match self {
            LegAction::BuyToOpen => "buy_to_open",
            LegAction::SellToOpen => "sell_to_open",
            LegAction::BuyToClose => "buy_to_close",
            LegAction::SellToClose => "sell_to_close",
        }
    }

    /// True for the buying actions.
    pub fn is_buy(self) -> bool {
        matches!(self, LegAction::BuyToOpen | LegAction::BuyToClose)
    }

    /// True for the opening actions.
    pub fn is_open(self) -> bool {
        matches!(self, LegAction::BuyToOpen | LegAction::SellToOpen)
    }

    /// The action that unwinds this one (buy_to_open → sell_to_close).
    pub fn closing(self) -> LegAction {
        match self {
            LegAction::BuyToOpen => LegAction::SellToClose,
            LegAction::SellToOpen => LegAction::BuyToClose,
            LegAction::BuyToClose => LegAction::SellToOpen,
            LegAction::SellToClose => LegAction::BuyToOpen,
        }
    }
}

impl Date {
    /// Builds a date, checking the day exists.
    pub fn new(year: u16, month: u8, day: u8) -> Option<Date> {
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        Some(Date { year, month, day })
    }

    /// Reads `YYYY-MM-DD`.
    pub fn parse_iso(s: &str) -> Option<Date> {
        let b = s.trim().as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<u32> {
            b[r].iter().try_fold(0u32, |acc, c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
        };
        Date::new(num(0..4)? as u16, num(5..7)? as u8, num(8..10)? as u8)
    }

    /// Days since 1970-01-01 (negative before).
    pub fn days_since_epoch(self) -> i64 {
        // Howard Hinnant's days_from_civil.
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// The date `days` days after 1970-01-01.
    pub fn from_days_since_epoch(days: i64) -> Date {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
        let y = if m <= 2 { y + 1 } else { y };
        Date { year: y.clamp(0, 9999) as u16, month: m, day: d }
    }

    /// Day of week, 0 = Monday … 6 = Sunday.
    pub fn weekday(self) -> u8 {
        // 1970-01-01 was a Thursday (3).
        ((self.days_since_epoch() + 3).rem_euclid(7)) as u8
    }
}

fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn non_ascii_content_types_do_not_panic() {
        // Found by the ffi fuzz target: a suffix slice landed inside a UTF-8 character.
        assert_eq!(BodyKind::from_content_type(Some("{\"tick\u{feff}:A\"")), BodyKind::Sniff);
        assert_eq!(BodyKind::from_content_type(Some("é+json")), BodyKind::Json);
        assert_eq!(BodyKind::from_content_type(Some("+json")), BodyKind::Sniff);
        assert_eq!(BodyKind::from_content_type(Some("ééé")), BodyKind::Sniff);
    }

    #[test]
    fn dates_round_trip_and_weekdays() {
        let d = Date::parse_iso("2024-01-19").unwrap();
        assert_eq!(d.weekday(), 4, "2024-01-19 was a Friday");
        assert_eq!(Date::from_days_since_epoch(d.days_since_epoch()), d);
        assert_eq!(Date::from_days_since_epoch(0).to_string(), "1970-01-01");
        assert!(Date::parse_iso("2023-02-29").is_none());
        assert!(Date::parse_iso("2024-02-29").is_some());
        assert!(Date::parse_iso("2024-1-19").is_none());
        for n in -1000..40_000 {
            let d = Date::from_days_since_epoch(n);
            assert_eq!(d.days_since_epoch(), n);
        }
    }

    #[test]
    fn closing_actions() {
        assert_eq!(LegAction::BuyToOpen.closing(), LegAction::SellToClose);
        assert_eq!(LegAction::SellToOpen.closing(), LegAction::BuyToClose);
    }
}
