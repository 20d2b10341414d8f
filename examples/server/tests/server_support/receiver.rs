//! A chat webhook stand-in for notification tests: records every POST body with the status it answered.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::Value;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

/// A chat webhook stand-in: records every POST body with the status it answered (`answer`, settable).
pub struct Receiver {
    pub port: u16,
    pub answer: Arc<AtomicU16>,
    pub got: Arc<Mutex<Vec<(u16, Value)>>>,
}

impl Receiver {
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let answer = Arc::new(AtomicU16::new(204));
        let got: Arc<Mutex<Vec<(u16, Value)>>> = Arc::default();
        let (a, g) = (Arc::clone(&answer), Arc::clone(&got));
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else { return };
                let (a, g) = (Arc::clone(&a), Arc::clone(&g));
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let (a, g) = (Arc::clone(&a), Arc::clone(&g));
                        async move {
                            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                            let status = a.load(Ordering::SeqCst);
                            let v = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            g.lock().unwrap().push((status, v));
                            let mut res = Response::new(Full::new(Bytes::new()));
                            *res.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
                            Ok::<_, std::convert::Infallible>(res)
                        }
                    });
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                });
            }
        });
        Receiver { port, answer, got }
    }

    /// The texts the receiver took (answered 2xx).
    pub fn taken(&self) -> Vec<String> {
        let got = self.got.lock().unwrap();
        got.iter()
            .filter(|(s, _)| (200..300).contains(s))
            .map(|(_, v)| v["content"].as_str().unwrap_or("").to_owned())
            .collect()
    }

    pub fn tries(&self) -> usize {
        self.got.lock().unwrap().len()
    }
}
