//! The Outcome of one delivery: the decision, the exact HTTP answer, the canonical
//! alerts, the broker requests with the neutral orders they were formatted from, and the
//! log records. The mapping from an error kind to an HTTP status and body lives here and
//! nowhere else ([`ErrorKind::http_status`]).

use crate::alert::{Alerts, ParseError};
use crate::broker::{BrokerId, Request};
use crate::decide::Refusal;
use crate::model::{ClientOrderId, Order, OrderError};
use crate::state::HexKey;
use serde::ser::SerializeSeq;
use serde::{Serialize, Serializer};
use smallvec::SmallVec;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

pub use crate::model::RequestKind;

/// What became of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Parsed and handed to the bots.
    Processed,
    /// Refused with a reason (200).
    Rejected,
    /// Seen within the dedup window (200).
    Duplicate,
    /// The strategy is not active (200).
    Inactive,
    /// Answered with a 4xx or 5xx status.
    Error,
}

/// Log level, as in the strategy's Logs view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Level {
    /// A parsed alert, an order handed to a bot.
    Info,
    /// A rejection, with its reason.
    Warn,
    /// A failure, with its cause.
    Error,
}

impl Level {
    /// `INFO`, `WARN` or `ERROR`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// One line of the strategy's Logs view, borrowed from the Outcome's [`Logs`]. Messages
/// never contain the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LogRecord<'a> {
    /// Severity.
    pub level: Level,
    /// What happened, in a trader's words.
    pub message: &'a str,
}

/// The log lines of one delivery, in order. Their texts share one buffer and the first
/// few lines' places are kept inline, so a delivery's usual three or four lines cost one
/// allocation, not one each. Serialized as an array of `{"level", "message"}`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Logs {
    text: String,
    lines: SmallVec<[(Level, u32, u32); 4]>,
}

impl Logs {
    /// No lines.
    pub fn new() -> Logs {
        Logs::default()
    }

    /// Adds a line.
    pub fn push(&mut self, level: Level, message: &str) {
        self.push_with(level, |t| t.push_str(message));
    }

    /// Adds a line whose text `write` appends to the shared buffer, so that a message
    /// made of pieces is never a `String` of its own.
    pub fn push_with(&mut self, level: Level, write: impl FnOnce(&mut String)) {
        if self.text.capacity() == 0 {
            // Room for a delivery's usual lines in the first allocation.
            self.text.reserve(256);
        }
        let start = self.text.len();
        write(&mut self.text);
        // Offsets past 4 GiB cannot happen: a body is at most 256 KiB, and a line says
        // less than its body.
        self.lines.push((level, start as u32, self.text.len() as u32));
    }

    /// Adds the lines of `other` after these.
    pub fn append(&mut self, other: &Logs) {
        for r in other.iter() {
            self.push(r.level, r.message);
        }
    }

    /// How many lines.
    pub fn len(&self) -> usize {
        self.lines.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// Line `i`.
    pub fn get(&self, i: usize) -> Option<LogRecord<'_>> {
        let &(level, start, end) = self.lines.get(i)?;
        let message = self.text.get(start as usize..end as usize).unwrap_or_default();
        Some(LogRecord { level, message })
    }

    /// The lines in order.
    pub fn iter(&self) -> LogLines<'_> {
        LogLines { logs: self, front: 0, back: self.lines.len() }
    }
}

/// The lines of a [`Logs`], in order.
#[derive(Debug, Clone)]
pub struct LogLines<'a> {
    logs: &'a Logs,
    front: usize,
    back: usize,
}

impl<'a> Iterator for LogLines<'a> {
    type Item = LogRecord<'a>;
    fn next(&mut self) -> Option<LogRecord<'a>> {
        if self.front == self.back {
            return None;
        }
        self.front += 1;
        self.logs.get(self.front - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.back - self.front, Some(self.back - self.front))
    }
}

impl DoubleEndedIterator for LogLines<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front == self.back {
            return None;
        }
        self.back -= 1;
        self.logs.get(self.back)
    }
}

impl ExactSizeIterator for LogLines<'_> {}

impl<'a> IntoIterator for &'a Logs {
    type Item = LogRecord<'a>;
    type IntoIter = LogLines<'a>;
    fn into_iter(self) -> LogLines<'a> {
        self.iter()
    }
}

impl fmt::Debug for Logs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Logs {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.len()))?;
        for r in self.iter() {
            seq.serialize_element(&r)?;
        }
        seq.end()
    }
}

