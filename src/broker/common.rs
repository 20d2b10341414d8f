//! Checks and small pieces every broker formatter shares. Nothing here knows a broker's
//! name: each function takes the broker's display name for its messages, so a trader
//! reading a rejection always learns which broker refused what.

use crate::decimal::{self, Decimal};
use crate::model::words::trim;
use crate::model::{
    AssetClass, CryptoPair, Duration, Intent, LegAction, Order, OrderError, OrderLeg, OrderType, PriceEffect,
};
use compact_str::CompactString;
use std::collections::HashSet;

/// Most legs any supported broker takes in one option order (Alpaca, Tradier and
/// Tastytrade document four; Schwab's largest named structures have four).
pub const MAX_LEGS: usize = 4;

/// One path segment, percent-encoded so an account or order id can never add a segment
/// or a query string to the path (RFC 3986 unreserved characters pass through).
pub fn segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_segment(&mut out, s);
    out
}

/// Somewhere text can be appended: a `String`, or a path kept inline when short.
trait PushStr {
    fn push_str(&mut self, s: &str);
}

impl PushStr for String {
    fn push_str(&mut self, s: &str) {
        String::push_str(self, s);
    }
}

impl PushStr for CompactString {
    fn push_str(&mut self, s: &str) {
        CompactString::push_str(self, s);
    }
}

/// Appends [`segment`]`(s)` to `out`: runs of unreserved characters as they are, in one
/// piece each (an id is usually one run).
fn push_segment(out: &mut impl PushStr, s: &str) {
    // `.` and `..` are path steps, not names: a client would resolve them away.
    if s.bytes().all(|b| b == b'.') {
        (0..s.len()).for_each(|_| out.push_str("%2E"));
        return;
    }
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        if matches!(b, b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~') {
            continue;
        }
        // Every byte of a multi-byte character is escaped, so a run only ever starts after an
        // ASCII byte (a character boundary); between two escaped bytes there is no run.
        if start < i {
            out.push_str(&s[start..i]);
        }
        let escaped = [b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
        // '%' and hexadecimal digits: ASCII.
        out.push_str(std::str::from_utf8(&escaped).unwrap_or("%3F"));
        start = i + 1;
    }
    if start < s.len() {
        out.push_str(&s[start..]);
    }
}

/// `{before}{account}{after}` in one buffer, the account id as [`account`] writes it.
pub fn path(broker: &'static str, before: &str, account_id: &str, after: &str) -> Result<CompactString, OrderError> {
    let id = trim(account_id);
    if id.is_empty() {
        return Err(OrderError::NoAccountId { broker });
    }
    // Inline when it fits (24 bytes), so a short path costs no allocation.
    let mut out = CompactString::with_capacity(before.len() + 3 * id.len() + after.len());
    out.push_str(before);
    push_segment(&mut out, id);
    out.push_str(after);
    Ok(out)
}

/// The account id as a path segment; an empty one would send the order to a path that
/// names no account, so it is refused as missing data.
pub fn account(broker: &'static str, account_id: &str) -> Result<String, OrderError> {
    let id = trim(account_id);
    if id.is_empty() {
        return Err(OrderError::NoAccountId { broker });
    }
    Ok(segment(id))
}

/// The working order's id as a path segment.
pub fn order_id(broker: &'static str, order_id: &str) -> Result<String, OrderError> {
    let id = trim(order_id);
    if id.is_empty() {
        return Err(OrderError::NoOrderId { broker });
    }
    Ok(segment(id))
}

/// A decimal with its exact digits (`190.50` stays `190.50`).
pub fn digits(d: Decimal) -> String {
    d.to_string()
}

/// A quantity without trailing zeros (`10.0` → `10`), since brokers that read integers
/// (Tradier's form, Schwab's contract counts) refuse a decimal point on a whole number.
pub fn qty(d: Decimal) -> Decimal {
    decimal::normalize(d)
}

/// The largest order quantity sent to any broker (10^15 units: more than the supply of most coins in their
/// smallest common unit). A quantity above it comes from a snapshot or a position read back that is wrong,
/// and multiplied by a leg's ratio it could leave `Decimal`'s range.
pub const MAX_QUANTITY: Decimal = Decimal::from_parts(2_764_472_320, 232_830, 0, false, 0);

