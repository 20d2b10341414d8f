//! Tradier brokerage API: form-encoded bodies at `/v1/accounts/{account}/orders`.
//!
//! Equities say short and cover outright (`sell_short`, `buy_to_cover`). An option's
//! `symbol` is its underlying (`SPX`, never the `SPXW` root) and `option_symbol` the
//! unpadded OCC symbol. A multi-leg order states debit or credit in its `type` and sends a
//! positive `price`. Durations are day and gtc only. A change (`PUT`) keeps the order id
//! but can move only type, duration and price — never the quantity.
//!
//! A new order carries our client order id as its `tag` (letters, digits and `-` only:
//! any other character is sent as `-`). Tradier does not refuse a repeated tag, so it does
//! not make a resend safe by itself; it is how our order is found again after a lost
//! answer (the order list with `includeTags=true`, matched by tag).

use super::answer::{self, Answer};
use super::common;
use super::form::Form;
use super::{Body, Broker, Method, Request, FORM};
use crate::model::RequestKind;
use crate::model::{underlying_of, AssetClass, Duration, Intent, LegAction, Order, OrderError, OrderType, PriceEffect};

/// Tradier's XML answers (its default format): `<order><id>…</id>` or `<errors><error>…`.
fn read_xml(status: u16, body: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(body);
    let inner = |tag: &str| -> Vec<String> {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        text.split(open.as_str())
            .skip(1)
            .filter_map(|rest| rest.split_once(close.as_str()).map(|(v, _)| v.trim().to_string()))
            .filter(|v| !v.is_empty())
            .collect()
    };
    let errors = if text.contains("<errors>") { inner("error") } else { Vec::new() };
    if !errors.is_empty() {
        let message = format!("HTTP {status}: {}", errors.join("; "));
        return if status >= 500 { Answer::Uncertain { message } } else { Answer::Refused { message } };
    }
    if answer::success(status) {
        return match text.contains("<order>").then(|| inner("id")).and_then(|ids| ids.into_iter().next()) {
            Some(id) => Answer::Accepted { order_id: Some(id) },
            // A 200 can carry a refusal, so an answer that says neither cannot be trusted.
            None => {
                Answer::Uncertain { message: format!("HTTP {status}: unreadable answer: {}", answer::quoted(body)) }
            }
        };
    }
    answer::failed(status, body, |_| None)
}

/// Tradier's formatter.
pub struct Tradier;

const NAME: &str = "Tradier";

impl Broker for Tradier {
    fn name(&self) -> &'static str {
        "tradier"
    }

    fn offers(&self, asset_class: AssetClass) -> bool {
        asset_class != AssetClass::Crypto
    }

    /// A change is addressed to the same order id and keeps it.
    fn replace_keeps_id(&self) -> bool {
        true
    }

    /// Tradier's change-order takes type, duration, price and stop only.
    fn replace_changes_quantity(&self) -> bool {
        false
    }

    /// Tradier's `tag` is a label it does not refuse twice; see the module note.
    fn accepts_client_order_id(&self) -> bool {
        false
    }

    fn names_account(&self) -> bool {
        true
    }

    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let quantity = common::quantity(NAME, order, false, 0)?;
        let duration = duration(order)?;
        let mut f = Form::new();
        match order.asset_class {
            AssetClass::Crypto => return Err(not_offered()),
            AssetClass::Equity => {
                let limit = common::limit_price(NAME, order)?;
                f.push("class", "equity")
                    .push("symbol", common::symbol(NAME, order)?)
                    .push("side", equity_side(order.intent))
                    .push("quantity", &quantity.to_string())
                    .push("type", single_type(order.order_type))
                    .push("duration", duration);
                if let Some(p) = limit {
                    f.push("price", &common::digits(p));
                }
            }
            AssetClass::Option => {
                let legs = common::option_legs(NAME, order)?;
                let underlying = underlying(order)?;
                let (kind, price) = price_terms(order)?;
                if let [leg] = legs {
                    f.push("class", "option")
                        .push("symbol", &underlying)
                        .push("option_symbol", &leg.contract.occ_unpadded())
                        .push("side", leg_side(leg.action))
                        .push("quantity", &common::leg_quantity(quantity, leg).to_string())
                        .push("type", kind)
                        .push("duration", duration);
                    if let Some(p) = price {
                        f.push("price", &p);
                    }
                } else {
                    f.push("class", "multileg")
                        .push("symbol", &underlying)
                        .push("type", kind)
                        .push("duration", duration);
                    if let Some(p) = price {
                        f.push("price", &p);
                    }
                    for (i, leg) in legs.iter().enumerate() {
                        f.push(&format!("option_symbol[{i}]"), &leg.contract.occ_unpadded())
                            .push(&format!("side[{i}]"), leg_side(leg.action))
                            .push(&format!("quantity[{i}]"), &common::leg_quantity(quantity, leg).to_string());
                    }
                }
            }
        }
        let tag = tag(&order.client_order_id);
        if !tag.is_empty() {
            f.push("tag", &tag);
        }
        Ok(Request {
            method: Method::Post,
            path: compact_str::format_compact!("/v1/accounts/{account}/orders"),
            content_type: Some(FORM),
            body: Body::Form(f.finish()),
        })
    }

    /// `PUT` with `type`, `duration` and `price` only ("send only the parameters you
    /// would like to adjust"); Tradier cannot change a working order's quantity.
    fn replace(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        if order.asset_class == AssetClass::Crypto {
            return Err(not_offered());
        }
        if quantity_changed {
            return Err(OrderError::BrokerRefuses {
                broker: NAME,
                reason: "Tradier cannot change an order's quantity in place; cancel it and send a new entry".into(),
            });
        }
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        // Not sent, but a quantity Tradier could never have taken means a wrong order.
        common::quantity(NAME, order, false, 0)?;
        let duration = duration(order)?;
        let (kind, price) = match order.asset_class {
            AssetClass::Option => {
                common::option_legs(NAME, order)?;
                price_terms(order)?
            }
            _ => (single_type(order.order_type), common::limit_price(NAME, order)?.map(common::digits)),
        };
        let mut f = Form::new();
        f.push("type", kind).push("duration", duration);
        if let Some(p) = price {
            f.push("price", &p);
        }
        Ok(Request {
            method: Method::Put,
            path: compact_str::format_compact!("/v1/accounts/{account}/orders/{id}"),
            content_type: Some(FORM),
            body: Body::Form(f.finish()),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: compact_str::format_compact!("/v1/accounts/{account}/orders/{id}"),
            content_type: None,
            body: Body::Empty,
        })
    }

    /// Tradier answers `{"order":{"id":…,"status":"ok"}}`, and business errors as
    /// `{"errors":{"error":[…]}}` inside an HTTP 200, which is a refusal. Without
    /// `Accept: application/json` it answers the same in XML, which is read too.
    fn read_answer(&self, _kind: RequestKind, status: u16, _location: Option<&str>, body: &[u8]) -> Answer {
        let Some(v) = answer::json(body) else {
            return read_xml(status, body);
        };
        if answer::success(status) {
            if let Some(message) = answer::text_at(&v, &["errors", "error"]) {
                return Answer::Refused { message: format!("HTTP {status}: {message}") };
            }
            // As in XML: a 200 can carry a refusal, so one that names no order and no error cannot be trusted (it
            // was taken for an order placed with no id: a refusal of an unknown shape lost the order unseen).
            return match answer::id_at(&v, &["order", "id"]) {
                Some(id) => Answer::Accepted { order_id: Some(id) },
                None => Answer::Uncertain {
                    message: format!("HTTP {status}: an answer naming no order: {}", answer::quoted(body)),
                },
            };
        }
        answer::failed(status, body, |v| {
            answer::text_at(v, &["errors", "error"]).or_else(|| answer::text_at(v, &["fault", "faultstring"]))
        })
    }
}

