//! The brokers' HTTP client: a kept-alive connection pool per broker host (hyper-util's pooled client over
//! rustls), so that an order costs one request on an open connection, not a TCP and TLS handshake.
//!
//! [`send`] is the one place a broker request is made: the dispatchers' orders and lookups and the state
//! sync's reads all go through it (by [`send_authorized`], with the bot's headers from [`request_headers`]) and
//! the bot's timeout. The sessions' token requests use the same pools through [`call`].

use crate::bots::HttpBot;
use crate::session::SessionError;
use crate::sync::Url;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long an unused connection stays open. Brokers close idle connections themselves after about a minute
/// or more; a connection closed by the broker is noticed before a request is put on it.
const IDLE: Duration = Duration::from_secs(55);

/// Unused connections kept per broker host (and per pool): enough for a burst of orders to find open ones, few
/// enough that the idle connections of many bots at one broker, which grew to one per bot, fit in the
/// descriptors kept back from the connection cap ([`idle_connections`]).
pub const IDLE_PER_HOST: usize = 8;

/// The most unused connections the pools may keep for these bots: [`IDLE_PER_HOST`] for each host a pool
/// reaches, a bot's broker and its token endpoint, in each pool (one per distinct timeout). The bots are read
/// once at start, so this holds for the whole run.
pub fn idle_connections(bots: &crate::bots::Bots) -> u64 {
    let mut hosts = std::collections::HashSet::new();
    for bot in bots.http() {
        hosts.insert((bot.timeout, bot.tls, bot.host.as_str(), bot.port));
        if let Some((url, timeout)) = bot.session.token_endpoint() {
            hosts.insert((timeout, url.tls, url.host.as_str(), url.port));
        }
    }
    (hosts.len() * IDLE_PER_HOST) as u64
}

/// What one request to a broker came to.
#[derive(Debug)]
pub enum Reply {
    /// The broker answered.
    Answered {
        /// HTTP status.
        status: u16,
        /// The `Location` header, where the broker gives one.
        location: Option<String>,
        /// The answer's body.
        body: Bytes,
    },
    /// Nothing was sent: the connection (or TLS) failed first. Always safe to try again.
    NotSent(String),
    /// The request may have reached the broker (timeout, dropped connection after sending).
    Unknown(String),
    /// Nothing was sent: the bot's session is stopped (its credentials were refused for good). Trying again
    /// cannot help until the trader logs in again.
    Stopped(String),
}

type Pool = Client<Bounded<HttpsConnector<HttpConnector>>, Full<Bytes>>;

/// A connector whose whole connection (name lookup, TCP and TLS handshake) must be made within `limit`: the TCP
/// connect's own timeout left a stalled lookup or handshake to the request's timeout, which reads as "no answer,
/// unknown whether it was taken", though nothing had left. Past the limit it is a connect error: not sent.
#[derive(Clone)]
struct Bounded<C> {
    inner: C,
    limit: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> tower_service::Service<hyper::Uri> for Bounded<C>
where
    C: tower_service::Service<hyper::Uri>,
    C::Error: Into<BoxError>,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = std::pin::Pin<Box<dyn std::future::Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: hyper::Uri) -> Self::Future {
        let (connecting, limit) = (self.inner.call(uri), self.limit);
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(made) => made.map_err(Into::into),
                Err(_) => Err(format!(
                    "the connection (name lookup, TCP and TLS handshake) was not made within {} ms",
                    limit.as_millis()
                )
                .into()),
            }
        })
    }
}

/// The Host header's value of a bot's requests (the port only when it is not the scheme's), as a signed
/// token names it.
pub fn authority(bot: &HttpBot) -> String {
    Url { tls: bot.tls, host: bot.host.clone(), port: bot.port, path: String::new() }.authority()
}

