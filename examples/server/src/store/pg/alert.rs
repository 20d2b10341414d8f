//! One alert's transaction on the shared database. The strategy's advisory lock is taken first and held to the
//! commit, so that servers count its rate window one at a time (exactly the limit across servers); the dedup
//! key is claimed by a unique-key insert in the same transaction that stores the outbox rows, so that a race
//! between servers trades once and a crash never separates "claimed" from "stored".
//!
//! The statements of each step are pipelined (sent together, answered in order) and prepared once per
//! connection, so an alert costs about five round trips to PostgreSQL: `BEGIN`, the lock, the rest of
//! [`Alert::open`], [`Alert::finish`]'s writes (one more per outbox row beyond the first: they are inserted
//! one after another, so their ids keep the order they are sent in), and the commit.

use super::super::logs::LogEntry;
use super::super::outbox::OutboxRow;
use super::super::StoreError;
use super::tables;
use super::Object;
use deadpool_postgres::Transaction;
use strategy_webhook::state::{Claim, Limits};
use tokio_postgres::types::ToSql;

type Param<'a> = dyn ToSql + Sync + 'a;

/// An alert's open transaction. Dropped without [`Alert::finish`], it rolls back.
pub struct Alert<'a> {
    tx: Transaction<'a>,
    strategy: String,
}

/// What the shared database says of an alert before it is decided.
#[derive(Debug)]
pub struct Opened {
    /// Whether one more delivery fits the strategy's rate window.
    pub room: bool,
    /// The dedup key: `Fresh` when this transaction has just claimed it.
    pub claim: Claim,
    /// The strategy's bot states: (bot, state JSON, version).
    pub states: Vec<(String, String, i64)>,
}

/// Opens an alert's transaction on `client`.
pub async fn begin<'a>(client: &'a mut Object, strategy: &str) -> Result<Alert<'a>, StoreError> {
    let tx = client.transaction().await?;
    Ok(Alert { tx, strategy: strategy.to_owned() })
}

