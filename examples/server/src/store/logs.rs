//! The `logs` table: one row per log record of an Outcome, read by the Logs view and the admin API, pruned by
//! age and by count per strategy.

use super::windows::Mark;
use super::{Job, Op, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};
use strategy_webhook::{Decision, Level, Outcome};

pub(super) const SCHEMA: &str = "
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
    CREATE INDEX IF NOT EXISTS logs_by_strategy ON logs(strategy, id);";

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
    /// The ERROR row of an alert that was decided processed but could not be stored (`alerts`: its entry's), and
    /// was answered 500 with nothing sent: the commit that failed took its own rows with it.
    pub fn not_stored(strategy: &str, alerts: Option<String>, error: &dyn std::fmt::Display, ts_ms: i64) -> LogEntry {
        Self::not_stored_saying(strategy, alerts, error, ts_ms, "send it again")
    }

    /// [`LogEntry::not_stored`] for an attempt on the shared database, which cannot tell whether an earlier attempt
    /// of the same alert was stored (its answer lost, or taken on another server): told "send it again", an operator
    /// resent by hand an alert whose first attempt was trading.
    pub fn not_stored_attempt(
        strategy: &str,
        alerts: Option<String>,
        error: &dyn std::fmt::Display,
        ts_ms: i64,
    ) -> LogEntry {
        Self::not_stored_saying(
            strategy,
            alerts,
            error,
            ts_ms,
            "if the sender sent it before, an earlier attempt may be stored and trading: look for it in these Logs \
             before sending it again by hand",
        )
    }

    /// [`LogEntry::not_stored`] for an attempt on the shared database that waited too long for its strategy's lock
    /// (answered `store_locked`): the lock's holder may be another attempt of the same alert whose commit is held
    /// (by a synchronous standby), not in these Logs yet, and trades once it lands. Told to look for it here before
    /// sending it again, an operator found nothing and placed by hand an alert about to trade; the row says what
    /// the sender's answer says.
    pub fn not_stored_locked(
        strategy: &str,
        alerts: Option<String>,
        error: &dyn std::fmt::Display,
        ts_ms: i64,
    ) -> LogEntry {
        Self::error_row(
            strategy,
            alerts,
            ts_ms,
            format!(
                "the alert waited too long for its strategy's lock ({error}) and this attempt stored nothing; the \
                 sender was answered 500 store_locked: another attempt for this strategy holds the lock and may \
                 still be committing, and if it is this alert's, it trades. Do not place it by hand: wait for it to \
                 appear in these Logs, or for the sender's retry (a stored one is answered duplicate)"
            ),
        )
    }

    fn not_stored_saying(
        strategy: &str,
        alerts: Option<String>,
        error: &dyn std::fmt::Display,
        ts_ms: i64,
        advice: &str,
    ) -> LogEntry {
        Self::error_row(
            strategy,
            alerts,
            ts_ms,
            format!(
                "the alert could not be stored ({error}); nothing of this attempt was sent, and the sender was \
                 answered 500: {advice}"
            ),
        )
    }

    fn error_row(strategy: &str, alerts: Option<String>, ts_ms: i64, message: String) -> LogEntry {
        LogEntry {
            ts_ms,
            strategy: strategy.to_owned(),
            decision: "error",
            http_status: 500,
            alerts: alerts.unwrap_or_else(|| "[]".into()),
            records: vec![(Level::Error, message)],
        }
    }

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
            strategy: strategy.to_string(),
            decision,
            http_status: outcome.http_status,
            alerts: serde_json::to_string(&outcome.alerts).unwrap_or_else(|_| "[]".to_owned()),
            records: outcome.logs.iter().map(|r| (r.level, r.message.to_owned())).collect(),
        })
    }
}

/// Where an alert's kept log rows lie, and when it was received: what tells whether it came after an outbox row's
/// alert ([`later_alerts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertSpan {
    /// Its first kept log row's id.
    pub log_id: i64,
    /// Its last log row's id.
    pub last_log_id: i64,
    /// When it was received, Unix milliseconds.
    pub ts_ms: i64,
    /// Told by its time, not its rows' ids: an alert answered 500 because it could not be stored, whose row is
    /// logged once its commit has failed, outside its strategy's turn, so after alerts decided later than it.
    pub by_time: bool,
}

