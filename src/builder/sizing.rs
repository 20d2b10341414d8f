//! Sizes: an entry's size from the bot's sizing, rounded down to what can be traded.

use super::price::{find_quote, floor_to_step};
use crate::alert::Alert;
use crate::decimal::{self, Decimal};
use crate::model::{AssetClass, CryptoPair, OptionSide, OrderError, OrderLeg};
use crate::strategy::{Bot, Sizing, Strategy};
use rust_decimal::RoundingStrategy;
use std::borrow::Cow;

/// An entry's size from the bot's sizing. `unit_price` gives the price sizing divides
/// by and what it is the price of (for messages); it is asked only for amount-based
/// sizings, so a fixed quantity needs no market data.
pub(super) fn entry_size<'a>(
    s: &Strategy,
    bot: &Bot,
    instrument: &str,
    unit_price: impl FnOnce() -> Result<(Decimal, Cow<'a, str>), OrderError>,
) -> Result<Decimal, OrderError> {
    // The sizing is described only for a message, so only when one is written.
    let (amount, of_equity) = match bot.sizing {
        Sizing::FixedQuantity(q) => {
            return round_size(s.asset_class, bot, instrument, q, || {
                format!("bot {}'s sizing (fixed_quantity {q})", bot.id)
            })
        }
        Sizing::FixedNotional(a) => (a, None),
        Sizing::PercentOfEquity(p) => {
            let equity = bot.equity.ok_or_else(|| OrderError::NoEquity { bot: bot.id.to_string() })?;
            // An amount past any number here buys more than any order holds: refused for this bot, as a size
            // past any is. As `Overflow`, a 500, it failed every bot's order, and each resend the same way.
            let amount = equity.checked_mul(p).ok_or_else(|| OrderError::SizeBeyondAny {
                described: format!("bot {}'s sizing (percent_of_equity {p} of equity {equity})", bot.id),
            })? / Decimal::ONE_HUNDRED;
            (amount, Some((p, equity)))
        }
    };
    let described = || match of_equity {
        None => format!("bot {}'s sizing (fixed_notional {amount})", bot.id),
        Some((p, equity)) => {
            format!("bot {}'s sizing (percent_of_equity {p} of equity {equity} = {amount})", bot.id)
        }
    };
    priced_in_money(s.asset_class, instrument, &described)?;
    // A unit whose cost is past any number here (an option priced near 10^27, the sender's price or a quote's) costs
    // more than any amount: as at a price a little lower, the amount comes to less than one unit, refused for this
    // bot. As a 500 it failed every bot's order, and each automatic resend failed the same way.
    let (unit, what) = match unit_price().and_then(|(price, what)| Ok((unit_cost(s.asset_class, price)?, what))) {
        Err(OrderError::Overflow) => return Err(past_any_cost(described())),
        priced => priced?,
    };
    if decimal::not_positive(unit) {
        return Err(OrderError::SizingPriceNotPositive { what: what.into_owned() });
    }
    // Whole units (all but crypto) are the integer quotient, exactly, where that is certain
    // to be what the division truncates to.
    let whole = (s.asset_class != AssetClass::Crypto).then(|| decimal::whole_quotient(amount, unit)).flatten();
    let described = || format!("{} at {} a unit", described(), unit.normalize());
    let raw = match whole {
        Some(units) => units,
        None => amount.checked_div(unit).ok_or_else(|| OrderError::SizeBeyondAny { described: described() })?,
    };
    round_size(s.asset_class, bot, instrument, raw, described)
}

/// The refusal of an amount (`described`) sizing a unit whose cost is past any number here: it buys less than one.
pub(super) fn past_any_cost(described: String) -> OrderError {
    OrderError::SizeTooSmall {
        described: format!("{described} at a unit's cost too large to compute"),
        unit: "one whole unit".to_string(),
    }
}

