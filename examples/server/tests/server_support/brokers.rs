//! Mock brokers on 127.0.0.1 (plain HTTP), one flavour per real broker, imitating its write *and* read
//! endpoints and its authentication: they keep orders and positions (a market order fills at once into a
//! position, a limit order rests until the test calls [`Mock::fill`], a position can be closed by hand with
//! [`Mock::close_by_hand`]), answer in the broker's shapes (built from the sourced fixtures in
//! `tests/fixtures/brokers/<broker>/`, with the fields that matter replaced), check credentials (static keys,
//! OAuth2 access tokens that expire, an ES256 JWT per request), and follow a script of faults on order writes.

#![allow(dead_code)]

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use ring::signature::{
    EcdsaKeyPair, KeyPair as _, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::str::FromStr as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use strategy_webhook::decimal::Decimal;
use tokio::net::TcpListener;

/// Which broker the mock imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Alpaca,
    Tradier,
    Schwab,
    Tastytrade,
    Coinbase,
}

impl Kind {
    /// The broker's name in a strategy snapshot (`broker`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Alpaca => "alpaca",
            Kind::Tradier => "tradier",
            Kind::Schwab => "schwab",
            Kind::Tastytrade => "tastytrade",
            Kind::Coinbase => "coinbase",
        }
    }

    /// An account id of the form the broker uses (the mock takes any).
    pub fn account(self) -> &'static str {
        match self {
            Kind::Alpaca | Kind::Coinbase => "ACC1",
            Kind::Tradier => "VA12345678",
            Kind::Schwab => "8F3A2C1D9E7B6A5F4E3D2C1B0A9F8E7D6C5B4A39281706F5E4D3C2B1A0918273",
            Kind::Tastytrade => "5WT00001",
        }
    }
}

/// A misbehaviour for the next order write.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Take the order, then close the connection without answering.
    Lose,
    /// Take the order and answer after this long.
    Delay(Duration),
    /// Close the connection without taking the order.
    Cut,
    /// Close the connection without answering, and take the order only this long after: a broker still
    /// working on a request its client gave up on (or a proxy cut), its order listed later.
    TakeLate(Duration),
    /// Take a limit order, refuse it after (its status rejected), and close the connection without answering.
    LoseRejected,
    /// Take the order twice (two orders, one answer).
    Duplicate,
    /// Refuse the write with 401 without taking it, as a broker that ended the session early: every access
    /// token given so far stops working.
    Unauthorized,
    /// Refuse the write with this status and message (in the broker's error shape) without taking it, as a
    /// broker whose own checks come before its duplicate check. An Alpaca replace or cancel takes it too.
    Refuse(u16, &'static str),
    /// No misbehaviour: lets a script of faults leave most writes alone.
    Pass,
}

/// One order at the mock.
#[derive(Debug, Clone)]
pub struct MockOrder {
    pub id: String,
    pub client_id: String,
    /// Equity symbol, or the product (`BTC-USD`).
    pub symbol: String,
    pub buy: bool,
    pub qty: Decimal,
    pub limit: Option<Decimal>,
    /// `working`, `filled` or `cancelled`.
    pub status: &'static str,
    /// When the mock took it (Unix milliseconds): the entry time its order lists show.
    pub entered_ms: i64,
    /// Filled so far while it works (a filled order shows its whole quantity).
    pub filled: Decimal,
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub target: String,
    pub authorization: String,
    pub status: u16,
}

pub struct State {
    kind: Kind,
    pub orders: Vec<MockOrder>,
    /// Signed quantity by equity symbol, or by coin for crypto.
    pub positions: BTreeMap<String, Decimal>,
    pub seen: Vec<Seen>,
    faults: VecDeque<Fault>,
    next_id: u64,
    // Auth.
    pub static_headers: Vec<(String, String)>,
    /// Live access tokens and when each expires.
    access: HashMap<String, Instant>,
    pub refresh_token: String,
    pub refresh_dead: bool,
    /// Refresh tokens of other logins taken beside `refresh_token` (each server its own grant), until retired.
    pub other_refresh_tokens: Vec<String>,
    /// The next this many token requests are answered by an edge server's HTML 403 page, not the token
    /// service (Schwab's CDN refusing for a while).
    pub token_edge_403: u32,
    /// Token requests are answered this late (a slow token endpoint).
    pub token_delay: Option<Duration>,
    /// Hands back the same refresh token with every grant instead of a new one.
    pub keep_refresh: bool,
    pub access_lifetime: Duration,
    pub token_requests: u32,
    pub client_id: String,
    pub client_secret: String,
    jwt_key: Option<(String, Vec<u8>)>,
    nonces: HashSet<String>,
    pub jwt_checked: u32,
    /// Reads answer 503 (the broker's read side is down).
    pub reads_down: bool,
    /// An order filled right after the next positions read is answered: a fill between a sync's reads.
    pub fill_after_positions: Option<String>,
    /// A new order shows in the working-order list only this long after it was taken (reads of it by id show it
    /// at once): a broker whose list lags its writes.
    pub list_late: Duration,
    /// The next read of the working-order list is answered this long after it came (its answer made at once):
    /// a read still on its way while its server is paused.
    pub slow_list: Option<Duration>,
    /// A market order fills this long after it was taken (at once when zero): an exchange's fill that lags the
    /// order's acceptance.
    pub market_late: Duration,
}

/// A running mock broker.
#[derive(Clone)]
pub struct Mock {
    pub addr: SocketAddr,
    pub kind: Kind,
    pub state: Arc<Mutex<State>>,
}

fn fixture(broker: &str, file: &str) -> Value {
    let path = format!("{}/../../tests/fixtures/brokers/{broker}/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn dec(s: &str) -> Decimal {
    Decimal::from_str(s.trim()).unwrap_or_default()
}

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// `ms` as `2026-03-03T14:30:00.123`, UTC, without an offset (each broker's shape adds its own).
fn utc(ms: i64) -> String {
    let (secs, milli) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    // Days to a civil date (H. Hinnant's algorithm).
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let s = secs.rem_euclid(86_400);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}", s / 3600, s / 60 % 60, s % 60)
}

fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

