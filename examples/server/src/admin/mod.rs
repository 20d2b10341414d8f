//! The admin listener (127.0.0.1 by default, plain HTTP): the router and its authorization, in front of the JSON
//! API (`api.rs`) and the Logs view's pages (`pages.rs`, templates in `templates/`).
//!
//! - `GET  /api/strategies`: id, name, status and bot count of each strategy (never the token).
//! - `GET  /api/strategies/{id}/logs?level=WARN&since=…&until=…&limit=…&before_id=…`: newest first, paged.
//! - `POST /api/strategies/{id}/rotate`: a new random token; answers the new webhook URL.
//! - `POST /api/strategies/{id}/validate`: a dry run of the request body (its Content-Type, or
//!   `?content_type=`): decision, HTTP status and body, orders, logs. Nothing is recorded, no order is sent.
//! - `GET|PUT /api/strategies/{id}/bots/{bot}/state`: a bot's positions and working orders as the server keeps
//!   them; PUT sets them (`{"positions": […], "working_orders": […]}`, the snapshot's shapes), for http bots
//!   whose broker state changed outside the server.
//! - `GET  /api/strategies/{id}/outbox?limit=…`: the strategy's outbox rows, newest first, with their status.
//! - `POST /api/strategies/{id}/outbox/{row}/retry`: a failed row is sent again, only where that cannot double
//!   an order (a cancel, a broker that refuses a repeated client order id, the paper broker); else 409.
//! - `POST /api/strategies/{id}/outbox/{row}/dismiss`: a failed row is set aside (`dismissed`).
//! - `GET  /api/strategies/{id}/webhook_url`: the strategy's webhook URL (it holds the token).
//! - `GET  /metrics`: Prometheus metrics (`crate::metrics`), with the bearer token like the API.
//! - Pages (`console.rs`, `pages.rs`): `GET /` (Strategies), `GET /strategies/{id}` (bots and outbox),
//!   `GET /strategies/{id}/sample` (send a sample message to the dry run), `GET /logs/{id}` (the Logs view,
//!   filtered by level, decision, text and time, refreshed every 2 s; a row opens its alert and orders).
//!
//! The API takes `Authorization: Bearer <admin token>`; the pages also take `?token=<admin token>` so a
//! browser can open them from the URL printed at start. POSTs accept only the header, which a browser
//! never adds on its own, so another site cannot make a logged-in browser rotate a token.

mod api;
mod console;
mod pages;

pub(crate) use api::settled;

use crate::app::App;
use crate::error::ApiError;
use crate::http::{percent_decode, Answer};
use crate::store::{LogQuery, LogRow, Reader, StoreError};
use hyper::body::Incoming;
use hyper::header::AUTHORIZATION;
use hyper::{Method, Request};
use std::sync::Arc;

/// The admin listener's router. A change (a rotation, a bot state, a retried or dismissed row) is committed and
/// then applied to the running server; hyper drops a handler whose client has gone, which could fall between
/// the two and leave the database and the server apart (a rotated-away token answering until a restart that
/// hands every sender a token nobody was given). Changes run in a task of their own, which finishes either way.
pub async fn admin(app: Arc<App>, req: Request<Incoming>) -> Answer {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return route(app, req).await;
    }
    match tokio::spawn(route(app, req)).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(error = %e, "admin request failed");
            ApiError::Unfinished("the change did not finish; read the state back before retrying").answer()
        }
    }
}

