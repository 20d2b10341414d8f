//! Reading an account back from a broker: its positions, its orders, one order by the
//! broker's id, and our own order by our client order id (or, where a broker keeps none,
//! by its terms).
//!
//! Each broker implements [`AccountReads`] in its own file: the requests (no I/O: the host
//! sends them) and the parsers for their answers. The pieces here are shared and know no
//! broker's name: how a lookup's answer becomes [`Found`], query strings, timestamps, and
//! the serde readers for the shapes brokers use (numbers as strings or as JSON numbers with
//! their exact digits, one item as an object, none as the string `"null"`).

use super::{Body, Method, Request};
use crate::decimal::{self, Decimal};
use crate::model::{
    AssetClass, BrokerOrder, BrokerPosition, CryptoPair, Date, Order, OrderError, OrderSide, OrderStatus, OrderType,
    PriceEffect, ProductIncrements, ReadError,
};
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// How our order is found after a send whose answer was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The broker looks the order up by our client order id: the answer is the order, or
    /// a 404 when there is none.
    Direct(Request),
    /// The broker lists orders; ours is the one carrying our client order id.
    List(Request),
    /// The broker keeps no client order id: orders entered around the send are listed and
    /// ours is recognised by its terms. More than one candidate means the answer is unknown.
    Window(Request),
}

impl Lookup {
    /// The request to send.
    pub fn request(&self) -> &Request {
        match self {
            Lookup::Direct(r) | Lookup::List(r) | Lookup::Window(r) => r,
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Our order, in whatever status it is.
    Found(Box<BrokerOrder>),
    /// The broker says there is no such order: sending it again is safe.
    NotFound,
    /// Several orders could be ours: the truth is unknown, and the order must never be
    /// sent again on this answer.
    Ambiguous(usize),
    /// The answer cannot tell (an error, a page of several, a shape that cannot be read).
    Unreadable(String),
}

/// Where a paged lookup stands after one more page ([`after_page`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PagedLookup {
    /// Read the next page ([`AccountReads::lookup_next_page`]), carrying our order if a page
    /// before it held it.
    Next(Option<Box<BrokerOrder>>),
    /// The lookup's answer.
    Done(Found),
}

/// Folds one page's answer (`page`, from [`AccountReads::find_ours`]) into what the pages
/// before it found (`earlier`). `has_next`: the page was full and the list may go on.
///
/// Our order on a full page is not the answer yet: a broker that does not refuse a repeated
/// client order id may hold a resend's copy on the next page, and answered "found" there,
/// the doubled position was recorded as one order. Found again later, the answer is
/// ambiguous; the list ending without another, it is the order found.
pub fn after_page(earlier: Option<Box<BrokerOrder>>, page: Found, has_next: bool) -> PagedLookup {
    match (earlier, page) {
        (None, Found::Found(o)) if has_next => PagedLookup::Next(Some(o)),
        // The same order met again (the list moved while it was read: an order placed meanwhile pushes the older
        // ones a page on) is one order, not a second copy.
        (Some(o), Found::Found(p)) if !o.order_id.is_empty() && o.order_id == p.order_id => match has_next {
            true => PagedLookup::Next(Some(o)),
            false => PagedLookup::Done(Found::Found(o)),
        },
        (earlier, Found::Unreadable(_)) if has_next => PagedLookup::Next(earlier),
        (None, page) => PagedLookup::Done(page),
        (Some(_), Found::Found(_)) => PagedLookup::Done(Found::Ambiguous(2)),
        (Some(_), Found::Ambiguous(n)) => PagedLookup::Done(Found::Ambiguous(n.saturating_add(1))),
        (Some(o), Found::NotFound) => PagedLookup::Done(Found::Found(o)),
        // A page that cannot be read may hold a second copy: the answer cannot tell.
        (Some(_), Found::Unreadable(m)) => PagedLookup::Done(Found::Unreadable(m)),
    }
}

/// Reading an account back from one broker. Every [`super::Broker`] implements it, each
/// in its own file.
pub trait AccountReads {
    /// The request that lists the account's positions.
    fn positions_request(&self, account_id: &str) -> Result<Request, OrderError>;

