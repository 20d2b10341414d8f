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
        last_ms INTEGER,
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
    // one per delivery. Restored at the latest instant counted in its second (`last_ms`), a mark stays in the
    // window no longer than that second's span past its own time, so a restart never loosens the limit; restored
    // at the second's end, a burst at a second's start was refused for up to 1 s past its window after a restart.
    // A row of an earlier version has no `last_ms`: its second's end stands for it.
    tx.prepare_cached(
        "INSERT INTO rate_marks (strategy, second, n, last_ms) VALUES (?1, ?2, 1, ?3)
         ON CONFLICT(strategy, second) DO UPDATE
         SET n = n + 1, last_ms = max(coalesce(last_ms, second * 1000 + 999), excluded.last_ms)",
    )?
    .execute(params![m.strategy, m.ts_ms.div_euclid(1000), m.ts_ms])?;
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
///
/// The oldest `at_most` are those up to the `at_most`-th id, read by one walk of the table's first ids, so the
/// delete is a range of rowids with a time test on each: `id IN (subquery)` built a temporary table for its ids at
/// every commit that stored a key, about a tenth of the writer's statements under load. Only the time test
/// decides which of them go: a key claimed later but committed earlier than its neighbours stays.
pub(super) fn prune_oldest_keys(tx: &Transaction<'_>, cutoff_ms: i64, at_most: usize) -> rusqlite::Result<usize> {
    if at_most == 0 {
        return Ok(0);
    }
    tx.prepare_cached(PRUNE_OLDEST)?.execute(params![cutoff_ms, i64::try_from(at_most).unwrap_or(i64::MAX)])
}

/// [`prune_oldest_keys`]' statement: ?1 the cutoff, ?2 how many of the oldest keys it may look at (at least 1).
const PRUNE_OLDEST: &str = "DELETE FROM dedup_keys WHERE ts_ms < ?1 AND id <=
     coalesce((SELECT id FROM dedup_keys ORDER BY id LIMIT 1 OFFSET ?2 - 1), 9223372036854775807)";

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

/// Brings dedup keys stored later than `now_ms` back to it, at the start, before the windows are restored: they were
/// stored under a clock that has gone back since. The core brings them back in memory once it sees the step, but
/// left ahead in the table, every restart within the step restored them for another window, and the same alert was
/// answered `duplicate` for as long as the step. A nondecreasing run of times stays so, as pruning needs.
pub(super) fn rewind_keys(conn: &rusqlite::Connection, now_ms: i64) -> rusqlite::Result<usize> {
    conn.execute("UPDATE dedup_keys SET ts_ms = ?1 WHERE ts_ms > ?1", params![now_ms])
}

