//! Every error the server answers on its own, and the one place that decides each one's HTTP status.
//!
//! The webhook's answers to alerts come from the core's Outcome (its status is the core's); everything else
//! the server refuses (unknown paths and methods, the admin API's checks, a failed read or commit) is an
//! [`ApiError`], answered as `{"error": message, "code": code}` with [`ApiError::status`].

use crate::app::RotateError;
use crate::http::{json, Answer};
use crate::store::StoreError;
use hyper::header::{HeaderValue, ALLOW, RETRY_AFTER, WWW_AUTHENTICATE};

/// An error the server answers itself. The message ([`std::fmt::Display`]) is what the client reads; causes
/// (store errors) are kept for the server's own log and never shown.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// No route serves the path.
    #[error("no such path")]
    NotFound,
    /// The path is served, not for this method; the value lists the methods it accepts.
    #[error("this path accepts only {0}")]
    MethodNotAllowed(&'static str),
    /// The admin token is missing or wrong.
    #[error("missing or wrong admin token (send Authorization: Bearer <token>)")]
    Unauthorized,
    /// No loaded strategy has the id.
    #[error("no strategy has this id")]
    UnknownStrategy,
    /// The strategy has no bot with the id.
    #[error("the strategy has no bot with this id")]
    UnknownBot,
    /// A query parameter has a bad value.
    #[error("{0}")]
    BadQuery(String),
    /// A bot state that cannot be used.
    #[error("{0}")]
    BadState(String),
    /// The request cannot be done in the resource's present state (an outbox row that is not failed, or
    /// whose resend could double an order).
    #[error("{0}")]
    Conflict(String),
    /// No outbox row of the strategy has the id.
    #[error("the strategy has no outbox row with this id")]
    UnknownRow,
    /// A request body over the limit.
    #[error("the state is over 262,144 bytes")]
    TooLarge,
    /// The request body did not arrive (whole, in time, or fast enough).
    #[error("{0}")]
    BodyNotReceived(&'static str),
    /// The request body's framing is broken (a malformed chunk).
    #[error("{0}")]
    MalformedBody(&'static str),
    /// Too many requests are in flight (from everyone, or from this address): try again shortly.
    #[error("the server is busy; retry in a few seconds")]
    Busy,
    /// The webhook's token was moved to another strategy while the alert waited for its batch (the old
    /// strategy's file replaced by one carrying the same token): it was decided for neither, and nothing of it
    /// is kept, so the sender's retry is decided for the strategy the token now names.
    #[error("the webhook's strategy changed while the alert was being decided; nothing was stored, please retry")]
    StrategyChanged,
    /// A processed alert's orders could not be committed: nothing was sent, and its dedup key was given back
    /// so that the sender's retry is processed once.
    #[error("the alert could not be stored; nothing was sent, please retry")]
    HandOff(#[source] StoreError),
    /// The shared database failed while an alert was decided and stored: nothing of it is kept (no claim, no
    /// count, no order), so the sender's retry trades once. The message names the cause.
    #[error("the alert could not be stored ({0}); nothing was sent, please retry")]
    SharedStore(#[source] StoreError),
    /// The shared database did not confirm a batch's commit (no answer in time, or the connection cut while it
    /// committed): the alert may have been stored, and then it trades. The sender's retry of the same alert is
    /// answered `duplicate` if it was, and decided if it was not; placing it by hand could double it.
    #[error(
        "the database did not confirm that the alert was stored ({0}); it may have been, and then it trades: \
         retry the same alert (a stored one is answered duplicate) and do not place it by hand"
    )]
    SharedStoreUnconfirmed(#[source] StoreError),
    /// The alert's batch waited too long for its strategy's lock on the shared database: this attempt stored
    /// nothing, but the lock's holder may be another server's attempt of the same alert whose commit waits (for a
    /// synchronous standby) and then trades, so "nothing was sent" could be false.
    #[error(
        "another attempt for this strategy holds its lock and may still be committing ({0}); if it is this \
         alert's, it trades: do not place it by hand, retry the same alert later (a stored one is answered \
         duplicate)"
    )]
    SharedStoreLocked(#[source] StoreError),
    /// A rotated token could not be made or stored.
    #[error("the new token could not be stored; the old one still answers")]
    Rotation(#[source] RotateError),
    /// A rotation whose commit the database did not confirm: it may have landed, and then only the new token
    /// answers. The answer carries the new token and its URL.
    #[error(
        "{}; it may have been, and then only the new URL answers (on every server): if the old one answers 404, use \
         webhook_url",
        .0.source
    )]
    RotationUnconfirmed(Box<Unconfirmed>),
    /// A change's task ended without an answer (it panicked): whether it was made is not known.
    #[error("{0}")]
    Unfinished(&'static str),
    /// A read or write of the admin API failed; `what` names it for the message ("the logs could not be read").
    #[error("{what}")]
    Store {
        /// What could not be done, as the client reads it.
        what: &'static str,
        /// Why.
        #[source]
        source: StoreError,
    },
}

/// What a rotation whose commit is unconfirmed answers with (boxed: the error type stays small).
#[derive(Debug)]
pub struct Unconfirmed {
    /// Why the commit is unconfirmed.
    pub source: RotateError,
    /// The new token's hash.
    pub token_hash: String,
    /// The new token's webhook URL.
    pub webhook_url: String,
}

impl ApiError {
    /// The HTTP status of each kind of error: the one place that decides it.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadQuery(_) | ApiError::BadState(_) | ApiError::MalformedBody(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::NotFound | ApiError::UnknownStrategy | ApiError::UnknownBot | ApiError::UnknownRow => 404,
            ApiError::Conflict(_) => 409,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::BodyNotReceived(_) => 408,
            ApiError::TooLarge => 413,
            ApiError::HandOff(_)
            | ApiError::SharedStore(_)
            | ApiError::SharedStoreUnconfirmed(_)
            | ApiError::SharedStoreLocked(_)
            | ApiError::Rotation(_)
            | ApiError::RotationUnconfirmed(_)
            | ApiError::Unfinished(_)
            | ApiError::Store { .. } => 500,
            ApiError::Busy | ApiError::StrategyChanged => 503,
        }
    }

    /// The machine-readable `code` of the answer.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Unauthorized => "unauthorized",
            ApiError::UnknownStrategy => "unknown_strategy",
            ApiError::UnknownBot => "unknown_bot",
            ApiError::UnknownRow => "unknown_row",
            ApiError::Conflict(_) => "conflict",
            ApiError::BadQuery(_) => "bad_query",
            ApiError::BadState(_) => "bad_state",
            ApiError::TooLarge => "payload_too_large",
            ApiError::BodyNotReceived(_) => "body_not_received",
            ApiError::MalformedBody(_) => "malformed_body",
            ApiError::Busy => "busy",
            ApiError::StrategyChanged => "strategy_changed",
            ApiError::HandOff(_) => "store_failed",
            ApiError::SharedStore(_) => "store_unavailable",
            ApiError::SharedStoreUnconfirmed(_) => "store_unconfirmed",
            ApiError::SharedStoreLocked(_) => "store_locked",
            ApiError::Rotation(_) => "rotation_failed",
            ApiError::RotationUnconfirmed(_) => "rotation_unconfirmed",
            ApiError::Unfinished(_) => "unfinished",
            ApiError::Store { .. } => "store_error",
        }
    }

    /// The answer's JSON body: `{"error": message, "code": code}`.
    pub fn body(&self) -> String {
        match self {
            ApiError::RotationUnconfirmed(u) => serde_json::json!({
                "error": self.to_string(), "code": self.code(), "token_hash": u.token_hash, "webhook_url": u.webhook_url
            })
            .to_string(),
            _ => serde_json::json!({ "error": self.to_string(), "code": self.code() }).to_string(),
        }
    }

    /// The JSON answer, with the headers its status calls for (`Allow` on a 405, `WWW-Authenticate` on a 401).
    pub fn answer(&self) -> Answer {
        let mut res = json(self.status(), self.body());
        match self {
            ApiError::MethodNotAllowed(allow) => {
                res.headers_mut().insert(ALLOW, HeaderValue::from_static(allow));
            }
            ApiError::Unauthorized => {
                res.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::Busy => {
                res.headers_mut().insert(RETRY_AFTER, HeaderValue::from_static("1"));
            }
            _ => {}
        }
        res
    }
}

