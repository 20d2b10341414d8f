//! Charles Schwab Trader API: JSON bodies at `/trader/v1/accounts/{hash}/orders`, where
//! the account is the encrypted account hash.
//!
//! Bodies follow schwab-py's builders: `session` NORMAL, `duration` DAY /
//! GOOD_TILL_CANCEL / FILL_OR_KILL (the literal "GTC" is refused), `orderStrategyType`
//! SINGLE, and `price` as a string with the exact digits (schwab-py sends strings; its
//! float path truncates 1.15 to "1.14", which is why nothing here goes through floats).
//! Options use the padded 21-character OSI symbol. A spread states debit or credit in
//! `orderType` (NET_DEBIT / NET_CREDIT / NET_ZERO) with a positive price and names its
//! structure in `complexOrderStrategyType`. A replace (`PUT` with the full order) cancels
//! the old order and creates a new one with a new id.

use super::answer::{self, Answer};
use super::common;
use super::{Body, Broker, Json, Method, Request, JSON};
use crate::model::RequestKind;
use crate::model::{
    AssetClass, Duration, Intent, LegAction, OptionSide, Order, OrderError, OrderLeg, OrderType, PriceEffect,
};

/// Schwab's formatter.
pub struct Schwab;

const NAME: &str = "Schwab";

impl Broker for Schwab {
    fn name(&self) -> &'static str {
        "schwab"
    }

    fn offers(&self, asset_class: AssetClass) -> bool {
        asset_class != AssetClass::Crypto
    }

    fn replace_keeps_id(&self) -> bool {
        false
    }

    /// The Trader API's order schema has no client order id field.
    fn accepts_client_order_id(&self) -> bool {
        false
    }

    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        Ok(Request {
            method: Method::Post,
            path: format!("/trader/v1/accounts/{account}/orders"),
            content_type: Some(JSON),
            body: Body::Json(body(order)?),
        })
    }

    /// The replacement is a complete order, as for a new one.
    fn replace(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        _quantity_changed: bool,
    ) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Put,
            path: format!("/trader/v1/accounts/{account}/orders/{id}"),
            content_type: Some(JSON),
            body: Body::Json(body(order)?),
        })
    }

    fn cancel(&self, account_id: &str, order_id: &str, _order: &Order) -> Result<Request, OrderError> {
        let account = common::account(NAME, account_id)?;
        let id = common::order_id(NAME, order_id)?;
        Ok(Request {
            method: Method::Delete,
            path: format!("/trader/v1/accounts/{account}/orders/{id}"),
            content_type: None,
            body: Body::Empty,
        })
    }

    /// Schwab answers a place or replace with 201, an empty body and the new order's URL in
    /// `Location`; a cancel with 200. Errors are `{"message":…,"errors":[…]}`.
    fn read_answer(&self, _kind: RequestKind, status: u16, location: Option<&str>, body: &[u8]) -> Answer {
        if answer::success(status) {
            return Answer::Accepted { order_id: answer::location_id(location) };
        }
        answer::failed(status, body, |v| {
            let message = answer::text_at(v, &["message"]);
            let errors = answer::text_at(v, &["errors"]);
            match (message, errors) {
                (Some(m), Some(e)) => Some(format!("{m}: {e}")),
                (m, e) => m.or(e),
            }
        })
    }
}

