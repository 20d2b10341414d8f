//! How long a plain-text alert takes to parse, per shape. The budget is 1.5 µs median.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use strategy_webhook::alert;

const CASES: [(&str, &str); 6] = [
    ("free_words_short", "buy long AAPL"),
    ("free_words_full", "NASDAQ:AAPL long OPEN @ 190.25 limit gtc id=abc-123"),
    ("tradingview_fill", "My Strategy (20, 50): order sell @ 2 filled on NASDAQ:AAPL. New strategy position is -1"),
    ("key_value", "ticker=AAPL;action=buy;direction=long"),
    (
        "key_value_full",
        "ticker=AAPL;action=OPEN;direction=LONG;price=190.25;order_type=limit;duration=gtc;message_id=abc-123",
    ),
    ("json_looking_text", r#"{"ticker": "AAPL", "action": "buy", "price": 190.25, "metadata": {"message_id": "m1"}}"#),
];

fn parse_text(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_text");
    for (name, text) in CASES {
        assert!(alert::parse(text.as_bytes(), Some("text/plain")).is_ok(), "{name} must parse");
        group.bench_function(name, |b| b.iter(|| alert::parse(black_box(text.as_bytes()), Some("text/plain"))));
    }
    group.finish();
}

criterion_group!(benches, parse_text);
criterion_main!(benches);
