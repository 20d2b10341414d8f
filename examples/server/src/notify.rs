//! Notifications: a strategy's optional chat webhook (Discord- and Slack-compatible), told about accepted
//! orders, failed deliveries (broker refusals included) and token rotations.
//!
//! `--notifications FILE` maps strategy id to its URL, which is a secret (it lets anyone post to the channel),
//! so it is given as bots' secrets are: `{"value": …}`, `{"env": VAR}` or `{"file": PATH}`:
//!
//! ```json
//! { "demo-equities": { "url": { "env": "DEMO_DISCORD_URL" }, "events": ["order", "failure", "rotation"] } }
//! ```
//!
//! `events` is optional (all three by default). A message is committed to the `notifications` table first and
//! sent later by one sender task as `POST {"content": text, "text": text}` (Discord reads `content`, Slack
//! `text`; neither may ping the channel); a failed send is retried with backoff (1 s doubling to 5 min, 20 tries), across restarts. Nothing
//! on an alert's path waits for a receiver.

use crate::app::{now_ms, App};
use crate::store::{Notification, OutboxRow, Sent};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Tries before a message is given up.
const MAX_ATTEMPTS: i64 = 20;
/// Longest wait between tries.
const MAX_BACKOFF_MS: i64 = 300_000;
/// One send's time limit.
const TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a receiver's answer read: chat webhooks answer with an empty body or a short JSON object.
const ANSWER_LIMIT: usize = 64 * 1024;
/// How long a receiver's answer is read after its status: the status says whether the message was taken.
const ANSWER_WAIT: Duration = Duration::from_secs(1);
/// How long one strategy's sends may start new ones: well within the minute a shared database's claim on the
/// messages read lasts.
const ROUND: Duration = Duration::from_secs(30);
/// The most due messages read at once for one strategy, and for all: a strategy with many queued cannot keep
/// the others' out of the read.
const DUE_PER_STRATEGY: u32 = 20;
const DUE_PER_ROUND: u32 = 200;

/// Where a value comes from (the shape of the bots file's secrets).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Source {
    Plain(String),
    Value { value: String },
    Env { env: String },
    File { file: std::path::PathBuf },
}

impl Source {
    fn read(&self) -> Result<String, String> {
        match self {
            Source::Plain(v) | Source::Value { value: v } => Ok(v.clone()),
            // Trimmed as a file's is: a variable filled from a file (a Kubernetes secret made `--from-file`) keeps
            // its newline, which no URL may hold.
            Source::Env { env } => std::env::var(env)
                .map(|s| s.trim_end().to_owned())
                .map_err(|_| format!("environment variable {env} is not set")),
            Source::File { file } => std::fs::read_to_string(file)
                .map(|s| s.trim_end().to_owned())
                .map_err(|e| format!("cannot read {}: {e}", file.display())),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    url: Source,
    #[serde(default)]
    events: Option<Vec<String>>,
}

/// One strategy's receiver.
#[derive(Debug, Clone)]
struct Target {
    tls: bool,
    host: String,
    port: u16,
    path: String,
    events: Vec<String>,
}

/// The receivers by strategy id.
#[derive(Debug, Default)]
pub struct Notifications {
    by_strategy: HashMap<String, Target>,
}

const EVENTS: [&str; 3] = ["order", "failure", "rotation"];

impl Notifications {
    /// Reads `--notifications FILE`; every URL and event is checked now, so a typo in one stops the start. A typo
    /// in an entry's strategy id does not: that strategy may load later, so the reloader reports an entry no
    /// loaded strategy has ([`unused`]) instead.
    pub fn load(path: &Path) -> Result<Notifications, String> {
        let text = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let entries: HashMap<String, Entry> =
            // The URL is a secret: a bare string where an object belongs was quoted whole in the error.
            serde_json::from_slice(crate::bots::without_bom(&text))
                .map_err(|e| format!("{}: {}", path.display(), crate::bots::without_values(e)))?;
        let mut by_strategy = HashMap::new();
        for (id, e) in entries {
            let url = e.url.read().map_err(|why| format!("{}: {id}: url: {why}", path.display()))?;
            let events = e.events.unwrap_or_else(|| EVENTS.iter().map(|s| (*s).to_owned()).collect());
            if let Some(bad) = events.iter().find(|ev| !EVENTS.contains(&ev.as_str())) {
                return Err(format!("{}: {id}: unknown event {bad:?} (order, failure, rotation)", path.display()));
            }
            let target = parse_url(&url, events).map_err(|why| format!("{}: {id}: {why}", path.display()))?;
            by_strategy.insert(id, target);
        }
        Ok(Notifications { by_strategy })
    }

    fn wants(&self, strategy: &str, event: &str) -> bool {
        self.by_strategy.get(strategy).is_some_and(|t| t.events.iter().any(|e| e == event))
    }
}

/// `http(s)://host[:port]/path`; the URL itself is never logged (it is the secret).
fn parse_url(url: &str, events: Vec<String>) -> Result<Target, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("url must start with https:// or http://".into());
    };
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    if authority.contains('@') {
        return Err("url must not hold user:password@".into());
    }
    // An IPv6 address is written in brackets (`[::1]:9000`): its colons are not the port's, and the brackets are
    // not part of the address that is connected to (they go back in the Host header).
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h.to_owned(), p.parse().map_err(|_| "url has a bad port".to_owned())?),
        _ => (authority.to_owned(), if tls { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
    if host.is_empty() {
        return Err("url has no host".into());
    }
    // Checked as each send will build it: a path or host that can never be sent (a space, a control character)
    // passed the start, and every notification then failed, given up an hour later.
    if hyper::Uri::try_from(path).is_err() {
        return Err("url has a path that cannot be sent (a space or a control character in it?)".into());
    }
    if tls && rustls::pki_types::ServerName::try_from(host.clone()).is_err() {
        return Err("url has a host that is no DNS name or IP address".into());
    }
    Ok(Target { tls, host, port, path: path.to_owned(), events })
}

static CONFIG: OnceLock<Notifications> = OnceLock::new();
static WAKE: OnceLock<tokio::sync::Notify> = OnceLock::new();

fn wake() -> &'static tokio::sync::Notify {
    WAKE.get_or_init(tokio::sync::Notify::new)
}

