//! The whole engine call, bytes to both formatted requests serialized (Alpaca and
//! Schwab bots), and the engine under 2 threads on different strategies.
//! Budget: under 3 µs for the single call.
//!
//! The C ABI's cost per delivery is measured in `benches/core.rs` (`ffi_overhead_*`),
//! with every other core budget against the same reference.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::sync::Arc;
use strategy_webhook::{Engine, Limits};

const ALERT: &str = r#"{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}"#;

fn engine(strategies: usize) -> (Engine, Vec<String>) {
    let snapshot =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap();
    let e = Engine::with_limits(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    let mut tokens = Vec::new();
    for i in 0..strategies {
        let token = format!("{i:064x}");
        let mut v: serde_json::Value = serde_json::from_str(&snapshot).unwrap();
        v["id"] = serde_json::json!(format!("demo-{i}"));
        v["token_hash"] = serde_json::json!(token);
        e.upsert_json(v.to_string().as_bytes()).unwrap();
        tokens.push(token);
    }
    (e, tokens)
}

fn bench(c: &mut Criterion) {
    let (e, tokens) = engine(2);
    let token = tokens[0].as_bytes();
    let check = e.deliver(token, ALERT.as_bytes(), Some("application/json"), 0);
    assert_eq!(check.http_status, 200, "{}", check.to_json());
    assert_eq!(check.orders.len(), 2, "{}", check.to_json());
    let mut now = 0i64;
    c.bench_function("engine: deliver + serialize 2 requests (alpaca, schwab)", |b| {
        b.iter(|| {
            now += 2;
            let o = e.deliver(black_box(token), black_box(ALERT.as_bytes()), Some("application/json"), now);
            let bytes: usize = o.orders.iter().map(|r| r.request.body.to_bytes().len()).sum();
            black_box((o.http_status, bytes))
        })
    });

    // Two threads, each on its own strategy, for a fixed number of deliveries.
    let (e, tokens) = engine(2);
    let e = Arc::new(e);
    c.bench_function("engine: 2 threads x 1000 deliveries, different strategies", |b| {
        let mut base = 0i64;
        b.iter(|| {
            base += 10_000;
            let handles: Vec<_> = tokens
                .iter()
                .cloned()
                .map(|t| {
                    let e = Arc::clone(&e);
                    std::thread::spawn(move || {
                        for i in 0..1000 {
                            let o = e.deliver(t.as_bytes(), ALERT.as_bytes(), Some("application/json"), base + i * 2);
                            black_box(o.http_status);
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
