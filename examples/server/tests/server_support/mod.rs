//! Runs the reference server (the `strategy-webhook-server` binary) as a child process on ephemeral loopback ports, and talks to
//! it as a sender would: HTTPS with the server's own certificate as the only trusted root.
#![allow(dead_code)]

pub mod brokers;
pub mod mock_broker;
pub mod postgres;
pub mod receiver;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Tokens of the test strategies (64 lowercase hex characters each).
pub fn token(c: char) -> String {
    c.to_string().repeat(64)
}

/// The server binary: cargo builds it for the package's integration tests and names it here.
pub fn server_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strategy-webhook-server"))
}

/// A fresh directory pair (strategies, data) for one test.
#[derive(Clone)]
pub struct Dirs {
    pub root: PathBuf,
    pub strategies: PathBuf,
    pub data: PathBuf,
}

impl Dirs {
    pub fn new(name: &str) -> Dirs {
        // A count as well as the time: two tests of one binary asking for the same name at once got the same
        // nanosecond on this machine's clock, and one directory between them (one renamed the other's files).
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let root =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{nanos}-{n}", std::process::id()));
        let strategies = root.join("strategies");
        let data = root.join("data");
        std::fs::create_dir_all(&strategies).unwrap();
        Dirs { root, strategies, data }
    }

    /// Writes a snapshot file into the strategies directory.
    pub fn write(&self, file: &str, snapshot: &Value) {
        let path = self.strategies.join(file);
        let tmp = self.strategies.join(format!(".{file}.tmp"));
        std::fs::write(&tmp, serde_json::to_vec_pretty(snapshot).unwrap()).unwrap();
        std::fs::rename(tmp, path).unwrap();
    }
}

/// The bundled demo snapshot with another id and token and no bots: such a strategy answers `processed` with
/// no orders whatever the broker formatters can do.
pub fn snapshot(id: &str, token: &str) -> Value {
    let demo = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../strategies/demo.json")).unwrap();
    let mut v: Value = serde_json::from_slice(&demo).unwrap();
    v["id"] = json!(id);
    v["name"] = json!(format!("test {id}"));
    v["token_hash"] = json!(token);
    v["bots"] = json!([]);
    v
}

/// A strategy whose every entry is a 500: its bot sizes by notional and has no price to divide by.
pub fn failing_snapshot(id: &str, token: &str) -> Value {
    let mut v = snapshot(id, token);
    v["allowed_instruments"] = json!(["*"]);
    v["bots"] =
        json!([{ "id": "alpaca-x", "broker": "alpaca", "account_id": "PA1", "sizing": { "fixed_notional": "1000" } }]);
    v
}

/// An answer: status, content type, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A running server.
pub struct Server {
    child: Option<Child>,
    pub webhook: SocketAddr,
    pub admin: SocketAddr,
    pub admin_token: String,
    pub data: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    tls: TlsConnector,
}

impl Server {
    /// Starts the server on 127.0.0.1:0 (both listeners) and waits until it listens.
    pub fn start(dirs: &Dirs, extra: &[&str]) -> Server {
        Server::start_limited(dirs, extra, None)
    }

    /// [`Server::start`] under resource limits: `(address space in bytes, open files)`, set in the child before
    /// it runs (what `prlimit` would do), soft and hard alike.
    pub fn start_limited(dirs: &Dirs, extra: &[&str], limits: Option<(u64, u64)>) -> Server {
        Server::start_with(dirs, extra, limits, &[])
    }

    /// [`Server::start`] with these environment variables set for the server.
    #[allow(dead_code)]
    pub fn start_env(dirs: &Dirs, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::start_with(dirs, extra, None, env)
    }