impl Mock {
    /// This mock's entry of a bots file: its base URL, its broker's auth (secrets written as files under `root`, the
    /// headers it requires set on it), reads every `sync_interval_secs`. `key_pem`: Coinbase's signing key.
    pub fn bot_conf(&self, root: &std::path::Path, sync_interval_secs: u64, key_pem: Option<&str>) -> Value {
        let secret = |file: &str, value: &str| {
            let p = root.join(file);
            std::fs::write(&p, format!("{value}\n")).unwrap();
            p
        };
        let base = self.base_url();
        let every = sync_interval_secs;
        match self.kind {
            Kind::Alpaca => {
                self.require_headers(&[("APCA-API-KEY-ID", "key-id"), ("APCA-API-SECRET-KEY", "s3cret")]);
                json!({ "delivery": "http", "base_url": base, "sync_interval_secs": every,
                        "headers": { "APCA-API-KEY-ID": { "value": "key-id" },
                                     "APCA-API-SECRET-KEY": { "file": secret("alpaca-secret", "s3cret") } } })
            }
            Kind::Tradier => {
                self.require_headers(&[("Authorization", "Bearer tr-token")]);
                json!({ "delivery": "http", "base_url": base, "sync_interval_secs": every,
                        "auth": { "header": "Authorization", "prefix": "Bearer ",
                                  "file": secret("tradier-token", "tr-token") } })
            }
            Kind::Schwab => json!({ "delivery": "http", "base_url": base, "sync_interval_secs": every,
                "auth": { "type": "oauth2", "token_url": format!("{base}/v1/oauth/token"),
                          "client_id": { "value": "app-key" },
                          "client_secret": { "file": secret("app-secret", "app-secret") },
                          "refresh_token": { "file": secret("refresh", "refresh-0") } } }),
            Kind::Tastytrade => {
                self.require_headers(&[("User-Agent", "strategy-webhook/0.1")]);
                json!({ "delivery": "http", "base_url": base, "sync_interval_secs": every,
                        "headers": { "User-Agent": { "value": "strategy-webhook/0.1" } },
                        "auth": { "type": "oauth2", "token_url": format!("{base}/oauth/token"), "client_auth": "body",
                                  "body": "json", "client_secret": { "file": secret("app-secret", "app-secret") },
                                  "refresh_token": { "file": secret("refresh", "refresh-0") } } })
            }
            Kind::Coinbase => json!({ "delivery": "http", "base_url": base, "sync_interval_secs": every,
                "auth": { "type": "jwt_es256", "key_name": { "value": "organizations/o1/apiKeys/k1" },
                          "private_key": { "file": secret("ec.pem", key_pem.expect("Coinbase's signing key")) } } }),
        }
    }

    /// Starts a mock of `kind` on 127.0.0.1:0 in the current runtime.
    pub async fn start(kind: Kind) -> Mock {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State {
            kind,
            orders: Vec::new(),
            positions: BTreeMap::new(),
            seen: Vec::new(),
            faults: VecDeque::new(),
            next_id: 7000,
            static_headers: Vec::new(),
            access: HashMap::new(),
            refresh_token: "refresh-0".into(),
            refresh_dead: false,
            other_refresh_tokens: Vec::new(),
            token_edge_403: 0,
            token_delay: None,
            keep_refresh: false,
            access_lifetime: Duration::from_secs(1800),
            token_requests: 0,
            client_id: "app-key".into(),
            client_secret: "app-secret".into(),
            jwt_key: None,
            nonces: HashSet::new(),
            jwt_checked: 0,
            reads_down: false,
            fill_after_positions: None,
            list_late: Duration::ZERO,
            slow_list: None,
            market_late: Duration::ZERO,
        }));
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(Arc::clone(&st), addr, req));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        Mock { addr, kind, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        f(&mut self.state.lock().unwrap())
    }

    /// Requires these headers (exact values) on every request.
    pub fn require_headers(&self, h: &[(&str, &str)]) {
        self.with(|s| s.static_headers = h.iter().map(|(a, b)| (a.to_lowercase(), (*b).to_owned())).collect());
    }

    /// The public key (uncompressed point) the JWTs of `key_name` must verify with.
    pub fn require_jwt(&self, key_name: &str, public_key: Vec<u8>) {
        self.with(|s| s.jwt_key = Some((key_name.to_owned(), public_key)));
    }

    pub fn faults(&self, f: impl IntoIterator<Item = Fault>) {
        self.with(|s| s.faults.extend(f));
    }

    /// Drops the faults not yet played: every write from now on is taken.
    pub fn clear_faults(&self) {
        self.with(|s| s.faults.clear());
    }

    /// Fills a resting order now.
    /// Fills `qty` of a working order, which keeps working for the rest.
    pub fn fill_part(&self, order_id: &str, qty: &str) {
        self.with(|s| {
            let o = s.orders.iter_mut().find(|o| o.id == order_id).expect("no such order");
            o.filled = dec(qty);
        });
    }

    pub fn fill(&self, order_id: &str) {
        self.with(|s| {
            let i = s.orders.iter().position(|o| o.id == order_id).expect("no such order");
            fill(s, i);
        });
    }

    /// Places `n` resting limit buys of `symbol` at the broker by hand (not through the server).
    pub fn rest_by_hand(&self, symbol: &str, n: usize) {
        self.with(|s| {
            for _ in 0..n {
                s.next_id += 1;
                let id = s.next_id.to_string();
                s.orders.push(MockOrder {
                    id: id.clone(),
                    client_id: format!("by-hand-{id}"),
                    symbol: symbol.to_owned(),
                    buy: true,
                    qty: dec("1"),
                    limit: Some(dec("100")),
                    status: "working",
                    entered_ms: unix_ms(),
                    filled: Decimal::ZERO,
                });
            }
        });
    }

    /// Replaces a working order at the broker without any request of ours (the trader edits it in the broker's
    /// own screens): the old order reads back `replaced`, and its replacement (id `{old}-new`) works on.
    pub fn replace_by_hand(&self, id: &str) -> String {
        self.with(|s| {
            let i = s.orders.iter().position(|o| o.id == id).expect("no such order");
            s.orders[i].status = "replaced";
            let mut new = s.orders[i].clone();
            new.id = format!("{id}-new");
            new.client_id = format!("by-hand-{id}");
            new.status = "working";
            new.entered_ms = unix_ms();
            s.orders.push(new.clone());
            new.id
        })
    }

    /// Closes a position at the broker without any order of ours.
    pub fn close_by_hand(&self, instrument: &str) {
        self.with(|s| s.positions.remove(instrument));
    }

    /// Makes every access token given so far expire now.
    pub fn expire_access_tokens(&self) {
        self.with(|s| s.access.clear());
    }

    /// The refresh token stops working (its 7 days are over).
    /// The next `n` token requests are answered 403 with an edge server's HTML page ("Access Denied").
    pub fn token_edge_403(&self, n: u32) {
        self.with(|s| s.token_edge_403 = n);
    }

    /// Token requests are answered `d` late.
    pub fn slow_tokens(&self, d: Duration) {
        self.with(|s| s.token_delay = Some(d));
    }

    pub fn expire_refresh_token(&self) {
        self.with(|s| s.refresh_dead = true);
    }

    /// Takes `token` too, as the refresh token of another login (another server's own grant).
    pub fn accept_refresh_token(&self, token: &str) {
        self.with(|s| s.other_refresh_tokens.push(token.to_owned()));
    }

    /// Stops taking `token`, taken by [`Mock::accept_refresh_token`] (that login ended: a re-login elsewhere).
    pub fn retire_refresh_token(&self, token: &str) {
        self.with(|s| s.other_refresh_tokens.retain(|t| t != token));
    }

    /// Hands back the refresh token it was given instead of rotating it (Schwab's refresh token lasts its
    /// seven days): a server killed between a grant and writing a rotated token down would otherwise hold a
    /// dead one.
    pub fn keep_refresh_token(&self) {
        self.with(|s| s.keep_refresh = true);
    }

    /// Makes every read answer 503 (or answer again).
    /// Fills order `id` right after the next positions read is answered (before the orders are read, when a
    /// sync reads positions first).
    pub fn fill_after_next_positions_read(&self, id: &str) {
        self.with(|s| s.fill_after_positions = Some(id.to_owned()));
    }

    pub fn reads_down(&self, down: bool) {
        self.with(|s| s.reads_down = down);
    }

    /// The next read of the working-order list is answered `d` after it came, as the list stood when it came.
    pub fn slow_list(&self, d: Duration) {
        self.with(|s| s.slow_list = Some(d));
    }

    /// New orders show in the working-order list only `d` after they were taken.
    pub fn list_late(&self, d: Duration) {
        self.with(|s| s.list_late = d);
    }

    /// Market orders fill `d` after they were taken instead of at once.
    pub fn market_fills_late(&self, d: Duration) {
        self.with(|s| s.market_late = d);
    }

    pub fn set_access_lifetime(&self, d: Duration) {
        self.with(|s| s.access_lifetime = d);
    }

    pub fn orders(&self) -> Vec<MockOrder> {
        self.with(|s| s.orders.clone())
    }

    pub fn positions(&self) -> BTreeMap<String, Decimal> {
        self.with(|s| s.positions.clone())
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.with(|s| s.seen.clone())
    }

    pub fn token_requests(&self) -> u32 {
        self.with(|s| s.token_requests)
    }

    pub fn jwt_checked(&self) -> u32 {
        self.with(|s| s.jwt_checked)
    }
}

