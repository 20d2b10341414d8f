//! The operator console's pages beyond the Logs view: Strategies (`GET /`), a strategy (`GET /strategies/{id}`:
//! its bots and its outbox, with retry and dismiss on failed rows) and "Send a sample message"
//! (`GET /strategies/{id}/sample`, a form for the dry-run endpoint). Rendered here from the templates; the
//! little script each page has only calls the JSON API with the admin token from the page's URL.

use super::api::OutboxPage;
use super::pages::{escape, fill, html, percent_encode, sorted, Fill, READ_FAILED, STYLE};
use super::{read, rfc3339};
use crate::app::{now_ms, App};
use crate::bots::{where_to, Delivery};
use crate::error::ApiError;
use crate::http::Answer;
use crate::store::{AlertCount, OutboxRow};
use std::fmt::Write as _;
use std::sync::Arc;
use strategy_webhook::strategy::Bot;
use strategy_webhook::Strategy;

const NOT_FOUND: &str = include_str!("templates/not-found.html");
const NAV: &str = include_str!("templates/nav.html");
const STRATEGIES: &str = include_str!("templates/strategies.html");
const STRATEGIES_SCRIPT: &str = include_str!("templates/strategies.js");
const STRATEGY: &str = include_str!("templates/strategy.html");
const STRATEGY_SCRIPT: &str = include_str!("templates/strategy.js");
const SAMPLE: &str = include_str!("templates/sample.html");
const SAMPLE_SCRIPT: &str = include_str!("templates/sample.js");

/// Outbox rows the Strategy page shows.
const OUTBOX_ROWS: u32 = 100;

/// The pages' navigation: Strategies, then the strategy's own pages when there is one.
pub fn nav(token: &str, strategy: Option<&str>) -> String {
    let mut links = String::new();
    if let Some(id) = strategy {
        let (id, t) = (escape(&percent_encode(id)), escape(&percent_encode(token)));
        let _ = write!(
            links,
            "<a href=\"/strategies/{id}?token={t}\">Strategy</a><a href=\"/logs/{id}?token={t}\">Logs</a>\
             <a href=\"/strategies/{id}/sample?token={t}\">Send a sample message</a>"
        );
    }
    fill(NAV, &[("token", Fill::Text(&percent_encode(token))), ("links", Fill::Markup(&links))])
}

/// The page for a strategy id that is not loaded.
pub(super) fn not_found(token: &str) -> Answer {
    html(ApiError::UnknownStrategy.status(), &fill(NOT_FOUND, &[("token", Fill::Text(&percent_encode(token)))]), None)
}

/// Start of the current UTC day, in Unix ms.
fn today_ms(now: i64) -> i64 {
    now - now.rem_euclid(86_400_000)
}

/// `GET /`: every strategy with its status, bots, alerts today by decision (and deliveries refused before one),
/// last alert and webhook URL.
pub async fn strategies_page(app: &App, token: &str) -> Answer {
    let since = today_ms(now_ms());
    let counts = match read(app, move |r| r.alert_counts(since)).await {
        Ok(c) => c,
        Err(source) => {
            tracing::error!(error = %source, "alert counts could not be read");
            let e = ApiError::Store { what: "the alert counts could not be read", source };
            return html(e.status(), READ_FAILED, None);
        }
    };
    let nonce = crate::app::random_hex().unwrap_or_default();
    let page = render_strategies(&sorted(app.engine.strategies()), &counts, since, token, &app.public_url, &nonce);
    html(200, &page, Some(&nonce))
}

