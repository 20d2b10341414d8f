//! Calendar dates, as in option expirations, and today's date in New York.

use std::fmt;

/// A calendar date (proleptic Gregorian), as in option expirations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date {
    /// Four-digit year.
    pub year: u16,
    /// 1..=12
    pub month: u8,
    /// 1..=31
    pub day: u8,
}

impl Date {
    /// Builds a date, checking the day exists.
    pub fn new(year: u16, month: u8, day: u8) -> Option<Date> {
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return None;
        }
        Some(Date { year, month, day })
    }

    /// Reads `YYYY-MM-DD`.
    pub fn parse_iso(s: &str) -> Option<Date> {
        let b = s.trim().as_bytes();
        if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<u32> {
            b[r].iter().try_fold(0u32, |acc, c| c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0')))
        };
        Date::new(num(0..4)? as u16, num(5..7)? as u8, num(8..10)? as u8)
    }

    /// Days since 1970-01-01 (negative before).
    pub fn days_since_epoch(self) -> i64 {
        // Howard Hinnant's days_from_civil.
        let y = i64::from(self.year) - i64::from(self.month <= 2);
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let m = i64::from(self.month);
        let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(self.day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        era * 146_097 + doe - 719_468
    }

    /// The date `days` days after 1970-01-01.
    pub fn from_days_since_epoch(days: i64) -> Date {
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u8;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u8;
        let y = if m <= 2 { y + 1 } else { y };
        Date { year: y.clamp(0, 9999) as u16, month: m, day: d }
    }

    /// Day of week, 0 = Monday … 6 = Sunday.
    pub fn weekday(self) -> u8 {
        // 1970-01-01 was a Thursday (3).
        ((self.days_since_epoch() + 3).rem_euclid(7)) as u8
    }
}

impl Date {
    /// The date `n` days later (earlier for negative `n`).
    pub fn plus_days(self, n: i64) -> Date {
        Date::from_days_since_epoch(self.days_since_epoch() + n)
    }

    /// Saturday or Sunday.
    pub fn is_weekend(self) -> bool {
        self.weekday() >= 5
    }

    /// The US stock market holiday on this date, if any: the days NYSE and Cboe close for
    /// a whole day (New Year's Day, Martin Luther King Jr. Day, Washington's Birthday, Good
    /// Friday, Memorial Day, Juneteenth from 2022, Independence Day, Labor Day,
    /// Thanksgiving, Christmas). A holiday on a Saturday is observed the Friday before and
    /// on a Sunday the Monday after, except New Year's Day on a Saturday, which is not
    /// observed at all (NYSE stays open on December 31). Options listed for a holiday
    /// expire the business day before, so no contract expires on one.
    pub fn market_holiday(self) -> Option<&'static str> {
        let y = self.year;
        let fixed = |month: u8, day: u8| {
            let d = Date { year: y, month, day };
            match d.weekday() {
                5 => d.plus_days(-1),
                6 => d.plus_days(1),
                _ => d,
            }
        };
        let new_year = Date { year: y, month: 1, day: 1 };
        let new_year_observed = match new_year.weekday() {
            6 => Some(new_year.plus_days(1)),
            5 => None,
            _ => Some(new_year),
        };
        let days: [(Option<Date>, &'static str); 10] = [
            (new_year_observed, "New Year's Day"),
            (Some(nth_weekday(y, 1, 0, 3)), "Martin Luther King Jr. Day"),
            (Some(nth_weekday(y, 2, 0, 3)), "Washington's Birthday"),
            (Some(easter(y).plus_days(-2)), "Good Friday"),
            (Some(nth_weekday(y, 6, 0, 1).plus_days(-7)), "Memorial Day"),
            ((y >= 2022).then(|| fixed(6, 19)), "Juneteenth"),
            (Some(fixed(7, 4)), "Independence Day"),
            (Some(nth_weekday(y, 9, 0, 1)), "Labor Day"),
            (Some(nth_weekday(y, 11, 3, 4)), "Thanksgiving Day"),
            (Some(fixed(12, 25)), "Christmas Day"),
        ];
        days.into_iter().find(|(d, _)| *d == Some(self)).map(|(_, name)| name)
    }

    /// Whether NYSE and Cboe close early on this date, at 13:00 in New York (equity options then stop trading
    /// at 13:00, not 16:00): the day after Thanksgiving, and July 3 and December 24 when they fall on a Monday to
    /// Thursday. On a Friday the one is Independence Day observed and the other Christmas observed, both whole
    /// holidays; on a weekend there is no session to shorten.
    pub fn early_close(self) -> bool {
        let day_after_thanksgiving = nth_weekday(self.year, 11, 3, 4).plus_days(1);
        self == day_after_thanksgiving || (matches!((self.month, self.day), (7, 3) | (12, 24)) && self.weekday() <= 3)
    }

    /// The regular session's close on this date, in seconds after midnight in New York: 16:00, or 13:00 on a
    /// day that closes early ([`Date::early_close`]).
    pub fn close_secs(self) -> i64 {
        self.close().0
    }

    /// The regular session's close on this date as a New York wall clock reads it ("16:00", "13:00"), for
    /// messages.
    pub fn close_time(self) -> &'static str {
        self.close().1
    }

    fn close(self) -> (i64, &'static str) {
        if self.early_close() {
            (13 * 3600, "13:00")
        } else {
            (16 * 3600, "16:00")
        }
    }
}

