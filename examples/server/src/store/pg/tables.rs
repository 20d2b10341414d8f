//! The writer's statements on PostgreSQL, one per [`Op`], mirroring the SQLite tables' files.

use super::super::logs::{LogEntry, Refusals, Retention};
use super::super::notifications::Sent;
use super::super::outbox::OutboxRow;
use super::super::windows::{Mark, Windows};
use super::super::{Op, RowCaps};
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::Error;

type Param<'a> = dyn ToSql + Sync + 'a;

/// The advisory lock a server holds while it prunes (the others skip that minute's prune).
const PRUNE_LOCK: i64 = 0x5357_485f_5052_554e;

/// Statuses of outbox rows that are finished (and may be deleted by age or for the row cap).
const FINISHED: &str = "('done', 'failed', 'expired', 'dismissed')";

/// Applies one job's write inside the batch's transaction.
pub(super) async fn apply(tx: &Transaction<'_>, op: &Op, caps: RowCaps) -> Result<(), Error> {
    match op {
        Op::Log(entry, mark) => {
            insert_logs(tx, entry).await?;
            if let Some(m) = mark {
                store_mark(tx, m).await?;
            }
        }
        Op::Refusals(r) => upsert_refusals(tx, r).await?,
        Op::Outbox { mark, rows, log } => {
            insert_logs(tx, log).await?;
            store_mark(tx, mark).await?;
            insert_rows(tx, rows).await?;
        }
        Op::Sending(id) => {
            tx.execute("UPDATE outbox SET status = 'sending' WHERE id = $1", &[id]).await?;
        }
        Op::Requeue(id) => {
            tx.execute(
                "UPDATE outbox SET status = 'pending', done_ms = NULL WHERE id = $1 AND status = 'failed'",
                &[id],
            )
            .await?;
        }
        Op::Dismiss(id) => {
            tx.execute("UPDATE outbox SET status = 'dismissed' WHERE id = $1 AND status = 'failed'", &[id]).await?;
        }
        Op::Notify { strategy, event, text, now_ms } => {
            tx.execute(
                "INSERT INTO notifications (strategy, event, text, created_ms, status, next_ms)
                 VALUES ($1, $2, $3, $4, 'pending', $4)",
                &[strategy, event, text, now_ms],
            )
            .await?;
        }
        Op::NotifySent(id, sent) => notification_sent(tx, *id, sent).await?,
        Op::Delivered(run) => {
            insert_logs(tx, run.iter().filter_map(|d| d.log.as_ref())).await?;
            for d in run.iter() {
                let done_ms = d.log.as_ref().map(|l| l.ts_ms);
                tx.execute(
                    "UPDATE outbox SET status = $2, result = $3, done_ms = $4 WHERE id = $1",
                    &[&d.id, &d.status, &d.result, &done_ms],
                )
                .await?;
                if let Some((strategy, bot, state)) = &d.state {
                    set_bot_state(tx, strategy, bot, state).await?;
                }
            }
        }
        Op::BotState { strategy, bot, state } => set_bot_state(tx, strategy, bot, state).await?,
        Op::SetToken { strategy, token, ts_ms } => {
            tx.execute(
                "INSERT INTO token_overrides (strategy, token_hash, rotated_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (strategy) DO UPDATE SET token_hash = EXCLUDED.token_hash,
                     rotated_ms = EXCLUDED.rotated_ms, version = nextval('token_versions')",
                &[strategy, token, ts_ms],
            )
            .await?;
        }
        Op::Prune { retention, windows, now_ms } => {
            prune_logs(tx, *retention, *now_ms).await?;
            prune_windows(tx, *retention, *windows, *now_ms, caps).await?;
        }
        Op::PruneWindows { retention, windows, now_ms } => {
            prune_windows(tx, *retention, *windows, *now_ms, caps).await?;
        }
        Op::Close => {}
    }
    Ok(())
}

