//! The `outbox` table: every formatted broker request of a processed alert, committed before the alert is
//! answered, then sent by the bot's dispatcher and marked `sending`, `done`, `failed` or `expired` (not sent: past its
//! deadline).

use super::logs::{self, LogEntry};
use super::windows::{self, Mark};
use super::{bot_state, Committed, Op, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};
use std::sync::Arc;

pub(super) const SCHEMA: &str = "
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
        done_ms INTEGER,
        after_coid TEXT,
        deadline_ms INTEGER,
        target TEXT,
        alert_log_id INTEGER
    );
    CREATE INDEX IF NOT EXISTS outbox_open ON outbox(strategy, bot, id) WHERE status IN ('pending', 'sending');
    CREATE INDEX IF NOT EXISTS outbox_by_strategy ON outbox(strategy, id);";

/// One formatted broker request to store in the outbox.
#[derive(Debug, Clone)]
pub struct OutboxRow {
    /// Row id (assigned by SQLite; 0 before the insert).
    pub id: i64,
    /// The strategy's id.
    pub strategy: String,
    /// The bot's id.
    pub bot: String,
    /// The bot's broker, by its snapshot name (`BrokerId::as_str`).
    pub broker: String,
    /// `place`, `replace` or `cancel`.
    pub kind: String,
    /// The idempotency key the core derived.
    pub client_order_id: String,
    /// For replace and cancel: the working order's id.
    pub order_id: Option<String>,
    /// For replace: whether the broker keeps the id.
    pub keeps_order_id: Option<bool>,
    /// The client order id of the earlier row of the same alert and bot that must have succeeded before this
    /// one is sent: a re-size's cancel, or a reversal's close (the Outcome's `after`).
    pub after: Option<String>,
    /// HTTP method.
    pub method: String,
    /// Path after the broker's base URL.
    pub path: String,
    /// Content type of the body.
    pub content_type: Option<String>,
    /// The body bytes, exactly as the core formatted them.
    pub body: Vec<u8>,
    /// The broker-neutral order the request was formatted from: the Outcome's `order` JSON (`model::Order`).
    /// Rows written by older versions may hold another shape, which the dispatcher treats as unknown.
    pub meaning: Option<String>,
    /// `pending`, `sending`, `done` or `failed`.
    pub status: String,
    /// When the alert was answered.
    pub created_ms: i64,
    /// After this (Unix ms) the request is not sent but marked `expired`: an order sent late would trade at
    /// whatever the market has become. `None`: always sent (cancels, and rows of older versions).
    pub deadline_ms: Option<i64>,
    /// Where the request was stored to go: `paper`, or the http bot's base URL in its canonical form
    /// ([`crate::bots::Delivery::target`]). It is sent only there: a bots file that has changed since is a
    /// failure, not a delivery elsewhere. `None` for rows of older versions, which go wherever the bot is
    /// delivered now.
    pub target: Option<String>,
    /// Re-queued by an operator after it failed (a row still to send that has a result): an attempt before may
    /// have reached the broker, so its order is looked up before a refusal or a passed deadline is believed.
    pub retried: bool,
    /// The first log row of the alert that wrote it, stored with it (set by the store, whatever it holds before
    /// the insert): its own alert, which never overtakes its entry (`crate::dispatch::overtaking`). `None` for a
    /// row whose alert wrote no log row, and for rows of older versions.
    pub alert_log: Option<i64>,
}

#[cfg(test)]
impl OutboxRow {
    /// A row for the tests: strategy `s`'s paper bot `b`, a POST to `/orders` with client order id `c{id}`, no order
    /// stored and no deadline; each test sets what it is about.
    pub fn sample(id: i64, kind: &str, status: &str, created_ms: i64) -> OutboxRow {
        OutboxRow {
            id,
            strategy: "s".into(),
            bot: "b".into(),
            broker: "paper".into(),
            kind: kind.into(),
            client_order_id: format!("c{id}"),
            order_id: None,
            keeps_order_id: None,
            after: None,
            method: "POST".into(),
            path: "/orders".into(),
            content_type: None,
            body: Vec::new(),
            meaning: None,
            status: status.into(),
            created_ms,
            deadline_ms: None,
            target: Some("paper".into()),
            retried: false,
            alert_log: None,
        }
    }
}

