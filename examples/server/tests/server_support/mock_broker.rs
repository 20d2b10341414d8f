//! A mock broker on 127.0.0.1 (plain HTTP) for the server's `http` bots. It records every request, behaves
//! like Alpaca (a repeated `client_order_id` is refused with 422 `client_order_id must be unique`, a replace
//! answers a new order id) and Tradier (`{"order":{"id":N}}`), and follows a script of misbehaviours:
//! slow answers, 5xx, connections dropped without an answer. Lookups of our orders (Alpaca's order by client
//! order id, Tradier's order list filtered by date) are answered and recorded; other reads (the state sync's)
//! are answered 404 and not recorded.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;

/// What the mock does with the next request.
#[derive(Debug, Clone)]
pub enum Behave {
    /// Answer like the broker.
    Normal,
    /// Handle it like the broker, but answer only after this long.
    Slow(Duration),
    /// Answer this status and body without taking the order.
    Status(u16, &'static str),
    /// Close the connection without answering (after reading the request).
    Drop,
    /// Take the order like the broker, then close the connection without answering: the answer is lost.
    TakeThenDrop,
    /// Hold the request this long without taking the order, then answer 503.
    Stall(Duration),
    /// A cancel the broker takes (its usual answer) while the order fills before the cancel reaches the market:
    /// the order reads back filled.
    CancelButFill,
    /// A cancel the broker takes (its usual answer) that never reaches the market: the order reads back open.
    CancelPending,
}

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    pub headers: hyper::HeaderMap,
    pub body: String,
}

impl Received {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> String {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
    }
}

#[derive(Default)]
pub struct MockState {
    pub received: Vec<Received>,
    /// Orders taken, by client order id (Alpaca) or by a running number (Tradier).
    pub accepted: HashMap<String, u32>,
    pub script: VecDeque<Behave>,
    next_id: u32,
    /// Every order taken, for the read endpoints: (broker id, our client order id or tag, the request's fields).
    orders: Vec<(u32, String, Value)>,
    /// Connections accepted.
    pub connections: u32,
    /// Tradier orders that reached a final state, by id: `canceled` or `filled` (read back by id).
    finished: HashMap<u32, &'static str>,
    /// Reads of one order still to be answered 429 (the broker's rate limit) before one is answered.
    busy_reads: u32,
}

/// A running mock broker.
#[derive(Clone)]
pub struct MockBroker {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<MockState>>,
    /// The accept loop and its connections, aborted by [`MockBroker::stop`], with the number of stops so far: an
    /// accept loop serves only while it is the number it started under.
    tasks: Arc<Mutex<(Vec<tokio::task::AbortHandle>, u32)>>,
}

