//! Heap allocations per engine delivery (bytes to both broker requests serialized, the
//! Outcome dropped; the bodies read borrowed, as a host sends them), counted by a global
//! allocator that counts; and one strategy's window memory when full. Prints
//! `allocs_per_delivery=N` and `strategy_heap_bytes=N` for `benches/compare.sh`.
//! Budgets (issue 19): at most 5 allocations, under 32 KiB.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use strategy_webhook::{Engine, Limits};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: the caller's layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's pointer from `alloc`, forwarded.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const ALERT: &str = r#"{"ticker":"NASDAQ:AAPL","action":"buy","direction":"long","price":"190.25","order_type":"limit","duration":"day","metadata":{"message_id":"tv-8c1f2a"}}"#;

fn main() {
    let snapshot =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap();
    let token: String =
        serde_json::from_str::<serde_json::Value>(&snapshot).unwrap()["token_hash"].as_str().unwrap().to_string();
    let e = Engine::with_limits(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    e.upsert_json(snapshot.as_bytes()).unwrap();
    let deliver = |now: i64| {
        let o = e.deliver(token.as_bytes(), ALERT.as_bytes(), Some("application/json"), now);
        assert_eq!((o.http_status, o.orders.len()), (200, 2), "{}", o.to_json());
        // The bodies are serialized by the call; a host sends them borrowed (`as_bytes`).
        std::hint::black_box(o.orders.iter().map(|r| r.request.body.as_bytes().len()).sum::<usize>());
    };
    // Warm up: the windows' maps reach their steady size.
    for i in 0..1000 {
        deliver(i * 2);
    }
    const N: i64 = 1000;
    let before = ALLOCS.load(Relaxed);
    for i in 0..N {
        deliver(10_000 + i * 2);
    }
    let per = (ALLOCS.load(Relaxed) - before) as f64 / N as f64;
    println!("allocs_per_delivery={per:.1}");

    // One strategy at the spec's limits (60 a minute, 5-minute dedup window), filled.
    let e = Engine::new();
    let mut snap: serde_json::Value = serde_json::from_str(&snapshot).unwrap();
    snap["bots"] = serde_json::json!([]);
    e.upsert_json(snap.to_string().as_bytes()).unwrap();
    let id = snap["id"].as_str().unwrap().to_string();
    let mut peak = 0;
    for second in 0..900i64 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":{second}}}"#);
        let o = e.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), second * 1_000);
        assert_eq!(o.http_status, 200, "{}", o.to_json());
        peak = peak.max(e.store().heap_bytes(&id));
    }
    println!("strategy_heap_bytes={peak}");
}
