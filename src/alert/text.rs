//! Plain-text alerts, read with the pest grammar in `grammar/alert.pest`.
//!
//! Three shapes are understood:
//!
//! * TradingView's default strategy message, `<title>: order buy @ 1 filled on AAPL. New
//!   strategy position is 1`. It reports a fill, so the position before and after it is
//!   worked out and handed over as `prevMarketPosition` / `marketPosition` with their sizes:
//!   a reversal yields CLOSE then OPEN, a scale-in an OPEN, and a fill that leaves a smaller
//!   position on the same side is a partial close, refused ([`ParseError::Unsupported`]).
//!   `@ 1` is the filled quantity, never a price.
//! * KEY=VALUE pairs (`ticker=AAPL;action=buy`, `ticker: AAPL` per line), including a
//!   JSON-looking object sent as text, read without JSON decoding. A text is read as pairs
//!   when it starts with `key=`, `key: ` or a quote, every item is a pair, and at least one
//!   key names an alert field; otherwise it is read as free words.
//! * Free words: an instrument, a direction word and an action word in any order, with an
//!   optional price (`@ 190.25`, `at 190.25`, `price=190.25`), order type, duration and
//!   message id (`id=abc`, `message_id: abc`). `id` is a shorthand of free words only:
//!   JSON and KEY=VALUE bodies often carry unrelated ids (TradingView's order id is the
//!   order's name), which must not become the dedup key.
//!
//! The parser only splits text into pairs and words; what a key or a word means is decided
//! by [`Fields`], the same assembly JSON bodies go through, so the same pairs give the same
//! alert however they were sent. Free words are refused ([`ParseError::NotAnAlert`]) rather
//! than guessed at when they name no action, when more than one word could be the
//! instrument, and when a number is not marked as a price. A ticker that is also a keyword
//! (`OPEN`, `DAY`, `LONG`) is read as the keyword; send it with its exchange prefix
//! (`NASDAQ:OPEN`) or as `ticker=OPEN`.

use super::fields::{self, is_guarded_key, is_strategy_info, Fields, Name, Value};
use super::{Alerts, Leg, ParseError, Position, MAX_LEGS};
use crate::decimal::{self, Decimal};
use compact_str::CompactString;
use pest::iterators::{Pair, Pairs};
use pest::Parser;
use std::borrow::Cow;
use std::num::NonZeroUsize;
use std::sync::Once;

mod pineconnector;
mod prescan;

pub use prescan::MAX_WORDS;

mod grammar {
    // The generated `Rule` enum stays private to this module, so it needs no docs of its own.
    #![allow(missing_docs)]

    #[derive(pest_derive::Parser)]
    #[grammar = "../grammar/alert.pest"]
    pub(super) struct AlertParser;
}

use grammar::{AlertParser, Rule};

/// pest's cumulative call budget for one parse: a backstop. The pre-scan (`prescan`, limit
/// [`MAX_WORDS`]) already keeps what reaches pest to what it reads in about a millisecond, far
/// below this; before the pre-scan, 256 KiB of `k: k: k: …` needed about 4.3 million calls.
/// pest keeps the limit process-wide; no other grammar in the crate needs more.
pub const CALL_LIMIT: usize = 10_000_000;

static LIMIT: Once = Once::new();

/// Parses a plain-text alert: TradingView's fill message, KEY=VALUE pairs (or a JSON-looking
/// object), or free words; see the module documentation for each shape.
///
/// # Errors
///
/// [`ParseError::Empty`] for blank text; [`ParseError::NotAnAlert`] for text that is not a
/// trading instruction (a price alert's message, prose, two possible instruments, a number
/// not marked as a price, a fill message that does not follow TradingView's form); and the
/// field assembly's errors, such as [`ParseError::Placeholder`] for `{{ticker}}` left
/// unresolved, or [`ParseError::LegsNeedJson`] for a `legs` key outside a JSON-looking object
/// (inside one, legs are read as in a JSON body). A text longer than [`MAX_WORDS`] words
/// (punctuation, long words and long runs of spacing weigh more) is refused as
/// [`ParseError::NotAnAlert`] after one pass over its bytes, so that no text costs more than
/// about a millisecond.
pub fn parse(text: &str) -> Result<Alerts, ParseError> {
    parse_with(text, true)
}

/// [`parse`], with or without the hand paths in front of pest (the tests compare the two).
fn parse_with(text: &str, hand: bool) -> Result<Alerts, ParseError> {
    LIMIT.call_once(|| pest::set_call_limit(NonZeroUsize::new(CALL_LIMIT)));
    // Leading and trailing blanks never change the meaning; trimming them here spares each
    // grammar a failed attempt at the end of the text.
    let text = text.strip_prefix('\u{FEFF}').unwrap_or(text).trim_matches(|c: char| c.is_ascii_whitespace());
    if skip_blank(text).is_empty() {
        return Err(ParseError::Empty);
    }
    // One pass over the bytes bounds pest's work: see `prescan`. No byte weighs more than
    // `MAX_WEIGHT_PER_BYTE`, so a short text (every real alert) needs no pass at all.
    if text.len() * prescan::MAX_WEIGHT_PER_BYTE > prescan::BUDGET
        && prescan::weigh(text, prescan::BUDGET) > prescan::BUDGET
    {
        return Err(too_long());
    }
    if let Some(parsed) = pineconnector::parse(text) {
        return parsed;
    }
    match route(text) {
        Route::Fill(tail) => {
            // Two fill messages in one body (a relay joining them): the first was taken for the second's title and
            // its fill never traded, answered processed all the same.
            let title = &text[..text.len() - tail.len()];
            // A whole fill in the title, not a strategy name that holds the words (`Order Flow, filled gaps`).
            let fill_in_title = contains_ci(title, "filled on")
                && (contains_ci(title, "order buy") || contains_ci(title, "order sell"));
            if fill_in_title {
                return Err(ParseError::Unsupported(
                    "the body holds more than one fill message (`order … filled on …`); send one alert per fill".into(),
                ));
            }
            let mut alerts = fill(tail, hand)?;
            title_times(title).stamp(&mut alerts);
            Ok(alerts)
        }
        Route::Json => match plain_object(text).filter(|_| hand) {
            Some(read) => read,
            None => json_like(text),
        },
        Route::Pairs => {
            if let Some(read) = plain_pairs(text).filter(|_| hand) {
                return read;
            }
            match pairs(text)? {
                Some(fields) => fields.build(),
                None => words_by(text, hand),
            }
        }
        Route::Words => words_by(text, hand),
    }
}

// ── Routing ─────────────────────────────────────────────────────────────────

/// Which top rule a text goes to. Deciding this with a scan of a few bytes keeps each
/// parse to one grammar pass: trying the shapes in turn would cost a failed pest parse
/// (and its error report) per shape.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    /// TradingView's fill message; the slice starts after the title.
    Fill(&'a str),
    /// Starts with `{` (but not `{{`, a placeholder).
    Json,
    /// Starts with `key=`, `key: ` or a quote.
    Pairs,
    /// Anything else.
    Words,
}

fn route(text: &str) -> Route<'_> {
    if let Some(tail) = fill_tail(text) {
        return Route::Fill(tail);
    }
    let t = skip_blank(text);
    if t.starts_with('{') && !t.starts_with("{{") {
        Route::Json
    } else if looks_like_pair(t) {
        Route::Pairs
    } else {
        Route::Words
    }
}

const SPACES: [char; 3] = [' ', '\t', '\u{A0}'];
const QUOTES: [char; 7] = ['"', '\'', '“', '”', '„', '‘', '’'];

/// Skips what the grammar's `blank` rule skips: spaces, separators and `\n`.
fn skip_blank(mut s: &str) -> &str {
    loop {
        let t = s.trim_start_matches([' ', '\t', '\u{A0}', ';', ',', '\n', '\r']);
        match t.strip_prefix("\\n") {
            Some(rest) => s = rest,
            None => return t,
        }
    }
}

/// The fill message after its title: the last `: order buy|sell` that goes on to say
/// `filled`. The title is free text (it may hold colons, commas, parentheses, even the
/// word order), which is why it is cut here rather than matched by the grammar.
fn fill_tail(text: &str) -> Option<&str> {
    let starts_fill = |s: &str| {
        let Some(after) = strip_prefix_ci(s, "order") else { return false };
        let side = after.trim_start_matches(SPACES);
        let spaced = side.len() < after.len();
        spaced
            && (strip_prefix_ci(side, "buy").is_some()
                || strip_prefix_ci(side, "sell").is_some()
                || side.starts_with("{{"))
    };
    let tail = text
        .rmatch_indices(':')
        .map(|(i, _)| text[i + 1..].trim_start_matches(SPACES))
        .find(|rest| starts_fill(rest))
        .or_else(|| Some(skip_blank(text)).filter(|t| starts_fill(t)))?;
    contains_ci(tail, "filled").then_some(tail)
}

