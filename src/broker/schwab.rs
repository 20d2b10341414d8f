//! Charles Schwab Trader API: JSON bodies at `/trader/v1/accounts/{hash}/orders`, where
//! the account is the encrypted account hash.
//!
//! Bodies follow schwab-py's builders: `session` NORMAL, `duration` DAY /
//! GOOD_TILL_CANCEL / FILL_OR_KILL (the literal "GTC" is refused), `orderStrategyType`
//! SINGLE, and `price` as a string with the exact digits (schwab-py sends strings; its
//! float path truncates 1.15 to "1.14", which is why nothing here goes through floats).
//! Options use the padded 21-character OSI symbol. A spread states debit or credit in
//! `orderType` (NET_DEBIT / NET_CREDIT / NET_ZERO) with a positive price and names its
//! structure in `complexOrderStrategyType`. A replace (`PUT` with the full order) cancels
//! the old order and creates a new one with a new id.

use super::answer::{self, Answer};
use super::common;
use super::json::{Quoted, Writer};
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::model::RequestKind;
use crate::model::{
    AssetClass, Duration, Intent, LegAction, OptionSide, Order, OrderError, OrderLeg, OrderType, PriceEffect,
};

/// Schwab's formatter.
pub struct Schwab;

const NAME: &str = "Schwab";

impl Broker for Schwab {
    fn name(&self) -> &'static str {
        "schwab"
    }

    fn offers(&self, asset_class: AssetClass) -> bool {
        asset_class != AssetClass::Crypto
    }

    fn replace_keeps_id(&self) -> bool {
        false
    }

    /// The Trader API's order schema has no client order id field.
    fn accepts_client_order_id(&self) -> bool {
        false
    }

    fn names_account(&self) -> bool {
        true
    }

    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError> {
        Ok(Request {
            method: Method::Post,
            path: common::path(NAME, "/trader/v1/accounts/", account_id, "/orders")?,
            content_type: Some(JSON),
            body: Body::Json(body(order)?),
        })
    }

    /// The replacement is a complete order, as for a new one.
    fn replace(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        _quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Put,
            path: compact_str::format_compact!("/trader/v1/accounts/{account}/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(body(order)?),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: compact_str::format_compact!("/trader/v1/accounts/{account}/orders/{id}"),
            content_type: None,
            body: Body::Empty,
        })
    }

    /// Schwab answers a place or replace with 201, an empty body and the new order's URL in
    /// `Location`; a cancel with 200. Errors are `{"message":…,"errors":[…]}`.
    fn read_answer(&self, _kind: RequestKind, status: u16, location: Option<&str>, body: &[u8]) -> Answer {
        if answer::success(status) {
            return Answer::Accepted { order_id: answer::location_id(location) };
        }
        answer::failed(status, body, |v| {
            let message = answer::text_at(v, &["message"]);
            let errors = answer::text_at(v, &["errors"]);
            match (message, errors) {
                (Some(m), Some(e)) => Some(format!("{m}: {e}")),
                (m, e) => m.or(e),
            }
        })
    }
}

