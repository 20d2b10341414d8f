//! Alerts' transactions on the shared database, many alerts to one transaction (group commit). The
//! strategies of a batch are locked first, in one global order (so two servers' batches never wait on each
//! other in a circle), and held to the commit, so that servers count each strategy's rate window one at a
//! time (exactly the limit across servers); each dedup key is claimed by a unique-key insert in the same
//! transaction that stores the alert's outbox rows, so that a race between servers trades once and a crash
//! never separates "claimed" from "stored". Each step is one statement for the whole batch, so an alert costs
//! PostgreSQL a share of a handful of statements and of one commit.

use super::super::logs::LogEntry;
use super::super::outbox::OutboxRow;
use super::super::StoreError;
use super::tables;
use super::Object;
use deadpool_postgres::Transaction;
use std::collections::{HashMap, HashSet};
use strategy_webhook::state::{Claim, Limits};
use tokio_postgres::types::ToSql;

type Param<'a> = dyn ToSql + Sync + 'a;

/// A batch's open transaction. Dropped without [`Batch::finish`], it rolls back.
pub struct Batch<'a> {
    tx: Transaction<'a>,
}

/// What the shared database says of a batch's strategies and keys before its alerts are decided.
#[derive(Debug, Default)]
pub struct Opened {
    /// Deliveries each strategy's rate window has room for.
    pub room: HashMap<String, i64>,
    /// The strategies' bot states: strategy → (bot, state JSON, version).
    pub states: HashMap<String, Vec<(String, String, i64)>>,
    /// The tokens of the strategies rotated through any server's admin API: strategy → token.
    pub tokens: HashMap<String, String>,
}

/// One alert's writes once decided.
#[derive(Debug, Default)]
pub struct Decided {
    /// Its strategy.
    pub strategy: String,
    /// Counted against the rate window: a rate mark is stored.
    pub counted: bool,
    /// A key claimed in this batch and given back (an error answer).
    pub unclaim: Option<String>,
    /// Its log rows.
    pub log: Option<LogEntry>,
    /// Its outbox rows, in the order they are to be sent.
    pub rows: Vec<OutboxRow>,
}

/// Opens a batch's transaction on `client` and takes its strategies' locks.
pub async fn begin<'a>(client: &'a mut Object, strategies: &[&str]) -> Result<Batch<'a>, StoreError> {
    let tx = client.transaction().await?;
    // A 64-bit hash of each id, taken in ascending order: two strategies sharing a lock only wait for each
    // other, and batches that share strategies take them in the same order. The sort is fenced in a subquery,
    // so each lock is taken as its row comes.
    let lock = tx
        .prepare_cached(
            "SELECT count(pg_advisory_xact_lock(h)) FROM
                 (SELECT DISTINCT hashtextextended(s, 0) AS h FROM unnest($1::TEXT[]) AS s ORDER BY h OFFSET 0)
                 AS ordered",
        )
        .await?;
    tx.query_one(&lock, &[&strategies]).await?;
    Ok(Batch { tx })
}

