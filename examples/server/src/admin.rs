//! The admin listener (127.0.0.1 by default, plain HTTP): the JSON API and the Logs view page.
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
//! - `GET  /` and `GET /logs/{id}`: the Logs view, rendered on the server and refreshed every 2 s.
//!
//! The API takes `Authorization: Bearer <admin token>`; the pages also take `?token=<admin token>` so a
//! browser can open them from the URL printed at start. POSTs accept only the header, which a browser
//! never adds on its own, so another site cannot make a logged-in browser rotate a token.

use crate::app::{now_ms, App, RotateError};
use crate::http::{error, json, method_not_allowed, not_found, percent_decode, read_body, Answer, Body};
use crate::store::{LogQuery, LogRow};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use std::fmt::Write as _;
use std::sync::Arc;
use strategy_webhook::{Level, MAX_BODY};

/// Rows a log page holds when the query says nothing.
const DEFAULT_LIMIT: u32 = 100;
/// Most rows one page may hold.
const MAX_LIMIT: u32 = 1000;

/// The admin listener's router.
pub async fn admin(app: Arc<App>, req: Request<Incoming>) -> Answer {
    let path = req.uri().path().to_owned();
    let query = parse_query(req.uri().query().unwrap_or(""));
    let method = req.method().clone();
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let answer = match segments.as_slice() {
        [""] | ["logs", _] => {
            if method != Method::GET {
                method_not_allowed("GET")
            } else if !authorized(&app, &req, query_get(&query, "token")) {
                page_unauthorized()
            } else if let ["logs", id] = segments.as_slice() {
                logs_page(&app, &percent_decode(id)).await
            } else {
                index_page(&app, query_get(&query, "token").unwrap_or(""))
            }
        }
        ["api", ..] if !authorized(&app, &req, None) => api_unauthorized(),
        ["api", "strategies"] => match method {
            Method::GET => strategies(&app),
            _ => method_not_allowed("GET"),
        },
        ["api", "strategies", id, "logs"] => match method {
            Method::GET => logs_api(&app, &percent_decode(id), &query).await,
            _ => method_not_allowed("GET"),
        },
        ["api", "strategies", id, "rotate"] => match method {
            Method::POST => rotate(&app, &percent_decode(id)).await,
            _ => method_not_allowed("POST"),
        },
        ["api", "strategies", id, "validate"] => match method {
            Method::POST => {
                let ct = query_get(&query, "content_type").map(str::to_owned);
                validate(&app, &percent_decode(id), ct, req).await
            }
            _ => method_not_allowed("POST"),
        },
        ["api", "strategies", id, "bots", bot, "state"] => {
            let (id, bot) = (percent_decode(id), percent_decode(bot));
            match method {
                Method::GET => bot_state(&app, &id, &bot),
                Method::PUT => set_bot_state(&app, &id, &bot, req).await,
                _ => method_not_allowed("GET, PUT"),
            }
        }
        ["api", "strategies", id, "outbox"] => match method {
            Method::GET => outbox(&app, &percent_decode(id), &query).await,
            _ => method_not_allowed("GET"),
        },
        _ => not_found(),
    };
    // The admin token can be in the page's URL: never log query strings here.
    tracing::debug!(method = %method, path = %path, status = answer.status().as_u16(), "admin request");
    answer
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

fn api_unauthorized() -> Answer {
    let mut res = error(401, "unauthorized", "missing or wrong admin token (send Authorization: Bearer <token>)");
    res.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    res
}

/// `GET /api/strategies`.
fn strategies(app: &App) -> Answer {
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

async fn fetch_logs(app: &App, id: &str, q: LogQuery) -> Result<Vec<LogRow>, String> {
    let reader = app.reader.clone();
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || reader.logs(&id, &q)).await.map_err(|e| e.to_string())?
}

/// `GET /api/strategies/{id}/logs`.
async fn logs_api(app: &App, id: &str, query: &[(String, String)]) -> Answer {
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
async fn rotate(app: &App, id: &str) -> Answer {
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
fn bot_state(app: &App, id: &str, bot: &str) -> Answer {
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
async fn set_bot_state(app: &App, id: &str, bot: &str, req: Request<Incoming>) -> Answer {
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
async fn outbox(app: &App, id: &str, query: &[(String, String)]) -> Answer {
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
async fn validate(app: &App, id: &str, content_type: Option<String>, req: Request<Incoming>) -> Answer {
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

fn page_unauthorized() -> Answer {
    html(
        401,
        "<!doctype html><meta charset=utf-8><title>Logs: admin token needed</title>\
         <p>Open this page with <code>?token=&lt;admin token&gt;</code>: the server prints the link when it starts.",
        None,
    )
}

/// `GET /`: a picker of strategies.
fn index_page(app: &App, token: &str) -> Answer {
    let mut list = app.engine.strategies();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    let mut items = String::new();
    for s in &list {
        let _ = write!(
            items,
            "<li><a href=\"/logs/{}?token={}\">{}</a> <span class=meta>{} · {} · {} bot(s)</span></li>",
            escape(&percent_encode(&s.id)),
            escape(token),
            escape(&s.id),
            escape(s.name.as_deref().unwrap_or("")),
            s.status.as_str(),
            s.bots.len()
        );
    }
    if items.is_empty() {
        items.push_str("<li>No strategy is loaded.</li>");
    }
    let body = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>Strategies</title>{STYLE}</head>\
         <body><h1>Strategies</h1><ul class=picker>{items}</ul></body></html>"
    );
    html(200, &body, None)
}

/// `GET /logs/{id}`: the strategy's newest rows rendered here, then refreshed every 2 s from the JSON API by
/// a few lines of inline script (no build step). Without script, a meta refresh reloads the page.
async fn logs_page(app: &App, id: &str) -> Answer {
    let q = LogQuery { limit: 200, ..LogQuery::default() };
    let rows = match fetch_logs(app, id, q).await {
        Ok(rows) => rows,
        Err(e) => {
            tracing::error!(error = %e, "log query failed");
            return html(500, "<!doctype html><meta charset=utf-8><p>The logs could not be read.", None);
        }
    };
    let strategy = app.engine.strategy(id);
    let title = match &strategy {
        Some(s) => format!(
            "{} <span class=meta>{} · {} · {} bot(s)</span>",
            escape(&s.id),
            escape(s.name.as_deref().unwrap_or("")),
            s.status.as_str(),
            s.bots.len()
        ),
        None => format!("{} <span class=meta>(not loaded)</span>", escape(id)),
    };
    let mut options = String::new();
    let mut list = app.engine.strategies();
    list.sort_by(|a, b| a.id.cmp(&b.id));
    for s in &list {
        let selected = if s.id == id { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{selected}>{0}</option>", escape(&s.id));
    }
    let mut tbody = String::new();
    for r in &rows {
        render_row(&mut tbody, r);
    }
    if rows.is_empty() {
        tbody.push_str("<tr class=empty><td colspan=5>No log rows yet.</td></tr>");
    }
    let nonce = crate::app::random_hex().unwrap_or_default();
    let id_json = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
    let body = format!(
        r#"<!doctype html><html lang=en><head><meta charset=utf-8><title>Logs: {title_text}</title>
<noscript><meta http-equiv=refresh content=5></noscript>{STYLE}</head>
<body><header><h1>{title}</h1>
<label>Strategy <select id=picker>{options}</select></label>
<label>Level <select id=level><option value="">all</option><option>WARN</option><option>ERROR</option></select></label>
<span id=status class=meta>{count} row(s) shown</span></header>
<table><thead><tr><th>Time (UTC)</th><th>Level</th><th>Decision</th><th>HTTP</th><th>Message</th></tr></thead>
<tbody id=rows>{tbody}</tbody></table>
<script nonce="{nonce}">
const id = {id_json};
const token = new URLSearchParams(location.search).get('token') || '';
const rows = document.getElementById('rows'), status = document.getElementById('status');
const level = document.getElementById('level');
document.getElementById('picker').onchange = e =>
  location.href = '/logs/' + encodeURIComponent(e.target.value) + '?token=' + encodeURIComponent(token);
function cell(tr, text, cls) {{ const td = tr.insertCell(); td.textContent = text; if (cls) td.className = cls; }}
async function refresh() {{
  try {{
    const r = await fetch('/api/strategies/' + encodeURIComponent(id) + '/logs?limit=200&level=' + level.value,
                          {{ headers: {{ Authorization: 'Bearer ' + token }} }});
    if (!r.ok) throw new Error('HTTP ' + r.status);
    const data = await r.json();
    const body = document.createElement('tbody'); body.id = 'rows';
    for (const l of data.logs) {{
      const tr = body.insertRow(); tr.className = 'lvl-' + l.level;
      cell(tr, l.time, 'time'); cell(tr, l.level, 'level'); cell(tr, l.decision); cell(tr, String(l.http_status));
      cell(tr, l.message, 'msg');
    }}
    if (!data.logs.length) {{ const tr = body.insertRow(); tr.className = 'empty'; const td = tr.insertCell();
      td.colSpan = 5; td.textContent = 'No log rows yet.'; }}
    document.getElementById('rows').replaceWith(body);
    status.textContent = data.logs.length + ' row(s) shown · updated ' + new Date().toLocaleTimeString();
  }} catch (e) {{ status.textContent = 'refresh failed: ' + e.message; }}
}}
level.onchange = refresh;
setInterval(refresh, 2000);
</script></body></html>"#,
        title_text = escape(id),
        count = rows.len(),
    );
    html(200, &body, Some(&nonce))
}

fn render_row(out: &mut String, r: &LogRow) {
    let _ = write!(
        out,
        "<tr class=\"lvl-{lvl}\"><td class=time>{time}</td><td class=level>{lvl}</td><td>{decision}</td><td>{status}</td>\
         <td class=msg>{msg}</td></tr>",
        lvl = escape(&r.level),
        time = rfc3339(r.ts_ms),
        decision = escape(&r.decision),
        status = r.http_status,
        msg = escape(&r.message),
    );
}

const STYLE: &str = "<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em;margin:0 0 .4em} .meta{color:#777;font-weight:normal;font-size:.85em}
header label{margin-right:1.2em} table{border-collapse:collapse;width:100%;margin-top:1em}
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #e4e4e4;vertical-align:top}
th{background:#f4f4f4} td.msg{font-family:ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
td.level{font-weight:bold} td.time{white-space:nowrap;font-variant-numeric:tabular-nums} tr.lvl-INFO td.level{color:#1f6feb} tr.lvl-WARN{background:#fff8e1}
tr.lvl-WARN td.level{color:#b26a00} tr.lvl-ERROR{background:#fdecea} tr.lvl-ERROR td.level{color:#c62828}
tr.empty td{color:#777;font-style:italic} ul.picker li{margin:.3em 0}
</style>";

/// An HTML answer that is never cached and never sends its URL (with the token) on as a referrer. Scripts run
/// only with the page's nonce.
fn html(status: u16, body: &str, nonce: Option<&str>) -> Answer {
    let mut res = Response::new(Full::new(Bytes::from(body.to_owned())));
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    let csp = format!(
        "default-src 'none'; style-src 'unsafe-inline'; connect-src 'self'; script-src 'nonce-{}'",
        nonce.unwrap_or("none")
    );
    if let Ok(v) = HeaderValue::from_str(&csp) {
        h.insert("content-security-policy", v);
    }
    res
}

/// HTML text escaping (messages carry sender input such as instrument names).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
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

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
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
        assert_eq!(escape("<b a='1'>&"), "&lt;b a=&#39;1&#39;&gt;&amp;");
        assert!(
            constant_time_eq(b"abc", b"abc") && !constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"a", b"ab")
        );
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
