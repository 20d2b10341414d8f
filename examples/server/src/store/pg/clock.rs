//! This server's clock against the shared database's. Each server stamps what it stores by its own clock (an
//! outbox row's time and deadline, a dedup key, a rate mark), and a peer judges those times by its own: a row more
//! than the dispatcher's slack (`CLOCK_SLACK_MS`, 1 s) ahead of the clock of the server sending it is taken for
//! one stored under a clock since set back, and expired unsent. Batches accepted servers within 30 s of the
//! database, so a server 2 s ahead stored market orders (answered `processed`) that its peers then expired. A
//! server whose clock is further off the database's than [`CLOCK_AGREE_MS`] now stores nothing and sends nothing
//! (its batches are refused with the cause, its leases lapse) and says so on its health check, until a reading
//! finds it right again.

use super::{bounded, Pg, StoreError, STATEMENT_WAIT};
use std::sync::atomic::{AtomicI64, Ordering};

/// How far this server's clock may be off the database's, either way, while it stores and sends: any two such
/// servers are then less than the dispatcher's 1 s slack apart. A verdict needs the whole of a reading's window on
/// one side of it ([`judge`]), so a reading's round trip, however long, adds nothing to it.
pub const CLOCK_AGREE_MS: i64 = 400;

/// How often the clock is read.
pub const CLOCK_READ_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// When a clock found off was last said at ERROR (Unix ms): once a minute while it stays off.
static OFF_SAID_MS: AtomicI64 = AtomicI64::new(0);

/// How much nearer than [`CLOCK_AGREE_MS`] a clock found off must come before it is right again: at one edge, a
/// clock hovering about 400 ms off (NTP's jitter on a reading of a millisecond's round trip) flipped every second,
/// and each flip to off let the server's leases lapse and refused its alerts.
const CLOCK_BACK_MARGIN_MS: i64 = 100;

/// The verdict of one reading of the database's clock `db_ms`, taken between `before` and `after` by this server's
/// (Unix ms): `Some(Some(e))` off, `Some(None)` right, `None` when the reading cannot tell (its window straddling
/// the edge). A clock found off (`was_off`) is right again only within the edge less [`CLOCK_BACK_MARGIN_MS`].
///
/// The round trip's length is not a condition of its own: the database read its clock at some moment of the window,
/// so a window wholly beyond the edge is a clock off and one wholly within it a clock right, however long the
/// window (a pause only widens it, and a wide one is more often undecided). A bound on it (100 ms) kept a server
/// whose database is further away than that from ever being found right again once found off.
fn judge(before: i64, after: i64, db_ms: i64, was_off: bool) -> Option<Option<StoreError>> {
    // The database read its clock between `before` and `after` by this one.
    let (behind_ms, ahead_ms) = (db_ms.saturating_sub(after), before.saturating_sub(db_ms));
    let agree = if was_off { CLOCK_AGREE_MS - CLOCK_BACK_MARGIN_MS } else { CLOCK_AGREE_MS };
    if behind_ms > CLOCK_AGREE_MS {
        Some(Some(StoreError::ClockBehind { behind_ms }))
    } else if ahead_ms > CLOCK_AGREE_MS {
        Some(Some(StoreError::ClockAhead { ahead_ms }))
    } else if db_ms.saturating_sub(before) <= agree && after.saturating_sub(db_ms) <= agree {
        Some(None)
    } else {
        None
    }
}

impl Pg {
    /// Reads the database's clock once and judges this server's against it: off when the whole of the reading's
    /// window lies further than [`CLOCK_AGREE_MS`] from it, right again when the whole of it lies within (a clock found
    /// off, [`CLOCK_BACK_MARGIN_MS`] within: [`judge`]); a reading that straddles the edge leaves the verdict as it
    /// was.
    pub async fn read_clock(&self) -> Result<(), StoreError> {
        let c = self.client().await?;
        let st = c.prepare_cached("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT").await?;
        let before = crate::app::now_ms();
        let row =
            bounded(STATEMENT_WAIT, "reading the database's clock", async { Ok(c.query_one(&st, &[]).await?) }).await?;
        let after = crate::app::now_ms();
        let db_ms: i64 = row.get(0);
        let was_off = self.clock.lock().unwrap_or_else(|e| e.into_inner()).is_some();
        let Some(off) = judge(before, after, db_ms, was_off) else { return Ok(()) };
        let mut verdict = self.clock.lock().unwrap_or_else(|e| e.into_inner());
        match (&off, verdict.is_some()) {
            (Some(e), _) => {
                let now = crate::app::now_ms();
                let said = OFF_SAID_MS.load(Ordering::Relaxed);
                if verdict.is_none() || now.saturating_sub(said).abs() >= 60_000 {
                    OFF_SAID_MS.store(now, Ordering::Relaxed);
                    tracing::error!(error = %e, limit_ms = CLOCK_AGREE_MS,
                        "this server's clock is off the shared database's: it answers alerts 500, sends no orders \
                         and fails its health check until its clock is set right (check NTP)");
                }
            }
            (None, true) => tracing::warn!("this server's clock agrees with the shared database's again"),
            (None, false) => {}
        }
        *verdict = off;
        Ok(())
    }

    /// Why this server must neither store nor send while its clock is off the database's ([`Pg::read_clock`]).
    pub fn clock_off(&self) -> Option<StoreError> {
        self.clock.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock found off is right again only once well within the edge: at 390 ms off it stays off (the edge alone
    /// flipped it back and forth with NTP's jitter), at 290 ms it is right; a clock right stays right at 390 ms.
    #[test]
    fn a_clock_found_off_comes_back_only_well_within_the_edge() {
        let (before, after) = (1_000_000, 1_000_001);
        assert!(matches!(judge(before, after, after + 401, false), Some(Some(StoreError::ClockBehind { .. }))));
        assert!(matches!(judge(before, after, before - 401, false), Some(Some(StoreError::ClockAhead { .. }))));
        assert!(matches!(judge(before, after, after + 390, false), Some(None)));
        assert!(judge(before, after, after + 390, true).is_none(), "still off near the edge");
        assert!(judge(before, after, before - 390, true).is_none(), "still off near the edge");
        assert!(matches!(judge(before, after, after + 290, true), Some(None)));
    }

    /// A database 150 ms away (every reading's round trip longer than the 100 ms once required of a verdict): a
    /// clock found off comes back once right, and one off is found off; a window straddling the edge says nothing.
    #[test]
    fn a_database_further_than_100_ms_away_still_gets_verdicts() {
        let (before, after) = (1_000_000, 1_000_150);
        assert!(matches!(judge(before, after, before + 75, true), Some(None)), "right again");
        assert!(matches!(judge(before, after, before + 75, false), Some(None)));
        assert!(matches!(judge(before, after, after + 401, false), Some(Some(StoreError::ClockBehind { .. }))));
        assert!(matches!(judge(before, after, before - 401, true), Some(Some(StoreError::ClockAhead { .. }))));
        assert!(judge(before, after, after + 300, false).is_none(), "the window straddles the edge");
        // A reading wider than twice the edge can only find a clock off, never right.
        assert!(judge(before, before + 900, before + 450, true).is_none());
    }
}
