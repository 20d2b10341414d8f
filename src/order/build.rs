//! From a decided alert to the actions one bot must take: size, price, time in force,
//! contracts. Sizes come from the bot's sizing, never from the alert (MODIFY aside).

use super::{overflow, AssetClass, BotAction, CryptoPair, Intent, Order, OrderError};
use crate::alert::{Action, Alert, Direction, Duration, OrderType};
use crate::decimal::Decimal;
use crate::strategy::{Bot, LimitTarget, OrderIntent, Quote, Sizing, Strategy, WorkingOrder};
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
///
/// OPEN sizes from the bot's sizing; CLOSE closes the whole position in the direction
/// (every matching position; option positions by their held legs, reversed); MODIFY
/// re-prices and/or re-sizes every working order on that side; CANCEL pulls the working
/// entry orders on that side.
pub fn build(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Vec<BotAction>, OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let coid = |part: usize| client_order_id_part(&s.id, ctx.dedup_key, &bot.id, decided.step, part);
    let same = |inst: &str| super::same_instrument(inst, &alert.instrument, s.asset_class);
    let option = s.asset_class == AssetClass::Option;
    match decided.action {
        Action::Open if option => option_open(ctx, decided, bot, coid(0)).map(|o| vec![BotAction::Place(o)]),
        Action::Close if option => option_close(ctx, decided, bot, &coid),
        Action::Open | Action::Close => {
            let open = decided.action == Action::Open;
            let intent = Intent::new(open, decided.direction);
            let quantity = if open {
                entry_size(s, bot, || Ok((sizing_price(s, alert)?, alert.instrument.clone())))?
            } else {
                let mut held = bot.positions.iter().filter(|p| p.direction == decided.direction && same(&p.instrument));
                let total = held.try_fold(Decimal::ZERO, |t, p| t.checked_add(p.quantity)).ok_or_else(overflow)?;
                if total.is_zero() {
                    return Ok(Vec::new());
                }
                total
            };
            let order = base_order(ctx, decided, intent, quantity, coid(0))?;
            Ok(vec![BotAction::Place(order)])
        }
        Action::Modify => {
            let working = bot
                .working_orders
                .iter()
                .filter(|o| o.is_working() && o.direction == decided.direction && same(&o.instrument));
            let mut out = Vec::new();
            for (n, w) in working.enumerate() {
                let intent = Intent::new(w.intent == OrderIntent::Entry, w.direction);
                let price = alert.price.or(w.price);
                if let Some(p) = price.filter(|p| !option && *p <= Decimal::ZERO) {
                    return Err(OrderError::Unfillable(format!(
                        "the limit price {p} for {} is not above zero",
                        w.instrument
                    )));
                }
                let quantity = match (alert.quantity, alert.notional) {
                    (Some(q), _) => round_size(s.asset_class, bot, q, || format!("MODIFY quantity {q}"))?,
                    (None, Some(n)) => {
                        let p = price.ok_or_else(|| {
                            OrderError::Rejected("MODIFY with a notional needs a price to size from".into())
                        })?;
                        let unit = unit_cost(s.asset_class, p)?;
                        if unit <= Decimal::ZERO {
                            return Err(OrderError::Rejected(format!(
                                "MODIFY with a notional needs a price above zero to size from (got {p})"
                            )));
                        }
                        let raw = n.checked_div(unit).ok_or_else(overflow)?;
                        round_size(s.asset_class, bot, raw, || {
                            format!("MODIFY notional {n} at {} a unit", unit.normalize())
                        })?
                    }
                    (None, None) => w.quantity,
                };
                let order = working_order(s.asset_class, w, intent, quantity, price, coid(n))?;
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
            for (n, w) in working.enumerate() {
                let order =
                    working_order(s.asset_class, w, Intent::new(true, w.direction), w.quantity, w.price, coid(n))?;
                out.push(BotAction::Cancel { order_id: w.id.clone(), order });
            }
            Ok(out)
        }
    }
}

/// Adds the working order's id to an error about it.
fn naming(e: OrderError, order_id: &str) -> OrderError {
    match e {
        OrderError::Unfillable(m) => OrderError::Unfillable(format!("{m} (working order {order_id})")),
        other => other,
    }
}

/// The order's symbol: the underlying for options (`SPX` for an `SPXW` order), the
/// instrument as given otherwise.
fn order_symbol(asset_class: AssetClass, instrument: &str) -> String {
    match asset_class {
        AssetClass::Option => super::option::underlying_of(instrument).to_ascii_uppercase(),
        _ => instrument.to_string(),
    }
}

/// An option entry: legs first (internal or external selection), then the size, which
/// for an amount-based sizing divides by the structure's net price × 100.
fn option_open(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    client_order_id: String,
) -> Result<Order, OrderError> {
    let s = ctx.strategy;
    let mut order = Order {
        asset_class: AssetClass::Option,
        symbol: order_symbol(AssetClass::Option, &decided.alert.instrument),
        pair: None,
        intent: Intent::new(true, decided.direction),
        quantity: Decimal::ZERO,
        order_type: decided.order_type,
        limit_price: None,
        price_effect: None,
        duration: decided.duration,
        legs: Vec::new(),
        client_order_id,
    };
    super::option::select_legs(ctx, decided, &mut order)?;
    order.quantity = entry_size(s, bot, || {
        let net = super::option::sizing_net(s, decided.alert, &order)?;
        Ok((net, format!("the {} order", order.symbol)))
    })?;
    Ok(order)
}

/// An option exit: every position in the direction, closed by reversing its held legs.
/// Positions holding the same structure close together (their quantities summed); a
/// different structure gets its own order.
fn option_close(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    coid: &dyn Fn(usize) -> String,
) -> Result<Vec<BotAction>, OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let mut groups: Vec<(Vec<super::OrderLeg>, Decimal)> = Vec::new();
    let held = bot.positions.iter().filter(|p| {
        p.direction == decided.direction && super::same_instrument(&p.instrument, &alert.instrument, s.asset_class)
    });
    for p in held {
        let what = format!("the {} {} position (quantity {})", decided.direction.as_str(), p.instrument, p.quantity);
        if p.legs.is_empty() {
            return Err(OrderError::Unfillable(format!("{what} has no option legs, so it cannot be closed")));
        }
        let legs = super::option::closing_legs(&super::option::parse_held(&p.legs, &what)?);
        match groups.iter_mut().find(|(l, _)| super::option::same_structure(l, &legs)) {
            Some((_, q)) => *q = q.checked_add(p.quantity).ok_or_else(overflow)?,
            None => groups.push((legs, p.quantity)),
        }
    }
    let limit = decided.order_type == OrderType::Limit;
    if groups.len() > 1 && limit && alert.price.is_some() {
        return Err(OrderError::Unfillable(format!(
            "the {} {} position is held as {} different option structures, and one alert price cannot price them all; \
             close it with a market order, or without a price so each is priced from its quotes",
            decided.direction.as_str(),
            alert.instrument,
            groups.len()
        )));
    }
    let mut out = Vec::with_capacity(groups.len());
    for (n, (legs, quantity)) in groups.into_iter().enumerate() {
        let mut order = Order {
            asset_class: AssetClass::Option,
            symbol: order_symbol(AssetClass::Option, &alert.instrument),
            pair: None,
            intent: Intent::new(false, decided.direction),
            quantity,
            order_type: decided.order_type,
            limit_price: None,
            price_effect: None,
            duration: decided.duration,
            legs,
            client_order_id: coid(n),
        };
        if limit {
            let net = match alert.price {
                Some(p) => p,
                None => super::option::limit_from_leg_quotes(s, &order.legs)?,
            };
            super::option::set_net_price(&mut order, net);
        }
        out.push(BotAction::Place(order));
    }
    Ok(out)
}

