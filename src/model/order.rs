//! Broker-neutral orders: what to trade, how much, at what price, for how long.
//!
//! The order builder ([`crate::builder`]) fills these in for each bot; a broker
//! ([`crate::broker::Broker`]) writes each one in its own wire format; the Outcome carries
//! each request's order so a host never derives it again.

use super::asset::AssetClass;
use super::client_order_id::ClientOrderId;
use super::contract::{underlying_of, OptionContract};
use super::date::Date;
use super::pair::CryptoPair;
use super::side::{Intent, LegAction, OptionSide, PriceEffect};
use super::terms::{Duration, OrderType};
use crate::decimal::{self, Decimal, JsonNumber};
use compact_str::CompactString;
use serde::de::{Deserializer, Error as _};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

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

/// The greatest common divisor of option legs' `ratios` (a ratio of 0 read as 1; 1 for none): how many units of the
/// structure in its simplest ratios one unit of the legs as written is, 2 for a vertical written 2:2. Brokers count
/// and price a structure by that simplest unit.
pub fn ratios_gcd(ratios: impl IntoIterator<Item = u32>) -> u32 {
    ratios
        .into_iter()
        .map(|r| r.max(1))
        .fold(0, |mut a, mut b| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a
        })
        .max(1)
}

/// How many units in simplest ratios one unit of a structure with legs of `ratios` is: their greatest common divisor
/// ([`ratios_gcd`]) for two legs or more, 1 for a single leg (priced per contract whatever its ratio) or none. A
/// vertical written 2:2 is two.
pub fn simplest_factor(ratios: impl IntoIterator<Item = u32>) -> u32 {
    let mut legs = 0;
    let gcd = ratios_gcd(ratios.into_iter().inspect(|_| legs += 1));
    if legs < 2 {
        1
    } else {
        gcd
    }
}

/// A broker-neutral order ready for formatting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Order {
    /// What is traded.
    pub asset_class: AssetClass,
    /// Equity symbol; option underlying (`SPX`, never `SPXW`); crypto pair in [`Order::pair`].
    pub symbol: CompactString,
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
    pub client_order_id: ClientOrderId,
    /// The price the order was sized and priced from: the alert's price, else the quote's
    /// mid, else its last (what [`crate::builder`] divides an amount by). A host that
    /// simulates fills (a paper broker) fills a market order here. `None` for options and
    /// for replaces and cancels, and when the alert and the snapshot give no price.
    pub reference_price: Option<Decimal>,
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
        /// What of the working order has filled already (`order.quantity` is what is to remain working).
        filled: Decimal,
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
/// their exact digits. [`Order`]'s `Deserialize` reads exactly this shape back.
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
        if let Some(p) = &self.reference_price {
            m.serialize_entry("reference_price", &JsonNumber(p))?;
        }
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

/// The `order` object as written by [`Order`]'s `Serialize`. `side` is derived from the
/// intent and only checked; decimals are read from their JSON digits, so they come back
/// exactly (this needs JSON text, as `serde_json::from_str` gives, not a `Value`).
#[derive(Deserialize)]
struct OrderWire {
    asset_class: AssetClass,
    symbol: CompactString,
    #[serde(default)]
    pair: Option<String>,
    intent: Intent,
    #[serde(default)]
    side: Option<String>,
    #[serde(deserialize_with = "decimal::deserialize")]
    quantity: Decimal,
    order_type: OrderType,
    #[serde(default, deserialize_with = "decimal::deserialize_opt")]
    limit_price: Option<Decimal>,
    #[serde(default)]
    price_effect: Option<PriceEffect>,
    duration: Duration,
    legs: Vec<OrderLeg>,
    client_order_id: ClientOrderId,
    #[serde(default, deserialize_with = "decimal::deserialize_opt")]
    reference_price: Option<Decimal>,
}

/// Reads the Outcome's `order` object back (a host that stored it, such as the server's
/// outbox, turns it into the order it was).
impl<'de> Deserialize<'de> for Order {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = OrderWire::deserialize(d)?;
        let side = if w.intent.is_buy() { "buy" } else { "sell" };
        if let Some(s) = w.side.as_deref().filter(|s| *s != side) {
            return Err(D::Error::custom(format!("side {s:?} contradicts intent {}", w.intent)));
        }
        let pair = match w.pair {
            None => None,
            Some(p) => {
                // Split, not parse: the pair comes back spelled as it was written.
                let (base, quote) =
                    CryptoPair::split(&p).ok_or_else(|| D::Error::custom(format!("{p:?} is not a crypto pair")))?;
                Some(CryptoPair { base: base.to_string(), quote: quote.to_string() })
            }
        };
        Ok(Order {
            asset_class: w.asset_class,
            symbol: w.symbol,
            pair,
            intent: w.intent,
            quantity: w.quantity,
            order_type: w.order_type,
            limit_price: w.limit_price,
            price_effect: w.price_effect,
            duration: w.duration,
            legs: w.legs,
            client_order_id: w.client_order_id,
            reference_price: w.reference_price,
        })
    }
}

/// One leg as written by [`OrderLeg`]'s `Serialize`; `underlying` is derived and not read.
#[derive(Deserialize)]
struct LegWire {
    symbol: String,
    expiration: String,
    side: OptionSide,
    #[serde(deserialize_with = "decimal::deserialize")]
    strike: Decimal,
    action: LegAction,
    ratio: u32,
}

