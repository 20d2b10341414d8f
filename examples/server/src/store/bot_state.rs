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
        self.commit(Op::BotState { strategy: strategy.to_owned(), bot: bot.to_owned(), state, held: None }).await
    }

    /// Stores a bot's state only while `holder` holds the bot's lease on the shared database (checked in the
    /// commit's transaction, the lease row held shared until it ends), and says whether it was stored. Through the
    /// writer, like every other write of the state: a delivery's state queued before it is committed before it, and
    /// one queued after it lands over it, never the reverse.
    pub async fn bot_state_held(
        &self,
        strategy: &str,
        bot: &str,
        state: String,
        holder: &str,
    ) -> Result<bool, StoreError> {
        let stored = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = Some((holder.to_owned(), Arc::clone(&stored)));
        self.commit(Op::BotState { strategy: strategy.to_owned(), bot: bot.to_owned(), state, held }).await?;
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

    /// A strategy's bot states on the shared database with their versions: (bot, JSON, version). Empty on the
    /// embedded database, whose states only this server writes.
    pub fn strategy_bot_states(&self, strategy: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        let Some(pg) = self.pg() else { return Ok(Vec::new()) };
        pg.read("SELECT bot, state, version FROM bot_state WHERE strategy = $1", &[&strategy], |r| {
            Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
        })
    }
}
