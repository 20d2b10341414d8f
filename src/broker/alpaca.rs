//! Alpaca Trading API v2: JSON bodies at `/v2/orders`.
//!
//! Alpaca has only `buy`/`sell` and infers long or short from the position, so opening a
//! short is a `sell` and covering it a `buy`. Numbers go out as JSON numbers with their
//! exact digits (alpaca-py sends numbers; the docs' examples send strings; both are
//! accepted). The account is chosen by the API keys, so paths carry no account id.
//! A replace (`PATCH`) is cancel-and-replace: the replacement gets a new order id.

use super::answer::{self, Answer};
use super::common::{self, label};
use super::json::Writer;
use super::{Body, Broker, Method, Request, JSON};
use crate::decimal::Decimal;
use crate::model::words::trim;
use crate::model::RequestKind;
use crate::model::{AssetClass, Duration, LegAction, Order, OrderError, OrderLeg, OrderType, PriceEffect};

/// Alpaca's formatter.
pub struct Alpaca;

const NAME: &str = "Alpaca";

/// Alpaca's documented limit on `client_order_id`.
const MAX_CLIENT_ORDER_ID: usize = 128;

/// Crypto quantities: Alpaca takes up to nine decimal places.
const CRYPTO_SCALE: u32 = 9;

impl Broker for Alpaca {
    fn name(&self) -> &'static str {
        "alpaca"
    }

    fn offers(&self, _asset_class: AssetClass) -> bool {
        true
    }

    fn crypto_quantity_scale(&self) -> u32 {
        CRYPTO_SCALE
    }

    fn replace_keeps_id(&self) -> bool {
        false
    }

    /// Alpaca's `PATCH /v2/orders/{id}` takes whole shares only: "Qty of equity fractional orders are not allowed to
    /// change" (its OpenAPI, `UpdateOrderRequest.qty`). A fractional share order re-sized by one was refused after
    /// the sender had been answered processed, and stayed at its old size.
    fn replace_resizes(&self, asset_class: AssetClass, from: Decimal, to: Decimal) -> bool {
        asset_class != AssetClass::Equity || (crate::decimal::is_whole(from) && crate::decimal::is_whole(to))
    }

    /// Alpaca's options are US equity and ETF options only.
    fn offers_index_options(&self) -> bool {
        false
    }

    /// Alpaca refuses a second order with a `client_order_id` it has seen, which makes a
    /// resent delivery harmless.
    fn accepts_client_order_id(&self) -> bool {
        true
    }

    fn place(&self, _account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let p = Prepared::new(order)?;
        let mut w = Writer::new();
        match order.asset_class {
            AssetClass::Equity => single(&mut w, trim(&order.symbol), &p, side(order.intent.is_buy()), None),
            AssetClass::Crypto => {
                let pair = common::spot_pair(NAME, order)?;
                single(&mut w, &self.crypto_symbol(pair), &p, side(order.intent.is_buy()), None)
            }
            AssetClass::Option => match order.legs.as_slice() {
                [leg] => {
                    let (symbol, action) = (leg.contract.occ_unpadded(), leg.action);
                    single(&mut w, &symbol, &p, side(action.is_buy()), Some(intent(action)))
                }
                legs => multi_leg(&mut w, legs, &p),
            },
        };
        close_with_client_order_id(&mut w, order)?;
        Ok(Request {
            method: Method::Post,
            path: "/v2/orders".into(),
            content_type: Some(JSON),
            body: Body::Json(w.done()),
        })
    }

    /// `PATCH /v2/orders/{id}` takes only `qty`, `time_in_force`, `limit_price` (and stop
    /// fields this service does not send) plus a `client_order_id` for the replacement,
    /// which is a new order.
    fn replace(
        &self,
        _account_id: &str,
        order_id: &str,
        order: &Order,
        _quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        let id = common::order_id(NAME, order_id)?;
        if order.asset_class == AssetClass::Crypto {
            common::spot_pair(NAME, order)?;
        }
        let p = Prepared::new(order)?;
        // "You can only patch full shares for now" (its OpenAPI): the builder re-sizes such an order by a cancel
        // and a new order ([`Broker::replace_resizes`]).
        if order.asset_class == AssetClass::Equity && !crate::decimal::is_whole(p.quantity) {
            return Err(OrderError::BrokerRefuses {
                broker: NAME,
                reason: format!("Alpaca changes no fractional share order ({} {})", p.quantity, order.symbol.trim()),
            });
        }
        let mut w = Writer::new();
        w.raw(r#"{"qty":"#).value(p.quantity).raw(r#","time_in_force":"#).value(p.tif);
        if let Some(l) = p.limit_price {
            w.raw(r#","limit_price":"#).value(l);
        }
        close_with_client_order_id(&mut w, order)?;
        Ok(Request {
            method: Method::Patch,
            path: compact_str::format_compact!("/v2/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(w.done()),
        })
    }

    fn cancel(&self, _account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: compact_str::format_compact!("/v2/orders/{id}"),
            content_type: None,
            body: Body::Empty,
        })
    }

    /// Alpaca answers the order (`id`) on place and replace, 204 on cancel, and
    /// `{"code":…,"message":…}` on errors; a reused `client_order_id` is a 422 (or 409)
    /// whose message names it, meaning the order is already there.
    fn read_answer(&self, kind: RequestKind, status: u16, _location: Option<&str>, body: &[u8]) -> Answer {
        if answer::success(status) {
            return Answer::Accepted { order_id: answer::json(body).and_then(|v| answer::id_at(&v, &["id"])) };
        }
        match answer::failed(status, body, |v| answer::text_at(v, &["message"])) {
            Answer::Refused { message }
                if kind != RequestKind::Cancel
                    && matches!(status, 409 | 422)
                    && message.to_ascii_lowercase().contains("client_order_id") =>
            {
                Answer::AlreadyAccepted { message }
            }
            other => other,
        }
    }
}

/// What place and replace share once the order has been checked.
struct Prepared {
    /// `qty`: shares, coins, contracts of a single leg, or units of a multi-leg strategy.
    quantity: Decimal,
    order_type: &'static str,
    tif: &'static str,
    /// `limit_price` as Alpaca reads it: signed (+debit / −credit) for multi-leg orders.
    limit_price: Option<Decimal>,
}