/// The `n`-th `weekday` (0 = Monday) of a month.
fn nth_weekday(year: u16, month: u8, weekday: u8, n: u8) -> Date {
    let first = Date { year, month, day: 1 };
    let to = (weekday + 7 - first.weekday()) % 7;
    Date { year, month, day: 1 + to + 7 * (n - 1) }
}

/// Easter Sunday (Gregorian; the anonymous algorithm of 1876).
fn easter(year: u16) -> Date {
    let y = i32::from(year);
    let a = y % 19;
    let b = y / 100;
    let c = y % 100;
    let d = b / 4;
    let e = b % 4;
    let f = (b + 8) / 25;
    let g = (b - f + 1) / 3;
    let h = (19 * a + b - d - g + 15) % 30;
    let i = c / 4;
    let k = c % 4;
    let l = (32 + 2 * e + 2 * i - h - k) % 7;
    let m = (a + 11 * h + 22 * l) / 451;
    let month = (h + l - 7 * m + 114) / 31;
    let day = (h + l - 7 * m + 114) % 31 + 1;
    Date { year, month: month as u8, day: day as u8 }
}

fn days_in_month(year: u16, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

impl fmt::Display for Date {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-{:02}-{:02}", self.year, self.month, self.day)
    }
}

/// Today's date in US Eastern time (New York), daylight saving included: EDT (UTC−4)
/// from the second Sunday of March at 2:00 local to the first Sunday of November at
/// 2:00 local, EST (UTC−5) otherwise — the rule in force since 2007.
pub fn eastern_date(now_ms: i64) -> Date {
    Date::from_days_since_epoch(eastern_secs(now_ms).div_euclid(86_400))
}

/// The first expiration an option order can still trade on at `now_ms`: today in New York until the regular
/// session's close (16:00, or 13:00 on a day that closes early), tomorrow after it. Options expiring today stop
/// trading at that close (SPXW's and equity options' alike), so an order for them after it cannot fill.
pub fn first_tradable_expiration(now_ms: i64) -> Date {
    let local = eastern_secs(now_ms);
    let today = Date::from_days_since_epoch(local.div_euclid(86_400));
    if local.rem_euclid(86_400) >= today.close_secs() {
        today.plus_days(1)
    } else {
        today
    }
}

/// Today in New York and the seconds since its midnight as a New York wall clock reads them.
pub(crate) fn eastern_day_and_secs(now_ms: i64) -> (Date, i64) {
    let local = eastern_secs(now_ms);
    (Date::from_days_since_epoch(local.div_euclid(86_400)), local.rem_euclid(86_400))
}

/// Seconds since the epoch as a New York wall clock reads them (the UTC offset of the moment applied).
fn eastern_secs(now_ms: i64) -> i64 {
    let secs = now_ms.div_euclid(1000);
    let utc_date = Date::from_days_since_epoch(secs.div_euclid(86_400));
    let year = utc_date.year;
    // DST starts 2:00 EST = 07:00 UTC; ends 2:00 EDT = 06:00 UTC.
    let start = nth_sunday(year, 3, 2).days_since_epoch() * 86_400 + 7 * 3600;
    let end = nth_sunday(year, 11, 1).days_since_epoch() * 86_400 + 6 * 3600;
    let offset = if secs >= start && secs < end { 4 * 3600 } else { 5 * 3600 };
    secs - offset
}

