//! Listed option contracts: OCC/OSI symbols, and the index series roots (SPX ↔ SPXW, NDX ↔ NDXP, VIX ↔ VIXW).

use super::date::Date;
use super::side::OptionSide;
use super::snippet;
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
        let milli = self.strike.checked_mul(Decimal::from(1000)).unwrap_or_default().trunc();
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
        let (root, expiration, side, strike) = split_occ(s)?;
        Some(OptionContract { root: root.to_ascii_uppercase(), expiration, side, strike })
    }

    /// Why this contract cannot be written as an OSI symbol, if it cannot: the root must
    /// be 1 to 6 letters or digits, the year within 2000–2099, and the strike above zero
    /// with at most three decimals and at most 99999.999.
    pub fn osi_problem(&self) -> Option<String> {
        if self.root.is_empty() || self.root.len() > 6 || !self.root.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Some(format!("the option root {:?} is not 1 to 6 letters or digits", snippet(&self.root)));
        }
        if !(2000..=2099).contains(&self.expiration.year) {
            return Some(format!("the expiration {} is outside the years an OCC symbol can carry", self.expiration));
        }
        let milli = self.strike.checked_mul(Decimal::from(1000));
        match milli {
            Some(m) if m > Decimal::ZERO && m.fract().is_zero() && m <= Decimal::from(99_999_999) => None,
            _ => Some(format!(
                "the strike {} cannot be written in an OCC symbol (above zero, at most three decimals, at most 99999.999)",
                self.strike
            )),
        }
    }
}

/// The OSI root for an underlying: `SPX` trades as the PM-settled `SPXW`, and `RUT` as `RUTW`. Their standard
/// series (`SPX`, `RUT`: AM-settled, third Fridays only) stop trading the day before they expire, and exist on no
/// other date; the PM-settled series list every expiration, third Fridays included (Cboe). Built on `RUT`, a
/// Monday's contract did not exist, and a third Friday's no longer traded on the day.
pub fn root_for(underlying: &str) -> String {
    if underlying.eq_ignore_ascii_case("SPX") {
        "SPXW".to_string()
    } else if underlying.eq_ignore_ascii_case("RUT") {
        "RUTW".to_string()
    } else {
        underlying.to_ascii_uppercase()
    }
}

/// The root a contract of `root` expiring on `expiration` is listed under, where an index's series differ by date:
/// `NDX` is the AM-settled monthly (third Friday) series and every other NDX expiration is `NDXP` (PM-settled);
/// `VIX` is the standard monthly series and every other VIX expiration is `VIXW`. Built on `NDX` or `VIX`, a
/// weekly's or a daily's contract did not exist, and the entry was refused at the broker after a processed
/// answer. Any other root is returned as it is.
pub fn dated_root(root: &str, expiration: Date) -> String {
    if root.eq_ignore_ascii_case("NDX") && !is_monthly_expiration(expiration) {
        "NDXP".to_string()
    } else if root.eq_ignore_ascii_case("VIX") && !is_vix_standard(expiration) {
        "VIXW".to_string()
    } else {
        root.to_ascii_uppercase()
    }
}

/// Whether a contract of `root` expiring on `expiration` stops trading the business day before it (AM-settled:
/// its settlement value is taken from the opening prices on the day): the `NDX` and `DJX` monthly series, the
/// standard `SPX` and `RUT` series, and every VIX series. Such a contract cannot be bought or sold on its expiration day.
pub fn stops_the_day_before(root: &str, expiration: Date) -> bool {
    let r = root.trim();
    // SPX and RUT list only their AM-settled standard series under these roots (the PM-settled ones are SPXW
    // and RUTW): on its expiration day such a contract no longer traded, yet a CLOSE sent it beside live legs,
    // and the broker refused the whole order.
    // DJX's standard monthly series is settled on the opening prices too (Cboe: trading "will ordinarily cease on the
    // business day (usually a Thursday) preceding" the day of its settlement value); on its expiration Friday a CLOSE
    // was sent for a contract that no longer traded, and the broker refused the whole order.
    ((r.eq_ignore_ascii_case("NDX") || r.eq_ignore_ascii_case("DJX")) && is_monthly_expiration(expiration))
        || r.eq_ignore_ascii_case("SPX")
        || r.eq_ignore_ascii_case("RUT")
        || r.eq_ignore_ascii_case("VIX")
        || r.eq_ignore_ascii_case("VIXW")
}

/// The last day a contract of `root` expiring on `expiration` trades (through its session's close in New York): the
/// business day before its expiration for a series settled on the opening prices ([`stops_the_day_before`]), its
/// expiration otherwise.
pub fn last_trading_day(root: &str, expiration: Date) -> Date {
    if !stops_the_day_before(root, expiration) {
        return expiration;
    }
    let mut day = expiration.plus_days(-1);
    while day.is_weekend() || day.market_holiday().is_some() {
        day = day.plus_days(-1);
    }
    day
}