/// The order's quantity, checked: above zero, whole for shares at brokers without
/// fractional orders and always whole for option contracts, and at most `crypto_scale`
/// decimal places for coins (never rounded here: the builder sized it; a broker that
/// would cut digits must say so).
pub fn quantity(
    broker: &'static str,
    order: &Order,
    fractional_shares: bool,
    crypto_scale: u32,
) -> Result<Decimal, OrderError> {
    let q = qty(order.quantity);
    if decimal::not_positive(q) {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!("the order quantity {q} is not above zero, so {broker} cannot take it"),
        });
    }
    if q > MAX_QUANTITY {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!(
                "the order quantity {q} is beyond any order's size (at most {MAX_QUANTITY}); nothing is sent"
            ),
        });
    }
    let whole = decimal::is_whole(q);
    match order.asset_class {
        AssetClass::Option if !whole => Err(OrderError::BrokerRefuses {
            broker,
            reason: format!(
                "option orders are in whole contracts; {q} is not a whole number, so {broker} cannot take it"
            ),
        }),
        AssetClass::Equity if !whole && !fractional_shares => Err(OrderError::BrokerRefuses {
            broker,
            reason: format!("{broker} takes whole shares only through its API; {q} shares is a fractional quantity"),
        }),
        AssetClass::Crypto if q.scale() > crypto_scale => Err(OrderError::BrokerRefuses {
            broker,
            reason: format!("{broker} accepts crypto quantities to {crypto_scale} decimal places; {q} has more"),
        }),
        _ => Ok(q),
    }
}

/// The limit price for a limit order (`None` for market orders, whose price, if any, is
/// ignored because a market order has none). Single-instrument prices must be above zero;
/// a spread's net may be zero (an even spread).
pub fn limit_price(broker: &'static str, order: &Order) -> Result<Option<Decimal>, OrderError> {
    if order.order_type == OrderType::Market {
        return Ok(None);
    }
    let p = order.limit_price.ok_or_else(|| {
        OrderError::Unfillable(format!("the limit order for {} has no limit price to send to {broker}", label(order)))
    })?;
    let spread = order.legs.len() > 1;
    // Below zero, or zero for a single instrument.
    if (p.is_sign_negative() && !p.is_zero()) || (p.is_zero() && !spread) {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!("the limit price {p} for {} is not above zero, so {broker} cannot take it", label(order)),
        });
    }
    match order.asset_class {
        AssetClass::Equity => stock_increment(broker, order, p)?,
        // No US listed option trades in less than a cent: a finer premium from the alert (or its legs' prices) was
        // sent and refused by the broker after a processed answer, an exit among them.
        AssetClass::Option => {
            on_increment(broker, order, p, 2, "option prices go (whole cents)")?;
            index_tick(broker, order, p)?;
        }
        AssetClass::Crypto => {}
    }
    Ok(Some(p))
}

/// SPX and SPXW options trade in $0.05 under $3 and $0.10 from $3 a contract, and their spreads in $0.05 (Cboe;
/// tastytrade: "an SPX order that is not in a .05 or .10 increment … may be rejected"). A price of the sender's off
/// that tick was sent, answered processed, and rejected at the exchange: an exit among them left the position open.
/// Computed prices are on the tick already. Other roots are left to the cent: penny classes (SPY, QQQ) cannot be
/// told from the others without class data.
fn index_tick(broker: &'static str, order: &Order, p: Decimal) -> Result<(), OrderError> {
    let spx = |root: &str| root.eq_ignore_ascii_case("SPX") || root.eq_ignore_ascii_case("SPXW");
    if order.legs.is_empty() || !order.legs.iter().all(|l| spx(&l.contract.root)) {
        return Ok(());
    }
    let (tick, step) = if order.legs.len() > 1 {
        (Decimal::new(5, 2), "SPX spread prices go ($0.05)")
    } else if p < Decimal::from(3) {
        (Decimal::new(5, 2), "SPX option prices go ($0.05 under $3)")
    } else {
        (Decimal::new(10, 2), "SPX option prices go ($0.10 from $3)")
    };
    let Some(ticks) = p.checked_div(tick) else { return Ok(()) };
    if ticks.fract().is_zero() {
        return Ok(());
    }
    let down = ticks.trunc() * tick;
    let up = down + tick;
    Err(OrderError::BrokerRefuses {
        broker,
        reason: format!(
            "the limit price {p} for {} is off the tick {step}, so the exchange would reject it; send {} or {}",
            label(order),
            down.normalize(),
            up.normalize()
        ),
    })
}

/// A stock's limit price on the increments every US broker takes (SEC Rule 612: whole cents from $1, $0.0001
/// below): a sub-penny price at or above $1 is refused by the broker after the sender was answered processed
/// (a CLOSE then leaves the position open), so it is refused here, naming the prices either side. The sender's
/// digits are never rounded away (a price reaches the broker as sent); computed prices are on the tick already.
fn stock_increment(broker: &'static str, order: &Order, p: Decimal) -> Result<(), OrderError> {
    // Cents are fine at any price, and the scale as written is read first: the comparison and the normalization
    // (trailing zeros, `190.100`) are paid only by prices written finer.
    if p.scale() <= 2 {
        return Ok(());
    }
    let (places, step) = if p >= Decimal::ONE {
        (2, "stock prices go (whole cents from $1, SEC Rule 612)")
    } else {
        (4, "stock prices go ($0.0001 below $1, SEC Rule 612)")
    };
    on_increment(broker, order, p, places, step)
}