/// What a delivery of one outbox row came to, committed in one transaction with its log row and the bot's
/// new state so that a crash never leaves one without the other.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The outbox row.
    pub id: i64,
    /// `done`, `failed` or `expired`.
    pub status: &'static str,
    /// The broker's answer or the failure, for the row.
    pub result: String,
    /// The strategy's log row for it.
    pub log: Option<LogEntry>,
    /// The bot's new state (strategy, bot, JSON), when it changed.
    pub state: Option<(String, String, String)>,
}

impl Writer {
    /// Tests only: [`Writer::queue_outbox`], its commit awaited.
    #[cfg(test)]
    pub async fn outbox(&self, mark: Mark, rows: Vec<OutboxRow>, log: Option<LogEntry>) -> Result<(), StoreError> {
        let done = self.queue_outbox(mark, rows, log, std::time::Duration::ZERO)?;
        done.await.map_err(|_| StoreError::Unanswered)?
    }

    /// Queues the commit of a processed alert (its outbox rows, its dedup key and rate mark, and its log rows, in
    /// the writer's next group commit) now, in the caller's turn, without waiting for it: the alerts of calls made
    /// one after the other are committed, and their rows numbered, in that order (`Writer::queue_in_turn`), which
    /// is the order the dispatcher sends them in. Only once the receiver answers `Ok` may the alert be answered 200
    /// processed. `held` (tests only, a slow disk) holds the commit back that long.
    pub fn queue_outbox(
        &self,
        mark: Mark,
        rows: Vec<OutboxRow>,
        log: Option<LogEntry>,
        held: std::time::Duration,
    ) -> Result<Committed, StoreError> {
        self.queue_in_turn(Op::Outbox { mark, rows, log }, held)
    }

    /// Marks an outbox row as being sent (for brokers where a resend could double the order: after a crash
    /// such a row is not sent again).
    pub async fn sending(&self, id: i64) -> Result<(), StoreError> {
        self.commit(Op::Sending(id)).await
    }

    /// Gives a row marked `sending` back unsent (`pending`): nothing of its attempt reached the broker (the bot's
    /// session stopped before the request went out), and another server may send it. With a `holder`, only while
    /// it holds the bot's lease on the shared database.
    pub async fn unsent(&self, id: i64, holder: Option<&str>) -> Result<(), StoreError> {
        self.commit(Op::Unsent { id, holder: holder.map(str::to_owned) }).await
    }

    /// Records what a run of deliveries came to, all in one transaction, in order.
    pub async fn delivered_run(&self, run: Arc<[Delivered]>) -> Result<(), StoreError> {
        self.commit(Op::Delivered(run)).await
    }

    /// Queues what a run of deliveries came to (one or more of a bot's rows, in order) without waiting for its
    /// commit: the receiver says when it is committed. The run is one job, so it is committed in one
    /// transaction: a run whose rows carry the bot's state only on the last one is never half stored. A
    /// dispatcher sends its next rows meanwhile, so that a bot's orders do not wait for one `fsync` each.
    pub async fn queue_delivered_run(&self, run: Arc<[Delivered]>) -> Result<Committed, StoreError> {
        self.queue(Op::Delivered(run)).await
    }
}

/// Stores a processed alert's log rows, its window marks and its outbox rows.
pub(super) fn insert(
    tx: &Transaction<'_>,
    mark: &Mark,
    rows: &[OutboxRow],
    log: Option<&LogEntry>,
) -> rusqlite::Result<usize> {
    let mut alert_log = None;
    if let Some(e) = log {
        if logs::insert(tx, e)? > 0 {
            // Its rows' ids run on from the last one inserted: the first is that less the others.
            let n = i64::try_from(e.records.len()).unwrap_or(i64::MAX);
            alert_log = Some(tx.last_insert_rowid() - (n - 1));
        }
    }
    windows::store_mark(tx, mark)?;
    let mut ins = tx.prepare_cached(
        "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id,
                             method, path, content_type, body, meaning, status, created_ms, after_coid,
                             deadline_ms, target, alert_log_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 'pending', ?13, ?14, ?15, ?16, ?17)",
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
            r.created_ms,
            r.after,
            r.deadline_ms,
            r.target,
            alert_log
        ])?;
    }
    Ok(rows.len())
}

