//! The outbox's dispatchers: one task per (strategy, bot) sends that bot's committed requests in order.
//!
//! A task wakes when the webhook handler has committed rows for its bot (or at start, for rows left pending by
//! the previous run), reads the bot's open rows from the database oldest first, and delivers them one at a
//! time: a bot's orders keep their order, and a slow broker holds up only its own bots. At most
//! [`CONCURRENCY`] deliveries run at once across all bots.
//!
//! Each result is committed with the strategy's log row (INFO accepted, ERROR with the broker's message) and
//! the bot's new state in one transaction. A request is sent again only when that cannot double an order:
//! the connection failed before anything was sent, or the request is a cancel, or it carries a client order id
//! at a broker that refuses a repeated one. Anything else that fails or ends unknown is marked failed, with an
//! ERROR row, and left to the trader.

use crate::app::{now_ms, App};
use crate::bots::{Delivery, HttpBot};
use crate::paper::{self, BotState, Meaning};
use crate::store::{Delivered, LogEntry, OutboxRow};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use strategy_webhook::broker::BrokerId;
use strategy_webhook::outcome::RequestKind;
use strategy_webhook::Level;
use tokio::sync::{Notify, Semaphore};

/// Deliveries in flight at once, across all bots.
pub const CONCURRENCY: usize = 32;
/// Attempts at one request when a retry is safe.
const ATTEMPTS: u32 = 6;
/// First backoff; doubled after each failed attempt, up to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Rows read from the database at a time per bot.
const PAGE: u32 = 256;

/// The dispatchers: one wake-up handle per (strategy, bot), its task started on first use.
#[derive(Default)]
pub struct Dispatcher {
    tasks: Mutex<HashMap<(String, String), Arc<Notify>>>,
    limit: OnceLock<Arc<Semaphore>>,
}

impl Dispatcher {
    /// Tells a bot's dispatcher that it has rows to send, starting it if needed.
    pub fn wake(&self, app: &Arc<App>, strategy: &str, bot: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let key = (strategy.to_owned(), bot.to_owned());
        if let Some(n) = tasks.get(&key) {
            // A permit is stored if the task is busy, so the wake-up is never lost.
            n.notify_one();
            return;
        }
        let notify = Arc::new(Notify::new());
        tasks.insert(key, Arc::clone(&notify));
        let limit = Arc::clone(self.limit.get_or_init(|| Arc::new(Semaphore::new(CONCURRENCY))));
        tokio::spawn(run(Arc::clone(app), strategy.to_owned(), bot.to_owned(), notify, limit));
    }
}

impl Dispatcher {
    /// Stops sending: waits (at most `within`) for the deliveries in flight to be recorded, then lets no new
    /// one start. Call before the store closes, so that no delivery is sent without its result being
    /// committed; rows not sent yet stay pending for the next start.
    pub async fn stop(&self, within: Duration) {
        let Some(limit) = self.limit.get() else { return };
        let all = u32::try_from(CONCURRENCY).unwrap_or(u32::MAX);
        match tokio::time::timeout(within, limit.acquire_many(all)).await {
            Ok(Ok(permits)) => permits.forget(),
            _ => tracing::warn!("deliveries still in flight at shutdown; they are resumed at the next start"),
        }
        limit.close();
    }
}

