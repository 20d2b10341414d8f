//! Exactness under concurrent delivery: one processed per racing duplicate, never a
//! 61st processed POST in a window.

mod common;

use common::*;
use serde_json::json;
use std::sync::{Arc, Barrier};
use strategy_webhook::{Decision, Engine};

fn botless() -> Engine {
    let mut snap = snapshot();
    snap["bots"] = json!([]);
    engine_with(snap)
}

#[test]
fn racing_identical_bodies_trade_exactly_once() {
    let e = Arc::new(botless());
    let threads = 8;
    for round in 0..200 {
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","round":{round}}}"#);
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (e, b, body) = (Arc::clone(&e), Arc::clone(&barrier), body.clone());
                std::thread::spawn(move || {
                    b.wait();
                    e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0 + round * 60_000).decision
                })
            })
            .collect();
        let decisions: Vec<Decision> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let processed = decisions.iter().filter(|d| **d == Decision::Processed).count();
        let duplicate = decisions.iter().filter(|d| **d == Decision::Duplicate).count();
        assert_eq!((processed, duplicate), (1, threads - 1), "round {round}: {decisions:?}");
    }
}

#[test]
fn rate_limit_holds_under_concurrency() {
    let e = Arc::new(botless());
    let threads = 8;
    let per_thread = 20;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (e, b) = (Arc::clone(&e), Arc::clone(&barrier));
            std::thread::spawn(move || {
                b.wait();
                (0..per_thread)
                    .map(|i| {
                        let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":"{t}-{i}"}}"#);
                        e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0 + i as i64).http_status
                    })
                    .collect::<Vec<u16>>()
            })
        })
        .collect();
    let statuses: Vec<u16> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!(ok, 60, "exactly the budget gets through");
    assert_eq!(limited, threads * per_thread - 60);
}

#[test]
fn different_strategies_run_in_parallel_without_interference() {
    let e = Arc::new(Engine::new());
    let tokens: Vec<String> = (0..4).map(|i| format!("{i:064x}")).collect();
    for (i, t) in tokens.iter().enumerate() {
        let mut snap = snapshot();
        snap["id"] = json!(format!("s{i}"));
        snap["token_hash"] = json!(t);
        snap["bots"] = json!([]);
        e.upsert(strategy_from(&snap)).unwrap();
    }
    let handles: Vec<_> = tokens
        .into_iter()
        .map(|t| {
            let e = Arc::clone(&e);
            std::thread::spawn(move || {
                (0..60)
                    .filter(|i| {
                        let body = format!(r#"{{"ticker":"AAPL","action":"buy","n":{i}}}"#);
                        e.deliver(t.as_bytes(), body.as_bytes(), None, T0).decision == Decision::Processed
                    })
                    .count()
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 60, "each webhook has its own full budget");
    }
}

/// A rotation racing an upsert of new positions keeps both: the new token, and the upsert's snapshot. The
/// rotation read the strategy, then replaced it in a second step, so an upsert in between was undone.
#[test]
fn a_rotation_never_undoes_an_upsert_made_while_it_ran() {
    use strategy_webhook::{Strategy, TokenHash};
    let e = Arc::new(botless());
    let id = e.strategies()[0].id.to_string();
    for round in 0..2_000u32 {
        let barrier = Arc::new(Barrier::new(2));
        let upsert = {
            let (e, b, id) = (Arc::clone(&e), Arc::clone(&barrier), id.clone());
            std::thread::spawn(move || {
                // The host's read-modify-write of the live snapshot, with this round's marker.
                let mut s: Strategy = (*e.strategy(&id).unwrap()).clone();
                s.name = Some(format!("round {round}"));
                b.wait();
                e.upsert(s)
            })
        };
        let rotate = {
            let (e, b, id) = (Arc::clone(&e), Arc::clone(&barrier), id.clone());
            std::thread::spawn(move || {
                let token = TokenHash::parse(format!("{:064x}", u64::from(round) + 1).as_bytes()).unwrap();
                b.wait();
                e.rotate(&id, token)
            })
        };
        // The upsert read its token before the rotation: it may put that token back (the host orders the two),
        // and its marker must stand either way.
        let _ = upsert.join().unwrap();
        rotate.join().unwrap().unwrap();
        let now = e.strategy(&id).unwrap();
        assert_eq!(now.name.as_deref(), Some(format!("round {round}").as_str()), "round {round}");
    }
}

/// `Engine::remove` unloads the strategy, then forgets its windows. A delivery that found the strategy before the
/// unload made its windows again after the forget: never freed (a host adding and removing strategies under traffic
/// grew without bound), and a strategy re-added under the id found the removed key.
#[test]
fn a_delivery_racing_remove_leaves_no_windows_behind() {
    use strategy_webhook::state::Claim;
    use strategy_webhook::StateStore;
    // A large body: parsing it (between the rate count and the dedup claim) widens the window the race needs.
    let pad = "x".repeat(200_000);
    let mut hit = None;
    for i in 0..400u64 {
        let e = std::sync::Arc::new(engine());
        let body = format!(r#"{{"ticker":"AAPL","action":"buy","note":"{pad}","metadata":{{"message_id":"r{i}"}}}}"#);
        let key = strategy_webhook::engine::dedup_key(body.as_bytes(), &strategy_webhook::parse(body.as_bytes(), None));
        let (e2, b2) = (std::sync::Arc::clone(&e), body.clone());
        let t = std::thread::spawn(move || post(&e2, &b2, T0).decision);
        std::thread::sleep(std::time::Duration::from_micros(50 * (i % 40)));
        let removed = e.remove("s1");
        let decision = t.join().unwrap();
        if removed && decision == Decision::Processed && e.store().peek_claim("s1", &key, T0 + 1) != Claim::Fresh {
            hit = Some(i);
            break;
        }
    }
    assert_eq!(hit, None, "a delivery's claim outlived `remove` of its strategy");
}
