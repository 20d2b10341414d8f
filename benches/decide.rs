//! A processed 150-byte JSON alert on a strategy with 2 bots, without order
//! formatting: parse, dedup key, rate and dedup admission, rules. Budget: under 1.5 µs.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use strategy_webhook::state::StateStore;
use strategy_webhook::{alert, decide, engine, Limits, MemoryStore, Strategy};

const ALERT: &[u8] =
    br#"{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}"#;

fn bench(c: &mut Criterion) {
    let snapshot = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap();
    let strategy = Strategy::from_json(&snapshot).unwrap();
    assert_eq!(strategy.bots.len(), 2);
    // No rate limit in the way: every iteration is a fresh, processed alert.
    let store = MemoryStore::new(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    let mut now = 0i64;
    c.bench_function("decide: rate + parse + dedup + rules (2 bots)", |b| {
        b.iter(|| {
            now += 2;
            let parsed = alert::parse(black_box(ALERT), Some("application/json"));
            let key = engine::dedup_key(ALERT, &parsed);
            let admission = (store.count(&strategy.id, now), store.claim(&strategy.id, &key, now));
            let alerts = parsed.unwrap();
            let plan = decide::decide(&strategy, &alerts).map(|p| p.steps.len());
            black_box((admission, plan))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
