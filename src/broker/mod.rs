//! Each broker's wire format, one file per broker behind the [`Broker`] trait.
//!
//! This is the only module that knows broker names. Everything upstream speaks in
//! [`crate::model::Order`]s; a broker turns place, replace and cancel into the exact
//! HTTP request its API expects (method, path with the account id, content type, body),
//! and reads the account back: positions, orders, and our order after a lost answer
//! ([`read`]).

mod alpaca;
pub mod answer;
mod coinbase;
mod common;
pub mod form;
pub mod json;
pub mod read;
mod schwab;
mod tastytrade;
mod tradier;

use crate::model::{AssetClass, BotAction, CryptoPair, Order, OrderError, RequestKind};
use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

pub use answer::Answer;
pub use json::{Json, ToJson};
pub use read::{after_page, AccountReads, Found, Lookup, PagedLookup};

/// The brokers this library formats orders for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerId {
    /// Alpaca Trading API v2.
    Alpaca,
    /// Tradier brokerage API (form-encoded).
    Tradier,
    /// Charles Schwab Trader API.
    Schwab,
    /// Tastytrade API.
    Tastytrade,
    /// Coinbase Advanced Trade.
    Coinbase,
}

impl BrokerId {
    /// Every supported broker.
    pub const ALL: [BrokerId; 5] =
        [BrokerId::Alpaca, BrokerId::Tradier, BrokerId::Schwab, BrokerId::Tastytrade, BrokerId::Coinbase];

    /// The name used in snapshots.
    pub fn as_str(self) -> &'static str {
        self.broker().name()
    }

    /// Reads a snapshot's broker name (any case).
    pub fn from_name(s: &str) -> Option<BrokerId> {
        BrokerId::ALL.into_iter().find(|b| b.as_str().eq_ignore_ascii_case(s.trim()))
    }

    /// The broker's formatter.
    pub fn broker(self) -> &'static dyn Broker {
        match self {
            BrokerId::Alpaca => &alpaca::Alpaca,
            BrokerId::Tradier => &tradier::Tradier,
            BrokerId::Schwab => &schwab::Schwab,
            BrokerId::Tastytrade => &tastytrade::Tastytrade,
            BrokerId::Coinbase => &coinbase::Coinbase,
        }
    }
}

impl fmt::Display for BrokerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for BrokerId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        BrokerId::from_name(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown broker {s:?}; supported: alpaca, tradier, schwab, tastytrade, coinbase"
            ))
        })
    }
}

/// One broker's wire format: orders out, answers read back, and (through its supertrait
/// [`AccountReads`]) the account's positions and orders read back.
pub trait Broker: AccountReads + Sync {
    /// The snapshot name (`alpaca`).
    fn name(&self) -> &'static str;

    /// Whether the broker offers an asset class at all.
    fn offers(&self, asset_class: AssetClass) -> bool;

    /// Whether the broker offers options on indexes (`SPX`, `NDX`, `RUT`…) as well as on
    /// stocks and ETFs. The strategy refuses a bot whose broker does not when it names an
    /// index among its allowed instruments, and the builder refuses such an order otherwise;
    /// the request format itself stays what the broker's SDK writes.
    fn offers_index_options(&self) -> bool {
        true
    }

    /// Decimal places the broker accepts for crypto quantities.
    fn crypto_quantity_scale(&self) -> u32 {
        8
    }

    /// The broker's spelling of a crypto pair (`BTC/USD`, `BTC-USD`).
    fn crypto_symbol(&self, pair: &CryptoPair) -> String {
        format!("{}/{}", pair.base, pair.quote)
    }

    /// True when a replace keeps the order id; false when the broker cancels and
    /// replaces, assigning a new id the host must track.
    fn replace_keeps_id(&self) -> bool;

    /// Whether a replace can change the order's quantity. Where it cannot, a MODIFY that
    /// re-sizes is built as a cancel of the working order and a new order at the new
    /// quantity (with its own client order id), never refused and never left at the old size.
    fn replace_changes_quantity(&self) -> bool {
        true
    }

    /// Whether a replace can re-size a working order of `asset_class` from `from` to `to`: where the broker's
    /// change takes some sizes only, [`Broker::replace_changes_quantity`] for the others. Where it cannot, the
    /// MODIFY is built as a cancel and a new order, as there.
    fn replace_resizes(
        &self,
        asset_class: AssetClass,
        from: crate::decimal::Decimal,
        to: crate::decimal::Decimal,
    ) -> bool {
        let _ = (asset_class, from, to);
        self.replace_changes_quantity()
    }

    /// Whether the broker refuses a repeated client order id, so that a resend of the
    /// same request can never become a second order there.
    fn accepts_client_order_id(&self) -> bool;

    /// Whether the bot's `account_id` names the account its requests trade (in their path): two bots with one
    /// then trade one account. Where the credentials pick the account, the id is only a label.
    fn names_account(&self) -> bool {
        false
    }

    /// The request that places `order`.
    fn place(&self, account_id: &str, order: &Order) -> Result<Request, OrderError>;

