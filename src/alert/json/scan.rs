//! A fast path in front of serde_json for the usual alert: one flat object of ASCII
//! strings without escapes, integers, decimals, booleans and nulls, with at most a flat
//! `metadata` object inside. It makes the same [`Fields`] calls, with the same keys and
//! values, as the serde visitor in `json.rs` would for that body, and answers `None` the
//! moment it meets anything else: an escape, a byte outside printable ASCII in a string,
//! an array, a deeper object, `legs` or `strategy_info`, a number that serde would read
//! as something other than text, or any syntax it does not take. The serde path then
//! reads the body from the start, so every other body, and every error, is serde's own.
//!
//! `tests` below hold the two paths to the same answer for generated bodies, valid and
//! broken; the scan is one pass over the bytes, so its cost stays linear in the body.

use super::super::fields::{is_guarded_key, is_strategy_info, Fields, Name, Value};
use super::super::ParseError;
use std::borrow::Cow;

/// One value token of the subset.
#[derive(Clone, Copy)]
enum Token<'a> {
    /// A string's text between its quotes (no escapes in it).
    Str(&'a str),
    /// A number token, as written.
    Num(&'a str),
    Bool(bool),
    Null,
}

/// Reads `body` into `fields` when it is within the subset: `Some` with what the serde
/// visitor would have returned, `None` to leave the body to serde (`fields` is then
/// partly filled and must be dropped).
pub(super) fn parse<'a>(body: &'a [u8], fields: &mut Fields<'a>) -> Option<Result<(), ParseError>> {
    // Checked once here, so every string is a slice of it; non-UTF-8 bodies are serde's.
    let text = std::str::from_utf8(body).ok()?;
    let mut s = Scan { text, b: body, i: 0, braces: false };
    s.ws();
    s.eat(b'{')?;
    s.ws();
    let mut failure: Option<ParseError> = None;
    if s.eat(b'}').is_none() {
        loop {
            let key = s.string()?;
            s.ws();
            s.eat(b':')?;
            s.ws();
            if failure.is_some() {
                s.skip_value()?;
            } else {
                s.member(key, fields, &mut failure)?;
            }
            s.ws();
            if s.eat(b',').is_some() {
                s.ws();
                continue;
            }
            s.eat(b'}')?;
            break;
        }
    }
    s.ws();
    if s.i != body.len() {
        return None;
    }
    if !s.braces {
        fields.without_braces();
    }
    Some(match failure {
        Some(e) => Err(e),
        None => Ok(()),
    })
}

struct Scan<'a> {
    text: &'a str,
    b: &'a [u8],
    i: usize,
    /// Whether a string held a brace (so a value may be an unresolved placeholder).
    braces: bool,
}

/// Bytes a string of the subset holds as they are: printable ASCII but `"` and `\`,
/// and the braces, which are noted on the way (`Fields::without_braces`).
const PLAIN: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0x20;
    while c < 0x7f {
        t[c] = !matches!(c as u8, b'"' | b'\\' | b'{' | b'}');
        c += 1;
    }
    t
};

