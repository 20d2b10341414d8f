//! From a decided alert to the actions one bot must take: size, price, time in force,
//! contracts. Sizes come from the bot's sizing, never from the alert (MODIFY aside).

use super::{AssetClass, BotAction, CryptoPair, Intent, Order, OrderError};
use crate::alert::{Action, Alert, Direction, Duration, OrderType};
use crate::broker::BrokerId;
use crate::decimal::Decimal;
use crate::strategy::{Bot, LimitTarget, OrderIntent, Sizing, Strategy};
use rust_decimal::RoundingStrategy;
use sha2::{Digest, Sha256};

/// What stays the same for every bot of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The strategy snapshot.
    pub strategy: &'a Strategy,
    /// The delivery time, Unix milliseconds (for option expirations).
    pub now_ms: i64,
    /// The delivery's dedup key (hex), the root of every client order id.
    pub dedup_key: &'a str,
}

/// One alert after the decision: action and direction resolved, defaults applied.
#[derive(Debug, Clone, Copy)]
pub struct Decided<'a> {
    /// Position of this alert in the delivery (a reversal has steps 0 and 1).
    pub step: usize,
    /// Resolved action.
    pub action: Action,
    /// Resolved direction.
    pub direction: Direction,
    /// Order type: the alert's, else the strategy's.
    pub order_type: OrderType,
    /// Time in force: the alert's, else the strategy's.
    pub duration: Duration,
    /// The alert as parsed.
    pub alert: &'a Alert,
}

/// The actions `bot` must take for `decided`. An empty list means the bot has nothing
/// to do (for example no position to close).
pub fn build(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Vec<BotAction>, OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let client_order_id = client_order_id(&s.id, ctx.dedup_key, &bot.id, decided.step);
    let same = |inst: &str| super::same_instrument(inst, &alert.instrument, s.asset_class);
    match decided.action {
        Action::Open | Action::Close => {
            let open = decided.action == Action::Open;
            let intent = Intent::new(open, decided.direction);
            let quantity = if open {
                entry_size(ctx, decided, bot)?
            } else {
                let held = bot.positions.iter().filter(|p| p.direction == decided.direction && same(&p.instrument));
                let total: Decimal = held.map(|p| p.quantity).sum();
                if total.is_zero() {
                    return Ok(Vec::new());
                }
                total
            };
            let order = base_order(ctx, decided, bot, intent, quantity, client_order_id)?;
            Ok(vec![BotAction::Place(order)])
        }
        Action::Modify => {
            let working = bot
                .working_orders
                .iter()
                .filter(|o| o.is_working() && o.direction == decided.direction && same(&o.instrument));
            let mut out = Vec::new();
            for w in working {
                let intent = Intent::new(w.intent == OrderIntent::Entry, w.direction);
                let price = alert.price.or(w.price);
                let quantity = match (alert.quantity, alert.notional) {
                    (Some(q), _) => round_size(s.asset_class, bot, q)?,
                    (None, Some(n)) => {
                        let p = price.ok_or_else(|| {
                            OrderError::Rejected("MODIFY with a notional needs a price to size from".into())
                        })?;
                        round_size(s.asset_class, bot, n / p)?
                    }
                    (None, None) => w.quantity,
                };
                let mut order = Order {
                    asset_class: s.asset_class,
                    symbol: w.instrument.clone(),
                    pair: crypto_pair(s.asset_class, &w.instrument)?,
                    intent,
                    quantity,
                    order_type: w.order_type,
                    limit_price: price.map(|p| p.abs()),
                    price_effect: None,
                    duration: w.duration,
                    legs: Vec::new(),
                    client_order_id: client_order_id.clone(),
                };
                if s.asset_class == AssetClass::Option {
                    super::option::held_legs(&mut order, &w.legs, price)?;
                }
                let quantity_changed = order.quantity != w.quantity;
                out.push(BotAction::Replace { order_id: w.id.clone(), order, quantity_changed });
            }
            Ok(out)
        }
        Action::Cancel => {
            let working = bot.working_orders.iter().filter(|o| {
                o.is_working()
                    && o.intent == OrderIntent::Entry
                    && o.direction == decided.direction
                    && same(&o.instrument)
            });
            let mut out = Vec::new();
            for w in working {
                let mut order = Order {
                    asset_class: s.asset_class,
                    symbol: w.instrument.clone(),
                    pair: crypto_pair(s.asset_class, &w.instrument)?,
                    intent: Intent::new(true, w.direction),
                    quantity: w.quantity,
                    order_type: w.order_type,
                    limit_price: w.price.map(|p| p.abs()),
                    price_effect: None,
                    duration: w.duration,
                    legs: Vec::new(),
                    client_order_id: client_order_id.clone(),
                };
                if s.asset_class == AssetClass::Option {
                    super::option::held_legs(&mut order, &w.legs, w.price)?;
                }
                out.push(BotAction::Cancel { order_id: w.id.clone(), order });
            }
            Ok(out)
        }
    }
}