/// A body of pairs starts with a quote, `key=`, or `key:` followed by a space. `word:value`
/// with no space is a pair only when `word` names a field (`ticker:AAPL`); otherwise it is an
/// exchange prefix (`NASDAQ:AAPL buy long`).
fn looks_like_pair(t: &str) -> bool {
    if t.starts_with(QUOTES) {
        return true;
    }
    let b = t.as_bytes();
    if !b.first().is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_') {
        return false;
    }
    let n = b.iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.')).count();
    let rest = t[n..].trim_start_matches(SPACES);
    match rest.as_bytes().first() {
        Some(b'=') => true,
        Some(b':') => {
            let after = &rest[1..];
            after.is_empty()
                || after.starts_with(char::is_whitespace)
                || after.starts_with(QUOTES)
                || is_field_key(&t[..n])
        }
        _ => false,
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

fn contains_ci(haystack: &str, needle: &str) -> bool {
    haystack.as_bytes().windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

// ── The one walk over pest's pairs ──────────────────────────────────────────

/// A piece of a text alert, typed. Only [`from_pairs`] builds these from pest's pairs; the
/// rest of the module works on pieces.
#[derive(Debug, Clone, PartialEq)]
enum Piece<'a> {
    /// `key=value`, `key: value` on its own line, or a JSON-looking member.
    Pair(Cow<'a, str>, Value<'a>),
    /// `word:` among free words; the next piece is its value when `word` names a field.
    Label(&'a str),
    /// One free word.
    Word(Word<'a>),
    /// TradingView's fill message.
    Fill(Fill<'a>),
    /// The `legs` of a JSON-looking object, already read as legs.
    Legs(Vec<Leg>),
    /// 3Commas' `order` object in a JSON-looking object: its members ([`Fields::set_order_object`]).
    Order(Vec<(Cow<'a, str>, Value<'a>)>),
}

/// A free word and what it looks like. Each holds its text as written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Word<'a> {
    /// OPEN, CLOSE, MODIFY, CANCEL, buy, sell, entry, exit.
    Action(&'a str),
    /// long or short (bullish and bearish already translated).
    Direction(&'a str),
    /// market or limit.
    OrderType(&'a str),
    /// day, gtc or fok.
    Duration(&'a str),
    /// The number after `@` or `at`.
    Price(&'a str),
    /// Anything that could be an instrument.
    Symbol(&'a str),
    /// A number not marked as a price.
    Number(&'a str),
    /// A token holding a brace: an unresolved placeholder.
    Braced(&'a str),
    /// Anything else; skipped.
    Other(&'a str),
}

impl<'a> Word<'a> {
    fn text(self) -> &'a str {
        match self {
            Word::Action(t)
            | Word::Direction(t)
            | Word::OrderType(t)
            | Word::Duration(t)
            | Word::Price(t)
            | Word::Symbol(t)
            | Word::Number(t)
            | Word::Braced(t)
            | Word::Other(t) => t,
        }
    }
}

/// One slot of the fill message: a value, or a placeholder left unresolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot<'a> {
    Value(&'a str),
    Placeholder(&'a str),
}

impl<'a> Slot<'a> {
    fn of(s: &'a str) -> Self {
        if s.starts_with('{') {
            Slot::Placeholder(s)
        } else {
            Slot::Value(s)
        }
    }

    fn text(self) -> &'a str {
        match self {
            Slot::Value(s) | Slot::Placeholder(s) => s,
        }
    }
}

/// TradingView's fill message, slot by slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fill<'a> {
    side: Slot<'a>,
    quantity: Slot<'a>,
    instrument: Slot<'a>,
    position: Slot<'a>,
}

/// Turns pest's pairs into [`Piece`]s, handing each to `emit` as it is found, so a long
/// text never builds a list. This walk (with the helpers below it) is the only code that
/// sees a `Pair`.
fn from_pairs<'a>(
    pairs: Pairs<'a, Rule>,
    emit: &mut impl FnMut(Piece<'a>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    for pair in pairs {
        match pair.as_rule() {
            Rule::fill_body | Rule::json_body | Rule::pairs_body | Rule::words_body => {
                from_pairs(pair.into_inner(), emit)?
            }
            Rule::object => {
                for member in pair.into_inner() {
                    let (key, value) = key_value(member);
                    let Some(value) = value else { continue };
                    if key.eq_ignore_ascii_case("metadata") {
                        metadata(value, emit)?;
                    } else if is_strategy_info(&key) {
                        strategy_info(value, emit)?;
                    } else if is_legs(&key) {
                        emit(Piece::Legs(legs(value)?))?;
                    } else if fields::is_order_object(&key) && value.as_rule() == Rule::object {
                        let mut pairs = Vec::new();
                        members(value, "order", "an object", |k, v| {
                            let v = member_value(&k, v);
                            pairs.push((k, v));
                            Ok(())
                        })?;
                        emit(Piece::Order(pairs))?;
                    } else {
                        let value = member_value(&key, Some(value));
                        emit(Piece::Pair(key, value))?;
                    }
                }
            }
            Rule::pair | Rule::eq_pair => {
                let (key, value) = key_value(pair);
                emit(Piece::Pair(key, value.map_or(text(""), value_of)))?;
            }
            Rule::label => emit(Piece::Label(pair.as_str()))?,
            Rule::direction => emit(Piece::Word(Word::Direction(direction_word(pair.as_str()))))?,
            Rule::action => emit(Piece::Word(Word::Action(pair.as_str())))?,
            Rule::order_type => emit(Piece::Word(Word::OrderType(pair.as_str())))?,
            Rule::duration => emit(Piece::Word(Word::Duration(pair.as_str())))?,
            Rule::price => {
                let number = pair.into_inner().next().map_or("", |n| n.as_str());
                emit(Piece::Word(Word::Price(number)))?
            }
            Rule::symbol => emit(Piece::Word(Word::Symbol(pair.as_str())))?,
            Rule::number => emit(Piece::Word(Word::Number(pair.as_str())))?,
            Rule::braced => emit(Piece::Word(Word::Braced(pair.as_str())))?,
            Rule::other => emit(Piece::Word(Word::Other(pair.as_str())))?,
            Rule::fill => {
                let mut slots = [Slot::Value(""); 4];
                for (slot, inner) in slots.iter_mut().zip(pair.into_inner()) {
                    *slot = Slot::of(inner.as_str());
                }
                let [side, quantity, instrument, position] = slots;
                emit(Piece::Fill(Fill { side, quantity, instrument, position }))?
            }
            _ => {}
        }
    }
    Ok(())
}

/// `metadata` in a JSON-looking object. As for JSON, only the dedup key is read from inside,
/// and `metadata.` keeps its name apart from a top-level `message_id` in error messages.
fn metadata<'a>(
    value: Pair<'a, Rule>,
    emit: &mut impl FnMut(Piece<'a>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    members(value, "metadata", "an object holding message_id", |k, v| {
        if Name::from_key(&k) == Some(Name::MessageId) {
            emit(Piece::Pair(Cow::Owned(format!("metadata.{k}")), member_value(&k, v)))?;
        }
        Ok(())
    })
}

/// 3Commas' `strategy_info` in a JSON-looking object: its members read as the same keys at
/// the top level would, as a JSON body's are, `legs` included. Left unread, a partial exit's sizes were lost
/// and the exit closed the whole position, and a reversal's new side was dropped.
fn strategy_info<'a>(
    value: Pair<'a, Rule>,
    emit: &mut impl FnMut(Piece<'a>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    let expected = "an object holding market_position and prev_market_position";
    members(value, "strategy_info", expected, |k, v| match v {
        Some(v) if is_legs(&k) => emit(Piece::Legs(legs(v)?)),
        v => {
            let v = member_value(&k, v);
            emit(Piece::Pair(k, v))
        }
    })
}

/// The members of a nested object field (`null` has none), each handed to `each`; anything else is the
/// field's error.
fn members<'a>(
    value: Pair<'a, Rule>,
    field: &str,
    expected: &'static str,
    mut each: impl FnMut(Cow<'a, str>, Option<Pair<'a, Rule>>) -> Result<(), ParseError>,
) -> Result<(), ParseError> {
    match value.as_rule() {
        Rule::object => {
            for inner in value.into_inner() {
                let (k, v) = key_value(inner);
                each(k, v)?;
            }
            Ok(())
        }
        Rule::scalar if value.as_str() == "null" => Ok(()),
        _ => Err(ParseError::InvalidField { field: field.into(), value: super::snippet(value.as_str()), expected }),
    }
}

/// `legs` in a JSON-looking object: an array of leg objects, each read by the same
/// [`fields::leg`] as a JSON body's, so the text and the JSON give the same legs.
fn legs(value: Pair<'_, Rule>) -> Result<Vec<Leg>, ParseError> {
    match value.as_rule() {
        Rule::array => {}
        Rule::scalar if value.as_str() == "null" => return Ok(Vec::new()),
        _ => {
            return Err(ParseError::InvalidField {
                field: "legs".into(),
                value: super::snippet(value.as_str()),
                expected: "an array of leg objects",
            })
        }
    }
    let items: Vec<Pair<'_, Rule>> = value.into_inner().collect();
    if items.len() > MAX_LEGS {
        return Err(ParseError::TooManyLegs(items.len()));
    }
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            if item.as_rule() != Rule::object {
                return Err(ParseError::InvalidField {
                    field: format!("legs[{i}]"),
                    value: super::snippet(item.as_str()),
                    expected: "a leg object",
                });
            }
            fields::leg(i, item.into_inner().map(key_value).map(|(k, v)| (k, v.map_or(Value::Null, value_of))))
        })
        .collect()
}

/// A pair's key (unquoted) and its value's pair, if any.
fn key_value(pair: Pair<'_, Rule>) -> (Cow<'_, str>, Option<Pair<'_, Rule>>) {
    let mut inner = pair.into_inner();
    let key = inner.next().map_or(Cow::Borrowed(""), |k| match k.as_rule() {
        Rule::quoted => unquote(k),
        _ => Cow::Borrowed(k.as_str()),
    });
    (key, inner.next())
}

/// A member's value in a JSON-looking object, as the JSON reader reads it: a bare number under the message id's key
/// stays a number, so that both readers take a whole one's digits and refuse a fraction or an exponent.
fn member_value<'a>(key: &str, value: Option<Pair<'a, Rule>>) -> Value<'a> {
    match value {
        Some(v) if v.as_rule() == Rule::scalar && is_id_number(key, v.as_str()) => Value::Number(v.as_str()),
        Some(v) => value_of(v),
        None => Value::Null,
    }
}

/// Whether a bare value is a number under the message id's key. A number as the grammar's `number` rule spells one
/// (`190.25`, `-1.5`, `+3`, `.5`, `1e-3`), of any length; `2024-01-15` is none.
fn is_id_number(key: &str, s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i > start
    };
    let whole = digits(&mut i);
    if b.get(i) == Some(&b'.') {
        i += 1;
        if !digits(&mut i) {
            return false;
        }
    } else if !whole {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !digits(&mut i) {
            return false;
        }
    }
    i == b.len() && Name::from_key(key) == Some(Name::MessageId)
}

fn value_of(pair: Pair<'_, Rule>) -> Value<'_> {
    match pair.as_rule() {
        Rule::quoted => Value::Text(unquote(pair)),
        // As in JSON: `null` is no value, and structure is not text.
        Rule::scalar => match pair.as_str() {
            "null" => Value::Null,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            s => text(s),
        },
        Rule::object => Value::Other("object"),
        Rule::array if pair.as_str().trim_start_matches('[').trim_start().starts_with(']') => {
            Value::Other(fields::EMPTY_LIST)
        }
        Rule::array => Value::Other("array"),
        // text_value, raw_value, word_value
        _ => text(pair.as_str()),
    }
}

/// The text between the quotes, with backslash escapes undone (allocating only then).
fn unquote(quoted: Pair<'_, Rule>) -> Cow<'_, str> {
    let inner = quoted.into_inner().next().map_or("", |p| p.as_str());
    if inner.contains('\\') {
        Cow::Owned(unescape(inner))
    } else {
        Cow::Borrowed(inner)
    }
}

/// JSON's string escapes (`\"`, `\\`, `\n`, `\u00e9`, surrogate pairs); any other escaped
/// character stands for itself, and a broken `\u` is kept as written.
fn unescape(s: &str) -> String {
    fn hex4(s: &str) -> Option<u32> {
        let h = s.get(..4)?;
        if !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(h, 16).ok()
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let Some(c) = rest.chars().next() else {
            out.push('\\');
            break;
        };
        rest = &rest[c.len_utf8()..];
        match c {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{C}'),
            'u' => {
                let Some(hi) = hex4(rest) else {
                    out.push_str("\\u");
                    continue;
                };
                rest = &rest[4..];
                let code = if (0xD800..0xDC00).contains(&hi) {
                    match rest.strip_prefix("\\u").and_then(hex4) {
                        Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                            rest = &rest[6..];
                            0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                        }
                        _ => 0xFFFD,
                    }
                } else {
                    hi
                };
                out.push(char::from_u32(code).unwrap_or('\u{FFFD}'));
            }
            other => out.push(other),
        }
    }
    out.push_str(rest);
    out
}

fn direction_word(word: &str) -> &str {
    if word.eq_ignore_ascii_case("bullish") {
        "long"
    } else if word.eq_ignore_ascii_case("bearish") {
        "short"
    } else {
        word
    }
}

// ── Shapes ──────────────────────────────────────────────────────────────────

/// Runs one top rule. (`words_body` accepts any text, so for it a failure can only be
/// pest's call or stack limit.)
fn run(rule: Rule, text: &str) -> Result<Pairs<'_, Rule>, pest::error::Error<Rule>> {
    AlertParser::parse(rule, text)
}

fn too_complex() -> ParseError {
    ParseError::NotAnAlert("the text is too long or too complex to read as an alert".into())
}

fn too_long() -> ParseError {
    ParseError::NotAnAlert(format!(
        "the text is longer than {MAX_WORDS} words (counting punctuation, long words and long runs of \
         spacing as more); an alert needs far fewer"
    ))
}

/// Whether a value under `key` reads as a number or an amount: past its marks it starts with a number in any script
/// or spelling (`150`, `50%`, `$5000`, `-2`, `50％`, `½`, `1/2`, `5e1`, `(50)`, `~50`, `50pct`, `0.5BTC`,
/// `10%equity`), unless it has a label's shape: an ordinal (`1st`), digits again after its letters (a UUID
/// `550e8400-e29b-…`, a hex `9b2f4c1e`), a chart interval under an interval's key (`interval=1D`), a date or a time
/// (`2024-01-15`, `10:30`). A value starting with a letter (`breakout2`) is a label.
fn holds_number(key: &str, value: &Value<'_>) -> bool {
    match value {
        Value::Number(_) => true,
        Value::Text(t) => {
            // Only ASCII digits with `$ + - % , .` counted: `size=50％` or `size=½` was skipped and the CLOSE sold the
            // whole position. Only listed units counted next, and `size=0.5BTC` was skipped. A label's shapes are
            // listed instead: a missed trade is told, a size skipped trades the whole position.
            let core = t.trim_matches(|c: char| !c.is_alphanumeric());
            // An amount after its currency's code (`USD500`) is one too.
            let code = CURRENCY_CODES
                .iter()
                .find_map(|c| core.get(..c.len()).filter(|h| h.eq_ignore_ascii_case(c)).map(|_| &core[c.len()..]));
            if code.is_some_and(|amount| after_number(amount).is_some_and(str::is_empty)) {
                return true;
            }
            let Some(rest) = after_number(core) else { return false };
            let ordinal = ["st", "nd", "rd", "th"].iter().any(|o| rest.eq_ignore_ascii_case(o));
            let digits_again = rest.chars().any(char::is_numeric);
            let key: String = key.trim().chars().filter(|c| !matches!(c, '_' | '-')).collect();
            let interval = INTERVAL_KEYS.iter().any(|k| key.eq_ignore_ascii_case(k))
                && INTERVAL_UNITS.iter().any(|u| rest.eq_ignore_ascii_case(u));
            !(time_or_date(core) || ordinal || digits_again || interval)
        }
        _ => false,
    }
}

/// Keys a chart's interval goes under (compared without `_` and `-`), whose `1D` or `4H` is no amount.
const INTERVAL_KEYS: [&str; 10] =
    ["interval", "tf", "timeframe", "resolution", "res", "chart", "period", "bar", "candle", "tframe"];
/// A chart interval's units (`15m`, `4H`, `1D`, `1W`, `1M` a month, `100T` ticks, `10R` a range), spelled out too.
const INTERVAL_UNITS: [&str; 27] = [
    "s", "m", "h", "d", "w", "t", "r", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "hr",
    "hrs", "hour", "hours", "day", "days", "wk", "week", "weeks", "mo", "month", "months",
];
/// Currency codes written before an amount (`USD500`).
const CURRENCY_CODES: [&str; 10] = ["usd", "usdt", "usdc", "eur", "gbp", "jpy", "chf", "cad", "aud", "btc"];

/// What follows the number `t` starts with (digits in any script, `.`, `,`, `/`, and an exponent that ends the word),
/// with the marks after it; `None` when `t` does not start with a number.
fn after_number(t: &str) -> Option<&str> {
    // Digits grouped with `'` or `_` (`1'000`, `1_000`) are one number.
    let rest = t.trim_start_matches(|c: char| c.is_numeric() || matches!(c, '.' | ',' | '/' | '\'' | '_'));
    if rest.len() == t.len() {
        return None;
    }
    // `5e1`, `1.5E-3`: an exponent only where digits end the word, so `550e8400-e29b` stays a label.
    let exponent = rest.strip_prefix(['e', 'E']).map(|e| e.trim_start_matches(['+', '-']));
    if exponent.is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())) {
        return Some("");
    }
    Some(rest.trim_matches(|c: char| !c.is_alphanumeric()))
}