/// The whole order, keys in schwab-py's order, written front to back.
fn body(order: &Order) -> Result<Json, OrderError> {
    let quantity = common::quantity(NAME, order, false, 0)?;
    let duration = duration(order.duration);
    let limit = common::limit_price(NAME, order)?;
    let mut w = Writer::new();
    w.raw(r#"{"session":"NORMAL","duration":"#).value(duration);
    match order.asset_class {
        AssetClass::Crypto => Err(OrderError::Unfillable(
            "Schwab does not offer crypto trading, so this bot cannot take the order".into(),
        )),
        AssetClass::Equity => {
            let symbol = common::symbol(NAME, order)?;
            w.raw(r#","orderType":"#).value(single_type(order.order_type));
            price(&mut w, limit);
            w.raw(r#","orderLegCollection":[{"instruction":"#)
                .value(equity_instruction(order.intent))
                .raw(r#","instrument":{"assetType":"EQUITY","symbol":"#)
                .value(symbol)
                .raw(r#"},"quantity":"#)
                .value(quantity)
                .raw(r#"}],"orderStrategyType":"SINGLE"}"#);
            Ok(w.done())
        }
        AssetClass::Option => {
            let legs = common::option_legs(NAME, order)?;
            if let [_] = legs {
                if limit.is_some() {
                    // A single leg's price is its premium; checked against the leg's side.
                    common::price_effect(NAME, order)?;
                }
                w.raw(r#","orderType":"#).value(single_type(order.order_type));
            } else {
                let order_type = net_type(limit, order)?;
                w.raw(r#","orderType":"#)
                    .value(order_type)
                    .raw(r#","complexOrderStrategyType":"#)
                    .value(structure(legs))
                    .raw(r#","quantity":"#)
                    .value(quantity);
            }
            price(&mut w, limit);
            w.raw(r#","orderLegCollection":["#);
            for (i, l) in legs.iter().enumerate() {
                w.raw(if i == 0 { r#"{"instruction":"# } else { r#",{"instruction":"# })
                    .value(option_instruction(l.action))
                    .raw(r#","instrument":{"assetType":"OPTION","symbol":"#)
                    .value(l.contract.occ_padded())
                    .raw(r#"},"quantity":"#)
                    .value(common::leg_quantity(quantity, l))
                    .raw("}");
            }
            w.raw(r#"],"orderStrategyType":"SINGLE"}"#);
            Ok(w.done())
        }
    }
}

/// A multi-leg order's type: market, or a net price that is a debit, a credit or even.
fn net_type(limit: Option<Decimal>, order: &Order) -> Result<&'static str, OrderError> {
    Ok(match limit {
        None => "MARKET",
        Some(p) if p.is_zero() => "NET_ZERO",
        Some(_) => match common::price_effect(NAME, order)? {
            PriceEffect::Debit => "NET_DEBIT",
            PriceEffect::Credit => "NET_CREDIT",
        },
    })
}

/// `"price"` as a string with the exact digits, for a limit order.
fn price(w: &mut Writer, limit: Option<Decimal>) {
    if let Some(p) = limit {
        w.raw(r#","price":"#).value(Quoted(p));
    }
}

/// For equities Schwab accepts only these three durations (IMMEDIATE_OR_CANCEL and the
/// END_OF_* values are refused with a 400), and this service sends no others.
fn duration(d: Duration) -> &'static str {
    match d {
        Duration::Day => "DAY",
        Duration::Gtc => "GOOD_TILL_CANCEL",
        Duration::Fok => "FILL_OR_KILL",
    }
}

fn single_type(t: OrderType) -> &'static str {
    match t {
        OrderType::Market => "MARKET",
        OrderType::Limit => "LIMIT",
    }
}

fn equity_instruction(i: Intent) -> &'static str {
    match i {
        Intent::OpenLong => "BUY",
        Intent::CloseLong => "SELL",
        Intent::OpenShort => "SELL_SHORT",
        Intent::CloseShort => "BUY_TO_COVER",
    }
}

fn option_instruction(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "BUY_TO_OPEN",
        LegAction::BuyToClose => "BUY_TO_CLOSE",
        LegAction::SellToOpen => "SELL_TO_OPEN",
        LegAction::SellToClose => "SELL_TO_CLOSE",
    }
}

/// `complexOrderStrategyType` for a spread, named by shape rather than by debit or
/// credit (closing a credit spread is a debit and still the same structure):
/// - VERTICAL: two legs, same root, expiry and call/put, different strikes, one bought
///   and one sold in equal ratios, both opening or both closing (schwab-py's vertical
///   builders);
/// - IRON_CONDOR: four legs, same root and expiry, equal ratios, all opening or all
///   closing, a put spread wholly below a call spread, with the two outer wings on one
///   side (both bought for the usual credit condor, both sold for a long condor);
/// - CUSTOM otherwise, which Schwab takes for any mix of legs.
fn structure(legs: &[OrderLeg]) -> &'static str {
    let first = &legs[0];
    let uniform = legs.iter().all(|l| {
        l.contract.root == first.contract.root
            && l.contract.expiration == first.contract.expiration
            && l.ratio == first.ratio
            && l.action.is_open() == first.action.is_open()
    });
    if !uniform {
        return "CUSTOM";
    }
    match legs {
        [a, b]
            if a.contract.side == b.contract.side
                && a.contract.strike != b.contract.strike
                && a.action.is_buy() != b.action.is_buy() =>
        {
            "VERTICAL"
        }
        [_, _, _, _] if is_iron_condor(legs) => "IRON_CONDOR",
        _ => "CUSTOM",
    }
}

fn is_iron_condor(legs: &[OrderLeg]) -> bool {
    let sorted = |side: OptionSide| -> Option<(&OrderLeg, &OrderLeg)> {
        let mut v: Vec<&OrderLeg> = legs.iter().filter(|l| l.contract.side == side).collect();
        v.sort_by_key(|l| l.contract.strike);
        match v.as_slice() {
            [low, high]
                if low.contract.strike < high.contract.strike && low.action.is_buy() != high.action.is_buy() =>
            {
                Some((low, high))
            }
            _ => None,
        }
    };
    let (Some((put_low, put_high)), Some((call_low, call_high))) = (sorted(OptionSide::Put), sorted(OptionSide::Call))
    else {
        return false;
    };
    put_high.contract.strike < call_low.contract.strike && put_low.action.is_buy() == call_high.action.is_buy()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decimal::Decimal;
    use crate::model::OptionContract;
    use crate::model::{ClientOrderId, Date};

    fn leg(side: OptionSide, strike: i64, action: LegAction) -> OrderLeg {
        OrderLeg {
            contract: OptionContract {
                root: "SPXW".into(),
                expiration: Date::parse_iso("2024-01-19").unwrap(),
                side,
                strike: Decimal::from(strike),
            },
            action,
            ratio: 1,
        }
    }

    use LegAction::*;
    use OptionSide::*;

    /// The body as the object builder writes it (the way it was written before the
    /// front-to-back writer): the reference the writer is held to, byte for byte.
    fn built(order: &Order) -> Result<Json, OrderError> {
        let quantity = common::quantity(NAME, order, false, 0)?;
        let limit = common::limit_price(NAME, order)?;
        let base = Json::obj().with("session", "NORMAL").with("duration", duration(order.duration));
        let leg_json = |instruction: &'static str, asset: &'static str, symbol: &str, q: Decimal| {
            Json::obj()
                .with("instruction", instruction)
                .with("instrument", Json::obj().with("assetType", asset).with("symbol", symbol))
                .with("quantity", q)
        };
        match order.asset_class {
            AssetClass::Crypto => Err(OrderError::Unfillable(String::new())),
            AssetClass::Equity => {
                let symbol = common::symbol(NAME, order)?;
                Ok(base
                    .with("orderType", single_type(order.order_type))
                    .with_opt("price", limit.map(Quoted))
                    .with(
                        "orderLegCollection",
                        [leg_json(equity_instruction(order.intent), "EQUITY", symbol, quantity)],
                    )
                    .with("orderStrategyType", "SINGLE"))
            }
            AssetClass::Option => {
                let legs = common::option_legs(NAME, order)?;
                let collection: Vec<Json> = legs
                    .iter()
                    .map(|l| {
                        let q = common::leg_quantity(quantity, l);
                        leg_json(option_instruction(l.action), "OPTION", &l.contract.occ_padded(), q)
                    })
                    .collect();
                if let [_] = legs {
                    if limit.is_some() {
                        common::price_effect(NAME, order)?;
                    }
                    return Ok(base
                        .with("orderType", single_type(order.order_type))
                        .with_opt("price", limit.map(Quoted))
                        .with("orderLegCollection", collection)
                        .with("orderStrategyType", "SINGLE"));
                }
                let order_type = net_type(limit, order)?;
                Ok(base
                    .with("orderType", order_type)
                    .with("complexOrderStrategyType", structure(legs))
                    .with("quantity", quantity)
                    .with_opt("price", limit.map(Quoted))
                    .with("orderLegCollection", collection)
                    .with("orderStrategyType", "SINGLE"))
            }
        }
    }

    /// Every shape of body the writer makes is the builder's text, byte for byte.
    #[test]
    fn the_writer_writes_what_the_builder_wrote() {
        let structures = [
            vec![leg(Call, 4500, BuyToOpen)],
            vec![leg(Put, 4500, SellToOpen)],
            vec![leg(Call, 4500, BuyToOpen), leg(Call, 4510, SellToOpen)],
            vec![leg(Put, 4500, SellToClose), leg(Put, 4490, BuyToClose)],
            vec![
                leg(Put, 4400, BuyToOpen),
                leg(Put, 4450, SellToOpen),
                leg(Call, 4550, SellToOpen),
                leg(Call, 4600, BuyToOpen),
            ],
        ];
        let mut compared = 0;
        for intent in [Intent::OpenLong, Intent::CloseLong, Intent::OpenShort, Intent::CloseShort] {
            for duration in [Duration::Day, Duration::Gtc, Duration::Fok] {
                for (order_type, price) in [
                    (OrderType::Market, None),
                    (OrderType::Limit, Some("190.50")),
                    (OrderType::Limit, Some("0")),
                    (OrderType::Limit, Some("1.15")),
                ] {
                    for quantity in ["10", "2.0", "0.5"] {
                        let mut order = Order {
                            asset_class: AssetClass::Equity,
                            symbol: "BRK.B".into(),
                            pair: None,
                            intent,
                            quantity: crate::decimal::parse(quantity).unwrap(),
                            order_type,
                            limit_price: price.and_then(crate::decimal::parse),
                            price_effect: None,
                            duration,
                            legs: Vec::new(),
                            client_order_id: ClientOrderId::NONE,
                            reference_price: None,
                        };
                        let equity = (body(&order).map(|j| j.into_string()), built(&order).map(|j| j.into_string()));
                        assert_eq!(equity.0, equity.1, "{order:?}");
                        order.asset_class = AssetClass::Option;
                        order.symbol = "SPX".into();
                        for legs in &structures {
                            for effect in [None, Some(PriceEffect::Debit), Some(PriceEffect::Credit)] {
                                order.legs = legs.clone();
                                order.price_effect = effect;
                                let option =
                                    (body(&order).map(|j| j.into_string()), built(&order).map(|j| j.into_string()));
                                // Errors are compared as answered at all; their texts come from shared checks.
                                assert_eq!(option.0.as_ref().ok(), option.1.as_ref().ok(), "{order:?}");
                                assert_eq!(option.0.is_ok(), option.1.is_ok(), "{order:?}");
                                compared += usize::from(option.0.is_ok());
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 200, "{compared}");
    }

    #[test]
    fn verticals() {
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, SellToOpen)]), "VERTICAL");
        assert_eq!(structure(&[leg(Put, 4500, SellToClose), leg(Put, 4490, BuyToClose)]), "VERTICAL");
        // Same side twice, a call with a put, or an open with a close is not a vertical.
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, BuyToOpen)]), "CUSTOM");
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Put, 4500, SellToOpen)]), "CUSTOM");
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, SellToClose)]), "CUSTOM");
        let mut other_expiry = leg(Call, 4510, SellToOpen);
        other_expiry.contract.expiration = Date::parse_iso("2024-01-22").unwrap();
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), other_expiry]), "CUSTOM", "that is a diagonal");
    }

    #[test]
    fn iron_condors() {
        let short = [
            leg(Put, 4400, BuyToOpen),
            leg(Put, 4450, SellToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&short), "IRON_CONDOR");
        let close = [
            leg(Call, 4600, SellToClose),
            leg(Put, 4450, BuyToClose),
            leg(Put, 4400, SellToClose),
            leg(Call, 4550, BuyToClose),
        ];
        assert_eq!(structure(&close), "IRON_CONDOR", "leg order does not matter");
        // Overlapping spreads, or wings on opposite sides, are not a condor.
        let overlap = [
            leg(Put, 4400, BuyToOpen),
            leg(Put, 4560, SellToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&overlap), "CUSTOM");
        let skewed = [
            leg(Put, 4400, SellToOpen),
            leg(Put, 4450, BuyToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&skewed), "CUSTOM");
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from the Trader API spec (`placeOrder`: 201, empty body, `Location`;
    // `ServiceError {message, errors[]}`) and schwab-py's `Utils.extract_order_id`.
    const LOCATION: &str = "https://api.schwabapi.com/trader/v1/accounts/E5B1A4/orders/1000918249";
    const REFUSED: &str = r#"{"message":"A validation error occurred while processing the request.","errors":["Order quantity is not valid"]}"#;

    #[test]
    fn reads_schwab_answers() {
        let read = |kind, status, location, body: &str| Schwab.read_answer(kind, status, location, body.as_bytes());
        assert_eq!(
            read(RequestKind::Place, 201, Some(LOCATION), ""),
            Answer::Accepted { order_id: Some("1000918249".into()) }
        );
        assert_eq!(read(RequestKind::Cancel, 200, None, ""), Answer::Accepted { order_id: None });
        assert_eq!(
            read(RequestKind::Place, 400, None, REFUSED),
            Answer::Refused {
                message:
                    "HTTP 400: A validation error occurred while processing the request.: Order quantity is not valid"
                        .into()
            }
        );
        assert!(
            matches!(read(RequestKind::Place, 500, None, ""), Answer::Uncertain { message } if message.contains("500"))
        );
    }
}

// ----- Reading the account back -----
//
// A position has two non-negative quantities (net = long − short); options are padded OSI
// symbols; numbers are JSON numbers, read from their digits. A replaced order names its
// successor in `replacingOrderCollection`. Schwab keeps no client order id at all: the new
// order's id arrives only in the `Location` header of the 201, so when that answer is lost
// our order is recognised by its terms among the orders entered in a five-minute window
// around the send, and more than one candidate leaves the answer unknown (never a resend).

use super::read::{self, AccountReads, Lookup, TypeWord};
use crate::decimal::Decimal;
use crate::model::{
    underlying_of, BrokerLeg, BrokerOrder, BrokerPosition, Direction, OrderSide, OrderStatus, ReadError,
};
use serde::Deserialize;

/// Schwab's status words (classes inferred from the names; Schwab documents none).
const STATUSES: &[(&str, OrderStatus)] = &[
    ("AWAITING_PARENT_ORDER", OrderStatus::Working),
    ("AWAITING_CONDITION", OrderStatus::Working),
    ("AWAITING_STOP_CONDITION", OrderStatus::Working),
    ("AWAITING_MANUAL_REVIEW", OrderStatus::Working),
    ("AWAITING_UR_OUT", OrderStatus::Working),
    ("AWAITING_RELEASE_TIME", OrderStatus::Working),
    ("ACCEPTED", OrderStatus::Working),
    ("PENDING_ACTIVATION", OrderStatus::Working),
    ("PENDING_ACKNOWLEDGEMENT", OrderStatus::Working),
    ("QUEUED", OrderStatus::Working),
    ("NEW", OrderStatus::Working),
    ("WORKING", OrderStatus::Working),
    ("PENDING_CANCEL", OrderStatus::Working),
    ("PENDING_REPLACE", OrderStatus::Working),
    ("PENDING_RECALL", OrderStatus::Working),
    ("FILLED", OrderStatus::Filled),
    ("CANCELED", OrderStatus::Cancelled),
    ("EXPIRED", OrderStatus::Expired),
    ("REJECTED", OrderStatus::Rejected),
    ("REPLACED", OrderStatus::Replaced),
];

/// How far back the working orders are read: as far as Schwab surely lists them. A GTC order works up to 180 days,
/// and read 30 days back a GTC stop or take-profit entered 45 days ago was missing from the state, so a CLOSE did
/// not cancel it first. Schwab's own pages and its community say the window's start must be within 60 days of
/// today, one SDK says the range may span a year: the start is kept within the 60 days, since a read Schwab refused
/// would fail every sync of the bot, and an order entered before it is not seen (docs/brokers.md).
const OPEN_ORDERS_DAYS: i64 = 60;
const DAY_MS: i64 = 86_400_000;
/// How far past the host's clock the open-order window reaches, for a host clock behind Schwab's.
const CLOCK_MARGIN_MS: i64 = 3_600_000;
/// How much later than the first page the later pages of one read may be sent (they reuse its start).
const PAGES_MARGIN_MS: i64 = 600_000;

#[derive(Deserialize)]
struct AccountAnswer {
    #[serde(rename = "securitiesAccount")]
    account: Option<SecuritiesAccount>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct SecuritiesAccount {
    #[serde(default)]
    positions: Vec<WirePosition>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePosition {
    #[serde(default, deserialize_with = "read::dec_opt")]
    long_quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    short_quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    average_price: Option<Decimal>,
    instrument: WireInstrument,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireInstrument {
    #[serde(default, deserialize_with = "read::text")]
    asset_type: String,
    #[serde(default, deserialize_with = "read::text")]
    symbol: String,
    #[serde(default)]
    underlying_symbol: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireOrder {
    #[serde(default, deserialize_with = "read::id_opt")]
    order_id: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    status: String,
    #[serde(default)]
    status_description: Option<String>,
    #[serde(default)]
    entered_time: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    order_type: String,
    #[serde(default, deserialize_with = "read::text")]
    duration: String,
    /// `NORMAL`, or an extended session (`AM`, `PM`, `SEAMLESS`), which is where Schwab keeps extended hours.
    #[serde(default, deserialize_with = "read::text")]
    session: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    filled_quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    price: Option<Decimal>,
    #[serde(default)]
    order_leg_collection: Vec<WireLeg>,
    #[serde(default)]
    replacing_order_collection: Vec<WireOrder>,
    #[serde(default)]
    child_order_strategies: Vec<WireOrder>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireLeg {
    #[serde(default, deserialize_with = "read::text")]
    instruction: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    instrument: WireInstrument,
}

/// Schwab's `ServiceError {message, errors}` where data was expected.
fn error_of(what: &'static str, body: &[u8]) -> Option<ReadError> {
    let v = answer::json(body)?;
    let message = answer::text_at(&v, &["message"]).or_else(|| answer::text_at(&v, &["errors"]))?;
    Some(ReadError::BrokerError { broker: NAME, what, message })
}

fn asset_class_of(asset_type: &str) -> Option<AssetClass> {
    match asset_type {
        // ETFs are listed as collective investments.
        "EQUITY" | "COLLECTIVE_INVESTMENT" => Some(AssetClass::Equity),
        "OPTION" => Some(AssetClass::Option),
        _ => None,
    }
}

fn position(w: WirePosition) -> Option<BrokerPosition> {
    let asset_class = asset_class_of(&w.instrument.asset_type)?;
    // Checked: a difference past a decimal's range is no position this reader can state (unchecked, it panicked).
    let net = w.long_quantity.unwrap_or_default().checked_sub(w.short_quantity.unwrap_or_default())?;
    if net.is_zero() {
        return None;
    }
    let (instrument, contract) = match asset_class {
        AssetClass::Option => read::occ(&w.instrument.symbol),
        _ => (w.instrument.symbol.trim().to_ascii_uppercase(), None),
    };
    Some(BrokerPosition {
        instrument,
        asset_class,
        contract,
        pair: None,
        direction: if net.is_sign_negative() { Direction::Short } else { Direction::Long },
        quantity: net.abs().normalize(),
        average_price: w.average_price.map(|p| p.normalize()),
    })
}

fn leg_action_of(instruction: &str) -> Option<LegAction> {
    match instruction {
        "BUY_TO_OPEN" => Some(LegAction::BuyToOpen),
        "BUY_TO_CLOSE" => Some(LegAction::BuyToClose),
        "SELL_TO_OPEN" => Some(LegAction::SellToOpen),
        "SELL_TO_CLOSE" => Some(LegAction::SellToClose),
        _ => None,
    }
}

fn equity_intent_of(instruction: &str) -> Option<Intent> {
    match instruction {
        "BUY" => Some(Intent::OpenLong),
        "SELL" => Some(Intent::CloseLong),
        "SELL_SHORT" => Some(Intent::OpenShort),
        "BUY_TO_COVER" => Some(Intent::CloseShort),
        _ => None,
    }
}

fn side_of(instruction: &str) -> Option<OrderSide> {
    if instruction.starts_with("BUY") {
        Some(OrderSide::Buy)
    } else if instruction.starts_with("SELL") {
        Some(OrderSide::Sell)
    } else {
        None
    }
}

fn order(w: WireOrder) -> Result<BrokerOrder, ReadError> {
    let order_id =
        w.order_id.ok_or_else(|| ReadError::Unreadable { broker: NAME, detail: "an order has no orderId".into() })?;
    let count = w.quantity.filter(|q| *q > Decimal::ZERO).map(|q| q.normalize());
    let quantity = count.unwrap_or_default();
    let first = w.order_leg_collection.first();
    let options = w.order_leg_collection.iter().any(|l| l.instrument.asset_type == "OPTION");
    let mut legs = Vec::new();
    let (asset_class, instrument, side, intent) = if options {
        for l in &w.order_leg_collection {
            let (symbol, contract) = read::occ(&l.instrument.symbol);
            let contracts = l.quantity.unwrap_or_default().normalize();
            legs.push(BrokerLeg {
                instrument: symbol,
                contract,
                action: leg_action_of(&l.instruction),
                ratio: read::ratio(contracts, quantity),
                quantity: contracts,
            });
        }
        match legs.as_slice() {
            [one] => (AssetClass::Option, one.instrument.clone(), first.and_then(|l| side_of(&l.instruction)), None),
            _ => {
                // The legs' contracts first: Schwab writes an index's underlyingSymbol as `$SPX` (or `$SPX.X`),
                // which keyed the spread apart from the SPX the strategy and the state name.
                let underlying = legs
                    .iter()
                    .find_map(|l| l.contract.as_ref().map(|c| underlying_of(&c.root).to_string()))
                    .or_else(|| {
                        first.and_then(|l| l.instrument.underlying_symbol.as_deref()).map(|u| {
                            let u = u.trim().trim_start_matches('$');
                            u.strip_suffix(".X").unwrap_or(u).to_string()
                        })
                    })
                    .unwrap_or_default();
                (AssetClass::Option, underlying.trim().to_ascii_uppercase(), None, None)
            }
        }
    } else {
        let instruction = first.map(|l| l.instruction.as_str()).unwrap_or_default();
        let symbol = first.map(|l| l.instrument.symbol.trim().to_ascii_uppercase()).unwrap_or_default();
        (AssetClass::Equity, symbol, side_of(instruction), equity_intent_of(instruction))
    };
    let price = w.price.map(|p| p.normalize());
    let word = match w.order_type.as_str() {
        "MARKET" => TypeWord::Market,
        "LIMIT" => TypeWord::Limit,
        "NET_DEBIT" => TypeWord::Debit,
        "NET_CREDIT" => TypeWord::Credit,
        "NET_ZERO" => TypeWord::Even,
        _ => TypeWord::Other,
    };
    let (order_type, limit_price, price_effect) = word.terms(price, asset_class, side);
    // Every order this library sends is in the NORMAL session: an order in an extended one has a time in force of
    // Schwab's own, so that a MODIFY (which sends the order whole, `NORMAL` again) is refused rather than moving a
    // seamless or after-hours exit into regular hours.
    let extended = !matches!(w.session.as_str(), "" | "NORMAL");
    let duration = match w.duration.as_str() {
        _ if extended => None,
        "DAY" => Some(Duration::Day),
        "GOOD_TILL_CANCEL" => Some(Duration::Gtc),
        "FILL_OR_KILL" => Some(Duration::Fok),
        _ => None,
    };
    let replaced_by = w.replacing_order_collection.iter().find_map(|r| r.order_id.clone());
    let created_ms = w.entered_time.as_deref().and_then(crate::model::timestamp_ms);
    let o = BrokerOrder {
        extended_session: extended,
        order_id,
        client_order_id: None,
        instrument,
        asset_class,
        pair: None,
        side,
        intent,
        order_type,
        limit_price,
        price_effect,
        duration,
        quantity,
        notional: None,
        filled_quantity: w.filled_quantity.unwrap_or_default().normalize(),
        status: read::status_of(&w.status, STATUSES),
        broker_status: w.status,
        legs,
        created_at: w.entered_time,
        created_ms,
        replaced_by,
        reason: w.status_description.filter(|s| !s.trim().is_empty()),
    };
    Ok(match count {
        Some(_) => o,
        None => read::without_count(o, None),
    })
}

/// Schwab's default `maxResults`: the most orders one list answer holds.
const ORDERS_PAGE: usize = 3000;

/// The account's orders entered from `from_ms` to `to_ms`, a page of at most [`ORDERS_PAGE`].
fn orders_page(account: &str, from_ms: i64, to_ms: i64) -> Request {
    let page = ORDERS_PAGE.to_string();
    let q = read::query(&[
        ("fromEnteredTime", &read::utc(from_ms, true)),
        ("toEnteredTime", &read::utc(to_ms, true)),
        ("maxResults", &page),
    ]);
    read::get(format!("/trader/v1/accounts/{account}/orders{q}"))
}

/// The page after the full page `wire` (the answer to `request`): the same window, ending a
/// second past the page's oldest order. `enteredTime` is to the second, and whether Schwab's
/// end is inclusive is not documented, so the oldest second is listed again; the host merges
/// pages by order id. A page whose times cannot be read, or a full page within one second
/// (the next would be the same), cannot be followed: incomplete.
fn next_orders_page(request: &Request, wire: &[WireOrder]) -> Result<Request, ReadError> {
    let incomplete = ReadError::Incomplete { broker: NAME, what: "orders" };
    let param = |key: &str| {
        let (_, rest) = request.path.split_once(&format!("{key}=")[..])?;
        crate::model::timestamp_ms(rest.split('&').next()?)
    };
    let (path, _) = request.path.split_once("/orders?").ok_or(incomplete.clone())?;
    let account = path.rsplit('/').next().ok_or(incomplete.clone())?;
    let (from, to) = (param("fromEnteredTime"), param("toEnteredTime"));
    let oldest = wire
        .iter()
        .map(|w| w.entered_time.as_deref().and_then(crate::model::timestamp_ms))
        .collect::<Option<Vec<_>>>()
        .and_then(|t| t.into_iter().min());
    match (from, to, oldest) {
        (Some(from), Some(to), Some(oldest)) if oldest.saturating_add(1000) < to => {
            Ok(orders_page(account, from, oldest.saturating_add(1000)))
        }
        _ => Err(incomplete),
    }
}

/// The deepest an OCO or TRIGGER nests its orders that is read (a TRIGGER of an OCO is two).
const MAX_CHILD_DEPTH: usize = 8;

/// Each order of a list answer and every order an OCO or TRIGGER holds in `childOrderStrategies`, each an order
/// of its own; a parent with no legs of its own (an OCO) is only their holder. Left in their parent, a
/// hand-placed OCO's working take-profit was missing from the state, and a CLOSE sold beside it instead of
/// cancelling it first. A child listed at the top level too is read once; nested past [`MAX_CHILD_DEPTH`], the
/// answer is unreadable rather than read in part.
fn with_children(wire: Vec<WireOrder>) -> Result<Vec<WireOrder>, ReadError> {
    let mut out = Vec::with_capacity(wire.len());
    let mut seen: std::collections::HashSet<String> = wire.iter().filter_map(|w| w.order_id.clone()).collect();
    let mut pending: Vec<(WireOrder, usize)> = wire.into_iter().rev().map(|w| (w, 0)).collect();
    while let Some((mut w, depth)) = pending.pop() {
        if depth > 0 && w.order_id.as_ref().is_some_and(|id| !seen.insert(id.clone())) {
            continue;
        }
        let children = std::mem::take(&mut w.child_order_strategies);
        if !children.is_empty() && depth >= MAX_CHILD_DEPTH {
            return Err(ReadError::Unreadable {
                broker: NAME,
                detail: format!("an order nests its child orders more than {MAX_CHILD_DEPTH} levels deep"),
            });
        }
        let holder_only = w.order_leg_collection.is_empty() && !children.is_empty();
        pending.extend(children.into_iter().rev().map(|c| (c, depth + 1)));
        if !holder_only {
            out.push(w);
        }
    }
    Ok(out)
}

/// The orders of a list answer, an OCO's or TRIGGER's children each an order of its own ([`with_children`]), with
/// a replaced order's successor listed too when the answer nests it only.
fn orders_of(wire: Vec<WireOrder>) -> Result<Vec<BrokerOrder>, ReadError> {
    let wire = with_children(wire)?;
    let mut out: Vec<BrokerOrder> = Vec::with_capacity(wire.len());
    let mut nested = Vec::new();
    for mut w in wire {
        let successors = std::mem::take(&mut w.replacing_order_collection);
        let mut o = order(w)?;
        o.replaced_by = o.replaced_by.or_else(|| successors.iter().find_map(|r| r.order_id.clone()));
        out.push(o);
        nested.extend(successors);
    }
    for w in nested {
        let o = order(w)?;
        if !out.iter().any(|x| x.order_id == o.order_id) {
            out.push(o);
        }
    }
    Ok(out)
}

impl AccountReads for Schwab {
    fn positions_request(&self, account_id: &str) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        Ok(read::get(format!("/trader/v1/accounts/{account}{}", read::query(&[("fields", "positions")]))))
    }

    /// Schwab needs both ends of the entry-time window and takes one status at most, so
    /// every order entered since the first midnight UTC within the last 60 days (of Schwab's clock, which may be
    /// up to an hour ahead of the host's, and of the later pages' time) is listed and the statuses tell the working
    /// ones apart; a GTC order entered weeks ago stays in view.
    /// The window ends an hour past `now_ms`: ending at the host's clock, it left out an order
    /// just entered whenever that clock ran behind Schwab's.
    fn open_orders_request(&self, account_id: &str, now_ms: i64) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        // The first midnight not before 60 days before Schwab's latest possible clock, when the last page is read:
        // never a start Schwab may refuse, and the window from it to `to` spans less than 60 days. With no margin,
        // around midnight UTC the start was up to an hour past Schwab's 60 days.
        let earliest = now_ms.saturating_add(CLOCK_MARGIN_MS + PAGES_MARGIN_MS) - OPEN_ORDERS_DAYS * DAY_MS;
        let from = earliest.div_euclid(DAY_MS) * DAY_MS;
        let from = if from < earliest { from + DAY_MS } else { from };
        let to = now_ms.saturating_add(CLOCK_MARGIN_MS);
        Ok(orders_page(&account, from, to))
    }

    /// Schwab has no cursor and lists at most `maxResults` orders (3,000, its default), newest
    /// first: a full page is followed by the same window ending at the page's oldest order.
    /// Read as the whole list, a busy account's older orders (a GTC stop a CLOSE must cancel
    /// first) were dropped from the state.
    fn parse_orders_page(
        &self,
        request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerOrder>, Option<Request>), ReadError> {
        let wire: Vec<WireOrder> = read::parse(NAME, body).map_err(|e| error_of("orders", body).unwrap_or(e))?;
        let next = if wire.len() >= ORDERS_PAGE { Some(next_orders_page(request, &wire)?) } else { None };
        Ok((orders_of(wire)?, next))
    }

    fn order_request(&self, account_id: &str, order_id: &str) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(read::get(format!("/trader/v1/accounts/{account}/orders/{id}")))
    }

    /// No client order id exists at Schwab: the orders entered from two minutes before the
    /// send to three minutes after it, to be matched by their terms.
    fn lookup_request(&self, account_id: &str, _client_order_id: &str, placed_ms: i64) -> Result<Lookup, OrderError> {
        let account = common::account(NAME, account_id)?;
        let from = read::window_start(placed_ms);
        let q = read::query(&[
            ("fromEnteredTime", &read::utc(from, true)),
            ("toEnteredTime", &read::utc(from + read::ENTERED_WITHIN_MS, true)),
        ]);
        Ok(Lookup::Window(read::get(format!("/trader/v1/accounts/{account}/orders{q}"))))
    }

    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError> {
        let a: AccountAnswer = read::parse(NAME, body)?;
        match a.account {
            Some(acc) => Ok(acc.positions.into_iter().filter_map(position).collect()),
            None => Err(error_of("positions", body).unwrap_or(ReadError::Unreadable {
                broker: NAME,
                detail: a.message.unwrap_or_else(|| "the answer has no securitiesAccount".into()),
            })),
        }
    }

    /// A replaced order's successor is listed too, when the answer nests it only.
    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError> {
        orders_of(read::parse(NAME, body).map_err(|e| error_of("orders", body).unwrap_or(e))?)
    }

    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError> {
        order(read::parse(NAME, body).map_err(|e| error_of("order", body).unwrap_or(e))?)
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use crate::broker::{Body, Found};
    use crate::model::{Date, OptionContract, OptionSide};

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../tests/fixtures/brokers/schwab/", $name)).as_slice()
        };
    }

    const HASH: &str = "8F3A2C1D9E7B6A5F4E3D2C1B0A9F8E7D6C5B4A39281706F5E4D3C2B1A0918273";

    fn ms(iso: &str) -> i64 {
        crate::model::timestamp_ms(iso).unwrap()
    }

    /// The limit entry as this service sends it: buy 10 AAPL at 185, day.
    fn entry() -> Order {
        Order {
            asset_class: AssetClass::Equity,
            symbol: "AAPL".into(),
            pair: None,
            intent: Intent::OpenLong,
            quantity: Decimal::from(10),
            order_type: OrderType::Limit,
            limit_price: Some(Decimal::from(185)),
            price_effect: None,
            duration: Duration::Day,
            legs: vec![],
            client_order_id: "swh-1".parse().unwrap(),
            reference_price: None,
        }
    }

    /// The start keeps a margin against Schwab's 60 days. This module allows for a host clock up to an hour behind
    /// Schwab's (`CLOCK_MARGIN_MS`), and a full page is followed by the same window seconds later: with no margin, just
    /// before (or at) midnight UTC the start was more than 60 days before Schwab's own clock.
    #[test]
    fn working_orders_window_start_stays_within_60_days_of_schwabs_clock() {
        let s = Schwab;
        for now in ["2026-03-03T23:59:30Z", "2026-03-04T00:00:00Z", "2026-12-31T23:59:59Z"] {
            let now = ms(now);
            let r = s.open_orders_request(HASH, now).unwrap();
            let (_, rest) = r.path.split_once("fromEnteredTime=").unwrap();
            let from = crate::model::timestamp_ms(rest.split('&').next().unwrap()).unwrap();
            // Schwab's clock a minute ahead of the host's (or the next page of the chain a minute later), or a full
            // hour ahead and the next page read minutes later.
            for schwab_now in [now + 60_000, now + CLOCK_MARGIN_MS + 5 * 60_000] {
                assert!(
                    from >= schwab_now - 60 * DAY_MS,
                    "{}: start {} ms past Schwab's 60 days",
                    r.path,
                    schwab_now - 60 * DAY_MS - from
                );
            }
        }
    }

    /// Read as a range (`toEnteredTime` minus `fromEnteredTime`, as Schwab's "within 60 days" may be), the window
    /// spans at most 60 days: with the start at most an hour inside the 60 days and the end an hour past the host's
    /// clock, it spanned more every day from 23:00 to 24:00 UTC.
    #[test]
    fn working_orders_window_spans_at_most_60_days() {
        let s = Schwab;
        let now = ms("2026-03-03T23:30:00Z");
        let r = s.open_orders_request(HASH, now).unwrap();
        let (_, rest) = r.path.split_once("fromEnteredTime=").unwrap();
        let from = crate::model::timestamp_ms(rest.split('&').next().unwrap()).unwrap();
        let (_, rest) = r.path.split_once("toEnteredTime=").unwrap();
        let to = crate::model::timestamp_ms(rest.split('&').next().unwrap()).unwrap();
        assert!(to - from <= 60 * DAY_MS, "{}: spans 60 days and {} min", r.path, (to - from - 60 * DAY_MS) / 60_000);
    }

    #[test]
    fn working_orders_are_read_from_within_60_days_back_never_before() {
        // Read 30 days back, a GTC stop entered 45 days ago was missing from the state and a CLOSE did not cancel it
        // first; a start more than 60 days back Schwab may refuse, failing every sync.
        let s = Schwab;
        for now in ["2026-03-03T15:00:00Z", "2026-03-03T23:30:00Z", "2026-03-04T00:00:00Z", "2024-03-01T00:00:01Z"] {
            let now = ms(now);
            let r = s.open_orders_request(HASH, now).unwrap();
            let (_, rest) = r.path.split_once("fromEnteredTime=").unwrap();
            let from = crate::model::timestamp_ms(rest.split('&').next().unwrap()).unwrap();
            assert!(from >= now - 60 * DAY_MS, "{} starts more than 60 days back", r.path);
            assert!(from <= now - 58 * DAY_MS, "{} misses orders entered 58 days ago", r.path);
            assert!(from <= now - 45 * DAY_MS, "a GTC stop entered 45 days ago is outside {}", r.path);
            assert_eq!(from.rem_euclid(DAY_MS), 0, "from midnight UTC: {}", r.path);
        }
    }

    #[test]
    fn requests() {
        let s = Schwab;
        let r = s.positions_request(HASH).unwrap();
        assert_eq!((r.method, &r.body), (Method::Get, &Body::Empty));
        assert_eq!(r.path, format!("/trader/v1/accounts/{HASH}?fields=positions"));
        assert_eq!(
            s.open_orders_request(HASH, ms("2026-03-03T15:00:00Z")).unwrap().path,
            format!(
                "/trader/v1/accounts/{HASH}/orders?fromEnteredTime=2026-01-03T00:00:00.000Z&toEnteredTime=2026-03-03T16:00:00.000Z&maxResults=3000"
            ),
            "both ends of the window, as Schwab requires; the end an hour ahead of the host's clock"
        );
        assert_eq!(
            s.order_request(HASH, "1004055538123").unwrap().path,
            format!("/trader/v1/accounts/{HASH}/orders/1004055538123")
        );
        let lookup = s.lookup_request(HASH, "ignored", ms("2026-03-03T14:31:05Z")).unwrap();
        assert!(matches!(lookup, Lookup::Window(_)), "no client order id at Schwab");
        assert_eq!(
            lookup.request().path,
            format!(
                "/trader/v1/accounts/{HASH}/orders?fromEnteredTime=2026-03-03T14:29:00.000Z&toEnteredTime=2026-03-03T14:34:00.000Z"
            )
        );
    }

    /// A busy account's list was read as whole at Schwab's 3,000 orders, and the older orders past it (a GTC
    /// stop a CLOSE must cancel first) were dropped from the state. A full page is followed by the same window
    /// ending a second past its oldest order; a shorter page ends the list; a full page whose times cannot be
    /// read, or one within a single second, is incomplete, never the whole list.
    #[test]
    fn a_full_page_of_orders_is_followed_by_the_window_before_its_oldest() {
        let s = Schwab;
        let first = s.open_orders_request(HASH, ms("2026-03-03T15:00:00Z")).unwrap();
        let one = serde_json::from_slice::<serde_json::Value>(fixture!("orders_open.json")).unwrap()[0].clone();
        let page = |n: usize, time: &dyn Fn(usize) -> serde_json::Value| {
            let orders: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    let mut o = one.clone();
                    o["orderId"] = serde_json::json!(1_000_000 + i);
                    o["enteredTime"] = time(i);
                    o.as_object_mut().unwrap().remove("replacingOrderCollection");
                    o
                })
                .collect();
            serde_json::to_vec(&orders).unwrap()
        };
        // Newest first, one a second, back from 14:59:59 (the oldest of 3,000 at 14:10:00).
        let spread = |i: usize| {
            let t = ms("2026-03-03T14:59:59Z") - i as i64 * 1000;
            serde_json::json!(format!("{}+0000", &read::utc(t, false)[..19]))
        };
        let (orders, next) = s.parse_orders_page(&first, &page(3000, &spread)).unwrap();
        assert_eq!(orders.len(), 3000);
        let next = next.expect("a full page is not the whole list");
        assert_eq!(
            next.path,
            format!(
                "/trader/v1/accounts/{HASH}/orders?fromEnteredTime=2026-01-03T00:00:00.000Z&toEnteredTime=2026-03-03T14:10:01.000Z&maxResults=3000"
            )
        );
        let (orders, last) = s.parse_orders_page(&next, &page(2, &spread)).unwrap();
        assert_eq!((orders.len(), last.is_none()), (2, true), "a short page ends the list");
        let untimed = |_: usize| serde_json::Value::Null;
        assert!(matches!(s.parse_orders_page(&first, &page(3000, &untimed)), Err(ReadError::Incomplete { .. })));
        // 3,000 orders in the window's last second: the next page would be this one again.
        let last_second = |_: usize| serde_json::json!("2026-03-03T14:10:00+0000");
        assert!(matches!(s.parse_orders_page(&next, &page(3000, &last_second)), Err(ReadError::Incomplete { .. })));
    }

    #[test]
    fn positions_net_of_long_and_short() {
        let p = Schwab.parse_positions(fixture!("positions.json")).unwrap();
        let rows: Vec<_> =
            p.iter().map(|p| (p.instrument.as_str(), p.asset_class, p.direction, p.quantity.to_string())).collect();
        assert_eq!(
            rows,
            [
                ("AAPL", AssetClass::Equity, Direction::Long, "10".to_string()),
                ("TSLA", AssetClass::Equity, Direction::Short, "15".to_string()),
                ("SPXW260320C05800000", AssetClass::Option, Direction::Long, "2".to_string()),
                ("SPXW260320C05850000", AssetClass::Option, Direction::Short, "2".to_string()),
            ]
        );
        assert_eq!(
            p[3].contract,
            Some(OptionContract {
                root: "SPXW".into(),
                expiration: Date::new(2026, 3, 20).unwrap(),
                side: OptionSide::Call,
                strike: Decimal::from(5850)
            }),
            "the padded OSI symbol read as a contract"
        );
        assert_eq!(p[1].average_price.unwrap().to_string(), "245.8");
        let flat = br#"{"securitiesAccount":{"positions":[{"longQuantity":1.0,"shortQuantity":1.0,
            "instrument":{"assetType":"EQUITY","symbol":"F"}},{"longQuantity":5.0,"shortQuantity":0.0,
            "instrument":{"assetType":"CASH_EQUIVALENT","symbol":"MMDA1"}}]}}"#;
        assert!(Schwab.parse_positions(flat).unwrap().is_empty(), "a flat row and cash are no positions");
        assert_eq!(
            Schwab.parse_positions(fixture!("auth_error.json")),
            Err(ReadError::BrokerError { broker: "Schwab", what: "positions", message: "Unauthorized".into() })
        );
    }

    #[test]
    fn orders_with_their_legs() {
        let o = Schwab.parse_orders(fixture!("orders_open.json")).unwrap();
        let rows: Vec<_> = o.iter().map(|o| (o.order_id.as_str(), o.status)).collect();
        assert_eq!(
            rows,
            [
                ("1004055538123", OrderStatus::Working),
                ("1004055540391", OrderStatus::Working),
                ("1004055545810", OrderStatus::Cancelled),
                ("1004055530077", OrderStatus::Filled),
                ("1004051972440", OrderStatus::Working),
            ]
        );
        let entry = &o[0];
        assert_eq!((entry.client_order_id.as_deref(), entry.intent), (None, Some(Intent::OpenLong)));
        assert_eq!((entry.limit_price.unwrap().to_string(), entry.quantity.to_string()), ("185".into(), "10".into()));
        assert_eq!(entry.created_ms, Some(ms("2026-03-03T14:31:05Z")), "+0000 without a colon");
        let spread = &o[1];
        assert_eq!((spread.instrument.as_str(), spread.side), ("SPX", None));
        assert_eq!(
            (spread.price_effect, spread.limit_price.unwrap().to_string()),
            (Some(PriceEffect::Debit), "23.5".into())
        );
        let legs: Vec<_> = spread.legs.iter().map(|l| (l.instrument.as_str(), l.action, l.ratio)).collect();
        assert_eq!(
            legs,
            [
                ("SPXW260320C05800000", Some(LegAction::BuyToOpen), 1),
                ("SPXW260320C05850000", Some(LegAction::SellToOpen), 1)
            ]
        );
        // Schwab writes an index's underlying as `$SPX`: the spread is still the SPX the strategy names.
        let dollar = std::str::from_utf8(fixture!("orders_open.json"))
            .unwrap()
            .replace("\"underlyingSymbol\": \"SPX\"", "\"underlyingSymbol\": \"$SPX\"");
        assert!(dollar.contains("$SPX"));
        assert_eq!(Schwab.parse_orders(dollar.as_bytes()).unwrap()[1].instrument, "SPX");
        let exit = &o[4];
        assert_eq!((exit.intent, exit.duration), (Some(Intent::CloseShort), Some(Duration::Gtc)));
        assert_eq!((exit.quantity.to_string(), exit.filled_quantity.to_string()), ("25".into(), "10".into()));
    }

    /// A TRIGGER placed by hand: a buy that, once filled, starts an OCO of a take-profit and a stop. The buy and
    /// both exits are orders of their own; the OCO holding the exits (no legs of its own) is not. A child listed
    /// at the top level too is read once; nested past the bound, the answer is unreadable (not read in part), and
    /// a thousand levels are refused without overflowing the stack.
    #[test]
    fn a_trigger_and_its_ocos_children_are_orders_of_their_own() {
        let single = |id: u64, kind: &str, instruction: &str, status: &str| {
            serde_json::json!({"orderStrategyType": "SINGLE", "orderId": id, "status": status, "orderType": kind,
                "duration": "GOOD_TILL_CANCEL", "quantity": 10.0, "filledQuantity": 0.0, "price": 200.0,
                "enteredTime": "2026-03-03T14:00:00+0000",
                "orderLegCollection": [{"instruction": instruction, "quantity": 10.0,
                    "instrument": {"assetType": "EQUITY", "symbol": "AAPL"}}]})
        };
        let mut trigger = single(800, "LIMIT", "BUY", "FILLED");
        trigger["orderStrategyType"] = "TRIGGER".into();
        trigger["childOrderStrategies"] = serde_json::json!([{"orderStrategyType": "OCO", "orderId": 810,
            "status": "WORKING", "childOrderStrategies":
                [single(811, "LIMIT", "SELL", "WORKING"), single(812, "STOP", "SELL", "WORKING")]}]);
        let read = |v: &serde_json::Value| Schwab.parse_orders(&serde_json::to_vec(v).unwrap());
        let o = read(&serde_json::json!([trigger])).unwrap();
        let rows: Vec<_> = o.iter().map(|o| (o.order_id.as_str(), o.status, o.order_type, o.intent)).collect();
        assert_eq!(
            rows,
            [
                ("800", OrderStatus::Filled, Some(OrderType::Limit), Some(Intent::OpenLong)),
                ("811", OrderStatus::Working, Some(OrderType::Limit), Some(Intent::CloseLong)),
                ("812", OrderStatus::Working, None, Some(Intent::CloseLong)),
            ]
        );
        assert_eq!((o[1].instrument.as_str(), o[1].limit_price.unwrap().to_string()), ("AAPL", "200".into()));
        let twice = read(&serde_json::json!([trigger, single(811, "LIMIT", "SELL", "WORKING")])).unwrap();
        assert_eq!(twice.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(), ["800", "812", "811"]);
        let mut deep = single(1, "LIMIT", "SELL", "WORKING");
        for id in 2..=(MAX_CHILD_DEPTH as u64 + 2) {
            let mut parent = single(id, "LIMIT", "BUY", "WORKING");
            parent["childOrderStrategies"] = serde_json::json!([deep]);
            deep = parent;
        }
        assert!(matches!(read(&serde_json::json!([deep])), Err(ReadError::Unreadable { .. })));
        let mut body = String::new();
        for _ in 0..1000 {
            body.push_str(r#"[{"orderId":1,"childOrderStrategies":"#);
        }
        body.push_str("[]");
        body.push_str(&"}]".repeat(1000));
        let deepest = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || Schwab.parse_orders(body.as_bytes()).is_err())
            .unwrap()
            .join()
            .unwrap();
        assert!(deepest, "a thousand levels of child orders are no answer");
    }

    #[test]
    fn one_order_in_every_final_state() {
        let read = |body: &[u8]| Schwab.parse_order(body).unwrap();
        assert_eq!(read(fixture!("order_by_id.json")).status, OrderStatus::Working);
        let filled = read(fixture!("order_filled.json"));
        assert_eq!((filled.status, filled.filled_quantity.to_string()), (OrderStatus::Filled, "10".into()));
        let cancelled = read(fixture!("order_cancelled.json"));
        assert_eq!((cancelled.status, cancelled.filled_quantity.to_string()), (OrderStatus::Cancelled, "10".into()));
        let rejected = read(fixture!("order_rejected.json"));
        assert_eq!((rejected.status, rejected.intent), (OrderStatus::Rejected, Some(Intent::OpenShort)));
        assert_eq!(rejected.reason.as_deref(), Some("Your buying power is below the amount required for this order."));
        let replaced = read(fixture!("order_replaced.json"));
        assert_eq!((replaced.status, replaced.replaced_by.as_deref()), (OrderStatus::Replaced, Some("1004055543902")));
        // In a list, the successor nested under the replaced order is listed as well.
        let list = format!("[{}]", String::from_utf8_lossy(fixture!("order_replaced.json")));
        let both = Schwab.parse_orders(list.as_bytes()).unwrap();
        assert_eq!(
            both.iter().map(|o| (o.order_id.as_str(), o.status)).collect::<Vec<_>>(),
            [("1004055538123", OrderStatus::Replaced), ("1004055543902", OrderStatus::Working)]
        );
        assert_eq!(both[1].limit_price.unwrap().to_string(), "186");
        let unknown = read(br#"{"orderId":1,"status":"UNKNOWN","quantity":1.0,"orderLegCollection":[]}"#);
        assert_eq!(unknown.status, OrderStatus::Unknown);
        let new_word = read(br#"{"orderId":1,"status":"SOMETHING_NEW","quantity":1.0}"#);
        assert!(!new_word.status.is_final());
    }

    #[test]
    fn finding_ours_by_its_terms() {
        let placed = ms("2026-03-03T14:31:04Z");
        let lookup = Schwab.lookup_request(HASH, "swh-1", placed).unwrap();
        let find =
            |body: &[u8], expected: Option<&Order>| Schwab.find_ours(&lookup, 200, body, "swh-1", expected, placed);
        match find(fixture!("order_by_client_id.json"), Some(&entry())) {
            Found::Found(o) => assert_eq!(o.order_id, "1004055538123"),
            other => panic!("{other:?}"),
        }
        // Two limit orders for 10 AAPL at 185 entered within the minute: either could be ours.
        assert_eq!(find(fixture!("order_by_client_id_ambiguous.json"), Some(&entry())), Found::Ambiguous(2));
        let mut other = entry();
        other.limit_price = Some(Decimal::from(184));
        assert_eq!(find(fixture!("order_by_client_id.json"), Some(&other)), Found::NotFound);
        assert_eq!(find(b"[]", Some(&entry())), Found::NotFound);
        assert!(matches!(find(fixture!("order_by_client_id.json"), None), Found::Unreadable(_)), "terms are needed");
        // An order entered an hour later is not the one sent now.
        let later =
            Schwab.find_ours(&lookup, 200, fixture!("order_by_client_id.json"), "", Some(&entry()), placed - 3_600_000);
        assert_eq!(later, Found::NotFound);
        assert!(matches!(
            Schwab.find_ours(&lookup, 401, fixture!("auth_error.json"), "", Some(&entry()), placed),
            Found::Unreadable(m) if m.contains("401")
        ));
    }

    #[test]
    fn write_answers_from_the_fixtures() {
        let raw = String::from_utf8_lossy(fixture!("place_accepted.txt"));
        let location = raw.lines().find_map(|l| l.strip_prefix("Location: ")).unwrap();
        assert_eq!(
            Schwab.read_answer(RequestKind::Place, 201, Some(location), b""),
            Answer::Accepted { order_id: Some("1004055538123".into()) }
        );
        assert!(matches!(
            Schwab.read_answer(RequestKind::Place, 400, None, fixture!("place_refused.json")),
            Answer::Refused { message } if message.contains("Invalid value 'GTC'")
        ));
        let accounts: serde_json::Value = serde_json::from_slice(fixture!("account_numbers.json")).unwrap();
        assert_eq!(accounts[0]["hashValue"], HASH, "the account hash used in every path");
    }

    /// An order whose answer states no quantity was read as a working order of 0 shares, which the bot's state
    /// cannot hold and a MODIFY sized from. It is read with its count unknown: its status unknown while it works,
    /// and a filled one counts what filled.
    #[test]
    fn an_order_without_a_quantity_is_never_a_working_order_of_zero() {
        let read = |status: &str| {
            let mut v: serde_json::Value = serde_json::from_slice(fixture!("order_by_id.json")).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("quantity");
            o.insert("status".into(), status.into());
            o.insert("filledQuantity".into(), 4.into());
            Schwab.parse_order(v.to_string().as_bytes()).unwrap()
        };
        let working = read("WORKING");
        assert_eq!((working.status, working.quantity, working.notional), (OrderStatus::Unknown, Decimal::ZERO, None));
        assert!(working.reason.as_deref().unwrap_or_default().contains("no size"), "{:?}", working.reason);
        let filled = read("FILLED");
        assert_eq!((filled.status, filled.quantity), (OrderStatus::Filled, Decimal::from(4)));
        let cancelled = read("CANCELED");
        assert_eq!((cancelled.status, cancelled.quantity), (OrderStatus::Cancelled, Decimal::ZERO));
    }
}