impl<'de> Deserialize<'de> for OrderLeg {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = LegWire::deserialize(d)?;
        let expiration = Date::parse_iso(&w.expiration)
            .ok_or_else(|| D::Error::custom(format!("{:?} is not a date (YYYY-MM-DD)", w.expiration)))?;
        // The symbol is the root followed by the contract's OSI tail; the tail written for
        // the other fields, cut off the end, leaves the root exactly as it was.
        let tail = OptionContract { root: String::new(), expiration, side: w.side, strike: w.strike }.occ_unpadded();
        let root = w.symbol.strip_suffix(tail.as_str()).filter(|r| !r.is_empty()).ok_or_else(|| {
            D::Error::custom(format!("leg symbol {:?} does not match its expiration, side and strike", w.symbol))
        })?;
        let contract = OptionContract { root: root.to_string(), expiration, side: w.side, strike: w.strike };
        Ok(OrderLeg { contract, action: w.action, ratio: w.ratio })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A structure's factor is its legs' GCD; a single leg's, or none's, is 1 whatever its ratio.
    #[test]
    fn a_structures_simplest_factor() {
        assert_eq!((simplest_factor([2, 2]), simplest_factor([2, 4, 6]), simplest_factor([1, 2])), (2, 2, 1));
        assert_eq!((simplest_factor([3]), simplest_factor([])), (1, 1));
        assert_eq!(ratios_gcd([3]), 3, "the GCD alone counts a single leg's contracts");
    }

    fn d(s: &str) -> Decimal {
        crate::decimal::parse(s).unwrap()
    }

    fn equity() -> Order {
        Order {
            asset_class: AssetClass::Equity,
            symbol: "AAPL".into(),
            pair: None,
            intent: Intent::CloseShort,
            quantity: d("10.50"),
            order_type: OrderType::Limit,
            limit_price: Some(d("190.10")),
            price_effect: None,
            duration: Duration::Gtc,
            legs: Vec::new(),
            client_order_id: "swh-1".parse().unwrap(),
            reference_price: Some(d("190.100")),
        }
    }

    fn round_trip(o: &Order) -> Order {
        let json = serde_json::to_string(o).unwrap();
        let back: Order = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
        assert_eq!(serde_json::to_string(&back).unwrap(), json, "written again the same");
        back
    }

    #[test]
    fn equity_and_crypto_round_trip_exactly() {
        let o = equity();
        let back = round_trip(&o);
        assert_eq!(back, o);
        // Same value is not enough: the scale (the sender's digits) must survive too.
        assert_eq!(back.quantity.to_string(), "10.50");
        assert_eq!(back.limit_price.unwrap().to_string(), "190.10");
        assert_eq!(back.reference_price.unwrap().to_string(), "190.100");

        let c = Order {
            asset_class: AssetClass::Crypto,
            symbol: "BTCUSD".into(),
            pair: Some(CryptoPair { base: "BTC".into(), quote: "USDT".into() }),
            intent: Intent::OpenLong,
            quantity: d("0.00150000"),
            order_type: OrderType::Market,
            limit_price: None,
            reference_price: None,
            ..o
        };
        let json = serde_json::to_string(&c).unwrap();
        assert!(!json.contains("reference_price") && json.contains(r#""limit_price":null"#), "{json}");
        assert_eq!(round_trip(&c), c);
    }

    #[test]
    fn option_legs_round_trip_exactly() {
        let leg = |root: &str, side, strike: &str, action, ratio| OrderLeg {
            contract: OptionContract {
                root: root.into(),
                expiration: Date::new(2024, 1, 19).unwrap(),
                side,
                strike: d(strike),
            },
            action,
            ratio,
        };
        let o = Order {
            asset_class: AssetClass::Option,
            symbol: "SPX".into(),
            intent: Intent::OpenLong,
            quantity: d("3"),
            limit_price: Some(d("2.35")),
            price_effect: Some(PriceEffect::Credit),
            duration: Duration::Day,
            legs: vec![
                leg("SPXW", OptionSide::Call, "4500", LegAction::BuyToOpen, 1),
                leg("AAPL", OptionSide::Put, "190.50", LegAction::SellToOpen, 2),
            ],
            reference_price: None,
            ..equity()
        };
        let back = round_trip(&o);
        assert_eq!(back, o);
        assert_eq!(back.legs[1].contract.strike.to_string(), "190.50");
        assert_eq!(back.legs[1].contract.occ_padded(), "AAPL  240119P00190500");
    }

    #[test]
    fn refuses_what_it_never_writes() {
        let good = serde_json::to_value(equity()).unwrap();
        let bad = |change: &dyn Fn(&mut serde_json::Value)| {
            let mut v = good.clone();
            change(&mut v);
            serde_json::from_str::<Order>(&v.to_string()).is_err()
        };
        assert!(!bad(&|_| {}), "the unchanged object reads");
        assert!(bad(&|v| v["side"] = "sell".into()), "a side against the intent");
        assert!(bad(&|v| v["quantity"] = "ten".into()));
        assert!(bad(&|v| v["intent"] = "open_sideways".into()));
        assert!(bad(&|v| v["pair"] = "BTC".into()));
        assert!(bad(&|v| {
            v.as_object_mut().unwrap().remove("client_order_id");
        }));
        // The server's old outbox rows held another shape; they must fail, not half-read.
        let old = r#"{"instrument":"AAPL","direction":"long","open":true,"order_type":"market","limit_price":null,
                      "quantity":"10","duration":"day","fill_price":"190.1","option":false}"#;
        assert!(serde_json::from_str::<Order>(old).is_err());
        let leg = r#"{"symbol":"SPXW240119C04500000","underlying":"SPX","expiration":"2024-01-19","side":"PUT",
                      "strike":4500,"action":"buy_to_open","ratio":1}"#;
        assert!(serde_json::from_str::<OrderLeg>(leg).is_err(), "a symbol that names another contract");
    }
}
