//! Option contracts: OCC/OSI symbols, the SPX → SPXW root, and today's date in US Eastern time.

use crate::alert::{Date, OptionSide};
use crate::decimal::Decimal;

/// A listed option contract.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OptionContract {
    /// OSI root (`SPXW`, `AAPL`).
    pub root: String,
    /// Expiration date.
    pub expiration: Date,
    /// Call or put.
    pub side: OptionSide,
    /// Strike price.
    pub strike: Decimal,
}

impl OptionContract {
    /// The 21-character OSI symbol with the root padded to six (`SPXW  240119C04500000`),
    /// as Schwab and Tastytrade take it.
    pub fn occ_padded(&self) -> String {
        format!("{:<6}{}", self.root, self.occ_tail())
    }

    /// The OSI symbol without padding (`SPXW240119C04500000`), as Alpaca and Tradier take it.
    pub fn occ_unpadded(&self) -> String {
        format!("{}{}", self.root, self.occ_tail())
    }

    fn occ_tail(&self) -> String {
        let cp = match self.side {
            OptionSide::Call => 'C',
            OptionSide::Put => 'P',
        };
        let milli = (self.strike * Decimal::from(1000)).trunc();
        format!(
            "{:02}{:02}{:02}{}{:0>8}",
            self.expiration.year % 100,
            self.expiration.month,
            self.expiration.day,
            cp,
            milli.to_string()
        )
    }

    /// Reads an OSI symbol, padded or not (`SPXW  240119C04500000`, `AAPL240119C00190500`).
    pub fn parse_occ(s: &str) -> Option<OptionContract> {
        let s = s.trim();
        if s.len() < 16 || !s.is_ascii() {
            return None;
        }
        let (head, tail) = s.split_at(s.len() - 15);
        let root = head.trim_end();
        if root.is_empty() || root.len() > 6 || !root.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let t = tail.as_bytes();
        let digits = |r: std::ops::Range<usize>| -> Option<u32> {
            t[r].iter().try_fold(0u32, |a, c| c.is_ascii_digit().then(|| a * 10 + u32::from(c - b'0')))
        };
        let expiration = Date::new(2000 + digits(0..2)? as u16, digits(2..4)? as u8, digits(4..6)? as u8)?;
        let side = match t[6] {
            b'C' | b'c' => OptionSide::Call,
            b'P' | b'p' => OptionSide::Put,
            _ => return None,
        };
        let strike = Decimal::new(i64::from(digits(7..15)?), 3).normalize();
        Some(OptionContract { root: root.to_ascii_uppercase(), expiration, side, strike })
    }
}

/// The OSI root for an underlying: `SPX` trades as the PM-settled `SPXW`.
pub fn root_for(underlying: &str) -> String {
    if underlying.eq_ignore_ascii_case("SPX") {
        "SPXW".to_string()
    } else {
        underlying.to_ascii_uppercase()
    }
}

/// The underlying for a root or OSI symbol: `SPXW` → `SPX`; quotes and Tradier's
/// `symbol` use the underlying.
pub fn underlying_of(symbol: &str) -> &str {
    let s = symbol.trim();
    let root = OptionContract::parse_occ(s).map(|_| s[..s.len() - 15].trim_end()).unwrap_or(s);
    if root.eq_ignore_ascii_case("SPXW") {
        "SPX"
    } else {
        root
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

    fn c(root: &str, exp: &str, side: OptionSide, strike: &str) -> OptionContract {
        OptionContract {
            root: root.into(),
            expiration: Date::parse_iso(exp).unwrap(),
            side,
            strike: crate::decimal::parse(strike).unwrap(),
        }
    }

    #[test]
    fn occ_symbols() {
        let k = c("SPXW", "2024-01-19", OptionSide::Call, "4500");
        assert_eq!(k.occ_padded(), "SPXW  240119C04500000");
        assert_eq!(k.occ_unpadded(), "SPXW240119C04500000");
        assert_eq!(c("SPX", "2024-01-19", OptionSide::Put, "4500").occ_padded(), "SPX   240119P04500000");
        assert_eq!(c("AAPL", "2024-01-19", OptionSide::Call, "190.5").occ_unpadded(), "AAPL240119C00190500");
        assert_eq!(c("X", "2024-01-19", OptionSide::Call, "0.50").occ_unpadded(), "X240119C00000500");
        assert_eq!(OptionContract::parse_occ("SPXW  240119C04500000").unwrap(), k);
        assert_eq!(OptionContract::parse_occ("SPXW240119C04500000").unwrap(), k);
        assert_eq!(OptionContract::parse_occ("AAPL240119C00190500").unwrap().strike.to_string(), "190.5");
        assert!(OptionContract::parse_occ("AAPL").is_none());
        assert!(OptionContract::parse_occ("SPXW240119X04500000").is_none());
    }

    #[test]
    fn roots_and_underlyings() {
        assert_eq!(root_for("spx"), "SPXW");
        assert_eq!(root_for("AAPL"), "AAPL");
        assert_eq!(underlying_of("SPXW"), "SPX");
        assert_eq!(underlying_of("SPXW  240119C04500000"), "SPX");
        assert_eq!(underlying_of("AAPL240119C00190500"), "AAPL");
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

use super::build::{BuildContext, Decided};
use super::{Order, OrderError};
use crate::strategy::{Bot, HeldLeg};

/// Fills an option order's legs, net price and price effect for an entry or exit:
/// internal selection from the leg rules and chain, external from the alert's legs.
pub fn select_legs(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    order: &mut Order,
) -> Result<(), OrderError> {
    let _ = (ctx, decided, bot, order);
    Err(OrderError::Unfillable("option orders are not built yet".into()))
}

/// Fills an option order's legs from a working order's or position's held legs, with
/// `price` as the net price.
pub fn held_legs(order: &mut Order, legs: &[HeldLeg], price: Option<Decimal>) -> Result<(), OrderError> {
    let _ = (order, legs, price);
    Err(OrderError::Unfillable("option orders are not built yet".into()))
}
