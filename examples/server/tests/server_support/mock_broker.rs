//! A mock broker on 127.0.0.1 (plain HTTP) for the server's `http` bots. It records every request, behaves
//! like Alpaca (a repeated `client_order_id` is refused with 422 `client_order_id must be unique`, a replace
//! answers a new order id) and Tradier (`{"order":{"id":N}}`), and follows a script of misbehaviours:
//! slow answers, 5xx, connections dropped without an answer. Reads (GET) are answered 404 and not recorded.

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
}

/// A running mock broker.
#[derive(Clone)]
pub struct MockBroker {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<MockState>>,
}

impl MockBroker {
    /// Starts on 127.0.0.1:0 in the current runtime.
    pub async fn start() -> MockBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(MockState { next_id: 1000, ..MockState::default() }));
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else { continue };
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle(Arc::clone(&st), req));
                    let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
                });
            }
        });
        MockBroker { addr, state }
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues misbehaviours for the next requests, in order.
    pub fn script(&self, b: impl IntoIterator<Item = Behave>) {
        self.state.lock().unwrap().script.extend(b);
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
    let headers = req.headers().clone();
    let body = req.into_body().collect().await.map_err(|e| e.to_string())?.to_bytes();
    let body = String::from_utf8_lossy(&body).into_owned();
    if method == "GET" {
        // The server's state sync reads the account; this mock imitates only order writes (the mocks in
        // `brokers.rs` imitate reads too), so a read fails and the bot keeps the state the server tracked.
        return Ok(answer_with(404, r#"{"message":"reads are not imitated by this mock"}"#.into()));
    }
    let (behave, answer) = {
        let mut s = st.lock().unwrap();
        s.received.push(Received { method: method.clone(), path: path.clone(), headers, body: body.clone() });
        let behave = s.script.pop_front().unwrap_or(Behave::Normal);
        let answer = match &behave {
            Behave::Normal | Behave::Slow(_) => Some(broker_answer(&mut s, &method, &path, &body)),
            _ => None,
        };
        (behave, answer)
    };
    match behave {
        Behave::Drop => Err("dropped on purpose".into()),
        Behave::Status(code, text) => Ok(answer_with(code, text.to_owned())),
        Behave::Slow(d) => {
            tokio::time::sleep(d).await;
            let (code, text) = answer.unwrap_or((500, String::new()));
            Ok(answer_with(code, text))
        }
        Behave::Normal => {
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

/// The broker's own answer, taking the order.
fn broker_answer(s: &mut MockState, method: &str, path: &str, body: &str) -> (u16, String) {
    s.next_id += 1;
    let id = s.next_id;
    if path.starts_with("/v1/accounts/") {
        // Tradier: no client order ids; every request is an order.
        if method != "DELETE" {
            *s.accepted.entry(format!("tradier-{id}")).or_default() += 1;
        }
        return (200, json!({ "order": { "id": id, "status": "ok" } }).to_string());
    }
    // Alpaca.
    if method == "DELETE" {
        return (204, String::new());
    }
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let coid = v["client_order_id"].as_str().unwrap_or_default().to_owned();
    if !coid.is_empty() && s.accepted.contains_key(&coid) {
        return (422, json!({ "code": 40010001, "message": "client_order_id must be unique" }).to_string());
    }
    *s.accepted.entry(coid.clone()).or_default() += 1;
    (200, json!({ "id": format!("ord-{id}"), "client_order_id": coid, "status": "accepted" }).to_string())
}
