//! State that outlives one call: per-strategy rate windows, dedup windows and the
//! duplicate-log throttle. Behind [`StateStore`] so a host can keep it elsewhere (for
//! example a shared store when several servers answer the same webhooks).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// A dedup key: SHA-256 of the raw body, or of the sender's `message_id`.
pub type DedupKey = [u8; 32];

/// The limits a store enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Alerts allowed per webhook within `rate_window_ms` (60).
    pub rate_limit: u32,
    /// The rate window (60,000 ms).
    pub rate_window_ms: i64,
    /// The dedup window (300,000 ms).
    pub dedup_window_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 }
    }
}

/// What the store says about a delivery's dedup key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The key was seen within the window. `log` is true the first time in the window.
    Duplicate {
        /// Whether this duplicate should leave a log row.
        log: bool,
    },
    /// A new key, now claimed: release it if the outcome is not a 200.
    Fresh,
}

/// Per-strategy windows, keyed by the strategy's id (not its token, so a token
/// rotation keeps them). Each call must be atomic per strategy: two identical deliveries
/// racing each other get one `Fresh` and one `Duplicate`, and concurrent deliveries never
/// count past the rate limit.
pub trait StateStore: Send + Sync {
    /// Counts a delivery against the rate window; `false` means over the limit (a 429),
    /// and then nothing is recorded.
    fn count(&self, strategy: &str, now_ms: i64) -> bool;
    /// Claims a dedup key, or reports it as a duplicate within the window.
    fn claim(&self, strategy: &str, key: &DedupKey, now_ms: i64) -> Claim;
    /// Gives a claimed key back (the outcome was an error), so the sender's retry trades once.
    fn release(&self, strategy: &str, key: &DedupKey);
    /// What `count` would answer, recording nothing (for dry runs).
    fn peek_count(&self, strategy: &str, now_ms: i64) -> bool;
    /// What `claim` would answer, recording nothing (for dry runs).
    fn peek_claim(&self, strategy: &str, key: &DedupKey, now_ms: i64) -> Claim;
    /// Drops a strategy's state.
    fn forget(&self, strategy: &str);
}

/// The in-memory store: one small lock per strategy, so deliveries for different
/// strategies never wait on each other.
#[derive(Debug, Default)]
pub struct MemoryStore {
    limits: Limits,
    strategies: RwLock<HashMap<String, Arc<Mutex<Windows>>>>,
}

/// One strategy's windows. Memory is bounded by the rate limit: at most
/// `rate_limit × dedup_window / rate_window` live keys (300 by default).
#[derive(Debug, Default)]
pub struct Windows {
    /// Times of the deliveries counted in the current rate window, oldest first.
    rate: VecDeque<i64>,
    /// First 128 bits of the dedup key → first-seen time × 2, plus 1 once a duplicate
    /// was logged. 24-byte entries keep a full window within budget even after churn
    /// has grown the table to its steady 1,024 buckets; a 128-bit prefix of SHA-256
    /// cannot collide by accident among a few hundred live keys.
    seen: HashMap<ShortKey, i64>,
    /// Earliest time in `seen`, so expiry sweeps run only when something can expire.
    oldest: i64,
}

type ShortKey = [u8; 16];

fn short(key: &DedupKey) -> ShortKey {
    let mut k = [0u8; 16];
    k.copy_from_slice(&key[..16]);
    k
}

fn seen_at(packed: i64) -> i64 {
    packed >> 1
}

fn logged(packed: i64) -> bool {
    packed & 1 == 1
}

impl Windows {
    fn expire(&mut self, now: i64, limits: &Limits) {
        while self.rate.front().is_some_and(|&t| now - t >= limits.rate_window_ms) {
            self.rate.pop_front();
        }
        if !self.seen.is_empty() && now - self.oldest >= limits.dedup_window_ms {
            self.seen.retain(|_, p| now - seen_at(*p) < limits.dedup_window_ms);
            self.oldest = self.seen.values().map(|p| seen_at(*p)).min().unwrap_or(now);
        }
    }

    fn check(&self, key: &DedupKey, now: i64, limits: &Limits) -> Option<bool> {
        self.seen.get(&short(key)).filter(|p| now - seen_at(**p) < limits.dedup_window_ms).map(|p| logged(*p))
    }