    fn start_with(dirs: &Dirs, extra: &[&str], limits: Option<(u64, u64)>, env: &[(&str, &str)]) -> Server {
        std::fs::create_dir_all(&dirs.data).unwrap();
        let port_file = dirs.root.join("ports.json");
        let _ = std::fs::remove_file(&port_file);
        let n = std::fs::read_dir(&dirs.root).unwrap().count();
        let stdout = dirs.root.join(format!("stdout-{n}.txt"));
        let stderr = dirs.root.join(format!("stderr-{n}.txt"));
        let mut command = Command::new(server_exe());
        if let Some((address_space, files)) = limits {
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe and allocates nothing.
            unsafe {
                command.pre_exec(move || {
                    for (resource, value) in [(libc::RLIMIT_AS, address_space), (libc::RLIMIT_NOFILE, files)] {
                        let l = libc::rlimit { rlim_cur: value as libc::rlim_t, rlim_max: value as libc::rlim_t };
                        if libc::setrlimit(resource, &l) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        // Files are looked at often, unless the test sets its own interval.
        if !extra.contains(&"--reload-interval-ms") {
            command.args(["--reload-interval-ms", "100"]);
        }
        let child = command
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .arg("--strategies")
            .arg(&dirs.strategies)
            .arg("--data-dir")
            .arg(&dirs.data)
            .arg("--port-file")
            .arg(&port_file)
            .args(extra)
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("the server starts");
        let mut server = Server {
            child: Some(child),
            webhook: "0.0.0.0:0".parse().unwrap(),
            admin: "0.0.0.0:0".parse().unwrap(),
            admin_token: String::new(),
            data: dirs.data.clone(),
            stdout,
            stderr,
            tls: TlsConnector::from(Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth(),
            )),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let ports: Value = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break serde_json::from_str(&text).unwrap();
            }
            if let Some(status) = server.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the server exited with {status}: {}", server.stderr_text());
            }
            assert!(Instant::now() < deadline, "the server did not start: {}", server.stderr_text());
            std::thread::sleep(Duration::from_millis(20));
        };
        server.webhook = ports["webhook"].as_str().unwrap().parse().unwrap();
        server.admin = ports["admin"].as_str().unwrap().parse().unwrap();
        server.admin_token = std::fs::read_to_string(dirs.data.join("admin-token")).unwrap().trim().to_owned();
        // Trust exactly the server's own certificate, as `curl --cacert` would.
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(dirs.data.join("cert.pem")).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        server.tls = TlsConnector::from(Arc::new(config));
        server
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The server's diagnostic output so far.
    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// A TLS connection to the webhook listener, verified against the server's certificate for `localhost`.
    pub async fn connect(&self) -> TlsStream<TcpStream> {
        let tcp = TcpStream::connect(self.webhook).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        self.tls.connect(ServerName::try_from("localhost").unwrap(), tcp).await.expect("TLS handshake")
    }

    /// A handle for sending to the webhook listener from other tasks.
    pub fn client(&self) -> Client {
        Client { webhook: self.webhook, tls: self.tls.clone() }
    }

    /// A TLS connection from a chosen loopback address (see [`Client::connect_from`]).
    pub async fn connect_from(&self, ip: &str) -> std::io::Result<TlsStream<TcpStream>> {
        self.client().connect_from(ip).await
    }

    /// A plain TCP connection from a chosen loopback address.
    pub async fn tcp_from(&self, ip: &str) -> std::io::Result<TcpStream> {
        self.client().tcp_from(ip).await
    }

    /// POSTs a JSON alert from a chosen loopback address (see [`Client::post_from`]).
    pub async fn post_from(&self, ip: &str, token: &str, body: &str, within: Duration) -> Result<Answer, String> {
        self.client().post_from(ip, token, body, within).await
    }

    /// The server's resident memory in bytes (`VmRSS`).
    pub fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// The banner the server printed on standard output, once it is complete.
    pub fn banner(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = std::fs::read_to_string(&self.stdout).unwrap_or_default();
            if text.contains("stop with Ctrl-C") || Instant::now() > deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One HTTPS request to the webhook listener on a fresh connection.
    pub async fn request(&self, method: Method, path: &str, content_type: Option<&str>, body: &[u8]) -> Answer {
        let io = TokioIo::new(self.connect().await);
        let (mut send, conn) = http1::handshake(io).await.unwrap();
        tokio::spawn(conn);
        send_on(&mut send, method, path, content_type, None, body).await
    }

    /// POSTs an alert to a webhook token.
    pub async fn post(&self, token: &str, content_type: Option<&str>, body: &str) -> Answer {
        self.request(Method::POST, &format!("/webhooks/{token}"), content_type, body.as_bytes()).await
    }

    /// POSTs a JSON alert on a fresh connection and hangs up `after` the request went out, whatever the
    /// server is doing (a sender that stops reading). `Ok` with the answer if it came first.
    pub async fn post_and_hang_up(&self, token: &str, body: &str, after: Duration) -> Result<Answer, String> {
        let tcp = TcpStream::connect(self.webhook).await.map_err(|e| e.to_string())?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
        let tls = tokio::time::timeout(Duration::from_secs(5), self.tls.connect(name, tcp))
            .await
            .map_err(|_| "TLS timed out".to_owned())?
            .map_err(|e| e.to_string())?;
        let (mut send, conn) = http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
        let conn = tokio::spawn(conn);
        let req = Request::builder()
            .method(Method::POST)
            .uri(format!("/webhooks/{token}"))
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
            .map_err(|e| e.to_string())?;
        let exchange = async {
            let res = send.send_request(req).await.map_err(|e| e.to_string())?;
            let status = res.status().as_u16();
            let headers = res.headers().clone();
            let body = res.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok(Answer {
                status,
                content_type: String::new(),
                headers,
                body: String::from_utf8_lossy(&body).into_owned(),
            })
        };
        let out = tokio::time::timeout(after, exchange).await.map_err(|_| "hung up".to_owned()).and_then(|r| r);
        conn.abort();
        out
    }

    /// POSTs a JSON alert on a fresh connection, reporting a connection failure or a timeout instead of
    /// panicking (for tests that kill the server while alerts are in flight).
    pub async fn try_post(&self, token: &str, body: &str, within: Duration) -> Result<Answer, String> {
        let attempt = async {
            let tcp = TcpStream::connect(self.webhook).await.map_err(|e| e.to_string())?;
            tcp.set_nodelay(true).map_err(|e| e.to_string())?;
            let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
            let tls = self.tls.connect(name, tcp).await.map_err(|e| e.to_string())?;
            post_on(tls, token, body).await
        };
        tokio::time::timeout(within, attempt).await.map_err(|_| "timed out".to_owned())?
    }

    /// POSTs a JSON alert.
    pub async fn post_json(&self, token: &str, body: &Value) -> Answer {
        self.post(token, Some("application/json"), &body.to_string()).await
    }

    /// One request to the admin listener, with the admin token unless `auth` is false.
    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: &str,
        auth: bool,
    ) -> Answer {
        let tcp = TcpStream::connect(self.admin).await.unwrap();
        let (mut send, conn) = http1::handshake(TokioIo::new(tcp)).await.unwrap();
        tokio::spawn(conn);
        let bearer = format!("Bearer {}", self.admin_token);
        send_on(&mut send, method, path, content_type, auth.then_some(bearer.as_str()), body.as_bytes()).await
    }

    /// `GET` on the admin API, as JSON.
    pub async fn admin_get(&self, path: &str) -> Value {
        let a = self.admin(Method::GET, path, None, "", true).await;
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        a.json()
    }

    /// A strategy's outbox rows (up to 1,000), through the admin API.
    pub async fn outbox_rows(&self, id: &str) -> Vec<Value> {
        self.admin_get(&format!("/api/strategies/{id}/outbox?limit=1000")).await["outbox"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// A strategy's outbox rows once every one is `done` or `failed` (30 s at most).
    pub async fn drained_outbox(&self, id: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let rows = self.outbox_rows(id).await;
            if rows.iter().all(|r| r["status"] == "done" || r["status"] == "failed") {
                return rows;
            }
            assert!(Instant::now() < deadline, "the outbox did not drain: {rows:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The newest log rows of a strategy.
    pub async fn logs(&self, id: &str) -> Vec<Value> {
        self.admin_get(&format!("/api/strategies/{id}/logs?limit=1000"))
            .await
            .get("logs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    }

    /// The log rows of a strategy once `ready` holds for them (rows are written after the answer).
    pub async fn logs_when(&self, id: &str, ready: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let rows = self.logs(id).await;
            if ready(&rows) {
                return rows;
            }
            assert!(Instant::now() < deadline, "{id}: rows never as expected: {rows:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `f` holds for the strategies list (reloads are asynchronous).
    pub async fn wait_for_strategies(&self, what: &str, f: impl Fn(&[Value]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let list = self.admin_get("/api/strategies").await;
            let items = list["strategies"].as_array().cloned().unwrap_or_default();
            if f(&items) {
                return;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}: {list}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let status = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status().unwrap();
        assert!(status.success());
    }

    /// The exit status, if the process has exited.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().unwrap())
    }

    /// Waits for the process to exit (after [`Server::terminate`]).
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return status;
            }
            assert!(Instant::now() < deadline, "the server did not stop in time");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: the process ends at once, as in a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn stop(mut self) -> String {
        self.terminate();
        let status = self.wait(Duration::from_secs(30));
        assert!(status.success(), "the server exited with {status}: {}", self.stderr_text());
        self.stderr_text()
    }
}

/// What a sender needs to reach the webhook listener: cheap to clone into many tasks.
#[derive(Clone)]
pub struct Client {
    pub webhook: SocketAddr,
    tls: TlsConnector,
}

impl Client {
    /// A TLS connection to the webhook listener from a chosen loopback address (`127.0.0.2`…), so that tests can
    /// play several senders against the per-address caps.
    pub async fn connect_from(&self, ip: &str) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = self.tcp_from(ip).await?;
        self.tls.connect(ServerName::try_from("localhost").unwrap(), tcp).await
    }

    /// A TLS connection from a chosen loopback address whose receive buffer is `bytes`: a client that reads
    /// slowly, or not at all, fills it at once.
    pub async fn connect_from_with_receive_buffer(
        &self,
        ip: &str,
        bytes: u32,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_recv_buffer_size(bytes)?;
        socket.bind(format!("{ip}:0").parse().unwrap())?;
        let tcp = socket.connect(self.webhook).await?;
        self.tls.connect(ServerName::try_from("localhost").unwrap(), tcp).await
    }

    /// A plain TCP connection to the webhook listener from a chosen loopback address.
    pub async fn tcp_from(&self, ip: &str) -> std::io::Result<TcpStream> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(format!("{ip}:0").parse().unwrap())?;
        let tcp = socket.connect(self.webhook).await?;
        tcp.set_nodelay(true)?;
        Ok(tcp)
    }

    /// POSTs a JSON alert from a chosen loopback address on a fresh connection, within `within`.
    pub async fn post_from(&self, ip: &str, token: &str, body: &str, within: Duration) -> Result<Answer, String> {
        let attempt = async {
            let tls = self.connect_from(ip).await.map_err(|e| e.to_string())?;
            post_on(tls, token, body).await
        };
        tokio::time::timeout(within, attempt).await.map_err(|_| "timed out".to_owned())?
    }
}

/// POSTs a JSON alert to the webhook on an open TLS connection and reads the whole answer.
async fn post_on(tls: TlsStream<TcpStream>, token: &str, body: &str) -> Result<Answer, String> {
    let (mut send, conn) = http1::handshake(TokioIo::new(tls)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("/webhooks/{token}"))
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::copy_from_slice(body.as_bytes())))
        .map_err(|e| e.to_string())?;
    let res = send.send_request(req).await.map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    Ok(Answer { status, content_type: String::new(), headers, body: String::from_utf8_lossy(&body).into_owned() })
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn send_on(
    send: &mut http1::SendRequest<Full<Bytes>>,
    method: Method,
    path: &str,
    content_type: Option<&str>,
    authorization: Option<&str>,
    body: &[u8],
) -> Answer {
    let mut req = Request::builder().method(method).uri(path).header("host", "localhost");
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    if let Some(a) = authorization {
        req = req.header("authorization", a);
    }
    let req = req.body(Full::new(Bytes::copy_from_slice(body))).unwrap();
    let res = send.send_request(req).await.expect("an answer");
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let content_type = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let body = res.into_body().collect().await.unwrap().to_bytes();
    Answer { status, content_type, headers, body: String::from_utf8_lossy(&body).into_owned() }
}

/// Reads a raw HTTP/1.1 answer's status line and body from a stream until the server closes it or `within`
/// passes. Returns `(status, text)`.
pub async fn read_raw_answer<S: AsyncReadExt + Unpin>(stream: &mut S, within: Duration) -> (u16, String) {
    let mut buf = Vec::new();
    let deadline = Instant::now() + within;
    loop {
        let mut chunk = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
        if let Some(text) = complete_answer(&buf) {
            return text;
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// A whole answer (head plus Content-Length body) once it is in `buf`.
fn complete_answer(buf: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let len: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().ok()))??;
    if body.len() < len {
        return None;
    }
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, text.into_owned()))
}

/// Writes all of `bytes` and flushes (TLS buffers).
pub async fn send_raw<S: AsyncWriteExt + Unpin>(stream: &mut S, bytes: &[u8]) {
    stream.write_all(bytes).await.unwrap();
    stream.flush().await.unwrap();
}

/// The server of a crash test: replaced by a new process after each kill, while senders keep posting to it.
pub type Swapped = std::sync::RwLock<Arc<Server>>;

/// How a sender that retries until it is answered heard about its alert in the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// 200 processed.
    Processed,
    /// 200 duplicate (its earlier answer was lost in a crash).
    Duplicate,
}

/// POSTs `body` until the server answers 200, as a sender with retries does: a 5xx or no answer at all (the
/// server is down or was killed mid-request) is tried again; any other answer fails the test, and so does no
/// answer by `started + give_up`.
pub async fn post_until_answered(
    server: &Swapped,
    token: &str,
    body: &str,
    started: Instant,
    give_up: Duration,
) -> Heard {
    post_until_answered_by(&[server], 0, token, body, started, give_up).await
}

/// [`post_until_answered`] to several servers behind a load balancer: the first try goes to `servers[first]`, and
/// each retry to the next one.
pub async fn post_until_answered_by(
    servers: &[&Swapped],
    first: usize,
    token: &str,
    body: &str,
    started: Instant,
    give_up: Duration,
) -> Heard {
    let mut attempt = first;
    loop {
        assert!(started.elapsed() < give_up, "{body} was never answered");
        let s = Arc::clone(&servers[attempt % servers.len()].read().unwrap());
        match s.try_post(token, body, Duration::from_secs(5)).await {
            Ok(a) if a.status == 200 && a.body.contains("processed") => return Heard::Processed,
            Ok(a) if a.status == 200 && a.body.contains("duplicate") => return Heard::Duplicate,
            Ok(a) if a.status >= 500 => {}
            Ok(a) => panic!("{body}: unexpected answer {} {}", a.status, a.body),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
        attempt += 1;
    }
}

/// Runs the server on `dirs` with `extra` arguments and environment, expecting it to refuse to start: asserts that it
/// exits with a failure, and returns what it wrote to standard error (the reason it gives).
pub fn start_refused(dirs: &Dirs, extra: &[&str], env: &[(&str, &str)]) -> String {
    let out = Command::new(server_exe())
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--strategies"])
        .arg(&dirs.strategies)
        .arg("--data-dir")
        .arg(&dirs.data)
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "the server started: {err}");
    err
}

/// Whether nothing holds the advisory lock on `path` (the server's data directory lock); taken and let go at once.
fn lock_is_free(path: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let Ok(file) = std::fs::OpenOptions::new().read(true).open(path) else { return true };
    // SAFETY: flock on a descriptor this function owns; it touches no memory.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    rc == 0
}

/// SIGKILLs the server and starts a new one on the same directories and arguments after `pause`.
pub async fn kill_and_restart(server: &Swapped, dirs: &Dirs, args: &[&str], pause: Duration) {
    let pid = server.read().unwrap().pid();
    Command::new("kill").args(["-KILL", &pid.to_string()]).status().unwrap();
    // The signal is delivered at once but the process ends a moment later, on a loaded machine later than a
    // short pause: a restart before it has (its data directory's lock still held) was refused. Dead is gone or
    // a zombie, whose descriptors (and lock) are released.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')))
    {
        assert!(Instant::now() < deadline, "the killed server {pid} did not end");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // A killed process's first thread shows as a zombie while its others are still ending, and the descriptors
    // they share (the data directory's lock among them) are released only with the last: a restart in between
    // was refused. So the lock itself is waited for.
    while !lock_is_free(&dirs.data.join("lock")) {
        assert!(Instant::now() < deadline, "the killed server {pid} still holds its data directory's lock");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(pause).await;
    let (d, args): (Dirs, Vec<String>) = (dirs.clone(), args.iter().map(|s| s.to_string()).collect());
    let restarted =
        tokio::task::spawn_blocking(move || Server::start(&d, &args.iter().map(String::as_str).collect::<Vec<_>>()))
            .await
            .unwrap();
    *server.write().unwrap() = Arc::new(restarted);
}
