//! Formatting one equity limit order and serialising its body (`Body::to_bytes`), for
//! Alpaca (JSON numbers) and Schwab (price as a string): the per-bot cost of the last
//! step of every delivery.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use strategy_webhook::alert::{Duration, OrderType};
use strategy_webhook::broker::{self, BrokerId};
use strategy_webhook::order::{AssetClass, BotAction, Intent, Order};

fn equity_limit() -> BotAction {
    BotAction::Place(Order {
        asset_class: AssetClass::Equity,
        symbol: "AAPL".into(),
        pair: None,
        intent: Intent::CloseLong,
        quantity: 10.into(),
        order_type: OrderType::Limit,
        limit_price: strategy_webhook::decimal::parse("190.50"),
        price_effect: None,
        duration: Duration::Gtc,
        legs: Vec::new(),
        client_order_id: "swh-0123456789abcdef0123456789ab".into(),
    })
}

fn format_and_serialise(c: &mut Criterion) {
    let action = equity_limit();
    for (broker, account) in [(BrokerId::Alpaca, "PA0000000"), (BrokerId::Schwab, "ACCOUNTHASH0123")] {
        c.bench_function(&format!("{broker}/equity_limit/format+to_bytes"), |b| {
            b.iter(|| {
                let req = broker::format(black_box(broker), black_box(account), black_box(&action))
                    .expect("the order formats");
                black_box(req.body.to_bytes())
            })
        });
    }
}

criterion_group!(benches, format_and_serialise);
criterion_main!(benches);
