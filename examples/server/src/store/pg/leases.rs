//! Bots' leases on the shared database: one server at a time sends a bot's outbox rows (in order) and reads
//! its account. A lease is renewed while held and expires when its server stops renewing it (killed, or cut
//! off from PostgreSQL); another server then takes the bot over.

use super::batch::{clock_agrees, CLOCK_STEP_MS};
use super::{bounded, Pg, StoreError, STATEMENT_WAIT};
use std::sync::atomic::{AtomicI64, Ordering};

/// What taking a bot's lease came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Another server holds it (or is taking it right now), or this server's clock is off the database's.
    Held,
    /// Taken; `over` is true when it was taken from another server whose lease expired without being given
    /// back: that server may have sent rows it did not get to record.
    Ours {
        /// Taken over from a server that stopped.
        over: bool,
        /// When the bot was last taken over (now, if `over`), by any server (Unix ms; 0 never): its rows
        /// created before may have been sent without being recorded.
        unsure_ms: i64,
    },
}

/// A test's bot (`lapse-fails`) whose lease's next lapse fails, as one whose connection is lost while it runs
/// (see `an_unsure_lease_whose_lapse_failed_is_not_given_back_clean_at_the_stop`).
#[cfg(test)]
pub(crate) static LAPSE_FAILS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// When a lease was last refused for this server's clock (Unix ms): said once a minute, not at every try.
static CLOCK_OFF_WARNED_MS: AtomicI64 = AtomicI64::new(0);

/// Says why no lease is taken while this server's clock is off the database's.
fn warn_clock_off(why: &StoreError) {
    let now = crate::app::now_ms();
    let last = CLOCK_OFF_WARNED_MS.load(Ordering::Relaxed);
    if now.saturating_sub(last).abs() >= 60_000
        && CLOCK_OFF_WARNED_MS.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        tracing::warn!(error = %why, "no bot's lease is taken: this server sends no orders until its clock is set right");
    }
}