fn fill(s: &mut State, i: usize) {
    let o = &mut s.orders[i];
    if o.status != "working" {
        return;
    }
    o.status = "filled";
    let key = if s.kind == Kind::Coinbase {
        o.symbol.split('-').next().unwrap_or_default().to_owned()
    } else {
        o.symbol.clone()
    };
    let delta = if o.buy { o.qty } else { -o.qty };
    let p = s.positions.entry(key.clone()).or_default();
    *p += delta;
    if p.is_zero() {
        s.positions.remove(&key);
    }
}

enum Reply {
    Answer(u16, Vec<(String, String)>, String),
    Drop,
    /// Dropped now; the order write (path, body) is taken after the delay.
    Later(Duration, String, String),
}

async fn handle(
    st: Arc<Mutex<State>>,
    addr: SocketAddr,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, String> {
    let method = req.method().as_str().to_owned();
    let target = req.uri().path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default();
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    let header = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let (reply, delay) = {
        let mut s = st.lock().unwrap();
        let (reply, delay) = route(&mut s, addr, &method, &target, &header, &body);
        let status = match &reply {
            Reply::Answer(c, _, _) => *c,
            Reply::Drop | Reply::Later(..) => 0,
        };
        s.seen.push(Seen {
            method: method.clone(),
            target: target.clone(),
            authorization: header("authorization"),
            status,
        });
        (reply, delay)
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    match reply {
        Reply::Drop => Err("dropped on purpose".into()),
        Reply::Later(d, path, body) => {
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = place(&mut st.lock().unwrap(), addr, &path, &body);
            });
            Err("dropped on purpose, the order to be taken later".into())
        }
        Reply::Answer(code, extra, text) => {
            let mut res = Response::new(Full::new(Bytes::from(text)));
            *res.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
            res.headers_mut().insert("content-type", "application/json".parse().unwrap());
            for (k, v) in extra {
                res.headers_mut().insert(hyper::header::HeaderName::from_str(&k).unwrap(), v.parse().unwrap());
            }
            Ok(res)
        }
    }
}

fn ok(v: Value) -> Reply {
    Reply::Answer(200, Vec::new(), v.to_string())
}

/// A `Fault::Refuse` queued first, taken by an Alpaca replace or cancel: the change refused, the order left as it
/// was (a price the venue will not take, an order it will not cancel now).
fn refused_change(s: &mut State) -> Option<Reply> {
    let Some(Fault::Refuse(code, message)) = s.faults.front().cloned() else { return None };
    s.faults.pop_front();
    Some(status(code, json!({"code": u32::from(code) * 100_000 + 10_000, "message": message})))
}

fn status(code: u16, v: Value) -> Reply {
    Reply::Answer(code, Vec::new(), v.to_string())
}

