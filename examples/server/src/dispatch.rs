//! The outbox's dispatchers: one task per (strategy, bot) sends that bot's committed requests in order.
//!
//! A task wakes when the webhook handler has committed rows for its bot (or at start, for rows left pending by
//! the previous run), reads the bot's open rows from the database oldest first, and delivers them one at a
//! time: a bot's orders keep their order, and a slow broker holds up only its own bots. At most
//! [`CONCURRENCY`] deliveries run at once across all bots, and at most [`PER_HOST`] of them at one broker, a
//! delivery waiting between its attempts not counted ([`nap`]).
//!
//! Each result is committed with the strategy's log row (INFO accepted, ERROR with the broker's message) and
//! the bot's new state in one transaction. A request is sent again only when that cannot double an order: the
//! connection failed before anything was sent or the broker answered 429, or the request is a cancel, or it
//! carries a client order id at a broker that refuses a repeated one. Anything else that fails or ends unknown is
//! marked failed, with an ERROR row, and left to the trader.
//!
//! A paper bot's rows are filled in runs: the rows read together that wait for no other row are applied in
//! order to one copy of the bot's state, and the run's results are committed as one job (one transaction), the
//! state once, with the run's last row. Filling and storing them one at a time cost more than the webhook's
//! own work per alert, and the outbox fell behind under load. Its cancels go one at a time all the same, checked
//! and re-aimed as an http bot's are.

use crate::app::{now_ms, App};
use crate::bots::{keys_pick_account, stored_elsewhere, where_to, Delivery, HttpBot};
use crate::client::{self, Reply};
use crate::lease::Lease;
use crate::paper::{self, BotState};
use crate::store::{Committed, Delivered, LogEntry, OutboxRow, StoreError};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use strategy_webhook::broker::{after_page, Answer, Broker, BrokerId, Found, Lookup, PagedLookup, Request};
use strategy_webhook::model::{AssetClass, BrokerOrder, Order, OrderStatus, OrderType};
use strategy_webhook::outcome::RequestKind;
use strategy_webhook::Level;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Deliveries in flight at once, across all bots.
pub const CONCURRENCY: usize = 32;
/// Deliveries in flight at once to one broker (its host and port), across its bots: a share of
/// [`CONCURRENCY`], the rest left for the other brokers. A broker that accepts connections and never answers
/// holds each of its deliveries for the bot's whole timeout; with one pool for all, 32 such bots held every
/// slot and another broker's market order waited behind them, past its deadline with more. Half, so that one
/// broker with many bots still sends 16 orders side by side (150 at a bar close go out in about ten round
/// trips).
pub const PER_HOST: usize = CONCURRENCY / 2;
/// First backoff; doubled after each failed attempt, up to [`MAX_BACKOFF`].
const BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Rows read from the database at a time per bot.
const PAGE: u32 = 256;

/// The dispatchers: one wake-up handle per (strategy, bot), its task started on first use.
#[derive(Default)]
pub struct Dispatcher {
    tasks: Mutex<HashMap<(String, String), Arc<Notify>>>,
    limit: OnceLock<Arc<Semaphore>>,
    /// Each broker's [`PER_HOST`] slots, by host and port (as the descriptor reserve counts brokers). The bots are
    /// read once at start, so this holds one entry per broker they name.
    hosts: Mutex<HashMap<(String, u16), Arc<Semaphore>>>,
    /// Order requests that may have reached their broker and are not settled yet: one on its way, or one whose
    /// answer was lost and which is still being looked up or retried ([`OnWire`]).
    on_wire: AtomicUsize,
}

/// Counts one order request in [`Dispatcher::on_wire`] while it lives.
struct OnWire<'a>(&'a AtomicUsize);

impl Drop for OnWire<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Dispatcher {
    /// Tells a bot's dispatcher that it has rows to send, starting it if needed.
    pub fn wake(&self, app: &Arc<App>, strategy: &str, bot: &str) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let key = (strategy.to_owned(), bot.to_owned());
        if let Some(n) = tasks.get(&key) {
            // A permit is stored if the task is busy, so the wake-up is never lost.
            n.notify_one();
            return;
        }
        let notify = Arc::new(Notify::new());
        tasks.insert(key, Arc::clone(&notify));
        let limit = Arc::clone(self.limit.get_or_init(|| Arc::new(Semaphore::new(CONCURRENCY))));
        let slots = Slots { limit, host: self.host_slots(app.bots.get(bot)) };
        let task = run(Arc::clone(app), strategy.to_owned(), bot.to_owned(), notify, slots);
        let app = Arc::clone(app);
        let key = (strategy.to_owned(), bot.to_owned());
        // Forgotten, the next sweep starts a new dispatcher, which reads the bot's open rows as after a restart (a
        // row left `sending` is looked up first). Its runs queued for commit are committed all the same; the bot's
        // state in memory may hold fills of rows never recorded, which the new one would apply again: it is read
        // back from the database once the queue has passed, as at a restart.
        let recover = async move {
            let _ = app.writer.barrier().await;
            reload_state(&app, &key.0, &key.1).await;
            app.state_committed(&key.0, &key.1, true);
            app.dispatcher.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(&key);
        };
        crate::app::spawn_recovering(strategy, bot, "dispatcher", task, recover);
    }
}

impl Dispatcher {
    /// The [`PER_HOST`] slots of the broker a bot delivers to; none for a paper bot, which opens no connection.
    fn host_slots(&self, delivery: &Delivery) -> Option<Arc<Semaphore>> {
        let Delivery::Http(bot) = delivery else { return None };
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let slots = hosts.entry((bot.host.clone(), bot.port)).or_insert_with(|| Arc::new(Semaphore::new(PER_HOST)));
        Some(Arc::clone(slots))
    }

    fn on_wire(&self) -> OnWire<'_> {
        self.on_wire.fetch_add(1, Ordering::SeqCst);
        OnWire(&self.on_wire)
    }

    /// Stops sending: waits (at most `within`) for the deliveries in flight to be recorded, then lets no new
    /// one start. Call before the store closes, so that no delivery is sent without its result being
    /// committed; rows not sent yet stay pending for the next start. Returns whether nothing may still reach a
    /// broker: every delivery ended in time, or those left are waiting to try again after their broker was not
    /// reached (a request on its way, or one whose answer was lost and is not settled, may yet place its order).
    pub async fn stop(&self, within: Duration) -> bool {
        let Some(limit) = self.limit.get() else { return true };
        let all = u32::try_from(CONCURRENCY).unwrap_or(u32::MAX);
        match tokio::time::timeout(within, limit.acquire_many(all)).await {
            Ok(Ok(permits)) => permits.forget(),
            _ => tracing::warn!("deliveries still in flight at shutdown; they are resumed at the next start"),
        }
        limit.close();
        // Every delivery that ended took its requests off the count with it.
        self.on_wire.load(Ordering::SeqCst) == 0
    }
}

tokio::task_local! {
    /// The permit of the delivery the task is running, given up while it waits ([`nap`]).
    static PERMIT: Arc<Mutex<Permit>>;
}

/// A delivery's share of [`CONCURRENCY`] and of its broker's [`PER_HOST`]: held while it works, not while it
/// waits.
struct Permit {
    slots: Slots,
    held: Option<Held>,
}

/// Where a bot's deliveries take their slots from.
#[derive(Clone)]
struct Slots {
    /// All bots' [`CONCURRENCY`].
    limit: Arc<Semaphore>,
    /// The bot's broker's [`PER_HOST`]; none for a paper bot.
    host: Option<Arc<Semaphore>>,
}

/// The slots one delivery holds, given back when dropped.
struct Held {
    _host: Option<OwnedSemaphorePermit>,
    _all: OwnedSemaphorePermit,
}

impl Slots {
    /// Waits for a slot of the bot's broker, then for one of all: a delivery waiting behind its own broker's
    /// share holds none that another broker's bots could use. `None` once the dispatcher has stopped.
    async fn take(&self) -> Option<Held> {
        let host = match &self.host {
            // Never closed, so the permit is always granted.
            Some(h) => Some(Arc::clone(h).acquire_owned().await.ok()?),
            None => None,
        };
        let all = Arc::clone(&self.limit).acquire_owned().await.ok()?;
        Some(Held { _host: host, _all: all })
    }
}

/// Waits `wait` within a delivery (a back-off between attempts, a settle before a lookup, a lookup's retry)
/// without its permit. A delivery waiting sends nothing; holding its permit through those waits let one
/// broker's outage (its bots retrying toward their deadlines) hold every permit while the other brokers' bots'
/// market orders waited, and expired, behind them. Outside a delivery's scope it only sleeps.
///
/// Once the dispatcher has stopped, the permit is not taken back, and the delivery waits here until the process
/// ends: nothing more is sent or recorded for it, and its row stays as the database has it (pending, or
/// `sending` and looked up at the next start), as after a crash. A delivery that may have reached its broker
/// keeps counting in [`Dispatcher::on_wire`] meanwhile, so the stop still says so.
async fn nap(wait: Duration) {
    let slots = PERMIT
        .try_with(|p| {
            let mut p = p.lock().unwrap_or_else(|e| e.into_inner());
            p.held = None;
            p.slots.clone()
        })
        .ok();
    tokio::time::sleep(wait).await;
    let Some(slots) = slots else { return };
    match slots.take().await {
        Some(held) => {
            let _ = PERMIT.try_with(|p| p.lock().unwrap_or_else(|e| e.into_inner()).held = Some(held));
        }
        None => std::future::pending::<()>().await,
    }
}

/// How often the outbox is swept for rows still to send.
pub const SWEEP: Duration = Duration::from_secs(1);

/// Wakes the dispatcher of every bot with rows still to send, every `every` ([`SWEEP`] but in tests): a wake-up
/// lost for any reason delays an order by a second, never until the next alert or restart. Runs until the store
/// is closed.
pub async fn sweep(app: Arc<App>, reader: crate::store::Reader, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let r = reader.clone();
        match tokio::task::spawn_blocking(move || r.open_bots()).await {
            Ok(Ok(bots)) => {
                for (strategy, bot) in bots {
                    app.dispatcher.wake(&app, &strategy, &bot);
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "sweeping the outbox failed"),
            Err(_) => return,
        }
    }
}

/// A test's bot whose first dispatcher panics at its start (see `a_dispatcher_that_panicked_is_started_again`).
#[cfg(test)]
static PANIC_ONCE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// A test's bot whose dispatcher panics once between a run's fills and their commit.
#[cfg(test)]
static PANIC_AFTER_FILL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

async fn run(app: Arc<App>, strategy: String, bot: String, notify: Arc<Notify>, slots: Slots) {
    #[cfg(test)]
    if bot == "panics-once" && PANIC_ONCE.swap(false, Ordering::SeqCst) {
        panic!("the test's dispatcher panics once");
    }
    // Results queued for commit and not yet committed, oldest first: their rows are still open in the
    // database, so they are skipped when the rows are read again.
    let mut committing: VecDeque<(Arc<[Delivered]>, Committed)> = VecDeque::new();
    // On a shared database only the holder of the bot's lease sends its rows; on the embedded one it is
    // always granted. Held while there are rows, given back when the bot is idle.
    let mut lease: Option<Lease> = None;
    // On a shared database, while the bot's session is stopped on this server: the oldest open row, and since when
    // this server has seen it open and left it to the other servers ([`LEFT_TO_PEERS`]).
    let mut left_to_peers: Option<(i64, Instant)> = None;
    // Whether the lease held was taken with the session already stopped, once its rows had waited for the peers.
    let mut taken_stopped = false;
    loop {
        settle(&app, &mut committing, false).await;
        let stopped = stopped_here(&app, &bot).await;
        if !stopped {
            left_to_peers = None;
        } else if !(taken_stopped && lease.is_some()) {
            let waited = match oldest_open_row(&app, &strategy, &bot).await {
                Some(id) => {
                    let since = match left_to_peers {
                        Some((oldest, since)) if oldest == id => since,
                        _ => left_to_peers.insert((id, Instant::now())).1,
                    };
                    LEFT_TO_PEERS.checked_sub(since.elapsed())
                }
                None => {
                    left_to_peers = None;
                    Some(SWEEP)
                }
            };
            if let Some(wait) = waited.filter(|w| !w.is_zero()) {
                // A lease taken before the session stopped is given back (its results recorded first), so that a
                // peer whose session is live sends the rows still to go.
                if let Some(l) = lease.take() {
                    while !committing.is_empty() {
                        settle(&app, &mut committing, true).await;
                    }
                    tracing::warn!(strategy = %strategy, bot = %bot, "the bot's session is stopped on this server; its rows are left to the other servers for a moment");
                    l.give_back().await;
                }
                let _ = tokio::time::timeout(wait.min(SWEEP), notify.notified()).await;
                continue;
            }
            // Waited out, and no other server took them: sent here, each failing as the stop says.
            taken_stopped = true;
        }
        if lease.as_ref().is_some_and(|l| !l.valid()) {
            // Not renewed in time (PostgreSQL out of reach): another server may take the bot over, so nothing
            // more is sent under it. Its results already queued are still recorded.
            tracing::warn!(strategy = %strategy, bot = %bot, "the bot's lease ran out; sending pauses");
            while !committing.is_empty() {
                settle(&app, &mut committing, true).await;
            }
            lease = None;
        }
        if lease.is_none() {
            match app.leases.take(&strategy, &bot).await {
                Ok(Some(l)) => {
                    if l.fresh && adopt_state(&app, &strategy, &bot, &l).await.is_err() {
                        l.give_back().await;
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                    taken_stopped = stopped;
                    lease = Some(l);
                }
                Ok(None) => {
                    // Another server sends this bot's rows; look again at the next wake-up or sweep.
                    let _ = tokio::time::timeout(SWEEP, notify.notified()).await;
                    continue;
                }
                Err(e) => {
                    tracing::error!(strategy = %strategy, bot = %bot, error = %e, "taking the bot's lease failed");
                    tokio::time::sleep(SWEEP).await;
                    continue;
                }
            }
        }
        let reader = app.reader.clone();
        let (s, b) = (strategy.clone(), bot.clone());
        let rows = tokio::task::spawn_blocking(move || reader.open_rows(&s, &b, PAGE)).await;
        let rows = match rows {
            Ok(Ok(rows)) => rows,
            Ok(Err(e)) => {
                tracing::error!(strategy = %strategy, bot = %bot, error = %e, "reading the outbox failed");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(_) => return,
        };
        let in_commit: HashSet<i64> = committing.iter().flat_map(|(run, _)| run.iter().map(|d| d.id)).collect();
        let rows: Vec<OutboxRow> = rows.into_iter().filter(|r| !in_commit.contains(&r.id)).collect();
        if rows.is_empty() {
            if committing.is_empty() {
                if app.shared.is_some() {
                    if let Some(l) = lease.take() {
                        l.give_back().await;
                        // Rows another server stored while this one held the lease were left to this one: look
                        // once more now that it is given back.
                        if has_open_rows(&app, &strategy, &bot).await {
                            continue;
                        }
                    }
                }
                notify.notified().await;
            } else {
                // Only rows whose results are being committed: wait for the oldest of them.
                settle(&app, &mut committing, true).await;
            }
            continue;
        }
        let paper = matches!(app.bots.get(&bot), Delivery::Paper);
        let mut rows = rows.into_iter().peekable();
        while let Some(row) = rows.next() {
            // A row that waits for an earlier one (a re-size's new order, a reversal's new side) reads its
            // result from the database, and so does a cancel (whether an earlier re-size's new order was refused,
            // [`pull_holds`]): it must be committed. Read while still queued, a refusal looked like an order that
            // may have been placed, and the trader's latest re-size was held back.
            if row.after.is_some() || request_kind(&row) == RequestKind::Cancel {
                while !committing.is_empty() {
                    settle(&app, &mut committing, true).await;
                }
            }
            let Some(taken) = slots.take().await else { return };
            // Held to the end of the row's turn (its result queued for commit), but for the delivery's waits.
            let permit = Arc::new(Mutex::new(Permit { slots: slots.clone(), held: Some(taken) }));
            let Some(held) = lease.as_ref().filter(|l| l.valid()) else {
                // Checked again at the top of the loop, which stops sending.
                break;
            };
            // A paper cancel goes through `deliver` on its own, as an http bot's does: it is re-aimed at the order
            // that replaced its own since, and not filled when all it made way for has expired. Filled in a run, it
            // pulled a re-size's old order (refused, the new one working on) and a CLOSE's exit for an expired close.
            let in_run = |r: &OutboxRow| r.after.is_none() && request_kind(r) != RequestKind::Cancel;
            let run: Arc<[Delivered]> = if paper && in_run(&row) {
                // The paper broker answers at once: the rows that follow and wait for nothing are filled with
                // this one, so that the state is copied, published and stored once for all of them.
                let mut run = vec![row];
                while let Some(next) = rows.next_if(in_run) {
                    run.push(next);
                }
                let filled: Arc<[Delivered]> = fill_run(&app, &strategy, &bot, run).await.into();
                #[cfg(test)]
                if bot == "panics-after-fill" && PANIC_AFTER_FILL.swap(false, Ordering::SeqCst) {
                    panic!("the test's dispatcher panics between a fill and its commit");
                }
                filled
            } else {
                match PERMIT.scope(Arc::clone(&permit), deliver(&app, held, row)).await {
                    Some(d) => Arc::from([d]),
                    // The lease was lost while the row was being delivered: the top of the loop stops sending.
                    None => break,
                }
            };
            // The engine decides the next alert against the new state as soon as it is known; should the
            // commit below fail for good, the process stops with the rows still open, and the next run applies
            // them again to the stored state.
            if run.iter().any(|d| d.state.is_some()) {
                app.refresh_bots(&strategy);
            }
            // Queued in order (the writer commits in that order, so the bot's state ends as its last
            // delivery left it), not awaited: the next rows go out while this run's commit runs.
            match app.writer.queue_delivered_run(Arc::clone(&run)).await {
                Ok(done) => {
                    let done = counted_when_committed(&app, Arc::clone(&run), done);
                    committing.push_back((run, done))
                }
                Err(e) => {
                    let (id, n) = (run[0].id, run.len());
                    tracing::error!(id, rows = n, error = %e, "recording a delivery failed; retrying");
                    record(&app, Arc::clone(&run)).await;
                    committed(&app, &run);
                }
            }
            settle(&app, &mut committing, false).await;
        }
    }
}

/// Sets a bot's state in memory to the one stored (none stored: the empty one). Unread, it is left as it is:
/// emptied, a bot would forget its positions (a CLOSE finding nothing, a buy opening again).
async fn reload_state(app: &App, strategy: &str, bot: &str) {
    let reader = app.reader.clone();
    let (s, b) = (strategy.to_owned(), bot.to_owned());
    let stored = match tokio::task::spawn_blocking(move || reader.bot_state(&s, &b)).await {
        Ok(Ok(stored)) => stored,
        Ok(Err(e)) => {
            tracing::error!(strategy, bot, error = %e, "the bot's state could not be read back");
            return;
        }
        Err(_) => return,
    };
    match stored.map(|st| serde_json::from_str::<BotState>(&st)) {
        Some(Err(e)) => tracing::error!(strategy, bot, error = %e, "the bot's stored state cannot be read"),
        Some(Ok(st)) => app.set_bot_state(strategy, bot, st),
        None => app.set_bot_state(strategy, bot, BotState::default()),
    }
    app.refresh_bots(strategy);
}

/// On a shared database, how long the open rows of a bot whose session is stopped on this server (its refresh token
/// refused: a server not yet restarted after a new login, in a rolling restart) are left to the other servers before
/// this one takes them, and fails each as the stop says. A server whose session is live takes them within a sweep;
/// taken here at once, they failed though that peer could send them (an exit among them). With no such peer (every
/// server stopped, or this one alone) they fail this much later than on the embedded database, never later.
const LEFT_TO_PEERS: Duration = Duration::from_secs(5);

/// Whether the bot's session is stopped on this server, on a shared database (where another server's may be live).
/// On the embedded database there is no other server: the rows fail at once, as the stop says.
async fn stopped_here(app: &App, bot: &str) -> bool {
    if app.shared.is_none() {
        return false;
    }
    match app.bots.get(bot) {
        Delivery::Http(h) => h.session.stopped().await.is_some(),
        Delivery::Paper => false,
    }
}

/// The id of the bot's oldest row still to send, if any (unread: none, looked at again a sweep later).
async fn oldest_open_row(app: &App, strategy: &str, bot: &str) -> Option<i64> {
    let reader = app.reader.clone();
    let (s, b) = (strategy.to_owned(), bot.to_owned());
    match tokio::task::spawn_blocking(move || reader.open_rows(&s, &b, 1)).await {
        Ok(Ok(rows)) => rows.first().map(|r| r.id),
        _ => None,
    }
}

/// Whether a bot has rows still to send.
async fn has_open_rows(app: &App, strategy: &str, bot: &str) -> bool {
    let reader = app.reader.clone();
    let (s, b) = (strategy.to_owned(), bot.to_owned());
    matches!(tokio::task::spawn_blocking(move || reader.open_rows(&s, &b, 1)).await, Ok(Ok(rows)) if !rows.is_empty())
}

/// How many other rows may have placed an order of `row`'s terms at its account within the time a lookup by
/// terms around `at_ms` reads (the orders entered from a minute before to five minutes after, with clocks
/// two minutes apart; ten minutes either side covers it).
/// How many other rows may have placed `found`, the order a lookup by terms found for `row`: those whose order
/// `found` matches by the same terms the lookup used (a price written `190.50` by one and `190.5` by the other is
/// one price), and those whose order cannot be read (rows of older versions), which may be anything.
async fn twins(app: &App, row: &OutboxRow, at_ms: i64, found: &BrokerOrder) -> Result<usize, StoreError> {
    let reader = app.reader.clone();
    let row = row.clone();
    let meanings = tokio::task::spawn_blocking(move || reader.twins(&row, at_ms, 600_000))
        .await
        .unwrap_or(Err(StoreError::Unanswered))?;
    Ok(meanings
        .iter()
        .filter(|m| {
            m.as_deref().and_then(|m| serde_json::from_str::<Order>(m).ok()).map_or(true, |o| found.matches(&o))
        })
        .count())
}

/// On a shared database, takes the bots' states other servers stored (a bot taken over carries on from the
/// state its last holder recorded). An error when they could not be read: the caller holding a lease taken
/// fresh gives it back rather than act on its own copy, which another server's fills may have outdated (an
/// order filled on this old copy, stored, erased the other server's position).
pub async fn adopt_state(app: &App, strategy: &str, bot: &str, lease: &Lease) -> Result<(), StoreError> {
    if app.shared.is_none() {
        return Ok(());
    }
    let rows = stored_states(app, strategy).await.inspect_err(|e| {
        tracing::warn!(strategy, bot, error = %e, "reading the bots' states failed; the bot's lease is given back");
    })?;
    // Another user of the lease adopted while this read was out, and may have delivered since: its state is
    // newer than this read.
    if app.leases.unadopted(lease) {
        app.adopt_bot_states(strategy, rows, Some(bot));
        app.leases.adopted(lease);
    }
    Ok(())
}

/// On a shared database, takes the states other servers stored for a strategy's bots whose lease this server
/// does not hold, as an alert batch does: so that its admin API and console show what another server filled,
/// not the copy this server last had. Nothing to do on the embedded database.
pub async fn refresh_shared_states(app: &App, strategy: &str) -> Result<(), StoreError> {
    if app.shared.is_none() {
        return Ok(());
    }
    let rows = stored_states(app, strategy).await?;
    app.adopt_bot_states(strategy, rows, None);
    Ok(())
}

/// A strategy's bots' stored states (bot, state, version), read off the runtime's threads.
async fn stored_states(app: &App, strategy: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
    let reader = app.reader.clone();
    let s = strategy.to_owned();
    tokio::task::spawn_blocking(move || reader.strategy_bot_states(&s)).await.unwrap_or(Err(StoreError::Unanswered))
}

/// Takes the committed results off `committing` (with `wait`, at least the oldest); a failed commit is
/// retried until it holds, since the row must leave the open set or it would be sent again.
async fn settle(app: &App, committing: &mut VecDeque<(Arc<[Delivered]>, Committed)>, wait: bool) {
    let mut wait = wait;
    while let Some((_, done)) = committing.front_mut() {
        let res = if wait {
            wait = false;
            Some(done.await.unwrap_or(Err(StoreError::Unanswered)))
        } else {
            match done.try_recv() {
                Ok(r) => Some(r),
                Err(tokio::sync::oneshot::error::TryRecvError::Empty) => None,
                Err(tokio::sync::oneshot::error::TryRecvError::Closed) => Some(Err(StoreError::Unanswered)),
            }
        };
        let Some(res) = res else { return };
        let Some((run, _)) = committing.pop_front() else { return };
        if let Err(e) = res {
            tracing::error!(id = run[0].id, rows = run.len(), error = %e, "recording a delivery failed; retrying");
            // The runs queued behind it are waited for first: which of them held decides what the retry writes.
            let mut later = Vec::with_capacity(committing.len());
            while let Some((run, done)) = committing.pop_front() {
                later.push((run, matches!(done.await, Ok(Ok(())))));
            }
            // The runs whose commit failed: their states are counted until the retry holds (the others were
            // taken off the count as their commits landed).
            let failed: Vec<Arc<[Delivered]>> = std::iter::once(Arc::clone(&run))
                .chain(later.iter().filter(|(_, held)| !held).map(|(r, _)| Arc::clone(r)))
                .collect();
            record(app, retry_of(run, later)).await;
            for r in &failed {
                committed(app, r);
            }
        }
    }
}

/// Takes a run's states off [`App::state_committed`]'s count as soon as its commit lands, not when the
/// dispatcher next looks: behind a row in back-off for minutes, an operator's state was refused all the while.
/// The result is passed on as it came; a failed commit keeps its count until its retry holds.
fn counted_when_committed(app: &Arc<App>, run: Arc<[Delivered]>, done: Committed) -> Committed {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let app = Arc::clone(app);
    tokio::spawn(async move {
        let res = done.await.unwrap_or(Err(StoreError::Unanswered));
        if res.is_ok() {
            committed(&app, &run);
        }
        let _ = tx.send(res);
    });
    rx
}

/// The states a run's deliveries set in memory are committed ([`App::state_committed`]).
fn committed(app: &App, run: &[Delivered]) {
    for (strategy, bot, _) in run.iter().filter_map(|d| d.state.as_ref()) {
        app.state_committed(strategy, bot, false);
    }
}

/// What to commit again after `failed`'s commit failed, given the runs queued behind it and whether each held:
/// every failed run, in order, in one run (one transaction), so that a crash never keeps a later run's state
/// without an earlier run's rows or the reverse. A run behind it may have held first (on PostgreSQL a failed
/// batch is followed by the next) with a newer bot state: the failed runs before it leave their states out, so
/// that the retry does not write an older state over it. Each state is the whole bot as its delivery left it.
fn retry_of(failed: Arc<[Delivered]>, later: Vec<(Arc<[Delivered]>, bool)>) -> Arc<[Delivered]> {
    let runs: Vec<(Arc<[Delivered]>, bool)> = std::iter::once((failed, false)).chain(later).collect();
    let newest_held = runs.iter().rposition(|(run, held)| *held && run.iter().any(|d| d.state.is_some())).unwrap_or(0);
    runs.iter()
        .enumerate()
        .filter(|(_, (_, held))| !held)
        .flat_map(|(i, (run, _))| {
            run.iter().map(move |d| if i < newest_held { Delivered { state: None, ..d.clone() } } else { d.clone() })
        })
        .collect()
}

/// Commits a run of deliveries' results (in one transaction), retrying with backoff until it holds.
async fn record(app: &App, run: Arc<[Delivered]>) {
    let mut wait = BACKOFF;
    loop {
        match app.writer.delivered_run(Arc::clone(&run)).await {
            Ok(()) => return,
            Err(e) => {
                tracing::error!(id = run[0].id, rows = run.len(), error = %e, "recording a delivery failed; retrying");
                tokio::time::sleep(wait).await;
                wait = backoff(wait);
            }
        }
    }
}

/// Why a row that waits for an earlier row of its alert must not go out: that row did not succeed. After a
/// re-size's failed cancel the old order may have filled or still be working, and a new one beside it could
/// double the position; after a reversal's failed close, opening the new side would leave a position the
/// sender did not mean. `None` when it may go.
///
/// `Err` when the request it waits for could not be read: that says nothing of it, and failing the row for it
/// lost a reversal's new side (or a re-size's new order) to a moment's database error; the caller tries again.
async fn held_back(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
) -> Result<Option<String>, String> {
    let Some(first) = row.after.as_deref() else { return Ok(None) };
    // A pull of a working entry (`cancel: true` on an entry, chained behind the pull of another) cannot open
    // anything, and the sender asked for it: held back behind a pull that failed (that entry having filled), the
    // other side's entry kept working beside the new position, free to fill into it. The new entry behind them
    // waits for them all ([`unfinished_pull`]).
    if kind == RequestKind::Cancel && order.is_some_and(|o| o.intent.is_open()) {
        return Ok(None);
    }
    let reader = app.reader.clone();
    let (s, b, c, at) = (row.strategy.clone(), row.bot.clone(), first.to_owned(), row.created_ms);
    let found = tokio::task::spawn_blocking(move || reader.prerequisite(&s, &b, &c, at)).await;
    let (first_kind, mut order_id, mut status) = match found {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) => return Ok(Some(format!("the request {first} it waits for is not in the outbox"))),
        Ok(Err(e)) => return Err(format!("the request {first} it waits for could not be checked: {e}")),
        Err(_) => return Err(format!("the request {first} it waits for could not be checked")),
    };
    if status == "done" && first_kind == "cancel" && kind != RequestKind::Cancel {
        match unfinished_pull(app, row).await? {
            Some(earlier) => (order_id, status) = (earlier.order_id, earlier.status),
            None => return Ok(None),
        }
    }
    if status == "done" {
        return Ok(None);
    }
    let outcome = if status == "pending" || status == "sending" { "has not completed" } else { "failed" };
    // The engine chains a delivery's requests one after another (`OrderRequest::after`): a re-size's new
    // order after its cancel; a close after the cancels of the position's working exits; a reversal's closes, and
    // the orders of one position cut into several, each after the one before, and a new side after the last. Each
    // is worded by what it is.
    let closes = order.is_some_and(|o| !o.intent.is_open());
    Ok(Some(match (first_kind.as_str(), kind) {
        ("cancel", RequestKind::Cancel) => format!(
            "it pulls another of the position's working exits after {first}, whose cancel {outcome}; the close \
             that follows them is left to the trader"
        ),
        ("cancel", _) if closes => format!(
            "it closes a position whose working exit {} had to be cancelled first, and that cancel {outcome}; \
             closing it now could close more than the position, so the close is left to the trader",
            order_id.unwrap_or_default()
        ),
        ("cancel", _) => format!(
            "it follows the cancel of working order {}, which {outcome}; placing it could double the position, \
             so it is left to the trader",
            order_id.unwrap_or_default()
        ),
        (_, _) if closes => format!(
            "it closes another part of the position after {first}, which {outcome}; the closes go one after \
             another (a reversal's new side waits for every one), so the rest is left to the trader"
        ),
        _ => format!(
            "it opens the new side of a reversal whose close ({first}) {outcome}; opening it could leave a \
             position the sender did not mean, so the reversal is left to the trader"
        ),
    }))
}

/// The earliest cancel before `row`'s own in the chain it waits for (each cancel after the one before) that did not
/// succeed, if any. The pulls of `cancel: true` on an entry all go, whatever became of the one before
/// ([`held_back`]), so the new entry, waiting for the last, could follow a chain whose first pull had failed (that
/// entry having filled): it would have opened beside it. `Err` when the chain could not be read.
async fn unfinished_pull(app: &App, row: &OutboxRow) -> Result<Option<OutboxRow>, String> {
    let (reader, of) = (app.reader.clone(), row.clone());
    let rows = match tokio::task::spawn_blocking(move || reader.alert_rows(&of)).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(e)) => return Err(format!("the cancels it waits for could not be checked: {e}")),
        Err(_) => return Err("the cancels it waits for could not be checked".to_owned()),
    };
    let mut worst = None;
    let mut at = row;
    // Each step goes to an earlier row; the bound only guards against a chain that loops.
    for _ in 0..rows.len() {
        let Some(before) =
            rows.iter().find(|r| r.id != at.id && Some(r.client_order_id.as_str()) == at.after.as_deref())
        else {
            break;
        };
        if request_kind(before) != RequestKind::Cancel {
            break;
        }
        if before.status != "done" {
            worst = Some(before);
        }
        at = before;
    }
    Ok(worst.cloned())
}

/// Whether `row` is a pull of a working entry that `cancel: true` on an entry asked for (among `alert`, its alert's
/// rows: chained behind another pull, or followed by one or by the new entry), rather than a cancel that only makes
/// way for what follows it (a re-size's, whose new order is marked `re_size`, or a CLOSE's pull of an exit). The
/// sender asked for the pull itself: it goes whatever becomes of the entry behind it.
pub(crate) fn pulls_an_entry<'a>(row: &OutboxRow, alert: impl IntoIterator<Item = &'a OutboxRow>) -> bool {
    if request_kind(row) != RequestKind::Cancel || !stored_order(row).is_some_and(|o| o.intent.is_open()) {
        return false;
    }
    row.after.is_some()
        || alert.into_iter().any(|f| {
            f.id != row.id
                && f.bot == row.bot
                && f.created_ms == row.created_ms
                && f.after.as_deref() == Some(row.client_order_id.as_str())
                && (request_kind(f) == RequestKind::Cancel || re_size(f) == Some(false))
        })
}

/// What a row's order trades, as its stored order (`meaning`) names it: its asset class and instrument (a cancel's
/// and a change's are those of the working order they pull or change). `None` where it cannot be read (a row of an
/// older version).
fn traded(row: &OutboxRow) -> Option<(AssetClass, strategy_webhook::model::InstrumentKey)> {
    // Those two fields alone: a page's failed rows are each matched against every later row of their bots, and read
    // whole (prices, sizes, legs), a page of thousands took seconds.
    #[derive(serde::Deserialize)]
    struct Traded<'a> {
        #[serde(borrow)]
        symbol: std::borrow::Cow<'a, str>,
        asset_class: AssetClass,
    }
    let t: Traded = serde_json::from_str(row.meaning.as_deref()?).ok()?;
    let key = strategy_webhook::model::InstrumentKey::new(&t.symbol, t.asset_class);
    Some((t.asset_class, key))
}

/// Whether a failed row's retry is judged against the requests of later alerts ([`superseded_by`]): a cancel
/// always (it has no deadline), an order or a change only while it may still go (past its deadline it is refused
/// anyway, and a page of old failed orders would read every later row of their bots for each).
pub(crate) fn may_be_superseded(row: &OutboxRow, now: i64) -> bool {
    request_kind(row) == RequestKind::Cancel || stale(row, "", now).is_none()
}

/// The first request of `row`'s bot, among `others`, that a later alert decided and that has gone or is on its way
/// (done, sending, pending), on the same instrument as `row`'s order, of any kind; for a change or a cancel whose
/// order cannot be read (a row of an older version), one on the same working order id. A retry of `row` comes
/// after it, and undoes or contradicts it: a failed MODIFY, re-aimed at the replacement a later MODIFY made
/// ([`reaimed_replace`]), put back the superseded price; a failed cancel pulled the order as a later MODIFY set it;
/// a failed entry opened a position the sender had since entered and closed. A later row still pending goes after
/// a retried one (rows go in order), but it was decided without it: a close sized without the retried entry leaves
/// it open.
///
/// A change or a cancel is matched by instrument, not by its stored order id: at a broker whose replace makes a new
/// order, the order id stored with a row is the one it was decided against, and the dispatcher re-aims it along the
/// bot's `replaced` notes when it is sent ([`replacement_of`]) without writing the new id back. Matched by id, a
/// change decided against order 1, re-aimed at its replacement 2 and failed, was offered over a later alert's change
/// of 2 (to 3), and retried, re-aimed 1 to 3, put the older price back over the later one. By instrument it errs
/// toward refusing (a later request on another order of the instrument supersedes it too): the refusal sends the
/// operator to the broker, where the order's state can be seen.
pub(crate) fn superseded_by<'a>(
    row: &OutboxRow,
    others: impl IntoIterator<Item = &'a OutboxRow>,
) -> Option<&'a OutboxRow> {
    Requests::new(others).superseding(row)
}

/// Requests that may supersede a failed row ([`superseded_by`]), each one's stored order read once: those that went
/// or are on their way, by strategy, bot and instrument, and (a change's or a cancel's) by working order id, each
/// list in id order. A page of thousands of failed rows was judged against every later row each, its order read
/// anew for every pair: 45 s for one page.
pub(crate) struct Requests<'a> {
    by_instrument: HashMap<(&'a str, &'a str, AssetClass, strategy_webhook::model::InstrumentKey), Vec<&'a OutboxRow>>,
    by_order: HashMap<(&'a str, &'a str, &'a str), Vec<&'a OutboxRow>>,
}

impl<'a> Requests<'a> {
    pub(crate) fn new(others: impl IntoIterator<Item = &'a OutboxRow>) -> Requests<'a> {
        let mut by_instrument: HashMap<_, Vec<&'a OutboxRow>> = HashMap::new();
        let mut by_order: HashMap<_, Vec<&'a OutboxRow>> = HashMap::new();
        for o in others {
            if !matches!(o.status.as_str(), "pending" | "sending" | "done") {
                continue;
            }
            if let Some((class, key)) = traded(o) {
                by_instrument.entry((o.strategy.as_str(), o.bot.as_str(), class, key)).or_default().push(o);
            }
            if let Some(order) = o.order_id.as_deref().filter(|_| request_kind(o) != RequestKind::Place) {
                by_order.entry((o.strategy.as_str(), o.bot.as_str(), order)).or_default().push(o);
            }
        }
        for list in by_instrument.values_mut().chain(by_order.values_mut()) {
            list.sort_by_key(|o| o.id);
        }
        Requests { by_instrument, by_order }
    }

    /// [`superseded_by`] among these requests. An order (kind place) is superseded too by a request stored after it
    /// with the same time (`created_ms`, an alert's identity) on its instrument: another alert received in the same
    /// millisecond is not told from its own there, and the rows of one alert after a failed order on its instrument
    /// wait for it (held back failed), so one that went is taken for a later alert's.
    pub(crate) fn superseding(&self, row: &OutboxRow) -> Option<&'a OutboxRow> {
        let same_ms_counts = request_kind(row) == RequestKind::Place;
        let first = |list: Option<&Vec<&'a OutboxRow>>| {
            let list = list?;
            let from = list.partition_point(|o| o.id <= row.id);
            list[from..].iter().copied().find(|o| same_ms_counts || o.created_ms != row.created_ms)
        };
        let by_instrument = traded(row).and_then(|(class, key)| {
            first(self.by_instrument.get(&(row.strategy.as_str(), row.bot.as_str(), class, key)))
        });
        let by_order = row
            .order_id
            .as_deref()
            .filter(|_| request_kind(row) != RequestKind::Place)
            .and_then(|order| first(self.by_order.get(&(row.strategy.as_str(), row.bot.as_str(), order))));
        match (by_instrument, by_order) {
            (Some(a), Some(b)) => Some(if a.id <= b.id { a } else { b }),
            (a, b) => a.or(b),
        }
    }
}