/// Refuses to size by an amount of money a pair whose price is in another coin or currency: `ETH/BTC` at 0.05
/// (a price in bitcoin) divided into $1,000 made 20,000 ETH, about $60M; `BTC/EUR` was off by the exchange rate.
/// `sizing` describes the amount, for the message.
pub(super) fn priced_in_money(
    asset_class: AssetClass,
    instrument: &str,
    sizing: &dyn Fn() -> String,
) -> Result<(), OrderError> {
    if asset_class != AssetClass::Crypto {
        return Ok(());
    }
    match CryptoPair::split(instrument) {
        Some((_, quote)) if !CryptoPair::is_money(quote) => Err(OrderError::Unfillable(format!(
            "{} is an amount in dollars, but {} is priced in {}: one divided by the other would size the order by \
             the exchange rate; size this pair with fixed_quantity",
            sizing(),
            instrument.trim(),
            quote.to_ascii_uppercase()
        ))),
        _ => Ok(()),
    }
}

/// What one unit costs at `price`: the price itself, or for options the per-share figure's
/// magnitude × the 100-share multiplier (an entry's maximum loss: [`max_loss`]; a MODIFY's net price).
pub(super) fn unit_cost(asset_class: AssetClass, price: Decimal) -> Result<Decimal, OrderError> {
    match asset_class {
        AssetClass::Option => price.abs().checked_mul(Decimal::ONE_HUNDRED).ok_or(OrderError::Overflow),
        _ => Ok(price),
    }
}

/// The most one unit of an option structure can lose at expiration, per share, bought or sold at `net` (signed:
/// positive paid, negative received); `None` when its loss has no bound (more calls sold than bought).
///
/// The payoff at expiration is piecewise linear in the underlying's price, bending only at strikes: its lowest is
/// at 0, at a strike, or, when it falls above the highest strike, nowhere. So a bought call or put risks its
/// premium, a covered debit structure its debit, a credit vertical its width less the credit, and a sold put its
/// strike less the credit (a cash-secured put's cash). Legs of different expirations are taken as if they all
/// expired together: a same-strike calendar then risks its debit and a diagonal what the vertical of its strikes
/// would, where the true figure depends on the later leg's value then, which nothing here knows. A bought leg that
/// expires before a sold leg of its side (call or put) covers nothing, though: after it that sold leg stands alone
/// (a call sold past its cover is unbounded, a put's loss runs to its strike), so it is left out, its worth at its
/// own expiration taken as nothing; and the call side and the put side may each reach their worst at their own
/// time. An order of one leg is priced by the contract and sends `ratio` contracts a unit: its loss is one
/// contract's times the ratio.
pub(super) fn max_loss(legs: &[OrderLeg], net: Decimal) -> Result<Option<Decimal>, OrderError> {
    let held = |leg: &OrderLeg| {
        let contracts = Decimal::from(if legs.len() == 1 { 1 } else { leg.ratio });
        if leg.action.is_buy() {
            contracts
        } else {
            -contracts
        }
    };
    // Judged side by side: a condor's put wing expiring before its call wing still covers its own sold put.
    let outlived = |l: &OrderLeg| {
        legs.iter().any(|s| {
            !s.action.is_buy() && s.contract.side == l.contract.side && s.contract.expiration > l.contract.expiration
        })
    };
    let alive: Vec<&OrderLeg> = legs.iter().filter(|l| !l.action.is_buy() || !outlived(l)).collect();
    let calls = alive
        .iter()
        .filter(|l| l.contract.side == OptionSide::Call)
        .try_fold(Decimal::ZERO, |sum, l| sum.checked_add(held(l)))
        .ok_or(OrderError::Overflow)?;
    if calls < Decimal::ZERO {
        return Ok(None);
    }
    // The lowest payoff at expiration of `these` legs: at 0 or at one of their strikes.
    let lowest = |these: &[&OrderLeg]| {
        let payoff = |price: Decimal| {
            these.iter().try_fold(Decimal::ZERO, |sum, l| {
                let k = l.contract.strike;
                let intrinsic = match l.contract.side {
                    OptionSide::Call => price.checked_sub(k)?,
                    OptionSide::Put => k.checked_sub(price)?,
                };
                sum.checked_add(intrinsic.max(Decimal::ZERO).checked_mul(held(l))?)
            })
        };
        these.iter().try_fold(payoff(Decimal::ZERO)?, |low, l| Some(low.min(payoff(l.contract.strike)?)))
    };
    let together = lowest(&alive).ok_or(OrderError::Overflow)?;
    // Legs that do not all expire together let each side reach its worst at its own time: a condor whose put wing
    // expires a week before its call wing can lose both wings (the market below the puts, then above the calls),
    // where one expiration lets it lose one. Taken as the worse of the two (more than one wing on a double
    // diagonal, whose near legs cannot both end in the money: fewer units, never more).
    let one_expiration = legs.windows(2).all(|w| w[0].contract.expiration == w[1].contract.expiration);
    let lowest_of = if one_expiration {
        together
    } else {
        let side = |side: OptionSide| alive.iter().copied().filter(|l| l.contract.side == side).collect::<Vec<_>>();
        let apart = lowest(&side(OptionSide::Call))
            .zip(lowest(&side(OptionSide::Put)))
            .and_then(|(c, p)| c.checked_add(p))
            .ok_or(OrderError::Overflow)?;
        together.min(apart)
    };
    let loss = net.checked_sub(lowest_of).ok_or(OrderError::Overflow)?;
    match legs {
        [single] => loss.checked_mul(Decimal::from(single.ratio)).map(Some).ok_or(OrderError::Overflow),
        _ => Ok(Some(loss)),
    }
}