impl From<ApiError> for Answer {
    fn from(e: ApiError) -> Answer {
        e.answer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_status_code_and_headers() {
        let store = || StoreError::Stopped;
        let cases: Vec<(ApiError, u16, &str)> = vec![
            (ApiError::BadQuery("`limit` must be at least 1".into()), 400, "bad_query"),
            (ApiError::BadState("not a bot state".into()), 400, "bad_state"),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::NotFound, 404, "not_found"),
            (ApiError::UnknownStrategy, 404, "unknown_strategy"),
            (ApiError::UnknownBot, 404, "unknown_bot"),
            (ApiError::MethodNotAllowed("GET, PUT"), 405, "method_not_allowed"),
            (ApiError::BodyNotReceived("the request body did not arrive in time"), 408, "body_not_received"),
            (ApiError::MalformedBody("the chunked body is malformed"), 400, "malformed_body"),
            (ApiError::TooLarge, 413, "payload_too_large"),
            (ApiError::Busy, 503, "busy"),
            (ApiError::StrategyChanged, 503, "strategy_changed"),
            (ApiError::HandOff(store()), 500, "store_failed"),
            (ApiError::SharedStore(store()), 500, "store_unavailable"),
            (ApiError::SharedStoreUnconfirmed(store()), 500, "store_unconfirmed"),
            (ApiError::SharedStoreLocked(store()), 500, "store_locked"),
            (ApiError::Rotation(RotateError::Store(store())), 500, "rotation_failed"),
            (ApiError::Unfinished("the change did not finish"), 500, "unfinished"),
            (ApiError::Store { what: "the logs could not be read", source: store() }, 500, "store_error"),
        ];
        for (e, status, code) in cases {
            let res = e.answer();
            assert_eq!((res.status().as_u16(), e.code()), (status, code), "{e:?}");
            assert_eq!(res.headers().get("content-type").unwrap(), "application/json");
        }
        let res = ApiError::MethodNotAllowed("GET, PUT").answer();
        assert_eq!(res.headers().get(ALLOW).unwrap(), "GET, PUT");
        assert_eq!(ApiError::Unauthorized.answer().headers().get(WWW_AUTHENTICATE).unwrap(), "Bearer");
        assert_eq!(ApiError::Busy.answer().headers().get(RETRY_AFTER).unwrap(), "1");
    }

    #[test]
    fn a_store_failure_is_not_shown_to_the_client() {
        let e = ApiError::Store { what: "the outbox could not be read", source: StoreError::Unanswered };
        assert_eq!(e.to_string(), "the outbox could not be read");
        assert!(std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("stopped before committing")));
    }
}
