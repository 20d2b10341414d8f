//! Broker bodies written straight as compact JSON text: keys in the broker's documented
//! order and numbers with their exact digits (serde_json's `Value` would route them through
//! `f64`). There is no tree: each `with` appends to the object's text, so a body costs one
//! buffer, and sending it is a borrow of that buffer.

use crate::decimal::{self, Decimal};
use serde::{Serialize, Serializer};
use std::fmt;

/// A JSON value (in practice an object or array), held as its compact text, exactly as
/// sent on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json(String);

/// A value that can be appended to a [`Json`] as JSON text.
pub trait ToJson {
    /// Appends this value's compact JSON text.
    fn write_json(&self, out: &mut String);
}

/// Room for a whole order body (100–400 bytes) in the first allocation.
const BODY_CAPACITY: usize = 512;

impl Json {
    /// An empty object.
    pub fn obj() -> Json {
        let mut s = String::with_capacity(BODY_CAPACITY);
        s.push_str("{}");
        Json(s)
    }

    /// Adds a key to an object (no-op on other values), for builder-style code.
    // Inlined so that a literal key is copied as a constant (a body has a dozen of them).
    #[inline(always)]
    pub fn with(mut self, key: &'static str, value: impl ToJson) -> Json {
        // The last byte is `}`, so cutting it leaves a character boundary.
        if self.0.as_bytes().last() == Some(&b'}') {
            self.0.truncate(self.0.len() - 1);
            if self.0.len() > 1 {
                self.0.push(',');
            }
            write_member(&mut self.0, key, &value);
            self.0.push('}');
        }
        self
    }

    /// Adds a key when the value is present.
    #[inline(always)]
    pub fn with_opt(self, key: &'static str, value: Option<impl ToJson>) -> Json {
        match value {
            Some(v) => self.with(key, v),
            None => self,
        }
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The compact JSON text, without a copy.
    pub fn into_string(self) -> String {
        self.0
    }

    /// Appends the compact JSON text, as sent on the wire.
    pub fn write_to(&self, out: &mut String) {
        out.push_str(&self.0);
    }
}

impl ToJson for Json {
    #[inline]
    fn write_json(&self, out: &mut String) {
        out.push_str(&self.0);
    }
}

impl ToJson for str {
    #[inline]
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for String {
    #[inline]
    fn write_json(&self, out: &mut String) {
        write_str(out, self);
    }
}

impl ToJson for Decimal {
    #[inline]
    fn write_json(&self, out: &mut String) {
        decimal::write(out, *self);
    }
}

impl ToJson for bool {
    #[inline]
    fn write_json(&self, out: &mut String) {
        out.push_str(if *self { "true" } else { "false" });
    }
}

impl ToJson for u32 {
    #[inline]
    fn write_json(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = write!(out, "{self}");
    }
}

impl<T: ToJson> ToJson for [T] {
    #[inline]
    fn write_json(&self, out: &mut String) {
        out.push('[');
        for (i, item) in self.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            item.write_json(out);
        }
        out.push(']');
    }
}

impl<T: ToJson, const N: usize> ToJson for [T; N] {
    #[inline]
    fn write_json(&self, out: &mut String) {
        self.as_slice().write_json(out);
    }
}

/// A body written front to back as it goes on the wire: fixed JSON text (punctuation,
/// keys with their quotes and colon, members whose values never change) in one piece
/// each, and values as [`ToJson`] writes them. For the bodies of every delivery, where
/// [`Json::with`]'s reopening of the object per member costs more than the member; the
/// caller writes text that closes what it opens, and the tests hold each body to the
/// same bytes as the builder writes.
pub(crate) struct Writer(String);

impl Writer {
    /// An empty body, with room for a whole order.
    pub(crate) fn new() -> Writer {
        Writer(String::with_capacity(BODY_CAPACITY))
    }

    /// Fixed JSON text.
    #[inline(always)]
    pub(crate) fn raw(&mut self, json: &'static str) -> &mut Writer {
        self.0.push_str(json);
        self
    }

    /// A value.
    #[inline(always)]
    pub(crate) fn value(&mut self, value: impl ToJson) -> &mut Writer {
        value.write_json(&mut self.0);
        self
    }

