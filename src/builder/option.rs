//! The legs of option orders (the contracts themselves are [`crate::model::OptionContract`]):
//! chosen by the strategy's leg rules and the option chain (internal
//! selection), taken from the alert (external selection), or taken from a held position
//! or working order. Prices are net prices of the whole structure: positive for a debit
//! (you pay), negative for a credit (you receive).
//!
//! Choices the specification leaves open:
//! - **Today** is the date in New York ([`crate::model::eastern_date`]); an expiration qualifies when
//!   `min_days <= expiration − today <= max_days`, and the nearest qualifying one listed in
//!   the chain wins. Dates the chain does not list (holidays) are never chosen.
//! - **At-the-money** is the listed strike nearest the chain's `underlying_price`; exactly
//!   halfway between two strikes, the lower one. `atm_offset` counts listed strikes.
//! - **Single legs** take their debit/credit from the leg's action (a sell receives), so a
//!   premium sent as a positive price works; spreads follow the price's sign. Leg
//!   `price`s are premiums: their sign is ignored and the action decides.
//! - **Limit Target for options** ([`limit_from_leg_quotes`]): a single leg like a stock;
//!   a spread quoted as the combination the order trades, so `bid` is its patient end
//!   and `ask` its marketable end, debit or credit alike.
//! - An alert's price is sent as given (not moved to a tick); prices computed from quotes
//!   are rounded to the tick, halves to the patient side.
//! - **Ratios** are put in their simplest form before anything is priced or sized ([`in_simplest_ratios`]): a
//!   structure written 2:2 goes out as twice as many 1:1 units, since brokers price a structure per such unit.

use super::price::{default_tick, round_to_tick};
use super::BuildContext;
use crate::alert::{Alert, QuotePrice};
use crate::decide::Decided;
use crate::decimal::Decimal;
use crate::model::{
    dated_root, eastern_date, first_tradable_expiration, last_trading_day, root_for, series_root, simplest_factor,
    snippet, trades_at, underlying_of, AssetClass, Date, Direction, InstrumentKey, LegAction, OptionContract, Order,
    OrderError, OrderLeg, OrderType, PriceEffect, MAX_LEGS,
};
use crate::strategy::{ExpirationRule, HeldLeg, LimitTarget, OptionChain, OptionsConfig, Quote, Selection, Strategy};

// ---------------------------------------------------------------------------------------
// Legs of an entry
// ---------------------------------------------------------------------------------------

/// Fills an entry's legs and, for a limit order, its net price and price effect.
///
/// Internal selection takes the legs from the strategy's leg rules for the alert's
/// direction, on the nearest allowed expiration of the option chain and strikes counted
/// from at-the-money; external selection takes them from the alert's legs. The order's
/// `symbol` becomes the underlying (`SPX`, while the legs' root is `SPXW`).
///
/// The legs are put in their simplest ratios ([`in_simplest_ratios`]); the factor they were divided by is returned,
/// for the caller to multiply the order's units by, so that it trades the contracts the rules wrote.
///
/// The limit price is the alert's `price` (the net of the whole structure, a unit in simplest ratios); else, for
/// external selection, the legs' prices summed (buys added, sells subtracted); else the
/// strategy's Limit Target computed from the legs' quotes (see [`limit_from_leg_quotes`]).
pub fn select_legs(ctx: &BuildContext<'_>, decided: &Decided<'_>, order: &mut Order) -> Result<u32, OrderError> {
    let s = ctx.strategy;
    let cfg = s
        .options
        .as_ref()
        .ok_or_else(|| OrderError::Unfillable("the strategy trades options but has no `options` settings".into()))?;
    let alert = decided.alert;
    let underlying = underlying_of(&alert.instrument).to_ascii_uppercase();
    // An alert on a series (RUTW) asks for its contracts: built on the index's root, they would not exist.
    let root = series_root(&alert.instrument).unwrap_or_else(|| root_for(&underlying));
    let days =
        Days { today: eastern_date(ctx.now_ms), first: first_tradable_expiration(ctx.now_ms), now_ms: ctx.now_ms };
    order.legs = match cfg.selection {
        Selection::Internal => internal_legs(s, cfg, &underlying, &root, decided.direction, days)?,
        Selection::External => external_legs(s, cfg, alert, &underlying, &root, days, decided.direction)?,
    };
    let factor = in_simplest_ratios(&mut order.legs);
    // NDX and VIX list their series under another root by date (NDXP, VIXW): each leg takes its expiration's. A
    // series that settles on the opening prices stops trading the day before it expires.
    for leg in &mut order.legs {
        let c = &mut leg.contract;
        c.root = dated_root(&c.root, c.expiration);
        let last = last_trading_day(&c.root, c.expiration);
        if !trades_at(&c.root, c.expiration, days.now_ms) {
            return Err(OrderError::Unfillable(format!(
                "{} expires on {} and is AM-settled: it traded last on {last}, through its session's end in New York \
                 (a quarter hour past the {} close); choose a later expiration",
                c.occ_unpadded(),
                c.expiration,
                last.close_time()
            )));
        }
    }
    order.symbol = underlying.into();
    order.limit_price = None;
    order.price_effect = None;
    if decided.order_type == OrderType::Limit {
        let net = entry_limit_net(s, cfg.selection, alert, &order.legs)?;
        set_net_price(order, net)?;
    }
    Ok(factor)
}

/// Divides a structure's leg ratios by their greatest common divisor and returns it: the factor the order's units
/// are multiplied by to trade the same contracts (a vertical written 2:2, one unit, is two units of 1:1). Brokers
/// count and price a structure per unit in its simplest ratios (one reads an order's units as its legs' greatest
/// common divisor, another wants the ratios in simplest form), so every net price here is per such unit:
/// priced as written, a 2:2 vertical's net (twice one vertical's) went out as one vertical's price, a debit at twice
/// the target and a credit that never filled. A single leg is left as it is: it is priced per contract whatever its
/// ratio ([`held_factor`]).
pub fn in_simplest_ratios(legs: &mut [OrderLeg]) -> u32 {
    let factor = simplest_factor(legs.iter().map(|l| l.ratio));
    for leg in legs.iter_mut() {
        leg.ratio = leg.ratio.max(1) / factor;
    }
    factor
}