    /// The request that lists the account's working orders (at some brokers, every order
    /// of the day in any status; [`BrokerOrder::status`] tells them apart). `now_ms` bounds
    /// the brokers that require a time window.
    fn open_orders_request(&self, account_id: &str, now_ms: i64) -> Result<Request, OrderError>;

    /// The request that reads one order by the broker's id.
    fn order_request(&self, account_id: &str, order_id: &str) -> Result<Request, OrderError>;

    /// How to find the order we placed with `client_order_id` at about `placed_ms` (the
    /// time of the send whose answer was lost).
    fn lookup_request(&self, account_id: &str, client_order_id: &str, placed_ms: i64) -> Result<Lookup, OrderError>;

    /// Reads the answer to [`AccountReads::positions_request`]. Flat rows are left out.
    fn parse_positions(&self, body: &[u8]) -> Result<Vec<BrokerPosition>, ReadError>;

    /// Reads one page of the positions (the answer to `request`: the
    /// [`AccountReads::positions_request`] or a page it led to): its positions, and the request
    /// for the next page when the broker pages them and there are more.
    fn parse_positions_page(
        &self,
        _request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerPosition>, Option<Request>), ReadError> {
        Ok((self.parse_positions(body)?, None))
    }

    /// Reads a list of orders (the answer to [`AccountReads::open_orders_request`] or to a
    /// [`Lookup::List`] or [`Lookup::Window`]).
    fn parse_orders(&self, body: &[u8]) -> Result<Vec<BrokerOrder>, ReadError>;

    /// Reads one page of the working-order list (the answer to `request`: the
    /// [`AccountReads::open_orders_request`] or a page it led to): its orders, and the
    /// request for the next page when the broker pages the list and this page is full.
    /// `None`: the list ends here.
    fn parse_orders_page(
        &self,
        _request: &Request,
        body: &[u8],
    ) -> Result<(Vec<BrokerOrder>, Option<Request>), ReadError> {
        Ok((self.parse_orders(body)?, None))
    }

    /// Reads one order (the answer to [`AccountReads::order_request`] or a [`Lookup::Direct`]).
    fn parse_order(&self, body: &[u8]) -> Result<BrokerOrder, ReadError>;

    /// The client order id as it stands at the broker once sent: the same id, unless the
    /// broker allows fewer characters and the request had to spell it its way.
    fn client_order_id_as_sent(&self, client_order_id: &str) -> String {
        client_order_id.trim().to_string()
    }

    /// The lookup's next page, when `body` (the answer to `lookup`) is a full page of a
    /// list that may go on: the broker pages its order list and the order was not on this
    /// page. `None`: the answer was the whole list.
    fn lookup_next_page(&self, _lookup: &Lookup, _body: &[u8]) -> Option<Lookup> {
        None
    }

    /// Reads the answer (`status`, `body`) to a lookup: our order, none, several, or
    /// cannot tell. `expected` is the order as sent; a [`Lookup::Window`] needs it.
    fn find_ours(
        &self,
        kind: &Lookup,
        status: u16,
        body: &[u8],
        client_order_id: &str,
        expected: Option<&Order>,
        placed_ms: i64,
    ) -> Found {
        find(self, kind, status, body, client_order_id, expected, placed_ms)
    }

    /// The request that reads a crypto product's increments, at brokers that publish them.
    fn product_request(&self, _pair: &CryptoPair) -> Option<Request> {
        None
    }

