//! Exact decimal numbers for prices and quantities.
//!
//! Money never passes through `f64`: a price of `190.1` is read from the
//! sender's digits and written to the broker with the same digits. The type
//! is `rust_decimal::Decimal`, which keeps the scale it was written with
//! (`"190.50"` prints as `190.50`), so what a user typed is what a broker sees.

pub use rust_decimal::Decimal;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// Parses a decimal written as plain digits (`190.25`, `-2.35`, `+3`, `.5`) or in
/// scientific notation (`1.5e3`), exactly. Surrounding ASCII whitespace is allowed.
/// Returns `None` for anything else (`NaN`, `1,5`, empty, more than 28 digits).
pub fn parse(text: &str) -> Option<Decimal> {
    // A printable ASCII byte at both ends (the usual case) leaves nothing to trim.
    let graphic = |b: Option<&u8>| b.is_some_and(u8::is_ascii_graphic);
    let t = if graphic(text.as_bytes().first()) && graphic(text.as_bytes().last()) { text } else { text.trim() };
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.is_empty() || t.len() > 64 {
        return None;
    }
    let bytes = t.as_bytes();
    let digits_ok = bytes.iter().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E' | b'+'));
    if !digits_ok || !bytes.iter().any(u8::is_ascii_digit) {
        return None;
    }
    if bytes.iter().any(|b| matches!(b, b'e' | b'E')) {
        return Decimal::from_scientific(t).ok();
    }
    if t.starts_with('.') || t.starts_with("-.") {
        let fixed = t.replacen('.', "0.", 1);
        return Decimal::from_str_exact(&fixed).ok();
    }
    if t.ends_with('.') {
        return None;
    }
    Decimal::from_str_exact(t).ok()
}

/// Reads a decimal from a raw JSON value: a JSON number or a string holding one.
/// The JSON number's own digits are used, so no binary rounding can creep in.
pub fn from_raw_json(raw: &str) -> Option<Decimal> {
    let raw = raw.trim();
    if let Some(inner) = raw.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        if inner.contains('\\') {
            let owned: String = serde_json::from_str(raw).ok()?;
            return parse(&owned);
        }
        return parse(inner);
    }
    parse(raw)
}

/// Serde adapter for snapshot fields: a decimal given as a JSON number or string.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
    let raw = Box::<RawValue>::deserialize(d)?;
    from_raw_json(raw.get()).ok_or_else(|| {
        D::Error::custom(format!("expected a decimal number (as a number or a string), got {}", raw.get()))
    })
}

/// Serde adapter for optional snapshot decimals (`null` or absent means none).
pub fn deserialize_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
    let raw = Option::<Box<RawValue>>::deserialize(d)?;
    match raw {
        None => Ok(None),
        Some(r) if r.get() == "null" => Ok(None),
        Some(r) => from_raw_json(r.get()).map(Some).ok_or_else(|| {
            D::Error::custom(format!("expected a decimal number (as a number or a string), got {}", r.get()))
        }),
    }
}

/// Appends a decimal with the digits and scale `Display` gives it (`190.50`, `-0.001`,
/// `10`), assembled on the stack and appended in one piece, without the formatting
/// machinery, for the usual sizes and prices; zero and mantissas beyond 64 bits take
/// `Display` itself.
pub fn write(out: &mut String, d: Decimal) {
    let m = d.mantissa();
    let scale = d.scale() as usize;
    let Some(abs) = u64::try_from(m.unsigned_abs()).ok().filter(|a| *a != 0) else {
        use std::fmt::Write;
        let _ = write!(out, "{d}");
        return;
    };
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    let mut n = abs;
    while n > 0 {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let digits = &digits[i..];
    // Sign, up to 20 digits, a point and up to 28 leading zeros of the fraction.
    let mut buf = [0u8; 64];
    let mut len = 0;
    let mut put = |bytes: &[u8]| {
        buf[len..len + bytes.len()].copy_from_slice(bytes);
        len += bytes.len();
    };
    if m < 0 {
        put(b"-");
    }
    if scale == 0 {
        put(digits);
    } else if digits.len() > scale {
        let (int, frac) = digits.split_at(digits.len() - scale);
        put(int);
        put(b".");
        put(frac);
    } else {
        put(b"0.");
        (digits.len()..scale).for_each(|_| put(b"0"));
        put(digits);
    }
    // Digits, a sign and a point: ASCII.
    out.push_str(std::str::from_utf8(&buf[..len]).unwrap_or("0"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_gives_display_text() {
        let mut cases = vec![Decimal::ZERO, Decimal::new(-0, 2), Decimal::MAX, Decimal::MIN];
        for scale in 0..=28 {
            for m in [1i64, -1, 7, 10, 19_010, -19_010, 123_456_789, i64::MAX, i64::MIN + 1] {
                cases.push(Decimal::new(m, scale));
            }
        }
        for d in cases {
            let mut s = String::from("x");
            write(&mut s, d);
            assert_eq!(s, format!("x{d}"), "{d:?}");
        }
    }

    #[test]
    fn keeps_digits_and_scale() {
        assert_eq!(parse("190.1").unwrap().to_string(), "190.1");
        assert_eq!(parse("190.50").unwrap().to_string(), "190.50");
        assert_eq!(parse(" -2.35 ").unwrap().to_string(), "-2.35");
        assert_eq!(parse(".5").unwrap().to_string(), "0.5");
        assert_eq!(parse("1.5e3").unwrap(), Decimal::from(1500));
        assert_eq!(parse("+3").unwrap(), Decimal::from(3));
    }

    #[test]
    fn refuses_non_numbers() {
        for bad in ["", " ", "NaN", "inf", "1,5", "1.", "--1", "abc", "{{close}}", "1.2.3", "e5"] {
            assert!(parse(bad).is_none(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn raw_json_number_or_string() {
        assert_eq!(from_raw_json("190.1").unwrap().to_string(), "190.1");
        assert_eq!(from_raw_json("\"190.10\"").unwrap().to_string(), "190.10");
        assert_eq!(from_raw_json("\"\\u0031\"").unwrap(), Decimal::ONE);
        assert!(from_raw_json("true").is_none());
        assert!(from_raw_json("null").is_none());
    }
}

/// Serializes a decimal as a JSON number with its exact digits (`190.1`, never `190.09999`).
///
/// serde_json writes a [`RawValue`] verbatim, which is the only way to hand it digits
/// without a trip through `f64`. Other serializers receive the digits as a string.
#[derive(Debug, Clone, Copy)]
pub struct JsonNumber<'a>(pub &'a Decimal);

impl serde::Serialize for JsonNumber<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match RawValue::from_string(self.0.to_string()) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(&self.0.to_string()),
        }
    }
}
