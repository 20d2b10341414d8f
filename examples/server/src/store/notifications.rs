//! The `notifications` table: messages for a strategy's notification URL (a chat webhook), queued durably and
//! sent by `crate::notify`'s sender, retried with backoff until the receiver takes them or the tries run out.

use super::{Op, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};

pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS notifications (
        id INTEGER PRIMARY KEY,
        strategy TEXT NOT NULL,
        event TEXT NOT NULL,
        text TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_ms INTEGER NOT NULL,
        last_error TEXT
    );
    CREATE INDEX IF NOT EXISTS notifications_due ON notifications(next_ms) WHERE status = 'pending';";

/// One queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Row id (0 before the insert).
    pub id: i64,
    /// The strategy whose URL it goes to.
    pub strategy: String,
    /// `order`, `failure` or `rotation`.
    pub event: String,
    /// The message.
    pub text: String,
    /// Tries so far.
    pub attempts: i64,
}

/// What a try at sending came to.
#[derive(Debug, Clone)]
pub enum Sent {
    /// The receiver took it.
    Done,
    /// Try again at `next_ms`.
    Retry { next_ms: i64, error: String },
    /// No more tries.
    GaveUp { error: String },
}

impl Writer {
    /// Queues a message, committed before this returns.
    pub async fn notification(&self, strategy: &str, event: &str, text: String, now_ms: i64) -> Result<(), StoreError> {
        self.commit(Op::Notify { strategy: strategy.to_owned(), event: event.to_owned(), text, now_ms }).await
    }

    /// Records a try at sending message `id`.
    pub async fn notification_sent(&self, id: i64, sent: Sent) -> Result<(), StoreError> {
        self.commit(Op::NotifySent(id, sent)).await
    }
}

pub(super) fn insert(
    tx: &Transaction<'_>,
    strategy: &str,
    event: &str,
    text: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO notifications (strategy, event, text, created_ms, status, next_ms)
         VALUES (?1, ?2, ?3, ?4, 'pending', ?4)",
        params![strategy, event, text, now_ms],
    )?;
    Ok(())
}

pub(super) fn sent(tx: &Transaction<'_>, id: i64, s: &Sent) -> rusqlite::Result<()> {
    match s {
        Sent::Done => tx.execute(
            "UPDATE notifications SET status = 'sent', attempts = attempts + 1, last_error = NULL WHERE id = ?1",
            params![id],
        )?,
        Sent::Retry { next_ms, error } => tx.execute(
            "UPDATE notifications SET attempts = attempts + 1, next_ms = ?2, last_error = ?3 WHERE id = ?1",
            params![id, next_ms, error],
        )?,
        Sent::GaveUp { error } => tx.execute(
            "UPDATE notifications SET status = 'failed', attempts = attempts + 1, last_error = ?2 WHERE id = ?1",
            params![id, error],
        )?,
    };
    Ok(())
}

/// Deletes sent and abandoned messages created before `cutoff_ms`.
pub(super) fn prune(tx: &Transaction<'_>, cutoff_ms: i64) -> rusqlite::Result<usize> {
    tx.execute(PRUNE, params![cutoff_ms])
}

/// [`prune`]'s statement, as the outbox's: rows are stored in time order, so those before the cutoff are a range
/// of ids, ending at the first row from the cutoff on (found by walking the ids from the oldest). By time alone,
/// with no index on it, every minute's prune read the whole table (a month of messages) inside the writer's
/// transaction, and every alert's answer and delivery record waited for it.
const PRUNE: &str = "DELETE FROM notifications
     WHERE id < coalesce((SELECT id FROM notifications WHERE created_ms >= ?1 ORDER BY id LIMIT 1), 9223372036854775807)
       AND status <> 'pending' AND created_ms < ?1";

