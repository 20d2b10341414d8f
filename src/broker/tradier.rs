//! Tradier brokerage API: form-encoded bodies at `/v1/accounts/{account}/orders`.
//!
//! Equities say short and cover outright (`sell_short`, `buy_to_cover`). An option's
//! `symbol` is its underlying (`SPX`, never the `SPXW` root) and `option_symbol` the
//! unpadded OCC symbol. A multi-leg order states debit or credit in its `type` and sends a
//! positive `price`. Durations are day and gtc only. A change (`PUT`) keeps the order id
//! but can move only type, duration and price — never the quantity.
//!
//! No `tag` is sent: Tradier keeps it as a label but does not refuse a repeated one, so it
//! would not make a resent delivery safe, and the reference request carries none.

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

    /// Tradier's `tag` is a free label, not a key it refuses twice; see the module note.
    fn accepts_client_order_id(&self) -> bool {
        false
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
        Ok(Request {
            method: Method::Post,
            path: format!("/v1/accounts/{account}/orders"),
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
            path: format!("/v1/accounts/{account}/orders/{id}"),
            content_type: Some(FORM),
            body: Body::Form(f.finish()),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: format!("/v1/accounts/{account}/orders/{id}"),
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
            return Answer::Accepted { order_id: answer::id_at(&v, &["order", "id"]) };
        }
        answer::failed(status, body, |v| {
            answer::text_at(v, &["errors", "error"]).or_else(|| answer::text_at(v, &["fault", "faultstring"]))
        })
    }
}

fn not_offered() -> OrderError {
    OrderError::BrokerDoesNotOffer { broker: NAME, asset_class: AssetClass::Crypto }
}

/// Tradier's durations are day, gtc, pre and post: there is no fill-or-kill.
fn duration(order: &Order) -> Result<&'static str, OrderError> {
    match order.duration {
        Duration::Day => Ok("day"),
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
