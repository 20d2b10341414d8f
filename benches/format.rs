//! Building and formatting orders, per broker: one limit order formatted and its body
//! serialised (`Body::to_bytes`) for each of the five brokers (crypto for Coinbase),
//! plus an option vertical for the option brokers, and the broker-neutral build step
//! (sizing, limit price, client order id) for one bot.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use strategy_webhook::alert::{self, Date, Duration, LegAction, OptionSide, OrderType};
use strategy_webhook::broker::{self, BrokerId};
use strategy_webhook::builder::{self, BuildContext};
use strategy_webhook::decide;
use strategy_webhook::decimal::parse;
use strategy_webhook::model::{self, AssetClass, BotAction, Intent, Order, OrderLeg, PriceEffect};
use strategy_webhook::Strategy;

fn order(asset_class: AssetClass, symbol: &str) -> Order {
    Order {
        asset_class,
        symbol: symbol.into(),
        pair: model::CryptoPair::parse(symbol).filter(|_| asset_class == AssetClass::Crypto),
        intent: Intent::CloseLong,
        quantity: if asset_class == AssetClass::Crypto { parse("0.0015").unwrap() } else { 10.into() },
        order_type: OrderType::Limit,
        limit_price: parse(if asset_class == AssetClass::Crypto { "65000.00" } else { "190.50" }),
        price_effect: None,
        duration: Duration::Gtc,
        legs: Vec::new(),
        client_order_id: "swh-0123456789abcdef0123456789ab".parse().unwrap(),
        reference_price: None,
    }
}

fn vertical() -> Order {
    let leg = |strike: &str, action| OrderLeg {
        contract: model::OptionContract {
            root: "SPXW".into(),
            expiration: Date::parse_iso("2024-01-19").unwrap(),
            side: OptionSide::Call,
            strike: parse(strike).unwrap(),
        },
        action,
        ratio: 1,
    };
    Order {
        asset_class: AssetClass::Option,
        symbol: "SPX".into(),
        pair: None,
        intent: Intent::OpenLong,
        quantity: 1.into(),
        order_type: OrderType::Limit,
        limit_price: parse("2.35"),
        price_effect: Some(PriceEffect::Debit),
        duration: Duration::Day,
        legs: vec![leg("4500", LegAction::BuyToOpen), leg("4510", LegAction::SellToOpen)],
        client_order_id: "swh-0123456789abcdef0123456789ab".parse().unwrap(),
        reference_price: None,
    }
}

fn format_and_serialise(c: &mut Criterion) {
    let mut g = c.benchmark_group("format");
    for broker in BrokerId::ALL {
        let action = BotAction::Place(if broker == BrokerId::Coinbase {
            order(AssetClass::Crypto, "BTC/USD")
        } else {
            order(AssetClass::Equity, "AAPL")
        });
        g.bench_function(format!("{broker}/limit/format+to_bytes"), |b| {
            b.iter(|| {
                let req = broker::format(black_box(broker), black_box("ACCOUNT1"), black_box(&action))
                    .expect("the order formats");
                black_box(req.body.to_bytes())
            })
        });
    }
    let spread = BotAction::Place(vertical());
    for broker in [BrokerId::Alpaca, BrokerId::Tradier, BrokerId::Schwab, BrokerId::Tastytrade] {
        g.bench_function(format!("{broker}/debit_vertical/format+to_bytes"), |b| {
            b.iter(|| {
                let req = broker::format(black_box(broker), "ACCOUNT1", black_box(&spread)).expect("formats");
                black_box(req.body.to_bytes())
            })
        });
    }
    g.finish();
}

fn build(c: &mut Criterion) {
    let snapshot = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/strategies/demo.json")).unwrap();
    let mut strategy = Strategy::from_json(&snapshot).unwrap();
    // A limit strategy with a mid target: the price comes from the quote, on the tick.
    strategy.order_type = OrderType::Limit;
    let alerts = alert::parse(br#"{"ticker":"AAPL","action":"buy"}"#, None).unwrap();
    let plan = decide::decide(&strategy, &alerts).unwrap();
    let ctx = BuildContext {
        strategy: &strategy,
        now_ms: 1_705_676_400_000,
        dedup_key: &"ab".repeat(32),
        claimed_ms: 1_705_676_400_000,
    };
    c.bench_function("build: one bot's order (notional sizing, mid limit, client id)", |b| {
        b.iter(|| builder::build(black_box(&ctx), black_box(&plan.steps[0]), black_box(&strategy.bots[1])))
    });
}

criterion_group!(benches, format_and_serialise, build);
criterion_main!(benches);