/// Tradier's longest `tag`.
const MAX_TAG: usize = 255;

/// The client order id as a `tag`: letters, digits and `-`, at most 255 characters. Our
/// ids (`swh-` and hex) pass unchanged.
fn tag(client_order_id: &str) -> String {
    client_order_id
        .trim()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' })
        .take(MAX_TAG)
        .collect()
}

fn not_offered() -> OrderError {
    OrderError::BrokerDoesNotOffer { broker: NAME, asset_class: AssetClass::Crypto }
}

/// Tradier's durations are day, gtc, pre and post: there is no fill-or-kill.
///
/// Tradier refuses a market order marked gtc (`MarketOrderIsGtc`: "only day orders are
/// allowed") and a short sale of a stock marked gtc (`ShortOrderIsGtc`), after answering 200.
/// A market order goes out as a day order, which is what a market order does (the same
/// order at the next open when sent after the close). A gtc short sale is refused here with
/// the reason: sent as a day order it would expire at the close, which the sender did not ask for.
fn duration(order: &Order) -> Result<&'static str, OrderError> {
    match order.duration {
        Duration::Day => Ok("day"),
        Duration::Gtc if order.order_type == OrderType::Market => Ok("day"),
        Duration::Gtc if order.asset_class == AssetClass::Equity && order.intent == Intent::OpenShort => {
            Err(common::unsupported_tif(NAME, "short sale", Duration::Gtc, "DAY"))
        }
        Duration::Gtc => Ok("gtc"),
        d => Err(common::unsupported_tif(NAME, order.asset_class.as_str(), d, "DAY or GTC")),
    }
}

fn single_type(t: OrderType) -> &'static str {
    match t {
        OrderType::Market => "market",
        OrderType::Limit => "limit",
    }
}

fn equity_side(i: Intent) -> &'static str {
    match i {
        Intent::OpenLong => "buy",
        Intent::CloseLong => "sell",
        Intent::OpenShort => "sell_short",
        Intent::CloseShort => "buy_to_cover",
    }
}

fn leg_side(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "buy_to_open",
        LegAction::BuyToClose => "buy_to_close",
        LegAction::SellToOpen => "sell_to_open",
        LegAction::SellToClose => "sell_to_close",
    }
}

/// An option order's `type` and `price`. A single leg is market or limit at its premium;
/// a spread is market, or debit/credit at a positive net, or even at a zero net (Tradier
/// wants a price only for debit and credit).
fn price_terms(order: &Order) -> Result<(&'static str, Option<String>), OrderError> {
    let limit = common::limit_price(NAME, order)?;
    let single = order.legs.len() == 1;
    Ok(match limit {
        None => ("market", None),
        Some(p) if single => {
            common::price_effect(NAME, order)?;
            ("limit", Some(common::digits(p)))
        }
        Some(p) if p.is_zero() => ("even", None),
        Some(p) => match common::price_effect(NAME, order)? {
            PriceEffect::Debit => ("debit", Some(common::digits(p))),
            PriceEffect::Credit => ("credit", Some(common::digits(p))),
        },
    })
}

/// The underlying for `symbol`: the order's, with the SPXW root mapped back to SPX. Every
/// leg must be on that one underlying, as a multi-leg order at Tradier has one `symbol`.
fn underlying(order: &Order) -> Result<String, OrderError> {
    let base = if order.symbol.trim().is_empty() {
        order.legs.first().map(|l| l.contract.root.as_str()).unwrap_or_default()
    } else {
        order.symbol.trim()
    };
    let u = underlying_of(base).to_ascii_uppercase();
    if let Some(l) = order.legs.iter().find(|l| !underlying_of(&l.contract.root).eq_ignore_ascii_case(&u)) {
        return Err(OrderError::BrokerRefuses {
            broker: NAME,
            reason: format!(
                "the leg {} is not on {u}; a Tradier option order trades one underlying",
                l.contract.occ_unpadded()
            ),
        });
    }
    Ok(u)
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from Tradier's brokerage API reference (orders; the errors overview, which
    // documents errors inside an HTTP 200) and the Apigee fault on a bad token.
    const PLACED: &str = r#"{"order":{"id":257459,"status":"ok","partner_id":"c4998eb7-06e8-4820-a7ab-55d9760065fb"}}"#;
    const ERRORS: &str =
        r#"{"errors":{"error":["Backoffice rejected override of the order.","DayTradingBuyingPowerExceeded"]}}"#;
    const ONE_ERROR: &str = r#"{"errors":{"error":"Invalid parameter, price: must be greater than 0"}}"#;
    const FAULT: &str = r#"{"fault":{"faultstring":"Invalid Access Token","detail":{"errorcode":"keymanagement.service.invalid_access_token"}}}"#;

    fn read(status: u16, body: &str) -> Answer {
        Tradier.read_answer(RequestKind::Place, status, None, body.as_bytes())
    }

    #[test]
    fn reads_tradier_answers() {
        assert_eq!(read(200, PLACED), Answer::Accepted { order_id: Some("257459".into()) });
        assert_eq!(
            read(200, ERRORS),
            Answer::Refused {
                message: "HTTP 200: Backoffice rejected override of the order.; DayTradingBuyingPowerExceeded".into()
            }
        );
        assert!(matches!(read(200, ONE_ERROR), Answer::Refused { message } if message.contains("greater than 0")));
        assert_eq!(read(401, FAULT), Answer::Refused { message: "HTTP 401: Invalid Access Token".into() });
        assert!(
            matches!(read(400, "Invalid Parameter: duration"), Answer::Refused { message } if message.contains("duration"))
        );
        assert!(matches!(read(503, ""), Answer::Uncertain { .. }));
        assert_eq!(
            read(200, "<order><id>257459</id><status>ok</status></order>"),
            Answer::Accepted { order_id: Some("257459".into()) }
        );
        assert!(
            matches!(read(200, "<errors><error>Account not found</error></errors>"), Answer::Refused { message } if message.contains("Account not found"))
        );
        assert!(matches!(read(200, "garbled"), Answer::Uncertain { .. }), "a 200 Tradier answer may hide errors");
    }
}

