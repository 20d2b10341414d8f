//! The `token_overrides` table: webhook tokens rotated through the admin API, which win over the snapshot
//! files' `token_hash` so that no secret is ever written back to a strategy file; and `retired_tokens`, the
//! tokens rotated away, which no strategy file may bring back.

use super::{Op, Reader, StoreError, Writer};
use rusqlite::{params, Transaction};
use std::collections::HashMap;

pub(super) const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS token_overrides (
        strategy TEXT PRIMARY KEY,
        token_hash TEXT NOT NULL,
        rotated_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS retired_tokens (
        token_hash TEXT PRIMARY KEY,
        strategy TEXT NOT NULL,
        retired_ms INTEGER NOT NULL
    );";

impl Writer {
    /// Stores a rotated token for a strategy, and the one it replaces as retired, and waits until it is
    /// committed. [`StoreError::RotatedMeanwhile`] when `retired` is no longer the strategy's token (another server
    /// sharing the database rotated it since): nothing is stored.
    pub async fn set_token(&self, strategy: &str, token: &str, retired: &str, ts_ms: i64) -> Result<(), StoreError> {
        let (strategy, token, retired) = (strategy.to_owned(), token.to_owned(), retired.to_owned());
        let applied = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        self.commit(Op::SetToken { strategy, token, retired, ts_ms, applied: std::sync::Arc::clone(&applied) }).await?;
        if !applied.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::RotatedMeanwhile);
        }
        Ok(())
    }
}

/// Stores (or replaces) a strategy's rotated token, and retires the one it replaces.
pub(super) fn set(
    tx: &Transaction<'_>,
    strategy: &str,
    token: &str,
    retired: &str,
    ts_ms: i64,
) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO token_overrides (strategy, token_hash, rotated_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT(strategy) DO UPDATE SET token_hash = excluded.token_hash, rotated_ms = excluded.rotated_ms",
        params![strategy, token, ts_ms],
    )?;
    tx.execute(
        "INSERT OR IGNORE INTO retired_tokens (token_hash, strategy, retired_ms) VALUES (?1, ?2, ?3)",
        params![retired, strategy, ts_ms],
    )?;
    Ok(())
}

impl Reader {
    /// Every rotated token, by strategy id.
    pub fn token_overrides(&self) -> Result<HashMap<String, String>, StoreError> {
        if let Some(pg) = self.pg() {
            let pairs = pg.read("SELECT strategy, token_hash FROM token_overrides", &[], |r| {
                Ok((r.try_get(0)?, r.try_get(1)?))
            })?;
            return Ok(pairs.into_iter().collect());
        }
        let pairs =
            self.query("SELECT strategy, token_hash FROM token_overrides", [], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(pairs.into_iter().collect())
    }

    /// Every token rotated away, with the strategy it was rotated away from.
    pub fn retired_tokens(&self) -> Result<HashMap<String, String>, StoreError> {
        if let Some(pg) = self.pg() {
            let pairs = pg
                .read("SELECT token_hash, strategy FROM retired_tokens", &[], |r| Ok((r.try_get(0)?, r.try_get(1)?)))?;
            return Ok(pairs.into_iter().collect());
        }
        let pairs =
            self.query("SELECT token_hash, strategy FROM retired_tokens", [], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(pairs.into_iter().collect())
    }

    /// Every token rotated on the shared database: (strategy, token, version), one row per rotated strategy.
    /// Other servers' rotations are applied from this, each when its version changes (a version is drawn when
    /// the rotation is written, not when it commits, so reading only those above the highest seen would miss
    /// one that commits late). Empty on the embedded database (one server: it rotated them).
    pub fn token_changes(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let Some(pg) = self.pg() else { return Ok(Vec::new()) };
        pg.read("SELECT strategy, token_hash, version FROM token_overrides", &[], |r| {
            Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))
        })
    }
}