/// Sets the receivers (once, at start).
pub fn configure(n: Notifications) {
    let _ = CONFIG.set(n);
}

/// The notifications file's entries whose strategy id is not in `loaded`, sorted. A mistyped id
/// (`demo-equites`) was accepted silently: the real strategy's failed and expired orders were never reported.
pub fn unused(loaded: &std::collections::HashSet<&str>) -> Vec<String> {
    let Some(config) = CONFIG.get() else { return Vec::new() };
    let mut out: Vec<String> = config.by_strategy.keys().filter(|id| !loaded.contains(id.as_str())).cloned().collect();
    out.sort_unstable();
    out
}

/// The most receivers' connections open at once: each strategy's messages are sent one after the other, the
/// strategies side by side, so one for each strategy with a receiver (counted in the descriptor reserve).
pub fn receivers() -> u64 {
    CONFIG.get().map_or(0, |c| c.by_strategy.len() as u64)
}

/// Queues a message if the strategy has a receiver for the event. A failed commit is logged, never passed
/// on: a notification must not hold up what it reports.
async fn queue(app: &App, strategy: &str, event: &str, text: String) {
    if !CONFIG.get().is_some_and(|c| c.wants(strategy, event)) {
        return;
    }
    match app.writer.notification(strategy, event, text, now_ms()).await {
        Ok(()) => wake().notify_one(),
        Err(e) => tracing::error!(strategy, event, error = %e, "a notification could not be queued"),
    }
}

/// Reports what an outbox row's delivery came to: an accepted order, or a failure (refusal, not delivered).
pub async fn delivery(app: &App, row: &OutboxRow, ok: bool, message: &str) {
    let (event, mark) = if ok { ("order", "✅") } else { ("failure", "⚠️") };
    queue(app, &row.strategy, event, format!("{mark} [{}] {message}", row.strategy)).await;
}

/// Reports an order the state sync found filled at the broker (a resting order that filled later).
pub async fn filled(app: &App, strategy: &str, what: &str) {
    queue(app, strategy, "order", format!("💰 [{strategy}] {what}")).await;
}

/// Reports a bot whose session stopped (its refresh token refused): it sends nothing until the trader logs in
/// again.
pub async fn stopped(app: &App, strategy: &str, bot: &str, why: &str) {
    queue(app, strategy, "failure", format!("⛔ [{strategy}] bot {bot} is stopped: {why}")).await;
}

/// Reports a bot whose broker refuses its credentials (static keys revoked or regenerated, a JWT key deleted or
/// a clock off): every request fails until they are fixed in the bots file.
pub async fn refused(app: &App, strategy: &str, bot: &str, why: &str) {
    queue(app, strategy, "failure", format!("⛔ [{strategy}] bot {bot}: the broker refuses its credentials: {why}"))
        .await;
}