fn route(
    s: &mut State,
    addr: SocketAddr,
    method: &str,
    target: &str,
    header: &dyn Fn(&str) -> String,
    body: &str,
) -> (Reply, Option<Duration>) {
    // Market orders whose lag is over have filled by the time anything is asked.
    if !s.market_late.is_zero() {
        let due = unix_ms() - i64::try_from(s.market_late.as_millis()).unwrap_or(i64::MAX);
        for i in 0..s.orders.len() {
            if s.orders[i].limit.is_none() && s.orders[i].status == "working" && s.orders[i].entered_ms <= due {
                fill(s, i);
            }
        }
    }
    let path = target.split('?').next().unwrap_or_default();
    // Token endpoints.
    if method == "POST" && (path == "/v1/oauth/token" || path == "/oauth/token") {
        // Tastytrade: "all requests, including the OAuth calls, must send a User-Agent header" (a bare 401).
        if s.kind == Kind::Tastytrade {
            if let Some((name, value)) = s.static_headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("user-agent")) {
                if header(name) != *value {
                    s.token_requests += 1;
                    return (Reply::Answer(401, Vec::new(), "<html>401 Authorization Required</html>".into()), None);
                }
            }
        }
        let delay = s.token_delay;
        return (token(s, header, body), delay);
    }
    if let Some(why) = authenticate(s, addr, method, path, header) {
        let body = match s.kind {
            Kind::Coinbase => Reply::Answer(401, Vec::new(), "Unauthorized".into()),
            Kind::Tastytrade => status(401, json!({"error": {"code": "invalid_token", "message": why}})),
            Kind::Alpaca => status(401, json!({"code": 40110000, "message": "request is not authorized"})),
            _ => status(401, json!({"fault": {"faultstring": why}})),
        };
        return (body, None);
    }
    if method == "POST" {
        let fault = s.faults.pop_front();
        if matches!(fault, Some(Fault::Unauthorized)) {
            s.access.clear();
            return (
                status(401, json!({"error": {"code": "invalid_token", "message": "the session has ended"}})),
                None,
            );
        }
        if matches!(fault, Some(Fault::Cut)) {
            return (Reply::Drop, None);
        }
        if let Some(Fault::TakeLate(d)) = fault {
            return (Reply::Later(d, path.to_owned(), body.to_owned()), None);
        }
        if let Some(Fault::Refuse(code, message)) = fault {
            return (status(code, json!({"code": 40310000, "message": message})), None);
        }
        let reply = place(s, addr, path, body);
        if matches!(fault, Some(Fault::LoseRejected)) {
            if let Some(o) = s.orders.last_mut() {
                o.status = "rejected";
            }
            return (Reply::Drop, None);
        }
        if matches!(fault, Some(Fault::Duplicate)) {
            // A second order from the same request, whatever the broker's own duplicate check would say.
            if let Some(mut twin) = s.orders.last().cloned() {
                s.next_id += 1;
                twin.id = format!("{}-twin", twin.id);
                twin.status = "working";
                s.orders.push(twin.clone());
                if twin.limit.is_none() {
                    let i = s.orders.len() - 1;
                    fill(s, i);
                }
            }
        }
        return match fault {
            Some(Fault::Lose) => (Reply::Drop, None),
            Some(Fault::Delay(d)) => (reply, Some(d)),
            _ => (reply, None),
        };
    }
    // Alpaca's replace: the order is replaced by a new one (id `{old}-new`, its price and size from the body), which
    // the answer is; 422 once the order is final.
    if method == "PATCH" && s.kind == Kind::Alpaca {
        let Some(i) = path.strip_prefix("/v2/orders/").and_then(|id| s.orders.iter().position(|o| o.id == id)) else {
            return (status(404, json!({"code": 40410000, "message": "order not found"})), None);
        };
        if s.orders[i].status != "working" {
            return (status(422, json!({"code": 42210000, "message": "order is not replaceable"})), None);
        }
        if let Some(refused) = refused_change(s) {
            return (refused, None);
        }
        // A `Fault::Delay` queued applies to the replace's answer too (the order replaced at once).
        let delay = match s.faults.front() {
            Some(Fault::Delay(d)) => {
                let d = *d;
                s.faults.pop_front();
                Some(d)
            }
            _ => None,
        };
        let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        s.orders[i].status = "replaced";
        let mut new = s.orders[i].clone();
        new.id = format!("{}-new", s.orders[i].id);
        if let Some(p) = Some(str_of(&v["limit_price"])).filter(|p| !p.is_empty()) {
            new.limit = Some(dec(&p));
        }
        if let Some(q) = Some(str_of(&v["qty"])).filter(|q| !q.is_empty()) {
            new.qty = dec(&q);
        }
        new.client_id = str_of(&v["client_order_id"]);
        // A new order: what the old one filled stays with it.
        new.filled = Decimal::ZERO;
        new.status = "working";
        new.entered_ms = unix_ms();
        s.orders.push(new.clone());
        return (ok(alpaca_order(&new)), delay);
    }
    // Alpaca's cancel: 204 while the order works, 422 once it is final.
    if method == "DELETE" && s.kind == Kind::Alpaca {
        let Some(i) = path.strip_prefix("/v2/orders/").and_then(|id| s.orders.iter().position(|o| o.id == id)) else {
            return (status(404, json!({"code": 40410000, "message": "order not found"})), None);
        };
        if s.orders[i].status != "working" {
            return (status(422, json!({"code": 42210000, "message": "order is not cancelable"})), None);
        }
        if let Some(refused) = refused_change(s) {
            return (refused, None);
        }
        s.orders[i].status = "cancelled";
        return (Reply::Answer(204, Vec::new(), String::new()), None);
    }
    if method == "GET" && s.reads_down {
        return (status(503, json!({"message": "service unavailable"})), None);
    }
    if method == "GET" {
        let reply = read(s, path, target);
        if path.ends_with("/orders") {
            if let Some(d) = s.slow_list.take() {
                return (reply, Some(d));
            }
        }
        if path.ends_with("/positions") {
            if let Some(id) = s.fill_after_positions.take() {
                if let Some(i) = s.orders.iter().position(|o| o.id == id) {
                    fill(s, i);
                }
            }
        }
        return (reply, None);
    }
    (status(405, json!({"message": "not imitated"})), None)
}