/// Those of `alerts` (a strategy's, one each, [`Reader::alerts_since`], [`Reader::decided_alerts_since`]) that came
/// after the alert of an outbox row received at `created_ms` whose first log row is `own` (its `alert_log_id`).
///
/// Told by log row ids, not by time: an alert's log rows are given their ids while its strategy's turn is held (on
/// PostgreSQL inside the batch that holds the strategy's lock, so across servers too; on SQLite in the writer's
/// queue, joined in the strategy's turn), so ids follow the order alerts were decided in, whatever the clocks of
/// the servers that stamped their times (two servers 0.5 s apart took a CLOSE decided after an entry for one
/// before it, and the entry was sent after it). The row's own alert is the one whose kept rows span `own`, and
/// never counts. `own` spanned by none or more than one (the strategy's log cap cut into its alert's rows), or no
/// `own` (a row written before the outbox kept it), falls back to time: an alert received at or after
/// `created_ms` counts unless it is alone in that millisecond (then it is the row's own); with an `own`, one whose
/// rows come after it counts as well (ids only grow on PostgreSQL; on SQLite they grow unless every row from `own`
/// on was deleted, which leaves time as the single clock's answer).
pub fn later_alerts<'a, T>(
    alerts: &'a [T],
    span: impl Fn(&T) -> AlertSpan + Copy + 'a,
    created_ms: i64,
    own: Option<i64>,
) -> impl Iterator<Item = &'a T> + 'a {
    let spans = |s: AlertSpan, own: i64| s.log_id <= own && own <= s.last_log_id;
    let known = own.filter(|&own| alerts.iter().filter(|a| spans(span(a), own)).count() == 1);
    alerts.iter().filter(move |a| {
        let s = span(a);
        match known {
            Some(_) if s.by_time => s.ts_ms >= created_ms,
            Some(own) => s.log_id > own,
            None => {
                let alone = || alerts.iter().filter(|o| span(o).ts_ms == created_ms).count() == 1;
                let own_alert = s.ts_ms == created_ms && alone();
                !own_alert && (s.ts_ms >= created_ms || own.is_some_and(|own| s.log_id > own))
            }
        }
    })
}

/// The receive time of the first of [`Reader::alerts_since`]'s `alerts` that came after the alert of an outbox row
/// received at `created_ms` whose first log row is `own` ([`later_alerts`]).
pub fn later_alert(alerts: &[AlertSpan], created_ms: i64, own: Option<i64>) -> Option<i64> {
    later_alerts(alerts, |a| *a, created_ms, own).next().map(|a| a.ts_ms)
}

/// One decided alert of a strategy ([`Reader::decided_alerts_since`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedAlert {
    /// Its first log row's id (of those still kept: the strategy's log cap deletes its oldest rows one by one, and
    /// may have deleted the alert's first rows).
    pub log_id: i64,
    /// Its last log row's id: its rows lie from `log_id` to here, so an outbox row's `alert_log` (its alert's first
    /// row when written) still falls in its alert's span after the cap cut into it.
    pub last_log_id: i64,
    /// When it was received, Unix milliseconds.
    pub ts_ms: i64,
    /// The canonical alerts it carried (a JSON array).
    pub alerts: String,
}

impl DecidedAlert {
    /// Where its log rows lie, and when it was received.
    pub fn span(&self) -> AlertSpan {
        AlertSpan { log_id: self.log_id, last_log_id: self.last_log_id, ts_ms: self.ts_ms, by_time: false }
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
    /// Only rows of this decision (`processed`, `rejected`, …).
    pub decision: Option<String>,
    /// Only rows whose message or alerts hold this text (case-sensitive).
    pub text: Option<String>,
}

/// How long log rows are kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Rows older than this are deleted.
    pub max_age_ms: i64,
    /// Rows of one strategy beyond the newest this many are deleted.
    pub max_rows_per_strategy: u64,
}

impl Writer {
    /// Queues an Outcome's log rows without waiting for the commit: the answer to the sender does not
    /// depend on them. Waits only when the queue is full, which slows senders down instead of dropping rows.
    pub async fn log(&self, entry: Option<LogEntry>, mark: Option<Mark>) {
        if entry.is_none() && mark.is_none() {
            return;
        }
        if self.tx.send(Job::new(Op::Log(entry, mark), None)).await.is_err() {
            tracing::error!("the log writer has stopped; a log row was not stored");
        }
    }
}

