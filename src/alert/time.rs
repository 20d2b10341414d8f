//! The alert's own time (`time`, `timenow`, `timestamp`, `alertTimestamp`, PickMyTrade's
//! `date`), read so that a stale alert can be refused ([`crate::Strategy::max_alert_age`],
//! and a sender's `max_lag`). ISO 8601 (`2024-01-15T14:30:00Z`, with fractions or an
//! offset, without seconds, or with a ` UTC` zone), RFC 2822 (`Mon, 15 Jan 2024 14:30:00
//! GMT`, JavaScript's `toUTCString`) and Unix seconds, milliseconds, microseconds or
//! nanoseconds are read; anything else is no time at all.

use crate::model::Date;

/// The longest text read as a time, in bytes: ISO 8601 with nanoseconds and an offset is 35.
pub(crate) const MAX_LEN: usize = 64;

/// Whether a time [`parse_ms`] reads names its second: a Unix number, or a clock time with seconds (`14:30:05`).
/// A time to the minute cannot tell two alerts of one minute apart: made a dedup key, a scale-in 40 s after an entry
/// was answered as its duplicate.
pub fn to_the_second(s: &str) -> bool {
    let s = s.trim();
    let unix = !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit() || c == b'.');
    unix || s.as_bytes().windows(8).any(|w| {
        let d = |i: usize| w[i].is_ascii_digit();
        d(0) && d(1) && w[2] == b':' && d(3) && d(4) && w[5] == b':' && d(6) && d(7)
    })
}

/// Unix milliseconds of a time as senders write it, or `None` when it is not one.
pub fn parse_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    // No time is longer (`Mon, 15 Jan 2024 14:30:00 +0100` is 31 bytes): a longer text is none, without a look.
    // TV-Hub's `alertTimestamp` is tried at every `-` in it, which over 256 KiB of dashes took seconds.
    if s.len() > MAX_LEN {
        return None;
    }
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
        // Ten digits are seconds until 2286; thirteen are milliseconds, sixteen microseconds (Python's
        // `time.time_ns() // 1000`, Go's `UnixMicro`) and nineteen nanoseconds (`time.time_ns()`, `UnixNano`).
        return match whole.len() {
            9..=11 => {
                // Milliseconds from the fraction's first three digits; the rest is below what a lag is counted in.
                let first3 = &frac[..frac.len().min(3)];
                let ms = first3.parse::<i64>().unwrap_or(0) * 10i64.pow(3 - first3.len() as u32);
                n.checked_mul(1000)?.checked_add(ms)
            }
            12..=14 => Some(n),
            15..=17 => Some(n / 1000),
            18..=19 => Some(n / 1_000_000),
            _ => None,
        };
    }
    iso(s).or_else(|| rfc2822(s))
}

fn iso(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 16 || !matches!(b[10], b'T' | b't' | b' ') || b[13] != b':' {
        return None;
    }
    let date = Date::parse_iso(&s[..10])?;
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |acc, c| c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0')))
    };
    let (h, m) = (num(11..13)?, num(14..16)?);
    // Seconds may be left out (`2024-01-15T14:30Z`): ISO 8601 allows it, and some senders' templates do it.
    let (sec, mut rest) = match b.get(16) {
        Some(b':') if b.len() >= 19 => (num(17..19)?, &s[19..]),
        Some(b':') => return None,
        _ => (0, &s[16..]),
    };
    if h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let mut ms = 0i64;
    if let Some(frac) = rest.strip_prefix('.').filter(|_| b.get(16) == Some(&b':')) {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let first3 = &frac[..digits.min(3)];
        ms = first3.parse::<i64>().ok()? * 10i64.pow(3 - first3.len() as u32);
        rest = &frac[digits..];
    }
    // A zone after a space (`2024-01-15 14:30:00 UTC`, as Python's and SQL's UTC times print).
    let zone = rest.strip_prefix(' ').filter(|z| !z.is_empty()).unwrap_or(rest);
    let offset_min =
        if zone.eq_ignore_ascii_case("utc") || zone.eq_ignore_ascii_case("gmt") { 0 } else { offset(zone)? };
    let secs = date.days_since_epoch() * 86_400 + h * 3600 + m * 60 + sec - offset_min * 60;
    // No alert was sent before the Unix epoch; a time there is a typo, and the rendered alert could
    // not carry it (a time renders as Unix milliseconds, which read back only when not negative).
    (secs >= 0).then_some(secs * 1000 + ms)
}