fn token(s: &mut State, header: &dyn Fn(&str) -> String, body: &str) -> Reply {
    s.token_requests += 1;
    if s.token_edge_403 > 0 {
        s.token_edge_403 -= 1;
        let page = "<HTML><HEAD>\n<TITLE>Access Denied</TITLE>\n</HEAD><BODY>\n<H1>Access Denied</H1>\n \nYou don't \
                    have permission to access \"http&#58;&#47;&#47;api&#46;schwabapi&#46;com&#47;v1&#47;oauth&#47;\
                    token\" on this server.<P>\nReference&#32;&#35;18&#46;1c2d3e4f</BODY>\n</HTML>\n";
        return Reply::Answer(403, vec![("content-type".into(), "text/html".into())], page.to_string());
    }
    let (grant, refresh, secret_ok) = if s.kind == Kind::Schwab {
        let form: HashMap<String, String> = body
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.replace("%40", "@").replace("%2D", "-")))
            .collect();
        let basic = format!("Basic {}", STANDARD.encode(format!("{}:{}", s.client_id, s.client_secret)));
        (form.get("grant_type").cloned(), form.get("refresh_token").cloned(), header("authorization") == basic)
    } else {
        let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        (
            v["grant_type"].as_str().map(str::to_owned),
            v["refresh_token"].as_str().map(str::to_owned),
            v["client_secret"] == json!(s.client_secret),
        )
    };
    if !secret_ok {
        return status(401, json!({"error": "invalid_client"}));
    }
    let other = refresh.as_ref().is_some_and(|r| s.other_refresh_tokens.contains(r));
    if grant.as_deref() != Some("refresh_token")
        || !(refresh.as_deref() == Some(s.refresh_token.as_str()) || other)
        || (s.refresh_dead && !other)
    {
        return Reply::Answer(400, Vec::new(), fixture("schwab", "oauth_refresh_expired.json").to_string());
    }
    s.next_id += 1;
    let access = format!("access-{}", s.next_id);
    s.access.insert(access.clone(), Instant::now() + s.access_lifetime);
    let mut answer = json!({"access_token": access, "token_type": "Bearer", "expires_in": s.access_lifetime.as_secs()});
    if s.kind == Kind::Schwab {
        // Schwab hands back a refresh token with every grant; this mock rotates it unless told otherwise.
        if other {
            // Another login's token is handed back as it came.
            answer["refresh_token"] = json!(refresh);
        } else {
            if !s.keep_refresh {
                s.refresh_token = format!("refresh-{}", s.next_id);
            }
            answer["refresh_token"] = json!(s.refresh_token);
        }
        answer["scope"] = json!("api");
    }
    ok(answer)
}

/// Why the request is not authenticated, or `None`.
fn authenticate(
    s: &mut State,
    addr: SocketAddr,
    method: &str,
    path: &str,
    header: &dyn Fn(&str) -> String,
) -> Option<String> {
    for (name, value) in &s.static_headers {
        if header(name) != *value {
            return Some(format!("header {name} missing or wrong"));
        }
    }
    match s.kind {
        Kind::Schwab | Kind::Tastytrade => {
            let auth = header("authorization");
            let token = auth.strip_prefix("Bearer ").unwrap_or_default();
            match s.access.get(token) {
                Some(until) if *until > Instant::now() => None,
                Some(_) => Some("access token expired".into()),
                None => Some("unknown access token".into()),
            }
        }
        Kind::Coinbase => {
            let (kid, public) = s.jwt_key.clone()?;
            let auth = header("authorization");
            let jwt = auth.strip_prefix("Bearer ").unwrap_or_default();
            let parts: Vec<&str> = jwt.split('.').collect();
            if parts.len() != 3 {
                return Some("not a JWT".into());
            }
            let decode =
                |p: &str| URL_SAFE_NO_PAD.decode(p).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok());
            let (Some(h), Some(c)) = (decode(parts[0]), decode(parts[1])) else { return Some("bad JWT parts".into()) };
            let sig = URL_SAFE_NO_PAD.decode(parts[2]).unwrap_or_default();
            let signed = format!("{}.{}", parts[0], parts[1]);
            if UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &public).verify(signed.as_bytes(), &sig).is_err() {
                return Some("bad signature".into());
            }
            let now = unix_s();
            let (nbf, exp) = (c["nbf"].as_u64().unwrap_or(0), c["exp"].as_u64().unwrap_or(0));
            let uri = format!("{method} {addr}{path}");
            let nonce = h["nonce"].as_str().unwrap_or_default().to_owned();
            let checks = [
                (h["alg"] == "ES256" && h["kid"] == json!(kid) && h["typ"] == "JWT", "header"),
                (c["sub"] == json!(kid) && c["iss"] == "cdp", "sub/iss"),
                (nbf <= now + 5 && exp > now && exp - nbf <= 120, "nbf/exp"),
                (c["uri"] == json!(uri), "uri"),
                (!nonce.is_empty() && s.nonces.insert(nonce), "nonce"),
            ];
            if let Some((_, what)) = checks.iter().find(|(good, _)| !good) {
                return Some(format!("JWT {what} refused"));
            }
            s.jwt_checked += 1;
            None
        }
        _ => None,
    }
}