fn is_legs(key: &str) -> bool {
    key.trim().eq_ignore_ascii_case("legs")
}

/// Keys that make `word:` a pair among free words: the fields, `id`, and `legs` (refused).
fn is_field_key(key: &str) -> bool {
    key.eq_ignore_ascii_case("id") || is_legs(key) || Name::from_key(key).is_some()
}

fn fill(tail: &str, hand: bool) -> Result<Alerts, ParseError> {
    match plain_fill(tail).filter(|_| hand) {
        // A plain fill's slots hold no brace, so no value is a placeholder.
        Some(f) => fill_fields(f, true),
        None => fill_fields(fill_by_grammar(tail)?, false),
    }
}

/// The usual fill message, `order sell @ 2 filled on NASDAQ:AAPL. New strategy position is
/// -1`, read without pest: the grammar's `fill_body` slot by slot, for a text with no blank
/// around it, no placeholder, a quantity of digits with an optional fraction and a position
/// that may also carry a sign (no exponents). `None` leaves the text to the grammar.
fn plain_fill(tail: &str) -> Option<Fill<'_>> {
    // A number of the subset: digits, then `.` and digits only when a digit follows the point
    // (as the grammar's optional fraction backs off).
    let number = |s: &str, signed: bool| -> usize {
        let b = s.as_bytes();
        let sign = usize::from(signed && matches!(b.first(), Some(b'-' | b'+')));
        let digits = |from: usize| b[from.min(b.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
        let int = digits(sign);
        if int == 0 {
            return 0;
        }
        let mut end = sign + int;
        if b.get(end) == Some(&b'.') && b.get(end + 1).is_some_and(u8::is_ascii_digit) {
            end += 1 + digits(end + 1);
        }
        end
    };
    let rest = strip_prefix_ci(tail, "order ")?;
    let side_len = if strip_prefix_ci(rest, "buy").is_some() { 3 } else { 4 };
    let side = rest.get(..side_len).filter(|s| s.eq_ignore_ascii_case("buy") || s.eq_ignore_ascii_case("sell"))?;
    let rest = rest[side_len..].strip_prefix(" @ ")?;
    let quantity = rest.get(..number(rest, false)).filter(|q| !q.is_empty())?;
    let rest = strip_prefix_ci(&rest[quantity.len()..], " filled on ")?;
    let instrument = rest.get(..symbol_len(rest.as_bytes())).filter(|i| !i.is_empty())?;
    let rest = strip_prefix_ci(&rest[instrument.len()..], ". New strategy position is ")?;
    let position = rest.get(..number(rest, true)).filter(|p| !p.is_empty())?;
    let rest = &rest[position.len()..];
    (rest.is_empty() || rest == ".").then_some(Fill {
        side: Slot::Value(side),
        quantity: Slot::Value(quantity),
        instrument: Slot::Value(instrument),
        position: Slot::Value(position),
    })
}

/// How long the grammar's `symbol` at the start of `b` is (0 when there is none): a first
/// character, then characters and joiners (`.`, `/`, `-` only before a letter or digit), then
/// optionally `:` and the same again.
fn symbol_len(b: &[u8]) -> usize {
    let first = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'^' | b'_');
    let more = |mut i: usize| loop {
        match b.get(i) {
            Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'_' | b'!' | b'&' | b'^') => i += 1,
            Some(b'.' | b'/' | b'-') if b.get(i + 1).is_some_and(u8::is_ascii_alphanumeric) => i += 1,
            _ => return i,
        }
    };
    if !b.first().is_some_and(first) {
        return 0;
    }
    let end = more(1);
    if b.get(end) == Some(&b':') && b.get(end + 1).is_some_and(first) {
        return more(end + 2);
    }
    end
}