impl Prepared {
    fn new(order: &Order) -> Result<Prepared, OrderError> {
        let quantity = common::quantity(NAME, order, true, CRYPTO_SCALE)?;
        let limit = common::limit_price(NAME, order)?;
        let tif = time_in_force(order)?;
        let (quantity, limit_price) = match order.asset_class {
            AssetClass::Equity => {
                common::symbol(NAME, order)?;
                // Alpaca takes fractional shares only as market day orders (422 otherwise).
                if !crate::decimal::is_whole(quantity)
                    && (order.order_type != OrderType::Market || order.duration != Duration::Day)
                {
                    return Err(OrderError::BrokerRefuses { broker: NAME, reason: format!(
                        "Alpaca takes fractional share quantities ({quantity} {}) only as market orders good for the day",
                        order.symbol.trim()
                    ) });
                }
                // Nor as a short sale: "short selling fractional shares is not supported" (Alpaca's support pages).
                if !crate::decimal::is_whole(quantity) && order.intent == crate::model::Intent::OpenShort {
                    return Err(OrderError::BrokerRefuses {
                        broker: NAME,
                        reason: format!(
                            "Alpaca does not sell fractional shares short ({quantity} {})",
                            order.symbol.trim()
                        ),
                    });
                }
                (quantity, limit)
            }
            AssetClass::Crypto => (quantity, limit),
            AssetClass::Option => match common::option_legs(NAME, order)? {
                [leg] => {
                    if limit.is_some() {
                        // A single leg's price is its premium; checked against the leg's side.
                        common::price_effect(NAME, order)?;
                    }
                    (common::leg_quantity(quantity, leg), limit)
                }
                _ => {
                    let signed = match limit {
                        Some(p) => Some(match common::price_effect(NAME, order)? {
                            PriceEffect::Debit => p,
                            PriceEffect::Credit => -p,
                        }),
                        None => None,
                    };
                    (quantity, signed)
                }
            },
        };
        let order_type = match order.order_type {
            OrderType::Market => "market",
            OrderType::Limit => "limit",
        };
        Ok(Prepared { quantity, order_type, tif, limit_price })
    }
}

/// Equities take day, gtc and fok; crypto only gtc (and ioc, which this service does not
/// send) — `day` is refused with "invalid crypto time_in_force"; options day, and gtc
/// since the 2026-08-28 changelog.
fn time_in_force(order: &Order) -> Result<&'static str, OrderError> {
    let d = order.duration;
    match (order.asset_class, d) {
        (_, Duration::Gtc) => Ok("gtc"),
        (AssetClass::Equity | AssetClass::Option, Duration::Day) => Ok("day"),
        (AssetClass::Equity, Duration::Fok) => Ok("fok"),
        (AssetClass::Option, Duration::Fok) => Err(common::unsupported_tif(NAME, "option", d, "DAY or GTC")),
        (AssetClass::Crypto, _) => Err(common::unsupported_tif(NAME, "crypto", d, "GTC")),
    }
}

fn side(buy: bool) -> &'static str {
    if buy {
        "buy"
    } else {
        "sell"
    }
}

/// `position_intent`, spelled out here so a rename elsewhere cannot change the wire.
fn intent(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "buy_to_open",
        LegAction::BuyToClose => "buy_to_close",
        LegAction::SellToOpen => "sell_to_open",
        LegAction::SellToClose => "sell_to_close",
    }
}

