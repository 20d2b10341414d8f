//! Which server works a bot: with several servers on one PostgreSQL, one at a time sends a bot's outbox rows
//! (so they go out in order, once) and reads its account (so a fill is noticed and notified once). A server
//! holds a bot's lease while it does either, renews it every fifth of its time, and gives it back when the
//! bot is idle; a server that dies stops renewing, and after the lease's time (`--lease-ttl-secs`, 10 s)
//! another takes the bot over. On the embedded database there is one server, and every lease is granted at
//! once.

use crate::app::now_ms;
use crate::store::pg::leases::Taken;
use crate::store::pg::Pg;
use crate::store::StoreError;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The server's leases.
pub struct Leases {
    shared: Option<Shared>,
}

struct Shared {
    pg: Pg,
    /// How long a lease lasts unless renewed. Renewed every fifth of it; used only while 40 % of it is left,
    /// so that a send started under it ends (the brokers' client gives up well before) before another server
    /// could take the bot over.
    ttl: Duration,
    /// This server's name in the lease table: unique per process.
    me: String,
    /// Leases held, by (strategy, bot): how many users hold each, and when it was taken. The async lock orders
    /// taking and giving back, so that a lease given back is never mistaken for one still held.
    held: tokio::sync::Mutex<HashMap<(String, String), (usize, Instant)>>,
    /// What `renewed` counts from.
    origin: Instant,
    /// When the held leases were last renewed: nanoseconds after `origin`, read before the renewal was sent.
    /// A lease's own time is kept by the monotonic clock, never the wall clock: the database stamps its expiry by
    /// its own clock, and a wall clock stepped back after a renewal kept the lease valid here that much longer
    /// than there, while a peer took the bot over and sent its rows too.
    renewed: AtomicU64,
    /// Bots taken over from a server that stopped, and when: rows created before may have been sent by it.
    takeovers: Mutex<HashMap<(String, String), i64>>,
    /// Bots a delivery of this server left a row of unrecorded ([`Leases::left_unsure`]) since their lease was
    /// last given back, or whose lapse at the give-back failed (still in this server's name in the database):
    /// such a lease is let run out, never given back clean.
    left_unsure: Mutex<HashSet<(String, String)>>,
    /// The keys of `held` still held, readable without waiting (for [`Leases::holds`]), each with the epoch of
    /// its taking from the database: a [`Lease`] is valid only in its own epoch. A lease lost to another
    /// server and taken back later is a new epoch, so a delivery that held the lost one (and read its rows
    /// before the other server sent them) does not become valid again with it.
    holding: Mutex<HashMap<(String, String), (u64, Instant)>>,
    /// The last epoch handed out.
    epochs: AtomicU64,
    /// Set at shutdown: no lease is taken any more.
    closing: AtomicBool,
    /// Leases taken from the database whose holder has not yet adopted the bots' stored states
    /// ([`Leases::adopted`]): until then every user joining the lease is handed it as fresh (to adopt in turn),
    /// and [`Leases::holds`] says no, so that nothing is decided or sent on this server's old copy while the
    /// first taker's read is slow or failed.
    unadopted: Mutex<HashMap<(String, String), u64>>,
}

/// A held lease; give it back with [`Lease::give_back`] (dropped, it is given back in the background).
pub struct Lease {
    leases: Arc<Leases>,
    key: (String, String),
    /// When it was taken from the database (read before the statement was sent).
    taken: Instant,
    returned: bool,
    /// The epoch of the taking it belongs to (see `Shared::holding`).
    epoch: u64,
    /// Taken from the database now (not already held by another user in this server): the bot's state may
    /// have been changed by another server since this one last held it.
    pub fresh: bool,
}

impl Shared {
    /// When a lease taken at `taken` was last taken or renewed: its time runs from there. Read before the
    /// statement that took or renewed it, which the database stamps later, so that it ends here first.
    fn since(&self, taken: Instant) -> Instant {
        taken.max(self.origin + Duration::from_nanos(self.renewed.load(Ordering::Relaxed)))
    }

    /// Whether enough of a lease taken at `taken` is left to start a send under it.
    fn in_time(&self, taken: Instant) -> bool {
        Instant::now() < self.since(taken) + self.ttl * 3 / 5
    }
}