impl MockBroker {
    /// Starts on 127.0.0.1:0 in the current runtime.
    pub async fn start() -> MockBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(MockState { next_id: 1000, ..MockState::default() }));
        let m = MockBroker { addr, state, tasks: Arc::default() };
        m.serve(listener);
        m
    }

    fn serve(&self, listener: TcpListener) {
        let (st, tasks) = (Arc::clone(&self.state), Arc::clone(&self.tasks));
        let mut running = self.tasks.lock().unwrap();
        let generation = running.1;
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                // Registered under the lock `stop` takes, and only while not stopped since: a connection accepted
                // as `stop` ran was otherwise pushed after its drain, never cut, and a server's pooled connection
                // went on reaching a broker the test had taken down.
                let mut running = tasks.lock().unwrap();
                if running.1 != generation {
                    return;
                }
                st.lock().unwrap().connections += 1;
                let st = Arc::clone(&st);
                let conn = tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(Arc::clone(&st), req));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
                running.0.push(conn.abort_handle());
            }
        });
        running.0.push(accept.abort_handle());
    }

    /// Goes down: the listener closes (connections are refused) and open connections are cut.
    pub fn stop(&self) {
        let mut running = self.tasks.lock().unwrap();
        running.1 += 1;
        for t in running.0.drain(..) {
            t.abort();
        }
    }

    /// Comes back on the same address.
    pub async fn restart(&self) {
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.serve(listener);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u32 {
        self.state.lock().unwrap().connections
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues misbehaviours for the next requests, in order.
    pub fn script(&self, b: impl IntoIterator<Item = Behave>) {
        self.state.lock().unwrap().script.extend(b);
    }

    /// The next `n` reads of one order are answered 429 (too many requests).
    pub fn busy_reads(&self, n: u32) {
        self.state.lock().unwrap().busy_reads = n;
    }

    /// Tradier order `id` is cancelled at the broker by a request that is not recorded among the received ones: a
    /// cancel sent by a server run that stopped before it stored what it sent.
    pub fn pull(&self, id: u32) {
        self.state.lock().unwrap().finished.entry(id).or_insert("canceled");
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.lock().unwrap().received.clone()
    }

    /// How many times each client order id was accepted as an order.
    pub fn accepted(&self) -> HashMap<String, u32> {
        self.state.lock().unwrap().accepted.clone()
    }
}

async fn handle(st: Arc<Mutex<MockState>>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, String> {
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or_default().to_owned();
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    let lookup = path == "/v2/orders:by_client_order_id"
        || (path.starts_with("/v1/accounts/") && path.ends_with("/orders") && query.contains("filter="));
    // Tradier's read of one order by id (not recorded among the writes): what a cancel came to.
    let one = path.strip_prefix("/v1/accounts/").and_then(|p| p.split_once("/orders/")).map(|(_, id)| id.to_owned());
    if method == "GET" {
        if let Some(id) = one.as_deref().and_then(|i| i.parse::<u32>().ok()) {
            let mut s = st.lock().unwrap();
            if s.busy_reads > 0 {
                s.busy_reads -= 1;
                return Ok(answer_with(429, r#"{"errors":{"error":"Too many requests"}}"#.into()));
            }
            let account = tradier_account(&path);
            if let Some((_, _, f)) = s.orders.iter().find(|(i, _, f)| *i == id && f["_account"] == account) {
                let status = s.finished.get(&id).copied().unwrap_or("open");
                let filled = if status == "filled" { f["quantity"].clone() } else { json!("0") };
                let order = json!({ "order": {
                    "id": id, "type": f["type"], "symbol": f["symbol"], "side": f["side"], "quantity": f["quantity"],
                    "status": status, "duration": f["duration"], "price": f["price"], "exec_quantity": filled,
                    "class": f["class"], "create_date": "2026-03-03T14:31:05.214Z" } });
                return Ok(answer_with(200, order.to_string()));
            }
        }
    }
    // Alpaca's read of one order by id (not recorded among the writes): what a change of it is measured against.
    if method == "GET" {
        if let Some(n) = path.strip_prefix("/v2/orders/ord-").and_then(|i| i.parse::<u32>().ok()) {
            let s = st.lock().unwrap();
            return Ok(match s.orders.iter().find(|(i, _, _)| *i == n) {
                Some((id, c, v)) => {
                    let status = s.finished.get(id).copied().unwrap_or("new");
                    answer_with(200, alpaca_order(*id, c, v, status).to_string())
                }
                None => answer_with(404, json!({ "code": 40410000, "message": "order not found" }).to_string()),
            });
        }
    }
    if method == "GET" && !lookup {
        // The server's state sync reads the account; this mock imitates only order writes and the lookups of
        // one order (the mocks in `brokers.rs` imitate reads too), so a sync read fails and the bot keeps the
        // state the server tracked.
        return Ok(answer_with(404, r#"{"message":"reads are not imitated by this mock"}"#.into()));
    }
    let (behave, answer) = {
        let mut s = st.lock().unwrap();
        s.received.push(Received { method: method.clone(), path: path.clone(), headers, body: body.clone() });
        let behave = s.script.pop_front().unwrap_or(Behave::Normal);
        let answer = match &behave {
            Behave::Normal | Behave::Slow(_) | Behave::TakeThenDrop => {
                Some(broker_answer(&mut s, &method, &path, &query, &body))
            }
            Behave::CancelButFill | Behave::CancelPending => {
                let answer = broker_answer(&mut s, &method, &path, &query, &body);
                if let Some(id) = one.as_deref().and_then(|i| i.parse::<u32>().ok()) {
                    if matches!(behave, Behave::CancelButFill) {
                        s.finished.insert(id, "filled");
                    } else {
                        s.finished.remove(&id);
                    }
                }
                Some(answer)
            }
            _ => None,
        };
        (behave, answer)
    };
    match behave {
        Behave::Drop | Behave::TakeThenDrop => Err("dropped on purpose".into()),
        Behave::Stall(d) => {
            tokio::time::sleep(d).await;
            Ok(answer_with(503, r#"{"message":"stalled"}"#.to_owned()))
        }
        Behave::Status(code, text) => Ok(answer_with(code, text.to_owned())),
        Behave::Slow(d) => {
            tokio::time::sleep(d).await;
            let (code, text) = answer.unwrap_or((500, String::new()));
            Ok(answer_with(code, text))
        }
        Behave::Normal | Behave::CancelButFill | Behave::CancelPending => {
            let (code, text) = answer.unwrap_or((500, String::new()));
            Ok(answer_with(code, text))
        }
    }
}

fn answer_with(code: u16, body: String) -> Response<Full<Bytes>> {
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = hyper::StatusCode::from_u16(code).unwrap();
    res.headers_mut().insert("content-type", "application/json".parse().unwrap());
    res
}

/// `a=1&b=2` as pairs, decoded.
fn form(text: &str) -> Vec<(String, String)> {
    let decode = |s: &str| {
        let s = s.replace('+', " ");
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz");
                if let Ok(v) = u8::from_str_radix(hex, 16) {
                    out.push(v);
                    i += 3;
                    continue;
                }
            }
            out.push(b[i]);
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The broker's own answer, taking the order (or reading orders back).
fn broker_answer(s: &mut MockState, method: &str, path: &str, query: &str, body: &str) -> (u16, String) {
    if method == "GET" {
        return read_answer(s, path, query);
    }
    s.next_id += 1;
    let id = s.next_id;
    if path.starts_with("/v1/accounts/") {
        // Tradier: no client order ids (a `tag` it does not refuse twice); every request is an order.
        if method == "DELETE" {
            let cancelled = path.rsplit('/').next().and_then(|i| i.parse::<u32>().ok());
            if let Some(c) = cancelled {
                s.finished.entry(c).or_insert("canceled");
            }
        } else {
            *s.accepted.entry(format!("tradier-{id}")).or_default() += 1;
            let mut fields: serde_json::Map<String, Value> =
                form(body).into_iter().map(|(k, v)| (k, Value::String(v))).collect();
            let tag = fields.get("tag").and_then(Value::as_str).unwrap_or_default().to_owned();
            // Orders belong to the account of their path: another account's list does not show them.
            fields.insert("_account".into(), json!(tradier_account(path)));
            s.orders.push((id, tag, Value::Object(fields)));
        }
        return (200, json!({ "order": { "id": id, "status": "ok" } }).to_string());
    }
    // Alpaca: a cancelled or replaced order reads so afterwards.
    let named = path.strip_prefix("/v2/orders/ord-").and_then(|i| i.parse::<u32>().ok());
    if method == "DELETE" {
        if let Some(n) = named {
            s.finished.entry(n).or_insert("canceled");
        }
        return (204, String::new());
    }
    if method == "PATCH" {
        if let Some(n) = named {
            s.finished.entry(n).or_insert("replaced");
        }
    }
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let coid = v["client_order_id"].as_str().unwrap_or_default().to_owned();
    if !coid.is_empty() && s.accepted.contains_key(&coid) {
        return (422, json!({ "code": 40010001, "message": "client_order_id must be unique" }).to_string());
    }
    *s.accepted.entry(coid.clone()).or_default() += 1;
    s.orders.push((id, coid.clone(), v));
    (200, json!({ "id": format!("ord-{id}"), "client_order_id": coid, "status": "accepted" }).to_string())
}

/// The account a Tradier path names (`/v1/accounts/{account}/orders…`).
fn tradier_account(path: &str) -> &str {
    path.strip_prefix("/v1/accounts/").and_then(|p| p.split('/').next()).unwrap_or_default()
}

/// An Alpaca order as its reads show it, nothing filled (this mock fills nothing).
fn alpaca_order(id: u32, client_order_id: &str, v: &Value, status: &str) -> Value {
    json!({
        "id": format!("ord-{id}"), "client_order_id": client_order_id, "symbol": v["symbol"],
        "asset_class": "us_equity", "qty": v["qty"], "filled_qty": "0", "order_class": "simple",
        "order_type": v["type"], "type": v["type"], "side": v["side"],
        "time_in_force": v["time_in_force"], "limit_price": v["limit_price"], "status": status,
        "created_at": "2026-03-03T14:31:05.118204Z", "legs": null
    })
}

/// The read endpoints: Alpaca's order by client order id, Tradier's order list with tags (shapes as in
/// `tests/fixtures/brokers/`).
fn read_answer(s: &MockState, path: &str, query: &str) -> (u16, String) {
    let q = form(query);
    let arg = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap_or_default();
    if path == "/v2/orders:by_client_order_id" {
        let coid = arg("client_order_id");
        return match s.orders.iter().find(|(_, c, _)| *c == coid) {
            Some((id, c, v)) => {
                (200, alpaca_order(*id, c, v, s.finished.get(id).copied().unwrap_or("new")).to_string())
            }
            None => (404, json!({ "code": 40410000, "message": format!("order not found for {coid}") }).to_string()),
        };
    }
    if path.starts_with("/v1/accounts/") && path.ends_with("/orders") {
        let account = tradier_account(path);
        let list: Vec<Value> = s
            .orders
            .iter()
            .filter(|(_, _, f)| f["_account"] == account)
            .filter(|(_, tag, _)| !tag.is_empty() || arg("includeTags") == "true")
            .map(|(id, tag, f)| {
                let mut o = json!({
                    "id": id, "type": f["type"], "symbol": f["symbol"], "side": f["side"],
                    "quantity": f["quantity"], "status": "open", "duration": f["duration"],
                    "exec_quantity": "0", "class": f["class"], "create_date": "2026-03-03T14:31:05.214Z"
                });
                if let Some(p) = f.get("price") {
                    o["price"] = p.clone();
                }
                if arg("includeTags") == "true" && !tag.is_empty() {
                    o["tag"] = json!(tag);
                }
                o
            })
            .collect();
        return match list.len() {
            0 => (200, json!({ "orders": "null" }).to_string()),
            1 => (200, json!({ "orders": { "order": list[0] } }).to_string()),
            _ => (200, json!({ "orders": { "order": list } }).to_string()),
        };
    }
    (404, json!({ "message": "not found" }).to_string())
}