/// The fill message's slots, as the grammar reads them.
fn fill_by_grammar(tail: &str) -> Result<Fill<'_>, ParseError> {
    let pairs = run(Rule::fill_body, tail).map_err(|e| match e.variant {
        pest::error::ErrorVariant::CustomError { .. } => too_complex(),
        _ => ParseError::NotAnAlert(
            "it looks like TradingView's order-fill message but does not follow it; expected \
             `<title>: order buy @ 1 filled on AAPL. New strategy position is 1`"
                .into(),
        ),
    })?;
    let mut found = None;
    from_pairs(pairs, &mut |piece| {
        if let Piece::Fill(f) = piece {
            found = Some(f);
        }
        Ok(())
    })?;
    found.ok_or_else(|| ParseError::NotAnAlert("the order-fill message is incomplete".into()))
}

/// What a fill message's slots say: the instrument, the side, and the positions before and
/// after the fill.
fn fill_fields(f: Fill<'_>, without_braces: bool) -> Result<Alerts, ParseError> {
    let mut fields = Fields::default();
    if without_braces {
        fields.without_braces();
    }
    fields.set_named(Name::Instrument, Cow::Borrowed("instrument"), text(f.instrument.text()))?;
    fields.set_named(Name::Action, Cow::Borrowed("action"), text(f.side.text()))?;
    let (side, quantity, position) = match (f.side, f.quantity, f.position) {
        (Slot::Value(s), Slot::Value(q), Slot::Value(p)) => (s, q, p),
        (_, q, p) => {
            // Fields names every placeholder back to the sender, each under its own slot's name. The quantity is
            // filed as a size of the position, a field every alert reads: as `quantity`, which a buy does not read,
            // the buy would have traded without its fill's positions.
            if let Slot::Placeholder(_) = q {
                fields.set_named(Name::MarketPositionSize, Cow::Borrowed("quantity"), text(q.text()))?;
            }
            if let Slot::Placeholder(_) = p {
                fields.set_named(Name::MarketPosition, Cow::Borrowed("position"), text(p.text()))?;
            }
            return fields.build();
        }
    };
    let bad = |field: &str, value: &str, expected: &'static str| ParseError::InvalidField {
        field: field.into(),
        value: super::snippet(value),
        expected,
    };
    let quantity = decimal::parse(quantity)
        .filter(|q| *q > Decimal::ZERO)
        .ok_or_else(|| bad("quantity", quantity, "a filled quantity above zero, such as 1"))?;
    let next = decimal::parse(position).ok_or_else(|| bad("position", position, "a signed position such as -1"))?;
    // The fill moved the position by +quantity (buy) or -quantity (sell).
    let prev = if side.eq_ignore_ascii_case("buy") { next.checked_sub(quantity) } else { next.checked_add(quantity) }
        .ok_or_else(|| bad("position", position, "a position the filled quantity can be taken from"))?;
    fields.set_named(Name::PrevMarketPosition, Cow::Borrowed("prevMarketPosition"), text(position_word(&prev)))?;
    fields.set_named(Name::MarketPosition, Cow::Borrowed("marketPosition"), text(position_word(&next)))?;
    // The sizes tell a scale-in (an OPEN) from a partial close (refused) when the side stays.
    for (name, key, size) in [
        (Name::PrevMarketPositionSize, "prevMarketPositionSize", prev),
        (Name::MarketPositionSize, "marketPositionSize", next),
    ] {
        fields.set_named(name, Cow::Borrowed(key), Value::Text(Cow::Owned(size.abs().to_string())))?;
    }
    fields.build()
}

fn text(s: &str) -> Value<'_> {
    Value::Text(Cow::Borrowed(s))
}

fn position_word(size: &Decimal) -> &'static str {
    match Position::from_signed(size) {
        Position::Flat => "flat",
        Position::Long => "long",
        Position::Short => "short",
    }
}

fn json_like(text: &str) -> Result<Alerts, ParseError> {
    let pairs = run(Rule::json_body, text).map_err(|e| match e.variant {
        pest::error::ErrorVariant::CustomError { .. } => too_complex(),
        _ => {
            let (line, column) = match e.line_col {
                pest::error::LineColLocation::Pos(p) | pest::error::LineColLocation::Span(p, _) => p,
            };
            ParseError::NotAnAlert(format!(
                "the text looks like a JSON object but could not be read (line {line}, column {column}); \
                 check its quotes, commas and braces"
            ))
        }
    })?;
    let mut fields = Fields::default();
    read_pairs(pairs, &mut fields)?;
    fields.build()
}

/// The usual JSON-looking text, `{"ticker": "AAPL", "price": 190.25, "metadata": {"message_id":
/// "m1"}}`, without pest: `Some` with what [`json_like`] makes of it, `None` to leave it to
/// the grammar.
///
/// Only a text wholly of this shape is read here: one object, members split by one `,`,
/// spaces around the tokens, each member a quoted key, `:`, and a quoted value or a bare
/// one of letters, digits and `. _ + -`; `metadata` may hold one such object (no deeper).
/// Quoted keys and values are printable ASCII without quotes or backslashes. The grammar
/// reads such a text as exactly these members (its implicit spacing is the same spaces);
/// `legs` and any other nesting are left to it. The whole text is checked before the first
/// pair is handed over.
fn plain_object(text: &str) -> Option<Result<Alerts, ParseError>> {
    let mut members = Vec::new();
    let mut s = PlainObject { b: text.as_bytes(), text, i: 0 };
    s.object(&mut |key, value| {
        members.push((key, value));
        Some(())
    })?;
    if s.i != text.len() {
        return None;
    }
    let mut fields = Fields::default();
    // Quoted text here holds no brace (see `quoted`), bare values neither.
    fields.without_braces();
    for (key, value) in members {
        let result = match value {
            // `strategy_info`'s members are fields of the alert: the grammar's walk reads them.
            _ if is_legs(key) && !key.eq_ignore_ascii_case("metadata") => return None,
            _ if is_strategy_info(key) => return None,
            // 3Commas' `order` object: the grammar's walk reads its members too.
            PlainValue::Object(_) if fields::is_order_object(key) => return None,
            // As for the grammar: structure is no text.
            PlainValue::Object(_) if !key.eq_ignore_ascii_case("metadata") => {
                fields.set(Cow::Borrowed(key), Value::Other("object")).map(drop)
            }
            PlainValue::Object(inner) => {
                let mut r = PlainObject { b: inner.as_bytes(), text: inner, i: 0 };
                let mut out = Ok(());
                r.object(&mut |k, v| {
                    if Name::from_key(k) == Some(Name::MessageId) && out.is_ok() {
                        out = fields.set(Cow::Owned(format!("metadata.{k}")), v.value(k)?).map(drop);
                    }
                    Some(())
                })?;
                out
            }
            // `metadata` that is not an object (null or an error) is the grammar's to answer.
            _ if key.eq_ignore_ascii_case("metadata") => return None,
            v => fields.set(Cow::Borrowed(key), v.value(key)?).map(drop),
        };
        if let Err(e) = result {
            return Some(Err(e));
        }
    }
    Some(fields.build())
}

/// A member's value in a [`plain_object`] text.
#[derive(Clone, Copy)]
enum PlainValue<'a> {
    /// A quoted string's text.
    Quoted(&'a str),
    /// A bare value: a number, `null`, `true`, `false` or a word.
    Bare(&'a str),
    /// A nested object's whole text, braces included.
    Object(&'a str),
}

impl<'a> PlainValue<'a> {
    /// The value of `key` as [`member_value`] reads it; `None` for an object.
    fn value(self, key: &str) -> Option<Value<'a>> {
        Some(match self {
            PlainValue::Quoted(t) => text(t),
            PlainValue::Bare("null") => Value::Null,
            PlainValue::Bare("true") => Value::Bool(true),
            PlainValue::Bare("false") => Value::Bool(false),
            PlainValue::Bare(t) if is_id_number(key, t) => Value::Number(t),
            PlainValue::Bare(t) => text(t),
            PlainValue::Object(_) => return None,
        })
    }
}

/// A reader of [`plain_object`] texts.
struct PlainObject<'a> {
    b: &'a [u8],
    text: &'a str,
    i: usize,
}

impl<'a> PlainObject<'a> {
    fn spaces(&mut self) {
        while self.b.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    /// A run of bytes of `class` (at least one), as text.
    fn run(&mut self, class: impl Fn(u8) -> bool) -> Option<&'a str> {
        let start = self.i;
        while self.b.get(self.i).is_some_and(|c| class(*c)) {
            self.i += 1;
        }
        // ASCII bytes only, so both ends are char boundaries.
        self.text.get(start..self.i).filter(|t| !t.is_empty())
    }

    fn quoted(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        // Braces are left to the grammar too, so that no value here is a placeholder.
        while self.b.get(self.i).is_some_and(|c| matches!(c, 0x20..=0x7e) && !matches!(c, b'"' | b'\\' | b'{' | b'}')) {
            self.i += 1;
        }
        let inner = self.text.get(start..self.i)?;
        self.eat(b'"')?;
        Some(inner)
    }

    /// `{ "key": value, … }`, each member handed to `each` (nested objects whole, once).
    fn object(&mut self, each: &mut dyn FnMut(&'a str, PlainValue<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.spaces();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.quoted()?;
            self.spaces();
            self.eat(b':')?;
            self.spaces();
            let value = match self.b.get(self.i)? {
                b'"' => PlainValue::Quoted(self.quoted()?),
                b'{' => {
                    let start = self.i;
                    // One level only: the inner object's members are plain values.
                    self.object(&mut |_, v| (!matches!(v, PlainValue::Object(_))).then_some(()))?;
                    PlainValue::Object(self.text.get(start..self.i)?)
                }
                _ => {
                    PlainValue::Bare(self.run(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'+' | b'-'))?)
                }
            };
            each(key, value)?;
            self.spaces();
            if self.eat(b',').is_some() {
                self.spaces();
                continue;
            }
            return self.eat(b'}');
        }
    }
}

/// A body of pairs, or `None` when it is not one after all: it did not parse as pairs, or
/// no key names an alert field (`NASDAQ: AAPL buy long` is words, not an `NASDAQ` key).
fn pairs(text: &str) -> Result<Option<Fields<'_>>, ParseError> {
    let Ok(pairs) = run(Rule::pairs_body, text) else { return Ok(None) };
    let mut fields = Fields::default();
    let known = read_pairs(pairs, &mut fields)?;
    Ok(known.then_some(fields))
}

