//! HTTP plumbing shared by both listeners (accept loop, TLS, graceful shutdown, bounded body reads, JSON
//! answers) and the public webhook listener's routes.
//!
//! Public routes:
//! - `POST /webhooks/{tokenHash}`: the webhook; answers exactly as the core's Outcome says.
//! - `GET /share/{id}`: a strategy's public share URL: its id, name and status; never accepts a POST.
//! - `GET /healthz`: liveness for load balancers.

use crate::app::{now_ms, App};
use crate::error::ApiError;
use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strategy_webhook::{Decision, MAX_BODY};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

/// The answer type of every route.
pub type Answer = Response<Full<Bytes>>;

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send the request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client may take to send a whole body (slow senders are fine, stuck ones are not).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// After answering without reading the whole body (a 413), how long and how much more is read and thrown
/// away before the connection is closed. Closing with unread data makes the kernel send a reset, and a
/// sender still writing its body would see "broken pipe" instead of the 413 (nginx calls this lingering
/// close). The body itself is never read past the limit.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;

/// The connections still open after [`serve`] stopped accepting. Each connection task holds a sender; the
/// channel closes when the last one ends.
pub struct Connections(mpsc::Receiver<Infallible>);

impl Connections {
    /// Waits until every connection has finished (in-flight requests answered, idle ones closed).
    pub async fn drained(mut self) {
        while self.0.recv().await.is_some() {}
    }
}

/// Accepts connections until `stop` turns true, serving each with `handler` (over TLS when `tls` is given).
/// Connections open at that point are told to finish the request in flight and close; the returned
/// [`Connections`] tells when they have.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    mut stop: watch::Receiver<bool>,
) -> Connections
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + Unpin + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    let (open, connections) = mpsc::channel::<Infallible>(1);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (stream, _peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Small JSON answers: do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        let open = open.clone();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls_stream)) => connection(tls_stream, handler, stop).await,
                    // Plain HTTP on the TLS port ends here: the handshake fails and the connection is closed.
                    Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!("TLS handshake timed out"),
                },
                None => connection(stream, handler, stop).await,
            }
            drop(open);
        });
    }
    Connections(connections)
}

/// Serves one connection until the client closes it, or until `stop` and the request in flight is answered.
async fn connection<I, H, F>(io: I, handler: H, mut stop: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + Unpin + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    let linger = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&linger);
    let svc = service_fn(move |req| {
        let handler = handler.clone();
        let flag = Arc::clone(&flag);
        let answer: Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>> = Box::pin(async move {
            let res = handler(req).await;
            if res.headers().get(CONNECTION).is_some_and(|v| v == "close") {
                flag.store(true, Ordering::Relaxed);
            }
            Ok(res)
        });
        answer
    });
    let mut builder = http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    let mut conn = builder.serve_connection(TokioIo::new(io), svc);
    let mut stopping = false;
    let result = loop {
        tokio::select! {
            r = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => break r,
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                // Finish the request in flight (if any), then close; an idle connection closes now.
                Pin::new(&mut conn).graceful_shutdown();
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(error = %e, "connection ended with an error");
    }
    let mut io = conn.into_parts().io.into_inner();
    let _ = io.shutdown().await;
    if linger.load(Ordering::Relaxed) {
        let mut buf = vec![0u8; 16 * 1024];
        let mut thrown = 0;
        let until = tokio::time::Instant::now() + LINGER_TIME;
        while thrown < LINGER_BYTES {
            match tokio::time::timeout_at(until, io.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => thrown += n,
                _ => break,
            }
        }
    }
}

