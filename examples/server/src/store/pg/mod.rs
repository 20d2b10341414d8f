//! The shared store of several servers: the embedded database's tables in one PostgreSQL database
//! (`--database postgres://…`), plus what sharing needs. This file holds the plumbing (the pool, the versioned
//! migrations, the writer task, blocking reads for the [`Reader`](super::Reader)); [`batch`] holds the webhook's
//! transactions (the rate counts, dedup claims and outbox rows of a batch of alerts in one commit), [`leases`]
//! the bots' leases, and [`tables`] the statements the writer applies.
//!
//! Writes go through the same queue of [`Op`]s as SQLite's writer thread, applied by one task in one
//! transaction per batch (group commit, as there). Only the webhook's own transactions bypass it: they must
//! hold their strategies' locks from the rate count to the commit.

pub mod batch;
pub mod clock;
pub mod leases;
mod tables;
pub(crate) use tables::prune;

/// The tests' PostgreSQL (a real one, started in a temporary directory), shared with the integration tests.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../../tests/server_support/postgres.rs"]
pub(crate) mod test_harness;

use super::{drain, Job, Op, StoreError, BATCH, LOG_BATCH_WAIT};
use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

/// The migrations, in order: (version, SQL). Each is applied once, in its own transaction; the database
/// records the versions it has in `schema_migrations`.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../../migrations/postgres/0001_shared_store.sql")),
    (2, include_str!("../../../migrations/postgres/0002_rate_seconds.sql")),
    (3, include_str!("../../../migrations/postgres/0003_rate_marks_without_id.sql")),
    (4, include_str!("../../../migrations/postgres/0004_time_indexes_brin.sql")),
    (5, include_str!("../../../migrations/postgres/0005_rate_marks_per_instant.sql")),
    (6, include_str!("../../../migrations/postgres/0006_logs_without_primary_key.sql")),
    (7, include_str!("../../../migrations/postgres/0007_dedup_keys_by_digest.sql")),
    (8, include_str!("../../../migrations/postgres/0008_outbox_by_time.sql")),
    (9, include_str!("../../../migrations/postgres/0009_outbox_target.sql")),
    (10, include_str!("../../../migrations/postgres/0010_retired_tokens.sql")),
    (11, include_str!("../../../migrations/postgres/0011_lease_takeovers.sql")),
    (12, include_str!("../../../migrations/postgres/0012_lease_renewed.sql")),
    (13, include_str!("../../../migrations/postgres/0013_outbox_alert_log.sql")),
];

/// A PostgreSQL started for a test, and a pool of `size` on it with the schema migrated.
#[cfg(test)]
async fn migrated(size: usize) -> (test_harness::Postgres, Pg) {
    let server = tokio::task::spawn_blocking(test_harness::Postgres::start).await.unwrap();
    let pg = Pg::connect(&server.url(), size).await.unwrap();
    pg.migrate().await.unwrap();
    (server, pg)
}

/// A PostgreSQL started for a test, with the schema as a server of migration `n` left it (migrations 1 to `n`
/// applied and recorded, none after) and then `then` run on it: the older database a migration test upgrades.
#[cfg(test)]
async fn at_migration(n: usize, then: &str) -> (test_harness::Postgres, Pg) {
    let server = tokio::task::spawn_blocking(test_harness::Postgres::start).await.unwrap();
    let pg = Pg::connect(&server.url(), 4).await.unwrap();
    let c = pg.client().await.unwrap();
    for (_, sql) in &MIGRATIONS[..n] {
        c.batch_execute(sql).await.unwrap();
    }
    c.batch_execute(&format!(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL);
         INSERT INTO schema_migrations SELECT v, 0 FROM generate_series(1, {n}) AS v;
         {then}"
    ))
    .await
    .unwrap();
    drop(c);
    (server, pg)
}

/// The advisory lock that makes servers starting together apply the migrations one at a time.
const MIGRATION_LOCK: i64 = 0x5357_485f_4d49_4752;

/// How long a statement waits for a connection from the pool before the attempt fails (and the alert is
/// answered 500, so the sender retries).
const POOL_WAIT: Duration = Duration::from_secs(5);

