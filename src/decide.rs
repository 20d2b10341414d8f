//! The strategy's rules applied to parsed alerts: action words resolved, directions
//! found, and every reason to refuse an alert named in a trader's words.

use crate::alert::{Action, ActionKind, ActionWord, Alert, Position};
use crate::decimal::Decimal;
use crate::model::OptionContract;
use crate::model::{AssetClass, Direction, Duration, InstrumentKey, Intent, OrderType};
use crate::strategy::{HeldLeg, LimitTarget, OrderIntent, Selection, Strategy, WorkingOrder};
use smallvec::SmallVec;

/// One alert after the decision: action and direction resolved, defaults applied.
#[derive(Debug, Clone)]
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
    /// The alert's instrument read for the strategy's asset class.
    pub key: InstrumentKey,
    /// The alert as parsed.
    pub alert: &'a Alert,
    /// Whether the alert's option legs name the contracts it acts on: an option strategy's CLOSE, MODIFY or CANCEL
    /// alone, or a CANCEL and the exit it leads (`cancel: true`), whose positions and orders are then those holding
    /// the named contracts (`holds_named`). The legs of a reversal describe the position it opens, so its CLOSE
    /// closes what is held on the underlying.
    pub named: bool,
    /// The CLOSE of a reversal (an OPEN follows it in the same alert): the alert's price is the new position's, so
    /// it prices this close only where the close trades the same contracts.
    pub reversing: bool,
    /// The OPEN of a reversal: an earlier step of the same alert closes the other side of its instrument, and
    /// the OPEN goes out only after that close (a bot holding the other side is closed first, not netted).
    pub reversed: bool,
    /// A CANCEL leading an entry (`cancel: true`): it pulls the instrument's working entries of both sides, and
    /// `direction` is only the side it was decided on. Pulling only one, the other side's entry (a bracket's
    /// sell-stop beside a buy-stop) stayed working and could later open the position the sender meant to clear.
    pub both_sides: bool,
    /// A CLOSE after a CANCEL of its side and instrument in the same alert (`cancel: true` on an exit): that CANCEL
    /// pulls the working entries, market ones included, so the CLOSE does not pull them again
    /// (`close_pulls`); twice, the second cancel of one order in one delivery was refused.
    pub after_cancel: bool,
}

impl Decided<'_> {
    /// The option legs that name what this step acts on (none when it is not [`Decided::named`]).
    pub fn named_legs(&self) -> &[crate::alert::Leg] {
        if self.named {
            &self.alert.legs
        } else {
            &[]
        }
    }
}

/// The plan for one delivery: the steps to build, and the steps skipped with why.
#[derive(Debug)]
pub struct Plan<'a> {
    /// Steps that go on to order building (one, or two for a reversal, kept inline).
    pub steps: SmallVec<[Decided<'a>; 2]>,
    /// Steps of a reversal that had nothing to do (for example no position to close).
    pub skipped: Vec<Refusal>,
}

