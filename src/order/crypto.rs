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
        let s = s.trim().to_ascii_uppercase();
        let valid = |p: &str| !p.is_empty() && p.len() <= 12 && p.bytes().all(|b| b.is_ascii_alphanumeric());
        if let Some((b, q)) = s.split_once(['/', '-', '_']) {
            return (valid(b) && valid(q)).then(|| CryptoPair { base: b.to_string(), quote: q.to_string() });
        }
        QUOTES.iter().find_map(|q| {
            let b = s.strip_suffix(q)?;
            valid(b).then(|| CryptoPair { base: b.to_string(), quote: q.to_string() })
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
