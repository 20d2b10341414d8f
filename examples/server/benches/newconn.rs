//! New-connection alerts per second: how webhook senders connect, one fresh TLS connection per alert.
//!
//! `benches/newconn.sh` runs it against the server and against nginx on the same run; by hand:
//!
//! ```text
//! cargo bench -p strategy-webhook-server --bench newconn -- \
//!     --addr 127.0.0.1:8443 --path /webhooks/TOKEN --ca data/cert.pem --workers 50 --seconds 10 --resume on
//! ```
//!
//! Each of `--workers` tasks, for `--seconds`, opens a TCP connection, completes a TLS 1.3 handshake (verifying
//! the certificate for `localhost` against `--ca`), posts one distinct alert with `Connection: close`, reads the
//! whole answer, sends close_notify and closes. With `--resume on` each worker is a sender of its own, with its
//! own session store, so that every connection after its first offers a ticket; `--resume off` makes every
//! handshake a full one. Prints one line: alerts per second, how many handshakes were resumed, the errors.

use rustls::client::Resumption;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// What one run is asked to do.
struct Options {
    addr: SocketAddr,
    path: String,
    ca: PathBuf,
    workers: usize,
    seconds: f64,
    resume: bool,
    threads: usize,
    label: String,
}

/// What one worker counted.
#[derive(Default)]
struct Tally {
    /// Alerts answered 200.
    ok: u64,
    /// Alerts answered with another status.
    non_200: u64,
    /// Connections that failed (connect, handshake, write or read).
    errors: u64,
    /// Handshakes that resumed a session.
    resumed: u64,
    /// The first error seen, to show.
    first_error: Option<String>,
}

