//! The Logs view's page, `GET /logs/{id}` (a strategy's newest rows, filtered and refreshed every 2 s from the
//! JSON API), and what every console page shares: filling templates, escaping, the HTML answer and its CSP.
//! The markup, style and script are files under `templates/`, filled here by placeholder replacement that
//! escapes every value for where it lands.

use super::{fetch_logs, rfc3339};
use crate::app::App;
use crate::error::ApiError;
use crate::http::Answer;
use crate::store::{LogQuery, LogRow};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use std::fmt::Write as _;
use std::sync::Arc;
use strategy_webhook::Strategy;

pub(super) const STYLE: &str = include_str!("templates/style.css");
const LOGS: &str = include_str!("templates/logs.html");
const LOGS_SCRIPT: &str = include_str!("templates/logs.js");
const UNAUTHORIZED: &str = include_str!("templates/unauthorized.html");
pub(super) const READ_FAILED: &str = include_str!("templates/error.html");

/// Rows the Logs view renders on the server.
const PAGE_ROWS: u32 = 200;

/// What goes into a template's `{{name}}`, and how it is made safe there.
pub enum Fill<'a> {
    /// Text inside HTML: escaped.
    Text(&'a str),
    /// Markup built by this module from escaped parts, or a bundled file: inserted as it is.
    Markup(&'a str),
    /// A value for an inline script, as JSON that cannot end the script (see [`script_json`]).
    Json(&'a serde_json::Value),
}

/// Replaces each `{{name}}` of `template` with its value, in one pass: a value is never scanned for
/// placeholders itself. A placeholder with no value is left as it is (the tests check every page is filled).
pub fn fill(template: &str, values: &[(&str, Fill<'_>)]) -> String {
    let mut out = String::with_capacity(template.len() + 1024);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            rest = &rest[start..];
            break;
        };
        let name = &after[..end];
        match values.iter().find(|(n, _)| *n == name) {
            Some((_, Fill::Text(t))) => out.push_str(&escape(t)),
            Some((_, Fill::Markup(m))) => out.push_str(m),
            Some((_, Fill::Json(v))) => out.push_str(&script_json(v)),
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// JSON safe inside an inline `<script>`: `<`, `>` and `&` become `\u003c`, `\u003e` and `\u0026`, so data
/// holding `</script>` or `<!--` cannot end the script or open a comment, and U+2028/U+2029 are escaped for
/// older JavaScript parsers. These characters only ever occur inside JSON strings, where the escapes mean
/// the same characters.
pub fn script_json(v: &serde_json::Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// The page a browser gets without the admin token.
pub fn unauthorized() -> Answer {
    html(ApiError::Unauthorized.status(), UNAUTHORIZED, None)
}

/// `GET /logs/{id}`: the strategy's newest rows rendered here, then refreshed every 2 s from the JSON API by
/// a few lines of inline script (no build step). Without script, a meta refresh reloads the page.
pub async fn logs_page(app: &App, id: &str, token: &str) -> Answer {
    // Sent to the store, a NUL in the id answered 500 on PostgreSQL ("the logs could not be read").
    if super::api::never_an_id(id) {
        return super::console::not_found(token);
    }
    let q = LogQuery { limit: PAGE_ROWS, ..LogQuery::default() };
    let rows = match fetch_logs(app, id, q).await {
        Ok(rows) => rows,
        Err(source) => {
            tracing::error!(strategy = id, error = %source, "log query failed");
            let e = ApiError::Store { what: "the logs could not be read", source };
            return html(e.status(), READ_FAILED, None);
        }
    };
    let strategy = app.engine.strategy(id);
    let nonce = crate::app::random_hex().unwrap_or_default();
    let body = render_logs(id, strategy.as_deref(), &sorted(app.engine.strategies()), &rows, &nonce, token);
    html(200, &body, Some(&nonce))
}

pub(super) fn sorted(mut list: Vec<Arc<Strategy>>) -> Vec<Arc<Strategy>> {
    list.sort_by(|a, b| a.id.cmp(&b.id));
    list
}

/// `id · name · status · n bot(s)`, escaped.
fn summary(s: &Strategy) -> String {
    format!("{} · {} · {} bot(s)", escape(s.name.as_deref().unwrap_or("")), s.status.as_str(), s.bots.len())
}

fn render_logs(
    id: &str,
    strategy: Option<&Strategy>,
    list: &[Arc<Strategy>],
    rows: &[LogRow],
    nonce: &str,
    token: &str,
) -> String {
    let title = match strategy {
        Some(s) => format!("{} <span class=meta>{}</span>", escape(&s.id), summary(s)),
        None => format!("{} <span class=meta>(not loaded)</span>", escape(id)),
    };
    let mut options = String::new();
    for s in list {
        let selected = if &*s.id == id { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{selected}>{0}</option>", escape(&s.id));
    }
    let mut tbody = String::new();
    for r in rows {
        render_row(&mut tbody, r);
    }
    if rows.is_empty() {
        tbody.push_str("<tr class=empty><td colspan=5>No log rows yet.</td></tr>");
    }
    let mut decisions = String::new();
    for d in super::api::DECISIONS {
        let _ = write!(decisions, "<option>{d}</option>");
    }
    let nav = super::console::nav(token, strategy.map(|s| &*s.id));
    let count = rows.len().to_string();
    let id_json = serde_json::Value::from(id);
    fill(
        LOGS,
        &[
            ("title_text", Fill::Text(id)),
            ("style", Fill::Markup(STYLE)),
            ("title", Fill::Markup(&title)),
            ("options", Fill::Markup(&options)),
            ("decisions", Fill::Markup(&decisions)),
            ("nav", Fill::Markup(&nav)),
            ("count", Fill::Text(&count)),
            ("rows", Fill::Markup(&tbody)),
            ("nonce", Fill::Text(nonce)),
            ("id_json", Fill::Json(&id_json)),
            ("script", Fill::Markup(LOGS_SCRIPT)),
        ],
    )
}

fn render_row(out: &mut String, r: &LogRow) {
    let _ = write!(
        out,
        "<tr class=\"row lvl-{lvl}\"><td class=time>{time}</td><td class=level>{lvl}</td><td data-label=Decision>{decision}</td>\
         <td data-label=HTTP>{status}</td><td class=msg>{msg}</td></tr>",
        lvl = escape(&r.level),
        time = rfc3339(r.ts_ms),
        decision = escape(&r.decision),
        status = r.http_status,
        msg = escape(&r.message),
    );
}

/// An HTML answer that is never cached and never sends its URL (with the token) on as a referrer. Scripts run
/// only with the page's nonce.
pub(super) fn html(status: u16, body: &str, nonce: Option<&str>) -> Answer {
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
pub fn escape(s: &str) -> String {
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

pub(super) fn percent_encode(s: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn strategy(id: &str) -> Arc<Strategy> {
        let demo = include_bytes!("../../../strategies/demo.json");
        let mut v: serde_json::Value = serde_json::from_slice(demo).unwrap();
        v["id"] = serde_json::json!(id);
        v["name"] = serde_json::json!("<b>name</b>");
        Arc::new(Strategy::from_json(v.to_string().as_bytes()).unwrap())
    }

    fn row(message: &str) -> LogRow {
        LogRow {
            id: 1,
            ts_ms: 0,
            level: "WARN".into(),
            message: message.into(),
            decision: "rejected".into(),
            http_status: 200,
            alerts: serde_json::Value::Null,
        }
    }

    #[test]
    fn fill_escapes_text_and_is_one_pass() {
        let out = fill(
            "<p>{{a}}|{{b}}|{{c}}|{{missing}}|{{",
            &[("a", Fill::Text("<i>&{{b}}")), ("b", Fill::Markup("<i>")), ("c", Fill::Json(&"x</script>".into()))],
        );
        assert_eq!(out, "<p>&lt;i&gt;&amp;{{b}}|<i>|\"x\\u003c/script\\u003e\"|{{missing}}|{{");
    }

    #[test]
    fn script_json_keeps_the_value() {
        let v = serde_json::json!({ "id": "a</script><!--&\u{2028}b" });
        let text = script_json(&v);
        assert!(!text.contains('<') && !text.contains('>') && !text.contains('&'), "{text}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&text).unwrap(), v);
    }

    #[test]
    fn a_script_closing_id_cannot_break_the_logs_page() {
        let id = "x</script><script>alert(1)</script>";
        let s = strategy(id);
        let page = render_logs(id, Some(&s), &[Arc::clone(&s)], &[row("</script><b>m</b>")], "n0nce", "tok");
        // The page's own script is the only one: its opening and closing tags, each once.
        assert_eq!(page.matches("<script").count(), 1, "{page}");
        assert_eq!(page.matches("</script>").count(), 1, "{page}");
        assert!(
            page.contains("const id = \"x\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\";")
        );
        assert!(page.contains("&lt;b&gt;m&lt;/b&gt;") && page.contains("&lt;b&gt;name&lt;/b&gt;"));
        assert!(!page.contains("{{"), "a placeholder was left: {page}");
        assert!(page.contains("<script nonce=\"n0nce\">") && page.contains("refresh(); }, 2000)"));
    }

    #[test]
    fn every_page_is_filled() {
        let s = strategy("demo");
        let logs = render_logs("demo", Some(&s), &[Arc::clone(&s)], &[row("m")], "n", "tok");
        assert!(!logs.contains("{{") && logs.contains("href=\"/strategies/demo?token=tok\""), "{logs}");
        let empty = render_logs("gone", None, &[], &[], "n", "tok");
        assert!(!empty.contains("{{") && empty.contains("(not loaded)") && empty.contains("No log rows yet."));
    }
}
