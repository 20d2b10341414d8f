//! A small JSON tree for broker bodies: keys in the broker's documented order and
//! numbers that keep their exact digits (serde_json's `Value` would route them through `f64`).

use crate::decimal::{Decimal, JsonNumber};
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
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
    /// A string.
    Str(String),
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

impl From<&str> for Json {
    fn from(s: &str) -> Json {
        Json::Str(s.to_string())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Json {
        Json::Str(s)
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

impl fmt::Display for Json {
    /// Compact JSON, as sent on the wire.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_string(self).map_err(|_| fmt::Error)?;
        f.write_str(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