impl Writer {
    /// [`Writer::log`] in the caller's strategy turn ([`Writer::queue_in_turn`]): behind the rows queued before it
    /// in turn, ahead of those queued after. Never waits.
    pub fn log_in_turn(&self, entry: Option<LogEntry>, mark: Option<Mark>) {
        if entry.is_none() && mark.is_none() {
            return;
        }
        if self.queue_in_turn_unawaited(Op::Log(entry, mark)).is_err() {
            tracing::error!("the log writer has stopped; a log row was not stored");
        }
    }
}

/// One strategy's deliveries refused by the rate limit within one window, stored as a single WARN row whose
/// count is updated as more arrive (a flood of 429s must not flood the Logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    /// The strategy's id.
    pub strategy: String,
    /// The first refusal of the window (Unix ms): the row's time.
    pub since_ms: i64,
    /// Deliveries refused in the window so far.
    pub count: u64,
    /// The rate limit in force, per minute.
    pub limit: u32,
    /// Whether the window's row was already queued (then it is updated, else inserted).
    pub update: bool,
    /// The answer they got: 429 (the rate limit), 413 (a body over the limit), 503, 408 or 400 (lost before a
    /// decision).
    pub status: u16,
}

impl Refusals {
    /// The row's message: `61 deliveries refused: rate limit 60/min`, or for bodies over the limit
    /// `3 deliveries refused: the body is over 262,144 bytes (256 KiB)`.
    pub fn message(&self) -> String {
        let what = if self.count == 1 { "delivery" } else { "deliveries" };
        match self.status {
            413 => format!("{} {what} refused: the body is over 262,144 bytes (256 KiB)", self.count),
            503 => format!(
                "{} {what} refused: the server was busy (503: the in-flight cap, or decisions or the database \
                 stalled); a sender that does not retry lost them",
                self.count
            ),
            408 => format!("{} {what} refused: the body did not arrive in time (408)", self.count),
            400 => format!("{} {what} refused: the request was malformed (400)", self.count),
            _ => format!("{} {what} refused: rate limit {}/min", self.count, self.limit),
        }
    }

    /// The SQL condition (the same in SQLite and PostgreSQL) that picks a window's refusal row out of `logs`: a
    /// delivery refused before a decision is counted into one of these, never a row of its own, and no decided
    /// alert's row answers these statuses (the core's 429 and 413 are counted into windows too, its 400 and 404
    /// have no strategy to log under).
    pub(super) const ROW: &'static str =
        "decision = 'error' AND alerts = '[]' AND http_status IN (400, 408, 413, 429, 503)";

    /// How many deliveries a refusal row's message counts: its leading number, as [`Refusals::message`] writes
    /// it (the row keeps no count of its own); 1 for a message that does not start with one.
    pub(super) fn count_in(message: &str) -> i64 {
        message.split(' ').next().and_then(|n| n.parse::<i64>().ok()).unwrap_or(1)
    }

    /// The row's level: a body over the limit is an ERROR (the sender's alert is lost unless it is fixed), a
    /// rate limit a WARN.
    pub fn level(&self) -> &'static str {
        if self.status == 429 {
            "WARN"
        } else {
            "ERROR"
        }
    }
}

impl Writer {
    /// Queues a window's refusal row (insert or count update) without waiting for the commit.
    pub async fn refusals(&self, r: Refusals) {
        if self.tx.send(Job::new(Op::Refusals(r), None)).await.is_err() {
            tracing::error!("the log writer has stopped; a rate-limit row was not stored");
        }
    }
}

/// Inserts a window's refusal row, or updates its count. The row is found from the newest of the strategy's
/// rows backwards, and it is recent, so the update reads few rows.
pub(super) fn upsert_refusals(tx: &Transaction<'_>, r: &Refusals) -> rusqlite::Result<usize> {
    let message = r.message();
    if r.update {
        let n = tx.execute(
            "UPDATE logs SET message = ?3 WHERE id =
                 (SELECT id FROM logs WHERE strategy = ?1 AND ts_ms = ?2 AND http_status = ?4
                  ORDER BY id DESC LIMIT 1)",
            params![r.strategy, r.since_ms, message, r.status],
        )?;
        if n > 0 {
            return Ok(0);
        }
    }
    tx.execute(
        "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
         VALUES (?1, ?2, ?4, ?3, 'error', ?5, '[]')",
        params![r.since_ms, r.strategy, message, r.level(), r.status],
    )?;
    Ok(1)
}

