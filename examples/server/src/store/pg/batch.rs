//! Alerts' transactions on the shared database, many alerts to one transaction (group commit). The
//! strategies of a batch are locked first, in one global order (so two servers' batches never wait on each
//! other in a circle), and held to the commit, so that servers count each strategy's rate window one at a
//! time (exactly the limit across servers); each dedup key is claimed by a unique-key insert in the same
//! transaction that stores the alert's outbox rows, so that a race between servers trades once and a crash
//! never separates "claimed" from "stored". Each step is one statement for the whole batch, so an alert costs
//! PostgreSQL a share of a handful of statements and of one commit.
//!
//! A batch waits for its locks only briefly ([`Lock::Brief`]), and should one be held longer, goes on without
//! the strategies whose lock another transaction holds ([`Started::busy`]): waiting for them as long as their
//! holder kept them (another server's commit waiting for a synchronous standby, or a frozen server) held up
//! every other strategy of the batch, and of the server's batches behind it, and the lock wait's timeout
//! failed them all. The caller waits for those in a batch of their own ([`Lock::Wait`]).

use super::super::logs::LogEntry;
use super::super::outbox::OutboxRow;
use super::super::StoreError;
use super::tables::{self, digest, Appends};
use super::{Object, Pg};
use deadpool_postgres::GenericClient;
use futures_util::TryFutureExt;
use std::collections::{HashMap, HashSet};
use strategy_webhook::state::{Claim, Limits};
use tokio_postgres::types::ToSql;

type Param<'a> = dyn ToSql + Sync + 'a;

/// A batch's open transaction, on a connection of its own. Dropped without [`Batch::finish`] (an error, or the
/// batch's task cancelled), its connection is closed instead of going back to the pool, which rolls the
/// transaction back on the server.
pub struct Batch {
    client: Option<Object>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            drop(deadpool_postgres::Object::take(c));
        }
    }
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

/// What the shared database says of a batch before its alerts are decided: its strategies' windows, states and
/// tokens, and which of its keys it claimed.
pub struct Started {
    /// The open transaction, holding the strategies' locks and the claims.
    pub batch: Batch,
    /// The strategies' rate rooms, bot states and rotated tokens.
    pub opened: Opened,
    /// For each key asked for, in order: claimed by this batch (new, or its window had passed). The others
    /// are claimed already: duplicates, unless this batch gives them up ([`Batch::claims`] says which).
    pub fresh: Vec<bool>,
    /// The database's clock at the batch's start (Unix ms), for [`clock_agrees`].
    pub db_ms: i64,
    /// The strategies whose lock another transaction held ([`Lock::Brief`], [`Lock::Free`]): the batch holds
    /// nothing of them (no rate room, bot states or tokens read, no key claimed: their keys are not `fresh`), and
    /// its caller leaves their alerts out of it.
    pub busy: Vec<String>,
}

/// How a batch takes its strategies' locks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// Every one, waiting up to [`LOCK_BRIEF_MS`]; should one be held longer, the batch starts again on its
    /// connection as [`Lock::Free`]. Batches of servers that share strategies hold them a few ms in turn: taking
    /// only the free ones at once would leave most strategies out of most batches, each in a transaction of its
    /// own, and a transaction costs PostgreSQL as much as a few dozen alerts' rows.
    Brief,
    /// Those free now, waiting for none; the others are left out ([`Started::busy`]).
    Free,
    /// Every one, waiting up to this many ms (PostgreSQL's `lock_timeout`, at least 1) for one held elsewhere.
    Wait(u64),
}

/// How long a [`Lock::Brief`] batch waits for its locks: many times what a batch of a server that shares the
/// strategies holds them (1 to 8 ms in the benchmarks, a synchronous standby nearby adding its round trip), so
/// that only a holder in trouble (its commit waiting for a standby that is away, or its server frozen) leaves a
/// strategy out, and short enough that the other strategies of the batch hardly notice it.
pub const LOCK_BRIEF_MS: u64 = 200;

/// Refuses a batch whose time is [`CLOCK_STEP_MS`] or more off the database's clock, either way. Behind, its claims
/// would be stored as that much older, and a resend reaching a server whose clock is right, within the dedup window,
/// was claimed again and traded twice (with a peer's marks ahead of it, a rewind also undid the peers' windows).
/// Ahead, it judged its peers' rows by its own clock: a peer's key claimed seconds ago looked expired and was
/// claimed again (traded twice), and its rate window began after every peer's marks. The caller drops the batch,
/// which rolls its claims back; the sender's retry may reach a server whose clock is right.
pub fn clock_agrees(db_ms: i64, now_ms: i64) -> Result<(), StoreError> {
    let behind_ms = db_ms.saturating_sub(now_ms);
    if behind_ms >= CLOCK_STEP_MS {
        return Err(StoreError::ClockBehind { behind_ms });
    }
    if behind_ms <= -CLOCK_STEP_MS {
        return Err(StoreError::ClockAhead { ahead_ms: behind_ms.saturating_neg() });
    }
    Ok(())
}

/// The locks ([`Lock::Brief`], [`Lock::Wait`]): a 64-bit hash of each id, taken in ascending order, so two
/// strategies sharing a lock only wait for each other, and batches that share strategies take them in the same
/// order. The sort is fenced in a subquery, so each lock is taken as its row comes. Once they are taken,
/// `lock_timeout` becomes `$2` (ms) for the batch's other statements, whose row locks are held only for a
/// moment (the prune's): a brief wait's timeout there would fail the whole batch as locked.
const LOCK: &str = "SELECT n, set_config('lock_timeout', $2::BIGINT::TEXT, TRUE)
 FROM (SELECT count(pg_advisory_xact_lock(h)) AS n FROM
       (SELECT DISTINCT hashtextextended(s, 0) AS h FROM unnest($1::TEXT[]) AS s ORDER BY h OFFSET 0) AS ordered)
      AS locked";

/// The locks that are free ([`Lock::Free`]), the same hashes as [`LOCK`]'s; answers the strategies whose lock is
/// held elsewhere and leaves them in `swh.busy`, which the batch's later statements (sent with this one, before
/// its answer) skip: [`REWIND`] would change their rows unlocked (and wait for the holder's row locks), and
/// [`CLAIM`] would claim their keys. Unset there (no batch), or as a session's earlier transaction left it (an
/// empty string, no array: the statements run their conditions in any order, so a lone [`CLAIM`] would fail
/// rather than claim nothing), it leaves nothing out. A lock tried, not waited for, needs no order: no two
/// batches wait on each other. A strategy sharing its hash with another of the batch tries a lock this
/// transaction holds: it is taken.
const TRY_LOCK: &str = "SELECT busy, set_config('swh.busy', busy::TEXT, TRUE)
 FROM (SELECT coalesce(array_agg(s), '{}') AS busy FROM unnest($1::TEXT[]) AS s
       WHERE NOT pg_try_advisory_xact_lock(hashtextextended(s, 0))) AS b";