/// How long past the regular session's close a series settled on the opening prices trades on its last trading day:
/// the index options' session (SPX, RUT, NDX, VIX) runs to 16:15 in New York (13:15 on a day that closes early);
/// only PM-settled series expiring that day stop at 16:00. Cut at 16:00, a CLOSE of an AM-settled monthly at 16:05
/// on its last day was refused, leaving the position to the next morning's settlement.
const INDEX_SESSION_PAST_CLOSE_SECS: i64 = 15 * 60;

/// Whether a contract of `root` expiring on `expiration` still trades at `now_ms`: before its last trading day
/// ([`last_trading_day`]), and on it until the session's end in New York (the regular close, or a quarter hour past it
/// for a series settled on the opening prices).
pub fn trades_at(root: &str, expiration: Date, now_ms: i64) -> bool {
    let last = last_trading_day(root, expiration);
    let (today, secs) = super::date::eastern_day_and_secs(now_ms);
    match last.cmp(&today) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            let past = if stops_the_day_before(root, expiration) { INDEX_SESSION_PAST_CLOSE_SECS } else { 0 };
            secs < last.close_secs() + past
        }
    }
}

/// The third Friday of `year`-`month`.
fn third_friday(year: u16, month: u8) -> Option<Date> {
    (15..=21).filter_map(|d| Date::new(year, month, d)).find(|d| d.weekday() == 4)
}

/// A monthly expiration: the third Friday, or the Thursday before it when that Friday is a market holiday.
fn is_monthly_expiration(d: Date) -> bool {
    let Some(friday) = third_friday(d.year, d.month) else { return false };
    let expires = if friday.market_holiday().is_some() { friday.plus_days(-1) } else { friday };
    d == expires
}

/// The standard monthly VIX expiration of `d`'s month: the Wednesday 30 days before the third Friday of the month
/// after; when that Wednesday or that Friday is a holiday, the business day before the Wednesday (Cboe: "If that
/// Wednesday or the Friday that is 30 days following that Wednesday is a Cboe Options holiday…"). With only the
/// Wednesday checked, the series of a month whose next third Friday is Good Friday or Juneteenth (March 2025, May
/// 2026) was sent under `VIXW`, a contract not listed, and refused after a processed answer.
fn is_vix_standard(d: Date) -> bool {
    let (year, month) = if d.month == 12 { (d.year.saturating_add(1), 1) } else { (d.year, d.month + 1) };
    let Some(friday) = third_friday(year, month) else { return false };
    let wednesday = friday.plus_days(-30);
    let mut expires = wednesday;
    if wednesday.market_holiday().is_some() || friday.market_holiday().is_some() {
        expires = wednesday.plus_days(-1);
        while expires.is_weekend() || expires.market_holiday().is_some() {
            expires = expires.plus_days(-1);
        }
    }
    d == expires
}

/// Whether an underlying or OSI root is a cash-settled index (`SPX`, `SPXW`, `NDX`,
/// `RUT`, `VIX`, `XSP`…) rather than a stock or ETF: some brokers offer equity options only.
pub fn is_index_root(root: &str) -> bool {
    const INDEX: [&str; 16] = [
        "SPX", "SPXW", "SPXPM", "XSP", "NDX", "NDXP", "XND", "RUT", "RUTW", "MRUT", "VIX", "VIXW", "DJX", "OEX", "XEO",
        "XSPW",
    ];
    let r = root.trim();
    INDEX.iter().any(|i| i.eq_ignore_ascii_case(r))
}

/// The parts of an OSI symbol, the root as spelled (case kept), without allocating.
fn split_occ(s: &str) -> Option<(&str, Date, OptionSide, Decimal)> {
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
    Some((root, expiration, side, strike))
}

/// The underlying for a root or OSI symbol: `SPXW` → `SPX` (and the other indexes' PM or weekly series: `RUTW`,
/// `NDXP`, `VIXW`); quotes and Tradier's
/// `symbol` use the underlying.
pub fn underlying_of(symbol: &str) -> &str {
    let s = symbol.trim();
    let root = split_occ(s).map_or(s, |(root, ..)| root);
    // The PM-settled and weekly series of an index trade under their own roots (Cboe): read on the root, a
    // RUTW position was no RUT position (a CLOSE RUT found nothing to close) and Tradier was sent `RUTW`.
    SERIES.iter().find(|(series, _)| root.eq_ignore_ascii_case(series)).map_or(root, |(_, index)| index)
}