/// The whole order, keys in schwab-py's order.
fn body(order: &Order) -> Result<Json, OrderError> {
    let quantity = common::quantity(NAME, order, false, 0)?;
    let duration = duration(order.duration);
    let limit = common::limit_price(NAME, order)?;
    let base = Json::obj().with("session", "NORMAL").with("duration", duration);
    match order.asset_class {
        AssetClass::Crypto => Err(OrderError::Unfillable(
            "Schwab does not offer crypto trading, so this bot cannot take the order".into(),
        )),
        AssetClass::Equity => {
            let leg = Json::obj()
                .with("instruction", equity_instruction(order.intent))
                .with("instrument", instrument("EQUITY", common::symbol(NAME, order)?.to_string()))
                .with("quantity", quantity);
            Ok(base
                .with("orderType", single_type(order.order_type))
                .with_opt("price", limit.map(common::digits))
                .with("orderLegCollection", vec![leg])
                .with("orderStrategyType", "SINGLE"))
        }
        AssetClass::Option => {
            let legs = common::option_legs(NAME, order)?;
            let collection = legs
                .iter()
                .map(|l| {
                    Json::obj()
                        .with("instruction", option_instruction(l.action))
                        .with("instrument", instrument("OPTION", l.contract.occ_padded()))
                        .with("quantity", common::leg_quantity(quantity, l))
                })
                .collect::<Vec<_>>();
            if let [_] = legs {
                if limit.is_some() {
                    // A single leg's price is its premium; checked against the leg's side.
                    common::price_effect(NAME, order)?;
                }
                return Ok(base
                    .with("orderType", single_type(order.order_type))
                    .with_opt("price", limit.map(common::digits))
                    .with("orderLegCollection", collection)
                    .with("orderStrategyType", "SINGLE"));
            }
            let order_type = match limit {
                None => "MARKET",
                Some(p) if p.is_zero() => "NET_ZERO",
                Some(_) => match common::price_effect(NAME, order)? {
                    PriceEffect::Debit => "NET_DEBIT",
                    PriceEffect::Credit => "NET_CREDIT",
                },
            };
            Ok(base
                .with("orderType", order_type)
                .with("complexOrderStrategyType", structure(legs))
                .with("quantity", quantity)
                .with_opt("price", limit.map(common::digits))
                .with("orderLegCollection", collection)
                .with("orderStrategyType", "SINGLE"))
        }
    }
}

/// For equities Schwab accepts only these three durations (IMMEDIATE_OR_CANCEL and the
/// END_OF_* values are refused with a 400), and this service sends no others.
fn duration(d: Duration) -> &'static str {
    match d {
        Duration::Day => "DAY",
        Duration::Gtc => "GOOD_TILL_CANCEL",
        Duration::Fok => "FILL_OR_KILL",
    }
}

fn single_type(t: OrderType) -> &'static str {
    match t {
        OrderType::Market => "MARKET",
        OrderType::Limit => "LIMIT",
    }
}

fn instrument(asset_type: &'static str, symbol: String) -> Json {
    Json::obj().with("assetType", asset_type).with("symbol", symbol)
}

fn equity_instruction(i: Intent) -> &'static str {
    match i {
        Intent::OpenLong => "BUY",
        Intent::CloseLong => "SELL",
        Intent::OpenShort => "SELL_SHORT",
        Intent::CloseShort => "BUY_TO_COVER",
    }
}

fn option_instruction(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "BUY_TO_OPEN",
        LegAction::BuyToClose => "BUY_TO_CLOSE",
        LegAction::SellToOpen => "SELL_TO_OPEN",
        LegAction::SellToClose => "SELL_TO_CLOSE",
    }
}

/// `complexOrderStrategyType` for a spread, named by shape rather than by debit or
/// credit (closing a credit spread is a debit and still the same structure):
/// - VERTICAL: two legs, same root, expiry and call/put, different strikes, one bought
///   and one sold in equal ratios, both opening or both closing (schwab-py's vertical
///   builders);
/// - IRON_CONDOR: four legs, same root and expiry, equal ratios, all opening or all
///   closing, a put spread wholly below a call spread, with the two outer wings on one
///   side (both bought for the usual credit condor, both sold for a long condor);
/// - CUSTOM otherwise, which Schwab takes for any mix of legs.
fn structure(legs: &[OrderLeg]) -> &'static str {
    let first = &legs[0];
    let uniform = legs.iter().all(|l| {
        l.contract.root == first.contract.root
            && l.contract.expiration == first.contract.expiration
            && l.ratio == first.ratio
            && l.action.is_open() == first.action.is_open()
    });
    if !uniform {
        return "CUSTOM";
    }
    match legs {
        [a, b]
            if a.contract.side == b.contract.side
                && a.contract.strike != b.contract.strike
                && a.action.is_buy() != b.action.is_buy() =>
        {
            "VERTICAL"
        }
        [_, _, _, _] if is_iron_condor(legs) => "IRON_CONDOR",
        _ => "CUSTOM",
    }
}