/// Reports a bot whose refresh token ends soon (its login's lifetime, Schwab's 7 days).
pub async fn expiring(app: &App, strategy: &str, message: &str) {
    queue(app, strategy, "failure", format!("⏳ [{strategy}] {message}")).await;
}

/// Reports a token rotation.
pub async fn rotated(app: &App, strategy: &str) {
    let text = format!("🔑 [{strategy}] webhook token rotated: alert senders need the new URL");
    queue(app, strategy, "rotation", text).await;
}

/// The sender: whenever woken or every second, reads the due messages, and sends each strategy's in order,
/// oldest first, the strategies side by side: a receiver that never answers holds up its own strategy's
/// messages, never another's (one task sent them all in turn, 10 s per message queued ahead). A strategy whose
/// messages are being sent is left out of the next reads until its task ends. Runs until the process stops;
/// messages not yet sent stay queued for the next start.
pub fn spawn_sender(app: &Arc<App>) -> Option<tokio::task::JoinHandle<()>> {
    CONFIG.get().filter(|c| !c.by_strategy.is_empty())?;
    let app = Arc::clone(app);
    let busy: Arc<std::sync::Mutex<HashSet<String>>> = Arc::default();
    Some(tokio::spawn(async move {
        loop {
            let reader = app.reader.clone();
            let skip: Vec<String> = busy.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect();
            let due = tokio::task::spawn_blocking(move || {
                reader.due_notifications(now_ms(), DUE_PER_STRATEGY, DUE_PER_ROUND, &skip)
            })
            .await;
            let due = match due {
                Ok(Ok(d)) => d,
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "notifications could not be read");
                    Vec::new()
                }
                Err(_) => Vec::new(),
            };
            let mut by_strategy: Vec<Vec<Notification>> = Vec::new();
            for n in due {
                match by_strategy.iter_mut().find(|q| q[0].strategy == n.strategy) {
                    Some(q) => q.push(n),
                    None => by_strategy.push(vec![n]),
                }
            }
            for queue in by_strategy {
                // Read before its task ended (the embedded database's read skips none): its task sends them.
                if !busy.lock().unwrap_or_else(|e| e.into_inner()).insert(queue[0].strategy.clone()) {
                    continue;
                }
                let (app, busy) = (Arc::clone(&app), Arc::clone(&busy));
                tokio::spawn(async move {
                    let all_sent = send_in_order(&app, &queue).await;
                    busy.lock().unwrap_or_else(|e| e.into_inner()).remove(&queue[0].strategy);
                    // After a failure the strategy's next messages wait for the next read (a second), not a
                    // read made at once that would have each spend its timeout on a receiver that is down.
                    if all_sent {
                        wake().notify_one();
                    }
                });
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), wake().notified()).await;
        }
    }))
}

/// Sends one strategy's due messages in order, each result recorded before the next is sent. Says whether every
/// one was sent.
async fn send_in_order(app: &App, queue: &[Notification]) -> bool {
    let until = tokio::time::Instant::now() + ROUND;
    for n in queue {
        // Past the round's time the rest wait for the next read (on a shared database their claim would run
        // out, and another server send them too).
        if tokio::time::Instant::now() >= until {
            return false;
        }
        let sent = send_one(n).await;
        let failed = !matches!(sent, Sent::Done);
        if let Err(e) = app.writer.notification_sent(n.id, sent).await {
            tracing::error!(id = n.id, error = %e, "a notification's send could not be recorded");
        }
        // The receiver failed one: the strategy's next messages wait for the next read rather than each spend
        // a timeout on it now (their tries are not counted meanwhile).
        if failed {
            return false;
        }
    }
    true
}

/// The message as both chat services read it. Its text can carry what a sender or a broker wrote (a ticker, a
/// broker's refusal): Discord is told to ping no one (`allowed_mentions`), and Slack's control characters are
/// escaped as its API asks, so that neither an `@everyone` nor a `<!channel>` in it calls the whole channel.
fn chat_body(text: &str) -> String {
    let slack = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    serde_json::json!({ "content": text, "allowed_mentions": { "parse": [] }, "text": slack }).to_string()
}