/// Outcomes' log rows in one statement, in order.
pub(super) async fn insert_logs<'e>(
    tx: &Transaction<'_>,
    entries: impl IntoIterator<Item = &'e LogEntry>,
) -> Result<(), Error> {
    let mut ts = Vec::new();
    let (mut strategy, mut level, mut message, mut decision, mut status, mut alerts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for e in entries {
        for (l, m) in &e.records {
            ts.push(e.ts_ms);
            strategy.push(e.strategy.as_str());
            level.push(l.as_str());
            message.push(m.as_str());
            decision.push(e.decision);
            status.push(i32::from(e.http_status));
            alerts.push(e.alerts.as_str());
        }
    }
    if ts.is_empty() {
        return Ok(());
    }
    let st = tx
        .prepare_cached(
            "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
             SELECT t, s, l, m, d, h, a
             FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::INTEGER[], $7::TEXT[])
                  WITH ORDINALITY AS r (t, s, l, m, d, h, a, n)
             ORDER BY n",
        )
        .await?;
    tx.execute(&st, &[&ts, &strategy, &level, &message, &decision, &status, &alerts]).await?;
    Ok(())
}

/// Outbox rows (status `pending`) in one statement. Their ids are drawn first and given out in ascending order,
/// so that each bot's rows are sent in the order the engine put them (a cancel before the order that
/// replaces it, a close before the new side), whatever order the insert itself runs in.
pub(super) async fn insert_rows<'r>(
    tx: &Transaction<'_>,
    rows: impl IntoIterator<Item = &'r OutboxRow>,
) -> Result<(), Error> {
    let rows: Vec<&OutboxRow> = rows.into_iter().collect();
    if rows.is_empty() {
        return Ok(());
    }
    let draw = tx
        .prepare_cached("SELECT nextval(pg_get_serial_sequence('outbox', 'id')) FROM generate_series(1, $1::BIGINT)")
        .await?;
    let n = i64::try_from(rows.len()).unwrap_or(i64::MAX);
    let mut ids: Vec<i64> = tx.query(&draw, &[&n]).await?.iter().map(|r| r.get(0)).collect();
    ids.sort_unstable();
    let text = |f: fn(&OutboxRow) -> Option<&str>| rows.iter().map(|r| f(r)).collect::<Vec<Option<&str>>>();
    let keeps: Vec<Option<bool>> = rows.iter().map(|r| r.keeps_order_id).collect();
    let body: Vec<&[u8]> = rows.iter().map(|r| r.body.as_slice()).collect();
    let created: Vec<i64> = rows.iter().map(|r| r.created_ms).collect();
    let deadline: Vec<Option<i64>> = rows.iter().map(|r| r.deadline_ms).collect();
    let st = tx
        .prepare_cached(
            "INSERT INTO outbox (id, strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id, method,
                                 path, content_type, body, meaning, status, created_ms, after_coid, deadline_ms)
             SELECT id, s, b, br, k, c, o, ko, m, p, ct, bd, mn, 'pending', cr, af, dl
             FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $5::TEXT[], $6::TEXT[], $7::TEXT[],
                         $8::BOOLEAN[], $9::TEXT[], $10::TEXT[], $11::TEXT[], $12::BYTEA[], $13::TEXT[],
                         $14::BIGINT[], $15::TEXT[], $16::BIGINT[])
                  AS r (id, s, b, br, k, c, o, ko, m, p, ct, bd, mn, cr, af, dl)",
        )
        .await?;
    tx.execute(
        &st,
        &[
            &ids,
            &text(|r| Some(&r.strategy)),
            &text(|r| Some(&r.bot)),
            &text(|r| Some(&r.broker)),
            &text(|r| Some(&r.kind)),
            &text(|r| Some(&r.client_order_id)),
            &text(|r| r.order_id.as_deref()),
            &keeps,
            &text(|r| Some(&r.method)),
            &text(|r| Some(&r.path)),
            &text(|r| r.content_type.as_deref()),
            &body,
            &text(|r| r.meaning.as_deref()),
            &created,
            &text(|r| r.after.as_deref()),
            &deadline,
        ],
    )
    .await?;
    Ok(())
}

