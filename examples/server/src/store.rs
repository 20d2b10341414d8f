//! The embedded SQLite database: the Logs view's rows, rotated tokens, the outbox of formatted broker
//! requests, claimed dedup keys and rate marks, and the bots' positions and working orders. All SQL lives here.
//!
//! Writes go through one writer thread fed by a bounded channel. The thread takes whatever has queued up
//! (up to [`BATCH`] jobs), commits it in one transaction, and only then acknowledges each job. A request
//! that must not answer before its data is durable (a token rotation now; the outbox of formatted orders
//! later) sends a job with an acknowledgement and awaits it; a request that only records its log rows does
//! not wait for the commit. One transaction per batch is what keeps the writer ahead of the request path:
//! the cost of a commit is shared by everything that arrived while the previous one ran (group commit).
//!
//! Reads (the admin API) use their own connection; in WAL mode they never wait for the writer.

use rusqlite::{params, Connection, OpenFlags};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use strategy_webhook::{Decision, Level, Outcome};
use tokio::sync::{mpsc, oneshot};

/// Most jobs committed in one transaction.
const BATCH: usize = 1024;
/// Jobs queued before senders wait (backpressure instead of unbounded memory).
const QUEUE: usize = 16 * 1024;
/// How long the writer lets log rows gather before committing them (they have no one waiting).
const LOG_BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(2);

/// Why a store operation failed.
pub type StoreError = String;

/// The log rows of one Outcome: one row per log record, sharing the Outcome's decision and alerts.
#[derive(Debug, Clone)]
pub struct LogEntry {
    /// When the delivery was answered (Unix milliseconds).
    pub ts_ms: i64,
    /// The strategy's id (never its token).
    pub strategy: String,
    /// `processed`, `rejected`, `duplicate`, `inactive` or `error`.
    pub decision: &'static str,
    /// The HTTP status that was answered.
    pub http_status: u16,
    /// The canonical alerts as a JSON array.
    pub alerts: String,
    /// The Outcome's log records.
    pub records: Vec<(Level, String)>,
}

impl LogEntry {
    /// The rows to store for an Outcome, or `None` when there is nothing to store: no strategy matched the
    /// token, or the core left no log record (a throttled duplicate, a 429).
    pub fn from_outcome(outcome: Outcome, ts_ms: i64) -> Option<LogEntry> {
        let strategy = outcome.strategy?;
        if outcome.logs.is_empty() {
            return None;
        }
        let decision = match outcome.decision {
            Decision::Processed => "processed",
            Decision::Rejected => "rejected",
            Decision::Duplicate => "duplicate",
            Decision::Inactive => "inactive",
            Decision::Error => "error",
        };
        Some(LogEntry {
            ts_ms,
            strategy,
            decision,
            http_status: outcome.http_status,
            alerts: serde_json::to_string(&outcome.alerts).unwrap_or_else(|_| "[]".to_owned()),
            records: outcome.logs.into_iter().map(|r| (r.level, r.message)).collect(),
        })
    }
}

/// One stored log row, as the admin API shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogRow {
    /// Row id: increases with time; the paging cursor.
    pub id: i64,
    /// Unix milliseconds.
    pub ts_ms: i64,
    /// `INFO`, `WARN` or `ERROR`.
    pub level: String,
    /// The log record's message.
    pub message: String,
    /// The Outcome's decision.
    pub decision: String,
    /// The HTTP status answered.
    pub http_status: u16,
    /// The canonical alerts (JSON array).
    pub alerts: serde_json::Value,
}

/// A page of a strategy's logs, newest first.
#[derive(Debug, Clone, Default)]
pub struct LogQuery {
    /// Lowest level shown (WARN shows WARN and ERROR).
    pub min_level: Option<Level>,
    /// Rows at or after this time (Unix ms).
    pub since: Option<i64>,
    /// Rows before this time (Unix ms).
    pub until: Option<i64>,
    /// Rows with an id below this one (the previous page's last id).
    pub before_id: Option<i64>,
    /// Rows in the page.
    pub limit: u32,
}

/// The core's windows: stored dedup keys and rate marks older than these are of no use and are pruned.
#[derive(Debug, Clone, Copy)]
pub struct Windows {
    /// The dedup window (ms).
    pub dedup_ms: i64,
    /// The rate window (ms).
    pub rate_ms: i64,
}