/// How many outbox rows a strategy holds.
pub(super) fn count(tx: &Transaction<'_>, strategy: &str) -> rusqlite::Result<u64> {
    tx.query_row("SELECT count(*) FROM outbox WHERE strategy = ?1", params![strategy], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
}

/// Keeps a strategy's outbox within `max_rows` as rows are written, deleting its oldest finished rows (and
/// [`super::cap_headroom`] more, as the logs' cap does). Rows still to send are never deleted: when only they
/// are left, `tally.1` holds off the next try until 1,024 more rows have come, so that a stuck broker does not
/// make every insert walk its rows.
pub(super) fn cap(
    tx: &Transaction<'_>,
    strategy: &str,
    tally: &mut (u64, u64),
    max_rows: u64,
    now_ms: i64,
) -> rusqlite::Result<()> {
    if tally.0 <= max_rows || tally.0 < tally.1 {
        return Ok(());
    }
    let over = i64::try_from(tally.0 - max_rows + super::cap_headroom(max_rows)).unwrap_or(i64::MAX);
    // Never a row finished within [`FINISHED_KEPT_MS`]: the cap then holds off as when only open rows are left.
    let deleted = tx
        .prepare_cached(
            "DELETE FROM outbox WHERE id IN
                 (SELECT id FROM outbox WHERE strategy = ?1 AND status IN ('done', 'failed', 'expired', 'dismissed')
                  AND coalesce(done_ms, created_ms) < ?3 ORDER BY id LIMIT ?2)",
        )?
        .execute(params![strategy, over, now_ms.saturating_sub(FINISHED_KEPT_MS)])? as u64;
    tally.0 = tally.0.saturating_sub(deleted);
    if tally.0 > max_rows {
        tally.1 = tally.0 + 1024;
    }
    Ok(())
}

/// Marks a row as being sent.
pub(super) fn set_sending(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.execute("UPDATE outbox SET status = 'sending' WHERE id = ?1", params![id])?;
    Ok(())
}

/// Sets a row marked `sending` back to `pending` ([`Writer::unsent`]); a row finished since stays as it is.
pub(super) fn set_unsent(tx: &Transaction<'_>, id: i64) -> rusqlite::Result<()> {
    tx.execute("UPDATE outbox SET status = 'pending' WHERE id = ?1 AND status = 'sending'", params![id])?;
    Ok(())
}

/// Records a delivery with its log row and the bot's new state.
pub(super) fn set_delivered(tx: &Transaction<'_>, d: &Delivered) -> rusqlite::Result<()> {
    if let Some(e) = &d.log {
        logs::insert(tx, e)?;
    }
    // Cached: a busy paper bot records thousands of deliveries a second, and parsing the statement each time
    // cost more than running it.
    tx.prepare_cached("UPDATE outbox SET status = ?2, result = ?3, done_ms = ?4 WHERE id = ?1")?.execute(params![
        d.id,
        d.status,
        d.result,
        d.log.as_ref().map(|l| l.ts_ms)
    ])?;
    if let Some((strategy, bot, state)) = &d.state {
        bot_state::set(tx, strategy, bot, state)?;
    }
    Ok(())
}

/// How long a finished row is kept whatever the retention or the row cap: a lookup at a broker that keeps no
/// client order id (Schwab's, by terms over a span of up to two hours) counts the other rows with the same terms
/// before it takes an order found for its own, and a chained row reads the row it waits for. Deleted sooner (a
/// retention of 0 days, a small `--outbox-max-rows`), an earlier alert's order was taken for a later one's, which
/// was then never placed.
pub const FINISHED_KEPT_MS: i64 = 3 * 3_600_000;

/// Deletes finished rows created before the log retention's cutoff (pending ones are never deleted). Returns
/// how many went.
#[cfg(test)]
pub(super) fn prune_finished(tx: &Transaction<'_>, cutoff_ms: i64) -> rusqlite::Result<usize> {
    Ok(prune_finished_by_strategy(tx, cutoff_ms, i64::MAX)?.values().sum::<u64>() as usize)
}

/// [`prune_finished`], with how many rows each strategy lost: the writer takes them off its row counts, which it
/// then keeps (forgotten, each strategy's next alert counted its whole outbox again inside the writer's
/// transaction, every minute).
///
/// `finished_before_ms`: only rows that finished before it go ([`FINISHED_KEPT_MS`], counted from when a row
/// finished, not from when it was stored: a row that waited hours to go out is looked for by terms after it).
pub(super) fn prune_finished_by_strategy(
    tx: &Transaction<'_>,
    cutoff_ms: i64,
    finished_before_ms: i64,
) -> rusqlite::Result<std::collections::HashMap<String, u64>> {
    let mut by_strategy = std::collections::HashMap::new();
    let mut stmt = tx.prepare_cached(&format!("{PRUNE_FINISHED} RETURNING strategy"))?;
    let mut rows = stmt.query(params![cutoff_ms, finished_before_ms])?;
    while let Some(r) = rows.next()? {
        *by_strategy.entry(r.get::<_, String>(0)?).or_insert(0) += 1;
    }
    Ok(by_strategy)
}

/// [`prune_finished`]'s statement. Rows are stored in time order, so those before the cutoff are a range of row
/// ids: it ends at the first row from the cutoff on, found by walking the ids from the oldest (the few rows left
/// before the cutoff, then one). By time alone, with no index on it, the whole outbox was read every minute
/// inside the writer's transaction, and every alert's answer waited for it. A row stored out of time order past
/// that first one waits for a later prune.
const PRUNE_FINISHED: &str = "DELETE FROM outbox
     WHERE id < coalesce((SELECT id FROM outbox WHERE created_ms >= ?1 ORDER BY id LIMIT 1), 9223372036854775807)
       AND status IN ('done', 'failed', 'expired', 'dismissed') AND created_ms < ?1
       AND coalesce(done_ms, created_ms) < ?2";

/// `s` for a LIKE pattern with `\\` as its escape: its `%`, `_` and `\\` match themselves.
fn like_escaped(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

pub(super) const OUTBOX_COLUMNS: &str =
    "id, strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id, method, path, content_type, body, \
     meaning, status, created_ms, after_coid, deadline_ms, target, alert_log_id, result IS NOT NULL";

/// The index of a column selected right after [`OUTBOX_COLUMNS`] (a row's `result`): how many they are,
/// counted from the list itself, so that a column added there moves it.
pub(super) const AFTER_OUTBOX_COLUMNS: usize = {
    let b = OUTBOX_COLUMNS.as_bytes();
    let (mut i, mut commas) = (0, 0);
    while i < b.len() {
        if b[i] == b',' {
            commas += 1;
        }
        i += 1;
    }
    commas + 1
};

pub(super) fn outbox_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<OutboxRow> {
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
        after: r.get(15)?,
        deadline_ms: r.get(16)?,
        target: r.get(17)?,
        alert_log: r.get(18)?,
        retried: r.get(19)?,
    })
}

