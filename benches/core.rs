//! Every core budget of issue 19 in one process, so that each figure can be read as a
//! ratio to the same reference: serde_json's parse of the same 150-byte alert into a
//! borrowed struct with no semantics (`floor`). `benches/compare.sh` runs this and
//! prints the ratios; run it with short measurement times on a shared machine.
//!
//! Ids (`core/NAME`): `floor` and `floor_again` (first and last), `parse_json`, `text_*` (one per text shape), `decide`,
//! `engine`, `ffi_overhead_404` and `ffi_overhead_200` (the C ABI's cost per delivery over
//! `Engine::deliver`, for a host that reuses one outcome, measured directly in alternating
//! blocks).

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use strategy_webhook::state::StateStore;
use strategy_webhook::{alert, decide, engine, Engine, Limits, MemoryStore, Strategy};

const ALERT: &str = r#"{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}"#;

/// Text alerts of every ordinary shape, up to 10 pairs.
const TEXT: [(&str, &str); 7] = [
    ("text_free_words_short", "buy long AAPL"),
    ("text_free_words_full", "NASDAQ:AAPL long OPEN @ 190.25 limit gtc id=abc-123"),
    (
        "text_tradingview_fill",
        "My Strategy (20, 50): order sell @ 2 filled on NASDAQ:AAPL. New strategy position is -1",
    ),
    ("text_key_value_3", "ticker=AAPL;action=buy;direction=long"),
    (
        "text_key_value_7",
        "ticker=AAPL;action=OPEN;direction=LONG;price=190.25;order_type=limit;duration=gtc;message_id=abc-123",
    ),
    (
        "text_key_value_10",
        "ticker=AAPL;action=OPEN;direction=LONG;price=190.25;order_type=limit;duration=gtc;message_id=abc-123;\
         quantity=10;exchange=NASDAQ;comment=breakout",
    ),
    ("text_json_looking", r#"{"ticker": "AAPL", "action": "buy", "price": 190.25, "metadata": {"message_id": "m1"}}"#),
];

/// The reference: serde_json into a borrowed struct, no semantics at all.
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

fn demo() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("core");
    let floor = || serde_json::from_slice::<Borrowed>(black_box(ALERT.as_bytes())).map(|b| b.ticker.len());
    g.bench_function("floor", |b| b.iter(floor));
    g.bench_function("parse_json", |b| b.iter(|| alert::parse(black_box(ALERT.as_bytes()), Some("application/json"))));
    for (name, text) in TEXT {
        assert!(alert::parse(text.as_bytes(), Some("text/plain")).is_ok(), "{name} must parse");
        g.bench_function(name, |b| b.iter(|| alert::parse(black_box(text.as_bytes()), Some("text/plain"))));
    }

    // Decide alone: rate, parse, dedup key and admission, rules for 2 bots; no formatting.
    let strategy = Strategy::from_json(demo().as_bytes()).unwrap();
    assert_eq!(strategy.bots.len(), 2);
    let store = MemoryStore::new(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    let mut now = 0i64;
    g.bench_function("decide", |b| {
        b.iter(|| {
            now += 2;
            let parsed = alert::parse(black_box(ALERT.as_bytes()), Some("application/json"));
            let key = engine::dedup_key(ALERT.as_bytes(), &parsed);
            let admission = (store.count(&strategy.id, now), store.claim(&strategy.id, &key, now));
            let alerts = parsed.unwrap();
            let plan = decide::decide(&strategy, &alerts).map(|p| p.steps.len());
            black_box((admission, plan))
        })
    });

    // The engine call: bytes to both broker requests serialized (Alpaca and Schwab bots).
    let e = Engine::with_limits(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    e.upsert_json(demo().as_bytes()).unwrap();
    let token: String =
        serde_json::from_str::<serde_json::Value>(&demo()).unwrap()["token_hash"].as_str().unwrap().to_string();
    let check = e.deliver(token.as_bytes(), ALERT.as_bytes(), Some("application/json"), 0);
    assert_eq!((check.http_status, check.orders.len()), (200, 2), "{}", check.to_json());
    let mut now = 0i64;
    g.bench_function("engine", |b| {
        b.iter(|| {
            now += 2;
            let o = e.deliver(black_box(token.as_bytes()), black_box(ALERT.as_bytes()), Some("application/json"), now);
            // The bodies are serialized by the call; a host sends them borrowed, as benches/alloc.rs reads them.
            let bytes: usize = o.orders.iter().map(|r| r.request.body.as_bytes().len()).sum();
            black_box((o.http_status, bytes))
        })
    });
    ffi(&mut g);
    // The reference once more at the end: load on a shared machine only slows a figure,
    // so compare.sh divides by the lower of the two (which errs against the core).
    g.bench_function("floor_again", |b| b.iter(floor));
    g.finish();
}

/// The C ABI's cost per delivery over `Engine::deliver`: blocks of the two calls
/// alternate, so load from the rest of the machine falls on both alike; a block where
/// the Rust call happened to be slower counts as no overhead, which errs on the high side.
/// The 200's difference is small against the call's own noise; the 404 is the sharper figure.
#[cfg(feature = "ffi")]
fn ffi(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    use std::ptr::{null, null_mut};
    use strategy_webhook::ffi::*;

    const JSON: &str = "application/json";
    // Past the spec's dedup window, so every delivery trades.
    const STEP_MS: i64 = 301_000;
    let snapshot = demo();
    let token: String =
        serde_json::from_str::<serde_json::Value>(&snapshot).unwrap()["token_hash"].as_str().unwrap().to_string();
    let unknown = "f".repeat(64);
    let rust = Engine::new();
    rust.upsert_json(snapshot.as_bytes()).unwrap();
    let mut handle = null_mut();
    // SAFETY: valid out-parameter and buffers; the handle is freed at the end.
    unsafe {
        assert_eq!(swh_engine_new(&mut handle), swh_result::SWH_OK);
        assert_eq!(swh_engine_upsert(handle, snapshot.as_ptr(), snapshot.len()), swh_result::SWH_OK);
    }
    // As a host that handles one delivery after another does: one outcome, refilled by
    // each delivery (`swh_engine_deliver_into`), read, and freed once at the end.
    let mut outcome = null_mut();
    let mut through_ffi = |token: &str, now: i64| -> (u16, usize) {
        let (mut status, mut text, mut len) = (0u16, null(), 0usize);
        // SAFETY: a live engine, buffers of the given lengths, valid out-parameters; the
        // outcome is NULL or the live one from the call before, and is freed at the end.
        unsafe {
            let r = swh_engine_deliver_into(
                handle,
                token.as_ptr(),
                token.len(),
                ALERT.as_ptr(),
                ALERT.len(),
                JSON.as_ptr().cast(),
                JSON.len(),
                now,
                &mut outcome,
            );
            assert_eq!(r, swh_result::SWH_OK);
            swh_outcome_http_status(outcome, &mut status);
            swh_outcome_response(outcome, &mut text, &mut len);
        }
        (status, len)
    };
    let through_rust = |token: &str, now: i64| -> (u16, usize) {
        let o = rust.deliver(token.as_bytes(), ALERT.as_bytes(), Some(JSON), now);
        (o.http_status, o.response.len())
    };
    assert_eq!((through_ffi(&unknown, 0).0, through_rust(&unknown, 0).0), (404, 404));
    assert_eq!((through_ffi(&token, STEP_MS).0, through_rust(&token, STEP_MS).0), (200, 200));
    for (name, token) in [("ffi_overhead_404", &unknown), ("ffi_overhead_200", &token)] {
        let mut now = 2 * STEP_MS;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut overhead = std::time::Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(256);
                    left -= n;
                    let start = std::time::Instant::now();
                    for _ in 0..n {
                        now += STEP_MS;
                        black_box(through_rust(black_box(token), now));
                    }
                    let rust = start.elapsed();
                    let start = std::time::Instant::now();
                    for _ in 0..n {
                        now += STEP_MS;
                        black_box(through_ffi(black_box(token), now));
                    }
                    overhead += start.elapsed().saturating_sub(rust);
                }
                // Criterion refuses a zero sample; 1 ns per sample errs on the high side.
                overhead.max(std::time::Duration::from_nanos(1))
            })
        });
    }
    // SAFETY: the live outcome and engine from above, each freed once.
    unsafe {
        assert_eq!(swh_outcome_free(outcome), swh_result::SWH_OK);
        assert_eq!(swh_engine_free(handle), swh_result::SWH_OK);
    }
}

#[cfg(not(feature = "ffi"))]
fn ffi(_: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {}

criterion_group!(benches, bench);
criterion_main!(benches);
