//! The strategy's rules applied to parsed alerts: action words resolved, directions
//! found, and every reason to refuse an alert named in a trader's words.

use crate::alert::{Action, ActionKind, ActionWord, Alert, Direction, OrderType};
use crate::order::{same_instrument, AssetClass, Decided, Intent};
use crate::strategy::{LimitTarget, OrderIntent, Selection, Strategy};

/// The plan for one delivery: the steps to build, and the steps skipped with why.
#[derive(Debug)]
pub struct Plan<'a> {
    /// Steps that go on to order building.
    pub steps: Vec<Decided<'a>>,
    /// Steps of a reversal that had nothing to do (for example no position to close).
    pub skipped: Vec<String>,
}

/// Applies the strategy's rules. `Err` is the rejection reason.
pub fn decide<'a>(strategy: &Strategy, alerts: &'a [Alert]) -> Result<Plan<'a>, String> {
    let mut plan = Plan { steps: Vec::with_capacity(alerts.len()), skipped: Vec::new() };
    let reversal = alerts.len() > 1;
    for (step, alert) in alerts.iter().enumerate() {
        match decide_one(strategy, alert, step) {
            Ok(d) => plan.steps.push(d),
            // In a reversal (CLOSE then OPEN) a missing position only means the first
            // half has nothing to do; the strategy's new position still gets opened.
            Err(Refusal::NothingToClose(reason)) if reversal => plan.skipped.push(reason),
            Err(Refusal::NothingToClose(reason) | Refusal::Reason(reason)) => return Err(reason),
        }
    }
    if plan.steps.is_empty() {
        return Err(plan.skipped.join("; "));
    }
    Ok(plan)
}

enum Refusal {
    NothingToClose(String),
    Reason(String),
}

impl From<String> for Refusal {
    fn from(s: String) -> Self {
        Refusal::Reason(s)
    }
}

fn decide_one<'a>(s: &Strategy, alert: &'a Alert, step: usize) -> Result<Decided<'a>, Refusal> {
    let inst = alert.instrument.as_str();
    if !s.allows_instrument(inst) {
        return Err(format!("{inst} is not in this strategy's allowed instruments").into());
    }
    let (action, rule_direction) = match alert.action {
        ActionKind::Canonical(a) => (a, None),
        ActionKind::Word(w) => {
            let intent = rule(s, w).ok_or_else(|| {
                format!(
                    "this strategy has no rule for the action `{}`; send OPEN or CLOSE with a direction, or add a rule",
                    w.as_str()
                )
            })?;
            let action = if intent.is_open() { Action::Open } else { Action::Close };
            (action, Some(intent.direction()))
        }
    };
    let direction = match (rule_direction, alert.direction) {
        (Some(r), Some(a)) if r != a => {
            return Err(format!(
                "`{}` means {} {} for this strategy, but the alert says {}",
                alert.action.as_str(),
                action.as_str(),
                r.as_str(),
                a.as_str()
            )
            .into())
        }
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => infer_direction(s, alert, action)?,
    };

    let working = |entry_only: bool| {
        s.bots.iter().flat_map(|b| b.working_orders.iter()).any(|o| {
            o.is_working()
                && o.direction == direction
                && (!entry_only || o.intent == OrderIntent::Entry)
                && same_instrument(&o.instrument, inst, s.asset_class)
        })
    };
    match action {
        Action::Open => {
            if !s.directions.allows(direction) {
                return Err(
                    format!("{} trades are disabled for this strategy", direction.as_str().to_lowercase()).into()
                );
            }
        }
        Action::Close => {
            let held = s
                .bots
                .iter()
                .flat_map(|b| b.positions.iter())
                .any(|p| p.direction == direction && same_instrument(&p.instrument, inst, s.asset_class));
            if !held {
                return Err(Refusal::NothingToClose(format!(
                    "no open {} position in {inst} on any bot, so there is nothing to close",
                    direction.as_str()
                )));
            }
        }
        Action::Modify => {
            if !working(false) {
                return Err(format!("no working {} order in {inst} to modify", direction.as_str()).into());
            }
            if alert.price.is_none() && alert.quantity.is_none() && alert.notional.is_none() {
                return Err("MODIFY needs a new price, quantity or notional".to_string().into());
            }
        }
        Action::Cancel => {
            if !working(true) {
                return Err(format!("no working {} entry order in {inst} to cancel", direction.as_str()).into());
            }
        }
    }

    let order_type = alert.order_type.unwrap_or(s.order_type);
    // A limit spread may be priced by its legs: their prices are summed into the net.
    let legs_priced = !alert.legs.is_empty() && alert.legs.iter().all(|l| l.price.is_some());
    let opens_or_closes = matches!(action, Action::Open | Action::Close);
    if opens_or_closes && order_type == OrderType::Limit && alert.price.is_none() && !legs_priced {
        if alert.order_type == Some(OrderType::Limit) {
            return Err("order_type limit requires a price".to_string().into());
        }
        if s.limit_target == LimitTarget::AlertPrice {
            return Err(
                "this strategy places limit orders at the alert's price (Limit Target: Alert Price), and the alert has no price"
                    .to_string()
                    .into(),
            );
        }
    }
    if !alert.legs.is_empty() && s.asset_class != AssetClass::Option {
        return Err(format!("the alert has option legs, but this strategy trades {}", s.asset_class.as_str()).into());
    }
    if s.asset_class == AssetClass::Option && action == Action::Open {
        let external = s.options.as_ref().is_some_and(|o| o.selection == Selection::External);
        if external && alert.legs.is_empty() {
            return Err("this strategy takes its option contracts from the alert (external selection), and the alert has no legs"
                .to_string()
                .into());
        }
    }

    Ok(Decided { step, action, direction, order_type, duration: alert.duration.unwrap_or(s.duration), alert })
}

