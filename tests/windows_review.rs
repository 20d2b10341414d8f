//! Review of 3962dff ("Merge fix-windows"): defects in the dedup and rate windows, each a failing test.

mod common;

use common::*;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use strategy_webhook::state::{Claim, DedupKey};
use strategy_webhook::{Decision, Engine, Limits, MemoryStore, StateStore};

const S: i64 = 1_000;

/// The reference server at start: dedup keys stored ahead of its clock are brought back to it
/// (`windows::rewind_keys`), rate marks are not. A mark restored from a run whose clock was ahead is then the
/// latest entry, and the first delivery's step back ages every key from it: a key claimed 10 s before the restart is
/// taken as 610 s old and its resend trades a second time. Before 3962dff only keys seen later than `now` moved.
#[test]
fn a_rate_mark_restored_ahead_does_not_expire_the_restored_keys() {
    let store = MemoryStore::default();
    let key = [1u8; 32];
    let now = T0;
    // Claimed 10 s ago (brought back to `now` or not: here it is already behind it).
    store.restore_key("s", &key, now - 10 * S);
    // A mark the previous run stamped with its clock 10 min ahead.
    store.restore_rate("s", now + 600 * S);
    assert!(store.count("s", now + S));
    assert_eq!(
        store.claim("s", &key, now + S),
        Claim::Duplicate { log: true },
        "claimed 11 s ago: the resend must not trade again"
    );
}

/// One delivery stamped ahead of the clock (a plausible time, here an hour ahead: a host passing local time for UTC
/// once), then the deliveries on time: the step back from it ages every key by the hour, and all expire. Before
/// 3962dff keys seen before `now` kept their times.
#[test]
fn one_time_far_ahead_does_not_expire_every_key() {
    let store = MemoryStore::default();
    let key = [2u8; 32];
    assert!(store.count("s", T0));
    assert_eq!(store.claim("s", &key, T0), Claim::Fresh);
    // The outlier.
    assert!(store.count("s", T0 + 20 * S + 3_600 * S));
    assert_eq!(store.claim("s", &[3u8; 32], T0 + 20 * S + 3_600 * S), Claim::Fresh);
    // Back on time, 30 s after the first claim: its resend.
    assert!(store.count("s", T0 + 30 * S));
    assert_eq!(store.claim("s", &key, T0 + 30 * S), Claim::Duplicate { log: true }, "claimed 30 s ago");
}

/// A genuine correction back by 200 s is pending (not yet kept: fewer than four deliveries on the new clock), and one
/// delivery's time is out of line (a host passing 0 once, which the README says a step back takes care of). The
/// outlier's step undoes the pending one first and runs from the old clock's time, so the deliveries that follow on
/// the corrected clock are neither "back on the clock before the step" (they are 200 s short of it) nor a step back:
/// they run on, every key aged from 0 — the whole dedup window is forgotten and every resend trades again.
#[test]
fn an_outlier_while_a_corrected_clock_is_pending_keeps_the_windows() {
    let store = MemoryStore::default();
    // On the old clock: a delivery every 10 s for 90 s.
    for i in 0..10u8 {
        let now = T0 + i64::from(i) * 10 * S;
        assert!(store.count("s", now));
        assert_eq!(store.claim("s", &[i; 32], now), Claim::Fresh);
    }
    // The clock corrected back by 200 s at real T0 + 95 s.
    let back = 200 * S;
    for (i, real) in [(100u8, 95 * S), (101, 100 * S)] {
        assert!(store.count("s", T0 + real - back));
        assert_eq!(store.claim("s", &[i; 32], T0 + real - back), Claim::Fresh);
    }
    // One delivery at time 0.
    let _ = store.count("s", 0);
    let _ = store.claim("s", &[200; 32], 0);
    // Real T0 + 105 s, on the corrected clock: resends of alerts claimed 5 s and 15 s ago.
    let now = T0 + 105 * S - back;
    assert!(store.count("s", now));
    assert_eq!(store.claim("s", &[101; 32], now), Claim::Duplicate { log: true }, "claimed 5 s ago");
    assert_eq!(store.claim("s", &[9; 32], now), Claim::Duplicate { log: true }, "claimed 15 s ago");
}