/// The rate count, rotated tokens and bot states of the batch's strategies. The seconds wholly inside the
/// window from their counts, and the second the window's start falls in from its marks: exact, and at most a
/// window's seconds plus one second's marks to read. The marks are read only for a strategy whose window,
/// counting its first second whole, has no room for the whole batch: otherwise that upper bound grants every
/// delivery just as the exact count would. Marks later than the batch's time (a batch on another server that
/// took its time after this one and its locks before it) are counted too: no bound above, so the window stays
/// exact whatever order the servers' batches take the locks in.
const OPEN: &str = "SELECT s, CASE WHEN $3::BIGINT - upper >= d THEN upper ELSE
        coalesce((SELECT sum(n) FROM rate_seconds
                  WHERE strategy = s AND second > $2::BIGINT / 1000), 0)::BIGINT
      + coalesce((SELECT sum(n) FROM rate_marks
                  WHERE strategy = s AND ts_ms > $2::BIGINT
                        AND ts_ms < ($2::BIGINT / 1000 + 1) * 1000), 0)::BIGINT END,
        (SELECT token_hash FROM token_overrides WHERE strategy = s),
        bots, states, versions
 FROM (SELECT s, d, coalesce((SELECT sum(n) FROM rate_seconds
                              WHERE strategy = s AND second >= $2::BIGINT / 1000), 0)::BIGINT
                    AS upper
       FROM unnest($1::TEXT[], $4::BIGINT[]) AS u (s, d)
       WHERE s <> ALL (coalesce(nullif(current_setting('swh.busy', TRUE), ''), '{}')::TEXT[])) AS w
 LEFT JOIN LATERAL (SELECT array_agg(bot) AS bots, array_agg(state) AS states,
                           array_agg(version) AS versions
                    FROM bot_state WHERE strategy = w.s) AS b ON TRUE";

/// A clock gone back, as the core's windows see it (`strategy_webhook::state`): a strategy whose window holds a
/// second later than any batch taken since could have stamped had its marks stored under a clock since set back
/// (an NTP step, a restart after a run whose clock was ahead, the database's own clock set back). Measured from
/// their own times, they answered every alert 429, and a repeated alert `duplicate`, for as long as the step: its
/// marks in those seconds go, and its keys stamped then are brought back to the batch's time (one window from the
/// step). Every claimed key has its mark in the same transaction, so the marks tell the step, by their primary
/// key. Only inside a batch's transaction, as [`CLAIM`].
///
/// Judged by PostgreSQL's clock, not the batch's: every batch taken is within [`CLOCK_STEP_MS`] of the database's
/// clock at its transaction's start ([`clock_agrees`]), which is no later than the clock here, read once this batch
/// holds its strategies' locks (after every batch that stored marks of them committed), so no batch taken stamped
/// a second more than [`CLOCK_STEP_MS`] past it. Measured from a batch's own time instead, the marks a peer 20 s
/// ahead stored a moment ago looked 40 s ahead to a peer 20 s behind, both accepted, which undid the window (a
/// second window of orders in the minute) and brought the keys back (a retry claimed again, traded twice). Only a batch whose time is
/// within [`CLOCK_STEP_MS`] of the database's (at its transaction's start) rewinds; the caller refuses any other.
/// Answers the strategies rewound, those seen stepped, and the database's time at the transaction's start (Unix
/// ms).
const REWIND: &str = "WITH db AS (SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT AS ms,
                   (floor(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT + $3::BIGINT) / 1000 AS last),
   stepped AS (
     SELECT s FROM unnest($1::TEXT[]) AS s, db
     WHERE current_setting('swh.batch', TRUE) = 'on'
       AND s <> ALL (coalesce(nullif(current_setting('swh.busy', TRUE), ''), '{}')::TEXT[])
       AND EXISTS (SELECT 1 FROM rate_seconds WHERE strategy = s AND second > db.last)),
   rewound AS (SELECT s FROM stepped, db WHERE abs(db.ms - $2::BIGINT) < $3::BIGINT),
   marks AS (DELETE FROM rate_marks USING db
             WHERE strategy IN (SELECT s FROM rewound) AND ts_ms >= (db.last + 1) * 1000),
   seconds AS (DELETE FROM rate_seconds USING db WHERE strategy IN (SELECT s FROM rewound) AND second > db.last),
   keys AS (UPDATE dedup_keys SET ts_ms = $2::BIGINT FROM db
            WHERE strategy IN (SELECT s FROM rewound) AND ts_ms >= (db.last + 1) * 1000)
 SELECT (SELECT count(*) FROM rewound), (SELECT count(*) FROM stepped), (SELECT ms FROM db)";

/// How far a batch's time may be off the database's clock, either way, and so how far ahead of that clock a
/// batch's marks may be before they are taken as stored under a clock gone back: the core's threshold for a clock
/// gone back, for the same reason (times a little out of order are ordinary).
pub(super) const CLOCK_STEP_MS: i64 = 30_000;

/// How long a batch's statements wait for a lock another transaction holds (PostgreSQL's `lock_timeout`) before
/// failing with SQLSTATE 55P03, told apart from an unreachable database: the holder may be another server's batch
/// of the same alert whose commit waits for a synchronous standby, so "nothing was sent" would be false. Longer
/// than PostgreSQL's limit on a session idle in a transaction (`store::pg`, 5 s), so the locks of a server frozen
/// in its batch are freed first; shorter than the batch's whole opening wait (the server's `OPEN_WAIT`, 7 s).
pub const LOCK_WAIT_MS: u64 = 6_000;

/// The claims: a unique-key insert of each key's digest, which takes a key whose window has passed as a new
/// one. Only inside a batch's transaction (`swh.batch` is set there, and only there): its statements are sent
/// behind the `BEGIN` without waiting for it, and should that fail, a claim outside it would be committed on
/// its own, with no orders behind it, and the sender's retry answered as a duplicate.
///
/// The keys of a strategy whose lock is held elsewhere (`swh.busy`, [`TRY_LOCK`]) are not claimed.
///
/// Keys are claimed in digest order, the order the prune deletes expired ones in: re-claiming stored keys whose
/// window has passed locks them, and two transactions locking the same rows in opposite orders deadlock.
const CLAIM: &str = "INSERT INTO dedup_keys (digest, strategy, key, ts_ms)
 SELECT d::UUID, s, k, $3 FROM unnest($1::TEXT[], $2::TEXT[], $5::TEXT[]) AS u (s, k, d)
 WHERE current_setting('swh.batch', TRUE) = 'on'
   AND s <> ALL (coalesce(nullif(current_setting('swh.busy', TRUE), ''), '{}')::TEXT[])
 ORDER BY d::UUID
 ON CONFLICT (digest) DO UPDATE SET ts_ms = EXCLUDED.ts_ms, dup_logged = FALSE
     WHERE dedup_keys.ts_ms <= $4
 RETURNING strategy, key";