    /// The request that changes working order `order_id` to stand as `order`.
    /// `quantity_changed` says whether the size differs from the working order's.
    fn replace(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        quantity_changed: bool,
    ) -> Result<Request, OrderError>;

    /// [`Broker::replace`] of an order of which `filled` has filled already (`order.quantity` is what is to remain
    /// working). Most brokers' changes state what remains; a broker whose change states the order's whole size,
    /// filled part included, adds it.
    fn replace_after_fills(
        &self,
        account_id: &str,
        order_id: &str,
        order: &Order,
        quantity_changed: bool,
        _filled: crate::decimal::Decimal,
    ) -> Result<Request, OrderError> {
        self.replace(account_id, order_id, order, quantity_changed)
    }

    /// The request that cancels working order `order_id` (`order` is what it was).
    fn cancel(&self, account_id: &str, order_id: &str, order: &Order) -> Result<Request, OrderError>;

    /// Reads the broker's HTTP answer to one request of this `kind`: its `status`, its
    /// `Location` header if any, and its body. Where the order id is, which answers refuse
    /// (some with a success status), and which say the order is already there are each
    /// broker's own business.
    fn read_answer(&self, kind: RequestKind, status: u16, location: Option<&str>, body: &[u8]) -> Answer;
}

/// Formats one bot action for a broker.
pub fn format(broker: BrokerId, account_id: &str, action: &BotAction) -> Result<Request, OrderError> {
    let b = broker.broker();
    let order = match action {
        BotAction::Place(o) | BotAction::Replace { order: o, .. } | BotAction::Cancel { order: o, .. } => o,
    };
    if !b.offers(order.asset_class) {
        return Err(OrderError::BrokerDoesNotOffer { broker: b.name(), asset_class: order.asset_class });
    }
    match action {
        BotAction::Place(o) => b.place(account_id, o),
        BotAction::Replace { order_id, order, quantity_changed, filled } => {
            b.replace_after_fills(account_id, order_id, order, *quantity_changed, *filled)
        }
        BotAction::Cancel { order_id, order } => b.cancel(account_id, order_id, order),
    }
}

/// HTTP method of a broker request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Method {
    /// GET
    #[serde(rename = "GET")]
    Get,
    /// POST
    #[serde(rename = "POST")]
    Post,
    /// PUT
    #[serde(rename = "PUT")]
    Put,
    /// PATCH
    #[serde(rename = "PATCH")]
    Patch,
    /// DELETE
    #[serde(rename = "DELETE")]
    Delete,
}

impl Method {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// A request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// No body (for example a DELETE).
    Empty,
    /// A JSON document with exact numbers, kept as its compact text.
    Json(Json),
    /// `application/x-www-form-urlencoded`, already encoded.
    Form(String),
}

impl Serialize for Body {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Body::Empty => s.serialize_none(),
            Body::Json(j) => j.serialize(s),
            Body::Form(f) => s.serialize_str(f),
        }
    }
}

impl Body {
    /// The bytes to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Body::Empty => Vec::new(),
            Body::Json(j) => j.as_str().as_bytes().to_vec(),
            Body::Form(f) => f.clone().into_bytes(),
        }
    }

    /// The bytes to send, borrowed: bodies are kept as the text that goes on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Body::Empty => &[],
            Body::Json(j) => j.as_str().as_bytes(),
            Body::Form(f) => f.as_bytes(),
        }
    }
}

/// The exact HTTP request a broker expects. `path` is everything after the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Request {
    /// HTTP method.
    pub method: Method,
    /// Path after the host, with the account id (and order id) in it; a short one is
    /// kept inline.
    pub path: CompactString,
    /// Content type of the body, when there is one.
    pub content_type: Option<&'static str>,
    /// The body.
    pub body: Body,
}

/// `application/json`
pub const JSON: &str = "application/json";
/// `application/x-www-form-urlencoded`
pub const FORM: &str = "application/x-www-form-urlencoded";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_body_serializes_as_its_wire_text() {
        let price = crate::decimal::parse("190.50").unwrap();
        let body =
            Body::Json(Json::obj().with("symbol", "A\"B").with("limit_price", price).with("legs", [Json::obj()]));
        let wire = String::from_utf8(body.to_bytes()).unwrap();
        assert_eq!(wire, r#"{"symbol":"A\"B","limit_price":190.50,"legs":[{}]}"#);
        assert_eq!(body.as_bytes(), wire.as_bytes());
        // Inside an Outcome's JSON the body is the same JSON value, digits and key order kept.
        assert_eq!(serde_json::to_string(&body).unwrap(), wire);
        let form = Body::Form("a=1&b=2".into());
        assert_eq!((form.as_bytes(), serde_json::to_string(&form).unwrap()), (&b"a=1&b=2"[..], r#""a=1&b=2""#.into()));
        assert_eq!((Body::Empty.as_bytes(), serde_json::to_string(&Body::Empty).unwrap()), (&[][..], "null".into()));
    }
}