/// How long a statement (or the writer's transaction) outside an alert's batch may wait for its answer. A
/// connection whose other end vanished without a reset (a failover by address, a host powered off) answers
/// nothing: a lease statement waiting on it for good held the lease table's lock, and no server sent anything
/// while alerts were answered `processed`. Past this, the attempt fails like a broken connection (every caller
/// handles that) and the connection is found dead when next taken from the pool.
pub(super) const STATEMENT_WAIT: Duration = Duration::from_secs(5);

/// How long a pooled connection has to answer an empty query before it is handed out: one that does not is
/// dropped, and the next (or a new one) is tried.
const RECYCLE_WAIT: Duration = Duration::from_secs(2);

/// A pooled connection idle this long is checked before it is handed out (see [`Pg::connect`]).
const VERIFY_IDLE: Duration = Duration::from_secs(1);

/// Waits for `f`, at most `wait`: a connection that stopped answering fails the attempt instead of hanging it.
pub(super) async fn bounded<T>(
    wait: Duration,
    what: &str,
    f: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(wait, f).await {
        Ok(r) => r,
        Err(_) => Err(StoreError::Unreachable(format!("{what}: no answer within {} s", wait.as_secs()))),
    }
}

/// How long a session may stay idle inside a transaction before PostgreSQL ends it (and rolls it back). A
/// server's transactions idle only while it decides a batch's alerts (milliseconds) or, in tests, for
/// `--test-commit-delay-ms`.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(5);

/// A pool of connections to the shared database. Cheap to clone.
#[derive(Clone)]
pub struct Pg {
    pool: Pool,
    rt: tokio::runtime::Handle,
    /// The newest version of each bot state, by (strategy, bot), that this server's writer committed.
    written: Arc<Mutex<HashMap<(String, String), i64>>>,
    /// Why this server's clock is off the database's, when it is ([`clock`]).
    clock: Arc<Mutex<Option<StoreError>>>,
}

