//! Option contracts named by one symbol, as senders write them: the OCC/OSI symbol
//! (`SPXW240119C04500000`, or padded `SPXW  240119C04500000`), the same without the
//! strike's padding (`SPXW 240119C4500`), and TradingView's option ticker
//! (`SPY261218C600.0`, `SPXW261218P5800`). Reading one takes a single pass over at most
//! 32 bytes.

use super::{Date, Leg, LegAction, OptionSide};
use crate::decimal::{self, Decimal};

/// One option contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    /// The root as written (`SPXW`, `SPY`): the builder maps roots and underlyings.
    pub root: String,
    /// Expiration date; a two-digit year is 20YY.
    pub expiration: Date,
    /// Call or put.
    pub side: OptionSide,
    /// Strike price.
    pub strike: Decimal,
}

impl Contract {
    /// Reads an OCC symbol (padded or not) or its short form with the strike written as a
    /// plain number. `None` for anything else, so a ticker that merely ends in digits
    /// (`NQ1!`, `BRK.B`, `600519`) is never taken for a contract, and for a strike an OCC
    /// symbol cannot carry (more than three decimals, above 99999.999).
    pub fn parse(s: &str) -> Option<Contract> {
        let s = super::trim(s);
        // The shortest contract is the short form's `A240119C5` (a letter, six date digits,
        // the side and a strike digit); plain tickers are shorter and go no further.
        if s.len() < 9 || s.len() > 32 || !s.is_ascii() {
            return None;
        }
        Contract::parse_occ(s).or_else(|| Contract::parse_short(s))
    }

    /// The OCC form: a root of one to six letters or digits (padded with spaces or not),
    /// then exactly `YYMMDD`, `C` or `P`, and the strike times 1000 in eight digits.
    fn parse_occ(s: &str) -> Option<Contract> {
        if s.len() < 16 {
            return None;
        }
        let (head, tail) = s.split_at(s.len() - 15);
        let root = head.trim_end_matches(' ');
        if root.is_empty() || root.len() > 6 || !root.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        let (expiration, side, strike) = date_side(tail)?;
        if strike.len() != 8 || !strike.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let milli: i64 = strike.parse().ok()?;
        let strike = Decimal::new(milli, 3).normalize();
        (strike > Decimal::ZERO).then(|| Contract { root: root.to_ascii_uppercase(), expiration, side, strike })
    }

    /// The short form: a root of one to six letters, an optional space, `YYMMDD`, `C` or
    /// `P`, and the strike as a plain number (`600`, `600.0`, `4500.5`).
    fn parse_short(s: &str) -> Option<Contract> {
        let letters = s.bytes().take_while(u8::is_ascii_alphabetic).count();
        if letters == 0 || letters > 6 {
            return None;
        }
        let (root, rest) = s.split_at(letters);
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let (expiration, side, strike) = date_side(rest)?;
        // Digits with at most one point, and no leading zero but `0.5`'s: an OCC symbol
        // that lost a digit (`SPXW240119C0450000`) is not read as a strike of 450000.
        let b = strike.as_bytes();
        let plain = b.first().is_some_and(u8::is_ascii_digit)
            && b.iter().all(|c| c.is_ascii_digit() || *c == b'.')
            && (b[0] != b'0' || b.get(1) == Some(&b'.'));
        let strike = decimal::parse(strike).filter(|k| plain && *k > Decimal::ZERO)?.normalize();
        let c = Contract { root: root.to_ascii_uppercase(), expiration, side, strike };
        c.milli().map(|_| c)
    }

    /// The strike in thousandths, as the OCC symbol writes it, when it fits its eight digits.
    fn milli(&self) -> Option<Decimal> {
        let milli = self.strike.checked_mul(Decimal::from(1000))?;
        (milli.fract().is_zero() && milli <= Decimal::from(99_999_999)).then_some(milli)
    }

