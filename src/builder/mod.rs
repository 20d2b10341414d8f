//! The order builder: from a decided alert to the actions one bot must take — size,
//! price, time in force, contracts. Sizes come from the bot's sizing, never from the alert
//! (MODIFY aside).
//!
//! It stands above the strategy and the decision and below the engine: it reads the
//! snapshot ([`crate::strategy`]) and a [`Decided`] step ([`mod@crate::decide`]), and writes
//! neutral [`Order`]s ([`crate::model`]); a broker's capabilities (crypto increments) are
//! asked through [`crate::broker::BrokerId`].

mod client_id;
pub mod option;
mod price;
mod sizing;

pub use client_id::{client_order_id, client_order_id_part};
pub use price::{default_tick, limit_from_quote, round_to_tick};

use crate::alert::Action;
use crate::decide::{close_pulls, holds_named, pays_in_closed_coin, same_holding, Decided};
use crate::decimal::Decimal;
use crate::model::{
    is_index_root, underlying_of, AssetClass, BotAction, ClientOrderId, CryptoPair, Intent, LegAction, OptionContract,
    Order, OrderError, OrderLeg, OrderType,
};
use crate::strategy::{Bot, HeldLeg, OrderIntent, Position, Strategy, WorkingOrder};
use compact_str::CompactString;
use sizing::{entry_size, round_size, sizing_price, unit_cost};
use std::borrow::Cow;

/// What stays the same for every bot of one delivery.
#[derive(Debug, Clone, Copy)]
pub struct BuildContext<'a> {
    /// The strategy snapshot.
    pub strategy: &'a Strategy,
    /// The delivery time, Unix milliseconds (for option expirations).
    pub now_ms: i64,
    /// The delivery's dedup key (hex), the root of every client order id.
    pub dedup_key: &'a str,
    /// When the dedup key was claimed, Unix milliseconds: the engine's `now_ms` of the
    /// delivery that claimed it. It makes client order ids unique per processed delivery
    /// (the same body processed again after the dedup window gets new ids); a host that
    /// builds a delivery's orders again passes the time it stored with them.
    pub claimed_ms: i64,
}