/// `p` with at most `places` decimals (trailing zeros aside), else the broker's refusal, naming the prices either
/// side. `step` says what prices go in.
fn on_increment(broker: &'static str, order: &Order, p: Decimal, places: u32, step: &str) -> Result<(), OrderError> {
    if p.scale() <= places || p.normalize().scale() <= places {
        return Ok(());
    }
    let down = p.round_dp_with_strategy(places, rust_decimal::RoundingStrategy::ToZero);
    let up = p.round_dp_with_strategy(places, rust_decimal::RoundingStrategy::AwayFromZero);
    Err(OrderError::BrokerRefuses {
        broker,
        reason: format!(
            "the limit price {p} for {} is finer than {step}, so {broker} would refuse it; send {down} or {up}",
            label(order)
        ),
    })
}

/// What the order is about, for messages.
pub fn label(order: &Order) -> String {
    match (&order.pair, order.legs.as_slice()) {
        (Some(p), _) => p.to_string(),
        (None, []) => order.symbol.to_string(),
        (None, [leg]) => leg.contract.occ_unpadded(),
        (None, legs) => format!("the {}-leg {} spread", legs.len(), order.symbol),
    }
}

/// The order's option legs, checked: at least one, at most [`MAX_LEGS`], each ratio at
/// least one, no contract twice (every broker asks for distinct leg symbols).
pub fn option_legs<'a>(broker: &'static str, order: &'a Order) -> Result<&'a [OrderLeg], OrderError> {
    let legs = order.legs.as_slice();
    if legs.is_empty() {
        return Err(OrderError::Unfillable(format!(
            "the option order for {} has no contracts (legs) to send to {broker}",
            order.symbol
        )));
    }
    if legs.len() > MAX_LEGS {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!("{broker} takes at most {MAX_LEGS} legs in one option order; this one has {}", legs.len()),
        });
    }
    if let Some(l) = legs.iter().find(|l| l.ratio == 0) {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!(
                "the leg {} has a ratio of zero contracts, so {broker} cannot take it",
                l.contract.occ_unpadded()
            ),
        });
    }
    let mut seen = HashSet::new();
    for l in legs {
        if !seen.insert(&l.contract) {
            return Err(OrderError::BrokerRefuses {
                broker,
                reason: format!(
                    "the contract {} appears in two legs; {broker} needs each leg to name a different contract",
                    l.contract.occ_unpadded()
                ),
            });
        }
    }
    Ok(legs)
}

/// Contracts for one leg: the order's quantity times the leg's ratio. A quantity [`quantity`] passed (at most
/// [`MAX_QUANTITY`]) times any `u32` ratio is far inside `Decimal`'s range; saturating rather than panicking
/// for any other.
pub fn leg_quantity(quantity: Decimal, leg: &OrderLeg) -> Decimal {
    qty(quantity.saturating_mul(Decimal::from(leg.ratio)))
}

/// Whether the order's net limit price is paid or received. A single option leg pays
/// when buying and receives when selling; the order's own `price_effect`, when given,
/// must agree, since a mismatch means the price was meant for another order. A spread
/// takes its effect from the order.
pub fn price_effect(broker: &'static str, order: &Order) -> Result<PriceEffect, OrderError> {
    if let [leg] = order.legs.as_slice() {
        let natural = if leg.action.is_buy() { PriceEffect::Debit } else { PriceEffect::Credit };
        return match order.price_effect {
            Some(e) if e != natural => Err(OrderError::BrokerRefuses {
                broker,
                reason: format!(
                    "the order is priced as a {} but {} {} is a {}; {broker} would not trade it as meant",
                    effect_word(e),
                    action_words(leg.action),
                    leg.contract.occ_unpadded(),
                    effect_word(natural)
                ),
            }),
            _ => Ok(natural),
        };
    }
    order.price_effect.ok_or_else(|| {
        OrderError::Unfillable(format!(
            "the spread's net price does not say whether it is a debit or a credit, so {broker} cannot be told"
        ))
    })
}

/// `debit` or `credit`.
pub fn effect_word(e: PriceEffect) -> &'static str {
    match e {
        PriceEffect::Debit => "debit",
        PriceEffect::Credit => "credit",
    }
}

