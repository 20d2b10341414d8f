//! The `bot_state` table: each bot's positions and working orders as the server keeps them (JSON), put back
//! into the strategies' snapshots at start.

use super::{Op, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};
use std::sync::Arc;

pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS bot_state (
        strategy TEXT NOT NULL,
        bot TEXT NOT NULL,
        state TEXT NOT NULL,
        PRIMARY KEY (strategy, bot)
    ) WITHOUT ROWID;";

impl Writer {
    /// Stores a bot's positions and working orders.
    pub async fn bot_state(&self, strategy: &str, bot: &str, state: String) -> Result<(), StoreError> {
        let op = Op::BotState { strategy: strategy.to_owned(), bot: bot.to_owned(), state, held: None, read_ms: None };
        self.commit(op).await
    }

    /// Stores a bot's state only while `holder` holds the bot's lease on the shared database (checked in the
    /// commit's transaction, the lease row held shared until it ends), and says whether it was stored. Through the
    /// writer, like every other write of the state: a delivery's state queued before it is committed before it, and
    /// one queued after it lands over it, never the reverse. `read_ms`: when the read that produced the state started,
    /// stored beside it for the other servers ([`Reader::entries_unread`]).
    pub async fn bot_state_held(
        &self,
        strategy: &str,
        bot: &str,
        state: String,
        holder: &str,
        read_ms: Option<i64>,
    ) -> Result<bool, StoreError> {
        let stored = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Some((holder.to_owned(), Arc::clone(&stored)));
        self.commit(Op::BotState { strategy: strategy.to_owned(), bot: bot.to_owned(), state, held, read_ms }).await?;
        Ok(stored.load(std::sync::atomic::Ordering::Relaxed))
    }
}

/// Stores (or replaces) a bot's state.
pub(super) fn set(tx: &Transaction<'_>, strategy: &str, bot: &str, state: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO bot_state (strategy, bot, state) VALUES (?1, ?2, ?3)
         ON CONFLICT(strategy, bot) DO UPDATE SET state = excluded.state",
    )?
    .execute(params![strategy, bot, state])?;
    Ok(())
}

impl Reader {
    /// Every stored bot state: (strategy, bot, JSON).
    pub fn bot_states(&self) -> Result<Vec<(String, String, String)>, StoreError> {
        if let Some(pg) = self.pg() {
            return pg.read("SELECT strategy, bot, state FROM bot_state", &[], |r| {
                Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
            });
        }
        self.query("SELECT strategy, bot, state FROM bot_state", [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
    }

    /// One bot's stored state (JSON), on either database; `None` when none is stored.
    pub fn bot_state(&self, strategy: &str, bot: &str) -> Result<Option<String>, StoreError> {
        let rows: Vec<String> = if let Some(pg) = self.pg() {
            pg.read("SELECT state FROM bot_state WHERE strategy = $1 AND bot = $2", &[&strategy, &bot], |r| {
                r.try_get(0)
            })?
        } else {
            self.query("SELECT state FROM bot_state WHERE strategy = ?1 AND bot = ?2", [strategy, bot], |r| r.get(0))?
        };
        Ok(rows.into_iter().next())
    }

    /// The bots among `bots` (of `strategy`, on the shared database) with an entry another server may be about to
    /// deliver or has delivered without its account read back since: an entry row stored within `queued_ms` of `now`
    /// and not yet done with, or one done at or after the start of the read behind the bot's stored state
    /// ([`Writer::bot_state_held`]). Rows older than `horizon_ms` are not looked at (a bot whose reads keep failing
    /// holds up no alert for longer), nor are done rows beside a state stored without its read's start. Empty on the
    /// embedded database.
    pub fn entries_unread(
        &self,
        strategy: &str,
        bots: &[String],
        now: i64,
        queued_ms: i64,
        horizon_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let Some(pg) = self.pg() else { return Ok(Vec::new()) };
        let (since, queued_since) = (now.saturating_sub(horizon_ms), now.saturating_sub(queued_ms));
        pg.read(
            "SELECT DISTINCT o.bot FROM outbox o
             LEFT JOIN bot_state b ON b.strategy = o.strategy AND b.bot = o.bot
             WHERE o.strategy = $1 AND o.bot = ANY($2) AND o.created_ms > $3 AND o.kind = 'place'
               AND coalesce(o.meaning, '') LIKE '%\"intent\":\"open%'
               AND ((o.status IN ('pending', 'sending') AND o.created_ms > $4)
                    OR (o.status = 'done' AND b.read_ms IS NOT NULL AND o.done_ms >= b.read_ms))",
            &[&strategy, &bots, &since, &queued_since],
            |r| r.try_get(0),
        )
    }

    /// A strategy's bot states on the shared database with their versions: (bot, JSON, version). Empty on the
    /// embedded database, whose states only this server writes.
    pub fn strategy_bot_states(&self, strategy: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        let Some(pg) = self.pg() else { return Ok(Vec::new()) };
        pg.read("SELECT bot, state, version FROM bot_state WHERE strategy = $1", &[&strategy], |r| {
            Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
        })
    }
}
