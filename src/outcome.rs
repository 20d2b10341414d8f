//! The Outcome of one delivery: the decision, the exact HTTP answer, the canonical
//! alerts, the broker requests and the log records. The mapping from a decision or
//! error to an HTTP status and body lives here and nowhere else.

use crate::alert::Alert;
use crate::broker::{BrokerId, Request};
use serde::{Serialize, Serializer};

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

/// What a broker request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    /// A new order.
    Place,
    /// A change to a working order.
    Replace,
    /// A cancellation of a working order.
    Cancel,
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
    /// The exact HTTP request.
    pub request: Request,
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
    /// The canonical alerts, resolved where the decision got that far.
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
        Outcome::new(200, r#"{"status":"processed"}"#.into(), Decision::Processed)
    }

    /// 200 `{"status":"duplicate"}`.
    pub fn duplicate() -> Outcome {
        Outcome::new(200, r#"{"status":"duplicate"}"#.into(), Decision::Duplicate)
    }

    /// 200 `{"status":"rejected","reason":…}`.
    pub fn rejected(reason: String) -> Outcome {
        let body = format!(r#"{{"status":"rejected","reason":{}}}"#, json_string(&reason));
        let mut o = Outcome::new(200, body, Decision::Rejected);
        o.logs.push(LogRecord { level: Level::Warn, message: format!("rejected: {reason}") });
        o.reason = Some(reason);
        o
    }

    /// 200 `{"rejected":true,"reason":"strategy is paused"}`.
    pub fn inactive(status: &str) -> Outcome {
        let reason = format!("strategy is {status}");
        let body = format!(r#"{{"rejected":true,"reason":{}}}"#, json_string(&reason));
        let mut o = Outcome::new(200, body, Decision::Inactive);
        o.logs.push(LogRecord { level: Level::Warn, message: format!("not traded: {reason}") });
        o.reason = Some(reason);
        o
    }

    /// 429 `{"error":"rate limit exceeded"}`.
    pub fn rate_limited() -> Outcome {
        let mut o = Outcome::new(429, r#"{"error":"rate limit exceeded"}"#.into(), Decision::Error);
        o.reason = Some("rate limit exceeded".into());
        o.code = Some(code::RATE_LIMITED);
        o
    }

    /// A 4xx/5xx with a structured body `{"error":…,"code":…}`, logged at ERROR.
    pub fn error(http_status: u16, code: &'static str, reason: String) -> Outcome {
        let body = format!(r#"{{"error":{},"code":{}}}"#, json_string(&reason), json_string(code));
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

/// A JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_exact() {
        assert_eq!(Outcome::processed().response, r#"{"status":"processed"}"#);
        assert_eq!(Outcome::duplicate().response, r#"{"status":"duplicate"}"#);
        assert_eq!(Outcome::rate_limited().response, r#"{"error":"rate limit exceeded"}"#);
        assert_eq!(Outcome::rate_limited().http_status, 429);
        assert_eq!(Outcome::inactive("paused").response, r#"{"rejected":true,"reason":"strategy is paused"}"#);
        let r = Outcome::rejected("short trades are \"off\"".into());
        assert_eq!(r.response, r#"{"status":"rejected","reason":"short trades are \"off\""}"#);
        let e = Outcome::error(404, code::UNKNOWN_TOKEN, "no strategy".into());
        assert_eq!(e.response, r#"{"error":"no strategy","code":"unknown_token"}"#);
    }

    #[test]
    fn outcome_json_embeds_response_as_json() {
        let v: serde_json::Value = serde_json::from_str(&Outcome::processed().to_json()).unwrap();
        assert_eq!(v["response"]["status"], "processed");
        assert_eq!(v["http_status"], 200);
        assert_eq!(v["decision"], "processed");
    }
}
