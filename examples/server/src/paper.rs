//! Bots' positions and working orders as the server keeps them, and the paper broker that changes them.
//!
//! The core decides CLOSE, MODIFY and CANCEL against the snapshot's `positions` and `working_orders`; the
//! server keeps those per (strategy, bot), stores them in SQLite, and puts them into the engine's snapshot
//! after every change (see `App::refresh_bots`).
//!
//! Each outbox row carries its broker-neutral [`Meaning`]: the core's `Order` for that request (instrument,
//! open or close, direction, quantity from the bot's sizing, market or limit, price), found by building the
//! alert's orders again with the core's public `decide` and `order::build` and matching them to the
//! Outcome's requests by client order id. The paper broker applies that meaning; the http delivery uses it
//! to record the working orders a broker answers with.

use serde::{Deserialize, Serialize};
use strategy_webhook::decimal::Decimal;
use strategy_webhook::outcome::RequestKind;
use strategy_webhook::strategy::{Position, WorkingOrder};

/// What one outbox row does, in broker-neutral words.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meaning {
    /// Instrument (equity symbol; crypto pair as the order names it).
    pub instrument: String,
    /// `long` or `short`: the position side the order acts on.
    pub direction: String,
    /// True for an entry (opens or adds), false for an exit.
    pub open: bool,
    /// `market` or `limit`.
    pub order_type: String,
    /// The limit price.
    #[serde(with = "opt_dec")]
    pub limit_price: Option<Decimal>,
    /// Size.
    #[serde(with = "dec")]
    pub quantity: Decimal,
    /// Time in force.
    pub duration: String,
    /// The price a paper market order fills at: the snapshot's quote (mid, else last), else the alert's price.
    #[serde(with = "opt_dec")]
    pub fill_price: Option<Decimal>,
    /// True for option orders (the paper broker does not simulate them).
    pub option: bool,
}

/// One open position, in the snapshot's own JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PositionRec {
    /// Instrument.
    pub instrument: String,
    /// `long` or `short`.
    pub direction: String,
    /// Size.
    #[serde(with = "dec")]
    pub quantity: Decimal,
    /// Average fill price (paper only; not part of the snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_dec")]
    pub avg_price: Option<Decimal>,
}

/// One working order, in the snapshot's own JSON shape.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OrderRec {
    /// The broker's order id (the paper broker's own for paper bots).
    pub id: String,
    /// Instrument.
    pub instrument: String,
    /// `long` or `short`.
    pub direction: String,
    /// `entry` or `exit`.
    pub intent: String,
    /// `market` or `limit`.
    pub order_type: String,
    /// Limit price.
    #[serde(default, with = "opt_dec")]
    pub price: Option<Decimal>,
    /// Size.
    #[serde(with = "dec")]
    pub quantity: Decimal,
    /// Time in force.
    #[serde(default = "day")]
    pub duration: String,
    /// `open` or `pending` while working.
    pub state: String,
}

fn day() -> String {
    "day".into()
}

