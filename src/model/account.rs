//! What an account holds and has working at a broker, read back from the broker itself:
//! positions, orders and their statuses, and a crypto product's increments.
//!
//! Each broker reads its own answers into these ([`crate::broker::AccountReads::parse_positions`]
//! and its siblings); a host compares them with what its strategies expect. Instruments
//! are spelled one way whatever the broker wrote: an equity's symbol, an option contract's
//! unpadded OCC symbol (`SPXW260320C05800000`), a crypto pair as `BASE/QUOTE`.

use super::asset::AssetClass;
use super::contract::OptionContract;
use super::order::Order;
use super::pair::CryptoPair;
use super::side::{Direction, Intent, LegAction, PriceEffect};
use super::terms::{Duration, OrderType};
use super::words::words;
use crate::decimal::Decimal;

words! {
    /// Where an order stands at the broker. Every broker's status words map to one of these;
    /// a word this library does not know is [`OrderStatus::Unknown`], never a final state.
    pub enum OrderStatus {
        /// Accepted and not yet done: new, routed, partially filled, a cancel or change in flight.
        Working = "working",
        /// Filled in full.
        Filled = "filled",
        /// Cancelled (it may have filled in part first: see the filled quantity).
        Cancelled = "cancelled",
        /// Its time in force ran out (it may have filled in part first).
        Expired = "expired",
        /// The broker refused it.
        Rejected = "rejected",
        /// Replaced by another order, whose id the order names.
        Replaced = "replaced",
        /// A status this library does not know, or an order it cannot describe in its own terms (one sized by an
        /// amount of money, whose count is not known until it fills; the order's `reason` says which): keep
        /// asking, never treat it as done.
        Unknown = "unknown",
    }
}

impl OrderStatus {
    /// True when the order will not change any more (filled, cancelled, expired, rejected,
    /// replaced). Working and unknown orders are not final.
    pub fn is_final(self) -> bool {
        !matches!(self, OrderStatus::Working | OrderStatus::Unknown)
    }
}

words! {
    /// Whether an order buys or sells.
    pub enum OrderSide {
        /// Buys (opens a long or covers a short).
        Buy = "buy",
        /// Sells (closes a long or opens a short).
        Sell = "sell",
    }
}

/// One position at the broker: one instrument, one direction. An option position is one
/// contract; grouping contracts into spreads is the host's business.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerPosition {
    /// The equity symbol, the contract's unpadded OCC symbol, the crypto pair (`BTC/USD`),
    /// or the coin alone (`BTC`) where a broker keeps balances rather than pairs.
    pub instrument: String,
    /// What is held.
    pub asset_class: AssetClass,
    /// The option contract, for options.
    pub contract: Option<OptionContract>,
    /// The crypto pair, when the broker names one (a balance names only its coin).
    pub pair: Option<CryptoPair>,
    /// Long or short.
    pub direction: Direction,
    /// Shares, contracts or coins held: always above zero.
    pub quantity: Decimal,
    /// Average entry price per share, contract (premium) or coin, when the broker gives it.
    pub average_price: Option<Decimal>,
}

impl BrokerPosition {
    /// True when this position is held in `pair`: a crypto position is its coin, whatever it was bought with and
    /// whichever pair the broker names it by (Alpaca lists BTC bought with USDT as `BTCUSD`; Coinbase a bare
    /// `BTC` balance), so every pair of that coin holds it.
    pub fn holds_pair(&self, pair: &CryptoPair) -> bool {
        if self.asset_class != AssetClass::Crypto {
            return false;
        }
        let coin = self.pair.as_ref().map_or(self.instrument.as_str(), |p| p.base.as_str());
        coin.eq_ignore_ascii_case(&pair.base)
    }
}

/// One leg of an option order at the broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerLeg {
    /// The contract's unpadded OCC symbol (or the broker's symbol when it is not one).
    pub instrument: String,
    /// The contract, when the symbol reads as one.
    pub contract: Option<OptionContract>,
    /// Open or close, buy or sell, when the broker says.
    pub action: Option<LegAction>,
    /// Contracts per unit of the order's quantity.
    pub ratio: u32,
    /// Contracts of this leg in the whole order.
    pub quantity: Decimal,
}