impl Batch<'_> {
    /// Counts the strategies' rate windows at `now_ms` and reads their bot states and rotated tokens.
    pub async fn open(&self, strategies: &[&str], now_ms: i64, limits: Limits) -> Result<Opened, StoreError> {
        let since = now_ms.saturating_sub(limits.rate_window_ms);
        // The seconds wholly inside the window from their counts, and the second the window's start falls in
        // from its marks: exact, and at most a window's seconds plus one second's marks to read.
        let (count, states, tokens) = tokio::try_join!(
            self.tx.prepare_cached(
                "SELECT s,
                        coalesce((SELECT sum(n) FROM rate_seconds
                                  WHERE strategy = s AND second > $2::BIGINT / 1000), 0)::BIGINT
                      + (SELECT count(*) FROM rate_marks
                         WHERE strategy = s AND ts_ms > $2::BIGINT AND ts_ms < ($2::BIGINT / 1000 + 1) * 1000)
                 FROM unnest($1::TEXT[]) AS s",
            ),
            self.tx.prepare_cached("SELECT strategy, bot, state, version FROM bot_state WHERE strategy = ANY($1)"),
            self.tx.prepare_cached("SELECT strategy, token_hash FROM token_overrides WHERE strategy = ANY($1)"),
        )?;
        let (p_count, p_one): ([&Param<'_>; 2], [&Param<'_>; 1]) = ([&strategies, &since], [&strategies]);
        let (counts, rows, tokens) = tokio::try_join!(
            self.tx.query(&count, &p_count),
            self.tx.query(&states, &p_one),
            self.tx.query(&tokens, &p_one)
        )?;
        let limit = i64::from(limits.rate_limit);
        let mut opened = Opened::default();
        for r in counts {
            let (s, n): (String, i64) = (r.get(0), r.get(1));
            opened.room.insert(s, (limit - n).max(0));
        }
        for r in rows {
            opened.states.entry(r.get(0)).or_default().push((r.get(1), r.get(2), r.get(3)));
        }
        opened.tokens = tokens.iter().map(|r| (r.get(0), r.get(1))).collect();
        Ok(opened)
    }

    /// Claims dedup keys (strategy, key hex) at `now_ms`, each at most once in the list: a new key, or one whose
    /// window has passed, is claimed (`Fresh`); otherwise it is a duplicate, logged the first time in its
    /// window. Answers in the list's order.
    pub async fn claim(&self, keys: &[(&str, &str)], now_ms: i64, window_ms: i64) -> Result<Vec<Claim>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let (strategies, hexes): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let expired = now_ms.saturating_sub(window_ms);
        let insert = self
            .tx
            .prepare_cached(
                "INSERT INTO dedup_keys (strategy, key, ts_ms) SELECT s, k, $3 FROM unnest($1::TEXT[], $2::TEXT[]) AS u (s, k)
                 ON CONFLICT (strategy, key) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, dup_logged = FALSE
                     WHERE dedup_keys.ts_ms <= $4
                 RETURNING strategy, key",
            )
            .await?;
        let fresh: HashSet<(String, String)> = self
            .tx
            .query(&insert, &[&strategies, &hexes, &now_ms, &expired])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let dups: Vec<(&str, &str)> =
            keys.iter().copied().filter(|(s, k)| !fresh.contains(&((*s).to_owned(), (*k).to_owned()))).collect();
        let mut first: HashSet<(String, String)> = HashSet::new();
        if !dups.is_empty() {
            // Rare: say which duplicates are their window's first (logged once).
            let (s, k): (Vec<&str>, Vec<&str>) = dups.iter().copied().unzip();
            let update = self
                .tx
                .prepare_cached(
                    "UPDATE dedup_keys SET dup_logged = TRUE FROM unnest($1::TEXT[], $2::TEXT[]) AS u (s, k)
                     WHERE strategy = u.s AND key = u.k AND NOT dup_logged
                     RETURNING strategy, key",
                )
                .await?;
            first = self.tx.query(&update, &[&s, &k]).await?.iter().map(|r| (r.get(0), r.get(1))).collect();
        }
        Ok(keys
            .iter()
            .map(|(s, k)| {
                let key = ((*s).to_owned(), (*k).to_owned());
                if fresh.contains(&key) {
                    Claim::Fresh
                } else {
                    Claim::Duplicate { log: first.contains(&key) }
                }
            })
            .collect())
    }

    /// Stores what the engine decided for each alert and commits: rate marks, keys given back, log rows and
    /// outbox rows. `durable`: wait until the commit is on disk (the batch holds an alert answered processed);
    /// otherwise the commit is acknowledged before its WAL is flushed (rejections and duplicates only: losing
    /// them in a crash of PostgreSQL costs a slightly shorter window, as the embedded store's log rows do).
    pub async fn finish(self, now_ms: i64, decided: &[Decided], durable: bool) -> Result<(), StoreError> {
        let tx = &self.tx;
        let relaxed = async {
            if !durable {
                tx.batch_execute("SET LOCAL synchronous_commit TO OFF").await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        };
        let counted: Vec<&str> = decided.iter().filter(|d| d.counted).map(|d| d.strategy.as_str()).collect();
        tokio::try_join!(
            relaxed,
            tables::insert_marks(tx, &counted, now_ms),
            unclaim(tx, decided),
            tables::insert_logs(tx, decided.iter().filter_map(|d| d.log.as_ref())),
            tables::insert_rows(tx, decided.iter().flat_map(|d| d.rows.iter()))
        )?;
        self.tx.commit().await?;
        Ok(())
    }
}

