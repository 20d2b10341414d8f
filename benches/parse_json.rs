//! Parsing a typical 150-byte JSON alert, against the `serde_json::Value` approach a
//! user might otherwise write. Budget: under 0.6 µs median.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use strategy_webhook::alert;

/// A typical charting-platform alert, about 150 bytes.
pub const ALERT: &[u8] =
    br#"{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}"#;

fn value_based(body: &[u8]) -> Option<(String, String, Option<String>)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let inst = v.get("ticker").or_else(|| v.get("symbol")).or_else(|| v.get("instrument"))?.as_str()?.to_string();
    let action = v.get("action")?.as_str()?.to_lowercase();
    let price = v.get("price").map(|p| p.to_string());
    Some((inst, action, price))
}

/// The floor: serde_json into a borrowed struct with no semantics at all.
#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Borrowed<'a> {
    ticker: &'a str,
    action: &'a str,
    direction: &'a str,
    price: &'a str,
    order_type: &'a str,
    duration: &'a str,
    #[serde(borrow)]
    metadata: Meta<'a>,
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Meta<'a> {
    message_id: &'a str,
}

fn bench(c: &mut Criterion) {
    assert!((140..=160).contains(&ALERT.len()), "{} bytes", ALERT.len());
    let mut g = c.benchmark_group("parse_json");
    g.bench_function("strategy_webhook::alert::parse (150 B)", |b| {
        b.iter(|| alert::parse(black_box(ALERT), Some("application/json")))
    });
    g.bench_function("serde_json::Value baseline (150 B)", |b| b.iter(|| value_based(black_box(ALERT))));
    g.bench_function("serde_json borrowed struct floor (150 B)", |b| {
        b.iter(|| serde_json::from_slice::<Borrowed>(black_box(ALERT)).map(|b| b.ticker.len()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
