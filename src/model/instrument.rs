//! The instrument key: one instrument's identity for a strategy's asset class, read once
//! at the edge (an alert, a position, a working order) and then compared as a value.
//!
//! - equity: the symbol, upper-cased (`aapl` = `AAPL`);
//! - crypto: the pair, whatever its spelling (`BTCUSD` = `BTC/USD` = `btc-usd`);
//! - option: the underlying's root, with a symbol's contract part dropped and the PM-settled
//!   `SPXW` read as `SPX` (`SPXW  240119C04500000` = `SPX`).
//!
//! Keys up to [`INLINE`] bytes live inside the value, so building one allocates nothing for
//! any ordinary symbol or pair.

use super::asset::AssetClass;
use super::contract::underlying_of;
use super::pair::CryptoPair;
use std::fmt;

/// Longest key held without a heap allocation.
pub const INLINE: usize = 30;

/// An instrument's identity within one asset class. Two spellings of one instrument give
/// equal keys; compare keys of the same asset class only.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct InstrumentKey(Repr);

/// Canonical: a text that fits is always inline, so equal texts have equal representations.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<str>),
}

impl Default for InstrumentKey {
    fn default() -> Self {
        InstrumentKey(Repr::Inline { len: 0, bytes: [0; INLINE] })
    }
}

impl InstrumentKey {
    /// The key of `instrument` as a strategy trading `asset_class` means it.
    pub fn new(instrument: &str, asset_class: AssetClass) -> InstrumentKey {
        // Written where it is returned: built in a writer of its own and moved out, the key's bytes, just written
        // one at a time, were read back as wide words, stalling on store forwarding.
        let mut key = InstrumentKey::default();
        let mut w = Writer { key: &mut key.0, spill: None };
        match asset_class {
            AssetClass::Equity => w.push_upper(instrument),
            AssetClass::Option => w.push_upper(underlying_of(instrument)),
            AssetClass::Crypto => match CryptoPair::split(instrument) {
                // A pair is written BASE/QUOTE; a text that is no pair is kept upper-cased, and
                // cannot collide with a pair: a valid pair spelling would have been read as one.
                Some((base, quote)) => {
                    w.push_upper(base);
                    w.push_upper("/");
                    w.push_upper(quote);
                }
                None => w.push_upper(instrument),
            },
        }
        w.finish();
        key
    }

    /// The canonical text (`AAPL`, `BTC/USD`, `SPX`).
    pub fn as_str(&self) -> &str {
        match &self.0 {
            // Only ASCII-upper-cased UTF-8 is ever written, cut at character boundaries.
            Repr::Inline { len, bytes } => std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default(),
            Repr::Heap(s) => s,
        }
    }
}

impl fmt::Display for InstrumentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for InstrumentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "InstrumentKey({:?})", self.as_str())
    }
}

/// Writes a key's upper-cased text into it: inline while it fits, else into a spill
/// string that [`Writer::finish`] moves to the heap.
struct Writer<'k> {
    /// The key, inline (empty) on the way in.
    key: &'k mut Repr,
    spill: Option<String>,
}

impl Default for Repr {
    fn default() -> Self {
        Repr::Inline { len: 0, bytes: [0; INLINE] }
    }
}

impl Writer<'_> {
    fn push_upper(&mut self, s: &str) {
        if let Some(spill) = &mut self.spill {
            spill.extend(s.chars().map(|c| c.to_ascii_uppercase()));
            return;
        }
        let Repr::Inline { len, bytes } = &mut *self.key else { return };
        let at = usize::from(*len);
        if at + s.len() <= INLINE {
            for (slot, b) in bytes[at..].iter_mut().zip(s.bytes()) {
                *slot = b.to_ascii_uppercase();
            }
            *len += s.len() as u8;
        } else {
            let mut spill = String::with_capacity(at + s.len());
            spill.push_str(std::str::from_utf8(&bytes[..at]).unwrap_or_default());
            spill.extend(s.chars().map(|c| c.to_ascii_uppercase()));
            self.spill = Some(spill);
        }
    }

    fn finish(self) {
        if let Some(s) = self.spill {
            *self.key = Repr::Heap(s.into_boxed_str());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, a: AssetClass) -> InstrumentKey {
        InstrumentKey::new(s, a)
    }

    #[test]
    fn spellings_of_one_instrument_are_one_key() {
        use AssetClass::*;
        assert_eq!(key("aapl", Equity), key("AAPL", Equity));
        assert_ne!(key("AAPL", Equity), key("MSFT", Equity));
        assert_ne!(key("BTCUSD", Equity), key("BTC/USD", Equity), "equities are not pairs");
        for s in ["BTCUSD", "BTC/USD", "btc-usd", "BTC_USD", " BTCUSD "] {
            assert_eq!(key(s, Crypto), key("BTC/USD", Crypto), "{s}");
        }
        assert_eq!(key("BTC/USD", Crypto).as_str(), "BTC/USD");
        assert_ne!(key("BTCUSDT", Crypto), key("BTCUSD", Crypto), "the quote currency counts");
        assert_eq!(key("NQ1!", Crypto), key("nq1!", Crypto), "no pair: the text, any case");
        assert_eq!(key("SPXW", Option), key("SPX", Option));
        assert_eq!(key("SPXW  240119C04500000", Option), key("spx", Option));
        assert_eq!(key("AAPL240119C00190500", Option).as_str(), "AAPL");
    }

    #[test]
    fn long_texts_spill_to_the_heap_and_still_compare() {
        let long = "X".repeat(INLINE + 5);
        assert_eq!(key(&long, AssetClass::Equity), key(&long.to_lowercase(), AssetClass::Equity));
        assert_eq!(key(&long, AssetClass::Equity).as_str(), long);
        let exact = "Y".repeat(INLINE);
        assert_eq!(key(&exact, AssetClass::Equity).as_str(), exact);
        assert_eq!(key("é", AssetClass::Equity).as_str(), "é");
    }
}