/// The request of a later alert that has superseded `follower` ([`superseded_by`], among `later`), where `follower`
/// is an order of a cancel's alert (a CLOSE, a re-size's new order) held back `failed` when that cancel failed: its
/// retry is refused, so it can never go after the cancel. Retried alone, the cancel would pull the position's exit
/// (or the entry a re-size was to re-place) for nothing. The retry endpoint, the outbox listing and the dispatcher
/// (for a cancel re-queued by the operator, [`made_way_for_nothing`]) judge a cancel's followers by this one rule.
pub(crate) fn superseded_follower<'a>(
    follower: &OutboxRow,
    later: impl IntoIterator<Item = &'a OutboxRow>,
    now: i64,
) -> Option<&'a OutboxRow> {
    let held = follower.status == "failed" && request_kind(follower) != RequestKind::Cancel;
    held.then(|| may_be_superseded(follower, now).then(|| superseded_by(follower, later)).flatten()).flatten()
}

/// [`superseded_follower`] among requests already indexed.
pub(crate) fn superseded_follower_in<'a>(
    follower: &OutboxRow,
    later: &Requests<'a>,
    now: i64,
) -> Option<&'a OutboxRow> {
    let held = follower.status == "failed" && request_kind(follower) != RequestKind::Cancel;
    (held && may_be_superseded(follower, now)).then(|| later.superseding(follower)).flatten()
}

/// Why a row must not go where its bot is delivered now (`current`, a [`Delivery::target`]): it was stored for
/// another target. The bots file changed between the two (a bot removed or misspelled is paper; a `base_url`
/// moved from a broker's paper endpoint to its live one), or, on a shared database, the server that took the
/// bot's lease reads a different bots file than the one that stored the row. Sent now, an order meant for
/// paper would trade a real account, and one meant for a broker would be "filled" on paper and never sent;
/// so it is neither, and the trader is told. `None` when the targets agree, and for a row of an older version,
/// which recorded no target and goes wherever its bot is delivered now, as it always did.
fn misdirected(row: &OutboxRow, current: &str, what: &str, maybe_sent: bool) -> Option<String> {
    let stored = row.target.as_deref()?;
    if !stored_elsewhere(Some(stored), current, keys_pick_account(&row.broker)) {
        return None;
    }
    // A row an earlier attempt may have sent ([`may_have_gone`]): its order may stand at the old target.
    let sent = if maybe_sent {
        format!(
            "nothing was sent or filled now, but an earlier attempt (before the server stopped, or before the row \
             was queued again) may have reached {stored}: check the position there"
        )
    } else {
        "nothing was sent or filled, check the position at the broker".to_owned()
    };
    Some(format!(
        "{what} not sent: it was stored for delivery {} and this server now delivers bot {} {} (the bots file \
         has changed since, or differs between servers); {sent}",
        where_to(stored),
        row.bot,
        where_to(current)
    ))
}

/// The end of a failure's message for a row failed unsent now that an earlier attempt may have sent
/// ([`may_have_gone`]). Told only "not sent", a trader re-entered by hand a change that had gone through.
fn earlier_attempt(maybe_sent: bool) -> &'static str {
    if maybe_sent {
        "; nothing was sent now, but an earlier attempt (before the server stopped, or before the row was queued \
         again) may have reached the broker: check the order there"
    } else {
        ""
    }
}

/// Whether an attempt before this one may have reached the broker: a row being sent when the server stopped
/// (`sending`), one an operator queued again after it failed, or one an earlier run left open where rows are
/// never marked `sending` (at a broker that refuses a repeated id, and every cancel), which only its age tells.
/// Judged by the `sending` mark alone, such a row failed for a moved account or keys saying nothing was sent,
/// while its order (or its cancel of a stop) may have gone through at the old account.
fn may_have_gone(app: &App, row: &OutboxRow, kind: RequestKind) -> bool {
    let unmarked = kind == RequestKind::Cancel
        || BrokerId::from_name(&row.broker).is_some_and(|b| b.broker().accepts_client_order_id());
    let unsure_before = started_ms().max(app.leases.unsure_before(&row.strategy, &row.bot));
    row.status == "sending" || row.retried || (unmarked && stored_before_start(row, unsure_before))
}

/// Why a row's request names another account than its bot's now, or `None`: the strategy's `account_id` was
/// edited while the row was open (or the server restarted with the edit on a `sending` row). Sent, it would
/// trade the old account; looked up, the new account would be searched, the order not found, and sent again
/// to the old one beside the first. The row's request is formatted anew for the bot's current account and the
/// paths compared, so a broker whose paths name no account (the account is the credentials') never differs.
fn account_moved(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    what: &str,
    maybe_sent: bool,
) -> Option<String> {
    let (account, now) = request_now(app, row, kind, order)?;
    let sent = if maybe_sent {
        "nothing was sent now, but an earlier attempt may have reached the old account"
    } else {
        "nothing was sent"
    };
    Some(format!(
        "{what} not sent: it was stored for {} {}, and bot {} now trades account {account} ({} {}): the strategy's \
         account_id has changed since; {sent}, check both accounts",
        row.method,
        row.path,
        row.bot,
        now.method.as_str(),
        now.path
    ))
}

/// The bot's account now, with the row's request formatted for it, when its path differs from the stored one
/// ([`account_moved`]).
fn request_now(app: &App, row: &OutboxRow, kind: RequestKind, order: Option<&Order>) -> Option<(String, Request)> {
    let account = account_id(app, row)?;
    let (order, broker) = (order?, BrokerId::from_name(&row.broker)?.broker());
    let id = row.order_id.as_deref();
    let now = match kind {
        RequestKind::Place => broker.place(&account, order),
        RequestKind::Cancel => broker.cancel(&account, id?, order),
        // A stored replace changes no quantity in place where the broker cannot.
        RequestKind::Replace => broker.replace(&account, id?, order, false),
    }
    .ok()?;
    (now.path != row.path).then_some((account, now))
}

/// Why a request the broker took must not change its bot's state, or `None`: the strategy moved the bot to another
/// account or broker while the request was on its way (a reload after the checks before the send, during a slow
/// answer or a back-off). The reload dropped the bot's state, and a sync may already have read the new account;
/// the order stands where it was sent. Recorded in the new account's state, the engine decided the new account's
/// alerts against it: a CANCEL or MODIFY sent its id to the new account, a CLOSE waited for the cancel of an exit
/// that is not there. `id` is the broker's id of the order, when known, for the operator to find it by.
fn taken_elsewhere(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    id: Option<&str>,
) -> Option<String> {
    let strategy = app.engine.strategy(&row.strategy)?;
    let bot = strategy.bots.iter().find(|b| *b.id == *row.bot)?;
    let moved = if bot.broker.as_str() != row.broker {
        format!(
            "it was sent to {} and bot {} now trades at {} (the strategy's broker changed while it was on its way)",
            row.broker,
            row.bot,
            bot.broker.as_str()
        )
    } else {
        let (account, now) = request_now(app, row, kind, order)?;
        format!(
            "it was sent as {} {} and bot {} now trades account {account} ({} {}): the strategy's account_id changed \
             while it was on its way",
            row.method,
            row.path,
            row.bot,
            now.method.as_str(),
            now.path
        )
    };
    let order = match id {
        Some(id) => format!("order id {id}"),
        None => format!("client order id {}", row.client_order_id),
    };
    Some(format!(
        "but {moved}; the bot's state, which follows where it trades now, does not record it: check {order} where it was \
         sent"
    ))
}

/// A cancel row re-aimed at the order that replaced its own since it was decided, as the bot's state records the
/// replacement (its `replaced` notes, kept until the broker no longer lists the old order): a MODIFY and a CANCEL
/// of one working order decided before the MODIFY was delivered (two alerts on one bar, a broker in back-off).
/// Sent as stored, the cancel of the replaced order was refused and the replacement kept working: the entry the
/// sender pulled could fill, or the close waiting for the cancel of an exit re-sized just before was held back.
/// `None` when the order was not replaced, or the cancel cannot be formatted anew; and when a re-size's new order
/// waits for this cancel: at a broker whose change cannot carry a size a re-size is a cancel and a new order built
/// from the old order's terms, so pulling the replacement put back the price a MODIFY had just set. Such a cancel
/// is refused as before, holding its new order back, and fails naming the replacement.
/// With the re-aimed row, the order it now cancels: the cancelled order's terms at the replacement's size as the
/// bot records it. The read-back after the cancel measures what filled against that size: against the old
/// order's, a replacement a MODIFY shrank (10 to 4) read as 6 filled, and the close waiting for it was held back.
/// A paper bot's book is its broker's list: the re-aimed row formats no request (the paper broker reads its order
/// id alone), and what the replaced order filled is the book's (nothing: the paper broker fills no limit order).
async fn reaimed(app: &App, row: &OutboxRow, order: Option<&Order>) -> Option<(OutboxRow, Order)> {
    let old = row.order_id.as_deref()?;
    let state = app.bot_state(&row.strategy, &row.bot);
    // Only to a replacement the bot holds as working: one the broker dropped (its original filled first) is no
    // order to pull, and the original may be working still.
    let replacement = replacement_of(&state, old)?;
    let id = replacement.id.as_str();
    let req = if matches!(app.bots.get(&row.bot), Delivery::Paper) {
        None
    } else {
        Some(BrokerId::from_name(&row.broker)?.broker().cancel(&account_id(app, row)?, id, order?).ok()?)
    };
    let (reader, chain) = (app.reader.clone(), row.clone());
    let waiting = tokio::task::spawn_blocking(move || reader.alert_rows(&chain)).await.ok()?.ok()?;
    let cancelled = order?;
    if re_size_waits(&waiting, row, cancelled) {
        return None;
    }
    let mut aimed = row.clone();
    aimed.order_id = Some(id.to_owned());
    // Its whole size: it did not exist when the cancel was decided, so every fill of it came since (the state's
    // `quantity` is what remains of it; measured by that, a replacement filled in part read as nothing filled, and
    // the close waiting for the cancel sold what was no longer held). The stored order's size is not the
    // replacement's: measured from it, the replacement's other size read as a fill or hid one. Counted in the
    // cancelled order's units, built in simplest ratios: a replacement listed as one unit of 2:2 is two of its 1:1.
    let whole = replacement.quantity.checked_add(replacement.filled).unwrap_or(replacement.quantity);
    let whole = whole.checked_mul(paper::units_factor(&replacement.legs)).unwrap_or(whole);
    aimed.meaning = aimed.meaning.map(|m| mark_size_at_decision(m, whole));
    if let Some(req) = req {
        aimed.method = req.method.as_str().to_owned();
        aimed.path = req.path.to_string();
        aimed.content_type = req.content_type.map(str::to_owned);
        aimed.body = req.body.to_bytes();
    }
    let mut now_cancelled = cancelled.clone();
    now_cancelled.quantity = whole;
    tracing::info!(id = row.id, bot = %row.bot, old, new = id, "a cancel is aimed at the order that replaced its own");
    Some((aimed, now_cancelled))
}

/// The working order that replaced order `old` since, as the bot's state records it (its `replaced` notes, a
/// cancel-and-place re-size's new order among them): a chain of replacements (two MODIFYs delivered before the
/// row) is followed to its end. `None` when `old` was not replaced, or its replacement is not held as working.
fn replacement_of<'s>(state: &'s BotState, old: &str) -> Option<&'s crate::paper::OrderRec> {
    // The notes are bounded, and a cycle cannot outlast them.
    let mut id = old;
    for _ in 0..=state.replaced.len() {
        match state.replaced.iter().rev().find(|r| r.old == id) {
            Some(r) => id = &r.new,
            None => break,
        }
    }
    state.working_orders.iter().find(|o| o.id == id).filter(|_| id != old)
}

/// A replace row re-aimed at the order that replaced its own since it was decided ([`replacement_of`]): two
/// MODIFYs of one working order decided before the first was delivered (two alerts on one bar, a broker in
/// back-off), or a price MODIFY decided before a cancel-and-place re-size went out. Sent as stored, the second
/// change reached the replaced order and was refused, and the order worked on at the first one's price though both
/// alerts were answered processed. The change keeps the replacement's size, as the bot records it: the first
/// change set it, and this one, decided against the replaced order, stated that order's. A change that re-sizes
/// (or a row stored before that was marked, [`mark_replace`]) is not re-aimed: what size it meant for the
/// replacement is not known, and it fails as before. With the re-aimed row, its order.
fn reaimed_replace(app: &App, row: &OutboxRow, order: Option<&Order>) -> Option<(OutboxRow, Order)> {
    if resized(row) != Some(false) {
        return None;
    }
    let old = row.order_id.as_deref()?;
    let state = app.bot_state(&row.strategy, &row.bot);
    let replacement = replacement_of(&state, old)?;
    let id = replacement.id.as_str();
    // Counted in the order's units, built in simplest ratios: a replacement listed as one unit of 2:2 is two of 1:1.
    let factor = paper::units_factor(&replacement.legs);
    let mut changed = order?.clone();
    changed.quantity = replacement.quantity.checked_mul(factor)?;
    let mut aimed = row.clone();
    aimed.order_id = Some(id.to_owned());
    // Where the size is read back before the send (`remaining_after_fills`), it is the replacement's whole size.
    let whole =
        size_at_decision(row).and_then(|_| replacement.quantity.checked_add(replacement.filled)?.checked_mul(factor));
    aimed.meaning = Some(mark_replace(serde_json::to_string(&changed).ok()?, false, whole));
    // A paper bot's broker reads the order id alone.
    if !matches!(app.bots.get(&row.bot), Delivery::Paper) {
        let broker = BrokerId::from_name(&row.broker)?.broker();
        let req = broker.replace(&account_id(app, row)?, id, &changed, false).ok()?;
        aimed.method = req.method.as_str().to_owned();
        aimed.path = req.path.to_string();
        aimed.content_type = req.content_type.map(str::to_owned);
        aimed.body = req.body.to_bytes();
    }
    tracing::info!(id = row.id, bot = %row.bot, old, new = id, "a change is aimed at the order that replaced its own");
    Some((aimed, changed))
}

/// A replace row at a broker whose replace is a new order of the size it states, the old order keeping its fills
/// (Alpaca's PATCH, Schwab's PUT): rebuilt to state what remains of the whole size the change means
/// ([`mark_replace`]) as the broker reads the order just before the send. Sent as the bot's last read had it, a
/// limit entry of 10 that filled 4 since was replaced by a new order of 10: 14 bought where 10 were sized. `None`:
/// sent as stored (another broker, a paper bot, a row stored before the size was, nothing filled since). An
/// error, the row failed unsent: the order cannot be read back (its size is never sent unverified), or it has
/// filled whole (nothing is left to change).
async fn remaining_after_fills(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    order: Option<&Order>,
    what: &str,
    maybe_sent: bool,
) -> Result<Option<(OutboxRow, Order)>, String> {
    let (Some(whole), Some(order)) = (size_at_decision(row), order) else { return Ok(None) };
    let Some(broker) = BrokerId::from_name(&row.broker).map(|b| b.broker()) else { return Ok(None) };
    if row.keeps_order_id != Some(false) || !broker.replace_changes_quantity() {
        return Ok(None);
    }
    let id = row.order_id.as_deref().unwrap_or_default();
    let earlier = earlier_attempt(maybe_sent);
    let unread = |why: String| {
        format!(
            "{what} not sent: order {id} could not be read back ({why}), and the size to send is what remains of it \
             (the replacement is a new order of that size, the old one keeping its fills){earlier}"
        )
    };
    let account = account_id(app, row).ok_or_else(|| unread("the bot is no longer in the strategy".into()))?;
    let req = broker.order_request(&account, id).map_err(|e| unread(e.to_string()))?;
    let until = tokio::time::Instant::now() + CANCEL_CONFIRM;
    let read = loop {
        let (may_send, cut) = (|| true, || None);
        let hold = client::Hold { may_send: &may_send, until: &cut };
        // A busy broker is asked again for a moment, as a cancel's read-back is.
        let busy = match read_order(bot, row, &req, &hold).await {
            OrderRead::Answer(body) => break broker.parse_order(&body).map_err(|e| unread(e.to_string()))?,
            OrderRead::Refused(why) => return Err(unread(why)),
            OrderRead::Busy(why) | OrderRead::Unanswered(why) => why,
        };
        if tokio::time::Instant::now() >= until {
            return Err(unread(busy));
        }
        nap(Duration::from_millis(250)).await;
    };
    let read = in_units_of(order, read).ok_or_else(|| unread("its size overflows".into()))?;
    let left = whole.checked_sub(read.filled_quantity).ok_or_else(|| unread("its size overflows".into()))?;
    if left <= strategy_webhook::decimal::Decimal::ZERO {
        return Err(format!(
            "{what} not sent: order {id} has filled {} of the {} the change meant, so nothing is left to change{earlier}",
            read.filled_quantity.normalize(),
            whole.normalize()
        ));
    }
    if left == order.quantity {
        return Ok(None);
    }
    let mut changed = order.clone();
    changed.quantity = left;
    let req = broker.replace(&account, id, &changed, true).map_err(|e| format!("{what} not sent: {e}"))?;
    let mut sized = row.clone();
    sized.method = req.method.as_str().to_owned();
    sized.path = req.path.to_string();
    sized.content_type = req.content_type.map(str::to_owned);
    sized.body = req.body.to_bytes();
    tracing::info!(id = row.id, bot = %row.bot, order = id, filled = %read.filled_quantity, left = %left,
        "a change is sized to what remains of the order as the broker reads it");
    Ok(Some((sized, changed)))
}

/// Whether a re-size's new order waits for cancel `row` among its alert's rows `waiting`; `cancelled` is the order
/// the cancel was decided for.
fn re_size_waits(waiting: &[OutboxRow], row: &OutboxRow, cancelled: &Order) -> bool {
    let coid = row.client_order_id.as_str();
    // A re-size's new order stands in for the cancelled one, its terms but the size: the old order's intent, type
    // and limit. A CLOSE's order waiting for the cancel of the position's exit is sized from the position: the
    // exit's replacement is pulled for it as for a CANCEL, or the close was held back with the position open.
    // A row without the re-size mark (stored before it) is judged by its terms: its `stands_in`, where it has one,
    // also marked an entry after `cancel: true`, whose pull is re-aimed.
    let stand_in = |r: &OutboxRow| match re_size(r) {
        Some(marked) => marked,
        None => stored_order(r).is_some_and(|o| {
            o.intent == cancelled.intent
                && o.order_type == cancelled.order_type
                && o.limit_price == cancelled.limit_price
        }),
    };
    waiting.iter().any(|r| r.after.as_deref() == Some(coid) && request_kind(r) != RequestKind::Cancel && stand_in(r))
}

/// Why a re-size's cancel whose order reads back as no longer working, nothing filled, is not done: the bot's own
/// notes say another request took the order out first (a CANCEL or CLOSE pulled it, or an earlier re-size replaced
/// it, delivered after this re-size was decided). Taken as done, the re-size's new order went out in its place: the
/// entry the trader pulled was back, an exit was placed on a flat position, or a second re-size's order worked
/// beside the first's. `None` when no such note names the order, or no re-size's new order waits for the cancel (a
/// CANCEL's own is done: the order is out of the market, as it was meant to be), or the only cancel that pulled it
/// was an earlier re-size's whose new order is known never to have been placed ([`pull_holds`]).
async fn taken_out_before(app: &App, row: &OutboxRow, order: Option<&Order>, what: &str) -> Option<String> {
    let id = row.order_id.as_deref()?;
    let state = app.bot_state(&row.strategy, &row.bot);
    // A note of this cancel's own is no other request's pull.
    let pulls: Vec<&paper::Pulled> =
        state.pulled.iter().rev().filter(|p| p.order.id == id && p.by != row.client_order_id).collect();
    // A pull a re-size's new order stood in for is that order's replacement, even once the `replaced` note has gone
    // with the new order final (filled): found by neither, a second re-size opened a new entry beside the filled one.
    let replaced_by = state
        .replaced
        .iter()
        .rev()
        .find(|r| r.old == id)
        .map(|r| r.new.as_str())
        .or_else(|| pulls.iter().find_map(|p| p.stood_in.as_deref()));
    let by = match replaced_by {
        Some(new) => format!(
            "it was replaced by order {new} (an earlier re-size or change), and the re-size's new order would work \
             beside that one"
        ),
        None => {
            let mut why = None;
            for p in pulls {
                why = pull_holds(app, row, p).await;
                if why.is_some() {
                    break;
                }
            }
            why?
        }
    };
    let (reader, chain) = (app.reader.clone(), row.clone());
    // Unreadable, the alert's rows are taken to hold a re-size: failing a CANCEL whose order is gone anyway costs
    // a wrong word in the Logs, releasing a re-size a second order.
    let waiting = tokio::task::spawn_blocking(move || reader.alert_rows(&chain)).await.ok().and_then(Result::ok);
    if let (Some(waiting), Some(cancelled)) = (waiting, order) {
        if !re_size_waits(&waiting, row, cancelled) {
            return None;
        }
    }
    Some(format!("{what}: order {id} is no longer working, but not by this cancel: {by}; {HELD_BEHIND_CANCEL}"))
}

/// Whether a paper cancel's order, gone from the book, was pulled by another request first, with nothing that pull
/// holds back waiting for this cancel ([`paper::Chain::pulled_before`]): decided as a broker's read-back of it
/// cancelled is ([`taken_out_before`]), so that a `cancel: true` OPEN's pull of an entry a CANCEL pulled first is done
/// and its entry placed, while a re-size's is refused with the broker's reason. `false` for an order in the book, or
/// one no other request's pull names (never the broker's: refused as before).
async fn paper_pulled_before(app: &App, row: &OutboxRow, order: Option<&Order>, what: &str) -> Result<bool, String> {
    let Some(id) = row.order_id.as_deref() else { return Ok(false) };
    let state = app.bot_state(&row.strategy, &row.bot);
    let pulled = !state.working_orders.iter().any(|o| o.id == id)
        && state.pulled.iter().any(|p| p.order.id == id && p.by != row.client_order_id);
    if !pulled {
        return Ok(false);
    }
    match taken_out_before(app, row, order, what).await {
        Some(why) => Err(why),
        None => Ok(true),
    }
}

/// Why another cancel's pull of a re-size's order (`pull`, a note no new order stood in for) holds the re-size back,
/// worded by what that cancel was: an earlier re-size's (its new order was placed, or may have been), or a CANCEL's
/// or CLOSE's. `None` when it was an earlier re-size's whose new order is known never to have been placed (refused,
/// or expired unsent, [`never_placed`]): nothing took the pulled order's place, and this re-size, the trader's latest
/// word, goes (its new order then stands in for the pulled one). Held back for it, the re-size was lost and its
/// Logs row named a CANCEL or CLOSE that never was.
async fn pull_holds(app: &App, row: &OutboxRow, pull: &paper::Pulled) -> Option<String> {
    let by = pull.by.as_str();
    let (reader, strategy, bot, coid) = (app.reader.clone(), row.strategy.clone(), row.bot.clone(), by.to_owned());
    let read = tokio::task::spawn_blocking(move || reader.followers(&strategy, &bot, &coid)).await;
    let followers = match read.map_err(|e| e.to_string()).and_then(|r| r.map_err(|e| e.to_string())) {
        Ok(f) => f,
        // Unread, the pull may be a re-size's whose new order works: held, as before the rows were read.
        Err(e) => {
            return Some(format!(
                "it was already pulled by the cancel {by}, and what that cancel made way for could not be read ({e})"
            ))
        }
    };
    let re_sized = followers.iter().find(|(f, _)| request_kind(f) != RequestKind::Cancel && re_size(f) == Some(true));
    match re_sized {
        None => Some(format!(
            "it was already pulled by the cancel {by} (a CANCEL or CLOSE delivered first), and the re-size's new \
             order would bring back what that cancel pulled"
        )),
        Some((f, result)) if never_placed(f, result.as_deref()) => None,
        Some((f, _)) => {
            let fate = if f.status == "done" {
                "was placed"
            } else {
                "may have been placed (whether the broker has it is not known: check the broker)"
            };
            Some(format!(
                "it was already pulled by the cancel {by} of an earlier re-size, whose new order {fate}, and this \
                 re-size's new order would work beside it"
            ))
        }
    }
}

/// Whether a place row is known never to have been placed: it expired unsent, or the broker refused it (its result
/// as [`refused`] words it). Failed any other way (unknown whether the broker has it, a lost answer) it may stand.
fn never_placed(row: &OutboxRow, result: Option<&str>) -> bool {
    match row.status.as_str() {
        "expired" => true,
        "failed" => {
            let what = format!("{} for bot {}", describe(request_kind(row)), row.bot);
            result.is_some_and(|r| r.starts_with(&refusal(&what)) || r.starts_with(&stopped_unsent(&what)))
        }
        _ => false,
    }
}

/// What the order a cancel was decided for filled since the decision, read back once it was replaced (its re-aimed
/// cancel measures the replacement only): zero where the broker cannot read it back; an error, the cancel failed
/// unsent, when the read cannot tell (what waits for the cancel sized from a position that may be smaller now).
async fn replaced_fills(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    what: &str,
    maybe_sent: bool,
) -> Result<strategy_webhook::decimal::Decimal, String> {
    let held = HELD_BEHIND_CANCEL;
    let earlier = earlier_attempt(maybe_sent);
    match cancel_outcome(app, bot, row, broker, order, Reads::BotTimeout).await {
        CancelRead::Filled(f) => Ok(f),
        CancelRead::Done | CancelRead::Replaced(_) | CancelRead::Unreadable => {
            Ok(strategy_webhook::decimal::Decimal::ZERO)
        }
        CancelRead::StillWorking => Err(format!(
            "{what} not sent: the replaced order {} still reads as working, so which of the two orders stands is not \
             known; {held}{earlier}",
            row.order_id.as_deref().unwrap_or_default()
        )),
        CancelRead::NotConfirmed(why) => Err(format!(
            "{what} not sent: the replaced order {} could not be read back ({why}), so whether it filled before its \
             replace is not known; {held}{earlier}",
            row.order_id.as_deref().unwrap_or_default()
        )),
    }
}

/// How long a cancel may take before what waits for it can go: the bot's timeout for the cancel's answer,
/// [`CANCEL_CONFIRM`] for its read-back, the bot's timeout again for the read-back's last read (one begun as the
/// window ends runs its whole timeout: counted as the settle time alone, a broker answering slowly but within the
/// timeout took 15 s against a budget of 13, and the close expired behind the exit it had pulled), and the
/// settle time as slack for the follower's own turn. Nothing for a paper bot, which applies a cancel at once.
fn cancel_takes(app: &App, bot: &str) -> Duration {
    match app.bots.get(bot) {
        Delivery::Http(b) => b.timeout.saturating_mul(2).saturating_add(CANCEL_CONFIRM).saturating_add(b.settle),
        Delivery::Paper => Duration::ZERO,
    }
}

/// Whether `follower`, an order that waits for `cancels` cancels of its alert (a CLOSE pulling two exits waits for
/// both), has less of its deadline left at `now` than they may take ([`cancel_takes`] each), so that it would
/// expire before it could go after them. Judged by the deadline alone, a cancel went out with a second of its
/// close's deadline left, pulled the position's exit, and the close behind it expired: the position was left open
/// without its stop; judged for one cancel of two, the first pulled an exit and the second was then refused.
pub(crate) fn expires_before_its_cancel(app: &App, follower: &OutboxRow, cancels: u32, now: i64) -> bool {
    let Some(deadline) = follower.deadline_ms else { return false };
    let takes = cancel_takes(app, &follower.bot).saturating_mul(cancels.max(1));
    deadline.saturating_sub(now) < i64::try_from(takes.as_millis()).unwrap_or(i64::MAX)
}

/// Why a cancel that only makes way for other orders of its alert (a re-size's new order, a CLOSE waiting for the
/// position's exit to be pulled) is not sent: every one of them is past its deadline, or so near it that it would
/// expire before the cancel could be answered and read back ([`expires_before_its_cancel`]), so none can go after
/// it. Sent anyway (the broker busy for longer than the deadline, the cancel going out once it recovered), it pulled
/// the working order and nothing took its place: a re-size left no order at all, and a CLOSE's cancel took the
/// position's stop away and left the position open. So too, for a cancel an operator re-queued, when every order
/// waiting for it was held back `failed` and a later alert's request has superseded it ([`superseded_follower`]):
/// its retry is refused, so it never follows. `None` when nothing waits for it (a CANCEL's own), something
/// waiting can still go, or it is a pull the sender asked for itself ([`pulls_an_entry`]).
async fn made_way_for_nothing(app: &App, row: &OutboxRow, what: &str) -> Option<String> {
    // A row left `sending` is sent again and its answer believed. Cancels are never marked `sending`, though: one a
    // run before this one may have sent is told by when it was stored, and its order read back below. (One an
    // operator re-queued is failed here naming that its earlier attempt may have pulled the order: retry was
    // offered while its followers could still go.)
    if row.status == "sending" {
        return None;
    }
    let (reader, chain) = (app.reader.clone(), row.clone());
    let rows = tokio::task::spawn_blocking(move || reader.alert_rows(&chain)).await.ok()?.ok()?;
    // Counted with the entry behind it, three pulls (both sides' entries) were more than a market entry's 60 s and
    // none went: the other side's entry kept working. Only the entry expires.
    if pulls_an_entry(row, &rows) {
        return None;
    }
    let now = now_ms();
    // A follower `failed` was held back by this cancel's own failure, and can be re-queued once it is through (an
    // operator retrying this cancel, then it): not gone while its deadline lasts. Counted gone, a retried cancel
    // was failed unsent again and again, and the CLOSE behind it could never go.
    // Past its deadline as the follower's own turn judges it ([`stale`]): a row stored under a clock that has gone
    // back since is too. Judged by the deadline alone, the cancel went out after such a restart, and the CLOSE
    // behind it expired: the position kept neither its stop nor its close.
    let past = |r: &OutboxRow| matches!(r.status.as_str(), "expired" | "dismissed") || stale(r, "", now).is_some();
    // Followed through the cancels chained behind this one (a CLOSE pulling two exits: cancel, cancel, close): the
    // orders at the chain's end decide. Looked at the next row alone, the first cancel went out (the second had no
    // deadline) and pulled the stop while the close behind them had expired.
    // Each end with the cancels it waits for, this one counted.
    let mut ends: Vec<(&OutboxRow, u32)> = Vec::new();
    let mut next: Vec<(&str, u32)> = vec![(row.client_order_id.as_str(), 1)];
    let mut seen = 0;
    while let Some((coid, cancels)) = next.pop() {
        seen += 1;
        if seen > rows.len() + 1 {
            return None;
        }
        for r in rows.iter().filter(|r| r.id != row.id && r.after.as_deref() == Some(coid)) {
            let more = rows.iter().any(|w| w.after.as_deref() == Some(r.client_order_id.as_str()));
            if request_kind(r) == RequestKind::Cancel && more {
                next.push((r.client_order_id.as_str(), cancels.saturating_add(1)));
            } else {
                ends.push((r, cancels));
            }
        }
    }
    let pulled_only = ends.iter().all(|(r, _)| request_kind(r) == RequestKind::Cancel);
    if ends.is_empty() || pulled_only {
        return None;
    }
    // A follower held back `failed` (an operator re-queued this cancel) that a later alert's request has superseded
    // can never go either: its retry is refused ([`superseded_follower`]). Counted as one that can go, the cancel
    // went, pulled the position's exit, and the CLOSE behind it could never follow. Read only for such a cancel: a
    // cancel's later requests hold every follower's (its followers are of its alert, stored after it).
    let later = if ends.iter().any(|(r, _)| r.status == "failed") {
        let (reader, chain) = (app.reader.clone(), row.clone());
        tokio::task::spawn_blocking(move || reader.later_requests(&chain)).await.ok()?.ok()?
    } else {
        Vec::new()
    };
    let superseded = |r: &OutboxRow| superseded_follower(r, &later, now);
    let gone = |(r, cancels): &(&OutboxRow, u32)| {
        past(r) || superseded(r).is_some() || expires_before_its_cancel(app, r, *cancels, now)
    };
    if !ends.iter().all(gone) {
        return None;
    }
    // A row an operator re-queued after an attempt: that attempt may have pulled the order already.
    let left = match earlier_runs_pull(app, row).await {
        Some(read) => read,
        None if row.retried => {
            "an earlier attempt of it may have reached the broker: check whether it still works".into()
        }
        None => "it is left working as it was".into(),
    };
    let by = ends.iter().find_map(|(r, _)| superseded(r));
    let why = if ends.iter().all(|(r, _)| past(r)) {
        "they are past their deadlines, so none can go after it".to_owned()
    } else if let Some(by) = by.filter(|_| ends.iter().all(|(r, _)| past(r) || superseded(r).is_some())) {
        format!(
            "a later alert's request on their instrument, row {} ({}), {}: their retry is refused, so none can go \
             after it",
            by.id,
            match request_kind(by) {
                RequestKind::Place => "an order",
                RequestKind::Replace => "a change",
                RequestKind::Cancel => "a cancel",
            },
            if by.status == "done" { "has gone since" } else { "is on its way" }
        )
    } else {
        let most_left = ends.iter().filter_map(|(r, _)| r.deadline_ms).max().unwrap_or(now).saturating_sub(now);
        let cancels = ends.iter().map(|(_, n)| *n).max().unwrap_or(1);
        format!(
            "they would pass their deadlines before it could be answered and read back ({:.1} s left, and {} may \
             take {} s), so none could go after it",
            most_left as f64 / 1000.0,
            if cancels > 1 { format!("the {cancels} cancels they wait for") } else { "a cancel".to_owned() },
            cancel_takes(app, &row.bot).saturating_mul(cancels).as_secs()
        )
    };
    Some(format!(
        "{what} not sent: it only made way for the alert's other orders, and {why}; order {}: {left}",
        row.order_id.as_deref().unwrap_or("?")
    ))
}

/// What became of the order of a cancel a run before this one (or a server that held the bot before) may have sent,
/// as the broker reads it back: that run may have stopped after the broker took the cancel and before its `done` was
/// stored. Called "left working as it was" unread, an exit such a cancel had pulled was reported working while the
/// position stood without it. A cancel [`reaimed`] at the order that replaced its own is read back at that order,
/// where the run before sent it. `None` for a cancel stored in this run and for a paper bot, whose fill is stored
/// with its row.
async fn earlier_runs_pull(app: &App, row: &OutboxRow) -> Option<String> {
    let Delivery::Http(bot) = app.bots.get(&row.bot) else { return None };
    let unsure_before = started_ms().max(app.leases.unsure_before(&row.strategy, &row.bot));
    if !stored_before_start(row, unsure_before) {
        return None;
    }
    let broker = BrokerId::from_name(&row.broker)?.broker();
    let earlier = "a run before a restart may have sent this cancel";
    let order = stored_order(row);
    let mut read = cancel_outcome(app, bot, row, broker, order.as_ref(), Reads::CutAtWindow).await;
    // That run sent the cancel where `deliver` does ([`reaimed`]): to the order that replaced the stored one since.
    // Read back at the stored order alone, an exit it pulled was reported as "replaced, may still be working".
    // What the stored order filled before its replace is counted in, as `deliver` counts it.
    let mut aimed_at = None;
    if !matches!(read, CancelRead::StillWorking | CancelRead::NotConfirmed(_)) {
        if let Some((aimed, mut now_cancelled)) = reaimed(app, row, order.as_ref()).await {
            if let CancelRead::Filled(f) = read {
                now_cancelled.quantity = now_cancelled.quantity.checked_add(f).unwrap_or(now_cancelled.quantity);
            }
            read = cancel_outcome(app, bot, &aimed, broker, Some(&now_cancelled), Reads::CutAtWindow).await;
            aimed_at = aimed.order_id;
        }
    }
    if !matches!(read, CancelRead::StillWorking) {
        // The bot's state still lists the order: the account is read back for what stands now.
        app.sync.poke(&row.strategy, &row.bot);
    }
    let told: String = match read {
        CancelRead::StillWorking => "it is left working as it was".into(),
        CancelRead::Done => {
            let exit = if order.is_some_and(|o| !o.intent.is_open()) { ": the position stands without it" } else { "" };
            format!(
                "it is no longer working and nothing filled since the decision: {earlier} and pulled it, and nothing \
                 took its place{exit}; check the broker"
            )
        }
        CancelRead::Filled(filled) => format!(
            "it is no longer working, having filled {} since the decision ({earlier}, pulling what remained); check \
             the position at the broker",
            filled.normalize()
        ),
        CancelRead::Replaced(by) => {
            let by = by.map(|id| format!(" by order {id}")).unwrap_or_default();
            format!("it was replaced{by}, which may still be working ({earlier}); check the broker")
        }
        CancelRead::NotConfirmed(_) | CancelRead::Unreadable => {
            format!("{earlier} and pulled it, and it could not be read back: check whether it still works")
        }
    };
    // Named, the order read back is not taken for the stored one (the caller names that).
    Some(match aimed_at {
        Some(id) => format!("it was replaced by order {id}, at which the cancel was aimed; order {id}: {told}"),
        None => told,
    })
}

/// A later alert that overtook an entry still waiting in the outbox ([`overtaking`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Overtaker {
    /// The later alert's first log row.
    pub log_id: i64,
    /// Its action as sent (`CLOSE LONG`, `OPEN SHORT`, `sell`).
    pub action: String,
}

impl Overtaker {
    /// Why the entry it overtook is not sent.
    fn reason(&self, what: &str) -> String {
        format!(
            "{what} not sent: a later alert of this strategy on its instrument (log row {}, {}) was decided while it \
             waited to go, without it: sent now, this older entry would trade after what the sender has done since \
             (a position closed, an entry cancelled or changed, a reversal); act at the broker if it is still wanted",
            self.log_id, self.action
        )
    }
}

