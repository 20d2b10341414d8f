//! HTTP plumbing shared by both listeners (accept loop, TLS, graceful shutdown, bounded body reads, JSON
//! answers) and the public webhook listener's routes.
//!
//! Public routes:
//! - `POST /webhooks/{tokenHash}`: the webhook; answers exactly as the core's Outcome says.
//! - `GET /share/{id}`: a strategy's public share URL: its id, name and status; never accepts a POST.
//! - `GET /healthz`: liveness for load balancers.

use crate::app::App;
use crate::budget::Budget;
use crate::error::ApiError;
use crate::webhook::Shield;
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
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;

/// The answer type of every route.
pub type Answer = Response<Full<Bytes>>;

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a client may send in plaintext handshake records. rustls joins a handshake message of up to 64 KiB
/// before it judges it, and a connection that sent most of one and then waited held that for the handshake's
/// 10 s: four times [`MAX_HEAD`], times the connection cap, a quarter of a gigabyte without a token. A real
/// client's ClientHello, with post-quantum key shares and a resumption ticket, is a few KB.
const MAX_HANDSHAKE_INPUT: usize = 16 * 1024;
/// The most ciphertext a client may send, from its first application-data record on, without any of it coming up
/// as plaintext. TLS 1.3 sends handshake messages encrypted, in application-data records (its Finished, and after
/// the handshake a KeyUpdate; after a TLS 1.2 handshake a renegotiating ClientHello comes encrypted too), and
/// rustls joins those up to 64 KiB as it does plaintext ones: a connection that sent 60 KiB of a KeyUpdate claiming
/// 0xfff0 bytes held ~70 KB for the head's 10 s. A full record is at most 16 KiB + 256 + 5 bytes, and rustls
/// buffers at most 16 KiB + 2053 bytes of records that are not part of a handshake message being joined, so a
/// client sending data never comes near this between two records' plaintext (see [`Plaintext`]).
const MAX_CIPHERTEXT_WITHOUT_PLAINTEXT: usize = 24 * 1024;
/// How long a client may take to send the request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The most a connection buffers: the longest request head accepted (longer: 431), and the most of a body read
/// at once. hyper's default (about 400 KiB) let each connection hold that much of an unfinished head for the
/// head's whole time, hundreds of megabytes over the connection cap; an alert's head is well under 1 KiB.
const MAX_HEAD: usize = 16 * 1024;
/// How long a client may take to send a whole body (slow senders are fine, stuck ones are not).
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a body may trickle before the minimum rate applies (a sender's first packets, a slow start).
const BODY_GRACE: Duration = Duration::from_secs(2);
/// The slowest body accepted by default, in bytes per second on average after [`BODY_GRACE`].
pub const MIN_BODY_RATE: u32 = 1024;
/// After answering without reading the whole body (a 413), how long and how much more is read and thrown
/// away before the connection is closed. Closing with unread data makes the kernel send a reset, and a
/// sender still writing its body would see "broken pipe" instead of the 413 (nginx calls this lingering
/// close). The body itself is never read past the limit.
const LINGER_TIME: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 1 << 20;
/// How long an answer may wait for the client to read any of it. hyper reads no new request while an answer
/// is unsent, so no read timeout runs then, and TCP keeps a connection whose peer's kernel acknowledges its
/// window probes forever: a client that sends requests and never reads the answers would hold its connection
/// slot (and with enough addresses the whole cap, real senders' alerts turned away) at no cost to itself.
const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of its answers (encrypted, as TLS records) a connection keeps while its client does not take them;
/// past that, writes wait. rustls's default, 64 KiB, let a client that pipelined requests and never read the answers
/// hold ~87 KB for [`WRITE_STALL_TIMEOUT`] with the rest. A webhook answer is well under 1 KiB; a longer one (the
/// admin listener's) goes out in pieces as the client takes them. One full TLS record (16 KiB of plaintext and its
/// overhead) fits: at 4 KiB a 1 MiB admin answer took 257 write syscalls instead of 17, about a third slower.
const MAX_UNSENT: usize = 17 * 1024;
/// How many refused connections make one warning (a flood is logged, not every connection of it).
const REFUSED_PER_WARNING: u64 = 1000;

/// The source address of a request's connection, put in its extensions for the per-address caps.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub IpAddr);

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
/// A connection over the `budget`'s caps is closed at once, before anything is read from it. Connections open
/// when `stop` turns true are told to finish the request in flight and close; the returned [`Connections`]
/// tells when they have.
pub async fn serve<H, F>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: H,
    budget: Arc<Budget>,
    mut stop: watch::Receiver<bool>,
) -> Connections
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + Unpin + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    let (open, connections) = mpsc::channel::<Infallible>(1);
    let mut refused: u64 = 0;
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Usually out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(permit) = budget.connection(peer.ip()) else {
            // Over a cap: closing at once frees the descriptor and costs no handshake.
            drop(stream);
            refused += 1;
            if refused % REFUSED_PER_WARNING == 1 {
                let (open, in_flight) = budget.in_use();
                tracing::warn!(refused, open, in_flight, "connections refused: over the connection caps");
            }
            continue;
        };
        // Small JSON answers: do not let Nagle hold them back.
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        let tls = tls.clone();
        let stop = stop.clone();
        let open = open.clone();
        let ip = peer.ip();
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    let ciphertext = Arc::new(AtomicUsize::new(0));
                    let sent = Arc::new(AtomicU64::new(0));
                    let handshake = accept(&acceptor, stream, Arc::clone(&ciphertext), Arc::clone(&sent));
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                        Ok(Ok(mut tls_stream)) => {
                            tls_stream.get_mut().0.lift();
                            connection(Plaintext { io: tls_stream, ciphertext }, handler, stop, ip, sent).await
                        }
                        // Plain HTTP on the TLS port ends here: the handshake fails and the connection is closed.
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
                // The socket's own writes return ready as soon as it takes any bytes: nothing below to count.
                None => connection(stream, handler, stop, ip, Arc::default()).await,
            }
            drop(permit);
            drop(open);
        });
    }
    Connections(connections)
}