/// The price sizing divides by: the alert's price, else the quote's mid, else its last.
pub(super) fn sizing_price(s: &Strategy, alert: &Alert) -> Result<Decimal, OrderError> {
    if let Some(p) = alert.price {
        return Ok(p);
    }
    match find_quote(s, &alert.instrument) {
        Some(q) => quote_price(q.bid, q.ask, q.last)
            .ok_or_else(|| OrderError::QuoteWithoutPrice { instrument: alert.instrument.to_string() }),
        None => Err(OrderError::NoSizingPrice { instrument: alert.instrument.to_string() }),
    }
}

/// A quote's price to size from: its mid when both sides are quoted above zero and not crossed, else its last,
/// else the higher side. A one-sided quote (a bid of 0, common far from the money) has no mid: halving its ask
/// made the mid half the price and the order twice the configured amount. Any fallback errs towards the higher
/// price, so towards fewer units.
pub(crate) fn quote_price(bid: Option<Decimal>, ask: Option<Decimal>, last: Option<Decimal>) -> Option<Decimal> {
    mid(bid, ask).or(positive(last)).or_else(|| positive(bid).max(positive(ask)))
}

/// A quoted price above zero (a side quoted at 0 is nobody's price).
fn positive(p: Option<Decimal>) -> Option<Decimal> {
    p.filter(|p| *p > Decimal::ZERO)
}

/// The mid of a quote quoted on both sides above zero and not crossed.
fn mid(bid: Option<Decimal>, ask: Option<Decimal>) -> Option<Decimal> {
    let (b, a) = (positive(bid)?, positive(ask)?);
    (b <= a).then(|| b.checked_add(a).map(|sum| sum / Decimal::TWO)).flatten()
}

/// The range a quote's price may be in, to size a leg of a structure from: its mid (as [`quote_price`]) when
/// both sides are quoted above zero and not crossed, else from the lowest of its bid (0 when quoted at or below
/// zero: nobody buys), ask and last to the highest of them.
pub(crate) fn quote_range(
    bid: Option<Decimal>,
    ask: Option<Decimal>,
    last: Option<Decimal>,
) -> Option<(Decimal, Decimal)> {
    if let Some(mid) = mid(bid, ask) {
        return Some((mid, mid));
    }
    let quoted = [positive(bid), positive(ask), positive(last)];
    let high = quoted.iter().flatten().max().copied()?;
    let no_bid = bid.is_some_and(|b| b <= Decimal::ZERO);
    let low = if no_bid { Decimal::ZERO } else { quoted.iter().flatten().min().copied()? };
    Some((low, high))
}