/// The factor [`in_simplest_ratios`] divides held legs' ratios by: 1 for a single leg, else their greatest common
/// divisor. One unit of an order listed with these legs is that many units in simplest ratios, at that many times
/// their price.
pub fn held_factor(legs: &[HeldLeg]) -> u32 {
    simplest_factor(legs.iter().map(|l| l.ratio))
}

fn internal_legs(
    s: &Strategy,
    cfg: &OptionsConfig,
    underlying: &str,
    root: &str,
    direction: Direction,
    days: Days,
) -> Result<Vec<OrderLeg>, OrderError> {
    let (rules, key) = match direction {
        Direction::Long => (&cfg.legs.long, "long"),
        Direction::Short => (&cfg.legs.short, "short"),
    };
    if rules.is_empty() {
        return Err(OrderError::Unfillable(format!(
            "the strategy has no option leg rules for {} entries (`options.legs.{key}` is empty)",
            direction.as_str()
        )));
    }
    if rules.len() > MAX_LEGS {
        return Err(OrderError::Unfillable(format!(
            "`options.legs.{key}` has {} legs; an order supports at most {MAX_LEGS}",
            rules.len()
        )));
    }
    let chain = chain_for_root(s, underlying, root)?;
    let expiration =
        pick_expiration(chain, &cfg.expiration, days, root).ok_or_else(|| no_expiration(underlying, cfg, days))?;
    let mut legs = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        if !rule.action.is_open() {
            return Err(OrderError::Unfillable(format!(
                "`options.legs.{key}[{i}]` is {}; an entry's legs open (buy_to_open or sell_to_open)",
                rule.action.as_str()
            )));
        }
        let strike = strike_for(chain, underlying, rule.strike.atm_offset)?;
        let contract = OptionContract { root: root.to_owned(), expiration, side: rule.side, strike };
        if let Some(problem) = contract.osi_problem() {
            return Err(OrderError::Unfillable(format!("`options.legs.{key}[{i}]`: {problem}")));
        }
        legs.push(OrderLeg { contract, action: rule.action, ratio: rule.ratio.max(1) });
    }
    distinct(&legs, &format!("`options.legs.{key}`"))?;
    Ok(legs)
}

fn external_legs(
    s: &Strategy,
    cfg: &OptionsConfig,
    alert: &Alert,
    underlying: &str,
    root: &str,
    days: Days,
    direction: Direction,
) -> Result<Vec<OrderLeg>, OrderError> {
    if alert.legs.is_empty() {
        return Err(OrderError::Unfillable(
            "the strategy takes its contracts from the alert (external selection) and the alert has no legs".into(),
        ));
    }
    if alert.legs.len() > MAX_LEGS {
        return Err(OrderError::Unfillable(format!(
            "the alert has {} option legs; an order supports at most {MAX_LEGS}",
            alert.legs.len()
        )));
    }
    let mut default_expiration: Option<Date> = None;
    let mut legs = Vec::with_capacity(alert.legs.len());
    for (i, leg) in alert.legs.iter().enumerate() {
        let name = format!("legs[{i}]");
        let unfillable = |m: String| OrderError::Unfillable(format!("{name} {m}"));
        // One contract without an action (an option ticker with `entry`, which the parse cannot read a side from
        // before the rules give the direction): the entry's direction says it, as for `buy` and `sell`. Refused,
        // every retry of the entry was answered 500. Legs of a structure must each say theirs.
        let single = (alert.legs.len() == 1).then_some(match direction {
            Direction::Long => LegAction::BuyToOpen,
            Direction::Short => LegAction::SellToOpen,
        });
        let action = leg.action.or(single).ok_or_else(|| {
            unfillable("has no action (buy_to_open, sell_to_open, buy_to_close or sell_to_close)".into())
        })?;
        // The legs of an entry, sized by the bot's sizing: a closing leg would close part of a position at a
        // size the alert never sets (a CLOSE takes its legs from the position).
        if !action.is_open() {
            return Err(unfillable(format!(
                "is {}; an entry's legs open (buy_to_open or sell_to_open), and a CLOSE takes its legs from the \
                 position",
                action.as_str()
            )));
        }
        let contract = match &leg.symbol {
            Some(symbol) => {
                let mut c = OptionContract::parse_occ(symbol)
                    .ok_or_else(|| unfillable(format!("symbol {:?} is not an OCC option symbol", snippet(symbol))))?;
                let disagrees = leg.side.is_some_and(|x| x != c.side)
                    || leg.strike.is_some_and(|k| k != c.strike)
                    || leg.expiration.is_some_and(|e| e != c.expiration);
                if disagrees {
                    return Err(unfillable(format!(
                        "symbol {} disagrees with the leg's side, strike or expiration",
                        c.occ_unpadded()
                    )));
                }
                if InstrumentKey::new(&c.root, AssetClass::Option) != InstrumentKey::new(underlying, AssetClass::Option)
                {
                    return Err(unfillable(format!(
                        "symbol {} is an option on {}, not on the alert's {underlying}",
                        c.occ_unpadded(),
                        underlying_of(&c.root)
                    )));
                }
                // `SPX` trades as the PM-settled `SPXW` (and `RUT` as `RUTW`), whether the leg names it by its
                // fields or by an OCC symbol.
                c.root = root_for(&c.root);
                c
            }
            None => {
                let side =
                    leg.side.ok_or_else(|| unfillable("has neither an OCC symbol nor a side (CALL or PUT)".into()))?;
                let strike = leg.strike.ok_or_else(|| unfillable("has neither an OCC symbol nor a strike".into()))?;
                let expiration = match (leg.expiration, default_expiration) {
                    (Some(e), _) | (None, Some(e)) => e,
                    (None, None) => {
                        let chain = chain_for_root(s, underlying, root)
                            .map_err(|e| unfillable(format!("has no expiration, and {e}")))?;
                        let e = pick_expiration(chain, &cfg.expiration, days, root).ok_or_else(|| {
                            unfillable(format!("has no expiration, and {}", no_expiration(underlying, cfg, days)))
                        })?;
                        default_expiration = Some(e);
                        e
                    }
                };
                OptionContract { root: root.to_owned(), expiration, side, strike }
            }
        };
        if let Some(problem) = contract.osi_problem() {
            return Err(unfillable(format!("cannot be traded: {problem}")));
        }
        if contract.expiration < days.today {
            let today = days.today;
            return Err(unfillable(format!("expired on {} (today is {today} in New York)", contract.expiration)));
        }
        if contract.expiration < days.first {
            return Err(unfillable(format!(
                "expires today ({}) and stopped trading at the {} close in New York",
                contract.expiration,
                contract.expiration.close_time()
            )));
        }
        listed(s, underlying, &contract).map_err(unfillable)?;
        legs.push(OrderLeg { contract, action, ratio: 1 });
    }
    distinct(&legs, "the alert's legs")?;
    Ok(legs)
}

