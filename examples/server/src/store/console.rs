//! What the operator console reads and does beyond the other tables' own: a summary of each strategy's alerts
//! since a time, one outbox row by id, and the two operator actions on a failed row (send it again, or set it
//! aside as dealt with).

use super::outbox::{outbox_row, pg_outbox_row, AFTER_OUTBOX_COLUMNS, OUTBOX_COLUMNS};
use super::{Op, OutboxRow, Reader, Refusals, StoreError, Writer};
use rusqlite::{params, Transaction};

/// One strategy's alerts of one decision since a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertCount {
    /// The strategy's id.
    pub strategy: String,
    /// `processed`, `rejected`, `duplicate`, `inactive` or `error`; or `refused`: deliveries refused before a
    /// decision (the rate limit, a body too large, slow or malformed, a busy server), which are not alerts.
    pub decision: String,
    /// How many alerts were answered with it (or deliveries refused).
    pub count: i64,
    /// When the last of them was answered (Unix ms); for `refused`, when the last window of refusals began.
    pub last_ms: i64,
}

impl Writer {
    /// Puts a `failed` outbox row back to `pending`, for its bot's dispatcher to send again. The caller has
    /// checked that a resend cannot double an order; a row that is no longer failed is left as it is.
    pub async fn requeue(&self, id: i64) -> Result<(), StoreError> {
        self.commit(Op::Requeue(id)).await
    }

    /// Marks a `failed` outbox row `dismissed`: the operator has dealt with it at the broker.
    pub async fn dismiss(&self, id: i64) -> Result<(), StoreError> {
        self.commit(Op::Dismiss(id)).await
    }
}

/// Applies [`Writer::requeue`].
pub(super) fn requeue(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE outbox SET status = 'pending', done_ms = NULL WHERE id = ?1 AND status = 'failed'",
        params![id],
    )?;
    Ok(())
}

/// Applies [`Writer::dismiss`].
pub(super) fn dismiss(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.execute("UPDATE outbox SET status = 'dismissed' WHERE id = ?1 AND status = 'failed'", params![id])?;
    Ok(())
}

impl Reader {
    /// Alerts answered since `since_ms`, by strategy and decision, and beside them, under `refused`, the
    /// deliveries refused before a decision. An alert's log rows share its time and alerts, so distinct (time,
    /// alerts) pairs count alerts; the rows a delivery writes (`[]` alerts under `processed`) are not alerts of
    /// their own, and a refusal row (429, 413, 503, 408, 400) stands for its window's deliveries: counted as one
    /// `error` alert, "3 deliveries refused" read `error 1`, so they are counted from its message instead.
    pub fn alert_counts(&self, since_ms: i64) -> Result<Vec<AlertCount>, StoreError> {
        let refusal = Refusals::ROW;
        let (mut counts, refusals): (Vec<AlertCount>, Vec<(String, String, i64)>) = if let Some(pg) = self.pg() {
            // PostgreSQL keeps an index on the time: no bisection needed.
            let counts = pg.read(
                &format!(
                    "SELECT strategy, decision, count(DISTINCT ts_ms || ' ' || alerts), max(ts_ms) FROM logs
                     WHERE ts_ms >= $1 AND NOT (decision = 'processed' AND alerts = '[]') AND NOT ({refusal})
                     GROUP BY strategy, decision ORDER BY strategy, decision"
                ),
                &[&since_ms],
                |r| {
                    Ok(AlertCount {
                        strategy: r.try_get(0)?,
                        decision: r.try_get(1)?,
                        count: r.try_get(2)?,
                        last_ms: r.try_get(3)?,
                    })
                },
            )?;
            let refusals = pg.read(
                &format!("SELECT strategy, message, ts_ms FROM logs WHERE ts_ms >= $1 AND {refusal}"),
                &[&since_ms],
                |r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            )?;
            (counts, refusals)
        } else {
            let first = self.first_log_id_since(since_ms)?;
            let counts = self.query(
                &format!(
                    "SELECT strategy, decision, count(DISTINCT ts_ms || ' ' || alerts), max(ts_ms) FROM logs
                     WHERE id >= ?2 AND ts_ms >= ?1 AND NOT (decision = 'processed' AND alerts = '[]')
                     AND NOT ({refusal})
                     GROUP BY strategy, decision ORDER BY strategy, decision"
                ),
                params![since_ms, first],
                |r| Ok(AlertCount { strategy: r.get(0)?, decision: r.get(1)?, count: r.get(2)?, last_ms: r.get(3)? }),
            )?;
            let refusals = self.query(
                &format!("SELECT strategy, message, ts_ms FROM logs WHERE id >= ?2 AND ts_ms >= ?1 AND {refusal}"),
                params![since_ms, first],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )?;
            (counts, refusals)
        };
        // One row per strategy, answer and window: a day holds a few thousand at most, even under a flood.
        let mut refused: Vec<AlertCount> = Vec::new();
        for (strategy, message, ts_ms) in refusals {
            let n = Refusals::count_in(&message);
            match refused.iter_mut().find(|c| c.strategy == strategy) {
                Some(c) => {
                    c.count += n;
                    c.last_ms = c.last_ms.max(ts_ms);
                }
                None => refused.push(AlertCount { strategy, decision: "refused".into(), count: n, last_ms: ts_ms }),
            }
        }
        counts.extend(refused);
        counts.sort_by(|a, b| (&a.strategy, &a.decision).cmp(&(&b.strategy, &b.decision)));
        Ok(counts)
    }

