//! The `dedup_keys` and `rate_marks` tables: the core's dedup and rate windows, stored so that they survive a
//! restart, and pruned once they have left their windows.

use super::{Reader, StoreError};
use rusqlite::{params, Transaction};

pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS dedup_keys (
        id INTEGER PRIMARY KEY,
        strategy TEXT NOT NULL,
        key TEXT NOT NULL,
        ts_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS rate_marks (
        strategy TEXT NOT NULL,
        second INTEGER NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (strategy, second)
    ) WITHOUT ROWID;";

/// The core's windows: stored dedup keys and rate marks older than these are of no use and are pruned.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// The dedup window (ms).
    pub dedup_ms: i64,
    /// The rate window (ms).
    pub rate_ms: i64,
}

/// A delivery's trace in the dedup and rate windows, stored so that they survive a restart.
#[derive(Debug, Clone)]
pub struct Mark {
    /// The strategy's id.
    pub strategy: String,
    /// When it was counted.
    pub ts_ms: i64,
    /// The claimed dedup key (hex), for outcomes that keep it (processed, rejected).
    pub key: Option<String>,
}

/// Stores a delivery's rate mark and, when it claimed one, its dedup key.
pub(super) fn store_mark(tx: &Transaction<'_>, m: &Mark) -> rusqlite::Result<()> {
    // A count per strategy and second: under a high rate limit this updates one small row instead of inserting
    // one per delivery. Restored at the end of its second, a mark stays in the window at most 1 s longer than
    // it did, so a restart never loosens the limit.
    tx.prepare_cached(
        "INSERT INTO rate_marks (strategy, second, n) VALUES (?1, ?2, 1)
         ON CONFLICT(strategy, second) DO UPDATE SET n = n + 1",
    )?
    .execute(params![m.strategy, m.ts_ms.div_euclid(1000)])?;
    if let Some(key) = &m.key {
        // Rows are appended in time order (ids grow with time), which is what pruning relies on. A key is
        // stored once per window: a second claim of it within the window is a duplicate, not a new row.
        tx.prepare_cached("INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES (?1, ?2, ?3)")?
            .execute(params![m.strategy, key, m.ts_ms])?;
    }
    Ok(())
}

/// Deletes at most `at_most` of the oldest dedup keys, those claimed before `cutoff_ms`, and returns how many
/// went. Keys are appended in time order, so the expired ones are the oldest: this reads no more than `at_most`
/// rows however many keys are stored, and a commit that stores keys can afford it.
pub(super) fn prune_oldest_keys(tx: &Transaction<'_>, cutoff_ms: i64, at_most: usize) -> rusqlite::Result<usize> {
    tx.prepare_cached(
        "DELETE FROM dedup_keys WHERE id IN
             (SELECT id FROM (SELECT id, ts_ms FROM dedup_keys ORDER BY id LIMIT ?2) WHERE ts_ms < ?1)",
    )?
    .execute(params![cutoff_ms, i64::try_from(at_most).unwrap_or(i64::MAX)])
}

/// Deletes dedup keys and rate marks that have left their windows. Returns how many of each went.
pub(super) fn prune(tx: &Transaction<'_>, w: Windows, now_ms: i64) -> rusqlite::Result<(usize, usize)> {
    // Keys are appended in time order: the expired ones are those below the first id still in the window,
    // found by walking from the oldest row (no time index to keep up on every insert).
    let keys = tx.execute(
        "DELETE FROM dedup_keys WHERE id <
             coalesce((SELECT id FROM dedup_keys WHERE ts_ms >= ?1 ORDER BY id LIMIT 1), 9223372036854775807)",
        params![now_ms.saturating_sub(w.dedup_ms)],
    )?;
    let marks = tx.execute(
        "DELETE FROM rate_marks WHERE second < ?1",
        params![now_ms.saturating_sub(w.rate_ms).div_euclid(1000) - 1],
    )?;
    Ok((keys, marks))
}

impl Reader {
    /// Dedup keys claimed at or after `since_ms`: (strategy, key hex, time).
    pub fn dedup_keys(&self, since_ms: i64) -> Result<Vec<(String, String, i64)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                "SELECT strategy, key, ts_ms FROM dedup_keys WHERE ts_ms >= $1 ORDER BY ts_ms",
                &[&since_ms],
                |r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            );
        }
        self.query(
            "SELECT strategy, key, ts_ms FROM dedup_keys WHERE ts_ms >= ?1 ORDER BY id",
            params![since_ms],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// Rate marks at or after `since_ms`, oldest first: (strategy, time).
    pub fn rate_marks(&self, since_ms: i64) -> Result<Vec<(String, i64)>, StoreError> {
        if let Some(pg) = self.pg() {
            let marks: Vec<(String, i64, i64)> = pg.read(
                "SELECT strategy, ts_ms, n FROM rate_marks WHERE ts_ms >= $1 ORDER BY ts_ms",
                &[&since_ms],
                |r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            )?;
            // A mark counts all of one batch's deliveries of its strategy, at one instant.
            return Ok(marks
                .into_iter()
                .flat_map(|(s, at, n)| std::iter::repeat((s, at)).take(usize::try_from(n).unwrap_or(0)))
                .collect());
        }
        let seconds: Vec<(String, i64, i64)> = self.query(
            "SELECT strategy, second, n FROM rate_marks WHERE second >= ?1 ORDER BY second",
            params![since_ms.div_euclid(1000)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )?;
        let mut out = Vec::new();
        for (strategy, second, n) in seconds {
            let at = second * 1000 + 999;
            out.extend(std::iter::repeat((strategy, at)).take(usize::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }
}