/// Why the strategy's rules refuse an alert. Every refusal is answered 200 rejected with
/// its message as the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The instrument is not in `allowed_instruments`.
    #[error("{instrument} is not in this strategy's allowed instruments")]
    NotAllowed {
        /// The alert's instrument.
        instrument: String,
    },
    /// An action word the strategy's `rules` do not map.
    #[error("this strategy has no rule for the action `{word}`; send OPEN or CLOSE with a direction, or add a rule")]
    NoRule {
        /// The word.
        word: ActionWord,
    },
    /// A `buy` (`sell`) the rules make an entry, beside `prevMarketPosition` of the other side and no
    /// `marketPosition`: from a short the buy may have covered it or reversed it. Read as an entry, the flat bots
    /// opened a long while the sender's short stayed open.
    #[error(
        "`action` and `prevMarketPosition` disagree ({:?} vs {:?}): from a {} position the fill may have closed it or \
         reversed it; send `marketPosition` too (the position after the fill) to say which",
        .word.as_str(), held_word(*.held), held_word(*.held)
    )]
    HeldOtherSide {
        /// The word.
        word: ActionWord,
        /// The position `prevMarketPosition` says was held.
        held: Position,
    },
    /// A `buy` (`sell`) the rules make a close, beside `prevMarketPosition` flat or of the same side and no
    /// `marketPosition`: the sender's strategy entered or added, and `sell` → `close_long` from a short sold the
    /// bot's long, a position the sender's strategy never had. Judged by the side the word moves the sender toward,
    /// not the rule's, so a strategy whose rules fade its sender (`sell` → `close_short`) still exits.
    #[error(
        "`action` and `prevMarketPosition` disagree ({:?} vs {:?}): from a {} position a {} enters or adds, but this \
         strategy's rules make it a close",
        .word.as_str(), held_word(*.held), held_word(*.held), .word.as_str()
    )]
    EntryMadeClose {
        /// The word.
        word: ActionWord,
        /// The position `prevMarketPosition` says was held.
        held: Position,
    },
    /// A canonical CLOSE of another side than the one `prevMarketPosition` alone says was held before the fill (or
    /// any side, after flat): the position closed is one the sender's strategy never had. One naming no side closes
    /// the side held before: inferred from the one position held, a CLOSE from a long bought back a short.
    #[error(
        "`action` and `prevMarketPosition` disagree ({:?} vs {:?}): the position before the fill was {}, so there \
         was no {}position to close",
        .sent, held_word(*.held), held_word(*.held), .direction.map_or(String::new(), |d| format!("{d} "))
    )]
    ClosesSideNotHeld {
        /// The action as sent.
        sent: &'static str,
        /// The side the CLOSE would close (none: a CLOSE naming none, after flat).
        direction: Option<Direction>,
        /// The position `prevMarketPosition` says was held.
        held: Position,
    },
    /// The rule's direction and the alert's disagree.
    #[error("`{sent}` means {action} {rule} for this strategy, but the alert says {alert}")]
    DirectionConflict {
        /// The action as sent.
        sent: &'static str,
        /// What the rule makes of it.
        action: Action,
        /// The rule's direction.
        rule: Direction,
        /// The alert's direction.
        alert: Direction,
    },
    /// The direction is switched off.
    #[error("{} trades are disabled for this strategy", direction.as_str().to_lowercase())]
    DirectionDisabled {
        /// The direction.
        direction: Direction,
    },
    /// CLOSE with no position to close (in the direction, when one is known).
    #[error("{}", nothing_to_close(*direction, instrument))]
    NothingToClose {
        /// The direction, when the alert or a rule gave one.
        direction: Option<Direction>,
        /// The instrument.
        instrument: String,
    },
    /// MODIFY or CANCEL with no working order to act on.
    #[error("{}", no_working_order(*action, *direction, instrument, *target, order_id.as_deref(), *names_exit))]
    NoWorkingOrder {
        /// MODIFY or CANCEL.
        action: Action,
        /// The direction, when known.
        direction: Option<Direction>,
        /// The instrument.
        instrument: String,
        /// The alert's `target`, when given.
        target: Option<OrderIntent>,
        /// The alert's `order_id`, when given.
        order_id: Option<String>,
        /// The `order_id` names a working exit of the instrument, which a CANCEL never pulls: told only that no
        /// such order was working, the trader was told wrong.
        names_exit: bool,
    },
    /// A price of zero or below on an equity or crypto alert: the sender's error, so it is
    /// answered 200 rejected (a 500 would invite the sender's automatic resends).
    #[error("the alert's price {price} for {instrument} is not above zero; send a positive price, or none")]
    PriceNotPositive {
        /// The instrument.
        instrument: String,
        /// The price as sent.
        price: Decimal,
    },
    /// MODIFY with nothing to change.
    #[error("MODIFY needs a new price, quantity or notional")]
    NothingToModify,
    /// MODIFY naming neither the entry nor the exit, with a working entry on one bot and a working exit on another:
    /// one price for both moved an exit to the entry's level (the position sold) or an entry to the exit's (bought
    /// at the market).
    #[error(
        "MODIFY of the {direction} {instrument} order is ambiguous: one bot has a working entry and another a \
         working exit; send \"target\": \"entry\" or \"exit\", or \"order_id\""
    )]
    ModifyEntryOrExit {
        /// The side.
        direction: Direction,
        /// The instrument.
        instrument: String,
    },
    /// `order_type: limit` without a price.
    #[error("order_type limit requires a price")]
    LimitWithoutPrice,
    /// The strategy's limit prices come from the alert, which has none.
    #[error(
        "this strategy places limit orders at the alert's price (Limit Target: Alert Price), and the alert has no price"
    )]
    NoAlertPrice,
    /// Option legs sent to a strategy that does not trade options.
    #[error("the alert has option legs, but this strategy trades {asset_class}")]
    LegsNotOptions {
        /// What the strategy trades.
        asset_class: AssetClass,
    },
    /// Internal selection, and the alert names contracts (legs, or an option ticker):
    /// only external selection takes the contract from the alert, so trading the
    /// strategy's own pick instead would not be what the sender asked for.
    #[error(
        "this strategy picks its own contracts (internal selection), and the alert names {legs}; remove the legs \
         (send the underlying's ticker) or switch the strategy to external selection"
    )]
    LegsWithInternalSelection {
        /// The contracts the alert names, in words.
        legs: String,
    },
    /// An option strategy, and the alert names a contract under a key it does not read (`"symbol_name":
    /// "SPY240126P00480000"`): dropped, the strategy traded its own pick where the sender named another contract,
    /// and a CLOSE closed every position on the underlying.
    #[error(
        "`{key}` names the option contract {contract}, and is not read: an option contract is named by the alert's \
         ticker or in its `legs`; send the contract there, or leave `{key}` out"
    )]
    UnreadContract {
        /// The key, as sent.
        key: String,
        /// The contract, as an OCC symbol.
        contract: String,
    },
    /// External selection, and the alert names no contracts.
    #[error("this strategy takes its option contracts from the alert (external selection), and the alert has no legs")]
    NoLegs,
    /// OPEN without a direction.
    #[error("OPEN needs a direction: send \"direction\": \"LONG\" or \"SHORT\" for {instrument}")]
    NoDirection {
        /// The instrument.
        instrument: String,
    },
    /// No direction, and both sides are held or working.
    #[error(
        "{action} without a direction is ambiguous: {instrument} has both LONG and SHORT {}; send a direction",
        if *action == Action::Close { "positions" } else { "working orders" }
    )]
    Ambiguous {
        /// The action.
        action: Action,
        /// The instrument.
        instrument: String,
    },
    /// Every step of the delivery was skipped; the reasons, in order.
    #[error("{}", join(.0))]
    NothingToDo(Vec<Refusal>),
}

