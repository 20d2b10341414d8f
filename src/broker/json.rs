//! A small JSON tree for broker bodies: keys in the broker's documented order and
//! numbers that keep their exact digits (serde_json's `Value` would route them through `f64`).

use crate::decimal::{Decimal, JsonNumber};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use std::borrow::Cow;
use std::fmt;

/// A JSON value with exact decimal numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// null
    Null,
    /// true / false
    Bool(bool),
    /// A number, written with its exact digits.
    Num(Decimal),
    /// A string: borrowed for the broker's constant words, owned for order data.
    Str(Cow<'static, str>),
    /// An array.
    Arr(Vec<Json>),
    /// An object, keys in insertion order.
    Obj(Vec<(&'static str, Json)>),
}

impl Json {
    /// An empty object.
    pub fn obj() -> Json {
        Json::Obj(Vec::new())
    }

    /// Adds a key to an object (no-op on other values), for builder-style code.
    pub fn with(mut self, key: &'static str, value: impl Into<Json>) -> Json {
        if let Json::Obj(v) = &mut self {
            v.push((key, value.into()));
        }
        self
    }

    /// Adds a key when the value is present.
    pub fn with_opt(self, key: &'static str, value: Option<impl Into<Json>>) -> Json {
        match value {
            Some(v) => self.with(key, v),
            None => self,
        }
    }

    /// Looks a key up in an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(v) => v.iter().find(|(k, _)| *k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

impl From<&'static str> for Json {
    /// Constant words cost no allocation.
    fn from(s: &'static str) -> Json {
        Json::Str(Cow::Borrowed(s))
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(Cow::Owned(s))
    }
}

impl From<&String> for Json {
    fn from(s: &String) -> Json {
        Json::Str(Cow::Owned(s.clone()))
    }
}

impl From<Decimal> for Json {
    fn from(d: Decimal) -> Json {
        Json::Num(d)
    }
}

impl From<bool> for Json {
    fn from(b: bool) -> Json {
        Json::Bool(b)
    }
}

impl From<u32> for Json {
    fn from(n: u32) -> Json {
        Json::Num(Decimal::from(n))
    }
}

impl From<Vec<Json>> for Json {
    fn from(v: Vec<Json>) -> Json {
        Json::Arr(v)
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_none(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Num(d) => JsonNumber(d).serialize(s),
            Json::Str(t) => s.serialize_str(t),
            Json::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for i in items {
                    seq.serialize_element(i)?;
                }
                seq.end()
            }
            Json::Obj(pairs) => {
                let mut map = s.serialize_map(Some(pairs.len()))?;
                for (k, v) in pairs {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl Json {
    /// Appends the compact JSON text, as sent on the wire. Written by hand because this
    /// is the hot end of every delivery: no serde round trip, numbers straight from
    /// their digits.
    pub fn write_to(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(true) => out.push_str("true"),
            Json::Bool(false) => out.push_str("false"),
            Json::Num(d) => {
                use std::fmt::Write;
                let _ = write!(out, "{d}");
            }
            Json::Str(t) => write_str(out, t),
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_to(out);
                }
                out.push(']');
            }
            Json::Obj(pairs) => {
                out.push('{');
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write_str(out, k);
                    out.push(':');
                    v.write_to(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string literal with the escapes RFC 8259 requires.
fn write_str(out: &mut String, s: &str) {
    out.push('"');
    // Broker strings (symbols, enum words, ids) almost never need escaping.
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
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
        let mut s = String::new();
        self.write_to(&mut s);
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_writer_agrees_with_serde() {
        let j = Json::obj()
            .with("s", "q\"uo\\te\n\u{1}é")
            .with("a", Json::Arr(vec![Json::Null, Json::Bool(true), Json::Num(Decimal::new(-235, 2))]))
            .with("e", Json::obj());
        let hand = j.to_string();
        assert_eq!(hand, serde_json::to_string(&j).unwrap());
        let v: serde_json::Value = serde_json::from_str(&hand).unwrap();
        assert_eq!(v["s"], "q\"uo\\te\n\u{1}é");
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
}