/// Reads an ISO 8601 timestamp as brokers write them into Unix milliseconds:
/// `2026-03-03T14:31:05.118204Z`, `2026-03-03T14:31:05+0000`, `2026-03-03T14:40:02.330+00:00`
/// (a space for the `T` too). Digits past the millisecond are dropped; no zone means UTC.
pub fn timestamp_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    let date = Date::parse_iso(s.get(..10)?)?;
    let rest = s.get(10..)?;
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let b = rest.as_bytes();
    let two = |i: usize| -> Option<i64> {
        let (h, l) = (*b.get(i)?, *b.get(i + 1)?);
        (h.is_ascii_digit() && l.is_ascii_digit()).then(|| i64::from(h - b'0') * 10 + i64::from(l - b'0'))
    };
    if b.get(2) != Some(&b':') || b.get(5) != Some(&b':') {
        return None;
    }
    let (hour, minute, second) = (two(0)?, two(3)?, two(6)?);
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 8;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            if i - start < 3 {
                millis = millis * 10 + i64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_minutes = match b.get(i) {
        None => 0,
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let hours = two(i + 1)?;
            let minutes = match (b.get(i + 3), b.len()) {
                (Some(b':'), n) if n == i + 6 => two(i + 4)?,
                (Some(_), n) if n == i + 5 => two(i + 3)?,
                (None, _) => 0,
                _ => return None,
            };
            let total = hours * 60 + minutes;
            if sign == b'+' {
                total
            } else {
                -total
            }
        }
        _ => return None,
    };
    let seconds = date.days_since_epoch() * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

