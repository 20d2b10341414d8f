//! What a broker's HTTP answer to one request means.
//!
//! Each broker reads its own answers ([`super::Broker::read_answer`]): where the new order's
//! id is, where a refusal's message is, and which answers say "no" with a success status.
//! The pieces here are the shared reading; nothing here knows a broker's name.

use serde_json::Value;

/// What a broker's answer to one request means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The broker took the request. `order_id` is the (new) order's id when the answer
    /// carries one.
    Accepted {
        /// The broker's id of the order placed, changed or cancelled.
        order_id: Option<String>,
    },
    /// The client order id was already used: the order is there, once.
    AlreadyAccepted {
        /// The broker's words.
        message: String,
    },
    /// The broker said no (a 4xx, or a refusal inside a success status): nothing was taken.
    Refused {
        /// The broker's words.
        message: String,
    },
    /// A 5xx or an answer that cannot be read: the request may or may not have been taken.
    Uncertain {
        /// What was seen.
        message: String,
    },
}

/// Most characters of a body quoted when no message can be read from it.
const QUOTE: usize = 300;

/// The body as JSON, when it is.
pub(crate) fn json(body: &[u8]) -> Option<Value> {
    serde_json::from_slice(body).ok()
}

/// The start of the body as text, for answers whose message cannot be read.
pub(crate) fn quoted(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty answer)".into();
    }
    text.chars().take(QUOTE).collect()
}

/// A string or number at `path` (ids come as either).
pub(crate) fn id_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut at = v;
    for key in path {
        at = at.get(key)?;
    }
    match at {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A string at `path`, or the strings of an array at `path` joined with "; ".
pub(crate) fn text_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut at = v;
    for key in path {
        at = at.get(key)?;
    }
    match at {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Array(items) => {
            let parts: Vec<&str> = items.iter().filter_map(Value::as_str).filter(|s| !s.trim().is_empty()).collect();
            (!parts.is_empty()).then(|| parts.join("; "))
        }
        _ => None,
    }
}

/// The id at the end of a `Location` header (`…/orders/1001` → `1001`).
pub(crate) fn location_id(location: Option<&str>) -> Option<String> {
    let last = location?.trim().trim_end_matches('/').rsplit('/').next()?;
    let last = last.split(['?', '#']).next().unwrap_or_default();
    (!last.is_empty()).then(|| last.to_string())
}

/// The answer to a status outside 2xx: 5xx (and anything not 4xx) is uncertain, 4xx refused,
/// each with the broker's message (read by `message`) or the start of the body.
pub(crate) fn failed(status: u16, body: &[u8], message: impl FnOnce(&Value) -> Option<String>) -> Answer {
    let message = json(body).as_ref().and_then(message).unwrap_or_else(|| quoted(body));
    let message = format!("HTTP {status}: {message}");
    if (400..500).contains(&status) {
        Answer::Refused { message }
    } else {
        Answer::Uncertain { message }
    }
}

/// True for 2xx.
pub(crate) fn success(status: u16) -> bool {
    (200..300).contains(&status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_reading() {
        let v: Value = serde_json::json!({"a": {"b": 7}, "s": "x", "e": ["one", "two"], "blank": ""});
        assert_eq!(id_at(&v, &["a", "b"]).as_deref(), Some("7"));
        assert_eq!(id_at(&v, &["s"]).as_deref(), Some("x"));
        assert_eq!(id_at(&v, &["blank"]), None);
        assert_eq!(id_at(&v, &["missing", "b"]), None);
        assert_eq!(text_at(&v, &["e"]).as_deref(), Some("one; two"));
        assert_eq!(location_id(Some("https://h/trader/v1/accounts/A/orders/1001")).as_deref(), Some("1001"));
        assert_eq!(location_id(Some("/orders/1001/")).as_deref(), Some("1001"));
        assert_eq!(location_id(None), None);
        assert_eq!(quoted(b"  "), "(empty answer)");
        assert_eq!(quoted(&[b'x'; 1000]).len(), QUOTE);
        assert!(matches!(failed(503, b"busy", |_| None), Answer::Uncertain { message } if message == "HTTP 503: busy"));
        assert!(matches!(failed(400, b"{}", |_| None), Answer::Refused { .. }));
    }
}
