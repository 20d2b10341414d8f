//! Review probes (C ABI and the core's dedup and rate windows): each test fails on the reviewed code.

mod common;

use common::*;
use strategy_webhook::Decision;

/// README: "The host's clock going back by more than 30 s (an NTP step ...) moves every key seen later back by the
/// step ..., keeping the age it had at the latest entry ...: a key 290 s old at the step expires 10 s after it."
/// With a step shorter than the key's age (here 200 s), the key is seen *earlier* than the new time, so it is not
/// moved at all: it keeps its old-clock time on the new clock and lasts the whole step longer. The same alert sent
/// 301 s after the first (a new alert per the spec's dedup rule 3) is answered `duplicate`: the order is lost.
#[test]
fn a_step_back_shorter_than_a_keys_age_still_keeps_its_age() {
    let a = r#"{"ticker":"AAPL","action":"buy"}"#;
    let e = engine();
    assert_eq!(post(&e, a, T0).decision, Decision::Processed);
    // Deliveries on the clock, then the clock corrected back by 200 s, then deliveries on the new clock (dense
    // enough that the step is kept, not taken for an outlier).
    let other = |i: i64| format!(r#"{{"ticker":"MSFT","action":"buy","metadata":{{"message_id":"m{i}"}}}}"#);
    assert_eq!(post(&e, &other(0), T0 + 290_000).decision, Decision::Processed);
    let back = 200_000;
    for (i, real) in [291_000i64, 293_000, 295_000, 297_000, 299_000].into_iter().enumerate() {
        assert_eq!(post(&e, &other(1 + i as i64), T0 + real - back).decision, Decision::Processed);
    }
    // AAPL again, 301 s (real) after it was first seen: past the window, a new alert.
    let o = post(&e, a, T0 + 301_000 - back);
    assert_eq!(o.decision, Decision::Processed, "AAPL was seen 301 s ago (290 s old at the step): {}", o.to_json());
}

/// `Engine::remove` (and so `swh_engine_remove`, whose header says "Removes a strategy and its dedup and rate
/// state") unloads the strategy, then forgets its windows. A delivery that found the strategy before the unload
/// counts and claims after the forget, re-making the windows of a strategy that no longer exists: they are never
/// freed (a host adding and removing strategies under traffic grows without bound), and a strategy re-added under
/// the id finds the "removed" key (here: answered duplicate, where the removal promised a clean slate).
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

/// `MemoryStore::restore_key` ("puts back a dedup key claimed at `seen_at_ms` ... so a redelivery within the window
/// is still a duplicate") does nothing when the store still holds the key, even expired and awaiting its sweep: the
/// restored claim is dropped and the redelivery trades a second time.
#[test]
fn restoring_a_key_over_its_expired_entry_keeps_the_restored_claim() {
    use strategy_webhook::state::Claim;
    use strategy_webhook::{Limits, MemoryStore, StateStore};
    let store = MemoryStore::new(Limits::default());
    let key = [7u8; 32];
    assert_eq!(store.claim("s1", &key, T0), Claim::Fresh);
    // 400 s later a peer's (or the host database's) claim of the same key 10 s ago is put back.
    store.restore_key("s1", &key, T0 + 390_000);
    assert_eq!(store.claim("s1", &key, T0 + 400_000), Claim::Duplicate { log: true }, "claimed 10 s ago");
}