/// The commonest body of pairs, `key=value;key=value`, read without pest: `Some` with what
/// [`pairs`] and the fields would make of it, `None` to leave the text to the grammar.
///
/// Only a text wholly of this shape is read here: items split by `;` alone, each a plain key
/// (a letter or `_`, then letters, digits, `_`, `.` or `-`) right before `=`, and a non-empty
/// value of letters, digits and `. _ - / : ! + ^`. The grammar reads such a text as exactly
/// these pairs: no spacing, quote, brace, `=`, `,` or line break is left for it to weigh. The
/// whole text is checked before the first pair is handed over, as pest checks it, so a text
/// the grammar would not take never gets an answer here. A text whose keys name no field is
/// free words, which `None` leaves to [`words`].
fn plain_pairs(text: &str) -> Option<Result<Alerts, ParseError>> {
    let items = || PlainPairs { rest: text };
    if !items().all(|item| item.is_some()) {
        return None;
    }
    let mut fields = Fields::default();
    // No plain key or value holds a brace, so none is a placeholder.
    fields.without_braces();
    let mut known = false;
    for (key, value) in items().flatten() {
        if is_legs(key) {
            return Some(Err(ParseError::LegsNeedJson));
        }
        match fields.set(Cow::Borrowed(key), self::text(value)) {
            Ok(named) => known |= named,
            Err(e) => return Some(Err(e)),
        }
    }
    known.then(|| fields.build())
}

/// Bytes a plain key holds after its first: letters, digits, `_`, `.`, `-`.
const PLAIN_KEY: [bool; 256] = byte_class(b"_.-");
/// Bytes a plain value holds: letters, digits and `. _ - / : ! + ^`.
const PLAIN_VALUE: [bool; 256] = byte_class(b"._-/:!+^");

/// ASCII letters and digits, and `extra`.
const fn byte_class(extra: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = (c as u8).is_ascii_alphanumeric();
        c += 1;
    }
    let mut i = 0;
    while i < extra.len() {
        t[extra[i] as usize] = true;
        i += 1;
    }
    t
}

/// The items of a [`plain_pairs`] text, read byte by byte (short texts, so no searching):
/// `Some((key, value))` for a plain item, then `None` once for the first item that is not.
struct PlainPairs<'a> {
    rest: &'a str,
}

impl<'a> Iterator for PlainPairs<'a> {
    type Item = Option<(&'a str, &'a str)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let b = self.rest.as_bytes();
        let run = |from: usize, class: &[bool; 256]| {
            let mut i = from;
            while i < b.len() && class[usize::from(b[i])] {
                i += 1;
            }
            i - from
        };
        let key_len = match b.first() {
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' => run(0, &PLAIN_KEY),
            _ => 0,
        };
        let value_len = run(key_len + 1, &PLAIN_VALUE);
        let end = key_len + 1 + value_len;
        // A key, `=`, a value, then the end or `;` and another item.
        let plain = key_len > 0
            && b.get(key_len) == Some(&b'=')
            && value_len > 0
            && (end == b.len() || (b[end] == b';' && end + 1 < b.len()));
        if !plain {
            self.rest = "";
            return Some(None);
        }
        // Every byte read is ASCII, so these are char boundaries.
        let item = (&self.rest[..key_len], &self.rest[key_len + 1..end]);
        self.rest = self.rest.get(end + 1..).unwrap_or("");
        Some(Some(item))
    }
}

/// Hands every pair to `fields`; true when at least one key named a field.
fn read_pairs<'a>(pairs: Pairs<'a, Rule>, fields: &mut Fields<'a>) -> Result<bool, ParseError> {
    let mut known = false;
    from_pairs(pairs, &mut |piece| {
        match piece {
            Piece::Pair(key, _) if is_legs(&key) => return Err(ParseError::LegsNeedJson),
            Piece::Pair(key, value) => known |= fields.set(key, value)?,
            Piece::Legs(legs) => fields.set_legs(legs)?,
            Piece::Order(pairs) => fields.set_order_object(pairs)?,
            _ => {}
        }
        Ok(())
    })?;
    Ok(known)
}

/// [`words`], by the hand path when the text is of its shape and `hand` allows it.
fn words_by(text: &str, hand: bool) -> Result<Alerts, ParseError> {
    match plain_words(text).filter(|_| hand) {
        Some(read) => read,
        None => words(text),
    }
}

/// The commonest free words, `buy long AAPL` or `NASDAQ:AAPL long OPEN @ 190.25 limit gtc
/// id=abc-123`, without pest: `Some` with what [`words`] makes of the text, `None` to leave
/// it to the grammar.
///
/// Only a text wholly of this shape is read here, words split by single spaces, each of them:
/// ASCII letters and digits but `at` (a price marker when a number follows); two such runs
/// joined by one `:` (an exchange prefix); `@` followed by a word of digits with an optional
/// fraction (a price); or `key=value` with a key of letters, digits and `_` starting with a
/// letter or `_`, and a non-empty value of letters, digits and `. _ - / : ! + ^`. For each the
/// grammar's `item` has one reading, decided by the whole word (a keyword is a whole word, as
/// `kw_end` and `word_end` make it; `long=x` and `long:x` are no keywords): [`PlainWords`]
/// gives the same pieces to the same [`Words`] in the same order, after checking the whole
/// text as pest does first.
fn plain_words(text: &str) -> Option<Result<Alerts, ParseError>> {
    let pieces = || PlainWords { words: SplitByte { rest: Some(text), byte: b' ' } };
    if !pieces().all(|p| p.is_some()) {
        return None;
    }
    let mut reading = Words::default();
    // No plain word holds a brace, so no field value is a placeholder.
    reading.fields.without_braces();
    for piece in pieces().flatten() {
        if let Err(e) = reading.add(piece) {
            return Some(Err(e));
        }
    }
    Some(reading.finish())
}

/// `s` split at its first `byte` (ASCII), found without a searcher: words are short.
fn split_byte(s: &str, byte: u8) -> Option<(&str, &str)> {
    let i = s.bytes().position(|c| c == byte)?;
    // An ASCII byte is a char boundary on both sides.
    Some((s.get(..i)?, s.get(i + 1..)?))
}

/// `str::split` on one ASCII byte, without a searcher.
struct SplitByte<'a> {
    rest: Option<&'a str>,
    byte: u8,
}

impl<'a> Iterator for SplitByte<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = self.rest?;
        match split_byte(rest, self.byte) {
            Some((head, tail)) => {
                self.rest = Some(tail);
                Some(head)
            }
            None => {
                self.rest = None;
                Some(rest)
            }
        }
    }
}

/// The pieces of a [`plain_words`] text: `Some(piece)` per word (a price takes two), and
/// `None` for a word outside the shape, where the caller stops.
struct PlainWords<I> {
    words: I,
}

impl<'a, I: Iterator<Item = &'a str>> Iterator for PlainWords<I> {
    type Item = Option<Piece<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let w = self.words.next()?;
        let alnum = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric());
        let piece = if w == "@" {
            let price = self.words.next().filter(|n| {
                let (int, frac) = split_byte(n, b'.').unwrap_or((n, "0"));
                [int, frac].iter().all(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
            });
            price.map(|n| Piece::Word(Word::Price(n)))
        } else if alnum(w) {
            (!w.eq_ignore_ascii_case("at")).then(|| Piece::Word(plain_word(w)))
        } else if split_byte(w, b':').is_some_and(|(l, r)| alnum(l) && alnum(r)) {
            Some(Piece::Word(Word::Symbol(w)))
        } else {
            split_byte(w, b'=')
                .filter(|(k, v)| {
                    k.bytes().next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
                        && k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
                        && !v.is_empty()
                        && v.bytes().all(|c| PLAIN_VALUE[usize::from(c)])
                })
                .map(|(k, v)| Piece::Pair(Cow::Borrowed(k), text(v)))
        };
        Some(piece)
    }
}

/// The symbol inside a word the grammar reads as `other` because of the marks around it: a cashtag (`$TSLA`,
/// `#AAPL`), quotes, brackets or emphasis (`"AAPL"`, `(AAPL)`, `**AAPL**`), and a sentence's end (`AAPL.`,
/// `AAPL!`). `None` unless what is left is a symbol of letters and digits (with `.` `/` `-` inside, as `BRK.B` or
/// `BTC/USD`), starting with a letter, and no keyword.
fn wrapped_symbol(t: &str) -> Option<&str> {
    let inner = unwrapped(t);
    let b = inner.as_bytes();
    // As the grammar's `symbol` reads a word (an exchange prefix, `^`, `_`, `&` included): with only letters,
    // digits and `. / -`, `Buy **NASDAQ:TSLA** now` skipped the symbol and bought NOW.
    // A time in marks (`[14:30Z]`) says nothing, as bare: it has a symbol's characters.
    let symbol = b.iter().any(u8::is_ascii_alphabetic)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && symbol_len(b) == b.len()
        && !time_or_date(inner);
    // A stop or a target in marks (`<i>stop`, `(TP)`) is no symbol: [`keyword_in_marks`] refuses it. A cashtag is
    // one whatever its letters (`$SLS`, `$TP`), and so is a word a stop's key merely starts like (`SLS`).
    let stop_word = STOP_WORDS.iter().any(|w| inner.eq_ignore_ascii_case(w));
    let symbol = symbol && (t.starts_with('$') || !stop_word);
    (symbol && inner.len() < t.len() && matches!(plain_word(inner), Word::Symbol(_))).then_some(inner)
}

/// Whether a word is a handle naming someone (`@trader1`, `@Short_Signals:`): `@`, a letter, then only a handle's
/// characters, a sentence's punctuation after them. `@tp=200` or `@percent=50` is a stop or a size glued to the
/// sign: skipped as a handle, the order went out without its target and a CLOSE sold the whole position.
fn is_handle(t: &str) -> bool {
    let Some(h) = t.strip_prefix('@') else { return false };
    let h = h.trim_end_matches([':', ',', '.', '!', '?', ')', ']', ';']);
    h.starts_with(|c: char| c.is_ascii_alphabetic()) && h.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.')
}

/// A stop's or a target's word, which in marks names no instrument.
const STOP_WORDS: [&str; 12] =
    ["stop", "sl", "tp", "stoploss", "takeprofit", "profit", "loss", "trail", "trailstop", "target", "targets", "tsl"];