/// One order at the broker, in any status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerOrder {
    /// The broker's order id.
    pub order_id: String,
    /// Our client order id as the broker keeps it (`None` where the broker has none, or the
    /// order was not placed with one).
    pub client_order_id: Option<String>,
    /// The equity symbol, a single option leg's unpadded OCC symbol, a spread's underlying,
    /// or the crypto pair (`BTC/USD`).
    pub instrument: String,
    /// What is traded.
    pub asset_class: AssetClass,
    /// The crypto pair, for crypto orders.
    pub pair: Option<CryptoPair>,
    /// Buy or sell; `None` for a spread that states no side of its own.
    pub side: Option<OrderSide>,
    /// Open or close, long or short, where the broker's words say (`sell_short`,
    /// `buy_to_cover`, `Sell to Open`…); `None` where they only say buy or sell.
    pub intent: Option<Intent>,
    /// Market or limit (spreads priced as a net debit, credit or even are limit orders);
    /// `None` for kinds this library does not send (stop orders and the like).
    pub order_type: Option<OrderType>,
    /// The limit price, a positive magnitude.
    pub limit_price: Option<Decimal>,
    /// Whether the limit price is paid or received, where the broker says or the side implies.
    pub price_effect: Option<PriceEffect>,
    /// Time in force, when it is one this library knows.
    pub duration: Option<Duration>,
    /// Shares, coins, contracts of a single leg, or units of a spread. Zero when the broker states no count: an
    /// order sized by an amount of money ([`BrokerOrder::notional`]), or an answer missing its size. Such an order
    /// is never read as working: while it works its status is [`OrderStatus::Unknown`] with the reason, and
    /// filled, its count is what filled.
    pub quantity: Decimal,
    /// The amount of money the order was sized by, in the quote currency (dollars for a stock, the pair's quote
    /// for a coin), where it was placed that way rather than by count (a trader's order for $500 of a stock).
    /// How many shares or coins that buys is not known until it fills. No order this library sends is sized so.
    pub notional: Option<Decimal>,
    /// How much of `quantity` has filled (a cancelled or expired order may have filled in part).
    pub filled_quantity: Decimal,
    /// Where the order stands.
    pub status: OrderStatus,
    /// The broker's own status word, for logs.
    pub broker_status: String,
    /// The option legs (empty for single instruments other than options).
    pub legs: Vec<BrokerLeg>,
    /// When the broker entered the order, as the broker wrote it.
    pub created_at: Option<String>,
    /// `created_at` as Unix milliseconds, when it reads as a timestamp.
    pub created_ms: Option<i64>,
    /// The id of the order that replaced this one.
    pub replaced_by: Option<String>,
    /// The broker's reason for a rejection or cancellation, when it gives one.
    pub reason: Option<String>,
    /// Placed for a session outside regular hours (Schwab's `AM`, `PM`, `SEAMLESS`). No order this library sends is,
    /// so it never [`matches`](BrokerOrder::matches) one: its time in force, read as none of the library's, would
    /// otherwise agree with any.
    pub extended_session: bool,
}

