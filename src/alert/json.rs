//! JSON alerts: one pass of serde_json over the body, borrowing every value, then the
//! shared field assembly. Values are captured as raw JSON so numbers keep their digits.

use super::fields::{self, is_guarded_key, is_strategy_info, Fields, Name, Value, EMPTY_LIST};
use super::{Alerts, Leg, ParseError};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::fmt;

mod scan;

/// Parses a JSON body (an object) into alerts: the usual flat alert by the fast scan,
/// anything else by serde_json (the two give the same answer where both read a body).
pub fn parse(body: &[u8]) -> Result<Alerts, ParseError> {
    let mut fields = fields::Scratch::default();
    if let Some(collected) = scan::parse(body, &mut fields) {
        collected?;
        return fields.build_in_place();
    }
    parse_serde(body)
}

/// [`parse`] by serde_json alone.
fn parse_serde(body: &[u8]) -> Result<Alerts, ParseError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut fields = Fields::default();
    let collected = de.deserialize_map(AlertVisitor(&mut fields)).map_err(|e| json_error(e, body))?;
    de.end().map_err(|e| json_error(e, body))?;
    collected?;
    fields.build()
}

/// The sender's message id (`metadata.message_id`, or a top-level `message_id`) of a JSON
/// object whose alert did not parse: the dedup key is that id whenever the sender gave one
/// (spec, Deduplication rule 1), also for a body refused at parsing, so a resend under the
/// same id is a duplicate however its alert reads. `None` when the body is not a JSON object,
/// has no id, or has two that disagree.
pub fn message_id(body: &[u8]) -> Option<compact_str::CompactString> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut fields = Fields::default();
    de.deserialize_map(IdVisitor(&mut fields)).ok()?.ok()?;
    de.end().ok()?;
    fields.message_id()
}

/// Collects only the message id of the top-level object ([`message_id`]).
struct IdVisitor<'f, 'de>(&'f mut Fields<'de>);

impl<'de> Visitor<'de> for IdVisitor<'_, 'de> {
    type Value = Result<(), ParseError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut result = Ok(());
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            // Read as the alert's visitor reads them, so the id is the one a parsed alert would carry.
            let set = match Name::from_key(&key) {
                Some(Name::MessageId) => {
                    let raw: &'de RawValue = map.next_value()?;
                    self.0.set_named(Name::MessageId, key, value(raw))
                }
                None if key.eq_ignore_ascii_case("metadata") => map.next_value_seed(Metadata(&mut *self.0))?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    Ok(())
                }
            };
            result = result.and(set);
        }
        Ok(result)
    }
}

fn json_error(e: serde_json::Error, body: &[u8]) -> ParseError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Data => ParseError::NotAnObject,
        _ => {
            let typographic =
                std::str::from_utf8(body).is_ok_and(|s| s.contains(['\u{201C}', '\u{201D}', '\u{2018}', '\u{2019}']));
            if typographic {
                ParseError::InvalidJson(format!(
                    "{e}; it contains typographic quotes (“ ”), which JSON does not accept"
                ))
            } else {
                ParseError::InvalidJson(e.to_string())
            }
        }
    }
}

/// A map key, borrowed when the JSON has no escapes in it.
struct Key<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// Collects the top-level object. Semantic errors are carried out as the inner `Result`
/// so that serde's own errors stay purely about JSON syntax and shape.
struct AlertVisitor<'f, 'de>(&'f mut Fields<'de>);