/// Whether an alert's contract can fill: listed in the snapshot's option chain for the
/// underlying when there is one (its expiration and its strike), else at least expiring
/// on a trading day, neither a weekend nor a market holiday. `Err` says why, to follow
/// the leg's name.
fn listed(s: &Strategy, underlying: &str, contract: &OptionContract) -> Result<(), String> {
    let symbol = contract.occ_unpadded();
    let expiration = contract.expiration;
    match chain_for_root(s, underlying, &contract.root) {
        Ok(chain) => {
            if !chain.expirations.contains(&expiration) {
                return Err(format!(
                    "({symbol}) expires on {expiration}, which the {underlying} option chain does not list"
                ));
            }
            if !chain.strikes.contains(&contract.strike) {
                return Err(format!(
                    "({symbol}) has strike {}, which the {underlying} option chain does not list",
                    contract.strike
                ));
            }
            Ok(())
        }
        Err(_) => {
            if expiration.is_weekend() {
                let day = if expiration.weekday() == 5 { "a Saturday" } else { "a Sunday" };
                return Err(format!("({symbol}) expires on {expiration}, {day}: no option expires on a weekend"));
            }
            match expiration.market_holiday() {
                Some(holiday) => Err(format!(
                    "({symbol}) expires on {expiration}, a market holiday ({holiday}): no option expires on one"
                )),
                None => Ok(()),
            }
        }
    }
}

/// The signed limit price of an entry: the alert's net price, else the legs' prices
/// (external selection), else the Limit Target from the legs' quotes.
fn entry_limit_net(
    s: &Strategy,
    selection: Selection,
    alert: &Alert,
    legs: &[OrderLeg],
) -> Result<Decimal, OrderError> {
    if let Some(p) = alert.price {
        return Ok(p);
    }
    if selection == Selection::Internal {
        return limit_from_leg_quotes(s, legs, alert.limit_target);
    }
    match leg_price_sum(alert, legs)? {
        LegPrices::All(net) => Ok(net),
        LegPrices::Partly(i) => Err(OrderError::Unfillable(format!(
            "the alert has no price and legs[{i}] has none, so the limit price cannot be set \
             (send the net price as `price`, or a `price` on every leg)"
        ))),
        LegPrices::Unpriced => limit_from_quotes(s, legs, &live_prices(alert), alert.limit_target).map_err(|e| {
            if e.is_rejection() {
                e
            } else {
                OrderError::Unfillable(format!("the alert has no price and its legs have none; {e}"))
            }
        }),
    }
}

enum LegPrices {
    /// No leg has a price.
    Unpriced,
    /// Some legs have a price; this one (the first) has none.
    Partly(usize),
    /// Every leg has a price: their net.
    All(Decimal),
}

/// The alert legs' prices as one net price: buys added, sells subtracted (each times
/// its ratio). A leg's price is its premium, so its sign is ignored: the leg's action
/// says whether it is paid or received.
fn leg_price_sum(alert: &Alert, legs: &[OrderLeg]) -> Result<LegPrices, OrderError> {
    if alert.legs.iter().all(|l| l.price.is_none()) {
        return Ok(LegPrices::Unpriced);
    }
    if let Some(i) = alert.legs.iter().position(|l| l.price.is_none()) {
        return Ok(LegPrices::Partly(i));
    }
    let mut net = Decimal::ZERO;
    for (price, leg) in alert.legs.iter().filter_map(|l| l.price).zip(legs) {
        net = with_premium(net, price, leg, legs.len() == 1)?;
    }
    Ok(LegPrices::All(net))
}

/// `net` with a leg's premium: added for a buy, subtracted for a sell, times the leg's ratio. The premium's sign is
/// ignored: the leg's action says whether it is paid or received. An order of one leg (`alone`) is priced per
/// contract, whatever its ratio: its size carries the ratio, and priced at premium × ratio a close asked twice the
/// premium and never filled.
fn with_premium(net: Decimal, premium: Decimal, leg: &OrderLeg, alone: bool) -> Result<Decimal, OrderError> {
    let ratio = if alone { 1 } else { leg.ratio };
    // Past any number: the sender's leg prices, refused (a 500 failed every bot's order, each resend alike).
    let beyond = || OrderError::PriceBeyondAny {
        described: format!("the legs' prices ({} on {})", premium, leg.contract.occ_unpadded()),
    };
    let amount = premium.abs().checked_mul(Decimal::from(ratio)).ok_or_else(beyond)?;
    if leg.action.is_buy() { net.checked_add(amount) } else { net.checked_sub(amount) }.ok_or_else(beyond)
}