/// Minutes east of UTC of an ISO 8601 zone: none, `Z`, `+01:00`, `+0100` or `+01`.
fn offset(zone: &str) -> Option<i64> {
    match zone.as_bytes() {
        [] | [b'Z' | b'z'] => Some(0),
        [sign @ (b'+' | b'-'), rest @ ..] => {
            // Read as bytes: the offset is sender text, and a slice of it by position could cut a character.
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from((a - b'0') * 10 + (b - b'0')))
            };
            let (oh, om) = match *rest {
                [h1, h2, b':', m1, m2] | [h1, h2, m1, m2] => (two(h1, h2)?, two(m1, m2)?),
                [h1, h2] => (two(h1, h2)?, 0),
                _ => return None,
            };
            let o = oh * 60 + om;
            Some(if *sign == b'+' { o } else { -o })
        }
        _ => None,
    }
}

/// An RFC 2822 time (`Mon, 15 Jan 2024 14:30:00 GMT`, `15 Jan 2024 14:30 +0100`): e-mail's and HTTP's form,
/// and JavaScript's `Date.toUTCString()`. The zone is `GMT`, `UT`, `UTC`, `Z` or a numeric offset; the
/// obsolete names (`EST`) are no time, since which offset they meant cannot be told.
fn rfc2822(s: &str) -> Option<i64> {
    const DAYS: [&str; 7] = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    let s = match s.split_once(',') {
        Some((day, rest)) if DAYS.iter().any(|d| day.trim().eq_ignore_ascii_case(d)) => rest,
        Some(_) => return None,
        None => s,
    };
    let mut parts = s.split_ascii_whitespace();
    let (day, month, year, time, zone) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let number = |t: &str, len: std::ops::RangeInclusive<usize>| -> Option<u16> {
        (len.contains(&t.len()) && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok()).flatten()
    };
    let month = MONTHS.iter().position(|m| month.eq_ignore_ascii_case(m))? as u8 + 1;
    let date = Date::new(number(year, 4..=4)?, month, number(day, 1..=2)? as u8)?;
    let mut hms = time.split(':');
    let (h, m) = (number(hms.next()?, 2..=2)?, number(hms.next()?, 2..=2)?);
    let sec = hms.next().map_or(Some(0), |t| number(t, 2..=2))?;
    if hms.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    let offset_min = if ["gmt", "ut", "utc", "z"].iter().any(|z| zone.eq_ignore_ascii_case(z)) {
        0
    } else if zone.len() == 5 {
        // Four digits only: RFC 2822's `+hhmm`.
        offset(zone)?
    } else {
        return None;
    };
    let secs =
        date.days_since_epoch() * 86_400 + i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(sec) - offset_min * 60;
    (secs >= 0).then_some(secs * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_names_its_second_as_a_unix_number_or_a_clock_with_seconds() {
        for t in [
            "1705329000",
            "1705329000123",
            "1705329000.5",
            "2024-01-15T14:30:05Z",
            "Mon, 15 Jan 2024 14:30:05 GMT",
            "AAPL-2024-01-15T14:30:05+01:00",
        ] {
            assert!(to_the_second(t), "{t}");
        }
        for t in ["2024-01-15T14:30Z", "2024-01-15 14:30 UTC", "2024-01-15", "", "14:30"] {
            assert!(!to_the_second(t), "{t}");
        }
    }

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

    /// Forms senders write that read as no time, so that `max_alert_age` was silently off for them.
    #[test]
    fn a_text_longer_than_any_time_is_none() {
        assert_eq!(parse_ms(&format!("2024-01-15T14:30:00.{}Z", "0".repeat(40))), Some(1_705_329_000_000));
        assert_eq!(parse_ms(&format!("2024-01-15T14:30:00.{}Z", "0".repeat(60))), None);
    }

    #[test]
    fn microseconds_and_nanoseconds() {
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("1705329000123456"), Some(t + 123));
        assert_eq!(parse_ms("1705329000123456789"), Some(t + 123));
        assert_eq!(parse_ms("1705329000123456.5"), Some(t + 123));
        // Twenty digits are beyond any time (and an i64).
        assert_eq!(parse_ms("17053290001234567890"), None);
    }

    #[test]
    fn rfc_2822_and_javascripts_utc_string() {
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("Mon, 15 Jan 2024 14:30:00 GMT"), Some(t));
        assert_eq!(parse_ms("mon, 15 jan 2024 14:30:00 utc"), Some(t));
        assert_eq!(parse_ms("15 Jan 2024 14:30:00 +0000"), Some(t));
        assert_eq!(parse_ms("Mon, 15 Jan 2024 09:30:00 -0500"), Some(t));
        assert_eq!(parse_ms("Mon, 15 Jan 2024 14:30 Z"), Some(t));
        assert_eq!(parse_ms("Mon, 5 Feb 2024 14:30:00 GMT"), Some(t + 21 * 86_400_000));
        for bad in [
            // Which offset an obsolete zone name meant cannot be told.
            "Mon, 15 Jan 2024 09:30:00 EST",
            "Mon, 15 Jan 2024 14:30:00",
            "Mon, 15 Jan 2024 14:30:00 GMT extra",
            "Funday, 15 Jan 2024 14:30:00 GMT",
            "Mon, 30 Feb 2024 14:30:00 GMT",
            "Mon, 15 Jab 2024 14:30:00 GMT",
            "Mon, 15 Jan 24 14:30:00 GMT",
            "Mon, 15 Jan 2024 24:30:00 GMT",
            "Mon, 15 Jan 2024 14:30:00:00 GMT",
            "Mon, 15 Jan 2024 14:30:00 +01:00",
            "Mon, 15 Jan 2024 14:30:00 +é1",
            "Thu, 01 Jan 1970 00:00:00 +0100",
        ] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn iso_without_seconds() {
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("2024-01-15T14:30Z"), Some(t));
        assert_eq!(parse_ms("2024-01-15T15:30+01:00"), Some(t));
        assert_eq!(parse_ms("2024-01-15 14:30"), Some(t));
        for bad in ["2024-01-15T14:30.5Z", "2024-01-15T14:3Z", "2024-01-15T14:30:0Z", "2024-01-15T14:60Z"] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_utc_zone_after_a_space() {
        let t = 1_705_329_000_000;
        assert_eq!(parse_ms("2024-01-15 14:30:00 UTC"), Some(t));
        assert_eq!(parse_ms("2024-01-15 14:30:00.250 utc"), Some(t + 250));
        assert_eq!(parse_ms("2024-01-15T14:30:00 GMT"), Some(t));
        assert_eq!(parse_ms("2024-01-15 14:30 UTC"), Some(t));
        assert_eq!(parse_ms("2024-01-15 09:30:00 -05:00"), Some(t));
        for bad in ["2024-01-15 14:30:00 EST", "2024-01-15 14:30:00  UTC", "2024-01-15 14:30:00 UTC+1"] {
            assert_eq!(parse_ms(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_text_after_a_time_is_read_without_panicking(rest in "\\PC{0,6}") {
            let _ = parse_ms(&format!("2024-01-15T15:30:00{rest}"));
            let _ = parse_ms(&format!("2024-01-15T15:30:00+{rest}"));
            let _ = parse_ms(&format!("2024-01-15T15:30:00.5{rest}"));
            let _ = parse_ms(&format!("2024-01-15T15:30{rest}"));
            let _ = parse_ms(&format!("Mon, 15 Jan 2024 14:30:00 {rest}"));
            let _ = parse_ms(&format!("15 Jan 2024 {rest}"));
        }
    }
}
