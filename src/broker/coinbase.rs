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

use super::common;
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::alert::{Duration, OrderType};
use crate::order::{AssetClass, CryptoPair, Order, OrderError};

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
                return Err(OrderError::Rejected(
                    "Coinbase offers fill-or-kill market orders on perpetual futures only; a spot market order is \
                     immediate-or-cancel, so send it as DAY or GTC, or use a FOK limit order"
                        .into(),
                ))
            }
            (OrderType::Limit, Duration::Gtc, Some(p)) => Json::obj().with(
                "limit_limit_gtc",
                Json::obj().with("base_size", size).with("limit_price", common::digits(p)).with("post_only", false),
            ),
            (OrderType::Limit, Duration::Fok, Some(p)) => Json::obj()
                .with("limit_limit_fok", Json::obj().with("base_size", size).with("limit_price", common::digits(p))),
            (OrderType::Limit, Duration::Day, _) => {
                return Err(OrderError::Rejected(
                    "Coinbase has no DAY time in force for limit orders (it takes GTC or FOK); set the time in \
                     force to GTC"
                        .into(),
                ))
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
            return Err(OrderError::Rejected(format!(
                "Coinbase can edit only good-till-cancelled limit orders; the {pair} order is a {} {} order, so \
                 cancel it and send a new entry",
                order.order_type.as_str(),
                order.duration.as_str().to_ascii_uppercase()
            )));
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
}

/// The spot pair, refusing anything but crypto (the trait's callers check `offers`, but a
/// direct call must not format an equity as a product) and refusing shorts.
fn crypto(order: &Order) -> Result<&CryptoPair, OrderError> {
    if order.asset_class != AssetClass::Crypto {
        return Err(OrderError::Unfillable(format!(
            "Coinbase does not offer {} trading, so this bot cannot take the order",
            order.asset_class.as_str()
        )));
    }
    common::spot_pair(NAME, order)
}

/// `base_size`: the coin quantity as a string with its exact digits.
fn size(order: &Order) -> Result<String, OrderError> {
    let q = common::quantity(NAME, order, false, Coinbase.crypto_quantity_scale())?;
    Ok(common::digits(q))
}