/// The net price of a close whose alert prices the legs it names (decide lets a limit CLOSE with every leg priced
/// through): each closing leg's premium, from the alert leg naming its contract, buys added and sells subtracted
/// (times the ratio). `None` when the alert's legs do not name exactly these contracts, each once, or one has no
/// price: the close is then priced as any other.
pub fn close_priced_by_legs(alert: &Alert, legs: &[OrderLeg]) -> Option<Result<Decimal, OrderError>> {
    if alert.legs.len() != legs.len() {
        return None;
    }
    let mut net = Decimal::ZERO;
    for leg in legs {
        let mut naming = alert.legs.iter().filter(|n| crate::decide::leg_names(n, &leg.contract));
        let (Some(n), None) = (naming.next(), naming.next()) else { return None };
        net = match with_premium(net, n.price?, leg, legs.len() == 1) {
            Ok(net) => net,
            Err(e) => return Some(Err(e)),
        };
    }
    Some(Ok(net))
}

// ---------------------------------------------------------------------------------------
// Legs of exits, changes and cancels
// ---------------------------------------------------------------------------------------

/// Reads held legs (a position's or a working order's) into order legs with the same
/// actions. `what` names the holder for error messages ("the LONG SPX position").
pub fn parse_held(legs: &[HeldLeg], what: &str) -> Result<Vec<OrderLeg>, OrderError> {
    if legs.is_empty() {
        return Err(OrderError::Unfillable(format!("{what} has no option legs")));
    }
    if legs.len() > MAX_LEGS {
        return Err(OrderError::Unfillable(format!(
            "{what} has {} option legs; an order supports at most {MAX_LEGS}",
            legs.len()
        )));
    }
    let mut out = Vec::with_capacity(legs.len());
    for held in legs {
        let contract = OptionContract::parse_occ(&held.symbol).ok_or_else(|| {
            OrderError::Unfillable(format!(
                "{what} has a leg {:?} that is not an OCC option symbol",
                snippet(&held.symbol)
            ))
        })?;
        if held.ratio == 0 {
            return Err(OrderError::Unfillable(format!("{what} has a leg {} with ratio 0", contract.occ_unpadded())));
        }
        out.push(OrderLeg { contract, action: held.action, ratio: held.ratio });
    }
    distinct(&out, what)?;
    Ok(out)
}

/// Fills an option order's legs from a working order's held legs (same actions, not
/// reversed) and sets its limit price and price effect from `price`, the signed net
/// price (positive = debit, negative = credit) of a unit in simplest ratios; no price leaves the order unpriced.
/// The legs are put in their simplest ratios ([`in_simplest_ratios`]) and `order.quantity`, the units as the order
/// is listed, multiplied to match.
pub fn held_legs(order: &mut Order, legs: &[HeldLeg], price: Option<Decimal>) -> Result<(), OrderError> {
    order.legs = parse_held(legs, &format!("the working {} order", order.symbol))?;
    let factor = in_simplest_ratios(&mut order.legs);
    // Past any number once in simplest ratios (a MODIFY's 5 × 10^28 of a 2:2): the sender's size, refused as one past
    // what an order holds.
    order.quantity = order.quantity.checked_mul(Decimal::from(factor)).ok_or_else(|| OrderError::SizeBeyondAny {
        described: format!("the quantity {} of the {} order, in units of {factor}", order.quantity, order.symbol),
    })?;
    order.limit_price = None;
    order.price_effect = None;
    if let Some(p) = price {
        set_net_price(order, p)?;
    }
    Ok(())
}

/// The legs that unwind `legs`: each action reversed (buy_to_open → sell_to_close).
pub fn closing_legs(legs: &[OrderLeg]) -> Vec<OrderLeg> {
    legs.iter().map(|l| OrderLeg { contract: l.contract.clone(), action: l.action.closing(), ratio: l.ratio }).collect()
}