// ----- Reading the account back -----
//
// Tradier's JSON changes shape with the count: a list of one is an object, an empty list
// is the string "null" (positions, orders, a spread's legs and errors alike); errors come
// inside an HTTP 200. Numbers are JSON numbers with eight decimals, read from their digits.
// Positions are signed and carry no asset class (an OCC-shaped symbol is an option). Our
// order is found in the order list (with `includeTags=true`) by its tag.

use super::read::{self, AccountReads, Found, Lookup, TypeWord};
use crate::decimal::Decimal;
use crate::model::{
    eastern_date, BrokerLeg, BrokerOrder, BrokerPosition, Direction, OrderSide, OrderStatus, ReadError,
};
use serde::Deserialize;

/// Tradier's status words (`submitted` is in Tradier's SDK enum; `error` is read as a
/// rejection).
const STATUSES: &[(&str, OrderStatus)] = &[
    ("open", OrderStatus::Working),
    ("partially_filled", OrderStatus::Working),
    ("pending", OrderStatus::Working),
    ("submitted", OrderStatus::Working),
    ("filled", OrderStatus::Filled),
    ("canceled", OrderStatus::Cancelled),
    ("expired", OrderStatus::Expired),
    ("rejected", OrderStatus::Rejected),
    ("error", OrderStatus::Rejected),
];

/// The most orders one page of the order list holds: asked for, since Tradier's default
/// page (25) is easily outgrown by one day's orders.
const PAGE: &str = "100";

#[derive(Deserialize)]
struct Errors {
    #[serde(default, deserialize_with = "read::strings")]
    error: Vec<String>,
}

#[derive(Deserialize)]
struct PositionsAnswer {
    /// Missing is not flat: Tradier writes an empty account as `"positions": "null"`, never by leaving the key out.
    #[serde(default, deserialize_with = "read::named_one_or_many")]
    positions: Option<Vec<PositionList>>,
    #[serde(default)]
    errors: Option<Errors>,
}

#[derive(Deserialize)]
struct PositionList {
    #[serde(default, deserialize_with = "read::one_or_many")]
    position: Vec<WirePosition>,
}

#[derive(Deserialize)]
struct WirePosition {
    #[serde(deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    cost_basis: Option<Decimal>,
}

#[derive(Deserialize)]
struct OrdersAnswer {
    /// Missing is not "no orders": Tradier writes none as `"orders": "null"`, never by leaving the key out.
    #[serde(default, deserialize_with = "read::named_one_or_many")]
    orders: Option<Vec<OrderList>>,
    #[serde(default)]
    errors: Option<Errors>,
}

#[derive(Deserialize)]
struct OrderList {
    #[serde(default, deserialize_with = "read::one_or_many")]
    order: Vec<WireOrder>,
}

#[derive(Deserialize)]
struct OrderAnswer {
    #[serde(default)]
    order: Option<WireOrder>,
    #[serde(default)]
    errors: Option<Errors>,
}

#[derive(Deserialize)]
struct WireOrder {
    #[serde(deserialize_with = "read::id_opt")]
    id: Option<String>,
    #[serde(default, rename = "type", deserialize_with = "read::text")]
    order_type: String,
    #[serde(default, deserialize_with = "read::text")]
    symbol: String,
    #[serde(default, deserialize_with = "read::text")]
    option_symbol: String,
    #[serde(default, deserialize_with = "read::text")]
    side: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    quantity: Option<Decimal>,
    #[serde(default, deserialize_with = "read::text")]
    status: String,
    #[serde(default, deserialize_with = "read::text")]
    duration: String,
    #[serde(default, deserialize_with = "read::dec_opt")]
    price: Option<Decimal>,
    #[serde(default, deserialize_with = "read::dec_opt")]
    exec_quantity: Option<Decimal>,
    #[serde(default)]
    create_date: Option<String>,
    #[serde(default, deserialize_with = "read::text")]
    class: String,
    #[serde(default)]
    tag: Option<String>,
    #[serde(default)]
    reason_description: Option<String>,
    #[serde(default, deserialize_with = "read::one_or_many")]
    leg: Vec<WireOrder>,
}

/// A JSON body, or a message saying why not (Tradier answers XML without
/// `Accept: application/json`).
fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ReadError> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'<') {
        return Err(ReadError::Unreadable {
            broker: NAME,
            detail: "the answer is XML; reads must ask for JSON (Accept: application/json)".into(),
        });
    }
    read::parse(NAME, body)
}

/// An answer (`{}`, an Apigee `fault` in a 200) that names neither the list asked for nor an error: it says
/// nothing of the account, so the read fails and the last known state stands.
fn unnamed(what: &str) -> ReadError {
    ReadError::Unreadable { broker: NAME, detail: format!("the answer names no {what}") }
}

fn refused(what: &'static str, errors: Option<Errors>) -> Result<(), ReadError> {
    match errors {
        Some(e) if !e.error.is_empty() => {
            Err(ReadError::BrokerError { broker: NAME, what, message: e.error.join("; ") })
        }
        _ => Ok(()),
    }
}

fn position(w: WirePosition) -> Option<BrokerPosition> {
    let qty = w.quantity?;
    if qty.is_zero() {
        return None;
    }
    let (instrument, contract) = read::occ(&w.symbol);
    let asset_class = if contract.is_some() { AssetClass::Option } else { AssetClass::Equity };
    // cost_basis is the whole cost; whether an option's includes the ×100 is not documented.
    let average_price = match (asset_class, w.cost_basis) {
        // Checked: a quotient out of range (a tiny quantity) would panic; no average is then known.
        (AssetClass::Equity, Some(c)) => c.checked_div(qty).map(|p| p.abs().normalize()),
        _ => None,
    };
    Some(BrokerPosition {
        instrument,
        asset_class,
        contract,
        pair: None,
        direction: if qty.is_sign_negative() { Direction::Short } else { Direction::Long },
        quantity: qty.abs().normalize(),
        average_price,
    })
}