/// How long log rows are kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Rows older than this are deleted.
    pub max_age_ms: i64,
    /// Rows of one strategy beyond the newest this many are deleted.
    pub max_rows_per_strategy: u64,
}

/// One formatted broker request to store in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// Row id (assigned by SQLite; 0 before the insert).
    pub id: i64,
    /// The strategy's id.
    pub strategy: String,
    /// The bot's id.
    pub bot: String,
    /// The bot's broker (`alpaca`…).
    pub broker: String,
    /// `place`, `replace` or `cancel`.
    pub kind: String,
    /// The idempotency key the core derived.
    pub client_order_id: String,
    /// For replace and cancel: the working order's id.
    pub order_id: Option<String>,
    /// For replace: whether the broker keeps the id.
    pub keeps_order_id: Option<bool>,
    /// HTTP method.
    pub method: String,
    /// Path after the broker's base URL.
    pub path: String,
    /// Content type of the body.
    pub content_type: Option<String>,
    /// The body bytes, exactly as the core formatted them.
    pub body: Vec<u8>,
    /// The broker-neutral meaning of the request (JSON, see `dispatch::Meaning`), when known.
    pub meaning: Option<String>,
    /// `pending`, `sending`, `done` or `failed`.
    pub status: String,
    /// When the alert was answered.
    pub created_ms: i64,
}

/// What a delivery of one outbox row came to, committed in one transaction with its log row and the bot's
/// new state so that a crash never leaves one without the other.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The outbox row.
    pub id: i64,
    /// `done` or `failed`.
    pub status: &'static str,
    /// The broker's answer or the failure, for the row.
    pub result: String,
    /// The strategy's log row for it.
    pub log: Option<LogEntry>,
    /// The bot's new state (strategy, bot, JSON), when it changed.
    pub state: Option<(String, String, String)>,
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

enum Op {
    Log(Option<LogEntry>, Option<Mark>),
    Outbox { mark: Mark, rows: Vec<OutboxRow>, log: Option<LogEntry> },
    Sending(i64),
    Delivered(Delivered),
    BotState { strategy: String, bot: String, state: String },
    SetToken { strategy: String, token: String, ts_ms: i64 },
    Prune { retention: Retention, windows: Windows, now_ms: i64 },
    PruneWindows { retention: Retention, windows: Windows, now_ms: i64 },
    Close,
}

struct Job {
    op: Op,
    ack: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// The sending side of the writer thread. Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
}

impl Writer {
    /// Queues an Outcome's log rows without waiting for the commit: the answer to the sender does not
    /// depend on them. Waits only when the queue is full, which slows senders down instead of dropping rows.
    pub async fn log(&self, entry: Option<LogEntry>, mark: Option<Mark>) {
        if entry.is_none() && mark.is_none() {
            return;
        }
        if self.tx.send(Job { op: Op::Log(entry, mark), ack: None }).await.is_err() {
            tracing::error!("the log writer has stopped; a log row was not stored");
        }
    }

    /// Stores a rotated token for a strategy and waits until it is committed.
    pub async fn set_token(&self, strategy: &str, token: &str, ts_ms: i64) -> Result<(), StoreError> {
        self.commit(Op::SetToken { strategy: strategy.to_owned(), token: token.to_owned(), ts_ms }).await
    }

    /// Commits a processed alert: its outbox rows, its dedup key and rate mark, and its log rows, in the
    /// writer's next group commit. Only once this returns `Ok` may the alert be answered 200 processed.
    pub async fn outbox(&self, mark: Mark, rows: Vec<OutboxRow>, log: Option<LogEntry>) -> Result<(), StoreError> {
        self.commit(Op::Outbox { mark, rows, log }).await
    }

    /// Marks an outbox row as being sent (for brokers where a resend could double the order: after a crash
    /// such a row is not sent again).
    pub async fn sending(&self, id: i64) -> Result<(), StoreError> {
        self.commit(Op::Sending(id)).await
    }

    /// Records what a delivery came to.
    pub async fn delivered(&self, d: Delivered) -> Result<(), StoreError> {
        self.commit(Op::Delivered(d)).await
    }

    /// Stores a bot's positions and working orders.
    pub async fn bot_state(&self, strategy: &str, bot: &str, state: String) -> Result<(), StoreError> {
        self.commit(Op::BotState { strategy: strategy.to_owned(), bot: bot.to_owned(), state }).await
    }