    /// Bytes this strategy's windows hold on the heap (for the memory budget).
    pub fn heap_bytes(&self) -> usize {
        // hashbrown keeps a power-of-two bucket count at most 7/8 full, one control
        // byte per bucket plus a group's worth of trailing control bytes.
        let cap = self.seen.capacity();
        let buckets = if cap == 0 { 0 } else { (cap * 8 / 7).next_power_of_two() };
        let entry = std::mem::size_of::<(ShortKey, i64)>();
        let table = if buckets == 0 { 0 } else { buckets * (entry + 1) + 16 };
        self.rate.capacity() * std::mem::size_of::<i64>() + table
    }
}

impl MemoryStore {
    /// A store enforcing `limits`.
    pub fn new(limits: Limits) -> MemoryStore {
        MemoryStore { limits, strategies: RwLock::default() }
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn windows(&self, strategy: &str) -> Arc<Mutex<Windows>> {
        if let Some(w) = self.strategies.read().unwrap_or_else(|e| e.into_inner()).get(strategy) {
            return Arc::clone(w);
        }
        let mut map = self.strategies.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(strategy.to_string()).or_default())
    }

    /// Heap bytes held for one strategy's windows.
    pub fn heap_bytes(&self, strategy: &str) -> usize {
        self.windows(strategy).lock().map(|w| w.heap_bytes()).unwrap_or(0)
    }
}

impl MemoryStore {
    /// Puts back a dedup key claimed at `seen_at_ms` (for example from a host's database
    /// after a restart), so a redelivery within the window is still a duplicate.
    pub fn restore_key(&self, strategy: &str, key: &DedupKey, seen_at_ms: i64) {
        let w = self.windows(strategy);
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        if w.seen.is_empty() || seen_at_ms < w.oldest {
            w.oldest = seen_at_ms;
        }
        w.seen.entry(short(key)).or_insert(seen_at_ms << 1);
    }

    /// Puts back a delivery counted at `at_ms` against the rate window (after a restart).
    /// Times must be restored oldest first.
    pub fn restore_rate(&self, strategy: &str, at_ms: i64) {
        let w = self.windows(strategy);
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        w.rate.push_back(at_ms);
    }
}

impl StateStore for MemoryStore {
    fn count(&self, strategy: &str, now: i64) -> bool {
        let w = self.windows(strategy);
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        w.expire(now, &self.limits);
        if w.rate.len() >= self.limits.rate_limit as usize {
            return false;
        }
        w.rate.push_back(now);
        true
    }

    fn claim(&self, strategy: &str, key: &DedupKey, now: i64) -> Claim {
        let w = self.windows(strategy);
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        w.expire(now, &self.limits);
        if let Some(logged) = w.check(key, now, &self.limits) {
            if !logged {
                if let Some(p) = w.seen.get_mut(&short(key)) {
                    *p |= 1;
                }
            }
            return Claim::Duplicate { log: !logged };
        }
        if w.seen.is_empty() {
            w.oldest = now;
        }
        w.seen.insert(short(key), now << 1);
        Claim::Fresh
    }

    fn release(&self, strategy: &str, key: &DedupKey) {
        let w = self.windows(strategy);
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        w.seen.remove(&short(key));
    }

    fn peek_count(&self, strategy: &str, now: i64) -> bool {
        let w = self.windows(strategy);
        let w = w.lock().unwrap_or_else(|e| e.into_inner());
        let limits = &self.limits;
        // The times are oldest first: those still in the window are the tail after the expired ones, found by
        // bisection (a scan would cost a whole window per request under a high rate limit).
        let expired = w.rate.partition_point(|&t| now - t >= limits.rate_window_ms);
        w.rate.len() - expired < limits.rate_limit as usize
    }

    fn peek_claim(&self, strategy: &str, key: &DedupKey, now: i64) -> Claim {
        let w = self.windows(strategy);
        let w = w.lock().unwrap_or_else(|e| e.into_inner());
        match w.check(key, now, &self.limits) {
            Some(logged) => Claim::Duplicate { log: !logged },
            None => Claim::Fresh,
        }
    }