/// The first of `decided` (the strategy's decided alerts, oldest first, [`crate::store::Reader::decided_alerts_since`])
/// that overtakes an entry (an order opening or adding to `direction` on `entry`) of the alert received at
/// `created_ms` whose first log row is `own` (the row's [`OutboxRow::alert_log`]): one decided after it (its log rows
/// later, whatever the clock of the server that stamped it, [`crate::store::later_alerts`]), that acts on the entry's
/// holding (its instrument; for crypto, any pair of its coin,
/// which the core closes as one holding, [`strategy_webhook::decide::same_holding`]) by
/// - a CLOSE, a CANCEL or a MODIFY of the entry's direction, or naming none (the sender closed, pulled or changed
///   what the entry opens), or
/// - an OPEN of the other direction (a reversal).
///
/// Its own alert never does (a reversal's CLOSE before its new side, a `cancel: true` entry's CANCEL, a re-size's
/// MODIFY): it is the one whose kept log rows span `own`. With no `own` (a row of an older version), or an `own` no
/// longer among the decided alerts' rows (the strategy's log cap deleted its oldest rows, that one among them, and
/// the alert's first kept row is a later one, or none is left), time decides: an alert received since counts, one in
/// its own millisecond unless it is alone there. An OPEN of its own direction (an add) does not, nor a CLOSE, CANCEL or MODIFY of the other side (taken
/// for one, a short's exit lost a long entry the sender still wanted). An action word is read as the strategy's
/// rules make it (beside `prevMarketPosition`: a `buy` from flat or long opens long, a `sell` from flat or short
/// opens short); one that cannot be read so overtakes: not sending an entry the sender still wanted is told to the
/// trader, sending one the sender had closed or cancelled trades real money.
pub(crate) fn overtaking(
    strategy: Option<&strategy_webhook::Strategy>,
    entry: &strategy_webhook::model::InstrumentKey,
    asset_class: AssetClass,
    direction: strategy_webhook::model::Direction,
    created_ms: i64,
    own: Option<i64>,
    decided: &[crate::store::DecidedAlert],
) -> Option<Overtaker> {
    use strategy_webhook::alert::{Action, ActionWord};
    use strategy_webhook::model::Direction;
    // What an alert does, where it can be read: its action and the direction it names (`None`: none).
    let read = |a: &serde_json::Value| -> Option<(Action, Option<Direction>)> {
        let action = a["action"].as_str().unwrap_or_default();
        let dir = a["direction"].as_str().and_then(Direction::from_word);
        if let Some(action) = Action::from_word(action) {
            return Some((action, dir));
        }
        let word = ActionWord::from_word(action)?;
        let (action, side) = match a["prevMarketPosition"].as_str().map(str::to_ascii_lowercase).as_deref() {
            // A buy from a short may have covered it or reversed it; a sell from a long likewise: not read.
            Some(before) => match (word, before) {
                (ActionWord::Buy, "flat" | "long") => (Action::Open, Direction::Long),
                (ActionWord::Sell, "flat" | "short") => (Action::Open, Direction::Short),
                _ => return None,
            },
            None => strategy.and_then(|s| strategy_webhook::decide::rule_for(s, word))?,
        };
        // A direction the alert names against its rule's is not read either.
        (dir.unwrap_or(side) == side).then_some((action, Some(side)))
    };
    let overtakes = |a: &serde_json::Value| -> bool {
        match read(a) {
            None => true,
            Some((Action::Open, dir)) => dir != Some(direction),
            Some((Action::Close | Action::Cancel | Action::Modify, dir)) => dir.map_or(true, |d| d == direction),
        }
    };
    let crypto = asset_class == AssetClass::Crypto;
    for d in crate::store::later_alerts(decided, crate::store::DecidedAlert::span, created_ms, own) {
        let alerts: Vec<serde_json::Value> = serde_json::from_str(&d.alerts).unwrap_or_default();
        for a in &alerts {
            let on = a["instrument"].as_str().map(|i| strategy_webhook::model::InstrumentKey::new(i, asset_class));
            if !on.is_some_and(|on| strategy_webhook::decide::same_holding(crypto, entry, &on)) || !overtakes(a) {
                continue;
            }
            let action = a["action"].as_str().unwrap_or("an unreadable action");
            let action = match a["direction"].as_str() {
                Some(dir) => format!("{action} {}", dir.to_ascii_uppercase()),
                None => action.to_owned(),
            };
            return Some(Overtaker { log_id: d.log_id, action });
        }
    }
    None
}

/// Whether an entry waiting in the outbox was overtaken by a later alert ([`overtaking`]), read from the store once
/// its writer has committed what was answered before now (a rejected CLOSE's log rows). `Err` when that could not be
/// read (the caller waits and tries again).
async fn overtaken(app: &App, row: &OutboxRow, order: &Order) -> Result<Option<Overtaker>, String> {
    if !crate::admin::settled(app).await {
        return Err("the store has not yet written the alerts answered just now".to_owned());
    }
    let named = in_strategy_names(app, row, order);
    let symbol = named.pair.as_ref().map_or_else(|| named.symbol.to_string(), crate::sync::pair_text);
    let entry = strategy_webhook::model::InstrumentKey::new(&symbol, named.asset_class);
    let (reader, s, since, own) = (app.reader.clone(), row.strategy.clone(), row.created_ms, row.alert_log);
    let decided = match tokio::task::spawn_blocking(move || reader.decided_alerts_since(&s, since, own)).await {
        Ok(Ok(d)) => d,
        Ok(Err(e)) => return Err(format!("the strategy's later alerts could not be read: {e}")),
        Err(_) => return Err("the strategy's later alerts could not be read".to_owned()),
    };
    let strategy = app.engine.strategy(&row.strategy);
    let direction = order.intent.direction();
    Ok(overtaking(strategy.as_deref(), &entry, named.asset_class, direction, row.created_ms, row.alert_log, &decided))
}

/// A row stored for another target than its bot's now ([`misdirected`]): failed unsent, like any failure (the
/// caller tells the trader, [`tell`]).
fn misdirected_failure(row: &OutboxRow, current: &str, message: String) -> Delivered {
    tracing::error!(
        id = row.id,
        strategy = %row.strategy,
        bot = %row.bot,
        stored = row.target.as_deref().unwrap_or_default(),
        current,
        "an outbox row was stored for another delivery target than its bot's now; failed without sending"
    );
    failed(row, message)
}

/// Counts a delivery's result and tells the trader of it (the notifications, when the strategy has any).
async fn tell(app: &App, row: &OutboxRow, ok: bool, message: &str) {
    crate::metrics::delivery(&row.broker, ok);
    crate::notify::delivery(app, row, ok, message).await;
}

/// The order as the bot's state names it: the strategy's instrument, where the bot's `symbols` map sent it under
/// the broker's name (`BRK.B` sent as `BRK/B`). Recorded under the broker's name, a working order or a paper
/// position was no order or position in the alerts' name: a CANCEL found none, a CLOSE nothing to close.
fn in_strategy_names<'o>(app: &App, row: &OutboxRow, order: &'o Order) -> std::borrow::Cow<'o, Order> {
    let s = app.engine.strategy(&row.strategy);
    let Some(cfg) = s.as_deref().and_then(|s| s.bots.iter().find(|b| *b.id == *row.bot)) else {
        return std::borrow::Cow::Borrowed(order);
    };
    let broker_name = order.pair.as_ref().map_or_else(|| order.symbol.to_string(), crate::sync::pair_text);
    let Some(name) = s.as_deref().and_then(|s| crate::sync::strategy_name(s, cfg, &broker_name)) else {
        return std::borrow::Cow::Borrowed(order);
    };
    let mut o = order.clone();
    if o.pair.is_some() {
        o.pair = strategy_webhook::model::CryptoPair::parse(name).or(o.pair);
    }
    o.symbol = name.into();
    std::borrow::Cow::Owned(o)
}

/// A row that ends failed without being sent, with an ERROR row saying why.
fn failed(row: &OutboxRow, message: String) -> Delivered {
    Delivered {
        id: row.id,
        status: "failed",
        result: message.clone(),
        log: Some(LogEntry {
            ts_ms: now_ms(),
            strategy: row.strategy.clone(),
            decision: "processed",
            http_status: 200,
            alerts: "[]".into(),
            records: vec![(Level::Error, message)],
        }),
        state: None,
    }
}

/// Delivers one row under the bot's lease and says what it came to (not yet committed); `None` when the lease
/// was lost before the row was done with: nothing is to be recorded for it here.
async fn deliver(app: &App, lease: &Lease, row: OutboxRow) -> Option<Delivered> {
    // An entry marked for the read back (`read_back.rs`): however its delivery ended short of the broker taking it
    // (refused, failed, expired, held back, left to a retry or to another lease), nothing is to be read back for it.
    let marked = app.read_back.any().then(|| (row.strategy.clone(), row.bot.clone(), row.client_order_id.clone()));
    let delivered = deliver_row(app, lease, row).await;
    if let Some((strategy, bot, client_order_id)) = marked {
        app.read_back.delivered(&strategy, &bot, &client_order_id);
    }
    delivered
}

/// [`deliver`], the row's own work.
async fn deliver_row(app: &App, lease: &Lease, row: OutboxRow) -> Option<Delivered> {
    let kind = request_kind(&row);
    let order = stored_order(&row);
    let what = format!("{} for bot {}", describe(kind), row.bot);
    let delivery = app.bots.get(&row.bot);
    let paper = matches!(delivery, Delivery::Paper);
    let mut wait = BACKOFF;
    let held = loop {
        match held_back(app, &row, kind, order.as_ref()).await {
            Ok(held) => break held,
            // Read again while the bot is this server's and the row may still go out; past its deadline it
            // expires, as it would have waiting for a broker.
            Err(e) => {
                if !lease.valid() {
                    return None;
                }
                if let Some(m) = (kind != RequestKind::Cancel).then(|| stale(&row, &what, now_ms())).flatten() {
                    return Some(expired(&row, format!("{m} ({e})")));
                }
                tracing::warn!(id = row.id, error = %e, "checking the request a row waits for failed; retrying");
                nap(wait).await;
                wait = backoff(wait);
            }
        }
    };
    if let Some(held) = held {
        let m = format!("{what} not sent: {held}");
        tell(app, &row, false, &m).await;
        return Some(failed(&row, m));
    }
    // After the prerequisite's check: a row behind one that failed for its target is held back as any row
    // behind a failure is. Before anything is sent, filled, looked up or expired: a lookup would ask the wrong
    // broker, and a row stored for a broker that expired here would say "not sent" of an order that may stand
    // there.
    let current = delivery.target();
    let sending = may_have_gone(app, &row, kind);
    if let Some(m) = misdirected(&row, current, &what, sending) {
        tell(app, &row, false, &m).await;
        return Some(misdirected_failure(&row, current, m));
    }
    if let Some(m) = (!paper).then(|| account_moved(app, &row, kind, order.as_ref(), &what, sending)).flatten() {
        tracing::error!(id = row.id, strategy = %row.strategy, bot = %row.bot, path = %row.path,
            "an outbox row names another account than its bot's now; failed without sending");
        tell(app, &row, false, &m).await;
        return Some(failed(&row, m));
    }
    if kind == RequestKind::Cancel {
        if let Some(m) = made_way_for_nothing(app, &row, &what).await {
            tell(app, &row, false, &m).await;
            return Some(failed(&row, m));
        }
    }
    // A cancel of an order this bot has replaced since (a MODIFY delivered just before it): sent to the order that
    // replaced it.
    let aimed = match kind {
        RequestKind::Cancel => reaimed(app, &row, order.as_ref()).await,
        // So is a change (a MODIFY delivered just before it).
        RequestKind::Replace => reaimed_replace(app, &row, order.as_ref()),
        RequestKind::Place => None,
    };
    let (mut row, what, mut order) = match aimed {
        Some((aimed, changed)) if kind == RequestKind::Replace => {
            let what = format!(
                "{what} (aimed at order {}, which replaced order {} since the change was decided)",
                aimed.order_id.as_deref().unwrap_or_default(),
                row.order_id.as_deref().unwrap_or_default()
            );
            (aimed, what, Some(changed))
        }
        Some((aimed, mut now_cancelled)) => {
            let what = format!(
                "{what} (aimed at order {}, which replaced order {} since the cancel was decided)",
                aimed.order_id.as_deref().unwrap_or_default(),
                row.order_id.as_deref().unwrap_or_default()
            );
            // What the replaced order filled after the decision and before its replace: in neither the replacement's
            // size nor its read-back. Left out, an exit that sold 3 of 10 before a MODIFY shrank it read as
            // nothing filled, and the close waiting for its cancel sold 10 on 7 held.
            if let Delivery::Http(bot) = &delivery {
                let broker = BrokerId::from_name(&row.broker).map(|b| b.broker());
                let before = match broker {
                    Some(broker) => replaced_fills(app, bot, &row, broker, order.as_ref(), &what, sending).await,
                    None => Ok(strategy_webhook::decimal::Decimal::ZERO),
                };
                match before {
                    Ok(f) => {
                        now_cancelled.quantity = now_cancelled.quantity.checked_add(f).unwrap_or(now_cancelled.quantity)
                    }
                    Err(m) => {
                        tell(app, &row, false, &m).await;
                        return Some(failed(&row, m));
                    }
                }
            }
            (aimed, what, Some(now_cancelled))
        }
        _ => (row, what, order),
    };
    if let (RequestKind::Replace, Delivery::Http(bot)) = (kind, &delivery) {
        match remaining_after_fills(app, bot, &row, order.as_ref(), &what, sending).await {
            Ok(Some((sized, changed))) => (row, order) = (sized, Some(changed)),
            Ok(None) => {}
            Err(m) => {
                tell(app, &row, false, &m).await;
                return Some(failed(&row, m));
            }
        }
    }
    // An http bot's row is checked before each attempt (`http_deliver`), where an order that may have gone
    // out already is looked up rather than expired blind.
    if paper && kind != RequestKind::Cancel {
        if let Some(m) = stale(&row, &what, now_ms()) {
            // An order that expired is a failure the trader hears of, like any other.
            tell(app, &row, false, &m).await;
            return Some(expired(&row, m));
        }
    }
    let pulled_before = if paper && kind == RequestKind::Cancel {
        match paper_pulled_before(app, &row, order.as_ref(), &what).await {
            Ok(p) => p,
            Err(m) => {
                tell(app, &row, false, &m).await;
                return Some(failed(&row, m));
            }
        }
    } else {
        false
    };
    // The state a delivery changed is set where it is made ([`set_state`]), over the state it was applied to.
    let ((ok, message, state), status) = match delivery {
        Delivery::Paper => {
            let filled = std::cell::RefCell::new(None);
            let state = set_state(app, &row, |st| {
                let result = paper_fill(app, st, &row, kind, order.as_ref(), &what, pulled_before);
                let ok = result.0;
                *filled.borrow_mut() = Some(result);
                ok
            });
            let (ok, message, status) =
                filled.into_inner().unwrap_or((false, format!("{what}: the paper broker did not run"), "failed"));
            ((ok, message, state), status)
        }
        Delivery::Http(bot) => http_deliver(app, lease, bot, &row, kind, order.as_ref(), &what).await?,
    };
    let state_json = state
        .as_ref()
        .map(|s| (row.strategy.clone(), row.bot.clone(), serde_json::to_string(s).unwrap_or_else(|_| "{}".into())));
    if !paper && ok && kind == RequestKind::Place {
        // Taken (on an attempt, or found by a lookup): a CLOSE of its instrument waits for a read that starts from
        // here (`read_back.rs`), the one poked below.
        app.read_back.answered(&row.strategy, &row.bot, &row.client_order_id);
    }
    if !paper {
        // Whatever it came to (an order placed, refused or found by a lookup), the account is read back soon
        // (after the state above is set, so that the sync compares against it): a fill or a refusal shows in
        // the bot's positions and working orders.
        app.sync.poke(&row.strategy, &row.bot);
    }
    tell(app, &row, ok, &message).await;
    let mut d = result(&row, ok, status, message);
    d.state = state_json;
    Some(d)
}

/// What a delivery came to, with its log row (INFO when it succeeded, ERROR with the reason when not); the
/// bot's new state is the caller's to add.
fn result(row: &OutboxRow, ok: bool, status: &'static str, message: String) -> Delivered {
    let level = if ok { Level::Info } else { Level::Error };
    Delivered {
        id: row.id,
        status,
        result: message.clone(),
        log: Some(LogEntry {
            ts_ms: now_ms(),
            strategy: row.strategy.clone(),
            decision: "processed",
            http_status: 200,
            alerts: "[]".into(),
            records: vec![(level, message)],
        }),
        state: None,
    }
}

/// Applies one row to a paper bot's state: whether the paper broker took it, the message for the Logs, and the
/// row's final status. `state` changes only when it took it.
fn paper_fill(
    app: &App,
    state: &mut BotState,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    what: &str,
    pulled_before: bool,
) -> (bool, String, &'static str) {
    let Some(order) = order else {
        return (false, "the paper broker cannot read this order (its outbox row holds no order)".into(), "failed");
    };
    // Applied to a copy, so that a refused request leaves nothing of itself behind.
    let mut next = state.clone();
    let chain = paper::Chain {
        by: &row.client_order_id,
        after: row.after.as_deref(),
        stands_in: stands_in(row),
        pulled_before,
    };
    match paper::apply_in(&mut next, kind, row.order_id.as_deref(), &in_strategy_names(app, row, order), Some(chain)) {
        Ok(msg) => {
            // The fill describes the account the bot is configured with now, as a sync's read would.
            next.source = app.state_source(&row.strategy, &row.bot).or(next.source);
            *state = next;
            (true, format!("{what} accepted by the paper broker: {msg}"), "done")
        }
        Err(e) => (false, format!("{what} refused by the paper broker: {e}"), "failed"),
    }
}

/// Fills a run of a paper bot's rows that wait for no other row (cancels are delivered one by one, see `run`),
/// oldest first, exactly as [`deliver`] would fill them one after the other: each row sees the state the rows
/// before it left. The state is copied from the server's once, published once at the end, and stored once, with
/// the run's last row: the run is committed in one transaction (`Writer::queue_delivered_run`), so after a crash
/// either all of its rows are still open against the old state, or all are done with the new one, and no fill is
/// applied twice.
async fn fill_run(app: &App, strategy: &str, bot: &str, rows: Vec<OutboxRow>) -> Vec<Delivered> {
    // The state is read, filled and set with nothing awaited in between, and the trader is told after: a state
    // set by the operator (`PUT …/bots/{bot}/state`) while a run awaited its notifications was overwritten by
    // the run's older copy, though answered 200. The set is a compare-and-set on the state read: a PUT that
    // landed between the read and the set (on another thread) was overwritten too; the run is filled again over it.
    let current = app.bots.target(bot);
    let (run, told) = loop {
        let read = app.bot_state(strategy, bot);
        let mut state = read.clone();
        let mut changed = false;
        let mut run = Vec::with_capacity(rows.len());
        let mut told: Vec<(usize, bool, String)> = Vec::with_capacity(rows.len());
        for row in &rows {
            let kind = request_kind(row);
            let what = format!("{} for bot {}", describe(kind), row.bot);
            // A row stored for a broker is never filled here: it fails in its place in the run, and the rows
            // after it are filled against the state the rows before it left.
            if let Some(m) = misdirected(row, current, &what, may_have_gone(app, row, kind)) {
                told.push((run.len(), false, m.clone()));
                run.push(misdirected_failure(row, current, m));
                continue;
            }
            let stale = if kind == RequestKind::Cancel { None } else { stale(row, &what, now_ms()) };
            let d = match stale {
                // An order that expired is a failure the trader hears of, like any other.
                Some(m) => {
                    told.push((run.len(), false, m.clone()));
                    expired(row, m)
                }
                None => {
                    let order = stored_order(row);
                    let (ok, message, status) = paper_fill(app, &mut state, row, kind, order.as_ref(), &what, false);
                    changed |= ok;
                    told.push((run.len(), ok, message.clone()));
                    result(row, ok, status, message)
                }
            };
            run.push(d);
        }
        if !changed {
            break (run, told);
        }
        let json = serde_json::to_string(&state).unwrap_or_else(|_| "{}".into());
        if app.replace_bot_state_committing(strategy, bot, &read, state) {
            if let Some(last) = run.last_mut() {
                last.state = Some((strategy.to_owned(), bot.to_owned(), json));
            }
            break (run, told);
        }
    };
    for (i, ok, message) in told {
        tell(app, &rows[i], ok, &message).await;
    }
    run
}

/// The neutral order a row stores (the Outcome's `order` JSON). A row written by an older version holds
/// another shape: it is logged and read as unknown, never a reason to stop.
/// The row's order (its `meaning`) with whether it stands in for the order its `after` cancel pulls, as
/// [`stands_in`] reads it back: `true` for a re-size's new order (a MODIFY's place), `false` for any other place
/// waiting for a cancel. The order's reader ignores the key.
/// `re_size` also marks a re-size's new order (a MODIFY's), built from the pulled order's terms: the cancel it
/// waits for is never re-aimed at a replacement ([`re_size`]), which would put back the price a replace had just set.
/// An entry after `cancel: true` carries the alert's own terms: its cancel is re-aimed like any other.
pub fn mark_stands_in(meaning: String, stands_in: bool, re_size: bool) -> String {
    match meaning.strip_suffix('}') {
        Some(head) if head.starts_with('{') => format!("{head},\"stands_in\":{stands_in},\"re_size\":{re_size}}}"),
        _ => meaning,
    }
}

/// Whether a place row is a re-size's new order ([`mark_stands_in`]); `None` for a row stored before the mark.
pub fn re_size(row: &OutboxRow) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct Marked {
        #[serde(default)]
        re_size: Option<bool>,
    }
    serde_json::from_str::<Marked>(row.meaning.as_deref()?).ok()?.re_size
}

/// Whether a place row stands in for the order its `after` cancel pulls ([`mark_stands_in`]); `None` for a row
/// stored before the mark, judged by its terms as before (the pulled order's, another size).
pub fn stands_in(row: &OutboxRow) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct Marked {
        #[serde(default)]
        stands_in: Option<bool>,
    }
    serde_json::from_str::<Marked>(row.meaning.as_deref()?).ok()?.stands_in
}

/// A cancel row's order (its `meaning`) with `size`, the cancelled order's whole size (its filled part included) as
/// the bot's book held it when the cancel was decided, as [`size_at_decision`] reads it back; the order's reader
/// ignores the key. A mark there already is replaced (a cancel re-aimed at a replacement, [`reaimed`]).
pub fn mark_size_at_decision(meaning: String, size: strategy_webhook::decimal::Decimal) -> String {
    let head = match meaning.rfind(SIZE_AT_DECISION) {
        Some(at) => &meaning[..at],
        None => match meaning.strip_suffix('}') {
            Some(head) if head.starts_with('{') => head,
            _ => return meaning,
        },
    };
    format!("{head}{SIZE_AT_DECISION}\"{size}\"}}")
}

/// A replace row's order (its `meaning`) marked with whether the change re-sizes the order it changes, and, at a
/// broker whose replace is a new order of the size it states, `whole`: the whole size the change means, the
/// order's filled part as the bot's book held it included ([`size_at_decision`] reads it back for
/// `remaining_after_fills`). The order's reader ignores both keys.
pub fn mark_replace(meaning: String, resized: bool, whole: Option<strategy_webhook::decimal::Decimal>) -> String {
    let marked = match meaning.strip_suffix('}') {
        Some(head) if head.starts_with('{') && !head.contains(RESIZED) => format!("{head}{RESIZED}{resized}}}"),
        _ => return meaning,
    };
    match whole {
        Some(size) => mark_size_at_decision(marked, size),
        None => marked,
    }
}

/// The key [`mark_replace`] writes, with the comma before it.
const RESIZED: &str = ",\"resized\":";

/// Whether a replace row's change re-sizes its order ([`mark_replace`]); `None` for a row stored before the mark.
fn resized(row: &OutboxRow) -> Option<bool> {
    #[derive(serde::Deserialize)]
    struct Marked {
        resized: Option<bool>,
    }
    serde_json::from_str::<Marked>(row.meaning.as_deref()?).ok()?.resized
}

/// The key [`mark_size_at_decision`] writes, with the comma before it.
const SIZE_AT_DECISION: &str = ",\"size_at_decision\":";

/// The cancelled order's whole size when the cancel was decided ([`mark_size_at_decision`]); `None` for a row
/// stored before the mark, or decided at a book that moved before its rows were made.
fn size_at_decision(row: &OutboxRow) -> Option<strategy_webhook::decimal::Decimal> {
    #[derive(serde::Deserialize)]
    struct Marked {
        #[serde(default, deserialize_with = "strategy_webhook::decimal::deserialize_opt")]
        size_at_decision: Option<strategy_webhook::decimal::Decimal>,
    }
    serde_json::from_str::<Marked>(row.meaning.as_deref()?).ok()?.size_at_decision
}

fn stored_order(row: &OutboxRow) -> Option<Order> {
    let text = row.meaning.as_deref()?;
    match serde_json::from_str(text) {
        Ok(o) => Some(o),
        Err(e) => {
            tracing::warn!(id = row.id, bot = %row.bot, error = %e, "the outbox row's order cannot be read");
            None
        }
    }
}

/// The kind of request a row holds.
fn request_kind(row: &OutboxRow) -> RequestKind {
    match row.kind.as_str() {
        "replace" => RequestKind::Replace,
        "cancel" => RequestKind::Cancel,
        _ => RequestKind::Place,
    }
}

fn describe(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Place => "order",
        RequestKind::Replace => "change of a working order",
        RequestKind::Cancel => "cancel of a working order",
    }
}

/// What one attempt at an order came to.
enum Attempt {
    /// The broker answered; what the answer means is the broker's business ([`Broker::read_answer`]).
    Answered(Answer),
    /// Nothing was sent.
    NotSent(String),
    /// The request may have reached the broker.
    Unknown(String),
    /// Nothing was sent: the bot's session is stopped (its credentials refused for good at the token endpoint,
    /// not by the broker).
    Stopped(String),
}

/// What a delivery came to: whether it succeeded, the message for the Logs, the bot's new state, and the
/// row's final status.
type Outcome = (bool, String, Option<BotState>);

/// How far ahead of this clock a row was stored, in ms, when by more than a moment: the clock went back since (an
/// NTP step, or a restart under a clock set right after a run whose clock was ahead). Its age cannot be told then,
/// nor when an earlier attempt went out: a window measured from its stored time kept a market order fresh for as
/// long as the step, and a lookup from that time searched the future and found nothing.
fn stored_ahead(row: &OutboxRow, now: i64) -> Option<i64> {
    Some(row.created_ms.saturating_sub(now)).filter(|ahead| *ahead > CLOCK_SLACK_MS)
}

/// Clocks of servers kept in sync (docs/deploy.md) differ by less than this; a row stored further ahead was stored
/// under a clock that has gone back since.
const CLOCK_SLACK_MS: i64 = 1_000;

/// The message for a row stored `ahead` ms ahead of this clock.
fn stored_ahead_message(what: &str, ahead: i64) -> String {
    format!(
        "{what} was stored at a time {:.1} s ahead of this server's clock: the clock went back since, so its age \
         cannot be told",
        ahead as f64 / 1000.0
    )
}

/// Whether the broker looks the row's order up the same way whatever the time it was sent (by its client order id),
/// so a lookup needs no window.
fn looks_up_by_id(app: &App, row: &OutboxRow, broker: &dyn Broker) -> bool {
    let Some(account) = account_id(app, row) else { return false };
    let at = |t| broker.lookup_request(&account, &row.client_order_id, t).ok();
    at(0).is_some_and(|a| Some(a) == at(i64::MAX / 4))
}

/// Whether a row is past its deadline at `now`, with the message that says so. A row with a deadline stored under
/// a clock that has gone back since ([`stored_ahead`]) is taken as past it: how old it is cannot be told.
pub(crate) fn stale(row: &OutboxRow, what: &str, now: i64) -> Option<String> {
    let deadline = row.deadline_ms?;
    if let Some(ahead) = stored_ahead(row, now) {
        return Some(format!(
            "{}; sent now it might trade at whatever the market has become, so it expired",
            stored_ahead_message(what, ahead)
        ));
    }
    if now <= deadline {
        return None;
    }
    let age = (now - row.created_ms).max(0) as f64 / 1000.0;
    let allowed = (deadline - row.created_ms).max(0) as f64 / 1000.0;
    Some(format!(
        "{what} not sent: it is {age:.1} s old, past its deadline of {allowed:.1} s after the alert was received; \
         sent now it would trade at whatever the market has become, so it expired"
    ))
}

/// A row past its deadline: marked `expired`, with an ERROR row naming its age.
fn expired(row: &OutboxRow, message: String) -> Delivered {
    let mut d = failed(row, message);
    d.status = "expired";
    d
}

/// The account a bot's orders go to (for lookups), from the strategy as loaded now.
fn account_id(app: &App, row: &OutboxRow) -> Option<String> {
    let s = app.engine.strategy(&row.strategy)?;
    s.bots.iter().find(|b| *b.id == *row.bot).map(|b| b.account_id.clone())
}

/// When this process started, in Unix ms: rows created before it were left open by an earlier run.
pub fn started_ms() -> i64 {
    static STARTED: OnceLock<i64> = OnceLock::new();
    *STARTED.get_or_init(now_ms)
}

/// The outbox's highest row id when this process started (0 until [`started_with_rows_up_to`] is called).
static EARLIER_RUNS_LAST_ROW: OnceLock<i64> = OnceLock::new();

/// Notes the outbox's highest row id at the start, before this run stores any row: rows up to it were left open
/// by an earlier run (or by servers sharing the database before this one started) whatever their stored time.
/// After a clock step back between the runs, a row of an earlier run can bear a time after this run's start.
pub fn started_with_rows_up_to(last_row_id: i64) {
    started_ms();
    let _ = EARLIER_RUNS_LAST_ROW.set(last_row_id);
}

/// Whether a row was stored before this process started: by its id, which the clock cannot move, or by its time.
fn stored_before_start(row: &OutboxRow, unsure_before: i64) -> bool {
    row.id <= EARLIER_RUNS_LAST_ROW.get().copied().unwrap_or(0) || row.created_ms < unsure_before
}

/// The next backoff after `wait`.
fn backoff(wait: Duration) -> Duration {
    (wait * 2).min(MAX_BACKOFF)
}

/// Attempts at a row with no deadline (cancels, rows of older versions) when a retry is safe.
const ATTEMPTS_WITHOUT_DEADLINE: u32 = 20;
/// How long an entry's row has waited (stored this long before its first attempt) before it is checked against later
/// alerts ([`overtaken`]), as every retry is: a fresh one goes out at once, without the store's read.
const WAITED_MS: i64 = 1_000;
/// Attempts at reading an order back after an uncertain send.
const LOOKUP_ATTEMPTS: u32 = 6;
/// The most pages of a paged order list one lookup reads (a day of 5,000 orders at 100 a page).
const LOOKUP_PAGES: u32 = 50;

/// What a lookup of our order came to.
enum Looked {
    /// The broker has it (its id, when the answer gave one).
    There(Option<String>),
    /// The broker has it and refused it (its reason): the order stands nowhere, as if refused at once.
    Rejected(String),
    /// The broker says it has no such order: sending it is safe.
    NotThere,
    /// The broker cannot tell, or could not be asked.
    Unknown(String),
}

/// How far apart the times of a lookup's windows are: a broker's lookup around a time reads the orders
/// entered from the minute before it to five minutes after (`lookup_request`), so windows four minutes apart
/// overlap and leave no gap.
const LOOKUP_STEP_MS: i64 = 240_000;
/// The longest span of send times a lookup covers (an hour's limit order, and some).
const LOOKUP_SPAN_MS: i64 = 2 * 3_600_000;

/// Waits until the bot's settle time has passed since `last_out_ms`, the last moment a request may have left.
async fn settled_since(bot: &HttpBot, last_out_ms: i64) {
    let settle_ms = i64::try_from(bot.settle.as_millis()).unwrap_or(i64::MAX);
    let wait = last_out_ms.saturating_add(settle_ms).saturating_sub(now_ms());
    if wait > 0 {
        nap(Duration::from_millis(wait.unsigned_abs())).await;
    }
}

/// [`look_up`] for an order that is sent (again) when it is not there, sent at the latest at `window.1`. A broker
/// may still be working on a request whose answer was lost (its client gave up at the timeout, a proxy cut the
/// connection or answered 502 for a backend still at it) and list the order only later: asked at once it
/// answers "not there", and the resend would be a second order. So the broker is given the bot's settle time
/// after the last moment the request may have left before it is asked, and a "not there" is believed only when
/// a second lookup a settle later says the same.
async fn settled_look_up(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    window: (i64, i64),
) -> Looked {
    settled_since(bot, window.1).await;
    // Searched up to the window's end, the last moment it can have been sent (a restart's, a deadline's), not
    // to now: hours after a crash, a span to now outgrew what one lookup reads and the row failed as unknown.
    let span = (window.0, window.1.max(window.0));
    match look_up(app, bot, row, broker, order, span).await {
        Looked::NotThere => {}
        seen => return seen,
    }
    nap(bot.settle).await;
    look_up(app, bot, row, broker, order, span).await
}

/// Reads our order back from the broker by its client order id (or the broker's equivalent), sent at some
/// time from `from` to `to` (Unix ms). Brokers that read orders in a time window are asked around each
/// moment of that span: an order sent long after its alert (its limit order waited for a broker that was
/// down) is entered then, not around the alert, and missing it would send it a second time.
async fn look_up(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    (from, to): (i64, i64),
) -> Looked {
    let Some(account) = account_id(app, row) else {
        return Looked::Unknown(format!("bot {} is no longer in strategy {}", row.bot, row.strategy));
    };
    // Searched at an account edited in since the row was stored (a reload during the settle before the lookup),
    // an order standing at the old account was "not there", and the row failed saying nothing was sent.
    if let Some(moved) = account_moved(app, row, request_kind(row), order, "the lookup", true) {
        return Looked::Unknown(moved);
    }
    let to = to.max(from);
    let same_for_any_time = match (
        broker.lookup_request(&account, &row.client_order_id, from),
        broker.lookup_request(&account, &row.client_order_id, to),
    ) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if to - from > LOOKUP_SPAN_MS && !same_for_any_time {
        return Looked::Unknown(format!(
            "it may have been sent at any time over {} minutes, longer than a lookup covers",
            (to - from) / 60_000
        ));
    }
    let mut asked: Vec<Request> = Vec::new();
    let mut at = from;
    loop {
        let lookup = match broker.lookup_request(&account, &row.client_order_id, at) {
            Ok(l) => l,
            Err(e) => return Looked::Unknown(format!("the order cannot be looked up: {e}")),
        };
        // Brokers that look an order up by its id (or by the day) ask the same for every time: once is enough.
        if !asked.contains(lookup.request()) {
            asked.push(lookup.request().clone());
            match look_up_at(app, bot, row, broker, order, lookup, at).await {
                Looked::NotThere => {}
                seen => return seen,
            }
        }
        if at >= to || same_for_any_time {
            return Looked::NotThere;
        }
        at = (at + LOOKUP_STEP_MS).min(to);
    }
}

/// [`look_up`] in one window: around `placed_ms`.
async fn look_up_at(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    mut lookup: Lookup,
    placed_ms: i64,
) -> Looked {
    // A broker that pages its order list is read page after page until the list's end: ours found on a full page
    // is carried on (`earlier`), since a resend's copy at a broker that takes a repeated id may be on a later one.
    let mut earlier = None;
    'pages: for _ in 0..LOOKUP_PAGES {
        let req = lookup.request().clone();
        let mut wait = BACKOFF;
        let mut last = String::new();
        for attempt in 1..=LOOKUP_ATTEMPTS {
            let ct = req.content_type;
            let body = req.body.to_bytes();
            match send(bot, &row.broker, req.method.as_str(), &req.path, ct, body, &client::Hold::FREE).await {
                Reply::Answered { status: 429, body, .. } => last = too_many(&body),
                // A server error says nothing about the order (the same incident as the send's 5xx, often): asked
                // again, as after a rate limit, rather than failing the row as unknown at the first one.
                Reply::Answered { status: status @ 500.., body, .. } => {
                    let text: String = String::from_utf8_lossy(&body).trim().chars().take(200).collect();
                    last = format!("HTTP {status}: {text}");
                }
                Reply::Answered { status, body, .. } => {
                    let found = broker.find_ours(&lookup, status, &body, &row.client_order_id, order, placed_ms);
                    let found = match found {
                        // Recognised by its terms alone: an order another row placed with the same terms at this
                        // account answers the same, and taking it for ours would leave ours unsent yet done.
                        Found::Found(o) if matches!(lookup, Lookup::Window(_)) => {
                            match twins(app, row, placed_ms, &o).await {
                                Ok(0) => Found::Found(o),
                                Ok(n) => {
                                    return Looked::Unknown(format!(
                                        "the broker keeps no client order id, and the order found by its terms may be \
                                         that of one of {n} other requests with the same terms"
                                    ))
                                }
                                Err(e) => return Looked::Unknown(format!("the outbox could not be read: {e}")),
                            }
                        }
                        other => other,
                    };
                    let next = (200..300).contains(&status).then(|| broker.lookup_next_page(&lookup, &body)).flatten();
                    let found = match after_page(earlier.take(), found, next.is_some()) {
                        PagedLookup::Done(found) => found,
                        PagedLookup::Next(ours) => {
                            earlier = ours;
                            if let Some(next) = next {
                                lookup = next;
                            }
                            continue 'pages;
                        }
                    };
                    return match found {
                        // Taken, then refused (an uncertain send's answer would have said so): reported as the
                        // refusal it is, not as an order accepted and working.
                        Found::Found(o) if o.status == OrderStatus::Rejected => {
                            Looked::Rejected(o.reason.clone().unwrap_or_else(|| format!("status {}", o.broker_status)))
                        }
                        Found::Found(o) => Looked::There(Some(o.order_id.clone()).filter(|i| !i.is_empty())),
                        Found::NotFound => Looked::NotThere,
                        Found::Ambiguous(n) => Looked::Unknown(format!("{n} orders at the broker could be this one")),
                        Found::Unreadable(m) => Looked::Unknown(format!("the lookup's answer cannot tell: {m}")),
                    };
                }
                // A stopped session is final: asking again cannot help.
                Reply::Stopped(e) => return Looked::Unknown(e),
                Reply::NotSent(e) | Reply::Unknown(e) => last = e,
            }
            if attempt < LOOKUP_ATTEMPTS {
                nap(wait).await;
                wait = backoff(wait);
            }
        }
        return Looked::Unknown(format!("the lookup failed: {last}"));
    }
    Looked::Unknown(format!("the broker's order list goes on past {LOOKUP_PAGES} pages"))
}