/// Whether two leg lists are the same structure (the same contracts, actions and
/// ratios, in any order).
pub fn same_structure(a: &[OrderLeg], b: &[OrderLeg]) -> bool {
    let key = |legs: &[OrderLeg]| {
        let mut k: Vec<(String, &'static str, u32)> =
            legs.iter().map(|l| (l.contract.occ_unpadded(), l.action.as_str(), l.ratio)).collect();
        k.sort();
        k
    };
    a.len() == b.len() && key(a) == key(b)
}

fn distinct(legs: &[OrderLeg], what: &str) -> Result<(), OrderError> {
    for (i, a) in legs.iter().enumerate() {
        if let Some(j) = legs[i + 1..].iter().position(|b| b.contract == a.contract) {
            return Err(OrderError::Unfillable(format!(
                "{what}: legs {i} and {} are the same contract {}; an order's legs must be distinct contracts",
                i + 1 + j,
                a.contract.occ_unpadded()
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Expirations and strikes
// ---------------------------------------------------------------------------------------

/// The chain for contracts on `root`: a chain kept under a series root (`RUTW`, its weeklies) for that series,
/// else the underlying's ([`chain_for`]). Read from the index's chain, a RUTW alert took RUT's monthly dates.
fn chain_for_root<'a>(s: &'a Strategy, underlying: &str, root: &str) -> Result<&'a OptionChain, OrderError> {
    let series =
        s.market.option_chains.iter().find(|(k, _)| k.trim().eq_ignore_ascii_case(root) && k.trim() != underlying);
    series.map_or_else(|| chain_for(s, underlying), |(_, c)| Ok(c))
}

/// The option chain for an underlying in the snapshot's market data.
pub fn chain_for<'a>(s: &'a Strategy, underlying: &str) -> Result<&'a OptionChain, OrderError> {
    let chains = &s.market.option_chains;
    chains
        .get(underlying)
        .or_else(|| {
            let key = InstrumentKey::new(underlying, AssetClass::Option);
            chains.iter().find(|(k, _)| InstrumentKey::new(k, AssetClass::Option) == key).map(|(_, c)| c)
        })
        .ok_or_else(|| OrderError::NoOptionChain { underlying: underlying.to_string() })
}

/// The days an expiration is judged by: `today` in New York, which the window counts from, and the first
/// expiration still trading ([`first_tradable_expiration`]: tomorrow once today's close has passed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Days {
    /// Today in New York.
    pub today: Date,
    /// The earliest expiration an order can still trade on.
    pub first: Date,
    /// The time itself (Unix ms): a series settled on the opening prices trades a little past the close on its
    /// last day ([`trades_at`]).
    pub now_ms: i64,
}

/// The nearest listed expiration whose distance from `today` (in days) is within the
/// rule's bounds, both inclusive. Dates missing from the chain (holidays) are never picked.
pub fn pick_expiration(chain: &OptionChain, rule: &ExpirationRule, days: Days, root: &str) -> Option<Date> {
    let today = days.today.days_since_epoch();
    chain
        .expirations
        .iter()
        .copied()
        // A series settled on the opening prices (the NDX monthly, VIX) trades last the business day before.
        .filter(|e| trades_at(&dated_root(root, *e), *e, days.now_ms))
        .filter(|e| {
            let ahead = e.days_since_epoch() - today;
            ahead >= i64::from(rule.min_days) && ahead <= i64::from(rule.max_days)
        })
        .min()
}

fn no_expiration(underlying: &str, cfg: &OptionsConfig, days: Days) -> OrderError {
    let today = days.today;
    if cfg.expiration.min_days == 0 && days.first > today {
        return OrderError::Unfillable(format!(
            "no expiration of {underlying} between {} and {} days from {today} can still trade: today's stopped \
             trading at the {} close in New York, and the option chain lists none later in the window",
            cfg.expiration.min_days,
            cfg.expiration.max_days,
            today.close_time()
        ));
    }
    OrderError::NoExpiration {
        underlying: underlying.to_string(),
        min_days: cfg.expiration.min_days,
        max_days: cfg.expiration.max_days,
        today,
    }
}

/// Index of the strike nearest `price` in `strikes` (ascending); a tie between two
/// strikes goes to the lower one.
pub fn atm_index(strikes: &[Decimal], price: Decimal) -> Option<usize> {
    let mut best: Option<(usize, Decimal)> = None;
    for (i, k) in strikes.iter().enumerate() {
        let distance = k.checked_sub(price).map_or(Decimal::MAX, |d| d.abs());
        if best.map_or(true, |(_, b)| distance < b) {
            best = Some((i, distance));
        }
    }
    best.map(|(i, _)| i)
}

/// The listed strike `offset` strikes away from at-the-money (positive = higher).
fn strike_for(chain: &OptionChain, underlying: &str, offset: i32) -> Result<Decimal, OrderError> {
    let mut strikes: Vec<Decimal> = chain.strikes.iter().copied().filter(|k| *k > Decimal::ZERO).collect();
    strikes.sort();
    strikes.dedup();
    let price = chain.underlying_price;
    if price <= Decimal::ZERO {
        return Err(OrderError::ChainPriceNotPositive { underlying: underlying.to_string(), price });
    }
    let atm = atm_index(&strikes, price).ok_or_else(|| OrderError::NoStrikes { underlying: underlying.to_string() })?;
    let target = i64::try_from(atm).unwrap_or(i64::MAX).saturating_add(i64::from(offset));
    match usize::try_from(target).ok().and_then(|i| strikes.get(i)) {
        Some(k) => Ok(*k),
        None => Err(OrderError::NoStrike {
            underlying: underlying.to_string(),
            steps: offset.unsigned_abs(),
            above: offset > 0,
            atm: strikes[atm],
            low: strikes[0],
            high: strikes[strikes.len() - 1],
        }),
    }
}

// ---------------------------------------------------------------------------------------
// Prices
// ---------------------------------------------------------------------------------------

/// Sets an option order's limit price (a magnitude) and price effect from a signed net
/// price: positive = debit, negative = credit (zero is an even debit). An order whose legs
/// are all on one side takes its effect from them whatever the sign (sells receive, buys
/// pay), so a premium sent as a positive number prices a sold option or a sold strangle
/// correctly. A credit for contracts that are all bought says two things at once and is
/// refused: priced as its magnitude, a debit, the order paid what the sender wrote as money
/// to receive (an entry, a MODIFY raising the bid, a CLOSE buying shorts back).
pub fn set_net_price(order: &mut Order, net: Decimal) -> Result<(), OrderError> {
    let effect = price_effect(&order.legs, net)?;
    order.limit_price = Some(net.abs());
    order.price_effect = Some(effect);
    Ok(())
}

/// Whether `legs` at the signed net price `net` are paid for or paid: legs all bought are a debit and legs all sold a
/// credit whatever the sign, legs on both sides what the sign says. A negative price on legs all bought (a credit for
/// what can only be paid for) is refused.
fn price_effect(legs: &[OrderLeg], net: Decimal) -> Result<PriceEffect, OrderError> {
    let bought = legs.iter().filter(|l| l.action.is_buy()).count();
    let one_side = !legs.is_empty() && (bought == 0 || bought == legs.len());
    // Read by the sign alone, a short strangle at 3.00 went out as a debit (paying to sell two options) and a
    // straddle at -4.00 as a credit (paid to buy).
    Ok(match (one_side, bought > 0) {
        (true, true) if net < Decimal::ZERO => {
            let contracts: Vec<String> = legs.iter().map(|l| l.contract.occ_unpadded()).collect();
            return Err(OrderError::LimitNotPositive { instrument: contracts.join(" + "), price: net });
        }
        (true, true) => PriceEffect::Debit,
        (true, false) => PriceEffect::Credit,
        (false, _) if net < Decimal::ZERO => PriceEffect::Credit,
        (false, _) => PriceEffect::Debit,
    })
}

/// The quote for a contract, keyed in the market data by its OCC symbol (unpadded,
/// padded, or any spelling that reads as the same contract).
pub fn leg_quote<'a>(s: &'a Strategy, contract: &OptionContract) -> Option<&'a Quote> {
    let quotes = &s.market.quotes;
    quotes.get(&contract.occ_unpadded()).or_else(|| quotes.get(&contract.occ_padded())).or_else(|| {
        quotes.iter().find(|(k, _)| OptionContract::parse_occ(k).as_ref() == Some(contract)).map(|(_, q)| q)
    })
}