/// One rate mark at `now_ms` per strategy named (a strategy named twice is counted twice), and their second's
/// counts.
pub(super) async fn insert_marks(tx: &Transaction<'_>, counted: &[&str], now_ms: i64) -> Result<(), Error> {
    if counted.is_empty() {
        return Ok(());
    }
    let (mark, second) = tokio::try_join!(
        tx.prepare_cached("INSERT INTO rate_marks (strategy, ts_ms) SELECT s, $2 FROM unnest($1::TEXT[]) AS s"),
        tx.prepare_cached(
            "INSERT INTO rate_seconds (strategy, second, n)
             SELECT s, $2::BIGINT / 1000, count(*) FROM unnest($1::TEXT[]) AS s GROUP BY s
             ON CONFLICT (strategy, second) DO UPDATE SET n = rate_seconds.n + EXCLUDED.n"
        ),
    )?;
    let p: [&Param<'_>; 2] = [&counted, &now_ms];
    tokio::try_join!(tx.execute(&mark, &p), tx.execute(&second, &p))?;
    Ok(())
}

/// A window mark queued by the writer (not the webhook's own transaction, which counts and claims under the
/// strategy's lock): its rate mark, and its key if no row holds it yet.
async fn store_mark(tx: &Transaction<'_>, m: &Mark) -> Result<(), Error> {
    insert_marks(tx, &[m.strategy.as_str()], m.ts_ms).await?;
    if let Some(key) = &m.key {
        tx.execute(
            "INSERT INTO dedup_keys (strategy, key, ts_ms) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&m.strategy, key, &m.ts_ms],
        )
        .await?;
    }
    Ok(())
}

/// Stores (or replaces) a bot's state, with a new version that other servers see.
pub(super) async fn set_bot_state(tx: &Transaction<'_>, strategy: &str, bot: &str, state: &str) -> Result<(), Error> {
    tx.execute(
        "INSERT INTO bot_state (strategy, bot, state) VALUES ($1, $2, $3)
         ON CONFLICT (strategy, bot) DO UPDATE SET state = EXCLUDED.state, version = nextval('bot_state_versions')",
        &[&strategy, &bot, &state],
    )
    .await?;
    Ok(())
}

async fn upsert_refusals(tx: &Transaction<'_>, r: &Refusals) -> Result<(), Error> {
    let message = r.message();
    if r.update {
        let n = tx
            .execute(
                "UPDATE logs SET message = $3 WHERE id =
                     (SELECT id FROM logs WHERE strategy = $1 AND ts_ms = $2 AND http_status = 429
                      ORDER BY id DESC LIMIT 1)",
                &[&r.strategy, &r.since_ms, &message],
            )
            .await?;
        if n > 0 {
            return Ok(());
        }
    }
    tx.execute(
        "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
         VALUES ($1, $2, 'WARN', $3, 'error', 429, '[]')",
        &[&r.since_ms, &r.strategy, &message],
    )
    .await?;
    Ok(())
}

async fn notification_sent(tx: &Transaction<'_>, id: i64, s: &Sent) -> Result<(), Error> {
    match s {
        Sent::Done => {
            tx.execute(
                "UPDATE notifications SET status = 'sent', attempts = attempts + 1, last_error = NULL,
                     claimed_until = NULL WHERE id = $1",
                &[&id],
            )
            .await?
        }
        Sent::Retry { next_ms, error } => {
            tx.execute(
                "UPDATE notifications SET attempts = attempts + 1, next_ms = $2, last_error = $3,
                     claimed_until = NULL WHERE id = $1",
                &[&id, next_ms, error],
            )
            .await?
        }
        Sent::GaveUp { error } => {
            tx.execute(
                "UPDATE notifications SET status = 'failed', attempts = attempts + 1, last_error = $2,
                     claimed_until = NULL WHERE id = $1",
                &[&id, error],
            )
            .await?
        }
    };
    Ok(())
}

/// Deletes log rows older than the retention, and each strategy's rows beyond its newest
/// `max_rows_per_strategy`.
async fn prune_logs(tx: &Transaction<'_>, r: Retention, now_ms: i64) -> Result<(), Error> {
    let ours: bool = tx.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&PRUNE_LOCK]).await?.get(0);
    if !ours {
        return Ok(());
    }
    let aged = tx.execute("DELETE FROM logs WHERE ts_ms < $1", &[&now_ms.saturating_sub(r.max_age_ms)]).await?;
    let keep = i64::try_from(r.max_rows_per_strategy).unwrap_or(i64::MAX);
    let capped = tx
        .execute(
            "DELETE FROM logs WHERE id IN (SELECT id FROM
                 (SELECT id, row_number() OVER (PARTITION BY strategy ORDER BY id DESC) AS n FROM logs) AS ranked
              WHERE n > $1)",
            &[&keep],
        )
        .await?;
    if aged + capped > 0 {
        tracing::info!(aged, capped, "pruned log rows");
    }
    Ok(())
}