/// A position as `prevMarketPosition` says it.
fn held_word(p: Position) -> &'static str {
    match p {
        Position::Long => "long",
        Position::Short => "short",
        Position::Flat => "flat",
    }
}

fn nothing_to_close(direction: Option<Direction>, instrument: &str) -> String {
    match direction {
        Some(d) => format!("no open {d} position in {instrument} on any bot, so there is nothing to close"),
        None => format!("no open position in {instrument} on any bot, so there is nothing to close"),
    }
}

/// One sentence for every MODIFY and CANCEL refused for want of an order: the side, the kind and the id in the
/// order a trader reads them ("no working LONG entry order with id 42 in AAPL to cancel"). Built from fragments, an
/// id without a direction once read "no working with id x1 order in AAPL to cancel".
fn no_working_order(
    action: Action,
    direction: Option<Direction>,
    instrument: &str,
    target: Option<OrderIntent>,
    order_id: Option<&str>,
    names_exit: bool,
) -> String {
    let cancel = action == Action::Cancel;
    let side = direction.map(|d| format!("{d} ")).unwrap_or_default();
    // A directed CANCEL says what it pulls (entries); the alert's own `target` is named otherwise.
    let kind = match target {
        _ if cancel && direction.is_some() => "entry ",
        Some(OrderIntent::Entry) => "entry ",
        Some(OrderIntent::Exit) => "exit ",
        None => "",
    };
    let id = order_id.map(|id| format!(" with id {id}")).unwrap_or_default();
    let verb = action.as_str().to_lowercase();
    let mut reason = format!("no working {side}{kind}order{id} in {instrument} to {verb}");
    // A CANCEL meant for an exit finds none, as it pulls entries only: say so, and what closes the position.
    let entries_only = "CANCEL pulls working entries only: to close the position send CLOSE";
    match order_id {
        Some(id) if cancel && names_exit => reason.push_str(&format!("; {id} is an exit, and {entries_only}")),
        _ if cancel && target == Some(OrderIntent::Exit) => reason.push_str(&format!("; {entries_only}")),
        _ => {}
    }
    reason
}

/// Whether the alert's `order_id` names a working exit of the instrument, for [`Refusal::NoWorkingOrder`].
fn names_exit(s: &Strategy, alert: &Alert, key: &InstrumentKey) -> bool {
    alert.order_id.as_deref().is_some_and(|id| {
        s.bots
            .iter()
            .flat_map(|b| b.working_orders.iter())
            .any(|o| o.is_working() && o.intent == OrderIntent::Exit && o.key == *key && o.is_meant(None, Some(id)))
    })
}