/// A working order as an [`Order`] standing at `quantity` and `price` (the terms a
/// replace asks for, or the ones a cancel pulls). A market order has no limit price.
fn working_order(
    asset_class: AssetClass,
    w: &WorkingOrder,
    intent: Intent,
    quantity: Decimal,
    price: Option<Decimal>,
    client_order_id: String,
) -> Result<Order, OrderError> {
    let price = price.filter(|_| w.order_type == OrderType::Limit);
    let mut order = Order {
        asset_class,
        symbol: order_symbol(asset_class, &w.instrument),
        pair: crypto_pair(asset_class, &w.instrument)?,
        intent,
        quantity,
        order_type: w.order_type,
        limit_price: price.map(|p| p.abs()),
        price_effect: None,
        duration: w.duration,
        legs: Vec::new(),
        client_order_id,
    };
    if asset_class == AssetClass::Option {
        super::option::held_legs(&mut order, &w.legs, price).map_err(|e| naming(e, &w.id))?;
    }
    Ok(order)
}

fn base_order(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
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
    if decided.order_type == OrderType::Limit {
        order.limit_price = Some(match alert.price {
            Some(p) if p > Decimal::ZERO => p,
            Some(p) => {
                return Err(OrderError::Unfillable(format!(
                    "the limit price {p} for {} is not above zero",
                    alert.instrument
                )))
            }
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

/// The price the strategy's Limit Target names, from the snapshot's quote, on the tick
/// (the quote's `tick`, else [`default_tick`]); an exact half goes to the passive side.
pub fn limit_from_quote(s: &Strategy, instrument: &str, intent: Intent) -> Result<Decimal, OrderError> {
    if s.limit_target == LimitTarget::AlertPrice {
        return Err(OrderError::Rejected(
            "the strategy's Limit Target is Alert Price and the alert has no price".into(),
        ));
    }
    let quote = find_quote(s, instrument);
    let missing = |what: &str| {
        OrderError::Unfillable(format!(
            "no {what} quote for {instrument} in the market data, so the limit price cannot be set"
        ))
    };
    let quote = quote.ok_or_else(|| missing("bid/ask"))?;
    let bid = || quote.bid.ok_or_else(|| missing("bid"));
    let ask = || quote.ask.ok_or_else(|| missing("ask"));
    let spread = || -> Result<(Decimal, Decimal), OrderError> {
        let (b, a) = (bid()?, ask()?);
        if b > a {
            return Err(OrderError::Unfillable(format!(
                "the quote for {instrument} is crossed (bid {b} above ask {a}), so the limit price cannot be set"
            )));
        }
        Ok((b, a))
    };
    let raw = match s.limit_target {
        LimitTarget::AlertPrice | LimitTarget::Bid => bid()?,
        LimitTarget::Ask => ask()?,
        LimitTarget::Mid => {
            let (b, a) = spread()?;
            b.checked_add(a).ok_or_else(overflow)? / Decimal::TWO
        }
        LimitTarget::Custom(f) => {
            let (b, a) = spread()?;
            let width = a.checked_sub(b).and_then(|w| w.checked_mul(f)).ok_or_else(overflow)?;
            b.checked_add(width).ok_or_else(overflow)?
        }
    };
    if raw <= Decimal::ZERO {
        return Err(OrderError::Unfillable(format!(
            "the quote for {instrument} gives a limit price of {raw}, which is not above zero"
        )));
    }
    let tick = quote.tick.filter(|t| *t > Decimal::ZERO).unwrap_or_else(|| default_tick(s.asset_class, raw));
    Ok(round_to_tick(raw, tick, intent.is_buy()))
}

/// The instrument's quote in the snapshot: by its own spelling, else any spelling of
/// the same instrument (`BTC/USD` for `BTCUSD`).
fn find_quote<'a>(s: &'a Strategy, instrument: &str) -> Option<&'a Quote> {
    s.market.quotes.get(instrument).or_else(|| {
        s.market.quotes.iter().find(|(k, _)| super::same_instrument(k, instrument, s.asset_class)).map(|(_, q)| q)
    })
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

/// An entry's size from the bot's sizing. `unit_price` gives the price sizing divides
/// by and what it is the price of (for messages); it is asked only for amount-based
/// sizings, so a fixed quantity needs no market data.
fn entry_size(
    s: &Strategy,
    bot: &Bot,
    unit_price: impl FnOnce() -> Result<(Decimal, String), OrderError>,
) -> Result<Decimal, OrderError> {
    let (amount, described) = match bot.sizing {
        Sizing::FixedQuantity(q) => {
            return round_size(s.asset_class, bot, q, || format!("bot {}'s sizing (fixed_quantity {q})", bot.id))
        }
        Sizing::FixedNotional(a) => (a, format!("bot {}'s sizing (fixed_notional {a})", bot.id)),
        Sizing::PercentOfEquity(p) => {
            let equity = bot.equity.ok_or_else(|| {
                OrderError::Unfillable(format!("bot {} has percent_of_equity sizing but no equity", bot.id))
            })?;
            let amount = equity.checked_mul(p).ok_or_else(overflow)? / Decimal::ONE_HUNDRED;
            (amount, format!("bot {}'s sizing (percent_of_equity {p} of equity {equity} = {amount})", bot.id))
        }
    };
    let (price, what) = unit_price()?;
    let unit = unit_cost(s.asset_class, price)?;
    if unit <= Decimal::ZERO {
        return Err(OrderError::Unfillable(format!("the price for sizing {what} is not above zero")));
    }
    let raw = amount.checked_div(unit).ok_or_else(overflow)?;
    round_size(s.asset_class, bot, raw, || format!("{described} at {} a unit", unit.normalize()))
}

/// What one unit costs at `price`: the price itself, or for options the net price's
/// magnitude × the 100-share multiplier.
fn unit_cost(asset_class: AssetClass, price: Decimal) -> Result<Decimal, OrderError> {
    match asset_class {
        AssetClass::Option => price.abs().checked_mul(Decimal::ONE_HUNDRED).ok_or_else(overflow),
        _ => Ok(price),
    }
}

/// The price sizing divides by: the alert's price, else the quote's mid, else its last.
fn sizing_price(s: &Strategy, alert: &Alert) -> Result<Decimal, OrderError> {
    if let Some(p) = alert.price {
        return Ok(p);
    }
    match find_quote(s, &alert.instrument) {
        Some(q) => match (q.bid, q.ask, q.last) {
            (Some(b), Some(a), _) => Ok(b.checked_add(a).ok_or_else(overflow)? / Decimal::TWO),
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
/// rounds down, so an order never exceeds the configured amount. Nothing left is a
/// rejection whose reason starts with `described` (where the size came from).
fn round_size(
    asset_class: AssetClass,
    bot: &Bot,
    raw: Decimal,
    described: impl FnOnce() -> String,
) -> Result<Decimal, OrderError> {
    let size = match asset_class {
        AssetClass::Crypto => {
            raw.round_dp_with_strategy(bot.broker.broker().crypto_quantity_scale(), RoundingStrategy::ToZero)
        }
        _ => raw.trunc(),
    }
    .normalize();
    if size <= Decimal::ZERO {
        let unit = match asset_class {
            AssetClass::Crypto => format!(
                "the smallest size {} accepts ({} decimals)",
                bot.broker.broker().name(),
                bot.broker.broker().crypto_quantity_scale()
            ),
            _ => "one whole unit".to_string(),
        };
        return Err(OrderError::Rejected(format!("{} comes to less than {unit}", described())));
    }
    Ok(size)
}

/// The client order id: derived from the strategy, the dedup key, the bot and the step,
/// so a resend of the same delivery can never become a second order at brokers that
/// honour client order ids. 32 characters, within every broker's limit.
pub fn client_order_id(strategy_id: &str, dedup_key: &str, bot_id: &str, step: usize) -> String {
    client_order_id_part(strategy_id, dedup_key, bot_id, step, 0)
}

/// The client order id of the `part`-th order of one step, for steps that yield several
/// (a MODIFY or CANCEL of several working orders, a CLOSE of several option
/// structures). Part 0 is [`client_order_id`].
pub fn client_order_id_part(strategy_id: &str, dedup_key: &str, bot_id: &str, step: usize, part: usize) -> String {
    let mut h = Sha256::new();
    // The dedup key is itself a SHA-256 digest, so its first 128 bits, raw, identify the
    // delivery; with short length prefixes the whole input then fits one SHA-256 block
    // for ordinary strategy and bot ids, which halves the hashing per bot.
    match hex16(dedup_key) {
        Some(raw) => {
            h.update([1u8]);
            h.update(raw);
        }
        None => {
            h.update([0u8]);
            field(&mut h, dedup_key.as_bytes());
        }
    }
    field(&mut h, strategy_id.as_bytes());
    field(&mut h, bot_id.as_bytes());
    h.update((step as u32).to_le_bytes());
    h.update((part as u32).to_le_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(32);
    out.push_str("swh-");
    for b in &digest[..14] {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

/// A length-prefixed field: one byte for lengths under 255, else 255 and eight bytes, so
/// no two different field lists hash the same input.
fn field(h: &mut Sha256, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(n) if n < u8::MAX => h.update([n]),
        _ => {
            h.update([u8::MAX]);
            h.update((bytes.len() as u64).to_le_bytes());
        }
    }
    h.update(bytes);
}

/// The first 16 bytes of a hex dedup key (64 lowercase hex characters), if it is one.
fn hex16(key: &str) -> Option<[u8; 16]> {
    let b = key.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = nibble(b[2 * i])? << 4 | nibble(b[2 * i + 1])?;
    }
    Some(out)
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
