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
/// grew without bound), and a strategy re-added under the id found the removed key. Here the delivery stops after its
/// rate count until the removal is done (or, if the removal waits for it, for a moment), and then claims its key.
#[test]
fn a_delivery_racing_remove_leaves_no_windows_behind() {
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::Mutex;
    use std::time::Duration;
    use strategy_webhook::state::{Claim, DedupKey};
    use strategy_webhook::{MemoryStore, StateStore};

    /// A MemoryStore whose first count tells the test, then waits for the removal.
    struct PausedAfterCount {
        inner: MemoryStore,
        counted: Mutex<Option<Sender<()>>>,
        removed: Mutex<Receiver<()>>,
    }
    impl StateStore for PausedAfterCount {
        fn count(&self, s: &str, now: i64) -> bool {
            let counted = self.inner.count(s, now);
            if let Some(tell) = self.counted.lock().unwrap().take() {
                tell.send(()).unwrap();
                // Long enough for a removal that does not wait for this delivery to finish first.
                let _ = self.removed.lock().unwrap().recv_timeout(Duration::from_millis(300));
            }
            counted
        }
        fn claim(&self, s: &str, key: &DedupKey, now: i64) -> Claim {
            self.inner.claim(s, key, now)
        }
        fn release(&self, s: &str, key: &DedupKey) {
            self.inner.release(s, key)
        }
        fn peek_count(&self, s: &str, now: i64) -> bool {
            self.inner.peek_count(s, now)
        }
        fn peek_claim(&self, s: &str, key: &DedupKey, now: i64) -> Claim {
            self.inner.peek_claim(s, key, now)
        }
        fn forget(&self, s: &str) {
            self.inner.forget(s)
        }
    }

    let (counted_tx, counted_rx) = channel();
    let (removed_tx, removed_rx) = channel();
    let store = PausedAfterCount {
        inner: MemoryStore::default(),
        counted: Mutex::new(Some(counted_tx)),
        removed: Mutex::new(removed_rx),
    };
    let e = Arc::new(Engine::with_store(store));
    e.upsert(strategy_from(&snapshot())).unwrap();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    let delivery = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0).decision)
    };
    counted_rx.recv().unwrap();
    let removal = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || {
            let removed = e.remove("s1");
            let _ = removed_tx.send(());
            removed
        })
    };
    assert_eq!(delivery.join().unwrap(), Decision::Processed);
    assert!(removal.join().unwrap());
    let key = strategy_webhook::engine::dedup_key(body.as_bytes(), &strategy_webhook::parse(body.as_bytes(), None));
    assert_eq!(e.store().inner.heap_bytes("s1"), 0, "the removed strategy's windows are gone");
    e.upsert(strategy_from(&snapshot())).unwrap();
    assert_eq!(e.store().inner.peek_claim("s1", &key, T0 + 1), Claim::Fresh, "re-added: a clean slate");
    assert_eq!(e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0 + 1).decision, Decision::Processed);
}

/// `Engine::remove` forgets the windows after it released the registry's write lock. A host that removes a strategy
/// and adds it back (a snapshot reloaded) meanwhile has the re-added strategy's first claim wiped by the late forget:
/// the resend of an alert just traded is processed again.
#[test]
fn remove_does_not_forget_the_claims_of_the_strategy_added_back() {
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::Mutex;
    use std::time::Duration;
    use strategy_webhook::state::{Claim, DedupKey};
    use strategy_webhook::{MemoryStore, StateStore};

    /// A MemoryStore whose `forget` stops until the test lets it go.
    struct PausedForget {
        inner: MemoryStore,
        forgetting: Mutex<Option<Sender<()>>>,
        go: Mutex<Receiver<()>>,
    }

    impl StateStore for PausedForget {
        fn count(&self, s: &str, now: i64) -> bool {
            self.inner.count(s, now)
        }
        fn claim(&self, s: &str, key: &DedupKey, now: i64) -> Claim {
            self.inner.claim(s, key, now)
        }
        fn release(&self, s: &str, key: &DedupKey) {
            self.inner.release(s, key)
        }
        fn peek_count(&self, s: &str, now: i64) -> bool {
            self.inner.peek_count(s, now)
        }
        fn peek_claim(&self, s: &str, key: &DedupKey, now: i64) -> Claim {
            self.inner.peek_claim(s, key, now)
        }
        fn forget(&self, s: &str) {
            if let Some(tell) = self.forgetting.lock().unwrap().take() {
                tell.send(()).unwrap();
                let _ = self.go.lock().unwrap().recv_timeout(Duration::from_secs(2));
            }
            self.inner.forget(s)
        }
    }

    let (forgetting_tx, forgetting_rx) = channel();
    let (go_tx, go_rx) = channel();
    let store = PausedForget {
        inner: MemoryStore::default(),
        forgetting: Mutex::new(Some(forgetting_tx)),
        go: Mutex::new(go_rx),
    };
    let e = Arc::new(Engine::with_store(store));
    e.upsert(strategy_from(&snapshot())).unwrap();
    let removal = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.remove("s1"))
    };
    forgetting_rx.recv().unwrap();
    // Unloaded; its windows not yet forgotten. Added back, and an alert trades. (A removal that forgets under its
    // write lock holds this upsert until the forget's wait runs out.)
    e.upsert(strategy_from(&snapshot())).unwrap();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0).decision, Decision::Processed);
    go_tx.send(()).unwrap();
    assert!(removal.join().unwrap());
    // The sender's resend, a second later.
    let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0 + 1_000);
    assert_eq!(o.decision, Decision::Duplicate, "traded a second later: {}", o.to_json());
}
