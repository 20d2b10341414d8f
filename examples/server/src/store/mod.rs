//! The embedded SQLite database: the Logs view's rows, rotated tokens, the outbox of formatted broker
//! requests, claimed dedup keys and rate marks, and the bots' positions and working orders. All SQL lives in
//! this module: one file per table ([`logs`], [`tokens`], [`outbox`], [`windows`], [`bot_state`]), each with its
//! schema, its writes (applied by the writer thread) and its reads; this file holds the plumbing.
//!
//! Writes go through one writer thread fed by a bounded channel. The thread takes whatever has queued up
//! (up to [`BATCH`] jobs), commits it in one transaction, and only then acknowledges each job. A request
//! that must not answer before its data is durable (a token rotation now; the outbox of formatted orders
//! later) sends a job with an acknowledgement and awaits it; a request that only records its log rows does
//! not wait for the commit. One transaction per batch is what keeps the writer ahead of the request path:
//! the cost of a commit is shared by everything that arrived while the previous one ran (group commit).
//! A processed alert's job is queued without waiting, in its strategy's turn ([`Writer::queue_outbox`]), so that
//! alerts are stored, and their orders sent, in the order they were decided.
//!
//! Reads (the admin API) use their own connection; in WAL mode they never wait for the writer.

mod bot_state;
mod console;
mod logs;
mod notifications;
mod outbox;
pub mod pg;
mod tokens;
mod windows;

pub use console::AlertCount;
pub use logs::{later_alert, later_alerts, AlertSpan, DecidedAlert, LogEntry, LogQuery, LogRow, Refusals, Retention};
pub use notifications::{Notification, Sent};
pub use outbox::{Delivered, OutboxRow};
pub use windows::{Mark, Windows};

use rusqlite::{Connection, OpenFlags, Transaction};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use tokio::sync::{mpsc, oneshot};

/// Most jobs committed in one transaction.
const BATCH: usize = 1024;
/// Jobs queued before senders wait (backpressure instead of unbounded memory).
const QUEUE: usize = 16 * 1024;
/// How long the writer lets log rows gather before committing them (they have no one waiting).
const LOG_BATCH_WAIT: std::time::Duration = std::time::Duration::from_millis(2);
/// How often the writer looks for a job someone awaits while it lets log rows gather.
const GATHER_POLL: std::time::Duration = std::time::Duration::from_micros(100);
/// The schema's version, kept in `PRAGMA user_version`.
const SCHEMA_VERSION: u32 = 9;

/// Why a store operation failed. Cheap to clone: one failed commit answers every job of its batch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened or its tables created.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        #[source]
        source: Arc<rusqlite::Error>,
    },
    /// The writer thread could not be started.
    #[error("cannot start the database writer: {0}")]
    Spawn(Arc<std::io::Error>),
    /// The writer thread has stopped: the write was not queued, nothing of it is stored.
    #[error("the database writer has stopped")]
    Stopped,
    /// The writer thread stopped after the write was queued and before it answered: the write may or may not
    /// be stored.
    #[error("the database writer stopped before committing")]
    Unanswered,
    /// The batch holding the write was rolled back: nothing of it is stored.
    #[error("the database commit failed: {0}")]
    Commit(#[source] Arc<rusqlite::Error>),
    /// A read failed.
    #[error("a database read failed: {0}")]
    Read(#[source] Arc<rusqlite::Error>),
    /// A read was cut short before it answered (its thread panicked or the runtime is stopping).
    #[error("a database read did not finish")]
    ReadAborted,
    /// PostgreSQL could not be reached (no connection from the pool).
    #[error("PostgreSQL is unreachable: {0}")]
    Unreachable(String),
    /// PostgreSQL refused or failed a statement; nothing of its transaction is stored.
    #[error("PostgreSQL: {}", postgres_message(.0))]
    Postgres(#[source] Arc<tokio_postgres::Error>),
    /// A batch found its strategies' windows written under later clocks while its own time is behind the shared
    /// database's clock by `behind_ms` (this server's clock stepped back, or the server paused after taking the
    /// batch's time): the marks ahead are its peers' fresh ones, not a step to undo. Nothing of it is stored.
    #[error("this server's clock is {} behind the database's; fix its clock", clock_gap(*.behind_ms))]
    ClockBehind {
        /// How far behind, in ms.
        behind_ms: i64,
    },
    /// A batch's time is ahead of the shared database's clock by `ahead_ms` (this server's clock is fast): its
    /// claims would outlast its peers' windows (a peer's live key taken for expired, traded twice) and its rate
    /// window would leave out every peer's marks. Nothing of it is stored.
    #[error("this server's clock is {} ahead of the database's; fix its clock", clock_gap(*.ahead_ms))]
    ClockAhead {
        /// How far ahead, in ms.
        ahead_ms: i64,
    },
    /// A rotation replaced the token this server knew, but another server had rotated it meanwhile: nothing stored.
    #[error(
        "the strategy's token was rotated through another server meanwhile; nothing changed here: read the \
             strategy again, and rotate again if its current token is to go"
    )]
    RotatedMeanwhile,
    /// The database was written by a newer version of the server.
    #[error("the database's schema is version {found}; this server knows up to {known}: upgrade the server")]
    NewerSchema {
        /// The version found.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
}

impl StoreError {
    /// Whether a failed commit may still have been stored: anything but PostgreSQL's own refusal of a statement
    /// (a connection cut or closed mid-commit, no answer in time, which a commit waiting for a synchronous
    /// standby gives, or the backend terminated, which PostgreSQL does after a commit has landed locally too). A
    /// refusal (severity ERROR) rolls the transaction back.
    pub fn commit_unconfirmed(&self) -> bool {
        match self {
            // The parsed severity: the `severity` text is translated on a server whose `lc_messages` is not
            // English ("FEHLER"), and every refusal read as maybe stored.
            StoreError::Postgres(e) => {
                e.as_db_error().map_or(true, |db| db.parsed_severity() != Some(tokio_postgres::error::Severity::Error))
            }
            StoreError::Unreachable(_) | StoreError::Unanswered => true,
            _ => false,
        }
    }

    /// Whether PostgreSQL gave up waiting for a lock another transaction holds (`lock_timeout`, SQLSTATE 55P03):
    /// the database answers, and that transaction (another server's batch of the same strategy, maybe its commit
    /// waiting for a synchronous standby) may still land.
    pub fn lock_not_available(&self) -> bool {
        matches!(self, StoreError::Postgres(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE))
    }
}

/// A PostgreSQL error with the server's own message when it sent one (the client's text alone is "db error").
fn postgres_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => e.to_string(),
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        StoreError::Postgres(Arc::new(e))
    }
}

impl StoreError {
    fn open(path: &Path) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        move |e| StoreError::Open { path: path.to_owned(), source: Arc::new(e) }
    }

    fn read(e: rusqlite::Error) -> StoreError {
        StoreError::Read(Arc::new(e))
    }
}

/// One write for the writer thread; each table's file applies its own. A job is applied whole within one
/// transaction: `Delivered` holds a run of one bot's deliveries, in order.
enum Op {
    Log(Option<LogEntry>, Option<Mark>),
    Refusals(Refusals),
    Outbox {
        mark: Mark,
        rows: Vec<OutboxRow>,
        log: Option<LogEntry>,
    },
    Sending(i64),
    /// A row given back unsent; `holder`: only while it holds the bot's lease (shared database).
    Unsent {
        id: i64,
        holder: Option<String>,
    },
    Requeue(i64),
    Notify {
        strategy: String,
        event: String,
        text: String,
        now_ms: i64,
    },
    NotifySent(i64, Sent),
    Dismiss(i64),
    Delivered(Arc<[Delivered]>),
    /// A bot's state; with `held`, written only while that server (the name) holds the bot's lease on the shared
    /// database, the flag set when it was (see [`Writer::bot_state_held`]).
    BotState {
        strategy: String,
        bot: String,
        state: String,
        held: Option<(String, Arc<std::sync::atomic::AtomicBool>)>,
    },
    /// A rotation: `token` replaces `retired`, if that is still the strategy's token; `applied` says whether it did.
    SetToken {
        strategy: String,
        token: String,
        retired: String,
        ts_ms: i64,
        applied: Arc<std::sync::atomic::AtomicBool>,
    },
    /// A round of the ten-minute prune's log rows on SQLite, at most [`PRUNE_ROUND`] of them; `more` is set when
    /// the round used all of it (never queued on PostgreSQL, whose prune runs outside the queue, [`pg::prune`]).
    PruneLogs {
        retention: Retention,
        now_ms: i64,
        more: Arc<std::sync::atomic::AtomicBool>,
    },
    PruneWindows {
        retention: Retention,
        windows: Windows,
        now_ms: i64,
    },
    Close,
}

struct Job {
    /// When it was sent, for `swh_store_queue_seconds`.
    queued: std::time::Instant,
    op: Op,
    ack: Option<oneshot::Sender<Result<(), StoreError>>>,
}

impl Job {
    fn new(op: Op, ack: Option<oneshot::Sender<Result<(), StoreError>>>) -> Job {
        Job { queued: std::time::Instant::now(), op, ack }
    }
}

/// Times a batch's transaction, begun at `began` and just ended, and the queueing of the jobs someone waits for
/// (log rows wait for company on purpose: their queueing says nothing).
fn note_transaction(batch: &[Job], began: std::time::Instant) {
    crate::metrics::store_transaction(began, batch.iter().filter(|j| j.ack.is_some()).map(|j| j.queued));
}

/// The sending side of the writer thread. Cheap to clone. Each table's file adds its own writes.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Job>,
    /// The shared database and its row caps, for the ten-minute prune, which runs there on a connection of its
    /// own rather than in this queue ([`pg::prune`]).
    shared: Option<(pg::Pg, RowCaps)>,
    /// Jobs queued in their caller's turn ([`Writer::queue_in_turn`]) that found the queue full or others of
    /// their kind still waiting, and the count of those not yet moved into the queue: the forwarding thread moves
    /// them in their order, and until it has, later ones wait behind them.
    in_turn: Arc<Mutex<(std::sync::mpsc::Sender<InTurn>, usize)>>,
}

/// A job queued in its caller's turn, and the instant before which it is not queued (a test's slow disk).
struct InTurn {
    job: Job,
    not_before: Option<std::time::Instant>,
}

impl Writer {
    /// A writer over the queue `tx`, with the thread that moves jobs queued in turn into it.
    fn start(tx: mpsc::Sender<Job>) -> Result<Writer, StoreError> {
        let (lane, waiting) = std::sync::mpsc::channel();
        let in_turn = Arc::new(Mutex::new((lane, 0)));
        let (queue, moved) = (tx.clone(), Arc::clone(&in_turn));
        std::thread::Builder::new()
            .name("db-queue".into())
            .spawn(move || forward(waiting, queue, moved))
            .map_err(|e| StoreError::Spawn(Arc::new(e)))?;
        Ok(Writer { tx, shared: None, in_turn })
    }

    /// Queues a job now, without waiting and from any thread (an async worker too), and returns what tells of its
    /// commit. Jobs queued this way are committed in the order of these calls: a processed alert's outbox rows are
    /// queued in its strategy's turn, so that the rows of alerts decided one after the other get ids in that order,
    /// which is the order the dispatcher sends them in. (Each queued from a task of its own, they raced to the
    /// queue, and a later MODIFY's price could be sent before an earlier one's and be overwritten by it.)
    ///
    /// When the queue is full the job waits outside it, and so do the ones queued this way after it; the
    /// forwarding thread moves them in as the writer makes room, so the writer's backlog stays bounded. What waits
    /// outside is what tasks waiting for room held before, each a processed alert's rows: no more than the alerts
    /// the rate limits let through while the writer is behind, each answered only once its commit is done.
    /// `held` (tests only, a slow disk) keeps the job out of the queue that long.
    fn queue_in_turn(&self, op: Op, held: std::time::Duration) -> Result<Committed, StoreError> {
        let (ack, done) = oneshot::channel();
        self.send_in_turn(Job::new(op, Some(ack)), held)?;
        Ok(done)
    }

    /// [`Writer::queue_in_turn`] for a job nobody waits for (a rejected alert's log rows): without an answer to
    /// give, a failed commit keeps it and stores it later, as [`Writer::log`]'s rows. Queued with an answer no one
    /// read, the rows were dropped with the failed commit, and the rejected CLOSE they record no longer counted as
    /// a later alert for an entry still waiting in the outbox.
    fn queue_in_turn_unawaited(&self, op: Op) -> Result<(), StoreError> {
        self.send_in_turn(Job::new(op, None), std::time::Duration::ZERO)
    }

