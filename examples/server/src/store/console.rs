//! What the operator console reads and does beyond the other tables' own: a summary of each strategy's alerts
//! since a time, one outbox row by id, and the two operator actions on a failed row (send it again, or set it
//! aside as dealt with).

use super::outbox::{outbox_row, OUTBOX_COLUMNS};
use super::{Op, OutboxRow, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};

/// One strategy's alerts of one decision since a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertCount {
    /// The strategy's id.
    pub strategy: String,
    /// `processed`, `rejected`, `duplicate`, `inactive` or `error`.
    pub decision: String,
    /// How many alerts were answered with it.
    pub count: i64,
    /// When the last of them was answered (Unix ms).
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
    /// Alerts answered since `since_ms`, by strategy and decision. An alert's log rows share its time and
    /// alerts, so distinct (time, alerts) pairs count alerts; the rows a delivery writes (`[]` alerts under
    /// `processed`) and the 429 summaries are not alerts of their own.
    pub fn alert_counts(&self, since_ms: i64) -> Result<Vec<AlertCount>, StoreError> {
        self.query(
            "SELECT strategy, decision, count(DISTINCT ts_ms || ' ' || alerts), max(ts_ms) FROM logs
             WHERE ts_ms >= ?1 AND http_status <> 429 AND NOT (decision = 'processed' AND alerts = '[]')
             GROUP BY strategy, decision ORDER BY strategy, decision",
            params![since_ms],
            |r| Ok(AlertCount { strategy: r.get(0)?, decision: r.get(1)?, count: r.get(2)?, last_ms: r.get(3)? }),
        )
    }

    /// Whether the database holds log or outbox rows of a strategy (one that is not loaded any more).
    pub fn has_rows(&self, strategy: &str) -> Result<bool, StoreError> {
        let found = self.query(
            "SELECT EXISTS(SELECT 1 FROM logs WHERE strategy = ?1) OR EXISTS(SELECT 1 FROM outbox WHERE strategy = ?1)",
            params![strategy],
            |r| r.get::<_, bool>(0),
        )?;
        Ok(found.first().copied().unwrap_or(false))
    }

    /// Outbox rows by strategy and state (for the metrics).
    pub fn outbox_depth(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        self.query("SELECT strategy, status, count(*) FROM outbox GROUP BY strategy, status", [], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
    }

    /// One of a strategy's outbox rows with its result.
    pub fn outbox_entry(&self, strategy: &str, id: i64) -> Result<Option<(OutboxRow, Option<String>)>, StoreError> {
        let rows = self.query(
            &format!("SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 AND id = ?2"),
            params![strategy, id],
            |r| Ok((outbox_row(r)?, r.get(16)?)),
        )?;
        Ok(rows.into_iter().next())
    }
}