fn leg_action_of(side: &str) -> Option<LegAction> {
    match side {
        "buy_to_open" => Some(LegAction::BuyToOpen),
        "buy_to_close" => Some(LegAction::BuyToClose),
        "sell_to_open" => Some(LegAction::SellToOpen),
        "sell_to_close" => Some(LegAction::SellToClose),
        _ => None,
    }
}

fn equity_intent_of(side: &str) -> Option<Intent> {
    match side {
        "buy" => Some(Intent::OpenLong),
        "sell" => Some(Intent::CloseLong),
        "sell_short" => Some(Intent::OpenShort),
        "buy_to_cover" => Some(Intent::CloseShort),
        _ => None,
    }
}

fn side_of(side: &str) -> Option<OrderSide> {
    if side.starts_with("buy") {
        Some(OrderSide::Buy)
    } else if side.starts_with("sell") {
        Some(OrderSide::Sell)
    } else {
        None
    }
}

/// Whether an order of this `class` is a contingent group (OCO, OTO, OTOCO): its `leg` entries are orders of their
/// own, each with its id, status, type and side, not a spread's legs.
fn contingent(class: &str) -> bool {
    matches!(class, "oco" | "oto" | "otoco")
}

/// The orders of a list answer: a contingent group stands for its legs, each an order of its own (taking the
/// group's duration, entry time and tag where it gives none); any other order for itself. Read as one option order,
/// an OCO's working take-profit on shares was missing from the state, and a CLOSE sold beside it instead of
/// cancelling it first. A leg listed at the top level too is read once.
fn flatten(wire: Vec<WireOrder>) -> Vec<WireOrder> {
    let mut out = Vec::with_capacity(wire.len());
    let mut seen: std::collections::HashSet<String> = wire.iter().filter_map(|w| w.id.clone()).collect();
    for mut w in wire {
        let group = if contingent(&w.class) && !w.leg.is_empty() { std::mem::take(&mut w.leg) } else { Vec::new() };
        if group.is_empty() {
            out.push(w);
            continue;
        }
        for mut l in group {
            if l.id.as_ref().is_some_and(|id| !seen.insert(id.clone())) {
                continue;
            }
            if l.duration.is_empty() {
                l.duration.clone_from(&w.duration);
            }
            l.create_date = l.create_date.or_else(|| w.create_date.clone());
            // The tag is the group's: its legs carry it too, so a lookup by it finds the group's legs (several:
            // never "not there", which would send it again).
            l.tag = l.tag.filter(|t| !t.trim().is_empty()).or_else(|| w.tag.clone());
            out.push(l);
        }
    }
    out
}

fn order(w: WireOrder) -> Result<BrokerOrder, ReadError> {
    let order_id = w.id.ok_or_else(|| ReadError::Unreadable { broker: NAME, detail: "an order has no id".into() })?;
    let count = w.quantity.filter(|q| *q > Decimal::ZERO).map(|q| q.normalize());
    let quantity = count.unwrap_or_default();
    let mut legs = Vec::new();
    // A contingent group read on its own (one order asked by its id) is read by its own terms, never as a spread.
    let spread = matches!(w.class.as_str(), "multileg" | "combo") || (!w.leg.is_empty() && !contingent(&w.class));
    let (asset_class, instrument, side, intent) = if spread {
        for l in &w.leg {
            let (symbol, contract) = read::occ(&l.option_symbol);
            let contracts = l.quantity.unwrap_or_default().normalize();
            legs.push(BrokerLeg {
                instrument: symbol,
                contract,
                action: leg_action_of(&l.side),
                ratio: read::ratio(contracts, quantity),
                quantity: contracts,
            });
        }
        (AssetClass::Option, w.symbol.trim().to_ascii_uppercase(), None, None)
    } else if w.class == "option" || !w.option_symbol.is_empty() {
        let (symbol, contract) = read::occ(&w.option_symbol);
        legs.push(BrokerLeg {
            instrument: symbol.clone(),
            contract,
            action: leg_action_of(&w.side),
            ratio: 1,
            quantity,
        });
        (AssetClass::Option, symbol, side_of(&w.side), None)
    } else {
        (AssetClass::Equity, w.symbol.trim().to_ascii_uppercase(), side_of(&w.side), equity_intent_of(&w.side))
    };
    // A spread's type says debit, credit or even with a positive price; a single option
    // pays when buying.
    let price = w.price.map(|p| p.normalize());
    let word = match w.order_type.as_str() {
        "market" => TypeWord::Market,
        "limit" => TypeWord::Limit,
        "debit" => TypeWord::Debit,
        "credit" => TypeWord::Credit,
        "even" => TypeWord::Even,
        _ => TypeWord::Other,
    };
    let (order_type, limit_price, price_effect) = word.terms(price, asset_class, side);
    let duration = match w.duration.as_str() {
        "day" => Some(Duration::Day),
        "gtc" => Some(Duration::Gtc),
        _ => None,
    };
    let created_ms = w.create_date.as_deref().and_then(crate::model::timestamp_ms);
    let o = BrokerOrder {
        extended_session: false,
        order_id,
        client_order_id: w.tag.filter(|t| !t.trim().is_empty()),
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
        filled_quantity: w.exec_quantity.unwrap_or_default().normalize(),
        status: read::status_of(&w.status, STATUSES),
        broker_status: w.status,
        legs,
        created_at: w.create_date,
        created_ms,
        replaced_by: None,
        reason: w.reason_description.filter(|r| !r.trim().is_empty()),
    };
    Ok(match count {
        Some(_) => o,
        None => read::without_count(o, None),
    })
}

impl AccountReads for Tradier {
    fn positions_request(&self, account_id: &str) -> Result<Request, OrderError> {
        Ok(read::get(format!("/v1/accounts/{}/positions", common::account(NAME, account_id)?)))
    }