impl Reader {
    /// Pending messages due by `now_ms`, oldest first: at most `per_strategy` of each strategy and `limit` in
    /// all, none of the strategies in `skip` (their messages are being sent).
    pub fn due_notifications(
        &self,
        now_ms: i64,
        per_strategy: u32,
        limit: u32,
        skip: &[String],
    ) -> Result<Vec<Notification>, StoreError> {
        let row = |id, strategy, event, text, attempts| Notification { id, strategy, event, text, attempts };
        if let Some(pg) = self.pg() {
            // Several servers send from one table: each takes its messages for a minute, skipping those another
            // is taking, so a message goes out once. A skipped strategy's are not taken: they would wait out
            // the claim after its sends end. The claim's conditions are repeated where the rows are locked and
            // updated: a message another server claimed and committed after this statement's snapshot was
            // taken is re-read there (READ COMMITTED re-checks only those levels' own conditions), and was
            // otherwise claimed by both and sent twice.
            let mut due = pg.read(
                "UPDATE notifications SET claimed_until = $1 + 60000 WHERE id IN
                     (SELECT id FROM notifications WHERE id IN
                         (SELECT id FROM
                             (SELECT id, row_number() OVER (PARTITION BY strategy ORDER BY id) AS n
                              FROM notifications
                              WHERE status = 'pending' AND next_ms <= $1
                                    AND (claimed_until IS NULL OR claimed_until < $1)
                                    AND NOT (strategy = ANY($3))) AS due
                          WHERE n <= $4)
                        AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1)
                      ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)
                   AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < $1)
                 RETURNING id, strategy, event, text, attempts",
                &[&now_ms, &i64::from(limit), &skip, &i64::from(per_strategy)],
                |r| Ok(row(r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?, r.try_get(4)?)),
            )?;
            // RETURNING keeps no order: each strategy's are sent oldest first.
            due.sort_by_key(|n| n.id);
            return Ok(due);
        }
        let due = self.query(
            "SELECT id, strategy, event, text, attempts FROM
                 (SELECT id, strategy, event, text, attempts,
                         row_number() OVER (PARTITION BY strategy ORDER BY id) AS n
                  FROM notifications WHERE status = 'pending' AND next_ms <= ?1)
             WHERE n <= ?2 ORDER BY id LIMIT ?3",
            params![now_ms, per_strategy, limit],
            |r| Ok(row(r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
        Ok(due.into_iter().filter(|n| !skip.contains(&n.strategy)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every minute's prune read the whole table: the statement deletes a range of ids instead (its subquery
    /// walks the ids from the oldest to the first row from the cutoff on, and stops there).
    #[test]
    fn the_prune_walks_a_range_of_ids() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        let plan = super::super::tests::query_plan(&c, PRUNE, params![5]);
        assert!(
            plan.iter().any(|p| p.contains("SEARCH notifications USING INTEGER PRIMARY KEY (rowid<?)")),
            "{plan:?}"
        );
    }

    /// It deletes what the statement by time alone did: sent or failed rows before the cutoff, never a pending
    /// one nor a newer one.
    #[test]
    fn the_prune_deletes_the_finished_rows_before_the_cutoff() {
        let rows = [(1, "sent"), (2, "pending"), (3, "failed"), (4, "sent"), (6, "sent"), (7, "pending")];
        for cutoff in 0..=8 {
            let mut c = rusqlite::Connection::open_in_memory().unwrap();
            c.execute_batch(SCHEMA).unwrap();
            for (created, status) in rows {
                c.execute(
                    "INSERT INTO notifications (strategy, event, text, created_ms, status, next_ms)
                     VALUES ('s', 'order', 't', ?1, ?2, 0)",
                    params![created, status],
                )
                .unwrap();
            }
            let tx = c.transaction().unwrap();
            prune(&tx, cutoff).unwrap();
            let left: Vec<(i64, String)> = tx
                .prepare("SELECT created_ms, status FROM notifications ORDER BY id")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let want: Vec<(i64, String)> = rows
                .iter()
                .filter(|(created, status)| *status == "pending" || *created >= cutoff)
                .map(|(c, s)| (*c, s.to_string()))
                .collect();
            assert_eq!(left, want, "cutoff {cutoff}");
        }
    }
}
