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
    plain_digits(t.as_bytes()).or_else(|| parse_general(t))
}

/// Any decimal `parse` accepts, trimmed and without a leading `+`: signs, a leading
/// point and scientific notation included. The slow path, taken when `plain_digits`
/// declines.
fn parse_general(t: &str) -> Option<Decimal> {
    let bytes = t.as_bytes();
    let digits_ok = bytes.iter().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E' | b'+'));
    if !digits_ok || !bytes.iter().any(u8::is_ascii_digit) {
        return None;
    }
    if let Some(at) = t.find(['e', 'E']) {
        return scientific_exact(&t[..at], &t[at + 1..]);
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

/// `mantissa` × 10^`exponent`, exactly: written out in plain digits and read as those are, so that a number past
/// 28 digits is refused in this spelling too. `Decimal::from_scientific` rounds it to nearest: a MODIFY's quantity
/// of `2.99999999999999999999999999999e0` (29 nines, refused written plainly) re-sized the order to 3.
fn scientific_exact(mantissa: &str, exponent: &str) -> Option<Decimal> {
    let exponent: i64 = exponent.parse().ok()?;
    let (negative, m) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let (whole, fraction) = m.split_once('.').unwrap_or((m, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    // Past 64 places either way no digit can be kept: refused before any text is written.
    if whole.len() + fraction.len() == 0 || !all_digits(whole) || !all_digits(fraction) || exponent.unsigned_abs() > 64
    {
        return None;
    }
    let digits = [whole, fraction].concat();
    // Where the point falls among `digits`.
    let point = i64::try_from(whole.len()).ok()?.checked_add(exponent)?;
    let mut text = String::with_capacity(digits.len() + 70);
    if negative {
        text.push('-');
    }
    match usize::try_from(point) {
        Err(_) | Ok(0) => {
            text.push_str("0.");
            text.extend(
                std::iter::repeat('0').take(point.checked_neg().and_then(|n| usize::try_from(n).ok()).unwrap_or(0)),
            );
            text.push_str(&digits);
        }
        Ok(p) if p >= digits.len() => {
            text.push_str(&digits);
            text.extend(std::iter::repeat('0').take(p - digits.len()));
        }
        Ok(p) => {
            text.push_str(&digits[..p]);
            text.push('.');
            text.push_str(&digits[p..]);
        }
    }
    Decimal::from_str_exact(&text).ok()
}

/// The usual price or size, `190.25` or `10`: up to 18 digits with at most one point
/// between them, read in one pass into the mantissa and scale that
/// `Decimal::from_str_exact` gives such text (leading zeros included, no sign). `None`
/// for anything else, which takes the general path.
fn plain_digits(b: &[u8]) -> Option<Decimal> {
    if b.len() > 19 || b.first() == Some(&b'.') || b.last() == Some(&b'.') {
        return None;
    }
    let (mut mantissa, mut scale, mut point) = (0u64, 0u32, false);
    for &c in b {
        match c {
            b'0'..=b'9' => {
                mantissa = mantissa * 10 + u64::from(c - b'0');
                scale += u32::from(point);
            }
            b'.' if !point => point = true,
            _ => return None,
        }
    }
    // Up to 19 bytes with a point, or 18 without: at most 18 digits, below 2^63.
    if b.len() - usize::from(point) > 18 {
        return None;
    }
    Some(Decimal::from_i128_with_scale(i128::from(mantissa), scale))
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
/// `10`), written from its last digit back into a stack buffer and appended in one piece,
/// without the formatting machinery, for the usual sizes and prices; zero and mantissas
/// beyond 64 bits take `Display` itself.
pub fn write(out: &mut String, d: Decimal) {
    let m = d.mantissa();
    let scale = d.scale() as usize;
    let Some(mut n) = u64::try_from(m.unsigned_abs()).ok().filter(|a| *a != 0) else {
        use std::fmt::Write;
        let _ = write!(out, "{d}");
        return;
    };
    // A sign, up to 20 integer digits, a point and up to 28 fraction digits: 50 bytes.
    let mut buf = [0u8; 64];
    let mut i = buf.len();
    if scale > 0 {
        // The fraction's digits, its leading zeros included once the mantissa runs out.
        for _ in 0..scale {
            i -= 1;
            buf[i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        i -= 1;
        buf[i] = b'.';
    }
    // The integer part, two digits at a time, and at least one digit (`0.5`).
    while n >= 100 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[(n % 100) as usize]);
        n /= 100;
    }
    if n >= 10 {
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[n as usize]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    if m < 0 {
        i -= 1;
        buf[i] = b'-';
    }
    // Digits, a sign and a point: ASCII, appended as characters (cheaper for a few bytes
    // than checking them as UTF-8 first).
    out.extend(buf[i..].iter().map(|b| char::from(*b)));
}

/// `00` to `99`.
const DIGIT_PAIRS: [[u8; 2]; 100] = {
    let mut t = [[0u8; 2]; 100];
    let mut n = 0;
    while n < 100 {
        t[n] = [b'0' + (n / 10) as u8, b'0' + (n % 10) as u8];
        n += 1;
    }
    t
};

/// Whether `d` is a whole number: what `d.fract().is_zero()` says, without its subtraction
/// (the mantissa divides by 10 to the scale).
#[inline]
pub fn is_whole(d: Decimal) -> bool {
    let scale = d.scale();
    if scale == 0 {
        return true;
    }
    let m = d.mantissa().unsigned_abs();
    match (u64::try_from(m), 10u64.checked_pow(scale)) {
        (Ok(m), Some(p)) => m % p == 0,
        _ => 10u128.checked_pow(scale).is_some_and(|p| m % p == 0),
    }
}

/// `d.trunc()`, which is `d` itself at scale 0 (the usual size and quantity).
#[inline]
pub fn trunc(d: Decimal) -> Decimal {
    if d.scale() == 0 {
        d
    } else {
        d.trunc()
    }
}

/// `d.normalize()`, which is `d` itself for a non-zero whole number at scale 0 (the usual
/// size), answered without the call.
#[inline]
pub fn normalize(d: Decimal) -> Decimal {
    if d.scale() == 0 && !d.is_zero() {
        d
    } else {
        d.normalize()
    }
}

/// `d <= 0`, without a comparison of two decimals: zero of either sign, or negative.
#[inline]
pub fn not_positive(d: Decimal) -> bool {
    d.is_zero() || d.is_sign_negative()
}

/// The whole part of `amount / unit` for a positive `unit` and an `amount` that is not
/// negative, worked out exactly in integers, where it is certain to be what
/// `amount.checked_div(unit)` followed by `trunc()` gives (a whole number at scale 0);
/// `None` where it is not, for the caller to divide as before.
///
/// rust_decimal rounds a quotient to the precision its 96-bit mantissa leaves, which is at
/// least 13 decimal places below an integer part under 10^15; rounding can then carry
/// into the integer part only when the fraction is within 10^-13 of one. So the exact
/// integer quotient is taken when the division is exact, or when the integer part is under
/// 10^15 and the fraction is below 1 - 10^-12.
pub fn whole_quotient(amount: Decimal, unit: Decimal) -> Option<Decimal> {
    if amount.is_sign_negative() || not_positive(unit) {
        return None;
    }
    let (ma, mu) = (u64::try_from(amount.mantissa()).ok()?, u64::try_from(unit.mantissa()).ok()?);
    let (sa, su) = (amount.scale(), unit.scale());
    // amount / unit = (ma * 10^su) / (mu * 10^sa), with the common power taken out.
    let (n, d) = if su >= sa {
        (u128::from(ma).checked_mul(10u128.checked_pow(su - sa)?)?, u128::from(mu))
    } else {
        (u128::from(ma), u128::from(mu).checked_mul(10u128.checked_pow(sa - su)?)?)
    };
    // Both usually fit 64 bits, where the division is one instruction.
    let (q, r) = match (u64::try_from(n), u64::try_from(d)) {
        (Ok(n), Ok(d)) => (u128::from(n / d), u128::from(n % d)),
        _ => (n / d, n % d),
    };
    const TOP: u128 = 1_000_000_000_000_000;
    const MARGIN: u128 = 1_000_000_000_000;
    let certain = r == 0 || (q < TOP && (d - r).checked_mul(MARGIN).is_some_and(|gap| gap > d));
    if !certain {
        return None;
    }
    Some(Decimal::from(u64::try_from(q).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_and_trunc_and_sign_agree_with_rust_decimal() {
        let mut cases = vec![Decimal::ZERO, Decimal::new(-0, 3), Decimal::MAX, Decimal::MIN, Decimal::ONE];
        for scale in 0..=28 {
            for m in [1i64, -1, 7, 10, 100, 19_010, -19_000, 123_456_789, 5_000_000, i64::MAX, i64::MIN + 1] {
                cases.push(Decimal::new(m, scale));
            }
            cases.push(Decimal::from_i128_with_scale(10i128.pow(27) * 3, scale));
            cases.push(Decimal::from_i128_with_scale(10i128.pow(27) * 3 + 1, scale));
        }
        for d in cases {
            assert_eq!(is_whole(d), d.fract().is_zero(), "{d:?}");
            let (t, want) = (trunc(d), d.trunc());
            assert_eq!((t, t.scale(), t.is_sign_negative()), (want, want.scale(), want.is_sign_negative()), "{d:?}");
            assert_eq!(not_positive(d), d <= Decimal::ZERO, "{d:?}");
            let (n, want) = (normalize(d), d.normalize());
            assert_eq!((n, n.scale(), n.is_sign_negative()), (want, want.scale(), want.is_sign_negative()), "{d:?}");
        }
    }

    /// What sizing computes with rust_decimal: the division, truncated and normalized.
    fn divided(amount: Decimal, unit: Decimal) -> Option<Decimal> {
        amount.checked_div(unit).map(|q| q.trunc().normalize())
    }

    #[test]
    fn whole_quotients_are_what_the_division_truncates_to() {
        let p = |s: &str| parse(s).unwrap();
        for (amount, unit) in [
            ("5000", "190.25"),
            ("5000", "190.15"),
            ("1000", "0.0001"),
            ("100", "3"),
            ("99.99", "33.33"),
            ("10", "10"),
            ("0", "7"),
            ("1", "3"),
            ("1", "1000000"),
            ("2", "0.6666666666666666666666666667"),
            ("999999999999999", "1"),
            ("1000000000000000", "1"),
            ("18446744073709551615", "1"),
            ("18446744073709551615", "0.00000001"),
            ("0.000000000000000000000000001", "0.0000000000000000000000000003"),
        ] {
            let (a, u) = (p(amount), p(unit));
            if let Some(q) = whole_quotient(a, u) {
                let want = divided(a, u).unwrap();
                assert_eq!((q, q.scale()), (want, want.scale()), "{amount} / {unit}");
            }
        }
        // Quotients a hair under a whole number: k - 10^-e, for prices and sizes of several
        // scales; the fast path must agree where it answers, and answers down to e = 11.
        let mut answered = 0;
        for unit in ["190.25", "0.0001", "3", "123456.789", "0.3333333333"] {
            let u = p(unit);
            for k in [1u64, 26, 1000, 999_999_999_999] {
                for e in 1..=27u32 {
                    let Some(a) = u.checked_mul(Decimal::from(k) - Decimal::new(1, e)) else { continue };
                    let want = divided(a, u).unwrap();
                    if let Some(q) = whole_quotient(a, u) {
                        assert_eq!((q, q.scale()), (want, want.scale()), "{a} / {unit}");
                        answered += 1;
                    }
                }
            }
        }
        assert!(answered > 100, "{answered}");
        // Exact, small and safe: the fast path answers these.
        assert_eq!(whole_quotient(p("5000"), p("190.25")), Some(Decimal::from(26)));
        assert_eq!(whole_quotient(p("10"), p("10")), Some(Decimal::ONE));
        assert!(whole_quotient(p("-10"), p("1")).is_none());
        assert!(whole_quotient(p("10"), p("0")).is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        /// Amounts and prices of every size and scale, quotients near whole numbers included.
        #[test]
        fn whole_quotients_match_the_division(
            ma in 0u64..=u64::MAX, mu in 1u64..=u64::MAX, sa in 0u32..=28, su in 0u32..=28,
            shift_a in 0u32..64, shift_u in 0u32..64, near in proptest::prelude::any::<bool>(), k in 1u64..1_000_000,
        ) {
            let (ma, mu) = (ma >> shift_a, (mu >> shift_u).max(1));
            let (a, u) = (Decimal::from_i128_with_scale(i128::from(ma), sa), Decimal::from_i128_with_scale(i128::from(mu), su));
            // A quotient just under a whole number: amount = k * unit - one unit of the last place.
            let a = if near { u.checked_mul(Decimal::from(k)).and_then(|x| x.checked_sub(Decimal::new(1, 28))).unwrap_or(a) } else { a };
            if let Some(q) = whole_quotient(a, u) {
                let want = divided(a, u);
                proptest::prop_assert!(want.is_some(), "{} / {}", a, u);
                let want = want.unwrap();
                proptest::prop_assert_eq!((q, q.scale()), (want, want.scale()), "{} / {}", a, u);
            }
        }
    }

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

    /// The general path alone, as `parse` was before the plain-digits one: the reference
    /// the fast path must agree with.
    fn parsed_generally(text: &str) -> Option<Decimal> {
        let t = text.trim();
        let t = t.strip_prefix('+').unwrap_or(t);
        if t.is_empty() || t.len() > 64 {
            return None;
        }
        super::parse_general(t)
    }

    /// Value, scale and sign: what a broker body and the Outcome show of a decimal.
    fn shown(d: Option<Decimal>) -> Option<(Decimal, u32, bool, String)> {
        d.map(|d| (d, d.scale(), d.is_sign_negative(), d.to_string()))
    }

    #[test]
    fn plain_digits_read_as_the_general_path_does() {
        for t in [
            "0",
            "00",
            "0.0",
            "0.00",
            "007.50",
            "190.25",
            "190.250",
            "10",
            "1",
            ".5",
            "5.",
            "1.2.3",
            "",
            "+3",
            "-0",
            "-0.00",
            "-1.5",
            "999999999999999999",
            "9999999999999999999",
            "99999999999999999.9",
            "0.000000000000000001",
            "1844674407370955161.5",
            "12345678901234567890",
            " 7 ",
            "1e3",
            "1,5",
        ] {
            assert_eq!(shown(parse(t)), shown(parsed_generally(t)), "{t:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

        #[test]
        fn parse_reads_as_the_general_path_does(t in "[+-]?[0-9]{0,22}(\\.[0-9]{0,22})?|[0-9.+-]{0,24}") {
            proptest::prop_assert_eq!(shown(parse(&t)), shown(parsed_generally(&t)), "{:?}", t);
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

    /// Scientific notation reads as the same number written plainly: past 28 digits it is refused, never rounded
    /// (`Decimal::from_scientific` rounds to nearest, and a MODIFY's quantity just under 3 re-sized the order to 3).
    #[test]
    fn scientific_notation_is_exact_or_refused() {
        for t in ["2.99999999999999999999999999999e0", "1.00000000000000000000000000001e0", "0.1e-28"] {
            assert_eq!(parse(t), None, "{t:?} is rounded");
        }
        for (t, want) in [
            ("1.901e2", "190.1"),
            ("1.50e1", "15.0"),
            ("5e-3", "0.005"),
            ("-1.5E+2", "-150"),
            (".5e1", "5"),
            ("0.29999e1", "2.9999"),
            // 29 digits that fit (from_scientific rounded these to 3 as well).
            ("0.29999999999999999999999999999e1", "2.9999999999999999999999999999"),
            ("1e0", "1"),
            ("12e-1", "1.2"),
            // Zero whatever its exponent (from_scientific refuses one past 28).
            ("0e29", "0"),
        ] {
            assert_eq!(parse(t).map(|d| d.to_string()).as_deref(), Some(want), "{t:?}");
        }
        for bad in ["1e", "e1", "1e1e1", "1-2e3", "1e+-3", "-e3", ".e3", "1e99999999999999999999", "1e65", "1e-65"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5_000))]

        /// Where both read a number in scientific notation, they agree, scale included.
        #[test]
        fn scientific_notation_reads_as_from_scientific_where_that_keeps_every_digit(
            m in "-?[0-9]{1,16}(\\.[0-9]{1,16})?", e in -30i32..30
        ) {
            let t = format!("{m}e{e}");
            // Both read it: the same value and scale. (Zero with an exponent past 28, `0e29`, is read here as the
            // zero it is, where from_scientific refuses it.)
            if let (Some(ours), Ok(theirs)) = (parse(&t), Decimal::from_scientific(&t)) {
                proptest::prop_assert_eq!((ours, ours.scale()), (theirs, theirs.scale()), "{}", t);
            }
            // And ours is never a rounding: read back plainly it is the number written.
            if let Some(ours) = parse(&t) {
                proptest::prop_assert_eq!(parse(&ours.to_string()), Some(ours), "{}", t);
            }
        }
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