impl Leases {
    /// One server alone: every lease is granted.
    pub fn local() -> Arc<Leases> {
        Arc::new(Leases { shared: None })
    }

    /// Leases on the shared database, renewed by a task of their own.
    pub fn shared(pg: Pg, ttl: Duration) -> Result<Arc<Leases>, String> {
        let me = format!("{}-{}", std::process::id(), &crate::app::random_hex()?[..12]);
        let leases = Arc::new(Leases {
            shared: Some(Shared {
                pg,
                ttl,
                me,
                held: tokio::sync::Mutex::default(),
                origin: Instant::now(),
                renewed: AtomicU64::new(0),
                takeovers: Mutex::default(),
                left_unsure: Mutex::default(),
                holding: Mutex::default(),
                epochs: AtomicU64::new(0),
                closing: AtomicBool::new(false),
                unadopted: Mutex::new(HashMap::new()),
            }),
        });
        let keeper = Arc::clone(&leases);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(ttl / 5);
            loop {
                tick.tick().await;
                keeper.renew().await;
            }
        });
        Ok(leases)
    }

    /// Takes a bot's lease, or `None` while another server holds it.
    pub async fn take(self: &Arc<Self>, strategy: &str, bot: &str) -> Result<Option<Lease>, StoreError> {
        let key = (strategy.to_owned(), bot.to_owned());
        let lease = |taken, epoch, fresh| Lease {
            leases: Arc::clone(self),
            key: key.clone(),
            taken,
            returned: false,
            epoch,
            fresh,
        };
        let Some(s) = &self.shared else { return Ok(Some(lease(Instant::now(), 0, false))) };
        let mut held = s.held.lock().await;
        if s.closing.load(Ordering::Relaxed) {
            return Ok(None);
        }
        // A lease lost to another server (see `renew`) is still counted for its users, but not handed out.
        let current = s.holding.lock().unwrap_or_else(|e| e.into_inner()).get(&key).map(|(epoch, _)| *epoch);
        if let (Some((n, taken)), Some(epoch)) = (held.get_mut(&key), current) {
            *n += 1;
            let fresh = s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).get(&key) == Some(&epoch);
            return Ok(Some(lease(*taken, epoch, fresh)));
        }
        // The wall clock only for the database to check this server's against; the lease's time here is counted
        // from before the statement by the monotonic clock.
        let (now, at) = (now_ms(), Instant::now());
        match s.pg.take_lease(strategy, bot, &s.me, now, ms(s.ttl)).await? {
            Taken::Held => Ok(None),
            Taken::Ours { over, unsure_ms } => {
                if over {
                    tracing::warn!(strategy, bot, "took the bot over from a server that stopped renewing its lease");
                }
                // Kept with the lease: a takeover by a server that gave the bot back since still counts.
                if unsure_ms > 0 {
                    let mut t = s.takeovers.lock().unwrap_or_else(|e| e.into_inner());
                    let at = t.entry(key.clone()).or_insert(0);
                    *at = (*at).max(unsure_ms);
                }
                let entry = held.entry(key.clone()).or_insert((0, at));
                *entry = (entry.0 + 1, at);
                let epoch = s.epochs.fetch_add(1, Ordering::Relaxed) + 1;
                s.holding.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), (epoch, at));
                s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), epoch);
                Ok(Some(lease(at, epoch, true)))
            }
        }
    }

    /// Whether this server holds a bot's lease (then its own copy of the bot's state is the newest).
    /// Not once its time has run out unrenewed (this server cut off from PostgreSQL, or paused): another server
    /// may have taken the bot over and stored newer state, which this one must adopt rather than decide against
    /// its own old copy (a reversal sized from a position already closed there).
    pub fn holds(&self, strategy: &str, bot: &str) -> bool {
        let Some(s) = &self.shared else { return true };
        let key = (strategy.to_owned(), bot.to_owned());
        if s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&key) {
            return false;
        }
        let holding = s.holding.lock().unwrap_or_else(|e| e.into_inner());
        holding.get(&key).is_some_and(|(_, taken)| Instant::now() < s.since(*taken) + s.ttl)
    }

    /// Whether a bot's lease taken fresh waits for the bots' stored states to be adopted: a user whose read
    /// comes back after another user adopted (and perhaps delivered since) must not put its older read back.
    /// Only for `lease`'s own taking: a read made under a lease lost since (and the bot taken back, a new taking
    /// waiting for its own read) is older than what that read will bring.
    pub fn unadopted(&self, lease: &Lease) -> bool {
        let Some(s) = &self.shared else { return false };
        s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).get(&lease.key) == Some(&lease.epoch)
    }

    /// The bots' stored states were adopted under a bot's lease taken fresh: its later users are handed it as
    /// held, and this server's copy of the bot's state is the newest while it holds it.
    pub fn adopted(&self, lease: &Lease) {
        let Some(s) = &self.shared else { return };
        let mut unadopted = s.unadopted.lock().unwrap_or_else(|e| e.into_inner());
        if unadopted.get(&lease.key) == Some(&lease.epoch) {
            unadopted.remove(&lease.key);
        }
    }

    /// Rows of a bot created before this time (Unix ms) may have been sent by a server that stopped without
    /// recording it: the time this server took the bot over from it (0 when it never did).
    pub fn unsure_before(&self, strategy: &str, bot: &str) -> i64 {
        let Some(s) = &self.shared else { return 0 };
        let t = s.takeovers.lock().unwrap_or_else(|e| e.into_inner());
        t.get(&(strategy.to_owned(), bot.to_owned())).copied().unwrap_or(0)
    }

    /// A row of the bot was left unrecorded when its lease was lost during its delivery, after attempts that
    /// may have reached the broker: should this server hold the bot again, rows created before now are treated
    /// as [`Leases::unsure_before`] says, looked up around the times they may have gone out rather than sent
    /// or expired blind.
    pub fn left_unsure(&self, strategy: &str, bot: &str) {
        let Some(s) = &self.shared else { return };
        let mut t = s.takeovers.lock().unwrap_or_else(|e| e.into_inner());
        let at = t.entry((strategy.to_owned(), bot.to_owned())).or_insert(0);
        *at = (*at).max(now_ms());
        s.left_unsure.lock().unwrap_or_else(|e| e.into_inner()).insert((strategy.to_owned(), bot.to_owned()));
    }

    /// At shutdown, with a delivery still running: takes no lease any more and keeps those held, which run out
    /// on their own (see [`Leases::give_back_all`] for the clean stop).
    pub fn stop_taking(&self) {
        let Some(s) = &self.shared else { return };
        s.closing.store(true, Ordering::Relaxed);
        tracing::warn!("a delivery was still running at shutdown: the bots' leases are left to run out");
    }

    /// At shutdown, once nothing is being sent: gives every lease back, so that the other servers take this
    /// one's bots over at once instead of after the leases' time, and takes none any more.
    pub async fn give_back_all(&self) {
        let Some(s) = &self.shared else { return };
        s.closing.store(true, Ordering::Relaxed);
        let mut held = s.held.lock().await;
        // As [`Lease::give_back`] does, one out of its time or one a delivery left a row unsure under is let run
        // out, not given back clean: a clean stop handed such a bot over as clean, and the next server sent that
        // row as never sent. Those no longer held too: one whose lapse at its give-back failed is still in this
        // server's name.
        let unsure: HashSet<(String, String)> =
            std::mem::take(&mut *s.left_unsure.lock().unwrap_or_else(|e| e.into_inner()));
        let mut lapsing: Vec<(String, String)> = held
            .iter()
            .filter(|(k, (_, taken))| !unsure.contains(*k) && !s.in_time(*taken))
            .map(|(k, _)| k.clone())
            .collect();
        lapsing.extend(unsure);
        for key in &lapsing {
            tracing::warn!(strategy = %key.0, bot = %key.1, "at the stop, a bot's lease is left to expire (out of its time, or a row under it unsure)");
            if let Err(e) = s.pg.lapse_lease(&key.0, &key.1, &s.me).await {
                tracing::warn!(strategy = %key.0, bot = %key.1, error = %e, "marking a bot's lease lapsed failed");
            }
        }
        held.clear();
        s.holding.lock().unwrap_or_else(|e| e.into_inner()).clear();
        s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).clear();
        // Not those: one whose lapse failed just now is left in this server's name to expire (a takeover all the
        // same), not handed over clean with the rest.
        match s.pg.give_all_leases(&s.me, &lapsing).await {
            Ok(n) if n > 0 => tracing::info!(leases = n, "gave the bots' leases back"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "giving the bots' leases back failed; they expire on their own"),
        }
    }

    /// Renews the held leases (the renewing task's tick).
    pub(crate) async fn renew(&self) {
        self.renew_at(now_ms()).await;
    }

    /// Renews the held leases, `now` being this server's wall clock (a test passes one that is off); all of them
    /// are given up when it is off the database's. The wall clock is only checked against the database's: the
    /// leases' time here runs from this call's instant on the monotonic clock, read before the statement, which
    /// the database stamps later by its own clock, so that the lease's time ends here first whatever either wall
    /// clock reads or steps to.
    pub(crate) async fn renew_at(&self, now: i64) {
        let Some(s) = &self.shared else { return };
        let asked = Instant::now();
        // Held across the renewal: a lease given back meanwhile is not renewed by a late statement.
        let held = s.held.lock().await;
        if held.is_empty() {
            return;
        }
        // The clock is checked as it reads when the statement runs: `now` was read before the wait for the lock
        // (takings queued ahead, each up to a statement's wait), and 30 s of such waits made a server whose clock is
        // right look 30 s behind, lapsing every lease it held. The lease's own time still counts from `asked`.
        let at_statement = now.saturating_add(i64::try_from(asked.elapsed().as_millis()).unwrap_or(i64::MAX));
        match s.pg.renew_leases(&s.me, at_statement, ms(s.ttl)).await {
            Ok(renewed) => {
                // A lease not renewed was taken over by another server (this one was paused or cut off past
                // its time): it is no longer held here, whatever the renewal time says, so that the two never
                // send the same bot's rows.
                let renewed: HashSet<(String, String)> = renewed.into_iter().collect();
                let mut holding = s.holding.lock().unwrap_or_else(|e| e.into_inner());
                let lost: Vec<(String, String)> = holding.keys().filter(|k| !renewed.contains(*k)).cloned().collect();
                let mut unadopted = s.unadopted.lock().unwrap_or_else(|e| e.into_inner());
                for key in lost {
                    tracing::warn!(strategy = %key.0, bot = %key.1, "another server took the bot's lease over; sending stops here");
                    holding.remove(&key);
                    unadopted.remove(&key);
                }
                // The latest renewal sent wins: one asked earlier and answered later was stamped later still.
                let since = u64::try_from(asked.saturating_duration_since(s.origin).as_nanos()).unwrap_or(u64::MAX);
                s.renewed.fetch_max(since, Ordering::Relaxed);
            }
            Err(e @ (StoreError::ClockBehind { .. } | StoreError::ClockAhead { .. })) => {
                // Lapsed at the database by the same statement: the bots pass to servers whose clocks are right,
                // and nothing more is sent or decided here under the leases already held (joining one included).
                tracing::warn!(error = %e, "this server's clock is off the database's: it gives up its bots' leases and sends no orders until its clock is set right");
                s.holding.lock().unwrap_or_else(|e| e.into_inner()).clear();
                s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).clear();
            }
            Err(e) => tracing::warn!(error = %e, "renewing the bots' leases failed; deliveries pause until it works"),
        }
    }

    /// One user is done with a lease; the last one gives it back, if it is still valid here. One that ran out here
    /// (renewals failing, the process paused) may have had a request on its way when it did, so it is not given
    /// back but left to expire ([`Pg::lapse_lease`]): the server that takes it next sees a takeover and looks such
    /// rows up around the times they may have gone out, where a lease given back looks like a clean hand-over.
    /// Whether it is valid is the lease's own (its current epoch's), not that of the user returning it last: a
    /// delivery's lease lost before the bot was taken back must not lapse the one taken since.
    async fn give_back(&self, key: &(String, String)) {
        let Some(s) = &self.shared else { return };
        let mut held = s.held.lock().await;
        let Some((n, taken)) = held.get_mut(key) else { return };
        *n -= 1;
        if *n > 0 {
            return;
        }
        let in_time = s.in_time(*taken);
        held.remove(key);
        s.unadopted.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        let held_on = s.holding.lock().unwrap_or_else(|e| e.into_inner()).remove(key).is_some();
        // A row left unrecorded under it may have reached the broker: given back clean, the next server took the
        // bot as a clean hand-over and sent that row as never sent (a refusal of the resend recorded while the
        // first order stood). Left to run out, it is taken over, and such rows are looked up.
        let unsure = s.left_unsure.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
        let clean = held_on && in_time && !unsure;
        if !clean {
            tracing::warn!(strategy = %key.0, bot = %key.1, unsure,
                "a bot's lease ran out while held, or a delivery under it left a row unsure; it is left to expire");
            if let Err(e) = s.pg.lapse_lease(&key.0, &key.1, &s.me).await {
                // Still in this server's name: it expires as a takeover unless given back clean, which the clean
                // stop's `give_all_leases` did to every lease in that name. Kept, so that the stop lapses it
                // instead (and a taking of it again here lapses it at its own give-back).
                tracing::warn!(strategy = %key.0, bot = %key.1, error = %e, "marking a bot's lease lapsed failed");
                s.left_unsure.lock().unwrap_or_else(|e| e.into_inner()).insert(key.clone());
            }
            return;
        }
        if let Err(e) = s.pg.give_lease(&key.0, &key.1, &s.me).await {
            // It expires on its own, a little later.
            tracing::warn!(strategy = %key.0, bot = %key.1, error = %e, "giving a bot's lease back failed");
        }
    }
}