    /// Today's orders in every status (and, as Tradier's own SDKs rely on, older orders
    /// still working), tags included; the first page of them.
    fn open_orders_request(&self, account_id: &str, _now_ms: i64) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let q = read::query(&[("includeTags", "true"), ("limit", PAGE), ("page", "1")]);
        Ok(read::get(format!("/v1/accounts/{account}/orders{q}")))
    }

    fn order_request(&self, account_id: &str, order_id: &str) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(read::get(format!("/v1/accounts/{account}/orders/{id}{}", read::query(&[("includeTags", "true")]))))
    }

    /// Tradier cannot look an order up by tag: the orders of the send's day (and the day
    /// before, for a send around midnight in New York) are listed and matched by tag.
    fn lookup_request(&self, account_id: &str, _client_order_id: &str, placed_ms: i64) -> Result<Lookup, OrderError> {
        let account = common::account(NAME, account_id)?;
        let start = eastern_date(placed_ms - 86_400_000).to_string();
        // A day past the send's New York date: Tradier does not say in which time zone it reads `end`, and read in
        // UTC, an order sent after 19:00 or 20:00 in New York (the next day in UTC) fell past it, was called not
        // there and was sent again. The wider list costs a page at most; tags tell ours apart.
        let end = eastern_date(placed_ms + read::ENTERED_WITHIN_MS + 86_400_000).to_string();
        let q = read::query(&[
            ("includeTags", "true"),
            ("filter", "all"),
            ("start", &start),
            ("end", &end),
            ("limit", PAGE),
            ("page", "1"),
        ]);
        Ok(Lookup::List(read::get(format!("/v1/accounts/{account}/orders{q}"))))
    }

    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError> {
        let a: PositionsAnswer = parse_json(body)?;
        refused("positions", a.errors)?;
        let lists = a.positions.ok_or_else(|| unnamed("positions"))?;
        Ok(lists.into_iter().flat_map(|l| l.position).filter_map(position).collect())
    }

    /// A page that comes back full may have more behind it: it is not read as the whole
    /// list.
    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError> {
        let orders = wire_orders(body)?;
        if may_have_more(orders.len()) {
            return Err(ReadError::Incomplete { broker: NAME, what: "orders" });
        }
        flatten(orders).into_iter().map(order).collect()
    }

    /// A full page is followed by the next (`page=N+1`) until a page that is not full.
    fn parse_orders_page(
        &self,
        request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerOrder>, Option<Request>), ReadError> {
        let orders = wire_orders(body)?;
        let next = if may_have_more(orders.len()) {
            Some(next_page(request).ok_or(ReadError::Incomplete { broker: NAME, what: "orders" })?)
        } else {
            None
        };
        Ok((flatten(orders).into_iter().map(order).collect::<Result<_, _>>()?, next))
    }

    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError> {
        let a: OrderAnswer = parse_json(body)?;
        refused("order", a.errors)?;
        order(a.order.ok_or_else(|| ReadError::Unreadable { broker: NAME, detail: "the answer has no order".into() })?)
    }

    fn client_order_id_as_sent(&self, client_order_id: &str) -> String {
        tag(client_order_id)
    }

    /// A full page may still hold our order (tags are ours alone): only when it does not is
    /// the next page needed.
    fn find_ours(
        &self,
        kind: &Lookup,
        status: u16,
        body: &[u8],
        client_order_id: &str,
        expected: Option<&Order>,
        placed_ms: i64,
    ) -> Found {
        if (200..300).contains(&status) && lookup_page_full(body) {
            let ours = tag(client_order_id);
            let listed = parse_json::<OrdersAnswer>(body)
                .map(|a| a.orders.unwrap_or_default().into_iter().flat_map(|l| l.order).collect());
            let mut found: Vec<_> = flatten(listed.unwrap_or_default())
                .into_iter()
                .filter(|w| w.tag.as_deref() == Some(ours.as_str()))
                .collect();
            // Tradier does not refuse a repeated tag: two orders with ours are a resend taken late, on a full
            // page as on any other, and never "found, done".
            if found.len() > 1 {
                return Found::Ambiguous(found.len());
            }
            if let Some(w) = found.pop() {
                return match order(w) {
                    Ok(o) => Found::Found(Box::new(o)),
                    Err(e) => Found::Unreadable(e.to_string()),
                };
            }
        }
        read::find(self, kind, status, body, client_order_id, expected, placed_ms)
    }

    /// The same list's next page (`page=N+1`) after a full one.
    fn lookup_next_page(&self, lookup: &Lookup, body: &[u8]) -> Option<Lookup> {
        let Lookup::List(req) = lookup else { return None };
        if !lookup_page_full(body) {
            return None;
        }
        next_page(req).map(Lookup::List)
    }
}

/// The orders of one page of the order list (an error answer is a refusal).
fn wire_orders(body: &[u8]) -> Result<Vec<WireOrder>, ReadError> {
    let a: OrdersAnswer = parse_json(body)?;
    refused("orders", a.errors)?;
    Ok(a.orders.ok_or_else(|| unnamed("orders"))?.into_iter().flat_map(|l| l.order).collect())
}

/// Whether a page of `n` orders may have more behind it. We ask for pages of 100, but Tradier's documentation
/// gives no maximum for `limit`, only its default of 25: a page cut at the default, or at any size from it up,
/// is not taken for the list's end. Reading one empty page too many costs a request; taking a cut list for the
/// whole one misses our order (and a lookup that misses it sends it again).
fn may_have_more(n: usize) -> bool {
    const DEFAULT_PAGE: usize = 25;
    n >= DEFAULT_PAGE.min(PAGE.parse().unwrap_or(DEFAULT_PAGE))
}

/// The same list's next page (`page=N+1`).
fn next_page(req: &Request) -> Option<Request> {
    let (head, page) = req.path.rsplit_once("&page=")?;
    let next = page.parse::<u32>().ok()?.checked_add(1)?;
    Some(read::get(format!("{head}&page={next}")))
}

/// Whether a lookup's answer may have more orders behind it ([`may_have_more`]).
fn lookup_page_full(body: &[u8]) -> bool {
    parse_json::<OrdersAnswer>(body)
        .ok()
        .map(|a| a.orders.unwrap_or_default().into_iter().flat_map(|l| l.order).count())
        .is_some_and(may_have_more)
}

