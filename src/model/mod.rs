//! The types layer: the domain's words and values that every other layer speaks in.
//!
//! Orders and their legs, option contracts, crypto pairs, dates, the instrument key, and
//! the small enums (direction, intent, order type, time in force, asset class…), each in
//! the file named after it. This module imports nothing of the crate but [`crate::decimal`],
//! so the parser, the strategy, the brokers and the order builder all stand on it without
//! depending on one another.

pub mod account;
pub mod asset;
pub mod client_order_id;
pub mod contract;
pub mod date;
pub mod error;
pub mod instrument;
pub mod order;
pub mod pair;
pub mod request;
pub mod side;
pub mod terms;
pub mod words;

pub use account::{BrokerLeg, BrokerOrder, BrokerPosition, OrderSide, OrderStatus, ProductIncrements, ReadError};
pub use asset::AssetClass;
pub use client_order_id::{ClientOrderId, ClientOrderIdError};
pub use contract::{
    dated_root, is_index_root, last_trading_day, root_for, series_root, stops_the_day_before, trades_at, underlying_of,
    OptionContract,
};
pub use date::{eastern_date, first_tradable_expiration, timestamp_ms, Date};
pub use error::OrderError;
pub use instrument::InstrumentKey;
pub use order::{ratios_gcd, simplest_factor, BotAction, Order, OrderLeg, MAX_LEGS};
pub use pair::CryptoPair;
pub use request::RequestKind;
pub use side::{Direction, Intent, LegAction, OptionSide, OrderIntent, PriceEffect};
pub use terms::{Duration, OrderType};
pub use words::UnknownWord;

/// Shortens a sender's value for an error message, so a 256 KiB field never lands in a log.
pub(crate) fn snippet(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(MAX).collect();
        out.push('…');
        out
    }
}
