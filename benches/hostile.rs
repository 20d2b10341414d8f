//! Bodies built to be slow: each shape repeated to the largest body the engine accepts
//! (256 KiB), parsed (`alert::parse`) and delivered whole (`Engine::deliver`: parse, field
//! assembly, placeholder check, dedup hashing, decision). Budget: every one decided in under
//! 3 ms, and time linear in size (the `scaling` group runs three shapes at 16, 64 and 256 KiB). The
//! shapes of `tests/text_corpus.rs` are all here: tests assert the answers, this file the time.
//!
//! Most of these are refused by the text pre-scan (`alert::text::MAX_WORDS`) after one pass,
//! so the `at_budget` groups run each text shape repeated as often as the pre-scan still lets
//! through: the most work pest can be given in that shape.
//!
//! `cargo bench --bench hostile -- --quick` gives a figure per shape in a few minutes.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;
use strategy_webhook::{alert, Engine, Limits, MAX_BODY};

/// Repeats `unit` as many whole times as fit in `size` bytes.
fn repeat_to(unit: &str, size: usize) -> String {
    unit.repeat(size / unit.len())
}

/// A JSON object of many short members, closed, as near `size` as it gets.
fn many_keys(size: usize) -> String {
    let mut s = String::from(r#"{"ticker":"AAPL","action":"buy""#);
    let mut i = 0;
    while s.len() + 24 < size {
        s.push_str(&format!(r#","k{i}":"v{i}""#));
        i += 1;
    }
    s.push('}');
    s
}

/// `head` then `tail`, cut to `size` bytes at a character boundary.
fn with_tail(head: &str, tail: &str, size: usize) -> String {
    let mut s = format!("{head}{tail}");
    let mut end = size.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s
}

/// `{"a":{"a":…}}` closed, as near `size` as it gets.
fn json_nested(size: usize) -> String {
    let n = size / 6;
    format!("{{\"a\":{}1{}}}", r#"{"a":"#.repeat(n - 1), "}".repeat(n - 1))
}

/// An alert whose TV-Hub `alertTimestamp` is `unit` repeated: a time was once tried after each `-`, each try
/// reading the rest of the value (quadratic).
fn timestamp_of(unit: &str, size: usize) -> String {
    let head = r#"{"ticker":"AAPL","action":"buy","alertTimestamp":""#;
    format!("{head}{}\"}}", repeat_to(unit, size - head.len() - 2))
}

/// Whether the pre-scan refuses the text as too long.
fn too_long(body: &str) -> bool {
    matches!(alert::parse(body.as_bytes(), Some("text/plain")), Err(alert::ParseError::NotAnAlert(m)) if m.contains("longer than"))
}

/// `prefix`, `unit` repeated as often as the pre-scan still lets through, and `suffix`.
fn at_budget(prefix: &str, unit: &str, suffix: &str) -> String {
    let body = |n: usize| format!("{prefix}{}{suffix}", unit.repeat(n));
    let (mut lo, mut hi) = (0, MAX_BODY / unit.len().max(1));
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if too_long(&body(mid)) {
            hi = mid - 1;
        } else {
            lo = mid;
        }
    }
    body(lo)
}

/// Each text shape as large as the pre-scan lets through, and shapes that only have long runs.
fn budget_shapes() -> Vec<(&'static str, String, &'static str)> {
    const TEXT: &str = "text/plain";
    let mut v: Vec<_> = SHAPE_UNITS.iter().map(|(name, unit)| (*name, at_budget("", unit, ""), TEXT)).collect();
    v.extend([
        ("spaces_between_words", at_budget("buy a", " ", "b"), TEXT),
        ("spaces_in_pair_value", at_budget("ticker=a", " ", " action=buy"), TEXT),
        ("spaces_in_json", at_budget(r#"{"a":"#, " ", "1}"), TEXT),
        ("long_symbol", at_budget("buy ", "a", ""), TEXT),
        ("long_number", at_budget("buy AAPL @ ", "1", ""), TEXT),
        ("long_fill_instrument", at_budget("x: order buy @ 1 filled on ", "A", ". New strategy position is 1"), TEXT),
        ("nested_brackets", at_budget(r#"{"ticker":"AAPL","action":"buy","x":"#, "[", ""), TEXT),
        ("placeholders_in_json", at_budget("{", r#""a":{{ "#, "}"), TEXT),
        ("pairs_named", at_budget("", "ticker=AAPL ", "action=buy"), TEXT),
        ("quoted_values", at_budget("", "k=\"v\" ", ""), TEXT),
        ("json_many_keys_as_text", at_budget(r#"{"ticker":"AAPL","action":"buy""#, r#","k":"v""#, "}"), TEXT),
    ]);
    v
}

/// The repeated unit of each text shape in [`shapes`], for [`budget_shapes`].
const SHAPE_UNITS: [(&str, &str); 18] = [
    ("k_colon", "k: "),
    ("k_eq_v", "k=v "),
    ("k_eq_v_semicolon", "k=v;"),
    ("ticker_pairs", "ticker=AAPL action=buy "),
    ("at", "@ "),
    ("open_bracket", "["),
    ("json_unclosed_member", r#"{"a":"#),
    ("one_long_word", "a"),
    ("one_letter_words", "a "),
    ("fill_prefix", "order buy @ "),
    ("equals_only", "="),
    ("spaces_only", " "),
    ("newlines_only", "\n"),
    ("unicode_words", "é 😀 "),
    ("quote_unclosed", "k=\"v "),
    ("placeholder_open", "{{"),
    ("colon_words", "a:"),
    ("buy_long_words", "buy long AAPL "),
];

/// The hostile shapes: a name, the body, and its content type.
fn shapes(size: usize) -> Vec<(&'static str, String, &'static str)> {
    const TEXT: &str = "text/plain";
    let mut v = vec![
        ("k_colon", repeat_to("k: ", size), TEXT),
        ("k_eq_v", repeat_to("k=v ", size), TEXT),
        ("k_eq_v_semicolon", repeat_to("k=v;", size), TEXT),
        ("ticker_pairs", repeat_to("ticker=AAPL action=buy ", size), TEXT),
        ("at", repeat_to("@ ", size), TEXT),
        ("open_bracket", repeat_to("[", size), TEXT),
        ("json_unclosed_member", repeat_to(r#"{"a":"#, size), TEXT),
        ("one_long_word", "a".repeat(size), TEXT),
        ("one_letter_words", repeat_to("a ", size), TEXT),
        ("fill_prefix", repeat_to("order buy @ ", size), TEXT),
        ("equals_only", "=".repeat(size), TEXT),
        ("spaces_only", " ".repeat(size), TEXT),
        ("newlines_only", "\n".repeat(size), TEXT),
        ("unicode_words", repeat_to("é 😀 ", size), TEXT),
        ("quote_unclosed", repeat_to("k=\"v ", size), TEXT),
        ("placeholder_open", repeat_to("{{", size), TEXT),
        ("colon_words", repeat_to("a:", size), TEXT),
        ("buy_long_words", repeat_to("buy long AAPL ", size), TEXT),
        ("json_many_keys", many_keys(size), "application/json"),
        ("json_many_keys_as_text", many_keys(size), TEXT),
        ("open_brace", repeat_to("{", size), TEXT),
        ("quotes_only", repeat_to("\"", size), TEXT),
        ("curly_quotes", repeat_to("“", size), TEXT),
        ("emoji_only", repeat_to("🚀", size), TEXT),
        ("escaped_newlines", repeat_to("\\n", size), TEXT),
        ("fill_messages", repeat_to(": order buy @ 1 filled on X. ", size), TEXT),
        (
            "fill_after_colons",
            with_tail(&repeat_to(": ", size), "order buy @ 1 filled on AAPL. New strategy position is 1", size),
            TEXT,
        ),
        ("at_numbers", repeat_to("@ 1 ", size), TEXT),
        ("ticker_semicolons", repeat_to("ticker=AAPL;", size), TEXT),
        ("one_value_of_words", with_tail("ticker=", &repeat_to("x ", size), size), TEXT),
        ("json_nested_members", json_nested(size), TEXT),
        ("alert_timestamp_dashes", timestamp_of("-", size), "application/json"),
        ("alert_timestamp_minus_ones", timestamp_of("-1", size), "application/json"),
    ];
    for (_, body, _) in &mut v {
        assert!(body.len() <= MAX_BODY);
    }
    v.retain(|(_, b, _)| !b.is_empty());
    v
}

fn engine() -> (Engine, String) {
    let snapshot =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap();
    let e = Engine::with_limits(Limits { rate_limit: u32::MAX, rate_window_ms: 1, dedup_window_ms: 1 });
    let token = format!("{:064x}", 7);
    let mut v: serde_json::Value = serde_json::from_str(&snapshot).unwrap();
    v["token_hash"] = serde_json::json!(token);
    e.upsert_json(v.to_string().as_bytes()).unwrap();
    (e, token)
}

fn hostile(c: &mut Criterion) {
    let mut g = c.benchmark_group("hostile_parse");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    for (name, body, ct) in shapes(MAX_BODY) {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| b.iter(|| alert::parse(black_box(body.as_bytes()), Some(ct)).is_ok()));
    }
    g.finish();

    let (e, token) = engine();
    let mut g = c.benchmark_group("hostile_deliver");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    let mut now = 0i64;
    for (name, body, ct) in shapes(MAX_BODY) {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                now += 2;
                e.deliver(token.as_bytes(), black_box(body.as_bytes()), Some(ct), now).http_status
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("at_budget_parse");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    for (name, body, ct) in budget_shapes() {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| b.iter(|| alert::parse(black_box(body.as_bytes()), Some(ct)).is_ok()));
    }
    g.finish();

    let mut g = c.benchmark_group("at_budget_deliver");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    for (name, body, ct) in budget_shapes() {
        g.throughput(Throughput::Bytes(body.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                now += 2;
                e.deliver(token.as_bytes(), black_box(body.as_bytes()), Some(ct), now).http_status
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("hostile_scaling");
    g.sample_size(10).warm_up_time(Duration::from_millis(200)).measurement_time(Duration::from_secs(1));
    for size in [16 * 1024, 64 * 1024, MAX_BODY] {
        for (name, body, ct) in
            shapes(size).into_iter().filter(|(n, _, _)| matches!(*n, "k_colon" | "k_eq_v" | "alert_timestamp_dashes"))
        {
            g.throughput(Throughput::Bytes(body.len() as u64));
            g.bench_with_input(BenchmarkId::new(name, size), &body, |b, body| {
                b.iter(|| alert::parse(black_box(body.as_bytes()), Some(ct)).is_ok())
            });
        }
    }
    g.finish();
}

criterion_group!(benches, hostile);
criterion_main!(benches);
