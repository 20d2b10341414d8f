//! Coinbase Advanced Trade: JSON bodies at `/api/v3/brokerage/orders`, spot crypto only.
//!
//! The product is the dash-separated pair (`BTC-USD`), the side BUY or SELL, and the
//! order kind and time in force are one `order_configuration` key. Every amount is a
//! string with its exact digits, as Coinbase documents. The account is chosen by the API
//! key, so paths carry no account id.
//!
//! Time in force:
//! - market orders are always immediate-or-cancel on spot (`market_market_ioc`); a market
//!   order good for the day or until cancelled is sent that way, since a market order
//!   fills at once in a market that never closes. Market fill-or-kill exists on
//!   perpetuals only and is refused rather than turned into IOC, which could part-fill.
//! - limit orders: GTC → `limit_limit_gtc` (not post-only), FOK → `limit_limit_fok`.
//!   Coinbase has no DAY, so a limit DAY order is refused rather than left to rest.
//!
//! An edit keeps the order id and is possible for GTC limit orders only.

use super::answer::{self, Answer};
use super::common;
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::model::RequestKind;
use crate::model::{AssetClass, CryptoPair, Duration, Order, OrderError, OrderType};

/// A `success: false` answer's reason: the error response's message (with its code), an
/// edit's failure reason, or a cancel's.
fn refusal(v: &serde_json::Value) -> String {
    let e = &v["error_response"];
    if let Some(m) = answer::text_at(e, &["message"]) {
        return match answer::text_at(e, &["error"]) {
            Some(code) => format!("{m} ({code})"),
            None => m,
        };
    }
    let reasons = [
        answer::text_at(e, &["error"]),
        answer::text_at(e, &["new_order_failure_reason"]),
        answer::text_at(e, &["preview_failure_reason"]),
        answer::text_at(&v["errors"][0], &["edit_failure_reason"]),
        answer::text_at(&v["errors"][0], &["preview_failure_reason"]),
        answer::text_at(v, &["failure_reason"]),
    ];
    reasons.into_iter().flatten().next().unwrap_or_else(|| "the broker refused the request".into())
}

/// Coinbase's formatter.
pub struct Coinbase;

const NAME: &str = "Coinbase";