/// One formatted request for one bot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderRequest {
    /// The bot's id (shared with the snapshot's bot).
    pub bot: Arc<str>,
    /// The bot's broker.
    #[serde(serialize_with = "broker_name")]
    pub broker: BrokerId,
    /// Place, replace or cancel.
    pub kind: RequestKind,
    /// The idempotency key (sent to brokers that accept one).
    pub client_order_id: ClientOrderId,
    /// For replace and cancel: the working order's id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    /// For replace: whether the broker keeps the order id (`true`) or cancels and
    /// replaces with a new id the host must track (`false`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keeps_order_id: Option<bool>,
    /// The client order id of an earlier request of this delivery, for the same bot, that
    /// must have succeeded before this one is sent: the cancel of a re-size's old order (at
    /// a broker that cannot change a quantity in place), the cancel of a working exit of the
    /// position a close closes (several such cancels each wait for the one before, and the
    /// close for the last), or the close of a reversal's old position. One id only: where a
    /// reversal's old side closes with several orders (one per option structure), each close
    /// names the one before and the new side the last, so the new side waits for every close
    /// (a close whose predecessor failed is held back too). Sending it after that request
    /// failed could double a position or leave one the sender did not mean, so a host holds
    /// it back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<ClientOrderId>,
    /// The exact HTTP request.
    pub request: Request,
    /// The broker-neutral order the request was formatted from: instrument or contract
    /// legs, intent, side, quantity, type, price, time in force, client order id. For a
    /// replace, the order as it should stand; for a cancel, the order being pulled.
    pub order: Order,
}

fn broker_name<S: Serializer>(b: &BrokerId, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(b.as_str())
}

/// The result of one delivery (or one dry run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Outcome {
    /// HTTP status to answer with.
    pub http_status: u16,
    /// The exact HTTP response body (JSON text). The fixed answers (processed,
    /// duplicate, rate limited) are borrowed, so they cost no allocation.
    #[serde(serialize_with = "raw_json")]
    pub response: Cow<'static, str>,
    /// The decision.
    pub decision: Decision,
    /// Why, for rejections and errors.
    pub reason: Option<String>,
    /// Machine-readable error code, for 4xx/5xx answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    /// The strategy's id when the token matched one (never the token), shared with the
    /// snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Arc<str>>,
    /// The delivery's dedup key (hex of SHA-256 of the body, or of the `message_id`),
    /// once the body was within the size limit. A host that persists outcomes stores it
    /// with the orders, and calls [`crate::Engine::release`] if its own commit fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<HexKey>,
    /// The canonical alerts, resolved where the decision got that far; for a rejection by
    /// the rules, each action word the strategy has a rule for is resolved all the same.
    pub alerts: Alerts,
    /// One request per bot action.
    pub orders: Vec<OrderRequest>,
    /// Log records for the Logs view.
    pub logs: Logs,
}

fn raw_json<S: Serializer>(body: &str, s: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_str::<&serde_json::value::RawValue>(body) {
        Ok(raw) => raw.serialize(s),
        Err(_) => s.serialize_str(body),
    }
}

/// Machine-readable codes of structured error bodies.
pub mod code {
    /// 400: the token is not 64 lowercase hex characters.
    pub const INVALID_TOKEN: &str = "invalid_token";
    /// 404: no strategy has this token.
    pub const UNKNOWN_TOKEN: &str = "unknown_token";
    /// 413: body over 262,144 bytes.
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    /// 422: more option legs than an order supports.
    pub const TOO_MANY_LEGS: &str = "too_many_legs";
    /// 429: more than 60 alerts a minute.
    pub const RATE_LIMITED: &str = "rate_limited";
    /// 500: an order could not be built.
    pub const ORDER_FAILED: &str = "order_failed";
}

/// What kind of failure a delivery met; [`ErrorKind::http_status`] is the one place that
/// turns a kind into the spec's HTTP status and error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The token is not 64 lowercase hex characters.
    InvalidToken,
    /// No strategy has this token.
    UnknownToken,
    /// The body is over the size limit.
    PayloadTooLarge,
    /// More option legs than an order supports.
    TooManyLegs,
    /// Over the strategy's rate.
    RateLimited,
    /// Refused with a reason: a parse error, the strategy's rules, or an order that would
    /// be wrong for every bot.
    Rejected,
    /// An order could not be built or formatted.
    OrderFailed,
}

impl ErrorKind {
    /// The HTTP status, and the machine-readable code of a structured error body (none for
    /// the 200 rejections and the 429, whose bodies the spec fixes).
    pub fn http_status(self) -> (u16, Option<&'static str>) {
        match self {
            ErrorKind::InvalidToken => (400, Some(code::INVALID_TOKEN)),
            ErrorKind::UnknownToken => (404, Some(code::UNKNOWN_TOKEN)),
            ErrorKind::PayloadTooLarge => (413, Some(code::PAYLOAD_TOO_LARGE)),
            ErrorKind::TooManyLegs => (422, Some(code::TOO_MANY_LEGS)),
            ErrorKind::RateLimited => (429, None),
            ErrorKind::Rejected => (200, None),
            ErrorKind::OrderFailed => (500, Some(code::ORDER_FAILED)),
        }
    }
}