/// The strategy's Limit Target for an option order, from the legs' quotes and on the
/// tick, as a signed net price (positive = debit).
///
/// A single leg is priced like a stock: `bid` is its bid, `ask` its ask, rounded to the
/// quote's tick (else $0.05 under $3, $0.10 above) with halves going to the passive
/// side. A spread is quoted as the combination the order trades (buys added, sells
/// subtracted, times the ratio): its bid is Σ buy bids − Σ sell asks, the patient end,
/// and its ask Σ buy asks − Σ sell bids, the marketable end, whether the net is a debit
/// or a credit; `mid` is halfway and `custom` f is bid + f × (ask − bid). A spread's
/// tick is the smallest of its legs' quote ticks when every leg gives one, else $0.05.
///
/// `which`, the alert's own Limit Target (TradersPost's `limitPriceType`), is read in place of the strategy's, as
/// for a stock: `bid`, `ask`, `mark` (halfway), `last` (the legs' last prices), and `ask_bid` the patient end (a
/// single leg's bid for a buy and ask for a sell; a spread's bid, debit or credit). Ignored, a buy asked at the bid
/// went out at the strategy's ask.
pub fn limit_from_leg_quotes(
    s: &Strategy,
    legs: &[OrderLeg],
    which: Option<QuotePrice>,
) -> Result<Decimal, OrderError> {
    limit_from_quotes(s, legs, &[], which)
}

/// The legs' last prices as the structure trades (a single leg's own; a spread's buys added and sells
/// subtracted, times the ratio), for an alert asking for `last`; a leg without one in the market data at its
/// `live` price (the alert leg's `live_price`).
fn last_net(
    s: &Strategy,
    legs: &[OrderLeg],
    live: &[Option<Decimal>],
    structure: String,
) -> Result<Decimal, OrderError> {
    let mut net = Decimal::ZERO;
    for (i, leg) in legs.iter().enumerate() {
        // A leg the market data has no last for is read at the alert leg's `live_price`, as for the other targets.
        let last = leg_quote(s, &leg.contract).and_then(|q| q.last);
        let last = last.or_else(|| live.get(i).copied().flatten().map(|p| p.abs())).ok_or_else(|| {
            OrderError::Unfillable(format!(
                "no last price for {} in the market data, so the limit price of the {structure} cannot be set",
                leg.contract.occ_unpadded()
            ))
        })?;
        if legs.len() == 1 {
            return Ok(last);
        }
        let amount = last.checked_mul(Decimal::from(leg.ratio)).ok_or(OrderError::Overflow)?;
        net = if leg.action.is_buy() { net.checked_add(amount) } else { net.checked_sub(amount) }
            .ok_or(OrderError::Overflow)?;
    }
    Ok(net)
}

/// The alert legs' `live_price`s, in the order of the legs built from them.
fn live_prices(alert: &Alert) -> Vec<Option<Decimal>> {
    alert.legs.iter().map(|l| l.live_price).collect()
}

/// [`limit_from_leg_quotes`], where a leg the market data has no bid/ask quote for is
/// quoted at its `live` price (the alert leg's `live_price`), bid and ask alike.
fn limit_from_quotes(
    s: &Strategy,
    legs: &[OrderLeg],
    live: &[Option<Decimal>],
    which: Option<QuotePrice>,
) -> Result<Decimal, OrderError> {
    if s.limit_target == LimitTarget::AlertPrice && which.is_none() {
        return Err(OrderError::NoAlertPrice);
    }
    let structure = structure_name(legs);
    let missing = |what: &str, leg: &OrderLeg| {
        OrderError::Unfillable(format!(
            "no {what} for {} in the market data, so the limit price of the {structure} cannot be set",
            leg.contract.occ_unpadded()
        ))
    };
    let mut bid = Decimal::ZERO;
    let mut ask = Decimal::ZERO;
    let mut tick: Option<Decimal> = None;
    let mut every_tick = true;
    for (i, leg) in legs.iter().enumerate() {
        let quote = leg_quote(s, &leg.contract);
        let live = live.get(i).copied().flatten().map(|p| p.abs());
        let (b, a, leg_tick) = match (quote, live) {
            (Some(Quote { bid: Some(b), ask: Some(a), tick, .. }), _) => (*b, *a, *tick),
            (_, Some(p)) => (p, p, None),
            (Some(q), None) => return Err(missing(if q.bid.is_none() { "bid" } else { "ask" }, leg)),
            (None, None) => return Err(missing("bid/ask quote", leg)),
        };
        if b > a || b < Decimal::ZERO {
            return Err(OrderError::Unfillable(format!(
                "the quote for {} is not usable (bid {b}, ask {a}), so the limit price of the {structure} cannot be set",
                leg.contract.occ_unpadded()
            )));
        }
        if legs.len() == 1 {
            bid = b;
            ask = a;
        } else {
            let r = Decimal::from(leg.ratio);
            let (rb, ra) =
                (b.checked_mul(r).ok_or(OrderError::Overflow)?, a.checked_mul(r).ok_or(OrderError::Overflow)?);
            let (add_b, add_a) = if leg.action.is_buy() { (rb, ra) } else { (-ra, -rb) };
            bid = bid.checked_add(add_b).ok_or(OrderError::Overflow)?;
            ask = ask.checked_add(add_a).ok_or(OrderError::Overflow)?;
        }
        match leg_tick {
            Some(t) if t > Decimal::ZERO => tick = Some(tick.map_or(t, |m| m.min(t))),
            _ => every_tick = false,
        }
    }
    let mid = || Ok::<_, OrderError>(bid.checked_add(ask).ok_or(OrderError::Overflow)? / Decimal::TWO);
    let raw = match which {
        Some(QuotePrice::Bid) => bid,
        Some(QuotePrice::Ask) => ask,
        Some(QuotePrice::AskBid) => match legs {
            [leg] if !leg.action.is_buy() => ask,
            _ => bid,
        },
        Some(QuotePrice::Mark) => mid()?,
        Some(QuotePrice::Last) => last_net(s, legs, live, structure)?,
        None => match s.limit_target {
            LimitTarget::AlertPrice | LimitTarget::Bid => bid,
            LimitTarget::Ask => ask,
            LimitTarget::Mid => mid()?,
            LimitTarget::Custom(f) => {
                let width = ask.checked_sub(bid).and_then(|w| w.checked_mul(f)).ok_or(OrderError::Overflow)?;
                bid.checked_add(width).ok_or(OrderError::Overflow)?
            }
        },
    };
    if let [leg] = legs {
        let tick = tick.unwrap_or_else(|| default_tick(AssetClass::Option, raw));
        let price = round_to_tick(raw, tick, leg.action.is_buy());
        return Ok(if leg.action.is_buy() { price } else { -price });
    }
    let tick = if every_tick { tick.unwrap_or(Decimal::new(5, 2)) } else { Decimal::new(5, 2) };
    // Passive on halves: a debit rounds down (pay less), a credit rounds up (receive more).
    let debit = raw >= Decimal::ZERO;
    let magnitude = round_to_tick(raw.abs(), tick, debit);
    Ok(if debit { magnitude } else { -magnitude })
}

