//! Alert-to-broker latency: from the last byte of an alert written to the webhook to the first byte of the
//! broker request read by a local mock broker over TLS, p50 and p99, at 50 and 500 alerts/s, with the default
//! durable commit (`synchronous=FULL`).
//!
//! `cargo bench -p strategy-webhook-server --bench latency` (the server binary in release). The sender keeps
//! a few TLS connections to the webhook open and writes each alert at its slot; the mock broker answers like an
//! Alpaca-like broker on a kept-alive TLS connection. Both ends take their timestamps from the same clock (this
//! process), and each alert trades its own symbol so the broker request is matched to its alert exactly.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOKEN: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// Connections the sender keeps open to the webhook.
const SENDERS: usize = 16;

/// When each broker request's first byte arrived, by symbol.
type Arrivals = Arc<Mutex<HashMap<String, Instant>>>;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
    rt.block_on(run());
}

async fn run() {
    let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "latency-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos()
    ));
    let (strategies, data) = (root.join("strategies"), root.join("data"));
    std::fs::create_dir_all(&strategies).expect("a bench directory");

    // The mock broker, over TLS with its own certificate, which the server is told to trust.
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("a certificate");
    let cert_file = root.join("broker.pem");
    std::fs::write(&cert_file, cert.cert.pem()).expect("the certificate written");
    let arrivals: Arrivals = Arc::default();
    let broker = broker(&cert.cert.pem(), &cert.key_pair.serialize_pem(), Arc::clone(&arrivals)).await;

    let demo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../strategies/demo.json")).expect("the demo");
    let mut snapshot: Value = serde_json::from_slice(&demo).expect("the demo is JSON");
    snapshot["id"] = json!("latency");
    snapshot["token_hash"] = json!(TOKEN);
    snapshot["allowed_instruments"] = json!(["*"]);
    snapshot["bots"] =
        json!([{ "id": "b", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_quantity": "1" } }]);
    std::fs::write(strategies.join("latency.json"), snapshot.to_string()).expect("the snapshot written");
    let bots = root.join("bots.json");
    let conf = json!({ "b": { "delivery": "http", "base_url": format!("https://localhost:{broker}") } });
    std::fs::write(&bots, conf.to_string()).expect("the bots written");

    let mut server = start(&strategies, &data, &bots, &cert_file, &root);
    let webhook = webhook_address(&root, &mut server);
    let tls = client_tls(&data.join("cert.pem"));

    println!("alert-to-broker latency (last alert byte written -> first broker request byte read), synchronous=FULL");
    send(&webhook, &tls, &arrivals, 0, 100, 100).await; // warm-up: connections, caches
    for (rate, count) in [(50u32, 500usize), (500, 3000)] {
        let base = 1_000_000 * rate as usize;
        let lat = send(&webhook, &tls, &arrivals, base, count, rate).await;
        report(rate, &lat, count);
    }
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&root);
}

/// A symbol of letters only for alert `k` (every alert trades its own, so the broker request names it).
fn symbol(k: usize) -> String {
    let mut s = String::from("Q");
    let mut n = k;
    for _ in 0..6 {
        s.push(char::from(b'A' + (n % 26) as u8));
        n /= 26;
    }
    s
}

/// Sends `count` alerts at `rate` per second and returns each one's latency to the broker (in ms), in order.
async fn send(
    webhook: &str,
    tls: &tokio_rustls::TlsConnector,
    arrivals: &Arrivals,
    base: usize,
    count: usize,
    rate: u32,
) -> Vec<Option<f64>> {
    let period = Duration::from_secs(1) / rate;
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let sent: Arc<Mutex<HashMap<usize, Instant>>> = Arc::default();
    let mut tasks = Vec::new();
    for j in 0..SENDERS {
        let tcp = TcpStream::connect(webhook).await.expect("the webhook listens");
        tcp.set_nodelay(true).expect("nodelay");
        let mut conn = tls.connect(ServerName::try_from("localhost").expect("a name"), tcp).await.expect("TLS");
        let sent = Arc::clone(&sent);
        tasks.push(tokio::spawn(async move {
            for k in (j..count).step_by(SENDERS) {
                tokio::time::sleep_until(start + period * k as u32).await;
                let body =
                    json!({ "ticker": symbol(base + k), "action": "buy", "message_id": format!("m-{}", base + k) })
                        .to_string();
                let req = format!(
                    "POST /webhooks/{TOKEN} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                );
                conn.write_all(req.as_bytes()).await.expect("the alert written");
                conn.flush().await.expect("the alert flushed");
                sent.lock().expect("sent").insert(k, Instant::now());
                let (head, answer) = read_message(&mut conn, &mut Vec::new()).await.expect("an answer");
                assert!(head.starts_with("HTTP/1.1 200") && answer.contains("processed"), "{head} {answer}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("a sender");
    }
    // The last orders may still be on their way.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = sent.lock().expect("sent");
    let arrived = arrivals.lock().expect("arrivals");
    (0..count)
        .map(|k| {
            let (s, a) = (sent.get(&k)?, arrived.get(&symbol(base + k))?);
            Some(a.saturating_duration_since(*s).as_secs_f64() * 1000.0)
        })
        .collect()
}

fn report(rate: u32, lat: &[Option<f64>], count: usize) {
    let mut got: Vec<f64> = lat.iter().flatten().copied().collect();
    got.sort_by(f64::total_cmp);
    let at = |q: f64| got[((got.len() as f64 * q).ceil() as usize).saturating_sub(1).min(got.len() - 1)];
    println!(
        "{rate:>4} alerts/s, {count} alerts ({} reached the broker): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        got.len(),
        at(0.50),
        at(0.99),
        got.last().copied().unwrap_or(f64::NAN)
    );
}

/// Reads one HTTP/1.1 message (head and a `content-length` body) and returns them; `buf` keeps what follows.
async fn read_message<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>) -> Option<(String, String)> {
    read_message_timed(io, buf, &mut None).await
}

/// [`read_message`], noting in `first` when the message's first byte was read (if it was not buffered yet).
async fn read_message_timed<S: AsyncRead + Unpin>(
    io: &mut S,
    buf: &mut Vec<u8>,
    first: &mut Option<Instant>,
) -> Option<(String, String)> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let len = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                buf.drain(..end + 4 + len);
                return Some((head, body));
            }
        }
        let n = io.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        if buf.is_empty() && first.is_none() {
            *first = Some(Instant::now());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The mock broker: TLS on 127.0.0.1, an Alpaca-like answer to every order, the arrival of each request's
/// first byte noted by symbol. Returns its port.
async fn broker(cert_pem: &str, key_pem: &str, arrivals: Arrivals) -> u16 {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(cert_pem.as_bytes()).collect::<Result<_, _>>().expect("the certificate");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("the key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server configuration");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let port = listener.local_addr().expect("an address").port();
    tokio::spawn(async move {
        let mut next_id = 0u64;
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            let _ = tcp.set_nodelay(true);
            let (acceptor, arrivals) = (acceptor.clone(), Arc::clone(&arrivals));
            next_id += 1_000_000;
            let base = next_id;
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                serve(&mut tls, &arrivals, base).await;
            });
        }
    });
    port
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(io: &mut S, arrivals: &Arrivals, mut id: u64) {
    let mut buf = Vec::new();
    loop {
        let mut first = None;
        let Some((_head, body)) = read_message_timed(io, &mut buf, &mut first).await else { return };
        // A request that was already buffered whole with the previous one arrived with it.
        let at = first.unwrap_or_else(Instant::now);
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let symbol = v["symbol"].as_str().unwrap_or_default().to_owned();
        let coid = v["client_order_id"].as_str().unwrap_or_default().to_owned();
        arrivals.lock().expect("arrivals").insert(symbol, at);
        id += 1;
        let answer = json!({ "id": format!("ord-{id}"), "client_order_id": coid, "status": "accepted" }).to_string();
        let res = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if io.write_all(res.as_bytes()).await.is_err() || io.flush().await.is_err() {
            return;
        }
    }
}

fn start(strategies: &Path, data: &Path, bots: &Path, broker_cert: &Path, root: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_strategy-webhook-server"))
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--rate-limit", "1000000"])
        .arg("--strategies")
        .arg(strategies)
        .arg("--data-dir")
        .arg(data)
        .arg("--bots")
        .arg(bots)
        .arg("--port-file")
        .arg(root.join("ports.json"))
        .env("SSL_CERT_FILE", broker_cert)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join("stderr.txt")).expect("a log file"))
        .spawn()
        .expect("the server starts")
}

fn webhook_address(root: &Path, server: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(root.join("ports.json")) {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                return v["webhook"].as_str().expect("a webhook address").to_owned();
            }
        }
        if let Ok(Some(status)) = server.try_wait() {
            panic!("the server exited with {status}: {:?}", std::fs::read_to_string(root.join("stderr.txt")));
        }
        assert!(Instant::now() < deadline, "the server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn client_tls(server_cert: &Path) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(server_cert).expect("the server's certificate") {
        roots.add(c.expect("a certificate")).expect("a root");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}