impl BrokerOrder {
    /// True when `order` describes this broker order: same asset class, instrument,
    /// side, quantity, order type, limit price (as a number) and, for options, the same
    /// legs (contract, action, contracts). The time in force must agree when both say.
    /// Used where a broker keeps no client order id and an order is recognised by its terms.
    pub fn matches(&self, order: &Order) -> bool {
        // Sized by an amount, it is no order this library sent (every one it sends is sized by count), and its count
        // is not known to compare.
        if self.extended_session || self.notional.is_some() {
            return false;
        }
        // An option order is counted in units of its simplest ratios on both sides, as brokers count it: a single
        // leg's are its contracts (units times the leg's ratio), and a vertical written 2:2 is twice as many units
        // of 1:1 (a broker may read its units as the legs' greatest common divisor).
        let simplest = |quantity: Decimal, ratios: &mut dyn Iterator<Item = u32>| match order.asset_class {
            AssetClass::Option => quantity.saturating_mul(Decimal::from(super::order::ratios_gcd(ratios))),
            _ => quantity,
        };
        let quantity = simplest(order.quantity, &mut order.legs.iter().map(|l| l.ratio));
        let theirs = simplest(self.quantity, &mut self.legs.iter().map(|l| l.ratio));
        if self.asset_class != order.asset_class || theirs != quantity {
            return false;
        }
        if self.order_type != Some(order.order_type) {
            return false;
        }
        let price_agrees = match (order.order_type, self.limit_price, order.limit_price) {
            (OrderType::Market, _, _) => true,
            (OrderType::Limit, Some(a), Some(b)) => a == b,
            _ => false,
        };
        if !price_agrees || self.duration.is_some_and(|d| d != order.duration) {
            return false;
        }
        if let (AssetClass::Option, Some(a), Some(b)) = (order.asset_class, self.price_effect, order.price_effect) {
            if order.order_type == OrderType::Limit && a != b {
                return false;
            }
        }
        match order.asset_class {
            AssetClass::Equity => {
                self.instrument.eq_ignore_ascii_case(order.symbol.trim())
                    && self.intent.map_or(self.side == Some(side_of(order.intent)), |i| i == order.intent)
            }
            AssetClass::Crypto => {
                order.pair.as_ref() == self.pair.as_ref()
                    && self.intent.map_or(self.side == Some(side_of(order.intent)), |i| i == order.intent)
            }
            AssetClass::Option => {
                let ours: Vec<(String, LegAction, Decimal)> = order
                    .legs
                    .iter()
                    .map(|l| {
                        (l.contract.occ_unpadded(), l.action, order.quantity.saturating_mul(Decimal::from(l.ratio)))
                    })
                    .collect();
                self.legs.len() == ours.len()
                    && ours.iter().all(|(symbol, action, contracts)| {
                        self.legs.iter().any(|l| {
                            l.instrument.eq_ignore_ascii_case(symbol)
                                && l.action == Some(*action)
                                && l.quantity == *contracts
                        })
                    })
            }
        }
    }
}

fn side_of(intent: Intent) -> OrderSide {
    if intent.is_buy() {
        OrderSide::Buy
    } else {
        OrderSide::Sell
    }
}

/// The steps a crypto product trades in, as the broker publishes them. A bot's snapshot
/// carries them per pair ([`crate::strategy::Bot::increments`]); decimals as strings or
/// numbers, read exactly.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProductIncrements {
    /// Smallest step of a quantity in the coin (`0.00000001`).
    #[serde(deserialize_with = "crate::decimal::deserialize")]
    pub base_increment: Decimal,
    /// Smallest step of an amount in the quote currency (`0.01`).
    #[serde(deserialize_with = "crate::decimal::deserialize")]
    pub quote_increment: Decimal,
    /// Price tick (the quote increment where the broker states none).
    #[serde(deserialize_with = "crate::decimal::deserialize")]
    pub price_increment: Decimal,
    /// The smallest order the broker takes, in the coin (`1` for DOGE-USD at Coinbase); `None` where none is known
    /// (optional, so increments written without it still load).
    #[serde(default, deserialize_with = "crate::decimal::deserialize_opt")]
    pub base_min_size: Option<Decimal>,
    /// The smallest order the broker takes, in the quote currency (`1`: one dollar); `None` where none is known.
    #[serde(default, deserialize_with = "crate::decimal::deserialize_opt")]
    pub quote_min_size: Option<Decimal>,
}

