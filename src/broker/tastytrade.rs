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
use super::json::Quoted;
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

    fn names_account(&self) -> bool {
        true
    }

    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let terms = Terms::new(order)?;
        let legs = legs(order, terms.quantity)?;
        let body = terms.json(order).with("legs", legs);
        Ok(Request {
            method: Method::Post,
            path: compact_str::format_compact!("/accounts/{account}/orders"),
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
            path: compact_str::format_compact!("/accounts/{account}/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(terms.json(order)),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: compact_str::format_compact!("/accounts/{account}/orders/{id}"),
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
    /// Any leg closes. Tastytrade routes a closing order whose position it no longer holds (closed by hand,
    /// assigned, filled by the bot's own exit before a sync) as an opening one (a close of a long becomes a
    /// new short; of a long option, a naked short) unless told to discard it instead.
    closes: bool,
}

impl Terms {
    fn new(order: &Order) -> Result<Terms, OrderError> {
        let quantity = common::quantity(NAME, order, false, Tastytrade.crypto_quantity_scale())?;
        let tif = match (order.asset_class, order.duration) {
            // Coins trade around the clock: Tastytrade has no day for them (a working crypto limit is good till
            // cancelled), and takes a crypto market order as IOC (tastyware's orders guide), which is what a
            // market order does anyway.
            (AssetClass::Crypto, Duration::Gtc) if order.order_type == OrderType::Market => "IOC",
            (AssetClass::Crypto, Duration::Gtc) => "GTC",
            (AssetClass::Crypto, d) => return Err(common::unsupported_tif(NAME, "crypto", d, "GTC")),
            (_, Duration::Day) => "Day",
            (_, Duration::Gtc) => "GTC",
            (class, d) => return Err(common::unsupported_tif(NAME, class.as_str(), d, "DAY or GTC")),
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
        let closes = match order.asset_class {
            AssetClass::Option => common::option_legs(NAME, order)?.iter().any(|l| !l.action.is_open()),
            _ => !order.intent.is_open(),
        };
        Ok(Terms { quantity, tif, order_type, price, closes })
    }

    fn json(&self, order: &Order) -> Json {
        let id = order.client_order_id.trim();
        Json::obj()
            .with("time-in-force", self.tif)
            .with("order-type", self.order_type)
            .with_opt("price", self.price.map(|(p, _)| Quoted(p)))
            .with_opt(
                "price-effect",
                self.price.map(|(_, e)| match e {
                    PriceEffect::Debit => "Debit",
                    PriceEffect::Credit => "Credit",
                }),
            )
            .with_opt("external-identifier", (!id.is_empty()).then_some(id))
            .with_opt(
                "advanced-instructions",
                self.closes.then(|| Json::obj().with("strict-position-effect-validation", true)),
            )
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

// ----- Reading the account back -----
//
// Answers are wrapped in `data` (`data.items` for lists, with a `pagination` block on
// searches). A position's quantity is unsigned, its direction in `quantity-direction`; an
// order's price is positive, paid or received per `price-effect`; an order has no filled
// quantity of its own (each leg's `quantity − remaining-quantity`). Tastytrade does not
// deduplicate `external-identifier` and cannot filter on it, so our order is found by
// searching the orders received around the send and matching it.

use super::read::{self, AccountReads, Lookup};
use crate::model::{BrokerLeg, BrokerOrder, BrokerPosition, CryptoPair, Direction, OrderSide, OrderStatus, ReadError};
use serde::Deserialize;

/// Tastytrade's status words. `Removed` and `Partially Removed` are listed by its SDK with
/// no documented meaning: they stay unknown until a read by id says more.
const STATUSES: &[(&str, OrderStatus)] = &[
    ("Received", OrderStatus::Working),
    ("Routed", OrderStatus::Working),
    ("In Flight", OrderStatus::Working),
    ("Contingent", OrderStatus::Working),
    ("Live", OrderStatus::Working),
    ("Cancel Requested", OrderStatus::Working),
    ("Replace Requested", OrderStatus::Working),
    ("Filled", OrderStatus::Filled),
    ("Cancelled", OrderStatus::Cancelled),
    ("Expired", OrderStatus::Expired),
    ("Rejected", OrderStatus::Rejected),
];

#[derive(Deserialize)]
struct Envelope<T> {
    data: Option<T>,
    #[serde(default)]
    pagination: Option<Pagination>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Items<T> {
    /// Required: `data` naming no `items` says nothing of the account (an empty account is `"items": []`). Taken
    /// for an empty list, it read a held position as flat and working orders as none.
    items: Vec<T>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct Pagination {
    #[serde(default)]
    page_offset: u64,
    #[serde(default)]
    total_pages: u64,
}

#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct WirePosition {
    #[serde(deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::text")]
    instrument_type: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    quantity_direction: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    average_open_price: Option<Decimal>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct WireOrder {
    #[serde(default, deserialize_with = "read::id_opt")]
    id: Option<String>,
    #[serde(default)]
    external_identifier: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    status: String,
    #[serde(default, deserialize_with = "read::text")]
    order_type: String,
    #[serde(default, deserialize_with = "read::text")]
    time_in_force: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    size: Option<Decimal>,
    /// The amount of money a Notional Market order was sized by (its legs then give no quantity).
    #[serde(default, deserialize_with = "read::dec_opt")]
    value: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    underlying_symbol: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    price: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    price_effect: String,
    #[serde(default)]
    received_at: Option<String>,
    #[serde(default)]
    reject_reason: Option<String>,
    #[serde(default, deserialize_with = "read::id_opt")]
    replacing_order_id: Option<String>,
    /// True on an original its edit replaced; such an original is listed without `replacing-order-id` too.
    #[serde(default)]
    edited: Option<serde_json::Value>,
    #[serde(default)]
    legs: Vec<WireLeg>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct WireLeg {
    #[serde(default, deserialize_with = "read::text")]
    instrument_type: String,
    #[serde(default, deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    remaining_quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    action: String,
    /// The leg's fills (tastyware's `Leg.fills`, optional like `remaining-quantity`): what filled when the
    /// remaining quantity is not given.
    #[serde(default)]
    fills: Option<Vec<WireFill>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct WireFill {
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
}

impl WireLeg {
    /// The contracts (or shares) of the leg filled: `quantity − remaining-quantity`, else the sum of its fills;
    /// `None` with neither, when what filled is unknown: never taken for "everything" (a cancelled order read as
    /// filled held back the close waiting on its cancel) nor for "nothing" (the order is then read with an unknown
    /// status, which nothing takes as final).
    fn filled(&self, contracts: Decimal, order_id: &str) -> Result<Option<Decimal>, ReadError> {
        let out_of_range = || ReadError::Unreadable {
            broker: NAME,
            detail: format!("order {order_id}: a leg's quantities are out of range"),
        };
        match (self.remaining_quantity, &self.fills) {
            (Some(left), _) => contracts.checked_sub(left).ok_or_else(out_of_range).map(Some),
            (None, Some(fills)) => fills
                .iter()
                .try_fold(Decimal::ZERO, |t, f| t.checked_add(f.quantity.unwrap_or_default()))
                .ok_or_else(out_of_range)
                .map(Some),
            (None, None) => Ok(None),
        }
    }
}

/// The envelope's data, or the error it carries instead.
fn data<T: serde::de::DeserializeOwned>(what: &'static str, body: &[u8]) -> Result<(T, Option<Pagination>), ReadError> {
    let e: Envelope<T> = read::parse(NAME, body)?;
    match (e.data, e.error) {
        (Some(d), _) => Ok((d, e.pagination)),
        (None, Some(err)) => Err(ReadError::BrokerError {
            broker: NAME,
            what,
            message: err.message.unwrap_or_else(|| "no message".into()),
        }),
        (None, None) => Err(ReadError::Unreadable { broker: NAME, detail: "the answer has no data".into() }),
    }
}

fn asset_class_of(instrument_type: &str) -> Option<AssetClass> {
    match instrument_type {
        "Equity" => Some(AssetClass::Equity),
        "Equity Option" => Some(AssetClass::Option),
        "Cryptocurrency" => Some(AssetClass::Crypto),
        _ => None,
    }
}

fn position(w: WirePosition) -> Option<BrokerPosition> {
    let asset_class = asset_class_of(&w.instrument_type)?;
    let quantity = w.quantity?.abs().normalize();
    let direction = match w.quantity_direction.as_str() {
        "Long" => Direction::Long,
        "Short" => Direction::Short,
        _ => return None,
    };
    if quantity.is_zero() {
        return None;
    }
    let (instrument, contract, pair) = match asset_class {
        AssetClass::Option => {
            let (s, c) = read::occ(&w.symbol);
            (s, c, None)
        }
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
        quantity,
        average_price: w.average_open_price.map(|p| p.normalize()),
    })
}

fn leg_action_of(action: &str) -> Option<LegAction> {
    match action {
        "Buy to Open" => Some(LegAction::BuyToOpen),
        "Buy to Close" => Some(LegAction::BuyToClose),
        "Sell to Open" => Some(LegAction::SellToOpen),
        "Sell to Close" => Some(LegAction::SellToClose),
        _ => None,
    }
}

/// The greatest common divisor of the legs' quantities, when every one is a whole number above zero.
fn legs_gcd(legs: &[WireLeg]) -> Option<Decimal> {
    let whole = |q: Decimal| {
        (q > Decimal::ZERO && q.fract().is_zero()).then(|| q.normalize().to_string().parse::<u64>().ok()).flatten()
    };
    let mut g: Option<u64> = None;
    for l in legs {
        let q = whole(l.quantity?)?;
        g = Some(match g {
            None => q,
            Some(mut a) => {
                let mut b = q;
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                a
            }
        });
    }
    g.map(Decimal::from)
}

fn order(w: WireOrder) -> Result<BrokerOrder, ReadError> {
    let order_id = w.id.ok_or_else(|| ReadError::Unreadable { broker: NAME, detail: "an order has no id".into() })?;
    let first = w.legs.first();
    let asset_class = first.and_then(|l| asset_class_of(&l.instrument_type)).unwrap_or(AssetClass::Equity);
    // Without `size` (optional in Tastytrade's order model), the structure's units are the greatest common divisor
    // of its legs' quantities, as Tastytrade's own order chains count them: taken from the first leg, a ratio
    // spread listing its 2-lot leg first was read as two units of legs 1 and ½ (ratio 1 each), and a MODIFY sent
    // the legs at those ratios.
    let count = w
        .size
        .or_else(|| legs_gcd(&w.legs))
        .or_else(|| first.and_then(|l| l.quantity))
        .filter(|q| *q > Decimal::ZERO)
        .map(|q| q.normalize());
    let units = count.unwrap_or_default();
    let first_action = first.and_then(|l| leg_action_of(&l.action));
    let side = |a: Option<LegAction>| a.map(|a| if a.is_buy() { OrderSide::Buy } else { OrderSide::Sell });
    let mut legs = Vec::new();
    let mut pair = None;
    // The order's filled units: the least filled leg, over its ratio.
    let mut filled: Option<Decimal> = None;
    let mut fill_unknown = false;
    for l in &w.legs {
        let contracts = l.quantity.unwrap_or_default().normalize();
        let ratio = read::ratio(contracts, units);
        // Checked: both are the broker's numbers, and an overflow would panic in the reader.
        let done = l.filled(contracts, &order_id)?;
        fill_unknown |= done.is_none();
        let done = done.unwrap_or_default().max(Decimal::ZERO);
        let units_done = (done / Decimal::from(ratio)).normalize();
        filled = Some(filled.map_or(units_done, |f| f.min(units_done)));
        if asset_class == AssetClass::Option {
            let (symbol, contract) = read::occ(&l.symbol);
            legs.push(BrokerLeg {
                instrument: symbol,
                contract,
                action: leg_action_of(&l.action),
                ratio,
                quantity: contracts,
            });
        }
    }
    let (instrument, side, intent) = match asset_class {
        AssetClass::Option if legs.len() == 1 => (legs[0].instrument.clone(), side(first_action), None),
        AssetClass::Option => (w.underlying_symbol.trim().to_ascii_uppercase(), None, None),
        AssetClass::Crypto | AssetClass::Equity => {
            let symbol = first.map(|l| l.symbol.as_str()).unwrap_or_default();
            let instrument = match (asset_class, CryptoPair::parse(symbol)) {
                (AssetClass::Crypto, Some(p)) => {
                    let s = p.to_string();
                    pair = Some(p);
                    s
                }
                _ => symbol.trim().to_ascii_uppercase(),
            };
            // Buy to Open and Sell to Close are a long's; Sell to Open and Buy to Close a short's.
            let intent = first_action.map(|a| {
                Intent::new(a.is_open(), if a.is_open() == a.is_buy() { Direction::Long } else { Direction::Short })
            });
            (instrument, side(first_action), intent)
        }
    };
    let order_type = match w.order_type.as_str() {
        // A market order sized by an amount of money (`value`).
        "Market" | "Notional Market" => Some(OrderType::Market),
        "Limit" => Some(OrderType::Limit),
        _ => None,
    };
    let price_effect = match w.price_effect.as_str() {
        "Debit" => Some(PriceEffect::Debit),
        "Credit" => Some(PriceEffect::Credit),
        _ => None,
    };
    let duration = match w.time_in_force.as_str() {
        "Day" => Some(Duration::Day),
        "GTC" => Some(Duration::Gtc),
        _ => None,
    };
    let mut status = read::status_of(&w.status, STATUSES);
    // A replacement cancels the original, which then names its successor, or at least says it was edited (a
    // recorded list shows the original `Cancelled`, `"edited": true` and no successor). Read as plainly cancelled,
    // a refused cancel of it was taken as done and the CLOSE behind it went out beside the edited exit still working.
    let edited = matches!(w.edited, Some(serde_json::Value::Bool(true)));
    if status == OrderStatus::Cancelled && (w.replacing_order_id.is_some() || edited) {
        status = OrderStatus::Replaced;
    }
    // Legs that give neither remaining-quantity nor fills: a filled order filled everything and a rejected one
    // nothing, whatever its legs say. Read as unknown, a rejected order stayed in the bot's working orders for
    // good (a CLOSE then waited on a cancel the broker refuses) and a lookup hid its rejection. Any other order
    // is read (one such order does not make the whole list unreadable) with its status unknown, so that neither
    // a cancel nor a close is decided on a guess of what filled.
    let mut reason = w.reject_reason.filter(|s| !s.trim().is_empty());
    if fill_unknown {
        match status {
            OrderStatus::Filled => filled = Some(units),
            OrderStatus::Rejected => filled = Some(Decimal::ZERO),
            _ => {
                status = OrderStatus::Unknown;
                reason = Some(format!(
                    "{} order whose legs give neither remaining-quantity nor fills: what filled is unknown",
                    w.status
                ));
            }
        }
    }
    let created_ms = w.received_at.as_deref().and_then(crate::model::timestamp_ms);
    let o = BrokerOrder {
        extended_session: false,
        order_id,
        client_order_id: w.external_identifier.filter(|s| !s.trim().is_empty()),
        instrument,
        asset_class,
        pair,
        side,
        intent,
        order_type,
        limit_price: w.price.map(|p| p.abs().normalize()),
        price_effect: if w.price.is_some() { price_effect } else { None },
        duration,
        quantity: units,
        notional: None,
        filled_quantity: filled.unwrap_or_default(),
        status,
        broker_status: w.status,
        legs,
        created_at: w.received_at,
        created_ms,
        replaced_by: w.replacing_order_id,
        reason,
    };
    Ok(match count {
        Some(_) => o,
        None => read::without_count(o, w.value),
    })
}

impl AccountReads for Tastytrade {
    fn positions_request(&self, account_id: &str) -> Result<Request, OrderError> {
        Ok(read::get(format!("/accounts/{}/positions", common::account(NAME, account_id)?)))
    }

    /// Every order created or updated today in any status, and older ones still live.
    fn open_orders_request(&self, account_id: &str, _now_ms: i64) -> Result<Request, OrderError> {
        Ok(read::get(format!("/accounts/{}/orders/live", common::account(NAME, account_id)?)))
    }

    fn order_request(&self, account_id: &str, order_id: &str) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        Ok(read::get(format!("/accounts/{account}/orders/{}", common::order_id(NAME, order_id)?)))
    }

    /// The orders received from two minutes before the send (the clocks' skew) to three after it (the
    /// search needs a start), oldest first; ours carries our `external-identifier`.
    fn lookup_request(&self, account_id: &str, _client_order_id: &str, placed_ms: i64) -> Result<Lookup, OrderError> {
        let account = common::account(NAME, account_id)?;
        let from = read::window_start(placed_ms);
        let q = read::query(&[
            ("start-at", &read::utc(from, false)),
            ("end-at", &read::utc(from + read::ENTERED_WITHIN_MS, false)),
            ("sort", "Asc"),
            ("per-page", "100"),
            ("page-offset", "0"),
        ]);
        Ok(Lookup::List(read::get(format!("/accounts/{account}/orders{q}"))))
    }

    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError> {
        let (items, _) = data::<Items<WirePosition>>("positions", body)?;
        Ok(items.items.into_iter().filter_map(position).collect())
    }

    /// A search page with more pages behind it is not read as the whole list.
    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError> {
        let (items, pagination) = data::<Items<WireOrder>>("orders", body)?;
        if pagination.is_some_and(|p| p.page_offset + 1 < p.total_pages) {
            return Err(ReadError::Incomplete { broker: NAME, what: "orders" });
        }
        items.items.into_iter().map(order).collect()
    }

    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError> {
        order(data::<WireOrder>("order", body)?.0)
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use crate::broker::{Body, Found};

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../tests/fixtures/brokers/tastytrade/", $name)).as_slice()
        };
    }

    const OUR_ID: &str = "swh-976df1f58b32b322c91658ec5953";

    fn ms(iso: &str) -> i64 {
        crate::model::timestamp_ms(iso).unwrap()
    }

    #[test]
    fn requests() {
        let t = Tastytrade;
        let r = t.positions_request("5WT00001").unwrap();
        assert_eq!((r.method, r.path.as_str(), &r.body), (Method::Get, "/accounts/5WT00001/positions", &Body::Empty));
        assert_eq!(t.open_orders_request("5WT00001", 0).unwrap().path, "/accounts/5WT00001/orders/live");
        assert_eq!(t.order_request("5WT00001", "451203877").unwrap().path, "/accounts/5WT00001/orders/451203877");
        let lookup = t.lookup_request("5WT00001", OUR_ID, ms("2026-03-03T14:31:05Z")).unwrap();
        assert!(matches!(lookup, Lookup::List(_)));
        assert_eq!(
            lookup.request().path,
            "/accounts/5WT00001/orders?start-at=2026-03-03T14:29:00Z&end-at=2026-03-03T14:34:00Z&sort=Asc&per-page=100&page-offset=0"
        );
    }

    #[test]
    fn positions_unsigned_with_a_direction() {
        let p = Tastytrade.parse_positions(fixture!("positions.json")).unwrap();
        let rows: Vec<_> =
            p.iter().map(|p| (p.instrument.as_str(), p.asset_class, p.direction, p.quantity.to_string())).collect();
        assert_eq!(
            rows,
            [
                ("AAPL", AssetClass::Equity, Direction::Long, "10".to_string()),
                ("TSLA", AssetClass::Equity, Direction::Short, "15".to_string()),
                ("SPXW260320C05800000", AssetClass::Option, Direction::Long, "2".to_string()),
                ("SPXW260320C05850000", AssetClass::Option, Direction::Short, "2".to_string()),
                ("BTC/USD", AssetClass::Crypto, Direction::Long, "0.05".to_string()),
            ]
        );
        assert_eq!(p[3].average_price.unwrap().to_string(), "13");
        assert!(Tastytrade.parse_positions(fixture!("positions_none.json")).unwrap().is_empty());
        let zero = br#"{"data":{"items":[{"symbol":"F","instrument-type":"Equity","quantity":"0","quantity-direction":"Zero"}]}}"#;
        assert!(Tastytrade.parse_positions(zero).unwrap().is_empty());
        assert_eq!(
            Tastytrade.parse_positions(fixture!("auth_error.json")),
            Err(ReadError::BrokerError {
                broker: "Tastytrade",
                what: "positions",
                message: "Token is invalid or expired".into()
            })
        );
    }

    #[test]
    fn live_orders() {
        let o = Tastytrade.parse_orders(fixture!("orders_open.json")).unwrap();
        let rows: Vec<_> = o.iter().map(|o| (o.order_id.as_str(), o.status, o.broker_status.as_str())).collect();
        assert_eq!(
            rows,
            [
                ("451203877", OrderStatus::Working, "Live"),
                ("451204010", OrderStatus::Working, "Received"),
                ("451205120", OrderStatus::Cancelled, "Cancelled"),
                ("451203311", OrderStatus::Filled, "Filled"),
                ("451190442", OrderStatus::Working, "Live"),
            ]
        );
        let entry = &o[0];
        assert_eq!(entry.client_order_id.as_deref(), Some(OUR_ID));
        assert_eq!((entry.side, entry.intent), (Some(OrderSide::Buy), Some(Intent::OpenLong)));
        assert_eq!(
            (entry.limit_price.unwrap().to_string(), entry.price_effect, entry.quantity.to_string()),
            ("185".into(), Some(PriceEffect::Debit), "10".into())
        );
        assert_eq!(entry.created_ms, Some(ms("2026-03-03T14:31:05.210Z")));
        let spread = &o[1];
        assert_eq!((spread.instrument.as_str(), spread.asset_class, spread.side), ("SPX", AssetClass::Option, None));
        let legs: Vec<_> = spread.legs.iter().map(|l| (l.instrument.as_str(), l.action, l.ratio)).collect();
        assert_eq!(
            legs,
            [
                ("SPXW260320C05800000", Some(LegAction::BuyToOpen), 1),
                ("SPXW260320C05850000", Some(LegAction::SellToOpen), 1)
            ]
        );
        assert_eq!(o[2].intent, Some(Intent::CloseLong));
        assert_eq!((o[2].price_effect, o[2].client_order_id.as_deref()), (Some(PriceEffect::Credit), None));
        assert_eq!(
            (o[3].order_type, o[3].limit_price, o[3].filled_quantity.to_string()),
            (Some(OrderType::Market), None, "10".into())
        );
        // No partially-filled status: Live with 10 of 25 filled on its leg.
        let exit = &o[4];
        assert_eq!((exit.intent, exit.duration), (Some(Intent::CloseShort), Some(Duration::Gtc)));
        assert_eq!((exit.quantity.to_string(), exit.filled_quantity.to_string()), ("25".into(), "10".into()));
    }

    #[test]
    fn one_order_in_every_final_state() {
        let read = |body: &[u8]| Tastytrade.parse_order(body).unwrap();
        assert_eq!(read(fixture!("order_by_id.json")).status, OrderStatus::Working);
        let filled = read(fixture!("order_filled.json"));
        assert_eq!((filled.status, filled.filled_quantity.to_string()), (OrderStatus::Filled, "10".into()));
        let cancelled = read(fixture!("order_cancelled.json"));
        assert_eq!((cancelled.status, cancelled.filled_quantity.to_string()), (OrderStatus::Cancelled, "10".into()));
        let rejected = read(fixture!("order_rejected.json"));
        assert_eq!(
            (rejected.status, rejected.reason.as_deref()),
            (OrderStatus::Rejected, Some("Insufficient buying power"))
        );
        assert_eq!(rejected.intent, Some(Intent::OpenShort));
        let replaced = read(br#"{"data":{"id":5,"status":"Cancelled","replacing-order-id":6,"size":1,
            "legs":[{"instrument-type":"Equity","symbol":"AAPL","quantity":1,"remaining-quantity":1,"action":"Buy to Open"}]}}"#);
        assert_eq!((replaced.status, replaced.replaced_by.as_deref()), (OrderStatus::Replaced, Some("6")));
        // As tasty-go's recorded list shows an edited original: cancelled, `edited`, no successor named.
        let edited = |flag: &str| {
            read(
                format!(
                    r#"{{"data":{{"id":68680,"status":"Cancelled","edited":{flag},"size":1,"price":"185.45",
                "legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":1,"remaining-quantity":1,
                "action":"Sell to Close","fills":[]}}]}}}}"#
                )
                .as_bytes(),
            )
            .status
        };
        assert_eq!(edited("true"), OrderStatus::Replaced, "an edited original is replaced, not plainly cancelled");
        assert_eq!(edited("false"), OrderStatus::Cancelled);
        assert_eq!(edited("null"), OrderStatus::Cancelled);
        let removed = read(br#"{"data":{"id":7,"status":"Removed","size":1,"legs":[]}}"#);
        assert_eq!(removed.status, OrderStatus::Unknown, "an undocumented status is never final");
    }

    /// tastyware's `Leg` makes `remaining-quantity` optional: a leg without it was read as wholly filled, so a
    /// cancelled order read back as filled and the close held behind its cancel failed. What filled is now the
    /// sum of the leg's fills; with neither field the order's status is unknown, never a guess, and a list
    /// holding it is still read.
    #[test]
    fn a_leg_without_its_remaining_quantity_reads_its_fills() {
        let leg = |extra: &str| {
            format!(
                r#"{{"data":{{"id":451190442,"status":"Cancelled","size":10,"underlying-symbol":"AAPL",
                "legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":10,"action":"Buy to Open"{extra}}}]}}}}"#
            )
        };
        let filled = |extra: &str| Tastytrade.parse_order(leg(extra).as_bytes()).map(|o| (o.status, o.filled_quantity));
        assert_eq!(filled(r#","fills":[]"#), Ok((OrderStatus::Cancelled, Decimal::ZERO)));
        assert_eq!(filled(r#","remaining-quantity":null,"fills":[]"#), Ok((OrderStatus::Cancelled, Decimal::ZERO)));
        let two = r#","fills":[{"fill-id":"a","quantity":"3","fill-price":"185.0"},{"fill-id":"b","quantity":1}]"#;
        assert_eq!(filled(two), Ok((OrderStatus::Cancelled, Decimal::from(4))));
        assert_eq!(filled(r#","remaining-quantity":6"#), Ok((OrderStatus::Cancelled, Decimal::from(4))));
        // Neither: that order is read with an unknown status, and a list holding it is still read.
        let unknown = Tastytrade.parse_order(leg("").as_bytes()).unwrap();
        assert_eq!((unknown.status, unknown.filled_quantity), (OrderStatus::Unknown, Decimal::ZERO));
        assert!(unknown.reason.as_deref().unwrap_or_default().contains("what filled is unknown"), "{unknown:?}");
        let mut list: serde_json::Value =
            serde_json::from_slice(include_bytes!("../../tests/fixtures/brokers/tastytrade/orders_open.json")).unwrap();
        let first = list["data"]["items"][0]["legs"][0].as_object_mut().unwrap();
        first.remove("remaining-quantity");
        first.remove("fills");
        let orders = Tastytrade.parse_orders(&serde_json::to_vec(&list).unwrap()).unwrap();
        assert_eq!(orders.iter().filter(|o| o.status == OrderStatus::Unknown).count(), 1, "{orders:?}");
        assert!(orders.len() > 1);
        // A rejected order filled nothing and a filled one everything, whatever the legs leave out: read as
        // unknown, a rejected order stayed among the bot's working orders for good and a lookup hid the rejection.
        let rejected = leg("")
            .replace(r#""status":"Cancelled""#, r#""status":"Rejected","reject-reason":"Insufficient buying power""#);
        let o = Tastytrade.parse_order(rejected.as_bytes()).unwrap();
        assert_eq!((o.status, o.filled_quantity), (OrderStatus::Rejected, Decimal::ZERO));
        assert_eq!(o.reason.as_deref(), Some("Insufficient buying power"));
        let o = Tastytrade.parse_order(leg("").replace("Cancelled", "Filled").as_bytes()).unwrap();
        assert_eq!((o.status, o.filled_quantity), (OrderStatus::Filled, Decimal::from(10)));
        let o = Tastytrade.parse_order(leg("").replace("Cancelled", "Expired").as_bytes()).unwrap();
        assert_eq!(o.status, OrderStatus::Unknown, "what filled before it expired is unknown");
    }

    /// `size` is optional in Tastytrade's order model. Without it the units were the first leg's quantity: a ratio
    /// spread listing its 2-lot leg first was two units of legs at ratio 1 each (the 1-lot leg's half dropped), and
    /// a MODIFY sent its legs at those ratios. The units are the legs' greatest common divisor.
    #[test]
    fn an_order_without_size_counts_its_units_from_all_legs() {
        let order = |q1: u32, q2: u32| {
            format!(
                r#"{{"data":{{"id":7,"status":"Live","underlying-symbol":"SPX","order-type":"Limit","price":"1.0",
                "price-effect":"Debit","legs":[
                {{"instrument-type":"Equity Option","symbol":"SPXW  260320C05850000","quantity":{q1},"action":"Sell to Open","remaining-quantity":{q1}}},
                {{"instrument-type":"Equity Option","symbol":"SPXW  260320C05800000","quantity":{q2},"action":"Buy to Open","remaining-quantity":{q2}}}]}}}}"#
            )
        };
        let read = |q1, q2| {
            let o = Tastytrade.parse_order(order(q1, q2).as_bytes()).unwrap();
            (o.quantity.to_string(), o.legs.iter().map(|l| l.ratio).collect::<Vec<_>>())
        };
        assert_eq!(read(2, 1), ("1".into(), vec![2, 1]), "a 1x2 ratio spread listing its 2-lot leg first");
        assert_eq!(read(4, 2), ("2".into(), vec![2, 1]));
        assert_eq!(read(3, 3), ("3".into(), vec![1, 1]));
    }

    #[test]
    fn finding_ours_by_external_identifier() {
        let placed = ms("2026-03-03T14:31:05Z");
        let lookup = Tastytrade.lookup_request("5WT00001", OUR_ID, placed).unwrap();
        let find = |id: &str, body: &[u8]| Tastytrade.find_ours(&lookup, 200, body, id, None, placed);
        match find(OUR_ID, fixture!("order_by_client_id.json")) {
            Found::Found(o) => assert_eq!(o.order_id, "451203877"),
            other => panic!("{other:?}"),
        }
        assert_eq!(find("swh-00000000000000000000000000ff", fixture!("order_by_client_id.json")), Found::NotFound);
        // Tastytrade does not refuse a repeated external-identifier: two orders carry ours.
        let twice = String::from_utf8_lossy(fixture!("order_by_client_id.json"))
            .replace("swh-04fbc6d5fe48b3ef37fbe17ee386", OUR_ID);
        assert_eq!(find(OUR_ID, twice.as_bytes()), Found::Ambiguous(2));
        let more = String::from_utf8_lossy(fixture!("order_by_client_id.json"))
            .replace("\"total-pages\": 1", "\"total-pages\": 2");
        assert!(matches!(find("swh-none", more.as_bytes()), Found::Unreadable(m) if m.contains("first page")));
    }

    #[test]
    fn write_answers_from_the_fixtures() {
        let read = |status, body: &[u8]| Tastytrade.read_answer(RequestKind::Place, status, None, body);
        assert_eq!(read(201, fixture!("place_accepted.json")), Answer::Accepted { order_id: Some("451203877".into()) });
        assert!(
            matches!(read(400, fixture!("place_refused.json")), Answer::Refused { message } if message.contains("Request validation failed"))
        );
        assert!(
            matches!(read(422, fixture!("place_refused_preflight.json")), Answer::Refused { message } if message.contains("buying power"))
        );
    }

    /// A Notional Market order (a trader's $500 of AAPL: `value`, legs without a quantity) was read as an order of
    /// 0 shares. It is read as a market order of that amount, how many shares not known until it fills: its
    /// status unknown while it works. An order stating no size at all is read so too, with no amount.
    #[test]
    fn an_order_sized_by_value_is_read_by_its_amount_never_as_zero_shares() {
        let read = |status: &str, value: &str| {
            let body = format!(
                r#"{{"data":{{"id":77,"time-in-force":"Day","order-type":"Notional Market","underlying-symbol":"AAPL",
                "status":"{status}",{value}"legs":[{{"instrument-type":"Equity","symbol":"AAPL","action":"Buy to Open",
                "fills":[]}}]}}}}"#
            );
            Tastytrade.parse_order(body.as_bytes()).unwrap()
        };
        let live = read("Live", r#""value":"500.0","value-effect":"Debit","#);
        assert_eq!((live.status, live.broker_status.as_str()), (OrderStatus::Unknown, "Live"));
        assert_eq!((live.quantity, live.notional), (Decimal::ZERO, Some(Decimal::from(500))));
        assert_eq!((live.order_type, live.side), (Some(OrderType::Market), Some(OrderSide::Buy)));
        let reason = live.reason.as_deref().unwrap_or_default();
        assert!(reason.contains("500") && reason.contains("not known until it fills"), "{reason}");
        let cancelled = read("Cancelled", r#""value":"500.0","value-effect":"Debit","#);
        assert_eq!((cancelled.status, cancelled.quantity), (OrderStatus::Cancelled, Decimal::ZERO));
        let no_size = read("Live", "");
        assert_eq!((no_size.status, no_size.quantity, no_size.notional), (OrderStatus::Unknown, Decimal::ZERO, None));
    }

    /// An envelope whose data names no `items` says nothing of the account; read as an empty list,
    /// the sync took the account for flat with no working orders.
    #[test]
    fn data_without_items_is_not_an_empty_account() {
        let t = Tastytrade;
        assert!(t.parse_positions(br#"{"data":{},"context":"/accounts/5WT00001/positions"}"#).is_err(), "read as flat");
        assert!(
            t.parse_orders(br#"{"data":{},"context":"/accounts/5WT00001/orders/live"}"#).is_err(),
            "read as no orders"
        );
        // A real empty list stays empty.
        assert!(t.parse_positions(br#"{"data":{"items":[]}}"#).unwrap().is_empty());
    }
}
