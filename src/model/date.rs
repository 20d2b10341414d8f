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
    let secs = now_ms.div_euclid(1000);
    let utc_date = Date::from_days_since_epoch(secs.div_euclid(86_400));
    let year = utc_date.year;
    // DST starts 2:00 EST = 07:00 UTC; ends 2:00 EDT = 06:00 UTC.
    let start = nth_sunday(year, 3, 2).days_since_epoch() * 86_400 + 7 * 3600;
    let end = nth_sunday(year, 11, 1).days_since_epoch() * 86_400 + 6 * 3600;
    let offset = if secs >= start && secs < end { 4 * 3600 } else { 5 * 3600 };
    Date::from_days_since_epoch((secs - offset).div_euclid(86_400))
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
}