/// One try at a message, and what to record.
async fn send_one(n: &Notification) -> Sent {
    let Some(target) = CONFIG.get().and_then(|c| c.by_strategy.get(&n.strategy)) else {
        return Sent::GaveUp { error: "the strategy has no notification URL any more".into() };
    };
    let body = chat_body(&n.text);
    match tokio::time::timeout(TIMEOUT, post(target, body)).await {
        Ok(Ok(status)) if (200..300).contains(&status) => Sent::Done,
        outcome => {
            let error = match outcome {
                Ok(Ok(status)) => format!("the receiver answered {status}"),
                Ok(Err(e)) => e,
                Err(_) => "timed out".into(),
            };
            let attempts = n.attempts + 1;
            tracing::warn!(id = n.id, strategy = %n.strategy, attempts, error = %error, "notification not delivered");
            if attempts >= MAX_ATTEMPTS {
                Sent::GaveUp { error }
            } else {
                let wait = (500_i64 << attempts.min(20)).min(MAX_BACKOFF_MS);
                Sent::Retry { next_ms: now_ms() + wait, error }
            }
        }
    }
}

async fn post(t: &Target, body: String) -> Result<u16, String> {
    let tcp =
        tokio::net::TcpStream::connect((t.host.as_str(), t.port)).await.map_err(|e| format!("cannot connect: {e}"))?;
    if t.tls {
        let name =
            rustls::pki_types::ServerName::try_from(t.host.clone()).map_err(|e| format!("bad host name: {e}"))?;
        let tls = tls_connector()?.connect(name, tcp).await.map_err(|e| format!("TLS handshake failed: {e}"))?;
        exchange(t, tls, body).await
    } else {
        exchange(t, tcp, body).await
    }
}

async fn exchange<I>(t: &Target, io: I, body: String) -> Result<u16, String>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(io)).await.map_err(|e| format!("HTTP setup failed: {e}"))?;
    let driver = tokio::spawn(conn);
    let name = if t.host.contains(':') { format!("[{}]", t.host) } else { t.host.clone() };
    let host = if t.port == 443 || t.port == 80 { name } else { format!("{name}:{}", t.port) };
    let req = hyper::Request::post(&t.path)
        .header("host", host)
        .header("content-type", "application/json")
        .header("user-agent", "strategy-webhook-server")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let res = sender.send_request(req).await.map_err(|e| format!("send failed: {e}"));
    let out = match res {
        Ok(r) => {
            let status = r.status().as_u16();
            // Only the status is used; the answer is read to a bound so that a receiver sending without end (a
            // wrong URL, a looping proxy) cannot fill the memory, and for a short while, so that a 2xx whose body
            // stalls is still the sent message it is (waited on until the send's timeout, it was taken for
            // undelivered and posted again, up to every attempt). Past either the read stops and the connection
            // is dropped with the driver below (it is never reused).
            let _ = tokio::time::timeout(ANSWER_WAIT, Limited::new(r.into_body(), ANSWER_LIMIT).collect()).await;
            Ok(status)
        }
        Err(e) => Err(e),
    };
    driver.abort();
    out
}

