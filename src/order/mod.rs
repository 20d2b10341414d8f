//! Broker-neutral orders: what to trade, how much, at what price, for how long.
//!
//! [`build()`] turns a decided alert into [`BotAction`]s for one bot (sizing, limit
//! prices, option selection, symbols); a [`crate::broker::Broker`] then writes each
//! action in its own wire format. Nothing here knows a broker's name.

pub mod build;
pub mod crypto;
pub mod option;

use crate::alert::{Direction, Duration, LegAction, OrderType};
use crate::decimal::Decimal;

pub use build::{build, BuildContext, Decided};
pub use crypto::CryptoPair;
pub use option::OptionContract;

/// What an order does to a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Intent {
    /// Buy to open a long.
    OpenLong,
    /// Sell short to open a short.
    OpenShort,
    /// Sell to close a long.
    CloseLong,
    /// Buy to cover a short.
    CloseShort,
}

impl Intent {
    /// The intent for an action and direction.
    pub fn new(open: bool, direction: Direction) -> Intent {
        match (open, direction) {
            (true, Direction::Long) => Intent::OpenLong,
            (true, Direction::Short) => Intent::OpenShort,
            (false, Direction::Long) => Intent::CloseLong,
            (false, Direction::Short) => Intent::CloseShort,
        }
    }

    /// True for buys (open long, close short).
    pub fn is_buy(self) -> bool {
        matches!(self, Intent::OpenLong | Intent::CloseShort)
    }

    /// True for entries.
    pub fn is_open(self) -> bool {
        matches!(self, Intent::OpenLong | Intent::OpenShort)
    }

    /// The position's direction.
    pub fn direction(self) -> Direction {
        match self {
            Intent::OpenLong | Intent::CloseLong => Direction::Long,
            Intent::OpenShort | Intent::CloseShort => Direction::Short,
        }
    }

    /// snake_case name, as in the strategy's rules.
    pub fn as_str(self) -> &'static str {
        match self {
            Intent::OpenLong => "open_long",
            Intent::OpenShort => "open_short",
            Intent::CloseLong => "close_long",
            Intent::CloseShort => "close_short",
        }
    }
}

/// What a strategy trades.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssetClass {
    /// Stocks and ETFs.
    Equity,
    /// Listed options (single and multi-leg).
    Option,
    /// Spot crypto pairs.
    Crypto,
}

impl AssetClass {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            AssetClass::Equity => "equity",
            AssetClass::Option => "option",
            AssetClass::Crypto => "crypto",
        }
    }
}

/// Whether the trader pays (debit) or receives (credit) the net price.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceEffect {
    /// You pay.
    Debit,
    /// You receive.
    Credit,
}

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

/// Why an order could not be built or formatted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    /// The order would be wrong for this bot; answered 200 rejected with the reason.
    #[error("{0}")]
    Rejected(String),
    /// Something the core cannot fill (strike, expiry, unknown symbol, missing market
    /// data, an asset class the broker does not offer); answered 500 naming the cause.
    #[error("{0}")]
    Unfillable(String),
}

/// The error for arithmetic that would overflow (prices or sizes near 7.9 × 10²⁸): a
/// cause text rather than a panic.
pub(crate) fn overflow() -> OrderError {
    OrderError::Unfillable("a price or size in this order is too large to compute with".into())
}

/// Whether two instrument spellings name the same thing for an asset class
/// (`BTCUSD`, `BTC/USD` and `BTC-USD` are one crypto pair).
pub fn same_instrument(a: &str, b: &str, asset_class: AssetClass) -> bool {
    if a.eq_ignore_ascii_case(b) {
        return true;
    }
    match asset_class {
        AssetClass::Crypto => match (CryptoPair::parse(a), CryptoPair::parse(b)) {
            (Some(x), Some(y)) => x == y,
            _ => false,
        },
        AssetClass::Option => option::underlying_of(a).eq_ignore_ascii_case(option::underlying_of(b)),
        AssetClass::Equity => false,
    }
}