fn join(reasons: &[Refusal]) -> String {
    reasons.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

/// Applies the strategy's rules. `Err` is the refusal, whose message is the rejection reason.
pub fn decide<'a>(strategy: &Strategy, alerts: &'a [Alert]) -> Result<Plan<'a>, Refusal> {
    let mut plan = Plan { steps: SmallVec::new(), skipped: Vec::new() };
    let reversal = alerts.len() > 1;
    let closes = |a: &Alert| match a.action {
        ActionKind::Canonical(action) => action == Action::Close,
        ActionKind::Word(w) => rule_for(strategy, w).is_some_and(|(action, _)| action == Action::Close),
    };
    // The contracts an alert names say what to act on, except in a reversal (a CLOSE then an OPEN), whose legs
    // describe the position it opens. A CANCEL leading an exit (`cancel: true`) names them for both steps:
    // taken as a reversal, the exit of one named call closed every position on the underlying. Leading an entry,
    // the legs describe the position to open, and the CANCEL pulls the ticker's entries whatever their
    // contracts: named, it left an entry on another strike working beside the new one.
    // TradersPost's `cancel: true`: a CANCEL leading the exit or entry it makes way for.
    let cancel_led = reversal && alerts[0].action == ActionKind::Canonical(Action::Cancel);
    // Only a later OPEN makes the legs the new position's: PineConnector's `closelongshort` (a CLOSE of each side)
    // names the contracts it closes, and taken as a reversal it closed every position on the underlying.
    let opens = |a: &Alert| match a.action {
        ActionKind::Canonical(action) => action == Action::Open,
        ActionKind::Word(w) => rule_for(strategy, w).is_some_and(|(action, _)| action == Action::Open),
    };
    let named = !alerts.iter().skip(1).any(opens) || (cancel_led && alerts.get(1).is_some_and(closes));
    // A CANCEL leading an exit (`cancel: true`) with working entries on both sides pulls those of the side the
    // exit closes: refused as ambiguous, it took the exit down with it and the position stayed open. The side is
    // the next step's own, its rule's, or (a CLOSE saying none) the one position's. Leading an entry, it pulls both
    // sides' ([`Decided::both_sides`]), and is decided on the entry's side.
    let exit_side = || {
        let next = alerts.get(1).filter(|_| cancel_led)?;
        let stated = match next.action {
            ActionKind::Word(w) => rule_for(strategy, w).map(|(_, d)| d),
            ActionKind::Canonical(_) => None,
        };
        stated.or(next.direction).or_else(|| decide_one(strategy, next, 1, named).ok().map(|d| d.direction))
    };
    // TradersPost's `cancel: true` on an entry cancels "all open orders for the specified ticker".
    let entry_led = cancel_led && alerts.get(1).is_some_and(opens);
    for (step, alert) in alerts.iter().enumerate() {
        let both_sides = step == 0 && entry_led;
        // The direction an entry's CANCEL carries is the entry's: asked of it, the other side's entries working
        // alone found nothing to pull.
        let undirected;
        let asked = match alert.direction {
            Some(_) if both_sides => {
                undirected = Alert { direction: None, ..alert.clone() };
                &undirected
            }
            _ => alert,
        };
        let decided = match decide_one(strategy, asked, step, named) {
            Err(r @ Refusal::Ambiguous { action: Action::Cancel, .. }) if step == 0 => match exit_side() {
                Some(d) => {
                    let side = Alert { direction: Some(d), ..alert.clone() };
                    decide_one(strategy, &side, step, named).map(|d| Decided { alert, ..d })
                }
                None => Err(r),
            },
            other => other.map(|d| Decided { alert, ..d }),
        };
        match decided {
            Ok(mut d) => {
                d.reversing = d.action == Action::Close
                    && alerts[step + 1..].iter().any(|a| a.action == ActionKind::Canonical(Action::Open));
                d.both_sides = both_sides;
                plan.steps.push(d)
            }
            // In a reversal (CLOSE then OPEN) a missing position only means the first
            // half has nothing to do; the strategy's new position still gets opened.
            // Likewise a CANCEL that leads a longer alert (TradersPost's `cancel: true` on an
            // exit) with nothing working: the exit still goes out. And a reversal into a
            // disabled direction still closes the position it leaves: a disabled direction
            // refuses entries only, so a position is never stranded (docs/strategy.md).
            Err(r @ Refusal::NothingToClose { .. }) if reversal => plan.skipped.push(r),
            // PineConnector's `closelongshort` beside `prevMarketPosition: long`: the short's CLOSE has nothing the
            // sender held to close, and the long's still goes (refused whole, the long stayed open).
            // Not behind `cancel: true`: the CANCEL alone would go, answered processed, the close refused.
            Err(r @ Refusal::ClosesSideNotHeld { .. }) if reversal && !cancel_led => plan.skipped.push(r),
            // Only after a close: a `cancel: true` entry into a disabled direction closes nothing, and its
            // refusal is the answer (it was answered processed, the cancel alone sent).
            Err(r @ Refusal::DirectionDisabled { .. }) if alerts[..step].iter().any(closes) => plan.skipped.push(r),
            Err(r @ Refusal::NoWorkingOrder { action: Action::Cancel, .. }) if reversal => plan.skipped.push(r),
            Err(r) => return Err(r),
        }
    }
    if plan.steps.is_empty() {
        return Err(Refusal::NothingToDo(plan.skipped));
    }
    for i in 1..plan.steps.len() {
        let (before, rest) = plan.steps.split_at_mut(i);
        let d = &mut rest[0];
        d.reversed = d.action == Action::Open
            && before.iter().any(|c| c.action == Action::Close && c.direction != d.direction && c.key == d.key);
        d.after_cancel = d.action == Action::Close
            && before
                .iter()
                .any(|c| c.action == Action::Cancel && (c.both_sides || c.direction == d.direction) && c.key == d.key);
    }
    Ok(plan)
}