/// Opens a batch's transaction, takes its strategies' locks as `lock` says, counts their rate windows at
/// `now_ms`, reads their bot states and rotated tokens, and claims `keys` (strategy, key hex; each at most once in
/// the list), all in one round trip: the statements go out together, and PostgreSQL runs each one once the locks
/// are taken. `demand`: each strategy (each once) with the most deliveries this batch may count against its
/// window. The strategies whose lock was held past a [`Lock::Brief`] wait (or at all, with [`Lock::Free`]) are
/// left out of all of it ([`Started::busy`]).
///
/// Every key is claimed, also those of alerts the batch then answers without a claim (over the rate limit, or
/// sent with a rotated-away token): the batch gives those back before it commits ([`Decided::unclaim`]), so
/// no other transaction ever sees them claimed, and the locks are held one round trip less.
pub async fn start(
    pg: &Pg,
    demand: &[(&str, i64)],
    keys: &[(&str, &str)],
    now_ms: i64,
    limits: Limits,
    lock: Lock,
) -> Result<Started, StoreError> {
    let batch = Batch { client: Some(pg.client().await?) };
    let c = batch.client();
    let opened = match attempt(c, demand, keys, now_ms, limits, lock).await {
        Err(Failure { at_locks: true, error }) if lock == Lock::Brief && error.lock_not_available() => {
            // Rolled back on its own connection, rather than dropped with it: a closed session's locks outlive it
            // a moment, and the next attempt would find the batch's other strategies held by it.
            c.batch_execute("ROLLBACK").await?;
            attempt(c, demand, keys, now_ms, limits, Lock::Free).await
        }
        opened => opened,
    };
    let (opened, fresh, db_ms, busy) = opened.map_err(|f| f.error)?;
    Ok(Started { batch, opened, fresh, db_ms, busy })
}

/// Where a batch's opening failed: at its locks, or elsewhere.
struct Failure {
    at_locks: bool,
    error: StoreError,
}