fn nth_sunday(year: u16, month: u8, n: u8) -> Date {
    let first = Date { year, month, day: 1 };
    let to_sunday = (6 + 7 - first.weekday()) % 7;
    Date { year, month, day: 1 + to_sunday + 7 * (n - 1) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_weekdays() {
        let d = Date::parse_iso("2024-01-19").unwrap();
        assert_eq!(d.weekday(), 4, "2024-01-19 was a Friday");
        assert_eq!(Date::from_days_since_epoch(d.days_since_epoch()), d);
        assert_eq!(Date::from_days_since_epoch(0).to_string(), "1970-01-01");
        assert!(Date::parse_iso("2023-02-29").is_none());
        assert!(Date::parse_iso("2024-02-29").is_some());
        assert!(Date::parse_iso("2024-1-19").is_none());
        for n in -1000..40_000 {
            let d = Date::from_days_since_epoch(n);
            assert_eq!(d.days_since_epoch(), n);
        }
    }

    #[test]
    fn market_holidays() {
        let d = |s| Date::parse_iso(s).unwrap();
        let closed_2024 = [
            "2024-01-01",
            "2024-01-15",
            "2024-02-19",
            "2024-03-29",
            "2024-05-27",
            "2024-06-19",
            "2024-07-04",
            "2024-09-02",
            "2024-11-28",
            "2024-12-25",
        ];
        let mut day = d("2024-01-01");
        let mut found = Vec::new();
        while day.year == 2024 {
            if day.market_holiday().is_some() {
                found.push(day.to_string());
            }
            day = day.plus_days(1);
        }
        assert_eq!(found, closed_2024);
        // Observed days: Juneteenth and Christmas 2022 fell on Sundays, July 4 2026 on a Saturday.
        assert_eq!(d("2022-06-20").market_holiday(), Some("Juneteenth"));
        assert_eq!(d("2022-12-26").market_holiday(), Some("Christmas Day"));
        assert_eq!(d("2026-07-03").market_holiday(), Some("Independence Day"));
        assert_eq!(d("2023-01-02").market_holiday(), Some("New Year's Day"));
        // New Year's Day 2022 was a Saturday: December 31 2021 was a trading day.
        assert_eq!(d("2021-12-31").market_holiday(), None);
        assert_eq!(d("2021-06-18").market_holiday(), None, "no Juneteenth before 2022");
        assert_eq!(d("2025-04-18").market_holiday(), Some("Good Friday"));
        assert!(d("2024-01-20").is_weekend() && d("2024-01-21").is_weekend() && !d("2024-01-19").is_weekend());
    }

    #[test]
    fn early_closes_are_the_day_after_thanksgiving_and_july_3_and_december_24_on_weekdays_before_the_holiday() {
        let d = |s| Date::parse_iso(s).unwrap();
        // NYSE's published early closes: 2024, 2025 and 2026 (July 3 2026 is Independence Day observed).
        let early = |year: u16| {
            let mut day = Date::new(year, 1, 1).unwrap();
            let mut found = Vec::new();
            while day.year == year {
                if day.early_close() {
                    assert!(!day.is_weekend() && day.market_holiday().is_none(), "{day} closes early but is closed");
                    found.push(day.to_string());
                }
                day = day.plus_days(1);
            }
            found
        };
        assert_eq!(early(2024), ["2024-07-03", "2024-11-29", "2024-12-24"]);
        assert_eq!(early(2025), ["2025-07-03", "2025-11-28", "2025-12-24"]);
        assert_eq!(early(2026), ["2026-11-27", "2026-12-24"]);
        // Christmas 2021 on a Saturday: December 24 was the observed holiday, not a half day.
        assert_eq!(early(2021), ["2021-11-26"]);
        assert_eq!(d("2026-11-27").close_secs(), 13 * 3600);
        assert_eq!(d("2026-11-30").close_secs(), 16 * 3600);
    }

    #[test]
    fn todays_options_stop_at_one_on_a_half_day() {
        // 2026-11-27, the day after Thanksgiving, is EST (UTC-5): 12:59 is 17:59 UTC, 13:00 is 18:00 UTC.
        let ms = |h: i64, m: i64| {
            (Date::parse_iso("2026-11-27").unwrap().days_since_epoch() * 86_400 + h * 3600 + m * 60) * 1000
        };
        assert_eq!(first_tradable_expiration(ms(17, 59)).to_string(), "2026-11-27");
        assert_eq!(first_tradable_expiration(ms(18, 0)).to_string(), "2026-11-28");
        // A full day the Monday after: 15:59 EST still trades today's.
        let monday = |h: i64| (Date::parse_iso("2026-11-30").unwrap().days_since_epoch() * 86_400 + h * 3600) * 1000;
        assert_eq!(first_tradable_expiration(monday(20) + 59 * 60_000).to_string(), "2026-11-30");
        assert_eq!(first_tradable_expiration(monday(21)).to_string(), "2026-12-01");
    }

    #[test]
    fn eastern_dates_across_dst() {
        let ms = |iso: &str, h: i64, m: i64| {
            (Date::parse_iso(iso).unwrap().days_since_epoch() * 86_400 + h * 3600 + m * 60) * 1000
        };
        // Winter: 04:59 UTC on Jan 20 is 23:59 EST on Jan 19.
        assert_eq!(eastern_date(ms("2024-01-20", 4, 59)).to_string(), "2024-01-19");
        assert_eq!(eastern_date(ms("2024-01-20", 5, 0)).to_string(), "2024-01-20");
        // Summer: 03:59 UTC on Jul 5 is 23:59 EDT on Jul 4.
        assert_eq!(eastern_date(ms("2024-07-05", 3, 59)).to_string(), "2024-07-04");
        assert_eq!(eastern_date(ms("2024-07-05", 4, 0)).to_string(), "2024-07-05");
        // 2024 DST began Mar 10 at 07:00 UTC and ended Nov 3 at 06:00 UTC.
        assert_eq!(nth_sunday(2024, 3, 2).to_string(), "2024-03-10");
        assert_eq!(nth_sunday(2024, 11, 1).to_string(), "2024-11-03");
        assert_eq!(eastern_date(ms("2024-03-10", 4, 30)).to_string(), "2024-03-09", "still EST at 04:30 UTC");
        assert_eq!(eastern_date(ms("2024-03-11", 3, 30)).to_string(), "2024-03-10", "EDT: 23:30 on the 10th");
        assert_eq!(eastern_date(ms("2024-11-04", 4, 30)).to_string(), "2024-11-03", "EST again: 23:30 on the 3rd");
    }

    #[test]
    fn broker_timestamps() {
        let base = Date::new(2026, 3, 3).unwrap().days_since_epoch() * 86_400_000 + (14 * 3600 + 31 * 60 + 5) * 1000;
        assert_eq!(timestamp_ms("2026-03-03T14:31:05.118204Z"), Some(base + 118));
        assert_eq!(timestamp_ms("2026-03-03T14:31:05+0000"), Some(base));
        assert_eq!(timestamp_ms("2026-03-03T14:31:05.2+00:00"), Some(base + 200));
        assert_eq!(timestamp_ms("2026-03-03T09:31:05-05:00"), Some(base));
        assert_eq!(timestamp_ms("2026-03-03T15:31:05+01"), Some(base));
        assert_eq!(timestamp_ms("2026-03-03 14:31:05"), Some(base));
        for bad in [
            "",
            "2026-03-03",
            "2026-03-03T14:31",
            "2026-03-03T25:00:00Z",
            "2026-03-03T14:31:05.Z",
            "2026-03-03T14:31:05Zjunk",
            "1772548265402",
        ] {
            assert_eq!(timestamp_ms(bad), None, "{bad}");
        }
    }
}