    /// The body written.
    pub(crate) fn done(self) -> Json {
        Json(self.0)
    }
}

/// A decimal as a JSON string with its exact digits (`"190.50"`), for brokers that take
/// prices as strings; written without an intermediate `String`.
#[derive(Debug, Clone, Copy)]
pub struct Quoted(pub Decimal);

impl ToJson for Quoted {
    #[inline]
    fn write_json(&self, out: &mut String) {
        // Digits, a sign and a point never need escaping.
        out.push('"');
        decimal::write(out, self.0);
        out.push('"');
    }
}

impl<T: ToJson> ToJson for Vec<T> {
    #[inline]
    fn write_json(&self, out: &mut String) {
        self.as_slice().write_json(out);
    }
}

impl<T: ToJson + ?Sized> ToJson for &T {
    #[inline]
    fn write_json(&self, out: &mut String) {
        (**self).write_json(out);
    }
}

/// A value on its own: a JSON string, number, boolean or array.
fn standalone(value: &(impl ToJson + ?Sized)) -> Json {
    let mut s = String::new();
    value.write_json(&mut s);
    Json(s)
}

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        standalone(s)
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        standalone(&s)
    }
}

impl From<Decimal> for Json {
    fn from(d: Decimal) -> Json {
        standalone(&d)
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        standalone(&b)
    }
}

impl From<u32> for Json {
    fn from(n: u32) -> Json {
        standalone(&n)
    }
}

impl From<Vec<Json>> for Json {
    fn from(v: Vec<Json>) -> Json {
        standalone(&v)
    }
}

impl Serialize for Json {
    /// Embedded verbatim (a serde_json `RawValue`), so the exact digits survive.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::value::RawValue::from_string(self.0.clone()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(&self.0),
        }
    }
}

/// `"key":value`.
#[inline(always)]
fn write_member(out: &mut String, key: &str, value: &(impl ToJson + ?Sized)) {
    // Keys are the brokers' field names, which never need escaping: `"key":` then goes in
    // as pieces of constant length once inlined. Any other key is escaped as a value is.
    if plain(key.as_bytes()) {
        out.push('"');
        out.push_str(key);
        out.push_str("\":");
    } else {
        write_str(out, key);
        out.push(':');
    }
    value.write_json(out);
}

/// Bytes a JSON string must escape: controls, `"` and `\`.
const ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        t[b] = true;
        b += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Eight copies of a byte, for testing eight bytes at once.