fn decide_one<'a>(s: &Strategy, alert: &'a Alert, step: usize, named: bool) -> Result<Decided<'a>, Refusal> {
    let inst = alert.instrument.as_str();
    let key = InstrumentKey::new(inst, s.asset_class);
    if !s.allows(&key) {
        return Err(Refusal::NotAllowed { instrument: inst.to_string() });
    }
    // Options take a spread's net price, negative for a credit; shares and coins never
    // trade at zero or below.
    if let Some(price) = alert.price.filter(|p| crate::decimal::not_positive(*p) && s.asset_class != AssetClass::Option)
    {
        return Err(Refusal::PriceNotPositive { instrument: inst.to_string(), price });
    }
    let (action, rule_direction) = match alert.action {
        ActionKind::Canonical(a) => (a, None),
        ActionKind::Word(w) => {
            let (action, direction) = rule_for(s, w).ok_or(Refusal::NoRule { word: w })?;
            if let Some(held) = alert.held_before {
                judge_word_beside(s, w, held, action, direction)?;
            }
            (action, Some(direction))
        }
    };
    let direction = match (rule_direction, alert.direction) {
        (Some(r), Some(a)) if r != a => {
            return Err(Refusal::DirectionConflict { sent: alert.action.as_str(), action, rule: r, alert: a })
        }
        (Some(d), _) | (None, Some(d)) => d,
        // The side held before the fill is the side a CLOSE naming none closes: inferred from the one position
        // held, a CLOSE from a long bought back a short.
        (None, None) => match (action, alert.held_before) {
            (Action::Close, Some(Position::Long)) => Direction::Long,
            (Action::Close, Some(Position::Short)) => Direction::Short,
            // Nothing was held before: refused as such, not as "nothing to close", which a `cancel: true` ahead of it
            // skips (the CANCEL went, answered processed).
            (Action::Close, Some(Position::Flat)) => {
                return Err(Refusal::ClosesSideNotHeld {
                    sent: alert.action.as_str(),
                    direction: None,
                    held: Position::Flat,
                })
            }
            _ => infer_direction(s, alert, &key, action, named && s.asset_class == AssetClass::Option)?,
        },
    };
    // A canonical CLOSE names the bots' side as the sender's; a word's side is the rules' (judged above).
    if let (ActionKind::Canonical(Action::Close), Some(held)) = (alert.action, alert.held_before) {
        if held != Position::from(direction) {
            return Err(Refusal::ClosesSideNotHeld { sent: alert.action.as_str(), direction: Some(direction), held });
        }
    }

    let named = named && s.asset_class == AssetClass::Option;
    let naming: &[crate::alert::Leg] = if named { &alert.legs } else { &[] };
    let working = |entry_only: bool| {
        s.bots.iter().flat_map(|b| b.working_orders.iter()).any(|o| {
            o.is_working()
                && o.direction == direction
                && (!entry_only || o.intent == OrderIntent::Entry)
                && o.key == key
                && o.is_meant(alert.target, alert.order_id.as_deref())
                && holds_named(&o.legs, naming)
        })
    };
    match action {
        Action::Open => {
            if !s.directions.allows(direction) {
                return Err(Refusal::DirectionDisabled { direction });
            }
        }
        Action::Close => {
            let held = s
                .bots
                .iter()
                .flat_map(|b| b.positions.iter())
                .any(|p| p.direction == direction && p.key == key && holds_named(&p.legs, naming));
            // A market entry still working (queued for the open) is the position the sender holds, not yet filled:
            // the CLOSE pulls it ([`close_pulls`]). Refused, it filled at the open.
            let entry_working = || {
                s.bots
                    .iter()
                    .flat_map(|b| b.working_orders.iter())
                    .any(|o| close_pulls(o, s.asset_class, direction, &key, naming))
            };
            if !held && !entry_working() {
                return Err(Refusal::NothingToClose { direction: Some(direction), instrument: inst.to_string() });
            }
        }
        Action::Modify | Action::Cancel => {
            if !working(action == Action::Cancel) {
                return Err(Refusal::NoWorkingOrder {
                    action,
                    direction: Some(direction),
                    instrument: inst.to_string(),
                    target: alert.target,
                    order_id: alert.order_id.clone(),
                    names_exit: names_exit(s, alert, &key),
                });
            }
            // Legs each priced give a spread its new net price.
            let legs_priced = !alert.legs.is_empty() && alert.legs.iter().all(|l| l.price.is_some());
            if action == Action::Modify
                && alert.price.is_none()
                && !legs_priced
                && alert.quantity.is_none()
                && alert.notional.is_none()
            {
                return Err(Refusal::NothingToModify);
            }
            // Naming neither, a MODIFY means the one working order of the side on each bot; an entry on one bot and
            // an exit on another are not one order, and one price does not suit both.
            // (One bot alone holding both is refused by the order builder, naming its orders.) An order whose size
            // is not known (a trader's, sized by an amount of money) is no MODIFY's to change, and is not counted:
            // a trader's dollar sell on one bot made the other bot's entry ambiguous.
            if action == Action::Modify && alert.target.is_none() && alert.order_id.is_none() {
                let (mut entry, mut exit, mut bots) = (false, false, 0);
                for b in &s.bots {
                    let mut any = false;
                    for o in b.working_orders.iter().filter(|o| {
                        o.is_working()
                            && o.modifiable()
                            && o.direction == direction
                            && o.key == key
                            && holds_named(&o.legs, naming)
                    }) {
                        any = true;
                        entry |= o.intent == OrderIntent::Entry;
                        exit |= o.intent == OrderIntent::Exit;
                    }
                    bots += usize::from(any);
                }
                if entry && exit && bots > 1 {
                    return Err(Refusal::ModifyEntryOrExit { direction, instrument: inst.to_string() });
                }
            }
        }
    }

    let order_type = alert.order_type.unwrap_or(s.order_type);
    // A limit spread may be priced by its legs: their prices are summed into the net.
    let legs_priced = !alert.legs.is_empty() && alert.legs.iter().all(|l| l.price.is_some());
    let opens_or_closes = matches!(action, Action::Open | Action::Close);
    // An alert that names its own quote (`limitPriceType`) is priced from the snapshot.
    let quoted = alert.limit_target.is_some();
    if opens_or_closes && order_type == OrderType::Limit && alert.price.is_none() && !legs_priced && !quoted {
        if alert.order_type == Some(OrderType::Limit) {
            return Err(Refusal::LimitWithoutPrice);
        }
        if s.limit_target == LimitTarget::AlertPrice {
            return Err(Refusal::NoAlertPrice);
        }
    }
    if !alert.legs.is_empty() && s.asset_class != AssetClass::Option {
        return Err(Refusal::LegsNotOptions { asset_class: s.asset_class });
    }
    if s.asset_class == AssetClass::Option {
        if let Some(u) = &alert.unread_contract {
            return Err(Refusal::UnreadContract { key: u.key.to_string(), contract: u.contract.clone() });
        }
        let external = s.options.as_ref().is_some_and(|o| o.selection == Selection::External);
        if external && alert.legs.is_empty() && action == Action::Open {
            return Err(Refusal::NoLegs);
        }
        if !external && !alert.legs.is_empty() {
            return Err(Refusal::LegsWithInternalSelection { legs: named_legs(alert) });
        }
    }

    let duration = alert.duration.unwrap_or(s.duration);
    Ok(Decided {
        step,
        action,
        direction,
        order_type,
        duration,
        key,
        alert,
        named,
        reversing: false,
        reversed: false,
        both_sides: false,
        after_cancel: false,
    })
}