impl Pg {
    /// Takes `holder`'s lease on a bot for `ttl_ms`, if it is free, expired, or already `holder`'s. A lease last
    /// renewed at a time further ahead of the database's clock than a live holder's renewal could be (written
    /// under a clock since set back) is restamped to run out one of its own ttl from now, and held. A lease row another server is taking at this instant is skipped (`FOR UPDATE SKIP
    /// LOCKED`), never waited for. A server whose clock (`now_ms`) is [`CLOCK_STEP_MS`] or more off the
    /// database's takes nothing ([`Taken::Held`]), as its batches are refused.
    pub async fn take_lease(
        &self,
        strategy: &str,
        bot: &str,
        holder: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Taken, StoreError> {
        // Off by less than the batches tolerate, its sends were still misjudged: a peer's rows looked ahead of its
        // clock (and expired unsent) or its own ahead of theirs.
        if let Some(e) = self.clock_off() {
            warn_clock_off(&e);
            return Ok(Taken::Held);
        }
        bounded(STATEMENT_WAIT, "taking a bot's lease", async {
            let mut c = self.client().await?;
            let tx = c.transaction().await?;
            // The database's time comes back whether or not the bot has a lease row yet.
            let r = tx
                .query_one(
                    "SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT, l.holder, l.expires_ms, l.unsure_ms,
                            l.renewed_ms, l.found
                     FROM (SELECT 1) AS one LEFT JOIN LATERAL
                          (SELECT holder, expires_ms, unsure_ms, renewed_ms, TRUE AS found FROM bot_leases
                           WHERE strategy = $1 AND bot = $2 FOR UPDATE SKIP LOCKED) AS l ON TRUE",
                    &[&strategy, &bot],
                )
                .await?;
            let db_ms: i64 = r.get(0);
            // A server whose clock is off would send the bot's rows judged by it (their deadlines, and which of
            // them a takeover leaves unsure), and its batches are refused for the same reason: it takes no bot.
            if let Err(e) = clock_agrees(db_ms, now_ms) {
                warn_clock_off(&e);
                tx.rollback().await?;
                return Ok(Taken::Held);
            }
            // Stamped by the database's clock, not the holder's: judged against a peer's clock, a holder whose clock
            // was behind had its live lease taken for expired, and one ahead its renewal taken for a clock since set
            // back, and both servers sent the bot's rows.
            let until_ms = db_ms.saturating_add(ttl_ms);
            let taken = if r.get::<_, Option<bool>>(5).is_some() {
                let (current, expires, unsure): (Option<String>, i64, i64) = (r.get(1), r.get(2), r.get(3));
                let renewed: i64 = r.get(4);
                // A live holder's renewal is stamped by this clock, at most now: a renewal stamped more than
                // CLOCK_STEP_MS ahead was made before the database's clock was set back (a restart or a failover
                // onto a clock that was behind), or by a server of an older version under its own clock that was
                // ahead. Its expiry would hold the bot, its rows unsent, for the whole step; but its holder may be
                // alive and sending under it until its next renewal, so it is not taken over here (two servers
                // would send the bot's rows): restamped to expire one of its own ttl from now, which a live holder
                // renews and a dead one's lease runs out (then taken over as expired, its rows looked up). Told by
                // the renewal, not the expiry: a peer whose leases last longer (another `--lease-ttl-secs`) holds
                // its bots.
                let stepped = renewed > db_ms.saturating_add(CLOCK_STEP_MS);
                let expired = expires < db_ms;
                let free = current.is_none() || current.as_deref() == Some(holder) || expired;
                if stepped && !free {
                    let own_ttl_ms = expires.saturating_sub(renewed).max(0);
                    tx.execute(
                        "UPDATE bot_leases SET renewed_ms = $3, expires_ms = $4 WHERE strategy = $1 AND bot = $2",
                        &[&strategy, &bot, &db_ms, &db_ms.saturating_add(own_ttl_ms)],
                    )
                    .await?;
                    Taken::Held
                } else if free {
                    let over = current.is_some_and(|c| c != holder);
                    let unsure_ms = if over { unsure.max(now_ms) } else { unsure };
                    tx.execute(
                        "UPDATE bot_leases SET holder = $3, expires_ms = $4, unsure_ms = $5, renewed_ms = $6
                         WHERE strategy = $1 AND bot = $2",
                        &[&strategy, &bot, &holder, &until_ms, &unsure_ms, &db_ms],
                    )
                    .await?;
                    Taken::Ours { over, unsure_ms }
                } else {
                    Taken::Held
                }
            } else {
                let inserted = tx
                    .query_opt(
                        "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms)
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING 1",
                        &[&strategy, &bot, &holder, &until_ms, &db_ms],
                    )
                    .await?;
                if inserted.is_some() {
                    Taken::Ours { over: false, unsure_ms: 0 }
                } else {
                    Taken::Held
                }
            };
            tx.commit().await?;
            Ok(taken)
        })
        .await
    }

    /// Extends every lease `holder` holds to `ttl_ms` from now by the database's clock (see
    /// [`Pg::take_lease`]); returns them (strategy, bot). A lease another server took over meanwhile is not among
    /// them. When `holder`'s clock (`now_ms`) is [`CLOCK_STEP_MS`] or more off the database's, none is renewed:
    /// every one is lapsed instead ([`Pg::lapse_lease`]), in the same statement, and the clock's error returned.
    pub async fn renew_leases(
        &self,
        holder: &str,
        now_ms: i64,
        ttl_ms: i64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let asked = std::time::Instant::now();
        // A clock found off by the clock reader ([`Pg::read_clock`]) lapses every lease as one off by a step does.
        let off = self.clock_off();
        let step_ms = if off.is_some() { 0 } else { CLOCK_STEP_MS };
        bounded(STATEMENT_WAIT, "renewing the bots' leases", async {
            let c = self.client().await?;
            // `now_ms` as it reads once a connection is free (see `Leases::renew_at`).
            let now_ms = now_ms.saturating_add(i64::try_from(asked.elapsed().as_millis()).unwrap_or(i64::MAX));
            // A server whose clock is off judges its bots' rows by it (a peer's rows look expired or ahead, and
            // orders answered processed never go out), and its batches and takings are refused for it: its
            // leases pass to servers whose clocks are right, once run out. Lapsed, not left in its name, so that
            // a later renewal under a clock set right does not keep bots this server no longer counts as held.
            let rows = c
                .query(
                    "WITH db AS (SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT AS ms),
                     renewed AS (UPDATE bot_leases SET renewed_ms = db.ms, expires_ms = db.ms + $2 FROM db
                                 WHERE holder = $1 AND abs(db.ms - $3) < $4 RETURNING strategy, bot),
                     lapsed AS (UPDATE bot_leases SET holder = holder || ' (lapsed)' FROM db
                                WHERE holder = $1 AND abs(db.ms - $3) >= $4)
                     SELECT db.ms, r.strategy, r.bot FROM db LEFT JOIN renewed AS r ON TRUE",
                    &[&holder, &ttl_ms, &now_ms, &step_ms],
                )
                .await?;
            let db_ms: i64 = rows.first().map_or(now_ms, |r| r.get(0));
            clock_agrees(db_ms, now_ms)?;
            if let Some(e) = off {
                return Err(e);
            }
            Ok(rows
                .iter()
                .filter_map(|r| Some((r.get::<_, Option<String>>(1)?, r.get::<_, Option<String>>(2)?)))
                .collect())
        })
        .await
    }

    /// Gives every lease `holder` holds back but those of `keep` (strategy, bot), which expire in its name and
    /// are taken over (see [`Pg::lapse_lease`]); returns how many were given back.
    pub async fn give_all_leases(&self, holder: &str, keep: &[(String, String)]) -> Result<u64, StoreError> {
        let (strategies, bots): (Vec<&str>, Vec<&str>) = keep.iter().map(|(s, b)| (s.as_str(), b.as_str())).unzip();
        bounded(STATEMENT_WAIT, "giving the leases back", async {
            let c = self.client().await?;
            Ok(c.execute(
                "UPDATE bot_leases SET holder = NULL, expires_ms = 0
                 WHERE holder = $1 AND (strategy, bot) NOT IN (SELECT * FROM unnest($2::TEXT[], $3::TEXT[]))",
                &[&holder, &strategies, &bots],
            )
            .await?)
        })
        .await
    }

    /// Lets a bot's lease that ran out while held expire in another name than `holder`'s: not renewed with
    /// `holder`'s other leases, not taken back by `holder` as its own, and seen as a takeover by whichever server
    /// takes it once it has expired (so that rows it may have sent are looked up, not taken as clean).
    pub async fn lapse_lease(&self, strategy: &str, bot: &str, holder: &str) -> Result<(), StoreError> {
        #[cfg(test)]
        if bot == "lapse-fails" && LAPSE_FAILS.swap(false, Ordering::SeqCst) {
            return Err(StoreError::Unreachable("the test's lapse is cut off".into()));
        }
        bounded(STATEMENT_WAIT, "marking a lease lapsed", async {
            let c = self.client().await?;
            c.execute(
                "UPDATE bot_leases SET holder = holder || ' (lapsed)' WHERE strategy = $1 AND bot = $2 AND holder = $3",
                &[&strategy, &bot, &holder],
            )
            .await?;
            Ok(())
        })
        .await
    }

    /// Gives a bot's lease back (another server may take it at once).
    pub async fn give_lease(&self, strategy: &str, bot: &str, holder: &str) -> Result<(), StoreError> {
        bounded(STATEMENT_WAIT, "giving a lease back", async {
            let c = self.client().await?;
            c.execute(
                "UPDATE bot_leases SET holder = NULL, expires_ms = 0 WHERE strategy = $1 AND bot = $2 AND holder = $3",
                &[&strategy, &bot, &holder],
            )
            .await?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Leases against a real PostgreSQL.
    use super::Taken;
    use crate::lease::Leases;
    use std::sync::Arc;
    use std::time::Duration;

    /// A PostgreSQL, a store on it, and a server's App sharing it with leases of `ttl`.
    pub(crate) async fn shared_app(
        ttl: Duration,
    ) -> (super::super::test_harness::Postgres, crate::store::Store, super::Pg, Arc<crate::app::App>) {
        let server = tokio::task::spawn_blocking(super::super::test_harness::Postgres::start).await.unwrap();
        let store =
            crate::store::Store::open_postgres(&server.url(), 4, crate::store::RowCaps::default()).await.unwrap();
        let pg = store.shared().unwrap();
        let app = crate::app::App::new(
            strategy_webhook::Engine::new(),
            store.writer(),
            store.reader(),
            (std::collections::HashMap::new(), std::collections::HashMap::new()),
            "https://x".into(),
            "t".into(),
        );
        let app = Arc::new(app.with_shared(pg.clone(), Leases::shared(pg.clone(), ttl).unwrap()));
        (server, store, pg, app)
    }

    /// The sync takes a bot's lease fresh and adopts the stored states; the read is slow and fails (the table
    /// locked past a read's wait). The dispatcher took the same lease meanwhile: held here already, it was handed
    /// out not fresh, so the dispatcher skipped adoption and sent on this server's old copy, and an alert batch
    /// skipped the bot as held. Until an adoption succeeds, a joining user is handed the lease as fresh, and the
    /// batch adopts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_joined_before_its_adoption_succeeded_is_fresh_and_not_held() {
        let (server, store, pg, app) = shared_app(Duration::from_secs(10)).await;
        // This server's own copy, from when it last held the bot; another server stored a newer state since.
        app.set_bot_state("s", "bot", crate::paper::BotState { next_id: 3, ..Default::default() });
        pg.client()
            .await
            .unwrap()
            .execute("INSERT INTO bot_state (strategy, bot, state) VALUES ('s', 'bot', '{\"next_id\": 9}')", &[])
            .await
            .unwrap();
        let (mut locker, conn) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let tx = locker.transaction().await.unwrap();
        tx.batch_execute("LOCK TABLE bot_state IN ACCESS EXCLUSIVE MODE").await.unwrap();
        let sync_lease = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        assert!(sync_lease.fresh);
        let adopting = {
            let app = Arc::clone(&app);
            tokio::spawn(async move {
                let r = crate::dispatch::adopt_state(&app, "s", "bot", &sync_lease).await;
                (r, sync_lease)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        let dispatcher_lease = app.leases.take("s", "bot").await.unwrap().expect("held here");
        assert!(dispatcher_lease.fresh, "handed out as held before any adoption succeeded");
        assert!(!app.leases.holds("s", "bot"), "an alert batch would skip the bot's stored state");
        app.adopt_bot_states("s", vec![("bot".into(), r#"{"next_id": 9}"#.into(), i64::MAX)], None);
        assert_eq!(app.bot_state("s", "bot").next_id, 9, "the batch decides on the old copy");
        let (adopted, sync_lease) = adopting.await.unwrap();
        assert!(adopted.is_err(), "the read was meant to fail");
        sync_lease.give_back().await;
        tx.rollback().await.unwrap();
        // The dispatcher adopts in turn; then the lease is held, and joined as held.
        crate::dispatch::adopt_state(&app, "s", "bot", &dispatcher_lease).await.unwrap();
        assert!(app.leases.holds("s", "bot"));
        let joined = app.leases.take("s", "bot").await.unwrap().expect("held here");
        assert!(!joined.fresh);
        joined.give_back().await;
        dispatcher_lease.give_back().await;
        store.close().await.unwrap();
        drop(server);
    }

    /// A second user joined a lease before its first user's adoption, so it adopts too; its read came back after
    /// the first had adopted and delivered, and put the first delivery's stored state back over the second one
    /// still committing. A read that returns after another user adopted is not applied.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_joiners_late_adoption_does_not_undo_a_delivery() {
        let (server, store, pg, app) = shared_app(Duration::from_secs(10)).await;
        pg.client()
            .await
            .unwrap()
            .execute("INSERT INTO bot_state (strategy, bot, state) VALUES ('s', 'bot', '{\"next_id\": 9}')", &[])
            .await
            .unwrap();
        let dispatcher = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        let sync = app.leases.take("s", "bot").await.unwrap().expect("held here");
        assert!(sync.fresh);
        crate::dispatch::adopt_state(&app, "s", "bot", &dispatcher).await.unwrap();
        let first = crate::paper::BotState { next_id: 10, ..Default::default() };
        app.set_bot_state_committing("s", "bot", first.clone());
        app.writer.bot_state("s", "bot", serde_json::to_string(&first).unwrap()).await.unwrap();
        app.state_committed("s", "bot", false);
        app.set_bot_state_committing("s", "bot", crate::paper::BotState { next_id: 11, ..Default::default() });
        // The sync's read, out since before the dispatcher adopted, comes back now.
        crate::dispatch::adopt_state(&app, "s", "bot", &sync).await.unwrap();
        assert_eq!(app.bot_state("s", "bot").next_id, 11, "a delivery still committing was undone");
        sync.give_back().await;
        dispatcher.give_back().await;
        store.close().await.unwrap();
        drop(server);
    }

    /// A read of the stored states made under a lease that was lost since (another server took the bot over,
    /// closed the position and gave it back) came back after this server took the bot back: it was applied as
    /// the adoption of the new taking, whose own (newer) read was then dropped. A read counts only for the taking
    /// it was made under.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_made_under_a_lost_lease_is_not_the_adoption_of_the_next_one() {
        let ttl = Duration::from_millis(1_000);
        let (server, store, pg, app) = shared_app(ttl).await;
        let c = pg.client().await.unwrap();
        c.execute("INSERT INTO bot_state (strategy, bot, state) VALUES ('s', 'bot', '{\"next_id\": 9}')", &[])
            .await
            .unwrap();
        let first = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        // Lost: another server holds the bot past this one's renewal, then gives it back.
        c.execute("UPDATE bot_leases SET holder = 'other', expires_ms = $1", &[&(crate::app::now_ms() + 10_000)])
            .await
            .unwrap();
        tokio::time::sleep(ttl * 4 / 5).await;
        assert!(!first.valid());
        c.execute("UPDATE bot_leases SET holder = NULL, expires_ms = 0", &[]).await.unwrap();
        let again = app.leases.take("s", "bot").await.unwrap().expect("taken back");
        assert!(again.fresh);
        // The first taking's read comes back now: not this taking's adoption.
        crate::dispatch::adopt_state(&app, "s", "bot", &first).await.unwrap();
        assert!(app.leases.unadopted(&again), "a read of the lost lease adopted for the new one");
        assert!(!app.leases.holds("s", "bot"));
        crate::dispatch::adopt_state(&app, "s", "bot", &again).await.unwrap();
        assert!(app.leases.holds("s", "bot") && app.bot_state("s", "bot").next_id == 9);
        drop(first);
        again.give_back().await;
        drop(c);
        store.close().await.unwrap();
        drop(server);
    }

    /// A sync that read the account under its lease was paused past the lease's time after its last check; another
    /// server took the bot over and stored a newer state (a position it closed since). The paused sync's write
    /// stored its older reads over it, the closed position back. The write is fenced by the lease in its own
    /// transaction: dropped once the lease is another server's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_state_read_under_a_lease_lost_since_is_not_stored() {
        let (server, store, pg, app) = shared_app(Duration::from_secs(10)).await;
        let lease = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        assert!(lease.store_state(&app.writer, r#"{"next_id": 4}"#.into()).await.unwrap(), "stored while held");
        let stored = || async { app.reader.bot_state("s", "bot").unwrap() };
        assert_eq!(stored().await.as_deref(), Some(r#"{"next_id": 4}"#));
        // Another server takes the bot over and stores its state.
        let c = pg.client().await.unwrap();
        c.execute("UPDATE bot_leases SET holder = 'other', expires_ms = $1", &[&(crate::app::now_ms() + 10_000)])
            .await
            .unwrap();
        c.execute("UPDATE bot_state SET state = '{\"next_id\": 9}'", &[]).await.unwrap();
        let late = lease.store_state(&app.writer, r#"{"next_id": 5}"#.into()).await.unwrap();
        assert!(!late, "a state read under a lost lease was stored");
        assert_eq!(stored().await.as_deref(), Some(r#"{"next_id": 9}"#), "the new holder's state was overwritten");
        drop(lease);
        drop(c);
        store.close().await.unwrap();
        drop(server);
    }

    /// The fenced write of a sync went around the writer's queue (a transaction of its own): a delivery's newer
    /// state queued after it could commit first and be overwritten by the sync's older reads in the database. It
    /// goes through the writer now, in the order the two were queued.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_states_queued_after_a_syncs_write_lands_over_it() {
        let (server, store, pg, app) = shared_app(Duration::from_secs(10)).await;
        let lease = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        // The lease row held by another session: the sync's write waits on it.
        let mut c = pg.client().await.unwrap();
        let tx = c.transaction().await.unwrap();
        tx.query("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        let sync = tokio::spawn({
            let app = Arc::clone(&app);
            async move { lease.store_state(&app.writer, r#"{"next_id": 4}"#.into()).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A delivery's newer state, queued after the sync's.
        let delivery = tokio::spawn({
            let app = Arc::clone(&app);
            async move { app.writer.bot_state("s", "bot", r#"{"next_id": 9}"#.into()).await }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.rollback().await.unwrap();
        assert!(sync.await.unwrap().unwrap(), "stored under the lease");
        delivery.await.unwrap().unwrap();
        let stored = app.reader.bot_state("s", "bot").unwrap();
        assert_eq!(stored.as_deref(), Some(r#"{"next_id": 9}"#), "the sync's older state landed over the delivery's");
        drop(c);
        store.close().await.unwrap();
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_another_server_took_over_is_not_valid_again_after_a_renewal() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        a.adopted(&lease);
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

    /// A delivery's state not committed yet (PostgreSQL stalled past the lease's time, its commit retrying) was
    /// replaced by the older stored one in the next batch, once the lease's time had run out unrenewed: that
    /// batch decided without the delivery (a retried CLOSE found nothing to close, answered 200). A state still
    /// committing is kept; the batch after its commit adopts whatever is stored then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_state_still_committing_is_not_replaced_by_an_older_stored_one() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let (dir, store, app) = crate::app::tests::temp_app("committing");
        let app = app.with_shared(pg.clone(), Leases::shared(pg.clone(), ttl).unwrap());
        let lease = app.leases.take("s", "bot").await.unwrap().expect("a free lease is granted");
        let newer = crate::paper::BotState { next_id: 7, ..Default::default() };
        app.set_bot_state_committing("s", "bot", newer);
        // PostgreSQL stalls the renewals past the lease's time.
        let mut c = pg.client().await.unwrap();
        let tx = c.transaction().await.unwrap();
        tx.query("SELECT * FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        tokio::time::sleep(ttl * 6 / 5).await;
        assert!(!app.leases.holds("s", "bot"), "the lease's time ran out unrenewed");
        app.adopt_bot_states("s", vec![("bot".into(), r#"{"next_id": 3}"#.into(), 1)], None);
        assert_eq!(app.bot_state("s", "bot").next_id, 7, "the state still committing was replaced");
        // Once its commit has landed, a stored state is adopted again.
        app.state_committed("s", "bot", false);
        app.adopt_bot_states("s", vec![("bot".into(), r#"{"next_id": 3}"#.into(), 2)], None);
        assert_eq!(app.bot_state("s", "bot").next_id, 3);
        tx.rollback().await.unwrap();
        drop(lease);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_lost_and_taken_back_does_not_make_the_lost_one_valid_again() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        // A delivery holds the lease (and has read the bot's rows under it)...
        let delivering = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        // ...when this server is paused past the lease's time: another server takes the bot over, sends the
        // rows, goes idle and gives the lease back.
        let c = pg.client().await.unwrap();
        c.execute("UPDATE bot_leases SET holder = 'other', expires_ms = $1", &[&(crate::app::now_ms() + 10_000)])
            .await
            .unwrap();
        tokio::time::sleep(ttl * 4 / 5).await;
        assert!(!delivering.valid());
        c.execute("UPDATE bot_leases SET holder = NULL, expires_ms = 0", &[]).await.unwrap();
        // This server's sync takes the bot back: a new lease, valid; the delivery's, taken before the other
        // server sent its rows, must stay lost, or it would send them a second time.
        let again = a.take("s", "bot").await.unwrap().expect("a free lease is granted again");
        a.adopted(&again);
        assert!(again.valid() && a.holds("s", "bot"));
        assert!(!delivering.valid(), "a lease lost to another server is valid again once the bot is taken back");
        drop(delivering);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(again.valid(), "giving the lost lease back ends the new one");
        again.give_back().await;
        drop(server);
    }

    /// Whether the last user gives a lease back clean or lapses it is the lease's own state, not that user's: a
    /// delivery's lease lost before the bot was taken back, returned after the new one, lapsed a lease that was
    /// valid, and the bot waited out the lease's time for nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_lease_returned_last_does_not_lapse_the_one_taken_since() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let delivering = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        let c = pg.client().await.unwrap();
        c.execute("UPDATE bot_leases SET holder = 'other', expires_ms = $1", &[&(crate::app::now_ms() + 10_000)])
            .await
            .unwrap();
        tokio::time::sleep(ttl * 4 / 5).await;
        c.execute("UPDATE bot_leases SET holder = NULL, expires_ms = 0", &[]).await.unwrap();
        let again = a.take("s", "bot").await.unwrap().expect("a free lease is granted again");
        again.give_back().await;
        delivering.give_back().await;
        let holder: Option<String> = c.query_one("SELECT holder FROM bot_leases", &[]).await.unwrap().get(0);
        assert_eq!(holder, None, "given back clean, free for any server at once");
        drop(server);
    }

    /// A lease whose time ran out unrenewed (renewals stalled: the server cut off or paused) is no longer held
    /// for the bot's state: another server may have taken the bot over and stored a fill, and a batch here
    /// kept deciding against this server's own old copy (a reversal sized from a position closed there).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_run_out_unrenewed_no_longer_holds_the_bots_state() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        a.adopted(&lease);
        assert!(a.holds("s", "bot"));
        let mut blocker = pg.client().await.unwrap();
        let tx = blocker.transaction().await.unwrap();
        tx.execute("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        tokio::time::sleep(ttl * 12 / 10).await;
        assert!(!lease.valid());
        assert!(!a.holds("s", "bot"), "a lease past its time still holds the bot's state");
        tx.rollback().await.unwrap();
        drop(lease);
        drop(server);
    }

    /// A takeover is remembered with the lease, not only by the server that made it: that server's sync took a
    /// dead server's bot and gave it back clean at once, and the next server to take it sent the dead one's
    /// rows as never sent (a repeat refused on another check was recorded failed while the first order was in
    /// the market).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_takeover_outlives_a_clean_give_back() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        pg.client()
            .await
            .unwrap()
            .execute("INSERT INTO bot_leases (strategy, bot, holder, expires_ms) VALUES ('s', 'bot', 'dead', 0)", &[])
            .await
            .unwrap();
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("an expired lease is taken over");
        let over = a.unsure_before("s", "bot");
        assert!(over > 0, "a takeover is known to the server that made it");
        lease.give_back().await;
        let b = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = b.take("s", "bot").await.unwrap().expect("a lease given back is free");
        assert!(b.unsure_before("s", "bot") >= over, "the next server forgot the takeover");
        lease.give_back().await;
        // A clean hand-over with no takeover behind it stays clean.
        let fresh = b.take("s", "other-bot").await.unwrap().expect("a free lease");
        assert_eq!(b.unsure_before("s", "other-bot"), 0);
        fresh.give_back().await;
        drop(server);
    }

    /// A delivery left a row unsure when its lease went out of its sending time during stalled renewals, and the
    /// stalled renewal then landed before the lease was given back: given back clean, the next server took the bot
    /// as a clean hand-over and sent the row as never sent. Such a lease runs out and is taken over.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unsure_delivery_outlives_a_clean_give_back() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        a.adopted(&lease);
        let mut blocker = pg.client().await.unwrap();
        let tx = blocker.transaction().await.unwrap();
        tx.execute("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        tokio::time::sleep(ttl * 7 / 10).await;
        assert!(!lease.valid(), "renewals stalled: the lease is out of its sending time");
        a.left_unsure("s", "bot");
        let unsure = a.unsure_before("s", "bot");
        assert!(unsure > 0);
        tx.rollback().await.unwrap();
        a.renew().await;
        lease.give_back().await;
        taken_over_knowing(&pg, ttl, unsure).await;
        drop(server);
    }

    /// The same at a clean stop: the dispatcher let go of a lease its delivery left unsure while the sync still held
    /// it, and the stop gave every lease back clean; the next server sent the unsure row as never sent.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clean_stop_lets_an_unsure_lease_run_out() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let delivery = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        a.adopted(&delivery);
        let sync = a.take("s", "bot").await.unwrap().expect("joined");
        let mut blocker = pg.client().await.unwrap();
        let tx = blocker.transaction().await.unwrap();
        tx.execute("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        tokio::time::sleep(ttl * 7 / 10).await;
        assert!(!delivery.valid());
        a.left_unsure("s", "bot");
        let unsure = a.unsure_before("s", "bot");
        delivery.give_back().await;
        let _ = tx.rollback().await;
        drop(blocker);
        a.renew().await;
        a.give_back_all().await;
        drop(sync);
        taken_over_knowing(&pg, ttl, unsure).await;
        drop(server);
    }

    /// Another server takes bot `s/bot` over once its lease has run out, and knows that rows from before `unsure` may
    /// have gone out (a clean hand-over would have it send them as never sent).
    async fn taken_over_knowing(pg: &super::super::Pg, ttl: Duration, unsure: i64) {
        let b = Leases::shared(pg.clone(), ttl).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let taken = loop {
            if let Some(l) = b.take("s", "bot").await.unwrap() {
                break l;
            }
            assert!(std::time::Instant::now() < deadline, "the lapsed lease is taken over in time");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            b.unsure_before("s", "bot") >= unsure,
            "server B took the bot as a clean hand-over (unsure_before {}) though A left a row unsure at {unsure}",
            b.unsure_before("s", "bot")
        );
        taken.give_back().await;
    }

    /// A run whose clock was ahead died holding a bot; the restart set the clock back. The lease's expiry, written
    /// by the clock that was ahead, held the bot for the whole step and its rows expired unsent. A lease whose
    /// renewal no live server could have stamped since is restamped to run out one of its own ttl from now, and
    /// then taken over; one a live server could have renewed is held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_stamped_by_a_clock_since_set_back_is_taken_over() {
        let (server, pg) = super::super::migrated(4).await;
        let now = crate::app::now_ms();
        let c = pg.client().await.unwrap();
        c.execute(
            "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms) VALUES
             ('s', 'ahead', 'dead', $1, $2), ('s', 'live', 'peer', $3, $4), ('s', 'long', 'peer', $5, $6)",
            &[
                &(now + 50 * 60_000 + 1_000),
                &(now + 50 * 60_000),
                &(now + 20_000),
                &(now + 10_000),
                &(now + 120_000),
                &now,
            ],
        )
        .await
        .unwrap();
        assert_eq!(pg.take_lease("s", "ahead", "me", now, 10_000).await.unwrap(), Taken::Held);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let taken = loop {
            let now = crate::app::now_ms();
            match pg.take_lease("s", "ahead", "me", now, 10_000).await.unwrap() {
                Taken::Held => {
                    assert!(std::time::Instant::now() < deadline, "the stepped lease held the bot past its ttl");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                t => break t,
            }
        };
        assert!(matches!(taken, Taken::Ours { over: true, unsure_ms } if unsure_ms >= now), "{taken:?}");
        // A peer with a clock a little ahead, or renewing a moment ago, still holds its bot.
        assert_eq!(pg.take_lease("s", "live", "me", now, 10_000).await.unwrap(), Taken::Held);
        // A peer whose leases last two minutes (another --lease-ttl-secs), renewed just now, holds its bot too.
        assert_eq!(pg.take_lease("s", "long", "me", now, 10_000).await.unwrap(), Taken::Held);
        drop(c);
        drop(server);
    }

    /// The database's time (Unix ms).
    async fn db_now(pg: &super::Pg) -> i64 {
        let c = pg.client().await.unwrap();
        c.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await.unwrap().get(0)
    }

    /// A server holds a bot, renewing every 2 s, when the database's clock moves 40 s back (a failover onto a
    /// standby whose clock was behind). Its last renewal read as made under a clock since set back, and a peer
    /// took the bot over while the holder was still sending under its lease: two servers sent the bot's rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_lease_is_not_taken_over_after_the_db_clock_steps_back() {
        let (server, pg) = super::super::migrated(4).await;
        let a = Leases::shared(pg.clone(), Duration::from_secs(10)).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease");
        a.adopted(&lease);
        pg.client()
            .await
            .unwrap()
            .execute("UPDATE bot_leases SET renewed_ms = renewed_ms + 40000, expires_ms = expires_ms + 40000", &[])
            .await
            .unwrap();
        let now = db_now(&pg).await;
        let taken = pg.take_lease("s", "bot", "peer", now, 10_000).await.unwrap();
        assert!(lease.valid() && a.holds("s", "bot"), "the holder still sends under its lease");
        assert_eq!(taken, Taken::Held, "a live holder's lease was taken over: two servers send one bot's rows");
        // The holder's next renewal keeps it.
        a.renew().await;
        assert_eq!(pg.take_lease("s", "bot", "peer", db_now(&pg).await, 10_000).await.unwrap(), Taken::Held);
        assert!(lease.valid() && a.holds("s", "bot"));
        lease.give_back().await;
        drop(server);
    }

    /// A server's clock drifts 5 min off the database's while it holds a bot: its batches and new takings are
    /// refused, but it kept renewing the lease and sending the bot's rows judged by its clock (a peer's rows
    /// taken for expired, market orders answered processed never sent), and a peer whose clock is right got
    /// Held. Its renewal gives the leases up instead, and the peer takes the bot.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_whose_clock_drifts_off_gives_up_the_leases_it_holds() {
        let (server, pg) = super::super::migrated(4).await;
        let a = Leases::shared(pg.clone(), Duration::from_millis(1_000)).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease");
        a.adopted(&lease);
        assert!(lease.valid() && a.holds("s", "bot"));
        a.renew_at(db_now(&pg).await + 300_000).await;
        assert!(!lease.valid(), "the lease is still sent under by a server whose clock is off");
        assert!(!a.holds("s", "bot"), "the bot's state is still decided on by a server whose clock is off");
        assert!(a.take("s", "bot").await.unwrap().is_none(), "joined while its clock is off");
        // The renewals under the right clock that follow do not keep it either: a peer takes it once it has run out.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let taken = loop {
            a.renew().await;
            match pg.take_lease("s", "bot", "peer", db_now(&pg).await, 1_000).await.unwrap() {
                Taken::Held => {
                    assert!(std::time::Instant::now() < deadline, "the peer never took the bot");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                t => break t,
            }
        };
        assert!(matches!(taken, Taken::Ours { over: true, .. }), "{taken:?}");
        drop(lease);
        drop(server);
    }

    /// A server whose clock is right, its renewal held up 31 s behind takings queued on a busy pool: it read its
    /// clock before that wait, looked 31 s behind the database, and lapsed every lease it held (its bots' orders
    /// stopped until they ran out, then were taken over with lookups), logging a clock that was never off. The
    /// clock is checked as it reads when the statement runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_late_renewal_does_not_lapse_the_leases_of_a_server_whose_clock_is_right() {
        let (server, pg) = super::super::migrated(4).await;
        let a = Leases::shared(pg.clone(), Duration::from_secs(120)).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease");
        a.adopted(&lease);
        let stalled = a.stall().await;
        let renewal = {
            let a = Arc::clone(&a);
            tokio::spawn(async move { a.renew().await })
        };
        tokio::time::sleep(Duration::from_millis(31_000)).await;
        drop(stalled);
        renewal.await.unwrap();
        let holder: String = pg
            .client()
            .await
            .unwrap()
            .query_one("SELECT holder FROM bot_leases WHERE strategy = 's' AND bot = 'bot'", &[])
            .await
            .unwrap()
            .get(0);
        assert!(!holder.ends_with("(lapsed)"), "a right clock's lease was lapsed by a late renewal: {holder}");
        assert!(lease.valid() && a.holds("s", "bot"), "the holder stopped sending the bot's rows");
        lease.give_back().await;
        drop(server);
    }

    /// A peer holds a bot, renewed a moment ago by a clock that is right. A server whose clock was 6 min ahead took
    /// the lease for expired, and one 2 min behind took the renewal for a clock since set back: either then sent
    /// the bot's rows beside the peer, and an order could go out twice. A lease is judged by the database's clock
    /// too.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_whose_clock_is_off_does_not_take_a_peers_live_lease() {
        let (server, pg) = super::super::migrated(4).await;
        let c = pg.client().await.unwrap();
        let real: i64 =
            c.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await.unwrap().get(0);
        c.execute(
            "INSERT INTO bot_leases (strategy, bot, holder, expires_ms, renewed_ms) VALUES ('s', 'bot', 'peer', $1, $2)",
            &[&(real + 10_000), &real],
        )
        .await
        .unwrap();
        let ahead = real + 360_000;
        assert_eq!(pg.take_lease("s", "bot", "ahead", ahead, 10_000).await.unwrap(), Taken::Held);
        let behind = real - 120_000;
        assert_eq!(pg.take_lease("s", "bot", "behind", behind, 10_000).await.unwrap(), Taken::Held);
        drop(c);
        drop(server);
    }

    /// Two servers send one bot. One whose clock was 2 min behind (or 6 min ahead) took a free lease and renewed it
    /// by that clock; a second later a peer whose clock is right took the live lease for expired (or renewed under
    /// a clock since set back), and both sent the bot's rows. A server whose clock is off the database's takes no
    /// lease, as its batches are refused; the peer takes the bots, and keeps them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_server_whose_clock_is_off_takes_no_lease() {
        let (server, pg) = super::super::migrated(4).await;
        let c = pg.client().await.unwrap();
        let real: i64 =
            c.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await.unwrap().get(0);
        let (behind, ahead, now) = (real - 120_000, real + 360_000, real + 1_000);
        assert_eq!(pg.take_lease("s", "b1", "behind", behind, 10_000).await.unwrap(), Taken::Held);
        assert_eq!(pg.take_lease("s", "b2", "ahead", ahead, 10_000).await.unwrap(), Taken::Held);
        let ours = Taken::Ours { over: false, unsure_ms: 0 };
        assert_eq!(pg.take_lease("s", "b1", "peer", now, 10_000).await.unwrap(), ours);
        assert_eq!(pg.take_lease("s", "b2", "peer", now, 10_000).await.unwrap(), ours);
        assert_eq!(pg.take_lease("s", "b1", "behind", behind + 1_000, 10_000).await.unwrap(), Taken::Held);
        assert_eq!(pg.take_lease("s", "b2", "ahead", ahead + 1_000, 10_000).await.unwrap(), Taken::Held);
        let holders: Vec<String> =
            c.query("SELECT holder FROM bot_leases", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(holders, ["peer", "peer"]);
        drop(c);
        drop(server);
    }

    /// Servers within the accepted 30 s of the database's clock: one 20 s behind took a bot's lease (10 s) and
    /// renewed it; stamped by its clock, the lease had expired by the database's at once, and a peer 20 s ahead
    /// took it over while it was sending. A lease's times are the database's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_live_lease_of_a_server_a_little_behind_is_not_taken_over() {
        let (server, pg) = super::super::migrated(4).await;
        let c = pg.client().await.unwrap();
        let real: i64 =
            c.query_one("SELECT floor(extract(epoch FROM now()) * 1000)::BIGINT", &[]).await.unwrap().get(0);
        let (slow, fast) = (real - 20_000, real + 20_000);
        assert_eq!(
            pg.take_lease("s", "bot", "slow", slow, 10_000).await.unwrap(),
            Taken::Ours { over: false, unsure_ms: 0 }
        );
        assert_eq!(pg.take_lease("s", "bot", "fast", fast, 10_000).await.unwrap(), Taken::Held, "taken over");
        assert_eq!(pg.renew_leases("slow", slow, 10_000).await.unwrap(), [("s".to_owned(), "bot".to_owned())]);
        assert_eq!(pg.take_lease("s", "bot", "fast", fast + 1_000, 10_000).await.unwrap(), Taken::Held, "taken over");
        // And a server a little ahead keeps its lease from one a little behind.
        assert_eq!(
            pg.take_lease("s", "other", "fast", fast, 10_000).await.unwrap(),
            Taken::Ours { over: false, unsure_ms: 0 }
        );
        assert_eq!(pg.renew_leases("fast", fast, 10_000).await.unwrap().len(), 1);
        assert_eq!(pg.take_lease("s", "other", "slow", slow + 1_000, 10_000).await.unwrap(), Taken::Held, "taken over");
        drop(c);
        drop(server);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lease_that_ran_out_while_held_is_seen_as_a_takeover_by_the_next_server() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease is granted");
        // Renewals stall (PostgreSQL slow or out of reach for this server) until the lease has run out here,
        // with a delivery's request possibly still on its way to the broker.
        let mut blocker = pg.client().await.unwrap();
        let tx = blocker.transaction().await.unwrap();
        tx.execute("SELECT 1 FROM bot_leases FOR UPDATE", &[]).await.unwrap();
        tokio::time::sleep(ttl * 7 / 10).await;
        assert!(!lease.valid());
        let returned = tokio::spawn(lease.give_back());
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.commit().await.unwrap();
        returned.await.unwrap();
        // Once it has expired, the next server to take it must know it takes over from one that may have sent
        // rows without recording them; a lease given back would read as a clean hand-over.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let taken = loop {
            let now = crate::app::now_ms();
            match pg.take_lease("s", "bot", "other", now, 1_000).await.unwrap() {
                Taken::Held => {
                    assert!(std::time::Instant::now() < deadline, "the lease never expired");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                t => break t,
            }
        };
        assert!(matches!(taken, Taken::Ours { over: true, unsure_ms } if unsure_ms > 0), "{taken:?}");
        drop(server);
    }

    /// The holder measured its lease's time with the wall clock (`now_ms`), the database by its own. This server's
    /// clock steps back 4 s right after a renewal (an NTP step, well inside the 30 s the servers accept), then its
    /// renewals stop getting through (stalled, or the server cut off from PostgreSQL). The lease expires in the
    /// database one ttl after the renewal and a peer takes the bot over, while here the lease was still valid (and
    /// `send_until` still in the future) for 4 s more: both servers sent the bot's rows.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_clock_step_back_keeps_a_lease_valid_after_a_peer_took_it_over() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(5_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "bot").await.unwrap().expect("a free lease");
        a.adopted(&lease);
        // The renewal reads the clock as it was just before the step back: 4 s ahead of what it reads after.
        let step = 4_000;
        a.renew_at(crate::app::now_ms() + step).await;
        let renewed = std::time::Instant::now();
        // From here no renewal gets through.
        let stalled = a.stall().await;
        // The lease expires in the database one ttl after that renewal; a peer takes the bot over.
        tokio::time::sleep(ttl + Duration::from_millis(300)).await;
        let taken = pg.take_lease("s", "bot", "peer", db_now(&pg).await, 5_000).await.unwrap();
        assert!(matches!(taken, Taken::Ours { over: true, .. }), "{taken:?}");
        let elapsed = renewed.elapsed();
        let until = lease.send_until().unwrap();
        assert!(
            !lease.valid() && until <= tokio::time::Instant::now(),
            "{elapsed:?} after the last renewal a peer holds the bot, and this server still sends under its lease \
             (valid: {}, may send for {:?} more)",
            lease.valid(),
            until.saturating_duration_since(tokio::time::Instant::now())
        );
        drop(stalled);
        drop(lease);
        drop(server);
    }

    /// A delivery left a row unsure under a bot's lease, and marking the lease lapsed at its give-back failed (its
    /// connection lost: a reset, a failover, PostgreSQL out of reach). The lease was still in this server's name in
    /// the database, and the clean stop that followed (SIGTERM) gave every lease in its name back with
    /// `give_all_leases`, this one too: the next server took the bot as a clean hand-over (not a takeover) and sent
    /// the unsure row as never sent. The stop lapses it instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unsure_lease_whose_lapse_failed_is_not_given_back_clean_at_the_stop() {
        let (server, pg) = super::super::migrated(4).await;
        let ttl = Duration::from_millis(1_000);
        let a = Leases::shared(pg.clone(), ttl).unwrap();
        let lease = a.take("s", "lapse-fails").await.unwrap().expect("a free lease");
        a.adopted(&lease);
        // A delivery under it left a row unsure (its request may have reached the broker).
        a.left_unsure("s", "lapse-fails");
        // The lapse at the give-back fails and never lands.
        super::LAPSE_FAILS.store(true, std::sync::atomic::Ordering::SeqCst);
        lease.give_back().await;
        assert!(!super::LAPSE_FAILS.load(std::sync::atomic::Ordering::SeqCst), "the lapse was not tried");
        let c = pg.client().await.unwrap();
        let holder: Option<String> = c.query_one("SELECT holder FROM bot_leases", &[]).await.unwrap().get(0);
        assert!(holder.is_some_and(|h| !h.ends_with("(lapsed)")), "still in this server's name");
        // The clean stop.
        a.give_back_all().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let taken = loop {
            match pg.take_lease("s", "lapse-fails", "peer", db_now(&pg).await, 1_000).await.unwrap() {
                Taken::Held => {
                    assert!(std::time::Instant::now() < deadline, "the lease never expired");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                t => break t,
            }
        };
        assert!(
            matches!(taken, Taken::Ours { over: true, .. }),
            "a bot with a row left unsure was handed over clean: {taken:?}"
        );
        drop(c);
        drop(server);
    }

    /// The bot's state long 10 AAPL, stored by this server holding the bot's lease (as its last sync or delivery
    /// did); returns the lease, still held.
    async fn holding_long_10(app: &Arc<crate::app::App>) -> (crate::lease::Lease, crate::paper::BotState) {
        let lease = app.leases.take("s", "bot").await.unwrap().expect("a free lease");
        crate::dispatch::adopt_state(app, "s", "bot", &lease).await.unwrap();
        let held: crate::paper::BotState =
            serde_json::from_str(r#"{"positions":[{"instrument":"AAPL","direction":"long","quantity":"10"}]}"#)
                .unwrap();
        app.set_bot_state_committing("s", "bot", held.clone());
        app.writer.bot_state("s", "bot", serde_json::to_string(&held).unwrap()).await.unwrap();
        app.state_committed("s", "bot", false);
        (lease, held)
    }

    /// An alert batch (or the console's or API's refresh) read the stored states, and before it adopted them this
    /// server's sync stored a newer state of the bot (the exit filled: flat) and gave the lease back. The batch's
    /// read, older than that write, was adopted over it: the sold position came back and a CLOSE sold it again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_from_before_this_servers_own_sync_is_not_adopted_over_the_synced_state() {
        let (server, store, _pg, app) = shared_app(Duration::from_secs(10)).await;
        let (lease, held) = holding_long_10(&app).await;
        let batch_read = app.reader.strategy_bot_states("s").unwrap();
        // As `sync::store_synced` does.
        let flat = crate::paper::BotState::default();
        assert!(lease.store_state(&app.writer, serde_json::to_string(&flat).unwrap()).await.unwrap());
        assert!(app.replace_bot_state("s", "bot", &held, flat.clone()));
        lease.give_back().await;
        app.adopt_bot_states("s", batch_read, None);
        assert_eq!(
            app.bot_state("s", "bot"),
            flat,
            "the batch's read from before the sync put the sold position back (a CLOSE now sells 10 more)"
        );
        store.close().await.unwrap();
        drop(server);
    }

    /// As above, with this server's delivery (its run's commit) in place of the sync: the batch's older read, adopted
    /// once the commit had landed and the lease was given back, undid the fill.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_read_from_before_this_servers_own_delivery_is_not_adopted_over_the_delivered_state() {
        let (server, store, pg, app) = shared_app(Duration::from_secs(10)).await;
        let (lease, _) = holding_long_10(&app).await;
        let id: i64 = pg
            .client()
            .await
            .unwrap()
            .query_one(
                "INSERT INTO outbox (strategy, bot, broker, kind, client_order_id, method, path, body, status, created_ms)
                 VALUES ('s', 'bot', 'x', 'place', 'exit', 'POST', '/', '', 'sending', 1) RETURNING id",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        let batch_read = app.reader.strategy_bot_states("s").unwrap();
        // The exit filled: flat, set in memory, then committed with the row's result.
        let flat = crate::paper::BotState::default();
        app.set_bot_state_committing("s", "bot", flat.clone());
        let delivered = crate::store::Delivered {
            id,
            status: "done",
            result: "filled".into(),
            log: None,
            state: Some(("s".into(), "bot".into(), serde_json::to_string(&flat).unwrap())),
        };
        app.writer.delivered_run(Arc::from([delivered])).await.unwrap();
        app.state_committed("s", "bot", false);
        lease.give_back().await;
        app.adopt_bot_states("s", batch_read, None);
        assert_eq!(app.bot_state("s", "bot"), flat, "the batch's read from before the delivery undid its fill");
        store.close().await.unwrap();
        drop(server);
    }
}
