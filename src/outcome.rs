//! The Outcome of one delivery: the decision, the exact HTTP answer, the canonical
//! alerts, the broker requests with the neutral orders they were formatted from, and the
//! log records. The mapping from an error kind to an HTTP status and body lives here and
//! nowhere else ([`ErrorKind::http_status`]).

use crate::alert::{Alert, ParseError};
use crate::broker::{BrokerId, Request};
use crate::decide::Refusal;
use crate::model::{Order, OrderError};
use serde::{Serialize, Serializer};

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

/// One line of the strategy's Logs view. Messages never contain the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogRecord {
    /// Severity.
    pub level: Level,
    /// What happened, in a trader's words.
    pub message: String,
}

/// One formatted request for one bot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OrderRequest {
    /// The bot's id.
    pub bot: String,
    /// The bot's broker.
    #[serde(serialize_with = "broker_name")]
    pub broker: BrokerId,
    /// Place, replace or cancel.
    pub kind: RequestKind,
    /// The idempotency key (sent to brokers that accept one).
    pub client_order_id: String,
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
    pub after: Option<String>,
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
    /// The exact HTTP response body (JSON text).
    #[serde(serialize_with = "raw_json")]
    pub response: String,
    /// The decision.
    pub decision: Decision,
    /// Why, for rejections and errors.
    pub reason: Option<String>,
    /// Machine-readable error code, for 4xx/5xx answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
    /// The strategy's id when the token matched one (never the token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// The delivery's dedup key (hex of SHA-256 of the body, or of the `message_id`),
    /// once the body was within the size limit. A host that persists outcomes stores it
    /// with the orders, and calls [`crate::Engine::release`] if its own commit fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The canonical alerts, resolved where the decision got that far; for a rejection by
    /// the rules, each action word the strategy has a rule for is resolved all the same.
    pub alerts: Vec<Alert>,
    /// One request per bot action.
    pub orders: Vec<OrderRequest>,
    /// Log records for the Logs view.
    pub logs: Vec<LogRecord>,
}

fn raw_json<S: Serializer>(body: &str, s: S) -> Result<S::Ok, S::Error> {
    match serde_json::value::RawValue::from_string(body.to_string()) {
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

impl Outcome {
    fn new(http_status: u16, response: String, decision: Decision) -> Outcome {
        Outcome {
            http_status,
            response,
            decision,
            reason: None,
            code: None,
            strategy: None,
            dedup_key: None,
            alerts: Vec::new(),
            orders: Vec::new(),
            logs: Vec::new(),
        }
    }

    /// 200 `{"status":"processed"}`.
    pub fn processed() -> Outcome {
        Outcome::new(200, body_text(r#"{"status":"processed"}"#), Decision::Processed)
    }

    /// 200 `{"status":"duplicate"}`.
    pub fn duplicate() -> Outcome {
        Outcome::new(200, body_text(r#"{"status":"duplicate"}"#), Decision::Duplicate)
    }

    /// 200 `{"status":"rejected","reason":…}`.
    pub fn rejected(reason: String) -> Outcome {
        let body = body_of(&[Raw(r#"{"status":"rejected","reason":"#), Str(&reason), Raw("}")]);
        let mut o = Outcome::new(200, body, Decision::Rejected);
        o.logs.push(LogRecord { level: Level::Warn, message: format!("rejected: {reason}") });
        o.reason = Some(reason);
        o
    }

    /// 200 `{"rejected":true,"reason":"strategy is paused"}`.
    pub fn inactive(status: &str) -> Outcome {
        let reason = format!("strategy is {status}");
        let body = body_of(&[Raw(r#"{"rejected":true,"reason":"#), Str(&reason), Raw("}")]);
        let mut o = Outcome::new(200, body, Decision::Inactive);
        o.logs.push(LogRecord { level: Level::Warn, message: format!("not traded: {reason}") });
        o.reason = Some(reason);
        o
    }

    /// 429 `{"error":"rate limit exceeded"}`.
    pub fn rate_limited() -> Outcome {
        let mut o = Outcome::new(429, body_text(r#"{"error":"rate limit exceeded"}"#), Decision::Error);
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
        let mut o = Outcome::new(http_status, body, Decision::Error);
        o.logs.push(LogRecord { level: Level::Error, message: reason.clone() });
        o.reason = Some(reason);
        o.code = Some(code);
        o
    }

    /// The whole Outcome as JSON (the contract in DESIGN.md).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Adds a log record.
    pub fn log(&mut self, level: Level, message: impl Into<String>) {
        self.logs.push(LogRecord { level, message: message.into() });
    }
}

/// A fixed response body, with one spare byte of capacity: a C host's handle adds its NUL
/// there without reallocating (`src/ffi.rs`).
fn body_text(s: &str) -> String {
    let mut body = String::with_capacity(s.len() + 1);
    body.push_str(s);
    body
}

/// A piece of a response body: JSON text as is, or text written as a JSON string.
enum Piece<'a> {
    Raw(&'a str),
    Str(&'a str),
}
use Piece::{Raw, Str};

/// A response body written into one buffer, with a spare byte for a C host's NUL (as
/// [`body_text`]); strings escaped as serde_json escapes them.
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
        assert!(e.response.capacity() > e.response.len(), "a spare byte for a C host's NUL");
        assert!(Outcome::processed().response.capacity() > Outcome::processed().response.len());
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
