//! The writer's statements on PostgreSQL, one per [`Op`], mirroring the SQLite tables' files.

use super::super::logs::{LogEntry, Refusals, Retention};
use super::super::notifications::Sent;
use super::super::outbox::OutboxRow;
use super::super::windows::{Mark, Windows};
use super::super::{Op, RowCaps};
use deadpool_postgres::{GenericClient, Transaction};
use std::borrow::Cow;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Error, Statement};

type Param<'a> = dyn ToSql + Sync + 'a;

/// The advisory lock a server holds while it prunes (the others skip that minute's prune).
const PRUNE_LOCK: i64 = 0x5357_485f_5052_554e;

/// Statuses of outbox rows that are finished (and may be deleted by age or for the row cap).
const FINISHED: &str = "('done', 'failed', 'expired', 'dismissed')";

/// Applies one job's write inside the batch's transaction; returns the (strategy, bot, version) of each bot state
/// it wrote.
pub(super) async fn apply(tx: &Transaction<'_>, op: &Op) -> Result<Vec<(String, String, i64)>, Error> {
    let mut versions = Vec::new();
    match op {
        Op::Log(entry, mark) => {
            let marks = mark.iter().map(|m| (m.strategy.as_str(), m.ts_ms)).collect();
            append(tx, &Appends { marks, logs: entry.iter().collect(), ..Appends::default() }).await?;
            if let Some(m) = mark {
                store_key(tx, m).await?;
            }
        }
        Op::Refusals(r) => upsert_refusals(tx, r).await?,
        Op::Outbox { mark, rows, log } => {
            let marks = vec![(mark.strategy.as_str(), mark.ts_ms)];
            let row_logs = vec![log.as_ref().map(|_| 0); rows.len()];
            let (logs, rows) = (log.iter().collect(), rows.iter().collect());
            append(tx, &Appends { marks, logs, rows, row_logs, ..Appends::default() }).await?;
            store_key(tx, mark).await?;
        }
        Op::Sending(id) => {
            // Only an open row: a late write from a server that lost the bot's lease must not reopen a row the
            // server that took the bot over has finished.
            tx.execute(
                "UPDATE outbox SET status = 'sending' WHERE id = $1 AND status IN ('pending', 'sending')",
                &[id],
            )
            .await?;
        }
        Op::Unsent { id, holder } => {
            // Only a row still `sending`: one finished since (by a server that took the bot over) stays finished.
            // And only while `holder` holds the bot's lease (the lease row held shared until the commit): written
            // late, after a peer took the bot over and marked the row `sending` for its own attempt, it undid that
            // mark, and should the peer stop before its result, the next holder sent the row as never tried.
            tx.execute(
                "UPDATE outbox SET status = 'pending' WHERE id = $1 AND status = 'sending'
                   AND ($2::TEXT IS NULL OR EXISTS (SELECT 1 FROM bot_leases AS l
                                                    WHERE l.strategy = outbox.strategy AND l.bot = outbox.bot
                                                      AND l.holder = $2 FOR SHARE))",
                &[id, holder],
            )
            .await?;
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
                &[strategy, event, &storable(text), now_ms],
            )
            .await?;
        }
        Op::NotifySent(id, sent) => notification_sent(tx, *id, sent).await?,
        Op::Delivered(run) => {
            // Only rows still open take a result: one another server has finished keeps its result, and the
            // late one leaves no log row or bot state. Such a result comes from a server that lost the bot's
            // lease after it got it (its commit held up while PostgreSQL was out of its reach), or from a commit
            // retried after one whose answer was lost; written, it could overwrite the new holder's `done` with
            // a `failed` that the trader re-queues, doubling the order.
            let mut logs = Vec::with_capacity(run.len());
            let mut states = Vec::new();
            for d in run.iter() {
                let done_ms = d.log.as_ref().map(|l| l.ts_ms);
                let n = tx
                    .execute(
                        "UPDATE outbox SET status = $2, result = $3, done_ms = $4
                         WHERE id = $1 AND status IN ('pending', 'sending')",
                        &[&d.id, &d.status, &storable(&d.result), &done_ms],
                    )
                    .await?;
                if n == 0 {
                    tracing::warn!(
                        id = d.id,
                        "a delivery's result came after the row was finished elsewhere; not recorded"
                    );
                    continue;
                }
                logs.extend(d.log.as_ref());
                states.extend(d.state.as_ref());
            }
            append(tx, &Appends { logs, ..Appends::default() }).await?;
            for (strategy, bot, state) in states {
                versions.push(set_bot_state(tx, strategy, bot, state).await?);
            }
        }
        Op::BotState { strategy, bot, state, held: None } => {
            versions.push(set_bot_state(tx, strategy, bot, state).await?)
        }
        Op::BotState { strategy, bot, state, held: Some((holder, stored)) } => {
            // Held shared until the commit: no server takes the bot over in between, and one that took it over
            // before keeps its state (a server paused past its lease while it read the account stored its reads
            // over the new holder's, a position closed there coming back).
            let lease = tx
                .query_opt(
                    "SELECT 1 FROM bot_leases WHERE strategy = $1 AND bot = $2 AND holder = $3 FOR SHARE",
                    &[strategy, bot, holder],
                )
                .await?;
            if lease.is_some() {
                versions.push(set_bot_state(tx, strategy, bot, state).await?);
                stored.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Op::SetToken { strategy, token, retired, ts_ms, applied } => {
            // Only over the token this server replaces: two servers rotating at once both replaced the same one,
            // the second's commit overwrote the first's new token, answered 200 to its operator yet never live
            // (nor retired). A first rotation racing another finds the row the other inserted and leaves it.
            let replaced = tx
                .execute(
                    "INSERT INTO token_overrides (strategy, token_hash, rotated_ms) VALUES ($1, $2, $3)
                     ON CONFLICT (strategy) DO UPDATE SET token_hash = EXCLUDED.token_hash,
                         rotated_ms = EXCLUDED.rotated_ms, version = nextval('token_versions')
                     WHERE token_overrides.token_hash = $4",
                    &[strategy, token, ts_ms, retired],
                )
                .await?;
            if replaced == 0 {
                return Ok(versions);
            }
            applied.store(true, std::sync::atomic::Ordering::Relaxed);
            tx.execute(
                "INSERT INTO retired_tokens (token_hash, strategy, retired_ms) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[retired, strategy, ts_ms],
            )
            .await?;
        }
        Op::PruneWindows { retention, windows, now_ms } => {
            prune_windows(tx, *retention, *windows, prune_time(tx, *now_ms).await?).await?;
        }
        // SQLite's rounds; never queued here: [`prune`] runs on a connection of its own, in chunks, since in the
        // writer's transaction it held every write behind it.
        Op::PruneLogs { .. } => {}
        Op::Close => {}
    }
    Ok(versions)
}

/// What a transaction appends: rate marks, dedup keys given back, log rows and outbox rows, all written by
/// [`append`] in one statement, so a transaction pays one round trip for them however many there are.
#[derive(Default)]
pub(super) struct Appends<'a> {
    /// Deliveries counted against their strategies' rate windows: (strategy, time), one per delivery.
    pub marks: Vec<(&'a str, i64)>,
    /// Dedup keys claimed and given back: (strategy, key hex).
    pub unclaim: Vec<(&'a str, &'a str)>,
    /// Log entries, in order.
    pub logs: Vec<&'a LogEntry>,
    /// Outbox rows (status `pending`), in the order they are to be sent.
    pub rows: Vec<&'a OutboxRow>,
    /// By row, the index in `logs` of the entry of the alert that wrote it, whose first log row's id the row keeps
    /// (`alert_log_id`). Missing or `None`: none.
    pub row_logs: Vec<Option<usize>>,
}

/// The statement of [`append`]. Rate marks are counted per strategy and instant (a batch counts all its
/// deliveries at one instant: one row for them), and per second. Log rows are inserted in order, so their ids
/// keep it. Outbox ids are drawn first and given out in ascending order, so that each bot's rows are sent in the
/// order the engine put them (a cancel before the order that replaces it, a close before the new side),
/// whatever order the insert itself runs in. So are the log rows' ids, so that an outbox row keeps the id of its
/// alert's first log row (`$28`: that row's place among the log rows, from 1).
const APPEND: &str = "
WITH marks AS (
    INSERT INTO rate_marks (strategy, ts_ms, n)
    SELECT s, t, count(*) FROM unnest($1::TEXT[], $2::BIGINT[]) AS m (s, t) GROUP BY s, t
), seconds AS (
    INSERT INTO rate_seconds (strategy, second, n)
    SELECT s, t / 1000, count(*) FROM unnest($1::TEXT[], $2::BIGINT[]) AS m (s, t) GROUP BY s, t / 1000
    ON CONFLICT (strategy, second) DO UPDATE SET n = rate_seconds.n + EXCLUDED.n
), given_back AS (
    DELETE FROM dedup_keys USING unnest($3::TEXT[], $4::TEXT[]) AS u (d, k) WHERE digest = u.d::UUID AND key = u.k
), log_ids AS (
    SELECT id, row_number() OVER (ORDER BY id) AS n
    FROM (SELECT nextval(pg_get_serial_sequence('logs', 'id')) AS id
          FROM generate_series(1, cardinality($5::BIGINT[]))) AS drawn
), logged AS (
    INSERT INTO logs (id, ts_ms, strategy, level, message, decision, http_status, alerts)
    SELECT log_ids.id, t, s, l, m, d, h, a
    FROM unnest($5::BIGINT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::INTEGER[], $11::TEXT[])
         WITH ORDINALITY AS r (t, s, l, m, d, h, a, n)
    JOIN log_ids USING (n)
    ORDER BY n
), ids AS (
    SELECT id, row_number() OVER (ORDER BY id) AS n
    FROM (SELECT nextval(pg_get_serial_sequence('outbox', 'id')) AS id
          FROM generate_series(1, cardinality($12::TEXT[]))) AS drawn
), queued AS (
    INSERT INTO outbox (id, strategy, bot, broker, kind, client_order_id, order_id, keeps_order_id, method, path,
                        content_type, body, meaning, status, created_ms, after_coid, deadline_ms, target,
                        alert_log_id)
    SELECT ids.id, s, b, br, k, c, o, ko, m, p, ct, bd, mn, 'pending', cr, af, dl, tg,
           (SELECT log_ids.id FROM log_ids WHERE log_ids.n = r.ln)
    FROM unnest($12::TEXT[], $13::TEXT[], $14::TEXT[], $15::TEXT[], $16::TEXT[], $17::TEXT[], $18::BOOLEAN[],
                $19::TEXT[], $20::TEXT[], $21::TEXT[], $22::BYTEA[], $23::TEXT[], $24::BIGINT[], $25::TEXT[],
                $26::BIGINT[], $27::TEXT[], $28::BIGINT[])
         WITH ORDINALITY AS r (s, b, br, k, c, o, ko, m, p, ct, bd, mn, cr, af, dl, tg, ln, n)
    JOIN ids USING (n)
)
SELECT 1";

/// The prepared statement of [`append`] (cached per connection).
pub(super) async fn append_statement(c: &impl GenericClient) -> Result<Statement, Error> {
    c.prepare_cached(APPEND).await
}

/// Writes `a` in one statement (none when it is empty).
pub(super) async fn append(c: &impl GenericClient, a: &Appends<'_>) -> Result<(), Error> {
    let st = c.prepare_cached(APPEND).await?;
    append_with(c, &st, a).await
}

/// [`append`] with its statement prepared: the statement is sent when the returned future is first polled.
pub(super) async fn append_with(c: &impl GenericClient, st: &Statement, a: &Appends<'_>) -> Result<(), Error> {
    if a.marks.is_empty() && a.unclaim.is_empty() && a.logs.is_empty() && a.rows.is_empty() {
        return Ok(());
    }
    let (mark_s, mark_t): (Vec<&str>, Vec<i64>) = a.marks.iter().copied().unzip();
    let gone_d: Vec<String> = a.unclaim.iter().map(|(s, k)| digest(s, k)).collect();
    let gone_k: Vec<&str> = a.unclaim.iter().map(|(_, k)| *k).collect();
    let mut ts = Vec::new();
    let (mut strategy, mut level, mut message, mut decision, mut status, mut alerts) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Each entry's first log row's place among the log rows (from 1), `None` for an entry of no rows.
    let mut first_rows: Vec<Option<i64>> = Vec::with_capacity(a.logs.len());
    for e in &a.logs {
        first_rows.push((!e.records.is_empty()).then(|| i64::try_from(ts.len()).unwrap_or(i64::MAX) + 1));
        for (l, m) in &e.records {
            ts.push(e.ts_ms);
            strategy.push(e.strategy.as_str());
            level.push(l.as_str());
            message.push(storable(m));
            decision.push(e.decision);
            status.push(i32::from(e.http_status));
            alerts.push(e.alerts.as_str());
        }
    }
    let rows = &a.rows;
    let text = |f: fn(&OutboxRow) -> Option<&str>| rows.iter().map(|r| f(r).map(storable)).collect::<Vec<_>>();
    let keeps: Vec<Option<bool>> = rows.iter().map(|r| r.keeps_order_id).collect();
    let body: Vec<&[u8]> = rows.iter().map(|r| r.body.as_slice()).collect();
    let created: Vec<i64> = rows.iter().map(|r| r.created_ms).collect();
    let deadline: Vec<Option<i64>> = rows.iter().map(|r| r.deadline_ms).collect();
    let row_log: Vec<Option<i64>> = (0..rows.len())
        .map(|i| a.row_logs.get(i).copied().flatten().and_then(|e| first_rows.get(e).copied().flatten()))
        .collect();
    let (r_strategy, r_bot, r_broker, r_kind, r_coid, r_order, r_method, r_path, r_ct, r_meaning, r_after, r_target) = (
        text(|r| Some(&r.strategy)),
        text(|r| Some(&r.bot)),
        text(|r| Some(&r.broker)),
        text(|r| Some(&r.kind)),
        text(|r| Some(&r.client_order_id)),
        text(|r| r.order_id.as_deref()),
        text(|r| Some(&r.method)),
        text(|r| Some(&r.path)),
        text(|r| r.content_type.as_deref()),
        text(|r| r.meaning.as_deref()),
        text(|r| r.after.as_deref()),
        text(|r| r.target.as_deref()),
    );
    let params: [&Param<'_>; 28] = [
        &mark_s,
        &mark_t,
        &gone_d,
        &gone_k,
        &ts,
        &strategy,
        &level,
        &message,
        &decision,
        &status,
        &alerts,
        &r_strategy,
        &r_bot,
        &r_broker,
        &r_kind,
        &r_coid,
        &r_order,
        &keeps,
        &r_method,
        &r_path,
        &r_ct,
        &body,
        &r_meaning,
        &created,
        &r_after,
        &deadline,
        &r_target,
        &row_log,
    ];
    c.execute(st, &params).await?;
    Ok(())
}

/// Text as PostgreSQL takes it: it refuses the NUL character in text, where SQLite keeps it. A sender's `\u0000`
/// reaches log messages (an alert's fields are quoted in them), and a broker's answer reaches a result: refused,
/// it failed the whole transaction, so every alert of a batch, any strategy's, was answered 500, again at each
/// retry, and a delivery's result could never be recorded. Each NUL is stored as U+FFFD.
pub(super) fn storable(s: &str) -> Cow<'_, str> {
    if s.as_bytes().contains(&0) {
        Cow::Owned(s.replace('\0', "\u{FFFD}"))
    } else {
        Cow::Borrowed(s)
    }
}