/// What one unit of an entry of `order` is sized by when its bot sizes by an amount of money, per share (× 100 a
/// contract): the structure's maximum loss at expiration at its net price (`sizing::max_loss`), since the
/// amount a trader sets per trade is the money at risk, not the premium. The net is its limit price, else the
/// alert's price, else the alert legs' prices (external selection), else the legs' quotes (each leg's mid, else the
/// range of its quoted prices: `sizing::quote_range`). A structure whose loss has no bound (more calls sold
/// than bought), or that cannot lose at its net price, is refused: nothing sensible divides an amount by it.
pub fn sizing_net(s: &Strategy, alert: &Alert, order: &Order) -> Result<Decimal, OrderError> {
    let net = signed_sizing_net(s, alert, order)?;
    let structure = || structure_name(&order.legs);
    let Some(loss) = super::sizing::max_loss(&order.legs, net)? else {
        return Err(OrderError::AmountCannotSize {
            reason: format!(
                "the {} sells more calls than it buys, so its loss has no bound as the underlying rises and an amount \
                 of money cannot size it; size this strategy's bots with fixed_quantity",
                structure()
            ),
        });
    };
    if loss <= Decimal::ZERO {
        // Cannot lose at expiration: an arbitrage at face value, in practice a mistyped price or sign.
        let (effect, magnitude) = if net < Decimal::ZERO { ("credit", -net) } else { ("debit", net) };
        return Err(OrderError::AmountCannotSize {
            reason: format!(
                "the {} at a {effect} of {} could not lose at expiration, which no market prices it at (a price or \
                 sign mistyped?): nothing is sized from it",
                structure(),
                magnitude.normalize()
            ),
        });
    }
    Ok(loss)
}

/// The net price an entry of `order` is sized from, signed (positive = debit): see [`sizing_net`].
fn signed_sizing_net(s: &Strategy, alert: &Alert, order: &Order) -> Result<Decimal, OrderError> {
    if let Some(p) = order.limit_price {
        return Ok(if order.price_effect == Some(PriceEffect::Credit) { -p.abs() } else { p.abs() });
    }
    if let Some(p) = alert.price {
        // Legs all on one side (a single leg, a short strangle) are paid or received as their actions say, as
        // `set_net_price` reads them. Read by the sign alone, a market entry of two sold puts at 0.50 was sized as a
        // 0.50 debit: its loss at expiration taken 100 a unit larger, and fewer units sent than the amount buys.
        return Ok(match price_effect(&order.legs, p)? {
            PriceEffect::Credit => -p.abs(),
            PriceEffect::Debit => p.abs(),
        });
    }
    let external = s.options.as_ref().is_some_and(|o| o.selection == Selection::External);
    if external {
        if let LegPrices::All(net) = leg_price_sum(alert, &order.legs)? {
            return Ok(net);
        }
    }
    // Each leg's price as a range: its mid, or, without one (a one-sided or crossed quote), anything from its
    // lowest quoted price to its highest. A sold leg of a debit spread read at its ask (bid 0, ask 1.00) netted the
    // credit it would never get at the market, and $1,000 bought 100 spreads costing $12,000.
    let (mut paid, mut received) = (Decimal::ZERO, Decimal::ZERO);
    let live = if external { live_prices(alert) } else { Vec::new() };
    for (i, leg) in order.legs.iter().enumerate() {
        let q = leg_quote(s, &leg.contract);
        let range = q
            .and_then(|q| super::sizing::quote_range(q.bid, q.ask, q.last))
            .or_else(|| live.get(i).copied().flatten().map(|p| (p.abs(), p.abs())));
        let (low, high) = range.ok_or_else(|| {
            OrderError::Unfillable(format!(
                "no price to size the {} from: the alert has no price and the market data has no quote for {}",
                structure_name(&order.legs),
                leg.contract.occ_unpadded()
            ))
        })?;
        let ratio = Decimal::from(leg.ratio);
        let (low, high) =
            (low.checked_mul(ratio).ok_or(OrderError::Overflow)?, high.checked_mul(ratio).ok_or(OrderError::Overflow)?);
        // `paid`: the net with bought legs high and sold legs low (the largest debit); `received`: the reverse.
        if leg.action.is_buy() {
            paid = paid.checked_add(high).ok_or(OrderError::Overflow)?;
            received = received.checked_add(low).ok_or(OrderError::Overflow)?;
        } else {
            paid = paid.checked_sub(low).ok_or(OrderError::Overflow)?;
            received = received.checked_sub(high).ok_or(OrderError::Overflow)?;
        }
    }
    // The most paid (or the least received) the ranges allow: the one at which the structure risks the most, so
    // towards fewer units. Sized by the net of largest magnitude, a credit spread took the largest credit and so
    // the smallest risk.
    Ok(paid)
}