fn base_order(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    intent: Intent,
    quantity: Decimal,
    client_order_id: String,
) -> Result<Order, OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let mut order = Order {
        asset_class: s.asset_class,
        symbol: alert.instrument.clone(),
        pair: crypto_pair(s.asset_class, &alert.instrument)?,
        intent,
        quantity,
        order_type: decided.order_type,
        limit_price: None,
        price_effect: None,
        duration: decided.duration,
        legs: Vec::new(),
        client_order_id,
    };
    if s.asset_class == AssetClass::Option {
        super::option::select_legs(ctx, decided, bot, &mut order)?;
        return Ok(order);
    }
    if decided.order_type == OrderType::Limit {
        order.limit_price = Some(match alert.price {
            Some(p) => p,
            None => limit_from_quote(s, &alert.instrument, intent)?,
        });
    }
    Ok(order)
}

fn crypto_pair(asset_class: AssetClass, instrument: &str) -> Result<Option<CryptoPair>, OrderError> {
    if asset_class != AssetClass::Crypto {
        return Ok(None);
    }
    CryptoPair::parse(instrument).map(Some).ok_or_else(|| {
        OrderError::Unfillable(format!("{instrument} is not a crypto pair this service knows (send BTCUSD or BTC/USD)"))
    })
}

/// The price the strategy's Limit Target names, from the snapshot's quote, on the tick.
pub fn limit_from_quote(s: &Strategy, instrument: &str, intent: Intent) -> Result<Decimal, OrderError> {
    let quote = s.market.quotes.get(instrument).or_else(|| {
        s.market.quotes.iter().find(|(k, _)| super::same_instrument(k, instrument, s.asset_class)).map(|(_, q)| q)
    });
    let missing = |what: &str| {
        OrderError::Unfillable(format!(
            "no {what} quote for {instrument} in the market data, so the limit price cannot be set"
        ))
    };
    let quote = quote.ok_or_else(|| missing("bid/ask"))?;
    let bid = || quote.bid.ok_or_else(|| missing("bid"));
    let ask = || quote.ask.ok_or_else(|| missing("ask"));
    let raw = match s.limit_target {
        LimitTarget::AlertPrice => {
            return Err(OrderError::Rejected(
                "the strategy's Limit Target is Alert Price and the alert has no price".into(),
            ))
        }
        LimitTarget::Bid => bid()?,
        LimitTarget::Ask => ask()?,
        LimitTarget::Mid => (bid()? + ask()?) / Decimal::TWO,
        LimitTarget::Custom(f) => {
            let b = bid()?;
            b + f * (ask()? - b)
        }
    };
    let tick = quote.tick.unwrap_or_else(|| default_tick(s.asset_class, raw));
    Ok(round_to_tick(raw, tick, intent.is_buy()))
}

/// The minimum price increment when the snapshot gives none: equities $0.01 (≥ $1) or
/// $0.0001 (sub-dollar, Reg NMS 612); options $0.05 under $3 and $0.10 above; crypto $0.01.
pub fn default_tick(asset_class: AssetClass, price: Decimal) -> Decimal {
    match asset_class {
        AssetClass::Equity if price.abs() < Decimal::ONE => Decimal::new(1, 4),
        AssetClass::Equity | AssetClass::Crypto => Decimal::new(1, 2),
        AssetClass::Option if price.abs() < Decimal::from(3) => Decimal::new(5, 2),
        AssetClass::Option => Decimal::new(10, 2),
    }
}

/// Rounds to the nearest tick; an exact half goes to the passive side (down for a buy,
/// up for a sell), so rounding never makes the order more aggressive than the target.
pub fn round_to_tick(price: Decimal, tick: Decimal, buy: bool) -> Decimal {
    if tick <= Decimal::ZERO {
        return price;
    }
    let units = price / tick;
    let strategy = if buy { RoundingStrategy::MidpointTowardZero } else { RoundingStrategy::MidpointAwayFromZero };
    let rounded = units.round_dp_with_strategy(0, strategy) * tick;
    rounded.round_dp(tick.scale())
}