/// Keys claimed in the batch and given back.
async fn unclaim(tx: &Transaction<'_>, decided: &[Decided]) -> Result<(), tokio_postgres::Error> {
    let (s, k): (Vec<&str>, Vec<&str>) =
        decided.iter().filter_map(|d| Some((d.strategy.as_str(), d.unclaim.as_deref()?))).unzip();
    if s.is_empty() {
        return Ok(());
    }
    let st = tx
        .prepare_cached(
            "DELETE FROM dedup_keys USING unnest($1::TEXT[], $2::TEXT[]) AS u (s, k) WHERE strategy = u.s AND key = u.k",
        )
        .await?;
    tx.execute(&st, &[&s, &k]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    //! The window's count and the claims against a real PostgreSQL, at chosen times.
    use super::super::test_harness as harness;
    use super::super::Pg;
    use super::*;

    async fn pg() -> (harness::Postgres, Pg) {
        let server = tokio::task::spawn_blocking(harness::Postgres::start).await.unwrap();
        let pg = Pg::connect(&server.url(), 4).await.unwrap();
        pg.migrate().await.unwrap();
        (server, pg)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_rate_count_is_exact_as_the_window_slides_across_seconds() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 30_000 };
        // Deliveries at times that fall on, just before and just after second and window boundaries.
        let mut rng: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut now: i64 = 1_000_000;
        let mut counted: Vec<i64> = Vec::new();
        for _ in 0..400 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            now += [1, 7, 499, 999, 1000, 1001, 2500, 9_999, 10_000][(rng % 9) as usize];
            // One to three deliveries at this instant, in one batch.
            let n = 1 + (rng % 3) as usize;
            let live = counted.iter().filter(|&&t| now - t < limits.rate_window_ms).count();
            let mut client = pg.client().await.unwrap();
            let tx = begin(&mut client, &["s"]).await.unwrap();
            let opened = tx.open(&["s"], now, limits).await.unwrap();
            let room = usize::try_from(opened.room["s"]).unwrap();
            assert_eq!(room, 5usize.saturating_sub(live), "at {now} with {counted:?}");
            let taken = n.min(room);
            let decided: Vec<Decided> =
                (0..taken).map(|_| Decided { strategy: "s".into(), counted: true, ..Decided::default() }).collect();
            tx.finish(now, &decided, true).await.unwrap();
            counted.extend(std::iter::repeat(now).take(taken));
        }
        assert!(counted.len() > 100, "the window filled and emptied: {}", counted.len());
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_are_claimed_once_per_window_and_the_first_duplicate_is_logged() {
        let (server, pg) = pg().await;
        let claim = |keys: Vec<(&'static str, &'static str)>, now: i64| {
            let pg = pg.clone();
            async move {
                let mut client = pg.client().await.unwrap();
                let tx = begin(&mut client, &["a", "b"]).await.unwrap();
                let c = tx.claim(&keys, now, 1_000).await.unwrap();
                tx.finish(now, &[], true).await.unwrap();
                c
            }
        };
        let dup = |log| Claim::Duplicate { log };
        assert_eq!(claim(vec![("a", "k1"), ("b", "k1")], 10).await, [Claim::Fresh, Claim::Fresh]);
        assert_eq!(claim(vec![("a", "k1"), ("a", "k2")], 500).await, [dup(true), Claim::Fresh]);
        assert_eq!(claim(vec![("a", "k1"), ("b", "k1")], 999).await, [dup(false), dup(true)]);
        // The window (1 s) has passed for k1 at 1,010: claimed again, and its next duplicate is logged again.
        assert_eq!(claim(vec![("a", "k1")], 1_010).await, [Claim::Fresh]);
        assert_eq!(claim(vec![("a", "k1")], 1_020).await, [dup(true)]);
        drop(server);
    }
}