/// Deletes expired dedup keys and rate marks, old finished outbox rows and notifications, and holds the row
/// caps. On PostgreSQL the caps are held here, every minute, rather than at each write: a strategy's rows grow
/// by at most a minute of its rate limit in between.
async fn prune_windows(
    tx: &Transaction<'_>,
    r: Retention,
    w: Windows,
    now_ms: i64,
    caps: RowCaps,
) -> Result<(), Error> {
    // Every server prunes every minute; one at a time is enough, and the others skip their turn.
    let ours: bool = tx.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&PRUNE_LOCK]).await?.get(0);
    if !ours {
        return Ok(());
    }
    let keys = tx.execute("DELETE FROM dedup_keys WHERE ts_ms <= $1", &[&now_ms.saturating_sub(w.dedup_ms)]).await?;
    let marks = tx.execute("DELETE FROM rate_marks WHERE ts_ms <= $1", &[&now_ms.saturating_sub(w.rate_ms)]).await?;
    tx.execute("DELETE FROM rate_seconds WHERE second < $1::BIGINT / 1000", &[&now_ms.saturating_sub(w.rate_ms)])
        .await?;
    let cutoff = now_ms.saturating_sub(r.max_age_ms);
    let sent =
        tx.execute(&format!("DELETE FROM outbox WHERE status IN {FINISHED} AND created_ms < $1"), &[&cutoff]).await?;
    tx.execute("DELETE FROM notifications WHERE status <> 'pending' AND created_ms < $1", &[&cutoff]).await?;
    let keep_logs = i64::try_from(caps.log_rows).unwrap_or(i64::MAX);
    tx.execute(
        "DELETE FROM logs WHERE id IN (SELECT id FROM
             (SELECT id, row_number() OVER (PARTITION BY strategy ORDER BY id DESC) AS n FROM logs) AS ranked
          WHERE n > $1)",
        &[&keep_logs],
    )
    .await?;
    let keep_outbox = i64::try_from(caps.outbox_rows).unwrap_or(i64::MAX);
    tx.execute(
        &format!(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM
                 (SELECT id, status, row_number() OVER (PARTITION BY strategy ORDER BY id DESC) AS n FROM outbox)
                 AS ranked WHERE n > $1 AND status IN {FINISHED})"
        ),
        &[&keep_outbox],
    )
    .await?;
    if keys + marks + sent > 0 {
        tracing::info!(keys, marks, sent, "pruned expired dedup keys, rate marks and finished outbox rows");
    }
    Ok(())
}