/// Takes an order written the broker's way.
fn place(s: &mut State, addr: SocketAddr, path: &str, body: &str) -> Reply {
    s.next_id += 1;
    let n = s.next_id;
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let (symbol, buy, qty, limit, client_id) = match s.kind {
        Kind::Alpaca => {
            let coid = v["client_order_id"].as_str().unwrap_or_default().to_owned();
            if s.orders.iter().any(|o| o.client_id == coid) {
                return status(422, json!({"code": 40010001, "message": "client_order_id must be unique"}));
            }
            (
                str_of(&v["symbol"]),
                v["side"] == "buy",
                dec(&str_of(&v["qty"])),
                // Alpaca takes the price as a JSON number or a string.
                Some(str_of(&v["limit_price"])).filter(|p| !p.is_empty()).map(|p| dec(&p)),
                coid,
            )
        }
        Kind::Tradier => {
            let f: HashMap<String, String> = body
                .split('&')
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let side = f.get("side").cloned().unwrap_or_default();
            let limit = f.get("price").map(|p| dec(p));
            // Tradier's order validators answer 200 with the refusal in `errors`.
            let gtc = f.get("duration").is_some_and(|d| d == "gtc");
            for (refused, code) in [
                (gtc && f.get("type").is_some_and(|t| t == "market"), "MarketOrderIsGtc"),
                (gtc && side == "sell_short", "ShortOrderIsGtc"),
            ] {
                if refused {
                    return ok(json!({"errors": {"error": [code]}}));
                }
            }
            (
                f.get("symbol").cloned().unwrap_or_default(),
                side == "buy" || side == "buy_to_cover",
                dec(f.get("quantity").map_or("0", String::as_str)),
                limit,
                f.get("tag").cloned().unwrap_or_default(),
            )
        }
        Kind::Schwab => {
            let leg = &v["orderLegCollection"][0];
            let limit = v.get("price").map(|p| dec(&str_of(p)));
            let instruction = leg["instruction"].as_str().unwrap_or_default();
            (
                str_of(&leg["instrument"]["symbol"]),
                instruction.starts_with("BUY"),
                dec(&str_of(&leg["quantity"])),
                limit,
                String::new(),
            )
        }
        Kind::Tastytrade => {
            let leg = &v["legs"][0];
            let limit = v.get("price").map(|p| dec(&str_of(p)));
            (
                str_of(&leg["symbol"]),
                leg["action"].as_str().unwrap_or_default().starts_with("Buy"),
                dec(&str_of(&leg["quantity"])),
                limit,
                str_of(&v["external-identifier"]),
            )
        }
        Kind::Coinbase => {
            let conf = &v["order_configuration"];
            let (size, limit) = if let Some(m) = conf.get("market_market_ioc") {
                (str_of(&m["base_size"]), None)
            } else {
                let l = &conf["limit_limit_gtc"];
                (str_of(&l["base_size"]), Some(dec(&str_of(&l["limit_price"]))))
            };
            (str_of(&v["product_id"]), v["side"] == "BUY", dec(&size), limit, str_of(&v["client_order_id"]))
        }
    };
    if symbol.is_empty() || qty.is_zero() {
        return status(400, json!({"message": format!("the mock cannot read this order: {body}")}));
    }
    let id = match s.kind {
        Kind::Alpaca | Kind::Coinbase => format!("{n:08x}-0000-4000-8000-{n:012x}"),
        _ => n.to_string(),
    };
    s.orders.push(MockOrder {
        id: id.clone(),
        client_id: client_id.clone(),
        symbol: symbol.clone(),
        buy,
        qty,
        limit,
        status: "working",
        entered_ms: unix_ms(),
        filled: Decimal::ZERO,
    });
    if limit.is_none() && s.market_late.is_zero() {
        let i = s.orders.len() - 1;
        fill(s, i);
    }
    let o = s.orders.last().cloned().unwrap();
    match s.kind {
        Kind::Alpaca => ok(alpaca_order(&o)),
        Kind::Tradier => ok(json!({"order": {"id": n, "status": "ok", "partner_id": "mock"}})),
        Kind::Schwab => {
            Reply::Answer(201, vec![("location".into(), format!("http://{addr}{path}/{id}"))], String::new())
        }
        Kind::Tastytrade => Reply::Answer(
            201,
            Vec::new(),
            json!({"data": {"order": tasty_order(&o), "warnings": []}, "context": path}).to_string(),
        ),
        Kind::Coinbase => ok(json!({
            "success": true, "failure_reason": "UNKNOWN_FAILURE_REASON", "order_id": id,
            "success_response": {"order_id": id, "product_id": o.symbol, "side": if buy { "BUY" } else { "SELL" },
                                 "client_order_id": client_id},
        })),
    }
}

/// A decimal as a JSON number with its exact digits.
fn num(d: Decimal) -> Value {
    serde_json::from_str(&d.to_string()).unwrap_or(Value::Null)
}

fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// The account's positions and working orders, the broker's way.
fn read(s: &State, path: &str, target: &str) -> Reply {
    let listed_from = unix_ms() - i64::try_from(s.list_late.as_millis()).unwrap_or(i64::MAX);
    let working: Vec<&MockOrder> =
        s.orders.iter().filter(|o| o.status == "working" && o.entered_ms <= listed_from).collect();
    let positions: Vec<(&String, &Decimal)> = s.positions.iter().collect();
    match s.kind {
        Kind::Alpaca if path == "/v2/positions" => ok(Value::Array(
            positions
                .iter()
                .map(|(sym, q)| {
                    let mut p = fixture("alpaca", "positions.json")[0].clone();
                    p["symbol"] = json!(sym);
                    p["qty"] = json!(q.to_string());
                    p["qty_available"] = json!(q.to_string());
                    p["side"] = json!(if q.is_sign_negative() { "short" } else { "long" });
                    p
                })
                .collect(),
        )),
        Kind::Alpaca if path == "/v2/orders" => ok(Value::Array(working.iter().map(|o| alpaca_order(o)).collect())),
        Kind::Alpaca if path.starts_with("/v2/orders/") => {
            let id = &path["/v2/orders/".len()..];
            match s.orders.iter().find(|o| o.id == id) {
                Some(o) => ok(alpaca_order(o)),
                None => status(404, json!({"code": 40410000, "message": "order not found"})),
            }
        }
        Kind::Alpaca if path == "/v2/orders:by_client_order_id" => {
            let wanted = target.split_once("client_order_id=").map(|(_, v)| v).unwrap_or_default();
            match s.orders.iter().find(|o| o.client_id == wanted) {
                Some(o) => ok(alpaca_order(o)),
                None => status(404, json!({"code": 40410000, "message": "order not found"})),
            }
        }
        Kind::Tradier if path.ends_with("/positions") => {
            let items: Vec<Value> = positions
                .iter()
                .enumerate()
                .map(|(i, (sym, q))| {
                    json!({"cost_basis": 0, "date_acquired": "2026-03-03T14:30:02.518Z", "id": i + 1,
                                            "quantity": q.to_string().parse::<i64>().unwrap_or(0), "symbol": sym})
                })
                .collect();
            ok(json!({"positions": tradier_list("position", items)}))
        }
        Kind::Tradier if path.ends_with("/orders") => {
            // The lookup asks for every order of the day (`filter=all`); the sync for the working ones.
            // Both are paged as Tradier pages them (`limit`, default 25; `page`, default 1), oldest first.
            let param = |k: &str| {
                target.split(['?', '&']).find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse::<usize>().ok())
            };
            let all: Vec<&MockOrder> =
                if target.contains("filter=all") { s.orders.iter().collect() } else { working.clone() };
            let (limit, page) = (param("limit").unwrap_or(25).max(1), param("page").unwrap_or(1).max(1));
            let listed: Vec<&MockOrder> = all.into_iter().skip(limit.saturating_mul(page - 1)).take(limit).collect();
            let items: Vec<Value> = listed
                .iter()
                .map(|o| {
                    let mut v = fixture("tradier", "orders_open_one.json")["orders"]["order"].clone();
                    v["id"] = json!(o.id.parse::<u64>().unwrap_or(0));
                    v["symbol"] = json!(o.symbol);
                    v["side"] = json!(if o.buy { "buy" } else { "sell" });
                    v["quantity"] = json!(o.qty.to_string().parse::<i64>().unwrap_or(0));
                    v["remaining_quantity"] = v["quantity"].clone();
                    v["type"] = json!(if o.limit.is_some() { "limit" } else { "market" });
                    v["price"] = o.limit.map_or(Value::Null, num);
                    v["tag"] = json!(o.client_id);
                    v["status"] = json!(match o.status {
                        "working" => "open",
                        "filled" => "filled",
                        "rejected" => "rejected",
                        _ => "canceled",
                    });
                    v
                })
                .collect();
            ok(json!({"orders": tradier_list("order", items)}))
        }
        Kind::Schwab if path.ends_with("/orders") => ok(Value::Array(
            s.orders
                .iter()
                .map(|o| {
                    let mut v = fixture("schwab", "orders_open.json")[0].clone();
                    v["orderId"] = json!(o.id.parse::<u64>().unwrap_or(0));
                    v["enteredTime"] = json!(format!("{}+0000", &utc(o.entered_ms)[..19]));
                    v["status"] = json!(match o.status {
                        "working" => "WORKING",
                        "filled" => "FILLED",
                        "rejected" => "REJECTED",
                        _ => "CANCELED",
                    });
                    v["orderType"] = json!(if o.limit.is_some() { "LIMIT" } else { "MARKET" });
                    v["price"] = o.limit.map_or(Value::Null, num);
                    let q = num(o.qty);
                    v["quantity"] = q.clone();
                    v["filledQuantity"] = if o.status == "filled" { q.clone() } else { json!(0) };
                    v["remainingQuantity"] = if o.status == "filled" { json!(0) } else { q.clone() };
                    let leg = &mut v["orderLegCollection"][0];
                    leg["instrument"]["symbol"] = json!(o.symbol);
                    leg["instruction"] = json!(if o.buy { "BUY" } else { "SELL" });
                    leg["positionEffect"] = json!(if o.buy { "OPENING" } else { "CLOSING" });
                    leg["quantity"] = q;
                    v
                })
                .collect(),
        )),
        Kind::Schwab if target.contains("fields=positions") => {
            let items: Vec<Value> = positions
                .iter()
                .map(|(sym, q)| {
                    let n = num(q.abs());
                    let long = !q.is_sign_negative();
                    json!({"shortQuantity": if long { json!(0) } else { n.clone() },
                           "longQuantity": if long { n } else { json!(0) }, "averagePrice": 100, "instrument": {"assetType": "EQUITY", "symbol": sym, "cusip": "0"},
                           "marketValue": 0})
                })
                .collect();
            let mut v = fixture("schwab", "positions.json");
            v["securitiesAccount"]["positions"] = Value::Array(items);
            ok(v)
        }
        Kind::Tastytrade if path.ends_with("/positions") => {
            let items: Vec<Value> = positions
                .iter()
                .map(|(sym, q)| {
                    let mut p = fixture("tastytrade", "positions.json")["data"]["items"][0].clone();
                    p["symbol"] = json!(sym);
                    p["underlying-symbol"] = json!(sym);
                    p["quantity"] = json!(q.abs().to_string());
                    p["quantity-direction"] = json!(if q.is_sign_negative() { "Short" } else { "Long" });
                    p
                })
                .collect();
            ok(json!({"data": {"items": items}, "context": path}))
        }
        // The lookup reads the account's order history (`/orders?start-at=…`), the sync the live ones.
        Kind::Tastytrade if path.ends_with("/orders/live") || path.ends_with("/orders") => {
            ok(json!({"data": {"items": s.orders.iter().map(tasty_order).collect::<Vec<_>>()}, "context": path}))
        }
        Kind::Coinbase if path == "/api/v3/brokerage/accounts" => {
            let mut items: Vec<Value> = positions
                .iter()
                .filter(|(_, q)| !q.is_sign_negative())
                .map(|(coin, q)| {
                    let mut a = fixture("coinbase", "positions.json")["accounts"][0].clone();
                    a["currency"] = json!(coin);
                    a["name"] = json!(format!("{coin} Wallet"));
                    a["available_balance"] = json!({"value": q.to_string(), "currency": coin});
                    a["hold"] = json!({"value": "0", "currency": coin});
                    a
                })
                .collect();
            let mut cash = fixture("coinbase", "positions.json")["accounts"][3].clone();
            cash["available_balance"]["value"] = json!("100000");
            items.push(cash);
            ok(json!({"accounts": items, "has_next": false, "cursor": "", "size": items.len()}))
        }
        // The sync asks for the open orders (`order_status=OPEN`), the lookup for every order in a window.
        Kind::Coinbase if path == "/api/v3/brokerage/orders/historical/batch" => ok(json!({
            "orders": s.orders.iter().filter(|o| o.status == "working" || !target.contains("order_status=OPEN")).map(|o| {
                let mut v = fixture("coinbase", "orders_open.json")["orders"][0].clone();
                v["order_id"] = json!(o.id);
                v["product_id"] = json!(o.symbol);
                v["side"] = json!(if o.buy { "BUY" } else { "SELL" });
                v["client_order_id"] = json!(o.client_id);
                v["status"] = json!(match o.status {
                    "working" => "OPEN",
                    "filled" => "FILLED",
                    "rejected" => "FAILED",
                    _ => "CANCELLED",
                });
                v["created_time"] = json!(format!("{}Z", utc(o.entered_ms)));
                v["order_configuration"] = match o.limit {
                    Some(p) => json!({"limit_limit_gtc": {"base_size": o.qty.to_string(),
                                                          "limit_price": p.to_string(), "post_only": false}}),
                    None => json!({"market_market_ioc": {"base_size": o.qty.to_string()}}),
                };
                v
            }).collect::<Vec<_>>(),
            "has_next": false, "cursor": "",
        })),
        // A product's increments: BTC-USD and DOGE-USD (a coarse base increment) as the fixtures give them.
        Kind::Coinbase if path.starts_with("/api/v3/brokerage/products/") => {
            match path.trim_start_matches("/api/v3/brokerage/products/") {
                "BTC-USD" => ok(fixture("coinbase", "product.json")),
                "DOGE-USD" => ok(fixture("coinbase", "product_doge.json")),
                other => status(404, json!({"error": "NOT_FOUND", "message": format!("no product {other}")})),
            }
        }
        _ => status(404, json!({"message": format!("the mock does not imitate GET {target}")})),
    }
}