impl Broker for Coinbase {
    fn name(&self) -> &'static str {
        "coinbase"
    }

    fn offers(&self, asset_class: AssetClass) -> bool {
        asset_class == AssetClass::Crypto
    }

    fn crypto_symbol(&self, pair: &CryptoPair) -> String {
        format!("{}-{}", pair.base, pair.quote)
    }

    /// `orders/edit` changes the order in place.
    fn replace_keeps_id(&self) -> bool {
        true
    }

    /// Coinbase requires a `client_order_id` on every order.
    fn accepts_client_order_id(&self) -> bool {
        true
    }

    fn place(&self, _account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let pair = crypto(order)?;
        let size = size(order)?;
        let id = order.client_order_id.trim();
        if id.is_empty() {
            return Err(OrderError::Unfillable(format!(
                "the order for {pair} has no client order id, which Coinbase requires on every order"
            )));
        }
        let configuration = match (order.order_type, order.duration, common::limit_price(NAME, order)?) {
            (OrderType::Market, Duration::Day | Duration::Gtc, _) => {
                Json::obj().with("market_market_ioc", Json::obj().with("base_size", size))
            }
            (OrderType::Market, Duration::Fok, _) => {
                return Err(OrderError::BrokerRefuses {
                    broker: NAME,
                    reason:
                        "Coinbase offers fill-or-kill market orders on perpetual futures only; a spot market order is \
                     immediate-or-cancel, so send it as DAY or GTC, or use a FOK limit order"
                            .into(),
                })
            }
            (OrderType::Limit, Duration::Gtc, Some(p)) => Json::obj().with(
                "limit_limit_gtc",
                Json::obj().with("base_size", size).with("limit_price", common::digits(p)).with("post_only", false),
            ),
            (OrderType::Limit, Duration::Fok, Some(p)) => Json::obj()
                .with("limit_limit_fok", Json::obj().with("base_size", size).with("limit_price", common::digits(p))),
            (OrderType::Limit, Duration::Day, _) => {
                return Err(OrderError::BrokerRefuses {
                    broker: NAME,
                    reason:
                        "Coinbase has no DAY time in force for limit orders (it takes GTC or FOK); set the time in \
                     force to GTC"
                            .into(),
                })
            }
            // limit_price() never gives None for a limit order; kept total without a panic.
            (OrderType::Limit, _, None) => {
                return Err(OrderError::Unfillable(format!("the limit order for {pair} has no limit price")))
            }
        };
        let body = Json::obj()
            .with("client_order_id", id.to_string())
            .with("product_id", self.crypto_symbol(pair))
            .with("side", if order.intent.is_buy() { "BUY" } else { "SELL" })
            .with("order_configuration", configuration);
        Ok(Request {
            method: Method::Post,
            path: "/api/v3/brokerage/orders".into(),
            content_type: Some(JSON),
            body: Body::Json(body),
        })
    }

    /// `orders/edit` with the new price and size; Coinbase edits GTC limit orders only.
    fn replace(
        &self,
        _account_id: &str,
        order_id: &str,
        order: &Order,
        _quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        let pair = crypto(order)?;
        let id = order_id.trim();
        if id.is_empty() {
            return Err(OrderError::Unfillable("the working order has no Coinbase order id to edit".into()));
        }
        if order.order_type != OrderType::Limit || order.duration != Duration::Gtc {
            return Err(OrderError::BrokerRefuses {
                broker: NAME,
                reason: format!(
                    "Coinbase can edit only good-till-cancelled limit orders; the {pair} order is a {} {} order, so \
                 cancel it and send a new entry",
                    order.order_type.as_str(),
                    order.duration.as_str().to_ascii_uppercase()
                ),
            });
        }
        let size = size(order)?;
        let price = common::limit_price(NAME, order)?
            .ok_or_else(|| OrderError::Unfillable(format!("the limit order for {pair} has no limit price")))?;
        let body = Json::obj().with("order_id", id.to_string()).with("price", common::digits(price)).with("size", size);
        Ok(Request {
            method: Method::Post,
            path: "/api/v3/brokerage/orders/edit".into(),
            content_type: Some(JSON),
            body: Body::Json(body),
        })
    }

    fn cancel(&self, _account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let id = order_id.trim();
        if id.is_empty() {
            return Err(OrderError::Unfillable("the working order has no Coinbase order id to cancel".into()));
        }
        Ok(Request {
            method: Method::Post,
            path: "/api/v3/brokerage/orders/batch_cancel".into(),
            content_type: Some(JSON),
            body: Body::Json(Json::obj().with("order_ids", vec![Json::from(id.to_string())])),
        })
    }

    /// Coinbase answers every request 200 with a success flag: a place
    /// `{"success":…,"success_response":{"order_id"}|"error_response":{…}}`, an edit
    /// `{"success":…,"errors":[…]}`, a cancel `{"results":[{"success","failure_reason"}]}`.
    /// A `success: false` is a refusal whatever the status.
    fn read_answer(&self, kind: RequestKind, status: u16, _location: Option<&str>, body: &[u8]) -> Answer {
        if !answer::success(status) {
            return answer::failed(status, body, |v| {
                answer::text_at(v, &["message"]).or_else(|| answer::text_at(v, &["error"]))
            });
        }
        let Some(v) = answer::json(body) else {
            return Answer::Uncertain {
                message: format!("HTTP {status}: unreadable answer: {}", answer::quoted(body)),
            };
        };
        let result = if kind == RequestKind::Cancel { &v["results"][0] } else { &v };
        match result["success"].as_bool() {
            Some(true) => Answer::Accepted {
                order_id: answer::id_at(result, &["success_response", "order_id"])
                    .or_else(|| answer::id_at(result, &["order_id"])),
            },
            Some(false) => Answer::Refused { message: format!("HTTP {status}: {}", refusal(result)) },
            None => Answer::Uncertain {
                message: format!("HTTP {status}: the answer has no success flag: {}", answer::quoted(body)),
            },
        }
    }
}