impl<'de> Visitor<'de> for AlertVisitor<'_, 'de> {
    type Value = Result<(), ParseError>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let fields = self.0;
        let mut failure: Option<ParseError> = None;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if failure.is_some() {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            // The key decides how the value is read: numbers raw (exact digits), strings
            // borrowed, unknown keys skipped without building anything.
            let result = match Name::from_key(&key) {
                Some(name) if name.reads_raw() => {
                    let raw: &'de RawValue = map.next_value()?;
                    fields.set_named(name, key, value(raw))
                }
                Some(name) => {
                    let Scalar(v) = map.next_value()?;
                    fields.set_named(name, key, v)
                }
                // Read raw, so that a nested `{"stopPrice": …}` or `0.0` is judged too.
                None if is_guarded_key(&key) => {
                    let raw: &'de RawValue = map.next_value()?;
                    fields.set_guarded(key, &value(raw));
                    Ok(())
                }
                None if key.eq_ignore_ascii_case("legs") => {
                    let raw: &'de RawValue = map.next_value()?;
                    legs(raw).and_then(|l| fields.set_legs(l))
                }
                // 3Commas nests TradingView's positions: `strategy_info.market_position` and
                // the rest read as the same keys at the top level would.
                None if is_strategy_info(&key) => {
                    let raw: &'de RawValue = map.next_value()?;
                    strategy_info(fields, raw)
                }
                // 3Commas' `order` object (the scan hands a body with an object value to serde).
                None if fields::is_order_object(&key) => {
                    let raw: &'de RawValue = map.next_value()?;
                    order_object(fields, raw)
                }
                None if key.eq_ignore_ascii_case("metadata") => map.next_value_seed(Metadata(&mut *fields))?,
                // Read raw (checked as `IgnoredAny` checks it), so that a contract named under it is seen.
                None => {
                    let raw: &'de RawValue = map.next_value()?;
                    fields.set_unread(key, &value(raw));
                    Ok(())
                }
            };
            if let Err(e) = result {
                failure = Some(e);
            }
        }
        Ok(match failure {
            Some(e) => Err(e),
            None => Ok(()),
        })
    }
}

/// A field value read straight from the deserializer: strings borrowed when they have
/// no escapes, whole numbers as text, anything else named by its kind.
struct Scalar<'a>(Value<'a>);

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Text(Cow::Borrowed(v))))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Text(Cow::Owned(v.to_owned()))))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Text(Cow::Owned(v.to_string()))))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Text(Cow::Owned(v.to_string()))))
    }
    // Also an exponent, or a whole number past 2^64: serde reads them as floats. A field that takes numbers whatever
    // their shape is read raw ([`Name::reads_raw`]), so this names what the others refuse.
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Other("number with a fraction")))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Bool(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar(Value::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar(Value::Other("array")))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar(Value::Other("object")))
    }
}

/// `metadata`: only its message id matters, under each spelling of its key (`message_id`, `messageId`), each
/// recorded as a top-level one is, so two that differ are a conflict (as the text reader finds them) rather than the
/// first kept; anything else in it is skipped. A value that is no object is an id of the wrong kind.
struct Metadata<'f, 'de>(&'f mut Fields<'de>);