/// An outbox row read from PostgreSQL (the columns of [`OUTBOX_COLUMNS`]).
pub(super) fn pg_outbox_row(r: &tokio_postgres::Row) -> Result<OutboxRow, tokio_postgres::Error> {
    Ok(OutboxRow {
        id: r.try_get(0)?,
        strategy: r.try_get(1)?,
        bot: r.try_get(2)?,
        broker: r.try_get(3)?,
        kind: r.try_get(4)?,
        client_order_id: r.try_get(5)?,
        order_id: r.try_get(6)?,
        keeps_order_id: r.try_get(7)?,
        method: r.try_get(8)?,
        path: r.try_get(9)?,
        content_type: r.try_get(10)?,
        body: r.try_get(11)?,
        meaning: r.try_get(12)?,
        status: r.try_get(13)?,
        created_ms: r.try_get(14)?,
        after: r.try_get(15)?,
        deadline_ms: r.try_get(16)?,
        target: r.try_get(17)?,
        alert_log: r.try_get(18)?,
        retried: r.try_get(19)?,
    })
}

impl Reader {
    /// The highest outbox row id (0 when the outbox is empty). Ids only grow while a row is kept: SQLite's
    /// next id is above the highest, PostgreSQL's comes from a sequence.
    pub fn last_outbox_id(&self) -> Result<i64, StoreError> {
        let sql = "SELECT COALESCE(MAX(id), 0) FROM outbox";
        let ids = match self.pg() {
            Some(pg) => pg.read(sql, &[], |r| r.try_get::<_, i64>(0))?,
            None => self.query(sql, [], |r| r.get::<_, i64>(0))?,
        };
        Ok(ids.first().copied().unwrap_or(0))
    }

