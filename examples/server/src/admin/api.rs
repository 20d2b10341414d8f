//! The admin JSON API: strategies, their logs, token rotation, dry runs, bot states and the outbox.

use super::{fetch_logs, query_get, rfc3339};
use crate::app::{now_ms, App, RotateError};
use crate::http::{error, json, read_body, Answer, Body};
use crate::store::{LogQuery, LogRow};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::Request;
use strategy_webhook::{Level, MAX_BODY};

/// Rows a log page holds when the query says nothing.
const DEFAULT_LIMIT: u32 = 100;
/// Most rows one page may hold.
const MAX_LIMIT: u32 = 1000;

/// `GET /api/strategies`.
pub fn strategies(app: &App) -> Answer {
    let mut list = app.engine.strategies();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    let items: Vec<_> = list
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id,
                "name": s.name,
                "status": s.status.as_str(),
                "bots": s.bots.len(),
            })
        })
        .collect();
    json(200, serde_json::json!({ "strategies": items }).to_string())
}

/// Reads the log query parameters; a bad value is an error rather than silently ignored.
fn log_query(query: &[(String, String)]) -> Result<LogQuery, String> {
    let int = |name: &str| -> Result<Option<i64>, String> {
        query_get(query, name)
            .filter(|v| !v.is_empty())
            .map(|v| {
                v.parse::<i64>().map_err(|_| format!("`{name}` must be an integer (Unix milliseconds or a row id)"))
            })
            .transpose()
    };
    let min_level = match query_get(query, "level").map(|l| l.to_ascii_uppercase()) {
        None => None,
        Some(l) if l.is_empty() => None,
        Some(l) if l == "INFO" => Some(Level::Info),
        Some(l) if l == "WARN" || l == "WARNING" => Some(Level::Warn),
        Some(l) if l == "ERROR" => Some(Level::Error),
        Some(_) => return Err("`level` must be INFO, WARN or ERROR".into()),
    };
    let limit = match int("limit")? {
        None => DEFAULT_LIMIT,
        Some(n) if n >= 1 => u32::try_from(n).unwrap_or(MAX_LIMIT).min(MAX_LIMIT),
        Some(_) => return Err("`limit` must be at least 1".into()),
    };
    Ok(LogQuery { min_level, since: int("since")?, until: int("until")?, before_id: int("before_id")?, limit })
}

/// `GET /api/strategies/{id}/logs`.
pub async fn logs_api(app: &App, id: &str, query: &[(String, String)]) -> Answer {
    let q = match log_query(query) {
        Ok(q) => q,
        Err(e) => return error(400, "bad_query", &e),
    };
    let limit = q.limit as usize;
    // Logs outlive a strategy's file, so an id that is not loaded is not an error; it just may have no rows.
    match fetch_logs(app, id, q).await {
        Ok(rows) => {
            let next = if rows.len() == limit { rows.last().map(|r| r.id) } else { None };
            let rows: Vec<_> = rows.iter().map(row_json).collect();
            json(200, serde_json::json!({ "strategy": id, "logs": rows, "next_before_id": next }).to_string())
        }
        Err(e) => {
            tracing::error!(error = %e, "log query failed");
            error(500, "store_error", "the logs could not be read")
        }
    }
}

fn row_json(r: &LogRow) -> serde_json::Value {
    serde_json::json!({
        "id": r.id,
        "ts_ms": r.ts_ms,
        "time": rfc3339(r.ts_ms),
        "level": r.level,
        "message": r.message,
        "decision": r.decision,
        "http_status": r.http_status,
        "alerts": r.alerts,
    })
}

/// `POST /api/strategies/{id}/rotate`. The one answer that carries a token: the new one.
pub async fn rotate(app: &App, id: &str) -> Answer {
    match app.rotate(id).await {
        Ok(token) => {
            tracing::info!(strategy = id, "webhook token rotated");
            json(
                200,
                serde_json::json!({ "id": id, "token_hash": token.as_str(), "webhook_url": app.webhook_url(&token) })
                    .to_string(),
            )
        }
        Err(RotateError::Unknown) => error(404, "unknown_strategy", "no strategy has this id"),
        Err(RotateError::Failed(e)) => {
            tracing::error!(strategy = id, error = %e, "token rotation failed");
            error(500, "rotation_failed", "the new token could not be stored; the old one still answers")
        }
    }
}