/// The headers of every request to a bot's broker (its credentials), from the bot's session: `path` is the
/// request's path after the bot's base path. A stopped session is final; an unavailable one may recover.
pub async fn request_headers(bot: &HttpBot, method: &str, path: &str) -> Result<Vec<(String, String)>, SessionError> {
    bot.session.headers(method, &authority(bot), &format!("{}{path}", bot.prefix)).await
}

/// What may still send a bot's request: whether it may go out at all once its credentials are in hand (a
/// token's refresh can take the bot's whole timeout), and the instant by which it must be out (`None`: no
/// limit), read again as it goes since it may move. Past it the request is cut: another server may have taken
/// the bot over by then, and a request of ours leaving after its lookup would double the order.
pub struct Hold<'a> {
    /// Checked once the credentials are ready, before anything is sent.
    pub may_send: &'a (dyn Fn() -> bool + Sync),
    /// The latest instant the request may be in flight.
    pub until: &'a (dyn Fn() -> Option<tokio::time::Instant> + Sync),
}

impl Hold<'_> {
    /// No limit (reads, and a server alone on its database).
    pub const FREE: Hold<'static> = Hold { may_send: &|| true, until: &|| None };
}

/// Waits until `until` says the time is past, reading it again each time it would end (it may have moved).
async fn ran_out(until: &(dyn Fn() -> Option<tokio::time::Instant> + Sync)) {
    loop {
        match until() {
            None => std::future::pending::<()>().await,
            Some(t) if t <= tokio::time::Instant::now() => return,
            Some(t) => tokio::time::sleep_until(t).await,
        }
    }
}

/// `request` unless the hold runs out first: then it is dropped (its connection closed) and the answer is
/// unknown, since the request may have been written. A hold already over when the request would start sends
/// nothing (a pause between the credentials' check and here), and the hold's end is looked at before the
/// request each time both are polled: a kept-alive connection takes a request at its first poll, so polling the
/// request first would hand it over past the hold's end.
async fn within(hold: &Hold<'_>, request: impl std::future::Future<Output = Reply>) -> Reply {
    if (hold.until)().is_some_and(|t| t <= tokio::time::Instant::now()) {
        return Reply::NotSent("the bot's lease ran out before the request was sent".into());
    }
    tokio::select! {
        biased;
        () = ran_out(hold.until) => Reply::Unknown(
            "the request was cut when the bot's lease ran out; it may have reached the broker".into(),
        ),
        reply = request => reply,
    }
}

/// The `User-Agent` of requests whose bot names none.
pub const USER_AGENT: &str = concat!("strategy-webhook/", env!("CARGO_PKG_VERSION"));

/// One request to a bot's broker with its session's credentials. A 401 means the broker did not take the
/// request: the session is told (it mints a new token) and the request is made once more. `hold` says whether
/// and until when the request may go out; the credentials are never cut short (a refresh dropped half-way
/// could lose a rotated refresh token).
pub async fn send_authorized(
    bot: &HttpBot,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    hold: &Hold<'_>,
) -> Reply {
    // Each attempt's answer, with the credentials it went out with.
    let once = |body: Vec<u8>| async move {
        match request_headers(bot, method, path).await {
            Ok(_) if !(hold.may_send)() => (
                Reply::NotSent(
                    "the request may not go out any more (the bot's lease ran out, or the order's deadline \
                         passed) once its credentials were ready"
                        .into(),
                ),
                Vec::new(),
            ),
            Ok(headers) => (within(hold, send(bot, method, path, content_type, body, &headers)).await, headers),
            Err(e) if e.is_stopped() => (Reply::Stopped(e.to_string()), Vec::new()),
            Err(e) => (Reply::NotSent(e.to_string()), Vec::new()),
        }
    };
    let (reply, used) = once(body.clone()).await;
    if !matches!(reply, Reply::Answered { status: 401, .. }) {
        return reply;
    }
    bot.session.unauthorized(&used).await;
    once(body).await.0
}