    fn send_in_turn(&self, job: Job, held: std::time::Duration) -> Result<(), StoreError> {
        let mut in_turn = self.in_turn.lock().unwrap_or_else(|e| e.into_inner());
        let job = if in_turn.1 == 0 && held.is_zero() {
            match self.tx.try_send(job) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Closed(_)) => return Err(StoreError::Stopped),
                Err(mpsc::error::TrySendError::Full(job)) => job,
            }
        } else {
            job
        };
        let not_before = (!held.is_zero()).then(|| std::time::Instant::now() + held);
        in_turn.0.send(InTurn { job, not_before }).map_err(|_| StoreError::Stopped)?;
        in_turn.1 += 1;
        Ok(())
    }

    /// Deletes expired dedup keys and rate marks, and old finished outbox rows (cheap: run it often, since
    /// under a high rate limit every delivery leaves a rate mark).
    pub async fn prune_windows(&self, retention: Retention, windows: Windows, now_ms: i64) -> Result<(), StoreError> {
        self.commit(Op::PruneWindows { retention, windows, now_ms }).await
    }

    /// Deletes log rows beyond the retention (and what [`Writer::prune_windows`] deletes) and waits until that
    /// is committed.
    pub async fn prune(&self, retention: Retention, windows: Windows, now_ms: i64) -> Result<(), StoreError> {
        if let Some((pg, caps)) = &self.shared {
            return pg::prune(pg, retention, windows, now_ms, *caps).await;
        }
        // In rounds, each its own job: the jobs queued meanwhile (a delivery's `sending` mark, its result) are
        // committed between them, not after the whole prune.
        self.commit(Op::PruneWindows { retention, windows, now_ms }).await?;
        loop {
            let more = Arc::new(std::sync::atomic::AtomicBool::new(false));
            self.commit(Op::PruneLogs { retention, now_ms, more: Arc::clone(&more) }).await?;
            if !more.load(std::sync::atomic::Ordering::Relaxed) {
                return Ok(());
            }
        }
    }

    /// Waits until every job queued before this call is committed (or has failed): a commit of nothing, behind
    /// them in the queue (and behind those queued in turn that wait outside it).
    pub async fn barrier(&self) -> Result<(), StoreError> {
        let done = self.queue_in_turn(Op::Log(None, None), std::time::Duration::ZERO)?;
        done.await.map_err(|_| StoreError::Unanswered)?
    }

    /// Sends a job and waits for the commit that includes it.
    async fn commit(&self, op: Op) -> Result<(), StoreError> {
        let done = self.queue(op).await?;
        done.await.map_err(|_| StoreError::Unanswered)?
    }

    /// Sends a job (jobs are committed in the order they were sent) and returns what tells of its commit.
    async fn queue(&self, op: Op) -> Result<Committed, StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Job::new(op, Some(ack))).await.map_err(|_| StoreError::Stopped)?;
        Ok(done)
    }
}

/// The most log rows a round of the ten-minute prune deletes on SQLite ([`Op::PruneLogs`]): tens of milliseconds of
/// the writer's time.
const PRUNE_ROUND: i64 = 10_000;

/// A clock's gap for a message: in seconds from 10 s on, in milliseconds below (a server 0.6 s off is refused too).
fn clock_gap(ms: i64) -> String {
    if ms.abs() >= 10_000 {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    }
}

/// The end of a queued job's commit (dropped unanswered if the writer stopped).
pub type Committed = oneshot::Receiver<Result<(), StoreError>>;

/// The forwarding thread of [`Writer::queue_in_turn`]: moves the jobs that waited outside the queue into it in
/// their order, waiting for room (a thread of its own, so that no caller's thread ever waits for it). Ends when
/// the last writer is dropped.
fn forward(
    waiting: std::sync::mpsc::Receiver<InTurn>,
    queue: mpsc::Sender<Job>,
    in_turn: Arc<Mutex<(std::sync::mpsc::Sender<InTurn>, usize)>>,
) {
    // The lane's own sender, held by `in_turn`, must not keep this thread alive once the writers are gone.
    let in_turn = Arc::downgrade(&in_turn);
    while let Ok(InTurn { job, not_before }) = waiting.recv() {
        if let Some(t) = not_before {
            std::thread::sleep(t.saturating_duration_since(std::time::Instant::now()));
        }
        if let Err(mpsc::error::SendError(mut job)) = queue.blocking_send(job) {
            if let Some(ack) = job.ack.take() {
                let _ = ack.send(Err(StoreError::Stopped));
            }
        }
        // Counted down only once the job is in the queue: a job queued in turn meanwhile waits behind it.
        if let Some(t) = in_turn.upgrade() {
            t.lock().unwrap_or_else(|e| e.into_inner()).1 -= 1;
        }
    }
}

/// Row caps the writer enforces as it writes (the periodic prune enforces the age limit and catches up).
#[derive(Debug, Clone, Copy)]
pub struct RowCaps {
    /// Log rows kept per strategy.
    pub log_rows: u64,
    /// Outbox rows kept per strategy; only finished (`done`, `failed`) rows are ever deleted for it.
    pub outbox_rows: u64,
}

impl Default for RowCaps {
    fn default() -> Self {
        RowCaps { log_rows: 100_000, outbox_rows: 100_000 }
    }
}

/// How many rows below its cap a strategy at the cap is taken down to: a thousand-and-twenty-fourth of the cap
/// (97 of the default 100,000; none for a cap under 1,024), so that a strategy writing at its cap pays one
/// delete per that many rows rather than one per row. Small enough that the delete stays well under a
/// millisecond: a sixty-fourth (1,562 rows) took milliseconds and showed in the p99 at 2,000 alerts a second.
/// The cap itself is never exceeded.
fn cap_headroom(max_rows: u64) -> u64 {
    max_rows / 1024
}

/// What the writer thread knows of each strategy's row counts, to hold the [`RowCaps`] without counting
/// rows at every write. Counts are read once per strategy and forgotten after a prune or a failed commit.
struct Tallies {
    caps: RowCaps,
    /// The windows, once a prune has said them (the server prunes at start): what lets a commit delete expired
    /// dedup keys as it stores new ones.
    windows: Option<Windows>,
    /// Dedup keys stored by the batch being committed.
    keys_stored: usize,
    logs: HashMap<String, u64>,
    /// Outbox rows, and the count below which no deletion is tried again (all rows were still to send).
    outbox: HashMap<String, (u64, u64)>,
}

impl Tallies {
    fn logged(&mut self, tx: &Transaction<'_>, strategy: &str, added: usize) -> rusqlite::Result<()> {
        if added == 0 {
            return Ok(());
        }
        let count = match self.logs.get_mut(strategy) {
            Some(c) => {
                *c += added as u64;
                c
            }
            None => self.logs.entry(strategy.to_owned()).or_insert(logs::count(tx, strategy)?),
        };
        logs::cap(tx, strategy, count, self.caps.log_rows)
    }

    fn queued(&mut self, tx: &Transaction<'_>, strategy: &str, added: usize) -> rusqlite::Result<()> {
        if added == 0 {
            return Ok(());
        }
        let entry = match self.outbox.get_mut(strategy) {
            Some(e) => {
                e.0 += added as u64;
                e
            }
            None => self.outbox.entry(strategy.to_owned()).or_insert((outbox::count(tx, strategy)?, 0)),
        };
        outbox::cap(tx, strategy, entry, self.caps.outbox_rows, crate::app::now_ms())
    }

    /// Takes what a prune deleted off the row counts, which are kept: forgotten, each strategy's next commit (an
    /// alert's) counted its whole outbox and log again inside this thread's transaction, after every prune.
    fn outbox_pruned(&mut self, gone: HashMap<String, u64>) {
        for (strategy, n) in gone {
            if let Some(o) = self.outbox.get_mut(&strategy) {
                o.0 = o.0.saturating_sub(n);
                // Rows went: the cap may find finished ones to delete again.
                o.1 = 0;
            }
        }
    }

    fn forget(&mut self) {
        self.logs.clear();
        self.outbox.clear();
    }
}

/// The database: a writer (a thread over SQLite, or a task over PostgreSQL) and a read side.
pub struct Store {
    writer: Writer,
    thread: Option<JoinHandle<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
    read: ReadSide,
}

/// Where reads go.
#[derive(Clone)]
enum ReadSide {
    /// The embedded database's read-only connection.
    Sqlite(Arc<Mutex<Connection>>),
    /// The shared database's pool.
    Postgres(pg::Pg),
}

