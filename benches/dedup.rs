//! SHA-256 dedup hashing at 150 B, 4 KiB and 256 KiB. Budget: 900 MB/s or more on
//! 256 KiB (the CPU's SHA extensions; portable software SHA-256 reaches ~110 MB/s).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("dedup_hash");
    for size in [150usize, 4096, 262_144] {
        let body: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_function(format!("sha256 {size} B"), |b| {
            b.iter(|| strategy_webhook::engine::dedup_key(black_box(&body), &Err(strategy_webhook::ParseError::Empty)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