#[cfg(test)]
mod read_tests {
    use super::*;
    use crate::broker::{Body, Found};

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!("../../tests/fixtures/brokers/tradier/", $name)).as_slice()
        };
    }

    const OUR_ID: &str = "swh-491a50ae2ed0d8f43bb51ed3b3b8";

    fn ms(iso: &str) -> i64 {
        crate::model::timestamp_ms(iso).unwrap()
    }

    #[test]
    fn requests() {
        let t = Tradier;
        let r = t.positions_request("VA12345678").unwrap();
        assert_eq!(
            (r.method, r.path.as_str(), &r.body),
            (Method::Get, "/v1/accounts/VA12345678/positions", &Body::Empty)
        );
        assert_eq!(
            t.open_orders_request("VA12345678", 0).unwrap().path,
            "/v1/accounts/VA12345678/orders?includeTags=true&limit=100&page=1"
        );
        assert_eq!(
            t.order_request("VA12345678", "2817345").unwrap().path,
            "/v1/accounts/VA12345678/orders/2817345?includeTags=true"
        );
        let lookup = t.lookup_request("VA12345678", OUR_ID, ms("2026-03-03T14:31:05Z")).unwrap();
        assert!(matches!(lookup, Lookup::List(_)));
        assert_eq!(
            lookup.request().path,
            "/v1/accounts/VA12345678/orders?includeTags=true&filter=all&start=2026-03-02&end=2026-03-04&limit=100&page=1"
        );
        // Sent at 21:30 in New York (02:30 UTC the next day): the list reaches the next date, whichever time zone
        // Tradier reads its dates in.
        let late = t.lookup_request("VA12345678", OUR_ID, ms("2026-03-04T02:30:00Z")).unwrap();
        assert!(late.request().path.contains("&start=2026-03-02&end=2026-03-04&"), "{}", late.request().path);
        assert!(matches!(t.positions_request(" "), Err(OrderError::NoAccountId { .. })));
        assert_eq!(t.positions_request("VA/1").unwrap().path, "/v1/accounts/VA%2F1/positions");
    }

    #[test]
    fn a_position_whose_average_is_out_of_range_has_none_and_does_not_panic() {
        let body = br#"{"positions":{"position":{"cost_basis":79228162514264337593543950335,"quantity":0.0000000000000000000000000001,"symbol":"AAPL"}}}"#;
        let p = Tradier.parse_positions(body).unwrap();
        assert_eq!((p.len(), p[0].average_price), (1, None));
    }

    #[test]
    fn positions_in_every_shape() {
        let p = Tradier.parse_positions(fixture!("positions.json")).unwrap();
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
        assert_eq!(p[0].average_price.unwrap().to_string(), "190.12", "1901.20 / 10");
        assert_eq!(p[2].contract.as_ref().unwrap().root, "SPXW");
        let one = Tradier.parse_positions(fixture!("positions_one.json")).unwrap();
        assert_eq!((one.len(), one[0].instrument.as_str()), (1, "AAPL"), "one position as an object");
        assert!(Tradier.parse_positions(fixture!("positions_none.json")).unwrap().is_empty(), "\"null\"");
    }

    #[test]
    fn orders_in_every_shape() {
        let o = Tradier.parse_orders(fixture!("orders_open.json")).unwrap();
        let rows: Vec<_> = o.iter().map(|o| (o.order_id.as_str(), o.status)).collect();
        assert_eq!(
            rows,
            [
                ("2817345", OrderStatus::Working),
                ("2816020", OrderStatus::Working),
                ("2817402", OrderStatus::Working),
                ("2817290", OrderStatus::Filled),
                ("2817100", OrderStatus::Cancelled),
            ],
            "today's orders in every status"
        );
        let entry = &o[0];
        assert_eq!(entry.client_order_id.as_deref(), Some(OUR_ID));
        assert_eq!((entry.side, entry.intent), (Some(OrderSide::Buy), Some(Intent::OpenLong)));
        // 185.00000000 and 10.00000000 read from their digits.
        assert_eq!((entry.limit_price.unwrap().to_string(), entry.quantity.to_string()), ("185".into(), "10".into()));
        assert_eq!(entry.created_ms, Some(ms("2026-03-03T14:31:05.214Z")));
        let exit = &o[1];
        assert_eq!((exit.intent, exit.duration), (Some(Intent::CloseShort), Some(Duration::Gtc)));
        assert_eq!(exit.filled_quantity.to_string(), "10");
        let spread = &o[2];
        assert_eq!((spread.instrument.as_str(), spread.asset_class, spread.side), ("SPX", AssetClass::Option, None));
        assert_eq!((spread.order_type, spread.price_effect), (Some(OrderType::Limit), Some(PriceEffect::Debit)));
        assert_eq!(spread.limit_price.unwrap().to_string(), "23.5");
        let legs: Vec<_> = spread.legs.iter().map(|l| (l.instrument.as_str(), l.action, l.ratio)).collect();
        assert_eq!(
            legs,
            [
                ("SPXW260320C05800000", Some(LegAction::BuyToOpen), 1),
                ("SPXW260320C05850000", Some(LegAction::SellToOpen), 1)
            ]
        );
        assert_eq!((o[3].order_type, o[3].limit_price), (Some(OrderType::Market), None));
        assert_eq!(o[4].client_order_id, None, "a manual order has no tag");

        let one = Tradier.parse_orders(fixture!("orders_open_one.json")).unwrap();
        assert_eq!((one.len(), one[0].order_id.as_str()), (1, "2817345"), "one order as an object");
        assert!(Tradier.parse_orders(fixture!("orders_none.json")).unwrap().is_empty(), "\"null\"");
        // A spread with one leg listed comes as an object too.
        let one_leg = br#"{"order":{"id":1,"type":"credit","symbol":"SPY","side":"buy","quantity":2.00000000,
            "status":"pending","duration":"day","price":1.10000000,"class":"multileg",
            "leg":{"id":2,"side":"sell_to_open","quantity":4.00000000,"option_symbol":"SPY260320P00500000"}}}"#;
        let s = Tradier.parse_order(one_leg).unwrap();
        assert_eq!((s.legs.len(), s.legs[0].ratio, s.price_effect), (1, 2, Some(PriceEffect::Credit)));
    }

    /// An OTOCO placed by hand (a buy, then a take-profit and a stop on the shares) is three orders of their own,
    /// each with its id, status and terms, not one option spread: its group is not read beside them, and its
    /// legs take its duration and tag where they give none. A lookup by the group's tag never says "not there".
    /// A multileg order keeps its legs.
    #[test]
    fn a_contingent_groups_legs_are_orders_of_their_own() {
        let body = br#"{"orders":{"order":{"id":700,"type":"limit","symbol":"AAPL","side":"buy","quantity":10.0,
          "status":"open","duration":"gtc","class":"otoco","num_legs":3,"create_date":"2026-03-03T14:00:00.000Z",
          "tag":"hand-7",
          "leg":[
            {"id":701,"type":"limit","symbol":"AAPL","side":"buy","quantity":10.0,"status":"filled",
             "price":190.0,"exec_quantity":10.0,"class":"equity"},
            {"id":702,"type":"limit","symbol":"AAPL","side":"sell","quantity":10.0,"status":"open",
             "price":200.0,"exec_quantity":0.0,"class":"equity"},
            {"id":703,"type":"stop","symbol":"AAPL","side":"sell","quantity":10.0,"status":"open",
             "stop_price":180.0,"exec_quantity":0.0,"class":"equity"}]}}}"#;
        let o = Tradier.parse_orders(body).unwrap();
        let rows: Vec<_> =
            o.iter().map(|o| (o.order_id.as_str(), o.asset_class, o.status, o.order_type, o.intent)).collect();
        assert_eq!(
            rows,
            [
                ("701", AssetClass::Equity, OrderStatus::Filled, Some(OrderType::Limit), Some(Intent::OpenLong)),
                ("702", AssetClass::Equity, OrderStatus::Working, Some(OrderType::Limit), Some(Intent::CloseLong)),
                ("703", AssetClass::Equity, OrderStatus::Working, None, Some(Intent::CloseLong)),
            ]
        );
        assert_eq!((o[1].limit_price.unwrap().to_string(), o[1].quantity.to_string()), ("200".into(), "10".into()));
        assert_eq!((o[1].duration, o[1].created_ms), (Some(Duration::Gtc), Some(ms("2026-03-03T14:00:00Z"))));
        assert!(o.iter().all(|o| o.legs.is_empty() && o.client_order_id.as_deref() == Some("hand-7")));
        let lookup = Tradier.lookup_request("VA12345678", "hand-7", 0).unwrap();
        assert_eq!(Tradier.find_ours(&lookup, 200, body, "hand-7", None, 0), Found::Ambiguous(3));
        // Read on its own by its id, the group is its own terms, not a spread.
        let group = String::from_utf8_lossy(body).replacen(r#"{"orders":{"order":"#, r#"{"order":"#, 1);
        let group = Tradier.parse_order(&group.as_bytes()[..group.len() - 1]).unwrap();
        assert_eq!((group.order_id.as_str(), group.asset_class, group.legs.len()), ("700", AssetClass::Equity, 0));
        let spread = &Tradier.parse_orders(fixture!("orders_open.json")).unwrap()[2];
        assert_eq!((spread.order_id.as_str(), spread.legs.len()), ("2817402", 2));
    }

    #[test]
    fn one_order_in_every_final_state() {
        let read = |body: &[u8]| Tradier.parse_order(body).unwrap();
        assert_eq!(read(fixture!("order_by_id.json")).status, OrderStatus::Working);
        let filled = read(fixture!("order_filled.json"));
        assert_eq!((filled.status, filled.filled_quantity.to_string()), (OrderStatus::Filled, "10".into()));
        let cancelled = read(fixture!("order_cancelled.json"));
        assert_eq!((cancelled.status, cancelled.filled_quantity.to_string()), (OrderStatus::Cancelled, "10".into()));
        let rejected = read(fixture!("order_rejected.json"));
        assert_eq!((rejected.status, rejected.intent), (OrderStatus::Rejected, Some(Intent::OpenShort)));
        assert_eq!(
            rejected.reason.as_deref(),
            Some("There is not enough day trading buying power for the requested order")
        );
        let unknown =
            read(br#"{"order":{"id":9,"status":"held_for_review","symbol":"AAPL","side":"buy","quantity":1}}"#);
        assert_eq!(unknown.status, OrderStatus::Unknown);
    }

    #[test]
    fn errors_inside_a_200_and_xml() {
        assert_eq!(
            Tradier.parse_positions(fixture!("place_refused_200.json")),
            Err(ReadError::BrokerError {
                broker: "Tradier",
                what: "positions",
                message: "Backoffice rejected override of the order.; DayTradingBuyingPowerExceeded".into()
            })
        );
        assert!(matches!(
            Tradier.parse_orders(fixture!("place_refused_200_single.json")),
            Err(ReadError::BrokerError { message, .. }) if message == "DayTradingBuyingPowerExceeded"
        ));
        assert!(matches!(
            Tradier.parse_order(b"<order><id>1</id></order>"),
            Err(ReadError::Unreadable { detail, .. }) if detail.contains("application/json")
        ));
    }

    #[test]
    fn finding_ours_by_tag() {
        let placed = ms("2026-03-03T14:31:05Z");
        let lookup = Tradier.lookup_request("VA12345678", OUR_ID, placed).unwrap();
        let find = |id: &str, body: &[u8]| Tradier.find_ours(&lookup, 200, body, id, None, placed);
        match find(OUR_ID, fixture!("order_by_client_id.json")) {
            Found::Found(o) => assert_eq!((o.order_id.as_str(), o.status), ("2817345", OrderStatus::Working)),
            other => panic!("{other:?}"),
        }
        assert_eq!(find("swh-00000000000000000000000000ff", fixture!("order_by_client_id.json")), Found::NotFound);
        assert_eq!(find(OUR_ID, fixture!("orders_none.json")), Found::NotFound);
        let twice = String::from_utf8_lossy(fixture!("order_by_client_id.json"))
            .replace("swh-e40933a876876b825274edd5fff9", OUR_ID);
        assert_eq!(find(OUR_ID, twice.as_bytes()), Found::Ambiguous(2), "two orders with our tag: never resend");
        assert!(matches!(
            Tradier.find_ours(&lookup, 401, fixture!("auth_error.json"), OUR_ID, None, placed),
            Found::Unreadable(m) if m.contains("401")
        ));
        let full = format!(
            r#"{{"orders":{{"order":[{}]}}}}"#,
            vec![r#"{"id":1,"status":"filled","symbol":"AAPL","side":"buy","quantity":1}"#; 100].join(",")
        );
        assert!(matches!(find(OUR_ID, full.as_bytes()), Found::Unreadable(m) if m.contains("first page")));
        // A full page is not the whole list: the next page is read, and the one after it, until ours or the end.
        let next = Tradier.lookup_next_page(&lookup, full.as_bytes()).expect("a full page has a next one");
        assert!(next.request().path.ends_with("&limit=100&page=2"), "{}", next.request().path);
        let after = Tradier.lookup_next_page(&next, full.as_bytes()).unwrap();
        assert!(after.request().path.ends_with("&limit=100&page=3"), "{}", after.request().path);
        assert_eq!(Tradier.lookup_next_page(&lookup, fixture!("order_by_client_id.json")), None);
        assert_eq!(Tradier.lookup_next_page(&lookup, fixture!("orders_none.json")), None);
        // Ours on a full page is ours: its tag is unique to it.
        let ours_on_full = full.replacen(r#""quantity":1}"#, &format!(r#""quantity":1,"tag":"{OUR_ID}"}}"#), 1);
        assert!(matches!(find(OUR_ID, ours_on_full.as_bytes()), Found::Found(o) if o.order_id == "1"));
        // Twice on a full page: a resend taken late, never one order found.
        let twice_on_full = full.replacen(r#""quantity":1}"#, &format!(r#""quantity":1,"tag":"{OUR_ID}"}}"#), 2);
        assert_eq!(find(OUR_ID, twice_on_full.as_bytes()), Found::Ambiguous(2));
        // A page cut at Tradier's default size (its documentation gives no maximum for `limit`) is not the end
        // either: taking it for the whole list would call ours "not there" and send it again.
        let cut = format!(
            r#"{{"orders":{{"order":[{}]}}}}"#,
            vec![r#"{"id":1,"status":"filled","symbol":"AAPL","side":"buy","quantity":1}"#; 25].join(",")
        );
        assert!(matches!(find(OUR_ID, cut.as_bytes()), Found::Unreadable(_)), "{:?}", find(OUR_ID, cut.as_bytes()));
        assert!(Tradier.lookup_next_page(&lookup, cut.as_bytes()).is_some());
        let list = Tradier.open_orders_request("VA12345678", 0).unwrap();
        let (orders, next) = Tradier.parse_orders_page(&list, cut.as_bytes()).unwrap();
        assert_eq!((orders.len(), next.map(|r| r.path)), (25, Some(list.path.replace("page=1", "page=2").into())));
        assert!(Tradier.parse_orders(cut.as_bytes()).is_err(), "a cut page read as the whole list");
    }

    /// Tradier does not refuse a repeated tag: a resend taken late may stand on the page after the one holding the
    /// first copy. Answered "found" at the first page, the doubled position was recorded as one order. The pages
    /// are read on ([`crate::broker::after_page`]): ours again is ambiguous, the list ending without it is ours.
    #[test]
    fn ours_on_a_full_page_is_checked_against_the_pages_after_it() {
        let placed = ms("2026-03-03T14:31:05Z");
        let order = |id: usize, tag: &str| {
            format!(r#"{{"id":{id},"status":"filled","symbol":"AAPL","side":"buy","quantity":1,"tag":"{tag}"}}"#)
        };
        let page = |ids: std::ops::Range<usize>, ours: &[usize]| {
            let items: Vec<String> =
                ids.map(|i| order(i, if ours.contains(&i) { OUR_ID } else { "swh-other" })).collect();
            format!(r#"{{"orders":{{"order":[{}]}}}}"#, items.join(",")).into_bytes()
        };
        // As the server reads a lookup: page after page until the fold answers.
        let look = |pages: &[Vec<u8>]| {
            let mut lookup = Tradier.lookup_request("VA12345678", OUR_ID, placed).unwrap();
            let mut earlier = None;
            for body in pages {
                let found = Tradier.find_ours(&lookup, 200, body, OUR_ID, None, placed);
                let next = Tradier.lookup_next_page(&lookup, body);
                match crate::broker::after_page(earlier, found, next.is_some()) {
                    crate::broker::PagedLookup::Next(o) => (earlier, lookup) = (o, next.expect("a next page")),
                    crate::broker::PagedLookup::Done(found) => return found,
                }
            }
            panic!("the lookup asked for more pages than there are")
        };
        assert_eq!(look(&[page(0..100, &[99]), page(100..110, &[100])]), Found::Ambiguous(2));
        assert_eq!(look(&[page(0..100, &[99]), page(100..200, &[]), page(200..210, &[205, 206])]), Found::Ambiguous(3));
        assert!(matches!(look(&[page(0..100, &[99]), page(100..110, &[])]), Found::Found(o) if o.order_id == "99"));
        assert!(matches!(look(&[page(0..100, &[]), page(100..110, &[105])]), Found::Found(o) if o.order_id == "105"));
        assert_eq!(look(&[page(0..100, &[]), page(100..110, &[])]), Found::NotFound);
        // The same order met again on the next page (the list moved while it was read) is one order.
        assert!(matches!(look(&[page(0..100, &[99]), page(99..109, &[99])]), Found::Found(o) if o.order_id == "99"));
        assert!(matches!(
            look(&[page(0..100, &[99]), page(99..199, &[99]), page(199..205, &[])]),
            Found::Found(o) if o.order_id == "99"
        ));
        // A later page that cannot be read may hold the second copy.
        let broken = br#"{"orders":"#.to_vec();
        assert!(matches!(look(&[page(0..100, &[99]), broken]), Found::Unreadable(_)));
    }

    #[test]
    fn write_answers_from_the_fixtures() {
        let read = |status, body: &[u8]| Tradier.read_answer(RequestKind::Place, status, None, body);
        assert_eq!(read(200, fixture!("place_accepted.json")), Answer::Accepted { order_id: Some("2817345".into()) });
        assert!(
            matches!(read(400, fixture!("place_refused.json")), Answer::Refused { message } if message.contains("type is invalid"))
        );
        assert!(matches!(read(200, fixture!("place_refused_200.json")), Answer::Refused { .. }));
        assert!(matches!(read(200, fixture!("place_refused_200_single.json")), Answer::Refused { .. }));
        assert!(
            matches!(read(401, fixture!("auth_error.json")), Answer::Refused { message } if message.contains("Invalid Access Token"))
        );
    }

    /// An order whose answer states no quantity was read as a working order of 0 shares, which the bot's state
    /// cannot hold and a MODIFY sized from. It is read with its count unknown: its status unknown while it works,
    /// and a filled one counts what filled.
    #[test]
    fn an_order_without_a_quantity_is_never_a_working_order_of_zero() {
        let read = |status: &str| {
            let body = format!(
                r#"{{"order":{{"id":9,"type":"limit","symbol":"AAPL","side":"buy","price":190.0,"status":"{status}",
                "exec_quantity":4.0,"class":"equity"}}}}"#
            );
            Tradier.parse_order(body.as_bytes()).unwrap()
        };
        let open = read("open");
        assert_eq!((open.status, open.quantity, open.notional), (OrderStatus::Unknown, Decimal::ZERO, None));
        assert!(open.reason.as_deref().unwrap_or_default().contains("no size"), "{:?}", open.reason);
        let filled = read("filled");
        assert_eq!((filled.status, filled.quantity), (OrderStatus::Filled, Decimal::from(4)));
        let cancelled = read("canceled");
        assert_eq!((cancelled.status, cancelled.quantity), (OrderStatus::Cancelled, Decimal::ZERO));
    }

    /// An answer that names neither the positions (or orders) nor an error says nothing of the
    /// account, as a 200 naming no order says nothing of a placement (`read_answer` calls that uncertain). Read as
    /// "flat" and "no working orders", the sync dropped every position and order of the bot: the next entry was
    /// sized and allowed as if flat (a second entry beside the first), and a CLOSE found nothing to close.
    #[test]
    fn an_answer_naming_no_positions_nor_orders_is_not_flat() {
        let t = Tradier;
        let fault = br#"{"fault":{"faultstring":"Rate limit quota violation","detail":{"errorcode":"policies.ratelimit.QuotaViolation"}}}"#;
        for body in [&b"{}"[..], &fault[..]] {
            let text = String::from_utf8_lossy(body);
            assert!(t.parse_positions(body).is_err(), "positions read from {text} as {:?}", t.parse_positions(body));
            let first = t.open_orders_request("VA12345678", 0).unwrap();
            assert!(t.parse_orders_page(&first, body).is_err(), "orders read from {text} as complete");
        }
        // The documented empty shapes stay empty.
        assert!(t.parse_positions(br#"{"positions":"null"}"#).unwrap().is_empty());
    }
}