    /// Reads the answer to [`AccountReads::product_request`].
    fn parse_product(&self, _body: &[u8]) -> Result<ProductIncrements, ReadError> {
        Err(ReadError::Unreadable { broker: "this broker", detail: "it publishes no product increments".into() })
    }
}

/// Seconds before the send that an order's entry time may show (clocks differ).
pub(crate) const SKEW_BEFORE_MS: i64 = 120_000;
/// Seconds after the send within which the broker enters the order.
pub(crate) const ENTERED_WITHIN_MS: i64 = 300_000;
/// How far past the send one lookup window reaches at least: a host steps its lookups by less (the reference
/// server by four minutes; each window then overlaps the one before).
#[cfg(test)]
const LOOKUP_AHEAD_MS: i64 = 120_000;

/// The shared reading of a lookup's answer.
pub(crate) fn find<R: AccountReads + ?Sized>(
    reads: &R,
    kind: &Lookup,
    status: u16,
    body: &[u8],
    client_order_id: &str,
    expected: Option<&Order>,
    placed_ms: i64,
) -> Found {
    if !(200..300).contains(&status) {
        return Found::Unreadable(format!("HTTP {status}: {}", super::answer::quoted(body)));
    }
    let ours = reads.client_order_id_as_sent(client_order_id);
    match kind {
        Lookup::Direct(_) => match reads.parse_order(body) {
            Ok(o) if o.client_order_id.as_deref().map_or(true, |id| id == ours) => Found::Found(Box::new(o)),
            Ok(o) => Found::Unreadable(format!(
                "the broker answered order {} with client order id {:?}, not {ours:?}",
                o.order_id,
                o.client_order_id.unwrap_or_default()
            )),
            Err(e) => Found::Unreadable(e.to_string()),
        },
        Lookup::List(_) => match reads.parse_orders(body) {
            Ok(orders) => one_of(orders.into_iter().filter(|o| o.client_order_id.as_deref() == Some(ours.as_str()))),
            Err(e) => Found::Unreadable(e.to_string()),
        },
        Lookup::Window(_) => {
            let Some(expected) = expected else {
                return Found::Unreadable(
                    "this broker keeps no client order id, so the order is recognised by its terms, and none were given"
                        .into(),
                );
            };
            match reads.parse_orders(body) {
                Ok(orders) => one_of(orders.into_iter().filter(|o| {
                    let in_time = o
                        .created_ms
                        .map_or(true, |t| t >= placed_ms - SKEW_BEFORE_MS && t <= placed_ms + ENTERED_WITHIN_MS);
                    in_time && o.matches(expected)
                })),
                Err(e) => Found::Unreadable(e.to_string()),
            }
        }
    }
}

fn one_of(mut candidates: impl Iterator<Item = BrokerOrder>) -> Found {
    match (candidates.next(), candidates.count()) {
        (None, _) => Found::NotFound,
        (Some(o), 0) => Found::Found(Box::new(o)),
        (Some(_), more) => Found::Ambiguous(more + 1),
    }
}

/// A GET request for `path` (with its query already in it).
pub(crate) fn get(path: String) -> Request {
    Request { method: Method::Get, path: path.into(), content_type: None, body: Body::Empty }
}

/// `?k=v&…` with every value percent-encoded (RFC 3986 unreserved characters and `:` pass,
/// so timestamps stay readable; `+` and spaces never pass as themselves).
pub(crate) fn query(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in pairs.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        encode_into(&mut out, k);
        out.push('=');
        encode_into(&mut out, v);
    }
    out
}

fn encode_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b':' => out.push(char::from(b)),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
}

