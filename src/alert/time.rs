//! The alert's own time (`time`, `timenow`, `timestamp`, `alertTimestamp`, PickMyTrade's
//! `date`), read so that a stale alert can be refused ([`crate::Strategy::max_alert_age`],
//! and a sender's `max_lag`). ISO 8601 (`2024-01-15T14:30:00Z`, with fractions or an
//! offset) and Unix seconds or milliseconds are read; anything else is no time at all.

use crate::model::Date;

/// Unix milliseconds of a time as senders write it, or `None` when it is not one.
pub fn parse_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    // Unix time with a fraction (Python's `time.time()`, a JSON float): `1705329000.123`.
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    if digits(whole) && (frac.is_empty() && !s.ends_with('.') || digits(frac)) {
        // Seconds or milliseconds are told apart by the count of digits, which leading zeros make meaningless:
        // `0000157367958` read as 13 digits of milliseconds (a day after the epoch) rendered back as 9 digits,
        // which read as seconds (found by the parse_json fuzz target). No sender writes a Unix time so.
        if whole.len() > 1 && whole.starts_with('0') {
            return None;
        }
        let n: i64 = whole.parse().ok()?;
        // Ten digits are seconds until 2286; thirteen are milliseconds.
        return match whole.len() {
            9..=11 => {
                // Milliseconds from the fraction's first three digits; the rest is below what a lag is counted in.
                let first3 = &frac[..frac.len().min(3)];
                let ms = first3.parse::<i64>().unwrap_or(0) * 10i64.pow(3 - first3.len() as u32);
                n.checked_mul(1000)?.checked_add(ms)
            }
            12..=14 => Some(n),
            _ => None,
        };
    }
    iso(s)
}

fn iso(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 19 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let date = Date::parse_iso(&s[..10])?;
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
    };
    let (h, m, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3 = &frac[..digits.min(3)];
        ms = first3.parse::<i64>().ok()? * 10i64.pow(3 - first3.len() as u32);
        rest = &frac[digits..];
    }
    let offset_min = match rest.as_bytes() {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), ..] => {
            // Read as bytes: the offset is sender text, and a slice of it by position could cut a character.
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from((a - b'0') * 10 + (b - b'0')))
            };
            let (oh, om) = match rest.as_bytes()[1..] {
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two(h1, h2)?, two(m1, m2)?),
                [h1, h2] => (two(h1, h2)?, 0),
                _ => return None,
            };
            let o = oh * 60 + om;
            if *sign == b'+' {
                o
            } else {
                -o
            }
        }
        _ => return None,
    };
    let secs = date.days_since_epoch() * 86_400 + h * 3600 + m * 60 + sec - offset_min * 60;
    // No alert was sent before the Unix epoch; a time there is a typo, and the rendered alert could
    // not carry it (a time renders as Unix milliseconds, which read back only when not negative).
    (secs >= 0).then_some(secs * 1000 + ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_and_unix_times() {
        // 2024-01-15T14:30:00Z
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("2024-01-15T14:30:00Z"), Some(t));
        assert_eq!(parse_ms("2024-01-15T14:30:00.250Z"), Some(t + 250));
        assert_eq!(parse_ms("2024-01-15T15:30:00+01:00"), Some(t));
        // Before the epoch is no alert's time (found by the parse_json fuzz target: it did not render back).
        assert_eq!(parse_ms("1012-01-15T14:30:00.000Z"), None);
        assert_eq!(parse_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_ms("1970-01-01T00:30:00+01:00"), None);
        assert_eq!(parse_ms("2024-01-15 09:30:00-0500"), Some(t));
        assert_eq!(parse_ms("1705329000"), Some(t));
        assert_eq!(parse_ms("1705329000000"), Some(t));
        // With a fraction (Python's time.time(), a JSON float): milliseconds kept.
        assert_eq!(parse_ms("1705329000.5"), Some(t + 500));
        assert_eq!(parse_ms("1705329000.123456"), Some(t + 123));
        assert_eq!(parse_ms("1705329000000.7"), Some(t));
        for bad in ["0000157367958", "01705329000", "0001705329000000", "00"] {
            assert_eq!(parse_ms(bad), None, "{bad}: leading zeros make the digit count meaningless");
        }
        for bad in ["1705329000.", ".5", "1705329000.5.1", "17053290.5", "1705329000.5e3", "1705329000.-5"] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
        for bad in ["", "{{timenow}}", "2024-01-15", "yesterday", "12", "2024-13-15T14:30:00Z", "2024-01-15T14:30:00Q"]
        {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn offsets_are_two_digit_hours_and_minutes_and_any_other_text_is_no_time() {
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("2024-01-15T15:30:00+01"), Some(t));
        assert_eq!(parse_ms("2024-01-15T15:30:00+0100"), Some(t));
        // A multi-byte character where a digit belongs was sliced through and panicked (the `time` of any alert).
        for bad in ["+1é1", "+é11", "+11é", "+1é:11", "+11:é", "+-1:00", "+-100", "+1", "+001:00", "+01:0", "+ 1"]
        {
            let s = format!("2024-01-15T15:30:00{bad}");
            assert_eq!(parse_ms(&s), None, "{s}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_after_a_time_is_read_without_panicking(rest in "\\PC{0,6}") {
            let _ = parse_ms(&format!("2024-01-15T15:30:00{rest}"));
            let _ = parse_ms(&format!("2024-01-15T15:30:00+{rest}"));
            let _ = parse_ms(&format!("2024-01-15T15:30:00.5{rest}"));
        }
    }
}
