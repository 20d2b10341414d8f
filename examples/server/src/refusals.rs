//! Deliveries refused by the rate limit (429), for a body over the limit (413), or lost to their sender before a
//! decision (503 busy, 408 a body too slow, 400 a malformed request), counted per strategy, answer and window and
//! stored as one row per window ("61 deliveries refused: rate limit 60/min", a WARN; "3 deliveries refused: the
//! body is over 262,144 bytes (256 KiB)", an ERROR, as the others are), never one row per refused request: a flood
//! stays visible in the strategy's Logs without flooding them (a 413 costs the sender nothing, not even a place
//! in the rate window, and one row each let a token holder push the strategy's older rows out of its cap).
//!
//! A window starts at a strategy's first refusal and lasts the rate window (60 s). Refusals only bump a
//! counter in memory; [`RateRefusals::flush`], run every second, queues the row (insert, then count updates)
//! for the windows whose count changed, so a flood costs at most one row write per strategy and second.

use crate::store::{Refusals, Writer};
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug)]
struct Window {
    since_ms: i64,
    count: u64,
    /// The count last queued for the database (0: the row is not written yet).
    written: u64,
}

/// The refusal counters (see the module).
pub struct RateRefusals {
    limit: u32,
    window_ms: i64,
    /// Per strategy and answer (429 or 413): its windows not yet fully written, oldest first.
    windows: Mutex<HashMap<(String, u16), Vec<Window>>>,
}

impl RateRefusals {
    /// Counters for a rate limit of `limit` per `window_ms`.
    pub fn new(limit: u32, window_ms: i64) -> RateRefusals {
        RateRefusals { limit, window_ms: window_ms.max(1), windows: Mutex::default() }
    }

    /// Counts one delivery refused by the rate limit.
    pub fn note(&self, strategy: &str, now_ms: i64) {
        self.note_answer(strategy, 429, now_ms);
    }

    /// Counts one delivery refused for a body over the limit.
    pub fn note_too_large(&self, strategy: &str, now_ms: i64) {
        self.note_answer(strategy, 413, now_ms);
    }

    /// Counts one delivery refused before a decision with `status`: 503 (the server busy), 408 (its body too
    /// slow) or 400 (its request malformed). Its sender, which rarely retries these, lost it: without a row the
    /// strategy's Logs showed nothing of the lost trade.
    pub fn note_lost(&self, strategy: &str, status: u16, now_ms: i64) {
        self.note_answer(strategy, status, now_ms);
    }

    fn note_answer(&self, strategy: &str, status: u16, now_ms: i64) {
        let mut all = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let list = all.entry((strategy.to_owned(), status)).or_default();
        match list.last_mut() {
            Some(w) if now_ms < w.since_ms + self.window_ms => w.count += 1,
            _ => list.push(Window { since_ms: now_ms, count: 1, written: 0 }),
        }
    }

    /// The rows to queue now: one per window whose count changed since it was last queued. Windows that
    /// have closed and are written are forgotten.
    pub fn due(&self, now_ms: i64) -> Vec<Refusals> {
        let mut all = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for ((strategy, status), list) in all.iter_mut() {
            for w in list.iter_mut().filter(|w| w.count > w.written) {
                out.push(Refusals {
                    strategy: strategy.clone(),
                    since_ms: w.since_ms,
                    count: w.count,
                    limit: self.limit,
                    update: w.written > 0,
                    status: *status,
                });
                w.written = w.count;
            }
            list.retain(|w| now_ms < w.since_ms + self.window_ms);
        }
        all.retain(|_, list| !list.is_empty());
        out
    }

    /// Queues what [`RateRefusals::due`] gives for the database.
    pub async fn flush(&self, writer: &Writer, now_ms: i64) {
        for r in self.due(now_ms) {
            writer.refusals(r).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_one_row_whose_count_grows() {
        let r = RateRefusals::new(60, 60_000);
        for t in 0..3 {
            r.note("a", 1_000 + t);
        }
        let rows = r.due(1_010);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].message(), "3 deliveries refused: rate limit 60/min");
        assert!(!rows[0].update);
        assert_eq!(rows[0].since_ms, 1_000);
        assert!(r.due(1_020).is_empty(), "nothing changed, nothing to write");
        r.note("a", 30_000);
        let rows = r.due(30_001);
        assert_eq!((rows[0].count, rows[0].update, rows[0].since_ms), (4, true, 1_000));
        // After the window, a new row.
        r.note("a", 61_000);
        r.note("b", 61_000);
        let mut rows = r.due(61_001);
        rows.sort_by(|x, y| x.strategy.cmp(&y.strategy));
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].strategy.as_str(), rows[0].since_ms, rows[0].update), ("a", 61_000, false));
        assert_eq!(rows[1].message(), "1 delivery refused: rate limit 60/min");
    }

    #[test]
    fn bodies_over_the_limit_are_counted_apart_as_errors() {
        let r = RateRefusals::new(60, 60_000);
        r.note("a", 1_000);
        for t in 0..100 {
            r.note_too_large("a", 1_000 + t);
        }
        let mut rows = r.due(1_200);
        rows.sort_by_key(|x| x.status);
        assert_eq!(rows.len(), 2, "one row per answer: {rows:?}");
        assert_eq!((rows[0].status, rows[0].level(), rows[0].count), (413, "ERROR", 100));
        assert_eq!(rows[0].message(), "100 deliveries refused: the body is over 262,144 bytes (256 KiB)");
        assert_eq!((rows[1].status, rows[1].level(), rows[1].count), (429, "WARN", 1));
    }

    #[test]
    fn alerts_lost_before_a_decision_are_counted_as_errors_per_answer() {
        let r = RateRefusals::new(60, 60_000);
        r.note_lost("a", 503, 1_000);
        r.note_lost("a", 503, 1_001);
        r.note_lost("a", 408, 1_002);
        let mut rows = r.due(1_100);
        rows.sort_by_key(|x| x.status);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!((rows[0].status, rows[0].level()), (408, "ERROR"));
        assert_eq!(rows[0].message(), "1 delivery refused: the body did not arrive in time (408)");
        assert_eq!((rows[1].status, rows[1].level(), rows[1].count), (503, "ERROR", 2));
        assert!(
            rows[1].message().starts_with("2 deliveries refused: the server was busy (503"),
            "{}",
            rows[1].message()
        );
    }
}