/// Deletes rate marks stored in seconds later than `now_ms`'s, at the start, beside [`rewind_keys`]: they were
/// counted under a clock that has gone back since, and when those deliveries came on this clock cannot be told.
/// Restored ahead, the latest of them was the core's latest entry, and the first delivery's step back from it aged
/// every restored key by the gap (a resend traded twice); brought back to now and still counted, they refused a
/// minute of the trader's alerts 429 for deliveries likely long past. Dropped, a window straddling the restart may
/// take more than the limit once: the rate limit guards against floods, the dedup keys (kept) against trading twice.
pub(super) fn drop_marks_ahead(conn: &rusqlite::Connection, now_ms: i64) -> rusqlite::Result<usize> {
    conn.execute("DELETE FROM rate_marks WHERE second > ?1", params![now_ms.div_euclid(1000)])
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
        let seconds: Vec<(String, i64, i64, Option<i64>)> = self.query(
            "SELECT strategy, second, n, last_ms FROM rate_marks WHERE second >= ?1 ORDER BY second",
            params![since_ms.div_euclid(1000)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let mut out = Vec::new();
        for (strategy, second, n, last_ms) in seconds {
            // Within its second, or the second's end: a row whose instant is not in its second (edited by hand, or
            // moved by one column only) is restored as before the instant was kept.
            let at = last_ms.filter(|l| l.div_euclid(1000) == second).unwrap_or(second * 1000 + 999);
            out.extend(std::iter::repeat((strategy, at)).take(usize::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statement this one replaced, which says what "the oldest `at_most`, those claimed before the cutoff"
    /// means in the plainest terms.
    const BY_SUBQUERY: &str = "DELETE FROM dedup_keys WHERE id IN
         (SELECT id FROM (SELECT id, ts_ms FROM dedup_keys ORDER BY id LIMIT ?2) WHERE ts_ms < ?1)";

    fn table(times: &[i64]) -> rusqlite::Connection {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        for (i, t) in times.iter().enumerate() {
            c.execute("INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES ('s', ?1, ?2)", params![i.to_string(), t])
                .unwrap();
        }
        c
    }

    /// Keys stored ahead of the clock come back to it; the others keep their times.
    #[test]
    fn keys_stored_ahead_are_brought_back_to_now() {
        let c = table(&[10, 20, 30, 500, 900]);
        assert_eq!(rewind_keys(&c, 100).unwrap(), 2);
        let mut st = c.prepare("SELECT ts_ms FROM dedup_keys ORDER BY id").unwrap();
        let times: Vec<i64> = st.query_map([], |r| r.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap();
        assert_eq!(times, [10, 20, 30, 100, 100]);
    }

    /// Rate marks stored in seconds ahead of the clock are dropped, each row of them; the others stay.
    #[test]
    fn rate_marks_stored_ahead_are_dropped() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        for (s, second, n, last) in
            [("a", 90, 2, 90_500), ("a", 100, 1, 100_200), ("a", 500, 3, 500_900), ("b", 700, 1, 700_001)]
        {
            c.execute(
                "INSERT INTO rate_marks (strategy, second, n, last_ms) VALUES (?1, ?2, ?3, ?4)",
                params![s, second, n, last],
            )
            .unwrap();
        }
        assert_eq!(drop_marks_ahead(&c, 100_700).unwrap(), 2);
        let mut st =
            c.prepare("SELECT strategy, second, n, last_ms FROM rate_marks ORDER BY strategy, second").unwrap();
        let rows: Vec<(String, i64, i64, i64)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        let want = [("a", 90, 2, 90_500), ("a", 100, 1, 100_200)];
        assert_eq!(rows, want.map(|(s, a, b, c)| (s.to_string(), a, b, c)));
        assert_eq!(drop_marks_ahead(&c, 100_700).unwrap(), 0, "nothing ahead any more");
    }

    fn left(c: &rusqlite::Connection) -> Vec<i64> {
        let mut st = c.prepare("SELECT id FROM dedup_keys ORDER BY id").unwrap();
        st.query_map([], |r| r.get(0)).unwrap().collect::<rusqlite::Result<_>>().unwrap()
    }

    /// The same rows go as with the plain statement, for times mostly but not always in id order (a key claimed a
    /// moment later can commit first), ids with gaps (deleted rows), any cutoff and any limit: 2,000 tables drawn
    /// from a fixed seed.
    #[test]
    fn the_range_deletes_what_the_subquery_deleted() {
        let mut draw = super::super::tests::draws(0x2545_f491_4f6c_dd1d);
        let mut deleted_some = 0;
        for case in 0..2000 {
            let mut times: Vec<i64> = (0..draw(60)).map(|_| draw(40) as i64).collect();
            times.sort_unstable();
            // A few neighbours swapped: not quite in order.
            for i in (1..times.len()).step_by(1 + draw(7) as usize) {
                times.swap(i - 1, i);
            }
            let (new, old) = (table(&times), table(&times));
            for id in 1..=times.len() as i64 {
                if draw(4) == 0 {
                    for c in [&new, &old] {
                        c.execute("DELETE FROM dedup_keys WHERE id = ?1", params![id]).unwrap();
                    }
                }
            }
            let (cutoff, at_most) = (draw(45) as i64, draw(70) as usize);
            let tx = new.unchecked_transaction().unwrap();
            let n = prune_oldest_keys(&tx, cutoff, at_most).unwrap();
            tx.commit().unwrap();
            let m = old.execute(BY_SUBQUERY, params![cutoff, at_most as i64]).unwrap();
            assert_eq!(
                (n, left(&new)),
                (m, left(&old)),
                "case {case}: times {times:?} cutoff {cutoff} at most {at_most}"
            );
            deleted_some += usize::from(n > 0 && !left(&new).is_empty());
        }
        assert!(deleted_some > 200, "cases that deleted some rows and kept others: {deleted_some}");
    }

    #[test]
    fn the_delete_builds_no_temporary_table() {
        let c = table(&[1, 2, 3]);
        let plan = |sql: &str| super::super::tests::query_plan(&c, sql, params![2, 2]);
        let new = plan(PRUNE_OLDEST);
        assert!(new.iter().all(|p| !p.contains("TEMP B-TREE") && !p.contains("LIST SUBQUERY")), "{new:?}");
        assert!(new.iter().any(|p| p.contains("rowid<?")), "a range of rowids: {new:?}");
        let old = plan(BY_SUBQUERY);
        assert!(old.iter().any(|p| p.contains("LIST SUBQUERY")), "the old statement's list: {old:?}");
    }
}