/// A bot's positions and working orders.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BotState {
    /// Open positions.
    #[serde(default)]
    pub positions: Vec<PositionRec>,
    /// Working orders.
    #[serde(default)]
    pub working_orders: Vec<OrderRec>,
    /// The paper broker's next order number (so ids stay unique across restarts).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub next_id: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl BotState {
    /// The state as the core's snapshot types, or why it does not fit them.
    pub fn to_core(&self) -> Result<(Vec<Position>, Vec<WorkingOrder>), String> {
        let positions = self
            .positions
            .iter()
            .map(|p| {
                let v = serde_json::json!({ "instrument": p.instrument, "direction": p.direction,
                                            "quantity": p.quantity.to_string() });
                serde_json::from_str(&v.to_string()).map_err(|e| format!("position {}: {e}", p.instrument))
            })
            .collect::<Result<Vec<Position>, String>>()?;
        let orders = self
            .working_orders
            .iter()
            .map(|o| {
                let v = serde_json::json!({ "id": o.id, "instrument": o.instrument, "direction": o.direction,
                    "intent": o.intent, "order_type": o.order_type, "price": o.price.map(|p| p.to_string()),
                    "quantity": o.quantity.to_string(), "duration": o.duration, "state": o.state });
                serde_json::from_str(&v.to_string()).map_err(|e| format!("working order {}: {e}", o.id))
            })
            .collect::<Result<Vec<WorkingOrder>, String>>()?;
        Ok((positions, orders))
    }

    /// Adds to (or opens) a position.
    fn add(&mut self, instrument: &str, direction: &str, qty: Decimal, price: Option<Decimal>) {
        if let Some(p) = self.positions.iter_mut().find(|p| p.instrument == instrument && p.direction == direction) {
            p.avg_price = match (p.avg_price, price) {
                (Some(a), Some(b)) if !(p.quantity + qty).is_zero() => {
                    Some(((a * p.quantity + b * qty) / (p.quantity + qty)).round_dp(6).normalize())
                }
                _ => price.or(p.avg_price),
            };
            p.quantity += qty;
        } else {
            self.positions.push(PositionRec {
                instrument: instrument.to_owned(),
                direction: direction.to_owned(),
                quantity: qty,
                avg_price: price,
            });
        }
    }

    /// Reduces a position; a position brought to zero (or below) is gone.
    fn reduce(&mut self, instrument: &str, direction: &str, qty: Decimal) -> Result<(), String> {
        let Some(i) = self.positions.iter().position(|p| p.instrument == instrument && p.direction == direction) else {
            return Err(format!("no {direction} position in {instrument} to close"));
        };
        let p = &mut self.positions[i];
        p.quantity -= qty;
        if p.quantity <= Decimal::ZERO {
            self.positions.remove(i);
        }
        Ok(())
    }

    /// Records a working order the broker accepted.
    pub fn rest(&mut self, id: String, m: &Meaning) {
        self.working_orders.push(OrderRec {
            id,
            instrument: m.instrument.clone(),
            direction: m.direction.clone(),
            intent: if m.open { "entry" } else { "exit" }.into(),
            order_type: m.order_type.clone(),
            price: m.limit_price,
            quantity: m.quantity,
            duration: m.duration.clone(),
            state: "open".into(),
        });
    }

    /// Applies an accepted replace: new price and size, and the new id when the broker assigned one.
    pub fn replaced(&mut self, old_id: &str, new_id: Option<String>, m: &Meaning) -> bool {
        match self.working_orders.iter_mut().find(|o| o.id == old_id) {
            Some(o) => {
                o.price = m.limit_price;
                o.quantity = m.quantity;
                o.duration = m.duration.clone();
                if let Some(id) = new_id {
                    o.id = id;
                }
                true
            }
            None => false,
        }
    }

    /// Drops a cancelled working order.
    pub fn cancelled(&mut self, id: &str) -> bool {
        let before = self.working_orders.len();
        self.working_orders.retain(|o| o.id != id);
        before != self.working_orders.len()
    }
}

/// The paper broker: applies one request to a bot's state and says what happened, or why it refused.
///
/// Market orders fill at once at [`Meaning::fill_price`]; limit orders rest as working orders with ids
/// `paper-N` (they never fill on their own: there is no market feed) until a MODIFY changes them or a
/// CANCEL removes them. Options are not simulated.
pub fn apply(state: &mut BotState, kind: RequestKind, order_id: Option<&str>, m: &Meaning) -> Result<String, String> {
    if m.option {
        return Err("the paper broker does not simulate option orders".into());
    }
    match kind {
        RequestKind::Place if m.order_type == "limit" => {
            state.next_id += 1;
            let id = format!("paper-{}", state.next_id);
            state.rest(id.clone(), m);
            let price = m.limit_price.map(|p| p.to_string()).unwrap_or_default();
            Ok(format!("working limit order {id}: {} {} {} @ {price}", side(m), m.quantity, m.instrument))
        }
        RequestKind::Place => {
            if m.open {
                state.add(&m.instrument, &m.direction, m.quantity, m.fill_price);
            } else {
                state.reduce(&m.instrument, &m.direction, m.quantity)?;
            }
            let at = m.fill_price.map(|p| format!(" @ {p}")).unwrap_or_default();
            Ok(format!("filled: {} {} {}{at}", side(m), m.quantity, m.instrument))
        }
        RequestKind::Replace => {
            let id = order_id.ok_or("a replace without an order id")?;
            if !state.replaced(id, None, m) {
                return Err(format!("no working order {id} to modify"));
            }
            let price = m.limit_price.map(|p| p.to_string()).unwrap_or_default();
            Ok(format!("modified working order {id}: {} {} @ {price}", m.quantity, m.instrument))
        }
        RequestKind::Cancel => {
            let id = order_id.ok_or("a cancel without an order id")?;
            if !state.cancelled(id) {
                return Err(format!("no working order {id} to cancel"));
            }
            Ok(format!("cancelled working order {id}"))
        }
    }
}

/// `buy` or `sell` for the meaning's open/close and direction.
fn side(m: &Meaning) -> &'static str {
    match (m.open, m.direction.as_str()) {
        (true, "long") | (false, "short") => "buy",
        _ => "sell",
    }
}

/// Decimals as JSON strings, so that `190.50` keeps its scale (the core reads strings and numbers).
mod dec {
    use serde::{Deserializer, Serializer};
    use strategy_webhook::decimal::Decimal;

    pub fn serialize<S: Serializer>(d: &Decimal, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&d.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        strategy_webhook::decimal::deserialize(d)
    }
}

/// Optional decimals as JSON strings or null.
mod opt_dec {
    use serde::{Deserializer, Serializer};
    use strategy_webhook::decimal::Decimal;

    pub fn serialize<S: Serializer>(d: &Option<Decimal>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&d.to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
        strategy_webhook::decimal::deserialize_opt(d)
    }
}