/// `GET /api/strategies/{id}/bots/{bot}/state`.
pub fn bot_state(app: &App, id: &str, bot: &str) -> Answer {
    let Some(s) = app.engine.strategy(id) else {
        return error(404, "unknown_strategy", "no strategy has this id");
    };
    if !s.bots.iter().any(|b| b.id == bot) {
        return error(404, "unknown_bot", "the strategy has no bot with this id");
    }
    let st = app.bot_state(id, bot);
    json(200, serde_json::to_string(&st).unwrap_or_else(|_| "{}".into()))
}

/// `PUT /api/strategies/{id}/bots/{bot}/state`: committed before it takes effect, then put into the live
/// snapshot so the next alert is decided against it.
pub async fn set_bot_state(app: &App, id: &str, bot: &str, req: Request<Incoming>) -> Answer {
    let Some(s) = app.engine.strategy(id) else {
        return error(404, "unknown_strategy", "no strategy has this id");
    };
    if !s.bots.iter().any(|b| b.id == bot) {
        return error(404, "unknown_bot", "the strategy has no bot with this id");
    }
    let declared = crate::http::content_length(&req);
    let body = match read_body(req.into_body(), declared, MAX_BODY).await {
        Body::Complete(b) => b,
        Body::TooLarge => return error(413, "payload_too_large", "the state is over 262,144 bytes"),
        Body::Failed(why) => return error(408, "body_not_received", why),
    };
    let mut st: crate::paper::BotState = match serde_json::from_slice(&body) {
        Ok(st) => st,
        Err(e) => return error(400, "bad_state", &format!("not a bot state: {e}")),
    };
    if let Err(e) = st.to_core() {
        return error(400, "bad_state", &e);
    }
    // Paper order ids keep counting from where they were.
    st.next_id = st.next_id.max(app.bot_state(id, bot).next_id);
    let text = serde_json::to_string(&st).unwrap_or_else(|_| "{}".into());
    if let Err(e) = app.writer.bot_state(id, bot, text.clone()).await {
        tracing::error!(strategy = id, bot, error = %e, "storing a bot state failed");
        return error(500, "store_error", "the state could not be stored");
    }
    app.set_bot_state(id, bot, st);
    app.refresh_bots(id);
    json(200, text)
}

/// `GET /api/strategies/{id}/outbox`.
pub async fn outbox(app: &App, id: &str, query: &[(String, String)]) -> Answer {
    let limit = match query_get(query, "limit").map(str::parse::<u32>) {
        None => DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=10_000).contains(&n) => n,
        Some(_) => return error(400, "bad_query", "`limit` must be 1 to 10000"),
    };
    let reader = app.reader.clone();
    let id_owned = id.to_owned();
    let rows = tokio::task::spawn_blocking(move || reader.strategy_outbox(&id_owned, limit)).await;
    match rows {
        Ok(Ok(rows)) => {
            let rows: Vec<_> = rows
                .iter()
                .map(|(r, result)| {
                    serde_json::json!({
                        "id": r.id, "bot": r.bot, "broker": r.broker, "kind": r.kind,
                        "client_order_id": r.client_order_id, "order_id": r.order_id,
                        "method": r.method, "path": r.path, "status": r.status,
                        "created_ms": r.created_ms, "result": result,
                    })
                })
                .collect();
            json(200, serde_json::json!({ "strategy": id, "outbox": rows }).to_string())
        }
        _ => error(500, "store_error", "the outbox could not be read"),
    }
}

/// `POST /api/strategies/{id}/validate`: the product's "validate a sample message".
pub async fn validate(app: &App, id: &str, content_type: Option<String>, req: Request<Incoming>) -> Answer {
    let Some(strategy) = app.engine.strategy(id) else {
        return error(404, "unknown_strategy", "no strategy has this id");
    };
    let content_type =
        content_type.or_else(|| req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned));
    let declared = crate::http::content_length(&req);
    let body = match read_body(req.into_body(), declared, MAX_BODY).await {
        Body::Complete(b) => b.to_vec(),
        // The dry run answers what the webhook would: 413.
        Body::TooLarge => vec![0; MAX_BODY + 1],
        Body::Failed(why) => return error(408, "body_not_received", why),
    };
    let outcome = app.engine.dry_run(strategy.token_hash.as_str().as_bytes(), &body, content_type.as_deref(), now_ms());
    json(200, outcome.to_json())
}