impl Store {
    /// Opens (or creates) the database at `path` and starts the writer thread, which holds the row caps as
    /// it writes. Dedup keys stored ahead of this clock are brought back to it first, rate marks stored ahead of it
    /// dropped (`windows::rewind_keys`, `windows::drop_marks_ahead`).
    pub fn open_with_caps(path: &Path, sync: Sync, caps: RowCaps) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(StoreError::open(path))?;
        // A database a newer server wrote (a binary rolled back): its tables may mean what this one does not
        // know, and init would write this version over it.
        let found: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(StoreError::open(path))?;
        if found > SCHEMA_VERSION {
            let (found, known) = (i32::try_from(found).unwrap_or(i32::MAX), SCHEMA_VERSION as i32);
            return Err(StoreError::NewerSchema { found, known });
        }
        init(&conn, sync).map_err(StoreError::open(path))?;
        let rewound = windows::rewind_keys(&conn, crate::app::now_ms()).map_err(StoreError::open(path))?;
        if rewound > 0 {
            tracing::warn!(
                keys = rewound,
                "dedup keys stored ahead of this clock (it went back) were brought back to it"
            );
        }
        let marks = windows::drop_marks_ahead(&conn, crate::app::now_ms()).map_err(StoreError::open(path))?;
        if marks > 0 {
            tracing::warn!(marks, "rate marks stored ahead of this clock (it went back) were dropped");
        }
        let reader =
            Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(StoreError::open(path))?;
        reader.busy_timeout(std::time::Duration::from_secs(5)).map_err(StoreError::open(path))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let writer = Writer::start(tx)?;
        let thread = std::thread::Builder::new()
            .name("db-writer".into())
            .spawn(move || write_loop(conn, rx, caps))
            .map_err(|e| StoreError::Spawn(Arc::new(e)))?;
        Ok(Store { writer, thread: Some(thread), task: None, read: ReadSide::Sqlite(Arc::new(Mutex::new(reader))) })
    }

    /// Connects to the shared PostgreSQL database at `url` (a pool of `pool` connections), applies the
    /// migrations it lacks and starts the writer task. Several servers may share the database.
    pub async fn open_postgres(url: &str, pool: usize, caps: RowCaps) -> Result<Store, StoreError> {
        let pg = pg::Pg::connect(url, pool).await?;
        pg.migrate().await?;
        let (tx, rx) = mpsc::channel(QUEUE);
        let mut writer = Writer::start(tx)?;
        writer.shared = Some((pg.clone(), caps));
        let task = tokio::spawn(pg::write_loop(pg.clone(), rx));
        Ok(Store { writer, thread: None, task: Some(task), read: ReadSide::Postgres(pg) })
    }

    /// The shared database, when the store is PostgreSQL.
    pub fn shared(&self) -> Option<pg::Pg> {
        match &self.read {
            ReadSide::Postgres(pg) => Some(pg.clone()),
            ReadSide::Sqlite(_) => None,
        }
    }

    /// A handle for queuing writes.
    pub fn writer(&self) -> Writer {
        self.writer.clone()
    }

    /// A handle for reads.
    pub fn reader(&self) -> Reader {
        Reader { side: self.read.clone() }
    }

    /// Commits everything queued so far and stops the writer thread. Call after the listeners have drained.
    pub async fn close(mut self) -> Result<(), StoreError> {
        // Behind the jobs queued in turn that still wait outside the queue, so that they are in the last commit.
        let res = match self.writer.queue_in_turn(Op::Close, std::time::Duration::ZERO) {
            Ok(done) => done.await.map_err(|_| StoreError::Unanswered).and_then(|r| r),
            Err(e) => Err(e),
        };
        if let Some(t) = self.thread.take() {
            // Joining a thread blocks; it has already finished its last commit, so this is short.
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
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

/// Sets the connection up and creates every table that is missing.
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
    conn.execute_batch("PRAGMA cache_size=-16384;")?;
    // Every table is created with IF NOT EXISTS: a database of an earlier version gains the tables it lacks.
    for schema in
        [logs::SCHEMA, tokens::SCHEMA, windows::SCHEMA, outbox::SCHEMA, bot_state::SCHEMA, notifications::SCHEMA]
    {
        conn.execute_batch(schema)?;
    }
    // Columns added to the outbox since version 3; an older table gains each it lacks.
    // - 4, `after_coid`: empty in older rows, which never need it.
    // - 5, `deadline_ms` (and the `notifications` table, created above like every table): older rows have
    //   none and are always sent.
    // - 6, `target`, where each row was stored to go: older rows have none and go wherever their bot is
    //   delivered now, as they always did.
    // - 7 adds a table only (`retired_tokens`, created above): tokens rotated away before it were not kept.
    // - 8, `rate_marks.last_ms`, the latest instant a second's count holds: older rows have none and count to
    //   their second's end, as they did.
    // - 9, `outbox.alert_log_id`, the first log row of the alert that wrote each row: older rows have none, and
    //   an alert in their own millisecond overtakes them, as before.
    for (table, column, kind) in [
        ("outbox", "after_coid", "TEXT"),
        ("outbox", "deadline_ms", "INTEGER"),
        ("outbox", "target", "TEXT"),
        ("rate_marks", "last_ms", "INTEGER"),
        ("outbox", "alert_log_id", "INTEGER"),
    ] {
        let has: bool = conn.prepare("SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2")?.exists([table, column])?;
        if !has {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {column} {kind};"))?;
        }
    }
    conn.execute_batch(&format!("PRAGMA user_version = {SCHEMA_VERSION};"))
}

fn write_loop(mut conn: Connection, mut rx: mpsc::Receiver<Job>, caps: RowCaps) {
    let mut tallies = Tallies { caps, windows: None, keys_stored: 0, logs: HashMap::new(), outbox: HashMap::new() };
    let mut batch = Vec::with_capacity(BATCH);
    // Jobs nobody waits for (log rows, refusal counts) of a batch whose commit failed, tried again on their own.
    let mut carried = Carried::default();
    loop {
        if carried.jobs.is_empty() {
            match rx.blocking_recv() {
                Some(first) => batch.push(first),
                None => break,
            }
        } else {
            // New jobs are taken as they come (an alert's commit does not wait out the carried rows' pause); the
            // carried rows are tried again once their pause is over.
            if carried.due() {
                carried.retry(&mut conn, &mut tallies);
            }
            match rx.try_recv() {
                Ok(first) => batch.push(first),
                Err(mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(CARRY_POLL);
                    continue;
                }
                Err(mpsc::error::TryRecvError::Disconnected) => break,
            }
        }
        drain(&mut rx, &mut batch);
        // Nobody waits for log rows, so when only they are queued, let a few more arrive before committing:
        // a commit costs page writes and file locks whatever its size, and under load a batch of one
        // delivery's rows makes the writer the bottleneck. A job someone awaits is committed at once.
        if batch.len() < BATCH / 4 {
            gather(&mut rx, &mut batch, LOG_BATCH_WAIT);
        }
        let closing = batch.iter().any(|j| matches!(j.op, Op::Close));
        if closing {
            // Whatever is still queued behind the close belongs in the last commit too.
            while let Ok(job) = rx.try_recv() {
                batch.push(job);
            }
            // The rows of a failed commit get a last try of their own.
            if !carried.jobs.is_empty() {
                carried.retry(&mut conn, &mut tallies);
                carried.give_up("log rows could not be stored before the stop; given up");
            }
        }
        let began = std::time::Instant::now();
        let result = commit_batch(&mut conn, &batch, &mut tallies).map_err(|e| StoreError::Commit(Arc::new(e)));
        note_transaction(&batch, began);
        if let Err(e) = &result {
            // The counts moved with the rolled-back rows: read them again.
            tallies.forget();
            tracing::error!(error = %e, jobs = batch.len(), "database commit failed");
        }
        let mut lost = 0;
        for mut job in batch.drain(..) {
            match job.ack.take() {
                Some(ack) => {
                    let _ = ack.send(result.clone());
                }
                // Nobody waits for it, so nobody would learn it was lost: kept, and committed on its own later
                // (never again beside an alert, which a row that cannot be stored would fail each time).
                None if result.is_err() && !closing => carried.keep(job),
                None if result.is_err() => lost += 1,
                None => {}
            }
        }
        if lost > 0 {
            tracing::error!(rows = lost, "log rows of the last commit before the stop could not be stored; given up");
        }
        if closing {
            break;
        }
    }
    // Checkpoint so the database file alone holds everything after a clean stop.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
}

/// How long the writer waits before committing again the rows of a failed commit that nobody waits for.
const CARRY_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How many times those rows are tried again before they are given up (with an ERROR saying how many).
const CARRY_TRIES: u32 = 30;

/// How often the writer looks for new jobs while carried rows wait for their next try.
const CARRY_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The jobs nobody waits for of batches whose commit failed (a database locked by another process past the busy
/// timeout, a full disk for a moment): their log rows said what became of alerts, and dropped, a 500 left no trace
/// in the strategy's Logs.
#[derive(Default)]
struct Carried {
    jobs: Vec<Job>,
    tries: u32,
    /// When they were last tried (or first kept).
    last: Option<std::time::Instant>,
}

impl Carried {
    /// Keeps a job of a failed commit; the first waits [`CARRY_WAIT`] before its try.
    fn keep(&mut self, job: Job) {
        self.last.get_or_insert_with(std::time::Instant::now);
        self.jobs.push(job);
    }

    /// Whether the carried jobs' pause is over.
    fn due(&self) -> bool {
        self.last.map_or(true, |t| t.elapsed() >= CARRY_WAIT)
    }

    /// How long the carried jobs' pause still lasts.
    fn pause_left(&self) -> std::time::Duration {
        self.last.map_or(std::time::Duration::ZERO, |t| CARRY_WAIT.saturating_sub(t.elapsed()))
    }

    /// Takes the result of a commit of the carried jobs on their own: done, or after [`CARRY_TRIES`] failures
    /// given up (with an ERROR saying how many rows).
    fn tried<E: std::fmt::Display>(&mut self, result: Result<(), E>) {
        self.last = Some(std::time::Instant::now());
        match result {
            Ok(()) => self.clear(),
            Err(e) => {
                self.tries += 1;
                if self.tries >= CARRY_TRIES {
                    tracing::error!(error = %e, rows = self.jobs.len(), "log rows could not be stored; given up");
                    self.clear();
                }
            }
        }
    }

    /// Gives the carried jobs up (at the stop), saying so.
    fn give_up(&mut self, why: &str) {
        if !self.jobs.is_empty() {
            tracing::error!(rows = self.jobs.len(), "{why}");
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.jobs.clear();
        self.tries = 0;
        self.last = None;
    }

    /// Commits the carried jobs on their own (SQLite).
    fn retry(&mut self, conn: &mut Connection, tallies: &mut Tallies) {
        let result = commit_batch(conn, &self.jobs, tallies);
        if result.is_err() {
            tallies.forget();
        }
        self.tried(result);
    }
}

/// Lets more jobs join a batch that holds only log rows, for up to `wait`, and stops waiting as soon as a job
/// someone awaits is in it: an alert's commit never waits out the gathering of log rows queued before it.
fn gather(rx: &mut mpsc::Receiver<Job>, batch: &mut Vec<Job>, wait: std::time::Duration) {
    let until = std::time::Instant::now() + wait;
    while batch.len() < BATCH && batch.iter().all(|j| j.ack.is_none()) {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(GATHER_POLL));
        drain(rx, batch);
    }
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

fn commit_batch(conn: &mut Connection, batch: &[Job], tallies: &mut Tallies) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    tallies.keys_stored = 0;
    for job in batch {
        apply(&tx, &job.op, tallies)?;
    }
    // Expired keys go as new ones come, up to twice as many as this commit stored: the deletes keep up and are
    // spread over the commits, where a periodic prune deleting a minute's keys at once held every alert queued
    // behind it (120,000 keys at 2,000 alerts a second). The minute's prune still catches up a backlog.
    if let (Some(w), n @ 1..) = (tallies.windows, tallies.keys_stored) {
        windows::prune_oldest_keys(&tx, crate::app::now_ms().saturating_sub(w.dedup_ms), 2 * n + 16)?;
    }
    tx.commit()
}

/// Applies one job's write inside the batch's transaction.
fn apply(tx: &Transaction<'_>, op: &Op, tallies: &mut Tallies) -> rusqlite::Result<()> {
    match op {
        Op::Log(entry, mark) => {
            if let Some(e) = entry {
                let n = logs::insert(tx, e)?;
                tallies.logged(tx, &e.strategy, n)?;
            }
            if let Some(m) = mark {
                windows::store_mark(tx, m)?;
                tallies.keys_stored += usize::from(m.key.is_some());
            }
        }
        Op::Refusals(r) => {
            let n = logs::upsert_refusals(tx, r)?;
            tallies.logged(tx, &r.strategy, n)?;
        }
        Op::Outbox { mark, rows, log } => {
            let n = outbox::insert(tx, mark, rows, log.as_ref())?;
            tallies.keys_stored += usize::from(mark.key.is_some());
            if let Some(e) = log {
                tallies.logged(tx, &e.strategy, e.records.len())?;
            }
            tallies.queued(tx, &mark.strategy, n)?;
        }
        Op::Sending(id) => outbox::set_sending(tx, *id)?,
        // One server alone: its leases are all granted.
        Op::Unsent { id, .. } => outbox::set_unsent(tx, *id)?,
        Op::Requeue(id) => console::requeue(tx, *id)?,
        Op::Notify { strategy, event, text, now_ms } => notifications::insert(tx, strategy, event, text, *now_ms)?,
        Op::NotifySent(id, sent) => notifications::sent(tx, *id, sent)?,
        Op::Dismiss(id) => console::dismiss(tx, *id)?,
        Op::Delivered(run) => {
            for d in run.iter() {
                outbox::set_delivered(tx, d)?;
                if let Some(e) = &d.log {
                    tallies.logged(tx, &e.strategy, e.records.len())?;
                    // A finished row can be deleted for the cap: try again at the next insert.
                    if let Some(o) = tallies.outbox.get_mut(&e.strategy) {
                        o.1 = 0;
                    }
                }
            }
        }
        Op::BotState { strategy, bot, state, held } => {
            bot_state::set(tx, strategy, bot, state)?;
            // One server alone: its leases are all granted.
            if let Some((_, stored)) = held {
                stored.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        // One server alone, its rotations one at a time (`App::rotate`): the token it replaces is the current one.
        Op::SetToken { strategy, token, retired, ts_ms, applied } => {
            tokens::set(tx, strategy, token, retired, *ts_ms)?;
            applied.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Op::PruneLogs { retention, now_ms, more } => {
            let (gone, left) = logs::prune(tx, *retention, *now_ms, PRUNE_ROUND)?;
            for (strategy, gone) in gone {
                if let Some(c) = tallies.logs.get_mut(&strategy) {
                    *c = c.saturating_sub(gone);
                }
            }
            more.store(left, std::sync::atomic::Ordering::Relaxed);
        }
        Op::PruneWindows { retention, windows, now_ms } => {
            tallies.outbox_pruned(prune_windows(tx, *retention, *windows, *now_ms)?);
            tallies.windows = Some(*windows);
        }
        Op::Close => {}
    }
    Ok(())
}

/// Deletes dedup keys and rate marks that have left their windows, and finished outbox rows older than the
/// log retention (pending ones are never deleted). Returns how many outbox rows each strategy lost.
fn prune_windows(
    tx: &Transaction<'_>,
    r: Retention,
    w: Windows,
    now_ms: i64,
) -> rusqlite::Result<HashMap<String, u64>> {
    let (keys, marks) = windows::prune(tx, w, now_ms)?;
    let kept = now_ms.saturating_sub(outbox::FINISHED_KEPT_MS);
    let by_strategy = outbox::prune_finished_by_strategy(tx, now_ms.saturating_sub(r.max_age_ms), kept)?;
    notifications::prune(tx, now_ms.saturating_sub(r.max_age_ms))?;
    let sent: u64 = by_strategy.values().sum();
    if keys as u64 + marks as u64 + sent > 0 {
        tracing::info!(keys, marks, sent, "pruned expired dedup keys, rate marks and finished outbox rows");
    }
    Ok(by_strategy)
}

/// The read side. Queries block: call them from `spawn_blocking`. Each table's file adds its own reads, in
/// both dialects: `query` runs on SQLite, `pg` on the shared PostgreSQL.
#[derive(Clone)]
pub struct Reader {
    side: ReadSide,
}

impl Reader {
    fn lock(&self) -> Option<MutexGuard<'_, Connection>> {
        match &self.side {
            ReadSide::Sqlite(conn) => Some(conn.lock().unwrap_or_else(|e| e.into_inner())),
            ReadSide::Postgres(_) => None,
        }
    }

    /// The shared database, when reads go to PostgreSQL.
    fn pg(&self) -> Option<&pg::Pg> {
        match &self.side {
            ReadSide::Postgres(pg) => Some(pg),
            ReadSide::Sqlite(_) => None,
        }
    }

    /// Runs one query on SQLite and collects its rows.
    fn query<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        row: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>, StoreError> {
        let Some(conn) = self.lock() else {
            // Every read checks for PostgreSQL first; reaching here is a missing branch, answered as a failed read.
            return Err(StoreError::ReadAborted);
        };
        let mut st = conn.prepare_cached(sql).map_err(StoreError::read)?;
        let rows = st.query_map(params, row).map_err(StoreError::read)?;
        rows.collect::<rusqlite::Result<_>>().map_err(StoreError::read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a refusal by the database says a commit did not land; a writer that stopped before it answered, or a
    /// database that did not answer, may have stored it.
    #[test]
    fn a_commit_is_unconfirmed_unless_the_database_refused_it() {
        assert!(StoreError::Unreachable("no answer in time".into()).commit_unconfirmed());
        assert!(StoreError::Unanswered.commit_unconfirmed());
        assert!(!StoreError::Stopped.commit_unconfirmed());
        assert!(!StoreError::Commit(Arc::new(rusqlite::Error::InvalidQuery)).commit_unconfirmed());
    }

    /// The minute's prune keeps the logs' counts (it deletes no log row), so no alert's commit after it counts
    /// a strategy's whole log again; it forgets the outbox's, whose rows it deletes.
    /// A retention of 0 days (or one shorter than a lookup's span) deleted a finished row the next minute: a
    /// Schwab lookup for a later alert with the same terms then took the earlier alert's order for its own, its
    /// "twins" count finding no other row, and the later alert was never placed. Finished rows are kept 3 hours.
    #[test]
    fn finished_rows_are_kept_for_lookups_whatever_the_retention() {
        let mut conn = tables();
        let now = 100 * 3_600_000;
        // (created, finished, status): the last waited 4 hours to go out and finished a minute ago.
        for (created, done, status) in [
            (now - 4 * 3_600_000, now - 4 * 3_600_000, "done"),
            (now - 60_000, now - 60_000, "done"),
            (now - 60_000, now - 60_000, "failed"),
            (now - 4 * 3_600_000, now - 60_000, "done"),
        ] {
            conn.execute(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms,
                                     done_ms)
                 VALUES ('s', 'b', 'broker', 'place', 'c', 'POST', '/orders', x'', ?1, ?2, ?3)",
                rusqlite::params![status, created, done],
            )
            .unwrap();
        }
        let mut tallies = no_tallies();
        let tx = conn.transaction().unwrap();
        let windows = Windows { dedup_ms: 1_000, rate_ms: 1_000 };
        let retention = Retention { max_age_ms: 0, max_rows_per_strategy: 10 };
        apply(&tx, &Op::PruneWindows { retention, windows, now_ms: now }, &mut tallies).unwrap();
        let left: i64 = tx.query_row("SELECT count(*) FROM outbox", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 3, "the rows finished a minute ago stay, the one finished 4 hours ago goes");
        // The cap likewise: over it, nothing finished within the 3 hours goes.
        let mut tally = (3, 0);
        outbox::cap(&tx, "s", &mut tally, 1, now).unwrap();
        let left: i64 = tx.query_row("SELECT count(*) FROM outbox", [], |r| r.get(0)).unwrap();
        assert_eq!(left, 3);
    }

    /// The ten-minute prune forgot every count, so each strategy's next alert counted its whole log (and outbox)
    /// again inside the writer's transaction. The counts are kept, less what it deleted.
    #[test]
    fn the_ten_minutes_prune_keeps_the_counts_less_what_it_deleted() {
        let mut conn = tables();
        for ts in [1_000, 2_000, 9_500, 9_600, 9_700] {
            conn.execute(
                "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 VALUES (?1, 's', 'INFO', 'm', 'processed', 200, '[]')",
                rusqlite::params![ts],
            )
            .unwrap();
        }
        let mut tallies = no_tallies();
        tallies.logs.insert("s".into(), 5);
        tallies.outbox.insert("s".into(), (0, 0));
        let tx = conn.transaction().unwrap();
        let windows = Windows { dedup_ms: 1_000, rate_ms: 1_000 };
        let retention = Retention { max_age_ms: 1_000, max_rows_per_strategy: 10 };
        let more = Arc::new(std::sync::atomic::AtomicBool::new(false));
        apply(&tx, &Op::PruneLogs { retention, now_ms: 10_000, more }, &mut tallies).unwrap();
        apply(&tx, &Op::PruneWindows { retention, windows, now_ms: 10_000 }, &mut tallies).unwrap();
        let left: u64 = tx.query_row("SELECT count(*) FROM logs", [], |r| r.get(0)).unwrap();
        assert_eq!((left, tallies.logs.get("s")), (3, Some(&3)), "two rows past the retention went");
        assert_eq!(tallies.outbox.get("s"), Some(&(0, 0)));
    }

    /// A round of the ten-minute prune reads about its budget of rows, whatever the backlog: it walked every row
    /// past the retention to find the first fresh one, each round, so clearing a backlog was quadratic in it. Counted
    /// in SQLite's virtual machine steps (deterministic, unlike a time): a backlog ten times as large costs a round
    /// less than twice as much (it cost ten times as much).
    #[test]
    fn a_round_of_the_log_prune_reads_its_budget_not_the_whole_backlog() {
        fn steps_of_a_round(backlog: i64) -> u64 {
            let mut conn = tables();
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 SELECT 1000, 's' || (i % 3), 'INFO', 'm', 'processed', 200, '[]' FROM n",
                rusqlite::params![backlog],
            )
            .unwrap();
            let steps = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let counted = Arc::clone(&steps);
            conn.progress_handler(
                100,
                Some(move || {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    false
                }),
            );
            let tx = conn.transaction().unwrap();
            let retention = Retention { max_age_ms: 1_000, max_rows_per_strategy: u64::MAX };
            let (gone, more) = logs::prune(&tx, retention, 1_000_000, 1_000).unwrap();
            assert_eq!(
                (gone.values().sum::<u64>(), more),
                (1_000, true),
                "a round deletes its budget, and more is left"
            );
            steps.load(std::sync::atomic::Ordering::Relaxed)
        }
        let (small, large) = (steps_of_a_round(5_000), steps_of_a_round(50_000));
        assert!(large < 2 * small, "a round over 50,000 rows took {large} steps, over 5,000 {small}");
    }

    #[test]
    fn the_minutes_prune_keeps_the_log_counts() {
        let mut conn = tables();
        let mut tallies = no_tallies();
        tallies.logs.insert("s".into(), 7);
        tallies.outbox.insert("s".into(), (3, 0));
        let tx = conn.transaction().unwrap();
        let windows = Windows { dedup_ms: 1_000, rate_ms: 1_000 };
        let retention = Retention { max_age_ms: 1_000, max_rows_per_strategy: 10 };
        for created in [1_000, 10_500] {
            tx.execute(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms)
                 VALUES ('s', 'b', 'broker', 'place', 'c', 'POST', '/orders', x'', 'done', ?1)",
                rusqlite::params![created - outbox::FINISHED_KEPT_MS],
            )
            .unwrap();
        }
        apply(&tx, &Op::PruneWindows { retention, windows, now_ms: 10_000 }, &mut tallies).unwrap();
        tx.commit().unwrap();
        assert_eq!(tallies.logs.get("s"), Some(&7));
        // The outbox's count is kept too, less the one row the prune deleted: forgotten, the next alert of the
        // strategy counted its whole outbox again inside the writer's transaction.
        assert_eq!(tallies.outbox.get("s"), Some(&(2, 0)));
    }

    /// An in-memory database with the writer's tables.
    fn tables() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        for schema in [logs::SCHEMA, outbox::SCHEMA, windows::SCHEMA, notifications::SCHEMA] {
            conn.execute_batch(schema).unwrap();
        }
        conn
    }

    /// The writer's counts before any is read.
    fn no_tallies() -> Tallies {
        Tallies {
            caps: RowCaps::default(),
            windows: None,
            keys_stored: 0,
            logs: HashMap::new(),
            outbox: HashMap::new(),
        }
    }

    /// The detail lines of SQLite's plan for `sql` with `params`: what the statement's tests read their index
    /// use and temporary tables from.
    pub(super) fn query_plan(c: &rusqlite::Connection, sql: &str, params: impl rusqlite::Params) -> Vec<String> {
        c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map(params, |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }

    /// Draws below `n` from a fixed seed (xorshift), for tests that hold a statement to its reference on many
    /// generated tables.
    pub(super) fn draws(seed: u64) -> impl FnMut(u64) -> u64 {
        let mut rng = seed;
        move |n| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("swh-store-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_database_that_cannot_be_opened_says_which() {
        let dir = temp_dir("open");
        // A directory where the database file should be.
        match Store::open_with_caps(&dir, Sync::Normal, RowCaps::default()) {
            Err(StoreError::Open { path, .. }) => assert_eq!(path, dir),
            Err(other) => panic!("not an Open error: {other}"),
            Ok(_) => panic!("a directory opened as a database"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_version_3_database_gains_the_new_columns_and_tables_and_keeps_its_rows() {
        let dir = temp_dir("migrate");
        let db = dir.join("old.db");
        {
            // The outbox as version 3 had it (no `after_coid`, no `deadline_ms`, no `target`), no `notifications`
            // table.
            let old = outbox::SCHEMA
                .lines()
                .filter(|l| !l.contains("after_coid") && !l.contains("deadline_ms") && !l.contains("target TEXT"))
                .collect::<Vec<_>>()
                .join("\n")
                .replace("done_ms INTEGER,", "done_ms INTEGER");
            assert!(!old.contains("after_coid") && !old.contains("deadline_ms") && !old.contains("target"), "{old}");
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(&old).unwrap();
            conn.execute_batch(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, \
                 created_ms) VALUES ('s', 'b', 'some-broker', 'place', 'c1', 'POST', '/orders', x'7b7d', 'pending', 1);
                 PRAGMA user_version = 3;",
            )
            .unwrap();
        }
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let rows = reader.open_rows("s", "b", 10).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].client_order_id.as_str(), rows[0].after.as_deref()), ("c1", None));
        assert_eq!(rows[0].deadline_ms, None, "a row of an older version has no deadline: it is always sent");
        assert_eq!(rows[0].target, None, "nor a target: it goes wherever its bot is delivered now");
        writer.notification("s", "order", "hello".into(), 5).await.unwrap();
        let due = reader.due_notifications(10, 10, 10, &[]).unwrap();
        assert_eq!(due.len(), 1);
        let version: u32 = reader.lock().unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_version_7_databases_rate_marks_gain_their_instants_and_old_rows_count_to_their_seconds_end() {
        let dir = temp_dir("migrate-marks");
        let db = dir.join("old.db");
        {
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(
                "CREATE TABLE rate_marks (strategy TEXT NOT NULL, second INTEGER NOT NULL, n INTEGER NOT NULL,
                     PRIMARY KEY (strategy, second)) WITHOUT ROWID;
                 INSERT INTO rate_marks (strategy, second, n) VALUES ('s', 5, 2);
                 PRAGMA user_version = 7;",
            )
            .unwrap();
        }
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        assert_eq!(reader.rate_marks(0).unwrap(), vec![("s".into(), 5_999); 2], "an old row: its second's end");
        // A new mark in the old row's second: the whole count still ends no earlier than the old row did.
        writer.outbox(Mark { strategy: "s".into(), ts_ms: 5_100, key: None }, Vec::new(), None).await.unwrap();
        writer.outbox(Mark { strategy: "s".into(), ts_ms: 7_100, key: None }, Vec::new(), None).await.unwrap();
        let mut want = vec![("s".to_owned(), 5_999); 3];
        want.push(("s".into(), 7_100));
        assert_eq!(reader.rate_marks(0).unwrap(), want);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_database_of_a_newer_server_is_refused_and_left_as_it_is() {
        let dir = temp_dir("newer");
        let db = dir.join("newer.db");
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1)).unwrap();
        drop(conn);
        let err = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).err().expect("refused");
        assert!(err.to_string().contains("upgrade the server"), "{err}");
        let conn = Connection::open(&db).unwrap();
        let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION + 1, "its version is not written over");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_version_5_database_gains_the_target_and_new_rows_keep_theirs() {
        let dir = temp_dir("migrate-target");
        let db = dir.join("old.db");
        {
            // The outbox as version 5 had it: every column but `target`.
            let old = outbox::SCHEMA
                .lines()
                .filter(|l| !l.contains("target TEXT"))
                .collect::<Vec<_>>()
                .join("\n")
                .replace("deadline_ms INTEGER,", "deadline_ms INTEGER");
            assert!(!old.contains("target"), "{old}");
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(&old).unwrap();
            conn.execute_batch(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, \
                 created_ms, deadline_ms) VALUES ('s', 'b', 'some-broker', 'place', 'c1', 'POST', '/orders', x'7b7d', \
                 'pending', 1, 60001);
                 PRAGMA user_version = 5;",
            )
            .unwrap();
        }
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let mark = Mark { strategy: "s".into(), ts_ms: 2, key: None };
        let mut new = row("s", 2);
        new.target = Some("https://api.example.com:443/v2".into());
        writer.outbox(mark, vec![new], None).await.unwrap();
        let rows = reader.open_rows("s", "b", 10).unwrap();
        let got: Vec<_> = rows.iter().map(|r| (r.client_order_id.as_str(), r.target.as_deref())).collect();
        assert_eq!(got, [("c1", None), ("c2", Some("https://api.example.com:443/v2"))]);
        assert_eq!(rows[0].deadline_ms, Some(60_001), "the row keeps what it had");
        // The admin API's read (with each row's result after the columns) reads the new column too.
        let listed = reader.strategy_outbox("s", 10).unwrap();
        assert_eq!(listed[0].0.target.as_deref(), Some("https://api.example.com:443/v2"));
        assert_eq!(listed[0].1, None);
        let version: u32 = reader.lock().unwrap().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        store.close().await.unwrap();
        // Opened again, the column is there already and nothing changes.
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        assert_eq!(store.reader().open_rows("s", "b", 10).unwrap().len(), 2);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn each_table_round_trips_and_a_closed_store_refuses_writes() {
        let dir = temp_dir("tables");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        writer.set_token("s", "tok", "old", 1).await.unwrap();
        writer.bot_state("s", "b", "{}".into()).await.unwrap();
        let mark = Mark { strategy: "s".into(), ts_ms: 5_000, key: Some("ab".into()) };
        writer.outbox(mark, Vec::new(), None).await.unwrap();
        assert_eq!(reader.token_overrides().unwrap().get("s").map(String::as_str), Some("tok"));
        assert_eq!(reader.bot_states().unwrap(), vec![("s".into(), "b".into(), "{}".into())]);
        assert_eq!(reader.dedup_keys(0).unwrap(), vec![("s".into(), "ab".into(), 5_000)]);
        // Restored at its own instant, the latest its second holds: at the second's end, a burst at a second's
        // start was refused for up to 1 s past its window after a restart.
        assert_eq!(reader.rate_marks(0).unwrap(), vec![("s".into(), 5_000)]);
        let later = Mark { strategy: "s".into(), ts_ms: 5_020, key: None };
        writer.outbox(later, Vec::new(), None).await.unwrap();
        let earlier = Mark { strategy: "s".into(), ts_ms: 5_010, key: None };
        writer.outbox(earlier, Vec::new(), None).await.unwrap();
        assert_eq!(reader.rate_marks(0).unwrap(), vec![("s".into(), 5_020); 3], "never earlier than any of them");
        store.close().await.unwrap();
        assert!(matches!(writer.set_token("s", "new", "tok", 2).await, Err(StoreError::Stopped)));
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn entry(strategy: &str, ts_ms: i64, message: &str) -> LogEntry {
        LogEntry {
            ts_ms,
            strategy: strategy.into(),
            decision: "rejected",
            http_status: 200,
            alerts: "[]".into(),
            records: vec![(strategy_webhook::Level::Warn, message.into())],
        }
    }

    fn row(strategy: &str, n: i64) -> OutboxRow {
        OutboxRow {
            strategy: strategy.into(),
            client_order_id: format!("c{n}"),
            ..OutboxRow::sample(0, "place", "pending", n)
        }
    }

    /// The rows that may have placed an order a lookup by terms found: place rows on the same path and replace
    /// rows under it, of any strategy or bot, in the window, not expired, not the row itself; not another
    /// account's, nor a cancel. The same answer from SQLite and PostgreSQL (the statement is written twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_twins_of_a_row_are_the_orders_placed_or_replaced_at_its_account_in_the_window_on_both_databases() {
        const ROWS: &str = "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body,
                meaning, status, created_ms) VALUES
            ('s', 'b', 'x', 'place', 'self', 'POST', '/a/1/orders', '', 'self', 'sending', 1000),
            ('s', 'b', 'x', 'place', 'c1', 'POST', '/a/1/orders', '', 'placed', 'done', 1000),
            ('t', 'y', 'x', 'replace', 'c2', 'PUT', '/a/1/orders/77', '', 'replaced', 'failed', 1000),
            ('s', 'b', 'x', 'place', 'c3', 'POST', '/a/2/orders', '', 'other account', 'done', 1000),
            ('s', 'b', 'x', 'replace', 'c4', 'PUT', '/a/1_orders/7', '', 'like pattern', 'done', 1000),
            ('s', 'b', 'x', 'cancel', 'c5', 'DELETE', '/a/1/orders/77', '', 'cancel', 'done', 1000),
            ('s', 'b', 'x', 'place', 'c6', 'POST', '/a/1/orders', '', 'expired', 'expired', 1000),
            ('s', 'b', 'x', 'place', 'c7', 'POST', '/a/1/orders', '', 'later', 'done', 900000),
            ('s', 'b', 'z', 'place', 'c8', 'POST', '/a/1/orders', '', 'other broker', 'done', 1000)";
        let mut ours = row("s", 1000);
        (ours.id, ours.broker, ours.path) = (1, "x".into(), "/a/1/orders".into());
        let sorted = |mut v: Vec<Option<String>>| {
            v.sort();
            v
        };
        let want = vec![Some("placed".to_owned()), Some("replaced".to_owned())];

        let dir = temp_dir("twins");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        rusqlite::Connection::open(dir.join("t.db")).unwrap().execute_batch(ROWS).unwrap();
        assert_eq!(sorted(store.reader().twins(&ours, 1000, 600_000).unwrap()), want);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        store.shared().unwrap().client().await.unwrap().batch_execute(ROWS).await.unwrap();
        let reader = store.reader();
        let got = tokio::task::spawn_blocking(move || reader.twins(&ours, 1000, 600_000)).await.unwrap().unwrap();
        assert_eq!(sorted(got), want);
        store.close().await.unwrap();
    }

    /// The requests a failed row's retry is judged against (`later_requests`: the bot's rows of later alerts that
    /// went or are on their way, whatever their order, for a change or a cancel as for an order: the caller matches
    /// them by instrument) and the count a page is known complete by (`rows_from`): the same answer from SQLite and
    /// PostgreSQL (written twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_later_requests_of_a_failed_row_are_the_same_on_both_databases() {
        // `{B}`: an empty body, as each database spells a blob.
        const ROWS: &str = "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, order_id, method, path,
                body, meaning, status, created_ms) VALUES
            ('s', 'b', 'x', 'replace', 'c1', 'O1', 'PATCH', '/o/O1', {B}, 'failed change', 'failed', 1000),
            ('s', 'b', 'x', 'place', 'c2', NULL, 'POST', '/o', {B}, 'same alert', 'done', 1000),
            ('s', 'b', 'x', 'replace', 'c3', 'O1', 'PATCH', '/o/O1', {B}, 'later change', 'done', 2000),
            ('s', 'b', 'x', 'cancel', 'c4', 'O2', 'DELETE', '/o/O2', {B}, 'other order', 'pending', 3000),
            ('s', 'b', 'x', 'cancel', 'c5', 'O1', 'DELETE', '/o/O1', {B}, 'dismissed', 'dismissed', 4000),
            ('s', 'c', 'x', 'cancel', 'c6', 'O1', 'DELETE', '/o/O1', {B}, 'other bot', 'done', 5000),
            ('t', 'b', 'x', 'cancel', 'c7', 'O1', 'DELETE', '/o/O1', {B}, 'other strategy', 'done', 6000),
            ('s', 'b', 'x', 'place', 'c8', NULL, 'POST', '/o', {B}, 'later order', 'sending', 7000)";
        let read = |reader: Reader| {
            let mut failed = row("s", 1000);
            (failed.id, failed.kind, failed.order_id) = (1, "replace".into(), Some("O1".into()));
            let change: Vec<String> =
                reader.later_requests(&failed).unwrap().into_iter().map(|r| r.client_order_id).collect();
            (failed.kind, failed.order_id) = ("place".into(), None);
            let order: Vec<String> =
                reader.later_requests(&failed).unwrap().into_iter().map(|r| r.client_order_id).collect();
            (change, order, reader.rows_from("s", 3).unwrap(), reader.rows_from("t", 1).unwrap())
        };
        // A change's are not only those on its order: re-aimed at a replacement, its stored order id is not the one
        // a later change of it names.
        let later = vec!["c3".to_owned(), "c4".into(), "c8".into()];
        let want = (later.clone(), later, 5, 1);

        let dir = temp_dir("later");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        rusqlite::Connection::open(dir.join("t.db")).unwrap().execute_batch(&ROWS.replace("{B}", "X''")).unwrap();
        assert_eq!(read(store.reader()), want, "SQLite");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        store.shared().unwrap().client().await.unwrap().batch_execute(&ROWS.replace("{B}", "''::BYTEA")).await.unwrap();
        let reader = store.reader();
        assert_eq!(tokio::task::spawn_blocking(move || read(reader)).await.unwrap(), want, "PostgreSQL");
        store.close().await.unwrap();
    }

    /// As on PostgreSQL (`store::pg::tables`), the ten-minute prune on SQLite must not hold the writer for as long
    /// as its deletes take: a delivery's `sending` mark queued behind a prune of a large backlog waited for all of
    /// it (the writer thread is the one connection that writes), and market orders went past their deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_prune_on_sqlite_does_not_hold_up_a_deliverys_sending_mark() {
        use std::time::{Duration, Instant};
        let dir = temp_dir("long-prune");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        rusqlite::Connection::open(dir.join("t.db"))
            .unwrap()
            .execute_batch(
                "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 1500000)
                 INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 SELECT 1000 + n, 's' || (n % 50), 'INFO', printf('%.200c', 'x'), 'processed', 200, '[]' FROM g",
            )
            .unwrap();
        let writer = store.writer();
        let retention = Retention { max_age_ms: 86_400_000, max_rows_per_strategy: 100_000 };
        let windows = Windows { dedup_ms: 60_000, rate_ms: 60_000 };
        let pruning = {
            let writer = writer.clone();
            tokio::spawn(async move {
                let began = Instant::now();
                writer.prune(retention, windows, crate::app::now_ms()).await.unwrap();
                began.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let began = Instant::now();
        writer.sending(1).await.unwrap();
        let waited = began.elapsed();
        let prune_took = pruning.await.unwrap();
        println!("prune took {prune_took:?}; the sending mark waited {waited:?}");
        let left: i64 = rusqlite::Connection::open(dir.join("t.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM logs", [], |r| r.get(0))
            .unwrap();
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(left, 0, "every row was past the retention");
        assert!(
            waited < Duration::from_secs(1),
            "a delivery's `sending` mark waited {waited:?} behind the prune (which took {prune_took:?})"
        );
    }

    /// The alerts a failed order's retry is judged against (`alerts_since`): every alert of the strategy from a time
    /// on, by time with how many distinct alerts came then, whatever it was decided into but a duplicate, and not the
    /// rows a delivery or a sync writes (`[]` alerts under `processed`): the same answer from SQLite and PostgreSQL.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_alerts_since_a_failed_row_are_the_same_on_both_databases() {
        const ROWS: &str = "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts) VALUES
            (900, 's', 'INFO', 'earlier', 'processed', 200, '[{\"a\":0}]'),
            (1000, 's', 'INFO', 'its own', 'processed', 200, '[{\"a\":1}]'),
            (1000, 's', 'WARN', 'its own, a second record', 'processed', 200, '[{\"a\":1}]'),
            (1500, 's', 'ERROR', 'a delivery failed', 'processed', 200, '[]'),
            (1600, 's', 'INFO', 'a resend', 'duplicate', 200, '[{\"a\":1}]'),
            (1700, 't', 'INFO', 'another strategy', 'rejected', 200, '[{\"a\":2}]'),
            (2000, 's', 'WARN', 'nothing to close', 'rejected', 200, '[{\"a\":3}]'),
            (3000, 's', 'INFO', 'same ms, one', 'processed', 200, '[{\"a\":4}]'),
            (3000, 's', 'INFO', 'same ms, two', 'rejected', 200, '[{\"a\":5}]')";
        // Its alerts by their log rows' ids, counted from the first row's (`first`).
        let want = |first: i64| {
            let span = |log_id: i64, last_log_id: i64, ts_ms| AlertSpan {
                log_id: first + log_id,
                last_log_id: first + last_log_id,
                ts_ms,
                by_time: false,
            };
            vec![span(1, 2, 1000), span(6, 6, 2000), span(7, 7, 3000), span(8, 8, 3000)]
        };
        let dir = temp_dir("alerts-since");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        rusqlite::Connection::open(dir.join("t.db")).unwrap().execute_batch(ROWS).unwrap();
        let got = store.reader().alerts_since("s", 1000, None).unwrap();
        assert_eq!(got, want(1), "SQLite");
        assert_eq!(store.reader().alerts_since("s", 1000, Some(2)).unwrap(), want(1), "SQLite, from its own row");
        assert_eq!(store.reader().alerts_since("s", 5000, Some(7)).unwrap(), want(1)[1..], "SQLite, by log row");
        // Told by log rows: the row's own alert never counts, the next one does.
        assert_eq!(later_alert(&got, 1000, Some(2)), Some(2000));
        assert_eq!(later_alert(&got, 2000, Some(7)), Some(3000));
        assert_eq!(later_alert(&got, 3000, Some(8)), Some(3000), "decided after it in its millisecond");
        assert_eq!(later_alert(&got, 3000, Some(9)), None, "the last one");
        // Without its log row (a row of an older version), by time.
        assert_eq!(later_alert(&got, 1000, None), Some(2000));
        assert_eq!(later_alert(&got, 2000, None), Some(3000));
        assert_eq!(later_alert(&got[2..], 3000, None), Some(3000), "another alert in the same millisecond");
        assert_eq!(later_alert(&got[..1], 1000, None), None, "its own alert alone");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        let client = store.shared().unwrap().client().await.unwrap();
        client.batch_execute(ROWS).await.unwrap();
        let first: i64 = client.query_one("SELECT min(id) FROM logs", &[]).await.unwrap().get(0);
        let reader = store.reader();
        let got = tokio::task::spawn_blocking(move || reader.alerts_since("s", 1000, None).unwrap()).await.unwrap();
        assert_eq!(got, want(first), "PostgreSQL");
        let reader = store.reader();
        let own = Some(first + 6);
        let got = tokio::task::spawn_blocking(move || reader.alerts_since("s", 5000, own).unwrap()).await.unwrap();
        assert_eq!(got, want(first)[1..], "PostgreSQL, by log row");
        store.close().await.unwrap();
    }

    /// Which alert came after an outbox row's is told by log row ids, not by the times servers stamped: a CLOSE
    /// decided after the entry on a server whose clock is 0.5 s behind is later all the same, and an alert decided
    /// before it on a server ahead is not. A row whose own log row the cap deleted is told by time, and by ids.
    #[test]
    fn a_later_alert_is_told_by_its_log_rows_whatever_the_clocks() {
        let span = |log_id, last_log_id, ts_ms| AlertSpan { log_id, last_log_id, ts_ms, by_time: false };
        let own = span(10, 12, 1000);
        let behind = span(13, 13, 700);
        let ahead_before = span(8, 9, 1300);
        assert_eq!(later_alert(&[ahead_before, own, behind], 1000, Some(10)), Some(700));
        assert_eq!(later_alert(&[ahead_before, own], 1000, Some(10)), None);
        // Its own alert's first row capped (its rows from 11 on left): alone in its millisecond, it is its own.
        let capped = span(11, 12, 1000);
        assert_eq!(later_alert(&[capped], 1000, Some(10)), None);
        assert_eq!(later_alert(&[capped, behind], 1000, Some(10)), Some(700));
    }

    /// The alerts an entry waiting in the outbox is checked against (`decided_alerts_since`): the strategy's alerts
    /// from a time on that were decided (processed or rejected), one each with its first and last log rows, oldest first; not a
    /// duplicate, an error, an inactive strategy's, nor the rows a delivery or a sync writes: the same answer from
    /// SQLite and PostgreSQL.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_decided_alerts_since_an_entry_are_the_same_on_both_databases() {
        const ROWS: &str = "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts) VALUES
            (900, 's', 'INFO', 'earlier', 'processed', 200, '[{\"a\":0}]'),
            (1000, 's', 'INFO', 'its own', 'processed', 200, '[{\"a\":1}]'),
            (1000, 's', 'WARN', 'its own, a second record', 'processed', 200, '[{\"a\":1}]'),
            (1500, 's', 'ERROR', 'a delivery failed', 'processed', 200, '[]'),
            (1600, 's', 'INFO', 'a resend', 'duplicate', 200, '[{\"a\":1}]'),
            (1650, 's', 'WARN', 'too many', 'error', 429, '[{\"a\":6}]'),
            (1660, 's', 'WARN', 'paused', 'inactive', 200, '[{\"a\":7}]'),
            (1700, 't', 'INFO', 'another strategy', 'rejected', 200, '[{\"a\":2}]'),
            (2000, 's', 'WARN', 'nothing to close', 'rejected', 200, '[{\"a\":3}]'),
            (2000, 's', 'WARN', 'nothing to close, again', 'rejected', 200, '[{\"a\":3}]'),
            (3000, 's', 'INFO', 'same ms, one', 'processed', 200, '[{\"a\":4}]'),
            (3000, 's', 'INFO', 'same ms, two', 'rejected', 200, '[{\"a\":5}]')";
        let want = |ids: [i64; 4]| {
            let alert = |(log_id, last_log_id), ts_ms, a: u8| DecidedAlert {
                log_id,
                last_log_id,
                ts_ms,
                alerts: format!("[{{\"a\":{a}}}]"),
            };
            let [one, three, four, five] = ids;
            vec![
                alert((one, one + 1), 1000, 1),
                alert((three, three + 1), 2000, 3),
                alert((four, four), 3000, 4),
                alert((five, five), 3000, 5),
            ]
        };
        let dir = temp_dir("decided-since");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        rusqlite::Connection::open(dir.join("t.db")).unwrap().execute_batch(ROWS).unwrap();
        assert_eq!(store.reader().decided_alerts_since("s", 1000, None).unwrap(), want([2, 9, 11, 12]), "SQLite");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        let client = store.shared().unwrap().client().await.unwrap();
        client.batch_execute(ROWS).await.unwrap();
        let first: i64 = client.query_one("SELECT min(id) FROM logs", &[]).await.unwrap().get(0);
        let reader = store.reader();
        let got =
            tokio::task::spawn_blocking(move || reader.decided_alerts_since("s", 1000, None).unwrap()).await.unwrap();
        assert_eq!(got, want([1, 8, 10, 11].map(|i| first + i)), "PostgreSQL");
        store.close().await.unwrap();
    }

    /// Each outbox row keeps its alert's first log row (`alert_log`), the id its alert has among the decided
    /// alerts, on both databases: a dispatcher knows its own alert exactly, whatever else came in its millisecond.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_outbox_row_keeps_its_alerts_first_log_row_on_both_databases() {
        let alert = |a: u8, records: usize| LogEntry {
            ts_ms: 1000,
            strategy: "s".into(),
            decision: "processed",
            http_status: 200,
            alerts: format!("[{{\"a\":{a}}}]"),
            records: vec![(strategy_webhook::Level::Info, "placed".into()); records],
        };
        let mark = || Mark { strategy: "s".into(), ts_ms: 1000, key: None };
        async fn write(writer: &Writer, alert: impl Fn(u8, usize) -> LogEntry, mark: impl Fn() -> Mark) {
            // Two alerts in one millisecond, of three log rows each, then a row whose alert wrote none.
            writer
                .outbox(mark(), vec![OutboxRow::sample(0, "place", "pending", 1000)], Some(alert(1, 3)))
                .await
                .unwrap();
            let two =
                vec![OutboxRow::sample(0, "cancel", "pending", 1000), OutboxRow::sample(0, "place", "pending", 1000)];
            writer.outbox(mark(), two, Some(alert(2, 3))).await.unwrap();
            writer.outbox(mark(), vec![OutboxRow::sample(0, "place", "pending", 1000)], None).await.unwrap();
        }
        let check = |reader: Reader, db: &str| {
            let decided = reader.decided_alerts_since("s", 1000, None).unwrap();
            let rows: Vec<Option<i64>> = reader.open_rows("s", "b", 10).unwrap().iter().map(|r| r.alert_log).collect();
            let ids: Vec<i64> = decided.iter().map(|d| d.log_id).collect();
            assert_eq!(rows, [Some(ids[0]), Some(ids[1]), Some(ids[1]), None], "{db}: {decided:?}");
        };
        let dir = temp_dir("alert-log");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        write(&store.writer(), alert, mark).await;
        check(store.reader(), "SQLite");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        write(&store.writer(), alert, mark).await;
        let reader = store.reader();
        tokio::task::spawn_blocking(move || check(reader, "PostgreSQL")).await.unwrap();
        store.close().await.unwrap();
    }

    /// A `cancel: true` entry (its alert `[CANCEL LONG, OPEN LONG]`) waits in the outbox while the strategy writes on;
    /// its log cap deletes the strategy's oldest rows one by one, the first of its own alert's rows among them. The
    /// decided alerts then name that alert by its second row (`min(id)` of what is left), no longer the row's
    /// `alert_log`: its own `CANCEL LONG` was taken for a later alert, and the entry was never sent. An `alert_log`
    /// no decided alert's rows span any more is not known, and its alert is told as before (alone in its millisecond).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_whose_alerts_first_log_row_was_capped_is_not_overtaken_by_its_own_alert() {
        use strategy_webhook::model::{AssetClass, Direction, InstrumentKey};
        let reversal = r#"[{"action":"CANCEL","instrument":"AAPL","direction":"long"},{"action":"OPEN","instrument":"AAPL","direction":"long"}]"#;
        let alert = LogEntry {
            ts_ms: 1000,
            strategy: "s".into(),
            decision: "processed",
            http_status: 200,
            alerts: reversal.into(),
            records: vec![(strategy_webhook::Level::Info, "placed".into()); 3],
        };
        let dir = temp_dir("alert-log-cap");
        let caps = RowCaps { log_rows: 5, outbox_rows: 100 };
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, caps).unwrap();
        let writer = store.writer();
        let mark = Mark { strategy: "s".into(), ts_ms: 1000, key: None };
        writer.outbox(mark, vec![OutboxRow::sample(0, "place", "pending", 1000)], Some(alert)).await.unwrap();
        // Three more rows of the strategy (its other requests, refused alerts): the cap of 5 drops the oldest one.
        for i in 0..3 {
            let e = LogEntry {
                ts_ms: 2000 + i,
                strategy: "s".into(),
                decision: "duplicate",
                http_status: 200,
                alerts: "[]".into(),
                records: vec![(strategy_webhook::Level::Info, "dup".into())],
            };
            writer.log(Some(e), None).await;
        }
        writer.barrier().await.unwrap();
        let reader = store.reader();
        let (row, decided) = tokio::task::spawn_blocking(move || {
            (reader.open_rows("s", "b", 10).unwrap().remove(0), reader.decided_alerts_since("s", 1000, None).unwrap())
        })
        .await
        .unwrap();
        assert_eq!(decided.len(), 1, "its own alert is still there: {decided:?}");
        let aapl = InstrumentKey::new("AAPL", AssetClass::Equity);
        let got = crate::dispatch::overtaking(
            None,
            &aapl,
            AssetClass::Equity,
            Direction::Long,
            row.created_ms,
            row.alert_log,
            &decided,
        );
        assert_eq!(
            got.map(|o| o.log_id),
            None,
            "the entry was overtaken by its own alert (row alert_log {:?}, decided {decided:?})",
            row.alert_log
        );
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Two servers rotating one strategy's token at once both replace the token they know (the same one): the
    /// second commit overwrote the first's new token, which was answered 200 to its operator but never answered an
    /// alert (nor was it retired). On the shared database a rotation replaces only the token it knows to be current;
    /// the other is refused as rotated meanwhile, and the first's token stands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rotation_of_a_token_another_server_has_rotated_meanwhile_is_refused() {
        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        let writer = store.writer();
        writer.set_token("s", "first", "file", 1).await.unwrap();
        let second = writer.set_token("s", "second", "file", 2).await;
        let reader = store.reader();
        let overrides = tokio::task::spawn_blocking(move || reader.token_overrides().unwrap()).await.unwrap();
        assert!(second.is_err(), "a rotation of a token rotated meanwhile was stored: now {overrides:?}");
        assert_eq!(overrides.get("s").map(String::as_str), Some("first"));
        // Rotating the token it now knows works.
        writer.set_token("s", "third", "first", 3).await.unwrap();
        let reader = store.reader();
        let retired = tokio::task::spawn_blocking(move || reader.retired_tokens().unwrap()).await.unwrap();
        assert!(retired.contains_key("first") && retired.contains_key("file") && !retired.contains_key("second"));
        store.close().await.unwrap();
    }

    /// A row marked `sending` whose send met the bot's stopped session is given back unsent (`pending`), on both
    /// databases; a row not `sending` stays as it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_given_back_unsent_is_pending_again_on_both_databases() {
        async fn check(writer: Writer, reader: Reader, db: &str) {
            let mark = || Mark { strategy: "s".into(), ts_ms: 1000, key: None };
            let rows =
                vec![OutboxRow::sample(0, "place", "pending", 1000), OutboxRow::sample(0, "place", "pending", 1000)];
            writer.outbox(mark(), rows, None).await.unwrap();
            let read = || {
                let reader = reader.clone();
                tokio::task::spawn_blocking(move || reader.open_rows("s", "b", 10).unwrap())
            };
            let ids: Vec<i64> = read().await.unwrap().iter().map(|r| r.id).collect();
            writer.sending(ids[0]).await.unwrap();
            writer.sending(ids[1]).await.unwrap();
            writer.unsent(ids[0], None).await.unwrap();
            let got: Vec<String> = read().await.unwrap().into_iter().map(|r| r.status).collect();
            assert_eq!(got, ["pending", "sending"], "{db}");
        }
        let dir = temp_dir("unsent");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        check(store.writer(), store.reader(), "SQLite").await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();

        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        check(store.writer(), store.reader(), "PostgreSQL").await;
        store.close().await.unwrap();
    }

    /// A PostgreSQL and a store on it whose `logs` table refuses every row until `DELETE FROM refusing`, with a
    /// client to the database.
    async fn refusing_logs() -> (pg::test_harness::Postgres, Store, deadpool_postgres::Object) {
        let server = tokio::task::spawn_blocking(pg::test_harness::Postgres::start).await.unwrap();
        let store = Store::open_postgres(&server.url(), 2, RowCaps::default()).await.unwrap();
        let c = store.shared().unwrap().client().await.unwrap();
        c.batch_execute(
            "CREATE TABLE refusing (refuse BOOLEAN); INSERT INTO refusing VALUES (TRUE);
             CREATE FUNCTION refuse_logs() RETURNS trigger LANGUAGE plpgsql AS $$
                 BEGIN IF EXISTS (SELECT 1 FROM refusing) THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$;
             CREATE TRIGGER refuse_logs BEFORE INSERT ON logs FOR EACH ROW EXECUTE FUNCTION refuse_logs();",
        )
        .await
        .unwrap();
        (server, store, c)
    }

    /// PostgreSQL refused the commit of log rows nobody waits for (the sync's "bot stopped" ERROR row, told
    /// once): they were dropped, where the SQLite writer keeps them and commits them on their own later. The
    /// PostgreSQL writer does the same now, once it is sure the refused commit did not land.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn log_rows_of_a_refused_commit_are_stored_later_on_postgresql() {
        let (_server, store, c) = refusing_logs().await;
        let logs = || async { c.query_one("SELECT count(*) FROM logs", &[]).await.unwrap().get::<_, i64>(0) };
        store.writer().log(Some(entry("s", 1, "bot b is stopped and sends nothing")), None).await;
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        assert_eq!(logs().await, 0, "refused");
        c.batch_execute("DELETE FROM refusing").await.unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while logs().await == 0 {
            assert!(std::time::Instant::now() < deadline, "the row of the refused commit was never stored");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(logs().await, 1, "stored once");
        drop(c);
        store.close().await.unwrap();
    }

    /// The carried rows were tried again only when no new job was waiting: under a steady stream of log rows the
    /// refused commit's row stayed out of the Logs for as long as the stream lasted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn log_rows_of_a_refused_commit_are_stored_later_under_load_on_postgresql() {
        let (_server, store, c) = refusing_logs().await;
        store.writer().log(Some(entry("s", 1, "bot b is stopped and sends nothing")), None).await;
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        c.batch_execute("DELETE FROM refusing").await.unwrap();
        let writer = store.writer();
        let flood = tokio::spawn(async move {
            let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
            let mut n = 0;
            while std::time::Instant::now() < until {
                n += 1;
                writer.log(Some(entry("busy", n, "busy")), None).await;
                tokio::task::yield_now().await;
            }
        });
        let stopped = || async {
            c.query_one("SELECT count(*) FROM logs WHERE strategy = 's'", &[]).await.unwrap().get::<_, i64>(0)
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
        while stopped().await == 0 {
            assert!(std::time::Instant::now() < deadline, "the refused commit's row waited for the stream to end");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        flood.await.unwrap();
        assert_eq!(stopped().await, 1);
        drop(c);
        store.close().await.unwrap();
    }

    #[tokio::test]
    async fn log_and_outbox_caps_hold_as_rows_are_written() {
        let dir = temp_dir("caps");
        let caps = RowCaps { log_rows: 5, outbox_rows: 3 };
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, caps).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        for i in 0..12 {
            writer.log(Some(entry("s", i, &format!("m{i}"))), None).await;
        }
        writer.log(Some(entry("other", 1, "kept")), None).await;
        // An awaited write is committed with (or after) everything queued before it.
        writer.set_token("s", "t", "old", 1).await.unwrap();
        let q = LogQuery { limit: 100, ..LogQuery::default() };
        let kept: Vec<String> = reader.logs("s", &q).unwrap().into_iter().map(|r| r.message).collect();
        assert_eq!(kept, ["m11", "m10", "m9", "m8", "m7"], "the newest 5, with no prune run");
        assert_eq!(reader.logs("other", &q).unwrap().len(), 1);

        // Rows still to send are never deleted for the cap.
        let mark = |ts| Mark { strategy: "s".into(), ts_ms: ts, key: None };
        writer.outbox(mark(1), (0..5).map(|n| row("s", n)).collect(), None).await.unwrap();
        assert_eq!(reader.strategy_outbox("s", 100).unwrap().len(), 5);
        let ids: Vec<i64> = reader.strategy_outbox("s", 100).unwrap().iter().map(|(r, _)| r.id).collect();
        for id in ids.iter().take(4) {
            let log = Some(entry("s", 2, "sent"));
            let d = Delivered { id: *id, status: "done", result: "ok".into(), log, state: None };
            writer.delivered_run(Arc::from([d])).await.unwrap();
        }
        writer.outbox(mark(3), vec![row("s", 9)], None).await.unwrap();
        let left = reader.strategy_outbox("s", 100).unwrap();
        assert_eq!(left.len(), 3, "{left:?}");
        // The newest row, and the one still pending, are among those kept.
        assert!(left.iter().any(|(r, _)| r.client_order_id == "c9"));
        assert!(left.iter().any(|(r, _)| r.status == "pending" && r.client_order_id == "c0"));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Once a prune has told the writer its windows, each commit that stores dedup keys deletes expired ones too,
    /// up to twice as many (and 16) as it stored: the oldest first, never a key still in its window, and no more
    /// than that bound however many have expired.
    #[tokio::test]
    async fn commits_that_store_keys_delete_expired_ones_a_few_at_a_time() {
        let dir = temp_dir("keys-as-they-come");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let now = crate::app::now_ms();
        let key = |i: usize| Some(format!("{i:064x}"));
        // 100 keys claimed long ago, 10 still in the window, before the writer knows the windows.
        for i in 0..110 {
            let ts = if i < 100 { now - 3_600_000 } else { now - 1_000 };
            writer.outbox(Mark { strategy: "s".into(), ts_ms: ts, key: key(i) }, Vec::new(), None).await.unwrap();
        }
        assert_eq!(reader.dedup_keys(0).unwrap().len(), 110, "nothing deleted before the windows are known");
        // A prune that deletes nothing (its time is long ago) tells the writer the windows.
        let w = Windows { dedup_ms: 300_000, rate_ms: 60_000 };
        writer.prune_windows(Retention { max_age_ms: i64::MAX, max_rows_per_strategy: u64::MAX }, w, 0).await.unwrap();
        assert_eq!(reader.dedup_keys(0).unwrap().len(), 110);
        // One key stored: up to 2 × 1 + 16 = 18 of the expired ones go with it.
        writer.outbox(Mark { strategy: "s".into(), ts_ms: now, key: key(200) }, Vec::new(), None).await.unwrap();
        assert_eq!(reader.dedup_keys(0).unwrap().len(), 111 - 18);
        // More commits take the rest, and none of the keys still in the window.
        for i in 0..10 {
            writer
                .outbox(Mark { strategy: "s".into(), ts_ms: now, key: key(300 + i) }, Vec::new(), None)
                .await
                .unwrap();
        }
        let left: Vec<i64> = reader.dedup_keys(0).unwrap().into_iter().map(|(_, _, t)| t).collect();
        assert_eq!(left.len(), 21, "the 10 in the window and the 11 new: {left:?}");
        assert!(left.iter().all(|&t| t >= now - 1_000));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A strategy at its cap is taken down by a 1,024th of the cap at once, so that rows written at the cap are
    /// not each paid for with a delete; the cap itself holds after every commit, and the rows kept are always
    /// the newest.
    #[tokio::test]
    async fn a_strategy_at_its_cap_sheds_its_oldest_rows_a_few_at_a_time() {
        let dir = temp_dir("caps-headroom");
        let caps = RowCaps { log_rows: 2048, outbox_rows: 3 };
        assert_eq!(cap_headroom(caps.log_rows), 2);
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, caps).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let q = LogQuery { limit: 10_000, ..LogQuery::default() };
        let mut next = 0;
        let mut counts = Vec::new();
        for n in [2048, 1, 1, 1, 1, 1, 1] {
            for i in next..next + n {
                writer.log(Some(entry("s", i as i64, &format!("m{i}"))), None).await;
            }
            next += n;
            // Awaited: what was queued before is committed with it.
            writer.set_token("s", "t", "old", 1).await.unwrap();
            let kept: Vec<String> = reader.logs("s", &q).unwrap().into_iter().map(|r| r.message).collect();
            assert!(kept.len() <= 2048, "over the cap: {}", kept.len());
            assert_eq!(kept[0], format!("m{}", next - 1), "the newest is kept");
            counts.push(kept.len());
        }
        // Up to the cap every row stays; past it the strategy drops to 2,046 and fills up again, 2 at a time.
        assert_eq!(counts, [2048, 2046, 2047, 2048, 2046, 2047, 2048]);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The outbox's cap sheds a 1,024th of the cap beyond what is over it, as the logs' does, and only finished
    /// rows: rows still to send stay whatever their age.
    #[tokio::test]
    async fn an_outbox_at_its_cap_sheds_finished_rows_a_few_at_a_time_and_keeps_pending_ones() {
        let dir = temp_dir("outbox-headroom");
        let caps = RowCaps { log_rows: 100_000, outbox_rows: 2048 };
        assert_eq!(cap_headroom(caps.outbox_rows), 2);
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, caps).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let mark = |ts| Mark { strategy: "s".into(), ts_ms: ts, key: None };
        writer.outbox(mark(1), (0..2048).map(|n| row("s", n)).collect(), None).await.unwrap();
        let rows = reader.strategy_outbox("s", 10_000).unwrap();
        assert_eq!(rows.len(), 2048, "at the cap, nothing is deleted");
        // All but the two oldest are finished.
        let oldest: Vec<i64> = {
            let mut ids: Vec<i64> = rows.iter().map(|(r, _)| r.id).collect();
            ids.sort_unstable();
            ids
        };
        let done: Vec<Delivered> = oldest[2..]
            .iter()
            .map(|&id| Delivered { id, status: "done", result: "ok".into(), log: None, state: None })
            .collect();
        writer.delivered_run(Arc::from(done)).await.unwrap();
        // One row over the cap: it and two more go, the oldest finished ones, never a pending one.
        writer.outbox(mark(2), vec![row("s", 5000)], None).await.unwrap();
        let left = reader.strategy_outbox("s", 10_000).unwrap();
        assert_eq!(left.len(), 2046);
        let ids: std::collections::HashSet<i64> = left.iter().map(|(r, _)| r.id).collect();
        assert!(ids.contains(&oldest[0]) && ids.contains(&oldest[1]), "the pending rows are kept");
        assert!(!ids.contains(&oldest[2]) && !ids.contains(&oldest[3]) && !ids.contains(&oldest[4]));
        assert!(ids.contains(&oldest[5]));
        assert!(left.iter().any(|(r, _)| r.client_order_id == "c5000"), "the new row is kept");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Each transaction is timed, and so is the queueing of a write someone waits for: the two parts of an alert's
    /// commit time an operator reads apart in `/metrics`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writers_transactions_and_awaited_writes_are_timed() {
        let count = |name: &str| -> u64 {
            let text = crate::metrics::render(&[], 0);
            let line =
                text.lines().find(|l| l.starts_with(&format!("{name}_count "))).unwrap_or_else(|| panic!("{text}"));
            line.rsplit(' ').next().unwrap().parse().unwrap()
        };
        let dir = temp_dir("timed");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (transactions, waits) = (count("swh_store_transaction_seconds"), count("swh_store_queue_seconds"));
        for _ in 0..3 {
            let op = Op::BotState { strategy: "s".into(), bot: "b".into(), state: "{}".into(), held: None };
            store.writer().queue(op).await.unwrap().await.unwrap().unwrap();
        }
        // Other tests in this process commit too: at least these three.
        assert!(count("swh_store_transaction_seconds") >= transactions + 3, "one transaction each, awaited in turn");
        assert!(count("swh_store_queue_seconds") >= waits + 3);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Under writes that never pause the WAL stays near SQLite's checkpoint threshold instead of growing with
    /// everything written. (A passive checkpoint on a thread of its own, tried to keep checkpoints out of the
    /// commits, let it grow to 180 MB here and 1.4 GB in a minute of the load benchmark: the writer starts the
    /// WAL over only when a checkpoint has caught up as it begins a transaction, which busy writes never allow.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_wal_stays_bounded_under_writes_that_never_pause() {
        let dir = temp_dir("checkpoint-busy");
        let db = dir.join("t.db");
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let writer = store.writer();
        let wal = dir.join("t.db-wal");
        let size = |p: &Path| std::fs::metadata(p).map_or(0, |m| m.len());
        // Log rows for several checkpoint periods, the next ones always queued behind the commit in progress:
        // the writer never idles.
        let text = "x".repeat(4000);
        let mut largest_wal = 0;
        let (start, mut written) = (std::time::Instant::now(), 0u64);
        let mut round = 0;
        let mut committed = None;
        while start.elapsed() < std::time::Duration::from_secs(2) {
            for i in 0..64 {
                writer.log(Some(entry("s", round * 1000 + i, &text)), None).await;
            }
            written += 64 * 4000;
            round += 1;
            // Wait for the commit before last, never for the one just queued.
            let op = Op::BotState { strategy: "s".into(), bot: "b".into(), state: "{}".into(), held: None };
            if let Some(done) = committed.replace(writer.queue(op).await.unwrap()) {
                done.await.unwrap().unwrap();
            }
            largest_wal = largest_wal.max(size(&wal));
        }
        assert!(written > 16 << 20, "only {written} bytes written");
        // SQLite's automatic checkpoint: 1,000 pages of 4 KiB, overshot by at most a batch's commit.
        let bound: u64 = 1000 * 4096;
        assert!(largest_wal < 4 * bound + (8 << 20), "the WAL grew to {largest_wal} bytes (bound {bound})");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A commit that failed (another process holding the database past the busy timeout, a full disk for a
    /// moment) answered the alert it held, but dropped the log rows queued in the same batch without a trace: a
    /// rejection's WARN row, or the row saying a 500's alert was not stored. Those are committed again on their own
    /// once the database takes writes, and a later alert's commit is not held up by them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn log_rows_of_a_failed_commit_are_stored_once_the_database_takes_writes() {
        let dir = temp_dir("carried");
        let db = dir.join("t.db");
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        // Every write to the logs fails for a moment.
        let other = rusqlite::Connection::open(&db).unwrap();
        other.execute_batch("ALTER TABLE logs RENAME TO logs_away").unwrap();
        writer.log(Some(entry("s", 1_000, "a rejection's row")), None).await;
        let mark = Mark { strategy: "s".into(), ts_ms: 1_001, key: Some("k1".into()) };
        let failed = writer.outbox(mark, vec![row("s", 1)], Some(entry("s", 1_001, "the alert's row"))).await;
        assert!(failed.is_err(), "the batch fails while the table is away");
        other.execute_batch("ALTER TABLE logs_away RENAME TO logs").unwrap();
        // A later alert is committed at once, beside the rows kept from the failed batch.
        let mark = Mark { strategy: "s".into(), ts_ms: 1_002, key: Some("k2".into()) };
        writer.outbox(mark, vec![row("s", 2)], Some(entry("s", 1_002, "a later alert's row"))).await.unwrap();
        let q = LogQuery { limit: 100, ..LogQuery::default() };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let messages: Vec<String> = reader.logs("s", &q).unwrap().into_iter().map(|r| r.message).collect();
            if messages.iter().any(|m| m == "a rejection's row") {
                assert!(messages.iter().any(|m| m == "a later alert's row"), "{messages:?}");
                assert!(!messages.iter().any(|m| m == "the alert's row"), "the failed alert's own rows went with it");
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the rejection's row was dropped: {messages:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A rejection's rows queued in turn (`Writer::log_in_turn`, `App::record_in_turn`) are kept past a failed commit
    /// and stored later, as `Writer::log`'s: queued with an answer nobody read, the failed commit dropped them, and
    /// the rejected alert was gone from the Logs and from `decided_alerts_since` (an entry it overtook was sent).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rejection_queued_in_turn_is_carried_past_a_failed_commit() {
        let dir = temp_dir("carried-in-turn");
        let db = dir.join("t.db");
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let other = rusqlite::Connection::open(&db).unwrap();
        other.execute_batch("ALTER TABLE logs RENAME TO logs_away").unwrap();
        writer.log_in_turn(Some(entry("s", 1_000, "a rejection's row")), None);
        let mark = Mark { strategy: "s".into(), ts_ms: 1_001, key: Some("k1".into()) };
        let failed = writer.outbox(mark, vec![row("s", 1)], Some(entry("s", 1_001, "the alert's row"))).await;
        assert!(failed.is_err(), "the batch fails while the table is away");
        other.execute_batch("ALTER TABLE logs_away RENAME TO logs").unwrap();
        let mark = Mark { strategy: "s".into(), ts_ms: 1_002, key: Some("k2".into()) };
        writer.outbox(mark, vec![row("s", 2)], Some(entry("s", 1_002, "a later alert's row"))).await.unwrap();
        let q = LogQuery { limit: 100, ..LogQuery::default() };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let messages: Vec<String> = reader.logs("s", &q).unwrap().into_iter().map(|r| r.message).collect();
            if messages.iter().any(|m| m == "a rejection's row") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the rejection's row was dropped: {messages:?}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An alert whose commit failed is logged "not stored" (`App::hand_off_queued`, app.rs) through the plain queue,
    /// after the commit of an alert decided after it: its row's id is above the later alert's, so it is told by its
    /// time. By ids, the retry of the later alert's failed order was refused as overtaken by the earlier one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_alerts_not_stored_row_is_not_a_later_alert() {
        let dir = temp_dir("not-stored-later");
        let db = dir.join("t.db");
        let store = Store::open_with_caps(&db, Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let processed = |ts_ms: i64, alerts: &str| LogEntry {
            ts_ms,
            strategy: "s".into(),
            decision: "processed",
            http_status: 200,
            alerts: alerts.into(),
            records: vec![(strategy_webhook::Level::Info, "processed".into())],
        };
        let other = rusqlite::Connection::open(&db).unwrap();
        // Alert A (received at 1,000) fails its commit.
        other.execute_batch("ALTER TABLE outbox RENAME TO outbox_away").unwrap();
        let mark = Mark { strategy: "s".into(), ts_ms: 1_000, key: Some("k1".into()) };
        let a = writer.outbox(mark, vec![row("s", 1_000)], Some(processed(1_000, r#"[{"a":1}]"#))).await;
        let err = a.expect_err("the outbox is away");
        other.execute_batch("ALTER TABLE outbox_away RENAME TO outbox").unwrap();
        // Alert B, decided after A (received at 1,001), is committed (queued in turn before A's failure was known).
        let mark = Mark { strategy: "s".into(), ts_ms: 1_001, key: Some("k2".into()) };
        writer.outbox(mark, vec![row("s", 1_001)], Some(processed(1_001, r#"[{"a":2}]"#))).await.unwrap();
        // What `App::hand_off_queued` then queues for A.
        writer.log(Some(LogEntry::not_stored("s", Some(r#"[{"a":1}]"#.into()), &err, 1_000)), None).await;
        writer.barrier().await.unwrap();
        let b = reader.open_rows("s", "b", 10).unwrap().remove(0);
        assert_eq!(b.created_ms, 1_001);
        let alerts = reader.alerts_since("s", b.created_ms, b.alert_log).unwrap();
        assert_eq!(
            later_alert(&alerts, b.created_ms, b.alert_log),
            None,
            "A, received and decided before B, counts as a later alert for B's retry: {alerts:?} own {:?}",
            b.alert_log
        );
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Jobs queued in turn are committed in the order they were queued, also when one has to wait outside the queue
    /// (held back here, as a full queue holds it): a later one that finds room waits behind it, and so does the stop.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_queued_in_turn_keep_their_order_when_one_waits_outside_the_queue() {
        let dir = temp_dir("in-turn");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let mark = |ts| Mark { strategy: "s".into(), ts_ms: ts, key: None };
        let held = std::time::Duration::from_millis(200);
        let mut first = writer.queue_outbox(mark(1), vec![row("s", 1)], None, held).unwrap();
        let second = writer.queue_outbox(mark(2), vec![row("s", 2)], None, std::time::Duration::ZERO).unwrap();
        second.await.unwrap().unwrap();
        assert!(matches!(first.try_recv(), Ok(Ok(()))), "the first was committed before the second");
        let last = writer.queue_outbox(mark(3), vec![row("s", 3)], None, held).unwrap();
        store.close().await.unwrap();
        last.await.unwrap().unwrap();
        let mut rows: Vec<(i64, String)> =
            reader.strategy_outbox("s", 10).unwrap().into_iter().map(|(r, _)| (r.id, r.client_order_id)).collect();
        rows.sort_unstable();
        let coids: Vec<&str> = rows.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(coids, ["c1", "c2", "c3"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Log rows wait a little for company before their commit; a job someone awaits (an alert's) ends that wait
    /// as it arrives instead of waiting it out.
    #[test]
    fn a_job_someone_awaits_ends_the_wait_for_log_rows() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut batch = vec![Job::new(Op::Log(None, None), None)];
        let sender = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            tx.blocking_send(Job::new(Op::Log(None, None), None)).unwrap();
            let (ack, _done) = oneshot::channel();
            tx.blocking_send(Job::new(Op::Close, Some(ack))).unwrap();
            // Kept open: a closed channel must not be what ends the wait.
            std::thread::sleep(std::time::Duration::from_millis(300));
        });
        let start = std::time::Instant::now();
        gather(&mut rx, &mut batch, std::time::Duration::from_secs(30));
        let took = start.elapsed();
        assert!(took < std::time::Duration::from_secs(1), "waited {took:?}");
        assert_eq!(batch.len(), 3, "the log row that came first joined too");
        // With no one waiting, the rows wait the whole time for company.
        let (_tx2, mut rx2) = mpsc::channel::<Job>(16);
        let mut alone = vec![Job::new(Op::Log(None, None), None)];
        let start = std::time::Instant::now();
        gather(&mut rx2, &mut alone, std::time::Duration::from_millis(20));
        assert!(start.elapsed() >= std::time::Duration::from_millis(20));
        sender.join().unwrap();
    }

    #[tokio::test]
    async fn a_refusal_window_is_one_row_updated_in_place() {
        let dir = temp_dir("refusals");
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        let (writer, reader) = (store.writer(), store.reader());
        let r = |count, update| Refusals { strategy: "s".into(), since_ms: 7, count, limit: 60, update, status: 429 };
        writer.refusals(r(1, false)).await;
        writer.log(Some(entry("s", 8, "between")), None).await;
        writer.refusals(r(61, true)).await;
        writer.set_token("s", "t", "old", 1).await.unwrap();
        let rows = reader.logs("s", &LogQuery { limit: 100, ..LogQuery::default() }).unwrap();
        let refused: Vec<_> = rows.iter().filter(|r| r.http_status == 429).collect();
        assert_eq!(refused.len(), 1, "{rows:?}");
        assert_eq!((refused[0].level.as_str(), refused[0].ts_ms), ("WARN", 7));
        assert_eq!(refused[0].message, "61 deliveries refused: rate limit 60/min");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