/// The marks a word may open with (a cashtag, a tag, bold, brackets, quotes) and close with (bold, brackets,
/// quotes, a sentence's punctuation), as free words read them around a symbol, a keyword or an amount.
const OPENING_MARKS: [char; 8] = ['$', '#', '*', '(', '[', '"', '\'', '`'];
const CLOSING_MARKS: [char; 11] = ['*', ')', ']', '"', '\'', '`', ',', '.', '!', '?', ';'];

/// A word without the marks around it: the ASCII ones, and any other character that is neither a letter nor a
/// digit (typographic quotes `“SHORT”`, guillemets, CJK brackets, an ellipsis, a non-breaking or ideographic
/// space). Read as ASCII only, `Close “SHORT” AAPL` lost its side and closed whichever was held.
fn unwrapped(t: &str) -> &str {
    // HTML tags are bold as a chat relay writes it: `<b>NVDA</b>` skipped, `Buy <b>NVDA</b> now` bought NOW.
    without_marks(without_tags(without_marks(t)))
}

/// A word without the marks [`unwrapped`] takes off, tags aside.
fn without_marks(t: &str) -> &str {
    let other_mark = |c: char| !c.is_ascii() && !c.is_alphanumeric();
    t.trim_start_matches(|c: char| OPENING_MARKS.contains(&c) || other_mark(c))
        .trim_end_matches(|c: char| CLOSING_MARKS.contains(&c) || other_mark(c))
}

/// A word without the HTML tags around it (`<b>`, `</strong>`, `<i>`): each a `<`, an optional `/`, one to ten
/// letters and a `>`, so an arrow (`<-`) or a comparison stays. Each tag is read in at most a dozen bytes.
fn without_tags(mut t: &str) -> &str {
    fn name_len(b: impl Iterator<Item = u8>) -> usize {
        b.take(11).take_while(u8::is_ascii_alphabetic).count()
    }
    while let Some(rest) = t.strip_prefix('<') {
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let n = name_len(rest.bytes());
        match rest.get(n..).and_then(|r| r.strip_prefix('>')) {
            Some(after) if (1..=10).contains(&n) => t = after,
            _ => break,
        }
    }
    while let Some(body) = t.strip_suffix('>') {
        let n = name_len(body.bytes().rev());
        let Some(body) = body.get(..body.len() - n).filter(|_| (1..=10).contains(&n)) else { break };
        let body = body.strip_suffix('/').unwrap_or(body);
        match body.strip_suffix('<') {
            Some(before) => t = before,
            None => break,
        }
    }
    t
}

/// Whether a word free words cannot read as a symbol may still name the instrument: a word with a letter outside
/// ASCII (`Nestlé`, `L'Oréal`, `Señal`: prose in another language is refused as English prose is, as a second
/// candidate) or a possessive (`Macy's`, `Apple’s`). The contractions of a pronoun or an adverb (`Let's`, `It's`,
/// `What's`) say nothing.
fn names_something(t: &str) -> bool {
    const CONTRACTIONS: [&str; 11] = ["let", "it", "that", "what", "here", "there", "he", "she", "who", "where", "how"];
    let core = unwrapped(t);
    if core.chars().any(|c| c.is_alphabetic() && !c.is_ascii()) {
        return true;
    }
    let stem = core.strip_suffix("'s").or_else(|| core.strip_suffix("\u{2019}s"));
    stem.is_some_and(|s| {
        !s.is_empty() && s.chars().all(char::is_alphanumeric) && !CONTRACTIONS.iter().any(|c| s.eq_ignore_ascii_case(c))
    })
}

/// Whether a word free words cannot read says something all the same: a number inside other marks (`TP@200`,
/// `(SL:180)`, `50％`, `½`, `€5000`, `１９０`) or a negation by contraction (`don't`, `don’t`). A time or a date
/// (`10:30:00`, `2024-01-15T14:30:00Z`), a tag (`#1`, `(#2)`), a handle (`@trader1`) and a link say nothing
/// about the trade.
fn unplaced(t: &str) -> bool {
    // A negation by contraction (`don't`, `didn’t`, `won't`): other apostrophes (`Let's`, `It’s`) say nothing.
    let lower = t.to_lowercase();
    let word = lower.trim_end_matches(|c: char| !c.is_alphabetic());
    if word.ends_with("n't") || word.ends_with("n\u{2019}t") {
        return true;
    }
    if !t.chars().any(char::is_numeric) {
        return false;
    }
    // Judged without the marks around it: `[2024-01-15T14:30:00Z]` (a template's `[{{timenow}}]`) is a time.
    let core = unwrapped(t);
    // A number alone in marks (`50％` once its sign is taken for a mark, `(15)`) is no time: it may be a size.
    // Only what has a date's or a time's shape: numbers merely joined (`190-191`, `190-189-188`, `190:191`, a price
    // range or ladder in brackets or quotes) were taken for one, skipped, and the order went out at market.
    let time_or_date = time_or_date(core.trim_end_matches([',', '.']));
    let bare = t.trim_start_matches(['(', '[', '*', '"', '\'']);
    let tag = bare.starts_with('#');
    !(time_or_date || tag || is_handle(bare) || t.contains("://"))
}

/// The time or date a word free words cannot read holds, without its marks (`[2024-01-15T14:30:00Z]`, a template's
/// `[{{timenow}}]`, `10:30:00,`).
fn time_word(t: &str) -> Option<&str> {
    let core = unwrapped(t).trim_end_matches([',', '.']);
    (t.chars().any(char::is_numeric) && time_or_date(core)).then_some(core)
}

/// A date (`2024-01-15`, `01/15/2024`, `15/01/2024`), a time (`10:30`, `14:30:00.123Z`, `09:30-05:00`) or both
/// (`2024-01-15T14:30:00Z`), each part in its range.
fn time_or_date(w: &str) -> bool {
    let num = |p: &str| {
        (!p.is_empty() && p.len() <= 4 && p.bytes().all(|b| b.is_ascii_digit()))
            .then(|| p.parse::<u32>().ok())
            .flatten()
    };
    let date = |d: &str| {
        let parts: Vec<&str> = d.split(['-', '/']).collect();
        let [a, b, c] = parts.as_slice() else { return false };
        let (Some(x), Some(y), Some(z)) = (num(a), num(b), num(c)) else { return false };
        if a.len() == 4 {
            (1..=12).contains(&y) && (1..=31).contains(&z)
        } else if c.len() == 4 || c.len() == 2 {
            (1..=31).contains(&x) && (1..=31).contains(&y) && (x <= 12 || y <= 12)
        } else {
            false
        }
    };
    let time = |t: &str| {
        let t = t.trim_end_matches(['Z', 'z']);
        // An offset after the time (`+00:00`, `-05:00`), then a fraction of a second.
        // An offset alone (`(+05:30)`) is read as the time it is.
        let t = match t.rfind(['+', '-']) {
            Some(i) if i > 0 => &t[..i],
            Some(_) => &t[1..],
            None => t,
        };
        let t = t
            .split_once('.')
            .map_or(t, |(whole, frac)| if frac.bytes().all(|b| b.is_ascii_digit()) { whole } else { "x" });
        let mut parts: Vec<&str> = t.split(':').collect();
        // Milliseconds after a third colon (`14:30:00:123`).
        if parts.len() == 4 && parts[3].len() <= 3 && num(parts[3]).is_some() {
            parts.pop();
        }
        let short = parts.iter().all(|p| (1..=2).contains(&p.len()));
        match parts.as_slice() {
            [h, m] | [h, m, _] if short => {
                num(h).is_some_and(|h| h < 24)
                    && num(m).is_some_and(|m| m < 60)
                    && parts.get(2).map_or(true, |s| num(s).is_some_and(|s| s <= 60))
            }
            _ => false,
        }
    };
    match w.split_once(['T', 't']) {
        Some((d, t)) => date(d) && time(t),
        None if w.contains(':') => time(w),
        None => date(w),
    }
}

/// A number with a sign or a unit after it (`50%`, `5000$`, `+2`, `500€`): an amount the sender meant. Other words
/// that start with a digit (a time such as `2024-01-15T14:30:00Z` or `10:30`, a date) are not amounts.
fn amount_with_unit(w: &str) -> bool {
    // Bold, brackets or quotes around it (`**50%**`, `(50%)`) mark it as they mark a keyword; a leading `$` is the
    // caller's, and a `#` makes a tag.
    let w = w.trim_start_matches(|c| OPENING_MARKS.contains(&c) && !matches!(c, '$' | '#'));
    let unsigned = w.strip_prefix(['+', '-']).unwrap_or(w);
    let digits = unsigned.bytes().take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b',')).count();
    let (number, unit) = unsigned.split_at(digits);
    // The sentence's mark or the closing mark after the unit (`50%.`, `50%:`, `50%**`) is not part of it.
    let unit = unit.trim_end_matches(|c| CLOSING_MARKS.contains(&c) || c == ':');
    let number_ok = number.bytes().any(|b| b.is_ascii_digit());
    number_ok
        && (matches!(unit, "%" | "$" | "\u{20ac}" | "\u{a3}" | "\u{a5}")
            || (unit.is_empty() && unsigned.len() < w.len()))
}

/// A keyword (what [`plain_word`] reads as neither symbol nor number) inside the marks of
/// [`wrapped_symbol`]: `**SHORT**`, `(limit)`, `"gtc"`, `long,`.
fn wrapped_keyword(t: &str) -> Option<Word<'_>> {
    let inner = unwrapped(t);
    if inner.is_empty() || inner.len() == t.len() || !inner.bytes().all(|c| c.is_ascii_alphanumeric()) {
        return None;
    }
    // A number in marks is a tag (`(#1)`), not an amount.
    Some(plain_word(inner)).filter(|w| !matches!(w, Word::Symbol(_) | Word::Number(_)))
}

