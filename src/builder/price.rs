//! Limit prices: the strategy's Limit Target read from the snapshot's quotes, on the tick.

use crate::alert::QuotePrice;
use crate::decimal::Decimal;
use crate::model::{AssetClass, InstrumentKey, Intent, OrderError};
use crate::strategy::{LimitTarget, Quote, Strategy};
use rust_decimal::RoundingStrategy;

/// The price the strategy's Limit Target names, from the snapshot's quote, on the tick
/// (the quote's `tick`, else [`default_tick`]); an exact half goes to the passive side.
pub fn limit_from_quote(s: &Strategy, instrument: &str, intent: Intent) -> Result<Decimal, OrderError> {
    if s.limit_target == LimitTarget::AlertPrice {
        return Err(OrderError::NoAlertPrice);
    }
    let quote = find_quote(s, instrument);
    let missing = |what: &'static str| OrderError::MissingQuote { instrument: instrument.to_string(), what };
    let quote = quote.ok_or_else(|| missing("bid/ask"))?;
    not_crossed(quote, instrument)?;
    let bid = || quote.bid.ok_or_else(|| missing("bid"));
    let ask = || quote.ask.ok_or_else(|| missing("ask"));
    let raw = match s.limit_target {
        LimitTarget::AlertPrice | LimitTarget::Bid => bid()?,
        LimitTarget::Ask => ask()?,
        LimitTarget::Mid => {
            let (b, a) = spread(quote, instrument)?;
            b.checked_add(a).ok_or(OrderError::Overflow)? / Decimal::TWO
        }
        LimitTarget::Custom(f) => {
            let (b, a) = spread(quote, instrument)?;
            let width = a.checked_sub(b).and_then(|w| w.checked_mul(f)).ok_or(OrderError::Overflow)?;
            b.checked_add(width).ok_or(OrderError::Overflow)?
        }
    };
    if raw <= Decimal::ZERO {
        return Err(OrderError::QuotedPriceNotPositive { instrument: instrument.to_string(), price: raw });
    }
    let tick = quote.tick.filter(|t| *t > Decimal::ZERO).unwrap_or_else(|| default_tick(s.asset_class, raw));
    Ok(round_to_tick(raw, tick, intent.is_buy()))
}

/// The price an alert's own Limit Target names ([`QuotePrice`]), from the snapshot's quote,
/// on the tick: `ask_bid` is the bid for a buy and the ask for a sell, `mark` the midpoint.
pub fn limit_from_alert_target(
    s: &Strategy,
    instrument: &str,
    intent: Intent,
    which: QuotePrice,
) -> Result<Decimal, OrderError> {
    let quote = find_quote(s, instrument);
    let missing = |what: &'static str| OrderError::MissingQuote { instrument: instrument.to_string(), what };
    let quote = quote.ok_or_else(|| missing("bid/ask"))?;
    not_crossed(quote, instrument)?;
    let bid = || quote.bid.ok_or_else(|| missing("bid"));
    let ask = || quote.ask.ok_or_else(|| missing("ask"));
    let raw = match which {
        QuotePrice::Bid => bid()?,
        QuotePrice::Ask => ask()?,
        QuotePrice::AskBid if intent.is_buy() => bid()?,
        QuotePrice::AskBid => ask()?,
        QuotePrice::Mark => {
            let (b, a) = spread(quote, instrument)?;
            b.checked_add(a).ok_or(OrderError::Overflow)? / Decimal::TWO
        }
        QuotePrice::Last => quote.last.ok_or_else(|| missing("last"))?,
    };
    if raw <= Decimal::ZERO {
        return Err(OrderError::QuotedPriceNotPositive { instrument: instrument.to_string(), price: raw });
    }
    let tick = quote.tick.filter(|t| *t > Decimal::ZERO).unwrap_or_else(|| default_tick(s.asset_class, raw));
    Ok(round_to_tick(raw, tick, intent.is_buy()))
}

/// The quote's bid and ask, to take a mid or a point of the spread from: both quoted, each above zero, and the bid
/// not above the ask. A side at zero is nobody's price (docs/strategy.md: such a quote "has no mid"), and the mid
/// of bid 0 / ask 190.15 sold a held position at 95.08, half the market.
fn spread(quote: &Quote, instrument: &str) -> Result<(Decimal, Decimal), OrderError> {
    let missing = |what: &'static str| OrderError::MissingQuote { instrument: instrument.to_string(), what };
    let (b, a) = (quote.bid.ok_or_else(|| missing("bid"))?, quote.ask.ok_or_else(|| missing("ask"))?);
    if b <= Decimal::ZERO || a <= Decimal::ZERO {
        return Err(OrderError::OneSidedQuote { instrument: instrument.to_string(), bid: b, ask: a });
    }
    not_crossed(quote, instrument)?;
    Ok((b, a))
}

/// Refuses a quote whose bid, both sides quoted above zero, is above its ask, whatever the Limit Target: such data
/// is stale or broken, and a buy resting at the bid of bid 195 / ask 190.15 went out at 195, above the offer. An
/// option leg's quote is refused the same way for every target.
fn not_crossed(quote: &Quote, instrument: &str) -> Result<(), OrderError> {
    match (quote.bid, quote.ask) {
        (Some(b), Some(a)) if b > a && a > Decimal::ZERO => {
            Err(OrderError::CrossedQuote { instrument: instrument.to_string(), bid: b, ask: a })
        }
        _ => Ok(()),
    }
}

/// The largest multiple of `step` (> 0) not above `value` in magnitude: rounding toward
/// zero, so a size never grows. `None` when the division overflows.
pub(super) fn floor_to_step(value: Decimal, step: Decimal) -> Option<Decimal> {
    let units = value.checked_div(step)?.trunc();
    Some(units.checked_mul(step)?.round_dp(step.scale()))
}

