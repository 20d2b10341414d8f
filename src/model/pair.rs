//! Crypto pairs: `BTCUSD`, `BTC/USD`, `BTC-USD` and `BTCUSDT` all name a base and a quote;
//! each broker spells the pair its own way.

/// A spot pair such as BTC/USD.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CryptoPair {
    /// The coin bought or sold (`BTC`).
    pub base: String,
    /// The currency it is priced in (`USD`, `USDT`, `USDC`).
    pub quote: String,
}

/// Quote currencies recognised at the end of an unseparated pair, longest first.
const QUOTES: [&str; 6] = ["USDT", "USDC", "USD", "EUR", "GBP", "BTC"];

impl CryptoPair {
    /// Reads `BTC/USD`, `BTC-USD`, `BTC_USD` or `BTCUSD` (any case). The quote currency is
    /// kept as sent: `BTCUSDT` is BTC/USDT, never silently turned into dollars.
    pub fn parse(s: &str) -> Option<CryptoPair> {
        let (base, quote) = CryptoPair::split(s)?;
        Some(CryptoPair { base: base.to_ascii_uppercase(), quote: quote.to_ascii_uppercase() })
    }

    /// Whether `quote` is account money: the dollar or a dollar stablecoin (`USD`, `USDC`, `USDT`), which an amount
    /// in dollars can be divided by and whose prices stand for one another.
    pub fn is_money(quote: &str) -> bool {
        ["USD", "USDC", "USDT"].iter().any(|m| quote.trim().eq_ignore_ascii_case(m))
    }

    /// The base and quote as spelled in `s` (case kept), without allocating; `None` when
    /// `s` is not a pair. [`CryptoPair::parse`] and the instrument key both read pairs here.
    pub fn split(s: &str) -> Option<(&str, &str)> {
        let s = s.trim();
        let valid = |p: &str| !p.is_empty() && p.len() <= 12 && p.bytes().all(|b| b.is_ascii_alphanumeric());
        if let Some((b, q)) = s.split_once(['/', '-', '_']) {
            return (valid(b) && valid(q)).then_some((b, q));
        }
        QUOTES.iter().find_map(|q| {
            let cut = s.len().checked_sub(q.len())?;
            let (b, tail) = (s.get(..cut)?, s.get(cut..)?);
            (tail.eq_ignore_ascii_case(q) && valid(b)).then_some((b, tail))
        })
    }
}

impl std::fmt::Display for CryptoPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.quote)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling() {
        let usd = CryptoPair { base: "BTC".into(), quote: "USD".into() };
        for s in ["BTCUSD", "BTC/USD", "btc-usd", "BTC_USD"] {
            assert_eq!(CryptoPair::parse(s).as_ref(), Some(&usd), "{s}");
        }
        assert_eq!(CryptoPair::parse("BTCUSDT").unwrap().quote, "USDT");
        assert_eq!(CryptoPair::parse("ETHBTC").unwrap(), CryptoPair { base: "ETH".into(), quote: "BTC".into() });
        assert!(CryptoPair::parse("AAPL").is_none());
        assert!(CryptoPair::parse("USD").is_none());
        assert!(CryptoPair::parse("/USD").is_none());
    }
}
