//! Broker-neutral orders: what to trade, how much, at what price, for how long.
//!
//! The order builder ([`crate::builder`]) fills these in for each bot; a broker
//! ([`crate::broker::Broker`]) writes each one in its own wire format; the Outcome carries
//! each request's order so a host never derives it again.

use super::asset::AssetClass;
use super::contract::{underlying_of, OptionContract};
use super::pair::CryptoPair;
use super::side::{Intent, LegAction, PriceEffect};
use super::terms::{Duration, OrderType};
use crate::decimal::{Decimal, JsonNumber};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

/// Most legs a single order can carry at any supported broker.
pub const MAX_LEGS: usize = 4;

/// One leg of an option order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderLeg {
    /// The contract.
    pub contract: OptionContract,
    /// Open/close and buy/sell.
    pub action: LegAction,
    /// Contracts per unit of the order's quantity.
    pub ratio: u32,
}

/// A broker-neutral order ready for formatting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// What is traded.
    pub asset_class: AssetClass,
    /// Equity symbol; option underlying (`SPX`, never `SPXW`); crypto pair in [`Order::pair`].
    pub symbol: String,
    /// The crypto pair, for crypto orders.
    pub pair: Option<CryptoPair>,
    /// What the order does to the position.
    pub intent: Intent,
    /// Shares, coins, or option structure units (the legs' ratios multiply it).
    pub quantity: Decimal,
    /// Market or limit.
    pub order_type: OrderType,
    /// Limit price: always a positive magnitude; for options see `price_effect`.
    pub limit_price: Option<Decimal>,
    /// Debit or credit for option limit orders (set whenever `limit_price` is on an option order).
    pub price_effect: Option<PriceEffect>,
    /// Time in force.
    pub duration: Duration,
    /// Option legs (one for a single-leg option, up to four).
    pub legs: Vec<OrderLeg>,
    /// Idempotency key derived from strategy, dedup key, bot and step.
    pub client_order_id: String,
}

/// What one bot is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BotAction {
    /// Place a new order.
    Place(Order),
    /// Replace a working order with `order` (new price and/or quantity).
    Replace {
        /// The broker's id of the working order.
        order_id: String,
        /// The order as it should stand after the change.
        order: Order,
        /// Whether the size changes (some brokers can only change price in place).
        quantity_changed: bool,
    },
    /// Cancel a working order.
    Cancel {
        /// The broker's id of the working order.
        order_id: String,
        /// What the cancelled order was (for brokers that need the instrument).
        order: Order,
    },
}

impl Order {
    /// `buy` or `sell`: the order's side, from its intent.
    pub fn side(&self) -> &'static str {
        if self.intent.is_buy() {
            "buy"
        } else {
            "sell"
        }
    }
}

/// The Outcome's `order` object: every term of the order, decimals as JSON numbers with
/// their exact digits.
impl Serialize for Order {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("asset_class", &self.asset_class)?;
        m.serialize_entry("symbol", &self.symbol)?;
        if let Some(p) = &self.pair {
            m.serialize_entry("pair", &p.to_string())?;
        }
        m.serialize_entry("intent", &self.intent)?;
        m.serialize_entry("side", self.side())?;
        m.serialize_entry("quantity", &JsonNumber(&self.quantity))?;
        m.serialize_entry("order_type", &self.order_type)?;
        m.serialize_entry("limit_price", &self.limit_price.as_ref().map(JsonNumber))?;
        if let Some(e) = self.price_effect {
            m.serialize_entry("price_effect", &e)?;
        }
        m.serialize_entry("duration", &self.duration)?;
        m.serialize_entry("legs", &self.legs)?;
        m.serialize_entry("client_order_id", &self.client_order_id)?;
        m.end()
    }
}

impl Serialize for OrderLeg {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = &self.contract;
        let mut m = s.serialize_map(Some(7))?;
        m.serialize_entry("symbol", &c.occ_unpadded())?;
        m.serialize_entry("underlying", &underlying_of(&c.root).to_ascii_uppercase())?;
        m.serialize_entry("expiration", &c.expiration.to_string())?;
        m.serialize_entry("side", &c.side)?;
        m.serialize_entry("strike", &JsonNumber(&c.strike))?;
        m.serialize_entry("action", &self.action)?;
        m.serialize_entry("ratio", &self.ratio)?;
        m.end()
    }
}
