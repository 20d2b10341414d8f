//! Alpaca Trading API v2: JSON bodies at `/v2/orders`.
//!
//! Alpaca has only `buy`/`sell` and infers long or short from the position, so opening a
//! short is a `sell` and covering it a `buy`. Numbers go out as JSON numbers with their
//! exact digits (alpaca-py sends numbers; the docs' examples send strings; both are
//! accepted). The account is chosen by the API keys, so paths carry no account id.
//! A replace (`PATCH`) is cancel-and-replace: the replacement gets a new order id.

use super::answer::{self, Answer};
use super::common::{self, label};
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::decimal::Decimal;
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
        let body = match order.asset_class {
            AssetClass::Equity => single(order.symbol.trim(), &p, side(order.intent.is_buy()), None),
            AssetClass::Crypto => {
                let pair = common::spot_pair(NAME, order)?;
                single(&self.crypto_symbol(pair), &p, side(order.intent.is_buy()), None)
            }
            AssetClass::Option => match order.legs.as_slice() {
                [leg] => single(&leg.contract.occ_unpadded(), &p, side(leg.action.is_buy()), Some(intent(leg.action))),
                legs => multi_leg(legs, &p),
            },
        };
        let body = with_client_order_id(body, order)?;
        Ok(Request {
            method: Method::Post,
            path: "/v2/orders".into(),
            content_type: Some(JSON),
            body: Body::Json(body),
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
        let body =
            Json::obj().with("qty", p.quantity).with("time_in_force", p.tif).with_opt("limit_price", p.limit_price);
        let body = with_client_order_id(body, order)?;
        Ok(Request {
            method: Method::Patch,
            path: format!("/v2/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(body),
        })
    }

    fn cancel(&self, _account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let id = common::order_id(NAME, order_id)?;
        Ok(Request { method: Method::Delete, path: format!("/v2/orders/{id}"), content_type: None, body: Body::Empty })
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
                if !quantity.fract().is_zero()
                    && (order.order_type != OrderType::Market || order.duration != Duration::Day)
                {
                    return Err(OrderError::BrokerRefuses { broker: NAME, reason: format!(
                        "Alpaca takes fractional share quantities ({quantity} {}) only as market orders good for the day",
                        order.symbol.trim()
                    ) });
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

/// A one-instrument order: a share, a coin pair, or one option contract.
fn single(symbol: &str, p: &Prepared, side: &'static str, position_intent: Option<&'static str>) -> Json {
    Json::obj()
        .with("symbol", symbol.to_string())
        .with("qty", p.quantity)
        .with("side", side)
        .with("type", p.order_type)
        .with("time_in_force", p.tif)
        .with_opt("limit_price", p.limit_price)
        .with_opt("position_intent", position_intent)
}

/// `order_class: mleg`: no top-level symbol or side; each leg carries its own.
fn multi_leg(legs: &[OrderLeg], p: &Prepared) -> Json {
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

/// Adds `client_order_id` when the order has one (Alpaca generates one otherwise).
fn with_client_order_id(body: Json, order: &Order) -> Result<Json, OrderError> {
    let id = order.client_order_id.trim();
    if id.is_empty() {
        return Ok(body);
    }
    if id.len() > MAX_CLIENT_ORDER_ID {
        return Err(OrderError::Unfillable(format!(
            "the client order id for {} is {} characters; Alpaca takes at most {MAX_CLIENT_ORDER_ID}",
            label(order),
            id.len()
        )));
    }
    Ok(body.with("client_order_id", id.to_string()))
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
