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

use super::common;
use super::form::Form;
use super::{Body, Broker, Method, Request, FORM};
use crate::alert::{Duration, LegAction, OrderType};
use crate::order::option::underlying_of;
use crate::order::{AssetClass, Intent, Order, OrderError, PriceEffect};

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
            return Err(OrderError::Rejected(
                "Tradier cannot change an order's quantity in place; cancel it and send a new entry".into(),
            ));
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
}

fn not_offered() -> OrderError {
    OrderError::Unfillable("Tradier does not offer crypto trading, so this bot cannot take the order".into())
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
        return Err(OrderError::Rejected(format!(
            "the leg {} is not on {u}; a Tradier option order trades one underlying",
            l.contract.occ_unpadded()
        )));
    }
    Ok(u)
}