impl Lease {
    /// Whether enough of the lease is left to start a send under it.
    pub fn valid(&self) -> bool {
        let Some(s) = &self.leases.shared else { return true };
        if s.holding.lock().unwrap_or_else(|e| e.into_inner()).get(&self.key).map(|(epoch, _)| *epoch)
            != Some(self.epoch)
        {
            return false;
        }
        s.in_time(self.taken)
    }

    /// The latest instant a request may still be on its way out under this lease (on the embedded database,
    /// none): 90 % of its time after it was last renewed, before another server could take the bot over. Read
    /// again as a send goes on, since a renewal moves it.
    pub fn send_until(&self) -> Option<tokio::time::Instant> {
        let s = self.leases.shared.as_ref()?;
        let left = (s.since(self.taken) + s.ttl * 9 / 10).saturating_duration_since(Instant::now());
        Some(tokio::time::Instant::now() + left)
    }

    /// Stores a bot state read under this lease (the sync's) and says whether it was stored: on the shared
    /// database only while the lease is still this server's, checked in the commit's transaction
    /// ([`crate::store::Writer::bot_state_held`]); on the embedded database always.
    pub async fn store_state(&self, writer: &crate::store::Writer, state: String) -> Result<bool, StoreError> {
        let (strategy, bot) = (&self.key.0, &self.key.1);
        match &self.leases.shared {
            None => writer.bot_state(strategy, bot, state).await.map(|()| true),
            Some(s) => writer.bot_state_held(strategy, bot, state, &s.me).await,
        }
    }