    /// The OCC symbol without padding (`SPXW240119C04500000`).
    pub fn occ(&self) -> String {
        let milli = self.milli().unwrap_or_default();
        let side = match self.side {
            OptionSide::Call => 'C',
            OptionSide::Put => 'P',
        };
        let e = self.expiration;
        format!("{}{:02}{:02}{:02}{side}{:0>8}", self.root, e.year % 100, e.month, e.day, milli.trunc())
    }

    /// This contract as an alert leg with `action`, its symbol in OCC form.
    pub fn leg(&self, action: Option<LegAction>) -> Leg {
        Leg {
            symbol: Some(self.occ()),
            side: Some(self.side),
            action,
            strike: Some(self.strike),
            expiration: Some(self.expiration),
            price: None,
            live_price: None,
            size: None,
        }
    }
}

/// `YYMMDD`, then `C` or `P`; returns the rest (the strike) unread.
fn date_side(s: &str) -> Option<(Date, OptionSide, &str)> {
    let b = s.as_bytes();
    if b.len() < 8 || !b[..6].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let two = |i: usize| (b[i] - b'0') * 10 + (b[i + 1] - b'0');
    let expiration = Date::new(2000 + u16::from(two(0)), two(2), two(4))?;
    let side = match b[6] {
        b'C' | b'c' => OptionSide::Call,
        b'P' | b'p' => OptionSide::Put,
        _ => return None,
    };
    Some((expiration, side, &s[7..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_contract_is_read() {
        let c = Contract::parse("A240119C5").expect("nine characters: the shortest contract");
        assert_eq!((c.root.as_str(), c.strike), ("A", Decimal::from(5)));
        assert!(Contract::parse("A240119C").is_none());
    }

    fn k(s: &str) -> (String, String, &'static str, String) {
        let c = Contract::parse(s).unwrap_or_else(|| panic!("{s:?} is a contract"));
        (c.root, c.expiration.to_string(), c.side.as_str(), c.strike.to_string())
    }

    #[test]
    fn occ_padded_or_not() {
        let want = ("SPXW".to_string(), "2024-01-19".to_string(), "CALL", "4500".to_string());
        assert_eq!(k("SPXW240119C04500000"), want);
        assert_eq!(k("SPXW  240119C04500000"), want);
        assert_eq!(k("SPXW 240119C4500"), want);
        assert_eq!(k("spxw240119c04500000"), want);
        assert_eq!(k("AAPL240119P00190500").3, "190.5");
        assert_eq!(Contract::parse("SPXW  240119C04500000").unwrap().occ(), "SPXW240119C04500000");
    }

    #[test]
    fn tradingview_option_tickers() {
        assert_eq!(k("SPY261218C600.0"), ("SPY".into(), "2026-12-18".into(), "CALL", "600".into()));
        assert_eq!(k("SPXW261218P5800"), ("SPXW".into(), "2026-12-18".into(), "PUT", "5800".into()));
        assert_eq!(Contract::parse("SPY261218C600.0").unwrap().occ(), "SPY261218C00600000");
        assert_eq!(Contract::parse("QQQ250117C512.5").unwrap().occ(), "QQQ250117C00512500");
        assert_eq!(Contract::parse("F250117C0.5").unwrap().occ(), "F250117C00000500");
    }

    #[test]
    fn tickers_that_end_in_digits_are_not_contracts() {
        for s in [
            "AAPL",
            "NQ1!",
            "ES1!",
            "BRK.B",
            "600519",
            "0700",
            "BTCUSDT",
            "1INCHUSDT",
            "ESH2024",
            "SPY261318C600",
            "SPY261218X600",
            "SPY261218C",
            "SPY261218C-5",
            "SPY261218C0",
            "TOOLONGX261218C600",
            "SPY261218C6e2",
            "SPY261218C.5",
            "SPXW240119C04500000X",
            "SPXW240119C0450000",
            "SPY261218C600.1234",
            "SPY261218C100000",
            "SPY261218C1.2.3",
        ] {
            assert_eq!(Contract::parse(s), None, "{s}");
        }
    }
}