/// Inserts an Outcome's log rows.
pub(super) fn insert(tx: &Transaction<'_>, e: &LogEntry) -> rusqlite::Result<usize> {
    let mut insert = tx.prepare_cached(
        "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (level, message) in &e.records {
        insert.execute(params![e.ts_ms, e.strategy, level.as_str(), message, e.decision, e.http_status, e.alerts])?;
    }
    Ok(e.records.len())
}

/// Keeps a strategy's rows within `max_rows` as they are written: `count` is what the strategy holds (read once,
/// then kept up to date by the writer), and the oldest rows beyond the cap are deleted in the same
/// transaction, so the cap holds between prunes too. A strategy at its cap loses its oldest
/// [`super::cap_headroom`] rows more at once, so that the next ones fit without a delete each: one row deleted
/// per row written cost a busy strategy's writer a sixth of the server's CPU (the statement's own start and the
/// index walk each time).
pub(super) fn cap(tx: &Transaction<'_>, strategy: &str, count: &mut u64, max_rows: u64) -> rusqlite::Result<()> {
    if *count <= max_rows {
        return Ok(());
    }
    let over = i64::try_from(*count - max_rows + super::cap_headroom(max_rows)).unwrap_or(i64::MAX);
    let deleted = tx.prepare_cached(CAP)?.execute(params![strategy, over])?;
    *count = count.saturating_sub(deleted as u64);
    Ok(())
}

/// [`cap`]'s statement: the strategy's oldest ?2 rows (at least 1) are its rows up to its ?2-th id, one range of
/// its index, where `id IN (subquery)` built a temporary table of their ids at every cap.
const CAP: &str = "DELETE FROM logs WHERE strategy = ?1 AND id <=
     coalesce((SELECT id FROM logs WHERE strategy = ?1 ORDER BY id LIMIT 1 OFFSET ?2 - 1), 9223372036854775807)";