impl Alert<'_> {
    /// Takes the strategy's lock, counts its rate window at `now_ms`, claims the dedup key (hex) and reads
    /// the bot states, in one round trip. A new key, or one whose window has passed, is claimed; otherwise it
    /// is a duplicate, logged the first time in its window. With no room in the rate window the caller answers
    /// 429 and drops the transaction, so the claim made here is never kept.
    pub async fn open(&self, key: &str, now_ms: i64, limits: Limits) -> Result<Opened, StoreError> {
        let since = now_ms.saturating_sub(limits.rate_window_ms);
        let expired = now_ms.saturating_sub(limits.dedup_window_ms);
        let s = &self.strategy;
        // A 64-bit hash of the id: two strategies sharing a lock only wait for each other, never mix windows.
        // Taken on its own, before anything else is sent: a statement pipelined beside it could run before it
        // (each prepares first), and a claim made outside the lock can deadlock with another server's.
        let lock = self.tx.prepare_cached("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))").await?;
        self.tx.execute(&lock, &[s]).await?;
        let (count, claim, states) = tokio::try_join!(
            // The seconds wholly inside the window from their counts, and the second the window's start falls
            // in from its marks: exact, and at most a window's seconds plus one second's marks to read.
            self.tx.prepare_cached(
                "SELECT coalesce((SELECT sum(n) FROM rate_seconds
                                  WHERE strategy = $1 AND second > $2::BIGINT / 1000), 0)::BIGINT
                      + (SELECT count(*) FROM rate_marks
                         WHERE strategy = $1 AND ts_ms > $2::BIGINT AND ts_ms < ($2::BIGINT / 1000 + 1) * 1000)",
            ),
            self.tx.prepare_cached(
                "INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (strategy, key) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, dup_logged = FALSE
                     WHERE dedup_keys.ts_ms <= $4
                 RETURNING ts_ms",
            ),
            self.tx.prepare_cached("SELECT bot, state, version FROM bot_state WHERE strategy = $1"),
        )?;
        let p_count: [&Param<'_>; 2] = [s, &since];
        let p_claim: [&Param<'_>; 4] = [s, &key, &now_ms, &expired];
        let p_states: [&Param<'_>; 1] = [s];
        let (count, claimed, states) = tokio::try_join!(
            self.tx.query_one(&count, &p_count),
            self.tx.query_opt(&claim, &p_claim),
            self.tx.query(&states, &p_states),
        )?;
        let room = count.get::<_, i64>(0) < i64::from(limits.rate_limit);
        let claim = if claimed.is_some() {
            Claim::Fresh
        } else {
            // Rare (a duplicate): one more round trip to say whether it is the window's first.
            let first = self
                .tx
                .query_opt(
                    "UPDATE dedup_keys SET dup_logged = TRUE WHERE strategy = $1 AND key = $2 AND NOT dup_logged
                     RETURNING ts_ms",
                    &[s, &key],
                )
                .await?;
            Claim::Duplicate { log: first.is_some() }
        };
        Ok(Opened { room, claim, states: states.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect() })
    }

    /// Stores what the engine decided and commits: a rate mark when it `counted` at `now_ms`, the key given
    /// back when `unclaim` names it (an error answer), the log rows and the outbox rows. `durable`: wait until
    /// the commit is on disk (an alert answered processed); otherwise the commit is acknowledged before its
    /// WAL is flushed (a rejection or duplicate: losing it in a crash of PostgreSQL costs a slightly shorter
    /// window, as the embedded store's log rows do).
    pub async fn finish(
        self,
        now_ms: i64,
        counted: bool,
        unclaim: Option<&str>,
        rows: &[OutboxRow],
        log: Option<&LogEntry>,
        durable: bool,
    ) -> Result<(), StoreError> {
        let s = &self.strategy;
        let tx = &self.tx;
        let relaxed = async {
            if !durable {
                tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        };
        let mark = async {
            if counted {
                let (mark, second) = tokio::try_join!(
                    tx.prepare_cached("INSERT INTO rate_marks (strategy, ts_ms) VALUES ($1, $2)"),
                    tx.prepare_cached(
                        "INSERT INTO rate_seconds (strategy, second, n) VALUES ($1, $2::BIGINT / 1000, 1)
                         ON CONFLICT (strategy, second) DO UPDATE SET n = rate_seconds.n + 1",
                    ),
                )?;
                let p: [&Param<'_>; 2] = [s, &now_ms];
                tokio::try_join!(tx.execute(&mark, &p), tx.execute(&second, &p))?;
            }
            Ok(())
        };
        let unclaim = async {
            if let Some(key) = unclaim {
                tx.execute("DELETE FROM dedup_keys WHERE strategy = $1 AND key = $2", &[s, &key]).await?;
            }
            Ok(())
        };
        // The outbox rows one after another (their ids are the order the bot's dispatcher sends them in),
        // beside the other writes.
        tokio::try_join!(relaxed, mark, unclaim, insert_log(tx, log), tables::insert_rows(tx, rows))?;
        self.tx.commit().await?;
        Ok(())
    }
}

/// An Outcome's log rows in one statement.
async fn insert_log(tx: &Transaction<'_>, e: Option<&LogEntry>) -> Result<(), tokio_postgres::Error> {
    let Some(e) = e.filter(|e| !e.records.is_empty()) else { return Ok(()) };
    let levels: Vec<&str> = e.records.iter().map(|(l, _)| l.as_str()).collect();
    let messages: Vec<&str> = e.records.iter().map(|(_, m)| m.as_str()).collect();
    tx.execute(
        "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
         SELECT $1, $2, level, message, $5, $6, $7
         FROM unnest($3::TEXT[], $4::TEXT[]) WITH ORDINALITY AS r (level, message, n) ORDER BY n",
        &[&e.ts_ms, &e.strategy, &levels, &messages, &e.decision, &i32::from(e.http_status), &e.alerts],
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The window's count against a real PostgreSQL, at chosen times: exact at every boundary.
    use super::super::test_harness as harness;
    use super::super::Pg;
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_rate_count_is_exact_as_the_window_slides_across_seconds() {
        let server = tokio::task::spawn_blocking(harness::Postgres::start).await.unwrap();
        let url = server.url();
        let pg = Pg::connect(&url, 4).await.unwrap();
        pg.migrate().await.unwrap();
        let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
        // Deliveries at times that fall on, just before and just after second and window boundaries.
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now: i64 = 1_000_000;
        let mut counted: Vec<i64> = Vec::new();
        for i in 0..400 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            now += [1, 7, 499, 999, 1000, 1001, 2500, 9_999, 10_000][(rng % 9) as usize];
            let live = counted.iter().filter(|&&t| now - t < limits.rate_window_ms).count();
            let mut client = pg.client().await.unwrap();
            let tx = begin(&mut client, "s").await.unwrap();
            let opened = tx.open(&format!("k{i}"), now, limits).await.unwrap();
            assert_eq!(opened.room, live < 5, "at {now} with {counted:?}");
            tx.finish(now, opened.room, None, &[], None, true).await.unwrap();
            if opened.room {
                counted.push(now);
            }
        }
        assert!(counted.len() > 100 && counted.len() < 400, "both answers were seen: {}", counted.len());
        drop(server);
    }
}