/// An index's PM-settled or weekly series, each under its own root, with its index.
const SERIES: [(&str, &str); 5] =
    [("SPXW", "SPX"), ("SPXPM", "SPX"), ("NDXP", "NDX"), ("RUTW", "RUT"), ("VIXW", "VIX")];

/// The series root an instrument names itself (`RUTW`, `NDXP`, …), upper-cased: contracts an alert on it asks for
/// are built on that root, not on the index's standard one.
pub fn series_root(instrument: &str) -> Option<String> {
    let i = instrument.trim();
    SERIES.iter().any(|(series, _)| i.eq_ignore_ascii_case(series)).then(|| i.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dated series at their calendar's edges: a monthly moved off a holiday Friday, a VIX standard expiration
    /// moved off a holiday Wednesday (Juneteenth 2024), and December's VIX expiration counted from January's.
    #[test]
    fn dated_roots_follow_the_exchange_calendar() {
        let on = |root: &str, iso: &str| dated_root(root, Date::parse_iso(iso).unwrap());
        assert_eq!(on("ndx", "2024-01-19"), "NDX", "the third Friday");
        assert_eq!(on("NDX", "2024-01-18"), "NDXP");
        assert_eq!(on("NDX", "2024-01-26"), "NDXP");
        // Good Friday 2025 was April's third Friday: the monthly expired on the Thursday.
        assert_eq!(on("NDX", "2025-04-17"), "NDX");
        assert_eq!(on("VIX", "2024-01-17"), "VIX", "30 days before February 16");
        assert_eq!(on("VIX", "2024-01-24"), "VIXW");
        assert_eq!(on("VIX", "2024-06-18"), "VIX", "Juneteenth fell on the Wednesday");
        assert_eq!(on("VIX", "2024-06-19"), "VIXW");
        assert_eq!(on("VIX", "2024-12-18"), "VIX", "30 days before January 17, 2025");
        assert_eq!(on("NDXP", "2024-01-19"), "NDXP", "a series the alert names is kept");
        assert_eq!(on("spxw", "2024-01-22"), "SPXW");
        assert!(stops_the_day_before("NDX", Date::parse_iso("2024-01-19").unwrap()));
        assert!(!stops_the_day_before("NDXP", Date::parse_iso("2024-01-22").unwrap()));
        assert!(stops_the_day_before("VIXW", Date::parse_iso("2024-01-24").unwrap()));
        // DJX's monthly is settled on the Friday's opening prices: it trades last on the Thursday.
        assert!(stops_the_day_before("DJX", Date::parse_iso("2024-01-19").unwrap()));
        assert_eq!(
            last_trading_day("DJX", Date::parse_iso("2024-01-19").unwrap()),
            Date::parse_iso("2024-01-18").unwrap()
        );
        assert!(!stops_the_day_before("DJX", Date::parse_iso("2024-01-26").unwrap()));
    }

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
    fn osi_limits() {
        assert_eq!(c("AAPL", "2024-01-19", OptionSide::Call, "190.5").osi_problem(), None);
        assert_eq!(c("SPXW", "2024-01-19", OptionSide::Put, "99999.999").osi_problem(), None);
        for strike in ["0", "-5", "100000", "1.2345", "79000000000000000000000000000"] {
            let k = c("AAPL", "2024-01-19", OptionSide::Call, strike);
            assert!(k.osi_problem().is_some_and(|p| p.contains("strike")), "{strike}");
            let _ = k.occ_unpadded(); // never panics, even when it cannot be traded
        }
        assert!(c("BRK.B", "2024-01-19", OptionSide::Call, "400").osi_problem().is_some_and(|p| p.contains("root")));
        assert!(c("SPXW", "2100-01-15", OptionSide::Call, "4500").osi_problem().is_some_and(|p| p.contains("2100")));
    }

    #[test]
    fn index_roots() {
        for r in ["SPX", "spxw", "NDX", "RUT", "VIX", "XSP"] {
            assert!(is_index_root(r), "{r}");
        }
        for r in ["SPY", "QQQ", "AAPL", "IWM", ""] {
            assert!(!is_index_root(r), "{r}");
        }
    }

    #[test]
    fn roots_and_underlyings() {
        assert_eq!(root_for("spx"), "SPXW");
        assert_eq!(root_for("AAPL"), "AAPL");
        assert_eq!(underlying_of("SPXW"), "SPX");
        assert_eq!(underlying_of("SPXW  240119C04500000"), "SPX");
        for (series, index) in [("RUTW240122P02000000", "RUT"), ("NDXP", "NDX"), ("vixw", "VIX"), ("SPXPM", "SPX")] {
            assert_eq!(underlying_of(series), index, "{series}");
        }
        assert_eq!(underlying_of("AAPL240119C00190500"), "AAPL");
    }
}