/// `None` when the bot's lease was lost on the way: the row is left, unsent and unrecorded, to the server
/// that holds the lease now.
async fn http_deliver(
    app: &App,
    lease: &Lease,
    bot: &HttpBot,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    what: &str,
) -> Option<(Outcome, &'static str)> {
    let Some(broker) = BrokerId::from_name(&row.broker) else {
        let m = format!("{what} not sent: the outbox row names an unknown broker {:?}", row.broker);
        return Some(((false, m, None), "failed"));
    };
    let broker = broker.broker();
    let refuses_reuse = broker.accepts_client_order_id();
    // A new order can be read back by its client order id (or its terms): after an uncertain send the truth
    // is looked up instead of guessed.
    let can_look_up = kind == RequestKind::Place
        && account_id(app, row).is_some_and(|a| broker.lookup_request(&a, &row.client_order_id, 0).is_ok());
    // A cancel cannot create an order, so sending it twice cannot double one.
    let resend_safe = refuses_reuse || kind == RequestKind::Cancel || can_look_up;
    let unknown =
        |e: &str| format!("{what}: unknown whether the broker has it: {e}; it is not sent again, check the broker");
    // Rows of a bot created before this time may have been sent by an earlier run (or by a server that stopped).
    let unsure_before = started_ms().max(app.leases.unsure_before(&row.strategy, &row.bot));
    // An earlier run sent it, if at all, after the alert and before its deadline, and before this run took it.
    let earlier_run = (row.created_ms, now_ms().min(row.deadline_ms.unwrap_or(i64::MAX)).min(unsure_before));
    // Stored under a clock that has gone back since: this run's start (or the lease's) no longer tells an earlier
    // attempt from none, and a lookup in a window from the stored time searches the future. Where an attempt may
    // have gone out (the row is `sending`, or the broker refuses a repeated id, so rows are not marked), the order
    // is looked up where the broker finds it by its id whatever the time, and otherwise not sent again: resent, a
    // broker's refusal of the repeat (the buying power the first one used) was taken for the order's.
    let ahead = (kind != RequestKind::Cancel).then(|| stored_ahead(row, now_ms())).flatten();
    let by_id = can_look_up && ahead.is_some() && looks_up_by_id(app, row, broker);
    if let Some(ahead) = ahead {
        if (row.status == "sending" || refuses_reuse || row.retried) && !by_id {
            let m = unknown(&format!(
                "{}, nor whether an earlier attempt reached the broker, which finds orders by their time",
                stored_ahead_message("it", ahead)
            ));
            return Some(((false, m, None), "failed"));
        }
    }
    if row.status == "sending" && !refuses_reuse && kind != RequestKind::Cancel {
        // The server stopped while sending it: the broker is asked.
        if !can_look_up {
            let m = unknown(&format!(
                "the server stopped while sending it, and {} neither refuses a repeated order nor can look it up",
                row.broker
            ));
            return Some(((false, m, None), "failed"));
        }
        // Up to now or its deadline, not to this run's start: a dispatcher of this run that panicked mid-send
        // (restarted by its supervisor) left the row `sending` too, sent after the start. Cut at the start, the
        // span of a row created after it was empty, the order not found, and sent a second time.
        let sent_by = (row.created_ms, now_ms().min(row.deadline_ms.unwrap_or(i64::MAX)));
        match settled_look_up(app, bot, row, broker, order, sent_by).await {
            Looked::There(id) => return Some((found(app, row, kind, order, what, id), "done")),
            Looked::Rejected(why) => return Some((refused(what, &why), "failed")),
            Looked::NotThere => {}
            Looked::Unknown(e) => return Some(((false, unknown(&e), None), "failed")),
        }
    }
    if !refuses_reuse && kind != RequestKind::Cancel {
        // A failed mark stored nothing and sent nothing: it is tried again (a moment's disk-full, a lock held by
        // an operator's sqlite3) while the order is fresh and the lease held, rather than failing an order the
        // sender was answered `processed` for.
        let mut wait = BACKOFF;
        let mut tries = 0;
        while let Err(e) = app.writer.sending(row.id).await {
            tries += 1;
            if !lease.valid() {
                return None;
            }
            if let Some(m) = stale(row, what, now_ms()) {
                return Some(((false, m, None), "expired"));
            }
            if row.deadline_ms.is_none() && tries >= ATTEMPTS_WITHOUT_DEADLINE {
                let m = format!("{what}: not sent, the outbox could not be updated: {e}");
                return Some(((false, m, None), "failed"));
            }
            tracing::warn!(id = row.id, bot = %row.bot, error = %e, "the outbox could not mark the row sending; retrying");
            nap(wait).await;
            wait = backoff(wait);
        }
    }
    let mut wait = BACKOFF;
    let mut attempt = 0;
    // When an earlier attempt that may have reached the broker (its answer was lost or uncertain) was made,
    // unless a lookup has said since that it did not: such an order is never expired blind, and it is looked
    // up around the time it went out. A row left open by an earlier run may have been sent then: a `sending`
    // one was looked up above; at a broker that refuses a repeated id rows are not marked `sending`, so only
    // the row's id tells (or its age): after a clock step back between the runs, an earlier run's row can bear
    // a time after this run's start, and its resend's refusal was believed while its order stood.
    // A row an operator re-queued after it failed had attempts too, in this run or another: it was "unknown"
    // (or refused, or expired) with its first order possibly standing, and a refusal of the resend, or its
    // deadline passing in the queue, called it "refused" or "not sent" while that order stood.
    let retried = refuses_reuse && row.retried;
    let mut sent_from =
        ((refuses_reuse && stored_before_start(row, unsure_before)) || retried).then_some(row.created_ms);
    // When an attempt the broker may have taken last ended: a lookup before a settle after it could miss an
    // order the broker is still working on.
    let mut last_unsure_ms = match sent_from {
        Some(_) if retried => now_ms().min(row.deadline_ms.unwrap_or(i64::MAX)),
        Some(_) => earlier_run.1,
        None => i64::MIN,
    };
    // Stored ahead of this clock at a broker that refuses a repeated id: an earlier attempt may have gone out, and
    // is looked up by its id (the only lookup left above), the settle counted from now rather than the future.
    if refuses_reuse && by_id {
        let now = now_ms();
        sent_from = Some(now);
        last_unsure_ms = now;
    }
    // An attempt of this delivery the broker may have taken, still unsettled ([`Dispatcher::on_wire`]).
    let mut unsure: Option<OnWire<'_>> = None;
    // Once its credentials are ready a request goes out only under the lease, and is cut if it is still in flight
    // when the lease could run out: a send that outlived it could reach the broker after another server took the
    // bot over, looked the order up and sent it.
    // And only within the row's deadline: the deadline is checked before each attempt, and an attempt may then
    // wait seconds for its credentials (a slow token renewal, a 401's renewal and resend), after which a market
    // order would go out into a market that has moved. Not sent, the next attempt finds it past its deadline.
    let may_send = || lease.valid() && (kind == RequestKind::Cancel || stale(row, what, now_ms()).is_none());
    let until = || lease.send_until();
    let hold = client::Hold { may_send: &may_send, until: &until };
    loop {
        attempt += 1;
        // Each attempt may come after seconds of back-off, lookups or a pause of the whole process: past the
        // lease's time another server may have taken the bot over, found the row unsent and sent it itself.
        // Sent from here too, the order would be doubled at a broker that does not refuse a repeated client
        // order id, and any result written here could overwrite the new holder's.
        if !lease.valid() {
            tracing::warn!(id = row.id, bot = %row.bot, attempt, "the bot's lease was lost; the row is left to the server that holds it now");
            if attempt > 1 {
                app.leases.left_unsure(&row.strategy, &row.bot);
            }
            return None;
        }
        // The strategy's account may have been edited during the back-off: the stored request would trade the
        // old account, and a lookup would search the new one (checked before the first attempt in `deliver`).
        if attempt > 1 {
            let maybe_sent = sent_from.is_some() || row.status == "sending";
            if let Some(m) = account_moved(app, row, kind, order, what, maybe_sent) {
                return Some(((false, m, None), "failed"));
            }
            // A cancel in back-off whose alert's other orders passed their deadlines meanwhile made way for nothing
            // ([`made_way_for_nothing`]); unless an attempt may have reached the broker, whose answer to a resend
            // then tells what became of the order.
            if kind == RequestKind::Cancel && !maybe_sent && unsure.is_none() {
                if let Some(m) = made_way_for_nothing(app, row, what).await {
                    return Some(((false, m, None), "failed"));
                }
            }
        }
        if kind != RequestKind::Cancel {
            if let Some(m) = stale(row, what, now_ms()) {
                let Some(from) = sent_from else {
                    return Some(((false, m, None), "expired"));
                };
                // An attempt went out before the clock went back: a lookup in a window from its time searches the
                // future, one by the order's id finds it.
                let ahead = stored_ahead(row, now_ms()).is_some();
                if !can_look_up || (ahead && !looks_up_by_id(app, row, broker)) {
                    return Some((
                        (false, unknown("an attempt may have reached it before the order expired"), None),
                        "failed",
                    ));
                }
                // Believed only when two looks a settle apart agree, as before a resend: a broker slow to list
                // an order it took late would have the row called unsent while the order stands, and the trader
                // would enter again.
                return Some(
                    match settled_look_up(app, bot, row, broker, order, (from, last_unsure_ms.max(from))).await {
                        Looked::There(id) => (found(app, row, kind, order, what, id), "done"),
                        Looked::Rejected(why) => (refused(what, &why), "failed"),
                        Looked::NotThere => ((false, m, None), "expired"),
                        Looked::Unknown(e) => ((false, unknown(&e), None), "failed"),
                    },
                );
            }
        }
        // An entry that waited (a retry, or a row that stood in the queue) may have been overtaken meanwhile by a
        // later alert decided without it: a CLOSE that found nothing to close, a CANCEL no working entry. Sent now, it
        // would open the position the sender had closed. One that may have reached the broker already is looked
        // up, as when it expires: never dropped blind.
        let entry = order.filter(|o| kind == RequestKind::Place && o.intent.is_open());
        if let Some(entry) = entry.filter(|_| attempt > 1 || now_ms() - row.created_ms >= WAITED_MS) {
            match overtaken(app, row, entry).await {
                Ok(None) => {}
                Ok(Some(by)) => {
                    let m = by.reason(what);
                    tracing::warn!(id = row.id, bot = %row.bot, later = by.log_id, "an entry was overtaken by a later alert; not sent");
                    let Some(from) = sent_from else {
                        return Some(((false, m, None), "failed"));
                    };
                    let ahead = stored_ahead(row, now_ms()).is_some();
                    if !can_look_up || (ahead && !looks_up_by_id(app, row, broker)) {
                        let why = "an attempt may have reached it before a later alert overtook it";
                        return Some(((false, unknown(why), None), "failed"));
                    }
                    return Some(
                        match settled_look_up(app, bot, row, broker, order, (from, last_unsure_ms.max(from))).await {
                            Looked::There(id) => (found(app, row, kind, order, what, id), "done"),
                            Looked::Rejected(why) => (refused(what, &why), "failed"),
                            Looked::NotThere => ((false, m, None), "failed"),
                            Looked::Unknown(e) => ((false, unknown(&e), None), "failed"),
                        },
                    );
                }
                // Not sent until it is known: the row waits, and expires past its deadline as any other.
                Err(e) => {
                    tracing::warn!(id = row.id, bot = %row.bot, attempt, error = %e, "checking an entry against later alerts failed; retrying");
                    if row.deadline_ms.is_none() && attempt >= ATTEMPTS_WITHOUT_DEADLINE {
                        return Some(((false, format!("{what} not sent: {e}"), None), "failed"));
                    }
                    nap(wait).await;
                    wait = backoff(wait);
                    continue;
                }
            }
        }
        // Whether the session was stopped before this attempt (the run loop then left the row to its peers already).
        let stopped_before = bot.session.stopped().await.is_some();
        let attempt_ms = now_ms();
        let (ct, body) = (row.content_type.as_deref(), row.body.clone());
        let wire = app.dispatcher.on_wire();
        let res = match send(bot, &row.broker, &row.method, &row.path, ct, body, &hold).await {
            // Too many requests: the broker turned the request away without looking at it, so it is sent
            // again (while fresh), never taken for a refusal of the order.
            Reply::Answered { status: 429, body, .. } => Attempt::NotSent(too_many(&body)),
            Reply::Answered { status, location, body } => {
                Attempt::Answered(broker.read_answer(kind, status, location.as_deref(), &body))
            }
            Reply::NotSent(e) => Attempt::NotSent(e),
            Reply::Unknown(e) => Attempt::Unknown(e),
            // A stopped session (credentials refused for good) is final.
            Reply::Stopped(message) => Attempt::Stopped(message),
        };
        // Counted until the row is settled when the broker may have it; otherwise the request is over.
        let uncertain = matches!(res, Attempt::Unknown(_) | Attempt::Answered(Answer::Uncertain { .. }));
        if uncertain {
            last_unsure_ms = now_ms();
        }
        if uncertain && unsure.is_none() {
            unsure = Some(wire);
        } else {
            drop(wire);
        }
        let more = match row.deadline_ms {
            Some(_) => true,
            None => attempt < ATTEMPTS_WITHOUT_DEADLINE,
        };
        match res {
            Attempt::NotSent(e) if more => {
                tracing::warn!(id = row.id, bot = %row.bot, attempt, error = %e, "broker not reached; retrying");
            }
            Attempt::NotSent(e) => return Some(((false, format!("{what} not delivered: {e}"), None), "failed")),
            // Nothing went out now, and nothing more can (the order cannot be looked up either): worded as what it
            // is, the token endpoint's refusal, not the broker's. Where an earlier attempt may have reached the
            // broker (this run's, or, for a cancel, which is not marked `sending`, an earlier run's), that is unknown.
            Attempt::Stopped(message) => {
                let repeated =
                    sent_from.is_some() || (kind == RequestKind::Cancel && stored_before_start(row, unsure_before));
                if repeated {
                    let m =
                        unknown(&format!("an earlier attempt may have reached it, and the bot is stopped: {message}"));
                    return Some(((false, m, None), "failed"));
                }
                // Met during this very send on a shared database: nothing of the row reached the broker, and a peer
                // whose session is live may send it. It is given back unsent, and the run loop leaves it to the
                // peers ([`LEFT_TO_PEERS`]), failing it here only if none takes it. Failed at once, it was lost
                // though the peer could send it.
                if app.shared.is_some()
                    && !stopped_before
                    && give_back_unsent(app, lease, row, kind, refuses_reuse).await
                {
                    tracing::warn!(id = row.id, bot = %row.bot, "the bot's session stopped as the row was sent; it is given back unsent, left to the other servers");
                    return None;
                }
                return Some(((false, format!("{}{message}", stopped_unsent(what)), None), "failed"));
            }
            // An answer lost, cut or a 5xx after sending: the broker may have the order. Unknown, being
            // checked: never "refused".
            Attempt::Unknown(e) | Attempt::Answered(Answer::Uncertain { message: e }) => {
                tracing::warn!(id = row.id, bot = %row.bot, attempt, error = %e, "unknown whether the broker took it; checking");
                let from = *sent_from.get_or_insert(attempt_ms);
                if can_look_up && !refuses_reuse {
                    match settled_look_up(app, bot, row, broker, order, (from, now_ms())).await {
                        Looked::There(id) => return Some((found(app, row, kind, order, what, id), "done")),
                        Looked::Rejected(why) => return Some((refused(what, &why), "failed")),
                        Looked::NotThere if more => {
                            sent_from = None;
                            unsure = None;
                        }
                        Looked::NotThere => {
                            return Some((
                                (false, format!("{what} not delivered: {e}; the broker has not got it"), None),
                                "failed",
                            ))
                        }
                        Looked::Unknown(why) => {
                            return Some(((false, unknown(&format!("{e}; {why}")), None), "failed"))
                        }
                    }
                } else if !resend_safe || !more {
                    return Some(((false, unknown(&e), None), "failed"));
                }
            }
            // A cancel refused because the order is no longer open (an earlier attempt's cancel that took, its
            // answer lost; a resend after a restart; the order expired): failed on the refusal alone, the close
            // or re-size waiting for it stayed home while nothing protected the position. The order is read back.
            Attempt::Answered(Answer::Refused { message }) if kind == RequestKind::Cancel => {
                // Cancels are not marked `sending`, so a cancel stored before this run may have gone out then.
                let repeated = sent_from.is_some() || stored_before_start(row, unsure_before);
                return Some(refused_cancel(app, bot, row, broker, order, what, &message, repeated).await);
            }
            // An earlier attempt may have placed it: the broker may refuse the repeat on a check of its own (the
            // buying power the first one used, an order no longer open) before its duplicate check, so the
            // refusal alone does not say the order is not there.
            Attempt::Answered(Answer::Refused { message }) if sent_from.is_some() => {
                let repeat = format!("an earlier attempt may have reached it, and the repeat was refused: {message}");
                if !can_look_up {
                    return Some(((false, unknown(&repeat), None), "failed"));
                }
                let from = sent_from.unwrap_or(row.created_ms);
                // The broker may still be working on the attempt whose answer was lost (what its own check on
                // the repeat ran into): asked at once, it lists nothing yet, and the row failed while the order
                // stood. It is given the settle after that attempt, and a second look a settle later.
                return Some(
                    match settled_look_up(app, bot, row, broker, order, (from, last_unsure_ms.max(from))).await {
                        Looked::There(id) => (found(app, row, kind, order, what, id), "done"),
                        Looked::Rejected(why) => (refused(what, &why), "failed"),
                        Looked::NotThere => (refused(what, &message), "failed"),
                        Looked::Unknown(e) => ((false, unknown(&format!("{repeat}; {e}")), None), "failed"),
                    },
                );
            }
            Attempt::Answered(Answer::Refused { message }) => return Some((refused(what, &message), "failed")),
            // A resend after a crash or a timeout: the broker already has this client order id, so the order
            // is there once; its id is read back so that the order can be changed or cancelled later.
            Attempt::Answered(Answer::AlreadyAccepted { message }) => {
                let id = if can_look_up {
                    let from = sent_from.unwrap_or(row.created_ms);
                    match look_up(app, bot, row, broker, order, (from, now_ms())).await {
                        Looked::There(id) => id,
                        // The earlier attempt's order, refused after it was taken.
                        Looked::Rejected(why) => return Some((refused(what, &why), "failed")),
                        Looked::NotThere | Looked::Unknown(_) => None,
                    }
                } else {
                    None
                };
                let shown = id.as_ref().map(|i| format!("; order id {i} read back")).unwrap_or_default();
                let m = format!(
                    "{what} was already accepted by the broker (client order id {}{shown}): {message}",
                    row.client_order_id
                );
                return Some((accepted_saying(app, row, kind, order, id, m), "done"));
            }
            Attempt::Answered(Answer::Accepted { order_id }) => {
                if kind == RequestKind::Cancel {
                    let held = HELD_BEHIND_CANCEL;
                    match cancel_outcome(app, bot, row, broker, order, Reads::BotTimeout).await {
                        // A broker that takes the cancel of an order already out of the market (as done) may still
                        // have had it taken out by another request first.
                        CancelRead::Done | CancelRead::Unreadable => {
                            if let Some(m) = taken_out_before(app, row, order, what).await {
                                return Some(((false, m, None), "failed"));
                            }
                        }
                        CancelRead::Filled(filled) => {
                            let m = format!(
                                "{what}: the broker took the cancel, but the order filled {} before it took effect; \
                                 {held}",
                                filled.normalize()
                            );
                            return Some(((false, m, None), "failed"));
                        }
                        CancelRead::StillWorking => {
                            let m = format!(
                                "{what}: the broker took the cancel, but the order was still working {} s later and \
                                 may yet fill; {held}",
                                CANCEL_CONFIRM.as_secs()
                            );
                            return Some(((false, m, None), "failed"));
                        }
                        CancelRead::Replaced(by) => {
                            return Some(((false, replaced_on(what, &by, held), None), "failed"))
                        }
                        CancelRead::NotConfirmed(why) => {
                            let m = format!(
                                "{what}: the broker took the cancel, but the order could not be read back within {} s \
                                 ({why}), so whether it filled first is not known; {held}",
                                CANCEL_CONFIRM.as_secs()
                            );
                            return Some(((false, m, None), "failed"));
                        }
                    }
                }
                return Some((accepted(app, row, kind, order, what, order_id), "done"));
            }
        }
        nap(wait).await;
        wait = backoff(wait);
    }
}

/// A cancel the broker refused, decided by reading its order back: no longer working with nothing filled since
/// the decision is what the cancel was for (done, and what waits for it goes out); filled, or still working, is
/// a failure that says so; a read that cannot tell keeps the refusal's answer (unknown after an earlier attempt
/// whose answer was lost).
#[allow(clippy::too_many_arguments)]
async fn refused_cancel(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    what: &str,
    message: &str,
    repeated: bool,
) -> (Outcome, &'static str) {
    let held = HELD_BEHIND_CANCEL;
    match cancel_outcome(app, bot, row, broker, order, Reads::BotTimeout).await {
        CancelRead::Done => {
            if let Some(m) = taken_out_before(app, row, order, what).await {
                return ((false, m, None), "failed");
            }
            let m = format!(
                "{what}: the broker refused the cancel ({message}), but the order is no longer working and nothing \
                 filled since the decision: cancelled"
            );
            (accepted_saying(app, row, RequestKind::Cancel, order, None, m), "done")
        }
        CancelRead::Filled(filled) => {
            let m = format!(
                "{what} refused by the broker: {message}; the order filled {} since the decision; {held}",
                filled.normalize()
            );
            ((false, m, None), "failed")
        }
        CancelRead::StillWorking => (refused(what, message), "failed"),
        CancelRead::Replaced(by) => ((false, replaced_on(what, &by, held), None), "failed"),
        CancelRead::NotConfirmed(_) | CancelRead::Unreadable if repeated => {
            let m = format!(
                "{what}: unknown whether the broker has it: an earlier attempt may have reached it, and the repeat \
                 was refused: {message}; it is not sent again, check the broker"
            );
            ((false, m, None), "failed")
        }
        CancelRead::NotConfirmed(_) | CancelRead::Unreadable => (refused(what, message), "failed"),
    }
}

/// What a failed cancel means for the requests that wait for it.
const HELD_BEHIND_CANCEL: &str =
    "what waits for this cancel (a re-size, a close) is not sent, and is left to the trader";

/// Why a cancel whose order was replaced meanwhile is a failure.
fn replaced_on(what: &str, by: &Option<String>, held: &str) -> String {
    let by = by.as_deref().map(|id| format!(" by order {id}")).unwrap_or_default();
    format!("{what}: the order was replaced{by}, which may still be working and was not cancelled; {held}")
}

/// A delivery the broker refused, with its reason.
fn refused(what: &str, reason: &str) -> Outcome {
    (false, format!("{}{reason}", refusal(what)), None)
}

/// How a refused delivery's result begins ([`refused`]); [`never_placed`] reads it back.
fn refusal(what: &str) -> String {
    format!("{what} refused by the broker: ")
}

/// Gives a row whose send met the bot's stopped session back unsent: marked `sending` for this attempt (a broker
/// that does not refuse a repeated id, a new order), it is set back to `pending`, so that the server that sends it
/// next does not take it for one that may have reached the broker. False when that could not be written (within the
/// lease): the row is then failed here as the stop says.
async fn give_back_unsent(app: &App, lease: &Lease, row: &OutboxRow, kind: RequestKind, refuses_reuse: bool) -> bool {
    if refuses_reuse || kind == RequestKind::Cancel {
        return true;
    }
    let mut wait = BACKOFF;
    for _ in 0..3 {
        if !lease.valid() {
            return false;
        }
        match lease.give_back_unsent(&app.writer, row.id).await {
            Ok(()) => return true,
            Err(e) => {
                tracing::warn!(id = row.id, bot = %row.bot, error = %e, "the outbox could not give the row back unsent; retrying");
                nap(wait).await;
                wait = backoff(wait);
            }
        }
    }
    false
}

/// How the result of a delivery not sent for the bot's stopped session begins; [`never_placed`] reads it back.
fn stopped_unsent(what: &str) -> String {
    format!("{what} not sent: the bot is stopped: ")
}

/// How long a cancel's order is read back for before its cancel is taken as it was answered.
const CANCEL_CONFIRM: Duration = Duration::from_secs(3);

/// What reading a cancelled order back came to.
enum CancelRead {
    /// Final, with nothing filled since the decision: the cancel did what it was meant to.
    Done,
    /// Final, with this much filled since the decision.
    Filled(strategy_webhook::decimal::Decimal),
    /// Still working when [`CANCEL_CONFIRM`] ran out: it may yet fill.
    StillWorking,
    /// Replaced by another order (the broker's id of it, when given): that order may still be working, so the
    /// cancel did not take the order out of the market.
    Replaced(Option<String>),
    /// Every read until [`CANCEL_CONFIRM`] ran out failed for a while (rate limit, 5xx, no answer; the last
    /// one's cause): whether the order filled is not known.
    NotConfirmed(String),
    /// The broker cannot read the order back (no such read, a 4xx, an answer not understood): the cancel
    /// stands as answered.
    Unreadable,
}

/// How long each of [`cancel_outcome`]'s reads may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reads {
    /// The bot's own timeout: a cancel this run sent, whose confirmation releases what waits for it.
    BotTimeout,
    /// Cut at the read-back's window: an earlier run's cancel read back at a restart, which must not hold a
    /// delivery's permit past the window at a broker that never answers.
    CutAtWindow,
}

/// Reads a cancelled order back once the cancel was answered, until it is final or [`CANCEL_CONFIRM`] has passed.
/// A broker answers a cancel when it takes the request, not when the order is out of the market (Tastytrade
/// "Cancel Requested", Alpaca `pending_cancel`, Coinbase `CANCEL_QUEUED`): an order that filled meanwhile,
/// released as cancelled, let a re-size's new order or a close sized for the whole position go out beside the
/// fill, doubling the position or opening the other side. `order` is the cancel's order: its quantity is what
/// remained when it was decided; the row's [`size_at_decision`], where marked, is the order's whole size then.
async fn cancel_outcome(
    app: &App,
    bot: &HttpBot,
    row: &OutboxRow,
    broker: &dyn Broker,
    order: Option<&Order>,
    reads: Reads,
) -> CancelRead {
    // Read at an account edited in since, the order is another account's: what filled is not known.
    if let Some(moved) = account_moved(app, row, RequestKind::Cancel, order, "the read-back", true) {
        return CancelRead::NotConfirmed(moved);
    }
    let asked =
        || Some((order?.quantity, broker.order_request(&account_id(app, row)?, row.order_id.as_deref()?).ok()?));
    let Some((remained, req)) = asked() else { return CancelRead::Unreadable };
    let size_then = size_at_decision(row);
    let until = tokio::time::Instant::now() + CANCEL_CONFIRM;
    loop {
        // An earlier run's read-back ([`Reads::CutAtWindow`]): a read still unanswered when the window ends is cut
        // there (its credentials are not: see `client::Hold`). Left to the bot's timeout, a broker that took the
        // connection and never answered held the delivery's permit for that whole timeout past the window, for each
        // row read back. A read begun as the window ends (the wait before it got its permit back late) still has a
        // second: cut at once, it was no read at all. A cancel's own confirmation keeps the bot's timeout: cut, a
        // broker answering a read in 3.5 s that the order was pulled, nothing filled, had the close behind it held
        // back and the position left without its stop.
        let cut_at = until.max(tokio::time::Instant::now() + Duration::from_secs(1));
        let cut_at = (reads == Reads::CutAtWindow).then_some(cut_at);
        let (may_send, cut) = (|| true, || cut_at);
        let hold = client::Hold { may_send: &may_send, until: &cut };
        // A read that fails for a while (a rate limit, a 5xx, no answer) is tried again: taken as the cancel's
        // confirmation, it released the re-size or the close in the busy moments when cancels race fills.
        let busy = match read_order(bot, row, &req, &hold).await {
            OrderRead::Answer(body) => match broker.parse_order(&body) {
                Ok(read) => Ok(read),
                Err(_) => return CancelRead::Unreadable,
            },
            OrderRead::Refused(_) => return CancelRead::Unreadable,
            // Cut by the window's end: the hold's own words name a lease, which a read has none of.
            OrderRead::Unanswered(_) if cut_at.is_some_and(|at| tokio::time::Instant::now() >= at) => {
                Err(format!("no answer within the read-back's {} s", CANCEL_CONFIRM.as_secs()))
            }
            OrderRead::Busy(why) | OrderRead::Unanswered(why) => Err(why),
        };
        // Waits between reads give up the delivery's permit ([`nap`]): a broker down at a restart otherwise held
        // one for the whole window per row read back, while other brokers' orders waited for it.
        let read = match busy {
            Ok(read) => read,
            Err(why) if tokio::time::Instant::now() >= until => return CancelRead::NotConfirmed(why),
            Err(_) => {
                nap(Duration::from_millis(250)).await;
                continue;
            }
        };
        let Some(read) = order.and_then(|o| in_units_of(o, read)) else { return CancelRead::Unreadable };
        // Replaced (by a MODIFY delivered first, or an edit in the broker's own screens): final as an order, but its
        // replacement works on. Taken for done, a refused cancel let the close go out beside it. What filled is
        // told first: an order that filled while its replace was asked for (Tastytrade names the replacement it
        // gave up) is a fill, not a replacement.
        let replaced = read.status == strategy_webhook::model::OrderStatus::Replaced || read.replaced_by.is_some();
        if read.status.is_final() || replaced {
            if read.quantity <= strategy_webhook::decimal::Decimal::ZERO {
                return match filled_since_without_count(&read, remained, size_then) {
                    Some(f) if f > strategy_webhook::decimal::Decimal::ZERO => CancelRead::Filled(f),
                    Some(_) if replaced => CancelRead::Replaced(read.replaced_by.clone()),
                    Some(_) => CancelRead::Done,
                    None => CancelRead::NotConfirmed(format!(
                        "order {} reads back {} with {} filled and no size, so what filled since the cancel was \
                         decided is not known",
                        read.order_id,
                        read.broker_status,
                        read.filled_quantity.normalize()
                    )),
                };
            }
            let Some(remains) = read.quantity.checked_sub(read.filled_quantity) else { return CancelRead::Unreadable };
            // What remained then, moved by as much as the order's size moved since, less what remains now. Unmoved,
            // an edit that keeps the id and changes the size (delivered between the decision and the cancel) read
            // as a fill: a shrink as one that never was, the close held back with the exit gone; a growth hid one,
            // and the close sold what the exit had sold. A row stored before the size was, or a read that states no
            // size, takes the size as unchanged, as before.
            let then = size_then.filter(|_| read.quantity > strategy_webhook::decimal::Decimal::ZERO);
            let moved = read.quantity.checked_sub(then.unwrap_or(read.quantity));
            return match moved.and_then(|m| remained.checked_add(m)).and_then(|r| r.checked_sub(remains)) {
                Some(f) if f > strategy_webhook::decimal::Decimal::ZERO => CancelRead::Filled(f),
                _ if replaced => CancelRead::Replaced(read.replaced_by.clone()),
                _ => CancelRead::Done,
            };
        }
        if tokio::time::Instant::now() >= until {
            return CancelRead::StillWorking;
        }
        nap(Duration::from_millis(250)).await;
    }
}

/// What filled since its cancel was decided of an order whose final read-back `read` states no count of it (a
/// quantity of zero: see [`BrokerOrder::quantity`]): what filled past what had filled by the decision, the order's
/// whole size then (`size_then`) less what remained of it (`remained`). Taken as a count of 0, what remains now was
/// 0 less what filled, and a cancelled order read as all that remained having filled: the close waiting on its
/// cancel was held back with the exit gone. `None` when that cannot be told: something filled, and the size then is
/// not marked (or out of range).
fn filled_since_without_count(
    read: &BrokerOrder,
    remained: strategy_webhook::decimal::Decimal,
    size_then: Option<strategy_webhook::decimal::Decimal>,
) -> Option<strategy_webhook::decimal::Decimal> {
    if read.filled_quantity <= strategy_webhook::decimal::Decimal::ZERO {
        return Some(strategy_webhook::decimal::Decimal::ZERO);
    }
    read.filled_quantity.checked_sub(size_then?.checked_sub(remained)?)
}

/// One read of an order by [`read_order`].
enum OrderRead {
    /// The broker answered 2xx with this body.
    Answer(bytes::Bytes),
    /// Worth asking again in a moment: a rate limit, a 5xx, nothing sent, the session stopped.
    Busy(String),
    /// The request may have reached the broker and no answer came (a timeout, a cut).
    Unanswered(String),
    /// The broker refused the read (any other status): asking again would be refused again.
    Refused(String),
}

/// Sends `req`, a read of one of `row`'s orders, once; the two read-backs (a cancel's, a replace's size) share
/// what counts as busy and what as refused.
async fn read_order(bot: &HttpBot, row: &OutboxRow, req: &Request, hold: &client::Hold<'_>) -> OrderRead {
    let text = |status: u16, body: &[u8]| {
        format!("HTTP {status}: {}", String::from_utf8_lossy(body).chars().take(200).collect::<String>())
    };
    match send(bot, &row.broker, req.method.as_str(), &req.path, None, Vec::new(), hold).await {
        Reply::Answered { status: 200..=299, body, .. } => OrderRead::Answer(body),
        Reply::Answered { status: status @ (429 | 500..), body, .. } => OrderRead::Busy(text(status, &body)),
        Reply::Answered { status, body, .. } => OrderRead::Refused(text(status, &body)),
        Reply::Unknown(e) => OrderRead::Unanswered(e),
        Reply::NotSent(e) | Reply::Stopped(e) => OrderRead::Busy(e),
    }
}

/// A cancelled order's read-back with its quantities counted in the units of `order`, the cancel's order
/// ([`paper::recounted`]): a broker lists an order placed as one unit of 2:2 as 1, which the cancel, built in
/// simplest ratios (two units of 1:1), says 2 for. Compared as listed, a cancel read back cancelled with nothing
/// filled was failed as "filled 1 since the decision", and the close waiting for it held back. `None` on overflow.
fn in_units_of(order: &Order, mut read: BrokerOrder) -> Option<BrokerOrder> {
    if order.asset_class == AssetClass::Option {
        let count = |q| paper::recounted(q, read.legs.iter().map(|l| l.ratio), order.legs.iter().map(|l| l.ratio));
        (read.quantity, read.filled_quantity) = (count(read.quantity)?, count(read.filled_quantity)?);
    }
    Some(read)
}

/// What a 429 answer said, for the logs.
fn too_many(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body).trim().chars().take(200).collect();
    format!("HTTP 429 (too many requests): {text}")
}

/// An order the broker turned out to have (found by lookup, or already accepted): the same as an accepted
/// one, with the id the lookup read.
fn found(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    what: &str,
    id: Option<String>,
) -> Outcome {
    let message = format!("{}, found at the broker after an uncertain send", accepted_words(what, id.as_deref()));
    accepted_saying(app, row, kind, order, id, message)
}

/// How an accepted request's result begins, with the broker's id of its order when known.
fn accepted_words(what: &str, id: Option<&str>) -> String {
    format!("{what} accepted by the broker{}", id.map(|i| format!(" (order id {i})")).unwrap_or_default())
}

/// An accepted request: the bot's working orders follow it (a limit order rests under the broker's id, and so does
/// one standing in for an order of its type its cancel pulled ([`stands_in_for_pulled`]); a replace changes one, a
/// cancel removes one).
fn accepted(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    what: &str,
    id: Option<String>,
) -> Outcome {
    let message = accepted_words(what, id.as_deref());
    accepted_saying(app, row, kind, order, id, message)
}

/// [`accepted`], its result said in `message`. A request taken for an account or broker the bot no longer trades
/// ([`taken_elsewhere`]) leaves the bot's state alone and is done all the same (the broker has it), reported as a
/// failure: an ERROR log row and the trader's failure notice, for the operator to deal with the order there.
fn accepted_saying(
    app: &App,
    row: &OutboxRow,
    kind: RequestKind,
    order: Option<&Order>,
    id: Option<String>,
    message: String,
) -> Outcome {
    // Checked once the answer is back, not only before the send: a reload may land while it is on its way.
    if let Some(elsewhere) = taken_elsewhere(app, row, kind, order, id.as_deref()) {
        tracing::error!(id = row.id, strategy = %row.strategy, bot = %row.bot, path = %row.path,
            order_id = id.as_deref().unwrap_or_default(),
            "the broker took a request for an account or broker its bot no longer trades; its state is left alone");
        return (false, format!("{message}; {elsewhere}"), None);
    }
    let named = order.map(|o| in_strategy_names(app, row, o));
    let apply = |state: &mut BotState| match (kind, named.as_deref()) {
        (RequestKind::Place, Some(o)) if o.order_type == OrderType::Limit || stands_in_for_pulled(state, row, o) => {
            match &id {
                Some(id) => {
                    state.rest_after(id.clone(), o, row.after.as_deref(), stands_in(row));
                    true
                }
                None => false,
            }
        }
        (RequestKind::Replace, Some(o)) => {
            let old = row.order_id.as_deref().unwrap_or_default();
            // A broker that cancels and replaces answers the new order; follow its id.
            let new = if row.keeps_order_id == Some(false) { id.clone() } else { None };
            state.replaced(old, new, o)
        }
        (RequestKind::Cancel, _) => {
            state.cancelled_by(row.order_id.as_deref().unwrap_or_default(), &row.client_order_id, named.as_deref())
        }
        _ => false,
    };
    (true, message, set_state(app, row, apply))
}

/// Whether an accepted place of another type than limit is recorded as working all the same: it stands in for a
/// working order of its own type that the cancel it waited for pulled (a re-size of a market entry queued before the
/// open). Unrecorded, it was no order's replacement, and a CANCEL decided during the re-size reached the pulled order,
/// was refused, read it back cancelled and was marked done, while the new order filled at the open. Any other market
/// order is left to the sync, as before; this one the sync drops too once it has filled.
fn stands_in_for_pulled(state: &BotState, row: &OutboxRow, order: &Order) -> bool {
    let Some(after) = row.after.as_deref() else { return false };
    stands_in(row) == Some(true)
        && state.pulled.iter().any(|p| {
            // The type as the engine reads the book (`MKT` set through the admin API is a market order).
            p.by == after && p.stood_in.is_none() && OrderType::from_word(&p.order.order_type) == Some(order.order_type)
        })
}

/// Applies a delivery's change to the bot's state and sets it (counted as committing, [`App::set_bot_state_committing`]),
/// only over the state it was applied to: an operator's `PUT …/state` (or a sync's read) landing between the read
/// and the set on another thread was overwritten, answered 200 and lost (a position closed by hand back in the
/// book, and the next CLOSE selling shares no longer held). Applied again to the newer state. The state set, or
/// `None` when the change changed nothing.
fn set_state(app: &App, row: &OutboxRow, apply: impl Fn(&mut BotState) -> bool) -> Option<BotState> {
    // A state a delivery made from none (a bot's first orders before any read of its account) is stamped with where
    // the bot trades: unstamped, it passed for a state stored by an older version, and after the bot's `account_id`
    // was edited with the server stopped, its order ids were cancelled, changed or waited for at the new account.
    let apply = |state: &mut BotState| {
        let changed = apply(state);
        if changed && state.source.is_none() {
            state.source = app.state_source(&row.strategy, &row.bot);
        }
        changed
    };
    for _ in 0..STATE_TRIES {
        let before = app.bot_state(&row.strategy, &row.bot);
        let mut state = before.clone();
        if !apply(&mut state) {
            return None;
        }
        if app.replace_bot_state_committing(&row.strategy, &row.bot, &before, state.clone()) {
            return Some(state);
        }
    }
    // Changing all the while (or refused for another account: a reload under way): set as it was before the check.
    let mut state = app.bot_state(&row.strategy, &row.bot);
    if !apply(&mut state) {
        return None;
    }
    app.set_bot_state_committing(&row.strategy, &row.bot, state.clone());
    Some(state)
}

/// How often [`set_state`] applies a change again to a state changed meanwhile.
const STATE_TRIES: usize = 8;