    /// Deletes expired dedup keys and rate marks, and old finished outbox rows (cheap: run it often, since
    /// under a high rate limit every delivery leaves a rate mark).
    pub async fn prune_windows(&self, retention: Retention, windows: Windows, now_ms: i64) -> Result<(), StoreError> {
        self.commit(Op::PruneWindows { retention, windows, now_ms }).await
    }

    /// Deletes log rows beyond the retention and waits until that is committed.
    pub async fn prune(&self, retention: Retention, windows: Windows, now_ms: i64) -> Result<(), StoreError> {
        self.commit(Op::Prune { retention, windows, now_ms }).await
    }

    /// Sends a job and waits for the commit that includes it.
    async fn commit(&self, op: Op) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Job { op, ack: Some(ack) }).await.map_err(|_| "the database writer has stopped".to_owned())?;
        done.await.map_err(|_| "the database writer stopped before committing".to_owned())?
    }
}

/// The database: a writer thread and a read connection.
pub struct Store {
    writer: Writer,
    thread: Option<JoinHandle<()>>,
    reader: Arc<Mutex<Connection>>,
}

impl Store {
    /// Opens (or creates) the database at `path` and starts the writer thread.
    pub fn open(path: &Path, sync: Sync) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        init(&conn, sync).map_err(|e| format!("cannot prepare {}: {e}", path.display()))?;
        let reader =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(|e| format!("cannot open {} for reading: {e}", path.display()))?;
        reader.busy_timeout(std::time::Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("db-writer".into())
            .spawn(move || write_loop(conn, rx))
            .map_err(|e| format!("cannot start the database writer: {e}"))?;
        Ok(Store { writer: Writer { tx }, thread: Some(thread), reader: Arc::new(Mutex::new(reader)) })
    }

    /// A handle for queuing writes.
    pub fn writer(&self) -> Writer {
        self.writer.clone()
    }

    /// A handle for reads.
    pub fn reader(&self) -> Reader {
        Reader { conn: Arc::clone(&self.reader) }
    }

    /// Commits everything queued so far and stops the writer thread. Call after the listeners have drained.
    pub async fn close(mut self) -> Result<(), StoreError> {
        let res = self.writer.commit(Op::Close).await;
        if let Some(t) = self.thread.take() {
            // Joining a thread blocks; it has already finished its last commit, so this is short.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        res
    }
}

/// How hard a commit is pushed to the disk before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Sync {
    /// `synchronous=FULL`: the WAL is fsynced at every commit; an acknowledged commit survives a power loss.
    Full,
    /// `synchronous=NORMAL`: the WAL is fsynced only at checkpoints; an acknowledged commit survives a crash of
    /// the process (kill -9), but a power loss or kernel crash can take the last commits back.
    Normal,
}

fn init(conn: &Connection, sync: Sync) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // WAL: readers do not block the writer. FULL (the default): every commit is fsynced before it is
    // acknowledged, so an alert answered 200 processed survives a power loss too, not only a crash of the
    // process (which NORMAL in WAL mode already survives). Group commit shares that fsync among every request
    // in the batch.
    let _: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    conn.execute_batch(match sync {
        Sync::Full => "PRAGMA synchronous=FULL;",
        Sync::Normal => "PRAGMA synchronous=NORMAL;",
    })?;
    conn.execute_batch(
        "
         PRAGMA cache_size=-16384;
         CREATE TABLE IF NOT EXISTS logs (
             id INTEGER PRIMARY KEY,
             ts_ms INTEGER NOT NULL,
             strategy TEXT NOT NULL,
             level TEXT NOT NULL,
             message TEXT NOT NULL,
             decision TEXT NOT NULL,
             http_status INTEGER NOT NULL,
             alerts TEXT NOT NULL
         );
         CREATE INDEX IF NOT EXISTS logs_by_strategy ON logs(strategy, id);
         CREATE TABLE IF NOT EXISTS token_overrides (
             strategy TEXT PRIMARY KEY,
             token_hash TEXT NOT NULL,
             rotated_ms INTEGER NOT NULL
         );
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
         ) WITHOUT ROWID;
         CREATE TABLE IF NOT EXISTS outbox (
             id INTEGER PRIMARY KEY,
             strategy TEXT NOT NULL,
             bot TEXT NOT NULL,
             broker TEXT NOT NULL,
             kind TEXT NOT NULL,
             client_order_id TEXT NOT NULL,
             order_id TEXT,
             keeps_order_id INTEGER,
             method TEXT NOT NULL,
             path TEXT NOT NULL,
             content_type TEXT,
             body BLOB NOT NULL,
             meaning TEXT,
             status TEXT NOT NULL,
             created_ms INTEGER NOT NULL,
             result TEXT,
             done_ms INTEGER
         );
         CREATE INDEX IF NOT EXISTS outbox_open ON outbox(strategy, bot, id) WHERE status IN ('pending', 'sending');
         CREATE TABLE IF NOT EXISTS bot_state (
             strategy TEXT NOT NULL,
             bot TEXT NOT NULL,
             state TEXT NOT NULL,
             PRIMARY KEY (strategy, bot)
         ) WITHOUT ROWID;
         PRAGMA user_version = 3;",
    )
}