/// The actions `bot` must take for `decided`. An empty list means the bot has nothing
/// to do (for example no position to close).
///
/// OPEN sizes from the bot's sizing; CLOSE closes the whole position in the direction
/// (every matching position; option positions by their held legs, reversed), after a
/// cancel of each working market entry of that side (the position the sender holds, not
/// yet filled) and of each working exit of that position, so none can fill beside the
/// close; with no position, a CLOSE is those entries' cancels alone; MODIFY
/// re-prices and/or re-sizes the one working order on that side the alert means (its
/// `target` and `order_id` narrow the choice; more than one is a rejection naming them),
/// as a replace, or as a cancel and a new order where the broker's replace cannot change
/// the quantity, and never one whose size is not known ([`WorkingOrder::size_known`]);
/// CANCEL pulls the working entry orders on that side.
///
/// The orders carry the bot's own symbol for the instrument when its `symbols` maps one
/// ([`Bot::symbols`]), so the broker's format and the dry run show what the broker gets.
pub fn build(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Vec<BotAction>, OrderError> {
    build_inline(ctx, decided, bot).map(Actions::into_vec)
}

/// A bot's actions for one step. Nearly every step yields one action, which is kept off
/// the heap; only the rare second and later ones take a `Vec`.
#[derive(Debug, Default)]
pub(crate) struct Actions {
    first: Option<BotAction>,
    rest: Vec<BotAction>,
    /// By index, the actions that go out only after the one before: the later orders of one position cut into
    /// orders an order can carry (a calendar's front legs in one, its back legs in another). Sent side by side, a
    /// refused first left the second to sell the long legs beside short ones still held. Empty: none.
    pub(crate) chained: Vec<bool>,
    /// A CLOSE's close of the position refused as nothing left to close ([`nothing_left_to_close`]) while the
    /// actions, the cancels of its working market entries, still go: the caller tells the refusal beside them. Lost
    /// with the refusal, an entry's cancel let it fill after the sender had closed. `None`: nothing refused.
    pub(crate) refused: Option<Box<OrderError>>,
}

impl Actions {
    #[inline(always)]
    fn one(action: BotAction) -> Actions {
        Actions { first: Some(action), rest: Vec::new(), chained: Vec::new(), refused: None }
    }

    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn into_vec(self) -> Vec<BotAction> {
        match self.first {
            None => self.rest,
            Some(first) => {
                let mut all = Vec::with_capacity(1 + self.rest.len());
                all.push(first);
                all.extend(self.rest);
                all
            }
        }
    }

    /// Hands each action, in order, to `f`, stopping at its first error.
    pub(crate) fn try_each<E>(self, mut f: impl FnMut(BotAction) -> Result<(), E>) -> Result<(), E> {
        if let Some(first) = self.first {
            f(first)?;
        }
        self.rest.into_iter().try_for_each(f)
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut BotAction> {
        self.first.iter_mut().chain(self.rest.iter_mut())
    }
}

impl From<Vec<BotAction>> for Actions {
    fn from(mut all: Vec<BotAction>) -> Actions {
        // Kept in order: the first moves out only when it is the only one.
        if all.len() == 1 {
            return Actions { first: all.pop(), rest: Vec::new(), chained: Vec::new(), refused: None };
        }
        Actions { first: None, rest: all, chained: Vec::new(), refused: None }
    }
}

impl IntoIterator for Actions {
    type Item = BotAction;
    type IntoIter = std::iter::Chain<std::option::IntoIter<BotAction>, std::vec::IntoIter<BotAction>>;
    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

/// [`build`] without a `Vec` for the usual single action (the engine's hot path).
#[inline]
pub(crate) fn build_inline(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Actions, OrderError> {
    // The result is returned as it came, not unwrapped and wrapped again: the actions are
    // a few hundred bytes, and each move is a copy.
    let mut built = build_actions(ctx, decided, bot);
    let Ok(actions) = &mut built else { return built };
    if !bot.increments.is_empty() {
        for action in actions.iter_mut() {
            // A cancel pulls the working order's own terms; only what is sent anew moves.
            if let BotAction::Place(o) | BotAction::Replace { order: o, .. } = action {
                on_price_increment(bot, o);
            }
        }
    }
    if !bot.symbols.is_empty() {
        for action in actions.iter_mut() {
            let order = match action {
                BotAction::Place(o) | BotAction::Replace { order: o, .. } | BotAction::Cancel { order: o, .. } => o,
            };
            map_symbol(bot, order)?;
        }
    }
    built
}

/// A crypto limit price moved passively onto the pair's price increment where the bot's
/// snapshot gives one: the broker refuses a price off its tick.
fn on_price_increment(bot: &Bot, order: &mut Order) {
    let Some(step) = order.pair.as_ref().and_then(|p| bot.increments_for_pair(p)).map(|i| i.price_increment) else {
        return;
    };
    if let Some(p) = order.limit_price {
        order.limit_price = Some(price::round_passive(p, step, order.intent.is_buy()));
    }
}

/// Puts the bot's symbol for the order's instrument in place (and its crypto pair).
fn map_symbol(bot: &Bot, order: &mut Order) -> Result<(), OrderError> {
    // A pair in any of its spellings (`BTC/USD`, `BTCUSD`, `BTC-USD`), as everywhere else: compared as text, a
    // map written `BTC/USD` missed an alert's `BTCUSD`, and the order went to the unmapped product.
    let Some(mapped) = bot.symbol_for(&order.symbol, order.asset_class) else { return Ok(()) };
    let mapped = mapped.to_string();
    if order.pair.is_some() {
        order.pair =
            Some(CryptoPair::parse(&mapped).ok_or_else(|| OrderError::NotACryptoPair { instrument: mapped.clone() })?);
    }
    order.symbol = mapped.into();
    Ok(())
}

#[inline]
fn build_actions(ctx: &BuildContext<'_>, decided: &Decided<'_>, bot: &Bot) -> Result<Actions, OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let coid = |part: usize| client_order_id_part(&s.id, ctx.dedup_key, ctx.claimed_ms, &bot.id, decided.step, part);
    let key = &decided.key;
    let option = s.asset_class == AssetClass::Option;
    if option && decided.action == Action::Open {
        // A strategy allowing any instrument ("*") reaches here with an index the bot's
        // broker does not offer; one naming the index was refused when it loaded. Only an
        // entry: such a bot holds no index option to close, change or pull, and checked for
        // every action, its 500 kept every other bot's SPX position from being closed.
        let underlying = underlying_of(&alert.instrument);
        if is_index_root(underlying) && !bot.broker.broker().offers_index_options() {
            return Err(OrderError::NoIndexOptions {
                broker: bot.broker.as_str(),
                underlying: underlying.to_ascii_uppercase(),
            });
        }
    }
    match decided.action {
        Action::Open if option => option_open(ctx, decided, bot, coid(0)).map(|o| Actions::one(BotAction::Place(o))),
        Action::Close if option => {
            let (closes, chained) = match option_close(ctx, decided, bot, &coid) {
                Ok(built) => built,
                Err(e) => return pull_entries_beside(ctx, decided, bot, &coid, e),
            };
            let mut actions = cancel_exits_first(ctx, decided, bot, closes.into(), &coid)?;
            if chained.iter().any(|c| *c) {
                // The cancels of working exits come first.
                let cancels = actions.len() - chained.len();
                actions.chained = std::iter::repeat(false).take(cancels).chain(chained).collect();
            }
            Ok(actions)
        }
        Action::Open | Action::Close => {
            let open = decided.action == Action::Open;
            let intent = Intent::new(open, decided.direction);
            if open && !decided.reversed {
                let other = decided.direction.opposite();
                let mut held = bot.positions.iter().filter(|p| p.direction == other && p.key == *key);
                let held =
                    held.try_fold(Decimal::ZERO, |t, p| t.checked_add(p.quantity)).ok_or(OrderError::Overflow)?;
                if !held.is_zero() {
                    return Err(OrderError::HoldsOtherSide {
                        direction: decided.direction,
                        instrument: alert.instrument.to_string(),
                        held,
                    });
                }
            }
            let quantity = if open {
                let size = entry_size(s, bot, &alert.instrument, || {
                    Ok((sizing_price(s, alert)?, Cow::Borrowed(&*alert.instrument)))
                })?;
                sizing::entry_minimums(s.asset_class, bot, &alert.instrument, size, || sizing_price(s, alert).ok())?;
                size
            } else {
                let mut held = bot.positions.iter().filter(|p| p.direction == decided.direction && p.key == *key);
                let total =
                    held.try_fold(Decimal::ZERO, |t, p| t.checked_add(p.quantity)).ok_or(OrderError::Overflow)?;
                if total.is_zero() {
                    // Nothing held here; a working market entry of the side is still pulled.
                    return cancel_exits_first(ctx, decided, bot, Actions::default(), &coid);
                }
                if s.asset_class == AssetClass::Crypto {
                    // A coin balance is finer than the pair trades in (a wallet's 12 decimals, half a coin where
                    // the base increment is 1): sent as it is, the broker refused the whole exit. What can be sold
                    // is sold; the dust below the increment stays.
                    let described =
                        || format!("bot {}'s {} position of {}", bot.id, alert.instrument, total.normalize());
                    // Below the product's minimum order size, the broker refuses the sell: refused here, with why.
                    let size = round_size(s.asset_class, bot, &alert.instrument, total, described).and_then(|size| {
                        sizing::close_minimum(s.asset_class, bot, &alert.instrument, size, described).map(|()| size)
                    });
                    match size {
                        Ok(size) => size,
                        Err(e) => return pull_entries_beside(ctx, decided, bot, &coid, e),
                    }
                } else {
                    total
                }
            };
            let order = base_order(ctx, decided, intent, quantity, coid(0))?;
            if open {
                return Ok(Actions::one(BotAction::Place(order)));
            }
            cancel_exits_first(ctx, decided, bot, Actions::one(BotAction::Place(order)), &coid)
        }
        Action::Modify => {
            let meant = |o: &&WorkingOrder| {
                o.is_working()
                    && o.direction == decided.direction
                    && o.key == *key
                    && holds_named(&o.legs, decided.named_legs())
                    && o.is_meant(alert.target, alert.order_id.as_deref())
            };
            // An order whose size is not known (a trader's, sized by an amount of money) is never changed: a change
            // states a size, and sized from its listed 0 it went out as an order of nothing. Beside orders of known
            // size it is none of the candidates (the bot's own order is the one meant): counted, a trader's dollar
            // order beside the bot's entry made every MODIFY naming neither ambiguous. Meant alone (by its id, or
            // as the only order of its side), it is refused with the reason.
            // So is an order of a kind this library does not place (a stop, a stop-limit, a bracket): it cannot be
            // restated.
            let (candidates, not_sized): (Vec<&WorkingOrder>, Vec<&WorkingOrder>) =
                bot.working_orders.iter().filter(meant).partition(|o| o.modifiable());
            let w = match (candidates.as_slice(), not_sized.first()) {
                ([], None) => return Ok(Actions::default()),
                ([], Some(u)) if !u.size_known => {
                    return Err(OrderError::ModifySizeNotKnown { order_id: u.id.clone(), notional: u.notional })
                }
                ([], Some(u)) => return Err(OrderError::ModifyOrderKind { order_id: u.id.clone() }),
                ([w], _) => *w,
                (several, _) => return Err(ambiguous_modify(decided, several)),
            };
            // Listed as `other` (a Tastytrade GTC Ext, an Alpaca `opg`), its time in force cannot be sent again:
            // re-sent as a day order, a GTC Ext take-profit expired that night, an `opg` order filled intraday.
            let Some(order_type) = w.order_type else {
                return Err(OrderError::ModifyOrderKind { order_id: w.id.clone() });
            };
            let Some(duration) = w.duration else {
                return Err(OrderError::ModifyBrokerTimeInForce { order_id: w.id.clone() });
            };
            // A MODIFY changes a price and a size (spec: "Changes limit price and/or quantity"); the order is sent
            // again with its own type and time in force. An alert naming others was answered processed while they
            // were dropped: a limit the sender moved to market kept resting, a day order made GTC expired tonight.
            let other_type = alert.order_type.filter(|t| *t != order_type).map(|t| ("order type", t.as_str()));
            // A market order's time in force is not judged: it fills at the next open whatever it says, and a
            // broker may send every market order as a day order (Tradier), so the same template's GTC re-size of the
            // order it placed would be refused at every try.
            let other_duration = alert
                .duration
                .filter(|d| *d != duration && order_type == OrderType::Limit)
                .map(|d| ("time in force", d.as_str()));
            if let Some((term, asked)) = other_type.or(other_duration) {
                let has = if term == "order type" { order_type.as_str() } else { duration.as_str() };
                return Err(OrderError::ModifyKeepsTerms { order_id: w.id.clone(), term, asked, has });
            }
            // Its legs are sent again as they are listed, so they must be its own: an entry's open, an exit's
            // close. An exit listed with the actions that opened its position went out as an opening order (a debit
            // paid to open a credit spread: the take-profit gone, the spread doubled).
            let opens = w.intent == OrderIntent::Entry;
            if let Some(l) = w.legs.iter().find(|l| l.action.is_open() != opens) {
                return Err(OrderError::Unfillable(format!(
                    "its leg {} is listed as {}, which is no {} order's action; a MODIFY would send it as it is",
                    l.symbol.trim(),
                    l.action.as_str(),
                    w.intent.as_str()
                ))
                .in_working_order(&w.id));
            }
            let intent = Intent::new(opens, w.direction);
            // A spread's new price may be its legs' (README: the alert's `price`, else the legs' prices summed): read
            // only from `price`, it was refused alone ("needs a new price") and dropped beside a new size, the
            // order re-sized at the price the sender replaced.
            let some_priced = alert.legs.iter().any(|l| l.price.is_some());
            let legs_priced = some_priced && alert.legs.iter().all(|l| l.price.is_some());
            if option && alert.price.is_none() && some_priced && !legs_priced {
                // Some legs priced, one not (a template's placeholder come out empty): no net, and the price the
                // sender gave was dropped, the order re-sized at the limit it replaced. Refused as an OPEN is.
                let i = alert.legs.iter().position(|l| l.price.is_none()).unwrap_or(0);
                return Err(OrderError::Unfillable(format!(
                    "the alert has no price and legs[{i}] has none, so the new limit price cannot be set (send the \
                     net price as `price`, or a `price` on every leg)"
                ))
                .in_working_order(&w.id));
            }
            let legs_price = match (option && alert.price.is_none() && legs_priced, w.legs.as_slice()) {
                (false, _) => None,
                (true, []) => {
                    return Err(OrderError::Unfillable(
                        "the MODIFY prices legs, and the order is listed without its legs; send one net `price`".into(),
                    )
                    .in_working_order(&w.id))
                }
                (true, legs) => {
                    let mut own =
                        option::parse_held(legs, "the working order").map_err(|e| e.in_working_order(&w.id))?;
                    // Summed for a unit in simplest ratios, as the order is sent ([`option::held_legs`]).
                    option::in_simplest_ratios(&mut own);
                    match option::close_priced_by_legs(alert, &own) {
                        Some(net) => Some(net?),
                        None => {
                            return Err(OrderError::Unfillable(
                                "the MODIFY prices legs that are not this order's own, each once; send its \
                                 contracts' prices or one net `price`"
                                    .into(),
                            )
                            .in_working_order(&w.id))
                        }
                    }
                }
            };
            let new_price = alert.price.or(legs_price);
            let price = new_price.or(w.price);
            if let Some(p) = price.filter(|p| !option && *p <= Decimal::ZERO) {
                return Err(OrderError::LimitNotPositive { instrument: w.instrument.clone(), price: p });
            }
            // Sized as the order is matched and sent, by its normalised name: read as written (`COINBASE:ETHBTC`),
            // it was no pair, so a notional in dollars was divided by a price in BTC and no increment applied.
            let named = crate::alert::normalize_instrument(&w.instrument);
            let quantity = match (alert.quantity, alert.notional) {
                (Some(q), _) => round_size(s.asset_class, bot, &named, q, || format!("MODIFY quantity {q}"))?,
                (None, Some(n)) => {
                    sizing::priced_in_money(s.asset_class, &named, &|| format!("MODIFY notional {n}"))?;
                    let p = price.ok_or(OrderError::NotionalWithoutPrice)?;
                    // The price is a unit's in simplest ratios; the size counts the order's units as listed, `factor`
                    // of those each (a vertical listed 2:2 is two).
                    let factor = Decimal::from(option::held_factor(&w.legs));
                    let unit = (|| {
                        Ok::<_, OrderError>(match (s.asset_class, w.intent) {
                            // An entry risks its maximum loss, not its premium, as an entry sized by an amount does:
                            // divided by the premium, a credit spread's notional of 1000 at 0.50 made it 20 spreads.
                            // An exit closes what is held and risks nothing new: it is sized by its premium (its legs
                            // read as opening ones, a long call's exit was refused as a naked call).
                            // Priced as a limit order at the new net, matched to the order's contracts by name: a
                            // market order's has no limit price, and its legs' prices were paired by position with
                            // the alert's, in the sender's order (a double calendar at a 2.60 debit read as 0.40).
                            (AssetClass::Option, OrderIntent::Entry) => {
                                let as_limit = WorkingOrder { order_type: Some(OrderType::Limit), ..w.clone() };
                                let at = working_order(s.asset_class, &as_limit, intent, w.quantity, Some(p), coid(0))?;
                                unit_cost(s.asset_class, option::sizing_net(s, alert, &at)?)?
                                    .checked_mul(factor)
                                    .ok_or(OrderError::Overflow)?
                            }
                            // An order of one leg is priced by the contract and sends `ratio` contracts a unit.
                            (AssetClass::Option, _) => match w.legs.as_slice() {
                                [single] => unit_cost(s.asset_class, p)?
                                    .checked_mul(Decimal::from(single.ratio))
                                    .ok_or(OrderError::Overflow)?,
                                _ => unit_cost(s.asset_class, p)?.checked_mul(factor).ok_or(OrderError::Overflow)?,
                            },
                            _ => unit_cost(s.asset_class, p)?,
                        })
                    })();
                    // A unit's cost past any number here (a price near 10^27) is more than the notional buys.
                    let unit = match unit {
                        Err(OrderError::Overflow) => {
                            return Err(sizing::past_any_cost(format!("MODIFY notional {n} at {}", p.normalize())))
                        }
                        unit => unit?,
                    };
                    if unit <= Decimal::ZERO {
                        return Err(OrderError::NotionalPriceNotPositive { price: p });
                    }
                    let described = || format!("MODIFY notional {n} at {} a unit", unit.normalize());
                    let raw =
                        n.checked_div(unit).ok_or_else(|| OrderError::SizeBeyondAny { described: described() })?;
                    round_size(s.asset_class, bot, &named, raw, described)?
                }
                (None, None) => w.quantity,
            };
            let quantity_changed = quantity != w.quantity;
            // A market order has no limit price to change: a MODIFY asking it for a price and no new size (none
            // sent, or a template's `{{strategy.order.contracts}}` unchanged) was sent as an unchanged replace,
            // answered processed, and the order filled at the market the sender meant to cap. Beside a new size the
            // price sizes a notional, or is the template's `{{close}}`.
            if let (Some(p), OrderType::Market, false) = (new_price, order_type, quantity_changed) {
                return Err(OrderError::MarketOrderPrice { order_id: w.id.clone(), price: p });
            }
            if w.intent == OrderIntent::Exit && quantity > w.quantity {
                let positions: Vec<&Position> =
                    bot.positions.iter().filter(|p| p.direction == w.direction && p.key == *key).collect();
                // The bot's other exits on the position close part of it too: two exits of 5 on 10 held, one
                // made 10, would sell 15 if both filled; a coin's exits on its other pairs sell the same coins.
                let crypto = s.asset_class == AssetClass::Crypto;
                let others: Vec<&WorkingOrder> = bot
                    .working_orders
                    .iter()
                    .filter(|o| {
                        o.is_working()
                            && o.intent == OrderIntent::Exit
                            && o.direction == w.direction
                            && same_holding(crypto, &o.key, key)
                            && o.id != w.id
                    })
                    .collect();
                // Another exit whose size is not known sells an unknown part of the position: counted as none, the
                // exit grew until both could sell past it. Taken for the whole position instead, every growth is
                // refused, and the reason names the exit to cancel or change first.
                if let Some(o) = others.iter().find(|o| !o.size_known) {
                    return Err(OrderError::OtherExitSizeNotKnown {
                        order_id: w.id.clone(),
                        other: o.id.clone(),
                        notional: o.notional,
                    });
                }
                let past = if option {
                    // An option exit closes its own contracts, counted contract by contract as a CLOSE counts them
                    // ([`covered`]): a call held beside a put neither makes room for it nor takes any, and an exit
                    // legging out of a held vertical (one leg of it) shares that leg with the vertical's own exit.
                    // Counted by whole structure, the leg-out's 5 were not counted against the vertical's exit made
                    // 10 on 10 held (15 of that call sold), and a leg-out could not grow at all.
                    exit_past_contracts(w, quantity, &others, &positions)?
                } else {
                    let held = positions
                        .iter()
                        .try_fold(Decimal::ZERO, |t, p| t.checked_add(p.quantity))
                        .ok_or(OrderError::Overflow)?;
                    let covered = others
                        .iter()
                        .try_fold(Decimal::ZERO, |t, o| t.checked_add(o.quantity))
                        .ok_or(OrderError::Overflow)?;
                    // Past any number is past the position: the sender's size (a 500 failed every bot's order).
                    quantity.checked_add(covered).map_or(true, |t| t > held).then_some((held, covered))
                };
                if let Some((held, covered)) = past {
                    return Err(OrderError::ExitPastPosition {
                        direction: w.direction,
                        instrument: w.instrument.clone(),
                        quantity,
                        held,
                        covered,
                    });
                }
            }
            if quantity_changed && !bot.broker.broker().replace_resizes(s.asset_class, w.quantity, quantity) {
                // The broker's change cannot carry a new size: the working order is pulled
                // and a new one placed at the new size, under its own client order id.
                let pulled = working_order(s.asset_class, w, intent, w.quantity, w.price, coid(0))?;
                let placed = working_order(s.asset_class, w, intent, quantity, price, coid(1))?;
                return Ok(
                    vec![BotAction::Cancel { order_id: w.id.clone(), order: pulled }, BotAction::Place(placed)].into()
                );
            }
            let order = working_order(s.asset_class, w, intent, quantity, price, coid(0))?;
            // Counted as the order now is, in simplest ratios ([`option::held_legs`]).
            let filled =
                w.filled.checked_mul(Decimal::from(option::held_factor(&w.legs))).ok_or(OrderError::Overflow)?;
            Ok(Actions::one(BotAction::Replace { order_id: w.id.clone(), order, quantity_changed, filled }))
        }
        Action::Cancel => {
            let mut working: Vec<&WorkingOrder> = bot
                .working_orders
                .iter()
                .filter(|o| {
                    o.is_working()
                        && o.intent == OrderIntent::Entry
                        && (decided.both_sides || o.direction == decided.direction)
                        && o.key == *key
                        && holds_named(&o.legs, decided.named_legs())
                        && o.is_meant(alert.target, alert.order_id.as_deref())
                })
                .collect();
            // Pulling both sides, the entry's own side goes last (its `direction`, wherever both sides work): the
            // engine chains the pulls and the new entry waits for the last, and it stands in only for an order of
            // its side. After the other side's pull, it stood in for nothing, and a CANCEL decided meanwhile found
            // the pulled entry gone and left the new one working.
            if decided.both_sides {
                working.sort_by_key(|o| o.direction == decided.direction);
            }
            let mut out = Vec::new();
            for (n, w) in working.into_iter().enumerate() {
                let order = cancelled_order(s.asset_class, w, Intent::new(true, w.direction), coid(n))?;
                out.push(BotAction::Cancel { order_id: w.id.clone(), order });
            }
            Ok(out.into())
        }
    }
}

/// A CLOSE's orders, preceded by a cancel of every working market entry of its side ([`close_pulls`]), then of every
/// working exit of the position it closes and, for a coin, of every working buy paid in it ([`pays_in_closed_coin`])
/// (numbered after the closes, so a close keeps its client order id). The
/// close is for the whole position, so an exit left working beside it could fill too and open the other side, and
/// an entry left working could fill after it and open what the sender closed; the engine makes the close wait for
/// the cancels, each after the one before (`OrderRequest::after`). The entries go first: should one have filled
/// meanwhile, its cancel fails and what waits is held back, the position's exits still in place.
fn cancel_exits_first(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    closes: Actions,
    coid: &dyn Fn(usize) -> ClientOrderId,
) -> Result<Actions, OrderError> {
    let count = closes.len();
    let entries: Vec<&WorkingOrder> = bot
        .working_orders
        .iter()
        .filter(|o| {
            close_pulls(o, ctx.strategy.asset_class, decided.direction, &decided.key, decided.named_legs())
                // Not those of its instrument a CANCEL ahead of it in the alert pulls (`cancel: true` on an exit).
                && !(decided.after_cancel && o.key == decided.key)
        })
        .collect();
    // Nothing to close (no position): nothing to make room for, and the exits stay; a working market entry is
    // pulled all the same.
    if count == 0 {
        return pull_entries_first(ctx, entries, 0, closes, coid);
    }
    // Only the exits of the positions closed: where the alert names its contracts, the positions holding none of
    // them stay, and so do the exits those positions still cover. An exit holding a named contract goes. The
    // others go only where the positions left could not fill them all: first those trading only contracts of the
    // positions closed (one legging out of a closed vertical on the leg the alert did not name, left working beside
    // the close, filled too: that leg sold twice, a naked short), then, if still more than is left, every one but
    // those trading only contracts of the positions left (pulling an exit is undone by placing it again; selling what
    // is not held is not). Pulled whenever it shared a contract, another position's take-profit was gone with nothing
    // put back.
    let named = decided.named_legs();
    // A position cut into orders ([`close_chunks`]) is closed only in the orders holding a named contract: its other
    // orders stay, as positions of their own (with their exits).
    // Borrowed, but for the parts of a cut position (an equity CLOSE copies nothing).
    let mut closed: Vec<Cow<'_, Position>> = Vec::new();
    let mut left: Vec<Cow<'_, Position>> = Vec::new();
    for p in bot.positions.iter().filter(|p| p.direction == decided.direction && p.key == decided.key) {
        if !named.is_empty() && !holds_named(&p.legs, named) {
            left.push(Cow::Borrowed(p));
            continue;
        }
        if named.is_empty() {
            closed.push(Cow::Borrowed(p));
            continue;
        }
        let part = |legs: Vec<HeldLeg>| Cow::Owned(Position { legs, ..p.clone() });
        let chunks = close_chunks(&p.legs);
        let chunked = chunks.len() > 1;
        for chunk in chunks {
            if chunked && !names_a_contract(&chunk, named) {
                left.push(part(chunk));
                continue;
            }
            // Judged as the close cuts it ([`live_pieces`]): a chunk whose contracts that no longer trade are left
            // out is closed only in the orders holding a named contract, even a lone one (the chunk may have named
            // only a dead contract). Taken whole, every exit of the pieces that stay was pulled.
            let (pieces, gone) = live_pieces(chunk.clone(), ctx.now_ms);
            if gone.is_empty() {
                closed.push(if chunked { part(chunk) } else { Cow::Borrowed(p) });
                continue;
            }
            // Left out of every order, they count with the close, as its refusals name them.
            closed.push(part(gone));
            for piece in pieces {
                if names_a_contract(&piece, named) {
                    closed.push(part(piece));
                } else {
                    left.push(part(piece));
                }
            }
        }
    }
    let (closed, left): (Vec<&Position>, Vec<&Position>) =
        (closed.iter().map(|p| &**p).collect(), left.iter().map(|p| &**p).collect());
    let contracts: Vec<OptionContract> =
        closed.iter().flat_map(|p| p.legs.iter().filter_map(|l| OptionContract::parse_occ(&l.symbol))).collect();
    let trades_closed = |o: &WorkingOrder| {
        o.legs.iter().any(|l| OptionContract::parse_occ(&l.symbol).is_some_and(|c| contracts.contains(&c)))
    };
    let mut exits = Vec::new();
    let mut rest = Vec::new();
    let crypto = ctx.strategy.asset_class == AssetClass::Crypto;
    for o in bot.working_orders.iter().filter(|o| {
        o.is_working()
            && o.intent == OrderIntent::Exit
            && o.direction == decided.direction
            && same_holding(crypto, &o.key, &decided.key)
    }) {
        if left.is_empty() || holds_named(&o.legs, named) {
            exits.push(o);
        } else if o.legs.is_empty() {
            // Whose exit it is cannot be told: left working it may sell what the close sells, pulled it may be the
            // take-profit of a position that stays.
            return Err(OrderError::Unfillable(format!(
                "working exit {} lists no option legs, so whether it exits the position this CLOSE closes or another \
                 {} position cannot be told; list its legs, or close the whole {} position (name no contract)",
                o.id,
                decided.alert.instrument,
                decided.direction.as_str()
            )));
        } else if o.legs.iter().any(|l| OptionContract::parse_occ(&l.symbol).is_none()) {
            // A leg in a broker's own symbol: what it sells cannot be counted, so it is pulled on its own (by its
            // id). Kept among the others, it made them all look uncovered, and another position's take-profit went.
            exits.push(o);
        } else if !o.size_known {
            // What it sells cannot be counted either: among the others it covered nothing, and left working beside
            // the close it could sell a contract the close sells. Pulled when it trades one of the positions
            // closed; trading only contracts the close leaves alone, what it can sell is as it was, and it stays.
            if trades_closed(o) {
                exits.push(o);
            }
        } else {
            rest.push(o);
        }
    }
    if !covered(&rest, &left) {
        let only_closed = |o: &&WorkingOrder| {
            o.legs.iter().all(|l| OptionContract::parse_occ(&l.symbol).is_some_and(|c| contracts.contains(&c)))
        };
        let (mine, others): (Vec<&WorkingOrder>, Vec<&WorkingOrder>) = rest.into_iter().partition(only_closed);
        exits.extend(mine);
        rest = others;
        if !covered(&rest, &left) {
            // Not those trading only contracts of the positions that stay: what they can sell the close leaves as
            // it was. Pulled, a CLOSE of the 450 call took the trader's OCO off the 460 call that stays.
            let kept: Vec<OptionContract> = left
                .iter()
                .flat_map(|p| p.legs.iter().filter_map(|l| OptionContract::parse_occ(&l.symbol)))
                .filter(|c| !contracts.contains(c))
                .collect();
            exits.extend(rest.into_iter().filter(|o| {
                !o.legs.iter().all(|l| OptionContract::parse_occ(&l.symbol).is_some_and(|c| kept.contains(&c)))
            }));
        }
    }
    // A crypto CLOSE of a long also pulls every working buy paid in the coin it sells (on a pair quoted in it): the
    // broker holds the coin it spends, and the close sells the whole position beside that hold.
    if crypto {
        exits.extend(bot.working_orders.iter().filter(|o| pays_in_closed_coin(o, decided.direction, &decided.key)));
    }
    let mut out = Vec::new();
    for (n, w) in exits.iter().enumerate() {
        let intent = Intent::new(w.intent == OrderIntent::Entry, w.direction);
        let order = cancelled_order(ctx.strategy.asset_class, w, intent, coid(count + n))?;
        out.push(BotAction::Cancel { order_id: w.id.clone(), order });
    }
    if out.is_empty() {
        return pull_entries_first(ctx, entries, count, closes, coid);
    }
    out.extend(closes);
    pull_entries_first(ctx, entries, count + exits.len(), out.into(), coid)
}

/// Whether a bot's close of a position was refused as nothing left to close: its contracts no longer trade (the broker
/// settles them), or a coin balance all below what the pair trades (the dust an earlier close leaves). The engine
/// lets a reversal's new side go ahead of such a refusal, as with nothing to close.
pub(crate) fn nothing_left_to_close(e: &OrderError) -> bool {
    matches!(e, OrderError::ContractsExpired { .. } | OrderError::SizeTooSmall { .. })
}

/// A CLOSE whose close of the position was refused (`e`): where nothing is left to close
/// ([`nothing_left_to_close`]), the working market entries of its side are still pulled ([`close_pulls`]), the refusal
/// carried beside their cancels ([`Actions::refused`]), as with nothing held; with no such entry, or another refusal,
/// the refusal alone. Refused whole, an entry queued for the open filled after the sender had closed.
fn pull_entries_beside(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    coid: &dyn Fn(usize) -> ClientOrderId,
    e: OrderError,
) -> Result<Actions, OrderError> {
    if !nothing_left_to_close(&e) {
        return Err(e);
    }
    let mut cancels = cancel_exits_first(ctx, decided, bot, Actions::default(), coid)?;
    if cancels.len() == 0 {
        return Err(e);
    }
    cancels.refused = Some(Box::new(e));
    Ok(cancels)
}

/// `then` preceded by a cancel of each of the working market `entries` ([`close_pulls`]), their client order ids
/// numbered from `from` (after the closes and the exits' cancels, which keep theirs).
fn pull_entries_first(
    ctx: &BuildContext<'_>,
    entries: Vec<&WorkingOrder>,
    from: usize,
    then: Actions,
    coid: &dyn Fn(usize) -> ClientOrderId,
) -> Result<Actions, OrderError> {
    if entries.is_empty() {
        return Ok(then);
    }
    let mut out = Vec::with_capacity(entries.len() + then.len());
    for (n, w) in entries.into_iter().enumerate() {
        let order = cancelled_order(ctx.strategy.asset_class, w, Intent::new(true, w.direction), coid(from + n))?;
        out.push(BotAction::Cancel { order_id: w.id.clone(), order });
    }
    out.extend(then);
    Ok(out.into())
}

/// Whether the positions `left` after a close hold every contract the working exits `exits` would close, all of them
/// at their sizes: a sell to close needs the contract held long (bought to open), a buy to close held short; an exit
/// listed with its position's opening actions needs the side it lists ([`closes_long`]). An exit of a kind this
/// library does not place (`other`: a stop, one child of a trader's OCO) is left out of the count, which it may be an
/// alternative of (a take-profit and a stop both selling the one contract held, only one of which fills): it needs
/// only its own size held.
fn covered(exits: &[&WorkingOrder], left: &[&Position]) -> bool {
    let held = |c: &OptionContract, long: bool| {
        left.iter()
            .flat_map(|p| {
                p.legs
                    .iter()
                    .filter(move |h| {
                        h.action.is_buy() == long && OptionContract::parse_occ(&h.symbol).as_ref() == Some(c)
                    })
                    .map(move |h| p.quantity.checked_mul(Decimal::from(h.ratio.max(1))))
            })
            .try_fold(Decimal::ZERO, |t, q| t.checked_add(q?))
    };
    let needed = |c: &OptionContract, long: bool| {
        exits
            .iter()
            .filter(|o| o.order_type.is_some())
            .flat_map(|o| {
                o.legs
                    .iter()
                    .filter(move |l| {
                        closes_long(l.action) == long && OptionContract::parse_occ(&l.symbol).as_ref() == Some(c)
                    })
                    .map(move |l| o.quantity.checked_mul(Decimal::from(l.ratio.max(1))))
            })
            .try_fold(Decimal::ZERO, |t, q| t.checked_add(q?))
    };
    exits.iter().all(|o| {
        o.legs.iter().all(|l| {
            let (Some(c), long) = (OptionContract::parse_occ(&l.symbol), closes_long(l.action)) else { return false };
            let n = match o.order_type {
                Some(_) => needed(&c, long),
                None => o.quantity.checked_mul(Decimal::from(l.ratio.max(1))),
            };
            matches!((n, held(&c, long)), (Some(n), Some(h)) if n <= h)
        })
    })
}

/// Whether an exit's leg listed as `action` closes a long holding of its contract: sold to close, or listed with the
/// buy_to_open that opened it (hosts list an exit with its position's opening actions).
fn closes_long(action: LegAction) -> bool {
    action.is_buy() == action.is_open()
}

/// Whether option exit `w` made `quantity` would close more of one of its contracts than `positions` hold of it,
/// beside what the `others` exits close of it: the first such contract's holding and the others' share, in the
/// exit's own units (its leg's ratio), or `None` when each contract has room.
fn exit_past_contracts(
    w: &WorkingOrder,
    quantity: Decimal,
    others: &[&WorkingOrder],
    positions: &[&Position],
) -> Result<Option<(Decimal, Decimal)>, OrderError> {
    // Contracts of a leg: a position's held ones (bought when long), or an exit's closing ones, each times its
    // ratio. An exit's leg closes the holding of its side however it is listed: sold to close a long, or listed with
    // the long's own buy_to_open (as hosts list exits); read by its action alone, such an exit covered nothing.
    let of = |legs: &[HeldLeg], size: Decimal, c: &OptionContract, long: bool, closing: bool| {
        legs.iter()
            .filter(|h| {
                let held_long = if closing { closes_long(h.action) } else { h.action.is_buy() };
                held_long == long && OptionContract::parse_occ(&h.symbol).as_ref() == Some(c)
            })
            .try_fold(Decimal::ZERO, |t, h| t.checked_add(size.checked_mul(Decimal::from(h.ratio.max(1)))?))
            .ok_or(OrderError::Overflow)
    };
    // An exit listing no legs, or a leg in a broker's own symbol, covers contracts that cannot be told: counted as
    // none, a MODIFY grew another exit past what it leaves (15 calls sold on 10 held). Refused, as a CLOSE refuses
    // to guess whose exit it is; for this bot alone, as answered 500 it held back every other bot's change.
    let unreadable = |other: &WorkingOrder, why: String, fix| OrderError::OtherExitUnreadable {
        order_id: w.id.clone(),
        other: other.id.clone(),
        why,
        fix,
    };
    if let Some(o) = others.iter().find(|o| o.legs.is_empty()) {
        return Err(unreadable(o, "lists no option legs".into(), "list its legs"));
    }
    let odd = others
        .iter()
        .find_map(|o| o.legs.iter().find(|l| OptionContract::parse_occ(&l.symbol).is_none()).map(|l| (o, l)));
    if let Some((o, l)) = odd {
        let why = format!("lists leg {:?}, which is not an OCC option symbol", crate::model::snippet(&l.symbol));
        return Err(unreadable(o, why, "list its legs by their OCC symbols"));
    }
    for leg in &w.legs {
        let contract = OptionContract::parse_occ(&leg.symbol).ok_or_else(|| {
            OrderError::Unfillable(format!(
                "its leg {:?} is not an OCC option symbol",
                crate::model::snippet(&leg.symbol)
            ))
            .in_working_order(&w.id)
        })?;
        // A leg selling to close closes a long holding of its contract.
        let long = !leg.action.is_buy();
        let mut held = Decimal::ZERO;
        for p in positions {
            held = held.checked_add(of(&p.legs, p.quantity, &contract, long, false)?).ok_or(OrderError::Overflow)?;
        }
        let mut covered = Decimal::ZERO;
        for o in others {
            covered =
                covered.checked_add(of(&o.legs, o.quantity, &contract, long, true)?).ok_or(OrderError::Overflow)?;
        }
        let ratio = Decimal::from(leg.ratio.max(1));
        // Past any number is past the position: the sender's size.
        let past = quantity.checked_mul(ratio).and_then(|mine| mine.checked_add(covered)).map_or(true, |t| t > held);
        if past {
            let lots = |n: Decimal| n.checked_div(ratio).unwrap_or(n);
            return Ok(Some((lots(held), lots(covered))));
        }
    }
    Ok(None)
}

/// MODIFY with several working orders it could mean: each named, and how to choose.
fn ambiguous_modify(decided: &Decided<'_>, several: &[&WorkingOrder]) -> OrderError {
    let both =
        several.iter().any(|w| w.intent == OrderIntent::Entry) && several.iter().any(|w| w.intent == OrderIntent::Exit);
    OrderError::AmbiguousModify {
        direction: decided.direction,
        instrument: decided.alert.instrument.to_string(),
        orders: several.iter().map(|w| w.describe()).collect(),
        hint: if both {
            "send \"target\": \"entry\" or \"exit\", or \"order_id\""
        } else {
            "send the \"order_id\" of the one to change"
        },
    }
}

/// The order's symbol: the underlying for options (`SPX` for an `SPXW` order), the
/// instrument as given otherwise.
fn order_symbol(asset_class: AssetClass, instrument: &str) -> CompactString {
    match asset_class {
        AssetClass::Option => crate::model::underlying_of(instrument).to_ascii_uppercase().into(),
        _ => instrument.into(),
    }
}

/// An option entry: legs first (internal or external selection), then the size, which
/// for an amount-based sizing divides by the structure's maximum loss × 100 ([`option::sizing_net`]).
fn option_open(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    client_order_id: ClientOrderId,
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
        reference_price: None,
    };
    // Sized in the units the rules write (a vertical written 2:2 is one), sent in simplest ratios (two verticals):
    // the same contracts either way.
    let factor = Decimal::from(option::select_legs(ctx, decided, &mut order)?);
    held_other_way(decided, bot, &order.legs)?;
    let units = entry_size(s, bot, &decided.alert.instrument, || {
        let net = option::sizing_net(s, decided.alert, &order)?.checked_mul(factor).ok_or(OrderError::Overflow)?;
        Ok((net, Cow::Owned(format!("the {} order", order.symbol))))
    })?;
    order.quantity = units.checked_mul(factor).ok_or(OrderError::Overflow)?;
    Ok(order)
}

/// Refuses an option entry any of whose `legs` opens a contract the bot holds the other way: the brokers keep one
/// net position per contract, so selling to open a contract held bought (or buying one held sold) closes the held
/// contracts while the answer says a position opened, or the broker refuses the opening designation after it. The
/// option twin of the equity guard in [`build_actions`]; a held leg that cannot be read is refused, not guessed.
fn held_other_way(decided: &Decided<'_>, bot: &Bot, legs: &[OrderLeg]) -> Result<(), OrderError> {
    for p in bot.positions.iter().filter(|p| p.key == decided.key) {
        // A reversal closes the other direction's positions before this OPEN goes, as for equities; a position in
        // the OPEN's own direction stays, and may hold one of its contracts the other way (a vertical's sold leg).
        if decided.reversed && p.direction != decided.direction {
            continue;
        }
        let position = || format!("{} {}", p.direction.as_str(), p.instrument);
        for h in &p.legs {
            let held = OptionContract::parse_occ(&h.symbol).ok_or_else(|| OrderError::HeldLegUnreadable {
                position: position(),
                leg: crate::model::snippet(&h.symbol),
            })?;
            if let Some(leg) = legs.iter().find(|l| l.contract == held && l.action.is_buy() != h.action.is_buy()) {
                return Err(OrderError::HoldsContractOtherWay {
                    direction: decided.direction,
                    contract: held.occ_unpadded(),
                    held: if h.action.is_buy() { "bought" } else { "sold" },
                    position: position(),
                    action: leg.action.as_str(),
                });
            }
        }
    }
    Ok(())
}

/// An option exit: every position in the direction, closed by reversing its held legs.
/// Positions holding the same structure close together (their quantities summed); a
/// different structure gets its own order.
fn option_close(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    bot: &Bot,
    coid: &dyn Fn(usize) -> ClientOrderId,
) -> Result<(Vec<BotAction>, Vec<bool>), OrderError> {
    let s = ctx.strategy;
    let alert = decided.alert;
    let mut groups: Vec<(Vec<OrderLeg>, Decimal)> = Vec::new();
    // By group: whether it goes out after the group before, the previous order of the same cut position; and
    // whether it is a cut position's.
    let mut chained: Vec<bool> = Vec::new();
    let mut cut_groups: Vec<bool> = Vec::new();
    // Where the alert names its contracts, only the positions holding them.
    let named = decided.named_legs();
    let held = bot
        .positions
        .iter()
        .filter(|p| p.direction == decided.direction && p.key == decided.key && holds_named(&p.legs, named));
    // A reversal's price is the new position's: it prices the close only where the close trades the very
    // contracts the alert names (an option ticker reversed on itself). Used for a close onto other contracts,
    // a call's close was priced at the put's premium (never filled, while the put was bought all the same).
    // Each alert leg must name one contract whole (a symbol, or side, strike and expiration): a leg given by side
    // and strike takes the chain's nearest expiration, which may not be the one held.
    let whole = |l: &crate::alert::Leg| {
        l.symbol.is_some() || (l.side.is_some() && l.strike.is_some() && l.expiration.is_some())
    };
    let mut same_contracts = !alert.legs.is_empty() && alert.legs.iter().all(whole);
    // Contracts that no longer trade (today's after the session's close, an AM-settled one on its expiration day) are
    // left out of the close: the broker settles them, and sent, they made it refuse the whole order, the live legs
    // with them.
    // Read from the held legs, before any order is sized: sized with them, a dead double butterfly (five legs) was
    // refused beside a live vertical, or failed the whole delivery ([`live_pieces`]).
    let mut dead = Vec::new();
    for p in held {
        same_contracts &= p.legs.len() == alert.legs.len() && holds_named(&p.legs, &alert.legs);
        let what = format!("the {} {} position (quantity {})", decided.direction.as_str(), p.instrument, p.quantity);
        if p.legs.is_empty() {
            return Err(OrderError::Unfillable(format!("{what} has no option legs, so it cannot be closed")));
        }
        let chunks = close_chunks(&p.legs);
        let chunked = chunks.len() > 1;
        // The last group this position made, to chain the next one after it.
        let mut previous: Option<usize> = None;
        for chunk in chunks {
            // A position cut into orders, where the alert names contracts: only the orders holding one go (the host
            // read every contract on the underlying as one position; the verticals the alert does not name stay).
            if chunked && !named.is_empty() && !names_a_contract(&chunk, named) {
                continue;
            }
            let (pieces, gone) = live_pieces(chunk, ctx.now_ms);
            dead.extend(gone.iter().filter_map(|h| no_longer_trades(h, ctx.now_ms)));
            let cut = chunked || pieces.len() > 1;
            for piece in pieces {
                // With contracts left out, the same holds for each piece, even a lone one: the chunk may have named
                // only a dead contract. Checked on the chunk alone, a CLOSE naming one vertical of 60 live legs closed
                // all 15 orders, and one naming only a dead short sold the live covers left of it.
                if !gone.is_empty() && !named.is_empty() && !names_a_contract(&piece, named) {
                    continue;
                }
                // This bot's alone: the other bots' closes (and a reversal's new side elsewhere) still go. A position
                // of one group too large (a lone double butterfly) is refused too: it failed the whole delivery.
                if let Some(why) = oversized(&piece) {
                    return Err(OrderError::Uncuttable { position: what, why });
                }
                // In simplest ratios, priced per such unit: a position listed 2:2 closes as twice as many 1:1 units.
                let mut legs = option::closing_legs(&option::parse_held(&piece, &what)?);
                let units = p
                    .quantity
                    .checked_mul(Decimal::from(option::in_simplest_ratios(&mut legs)))
                    .ok_or(OrderError::Overflow)?;
                // The same structures of several positions go out as one order, but never a cut position's: its
                // orders are its own, each after the one before (merged into another's order, a calendar's back legs
                // went out unchained beside its front ones, and another position's close waited on the cut one's
                // chain).
                let same = (!cut)
                    .then(|| {
                        groups
                            .iter()
                            .zip(&cut_groups)
                            .position(|((l, _), cut)| !*cut && option::same_structure(l, &legs))
                    })
                    .flatten();
                match same {
                    Some(i) => groups[i].1 = groups[i].1.checked_add(units).ok_or(OrderError::Overflow)?,
                    None => {
                        // Chained to the group just before, when that is this position's own.
                        chained.push(cut && previous.is_some_and(|j| j + 1 == groups.len()));
                        previous = Some(groups.len());
                        cut_groups.push(cut);
                        groups.push((legs, units));
                    }
                }
            }
        }
    }
    if groups.is_empty() && !dead.is_empty() {
        // This bot's alone: the other bots' closes (and a reversal's new side elsewhere) still go.
        return Err(OrderError::ContractsExpired {
            position: format!("the {} {} position", decided.direction.as_str(), alert.instrument),
            contracts: dead.join(", "),
        });
    }
    let limit = decided.order_type == OrderType::Limit;
    let price = alert.price.filter(|_| !decided.reversing || same_contracts);
    // Different structures, not orders: a cut position's order of the same contracts as another's is priced alike.
    let mut distinct: Vec<&[OrderLeg]> = Vec::new();
    for (legs, _) in &groups {
        if !distinct.iter().any(|d| option::same_structure(d, legs)) {
            distinct.push(legs);
        }
    }
    let structures = distinct.len();
    // The alert's net prices the structure it closes whole: put on the legs left once dead ones are dropped (a
    // calendar's back month alone at the calendar's net), a debit close never filled and a credit one sold far
    // below the legs' worth.
    if !dead.is_empty() && limit {
        if let Some(price) = price {
            // This bot's alone, as its dead contracts are: the other bots' closes still go.
            return Err(OrderError::PricedWithExpired {
                position: format!("{} {} position", decided.direction.as_str(), alert.instrument),
                contracts: dead.join(", "),
                price,
            });
        }
    }
    if structures > 1 && limit && price.is_some() {
        return Err(OrderError::Unfillable(format!(
            "the {} {} position is held as {} different option structures, and one alert price cannot price them all; \
             close it with a market order, or without a price so each is priced from its quotes",
            decided.direction.as_str(),
            alert.instrument,
            structures
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
            reference_price: None,
        };
        if limit {
            let net = match (price, alert.price) {
                (Some(p), _) => p,
                (None, Some(p)) => {
                    option::limit_from_leg_quotes(s, &order.legs, alert.limit_target).map_err(|e| match e {
                        OrderError::NoAlertPrice => {
                            OrderError::ReversalCloseUnpriced { instrument: alert.instrument.to_string(), price: p }
                        }
                        e => e,
                    })?
                }
                // The sender's own leg premiums, where the close names its legs and prices each.
                (None, None) => match decided.named.then(|| option::close_priced_by_legs(alert, &order.legs)) {
                    Some(Some(net)) => net?,
                    _ => option::limit_from_leg_quotes(s, &order.legs, alert.limit_target)?,
                },
            };
            option::set_net_price(&mut order, net)?;
        }
        out.push(BotAction::Place(order));
    }
    Ok((out, chained))
}

/// Whether any of `legs` is a contract one of the alert's `named` legs names.
fn names_a_contract(legs: &[HeldLeg], named: &[crate::alert::Leg]) -> bool {
    legs.iter()
        .filter_map(|h| OptionContract::parse_occ(&h.symbol))
        .any(|c| named.iter().any(|n| crate::decide::leg_names(n, &c)))
}

/// The contract of a held leg, as its order names it, when it no longer trades at `now_ms` (today's after the
/// session's close, an AM-settled one on its expiration day); `None` while it trades. A symbol that cannot be read is
/// kept, for the parse of its order to name it.
fn no_longer_trades(h: &HeldLeg, now_ms: i64) -> Option<String> {
    OptionContract::parse_occ(&h.symbol)
        .filter(|c| !crate::model::trades_at(&c.root, c.expiration, now_ms))
        .map(|c| c.occ_unpadded())
}

/// The orders a CLOSE sends for one chunk of a position ([`close_chunks`]), none of them empty, and the legs left out
/// as no longer trading ([`no_longer_trades`]). Those count toward neither an order's legs nor the legs cut: they may
/// have tied live legs into one group too large for an order, or made the position too long to cut, so what is left
/// is cut again. With any left out, a CLOSE naming contracts must judge each order alone, even a lone one (the chunk
/// may have named only a contract left out), as it does each chunk ([`option_close`], [`cancel_exits_first`]).
fn live_pieces(chunk: Vec<HeldLeg>, now_ms: i64) -> (Vec<Vec<HeldLeg>>, Vec<HeldLeg>) {
    let (gone, live): (Vec<HeldLeg>, Vec<HeldLeg>) =
        chunk.into_iter().partition(|h| no_longer_trades(h, now_ms).is_some());
    let pieces = if !gone.is_empty() && live.len() > crate::model::MAX_LEGS { close_chunks(&live) } else { vec![live] };
    (pieces.into_iter().filter(|piece| !piece.is_empty()).collect(), gone)
}

/// Why a chunk of a position cut by [`close_chunks`] cannot go: a group of sold contracts and the bought ones covering
/// them larger than an order (a double butterfly sharing its wing), which no cut can part safely; `None` when it fits.
fn oversized(chunk: &[HeldLeg]) -> Option<String> {
    use crate::model::MAX_LEGS;
    if chunk.len() <= MAX_LEGS {
        return None;
    }
    if chunk.len() > MAX_CUT_LEGS {
        return Some(format!(
            "its {} legs are more than the service cuts into orders ({MAX_CUT_LEGS}); close them at the broker",
            chunk.len()
        ));
    }
    let names: Vec<String> = chunk.iter().map(|l| crate::model::snippet(&l.symbol)).collect();
    Some(format!(
        "its legs take more than one order of {MAX_LEGS}, and the sold contracts among {} are covered by bought ones \
         that cannot go in another order (the orders work at once: one filling alone would leave a sold contract \
         uncovered); close them at the broker",
        names.join(", ")
    ))
}

/// The most legs of one position [`close_chunks`] cuts into orders.
const MAX_CUT_LEGS: usize = 64;

/// Which bought contracts cover which sold ones (pairs of leg indices), contract by contract and side by side (calls
/// with calls, puts with puts), as a transport of contracts: every sold contract covered as far as the position's
/// bought contracts go, and of all such covers the one with the fewest contracts covered from another expiration
/// (a vertical before a calendar), then the fewest covered by a contract expiring before the sold one, then the
/// least strike distance, then the fewest days apart, over the whole position at once. Greedy choices made short by
/// short, or pair by pair, each split some pair of structures held together: a calendar's short took a butterfly's
/// wing, or a vertical's long, and a CLOSE naming one structure closed another. `None` when the search runs past
/// its bound (contract counts no position holds), so the position is not cut.
fn covers(legs: &[HeldLeg], parsed: &[Option<OptionContract>]) -> Option<Vec<(usize, usize)>> {
    struct Edge {
        to: usize,
        cap: u64,
        cost: i128,
        rev: usize,
    }
    fn add(g: &mut [Vec<Edge>], a: usize, b: usize, cap: u64, cost: i128) {
        let (ra, rb) = (g[b].len(), g[a].len());
        g[a].push(Edge { to: b, cap, cost, rev: ra });
        g[b].push(Edge { to: a, cap: 0, cost: -cost, rev: rb });
    }
    let n = legs.len();
    let contracts = |i: usize| u64::from(legs[i].ratio.max(1));
    // Nodes: 0 the source, 1..=n the legs (sold ones fed by the source, bought ones feeding the sink), n + 1 the sink.
    let (source, sink) = (0, n + 1);
    let mut g: Vec<Vec<Edge>> = (0..n + 2).map(|_| Vec::new()).collect();
    // Tiers of one path's cost: a path crosses each node at most twice (at most [`MAX_CUT_LEGS`] + 2 of them), so a
    // tier's sum along it stays below the next tier's unit (days under 10^5 a pair, strikes under 10^9 thousandths).
    const DAYS: i128 = 1;
    const STRIKE: i128 = 100_000_000;
    const EARLIER: i128 = STRIKE * 1_000_000_000 * 1_000;
    const ACROSS: i128 = EARLIER * 1_000;
    let mut middle = Vec::new();
    for s in (0..n).filter(|&i| !legs[i].action.is_buy()) {
        let Some(c) = parsed[s].as_ref() else { continue };
        add(&mut g, source, s + 1, contracts(s), 0);
        for j in (0..n).filter(|&j| legs[j].action.is_buy()) {
            let Some(o) = parsed[j].as_ref().filter(|o| o.side == c.side) else { continue };
            let days = (o.expiration.days_since_epoch() - c.expiration.days_since_epoch()).clamp(-99_999, 99_999);
            let strike = (o.strike - c.strike).abs().round_dp(3);
            let milli = strike.mantissa().saturating_mul(10i128.pow(3u32.saturating_sub(strike.scale())));
            let cost = if days != 0 { ACROSS } else { 0 }
                + if days < 0 { EARLIER } else { 0 }
                + milli.clamp(0, 999_999_999) * STRIKE
                + i128::from(days.abs()) * DAYS;
            middle.push((s, g[s + 1].len()));
            add(&mut g, s + 1, j + 1, u64::MAX, cost);
        }
    }
    for j in (0..n).filter(|&j| legs[j].action.is_buy() && parsed[j].is_some()) {
        add(&mut g, j + 1, sink, contracts(j), 0);
    }
    // Successive shortest paths (Bellman-Ford: the residual arcs cost less than nothing), each augmenting path moving
    // as many contracts as it can.
    let nodes = g.len();
    for _ in 0..4 * nodes {
        let mut dist: Vec<Option<i128>> = vec![None; nodes];
        let mut via: Vec<(usize, usize)> = vec![(usize::MAX, 0); nodes];
        dist[source] = Some(0);
        for _ in 0..nodes {
            let mut changed = false;
            for u in 0..nodes {
                let Some(du) = dist[u] else { continue };
                for (k, e) in g[u].iter().enumerate().filter(|(_, e)| e.cap > 0) {
                    let d = du + e.cost;
                    if dist[e.to].map_or(true, |old| d < old) {
                        dist[e.to] = Some(d);
                        via[e.to] = (u, k);
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        if dist[sink].is_none() {
            let flows = middle.iter().filter_map(|&(s, k)| {
                let e = &g[s + 1][k];
                (g[e.to][e.rev].cap > 0).then_some((s, e.to - 1))
            });
            return Some(flows.collect());
        }
        let mut push = u64::MAX;
        let mut v = sink;
        while v != source {
            let (u, k) = via[v];
            push = push.min(g[u][k].cap);
            v = u;
        }
        let mut v = sink;
        while v != source {
            let (u, k) = via[v];
            g[u][k].cap -= push;
            let (to, rev) = (g[u][k].to, g[u][k].rev);
            g[to][rev].cap = g[to][rev].cap.saturating_add(push);
            v = u;
        }
    }
    None
}

/// A held position's legs in orders an order can carry ([`crate::model::MAX_LEGS`] each). A position the host
/// read back as every contract held on the underlying (verticals opened on three days: six legs) could never be
/// closed at all. The orders work at once (each is sent once the one before is accepted, not filled), so none may
/// sell a bought contract that covers a sold one another order buys back: each sold contract is covered, contract by
/// contract (a butterfly's body of 2 by both its wings), by the bought contracts of its side nearest it (its own
/// expiration first: a vertical; then one expiring after it: a calendar), and such a group is never split. Cut by side and
/// strike, one order sold a put spread's wing while its short was in the next; cut by expiration, a calendar's longs
/// went in one order and its shorts in another; paired by legs rather than contracts, a butterfly's second wing was
/// sold alone. A group larger than an order is refused: no cut of it is safe. A CLOSE naming one contract of such a
/// position closes the orders holding it, whole groups.
fn close_chunks(legs: &[HeldLeg]) -> Vec<Vec<HeldLeg>> {
    use crate::model::MAX_LEGS;
    // More legs than any real position of one underlying: one chunk, refused where it is to be sent ([`oversized`]).
    // Cut, the pairing's cost grew with the square of the legs a host's snapshot listed, in time and memory.
    if legs.len() <= MAX_LEGS || legs.len() > MAX_CUT_LEGS {
        return vec![legs.to_vec()];
    }
    let n = legs.len();
    let parsed: Vec<Option<OptionContract>> = legs.iter().map(|l| OptionContract::parse_occ(&l.symbol)).collect();
    // Unreadable symbols sort last and are named by the parse of their chunk.
    let order_key = |i: usize| parsed[i].as_ref().map(|c| (c.expiration, c.side.as_str(), c.strike));
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    // Each sold contract with the bought contracts of its side that cover it ([`covers`]), grouped.
    let Some(pairs) = covers(legs, &parsed) else { return vec![legs.to_vec()] };
    for (s, j) in pairs {
        let (a, b) = (root(&mut parent, s), root(&mut parent, j));
        parent[a] = b;
    }
    // The groups, in the order of their first leg.
    let mut by_leg: Vec<usize> = (0..n).collect();
    by_leg.sort_by_key(|&i| order_key(i).map_or((1, None), |k| (0, Some(k))));
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for i in by_leg {
        let r = root(&mut parent, i);
        match groups.iter_mut().find(|(g, _)| *g == r) {
            Some((_, members)) => members.push(i),
            None => groups.push((r, vec![i])),
        }
    }
    // Groups of the same expirations go together (a structure of one expiration is one order, priced as one; the
    // calendars of two expirations, as many as an order takes). A group larger than an order is a chunk of its own,
    // refused where it is to be sent ([`oversized`]).
    let expirations_of = |members: &[usize]| {
        let mut e: Vec<Option<crate::alert::Date>> =
            members.iter().map(|&k| parsed[k].as_ref().map(|c| c.expiration)).collect();
        e.sort_unstable();
        e.dedup();
        e
    };
    groups.sort_by_cached_key(|(_, m)| expirations_of(m));
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut last = None;
    for (_, members) in groups {
        let expirations = expirations_of(&members);
        let fits = last.as_ref() == Some(&expirations)
            && members.len() <= MAX_LEGS
            && out.last().is_some_and(|chunk| chunk.len() + members.len() <= MAX_LEGS);
        match out.last_mut() {
            Some(chunk) if fits => chunk.extend(members),
            _ => out.push(members),
        }
        last = Some(expirations);
    }
    // In each order its legs by expiration, side and strike, as one order's legs always were.
    out.into_iter()
        .map(|mut chunk| {
            chunk.sort_by_key(|&i| order_key(i));
            chunk.into_iter().map(|i| legs[i].clone()).collect()
        })
        .collect()
}

/// A working order as an [`Order`] standing at `quantity` and `price` (the terms a
/// replace asks for, or the ones a cancel pulls). A market order has no limit price.
fn working_order(
    asset_class: AssetClass,
    w: &WorkingOrder,
    intent: Intent,
    quantity: Decimal,
    price: Option<Decimal>,
    client_order_id: ClientOrderId,
) -> Result<Order, OrderError> {
    // An order of a kind this library does not place (listed as `other`) gets here only to be cancelled (a MODIFY
    // of it is refused), and a cancel names it by its id alone: it is described as a limit order where it lists a
    // price, else as a market one.
    let order_type = w.order_type.unwrap_or(if price.is_some() { OrderType::Limit } else { OrderType::Market });
    let price = price.filter(|_| order_type == OrderType::Limit);
    // Read as an alert's ticker is, as the snapshot's index matched it: sent as written, a working order listed as
    // `NASDAQ:AAPL` went to the broker under that symbol (a re-size's new order refused after its cancel), and a
    // crypto one as `COINBASE:BTCUSD` was no pair at all (the whole CLOSE answered 500).
    let instrument = crate::alert::normalize_instrument(&w.instrument);
    let mut order = Order {
        asset_class,
        symbol: order_symbol(asset_class, &instrument),
        pair: crypto_pair(asset_class, &instrument)?,
        intent,
        quantity,
        order_type,
        limit_price: price.map(|p| p.abs()),
        price_effect: None,
        // Only a cancel gets here with the broker's own time in force (a MODIFY of such an order is refused), and
        // no broker's cancel sends one: it names the order by its id alone.
        duration: w.duration.unwrap_or_default(),
        legs: Vec::new(),
        client_order_id,
        reference_price: None,
    };
    if asset_class == AssetClass::Option {
        option::held_legs(&mut order, &w.legs, price).map_err(|e| e.in_working_order(&w.id))?;
    }
    Ok(order)
}

/// The order a cancel names: [`working_order`] at its listed size and price. Every broker cancels by its own id
/// alone, so an option order listed without its legs, or with legs that cannot be read (a broker's own symbol for
/// one, a contract twice), is pulled all the same: refused, an exit listed that way failed every CLOSE of its
/// position (a 500 at every bot, and at every retry).
fn cancelled_order(
    asset_class: AssetClass,
    w: &WorkingOrder,
    intent: Intent,
    client_order_id: ClientOrderId,
) -> Result<Order, OrderError> {
    let full = || working_order(asset_class, w, intent, w.quantity, w.price, client_order_id);
    if asset_class == AssetClass::Option && (w.legs.is_empty() || full().is_err()) {
        // Built as a single instrument's order (no legs to read), then named the option it is.
        let mut order = working_order(AssetClass::Equity, w, intent, w.quantity, w.price, client_order_id)?;
        order.asset_class = AssetClass::Option;
        order.symbol = order_symbol(AssetClass::Option, &crate::alert::normalize_instrument(&w.instrument));
        return Ok(order);
    }
    full()
}

#[inline(always)]
fn base_order(
    ctx: &BuildContext<'_>,
    decided: &Decided<'_>,
    intent: Intent,
    quantity: Decimal,
    client_order_id: ClientOrderId,
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
        // The one place the reference price is set: what sizing divides by (alert, mid, last); the alert's
        // price keeps the sender's digits, a computed mid drops the division's trailing zeros.
        reference_price: alert.price.or_else(|| sizing_price(s, alert).ok().map(|p| p.normalize())),
    };
    if decided.order_type == OrderType::Limit {
        order.limit_price = Some(match alert.price {
            Some(p) if !crate::decimal::not_positive(p) => p,
            Some(p) => return Err(OrderError::LimitNotPositive { instrument: alert.instrument.to_string(), price: p }),
            None => match alert.limit_target {
                // The alert's own Limit Target (TradersPost's `limitPriceType`) wins.
                Some(which) => price::limit_from_alert_target(s, &alert.instrument, intent, which)?,
                None => limit_from_quote(s, &alert.instrument, intent)?,
            },
        });
    }
    Ok(order)
}

fn crypto_pair(asset_class: AssetClass, instrument: &str) -> Result<Option<CryptoPair>, OrderError> {
    if asset_class != AssetClass::Crypto {
        return Ok(None);
    }
    CryptoPair::parse(instrument)
        .map(Some)
        .ok_or_else(|| OrderError::NotACryptoPair { instrument: instrument.to_string() })
}