/// `ms` as a UTC timestamp: `2026-03-03T14:30:00.000Z` with milliseconds, else
/// `2026-03-03T14:30:00Z`.
pub(crate) fn utc(ms: i64, millis: bool) -> String {
    let secs = ms.div_euclid(1000);
    let date = Date::from_days_since_epoch(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let (h, m, sec) = (s / 3600, s / 60 % 60, s % 60);
    if millis {
        format!("{date}T{h:02}:{m:02}:{sec:02}.{:03}Z", ms.rem_euclid(1000))
    } else {
        format!("{date}T{h:02}:{m:02}:{sec:02}Z")
    }
}

/// The start of the minute [`SKEW_BEFORE_MS`] before `placed_ms`: a window that starts there and lasts five
/// minutes holds an order the broker stamped with a clock up to two minutes behind the host's, and one entered
/// two minutes after the send (later ones are in the windows a lookup steps on to). Starting a minute before,
/// an order stamped by a clock 60–120 s behind was missed and sent again.
pub(crate) fn window_start(placed_ms: i64) -> i64 {
    (placed_ms - SKEW_BEFORE_MS).div_euclid(60_000) * 60_000
}

/// Reads a whole answer into `T`, naming the broker when it cannot.
pub(crate) fn parse<T: DeserializeOwned>(broker: &'static str, body: &[u8]) -> Result<T, ReadError> {
    serde_json::from_slice(body).map_err(|e| ReadError::Unreadable { broker, detail: e.to_string() })
}

/// The unpadded OCC symbol of a padded or unpadded one, or the symbol upper-cased when it
/// is no option symbol.
pub(crate) fn occ(symbol: &str) -> (String, Option<crate::model::OptionContract>) {
    match crate::model::OptionContract::parse_occ(symbol) {
        Some(c) if c.osi_problem().is_none() => (c.occ_unpadded(), Some(c)),
        _ => (symbol.trim().to_ascii_uppercase(), None),
    }
}

/// Contracts per unit: the leg's contracts over the order's units, when that is whole.
pub(crate) fn ratio(leg_quantity: Decimal, units: Decimal) -> u32 {
    if units.is_zero() {
        return 1;
    }
    // Checked: both are the broker's numbers, and a quotient out of range would panic.
    let Some(r) = leg_quantity.checked_div(units) else { return 1 };
    if r.fract().is_zero() {
        r.normalize().to_string().parse::<u32>().unwrap_or(1).max(1)
    } else {
        1
    }
}

/// `o` as an order whose broker states no count of shares, coins or contracts: one sized by `notional`, an amount of
/// money (what it buys is known only as it fills), or an answer missing its size. Read as a count of zero, such an
/// order was a working order of nothing: the bot's state could not hold it (a strategy refuses a working order of
/// zero) and a MODIFY of it was sized from zero. Its quantity is zero (filled, what filled: that is its count), and
/// while it is not final its status is [`OrderStatus::Unknown`], with the reason, so that nothing takes it for done
/// nor for an order of zero.
pub(crate) fn without_count(mut o: BrokerOrder, notional: Option<Decimal>) -> BrokerOrder {
    o.notional = notional.map(|n| n.abs().normalize()).filter(|n| !n.is_zero());
    o.quantity = if o.status == OrderStatus::Filled { o.filled_quantity.max(Decimal::ZERO) } else { Decimal::ZERO };
    if !o.status.is_final() {
        o.status = OrderStatus::Unknown;
        o.reason = Some(match o.notional {
            Some(n) => format!(
                "sized as an amount of money ({n} in the quote currency), not by count: how many shares or coins it \
                 trades is not known until it fills"
            ),
            None => {
                "the broker states no size for it: how many shares, coins or contracts it trades is not known".into()
            }
        });
    }
    o
}

/// The status a broker's word maps to, through the broker's own table; any other word is
/// [`OrderStatus::Unknown`].
pub(crate) fn status_of(word: &str, table: &[(&str, OrderStatus)]) -> OrderStatus {
    let w = word.trim();
    table.iter().find(|(k, _)| k.eq_ignore_ascii_case(w)).map_or(OrderStatus::Unknown, |(_, s)| *s)
}

// ----- serde readers -----

/// A decimal given as a JSON number (its exact digits) or a string; `null`, absent and
/// `""` are none.
pub(crate) fn dec_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Decimal>, D::Error> {
    let raw = Option::<Box<RawValue>>::deserialize(d)?;
    match raw.as_deref().map(RawValue::get) {
        None | Some("null") | Some("\"\"") => Ok(None),
        Some(text) => decimal::from_raw_json(text)
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("expected a decimal number, got {text}"))),
    }
}

/// An id given as a string or a number (digits kept as written); `null` and absent are none.
pub(crate) fn id_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let raw = Option::<Box<RawValue>>::deserialize(d)?;
    let Some(raw) = raw else { return Ok(None) };
    let text = raw.get().trim();
    if text == "null" {
        return Ok(None);
    }
    if text.starts_with('"') {
        let s: String = serde_json::from_str(text).map_err(D::Error::custom)?;
        return Ok((!s.trim().is_empty()).then_some(s));
    }
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit() || b == b'-') {
        return Ok(Some(text.to_string()));
    }
    Err(D::Error::custom(format!("expected an id, got {text}")))
}