/// The `dedup_keys` row's key of a strategy's dedup key (hex): the first 16 bytes of SHA-256 over the strategy's
/// length in characters (decimal), a colon, the strategy and the key, as 32 hex digits (a UUID's text). The length
/// keeps two pairs that run together alike apart; migration 7 computed the same for the keys claimed before it.
pub(super) fn digest(strategy: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut h = Sha256::new();
    h.update(strategy.chars().count().to_string());
    h.update(b":");
    h.update(strategy);
    h.update(key);
    let mut out = String::with_capacity(32);
    for b in &h.finalize()[..16] {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// A window mark's key queued by the writer (not the webhook's own transaction, which counts and claims under
/// the strategy's lock), if no row holds it yet; its rate mark is one of the [`Appends`].
async fn store_key(tx: &Transaction<'_>, m: &Mark) -> Result<(), Error> {
    if let Some(key) = &m.key {
        tx.execute(
            "INSERT INTO dedup_keys (digest, strategy, key, ts_ms) VALUES ($4::UUID, $1, $2, $3) ON CONFLICT DO NOTHING",
            &[&m.strategy, key, &m.ts_ms, &digest(&m.strategy, key)],
        )
        .await?;
    }
    Ok(())
}

/// Stores (or replaces) a bot's state, with a new version that other servers see; returns (strategy, bot, version).
pub(super) async fn set_bot_state(
    tx: &Transaction<'_>,
    strategy: &str,
    bot: &str,
    state: &str,
) -> Result<(String, String, i64), Error> {
    let row = tx
        .query_one(
            "INSERT INTO bot_state (strategy, bot, state) VALUES ($1, $2, $3)
             ON CONFLICT (strategy, bot) DO UPDATE SET state = EXCLUDED.state, version = nextval('bot_state_versions')
             RETURNING version",
            &[&strategy, &bot, &state],
        )
        .await?;
    Ok((strategy.to_owned(), bot.to_owned(), row.try_get(0)?))
}

/// The second's rate refusals of a strategy, folded into the row already written for them. `strategy` is in the
/// outer condition too: the logs' one index is (strategy, id) (0006 dropped the key on `id` alone), and `id =`
/// alone scanned every strategy's rows each second of a flood.
const REFUSALS_UPDATE: &str = "UPDATE logs SET message = $3 WHERE strategy = $1 AND id =
     (SELECT id FROM logs WHERE strategy = $1 AND ts_ms = $2 AND http_status = $4 ORDER BY id DESC LIMIT 1)";

async fn upsert_refusals(tx: &Transaction<'_>, r: &Refusals) -> Result<(), Error> {
    let message = r.message();
    if r.update {
        let status = i32::from(r.status);
        let n = tx.execute(REFUSALS_UPDATE, &[&r.strategy, &r.since_ms, &message, &status]).await?;
        if n > 0 {
            return Ok(());
        }
    }
    tx.execute(
        "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
         VALUES ($1, $2, $4, $3, 'error', $5, '[]')",
        &[&r.since_ms, &r.strategy, &message, &r.level(), &i32::from(r.status)],
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
                &[&id, next_ms, &storable(error)],
            )
            .await?
        }
        Sent::GaveUp { error } => {
            tx.execute(
                "UPDATE notifications SET status = 'failed', attempts = attempts + 1, last_error = $2,
                     claimed_until = NULL WHERE id = $1",
                &[&id, &storable(error)],
            )
            .await?
        }
    };
    Ok(())
}