const fn splat(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Whether any byte of `x` must be escaped (below 0x20, `"` or `\`): the classic
/// "has a byte less than n" and "has a zero byte" word tests, exact as a yes or no.
#[inline(always)]
fn word_needs_escape(x: u64) -> bool {
    let high = splat(0x80);
    let control = x.wrapping_sub(splat(0x20)) & !x;
    let quote = x ^ splat(b'"');
    let quote = quote.wrapping_sub(splat(1)) & !quote;
    let backslash = x ^ splat(b'\\');
    let backslash = backslash.wrapping_sub(splat(1)) & !backslash;
    (control | quote | backslash) & high != 0
}

/// Whether `s` holds nothing a JSON string must escape. Eight bytes at a time: broker
/// strings are short, and this runs for each of a body's dozens of keys and values.
#[inline(always)]
fn plain(s: &[u8]) -> bool {
    let word = |c: &[u8]| c.try_into().map(u64::from_ne_bytes).is_ok_and(|w| !word_needs_escape(w));
    if s.len() < 8 {
        return !s.iter().any(|b| ESCAPE[usize::from(*b)]);
    }
    let mut chunks = s.chunks_exact(8);
    // The last eight bytes cover the remainder (overlapping the last whole chunk).
    chunks.all(word) && word(&s[s.len() - 8..])
}

/// A JSON string literal with the escapes RFC 8259 requires.
#[inline(always)]
fn write_str(out: &mut String, s: &str) {
    // Broker strings (symbols, enum words, ids) almost never need escaping.
    if plain(s.as_bytes()) {
        out.push('"');
        out.push_str(s);
        out.push('"');
        return;
    }
    write_escaped(out, s);
}

/// [`write_str`] for a string that needs escaping.
#[cold]
fn write_escaped(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if escape.is_empty() {
            use std::fmt::Write;
            let _ = write!(out, "\\u{b:04x}");
        } else {
            out.push_str(escape);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

impl fmt::Display for Json {
    /// Compact JSON, as sent on the wire.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_agrees_with_serde() {
        let s = "q\"uo\\te\n\u{1}é\t\r";
        let j = Json::obj()
            .with("s", s)
            .with("a", vec![Json::from(true), Json::from(Decimal::new(-235, 2)), Json::from(7u32)])
            .with("e", Json::obj())
            .with("b", false);
        let v: serde_json::Value = serde_json::from_str(j.as_str()).unwrap();
        assert_eq!(v["s"], s);
        assert_eq!(j.as_str(), r#"{"s":"q\"uo\\te\n\u0001é\t\r","a":[true,-2.35,7],"e":{},"b":false}"#);
        assert_eq!(serde_json::to_string(&j).unwrap(), j.as_str(), "serialized verbatim");
    }

    #[test]
    fn exact_numbers_in_order() {
        let j = Json::obj()
            .with("symbol", "AAPL")
            .with("qty", Decimal::from(10))
            .with("limit_price", crate::decimal::parse("190.10").unwrap())
            .with("tiny", crate::decimal::parse("0.00000001").unwrap());
        assert_eq!(j.to_string(), r#"{"symbol":"AAPL","qty":10,"limit_price":190.10,"tiny":0.00000001}"#);
    }

    #[test]
    fn quoted_decimals_and_fixed_arrays_write_as_strings_and_arrays() {
        let p = crate::decimal::parse("-190.50").unwrap();
        let j = Json::obj().with("price", Quoted(p)).with("legs", [Json::obj().with("q", 1u32)]);
        assert_eq!(j.as_str(), r#"{"price":"-190.50","legs":[{"q":1}]}"#);
        assert_eq!(Json::obj().with("price", Quoted(p)), Json::obj().with("price", crate::broker::common::digits(p)));
    }

    #[test]
    fn decimal_edges_write_as_display_does() {
        for d in [
            Decimal::ZERO,
            Decimal::from_parts(0, 0, 0, true, 3),
            Decimal::from_parts(1, 0, 0, false, 28),
            Decimal::from_parts(1, 0, 0, true, 28),
            Decimal::MAX,
            Decimal::MIN,
            Decimal::new(-235, 2),
            Decimal::new(5, 1),
            Decimal::new(u64::MAX as i64, 0),
            Decimal::from_i128_with_scale(u64::MAX as i128, 5),
            Decimal::from_i128_with_scale(u64::MAX as i128 + 1, 5),
        ] {
            let mut out = String::new();
            d.write_json(&mut out);
            assert_eq!(out, d.to_string());
        }
    }

    proptest::proptest! {
        #[test]
        fn decimals_write_as_display_does(m in proptest::prelude::any::<i128>(), shift in 0u32..128, scale in 0u32..=28) {
            // Mantissas of every width up to rust_decimal's 96 bits.
            let m = m >> shift.max(32);
            if let Ok(d) = Decimal::try_from_i128_with_scale(m, scale) {
                let mut out = String::new();
                d.write_json(&mut out);
                proptest::prop_assert_eq!(&out, &d.to_string());
                let mut quoted = String::new();
                Quoted(d).write_json(&mut quoted);
                proptest::prop_assert_eq!(quoted, format!("\"{d}\""));
            }
        }

        #[test]
        fn strings_read_back_as_written(s in "\\PC*|[\\x00-\\x7f]{0,40}") {
            let mut out = String::new();
            s.as_str().write_json(&mut out);
            proptest::prop_assert_eq!(serde_json::from_str::<String>(&out).unwrap(), s);
        }
    }

    /// The word-at-a-time test finds every byte that needs escaping, wherever it stands,
    /// and no other.
    #[test]
    fn plain_agrees_with_the_byte_table() {
        for len in 0..=20 {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut s = vec![b'a'; len];
                    s[at] = b;
                    assert_eq!(plain(&s), !ESCAPE[usize::from(b)], "byte {b:#x} at {at} of {len}");
                }
            }
        }
        // Bytes just around the limits, side by side (borrows between bytes must not matter).
        for (a, b) in [(0x1f, 0x20), (0x20, 0x1f), (0x21, 0x22), (0x5b, 0x5c), (0x80, 0x1f), (0xff, 0x00), (0x00, 0xff)]
        {
            let s = [b'x', b'x', b'x', a, b, b'x', b'x', b'x', b'x'];
            assert_eq!(plain(&s), !(ESCAPE[usize::from(a)] || ESCAPE[usize::from(b)]), "{a:#x} {b:#x}");
        }
    }

    #[test]
    fn with_on_a_non_object_changes_nothing() {
        let j = Json::from(vec![Json::obj()]).with("k", "v");
        assert_eq!(j.as_str(), "[{}]");
        assert_eq!(Json::from("a\"b").with("k", 1u32).as_str(), r#""a\"b""#);
    }
}