/// One request to a bot's broker (`broker` names it for the metrics), with its session's credentials: a 401 renews
/// them and is sent once more (the broker did not take it).
async fn send(
    bot: &HttpBot,
    broker: &str,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
    hold: &client::Hold<'_>,
) -> Reply {
    crate::metrics::broker_call(broker, client::send_authorized(bot, method, path, content_type, body, hold)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reversal's new side (its own alert `[CLOSE SHORT, OPEN LONG]` on AAPL) waiting in the outbox, while another
    /// alert of the strategy (on MSFT) was received in the same millisecond: its own alert's CLOSE SHORT was taken
    /// for a later alert that overtook it, and the new side was never sent (the close went, the position was flat).
    /// Its own alert never counts; a `cancel: true` entry's own CANCEL neither.
    #[test]
    fn a_reversals_new_side_is_not_overtaken_by_its_own_close_beside_another_alert_of_its_millisecond() {
        use crate::store::DecidedAlert;
        use strategy_webhook::model::{Direction, InstrumentKey};
        let aapl = InstrumentKey::new("AAPL", AssetClass::Equity);
        let own = DecidedAlert {
            log_id: 1,
            last_log_id: 1,
            ts_ms: 1000,
            alerts: serde_json::json!([
                { "action": "CLOSE", "instrument": "AAPL", "direction": "short" },
                { "action": "OPEN", "instrument": "AAPL", "direction": "long" }
            ])
            .to_string(),
        };
        let other = DecidedAlert {
            log_id: 2,
            last_log_id: 2,
            ts_ms: 1000,
            alerts: serde_json::json!([{ "action": "OPEN", "instrument": "MSFT", "direction": "long" }]).to_string(),
        };
        // Alone in its millisecond, its own alert does not overtake it.
        assert_eq!(
            overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), std::slice::from_ref(&own)),
            None
        );
        // Beside an alert on another instrument, nothing later on AAPL was decided either.
        let got =
            overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), &[own.clone(), other.clone()]);
        assert_eq!(got, None, "the reversal's new side was overtaken by its own alert's CLOSE SHORT");
        // Same with `cancel: true` on an entry: its own CANCEL.
        let own_cancel = DecidedAlert {
            alerts: serde_json::json!([
                { "action": "CANCEL", "instrument": "AAPL", "direction": "long" },
                { "action": "OPEN", "instrument": "AAPL", "direction": "long" }
            ])
            .to_string(),
            ..own
        };
        let got = overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), &[own_cancel, other]);
        assert_eq!(got, None, "a `cancel: true` entry was overtaken by its own alert's CANCEL");
    }

    /// An entry's own alert whose first log rows the strategy's log cap deleted is still its own while alone in its
    /// millisecond (its `alert_log` spanned by no decided alert any more); beside another alert of that millisecond it
    /// is not known, and its own CANCEL overtakes it (not sent, and told, rather than sent after a CANCEL).
    #[test]
    fn an_entrys_own_alert_cut_by_the_log_cap_is_known_while_alone_in_its_millisecond() {
        use crate::store::DecidedAlert;
        use strategy_webhook::model::{Direction, InstrumentKey};
        let aapl = InstrumentKey::new("AAPL", AssetClass::Equity);
        let own = DecidedAlert {
            log_id: 3,
            last_log_id: 4,
            ts_ms: 1000,
            alerts: serde_json::json!([
                { "action": "CANCEL", "instrument": "AAPL", "direction": "long" },
                { "action": "OPEN", "instrument": "AAPL", "direction": "long" }
            ])
            .to_string(),
        };
        let judge = |decided: &[DecidedAlert]| {
            overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(2), decided).map(|o| o.log_id)
        };
        assert_eq!(judge(std::slice::from_ref(&own)), None, "its own alert, its first rows capped");
        let spanned = DecidedAlert { log_id: 2, ..own.clone() };
        let other = DecidedAlert {
            log_id: 5,
            last_log_id: 5,
            ts_ms: 1000,
            alerts: serde_json::json!([{ "action": "OPEN", "instrument": "MSFT", "direction": "long" }]).to_string(),
        };
        assert_eq!(judge(&[spanned, other.clone()]), None, "its own alert, whole, beside another");
        assert_eq!(judge(&[own, other]), Some(3), "its own alert cut, beside another: not known");
    }

    /// An entry on BTC/USD waiting in the outbox; a later CLOSE LONG on BTC/USDC (the same coin, which the core closes
    /// as one holding and whose CLOSE pulls a working market entry on BTC/USD, `close_pulls`) is decided without it.
    /// Taken for another instrument (keys compared exactly), it did not overtake: the entry went after the close and
    /// bought the coin the sender had just sold. It overtakes.
    #[test]
    fn a_close_of_the_coin_on_another_pair_overtakes_a_waiting_entry() {
        use crate::store::DecidedAlert;
        use strategy_webhook::model::{Direction, InstrumentKey};
        let btc_usd = InstrumentKey::new("BTC/USD", AssetClass::Crypto);
        let decided = [
            DecidedAlert {
                log_id: 1,
                last_log_id: 1,
                ts_ms: 1000,
                alerts: serde_json::json!([{ "action": "OPEN", "instrument": "BTCUSD", "direction": "long" }])
                    .to_string(),
            },
            DecidedAlert {
                log_id: 2,
                last_log_id: 2,
                ts_ms: 2000,
                alerts: serde_json::json!([{ "action": "CLOSE", "instrument": "BTCUSDC", "direction": "long" }])
                    .to_string(),
            },
        ];
        let got = overtaking(None, &btc_usd, AssetClass::Crypto, Direction::Long, 1000, Some(1), &decided);
        assert_eq!(
            got.map(|o| o.log_id),
            Some(2),
            "a CLOSE of the coin on BTC/USDC did not overtake the BTC/USD entry"
        );
    }

    /// Only what acts on the entry's side overtakes it: a later CLOSE, CANCEL or MODIFY of its direction (or naming
    /// none), or an OPEN of the other (a reversal). A CLOSE, CANCEL or MODIFY of the other side leaves it (taken for
    /// an overtaker, a short's exit lost a long entry the sender still wanted); so does an add. A row of an older
    /// version, its own alert not known, counts an alert in its own millisecond beside another.
    #[test]
    fn only_an_alert_on_the_entrys_side_or_a_reversal_overtakes_it() {
        use crate::store::DecidedAlert;
        use strategy_webhook::model::{Direction, InstrumentKey};
        let aapl = InstrumentKey::new("AAPL", AssetClass::Equity);
        let own = DecidedAlert {
            log_id: 1,
            last_log_id: 1,
            ts_ms: 1000,
            alerts: serde_json::json!([{ "action": "OPEN", "instrument": "AAPL", "direction": "long" }]).to_string(),
        };
        let judge = |action: &str, direction: Option<&str>| {
            let later = DecidedAlert {
                log_id: 5,
                last_log_id: 5,
                ts_ms: 2000,
                alerts: serde_json::json!([{ "action": action, "instrument": "AAPL", "direction": direction }])
                    .to_string(),
            };
            overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), &[own.clone(), later]).is_some()
        };
        for (action, direction, overtakes) in [
            ("CLOSE", Some("long"), true),
            ("CANCEL", Some("long"), true),
            ("MODIFY", Some("long"), true),
            ("CLOSE", None, true),
            ("CANCEL", None, true),
            ("MODIFY", None, true),
            ("OPEN", Some("short"), true),
            ("CLOSE", Some("short"), false),
            ("CANCEL", Some("short"), false),
            ("MODIFY", Some("short"), false),
            ("OPEN", Some("long"), false),
        ] {
            assert_eq!(judge(action, direction), overtakes, "{action} {direction:?}");
        }
        // A short's exit in the entry's own millisecond, the entry's alert known: not an overtaker.
        let beside = DecidedAlert {
            log_id: 2,
            last_log_id: 2,
            ts_ms: 1000,
            alerts: serde_json::json!([{ "action": "CLOSE", "instrument": "AAPL", "direction": "short" }]).to_string(),
        };
        let both = [own.clone(), beside];
        assert_eq!(overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), &both), None);
        // Its own alert not known (a row of an older version): an alert beside it in its millisecond counts, a
        // `cancel: true` entry's own CANCEL among them (which of them came first is not known).
        let cancel_first = DecidedAlert {
            alerts: serde_json::json!([
                { "action": "CANCEL", "instrument": "AAPL", "direction": "long" },
                { "action": "OPEN", "instrument": "AAPL", "direction": "long" }
            ])
            .to_string(),
            ..own.clone()
        };
        let other = DecidedAlert { log_id: 2, last_log_id: 2, ..own };
        let got =
            overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, None, &[cancel_first.clone(), other]);
        assert_eq!(got.map(|o| o.log_id), Some(1));
        assert_eq!(overtaking(None, &aapl, AssetClass::Equity, Direction::Long, 1000, None, &[cancel_first]), None);
    }

    /// An entry waiting in the outbox is overtaken by a later decided alert on its instrument that is anything but an
    /// OPEN of its own direction; its own alert, earlier ones, other instruments and adds are not; action words are
    /// read by the strategy's rules, or beside `prevMarketPosition` by the side held before, and one that cannot be
    /// read overtakes.
    #[test]
    fn only_a_later_alert_on_the_instrument_other_than_an_add_overtakes_an_entry() {
        use crate::store::DecidedAlert;
        use strategy_webhook::model::{Direction, InstrumentKey};
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["rules"] = serde_json::json!({ "buy": "open_long", "sell": "close_long" });
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let aapl = InstrumentKey::new("AAPL", AssetClass::Equity);
        let at = |ts_ms, log_id, alerts: serde_json::Value| DecidedAlert {
            log_id,
            last_log_id: log_id,
            ts_ms,
            alerts: alerts.to_string(),
        };
        let alert = |action: &str, instrument: &str, direction: Option<&str>| serde_json::json!({ "action": action, "instrument": instrument, "direction": direction });
        let own = at(1000, 1, serde_json::json!([alert("OPEN", "AAPL", Some("LONG"))]));
        let judge = |strategy: Option<&strategy_webhook::Strategy>, later: Vec<DecidedAlert>| {
            let decided: Vec<DecidedAlert> = std::iter::once(own.clone()).chain(later).collect();
            overtaking(strategy, &aapl, AssetClass::Equity, Direction::Long, 1000, Some(1), &decided)
                .map(|o| (o.log_id, o.action))
        };
        let one = |ts, a| vec![at(ts, 7, serde_json::json!([a]))];
        assert_eq!(judge(Some(&s), vec![]), None, "its own alert alone");
        assert_eq!(judge(Some(&s), one(2000, alert("CLOSE", "AAPL", Some("LONG")))), Some((7, "CLOSE LONG".into())));
        assert_eq!(judge(Some(&s), one(2000, alert("CANCEL", "AAPL", None))), Some((7, "CANCEL".into())));
        assert_eq!(judge(Some(&s), one(2000, alert("MODIFY", "aapl", Some("LONG")))), Some((7, "MODIFY LONG".into())));
        assert_eq!(judge(Some(&s), one(2000, alert("OPEN", "AAPL", Some("SHORT")))), Some((7, "OPEN SHORT".into())));
        assert_eq!(judge(Some(&s), one(2000, alert("OPEN", "AAPL", Some("LONG")))), None, "an add");
        assert_eq!(judge(Some(&s), one(2000, alert("CLOSE", "MSFT", Some("LONG")))), None, "another instrument");
        // Earlier and later by log rows, whatever the time the deciding server's clock stamped.
        let close = || serde_json::json!([alert("CLOSE", "AAPL", Some("LONG"))]);
        assert_eq!(judge(Some(&s), vec![at(500, 0, close())]), None, "an earlier alert");
        assert_eq!(judge(Some(&s), vec![at(1300, 0, close())]), None, "an earlier alert from a server ahead");
        assert_eq!(judge(Some(&s), one(500, close()[0].clone())), Some((7, "CLOSE LONG".into())), "a server behind");
        // In its own millisecond beside another alert: which came first is not known, so it counts.
        assert_eq!(judge(Some(&s), one(1000, alert("CLOSE", "AAPL", None))), Some((7, "CLOSE".into())));
        // A batch: the alert on its instrument counts.
        let batch = serde_json::json!([alert("OPEN", "MSFT", Some("LONG")), alert("CLOSE", "AAPL", Some("LONG"))]);
        assert_eq!(judge(Some(&s), vec![at(2000, 9, batch)]), Some((9, "CLOSE LONG".into())));
        // Words, by the rules.
        assert_eq!(judge(Some(&s), one(2000, alert("buy", "AAPL", None))), None, "buy opens long");
        assert_eq!(judge(Some(&s), one(2000, alert("sell", "AAPL", None))), Some((7, "sell".into())));
        assert_eq!(judge(Some(&s), one(2000, alert("exit", "AAPL", None))), Some((7, "exit".into())), "no rule");
        assert_eq!(judge(None, one(2000, alert("buy", "AAPL", None))), Some((7, "buy".into())), "no strategy");
        // Beside `prevMarketPosition`, by the side held before.
        let mut from_long = alert("buy", "AAPL", None);
        from_long["prevMarketPosition"] = "long".into();
        assert_eq!(judge(None, one(2000, from_long)), None, "a buy from long adds");
        let mut from_short = alert("buy", "AAPL", None);
        from_short["prevMarketPosition"] = "short".into();
        assert_eq!(judge(Some(&s), one(2000, from_short)), Some((7, "buy".into())), "may be a cover");
        let m = Overtaker { log_id: 17, action: "CLOSE LONG".into() }.reason("order for bot b");
        assert!(m.contains("(log row 17, CLOSE LONG) was decided while it waited to go") && !m.contains("  "), "{m}");
    }

    fn row(meaning: Option<&str>) -> OutboxRow {
        OutboxRow {
            broker: "any".into(),
            client_order_id: "swh-1".into(),
            meaning: meaning.map(str::to_owned),
            target: None,
            ..OutboxRow::sample(7, "place", "pending", 0)
        }
    }

    /// A paper row holding `order` (the Outcome's order JSON), or no order at all.
    fn paper_row(kind: &str, order_id: Option<&str>, order: Option<&str>, deadline_ms: Option<i64>) -> OutboxRow {
        let mut r = row(order);
        r.bot = "p".into();
        r.kind = kind.into();
        r.order_id = order_id.map(str::to_owned);
        r.created_ms = now_ms();
        r.deadline_ms = deadline_ms;
        r.target = Some(crate::bots::PAPER_TARGET.into());
        r
    }

    /// An embedded store in a directory of its own, for a test that runs the dispatchers; the test removes the
    /// directory at its end.
    fn temp_store(name: &str) -> (std::path::PathBuf, crate::store::Store) {
        use crate::store::{RowCaps, Store, Sync};
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("swh-dispatch-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Store::open_with_caps(&dir.join("t.db"), Sync::Normal, RowCaps::default()).unwrap();
        (dir, store)
    }

    /// A broker on loopback that refuses every order it is sent (a 400 every broker reads as a refusal) and
    /// counts them: its port and the count.
    async fn refusing_broker() -> (u16, Arc<AtomicUsize>) {
        use tokio::io::AsyncWriteExt;
        let broker = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = broker.local_addr().unwrap().port();
        let orders = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&orders);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = broker.accept().await {
                let counted = Arc::clone(&counted);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while read_request(&mut conn, &mut got).await {
                        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let body = r#"{"message":"the test broker refuses every order"}"#;
                        let answer = format!(
                            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, orders)
    }

    /// Reads one HTTP request (head and Content-Length body) off `conn`, keeping what follows it in `got`; false
    /// when the connection ends first.
    async fn read_request(conn: &mut tokio::net::TcpStream, got: &mut Vec<u8>) -> bool {
        next_request(conn, got).await.is_some()
    }

    /// [`read_request`] giving the request's first line (`METHOD PATH HTTP/1.1`) and body.
    async fn next_request(conn: &mut tokio::net::TcpStream, got: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 8192];
        loop {
            let text = String::from_utf8_lossy(got).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
                    .and_then(|v| v.parse::<usize>().ok())
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    let first = text.lines().next().unwrap_or_default().to_owned();
                    let body = got[end + 4..end + 4 + length].to_vec();
                    got.drain(..end + 4 + length);
                    return Some((first, body));
                }
            }
            match conn.read(&mut buf).await {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => return None,
            }
        }
    }

    /// An App on `store` with no strategy and the bots of bots file `file`.
    /// Puts `book` where a bot's book lives twice: in the engine's strategy, which decisions read, and in the bot's
    /// state, which deliveries read (the strategy's first bot).
    fn hold_book(app: &App, s: &strategy_webhook::Strategy, book: BotState) {
        let mut live = s.clone();
        (live.bots[0].positions, live.bots[0].working_orders) = book.to_core().unwrap();
        let (strategy, bot) = (live.id.to_string(), live.bots[0].id.to_string());
        app.engine.upsert(live).unwrap();
        app.set_bot_state(&strategy, &bot, book);
    }

    fn app_with_bots(dir: &std::path::Path, store: &crate::store::Store, file: &str) -> Arc<App> {
        let bots = crate::bots::Bots::from_json(file.as_bytes(), dir).unwrap();
        let empty = (HashMap::new(), HashMap::new());
        let app = App::new(
            strategy_webhook::Engine::new(),
            store.writer(),
            store.reader(),
            empty,
            "https://x".into(),
            "t".into(),
        );
        Arc::new(app.with_bots(bots))
    }

    /// A pure CANCEL decided against an order replaced since is sent to the replacement; the cancel half of a
    /// re-size (at a broker whose change cannot carry a size: a cancel, then a new order built from the old order's
    /// price) is not: pulling the replacement put the price an earlier MODIFY had set back.
    /// A bot at a broker whose change cannot carry a size (a re-size is a cancel and a new order) and that replaces
    /// under a new id, holding a limit entry 1001 (AAPL long, 10 at 150) in the engine and in its state, and
    /// `bodies` decided against it one after the other and stored: the app, the state, the bot's rows.
    async fn re_size_fixture(
        name: &str,
        bodies: [&str; 2],
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>, BotState, Vec<OutboxRow>) {
        re_size_fixture_at(name, bodies, 9, OrderType::Limit).await
    }

    /// [`re_size_fixture`] with the broker at loopback `port` and entry 1001 of `order_type` (a market one has no
    /// price: queued before the open).
    async fn re_size_fixture_at(
        name: &str,
        bodies: [&str; 2],
        port: u16,
        order_type: OrderType,
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>, BotState, Vec<OutboxRow>) {
        use crate::store::Mark;
        let (dir, store) = temp_store(name);
        let file = format!(r#"{{"tt": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let broker = cancel_and_place_broker();
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["bots"] = serde_json::json!([{"id": "tt", "broker": broker.as_str(), "account_id": "5WT00001",
                                        "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let entry = crate::paper::OrderRec {
            id: "1001".into(),
            instrument: "AAPL".into(),
            direction: "long".into(),
            intent: "entry".into(),
            order_type: order_type.as_str().into(),
            price: (order_type == OrderType::Limit).then(|| "150".parse().unwrap()),
            quantity: "10".parse().unwrap(),
            size_known: true,
            notional: None,
            filled: Default::default(),
            duration: "day".into(),
            state: "open".into(),
            legs: Vec::new(),
        };
        let before = BotState { working_orders: vec![entry], ..Default::default() };
        hold_book(&app, &s, before.clone());
        let token = v["token_hash"].as_str().unwrap().to_owned();
        let mut stored = Vec::new();
        for (n, body) in bodies.into_iter().enumerate() {
            let at = now_ms() + n as i64;
            let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
            let rows = app.outbox_rows("demo-equities", &mut out, at);
            let mark = Mark { strategy: "demo-equities".into(), ts_ms: at, key: None };
            app.writer.outbox(mark, rows, None).await.unwrap();
            stored = app.reader.open_rows("demo-equities", "tt", 10).unwrap();
        }
        (dir, store, app, before, stored)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_cancel_nothing_waits_for_is_aimed_at_the_replacement() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
        ];
        // Both decided against 1001 at 150, before an earlier price MODIFY was delivered.
        let (dir, store, app, before, stored) = re_size_fixture("reaim", bodies).await;
        let cancels: Vec<&OutboxRow> = stored.iter().filter(|r| r.kind == "cancel").collect();
        assert_eq!((stored.len(), cancels.len()), (3, 2), "{stored:?}");
        // The earlier MODIFY is delivered now: 1001 replaced by 1002 at 151.
        let mut after = before.clone();
        let mut repriced = stored_order(cancels[0]).unwrap();
        repriced.limit_price = Some("151".parse().unwrap());
        assert!(after.replaced("1001", Some("1002".into()), &repriced));
        app.set_bot_state("demo-equities", "tt", after);
        assert!(
            reaimed(&app, cancels[0], stored_order(cancels[0]).as_ref()).await.is_none(),
            "the re-size's cancel: its new order waits for it, built at 150"
        );
        let (aimed, now_cancelled) =
            reaimed(&app, cancels[1], stored_order(cancels[1]).as_ref()).await.expect("the CANCEL");
        assert_eq!(aimed.order_id.as_deref(), Some("1002"));
        assert_eq!(now_cancelled.quantity, 10.into(), "the replacement's whole size");
        // The replacement filled 3 of 10 since (as a sync records it: 7 remain): every fill of it came after the
        // cancel was decided, so the read-back is measured against its whole size, not what remains.
        let mut filled = app.bot_state("demo-equities", "tt");
        let rec = filled.working_orders.iter_mut().find(|o| o.id == "1002").expect("the replacement");
        (rec.quantity, rec.filled) = (7.into(), 3.into());
        app.set_bot_state("demo-equities", "tt", filled);
        let (_, now_cancelled) = reaimed(&app, cancels[1], stored_order(cancels[1]).as_ref()).await.unwrap();
        assert_eq!(now_cancelled.quantity, 10.into());
        assert!(aimed.path.contains("1002") && !aimed.path.contains("1001"), "{}", aimed.path);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The pull before a `cancel: true` entry, decided against 1001 before a MODIFY replaced it (1002 at 151): the
    /// entry was marked as standing in (for the state's note) and so taken for a re-size's new order, whose cancel is
    /// never re-aimed; the pull went to 1001, was refused, the entry at 152 was held back, and 1002 kept working.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_first_entrys_pull_is_aimed_at_the_replacement() {
        cancel_first_pull_after_a_modify("cancel-first-reaim", false).await;
    }

    /// The same with rows stored by the version before the re-size mark, which marked the entry `stands_in` only:
    /// read as a re-size's, the pull was not re-aimed. Judged by its terms, it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_first_entrys_pull_stored_before_the_re_size_mark_is_aimed_at_the_replacement() {
        cancel_first_pull_after_a_modify("legacy-cancel-first-reaim", true).await;
    }

    /// A MODIFY of entry 1001 (to 151) and an OPEN with `cancel: true` (at 152) decided against it, the MODIFY then
    /// delivered (1001 replaced by 1002): the OPEN's pull of 1001 is aimed at 1002. `legacy`: its rows as the version
    /// before the re-size mark stored them (`stands_in` only).
    async fn cancel_first_pull_after_a_modify(name: &str, legacy: bool) {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","price":151}"#,
            r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":152,"cancel":true}"#,
        ];
        let (dir, store, app, before, stored) = re_size_fixture(name, bodies).await;
        if legacy {
            rusqlite::Connection::open(dir.join("t.db"))
                .unwrap()
                .execute("UPDATE outbox SET meaning = replace(meaning, ',\"re_size\":false', '')", [])
                .unwrap();
        }
        let cancel = stored.iter().find(|r| r.kind == "cancel").expect("the OPEN's pull of 1001");
        let rows = app.reader.open_rows("demo-equities", "tt", 10).unwrap();
        let entry = rows.into_iter().find(|r| r.kind == "place").expect("the new entry");
        assert_eq!(entry.after.as_deref(), Some(cancel.client_order_id.as_str()));
        let marks = if legacy { (None, Some(true)) } else { (Some(false), Some(true)) };
        assert_eq!((re_size(&entry), stands_in(&entry)), marks);
        let mut after = before.clone();
        let mut repriced = stored_order(cancel).unwrap();
        repriced.limit_price = Some("151".parse().unwrap());
        assert!(after.replaced("1001", Some("1002".into()), &repriced));
        app.set_bot_state("demo-equities", "tt", after);
        let aimed = reaimed(&app, cancel, stored_order(cancel).as_ref()).await;
        assert_eq!(aimed.as_ref().and_then(|(r, _)| r.order_id.as_deref()), Some("1002"));
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A sync that read the re-size's pulled order back cancelled before the dispatcher recorded the cancel (during
    /// the cancel's 3 s read-back, or at a restart after the broker took it) dropped it with no note: the new order
    /// was then noted as nobody's replacement, and the CANCEL decided against the old order went to it, was marked
    /// done, and the re-sized entry kept working.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sync_between_a_re_size_cancel_and_its_record_keeps_the_stand_in() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20,"price":149}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
        ];
        let (dir, store, app, before, stored) = re_size_fixture("reaim-sync", bodies).await;
        let cancels: Vec<&OutboxRow> = stored.iter().filter(|r| r.kind == "cancel").collect();
        let place = stored.iter().find(|r| r.kind == "place").expect("the re-size's new order");
        assert_eq!((stored.len(), cancels.len()), (3, 2), "{stored:?}");
        // The broker took the re-size's cancel of 1001. Before the dispatcher records it, a sync reads 1001 back
        // cancelled and drops it from the working orders (as sync_now does with an order read back final).
        let mut synced = before.clone();
        synced.working_orders.clear();
        app.set_bot_state("demo-equities", "tt", synced);
        // The dispatcher records the cancel, then the new order of 20 accepted as 1002.
        let (ok, _, _) = accepted(&app, cancels[0], RequestKind::Cancel, stored_order(cancels[0]).as_ref(), "c", None);
        assert!(ok);
        let (ok, _, _) =
            accepted(&app, place, RequestKind::Place, stored_order(place).as_ref(), "p", Some("1002".into()));
        assert!(ok);
        let st = app.bot_state("demo-equities", "tt");
        assert!(st.working_orders.iter().any(|o| o.id == "1002"), "{st:?}");
        // The CANCEL decided against 1001 must pull 1002.
        let aimed = reaimed(&app, cancels[1], stored_order(cancels[1]).as_ref()).await;
        assert_eq!(
            aimed.as_ref().and_then(|(r, _)| r.order_id.as_deref()),
            Some("1002"),
            "the CANCEL goes to the cancelled 1001 and the re-sized entry 1002 keeps working; state {st:?}"
        );
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Each order a [`re_sizing_broker`] holds: its size and its status (`Live`, `Cancelled`, `Filled`).
    type Book = Arc<Mutex<HashMap<String, (u64, &'static str)>>>;

    /// A broker on loopback answering a re-size's requests as Tastytrade does: the cancel of a working order is taken
    /// (200), that of an order no longer working refused (422, not cancellable); an order read back is Cancelled
    /// once cancelled (Live before), nothing filled unless its book says Filled, at the size it was placed at (1001:
    /// 10); new orders are 1002, 1003, ..., the first `refused_places` refused (422, insufficient buying power); its
    /// orders and the entries that filled are listed for a sync. Its port, the requests it was sent (`METHOD PATH`),
    /// and its book.
    async fn re_sizing_broker(refused_places: usize) -> (u16, Arc<Mutex<Vec<String>>>, Book) {
        re_sizing_broker_answering_after(refused_places, Duration::ZERO, Duration::ZERO).await
    }

    /// [`re_sizing_broker`], answering each new order `post_delay` and each cancel `delete_delay` after it arrives.
    async fn re_sizing_broker_answering_after(
        refused_places: usize,
        post_delay: Duration,
        delete_delay: Duration,
    ) -> (u16, Arc<Mutex<Vec<String>>>, Book) {
        re_sizing_broker_answering_reads_after(refused_places, post_delay, delete_delay, Duration::ZERO).await
    }

    /// [`re_sizing_broker_answering_after`], answering each read (GET) `get_delay` after it arrives too.
    async fn re_sizing_broker_answering_reads_after(
        refused_places: usize,
        post_delay: Duration,
        delete_delay: Duration,
        get_delay: Duration,
    ) -> (u16, Arc<Mutex<Vec<String>>>, Book) {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let book: Book = Arc::new(Mutex::new(HashMap::from([("1001".to_owned(), (10u64, "Live"))])));
        let refused = Arc::new(AtomicUsize::new(0));
        let (seen_by_broker, book_of_broker) = (Arc::clone(&seen), Arc::clone(&book));
        let order_json = |id: &str, size: u64, state: &str| {
            let (remaining, fills) =
                if state == "Filled" { (0, format!(r#"[{{"quantity":{size}}}]"#)) } else { (size, "[]".to_owned()) };
            format!(
                r#"{{"id":{id},"account-number":"5WT00001","time-in-force":"Day","order-type":"Limit","size":{size},"underlying-symbol":"AAPL","underlying-instrument-type":"Equity","price":"150.0","price-effect":"Debit","status":"{state}","cancellable":{},"editable":false,"edited":false,"legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":{size},"remaining-quantity":{remaining},"action":"Buy to Open","fills":{fills}}}]}}"#,
                state == "Live"
            )
        };
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (seen, book, refused) =
                    (Arc::clone(&seen_by_broker), Arc::clone(&book_of_broker), Arc::clone(&refused));
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, body)) = next_request(&mut conn, &mut got).await {
                        let mut words = first.split(' ');
                        let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
                        seen.lock().unwrap().push(format!("{method} {path}"));
                        let id = path.rsplit('/').next().unwrap_or_default().to_owned();
                        match method {
                            "POST" => tokio::time::sleep(post_delay).await,
                            "DELETE" => tokio::time::sleep(delete_delay).await,
                            "GET" => tokio::time::sleep(get_delay).await,
                            _ => {}
                        }
                        let (status, answer) = {
                            let mut book = book.lock().unwrap();
                            match (method, book.get(&id).copied()) {
                                ("POST", _) if refused.fetch_add(1, Ordering::SeqCst) < refused_places => (
                                    422,
                                    r#"{"error":{"code":"insufficient_buying_power","message":"Insufficient buying power"}}"#
                                        .to_owned(),
                                ),
                                ("POST", _) => {
                                    let sent: serde_json::Value = serde_json::from_slice(&body).unwrap();
                                    let q = &sent["legs"][0]["quantity"];
                                    let size = q.as_u64().or_else(|| q.as_str()?.parse().ok()).unwrap();
                                    let new = 1002 + book.len() as u64 - 1;
                                    book.insert(new.to_string(), (size, "Live"));
                                    (201, format!(r#"{{"data":{{"order":{{"id":{new},"status":"Received"}}}}}}"#))
                                }
                                ("DELETE", Some((size, "Live"))) => {
                                    book.insert(id.clone(), (size, "Cancelled"));
                                    (200, format!(r#"{{"data":{{"id":{id},"status":"Cancel Requested"}}}}"#))
                                }
                                ("DELETE", _) => (
                                    422,
                                    r#"{"error":{"code":"order_not_cancellable","message":"Order is not in a cancellable state"}}"#
                                        .to_owned(),
                                ),
                                ("GET", _) if id == "live" => {
                                    let items: Vec<String> =
                                        book.iter().map(|(id, (size, state))| order_json(id, *size, state)).collect();
                                    (200, format!(r#"{{"data":{{"items":[{}]}}}}"#, items.join(",")))
                                }
                                ("GET", _) if id == "positions" => {
                                    let held: u64 = book.values().filter(|(_, s)| *s == "Filled").map(|(q, _)| q).sum();
                                    let items = if held == 0 {
                                        String::new()
                                    } else {
                                        format!(
                                            r#"{{"symbol":"AAPL","instrument-type":"Equity","quantity":"{held}","quantity-direction":"Long","average-open-price":"150.0"}}"#
                                        )
                                    };
                                    (200, format!(r#"{{"data":{{"items":[{items}]}}}}"#))
                                }
                                ("GET", Some((size, state))) => {
                                    (200, format!(r#"{{"data":{}}}"#, order_json(&id, size, state)))
                                }
                                _ => (404, "{}".to_owned()),
                            }
                        };
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                            answer.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (port, seen, book)
    }

    /// `bodies` decided against entry 1001 of `order_type` ([`re_size_fixture_at`]), then the bot's rows delivered
    /// one by one to [`re_sizing_broker`] (refusing nothing) and recorded, as the dispatcher does: each row's result,
    /// the requests the broker was sent, and the bot's state at the end.
    async fn re_sizes_delivered(
        name: &str,
        bodies: [&str; 2],
        order_type: OrderType,
    ) -> (Vec<OutboxRow>, Vec<Delivered>, Vec<String>, BotState) {
        re_sizes_delivered_with(name, bodies, order_type, 0, |_| Meanwhile::Nothing).await
    }

    /// What befalls the `n`-th row of [`re_sizes_delivered_with`] (from 0) before it is delivered.
    enum Meanwhile {
        /// Nothing: it is delivered.
        Nothing,
        /// The broker fills this order, a sync reads the account ([`crate::sync::sync_now`]), then it is delivered.
        Fills(&'static str),
        /// It is not delivered but ends as an earlier attempt left it: with this status and result.
        Ended(&'static str, &'static str),
    }

    /// [`re_sizes_delivered`] at [`re_sizing_broker`] refusing `refused_places`, with what befalls each row before
    /// its delivery (`meanwhile`, given its index).
    async fn re_sizes_delivered_with(
        name: &str,
        bodies: [&str; 2],
        order_type: OrderType,
        refused_places: usize,
        meanwhile: impl Fn(usize) -> Meanwhile,
    ) -> (Vec<OutboxRow>, Vec<Delivered>, Vec<String>, BotState) {
        let (port, seen, book) = re_sizing_broker(refused_places).await;
        let (dir, store, app, _, stored) = re_size_fixture_at(name, bodies, port, order_type).await;
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let mut results = Vec::new();
        for (n, r) in stored.clone().into_iter().enumerate() {
            let d = match meanwhile(n) {
                Meanwhile::Nothing => deliver(&app, &lease, r).await.expect("delivered under the lease"),
                Meanwhile::Fills(id) => {
                    book.lock().unwrap().get_mut(id).expect("an order the broker holds").1 = "Filled";
                    crate::sync::sync_now(&app, "demo-equities", "tt", &lease).await.unwrap();
                    deliver(&app, &lease, r).await.expect("delivered under the lease")
                }
                Meanwhile::Ended(status, message) => result(&r, false, status, message.to_owned()),
            };
            record(&app, Arc::from([d.clone()])).await;
            committed(&app, std::slice::from_ref(&d));
            results.push(d);
        }
        let state = app.bot_state("demo-equities", "tt");
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        let seen = seen.lock().unwrap().clone();
        (stored, results, seen, state)
    }

    fn statuses(results: &[Delivered]) -> Vec<&str> {
        results.iter().map(|d| d.status).collect()
    }

    fn working(state: &BotState) -> Vec<(&str, strategy_webhook::decimal::Decimal)> {
        state.working_orders.iter().map(|o| (o.id.as_str(), o.quantity)).collect()
    }

    /// Two re-sizes of entry 1001 (to 20, then to 5) decided before either was delivered: the first pulls 1001 and
    /// places 1002; the second's cancel, never aimed at 1002 (its new order is built from 1001's terms), reached
    /// 1001, was refused, read it back cancelled with nothing filled and was marked done, and its new order for 5
    /// went out beside 1002: 25 shares working where 5 were asked.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_re_size_of_an_entry_re_sized_since_it_was_decided_is_held_back() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":5}"#,
        ];
        let (stored, results, seen, state) = re_sizes_delivered("re-size-twice", bodies, OrderType::Limit).await;
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["cancel", "place", "cancel", "place"]);
        assert_eq!(seen.iter().filter(|r| r.starts_with("POST")).count(), 1, "{seen:?}");
        assert_eq!(statuses(&results), ["done", "done", "failed", "failed"], "{results:?}");
        assert!(results[2].result.contains("replaced by order 1002"), "{}", results[2].result);
        assert_eq!(working(&state), [("1002", 20.into())]);
    }

    /// A CANCEL of entry 1001, then a MODIFY re-sizing it decided before the CANCEL was delivered: the re-size's cancel
    /// reached 1001 the CANCEL had pulled, read it back cancelled with nothing filled and was marked done, and its new
    /// order brought back the entry the trader pulled (a MODIFY never opens a trade).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_re_size_of_an_entry_a_cancel_pulled_first_places_nothing() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
        ];
        let (stored, results, seen, state) = re_sizes_delivered("cancel-then-re-size", bodies, OrderType::Limit).await;
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["cancel", "cancel", "place"]);
        assert!(!seen.iter().any(|r| r.starts_with("POST")), "{seen:?}");
        assert_eq!(statuses(&results), ["done", "failed", "failed"], "{results:?}");
        let pulled_by = format!("pulled by the cancel {}", stored[0].client_order_id);
        assert!(results[1].result.contains(&pulled_by), "{}", results[1].result);
        assert_eq!(working(&state), []);
    }

    /// Two re-sizes of entry 1001 (to 20, then to 5) decided before either was delivered; the first delivered (1001
    /// pulled, 1002 placed), then 1002 filled and a sync read it (dropping the `replaced` note: 1002 is final) before
    /// the second's cancel went out. That cancel reached 1001, was refused, read it back cancelled with nothing
    /// filled, and found no note that anything took 1001 out (the pull's note went when 1002 stood in for it): done,
    /// and its new order for 5 went out beside the 20 held. A MODIFY opened a trade.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_re_size_after_the_first_ones_order_filled_opens_nothing() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":5}"#,
        ];
        let fills = |n| if n == 2 { Meanwhile::Fills("1002") } else { Meanwhile::Nothing };
        let (stored, results, seen, state) =
            re_sizes_delivered_with("re-size-after-fill", bodies, OrderType::Limit, 0, fills).await;
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["cancel", "place", "cancel", "place"]);
        assert_eq!(seen.iter().filter(|r| r.starts_with("POST")).count(), 1, "a MODIFY opened 5 more: {seen:?}");
        assert_eq!(statuses(&results), ["done", "done", "failed", "failed"], "{results:?}");
        assert!(results[2].result.contains("replaced by order 1002"), "{}", results[2].result);
        // As the sync left it: the entry filled, nothing working, the replace's note gone with 1002 final.
        assert!(state.replaced.is_empty() && working(&state).is_empty(), "{state:?}");
        assert_eq!(state.positions.iter().map(|p| p.quantity).collect::<Vec<_>>(), [20.into()]);
    }

    /// Two re-sizes of entry 1001 (to 20, then to 5) decided before either was delivered; the first's cancel pulled
    /// 1001 and the broker refused its new order. The second's cancel, refused and read back cancelled, found the
    /// first's pull and took it for a CANCEL's or a CLOSE's: failed naming one that never was, and the order for 5,
    /// the trader's latest word, was lost. Nothing stood in for 1001: the second re-size goes, and stands in for it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_re_size_after_the_first_ones_order_was_refused_goes() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":5}"#,
        ];
        let (stored, results, seen, state) =
            re_sizes_delivered_with("re-size-after-refusal", bodies, OrderType::Limit, 1, |_| Meanwhile::Nothing).await;
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["cancel", "place", "cancel", "place"]);
        assert_eq!(statuses(&results), ["done", "failed", "done", "done"], "{results:?}");
        assert_eq!(seen.iter().filter(|r| r.starts_with("POST")).count(), 2, "{seen:?}");
        assert_eq!(working(&state), [("1002", 5.into())]);
        let replaced: Vec<(&str, &str)> = state.replaced.iter().map(|r| (r.old.as_str(), r.new.as_str())).collect();
        assert_eq!(replaced, [("1001", "1002")], "the new order stands in for the pulled one");
    }

    /// The same through the dispatcher, with the database slow for a moment after the first re-size's new order
    /// was refused: the second re-size's cancel read that refusal while its commit was still queued, took the
    /// order for one that may have been placed, and held the trader's latest re-size back. A cancel waits for the
    /// results queued before it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_re_size_reads_the_first_ones_refusal_even_while_its_commit_is_queued() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":5}"#,
        ];
        let (port, seen, _book) = re_sizing_broker_answering_after(1, Duration::from_millis(100), Duration::ZERO).await;
        let (dir, store, app, _, _) = re_size_fixture_at("slow-commit", bodies, port, OrderType::Limit).await;
        let (db, watch) = (dir.join("t.db"), Arc::clone(&seen));
        // The database is held from the moment the first new order reaches the broker, so its refusal's commit
        // is still queued when the second re-size's cancel goes out.
        let locker = std::thread::spawn(move || {
            while !watch.lock().unwrap().iter().any(|r| r.starts_with("POST")) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let c = rusqlite::Connection::open(&db).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            std::thread::sleep(Duration::from_millis(800));
            c.execute_batch("COMMIT").unwrap();
        });
        app.dispatcher.wake(&app, "demo-equities", "tt");
        let until = tokio::time::Instant::now() + Duration::from_secs(30);
        while !app.reader.open_rows("demo-equities", "tt", 10).unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < until, "rows still open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        locker.join().unwrap();
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        let rows: Vec<(String, Option<String>)> = {
            let c = rusqlite::Connection::open(dir.join("t.db")).unwrap();
            let mut q = c.prepare("SELECT status, result FROM outbox ORDER BY id").unwrap();
            let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
            rows
        };
        let statuses: Vec<&str> = rows.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(statuses, ["done", "failed", "done", "done"], "{rows:#?}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The same with the first re-size's new order expired unsent: the second goes. With its outcome unknown (an
    /// answer lost: it may stand at the broker), the second is held back, naming the first re-size's cancel.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_re_size_after_the_first_ones_order_expired_goes_and_not_after_an_unknown_one() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":5}"#,
        ];
        let expired = |n| match n {
            1 => Meanwhile::Ended("expired", "order for bot tt not sent: it is 3601.0 s old, past its deadline"),
            _ => Meanwhile::Nothing,
        };
        let (_, results, seen, state) =
            re_sizes_delivered_with("re-size-after-expiry", bodies, OrderType::Limit, 0, expired).await;
        assert_eq!(statuses(&results), ["done", "expired", "done", "done"], "{results:?}");
        assert_eq!(seen.iter().filter(|r| r.starts_with("POST")).count(), 1, "{seen:?}");
        assert_eq!(working(&state), [("1002", 5.into())]);
        let unknown = |n| match n {
            1 => Meanwhile::Ended(
                "failed",
                "order for bot tt: unknown whether the broker has it: HTTP 502; it is not sent again, check the broker",
            ),
            _ => Meanwhile::Nothing,
        };
        let (stored, results, seen, _) =
            re_sizes_delivered_with("re-size-after-unknown", bodies, OrderType::Limit, 0, unknown).await;
        assert_eq!(statuses(&results), ["done", "failed", "failed", "failed"], "{results:?}");
        assert!(!seen.iter().any(|r| r.starts_with("POST")), "{seen:?}");
        let named = format!("pulled by the cancel {} of an earlier re-size", stored[0].client_order_id);
        assert!(results[2].result.contains(&named), "{}", results[2].result);
        assert!(results[2].result.contains("may have been placed"), "{}", results[2].result);
    }

    /// A re-size of a working market entry (queued before the open), then a CANCEL decided before the re-size was
    /// delivered: the re-size's new order, market too, was not recorded (only limit orders were), so it was nobody's
    /// replacement; the CANCEL reached 1001, was refused, read it back cancelled, and was marked done while 1002 was
    /// left to fill at the open.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_decided_during_a_market_entrys_re_size_pulls_the_new_order() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
        ];
        let (stored, results, seen, state) = re_sizes_delivered("market-re-size", bodies, OrderType::Market).await;
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["cancel", "place", "cancel"]);
        assert!(seen.iter().any(|r| r == "DELETE /accounts/5WT00001/orders/1002"), "{seen:?}");
        assert_eq!(statuses(&results), ["done", "done", "done"], "{results:?}");
        assert!(results[2].result.contains("aimed at order 1002"), "{}", results[2].result);
        assert_eq!(working(&state), []);
    }

    /// An operator's `PUT …/state` landing (on another thread) between a delivery's read of the bot's state and
    /// its set was overwritten: answered 200, and lost. The delivery's change is applied again over it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_state_set_between_a_deliverys_read_and_its_set_is_kept() {
        let (dir, store) = temp_store("cas");
        let app = app_with_bots(&dir, &store, "{}");
        let mut r = row(None);
        r.strategy = "s".into();
        r.bot = "b".into();
        let put = crate::paper::BotState { positions: vec![held_long("MSFT", 5)], ..Default::default() };
        let reads = std::cell::Cell::new(0);
        let set = set_state(&app, &r, |st| {
            if reads.replace(reads.get() + 1) == 0 {
                // The operator's PUT, after this delivery read the state and before it sets its own.
                assert!(app.replace_bot_state("s", "b", &crate::paper::BotState::default(), put.clone()));
            }
            st.next_id += 1;
            true
        })
        .expect("a change");
        assert_eq!(reads.get(), 2, "applied again over the operator's state");
        let now = app.bot_state("s", "b");
        assert_eq!(now, set);
        assert_eq!(
            (now.positions, now.next_id),
            (put.positions, 1),
            "the operator's position and the delivery's change"
        );
        app.state_committed("s", "b", true);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn order_json(intent: &str, order_type: &str, qty: u32, price: &str) -> String {
        let limit = if order_type == "limit" { price } else { "null" };
        format!(
            r#"{{"asset_class":"equity","symbol":"AAPL","intent":"{intent}","quantity":{qty},
                "order_type":"{order_type}","limit_price":{limit},"duration":"day","legs":[],
                "client_order_id":"swh-x","reference_price":{price}}}"#
        )
    }

    /// The mark that a row is being sent (committed before the request, at a broker without a duplicate check)
    /// failed once (a moment's disk-full, an operator's sqlite3 holding the database), and the order the sender
    /// was answered `processed` for failed for good with nothing sent. It is tried again. (The broker here
    /// refuses the order, with a 400 every broker reads as a refusal: what counts is that it was sent, once.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_whose_sending_mark_fails_once_is_sent_when_it_can_be_marked() {
        use crate::store::Mark;
        let (dir, store) = temp_store("mark");
        let (port, orders) = refusing_broker().await;
        let file = format!(r#"{{"h": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let mut r =
            paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), Some(now_ms() + 60_000));
        r.bot = "h".into();
        // A broker that takes a repeated client order id as a new order: its rows are marked before sending.
        let broker = BrokerId::ALL.into_iter().find(|b| !b.broker().accepts_client_order_id()).unwrap();
        r.broker = broker.as_str().into();
        r.method = "POST".into();
        r.path = "/orders".into();
        r.content_type = Some("application/json".into());
        r.body = br#"{"symbol":"AAPL"}"#.to_vec();
        r.target = Some(app.bots.target("h").to_owned());
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, vec![r], None).await.unwrap();
        let row = app.reader.open_rows("s", "h", 10).unwrap().remove(0);
        // The mark cannot be written for a moment.
        let db = rusqlite::Connection::open(dir.join("t.db")).unwrap();
        db.execute_batch("ALTER TABLE outbox RENAME TO outbox_away").unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            db.execute_batch("ALTER TABLE outbox_away RENAME TO outbox").unwrap();
        });
        let Delivery::Http(bot) = app.bots.delivery("h") else { panic!("h is an http bot") };
        let lease = app.leases.take("s", "h").await.unwrap().unwrap();
        let (result, status) =
            http_deliver(&app, &lease, &bot, &row, RequestKind::Place, None, "order for bot h").await.unwrap();
        assert_eq!(status, "failed", "{}", result.1);
        assert!(result.1.contains("refused by the broker"), "sent, not failed by the mark: {}", result.1);
        assert_eq!(orders.load(std::sync::atomic::Ordering::SeqCst), 1, "sent once");
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// One broker down (nothing listening: every attempt refused before anything is sent) with more bots retrying
    /// their market orders against it than deliveries run at once. They held every permit through their
    /// back-offs, and a bot at another broker waited with its own market order until their deadlines ran out (a
    /// minute here). A delivery waiting gives its permit up: the other bot's order goes out at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_brokers_outage_does_not_hold_up_the_bots_of_another() {
        use crate::store::Mark;
        let (dir, store) = temp_store("outage");
        let (up, orders) = refusing_broker().await;
        let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let stuck: Vec<String> = (0..CONCURRENCY + 4).map(|i| format!("d{i}")).collect();
        let mut file: serde_json::Map<String, serde_json::Value> = stuck
            .iter()
            .map(|b| {
                (b.clone(), serde_json::json!({"delivery": "http", "base_url": format!("http://127.0.0.1:{down}")}))
            })
            .collect();
        file.insert("up".into(), serde_json::json!({"delivery": "http", "base_url": format!("http://127.0.0.1:{up}")}));
        let app = app_with_bots(&dir, &store, &serde_json::Value::Object(file).to_string());
        let broker = BrokerId::ALL.into_iter().find(|b| !b.broker().accepts_client_order_id()).unwrap();
        let row_for = |bot: &str, n: usize| {
            let order = order_json("open_long", "market", 1, "190");
            let mut r = paper_row("place", None, Some(&order), Some(now_ms() + 60_000));
            r.bot = bot.into();
            r.client_order_id = format!("swh-{n}");
            r.broker = broker.as_str().into();
            r.method = "POST".into();
            r.path = "/orders".into();
            r.content_type = Some("application/json".into());
            r.body = br#"{"symbol":"AAPL"}"#.to_vec();
            r.target = Some(app.bots.target(bot).to_owned());
            r
        };
        let mark = || Mark { strategy: "s".into(), ts_ms: now_ms(), key: None };
        let rows = stuck.iter().enumerate().map(|(n, b)| row_for(b, n)).collect();
        app.writer.outbox(mark(), rows, None).await.unwrap();
        for b in &stuck {
            app.dispatcher.wake(&app, "s", b);
        }
        // The stuck bots' first attempts fail and their back-offs begin.
        tokio::time::sleep(Duration::from_millis(500)).await;
        app.writer.outbox(mark(), vec![row_for("up", stuck.len())], None).await.unwrap();
        app.dispatcher.wake(&app, "s", "up");
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while orders.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(orders.load(Ordering::SeqCst), 1, "the other broker's order went out while the first was down");
        let open = app.reader.open_rows("s", "d0", 10).unwrap();
        assert_eq!(open.len(), 1, "the stuck bot is still retrying its order, not failed");
        // Stopped, the stuck deliveries wait for the process to end: nothing may reach the broker that is down.
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await, "no request on its way at the stop");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A broker that accepts connections and never answers, with more bots sending market orders to it than
    /// deliveries run at once: each send held its slot for the bot's whole timeout (10 s), and a bot at another
    /// broker waited that long with its own market order (past its deadline with more silent bots or a longer
    /// timeout). One broker holds at most [`PER_HOST`] slots: the other bot's order goes out at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_broker_does_not_hold_up_the_bots_of_another() {
        use crate::store::Mark;
        let (dir, store) = temp_store("silent-outage");
        let (up, orders) = refusing_broker().await;
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let down = silent.local_addr().unwrap().port();
        let listening = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((c, _)) = silent.accept().await {
                held.push(c);
            }
        });
        let stuck: Vec<String> = (0..CONCURRENCY + 4).map(|i| format!("d{i}")).collect();
        let mut file: serde_json::Map<String, serde_json::Value> = stuck
            .iter()
            .map(|b| {
                (b.clone(), serde_json::json!({"delivery": "http", "base_url": format!("http://127.0.0.1:{down}")}))
            })
            .collect();
        file.insert("up".into(), serde_json::json!({"delivery": "http", "base_url": format!("http://127.0.0.1:{up}")}));
        let app = app_with_bots(&dir, &store, &serde_json::Value::Object(file).to_string());
        let broker = BrokerId::ALL.into_iter().find(|b| !b.broker().accepts_client_order_id()).unwrap();
        let row_for = |bot: &str, n: usize| {
            let order = order_json("open_long", "market", 1, "190");
            let mut r = paper_row("place", None, Some(&order), Some(now_ms() + 60_000));
            r.bot = bot.into();
            r.client_order_id = format!("swh-{n}");
            r.broker = broker.as_str().into();
            r.method = "POST".into();
            r.path = "/orders".into();
            r.content_type = Some("application/json".into());
            r.body = br#"{"symbol":"AAPL"}"#.to_vec();
            r.target = Some(app.bots.target(bot).to_owned());
            r
        };
        let mark = || Mark { strategy: "s".into(), ts_ms: now_ms(), key: None };
        app.writer.outbox(mark(), stuck.iter().enumerate().map(|(n, b)| row_for(b, n)).collect(), None).await.unwrap();
        for b in &stuck {
            app.dispatcher.wake(&app, "s", b);
        }
        // The stuck bots' sends are on their way, each waiting for an answer that never comes.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let start = tokio::time::Instant::now();
        app.writer.outbox(mark(), vec![row_for("up", stuck.len())], None).await.unwrap();
        app.dispatcher.wake(&app, "s", "up");
        let until = start + Duration::from_secs(15);
        while orders.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = start.elapsed();
        assert_eq!(orders.load(Ordering::SeqCst), 1);
        assert!(
            took < Duration::from_secs(3),
            "the other broker's market order waited {took:?} behind a silent broker"
        );
        listening.abort();
        // Their sends still wait on the silent broker: nothing more starts, and their rows stay open.
        let _ = app.dispatcher.stop(Duration::from_millis(100)).await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A dispatcher that panicked kept its entry among the tasks, so no wake-up or sweep started the bot's again:
    /// its rows were never sent. The next wake-up after the panic starts a new one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatcher_that_panicked_is_started_again() {
        use crate::store::Mark;
        let (dir, store) = temp_store("panicked");
        let (port, orders) = refusing_broker().await;
        let file = format!(r#"{{"panics-once": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let mut r =
            paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), Some(now_ms() + 60_000));
        r.bot = "panics-once".into();
        r.broker = BrokerId::ALL[0].as_str().into();
        r.method = "POST".into();
        r.path = "/orders".into();
        r.content_type = Some("application/json".into());
        r.body = br#"{"symbol":"AAPL"}"#.to_vec();
        r.target = Some(app.bots.target("panics-once").to_owned());
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, vec![r], None).await.unwrap();
        app.dispatcher.wake(&app, "s", "panics-once");
        // As the sweep does, every so often.
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while orders.load(Ordering::SeqCst) == 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
            app.dispatcher.wake(&app, "s", "panics-once");
        }
        assert_eq!(orders.load(Ordering::SeqCst), 1, "the bot's row went out once its dispatcher was started again");
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A paper dispatcher that panicked between a run's fills and their commit left the fills in the bot's state
    /// in memory while the rows stayed open: the new dispatcher filled them again, doubling the position. The
    /// state is read back from the database before the new one starts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dispatcher_that_panicked_before_recording_fills_does_not_fill_them_twice() {
        use crate::store::Mark;
        let (dir, store) = temp_store("panicked-fill");
        let app = app_with_bots(&dir, &store, "{}");
        // The bot holds 5 already, stored: read back after the panic, not forgotten.
        let held = r#"{"positions":[{"instrument":"AAPL","direction":"long","quantity":"5"}],"working_orders":[]}"#;
        app.writer.bot_state("s", "panics-after-fill", held.into()).await.unwrap();
        app.set_bot_state("s", "panics-after-fill", serde_json::from_str(held).unwrap());
        let mut r = paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), None);
        r.bot = "panics-after-fill".into();
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, vec![r], None).await.unwrap();
        app.dispatcher.wake(&app, "s", "panics-after-fill");
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while !app.reader.open_rows("s", "panics-after-fill", 10).unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < until, "the row was never recorded");
            tokio::time::sleep(Duration::from_millis(50)).await;
            app.dispatcher.wake(&app, "s", "panics-after-fill");
        }
        let held = app.bot_state("s", "panics-after-fill").positions;
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].quantity, strategy_webhook::decimal::Decimal::from(6), "5 held, 1 filled once: {held:?}");
        assert!(!app.state_committing("s", "panics-after-fill"));
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A delivery's state was counted as uncommitted until the dispatcher next looked, which behind a row in
    /// back-off (its broker down) was minutes: every operator's state set meanwhile was refused. It is taken off
    /// the count as its commit lands.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_delivered_state_is_committed_when_its_commit_lands_not_when_the_dispatcher_looks() {
        use crate::store::Mark;
        use tokio::io::AsyncWriteExt;
        let (dir, store) = temp_store("committed-count");
        // A broker that takes one order, then goes away (nothing listening: the next is refused unsent).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let Ok((mut conn, _)) = listener.accept().await else { return };
            drop(listener);
            if !read_request(&mut conn, &mut Vec::new()).await {
                return;
            }
            let body = r#"{"id":"o-1","client_order_id":"swh-1","status":"accepted","symbol":"AAPL","qty":"1","side":"buy","type":"limit","limit_price":"190","time_in_force":"day"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        });
        let file = format!(r#"{{"h": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let row = |n: usize| {
            let mut r =
                paper_row("place", None, Some(&order_json("open_long", "limit", 1, "190")), Some(now_ms() + 60_000));
            r.bot = "h".into();
            r.client_order_id = format!("swh-{n}");
            r.broker = BrokerId::ALL[0].as_str().into();
            r.method = "POST".into();
            r.path = "/v2/orders".into();
            r.content_type = Some("application/json".into());
            r.body = br#"{"symbol":"AAPL"}"#.to_vec();
            r.target = Some(app.bots.target("h").to_owned());
            r
        };
        app.writer
            .outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, vec![row(1), row(2)], None)
            .await
            .unwrap();
        app.dispatcher.wake(&app, "s", "h");
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while app.reader.open_rows("s", "h", 10).unwrap().len() > 1 {
            assert!(tokio::time::Instant::now() < until, "the first order was never recorded");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(app.bot_state("s", "h").working_orders.len(), 1, "the first order is recorded");
        let until = tokio::time::Instant::now() + Duration::from_secs(2);
        while app.state_committing("s", "h") {
            assert!(tokio::time::Instant::now() < until, "the committed state is still counted as uncommitted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(app.reader.open_rows("s", "h", 10).unwrap().len(), 1, "the second order is still in back-off");
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// The request a row waits for (a reversal's close before its new side) could not be read for a moment:
    /// the row failed for good ("could not be checked"), and a reversal's new side was lost to a database
    /// blip. It is read again; the prerequisite done, the row goes out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_whose_prerequisite_cannot_be_read_for_a_moment_still_goes_out() {
        use crate::store::Mark;
        let (dir, store) = temp_store("held-read");
        let app = app_with_bots(&dir, &store, "{}");
        let deadline = Some(now_ms() + 60_000);
        let mut close = paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), deadline);
        close.client_order_id = "swh-close".into();
        let mut open = paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), deadline);
        open.client_order_id = "swh-open".into();
        open.after = Some("swh-close".into());
        let mark = || Mark { strategy: "s".into(), ts_ms: now_ms(), key: None };
        app.writer.outbox(mark(), vec![close, open], None).await.unwrap();
        let db = rusqlite::Connection::open(dir.join("t.db")).unwrap();
        db.execute_batch("UPDATE outbox SET status = 'done' WHERE client_order_id = 'swh-close'").unwrap();
        let row = app.reader.open_rows("s", "p", 10).unwrap().into_iter().find(|r| r.after.is_some()).unwrap();
        db.execute_batch("ALTER TABLE outbox RENAME TO outbox_away").unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            db.execute_batch("ALTER TABLE outbox_away RENAME TO outbox").unwrap();
        });
        let lease = app.leases.take("s", "p").await.unwrap().unwrap();
        let d = deliver(&app, &lease, row).await.expect("delivered under the lease");
        assert_eq!(d.status, "done", "{}", d.result);
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Shutdown gives the bots' leases back only when no delivery is still running: a send still waiting on its
    /// broker may yet place the order after another server took the bot over as if nothing had been sent.
    #[tokio::test]
    async fn stopping_says_whether_a_delivery_was_still_in_flight() {
        let idle = Dispatcher::default();
        assert!(idle.stop(Duration::from_millis(10)).await, "nothing ever sent");
        let busy = Dispatcher::default();
        let limit = Arc::clone(busy.limit.get_or_init(|| Arc::new(Semaphore::new(CONCURRENCY))));
        let sending = limit.acquire().await.unwrap();
        let on_its_way = busy.on_wire();
        assert!(!busy.stop(Duration::from_millis(50)).await, "one request may still reach its broker");
        drop((sending, on_its_way));
        // A delivery still running but between attempts (its broker not reached): nothing can reach the broker
        // once the leases are given back, since a send checks its lease before it goes out.
        let retrying = Dispatcher::default();
        let limit = Arc::clone(retrying.limit.get_or_init(|| Arc::new(Semaphore::new(CONCURRENCY))));
        let waiting = limit.acquire().await.unwrap();
        assert!(retrying.stop(Duration::from_millis(50)).await, "waiting to try again");
        drop(waiting);
        let done = Dispatcher::default();
        let limit = Arc::clone(done.limit.get_or_init(|| Arc::new(Semaphore::new(CONCURRENCY))));
        let sending = limit.acquire_owned().await.unwrap();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(sending);
        });
        assert!(done.stop(Duration::from_secs(5)).await, "the delivery ended within the wait");
    }

    /// A run whose commit failed is committed again after the runs queued behind it. One of those may have held
    /// already with a newer state of the bot: the retry must not write its older state over it.
    #[tokio::test]
    async fn a_failed_commit_retried_after_a_later_one_leaves_the_later_state() {
        use crate::store::Mark;
        let (dir, store) = temp_store("superseded");
        let app = App::new(
            strategy_webhook::Engine::new(),
            store.writer(),
            store.reader(),
            (HashMap::new(), HashMap::new()),
            "https://x".into(),
            "t".into(),
        );
        let rows = vec![paper_row("place", None, None, None), paper_row("place", None, None, None)];
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, rows, None).await.unwrap();
        let ids: Vec<i64> = app.reader.open_rows("s", "p", 10).unwrap().iter().map(|r| r.id).collect();
        let run = |id: i64, state: &str| -> Arc<[Delivered]> {
            Arc::from([Delivered {
                id,
                status: "done",
                result: format!("row {id}"),
                log: None,
                state: Some(("s".into(), "p".into(), state.into())),
            }])
        };
        let (older, newer) = (run(ids[0], r#"{"v":1}"#), run(ids[1], r#"{"v":2}"#));
        // The later run's commit held; the earlier one's failed (its answer is an error).
        let later = app.writer.queue_delivered_run(Arc::clone(&newer)).await.unwrap();
        let (tx, failed) = tokio::sync::oneshot::channel();
        tx.send(Err(StoreError::Unanswered)).unwrap();
        let mut committing = VecDeque::from([(older, failed), (newer, later)]);
        settle(&app, &mut committing, true).await;
        while !committing.is_empty() {
            settle(&app, &mut committing, true).await;
        }
        let states = app.reader.bot_states().unwrap();
        assert_eq!(states.len(), 1);
        assert_eq!(states[0].2, r#"{"v":2}"#, "the later delivery's state stands");
        // Both rows are recorded.
        assert!(app.reader.open_rows("s", "p", 10).unwrap().is_empty());
        // What a retry writes, by which runs behind the failed one held.
        let states = |r: Arc<[Delivered]>| -> Vec<(i64, Option<String>)> {
            r.iter().map(|d| (d.id, d.state.as_ref().map(|s| s.2.clone()))).collect()
        };
        let (a, b, c) = (run(1, "a"), run(2, "b"), run(3, "c"));
        let none: Arc<[Delivered]> = Arc::from([Delivered { state: None, ..run(4, "x")[0].clone() }]);
        assert_eq!(states(retry_of(Arc::clone(&a), vec![])), [(1, Some("a".into()))], "alone: its state");
        assert_eq!(
            states(retry_of(Arc::clone(&a), vec![(Arc::clone(&b), true)])),
            [(1, None)],
            "a newer state held: the older one is left out"
        );
        assert_eq!(
            states(retry_of(Arc::clone(&a), vec![(Arc::clone(&b), false)])),
            [(1, Some("a".into())), (2, Some("b".into()))],
            "both failed: both in one retry, in order, the last state standing"
        );
        assert_eq!(
            states(retry_of(Arc::clone(&a), vec![(Arc::clone(&b), true), (Arc::clone(&c), false)])),
            [(1, None), (3, Some("c".into()))],
            "a failed run newer than the one that held keeps its state"
        );
        assert_eq!(
            states(retry_of(Arc::clone(&a), vec![(none, true)])),
            [(1, Some("a".into()))],
            "a run that held with no state changes nothing"
        );
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[tokio::test]
    async fn a_run_of_paper_fills_ends_as_filling_them_one_by_one_and_is_stored_at_once() {
        use crate::store::Mark;
        use strategy_webhook::decimal::Decimal;
        let (dir, store) = temp_store("run");
        let engine = strategy_webhook::Engine::new();
        let app = App::new(
            engine,
            store.writer(),
            store.reader(),
            (HashMap::new(), HashMap::new()),
            "https://x".into(),
            "t".into(),
        );

        // Fills, a close, a resting limit order changed and then cancelled, refusals (nothing short to close,
        // a cancel of an order that is gone, a row with no order) and an expired order, in one run.
        let past = Some(now_ms() - 1);
        let later = Some(now_ms() + 60_000);
        let rows = vec![
            paper_row("place", None, Some(&order_json("open_long", "market", 10, "190.10")), later),
            paper_row("place", None, Some(&order_json("open_long", "market", 5, "191.20")), later),
            paper_row("place", None, Some(&order_json("close_short", "market", 1, "190")), later),
            paper_row("place", None, Some(&order_json("close_long", "market", 3, "192")), later),
            paper_row("place", None, Some(&order_json("open_short", "limit", 7, "195.5")), later),
            paper_row("replace", Some("paper-1"), Some(&order_json("open_short", "limit", 8, "196")), later),
            paper_row("place", None, Some(&order_json("open_long", "market", 100, "1")), past),
            paper_row("cancel", Some("paper-1"), Some(&order_json("open_short", "limit", 8, "196")), None),
            paper_row("cancel", Some("paper-1"), Some(&order_json("open_short", "limit", 8, "196")), None),
            paper_row("place", None, None, later),
            paper_row("place", None, Some(&order_json("open_long", "limit", 2, "189")), later),
        ];
        let mark = Mark { strategy: "s".into(), ts_ms: now_ms(), key: None };
        app.writer.outbox(mark, rows, None).await.unwrap();
        let rows = app.reader.open_rows("s", "p", 100).unwrap();
        assert_eq!(rows.len(), 11);

        // One by one, as `deliver` fills a row: each against the state the one before left.
        let mut expected = BotState::default();
        let mut statuses = Vec::new();
        for r in &rows {
            let kind = request_kind(r);
            let status = if kind != RequestKind::Cancel && stale(r, "x", now_ms()).is_some() {
                "expired"
            } else {
                paper_fill(&app, &mut expected, r, kind, stored_order(r).as_ref(), "x", false).2
            };
            statuses.push(status);
        }
        assert_eq!(
            statuses,
            ["done", "done", "failed", "done", "done", "done", "expired", "done", "failed", "failed", "done"]
        );

        let run = fill_run(&app, "s", "p", rows.clone()).await;
        assert_eq!(run.iter().map(|d| d.status).collect::<Vec<_>>(), statuses);
        // A cancel's note of the order it pulled is timed when it is filled, which may be a millisecond apart.
        let untimed = |mut st: BotState| {
            st.pulled.iter_mut().for_each(|p| p.at_ms = 0);
            st
        };
        let expected = untimed(expected);
        assert_eq!(untimed(app.bot_state("s", "p")), expected, "the server's state is the one-by-one state");
        let (long, rest) = (&expected.positions[0], &expected.working_orders[0]);
        assert_eq!(
            (long.quantity, long.avg_price.map(|p| p.to_string())),
            (Decimal::from(12), Some("190.466667".into()))
        );
        assert_eq!((rest.id.as_str(), rest.quantity, expected.next_id), ("paper-2", Decimal::from(2), 2));
        // Stored once, with the run's last row.
        let stored: Vec<_> = run.iter().map(|d| d.state.is_some()).collect();
        assert_eq!(stored.iter().filter(|s| **s).count(), 1);
        assert_eq!(stored.last(), Some(&true));
        for (d, r) in run.iter().zip(&rows) {
            assert_eq!(d.id, r.id);
            let log = d.log.as_ref().expect("every fill has its log row");
            assert_eq!(log.records.len(), 1, "{:?}", log.records);
        }

        // Committed as one job: every row leaves the open set together with the state it left.
        app.writer.delivered_run(run.into()).await.unwrap();
        assert!(app.reader.open_rows("s", "p", 100).unwrap().is_empty());
        let states = app.reader.bot_states().unwrap();
        assert_eq!(states.len(), 1);
        let back: BotState = serde_json::from_str(&states[0].2).unwrap();
        assert_eq!(untimed(back), expected);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// What the dispatchers make of rows stored for another target than their bot's now, through the whole
    /// loop (`run`: a paper bot's runs, the single deliveries of rows that wait for another, an http bot's):
    /// none is filled or sent, each fails in its place with an ERROR row naming both targets, a row behind one
    /// of them is held back, the rows around them and those of older versions (no target) go as before.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn rows_stored_for_another_target_fail_in_place_and_nothing_is_sent_or_filled() {
        use crate::store::Mark;
        use strategy_webhook::decimal::Decimal;
        let (dir, store) = temp_store("target");
        // The http bot's broker: it counts connections, and none may come.
        let broker = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = broker.local_addr().unwrap().port();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = Arc::clone(&connections);
        tokio::spawn(async move {
            while let Ok((_conn, _)) = broker.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let file = format!(r#"{{"h": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}/v2/"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let here = format!("http://127.0.0.1:{port}/v2");
        assert_eq!(app.bots.target("h"), here);
        assert_eq!(app.bots.target("p"), "paper", "a bot not in the file is paper");

        let elsewhere = "https://api.example.com:443";
        let later = Some(now_ms() + 60_000);
        // One alert's rows share its time (a row finds the one it waits for by it).
        let at = now_ms();
        let stored = |coid: &str, kind: &str, target: Option<&str>, order: &str| {
            let mut r = paper_row(kind, None, Some(order), later);
            r.created_ms = at;
            r.client_order_id = coid.into();
            r.target = target.map(str::to_owned);
            r
        };
        let open = |n| order_json("open_long", "market", n, "190");
        // Bot `p`, paper now: a fill, a row stored for a broker, a cancel stored for it and the order that waits
        // for that cancel (a re-size), a row of an older version, and a fill after them all.
        let mut resize = stored("p5", "place", Some(elsewhere), &open(4));
        resize.after = Some("p4".into());
        let mut cancel = stored("p4", "cancel", Some(elsewhere), &order_json("open_long", "limit", 4, "180"));
        cancel.order_id = Some("B-1".into());
        cancel.deadline_ms = None;
        let rows = vec![
            stored("p1", "place", Some("paper"), &open(10)),
            stored("p2", "place", Some(elsewhere), &open(5)),
            stored("p3", "place", Some(elsewhere), &order_json("close_long", "market", 3, "190")),
            cancel,
            resize,
            stored("p6", "place", None, &open(2)),
            stored("p7", "place", Some("paper"), &open(1)),
        ];
        // Bot `h`, at the broker now: a row stored while it was paper, one stored for another broker.
        let mut h =
            vec![stored("h1", "place", Some("paper"), &open(1)), stored("h2", "place", Some(elsewhere), &open(1))];
        for r in &mut h {
            r.bot = "h".into();
        }
        let mark = Mark { strategy: "s".into(), ts_ms: now_ms(), key: None };
        app.writer.outbox(mark.clone(), rows, None).await.unwrap();
        app.writer.outbox(mark, h, None).await.unwrap();
        app.dispatcher.wake(&app, "s", "p");
        app.dispatcher.wake(&app, "s", "h");

        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !(app.reader.open_rows("s", "p", 100).unwrap().is_empty()
            && app.reader.open_rows("s", "h", 100).unwrap().is_empty())
        {
            assert!(std::time::Instant::now() < deadline, "the rows were not all delivered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut listed = app.reader.strategy_outbox("s", 100).unwrap();
        listed.reverse();
        let status: Vec<(&str, &str)> =
            listed.iter().map(|(r, _)| (r.client_order_id.as_str(), r.status.as_str())).collect();
        assert_eq!(
            status,
            [
                ("p1", "done"),
                ("p2", "failed"),
                ("p3", "failed"),
                ("p4", "failed"),
                ("p5", "failed"),
                ("p6", "done"),
                ("p7", "done"),
                ("h1", "failed"),
                ("h2", "failed"),
            ]
        );
        let result = |coid: &str| {
            let found = listed.iter().find(|(r, _)| r.client_order_id == coid);
            found.and_then(|(_, m)| m.clone()).unwrap_or_default()
        };
        let p2 = result("p2");
        assert_eq!(
            p2,
            format!(
                "order for bot p not sent: it was stored for delivery to {elsewhere} and this server now delivers \
                 bot p on paper (the bots file has changed since, or differs between servers); nothing was sent or \
                 filled, check the position at the broker"
            )
        );
        assert!(
            result("p4").starts_with("cancel of a working order for bot p not sent: it was stored"),
            "{}",
            result("p4")
        );
        // Behind the cancel that failed for its target, the re-size's new order is held back as behind any failure.
        assert!(result("p5").contains("follows the cancel of working order B-1, which failed"), "{}", result("p5"));
        let h1 = result("h1");
        assert!(
            h1.contains(&format!("stored for delivery on paper and this server now delivers bot h to {here}")),
            "{h1}"
        );
        assert!(result("h2")
            .contains(&format!("stored for delivery to {elsewhere} and this server now delivers bot h to {here}")));
        // Only the rows stored for paper, and the one of an older version, were filled: 10 + 2 + 1.
        let state = app.bot_state("s", "p");
        assert_eq!(state.positions.len(), 1, "{state:?}");
        assert_eq!(state.positions[0].quantity, Decimal::from(13));
        assert!(app.bot_state("s", "h").positions.is_empty());
        assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0, "the broker was reached");
        // Each failure has its ERROR row.
        let logs = app.reader.logs("s", &crate::store::LogQuery { limit: 100, ..Default::default() }).unwrap();
        let errors = logs.iter().filter(|l| l.level == "ERROR" && l.message.contains("stored for delivery")).count();
        assert_eq!(errors, 5, "{logs:?}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// At a broker whose paths name no account, the keys pick it: a row stored under the bots file's old keys (the
    /// base URL unchanged) went to whatever account the new keys open. It fails with an ERROR naming both, and
    /// nothing is sent; a row stored by a version before fingerprints (the bare URL) and one stored under the keys
    /// of now are sent, and so is one under the old keys at a broker whose paths name the account (checked there).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_stored_under_other_keys_fails_where_the_keys_pick_the_account() {
        use crate::store::Mark;
        let (dir, store) = temp_store("keys");
        let (port, orders) = refusing_broker().await;
        let file = |key: &str| {
            serde_json::json!({
                "k": { "delivery": "http", "base_url": format!("http://127.0.0.1:{port}"),
                       "headers": { "X-Key": { "value": key } } },
                "n": { "delivery": "http", "base_url": format!("http://127.0.0.1:{port}"),
                       "headers": { "X-Key": { "value": key } } },
            })
            .to_string()
        };
        let old = crate::bots::Bots::from_json(file("KEY-OF-ACCOUNT-A").as_bytes(), &dir).unwrap();
        let app = app_with_bots(&dir, &store, &file("KEY-OF-ACCOUNT-B"));
        let (old_target, bare) = (old.target("k").to_owned(), format!("http://127.0.0.1:{port}"));
        assert_ne!(old_target, app.bots.target("k"));
        let keyed = BrokerId::ALL.into_iter().find(|b| !b.broker().names_account()).unwrap();
        let named = BrokerId::ALL.into_iter().find(|b| b.broker().names_account()).unwrap();
        let at = now_ms();
        let stored = |bot: &str, broker: BrokerId, coid: &str, target: &str| {
            let mut r = paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), Some(at + 60_000));
            (r.bot, r.broker, r.client_order_id, r.target) =
                (bot.into(), broker.as_str().into(), coid.into(), Some(target.to_owned()));
            (r.method, r.path, r.content_type) = ("POST".into(), "/orders".into(), Some("application/json".into()));
            r.body = br#"{"symbol":"AAPL"}"#.to_vec();
            r
        };
        let now = app.bots.target("k").to_owned();
        let rows = vec![
            stored("k", keyed, "k1", &old_target),
            stored("k", keyed, "k2", &bare),
            stored("k", keyed, "k3", &now),
            stored("n", named, "n1", old.target("n")),
        ];
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        app.dispatcher.wake(&app, "s", "k");
        app.dispatcher.wake(&app, "s", "n");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !(app.reader.open_rows("s", "k", 10).unwrap().is_empty()
            && app.reader.open_rows("s", "n", 10).unwrap().is_empty())
        {
            assert!(std::time::Instant::now() < deadline, "the rows were not all delivered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let listed = app.reader.strategy_outbox("s", 10).unwrap();
        let result = |coid: &str| {
            let (r, m) = listed.iter().find(|(r, _)| r.client_order_id == coid).unwrap();
            (r.status.clone(), m.clone().unwrap_or_default())
        };
        let (status, k1) = result("k1");
        assert_eq!(status, "failed", "{k1}");
        assert!(
            k1.contains(&format!("stored for delivery to {old_target} and this server now delivers bot k to {now}")),
            "{k1}"
        );
        for coid in ["k2", "k3", "n1"] {
            let (status, m) = result(coid);
            // The test broker refuses every order: what counts is that it had the row.
            assert!(status == "failed" && m.contains("the test broker refuses"), "{coid} was not sent: {m}");
        }
        assert_eq!(orders.load(std::sync::atomic::Ordering::SeqCst), 3, "only k2, k3 and n1 were sent");
        let logs = app.reader.logs("s", &crate::store::LogQuery { limit: 100, ..Default::default() }).unwrap();
        assert!(logs.iter().any(|l| l.level == "ERROR" && l.message.contains(&old_target)), "{logs:?}");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A row that waits for another and was stored for a broker, past its deadline by the time a paper bot's
    /// dispatcher reaches it, fails as stored elsewhere (its order may stand at that broker), not as expired
    /// and "not sent": the target is checked before the deadline, in the single deliveries as in the runs.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_row_stored_for_a_broker_fails_as_stored_elsewhere_not_as_expired() {
        use crate::store::Mark;
        let (dir, store) = temp_store("stale-target");
        let engine = strategy_webhook::Engine::new();
        let app = Arc::new(App::new(
            engine,
            store.writer(),
            store.reader(),
            (HashMap::new(), HashMap::new()),
            "https://x".into(),
            "t".into(),
        ));
        let elsewhere = "https://api.example.com:443";
        let at = now_ms();
        let mut first = paper_row("place", None, Some(&order_json("open_long", "market", 1, "190")), Some(at + 60_000));
        first.client_order_id = "q1".into();
        first.created_ms = at;
        let mut second = paper_row("place", None, Some(&order_json("open_long", "market", 2, "190")), Some(at - 1));
        second.client_order_id = "q2".into();
        second.created_ms = at;
        second.after = Some("q1".into());
        second.target = Some(elsewhere.into());
        app.writer
            .outbox(Mark { strategy: "s".into(), ts_ms: at, key: None }, vec![first, second], None)
            .await
            .unwrap();
        app.dispatcher.wake(&app, "s", "p");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !app.reader.open_rows("s", "p", 100).unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the rows were not all delivered");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let listed = app.reader.strategy_outbox("s", 100).unwrap();
        let (row, message) = listed.iter().find(|(r, _)| r.client_order_id == "q2").unwrap();
        let message = message.clone().unwrap_or_default();
        assert_eq!(row.status, "failed", "{message}");
        assert!(message.contains(&format!("stored for delivery to {elsewhere}")), "{message}");
        assert!(message.contains("check the position at the broker"), "{message}");
        assert_eq!(app.bot_state("s", "p").positions[0].quantity, 1.into(), "only the first was filled");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_row_being_sent_when_the_server_stopped_may_stand_at_its_old_target() {
        let mut r = row(None);
        assert_eq!(
            misdirected(&r, "paper", "order for bot b", false),
            None,
            "a row of an older version goes as configured"
        );
        r.target = Some("paper".into());
        assert_eq!(misdirected(&r, "paper", "order for bot b", false), None);
        r.target = Some("https://api.example.com:443".into());
        r.status = "sending".into();
        let m = misdirected(&r, "https://other.example.com:443", "order for bot b", true).unwrap();
        assert!(m.contains("now delivers bot b to https://other.example.com:443"), "{m}");
        assert!(m.contains("may have reached https://api.example.com:443: check the position there"), "{m}");
    }

    #[test]
    fn a_row_past_its_deadline_is_stale_and_says_how_old() {
        let mut r = row(None);
        r.created_ms = 10_000;
        r.deadline_ms = Some(70_000);
        assert_eq!(stale(&r, "order for bot b", 70_000), None, "fresh up to its deadline");
        let m = stale(&r, "order for bot b", 95_500).expect("stale after it");
        assert!(m.contains("85.5 s old, past its deadline of 60.0 s"), "{m}");
        let d = expired(&r, m);
        assert_eq!(d.status, "expired");
        assert_eq!(d.log.unwrap().records[0].0, Level::Error);
        r.deadline_ms = None;
        assert_eq!(stale(&r, "cancel", i64::MAX), None, "a row without a deadline never expires");
    }

    #[test]
    fn deadlines_follow_the_order_type_and_cancels_have_none() {
        let f = crate::app::Freshness { market_ttl_ms: 60_000, limit_ttl_ms: 3_600_000, ..Default::default() };
        assert_eq!(f.deadline(RequestKind::Place, Some(OrderType::Market), 5), Some(60_005));
        assert_eq!(f.deadline(RequestKind::Replace, Some(OrderType::Limit), 5), Some(3_600_005));
        assert_eq!(f.deadline(RequestKind::Place, None, 5), Some(60_005));
        assert_eq!(f.deadline(RequestKind::Cancel, Some(OrderType::Market), 5), None);
    }

    /// A Tradier bot holding 10 AAPL long with a working exit 1001, and a CLOSE received by the run before this one
    /// 2 minutes ago, stored as a cancel of 1001 then a sell after it (its deadline moved ahead when `fresh`): the
    /// app, its store and the cancel row, still `pending` as that run left it.
    async fn earlier_runs_close(
        name: &str,
        base_url: &str,
        fresh: bool,
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>, OutboxRow) {
        use crate::store::Mark;
        let (dir, store) = temp_store(name);
        let app =
            app_with_bots(&dir, &store, &format!(r#"{{"tt": {{"delivery": "http", "base_url": "{base_url}"}}}}"#));
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        let broker = cancel_and_place_broker();
        v["bots"] = serde_json::json!([{"id": "tt", "broker": broker.as_str(), "account_id": "5WT00001",
                                        "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let exit = paper_book_order("1001", "AAPL", "long", "exit", "180");
        let pos = held_long("AAPL", 10);
        let before = BotState { positions: vec![pos], working_orders: vec![exit], ..Default::default() };
        hold_book(&app, &s, before);
        let token = v["token_hash"].as_str().unwrap().to_owned();
        let at = now_ms() - 120_000;
        let body = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
        let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
        let mut rows = app.outbox_rows("demo-equities", &mut out, at);
        if fresh {
            for r in rows.iter_mut().filter(|r| r.deadline_ms.is_some()) {
                r.deadline_ms = Some(now_ms() + 60_000);
            }
        }
        app.writer.outbox(Mark { strategy: "demo-equities".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        let rows = app.reader.open_rows("demo-equities", "tt", 10).unwrap();
        let cancel = rows.iter().find(|r| r.kind == "cancel").unwrap().clone();
        let close = rows.iter().find(|r| r.kind == "place").unwrap();
        assert_eq!(close.after.as_deref(), Some(cancel.client_order_id.as_str()));
        assert!(stored_before_start(&cancel, started_ms()));
        (dir, store, app, cancel)
    }

    /// The run before a restart sent a CLOSE's cancel of the exit (the broker pulled it) and stopped before the
    /// cancel's `done` was stored; restarted past the close's deadline, the cancel was failed unsent as making way
    /// for nothing, its exit called "left working as it was" while the position stood without it. Cancels are never
    /// marked `sending`, so the guard for an earlier run's row never held for them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_make_way_cancel_is_not_called_left_working() {
        let (dir, store, app, cancel) = earlier_runs_close("earlier-cancel", "http://127.0.0.1:9", false).await;
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert!(
            !d.result.contains("left working as it was"),
            "an earlier run's cancel may have pulled the exit already, yet: {}",
            d.result
        );
        assert!(d.result.contains("may have sent this cancel") && d.result.contains("1001"), "{}", d.result);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// As above with the close still fresh: the earlier run's cancel is sent again, refused (its order gone), and
    /// the order cannot be read back. The refusal was taken as the broker's plain answer, though the repeat's
    /// refusal may be the first attempt's doing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_cancel_refused_on_its_resend_is_not_called_plainly_refused() {
        let (port, _) = refusing_broker().await;
        let url = format!("http://127.0.0.1:{port}");
        let (dir, store, app, cancel) = earlier_runs_close("earlier-cancel-refused", &url, true).await;
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert!(d.result.contains("an earlier attempt may have reached it"), "{}", d.result);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A Tastytrade bot holding 10 AAPL long whose exit 1001 an earlier run's MODIFY replaced by 1002
    /// (noted in the state); a CLOSE decided against 1001 two minutes ago, stored as cancel 1001 then a market sell.
    /// The earlier run re-aimed the cancel at 1002 and the broker pulled 1002 (both orders read back Cancelled,
    /// 1001 naming its successor 1002), then it stopped before storing `done`. Restarted past the close's deadline, the
    /// read-back asked for 1001 and reported its replacement 1002 "may still be working" while 1002 was gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_reaimed_cancel_is_read_back_at_the_order_it_was_aimed_at() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen_by = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let seen = Arc::clone(&seen_by);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, _)) = next_request(&mut conn, &mut got).await {
                        let mut words = first.split(' ');
                        let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
                        seen.lock().unwrap().push(format!("{method} {path}"));
                        let id = path.rsplit('/').next().unwrap_or_default().to_owned();
                        let successor = if id == "1001" { r#","replacing-order-id":1002"# } else { "" };
                        let price = if id == "1001" { "180.0" } else { "181.0" };
                        let answer = format!(
                            r#"{{"data":{{"id":{id},"account-number":"5WT00001","time-in-force":"Day","order-type":"Limit","size":10,"underlying-symbol":"AAPL","underlying-instrument-type":"Equity","price":"{price}","price-effect":"Credit","status":"Cancelled","cancellable":false,"editable":false,"edited":false{successor},"legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":10,"remaining-quantity":10,"action":"Sell to Close","fills":[]}}]}}}}"#
                        );
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                            answer.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let url = format!("http://127.0.0.1:{port}");
        let (dir, store, app, cancel) = earlier_runs_close("earlier-cancel-reaimed", &url, false).await;
        let before = app.bot_state("demo-equities", "tt");
        assert_eq!(cancel.order_id.as_deref(), Some("1001"));
        // The earlier run's MODIFY (delivered before the cancel): 1001 replaced by 1002 at 181.
        let mut after = before.clone();
        let mut repriced = stored_order(&cancel).unwrap();
        repriced.limit_price = Some("181".parse().unwrap());
        assert!(after.replaced("1001", Some("1002".into()), &repriced));
        app.set_bot_state("demo-equities", "tt", after);
        // What the earlier run sent the cancel to.
        let aimed = reaimed(&app, &cancel, stored_order(&cancel).as_ref()).await;
        assert_eq!(aimed.as_ref().and_then(|(r, _)| r.order_id.as_deref()), Some("1002"));
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert!(
            d.result.contains("stands without it"),
            "exit 1002 (what the cancel was aimed at) is gone, the position has no exit, yet: {}; reads {seen:?}",
            d.result
        );
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An earlier run's make-way cancel read back at a broker down at the restart: the read-back waited between its
    /// reads holding the delivery's permit (3 s a row), so one broker's outage held permits other bots' orders
    /// waited for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_read_back_at_a_down_broker_gives_up_its_permit_while_waiting() {
        let (dir, store, app, cancel) = earlier_runs_close("earlier-cancel-permit", "http://127.0.0.1:9", false).await;
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let limit = Arc::new(Semaphore::new(1));
        let slots = Slots { limit: Arc::clone(&limit), host: None };
        let held = slots.take().await;
        let permit = Arc::new(Mutex::new(Permit { slots, held }));
        let probe = Arc::clone(&limit);
        let watcher = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            probe.available_permits()
        });
        let d = PERMIT.scope(permit, deliver(&app, &lease, cancel)).await.unwrap();
        let free_midway = watcher.await.unwrap();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert_eq!(free_midway, 1, "the delivery only waits on a down broker, yet holds the permit");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// An earlier run's make-way cancel read back at a broker that takes the connection and never answers: each
    /// read lasted the bot's whole timeout (10 s), past the read-back's 3 s, holding the delivery's permit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_read_back_at_a_silent_broker_ends_with_its_window() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let url = format!("http://127.0.0.1:{port}");
        let (dir, store, app, cancel) = earlier_runs_close("earlier-cancel-silent", &url, false).await;
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let started = std::time::Instant::now();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        let took = started.elapsed();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert!(d.result.contains("could not be read back"), "{}", d.result);
        assert!(took < CANCEL_CONFIRM + Duration::from_secs(2), "the read-back took {took:?}: {}", d.result);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_row_gives_back_the_order_it_stored() {
        let json = r#"{"asset_class":"equity","symbol":"AAPL","intent":"open_long","side":"buy","quantity":5,
            "order_type":"limit","limit_price":190.10,"duration":"day","legs":[],"client_order_id":"swh-1",
            "reference_price":190.10}"#;
        let o = stored_order(&row(Some(json))).expect("the Outcome's order shape reads");
        assert_eq!((o.symbol.as_str(), o.limit_price.map(|p| p.to_string())), ("AAPL", Some("190.10".into())));
        assert_eq!(serde_json::to_value(&o).unwrap(), serde_json::from_str::<serde_json::Value>(json).unwrap());
    }

    #[test]
    fn an_old_row_reads_as_unknown_without_stopping() {
        // What versions before the Outcome carried its orders stored.
        let old = r#"{"instrument":"AAPL","direction":"long","open":true,"order_type":"market","limit_price":null,
            "quantity":"10","duration":"day","fill_price":"190.125","option":false}"#;
        assert!(stored_order(&row(Some(old))).is_none());
        assert!(stored_order(&row(Some("not json"))).is_none());
        assert!(stored_order(&row(None)).is_none());
    }

    /// A cancel's size at its decision is stored beside its order, which still reads as before; marked again (a cancel
    /// re-aimed at a replacement) it holds the new size alone. A row stored before the mark has none.
    #[test]
    fn a_cancels_size_at_decision_reads_back_beside_its_order() {
        let order = order_json("close_long", "limit", 7, "190.10");
        assert_eq!(size_at_decision(&row(Some(&order))), None);
        let marked = mark_size_at_decision(order.clone(), "10".parse().unwrap());
        let r = row(Some(&marked));
        assert_eq!(size_at_decision(&r), Some("10".parse().unwrap()));
        assert_eq!(stored_order(&r), stored_order(&row(Some(&order))));
        let again = row(Some(&mark_size_at_decision(marked, "0.015".parse().unwrap())));
        assert_eq!(size_at_decision(&again), Some("0.015".parse().unwrap()));
        assert_eq!(mark_size_at_decision("not json".into(), 1.into()), "not json");
    }

    /// Runs a paper bot `p` of strategy `s`, its book `book`, through `rows` (stored as one commit), until none is
    /// open: the dispatcher, its store and its directory, for the test to read the book and clean up.
    async fn run_paper_rows(
        name: &str,
        book: BotState,
        rows: Vec<OutboxRow>,
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>) {
        use crate::store::Mark;
        let (dir, store) = temp_store(name);
        let app = app_with_bots(&dir, &store, "{}");
        app.set_bot_state("s", "p", book);
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: now_ms(), key: None }, rows, None).await.unwrap();
        app.dispatcher.wake(&app, "s", "p");
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        while !app.reader.open_rows("s", "p", 10).unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < until, "the paper rows are still open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        (dir, store, app)
    }

    /// A re-size on paper where a size cannot change in place (a cancel, then a new order standing in) and a CANCEL
    /// of the same entry decided before it was delivered: the CANCEL was refused (its order already pulled) and the
    /// re-size's new entry worked on. At a broker the CANCEL is aimed at the new order; so it is on paper.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_decided_during_a_paper_re_size_pulls_the_new_order() {
        let at = now_ms();
        let mut book = BotState { next_id: 1, ..Default::default() };
        book.rest("paper-1".into(), &serde_json::from_str(&order_json("open_long", "limit", 10, "400")).unwrap());
        let mut pull = paper_row("cancel", Some("paper-1"), Some(&order_json("open_long", "limit", 10, "400")), None);
        pull.client_order_id = "m1".into();
        pull.created_ms = at;
        let mut place = paper_row(
            "place",
            None,
            Some(&mark_stands_in(order_json("open_long", "limit", 5, "400"), true, true)),
            Some(at + 60_000),
        );
        place.client_order_id = "m2".into();
        place.created_ms = at;
        place.after = Some("m1".into());
        let mut cancel = paper_row("cancel", Some("paper-1"), Some(&order_json("open_long", "limit", 10, "400")), None);
        cancel.client_order_id = "x1".into();
        cancel.created_ms = at + 1;
        let (dir, store, app) = run_paper_rows("reaim", book, vec![pull, place, cancel]).await;
        let st = app.bot_state("s", "p");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        assert!(st.working_orders.is_empty(), "{:?}", st.working_orders);
    }

    /// The same with a CLOSE decided during a re-size of the position's exit: its cancel of the old exit was refused
    /// and the close held back, the position left open with the new exit working, though the trader was answered
    /// processed. The cancel pulls the new exit and the position is closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_decided_during_a_paper_re_size_of_its_exit_closes_the_position() {
        let at = now_ms();
        let position = held_long("AAPL", 10);
        let mut book = BotState { positions: vec![position], next_id: 3, ..Default::default() };
        let exit = order_json("close_long", "limit", 10, "530");
        book.rest("paper-3".into(), &serde_json::from_str(&exit).unwrap());
        let mut pull = paper_row("cancel", Some("paper-3"), Some(&exit), None);
        pull.client_order_id = "m1".into();
        pull.created_ms = at;
        let resized = mark_stands_in(order_json("close_long", "limit", 5, "530"), true, true);
        let mut place = paper_row("place", None, Some(&resized), Some(at + 60_000));
        place.client_order_id = "m2".into();
        place.created_ms = at;
        place.after = Some("m1".into());
        let mut cancel = paper_row("cancel", Some("paper-3"), Some(&exit), None);
        cancel.client_order_id = "x1".into();
        cancel.created_ms = at + 1;
        let close_order = mark_stands_in(order_json("close_long", "market", 10, "529"), false, false);
        let mut close = paper_row("place", None, Some(&close_order), Some(at + 60_000));
        close.client_order_id = "x2".into();
        close.created_ms = at + 1;
        close.after = Some("x1".into());
        let (dir, store, app) = run_paper_rows("reaim-close", book, vec![pull, place, cancel, close]).await;
        let st = app.bot_state("s", "p");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        assert!(st.working_orders.is_empty(), "{:?}", st.working_orders);
        assert!(st.positions.is_empty(), "{:?}", st.positions);
    }

    /// A CLOSE on paper (cancel the exit, then the close after it) delivered only after the close's deadline (the
    /// server down meanwhile): the cancel was filled in a run, unchecked, and the close expired, leaving the
    /// position with no exit. As at a broker, the cancel is not sent when all it made way for has expired.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_that_only_made_way_for_an_expired_close_leaves_the_exit_on_paper() {
        let at = now_ms();
        let position = held_long("AAPL", 10);
        let mut book = BotState { positions: vec![position], next_id: 1, ..Default::default() };
        book.rest("paper-1".into(), &serde_json::from_str(&order_json("close_long", "limit", 10, "200")).unwrap());
        let mut cancel =
            paper_row("cancel", Some("paper-1"), Some(&order_json("close_long", "limit", 10, "200")), None);
        cancel.client_order_id = "c1".into();
        cancel.created_ms = at - 120_000;
        let mut close =
            paper_row("place", None, Some(&order_json("close_long", "market", 10, "190")), Some(at - 60_000));
        close.client_order_id = "c2".into();
        close.created_ms = at - 120_000;
        close.after = Some("c1".into());
        let (dir, store, app) = run_paper_rows("madeway", book, vec![cancel, close]).await;
        let st = app.bot_state("s", "p");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        assert_eq!(st.working_orders.iter().map(|o| o.id.as_str()).collect::<Vec<_>>(), ["paper-1"]);
        assert_eq!(st.positions.len(), 1, "{:?}", st.positions);
    }

    /// A working order of a paper book, as an operator or a strategy file writes it.
    fn paper_book_order(
        id: &str,
        instrument: &str,
        direction: &str,
        intent: &str,
        price: &str,
    ) -> crate::paper::OrderRec {
        crate::paper::OrderRec {
            id: id.into(),
            instrument: instrument.into(),
            direction: direction.into(),
            intent: intent.into(),
            order_type: "limit".into(),
            price: Some(price.parse().unwrap()),
            quantity: 10.into(),
            size_known: true,
            notional: None,
            filled: Default::default(),
            duration: "day".into(),
            state: "open".into(),
            legs: Vec::new(),
        }
    }

    /// The demo strategy (limit orders) with bot `tt` on paper, though named at a broker whose re-size is a cancel
    /// and a new order: `book` in the engine and the bot's state, `bodies` decided one after the other before any is
    /// delivered, then delivered until none is open. The bot's state after, and each row's status and result.
    async fn paper_re_size_run(name: &str, book: BotState, bodies: &[&str]) -> (BotState, Vec<(String, String)>) {
        paper_re_size_run_then(name, book, bodies, None).await
    }

    /// [`paper_re_size_run`], with the bot's state set to `meanwhile` (when given) after the decisions and before
    /// any row is delivered (an order filled between the two).
    async fn paper_re_size_run_then(
        name: &str,
        book: BotState,
        bodies: &[&str],
        meanwhile: Option<BotState>,
    ) -> (BotState, Vec<(String, String)>) {
        use crate::store::Mark;
        let (dir, store) = temp_store(name);
        let app = app_with_bots(&dir, &store, "{}");
        let broker = BrokerId::ALL
            .into_iter()
            .find(|b| !b.broker().replace_keeps_id() && !b.broker().replace_changes_quantity())
            .expect("a broker that re-sizes by cancel and place");
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["bots"] = serde_json::json!([{"id": "tt", "broker": broker.as_str(), "account_id": "5WT00001",
                                        "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        hold_book(&app, &s, book);
        let token = v["token_hash"].as_str().unwrap().to_owned();
        for (n, body) in bodies.iter().enumerate() {
            let at = now_ms() + n as i64;
            let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
            let rows = app.outbox_rows("demo-equities", &mut out, at);
            assert!(!rows.is_empty(), "{body} decided nothing to send");
            let mark = Mark { strategy: "demo-equities".into(), ts_ms: at, key: None };
            app.writer.outbox(mark, rows, None).await.unwrap();
        }
        if let Some(st) = meanwhile {
            app.set_bot_state("demo-equities", "tt", st);
        }
        app.dispatcher.wake(&app, "demo-equities", "tt");
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        while !app.reader.open_rows("demo-equities", "tt", 10).unwrap().is_empty() {
            assert!(tokio::time::Instant::now() < until, "the paper rows are still open");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        let mut rows = app.reader.strategy_outbox("demo-equities", 50).unwrap();
        rows.sort_by_key(|(r, _)| r.id);
        let results = rows.into_iter().map(|(r, result)| (r.status, result.unwrap_or_default())).collect();
        let st = app.bot_state("demo-equities", "tt");
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        (st, results)
    }

    /// A paper book spelled as the docs say paper reads it (`NASDAQ:AAPL`, from a strategy file): a CLOSE decided
    /// during a re-size of the position's exit. The re-size's new exit was not noted as standing in for the pulled
    /// one (the note's instrument compared as text), so the CLOSE's cancel was refused, the close held back, and the
    /// position kept the 5-lot exit alone, though the sender was answered processed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_during_a_paper_re_size_of_a_prefixed_exit_closes_the_position() {
        let book = BotState {
            positions: vec![held_long("NASDAQ:AAPL", 10)],
            working_orders: vec![paper_book_order("w1", "NASDAQ:AAPL", "long", "exit", "530")],
            ..Default::default()
        };
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","target":"exit","quantity":5}"#,
            r#"{"ticker":"AAPL","action":"CLOSE","direction":"long","price":520}"#,
        ];
        let (st, results) = paper_re_size_run("paper-prefixed-close", book, &bodies).await;
        assert!(results.iter().all(|(status, _)| status == "done"), "{results:#?}");
        // The strategy closes with a limit order: the close's own exit rests, and the re-sized one is gone.
        let exits: Vec<_> = st
            .working_orders
            .iter()
            .map(|o| (o.intent.as_str(), o.quantity.to_string(), o.price.map(|p| p.to_string())))
            .collect();
        assert_eq!(exits, [("exit", "10".to_owned(), Some("520".to_owned()))], "{results:#?}");
    }

    /// The same for a CANCEL decided during a re-size of an entry whose side was set as `Long` (the admin API keeps
    /// the operator's case): the re-sized entry worked on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_during_a_paper_re_size_of_a_capitalised_entry_pulls_the_new_order() {
        let book = BotState {
            working_orders: vec![paper_book_order("1001", "AAPL", "Long", "entry", "150")],
            ..Default::default()
        };
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
        ];
        let (st, results) = paper_re_size_run("paper-capital-cancel", book, &bodies).await;
        assert!(st.working_orders.is_empty(), "{:?}\n{results:#?}", st.working_orders);
    }

    /// A CANCEL, then an OPEN with `cancel: true`, both decided against entry 1001 before either was delivered: the
    /// OPEN's pull of 1001 was refused on paper (the CANCEL had pulled it) and its new entry held back. At a broker
    /// that cancel reads 1001 back cancelled, no re-size waits for it, and it is done: the entry is placed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_first_open_after_a_paper_cancel_places_its_entry() {
        let book = BotState {
            working_orders: vec![paper_book_order("1001", "AAPL", "long", "entry", "150")],
            ..Default::default()
        };
        let bodies = [
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
            r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":152,"cancel":true}"#,
        ];
        let (st, results) = paper_re_size_run("paper-cancel-first", book, &bodies).await;
        let prices: Vec<_> = st.working_orders.iter().map(|o| o.price.map(|p| p.to_string())).collect();
        assert_eq!(prices, [Some("152".to_owned())], "{:?}\n{results:#?}", st.working_orders);
    }

    /// An OPEN LONG with `cancel: true` decided while a long entry (1001) and a short entry (2001) work, then a CANCEL
    /// LONG decided before either was delivered. The new entry waits for the last cancel of the chain; when that was
    /// the short entry's, it stood in for nothing (a stand-in is of the pulled order's side), so the CANCEL LONG,
    /// finding 1001 pulled, was done and the new long entry kept working. The entry's own side is pulled last, and
    /// the CANCEL pulls the new entry, as with the long entry alone in the book (the control).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_decided_meanwhile_pulls_the_cancel_first_entry_with_both_sides_working() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":152,"cancel":true}"#,
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
        ];
        // Control: one side working, the CANCEL decided meanwhile pulls the new entry.
        let book = BotState {
            working_orders: vec![paper_book_order("1001", "AAPL", "long", "entry", "150")],
            ..Default::default()
        };
        let (st, results) = paper_re_size_run("pulls-one-side", book, &bodies).await;
        assert!(st.working_orders.is_empty(), "control: {:?}\n{results:#?}", st.working_orders);
        // Both sides working (a bracket's buy and sell entries).
        let book = BotState {
            working_orders: vec![
                paper_book_order("1001", "AAPL", "long", "entry", "150"),
                paper_book_order("2001", "AAPL", "short", "entry", "140"),
            ],
            ..Default::default()
        };
        let (st, results) = paper_re_size_run("pulls-both-sides", book, &bodies).await;
        assert!(
            st.working_orders.is_empty(),
            "the CANCEL LONG left the new long entry working: {:?}\n{results:#?}",
            st.working_orders
        );
    }

    /// An OPEN LONG with `cancel: true` decided while a long entry (1001) and a short entry (2001) work; one of them
    /// fills before the pulls are delivered. Its cancel fails, and the new entry is not sent; the other pull goes all
    /// the same, whichever side failed first: held back behind the failed one (as a CLOSE's pulls of exits are),
    /// the other side's entry kept working beside the position, free to fill into it, and its row spoke of "the
    /// position's working exits" and "the close". Nor does the new entry go after a failed pull that was not the
    /// last of its chain.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_pull_of_one_side_keeps_the_other_sides_entry_working() {
        let bodies =
            [r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"limit","price":152,"cancel":true}"#];
        let book = BotState {
            working_orders: vec![
                paper_book_order("1001", "AAPL", "long", "entry", "150"),
                paper_book_order("2001", "AAPL", "short", "entry", "140"),
            ],
            ..Default::default()
        };
        let held_short = crate::paper::PositionRec { direction: "short".into(), ..held_long("AAPL", 10) };
        // The long entry filled between the decision and the delivery (its pull is the chain's last), then the short
        // one (its pull the first).
        for (n, (position, left)) in [(held_long("AAPL", 10), "2001"), (held_short, "1001")].into_iter().enumerate() {
            let filled = BotState {
                positions: vec![position],
                working_orders: vec![book.working_orders.iter().find(|o| o.id == left).unwrap().clone()],
                ..Default::default()
            };
            let name = format!("pulls-failed-{n}");
            let (st, results) = paper_re_size_run_then(&name, book.clone(), &bodies, Some(filled)).await;
            let working: Vec<&str> = st.working_orders.iter().map(|o| o.id.as_str()).collect();
            assert!(working.is_empty(), "{left} still works beside the position: {working:?}\n{results:#?}");
            let statuses: Vec<&str> = results.iter().map(|(s, _)| s.as_str()).collect();
            let failed = if n == 0 { ["done", "failed", "failed"] } else { ["failed", "done", "failed"] };
            assert_eq!(statuses, failed, "{results:#?}");
            let said = &results[2].1;
            assert!(said.contains("it follows the cancel of working order"), "{said}");
            for word in ["exits", "the close"] {
                assert!(results.iter().all(|(_, r)| !r.contains(word)), "{word}: {results:#?}");
            }
        }
    }

    /// A re-size decided against entry 1001 before a CANCEL of it was delivered: the re-size's cancel, finding 1001
    /// pulled by the CANCEL, is still refused on paper (as at a broker, [`taken_out_before`]), and its new entry
    /// is held back: placed, it would bring back the entry the trader pulled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paper_re_size_after_a_cancel_of_its_entry_stays_held_back() {
        let book = BotState {
            working_orders: vec![paper_book_order("1001", "AAPL", "long", "entry", "150")],
            ..Default::default()
        };
        let bodies = [
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
        ];
        let (st, results) = paper_re_size_run("paper-cancel-re-size", book, &bodies).await;
        assert!(st.working_orders.is_empty(), "{:?}\n{results:#?}", st.working_orders);
        assert!(results[1].1.contains("already pulled by the cancel"), "{results:#?}");
    }

    /// A market re-size at a broker whose re-size is a cancel and a new order, of an entry the book spells `MKT`
    /// (set through the admin API): the new order was not recorded as standing in for the pulled one (the type
    /// compared as text), and a CANCEL decided meanwhile reached the pulled order while the new one filled.
    #[test]
    fn a_market_re_size_stands_in_for_a_pulled_order_spelled_otherwise() {
        let mut pulled = paper_book_order("1001", "AAPL", "long", "entry", "150");
        pulled.order_type = "MKT".into();
        pulled.price = None;
        let state = BotState {
            pulled: vec![crate::paper::Pulled { by: "m1".into(), order: pulled, at_ms: 0, stood_in: None }],
            ..Default::default()
        };
        let order = mark_stands_in(order_json("open_long", "market", 20, "150"), true, true);
        let mut place = row(Some(&order));
        place.after = Some("m1".into());
        assert!(stands_in_for_pulled(&state, &place, &stored_order(&place).unwrap()));
    }

    /// A Tastytrade broker that takes a cancel at once and answers each read of order 1001 `read_delay` after it is
    /// asked: `Cancel Requested` for the first `pending_reads`, then `Cancelled` with nothing filled.
    async fn slowly_reading_broker(read_delay: Duration, pending_reads: usize) -> u16 {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let reads = Arc::new(AtomicUsize::new(0));
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let reads = Arc::clone(&reads);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, _)) = next_request(&mut conn, &mut got).await {
                        let answer = if first.starts_with("DELETE") {
                            r#"{"data":{"id":1001,"status":"Cancel Requested"}}"#.to_owned()
                        } else {
                            tokio::time::sleep(read_delay).await;
                            let pending = reads.fetch_add(1, Ordering::SeqCst) < pending_reads;
                            let (status, cancellable) =
                                if pending { ("Cancel Requested", true) } else { ("Cancelled", false) };
                            format!(
                                r#"{{"data":{{"id":1001,"account-number":"5WT00001","time-in-force":"Day","order-type":"Limit","size":10,"underlying-symbol":"AAPL","underlying-instrument-type":"Equity","price":"150.0","price-effect":"Debit","status":"{status}","cancellable":{cancellable},"editable":false,"edited":false,"legs":[{{"instrument-type":"Equity","symbol":"AAPL","quantity":10,"remaining-quantity":10,"action":"Buy to Open","fills":[]}}]}}}}"#
                            )
                        };
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                            answer.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    /// A re-size's cancel the broker took, its order read back as pulled, nothing filled, by a broker slow to
    /// answer reads (3.5 s for one; 1.6 s each for two, the second begun near the window's end): the reads were cut
    /// at the 3 s window meant for an earlier run's read-back, the cancel failed as not confirmed, and the re-size's
    /// new order (a CLOSE's close, likewise) was never sent while the old order was gone. A cancel's own
    /// confirmation keeps the bot's timeout.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_read_back_answered_after_the_window_still_confirms_it() {
        for (name, delay, pending) in [("slow-read", 3500, 0), ("slow-second-read", 1600, 1)] {
            let port = slowly_reading_broker(Duration::from_millis(delay), pending).await;
            let bodies = [
                r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
                r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            ];
            let (dir, store, app, _, stored) = re_size_fixture_at(name, bodies, port, OrderType::Limit).await;
            let cancel = stored[0].clone();
            assert_eq!(cancel.kind, "cancel");
            let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
            let d = deliver(&app, &lease, cancel).await.unwrap();
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert_eq!(d.status, "done", "{name}: read back Cancelled, nothing filled: {}", d.result);
        }
    }

    /// An entry on the wire when the strategy's `account_id` is edited, accepted at the old account after the reload
    /// dropped the bot's state: the order is the old account's, so the new account's state does not record it (the
    /// engine would cancel or modify it at the new account, or hold a CLOSE back behind it), and the row is done with
    /// an ERROR log row that names the order and both accounts for the operator.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_order_accepted_at_the_old_account_is_not_the_new_accounts() {
        let (port, _seen, _book) =
            re_sizing_broker_answering_after(0, Duration::from_millis(1500), Duration::ZERO).await;
        let bodies =
            [r#"{"ticker":"MSFT","action":"buy","price":300}"#, r#"{"ticker":"SPY","action":"buy","price":400}"#];
        let (dir, store, app, _, stored) =
            re_size_fixture_at("acct-edit-in-flight", bodies, port, OrderType::Limit).await;
        let row = stored.iter().find(|r| r.body.windows(4).any(|w| w == b"MSFT")).unwrap().clone();
        assert!(row.path.contains("5WT00001"));
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let (a, l) = (Arc::clone(&app), lease);
        let sending = tokio::spawn(async move {
            let d = deliver(&a, &l, row).await;
            (d, l)
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["token_hash"] = serde_json::json!("e".repeat(64));
        v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                        "account_id": "5WT00002", "sizing": {"fixed_quantity": "10"}}]);
        app.apply_snapshot(v.to_string().as_bytes()).map_err(|e| format!("{e:?}")).unwrap();
        assert!(app.bot_state("demo-equities", "tt").working_orders.is_empty(), "dropped on the edit");
        let (d, lease) = sending.await.unwrap();
        let d = d.unwrap();
        assert_eq!(d.status, "done");
        assert!(d.state.is_none(), "no state stored for the row: {:?}", d.state);
        let st = app.bot_state("demo-equities", "tt");
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert!(
            st.working_orders.is_empty(),
            "old account's order {:?} in the new account's state (source {:?})",
            st.working_orders.iter().map(|o| &o.id).collect::<Vec<_>>(),
            st.source
        );
        let records = d.log.unwrap().records;
        let (level, said) = &records[0];
        assert_eq!(*level, Level::Error, "{said}");
        for named in ["1002", "5WT00001", "5WT00002"] {
            assert!(said.contains(named) && d.result.contains(named), "{named} not named: {said}");
        }
    }

    /// A state a delivery made from one with no source (a bot's first orders before any read of its account) was
    /// stored unstamped, which passes for a state of an older version: after the bot's `account_id` was edited with
    /// the server stopped, it was loaded and decided against at the new account, its order ids cancelled, changed or
    /// waited for there. Stamped with where the bot traded, it is read anew instead.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_state_a_delivery_made_says_which_account_it_is() {
        let (port, _seen, _book) = re_sizing_broker_answering_after(0, Duration::ZERO, Duration::ZERO).await;
        let bodies =
            [r#"{"ticker":"MSFT","action":"buy","price":300}"#, r#"{"ticker":"SPY","action":"buy","price":400}"#];
        let (dir, store, app, before, stored) =
            re_size_fixture_at("delivery-stamps-source", bodies, port, OrderType::Limit).await;
        assert!(before.source.is_none(), "the fixture's state is unstamped");
        let row = stored.iter().find(|r| r.body.windows(4).any(|w| w == b"MSFT")).unwrap().clone();
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, row).await.unwrap();
        lease.give_back().await;
        assert_eq!(d.status, "done", "{}", d.result);
        assert!(d.state.is_some(), "the accepted limit order is recorded");
        let kept = app.bot_state("demo-equities", "tt");
        assert!(kept.working_orders.len() > before.working_orders.len(), "{kept:?}");
        let source = kept.source.clone().expect("stamped with where the bot trades");
        assert_eq!((source.broker.as_str(), source.account.as_str()), (cancel_and_place_broker().as_str(), "5WT00001"));
        assert!(app.state_fits("demo-equities", "tt", &kept), "its own account's state is used");
        // The account edited (as with the server stopped, the stored state is then judged against the new one).
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["token_hash"] = serde_json::json!("e".repeat(64));
        v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                        "account_id": "5WT00002", "sizing": {"fixed_quantity": "10"}}]);
        app.apply_snapshot(v.to_string().as_bytes()).map_err(|e| format!("{e:?}")).unwrap();
        let fits = app.state_fits("demo-equities", "tt", &kept);
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert!(!fits, "account 5WT00001's working orders were used at 5WT00002 (source {:?})", kept.source);
    }

    /// An SPX vertical's exit as a broker lists it: one unit of 2:2 (quantity 1, two contracts a leg, as this library
    /// placed a 2:2 rule before it sent simplest ratios), read back cancelled, nothing filled.
    const EXIT_LISTED_2_2: &str = r#"{"session":"NORMAL","duration":"GOOD_TILL_CANCEL","orderType":"NET_CREDIT",
        "complexOrderStrategyType":"VERTICAL","quantity":1.0,"filledQuantity":0.0,
        "remainingQuantity":0.0,"price":2.0,"orderLegCollection":[
        {"orderLegType":"OPTION","legId":1,"instrument":{"assetType":"OPTION",
          "symbol":"SPXW  301220C05800000","putCall":"CALL","underlyingSymbol":"SPX"},
         "instruction":"SELL_TO_CLOSE","positionEffect":"CLOSING","quantity":2.0},
        {"orderLegType":"OPTION","legId":2,"instrument":{"assetType":"OPTION",
          "symbol":"SPXW  301220C05850000","putCall":"CALL","underlyingSymbol":"SPX"},
         "instruction":"BUY_TO_CLOSE","positionEffect":"CLOSING","quantity":2.0}],
        "orderStrategyType":"SINGLE","orderId":1004055540391,"cancelable":false,
        "editable":false,"status":"CANCELED","enteredTime":"2026-03-03T14:33:20+0000",
        "accountNumber":12345678}"#;

    /// A CLOSE of an SPX vertical whose take-profit the broker lists as one unit of 2:2 ([`EXIT_LISTED_2_2`]). The
    /// exit's cancel is built in simplest ratios (two units of 1:1), and its read-back compared that 2 with the 1
    /// the broker lists: the cancel, taken and read back cancelled with nothing filled, failed as "filled 1 since
    /// the decision", and the close waiting for it was held back: the position stood with neither exit nor close.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_of_an_exit_listed_with_a_common_factor_read_back_cancelled_is_done() {
        let port = answering_cancel_and_read_back(EXIT_LISTED_2_2.to_owned()).await;
        let (dir, store, app, _, cancel) = close_behind_an_exit_listed_2_2("cancel-2-2", port).await;
        let lease = app.leases.take("spx", "sw").await.unwrap().unwrap();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(d.status, "done", "read back cancelled, nothing filled: {}", d.result);
    }

    /// The same exit read back cancelled with nothing filled, in an answer that states no size of the order (read as
    /// a count of zero). What remained was taken as 0 less what filled, and the cancel failed as "filled 2 since the
    /// decision": the close waiting for it was held back, the position left with neither exit nor close. Nothing
    /// filled, the cancel is done; something filled with no size to count from, it is not confirmed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_read_back_with_no_size_is_done_when_nothing_filled() {
        let no_size = EXIT_LISTED_2_2.replacen(r#""quantity":1.0,"#, "", 1);
        assert_ne!(no_size, EXIT_LISTED_2_2);
        let port = answering_cancel_and_read_back(no_size.clone()).await;
        let (dir, store, app, _, cancel) = close_behind_an_exit_listed_2_2("cancel-no-size", port).await;
        let lease = app.leases.take("spx", "sw").await.unwrap().unwrap();
        let d = deliver(&app, &lease, cancel).await.unwrap();
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(d.status, "done", "read back cancelled, nothing filled: {}", d.result);
        // Something filled: counted from the size marked at the decision, else not known.
        let read = |filled: &str| BrokerOrder {
            filled_quantity: filled.parse().unwrap(),
            ..BrokerId::ALL.into_iter().find_map(|b| b.broker().parse_order(no_size.as_bytes()).ok()).unwrap()
        };
        let (two, one) = (strategy_webhook::decimal::Decimal::from(2), strategy_webhook::decimal::Decimal::ONE);
        assert_eq!(filled_since_without_count(&read("0"), two, None), Some(0.into()));
        assert_eq!(filled_since_without_count(&read("1"), one, Some(two)), Some(0.into()), "filled before");
        assert_eq!(filled_since_without_count(&read("2"), one, Some(two)), Some(one), "one since");
        assert_eq!(filled_since_without_count(&read("1"), two, None), None);
    }

    /// A broker at loopback that takes every cancel (an empty 200) and answers every read with `read_back`; its port.
    async fn answering_cancel_and_read_back(read_back: String) -> u16 {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let read_back: &'static str = Box::leak(read_back.into_boxed_str());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, _)) = next_request(&mut conn, &mut got).await {
                        let answer = if first.starts_with("DELETE") { "" } else { read_back };
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                            answer.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    /// The same exit's cancel re-aimed at its replacement, which the bot's state lists as the broker does: one unit
    /// of 2:2 (replaced by a version before simplest ratios). The read-back measures against the replacement's size
    /// in the cancel's own units, two of 1:1: taken as listed (1), a replacement read back with one of its two
    /// verticals filled read as nothing filled, and the close sold what was no longer held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancel_re_aimed_at_a_replacement_listed_with_a_common_factor_measures_it_in_its_own_units() {
        let (dir, store, app, before, cancel) = close_behind_an_exit_listed_2_2("reaim-2-2", 9).await;
        let mut after = before.clone();
        let mut repriced = stored_order(&cancel).unwrap();
        repriced.limit_price = Some("1.9".parse().unwrap());
        assert!(after.replaced("1004055540391", Some("1004055540392".into()), &repriced));
        // As a sync lists the replacement: one unit of 2:2.
        let listed = after.working_orders.iter_mut().find(|o| o.id == "1004055540392").expect("the replacement");
        listed.quantity = 1.into();
        listed.legs.iter_mut().for_each(|l| l.ratio = 2);
        app.set_bot_state("spx", "sw", after);
        let (aimed, now_cancelled) = reaimed(&app, &cancel, stored_order(&cancel).as_ref()).await.expect("re-aimed");
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(aimed.order_id.as_deref(), Some("1004055540392"));
        assert_eq!(size_at_decision(&aimed), Some(2.into()), "its size then, in the same units");
        let legs: Vec<u32> = now_cancelled.legs.iter().map(|l| l.ratio).collect();
        assert_eq!((now_cancelled.quantity, legs), (2.into(), vec![1, 1]), "two verticals, as the cancel counts them");
    }

    /// A bot holding two SPX verticals (as the broker's positions read: units the legs' greatest common divisor) and
    /// their take-profit as the broker lists it, one unit of 2:2, at loopback `port`, the bot's broker the one that
    /// reads [`EXIT_LISTED_2_2`] so (picked by what it reads: the server names no broker). A CLOSE decided against
    /// them and stored: its cancel of the take-profit, with the close waiting for it.
    async fn close_behind_an_exit_listed_2_2(
        name: &str,
        port: u16,
    ) -> (std::path::PathBuf, crate::store::Store, Arc<App>, BotState, OutboxRow) {
        use crate::store::Mark;
        const TOKEN: &str = "d4080c65a7ec92cae69c9e5e26b0bdc2bf10f18df4eee5217ef0d1eb5ec3874c";
        let broker = BrokerId::ALL
            .into_iter()
            .find(|b| {
                b.broker()
                    .parse_order(EXIT_LISTED_2_2.as_bytes())
                    .is_ok_and(|o| o.quantity == 1.into() && o.legs.len() == 2 && o.legs.iter().all(|l| l.ratio == 2))
            })
            .expect("a broker that reads the answer as one unit of 2:2");
        let (dir, store) = temp_store(name);
        let file = format!(r#"{{"sw": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let v = serde_json::json!({
            "id": "spx", "token_hash": TOKEN,
            "status": "active", "asset_class": "option", "order_type": "market", "allowed_instruments": ["SPX"],
            "options": {"selection": "internal", "expiration": {"min_days": 0, "max_days": 7},
                        "legs": {"long": [{"side": "call", "action": "buy_to_open", "strike": {"atm_offset": 0}}]}},
            "bots": [{"id": "sw", "broker": broker.as_str(), "account_id": "12345678",
                      "sizing": {"fixed_quantity": "1"}}],
        });
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let leg = |symbol: &str, action: &str, ratio| crate::paper::LegRec {
            symbol: symbol.into(),
            action: action.into(),
            ratio,
        };
        let before = BotState {
            positions: vec![crate::paper::PositionRec {
                instrument: "SPX".into(),
                direction: "long".into(),
                quantity: 2.into(),
                avg_price: None,
                legs: vec![leg("SPXW301220C05800000", "buy_to_open", 1), leg("SPXW301220C05850000", "sell_to_open", 1)],
            }],
            working_orders: vec![crate::paper::OrderRec {
                id: "1004055540391".into(),
                instrument: "SPX".into(),
                direction: "long".into(),
                intent: "exit".into(),
                order_type: "limit".into(),
                price: Some("-2".parse().unwrap()),
                quantity: 1.into(),
                size_known: true,
                notional: None,
                filled: Default::default(),
                duration: "gtc".into(),
                state: "open".into(),
                legs: vec![
                    leg("SPXW301220C05800000", "sell_to_close", 2),
                    leg("SPXW301220C05850000", "buy_to_close", 2),
                ],
            }],
            ..Default::default()
        };
        hold_book(&app, &s, before.clone());
        let at = now_ms();
        let body = r#"{"ticker":"SPX","action":"CLOSE","direction":"long"}"#;
        let mut out = app.engine.deliver(TOKEN.as_bytes(), body.as_bytes(), Some("application/json"), at);
        let rows = app.outbox_rows("spx", &mut out, at);
        app.writer.outbox(Mark { strategy: "spx".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        let stored = app.reader.open_rows("spx", "sw", 10).unwrap();
        let cancel = stored.iter().find(|r| r.kind == "cancel").unwrap_or_else(|| panic!("{}", out.response)).clone();
        assert!(stored.iter().any(|r| r.kind == "place"), "the close waits for the cancel: {stored:?}");
        (dir, store, app, before, cancel)
    }

    /// The broker that re-sizes by a cancel and a new order, whose answers the tests' loopback brokers imitate
    /// (picked by what it does: the server names no broker).
    fn cancel_and_place_broker() -> BrokerId {
        BrokerId::ALL
            .into_iter()
            .find(|b| !b.broker().replace_keeps_id() && !b.broker().replace_changes_quantity())
            .expect("a broker that replaces with a new id and re-sizes by cancel and place")
    }

    /// A long position of `quantity` in `instrument`, as a bot's state holds it.
    fn held_long(instrument: &str, quantity: u32) -> crate::paper::PositionRec {
        crate::paper::PositionRec {
            instrument: instrument.into(),
            direction: "long".into(),
            quantity: quantity.into(),
            avg_price: None,
            legs: Vec::new(),
        }
    }

    /// A place at a broker that refuses a repeated id (never marked `sending`) and a cancel (never marked either),
    /// stored by the run before this one, which may have sent them, failed after a keys swap saying "nothing was
    /// sent": the order (or the cancel of a stop) may stand at the old account, which the operator must check.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_unmarked_rows_under_other_keys_say_they_may_have_gone() {
        use crate::store::Mark;
        let started = started_ms();
        let (dir, store) = temp_store("r5-keys");
        let (port, orders) = refusing_broker().await;
        let file = |key: &str| {
            serde_json::json!({ "k": { "delivery": "http", "base_url": format!("http://127.0.0.1:{port}"),
                                       "headers": { "K-ID": { "value": key } } } })
            .to_string()
        };
        let old = crate::bots::Bots::from_json(file("KEY-OF-ACCOUNT-A").as_bytes(), &dir).unwrap();
        let app = app_with_bots(&dir, &store, &file("KEY-OF-ACCOUNT-B"));
        let at = started - 5_000;
        let stored = |kind: &str, coid: &str| {
            let mut r =
                paper_row(kind, None, Some(&order_json("open_long", "market", 1, "190")), Some(now_ms() + 60_000));
            (r.bot, r.broker, r.client_order_id, r.target) =
                ("k".into(), keyed_broker().as_str().into(), coid.into(), Some(old.target("k").to_owned()));
            (r.method, r.path, r.content_type) = ("POST".into(), "/v2/orders".into(), Some("application/json".into()));
            r.body = br#"{"symbol":"AAPL"}"#.to_vec();
            r.created_ms = at;
            if kind == "cancel" {
                (r.method, r.path, r.content_type, r.order_id) =
                    ("DELETE".into(), "/v2/orders/X1".into(), None, Some("X1".into()));
                r.body = Vec::new();
            }
            r
        };
        let rows = vec![stored("place", "a1"), stored("cancel", "a2")];
        app.writer.outbox(Mark { strategy: "s".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        let rows = app.reader.open_rows("s", "k", 10).unwrap();
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|r| r.status == "pending" && r.created_ms < started_ms()));
        let lease = app.leases.take("s", "k").await.unwrap().unwrap();
        let mut said = Vec::new();
        for row in rows {
            let d = deliver(&app, &lease, row).await.unwrap();
            said.push((d.status, d.result));
        }
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(orders.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing sent now");
        for (status, result) in &said {
            assert_eq!(*status, "failed", "{result}");
            // The run before this one may have sent either: the place (rows at this broker are never marked `sending`)
            // and the cancel (cancels never are). docs/server.md: "A row that was being sent when the server stopped
            // says that the attempt may have reached the old target."
            assert!(
                !result.contains("nothing was sent or filled,") && result.contains("may have reached"),
                "an earlier run's unmarked row is said never sent: {result}"
            );
        }
    }

    /// A CANCEL stored by the run before this one (cancels are never marked `sending`, so that run may have sent
    /// it and had it taken), the strategy's account_id edited across the restart: it failed saying "nothing was
    /// sent", though order 1001 may have been pulled at the old account.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_cancel_after_an_account_edit_says_it_may_have_gone() {
        let started = started_ms();
        let bodies = [
            r#"{"ticker":"AAPL","action":"CANCEL","direction":"long"}"#,
            r#"{"ticker":"MSFT","action":"buy","price":300}"#,
        ];
        let (dir, store, app, _, stored) = re_size_fixture_at("r5-acct-cancel", bodies, 9, OrderType::Limit).await;
        let mut row = stored.iter().find(|r| r.kind == "cancel").expect("the CANCEL's row").clone();
        assert!(row.path.contains("5WT00001"), "{}", row.path);
        // Stored by the run before this one.
        row.created_ms = started - 5_000;
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["token_hash"] = serde_json::json!("e".repeat(64));
        v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                        "account_id": "5WT00002", "sizing": {"fixed_quantity": "10"}}]);
        app.apply_snapshot(v.to_string().as_bytes()).map_err(|e| format!("{e:?}")).unwrap();
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, row).await.unwrap();
        lease.give_back().await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert_eq!(d.status, "failed", "{}", d.result);
        assert!(
            !d.result.contains("nothing was sent,") && d.result.contains("may have reached the old account"),
            "an earlier run's cancel, which may have pulled order 1001 at the old account, is said never sent: {}",
            d.result
        );
    }

    /// The broker whose rows are never marked `sending` (it refuses a repeated id) and whose keys pick the account.
    fn keyed_broker() -> BrokerId {
        BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().accepts_client_order_id() && !b.broker().names_account())
            .expect("such a broker")
    }

    /// A CLOSE's cancel of the position's exit whose close has a second left of its deadline when the cancel's turn
    /// comes (as after a broker outage that held the alert's rows back for most of their 60 s), at a broker whose
    /// answer to the cancel takes 1.5 s: sent, the cancel pulled the exit and the close behind it expired, leaving
    /// the position open without its stop. It is not sent, and says why.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_whose_cancel_went_out_is_not_left_to_expire_behind_it() {
        let (report, sent) =
            close_behind_cancels("cancel-then-expire", &[], 5_000, Duration::from_millis(1500), Duration::ZERO, 1_000)
                .await;
        let pulled = report.iter().any(|(k, st, _)| k == "cancel" && st == "done");
        let closed = report.iter().any(|(k, st, _)| k == "place" && st == "done");
        assert!(
            !pulled || closed,
            "the exit was pulled and the close was not sent: {report:#?}\nthe broker got: {sent:#?}"
        );
        let (_, _, said) = report.iter().find(|(k, _, _)| k == "cancel").expect("the cancel's row");
        assert!(said.contains("would pass their deadlines before"), "the cancel does not say why: {said}");
    }

    /// A re-size's cancel whose new order has less of its deadline left than the cancel may take (the bot's timeout,
    /// the read-back's 3 s, the timeout again for its last read, and its settle: 25 s here) is not sent: its new order would expire behind it, leaving no
    /// order at all. With more left, it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_re_sizes_cancel_whose_new_order_could_not_follow_in_time_is_not_sent() {
        let bodies = [
            r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#,
            r#"{"ticker":"MSFT","action":"buy","price":300}"#,
        ];
        let (dir, store, app, _, stored) = re_size_fixture("re-size-margin", bodies).await;
        let cancel = stored.iter().find(|r| r.kind == "cancel").expect("the re-size's cancel").clone();
        let left_of_deadline = |ms: i64| {
            rusqlite::Connection::open(dir.join("t.db"))
                .unwrap()
                .execute(
                    "UPDATE outbox SET deadline_ms = ?1 WHERE after_coid = ?2",
                    rusqlite::params![now_ms() + ms, cancel.client_order_id],
                )
                .unwrap()
        };
        assert_eq!(left_of_deadline(26_000), 1, "the re-size's new order");
        assert_eq!(made_way_for_nothing(&app, &cancel, "the cancel").await, None);
        left_of_deadline(24_000);
        let said = made_way_for_nothing(&app, &cancel, "the cancel").await;
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        let said = said.expect("not sent: its new order would expire before it could follow");
        assert!(said.contains("would pass their deadlines before"), "{said}");
    }

    /// A market OPEN LONG with `cancel: true` at an http bot (default timeout and settle: a cancel may take 25 s)
    /// holding two long entries and a short one, stored the moment it was received (60 s of its deadline left). The
    /// pull of the short entry makes three chained cancels (75 s by `cancel_takes`), more than the entry's whole 60 s:
    /// counted as only making way for the entry, the first cancel was never sent, and nothing was traded or pulled
    /// though the sender was answered processed. A pull of an entry is asked for itself, and goes; only the entry
    /// may expire. The control: the two long entries alone (two cancels, 50 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fresh_cancel_first_market_entrys_pulls_of_both_sides_are_sent_whatever_its_deadline() {
        use crate::store::Mark;
        // The control first: the two long entries alone (what the pull was before it took both sides).
        for (n, short_too) in [(0, false), (1, true)] {
            let (dir, store) = temp_store(&format!("pulls-budget-{n}"));
            let app = app_with_bots(&dir, &store, r#"{"tt": {"delivery": "http", "base_url": "http://127.0.0.1:9"}}"#);
            let mut v: serde_json::Value =
                serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
            v["order_type"] = serde_json::json!("market");
            v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                            "account_id": "5WT00001", "sizing": {"fixed_quantity": "10"}}]);
            let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
            let mut working = vec![
                paper_book_order("1001", "AAPL", "long", "entry", "150"),
                paper_book_order("1002", "AAPL", "long", "entry", "148"),
            ];
            if short_too {
                working.push(paper_book_order("2001", "AAPL", "short", "entry", "160"));
            }
            let book = BotState { working_orders: working, ..Default::default() };
            hold_book(&app, &s, book);
            let token = v["token_hash"].as_str().unwrap().to_owned();
            let body = r#"{"ticker":"AAPL","action":"OPEN","direction":"long","order_type":"market","cancel":true}"#;
            let at = now_ms();
            let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
            assert_eq!(out.decision, strategy_webhook::outcome::Decision::Processed, "{}", out.to_json());
            let rows = app.outbox_rows("demo-equities", &mut out, at);
            let mark = Mark { strategy: "demo-equities".into(), ts_ms: at, key: None };
            app.writer.outbox(mark, rows, None).await.unwrap();
            let stored = app.reader.open_rows("demo-equities", "tt", 10).unwrap();
            let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
            let want: &[&str] =
                if short_too { &["cancel", "cancel", "cancel", "place"] } else { &["cancel", "cancel", "place"] };
            assert_eq!(kinds, want);
            let said = made_way_for_nothing(&app, &stored[0], "the cancel").await;
            store.close().await.unwrap();
            std::fs::remove_dir_all(dir).unwrap();
            assert_eq!(said, None, "short entry too: {short_too}: the pull of an entry goes");
        }
    }

    /// The broker that changes an order's size in place, keeping its id (picked by what it does: the server names no
    /// broker), and trades crypto, as [`in_place_re_size_then_close`]'s loopback broker answers.
    fn in_place_broker() -> BrokerId {
        BrokerId::ALL
            .into_iter()
            .find(|b| {
                let b = b.broker();
                b.replace_keeps_id()
                    && b.replace_changes_quantity()
                    && b.offers(strategy_webhook::model::AssetClass::Crypto)
            })
            .expect("a crypto broker that re-sizes an order in place, keeping its id")
    }

    /// A MODIFY that shrank the position's exit in place (0.02 to 0.01), and a CLOSE decided before it was delivered
    /// (its cancel of the exit decided at the 0.02 that remained then): the edit goes out, then the cancel; the exit
    /// reads back cancelled, 0.01 in size, nothing filled. Measured as the decision's 0.02 remaining less the 0.01
    /// remaining now, 0.01 read as filled: the cancel failed and the close was held back, the exit gone and the
    /// position open, and the Logs reported a fill that never was.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_after_an_in_place_shrink_of_its_exit_is_not_held_back_by_a_fill_that_never_was() {
        let (report, sent) = in_place_re_size_then_close("inplace-shrink", "0.01", "0").await;
        assert!(
            report.iter().all(|(_, status, _)| status == "done"),
            "nothing filled, yet: {report:#?}\nthe broker got: {sent:#?}"
        );
    }

    /// The same with the exit grown in place (0.02 to 0.03 of the 0.03 position) and 0.01 of it filled after the
    /// edit: measured as 0.02 remaining at the decision less 0.02 remaining now, nothing read as filled, and the close
    /// sold the 0.03 decided while the position held 0.02.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_after_an_in_place_growth_of_its_exit_does_not_sell_what_the_exit_sold() {
        let (report, sent) = in_place_re_size_then_close("inplace-grow", "0.03", "0.01").await;
        let close_sent = sent.iter().any(|r| r.starts_with("POST /api/v3/brokerage/orders HTTP"));
        assert!(
            !close_sent,
            "0.01 of the exit filled after the decision (the position holds 0.02), yet the close of the whole 0.03 \
             went out: {report:#?}\nthe broker got: {sent:#?}"
        );
        let (kind, status, result) = &report[1];
        assert_eq!((kind.as_str(), status.as_str()), ("cancel", "failed"), "{report:#?}");
        assert!(result.contains("filled 0.01 before"), "{result}");
    }

    /// The exit (0.02 of a 0.03 position) of an [`in_place_broker`] bot re-sized in place to `size` by a MODIFY, then
    /// a CLOSE decided before the MODIFY was delivered; the broker takes the edit and the cancel, and reads the exit
    /// back cancelled at `size` with `filled` filled. Each row's kind, status and result, and what the broker got.
    async fn in_place_re_size_then_close(
        name: &str,
        size: &'static str,
        filled: &'static str,
    ) -> (Vec<(String, String, String)>, Vec<String>) {
        use crate::store::Mark;
        use tokio::io::AsyncWriteExt;
        const EXIT: &str = "6d90e8ba-946f-403a-9c43-e1e45b778763";
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let log = Arc::clone(&seen);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let log = Arc::clone(&log);
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    while let Some((first, body)) = next_request(&mut conn, &mut got).await {
                        log.lock().unwrap().push(format!("{first} {}", String::from_utf8_lossy(&body)));
                        let answer = if first.contains("/orders/edit") {
                            r#"{"success":true,"errors":[]}"#.to_owned()
                        } else if first.contains("/orders/batch_cancel") {
                            format!(
                                r#"{{"results":[{{"success":true,"failure_reason":"UNKNOWN_CANCEL_FAILURE_REASON","order_id":"{EXIT}"}}]}}"#
                            )
                        } else if first.contains("/orders/historical/") {
                            serde_json::json!({ "order": {
                                "order_id": EXIT, "product_id": "BTC-USD", "side": "SELL", "status": "CANCELLED",
                                "order_configuration": { "limit_limit_gtc": { "base_size": size, "limit_price": "98000" } },
                                "filled_size": filled, "cancel_message": "User requested cancel"
                            }})
                            .to_string()
                        } else if first.starts_with("POST") && first.contains("/orders ") {
                            r#"{"success":true,"success_response":{"order_id":"11111111-2222-4333-8444-555555555555"}}"#
                                .to_owned()
                        } else {
                            "{}".to_owned()
                        };
                        let status = if answer == "{}" { "404 Not Found" } else { "200 OK" };
                        let reply = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{answer}",
                            answer.len()
                        );
                        if conn.write_all(reply.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let (dir, store) = temp_store(name);
        let file = format!(r#"{{"cb": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["asset_class"] = serde_json::json!("crypto");
        v["duration"] = serde_json::json!("gtc");
        v["order_type"] = serde_json::json!("limit");
        v["allowed_instruments"] = serde_json::json!(["BTC/USD"]);
        v["market"] =
            serde_json::json!({ "quotes": { "BTC/USD": { "bid": "97990", "ask": "98010", "last": "98000" } } });
        v["bots"] = serde_json::json!([{"id": "cb", "broker": in_place_broker().as_str(), "account_id": "ACC1",
                                        "sizing": {"fixed_quantity": "0.02"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let mut exit = paper_book_order(EXIT, "BTC/USD", "long", "exit", "98000");
        (exit.quantity, exit.duration) = ("0.02".parse().unwrap(), "gtc".into());
        let mut held = held_long("BTC/USD", 0);
        held.quantity = "0.03".parse().unwrap();
        let before = BotState { positions: vec![held], working_orders: vec![exit], ..Default::default() };
        hold_book(&app, &s, before);
        let token = v["token_hash"].as_str().unwrap().to_owned();
        // Both decided before anything is delivered: the MODIFY of the exit's size, then the CLOSE.
        let base = now_ms();
        let bodies = [
            format!(r#"{{"ticker":"BTC/USD","action":"MODIFY","direction":"long","quantity":{size}}}"#),
            r#"{"ticker":"BTC/USD","action":"CLOSE","direction":"long"}"#.to_owned(),
        ];
        for (n, body) in bodies.into_iter().enumerate() {
            let at = base + n as i64;
            let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
            assert_eq!(out.decision, strategy_webhook::outcome::Decision::Processed, "{}", out.to_json());
            let rows = app.outbox_rows("demo-equities", &mut out, at);
            app.writer
                .outbox(Mark { strategy: "demo-equities".into(), ts_ms: at, key: None }, rows, None)
                .await
                .unwrap();
        }
        let stored = app.reader.open_rows("demo-equities", "cb", 10).unwrap();
        let kinds: Vec<&str> = stored.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["replace", "cancel", "place"], "{stored:?}");
        app.dispatcher.wake(&app, "demo-equities", "cb");
        let until = std::time::Instant::now() + Duration::from_secs(30);
        while !app.reader.open_rows("demo-equities", "cb", 10).unwrap().is_empty() {
            assert!(std::time::Instant::now() < until, "the outbox did not drain");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(app.dispatcher.stop(Duration::from_secs(2)).await);
        let rows = app.reader.strategy_outbox("demo-equities", 10).unwrap();
        let report = rows
            .iter()
            .rev()
            .map(|(r, res)| (r.kind.clone(), r.status.clone(), res.clone().unwrap_or_default()))
            .collect();
        let sent = seen.lock().unwrap().clone();
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        (report, sent)
    }

    /// The broker that changes an order's price in place, keeping its id, and re-sizes by a cancel and a new order
    /// (picked by what it does: the server names no broker).
    fn replace_in_place_broker() -> BrokerId {
        BrokerId::ALL
            .into_iter()
            .find(|b| b.broker().replace_keeps_id() && !b.broker().replace_changes_quantity())
            .expect("a broker that replaces in place and re-sizes by cancel and place")
    }

    /// Each processed alert's commit ran in a task of its own, and those tasks raced to the writer's queue: a
    /// later alert's rows could get lower ids than an earlier one's, and the dispatcher, sending oldest first by
    /// id, sent them first. Here 300 MODIFYs of one working order, each re-pricing it, are decided in turn and
    /// handed off, the first 200 on a thread of their own (as the decision pool's), the rest on an async task (as
    /// a short body decided on the worker that read it); their rows must be stored in their alerts' order, or the
    /// broker ends with an older price than the sender's last.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn alerts_decided_in_turn_are_stored_in_turn() {
        let (dir, store) = temp_store("hand-off-order");
        // A broker nobody listens at: the rows stay open (not reached, retried), so their order can be read.
        let file = r#"{"tt": {"delivery": "http", "base_url": "http://127.0.0.1:9"}}"#;
        let bots = crate::bots::Bots::from_json(file.as_bytes(), &dir).unwrap();
        // A rate limit that lets 300 alerts through (the default's 60 a minute makes the race rarer, not absent).
        let limits = strategy_webhook::state::Limits { rate_limit: 1000, ..Default::default() };
        let app = App::new(
            strategy_webhook::Engine::with_limits(limits),
            store.writer(),
            store.reader(),
            (HashMap::new(), HashMap::new()),
            "https://x".into(),
            "t".into(),
        );
        let app = Arc::new(app.with_bots(bots));
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["bots"] = serde_json::json!([{"id": "tt", "broker": replace_in_place_broker().as_str(), "account_id": "TR1",
                                        "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let entry = paper_book_order("1001", "AAPL", "long", "entry", "150");
        let before = BotState { working_orders: vec![entry], ..Default::default() };
        hold_book(&app, &s, before);
        let token = v["token_hash"].as_str().unwrap().to_owned();
        let base = now_ms();
        let decide = move |app: &Arc<App>, rt: &tokio::runtime::Handle, i: i64| {
            let at = base + i;
            let body = format!(r#"{{"ticker":"AAPL","action":"MODIFY","direction":"long","price":{}.25}}"#, 151 + i);
            let out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
            assert_eq!(out.decision, strategy_webhook::outcome::Decision::Processed, "{}", out.to_json());
            app.begin_hand_off(rt, out, at, at)
        };
        let rt = tokio::runtime::Handle::current();
        let (deciding, on_pool) = (Arc::clone(&app), decide.clone());
        let mut commits =
            tokio::task::spawn_blocking(move || (0..200i64).map(|i| on_pool(&deciding, &rt, i)).collect::<Vec<_>>())
                .await
                .unwrap();
        // The first 200 still committing: these race them to the writer.
        let rt = tokio::runtime::Handle::current();
        commits.extend((200..300i64).map(|i| decide(&app, &rt, i)));
        for c in commits {
            c.await.unwrap().unwrap();
        }
        let rows = app.reader.open_rows("demo-equities", "tt", 1000).unwrap();
        assert_eq!(rows.len(), 300);
        let by_id: Vec<i64> = rows.iter().map(|r| r.created_ms).collect();
        let mut in_turn = by_id.clone();
        in_turn.sort_unstable();
        let first_out_of_turn = by_id.windows(2).position(|w| w[0] > w[1]);
        // The replace sent last (the price the order is left at, the broker keeping its id) is the last alert's.
        let last_sent = stored_order(rows.last().unwrap()).and_then(|o| o.limit_price).map(|p| p.to_string());
        assert_eq!(
            first_out_of_turn,
            None,
            "the outbox (oldest first, as the dispatcher sends) holds the alerts out of their order: {:?}; the \
             order is left at {last_sent:?}, the last alert said 450.25",
            by_id.iter().map(|t| t - in_turn[0]).collect::<Vec<_>>()
        );
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Shared body of the two tests below: a CLOSE of a long AAPL 10 held with the given working exits, at a
    /// broker answering cancels after `delete_delay` and reads after `get_delay`, the bot's timeout `timeout_ms`
    /// (settle left at its default), the close's deadline set to `left_ms` from now. Returns what each row came to
    /// (kind, status, result) and what the broker got.
    async fn close_behind_cancels(
        name: &str,
        exits: &[&str],
        timeout_ms: u64,
        delete_delay: Duration,
        get_delay: Duration,
        left_ms: i64,
    ) -> (Vec<(String, String, String)>, Vec<String>) {
        use crate::store::Mark;
        let (port, seen, book) =
            re_sizing_broker_answering_reads_after(0, Duration::ZERO, delete_delay, get_delay).await;
        if !exits.is_empty() {
            book.lock().unwrap().remove("1001");
        }
        for id in exits {
            book.lock().unwrap().insert((*id).to_owned(), (5, "Live"));
        }
        let (dir, store) = temp_store(name);
        let file = format!(
            r#"{{"tt": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}", "timeout_ms": {timeout_ms}}}}}"#
        );
        let app = app_with_bots(&dir, &store, &file);
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["bots"] = serde_json::json!([{"id": "tt", "broker": cancel_and_place_broker().as_str(),
                                        "account_id": "5WT00001", "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let exit = |id: &str, order_type: &str, price: &str, quantity: &str| crate::paper::OrderRec {
            id: id.into(),
            instrument: "AAPL".into(),
            direction: "long".into(),
            intent: "exit".into(),
            order_type: order_type.into(),
            price: Some(price.parse().unwrap()),
            quantity: quantity.parse().unwrap(),
            size_known: true,
            notional: None,
            filled: Default::default(),
            duration: "day".into(),
            state: "open".into(),
            legs: Vec::new(),
        };
        let mut working = Vec::new();
        if exits.is_empty() {
            working.push(exit("1001", "limit", "180", "10"));
        } else {
            working.push(exit(exits[0], "limit", "180", "5"));
            for id in &exits[1..] {
                working.push(exit(id, "limit", "190", "5"));
            }
        }
        let before = BotState { positions: vec![held_long("AAPL", 10)], working_orders: working, ..Default::default() };
        hold_book(&app, &s, before);
        let token = v["token_hash"].as_str().unwrap().to_owned();
        let at = now_ms();
        let body = r#"{"ticker":"AAPL","action":"CLOSE","direction":"long"}"#;
        let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
        let mut rows = app.outbox_rows("demo-equities", &mut out, at);
        for r in rows.iter_mut().filter(|r| r.deadline_ms.is_some()) {
            r.deadline_ms = Some(now_ms() + left_ms);
        }
        app.writer.outbox(Mark { strategy: "demo-equities".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        let kinds: Vec<String> =
            app.reader.open_rows("demo-equities", "tt", 10).unwrap().iter().map(|r| r.kind.clone()).collect();
        assert!(kinds.iter().filter(|k| *k == "cancel").count() == exits.len().max(1), "{kinds:?}");
        app.dispatcher.wake(&app, "demo-equities", "tt");
        let until = std::time::Instant::now() + Duration::from_secs(90);
        while !app.reader.open_rows("demo-equities", "tt", 10).unwrap().is_empty() {
            assert!(std::time::Instant::now() < until, "the outbox did not drain");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = app.writer.barrier().await;
        let report: Vec<(String, String, String)> = app
            .reader
            .strategy_outbox("demo-equities", 10)
            .unwrap()
            .iter()
            .rev()
            .map(|(r, res)| (r.kind.clone(), r.status.clone(), res.clone().unwrap_or_default()))
            .collect();
        let sent = seen.lock().unwrap().clone();
        let _ = std::fs::remove_dir_all(dir);
        (report, sent)
    }

    /// The cancel's read-back keeps the bot's whole timeout for each read (`Reads::BotTimeout`), and
    /// `cancel_takes` counted only the settle for its last one. A broker answering within the timeout but slowly (7.5 s of an 8 s
    /// timeout, as after an outage) takes 15 s for the cancel and its read-back, against a budget of 13 s (8 + 3 + 2):
    /// with 13.5 s of the close's deadline left the cancel goes out, pulls the exit, and the close expires behind it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_read_back_is_counted_in_what_a_cancel_may_take() {
        let (report, sent) = close_behind_cancels(
            "slow-read-back",
            &[],
            8_000,
            Duration::from_millis(7_500),
            Duration::from_millis(7_500),
            13_500,
        )
        .await;
        let pulled = report.iter().any(|(k, st, _)| k == "cancel" && st == "done");
        let closed = report.iter().any(|(k, st, _)| k == "place" && st == "done");
        assert!(
            !pulled || closed,
            "the exit was pulled and the close was not sent: {report:#?}\nthe broker got: {sent:#?}"
        );
    }

    /// A CLOSE pulling two exits (cancel, cancel, close): the first cancel is judged against one cancel's
    /// budget (10 s here: 5 + 3 + 2) although the close waits for two. With 12 s left it goes out and pulls one exit;
    /// by the second cancel's turn less than its budget is left, so that one is not sent and the close behind it is
    /// held back: the position keeps one exit less and is not closed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_close_behind_two_cancels_is_judged_for_both() {
        let (report, sent) = close_behind_cancels(
            "two-cancels",
            &["1001", "1009"],
            5_000,
            Duration::from_millis(2_500),
            Duration::ZERO,
            12_000,
        )
        .await;
        let kinds: Vec<&str> = report.iter().map(|(k, _, _)| k.as_str()).collect();
        assert_eq!(kinds, ["cancel", "cancel", "place"], "{report:#?}");
        let pulled = report.iter().any(|(k, st, _)| k == "cancel" && st == "done");
        let closed = report.iter().any(|(k, st, _)| k == "place" && st == "done");
        assert!(
            !pulled || closed,
            "an exit was pulled and the close was not sent: {report:#?}\nthe broker got: {sent:#?}"
        );
        assert!(report[0].2.contains("the 2 cancels they wait for"), "{report:#?}");
    }

    /// A re-size stored by the run before this one, at a broker whose replace is a new order under the row's client
    /// order id (rows there are never marked `sending`: a repeat is refused), so that run may have sent it. At the
    /// restart the order it changes cannot be read back (every request is answered 400): the row fails, and says
    /// that an earlier attempt may have replaced the order. Told only "not sent", a trader re-sized by hand a change
    /// that may have gone through.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_earlier_runs_re_size_that_cannot_read_its_order_says_it_may_have_gone() {
        use crate::store::Mark;
        let (port, _) = refusing_broker().await;
        let (dir, store) = temp_store("earlier-resize");
        let file = format!(r#"{{"tt": {{"delivery": "http", "base_url": "http://127.0.0.1:{port}"}}}}"#);
        let app = app_with_bots(&dir, &store, &file);
        let broker = BrokerId::ALL
            .into_iter()
            .find(|b| {
                let b = b.broker();
                !b.replace_keeps_id() && b.replace_changes_quantity() && b.accepts_client_order_id()
            })
            .expect("a broker whose replace is a new order of the size it states, under our client order id");
        let mut v: serde_json::Value = serde_json::from_slice(include_bytes!("../../strategies/demo.json")).unwrap();
        v["order_type"] = serde_json::json!("limit");
        v["bots"] = serde_json::json!([{"id": "tt", "broker": broker.as_str(), "account_id": "PA1",
                                        "sizing": {"fixed_quantity": "10"}}]);
        let s = strategy_webhook::Strategy::from_json(v.to_string().as_bytes()).unwrap();
        let entry = paper_book_order("1001", "AAPL", "long", "entry", "150");
        hold_book(&app, &s, BotState { working_orders: vec![entry], ..Default::default() });
        let start = started_ms();
        let token = v["token_hash"].as_str().unwrap().to_owned();
        let at = now_ms();
        let body = r#"{"ticker":"AAPL","action":"MODIFY","direction":"long","quantity":20}"#;
        let mut out = app.engine.deliver(token.as_bytes(), body.as_bytes(), Some("application/json"), at);
        let rows = app.outbox_rows("demo-equities", &mut out, at);
        app.writer.outbox(Mark { strategy: "demo-equities".into(), ts_ms: at, key: None }, rows, None).await.unwrap();
        let mut row = app.reader.open_rows("demo-equities", "tt", 10).unwrap().remove(0);
        assert_eq!(row.kind, "replace", "{row:?}");
        // Stored by the run before this one, a second before it started, still within its deadline.
        row.created_ms = start - 1_000;
        row.deadline_ms = Some(start + 3_600_000);
        assert!(may_have_gone(&app, &row, RequestKind::Replace));
        let lease = app.leases.take("demo-equities", "tt").await.unwrap().unwrap();
        let d = deliver(&app, &lease, row).await.unwrap();
        store.close().await.unwrap();
        std::fs::remove_dir_all(dir).unwrap();
        assert!(d.result.contains("could not be read back"), "{}", d.result);
        assert!(d.result.contains("an earlier attempt"), "it may have been sent, yet it reads: {}", d.result);
    }

    /// A CLOSE's cancel of the position's exit failed, and the CLOSE behind it was held back failed; a later alert
    /// opened the instrument again. The CLOSE's retry is refused as superseded, so it can never go; the cancel,
    /// re-queued alone (an operator, or any way the API let it through), pulled the exit for nothing and left the
    /// position open without it. It is not sent, and names the later row; before that alert, it is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_requeued_cancel_whose_close_was_superseded_is_not_sent() {
        use crate::store::Mark;
        let (dir, store, app) = crate::app::tests::temp_app("dispatch-superseded-close");
        let created = now_ms() - 5_000;
        let order = |intent: &str| {
            format!(
                r#"{{"asset_class":"equity","symbol":"AAPL","intent":"{intent}","quantity":10,"order_type":"market",
                    "duration":"day","legs":[],"client_order_id":"swh-x","reference_price":150}}"#
            )
        };
        let row = |kind: &str, coid: &str, after: Option<&str>, intent: &str, created_ms: i64| OutboxRow {
            id: 0,
            strategy: "s".into(),
            bot: "b".into(),
            broker: "paper".into(),
            kind: kind.into(),
            client_order_id: coid.into(),
            order_id: (kind == "cancel").then(|| "x1".to_owned()),
            keeps_order_id: None,
            after: after.map(str::to_owned),
            method: "POST".into(),
            path: "/orders".into(),
            content_type: None,
            body: Vec::new(),
            meaning: Some(order(intent)),
            status: "pending".into(),
            created_ms,
            deadline_ms: (kind != "cancel").then_some(created_ms + 600_000),
            target: Some("paper".into()),
            retried: false,
            alert_log: None,
        };
        let mark = |t: i64| Mark { strategy: "s".into(), ts_ms: t, key: None };
        let alert = vec![
            row("cancel", "c1", None, "close_long", created),
            row("place", "close", Some("c1"), "close_long", created),
        ];
        store.writer().outbox(mark(created), alert, None).await.unwrap();
        let db = rusqlite::Connection::open(dir.join("t.db")).unwrap();
        db.execute("UPDATE outbox SET status = 'failed'", []).unwrap();
        let cancel_id: i64 =
            db.query_row("SELECT id FROM outbox WHERE client_order_id = 'c1'", [], |r| r.get(0)).unwrap();
        app.writer.requeue(cancel_id).await.unwrap();
        let cancel = app.reader.open_rows("s", "b", 10).unwrap().into_iter().find(|r| r.id == cancel_id).unwrap();
        assert_eq!(made_way_for_nothing(&app, &cancel, "the cancel").await, None, "nothing has superseded the close");
        let later = vec![row("place", "open", None, "open_long", created + 1_000)];
        store.writer().outbox(mark(created + 1_000), later, None).await.unwrap();
        db.execute("UPDATE outbox SET status = 'done' WHERE client_order_id = 'open'", []).unwrap();
        let open_id: i64 =
            db.query_row("SELECT id FROM outbox WHERE client_order_id = 'open'", [], |r| r.get(0)).unwrap();
        let said = made_way_for_nothing(&app, &cancel, "the cancel").await;
        drop(db);
        store.close().await.unwrap();
        let _ = std::fs::remove_dir_all(dir);
        let said = said.expect("the close it made way for can never go: not sent");
        assert!(said.contains(&format!("row {open_id} (an order), has gone since")), "{said}");
    }
}