    /// The (strategy, bot) pairs with outbox rows still to send.
    pub fn open_bots(&self) -> Result<Vec<(String, String)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                "SELECT DISTINCT strategy, bot FROM outbox WHERE status IN ('pending', 'sending')",
                &[],
                |r| Ok((r.try_get(0)?, r.try_get(1)?)),
            );
        }
        self.query("SELECT DISTINCT strategy, bot FROM outbox WHERE status IN ('pending', 'sending')", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
    }

    /// One bot's outbox rows still to send, oldest first (at most `limit`).
    pub fn open_rows(&self, strategy: &str, bot: &str, limit: u32) -> Result<Vec<OutboxRow>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM outbox
                     WHERE strategy = $1 AND bot = $2 AND status IN ('pending', 'sending') ORDER BY id LIMIT $3"
                ),
                &[&strategy, &bot, &i64::from(limit)],
                pg_outbox_row,
            );
        }
        self.query(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox
                 WHERE strategy = ?1 AND bot = ?2 AND status IN ('pending', 'sending') ORDER BY id LIMIT ?3"
            ),
            params![strategy, bot, limit],
            outbox_row,
        )
    }

    /// The bot's rows written with the same alert as `row` (its `created_ms`): the chain a cancel may be the
    /// first step of.
    pub fn alert_rows(&self, row: &OutboxRow) -> Result<Vec<OutboxRow>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE strategy = $1 AND bot = $2 AND created_ms = $3 ORDER BY id"
                ),
                &[&row.strategy, &row.bot, &row.created_ms],
                pg_outbox_row,
            );
        }
        self.query(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE strategy = ?1 AND bot = ?2 AND created_ms = ?3 ORDER BY id"
            ),
            params![row.strategy, row.bot, row.created_ms],
            outbox_row,
        )
    }

    /// The rows of `row`'s bot stored by later alerts that went or are on their way (`pending`, `sending`,
    /// `done`), oldest first: what a resend of `row` would come after, as the operator's retry judges it. All of
    /// them, whatever their kind or order: the caller matches them by instrument (in each one's `meaning`), since
    /// a change or a cancel re-aimed at a replacement when sent keeps the order id it was decided against. Those of
    /// a cancel hold those of the orders waiting for it (of its alert, stored after it).
    pub fn later_requests(&self, row: &OutboxRow) -> Result<Vec<OutboxRow>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!(
                    "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE strategy = $1 AND id > $2 AND bot = $3
                     AND created_ms <> $4 AND status IN ('pending', 'sending', 'done') ORDER BY id"
                ),
                &[&row.strategy, &row.id, &row.bot, &row.created_ms],
                pg_outbox_row,
            );
        }
        self.query(
            &format!(
                "SELECT {OUTBOX_COLUMNS} FROM outbox WHERE strategy = ?1 AND id > ?2 AND bot = ?3
                 AND created_ms <> ?4 AND status IN ('pending', 'sending', 'done') ORDER BY id"
            ),
            params![row.strategy, row.id, row.bot, row.created_ms],
            outbox_row,
        )
    }

    /// How many rows the strategy holds from row `id` on: a page whose oldest row is `id` and that lists as many
    /// holds every row stored after each of its own.
    pub fn rows_from(&self, strategy: &str, id: i64) -> Result<i64, StoreError> {
        if let Some(pg) = self.pg() {
            let n =
                pg.read("SELECT count(*) FROM outbox WHERE strategy = $1 AND id >= $2", &[&strategy, &id], |r| {
                    r.try_get::<_, i64>(0)
                })?;
            return Ok(n.into_iter().next().unwrap_or_default());
        }
        let n =
            self.query("SELECT count(*) FROM outbox WHERE strategy = ?1 AND id >= ?2", params![strategy, id], |r| {
                r.get::<_, i64>(0)
            })?;
        Ok(n.into_iter().next().unwrap_or_default())
    }

    /// The bot's rows that wait for its row with client order id `after` (a cancel's followers: a re-size's new
    /// order, a close), with their results, newest first (at most a few: an alert's cancel has one or two).
    pub fn followers(
        &self,
        strategy: &str,
        bot: &str,
        after: &str,
    ) -> Result<Vec<(OutboxRow, Option<String>)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!(
                    "SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = $1 AND bot = $2 AND after_coid = $3
                     ORDER BY id DESC LIMIT 8"
                ),
                &[&strategy, &bot, &after],
                |r| Ok((pg_outbox_row(r)?, r.try_get(AFTER_OUTBOX_COLUMNS)?)),
            );
        }
        self.query(
            &format!(
                "SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 AND bot = ?2 AND after_coid = ?3
                 ORDER BY id DESC LIMIT 8"
            ),
            params![strategy, bot, after],
            |r| Ok((outbox_row(r)?, r.get(AFTER_OUTBOX_COLUMNS)?)),
        )
    }

    /// The row a later row of the same alert waits for (its `after`): the bot's row with that client order
    /// id written with the same alert (`created_ms`), as (kind, working order id, status), if there is one.
    pub fn prerequisite(
        &self,
        strategy: &str,
        bot: &str,
        client_order_id: &str,
        created_ms: i64,
    ) -> Result<Option<(String, Option<String>, String)>, StoreError> {
        if let Some(pg) = self.pg() {
            let found = pg.read(
                "SELECT kind, order_id, status FROM outbox WHERE strategy = $1 AND bot = $2 AND client_order_id = $3
                 AND created_ms = $4 ORDER BY id DESC LIMIT 1",
                &[&strategy, &bot, &client_order_id, &created_ms],
                |r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)),
            )?;
            return Ok(found.into_iter().next());
        }
        let found = self.query(
            "SELECT kind, order_id, status FROM outbox WHERE strategy = ?1 AND bot = ?2 AND client_order_id = ?3
             AND created_ms = ?4 ORDER BY id DESC LIMIT 1",
            params![strategy, bot, client_order_id, created_ms],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, Option<String>>(1)?, r.get::<_, String>(2)?)),
        )?;
        Ok(found.into_iter().next())
    }

    /// The orders (each row's `meaning`, `None` where it has none) that other rows may have placed at the same
    /// account around `at_ms`: place rows on `row`'s path and replace rows under it (the account is in it; a
    /// replace is a new order at a broker that gives one a new id), of any strategy or bot, sent or being sent
    /// (any outcome but expired), created no later than `within_ms` after `at_ms` and finished no earlier than
    /// `within_ms` before it. At a broker that keeps no client order id, an order found by its terms may be one
    /// of theirs: the caller compares their terms, not their bytes (`190.50` and `190.5` are one price).
    pub fn twins(&self, row: &OutboxRow, at_ms: i64, within_ms: i64) -> Result<Vec<Option<String>>, StoreError> {
        let (latest, earliest) = (at_ms.saturating_add(within_ms), at_ms.saturating_sub(within_ms));
        let under = format!("{}/%", like_escaped(&row.path));
        if let Some(pg) = self.pg() {
            pg.read(
                "SELECT meaning FROM outbox WHERE id <> $1 AND broker = $2
                 AND ((kind = 'place' AND path = $3) OR (kind = 'replace' AND path LIKE $4 ESCAPE '\\'))
                 AND status IN ('sending', 'done', 'failed', 'dismissed')
                 AND created_ms <= $5 AND (done_ms IS NULL OR done_ms >= $6)",
                &[&row.id, &row.broker, &row.path, &under, &latest, &earliest],
                |r| r.try_get(0),
            )
        } else {
            self.query(
                "SELECT meaning FROM outbox WHERE id <> ?1 AND broker = ?2
                 AND ((kind = 'place' AND path = ?3) OR (kind = 'replace' AND path LIKE ?4 ESCAPE '\\'))
                 AND status IN ('sending', 'done', 'failed', 'dismissed')
                 AND created_ms <= ?5 AND (done_ms IS NULL OR done_ms >= ?6)",
                params![row.id, row.broker, row.path, under, latest, earliest],
                |r| r.get(0),
            )
        }
    }

    /// A strategy's outbox rows with their results, newest first (for the admin API).
    /// The strategy's rows written for the alert received at `created_ms` (the time its Logs row carries), newest
    /// first: an alert's broker requests however many rows came since.
    pub fn alert_outbox(
        &self,
        strategy: &str,
        created_ms: i64,
        limit: u32,
    ) -> Result<Vec<(OutboxRow, Option<String>)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!(
                    "SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = $1 AND created_ms = $2
                     ORDER BY id DESC LIMIT $3"
                ),
                &[&strategy, &created_ms, &i64::from(limit)],
                |r| Ok((pg_outbox_row(r)?, r.try_get(AFTER_OUTBOX_COLUMNS)?)),
            );
        }
        self.query(
            &format!(
                "SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 AND created_ms = ?2
                 ORDER BY id DESC LIMIT ?3"
            ),
            params![strategy, created_ms, limit],
            |r| Ok((outbox_row(r)?, r.get(AFTER_OUTBOX_COLUMNS)?)),
        )
    }

    pub fn strategy_outbox(&self, strategy: &str, limit: u32) -> Result<Vec<(OutboxRow, Option<String>)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                &format!("SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = $1 ORDER BY id DESC LIMIT $2"),
                &[&strategy, &i64::from(limit)],
                |r| Ok((pg_outbox_row(r)?, r.try_get(AFTER_OUTBOX_COLUMNS)?)),
            );
        }
        self.query(
            &format!("SELECT {OUTBOX_COLUMNS}, result FROM outbox WHERE strategy = ?1 ORDER BY id DESC LIMIT ?2"),
            params![strategy, limit],
            |r| Ok((outbox_row(r)?, r.get(AFTER_OUTBOX_COLUMNS)?)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[(i64, &str)]) -> rusqlite::Connection {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        for (created, status) in rows {
            c.execute(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms)
                 VALUES ('s', 'b', 'broker', 'place', 'c', 'POST', '/orders', x'', ?1, ?2)",
                params![status, created],
            )
            .unwrap();
        }
        c
    }

    /// The minute's prune deletes a range of row ids, not a scan of the whole outbox by time.
    #[test]
    fn the_prune_of_finished_rows_walks_a_range_of_ids() {
        let c = table(&[(1, "done")]);
        let plan = super::super::tests::query_plan(&c, PRUNE_FINISHED, params![5, i64::MAX]);
        assert!(plan.iter().any(|p| p.contains("SEARCH outbox USING INTEGER PRIMARY KEY (rowid<?)")), "{plan:?}");
    }

    /// It deletes what the statement by time alone deleted: finished rows before the cutoff, never an open one
    /// nor a newer one.
    #[test]
    fn the_prune_of_finished_rows_deletes_the_finished_ones_before_the_cutoff() {
        let rows = [
            (1, "done"),
            (2, "pending"),
            (3, "failed"),
            (4, "sending"),
            (5, "expired"),
            (6, "dismissed"),
            (7, "done"),
            (8, "pending"),
            (9, "done"),
        ];
        for cutoff in 0..=10 {
            let mut c = table(&rows);
            let tx = c.transaction().unwrap();
            let n = prune_finished(&tx, cutoff).unwrap();
            let left: Vec<(i64, String)> = tx
                .prepare("SELECT created_ms, status FROM outbox ORDER BY id")
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let want: Vec<(i64, String)> = rows
                .iter()
                .filter(|(t, s)| *t >= cutoff || ["pending", "sending"].contains(s))
                .map(|(t, s)| (*t, (*s).to_owned()))
                .collect();
            assert_eq!(left, want, "cutoff {cutoff}");
            assert_eq!(n, rows.len() - want.len());
        }
    }
}