/// Starts the TLS handshake of an accepted connection: what its client sends is capped (see [`Capped`], which
/// counts into `ciphertext`, and the bytes the socket takes into `sent`), and at most [`MAX_UNSENT`] of its answers
/// are kept encrypted and unsent.
fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    acceptor: &TlsAcceptor,
    stream: S,
    ciphertext: Arc<AtomicUsize>,
    sent: Arc<AtomicU64>,
) -> tokio_rustls::Accept<Capped<S>> {
    acceptor.accept_with(Capped::new(stream, ciphertext, sent), |c| c.set_buffer_limit(Some(MAX_UNSENT)))
}

/// Serves one connection until the client closes it, or until `stop` and the request in flight is answered.
/// `sent` counts the bytes the socket under TLS has taken (see [`WriteDeadline`]).
async fn connection<I, H, F>(io: I, handler: H, mut stop: watch::Receiver<bool>, peer: IpAddr, sent: Arc<AtomicU64>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + Unpin + 'static,
    F: Future<Output = Answer> + Send + 'static,
{
    let linger = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&linger);
    let svc = service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
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
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT).max_buf_size(MAX_HEAD);
    // A sender may close its side right after a whole request (a script's `print(request); close()`): without
    // half-closes, the end of the stream dropped the request before the handler had taken its body, and the alert
    // was neither decided nor logged. An idle connection still closes at its end of stream; a body cut short still
    // fails to read (408, never traded).
    builder.half_close(true);
    let io = WriteDeadline::new(io, sent, WRITE_STALL_TIMEOUT);
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
    // The close (TLS's close_notify) is a write too, to a client that may not be reading.
    let _ = tokio::time::timeout(LINGER_TIME, io.shutdown()).await;
    if linger.load(Ordering::Relaxed) {
        // Small: under a flood of refused bodies, every lingering connection holds one.
        let mut buf = vec![0u8; 4 * 1024];
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

/// The socket under rustls, whose client may send at most [`MAX_HANDSHAKE_INPUT`] bytes of plaintext handshake
/// records (TLS record types 22 and 20: its ClientHello, and in TLS 1.2 its key exchange and Finished): past that a
/// read fails, the handshake with it, and the connection is closed rather than held with what rustls buffered. A
/// record is charged whole when its header arrives. The first application-data record (type 23: TLS 1.3's
/// encrypted Finished, or the request itself) ends that count: counted, a client that sent its request right
/// behind its Finished (a 20 KB body in one write) was cut off, because the handshake reads on until it has the
/// request's first record.
///
/// From that record on (or the end of the handshake, whichever comes first) every byte read is added to
/// `ciphertext`, which the stream above rustls ([`Plaintext`]) sets back to zero whenever plaintext comes up:
/// past [`MAX_CIPHERTEXT_WITHOUT_PLAINTEXT`] a read fails, and a client sending an encrypted handshake message it
/// never finishes is closed once it has sent 24 KiB of it.
///
/// Every byte the socket takes is added to `sent`, which [`WriteDeadline`] reads as the client's progress.
struct Capped<S> {
    io: S,
    /// `None` once the plaintext handshake is over.
    count: Option<HelloCount>,
    /// Ciphertext read since plaintext last came up.
    ciphertext: Arc<AtomicUsize>,
    /// Bytes written to the socket.
    sent: Arc<AtomicU64>,
}

/// Where a [`Capped`] stream is among the client's plaintext records.
struct HelloCount {
    /// Bytes of records that may still be announced.
    left: usize,
    /// The header being read, and how much of it has arrived.
    header: [u8; 5],
    have: usize,
    /// Bytes left of the record being passed over.
    body: usize,
}

/// The TLS record type that ends the plaintext handshake: `application_data` (TLS 1.3 sends its encrypted
/// handshake in it too). Every other record before it is charged to the cap, not only `handshake` and
/// `change_cipher_spec`: rustls takes a warning `alert` before the ClientHello (a warning is fatal only once
/// TLS 1.3 is agreed), and a cap that stopped counting at one let the rest of the ClientHello run to 64 KiB.
const APPLICATION_DATA: u8 = 23;

impl<S> Capped<S> {
    fn new(io: S, ciphertext: Arc<AtomicUsize>, sent: Arc<AtomicU64>) -> Self {
        let count = Some(HelloCount { left: MAX_HANDSHAKE_INPUT, header: [0; 5], have: 0, body: 0 });
        Capped { io, count, ciphertext, sent }
    }

    /// Adds what a write moved to the socket to `sent`.
    fn count_sent(&self, r: Poll<std::io::Result<usize>>) -> Poll<std::io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = r {
            self.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        r
    }

    /// The handshake is done: the plaintext handshake's count is over (a TLS 1.2 client may not have sent an
    /// application-data record yet), every byte read from now on counts as ciphertext.
    fn lift(&mut self) {
        self.count = None;
    }
}

impl HelloCount {
    /// Reads the record headers in `data`; once an application-data record begins (counting is over), `Ok(Some)` of
    /// where it begins in `data`.
    fn read(&mut self, mut data: &[u8]) -> std::io::Result<Option<usize>> {
        let len = data.len();
        while !data.is_empty() {
            if self.body > 0 {
                let n = self.body.min(data.len());
                self.body -= n;
                data = &data[n..];
                continue;
            }
            let n = (5 - self.have).min(data.len());
            self.header[self.have..self.have + n].copy_from_slice(&data[..n]);
            self.have += n;
            data = &data[n..];
            if self.have < 5 {
                break;
            }
            self.have = 0;
            if self.header[0] == APPLICATION_DATA {
                return Ok(Some((len - data.len()).saturating_sub(5)));
            }
            let len = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            self.left = self.left.checked_sub(5 + len).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "the TLS handshake sent more than 16 KiB")
            })?;
            self.body = len;
        }
        Ok(None)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, buf))?;
        let data = &buf.filled()[before..];
        let ciphertext = match &mut self.count {
            None => data.len(),
            Some(count) => match count.read(data)? {
                None => 0,
                Some(at) => {
                    self.count = None;
                    data.len() - at
                }
            },
        };
        if ciphertext > 0
            && self.ciphertext.fetch_add(ciphertext, Ordering::Relaxed) + ciphertext > MAX_CIPHERTEXT_WITHOUT_PLAINTEXT
        {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the client sent more than 24 KiB of TLS records with no plaintext in them",
            )));
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.count_sent(r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.count_sent(r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The TLS stream above rustls, which sets the [`Capped`] count of ciphertext read without plaintext back to zero
/// whenever plaintext comes up. It takes one decrypted record at a time (`poll_fill_buf`, which reads from the
/// socket only until a record's plaintext is there): tokio-rustls's `poll_read` goes on reading records into
/// whatever room the caller's buffer has left, and two full records (32 KB of ciphertext) came up in one read, so
/// that a body sent in full records could be cut off as if no plaintext had come.
struct Plaintext<S> {
    io: S,
    ciphertext: Arc<AtomicUsize>,
}

impl<S: tokio::io::AsyncBufRead + Unpin> AsyncRead for Plaintext<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let data = std::task::ready!(Pin::new(&mut self.io).poll_fill_buf(cx))?;
        let n = data.len().min(buf.remaining());
        buf.put_slice(&data[..n]);
        Pin::new(&mut self.io).consume(n);
        if n > 0 {
            self.ciphertext.store(0, Ordering::Relaxed);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Plaintext<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A connection's I/O whose writes fail once the client has taken none of the pending bytes for `limit`
/// ([`WRITE_STALL_TIMEOUT`]); any progress starts the time again. Progress is a write that returns ready, or bytes
/// the socket under TLS took (`sent`, counted by [`Capped`]): tokio-rustls moves part of its records to the socket
/// and still returns pending while the rest waits, so a slow client still reading, taking some every few seconds,
/// was cut at the limit from the first wait.
struct WriteDeadline<I> {
    io: I,
    /// Since when a write has been waiting for the client, as a timer that wakes the connection at the limit.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
    limit: Duration,
    /// Bytes the socket has taken, and how many of them the timer has seen.
    sent: Arc<AtomicU64>,
    seen: u64,
}

impl<I> WriteDeadline<I> {
    fn new(io: I, sent: Arc<AtomicU64>, limit: Duration) -> Self {
        WriteDeadline { io, stalled: None, limit, sent, seen: 0 }
    }

    fn watch<T>(&mut self, cx: &mut std::task::Context<'_>, r: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        let sent = self.sent.load(Ordering::Relaxed);
        if r.is_ready() || sent != self.seen {
            self.seen = sent;
            self.stalled = None;
            if r.is_ready() {
                return r;
            }
        }
        let limit = self.limit;
        let timer = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read none of the answer in time",
            )));
        }
        Poll::Pending
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WriteDeadline<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.watch(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.watch(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.watch(cx, r)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.watch(cx, r)
    }
}

/// A body read with a size limit.
pub enum Body {
    /// The whole body, at most the limit.
    Complete(Bytes),
    /// More than the limit was sent (or announced); nothing past the limit was read.
    TooLarge,
    /// The body could not be read (the client went away, or was too slow: 408).
    Failed(&'static str),
    /// The body's framing is broken (a malformed chunk: 400).
    Malformed(&'static str),
}

/// Reads a request body of at most `limit` bytes, at the default minimum rate (see [`read_body_paced`]).
pub async fn read_body(body: Incoming, declared: Option<u64>, limit: usize) -> Body {
    read_body_paced(body, declared, limit, MIN_BODY_RATE, true).await
}

/// Reads a request body of at most `limit` bytes. A Content-Length over the limit is refused before any
/// byte is read; a chunked body is refused as soon as `limit + 1` bytes have arrived. The buffer grows with
/// what arrives, never sized from the Content-Length, so a body announced and never sent costs nothing.
/// With `keep` false the bytes are counted and thrown away (a body that is read only to know its size).
///
/// Timing: the whole body within 30 s, and after the first 2 s at least `min_rate` bytes per second on
/// average: a sender trickling a byte now and then is cut long before the total runs out.
pub async fn read_body_paced(body: Incoming, declared: Option<u64>, limit: usize, min_rate: u32, keep: bool) -> Body {
    if declared.is_some_and(|n| n > limit as u64) {
        return Body::TooLarge;
    }
    let start = tokio::time::Instant::now();
    let total = start + BODY_TIMEOUT;
    let rate = u64::from(min_rate.max(1));
    let mut body = body;
    let mut buf = BytesMut::new();
    let mut seen: usize = 0;
    loop {
        // The next frame must come before the average since the grace period falls under the minimum rate.
        let credit = Duration::from_millis((seen as u64).saturating_mul(1000) / rate);
        let due = (start + BODY_GRACE + credit).min(total);
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(Some(Err(e))) => {
                return if malformed(&e) {
                    Body::Malformed("the request body is malformed (bad chunked encoding)")
                } else {
                    Body::Failed("the request body could not be read")
                }
            }
            Ok(None) => return Body::Complete(buf.freeze()),
            Err(_) if due == total => return Body::Failed("the request body did not arrive in time"),
            Err(_) => return Body::Failed("the request body arrived too slowly"),
        };
        if let Ok(data) = frame.into_data() {
            if seen + data.len() > limit {
                return Body::TooLarge;
            }
            seen += data.len();
            if keep {
                buf.extend_from_slice(&data);
            }
        }
    }
}

/// Whether a body error is the sender's broken framing (hyper reports a bad chunk as invalid input or data)
/// rather than a transport failure.
fn malformed(e: &hyper::Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return matches!(io.kind(), std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData);
        }
        source = s.source();
    }
    false
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

/// An Outcome's response as a body: the core's fixed answers are static text, sent without a copy.
pub fn response_bytes(response: std::borrow::Cow<'static, str>) -> Bytes {
    match response {
        std::borrow::Cow::Borrowed(s) => Bytes::from_static(s.as_bytes()),
        std::borrow::Cow::Owned(s) => Bytes::from(s),
    }
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
pub async fn public(app: Arc<App>, shield: Arc<Shield>, req: Request<Incoming>) -> Answer {
    let started = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let (answer, shown, strategy) = if let Some(token) = path.strip_prefix("/webhooks/") {
        // The token is the credential: the path is never logged as it is.
        let shown = "/webhooks/<redacted>";
        if method == Method::POST {
            let (answer, strategy) = crate::webhook::webhook(&app, &shield, token, req).await;
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
        // Failed while this server's clock is off the shared database's: it refuses every alert then, and a load
        // balancer that leaves it out sends the senders' retries to a server whose clock is right.
        let answer = match app.shared.as_ref().and_then(|pg| pg.clock_off()) {
            Some(e) => {
                json(503, serde_json::json!({ "status": "clock", "error": e.to_string() }).to_string().into_bytes())
            }
            None => json(200, r#"{"status":"ok"}"#),
        };
        (answer, "/healthz", None)
    } else {
        (ApiError::NotFound.answer(), "<other>", None)
    };
    crate::metrics::http_answer(answer.status().as_u16());
    let status = answer.status().as_u16();
    let micros = started.elapsed().as_micros() as u64;
    match strategy.as_deref() {
        // Refusals before a decision (over the rate limit or a cap, a body too large, slow or malformed) are not
        // bounded by the rate limit: whoever holds a token could flood the log with them as with requests
        // without one, so they are counted the same way. Decided alerts (bounded by the rate limit) and
        // failures keep a line each.
        Some(strategy) if matches!(status, 400 | 408 | 413 | 429 | 503) => {
            tracing::debug!(method = %method, path = shown, status, strategy, micros, "request");
            // 429 and 413 are counted by the handler; these, lost to their sender, into the strategy's Logs too.
            if matches!(status, 400 | 408 | 503) {
                shield.refusals.note_lost(strategy, status, crate::app::now_ms());
            }
            if let Some(n) = REFUSED.note(std::time::SystemTime::now()) {
                tracing::info!(
                    requests = n,
                    "webhook requests refused before a decision (429, 503, 413, 408, 400) in the last minute"
                );
            }
        }
        Some(strategy) => tracing::info!(method = %method, path = shown, status, strategy, micros, "request"),
        // A line per request no strategy answered would let anyone without a token flood the log (and, under
        // journald's rate limit, push the server's own errors out of it): such requests are a DEBUG line each
        // and an INFO line a minute with their count.
        None => {
            tracing::debug!(method = %method, path = shown, status, micros, "request");
            if let Some(n) = UNMATCHED.note(std::time::SystemTime::now()) {
                tracing::info!(requests = n, "requests no strategy answered (404 and such) in the last minute");
            }
        }
    }
    answer
}

/// Requests no strategy answered, counted for one INFO line a minute.
static UNMATCHED: Tally = Tally { count: AtomicU64::new(0), since_s: AtomicU64::new(0) };

/// A strategy's requests refused before a decision, counted for one INFO line a minute.
static REFUSED: Tally = Tally { count: AtomicU64::new(0), since_s: AtomicU64::new(0) };

/// A count that says its total at most once per [`Tally::EVERY_S`].
struct Tally {
    count: AtomicU64,
    /// When the count was last said (Unix seconds).
    since_s: AtomicU64,
}

impl Tally {
    const EVERY_S: u64 = 60;

    /// Counts one; returns the count to say (and starts again) once a period has passed since it was last said.
    fn note(&self, now: std::time::SystemTime) -> Option<u64> {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let now_s = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let since = self.since_s.load(Ordering::Relaxed);
        if now_s < since.saturating_add(Self::EVERY_S) {
            return None;
        }
        // One caller wins the period: it says the count so far.
        if self.since_s.compare_exchange(since, now_s, Ordering::Relaxed, Ordering::Relaxed).is_err() {
            return None;
        }
        self.count.fetch_sub(n, Ordering::Relaxed);
        Some(n)
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Plaintext handshake records are charged whole as their headers arrive, however the reads split them; the
    /// first application-data record ends the count.
    #[test]
    fn a_hello_count_charges_plaintext_records_and_stops_at_application_data() {
        let record = |kind: u8, len: usize| {
            let mut r = vec![kind, 3, 1];
            r.extend_from_slice(&(len as u16).to_be_bytes());
            r.resize(5 + len, 0x41);
            r
        };
        let fresh = || HelloCount { left: MAX_HANDSHAKE_INPUT, header: [0; 5], have: 0, body: 0 };
        // A 2 KB ClientHello, a change_cipher_spec, then the Finished and a 16 KiB request as application data,
        // fed a byte at a time and in one piece: counted as 2 KB and 6 bytes, then no more.
        let mut flight = [record(22, 2_000), record(20, 1)].concat();
        flight.extend(record(23, 60));
        flight.extend(record(23, 16_400));
        for step in [1, flight.len()] {
            let mut c = fresh();
            let mut open = true;
            let mut from = 0;
            for piece in flight.chunks(step) {
                if open {
                    if let Some(at) = c.read(piece).expect("a real flight is within the bound") {
                        open = false;
                        from += at;
                    } else {
                        from += piece.len();
                    }
                }
            }
            assert!(!open, "the application data ends the count");
            // Where the first application-data record began (up to 4 bytes later when the reads split its header).
            assert!((2_011..=2_015).contains(&from), "{from}");
            assert_eq!(c.left, MAX_HANDSHAKE_INPUT - 2_005 - 6);
        }
        // 20 KiB of ClientHello in small records: refused once past 16 KiB, whatever the split.
        let hello: Vec<u8> = (0..20).flat_map(|_| record(22, 1_019)).collect();
        let mut c = fresh();
        let refused = hello.chunks(700).map(|p| c.read(p)).find_map(Result::err);
        assert!(refused.is_some_and(|e| e.kind() == std::io::ErrorKind::InvalidData));
    }
    use std::time::{Duration, UNIX_EPOCH};

    /// A client that does not read its answers (here: after the handshake, nothing) leaves at most [`MAX_UNSENT`]
    /// of them encrypted in rustls once its socket is full; rustls's default kept 64 KiB, which with a connection per
    /// client for the write stall time was ~87 KB per connection from clients that pipelined requests and never read.
    #[tokio::test]
    async fn a_client_that_does_not_read_leaves_at_most_17_kib_of_answers_encrypted_and_unsent() {
        use rustls::pki_types::pem::PemObject;
        let dir = std::env::temp_dir().join(format!("swh-http-unsent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (config, _) = crate::tls::server_config(None, None, &dir).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        std::fs::remove_dir_all(&dir).ok();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        // A 4 KiB pipe for the socket.
        let (near, far) = tokio::io::duplex(4096);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let (server, client) = tokio::join!(
            accept(&TlsAcceptor::from(config), near, Arc::new(AtomicUsize::new(0)), Arc::default()),
            tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, far)
        );
        let (mut server, _client) = (server.unwrap(), client.unwrap());
        let answers = vec![b'x'; 256 * 1024];
        let mut taken = 0;
        while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(200), server.write(&answers[taken..])).await {
            taken += n;
        }
        assert!(taken > 0 && taken <= 4096 + MAX_UNSENT, "{taken} bytes of answers taken with none read");
    }

    /// A TLS connection over a 1 KiB pipe, the server's side under [`WriteDeadline`] as [`serve`] sets it up, and
    /// the client's socket, on which the test reads the records.
    async fn slow_pipe() -> (
        WriteDeadline<Plaintext<tokio_rustls::server::TlsStream<Capped<tokio::io::DuplexStream>>>>,
        tokio::io::DuplexStream,
    ) {
        use rustls::pki_types::pem::PemObject;
        let dir = std::env::temp_dir().join(format!("swh-http-stall-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (config, _) = crate::tls::server_config(None, None, &dir).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::CertificateDer::pem_file_iter(dir.join("cert.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        std::fs::remove_dir_all(&dir).ok();
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let (near, far) = tokio::io::duplex(1024);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let ciphertext = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(AtomicU64::new(0));
        let (server, client) = tokio::join!(
            accept(&TlsAcceptor::from(config), near, Arc::clone(&ciphertext), Arc::clone(&sent)),
            tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, far)
        );
        let (server, client) = (server.unwrap(), client.unwrap());
        (WriteDeadline::new(Plaintext { io: server, ciphertext }, sent, WRITE_STALL_TIMEOUT), client.into_inner().0)
    }

    /// Writes a 12 KiB answer through [`slow_pipe`] while its client takes 512 bytes every 6 s, `reads` times at
    /// most: how the write ended, how long after the start, and when the client last took something.
    async fn answer_a_slow_client(reads: usize) -> (std::io::Result<()>, Duration, Duration) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut io, mut raw) = slow_pipe().await;
        let writer = tokio::spawn(async move {
            let answer = vec![b'x'; 12 * 1024];
            let r = io.write_all(&answer).await;
            let r = match r {
                Ok(()) => io.flush().await,
                e => e,
            };
            (r, tokio::time::Instant::now())
        });
        let start = tokio::time::Instant::now();
        let mut last_read = start;
        let mut buf = [0u8; 512];
        for _ in 0..reads {
            tokio::time::sleep(Duration::from_secs(6)).await;
            if writer.is_finished() {
                break;
            }
            if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(10), raw.read(&mut buf)).await {
                if n > 0 {
                    last_read = tokio::time::Instant::now();
                }
            }
        }
        let (r, at) = tokio::time::timeout(Duration::from_secs(300), writer).await.unwrap().unwrap();
        (r, at - start, last_read - start)
    }

    /// A slow client that takes some of the answer every 6 s (under the 10 s write-stall time) is not cut: it was at
    /// 10 s, since tokio-rustls's write returns pending after moving part of its buffer to the socket, so
    /// [`WriteDeadline`] never saw the progress and its timer ran from the first stall.
    #[tokio::test(start_paused = true)]
    async fn a_client_taking_some_of_the_answer_every_6_s_is_not_cut_by_the_stall_time() {
        let (r, at, _) = answer_a_slow_client(50).await;
        assert!(r.is_ok(), "cut after {at:?}, the client taking some every 6 s: {r:?}");
    }

    /// The same client once it stops taking the answer is cut the write-stall time after its last read.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_taking_the_answer_is_cut_the_stall_time_after() {
        let (r, at, last_read) = answer_a_slow_client(3).await;
        assert!(r.as_ref().is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut), "{r:?}");
        assert!(last_read >= Duration::from_secs(12), "the client read at {last_read:?}");
        let after = at - last_read;
        assert!(
            after >= WRITE_STALL_TIMEOUT && after < WRITE_STALL_TIMEOUT + Duration::from_secs(1),
            "cut {after:?} after its last read"
        );
    }

    #[test]
    fn a_tally_says_its_count_at_most_once_a_period() {
        let tally = Tally { count: AtomicU64::new(0), since_s: AtomicU64::new(0) };
        let at = |s: u64| UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(tally.note(at(1_000)), Some(1), "the first one after a quiet period is said at once");
        assert_eq!((tally.note(at(1_001)), tally.note(at(1_059))), (None, None));
        assert_eq!(tally.note(at(1_060)), Some(3), "the period's count, this one included");
        assert_eq!(tally.note(at(1_061)), None);
    }
}