impl From<StoreError> for Failure {
    fn from(error: StoreError) -> Failure {
        Failure { at_locks: false, error }
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Failure {
        StoreError::from(e).into()
    }
}

/// [`start`]'s statements on `c`, taking the locks as `lock` says: its opened windows, states and tokens, which
/// keys it claimed, the database's clock and the strategies left out.
async fn attempt(
    c: &Object,
    demand: &[(&str, i64)],
    keys: &[(&str, &str)],
    now_ms: i64,
    limits: Limits,
    lock: Lock,
) -> Result<(Opened, Vec<bool>, i64, Vec<String>), Failure> {
    let (locks, wait_ms) = match lock {
        Lock::Brief => (LOCK, LOCK_BRIEF_MS),
        Lock::Free => (TRY_LOCK, LOCK_WAIT_MS),
        // A `lock_timeout` of 0 would wait for good.
        Lock::Wait(ms) => (LOCK, ms.max(1)),
    };
    let (locks, rewind, open, claim) = futures_util::future::try_join4(
        c.prepare_cached(locks),
        c.prepare_cached(REWIND),
        c.prepare_cached(OPEN),
        c.prepare_cached(CLAIM),
    )
    .await?;
    let since = now_ms.saturating_sub(limits.rate_window_ms);
    let limit = i64::from(limits.rate_limit);
    let (strategies, wanted): (Vec<&str>, Vec<i64>) = demand.iter().copied().unzip();
    let open_params: [&Param<'_>; 4] = [&strategies, &since, &limit, &wanted];
    let (key_s, key_k): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    let digests: Vec<String> = keys.iter().map(|(s, k)| digest(s, k)).collect();
    let expired = now_ms.saturating_sub(limits.dedup_window_ms);
    let claim_params: [&Param<'_>; 5] = [&key_s, &key_k, &now_ms, &expired, &digests];
    // Each future sends its statement when first polled, and `try_join5` polls them in this order: the
    // transaction's first statement leads. The batch's statements are the same few each time, over arrays:
    // PostgreSQL's custom plans for them cost more to make than to run, and its generic plans serve every
    // batch.
    let claimed = async {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        c.query(&claim, &claim_params).await
    };
    let rewind_params: [&Param<'_>; 3] = [&strategies, &now_ms, &CLOCK_STEP_MS];
    let begin = format!(
        "BEGIN; SET LOCAL swh.batch = 'on'; SET LOCAL plan_cache_mode = force_generic_plan; \
         SET LOCAL lock_timeout = {wait_ms}"
    );
    let wait_after = LOCK_WAIT_MS as i64;
    let lock_params: Vec<&Param<'_>> =
        if lock == Lock::Free { vec![&strategies] } else { vec![&strategies, &wait_after] };
    let locked =
        async { c.query_one(&locks, &lock_params).await.map_err(|e| Failure { at_locks: true, error: e.into() }) };
    let (_, locked, rewound, rows, claimed) = futures_util::future::try_join5(
        c.batch_execute(&begin).map_err(Failure::from),
        locked,
        c.query_one(&rewind, &rewind_params).map_err(Failure::from),
        c.query(&open, &open_params).map_err(Failure::from),
        claimed.map_err(Failure::from),
    )
    .await?;
    let busy: Vec<String> = if lock == Lock::Free { locked.get(0) } else { Vec::new() };
    let (rewound, stepped, db_ms): (i64, i64, i64) = (rewound.get(0), rewound.get(1), rewound.get(2));
    if rewound > 0 {
        tracing::warn!(
            strategies = rewound,
            "the clock is behind times stored in the rate and dedup windows: later marks dropped, later keys \
             brought back to now"
        );
    }
    if stepped > rewound {
        // Only a batch off the database's clock leaves a step unrewound: its own time would be the one the keys
        // are brought back to, and its window is judged by it, so it is refused here (as the caller refuses any
        // batch off the database's clock). Dropping the batch rolls its claims back; the sender's retry may reach a
        // server whose clock is right.
        clock_agrees(db_ms, now_ms)?;
    }
    let mut opened = Opened::default();
    for r in rows {
        let (s, n): (String, i64) = (r.get(0), r.get(1));
        opened.room.insert(s.clone(), (limit - n).max(0));
        if let Some(token) = r.get::<_, Option<String>>(2) {
            opened.tokens.insert(s.clone(), token);
        }
        let bots: Option<Vec<String>> = r.get(3);
        let states: Option<Vec<String>> = r.get(4);
        let versions: Option<Vec<i64>> = r.get(5);
        if let (Some(b), Some(st), Some(v)) = (bots, states, versions) {
            let rows = b.into_iter().zip(st).zip(v).map(|((b, st), v)| (b, st, v)).collect();
            opened.states.insert(s, rows);
        }
    }
    let fresh: HashSet<(String, String)> = claimed.iter().map(|r| (r.get(0), r.get(1))).collect();
    let fresh = keys.iter().map(|(s, k)| fresh.contains(&((*s).to_owned(), (*k).to_owned()))).collect();
    Ok((opened, fresh, db_ms, busy))
}

impl Batch {
    fn client(&self) -> &Object {
        self.client.as_ref().expect("a batch's connection is there until it finishes")
    }

    /// The claims of `keys` (strategy, key hex), given which of them [`start`] claimed (`fresh`): a duplicate
    /// is logged the first time in its window, and marked so here. Only the keys of alerts the batch answers
    /// as claimed belong here: one over the rate limit is no duplicate, however often it comes.
    pub async fn claims(&self, keys: &[(&str, &str)], fresh: &[bool]) -> Result<Vec<Claim>, StoreError> {
        let dups: Vec<String> = keys.iter().zip(fresh).filter(|(_, f)| !**f).map(|((s, k), _)| digest(s, k)).collect();
        let mut first: HashSet<(String, String)> = HashSet::new();
        if !dups.is_empty() {
            // Rare: say which duplicates are their window's first (logged once).
            let update = self
                .client()
                .prepare_cached(
                    "UPDATE dedup_keys SET dup_logged = TRUE FROM unnest($1::TEXT[]) AS u (d)
                     WHERE digest = u.d::UUID AND NOT dup_logged
                     RETURNING strategy, key",
                )
                .await?;
            first = self.client().query(&update, &[&dups]).await?.iter().map(|r| (r.get(0), r.get(1))).collect();
        }
        Ok(keys
            .iter()
            .zip(fresh)
            .map(|((s, k), &f)| {
                if f {
                    Claim::Fresh
                } else {
                    Claim::Duplicate { log: first.contains(&((*s).to_owned(), (*k).to_owned())) }
                }
            })
            .collect())
    }

    /// Stores what the engine decided for each alert and commits: rate marks, keys given back, log rows and
    /// outbox rows. `durable`: wait until the commit is on disk (the batch holds an alert answered processed);
    /// otherwise the commit is acknowledged before its WAL is flushed (rejections and duplicates only: losing
    /// them in a crash of PostgreSQL costs a slightly shorter window, as the embedded store's log rows do).
    pub async fn finish(mut self, now_ms: i64, decided: &[Decided], durable: bool) -> Result<(), StoreError> {
        let appends = Appends {
            marks: decided.iter().filter(|d| d.counted).map(|d| (d.strategy.as_str(), now_ms)).collect(),
            unclaim: decided.iter().filter_map(|d| Some((d.strategy.as_str(), d.unclaim.as_deref()?))).collect(),
            logs: decided.iter().filter_map(|d| d.log.as_ref()).collect(),
            rows: decided.iter().flat_map(|d| d.rows.iter()).collect(),
            // Each row's alert's entry, by its place among the entries of the alerts that have one.
            row_logs: decided
                .iter()
                .scan(0, |entries, d| {
                    let entry = d.log.as_ref().map(|_| *entries);
                    *entries += usize::from(d.log.is_some());
                    Some(std::iter::repeat(entry).take(d.rows.len()))
                })
                .flatten()
                .collect(),
        };
        let commit = if durable { "COMMIT" } else { "SET LOCAL synchronous_commit TO OFF; COMMIT" };
        let c = self.client();
        // The writes and the commit go out together: the writes' future sends its statement when first polled,
        // which `try_join` does before it polls the commit's, so the commit follows them on the connection.
        // Should the writes fail, PostgreSQL rolls the commit back, and the error is this batch's answer.
        let st = tables::append_statement(c).await?;
        futures_util::future::try_join(tables::append_with(c, &st, &appends), c.batch_execute(commit)).await?;
        // Committed: the connection goes back to the pool.
        drop(self.client.take());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The window's count and the claims against a real PostgreSQL, at chosen times.
    use super::super::test_harness as harness;
    use super::super::Pg;
    use super::*;

    async fn pg() -> (harness::Postgres, Pg) {
        super::super::migrated(4).await
    }

    /// Starts a batch of `keys` at `now` (a window of 1 s) and answers them all as claimed.
    async fn claim(pg: &Pg, keys: &[(&str, &str)], now: i64) -> (Batch, Vec<Claim>) {
        let limits = Limits { rate_limit: 100, rate_window_ms: 1_000, dedup_window_ms: 1_000 };
        let mut demand: Vec<(&str, i64)> = keys.iter().map(|(s, _)| (*s, 1)).collect();
        demand.sort_unstable();
        demand.dedup();
        let Started { batch, fresh, .. } = start(pg, &demand, keys, now, limits, Lock::Brief).await.unwrap();
        let claims = batch.claims(keys, &fresh).await.unwrap();
        (batch, claims)
    }

    /// A batch's outbox rows each keep the first log row of their own alert, alerts without a log entry or without
    /// rows between them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batchs_outbox_rows_keep_their_own_alerts_first_log_row() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 100, rate_window_ms: 1_000, dedup_window_ms: 1_000 };
        let Started { batch: tx, .. } = start(&pg, &[("s", 4)], &[], 5_000, limits, Lock::Brief).await.unwrap();
        let log = |a: u8, records: usize| LogEntry {
            ts_ms: 5_000,
            strategy: "s".into(),
            decision: "processed",
            http_status: 200,
            alerts: format!("[{{\"a\":{a}}}]"),
            records: vec![(strategy_webhook::Level::Info, "placed".into()); records],
        };
        let rows = |n: usize| vec![OutboxRow::sample(0, "place", "pending", 5_000); n];
        let decided = [
            Decided { strategy: "s".into(), log: Some(log(1, 2)), rows: rows(2), ..Decided::default() },
            Decided { strategy: "s".into(), log: Some(log(2, 1)), ..Decided::default() },
            Decided { strategy: "s".into(), rows: rows(1), ..Decided::default() },
            Decided { strategy: "s".into(), log: Some(log(3, 3)), rows: rows(1), ..Decided::default() },
        ];
        tx.finish(5_000, &decided, true).await.unwrap();
        let c = pg.client().await.unwrap();
        let firsts: Vec<i64> = c
            .query("SELECT min(id) FROM logs GROUP BY alerts ORDER BY alerts", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        let got: Vec<Option<i64>> = c
            .query("SELECT alert_log_id FROM outbox ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(got, [Some(firsts[0]), Some(firsts[0]), None, Some(firsts[2])], "{firsts:?}");
        drop(server);
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
            // The batch may ask for more than it takes (alerts refused before the rate step).
            let demand = n + usize::from(rng >> 32 & 1 == 1);
            let Started { batch: tx, opened, .. } =
                start(&pg, &[("s", demand as i64)], &[], now, limits, Lock::Brief).await.unwrap();
            let room = usize::try_from(opened.room["s"]).unwrap();
            // The room may be counted from an upper bound when it covers the whole demand: never more than the
            // exact room, and always granting the demand exactly as the exact count would.
            let exact = 5usize.saturating_sub(live);
            assert!(room <= exact, "room {room} over the exact {exact} at {now} with {counted:?}");
            assert_eq!(demand.min(room), demand.min(exact), "at {now} with {counted:?}");
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
    async fn a_batch_dropped_unfinished_keeps_nothing_and_leaves_no_transaction_open() {
        let (server, pg) = pg().await;
        assert_eq!(claim(&pg, &[("a", "k")], 10).await.1, [Claim::Fresh]);
        // Its connection is closed, not handed back inside the transaction: no session is left in one, and the
        // strategy's lock and the key are free for the next batch.
        let idle_in_tx = "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'";
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let n: i64 = pg.client().await.unwrap().query_one(idle_in_tx, &[]).await.unwrap().get(0);
            if n == 0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{n} sessions left inside a transaction");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        for _ in 0..4 {
            assert_eq!(claim(&pg, &[("a", "k")], 20).await.1, [Claim::Fresh]);
        }
        drop(server);
    }

    /// Two keys whose window has passed, still stored (the prune has not run): a batch re-claiming both and the
    /// prune deleting both lock the same rows. Locking them in opposite orders deadlocked, and PostgreSQL
    /// aborted one: the batch's alerts answered 500, or the writer's whole group commit (log rows, queued
    /// notifications) lost. Both lock in the keys' digest order: here the prune holds the lower one, the batch
    /// (given the keys higher first) waits for it holding nothing, and the prune then takes the higher one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_reclaiming_expired_keys_and_the_prune_never_deadlock() {
        let (server, pg) = pg().await;
        let mut keys = [("a", "k1"), ("a", "k2")];
        keys.sort_by_key(|(s, k)| std::cmp::Reverse(digest(s, k)));
        let (high, low) = (digest(keys[0].0, keys[0].1), digest(keys[1].0, keys[1].1));
        let c = pg.client().await.unwrap();
        for (s, k) in keys {
            c.execute(
                "INSERT INTO dedup_keys (digest, strategy, key, ts_ms) VALUES ($1::TEXT::UUID, $2, $3, 10)",
                &[&digest(s, k), &s, &k],
            )
            .await
            .unwrap();
        }
        let mut prune = pg.client().await.unwrap();
        let tx = prune.transaction().await.unwrap();
        tx.batch_execute("SET LOCAL lock_timeout = '5s'").await.unwrap();
        let lock = "SELECT 1 FROM dedup_keys WHERE digest = $1::TEXT::UUID FOR UPDATE";
        tx.execute(lock, &[&low]).await.unwrap();
        let batch = {
            let pg = pg.clone();
            tokio::spawn(async move {
                let (batch, claims) = claim(&pg, &keys, 10_000).await;
                batch.finish(10_000, &[], true).await.map(|_| claims)
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let locked = tx.execute(lock, &[&high]).await;
        assert!(locked.is_ok(), "the prune's second lock: {locked:?}");
        tx.execute("DELETE FROM dedup_keys WHERE ts_ms <= 10", &[]).await.unwrap();
        tx.commit().await.unwrap();
        let claims = batch.await.unwrap();
        assert!(claims.is_ok(), "the batch: {claims:?}");
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_claimed_before_the_digest_migration_stay_claimed_and_no_two_pairs_share_a_digest() {
        // The schema as migration 6 left it, with a key claimed then.
        let (server, pg) = super::super::at_migration(
            6,
            "INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES ('a', 'k', 10), ('é', 'k', 10)",
        )
        .await;
        pg.migrate().await.unwrap();
        let dup = |log| Claim::Duplicate { log };
        // The old keys are still claimed (the server's digest is the migration's, with a strategy's length in
        // characters); a strategy and key that run together as another pair's do not collide.
        let keys = [("a", "k"), ("é", "k"), ("a", "k2"), ("ab", "c"), ("a", "bc")];
        let (tx, claims) = claim(&pg, &keys, 500).await;
        assert_eq!(claims, [dup(true), dup(true), Claim::Fresh, Claim::Fresh, Claim::Fresh]);
        tx.finish(500, &[], true).await.unwrap();
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_outside_a_batchs_transaction_claims_nothing() {
        // The claim is sent behind the BEGIN without waiting for it: were the BEGIN refused, the claim would run
        // on its own and commit a key with no orders behind it. It inserts only inside a batch's transaction.
        // One connection, so the batch and the lone claims share its session.
        let (server, pg) = super::super::migrated(1).await;
        let lone = |key: &'static str| {
            let pg = pg.clone();
            async move {
                let c = pg.client().await.unwrap();
                let st = c.prepare(CLAIM).await.unwrap();
                let d = digest("a", key);
                let p: [&Param<'_>; 5] = [&vec!["a"], &vec![key], &10i64, &0i64, &vec![d.as_str()]];
                c.query(&st, &p).await.unwrap().len()
            }
        };
        assert_eq!(lone("k").await, 0, "claimed outside a transaction");
        // In a batch's transaction it claims; once that has ended, the session claims nothing on its own again.
        let (tx, claims) = claim(&pg, &[("a", "k")], 10).await;
        assert_eq!(claims, [Claim::Fresh]);
        tx.finish(10, &[], true).await.unwrap();
        assert_eq!(lone("k2").await, 0, "claimed after a batch on the same session");
        let n: i64 = pg.client().await.unwrap().query_one("SELECT count(*) FROM dedup_keys", &[]).await.unwrap().get(0);
        assert_eq!(n, 1);
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn keys_are_claimed_once_per_window_and_the_first_duplicate_is_logged() {
        let (server, pg) = pg().await;
        let claim = |keys: Vec<(&'static str, &'static str)>, now: i64| {
            let pg = pg.clone();
            async move {
                let (tx, c) = claim(&pg, &keys, now).await;
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

    /// A commit PostgreSQL refuses is rolled back: nothing of it is stored, and it is no commit that may have
    /// landed. On a server whose messages are in another language the severity's text is translated
    /// ("FEHLER"), and every refused commit was read as maybe stored (answered "do not place it by hand" for an
    /// alert that never existed). The untranslated severity is read now.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refused_commit_is_not_unconfirmed_whatever_the_servers_language() {
        let (server, pg) = pg().await;
        let c = pg.client().await.unwrap();
        c.batch_execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$;
             CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON rate_marks DEFERRABLE INITIALLY DEFERRED
                 FOR EACH ROW EXECUTE FUNCTION refuse();",
        )
        .await
        .unwrap();
        c.batch_execute("ALTER SYSTEM SET lc_messages = 'de_DE.UTF-8'")
            .await
            .expect("the de_DE.UTF-8 locale (scripts/setup.sh makes it)");
        c.batch_execute("SELECT pg_reload_conf()").await.unwrap();
        drop(c);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 10_000 };
        let Started { batch, .. } = start(&pg, &[("s", 1)], &[], 1_000, limits, Lock::Brief).await.unwrap();
        let decided = [Decided { strategy: "s".into(), counted: true, ..Decided::default() }];
        let e = batch.finish(1_000, &decided, true).await.unwrap_err();
        assert!(e.to_string().contains("FEHLER"), "the server speaks German: {e}");
        let marks: i64 =
            pg.client().await.unwrap().query_one("SELECT count(*) FROM rate_marks", &[]).await.unwrap().get(0);
        assert_eq!(marks, 0, "the refused commit stored nothing");
        assert!(!e.commit_unconfirmed(), "a refused commit taken for one that may have landed: {e}");
        drop(server);
    }

    /// A batch takes its time before it waits for its strategies' locks (up to 7 s behind a server frozen in its
    /// own batch); the minute's prune, which takes none of those locks, runs meanwhile at its own, later time. It
    /// emptied the window's oldest marks and keys under the waiting batch, which then admitted a window's worth
    /// more and traded a repeat again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prune_while_a_batch_waits_for_its_locks_leaves_its_window_whole() {
        use crate::store::{Op, Retention, Windows};
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 10_000 };
        // Five deliveries at 1,500 fill the window; the key "k" is claimed then.
        let Started { batch: tx, opened, .. } =
            start(&pg, &[("s", 5)], &[("s", "k")], 1_500, limits, Lock::Brief).await.unwrap();
        assert_eq!(opened.room["s"], 5);
        let decided: Vec<Decided> =
            (0..5).map(|_| Decided { strategy: "s".into(), counted: true, ..Decided::default() }).collect();
        tx.finish(1_500, &decided, true).await.unwrap();
        // Another server's batch holds the strategy's lock for a moment.
        let mut holder = pg.client().await.unwrap();
        let htx = holder.transaction().await.unwrap();
        htx.query_one(LOCK, &[&vec!["s"], &(LOCK_WAIT_MS as i64)]).await.unwrap();
        // This server's batch takes its time, 11,400: the window (1,400, 11,400] holds five, and "k" is a duplicate.
        let waiting = {
            let pg = pg.clone();
            tokio::spawn(async move {
                let Started { batch, opened, fresh, .. } =
                    start(&pg, &[("s", 1)], &[("s", "k")], 11_400, limits, Lock::Wait(LOCK_WAIT_MS)).await.unwrap();
                let room = opened.room["s"];
                batch.finish(11_400, &[], true).await.unwrap();
                (room, fresh)
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        // Meanwhile the minute's prune runs (any server's writer), 200 ms later than the batch's time.
        let mut c = pg.client().await.unwrap();
        let ptx = c.transaction().await.unwrap();
        let retention = Retention { max_age_ms: i64::MAX / 2, max_rows_per_strategy: 1_000 };
        let windows = Windows { dedup_ms: 10_000, rate_ms: 10_000 };
        super::super::tables::apply(&ptx, &Op::PruneWindows { retention, windows, now_ms: 11_600 }).await.unwrap();
        ptx.commit().await.unwrap();
        htx.rollback().await.unwrap();
        let (room, fresh) = waiting.await.unwrap();
        assert_eq!((room, fresh), (0, vec![false]), "the window at 11,400 holds five deliveries and the key");
        drop(server);
    }

    /// The database's clock (Unix ms): a batch's time is judged against it.
    async fn db_now(pg: &Pg) -> i64 {
        let c = pg.client().await.unwrap();
        c.query_one("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT", &[]).await.unwrap().get(0)
    }

    /// A clock gone back is told by a strategy's rate seconds: pruned after the rate window while its dedup keys
    /// stayed, a key claimed minutes before the step was left an hour ahead, a duplicate for as long.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_key_stored_ahead_whose_marks_were_pruned_is_brought_back() {
        use crate::store::{Op, Retention, Windows};
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        // The clock set right agrees with the database's: the run before it was an hour ahead.
        let real = db_now(&pg).await;
        let ahead = real + 3_600_000;
        let one = || [Decided { strategy: "s".into(), counted: true, ..Decided::default() }];
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], ahead, limits, Lock::Brief).await.unwrap();
        assert_eq!(fresh, [true]);
        batch.finish(ahead, &one(), true).await.unwrap();
        // The minute's prune 3 min later, still ahead: the rate window's marks go, the key stays.
        let mut c = pg.client().await.unwrap();
        let ptx = c.transaction().await.unwrap();
        let retention = Retention { max_age_ms: i64::MAX / 2, max_rows_per_strategy: 1_000 };
        let windows = Windows { dedup_ms: 300_000, rate_ms: 60_000 };
        let prune = Op::PruneWindows { retention, windows, now_ms: ahead + 180_000 };
        super::super::tables::apply(&ptx, &prune).await.unwrap();
        ptx.commit().await.unwrap();
        // The clock steps back; a batch of another key at the step, then the first key a window later.
        let step = real;
        let Started { batch, .. } =
            start(&pg, &[("s", 1)], &[("s", "other")], step, limits, Lock::Brief).await.unwrap();
        batch.finish(step, &one(), true).await.unwrap();
        let later = step + 301_000;
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], later, limits, Lock::Brief).await.unwrap();
        batch.finish(later, &[], true).await.unwrap();
        assert_eq!(fresh, [true], "the key was left an hour ahead");
        drop(server);
    }

    /// Servers in step on a strategy; one server's batch carries a time 10 min behind the database's clock (its
    /// clock stepped back alone, or it paused between taking the batch's time and sending its statements). Taken
    /// for a clock gone back, it dropped the peers' rate marks and brought their fresh keys back 10 min: a retry
    /// 2 s after an alert was claimed again and traded twice, and the full window had room again. The batch is
    /// refused now, storing nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_behind_the_databases_clock_is_refused_and_leaves_its_peers_windows_whole() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let real = db_now(&pg).await;
        // A server whose clock is right: five deliveries fill the window, one of them claims "k".
        let five: Vec<Decided> =
            (0..5).map(|_| Decided { strategy: "s".into(), counted: true, ..Decided::default() }).collect();
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 5)], &[("s", "k")], real, limits, Lock::Brief).await.unwrap();
        assert_eq!(fresh, [true]);
        batch.finish(real, &five, true).await.unwrap();
        // The server whose clock is behind: its batch is refused, as the server's batch path does, and dropped.
        let behind = real - 600_000;
        let Started { batch, db_ms, .. } =
            start(&pg, &[("s", 1)], &[("s", "other")], behind, limits, Lock::Brief).await.unwrap();
        match clock_agrees(db_ms, behind) {
            Err(StoreError::ClockBehind { behind_ms }) => {
                assert!((600_000..630_000).contains(&behind_ms), "{behind_ms}")
            }
            Err(e) => panic!("refused for another cause: {e}"),
            Ok(()) => panic!("a batch 10 min behind the database's clock was taken"),
        }
        drop(batch);
        let keys: i64 =
            pg.client().await.unwrap().query_one("SELECT count(*) FROM dedup_keys", &[]).await.unwrap().get(0);
        assert_eq!(keys, 1, "the refused batch's claim is rolled back");
        // The sender's retry of "k", 2 s after it was claimed, on a server whose clock is right.
        let retry = real + 2_000;
        // Waiting: the dropped batch's session, closed, may hold the lock a moment longer.
        let Started { batch, opened, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], retry, limits, Lock::Wait(LOCK_WAIT_MS)).await.unwrap();
        batch.finish(retry, &[], true).await.unwrap();
        assert_eq!(fresh, [false], "a retry 2 s after the alert was claimed again: it trades twice");
        assert_eq!(opened.room["s"], 0, "five deliveries 2 s ago fill the window");
        drop(server);
    }

    /// Two servers within the accepted 30 s of the database's clock, one 20 s ahead and one 20 s behind. The one ahead
    /// stored five deliveries and a key; a second later the one behind found those marks 39 s ahead of its own time,
    /// took them for a clock gone back and, its time within 30 s of the database's, rewound: the window had room for
    /// five more orders in the minute, and the key was brought back 39 s (a retry near the window's end claimed
    /// again, traded twice). A step is judged by the database's clock: marks no batch taken could have stamped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn servers_within_the_tolerance_keep_each_others_windows() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let real = db_now(&pg).await;
        let five: Vec<Decided> =
            (0..5).map(|_| Decided { strategy: "s".into(), counted: true, ..Decided::default() }).collect();
        let fast = real + 20_000;
        let Started { batch, db_ms, fresh, .. } =
            start(&pg, &[("s", 5)], &[("s", "k")], fast, limits, Lock::Brief).await.unwrap();
        assert!(clock_agrees(db_ms, fast).is_ok());
        assert_eq!(fresh, [true]);
        batch.finish(fast, &five, true).await.unwrap();
        let slow = real + 1_000 - 20_000;
        let one = [Decided { strategy: "s".into(), counted: true, ..Decided::default() }];
        let Started { batch, db_ms, opened, .. } =
            start(&pg, &[("s", 1)], &[("s", "k2")], slow, limits, Lock::Brief).await.unwrap();
        assert!(clock_agrees(db_ms, slow).is_ok(), "the slow server's batch is taken");
        let room = opened.room["s"];
        batch.finish(slow, &one, true).await.unwrap();
        let c = pg.client().await.unwrap();
        let ts: i64 = c.query_one("SELECT ts_ms FROM dedup_keys WHERE key = 'k'", &[]).await.unwrap().get(0);
        assert_eq!((room, ts), (0, fast), "five deliveries a second ago undone (room), the fast server's key moved");
        let marks: i64 =
            c.query_one("SELECT sum(n)::BIGINT FROM rate_marks WHERE ts_ms = $1", &[&fast]).await.unwrap().get(0);
        let seconds: i64 = c
            .query_one("SELECT sum(n)::BIGINT FROM rate_seconds WHERE second = $1", &[&(fast / 1000)])
            .await
            .unwrap()
            .get(0);
        assert_eq!((marks, seconds), (5, 5), "the fast server's marks were dropped");
        drop(c);
        drop(server);
    }

    /// A server minutes behind the database's clock with no peer's marks ahead of it: its claims were stored that much
    /// older, and a resend 61 s later on a server whose clock is right found the key expired and traded again. The
    /// server's batch path ([`crate::shared`]) refuses any batch 30 s or more behind the database's clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_minutes_behind_the_database_with_no_marks_ahead_is_refused() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let real = db_now(&pg).await;
        let behind = real - 240_000;
        let Started { batch, db_ms, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], behind, limits, Lock::Brief).await.unwrap();
        assert!(matches!(clock_agrees(db_ms, behind), Err(StoreError::ClockBehind { .. })), "4 min behind, taken");
        assert!(clock_agrees(db_ms, db_ms - 5_000).is_ok(), "a few seconds of wait and skew are ordinary");
        drop(batch);
        // Waiting: the dropped batch's session, closed, may hold the lock a moment longer.
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], real + 61_000, limits, Lock::Wait(LOCK_WAIT_MS)).await.unwrap();
        batch.finish(real + 61_000, &[], true).await.unwrap();
        assert_eq!(fresh, [true], "the dropped batch claimed nothing");
        drop(server);
    }

    /// A server whose clock is minutes ahead of the database's, one of servers in step on a strategy: judged by its
    /// own clock, a peer's key claimed 2 s before was past its window and claimed again (the retry traded twice),
    /// and its rate window began after every peer's mark (five deliveries 2 s ago left room for five more). The
    /// server's batch path ([`crate::shared`]) refuses it, as it does one behind, storing nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_minutes_ahead_of_the_database_is_refused_and_leaves_a_peers_live_key() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let real = db_now(&pg).await;
        let five: Vec<Decided> =
            (0..5).map(|_| Decided { strategy: "s".into(), counted: true, ..Decided::default() }).collect();
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 5)], &[("s", "k")], real, limits, Lock::Brief).await.unwrap();
        assert_eq!(fresh, [true]);
        batch.finish(real, &five, true).await.unwrap();
        // The retry, 2 s later, reaches the server whose clock is 5 min ahead.
        let ahead = real + 2_000 + 300_000;
        let Started { batch, db_ms, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], ahead, limits, Lock::Brief).await.unwrap();
        match clock_agrees(db_ms, ahead) {
            Err(StoreError::ClockAhead { ahead_ms }) => assert!((270_000..=302_000).contains(&ahead_ms), "{ahead_ms}"),
            Err(e) => panic!("refused for another cause: {e}"),
            Ok(()) => panic!("a batch 5 min ahead of the database's clock was taken"),
        }
        assert!(clock_agrees(db_ms, db_ms + 5_000).is_ok(), "a few seconds of skew are ordinary");
        drop(batch);
        let ts: i64 = pg
            .client()
            .await
            .unwrap()
            .query_one("SELECT ts_ms FROM dedup_keys WHERE key = 'k'", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(ts, real, "the refused batch's claim is rolled back");
        // The sender's next retry reaches a server whose clock is right.
        let retry = real + 4_000;
        // Waiting: the dropped batch's session, closed, may hold the lock a moment longer.
        let Started { batch, opened, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], retry, limits, Lock::Wait(LOCK_WAIT_MS)).await.unwrap();
        batch.finish(retry, &[], true).await.unwrap();
        assert_eq!((fresh, opened.room["s"]), (vec![false], 0), "the key and five deliveries 4 s ago");
        drop(server);
    }

    /// A batch whose own clock is ahead of the database's is no judge of a step either: finding marks further ahead
    /// (stored by a run whose clock was further ahead still), it rewinds nothing and is refused, where it was taken
    /// with a warning and judged its peers' rows by its own clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_ahead_of_the_databases_clock_rewinds_nothing_and_is_refused() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let one = || [Decided { strategy: "s".into(), counted: true, ..Decided::default() }];
        // A run an hour and 10 min ahead of the database's clock stored a mark and a key ("k").
        let further = db_now(&pg).await + 4_200_000;
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], further, limits, Lock::Brief).await.unwrap();
        assert_eq!(fresh, [true]);
        batch.finish(further, &one(), true).await.unwrap();
        // A server an hour ahead.
        let ahead = further - 600_000;
        match start(&pg, &[("s", 1)], &[("s", "other")], ahead, limits, Lock::Brief).await {
            Err(StoreError::ClockAhead { ahead_ms }) => assert!(ahead_ms > 3_500_000, "{ahead_ms}"),
            Err(e) => panic!("refused for another cause: {e}"),
            Ok(_) => panic!("a batch an hour ahead of the database's clock was taken"),
        }
        let c = pg.client().await.unwrap();
        let (keys, ts): (i64, i64) = c
            .query_one("SELECT count(*), max(ts_ms) FROM dedup_keys", &[])
            .await
            .map(|r| (r.get(0), r.get(1)))
            .unwrap();
        assert_eq!((keys, ts), (1, further), "the key was brought back, or the refused batch's claim kept");
        let marks: i64 = c.query_one("SELECT count(*) FROM rate_marks", &[]).await.unwrap().get(0);
        assert_eq!(marks, 1, "the mark further ahead was dropped");
        drop(c);
        drop(server);
    }

    /// The minute's prune on a server whose clock is 6 min ahead cut by that clock: it deleted the key and the rate
    /// mark a server whose clock is right had stored a moment before, and the sender's retry 5 s later was claimed
    /// again and traded twice. The prune cuts by the earlier of its clock and the database's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prune_on_a_server_ahead_leaves_a_peers_live_key_and_marks() {
        use crate::store::{Op, Retention, Windows};
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 60, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let real = db_now(&pg).await;
        let one = || [Decided { strategy: "s".into(), counted: true, ..Decided::default() }];
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], real, limits, Lock::Brief).await.unwrap();
        assert_eq!(fresh, [true]);
        batch.finish(real, &one(), true).await.unwrap();
        let mut c = pg.client().await.unwrap();
        let ptx = c.transaction().await.unwrap();
        let retention = Retention { max_age_ms: i64::MAX / 2, max_rows_per_strategy: 1_000 };
        let windows = Windows { dedup_ms: 300_000, rate_ms: 60_000 };
        let prune = Op::PruneWindows { retention, windows, now_ms: real + 365_001 };
        super::super::tables::apply(&ptx, &prune).await.unwrap();
        ptx.commit().await.unwrap();
        let marks: i64 = c.query_one("SELECT count(*) FROM rate_marks", &[]).await.unwrap().get(0);
        assert_eq!(marks, 1, "a mark stored a moment ago was pruned");
        let retry = real + 5_000;
        let Started { batch, fresh, .. } =
            start(&pg, &[("s", 1)], &[("s", "k")], retry, limits, Lock::Brief).await.unwrap();
        batch.finish(retry, &[], true).await.unwrap();
        assert_eq!(fresh, [false], "a retry 5 s after the alert was claimed again: it trades twice");
        drop(server);
    }

    /// Another server's batch holds the strategy's lock (its commit waiting for a synchronous standby): this
    /// batch's wait ends in PostgreSQL's own lock timeout, told apart from an unreachable database, before the
    /// server's opening wait gives up on the database.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_waiting_on_a_held_lock_gives_up_as_a_lock_wait() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 10_000, dedup_window_ms: 10_000 };
        let mut holder = pg.client().await.unwrap();
        let htx = holder.transaction().await.unwrap();
        // A commit waiting for a standby is not idle in its transaction: PostgreSQL does not end it.
        htx.batch_execute("SET LOCAL idle_in_transaction_session_timeout = 0").await.unwrap();
        htx.query_one(LOCK, &[&vec!["s"], &(LOCK_WAIT_MS as i64)]).await.unwrap();
        let began = std::time::Instant::now();
        let waiting = start(&pg, &[("s", 1)], &[("s", "k")], 1_000, limits, Lock::Wait(LOCK_WAIT_MS));
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("still waiting after 10 s")
            .err()
            .expect("the lock is held");
        assert!(e.lock_not_available(), "{e}");
        assert!(!StoreError::Unreachable("no answer in time".into()).lock_not_available());
        let waited = began.elapsed();
        assert!(waited >= std::time::Duration::from_millis(LOCK_WAIT_MS) && waited.as_secs() < 7, "{waited:?}");
        htx.rollback().await.unwrap();
        drop(server);
    }

    /// Another server's batch holds strategy a's lock (its commit waiting for a synchronous standby). A batch of a
    /// and b waited for it, and b's alerts with it, for the whole lock wait, then failed them all; it now waits
    /// only briefly, leaves a out (nothing of a counted, read, rewound or claimed), and goes on with b.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_leaves_out_a_strategy_whose_lock_is_held_and_goes_on_with_the_others() {
        let (server, pg) = pg().await;
        let limits = Limits { rate_limit: 5, rate_window_ms: 60_000, dedup_window_ms: 300_000 };
        let one = |s: &str| [Decided { strategy: s.into(), counted: true, ..Decided::default() }];
        // A mark of a's an hour ahead of the database's clock: a rewind of a would drop it.
        let ahead = db_now(&pg).await + 3_600_000;
        let Started { batch, .. } = start(&pg, &[("a", 1)], &[], ahead, limits, Lock::Brief).await.unwrap();
        batch.finish(ahead, &one("a"), true).await.unwrap();
        let mut holder = pg.client().await.unwrap();
        let htx = holder.transaction().await.unwrap();
        htx.query_one(LOCK, &[&vec!["a"], &(LOCK_WAIT_MS as i64)]).await.unwrap();
        let now = db_now(&pg).await;
        let began = std::time::Instant::now();
        let keys = [("a", "ka"), ("b", "kb")];
        let Started { batch, opened, fresh, busy, .. } =
            start(&pg, &[("a", 1), ("b", 1)], &keys, now, limits, Lock::Brief).await.unwrap();
        let waited = began.elapsed();
        assert!(waited.as_millis() >= u128::from(LOCK_BRIEF_MS) && waited.as_secs() < 1, "waited {waited:?}");
        assert_eq!((busy, fresh), (vec!["a".to_owned()], vec![false, true]));
        assert_eq!(opened.room.keys().collect::<Vec<_>>(), ["b"], "a's window was read without its lock");
        batch.finish(now, &one("b"), true).await.unwrap();
        htx.rollback().await.unwrap();
        let c = pg.client().await.unwrap();
        let claimed: Vec<String> =
            c.query("SELECT strategy FROM dedup_keys", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(claimed, ["b"], "a's key claimed without its lock");
        let marks: i64 = c.query_one("SELECT count(*) FROM rate_marks WHERE strategy = 'a'", &[]).await.unwrap().get(0);
        assert_eq!(marks, 1, "a's marks rewound without its lock");
        // Once free, a's lock is taken, and a's key claimed.
        let Started { batch, fresh, busy, .. } =
            start(&pg, &[("a", 1)], &[("a", "ka")], now, limits, Lock::Brief).await.unwrap();
        drop(batch);
        assert_eq!((busy, fresh), (Vec::<String>::new(), vec![true]));
        drop(c);
        drop(server);
    }
}
