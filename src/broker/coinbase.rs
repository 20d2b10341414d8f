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

    /// Coinbase requires a `client_order_id` on every order but does not reliably refuse a
    /// repeated one: a reused id has been answered `success:true` with a new order id
    /// (coinbase-advanced-py issue #49; tests/fixtures/brokers/coinbase/README.md). So a
    /// resend is not safe here; an uncertain send is looked up instead.
    fn accepts_client_order_id(&self) -> bool {
        false
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
            .with("client_order_id", id)
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
        account_id: &str,
        order_id: &str,
        order: &Order,
        quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        self.replace_after_fills(account_id, order_id, order, quantity_changed, crate::decimal::Decimal::ZERO)
    }

    /// The edit's `size` is the order's whole size, what has filled included (an edit to below it fails with
    /// `CANNOT_EDIT_TO_BELOW_FILLED_SIZE`): the remaining quantity alone would shrink a partly filled order.
    fn replace_after_fills(
        &self,
        _account_id: &str,
        order_id: &str,
        order: &Order,
        _quantity_changed: bool,
        filled: crate::decimal::Decimal,
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
        let remaining = common::quantity(NAME, order, false, Coinbase.crypto_quantity_scale())?;
        if filled.is_sign_negative() {
            return Err(OrderError::Unfillable(format!("the {pair} order's filled size {filled} is negative")));
        }
        let size = common::digits(remaining.checked_add(filled).ok_or(OrderError::Overflow)?);
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

// ----- Reading the account back -----
//
// Spot holds balances, not positions: a coin's wallet (`available + hold`, the hold being
// what our own open sells reserve) is a long position in that coin; fiat wallets and
// quote currencies are not positions. An order's size and limit price live inside its one
// `order_configuration` key. Coinbase cannot filter orders by client order id, so ours is
// found in the orders created around the send. A `success: false` inside a 200 is a
// refusal ([`Broker::read_answer`]). A configuration this library does not place (a trader's stop-limit, trigger
// bracket, good-till-date order) is read with its size, price and side but no order type or time in force of the
// library's: the wallet's hold counts the coins such a sell reserves, so a host keeps it as a working exit of kind
// `other`, which a CLOSE cancels before selling the balance.

use super::read::{self, AccountReads, Lookup};
use crate::decimal::Decimal;
use crate::model::{
    BrokerOrder, BrokerPosition, Direction, Intent, OrderSide, OrderStatus, PriceEffect, ProductIncrements, ReadError,
};
use serde::Deserialize;

/// Coinbase's status words (`EDIT_QUEUED` is an edit in flight).
const STATUSES: &[(&str, OrderStatus)] = &[
    ("PENDING", OrderStatus::Working),
    ("QUEUED", OrderStatus::Working),
    ("OPEN", OrderStatus::Working),
    ("CANCEL_QUEUED", OrderStatus::Working),
    ("EDIT_QUEUED", OrderStatus::Working),
    ("FILLED", OrderStatus::Filled),
    ("CANCELLED", OrderStatus::Cancelled),
    ("EXPIRED", OrderStatus::Expired),
    ("FAILED", OrderStatus::Rejected),
];

/// Fiat currencies, which price pairs rather than being held as positions. Stablecoins are coins: the base of a
/// pair Coinbase lists (USDT-USD, USDC-EUR), left out of the wallets read, a USDT/USD strategy was always flat (its
/// CLOSE found nothing to sell). A strategy whose pairs have no such base leaves them out as cash (the server's
/// sync).
const QUOTE_CURRENCIES: [&str; 3] = ["USD", "EUR", "GBP"];

#[derive(Deserialize)]
struct AccountsAnswer {
    #[serde(default)]
    accounts: Option<Vec<WireAccount>>,
    #[serde(default)]
    has_next: bool,
    /// Where the next page starts, when `has_next`.
    #[serde(default)]
    cursor: String,
}

#[derive(Deserialize)]
struct WireAccount {
    #[serde(default, deserialize_with = "read::text")]
    currency: String,
    #[serde(default, rename = "type", deserialize_with = "read::text")]
    account_type: String,
    #[serde(default)]
    available_balance: Option<Amount>,
    #[serde(default)]
    hold: Option<Amount>,
}

#[derive(Deserialize)]
struct Amount {
    #[serde(default, deserialize_with = "read::dec_opt")]
    value: Option<Decimal>,
}

#[derive(Deserialize)]
struct OrdersAnswer {
    #[serde(default)]
    orders: Option<Vec<WireOrder>>,
    #[serde(default)]
    has_next: bool,
    /// Where the next page starts, when `has_next`.
    #[serde(default)]
    cursor: String,
}

#[derive(Deserialize)]
struct OrderAnswer {
    order: Option<WireOrder>,
}

#[derive(Deserialize)]
struct WireOrder {
    #[serde(deserialize_with = "read::text")]
    order_id: String,
    #[serde(default, deserialize_with = "read::id_opt")]
    client_order_id: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    product_id: String,
    #[serde(default, deserialize_with = "read::text")]
    side: String,
    #[serde(default, deserialize_with = "read::text")]
    status: String,
    #[serde(default)]
    order_configuration: std::collections::BTreeMap<String, Configuration>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    filled_size: Option<Decimal>,
    #[serde(default)]
    created_time: Option<String>,
    #[serde(default)]
    reject_message: Option<String>,
    #[serde(default)]
    reject_reason: Option<String>,
    #[serde(default)]
    cancel_message: Option<String>,
    /// Sized by an amount of the quote currency (`quote_size`) rather than of coins.
    #[serde(default)]
    size_in_quote: Option<bool>,
}

#[derive(Deserialize)]
struct Configuration {
    #[serde(default, deserialize_with = "read::dec_opt")]
    base_size: Option<Decimal>,
    /// The amount of the quote currency a trader sized the order by (one of it and `base_size` is given).
    #[serde(default, deserialize_with = "read::dec_opt")]
    quote_size: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    limit_price: Option<Decimal>,
}

#[derive(Deserialize)]
struct WireProduct {
    #[serde(default, deserialize_with = "read::dec_opt")]
    base_increment: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quote_increment: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    price_increment: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    base_min_size: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quote_min_size: Option<Decimal>,
}

/// The OPEN status, which Coinbase reads only alone.
const OPEN_STATUS: &[&str] = &["OPEN"];

/// The other working statuses: an order whose placement or cancel is still queued.
const QUEUED_STATUSES: &[&str] = &["PENDING", "QUEUED", "CANCEL_QUEUED"];

/// The read of the working orders in `statuses`, from `cursor` (a page after the first).
fn working_orders_read(statuses: &[&str], cursor: Option<&str>) -> Request {
    let mut q: Vec<(&str, &str)> = statuses.iter().map(|s| ("order_status", *s)).collect();
    q.push(("limit", "1000"));
    if let Some(c) = cursor {
        q.push(("cursor", c));
    }
    read::get(format!("/api/v3/brokerage/orders/historical/batch{}", read::query(&q)))
}

/// Coinbase's error answer (`{"error","message"}`) where data was expected.
fn error_of(what: &'static str, body: &[u8]) -> ReadError {
    let message =
        answer::json(body).and_then(|v| answer::text_at(&v, &["message"]).or_else(|| answer::text_at(&v, &["error"])));
    match message {
        Some(message) => ReadError::BrokerError { broker: NAME, what, message },
        None => ReadError::Unreadable { broker: NAME, detail: format!("the answer has no {what}") },
    }
}

fn position(w: WireAccount) -> Option<BrokerPosition> {
    let coin = w.currency.trim().to_ascii_uppercase();
    // Only trading wallets: a vault (cold storage, withdrawn with a delay) or a futures account holds coins that a
    // sell cannot reach, and counted as a position it made a CLOSE sell more than the wallet holds, refused.
    let trading = matches!(w.account_type.trim(), "" | "ACCOUNT_TYPE_CRYPTO");
    if !trading || QUOTE_CURRENCIES.contains(&coin.as_str()) || coin.is_empty() {
        return None;
    }
    let value = |a: Option<Amount>| a.and_then(|a| a.value).unwrap_or_default();
    // Checked: a sum past a decimal's range is no holding this reader can state (unchecked, it panicked).
    let quantity = value(w.available_balance).checked_add(value(w.hold))?.normalize();
    if quantity <= Decimal::ZERO {
        return None;
    }
    Some(BrokerPosition {
        instrument: coin,
        asset_class: AssetClass::Crypto,
        contract: None,
        pair: None,
        direction: Direction::Long,
        quantity,
        average_price: None,
    })
}

fn order(w: WireOrder) -> BrokerOrder {
    let pair = CryptoPair::parse(&w.product_id);
    let instrument = pair.as_ref().map_or_else(|| w.product_id.trim().to_ascii_uppercase(), |p| p.to_string());
    let (kind, terms) = match w.order_configuration.into_iter().next() {
        Some((k, c)) => (k, Some(c)),
        None => (String::new(), None),
    };
    let order_type = if kind.starts_with("market_") {
        Some(OrderType::Market)
    } else if kind.starts_with("limit_") {
        Some(OrderType::Limit)
    } else {
        None
    };
    let duration = match kind.as_str() {
        "limit_limit_gtc" => Some(Duration::Gtc),
        "limit_limit_fok" => Some(Duration::Fok),
        _ => None,
    };
    let side = OrderSide::from_word(&w.side);
    // Spot: buying opens (or adds to) a holding, selling closes it.
    let intent = side.map(|s| if s == OrderSide::Buy { Intent::OpenLong } else { Intent::CloseLong });
    let (base_size, quote_size, limit_price) =
        terms.map_or((None, None, None), |c| (c.base_size, c.quote_size, c.limit_price));
    // An order sized in the quote has no count of coins until it fills, whatever else its configuration says.
    let in_quote = w.size_in_quote == Some(true) || (base_size.is_none() && quote_size.is_some());
    let count = base_size.filter(|q| *q > Decimal::ZERO && !in_quote);
    let created_ms = w.created_time.as_deref().and_then(crate::model::timestamp_ms);
    let reason =
        [w.reject_message, w.cancel_message, w.reject_reason].into_iter().flatten().find(|s| !s.trim().is_empty());
    let o = BrokerOrder {
        extended_session: false,
        order_id: w.order_id,
        client_order_id: w.client_order_id,
        instrument,
        asset_class: AssetClass::Crypto,
        pair,
        side,
        intent,
        order_type,
        limit_price: limit_price.map(|p| p.normalize()),
        price_effect: None::<PriceEffect>,
        duration,
        quantity: count.unwrap_or_default().normalize(),
        notional: None,
        filled_quantity: w.filled_size.unwrap_or_default().normalize(),
        status: read::status_of(&w.status, STATUSES),
        broker_status: w.status,
        legs: Vec::new(),
        created_at: w.created_time,
        created_ms,
        replaced_by: None,
        reason,
    };
    match count {
        Some(_) => o,
        None => read::without_count(o, quote_size),
    }
}

impl AccountReads for Coinbase {
    fn positions_request(&self, _account_id: &str) -> Result<Request, OrderError> {
        Ok(read::get(format!("/api/v3/brokerage/accounts{}", read::query(&[("limit", "250")]))))
    }

    /// The OPEN orders first; the list goes on ([`AccountReads::parse_orders_page`]) with the other working
    /// statuses. Every working status is read: OPEN alone left out an order whose cancel or placement was still
    /// queued, so the sync dropped it from the state and a CANCEL of it was refused. But in two reads: Coinbase
    /// refuses OPEN paired with any other status ("You cannot pair open orders with other order types"), and one
    /// read asking for all of them failed every sync of every Coinbase bot.
    fn open_orders_request(&self, _account_id: &str, _now_ms: i64) -> Result<Request, OrderError> {
        Ok(working_orders_read(OPEN_STATUS, None))
    }

    fn order_request(&self, _account_id: &str, order_id: &str) -> Result<Request, OrderError> {
        Ok(read::get(format!("/api/v3/brokerage/orders/historical/{}", common::order_id(NAME, order_id)?)))
    }

    /// The orders created from two minutes before the send (the clocks' skew) to three after it, in
    /// every product; ours carries our `client_order_id`.
    fn lookup_request(&self, _account_id: &str, _client_order_id: &str, placed_ms: i64) -> Result<Lookup, OrderError> {
        let from = read::window_start(placed_ms);
        let q = read::query(&[
            ("start_date", &read::utc(from, false)),
            ("end_date", &read::utc(from + read::ENTERED_WITHIN_MS, false)),
            ("limit", "1000"),
        ]);
        Ok(Lookup::List(read::get(format!("/api/v3/brokerage/orders/historical/batch{q}"))))
    }

    /// More wallets than one page holds is not read as the whole list.
    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError> {
        let a: AccountsAnswer = read::parse(NAME, body)?;
        let accounts = a.accounts.ok_or_else(|| error_of("positions", body))?;
        if a.has_next {
            return Err(ReadError::Incomplete { broker: NAME, what: "wallets" });
        }
        Ok(accounts.into_iter().filter_map(position).collect())
    }

    /// Wallets past the first 250 are on further pages, each asked for by the `cursor` the page before gave:
    /// read as one page, an account with more wallets (most of them empty) could never be synced.
    fn parse_positions_page(
        &self,
        _request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerPosition>, Option<Request>), ReadError> {
        let a: AccountsAnswer = read::parse(NAME, body)?;
        let accounts = a.accounts.ok_or_else(|| error_of("positions", body))?;
        let next = match (a.has_next, a.cursor.trim()) {
            (false, _) => None,
            (true, "") => return Err(ReadError::Incomplete { broker: NAME, what: "wallets" }),
            (true, cursor) => Some(read::get(format!(
                "/api/v3/brokerage/accounts{}",
                read::query(&[("limit", "250"), ("cursor", cursor)])
            ))),
        };
        Ok((accounts.into_iter().filter_map(position).collect(), next))
    }

    /// A page of working orders, and the next: the same statuses' next page by its `cursor`, then, after the
    /// OPEN orders, the other working statuses'.
    fn parse_orders_page(
        &self,
        request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerOrder>, Option<Request>), ReadError> {
        let a: OrdersAnswer = read::parse(NAME, body)?;
        let orders = a.orders.ok_or_else(|| error_of("orders", body))?;
        let statuses = if request.path.contains("order_status=OPEN") { OPEN_STATUS } else { QUEUED_STATUSES };
        let next = match (a.has_next, a.cursor.trim()) {
            (true, "") => return Err(ReadError::Incomplete { broker: NAME, what: "orders" }),
            (true, cursor) => Some(working_orders_read(statuses, Some(cursor))),
            (false, _) if statuses == OPEN_STATUS => Some(working_orders_read(QUEUED_STATUSES, None)),
            (false, _) => None,
        };
        Ok((orders.into_iter().map(order).collect(), next))
    }

    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError> {
        let a: OrdersAnswer = read::parse(NAME, body)?;
        let orders = a.orders.ok_or_else(|| error_of("orders", body))?;
        if a.has_next {
            return Err(ReadError::Incomplete { broker: NAME, what: "orders" });
        }
        Ok(orders.into_iter().map(order).collect())
    }

    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError> {
        let a: OrderAnswer = read::parse(NAME, body)?;
        a.order.map(order).ok_or_else(|| error_of("order", body))
    }

    fn product_request(&self, pair: &CryptoPair) -> Option<Request> {
        Some(read::get(format!("/api/v3/brokerage/products/{}", common::segment(&self.crypto_symbol(pair)))))
    }

    /// The price tick falls back to the quote increment where a product states none.
    fn parse_product(&self, body: &[u8]) -> Result<ProductIncrements, ReadError> {
        let p: WireProduct = read::parse(NAME, body)?;
        let missing = |what: &str| ReadError::Unreadable { broker: NAME, detail: format!("the product has no {what}") };
        let base_increment = p.base_increment.ok_or_else(|| missing("base_increment"))?;
        let quote_increment = p.quote_increment.ok_or_else(|| missing("quote_increment"))?;
        Ok(ProductIncrements {
            base_increment,
            quote_increment,
            price_increment: p.price_increment.unwrap_or(quote_increment),
            // A minimum of 0 (or none stated) bounds nothing.
            base_min_size: p.base_min_size.filter(|m| *m > Decimal::ZERO),
            quote_min_size: p.quote_min_size.filter(|m| *m > Decimal::ZERO),
        })
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use crate::broker::{Body, Found};

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../tests/fixtures/brokers/coinbase/", $name)).as_slice()
        };
    }

    const OUR_ID: &str = "swh-a7e9dc06aa1c60d3c26d917a2356";

    fn ms(iso: &str) -> i64 {
        crate::model::timestamp_ms(iso).unwrap()
    }

    #[test]
    fn requests() {
        let c = Coinbase;
        let r = c.positions_request("").unwrap();
        assert_eq!(
            (r.method, r.path.as_str(), &r.body),
            (Method::Get, "/api/v3/brokerage/accounts?limit=250", &Body::Empty)
        );
        // OPEN alone (Coinbase refuses it paired with another status), then the other working statuses.
        let open = c.open_orders_request("", 0).unwrap();
        assert_eq!(open.path, "/api/v3/brokerage/orders/historical/batch?order_status=OPEN&limit=1000");
        let last = br#"{"orders":[],"has_next":false,"cursor":""}"#;
        let (_, queued) = c.parse_orders_page(&open, last).unwrap();
        let queued = queued.expect("the other working statuses are read after OPEN");
        assert_eq!(
            queued.path,
            "/api/v3/brokerage/orders/historical/batch?order_status=PENDING&order_status=QUEUED\
             &order_status=CANCEL_QUEUED&limit=1000"
        );
        assert!(c.parse_orders_page(&queued, last).unwrap().1.is_none(), "the list ends there");
        // A full page goes on from its cursor, with the same statuses.
        let more = br#"{"orders":[],"has_next":true,"cursor":"abc"}"#;
        let (_, next) = c.parse_orders_page(&open, more).unwrap();
        assert_eq!(
            next.unwrap().path,
            "/api/v3/brokerage/orders/historical/batch?order_status=OPEN&limit=1000&cursor=abc"
        );
        for q in [&open, &queued] {
            let statuses = q.path.matches("order_status=").count();
            assert!(!q.path.contains("order_status=OPEN") || statuses == 1, "OPEN paired: {}", q.path);
        }
        assert_eq!(
            c.order_request("", "e20d515f-d07b-41a1-a9b8-47b2faaf8c14").unwrap().path,
            "/api/v3/brokerage/orders/historical/e20d515f-d07b-41a1-a9b8-47b2faaf8c14"
        );
        let lookup = c.lookup_request("", OUR_ID, ms("2026-03-03T14:31:05Z")).unwrap();
        assert!(matches!(lookup, Lookup::List(_)));
        assert_eq!(
            lookup.request().path,
            "/api/v3/brokerage/orders/historical/batch?start_date=2026-03-03T14:29:00Z&end_date=2026-03-03T14:34:00Z&limit=1000"
        );
        let doge = CryptoPair { base: "DOGE".into(), quote: "USD".into() };
        assert_eq!(c.product_request(&doge).unwrap().path, "/api/v3/brokerage/products/DOGE-USD");
    }

    #[test]
    fn balances_as_positions() {
        let p = Coinbase.parse_positions(fixture!("positions.json")).unwrap();
        let rows: Vec<_> =
            p.iter().map(|p| (p.instrument.as_str(), p.asset_class, p.direction, p.quantity.to_string())).collect();
        // BTC: 0.035 available + 0.015 held by our open sell; ETH is empty; USD is cash.
        assert_eq!(
            rows,
            [
                ("BTC", AssetClass::Crypto, Direction::Long, "0.05".to_string()),
                ("DOGE", AssetClass::Crypto, Direction::Long, "1500".to_string()),
            ]
        );
        assert!(p[0].holds_pair(&CryptoPair { base: "BTC".into(), quote: "USD".into() }));
        // A vault and a futures account hold coins no sell reaches: no positions.
        let mut v: serde_json::Value = serde_json::from_slice(fixture!("positions.json")).unwrap();
        let vault = |kind: &str, coin: &str| {
            serde_json::json!({"uuid": "v", "currency": coin, "type": kind, "available_balance": {"value": "5", "currency": coin},
                               "hold": {"value": "0", "currency": coin}})
        };
        let accounts = v["accounts"].as_array_mut().unwrap();
        accounts.push(vault("ACCOUNT_TYPE_VAULT", "BTC"));
        accounts.push(vault("ACCOUNT_TYPE_PERP_FUTURES", "ETH"));
        let with_vaults = Coinbase.parse_positions(v.to_string().as_bytes()).unwrap();
        assert_eq!(with_vaults, p, "the trading wallets alone");
        let more =
            String::from_utf8_lossy(fixture!("positions.json")).replace("\"has_next\": false", "\"has_next\": true");
        assert_eq!(
            Coinbase.parse_positions(more.as_bytes()),
            Err(ReadError::Incomplete { broker: "Coinbase", what: "wallets" })
        );
        // Paged: the next page is asked for by its cursor; a page that says there is more without one is not
        // read as the whole list.
        let first = Coinbase.positions_request("").unwrap();
        let (page, next) = Coinbase.parse_positions_page(&first, fixture!("positions.json")).unwrap();
        assert_eq!((page.len(), next.is_none()), (2, true));
        let (_, next) = Coinbase
            .parse_positions_page(&first, more.replace("\"cursor\": \"\"", "\"cursor\": \"c1 2\"").as_bytes())
            .unwrap();
        assert_eq!(next.unwrap().path, "/api/v3/brokerage/accounts?limit=250&cursor=c1%202");
        assert_eq!(
            Coinbase.parse_positions_page(&first, more.as_bytes()).map(|(p, _)| p.len()),
            Err(ReadError::Incomplete { broker: "Coinbase", what: "wallets" })
        );
    }

    #[test]
    fn orders_with_terms_inside_the_configuration() {
        let o = Coinbase.parse_orders(fixture!("orders_open.json")).unwrap();
        assert_eq!(o.len(), 2);
        let entry = &o[0];
        assert_eq!(
            (entry.order_id.as_str(), entry.client_order_id.as_deref()),
            ("e20d515f-d07b-41a1-a9b8-47b2faaf8c14", Some(OUR_ID))
        );
        assert_eq!((entry.instrument.as_str(), entry.status), ("DOGE/USD", OrderStatus::Working));
        assert_eq!((entry.side, entry.intent), (Some(OrderSide::Buy), Some(Intent::OpenLong)));
        assert_eq!((entry.order_type, entry.duration), (Some(OrderType::Limit), Some(Duration::Gtc)));
        assert_eq!(
            (entry.quantity.to_string(), entry.limit_price.unwrap().to_string()),
            ("1000".into(), "0.18".into())
        );
        assert_eq!(entry.created_ms, Some(ms("2026-03-03T14:31:05.214Z")));
        let exit = &o[1];
        assert_eq!((exit.instrument.as_str(), exit.intent), ("BTC/USD", Some(Intent::CloseLong)));
        assert_eq!((exit.quantity.to_string(), exit.filled_quantity.to_string()), ("0.02".into(), "0.005".into()));
    }

    #[test]
    fn one_order_in_every_final_state() {
        let read = |body: &[u8]| Coinbase.parse_order(body).unwrap();
        assert_eq!(read(fixture!("order_by_id.json")).status, OrderStatus::Working);
        let filled = read(fixture!("order_filled.json"));
        assert_eq!((filled.status, filled.filled_quantity.to_string()), (OrderStatus::Filled, "1000".into()));
        let cancelled = read(fixture!("order_cancelled.json"));
        assert_eq!((cancelled.status, cancelled.filled_quantity.to_string()), (OrderStatus::Cancelled, "0.005".into()));
        assert_eq!(cancelled.reason.as_deref(), Some("User requested cancel"));
        let rejected = read(fixture!("order_rejected.json"));
        assert_eq!(
            (rejected.status, rejected.reason.as_deref()),
            (OrderStatus::Rejected, Some("Insufficient balance to place order"))
        );
        let unknown = read(br#"{"order":{"order_id":"x","status":"UNKNOWN_ORDER_STATUS","product_id":"BTC-USD"}}"#);
        assert_eq!(unknown.status, OrderStatus::Unknown);
        assert!(!unknown.status.is_final());
        let market = read(
            br#"{"order":{"order_id":"m","status":"FILLED","product_id":"BTC-USD","side":"SELL",
            "order_configuration":{"market_market_ioc":{"base_size":"0.01"}}}}"#,
        );
        assert_eq!(
            (market.order_type, market.duration, market.quantity.to_string()),
            (Some(OrderType::Market), None, "0.01".into())
        );
    }

    #[test]
    fn finding_ours_by_client_order_id() {
        let placed = ms("2026-03-03T14:31:05Z");
        let lookup = Coinbase.lookup_request("", OUR_ID, placed).unwrap();
        let find = |id: &str, body: &[u8]| Coinbase.find_ours(&lookup, 200, body, id, None, placed);
        match find(OUR_ID, fixture!("order_by_client_id.json")) {
            Found::Found(o) => assert_eq!(o.order_id, "e20d515f-d07b-41a1-a9b8-47b2faaf8c14"),
            other => panic!("{other:?}"),
        }
        assert_eq!(find("swh-00000000000000000000000000ff", fixture!("order_by_client_id.json")), Found::NotFound);
        // Coinbase answered a reused client order id with a new order: two carry ours.
        let twice = String::from_utf8_lossy(fixture!("order_by_client_id.json"))
            .replace("6d6a1f0e-2b54-4c4e-9f0d-8f1f0f3b4c21", OUR_ID);
        assert_eq!(find(OUR_ID, twice.as_bytes()), Found::Ambiguous(2));
        let more = String::from_utf8_lossy(fixture!("order_by_client_id.json"))
            .replace("\"has_next\": false", "\"has_next\": true");
        assert!(matches!(find("swh-none", more.as_bytes()), Found::Unreadable(m) if m.contains("first page")));
        assert!(matches!(
            Coinbase.find_ours(&lookup, 401, fixture!("auth_error.txt"), OUR_ID, None, placed),
            Found::Unreadable(m) if m.contains("401")
        ));
    }

    #[test]
    fn product_increments() {
        let btc = Coinbase.parse_product(fixture!("product.json")).unwrap();
        assert_eq!(
            (btc.base_increment.to_string(), btc.quote_increment.to_string(), btc.price_increment.to_string()),
            ("0.00000001".into(), "0.01".into(), "0.01".into())
        );
        let doge = Coinbase.parse_product(fixture!("product_doge.json")).unwrap();
        assert_eq!(
            (doge.base_increment.to_string(), doge.price_increment.to_string()),
            ("0.1".into(), "0.00001".into())
        );
        // The minimum order sizes are read with the increments (orders below them are refused by Coinbase).
        assert_eq!(
            (doge.base_min_size.map(|d| d.to_string()), doge.quote_min_size.map(|d| d.to_string())),
            (Some("1".into()), Some("1".into()))
        );
        let no_tick = Coinbase.parse_product(br#"{"base_increment":"0.1","quote_increment":"0.001"}"#).unwrap();
        assert_eq!(no_tick.price_increment.to_string(), "0.001", "the quote increment stands in");
        assert_eq!((no_tick.base_min_size, no_tick.quote_min_size), (None, None), "no minimum stated, none applied");
        assert!(Coinbase.parse_product(br#"{"quote_increment":"0.01"}"#).is_err());
    }

    #[test]
    fn write_answers_from_the_fixtures() {
        let read = |body: &[u8]| Coinbase.read_answer(RequestKind::Place, 200, None, body);
        let id = |s: &str| Answer::Accepted { order_id: Some(s.into()) };
        assert_eq!(read(fixture!("place_accepted.json")), id("e20d515f-d07b-41a1-a9b8-47b2faaf8c14"));
        // A reused client order id was answered as a new order, not refused: a lookup must
        // come before any resend.
        assert_eq!(read(fixture!("place_duplicate_client_id.json")), id("22a8b76f-85a1-4947-a96f-a3c07f5d67bf"));
        assert_eq!(
            read(fixture!("place_refused.json")),
            Answer::Refused { message: "HTTP 200: Insufficient balance in source account (INSUFFICIENT_FUND)".into() },
            "success:false inside a 200 is a refusal"
        );
        assert!(
            matches!(read(fixture!("place_refused_precision.json")), Answer::Refused { message } if message.contains("INVALID_SIZE_PRECISION"))
        );
        assert!(matches!(
            Coinbase.read_answer(RequestKind::Place, 401, None, fixture!("auth_error.txt")),
            Answer::Refused { message } if message.contains("401")
        ));
    }

    /// A limit order a trader placed by amount (`quote_size`, `size_in_quote`) has no `base_size`, and was read as a
    /// working order of 0 coins: the sync filed it so, the strategy refused the state (a working order of zero),
    /// and a MODIFY of it was sized from 0. It is read as what it is: $500 at 60000, how many coins not known until
    /// it fills, its status unknown while it works, so that nothing takes it for done nor for an order of 0.
    #[test]
    fn a_limit_order_sized_in_the_quote_is_read_by_its_amount_never_as_zero_coins() {
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        let body = br#"{"orders":[{"order_id":"q1","product_id":"BTC-USD","side":"BUY","status":"OPEN",
            "client_order_id":"hand-1","size_in_quote":true,"filled_size":"0","created_time":"2026-03-03T14:31:05Z",
            "order_configuration":{"limit_limit_gtc":{"quote_size":"500.00","limit_price":"60000","post_only":false}}}],
            "has_next":false,"cursor":""}"#;
        let orders = Coinbase.parse_orders(body).unwrap();
        let o = &orders[0];
        assert_eq!((o.status, o.broker_status.as_str()), (OrderStatus::Unknown, "OPEN"));
        assert_eq!((o.quantity, o.notional), (Decimal::ZERO, Some(d("500"))));
        assert_eq!(
            (o.order_type, o.limit_price, o.side),
            (Some(OrderType::Limit), Some(d("60000")), Some(OrderSide::Buy))
        );
        let reason = o.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("500") && reason.contains("not known until it fills"), "{reason}");
        // Filled, its count is what filled.
        let filled = Coinbase
            .parse_order(
                br#"{"order":{"order_id":"m2","product_id":"BTC-USD","side":"BUY","status":"FILLED","size_in_quote":true,
                "filled_size":"0.00083","order_configuration":{"market_market_ioc":{"quote_size":"50"}}}}"#,
            )
            .unwrap();
        assert_eq!(
            (filled.status, filled.quantity, filled.filled_quantity, filled.notional),
            (OrderStatus::Filled, d("0.00083"), d("0.00083"), Some(d("50")))
        );
        // Cancelled before a fill: final as it is, and of no count.
        let cancelled = Coinbase
            .parse_order(
                br#"{"order":{"order_id":"q1","product_id":"BTC-USD","side":"BUY","status":"CANCELLED","size_in_quote":true,
                "filled_size":"0","order_configuration":{"limit_limit_gtc":{"quote_size":"500","limit_price":"60000"}}}}"#,
            )
            .unwrap();
        assert_eq!((cancelled.status, cancelled.quantity), (OrderStatus::Cancelled, Decimal::ZERO));
        // A configuration stating no size at all is no working order of 0 either.
        let no_size = Coinbase
            .parse_order(
                br#"{"order":{"order_id":"u1","product_id":"BTC-USD","side":"SELL","status":"OPEN",
                "order_configuration":{"limit_limit_gtc":{"limit_price":"70000"}}}}"#,
            )
            .unwrap();
        assert_eq!((no_size.status, no_size.quantity, no_size.notional), (OrderStatus::Unknown, Decimal::ZERO, None));
        assert!(no_size.reason.as_deref().unwrap_or_default().contains("no size"), "{:?}", no_size.reason);
        // Sized by count as every order this library sends: read as before, with no amount.
        let ours = Coinbase.parse_orders(fixture!("orders_open.json")).unwrap();
        assert!(ours
            .iter()
            .all(|o| o.status == OrderStatus::Working && o.notional.is_none() && o.quantity > Decimal::ZERO));
    }
}