    fn forget(&self, strategy: &str) {
        self.strategies.write().unwrap_or_else(|e| e.into_inner()).remove(strategy);
    }
}

/// Answers a host worked out for one delivery in its own transaction (for example a
/// shared database: the rate count and the dedup claim made beside the outbox rows), for
/// [`Engine::deliver_settled`](crate::Engine::deliver_settled). It records which of them
/// the engine asked for, so the host keeps exactly what the engine kept: a rate mark only
/// if the delivery was counted, a dedup key only if it was claimed and not given back.
#[derive(Debug)]
pub struct Settled {
    within_rate: bool,
    claim: Claim,
    counted: AtomicBool,
    claimed: AtomicBool,
    released: AtomicBool,
}

impl Settled {
    /// What the host's store says: whether one more delivery fits the rate window, and
    /// what the dedup key is (`Fresh` when the host has just claimed it).
    pub fn new(within_rate: bool, claim: Claim) -> Settled {
        Settled {
            within_rate,
            claim,
            counted: AtomicBool::new(false),
            claimed: AtomicBool::new(false),
            released: AtomicBool::new(false),
        }
    }

    /// Whether the engine counted the delivery against the rate window (it reached the
    /// rate step and the window had room): the host records a rate mark.
    pub fn counted(&self) -> bool {
        self.counted.load(Ordering::Relaxed)
    }

    /// Whether the host keeps its fresh claim of the dedup key: the engine claimed it and
    /// did not give it back (an error outcome gives it back, so the retry trades once).
    pub fn keeps_claim(&self) -> bool {
        self.claim == Claim::Fresh && self.claimed.load(Ordering::Relaxed) && !self.released.load(Ordering::Relaxed)
    }
}

impl StateStore for Settled {
    fn count(&self, _strategy: &str, _now: i64) -> bool {
        if self.within_rate {
            self.counted.store(true, Ordering::Relaxed);
        }
        self.within_rate
    }

    fn claim(&self, _strategy: &str, _key: &DedupKey, _now: i64) -> Claim {
        self.claimed.store(true, Ordering::Relaxed);
        self.claim
    }

    fn release(&self, _strategy: &str, _key: &DedupKey) {
        self.released.store(true, Ordering::Relaxed);
    }

    fn peek_count(&self, _strategy: &str, _now: i64) -> bool {
        self.within_rate
    }

    fn peek_claim(&self, _strategy: &str, _key: &DedupKey, _now: i64) -> Claim {
        self.claim
    }

    fn forget(&self, _strategy: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// `peek_count` answers what `count` would, at any time, whatever deliveries came before: against a
        /// plain list of the counted times.
        #[test]
        fn peek_count_agrees_with_count_and_a_plain_list(steps in proptest::collection::vec((0i64..3_000, any::<bool>()), 1..200)) {
            let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
            let store = MemoryStore::new(limits);
            let mut now = 0;
            let mut counted: Vec<i64> = Vec::new();
            for (step, record) in steps {
                now += step;
                let live = counted.iter().filter(|&&t| now - t < limits.rate_window_ms).count();
                let room = live < limits.rate_limit as usize;
                prop_assert_eq!(store.peek_count("s", now), room);
                if record {
                    prop_assert_eq!(store.count("s", now), room);
                    if room {
                        counted.push(now);
                    }
                }
            }
        }
    }

    #[test]
    fn settled_answers_are_what_the_host_said() {
        let fresh = Settled::new(true, Claim::Fresh);
        assert!(fresh.count("s", 0) && fresh.peek_count("s", 0));
        assert_eq!(fresh.claim("s", &[0; 32], 0), Claim::Fresh);
        assert!(fresh.counted() && fresh.keeps_claim());
        fresh.release("s", &[0; 32]);
        assert!(!fresh.keeps_claim(), "given back");
        let full = Settled::new(false, Claim::Duplicate { log: true });
        assert!(!full.count("s", 0) && !full.counted());
        assert_eq!(full.peek_claim("s", &[0; 32], 0), Claim::Duplicate { log: true });
        assert!(!full.keeps_claim());
    }
}
