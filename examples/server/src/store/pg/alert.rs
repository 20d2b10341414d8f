//! One alert's transaction on the shared database. The strategy's advisory lock is taken first and held to the
//! commit, so that servers count its rate window one at a time (exactly the limit across servers); the dedup
//! key is claimed by a unique-key insert in the same transaction that stores the outbox rows, so that a race
//! between servers trades once and a crash never separates "claimed" from "stored".

use super::super::logs::LogEntry;
use super::super::outbox::OutboxRow;
use super::super::StoreError;
use super::tables;
use super::Object;
use deadpool_postgres::Transaction;
use strategy_webhook::state::{Claim, Limits};

/// An alert's open transaction, with its strategy locked. Dropped without [`Alert::commit`], it rolls back.
pub struct Alert<'a> {
    tx: Transaction<'a>,
    strategy: String,
}

/// Opens an alert's transaction on `client` and takes the strategy's lock.
pub async fn begin<'a>(client: &'a mut Object, strategy: &str) -> Result<Alert<'a>, StoreError> {
    let tx = client.transaction().await?;
    // A 64-bit hash of the id: two strategies sharing a lock only wait for each other, never mix windows.
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&strategy]).await?;
    Ok(Alert { tx, strategy: strategy.to_owned() })
}

impl Alert<'_> {
    /// Whether one more delivery fits the strategy's rate window at `now_ms`.
    pub async fn has_room(&self, now_ms: i64, limits: Limits) -> Result<bool, StoreError> {
        let since = now_ms.saturating_sub(limits.rate_window_ms);
        let n: i64 = self
            .tx
            .query_one("SELECT count(*) FROM rate_marks WHERE strategy = $1 AND ts_ms > $2", &[&self.strategy, &since])
            .await?
            .get(0);
        Ok(n < i64::from(limits.rate_limit))
    }

    /// Claims the dedup key (hex) at `now_ms`: a new key, or one whose window has passed, is claimed;
    /// otherwise it is a duplicate, logged the first time in its window.
    pub async fn claim(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<Claim, StoreError> {
        let claimed = self
            .tx
            .query_opt(
                "INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (strategy, key) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, dup_logged = FALSE
                     WHERE dedup_keys.ts_ms <= $4
                 RETURNING ts_ms",
                &[&self.strategy, &key, &now_ms, &now_ms.saturating_sub(window_ms)],
            )
            .await?;
        if claimed.is_some() {
            return Ok(Claim::Fresh);
        }
        let first = self
            .tx
            .query_opt(
                "UPDATE dedup_keys SET dup_logged = TRUE WHERE strategy = $1 AND key = $2 AND NOT dup_logged
                 RETURNING ts_ms",
                &[&self.strategy, &key],
            )
            .await?;
        Ok(Claim::Duplicate { log: first.is_some() })
    }

    /// Gives back a key claimed in this transaction (the engine gave it back: an error answer, so the
    /// sender's retry trades once).
    pub async fn unclaim(&self, key: &str) -> Result<(), StoreError> {
        self.tx.execute("DELETE FROM dedup_keys WHERE strategy = $1 AND key = $2", &[&self.strategy, &key]).await?;
        Ok(())
    }

    /// Counts the delivery against the rate window.
    pub async fn count(&self, now_ms: i64) -> Result<(), StoreError> {
        self.tx.execute("INSERT INTO rate_marks (strategy, ts_ms) VALUES ($1, $2)", &[&self.strategy, &now_ms]).await?;
        Ok(())
    }

    /// The strategy's bot states: (bot, state JSON, version).
    pub async fn bot_states(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows =
            self.tx.query("SELECT bot, state, version FROM bot_state WHERE strategy = $1", &[&self.strategy]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect())
    }

    /// Stores the outcome's log rows and outbox rows.
    pub async fn store(&self, rows: &[OutboxRow], log: Option<&LogEntry>) -> Result<(), StoreError> {
        if let Some(e) = log {
            tables::insert_log(&self.tx, e).await?;
        }
        tables::insert_rows(&self.tx, rows).await?;
        Ok(())
    }

    /// Commits. `durable`: wait until the commit is on disk (an alert answered processed); otherwise the
    /// commit is acknowledged before its WAL is flushed (a rejection or duplicate: losing it in a crash of
    /// PostgreSQL costs a slightly shorter window, as the embedded store's log rows do).
    pub async fn commit(self, durable: bool) -> Result<(), StoreError> {
        if !durable {
            self.tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await?;
        }
        self.tx.commit().await?;
        Ok(())
    }
}
