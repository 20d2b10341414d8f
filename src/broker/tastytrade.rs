//! Tastytrade: dasherized JSON bodies at `/accounts/{account_number}/orders`.
//!
//! Every order is a list of legs, each with its own `action` ("Buy to Open", "Sell to
//! Close", …), so equities say open/close and long/short through the action. A limit
//! order carries a positive `price` string and a `price-effect`: Debit when the trader
//! pays, Credit when they receive (a negative price is refused by the API). Options use
//! padded OSI symbols; crypto the `BTC/USD` spelling. Durations are Day and GTC here
//! (tastytrade has no fill-or-kill). A replace (`PUT`, no legs) creates a new order.
//!
//! `external-identifier` carries the client order id: tastytrade echoes it back on the
//! order, so a host can recognise an order it already sent, but it does not refuse a
//! repeat, which is why [`Broker::accepts_client_order_id`] stays false.

use super::answer::{self, Answer};
use super::common;
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::decimal::Decimal;
use crate::model::RequestKind;
use crate::model::{AssetClass, Duration, Intent, LegAction, Order, OrderError, OrderType, PriceEffect};

/// Tastytrade's formatter.
pub struct Tastytrade;

const NAME: &str = "Tastytrade";

impl Broker for Tastytrade {
    fn name(&self) -> &'static str {
        "tastytrade"
    }

    fn offers(&self, _asset_class: AssetClass) -> bool {
        true
    }

    fn replace_keeps_id(&self) -> bool {
        false
    }

    /// Tastytrade's replace takes the order without its legs, where the quantity lives.
    fn replace_changes_quantity(&self) -> bool {
        false
    }

    /// The id goes out as `external-identifier`, but tastytrade does not deduplicate on it.
    fn accepts_client_order_id(&self) -> bool {
        false
    }

    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let terms = Terms::new(order)?;
        let legs = legs(order, terms.quantity)?;
        let body = terms.json(order).with("legs", legs);
        Ok(Request {
            method: Method::Post,
            path: format!("/accounts/{account}/orders"),
            content_type: Some(JSON),
            body: Body::Json(body),
        })
    }

    /// The replacement takes the order's terms without its legs (legs cannot change), so
    /// a new quantity cannot be expressed: that is refused rather than silently kept.
    fn replace(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        if quantity_changed {
            return Err(OrderError::BrokerRefuses {
                broker: NAME,
                reason:
                    "Tastytrade replaces only an order's price and time in force, not its quantity; cancel it and send \
                 a new entry"
                        .into(),
            });
        }
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        let terms = Terms::new(order)?;
        // The legs are not sent, but are checked so a replace is refused where a place would be.
        legs(order, terms.quantity)?;
        Ok(Request {
            method: Method::Put,
            path: format!("/accounts/{account}/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(terms.json(order)),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: format!("/accounts/{account}/orders/{id}"),
            content_type: None,
            body: Body::Empty,
        })
    }

    /// Tastytrade wraps answers in `data`: a placed order at `data.order.id`, a replaced or
    /// cancelled one at `data.id`. Errors are `{"error":{"code","message","errors":[…]}}`.
    fn read_answer(&self, _kind: RequestKind, status: u16, _location: Option<&str>, body: &[u8]) -> Answer {
        if answer::success(status) {
            let v = answer::json(body);
            let order_id = v
                .as_ref()
                .and_then(|v| answer::id_at(v, &["data", "order", "id"]).or_else(|| answer::id_at(v, &["data", "id"])));
            return Answer::Accepted { order_id };
        }
        answer::failed(status, body, |v| {
            let message = answer::text_at(v, &["error", "message"]);
            let details: Vec<String> = v["error"]["errors"]
                .as_array()
                .map(|a| a.iter().filter_map(|e| e["message"].as_str().map(str::to_owned)).collect())
                .unwrap_or_default();
            match (message, details.is_empty()) {
                (Some(m), false) => Some(format!("{m}: {}", details.join("; "))),
                (Some(m), true) => Some(m),
                (None, false) => Some(details.join("; ")),
                (None, true) => None,
            }
        })
    }
}

/// The order-level attributes shared by place and replace.
struct Terms {
    quantity: Decimal,
    tif: &'static str,
    order_type: &'static str,
    price: Option<(Decimal, PriceEffect)>,
}