/// A body read with a size limit.
pub enum Body {
    /// The whole body, at most the limit.
    Complete(Bytes),
    /// More than the limit was sent (or announced); nothing past the limit was read.
    TooLarge,
    /// The body could not be read (the client went away or was too slow).
    Failed(&'static str),
}

/// Reads a request body of at most `limit` bytes. A Content-Length over the limit is refused before any
/// byte is read; a chunked body is refused as soon as `limit + 1` bytes have arrived.
pub async fn read_body(body: Incoming, declared: Option<u64>, limit: usize) -> Body {
    if declared.is_some_and(|n| n > limit as u64) {
        return Body::TooLarge;
    }
    let read = async {
        let mut body = body;
        let mut buf = BytesMut::with_capacity(declared.map_or(1024, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| "the request body could not be read")?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > limit {
                    return Ok(None);
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(Some(buf.freeze()))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(Some(b))) => Body::Complete(b),
        Ok(Ok(None)) => Body::TooLarge,
        Ok(Err(e)) => Body::Failed(e),
        Err(_) => Body::Failed("the request body did not arrive in time"),
    }
}

/// The declared Content-Length, if any and readable.
pub fn content_length(req: &Request<Incoming>) -> Option<u64> {
    req.headers().get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// A JSON answer.
pub fn json(status: u16, body: impl Into<Bytes>) -> Answer {
    let mut res = Response::new(Full::new(body.into()));
    *res.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    res
}

/// Percent-decoding of a path segment or query value (`%2F` → `/`); invalid escapes stay as they are.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The public listener's router.
pub async fn public(app: Arc<App>, req: Request<Incoming>) -> Answer {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let (answer, shown, strategy) = if let Some(token) = path.strip_prefix("/webhooks/") {
        // The token is the credential: the path is never logged as it is.
        let shown = "/webhooks/<redacted>";
        if method == Method::POST {
            let (answer, strategy) = webhook(&app, token, req).await;
            (answer, shown, strategy)
        } else {
            (ApiError::MethodNotAllowed("POST").answer(), shown, None)
        }
    } else if let Some(id) = path.strip_prefix("/share/") {
        let answer = if method == Method::GET || method == Method::HEAD {
            share(&app, &percent_decode(id))
        } else {
            ApiError::MethodNotAllowed("GET").answer()
        };
        (answer, "/share/{id}", None)
    } else if path == "/healthz" {
        (json(200, r#"{"status":"ok"}"#), "/healthz", None)
    } else {
        (ApiError::NotFound.answer(), "<other>", None)
    };
    tracing::info!(
        method = %method,
        path = shown,
        status = answer.status().as_u16(),
        strategy = strategy.as_deref().unwrap_or("-"),
        micros = started.elapsed().as_micros() as u64,
        "request"
    );
    answer
}

/// A zero-filled body one byte over the limit: what the engine is shown for a body announced or found to be
/// too large, so that the core's order of checks (400, 404, then 413) decides the answer.
static OVERSIZED: [u8; MAX_BODY + 1] = [0; MAX_BODY + 1];

/// `POST /webhooks/{token}`: read the body (bounded), hand it to the engine, record the Outcome's log rows,
/// answer with the Outcome's status and body.
async fn webhook(app: &Arc<App>, token: &str, req: Request<Incoming>) -> (Answer, Option<String>) {
    let content_type = req.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let declared = content_length(&req);
    let body = read_body(req.into_body(), declared, MAX_BODY).await;
    let now = now_ms();
    let (outcome, close) = match &body {
        Body::Complete(b) => (app.engine.deliver(token.as_bytes(), b, content_type.as_deref(), now), false),
        // The rest of the body is never read, so the connection cannot carry another request.
        Body::TooLarge => (app.engine.deliver(token.as_bytes(), &OVERSIZED, content_type.as_deref(), now), true),
        Body::Failed(why) => {
            let mut res = ApiError::BodyNotReceived(why).answer();
            res.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
            return (res, None);
        }
    };
    let mut outcome = outcome;
    let mut res = json(outcome.http_status, std::mem::take(&mut outcome.response));
    if close {
        res.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    let strategy = outcome.strategy.clone();
    if outcome.decision == Decision::Processed {
        // The durable hand-off: nothing is answered 200 processed before its orders and dedup key are
        // committed. On failure the key was given back, so the sender's retry is processed once.
        if let Err(e) = app.hand_off(outcome, now).await {
            tracing::error!(strategy = strategy.as_deref().unwrap_or("-"), error = %e, "the outbox commit failed");
            return (ApiError::HandOff(e).answer(), strategy);
        }
    } else {
        app.record(outcome, now).await;
    }
    (res, strategy)
}

/// `GET /share/{id}`: what a strategy's public share link shows. It names the strategy but carries nothing
/// that could trade: no token, no bots, no accounts.
fn share(app: &App, id: &str) -> Answer {
    match app.engine.strategy(id) {
        Some(s) => {
            json(200, serde_json::json!({ "id": s.id, "name": s.name, "status": s.status.as_str() }).to_string())
        }
        None => ApiError::UnknownStrategy.answer(),
    }
}