/// The offset of the first byte of `b` that is not [`PLAIN`], if there is one. Eight bytes
/// are tested at once while eight remain: strings here are a few bytes to a few dozen, and
/// a byte loop's exit, at a different length each time, was mispredicted once a string.
fn plain_run(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Each test flags exactly the matching bytes below its first match; above it a borrow
    // or carry may flag others, so only the lowest flag of all of them is read.
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let mut at = 0;
    while let Some(word) = b.get(at..at + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        let x = u64::from_le_bytes(word);
        let stop = (x.wrapping_sub(ONES * 0x20) & !x & HIGH) // control bytes
            | ((x | x.wrapping_add(ONES)) & HIGH) // 0x7f and above
            | zero(x ^ (ONES * u64::from(b'"')))
            | zero(x ^ (ONES * u64::from(b'\\')))
            | zero(x ^ (ONES * u64::from(b'{')))
            | zero(x ^ (ONES * u64::from(b'}')));
        if stop != 0 {
            return Some(at + (stop.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    b[at..].iter().position(|c| !PLAIN[usize::from(*c)]).map(|p| at + p)
}

impl<'a> Scan<'a> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// JSON's whitespace: space, tab, line feed, carriage return.
    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek() == Some(c) {
            self.i += 1;
            Some(())
        } else {
            None
        }
    }

    /// A string of printable ASCII without escapes; its text between the quotes.
    // Inlined into its three callers, as `token` is: a call's saved registers and spilled
    // state cost about as much as a short string's scan (parse: 6.9k -> 6.4k instructions).
    #[inline(always)]
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            self.i += plain_run(&self.b[self.i..])?;
            match self.peek()? {
                b'{' | b'}' => {
                    self.braces = true;
                    self.i += 1;
                }
                b'"' => break,
                _ => return None,
            }
        }
        let text = self.text.get(start..self.i)?;
        self.i += 1;
        Some(text)
    }

    /// A number by JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<&'a str> {
        let start = self.i;
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.eat(b'.').is_some() {
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            self.peek().filter(u8::is_ascii_digit)?;
            self.digits();
        }
        // A digit right after the number (`01`) is not JSON.
        if self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return None;
        }
        self.text.get(start..self.i)
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
    }

    fn word(&mut self, w: &[u8]) -> Option<()> {
        if self.b[self.i..].starts_with(w) {
            self.i += w.len();
            Some(())
        } else {
            None
        }
    }

    /// A scalar value; `None` for objects, arrays and anything outside the subset.
    #[inline(always)]
    fn token(&mut self) -> Option<Token<'a>> {
        Some(match self.peek()? {
            b'"' => Token::Str(self.string()?),
            b't' => {
                self.word(b"true")?;
                Token::Bool(true)
            }
            b'f' => {
                self.word(b"false")?;
                Token::Bool(false)
            }
            b'n' => {
                self.word(b"null")?;
                Token::Null
            }
            _ => Token::Num(self.number()?),
        })
    }

    /// A flat object of scalars; calls `each` with every pair in order.
    fn flat_object(&mut self, mut each: impl FnMut(&'a str, Token<'a>) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key = self.string()?;
            self.ws();
            self.eat(b':')?;
            self.ws();
            let value = self.token()?;
            each(key, value)?;
            self.ws();
            if self.eat(b',').is_some() {
                self.ws();
                continue;
            }
            return self.eat(b'}');
        }
    }

    /// A value read for nothing (after an earlier member failed): a scalar or a flat object.
    fn skip_value(&mut self) -> Option<()> {
        if self.peek() == Some(b'{') {
            self.flat_object(|_, _| Some(()))
        } else {
            self.token().map(drop)
        }
    }

    /// One member of the top-level object, dispatched as the serde visitor does it; what the
    /// visitor would fail with goes to `failure` (which is `None` on the way in). The failure is
    /// written there rather than returned: a result holding a `ParseError` was copied whole
    /// through memory on every member, failing or not.
    fn member(&mut self, key: &'a str, fields: &mut Fields<'a>, failure: &mut Option<ParseError>) -> Option<()> {
        let mut fail = |r: Result<(), ParseError>| {
            if let Err(e) = r {
                *failure = Some(e);
            }
            Some(())
        };
        let name = Name::from_key(key);
        if let Some(name) = name.filter(|n| n.reads_raw()) {
            return fail(fields.set_named(name, Cow::Borrowed(key), raw(self.token()?)));
        }
        if let Some(name) = name {
            return fail(fields.set_named(name, Cow::Borrowed(key), scalar(self.token()?)?));
        }
        // None of these three is a bracket key, so they are asked first; serde reads
        // `legs` and `strategy_info` (arrays and objects of their own).
        if key.eq_ignore_ascii_case("legs") || is_strategy_info(key) {
            return None;
        }
        if key.eq_ignore_ascii_case("metadata") {
            if self.peek() == Some(b'{') {
                // After a failure the object's other members are only read.
                return self.flat_object(|k, v| {
                    if failure.is_none() && Name::from_key(k) == Some(Name::MessageId) {
                        if let Err(e) = fields.set_named(Name::MessageId, super::metadata_key(Cow::Borrowed(k)), raw(v))
                        {
                            *failure = Some(e);
                        }
                    }
                    Some(())
                });
            }
            let kind = match self.token()? {
                Token::Null => return Some(()),
                Token::Str(_) => "string",
                // serde refuses a number out of a float's range here; leave numbers to it.
                Token::Num(_) => return None,
                Token::Bool(_) => "boolean",
            };
            return fail(fields.set_named(Name::MessageId, Cow::Borrowed("metadata.message_id"), Value::Other(kind)));
        }
        if is_guarded_key(key) {
            fields.set_guarded(Cow::Borrowed(key), &raw(self.token()?));
            return Some(());
        }
        // Unknown keys: the value is checked and skipped (one naming a contract is kept); serde skips nested ones.
        fields.set_unread(Cow::Borrowed(key), &raw(self.token()?));
        Some(())
    }
}