/// Whether held (or working) option legs hold every contract the alert's legs name; true when the alert names
/// none. An option CLOSE, MODIFY or CANCEL that names its contracts (an OCC ticker, or legs) acts on the positions
/// and orders holding them only: on the underlying alone it sold positions and moved orders of other contracts
/// the alert never named. A leg names what it gives: an OCC symbol, or its side, strike and expiration.
pub(crate) fn holds_named(held: &[HeldLeg], named: &[crate::alert::Leg]) -> bool {
    named.iter().all(|n| held.iter().filter_map(|h| OptionContract::parse_occ(&h.symbol)).any(|h| leg_names(n, &h)))
}

/// Whether a CLOSE of `direction` on `key` pulls the working order `o`: a market entry of that side, still working
/// at the broker (taken outside market hours, queued for the open). The strategy that sent it holds it as its
/// position, so a CLOSE means it too: left working, it filled at the open, and the sender, who had closed, held
/// a position. Matched as the position's exits are: a coin's entry on any pair of it ([`same_holding`]), an option
/// entry holding every contract the alert names. A limit entry rests until its price and is CANCEL's to pull; an
/// order of a kind this library does not place (listed as `other`) is not read as one.
pub(crate) fn close_pulls(
    o: &WorkingOrder,
    asset_class: AssetClass,
    direction: Direction,
    key: &InstrumentKey,
    named: &[crate::alert::Leg],
) -> bool {
    o.is_working()
        && o.intent == OrderIntent::Entry
        && o.order_type == Some(OrderType::Market)
        && o.direction == direction
        && same_holding(asset_class == AssetClass::Crypto, &o.key, key)
        && holds_named(&o.legs, named)
}