impl Pg {
    /// Connects a pool of at most `size` connections to `url` and checks that one connection works.
    pub async fn connect(url: &str, size: usize) -> Result<Pg, StoreError> {
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e| StoreError::Unreachable(format!("the --database URL is not valid: {e}")))?;
        // A server whose machine freezes or is cut off inside a transaction leaves its session open (a killed
        // process's closes): PostgreSQL ends it after this long idle, instead of keeping its strategies' locks
        // (every server's batches wait behind them) or a lease row it was taking (skipped by every server)
        // until the kernel's keepalive gives up, hours later.
        let timeout = format!("-c idle_in_transaction_session_timeout={}", IDLE_IN_TRANSACTION.as_millis());
        let options = match config.get_options() {
            Some(o) if !o.is_empty() => format!("{o} {timeout}"),
            _ => timeout,
        };
        config.options(&options);
        // A host that vanishes without a reset leaves connections that the kernel would keep for hours (two
        // hours of idle before the first keepalive, fifteen minutes of retransmissions): idle ones are probed
        // after 10 s and given up 6 s of silence later, and one with bytes unacknowledged for 10 s is closed.
        config
            .connect_timeout(POOL_WAIT)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .keepalives_interval(Duration::from_secs(2))
            .keepalives_retries(3)
            .tcp_user_timeout(Duration::from_secs(10));
        // `Fast` recycling (a connection comes back from a finished transaction), and a connection idle for
        // `VERIFY_IDLE` is handed out only once it answered an empty query within `RECYCLE_WAIT`: one whose host
        // stopped answering while its kernel still acknowledges is dropped, and the next (or a new one) tried.
        // Not one in use a moment ago: a delivery checks connections out several times, each a round trip more.
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let verify = Hook::async_fn(|client, metrics| {
            Box::pin(async move {
                if metrics.last_used() < VERIFY_IDLE {
                    return Ok(());
                }
                match tokio::time::timeout(RECYCLE_WAIT, client.simple_query("")).await {
                    Ok(Ok(_)) => Ok(()),
                    _ => Err(HookError::message("the connection did not answer")),
                }
            })
        });
        let pool = Pool::builder(manager)
            .max_size(size.max(2))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .recycle_timeout(Some(POOL_WAIT))
            .pre_recycle(verify)
            .build()
            .map_err(|e| StoreError::Unreachable(e.to_string()))?;
        let pg = Pg { pool, rt: tokio::runtime::Handle::current(), written: Arc::default(), clock: Arc::default() };
        drop(pg.client().await?);
        Ok(pg)
    }

    /// The most connections the pool holds.
    pub fn max_size(&self) -> usize {
        self.pool.status().max_size
    }

    /// A connection from the pool.
    pub async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Unreachable(e.to_string()))
    }

    /// Applies the migrations the database lacks, under an advisory lock so that servers starting together
    /// do not race; refuses a database written by a newer server.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
        let res = migrate_locked(&mut c).await;
        let unlocked = c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await;
        res?;
        unlocked?;
        Ok(())
    }

    /// Runs one query and collects its rows, blocking the calling thread (the [`Reader`](super::Reader)'s
    /// contract: called from `spawn_blocking`, or from a worker of the multi-threaded runtime).
    pub(super) fn read<T>(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        row: impl Fn(&Row) -> Result<T, tokio_postgres::Error>,
    ) -> Result<Vec<T>, StoreError> {
        self.block(bounded(STATEMENT_WAIT, "a read of the shared database", async {
            let c = self.client().await?;
            let st = c.prepare_cached(sql).await?;
            let rows = c.query(&st, params).await?;
            rows.iter().map(|r| row(r).map_err(StoreError::from)).collect()
        }))
    }

    /// The newest version of the bot's state that this server wrote itself (its sync, a delivery, an operator's
    /// edit), once its commit has landed. A read of the stored states from before that write holds an older
    /// version, which must not be taken over the state this server has since (a sold position coming back).
    pub fn written_state_version(&self, strategy: &str, bot: &str) -> Option<i64> {
        let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.get(&(strategy.to_owned(), bot.to_owned())).copied()
    }

    /// Notes the versions of the bot states a commit that landed wrote (see [`Pg::written_state_version`]).
    fn wrote_states(&self, versions: Vec<(String, String, i64)>) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        for (strategy, bot, version) in versions {
            let v = written.entry((strategy, bot)).or_insert(version);
            *v = (*v).max(version);
        }
    }

    /// Runs a future to completion from synchronous code.
    fn block<T>(&self, f: impl Future<Output = T>) -> T {
        match tokio::runtime::Handle::try_current() {
            // On a worker thread: tell the runtime this thread blocks for a while (its tasks move elsewhere).
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| h.block_on(f))
            }
            _ => self.rt.block_on(f),
        }
    }
}

async fn migrate_locked(c: &mut Object) -> Result<(), StoreError> {
    c.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_ms BIGINT NOT NULL)",
    )
    .await?;
    let newest: Option<i32> = c.query_one("SELECT max(version) FROM schema_migrations", &[]).await?.get(0);
    let known = MIGRATIONS.last().map_or(0, |m| m.0);
    if let Some(found) = newest.filter(|v| *v > known) {
        return Err(StoreError::NewerSchema { found, known });
    }
    for (version, sql) in MIGRATIONS {
        if newest.is_some_and(|n| n >= *version) {
            continue;
        }
        let tx = c.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute("INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)", &[version, &now_ms()])
            .await?;
        tx.commit().await?;
        tracing::info!(version, "applied a PostgreSQL migration");
    }
    Ok(())
}

fn now_ms() -> i64 {
    crate::app::now_ms()
}