    /// Gives a row this lease's send met the bot's stopped session on back unsent (`pending`): on the shared
    /// database only while the lease is still this server's, checked in the write's transaction
    /// ([`crate::store::Writer::unsent`]); on the embedded database always.
    pub async fn give_back_unsent(&self, writer: &crate::store::Writer, id: i64) -> Result<(), StoreError> {
        writer.unsent(id, self.leases.shared.as_ref().map(|s| s.me.as_str())).await
    }

    /// Gives the lease back.
    pub async fn give_back(mut self) {
        self.returned = true;
        self.leases.give_back(&self.key).await;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.returned || self.leases.shared.is_none() {
            return;
        }
        let (leases, key) = (Arc::clone(&self.leases), self.key.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { leases.give_back(&key).await });
        }
    }
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Leases {
        /// Holds the lock every taking, giving back and renewal waits for, as takings queued on a busy pool do.
        pub(crate) async fn stall(&self) -> tokio::sync::MutexGuard<'_, HashMap<(String, String), (usize, Instant)>> {
            self.shared.as_ref().expect("a shared store").held.lock().await
        }
    }

    #[tokio::test]
    async fn one_server_alone_is_granted_every_lease_at_once_and_forever() {
        let leases = Leases::local();
        let a = leases.take("s", "b").await.unwrap().expect("granted");
        let b = leases.take("s", "b").await.unwrap().expect("granted twice");
        assert!(a.valid() && b.valid() && !a.fresh);
        assert!(leases.holds("s", "b") && leases.holds("s", "other"));
        assert_eq!(leases.unsure_before("s", "b"), 0);
        a.give_back().await;
        drop(b);
    }
}