async fn run(app: Arc<App>, strategy: String, bot: String, notify: Arc<Notify>, limit: Arc<Semaphore>) {
    loop {
        let reader = app.reader.clone();
        let (s, b) = (strategy.clone(), bot.clone());
        let rows = tokio::task::spawn_blocking(move || reader.open_rows(&s, &b, PAGE)).await;
        let rows = match rows {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                tracing::error!(strategy = %strategy, bot = %bot, error = %e, "reading the outbox failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => return,
        };
        if rows.is_empty() {
            notify.notified().await;
            continue;
        }
        for row in rows {
            let Ok(_permit) = limit.acquire().await else { return };
            let id = row.id;
            let d = deliver(&app, row).await;
            // The engine decides the next alert against the new state as soon as it is known; should the
            // commit below fail for good, the process stops with the row still open, and the next run applies
            // it again to the stored state.
            if d.state.is_some() {
                app.refresh_bots(&strategy);
            }
            // The row must leave the open set before the next read, or it would be sent again.
            let mut wait = BACKOFF;
            loop {
                match app.writer.delivered(d.clone()).await {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::error!(id, error = %e, "recording a delivery failed; retrying");
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
    }
}

/// Delivers one row and says what it came to (not yet committed).
async fn deliver(app: &App, row: OutboxRow) -> Delivered {
    let kind = match row.kind.as_str() {
        "replace" => RequestKind::Replace,
        "cancel" => RequestKind::Cancel,
        _ => RequestKind::Place,
    };
    let meaning: Option<Meaning> = row.meaning.as_deref().and_then(|m| serde_json::from_str(m).ok());
    let what = format!("{} for bot {}", describe(kind), row.bot);
    let (ok, message, state) = match app.bots.delivery(&row.bot) {
        Delivery::Paper => match &meaning {
            None => (false, "the paper broker cannot read this order (the strategy changed meanwhile)".into(), None),
            Some(m) => {
                let mut st = app.bot_state(&row.strategy, &row.bot);
                match paper::apply(&mut st, kind, row.order_id.as_deref(), m) {
                    Ok(msg) => (true, format!("{what} accepted by the paper broker: {msg}"), Some(st)),
                    Err(e) => (false, format!("{what} refused by the paper broker: {e}"), None),
                }
            }
        },
        Delivery::Http(bot) => http_deliver(app, &bot, &row, kind, meaning.as_ref(), &what).await,
    };
    let state_json = state.as_ref().map(|s| {
        app.set_bot_state(&row.strategy, &row.bot, s.clone());
        (row.strategy.clone(), row.bot.clone(), serde_json::to_string(s).unwrap_or_else(|_| "{}".into()))
    });
    let level = if ok { Level::Info } else { Level::Error };
    Delivered {
        id: row.id,
        status: if ok { "done" } else { "failed" },
        result: message.clone(),
        log: Some(LogEntry {
            ts_ms: now_ms(),
            strategy: row.strategy.clone(),
            decision: "processed",
            http_status: 200,
            alerts: "[]".into(),
            records: vec![(level, message)],
        }),
        state: state_json,
    }
}

fn describe(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Place => "order",
        RequestKind::Replace => "change of a working order",
        RequestKind::Cancel => "cancel of a working order",
    }
}

/// What one attempt at a broker came to.
enum Attempt {
    /// The broker answered.
    Answered { status: u16, location: Option<String>, body: Bytes },
    /// Nothing was sent: the connection (or TLS) failed first. Always safe to try again.
    NotSent(String),
    /// The request may have reached the broker (timeout, dropped connection after sending).
    Unknown(String),
}

async fn http_deliver(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    kind: RequestKind,
    meaning: Option<&Meaning>,
    what: &str,
) -> (bool, String, Option<BotState>) {
    let broker = BrokerId::from_name(&row.broker);
    let idempotent = broker.is_some_and(|b| b.broker().accepts_client_order_id());
    // A cancel cannot create an order, so sending it twice cannot double one.
    let resend_safe = idempotent || kind == RequestKind::Cancel;
    if row.status == "sending" && !resend_safe {
        return (
            false,
            format!(
                "{what}: the server stopped while sending it, and {} does not refuse a repeated order, so it is \
                 not sent again; check the broker whether it arrived",
                row.broker
            ),
            None,
        );
    }
    if !resend_safe {
        if let Err(e) = app.writer.sending(row.id).await {
            return (false, format!("{what}: not sent, the outbox could not be updated: {e}"), None);
        }
    }
    let mut wait = BACKOFF;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let res = send(bot, row).await;
        let retry = match &res {
            Attempt::NotSent(_) => true,
            Attempt::Unknown(_) => resend_safe,
            Attempt::Answered { status, .. } => *status >= 500 && resend_safe,
        };
        if retry && attempt < ATTEMPTS {
            tracing::warn!(id = row.id, bot = %row.bot, attempt, "broker delivery failed; retrying");
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(MAX_BACKOFF);
            continue;
        }
        return match res {
            Attempt::NotSent(e) => (false, format!("{what} not delivered: {e}"), None),
            Attempt::Unknown(e) => (
                false,
                format!("{what}: unknown whether the broker got it ({e}); not sent again, check the broker"),
                None,
            ),
            Attempt::Answered { status, location, body } => {
                answered(app, row, kind, meaning, what, idempotent, status, location, &body)
            }
        };
    }
}

#[allow(clippy::too_many_arguments)]
fn answered(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    meaning: Option<&Meaning>,
    what: &str,
    idempotent: bool,
    status: u16,
    location: Option<String>,
    body: &[u8],
) -> (bool, String, Option<BotState>) {
    let text = String::from_utf8_lossy(body);
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    if !(200..300).contains(&status) {
        let message = parsed.as_ref().and_then(broker_message).unwrap_or_else(|| text.chars().take(300).collect());
        // A resend after a crash: the broker already has this client order id, so the order is there once.
        if idempotent && (status == 409 || status == 422) && message.to_ascii_lowercase().contains("client_order_id") {
            return (
                true,
                format!("{what} was already accepted by the broker (client order id {})", row.client_order_id),
                None,
            );
        }
        return (false, format!("{what} refused by the broker (HTTP {status}): {message}"), None);
    }
    let id = parsed
        .as_ref()
        .and_then(|v| order_id(&row.broker, v))
        .or_else(|| location.as_deref().and_then(|l| l.trim_end_matches('/').rsplit('/').next()).map(str::to_owned));
    let mut state = app.bot_state(&row.strategy, &row.bot);
    let changed = match (kind, meaning) {
        (RequestKind::Place, Some(m)) if m.order_type == "limit" => match &id {
            Some(id) => {
                state.rest(id.clone(), m);
                true
            }
            None => false,
        },
        (RequestKind::Replace, Some(m)) => {
            let old = row.order_id.as_deref().unwrap_or_default();
            // A broker that cancels and replaces answers the new order; follow its id.
            let new = if row.keeps_order_id == Some(false) { id.clone() } else { None };
            state.replaced(old, new, m)
        }
        (RequestKind::Cancel, _) => state.cancelled(row.order_id.as_deref().unwrap_or_default()),
        _ => false,
    };
    let shown = id.map(|i| format!(" (order id {i})")).unwrap_or_default();
    (true, format!("{what} accepted by the broker{shown}"), changed.then_some(state))
}

/// The broker's own error message, where its answer has one.
fn broker_message(v: &serde_json::Value) -> Option<String> {
    let s = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    s(&v["message"])
        .or_else(|| s(&v["error"]["message"]))
        .or_else(|| s(&v["error"]))
        .or_else(|| s(&v["errors"]["error"]))
        .or_else(|| s(&v["error_response"]["message"]))
        .or_else(|| v["errors"].as_array().and_then(|a| a.first()).and_then(|e| s(&e["message"])))
}

/// The order id in a broker's answer (best effort): Alpaca `id`, Tradier `order.id`, Tastytrade
/// `data.order.id`, Coinbase `success_response.order_id`. Schwab answers with a `Location` header instead.
fn order_id(broker: &str, v: &serde_json::Value) -> Option<String> {
    let any = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    match broker {
        "alpaca" => any(&v["id"]),
        "tradier" => any(&v["order"]["id"]),
        "tastytrade" => any(&v["data"]["order"]["id"]),
        "coinbase" => any(&v["success_response"]["order_id"]),
        _ => None,
    }
}

/// One attempt: connect, send the core's request as it is, read the answer, all within the bot's timeout.
async fn send(bot: &HttpBot, row: &OutboxRow) -> Attempt {
    let connect = async {
        let tcp = tokio::net::TcpStream::connect((bot.host.as_str(), bot.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", bot.host, bot.port))?;
        let _ = tcp.set_nodelay(true);
        Ok::<_, String>(tcp)
    };
    let tcp = match tokio::time::timeout(bot.timeout, connect).await {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return Attempt::NotSent(e),
        Err(_) => return Attempt::NotSent("connecting timed out".into()),
    };
    if bot.tls {
        let name = match rustls::pki_types::ServerName::try_from(bot.host.clone()) {
            Ok(n) => n,
            Err(e) => return Attempt::NotSent(format!("bad host name: {e}")),
        };
        let connector = match tls_connector() {
            Ok(c) => c,
            Err(e) => return Attempt::NotSent(e),
        };
        let tls = match tokio::time::timeout(bot.timeout, connector.connect(name, tcp)).await {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Attempt::NotSent(format!("TLS handshake failed: {e}")),
            Err(_) => return Attempt::NotSent("TLS handshake timed out".into()),
        };
        exchange(bot, row, tls).await
    } else {
        exchange(bot, row, tcp).await
    }
}

async fn exchange<I>(bot: &HttpBot, row: &OutboxRow, io: I) -> Attempt
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(io)).await {
        Ok(p) => p,
        Err(e) => return Attempt::NotSent(format!("HTTP setup failed: {e}")),
    };
    let driver = tokio::spawn(async move {
        let _ = conn.await;
    });
    let authority = if (bot.tls && bot.port == 443) || (!bot.tls && bot.port == 80) {
        bot.host.clone()
    } else {
        format!("{}:{}", bot.host, bot.port)
    };
    let mut req = hyper::Request::builder()
        .method(row.method.as_str())
        .uri(format!("{}{}", bot.prefix, row.path))
        .header(hyper::header::HOST, authority)
        .header(hyper::header::ACCEPT, "application/json");
    if let Some(ct) = &row.content_type {
        req = req.header(hyper::header::CONTENT_TYPE, ct.as_str());
    }
    for (name, value) in &bot.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let req = match req.body(Full::new(Bytes::from(row.body.clone()))) {
        Ok(r) => r,
        Err(e) => return Attempt::NotSent(format!("the request could not be built: {e}")),
    };
    let exchange = async {
        let res = sender.send_request(req).await.map_err(|e| format!("the connection failed: {e}"))?;
        let status = res.status().as_u16();
        let location = res.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = res.into_body().collect().await.map_err(|e| format!("the answer was cut: {e}"))?.to_bytes();
        Ok::<_, String>(Attempt::Answered { status, location, body })
    };
    let out = match tokio::time::timeout(bot.timeout, exchange).await {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => Attempt::Unknown(e),
        Err(_) => Attempt::Unknown(format!("no answer within {} ms", bot.timeout.as_millis())),
    };
    driver.abort();
    out
}

/// The client TLS configuration: the system's trusted roots (Debian's bundle, or `SSL_CERT_FILE`).
fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        let file = std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "/etc/ssl/certs/ca-certificates.crt".into());
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(&file)
            .map_err(|e| format!("no trusted roots for https brokers ({file}: {e})"))?;
        for c in certs.flatten() {
            let _ = roots.add(c);
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| format!("TLS client configuration failed: {e}"))
    });
    config.as_ref().map(|c| tokio_rustls::TlsConnector::from(Arc::clone(c))).map_err(Clone::clone)
}