fn main() {
    let opts = match options(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            // `cargo bench` without arguments runs every bench: this one needs a target, which
            // benches/newconn.sh sets up (the server and nginx on the same run).
            println!("newconn: no --addr given; run benches/newconn.sh");
            return;
        }
        Err(e) => {
            eprintln!("newconn: {e}");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(opts.threads)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = rt.block_on(run(&opts)) {
        eprintln!("newconn: {e}");
        std::process::exit(1);
    }
}

/// Reads `--name value` pairs; `None` when no target was given.
fn options(args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
    let mut o = Options {
        addr: "127.0.0.1:0".parse().map_err(|e| format!("{e}"))?,
        path: "/".into(),
        ca: PathBuf::new(),
        workers: 50,
        seconds: 10.0,
        resume: true,
        threads: 2,
        label: "target".into(),
    };
    let mut have_addr = false;
    let mut args = args.peekable();
    while let Some(a) = args.next() {
        // `cargo bench` passes `--bench` to every bench binary.
        if a == "--bench" {
            continue;
        }
        let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{a} {v}: {e}");
        match a.as_str() {
            "--addr" => {
                o.addr = v.parse().map_err(|e| bad(&e))?;
                have_addr = true;
            }
            "--path" => o.path = v,
            "--ca" => o.ca = PathBuf::from(v),
            "--workers" => o.workers = v.parse().map_err(|e| bad(&e))?,
            "--seconds" => o.seconds = v.parse().map_err(|e| bad(&e))?,
            "--threads" => o.threads = v.parse().map_err(|e| bad(&e))?,
            "--label" => o.label = v,
            "--resume" => {
                o.resume = match v.as_str() {
                    "on" => true,
                    "off" => false,
                    _ => return Err(format!("--resume {v}: on or off")),
                }
            }
            _ => return Err(format!("unknown option {a}")),
        }
    }
    if o.workers == 0 || o.threads == 0 || !o.seconds.is_finite() || o.seconds <= 0.0 {
        return Err("--workers, --threads and --seconds must be positive".into());
    }
    Ok(have_addr.then_some(o))
}

async fn run(o: &Options) -> Result<(), String> {
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&o.ca).map_err(|e| format!("{}: {e}", o.ca.display()))?;
    for cert in certs {
        roots.add(cert.map_err(|e| format!("{}: {e}", o.ca.display()))?).map_err(|e| format!("{e}"))?;
    }
    let roots = Arc::new(roots);
    let config = |resume: bool| -> Result<Arc<rustls::ClientConfig>, String> {
        let mut c = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("{e}"))?
            .with_root_certificates(Arc::clone(&roots))
            .with_no_client_auth();
        c.alpn_protocols = vec![b"http/1.1".to_vec()];
        // A sender of its own per worker: a few tickets are plenty for one server name.
        c.resumption = if resume { Resumption::in_memory_sessions(16) } else { Resumption::disabled() };
        Ok(Arc::new(c))
    };
    // Distinct alerts across runs too: the server would answer a repeated one as a duplicate, more cheaply.
    let run_id = format!(
        "{}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0),
        if o.resume { "r" } else { "f" }
    );
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(o.seconds);
    let mut tasks = Vec::with_capacity(o.workers);
    for w in 0..o.workers {
        let connector = TlsConnector::from(config(o.resume)?);
        let (addr, path, prefix) = (o.addr, o.path.clone(), format!("nc-{run_id}-{w}"));
        tasks.push(tokio::spawn(async move { worker(connector, addr, path, prefix, until).await }));
    }
    let mut total = Tally::default();
    for t in tasks {
        let t = t.await.map_err(|e| format!("a worker stopped: {e}"))?;
        total.ok += t.ok;
        total.non_200 += t.non_200;
        total.errors += t.errors;
        total.resumed += t.resumed;
        if total.first_error.is_none() {
            total.first_error = t.first_error;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let done = total.ok + total.non_200;
    let handshakes = done.max(1);
    println!(
        "{} resume={}: {:.0} alerts/s ({} answered in {:.1} s, {} non-200, {} errors, {:.1} % of handshakes resumed){}",
        o.label,
        if o.resume { "on" } else { "off" },
        done as f64 / secs,
        done,
        secs,
        total.non_200,
        total.errors,
        100.0 * total.resumed as f64 / handshakes as f64,
        total.first_error.map(|e| format!("; first error: {e}")).unwrap_or_default(),
    );
    Ok(())
}

/// Opens one connection per alert until `until`.
async fn worker(connector: TlsConnector, addr: SocketAddr, path: String, prefix: String, until: Instant) -> Tally {
    let mut t = Tally::default();
    let name = ServerName::try_from("localhost").expect("a server name");
    let mut buf = Vec::with_capacity(1024);
    let mut n: u64 = 0;
    while Instant::now() < until {
        n += 1;
        match one(&connector, addr, &path, &name, &format!("{prefix}-{n}"), &mut buf).await {
            Ok((status, resumed)) => {
                if status == 200 {
                    t.ok += 1;
                } else {
                    t.non_200 += 1;
                }
                t.resumed += u64::from(resumed);
            }
            Err(e) => {
                t.errors += 1;
                t.first_error.get_or_insert(e);
                // A refused connection comes back at once: do not spin on it.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    t
}

/// One alert on a fresh connection: its answer's status and whether the handshake resumed.
async fn one(
    connector: &TlsConnector,
    addr: SocketAddr,
    path: &str,
    name: &ServerName<'static>,
    message_id: &str,
    buf: &mut Vec<u8>,
) -> Result<(u16, bool), String> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("nodelay: {e}"))?;
    let mut tls = connector.connect(name.clone(), tcp).await.map_err(|e| format!("handshake: {e}"))?;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let body = format!(r#"{{"ticker":"AAPL","action":"buy","metadata":{{"message_id":"{message_id}"}}}}"#);
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.map_err(|e| format!("write: {e}"))?;
    buf.clear();
    let status = loop {
        if let Some((status, complete)) = answer(buf) {
            if complete {
                break status;
            }
        }
        let mut chunk = [0u8; 4096];
        let got = tls.read(&mut chunk).await.map_err(|e| format!("read: {e}"))?;
        if got == 0 {
            return Err("the connection closed before the whole answer".into());
        }
        buf.extend_from_slice(&chunk[..got]);
    };
    // As a well-behaved sender does: close_notify, then close.
    let _ = tls.shutdown().await;
    Ok((status, resumed))
}

/// The status of an answer, and whether all of it (head and `Content-Length` body) is in `buf`.
fn answer(buf: &[u8]) -> Option<(u16, bool)> {
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..end]).ok()?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    Some((status, buf.len() >= end + length))
}