/// A one-instrument order (a share, a coin pair, or one option contract), left open for
/// the client order id.
fn single(w: &mut Writer, symbol: &str, p: &Prepared, side: &'static str, position_intent: Option<&'static str>) {
    w.raw(r#"{"symbol":"#).value(symbol).raw(r#","qty":"#).value(p.quantity).raw(r#","side":"#).value(side);
    terms(w, p);
    if let Some(i) = position_intent {
        w.raw(r#","position_intent":"#).value(i);
    }
}

/// The order's type, time in force and limit price, which a single order and a
/// multi-leg one spell alike.
fn terms(w: &mut Writer, p: &Prepared) {
    w.raw(r#","type":"#).value(p.order_type).raw(r#","time_in_force":"#).value(p.tif);
    if let Some(l) = p.limit_price {
        w.raw(r#","limit_price":"#).value(l);
    }
}

/// `order_class: mleg`: no top-level symbol or side; each leg carries its own. Left open
/// for the client order id.
fn multi_leg(w: &mut Writer, legs: &[OrderLeg], p: &Prepared) {
    w.raw(r#"{"order_class":"mleg","qty":"#).value(p.quantity);
    terms(w, p);
    w.raw(r#","legs":["#);
    for (i, l) in legs.iter().enumerate() {
        w.raw(if i == 0 { r#"{"symbol":"# } else { r#",{"symbol":"# })
            .value(l.contract.occ_unpadded())
            .raw(r#","ratio_qty":"#)
            .value(l.ratio)
            .raw(r#","side":"#)
            .value(side(l.action.is_buy()))
            .raw(r#","position_intent":"#)
            .value(intent(l.action))
            .raw("}");
    }
    w.raw("]");
}

/// Adds `client_order_id` when the order has one (Alpaca generates one otherwise), and
/// closes the body.
fn close_with_client_order_id(w: &mut Writer, order: &Order) -> Result<(), OrderError> {
    // A client order id holds no whitespace, so there is nothing to trim.
    let id = order.client_order_id.as_str();
    if id.len() > MAX_CLIENT_ORDER_ID {
        return Err(OrderError::Unfillable(format!(
            "the client order id for {} is {} characters; Alpaca takes at most {MAX_CLIENT_ORDER_ID}",
            label(order),
            id.len()
        )));
    }
    if !id.is_empty() {
        w.raw(r#","client_order_id":"#).value(id);
    }
    w.raw("}");
    Ok(())
}

#[cfg(test)]
mod writer_tests {
    use super::*;
    use crate::broker::Json;
    use crate::model::{ClientOrderId, Date, Intent, OptionContract, OptionSide};

    /// A one-instrument order as the object builder wrote it (the way it was written
    /// before the front-to-back writer): the reference the writer is held to.
    fn built_single(symbol: &str, p: &Prepared, side: &'static str, position_intent: Option<&'static str>) -> Json {
        Json::obj()
            .with("symbol", symbol)
            .with("qty", p.quantity)
            .with("side", side)
            .with("type", p.order_type)
            .with("time_in_force", p.tif)
            .with_opt("limit_price", p.limit_price)
            .with_opt("position_intent", position_intent)
    }

    fn built_multi_leg(legs: &[OrderLeg], p: &Prepared) -> Json {
        let legs = legs
            .iter()
            .map(|l| {
                Json::obj()
                    .with("symbol", l.contract.occ_unpadded())
                    .with("ratio_qty", l.ratio)
                    .with("side", side(l.action.is_buy()))
                    .with("position_intent", intent(l.action))
            })
            .collect::<Vec<_>>();
        Json::obj()
            .with("order_class", "mleg")
            .with("qty", p.quantity)
            .with("type", p.order_type)
            .with("time_in_force", p.tif)
            .with_opt("limit_price", p.limit_price)
            .with("legs", legs)
    }

    fn built_with_id(body: Json, order: &Order) -> Json {
        match order.client_order_id.trim() {
            "" => body,
            id => body.with("client_order_id", id),
        }
    }

    fn built_place(order: &Order) -> Result<String, OrderError> {
        let p = Prepared::new(order)?;
        let body = match order.asset_class {
            AssetClass::Equity => built_single(order.symbol.trim(), &p, side(order.intent.is_buy()), None),
            AssetClass::Crypto => {
                let pair = common::spot_pair(NAME, order)?;
                built_single(&Alpaca.crypto_symbol(pair), &p, side(order.intent.is_buy()), None)
            }
            AssetClass::Option => match order.legs.as_slice() {
                [leg] => {
                    built_single(&leg.contract.occ_unpadded(), &p, side(leg.action.is_buy()), Some(intent(leg.action)))
                }
                legs => built_multi_leg(legs, &p),
            },
        };
        Ok(built_with_id(body, order).into_string())
    }

    fn built_replace(order: &Order) -> Result<String, OrderError> {
        if order.asset_class == AssetClass::Crypto {
            common::spot_pair(NAME, order)?;
        }
        let p = Prepared::new(order)?;
        if order.asset_class == AssetClass::Equity && !crate::decimal::is_whole(p.quantity) {
            return Err(OrderError::BrokerRefuses { broker: NAME, reason: "fractional".into() });
        }
        let body =
            Json::obj().with("qty", p.quantity).with("time_in_force", p.tif).with_opt("limit_price", p.limit_price);
        Ok(built_with_id(body, order).into_string())
    }

    fn text(r: Result<Request, OrderError>) -> Result<String, OrderError> {
        r.map(|r| String::from_utf8(r.body.to_bytes()).unwrap_or_default())
    }

    fn leg(side: OptionSide, strike: i64, action: LegAction, ratio: u32) -> OrderLeg {
        OrderLeg {
            contract: OptionContract {
                root: "SPY".into(),
                expiration: Date::parse_iso("2024-01-19").unwrap_or_else(|| unreachable!()),
                side,
                strike: Decimal::from(strike),
            },
            action,
            ratio,
        }
    }

    /// Every shape of place and replace body is the builder's text, byte for byte, and a
    /// refused order is refused by both.
    #[test]
    fn the_writer_writes_what_the_builder_wrote() {
        use LegAction::*;
        use OptionSide::*;
        let structures = [
            vec![leg(Call, 450, BuyToOpen, 1)],
            vec![leg(Put, 450, SellToClose, 1)],
            vec![leg(Call, 450, BuyToOpen, 1), leg(Call, 460, SellToOpen, 1)],
            vec![leg(Put, 440, BuyToOpen, 2), leg(Put, 445, SellToOpen, 2), leg(Call, 455, SellToOpen, 2)],
        ];
        let ids = [ClientOrderId::NONE, ClientOrderId::new("swh-0123456789abcdef0123456789ab").unwrap_or_default()];
        let mut compared = 0;
        for intent in [Intent::OpenLong, Intent::CloseLong, Intent::OpenShort, Intent::CloseShort] {
            for duration in [Duration::Day, Duration::Gtc, Duration::Fok] {
                for (order_type, price) in [(OrderType::Market, None), (OrderType::Limit, Some("190.50"))] {
                    for quantity in ["10", "2.50", "0.000000001"] {
                        for id in ids {
                            let mut order = Order {
                                asset_class: AssetClass::Equity,
                                symbol: "AAPL".into(),
                                pair: None,
                                intent,
                                quantity: crate::decimal::parse(quantity).unwrap_or_default(),
                                order_type,
                                limit_price: price.and_then(crate::decimal::parse),
                                price_effect: None,
                                duration,
                                legs: Vec::new(),
                                client_order_id: id,
                                reference_price: None,
                            };
                            let mut check = |order: &Order| {
                                let place = (text(Alpaca.place("A", order)), built_place(order));
                                assert_eq!(place.0.as_ref().ok(), place.1.as_ref().ok(), "{order:?}");
                                assert_eq!(place.0.is_ok(), place.1.is_ok(), "{order:?}");
                                let replace = (text(Alpaca.replace("A", "o1", order, true)), built_replace(order));
                                assert_eq!(replace.0.as_ref().ok(), replace.1.as_ref().ok(), "{order:?}");
                                assert_eq!(replace.0.is_ok(), replace.1.is_ok(), "{order:?}");
                                compared += usize::from(place.0.is_ok()) + usize::from(replace.0.is_ok());
                            };
                            check(&order);
                            order.asset_class = AssetClass::Crypto;
                            order.symbol = "BTC/USD".into();
                            order.pair = crate::model::CryptoPair::parse("BTC/USD");
                            check(&order);
                            order.asset_class = AssetClass::Option;
                            order.symbol = "SPY".into();
                            order.pair = None;
                            for legs in &structures {
                                for effect in [Some(PriceEffect::Debit), Some(PriceEffect::Credit)] {
                                    order.legs = legs.clone();
                                    order.price_effect = effect;
                                    check(&order);
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(compared > 300, "{compared}");
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from Alpaca's Trading API reference (orders) and alpaca-py's error fixtures.
    const PLACED: &str = r#"{"id":"61e69015-8549-4bfd-b9c3-01e75843f47d","client_order_id":"swh-0a1b","created_at":"2024-01-19T14:30:00Z","symbol":"AAPL","qty":"10","side":"buy","type":"limit","time_in_force":"day","limit_price":"190.1","status":"accepted"}"#;
    const DUPLICATE: &str = r#"{"code":40010001,"message":"client_order_id must be unique"}"#;
    const NO_MONEY: &str = r#"{"code":40310000,"message":"insufficient buying power"}"#;
    const DOWN: &str = r#"{"code":50010000,"message":"internal server error occurred"}"#;

    fn read(kind: RequestKind, status: u16, body: &str) -> Answer {
        Alpaca.read_answer(kind, status, None, body.as_bytes())
    }

    #[test]
    fn reads_alpaca_answers() {
        let id = Some("61e69015-8549-4bfd-b9c3-01e75843f47d".to_string());
        assert_eq!(read(RequestKind::Place, 200, PLACED), Answer::Accepted { order_id: id.clone() });
        assert_eq!(read(RequestKind::Replace, 200, PLACED), Answer::Accepted { order_id: id });
        assert_eq!(read(RequestKind::Cancel, 204, ""), Answer::Accepted { order_id: None });
        assert_eq!(
            read(RequestKind::Place, 422, DUPLICATE),
            Answer::AlreadyAccepted { message: "HTTP 422: client_order_id must be unique".into() }
        );
        assert_eq!(
            read(RequestKind::Place, 403, NO_MONEY),
            Answer::Refused { message: "HTTP 403: insufficient buying power".into() }
        );
        assert!(
            matches!(read(RequestKind::Place, 500, DOWN), Answer::Uncertain { message } if message.contains("internal"))
        );
        assert!(
            matches!(read(RequestKind::Place, 502, "<html>bad gateway</html>"), Answer::Uncertain { message } if message.contains("bad gateway"))
        );
    }
}

// ----- Reading the account back -----
//
// Positions carry a signed `qty` *and* a `side` (a short is `"-15"` with `short`: the size
// is the magnitude, never negated again); crypto positions spell the pair `BTCUSD` while
// orders spell it `BTC/USD` (both read as one pair); `mleg` orders leave the top-level
// symbol and side empty and carry each leg's own. Our order is looked up directly by its
// client order id; a 404 that says "not found" means it is not there.

use super::read::{self, AccountReads, Found, Lookup};
use crate::model::{
    underlying_of, BrokerLeg, BrokerOrder, BrokerPosition, CryptoPair, Direction, Intent, OrderSide, OrderStatus,
    ReadError,
};
use serde::Deserialize;

/// Alpaca's status words ([`OrderStatus::Unknown`] for any other, `stopped` and `suspended`
/// included: their meaning is not documented).
const STATUSES: &[(&str, OrderStatus)] = &[
    ("new", OrderStatus::Working),
    ("accepted", OrderStatus::Working),
    ("pending_new", OrderStatus::Working),
    ("accepted_for_bidding", OrderStatus::Working),
    ("partially_filled", OrderStatus::Working),
    ("pending_cancel", OrderStatus::Working),
    ("pending_replace", OrderStatus::Working),
    ("held", OrderStatus::Working),
    ("pending_review", OrderStatus::Working),
    ("done_for_day", OrderStatus::Working),
    ("calculated", OrderStatus::Working),
    ("filled", OrderStatus::Filled),
    ("canceled", OrderStatus::Cancelled),
    ("expired", OrderStatus::Expired),
    ("rejected", OrderStatus::Rejected),
    ("replaced", OrderStatus::Replaced),
];

#[derive(Deserialize)]
struct WirePosition {
    #[serde(deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::text")]
    asset_class: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    qty: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    side: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    avg_entry_price: Option<Decimal>,
}

#[derive(Deserialize)]
struct WireOrder {
    #[serde(deserialize_with = "read::text")]
    id: String,
    #[serde(default, deserialize_with = "read::id_opt")]
    client_order_id: Option<String>,
    #[serde(default)]
    created_at: Option<String>,
    /// When it reached the market (`until` pages the working list by it).
    #[serde(default)]
    submitted_at: Option<String>,
    #[serde(default, deserialize_with = "read::id_opt")]
    replaced_by: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::text")]
    asset_class: String,
    /// `null` on an order sized in dollars (`notional`).
    #[serde(default, deserialize_with = "read::dec_opt")]
    qty: Option<Decimal>,
    /// The dollars an order was sized by instead of a `qty`.
    #[serde(default, deserialize_with = "read::dec_opt")]
    notional: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    filled_qty: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    order_class: String,
    #[serde(default, rename = "type", deserialize_with = "read::text")]
    order_type: String,
    #[serde(default, deserialize_with = "read::text")]
    side: String,
    #[serde(default, deserialize_with = "read::text")]
    position_intent: String,
    #[serde(default, deserialize_with = "read::text")]
    time_in_force: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    limit_price: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    status: String,
    #[serde(default, deserialize_with = "read::one_or_many")]
    legs: Vec<WireOrder>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    ratio_qty: Option<Decimal>,
}

fn asset_class_of(word: &str) -> Option<AssetClass> {
    match word {
        "us_equity" => Some(AssetClass::Equity),
        "us_option" => Some(AssetClass::Option),
        "crypto" => Some(AssetClass::Crypto),
        _ => None,
    }
}

fn leg_action_of(word: &str) -> Option<LegAction> {
    match word {
        "buy_to_open" => Some(LegAction::BuyToOpen),
        "buy_to_close" => Some(LegAction::BuyToClose),
        "sell_to_open" => Some(LegAction::SellToOpen),
        "sell_to_close" => Some(LegAction::SellToClose),
        _ => None,
    }
}

fn side_of(word: &str) -> Option<OrderSide> {
    OrderSide::from_word(word)
}

/// Alpaca's error envelope, when a read answers one instead of the data.
fn error_of(what: &'static str, body: &[u8]) -> Option<ReadError> {
    let v = answer::json(body)?;
    let message = answer::text_at(&v, &["message"])?;
    Some(ReadError::BrokerError { broker: NAME, what, message })
}

/// Alpaca's largest page of orders.
const ORDERS_PAGE: usize = 500;

/// One page of the working orders: the newest, or those submitted before `until`.
fn open_orders_page(until: Option<&str>) -> Request {
    let limit = ORDERS_PAGE.to_string();
    let mut q = vec![("status", "open"), ("limit", limit.as_str()), ("nested", "true")];
    if let Some(t) = until {
        q.push(("until", t));
    }
    read::get(format!("/v2/orders{}", read::query(&q)))
}

fn parse_list<T: serde::de::DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<Vec<T>, ReadError> {
    read::parse::<Vec<T>>(NAME, body).map_err(|e| error_of(what, body).unwrap_or(e))
}

fn position(w: WirePosition) -> Option<BrokerPosition> {
    let asset_class = asset_class_of(&w.asset_class)?;
    let qty = w.qty?;
    if qty.is_zero() {
        return None;
    }
    let direction = match w.side.as_str() {
        "long" => Direction::Long,
        "short" => Direction::Short,
        _ if qty.is_sign_negative() => Direction::Short,
        _ => Direction::Long,
    };
    let (instrument, contract, pair) = match asset_class {
        AssetClass::Option => {
            let (symbol, contract) = read::occ(&w.symbol);
            (symbol, contract, None)
        }
        // Alpaca holds coins, not pairs: a position is the coin, named against USD (`BTCUSD`) whichever pair bought
        // it (its `asset_id` is the coin's). It is held in every pair of its coin (`BrokerPosition::holds_pair`);
        // the pair it is named by says which of them a host files it under when it trades several.
        AssetClass::Crypto => match CryptoPair::parse(&w.symbol) {
            Some(p) => (p.to_string(), None, Some(p)),
            None => (w.symbol.trim().to_ascii_uppercase(), None, None),
        },
        AssetClass::Equity => (w.symbol.trim().to_ascii_uppercase(), None, None),
    };
    Some(BrokerPosition {
        instrument,
        asset_class,
        contract,
        pair,
        direction,
        quantity: qty.abs(),
        average_price: w.avg_entry_price,
    })
}

/// The orders of a list answer: each order, and beside it every order a bracket, OCO or OTO nests in its `legs`
/// (`nested=true` lists those children there only). An `mleg` order's legs are its spread's, read with it. Left
/// in the parent, a hand-placed bracket's working take-profit was missing from the state, and a CLOSE sold beside
/// it instead of cancelling it first. A child listed at the top level too is read once.
fn orders_of(wire: Vec<WireOrder>) -> Result<Vec<BrokerOrder>, ReadError> {
    let mut seen: std::collections::HashSet<String> = wire.iter().map(|w| w.id.clone()).collect();
    // Each order with whether it is a child, in the list's order with each child after its parent (a stack,
    // children pushed after their parent); the depth is bounded by `read::one_or_many`, which refuses legs nested
    // deeper than it reads. `exits`: what each child's parent makes it, for its top-level copy too.
    let mut flat = Vec::with_capacity(wire.len());
    let mut exits = std::collections::HashMap::new();
    let mut pending: Vec<(WireOrder, bool)> = wire.into_iter().rev().map(|w| (w, false)).collect();
    while let Some((mut w, child)) = pending.pop() {
        if w.order_class != "mleg" && !w.legs.is_empty() {
            let exit = child_exit(&w);
            for c in std::mem::take(&mut w.legs).into_iter().rev() {
                if let Some(e) = exit.filter(|_| !c.id.is_empty()) {
                    exits.insert(c.id.clone(), e);
                }
                pending.push((c, true));
            }
        }
        if child && !w.id.is_empty() && !seen.insert(w.id.clone()) {
            continue;
        }
        flat.push(w);
    }
    let mut out = Vec::with_capacity(flat.len());
    for w in flat {
        let given = exits.get(&w.id).copied();
        let mut o = order(w)?;
        if o.asset_class != AssetClass::Option {
            let side = |i: Intent| if i.is_buy() { OrderSide::Buy } else { OrderSide::Sell };
            o.intent = o.intent.or(given.filter(|i| o.side == Some(side(*i))));
        }
        out.push(o);
    }
    Ok(out)
}

/// What a child on the other side of its parent is: the exit of the position the parent opens (a bracket's
/// take-profit and stop sell what its buy bought). Guessed from the positions instead, the take-profit of a
/// bracket whose entry has not filled yet read as a short's entry.
fn child_exit(parent: &WireOrder) -> Option<Intent> {
    let side = side_of(&parent.side)?;
    let opens = leg_action_of(&parent.position_intent).map_or(true, LegAction::is_open);
    opens.then(|| Intent::new(false, if side == OrderSide::Buy { Direction::Long } else { Direction::Short }))
}

fn order(w: WireOrder) -> Result<BrokerOrder, ReadError> {
    let mleg = w.order_class == "mleg";
    let asset_class = if mleg {
        AssetClass::Option
    } else {
        asset_class_of(&w.asset_class)
            .or_else(|| read::occ(&w.symbol).1.map(|_| AssetClass::Option))
            .or_else(|| CryptoPair::parse(&w.symbol).map(|_| AssetClass::Crypto))
            .unwrap_or(AssetClass::Equity)
    };
    let count = w.qty.filter(|q| *q > Decimal::ZERO);
    let quantity = count.unwrap_or_default();
    let side = side_of(&w.side);
    let leg_action = leg_action_of(&w.position_intent);
    let mut pair = None;
    let mut legs = Vec::new();
    let instrument = match asset_class {
        AssetClass::Equity => w.symbol.trim().to_ascii_uppercase(),
        AssetClass::Crypto => match CryptoPair::parse(&w.symbol) {
            Some(p) => {
                let s = p.to_string();
                pair = Some(p);
                s
            }
            None => w.symbol.trim().to_ascii_uppercase(),
        },
        AssetClass::Option if mleg => {
            for l in &w.legs {
                let (symbol, contract) = read::occ(&l.symbol);
                let ratio = l.ratio_qty.map_or(1, |r| read::ratio(r, Decimal::ONE));
                // Checked: the numbers are the broker's, and an overflow would panic.
                let contracts = quantity.checked_mul(Decimal::from(ratio)).ok_or_else(|| ReadError::Unreadable {
                    broker: NAME,
                    detail: format!("order quantity {quantity} times leg ratio {ratio} is out of range"),
                })?;
                legs.push(BrokerLeg {
                    instrument: symbol,
                    contract,
                    action: leg_action_of(&l.position_intent),
                    ratio,
                    quantity: contracts,
                });
            }
            legs.iter()
                .find_map(|l| l.contract.as_ref())
                .map(|c| underlying_of(&c.root).to_ascii_uppercase())
                .unwrap_or_default()
        }
        AssetClass::Option => {
            let (symbol, contract) = read::occ(&w.symbol);
            legs.push(BrokerLeg { instrument: symbol.clone(), contract, action: leg_action, ratio: 1, quantity });
            symbol
        }
    };
    // A spread's net is signed (+debit / −credit); a single leg pays when buying.
    let (limit_price, price_effect) = match (w.limit_price, asset_class) {
        (Some(p), AssetClass::Option) if mleg => {
            (Some(p.abs()), Some(if p.is_sign_negative() { PriceEffect::Credit } else { PriceEffect::Debit }))
        }
        (Some(p), AssetClass::Option) => {
            (Some(p), side.map(|s| if s == OrderSide::Buy { PriceEffect::Debit } else { PriceEffect::Credit }))
        }
        (p, _) => (p, None),
    };
    let intent = match asset_class {
        AssetClass::Option => None,
        // buy_to_open and sell_to_close are a long's; sell_to_open and buy_to_close a short's.
        _ => leg_action.map(|a| {
            Intent::new(a.is_open(), if a.is_open() == a.is_buy() { Direction::Long } else { Direction::Short })
        }),
    };
    let order_type = match w.order_type.as_str() {
        "market" => Some(OrderType::Market),
        "limit" => Some(OrderType::Limit),
        _ => None,
    };
    let duration = match w.time_in_force.as_str() {
        "day" => Some(Duration::Day),
        "gtc" => Some(Duration::Gtc),
        "fok" => Some(Duration::Fok),
        _ => None,
    };
    let created_ms = w.created_at.as_deref().and_then(crate::model::timestamp_ms);
    let o = BrokerOrder {
        extended_session: false,
        order_id: w.id,
        client_order_id: w.client_order_id,
        instrument,
        asset_class,
        pair,
        side,
        intent,
        order_type,
        limit_price,
        price_effect,
        duration,
        quantity,
        notional: None,
        filled_quantity: w.filled_qty.unwrap_or_default(),
        status: read::status_of(&w.status, STATUSES),
        broker_status: w.status,
        legs,
        created_at: w.created_at,
        created_ms,
        replaced_by: w.replaced_by,
        reason: None,
    };
    Ok(match count {
        Some(_) => o,
        None => read::without_count(o, w.notional),
    })
}

impl AccountReads for Alpaca {
    fn positions_request(&self, _account_id: &str) -> Result<Request, OrderError> {
        Ok(read::get("/v2/positions".into()))
    }

    /// `status=open` is a bucket of every working status; `nested` rolls a spread's legs and a bracket's children
    /// into it. Alpaca has no cursor: 500 is its largest page, newest first, and a full one is
    /// followed by the page before its oldest order (see `parse_orders_page`).
    fn open_orders_request(&self, _account_id: &str, _now_ms: i64) -> Result<Request, OrderError> {
        Ok(open_orders_page(None))
    }

    /// A full page (500) is not the whole list: the next page asks for the orders submitted
    /// before the page's oldest (`until`, exclusive), as Alpaca documents paging backwards.
    /// Read as complete, the orders past it (an older take-profit a CLOSE must cancel first)
    /// were dropped from the state.
    fn parse_orders_page(
        &self,
        _request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerOrder>, Option<Request>), ReadError> {
        let wire = parse_list::<WireOrder>("orders", body)?;
        let next = if wire.len() >= ORDERS_PAGE {
            let oldest = wire
                .iter()
                .map(|w| w.submitted_at.as_deref().or(w.created_at.as_deref()))
                .map(|t| t.and_then(|t| crate::model::timestamp_ms(t).map(|ms| (ms, t.to_owned()))))
                .collect::<Option<Vec<_>>>()
                .and_then(|times| times.into_iter().min_by_key(|(ms, _)| *ms))
                .ok_or(ReadError::Incomplete { broker: NAME, what: "orders" })?;
            Some(open_orders_page(Some(&oldest.1)))
        } else {
            None
        };
        Ok((orders_of(wire)?, next))
    }

    fn order_request(&self, _account_id: &str, order_id: &str) -> Result<Request, OrderError> {
        Ok(read::get(format!("/v2/orders/{}", common::order_id(NAME, order_id)?)))
    }

    fn lookup_request(&self, _account_id: &str, client_order_id: &str, _placed_ms: i64) -> Result<Lookup, OrderError> {
        Ok(Lookup::Direct(read::get(format!(
            "/v2/orders:by_client_order_id{}",
            read::query(&[("client_order_id", client_order_id.trim())])
        ))))
    }

    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError> {
        Ok(parse_list::<WirePosition>("positions", body)?.into_iter().filter_map(position).collect())
    }

    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError> {
        orders_of(parse_list::<WireOrder>("orders", body)?)
    }

    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError> {
        order(read::parse(NAME, body).map_err(|e| error_of("order", body).unwrap_or(e))?)
    }

    /// A 404 whose message says the order is not found is a "no"; any other 404 (a wrong
    /// host or path, `endpoint not found`) cannot tell, so it never leads to a resend.
    fn find_ours(
        &self,
        kind: &Lookup,
        status: u16,
        body: &[u8],
        client_order_id: &str,
        expected: Option<&Order>,
        placed_ms: i64,
    ) -> Found {
        if status == 404 {
            // The order's own words: Alpaca answers a route it cannot serve (during an incident, a valid path too)
            // `endpoint not found` with the same code, which says nothing of the order, and read as "not there",
            // it sent an order whose answer was lost a second time.
            let said = answer::json(body).and_then(|v| answer::text_at(&v, &["message"])).unwrap_or_default();
            if said.to_ascii_lowercase().contains("order not found") {
                return Found::NotFound;
            }
        }
        read::find(self, kind, status, body, client_order_id, expected, placed_ms)
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../tests/fixtures/brokers/alpaca/", $name)).as_slice()
        };
    }

    const OUR_ID: &str = "swh-fd081c5fff155990247ba06c0638";

    /// A full page of 500 working orders was read as the whole list, and the orders past it (an older
    /// take-profit a CLOSE must cancel first) were dropped from the state. A full page is followed by the
    /// page of orders submitted before its oldest; a shorter one ends the list; a full page whose times cannot
    /// be read is incomplete, never the whole list.
    #[test]
    fn a_full_page_of_working_orders_is_followed_by_the_page_before_its_oldest() {
        let a = Alpaca;
        let first = a.open_orders_request("A1", 0).unwrap();
        let one = serde_json::from_slice::<serde_json::Value>(fixture!("orders_open.json")).unwrap()[0].clone();
        let page = |n: usize, times: bool| {
            let orders: Vec<serde_json::Value> = (0..n)
                .map(|i| {
                    let mut o = one.clone();
                    o["id"] = serde_json::json!(format!("00000000-0000-4000-8000-{i:012}"));
                    let t = format!("2026-03-03T14:{:02}:{:02}.{:06}Z", 59 - i / 60, 59 - i % 60, 500 - i % 500);
                    o["submitted_at"] = if times { serde_json::json!(t) } else { serde_json::Value::Null };
                    o["created_at"] = o["submitted_at"].clone();
                    o
                })
                .collect();
            serde_json::to_vec(&orders).unwrap()
        };
        let (orders, next) = a.parse_orders_page(&first, &page(500, true)).unwrap();
        assert_eq!(orders.len(), 500);
        let next = next.expect("a full page is not the whole list");
        assert_eq!(next.path, "/v2/orders?status=open&limit=500&nested=true&until=2026-03-03T14:51:40.000001Z");
        let (orders, last) = a.parse_orders_page(&next, &page(3, true)).unwrap();
        assert_eq!((orders.len(), last.is_none()), (3, true), "a short page ends the list");
        assert!(matches!(a.parse_orders_page(&first, &page(500, false)), Err(ReadError::Incomplete { .. })));
    }

    #[test]
    fn requests() {
        let a = Alpaca;
        let r = a.positions_request("ignored").unwrap();
        assert_eq!((r.method, r.path.as_str(), &r.body), (Method::Get, "/v2/positions", &Body::Empty));
        assert_eq!(a.open_orders_request("", 0).unwrap().path, "/v2/orders?status=open&limit=500&nested=true");
        assert_eq!(
            a.order_request("", "3e334e85-9879-4f25-ad38-27d651b7804a").unwrap().path,
            "/v2/orders/3e334e85-9879-4f25-ad38-27d651b7804a"
        );
        assert!(matches!(a.order_request("", " "), Err(OrderError::NoOrderId { .. })));
        let lookup = a.lookup_request("", OUR_ID, 0).unwrap();
        assert!(matches!(lookup, Lookup::Direct(_)));
        assert_eq!(lookup.request().path, format!("/v2/orders:by_client_order_id?client_order_id={OUR_ID}"));
        let lookup = a.lookup_request("", "a b&c", 0).unwrap();
        assert_eq!(
            lookup.request().path,
            "/v2/orders:by_client_order_id?client_order_id=a%20b%26c",
            "the id cannot add a parameter"
        );
    }

    #[test]
    fn an_mleg_order_whose_leg_quantity_is_out_of_range_is_unreadable_not_a_panic() {
        // The fixture's mleg order (legs of ratio 1 and more), at the largest quantity a Decimal holds.
        let mut open: Vec<serde_json::Value> = serde_json::from_slice(fixture!("orders_open.json")).unwrap();
        let mut mleg = open.remove(1);
        assert_eq!(mleg["order_class"], "mleg");
        mleg["qty"] = "79228162514264337593543950335".into();
        for l in mleg["legs"].as_array_mut().unwrap() {
            l["ratio_qty"] = "2".into();
        }
        let body = serde_json::to_vec(&[mleg]).unwrap();
        let e = Alpaca.parse_orders(&body).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    #[test]
    fn positions_short_sign_and_crypto_spelling() {
        let p = Alpaca.parse_positions(fixture!("positions.json")).unwrap();
        let rows: Vec<_> =
            p.iter().map(|p| (p.instrument.as_str(), p.asset_class, p.direction, p.quantity.to_string())).collect();
        assert_eq!(
            rows,
            [
                ("AAPL", AssetClass::Equity, Direction::Long, "10".to_string()),
                // "-15" with side short: a short of 15, not negated twice into a long.
                ("TSLA", AssetClass::Equity, Direction::Short, "15".to_string()),
                ("SPY260320C00580000", AssetClass::Option, Direction::Long, "2".to_string()),
                ("SPY260320C00590000", AssetClass::Option, Direction::Short, "2".to_string()),
                ("BTC/USD", AssetClass::Crypto, Direction::Long, "0.052341".to_string()),
            ]
        );
        assert_eq!(p[0].average_price.unwrap().to_string(), "190.12");
        assert_eq!(p[2].contract.as_ref().unwrap().strike, Decimal::from(580));
        // `BTCUSD` in positions is the coin, named against USD and held whichever pair bought it.
        assert_eq!(p[4].pair, Some(CryptoPair { base: "BTC".into(), quote: "USD".into() }), "BTCUSD in positions");
        for quote in ["USD", "USDT", "USDC"] {
            assert!(p[4].holds_pair(&CryptoPair { base: "BTC".into(), quote: quote.into() }), "BTC/{quote}");
        }
        assert!(!p[4].holds_pair(&CryptoPair { base: "ETH".into(), quote: "USD".into() }));
    }

    #[test]
    fn open_orders() {
        let o = Alpaca.parse_orders(fixture!("orders_open.json")).unwrap();
        assert_eq!(o.len(), 5);
        assert!(o.iter().all(|o| o.status == OrderStatus::Working), "new, accepted, pending_cancel, partially_filled");

        let entry = &o[0];
        assert_eq!(entry.order_id, "3e334e85-9879-4f25-ad38-27d651b7804a");
        assert_eq!(entry.client_order_id.as_deref(), Some(OUR_ID));
        assert_eq!((entry.instrument.as_str(), entry.asset_class), ("AAPL", AssetClass::Equity));
        assert_eq!((entry.side, entry.intent), (Some(OrderSide::Buy), Some(Intent::OpenLong)));
        assert_eq!((entry.order_type, entry.duration), (Some(OrderType::Limit), Some(Duration::Day)));
        assert_eq!(entry.limit_price.unwrap().to_string(), "185");
        assert_eq!((entry.quantity.to_string(), entry.filled_quantity.to_string()), ("10".into(), "0".into()));
        assert_eq!(entry.created_at.as_deref(), Some("2026-03-03T14:31:05.118204Z"));
        assert_eq!(entry.created_ms, crate::model::timestamp_ms("2026-03-03T14:31:05.118Z"));
        assert!(entry.legs.is_empty());

        // mleg: empty top-level symbol and side; the legs carry them.
        let spread = &o[1];
        assert_eq!((spread.instrument.as_str(), spread.asset_class, spread.side), ("SPY", AssetClass::Option, None));
        assert_eq!(spread.broker_status, "accepted");
        assert_eq!(
            (spread.limit_price.unwrap().to_string(), spread.price_effect),
            ("2.35".into(), Some(PriceEffect::Debit))
        );
        let legs: Vec<_> = spread.legs.iter().map(|l| (l.instrument.as_str(), l.action, l.ratio)).collect();
        assert_eq!(
            legs,
            [
                ("SPY260320C00580000", Some(LegAction::BuyToOpen), 1),
                ("SPY260320C00590000", Some(LegAction::SellToOpen), 1)
            ]
        );

        assert_eq!(
            (o[2].side, o[2].intent, o[2].broker_status.as_str()),
            (Some(OrderSide::Sell), None, "pending_cancel")
        );
        let exit = &o[3];
        assert_eq!((exit.intent, exit.duration), (Some(Intent::CloseShort), Some(Duration::Gtc)));
        assert_eq!((exit.quantity.to_string(), exit.filled_quantity.to_string()), ("25".into(), "10".into()));
        // BTC/USD in orders, BTCUSD in positions: one pair.
        let crypto = &o[4];
        assert_eq!((crypto.instrument.as_str(), crypto.asset_class), ("BTC/USD", AssetClass::Crypto));
        assert_eq!(crypto.pair, Some(CryptoPair { base: "BTC".into(), quote: "USD".into() }));
        assert_eq!(crypto.quantity.to_string(), "0.02");
    }

    /// A bracket placed by hand whose entry has not filled: its take-profit and stop (`held`, in the parent's
    /// `legs` only) are read beside it, as the exits of the long the buy opens (not, guessed from the positions,
    /// as a short's entry); the stop's type is none this library sends. A child listed at the top level too is
    /// read once; an `mleg` order's legs stay its spread's.
    #[test]
    fn a_brackets_children_are_orders_of_their_own_and_exits_of_its_entry() {
        let child = |id: &str, kind: &str, price: Option<&str>| {
            serde_json::json!({"id": id, "client_order_id": format!("{id}-c"), "symbol": "AAPL",
                "asset_class": "us_equity", "qty": "10", "filled_qty": "0", "order_class": "bracket", "type": kind,
                "side": "sell", "time_in_force": "gtc", "limit_price": price, "status": "held", "legs": null})
        };
        let parent = serde_json::json!({"id": "p1", "client_order_id": "hand-1", "symbol": "AAPL",
            "asset_class": "us_equity", "qty": "10", "filled_qty": "0", "order_class": "bracket", "type": "limit",
            "side": "buy", "time_in_force": "gtc", "limit_price": "190", "status": "new",
            "legs": [child("tp1", "limit", Some("200")), child("sl1", "stop", None)]});
        let body =
            serde_json::to_vec(&serde_json::json!([parent.clone(), child("tp1", "limit", Some("200"))])).unwrap();
        let o = Alpaca.parse_orders(&body).unwrap();
        let read: Vec<_> = o.iter().map(|o| (o.order_id.as_str(), o.order_type, o.intent, o.status)).collect();
        assert_eq!(
            read,
            [
                ("p1", Some(OrderType::Limit), None, OrderStatus::Working),
                ("sl1", None, Some(Intent::CloseLong), OrderStatus::Working),
                // Its top-level copy, where the list has it.
                ("tp1", Some(OrderType::Limit), Some(Intent::CloseLong), OrderStatus::Working),
            ]
        );
        assert_eq!((o[2].limit_price.unwrap().to_string(), o[2].quantity.to_string()), ("200".into(), "10".into()));
        assert_eq!(o[2].client_order_id.as_deref(), Some("tp1-c"));
        let nested_only = Alpaca.parse_orders(&serde_json::to_vec(&serde_json::json!([parent])).unwrap()).unwrap();
        assert_eq!(nested_only.iter().map(|o| o.order_id.as_str()).collect::<Vec<_>>(), ["p1", "tp1", "sl1"]);
        // Looked up by its own client order id, Alpaca answers the child itself.
        let lookup = Alpaca.lookup_request("", "tp1-c", 0).unwrap();
        let one = serde_json::to_vec(&child("tp1", "limit", Some("200"))).unwrap();
        assert!(
            matches!(Alpaca.find_ours(&lookup, 200, &one, "tp1-c", None, 0), Found::Found(o) if o.order_id == "tp1")
        );
        // An OCO's parent is an exit itself: its child on the same side gets no intent from it.
        let mut oco = serde_json::json!([child("o1", "limit", Some("200"))]);
        oco[0]["order_class"] = "oco".into();
        oco[0]["status"] = "new".into();
        oco[0]["legs"] = serde_json::json!([child("o2", "stop", None)]);
        let o = Alpaca.parse_orders(&serde_json::to_vec(&oco).unwrap()).unwrap();
        assert_eq!(o.iter().map(|o| (o.order_id.as_str(), o.intent)).collect::<Vec<_>>(), [("o1", None), ("o2", None)]);
        // The spread in the fixture keeps its legs and is one order.
        let fixture = Alpaca.parse_orders(fixture!("orders_open.json")).unwrap();
        assert_eq!(fixture.len(), 5);
        assert_eq!(fixture[1].legs.len(), 2);
    }

    #[test]
    fn one_order_in_every_final_state() {
        let read = |body: &[u8]| Alpaca.parse_order(body).unwrap();
        let open = read(fixture!("order_by_id.json"));
        assert_eq!((open.status, open.broker_status.as_str()), (OrderStatus::Working, "new"));
        let filled = read(fixture!("order_filled.json"));
        assert_eq!((filled.status, filled.filled_quantity.to_string()), (OrderStatus::Filled, "10".into()));
        let cancelled = read(fixture!("order_cancelled.json"));
        assert_eq!(
            (cancelled.status, cancelled.filled_quantity.to_string()),
            (OrderStatus::Cancelled, "10".into()),
            "the filled part of a cancelled order is a position"
        );
        let rejected = read(fixture!("order_rejected.json"));
        assert_eq!((rejected.status, rejected.intent), (OrderStatus::Rejected, Some(Intent::OpenShort)));
        let expired = read(fixture!("order_expired.json"));
        assert_eq!((expired.status, expired.limit_price.unwrap().to_string()), (OrderStatus::Expired, "180".into()));
        let replaced = read(fixture!("order_replaced.json"));
        assert_eq!(replaced.status, OrderStatus::Replaced);
        assert_eq!(replaced.replaced_by.as_deref(), Some("cb8232dd-ad50-4cab-996b-20a2c9366463"));
        for o in [filled, cancelled, rejected, expired, replaced] {
            assert!(o.status.is_final(), "{}", o.broker_status);
        }
        let unknown = read(br#"{"id":"x","status":"suspended","qty":"1","symbol":"AAPL","asset_class":"us_equity"}"#);
        assert_eq!(unknown.status, OrderStatus::Unknown);
        assert!(!unknown.status.is_final());
    }

    #[test]
    fn finding_ours_by_client_order_id() {
        let lookup = Alpaca.lookup_request("", OUR_ID, 0).unwrap();
        let find = |status, body: &[u8]| Alpaca.find_ours(&lookup, status, body, OUR_ID, None, 0);
        match find(200, fixture!("order_by_client_id.json")) {
            Found::Found(o) => assert_eq!(o.order_id, "3e334e85-9879-4f25-ad38-27d651b7804a"),
            other => panic!("{other:?}"),
        }
        match find(200, fixture!("order_replaced.json")) {
            Found::Found(o) => assert_eq!(o.replaced_by.as_deref(), Some("cb8232dd-ad50-4cab-996b-20a2c9366463")),
            other => panic!("{other:?}"),
        }
        assert_eq!(find(404, fixture!("order_by_client_id_not_found.json")), Found::NotFound);
        assert!(matches!(find(404, b"<html>Not Found</html>"), Found::Unreadable(_)), "a wrong host is no answer");
        // Alpaca's answer to a route it cannot serve, seen on valid paths during an incident (alpacahq/Alpaca-API
        // issue 137): the same code as an order not found, and nothing about the order. Read as "not there", a
        // send whose answer was lost went out a second time.
        let route = br#"{"code":40410000,"message":"endpoint not found"}"#;
        assert!(matches!(find(404, route), Found::Unreadable(_)), "a route 404 read as not there");
        assert!(matches!(find(401, fixture!("auth_error.json")), Found::Unreadable(m) if m.contains("401")));
        assert!(matches!(find(200, fixture!("order_rejected.json")), Found::Unreadable(m) if m.contains("swh-cb37")));
    }

    #[test]
    fn errors_instead_of_data() {
        assert_eq!(
            Alpaca.parse_positions(fixture!("auth_forbidden.json")),
            Err(ReadError::BrokerError { broker: "Alpaca", what: "positions", message: "forbidden.".into() })
        );
        assert!(matches!(Alpaca.parse_orders(b"[{\"id\":1}]"), Err(ReadError::Unreadable { broker: "Alpaca", .. })));
        assert!(Alpaca.parse_order(b"").is_err());
    }

    #[test]
    fn write_answers_from_the_fixtures() {
        let read = |status, body: &[u8]| Alpaca.read_answer(RequestKind::Place, status, None, body);
        assert_eq!(
            read(200, fixture!("place_accepted.json")),
            Answer::Accepted { order_id: Some("3e334e85-9879-4f25-ad38-27d651b7804a".into()) }
        );
        assert!(matches!(read(422, fixture!("place_duplicate_client_id.json")), Answer::AlreadyAccepted { .. }));
        assert!(matches!(read(403, fixture!("place_refused.json")), Answer::Refused { .. }));
        assert!(
            matches!(read(401, fixture!("auth_error.json")), Answer::Refused { message } if message.contains("unauthorized"))
        );
    }

    /// An order a trader placed in dollars (`notional`, `qty: null`), waiting outside market hours in `accepted`,
    /// was read as a working order of 0 shares: the sync filed it so, the strategy refused the state (a working
    /// order of zero), and a MODIFY of it was sized from 0. It is read as what it is: $500 of AAPL, how many shares
    /// not known until it fills, its status unknown while it works.
    #[test]
    fn an_order_sized_in_dollars_is_read_by_its_amount_never_as_zero_shares() {
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        let one = |status: &str, filled: &str| {
            format!(
                r#"{{"id":"n1","client_order_id":"hand-1","created_at":"2026-03-03T23:00:00Z",
                "submitted_at":"2026-03-03T23:00:00Z","symbol":"AAPL","asset_class":"us_equity","qty":null,
                "notional":"500","filled_qty":"{filled}","order_class":"","type":"market","side":"buy",
                "time_in_force":"day","status":"{status}","legs":null}}"#
            )
        };
        let orders = Alpaca.parse_orders(format!("[{}]", one("accepted", "0")).as_bytes()).unwrap();
        let o = &orders[0];
        assert_eq!((o.status, o.broker_status.as_str()), (OrderStatus::Unknown, "accepted"));
        assert_eq!((o.quantity, o.notional), (Decimal::ZERO, Some(d("500"))));
        assert_eq!(
            (o.order_type, o.side, o.instrument.as_str()),
            (Some(OrderType::Market), Some(OrderSide::Buy), "AAPL")
        );
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("500") && reason.contains("not known until it fills"), "{reason}");
        // Part filled, still unknown: what filled is no count of the whole.
        let part = Alpaca.parse_order(one("partially_filled", "1.2").as_bytes()).unwrap();
        assert_eq!((part.status, part.quantity, part.filled_quantity), (OrderStatus::Unknown, Decimal::ZERO, d("1.2")));
        // Filled, its count is what filled.
        let filled = Alpaca.parse_order(one("filled", "2.631578947").as_bytes()).unwrap();
        assert_eq!(
            (filled.status, filled.quantity, filled.notional),
            (OrderStatus::Filled, d("2.631578947"), Some(d("500")))
        );
        // Looked up by its client order id, it is found as what it is, not as 0 filled of 0.
        let lookup = Alpaca.lookup_request("A1", "hand-1", 0).unwrap();
        match Alpaca.find_ours(&lookup, 200, one("accepted", "0").as_bytes(), "hand-1", None, 0) {
            crate::broker::Found::Found(o) => {
                assert_eq!((o.status, o.quantity, o.notional), (OrderStatus::Unknown, Decimal::ZERO, Some(d("500"))))
            }
            other => panic!("{other:?}"),
        }
        // A count, as every order this library sends has, is read as before, with no amount.
        let ours = Alpaca.parse_orders(fixture!("orders_open.json")).unwrap();
        assert!(ours.iter().all(|o| o.notional.is_none() && o.quantity > Decimal::ZERO));
    }
}