/// How many ids of log rows one of the ten-minute prune's deletes spans at most ([`prune`]): a statement of tens
/// of milliseconds, so that each transaction is short and a stop or an error leaves little undone.
const PRUNE_CHUNK: i64 = 10_000;

/// How long one statement of the log rows' prune may take before its connection is taken for dead. Longer than
/// other statements' bound: these lock nothing another transaction waits for, and right after a large backlog's
/// deletion the cap's cut-offs walk its dead index entries until a vacuum (over 10 s for 1.5M rows on a loaded
/// machine), which failed the prune at that step every time until then.
const LOG_PRUNE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The ten-minute prune, on a pooled connection of its own and outside the writer's queue: the windows (and
/// finished outbox rows, the outbox cap) in one short transaction under the prune lock, then the log rows by age and
/// beyond each strategy's cap in chunks of [`PRUNE_CHUNK`], each its own transaction. Queued as one job of the
/// writer, in its group transaction, a prune of a large backlog (1.5M rows: 4.4 s; up to five minutes allowed) held
/// every write behind it: a delivery's `sending` mark, its result, a rotation; market orders went past their
/// deadline unsent. Log rows are written once and never updated, so deleting them in steps locks nothing another
/// transaction waits for, and a prune cut short (an error, a stop) leaves only rows the next one deletes.
pub(crate) async fn prune(
    pg: &super::Pg,
    r: Retention,
    w: Windows,
    now_ms: i64,
    caps: RowCaps,
) -> Result<(), crate::store::StoreError> {
    use super::{bounded, STATEMENT_WAIT};
    let mut c = pg.client().await?;
    let (ours, now_ms) = bounded(STATEMENT_WAIT * 2, "the prune of the windows", async {
        let tx = c.transaction().await?;
        let now_ms = prune_time(&tx, now_ms).await?;
        let ours = prune_windows(&tx, r, w, now_ms).await?;
        if ours {
            // Never a row finished within `FINISHED_KEPT_MS` (lookups by terms and chains read them).
            let kept = now_ms.saturating_sub(crate::store::outbox::FINISHED_KEPT_MS);
            let only = format!("status IN {FINISHED} AND coalesce(t.done_ms, t.created_ms) < {kept}");
            cap_per_strategy(&tx, "outbox", caps.outbox_rows, &only).await?;
        }
        tx.commit().await?;
        Ok((ours, now_ms))
    })
    .await?;
    if !ours {
        return Ok(());
    }
    let cutoff = now_ms.saturating_sub(r.max_age_ms);
    let mut aged = 0u64;
    // In windows of ids, from the oldest row to the newest aged one: each delete walks at most a chunk of the
    // primary key. Picked by age and ordered by id instead, each chunk read every aged row again.
    let (lo, hi) = bounded(LOG_PRUNE_WAIT, "the prune's aged log rows", async {
        let row = c
            .query_one("SELECT (SELECT min(id) FROM logs), (SELECT max(id) FROM logs WHERE ts_ms < $1)", &[&cutoff])
            .await?;
        Ok((row.get::<_, Option<i64>>(0), row.get::<_, Option<i64>>(1)))
    })
    .await?;
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let mut from = lo.saturating_sub(1);
        while from < hi {
            let to = from.saturating_add(PRUNE_CHUNK).min(hi);
            aged += bounded(LOG_PRUNE_WAIT, "the prune of aged log rows", async {
                Ok(c.execute("DELETE FROM logs WHERE id > $1 AND id <= $2 AND ts_ms < $3", &[&from, &to, &cutoff])
                    .await?)
            })
            .await?;
            from = to;
        }
    }
    let keep = i64::try_from(r.max_rows_per_strategy).unwrap_or(i64::MAX);
    let cuts = bounded(LOG_PRUNE_WAIT, "the log cap's cut-offs", async {
        Ok(c.query(
            "WITH RECURSIVE s AS (
                 (SELECT strategy FROM logs ORDER BY strategy LIMIT 1)
                 UNION ALL
                 SELECT (SELECT t.strategy FROM logs AS t WHERE t.strategy > s.strategy ORDER BY t.strategy LIMIT 1)
                 FROM s WHERE s.strategy IS NOT NULL
             )
             SELECT strategy, id FROM
                 (SELECT strategy,
                         (SELECT t.id FROM logs AS t WHERE t.strategy = s.strategy ORDER BY t.id DESC OFFSET $1 LIMIT 1)
                             AS id
                  FROM s WHERE strategy IS NOT NULL) AS cut
             WHERE id IS NOT NULL",
            &[&keep],
        )
        .await?)
    })
    .await?;
    let mut capped = 0u64;
    for cut in cuts {
        let (strategy, upto): (String, i64) = (cut.get(0), cut.get(1));
        let mut from = i64::MIN;
        loop {
            let ids = bounded(LOG_PRUNE_WAIT, "the prune of capped log rows", async {
                Ok(c.query(
                    "DELETE FROM logs WHERE id IN
                         (SELECT id FROM logs WHERE strategy = $1 AND id > $2 AND id <= $3 ORDER BY id LIMIT $4)
                     RETURNING id",
                    &[&strategy, &from, &upto, &PRUNE_CHUNK],
                )
                .await?)
            })
            .await?;
            capped += ids.len() as u64;
            match ids.iter().map(|r| r.get::<_, i64>(0)).max() {
                Some(last) if ids.len() as i64 == PRUNE_CHUNK => from = last,
                _ => break,
            }
        }
    }
    if aged + capped > 0 {
        tracing::info!(aged, capped, "pruned log rows");
    }
    Ok(())
}