    /// A lower bound of the first log row at or after `since_ms`, found by bisecting row ids (they grow with
    /// time), so that the day's counts read the day's rows and not the whole table (there is no index on time).
    /// The 429 summary rows carry their window's start, a little older than their id: the bound is taken a
    /// minute early, and the count's own `ts_ms` condition stays exact.
    fn first_log_id_since(&self, since_ms: i64) -> Result<i64, StoreError> {
        let bounds = self.query("SELECT min(id), max(id) FROM logs", [], |r| {
            Ok((r.get::<_, Option<i64>>(0)?, r.get::<_, Option<i64>>(1)?))
        })?;
        let Some((Some(mut lo), Some(mut hi))) = bounds.first().copied() else { return Ok(0) };
        let target = since_ms.saturating_sub(60_000);
        // Invariant: every row below `lo` is older than `target`; the answer is at most `hi + 1`.
        hi += 1;
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let ts =
                self.query("SELECT id, ts_ms FROM logs WHERE id >= ?1 ORDER BY id LIMIT 1", params![mid], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })?;
            match ts.first() {
                Some(&(id, ts)) if ts < target => lo = id + 1,
                _ => hi = mid,
            }
        }
        Ok(lo)
    }

    /// Whether the database holds log or outbox rows of a strategy (one that is not loaded any more).
    pub fn has_rows(&self, strategy: &str) -> Result<bool, StoreError> {
        if let Some(pg) = self.pg() {
            let found = pg.read(
                "SELECT EXISTS(SELECT 1 FROM logs WHERE strategy = $1) OR EXISTS(SELECT 1 FROM outbox WHERE strategy = $1)",
                &[&strategy],
                |r| r.try_get::<_, bool>(0),
            )?;
            return Ok(found.first().copied().unwrap_or(false));
        }
        let found = self.query(
            "SELECT EXISTS(SELECT 1 FROM logs WHERE strategy = ?1) OR EXISTS(SELECT 1 FROM outbox WHERE strategy = ?1)",
            params![strategy],
            |r| r.get::<_, bool>(0),
        )?;
        Ok(found.first().copied().unwrap_or(false))
    }

    /// Outbox rows by strategy and state (for the metrics).
    pub fn outbox_depth(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read("SELECT strategy, status, count(*) FROM outbox GROUP BY strategy, status", &[], |r| {
                Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
            });
        }
        self.query("SELECT strategy, status, count(*) FROM outbox GROUP BY strategy, status", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
    }

    /// One of a strategy's outbox rows with its result.
    pub fn outbox_entry(&self, strategy: &str, id: i64) -> Result<Option<(OutboxRow, Option<String>)>, StoreError> {
        if let Some(pg) = self.pg() {
            let rows = pg.read(
                &format!("SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = $1 AND id = $2"),
                &[&strategy, &id],
                |r| Ok((pg_outbox_row(r)?, r.try_get(AFTER_OUTBOX_COLUMNS)?)),
            )?;
            return Ok(rows.into_iter().next());
        }
        let rows = self.query(
            &format!("SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 AND id = ?2"),
            params![strategy, id],
            |r| Ok((outbox_row(r)?, r.get(AFTER_OUTBOX_COLUMNS)?)),
        )?;
        Ok(rows.into_iter().next())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{LogEntry, Mark, RowCaps, Store, Sync};
    use strategy_webhook::Level;

    fn entry(ts_ms: i64, decision: &'static str, alerts: &str) -> LogEntry {
        LogEntry {
            ts_ms,
            strategy: "s".into(),
            decision,
            http_status: 200,
            alerts: alerts.into(),
            records: vec![(Level::Info, "parsed".into()), (Level::Warn, "second row of the same alert".into())],
        }
    }

    #[tokio::test]
    async fn alerts_today_count_alerts_not_rows_and_skip_older_ones() {
        let dir =
            std::env::temp_dir().join(format!("swh-console-{}-{:?}", std::process::id(), std::thread::current().id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        // Yesterday's alerts, then today's: two processed (one with its delivery row), one rejected.
        let day = 86_400_000;
        let mut n = 0;
        let mut commit = |e: LogEntry| {
            n += 1;
            let mark = Mark { strategy: "s".into(), ts_ms: e.ts_ms, key: Some(format!("{n:02x}")) };
            let w = writer.clone();
            async move { w.outbox(mark, Vec::new(), Some(e)).await.unwrap() }
        };
        for i in 0..50 {
            commit(entry(day - 3_600_000 + i, "processed", r#"[{"i":"old"}]"#)).await;
        }
        commit(entry(day + 1, "processed", r#"[{"i":"A"}]"#)).await;
        commit(entry(day + 2, "processed", "[]")).await; // a delivery's row
        commit(entry(day + 3, "processed", r#"[{"i":"B"}]"#)).await;
        commit(entry(day + 4, "rejected", r#"[{"i":"C"}]"#)).await;
        let counts = reader.alert_counts(day).unwrap();
        let got: Vec<(&str, i64, i64)> = counts.iter().map(|c| (c.decision.as_str(), c.count, c.last_ms)).collect();
        assert_eq!(got, vec![("processed", 2, day + 3), ("rejected", 1, day + 4)]);
        // The bisection lands on today's first row (yesterday's ended over a minute before).
        let first = reader.first_log_id_since(day).unwrap();
        assert_eq!(first, 101, "50 alerts of two rows each came before");
        assert!(reader.alert_counts(2 * day).unwrap().is_empty());
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A day's alerts beside deliveries refused before a decision, written to `store`: a window of three
    /// bodies over the limit (413: one row whose count grew), one of two over the rate limit (429), a processed
    /// alert and one that failed (500). Gives the day's counts as (decision, count).
    async fn alerts_and_refusals(store: &Store) -> Vec<(String, i64)> {
        use super::super::Refusals;
        let writer = store.writer();
        let day = 86_400_000;
        let r = |count, update, status| Refusals {
            strategy: "s".into(),
            since_ms: day + 5,
            count,
            limit: 60,
            update,
            status,
        };
        writer.refusals(r(1, false, 413)).await;
        writer.refusals(r(3, true, 413)).await;
        writer.refusals(r(2, false, 429)).await;
        writer.log(Some(LogEntry { http_status: 500, ..entry(day + 7, "error", r#"[{"i":"B"}]"#) }), None).await;
        // An awaited commit after them: the writer commits in order.
        let mark = Mark { strategy: "s".into(), ts_ms: day + 9, key: None };
        writer.outbox(mark, Vec::new(), Some(entry(day + 9, "processed", r#"[{"i":"A"}]"#))).await.unwrap();
        let reader = store.reader();
        let counts = tokio::task::spawn_blocking(move || reader.alert_counts(day)).await.unwrap().unwrap();
        counts.into_iter().map(|c| (c.decision, c.count)).collect()
    }

    /// The expected counts: the failed alert is the one error; the five refused deliveries are not alerts,
    /// counted apart, every one (a window's row read as one `error` alert, "3 deliveries refused" was `error 1`).
    fn refused_apart() -> Vec<(String, i64)> {
        vec![("error".into(), 1), ("processed".into(), 1), ("refused".into(), 5)]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn alerts_today_count_every_refused_delivery_of_a_window_apart() {
        let dir = std::env::temp_dir().join(format!(
            "swh-console-refused-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        assert_eq!(alerts_and_refusals(&store).await, refused_apart());
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn alerts_today_count_every_refused_delivery_of_a_window_apart_on_postgresql() {
        let server = tokio::task::spawn_blocking(super::super::pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        assert_eq!(alerts_and_refusals(&store).await, refused_apart());
        store.close().await.unwrap();
    }
}