/// Whether a crypto CLOSE of `direction` on `key` pulls the working order `o` as a buy paid in the coin it sells: a
/// buy (an entry of a long, or an exit of a short) on a pair quoted in that coin (ETH/BTC beside a CLOSE of a BTC
/// long), the trader's or the strategy's own entry on that pair alike. The broker holds the coin it spends, which
/// the position counts and the CLOSE sells whole: left working beside the close, the broker refused the close for
/// insufficient balance and the position stayed open. So it is cancelled first, as the position's exits are.
pub(crate) fn pays_in_closed_coin(o: &WorkingOrder, direction: Direction, key: &InstrumentKey) -> bool {
    let buy = matches!(
        (o.intent, o.direction),
        (OrderIntent::Entry, Direction::Long) | (OrderIntent::Exit, Direction::Short)
    );
    let coin = key.as_str().split_once('/').map(|(base, _)| base);
    let paid_in = o.key.as_str().split_once('/').map(|(_, quote)| quote);
    o.is_working() && buy && direction == Direction::Long && coin.is_some() && coin == paid_in
}

/// Whether an order on `a` works on what a position on `b` holds: the same instrument, or for crypto the same coin
/// through another pair (a coin held is held in every pair of it the strategy trades, as the sync files it). By the
/// pair alone, a CLOSE through BTC/USD left the coin's take-profit on BTC/USDC working, its hold keeping the close
/// from selling the coin, and a MODIFY grew an exit past the coin beside the other pair's exit. `crypto`: the
/// instruments are crypto pairs. A host asks it too (whether a later alert on `b` acts on an entry it holds on `a`).
pub fn same_holding(crypto: bool, a: &InstrumentKey, b: &InstrumentKey) -> bool {
    if a == b {
        return true;
    }
    crypto && matches!((a.as_str().split_once('/'), b.as_str().split_once('/')), (Some((x, _)), Some((y, _))) if x == y)
}

/// Whether an alert's leg names the contract `c`: by its OCC symbol, or by the side, strike and expiration it gives.
pub(crate) fn leg_names(n: &crate::alert::Leg, c: &OptionContract) -> bool {
    let (side, strike, expiration, root) = match &n.symbol {
        Some(symbol) => match OptionContract::parse_occ(symbol) {
            Some(c) => (Some(c.side), Some(c.strike), Some(c.expiration), Some(c.root)),
            None => return false,
        },
        None => (n.side, n.strike, n.expiration, None),
    };
    side.map_or(true, |x| x == c.side)
        && strike.map_or(true, |x| x == c.strike)
        && expiration.map_or(true, |x| x == c.expiration)
        && root.as_deref().map_or(true, |r| {
            InstrumentKey::new(r, AssetClass::Option) == InstrumentKey::new(&c.root, AssetClass::Option)
        })
}

/// A rule word beside `prevMarketPosition` alone (`held`), resolved by the rules into `action` on `direction`.
/// Judged by the side the word moves the sender toward, not the rule's (which may fade the sender): a buy from a
/// short may have covered it or reversed it, so it may be a close but not an entry; from flat or a long it enters or
/// adds, so it may be an entry but not a close. An `exit` closes what the sender held: nothing after flat, and the
/// bots' side of it (the other side where the buy and sell rules fade the sender); `exit` → `close_long` from a
/// short sold a long the sender never had, and beside flat closed a position all the same.
fn judge_word_beside(
    s: &Strategy,
    w: ActionWord,
    held: Position,
    action: Action,
    direction: Direction,
) -> Result<(), Refusal> {
    let toward = match w {
        ActionWord::Buy => Position::Long,
        ActionWord::Sell => Position::Short,
        ActionWord::Exit if action == Action::Close => {
            // Fading: the rules make the sender's buy a sell at the bots (`open_short`, `close_long`), or its sell a
            // buy. Without a buy or a sell rule (or with rules that disagree) it cannot be told, and only an exit
            // after flat is refused: judged as not fading, a short-only strategy fading a long-only sender through
            // `entry`/`exit` rules alone refused its exits.
            let buy_fades = s.rules.buy.map(|i| !i.is_buy());
            let sell_fades = s.rules.sell.map(|i| i.is_buy());
            let fades = match (buy_fades, sell_fades) {
                (Some(b), Some(v)) if b != v => None,
                (b, v) => b.or(v),
            };
            let closes_held = match (held.side(), fades) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(d), Some(f)) => (if f { d.opposite() } else { d }) == direction,
            };
            return match closes_held {
                true => Ok(()),
                false => Err(Refusal::ClosesSideNotHeld { sent: w.as_str(), direction: Some(direction), held }),
            };
        }
        ActionWord::Entry | ActionWord::Exit => return Ok(()),
    };
    let from_other = held != Position::Flat && held != toward;
    match action {
        Action::Open if from_other => Err(Refusal::HeldOtherSide { word: w, held }),
        Action::Close if !from_other => Err(Refusal::EntryMadeClose { word: w, held }),
        _ => Ok(()),
    }
}