/// A string that may be `null` or absent (read as empty).
pub(crate) fn text<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// The deepest nesting of arrays and objects [`one_or_many`] reads.
const MAX_LIST_NESTING: usize = 32;

/// Whether the JSON `text` nests arrays and objects more than `limit` deep (brackets inside strings do not
/// count). One pass, stopping at the first level past the limit.
fn deeper_than(text: &str, limit: usize) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for b in text.bytes() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A list that a broker writes as an array, as one object when it has one item, or as
/// `null` / the string `"null"` (or `""`) when it has none.
pub(crate) fn one_or_many<'de, D: Deserializer<'de>, T: DeserializeOwned>(d: D) -> Result<Vec<T>, D::Error> {
    let raw = Option::<Box<RawValue>>::deserialize(d)?;
    let Some(raw) = raw else { return Ok(Vec::new()) };
    let text = raw.get().trim_start();
    // Each level of a list read here is parsed by a deserializer of its own, whose nesting limit starts afresh:
    // an answer nesting `leg` or `legs` a thousand deep overflowed the stack (an abort, not a panic, which took
    // the whole server down). Real answers nest a leg or two.
    if deeper_than(text, MAX_LIST_NESTING) {
        return Err(D::Error::custom(format!("a list nested more than {MAX_LIST_NESTING} levels deep")));
    }
    match text.as_bytes().first() {
        Some(b'[') => serde_json::from_str(text).map_err(D::Error::custom),
        Some(b'{') => serde_json::from_str(text).map(|one| vec![one]).map_err(D::Error::custom),
        Some(b'n') => Ok(Vec::new()),
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(D::Error::custom)?;
            if s.trim().is_empty() || s.trim().eq_ignore_ascii_case("null") {
                Ok(Vec::new())
            } else {
                Err(D::Error::custom(format!("expected a list, got the text {s:?}")))
            }
        }
        _ => Err(D::Error::custom(format!("expected a list, got {text}"))),
    }
}

/// [`one_or_many`] for a list an answer must name: `None` when the key is missing (with `#[serde(default)]`), so
/// that an answer naming no list (`{}`, a gateway fault) is told from one naming an empty list. Read as an empty
/// list, such an answer took a held position for flat and working orders for none.
pub(crate) fn named_one_or_many<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<Vec<T>>, D::Error> {
    one_or_many(d).map(Some)
}