fn render_strategies(
    list: &[Arc<Strategy>],
    counts: &[AlertCount],
    since: i64,
    token: &str,
    public_url: &str,
    nonce: &str,
) -> String {
    let t = escape(&percent_encode(token));
    let mut rows = String::new();
    for (n, s) in list.iter().enumerate() {
        let mine: Vec<&AlertCount> = counts.iter().filter(|c| *c.strategy == *s.id).collect();
        let today = if mine.is_empty() {
            "none".to_owned()
        } else {
            mine.iter()
                .map(|c| format!("<span class=dec-{0}>{0}</span> {1}", escape(&c.decision), c.count))
                .collect::<Vec<_>>()
                .join(" · ")
        };
        // A refusal is not an alert, and its time is its window's start, not its last delivery's.
        let last = mine
            .iter()
            .filter(|c| c.decision != "refused")
            .map(|c| c.last_ms)
            .max()
            .map_or_else(|| "—".to_owned(), rfc3339);
        let id = escape(&percent_encode(&s.id));
        let _ = write!(
            rows,
            "<tr><td data-label=Strategy><a href=\"/strategies/{id}?token={t}\"><b>{sid}</b></a><br><span class=meta>{name}</span><br>\
             <a href=\"/logs/{id}?token={t}\">Logs</a> · <a href=\"/strategies/{id}/sample?token={t}\">Send a sample</a></td>\
             <td data-label=Status class=\"st st-{status}\">{status}</td><td data-label=Bots>{bots}</td>\
             <td data-label=\"Alerts today\">{today}</td><td data-label=\"Last alert\" class=time>{last}</td>\
             <td data-label=\"Webhook URL\"><code class=url id=url-{n}>{masked}</code></td>\
             <td><button data-act=reveal data-n={n} data-id=\"{sid}\">Reveal</button>\
             <button data-act=copy data-n={n} data-id=\"{sid}\">Copy</button>\
             <button class=danger data-act=rotate data-n={n} data-id=\"{sid}\">Rotate…</button></td></tr>",
            sid = escape(&s.id),
            name = escape(s.name.as_deref().unwrap_or("")),
            status = escape(s.status.as_str()),
            bots = s.bots.len(),
            masked = escape(&format!("{public_url}/webhooks/••••••••")),
        );
    }
    if list.is_empty() {
        rows.push_str("<tr class=empty><td colspan=7>No strategy is loaded: add *.json snapshot files.</td></tr>");
    }
    fill(
        STRATEGIES,
        &[
            ("style", Fill::Markup(STYLE)),
            ("nav", Fill::Markup(&nav(token, None))),
            ("since", Fill::Text(&rfc3339(since)[..10])),
            ("rows", Fill::Markup(&rows)),
            ("nonce", Fill::Text(nonce)),
            ("script", Fill::Markup(STRATEGIES_SCRIPT)),
        ],
    )
}

/// `GET /strategies/{id}`: the strategy's bots (positions and working orders as the server holding each keeps them) and
/// its newest outbox rows, failed ones with retry (only where safe) and dismiss.
pub async fn strategy_page(app: &std::sync::Arc<App>, id: &str, token: &str) -> Answer {
    // A strategy whose file was removed keeps its stored rows, a failed order among them whose fate at the
    // broker is unknown: the API listed it, and the console answered 404 and hid it.
    let loaded = app.engine.strategy(id);
    if loaded.is_none() && crate::admin::api::known_strategy(app, id).await.is_err() {
        return not_found(token);
    }
    // On a shared database the bots' states as stored by whichever server holds each: this one's copy of a bot
    // another server delivers would show a position it filled as flat.
    if let Err(source) = crate::dispatch::refresh_shared_states(app, id).await {
        tracing::error!(strategy = id, error = %source, "reading the bots' stored states failed");
        let e = ApiError::Store { what: "the bots' stored states could not be read", source };
        return html(e.status(), READ_FAILED, None);
    }
    let s = app.engine.strategy(id).or(loaded);
    let owned = id.to_owned();
    let page = match OutboxPage::read(app, move |r| r.strategy_outbox(&owned, OUTBOX_ROWS)).await {
        Ok(page) => page,
        Err(source) => {
            tracing::error!(strategy = id, error = %source, "outbox query failed");
            let e = ApiError::Store { what: "the outbox could not be read", source };
            return html(e.status(), READ_FAILED, None);
        }
    };
    let nonce = crate::app::random_hex().unwrap_or_default();
    let html_page = render_strategy(
        id,
        s.as_deref(),
        &page.rows,
        token,
        &nonce,
        |b| delivery_name(app.bots.get(b), app.bots.unlisted(b)),
        page.retry_safety(),
    );
    html(200, &html_page, Some(&nonce))
}