/// `2 option legs (SPXW240119C04500000, …)`, or `option legs` when none names a symbol.
fn named_legs(alert: &Alert) -> String {
    let symbols: Vec<&str> = alert.legs.iter().filter_map(|l| l.symbol.as_deref()).collect();
    let count = match alert.legs.len() {
        1 => "an option leg".to_string(),
        n => format!("{n} option legs"),
    };
    if symbols.is_empty() {
        count
    } else {
        format!("{count} ({})", symbols.join(", "))
    }
}

/// What the strategy's `rules` make of an action word: OPEN or CLOSE, and the direction.
pub fn rule_for(s: &Strategy, w: ActionWord) -> Option<(Action, Direction)> {
    let intent: Intent = match w {
        ActionWord::Buy => s.rules.buy,
        ActionWord::Sell => s.rules.sell,
        ActionWord::Entry => s.rules.entry,
        ActionWord::Exit => s.rules.exit,
    }?;
    let action = if intent.is_open() { Action::Open } else { Action::Close };
    Some((action, intent.direction()))
}

/// An alert as far as the rules resolve it on their own, for an answer that stops before
/// a plan (a rejection): an action word the strategy has a rule for becomes that action,
/// and its direction fills in a missing one (an alert's own direction is kept, so a
/// conflict stays visible).
pub fn resolve_words(s: &Strategy, mut alert: Alert) -> Alert {
    // Beside `prevMarketPosition` the word is what was judged: resolved, a refused `buy` from a short showed as the
    // OPEN LONG it was refused as, which sent back would trade.
    if alert.held_before.is_some() {
        return alert;
    }
    if let ActionKind::Word(w) = alert.action {
        if let Some((action, direction)) = rule_for(s, w) {
            alert.action = ActionKind::Canonical(action);
            alert.direction = alert.direction.or(Some(direction));
        }
    }
    alert
}

/// Without a direction, CLOSE takes the one open position's (a working market entry counting as one); MODIFY and
/// CANCEL the one working order's. OPEN always needs one.
/// An alert naming option contracts (`named`) counts only the positions and orders holding them: counting every
/// one on the underlying, a CLOSE or CANCEL of the one call held beside a put on the other side was refused as
/// ambiguous, and the position stayed open or the entry working.
fn infer_direction(
    s: &Strategy,
    alert: &Alert,
    key: &InstrumentKey,
    action: Action,
    named: bool,
) -> Result<Direction, Refusal> {
    let inst = alert.instrument.as_str();
    let naming: &[crate::alert::Leg] = if named { &alert.legs } else { &[] };
    let mut found: Vec<Direction> = match action {
        Action::Open => return Err(Refusal::NoDirection { instrument: inst.to_string() }),
        // A market entry still working is a position not yet filled ([`close_pulls`]): its side is one held.
        Action::Close => s
            .bots
            .iter()
            .flat_map(|b| b.positions.iter())
            .filter(|p| p.key == *key && holds_named(&p.legs, naming))
            .map(|p| p.direction)
            .chain(
                s.bots
                    .iter()
                    .flat_map(|b| b.working_orders.iter())
                    .filter_map(|o| close_pulls(o, s.asset_class, o.direction, key, naming).then_some(o.direction)),
            )
            .collect(),
        Action::Modify | Action::Cancel => {
            let meant: Vec<&crate::strategy::WorkingOrder> = s
                .bots
                .iter()
                .flat_map(|b| b.working_orders.iter())
                .filter(|o| o.is_working() && o.key == *key && holds_named(&o.legs, naming))
                .filter(|o| o.is_meant(alert.target, alert.order_id.as_deref()))
                .filter(|o| action == Action::Modify || o.intent == OrderIntent::Entry)
                .collect();
            // A MODIFY changes no order whose size is not known (a trader's, sized by an amount of money): beside
            // orders it can change, such an order's side is not the one meant. Alone, it is, so the refusal names
            // it. A CANCEL pulls it as any other.
            // Nor one of a kind this library does not place (a stop, a stop-limit, a bracket), for the same reason.
            let sized = action == Action::Modify && meant.iter().any(|o| o.modifiable());
            meant.iter().filter(|o| !sized || o.modifiable()).map(|o| o.direction).collect()
        }
    };
    found.dedup();
    found.sort_by_key(|d| *d == Direction::Short);
    found.dedup();
    match found.as_slice() {
        [d] => Ok(*d),
        [] if action == Action::Close => Err(Refusal::NothingToClose { direction: None, instrument: inst.to_string() }),
        [] => Err(Refusal::NoWorkingOrder {
            action,
            direction: None,
            instrument: inst.to_string(),
            target: alert.target,
            order_id: alert.order_id.clone(),
            names_exit: names_exit(s, alert, key),
        }),
        _ => Err(Refusal::Ambiguous { action, instrument: inst.to_string() }),
    }
}