fn is_iron_condor(legs: &[OrderLeg]) -> bool {
    let sorted = |side: OptionSide| -> Option<(&OrderLeg, &OrderLeg)> {
        let mut v: Vec<&OrderLeg> = legs.iter().filter(|l| l.contract.side == side).collect();
        v.sort_by_key(|l| l.contract.strike);
        match v.as_slice() {
            [low, high]
                if low.contract.strike < high.contract.strike && low.action.is_buy() != high.action.is_buy() =>
            {
                Some((low, high))
            }
            _ => None,
        }
    };
    let (Some((put_low, put_high)), Some((call_low, call_high))) = (sorted(OptionSide::Put), sorted(OptionSide::Call))
    else {
        return false;
    };
    put_high.contract.strike < call_low.contract.strike && put_low.action.is_buy() == call_high.action.is_buy()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decimal::Decimal;
    use crate::model::Date;
    use crate::model::OptionContract;

    fn leg(side: OptionSide, strike: i64, action: LegAction) -> OrderLeg {
        OrderLeg {
            contract: OptionContract {
                root: "SPXW".into(),
                expiration: Date::parse_iso("2024-01-19").unwrap(),
                side,
                strike: Decimal::from(strike),
            },
            action,
            ratio: 1,
        }
    }

    use LegAction::*;
    use OptionSide::*;

    #[test]
    fn verticals() {
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, SellToOpen)]), "VERTICAL");
        assert_eq!(structure(&[leg(Put, 4500, SellToClose), leg(Put, 4490, BuyToClose)]), "VERTICAL");
        // Same side twice, a call with a put, or an open with a close is not a vertical.
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, BuyToOpen)]), "CUSTOM");
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Put, 4500, SellToOpen)]), "CUSTOM");
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), leg(Call, 4510, SellToClose)]), "CUSTOM");
        let mut other_expiry = leg(Call, 4510, SellToOpen);
        other_expiry.contract.expiration = Date::parse_iso("2024-01-22").unwrap();
        assert_eq!(structure(&[leg(Call, 4500, BuyToOpen), other_expiry]), "CUSTOM", "that is a diagonal");
    }

    #[test]
    fn iron_condors() {
        let short = [
            leg(Put, 4400, BuyToOpen),
            leg(Put, 4450, SellToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&short), "IRON_CONDOR");
        let close = [
            leg(Call, 4600, SellToClose),
            leg(Put, 4450, BuyToClose),
            leg(Put, 4400, SellToClose),
            leg(Call, 4550, BuyToClose),
        ];
        assert_eq!(structure(&close), "IRON_CONDOR", "leg order does not matter");
        // Overlapping spreads, or wings on opposite sides, are not a condor.
        let overlap = [
            leg(Put, 4400, BuyToOpen),
            leg(Put, 4560, SellToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&overlap), "CUSTOM");
        let skewed = [
            leg(Put, 4400, SellToOpen),
            leg(Put, 4450, BuyToOpen),
            leg(Call, 4550, SellToOpen),
            leg(Call, 4600, BuyToOpen),
        ];
        assert_eq!(structure(&skewed), "CUSTOM");
    }
}

#[cfg(test)]
mod answer_tests {
    use super::*;

    // Shapes from the Trader API spec (`placeOrder`: 201, empty body, `Location`;
    // `ServiceError {message, errors[]}`) and schwab-py's `Utils.extract_order_id`.
    const LOCATION: &str = "https://api.schwabapi.com/trader/v1/accounts/E5B1A4/orders/1000918249";
    const REFUSED: &str = r#"{"message":"A validation error occurred while processing the request.","errors":["Order quantity is not valid"]}"#;

    #[test]
    fn reads_schwab_answers() {
        let read = |kind, status, location, body: &str| Schwab.read_answer(kind, status, location, body.as_bytes());
        assert_eq!(
            read(RequestKind::Place, 201, Some(LOCATION), ""),
            Answer::Accepted { order_id: Some("1000918249".into()) }
        );
        assert_eq!(read(RequestKind::Cancel, 200, None, ""), Answer::Accepted { order_id: None });
        assert_eq!(
            read(RequestKind::Place, 400, None, REFUSED),
            Answer::Refused {
                message:
                    "HTTP 400: A validation error occurred while processing the request.: Order quantity is not valid"
                        .into()
            }
        );
        assert!(
            matches!(read(RequestKind::Place, 500, None, ""), Answer::Uncertain { message } if message.contains("500"))
        );
    }
}