/// The statement deleting finished outbox rows made before `$1` (through `outbox_by_time`, migration 8).
fn outbox_prune() -> String {
    format!("DELETE FROM outbox WHERE status IN {FINISHED} AND created_ms < $1 AND coalesce(done_ms, created_ms) < $2")
}

/// How long past its window a dedup key or rate mark is kept. A batch takes its time before it waits for its
/// strategies' locks (up to `OPEN_WAIT`, 7 s), and this prune takes none of them: cut at the window's edge, it
/// emptied a waiting batch's window of its oldest marks and keys, which then admitted up to a window's worth
/// more and traded a repeat again. The counts and claims read the window by time, so older rows change no
/// answer; the margin also covers the servers' clocks drifting apart by less than it.
const PRUNE_MARGIN_MS: i64 = 60_000;

/// The time a prune cuts by: the earlier of this server's (`now_ms`) and the database's (its transaction's start).
/// The rows are its peers' too, stamped by their clocks: a server whose clock was minutes ahead deleted a key a
/// peer had claimed a moment before, and the sender's retry was claimed again and traded twice. A server behind
/// prunes later, which changes no answer (the counts and claims read the windows by time).
async fn prune_time(tx: &Transaction<'_>, now_ms: i64) -> Result<i64, Error> {
    let db_ms: i64 = tx.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await?.get(0);
    Ok(now_ms.min(db_ms))
}