/// The writer task: takes whatever has queued up, commits it in one transaction, then acknowledges each job
/// (the SQLite writer thread's group commit, on PostgreSQL). Jobs nobody waits for (log rows, refusal counts) of
/// a commit that surely did not land are kept and committed on their own later, as the SQLite writer does: the
/// sync's "bot stopped" ERROR row, told once, was otherwise lost to the Logs with a commit PostgreSQL refused.
pub(super) async fn write_loop(pg: Pg, mut rx: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut carried = super::Carried::default();
    loop {
        // Tried once their pause is over whatever else keeps coming (a job always queued never lets the wait
        // below time out), as the SQLite writer does.
        if !carried.jobs.is_empty() && carried.due() {
            let result = committed(STATEMENT_WAIT * 2, commit_batch(&pg, &carried.jobs)).await;
            carried.tried(landed_or_refused(result));
        }
        let first = if carried.jobs.is_empty() {
            rx.recv().await
        } else {
            match tokio::time::timeout(carried.pause_left(), rx.recv()).await {
                Ok(job) => job,
                Err(_) => {
                    let result = committed(STATEMENT_WAIT * 2, commit_batch(&pg, &carried.jobs)).await;
                    carried.tried(landed_or_refused(result));
                    continue;
                }
            }
        };
        let Some(first) = first else { break };
        batch.push(first);
        drain(&mut rx, &mut batch);
        if batch.len() < BATCH / 4 && batch.iter().all(|j| j.ack.is_none()) {
            tokio::time::sleep(LOG_BATCH_WAIT).await;
            drain(&mut rx, &mut batch);
        }
        let closing = batch.iter().any(|j| matches!(j.op, Op::Close));
        if closing {
            while let Ok(job) = rx.try_recv() {
                batch.push(job);
            }
            if !carried.jobs.is_empty() {
                let result = committed(STATEMENT_WAIT * 2, commit_batch(&pg, &carried.jobs)).await;
                carried.tried(landed_or_refused(result));
                carried.give_up("log rows could not be stored before the stop; given up");
            }
        }
        let began = std::time::Instant::now();
        // Twice a statement's wait: a group of many jobs is a longer transaction. Given up on, its COMMIT may
        // still land; every job's caller already takes a failed commit as "not known to be stored".
        let result = committed(STATEMENT_WAIT * 2, commit_batch(&pg, &batch)).await;
        super::note_transaction(&batch, began);
        // Whether the batch surely did not land: refused before or at its COMMIT. A COMMIT sent and not answered
        // (or a wait given up) may have landed, and its rows are not written twice.
        let (result, surely_not) = match result {
            Ok(()) => (Ok(()), false),
            Err((e, committing)) => {
                let surely_not = !(committing && e.commit_unconfirmed());
                (Err(e), surely_not)
            }
        };
        if let Err(e) = &result {
            tracing::error!(error = %e, jobs = batch.len(), "PostgreSQL commit failed");
        }
        for mut job in batch.drain(..) {
            match job.ack.take() {
                Some(ack) => {
                    let _ = ack.send(result.clone());
                }
                None if result.is_err() && surely_not && !closing => carried.keep(job),
                None => {}
            }
        }
        if closing {
            break;
        }
    }
}

/// [`commit_batch`] within `wait`: a commit given up on may have landed.
async fn committed(
    wait: Duration,
    f: impl Future<Output = Result<(), (StoreError, bool)>>,
) -> Result<(), (StoreError, bool)> {
    match tokio::time::timeout(wait, f).await {
        Ok(r) => r,
        Err(_) => {
            Err((StoreError::Unreachable(format!("the writer's commit: no answer within {} s", wait.as_secs())), true))
        }
    }
}

/// A carried commit's result: one that may have landed counts as done (its rows are not written twice).
fn landed_or_refused(result: Result<(), (StoreError, bool)>) -> Result<(), StoreError> {
    match result {
        Err((e, committing)) if !(committing && e.commit_unconfirmed()) => Err(e),
        _ => Ok(()),
    }
}

/// Commits `batch` in one transaction. An error says whether it came from the COMMIT itself (which may then
/// have landed) or from before it (rolled back).
async fn commit_batch(pg: &Pg, batch: &[Job]) -> Result<(), (StoreError, bool)> {
    let mut c = pg.client().await.map_err(|e| (e, false))?;
    let tx = c.transaction().await.map_err(|e| (e.into(), false))?;
    let mut versions = Vec::new();
    for job in batch {
        versions.extend(tables::apply(&tx, &job.op).await.map_err(|e| (e.into(), false))?);
    }
    tx.commit().await.map_err(|e| (e.into(), true))?;
    // Before the jobs are acknowledged: a delivery's state stops counting as committing on the acknowledgement, and
    // from then on only these versions keep an older read of the stored states from being adopted over it.
    pg.wrote_states(versions);
    Ok(())
}