/// What the letters of a word in marks free words do not list (HTML `<b>SHORT</b>`, `|short|`, `~~short~~`,
/// `--direction=short`) say: `None` when they hold no keyword and no stop word (`stop`, `sl`, `tp`, …);
/// `Some(Some(keyword))` when one keyword is all they hold, the letters of HTML tags aside; `Some(None)` when what
/// they say is unclear (a stop, two keywords, a keyword beside other letters). A link says nothing whatever its
/// path holds. One pass over the word.
fn keyword_in_marks(t: &str) -> Option<Option<Word<'_>>> {
    // A handle names someone (`@short`, `@Short_Signals`), as free words read it elsewhere ([`unplaced`]).
    if is_handle(t) || t.contains("://") {
        return None;
    }
    let (mut keyword, mut keywords, mut stop, mut other) = (None, 0usize, false, false);
    let (mut in_tag, mut start) = (false, None);
    for (i, c) in t.char_indices().chain(std::iter::once((t.len(), ' '))) {
        if c.is_alphanumeric() {
            start.get_or_insert(i);
            continue;
        }
        if let Some(s) = start.take() {
            let run = &t[s..i];
            match plain_word(run) {
                Word::Symbol(_) | Word::Number(_) if fields::is_bracket_key(run) => stop = true,
                Word::Symbol(_) | Word::Number(_) => other |= !in_tag,
                w => {
                    keywords += 1;
                    keyword = Some(w);
                }
            }
        }
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            _ => {}
        }
    }
    match (keywords, stop, other) {
        (0, false, _) => None,
        (1, false, false) => Some(keyword),
        _ => Some(None),
    }
}

/// Whether a word is made of unit signs (a percent, a per mille, a currency sign) and marks only: `%`, `％`, `‰`,
/// `¢`, `€`, `(%)`. After a price it makes the price no plain number.
fn unit_signs(t: &str) -> bool {
    let unit = |c: char| {
        matches!(c, '%' | '\u{FF05}' | '\u{FE6A}' | '\u{066A}' | '\u{2030}' | '\u{2031}' | '\u{0609}' | '\u{060A}')
            || matches!(c, '$' | '\u{A2}'..='\u{A5}' | '\u{20A0}'..='\u{20CF}' | '\u{FF04}' | '\u{FFE0}' | '\u{FFE1}')
            || matches!(c, '\u{FFE5}' | '\u{FFE6}' | '\u{FE69}' | '\u{0E3F}' | '\u{09F3}' | '\u{FDFC}' | '\u{058F}')
    };
    t.chars().any(unit) && !t.chars().any(char::is_alphanumeric)
}

/// What the grammar's `item` makes of one word of letters and digits.
fn plain_word(w: &str) -> Word<'_> {
    let any = |words: &[&str]| words.iter().any(|k| w.eq_ignore_ascii_case(k));
    if any(&["long", "short", "bullish", "bearish"]) {
        Word::Direction(direction_word(w))
    } else if any(&["open", "close", "modify", "cancel", "buy", "sell", "entry", "exit"]) {
        Word::Action(w)
    } else if any(&["market", "limit"]) {
        Word::OrderType(w)
    } else if any(&["day", "gtc", "fok"]) {
        Word::Duration(w)
    } else if is_plain_number(w) {
        Word::Number(w)
    } else {
        Word::Symbol(w)
    }
}

/// The grammar's `number` for a word of letters and digits: digits, then optionally `e` or
/// `E` and digits.
fn is_plain_number(w: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    match w.find(['e', 'E']) {
        Some(i) => digits(&w[..i]) && digits(&w[i + 1..]),
        None => digits(w),
    }
}

fn words(text: &str) -> Result<Alerts, ParseError> {
    let pairs = run(Rule::words_body, text).map_err(|_| too_complex())?;
    let mut reading = Words::default();
    let mut label: Option<&str> = None;
    from_pairs(pairs, &mut |piece| match (label.take(), piece) {
        (Some(l), Piece::Word(w)) if is_field_key(l) => reading.pair(Cow::Borrowed(l), self::text(w.text())),
        (pending, piece) => {
            if let Some(l) = pending {
                reading.unlabelled(l)?;
            }
            match piece {
                Piece::Label(l) => {
                    label = Some(l);
                    Ok(())
                }
                piece => reading.add(piece),
            }
        }
    })?;
    if let Some(l) = label {
        reading.unlabelled(l)?;
    }
    reading.finish()
}

/// What free words have said so far.
#[derive(Default)]
struct Words<'a> {
    fields: Fields<'a>,
    /// An action came from a word or a pair.
    has_action: bool,
    /// The first word that could be the instrument, and the first one that differs from it.
    instrument: Option<&'a str>,
    second_instrument: Option<&'a str>,
    /// The first number not marked as a price.
    stray_number: Option<&'a str>,
    /// The word before was a lone `@`, so this one is meant as a price.
    after_at: bool,
    /// The first word marked as a price (after `@`) that is no plain number (`190.10$`).
    bad_price: Option<&'a str>,
    /// The word before was a price (`@ 50`, `price=50`), so a unit sign now makes it no plain number (`@ 50 %`).
    after_price: bool,
    /// The first word of unit signs right after a price (`@ 50 %`, `price=5 ¢`).
    unit_after_price: Option<&'a str>,
    /// The first unresolved placeholder.
    braced: Option<&'a str>,
    /// The first word that says something this reader cannot place: a number inside other marks (`TP@200`,
    /// `50％`, `½`, `€5000`), a keyword or a stop among other letters in other marks (`--direction=short`,
    /// `<b>STOP</b>`), a unit sign with no price before it, a negation (`don't`), `all` where an instrument goes.
    unread: Option<&'a str>,
    /// The first `key=value` among the words whose key is no field of an alert and whose value holds a number
    /// (`limit=150`, `percent=50`): a price or an amount the sender meant, under a name this reader does not know.
    unknown_number: Option<String>,
    /// The times and dates among the words (a template's bare `{{timenow}}`, in marks or not), as [`TextTimes`].
    times: TextTimes<'a>,
}

/// The times and dates free words carry outside a pair. Skipped, a template's bare `{{timenow}}`
/// (`buy AAPL [{{timenow}}]`) left the alert without a time, and `max_alert_age` let it trade an hour late.
#[derive(Default)]
struct TextTimes<'a> {
    /// The first full date-time with its zone (`2024-01-15T14:30:00Z`, `2024-01-15T15:30:00+01:00`), with its instant.
    zoned: Option<(&'a str, i64)>,
    /// The first one naming another instant.
    other_zoned: Option<&'a str>,
    /// The first time or date that names no instant: without a date (`10:30:00`, `14:30Z`), without a time
    /// (`2024-01-15`), without a zone (`2024-01-15T14:30:00`) or with a date in another order
    /// (`01/15/2024T14:30Z`), with what it lacks.
    partial: Option<(&'a str, &'static str)>,
}

impl<'a> TextTimes<'a> {
    /// Notes a word [`time_or_date`] reads, without its marks.
    fn add(&mut self, w: &'a str) {
        let lacks = match w.split_once(['T', 't']) {
            // A zone after the clock: `Z`, or an offset's sign (the date's dashes are before the `T`).
            Some((_, clock)) if clock.contains(['Z', 'z', '+', '-']) => match super::time::parse_ms(w) {
                Some(ms) => {
                    match self.zoned {
                        None => self.zoned = Some((w, ms)),
                        Some((_, first)) if first != ms => {
                            self.other_zoned.get_or_insert(w);
                        }
                        Some(_) => {}
                    }
                    return;
                }
                // `01/15/2024T14:30Z`: a zone, but a date ISO 8601 does not write so.
                None => "no ISO 8601 date",
            },
            Some(_) => "no zone",
            None if w.contains(':') => "no date",
            None => "no time",
        };
        self.partial.get_or_insert((w, lacks));
    }

    /// The alert's time, or the time that reads as none (as a JSON time key's value that reads as none is kept,
    /// under `time`, so that the rendered alert reads back the same): one instant is the alert's time; two
    /// instants, or times and dates naming none, are a time that reads as none.
    fn read(&self) -> Option<Result<i64, String>> {
        match (self.zoned, self.other_zoned, self.partial) {
            (Some((a, _)), Some(b), _) => Some(Err(super::snippet(&format!("{a} or {b}")))),
            (Some((_, ms)), None, _) => Some(Ok(ms)),
            (None, _, Some((w, lacks))) => Some(Err(super::snippet(&format!("{w} ({lacks})")))),
            (None, _, None) => None,
        }
    }

    /// Puts [`TextTimes::read`] on the alerts that carry no time of their own: a time key among the pairs (`time=`,
    /// `timenow=`) says the alert's time, as it does in JSON.
    fn stamp(&self, alerts: &mut Alerts) {
        let Some(time) = self.read() else { return };
        for a in alerts.iter_mut().filter(|a| a.sent_at_ms.is_none() && a.unread_time.is_none()) {
            match &time {
                Ok(ms) => a.sent_at_ms = Some(*ms),
                Err(value) => {
                    a.unread_time =
                        Some(super::UnreadTime { key: CompactString::const_new("time"), value: value.clone() })
                }
            }
        }
    }
}

/// The date-times in a fill message's title (`{{timenow}}: order buy @ 1 filled on AAPL. …`, `My strategy
/// [{{timenow}}]: …`), as [`TextTimes`]: dropped with the title, a fill an hour late had no time and traded under
/// `max_alert_age`. Only a word holding both a date and a clock counts (what `{{timenow}}` writes): a date or a
/// clock alone in a title is part of the strategy's name (`ORB 09:30`, `Since 2024-01-15`), as before.
fn title_times(title: &str) -> TextTimes<'_> {
    let mut times = TextTimes::default();
    // Only a word with a `T` and a digit can hold a date-time: the others (most of a title: `My Strategy (20, 50)`)
    // are passed over before the date's and clock's grammar is tried on them, which cost a fill message a third more.
    let maybe = |w: &str| w.contains(['T', 't']) && w.chars().any(char::is_numeric);
    for word in title.split(char::is_whitespace).filter(|w| maybe(w)) {
        // The colon that ends the title may stick to the last word (`2024-01-15T14:30:00Z:`).
        if let Some(w) = time_word(word.trim_end_matches(':')).filter(|w| w.contains(['T', 't'])) {
            times.add(w);
        }
    }
    times
}

impl<'a> Words<'a> {
    fn add(&mut self, piece: Piece<'a>) -> Result<(), ParseError> {
        match piece {
            Piece::Pair(key, value) => self.pair(key, value),
            Piece::Word(w) => self.word(w),
            // Labels are resolved by the caller; a fill, legs and an `order` object never come out of `words_body`.
            Piece::Label(l) => self.unlabelled(l),
            Piece::Fill(_) | Piece::Order(_) => Ok(()),
            Piece::Legs(_) => Err(ParseError::LegsNeedJson),
        }
    }