/// "SPX spread" or "SPX option", for messages.
fn structure_name(legs: &[OrderLeg]) -> String {
    let underlying = legs.first().map_or("", |l| underlying_of(&l.contract.root));
    if legs.len() > 1 {
        format!("{underlying} spread")
    } else {
        format!("{underlying} option")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ClientOrderId, LegAction};

    #[test]
    fn at_the_money_ties_go_to_the_lower_strike() {
        let d = |s| crate::decimal::parse(s).unwrap();
        let strikes = [d("4490"), d("4495"), d("4500"), d("4505")];
        assert_eq!(atm_index(&strikes, d("4502.5")), Some(2));
        assert_eq!(atm_index(&strikes, d("4502.6")), Some(3));
        assert_eq!(atm_index(&strikes, d("4492.5")), Some(0));
        assert_eq!(atm_index(&strikes, d("1")), Some(0));
        assert_eq!(atm_index(&[], d("4500")), None);
    }

    #[test]
    fn expirations_within_bounds_nearest_first() {
        let d = |s| Date::parse_iso(s).unwrap();
        let chain = OptionChain {
            underlying_price: Decimal::ONE,
            expirations: vec![d("2024-01-26"), d("2024-01-18"), d("2024-01-22"), d("2024-01-19")],
            strikes: vec![],
        };
        let rule = |min_days, max_days| ExpirationRule { min_days, max_days };
        // 2024-01-19 10:00 in New York (15:00 UTC); then 17:00 (22:00 UTC), after the close.
        let today = Days { today: d("2024-01-19"), first: d("2024-01-19"), now_ms: 1_705_676_400_000 };
        assert_eq!(pick_expiration(&chain, &rule(0, 0), today, "SPXW"), Some(today.today), "0 DTE is today");
        assert_eq!(pick_expiration(&chain, &rule(1, 7), today, "SPXW"), Some(d("2024-01-22")));
        assert_eq!(pick_expiration(&chain, &rule(4, 7), today, "SPXW"), Some(d("2024-01-26")));
        assert_eq!(pick_expiration(&chain, &rule(8, 9), today, "SPXW"), None);
        // After today's close, today's contracts no longer trade: the window still counts from today.
        let closed = Days { first: d("2024-01-20"), now_ms: 1_705_701_600_000, ..today };
        assert_eq!(pick_expiration(&chain, &rule(0, 7), closed, "SPXW"), Some(d("2024-01-22")));
        assert_eq!(pick_expiration(&chain, &rule(0, 0), closed, "SPXW"), None);
    }

    fn leg(symbol: &str, action: LegAction, ratio: u32) -> OrderLeg {
        OrderLeg { contract: OptionContract::parse_occ(symbol).unwrap(), action, ratio }
    }

    #[test]
    fn net_prices_and_effects() {
        let d = |s| crate::decimal::parse(s).unwrap();
        let mut order = Order {
            asset_class: AssetClass::Option,
            symbol: "SPX".into(),
            pair: None,
            intent: crate::model::Intent::OpenLong,
            quantity: Decimal::ONE,
            order_type: OrderType::Limit,
            limit_price: None,
            price_effect: None,
            duration: crate::model::Duration::Day,
            legs: vec![leg("SPXW240119P04500000", LegAction::SellToOpen, 1)],
            client_order_id: ClientOrderId::NONE,
            reference_price: None,
        };
        set_net_price(&mut order, d("1.20")).unwrap();
        assert_eq!((order.limit_price, order.price_effect), (Some(d("1.20")), Some(PriceEffect::Credit)));
        order.legs.push(leg("SPXW240119P04490000", LegAction::BuyToOpen, 1));
        set_net_price(&mut order, d("1.20")).unwrap();
        assert_eq!(order.price_effect, Some(PriceEffect::Debit), "a spread follows the sign");
        set_net_price(&mut order, d("-1.20")).unwrap();
        assert_eq!((order.limit_price, order.price_effect), (Some(d("1.20")), Some(PriceEffect::Credit)));
        set_net_price(&mut order, Decimal::ZERO).unwrap();
        assert_eq!((order.limit_price, order.price_effect), (Some(Decimal::ZERO), Some(PriceEffect::Debit)));
    }

    #[test]
    fn structures_compare_as_sets() {
        let a =
            [leg("SPXW240119C04500000", LegAction::BuyToOpen, 1), leg("SPXW240119C04510000", LegAction::SellToOpen, 1)];
        let b = [
            leg("SPXW  240119C04510000", LegAction::SellToOpen, 1),
            leg("SPXW240119C04500000", LegAction::BuyToOpen, 1),
        ];
        assert!(same_structure(&a, &b));
        let c =
            [leg("SPXW240119C04510000", LegAction::SellToOpen, 2), leg("SPXW240119C04500000", LegAction::BuyToOpen, 1)];
        assert!(!same_structure(&a, &c), "ratios differ");
        assert!(!same_structure(&a, &a[..1]));
        let closing = closing_legs(&a);
        assert_eq!(closing[0].action, LegAction::SellToClose);
        assert_eq!(closing[1].action, LegAction::BuyToClose);
    }

    #[test]
    fn held_legs_are_checked() {
        let held = |symbol: &str, ratio| HeldLeg { symbol: symbol.into(), action: LegAction::BuyToOpen, ratio };
        assert!(parse_held(&[], "x").is_err());
        assert!(parse_held(&[held("nonsense", 1)], "x").is_err());
        assert!(parse_held(&[held("SPXW240119C04500000", 0)], "x").is_err());
        let twice = [held("SPXW240119C04500000", 1), held("SPXW  240119C04500000", 1)];
        assert!(matches!(parse_held(&twice, "x"), Err(OrderError::Unfillable(m)) if m.contains("same contract")));
        assert_eq!(parse_held(&[held("SPXW240119C04500000", 2)], "x").unwrap()[0].ratio, 2);
    }
}