fn write_loop(mut conn: Connection, mut rx: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        drain(&mut rx, &mut batch);
        // Nobody waits for log rows, so when only they are queued, let a few more arrive before committing:
        // a commit costs page writes and file locks whatever its size, and under load a batch of one
        // delivery's rows makes the writer the bottleneck. A job someone awaits is committed at once.
        if batch.len() < BATCH / 4 && batch.iter().all(|j| j.ack.is_none()) {
            std::thread::sleep(LOG_BATCH_WAIT);
            drain(&mut rx, &mut batch);
        }
        let closing = batch.iter().any(|j| matches!(j.op, Op::Close));
        if closing {
            // Whatever is still queued behind the close belongs in the last commit too.
            while let Ok(job) = rx.try_recv() {
                batch.push(job);
            }
        }
        let result = commit_batch(&mut conn, &batch).map_err(|e| e.to_string());
        if let Err(e) = &result {
            tracing::error!(error = %e, jobs = batch.len(), "database commit failed");
        }
        for job in batch.drain(..) {
            if let Some(ack) = job.ack {
                let _ = ack.send(result.clone());
            }
        }
        if closing {
            break;
        }
    }
    // Checkpoint so the database file alone holds everything after a clean stop.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
}

/// Moves whatever is queued into `batch`, up to [`BATCH`] jobs.
fn drain(rx: &mut mpsc::Receiver<Job>, batch: &mut Vec<Job>) {
    while batch.len() < BATCH {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) => break,
        }
    }
}

fn commit_batch(conn: &mut Connection, batch: &[Job]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(
            "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )?;
        for job in batch {
            let mut log_rows = |e: &LogEntry| -> rusqlite::Result<()> {
                for (level, message) in &e.records {
                    insert.execute(params![
                        e.ts_ms,
                        e.strategy,
                        level.as_str(),
                        message,
                        e.decision,
                        e.http_status,
                        e.alerts
                    ])?;
                }
                Ok(())
            };
            match &job.op {
                Op::Log(e, mark) => {
                    if let Some(e) = e {
                        log_rows(e)?;
                    }
                    if let Some(m) = mark {
                        store_mark(&tx, m)?;
                    }
                }
                Op::Outbox { mark, rows, log } => {
                    if let Some(e) = log {
                        log_rows(e)?;
                    }
                    store_mark(&tx, mark)?;
                    let mut ins = tx.prepare_cached(
                        "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id,
                                             method, path, content_type, body, meaning, status, created_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', ?13)",
                    )?;
                    for r in rows {
                        ins.execute(params![
                            r.strategy,
                            r.bot,
                            r.broker,
                            r.kind,
                            r.client_order_id,
                            r.order_id,
                            r.keeps_order_id,
                            r.method,
                            r.path,
                            r.content_type,
                            r.body,
                            r.meaning,
                            r.created_ms
                        ])?;
                    }
                }
                Op::Sending(id) => {
                    tx.execute("UPDATE outbox SET status = 'sending' WHERE id = ?1", params![id])?;
                }
                Op::Delivered(d) => {
                    if let Some(e) = &d.log {
                        log_rows(e)?;
                    }
                    tx.execute(
                        "UPDATE outbox SET status = ?2, result = ?3, done_ms = ?4 WHERE id = ?1",
                        params![d.id, d.status, d.result, d.log.as_ref().map(|l| l.ts_ms)],
                    )?;
                    if let Some((strategy, bot, state)) = &d.state {
                        set_bot_state(&tx, strategy, bot, state)?;
                    }
                }
                Op::BotState { strategy, bot, state } => set_bot_state(&tx, strategy, bot, state)?,
                Op::SetToken { strategy, token, ts_ms } => {
                    tx.execute(
                        "INSERT INTO token_overrides (strategy, token_hash, rotated_ms) VALUES (?1, ?2, ?3)
                         ON CONFLICT(strategy) DO UPDATE SET token_hash = excluded.token_hash,
                                                             rotated_ms = excluded.rotated_ms",
                        params![strategy, token, ts_ms],
                    )?;
                }
                Op::Prune { retention, windows, now_ms } => {
                    prune(&tx, *retention, *now_ms)?;
                    prune_windows(&tx, *retention, *windows, *now_ms)?;
                }
                Op::PruneWindows { retention, windows, now_ms } => prune_windows(&tx, *retention, *windows, *now_ms)?,
                Op::Close => {}
            }
        }
    }
    tx.commit()
}