/// The key an id in `metadata` is recorded under, so that errors name it as the sender wrote it.
fn metadata_key(key: Cow<'_, str>) -> Cow<'static, str> {
    // The usual spelling is not allocated.
    if key == "message_id" {
        Cow::Borrowed("metadata.message_id")
    } else {
        Cow::Owned(format!("metadata.{key}"))
    }
}

impl<'de> de::DeserializeSeed<'de> for Metadata<'_, 'de> {
    type Value = Result<(), ParseError>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Metadata<'_, 'de> {
    fn not_an_object(self, kind: &'static str) -> Result<(), ParseError> {
        self.0.set_named(Name::MessageId, Cow::Borrowed("metadata.message_id"), Value::Other(kind))
    }
}

impl<'de> Visitor<'de> for Metadata<'_, 'de> {
    type Value = Result<(), ParseError>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object holding message_id")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Ok(()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut result = Ok(());
        while let Some(Key(k)) = map.next_key::<Key<'de>>()? {
            if result.is_ok() && Name::from_key(&k) == Some(Name::MessageId) {
                let raw: &'de RawValue = map.next_value()?;
                result = self.0.set_named(Name::MessageId, metadata_key(k), value(raw));
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(result)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.not_an_object("array"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(self.not_an_object("string"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("number"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("number"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(self.not_an_object("number"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(self.not_an_object("boolean"))
    }
}

/// Classifies a raw JSON value without allocating unless the string has escapes.
fn value(raw: &RawValue) -> Value<'_> {
    let s = raw.get();
    match s.as_bytes().first() {
        Some(b'"') => {
            let inner = &s[1..s.len() - 1];
            if inner.contains('\\') {
                match serde_json::from_str::<String>(s) {
                    Ok(owned) => Value::Text(Cow::Owned(owned)),
                    Err(_) => Value::Other("invalid string"),
                }
            } else {
                Value::Text(Cow::Borrowed(inner))
            }
        }
        Some(b'n') => Value::Null,
        Some(b'{') => Value::Other("object"),
        // Told apart: an empty list (TV-Hub's `"targets": []` in a template that fills every key) asks for nothing.
        Some(b'[') if s[1..].trim_start().starts_with(']') => Value::Other(EMPTY_LIST),
        Some(b'[') => Value::Other("array"),
        Some(b't') => Value::Bool(true),
        Some(b'f') => Value::Bool(false),
        Some(_) => Value::Number(s),
        None => Value::Null,
    }
}

/// An object's pairs in order, values raw.
struct MapPairs<'a>(Vec<(Key<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for MapPairs<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MapPairs<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(k) = map.next_key::<Key<'de>>()? {
                    out.push((k, map.next_value::<&'de RawValue>()?));
                }
                Ok(MapPairs(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Raw array elements.
struct Elements<'a>(Vec<&'a RawValue>);

impl<'de> Deserialize<'de> for Elements<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Elements<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<&'de RawValue>()? {
                    out.push(v);
                }
                Ok(Elements(out))
            }
        }
        d.deserialize_seq(V)
    }
}

/// 3Commas' `strategy_info`: its members read as the same keys at the top level would, `legs` included (skipped, a
/// spread named there was dropped silently where the text reader refused it).
fn strategy_info<'de>(fields: &mut Fields<'de>, raw: &'de RawValue) -> Result<(), ParseError> {
    if raw.get().starts_with('n') {
        return Ok(());
    }
    let Ok(MapPairs(pairs)) = serde_json::from_str::<MapPairs<'de>>(raw.get()) else {
        return Err(ParseError::InvalidField {
            field: "strategy_info".into(),
            value: super::snippet(raw.get()),
            expected: "an object holding market_position and prev_market_position",
        });
    };
    for (Key(k), v) in pairs {
        if k.eq_ignore_ascii_case("legs") {
            legs(v).and_then(|l| fields.set_legs(l))?;
        } else {
            fields.set(k, value(v))?;
        }
    }
    Ok(())
}

/// 3Commas' `order` object ([`Fields::set_order_object`]); a value that is no object is skipped, as any unknown
/// key's is.
fn order_object<'de>(fields: &mut Fields<'de>, raw: &'de RawValue) -> Result<(), ParseError> {
    if !raw.get().starts_with('{') {
        return Ok(());
    }
    let Ok(MapPairs(pairs)) = serde_json::from_str::<MapPairs<'de>>(raw.get()) else {
        return Err(ParseError::InvalidField {
            field: "order".into(),
            value: super::snippet(raw.get()),
            expected: "an object",
        });
    };
    fields.set_order_object(pairs.into_iter().map(|(Key(k), v)| (k, value(v))))
}

fn legs(raw: &RawValue) -> Result<Vec<Leg>, ParseError> {
    if raw.get().starts_with('n') {
        return Ok(Vec::new());
    }
    let Ok(Elements(items)) = serde_json::from_str::<Elements<'_>>(raw.get()) else {
        return Err(ParseError::InvalidField {
            field: "legs".into(),
            value: super::snippet(raw.get()),
            expected: "an array of leg objects",
        });
    };
    if items.len() > super::MAX_LEGS {
        return Err(ParseError::TooManyLegs(items.len()));
    }
    items.iter().enumerate().map(|(i, item)| leg(i, item)).collect()
}

fn leg(index: usize, raw: &RawValue) -> Result<Leg, ParseError> {
    let Ok(MapPairs(pairs)) = serde_json::from_str::<MapPairs<'_>>(raw.get()) else {
        return Err(ParseError::InvalidField {
            field: format!("legs[{index}]"),
            value: super::snippet(raw.get()),
            expected: "a leg object",
        });
    };
    fields::leg(index, pairs.into_iter().map(|(Key(k), v)| (k, value(v))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alert::{Action, ActionKind, ActionWord, Direction, OptionSide};

    #[test]
    fn smallest_payload() {
        let a = parse(br#"{"ticker":"AAPL","action":"buy"}"#).unwrap();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].instrument, "AAPL");
        assert_eq!(a[0].action, ActionKind::Word(ActionWord::Buy));
    }

    #[test]
    fn price_keeps_digits() {
        let a = parse(br#"{"ticker":"AAPL","action":"OPEN","direction":"long","price":190.1}"#).unwrap();
        assert_eq!(a[0].price.unwrap().to_string(), "190.1");
        let a = parse(br#"{"ticker":"AAPL","action":"OPEN","direction":"long","price":"190.10"}"#).unwrap();
        assert_eq!(a[0].price.unwrap().to_string(), "190.10");
        assert_eq!(a[0].direction, Some(Direction::Long));
    }

    #[test]
    fn non_objects_and_garbage() {
        assert_eq!(parse(b"[1,2]").unwrap_err(), ParseError::NotAnObject);
        assert_eq!(parse(b"\"AAPL\"").unwrap_err(), ParseError::NotAnObject);
        assert!(matches!(parse(b"{\"ticker\":").unwrap_err(), ParseError::InvalidJson(_)));
        assert!(matches!(parse(b"{} x").unwrap_err(), ParseError::InvalidJson(_)));
        assert_eq!(parse(b"{}").unwrap_err(), ParseError::MissingInstrument);
    }

    #[test]
    fn transition_reversal() {
        let a = parse(br#"{"ticker":"AAPL","action":"sell","marketPosition":"short","prevMarketPosition":"long"}"#)
            .unwrap();
        assert_eq!(a.len(), 2);
        assert_eq!((a[0].action, a[0].direction), (ActionKind::Canonical(Action::Close), Some(Direction::Long)));
        assert_eq!((a[1].action, a[1].direction), (ActionKind::Canonical(Action::Open), Some(Direction::Short)));
    }

    #[test]
    fn legs_and_metadata() {
        let a = parse(
            br#"{"ticker":"SPX","action":"OPEN","direction":"LONG","price":2.35,"metadata":{"message_id":"abc-1"},
                "legs":[{"side":"CALL","action":"buy_to_open","strike":4500,"expiration":"2024-01-19"},
                        {"side":"call","action":"sell_to_open","strike":"4510","price":1.1}]}"#,
        )
        .unwrap();
        assert_eq!(a[0].message_id.as_deref(), Some("abc-1"));
        assert_eq!(a[0].legs.len(), 2);
        assert_eq!(a[0].legs[0].strike.unwrap().to_string(), "4500");
        assert_eq!(a[0].legs[0].expiration.unwrap().to_string(), "2024-01-19");
        assert_eq!(a[0].legs[1].side, Some(OptionSide::Call));
    }

    #[test]
    fn occ_leg_symbols_are_read_and_checked() {
        let a =
            parse(br#"{"ticker":"SPX","action":"OPEN","legs":[{"symbol":"SPXW 240119P4500","action":"buy_to_open"}]}"#)
                .unwrap();
        let leg = &a[0].legs[0];
        assert_eq!(leg.symbol.as_deref(), Some("SPXW240119P04500000"));
        assert_eq!(leg.side, Some(OptionSide::Put));
        assert_eq!(leg.strike.map(|k| k.to_string()).as_deref(), Some("4500"));
        assert_eq!(leg.expiration.map(|e| e.to_string()).as_deref(), Some("2024-01-19"));

        let e = parse(
            br#"{"ticker":"SPY","action":"OPEN","legs":[{"side":"call","strike":450},
                {"symbol":"SPY240119C00450000","side":"call","strike":455}]}"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            ParseError::LegMismatch {
                index: 1,
                symbol: "SPY240119C00450000".into(),
                field: "strike",
                from_symbol: "450".into(),
                given: "455".into(),
            }
        );
        assert_eq!(e.to_string(), "leg 2 (`legs[1]`): symbol SPY240119C00450000 says strike 450 but strike is 455");
        // Equal values written differently agree.
        assert!(parse(
            br#"{"ticker":"SPY","action":"OPEN","legs":[{"symbol":"SPY240119C00450000","strike":"450.00"}]}"#
        )
        .is_ok());
    }

    #[test]
    fn five_legs_is_its_own_error() {
        let leg = r#"{"side":"call","action":"buy_to_open","strike":1}"#;
        let body = format!(r#"{{"ticker":"SPX","action":"OPEN","legs":[{leg},{leg},{leg},{leg},{leg}]}}"#);
        let e = parse(body.as_bytes()).unwrap_err();
        assert_eq!(e, ParseError::TooManyLegs(5));
        assert!(e.is_unprocessable());
    }

    #[test]
    fn placeholder_named() {
        let e = parse(br#"{"ticker":"{{ticker}}","action":"buy"}"#).unwrap_err();
        assert_eq!(e, ParseError::Placeholder { field: "ticker".into(), placeholder: "{{ticker}}".into() });
    }
}