/// Deletes expired dedup keys and rate marks, old finished outbox rows and notifications, every minute; says
/// whether this server did (the others skip their turn meanwhile). The row caps are held with the logs' prune
/// every ten minutes, not here: finding each strategy's cut-off walks its newest `cap` index entries, tens of
/// milliseconds of a core per strategy, and a strategy's rows grow by at most ten minutes of its rate limit in
/// between.
async fn prune_windows(tx: &Transaction<'_>, r: Retention, w: Windows, now_ms: i64) -> Result<bool, Error> {
    let ours: bool = tx.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&PRUNE_LOCK]).await?.get(0);
    if !ours {
        return Ok(false);
    }
    // In digest order, the order a batch claims keys in (see `batch::CLAIM`): a batch re-claiming two expired
    // keys and this delete, each locking them in its own order, deadlocked.
    let keys = tx
        .execute(
            "DELETE FROM dedup_keys WHERE ts_ms <= $1 AND digest IN
                 (SELECT digest FROM dedup_keys WHERE ts_ms <= $1 ORDER BY digest FOR UPDATE)",
            &[&now_ms.saturating_sub(w.dedup_ms + PRUNE_MARGIN_MS)],
        )
        .await?;
    let rate_cut = now_ms.saturating_sub(w.rate_ms + PRUNE_MARGIN_MS);
    let marks = tx.execute("DELETE FROM rate_marks WHERE ts_ms <= $1", &[&rate_cut]).await?;
    // A strategy's seconds outlive its dedup keys: a batch tells a clock gone back by them (`batch::REWIND`), and
    // pruned after the rate window, a key claimed minutes before the step was left an hour ahead, a duplicate for
    // as long. The counts read only the rate window's seconds.
    let seconds_cut = now_ms.saturating_sub(w.rate_ms.max(w.dedup_ms) + PRUNE_MARGIN_MS);
    tx.execute("DELETE FROM rate_seconds WHERE second < $1::BIGINT / 1000", &[&seconds_cut]).await?;
    let cutoff = now_ms.saturating_sub(r.max_age_ms);
    let kept = now_ms.saturating_sub(crate::store::outbox::FINISHED_KEPT_MS);
    let sent = tx.execute(&outbox_prune(), &[&cutoff, &kept]).await?;
    tx.execute("DELETE FROM notifications WHERE status <> 'pending' AND created_ms < $1", &[&cutoff]).await?;
    if keys + marks + sent > 0 {
        tracing::info!(keys, marks, sent, "pruned expired dedup keys, rate marks and finished outbox rows");
    }
    Ok(true)
}

/// Deletes the rows of `table` (`logs` or `outbox`, each indexed by (strategy, id)) that match `only` and are
/// older than their strategy's newest `keep`. Walks that index: a skip scan for the strategies, then one
/// descent per strategy for the cut-off id, so the cost follows the strategies and the rows deleted, not the
/// whole table (ranking every row took seconds on a table of a few million).
async fn cap_per_strategy(tx: &Transaction<'_>, table: &str, keep: u64, only: &str) -> Result<u64, Error> {
    let keep = i64::try_from(keep).unwrap_or(i64::MAX);
    tx.execute(
        &format!(
            "WITH RECURSIVE s AS (
                 (SELECT strategy FROM {table} ORDER BY strategy LIMIT 1)
                 UNION ALL
                 SELECT (SELECT t.strategy FROM {table} AS t WHERE t.strategy > s.strategy ORDER BY t.strategy LIMIT 1)
                 FROM s WHERE s.strategy IS NOT NULL
             ), cut AS (
                 SELECT strategy,
                        (SELECT t.id FROM {table} AS t WHERE t.strategy = s.strategy ORDER BY t.id DESC OFFSET $1 LIMIT 1)
                            AS id
                 FROM s WHERE strategy IS NOT NULL
             )
             DELETE FROM {table} AS t USING cut WHERE t.strategy = cut.strategy AND t.id <= cut.id AND {only}"
        ),
        &[&keep],
    )
    .await
}

#[cfg(test)]
mod tests {
    //! The prunes and row caps against a real PostgreSQL.
    use super::*;

    async fn log_times(c: &impl GenericClient) -> Vec<i64> {
        c.query("SELECT ts_ms FROM logs ORDER BY id", &[]).await.unwrap().iter().map(|r| r.get(0)).collect()
    }