/// How many rows a strategy holds.
pub(super) fn count(tx: &Transaction<'_>, strategy: &str) -> rusqlite::Result<u64> {
    tx.query_row("SELECT count(*) FROM logs WHERE strategy = ?1", params![strategy], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
}

/// Deletes at most `budget` log rows: those older than the retention, oldest first, then each strategy's beyond its
/// newest `max_rows_per_strategy`. Answers the rows deleted by strategy, and whether the budget ran out (more may be
/// left: the caller queues another round, [`Writer::prune`](super::Writer::prune)). Bounded, so that the writer, the
/// one connection that writes, is held by one round for tens of milliseconds: a prune of a large backlog in one job
/// held a delivery's `sending` mark 14 s behind it.
pub(super) fn prune(
    tx: &Transaction<'_>,
    r: Retention,
    now_ms: i64,
    budget: i64,
) -> rusqlite::Result<(std::collections::HashMap<String, u64>, bool)> {
    use rusqlite::OptionalExtension;
    let id = |sql: &str, p: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<i64> {
        Ok(tx.query_row(sql, p, |r| r.get::<_, Option<i64>>(0)).optional()?.flatten().unwrap_or(i64::MAX))
    };
    let mut by_strategy: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut count = |upto: &str, p: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<()> {
        let mut st =
            // NOT INDEXED: the rows walked by id, those about to go. Left to the planner (no ANALYZE has told it the
            // sizes), it read the whole (strategy, id) index for its grouping, every round.
            tx.prepare_cached(&format!("SELECT strategy, count(*) FROM logs NOT INDEXED WHERE {upto} GROUP BY strategy"))?;
        let rows = st.query_map(p, |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (strategy, n) = row?;
            *by_strategy.entry(strategy).or_default() += n as u64;
        }
        Ok(())
    };
    // Rows are numbered in time order, so those older than the cutoff are those below the id of the first row that
    // is not: found by walking the table from its oldest row, which reads only rows about to be deleted (and
    // spares every insert the upkeep of an index on the time). In the table's order, not strategy by strategy: its
    // rows are the strategies' interleaved, and a round of one strategy's rewrote pages every other round wrote
    // too (a backlog took three times as long).
    // The walk for the first fresh row stops at the round's budget: unbounded, each round of a large backlog walked
    // every row past the retention, the rounds' own and those of the rounds after it (quadratic in the backlog).
    let cutoff = now_ms.saturating_sub(r.max_age_ms);
    let nth = id("SELECT id FROM logs ORDER BY id LIMIT 1 OFFSET ?1", &[&budget])?;
    let upto = id("SELECT id FROM logs WHERE id < ?2 AND ts_ms >= ?1 ORDER BY id LIMIT 1", &[&cutoff, &nth])?.min(nth);
    count("id < ?1", &[&upto])?;
    let aged = tx.execute("DELETE FROM logs WHERE id < ?1", params![upto])?;
    let mut left = budget - aged as i64;
    let mut capped = 0;
    if left > 0 {
        // A skip scan of the (strategy, id) index, a seek per strategy.
        let strategies: Vec<String> = {
            let mut st = tx.prepare_cached(
                "WITH RECURSIVE s(x) AS (SELECT min(strategy) FROM logs
                     UNION ALL SELECT (SELECT min(strategy) FROM logs WHERE strategy > x) FROM s WHERE x IS NOT NULL)
                 SELECT x FROM s WHERE x IS NOT NULL",
            )?;
            let rows = st.query_map([], |row| row.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let offset = i64::try_from(r.max_rows_per_strategy).unwrap_or(i64::MAX);
        for s in strategies {
            if left <= 0 {
                break;
            }
            let kept =
                id("SELECT id FROM logs WHERE strategy = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2", &[&s, &offset])?;
            if kept == i64::MAX {
                continue;
            }
            let nth = id("SELECT id FROM logs WHERE strategy = ?1 ORDER BY id LIMIT 1 OFFSET ?2", &[&s, &left])?;
            let over =
                tx.execute("DELETE FROM logs WHERE strategy = ?1 AND id <= ?2 AND id < ?3", params![s, kept, nth])?;
            if over > 0 {
                *by_strategy.entry(s).or_default() += over as u64;
            }
            left -= over as i64;
            capped += over;
        }
    }
    if aged + capped > 0 {
        tracing::info!(aged, capped, "pruned log rows");
    }
    Ok((by_strategy, left <= 0))
}

impl Reader {
    /// The strategy's alerts received at or after `since_ms`, or logged after the log row `own_log` (an outbox row's
    /// alert's, [`later_alerts`]), one each (its first and last kept log rows and its time), oldest first: what a
    /// failed order's retry is judged against ([`later_alert`]). Every alert counts whatever it was decided into
    /// (processed, rejected, inactive, an error, a refused delivery), but a duplicate (a resend of one already
    /// decided) and the rows a delivery or a sync writes (`[]` alerts under `processed`), which are not alerts. An
    /// alert's log rows share its time and alerts. Written twice, for SQLite and PostgreSQL.
    pub fn alerts_since(
        &self,
        strategy: &str,
        since_ms: i64,
        own_log: Option<i64>,
    ) -> Result<Vec<AlertSpan>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                "SELECT min(id), max(id), ts_ms, bool_and(decision = 'error' AND http_status = 500) FROM logs
                 WHERE strategy = $1 AND (ts_ms >= $2 OR id >= $3) AND decision <> 'duplicate'
                   AND NOT (decision = 'processed' AND alerts = '[]')
                 GROUP BY ts_ms, alerts ORDER BY min(id)",
                &[&strategy, &since_ms, &own_log.unwrap_or(i64::MAX)],
                |r| {
                    Ok(AlertSpan {
                        log_id: r.try_get(0)?,
                        last_log_id: r.try_get(1)?,
                        ts_ms: r.try_get(2)?,
                        by_time: r.try_get(3)?,
                    })
                },
            );
        }
        self.query(
            "SELECT min(id), max(id), ts_ms, min(decision = 'error' AND http_status = 500) FROM logs
             WHERE strategy = ?1 AND (ts_ms >= ?2 OR id >= ?3) AND decision <> 'duplicate'
               AND NOT (decision = 'processed' AND alerts = '[]')
             GROUP BY ts_ms, alerts ORDER BY min(id)",
            params![strategy, since_ms, own_log.unwrap_or(i64::MAX)],
            |r| Ok(AlertSpan { log_id: r.get(0)?, last_log_id: r.get(1)?, ts_ms: r.get(2)?, by_time: r.get(3)? }),
        )
    }

    /// The strategy's alerts decided (processed or rejected) and received at or after `since_ms`, or logged after the
    /// log row `own_log` ([`later_alerts`]), oldest first, one per alert (its first and last kept log rows): what an
    /// entry still waiting in the outbox is checked against before it is sent (`crate::dispatch::overtaken`).
    /// Alerts refused before a decision (unknown strategy, too many, a duplicate, an unreadable body) and the rows a
    /// delivery or a sync writes (`[]` alerts) are not among them. Written twice, for SQLite and PostgreSQL.
    pub fn decided_alerts_since(
        &self,
        strategy: &str,
        since_ms: i64,
        own_log: Option<i64>,
    ) -> Result<Vec<DecidedAlert>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read(
                "SELECT min(id), max(id), ts_ms, alerts FROM logs
                 WHERE strategy = $1 AND (ts_ms >= $2 OR id >= $3) AND decision IN ('processed', 'rejected')
                   AND alerts <> '[]'
                 GROUP BY ts_ms, alerts ORDER BY min(id)",
                &[&strategy, &since_ms, &own_log.unwrap_or(i64::MAX)],
                |r| {
                    Ok(DecidedAlert {
                        log_id: r.try_get(0)?,
                        last_log_id: r.try_get(1)?,
                        ts_ms: r.try_get(2)?,
                        alerts: r.try_get(3)?,
                    })
                },
            );
        }
        self.query(
            "SELECT min(id), max(id), ts_ms, alerts FROM logs
             WHERE strategy = ?1 AND (ts_ms >= ?2 OR id >= ?3) AND decision IN ('processed', 'rejected')
               AND alerts <> '[]'
             GROUP BY ts_ms, alerts ORDER BY min(id)",
            params![strategy, since_ms, own_log.unwrap_or(i64::MAX)],
            |r| Ok(DecidedAlert { log_id: r.get(0)?, last_log_id: r.get(1)?, ts_ms: r.get(2)?, alerts: r.get(3)? }),
        )
    }

    /// A page of one strategy's log rows, newest first.
    pub fn logs(&self, strategy: &str, q: &LogQuery) -> Result<Vec<LogRow>, StoreError> {
        let levels: &[&str] = match q.min_level {
            None | Some(Level::Info) => &["INFO", "WARN", "ERROR"],
            Some(Level::Warn) => &["WARN", "ERROR"],
            Some(Level::Error) => &["ERROR"],
        };
        let level = |i: usize| levels.get(i).copied().unwrap_or(levels[0]);
        if let Some(pg) = self.pg() {
            return pg.read(
                "SELECT id, ts_ms, level, message, decision, http_status, alerts FROM logs
                 WHERE strategy = $1 AND id < $2 AND ts_ms >= $3 AND ts_ms < $4
                   AND level IN ($5, $6, $7)
                   AND ($9::TEXT IS NULL OR decision = $9)
                   AND ($10::TEXT IS NULL OR strpos(message, $10) > 0 OR strpos(alerts, $10) > 0)
                 ORDER BY id DESC LIMIT $8",
                &[
                    &strategy,
                    &q.before_id.unwrap_or(i64::MAX),
                    &q.since.unwrap_or(i64::MIN),
                    &q.until.unwrap_or(i64::MAX),
                    &level(0),
                    &level(1),
                    &level(2),
                    &i64::from(q.limit),
                    &q.decision,
                    &q.text,
                ],
                |r| {
                    let alerts: String = r.try_get(6)?;
                    let status: i32 = r.try_get(5)?;
                    Ok(LogRow {
                        id: r.try_get(0)?,
                        ts_ms: r.try_get(1)?,
                        level: r.try_get(2)?,
                        message: r.try_get(3)?,
                        decision: r.try_get(4)?,
                        http_status: u16::try_from(status).unwrap_or(0),
                        alerts: serde_json::from_str(&alerts).unwrap_or(serde_json::Value::Null),
                    })
                },
            );
        }
        self.query(
            "SELECT id, ts_ms, level, message, decision, http_status, alerts FROM logs
             WHERE strategy = ?1 AND id < ?2 AND ts_ms >= ?3 AND ts_ms < ?4
               AND level IN (?5, ?6, ?7)
               AND (?9 IS NULL OR decision = ?9)
               AND (?10 IS NULL OR instr(message, ?10) > 0 OR instr(alerts, ?10) > 0)
             ORDER BY id DESC LIMIT ?8",
            params![
                strategy,
                q.before_id.unwrap_or(i64::MAX),
                q.since.unwrap_or(i64::MIN),
                q.until.unwrap_or(i64::MAX),
                level(0),
                level(1),
                level(2),
                q.limit,
                q.decision,
                q.text
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The statement [`CAP`] replaced, which says "the strategy's oldest ?2 rows" in the plainest terms.
    const BY_SUBQUERY: &str =
        "DELETE FROM logs WHERE id IN (SELECT id FROM logs WHERE strategy = ?1 ORDER BY id LIMIT ?2)";

    fn table(strategies: &[u8]) -> rusqlite::Connection {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(SCHEMA).unwrap();
        for (i, s) in strategies.iter().enumerate() {
            c.execute(
                "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 VALUES (?1, ?2, 'INFO', 'm', 'processed', 200, '[]')",
                params![i as i64, format!("s{s}")],
            )
            .unwrap();
        }
        c
    }

    fn left(c: &rusqlite::Connection) -> Vec<(i64, String)> {
        let mut st = c.prepare("SELECT id, strategy FROM logs ORDER BY id").unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().collect::<rusqlite::Result<_>>().unwrap()
    }

    /// The same rows go as with the plain statement: strategies' rows interleaved, ids with gaps, limits below,
    /// at and above a strategy's row count; 1,000 tables drawn from a fixed seed.
    #[test]
    fn the_cap_deletes_what_the_subquery_deleted() {
        let mut draw = super::super::tests::draws(0x9e37_79b9_7f4a_7c15);
        let mut kept_some = 0;
        for case in 0..1000 {
            let strategies: Vec<u8> = (0..draw(50)).map(|_| draw(4) as u8).collect();
            let (new, old) = (table(&strategies), table(&strategies));
            for id in 1..=strategies.len() as i64 {
                if draw(5) == 0 {
                    for c in [&new, &old] {
                        c.execute("DELETE FROM logs WHERE id = ?1", params![id]).unwrap();
                    }
                }
            }
            let (strategy, over) = (format!("s{}", draw(5)), 1 + draw(20) as i64);
            let n = new.execute(CAP, params![strategy, over]).unwrap();
            let m = old.execute(BY_SUBQUERY, params![strategy, over]).unwrap();
            assert_eq!((n, left(&new)), (m, left(&old)), "case {case}: {strategies:?} {strategy} {over}");
            kept_some += usize::from(n > 0 && left(&new).iter().any(|(_, s)| *s == strategy));
        }
        assert!(kept_some > 100, "cases that deleted some of a strategy's rows and kept others: {kept_some}");
    }

    #[test]
    fn the_cap_is_a_range_of_the_strategys_index() {
        let c = table(&[0, 1, 0]);
        let plan = |sql: &str| super::super::tests::query_plan(&c, sql, params!["s0", 2]);
        let new = plan(CAP);
        assert!(new.iter().all(|p| !p.contains("TEMP B-TREE") && !p.contains("LIST SUBQUERY")), "{new:?}");
        assert!(new.iter().any(|p| p.contains("logs_by_strategy (strategy=? AND id<?)")), "{new:?}");
        assert!(plan(BY_SUBQUERY).iter().any(|p| p.contains("LIST SUBQUERY")));
    }

    #[test]
    fn a_refusal_rows_count_is_read_back_from_its_message() {
        for status in [429, 413, 503, 408, 400] {
            for count in [1, 61] {
                let r = Refusals { strategy: "s".into(), since_ms: 0, count, limit: 60, update: false, status };
                assert_eq!(Refusals::count_in(&r.message()), count as i64, "{}", r.message());
            }
        }
    }
}