async fn route(app: Arc<App>, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_owned();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let answer = match segments.as_slice() {
        [""] | ["logs", _] | ["strategies", _] | ["strategies", _, "sample"] => {
            let token = query_get(&query, "token").unwrap_or("");
            if method != Method::GET {
                Err(ApiError::MethodNotAllowed("GET"))
            } else if !authorized(&app, &req, query_get(&query, "token")) {
                Ok(pages::unauthorized())
            } else {
                Ok(match segments.as_slice() {
                    ["logs", id] => pages::logs_page(&app, &percent_decode(id), token).await,
                    ["strategies", id] => console::strategy_page(&app, &percent_decode(id), token).await,
                    ["strategies", id, _] => console::sample_page(&app, &percent_decode(id), token),
                    _ => console::strategies_page(&app, token).await,
                })
            }
        }
        ["api", ..] if !authorized(&app, &req, None) => Err(ApiError::Unauthorized),
        ["metrics"] if !authorized(&app, &req, None) => Err(ApiError::Unauthorized),
        ["metrics"] => match method {
            Method::GET => metrics(&app).await,
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["api", "strategies"] => match method {
            Method::GET => Ok(api::strategies(&app)),
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["api", "strategies", id, "logs"] => match method {
            Method::GET => api::logs_api(&app, &percent_decode(id), &query).await,
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["api", "strategies", id, "rotate"] => match method {
            Method::POST => api::rotate(&app, &percent_decode(id)).await,
            _ => Err(ApiError::MethodNotAllowed("POST")),
        },
        ["api", "strategies", id, "validate"] => match method {
            Method::POST => {
                let ct = query_get(&query, "content_type").map(str::to_owned);
                api::validate(&app, &percent_decode(id), ct, req).await
            }
            _ => Err(ApiError::MethodNotAllowed("POST")),
        },
        ["api", "strategies", id, "bots", bot, "state"] => {
            let (id, bot) = (percent_decode(id), percent_decode(bot));
            match method {
                Method::GET => api::bot_state(&app, &id, &bot).await,
                Method::PUT => api::set_bot_state(&app, &id, &bot, req).await,
                _ => Err(ApiError::MethodNotAllowed("GET, PUT")),
            }
        }
        ["api", "strategies", id, "outbox", row, action @ ("retry" | "dismiss")] => match method {
            Method::POST if *action == "retry" => api::retry(&app, &percent_decode(id), row).await,
            Method::POST => api::dismiss(&app, &percent_decode(id), row).await,
            _ => Err(ApiError::MethodNotAllowed("POST")),
        },
        ["api", "strategies", id, "webhook_url"] => match method {
            Method::GET => api::webhook_url(&app, &percent_decode(id)),
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        ["api", "strategies", id, "outbox"] => match method {
            Method::GET => api::outbox(&app, &percent_decode(id), &query).await,
            _ => Err(ApiError::MethodNotAllowed("GET")),
        },
        _ => Err(ApiError::NotFound),
    };
    let answer = answer.unwrap_or_else(|e| {
        if e.status() >= 500 {
            tracing::error!(method = %method, path = %path, error = %e, cause = ?std::error::Error::source(&e).map(ToString::to_string), "admin request failed");
        }
        e.answer()
    });
    // The admin token can be in the page's URL: never log query strings here.
    tracing::debug!(method = %method, path = %path, status = answer.status().as_u16(), "admin request");
    private(answer)
}

/// Every answer of the admin listener is the operator's alone: the webhook URL (which holds the token that trades
/// the strategy), a rotation's new token, bot states, orders. Without `no-store` a browser keeps a GET's answer in
/// its disk cache, and the token ends up in the operator's browser profile, where the pages were kept out.
fn private(mut answer: Answer) -> Answer {
    answer
        .headers_mut()
        .entry(hyper::header::CACHE_CONTROL)
        .or_insert(hyper::header::HeaderValue::from_static("no-store"));
    answer
}

/// `GET /metrics`: Prometheus' text format, with the outbox depth read now.
async fn metrics(app: &App) -> Result<Answer, ApiError> {
    let depth = read(app, |reader| reader.outbox_depth())
        .await
        .map_err(|source| ApiError::Store { what: "the outbox could not be read", source })?;
    let text = crate::metrics::render(&depth, crate::app::now_ms());
    let mut res = hyper::Response::new(http_body_util::Full::new(bytes::Bytes::from(text)));
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/openmetrics-text; version=1.0.0; charset=utf-8"),
    );
    Ok(res)
}

/// Checks the bearer token (or, for pages, the `?token=` value) in constant time.
fn authorized(app: &App, req: &Request<Incoming>, from_query: Option<&str>) -> bool {
    let bearer = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    [bearer, from_query]
        .into_iter()
        .flatten()
        .any(|given| constant_time_eq(given.as_bytes(), app.admin_token.as_bytes()))
}

/// Equal-length comparison that looks at every byte, so the time taken tells nothing about how much of a
/// guess was right. The length is not secret (always 64).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// A page of a strategy's log rows, read off the runtime's workers.
async fn fetch_logs(app: &App, id: &str, q: LogQuery) -> Result<Vec<LogRow>, StoreError> {
    let id = id.to_owned();
    read(app, move |reader| reader.logs(&id, &q)).await
}

/// Runs a read of the database off the runtime's workers (reads block).
async fn read<T: Send + 'static>(
    app: &App,
    f: impl FnOnce(&Reader) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let reader = app.reader.clone();
    tokio::task::spawn_blocking(move || f(&reader)).await.map_err(|_| StoreError::ReadAborted)?
}

/// `a=1&b=x%20y` → pairs, percent-decoded (`+` is a space).
fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(&k.replace('+', " ")), percent_decode(&v.replace('+', " ")))
        })
        .collect()
}

fn query_get<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (UTC), without a date crate.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z", sod / 3600, sod % 3600 / 60, sod % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_705_676_400_123), "2024-01-19T15:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn queries_and_escaping() {
        let q = parse_query("level=WARN&token=a%2Fb&x");
        assert_eq!(query_get(&q, "token"), Some("a/b"));
        assert_eq!(query_get(&q, "x"), Some(""));
        assert_eq!(pages::escape("<b a='1'>&"), "&lt;b a=&#39;1&#39;&gt;&amp;");
        assert!(
            constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"a", b"ab")
        );
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