/// `buying to open`, … for messages.
fn action_words(a: LegAction) -> &'static str {
    match a {
        LegAction::BuyToOpen => "buying to open",
        LegAction::SellToOpen => "selling to open",
        LegAction::BuyToClose => "buying to close",
        LegAction::SellToClose => "selling to close",
    }
}

/// The crypto pair, refusing shorts: every supported crypto venue is spot, where selling
/// what you do not hold is not possible and buying "to cover" has nothing to cover.
pub fn spot_pair<'a>(broker: &'static str, order: &'a Order) -> Result<&'a CryptoPair, OrderError> {
    if matches!(order.intent, Intent::OpenShort | Intent::CloseShort) {
        return Err(OrderError::BrokerRefuses {
            broker,
            reason: format!(
                "{broker} trades spot crypto only; it cannot {} a short position in {}",
                if order.intent == Intent::OpenShort { "open" } else { "cover" },
                label(order)
            ),
        });
    }
    order.pair.as_ref().ok_or_else(|| {
        OrderError::Unfillable(format!("the crypto order for {} names no pair for {broker}", order.symbol))
    })
}

/// The rejection for a time in force a broker (or one of its asset classes) lacks.
pub fn unsupported_tif(
    broker: &'static str,
    what: &'static str,
    duration: Duration,
    accepted: &'static str,
) -> OrderError {
    OrderError::TimeInForce { broker, what, duration, accepted }
}

/// The equity symbol, refusing an empty one.
pub fn symbol<'a>(broker: &'static str, order: &'a Order) -> Result<&'a str, OrderError> {
    let s = trim(&order.symbol);
    if s.is_empty() {
        return Err(OrderError::Unfillable(format!("the order names no symbol to send to {broker}")));
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quantity_beyond_any_order_is_refused_and_legs_never_leave_the_range() {
        use crate::model::{AssetClass, Duration, Intent, Order, OrderType};
        let order = |q: Decimal| Order {
            asset_class: AssetClass::Equity,
            symbol: "AAPL".into(),
            pair: None,
            intent: Intent::OpenLong,
            quantity: q,
            order_type: OrderType::Market,
            limit_price: None,
            price_effect: None,
            duration: Duration::Day,
            legs: vec![],
            client_order_id: "swh-1".parse().unwrap(),
            reference_price: None,
        };
        assert_eq!(MAX_QUANTITY.to_string(), "1000000000000000");
        assert!(quantity("X", &order(MAX_QUANTITY), false, 0).is_ok());
        let e = quantity("X", &order(MAX_QUANTITY + Decimal::ONE), false, 0).unwrap_err();
        assert!(e.to_string().contains("beyond any order's size"), "{e}");
        // A quantity that passed, times any leg ratio, stays inside Decimal's range.
        assert!(MAX_QUANTITY.checked_mul(Decimal::from(u32::MAX)).is_some());
    }

    #[test]
    fn segments_cannot_escape_the_path() {
        // Runs of unreserved bytes are copied whole; every other byte, each byte of a
        // multi-byte character included, is escaped on its own.
        let byte_by_byte = |s: &str| {
            s.bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => char::from(b).to_string(),
                    _ => format!("%{b:02X}"),
                })
                .collect::<String>()
        };
        for s in ["aé", "éa", "a/é/b", "日本", "a日b本", "é", "ä.", ".a", "a b", "~x_y-z.", "%", "\u{0}x"] {
            assert_eq!(segment(s), byte_by_byte(s), "{s:?}");
            assert_eq!(
                path("B", "/a/", s, "/o").map(|p| p.to_string()),
                Ok(format!("/a/{}/o", byte_by_byte(s.trim())))
            );
        }
        assert_eq!(segment("PA0000000"), "PA0000000");
        assert_eq!(segment("61e69015-8549-4bfd"), "61e69015-8549-4bfd");
        assert_eq!(segment("a/b?c=d#e f"), "a%2Fb%3Fc%3Dd%23e%20f");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("é"), "%C3%A9");
        let path = |id| path("B", "/a/", id, "/orders");
        assert_eq!(path(" a/b "), Ok("/a/a%2Fb/orders".into()));
        assert_eq!(path(".."), Ok("/a/%2E%2E/orders".into()));
        assert_eq!(path(" "), Err(OrderError::NoAccountId { broker: "B" }));
        assert_eq!(path("x?"), Ok(format!("/a/{}/orders", segment("x?")).into()));
        assert_eq!(segment("v1.2"), "v1.2");
        assert!(matches!(account("Tradier", "  "), Err(OrderError::NoAccountId { .. })));
        assert!(matches!(order_id("Tradier", ""), Err(OrderError::NoOrderId { .. })));
    }
}