fn rule(s: &Strategy, w: ActionWord) -> Option<Intent> {
    match w {
        ActionWord::Buy => s.rules.buy,
        ActionWord::Sell => s.rules.sell,
        ActionWord::Entry => s.rules.entry,
        ActionWord::Exit => s.rules.exit,
    }
}

/// Without a direction, CLOSE takes the one open position's; MODIFY and CANCEL the one
/// working order's. OPEN always needs one.
fn infer_direction(s: &Strategy, alert: &Alert, action: Action) -> Result<Direction, String> {
    let inst = alert.instrument.as_str();
    let same = |i: &str| same_instrument(i, inst, s.asset_class);
    let mut found: Vec<Direction> = match action {
        Action::Open => {
            return Err(format!("OPEN needs a direction: send \"direction\": \"LONG\" or \"SHORT\" for {inst}"))
        }
        Action::Close => s
            .bots
            .iter()
            .flat_map(|b| b.positions.iter())
            .filter(|p| same(&p.instrument))
            .map(|p| p.direction)
            .collect(),
        Action::Modify | Action::Cancel => s
            .bots
            .iter()
            .flat_map(|b| b.working_orders.iter())
            .filter(|o| o.is_working() && same(&o.instrument))
            .filter(|o| action == Action::Modify || o.intent == OrderIntent::Entry)
            .map(|o| o.direction)
            .collect(),
    };
    found.dedup();
    found.sort_by_key(|d| *d == Direction::Short);
    found.dedup();
    match found.as_slice() {
        [d] => Ok(*d),
        [] if action == Action::Close => {
            Err(format!("no open position in {inst} on any bot, so there is nothing to close"))
        }
        [] => Err(format!("no working order in {inst} to {}", action.as_str().to_lowercase())),
        _ => Err(format!(
            "{} without a direction is ambiguous: {inst} has both LONG and SHORT {}; send a direction",
            action.as_str(),
            if action == Action::Close { "positions" } else { "working orders" }
        )),
    }
}