/// A list of strings written as an array or as one string (`errors.error`).
pub(crate) fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Strings {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Strings>::deserialize(d)? {
        None => Vec::new(),
        Some(Strings::One(s)) => vec![s],
        Some(Strings::Many(v)) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_out_of_range_is_one_not_a_panic() {
        assert_eq!(ratio(Decimal::MAX, Decimal::new(1, 28)), 1);
        assert_eq!(ratio(Decimal::from(6), Decimal::from(2)), 3);
    }

    #[test]
    fn query_strings_and_times() {
        assert_eq!(
            query(&[("a", "b c+d"), ("t", "2026-03-03T14:30:00.000Z")]),
            "?a=b%20c%2Bd&t=2026-03-03T14:30:00.000Z"
        );
        assert_eq!(query(&[("id", "x/y&z=1")]), "?id=x%2Fy%26z%3D1");
        let ms = crate::model::timestamp_ms("2026-03-03T14:31:05.118Z").unwrap();
        assert_eq!(utc(ms, true), "2026-03-03T14:31:05.118Z");
        assert_eq!(utc(ms, false), "2026-03-03T14:31:05Z");
        assert_eq!(utc(window_start(ms), false), "2026-03-03T14:29:00Z");
        // A window reaches back the whole skew allowed between the host's clock and the broker's, wherever in its
        // minute the send falls.
        for second in [0, 1, 30, 59] {
            let placed = ms - ms.rem_euclid(60_000) + second * 1000;
            assert!(window_start(placed) <= placed - SKEW_BEFORE_MS, "{}", utc(placed, false));
            assert!(window_start(placed) + ENTERED_WITHIN_MS >= placed + LOOKUP_AHEAD_MS, "{}", utc(placed, false));
        }
        assert_eq!(utc(0, true), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn ratios() {
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        assert_eq!(ratio(d("2.00000000"), d("1")), 2);
        assert_eq!(ratio(d("3"), d("2")), 1, "not whole: one");
        assert_eq!(ratio(d("1"), Decimal::ZERO), 1);
    }

    #[derive(Deserialize)]
    struct Shapes {
        #[serde(default, deserialize_with = "one_or_many")]
        items: Vec<Item>,
        #[serde(default, deserialize_with = "dec_opt")]
        n: Option<Decimal>,
        #[serde(default, deserialize_with = "id_opt")]
        id: Option<String>,
    }

    #[derive(Deserialize)]
    struct Item {
        #[serde(deserialize_with = "dec_opt")]
        q: Option<Decimal>,
    }

    fn shapes(s: &str) -> Result<Shapes, ReadError> {
        parse("Test", s.as_bytes())
    }

    #[test]
    fn broker_shapes() {
        let many = shapes(r#"{"items":[{"q":1.10000000},{"q":"2"}],"n":25.00000000,"id":2817345}"#).unwrap();
        assert_eq!(many.items.iter().map(|i| i.q.unwrap().to_string()).collect::<Vec<_>>(), ["1.10000000", "2"]);
        assert_eq!(many.n.unwrap().to_string(), "25.00000000", "the digits as written, not through f64");
        assert_eq!(many.id.as_deref(), Some("2817345"));
        assert_eq!(shapes(r#"{"items":{"q":3}}"#).unwrap().items.len(), 1, "one item as an object");
        assert!(shapes(r#"{"items":"null"}"#).unwrap().items.is_empty(), "none as the string null");
        assert!(shapes(r#"{"items":null,"n":"","id":null}"#).unwrap().items.is_empty());
        assert!(shapes(r#"{}"#).unwrap().n.is_none());
        assert!(matches!(shapes(r#"{"items":"lots"}"#), Err(ReadError::Unreadable { broker: "Test", .. })));
        assert!(shapes(r#"{"n":"12abc"}"#).is_err());
        assert!(shapes(r#"{"id":true}"#).is_err());
        assert!(shapes("not json").is_err());
    }
}

/// What a broker's order-type word means, whatever the broker's spelling: the order type, and for a
/// spread whether its positive price is paid (debit), received (credit) or even.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TypeWord {
    /// A market order.
    Market,
    /// A limit order; a single option's pays when buying and is received when selling.
    Limit,
    /// A spread at a net debit.
    Debit,
    /// A spread at a net credit.
    Credit,
    /// A spread at an even price (zero).
    Even,
    /// A word this service does not read.
    Other,
}

impl TypeWord {
    /// Order type, limit price and price effect of an order with this type word and `price`.
    pub(super) fn terms(
        self,
        price: Option<Decimal>,
        asset_class: AssetClass,
        side: Option<OrderSide>,
    ) -> (Option<OrderType>, Option<Decimal>, Option<PriceEffect>) {
        match self {
            TypeWord::Market => (Some(OrderType::Market), None, None),
            TypeWord::Limit => {
                let effect = match (asset_class, side) {
                    (AssetClass::Option, Some(OrderSide::Buy)) => Some(PriceEffect::Debit),
                    (AssetClass::Option, Some(OrderSide::Sell)) => Some(PriceEffect::Credit),
                    _ => None,
                };
                (Some(OrderType::Limit), price, effect)
            }
            TypeWord::Debit => (Some(OrderType::Limit), price, Some(PriceEffect::Debit)),
            TypeWord::Credit => (Some(OrderType::Limit), price, Some(PriceEffect::Credit)),
            TypeWord::Even => (Some(OrderType::Limit), Some(Decimal::ZERO), None),
            TypeWord::Other => (None, price, None),
        }
    }
}