/// A value as `json::value` reads a raw one.
fn raw(t: Token<'_>) -> Value<'_> {
    match t {
        Token::Str(s) => Value::Text(Cow::Borrowed(s)),
        Token::Num(n) => Value::Number(n),
        Token::Bool(b) => Value::Bool(b),
        Token::Null => Value::Null,
    }
}

/// A value as the serde visitor's `Scalar` reads it; `None` for numbers other than
/// small non-negative integers (serde reads `-0`, fractions and huge ones as floats).
fn scalar(t: Token<'_>) -> Option<Value<'_>> {
    Some(match t {
        Token::Str(s) => Value::Text(Cow::Borrowed(s)),
        // Digits only, no leading zero (the grammar), so the text is what the integer prints as.
        Token::Num(n) if n.len() <= 18 && n.bytes().all(|c| c.is_ascii_digit()) => {
            Value::Text(Cow::Owned(n.to_owned()))
        }
        Token::Num(_) => return None,
        Token::Bool(b) => Value::Bool(b),
        Token::Null => Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{parse as both, parse_serde};
    use proptest::prelude::*;

    /// The word-at-a-time search finds what a byte loop finds: every byte value at every
    /// offset of runs around the word size, after plain bytes of every kind.
    #[test]
    fn plain_run_is_the_byte_search() {
        let by_bytes = |b: &[u8]| b.iter().position(|c| !super::PLAIN[usize::from(*c)]);
        for len in 0..=20 {
            for fill in [b'a', b' ', b'~', b'z', b'0', b'|', b'[', b']'] {
                let mut b = vec![fill; len];
                assert_eq!(super::plain_run(&b), by_bytes(&b));
                for at in 0..len {
                    for c in 0..=255u8 {
                        b[at] = c;
                        assert_eq!(super::plain_run(&b), by_bytes(&b), "{len} {at} {c}");
                        // A second stop byte after the first must not move the answer.
                        if at + 1 < len {
                            b[at + 1] = 0xff;
                            assert_eq!(super::plain_run(&b), by_bytes(&b), "{len} {at} {c} then 0xff");
                            b[at + 1] = 0;
                            assert_eq!(super::plain_run(&b), by_bytes(&b), "{len} {at} {c} then 0");
                            b[at + 1] = fill;
                        }
                    }
                    b[at] = fill;
                }
            }
        }
    }

    proptest! {
        #[test]
        fn plain_run_is_the_byte_search_on_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let want = b.iter().position(|c| !super::PLAIN[usize::from(*c)]);
            prop_assert_eq!(super::plain_run(&b), want);
        }
    }

    #[test]
    fn skipped_keys_are_no_bracket_keys() {
        // The scan asks for these before `is_bracket_key`, serde after: same answer only
        // because none of them is one.
        for k in ["legs", "LEGS", "strategy_info", "Strategy_Info", "metadata", "METADATA"] {
            assert!(!super::is_guarded_key(k), "{k}");
        }
    }

    #[test]
    fn usual_bodies_take_the_scan() {
        let mut f = super::Fields::default();
        let body = br#"{"ticker":"NASDAQ:AAPL","action":"buy","price":"190.25","qty":3,"time":17,"metadata":{"message_id":"m"}}"#;
        assert!(super::parse(body, &mut f).is_some());
        for outside in [
            &br#"{"ticker":"A\"B"}"#[..],
            br#"{"ticker":"AAPL","legs":[]}"#,
            br#"{"ticker":"AAPL","max_lag":-1}"#,
            br#"{"ticker":"AAPL","x":[1]}"#,
            br#"{"ticker":"AAPL","metadata":{"a":{}}}"#,
            "{\"ticker\":\"\u{e9}\"}".as_bytes(),
            br#"{"ticker":"AAPL",}"#,
            br#"[1]"#,
        ] {
            assert!(super::parse(outside, &mut super::Fields::default()).is_none(), "{outside:?}");
        }
    }

    #[test]
    fn corpus_bodies_answer_as_serde_does() {
        let files = [
            include_str!("../../../tests/corpus/json.jsonl"),
            include_str!("../../../tests/corpus/pickmytrade_tvhub.jsonl"),
            include_str!("../../../tests/corpus/pineconnector.jsonl"),
            include_str!("../../../tests/corpus/signal_bots.jsonl"),
            include_str!("../../../tests/corpus/text.jsonl"),
            include_str!("../../../tests/corpus/traderspost.jsonl"),
            include_str!("../../../tests/corpus/tradingview_variables.jsonl"),
        ];
        let mut scanned = 0;
        for line in files.iter().flat_map(|f| f.lines()).filter(|l| !l.trim().is_empty()) {
            let case: serde_json::Value = serde_json::from_str(line).unwrap();
            let body = case["body"].as_str().unwrap().as_bytes();
            assert_eq!(both(body), parse_serde(body), "{}", case["name"]);
            scanned += usize::from(super::parse(body, &mut super::Fields::default()).is_some());
        }
        assert!(scanned > 50, "the scan read {scanned} corpus bodies");
    }

    const KEYS: [&str; 34] = [
        "ticker",
        "symbol",
        "Ticker",
        "action",
        "direction",
        "price",
        "PRICE",
        "qty",
        "quantity",
        "notional",
        "order_type",
        "duration",
        "metadata",
        "message_id",
        "messageId",
        "time",
        "stop_loss",
        "tp1",
        "sl",
        "legs",
        "strategy_info",
        "marketPosition",
        "prevMarketPosition",
        "marketPositionSize",
        "data",
        "foo",
        " sl",
        "extendedHours",
        "session",
        "outsideRth",
        "orderTerm",
        "cancel",
        "order_id",
        "tv_instrument",
    ];
    const VALUES: [&str; 53] = [
        r#""AAPL""#,
        r#""NASDAQ:AAPL""#,
        r#""buy""#,
        r#""sell""#,
        r#""long""#,
        r#""flat""#,
        r#""OPEN""#,
        r#""MODIFY""#,
        r#""190.25""#,
        "190.25",
        "190.250",
        "-1",
        "-0",
        "0",
        "01",
        "1e5",
        "2E-3",
        "1.",
        "-",
        "12345678901234567890",
        "123456789012345678",
        "true",
        "false",
        "null",
        "nul",
        "{}",
        r#"{"message_id":"m1"}"#,
        r#"{"message_id":5}"#,
        r#"{"messageId":-1,"message_id":"x"}"#,
        r#"{"message_id":"m1","messageId":"m2"}"#,
        r#"{"message_id":"m1","Message-ID":"m1"}"#,
        r#"{"message_id":1.5}"#,
        r#"{"messageId":123456789012345678901234}"#,
        r#"{"message_id":1e3,"messageId":"x"}"#,
        "123456789012345678901234",
        r#"{"a":{}}"#,
        "[]",
        "[1]",
        r#""{{ticker}}""#,
        r#""a\"b""#,
        "\"\u{e9}\"",
        r#""""#,
        r#""limit""#,
        r#""gtc""#,
        r#""SEAMLESS""#,
        "\"\t\"",
        r#""0""#,
        r#""  7 ""#,
        r#""true""#,
        "\"\u{7f}\"",
        r#""1705312800000""#,
        "1e400",
        "-1e400",
    ];

    fn body() -> impl Strategy<Value = String> {
        shaped(KEYS.to_vec(), VALUES.to_vec(), vec!["", "", "", ",", " x", "}"])
    }

    /// Bodies wholly within the subset, so the scan must answer them itself.
    fn usual_body() -> impl Strategy<Value = String> {
        let keys = KEYS.iter().copied().filter(|k| !matches!(*k, "legs" | "strategy_info")).collect();
        let values = VALUES
            .iter()
            .copied()
            .filter(|v| {
                let b = v.as_bytes();
                let number = b[0] == b'-' || b[0].is_ascii_digit();
                // Objects only under `metadata`, which the unit test above and the other
                // properties cover; numbers in the subset depend on their key.
                !(number || v.contains(['[', '{', '\\', '\u{e9}', '\t', '\u{7f}', '-']) || *v == "nul")
            })
            .collect();
        shaped(keys, values, vec![""])
    }

    fn shaped(
        keys: Vec<&'static str>,
        values: Vec<&'static str>,
        junk: Vec<&'static str>,
    ) -> impl Strategy<Value = String> {
        let ws = prop::sample::select(vec!["", "", " ", "\n\t", "\r "]);
        let member = (prop::sample::select(keys), prop::sample::select(values), ws.clone());
        (prop::collection::vec(member, 0..9), ws.clone(), ws, prop::sample::select(junk)).prop_map(
            |(members, lead, trail, junk)| {
                let inner: Vec<String> = members.iter().map(|(k, v, w)| format!("{w}\"{k}\"{w}:{w}{v}{w}")).collect();
                format!("{lead}{{{}}}{trail}{junk}", inner.join(","))
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        #[test]
        fn the_scan_answers_as_serde_does(b in body()) {
            prop_assert_eq!(both(b.as_bytes()), parse_serde(b.as_bytes()), "{}", b);
        }

        #[test]
        fn usual_bodies_are_read_by_the_scan_as_by_serde(b in usual_body()) {
            let mut f = super::Fields::default();
            let scanned = super::parse(b.as_bytes(), &mut f);
            prop_assert!(scanned.is_some(), "{}", b);
            let scanned = match scanned.unwrap() {
                Ok(()) => f.build(),
                Err(e) => Err(e),
            };
            prop_assert_eq!(scanned, parse_serde(b.as_bytes()), "{}", b);
        }

        #[test]
        fn broken_bodies_answer_as_serde_does(b in body(), at in any::<prop::sample::Index>(), cut in any::<bool>(), byte in any::<u8>()) {
            let mut bytes = b.into_bytes();
            let i = at.index(bytes.len() + 1);
            if cut {
                bytes.truncate(i);
            } else {
                bytes.insert(i, byte);
            }
            prop_assert_eq!(both(&bytes), parse_serde(&bytes), "{:?}", String::from_utf8_lossy(&bytes));
        }
    }
}