/// Tradier's list: none as the string "null", one as an object, several as an array.
fn tradier_list(name: &str, mut items: Vec<Value>) -> Value {
    match items.len() {
        0 => json!("null"),
        1 => json!({ name: items.remove(0) }),
        _ => json!({ name: items }),
    }
}

fn alpaca_order(o: &MockOrder) -> Value {
    let mut v = fixture("alpaca", "orders_open.json")[0].clone();
    v["id"] = json!(o.id);
    v["client_order_id"] = json!(o.client_id);
    v["symbol"] = json!(o.symbol);
    v["qty"] = json!(o.qty.to_string());
    v["side"] = json!(if o.buy { "buy" } else { "sell" });
    v["position_intent"] = Value::Null;
    let kind = if o.limit.is_some() { "limit" } else { "market" };
    v["type"] = json!(kind);
    v["order_type"] = json!(kind);
    v["limit_price"] = json!(o.limit.map(|p| p.to_string()));
    v["status"] = json!(match o.status {
        "working" => "new",
        "filled" => "filled",
        "rejected" => "rejected",
        "replaced" => "replaced",
        _ => "canceled",
    });
    if o.status == "replaced" {
        v["replaced_by"] = json!(format!("{}-new", o.id));
    }
    v["filled_qty"] = json!(if o.status == "filled" { o.qty.to_string() } else { o.filled.to_string() });
    v
}

fn tasty_order(o: &MockOrder) -> Value {
    let mut v = fixture("tastytrade", "orders_open.json")["data"]["items"][0].clone();
    v["id"] = json!(o.id.parse::<u64>().unwrap_or(0));
    v["status"] = json!(match o.status {
        "working" => "Live",
        "filled" => "Filled",
        "rejected" => "Rejected",
        _ => "Cancelled",
    });
    v["order-type"] = json!(if o.limit.is_some() { "Limit" } else { "Market" });
    v["price"] = json!(o.limit.map(|p| p.to_string()));
    if o.limit.is_none() {
        v.as_object_mut().unwrap().remove("price-effect");
    } else {
        v["price-effect"] = json!(if o.buy { "Debit" } else { "Credit" });
    }
    v["size"] = json!(o.qty.to_string().parse::<u64>().unwrap_or(0));
    v["underlying-symbol"] = json!(o.symbol);
    v["external-identifier"] = json!(o.client_id);
    v["received-at"] = json!(format!("{}+00:00", utc(o.entered_ms)));
    let q = o.qty.to_string().parse::<u64>().unwrap_or(0);
    // What is left unfilled: all of it while working, and still on a cancelled, expired or rejected order (the
    // real API keeps it there: a recorded Cancelled order with no fills reads `remaining-quantity: 1`); none once
    // filled.
    let remaining = if o.status == "filled" { 0 } else { q };
    v["legs"] = json!([{"instrument-type": "Equity", "symbol": o.symbol, "quantity": q, "remaining-quantity": remaining,
                        "action": if o.buy { "Buy to Open" } else { "Sell to Close" }, "fills": []}]);
    v
}

/// A fresh P-256 key for a test: its PEM (PKCS#8) and its public key.
pub fn test_ec_key() -> (String, Vec<u8>) {
    let rng = ring::rand::SystemRandom::new();
    let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, doc.as_ref(), &rng).unwrap();
    (pem::encode(&pem::Pem::new("PRIVATE KEY", doc.as_ref().to_vec())), pair.public_key().as_ref().to_vec())
}

/// A Tradier mock that turns every write away (429, a thousand times) while it takes reads, and a bots file in a
/// directory of its own delivering bot `tradier` to it (its bearer token read from a file); with strategy `name`'s
/// snapshot (token of `token_char`s), whose one bot trades one share there. An entry stored for it is retried until
/// the test lets the writes through (`faults` again).
pub async fn tradier_turning_writes_away(
    name: &str,
    token_char: char,
) -> (Mock, super::Dirs, std::path::PathBuf, serde_json::Value) {
    let tradier = Mock::start(Kind::Tradier).await;
    tradier.require_headers(&[("Authorization", "Bearer tr-token")]);
    tradier.faults((0..1000).map(|_| Fault::Refuse(429, "too many requests")));
    let root = super::Dirs::new(&format!("{name}shared"));
    let bots = root.root.join("bots.json");
    let tradier_token = root.root.join("tradier-token");
    std::fs::write(&tradier_token, "tr-token\n").unwrap();
    std::fs::write(
        &bots,
        serde_json::json!({ "tradier": { "delivery": "http", "base_url": tradier.base_url(), "timeout_ms": 1000,
                             "auth": { "header": "Authorization", "prefix": "Bearer ",
                                       "file": tradier_token.to_str().unwrap() } } })
        .to_string(),
    )
    .unwrap();
    let mut s = super::snapshot(name, &super::token(token_char));
    s["bots"] = serde_json::json!([
        { "id": "tradier", "broker": "tradier", "account_id": "VA12345678", "sizing": { "fixed_quantity": "1" } },
    ]);
    (tradier, root, bots, s)
}