/// A bot's delivery in the Bots table; `unlisted` ([`crate::bots::Bots::unlisted`]) says why a bot is on paper
/// when a bots file was given, where a mistyped key in it is found.
fn delivery_name(d: &Delivery, unlisted: bool) -> &'static str {
    match d {
        Delivery::Paper if unlisted => "paper (simulated): not in the bots file",
        Delivery::Paper => "paper (simulated)",
        Delivery::Http(_) => "broker API",
    }
}

fn render_bot(out: &mut String, b: &Bot, delivery: &str) {
    let mut positions = String::new();
    for p in &b.positions {
        let _ = write!(positions, "<div class=mono>{} {:?} {}</div>", escape(&p.instrument), p.direction, p.quantity);
    }
    if positions.is_empty() {
        positions.push_str("<span class=meta>flat</span>");
    }
    let mut orders = String::new();
    for o in &b.working_orders {
        let price = o.price.map(|p| format!(" @ {p}")).unwrap_or_default();
        // Its 0 is no size: shown as one, a trader's $500 sell read as a sell of nothing.
        let size = match (o.size_known, o.notional) {
            (true, _) => o.quantity.to_string(),
            (false, Some(n)) => format!("amount {n}"),
            (false, None) => "size not known".to_owned(),
        };
        let _ = write!(
            orders,
            "<div class=mono>{} {:?} {:?} {}{} <span class=meta>({}, id {})</span></div>",
            escape(&o.instrument),
            o.intent,
            o.direction,
            escape(&size),
            escape(&price),
            escape(&o.state),
            escape(&o.id)
        );
    }
    if orders.is_empty() {
        orders.push_str("<span class=meta>none</span>");
    }
    let _ = write!(
        out,
        "<tr><td data-label=Bot><b>{}</b></td><td data-label=Broker>{}</td><td data-label=Account class=mono>{}</td>\
         <td data-label=Delivery>{}</td><td data-label=Positions>{positions}</td><td data-label=\"Working orders\">{orders}</td></tr>",
        escape(&b.id),
        escape(b.broker.as_str()),
        escape(&b.account_id),
        delivery
    );
}

fn render_outbox_row(out: &mut String, r: &OutboxRow, result: Option<&str>, safety: Result<&str, &str>) {
    let action = if r.status == "failed" {
        let retry = match safety {
            Ok(why) => format!(
                "<button data-act=retry data-row={id} title=\"{w}\">Retry (safe: {w})</button>",
                id = r.id,
                w = escape(why)
            ),
            Err(why) => format!("<button disabled title=\"{w}\">No retry: {w}</button>", w = escape(why)),
        };
        format!("{retry}<button class=danger data-act=dismiss data-row={}>Dismiss</button>", r.id)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<tr><td data-label=Row>{id}</td><td data-label=Created class=time>{time}</td><td data-label=Bot>{bot}</td>\
         <td data-label=Request><b>{kind}</b> <span class=mono>{method} {path}</span><br><span class=meta>client id {coid}{to}</span></td>\
         <td data-label=State class=\"st st-{st}\">{st}</td><td data-label=\"Broker answer\" class=msg>{result}</td><td>{action}</td></tr>",
        id = r.id,
        time = rfc3339(r.created_ms),
        bot = escape(&r.bot),
        kind = escape(&r.kind),
        method = escape(&r.method),
        path = escape(&r.path),
        coid = escape(&r.client_order_id),
        // Where the row was stored to go (rows of older versions recorded none).
        to = r.target.as_deref().map(|t| format!(", {}", escape(&where_to(t)))).unwrap_or_default(),
        st = escape(&r.status),
        result = escape(result.unwrap_or("")),
    );
}