/// A limit price on a product's price increment, always to the passive side: a buy down
/// and a sell up to the next multiple, so it never becomes more aggressive than asked. A
/// price already on the increment keeps its value (at the increment's decimals); one too
/// large to divide is returned as it is.
pub fn round_passive(price: Decimal, step: Decimal, buy: bool) -> Decimal {
    if step <= Decimal::ZERO {
        return price;
    }
    let strategy = if buy { RoundingStrategy::ToNegativeInfinity } else { RoundingStrategy::ToPositiveInfinity };
    price
        .checked_div(step)
        .and_then(|units| units.round_dp_with_strategy(0, strategy).checked_mul(step))
        .map_or(price, |rounded| rounded.round_dp(step.scale()))
}

/// The instrument's quote in the snapshot: by its own spelling, else any spelling of
/// the same instrument (`BTC/USD` for `BTCUSD`).
pub(super) fn find_quote<'a>(s: &'a Strategy, instrument: &str) -> Option<&'a Quote> {
    s.market.quotes.get(instrument).or_else(|| {
        let key = InstrumentKey::new(instrument, s.asset_class);
        s.market.quotes.iter().find(|(k, _)| InstrumentKey::new(k, s.asset_class) == key).map(|(_, q)| q)
    })
}

/// The minimum price increment when the snapshot gives none: equities $0.01 (≥ $1) or
/// $0.0001 (sub-dollar, Reg NMS 612); options $0.05 under $3 and $0.10 above; crypto the
/// fifth significant digit, at most $0.01.
///
/// Coins trade from tens of thousands of dollars down to millionths of one, each pair on
/// its own increment (Coinbase: BTC-USD 0.01, DOGE-USD 0.00001, SHIB-USD 0.00000001), so no
/// fixed tick fits: a cent made a DOGE mid of 0.12345 a limit of 0.12 (3 % away, on the
/// aggressive side for a sell) and a SHIB price zero. Five significant digits is no
/// coarser than the common pairs' increments; a bot's `price_increment` then moves the
/// price passively onto the pair's own.
pub fn default_tick(asset_class: AssetClass, price: Decimal) -> Decimal {
    match asset_class {
        AssetClass::Equity if price.abs() < Decimal::ONE => Decimal::new(1, 4),
        AssetClass::Equity => Decimal::new(1, 2),
        AssetClass::Crypto => crypto_tick(price.abs()),
        AssetClass::Option if price.abs() < Decimal::from(3) => Decimal::new(5, 2),
        AssetClass::Option => Decimal::new(10, 2),
    }
}

/// A unit in the fifth significant digit of `price` (> 0), at most $0.01 and at least
/// the smallest step a decimal holds.
fn crypto_tick(price: Decimal) -> Decimal {
    let cent = Decimal::new(1, 2);
    if price >= Decimal::from(1000) || price.is_zero() {
        return cent;
    }
    // Digits before the point, or the zeros right after it: 0.000012 has 4, so its fifth
    // significant digit is the ninth decimal.
    let mut scale: u32 = 4;
    let mut p = price;
    if p >= Decimal::ONE {
        while p >= Decimal::TEN && scale > 0 {
            p /= Decimal::TEN;
            scale -= 1;
        }
    } else {
        while p < Decimal::ONE && scale < 28 {
            p *= Decimal::TEN;
            scale += 1;
        }
    }
    Decimal::new(1, scale.min(28)).min(cent)
}

/// Rounds to the nearest tick; an exact half goes to the passive side (down for a buy,
/// up for a sell), so rounding never makes the order more aggressive than the target.
/// A price too large to divide by the tick is returned as it is.
pub fn round_to_tick(price: Decimal, tick: Decimal, buy: bool) -> Decimal {
    if tick <= Decimal::ZERO {
        return price;
    }
    let strategy = if buy { RoundingStrategy::MidpointTowardZero } else { RoundingStrategy::MidpointAwayFromZero };
    price
        .checked_div(tick)
        .and_then(|units| units.round_dp_with_strategy(0, strategy).checked_mul(tick))
        .map_or(price, |rounded| rounded.round_dp(tick.scale()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_rounding_is_passive_on_halves() {
        let d = |s| crate::decimal::parse(s).unwrap();
        assert_eq!(round_to_tick(d("190.125"), d("0.01"), true).to_string(), "190.12");
        assert_eq!(round_to_tick(d("190.125"), d("0.01"), false).to_string(), "190.13");
        assert_eq!(round_to_tick(d("190.126"), d("0.01"), true).to_string(), "190.13");
        assert_eq!(round_to_tick(d("2.37"), d("0.05"), true).to_string(), "2.35");
        assert_eq!(round_to_tick(d("2.375"), d("0.05"), false).to_string(), "2.40");
    }

    #[test]
    fn default_ticks() {
        let d = |s| crate::decimal::parse(s).unwrap();
        assert_eq!(default_tick(AssetClass::Equity, d("190")), d("0.01"));
        assert_eq!(default_tick(AssetClass::Equity, d("0.5")), d("0.0001"));
        assert_eq!(default_tick(AssetClass::Option, d("2.9")), d("0.05"));
        assert_eq!(default_tick(AssetClass::Option, d("3.1")), d("0.10"));
        // Crypto: the fifth significant digit, at most a cent.
        for (price, tick) in [
            ("65000", "0.01"),
            ("1000", "0.01"),
            ("150.25", "0.01"),
            ("25.5", "0.001"),
            ("2.5", "0.0001"),
            ("1", "0.0001"),
            ("0.12345", "0.00001"),
            ("0.00001234", "0.000000001"),
        ] {
            assert_eq!(default_tick(AssetClass::Crypto, d(price)), d(tick), "{price}");
        }
    }
}