fn store_mark(tx: &rusqlite::Transaction<'_>, m: &Mark) -> rusqlite::Result<()> {
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

fn set_bot_state(tx: &rusqlite::Transaction<'_>, strategy: &str, bot: &str, state: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO bot_state (strategy, bot, state) VALUES (?1, ?2, ?3)
         ON CONFLICT(strategy, bot) DO UPDATE SET state = excluded.state",
        params![strategy, bot, state],
    )?;
    Ok(())
}

/// Deletes dedup keys and rate marks that have left their windows, and finished outbox rows older than the
/// log retention (pending ones are never deleted).
fn prune_windows(tx: &rusqlite::Transaction<'_>, r: Retention, w: Windows, now_ms: i64) -> rusqlite::Result<()> {
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
    let sent = tx.execute(
        "DELETE FROM outbox WHERE status IN ('done', 'failed') AND created_ms < ?1",
        params![now_ms.saturating_sub(r.max_age_ms)],
    )?;
    if keys + marks + sent > 0 {
        tracing::info!(keys, marks, sent, "pruned expired dedup keys, rate marks and finished outbox rows");
    }
    Ok(())
}

fn prune(tx: &rusqlite::Transaction<'_>, r: Retention, now_ms: i64) -> rusqlite::Result<()> {
    let strategies: Vec<String> = {
        let mut st = tx.prepare("SELECT DISTINCT strategy FROM logs")?;
        let rows = st.query_map([], |row| row.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let cutoff = now_ms.saturating_sub(r.max_age_ms);
    let offset = i64::try_from(r.max_rows_per_strategy).unwrap_or(i64::MAX);
    let (mut aged, mut capped) = (0, 0);
    for s in strategies {
        // Rows are numbered in time order, so a strategy's rows older than the cutoff are those below the id of
        // its first row that is not: found by walking its index from the oldest row, which reads only rows
        // about to be deleted (and spares every insert the upkeep of a second index on the time).
        aged += tx.execute(
            "DELETE FROM logs WHERE strategy = ?1 AND id <
                 coalesce((SELECT id FROM logs WHERE strategy = ?1 AND ts_ms >= ?2 ORDER BY id LIMIT 1),
                          9223372036854775807)",
            params![s, cutoff],
        )?;
        capped += tx.execute(
            "DELETE FROM logs WHERE strategy = ?1 AND id <=
                 (SELECT id FROM logs WHERE strategy = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
            params![s, offset],
        )?;
    }
    if aged + capped > 0 {
        tracing::info!(aged, capped, "pruned log rows");
    }
    Ok(())
}

/// The read side. Queries block: call them from `spawn_blocking`.
#[derive(Clone)]
pub struct Reader {
    conn: Arc<Mutex<Connection>>,
}

impl Reader {
    /// Every rotated token, by strategy id.
    pub fn token_overrides(&self) -> Result<HashMap<String, String>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn.prepare("SELECT strategy, token_hash FROM token_overrides").map_err(|e| e.to_string())?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    /// Dedup keys claimed at or after `since_ms`: (strategy, key hex, time).
    pub fn dedup_keys(&self, since_ms: i64) -> Result<Vec<(String, String, i64)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare("SELECT strategy, key, ts_ms FROM dedup_keys WHERE ts_ms >= ?1 ORDER BY id")
            .map_err(|e| e.to_string())?;
        let rows =
            st.query_map(params![since_ms], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    /// Rate marks at or after `since_ms`, oldest first: (strategy, time).
    pub fn rate_marks(&self, since_ms: i64) -> Result<Vec<(String, i64)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare("SELECT strategy, second, n FROM rate_marks WHERE second >= ?1 ORDER BY second")
            .map_err(|e| e.to_string())?;
        let rows = st
            .query_map(params![since_ms.div_euclid(1000)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
            })
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for row in rows {
            let (strategy, second, n) = row.map_err(|e| e.to_string())?;
            let at = second * 1000 + 999;
            out.extend(std::iter::repeat((strategy, at)).take(usize::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }

    /// Every stored bot state: (strategy, bot, JSON).
    pub fn bot_states(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn.prepare("SELECT strategy, bot, state FROM bot_state").map_err(|e| e.to_string())?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    /// The (strategy, bot) pairs with outbox rows still to send.
    pub fn open_bots(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare("SELECT DISTINCT strategy, bot FROM outbox WHERE status IN ('pending', 'sending')")
            .map_err(|e| e.to_string())?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    /// One bot's outbox rows still to send, oldest first (at most `limit`).
    pub fn open_rows(&self, strategy: &str, bot: &str, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        self.outbox_rows(
            "WHERE strategy = ?1 AND bot = ?2 AND status IN ('pending', 'sending') ORDER BY id LIMIT ?3",
            params![strategy, bot, limit],
        )
    }

    /// A strategy's outbox rows, newest first (for the admin API).
    pub fn strategy_outbox(&self, strategy: &str, limit: u32) -> Result<Vec<(OutboxRow, Option<String>)>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare(&format!(
                "SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 ORDER BY id DESC LIMIT ?2"
            ))
            .map_err(|e| e.to_string())?;
        let rows =
            st.query_map(params![strategy, limit], |r| Ok((outbox_row(r)?, r.get(15)?))).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    fn outbox_rows(&self, filter: &str, p: impl rusqlite::Params) -> Result<Vec<OutboxRow>, StoreError> {
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st =
            conn.prepare_cached(&format!("SELECT {OUTBOX_COLUMNS} FROM outbox {filter}")).map_err(|e| e.to_string())?;
        let rows = st.query_map(p, outbox_row).map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }

    /// A page of one strategy's log rows, newest first.
    pub fn logs(&self, strategy: &str, q: &LogQuery) -> Result<Vec<LogRow>, StoreError> {
        let levels: &[&str] = match q.min_level {
            None | Some(Level::Info) => &["INFO", "WARN", "ERROR"],
            Some(Level::Warn) => &["WARN", "ERROR"],
            Some(Level::Error) => &["ERROR"],
        };
        let conn = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = conn
            .prepare_cached(
                "SELECT id, ts_ms, level, message, decision, http_status, alerts FROM logs
                 WHERE strategy = ?1 AND id < ?2 AND ts_ms >= ?3 AND ts_ms < ?4
                   AND level IN (?5, ?6, ?7)
                 ORDER BY id DESC LIMIT ?8",
            )
            .map_err(|e| e.to_string())?;
        let level = |i: usize| levels.get(i).copied().unwrap_or(levels[0]);
        let rows = st
            .query_map(
                params![
                    strategy,
                    q.before_id.unwrap_or(i64::MAX),
                    q.since.unwrap_or(i64::MIN),
                    q.until.unwrap_or(i64::MAX),
                    level(0),
                    level(1),
                    level(2),
                    q.limit
                ],
                |r| {
                    let alerts: String = r.get(6)?;
                    Ok(LogRow {
                        id: r.get(0)?,
                        ts_ms: r.get(1)?,
                        level: r.get(2)?,
                        message: r.get(3)?,
                        decision: r.get(4)?,
                        http_status: r.get(5)?,
                        alerts: serde_json::from_str(&alerts).unwrap_or(serde_json::Value::Null),
                    })
                },
            )
            .map_err(|e| e.to_string())?;
        rows.collect::<rusqlite::Result<_>>().map_err(|e| e.to_string())
    }
}

const OUTBOX_COLUMNS: &str =
    "id, strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id, method, path, \
                              content_type, body, meaning, status, created_ms";

fn outbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
    Ok(OutboxRow {
        id: r.get(0)?,
        strategy: r.get(1)?,
        bot: r.get(2)?,
        broker: r.get(3)?,
        kind: r.get(4)?,
        client_order_id: r.get(5)?,
        order_id: r.get(6)?,
        keeps_order_id: r.get(7)?,
        method: r.get(8)?,
        path: r.get(9)?,
        content_type: r.get(10)?,
        body: r.get(11)?,
        meaning: r.get(12)?,
        status: r.get(13)?,
        created_ms: r.get(14)?,
    })
}