#[allow(clippy::too_many_arguments)]
fn render_strategy<'a>(
    id: &str,
    s: Option<&Strategy>,
    rows: &[(OutboxRow, Option<String>)],
    token: &str,
    nonce: &str,
    delivery: impl Fn(&str) -> &'static str,
    safety: impl Fn(&OutboxRow) -> Result<&'a str, std::borrow::Cow<'a, str>>,
) -> String {
    let mut bots = String::new();
    for b in s.iter().flat_map(|s| s.bots.iter()) {
        render_bot(&mut bots, b, delivery(&b.id));
    }
    match s {
        None => bots.push_str(
            "<tr class=empty><td colspan=6>The strategy is not loaded (its file was removed): its stored requests are \
             below.</td></tr>",
        ),
        Some(s) if s.bots.is_empty() => {
            bots.push_str("<tr class=empty><td colspan=6>The strategy has no bot: its alerts place no order.</td></tr>")
        }
        Some(_) => {}
    }
    let mut outbox = String::new();
    for (r, result) in rows {
        render_outbox_row(&mut outbox, r, result.as_deref(), safety(r).as_deref().map_err(|why| why.as_ref()));
    }
    if rows.is_empty() {
        outbox.push_str("<tr class=empty><td colspan=7>No broker request yet.</td></tr>");
    }
    let title = match s {
        Some(s) => format!(
            "{} <span class=meta>{} · <span class=\"st st-{st}\">{st}</span> · {} bot(s)</span>",
            escape(&s.id),
            escape(s.name.as_deref().unwrap_or("")),
            s.bots.len(),
            st = escape(s.status.as_str())
        ),
        None => format!("{} <span class=meta>not loaded</span>", escape(id)),
    };
    let id_json = serde_json::Value::from(id);
    fill(
        STRATEGY,
        &[
            ("title_text", Fill::Text(id)),
            ("style", Fill::Markup(STYLE)),
            ("nav", Fill::Markup(&nav(token, Some(id)))),
            ("title", Fill::Markup(&title)),
            ("bots", Fill::Markup(&bots)),
            ("outbox_limit", Fill::Text(&OUTBOX_ROWS.to_string())),
            ("outbox", Fill::Markup(&outbox)),
            ("nonce", Fill::Text(nonce)),
            ("id_json", Fill::Json(&id_json)),
            ("script", Fill::Markup(STRATEGY_SCRIPT)),
        ],
    )
}

/// `GET /strategies/{id}/sample`: the form for the dry run, filled with an alert for the strategy's first
/// allowed instrument.
pub fn sample_page(app: &App, id: &str, token: &str) -> Answer {
    let Some(s) = app.engine.strategy(id) else {
        return not_found(token);
    };
    let nonce = crate::app::random_hex().unwrap_or_default();
    html(200, &render_sample(&s, token, &nonce), Some(&nonce))
}

fn render_sample(s: &Strategy, token: &str, nonce: &str) -> String {
    let instrument = s.allowed_instruments.first().map_or("AAPL", String::as_str);
    let sample = serde_json::json!({ "ticker": instrument, "action": "buy" }).to_string();
    let id_json = serde_json::Value::from(&*s.id);
    fill(
        SAMPLE,
        &[
            ("title_text", Fill::Text(&s.id)),
            ("style", Fill::Markup(STYLE)),
            ("nav", Fill::Markup(&nav(token, Some(&s.id)))),
            ("title", Fill::Text(&s.id)),
            ("sample", Fill::Text(&sample)),
            ("nonce", Fill::Text(nonce)),
            ("id_json", Fill::Json(&id_json)),
            ("script", Fill::Markup(SAMPLE_SCRIPT)),
        ],
    )
}
