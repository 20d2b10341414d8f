//! Bots' leases on the shared database: one server at a time sends a bot's outbox rows (in order) and reads
//! its account. A lease is renewed while held and expires when its server stops renewing it (killed, or cut
//! off from PostgreSQL); another server then takes the bot over.

use super::{Pg, StoreError};

/// What taking a bot's lease came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Another server holds it (or is taking it right now).
    Held,
    /// Taken; `over` is true when it was taken from another server whose lease expired without being given
    /// back: that server may have sent rows it did not get to record.
    Ours {
        /// Taken over from a server that stopped.
        over: bool,
    },
}

impl Pg {
    /// Takes `holder`'s lease on a bot until `until_ms`, if it is free, expired or already `holder`'s. A lease
    /// row another server is taking at this instant is skipped (`FOR UPDATE SKIP LOCKED`), never waited for.
    pub async fn take_lease(
        &self,
        strategy: &str,
        bot: &str,
        holder: &str,
        now_ms: i64,
        until_ms: i64,
    ) -> Result<Taken, StoreError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await?;
        let row = tx
            .query_opt(
                "SELECT holder, expires_ms FROM bot_leases WHERE strategy = $1 AND bot = $2 FOR UPDATE SKIP LOCKED",
                &[&strategy, &bot],
            )
            .await?;
        let taken = match row {
            Some(r) => {
                let (current, expires): (Option<String>, i64) = (r.get(0), r.get(1));
                let free = current.is_none() || current.as_deref() == Some(holder) || expires < now_ms;
                if free {
                    tx.execute(
                        "UPDATE bot_leases SET holder = $3, expires_ms = $4 WHERE strategy = $1 AND bot = $2",
                        &[&strategy, &bot, &holder, &until_ms],
                    )
                    .await?;
                    Taken::Ours { over: current.is_some_and(|c| c != holder) }
                } else {
                    Taken::Held
                }
            }
            None => {
                let inserted = tx
                    .query_opt(
                        "INSERT INTO bot_leases (strategy, bot, holder, expires_ms) VALUES ($1, $2, $3, $4)
                         ON CONFLICT DO NOTHING RETURNING 1",
                        &[&strategy, &bot, &holder, &until_ms],
                    )
                    .await?;
                if inserted.is_some() {
                    Taken::Ours { over: false }
                } else {
                    Taken::Held
                }
            }
        };
        tx.commit().await?;
        Ok(taken)
    }

    /// Extends every lease `holder` holds to `until_ms`; returns them (strategy, bot). A lease another server
    /// took over meanwhile is not among them.
    pub async fn renew_leases(&self, holder: &str, until_ms: i64) -> Result<Vec<(String, String)>, StoreError> {
        let c = self.client().await?;
        let rows = c
            .query(
                "UPDATE bot_leases SET expires_ms = $2 WHERE holder = $1 RETURNING strategy, bot",
                &[&holder, &until_ms],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Gives every lease `holder` holds back; returns how many.
    pub async fn give_all_leases(&self, holder: &str) -> Result<u64, StoreError> {
        let c = self.client().await?;
        Ok(c.execute("UPDATE bot_leases SET holder = NULL, expires_ms = 0 WHERE holder = $1", &[&holder]).await?)
    }

    /// Gives a bot's lease back (another server may take it at once).
    pub async fn give_lease(&self, strategy: &str, bot: &str, holder: &str) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute(
            "UPDATE bot_leases SET holder = NULL, expires_ms = 0 WHERE strategy = $1 AND bot = $2 AND holder = $3",
            &[&strategy, &bot, &holder],
        )
        .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Leases against a real PostgreSQL.
    use crate::lease::Leases;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_another_server_took_over_is_not_valid_again_after_a_renewal() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        assert!(lease.valid() && a.holds("s", "bot"));
        // This server was paused (or cut off from PostgreSQL) past the lease's time, and another one took the
        // bot over, as `take_lease` does with an expired lease; then this one's renewals run again.
        let now = crate::app::now_ms();
        pg.client()
            .await
            .unwrap()
            .execute("UPDATE bot_leases SET holder = 'other', expires_ms = $1", &[&(now + 10_000)])
            .await
            .unwrap();
        tokio::time::sleep(ttl * 4 / 5).await;
        // Renewed several times meanwhile: none of them renewed the lease the other server holds, so this one
        // must not send under it (both would send the bot's rows) nor keep its own copy of the bot's state.
        assert!(!lease.valid(), "a lease another server holds is still valid here");
        assert!(!a.holds("s", "bot"), "a lease another server holds is still held here");
        assert!(a.take("s", "bot").await.unwrap().is_none(), "the other server's lease is taken again");
        drop(lease);
        drop(server);
    }
}