/// The spot pair, refusing anything but crypto (the trait's callers check `offers`, but a
/// direct call must not format an equity as a product) and refusing shorts.
fn crypto(order: &Order) -> Result<&CryptoPair, OrderError> {
    if order.asset_class != AssetClass::Crypto {
        return Err(OrderError::BrokerDoesNotOffer { broker: NAME, asset_class: order.asset_class });
    }
    common::spot_pair(NAME, order)
}

/// `base_size`: the coin quantity as a string with its exact digits.
fn size(order: &Order) -> Result<String, OrderError> {
    let q = common::quantity(NAME, order, false, Coinbase.crypto_quantity_scale())?;
    Ok(common::digits(q))
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from coinbase-advanced-py's `CreateOrderResponse` / `CreateOrderError`,
    // `EditOrderResponse` and `CancelOrdersResponse`, and the Advanced Trade API reference.
    const PLACED: &str = r#"{"success":true,"success_response":{"order_id":"11111-00000-000000","product_id":"BTC-USD","side":"BUY","client_order_id":"swh-0a1b"},"order_configuration":{"limit_limit_gtc":{"base_size":"0.001","limit_price":"42000.00"}}}"#;
    const NO_FUNDS: &str = r#"{"success":false,"failure_reason":"UNKNOWN_FAILURE_REASON","order_id":"","error_response":{"error":"INSUFFICIENT_FUND","message":"Insufficient balance in source account","error_details":"","preview_failure_reason":"PREVIEW_INSUFFICIENT_FUND"}}"#;
    const EDITED: &str = r#"{"success":true,"errors":[]}"#;
    const NOT_EDITED: &str = r#"{"success":false,"errors":[{"edit_failure_reason":"ORDER_NOT_FOUND","preview_failure_reason":"UNKNOWN_PREVIEW_FAILURE_REASON"}]}"#;
    const CANCELLED: &str = r#"{"results":[{"success":true,"failure_reason":"UNKNOWN_CANCEL_FAILURE_REASON","order_id":"11111-00000-000000"}]}"#;
    const NOT_CANCELLED: &str =
        r#"{"results":[{"success":false,"failure_reason":"UNKNOWN_CANCEL_ORDER","order_id":"11111-00000-000000"}]}"#;
    const BAD_REQUEST: &str = r#"{"error":"INVALID_ARGUMENT","error_details":"","message":"Invalid product_id"}"#;

    fn read(kind: RequestKind, status: u16, body: &str) -> Answer {
        Coinbase.read_answer(kind, status, None, body.as_bytes())
    }

    #[test]
    fn reads_coinbase_answers() {
        let id = Some("11111-00000-000000".to_string());
        assert_eq!(read(RequestKind::Place, 200, PLACED), Answer::Accepted { order_id: id.clone() });
        assert_eq!(
            read(RequestKind::Place, 200, NO_FUNDS),
            Answer::Refused { message: "HTTP 200: Insufficient balance in source account (INSUFFICIENT_FUND)".into() }
        );
        assert_eq!(read(RequestKind::Replace, 200, EDITED), Answer::Accepted { order_id: None });
        assert_eq!(
            read(RequestKind::Replace, 200, NOT_EDITED),
            Answer::Refused { message: "HTTP 200: ORDER_NOT_FOUND".into() }
        );
        assert_eq!(read(RequestKind::Cancel, 200, CANCELLED), Answer::Accepted { order_id: id });
        assert_eq!(
            read(RequestKind::Cancel, 200, NOT_CANCELLED),
            Answer::Refused { message: "HTTP 200: UNKNOWN_CANCEL_ORDER".into() }
        );
        assert_eq!(
            read(RequestKind::Place, 400, BAD_REQUEST),
            Answer::Refused { message: "HTTP 400: Invalid product_id".into() }
        );
        assert!(matches!(read(RequestKind::Place, 500, ""), Answer::Uncertain { .. }));
        assert!(matches!(read(RequestKind::Place, 200, "not json"), Answer::Uncertain { .. }));
    }
}