/// The client TLS configuration for https receivers: the brokers' client's (the system's trusted roots, or
/// `SSL_CERT_FILE`).
fn tls_connector() -> Result<tokio_rustls::TlsConnector, String> {
    crate::client::tls_config().map(tokio_rustls::TlsConnector::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message quoting `@everyone` or Slack's `<!channel>` (a broker's refusal echoing what it was sent) pinged
    /// the whole channel: Discord pinged as the text said, and Slack read its `<…>` as a mention.
    #[test]
    fn a_message_mentions_no_one() {
        let text = "bot b: the broker refuses \"@everyone <!channel> a&b\"";
        let body: serde_json::Value = serde_json::from_str(&chat_body(text)).unwrap();
        assert_eq!(body["content"], text);
        assert_eq!(body["allowed_mentions"]["parse"], serde_json::json!([]));
        assert_eq!(body["text"], "bot b: the broker refuses \"@everyone &lt;!channel&gt; a&amp;b\"");
    }

    #[test]
    fn urls_and_events() {
        let t = parse_url("https://discord.com/api/webhooks/1/abc", vec![]).unwrap();
        assert_eq!(
            (t.tls, t.host.as_str(), t.port, t.path.as_str()),
            (true, "discord.com", 443, "/api/webhooks/1/abc")
        );
        let t = parse_url("http://127.0.0.1:9000", vec![]).unwrap();
        assert_eq!((t.port, t.path.as_str()), (9000, "/"));
        // IPv6 literals: the brackets are not part of the address (with them, https refused the start as no IP
        // address, and http could never connect).
        let t = parse_url("https://[2001:db8::1]:8443/h", vec![]).unwrap();
        assert_eq!((t.host.as_str(), t.port, t.path.as_str()), ("2001:db8::1", 8443, "/h"));
        let t = parse_url("http://[::1]/h", vec![]).unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 80));
        assert!(parse_url("ftp://x", vec![]).is_err() && parse_url("https://u:p@x/", vec![]).is_err());
        let n = Notifications {
            by_strategy: HashMap::from([("s".to_owned(), parse_url("http://h/", vec!["order".into()]).unwrap())]),
        };
        assert!(n.wants("s", "order") && !n.wants("s", "failure") && !n.wants("t", "order"));
    }

    /// The URL written straight under the strategy id (`"s": "https://…"`, a natural slip, where `{"url": …}`
    /// belongs) was printed whole in the start-up error, to stderr and the journal: it is a secret.
    #[test]
    fn a_misplaced_url_is_not_printed_in_the_start_error() {
        let dir = std::env::temp_dir().join(format!("swh-notify-leak-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("n.json");
        std::fs::write(&file, serde_json::json!({ "s": "https://discord.com/api/webhooks/123/S3CRET" }).to_string())
            .unwrap();
        let e = Notifications::load(&file).unwrap_err();
        assert!(!e.contains("S3CRET") && e.contains("invalid type"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A URL from an environment variable filled from a file kept its newline: the start passed and every
    /// notification then failed ("invalid uri character"), given up an hour later. Trimmed; and a URL that can
    /// never be sent stops the start.
    #[test]
    fn an_env_url_loses_its_newline_and_an_unsendable_one_stops_the_start() {
        let dir = std::env::temp_dir().join(format!("swh-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let var = format!("SWH_TEST_NOTIFY_URL_{}", std::process::id());
        std::env::set_var(&var, "https://hooks.example.com/p/abc\n");
        let file = dir.join("n.json");
        std::fs::write(&file, format!(r#"{{"s": {{"url": {{"env": "{var}"}}}}}}"#)).unwrap();
        let n = Notifications::load(&file).unwrap();
        assert_eq!(n.by_strategy["s"].path, "/p/abc");
        std::env::remove_var(&var);
        for bad in ["https://hooks.example.com/p a", "https://hooks.example.com/p\u{7f}"] {
            std::fs::write(&file, serde_json::json!({ "s": { "url": bad } }).to_string()).unwrap();
            let e = Notifications::load(&file).unwrap_err();
            assert!(e.contains("cannot be sent") && !e.contains("hooks.example.com/p"), "{e}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A receiver answering 200 with an endless chunked body was read for the whole send's timeout: hundreds
    /// of MiB in memory in seconds, and the process killed for it. Only the status is used; the body is read to
    /// a small bound.
    /// A 2xx whose body stalls is a message taken: read until the send's timeout, it was counted as undelivered
    /// and posted again at every attempt.
    #[tokio::test]
    async fn a_200_with_a_stalled_body_is_sent() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = conn.read(&mut request).await;
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"ok\":").await;
                    tokio::time::sleep(Duration::from_secs(60)).await;
                });
            }
        });
        let target = parse_url(&format!("http://127.0.0.1:{port}/hook"), vec![]).unwrap();
        let r = tokio::time::timeout(TIMEOUT, post(&target, "{}".into())).await;
        server.abort();
        assert_eq!(r, Ok(Ok(200)), "a 200 whose body stalls is taken for undelivered");
    }

    #[tokio::test]
    async fn an_endless_receiver_answer_is_not_read_without_bound() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let written = std::sync::Arc::new(AtomicU64::new(0));
        let count = std::sync::Arc::clone(&written);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let count = std::sync::Arc::clone(&count);
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = conn.read(&mut request).await;
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").await;
                    let chunk = [b'x'; 1 << 16];
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(&chunk);
                    framed.extend_from_slice(b"\r\n");
                    while conn.write_all(&framed).await.is_ok() {
                        count.fetch_add(framed.len() as u64, Ordering::SeqCst);
                    }
                });
            }
        });
        let target = parse_url(&format!("http://127.0.0.1:{port}/hook"), vec![]).unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(3), post(&target, "{}".into())).await;
        let taken = written.load(Ordering::SeqCst);
        assert!(taken < 32 << 20, "{} MiB of the receiver's answer read into memory", taken >> 20);
    }
}