/// One request to a bot's broker on a pooled connection, all within the bot's timeout. A new connection must
/// be made within half of it, so that a broker that cannot be reached is told apart (nothing sent, safe to
/// try again) from one that took the request and did not answer in time (unknown).
pub async fn send(
    bot: &HttpBot,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    headers: &[(String, String)],
) -> Reply {
    let target = Url { tls: bot.tls, host: bot.host.clone(), port: bot.port, path: format!("{}{path}", bot.prefix) };
    request(&target, method, content_type, body, headers, bot.timeout).await
}

/// One request to any URL (a session's token endpoint) on a pooled connection, answered within `timeout`:
/// the status and the body, or why there is none.
pub async fn call(
    url: &Url,
    method: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(u16, Bytes), String> {
    match request(url, method, None, body, headers, timeout).await {
        Reply::Answered { status, body, .. } => Ok((status, body)),
        Reply::NotSent(e) | Reply::Unknown(e) | Reply::Stopped(e) => Err(e),
    }
}

/// One request to `target` (its path with its query) on the pooled client for `timeout`.
async fn request(
    target: &Url,
    method: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    headers: &[(String, String)],
    timeout: Duration,
) -> Reply {
    let pool = match pool(timeout) {
        Ok(p) => p,
        Err(e) => return Reply::NotSent(e),
    };
    let uri = crate::bots::uri(target.tls, &target.host, target.port, &target.path);
    let mut req = hyper::Request::builder().method(method).uri(uri);
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("accept")) {
        req = req.header(hyper::header::ACCEPT, "application/json");
    }
    // Some brokers refuse a request without one (Tastytrade answers a bare 401, its token endpoint included);
    // a bot's own `User-Agent` header replaces it.
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("user-agent")) {
        req = req.header(hyper::header::USER_AGENT, USER_AGENT);
    }
    if let Some(ct) = content_type {
        req = req.header(hyper::header::CONTENT_TYPE, ct);
    }
    for (name, value) in headers {
        req = req.header(name.as_str(), value.as_str());
    }
    let req = match req.body(Full::new(Bytes::from(body))) {
        Ok(r) => r,
        Err(e) => return Reply::NotSent(format!("the request could not be built: {e}")),
    };
    let exchange = async {
        let res = pool.request(req).await.map_err(|e| {
            // A failure to connect (TCP or TLS) happened before any byte of the request left.
            if e.is_connect() {
                Reply::NotSent(format!("cannot connect to {}:{}: {}", target.host, target.port, chain(&e)))
            } else {
                Reply::Unknown(format!("the connection failed: {}", chain(&e)))
            }
        })?;
        let status = res.status().as_u16();
        let location = res.headers().get(hyper::header::LOCATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        // Bounded: an endpoint streaming without end (a misconfigured `base_url`, a proxy's error page looping)
        // would otherwise hold the dispatcher and grow its memory until the timeout.
        let body = http_body_util::Limited::new(res.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    Reply::Unknown(format!("the answer was larger than {} MiB", MAX_ANSWER_BYTES >> 20))
                } else {
                    Reply::Unknown(format!("the answer was cut: {e}"))
                }
            })?
            .to_bytes();
        Ok::<_, Reply>(Reply::Answered { status, location, body })
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(r)) | Ok(Err(r)) => r,
        Err(_) => Reply::Unknown(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// The largest answer read from a broker or a token endpoint: a page of a few hundred orders is well under a MiB.
pub const MAX_ANSWER_BYTES: usize = 16 << 20;

/// An error with its causes, which say what actually failed (refused, reset, certificate…).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

/// The pooled client for bots with this timeout (half of it is the connector's): one per distinct timeout,
/// each keeping its connections per host.
fn pool(timeout: Duration) -> Result<Pool, String> {
    static POOLS: OnceLock<Mutex<HashMap<Duration, Pool>>> = OnceLock::new();
    let mut pools = POOLS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = pools.get(&timeout) {
        return Ok(p.clone());
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(timeout / 2));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config((*tls_config()?).clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    let bounded = Bounded { inner: https, limit: timeout / 2 };
    let client = Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .pool_timer(TokioTimer::new())
        .build(bounded);
    pools.insert(timeout, client.clone());
    Ok(client)
}

/// Whether https brokers can be reached at all: checked at start when a bot is at one, so a
/// machine without its CA bundle stops with the cause instead of every order expiring unsent.
pub fn check_trust() -> Result<(), String> {
    let (roots, file) = trusted_roots()?;
    if roots.is_empty() {
        return Err(format!("no trusted roots for https brokers ({file} holds no certificate)"));
    }
    tls_config().map(drop)
}

/// The system's trusted roots (Debian's bundle, or `SSL_CERT_FILE`) and the file they were read from.
fn trusted_roots() -> Result<(rustls::RootCertStore, String), String> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    let file = std::env::var("SSL_CERT_FILE").unwrap_or_else(|_| "/etc/ssl/certs/ca-certificates.crt".into());
    let certs = rustls::pki_types::CertificateDer::pem_file_iter(&file)
        .map_err(|e| format!("no trusted roots for https brokers ({file}: {e})"))?;
    for c in certs.flatten() {
        let _ = roots.add(c);
    }
    Ok((roots, file))
}

/// The client TLS configuration of brokers and notification receivers: the system's trusted roots (Debian's
/// bundle, or `SSL_CERT_FILE`).
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        // No root at all is refused at start when a bot is at an https broker (`check_trust`); http bots'
        // connections (the pool is one connector for both) need none.
        let roots = trusted_roots().map_or_else(|_| rustls::RootCertStore::empty(), |(roots, _)| roots);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| format!("TLS client configuration failed: {e}"))
    });
    config.clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bots::{Bots, Delivery};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A broker that takes connections, counts them, and never answers.
    async fn silent_broker() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                held.push(conn);
            }
        });
        (port, accepted)
    }

    fn bot(port: u16) -> HttpBot {
        let file =
            format!(r#"{{"b": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}", "timeout_ms": 10000}}}}"#);
        match Bots::from_json(file.as_bytes(), std::path::Path::new("/nonexistent")).unwrap().delivery("b") {
            Delivery::Http(b) => b,
            other => panic!("{other:?}"),
        }
    }

    /// An endpoint answering without end (a chunked body that never finishes, as a misconfigured `base_url` or a
    /// looping proxy may) was read whole into memory until the timeout; the answer is now cut at 16 MiB, its
    /// outcome unknown, long before the timeout, and an answer under the bound reads as before.
    #[tokio::test]
    async fn an_endless_answer_is_cut_at_the_bound() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let n = conn.read(&mut request).await.unwrap_or(0);
                    let small = String::from_utf8_lossy(&request[..n]).contains("/small");
                    if small {
                        let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await;
                        return;
                    }
                    let _ = conn.write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").await;
                    let chunk = [b'x'; 1 << 16];
                    let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                    framed.extend_from_slice(&chunk);
                    framed.extend_from_slice(b"\r\n");
                    while conn.write_all(&framed).await.is_ok() {}
                });
            }
        });
        let url = |path: &str| Url { tls: false, host: "127.0.0.1".into(), port, path: path.into() };
        let start = tokio::time::Instant::now();
        let r = call(&url("/endless"), "GET", &[], Vec::new(), Duration::from_secs(30)).await;
        assert_eq!(r, Err("the answer was larger than 16 MiB".to_string()));
        assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
        let r = call(&url("/small"), "GET", &[], Vec::new(), Duration::from_secs(30)).await;
        assert_eq!(r, Ok((200, Bytes::from_static(b"{}"))));
    }

    /// A broker that takes the TCP connection and never answers the TLS handshake: nothing of the request left,
    /// so it is not sent (safe to send again), not "no answer, unknown whether it was taken" at the request's
    /// timeout, which failed a replace and cost an order two lookups.
    #[tokio::test]
    async fn a_stalled_tls_handshake_is_not_sent_within_half_the_timeout() {
        let (port, accepted) = silent_broker().await;
        let file =
            format!(r#"{{"b": {{"delivery": "http", "base_url": "https://127.0.0.1:{port}", "timeout_ms": 1000}}}}"#);
        let Delivery::Http(b) =
            Bots::from_json(file.as_bytes(), std::path::Path::new("/nonexistent")).unwrap().delivery("b")
        else {
            panic!("not http")
        };
        let start = tokio::time::Instant::now();
        let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &Hold::FREE).await;
        assert!(matches!(&r, Reply::NotSent(e) if e.contains("TLS handshake")), "{r:?}");
        assert!(start.elapsed() < Duration::from_millis(900), "{:?}", start.elapsed());
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "the TCP connection was made");
    }

    /// A send whose lease ran out while its credentials were made goes nowhere; one still in flight when the
    /// lease could run out is cut, its answer unknown, long before the bot's own 10 s timeout; a lease renewed
    /// meanwhile moves the cut.
    #[tokio::test]
    async fn a_send_goes_out_and_stays_out_only_under_its_hold() {
        let (port, accepted) = silent_broker().await;
        let b = bot(port);
        let refused = Hold { may_send: &|| false, until: &|| None };
        let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &refused).await;
        assert!(matches!(&r, Reply::NotSent(e) if e.contains("lease")), "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing reached the broker");

        let start = tokio::time::Instant::now();
        let end = start + Duration::from_millis(200);
        let cut = Hold { may_send: &|| true, until: &move || Some(end) };
        let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &cut).await;
        assert!(matches!(&r, Reply::Unknown(e) if e.contains("lease ran out")), "{r:?}");
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "cut at the lease, not at the timeout: {:?}",
            start.elapsed()
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "the request was on its way");

        // Renewed: the first end is moved further each time it is read, up to 600 ms, so the cut comes then.
        let reads = AtomicUsize::new(0);
        let start = tokio::time::Instant::now();
        let renewed = move || {
            let n = reads.fetch_add(1, Ordering::SeqCst) as u64;
            Some(start + Duration::from_millis((100 * (n + 1)).min(600)))
        };
        let moving = Hold { may_send: &|| true, until: &renewed };
        let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &moving).await;
        assert!(matches!(r, Reply::Unknown(_)), "{r:?}");
        assert!(start.elapsed() >= Duration::from_millis(600), "not cut before its renewed end: {:?}", start.elapsed());
    }
    /// A send whose lease's `until` has already passed when it is made (the process paused between the
    /// credentials' `may_send` check and the send: a VM stall, SIGSTOP) must not reach the broker: another server
    /// may have taken the bot over by then, even on a kept-alive connection that could take it at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_send_past_its_hold_never_reaches_the_broker() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&got);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let count = Arc::clone(&count);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let n = match conn.read(&mut buf).await {
                            Ok(n) if n > 0 => n,
                            _ => return,
                        };
                        let requests = String::from_utf8_lossy(&buf[..n]).matches("POST /orders").count();
                        for _ in 0..requests {
                            count.fetch_add(1, Ordering::SeqCst);
                            if conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        let b = bot(port);
        let (mut late, mut answered) = (0, 0);
        for _ in 0..20 {
            // A kept-alive connection, as between a bot's orders.
            let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &Hold::FREE).await;
            assert!(matches!(r, Reply::Answered { status: 200, .. }), "{r:?}");
            let before = got.load(Ordering::SeqCst);
            let past = tokio::time::Instant::now() - Duration::from_millis(1);
            let gone = Hold { may_send: &|| true, until: &move || Some(past) };
            let r = send_authorized(&b, "POST", "/orders", None, b"{}".to_vec(), &gone).await;
            answered += usize::from(matches!(r, Reply::Answered { .. }));
            tokio::time::sleep(Duration::from_millis(50)).await;
            late += got.load(Ordering::SeqCst) - before;
        }
        assert_eq!(
            late, 0,
            "of 20 sends made after their hold's end, {late} reached the broker ({answered} even answered)"
        );
    }
}