    fn pair(&mut self, key: Cow<'a, str>, value: Value<'a>) -> Result<(), ParseError> {
        if is_legs(&key) {
            return Err(ParseError::LegsNeedJson);
        }
        // `id` is a free-words shorthand only: JSON bodies often carry unrelated ids (a
        // TradingView order id is the order's name), which must not become a dedup key.
        self.after_at = false;
        let name = if key.eq_ignore_ascii_case("id") { Some(Name::MessageId) } else { Name::from_key(&key) };
        self.after_price = name == Some(Name::Price);
        let Some(name) = name else {
            // `amount` and `units` are guarded for JSON (read beside a percent-of-position key); in free words they
            // are a size the sender wrote, refused as any unknown number is (`buy AAPL amount=50` traded the bot's
            // size).
            if is_guarded_key(&key) && !fields::is_percent_amount_key(&key) {
                self.fields.set_guarded(key, &value);
            } else {
                if self.unknown_number.is_none() && holds_number(&key, &value) {
                    // Skipped, `buy AAPL limit=150` went out at market and `sell AAPL percent=50` closed everything.
                    self.unknown_number = Some(format!("{}={}", key.trim(), fields::display(&value)));
                }
                self.fields.set_unread(key, &value);
            }
            return Ok(());
        };
        self.has_action |= matches!(name, Name::Action | Name::MarketPosition | Name::PrevMarketPosition);
        self.fields.set_named(name, key, value)
    }

    fn set(&mut self, name: Name, key: &'static str, text: &'a str) -> Result<(), ParseError> {
        self.fields.set_named(name, Cow::Borrowed(key), self::text(text))
    }

    fn word(&mut self, word: Word<'a>) -> Result<(), ParseError> {
        let after_at = std::mem::take(&mut self.after_at);
        let after_price = std::mem::replace(&mut self.after_price, matches!(word, Word::Price(_)));
        match word {
            Word::Action(t) => {
                self.has_action = true;
                self.set(Name::Action, "action", t)
            }
            Word::Direction(t) => self.set(Name::Direction, "direction", t),
            Word::OrderType(t) => self.set(Name::OrderType, "order_type", t),
            Word::Duration(t) => self.set(Name::Duration, "duration", t),
            Word::Price(t) => self.set(Name::Price, "price", t),
            Word::Symbol(t) => {
                // `ticker:AAPL` and `id:abc` are pairs written without a space.
                if let Some((key, value)) = t.split_once(':').filter(|(k, _)| is_field_key(k)) {
                    return self.pair(Cow::Borrowed(key), text(value));
                }
                self.candidate(t);
                Ok(())
            }
            Word::Number(t) => {
                self.stray_number.get_or_insert(t);
                Ok(())
            }
            Word::Braced(t) => {
                self.braced.get_or_insert(t);
                Ok(())
            }
            // Skipped, except where it holds a number the sender meant as a price or an
            // amount (`@ 190.10$`, `$5000`): dropping it would trade without that number.
            Word::Other("@") => {
                self.after_at = true;
                Ok(())
            }
            Word::Other(t) => {
                // Only where the number starts the word (after the `@` and a `$`): a handle
                // such as `@trader1` or a cashtag is no price.
                let starts_numeric = |w: &str| w.bytes().next().is_some_and(|b| b.is_ascii_digit() || b == b'.');
                let at = t.strip_prefix('@');
                let marked = at.is_some() || after_at;
                let rest = at.unwrap_or(t);
                let dollar = rest.strip_prefix('$');
                // In marks too: after `@` a word such as `(12-11-10)` is a ladder of prices, though it has a date's
                // shape; skipped as one, the order went out at market.
                let price_word = dollar.unwrap_or(rest);
                if marked
                    && (starts_numeric(price_word) || starts_numeric(unwrapped(price_word).trim_start_matches('$')))
                {
                    self.bad_price.get_or_insert(t);
                } else if dollar.is_some_and(starts_numeric) || amount_with_unit(rest) {
                    // A number with a unit (`50%`, `5000$`, `-2`) is a size or an amount the sender meant:
                    // skipped, `sell AAPL 50%` closed the whole position.
                    self.stray_number.get_or_insert(t);
                } else if unit_signs(t) {
                    // Skipped as punctuation, `close long AAPL @ 50 %` (half the position) closed all of it with a
                    // limit at $50.
                    if after_price {
                        self.unit_after_price.get_or_insert(t);
                    } else {
                        self.unread.get_or_insert(t);
                    }
                } else if let Some(symbol) = wrapped_symbol(t) {
                    // A cashtag or a symbol in quotes, brackets or bold (`$TSLA`, `(AAPL)`, `**NVDA**`) names an
                    // instrument. Skipped, another word became the instrument: `Buy $TSLA now` traded NOW. Read as
                    // a bare symbol is, so a field pair in marks (`(ticker:AAPL)`) is the pair it is.
                    return self.word(Word::Symbol(symbol));
                } else if let Some(keyword) = wrapped_keyword(t) {
                    // A keyword in bold, brackets or quotes, or before a comma (`**SHORT**`, `(limit)`, `long,`)
                    // says what it says. Skipped, `Close **SHORT** AAPL` closed whichever side was held and
                    // `(limit) buy AAPL @ 190` went out at market.
                    return self.word(keyword);
                } else if let Some(said) = keyword_in_marks(t) {
                    // In marks the reader does not list (HTML, pipes, `~~`, a flag), a keyword or a stop was
                    // skipped: `close <b>SHORT</b> AAPL` closed whichever side was held and `@ 190 <b>STOP</b>` went
                    // out as a limit. A keyword alone reads as it does in bold; anything less clear is refused.
                    match said {
                        Some(keyword) => return self.word(keyword),
                        None => {
                            self.unread.get_or_insert(t);
                        }
                    }
                } else if names_something(t) {
                    // A name this reader cannot take as a symbol (`Nestlé`, `Macy's`) may be the instrument the
                    // sender meant: skipped, another word became the instrument (`Buy Nestlé now` bought NOW).
                    self.candidate(t);
                } else if let Some(w) = time_word(t) {
                    self.times.add(w);
                } else if unplaced(t) {
                    // Skipped, it traded without what it said: `TP@200 SL@180` lost the bracket, `sell AAPL 50％`
                    // closed the whole position, `Don't buy AAPL` bought.
                    self.unread.get_or_insert(t);
                }
                Ok(())
            }
        }
    }

    /// A word that could be the instrument: the first is, and a second, different one refuses the text.
    fn candidate(&mut self, t: &'a str) {
        // `close all`, `cancel all`: every position, which no one alert names (Allstate is `NYSE:ALL`).
        if t.eq_ignore_ascii_case("all") {
            self.unread.get_or_insert(t);
            return;
        }
        match self.instrument {
            None => self.instrument = Some(t),
            Some(first) if !first.eq_ignore_ascii_case(t) && self.second_instrument.is_none() => {
                self.second_instrument = Some(t)
            }
            Some(_) => {}
        }
    }

    /// A `label:` with no value after it: `TSLA:` names the instrument, a keyword as a heading (`BUY: AAPL`) is the
    /// keyword; a field name with nothing after it says nothing.
    fn unlabelled(&mut self, label: &'a str) -> Result<(), ParseError> {
        if is_legs(label) {
            return Err(ParseError::LegsNeedJson);
        }
        if is_field_key(label) {
            return Ok(());
        }
        // Taken for a candidate instrument, `BUY: AAPL` was refused as naming no action, the word the sender wrote.
        match plain_word(label) {
            Word::Symbol(_) | Word::Number(_) => self.word(Word::Symbol(label)),
            keyword => self.word(keyword),
        }
    }

    fn finish(mut self) -> Result<Alerts, ParseError> {
        if let Some(b) = self.braced {
            // Fields names the placeholder; the other words do not matter any more.
            let mut fields = Fields::default();
            fields.set_named(Name::Instrument, Cow::Borrowed("text"), text(b))?;
            return fields.build();
        }
        if !self.has_action {
            return Err(ParseError::NotAnAlert(
                "the text names no action (OPEN, CLOSE, MODIFY, CANCEL, buy, sell, entry or exit), \
                 so it is not read as a trade"
                    .into(),
            ));
        }
        if let Some(p) = self.bad_price {
            return Err(ParseError::NotAnAlert(format!(
                "the price after `@` ({}) is not a plain number; write it in digits, such as `@ 190.25`",
                super::snippet(p)
            )));
        }
        if let Some(u) = self.unit_after_price {
            return Err(ParseError::NotAnAlert(format!(
                "the price is not a plain number: a unit ({}) follows it; write the price in digits in the \
                 instrument's currency, such as `@ 190.25`, and leave sizes out (the bot's sizing sets them)",
                super::snippet(u)
            )));
        }
        if let Some(n) = self.stray_number {
            let n = super::snippet(n);
            return Err(ParseError::NotAnAlert(format!(
                "the number {n} is not marked as a price; write `@ {n}`, `at {n}` or `price={n}`"
            )));
        }
        if let Some(p) = &self.unknown_number {
            return Err(ParseError::NotAnAlert(format!(
                "`{}` is no field this reader knows, and its number would be dropped: send a limit price as \
                 `price=` (or after `@`), and leave sizes out (the bot's sizing sets them)",
                super::snippet(p)
            )));
        }
        if let Some(w) = self.unread {
            return Err(ParseError::NotAnAlert(format!(
                "`{}` says something this reader cannot place (a number or a keyword in other marks, such as a stop \
                 or a target, a unit sign, a part of the position, a negation, or `all`); send it as `key=value` \
                 pairs, or leave the word out",
                super::snippet(w)
            )));
        }
        if let (Some(a), Some(b)) = (self.instrument, self.second_instrument) {
            return Err(ParseError::NotAnAlert(format!(
                "more than one word could be the instrument ({}, {}); send one symbol, or `ticker=` with it",
                super::snippet(a),
                super::snippet(b)
            )));
        }
        if let Some(i) = self.instrument {
            self.set(Name::Instrument, "instrument", i)?;
        }
        let mut alerts = self.fields.build()?;
        self.times.stamp(&mut alerts);
        Ok(alerts)
    }
}

#[cfg(test)]
mod tests;