/// Why a broker's answer to a read could not be turned into positions or orders. Messages
/// are sentences a trader reads; the broker is named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The answer is not in the shape the broker documents (not JSON, a field missing or
    /// of the wrong kind, a number that is no number).
    #[error("{broker}'s answer could not be read: {detail}")]
    Unreadable {
        /// The broker's display name.
        broker: &'static str,
        /// What was wrong, and where.
        detail: String,
    },
    /// The broker answered with an error instead of the data.
    #[error("{broker} answered with an error instead of the {what}: {message}")]
    BrokerError {
        /// The broker's display name.
        broker: &'static str,
        /// What was asked for (`positions`, `orders`).
        what: &'static str,
        /// The broker's words.
        message: String,
    },
    /// The answer is one page of several: reading it as the whole list would make missing
    /// positions or orders look closed.
    #[error("{broker} sent only the first page of the {what}; the rest must be read before anything is concluded")]
    Incomplete {
        /// The broker's display name.
        broker: &'static str,
        /// What was listed.
        what: &'static str,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Date, OptionSide, OrderLeg};

    #[test]
    fn only_done_statuses_are_final() {
        let finals: Vec<_> = OrderStatus::ALL.iter().filter(|s| s.is_final()).map(|s| s.as_str()).collect();
        assert_eq!(finals, ["filled", "cancelled", "expired", "rejected", "replaced"]);
        assert!(!OrderStatus::Unknown.is_final());
        assert!(!OrderStatus::Working.is_final());
    }

    fn broker_order() -> BrokerOrder {
        BrokerOrder {
            extended_session: false,
            order_id: "1".into(),
            client_order_id: None,
            instrument: "AAPL".into(),
            asset_class: AssetClass::Equity,
            pair: None,
            side: Some(OrderSide::Buy),
            intent: Some(Intent::OpenLong),
            order_type: Some(OrderType::Limit),
            limit_price: Some("185.0".parse().unwrap()),
            price_effect: None,
            duration: Some(Duration::Day),
            quantity: "10.0".parse().unwrap(),
            notional: None,
            filled_quantity: Decimal::ZERO,
            status: OrderStatus::Working,
            broker_status: "WORKING".into(),
            legs: vec![],
            created_at: None,
            created_ms: None,
            replaced_by: None,
            reason: None,
        }
    }

    fn order() -> Order {
        Order {
            asset_class: AssetClass::Equity,
            symbol: "AAPL".into(),
            pair: None,
            intent: Intent::OpenLong,
            quantity: Decimal::from(10),
            order_type: OrderType::Limit,
            limit_price: Some("185".parse().unwrap()),
            price_effect: None,
            duration: Duration::Day,
            legs: vec![],
            client_order_id: "swh-1".parse().unwrap(),
            reference_price: None,
        }
    }

    /// A single-leg option order of ratio 2 is two contracts a unit, and its broker counts contracts: it was
    /// taken for another order, so a lookup said "not there" and the order could be sent again.
    #[test]
    fn a_single_leg_option_order_is_recognised_by_its_contracts() {
        let contract = crate::model::OptionContract::parse_occ("SPY260619C00600000").unwrap();
        let mut ours = order();
        ours.asset_class = AssetClass::Option;
        ours.symbol = "SPY".into();
        ours.quantity = Decimal::from(3);
        ours.limit_price = Some("1.5".parse().unwrap());
        ours.price_effect = Some(crate::model::PriceEffect::Debit);
        ours.legs = vec![crate::model::OrderLeg { contract: contract.clone(), action: LegAction::BuyToOpen, ratio: 2 }];
        let mut theirs = broker_order();
        theirs.asset_class = AssetClass::Option;
        theirs.instrument = "SPY260619C00600000".into();
        theirs.limit_price = Some("1.50".parse().unwrap());
        theirs.price_effect = Some(crate::model::PriceEffect::Debit);
        theirs.quantity = Decimal::from(6);
        theirs.legs = vec![BrokerLeg {
            instrument: "SPY260619C00600000".into(),
            contract: Some(contract),
            action: Some(LegAction::BuyToOpen),
            ratio: 1,
            quantity: Decimal::from(6),
        }];
        assert!(theirs.matches(&ours), "six contracts are three units of two");
        theirs.quantity = Decimal::from(3);
        theirs.legs[0].quantity = Decimal::from(3);
        assert!(!theirs.matches(&ours), "three contracts are not");
    }

    #[test]
    fn an_order_matches_by_its_terms() {
        let b = broker_order();
        assert!(b.matches(&order()), "185.0 is 185 and 10.0 is 10");
        let mut other = order();
        other.limit_price = Some("185.01".parse().unwrap());
        assert!(!b.matches(&other));
        let mut other = order();
        other.intent = Intent::CloseShort;
        assert!(!b.matches(&other), "a buy to cover is not a buy to open");
        let mut other = order();
        other.duration = Duration::Gtc;
        assert!(!b.matches(&other));
        let mut other = order();
        other.order_type = OrderType::Market;
        assert!(!b.matches(&other));
        let mut side_only = broker_order();
        side_only.intent = None;
        assert!(side_only.matches(&order()), "a broker that says only buy matches on the side");
    }

    /// An order sized by an amount of money is never one this library sent, whatever count it states: recognised
    /// by its terms as ours, a hand-placed $1850 of AAPL that filled ten shares was taken for our entry of ten,
    /// and the entry was never sent.
    #[test]
    fn an_order_sized_by_an_amount_is_never_ours() {
        let mut by_amount = broker_order();
        by_amount.notional = Some(Decimal::from(1850));
        assert!(!by_amount.matches(&order()));
    }

    #[test]
    fn option_orders_match_leg_by_leg() {
        let contract = |strike: i64| OptionContract {
            root: "SPXW".into(),
            expiration: Date::new(2026, 3, 20).unwrap(),
            side: OptionSide::Call,
            strike: Decimal::from(strike),
        };
        let mut o = order();
        o.asset_class = AssetClass::Option;
        o.symbol = "SPX".into();
        o.quantity = Decimal::ONE;
        o.limit_price = Some("23.5".parse().unwrap());
        o.price_effect = Some(PriceEffect::Debit);
        o.legs = vec![
            OrderLeg { contract: contract(5800), action: LegAction::BuyToOpen, ratio: 1 },
            OrderLeg { contract: contract(5850), action: LegAction::SellToOpen, ratio: 1 },
        ];
        let leg = |strike: i64, action| BrokerLeg {
            instrument: contract(strike).occ_unpadded(),
            contract: Some(contract(strike)),
            action: Some(action),
            ratio: 1,
            quantity: Decimal::ONE,
        };
        let mut b = broker_order();
        b.asset_class = AssetClass::Option;
        b.instrument = "SPX".into();
        b.side = None;
        b.intent = None;
        b.quantity = Decimal::ONE;
        b.limit_price = Some("23.50".parse().unwrap());
        b.legs = vec![leg(5850, LegAction::SellToOpen), leg(5800, LegAction::BuyToOpen)];
        assert!(b.matches(&o), "leg order does not matter");
        b.legs[0].action = Some(LegAction::SellToClose);
        assert!(!b.matches(&o));
        // Two verticals, counted in simplest ratios on both sides: read back as two units of 1:1 (units read as the
        // legs' greatest common divisor) or as one unit of 2:2, and built either way.
        b.legs = vec![leg(5850, LegAction::SellToOpen), leg(5800, LegAction::BuyToOpen)];
        for l in &mut b.legs {
            l.quantity = Decimal::TWO;
        }
        b.quantity = Decimal::TWO;
        let mut written = o.clone();
        written.legs.iter_mut().for_each(|l| l.ratio = 2);
        o.quantity = Decimal::TWO;
        assert!(b.matches(&o) && b.matches(&written), "two units of 1:1 are one of 2:2");
        b.quantity = Decimal::ONE;
        b.legs.iter_mut().for_each(|l| l.ratio = 2);
        assert!(b.matches(&o) && b.matches(&written), "one unit of 2:2 is two of 1:1");
        written.quantity = Decimal::TWO;
        assert!(!b.matches(&written), "four verticals are not two");
    }

    #[test]
    fn a_balance_holds_its_coin_in_any_pair() {
        let usd = CryptoPair { base: "BTC".into(), quote: "USD".into() };
        let coin = BrokerPosition {
            instrument: "BTC".into(),
            asset_class: AssetClass::Crypto,
            contract: None,
            pair: None,
            direction: Direction::Long,
            quantity: Decimal::ONE,
            average_price: None,
        };
        assert!(coin.holds_pair(&usd));
        assert!(coin.holds_pair(&CryptoPair { base: "BTC".into(), quote: "EUR".into() }));
        let pair = BrokerPosition { instrument: "BTC/USD".into(), pair: Some(usd.clone()), ..coin.clone() };
        assert!(pair.holds_pair(&usd));
        assert!(pair.holds_pair(&CryptoPair { base: "BTC".into(), quote: "EUR".into() }), "a coin, in every pair");
        assert!(!BrokerPosition { instrument: "ETH".into(), ..coin }.holds_pair(&usd));
    }
}