/// Same, for the rate: the outlier while a correction is pending lets every mark go, and a full minute's burst
/// passes a second time.
#[test]
fn an_outlier_while_a_corrected_clock_is_pending_keeps_the_rate() {
    let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
    let store = MemoryStore::new(limits);
    let back = 200 * S;
    // The old clock, then corrected back by 200 s: five deliveries within 10 s of real time.
    assert!(store.count("s", T0));
    assert!(store.count("s", T0 + 40 * S));
    assert!(store.count("s", T0 + 41 * S - back));
    assert!(store.count("s", T0 + 42 * S - back));
    // A host passing 0 once (counted: the window had room).
    assert!(store.count("s", 0));
    // Real T0 + 43 s: five counted in the last 43 s of real time, the window is full.
    assert!(!store.count("s", T0 + 43 * S - back), "the sixth delivery within a minute");
}

/// The reference server takes back the rate mark of a copy answered `duplicate` that it decides again
/// (`webhook.rs` `uncount(app, &outcome, now)`), by the time it was counted at. Since 3962dff a step back (and an
/// undo) moves every mark, so the mark is no longer found and the one POST stays counted twice; before, the mark
/// was left where it was. Here the limit is 2: the copy, a delivery on the corrected clock, and then the copy decided
/// again should fit.
#[test]
fn uncount_finds_a_mark_moved_by_a_step() {
    let limits = Limits { rate_limit: 2, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
    let store = MemoryStore::new(limits);
    // The copy, counted at T0 (then left waiting for its first attempt's commit).
    assert!(store.count("s", T0));
    // The clock corrected back by 100 s meanwhile: another delivery.
    assert!(store.count("s", T0 - 100 * S));
    // The first attempt's commit failed: the copy's count is taken back, and it is decided again.
    let _ = store.uncount("s", T0);
    assert!(store.count("s", T0 - 99 * S), "one POST is counted once");
}

/// As above, through an undone step: a copy counted on a pending step's clock has its mark moved forward by the
/// undo.
#[test]
fn uncount_finds_a_mark_moved_by_an_undone_step() {
    let limits = Limits { rate_limit: 3, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
    let store = MemoryStore::new(limits);
    assert!(store.count("s", T0));
    // A stalled thread 40 s behind: a pending step. The copy is counted on its clock.
    assert!(store.count("s", T0 - 40 * S));
    // Back on time: the step undone, every mark moved forward by 40 s.
    assert!(store.count("s", T0 + S));
    let _ = store.uncount("s", T0 - 40 * S);
    assert!(store.count("s", T0 + 2 * S), "three POSTs counted, one taken back: room for one more");
}

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

/// `Engine::remove` forgets the windows after it released the registry's write lock. A host that removes a strategy
/// and adds it back (a snapshot reloaded) meanwhile has the re-added strategy's first claim wiped by the late forget:
/// the resend of an alert just traded is processed again.
#[test]
fn remove_does_not_forget_the_claims_of_the_strategy_added_back() {
    let (forgetting_tx, forgetting_rx) = channel();
    let (go_tx, go_rx) = channel();
    let store =
        PausedForget { inner: MemoryStore::default(), forgetting: Mutex::new(Some(forgetting_tx)), go: Mutex::new(go_rx) };
    let e = Arc::new(Engine::with_store(store));
    e.upsert(strategy_from(&snapshot())).unwrap();
    let removal = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || e.remove("s1"))
    };
    forgetting_rx.recv().unwrap();
    // Unloaded; its windows not yet forgotten. Added back, and an alert trades.
    e.upsert(strategy_from(&snapshot())).unwrap();
    let body = r#"{"ticker":"AAPL","action":"buy"}"#;
    assert_eq!(e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0).decision, Decision::Processed);
    go_tx.send(()).unwrap();
    assert!(removal.join().unwrap());
    // The sender's resend, a second later.
    let o = e.deliver(TOKEN.as_bytes(), body.as_bytes(), None, T0 + S);
    assert_eq!(o.decision, Decision::Duplicate, "traded a second later: {}", o.to_json());
}