impl Terms {
    fn new(order: &Order) -> Result<Terms, OrderError> {
        let quantity = common::quantity(NAME, order, false, Tastytrade.crypto_quantity_scale())?;
        let tif = match order.duration {
            Duration::Day => "Day",
            Duration::Gtc => "GTC",
            d => return Err(common::unsupported_tif(NAME, order.asset_class.as_str(), d, "DAY or GTC")),
        };
        let order_type = match order.order_type {
            OrderType::Market => "Market",
            OrderType::Limit => "Limit",
        };
        let price = match common::limit_price(NAME, order)? {
            None => None,
            Some(p) => {
                let effect = match order.asset_class {
                    AssetClass::Option => common::price_effect(NAME, order)?,
                    // Shares and coins: buying pays, selling receives.
                    _ if order.intent.is_buy() => PriceEffect::Debit,
                    _ => PriceEffect::Credit,
                };
                Some((p, effect))
            }
        };
        Ok(Terms { quantity, tif, order_type, price })
    }

    fn json(&self, order: &Order) -> Json {
        let id = order.client_order_id.trim();
        Json::obj()
            .with("time-in-force", self.tif)
            .with("order-type", self.order_type)
            .with_opt("price", self.price.map(|(p, _)| common::digits(p)))
            .with_opt(
                "price-effect",
                self.price.map(|(_, e)| match e {
                    PriceEffect::Debit => "Debit",
                    PriceEffect::Credit => "Credit",
                }),
            )
            .with_opt("external-identifier", (!id.is_empty()).then(|| id.to_string()))
    }
}

fn legs(order: &Order, quantity: Decimal) -> Result<Vec<Json>, OrderError> {
    let leg = |kind: &'static str, symbol: String, quantity: Decimal, action: &'static str| {
        Json::obj()
            .with("instrument-type", kind)
            .with("symbol", symbol)
            .with("quantity", quantity)
            .with("action", action)
    };
    Ok(match order.asset_class {
        AssetClass::Equity => {
            vec![leg("Equity", common::symbol(NAME, order)?.to_string(), quantity, equity_action(order.intent))]
        }
        AssetClass::Crypto => {
            let pair = common::spot_pair(NAME, order)?;
            vec![leg("Cryptocurrency", Tastytrade.crypto_symbol(pair), quantity, equity_action(order.intent))]
        }
        AssetClass::Option => common::option_legs(NAME, order)?
            .iter()
            .map(|l| {
                leg(
                    "Equity Option",
                    l.contract.occ_padded(),
                    common::leg_quantity(quantity, l),
                    option_action(l.action),
                )
            })
            .collect(),
    })
}

/// Equities (and crypto) open and close through the same four actions as options;
/// plain "Buy"/"Sell" are for futures only.
fn equity_action(i: Intent) -> &'static str {
    match i {
        Intent::OpenLong => "Buy to Open",
        Intent::CloseLong => "Sell to Close",
        Intent::OpenShort => "Sell to Open",
        Intent::CloseShort => "Buy to Close",
    }
}

fn option_action(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "Buy to Open",
        LegAction::BuyToClose => "Buy to Close",
        LegAction::SellToOpen => "Sell to Open",
        LegAction::SellToClose => "Sell to Close",
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from Tastytrade's order-submission guide and error reference
    // (developer.tastytrade.com), as tastyware's `PlacedOrderResponse` reads them.
    const PLACED: &str = r#"{"data":{"order":{"id":12345,"account-number":"5WT00000","status":"Received","order-type":"Limit"},"buying-power-effect":{"change-in-buying-power":"190.1"},"warnings":[]},"context":"/accounts/5WT00000/orders"}"#;
    const CANCELLED: &str =
        r#"{"data":{"id":12345,"status":"Cancel Requested"},"context":"/accounts/5WT00000/orders/12345"}"#;
    const REFUSED: &str = r#"{"error":{"code":"validation_error","message":"Request validation failed","errors":[{"code":"invalid_price","message":"price does not have a valid value"}]}}"#;

    #[test]
    fn reads_tastytrade_answers() {
        let read = |kind, status, body: &str| Tastytrade.read_answer(kind, status, None, body.as_bytes());
        assert_eq!(read(RequestKind::Place, 201, PLACED), Answer::Accepted { order_id: Some("12345".into()) });
        assert_eq!(read(RequestKind::Cancel, 200, CANCELLED), Answer::Accepted { order_id: Some("12345".into()) });
        assert_eq!(
            read(RequestKind::Place, 422, REFUSED),
            Answer::Refused {
                message: "HTTP 422: Request validation failed: price does not have a valid value".into()
            }
        );
        assert!(matches!(read(RequestKind::Place, 503, "upstream timeout"), Answer::Uncertain { .. }));
    }
}