    /// The ten-minute prune deletes logs past their age and beyond the cap, under the prune lock: a server
    /// that finds another holding it leaves everything for that one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_prune_deletes_old_and_capped_logs_once_under_its_lock() {
        let (server, pg) = super::super::migrated(3).await;
        let c = pg.client().await.unwrap();
        for ts in [0i64, 0, 9_000, 9_100, 9_200, 9_300, 9_400] {
            c.execute(
                "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 VALUES ($1, 's', 'INFO', '', 'processed', 200, '[]')",
                &[&ts],
            )
            .await
            .unwrap();
        }
        let retention = Retention { max_age_ms: 5_000, max_rows_per_strategy: 3 };
        let windows = Windows { dedup_ms: 1_000, rate_ms: 1_000 };
        let caps = RowCaps { log_rows: 3, outbox_rows: 3 };
        // Another server holds the prune lock: nothing is deleted here.
        let mut other = pg.client().await.unwrap();
        let holder = other.transaction().await.unwrap();
        holder.query_one("SELECT pg_advisory_xact_lock($1)", &[&PRUNE_LOCK]).await.unwrap();
        prune(&pg, retention, windows, 10_000, caps).await.unwrap();
        assert_eq!(log_times(&c).await, [0, 0, 9_000, 9_100, 9_200, 9_300, 9_400]);
        holder.rollback().await.unwrap();
        // Then it runs: the two old rows go by age, and of the five left the newest three stay.
        prune(&pg, retention, windows, 10_000, caps).await.unwrap();
        assert_eq!(log_times(&c).await, [9_200, 9_300, 9_400]);
        drop(server);
    }

    /// The ten-minute prune on a server whose clock is hours ahead cut by that clock: a row a peer finished a moment
    /// ago went, and a lookup by terms that counts it took an earlier alert's order for a later one's, which was
    /// then never placed; log rows within the retention went too. It cuts by the database's clock when earlier.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_prune_on_a_server_ahead_keeps_rows_finished_a_moment_ago() {
        let (server, pg) = super::super::migrated(3).await;
        let c = pg.client().await.unwrap();
        let real: i64 =
            c.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await.unwrap().get(0);
        c.execute(
            "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms,
                                 done_ms)
             VALUES ('s', 'b', 'mock', 'place', 'c', 'POST', '/', '', 'done', $1, $1)",
            &[&real],
        )
        .await
        .unwrap();
        c.execute(
            "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
             VALUES ($1, 's', 'INFO', '', 'processed', 200, '[]')",
            &[&real],
        )
        .await
        .unwrap();
        let retention = Retention { max_age_ms: 3_600_000, max_rows_per_strategy: 1_000 };
        let windows = Windows { dedup_ms: 300_000, rate_ms: 60_000 };
        let ahead = real + crate::store::outbox::FINISHED_KEPT_MS + 3_700_000;
        prune(&pg, retention, windows, ahead, RowCaps::default()).await.unwrap();
        let rows: i64 = c.query_one("SELECT count(*) FROM outbox", &[]).await.unwrap().get(0);
        assert_eq!(rows, 1, "a row finished a moment ago was pruned");
        assert_eq!(log_times(&c).await, [real], "a log row of a moment ago was pruned");
        drop(server);
    }

    /// A server whose send met the bot's stopped session gives the row back unsent (`pending`), its lease checked only
    /// before the write was queued. Landing late (its writer behind), after the bot's lease passed to a peer that
    /// marked the row `sending` for its own attempt, it set the row back to `pending`: should that peer stop before
    /// its result lands, the next holder sends the row as never tried, a second order at a broker that takes a
    /// repeated client order id. Given back only while this server still holds the bot's lease.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_unsent_does_not_reopen_a_row_a_peer_is_sending() {
        let (server, pg) = super::super::migrated(2).await;
        let mut c = pg.client().await.unwrap();
        let id: i64 = c
            .query_one(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms)
                 VALUES ('s', 'b', 'mock', 'place', 'c', 'POST', '/', '', 'sending', 0) RETURNING id",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        c.execute(
            "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms) VALUES ('s', 'b', 'peer', 1, 0)",
            &[],
        )
        .await
        .unwrap();
        let unsent = |holder: &str| Op::Unsent { id, holder: Some(holder.to_owned()) };
        let tx = c.transaction().await.unwrap();
        apply(&tx, &unsent("me")).await.unwrap();
        tx.commit().await.unwrap();
        let status: String = c.query_one("SELECT status FROM outbox", &[]).await.unwrap().get(0);
        assert_eq!(status, "sending", "the peer's `sending` mark was undone by a server without the lease");
        // Its holder's own is.
        let tx = c.transaction().await.unwrap();
        apply(&tx, &unsent("peer")).await.unwrap();
        tx.commit().await.unwrap();
        let status: String = c.query_one("SELECT status FROM outbox", &[]).await.unwrap().get(0);
        assert_eq!(status, "pending");
        drop(server);
    }

    /// A server that lost a bot's lease may still commit a result it got before (its commit was held up while
    /// PostgreSQL was out of its reach): the row, finished meanwhile by the server that took the bot over, keeps
    /// that server's result, with no log row or bot state of the late one; a late `sending` does not reopen it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_result_does_not_overwrite_a_row_another_server_finished() {
        use crate::store::Delivered;
        let (server, pg) = super::super::migrated(2).await;
        let mut c = pg.client().await.unwrap();
        let open = |status: &'static str| {
            let c = &c;
            async move {
                c.query_one(
                    "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status,
                                         result, created_ms)
                     VALUES ('s', 'b', 'mock', 'place', 'c', 'POST', '/', '', $1, 'theirs', 0) RETURNING id",
                    &[&status],
                )
                .await
                .unwrap()
                .get::<_, i64>(0)
            }
        };
        let (finished, sending) = (open("done").await, open("sending").await);
        let late = |id: i64| Delivered {
            id,
            status: "failed",
            result: "ours".into(),
            log: Some(LogEntry {
                ts_ms: 1,
                strategy: "s".into(),
                decision: "processed",
                http_status: 200,
                alerts: "[]".into(),
                records: vec![(strategy_webhook::Level::Error, format!("row {id}"))],
            }),
            state: Some(("s".into(), "b".into(), format!("{{\"row\":{id}}}"))),
        };
        let tx = c.transaction().await.unwrap();
        apply(&tx, &Op::Sending(finished)).await.unwrap();
        apply(&tx, &Op::Delivered(vec![late(finished), late(sending)].into())).await.unwrap();
        tx.commit().await.unwrap();
        let rows: Vec<String> = c
            .query("SELECT status || ' ' || result FROM outbox ORDER BY id", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(rows, ["done theirs", "failed ours"], "an open row takes the result, a finished one keeps its own");
        let logs: Vec<String> =
            c.query("SELECT message FROM logs ORDER BY id", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(logs, [format!("row {sending}")]);
        let state: String = c.query_one("SELECT state FROM bot_state", &[]).await.unwrap().get(0);
        assert_eq!(state, format!("{{\"row\":{sending}}}"));
        drop(server);
    }

    /// PostgreSQL refuses NUL in text. A sender's `\u0000` quoted in a log message, or a broker's answer in a
    /// result, failed the whole transaction: every alert of the batch answered 500, and a delivery never recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn text_with_nul_characters_is_stored_with_replacement_characters() {
        use crate::store::Delivered;
        let (server, pg) = super::super::migrated(1).await;
        let mut c = pg.client().await.unwrap();
        let entry = LogEntry {
            ts_ms: 1,
            strategy: "s".into(),
            decision: "error",
            http_status: 422,
            alerts: "[]".into(),
            records: vec![(strategy_webhook::Level::Error, "unresolved placeholder {{x\0}}".into())],
        };
        let row = OutboxRow {
            id: 0,
            strategy: "s".into(),
            bot: "b".into(),
            broker: "x".into(),
            kind: "place".into(),
            client_order_id: "c".into(),
            order_id: Some("o\0".into()),
            keeps_order_id: None,
            after: None,
            method: "POST".into(),
            path: "/".into(),
            content_type: None,
            body: b"{\"s\":\"\0\"}".to_vec(),
            meaning: Some("buy A\0B".into()),
            status: "pending".into(),
            created_ms: 2,
            deadline_ms: None,
            target: None,
            retried: false,
            alert_log: None,
        };
        append(&c, &Appends { logs: vec![&entry], rows: vec![&row], ..Appends::default() }).await.unwrap();
        let id: i64 = c.query_one("SELECT id FROM outbox", &[]).await.unwrap().get(0);
        let done = Delivered { id, status: "failed", result: "refused: \0".into(), log: None, state: None };
        let tx = c.transaction().await.unwrap();
        apply(&tx, &Op::Delivered(vec![done].into())).await.unwrap();
        tx.commit().await.unwrap();
        let message: String = c.query_one("SELECT message FROM logs", &[]).await.unwrap().get(0);
        assert_eq!(message, "unresolved placeholder {{x\u{FFFD}}}");
        let r = c.query_one("SELECT order_id, meaning, result, body FROM outbox", &[]).await.unwrap();
        let (order, meaning, result, body): (String, String, String, Vec<u8>) =
            (r.get(0), r.get(1), r.get(2), r.get(3));
        assert_eq!(
            (order.as_str(), meaning.as_str(), result.as_str()),
            ("o\u{FFFD}", "buy A\u{FFFD}B", "refused: \u{FFFD}")
        );
        // The request's bytes are stored as they are (BYTEA takes any byte).
        assert_eq!(body, row.body);
        assert_eq!(storable("plain"), Cow::Borrowed("plain"));
        drop(server);
    }

    /// The minute's outbox prune can find old rows by their time without reading the whole outbox.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_outbox_prune_finds_old_rows_through_an_index() {
        let (server, pg) = super::super::migrated(1).await;
        let mut c = pg.client().await.unwrap();
        let tx = c.transaction().await.unwrap();
        // With the whole-table scan priced out, the plan shows whether an index can serve the prune at all
        // (a tiny test table would be scanned whole either way).
        tx.batch_execute("SET LOCAL enable_seqscan = off").await.unwrap();
        let plan: Vec<String> = tx
            .query(&format!("EXPLAIN {}", outbox_prune()), &[&0i64, &0i64])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(plan.iter().any(|l| l.contains("outbox_by_time")), "{plan:#?}");
        tx.rollback().await.unwrap();
        drop(server);
    }

    /// A flood's refusals update their log row each second through the (strategy, id) index, not by reading
    /// every strategy's rows: the update's own scan is an index scan on both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_refusals_update_finds_its_row_through_an_index() {
        let (server, pg) = super::super::migrated(1).await;
        let mut c = pg.client().await.unwrap();
        let tx = c.transaction().await.unwrap();
        tx.batch_execute("SET LOCAL enable_seqscan = off").await.unwrap();
        let plan: Vec<String> = tx
            .query(&format!("EXPLAIN {REFUSALS_UPDATE}"), &[&"s", &0i64, &"m", &429i32])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        // The subquery (an InitPlan, `$0`) finds the row; the update's own scan then looks it up by both keys.
        assert!(
            plan.iter().any(|l| l.contains("Index Cond") && l.contains("strategy") && l.contains("id = $0")),
            "{plan:#?}"
        );
        assert!(!plan.iter().any(|l| l.contains("Seq Scan")), "{plan:#?}");
        tx.rollback().await.unwrap();
        drop(server);
    }

    /// Migration 9 adds the outbox's `target` to a database of migration 8: a row stored before it has none
    /// (it goes wherever its bot is delivered now), a row appended after keeps the one it was stored for, and
    /// the reads give both back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn migration_9_adds_each_rows_target_and_older_rows_have_none() {
        use super::super::super::{ReadSide, Reader};
        // The schema as migration 8 left it, with a row still to send.
        let (server, pg) = super::super::at_migration(
            8,
            "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms)
             VALUES ('s', 'b', 'x', 'place', 'old', 'POST', '/', '', 'pending', 1)",
        )
        .await;
        let c = pg.client().await.unwrap();
        pg.migrate().await.unwrap();
        let versions: Vec<i32> = c
            .query("SELECT version FROM schema_migrations ORDER BY version", &[])
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        // Every later migration too.
        assert_eq!(versions, super::super::MIGRATIONS.iter().map(|m| m.0).collect::<Vec<_>>());
        assert!(versions.contains(&9));
        let new = OutboxRow {
            id: 0,
            strategy: "s".into(),
            bot: "b".into(),
            broker: "x".into(),
            kind: "place".into(),
            client_order_id: "new".into(),
            order_id: None,
            keeps_order_id: None,
            after: None,
            method: "POST".into(),
            path: "/".into(),
            content_type: None,
            body: Vec::new(),
            meaning: None,
            status: "pending".into(),
            created_ms: 2,
            deadline_ms: Some(60_002),
            target: Some("https://api.example.com:443/v2".into()),
            retried: false,
            alert_log: None,
        };
        append(&c, &Appends { rows: vec![&new], ..Appends::default() }).await.unwrap();
        let reader = Reader { side: ReadSide::Postgres(pg.clone()) };
        let rows = reader.open_rows("s", "b", 10).unwrap();
        let got: Vec<_> = rows.iter().map(|r| (r.client_order_id.as_str(), r.target.as_deref())).collect();
        assert_eq!(got, [("old", None), ("new", Some("https://api.example.com:443/v2"))]);
        let listed = reader.strategy_outbox("s", 10).unwrap();
        assert_eq!(
            (listed[0].0.target.as_deref(), listed[0].1.as_deref()),
            (Some("https://api.example.com:443/v2"), None)
        );
        drop(c);
        drop(server);
    }

    /// Due messages are read fairly: a strategy with many queued cannot keep another's out of a read, and a
    /// strategy whose messages are being sent is neither read nor claimed (its claim would hold them a minute).
    /// The prune deletes expired dedup keys in digest order, as a batch re-claims them: a batch holding the
    /// lower key (and about to re-claim the higher) is waited for, with nothing held, instead of deadlocking.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_prune_locks_expired_keys_in_the_order_batches_claim_them() {
        let (server, pg) = super::super::migrated(4).await;
        let mut keys = [("a", "k1"), ("a", "k2")];
        // The higher digest stored first, so that a delete in the table's order would lock it first.
        keys.sort_by_key(|(s, k)| std::cmp::Reverse(digest(s, k)));
        let c = pg.client().await.unwrap();
        for (s, k) in keys {
            c.execute(
                "INSERT INTO dedup_keys (digest, strategy, key, ts_ms) VALUES ($1::TEXT::UUID, $2, $3, 10)",
                &[&digest(s, k), &s, &k],
            )
            .await
            .unwrap();
        }
        let (high, low) = (digest(keys[0].0, keys[0].1), digest(keys[1].0, keys[1].1));
        let mut batch = pg.client().await.unwrap();
        let tx = batch.transaction().await.unwrap();
        let lock = "UPDATE dedup_keys SET ts_ms = 10 WHERE digest = $1::TEXT::UUID";
        tx.execute(lock, &[&low]).await.unwrap();
        let pruning = {
            let pg = pg.clone();
            tokio::spawn(async move {
                let mut c = pg.client().await.unwrap();
                let tx = c.transaction().await.unwrap();
                let windows = Windows { dedup_ms: 1_000, rate_ms: 1_000 };
                let retention = Retention { max_age_ms: i64::MAX / 2, max_rows_per_strategy: 1_000 };
                prune_windows(&tx, retention, windows, 10_000 + PRUNE_MARGIN_MS).await?;
                tx.commit().await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let second = tx.execute(lock, &[&high]).await;
        assert!(second.is_ok(), "the batch's second key: {second:?}");
        tx.commit().await.unwrap();
        let pruned = pruning.await.unwrap();
        assert!(pruned.is_ok(), "the prune: {pruned:?}");
        let left: i64 = c.query_one("SELECT count(*) FROM dedup_keys", &[]).await.unwrap().get(0);
        assert_eq!(left, 0, "both expired keys pruned");
        drop(c);
        drop(server);
    }

    /// Two servers claim due messages at the same instant: a message claimed by one (committed between the
    /// other's snapshot and its row lock) must not be claimed by the other too, or it goes out twice.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_servers_reading_due_notifications_at_once_never_both_claim_one() {
        use super::super::super::{ReadSide, Reader};
        let (server, pg) = super::super::migrated(4).await;
        let c = pg.client().await.unwrap();
        use std::sync::Arc;
        let readers: Vec<Arc<Reader>> =
            (0..2).map(|_| Arc::new(Reader { side: ReadSide::Postgres(pg.clone()) })).collect();
        let mut doubled = Vec::new();
        for round in 0..400i64 {
            c.execute(
                "INSERT INTO notifications (strategy, event, text, created_ms, status, next_ms)
                 VALUES ('s', 'order', $1, 1, 'pending', 1)",
                &[&format!("m{round}")],
            )
            .await
            .unwrap();
            let now = 10 + round * 100_000;
            let go = Arc::new(std::sync::Barrier::new(2));
            let claims: Vec<_> = readers
                .iter()
                .map(|r| {
                    let (r, go) = (Arc::clone(r), Arc::clone(&go));
                    std::thread::spawn(move || {
                        go.wait();
                        r.due_notifications(now, 5, 5, &[]).unwrap().into_iter().map(|n| n.id).collect::<Vec<_>>()
                    })
                })
                .collect();
            let claims: Vec<Vec<i64>> = claims.into_iter().map(|t| t.join().unwrap()).collect();
            if claims[0].iter().any(|id| claims[1].contains(id)) {
                doubled.push(round);
            }
            // Sent: not due again.
            c.execute("UPDATE notifications SET status = 'sent'", &[]).await.unwrap();
        }
        assert!(doubled.is_empty(), "claimed by both servers in rounds {doubled:?}");
        drop(c);
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn due_notifications_are_read_per_strategy_and_a_busy_strategys_are_not_claimed() {
        use super::super::super::{ReadSide, Reader};
        let (server, pg) = super::super::migrated(2).await;
        let c = pg.client().await.unwrap();
        for (i, s) in ["a", "a", "a", "a", "b", "c"].iter().enumerate() {
            c.execute(
                "INSERT INTO notifications (strategy, event, text, created_ms, status, next_ms)
                 VALUES ($1, 'order', $2, 1, 'pending', 1)",
                &[s, &format!("m{i}")],
            )
            .await
            .unwrap();
        }
        let reader = Reader { side: ReadSide::Postgres(pg.clone()) };
        let due = reader.due_notifications(10, 2, 3, &["c".to_owned()]).unwrap();
        let got: Vec<(&str, &str)> = due.iter().map(|n| (n.strategy.as_str(), n.text.as_str())).collect();
        assert_eq!(got, [("a", "m0"), ("a", "m1"), ("b", "m4")]);
        // Claimed: not read again; the busy strategy's was not claimed, and is read once it is not busy.
        let again = reader.due_notifications(10, 2, 10, &[]).unwrap();
        let got: Vec<(&str, &str)> = again.iter().map(|n| (n.strategy.as_str(), n.text.as_str())).collect();
        assert_eq!(got, [("a", "m2"), ("a", "m3"), ("c", "m5")]);
        drop(c);
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_strategy_keeps_its_newest_rows_and_unfinished_outbox_rows_stay() {
        let (server, pg) = super::super::migrated(2).await;
        let mut c = pg.client().await.unwrap();
        // Rows of three strategies, interleaved, in id order; every third outbox row still pending.
        let names = ["a", "b", "c", "a", "a", "c", "b", "a", "c", "a", "a", "c", "a", "b", "a"];
        for (i, s) in names.iter().enumerate() {
            let status = if i % 3 == 0 { "pending" } else { "done" };
            c.execute(
                "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
                 VALUES (0, $1, 'INFO', '', 'processed', 200, '[]')",
                &[s],
            )
            .await
            .unwrap();
            c.execute(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status,
                                     created_ms)
                 VALUES ($1, 'b', 'x', 'open', 'c', 'POST', '/', '', $2, 0)",
                &[s, &status],
            )
            .await
            .unwrap();
        }
        let tx = c.transaction().await.unwrap();
        assert_eq!(cap_per_strategy(&tx, "logs", 2, "TRUE").await.unwrap(), 15 - 6);
        cap_per_strategy(&tx, "outbox", 2, &format!("status IN {FINISHED}")).await.unwrap();
        tx.commit().await.unwrap();
        // What ranking every row would keep: each strategy's newest two, and every pending outbox row.
        let ids = |table: &'static str| {
            let c = &c;
            async move {
                c.query(&format!("SELECT id FROM {table} ORDER BY id"), &[])
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.get::<_, i64>(0))
                    .collect::<Vec<i64>>()
            }
        };
        let newest = |keep_pending: bool| -> Vec<i64> {
            (0..names.len())
                .filter(|&i| {
                    let later = names[i + 1..].iter().filter(|s| **s == names[i]).count();
                    later < 2 || (keep_pending && i % 3 == 0)
                })
                .map(|i| i as i64 + 1)
                .collect()
        };
        assert_eq!(ids("logs").await, newest(false));
        assert_eq!(ids("outbox").await, newest(true));
        drop(server);
    }

    /// The ten-minute prune ran in the writer's own transaction, in its queue: every write queued behind it waited
    /// for its deletes (up to five minutes were allowed). Among them the dispatcher's `sending` mark, which a
    /// delivery to a broker that does not refuse a repeated client order id waits for before the order goes out;
    /// and the delivery results, a rotation's commit, the not-stored ERROR rows. A prune of a large backlog (a
    /// retention lowered, or a busy day's 10 minutes of log rows at a few thousand alerts a second) held every
    /// order of the server that ran it for as long: market orders past their 60 s went `expired`, never sent.
    /// Here a backlog of old log rows takes the prune a few seconds; a `sending` mark queued just after it must
    /// not wait for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_long_prune_does_not_hold_up_a_deliverys_sending_mark() {
        use crate::store::{Retention, RowCaps, Windows};
        use std::time::{Duration, Instant};
        let server = tokio::task::spawn_blocking(super::super::test_harness::Postgres::start).await.unwrap();
        let store = crate::store::Store::open_postgres(&server.url(), 4, RowCaps::default()).await.unwrap();
        let pg = store.shared().unwrap();
        let c = pg.client().await.unwrap();
        c.batch_execute(
            "INSERT INTO logs (ts_ms, strategy, level, message, decision, http_status, alerts)
             SELECT 1000 + g, 's' || (g % 50), 'INFO', repeat('x', 200), 'processed', 200, '[]'
             FROM generate_series(1, 1500000) AS g",
        )
        .await
        .unwrap();
        drop(c);
        let writer = store.writer();
        let retention = Retention { max_age_ms: 86_400_000, max_rows_per_strategy: 100_000 };
        let windows = Windows { dedup_ms: 60_000, rate_ms: 60_000 };
        let now = crate::app::now_ms();
        let pruning = {
            let writer = writer.clone();
            tokio::spawn(async move {
                let began = Instant::now();
                writer.prune(retention, windows, now).await.unwrap();
                began.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let began = Instant::now();
        writer.sending(1).await.unwrap();
        let waited = began.elapsed();
        let prune_took = pruning.await.unwrap();
        println!("prune took {prune_took:?}; the sending mark waited {waited:?}");
        assert!(
            waited < Duration::from_secs(1),
            "a delivery's `sending` mark waited {waited:?} behind the prune (which took {prune_took:?})"
        );
        drop(server);
    }
}