/// Whole units for equities and options; for crypto the pair's base increment where the
/// bot's snapshot gives one ([`Bot::increments`]), else the broker's fixed decimals. Always
/// rounds down, so an order never exceeds the configured amount. Nothing left is a
/// rejection whose reason starts with `described` (where the size came from).
pub(super) fn round_size(
    asset_class: AssetClass,
    bot: &Bot,
    instrument: &str,
    raw: Decimal,
    described: impl FnOnce() -> String,
) -> Result<Decimal, OrderError> {
    let step = match asset_class {
        AssetClass::Crypto => bot.increments_for(instrument).map(|i| i.base_increment),
        _ => None,
    };
    let size = match (asset_class, step) {
        // More steps than a number holds: the sender's tiny price, refused for this bot as in [`entry_size`].
        (AssetClass::Crypto, Some(step)) => match floor_to_step(raw, step) {
            Some(size) => size,
            None => return Err(OrderError::SizeBeyondAny { described: described() }),
        },
        (AssetClass::Crypto, None) => {
            raw.round_dp_with_strategy(bot.broker.broker().crypto_quantity_scale(), RoundingStrategy::ToZero)
        }
        _ => decimal::trunc(raw),
    };
    let size = decimal::normalize(size);
    if decimal::not_positive(size) {
        let unit = match (asset_class, step) {
            (AssetClass::Crypto, Some(step)) => {
                format!("the base increment {} for {instrument} at {}", step.normalize(), bot.broker.broker().name())
            }
            (AssetClass::Crypto, None) => format!(
                "the smallest size {} accepts ({} decimals)",
                bot.broker.broker().name(),
                bot.broker.broker().crypto_quantity_scale()
            ),
            _ => "one whole unit".to_string(),
        };
        return Err(OrderError::SizeTooSmall { described: described(), unit });
    }
    Ok(size)
}

/// Refuses a crypto entry of `size` below the pair's minimum order size where the bot's snapshot gives one
/// ([`Bot::increments`]): under `base_min_size` in the coin, or, at `price` (the price it was sized by, where there
/// is one), under `quote_min_size` in money. Sent, the broker refused it after the sender heard processed.
pub(super) fn entry_minimums(
    asset_class: AssetClass,
    bot: &Bot,
    instrument: &str,
    size: Decimal,
    price: impl FnOnce() -> Option<Decimal>,
) -> Result<(), OrderError> {
    let Some(inc) = (asset_class == AssetClass::Crypto).then(|| bot.increments_for(instrument)).flatten() else {
        return Ok(());
    };
    let at = bot.broker.broker().name();
    let entry = || format!("bot {}'s entry of {} {instrument}", bot.id, size.normalize());
    if let Some(min) = inc.base_min_size.filter(|m| size < *m) {
        return Err(OrderError::SizeTooSmall {
            described: entry(),
            unit: format!("the minimum order size {} for {instrument} at {at}", min.normalize()),
        });
    }
    if let Some(min) = inc.quote_min_size {
        // A value past any number here is past any minimum.
        let value = price().and_then(|p| size.checked_mul(p)).filter(|v| *v < min);
        if let Some(value) = value {
            return Err(OrderError::SizeTooSmall {
                described: format!("{} (worth {})", entry(), value.normalize()),
                unit: format!("the minimum order value {} for {instrument} at {at}", min.normalize()),
            });
        }
    }
    Ok(())
}

/// Refuses a crypto CLOSE of `size` (the holding, rounded to the pair's increment) below the pair's minimum order
/// size where the bot's snapshot gives one: the broker refuses the sell, so it was sent and refused after the
/// sender heard processed. Such a holding cannot be sold by an order at all; the trader closes it at the broker.
/// `described` names the position.
pub(super) fn close_minimum(
    asset_class: AssetClass,
    bot: &Bot,
    instrument: &str,
    size: Decimal,
    described: impl FnOnce() -> String,
) -> Result<(), OrderError> {
    let min = (asset_class == AssetClass::Crypto)
        .then(|| bot.increments_for(instrument).and_then(|i| i.base_min_size))
        .flatten()
        .filter(|m| size < *m);
    match min {
        Some(min) => Err(OrderError::SizeTooSmall {
            described: described(),
            unit: format!(
                "the minimum order size {} for {instrument} at {}: a holding below the product's minimum order \
                 size cannot be sold by an order and must be closed at the broker",
                min.normalize(),
                bot.broker.broker().name()
            ),
        }),
        None => Ok(()),
    }
}