impl From<&ParseError> for ErrorKind {
    fn from(e: &ParseError) -> Self {
        match e {
            ParseError::TooManyLegs(_) => ErrorKind::TooManyLegs,
            _ => ErrorKind::Rejected,
        }
    }
}

impl From<&Refusal> for ErrorKind {
    fn from(_: &Refusal) -> Self {
        ErrorKind::Rejected
    }
}

impl From<&OrderError> for ErrorKind {
    fn from(e: &OrderError) -> Self {
        if e.is_rejection() {
            ErrorKind::Rejected
        } else {
            ErrorKind::OrderFailed
        }
    }
}

/// The fixed answers, each with a NUL after it that is not part of the answer: a C host
/// reads an answer as NUL-terminated text (`src/ffi.rs`), and these are borrowed.
const PROCESSED: &str = "{\"status\":\"processed\"}\0";
const DUPLICATE: &str = "{\"status\":\"duplicate\"}\0";
const RATE_LIMITED: &str = "{\"error\":\"rate limit exceeded\"}\0";

/// A fixed answer without its NUL.
fn fixed(with_nul: &'static str) -> Cow<'static, str> {
    Cow::Borrowed(with_nul.strip_suffix('\0').unwrap_or(with_nul))
}

impl Outcome {
    fn new(http_status: u16, response: Cow<'static, str>, decision: Decision) -> Outcome {
        Outcome {
            http_status,
            response,
            decision,
            reason: None,
            code: None,
            strategy: None,
            dedup_key: None,
            alerts: Alerts::new(),
            orders: Vec::new(),
            logs: Logs::new(),
        }
    }

    /// The response followed by a NUL, when it is one of the fixed answers (which are
    /// kept with one): a C host then needs no copy of it.
    pub fn fixed_response_with_nul(&self) -> Option<&'static str> {
        let Cow::Borrowed(r) = self.response else { return None };
        [PROCESSED, DUPLICATE, RATE_LIMITED]
            .into_iter()
            .find(|f| std::ptr::eq(f.as_ptr(), r.as_ptr()) && f.len() == r.len() + 1)
    }

    /// 200 `{"status":"processed"}`.
    pub fn processed() -> Outcome {
        Outcome::new(200, fixed(PROCESSED), Decision::Processed)
    }

    /// 200 `{"status":"duplicate"}`.
    pub fn duplicate() -> Outcome {
        Outcome::new(200, fixed(DUPLICATE), Decision::Duplicate)
    }

    /// 200 `{"status":"rejected","reason":…}`.
    pub fn rejected(reason: String) -> Outcome {
        let body = body_of(&[Raw(r#"{"status":"rejected","reason":"#), Str(&reason), Raw("}")]);
        let mut o = Outcome::new(200, Cow::Owned(body), Decision::Rejected);
        o.logs.push_with(Level::Warn, |t| {
            t.push_str("rejected: ");
            t.push_str(&reason);
        });
        o.reason = Some(reason);
        o
    }

    /// 200 `{"rejected":true,"reason":"strategy is paused"}`.
    pub fn inactive(status: &str) -> Outcome {
        let reason = format!("strategy is {status}");
        let body = body_of(&[Raw(r#"{"rejected":true,"reason":"#), Str(&reason), Raw("}")]);
        let mut o = Outcome::new(200, Cow::Owned(body), Decision::Inactive);
        o.logs.push_with(Level::Warn, |t| {
            t.push_str("not traded: ");
            t.push_str(&reason);
        });
        o.reason = Some(reason);
        o
    }

    /// 429 `{"error":"rate limit exceeded"}`.
    pub fn rate_limited() -> Outcome {
        let mut o = Outcome::new(429, fixed(RATE_LIMITED), Decision::Error);
        o.reason = Some("rate limit exceeded".into());
        o.code = Some(code::RATE_LIMITED);
        o
    }

    /// The answer to a failure of this kind: 200 rejected with the reason, the 429, or a
    /// 4xx/5xx with a structured body `{"error":…,"code":…}` logged at ERROR.
    pub fn failed(kind: ErrorKind, reason: String) -> Outcome {
        match kind.http_status() {
            (200, _) => Outcome::rejected(reason),
            (429, _) => Outcome::rate_limited(),
            (status, code) => Outcome::error(status, code.unwrap_or(code::ORDER_FAILED), reason),
        }
    }

    fn error(http_status: u16, code: &'static str, reason: String) -> Outcome {
        let body = body_of(&[Raw(r#"{"error":"#), Str(&reason), Raw(r#","code":"#), Str(code), Raw("}")]);
        let mut o = Outcome::new(http_status, Cow::Owned(body), Decision::Error);
        o.logs.push(Level::Error, &reason);
        o.reason = Some(reason);
        o.code = Some(code);
        o
    }

    /// The whole Outcome as JSON (the contract in DESIGN.md).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Adds a log record.
    pub fn log(&mut self, level: Level, message: &str) {
        self.logs.push(level, message);
    }
}

/// A piece of a response body: JSON text as is, or text written as a JSON string.
enum Piece<'a> {
    Raw(&'a str),
    Str(&'a str),
}
use Piece::{Raw, Str};

/// A response body written into one buffer, with a spare byte for a C host's NUL;
/// strings escaped as serde_json escapes them.
fn body_of(pieces: &[Piece<'_>]) -> String {
    let len: usize = pieces
        .iter()
        .map(|p| match p {
            Raw(t) => t.len(),
            Str(t) => t.len() + 2,
        })
        .sum();
    let mut out = Vec::with_capacity(len + 8);
    for p in pieces {
        match p {
            Raw(t) => out.extend_from_slice(t.as_bytes()),
            Str(t) => {
                if serde_json::to_writer(&mut out, t).is_err() {
                    out.extend_from_slice(b"\"\"");
                }
            }
        }
    }
    // serde_json writes UTF-8 only; the fallback keeps this total without a panic.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_strings_are_escaped_as_serde_json_does() {
        let reason = "a \"q\" \\ \n\t\u{1} é \u{2028} </x>";
        let e = Outcome::failed(ErrorKind::OrderFailed, reason.into());
        let want = format!(r#"{{"error":{},"code":"order_failed"}}"#, serde_json::to_string(reason).unwrap());
        assert_eq!(e.response, want);
        let std::borrow::Cow::Owned(owned) = &e.response else { panic!("a built answer is owned") };
        assert!(owned.capacity() > owned.len(), "a spare byte for a C host's NUL");
        // The fixed answers are borrowed, each with its NUL after it.
        for o in [Outcome::processed(), Outcome::duplicate(), Outcome::rate_limited()] {
            let z = o.fixed_response_with_nul().expect("a fixed answer");
            assert_eq!(z.strip_suffix('\0'), Some(&*o.response));
        }
        assert_eq!(e.fixed_response_with_nul(), None);
    }

    #[test]
    fn bodies_are_exact() {
        assert_eq!(Outcome::processed().response, r#"{"status":"processed"}"#);
        assert_eq!(Outcome::duplicate().response, r#"{"status":"duplicate"}"#);
        assert_eq!(Outcome::rate_limited().response, r#"{"error":"rate limit exceeded"}"#);
        assert_eq!(Outcome::rate_limited().http_status, 429);
        assert_eq!(Outcome::inactive("paused").response, r#"{"rejected":true,"reason":"strategy is paused"}"#);
        let r = Outcome::rejected("short trades are \"off\"".into());
        assert_eq!(r.response, r#"{"status":"rejected","reason":"short trades are \"off\""}"#);
        let e = Outcome::failed(ErrorKind::UnknownToken, "no strategy".into());
        assert_eq!(e.response, r#"{"error":"no strategy","code":"unknown_token"}"#);
        assert_eq!(e.http_status, 404);
    }

    #[test]
    fn one_mapping_from_kind_to_status() {
        let kinds = [
            (ErrorKind::InvalidToken, 400),
            (ErrorKind::UnknownToken, 404),
            (ErrorKind::PayloadTooLarge, 413),
            (ErrorKind::TooManyLegs, 422),
            (ErrorKind::RateLimited, 429),
            (ErrorKind::Rejected, 200),
            (ErrorKind::OrderFailed, 500),
        ];
        for (kind, status) in kinds {
            assert_eq!(kind.http_status().0, status, "{kind:?}");
            assert_eq!(Outcome::failed(kind, "why".into()).http_status, status, "{kind:?}");
        }
        assert_eq!(ErrorKind::from(&ParseError::TooManyLegs(5)), ErrorKind::TooManyLegs);
        assert_eq!(ErrorKind::from(&ParseError::Empty), ErrorKind::Rejected);
        assert_eq!(ErrorKind::from(&OrderError::Overflow), ErrorKind::OrderFailed);
        assert_eq!(ErrorKind::from(&OrderError::NoAlertPrice), ErrorKind::Rejected);
        assert_eq!(Outcome::failed(ErrorKind::Rejected, "no".into()).decision, Decision::Rejected);
    }

    #[test]
    fn outcome_json_embeds_response_as_json() {
        let v: serde_json::Value = serde_json::from_str(&Outcome::processed().to_json()).unwrap();
        assert_eq!(v["response"]["status"], "processed");
        assert_eq!(v["http_status"], 200);
        assert_eq!(v["decision"], "processed");
    }
}