fn entry_size(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Decimal, OrderError> {
    let s = ctx.strategy;
    let amount = match bot.sizing {
        Sizing::FixedQuantity(q) => return round_size(s.asset_class, bot, q),
        Sizing::FixedNotional(a) => a,
        Sizing::PercentOfEquity(p) => {
            let equity = bot.equity.ok_or_else(|| {
                OrderError::Unfillable(format!("bot {} has percent_of_equity sizing but no equity", bot.id))
            })?;
            equity * p / Decimal::ONE_HUNDRED
        }
    };
    let price = sizing_price(s, decided.alert)?;
    let unit = if s.asset_class == AssetClass::Option { price.abs() * Decimal::ONE_HUNDRED } else { price };
    if unit <= Decimal::ZERO {
        return Err(OrderError::Unfillable(format!(
            "the price for sizing {} is not above zero",
            decided.alert.instrument
        )));
    }
    let size = round_size(s.asset_class, bot, amount / unit)?;
    Ok(size)
}

/// The price sizing divides by: the alert's price, else the quote's mid, else its last.
fn sizing_price(s: &Strategy, alert: &Alert) -> Result<Decimal, OrderError> {
    if let Some(p) = alert.price {
        return Ok(p);
    }
    let quote = s.market.quotes.get(&alert.instrument).or_else(|| {
        s.market
            .quotes
            .iter()
            .find(|(k, _)| super::same_instrument(k, &alert.instrument, s.asset_class))
            .map(|(_, q)| q)
    });
    match quote {
        Some(q) => match (q.bid, q.ask, q.last) {
            (Some(b), Some(a), _) => Ok((b + a) / Decimal::TWO),
            (_, _, Some(l)) => Ok(l),
            _ => Err(OrderError::Unfillable(format!(
                "the quote for {} has no bid/ask or last price to size from",
                alert.instrument
            ))),
        },
        None => Err(OrderError::Unfillable(format!(
            "no price to size {} from: the alert has no price and the market data has no quote",
            alert.instrument
        ))),
    }
}

/// Whole units for equities and options; the broker's increment for crypto. Always
/// rounds down, so an order never exceeds the configured amount.
fn round_size(asset_class: AssetClass, bot: &Bot, raw: Decimal) -> Result<Decimal, OrderError> {
    let size = match asset_class {
        AssetClass::Crypto => {
            raw.round_dp_with_strategy(bot.broker.broker().crypto_quantity_scale(), RoundingStrategy::ToZero)
        }
        _ => raw.trunc(),
    }
    .normalize();
    if size <= Decimal::ZERO {
        let unit =
            if asset_class == AssetClass::Crypto { "the smallest size the broker accepts" } else { "one whole unit" };
        return Err(OrderError::Rejected(format!(
            "bot {}'s sizing ({} {}) comes to less than {unit}",
            bot.id,
            bot.sizing.kind(),
            match bot.sizing {
                Sizing::FixedQuantity(v) | Sizing::FixedNotional(v) | Sizing::PercentOfEquity(v) => v,
            }
        )));
    }
    Ok(size)
}

/// The client order id: derived from the strategy, the dedup key, the bot and the step,
/// so a resend of the same delivery can never become a second order at brokers that
/// honour client order ids. 32 characters, within every broker's limit.
pub fn client_order_id(strategy_id: &str, dedup_key: &str, bot_id: &str, step: usize) -> String {
    let mut h = Sha256::new();
    for part in [strategy_id.as_bytes(), dedup_key.as_bytes(), bot_id.as_bytes(), &step.to_le_bytes()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    let digest = h.finalize();
    let mut out = String::with_capacity(32);
    out.push_str("swh-");
    for b in &digest[..14] {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

/// Which broker formats a bot's orders (re-exported for hosts that route by bot).
pub fn broker_of(bot: &Bot) -> BrokerId {
    bot.broker
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
    fn client_order_ids_are_stable_and_distinct() {
        let a = client_order_id("s", "k", "bot", 0);
        assert_eq!(a, client_order_id("s", "k", "bot", 0));
        assert_eq!(a.len(), 32);
        assert!(a.starts_with("swh-"));
        assert_ne!(a, client_order_id("s", "k", "bot", 1));
        assert_ne!(a, client_order_id("s", "k2", "bot", 0));
        assert_ne!(client_order_id("ab", "c", "d", 0), client_order_id("a", "bc", "d", 0));
    }

    #[test]
    fn default_ticks() {
        let d = |s| crate::decimal::parse(s).unwrap();
        assert_eq!(default_tick(AssetClass::Equity, d("190")), d("0.01"));
        assert_eq!(default_tick(AssetClass::Equity, d("0.5")), d("0.0001"));
        assert_eq!(default_tick(AssetClass::Option, d("2.9")), d("0.05"));
        assert_eq!(default_tick(AssetClass::Option, d("3.1")), d("0.10"));
    }
}
