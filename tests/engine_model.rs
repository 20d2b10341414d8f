//! For any sequence of deliveries and times, the engine's counts of processed,
//! duplicate, rejected and 429 answers agree with a simple reference model, and so do
//! the client order ids: derived from the key and the moment the model claimed it, new
//! for every processed delivery.

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::{HashMap, HashSet, VecDeque};
use strategy_webhook::builder::client_order_id;
use strategy_webhook::{Decision, Engine, Limits};

const LIMITS: Limits = Limits { rate_limit: 5, rate_window_ms: 1_000, dedup_window_ms: 3_000 };

/// Bodies: even indexes are valid alerts (processed), odd ones are rejected
/// (instrument not allowed). Two of them share a message_id.
fn body(i: usize) -> String {
    match i {
        0 => r#"{"ticker":"AAPL","action":"buy"}"#.into(),
        1 => r#"{"ticker":"NFLX","action":"buy"}"#.into(),
        2 => r#"{"ticker":"MSFT","action":"buy","metadata":{"message_id":"same"}}"#.into(),
        3 => r#"{"ticker":"NFLX","action":"buy","metadata":{"message_id":"other"}}"#.into(),
        4 => r#"{"ticker":"TSLA","action":"buy","metadata":{"message_id":"same"},"x":1}"#.into(),
        n => format!(r#"{{"ticker":"{}","action":"buy","n":{n}}}"#, if n % 2 == 0 { "AAPL" } else { "NFLX" }),
    }
}

fn key(i: usize) -> String {
    match i {
        2 | 4 => "id:same".into(),
        3 => "id:other".into(),
        n => format!("body:{n}"),
    }
}

#[derive(Default)]
struct Model {
    rate: VecDeque<i64>,
    seen: HashMap<String, i64>,
}

impl Model {
    /// The answer, and for a fresh claim the moment the key was claimed.
    fn deliver(&mut self, i: usize, now: i64) -> (&'static str, Option<i64>) {
        while self.rate.front().is_some_and(|&t| now - t >= LIMITS.rate_window_ms) {
            self.rate.pop_front();
        }
        if self.rate.len() >= LIMITS.rate_limit as usize {
            return ("429", None);
        }
        self.rate.push_back(now);
        let k = key(i);
        if self.seen.get(&k).is_some_and(|&t| now - t < LIMITS.dedup_window_ms) {
            return ("duplicate", None);
        }
        self.seen.insert(k, now);
        (if i % 2 == 0 { "processed" } else { "rejected" }, Some(now))
    }
}

fn label(o: &strategy_webhook::Outcome) -> &'static str {
    match (o.http_status, o.decision) {
        (429, _) => "429",
        (200, Decision::Processed) => "processed",
        (200, Decision::Rejected) => "rejected",
        (200, Decision::Duplicate) => "duplicate",
        _ => "other",
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn engine_agrees_with_reference_model(steps in proptest::collection::vec((0usize..8, 0i64..700), 1..120)) {
        let mut snap = snapshot();
        snap["bots"][0]["working_orders"] = json!([]);
        let e = Engine::with_limits(LIMITS);
        e.upsert(strategy_from(&snap)).unwrap();
        let mut model = Model::default();
        let mut now = T0;
        let mut counts: HashMap<&str, (usize, usize)> = HashMap::new();
        let mut ids = HashSet::new();
        for (i, dt) in steps {
            now += dt;
            let o = e.deliver(TOKEN.as_bytes(), body(i).as_bytes(), Some("application/json"), now);
            let got = label(&o);
            let (want, claimed) = model.deliver(i, now);
            prop_assert_eq!(got, want, "body {} at +{}ms", i, now - T0);
            if want == "processed" {
                let key = o.dedup_key.as_deref().unwrap_or_default();
                let claimed = claimed.unwrap_or_default();
                prop_assert_eq!(o.orders.len(), 2);
                for r in &o.orders {
                    let expected = client_order_id("s1", key, claimed, &r.bot, 0);
                    prop_assert_eq!(&r.client_order_id, &expected, "body {} at +{}ms", i, now - T0);
                    prop_assert!(ids.insert(expected), "a processed delivery reused a client order id");
                }
            } else {
                prop_assert!(o.orders.is_empty());
            }
            counts.entry(want).or_default().0 += 1;
            counts.entry(got).or_default().1 += 1;
        }
        for (k, (want, got)) in counts {
            prop_assert_eq!(want, got, "count of {}", k);
        }
    }
}
